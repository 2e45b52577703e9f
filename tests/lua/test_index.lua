-- test_index.lua — 1-based indexing, negative indices, Torch7-style slicing, assignment through
-- indexing writing into the base tensor.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check = H.test, H.eq, H.check_near

local function m34() return st.arange(12):reshape(3, 4):float() end -- rows {0..3},{4..7},{8..11}

test("index_1d_gives_numbers", function()
  local x = st.tensor{10, 20, 30}
  eq(x[1], 10); eq(x[3], 30); eq(x[-1], 30); eq(x[-3], 10)
  eq(type(x[2]), "number")
  eq(math.type(st.tensor({5, 6}, "i64")[2]), "integer")
  eq(st.tensor{true, false}[2], false)
end)

test("index_nd_gives_views", function()
  local m = m34()
  assert(st.is_tensor(m[2]))
  check(m[2], {4, 5, 6, 7}); check(m[-1], {8, 9, 10, 11})
  eq(m[2][3], 6); eq(m[-1][-1], 11)
  eq(m[{2, 3}], 6, "all dims selected: a number")
end)

test("index_out_of_range", function()
  local x = st.tensor{1, 2, 3}
  H.raises(function() return x[4] end, "out of range")
  H.raises(function() return x[0] end, "1-based")
  H.raises(function() return x[-4] end, "out of range")
  H.raises(function() return st.tensor(1)[1] end, "0-d")
  H.raises(function() return x[1.5] end, "integer")
end)

test("slice_ranges", function()
  local m = m34()
  check(m[{{1, 2}}], {{0, 1, 2, 3}, {4, 5, 6, 7}})
  check(m[{{}, 2}], {1, 5, 9})
  check(m[{{}, {2}}], {{1}, {5}, {9}})
  check(m[{{2, 3}, {2, 3}}], {{5, 6}, {9, 10}})
  check(m[{{}, {1, -1, 2}}], {{0, 2}, {4, 6}, {8, 10}})
  check(m[{-1, {-2, -1}}], {10, 11})
  check(m[{{1, 3, 2}, {}}], {{0, 1, 2, 3}, {8, 9, 10, 11}})
  eq(H.show(m[{{2, 1}}]:shape()), "{0, 4}", "{a, a-1} is empty")
  H.raises(function() return m[{{1, 5}}] end, "out of bounds")
  H.raises(function() return m[{1, 1, 1}] end, "too many indices")
  H.raises(function() return m[{{1, 2, 0}}] end, "step")
end)

test("slice_3d", function()
  local x = st.arange(24):reshape(2, 3, 4)
  check(x[{2, {}, 4}], {15, 19, 23})
  check(x[{{}, 2, {2, 3}}], {{5, 6}, {17, 18}})
  eq(H.show(x[{{}, {}, 1}]:shape()), "{2, 3}")
end)

test("assign_number", function()
  local x = st.zeros(3)
  x[2] = 5
  check(x, {0, 5, 0})
  x[-1] = 7
  check(x, {0, 5, 7})
  local m = st.zeros(2, 3)
  m[2] = 1
  check(m, {{0, 0, 0}, {1, 1, 1}})
  m[{1, 3}] = 9
  check(m, {{0, 0, 9}, {1, 1, 1}})
  m[{{}, 1}] = -1
  check(m, {{-1, 0, 9}, {-1, 1, 1}})
end)

test("assign_tensor", function()
  local m = st.zeros(3, 2)
  m[{{1, 2}, {}}] = st.tensor{{1, 2}, {3, 4}}
  check(m, {{1, 2}, {3, 4}, {0, 0}})
  m[3] = st.tensor{5, 6}
  check(m, {{1, 2}, {3, 4}, {5, 6}})
  m[{{}, 2}] = st.tensor{7} -- broadcast
  check(m, {{1, 7}, {3, 7}, {5, 7}})
  H.raises(function() m[1] = st.ones(3) end)
  check(m, {{1, 7}, {3, 7}, {5, 7}}, 0, "failed assignment leaves m unchanged")
end)

test("views_alias_base", function()
  local m = st.zeros(2, 2)
  local col = m[{{}, 2}]
  col:fill_(4)
  check(m, {{0, 4}, {0, 4}})
  m:add_(1)
  check(col, {5, 5}, 0, "the view sees writes to the base")
end)

test("len", function()
  eq(#st.zeros(5, 2), 5)
  H.raises(function() return #st.tensor(1) end, "0-d")
end)

H.done()
