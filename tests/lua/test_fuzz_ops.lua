-- test_fuzz_ops.lua — the differential fuzzer of the tensor ops written as compositions (Lua in
-- lua_frontend/lib/tensor_ops.lua, tensor_sort.lua, tensor_index.lua, and the C ops they build on):
-- seeded random programs of 3-12 ops (sort, argsort, topk, cumsum, cumprod, tril/triu, masked_fill,
-- x[mask], x[idx] and assignment through them, scatter/scatter_/scatter_add_, nonzero, repeat, flip,
-- roll, split/chunk/unbind, pad in its four modes, movedim, atan2, isnan/isinf/isfinite, clamp with
-- tensor bounds, lerp, addcmul/addcdiv, norm, all/any, the *_like creators, where, gather,
-- index_select, mixed with elementwise, reduction, view, cast and comparison ops) on random shapes
-- (1-4 dims, sizes 1-7, now and then a long last dim for the blocked scans and topk), f32 or f64
-- with i64 and bool values where the ops take them. Each program runs twice:
--   * the reference: every tensor on the CPU, eager mode (st.eager(true): each op through the
--     reference interpreter as it is recorded);
--   * fused: on the default device (the simulated GPU under tests/sim/run.sh), lazy, realized in
--     one flush at the end (plus the flushes the ops make themselves: sort's keys, nonzero's count,
--     and random `sync` steps), with poisoned buffers; every JIT_EVERY-th program with jit_min 0
--     (every kernel compiled), the others in the default tier;
-- and every value of the program is compared: integers, bools and exact floats for equality (NaN
-- equal to NaN, +0 to -0), the other floats within the dtype's tolerance relative to the tensor's
-- magnitude (test_fuzz.c's rule). A third of the programs are f64 with inputs that require grad and
-- end in a loss (sum of values times fixed weights); the inputs' gradients are compared too.
--
-- Exactness (what test_fuzz.c calls exact): a value is exact when it is bit-identical in both runs:
-- elementwise ops (the prelude's own functions on every device), views, gathers and index copies
-- of exact values. Float sums (sum, mean, cumsum, norm, scatter_add with repeated indices) are not.
-- Every op that jumps on its input's value (comparisons, sort, topk, nonzero, masks, casts to
-- integers, all/any) takes exact inputs only; integer and bool values are exact by construction.
-- `bound` bounds |value| so integer ops never overflow and floats stay finite unless an input has
-- NaN/inf on purpose. Generation decisions depend only on shapes, dtypes and the seed (and, for
-- x[mask] = tensor, on the count of an exact mask), so both runs record the same ops.
--
--   build/stitch tests/lua/test_fuzz_ops.lua                 40 programs (12 on a GPU) from seed 1
--   ST_FUZZ_OPS_N=5000 ST_FUZZ_OPS_FIRST=1000 build/stitch tests/lua/test_fuzz_ops.lua   a long run
--   ST_FUZZ_OPS_SEED=123 build/stitch tests/lua/test_fuzz_ops.lua   one seed, its program printed
--   ST_FUZZ_OPS_ONLY=sort,pad / ST_FUZZ_OPS_SKIP=nonzero     restrict the draw (op names below)
--   ST_FUZZ_OPS_JIT_EVERY=1                                  every program with compiled kernels
-- A failing seed prints its program (one line per step, with each value's dtype, shape and `~` for
-- inexact), then a minimized program: the steps the failing value depends on, then every step
-- whose removal keeps the failure removed (each input's values printed).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")

local function env_num(name) return tonumber(os.getenv(name) or "") end
local ONE_SEED = env_num("ST_FUZZ_OPS_SEED")
-- (fewer on a GPU: every fused group is a compiled kernel there, and on the simulated GPU each
-- compile is a C++ build; tests/sim/run.sh runs this file under three schedules)
local COUNT = env_num("ST_FUZZ_OPS_N") or (st.device():match("^cuda") and 12 or 40)
local FIRST = env_num("ST_FUZZ_OPS_FIRST") or 1
local JIT_EVERY = env_num("ST_FUZZ_OPS_JIT_EVERY") or 4
local VERBOSE = ONE_SEED ~= nil or os.getenv("ST_FUZZ_OPS_VERBOSE") == "1"
local JIT_MIN = env_num("ST_JIT_MIN") or 32768
local EAGER0 = st.eager()
local function name_set(v)
  if not v or v == "" then return nil end
  local s = {}
  for w in v:gmatch("[^,%s]+") do s[w] = true end
  return s
end
local ONLY, SKIP = name_set(os.getenv("ST_FUZZ_OPS_ONLY")), name_set(os.getenv("ST_FUZZ_OPS_SKIP")) or {}

-- Ops left out of the default draw because of a known bug (name -> the bug); ST_FUZZ_OPS_ONLY
-- still draws them.
local DISABLED = {}

-- ---------------------------------------------------------------------------------------------
-- Small helpers
-- ---------------------------------------------------------------------------------------------

local function isf(dt) return dt == "f32" or dt == "f64" or dt == "f16" or dt == "bf16" end
local function numel(sh) local n = 1 for i = 1, #sh do n = n * sh[i] end return n end
local function copy(t) local r = {} for i = 1, #t do r[i] = t[i] end return r end
local function shape_str(sh) return "(" .. table.concat(sh, ", ") .. ")" end
local MAX_NUMEL = 3000
local INT_BOUND = 2 ^ 40
local FLT_BOUND = 1e6

-- A seeded generator: f() in [0, 1), int(a, b) in [a, b], pick, chance.
local function rng(seed)
  local u = H.lcg((seed * 2654435761 + 12345) % 2147483648)
  for _ = 1, 4 do u() end
  local R = {}
  function R.f() return (u() + 1) / 2 end
  function R.int(a, b)
    if b <= a then return a end
    local v = a + math.floor(R.f() * (b - a + 1))
    return v > b and b or v
  end
  function R.pick(t) return t[R.int(1, #t)] end
  function R.chance(p) return R.f() < p end
  function R.perm(n)
    local p = {}
    for i = 1, n do p[i] = i end
    for i = n, 2, -1 do local j = R.int(1, i); p[i], p[j] = p[j], p[i] end
    return p
  end
  return R
end

-- b's shape broadcasts to a's (the result has a's shape)
local function bcasts(b, a)
  if #b > #a then return false end
  for i = 1, #b do
    local bb, aa = b[#b - i + 1], a[#a - i + 1]
    if bb ~= aa and bb ~= 1 then return false end
  end
  return true
end

-- a shape that broadcasts to sh: leading dims dropped, some dims 1
local function bshape(R, sh)
  local r = {}
  local drop = R.chance(0.3) and R.int(0, #sh) or 0
  for i = drop + 1, #sh do r[#r + 1] = R.chance(0.25) and 1 or sh[i] end
  return r
end

local function nest(flat, shape)
  if #shape == 0 then return flat[1] end
  local p = 0
  local function build(d)
    local t = {}
    for i = 1, shape[d] do
      if d == #shape then p = p + 1; t[i] = flat[p] else t[i] = build(d + 1) end
    end
    return t
  end
  return build(1)
end

local function flatten(v, out)
  out = out or {}
  if type(v) == "table" then
    for i = 1, #v do flatten(v[i], out) end
  else
    out[#out + 1] = v
  end
  return out
end

-- Arguments as Lua source: tN for a value, tables as {...}, numbers round-tripping.
local function lit(v)
  if type(v) == "table" then
    if v._meta then return "t" .. v.id end
    local parts = {}
    for i = 1, #v do parts[i] = lit(v[i]) end
    for k, x in pairs(v) do
      if type(k) == "string" then parts[#parts + 1] = k .. " = " .. lit(x) end
    end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    if v ~= v then return "0/0" end
    if v == math.huge then return "math.huge" end
    if v == -math.huge then return "-math.huge" end
    if v == 0 and 1 / v < 0 then return "-0.0" end
    local s = string.format("%.17g", v)
    if tonumber(string.format("%.9g", v)) == v then s = string.format("%.9g", v) end
    if not s:find("[%.eEn]") then s = s .. ".0" end
    return s
  end
  return tostring(v)
end
local function args(...)
  local n = select("#", ...)
  while n > 0 and select(n, ...) == nil do n = n - 1 end
  local parts = {}
  for i = 1, n do parts[i] = lit((select(i, ...))) end
  return table.concat(parts, ", ")
end
local function mcall(a, name, ...) return lit(a) .. ":" .. name .. "(" .. args(...) .. ")" end
local function fcall(name, ...) return name .. "(" .. args(...) .. ")" end

local function val(V, b) if type(b) == "table" and b._meta then return V[b] end return b end
local function bnd(b)
  if type(b) == "table" and b._meta then return b.bound end
  if type(b) == "boolean" then return 1 end
  return math.abs(b)
end
local function exa(b) if type(b) == "table" and b._meta then return b.exact end return true end
local function spc(b) if type(b) == "table" and b._meta then return b.special end return false end

local SPECIALS = { 0 / 0, math.huge, -math.huge, -0.0 }

-- Values of a shape: style "grid" (multiples of 0.25 in [-3, 3]: ties and exact comparisons),
-- "smooth" ([-2, 2)), "pos" ([0.5, 2): denominators), "unit" (-1, -0.5, 0, 0.5, 1); integers in
-- [-5, 5] (or style {lo, hi}); bools. special: now and then NaN, inf, -inf or -0.0. Returns the
-- flat values and their bound.
local function gen_values(R, shape, dt, style, special)
  local flat, bound = {}, 0
  for i = 1, numel(shape) do
    local v
    if dt == "bool" then
      v = R.chance(0.5)
    elseif not isf(dt) then
      local lo, hi = -5, 5
      if type(style) == "table" then lo, hi = style[1], style[2] end
      v = R.int(lo, hi)
      bound = math.max(bound, math.abs(v))
    else
      if style == "smooth" then v = R.f() * 4 - 2
      elseif style == "pos" then v = 0.5 + R.f() * 1.5
      elseif style == "unit" then v = R.pick({ -1.0, -0.5, 0.0, 0.5, 1.0 })
      else v = R.int(-12, 12) / 4 end
      bound = math.max(bound, math.abs(v))
      if special and R.chance(0.08) then v = R.pick(SPECIALS) end
    end
    flat[i] = v
  end
  if dt == "bool" then bound = 1 end
  return flat, bound
end

-- ---------------------------------------------------------------------------------------------
-- Programs. A program is a list of steps; a step has `call` (its Lua source), `ins` (the values
-- it reads), `fn(V, env)` returning a list of tensors (V maps a value's meta to its tensor in the
-- run; env.dev is the run's device) and `outs` (the metas of those tensors, made while the
-- program is generated). Generation runs the reference: each step is executed as it is drawn, so
-- shapes and dtypes come from real tensors.
-- ---------------------------------------------------------------------------------------------

-- A tensor of Lua values (nested tables; a shape with no entries: zeros) on the run's device.
local function mk(env, data, dt, shape)
  if shape and numel(shape) == 0 then return st.zeros(shape, dt):to(env.dev) end
  return st.tensor(data, dt):to(env.dev)
end

local function enter(mode, prog)
  st.manual_seed(prog.seed)
  if mode == "ref" then
    st.eager(true)
  else
    st.eager(false)
    st.set_jit_min(prog.jit and 0 or JIT_MIN)
  end
end

local function leave()
  st.eager(EAGER0)
  st.set_jit_min(JIT_MIN)
end

local G = {}
G.__index = G

-- Runs step s in the generating (reference) run and adds its outputs to the pool.
function G:emit(s)
  self.steps[#self.steps + 1] = s
  s.ins = s.ins or {}
  s.outs = {}
  local ok, outs = xpcall(s.fn, debug.traceback, self.env.V, self.env)
  if not ok then error({ gen_fail = true, step = #self.steps, err = outs }, 0) end
  s.outs = {}
  for k, t in ipairs(outs) do
    local m = s.meta and s.meta(k, t) or {}
    m._meta = true
    m.id = #self.pool + 1
    m.shape, m.dt, m.step = t:shape(), t:dtype(), #self.steps
    if not m.store then self.nstore = self.nstore + 1; m.store = self.nstore end
    if not isf(m.dt) then m.exact, m.special = true, false end
    m.bound = math.min(m.bound or math.huge, m.dt == "bool" and 1 or math.huge)
    self.pool[m.id] = m
    s.outs[k] = m
    self.env.V[m] = t
  end
  if s.mutates then -- an in-place step: every value sharing the storage may have changed
    local u = s.mutates
    for _, m in ipairs(self.pool) do
      if m.store == u.store then
        m.exact = m.exact and u.exact
        m.bound = math.max(m.bound, u.bound)
        m.special = m.special or u.special
        m.idxmax = nil
      end
    end
  end
  return table.unpack(s.outs)
end

-- A random value of the pool satisfying pred (the last few more often), or nil. Values with no
-- entries only when empty_ok.
function G:choose(pred, empty_ok)
  local c = {}
  for _, m in ipairs(self.pool) do
    if not m.undefined and (empty_ok or numel(m.shape) > 0) and (not pred or pred(m)) then c[#c + 1] = m end
  end
  if #c == 0 then return nil end
  if #c > 6 and self.R.chance(0.6) then return c[self.R.int(#c - 5, #c)] end
  return self.R.pick(c)
end

-- A tensor built from Lua values (an input when `input`: in gradient programs f64 inputs
-- require grad).
function G:data(shape, dt, flat, bound, o)
  o = o or {}
  local data = nest(flat, shape)
  local grad = o.input and self.grad and dt == "f64"
  local special = false
  if isf(dt) then for _, v in ipairs(flat) do if v ~= v or v == math.huge or v == -math.huge then special = true end end end
  return self:emit {
    kind = o.input and "input" or "const", flat = flat,
    call = (o.input and "input" or "const") .. " " .. dt .. " " .. shape_str(shape) .. (grad and " requires_grad" or ""),
    fn = function(_, env)
      local t = mk(env, data, dt, shape)
      if grad then t:requires_grad_(true) end
      return { t }
    end,
    meta = function()
      return { exact = true, bound = bound, special = special, idxmax = o.idxmax, leaf = grad, input = o.input }
    end,
  }
end

function G:const(shape, dt, style, special)
  local flat, bound = gen_values(self.R, shape, dt, style, special and not self.grad)
  return self:data(shape, dt, flat, bound)
end

-- An index tensor (i64) of shape ishape with values in 1..n; unique: no value twice along a line
-- of dim d (then ishape[d] <= n).
function G:index(ishape, d, n, unique, dt)
  local R = self.R
  local flat, perms, coords = {}, {}, {}
  for k = 1, #ishape do coords[k] = 1 end
  for i = 1, numel(ishape) do
    if unique then
      local key = {}
      for k = 1, #ishape do if k ~= d then key[#key + 1] = coords[k] end end
      key = table.concat(key, ",")
      perms[key] = perms[key] or R.perm(n)
      flat[i] = perms[key][coords[d]]
    else
      flat[i] = R.int(1, n)
    end
    for k = #ishape, 1, -1 do
      coords[k] = coords[k] + 1
      if coords[k] <= ishape[k] then break end
      coords[k] = 1
    end
  end
  return self:data(ishape, dt or "i64", flat, n, { idxmax = n }), flat
end

-- A second operand for a: a pool value broadcasting to a's shape (dtype o.dt or a's; exact when
-- o.exact), or a new constant, or (o.number) a Lua number from o.numbers.
function G:operand(a, o)
  o = o or {}
  local R = self.R
  if o.number and R.chance(0.25) then return R.pick(o.numbers or { 0.5, -1.0, 2.0, 0.0, -0.25, 3.0 }) end
  local dt = o.dt or a.dt
  if R.chance(0.55) then
    local b = self:choose(function(m)
      return m.dt == dt and bcasts(m.shape, a.shape) and (not o.exact or m.exact) and (not o.pred or o.pred(m))
    end)
    if b then return b end
  end
  return self:const(bshape(R, a.shape), dt, o.style, o.special)
end

-- In-place ops may write into m: not an expanded view, and in gradient programs not the storage
-- of an input that requires grad.
function G:inplace_ok(m)
  return not m.noinplace and not m.undefined and not self.leafstore[m.store]
end

-- ---------------------------------------------------------------------------------------------
-- The ops. Each gen(g, R) draws its operands from the pool (or makes constants), emits one step
-- and returns true, or returns nil when nothing in the pool fits.
-- ---------------------------------------------------------------------------------------------

local function dimpick(R, nd)
  local n = math.max(nd, 1)
  local d = R.int(1, n)
  if R.chance(0.3) then d = d - n - 1 end
  return d
end
local function posd(d, nd) return d > 0 and d or math.max(nd, 1) + d + 1 end
local function size_at(m, d) if #m.shape == 0 then return 1 end return m.shape[posd(d, #m.shape)] end

local function same(a, extra)
  return function()
    local r = { exact = a.exact, bound = a.bound, special = a.special }
    for k, v in pairs(extra or {}) do r[k] = v end
    return r
  end
end
local function viewof(a)
  return same(a, { store = a.store, idxmax = a.idxmax, noinplace = a.noinplace })
end

local function exact_any(m) return m.exact end
local function float_val(m) return isf(m.dt) end
local function nd_at_least(k) return function(m) return #m.shape >= k end end
local function all_of(...)
  local ps = { ... }
  return function(m)
    for _, p in ipairs(ps) do if not p(m) then return false end end
    return true
  end
end

local OPS = {}
local function op(name, weight, gen) OPS[#OPS + 1] = { name = name, weight = weight, gen = gen } end

-- sort, argsort, topk ------------------------------------------------------------------------

op("sort", 3, function(g, R)
  local a = g:choose(exact_any, true)
  if not a then return end
  local nd = #a.shape
  local d, desc = dimpick(R, nd), R.chance(0.5)
  local n = size_at(a, d)
  local form = R.int(1, 4)
  local call, fn
  if form == 1 then
    call, fn = mcall(a, "sort", d, desc), function(V) return { V[a]:sort(d, desc) } end
  elseif form == 2 then
    call, fn = mcall(a, "sort", { dim = d, descending = desc, stable = true }),
      function(V) return { V[a]:sort { dim = d, descending = desc, stable = true } } end
  elseif form == 3 then
    call, fn = mcall(a, "sort"), function(V) return { V[a]:sort() } end
    n = size_at(a, -1)
  else
    call, fn = fcall("st.sort", a, d, desc), function(V) return { st.sort(V[a], d, desc) } end
  end
  return g:emit { call = call, ins = { a }, fn = fn, meta = function(k)
    if k == 1 then return same(a, { idxmax = a.idxmax })() end
    return { exact = true, bound = n, idxmax = n }
  end }
end)

op("argsort", 2, function(g, R)
  local a = g:choose(exact_any, true)
  if not a then return end
  local d, desc = dimpick(R, #a.shape), R.chance(0.5)
  local n = size_at(a, d)
  return g:emit { call = mcall(a, "argsort", d, desc), ins = { a },
    fn = function(V) return { V[a]:argsort(d, desc) } end,
    meta = function() return { exact = true, bound = n, idxmax = n } end }
end)

op("topk", 3, function(g, R)
  local a = g:choose(exact_any, true)
  if not a then return end
  local nd = #a.shape
  local d = dimpick(R, nd)
  local n = size_at(a, d)
  local k = R.chance(0.3) and math.min(1, n) or R.int(0, n)
  local largest = R.chance(0.6)
  local call, fn
  local form = R.int(1, 3)
  if form == 1 then
    call, fn = mcall(a, "topk", k, d, largest), function(V) return { V[a]:topk(k, d, largest) } end
  elseif form == 2 then
    call, fn = mcall(a, "topk", k, { dim = d, largest = largest, sorted = true }),
      function(V) return { V[a]:topk(k, { dim = d, largest = largest, sorted = true }) } end
  else
    n = size_at(a, -1)
    k = math.min(k, n)
    call, fn = mcall(a, "topk", k), function(V) return { V[a]:topk(k) } end
  end
  return g:emit { call = call, ins = { a }, fn = fn, meta = function(i)
    if i == 1 then return same(a, { idxmax = a.idxmax })() end
    return { exact = true, bound = n, idxmax = n }
  end }
end)

-- cumsum, cumprod -----------------------------------------------------------------------------

op("cumsum", 3, function(g, R)
  local a = g:choose(function(m) return #m.shape >= 1 end, true)
  if not a then return end
  local d = dimpick(R, #a.shape)
  local n = size_at(a, d)
  local b = a.bound * n
  if b > (isf(a.dt) and FLT_BOUND or INT_BOUND) then return end
  return g:emit { call = mcall(a, "cumsum", d), ins = { a }, fn = function(V) return { V[a]:cumsum(d) } end,
    meta = function() return { exact = a.exact and (not isf(a.dt) or n == 1), bound = b, special = a.special } end }
end)

op("cumprod", 2, function(g, R)
  local a = g:choose(function(m) return #m.shape >= 1 end, true)
  if not a then return end
  local d = dimpick(R, #a.shape)
  local n = size_at(a, d)
  local b = a.bound <= 1 and 1 or a.bound ^ n
  if b > (isf(a.dt) and FLT_BOUND or INT_BOUND) then return end
  return g:emit { call = mcall(a, "cumprod", d), ins = { a }, fn = function(V) return { V[a]:cumprod(d) } end,
    meta = function() return { exact = a.exact, bound = b, special = a.special } end }
end)

-- tril, triu, masked_fill, where ---------------------------------------------------------------

op("tril_triu", 2, function(g, R)
  local a = g:choose(nd_at_least(2))
  if not a then return end
  local name = R.pick({ "tril", "triu" })
  local k = R.chance(0.3) and nil or R.int(-3, 3)
  return g:emit { call = mcall(a, name, k), ins = { a }, fn = function(V) return { V[a][name](V[a], k) } end,
    meta = same(a) }
end)

local function fill_value(R, dt)
  if dt == "bool" then return R.chance(0.5) end
  if isf(dt) then return R.pick({ 0.0, -1.5, 2.0, 0.25, -0.0 }) end
  return R.int(-3, 3)
end

op("masked_fill", 3, function(g, R)
  local a = g:choose(nil, true)
  if not a then return end
  local mask = R.chance(0.2) and g:operand(a, { dt = "i64", style = { 0, 1 } }) or g:operand(a, { dt = "bool" })
  local v = fill_value(R, a.dt)
  return g:emit { call = mcall(a, "masked_fill", mask, v), ins = { a, mask },
    fn = function(V) return { V[a]:masked_fill(V[mask], v) } end,
    meta = same(a, { bound = math.max(a.bound, math.abs(type(v) == "number" and v or 1)) }) }
end)

op("where", 3, function(g, R)
  local a = g:choose(nil, true)
  if not a then return end
  local cond = g:operand(a, { dt = "bool" })
  local b = g:operand(a, { number = isf(a.dt), exact = false })
  local swap = R.chance(0.3)
  local x, y = a, b
  if swap then x, y = b, a end
  return g:emit { call = fcall("st.where", cond, x, y), ins = { cond, a, b },
    fn = function(V) return { st.where(V[cond], val(V, x), val(V, y)) } end,
    meta = function() return { exact = exa(a) and exa(b), bound = math.max(bnd(a), bnd(b)), special = spc(a) or spc(b) } end }
end)

-- Tensor keys: x[mask], x[idx], and assignment through them ----------------------------------

-- A bool mask of the leading kd dims of a (a pool value of that shape or a constant).
local function lead_mask(g, R, a)
  local kd = R.int(1, #a.shape)
  local sh = { table.unpack(a.shape, 1, kd) }
  local m = R.chance(0.5) and g:choose(function(m) return m.dt == "bool" and shape_str(m.shape) == shape_str(sh) end)
  return m or g:const(sh, "bool"), kd
end

op("mask_get", 3, function(g, R)
  local a = g:choose(nd_at_least(1))
  if not a then return end
  local mask = lead_mask(g, R, a)
  return g:emit { call = lit(a) .. "[" .. lit(mask) .. "]", ins = { a, mask },
    fn = function(V) return { V[a][V[mask]] } end, meta = same(a, { idxmax = a.idxmax }) }
end)

-- An index tensor for dim 1 of a: a pool value whose values fit, or a constant of 1-2 dims.
local function key_index(g, R, a, n)
  if R.chance(0.4) then
    local m = g:choose(function(m) return (m.dt == "i64" or m.dt == "i32") and m.idxmax and m.idxmax <= n and #m.shape <= 2 and #m.shape >= 1 and numel(m.shape) <= 40 end)
    if m then return m end
  end
  local sh = R.chance(0.7) and { R.int(1, 6) } or { R.int(1, 3), R.int(1, 3) }
  return (g:index(sh, 1, n, false, R.chance(0.2) and "i32" or "i64"))
end

op("index_get", 3, function(g, R)
  local a = g:choose(nd_at_least(1))
  if not a then return end
  local idx = key_index(g, R, a, a.shape[1])
  return g:emit { call = lit(a) .. "[" .. lit(idx) .. "]", ins = { a, idx },
    fn = function(V) return { V[a][V[idx]] } end, meta = same(a, { idxmax = a.idxmax }) }
end)

op("mask_set", 2, function(g, R)
  local a = g:choose(function(m) return #m.shape >= 1 and g:inplace_ok(m) end)
  if not a then return end
  local mask, kd = lead_mask(g, R, a)
  local v
  if R.chance(0.5) then
    v = fill_value(R, a.dt)
  else
    local count = 0
    for _, x in ipairs(flatten(g.env.V[mask]:tolist())) do if x then count = count + 1 end end
    local sh = { count }
    for k = kd + 1, #a.shape do sh[#sh + 1] = a.shape[k] end
    if R.chance(0.3) then sh = bshape(R, sh) end
    if numel(sh) == 0 then sh = { 1 } end
    v = g:const(sh, a.dt, "grid")
  end
  return g:emit { call = lit(a) .. "[" .. lit(mask) .. "] = " .. lit(v), ins = { a, mask, v },
    fn = function(V) V[a][V[mask]] = val(V, v) return {} end,
    mutates = { store = a.store, exact = exa(v), bound = bnd(v), special = false } }
end)

op("index_set", 2, function(g, R)
  local a = g:choose(function(m) return #m.shape >= 1 and g:inplace_ok(m) end)
  if not a then return end
  local n = a.shape[1]
  local unique = R.chance(0.5)
  local idx = g:index({ R.int(1, unique and n or 6) }, 1, n, unique)
  local v
  if R.chance(0.4) then
    v = fill_value(R, a.dt)
  else
    local sh = { idx.shape[1] }
    for k = 2, #a.shape do sh[#sh + 1] = a.shape[k] end
    if R.chance(0.3) then sh = bshape(R, sh) end
    v = g:const(sh, a.dt, "grid")
  end
  local exact = exa(v) and (unique or not isf(a.dt) or type(v) ~= "table")
  return g:emit { call = lit(a) .. "[" .. lit(idx) .. "] = " .. lit(v), ins = { a, idx, v },
    fn = function(V) V[a][V[idx]] = val(V, v) return {} end,
    mutates = { store = a.store, exact = exact, bound = bnd(v), special = false } }
end)

-- scatter, scatter_, scatter_add_, scatter_add, gather, index_select --------------------------

local function gen_scatter(g, R, mode)
  local inplace = mode == "scatter_" or mode == "scatter_add_"
  local add = mode == "scatter_add" or mode == "scatter_add_"
  local a = g:choose(function(m)
    return #m.shape >= 1 and (not inplace or g:inplace_ok(m)) and not (add and m.dt == "bool")
  end)
  if not a then return end
  local nd = #a.shape
  local d = dimpick(R, nd)
  local pd = posd(d, nd)
  local n = a.shape[pd]
  local unique = R.chance(0.5)
  local ishape = {}
  for k = 1, nd do ishape[k] = k == pd and R.int(1, unique and n or n + 2) or R.int(1, a.shape[k]) end
  local idx, iflat = g:index(ishape, pd, n, unique)
  local src
  if not add and R.chance(0.3) then
    src = fill_value(R, a.dt)
  else
    local sshape = copy(ishape)
    if not add then for k = 1, nd do if R.chance(0.2) then sshape[k] = sshape[k] + 1 end end end
    src = R.chance(0.4) and g:choose(function(m) return m.dt == a.dt and shape_str(m.shape) == shape_str(sshape) end)
    src = src or g:const(sshape, a.dt, "grid")
  end
  local as_table = not add and R.chance(0.15)
  local idata = nest(iflat, ishape)
  -- repeated places sum (scatter_add) or average (scatter) the values written: inexact floats
  local exact = a.exact and exa(src) and (unique or not isf(a.dt) or type(src) ~= "table")
  local bound = add and a.bound + bnd(src) * ishape[pd] or math.max(a.bound, bnd(src))
  if bound > (isf(a.dt) and FLT_BOUND or INT_BOUND) then return end
  local ikey = as_table and lit(idata) or lit(idx)
  local call = lit(a) .. ":" .. mode .. "(" .. args(d) .. ", " .. ikey .. ", " .. lit(src) .. ")"
  local s = { call = call, ins = { a, idx, type(src) == "table" and src or nil },
    fn = function(V)
      local i = as_table and idata or V[idx]
      return { V[a][mode](V[a], d, i, val(V, src)) }
    end,
    meta = function()
      local r = { exact = exact, bound = bound, special = a.special or spc(src) }
      if inplace then r.store = a.store end
      return r
    end }
  if inplace then s.mutates = { store = a.store, exact = exact, bound = bound, special = spc(src) } end
  return g:emit(s)
end

op("scatter", 3, function(g, R) return gen_scatter(g, R, "scatter") end)
op("scatter_", 2, function(g, R) return gen_scatter(g, R, "scatter_") end)
op("scatter_add_", 2, function(g, R) return gen_scatter(g, R, "scatter_add_") end)
op("scatter_add", 1, function(g, R) return gen_scatter(g, R, "scatter_add") end)

op("gather", 2, function(g, R)
  local a = g:choose(nd_at_least(1))
  if not a then return end
  local nd = #a.shape
  local d = dimpick(R, nd)
  local pd = posd(d, nd)
  local n = a.shape[pd]
  local idx = R.chance(0.4) and g:choose(function(m)
    if m.dt ~= "i64" or not m.idxmax or m.idxmax > n or #m.shape ~= nd then return false end
    for k = 1, nd do if k ~= pd and m.shape[k] > a.shape[k] then return false end end
    return true
  end)
  if not idx then
    local ishape = {}
    for k = 1, nd do ishape[k] = k == pd and R.int(1, 7) or R.int(1, a.shape[k]) end
    idx = g:index(ishape, pd, n, false)
  end
  return g:emit { call = mcall(a, "gather", d, idx), ins = { a, idx },
    fn = function(V) return { V[a]:gather(d, V[idx]) } end, meta = same(a, { idxmax = a.idxmax }) }
end)

op("index_select", 2, function(g, R)
  local a = g:choose(nd_at_least(1))
  if not a then return end
  local d = dimpick(R, #a.shape)
  local n = size_at(a, d)
  local idx = R.chance(0.4) and g:choose(function(m) return m.dt == "i64" and m.idxmax and m.idxmax <= n and #m.shape == 1 end)
  local as_table = false
  local tbl
  if not idx then
    local flat
    idx, flat = g:index({ R.int(1, 7) }, 1, n, false)
    if R.chance(0.2) then as_table, tbl = true, flat end
  end
  return g:emit { call = mcall(a, "index_select", d, as_table and tbl or idx), ins = { a, idx },
    fn = function(V) return { V[a]:index_select(d, as_table and tbl or V[idx]) } end,
    meta = same(a, { idxmax = a.idxmax }) }
end)

op("nonzero", 2, function(g, R)
  local a = g:choose(exact_any, true)
  if not a then return end
  local mx = 1
  for _, s in ipairs(a.shape) do mx = math.max(mx, s) end
  return g:emit { call = mcall(a, "nonzero"), ins = { a }, fn = function(V) return { V[a]:nonzero() } end,
    meta = function() return { exact = true, bound = mx, idxmax = mx } end }
end)

-- repeat, flip, roll, split/chunk/unbind, pad, movedim ----------------------------------------

op("repeat", 2, function(g, R)
  local a = g:choose()
  if not a then return end
  local reps = {}
  local extra = R.chance(0.3) and 1 or 0
  local total = numel(a.shape)
  for i = 1, #a.shape + extra do
    reps[i] = R.chance(0.5) and 1 or R.int(1, 3)
    total = total * reps[i]
  end
  if #reps == 0 then reps[1] = 2; total = total * 2 end
  if total > MAX_NUMEL then return end
  local form = R.int(1, 3)
  local call, fn
  if form == 1 then
    call, fn = mcall(a, "repeat_tensor", table.unpack(reps)), function(V) return { V[a]:repeat_tensor(table.unpack(reps)) } end
  elseif form == 2 then
    call, fn = mcall(a, "repeat_tensor", reps), function(V) return { V[a]:repeat_tensor(reps) } end
  else
    call, fn = fcall('st["repeat"]', a, table.unpack(reps)), function(V) return { st["repeat"](V[a], table.unpack(reps)) } end
  end
  return g:emit { call = call, ins = { a }, fn = fn, meta = same(a, { idxmax = a.idxmax }) }
end)

op("flip", 2, function(g, R)
  local a = g:choose(nil, true)
  if not a then return end
  local nd = math.max(#a.shape, 1)
  local p = R.perm(nd)
  local dims = {}
  for i = 1, R.int(1, nd) do dims[i] = R.chance(0.3) and p[i] - nd - 1 or p[i] end
  local tbl = R.chance(0.5)
  return g:emit { call = tbl and mcall(a, "flip", dims) or mcall(a, "flip", table.unpack(dims)), ins = { a },
    fn = function(V) if tbl then return { V[a]:flip(dims) } end return { V[a]:flip(table.unpack(dims)) } end,
    meta = same(a, { idxmax = a.idxmax }) }
end)

op("roll", 2, function(g, R)
  local a = g:choose(nil, true)
  if not a then return end
  local nd = #a.shape
  local form = nd == 0 and 1 or R.int(1, 3)
  local call, fn
  if form == 1 then
    local s = R.int(-8, 8)
    call, fn = mcall(a, "roll", s), function(V) return { V[a]:roll(s) } end
  elseif form == 2 then
    local s, d = R.int(-8, 8), dimpick(R, nd)
    call, fn = mcall(a, "roll", s, d), function(V) return { V[a]:roll(s, d) } end
  else
    local p = R.perm(nd)
    local ss, ds = {}, {}
    for i = 1, R.int(1, nd) do ss[i], ds[i] = R.int(-8, 8), p[i] end
    call, fn = mcall(a, "roll", ss, ds), function(V) return { V[a]:roll(ss, ds) } end
  end
  return g:emit { call = call, ins = { a }, fn = fn, meta = same(a, { idxmax = a.idxmax }) }
end)

op("split", 3, function(g, R)
  local a = g:choose(nd_at_least(1))
  if not a then return end
  local nd = #a.shape
  local d = dimpick(R, nd)
  local n = size_at(a, d)
  local form = R.int(1, 4)
  local call, fn, count
  if form == 1 then
    local s = R.int(1, n)
    count = (n + s - 1) // s
    call, fn = mcall(a, "split", s, d), function(V) return V[a]:split(s, d) end
  elseif form == 2 then
    local parts, left = {}, n
    while left > 0 do
      local s = R.int(0, left)
      if R.chance(0.3) then s = left end
      parts[#parts + 1] = s
      left = left - s
    end
    if #parts == 0 then parts[1] = 0 end
    count = #parts
    call, fn = mcall(a, "split", parts, d), function(V) return V[a]:split(parts, d) end
  elseif form == 3 then
    local c = R.int(1, n + 1)
    local size = math.max(1, (n + c - 1) // c)
    count = (n + size - 1) // size
    call, fn = mcall(a, "chunk", c, d), function(V) return V[a]:chunk(c, d) end
  else
    count = n
    call, fn = mcall(a, "unbind", d), function(V) return V[a]:unbind(d) end
  end
  local keep = math.min(count, 4)
  return g:emit { call = call .. (count > keep and "  (first " .. keep .. " of " .. count .. ")" or ""), ins = { a },
    fn = function(V)
      local r = fn(V)
      if #r ~= count then error("expected " .. count .. " pieces, got " .. #r) end
      return { table.unpack(r, 1, keep) }
    end,
    meta = viewof(a) }
end)

local pad_limits = { reflect = function(n) return n - 1 end, replicate = function() return 3 end, circular = function(n) return n end }

op("pad", 3, function(g, R)
  local a = g:choose(nd_at_least(1))
  if not a then return end
  local nd = #a.shape
  local mode = R.pick({ "constant", "constant", "reflect", "replicate", "circular" })
  local pairs_n = R.int(1, math.min(nd, 3))
  local pads, total = {}, numel(a.shape)
  for p = 1, pairs_n do
    local n = a.shape[nd - p + 1]
    local before, after
    if mode == "constant" then
      before = R.int(-(n // 2), 3)
      after = R.int(-(n // 2), 3)
    else
      local lim = pad_limits[mode](n)
      before, after = R.int(0, math.min(lim, 4)), R.int(0, math.min(lim, 4))
    end
    pads[#pads + 1], pads[#pads + 2] = before, after
    total = total // n * (n + before + after)
  end
  if total > MAX_NUMEL then return end
  local value
  if mode == "constant" and R.chance(0.5) then value = fill_value(R, a.dt) end
  local form = R.int(1, 3)
  local call, fn
  if form == 1 and mode == "constant" and value == nil then
    call, fn = mcall(a, "pad", pads), function(V) return { V[a]:pad(pads) } end
  elseif form == 2 then
    local o = { mode = mode, value = value }
    call, fn = mcall(a, "pad", pads, o), function(V) return { V[a]:pad(pads, { mode = mode, value = value }) } end
  else
    call, fn = mcall(a, "pad", pads, mode, value), function(V) return { V[a]:pad(pads, mode, value) } end
  end
  local vb = type(value) == "number" and math.abs(value) or 0
  return g:emit { call = call, ins = { a }, fn = fn,
    meta = same(a, { bound = math.max(a.bound, vb), idxmax = mode ~= "constant" and a.idxmax or nil }) }
end)

op("movedim", 2, function(g, R)
  local a = g:choose(nd_at_least(1))
  if not a then return end
  local nd = #a.shape
  local k = R.int(1, nd)
  local p1, p2 = R.perm(nd), R.perm(nd)
  local src, dst = {}, {}
  for i = 1, k do src[i], dst[i] = p1[i], p2[i] end
  if k == 1 and R.chance(0.5) then src, dst = src[1], dst[1] end
  return g:emit { call = mcall(a, "movedim", src, dst), ins = { a },
    fn = function(V) return { V[a]:movedim(src, dst) } end, meta = viewof(a) }
end)

-- atan2, isnan/isinf/isfinite, clamp, lerp, addcmul/addcdiv, norm, all/any -------------------

op("atan2", 2, function(g, R)
  local y = g:choose(float_val)
  if not y then return end
  local x = g:operand(y, { number = true, special = true, style = "grid" })
  local fn_form = R.chance(0.3)
  return g:emit { call = fn_form and fcall("st.atan2", y, x) or mcall(y, "atan2", x), ins = { y, x },
    fn = function(V) if fn_form then return { st.atan2(V[y], val(V, x)) } end return { V[y]:atan2(val(V, x)) } end,
    meta = function() return { exact = y.exact and exa(x), bound = 3.15, special = y.special or spc(x) } end }
end)

op("isnan", 2, function(g, R)
  local a = g:choose(nil, true)
  if not a then return end
  local name = R.pick({ "isnan", "isinf", "isfinite" })
  return g:emit { call = mcall(a, name), ins = { a }, fn = function(V) return { V[a][name](V[a]) } end }
end)

op("clamp", 2, function(g, R)
  local a = g:choose(function(m) return m.dt ~= "bool" end)
  if not a then return end
  local nums = isf(a.dt) and { -1.0, 0.5, 0.0 } or { -2, 0, 3 }
  local lo, hi
  local which = R.int(1, 4)
  if which ~= 2 then lo = g:operand(a, { number = which == 3, numbers = nums, exact = false, style = "grid" }) end
  if which ~= 1 then hi = g:operand(a, { number = which == 3 or which == 4, numbers = nums, exact = false, style = "grid" }) end
  if type(lo) ~= "table" and type(hi) ~= "table" then lo = g:operand(a, { style = "grid" }) end
  return g:emit { call = mcall(a, "clamp", lo, hi), ins = { a, type(lo) == "table" and lo or nil, type(hi) == "table" and hi or nil },
    fn = function(V) return { V[a]:clamp(val(V, lo), val(V, hi)) } end,
    meta = function()
      return { exact = a.exact and (lo == nil or exa(lo)) and (hi == nil or exa(hi)),
        bound = math.max(a.bound, lo and bnd(lo) or 0, hi and bnd(hi) or 0), special = a.special or spc(lo or 0) or spc(hi or 0) }
    end }
end)

op("lerp", 2, function(g, R)
  local a = g:choose(float_val)
  if not a then return end
  local e = g:operand(a, { style = "grid" })
  local w = g:operand(a, { number = true, numbers = { 0.5, 0.25, 1.5, -0.5 }, style = "unit" })
  return g:emit { call = mcall(a, "lerp", e, w), ins = { a, e, type(w) == "table" and w or nil },
    fn = function(V) return { V[a]:lerp(V[e], val(V, w)) } end,
    meta = function()
      local b = math.max(a.bound, e.bound) * (1 + 2 * bnd(w))
      return { exact = a.exact and e.exact and exa(w), bound = b, special = a.special or e.special or spc(w) }
    end }
end)

op("addcmul", 2, function(g, R)
  local a = g:choose(float_val)
  if not a then return end
  local div = R.chance(0.4)
  local t1 = g:operand(a, { style = "grid" })
  local t2 = div and g:const(bshape(R, a.shape), a.dt, "pos") or g:operand(a, { style = "grid" })
  local v
  local form = R.int(1, 3)
  if form == 1 then v = R.pick({ 0.5, -2.0, 1.0 }) elseif form == 2 then v = { value = R.pick({ 0.5, -2.0 }) } end
  local name = div and "addcdiv" or "addcmul"
  local vb = type(v) == "number" and math.abs(v) or type(v) == "table" and math.abs(v.value) or 1
  local b = a.bound + vb * t1.bound * (div and 2 or t2.bound)
  if b > FLT_BOUND then return end
  return g:emit { call = mcall(a, name, t1, t2, v), ins = { a, t1, t2 },
    fn = function(V) return { V[a][name](V[a], V[t1], V[t2], v) } end,
    meta = function() return { exact = a.exact and t1.exact and t2.exact, bound = b, special = a.special or t1.special or t2.special } end }
end)

-- reduction dims: nil, a dim or a table of dims
local function red_dims(R, nd)
  local r = R.int(1, 3)
  if r == 1 or nd == 0 then return nil end
  if r == 2 then return dimpick(R, nd) end
  local p = R.perm(nd)
  local ds = {}
  for i = 1, R.int(1, nd) do ds[i] = p[i] end
  return ds
end
local function red_count(shape, dims)
  if dims == nil then return numel(shape) end
  if type(dims) ~= "table" then dims = { dims } end
  local n = 1
  for _, d in ipairs(dims) do n = n * shape[posd(d, #shape)] end
  return n
end

op("norm", 2, function(g, R)
  local a = g:choose(float_val, true)
  if not a then return end
  local p = R.pick({ 2, 1, 3, math.huge, -math.huge, 0, "fro", 2, 1.5 })
  if p == 0 and not a.exact then p = 1 end
  if (p == math.huge or p == -math.huge) and numel(a.shape) == 0 then p = 2 end   -- max of nothing: an error
  if p == 1.5 and g.grad then p = 2 end
  local dims = red_dims(R, #a.shape)
  local keep = dims ~= nil and R.chance(0.4) or nil
  local n = red_count(a.shape, dims)
  local form = R.int(1, 3)
  local call, fn
  if form == 1 and dims == nil then
    call, fn = mcall(a, "norm", p), function(V) return { V[a]:norm(p) } end
  elseif form == 1 and p == 2 and dims == nil then
    call, fn = mcall(a, "norm"), function(V) return { V[a]:norm() } end
  else
    call, fn = mcall(a, "norm", p, dims, keep), function(V) return { V[a]:norm(p, dims, keep) } end
  end
  local exact = (p == math.huge or p == -math.huge or p == 0) and a.exact
  return g:emit { call = call, ins = { a }, fn = fn,
    meta = function() return { exact = exact, bound = a.bound * n + n, special = a.special } end }
end)

op("all_any", 2, function(g, R)
  local a = g:choose(exact_any, true)
  if not a then return end
  local name = R.pick({ "all", "any" })
  local dims = red_dims(R, #a.shape)
  local keep = dims ~= nil and R.chance(0.4) or nil
  return g:emit { call = mcall(a, name, dims, keep), ins = { a }, fn = function(V) return { V[a][name](V[a], dims, keep) } end }
end)

-- *_like -----------------------------------------------------------------------------------------

op("like", 2, function(g, R)
  local a = g:choose(nil, true)
  if not a then return end
  local name = R.pick({ "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "empty_like" })
  local dt
  if R.chance(0.3) then dt = R.pick({ "f32", "f64", "i64", "bool" }) end
  if g.grad and dt == "f32" then dt = "f64" end
  local outdt = dt or a.dt
  if (name == "rand_like" or name == "randn_like") and not isf(outdt) then dt = g.fdt; outdt = dt end
  local v
  if name == "full_like" then v = fill_value(R, outdt) end
  local call, fn
  if name == "full_like" then
    call, fn = fcall("st.full_like", a, v, dt), function(V) return { st.full_like(V[a], v, dt) } end
  else
    call, fn = fcall("st." .. name, a, dt), function(V) return { st[name](V[a], dt) } end
  end
  return g:emit { call = call, ins = { a }, fn = fn, meta = function()
    return { exact = true, bound = name == "randn_like" and 10 or math.max(1, type(v) == "number" and math.abs(v) or 1),
      undefined = name == "empty_like" }
  end }
end)

-- mixers: elementwise, binary, reductions, views, casts, comparisons, sync -----------------------

op("unary", 3, function(g, R)
  local a = g:choose(function(m) return m.dt ~= "bool" end, true)
  if not a then return end
  local names = isf(a.dt) and { "tanh", "sin", "neg", "abs", "sigmoid", "exp", "mul2", "addc" } or { "neg", "abs", "mul2" }
  local name = R.pick(names)
  if name == "exp" and a.bound > 8 then name = "tanh" end
  local b = ({ tanh = 1, sin = 1, sigmoid = 1, exp = math.exp(a.bound), mul2 = 2 * a.bound, addc = a.bound + 0.5 })[name] or a.bound
  local call, fn
  if name == "mul2" then
    call, fn = lit(a) .. " * 2", function(V) return { V[a] * 2 } end
  elseif name == "addc" then
    call, fn = lit(a) .. " + 0.5", function(V) return { V[a] + 0.5 } end
  else
    call, fn = mcall(a, name), function(V) return { V[a][name](V[a]) } end
  end
  return g:emit { call = call, ins = { a }, fn = fn, meta = same(a, { bound = b }) }
end)

op("binary", 3, function(g, R)
  local a = g:choose(function(m) return m.dt ~= "bool" end, true)
  if not a then return end
  local name = R.pick({ "add", "sub", "mul", "maximum", "minimum" })
  local b = g:operand(a, { number = true, numbers = isf(a.dt) and { 0.5, -1.5, 2.0 } or { 2, -1, 3 }, style = "grid" })
  local bound = name == "mul" and a.bound * bnd(b) or (name == "add" or name == "sub") and a.bound + bnd(b) or math.max(a.bound, bnd(b))
  if bound > (isf(a.dt) and FLT_BOUND or INT_BOUND) then return end
  return g:emit { call = mcall(a, name, b), ins = { a, type(b) == "table" and b or nil },
    fn = function(V) return { V[a][name](V[a], val(V, b)) } end,
    meta = function() return { exact = a.exact and exa(b), bound = bound, special = a.special or spc(b) } end }
end)

op("reduce", 3, function(g, R)
  local a = g:choose(function(m) return m.dt ~= "bool" end)
  if not a then return end
  local nd = #a.shape
  local name = R.pick({ "sum", "sum", "mean", "max", "maxd", "amax" })
  if name == "mean" and not isf(a.dt) then name = "sum" end
  if name == "maxd" and (nd == 0 or not a.exact) then name = "amax" end
  local call, fn, meta
  if name == "maxd" then
    local d, keep = dimpick(R, nd), R.chance(0.4) or nil
    local n = size_at(a, d)
    call, fn = mcall(a, "max", d, keep), function(V) return { V[a]:max(d, keep) } end
    meta = function(k)
      if k == 1 then return same(a)() end
      return { exact = true, bound = n, idxmax = n }
    end
  elseif name == "amax" then
    if nd == 0 then return end
    local dims = red_dims(R, nd)
    if type(dims) ~= "table" then dims = { posd(dims or 1, nd) } end
    local keep = R.chance(0.4) or nil
    call, fn = mcall(a, "max", dims, keep), function(V) return { V[a]:max(dims, keep) } end
    meta = same(a)
  elseif name == "max" then
    call, fn = mcall(a, "max"), function(V) return { V[a]:max() } end
    meta = same(a)
  else
    local dims = red_dims(R, nd)
    local keep = dims ~= nil and R.chance(0.4) or nil
    local n = red_count(a.shape, dims)
    if a.bound * n > (isf(a.dt) and FLT_BOUND or INT_BOUND) then return end
    call, fn = mcall(a, name, dims, keep), function(V) return { V[a][name](V[a], dims, keep) } end
    meta = function() return { exact = a.exact and (not isf(a.dt) or n == 1), bound = name == "sum" and a.bound * n or a.bound, special = a.special } end
  end
  return g:emit { call = call, ins = { a }, fn = fn, meta = meta }
end)

op("view", 3, function(g, R)
  local a = g:choose()
  if not a then return end
  local nd = #a.shape
  local kinds = { "unsqueeze", "reshape" }
  if nd >= 1 then kinds[#kinds + 1] = "narrow"; kinds[#kinds + 1] = "select"; kinds[#kinds + 1] = "expand"; kinds[#kinds + 1] = "flatten" end
  if nd >= 2 then kinds[#kinds + 1] = "transpose"; kinds[#kinds + 1] = "permute"; kinds[#kinds + 1] = "t" end
  local kind = R.pick(kinds)
  local call, fn, extra = nil, nil, {}
  if kind == "unsqueeze" then
    local d = R.int(1, nd + 1)
    call, fn = mcall(a, "unsqueeze", d), function(V) return { V[a]:unsqueeze(d) } end
  elseif kind == "reshape" then
    local sh = R.chance(0.5) and { -1 } or { numel(a.shape), 1 }
    if nd >= 2 and R.chance(0.5) then sh = { a.shape[1] * a.shape[2], table.unpack(a.shape, 3) } end
    call, fn = mcall(a, "reshape", sh), function(V) return { V[a]:reshape(sh) } end
  elseif kind == "narrow" then
    local d = dimpick(R, nd)
    local n = size_at(a, d)
    local s = R.int(1, n)
    local len = R.int(1, n - s + 1)
    call, fn = mcall(a, "narrow", d, s, len), function(V) return { V[a]:narrow(d, s, len) } end
  elseif kind == "select" then
    local d = dimpick(R, nd)
    local i = R.int(1, size_at(a, d))
    call, fn = mcall(a, "select", d, i), function(V) return { V[a]:select(d, i) } end
  elseif kind == "expand" then
    local sh = {}
    for k = 1, nd do sh[k] = a.shape[k] == 1 and R.int(1, 4) or (R.chance(0.5) and -1 or a.shape[k]) end
    if R.chance(0.3) then table.insert(sh, 1, R.int(1, 3)) end
    local total = 1
    for k = 1, #sh do total = total * (sh[k] == -1 and a.shape[k - (#sh - nd)] or sh[k]) end
    if total > MAX_NUMEL then return end
    call, fn = mcall(a, "expand", sh), function(V) return { V[a]:expand(sh) } end
    extra.noinplace = true
  elseif kind == "flatten" then
    call, fn = mcall(a, "flatten"), function(V) return { V[a]:flatten() } end
  elseif kind == "transpose" then
    local p = R.perm(nd)
    call, fn = mcall(a, "transpose", p[1], p[2]), function(V) return { V[a]:transpose(p[1], p[2]) } end
  elseif kind == "permute" then
    local p = R.perm(nd)
    call, fn = mcall(a, "permute", p), function(V) return { V[a]:permute(p) } end
  else
    if nd ~= 2 then return end
    call, fn = mcall(a, "t"), function(V) return { V[a]:t() } end
  end
  return g:emit { call = call, ins = { a }, fn = fn, meta = function()
    local r = viewof(a)()
    if extra.noinplace then r.noinplace = true end
    return r
  end }
end)

op("cast", 2, function(g, R)
  local a = g:choose(nil, true)
  if not a then return end
  local to = R.pick(g.grad and { "f64", "i64", "bool" } or { "f32", "f64", "i64", "bool" })
  if isf(a.dt) and not isf(to) and (not a.exact or a.special) then to = g.fdt end
  if to == "i64" and a.bound > 1e9 then return end
  return g:emit { call = mcall(a, "to", to), ins = { a }, fn = function(V) return { V[a]:to(to) } end,
    meta = same(a, { idxmax = not isf(to) and to ~= "bool" and a.idxmax or nil }) }
end)

op("compare", 3, function(g, R)
  local a = g:choose(function(m) return m.exact and m.dt ~= "bool" end, true)
  if not a then return end
  local name = R.pick({ "gt", "lt", "ge", "le", "eq", "ne" })
  local b = g:operand(a, { number = true, exact = true, numbers = isf(a.dt) and { 0.0, 0.5, -1.0 } or { 0, 1, -2 }, style = "grid" })
  return g:emit { call = mcall(a, name, b), ins = { a, type(b) == "table" and b or nil },
    fn = function(V) return { V[a][name](V[a], val(V, b)) } end }
end)

op("logical", 1, function(g, R)
  local a = g:choose(function(m) return m.dt == "bool" end)
  if not a then return end
  local name = R.pick({ "logical_and", "logical_or" })
  local b = g:operand(a, { dt = "bool" })
  return g:emit { call = mcall(a, name, b), ins = { a, b }, fn = function(V) return { V[a][name](V[a], V[b]) } end }
end)

op("sync", 1, function(g, R)
  local c = {}
  for _, m in ipairs(g.pool) do if not m.undefined and R.chance(0.5) then c[#c + 1] = m end end
  if #c == 0 then return end
  return g:emit { call = "st.sync(" .. args(table.unpack(c)) .. ")  -- fused run only", ins = c, fn = function(V, env)
    if env.mode == "fused" then
      local ts = {}
      for i, m in ipairs(c) do ts[i] = V[m] end
      st.sync(ts)
    end
    return {}
  end }
end)

local OP_BY_NAME = {}
for _, o in ipairs(OPS) do OP_BY_NAME[o.name] = o end
for name in pairs(ONLY or {}) do
  if not OP_BY_NAME[name] then error("ST_FUZZ_OPS_ONLY: no op " .. name) end
end
for name in pairs(SKIP) do
  if not OP_BY_NAME[name] then error("ST_FUZZ_OPS_SKIP: no op " .. name) end
end
local DRAW, DRAW_W = {}, 0
for _, o in ipairs(OPS) do
  local on = ONLY and ONLY[o.name] or (not ONLY and not SKIP[o.name] and not DISABLED[o.name])
  -- with ONLY, the mixers and sync stay in the draw unless skipped
  if ONLY and not on and ({ unary = 1, binary = 1, view = 1, cast = 1, compare = 1, sync = 1 })[o.name] and not SKIP[o.name] then on = "mixer" end
  if on then DRAW[#DRAW + 1] = o; DRAW_W = DRAW_W + o.weight end
end

local function draw(R)
  local r = R.f() * DRAW_W
  for _, o in ipairs(DRAW) do
    r = r - o.weight
    if r < 0 then return o end
  end
  return DRAW[#DRAW]
end

-- ---------------------------------------------------------------------------------------------
-- Generation, running, comparison
-- ---------------------------------------------------------------------------------------------

local function new_env(mode, prog)
  return { mode = mode, dev = mode == "ref" and "cpu" or st.device(), V = {}, prog = prog }
end

-- The loss of a gradient program: the sum of up to 3 f64 values (that depend on an input
-- requiring grad) times fixed weights; backward runs in the step.
local function add_loss(g, R)
  local c = {}
  for _, m in ipairs(g.pool) do
    if m.dt == "f64" and not m.undefined and g.env.V[m].requires_grad and numel(m.shape) > 0 then c[#c + 1] = m end
  end
  if #c == 0 then return end
  local chosen = {}
  for _ = 1, math.min(3, #c) do chosen[#chosen + 1] = c[#c - R.int(0, math.min(#c, 4) - 1)] end
  local ws = {}
  for i, m in ipairs(chosen) do
    local flat = gen_values(R, m.shape, "f64", "unit")
    ws[i] = nest(flat, m.shape)
  end
  local parts = {}
  for i, m in ipairs(chosen) do parts[i] = "(" .. lit(m) .. " * w" .. i .. "):sum()" end
  g.loss_step = #g.steps + 1
  return g:emit { kind = "loss", call = table.concat(parts, " + ") .. "; backward()", ins = chosen, weights = ws,
    fn = function(V, env)
      local l
      for i, m in ipairs(chosen) do
        local p = (V[m] * mk(env, ws[i], "f64")):sum()
        l = l and l + p or p
      end
      l:backward()
      return { l }
    end,
    meta = function() return { exact = false, bound = 1e300 } end }
end

-- Generates the program of a seed, running the reference as it goes. Returns the program (its
-- reference env in prog.ref) or raises {gen_fail = ...} with the program so far in prog.
local function generate(seed)
  local R = rng(seed)
  local g = setmetatable({ R = R, seed = seed, steps = {}, pool = {}, nstore = 0, leafstore = {} }, G)
  g.grad = R.chance(0.3)
  g.fdt = g.grad and "f64" or R.pick({ "f32", "f64" })
  g.jit = JIT_EVERY > 0 and seed % JIT_EVERY == 0
  g.env = new_env("ref", g)
  enter("ref", g)
  local ok, err = pcall(function()
    -- inputs: 1-3 float tensors of a base shape or shapes broadcasting to it, maybe an i64 or
    -- bool one, now and then a long last dim
    local nd = R.int(1, 4)
    local base = {}
    for i = 1, nd do base[i] = R.int(1, 7) end
    -- a long last dim: cumsum's and cumprod's blocked scans (past 32 and 16), topk's blocks (past 256)
    if R.chance(0.1) then base = { R.int(1, 3), R.chance(0.3) and R.int(257, 400) or R.int(17, 80) } end
    local special = not g.grad and R.chance(0.3)
    for i = 1, R.int(1, 3) do
      local sh = i == 1 and base or (R.chance(0.6) and copy(base) or bshape(R, base))
      local style = R.pick({ "grid", "grid", "smooth", "unit" })
      local flat, bound = gen_values(R, sh, g.fdt, style, special)
      local m = g:data(sh, g.fdt, flat, bound, { input = true })
      if m.leaf then g.leafstore[m.store] = true end
    end
    if R.chance(0.4) then
      local dt = R.pick({ "i64", "bool", "i32" })
      local sh = R.chance(0.5) and copy(base) or bshape(R, base)
      local flat, bound = gen_values(R, sh, dt, { -5, 5 })
      g:data(sh, dt, flat, bound, { input = true })
    end
    local nops = R.int(3, 12)
    local done, tries = 0, 0
    while done < nops and tries < 200 do
      tries = tries + 1
      local o = draw(R)
      if o.gen(g, R) then done = done + 1 end
    end
    if g.grad then add_loss(g, R) end
  end)
  leave()
  if not ok then
    if type(err) == "table" and err.gen_fail then err.prog = g; error(err, 0) end
    error({ gen_fail = true, step = #g.steps + 1, err = tostring(err), prog = g }, 0)
  end
  g.ref = g.env
  g.env = nil
  return g
end

local function exec(env, s)
  local outs = s.fn(env.V, env)
  if #outs ~= #s.outs then error("the step made " .. #outs .. " values, the generating run " .. #s.outs) end
  for k, t in ipairs(outs) do env.V[s.outs[k]] = t end
end

-- Runs the steps kept (keep nil: all) in a mode; returns the env, or nil, the step and the error.
local function run(prog, keep, mode)
  local env = new_env(mode, prog)
  enter(mode, prog)
  local bad, err
  for i, s in ipairs(prog.steps) do
    if not keep or keep[i] then
      local ok, e = xpcall(exec, debug.traceback, env, s)
      if not ok then bad, err = i, e; break end
    end
  end
  if not bad and mode == "fused" then
    -- every value (and gradient) in one flush
    local ts = {}
    for i, s in ipairs(prog.steps) do
      if not keep or keep[i] then
        for _, m in ipairs(s.outs) do
          local t = env.V[m]
          ts[#ts + 1] = t
          if m.leaf and t.grad then ts[#ts + 1] = t.grad end
        end
      end
    end
    local ok, e = xpcall(st.sync, debug.traceback, ts)
    if not ok then bad, err = "final sync", e end
  end
  leave()
  if bad then return nil, bad, err end
  return env
end

local TOL = { f32 = { 1e-4, 1e-5 }, f64 = { 1e-9, 1e-12 }, f16 = { 1e-2, 1e-3 }, bf16 = { 2e-2, 1e-2 } }

-- nil when ta (reference) and tb (fused) agree, else why.
local function compare(ta, tb, exact)
  if ta:dtype() ~= tb:dtype() then return "dtype " .. ta:dtype() .. " in the reference, " .. tb:dtype() .. " fused" end
  local sa, sb = shape_str(ta:shape()), shape_str(tb:shape())
  if sa ~= sb then return "shape " .. sa .. " in the reference, " .. sb .. " fused" end
  local fa, fb = flatten(ta:tolist()), flatten(tb:tolist())
  if #fa ~= #fb then return #fa .. " values in the reference, " .. #fb .. " fused" end
  local dt = ta:dtype()
  if not isf(dt) then
    for i = 1, #fa do
      if fa[i] ~= fb[i] then return string.format("[%d]: reference %s, fused %s", i, tostring(fa[i]), tostring(fb[i])) end
    end
    return nil
  end
  local rtol, atol = TOL[dt][1], TOL[dt][2]
  local scale = 0
  if not exact then
    for i = 1, #fa do
      local x = fa[i]
      if x == x and x ~= math.huge and x ~= -math.huge then scale = math.max(scale, math.abs(x)) end
    end
  end
  for i = 1, #fa do
    local x, y = fa[i], fb[i]
    local ok
    if x ~= x or y ~= y then ok = x ~= x and y ~= y
    elseif exact or x == math.huge or x == -math.huge or y == math.huge or y == -math.huge then ok = x == y
    else ok = math.abs(x - y) <= atol + rtol * math.max(math.abs(x), 0.1 * scale) end
    if not ok then
      return string.format("[%d]: reference %.17g, fused %.17g%s", i, x, y, exact and " (exact)" or "")
    end
  end
  return nil
end

-- nil when the two runs agree, else {kind, step, meta, why}.
local function compare_envs(prog, keep, A, B)
  for i, s in ipairs(prog.steps) do
    if not keep or keep[i] then
      for _, m in ipairs(s.outs) do
        local ta, tb = A.V[m], B.V[m]
        local why
        if m.undefined then
          if ta:dtype() ~= tb:dtype() or shape_str(ta:shape()) ~= shape_str(tb:shape()) then why = "shape or dtype differ" end
        else
          why = compare(ta, tb, m.exact)
        end
        if why then return { kind = "value", step = i, meta = m, why = why } end
      end
    end
  end
  if prog.loss_step and (not keep or keep[prog.loss_step]) then
    for i, s in ipairs(prog.steps) do
      if s.kind == "input" and (not keep or keep[i]) and s.outs[1].leaf then
        local m = s.outs[1]
        local ga, gb = A.V[m].grad, B.V[m].grad
        local why
        if (ga == nil) ~= (gb == nil) then
          why = "a gradient in " .. (ga and "the reference" or "the fused run") .. " only"
        elseif ga then
          why = compare(ga, gb, false)
        end
        if why then return { kind = "grad", step = prog.loss_step, meta = m, why = "gradient of " .. lit(m) .. " " .. why } end
      end
    end
  end
  return nil
end

local function check(prog, keep, A)
  if not A then
    local e, bad, err = run(prog, keep, "ref")
    if not e then return { kind = "error ref", step = bad, why = err } end
    A = e
  end
  local B, bad, err = run(prog, keep, "fused")
  if not B then return { kind = "error fused", step = bad, why = err } end
  return compare_envs(prog, keep, A, B)
end

local function show_step(i, s, with_data)
  local outs = {}
  for k, m in ipairs(s.outs) do
    outs[k] = lit(m) .. ": " .. m.dt .. " " .. shape_str(m.shape) .. (m.exact and "" or " ~") .. (m.undefined and " undefined" or "")
  end
  local lhs = {}
  for k, m in ipairs(s.outs) do lhs[k] = lit(m) end
  local line = string.format("  [%2d] %s%s", i, #lhs > 0 and table.concat(lhs, ", ") .. " = " or "", s.call)
  if #outs > 0 then line = line .. "   -- " .. table.concat(outs, "; ") end
  if with_data and s.flat and #s.flat <= 64 then line = line .. "\n         values " .. lit(s.flat) end
  if with_data and s.weights then line = line .. "\n         weights " .. lit(s.weights) end
  return line
end

local function show_prog(prog, keep, with_data)
  local lines = { string.format("  seed %d: %s, %s, %s", prog.seed, prog.fdt, prog.jit and "jit_min 0" or "default tier",
    prog.grad and "inputs require grad" or "no gradients") }
  for i, s in ipairs(prog.steps) do
    if not keep or keep[i] then lines[#lines + 1] = show_step(i, s, with_data) end
  end
  return table.concat(lines, "\n")
end

-- The steps a failure depends on: the failing step, the producers of everything it reads, and
-- the in-place steps writing into those values' storage, transitively.
local function slice(prog, target)
  local keep = { [target] = true }
  local changed = true
  while changed do
    changed = false
    local stores = {}
    for i in pairs(keep) do
      for _, m in ipairs(prog.steps[i].ins) do stores[m.store] = true end
      for _, m in ipairs(prog.steps[i].outs) do stores[m.store] = true end
    end
    for i, s in ipairs(prog.steps) do
      if not keep[i] then
        local need = s.mutates and stores[s.mutates.store] and i < target
        if not need then
          for j in pairs(keep) do
            for _, m in ipairs(prog.steps[j].ins) do if m.step == i then need = true end end
          end
        end
        if need then keep[i] = true; changed = true end
      end
    end
  end
  return keep
end

local function minimize(prog, fail)
  local target = type(fail.step) == "number" and fail.step or #prog.steps
  local keep = slice(prog, target)
  local f = check(prog, keep)
  if not f or f.kind ~= fail.kind then
    keep = nil
    f = fail
  end
  keep = keep or {}
  if not next(keep) then for i = 1, #prog.steps do keep[i] = true end end
  local tries = 0
  for i = #prog.steps, 1, -1 do
    if keep[i] and i ~= target and tries < 60 then
      local used = false
      for j in pairs(keep) do
        if j ~= i then for _, m in ipairs(prog.steps[j].ins) do if m.step == i then used = true end end end
      end
      if not used then
        keep[i] = nil
        tries = tries + 1
        local f2 = check(prog, keep)
        if f2 and f2.kind == fail.kind then f = f2 else keep[i] = true end
      end
    end
  end
  return keep, f
end

local function describe(f)
  local where = type(f.step) == "number" and ("step " .. f.step) or tostring(f.step)
  if f.kind == "value" then return "value " .. lit(f.meta) .. " (" .. where .. ") differs: " .. f.why end
  if f.kind == "grad" then return f.why end
  return f.kind .. " at " .. where .. ": " .. tostring(f.why)
end

-- One seed: nil when it passes, else a report.
local function fuzz_one(seed)
  local ok, prog = pcall(generate, seed)
  if not ok then
    local e = prog
    if type(e) ~= "table" or not e.prog then return "generation failed: " .. tostring(e) end
    local p = e.prog
    local msg = "the reference run failed at step " .. e.step .. ": " .. tostring(e.err) .. "\n" .. show_prog(p)
    local f = { kind = "error ref", step = e.step, why = e.err }
    local keep, f2 = minimize(p, f)
    local n = 0
    for _ in pairs(keep) do n = n + 1 end
    return msg .. "\n  minimized (" .. n .. " steps): " .. describe(f2):gsub("\n.*", "") .. "\n" .. show_prog(p, keep, true)
  end
  if VERBOSE then print(show_prog(prog)) end
  local f = check(prog, nil, prog.ref)
  prog.ref = nil
  collectgarbage()
  if not f then return nil end
  local msg = describe(f) .. "\n" .. show_prog(prog)
  local keep, f2 = minimize(prog, f)
  local n = 0
  for _ in pairs(keep) do n = n + 1 end
  msg = msg .. "\n  minimized (" .. n .. " steps): " .. describe(f2) .. "\n" .. show_prog(prog, keep, true)
  return msg
end

st.set_poison(true)
local seeds = {}
if ONE_SEED then seeds = { ONE_SEED } else for i = 0, COUNT - 1 do seeds[#seeds + 1] = FIRST + i end end
local failures, t0 = 0, os.time()
for _, seed in ipairs(seeds) do
  local msg = fuzz_one(seed)
  if msg then
    failures = failures + 1
    H.failed = H.failed + 1
    if failures <= 10 then
      print(string.format("FAIL fuzz_ops_seed_%d: %s\n  rerun: ST_FUZZ_OPS_SEED=%d build/stitch tests/lua/test_fuzz_ops.lua", seed, msg, seed))
    end
  end
  collectgarbage()
  if #seeds > 100 and (seed - seeds[1] + 1) % 100 == 0 then   -- a long run's progress
    print(string.format("# %d of %d programs (seed %d), %d failed, %d s", seed - seeds[1] + 1, #seeds, seed, failures, os.time() - t0))
    io.stdout:flush()
  end
end
st.set_poison(false)
if failures == 0 then
  print(string.format("PASS fuzz_ops_%d_programs (seeds %d..%d, %d s)", #seeds, seeds[1], seeds[#seeds], os.time() - t0))
else
  print(string.format("%d of %d programs failed", failures, #seeds))
end
H.done()
