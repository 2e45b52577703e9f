-- test_epilogue.lua — matmul epilogues from Lua (docs/fusion.md "matmul"): F.gelu(nn.Linear(x)) is
-- one kernel with the interpreter's values, and a training step (nn.Linear + gelu, forward and
-- backward realized in one flush: the pre-activation is then written next to the activation by
-- the same kernel) gives the gradients of eager mode (ST_EAGER=1).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check = H.test, H.eq, H.check_near
local nn = st.nn
local F = nn.functional

-- fn() computed eagerly (the reference interpreter) and lazily; returns both as Lua tables and
-- the kernels the lazy realize launched.
local function both(fn)
  local was = st.eager()
  st.eager(true)
  local ref = fn()
  st.eager(was)
  local out = fn()
  local k0 = st.stats().kernels_launched
  st.realize(out)
  local kernels = st.stats().kernels_launched - k0
  local r, o = {}, {}
  for i = 1, #out do r[i], o[i] = ref[i]:tolist(), out[i]:tolist() end
  return o, r, kernels
end

local function leaf(t) t:realize() return t end

test("linear_gelu_is_one_kernel", function()
  st.manual_seed(7)
  local lin = nn.Linear(48, 40)
  local x = leaf(st.randn({33, 48}))
  for _, p in ipairs(lin:parameters()) do p:realize() end
  local o, r, kernels = both(function() return {F.gelu(lin(x))} end)
  check(o[1], r[1], 0, "gelu(linear(x))")
  if not st.eager() then eq(kernels, 1, "kernels") end
  -- batched input, residual: gelu(linear(x)) + x in one kernel too
  local lin2 = nn.Linear(48, 48)
  for _, p in ipairs(lin2:parameters()) do p:realize() end
  local xb = leaf(st.randn({2, 5, 48}))
  o, r, kernels = both(function() return {F.gelu(lin2(xb)) + xb} end)
  check(o[1], r[1], 0, "gelu(linear(x)) + x")
  if not st.eager() then eq(kernels, 1, "kernels (batched, residual)") end
  -- the pre-activation kept by a handle and the activation: two outputs of one kernel
  o, r, kernels = both(function() local h = lin(x) return {h, F.gelu(h)} end)
  check(o[1], r[1], 0, "linear(x)")
  check(o[2], r[2], 0, "gelu(linear(x))")
  if not st.eager() then eq(kernels, 1, "kernels (pre-activation and activation)") end
end)

test("training_step_gradients_match_eager", function()
  st.manual_seed(11)
  local lin = nn.Linear(64, 32)
  local x = leaf(st.randn({24, 64}))
  local y = leaf(st.randn({24, 32}))
  for _, p in ipairs(lin:parameters()) do p:realize(); p:requires_grad_() end
  local function step()
    lin.weight.grad, lin.bias.grad = nil, nil
    local h = lin(x)
    local loss = ((F.gelu(h) - y) ^ 2):mean()
    loss:backward()
    return {loss, lin.weight.grad, lin.bias.grad}
  end
  local o, r = both(step)
  check(o[1], r[1], 1e-5, "loss")
  check(o[2], r[2], 1e-5, "weight grad")
  check(o[3], r[3], 1e-5, "bias grad")
end)

H.done()
