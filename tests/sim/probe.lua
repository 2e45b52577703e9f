-- probe.lua — a few kernels of each template on the simulated GPU against the CPU (tests/sim/mutate.sh).
local function cmp(name, a, b, tol)
  local d = (a:cpu():to("f32") - b:cpu():to("f32")):abs():max():item()
  if not (d <= tol) then error(name .. ": max difference " .. tostring(d)) end
  print("ok " .. name .. " " .. d)
end
local x = st.randn(8, 3000):cpu()
local g = x:cuda()
cmp("softmax_long_rows", g:softmax(2), x:softmax(2), 1e-6)
cmp("sum_long_rows", g:sum(2), x:sum(2), 1e-3)
local y = st.randn(50, 20):cpu()
cmp("softmax_short_rows", y:cuda():softmax(2), y:softmax(2), 1e-6)
cmp("pointwise", (y:cuda() * 2 + 1):exp(), (y * 2 + 1):exp(), 1e-5)
local a = st.randn(70, 48):cpu():to("f16"); local b = st.randn(48, 90):cpu():to("f16")
cmp("matmul_f16_mma", a:cuda():matmul(b:cuda()), a:to("f32"):matmul(b:to("f32")), 0.05)
local a2 = st.randn(3, 37, 50):cpu(); local b2 = st.randn(3, 50, 21):cpu()
cmp("bmm_f32", a2:cuda():matmul(b2:cuda()), a2:matmul(b2), 1e-4)
