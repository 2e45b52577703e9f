-- test_autograd.lua — the Lua autograd API: requires_grad_, .requires_grad, .grad, .is_leaf,
-- backward (with and without a gradient), detach, st.no_grad (a <close> guard and a function
-- wrapper, both restoring grad mode on errors), st.enable_grad, st.is_grad_enabled, st.grad(f),
-- and errors raised as Lua errors naming the shapes. The numerical checks of every op are in
-- tests/test_autograd.c; here a few values are checked by hand and st.grad once against finite
-- differences.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check = H.test, H.eq, H.check_near

test("requires_grad_flag", function()
  local x = st.tensor{1, 2, 3}
  eq(x.requires_grad, false, "fresh tensor")
  eq(x:requires_grad_(), x, "requires_grad_ returns x")
  eq(x.requires_grad, true)
  eq(x.is_leaf, true)
  x:requires_grad_(false)
  eq(x.requires_grad, false)
  x.requires_grad = true
  eq(x.requires_grad, true)
  x.requires_grad = false
  eq(x.requires_grad, false)
  local i = st.tensor({1, 2}, "i64")
  H.raises(function() i:requires_grad_() end, "requires_grad")
  H.raises(function() i.requires_grad = true end, "requires_grad")
  eq(i.requires_grad, false)
end)

test("is_leaf", function()
  local x = st.tensor{1, 2}:requires_grad_()
  local y = x * 2
  eq(y.requires_grad, true); eq(y.is_leaf, false)
  local p = st.tensor{1, 2}
  eq(p.is_leaf, true); eq((p * 2).is_leaf, true); eq((p * 2).requires_grad, false)
  -- a computed tensor's flag cannot be turned off
  H.raises(function() y.requires_grad = false end, "requires_grad")
end)

test("backward_and_grad", function()
  local x = st.tensor({1, 2, 3}, "f64"):requires_grad_()
  eq(x.grad, nil, "no grad before backward")
  local y = (x * x):sum()
  y:backward()
  check(x.grad, {2, 4, 6}, 1e-12)
  eq(x.grad:dtype(), "f64")
  -- accumulates
  ;(x * x):sum():backward()
  check(x.grad, {4, 8, 12}, 1e-12)
  -- clear, set
  x.grad = nil
  eq(x.grad, nil)
  x.grad = st.tensor({10, 20, 30}, "f64")
  check(x.grad, {10, 20, 30}, 1e-12)
  x:sum():backward()
  check(x.grad, {11, 21, 31}, 1e-12)
  H.raises(function() x.grad = st.tensor{1, 2} end, "(2)")
  -- with an explicit gradient
  x.grad = nil
  ;(x * 3):backward(st.tensor({1, -1, 0.5}, "f64"))
  check(x.grad, {3, -3, 1.5}, 1e-12)
  -- st.backward(x) is the function form
  x.grad = nil
  st.backward(x:exp():sum())
  check(x.grad, {math.exp(1), math.exp(2), math.exp(3)}, 1e-12)
end)

test("grad_dtype_f32", function()
  local w = st.tensor{{1, 2}, {3, 4}}:requires_grad_()
  local v = st.tensor{1, -1}
  w:matmul(v):sum():backward()
  eq(w.grad:dtype(), "f32")
  check(w.grad, {{1, -1}, {1, -1}}, 1e-6)
end)

test("grad_of_view", function()
  local x = st.tensor({{1, 2}, {3, 4}, {5, 6}}, "f64"):requires_grad_()
  ;(x * x):sum():backward()
  check(x[{{2, 3}}].grad, {{6, 8}, {10, 12}}, 1e-12)
  check(x[{{}, 2}].grad, {4, 8, 12}, 1e-12)
end)

test("backward_errors", function()
  local x = st.tensor{{1, 2, 3}, {4, 5, 6}}:requires_grad_()
  local y = x * 2
  local err = H.raises(function() y:backward() end, "(2, 3)")
  assert(tostring(err):find("backward", 1, true), "message names the call: " .. tostring(err))
  H.raises(function() y:backward(st.ones(3, 2)) end, "(3, 2)")
  -- the runtime stays usable
  y:sum():backward()
  check(x.grad, {{2, 2, 2}, {2, 2, 2}}, 1e-6)
end)

test("inplace_on_leaf", function()
  local x = st.tensor({1, 2, 3}, "f64"):requires_grad_()
  H.raises(function() x:add_(1) end)
  H.raises(function() x[1] = 5 end)
  check(x, {1, 2, 3}, 0)
  do
    local g <close> = st.no_grad()
    x:add_(1)
    x:mul_(2)
  end
  check(x, {4, 6, 8}, 0)
  eq(x.requires_grad, true); eq(x.is_leaf, true)
  ;(x * x):sum():backward()
  check(x.grad, {8, 12, 16}, 1e-12)
  -- in-place on a computed tensor is recorded
  local y = x * 1
  y:mul_(3)
  y:sum():backward()
  check(x.grad, {11, 15, 19}, 1e-12)
end)

test("detach", function()
  local x = st.tensor({1, 2, 3}, "f64"):requires_grad_()
  local d = x:detach()
  eq(d.requires_grad, false); eq(d.is_leaf, true)
  check(d, {1, 2, 3}, 0)
  ;(x * d):sum():backward()
  check(x.grad, {1, 2, 3}, 1e-12)
  d:add_(10) -- a new storage: allowed, not seen by x
  check(x, {1, 2, 3}, 0)
end)

test("no_grad_guard", function()
  local x = st.tensor{1, 2}:requires_grad_()
  eq(st.is_grad_enabled(), true)
  do
    local g <close> = st.no_grad()
    eq(st.is_grad_enabled(), false)
    local y = x * 2
    eq(y.requires_grad, false)
    do
      local g2 <close> = st.no_grad() -- nests
      eq(st.is_grad_enabled(), false)
    end
    eq(st.is_grad_enabled(), false)
  end
  eq(st.is_grad_enabled(), true, "re-enabled after the scope")
  eq((x * 2).requires_grad, true)
  -- an error inside the scope still closes it
  local ok, err = pcall(function()
    local g <close> = st.no_grad()
    error("boom")
  end)
  eq(ok, false)
  assert(tostring(err):find("boom", 1, true))
  eq(st.is_grad_enabled(), true, "re-enabled after an error in the scope")
  -- a tensor error inside the scope as well
  pcall(function()
    local g <close> = st.no_grad()
    return st.ones(2) + st.ones(3)
  end)
  eq(st.is_grad_enabled(), true)
end)

test("no_grad_function", function()
  local x = st.tensor{1, 2}:requires_grad_()
  local a, b, c = st.no_grad(function(p, q)
    eq(st.is_grad_enabled(), false)
    return p * q, "second", nil
  end, x, 3)
  eq(a.requires_grad, false)
  check(a, {3, 6}, 0)
  eq(b, "second"); eq(c, nil)
  eq(select("#", st.no_grad(function() return 1, nil, 3 end)), 3, "every result, nils included")
  eq(st.is_grad_enabled(), true)
  -- errors propagate and grad mode is restored
  local ok, err = pcall(st.no_grad, function() error("inner failure") end)
  eq(ok, false)
  assert(tostring(err):find("inner failure", 1, true), tostring(err))
  eq(st.is_grad_enabled(), true)
  -- enable_grad inside no_grad
  local inner
  st.no_grad(function()
    inner = st.enable_grad(function() eq(st.is_grad_enabled(), true); return x * 2 end)
    eq(st.is_grad_enabled(), false)
  end)
  eq(inner.requires_grad, true)
  eq(st.is_grad_enabled(), true)
end)

test("functional_grad", function()
  local a = st.tensor({0.5, -1, 2}, "f64")
  local b = st.tensor({1.5, 2, -0.5}, "f64")
  local df = st.grad(function(p, q) return (p * q + p:sin()):sum() end)
  local ga, gb = df(a, b)
  check(ga, {1.5 + math.cos(0.5), 2 + math.cos(-1), -0.5 + math.cos(2)}, 1e-12)
  check(gb, {0.5, -1, 2}, 1e-12)
  eq(a.grad, nil, "the arguments are left alone"); eq(a.requires_grad, false)
  -- non-tensor arguments pass through; only tensors get gradients
  local g2 = { st.grad(function(p, k, q) return (p * k * q):sum() end)(a, 3, b) }
  eq(#g2, 2)
  check(g2[1], {4.5, 6, -1.5}, 1e-12)
  check(g2[2], {1.5, -3, 6}, 1e-12)
  -- an argument f does not use gets zeros
  local gz = { st.grad(function(p, q) return p:sum() end)(a, b) }
  check(gz[2], {0, 0, 0}, 0)
  -- works with grad mode off around it
  local gn = st.no_grad(function() return (st.grad(function(p) return (p * p):sum() end)(a)) end)
  check(gn, {1, -2, 4}, 1e-12)
end)

test("functional_grad_vs_finite_differences", function()
  st.manual_seed(7)
  local w = st.randn(3, 4):double()
  local x = st.randn(2, 3):double()
  local function f(p, q) return x:matmul(p):tanh():mul(q):sum() end
  local q = st.randn(2, 4):double()
  local gw, gq = st.grad(f)(w, q)
  local eps = 1e-6
  local wl = w:tolist()
  local gl = gw:tolist()
  for i = 1, 3 do
    for j = 1, 4 do
      local wp, wm = st.tensor(wl, "f64"), st.tensor(wl, "f64")
      wp[{i, j}] = wl[i][j] + eps
      wm[{i, j}] = wl[i][j] - eps
      local num = (f(wp, q):item() - f(wm, q):item()) / (2 * eps)
      assert(math.abs(num - gl[i][j]) <= 1e-6 * (1 + math.abs(num)),
             string.format("d/dw[%d][%d]: analytic %.12g, numeric %.12g", i, j, gl[i][j], num))
    end
  end
  check(gq, x:matmul(w):tanh(), 1e-12)
end)

test("lazy_backward", function()
  local x = st.randn(4, 3):requires_grad_()
  local w = st.randn(3, 2):requires_grad_()
  local loss = x:matmul(w):relu():log_softmax(2):mean()
  st.sync()
  local f0 = st.stats().flushes
  loss:backward()
  if not st.eager() then
    eq(st.stats().flushes, f0, "backward records only")
    st.sync(x.grad, w.grad)
    eq(st.stats().flushes, f0 + 1, "one flush for both gradients")
  end
end)

-- A Linear on a 3-D input: the weight's gradient folds the batch into the rows (one matmul, no
-- per-batch products summed afterwards), and equals the sum over the batch of g_b^T x_b.
test("linear_3d_weight_grad_is_one_matmul", function()
  local y0 = st.randn({3, 40, 24}):matmul(st.randn({16, 24}):t())
  eq(y0:shape()[1], 3, "the result keeps its batch dims"); eq(y0:shape()[3], 16)
  local x = st.randn({3, 40, 24}); local w = st.randn({16, 24}):requires_grad_()
  local c = st.randn({3, 40, 16})
  st.sync(x, w, c)
  local y = x:matmul(w:t())
  ;(y * c):sum():backward()
  st.sync(x)
  local k0 = st.stats().kernels_launched
  local gw = st.sync(w.grad)
  -- 2: g = c * 1 stored as the matmul's operand, then one matmul (before the fold: 4, with a
  -- batched product (3, 16, 24), a sum over the batch and a copy)
  if not st.eager() then   -- ST_EAGER=1: the interpreter runs it, no kernel
    eq(st.stats().kernels_launched - k0, 2, "the weight gradient is one matmul kernel")
  end
  local want = st.zeros({16, 24})
  for b = 1, 3 do want = want + c:select(1, b):t():matmul(x:select(1, b)) end
  check(gw, want, 1e-4)
end)

-- Cross-entropy's forward + backward in one flush allocates the gradient and per-row values only:
-- each row's loss is logsumexp(x) - x[target] (nn_functional.lua), so the backward is pointwise
-- (softmax * g minus g at the target) and the forward's pick reads x itself. Written as
-- nll_loss(log_softmax(x)), the pick read a stored (N, C) x - max (twice the bytes here), and
-- log_softmax's backward summed the one-hot gradient over every row.
-- Bytes in use and the peak since st.reset_stats(), on the default device (host memory on the CPU).
local function mem()
  local s = st.stats()
  if st.device() == "cpu" then return s.bytes_in_use, s.bytes_peak end
  return s.device_bytes_in_use, s.device_bytes_peak
end

test("cross_entropy_step_stores_no_logits_sized_intermediate", function()
  if st.eager() then return end   -- the interpreter materializes every node
  local F = st.nn.functional
  local x = st.randn({512, 1000}):requires_grad_()
  local t = st.randint(1, 1000, {512})
  st.sync(x, t)
  local xb = 512 * 1000 * 4
  for _, r in ipairs({"mean", "sum"}) do
    x.grad = nil
    collectgarbage()
    local base = mem()
    st.reset_stats()
    local loss = F.cross_entropy(x, t, {reduction = r})
    loss:backward()
    st.sync(loss, x.grad)
    local extra = select(2, mem()) - base
    assert(extra >= xb and extra < xb + 65536, string.format("%s: the step allocated %d bytes "
      .. "beyond its inputs; the gradient is %d", r, extra, xb))
    local want = (x:softmax(2) - st.one_hot(t, 1000):to("f32")) * (r == "mean" and 1 / 512 or 1)
    check(x.grad, want, 1e-5)
  end
end)

-- Layernorm forward + backward in one flush: the row kernel writes y, the input gradient and the
-- normalized x (the weight gradient's column sum reads it), and nothing else of x's size: at most
-- 3 buffers of x's size (y and the gradient at least). The input gradient used to join the column
-- sum's kernel (fuser/partition.c joins_across_rows), so the row kernel stored a partial input
-- gradient for it: 4 such buffers.
test("layernorm_step_stores_at_most_three_input_sized_buffers", function()
  if st.eager() then return end
  local F = st.nn.functional
  local x = st.randn({512, 1000}):requires_grad_()
  local w, b = st.randn({1000}):requires_grad_(), st.randn({1000}):requires_grad_()
  local dy = st.randn({512, 1000})
  st.sync(x, w, b, dy)
  local xb = 512 * 1000 * 4
  x.grad, w.grad, b.grad = nil, nil, nil
  collectgarbage()
  local base = mem()
  st.reset_stats()
  local y = F.layer_norm(x, {1000}, w, b)
  y:backward(dy)
  st.sync(y, x.grad, w.grad, b.grad)
  local extra = select(2, mem()) - base
  assert(extra >= 2 * xb and extra < 3 * xb + 65536, string.format("the step allocated %.3f times "
    .. "x's bytes (at most 3: y, the gradient, the normalized x)", extra / xb))
  local xd, wd, bd = x:detach():requires_grad_(), w:detach():requires_grad_(), b:detach():requires_grad_()
  st.eager(true)
  local ye = F.layer_norm(xd, {1000}, wd, bd)
  ye:backward(dy)
  st.eager(false)
  check(y, ye, 1e-5); check(x.grad, xd.grad, 1e-4); check(w.grad, wd.grad, 1e-4); check(b.grad, bd.grad, 1e-4)
end)

-- The gradient of a gather with one pick per row (cross-entropy's target) is a one-hot mask,
-- pointwise: cross-entropy's backward is one kernel with the softmax's; several picks per row
-- (a repeated index adds up) still scatter.
test("gather_one_pick_grad_is_pointwise", function()
  local F = st.nn.functional
  local x = st.randn({16, 10}):requires_grad_()
  local t = st.tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 1, 10, 10, 5, 5}, "i64")
  st.sync(x, t)
  local loss = F.cross_entropy(x, t)
  st.sync(loss)
  loss:backward()
  local k0 = st.stats().kernels_launched
  local gx = st.sync(x.grad)
  if not st.eager() then eq(st.stats().kernels_launched - k0, 1, "cross-entropy backward kernels") end
  local want = (x:softmax(2) - st.one_hot(t, 10):to("f32")) / 16
  check(gx, want, 1e-6)
  local y = st.randn({4, 5}):requires_grad_()
  local idx = st.tensor({{1, 1}, {2, 5}, {3, 3}, {4, 2}}, "i64")
  st.sync(y, idx)
  y:gather(2, idx):sum():backward()
  local g = y.grad:tolist()
  eq(g[1][1], 2, "a repeated index adds up"); eq(g[2][2], 1); eq(g[2][5], 1); eq(g[4][1], 0); eq(g[4][2], 1)
end)

-- softmax and log_softmax subtract the row max only to keep exp in range; no gradient flows
-- through it (it is detached: runtime/ops.c softmax_impl), so the backward is
-- y * (g - sum(g * y)) and g - softmax * sum(g) with nothing of the max's own rule (a compare
-- against the max, a second reduction, a scatter): 12 nodes instead of the 24 it recorded before.
-- GELU's backward is one gelu_grad op (its erf and its x phi(x) share one exp): the f32 gradient is
-- gelu_grad(x) times the incoming gradient, bit for bit (the composed rule's erf and exp round
-- differently); gelu_grad's own gradient is phi(x) (2 - x^2) (f64, against the formula).
test("gelu_backward_is_gelu_grad", function()
  local x = (st.randn({4096}) * 3):requires_grad_()
  x:gelu():sum():backward()
  local diff = (x.grad - x:detach():gelu_grad()):abs():max():item()
  if diff ~= 0 then error("gelu's f32 gradient differs from gelu_grad by " .. diff) end
  local xd = st.tensor({-3, -1.5, -0.5, 0, 0.25, 1, 2.5}, "f64"):requires_grad_()
  xd:gelu_grad():sum():backward()
  local got = xd.grad:tolist()
  for i, v in ipairs(xd:tolist()) do
    local want = math.exp(-0.5 * v * v) / math.sqrt(2 * math.pi) * (2 - v * v)
    if math.abs(got[i] - want) > 1e-15 then error("gelu_grad' at " .. v .. ": " .. got[i] .. ", want " .. want) end
  end
end)

test("softmax_backward_skips_the_max", function()
  local x = st.tensor(H.nested({4, 8}, H.lcg(3)), "f64"):requires_grad_()
  local g = st.tensor(H.nested({4, 8}, H.lcg(4)), "f64")
  for _, log in ipairs({false, true}) do
    x.grad = nil
    local y = log and x:log_softmax(2) or x:softmax(2)
    local l = (y * g):sum()
    st.sync(l)
    local n0 = st.stats().nodes_recorded
    l:backward()
    local nodes = st.stats().nodes_recorded - n0
    local what = log and "log_softmax" or "softmax"
    if nodes > 12 then error(what .. " backward recorded " .. nodes .. " nodes (at most 12 without the max's rule)") end
    -- the formulas, in plain Lua from the same values
    local xv, gv, want = x:tolist(), g:tolist(), {}
    for i = 1, 4 do
      local m, s, sy = -math.huge, 0, 0
      for j = 1, 8 do m = math.max(m, xv[i][j]) end
      for j = 1, 8 do s = s + math.exp(xv[i][j] - m) end
      want[i] = {}
      if log then
        local sg = 0
        for j = 1, 8 do sg = sg + gv[i][j] end
        for j = 1, 8 do want[i][j] = gv[i][j] - math.exp(xv[i][j] - m) / s * sg end
      else
        for j = 1, 8 do sy = sy + gv[i][j] * math.exp(xv[i][j] - m) / s end
        for j = 1, 8 do want[i][j] = math.exp(xv[i][j] - m) / s * (gv[i][j] - sy) end
      end
    end
    check(x.grad, want, 1e-12)
  end
end)

H.done()
