-- tensor_ops.lua — tensor ops built from the ops stitch already has: tril/triu, masked_fill, flip,
-- roll, repeat_tensor, split/chunk/unbind, movedim, pad, isnan/isinf/isfinite, lerp,
-- addcmul/addcdiv, norm, all/any, clamp with tensor bounds, cumsum, atan2, the *_like constructors
-- and randperm. Loaded when the module opens (llib.c), before tensor_sort.lua and tensor_index.lua
-- (which share its checks through M._util); each op becomes a method in st.Tensor and a module
-- function (st.flip(x, 1) == x:flip(1)); the *_like constructors and randperm are module functions
-- only.
--
-- Invariants:
--   * Every op is a composition of lazy tensor ops that autograd differentiates (views, cat,
--     where, pointwise, reductions, index_select), so forwards and backwards stay in the trace and
--     fuse; nothing reads tensor values back to Lua, except randperm (it draws its seed from the
--     global RNG, a sync point, as st.data's loader does).
--   * Every argument is checked before any tensor work: dims are 1-based (negative ones count from
--     the end, 0 is an error), option tables accept only the names listed, and each error names
--     the op and the offending value or shape, with the caller's position.
--   * Helper tensors follow the input's device: fills and aranges are unbound values (computed on
--     the device of the op that uses them), index lists are moved to the input's device.
local st = ...

local T = st.Tensor
local c_clamp = T.clamp

-- ---------------------------------------------------------------------------------------------
-- Argument checks. `lvl` counts the frames from the function calling the check up to the user's
-- code (1: the op called the check itself); errors carry the user's position.
-- ---------------------------------------------------------------------------------------------

local function shape_str(t)
  return "(" .. table.concat(t:shape(), ", ") .. ")"
end

local function show(v)
  if type(v) == "string" then return '"' .. v .. '"' end
  if st.is_tensor(v) then return "a tensor of shape " .. shape_str(v) end
  if type(v) == "table" then
    local parts = {}
    for i = 1, #v do parts[i] = show(v[i]) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end

local function fail(op, msg, lvl)
  error(op .. ": " .. msg, (lvl or 1) + 2)
end

local function check_tensor(op, v, what, lvl)
  if not st.is_tensor(v) then
    fail(op, "expected a tensor for " .. what .. ", got " .. (v == nil and "nil" or type(v) .. " " .. show(v)), (lvl or 1) + 1)
  end
  return v
end

local function check_int(op, v, what, lvl)
  local i = math.type(v) and math.tointeger(v)
  if not i then
    fail(op, "expected an integer for " .. what .. ", got " .. (type(v) == "number" and show(v) or type(v)), (lvl or 1) + 1)
  end
  return i
end

-- A 1-based dim (negative from the end) of a tensor with nd dims → 1-based positive dim. A 0-d
-- tensor accepts 1 and -1, as the C bindings do.
local function check_dim(op, d, nd, lvl, what)
  lvl = (lvl or 1) + 1
  d = check_int(op, d, what or "dim", lvl)
  local n = math.max(nd, 1)
  if d == 0 or d > n or d < -n then
    fail(op, string.format("dim %d out of range for a %d-d tensor (dims are 1-based: 1..%d or -%d..-1)", d, nd, n, n), lvl)
  end
  return d > 0 and d or n + d + 1
end

-- Dims given as a number or a table of numbers; no repeats.
local function check_dims(op, nd, lvl, list)
  lvl = (lvl or 1) + 1
  if type(list) ~= "table" then list = { list } end
  local out, seen = {}, {}
  for i = 1, #list do
    local d = check_dim(op, list[i], nd, lvl)
    if seen[d] then fail(op, "dim " .. d .. " appears twice", lvl) end
    seen[d] = true
    out[i] = d
  end
  return out
end

-- Reduction dims: nil (all dims), a number or a table → nil or a table of positive dims.
local function reduce_dims(op, x, dim, lvl)
  lvl = (lvl or 1) + 1
  if dim == nil then return nil end
  if type(dim) ~= "number" and (type(dim) ~= "table" or st.is_tensor(dim)) then
    fail(op, "dim must be a number or a table of numbers, got " .. type(dim), lvl)
  end
  return check_dims(op, x:dim(), lvl, dim)
end

local function check_keepdim(op, k, lvl)
  if k ~= nil and type(k) ~= "boolean" then
    fail(op, "keepdim must be a boolean, got " .. type(k) .. " " .. show(k), (lvl or 1) + 1)
  end
  return k == true
end

-- An options table: only the names in `known` (a set), anything else is an error naming it.
local function check_opts(op, opts, known, lvl)
  lvl = (lvl or 1) + 1
  if opts == nil then return {} end
  if type(opts) ~= "table" or st.is_tensor(opts) then fail(op, "expected an options table, got " .. type(opts), lvl) end
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for n in pairs(known) do names[#names + 1] = n end
      table.sort(names)
      fail(op, "unknown option " .. show(k) .. " (known: " .. table.concat(names, ", ") .. ")", lvl)
    end
  end
  return opts
end

local function is_float(dt)
  return dt == "f32" or dt == "f64" or dt == "f16" or dt == "bf16"
end

-- A dtype name (nil: none) → its short name; an unknown one is an error naming the op.
local function check_dtype(op, dt, lvl)
  if dt == nil then return nil end
  local ok, t = pcall(st.empty, 0, dt)
  if type(dt) ~= "string" or not ok then fail(op, "unknown dtype " .. show(dt), (lvl or 1) + 1) end
  return t:dtype()
end

-- A constant block of `shape` with x's dtype. Fills (like aranges and random tensors) are unbound
-- values: they are computed on the device of the op that uses them, so they need no placing.
local function full_as(x, shape, v)
  return st.full(shape, v, x:dtype())
end

-- 1-based indices (a Lua list) as an i64 tensor on x's device (st.tensor makes it on the default
-- device).
local function index_on(x, list)
  return st.tensor(list, "i64"):to(x:device())
end

local M = {}

-- ---------------------------------------------------------------------------------------------
-- tril / triu: where() against a mask of (col - row) compared with the diagonal k; batched over
-- leading dims.
-- ---------------------------------------------------------------------------------------------

local function tri(op, x, k, lower)
  check_tensor(op, x, "argument #1", 2)
  k = k == nil and 0 or check_int(op, k, "the diagonal k", 2)
  if x:dim() < 2 then fail(op, "expected a tensor with at least 2 dims, got shape " .. shape_str(x), 2) end
  local n, m = x:size(-2), x:size(-1)
  local rows = st.arange(n):unsqueeze(2)
  local cols = st.arange(m)
  local diff = cols - rows                      -- (n, m): col - row, 0-based
  local mask = lower and diff:le(k) or diff:ge(k)
  local zero = 0
  if x:dtype() == "bool" then zero = false end
  return st.where(mask, x, zero)
end

-- (Not tail calls: the checks count the op's frame to find the caller's position.)
function M.tril(x, k) local r = tri("tril", x, k, true) return r end
function M.triu(x, k) local r = tri("triu", x, k, false) return r end

-- ---------------------------------------------------------------------------------------------
-- masked_fill(x, mask, value): value where mask is true (or non-zero); keeps x's dtype.
-- ---------------------------------------------------------------------------------------------

local int_range = { i32 = { -2147483648, 2147483647 }, i64 = { math.mininteger, math.maxinteger } }

-- v (a number or boolean) as a Lua value that keeps x's dtype in where(): booleans for bool, a Lua
-- integer (a fraction dropped toward zero, overflow an error) for integer dtypes.
local function scalar_for(op, x, v, lvl)
  local dt = x:dtype()
  if type(v) == "boolean" then
    if dt == "bool" then return v end
    v = v and 1 or 0
  end
  lvl = (lvl or 1) + 1
  if type(v) ~= "number" then fail(op, "expected a number or boolean for the value, got " .. type(v), lvl) end
  if dt == "bool" then return v ~= 0 end
  if is_float(dt) then return v + 0.0 end
  local r = int_range[dt]
  local i = v >= 0 and math.floor(v) or math.ceil(v)
  i = (v == v) and math.tointeger(i)
  if not i or (r and (i < r[1] or i > r[2])) then
    fail(op, "value " .. show(v) .. " cannot be converted to type " .. dt .. " without overflow", lvl)
  end
  return i
end

function M.masked_fill(x, mask, value)
  check_tensor("masked_fill", x, "argument #1")
  check_tensor("masked_fill", mask, "the mask")
  local mdt = mask:dtype()
  if mdt ~= "bool" and mdt ~= "i32" and mdt ~= "i64" then
    fail("masked_fill", "the mask must be bool or integer, got " .. mdt)
  end
  local v = scalar_for("masked_fill", x, value)
  if mdt ~= "bool" then mask = mask:ne(0) end
  local r = st.where(mask, v, x)
  if r:dim() ~= x:dim() or shape_str(r) ~= shape_str(x) then
    fail("masked_fill", "mask of shape " .. shape_str(mask) .. " does not broadcast to the tensor's shape " .. shape_str(x))
  end
  return r
end

-- ---------------------------------------------------------------------------------------------
-- flip, roll
-- ---------------------------------------------------------------------------------------------

-- flip(dims...): reverses each dim with an index_select of n..1 (slices have no negative step);
-- the gradient is the same reversal (index_add).
function M.flip(x, ...)
  check_tensor("flip", x, "argument #1")
  local list = ...
  if type(list) ~= "table" then list = { ... }
  elseif select("#", ...) > 1 then fail("flip", "dims given as a table and then more arguments") end
  if #list == 0 then fail("flip", "expected dims (numbers or a table of numbers)") end
  local dims = check_dims("flip", x:dim(), 1, list)
  local r = x
  if x:dim() == 0 then return x:clone() end
  for _, d in ipairs(dims) do
    local n = x:size(d)
    if n > 1 then r = r:index_select(d, st.arange(n, 0, -1)) end
  end
  if r == x then r = x:clone() end
  return r
end

-- roll(shifts, dims): entries move `shift` places toward the end along each dim, wrapping
-- around; without dims the tensor is rolled flattened and the shape restored (PyTorch).
function M.roll(x, shifts, dims)
  check_tensor("roll", x, "argument #1")
  if dims == nil then
    local s = check_int("roll", shifts, "shifts (without dims, one shift for the flattened tensor)")
    return M.roll(x:reshape(-1), s, 1):reshape(x:shape())
  end
  local sl = type(shifts) == "table" and shifts or { shifts }
  local dl = check_dims("roll", x:dim(), 1, dims)
  if #sl ~= #dl then
    fail("roll", #sl .. " shifts for " .. #dl .. " dims: give one shift per dim")
  end
  local r = x
  for i, d in ipairs(dl) do
    local s = check_int("roll", sl[i], "shift " .. i)
    local n = x:dim() == 0 and 1 or x:size(d)
    s = n > 0 and s % n or 0
    if s > 0 then r = st.cat({ r:narrow(d, n - s + 1, s), r:narrow(d, 1, n - s) }, d) end
  end
  if r == x then r = x:clone() end
  return r
end

-- ---------------------------------------------------------------------------------------------
-- repeat_tensor (PyTorch's repeat; `repeat` is a Lua keyword, so also st.Tensor["repeat"])
-- ---------------------------------------------------------------------------------------------

-- repeat_tensor(r1, r2, ...): the tensor tiled r_i times along dim i; with more counts than dims,
-- size-1 dims are added in front. Each repeated dim is unsqueeze + expand + flatten: a copy the
-- fuser folds into its consumer, and the gradient (expand's) sums the copies. The result is always
-- a new tensor, as in PyTorch: the flatten of a repeated size-1 dim is a view with stride 0 (an
-- in-place write into it would fail, and one into x would show through), and the leading dims
-- alone are a reshape, so those are copied (contiguous, clone).
function M.repeat_tensor(x, first, ...)
  check_tensor("repeat", x, "argument #1")
  local reps = type(first) == "table" and first or { first, ... }
  if type(first) == "table" and select("#", ...) > 0 then fail("repeat", "counts given as a table and then more arguments") end
  if #reps < x:dim() then
    fail("repeat", #reps .. " repeat counts for a tensor of shape " .. shape_str(x) .. " (at least " .. x:dim() .. " needed)")
  end
  local counts = reps
  reps = {}
  for i = 1, #counts do
    reps[i] = check_int("repeat", counts[i], "repeat count " .. i)
    if reps[i] < 0 then fail("repeat", "repeat count " .. i .. " is negative (" .. reps[i] .. ")") end
  end
  local shape = x:shape()
  for _ = x:dim() + 1, #reps do table.insert(shape, 1, 1) end
  local r = x:reshape(shape)
  local tiled = false
  for d = 1, #reps do
    if reps[d] ~= 1 then
      local sz = r:shape()
      local ex = {}
      for k = 1, #sz do ex[#ex + 1] = (k == d) and reps[d] or -1; if k == d then ex[#ex + 1] = -1 end end
      r = r:unsqueeze(d):expand(ex):flatten(d, d + 1)
      tiled = true
    end
  end
  return tiled and r:contiguous() or r:clone()
end
M["repeat"] = M.repeat_tensor

-- ---------------------------------------------------------------------------------------------
-- split, chunk, unbind (lists of views), movedim
-- ---------------------------------------------------------------------------------------------

-- split(size | {sizes...}, dim = 1): a Lua list of narrow views.
local function split(op, x, spec, dim, lvl)
  local d = check_dim(op, dim == nil and 1 or dim, x:dim(), lvl + 1)
  if x:dim() == 0 then fail(op, "cannot split a 0-d tensor", lvl + 1) end
  local n = x:size(d)
  local out, start = {}, 1
  if type(spec) == "table" then
    local total = 0
    for i = 1, #spec do
      local s = check_int(op, spec[i], "section " .. i, lvl + 1)
      if s < 0 then fail(op, "section " .. i .. " is negative (" .. s .. ")", lvl + 1) end
      total = total + s
    end
    if total ~= n then
      fail(op, "sections " .. show(spec) .. " sum to " .. total .. ", not to the size " .. n .. " of dim " .. d, lvl + 1)
    end
    for i = 1, #spec do
      out[i] = x:narrow(d, start, spec[i])
      start = start + spec[i]
    end
    return out
  end
  local size = check_int(op, spec, "the split size", lvl + 1)
  if size <= 0 then fail(op, "split size must be positive, got " .. size, lvl + 1) end
  if n == 0 then return { x:narrow(d, 1, 0) } end
  while start <= n do
    local len = math.min(size, n - start + 1)
    out[#out + 1] = x:narrow(d, start, len)
    start = start + len
  end
  return out
end

function M.split(x, spec, dim)
  check_tensor("split", x, "argument #1")
  local r = split("split", x, spec, dim, 1)
  return r
end

-- chunk(n, dim = 1): pieces of ceil(size / n) entries, the last smaller (so maybe fewer than n).
function M.chunk(x, n, dim)
  check_tensor("chunk", x, "argument #1")
  n = check_int("chunk", n, "the number of chunks")
  if n <= 0 then fail("chunk", "number of chunks must be positive, got " .. n) end
  local d = check_dim("chunk", dim == nil and 1 or dim, x:dim())
  if x:dim() == 0 then fail("chunk", "cannot chunk a 0-d tensor") end
  local size = x:size(d)
  local r = split("chunk", x, math.max(1, (size + n - 1) // n), d, 1)
  return r
end

-- unbind(dim = 1): the list of selects along dim.
function M.unbind(x, dim)
  check_tensor("unbind", x, "argument #1")
  local d = check_dim("unbind", dim == nil and 1 or dim, x:dim())
  if x:dim() == 0 then fail("unbind", "cannot unbind a 0-d tensor") end
  local out = {}
  for i = 1, x:size(d) do out[i] = x:select(d, i) end
  return out
end

-- movedim(src, dst): dims src (a number or table) moved to the positions dst; the others keep
-- their order. A permute view.
function M.movedim(x, src, dst)
  check_tensor("movedim", x, "argument #1")
  local nd = x:dim()
  local s = check_dims("movedim", nd, 1, type(src) == "table" and src or { src })
  local t = check_dims("movedim", nd, 1, type(dst) == "table" and dst or { dst })
  if #s ~= #t then fail("movedim", "source " .. show(src) .. " and destination " .. show(dst) .. " differ in length") end
  if nd == 0 then return x end
  local perm, used = {}, {}
  for i = 1, #s do perm[t[i]] = s[i]; used[s[i]] = true end
  local k = 1
  for p = 1, nd do
    if not perm[p] then
      while used[k] do k = k + 1 end
      perm[p] = k
      k = k + 1
    end
  end
  return x:permute(perm)
end

-- ---------------------------------------------------------------------------------------------
-- pad(pads, mode = "constant", value = 0) or pad(pads, {mode = ..., value = ...})
-- ---------------------------------------------------------------------------------------------

local pad_modes = { constant = true, reflect = true, replicate = true, circular = true }
local pad_opts = { mode = true, value = true }

-- The source of padded position q (0-based) along a dim of size n with `left` added in front,
-- 1-based, for the non-constant modes.
local function pad_source(mode, q, left, n)
  local s = q - left
  if mode == "reflect" then
    if s < 0 then s = -s elseif s >= n then s = 2 * (n - 1) - s end
  elseif mode == "replicate" then
    s = math.max(0, math.min(n - 1, s))
  else
    s = s % n
  end
  return s + 1
end

-- pads lists (before, after) pairs from the last dim backwards, as PyTorch's F.pad. Constant mode
-- pads with zeros through one masked view per dim (st._zero_pad) and joins other fill blocks
-- with cat (negative pads crop with narrow); the others gather with one
-- index_select per padded dim, whose gradient (index_add) sums what each entry fed. The result is
-- always a new tensor (PyTorch): pads that only crop (narrow views of x) or add nothing are cloned.
function M.pad(x, pads, mode, value)
  check_tensor("pad", x, "argument #1")
  if type(mode) == "table" then
    if value ~= nil then fail("pad", "an options table takes no value after it") end
    local o = check_opts("pad", mode, pad_opts)
    mode, value = o.mode, o.value
  end
  mode = mode == nil and "constant" or mode
  if not pad_modes[mode] then
    fail("pad", "mode must be \"constant\", \"reflect\", \"replicate\" or \"circular\", got " .. show(mode))
  end
  if value ~= nil and mode ~= "constant" then fail("pad", "mode " .. show(mode) .. " takes no value") end
  if value ~= nil and type(value) ~= "number" and type(value) ~= "boolean" then
    fail("pad", "value must be a number, got " .. type(value))
  end
  if type(pads) ~= "table" or st.is_tensor(pads) then fail("pad", "pads must be a table of integers, got " .. type(pads)) end
  local nd = x:dim()
  if #pads % 2 ~= 0 or #pads > 2 * nd then
    fail("pad", "pads " .. show(pads) .. " must hold a (before, after) pair per padded dim, at most " .. nd .. " pairs for shape " .. shape_str(x))
  end
  local given = pads
  pads = {}
  for i = 1, #given do pads[i] = check_int("pad", given[i], "pads entry " .. i) end
  local fill = 0
  if value ~= nil then fill = scalar_for("pad", x, value) elseif x:dtype() == "bool" then fill = false end
  local r, copied = x, false
  for p = 1, #pads // 2 do
    local d = nd - p + 1
    local before, after = pads[2 * p - 1], pads[2 * p]
    local n = r:size(d)
    if mode == "constant" then
      if before < 0 then
        if -before > n then fail("pad", "pad " .. before .. " crops more than the size " .. n .. " of dim " .. d) end
        r, n = r:narrow(d, 1 - before, n + before), n + before
        before = 0
      end
      if after < 0 then
        if -after > n then fail("pad", "pad " .. after .. " crops more than the size " .. n .. " of dim " .. d) end
        r, n = r:narrow(d, 1, n + after), n + after
        after = 0
      end
      if (fill == false or (fill == 0 and 1 / fill > 0)) and (before > 0 or after > 0) then
        -- zeros: one masked view of r (read as 0 outside it; no fill blocks to add up)
        local b, a = {}, {}
        for k = 1, nd do b[k], a[k] = 0, 0 end
        b[d], a[d] = before, after
        r, copied = st._zero_pad(r, b, a), true
      else
        local parts = {}
        local function block(k)
          local sh = r:shape()
          sh[d] = k
          parts[#parts + 1] = full_as(x, sh, fill)
        end
        if before > 0 then block(before) end
        parts[#parts + 1] = r
        if after > 0 then block(after) end
        if #parts > 1 then r, copied = st.cat(parts, d), true end
      end
    else
      if before < 0 or after < 0 then fail("pad", "mode " .. show(mode) .. " takes no negative pads, got " .. show(pads)) end
      local limit = mode == "reflect" and n - 1 or (mode == "circular" and n or math.huge)
      if n == 0 or before > limit or after > limit then
        fail("pad", "pads " .. before .. ", " .. after .. " too large for mode " .. show(mode) .. " and dim " .. d .. " of size " .. n ..
          (mode == "reflect" and " (each must be below the size)" or mode == "circular" and " (each at most the size)" or ""))
      end
      if before > 0 or after > 0 then
        local idx = {}
        for q = 0, n + before + after - 1 do idx[q + 1] = pad_source(mode, q, before, n) end
        r, copied = r:index_select(d, index_on(x, idx)), true
      end
    end
  end
  if not copied then r = r:clone() end
  return r
end

-- ---------------------------------------------------------------------------------------------
-- isnan / isinf / isfinite (bool; integer and bool tensors are never NaN or infinite)
-- ---------------------------------------------------------------------------------------------

function M.isnan(x)
  check_tensor("isnan", x, "argument #1")
  return x:ne(x)
end

function M.isinf(x)
  check_tensor("isinf", x, "argument #1")
  if not is_float(x:dtype()) then return x:ne(x) end
  return x:abs():eq(math.huge)
end

-- x - x is 0 for finite x, NaN for NaN and infinities.
function M.isfinite(x)
  check_tensor("isfinite", x, "argument #1")
  if not is_float(x:dtype()) then return x:eq(x) end
  return (x - x):eq(0)
end

-- ---------------------------------------------------------------------------------------------
-- atan2(y, x): the angle of the point (x, y), in [-pi, pi]
-- ---------------------------------------------------------------------------------------------

-- stitch has no atan op, so: a rough start, then Newton's method on f(t) = x sin t - y cos t,
-- which is r sin(t - phi) (r = |(x, y)|, phi the answer). There a Newton step maps an error e to
-- e - tan(e), about -e^3 / 3: the start, a / (1 + 0.28 a^2) for atan(a) on [0, 1] (error under
-- 5e-3) folded into the right octant, becomes 4e-8 after one step and below f64's rounding after
-- the second. The result is as accurate as sin and cos, and its gradient, through the last step,
-- is the known one (x / r^2 for y, -y / r^2 for x) to the same residual. (0, 0) and infinite
-- inputs keep the start (no Newton step: it would divide by 0 or make inf - inf); it is exact
-- there: 0, pi, +-pi/2, +-pi/4, +-3pi/4. -0.0 is not told from 0: atan2(-0.0, -1) is pi. NaN in
-- either input gives NaN.
function M.atan2(y, x)
  check_tensor("atan2", y, "argument #1")
  if type(x) == "number" then x = st.full({}, x, is_float(y:dtype()) and y:dtype() or "f32") end
  check_tensor("atan2", x, "x (a tensor or number)")
  if not is_float(y:dtype()) then y = y:float() end
  if not is_float(x:dtype()) then x = x:float() end
  local ay, ax = y:abs(), x:abs()
  local hi, lo = ay:maximum(ax), ay:minimum(ax)
  local nz = hi:gt(0)
  local a = st.where(nz, lo / st.where(nz, hi, 1), 0)            -- in [0, 1]
  a = st.where(lo:eq(math.huge), 1, a)                          -- both infinite: pi/4
  local t = st.where(a:eq(1), math.pi / 4, a / (a * a * 0.28 + 1)) -- atan(a), to 5e-3; exact at 0, 1
  t = st.where(ay:gt(ax), math.pi / 2 - t, t)
  t = st.where(x:lt(0), math.pi - t, t)
  t = st.where(y:lt(0), -t, t)
  local ok = nz:logical_and(hi:lt(math.huge))
  local xs, ys = st.where(ok, x, 1), st.where(ok, y, 0)         -- (1, 0) where no step is taken
  local start = t
  for _ = 1, 2 do
    local sn, cs = t:sin(), t:cos()
    t = t - (xs * sn - ys * cs) / (xs * cs + ys * sn)
  end
  local nan = y:ne(y):logical_or(x:ne(x))                       -- the comparisons above lose NaN
  return st.where(nan, 0 / 0, st.where(ok, t, start))
end

-- ---------------------------------------------------------------------------------------------
-- lerp, addcmul, addcdiv
-- ---------------------------------------------------------------------------------------------

local function check_operand(op, v, what)
  if type(v) ~= "number" and not st.is_tensor(v) then
    fail(op, "expected a tensor or number for " .. what .. ", got " .. type(v), 2)
  end
  return v
end

-- lerp(end, weight): x + weight * (end - x).
function M.lerp(x, e, w)
  check_tensor("lerp", x, "argument #1")
  check_tensor("lerp", e, "end")
  check_operand("lerp", w, "weight")
  return x + (e - x) * w
end

local value_opts = { value = true }
local function value_arg(op, v)
  if type(v) == "table" and not st.is_tensor(v) then v = check_opts(op, v, value_opts, 2).value end
  if v == nil then return 1 end
  if type(v) ~= "number" then fail(op, "value must be a number, got " .. type(v), 2) end
  return v
end

-- x + value * combine(t1, t2), the arguments checked (addcmul, addcdiv). Tail-called by both, so
-- it stands at their depth and the errors keep the user's position.
local function addc(op, combine, x, t1, t2, value)
  check_tensor(op, x, "argument #1")
  check_tensor(op, t1, "tensor1")
  check_tensor(op, t2, "tensor2")
  local v = value_arg(op, value)
  local p = combine(t1, t2)
  return x + (v == 1 and p or p * v)
end

-- addcmul(t1, t2 [, value | {value = v}]): x + value * t1 * t2.
function M.addcmul(x, t1, t2, value)
  return addc("addcmul", function(a, b) return a * b end, x, t1, t2, value)
end

-- addcdiv(t1, t2 [, value | {value = v}]): x + value * t1 / t2.
function M.addcdiv(x, t1, t2, value)
  return addc("addcdiv", function(a, b) return a / b end, x, t1, t2, value)
end

-- ---------------------------------------------------------------------------------------------
-- norm, all, any
-- ---------------------------------------------------------------------------------------------

-- s^(1/p) with a zero gradient where s == 0 (the root's derivative is infinite there, and
-- inf * 0 would make the gradient of an all-zero slice NaN; PyTorch gives 0).
local function safe_root(s, p)
  local pos = s:gt(0)
  local safe = st.where(pos, s, 1)
  local root = p == 2 and safe:sqrt() or safe ^ (1 / p)
  return st.where(pos, root, 0)
end

-- norm(p = 2, dim = nil, keepdim = false): p a number (math.huge: max |x|, -math.huge: min |x|,
-- 0: the count of non-zeros) or "fro" (2). Float tensors only.
function M.norm(x, p, dim, keepdim)
  check_tensor("norm", x, "argument #1")
  if not is_float(x:dtype()) then fail("norm", "expected a float tensor, got " .. x:dtype()) end
  if p == nil or p == "fro" then p = 2 end
  if type(p) ~= "number" or p ~= p then fail("norm", "p must be a number or \"fro\", got " .. show(p)) end
  local dims = reduce_dims("norm", x, dim)
  local keep = check_keepdim("norm", keepdim)
  if p == math.huge or p == -math.huge then
    -- max/min take a table of dims (a number would return indices too); nil means every dim
    if not dims then
      dims = {}
      for d = 1, x:dim() do dims[d] = d end
    end
    local a = x:abs()
    if #dims == 0 then return p > 0 and a:max() or a:min() end
    return p > 0 and a:max(dims, keep) or a:min(dims, keep)
  end
  if p == 0 then return x:ne(0):sum(dims, keep):to(x:dtype()) end
  if p == 1 then return x:abs():sum(dims, keep) end
  if p == 2 then return safe_root((x * x):sum(dims, keep), 2) end
  return safe_root((x:abs() ^ p):sum(dims, keep), p)
end

-- any(dim = nil, keepdim = false) / all: bool; an entry is true when it is non-zero (NaN is).
function M.any(x, dim, keepdim)
  check_tensor("any", x, "argument #1")
  local dims = reduce_dims("any", x, dim)
  return x:ne(0):sum(dims, check_keepdim("any", keepdim)):gt(0)
end

function M.all(x, dim, keepdim)
  check_tensor("all", x, "argument #1")
  local dims = reduce_dims("all", x, dim)
  return x:eq(0):sum(dims, check_keepdim("all", keepdim)):eq(0)
end

-- ---------------------------------------------------------------------------------------------
-- clamp(lo, hi) with numbers (the C op) or tensors (maximum, then minimum: hi wins when lo > hi,
-- as in PyTorch)
-- ---------------------------------------------------------------------------------------------

function M.clamp(x, lo, hi)
  check_tensor("clamp", x, "argument #1")
  if lo ~= nil and type(lo) ~= "number" and not st.is_tensor(lo) then fail("clamp", "min must be a number, tensor or nil, got " .. type(lo)) end
  if hi ~= nil and type(hi) ~= "number" and not st.is_tensor(hi) then fail("clamp", "max must be a number, tensor or nil, got " .. type(hi)) end
  if not st.is_tensor(lo) and not st.is_tensor(hi) then return c_clamp(x, lo, hi) end
  local r = x
  if lo ~= nil then r = r:maximum(lo) end
  if hi ~= nil then r = r:minimum(hi) end
  return r
end

-- ---------------------------------------------------------------------------------------------
-- cumsum(dim)
-- ---------------------------------------------------------------------------------------------

-- A scan along the last dim as a masked sum: out[..., i] = sum of x[..., j] over j <= i (j < i
-- when exclusive), one reduction over the (n, n) broadcast of x against a mask built from two
-- aranges, so the mask is never stored. O(n^2) work per row.
local function scan_masked(x, exclusive)
  local n = x:size(-1)
  local i = st.arange(n):unsqueeze(2)
  local j = st.arange(n)
  local mask = exclusive and j:lt(i) or j:le(i)      -- (n, n): source j feeds output i
  return st.where(mask, x:unsqueeze(-2), 0):sum(-1)  -- (..., n, n) -> (..., n)
end

-- Blocked: a masked scan inside each block of SCAN_BLOCK entries, plus the exclusive scan of the
-- block totals (recursively, n / SCAN_BLOCK of them) as each block's offset: about 16 n work per
-- row, ceil(log16 n) levels of two kernels. (16 measured fastest on the CPU among 16, 32, 64 and
-- sqrt(n), for n from 1000 to 100000.)
local SCAN_BLOCK = 16
local function scan_last(x, exclusive)
  local n = x:size(-1)
  if n <= 2 * SCAN_BLOCK then return scan_masked(x, exclusive) end
  local b = SCAN_BLOCK
  local m = (n + b - 1) // b
  local sh = x:shape()
  local r = x
  if m * b > n then r = st.cat({ x, full_as(x, (function() sh[#sh] = m * b - n return sh end)(), 0) }, -1) end
  sh = x:shape()
  sh[#sh] = m
  sh[#sh + 1] = b
  local blocks = r:reshape(sh)                                -- (..., m, b)
  local offsets = scan_last(blocks:sum(-1), true)             -- (..., m)
  local y = scan_masked(blocks, exclusive) + offsets:unsqueeze(-1)
  sh = x:shape()
  sh[#sh] = m * b
  return y:reshape(sh):narrow(-1, 1, n)
end

-- cumsum(dim): the running sum along dim, moved last for the scan and back.
--
-- Why a blocked masked sum: a scan of shifted adds (Hillis-Steele, log2 n steps of y + shift(y))
-- fuses into one kernel that inlines every step, and as each step reads the previous one twice an
-- output recomputes all n inputs through 2^steps paths: O(n^2) work and a kernel source that grows
-- with n (a 16000-long scan did not compile in 300 s). A product with a triangular matrix of ones
-- needs that n x n matrix in memory and a float dtype. The masked sum is a plain reduction (no
-- stored mask, every dtype, integers exact, and the gradient, the reverse scan, comes from
-- where/expand/sum), and the blocking keeps it at O(n) work in O(log n) kernels; its float
-- rounding grows like log n (a sum of 16 terms per level), not like n.
-- Integer and bool inputs sum in i64, as in PyTorch.
-- A scan `op` (cumsum, cumprod) along dim: scan(y) scans y's last dim; x is moved for it and
-- back. Integer and bool inputs scan in i64. Called in a tail call (its errors name the caller's
-- caller's line).
local function scan_along(op, x, dim, scan)
  local lvl = 1
  check_tensor(op, x, "argument #1", lvl)
  if dim == nil then fail(op, "expected a dim", lvl) end
  local d = check_dim(op, dim, x:dim(), lvl)
  if x:dtype() == "bool" or x:dtype() == "i32" then x = x:long() end
  if x:dim() == 0 or x:size(d) <= 1 then return x:clone() end   -- (always a new tensor)
  local last = x:dim()
  if d == last then return scan(x) end
  return scan(x:movedim(d, last)):movedim(last, d)
end

function M.cumsum(x, dim)
  return scan_along("cumsum", x, dim, function(y) return scan_last(y, false) end)
end

-- ---------------------------------------------------------------------------------------------
-- Module functions only: the *_like constructors (x's shape and device; x's dtype unless one is
-- given) and randperm
-- ---------------------------------------------------------------------------------------------

local F = {}

-- An unbound value t on x's device: left unbound (computed where it is used, without a flush)
-- when x is on the default device, else computed there now (st_to on an unbound value).
local function place_like(x, t)
  if x:device() == st.device() then return t end
  return t:to(x:device())
end

-- name(x [, dtype]): fn(x's shape, dtype) on x's device.
local function like(op, fn)
  return function(x, dtype, extra)
    check_tensor(op, x, "argument #1")
    dtype = check_dtype(op, dtype)
    if extra ~= nil then fail(op, "unexpected argument " .. show(extra) .. " (the arguments are a tensor and an optional dtype)") end
    return place_like(x, fn(x:shape(), dtype or x:dtype()))
  end
end

F.zeros_like = like("zeros_like", st.zeros)
F.ones_like = like("ones_like", st.ones)
F.empty_like = like("empty_like", st.empty)
F.rand_like = like("rand_like", st.rand)
F.randn_like = like("randn_like", st.randn)

-- full_like(x, v [, dtype])
function F.full_like(x, v, dtype, extra)
  check_tensor("full_like", x, "argument #1")
  if type(v) ~= "number" and type(v) ~= "boolean" then fail("full_like", "expected a number or boolean for the value, got " .. type(v)) end
  dtype = check_dtype("full_like", dtype)
  if extra ~= nil then fail("full_like", "unexpected argument " .. show(extra) .. " (the arguments are a tensor, a value and an optional dtype)") end
  return place_like(x, st.full(x:shape(), v, dtype or x:dtype()))
end

-- randperm(n [, dtype]): 1..n in a random order (i64 by default). The order is st.data's
-- Fisher-Yates shuffle, seeded from the global RNG (so st.manual_seed makes it reproducible);
-- drawing the seed is a sync point.
function F.randperm(n, dtype, extra)
  n = check_int("randperm", n, "n")
  if n < 0 then fail("randperm", "n must be non-negative, got " .. n) end
  dtype = check_dtype("randperm", dtype) or "i64"
  if extra ~= nil then fail("randperm", "unexpected argument " .. show(extra) .. " (the arguments are n and an optional dtype)") end
  if dtype == "bool" then fail("randperm", "dtype bool cannot hold 1..n") end
  if n == 0 then return st.zeros({ 0 }, dtype) end
  local seed = st.randint(0, 0x7fffffff, { 1 }):item()
  return st.tensor(st._lib("data")._permutation(n, seed, 0), dtype)
end

-- ---------------------------------------------------------------------------------------------
-- Registration: methods and module functions (a name the module already has as a constructor
-- keeps it, as in luaopen_stitch)
-- ---------------------------------------------------------------------------------------------

-- The most arguments each op takes (the tensor included; nil: any number, checked by the op).
-- A non-nil argument past them is an error, not dropped. The wrapper tail-calls the op, so the
-- op's errors still carry the user's position.
local max_args = {
  tril = 2, triu = 2, masked_fill = 3, roll = 3, split = 3, chunk = 3, unbind = 2, movedim = 3,
  pad = 4, isnan = 1, isinf = 1, isfinite = 1, lerp = 3, addcmul = 4, addcdiv = 4, norm = 4,
  any = 3, all = 3, clamp = 3, cumsum = 2, atan2 = 2,
}
-- Wraps each op named in max_args with the check of its argument count, then makes every op of
-- M a method and a module function. Shared with the other tensor libs (tensor_sort.lua,
-- tensor_index.lua) through _util.
local function register(M, max_args)
  for name, max in pairs(max_args) do
    local fn = M[name]
    M[name] = function(...)
      local n = select("#", ...)
      for i = max + 1, n do
        local v = select(i, ...)
        if v ~= nil then fail(name, "unexpected argument #" .. i .. " (" .. show(v) .. "): it takes at most " .. max) end
      end
      return fn(...)
    end
  end
  for name, fn in pairs(M) do
    T[name] = fn
    if rawget(st, name) == nil or rawget(st, name) == c_clamp then rawset(st, name, fn) end
  end
end

register(M, max_args)
for name, fn in pairs(F) do rawset(st, name, fn) end

-- The checks and helpers, for the other tensor libs (after the registration: not a method).
M._util = {
  fail = fail, show = show, shape_str = shape_str, check_tensor = check_tensor, check_int = check_int,
  check_dim = check_dim, check_opts = check_opts, is_float = is_float, scalar_for = scalar_for,
  index_on = index_on, cumsum = M.cumsum, scan_along = scan_along, register = register,
}

return M
