-- test_errors.lua: what a Lua user sees when a call is wrong (issue 13, "Lua-facing correctness").
-- Every dim, index and list position in a message counts from 1, as the Lua API does (the C
-- library marks them and the module renders them 1-based: st_last_error_base(1)); bad values are
-- errors naming the value, never a silent zero row, a dropped argument or a wrapped integer.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check = H.test, H.eq, H.check_near

local function m22() return st.tensor{{1, 2}, {3, 4}} end
-- Index values are checked where the data is: the CPU's interpreter and kernels name the value and
-- its dim; a GPU kernel raises a flag read at the next sync, which names the op and the kernel
-- only (docs/cuda.md, "Errors"). The messages with positions are checked on the CPU on every
-- machine, and on a GPU default device the op's name is checked too.
local function cpu(t) return t:to("cpu") end
local function i64(v) return cpu(st.tensor(v, "i64")) end

test("positions_are_1_based", function()
  local x = cpu(m22())
  -- an index tensor entry 4 along dim 2 (of size 2): reported as the user wrote it
  H.raises(function() return x:gather(2, i64({{4, 1}, {1, 1}})):tolist() end,
           "gather: index 4 out of range for dim 2 of size 2")
  H.raises(function() return x:index_select(1, i64({3})):tolist() end,
           "index 3 out of range for dim 1 of size 2")
  H.raises(function() return x:scatter_add(1, i64({{3, 1}}), cpu(st.ones(1, 2))):tolist() end,
           "scatter_add: index 3 out of range for dim 1 of size 2")
  if st.device() ~= "cpu" then   -- on the GPU: the op is named
    H.raises(function() return m22():gather(2, st.tensor({{4, 1}, {1, 1}}, "i64")):tolist() end,
             "gather: index out of range")
  end
  H.raises(function() return st.cat({st.ones(2, 3), st.ones(2, 4)}, 1) end,
           "cat: tensor 2 has shape (2, 4), incompatible with (2, 3) along dim 1")
  H.raises(function() return st.stack({st.ones(2), st.ones(3)}) end, "stack: tensor 2 has shape (3) but tensor 1 has (2)")
  H.raises(function() return x:permute(1, 1) end, "permute: dim 1 appears twice")
  H.raises(function() return x:permute({2, 2}) end, "permute: dim 2 appears twice")
  H.raises(function() return st.ones(2, 3, 4):flatten(3, 2) end, "flatten: start dim 3 comes after end dim 2")
  H.raises(function() return x:sum({1, 1}) end, "sum: dim 1 given twice")
  H.raises(function() return x:sum({2, -1}) end, "sum: dim 2 given twice")
  H.raises(function() return st.zeros(2, 0):max(2) end, "max: cannot reduce over dim 2 of size 0")
  H.raises(function() local e = st.ones(3, 1):expand(3, 2); e:fill_(1) end, "dim 2 has stride 0")
end)

test("positions_are_1_based_in_backward", function()
  if st.eager() then print("SKIP " .. "positions_are_1_based_in_backward" .. ": eager mode raises at the op, not in the backward's flush") return end
  -- a failure inside backward keeps its marked positions through the rule's arena
  local x = cpu(st.ones(2, 2)):requires_grad_()
  local y = x:gather(2, i64({{3, 1}, {1, 1}})):sum()
  H.raises(function() y:backward(); st.sync(x.grad) end, "index 3 out of range for dim 2 of size 2")
end)

test("large_positions_are_not_truncated", function()
  -- lua_Integer values were printed through (int): 2^40 showed as index 0
  local x = st.ones(3)
  H.raises(function() return x[1 << 40] end, "index 1099511627776 out of range for dim 1 of size 3")
  H.raises(function() return x[{{1, 1 << 40}}] end, "range {1, 1099511627776} out of bounds")
  H.raises(function() return x:sum(1 << 33) end, "dim 8589934592 out of range")
  H.raises(function() return x:narrow(1, 1 << 33, 1) end, "narrow: start 8589934592 + length 1")
  H.raises(function() return st.randint(1 << 40, 1, {2}) end, "randint: empty range [1099511627776, 1]")
end)

test("list_entries_are_named", function()
  local x = m22()
  local e = H.raises(function() return st.cat({x, 3}) end, "bad list entry 2: expected a tensor, got number")
  assert(not e:find("#-1", 1, true), e)
  e = H.raises(function() return st.sync({x, 3}) end, "bad list entry 2: expected a tensor, got number")
  assert(not e:find("#-1", 1, true), e)
  e = H.raises(function() return x:sum({1, "a"}) end, "bad dim list entry 2: expected an integer, got string")
  assert(not e:find("#-", 1, true), e)
  H.raises(function() return x:reshape({2, "a"}) end, "bad size list entry 2: expected an integer, got string")
  local y = st.ones(2)
  getmetatable(y).__close(y)
  H.raises(function() return st.cat({x, y}) end, "bad list entry 2: tensor was closed")
  H.raises(function() return st.sync({x, y}) end, "bad list entry 2: tensor was closed")
  H.raises(function() return x + y end, "bad argument #2 to 'add' (tensor was closed)")
end)

test("one_hot_checks_classes", function()
  H.raises(function() return st.one_hot(i64({1, 5}), 3) end,
           "one_hot: class 5 out of range for 3 classes (index of shape (2))")
  H.raises(function() return st.one_hot(i64({0, 2}), 3) end, "one_hot: class 0 out of range")
  if st.device() ~= "cpu" then   -- on the GPU: the op is named
    H.raises(function() return st.one_hot(st.tensor({1, 5}, "i64"), 3):tolist() end, "one_hot")
  end
  H.raises(function() return st.one_hot(st.tensor({1}, "i64"), -2) end, "one_hot: -2 classes")
  H.raises(function() return st.one_hot(st.tensor({}, "i64")) end, "cannot infer the number of classes")
  -- a computed (lazy) index is checked too
  H.raises(function() return st.one_hot(i64({1, 2}) * 2, 3) end, "class 4 out of range for 3 classes")
  check(st.one_hot(st.tensor({1, 3}, "i64")):tolist(), {{1, 0, 0}, {0, 0, 1}})
  check(st.one_hot(st.tensor({1, 3}, "i64"), -1):shape(), {2, 3})
  check(st.one_hot(st.tensor({2}, "i32"), 4):tolist(), {{0, 1, 0, 0}})
end)

test("index_tensors_must_be_integers", function()
  local x = m22()
  local b = st.tensor({{true, false}, {true, true}})
  H.raises(function() return x:gather(2, b) end, "gather: index must be i32 or i64, got bool")
  H.raises(function() return x:index_select(1, st.tensor({1}, "bool")) end, "index_select: index must be i32 or i64, got bool")
  H.raises(function() return x:scatter_add(1, b, st.ones(2, 2)) end, "scatter_add: index must be i32 or i64, got bool")
  H.raises(function() return st.one_hot(st.tensor({true})) end, "one_hot: index must be i32 or i64, got bool")
  H.raises(function() return x:gather(2, st.tensor({{1.0, 2.0}, {1.0, 1.0}})) end, "got f32")
end)

test("sizes_are_not_dropped", function()
  local x = m22()
  H.raises(function() return x:reshape("a") end, "bad argument #1 to 'reshape' (expected integer sizes")
  H.raises(function() return x:view(4, "a") end, "bad argument #2 to 'view'")
  H.raises(function() return x:expand(2, 2, {}) end, "got table")
  H.raises(function() return x:permute(2, 1, "x") end, "expected integer dims")
  H.raises(function() return x:reshape(2, nil, 2) end, "bad argument #3 to 'reshape'")
  check(x:reshape(4, nil):shape(), {4})  -- trailing nils are fine
  check(x:permute({2, 1}):shape(), {2, 2})
end)

test("grad_of_a_non_tensor", function()
  local g = st.grad(function(a) return 3 end)
  H.raises(function() g(m22()) end, "grad: the function must return a one-element tensor, got number 3")
  H.raises(function() st.grad(function(a) end)(m22()) end, "got nil")
  H.raises(function() st.grad(function(a) return a * 2 end)(m22()) end, "got shape (2, 2)")
  H.raises(function() st.grad(42) end, "grad: expected a function, got number")
  local ok, err = pcall(g, m22())
  assert(not ok and not err:find("attempt to index", 1, true), err)
  check(st.grad(function(a) return (a * a):sum() end)(m22()):tolist(), {{2, 4}, {6, 8}})
end)

test("device_numbers_are_not_names", function()
  local x = st.ones(2)
  H.raises(function() return x:cuda(99) end, "got the number 99 (the device numbered 99 is \"cuda:99\")")
  H.raises(function() return x:to(1) end, "got the number 1")
  H.raises(function() return x:to({}) end, "got table")
  H.raises(function() return x:to("cuda:99") end, "cuda:99")
  eq(x:to(x:device()), x)
end)

test("integer_overflow_is_an_error", function()
  -- PyTorch: "value cannot be converted to type int32 without overflow"
  H.raises(function() return st.tensor({2^63}, "i64") end,
           "tensor: value 9.2233720368548e+18 at [1] cannot be converted to type i64 without overflow")
  H.raises(function() return st.tensor({{1, 2}, {3, 2^40}}, "i32") end,
           "value 1099511627776.0 at [2][2] cannot be converted to type i32 without overflow")
  H.raises(function() return st.tensor({1 << 40}, "i32") end, "cannot be converted to type i32")
  H.raises(function() return st.tensor({0 / 0}, "i64") end, "without overflow")
  H.raises(function() return st.tensor(2^63, "i64") end, "cannot be converted to type i64 without overflow")
  local t = st.zeros(2, "i32")
  H.raises(function() t[1] = 2^40 end, "fill_: value 1099511627776 cannot be converted to type i32 without overflow")
  H.raises(function() t:fill_(2^31) end, "cannot be converted to type i32")
  H.raises(function() t:fill_(math.huge) end, "cannot be converted to type i32")
  H.raises(function() return st.full({2}, 2^40, "i32") end, "full: value 1099511627776")
  H.raises(function() return st.full({2}, -2^63 * 2, "i64") end, "full: value")
  check(t:tolist(), {0, 0}, 0, "t untouched")
  -- the edges of each range are fine; fractions are dropped toward zero (as in C and PyTorch)
  check(st.tensor({2^31 - 1, -2^31, 2.9, -2.9}, "i32"):tolist(), {2147483647, -2147483648, 2, -2})
  local big = st.tensor({math.maxinteger, math.mininteger, -2^63}, "i64"):tolist()  -- exact, not via a double
  eq(big[1], math.maxinteger)
  eq(big[2], math.mininteger)
  eq(big[3], math.mininteger)
  t[2] = 2^31 - 1
  t:narrow(1, 1, 1):fill_(-2^31)
  check(t:tolist(), {-2147483648, 2147483647})
  check(st.full({1}, 1e300, "bool"):tolist(), {true})
  check(st.tensor({1e300}, "bool"):tolist(), {true})
end)

-- creation functions end their arguments at the dtype: an extra one (a device, a typo) is an error
test("creation_extra_arguments", function()
  H.raises(function() return st.randn(2, 3, "f32", "cpu") end, 'randn: unexpected argument #4 ("cpu")')
  H.raises(function() return st.zeros({2, 3}, "f32", {device = "cpu"}) end, "zeros: unexpected argument #3 (a table)")
  H.raises(function() return st.full({2}, 1, "f32", 5) end, "full: unexpected argument #4 (a number)")
  H.raises(function() return st.arange(5, "i64", "x") end, 'arange: unexpected argument #3 ("x")')
  H.raises(function() return st.eye(3, 3, "f32", true) end, "eye: unexpected argument #4 (a boolean)")
  H.raises(function() return st.randint(1, 6, 4, "i64", "cpu") end, 'randint: unexpected argument #5 ("cpu")')
  H.raises(function() return st.linspace(0, 1, 5, "f32", 2) end, "linspace: unexpected argument #5 (a number)")
  eq(st.zeros({2}, nil):numel(), 2, "a trailing nil is no argument")
end)

-- found by tests/fuzz (fuzz_index, fuzz_idx): the most negative index and a shape with a 0 and
-- huge dims are errors or empty, without arithmetic overflow (the sanitizer pass checks that)
test("fuzz_found_edges", function()
  local t = st.arange(6):reshape(2, 3)
  H.raises(function() return t[math.mininteger] end, "out of range")
  H.raises(function() return t[{1, math.mininteger}] end, "out of range")
  H.raises(function() return t[{{math.mininteger, -1}}] end, "out of bounds for dim 1")
  -- a huge step: one element, no overflow
  eq(t[{{1, 2, math.maxinteger}}]:size(1), 1, "rows with a huge step")
  eq(t[{{}, {1, 3, math.maxinteger}}]:size(2), 1, "columns with a huge step")
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  -- IDX ubyte, dims (0, 2^31 - 1, 2^31 - 1, 62976): numel 0, the strides beyond int64
  f:write(string.char(0, 0, 8, 4) .. string.pack(">I4>I4>I4>I4", 0, 2^31 - 1, 2^31 - 1, 62976))
  f:close()
  local ok, x = pcall(st.read_idx, path)
  os.remove(path)
  if ok then eq(x:numel(), 0, "an empty IDX tensor") end
end)

H.done()
