-- test_tensor_sort.lua — the ops of lua_frontend/lib/tensor_sort.lua (sort, argsort, topk, cumprod,
-- multinomial, bernoulli): values against plain-Lua reference implementations (a stable insertion
-- sort, running products, counted frequencies), gradients against central finite differences
-- (f64), and the argument checks (each error names the op and the offending value or shape).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check, raises = H.test, H.eq, H.check_near, H.raises

local rnd = H.lcg(4242)

local function list(n, f)
  local r = {}
  for i = 1, n do r[i] = f(i) end
  return r
end

local function isnan(v) return v ~= v end

-- The reference order: a before b (NaN largest, equal to NaN).
local function before(a, b, desc)
  if isnan(a) or isnan(b) then
    if desc then return isnan(a) and not isnan(b) end
    return isnan(b) and not isnan(a)
  end
  if desc then return a > b end
  return a < b
end

-- Stable sort of a Lua list: values and 1-based source positions (insertion sort: plainly right).
local function ref_sort(v, desc)
  local idx = list(#v, function(i) return i end)
  for i = 2, #idx do
    local cur = idx[i]
    local j = i - 1
    while j >= 1 and before(v[cur], v[idx[j]], desc) do
      idx[j + 1] = idx[j]
      j = j - 1
    end
    idx[j + 1] = cur
  end
  return list(#idx, function(i) return v[idx[i]] end), idx
end

-- exact(got, want, what): equal lists (NaN equal to NaN, infinities compared as values).
local function exact(got, want, what)
  if st.is_tensor(got) then got = got:tolist() end
  local ok = #got == #want
  for i = 1, #want do
    if not (got[i] == want[i] or (isnan(got[i]) and isnan(want[i]))) then ok = false end
  end
  if not ok then error((what or "values") .. ": got " .. H.show(got) .. ", want " .. H.show(want), 2) end
end

-- A list with many ties: values drawn from a few levels.
local function tied(n, levels)
  return list(n, function() return math.floor((rnd() + 1) * levels / 2) end)
end

-- gradcheck(shape, f, what): the loss sum(f(x) * w) for a fixed random w; x's gradient against
-- central differences (f64).
local function gradcheck(shape, vals, f, what)
  local function make(v, grad)
    local t = st.tensor(v, "f64"):reshape(shape)
    if grad then t:requires_grad_() end
    return t
  end
  local w
  local function loss(t)
    local y = f(t)
    if not w then w = st.tensor(list(y:numel(), function() return rnd() end), "f64"):reshape(y:shape()) end
    return (y * w):sum()
  end
  local x = make(vals, true)
  loss(x):backward()
  local g = x.grad:reshape(-1):tolist()
  local eps = 1e-6
  local num = {}
  for i = 1, #vals do
    local v = vals[i]
    vals[i] = v + eps
    local lp = loss(make(vals)):item()
    vals[i] = v - eps
    local lm = loss(make(vals)):item()
    vals[i] = v
    num[i] = (lp - lm) / (2 * eps)
  end
  check(g, num, 1e-6, what or "gradient")
end

-- ---------------------------------------------------------------------------------------------
-- sort, argsort
-- ---------------------------------------------------------------------------------------------

test("sort_1d_ties_nan_both_directions", function()
  local v = tied(50, 7)
  v[5], v[17], v[40] = 0 / 0, 0 / 0, 0 / 0
  v[8], v[30] = math.huge, -math.huge
  local x = st.tensor(v, "f64")
  for _, desc in ipairs({ false, true }) do
    local rv, ri = ref_sort(v, desc)
    local sv, si = x:sort(1, desc)
    exact(sv, rv, "values desc=" .. tostring(desc))
    check(si, ri, 0, "indices desc=" .. tostring(desc))
    eq(si:dtype(), "i64")
    check(x:argsort(1, desc), ri, 0, "argsort")
  end
  -- the options table and the defaults (dim -1, ascending)
  local rv, ri = ref_sort(v, true)
  local sv, si = st.sort(x, { dim = -1, descending = true, stable = true })
  exact(sv, rv)
  check(si, ri, 0)
  local _, ai = ref_sort(v, false)
  check(x:argsort(), ai, 0, "default argsort")
end)

test("sort_along_each_dim_of_3d", function()
  local sh = { 3, 5, 4 }
  local vals = H.nested(sh, function() return math.floor(rnd() * 4) end)
  local x = st.tensor(vals, "f32")
  for d = 1, 3 do
    for _, desc in ipairs({ false, true }) do
      local sv, si = x:sort(d, desc)
      local got_v, got_i = sv:tolist(), si:tolist()
      -- every line along d against the reference
      local other = {}
      for k = 1, 3 do if k ~= d then other[#other + 1] = k end end
      for a = 1, sh[other[1]] do
        for b = 1, sh[other[2]] do
          local function at(t, i)
            local c = {}
            c[d], c[other[1]], c[other[2]] = i, a, b
            return t[c[1]][c[2]][c[3]]
          end
          local line = list(sh[d], function(i) return at(vals, i) end)
          local rv, ri = ref_sort(line, desc)
          for i = 1, sh[d] do
            eq(at(got_v, i), rv[i], "value dim " .. d)
            eq(at(got_i, i), ri[i], "index dim " .. d)
          end
        end
      end
    end
  end
end)

test("sort_integer_and_bool_dtypes", function()
  local v = { 5, -3, 7, -3, 0, 2147483647, -2147483648, 5 }
  local rv, ri = ref_sort(v, false)
  for _, dt in ipairs({ "i32", "i64" }) do
    local sv, si = st.tensor(v, dt):sort()
    eq(sv:dtype(), dt)
    check(sv, rv, 0, dt)
    check(si, ri, 0, dt)
  end
  local b = st.tensor({ true, false, true, false })
  local sv, si = b:sort(1, true)
  check(sv, { true, true, false, false }, 0)
  check(si, { 1, 3, 2, 4 }, 0)
  -- long rows, past a few hundred entries
  local long = tied(700, 40)
  local lv, li = ref_sort(long, true)
  local gv, gi = st.tensor(long, "i64"):sort(1, true)
  check(gv, lv, 0, "long values")
  check(gi, li, 0, "long indices")
end)

test("sort_edge_shapes", function()
  local v, i = st.tensor(3.5):sort()
  eq(v:item(), 3.5)
  eq(i:item(), 1)
  v, i = st.zeros({ 2, 0 }):sort(2)
  eq(H.show(v:shape()), "{2, 0}")
  eq(i:dtype(), "i64")
  v, i = st.tensor({ { 2, 1 } }):sort(1)
  check(v, { { 2, 1 } }, 0)
  check(i, { { 1, 1 } }, 0)
end)

test("sort_gradient_is_the_gather", function()
  local vals = list(12, function() return rnd() end)
  gradcheck({ 3, 4 }, vals, function(x) return (x:sort(2)) end, "sort dim 2")
  gradcheck({ 3, 4 }, vals, function(x) return (x:sort(1, true)) end, "sort dim 1 desc")
  -- the indices carry no gradient; argsort of a tensor that requires grad is fine
  local x = st.tensor(vals, "f64"):requires_grad_()
  local i = x:argsort()
  eq(i.requires_grad, false)
end)

test("sort_errors", function()
  local x = st.tensor({ { 1, 2 }, { 3, 4 } })
  raises(function() return x:sort(3) end, "sort: dim 3 out of range for a 2-d tensor")
  raises(function() return x:sort(0) end, "sort: dim 0 out of range")
  raises(function() return x:sort(1, 1) end, "sort: descending must be a boolean, got number 1")
  raises(function() return x:sort({ dim = 1, order = "up" }) end, 'sort: unknown option "order"')
  raises(function() return x:sort({ stable = 1 }) end, "sort: stable must be a boolean")
  raises(function() return x:argsort(1, false, 3) end, "argsort: unexpected argument #4 (3)")
  raises(function() return st.sort(nil) end, "sort: expected a tensor for argument #1, got nil")
end)

-- ---------------------------------------------------------------------------------------------
-- topk
-- ---------------------------------------------------------------------------------------------

test("topk_against_sorted_prefix", function()
  -- 1000 entries with ties: past the blocked path (rows longer than 2 * 128)
  local v = tied(1000, 60)
  v[100], v[900] = 0 / 0, 0 / 0
  local x = st.tensor(v, "f32")
  for _, k in ipairs({ 1, 5, 50, 300, 1000 }) do
    for _, largest in ipairs({ true, false }) do
      local rv, ri = ref_sort(v, largest)
      local tv, ti = x:topk(k, 1, largest)
      check(tv, { table.unpack(rv, 1, k) }, 0, "values k=" .. k .. " largest=" .. tostring(largest))
      check(ti, { table.unpack(ri, 1, k) }, 0, "indices k=" .. k .. " largest=" .. tostring(largest))
    end
  end
  -- a batch along dim 1 with options; k = 0
  local m = H.nested({ 600, 3 }, function() return math.floor(rnd() * 30) end)
  local t = st.tensor(m, "i64")
  local tv, ti = t:topk(7, { dim = 1, largest = true, sorted = true })
  eq(H.show(tv:shape()), "{7, 3}")
  for c = 1, 3 do
    local col = list(600, function(r) return m[r][c] end)
    local rv, ri = ref_sort(col, true)
    check(tv:select(2, c), { table.unpack(rv, 1, 7) }, 0, "column " .. c)
    check(ti:select(2, c), { table.unpack(ri, 1, 7) }, 0, "column " .. c)
  end
  -- k = 1 (argmax / argmin where the order allows): ties to the lower index
  local iv = { 4, -2, 9, -2, 9 }
  local v1, i1 = st.tensor(iv, "i32"):topk(1, 1, false)
  check(v1, { -2 }, 0)
  check(i1, { 2 }, 0, "smallest integer, first of the ties")
  v1, i1 = st.tensor(iv, "i64"):topk(1)
  check(i1, { 3 }, 0, "largest integer, first of the ties")
  local zv, zi = x:topk(0)
  eq(zv:numel(), 0)
  eq(zi:dtype(), "i64")
end)

test("topk_gradient", function()
  local vals = list(20, function() return rnd() end)
  gradcheck({ 2, 10 }, vals, function(x) return (x:topk(3)) end, "topk largest")
  gradcheck({ 2, 10 }, vals, function(x) return (x:topk(2, 1, false)) end, "topk smallest dim 1")
  -- the blocked path
  local long = list(600, function() return rnd() end)
  local x = st.tensor(long, "f64"):requires_grad_()
  local v, i = x:topk(3)
  v:sum():backward()
  local g = x.grad:tolist()
  local want = list(600, function() return 0 end)
  for _, j in ipairs(i:tolist()) do want[j] = 1 end
  check(g, want, 0, "blocked topk gradient")
end)

test("topk_errors", function()
  local x = st.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
  raises(function() return x:topk(4) end, "topk: k = 4 out of range for dim 2 of size 3 (shape (2, 3))")
  raises(function() return x:topk(-1) end, "topk: k = -1 out of range")
  raises(function() return x:topk(1.5) end, "topk: expected an integer for k")
  raises(function() return x:topk(1, 3) end, "topk: dim 3 out of range for a 2-d tensor")
  raises(function() return x:topk(1, 1, "yes") end, 'topk: largest must be a boolean, got string "yes"')
  raises(function() return x:topk(1, { dim = 1, smallest = true }) end, 'topk: unknown option "smallest"')
  raises(function() return x:topk(1, 1, true, true, 1) end, "topk: unexpected argument #6 (1)")
end)

-- ---------------------------------------------------------------------------------------------
-- cumprod
-- ---------------------------------------------------------------------------------------------

local function ref_cumprod(v)
  local r, p = {}, 1
  for i = 1, #v do p = p * v[i]; r[i] = p end
  return r
end

test("cumprod_values", function()
  -- near 1 so that 300 terms neither vanish nor overflow; zeros and a negative
  local v = list(300, function() return 1 + rnd() * 0.05 end)
  v[3] = -1.5
  local x = st.tensor(v, "f64")
  check(x:cumprod(1), ref_cumprod(v), 1e-12, "blocked")
  local short = { 2, 0, 3, -1, 4 }
  check(st.tensor(short, "f64"):cumprod(1), ref_cumprod(short), 0, "zeros")
  -- integers multiply in i64 (PyTorch); exact up to 20!
  local n20 = list(20, function(i) return i end)
  local r = st.tensor(n20, "i32"):cumprod(1)
  eq(r:dtype(), "i64")
  check(r, ref_cumprod(n20), 0, "factorials")
  eq(st.tensor({ true, true, false }):cumprod(1):dtype(), "i64")
  -- along dim 1 of a matrix
  local m = { { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } }
  check(st.tensor(m):cumprod(1), { { 1, 2, 3 }, { 4, 10, 18 }, { 28, 80, 162 } }, 0)
  check(st.tensor(m):cumprod(-1), { { 1, 2, 6 }, { 4, 20, 120 }, { 7, 56, 504 } }, 0)
end)

-- Along a dim of size 1 cumprod multiplies nothing; it returned x itself (its storage), so
-- x:fill_ showed through and an in-place write into the result went into x (an error for a leaf
-- that requires grad). Found by test_fuzz_ops.lua (seed 2537).
test("cumprod_is_a_copy", function()
  for _, d in ipairs({ 1, 2 }) do
    local x = d == 1 and st.tensor{ { 1, 2, 3 } } or st.tensor{ { 1 }, { 2 } }
    local c = x:cumprod(d)
    local want = x:tolist()
    x:fill_(5)
    check(c, want, 0, "x:fill_ after cumprod(" .. d .. ")")
    c:fill_(0)
    eq(x:sum():item(), 5.0 * x:numel(), "c:fill_ left x alone")
  end
  local w = st.ones(1, 3):requires_grad_()
  local c = w:cumprod(1)
  c:scatter_add_(1, st.tensor({ { 1, 1, 1 } }, "i64"), st.ones(1, 3))   -- not a write into the leaf
  check(c, { { 2, 2, 2 } }, 0)
end)

test("cumprod_gradient_with_zeros", function()
  local vals = list(12, function() return rnd() * 2 end)
  vals[3], vals[10] = 0, 0
  gradcheck({ 12 }, vals, function(x) return x:cumprod(1) end, "cumprod with zeros")
  local long = list(40, function() return 1 + rnd() * 0.2 end)
  long[7] = 0
  gradcheck({ 2, 20 }, long, function(x) return x:cumprod(2) end, "cumprod blocked")
  -- no NaN at a zero (a gradient that divides the output by the input would give one)
  local x = st.tensor({ 2, 0, 3 }, "f64"):requires_grad_()
  x:cumprod(1):sum():backward()
  check(x.grad, { 1, 2 + 6, 0 }, 0, "hand-computed")
end)

test("cumprod_errors", function()
  local x = st.tensor({ 1, 2 })
  raises(function() return x:cumprod() end, "cumprod: expected a dim")
  raises(function() return x:cumprod(2) end, "cumprod: dim 2 out of range for a 1-d tensor")
  raises(function() return x:cumprod(1, 2) end, "cumprod: unexpected argument #3 (2)")
end)

-- ---------------------------------------------------------------------------------------------
-- multinomial, bernoulli (laws checked by counting: 4-sigma bounds)
-- ---------------------------------------------------------------------------------------------

local function within(count, n, p, what)
  local sd = math.sqrt(n * p * (1 - p))
  if math.abs(count - n * p) > 4 * sd + 1e-9 then
    error(string.format("%s: %d of %d, expected about %.1f (sd %.1f)", what, count, n, n * p, sd), 2)
  end
end

test("multinomial_with_replacement", function()
  st.manual_seed(7)
  local w = { 1, 0, 3, 6 }                 -- unnormalized; category 2 never drawn
  local n = 20000
  local d = st.tensor({ w, { 0, 0, 0, 2 } }, "f32"):multinomial(n, true)
  eq(d:dtype(), "i64")
  eq(H.show(d:shape()), "{2, " .. n .. "}")
  local rows = d:tolist()
  local cnt = { 0, 0, 0, 0 }
  for _, c in ipairs(rows[1]) do cnt[c] = cnt[c] + 1 end
  eq(cnt[2], 0, "zero weight drawn")
  within(cnt[1], n, 0.1, "category 1")
  within(cnt[3], n, 0.3, "category 3")
  within(cnt[4], n, 0.6, "category 4")
  for _, c in ipairs(rows[2]) do eq(c, 4, "a one-category row") end
end)

test("multinomial_without_replacement", function()
  st.manual_seed(11)
  local p = st.tensor({ 0.5, 0.2, 0, 0.3 }, "f64")
  -- all non-zero categories, distinct, the zero weight last
  for _ = 1, 5 do
    local d = p:multinomial(4):tolist()
    eq(d[4], 3, "zero weight last")
    local seen = {}
    for _, c in ipairs(d) do
      assert(not seen[c], "repeated draw " .. c)
      seen[c] = true
    end
  end
  -- the first draw follows p; the second, given the first was 1, follows p without it
  local trials = 3000
  local rows = p:unsqueeze(1):expand({ trials, 4 }):contiguous():multinomial(2):tolist()
  local first, second, n1 = { 0, 0, 0, 0 }, { 0, 0, 0, 0 }, 0
  for _, r in ipairs(rows) do
    first[r[1]] = first[r[1]] + 1
    if r[1] == 1 then n1 = n1 + 1; second[r[2]] = second[r[2]] + 1 end
  end
  within(first[1], trials, 0.5, "first draw 1")
  within(first[4], trials, 0.3, "first draw 4")
  eq(first[3], 0)
  within(second[2], n1, 0.4, "second draw 2 after 1")
end)

test("multinomial_errors", function()
  local p = st.tensor({ 0.2, 0.8 })
  raises(function() return p:multinomial(3) end, "multinomial: cannot draw 3 samples without replacement from 2 categories (weights of shape (2))")
  raises(function() return p:multinomial(0) end, "multinomial: num_samples must be positive, got 0")
  raises(function() return p:multinomial(1, 1) end, "multinomial: replacement must be a boolean, got number 1")
  raises(function() return st.tensor({ 1, 2 }, "i64"):multinomial(1) end, "multinomial: expected a float tensor of weights, got i64")
  raises(function() return st.ones({ 2, 2, 2 }):multinomial(1) end, "multinomial: expected 1-d or 2-d weights, got shape (2, 2, 2)")
end)

test("bernoulli", function()
  st.manual_seed(3)
  local n = 20000
  local p = st.cat({ st.full({ n }, 0.25, "f64"), st.zeros({ 10 }, "f64"), st.ones({ 10 }, "f64") })
  local d = st.bernoulli(p)
  eq(d:dtype(), "f64")
  local v = d:tolist()
  local c = 0
  for i = 1, n do
    assert(v[i] == 0 or v[i] == 1, "not 0 or 1: " .. v[i])
    c = c + v[i]
  end
  within(c, n, 0.25, "p = 0.25")
  for i = n + 1, n + 10 do eq(v[i], 0, "p = 0") end
  for i = n + 11, n + 20 do eq(v[i], 1, "p = 1") end
  -- in place, a number or a broadcasting tensor
  local x = st.zeros({ 2, n }, "f32")
  local r = x:bernoulli_(0.75)
  assert(rawequal(r, x) or r == x, "bernoulli_ returns x")
  within(x:sum():item(), 2 * n, 0.75, "bernoulli_(0.75)")
  x:bernoulli_(st.tensor({ { 0 }, { 1 } }, "f32"))
  check(x:sum(2), { 0, n }, 0, "bernoulli_ with a tensor")
  local i = st.zeros({ 4 }, "i64"):bernoulli_(1)
  check(i, { 1, 1, 1, 1 }, 0, "integer tensor")
  raises(function() return st.bernoulli(st.ones({ 2 }, "i64")) end, "bernoulli: expected a float tensor of probabilities, got i64")
  raises(function() return x:bernoulli_(1.5) end, "bernoulli_: p must be in [0, 1], got 1.5")
  raises(function() return x:bernoulli_(st.ones({ 3 })) end, "bernoulli_: p of shape (3) does not broadcast to the tensor's shape (2, " .. n .. ")")
end)

H.done()
