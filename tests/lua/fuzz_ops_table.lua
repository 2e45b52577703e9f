-- fuzz_ops_table.lua — the op table of test_fuzz_ops.lua (loaded by it with loadfile; not a test
-- of its own): each op's gen(g, R) draws its operands from the program's pool (or makes
-- constants), emits one step (g:emit) and returns true, or returns nil when nothing in the pool
-- fits. Called with the generator's helpers (K, from test_fuzz_ops.lua); returns the list of ops
-- ({name, weight, gen}) in draw order.
local K = ...
local isf, numel, copy, shape_str = K.isf, K.numel, K.copy, K.shape_str
local MAX_NUMEL, INT_BOUND, FLT_BOUND = K.MAX_NUMEL, K.INT_BOUND, K.FLT_BOUND
local bshape, nest, flatten = K.bshape, K.nest, K.flatten
local lit, args, mcall, fcall = K.lit, K.args, K.mcall, K.fcall
local val, bnd, exa, spc = K.val, K.bnd, K.exa, K.spc

local function dimpick(R, nd)
  local n = math.max(nd, 1)
  local d = R.int(1, n)
  if R.chance(0.3) then d = d - n - 1 end
  return d
end
local function posd(d, nd) return d > 0 and d or math.max(nd, 1) + d + 1 end
-- A pool value with at least one dim that satisfies pred (empty ones too when empty_ok), a dim of
-- it as drawn (maybe negative), that dim's position and size; nil when none fits.
local function value_and_dim(g, R, pred, empty_ok)
  local a = g:choose(function(m) return #m.shape >= 1 and (not pred or pred(m)) end, empty_ok)
  if not a then return end
  local d = dimpick(R, #a.shape)
  local pd = posd(d, #a.shape)
  return a, d, pd, a.shape[pd]
end
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
  local a, d, _, n = value_and_dim(g, R, nil, true)
  if not a then return end
  local b = a.bound * n
  if b > (isf(a.dt) and FLT_BOUND or INT_BOUND) then return end
  return g:emit { call = mcall(a, "cumsum", d), ins = { a }, fn = function(V) return { V[a]:cumsum(d) } end,
    meta = function() return { exact = a.exact and (not isf(a.dt) or n == 1), bound = b, special = a.special } end }
end)

op("cumprod", 2, function(g, R)
  local a, d, _, n = value_and_dim(g, R, nil, true)
  if not a then return end
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
  local a, d, pd, n = value_and_dim(g, R, function(m)
    return (not inplace or g:inplace_ok(m)) and not (add and m.dt == "bool")
  end)
  if not a then return end
  local nd = #a.shape
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

-- one_hot, index_add, bernoulli, randperm ------------------------------------------------------

op("one_hot", 1, function(g, R)
  local n = R.int(1, 7)
  local idx = R.chance(0.4) and g:choose(function(m)
    return m.dt == "i64" and m.idxmax and m.idxmax <= n and #m.shape <= 2 and numel(m.shape) * n <= MAX_NUMEL
  end)
  idx = idx or g:index({ R.int(1, 6) }, 1, n, false)
  local withn = R.chance(0.7)   -- without n: the class count is the largest id (a value: exact)
  return g:emit { call = fcall("st.one_hot", idx, withn and n or nil), ins = { idx },
    fn = function(V) return { st.one_hot(V[idx], withn and n or nil) } end,
    meta = function() return { exact = true, bound = 1 } end }
end)

op("index_add", 2, function(g, R)
  local a, d, pd, n = value_and_dim(g, R, function(m) return isf(m.dt) end)
  if not a then return end
  local unique = R.chance(0.5)
  local k = R.int(1, unique and n or n + 2)
  local idx = g:index({ k }, 1, n, unique)
  local sshape = copy(a.shape)
  sshape[pd] = k
  local src = R.chance(0.4) and g:choose(function(m) return m.dt == a.dt and shape_str(m.shape) == shape_str(sshape) end)
  src = src or g:const(sshape, a.dt, "grid")
  local bound = a.bound + src.bound * k
  if bound > FLT_BOUND then return end
  -- a sum: inexact unless every place is added to once (then x + s, elementwise)
  local exact = unique and a.exact and src.exact
  return g:emit { call = mcall(a, "index_add", d, idx, src), ins = { a, idx, src },
    fn = function(V) return { V[a]:index_add(d, V[idx], V[src]) } end,
    meta = function() return { exact = exact, bound = bound, special = a.special or src.special } end }
end)

-- a draw against exact probabilities: the same counter-based stream on every device
op("bernoulli", 1, function(g, R)
  local a = g:choose(function(m) return isf(m.dt) and m.exact and not m.special end)
  if not a then return end
  return g:emit { call = lit(a) .. ":sigmoid():bernoulli()", ins = { a },
    fn = function(V) return { V[a]:sigmoid():bernoulli() } end,
    meta = function() return { exact = true, bound = 1 } end }
end)

-- draws from exact integer weights floor(|a|) + 1 (their cumsum is exact in any order): with
-- replacement a compare-and-sum against the cumsum, without it the top-k of log(w) plus Gumbel
-- noise (elementwise: the prelude's own functions); the same counter-based stream on every device
op("multinomial", 1, function(g, R)
  local a = g:choose(function(m)
    return isf(m.dt) and m.exact and not m.special and (#m.shape == 1 or #m.shape == 2) and m.shape[#m.shape] >= 1
      and m.bound * m.shape[#m.shape] < 1e6
  end)
  if not a then return end
  local n = a.shape[#a.shape]
  local repl = R.chance(0.5)
  local k = repl and R.int(1, 6) or R.int(1, n)
  return g:emit { call = "(" .. lit(a) .. ":abs():floor() + 1):multinomial(" .. k .. ", " .. tostring(repl) .. ")",
    ins = { a },
    fn = function(V) return { (V[a]:abs():floor() + 1):multinomial(k, repl) } end,
    meta = function() return { exact = true, bound = n, idxmax = n } end }
end)

op("randperm", 1, function(g, R)
  local n = R.int(1, 9)
  local dt = R.pick({ "i64", "f64" })
  return g:emit { call = fcall("st.randperm", n, dt), ins = {},
    fn = function(_, env) return { st.randperm(n, dt):to(env.dev) } end,
    meta = function() return { exact = true, bound = n, idxmax = dt == "i64" and n or nil } end }
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

return OPS
