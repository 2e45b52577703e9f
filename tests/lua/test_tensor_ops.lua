-- test_tensor_ops.lua — the ops of lua_frontend/lib/tensor_ops.lua: values against Lua-computed
-- expectations, gradients against central finite differences (f64), and the argument checks
-- (each error names the op and the offending value, dims 1-based).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check, raises = H.test, H.eq, H.check_near, H.raises

local M = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } }

-- Lua-side helpers: a 2-D table's entry-wise map, a 1-D list from a function.
local function map2(t, f)
  local r = {}
  for i = 1, #t do
    r[i] = {}
    for j = 1, #t[i] do r[i][j] = f(t[i][j], i, j) end
  end
  return r
end

local function list(n, f)
  local r = {}
  for i = 1, n do r[i] = f(i) end
  return r
end

-- Deterministic pseudo-random f64 values in [-1, 1) (no global RNG: the numbers are the same
-- however the tests are run).
local seed = 12345
local function rnd()
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed / 1073741824 - 1
end

-- gradcheck(shapes, f, what): f(t1, t2, ...) returns a tensor; the loss is sum(f(...) * w) for
-- a fixed random w, and the gradient of every input (f64, random values) is compared with
-- central differences of the loss.
local function gradcheck(shapes, f, what, opts)
  opts = opts or {}
  local vals = {}
  for k, sh in ipairs(shapes) do
    local n = 1
    for _, s in ipairs(sh) do n = n * s end
    vals[k] = list(n, function() return (opts.gen or rnd)() end)
  end
  local function make(k, v, grad)
    local t = st.tensor(v, "f64"):reshape(shapes[k])
    if grad then t:requires_grad_() end
    return t
  end
  local w
  local function loss(ts)
    local y = f(table.unpack(ts))
    if not w then
      w = st.tensor(list(y:numel(), function() return rnd() end), "f64"):reshape(y:shape())
    end
    return (y * w):sum()
  end
  local ins = {}
  for k = 1, #shapes do ins[k] = make(k, vals[k], true) end
  loss(ins):backward()
  local eps = 1e-6
  for k = 1, #shapes do
    local g = ins[k].grad and ins[k].grad:reshape(-1):tolist() or list(#vals[k], function() return 0 end)
    local num = {}
    for i = 1, #vals[k] do
      local plus, minus = {}, {}
      for j = 1, #shapes do
        plus[j] = make(j, vals[j], false)
        minus[j] = plus[j]
      end
      local v = vals[k][i]
      vals[k][i] = v + eps
      plus[k] = make(k, vals[k], false)
      vals[k][i] = v - eps
      minus[k] = make(k, vals[k], false)
      vals[k][i] = v
      num[i] = (loss(plus):item() - loss(minus):item()) / (2 * eps)
    end
    check(g, num, 1e-5, (what or "gradient") .. " of input " .. k)
  end
end

-- ---------------------------------------------------------------------------------------------
-- values
-- ---------------------------------------------------------------------------------------------

test("tril_triu", function()
  local x = st.tensor(M)
  for _, k in ipairs({ 0, 1, -1, 5, -5 }) do
    check(x:tril(k), map2(M, function(v, i, j) return j - i <= k and v or 0 end), 0, "tril " .. k)
    check(st.triu(x, k), map2(M, function(v, i, j) return j - i >= k and v or 0 end), 0, "triu " .. k)
  end
  check(x:tril(), map2(M, function(v, i, j) return j <= i and v or 0 end), 0, "tril default")
  -- batched over leading dims, dtypes kept
  local b = st.stack({ x, x * 2 }):long()
  local r = b:triu()
  eq(r:dtype(), "i64")
  check(r[2], map2(M, function(v, i, j) return j >= i and 2 * v or 0 end), 0, "batched triu")
  check(st.ones({ 2, 2 }, "bool"):tril(), { { true, false }, { true, true } }, 0, "bool tril")
end)

test("masked_fill", function()
  local x = st.tensor(M)
  local mask = x:gt(6)
  check(x:masked_fill(mask, -1), map2(M, function(v) return v > 6 and -1 or v end), 0)
  -- integer mask, broadcast row mask, integer tensor keeps its dtype, fraction dropped
  local im = st.tensor({ 1, 0, 0, 2 }, "i64")
  check(x:masked_fill(im, 0.5), map2(M, function(v, _, j) return (j == 1 or j == 4) and 0.5 or v end), 0)
  local xi = x:long():masked_fill(im, -2.9)
  eq(xi:dtype(), "i64")
  check(xi, map2(M, function(v, _, j) return (j == 1 or j == 4) and -2 or v end), 0)
  check(st.masked_fill(st.tensor{ true, false }, st.tensor{ false, true }, true), { true, true }, 0)
  local f = st.tensor{ 1, 2 }:masked_fill(st.tensor{ true, false }, 0 / 0):tolist()
  eq(f[1] ~= f[1], true, "NaN fill")
end)

test("flip_roll", function()
  local x = st.tensor(M)
  check(x:flip(1), { M[3], M[2], M[1] }, 0)
  check(x:flip(-1), map2(M, function(_, i, j) return M[i][5 - j] end), 0)
  check(x:flip(1, 2), map2(M, function(_, i, j) return M[4 - i][5 - j] end), 0)
  check(st.flip(x, { 2, 1 }), x:flip(1, 2), 0)
  check(x:roll(1, 2), map2(M, function(_, i, j) return M[i][(j - 2) % 4 + 1] end), 0)
  check(x:roll(-1, 1), { M[2], M[3], M[1] }, 0)
  check(x:roll(5, 2), x:roll(1, 2), 0)
  check(x:roll({ 1, 2 }, { 1, 2 }), map2(M, function(_, i, j) return M[(i - 2) % 3 + 1][(j - 3) % 4 + 1] end), 0)
  -- no dims: the flattened tensor, shape restored
  check(x:roll(1), map2(M, function(v) return v == 1 and 12 or v - 1 end), 0)
  local r = x:roll(0, 1)
  eq(r ~= x, true, "roll returns a new tensor")
  check(r, M, 0)
end)

test("repeat", function()
  local v = st.tensor{ 1, 2, 3 }
  check(v:repeat_tensor(2), { 1, 2, 3, 1, 2, 3 }, 0)
  check(v:repeat_tensor(2, 2), { { 1, 2, 3, 1, 2, 3 }, { 1, 2, 3, 1, 2, 3 } }, 0)
  local x = st.tensor{ { 1, 2 }, { 3, 4 } }
  check(x["repeat"](x, 1, 2), { { 1, 2, 1, 2 }, { 3, 4, 3, 4 } }, 0)
  check(st["repeat"](x, { 2, 1 }), { { 1, 2 }, { 3, 4 }, { 1, 2 }, { 3, 4 } }, 0)
  local r = x:repeat_tensor(2, 1, 3)
  H.eq(H.show(r:shape()), "{2, 2, 6}")
  check(r[2][2], { 3, 4, 3, 4, 3, 4 }, 0)
  H.eq(H.show(x:repeat_tensor(0, 2):shape()), "{0, 4}")
  local counts = { 1, 2 }
  x:repeat_tensor(counts)
  H.eq(H.show(counts), "{1, 2}", "the counts table is not changed")
end)

-- repeat is a new tensor (PyTorch): tiling a size-1 dim (an expand whose flatten is a stride-0 view)
-- or only adding leading dims (a reshape) used to return a view of x, so x:fill_ showed through and
-- an in-place write into the result failed (expanded view). Found by test_fuzz_ops.lua (seed 217).
test("repeat_is_a_copy", function()
  local cases = {
    { st.tensor{ { 1 }, { 2 }, { 3 } }, { 1, 2 }, { { 1, 1 }, { 2, 2 }, { 3, 3 } } },
    { st.tensor{ 1, 2, 3 }, { 1, 1 }, { { 1, 2, 3 } } },
    { st.tensor(5), { 2 }, { 5, 5 } },
    { st.tensor{ { 1, 2 } }, { 2, 1 }, { { 1, 2 }, { 1, 2 } } },
  }
  local function filled(sh, v) return #sh == 0 and v or H.nested(sh, function() return v end) end
  for i, c in ipairs(cases) do
    local x, reps, want = c[1], c[2], c[3]
    local r = x:repeat_tensor(reps)
    x:fill_(9)
    check(r, want, 0, "case " .. i .. ": x:fill_ after repeat")
    r:fill_(0)   -- not an expanded view
    check(r, filled(r:shape(), 0), 0, "case " .. i .. ": r:fill_")
    check(x, filled(x:shape(), 9), 0, "case " .. i .. ": x keeps its values")
  end
end)

test("split_chunk_unbind", function()
  local x = st.arange(10):reshape(5, 2)
  local p = x:split(2)
  eq(#p, 3)
  check(p[1], { { 0, 1 }, { 2, 3 } }, 0)
  check(p[3], { { 8, 9 } }, 0)
  p = st.split(x, { 1, 4 })
  eq(#p, 2)
  check(p[2], { { 2, 3 }, { 4, 5 }, { 6, 7 }, { 8, 9 } }, 0)
  p = x:split(1, 2)
  eq(#p, 2)
  check(p[2], { { 1 }, { 3 }, { 5 }, { 7 }, { 9 } }, 0)
  -- chunk: ceil(5 / 3) = 2 per piece, 3 pieces; ceil(5 / 4) = 2, still 3 pieces (PyTorch)
  eq(#x:chunk(3), 3)
  eq(#x:chunk(4), 3)
  check(x:chunk(2, -1)[2], { { 1 }, { 3 }, { 5 }, { 7 }, { 9 } }, 0, "chunk keeps the dim")
  eq(H.show(x:chunk(2, -1)[2]:shape()), "{5, 1}")
  local u = x:unbind(2)
  eq(#u, 2)
  check(u[1], { 0, 2, 4, 6, 8 }, 0)
  check(st.unbind(x)[5], { 8, 9 }, 0)
  -- the pieces are views: writing through one changes x
  local y = st.zeros(4)
  y:split(2)[2]:fill_(1)
  check(y, { 0, 0, 1, 1 }, 0)
end)

test("movedim", function()
  local x = st.zeros(2, 3, 4, 5)
  eq(H.show(x:movedim(1, -1):shape()), "{3, 4, 5, 2}")
  eq(H.show(x:movedim(-1, 1):shape()), "{5, 2, 3, 4}")
  eq(H.show(x:movedim({ 1, 2 }, { 4, 3 }):shape()), "{4, 5, 3, 2}")
  local y = st.arange(6):reshape(2, 3)
  check(st.movedim(y, 1, 2), y:t(), 0)
end)

test("pad", function()
  local x = st.tensor{ { 1, 2, 3 }, { 4, 5, 6 } }
  check(x:pad({ 1, 2 }), { { 0, 1, 2, 3, 0, 0 }, { 0, 4, 5, 6, 0, 0 } }, 0)
  check(x:pad({ 0, 0, 1, 0 }, "constant", 9), { { 9, 9, 9 }, { 1, 2, 3 }, { 4, 5, 6 } }, 0)
  check(x:pad({ 1, 0 }, { value = -1 }), { { -1, 1, 2, 3 }, { -1, 4, 5, 6 } }, 0)
  check(x:pad({ -1, 1 }), { { 2, 3, 0 }, { 5, 6, 0 } }, 0, "negative pad crops")
  check(x:pad({ 2, 2 }, "reflect"), { { 3, 2, 1, 2, 3, 2, 1 }, { 6, 5, 4, 5, 6, 5, 4 } }, 0)
  check(x:pad({ 1, 1, 1, 1 }, "reflect"),
    { { 5, 4, 5, 6, 5 }, { 2, 1, 2, 3, 2 }, { 5, 4, 5, 6, 5 }, { 2, 1, 2, 3, 2 } }, 0)
  check(x:pad({ 2, 1 }, { mode = "replicate" }), { { 1, 1, 1, 2, 3, 3 }, { 4, 4, 4, 5, 6, 6 } }, 0)
  check(x:pad({ 1, 3 }, "circular"), { { 3, 1, 2, 3, 1, 2, 3 }, { 6, 4, 5, 6, 4, 5, 6 } }, 0)
  local xi = x:long():pad({ 1, 0 }, "constant", 7)
  eq(xi:dtype(), "i64")
  check(xi[1], { 7, 1, 2, 3 }, 0)
  check(st.pad(x, {}), x, 0)
  check(st.tensor{ true }:pad({ 1, 1 }), { false, true, false }, 0, "bool pad")
  local pads = { 1, 1 }
  x:pad(pads, "reflect")
  eq(H.show(pads), "{1, 1}", "the pads table is not changed")
end)

-- pad is a new tensor (PyTorch): pads that only crop used to return a narrow view of x, so x:fill_
-- showed through and an in-place write into the result wrote into x (into a leaf that requires
-- grad: an error). Found by test_fuzz_ops.lua (seeds 1058, 1085).
test("pad_is_a_copy", function()
  for _, pads in ipairs({ { -1, 0 }, { -1, -1, 0, 0 }, { 0, 0 }, { 0, -2, -1, 0 } }) do
    local x = st.tensor{ { 1, 2, 3 }, { 4, 5, 6 } }
    local p = x:pad(pads)
    local want = p:tolist()
    x:fill_(9)
    check(p, want, 0, "x:fill_ after pad " .. H.show(pads))
    p:fill_(0)
    check(x, { { 9, 9, 9 }, { 9, 9, 9 } }, 0, "p:fill_ after pad " .. H.show(pads))
  end
  local w = st.ones(4):requires_grad_()
  local p = w:pad({ -1, 0 })
  p[st.tensor{ true, false, true }] = 0   -- not a write into the leaf
  check(p, { 0, 1, 0 }, 0)
end)

test("isnan_isinf_isfinite", function()
  local x = st.tensor{ 1, 0 / 0, math.huge, -math.huge, -2 }
  check(x:isnan(), { false, true, false, false, false }, 0)
  check(x:isinf(), { false, false, true, true, false }, 0)
  check(st.isfinite(x), { true, false, false, false, true }, 0)
  local i = st.tensor({ 1, 2 }, "i64")
  check(i:isnan(), { false, false }, 0)
  check(i:isinf(), { false, false }, 0)
  check(i:isfinite(), { true, true }, 0)
  eq(x:double():isnan():dtype(), "bool")
end)

test("lerp_addcmul_addcdiv", function()
  local a, b = st.tensor{ 1, 2, 3 }, st.tensor{ 3, 6, 9 }
  check(a:lerp(b, 0.5), { 2, 4, 6 }, 1e-6)
  check(st.lerp(a, b, st.tensor{ 0, 1, 0.25 }), { 1, 6, 4.5 }, 1e-6)
  check(a:addcmul(a, b), { 4, 14, 30 }, 1e-6)
  check(a:addcmul(a, b, 2), { 7, 26, 57 }, 1e-6)
  check(a:addcdiv(b, a, { value = -1 }), { -2, -1, 0 }, 1e-6)
  check(st.addcdiv(a, b, a), { 4, 5, 6 }, 1e-6)
end)

test("norm", function()
  local x = st.tensor({ { 3, -4, 0 }, { 1, 2, -2 } }, "f64")
  check(x:norm(), math.sqrt(9 + 16 + 1 + 4 + 4), 1e-12)
  check(x:norm("fro"), math.sqrt(34), 1e-12)
  check(x:norm(2, 2), { 5, 3 }, 1e-12)
  check(x:norm(1, 2), { 7, 5 }, 1e-12)
  check(x:norm(math.huge, 1), { 3, 4, 2 }, 1e-12)
  check(x:norm(-math.huge, 2), { 0, 1 }, 1e-12)
  check(x:norm(math.huge), 4, 1e-12)
  check(x:norm(-math.huge, nil, true), { { 0 } }, 1e-12)
  check(st.tensor(-2.5):norm(math.huge), 2.5, 1e-7)
  check(st.tensor(-2.5):norm(), 2.5, 1e-7)
  check(x:norm(0, 2), { 2, 3 }, 1e-12)
  check(x:norm(3, { 1, 2 }), (27 + 64 + 1 + 8 + 8) ^ (1 / 3), 1e-12)
  local k = x:norm(2, 2, true)
  eq(H.show(k:shape()), "{2, 1}")
  eq(x:float():norm():dtype(), "f32")
end)

test("all_any", function()
  local x = st.tensor{ { 1, 0, 2 }, { 3, 4, 5 } }
  eq(x:all():item(), false)
  eq(x:any():item(), true)
  check(x:all(2), { false, true }, 0)
  check(x:any(1), { true, true, true }, 0)
  check(st.all(x, 1, true), { { true, false, true } }, 0)
  check(st.tensor{ 0 / 0, 0 }:any(), true, 0, "NaN is true")
  eq(st.zeros(0):all():item(), true)
  eq(st.zeros(0):any():item(), false)
  eq(st.tensor{ true, true }:all():item(), true)
end)

test("clamp_tensor_bounds", function()
  local x = st.tensor{ -3, 0, 3, 6 }
  check(x:clamp(st.tensor{ -1, 1, 1, 1 }, st.tensor{ 0, 2, 2, 5 }), { -1, 1, 2, 5 }, 0)
  check(x:clamp(st.tensor{ 0, 0, 4, 0 }), { 0, 0, 4, 6 }, 0)
  check(x:clamp(nil, st.tensor(2)), { -3, 0, 2, 2 }, 0)
  check(st.clamp(x, 1, st.tensor(0)), { 0, 0, 0, 0 }, 0, "max wins where min > max")
  check(x:clamp(0, 4), { 0, 0, 3, 4 }, 0, "number bounds")
end)

test("cumsum", function()
  -- 32 and below: one masked sum; above: blocks of 16 (one level from 33, two from 513)
  for _, n in ipairs({ 1, 2, 3, 5, 8, 13, 32, 33, 47, 100, 600 }) do
    local v = list(n, function(i) return i * i - 3 end)
    local want, s = {}, 0
    for i = 1, n do s = s + v[i]; want[i] = s end
    check(st.tensor(v):cumsum(1), want, 1e-6, "cumsum n=" .. n)
    local iv = st.tensor(v, "i32"):cumsum(-1)
    eq(iv:dtype(), "i64")
    check(iv, want, 0)
  end
  check(st.tensor(M):cumsum(1), { M[1], { 6, 8, 10, 12 }, { 15, 18, 21, 24 } }, 0)
  -- a blocked scan along a middle dim
  local x = st.arange(2 * 50 * 3):reshape(2, 50, 3)
  local c = x:cumsum(2)
  eq(H.show(c:shape()), "{2, 50, 3}")
  local want2, s2 = {}, 0
  for i = 1, 50 do s2 = s2 + (150 + (i - 1) * 3 + 2); want2[i] = s2 end
  check(c[{ 2, {}, 3 }], want2, 0)
  check(x:cumsum(-1)[{ 1, 7 }], { 18, 37, 57 }, 0)
  check(st.cumsum(st.tensor{ true, false, true }, 1), { 1, 1, 2 }, 0)
  -- integers stay exact past f32's 2^24
  check(st.tensor({ 2 ^ 40, 1, 1 }, "i64"):cumsum(1):tolist(), { 2 ^ 40, 2 ^ 40 + 1, 2 ^ 40 + 2 }, 0)
  local big = list(70, function(i) return i == 1 and (1 << 40) or 1 end)
  eq(st.tensor(big, "i64"):cumsum(1):tolist()[70], (1 << 40) + 69, "blocked, exact")
  eq(st.zeros(0, 3):cumsum(1):numel(), 0)
end)

test("atan2", function()
  -- every octant, the axes, zeros, tiny, huge and infinite values, against Lua's math.atan(y, x)
  local vals = { 0, 1, -1, 0.5, -0.5, 3, -3, 1e-30, -1e-30, 1e30, -1e30, 2.5, -7, math.huge, -math.huge }
  local ys, xs = {}, {}
  for _, a in ipairs(vals) do
    for _, b in ipairs(vals) do ys[#ys + 1] = a; xs[#xs + 1] = b end
  end
  for k = 1, 500 do ys[#ys + 1] = (k * 0.7919) % 10 - 5; xs[#xs + 1] = (k * 0.3141) % 10 - 5 end
  for _, c in ipairs({ { "f64", 1e-15 }, { "f32", 3e-7 } }) do
    local yt, xt = st.tensor(ys, c[1]), st.tensor(xs, c[1])
    local r = st.atan2(yt, xt)
    eq(r:dtype(), c[1])
    local got, yl, xl = r:tolist(), yt:double():tolist(), xt:double():tolist()
    for i = 1, #got do
      local want = math.atan(yl[i], xl[i])
      if not (math.abs(got[i] - want) <= c[2] * math.max(1, math.abs(want)) * 1.0000001) then
        error(c[1] .. ": atan2(" .. yl[i] .. ", " .. xl[i] .. ") = " .. got[i] .. ", want " .. want)
      end
    end
  end
  check(st.tensor{ 1e-30, -3e-20 }:atan2(1), { 1e-30, -3e-20 }, 1e-6, "tiny angles, relative")
  check(st.atan2(st.tensor({ 1, -1 }, "i64"), st.tensor({ 0, 0 }, "i32")), { math.pi / 2, -math.pi / 2 }, 1e-7)
  eq(st.atan2(st.tensor({ 1 }, "i64"), 2):dtype(), "f32")
  local n = st.atan2(st.tensor{ 0 / 0, 1 }, st.tensor{ 1, 0 / 0 }):tolist()
  eq(n[1] ~= n[1] and n[2] ~= n[2], true, "NaN in, NaN out")
end)

test("like_constructors", function()
  local x = st.ones({ 2, 3 }, "f64")
  local z = st.zeros_like(x)
  eq(z:dtype(), "f64"); eq(H.show(z:shape()), "{2, 3}"); eq(z:device(), x:device())
  check(z, { { 0, 0, 0 }, { 0, 0, 0 } }, 0)
  eq(st.ones_like(x, "i32"):dtype(), "i32")
  check(st.ones_like(x), x, 0)
  check(st.full_like(x, 2.5), { { 2.5, 2.5, 2.5 }, { 2.5, 2.5, 2.5 } }, 0)
  eq(st.full_like(x, 2, "i64"):dtype(), "i64")
  eq(H.show(st.empty_like(x):shape()), "{2, 3}")
  local r = st.rand_like(x)
  eq(r:dtype(), "f64")
  eq(r:ge(0):all():item() and r:lt(1):all():item(), true)
  eq(st.randn_like(st.zeros(5, 7)):dtype(), "f32")
end)

test("randperm", function()
  st.manual_seed(3)
  local p = st.randperm(20)
  eq(p:dtype(), "i64")
  local seen = {}
  for _, v in ipairs(p:tolist()) do seen[v] = true end
  for i = 1, 20 do eq(seen[i], true, "randperm holds " .. i) end
  st.manual_seed(3)
  check(st.randperm(20), p, 0, "same seed, same order")
  eq(st.randperm(5, "i32"):dtype(), "i32")
  eq(st.randperm(0):numel(), 0)
  check(st.randperm(1), { 1 }, 0)
  -- 1-based: usable as an index at once
  local x = st.arange(10)
  check(x:index_select(1, st.randperm(10)):sum(), 45, 0)
end)

-- Helper tensors (masks, indices, fill blocks) are made on the input's device, whatever the
-- default device (on the simulated GPU the default is cuda:0, so the cpu pass is the cross one).
local function ops_on(x)
  local dev = x:device()
  local outs = {
    x:tril(), x:triu(1), x:flip(1), x:roll(1, 2), x:repeat_tensor(2, 1), x:pad({ 1, 1 }),
    x:pad({ 1, 1 }, "reflect"), x:cumsum(2), x:norm(2, 2), x:all(), x:isinf(),
    x:masked_fill(x:gt(5), 0), st.zeros_like(x), st.full_like(x, 2), st.rand_like(x),
  }
  for i, t in ipairs(outs) do eq(t:device(), dev, "result " .. i .. " on " .. dev) end
  check(x:cumsum(2)[3], { 9, 19, 30, 42 }, 0)
  check(x:pad({ 1, 1 }, "reflect")[1], { 2, 1, 2, 3, 4, 3 }, 0)
  st.sync(outs)
end

test("devices", function()
  local default = st.device()
  ops_on(st.tensor(M):to("cpu"))
  if st.cuda_device_count() > 0 then
    ops_on(st.tensor(M):to("cuda:0"))
    st.set_device("cpu")
    local ok, err = pcall(ops_on, st.tensor(M):to("cuda:0"))
    st.set_device(default)
    assert(ok, err)
  end
  eq(st.device(), default, "default device restored")
end)

-- ---------------------------------------------------------------------------------------------
-- gradients (f64, central differences)
-- ---------------------------------------------------------------------------------------------

test("grad_tri_mask_flip_roll", function()
  gradcheck({ { 2, 3, 4 } }, function(x) return x:tril(1) end, "tril")
  gradcheck({ { 3, 3 } }, function(x) return x:triu(-1) end, "triu")
  local mask = st.tensor{ { true, false, true }, { false, false, true } }
  gradcheck({ { 2, 3 } }, function(x) return x:masked_fill(mask, 4) end, "masked_fill")
  gradcheck({ { 2, 3 } }, function(x) return x:flip(1, 2) * x end, "flip")
  gradcheck({ { 3, 4 } }, function(x) return x:roll({ 1, -1 }, { 1, 2 }) * x:exp() end, "roll")
  gradcheck({ { 5 } }, function(x) return x:roll(2) end, "roll flat")
end)

test("grad_shape_ops", function()
  gradcheck({ { 2, 3 } }, function(x) return x:repeat_tensor(2, 1, 2) end, "repeat")
  gradcheck({ { 5, 2 } }, function(x)
    local p = x:split({ 2, 3 })
    return st.cat({ p[2] * 2, p[1]:exp() }, 1)
  end, "split")
  gradcheck({ { 5, 2 } }, function(x)
    local p = x:chunk(2)
    return p[1]:sum(1) * p[2]:sum(1)
  end, "chunk")
  gradcheck({ { 3, 2 } }, function(x)
    local u = x:unbind(1)
    return u[1] * u[3]
  end, "unbind")
  gradcheck({ { 2, 3, 4 } }, function(x) return x:movedim(1, 3) end, "movedim")
end)

test("grad_pad", function()
  gradcheck({ { 2, 3 } }, function(x) return x:pad({ 1, 2, 0, 1 }, "constant", 3) end, "pad constant")
  gradcheck({ { 2, 4 } }, function(x) return x:pad({ -1, 2 }) end, "pad crop")
  gradcheck({ { 3, 4 } }, function(x) return x:pad({ 2, 3, 1, 2 }, "reflect") end, "pad reflect")
  gradcheck({ { 2, 3 } }, function(x) return x:pad({ 2, 1, 1, 0 }, "replicate") end, "pad replicate")
  gradcheck({ { 2, 3 } }, function(x) return x:pad({ 3, 2 }, "circular") end, "pad circular")
end)

test("grad_pointwise", function()
  gradcheck({ { 2, 3 }, { 2, 3 }, { 2, 3 } }, function(a, b, w) return a:lerp(b, w) end, "lerp")
  gradcheck({ { 2, 3 }, { 2, 3 }, { 3 } }, function(a, b, c) return a:addcmul(b, c, 0.5) end, "addcmul")
  local pos = function() return 0.5 + (rnd() + 1) end
  gradcheck({ { 4 }, { 4 }, { 4 } }, function(a, b, c) return a:addcdiv(b, c, { value = -2 }) end, "addcdiv",
    { gen = pos })
  -- clamp with tensor bounds: inputs away from the bounds' ties
  local lo = st.tensor({ -0.5, -0.5, 0.2, -2 }, "f64")
  gradcheck({ { 4 }, { 4 } }, function(x, hi) return x:clamp(lo, hi + 0.1) end, "clamp")
  gradcheck({ { 3, 4 } }, function(x) return x:cumsum(2) end, "cumsum")
  gradcheck({ { 9 } }, function(x) return x:cumsum(1) * x end, "cumsum 9")
  gradcheck({ { 40 } }, function(x) return x:cumsum(1) * x end, "cumsum 40 (blocked)")
  gradcheck({ { 35, 2 } }, function(x) return x:cumsum(1) end, "cumsum dim 1 (blocked)")
end)

test("grad_atan2", function()
  gradcheck({ { 2, 3 }, { 2, 3 } }, function(y, x) return y:atan2(x) end, "atan2")
  gradcheck({ { 3 } }, function(y) return st.atan2(y, -0.5) end, "atan2 number x")
  -- the known formula: d/dy = x / r^2, d/dx = -y / r^2, in every quadrant
  local yv, xv = { 1, 2, -3, -0.5 }, { 2, -1, -4, 0.25 }
  local y, x = st.tensor(yv, "f64"):requires_grad_(), st.tensor(xv, "f64"):requires_grad_()
  y:atan2(x):sum():backward()
  local gy, gx = {}, {}
  for i = 1, 4 do
    local r2 = xv[i] ^ 2 + yv[i] ^ 2
    gy[i], gx[i] = xv[i] / r2, -yv[i] / r2
  end
  check(y.grad, gy, 1e-14)
  check(x.grad, gx, 1e-14)
end)

test("grad_norm", function()
  gradcheck({ { 2, 3 } }, function(x) return x:norm() end, "norm 2")
  gradcheck({ { 2, 3 } }, function(x) return x:norm(2, 2, true) end, "norm 2 dim")
  gradcheck({ { 2, 3 } }, function(x) return x:norm(1, 1) end, "norm 1")
  gradcheck({ { 2, 3 } }, function(x) return x:norm(3, 2) end, "norm 3")
  gradcheck({ { 2, 3 } }, function(x) return x:norm(math.huge, 2) end, "norm inf")
  -- the gradient of an all-zero slice is 0, not NaN
  local z = st.zeros({ 2, 3 }, "f64"):requires_grad_()
  z:norm(2, 2):sum():backward()
  check(z.grad, { { 0, 0, 0 }, { 0, 0, 0 } }, 0)
  z.grad = nil
  z:norm(3):backward()
  check(z.grad, { { 0, 0, 0 }, { 0, 0, 0 } }, 0)
end)

-- ---------------------------------------------------------------------------------------------
-- argument checks
-- ---------------------------------------------------------------------------------------------

test("errors_dims", function()
  local x = st.zeros(2, 3)
  raises(function() x:flip(0) end, "flip: dim 0 out of range for a 2-d tensor")
  raises(function() x:flip(3) end, "flip: dim 3 out of range")
  raises(function() x:flip(1, -2) end, "flip: dim 1 appears twice")
  raises(function() x:flip() end, "flip: expected dims")
  raises(function() x:flip("a") end, "flip: expected an integer for dim, got string")
  raises(function() x:flip(1.5) end, "flip: expected an integer for dim, got 1.5")
  raises(function() x:roll(1, 0) end, "roll: dim 0 out of range")
  raises(function() x:roll({ 1, 2 }, 1) end, "roll: 2 shifts for 1 dims")
  raises(function() x:roll("a") end, "roll: expected an integer for shifts")
  raises(function() x:split(2, -3) end, "split: dim -3 out of range")
  raises(function() x:split(0) end, "split: split size must be positive, got 0")
  raises(function() x:split({ 1, 2 }) end, "split: sections {1, 2} sum to 3, not to the size 2 of dim 1")
  raises(function() x:chunk(0) end, "chunk: number of chunks must be positive, got 0")
  raises(function() x:chunk(2, 3) end, "chunk: dim 3 out of range")
  raises(function() x:unbind(0) end, "unbind: dim 0 out of range")
  raises(function() x:movedim(1, 5) end, "movedim: dim 5 out of range")
  raises(function() x:movedim({ 1, 2 }, 1) end, "movedim: source {1, 2} and destination 1 differ in length")
  raises(function() x:movedim({ 1, 1 }, { 1, 2 }) end, "movedim: dim 1 appears twice")
  raises(function() x:cumsum() end, "cumsum: expected a dim")
  raises(function() x:cumsum(0) end, "cumsum: dim 0 out of range")
  raises(function() x:norm(2, 3) end, "norm: dim 3 out of range")
  raises(function() x:all(0) end, "all: dim 0 out of range")
  raises(function() x:any(1, 1) end, "any: keepdim must be a boolean, got number 1")
  raises(function() x:any("x") end, "any: dim must be a number or a table of numbers, got string")
  raises(function() st.zeros(3):tril() end, "tril: expected a tensor with at least 2 dims, got shape (3)")
  raises(function() x:triu(0.5) end, "triu: expected an integer for the diagonal k, got 0.5")
  raises(function() x:repeat_tensor(2) end, "repeat: 1 repeat counts for a tensor of shape (2, 3)")
  raises(function() x:repeat_tensor(1, -1) end, "repeat: repeat count 2 is negative (-1)")
  raises(function() x:repeat_tensor(1, "b") end, "repeat: expected an integer for repeat count 2, got string")
end)

test("errors_values_options", function()
  local x = st.zeros(2, 3)
  raises(function() st.flip(5, 1) end, "flip: expected a tensor for argument #1, got number 5")
  raises(function() x:masked_fill(st.zeros(3), 1) end, "masked_fill: the mask must be bool or integer, got f32")
  raises(function() x:masked_fill(x:gt(0), "a") end, "masked_fill: expected a number or boolean for the value, got string")
  raises(function() x:masked_fill(nil, 1) end, "masked_fill: expected a tensor for the mask, got nil")
  raises(function() x:masked_fill(st.zeros(4, 2, 3):gt(0), 1) end,
    "masked_fill: mask of shape (4, 2, 3) does not broadcast to the tensor's shape (2, 3)")
  raises(function() st.zeros(2, "i32"):masked_fill(st.tensor{ true, true }, 2 ^ 40) end,
    "masked_fill: value 1099511627776.0 cannot be converted to type i32 without overflow")
  raises(function() x:pad({ 1 }) end, "pad: pads {1} must hold a (before, after) pair per padded dim")
  raises(function() x:pad({ 1, 1, 1, 1, 1, 1 }) end, "at most 2 pairs for shape (2, 3)")
  raises(function() x:pad({ 1, 1 }, "wrap") end, "pad: mode must be \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"wrap\"")
  raises(function() x:pad({ 1, 1 }, { mode = "reflect", valu = 1 }) end, "pad: unknown option \"valu\" (known: mode, value)")
  raises(function() x:pad({ 1, 1 }, "reflect", 0) end, "pad: mode \"reflect\" takes no value")
  raises(function() x:pad({ 3, 0 }, "reflect") end, "pad: pads 3, 0 too large for mode \"reflect\" and dim 2 of size 3")
  raises(function() x:pad({ 0, 4 }, "circular") end, "pad: pads 0, 4 too large for mode \"circular\"")
  raises(function() x:pad({ -1, 0 }, "replicate") end, "pad: mode \"replicate\" takes no negative pads")
  raises(function() x:pad({ -4, 0 }) end, "pad: pad -4 crops more than the size 3 of dim 2")
  raises(function() x:pad({ 1, "a" }) end, "pad: expected an integer for pads entry 2, got string")
  raises(function() x:pad(1) end, "pad: pads must be a table of integers, got number")
  raises(function() x:addcmul(x, x, { scale = 2 }) end, "addcmul: unknown option \"scale\" (known: value)")
  raises(function() x:addcdiv(x, 2) end, "addcdiv: expected a tensor for tensor2, got number 2")
  raises(function() x:addcmul(x, x, "2") end, "addcmul: value must be a number, got string")
  raises(function() x:lerp(x, "w") end, "lerp: expected a tensor or number for weight, got string")
  raises(function() x:lerp(1, 0.5) end, "lerp: expected a tensor for end, got number 1")
  raises(function() st.zeros(2, "i64"):norm() end, "norm: expected a float tensor, got i64")
  raises(function() x:norm("nuc") end, "norm: p must be a number or \"fro\", got \"nuc\"")
  raises(function() x:clamp("a") end, "clamp: min must be a number, tensor or nil, got string")
  raises(function() x:atan2("1") end, "atan2: expected a tensor for x (a tensor or number), got string")
  raises(function() st.atan2(1, x) end, "atan2: expected a tensor for argument #1, got number 1")
  raises(function() x:atan2(x, 1) end, "atan2: unexpected argument #3 (1)")
  raises(function() st.zeros_like(x, "f99") end, "zeros_like: unknown dtype \"f99\"")
  raises(function() st.ones_like(x, "f32", "cpu") end, "ones_like: unexpected argument \"cpu\"")
  raises(function() st.full_like(x) end, "full_like: expected a number or boolean for the value, got nil")
  raises(function() st.full_like({}, 1) end, "full_like: expected a tensor for argument #1, got table")
  raises(function() st.randperm(-1) end, "randperm: n must be non-negative, got -1")
  raises(function() st.randperm(2.5) end, "randperm: expected an integer for n, got 2.5")
  raises(function() st.randperm(3, "bool") end, "randperm: dtype bool cannot hold 1..n")
  -- no argument is dropped
  raises(function() x:tril(1, 2) end, "tril: unexpected argument #3 (2): it takes at most 2")
  raises(function() st.cumsum(x, 1, "f64") end, "cumsum: unexpected argument #3 (\"f64\")")
  raises(function() x:norm(2, 1, false, "x") end, "norm: unexpected argument #5")
  raises(function() x:isnan(1) end, "isnan: unexpected argument #2 (1)")
  raises(function() x:flip({ 1 }, 2) end, "flip: dims given as a table and then more arguments")
  raises(function() x:repeat_tensor({ 1, 1 }, 2) end, "repeat: counts given as a table and then more arguments")
  eq(x:tril(1, nil):dim(), 2, "a trailing nil is no argument")
  -- the error carries the caller's position (also through the argument-count wrapper)
  for _, f in ipairs({ function() x:tril(0.5) end, function() x:cumsum(0) end, function() x:split(0) end,
                       function() x:chunk(2, 5) end, function() x:pad({ 1 }) end, function() x:tril(1, 2) end }) do
    local e2 = raises(f)
    eq(e2:find("test_tensor_ops.lua:", 1, true) ~= nil, true, "position in " .. e2)
  end
  local err = raises(function() x:flip(0) end, "flip:")
  eq(err:find("test_tensor_ops.lua:", 1, true) ~= nil, true, "position in " .. err)
end)

test("comparisons cast to float: NaN, infinities and signed zeros as Lua compares them (compiled)", function()
  -- C kernels render a float cast of a float comparison as C's operator (jit/render_c.c): the
  -- same 0 or 1 as the comparison op, NaN unordered
  local vals = {0 / 0, math.huge, -math.huge, 0.0, -0.0, 1.5, -1.5, 1e-30, 3.0, 3.0}
  local av, bv = {}, {}
  for rep = 1, 600 do
    for i = 1, #vals do
      for j = 1, #vals do av[#av + 1], bv[#bv + 1] = vals[i], vals[j] end
    end
  end
  local ops = {
    eq = function(a, b) return a == b end, ne = function(a, b) return a ~= b end,
    lt = function(a, b) return a < b end, le = function(a, b) return a <= b end,
    gt = function(a, b) return a > b end, ge = function(a, b) return a >= b end,
  }
  for _, dt in ipairs({"f32", "f64"}) do
    local a, b = st.tensor(av, dt), st.tensor(bv, dt)
    for name, f in pairs(ops) do
      for _, to in ipairs({"f32", "f64"}) do
        local r = st.sync((a[name](a, b):to(to) * 2 + 1)):tolist()
        for i = 1, #vals * #vals do
          local want = f(av[i], bv[i]) and 3 or 1
          if r[i] ~= want then
            error(string.format("%s %s -> %s: %s vs %s gave %s, want %s", dt, name, to, tostring(av[i]),
              tostring(bv[i]), tostring(r[i]), want))
          end
        end
      end
    end
  end
end)

H.done()

-- as_strided: a view of x's elements in C order with any strides (st_as_strided). Overlapping
-- windows read the same elements; their gradients add up (runtime/grad.c view_adjoint_of, step 6:
-- a sum over the window taps of injective views' gradients).
test("as_strided: overlapping windows, their gradients, the argument checks", function()
  local x = st.tensor(list(12, function() return rnd() end), "f64"):reshape(3, 4):requires_grad_()
  local w = x:as_strided({2, 3, 2}, {4, 1, 1}, 1)   -- w[a][b][c] = flat x[1 + 4(a-1) + (b-1) + (c-1) + 1]
  local flat = x:reshape(12)
  local rows = {}
  for a = 1, 2 do
    local r = {}
    for b = 1, 3 do r[b] = flat:narrow(1, 2 + 4 * (a - 1) + (b - 1), 2) end
    rows[a] = st.stack(r, 1)
  end
  local ref = st.stack(rows, 1)
  check(w, ref, 0, "as_strided values")
  local r = st.tensor(list(12, function() return rnd() end), "f64"):reshape(2, 3, 2)
  ;(w * r):sum():backward()
  local gw = x.grad
  x.grad = nil
  ;(ref * r):sum():backward()
  local gr = x.grad
  check(gw, gr, 1e-12, "as_strided gradient (overlapping windows add up)")
  -- 3x3 windows at stride 2 of a 5x5 image (unfold's layout): the adjoint identity <V x, r> = <x, V^T r>
  local img = st.tensor(list(50, function() return rnd() end), "f64"):reshape(2, 1, 5, 5):requires_grad_()
  local win = img:as_strided({2, 1, 3, 3, 2, 2}, {25, 25, 5, 1, 10, 2})
  local rr = st.tensor(list(72, function() return rnd() end), "f64"):reshape(2, 1, 3, 3, 2, 2)
  local lin = (win * rr):sum()
  lin:backward()
  local g = img.grad
  check((g * img:detach()):sum():item(), lin:item(), 1e-12, "stride-2 windows: <V x, r> = <x, V^T r>")
  eq(win[{2, 1, 3, 2, 2, 1}], img[{2, 1, 5, 2}], "tap (3, 2) of output (2, 1) reads row 2*2+3, col 2*0+2 (5, 2)")
  raises(function() return x:as_strided({3, 5}, {4, 1}) end,
    "as_strided: size (3, 5) with strides (4, 1) and offset 0 reaches element 12 of a tensor of 12 elements")
  raises(function() return x:as_strided({2, 2}, {-1, 1}) end, "as_strided: dim 1 has size 2 and stride -1")
  raises(function() return x:as_strided({2, 2}, {1}) end, "as_strided: 2 sizes but 1 strides")
  raises(function() return x:as_strided({2}, {1}, -1) end, "offset -1")
end)
