-- test_device.lua — devices from Lua: st.device, st.set_device, x:to(device), x:cuda(), x:cpu(),
-- Module:to(device), st.empty_cache and the device fields of st.stats. Runs on the CPU (tests/run.sh
-- sets ST_DEVICE=cpu); on a GPU machine tests/gpu/run.sh runs it with ST_DEVICE=cuda.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, check = H.test, H.check_near
local gpu = st.cuda_device_count() > 0

test("default_device_and_names", function()
  local d = st.device()
  assert(d == "cpu" or d:match("^cuda:%d+$"), d)
  local x = st.tensor({1, 2, 3})
  assert(x:device() == d, x:device())
  H.raises(function() return x:to("tpu") end, "unknown")   -- not a dtype either
  H.raises(function() st.set_device("cuda:") end, "unknown device")
  local c = x:cpu()
  assert(c:device() == "cpu")
  if d == "cpu" then assert(rawequal(c, x), "x:cpu() of a cpu tensor is x itself") end
  check(c, {1, 2, 3})
end)

local cpu_only_test = gpu and function(name) print("# skip " .. name .. " (a GPU is present)") end or test
local gpu_test = gpu and test or function(name) print("# skip " .. name .. " (no GPU)") end

cpu_only_test("cuda_without_a_gpu_is_a_clear_error", function()
  local x = st.ones(3)
  local err = H.raises(function() return x:cuda() end, "cuda:0 is not available")
  assert(err:find("driver", 1, true) or err:find("GPU", 1, true), err)
  H.raises(function() st.set_device("cuda") end, "not available")
  assert(st.device() == "cpu")
  check(x + 1, {2, 2, 2}, 0, "runtime usable after the error")
end)

gpu_test("round_trip_and_mixing", function()
  local x = st.randn(64, 33):cpu()   -- bound to the cpu (an unbound random tensor is computed wherever it is used)
  local g = x:cuda()
  assert(g:device() == "cuda:0")
  check(g:cpu(), x:cpu():tolist(), 0)
  check((g * 2 + 1):softmax(2):cpu(), (x:cpu() * 2 + 1):softmax(2):tolist(), 1e-6)
  H.raises(function() return g + x:cpu() end, "same device")
end)

-- A tensor on a device other than the default keeps it when an unbound value (a fill, an arange)
-- is written into it or read by an op: x:fill_(v) and x:copy_(st.zeros(...)) used to move x to
-- the default device, and in eager mode every fill was computed on the default device at once,
-- so x + st.zeros(...), x:tril(), x:cumsum(1) failed with "expected all tensors on the same
-- device" (found by test_fuzz_ops.lua on the simulated GPU: its reference runs on the CPU).
gpu_test("unbound_values_follow_a_non_default_device", function()
  local other = st.device() == "cpu" and "cuda:0" or "cpu"
  local was = st.eager()
  for _, eager in ipairs({ false, true }) do
    st.eager(eager)
    local x = st.ones(2, 3):to(other)
    x:fill_(2)
    assert(x:device() == other, "fill_ moved x to " .. x:device())
    check(x:cpu(), { { 2, 2, 2 }, { 2, 2, 2 } }, 0)
    x:copy_(st.full({ 2, 3 }, 3))
    assert(x:device() == other, "copy_ of a fill moved x to " .. x:device())
    x:zero_()
    assert(x:device() == other, "zero_ moved x to " .. x:device())
    local y = (x + st.arange(3)):to(other)
    check((y + st.zeros(2, 3)):cpu(), { { 0, 1, 2 }, { 0, 1, 2 } }, 0, "eager " .. tostring(eager))
    check(y:tril():cpu(), { { 0, 0, 0 }, { 0, 1, 0 } }, 0)
    check(y:cumsum(2):cpu(), { { 0, 1, 3 }, { 0, 1, 3 } }, 0)
    assert(y:cumsum(2):device() == other)
  end
  st.eager(was)
end)

-- The gradient of a leaf on a device other than the default is on the leaf's device, in lazy and
-- eager mode. The implicit gradient (ones) was unbound, so a gradient made only from it and weak
-- scalars ((x * 2):sum()) went to the default device; the adjoint of a strided view wrote g into
-- unbound zeros with copy_, which moved g to the default device (a flush there, then "expected
-- all tensors on the same device" in the blocked cumsum's and cumprod's backward). Found by
-- test_fuzz_ops.lua on the simulated GPU.
gpu_test("gradients_follow_the_leaf", function()
  local other = st.device() == "cpu" and "cuda:0" or "cpu"
  local was = st.eager()
  local cases = {
    { "x * 2", function(x) return x * 2 end },
    { "narrow of a reshape of a where", function(x)
      return st.where(st.arange(16):lt(8), x:reshape(3, 16), 0):reshape(1, 48):narrow(-1, 1, 33) end },
    { "blocked cumsum", function(x) return x:cumsum(2) end },
    { "blocked cumprod", function(x) return (x * 0.01 + 1):cumprod(2) end },
    { "no path (zeros)", function(x) return x:narrow(2, 1, 0):sum() + 1 end },
  }
  for _, eager in ipairs({ false, true }) do
    st.eager(eager)
    for _, c in ipairs(cases) do
      local x = st.ones(1, 48, "f64"):to(other):requires_grad_(true)
      c[2](x):sum():backward()
      local what = c[1] .. (eager and " (eager)" or "")
      assert(x.grad, what .. ": no gradient")
      assert(x.grad:device() == other, what .. ": the gradient is on " .. x.grad:device())
      st.sync(x.grad)
      assert(x.grad:device() == other, what .. ": realized on " .. x.grad:device())
      local g <close> = st.no_grad()
      x:add_(x.grad)   -- an optimizer's step: both on one device
    end
  end
  st.eager(was)
end)

-- An index given as a Lua table is made on the indexed tensor's device (it was made on the default
-- device: "gather: expected all tensors on the same device"; found by test_fuzz_ops.lua on the
-- simulated GPU).
gpu_test("table_indices_follow_the_tensor", function()
  local other = st.device() == "cpu" and "cuda:0" or "cpu"
  local x = st.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }):to(other)
  local r = x:index_select(1, { 3, 1 })
  assert(r:device() == other, r:device())
  check(r:cpu(), { { 5, 6 }, { 1, 2 } }, 0)
  check(x:gather(2, { { 2 }, { 1 }, { 2 } }):cpu(), { { 2 }, { 3 }, { 6 } }, 0)
  check(x:index_add(1, { 1, 1 }, st.ones(2, 2):to(other)):cpu(), { { 3, 4 }, { 3, 4 }, { 5, 6 } }, 0)
  check(x:scatter_add(1, { { 3, 1 } }, st.ones(1, 2):to(other)):cpu(), { { 1, 3 }, { 3, 4 }, { 6, 6 } }, 0)
  check(x:scatter(1, { { 3, 1 } }, 0):cpu(), { { 1, 0 }, { 3, 4 }, { 0, 6 } }, 0)
end)

test("module_to_and_stats", function()
  local m = st.nn.Linear(4, 3)
  assert(m:to("cpu") == m and m.weight:device() == "cpu")
  if gpu then
    m:cuda()
    assert(m.weight:device() == "cuda:0" and m.weight.requires_grad)
    local y = m(st.randn(2, 4):cuda()):sum()
    y:backward()
    assert(m.weight.grad:device() == "cuda:0")
  else
    H.raises(function() m:to("cuda") end, "not available")
  end
  local s = st.stats()
  assert(s.device_bytes_in_use >= 0 and s.device_bytes_reserved >= s.device_bytes_in_use, "device fields")
  st.empty_cache()
  if not gpu then assert(st.stats().device_bytes_reserved == 0) end
end)

H.done()
