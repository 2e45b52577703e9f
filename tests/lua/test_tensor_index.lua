-- test_tensor_index.lua — lua_frontend/lib/tensor_index.lua: scatter, nonzero and tensor keys
-- (x[mask], x[mask] = v, x[idx], x[idx] = v): values against plain-Lua loops, gradients against
-- central finite differences (f64), and the errors (shapes and dtypes named, 1-based).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check, raises = H.test, H.eq, H.check_near, H.raises

local rnd = H.lcg(977)

local function list(n, f)
  local r = {}
  for i = 1, n do r[i] = f(i) end
  return r
end

local function copy2(t)
  local r = {}
  for i = 1, #t do r[i] = { table.unpack(t[i]) } end
  return r
end

local function i64(v) return st.tensor(v, "i64") end

-- gradcheck(inputs, f, what): inputs a list of {shape, values}; the loss sum(f(...) * w) for a
-- fixed random w; every input's gradient against central differences (f64).
local function gradcheck(inputs, f, what)
  local function make(k, grad)
    local t = st.tensor(inputs[k][2], "f64"):reshape(inputs[k][1])
    if grad then t:requires_grad_() end
    return t
  end
  local w
  local function loss(ts)
    local y = f(table.unpack(ts))
    if not w then w = st.tensor(list(y:numel(), function() return rnd() end), "f64"):reshape(y:shape()) end
    return (y * w):sum()
  end
  local ins = {}
  for k = 1, #inputs do ins[k] = make(k, true) end
  loss(ins):backward()
  for k = 1, #inputs do
    local vals = inputs[k][2]
    local g = ins[k].grad and ins[k].grad:reshape(-1):tolist() or list(#vals, function() return 0 end)
    local num = {}
    for i = 1, #vals do
      local v = vals[i]
      local function at(x)
        vals[i] = x
        local ts = {}
        for j = 1, #inputs do ts[j] = make(j, false) end
        return loss(ts):item()
      end
      num[i] = (at(v + 1e-6) - at(v - 1e-6)) / 2e-6
      vals[i] = v
    end
    check(g, num, 1e-6, (what or "gradient") .. " of input " .. k)
  end
end

-- ---------------------------------------------------------------------------------------------
-- scatter
-- ---------------------------------------------------------------------------------------------

test("scatter_against_loops", function()
  local x = H.nested({ 3, 4 }, function() return math.floor(rnd() * 10) end)
  local src = H.nested({ 2, 4 }, function() return math.floor(rnd() * 10) + 100 end)
  -- dim 1: a permutation of rows per column (no repeats)
  local idx1 = { { 3, 1, 2, 1 }, { 1, 3, 3, 2 } }
  local want = copy2(x)
  for i = 1, 2 do for j = 1, 4 do want[idx1[i][j]][j] = src[i][j] end end
  check(st.tensor(x):scatter(1, i64(idx1), st.tensor(src)), want, 0, "dim 1")
  -- dim 2, index smaller than src (src's leading part), i32 index
  local idx2 = { { 4, 2 }, { 1, 3 } }
  want = copy2(x)
  for i = 1, 2 do for j = 1, 2 do want[i][idx2[i][j]] = src[i][j] end end
  check(st.tensor(x):scatter(2, st.tensor(idx2, "i32"), st.tensor(src)), want, 0, "dim 2")
  -- a value; integer dtype kept
  want = copy2(x)
  for i = 1, 2 do for j = 1, 2 do want[i][idx2[i][j]] = -7 end end
  local r = st.tensor(x, "i64"):scatter(2, i64(idx2), -7)
  eq(r:dtype(), "i64")
  check(r, want, 0, "value")
  -- repeats: the mean of what lands there (and one value repeated is that value)
  local rep = st.zeros({ 3 }, "f64"):scatter(1, i64({ 2, 2, 3 }), st.tensor({ 1, 4, 5 }, "f64"))
  check(rep, { 0, 2.5, 5 }, 0, "repeats average")
  check(st.zeros({ 3 }, "i64"):scatter(1, i64({ 2, 2 }), i64({ 1, 4 })), { 0, 2, 0 }, 0, "integer repeats round down")
  local big = 2 ^ 40 + 1                   -- past f32's 2^24: the mean is exact
  eq(st.zeros({ 2 }, "i64"):scatter(1, i64({ 1, 1 }), i64({ big, big + 2 })):tolist()[1], math.tointeger(big + 1), "large integers")
  check(st.zeros({ 3 }):scatter(1, i64({ 1, 1, 1 }), 9), { 9, 0, 0 }, 0, "value repeats")
  -- bool; a Lua table index; st.scatter
  check(st.zeros({ 3 }, "bool"):scatter(1, { 3 }, true), { false, false, true }, 0, "bool")
  check(st.scatter(st.zeros({ 2 }), 1, { 2 }, st.tensor({ 5 })), { 0, 5 }, 0, "table index")
end)

test("scatter_gradient", function()
  local x = { { 3, 4 }, list(12, function() return rnd() end) }
  local src = { { 2, 4 }, list(8, function() return rnd() end) }
  local idx = i64({ { 3, 1, 2, 1 }, { 1, 3, 3, 2 } })
  gradcheck({ x, src }, function(a, s) return a:scatter(1, idx, s) end, "scatter dim 1")
  local rep = i64({ { 2, 2, 1, 2 } })
  gradcheck({ { { 1, 4 }, list(4, function() return rnd() end) }, { { 1, 4 }, list(4, function() return rnd() end) } },
    function(a, s) return a:scatter(2, rep, s) end, "scatter with repeats")
  gradcheck({ x }, function(a) return a:scatter(2, i64({ { 1 }, { 4 }, { 2 } }), 0.5) end, "scatter value")
end)

test("scatter_errors", function()
  local x = st.zeros({ 3, 4 })
  raises(function() return x:scatter(1, st.tensor({ { 1 } }), x) end, "scatter: index must be i32 or i64, got f32")
  raises(function() return x:scatter(3, i64({ { 1 } }), 1) end, "scatter: dim 3 out of range for a 2-d tensor")
  raises(function() return x:scatter(1, i64({ 1 }), 1) end, "scatter: index of shape (1) must have as many dims as the tensor of shape (3, 4)")
  raises(function() return x:scatter(1, i64({ { 1, 2 } }), st.zeros({ 1, 1 })) end, "scatter: src of shape (1, 1) is smaller than index of shape (1, 2) in dim 2")
  raises(function() return x:scatter(1, i64({ { 1 } }), "a") end, "scatter: expected a tensor for src (a tensor or a number), got string")
  raises(function() return x:scatter(1, i64({ { 1 } }), 1, 2) end, "scatter: unexpected argument")
  -- an index out of range: at the sync point, 1-based
  raises(function() return x:scatter(1, i64({ { 4 } }), 1):tolist() end, "out of range")
end)

test("scatter_in_place", function()
  local x0 = H.nested({ 3, 4 }, function() return math.floor(rnd() * 10) end)
  local src = H.nested({ 2, 4 }, function() return math.floor(rnd() * 10) + 100 end)
  local idx = { { 3, 1, 2, 1 }, { 1, 3, 3, 2 } }
  local want = copy2(x0)
  for i = 1, 2 do for j = 1, 4 do want[idx[i][j]][j] = src[i][j] end end
  local x = st.tensor(x0)
  local row2 = x:narrow(1, 2, 1)               -- a view: sees the write
  local r = x:scatter_(1, i64(idx), st.tensor(src))
  assert(rawequal(r, x), "scatter_ returns its tensor")
  check(x, want, 0, "scatter_")
  check(row2, { want[2] }, 0, "scatter_ through a view")
  -- scatter_add_: repeats add up
  want = copy2(x0)
  for i = 1, 2 do for j = 1, 4 do want[idx[i][j]][j] = want[idx[i][j]][j] + src[i][j] end end
  x = st.tensor(x0)
  local col = x:narrow(2, 1, 1)
  eq(rawequal(x:scatter_add_(1, i64(idx), st.tensor(src)), x), true, "scatter_add_ returns its tensor")
  check(x, want, 0, "scatter_add_")
  check(col, { { want[1][1] }, { want[2][1] }, { want[3][1] } }, 0, "scatter_add_ through a view")
  check(st.zeros({ 3 }, "i64"):scatter_add_(1, i64({ 2, 2, 3 }), i64({ 1, 4, 5 })), { 0, 5, 5 }, 0, "integer repeats")
  -- the gradient of an in-place scatter on a non-leaf: as scatter's
  gradcheck({ { { 3, 4 }, list(12, function() return rnd() end) }, { { 2, 4 }, list(8, function() return rnd() end) } },
    function(a, s) return (a * 1):scatter_(1, i64(idx), s) end, "scatter_")
  gradcheck({ { { 3, 4 }, list(12, function() return rnd() end) }, { { 2, 4 }, list(8, function() return rnd() end) } },
    function(a, s) return (a * 1):scatter_add_(1, i64(idx), s) end, "scatter_add_")
  -- errors name the in-place op, at the caller's line
  local z = st.zeros({ 3, 4 })
  local err = raises(function() local _ = z:scatter_(3, i64({ { 1 } }), 1) end, "scatter_: dim 3 out of range for a 2-d tensor")
  assert(err:find("test_tensor_index.lua:%d+: scatter_:"), "no position in: " .. err)
  raises(function() return z:scatter_(1, i64({ { 1, 2 } }), st.zeros({ 1, 1 })) end, "scatter_: src of shape (1, 1) is smaller")
  err = raises(function() local _ = z:scatter_add_(1, st.tensor({ { 1 } }), z) end, "scatter_add_:")
  assert(err:find("test_tensor_index.lua:%d+: scatter_add_:"), "no position in: " .. err)
  raises(function() return z:scatter_add_(1, i64({ { 1 } }), z, 5) end, "scatter_add_: unexpected argument")
  raises(function() return z:scatter_(1, i64({ { 1 } }), 1, 2) end, "scatter_: unexpected argument")
  check(z, H.nested({ 3, 4 }, function() return 0 end), 0, "a failed call leaves the tensor alone")
end)

-- ---------------------------------------------------------------------------------------------
-- nonzero
-- ---------------------------------------------------------------------------------------------

test("nonzero_against_loops", function()
  local sh = { 3, 4, 5 }
  local v = H.nested(sh, function() return rnd() > 0.3 and 0 or math.floor(rnd() * 5) + 1 end)
  local want = {}
  for a = 1, 3 do for b = 1, 4 do for c = 1, 5 do
    if v[a][b][c] ~= 0 then want[#want + 1] = { a, b, c } end
  end end end
  local r = st.tensor(v):nonzero()
  eq(r:dtype(), "i64")
  check(r, want, 0, "3-d")
  check(st.tensor({ false, true, true }):nonzero(), { { 2 }, { 3 } }, 0, "bool")
  eq(H.show(st.zeros({ 2, 3 }):nonzero():shape()), "{0, 2}")
  eq(H.show(st.tensor(5):nonzero():shape()), "{1, 0}")
  eq(H.show(st.nonzero(st.tensor(0)):shape()), "{0, 0}")
  raises(function() return st.zeros({ 2 }):nonzero(1) end, "nonzero: unexpected argument")
end)

-- ---------------------------------------------------------------------------------------------
-- x[mask], x[mask] = v
-- ---------------------------------------------------------------------------------------------

test("mask_read", function()
  local v = H.nested({ 3, 4 }, function() return math.floor(rnd() * 10) end)
  local x = st.tensor(v)
  local m = x:gt(4)
  local want = {}
  for i = 1, 3 do for j = 1, 4 do if v[i][j] > 4 then want[#want + 1] = v[i][j] end end end
  check(x[m], want, 0, "full mask")
  -- a mask of the leading dim: rows
  local r = x[st.tensor({ true, false, true })]
  check(r, { v[1], v[3] }, 0, "row mask")
  -- nothing selected: (0, rest)
  eq(H.show(x[st.zeros({ 3 }, "bool")]:shape()), "{0, 4}")
  eq(H.show(x[st.zeros({ 3, 4 }, "bool")]:shape()), "{0}")
  -- a view's mask
  check(x:t()[st.tensor({ true, false, false, true })], { { v[1][1], v[2][1], v[3][1] }, { v[1][4], v[2][4], v[3][4] } }, 0, "transposed")
end)

test("mask_read_gradient", function()
  local vals = list(12, function() return rnd() end)
  local m = st.tensor({ { true, false, true, true }, { false, false, true, false }, { true, true, false, false } })
  gradcheck({ { { 3, 4 }, vals } }, function(x) return x[m] end, "x[mask]")
  gradcheck({ { { 3, 4 }, vals } }, function(x) return x[st.tensor({ false, true, true })] end, "x[row mask]")
end)

test("mask_write", function()
  local v = H.nested({ 3, 4 }, function() return math.floor(rnd() * 10) end)
  local x = st.tensor(v)
  local view = x:narrow(1, 2, 1)            -- sees the write (same storage)
  x[x:gt(4)] = -1
  local want = copy2(v)
  for i = 1, 3 do for j = 1, 4 do if v[i][j] > 4 then want[i][j] = -1 end end end
  check(x, want, 0, "number")
  check(view, { want[2] }, 0, "a view of the storage")
  -- a tensor of the true count, in order
  local y = st.tensor(v)
  local m = y:gt(4)
  local c = 0
  want = copy2(v)
  for i = 1, 3 do for j = 1, 4 do if v[i][j] > 4 then c = c + 1; want[i][j] = 100 + c end end end
  y[m] = st.arange(101, 101 + c):float()
  check(y, want, 0, "tensor")
  -- rows, a broadcasting value
  local z = st.tensor(v)
  z[st.tensor({ false, true, true })] = st.tensor({ 1, 2, 3, 4 })
  check(z, { v[1], { 1, 2, 3, 4 }, { 1, 2, 3, 4 } }, 0, "rows broadcast")
  z[st.tensor({ true, false, false })] = st.tensor({ { 9, 9, 9, 9 } })
  check(z, { { 9, 9, 9, 9 }, { 1, 2, 3, 4 }, { 1, 2, 3, 4 } }, 0, "rows")
  local b = st.zeros({ 3 }, "bool")
  b[st.tensor({ true, false, true })] = true
  check(b, { true, false, true }, 0, "bool")
end)

-- ---------------------------------------------------------------------------------------------
-- x[idx], x[idx] = v
-- ---------------------------------------------------------------------------------------------

test("index_read", function()
  local v = H.nested({ 4, 3 }, function() return math.floor(rnd() * 10) end)
  local x = st.tensor(v)
  check(x[i64({ 3, 1, 3 })], { v[3], v[1], v[3] }, 0, "1-d index")
  local r = x[st.tensor({ { 4, 2 }, { 1, 1 } }, "i32")]
  eq(H.show(r:shape()), "{2, 2, 3}")
  check(r, { { v[4], v[2] }, { v[1], v[1] } }, 0, "2-d index")
  check(st.tensor({ 5, 6, 7 })[i64({ 2 })], { 6 }, 0, "1-d tensor")
  eq(H.show(x[i64({})]:shape()), "{0, 3}")
  gradcheck({ { { 4, 3 }, list(12, function() return rnd() end) } }, function(a) return a[i64({ 2, 4, 2 })] end, "x[idx]")
end)

test("index_write", function()
  local v = H.nested({ 4, 3 }, function() return math.floor(rnd() * 10) end)
  local x = st.tensor(v)
  x[i64({ 2, 4 })] = 0
  check(x, { v[1], { 0, 0, 0 }, v[3], { 0, 0, 0 } }, 0, "number")
  x = st.tensor(v)
  x[i64({ 3, 1 })] = st.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
  check(x, { { 4, 5, 6 }, v[2], { 1, 2, 3 }, v[4] }, 0, "rows")
  x = st.tensor(v, "i64")
  x[st.tensor({ 1 }, "i32")] = st.tensor({ 7, 8, 9 }, "i64")
  check(x, { { 7, 8, 9 }, v[2], v[3], v[4] }, 0, "broadcast row, i32 index")
  local y = st.zeros({ 5 })
  y[i64({ 5, 1 })] = st.tensor({ 2, 3 })
  check(y, { 3, 0, 0, 0, 2 }, 0, "1-d")
end)

test("tensor_key_errors", function()
  local x = st.zeros({ 3, 4 })
  raises(function() return x[st.tensor({ 1, 2 })] end, "index: a tensor key must be a bool mask or an i32/i64 index tensor, got a f32 tensor of shape (2)")
  raises(function() return x[st.tensor({ true, false })] end, "index: mask of shape (2) does not match the leading dims of the tensor of shape (3, 4)")
  raises(function() return x[st.zeros({ 3, 4, 1 }, "bool")] end, "mask of shape (3, 4, 1) does not match")
  raises(function() return x[st.tensor(true)] end, "index: a 0-d bool mask is not supported")
  raises(function() return st.tensor(1)[i64({ 1 })] end, "index: cannot index a 0-d tensor with an index tensor of shape (1)")
  raises(function() x[x:gt(0)] = "a" end, "index: the assigned value must be a number, boolean or tensor, got string")
  raises(function() x[st.ones({ 3 }, "bool")] = st.ones({ 2, 4 }) end, "index: value of shape (2, 4) does not broadcast to the masked rows of shape (3, 4)")
  raises(function() x[i64({ 1, 2 })] = st.ones({ 3, 4 }) end, "index: value of shape (3, 4) does not broadcast to the indexed rows of shape (2, 4)")
  raises(function() x[{ 1, i64({ 1 }) }] = 0 end, "bad index at position 2: a tensor inside a table key is not supported")
  -- an index out of range: at the sync point, 1-based
  raises(function() return x[i64({ 4 })]:tolist() end, "out of range")
  -- the error points at the indexing line
  local err = raises(function() return x[st.tensor({ 1.5 })] end)
  assert(err:find("test_tensor_index.lua:%d+: index:"), "no position in: " .. err)
end)

H.done()
