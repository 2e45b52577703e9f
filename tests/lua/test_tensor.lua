-- test_tensor.lua — constructors, shapes, dtypes, arithmetic with scalars on both sides, methods
-- mirroring the C API (views, casts, joins, index ops with 1-based indices, in-place ops).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, near, check = H.test, H.eq, H.near, H.check_near

test("require_is_global", function()
  eq(require("stitch"), st, "require 'stitch'")
  assert(st.is_tensor(st.ones(1)) and not st.is_tensor(1))
end)

test("tensor_from_table", function()
  local x = st.tensor{{1, 2}, {3, 4}}
  eq(x:dtype(), "f32"); eq(H.show(x:shape()), "{2, 2}"); eq(x:dim(), 2); eq(x:numel(), 4)
  check(x, {{1, 2}, {3, 4}})
  local y = st.tensor({1, 2, 3}, "i64")
  eq(y:dtype(), "i64"); eq(math.type(y:tolist()[1]), "integer")
  local b = st.tensor{true, false, true}
  eq(b:dtype(), "bool"); eq(H.show(b:tolist()), "{true, false, true}")
  local s = st.tensor(3.5)
  eq(s:dim(), 0); eq(s:item(), 3.5); eq(s:tolist(), 3.5)
  eq(st.tensor{}:numel(), 0)
  eq(st.tensor({{1, 2}}, "f64"):dtype(), "f64")
end)

test("tensor_ragged_is_error", function()
  H.raises(function() st.tensor{{1, 2}, {3}} end, "[2]")
  H.raises(function() st.tensor{{1, 2}, 3} end, "ragged")
  H.raises(function() st.tensor{{1, "x"}} end, "[1][2]")
  H.raises(function() st.tensor({1}, "nope") end, "unknown dtype")
end)

test("creators", function()
  eq(H.show(st.zeros(2, 3):shape()), "{2, 3}")
  eq(H.show(st.zeros{2, 3}:shape()), "{2, 3}")
  eq(st.zeros(2, 3, "i32"):dtype(), "i32")
  eq(st.ones({4}, "f64"):dtype(), "f64")
  check(st.ones(2):tolist(), {1, 1})
  check(st.full({2, 2}, 7), {{7, 7}, {7, 7}})
  eq(st.full({2}, 7, "i64"):dtype(), "i64")
  eq(H.show(st.empty(3, 1):shape()), "{3, 1}")
  check(st.arange(4), {0, 1, 2, 3}); eq(st.arange(4):dtype(), "i64")
  check(st.arange(2, 5), {2, 3, 4})
  check(st.arange(0, 1, 0.25), {0, 0.25, 0.5, 0.75}); eq(st.arange(0, 1, 0.25):dtype(), "f32")
  check(st.arange(3, "f64"), {0, 1, 2}); eq(st.arange(3, "f64"):dtype(), "f64")
  check(st.linspace(0, 1, 5), {0, 0.25, 0.5, 0.75, 1})
  check(st.eye(2), {{1, 0}, {0, 1}})
  eq(H.show(st.eye(2, 3):shape()), "{2, 3}")
end)

test("random", function()
  st.manual_seed(7); local a = st.rand(100):tolist()
  st.manual_seed(7); local b = st.rand(100):tolist()
  check(a, b, 0, "same seed")
  for _, v in ipairs(a) do assert(v >= 0 and v < 1) end
  local r = st.randint(1, 3, {1000})
  eq(r:dtype(), "i64")
  local seen = {}
  for _, v in ipairs(r:tolist()) do assert(v >= 1 and v <= 3, "randint out of range: " .. v); seen[v] = true end
  assert(seen[1] and seen[2] and seen[3], "randint is inclusive of both ends")
  local n = st.randn(2000)
  assert(math.abs(n:mean():item()) < 0.15 and math.abs(n:std():item() - 1) < 0.15)
end)

test("arith_scalars_both_sides", function()
  local x = st.tensor{1, 2, 3}
  check(x + 1, {2, 3, 4}); check(1 + x, {2, 3, 4})
  check(x - 1, {0, 1, 2}); check(10 - x, {9, 8, 7})
  check(x * 2, {2, 4, 6}); check(2 * x, {2, 4, 6})
  check(x / 2, {0.5, 1, 1.5}); check(6 / x, {6, 3, 2})
  check(x ^ 2, {1, 4, 9}); check(2 ^ x, {2, 4, 8})
  check(-x, {-1, -2, -3})
  check(x * x + x, {2, 6, 12})
  check(st.tensor{-3, 3} % 2, {1, 1}, 0, "remainder takes the divisor's sign")
  check(st.tensor{-3, 3} % -2, {-1, -1}, 0)
end)

test("arith_dtypes", function()
  local f = st.ones(2)
  eq((f + 1):dtype(), "f32"); eq((f * 2.5):dtype(), "f32"); eq((1 - f):dtype(), "f32")
  local i = st.ones({2}, "i64")
  eq((i + 1):dtype(), "i64"); eq((2 * i):dtype(), "i64")
  eq((i + 1.5):dtype(), "f32", "int tensor + float number")
  eq(math.type((i + 1):tolist()[1]), "integer")
  eq((st.ones({2}, "f64") + 1):dtype(), "f64")
  eq((i + f):dtype(), "f32")
end)

test("unary_binary_methods", function()
  local x = st.tensor{1, 4, 9}
  check(x:sqrt(), {1, 2, 3}); check(st.sqrt(x), {1, 2, 3})
  check(x:neg():abs(), {1, 4, 9})
  check(st.tensor{0}:exp(), {1}); check(st.tensor{-1, 2}:relu(), {0, 2})
  check(x:maximum(4), {4, 4, 9}); check(st.minimum(x, 4), {1, 4, 4})
  check(x:eq(4):tolist(), {false, true, false}, 0)
  check(x:lt(5), {true, true, false}, 0)
  check(x:pow(0.5), {1, 2, 3})
  check(st.add(1, x), {2, 5, 10})
  check(x:clamp(2, nil), {2, 4, 9}); check(x:clamp(nil, 5), {1, 4, 5}); check(x:clamp(2, 5), {2, 4, 5})
  check(st.where(x:gt(3), x, 0), {0, 4, 9})
  check(st.where(x:gt(3), 1, -1), {-1, 1, 1})
  for _, name in ipairs{"neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu",
      "gelu", "gelu_tanh", "gelu_grad", "silu", "floor", "ceil", "round", "sign", "reciprocal", "logical_not", "log1p",
      "expm1", "square", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "fmod", "remainder", "eq",
      "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"} do
    assert(type(st[name]) == "function", "st." .. name)
    assert(type(x[name]) == "function", "x:" .. name)
  end
end)

test("matmul", function()
  local a = st.tensor{{1, 2}, {3, 4}}
  local b = st.tensor{{5, 6}, {7, 8}}
  check(a:matmul(b), {{19, 22}, {43, 50}})
  check(st.matmul(a, b), {{19, 22}, {43, 50}})
  check(st.tensor{1, 2}:matmul(st.tensor{3, 4}), 11)
end)

test("views", function()
  local x = st.arange(6)
  eq(H.show(x:reshape(2, 3):shape()), "{2, 3}")
  eq(H.show(x:reshape{3, -1}:shape()), "{3, 2}")
  eq(H.show(x:view(2, 3):shape()), "{2, 3}")
  local m = x:reshape(2, 3)
  check(m:t(), {{0, 3}, {1, 4}, {2, 5}})
  check(m:transpose(1, 2), {{0, 3}, {1, 4}, {2, 5}})
  check(m:permute(2, 1), {{0, 3}, {1, 4}, {2, 5}})
  eq(H.show(st.zeros(2, 3, 4):permute{3, 1, 2}:shape()), "{4, 2, 3}")
  eq(H.show(st.zeros(1, 3):expand(2, 3):shape()), "{2, 3}")
  eq(H.show(st.zeros(1, 3):expand(4, -1):shape()), "{4, 3}")
  eq(H.show(st.zeros(1, 3, 1):squeeze():shape()), "{3}")
  eq(H.show(st.zeros(1, 3, 1):squeeze(1):shape()), "{3, 1}")
  eq(H.show(st.zeros(3):unsqueeze(1):shape()), "{1, 3}")
  eq(H.show(st.zeros(3):unsqueeze(-1):shape()), "{3, 1}")
  eq(H.show(st.zeros(2, 3, 4):flatten():shape()), "{24}")
  eq(H.show(st.zeros(2, 3, 4):flatten(2):shape()), "{2, 12}")
  eq(H.show(st.zeros(2, 3, 4):flatten(1, 2):shape()), "{6, 4}")
  check(m:t():contiguous(), {{0, 3}, {1, 4}, {2, 5}})
  check(x:narrow(1, 2, 3), {1, 2, 3})
  check(m:select(2, 3), {2, 5})
  eq(m:size(2), 3); eq(H.show(m:size()), "{2, 3}"); eq(#m, 2)
  eq(m:device(), st.device())   -- the default device (cpu; cuda:0 under make test-sim)
  eq(m:to(st.device()), m, "to(its own device) is the tensor itself")
end)

test("casts", function()
  local x = st.tensor{1.5, -2.5}
  eq(x:to("f64"):dtype(), "f64"); eq(x:double():dtype(), "f64"); eq(x:float():dtype(), "f32")
  eq(x:long():dtype(), "i64"); eq(x:int():dtype(), "i32"); eq(x:bool():dtype(), "bool")
  eq(math.type(x:long():tolist()[1]), "integer")
  eq(st.tensor({3}, "i64"):item(), 3); eq(math.type(st.tensor({3}, "i64"):item()), "integer")
  eq(st.tensor{true}:item(), true)
end)

test("cat_stack", function()
  local a, b = st.tensor{{1, 2}}, st.tensor{{3, 4}}
  check(st.cat({a, b}), {{1, 2}, {3, 4}})
  check(st.cat({a, b}, 2), {{1, 2, 3, 4}})
  eq(H.show(st.stack({a, b}):shape()), "{2, 1, 2}")
  eq(H.show(st.stack({a, b}, 3):shape()), "{1, 2, 2}")
end)

test("index_ops_one_based", function()
  local x = st.tensor{{10, 20, 30}, {40, 50, 60}}
  check(x:index_select(2, st.tensor({3, 1}, "i64")), {{30, 10}, {60, 40}})
  check(x:index_select(1, {2}), {{40, 50, 60}})
  check(x:gather(2, st.tensor({{1, 1}, {3, 2}}, "i64")), {{10, 10}, {60, 50}})
  local z = st.zeros(3)
  check(z:scatter_add(1, st.tensor({1, 3, 1}, "i64"), st.tensor{1, 2, 3}), {4, 0, 2})
  check(z:index_add(1, st.tensor({3}, "i64"), st.tensor{5}), {0, 0, 5})
  check(st.one_hot(st.tensor({1, 3}, "i64"), 3), {{1, 0, 0}, {0, 0, 1}})
end)

test("inplace", function()
  local x = st.tensor{1, 2, 3}
  eq(x:add_(1), x, "add_ returns x")
  check(x, {2, 3, 4})
  x:sub_(st.tensor{1, 1, 1}); check(x, {1, 2, 3})
  x:mul_(2); check(x, {2, 4, 6})
  x:div_(2); check(x, {1, 2, 3})
  x:copy_(st.tensor{7, 8, 9}); check(x, {7, 8, 9})
  x:fill_(5); check(x, {5, 5, 5})
  x:zero_(); check(x, {0, 0, 0})
  local base = st.zeros(2, 2)
  local row = base[1]
  row:add_(3)
  check(base, {{3, 3}, {0, 0}}, 0, "in-place on a view writes the base")
end)

test("clone_is_independent", function()
  local x = st.tensor{1, 2}
  local y = x:clone()
  y:fill_(0)
  check(x, {1, 2})
end)

test("extend_methods", function()
  function st.Tensor.double_it(t) return t * 2 end
  check(st.tensor{1, 2}:double_it(), {2, 4})
  st.Tensor.double_it = nil
  eq(st.tensor{1}.nosuch, nil)
end)

-- Issue 13: element counts whose bytes do not fit in 64 bits are refused where the shape is made
-- (they used to wrap: a negative numel, 0 elements, a crash printing, an out-of-bounds write).
test("sizes_too_large", function()
  H.raises(function() return st.zeros(2^61, 4) end, "zeros: size (2305843009213693952, 4) is too large")
  H.raises(function() return st.zeros(2^62, 2^62) end, "is too large")
  H.raises(function() return st.zeros(2^40, 2^30) end, "zeros: size (1099511627776, 1073741824) is too large")
  H.raises(function() return st.eye(1e10) end, "eye: size (10000000000, 10000000000) is too large")
  H.raises(function() return st.zeros(2^61, "f64") end, "is too large (f64 elements")
  H.raises(function() return st.zeros(1):expand(2^62, 2^62) end, "shape (4611686018427387904, 4611686018427387904) is too large")
  H.raises(function() return st.zeros(2^30, 1, 1) + st.zeros(2^30, 2^3) end, "shape (1073741824, 1073741824, 8) is too large")  -- the broadcast result
  eq(st.zeros(2^40):numel(), 2^40)          -- large but representable: fine (nothing is allocated)
  eq(st.zeros(2^59, "f64"):numel(), 2^59)
end)

H.done()
