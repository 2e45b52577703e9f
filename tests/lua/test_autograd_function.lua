-- test_autograd_function.lua — st.autograd.Function (custom forward/backward in Lua), x:retain_grad()
-- and st.utils.checkpoint: gradients against hand-computed values and central finite differences
-- (f64), the errors a custom backward can make (each names the function and the shapes), an error
-- raised inside a backward (a Lua error; the runtime stays usable), and checkpointed MLP gradients
-- equal to the plain ones while fewer bytes are kept for the backward.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check, raises = H.test, H.eq, H.check_near, H.raises

local rnd = H.lcg(4242)
local function randt(shape) return st.tensor(H.nested(shape, rnd), "f64") end

-- central finite differences of the scalar f(x) (x: f64 tensor), as a flat Lua list
local function fd(f, x, h)
  h = h or 1e-6
  local flat = x:reshape(-1):tolist()
  local g = {}
  for i = 1, #flat do
    local p, m = {}, {}
    for j = 1, #flat do p[j], m[j] = flat[j], flat[j] end
    p[i], m[i] = flat[i] + h, flat[i] - h
    local fp = f(st.tensor(p, "f64"):reshape(x:shape())):item()
    local fm = f(st.tensor(m, "f64"):reshape(x:shape())):item()
    g[i] = (fp - fm) / (2 * h)
  end
  return g
end

local function flat(t) return t:reshape(-1):tolist() end

local Cube = st.autograd.Function("Cube")
function Cube.forward(ctx, x)
  ctx:save_for_backward(x)
  return x * x * x
end
function Cube.backward(ctx, g)
  local x = ctx.saved_tensors[1]
  return g * 3 * x * x
end

test("cube_hand_values", function()
  local x = st.tensor({1, -2, 0.5}, "f64"):requires_grad_()
  local y = Cube.apply(x)
  eq(y.requires_grad, true, "requires_grad")
  eq(y.is_leaf, false, "is_leaf")
  check(y, {1, -8, 0.125}, 1e-15, "forward")
  local w = st.tensor({1, 10, 100}, "f64")
  ;(y * w):sum():backward()
  check(x.grad, {3, 120, 75}, 1e-15, "3 x^2 w")
end)

test("cube_in_a_chain_vs_finite_differences", function()
  local x0 = randt({2, 3})
  local w = randt({2, 3})
  local function f(x) return (Cube.apply(x:sin()) * w):sum() + Cube.apply(x):mean() end
  local x = x0:clone():requires_grad_()
  f(x):backward()
  check(flat(x.grad), fd(f, x0), 1e-7, "d/dx")
end)

-- two inputs, two outputs: p = a * b, s = a + b^2
local Two = st.autograd.Function{
  name = "Two",
  forward = function(ctx, a, b)
    ctx:save_for_backward(a, b)
    return a * b, a + b * b
  end,
  backward = function(ctx, gp, gs)
    local a, b = ctx.saved_tensors[1], ctx.saved_tensors[2]
    return gp * b + gs, gp * a + gs * 2 * b
  end,
}

test("two_outputs_hand_values", function()
  local a = st.tensor({1, 2}, "f64"):requires_grad_()
  local b = st.tensor({3, -1}, "f64"):requires_grad_()
  local p, s = Two.apply(a, b)
  check(p, {3, -2}, 1e-15, "p")
  check(s, {10, 3}, 1e-15, "s")
  local w1, w2 = st.tensor({1, 2}, "f64"), st.tensor({5, 7}, "f64")
  ;((p * w1):sum() + (s * w2):sum()):backward()
  -- da = w1 b + w2 = {3 + 5, -2 + 7}; db = w1 a + 2 w2 b = {1 + 30, 4 - 14}
  check(a.grad, {8, 5}, 1e-15, "da")
  check(b.grad, {31, -10}, 1e-15, "db")
end)

test("two_outputs_vs_finite_differences", function()
  local a0, b0 = randt({3}), randt({3})
  local function f(a, b)
    local p, s = Two.apply(a:exp(), b)
    return (p * s):sum() + (p:tanh() * b):sum()
  end
  local a, b = a0:clone():requires_grad_(), b0:clone():requires_grad_()
  f(a, b):backward()
  check(flat(a.grad), fd(function(x) return f(x, b0) end, a0), 1e-7, "da")
  check(flat(b.grad), fd(function(x) return f(a0, x) end, b0), 1e-7, "db")
end)

test("unused_output_gets_zeros_or_nil", function()
  local seen
  local F = st.autograd.Function("F")
  function F.forward(_, x) return x * 2, x * 3 end
  function F.backward(_, g1, g2)
    seen = {g1 and g1:tolist(), g2 and g2:tolist()}
    return g1 * 2 + g2 * 3
  end
  local x = st.tensor({1, 1}, "f64"):requires_grad_()
  local y1 = F.apply(x)
  y1:sum():backward()
  check(seen[2], {0, 0}, 0, "materialized zeros")
  check(x.grad, {2, 2}, 0, "x.grad")
  local G = st.autograd.Function("G")
  function G.forward(ctx, v)
    ctx:set_materialize_grads(false)
    return v * 2, v * 3
  end
  function G.backward(_, g1, g2)
    seen = {g1 == nil, g2 == nil}
    return g2 * 3
  end
  local z = st.tensor({1, 1}, "f64"):requires_grad_()
  local _, b = G.apply(z)
  b:sum():backward()
  eq(seen[1], true, "g1 is nil")
  eq(seen[2], false, "g2 is a tensor")
  check(z.grad, {3, 3}, 0, "z.grad")
end)

test("non_tensor_and_non_grad_inputs", function()
  local needs
  local Scale = st.autograd.Function("Scale")
  function Scale.forward(ctx, x, k, c)
    needs = ctx.needs_input_grad
    ctx.k = k
    return x * k + c
  end
  function Scale.backward(ctx, g) return g * ctx.k, nil, g end
  local x = st.tensor({1, 2}, "f64"):requires_grad_()
  local c = st.tensor({5, 5}, "f64")
  local y = Scale.apply(x, 4, c)
  eq(needs[1], true, "x needs grad")
  eq(needs[2], false, "k")
  eq(needs[3], false, "c does not require grad")
  y:sum():backward()
  check(x.grad, {4, 4}, 0, "x.grad")
  eq(c.grad, nil, "c.grad")
  -- no input requires grad (or grad mode off): no record, nothing requires grad
  eq(Scale.apply(c, 2, c).requires_grad, false, "no input requires grad")
  eq(st.no_grad(Scale.apply, x, 2, c).requires_grad, false, "grad mode off")
end)

test("non_differentiable_and_integer_outputs", function()
  local got
  local F = st.autograd.Function("ArgSq")
  function F.forward(ctx, x)
    local idx = x:argmax()
    local m = x * 1
    ctx:mark_non_differentiable(m)
    return x * x, idx, m
  end
  function F.backward(_, g, gi, gm)
    got = {gi, gm}
    return g * 2      -- not 2x: shows that this rule ran
  end
  local x = st.tensor({1, 3, 2}, "f64"):requires_grad_()
  local y, i, m = F.apply(x)
  eq(i.requires_grad, false, "integer output")
  eq(m.requires_grad, false, "marked output")
  eq(i:item(), 2, "argmax (1-based)")
  y:sum():backward()
  eq(got[1], nil, "no gradient for the integer output")
  eq(got[2], nil, "no gradient for the marked output")
  check(x.grad, {2, 2, 2}, 0, "x.grad")
end)

test("view_inputs_and_outputs_that_are_inputs", function()
  local Id = st.autograd.Function("Id")
  function Id.forward(_, x) return x end
  function Id.backward(_, g) return g * 10 end
  local w = st.tensor({{1, 2}, {3, 4}}, "f64"):requires_grad_()
  local y = Id.apply(w[{{}, 2}])   -- a view of a leaf
  eq(w.requires_grad, true, "w unchanged")
  eq(y.is_leaf, false, "y is a new tensor")
  ;(y * st.tensor({1, 2}, "f64")):sum():backward()
  check(w.grad, {{0, 10}, {0, 20}}, 0, "scattered into the view")
end)

test("saved_tensors_keep_the_value_at_save_time", function()
  local F = st.autograd.Function("Saved")
  function F.forward(ctx, x, buf)
    ctx:save_for_backward(buf, nil)
    return x * 1
  end
  function F.backward(ctx, g)
    eq(ctx.saved_tensors.n, 2, "saved count")
    eq(ctx.saved_tensors[2], nil, "saved nil")
    return g * ctx.saved_tensors[1]
  end
  local x = st.tensor({1, 1}, "f64"):requires_grad_()
  local buf = st.tensor({2, 3}, "f64")
  local y = F.apply(x, buf)
  buf:fill_(100)                  -- after the save: not seen by backward
  y:sum():backward()
  check(x.grad, {2, 3}, 0, "x.grad")
end)

-- After backward the record is dead: its saved tensors are closed at once (so a flush can free
-- their buffers), ctx.saved_tensors is gone; one returned as a gradient stays usable.
test("saved_tensors_are_released_after_backward", function()
  local F = st.autograd.Function("Release")
  local ctx_seen, kept
  function F.forward(ctx, x)
    ctx:save_for_backward(x * 2, x * 3)
    return x * 1
  end
  function F.backward(ctx, g)
    ctx_seen = ctx
    kept = ctx.saved_tensors[1]
    return ctx.saved_tensors[2]
  end
  local x = st.tensor({1, 2}, "f64"):requires_grad_()
  F.apply(x):sum():backward()
  check(x.grad, {3, 6}, 0, "the returned saved tensor")
  eq(ctx_seen.saved_tensors, nil, "saved_tensors after backward")
  local ok = pcall(function() return kept:sum():item() end)
  eq(ok, false, "a saved tensor used after backward")
end)

test("errors_name_the_function_and_shapes", function()
  local x = st.tensor({{1, 2, 3}, {4, 5, 6}}, "f64"):requires_grad_()
  local function fn(name, bw)
    local F = st.autograd.Function(name)
    function F.forward(_, a, k) return a * 2 end
    F.backward = bw
    return F
  end
  local Bad = fn("BadShape", function(_, g) return g:t() end)
  raises(function() Bad.apply(x):sum():backward() end,
    "backward of BadShape: the gradient of argument 1 has shape (3, 2); the argument has shape (2, 3)")
  local Int = fn("IntGrad", function(_, g) return g:to("i64") end)
  raises(function() Int.apply(x):sum():backward() end, "backward of IntGrad: the gradient of argument 1 is i64")
  local Many = fn("Many", function(_, g) return g, nil, g end)
  raises(function() Many.apply(x, 3):sum():backward() end, "backward of Many returned 3 values; forward took 2 arguments")
  local NonT = fn("NonTensorArg", function(_, g) return g, g end)
  raises(function() NonT.apply(x, 3):sum():backward() end,
    "backward of NonTensorArg: argument 2 of forward was a number, not a tensor; its gradient must be nil")
  local Num = fn("Number", function(_, g) return 1 end)
  raises(function() Num.apply(x):sum():backward() end, "backward of Number: the gradient of argument 1 must be a tensor or nil, got a number")
  local Undef = st.autograd.Function("Undef")
  raises(function() Undef.apply(x) end, "autograd.Function Undef: define Undef.forward(ctx, ...) and Undef.backward(ctx, ...)")
  raises(function() st.autograd.Function{name = "X", bogus = 1} end, "unknown option 'bogus'")
  raises(function() st.autograd.Function(3) end, "expected a name or a table")
  local ctx_err = st.autograd.Function("Ctx")
  function ctx_err.forward(ctx, a) ctx:save_for_backward(a, 3); return a end
  function ctx_err.backward(_, g) return g end
  raises(function() ctx_err.apply(x) end, "save_for_backward: argument 2 is a number; only tensors (or nil) can be saved")
  x.grad = nil
  x:sum():backward()               -- the runtime is usable after each error
  check(x.grad, {{1, 1, 1}, {1, 1, 1}}, 0, "plain backward after the errors")
end)

test("error_raised_in_backward_propagates", function()
  local Boom = st.autograd.Function("Boom")
  function Boom.forward(_, x) return x * 2 end
  function Boom.backward() error("boom at step 3") end
  local x = st.tensor({1, 2}, "f64"):requires_grad_()
  local y = (Boom.apply(x) * x):sum()
  local err = raises(function() y:backward() end, "backward of the custom function Boom: ")
  eq(tostring(err):find("boom at step 3", 1, true) ~= nil, true, "the message: " .. tostring(err))
  -- a table raised keeps its identity
  local E = {code = 7}
  local Tab = st.autograd.Function("Tab")
  function Tab.forward(_, v) return v * 1 end
  function Tab.backward() error(E) end
  local ok, e2 = pcall(function() Tab.apply(x):sum():backward() end)
  eq(ok, false, "raised")
  eq(e2, E, "the error object")
  -- the runtime is usable: grad mode is back on, x got nothing, a later backward works
  eq(st.is_grad_enabled(), true, "grad mode")
  eq(x.grad, nil, "no partial gradient")
  ;(Cube.apply(x)):sum():backward()
  check(x.grad, {3, 12}, 0, "after the error")
end)

test("custom_function_nested_in_a_custom_backward", function()
  -- a backward that itself runs a backward (what checkpoint does)
  local Outer = st.autograd.Function("Outer")
  function Outer.forward(ctx, x) ctx:save_for_backward(x); return x:sin() end
  function Outer.backward(ctx, g)
    local x = ctx.saved_tensors[1]:detach():requires_grad_()
    local y = st.enable_grad(function() return Cube.apply(x) end)
    y:backward(g)
    return x.grad -- 3 x^2 g: deliberately not sin's derivative, to see which path ran
  end
  local x = st.tensor({1, 2}, "f64"):requires_grad_()
  Outer.apply(x):sum():backward()
  check(x.grad, {3, 12}, 1e-15, "3 x^2")
end)

test("records_are_freed", function()
  local x = st.tensor({1, 2}, "f64"):requires_grad_()
  local function step()
    local y = Cube.apply(x)
    y:sum():backward()
  end
  step()
  collectgarbage(); collectgarbage()
  local n0 = st.stats().nodes_live
  for _ = 1, 50 do step() end
  x.grad = nil
  collectgarbage(); collectgarbage()
  st.autograd.Function("Sweep")  -- nothing: dead closures are released on the next apply
  step()
  x.grad = nil
  collectgarbage(); collectgarbage()
  local n1 = st.stats().nodes_live
  eq(n1 <= n0 + 2, true, "nodes live " .. n0 .. " -> " .. n1)
end)

-- ---- retain_grad ----

test("retain_grad", function()
  local x = st.tensor({1, 2, 3}, "f64"):requires_grad_()
  local y = x * 2
  eq(y:retain_grad(), y, "returns the tensor")
  local z = (y * y):sum()
  z:retain_grad()
  z:backward()
  check(y.grad, {4, 8, 12}, 0, "dz/dy = 2y")
  check(x.grad, {8, 16, 24}, 0, "dz/dx = 8x")
  check(z.grad, 1, 0, "the root's gradient")
  eq(y.is_leaf, false, "still not a leaf")
  ;(y * 3):sum():backward()         -- accumulates like a leaf's
  check(y.grad, {7, 11, 15}, 0, "accumulated")
  y.grad = nil
  eq(y.grad, nil, "cleared")
  x:retain_grad()                   -- a leaf: nothing to do
  raises(function() st.tensor({1.0}):retain_grad() end, "retain_grad: the tensor (1) does not require grad")
  local u = x * 1
  local v = u[{{2, 3}}]             -- a view of the non-leaf: its part of u's gradient
  u:retain_grad()
  ;(v * st.tensor({5, 7}, "f64")):sum():backward()
  check(u.grad, {0, 5, 7}, 0, "u.grad")
  check(v.grad, {5, 7}, 0, "v.grad (a view of u's)")
end)

-- ---- checkpoint ----

local function mlp_params(seed, n)
  local g = H.lcg(seed)
  local ps = {}
  for i = 1, n do ps[i] = st.tensor(H.nested({16, 16}, g), "f64"):requires_grad_() end
  return ps
end

test("checkpoint_mlp_gradients_equal_plain", function()
  local ps = mlp_params(7, 4)
  local b = st.tensor(H.nested({16}, H.lcg(9)), "f64"):requires_grad_()
  local x = st.tensor(H.nested({8, 16}, H.lcg(8)), "f64")
  local function block(h, w1, w2) return (h:matmul(w1) + b):tanh():matmul(w2):relu() end
  local function run(ck)
    for _, p in ipairs(ps) do p.grad = nil end
    b.grad = nil
    local h = x
    for i = 1, 4, 2 do
      if ck then h = st.utils.checkpoint(block, h, ps[i], ps[i + 1]) else h = block(h, ps[i], ps[i + 1]) end
    end
    local loss = (h * h):mean()
    loss:backward()
    local gs = {}
    for i, p in ipairs(ps) do gs[i] = flat(p.grad) end
    gs[#gs + 1] = flat(b.grad)
    return gs, loss:item()
  end
  local plain, l1 = run(false)
  local ck, l2 = run(true)
  check(l2, l1, 1e-15, "loss")
  for i = 1, #plain do check(ck[i], plain[i], 1e-12, "gradient " .. i) end
  -- and the weights only captured by fn (no input requires grad: x is data)
  local w = ps[1]
  w.grad = nil
  st.utils.checkpoint(function(h) return h:matmul(w):tanh() end, x):sum():backward()
  local w2 = w:detach():requires_grad_()
  x:matmul(w2):tanh():sum():backward()
  check(flat(w.grad), flat(w2.grad), 1e-12, "captured parameter")
end)

test("checkpoint_a_module", function()
  st.manual_seed(3)
  local blk = st.nn.Sequential(st.nn.Linear(6, 6, {dtype = "f64"}), st.nn.Tanh(), st.nn.Linear(6, 6, {dtype = "f64"}))
  local x = randt({4, 6})
  local function run(ck)
    blk:zero_grad()
    local y = ck and st.utils.checkpoint(blk, x) or blk(x)
    ;(y * y):sum():backward()
    local gs = {}
    for i, p in ipairs(blk:parameters()) do gs[i] = flat(p.grad) end
    return gs
  end
  local a, b = run(false), run(true)
  eq(#a, 4, "parameters")
  for i = 1, #a do check(b[i], a[i], 1e-12, "parameter " .. i) end
end)

test("checkpoint_several_outputs_non_tensor_args_and_dropout", function()
  local a0, b0 = randt({4, 5}), randt({4, 5})
  local function fn(a, scale, bb)
    local d = st.nn.functional.dropout(a:exp(), 0.5, true)
    return d * scale + bb, (a * bb):sin()
  end
  local function run(ck)
    local a, bb = a0:clone():requires_grad_(), b0:clone():requires_grad_()
    st.manual_seed(123)
    local p, q
    if ck then p, q = st.utils.checkpoint(fn, a, 3, bb) else p, q = fn(a, 3, bb) end
    local n = st.randn(4, 5, "f64")  -- the stream moves on after the forward in both runs
    ;((p * q):sum() + (n * p):sum()):backward()
    return flat(a.grad), flat(bb.grad), flat(p)
  end
  local ga, gb, p1 = run(false)
  local ca, cb, p2 = run(true)
  check(p2, p1, 1e-15, "forward (same dropout mask)")
  check(ca, ga, 1e-12, "da")
  check(cb, gb, 1e-12, "db")
end)

test("checkpoint_keeps_fewer_bytes", function()
  local ps = mlp_params(11, 6)
  local x = st.tensor(H.nested({32, 16}, H.lcg(12)), "f64")
  local function block(h, w1, w2) return h:matmul(w1):tanh():matmul(w2):tanh() end
  local function held(ck)
    collectgarbage(); collectgarbage()
    local s0 = st.stats()
    local h = x
    for i = 1, 6, 2 do
      if ck then h = st.utils.checkpoint(block, h, ps[i], ps[i + 1]) else h = block(h, ps[i], ps[i + 1]) end
    end
    local loss = h:sum()
    loss:item()                      -- run the forward: what is stored now is kept for backward
    collectgarbage(); collectgarbage()
    local s1 = st.stats()
    local bytes = (s1.bytes_in_use + s1.device_bytes_in_use) - (s0.bytes_in_use + s0.device_bytes_in_use)
    loss:backward()
    return bytes, flat(ps[1].grad)
  end
  held(false); held(true)           -- the weights are realized by the first runs
  for _, p in ipairs(ps) do p.grad = nil end
  local plain, g1 = held(false)
  for _, p in ipairs(ps) do p.grad = nil end
  local ck, g2 = held(true)
  check(g2, g1, 1e-12, "gradients")
  eq(ck < plain, true, string.format("bytes kept: checkpoint %d, plain %d", ck, plain))
end)

test("checkpoint_errors", function()
  raises(function() st.utils.checkpoint(3) end, "checkpoint: expected a function")
  local x = randt({3}):requires_grad_()
  local calls = 0
  local y = st.utils.checkpoint(function(v)
    calls = calls + 1
    if calls == 2 then error("recompute failed") end
    return v * 2
  end, x)
  raises(function() y:sum():backward() end, "recompute failed")
  eq(st.is_grad_enabled(), true, "grad mode")
  -- under no_grad the checkpoint is just the call
  local z = st.no_grad(st.utils.checkpoint, function(v) return v * 2 end, x)
  eq(z.requires_grad, false, "no graph under no_grad")
end)

test("rng_state", function()
  st.manual_seed(5)
  local s = st.get_rng_state()
  local a = st.rand(4):tolist()
  st.set_rng_state(s)
  check(st.rand(4):tolist(), a, 0, "replayed")
  raises(function() st.set_rng_state({1}) end, "set_rng_state: expected the table st.get_rng_state() returns")
end)

H.done()
