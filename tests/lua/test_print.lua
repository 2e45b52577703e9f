-- test_print.lua — tostring of small, large (summarized), integer, bool, 0-d and empty tensors.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq = H.test, H.eq

test("print_small_float", function()
  eq(tostring(st.tensor{{1, 2}, {3, 4}}),
     "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]], dtype=f32, shape=(2, 2), device=" .. st.device() .. ")")
end)

test("print_int_bool", function()
  local s = tostring(st.tensor({1, -20, 3}, "i64"))
  assert(s:find("tensor([  1, -20,   3], dtype=i64", 1, true), s)
  s = tostring(st.tensor{true, false})
  assert(s:find("tensor([ true, false], dtype=bool", 1, true), s)
end)

test("print_0d_empty", function()
  local s = tostring(st.tensor(2.5))
  assert(s:find("tensor(2.5000, dtype=f32, shape=", 1, true), s)
  s = tostring(st.zeros(0, 3))
  assert(s:find("tensor([], dtype=f32", 1, true), s)
end)

test("print_3d", function()
  local s = tostring(st.arange(8):reshape(2, 2, 2))
  eq(s, "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]], dtype=i64, shape=(2, 2, 2), device=" .. st.device() .. ")")
end)

test("print_large_summarized", function()
  local s = tostring(st.arange(2000))
  assert(s:find("[   0,    1,    2, ..., 1997, 1998, 1999]", 1, true), s)
  s = tostring(st.arange(2000):reshape(40, 50))
  assert(s:find("...,\n", 1, true), s)
  assert(s:find("[   0,    1,    2, ...,   47,   48,   49],", 1, true), s)
  assert(s:find("[1950, 1951, 1952, ..., 1997, 1998, 1999]]", 1, true), s)
  local lines = select(2, s:gsub("\n", "\n"))
  eq(lines, 6, "newlines in a summarized 40x50")
  -- not summarized at 1000 elements
  assert(not tostring(st.arange(1000)):find("...", 1, true))
end)

test("print_sci_nan", function()
  local s = tostring(st.tensor{1e10, 1})
  assert(s:find("e+10", 1, true), s)
  s = tostring(st.tensor{0 / 0, 1 / 0, -1 / 0, 1})
  assert(s:find("nan", 1, true) and s:find("-inf", 1, true), s)
end)

test("print_via_print", function()
  -- print() uses __tostring; a view prints its own values
  local m = st.arange(6):reshape(2, 3)
  assert(tostring(m[2]):find("[3, 4, 5]", 1, true))
  assert(tostring(m:t()):find("[[0, 3],", 1, true))
end)

H.done()
