-- ncu_cases.lua — one launch of each memory-bound GPU kernel that bench/NOTES.md finds short of
-- its goal, for Nsight Compute (tests/gpu/lease.sh, NCU=seconds): softmax over rows of 4096,
-- layernorm forward over rows of 1024, the 9-op elementwise chain. Each is realized twice (the
-- first call compiles), then the device is waited for.
local F = st.nn.functional
local x = st.randn({32768, 4096})
local x1 = st.randn({32768, 1024})
local w, b = st.randn({1024}), st.randn({1024})
local a, c = st.randn({64 * 1024 * 1024}), st.randn({64 * 1024 * 1024})
st.sync(x, x1, w, b, a, c)
local cases = {
  softmax = function() return st.softmax(x, 2) end,
  layernorm = function() return F.layer_norm(x1, {1024}, w, b) end,
  chain = function() return (a * 1.5 + c):sigmoid() * c:tanh() - (-(a * a)):exp() end,
}
for _, name in ipairs({"softmax", "layernorm", "chain"}) do
  for _ = 1, 2 do
    local y = cases[name]()
    st.sync(y)
    y:sum():item()   -- waits for the device
  end
  print("ncu case " .. name .. " done")
end
