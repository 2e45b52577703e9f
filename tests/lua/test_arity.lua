-- test_arity.lua: no argument is ever silently dropped (issue 14). Every C function of st and
-- st.Tensor is registered through lua_frontend/larity.c's guard, which raises on an argument past
-- the most the function takes, naming the function, the position (the tensor counted as #1, as
-- the bindings read it) and the value. Trailing nils are no arguments.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check = H.test, H.eq, H.check_near

local function m22() return st.tensor{{1, 2}, {3, 4}} end

test("extra_arguments_raise_naming_the_function", function()
  local x = m22()
  local cases = {
    {function() return x:sum(1, true, 5) end, "sum: unexpected argument #4 (5): sum takes at most 3 (the tensor, dims, keepdim)"},
    {function() return x:softmax(2, 3) end, "softmax: unexpected argument #3 (3): softmax takes at most 2"},
    {function() return st.cat({x, x}, 1, 2) end, "cat: unexpected argument #3 (2): cat takes at most 2"},
    {function() return x:mean(1, true, true) end, "mean: unexpected argument #4 (true)"},
    {function() return x:max(1, true, 1) end, "max: unexpected argument #4 (1)"},
    {function() return x:transpose(1, 2, 3) end, "transpose: unexpected argument #4 (3)"},
    {function() return x:narrow(1, 1, 1, 1) end, "narrow: unexpected argument #5 (1)"},
    {function() return x:to("f64", "cpu", 3) end, "to: unexpected argument #4 (3)"},
    {function() return x:relu(1) end, "relu: unexpected argument #2 (1): relu takes at most 1 (the tensor)"},
    {function() return x:add(x, x) end, "add: unexpected argument #3 (a tensor)"},
    {function() return st.matmul(x, x:t(), 1) end, "matmul: unexpected argument #3 (1)"},
    -- clamp is written in Lua (tensor_ops.lua: tensor bounds): not a tail call, whose frame Lua drops
    {function() local r = x:clamp(0, 1, 2); return r end, "clamp: unexpected argument #4 (2)"},
    {function() return x:argmax(2, true, 1) end, "argmax: unexpected argument #4 (1)"},
    {function() return x:var(1, true, 1, 0) end, "var: unexpected argument #5 (0)"},
    {function() return x:max(x, true) end, "max: unexpected argument #3 (true): max takes at most 2 (the tensor, other)"},
    {function() return x:gather(1, st.tensor({{1, 1}}, "i64"), x) end, "gather: unexpected argument #4 (a tensor)"},
    {function() return x:scatter_add(1, st.tensor({{1, 1}}, "i64"), x, 1) end, "scatter_add: unexpected argument #5 (1)"},
    {function() return st.one_hot(st.tensor({1, 2}, "i64"), 3, "x") end, 'one_hot: unexpected argument #3 ("x")'},
    {function() return st.where(x:gt(1), x, 0, {}) end, "where: unexpected argument #4 (a table)"},
    {function() return st.tensor({1}, "f32", "cpu") end, 'tensor: unexpected argument #3 ("cpu")'},
    {function() return x:item(1) end, "item: unexpected argument #2 (1)"},
    {function() return x:size(1, 2) end, "size: unexpected argument #3 (2)"},
    {function() return x:add_(1, 2) end, "add_: unexpected argument #3 (2)"},
    {function() return x:detach(1) end, "detach: unexpected argument #2 (1)"},
    {function() return st.is_grad_enabled(true) end, "is_grad_enabled: unexpected argument #1 (true): is_grad_enabled takes no arguments"},
    {function() return st.load("x", "y") end, 'load: unexpected argument #2 ("y")'},
    {function() return st.stats(1) end, "stats: unexpected argument #1 (1): stats takes no arguments"},
    {function() return st.device(1) end, "device: unexpected argument #1 (1)"},
    {function() return x:device(1) end, "device: unexpected argument #2 (1): device takes at most 1 (the tensor)"},
    {function() return st.sum(x, 1, true, 5) end, "sum: unexpected argument #4 (5)"},
    {function() return st._lib("nn", 1) end, "_lib: unexpected argument #2 (1)"},
  }
  for _, c in ipairs(cases) do
    local err = H.raises(c[1], c[2])
    -- a Lua error with the caller's position, like every other error of the module
    assert(err:find("test_arity.lua:%d+: "), "no position in: " .. err)
  end
  -- long strings are cut, tensors never printed
  H.raises(function() return x:sum(1, true, string.rep("a", 100)) end, '"' .. string.rep("a", 40) .. '"...)')
end)

test("maximal_calls_still_work", function()
  local x = m22()
  check(x:sum(1, true), {{4, 6}})
  check(x:sum(1, true, nil), {{4, 6}}, nil, "a trailing nil is no argument")
  check(x:mean({1, 2}, false), 2.5)
  check(x:prod(2, true), {{2}, {12}})
  check(x:logsumexp(2, false), {math.log(math.exp(1) + math.exp(2)), math.log(math.exp(3) + math.exp(4))})
  check(x:var(1, true, 0), {{1, 1}})
  check(x:std(2, false, true), {math.sqrt(0.5), math.sqrt(0.5)})
  local v, i = x:max(2, true)
  check(v, {{2}, {4}}); check(i, {{2}, {2}})
  check(x:min(x:mul(-1)), {{-1, -2}, {-3, -4}})
  check(x:argmax(2, true), {{2}, {2}})
  check(x:argmin(1, false), {1, 1})
  check(x:softmax(2):sum(2), {1, 1})
  check(x:log_softmax(-1):exp():sum(2), {1, 1})
  check(st.matmul(x, x:t()), {{5, 11}, {11, 25}})
  check(x:clamp(2, 3), {{2, 2}, {3, 3}})
  check(x:add(1), {{2, 3}, {4, 5}})
  check(st.add(1, x), {{2, 3}, {4, 5}})
  check(x:relu(), x)
  eq(x:size(2), 2)
  check(x:transpose(1, 2), {{1, 3}, {2, 4}})
  check(x:narrow(2, 2, 1), {{2}, {4}})
  check(x:select(1, 2), {3, 4})
  check(x:flatten(1, 2), {1, 2, 3, 4})
  check(x:unsqueeze(1):squeeze(1), x)
  check(x:reshape(4, nil), {1, 2, 3, 4})
  check(x:permute(2, 1), {{1, 3}, {2, 4}})
  check(st.ones(2):expand_as(x), {{1, 1}, {1, 1}})
  local idx = st.tensor({{2, 1}}, "i64")
  check(x:gather(1, idx), {{3, 2}})
  check(x:index_select(2, {2}), {{2}, {4}})
  check(st.zeros(2, 2):scatter_add(1, idx, st.ones(1, 2)), {{0, 1}, {1, 0}})
  check(st.zeros(2, 2):index_add(1, st.tensor({2}, "i64"), st.ones(1, 2)), {{0, 0}, {1, 1}})
  check(st.one_hot(st.tensor({1, 3}, "i64"), 3), {{1, 0, 0}, {0, 0, 1}})
  check(st.cat({x, x}, 2), {{1, 2, 1, 2}, {3, 4, 3, 4}})
  eq(st.stack({x, x}, 3):dim(), 3)
  check(st.where(x:gt(2), x, 0), {{0, 0}, {3, 4}})
  eq(st.tensor({1, 2}, "f64"):dtype(), "f64")
  eq(st.zeros(2, 2, "i64", nil):dtype(), "i64")
  local y = m22()
  y:add_(1); y:fill_(2); check(y, {{2, 2}, {2, 2}})
  local w = st.ones(2):requires_grad_(true)
  local s = w:mul(3):sum()
  s:backward(st.tensor(2))
  check(w.grad, {6, 6})
  eq(st.is_tensor(x), true)
  eq(st.no_grad(function(a, b) return a + b end, 1, 2), 3, "no_grad passes any number of arguments")
  eq(select("#", st.sync(x, y, w)), 3)
end)

test("to_takes_a_dtype_and_a_device", function()
  local x = m22()
  local a = x:to("f64", "cpu")
  eq(a:dtype(), "f64"); eq(a:device(), "cpu")
  local b = x:to("cpu", "i64")
  eq(b:dtype(), "i64"); check(b, {{1, 2}, {3, 4}})
  eq(x:to(x:device()), x, "to(device) where it is: the tensor itself") -- x on the default device
  eq(x:to("f32", nil):dtype(), "f32")
  H.raises(function() return x:to("f64", "i32") end, "a second dtype")
  H.raises(function() return x:to("cpu", "cpu") end, "a second device")
  H.raises(function() return x:to("f64", 1) end, "got the number 1")
end)

-- The LT_VARARGS rows of larity.c: these check their own tails (sizes, tensor lists, fn args).
local varargs = {
  realize = true, zeros = true, ones = true, empty = true, rand = true, randn = true, full = true,
  arange = true, linspace = true, eye = true, randint = true, einsum = true, sync = true,
  graph = true, reshape = true, view = true, expand = true, permute = true, no_grad = true,
  enable_grad = true, autocast = true,
}

local function c_functions(tbl, prefix, out)
  for k, f in pairs(tbl) do
    if type(f) == "function" and debug.getinfo(f, "S").what == "C" then out[#out + 1] = {prefix .. k, k, f} end
  end
  return out
end

test("every_c_function_is_guarded", function()
  local fns = c_functions(st.Tensor, "st.Tensor.", c_functions(st, "st.", {}))
  assert(#fns > 150, "found only " .. #fns .. " C functions")
  local junk = {}
  local args = {}
  for k = 1, 40 do args[k] = junk end
  for _, e in ipairs(fns) do
    local full, name, f = e[1], e[2], e[3]
    -- white box: the closure lt_setfuncs made (its upvalue 1 is the guard's data)
    local _, data = debug.getupvalue(f, 1)
    local mt = type(data) == "userdata" and getmetatable(data)
    assert(mt and mt.__name == "stitch.arity", full .. " is not registered through lt_setfuncs (larity.c)")
    -- black box: 40 arguments raise before the binding runs (no side effect), naming it
    if not varargs[name] then
      local ok, err = pcall(f, table.unpack(args))
      assert(not ok, full .. " accepted 40 arguments")
      assert(tostring(err):find(name .. ": unexpected argument #", 1, true), full .. ": " .. tostring(err))
    end
  end
  for name in pairs(varargs) do assert(st[name], "st." .. name .. " is gone: update the varargs list") end
end)

H.done()
