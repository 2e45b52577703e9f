-- bench_colred.lua — column reductions and broadcast reads in row kernels (bench/NOTES.md,
-- "Column reductions"): layernorm forward, layernorm forward+backward, x:sum(1) of a (4096, 1024)
-- f32 tensor and a Linear's bias gradient (g:sum(1) of g = dy * relu'(h), one fused kernel); then
-- BatchNorm2d's training forward on a (64, 32, 16, 16) NCHW tensor and a mean over its (N, H, W),
-- mixed reductions (bench/NOTES.md "Mixed reductions").
-- Run: ST_DEVICE=cpu build/stitch bench/bench_colred.lua [reps]
-- Prints per case the median ms over the timed runs (two warm-up runs, compiled kernels; a full
-- garbage collection before each run, so outputs reuse freed buffers instead of page-faulting
-- fresh ones) and the GB/s of the minimal bytes (inputs read once, outputs written once).
local reps = tonumber(arg[1]) or 20
local now, F = st._now, st.nn.functional
local R, C = 4096, 1024

local function input(shape, seed)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local i = st.arange(n)
  return st.sync((((i * 7919 + seed * 104729) % 10007):float() / 10007.0 - 0.5):reshape(shape))
end

local function bench(name, bytes, iter)
  iter()
  iter()
  local t = {}
  for k = 1, reps do
    collectgarbage()   -- outputs of the last run back to the allocator: no fresh pages
    local a = now()
    iter()
    t[k] = (now() - a) * 1e3
  end
  table.sort(t)
  local med = t[(reps + 1) // 2]
  print(string.format("%-22s %8.3f ms median (best %.3f)  %6.1f GB/s", name, med, t[1], bytes / med / 1e6))
end

local x, dy, h = input({R, C}, 1), input({R, C}, 4), input({R, C}, 5)
local w, b = input({C}, 2) * 0.4 + 1, input({C}, 3)
st.sync(w, b)
local MB = R * C * 4

bench("layernorm fwd", 2 * MB, function()
  local y <close> = F.layer_norm(x, {C}, w, b)
  st.sync(y)
end)

local xg = x:detach():requires_grad_()
local wg, bg = w:detach():requires_grad_(), b:detach():requires_grad_()
bench("layernorm fwd+bwd", 4 * MB, function()
  xg.grad, wg.grad, bg.grad = nil, nil, nil
  local y = F.layer_norm(xg, {C}, wg, bg)
  y:backward(dy)
  st.sync(y, xg.grad, wg.grad, bg.grad)
end)

bench("x:sum(1)", MB, function()
  local s <close> = x:sum(1)
  st.sync(s)
end)

bench("bias grad (relu')", 2 * MB, function()
  local g <close> = (dy * (h:gt(0)):float()):sum(1)
  st.sync(g)
end)

local xb = input({64, 32, 16, 16}, 6)
local wb, bb = input({32}, 7) * 0.4 + 1, input({32}, 8)
st.sync(wb, bb)
local MBB = 64 * 32 * 16 * 16 * 4
bench("batchnorm2d fwd", 2 * MBB, function()
  local y <close> = F.batch_norm(xb, nil, nil, wb, bb, {training = true})
  st.sync(y)
end)

bench("mean over (N,H,W)", MBB, function()
  local s <close> = xb:mean({1, 3, 4})
  st.sync(s)
end)
