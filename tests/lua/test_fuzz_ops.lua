-- test_fuzz_ops.lua — the differential fuzzer of the tensor ops written as compositions (Lua in
-- lua_frontend/lib/tensor_ops.lua, tensor_sort.lua, tensor_index.lua, and the C ops they build on):
-- seeded random programs of 3-12 ops (sort, argsort, topk, cumsum, cumprod, tril/triu, masked_fill,
-- x[mask], x[idx] and assignment through them, scatter/scatter_/scatter_add_, nonzero, repeat, flip,
-- roll, split/chunk/unbind, pad in its four modes, movedim, atan2, isnan/isinf/isfinite, clamp with
-- tensor bounds, lerp, addcmul/addcdiv, norm, all/any, the *_like creators, where, gather,
-- index_select, one_hot, index_add, bernoulli, multinomial, randperm, mixed with elementwise, reduction, view, cast and comparison ops) on random shapes
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
-- The ops: tests/lua/fuzz_ops_table.lua, given the helpers above
-- ---------------------------------------------------------------------------------------------
local OPS = assert(loadfile((arg[0]:match("(.*/)") or "./") .. "fuzz_ops_table.lua"))({
  isf = isf, numel = numel, copy = copy, shape_str = shape_str,
  MAX_NUMEL = MAX_NUMEL, INT_BOUND = INT_BOUND, FLT_BOUND = FLT_BOUND,
  bshape = bshape, nest = nest, flatten = flatten,
  lit = lit, args = args, mcall = mcall, fcall = fcall,
  val = val, bnd = bnd, exa = exa, spc = spc,
})

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
