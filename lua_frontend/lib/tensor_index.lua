-- tensor_index.lua — scatter (and scatter_, scatter_add_ in place), nonzero, and indexing with a tensor key: x[mask], x[mask] = v,
-- x[idx], x[idx] = v. Loaded when the module opens, after tensor_ops.lua (llib.c); lindex.c calls
-- index_get / index_set here when the key of t[key] is a tensor (other keys stay in C).
--
-- Invariants:
--   * Compositions of lazy ops (scatter_add, index_select, where, cumsum), so they fuse and
--     differentiate; the reads x[mask] and nonzero need the count of true entries on the host (a
--     sync, as in PyTorch), and so does x[mask] = tensor (to check the tensor's length).
--   * A mask is a bool tensor whose shape is that of x's leading dims; an index tensor is i32 or
--     i64 holding 1-based indices into dim 1. Anything else is an error naming the shapes and
--     dtypes.
--   * Assignment writes into x's storage (copy_ of the new value), as t[{...}] = v does.
local st = ...

local U = st._lib("tensor_ops")._util
local fail, show, shape_str = U.fail, U.show, U.shape_str
local check_tensor, check_dim = U.check_tensor, U.check_dim
local is_float = U.is_float

local M = {}
local I = {}   -- index_get / index_set, called by lindex.c; not methods

local function is_int(dt) return dt == "i32" or dt == "i64" end

local function numel(shape)
  local n = 1
  for i = 1, #shape do n = n * shape[i] end
  return n
end

-- ---------------------------------------------------------------------------------------------
-- scatter(dim, index, src | value)
-- ---------------------------------------------------------------------------------------------

-- An index argument: an i32/i64 tensor, or a Lua table made an i64 tensor on x's device.
local function index_arg(op, x, idx, lvl)
  lvl = (lvl or 1) + 1
  if type(idx) == "table" and not st.is_tensor(idx) then
    local ok, t = pcall(st.tensor, idx, "i64")
    if not ok then fail(op, "bad index table: " .. tostring(t), lvl) end
    return t:to(x:device())
  end
  check_tensor(op, idx, "the index", lvl)
  if not is_int(idx:dtype()) then fail(op, "index must be i32 or i64, got " .. idx:dtype(), lvl) end
  return idx
end

-- x with the entries that `count` (how many writes land on each entry of x) marks replaced: by
-- `value` (a number), or by written / count (the sum of the values written there, divided by how
-- many: one value where the index has no repeats, the mean where it has).
local function replace(x, count, written, value)
  if value ~= nil then return st.where(count:gt(0), value, x) end
  local dt = x:dtype()
  local many = count:gt(1)
  -- (integers divide in f64: exact to 2^53, where f32 division would round past 2^24)
  local mean = (is_float(dt) and written or written:double()) / st.where(many, count, 1)
  if not is_float(dt) then mean = mean:floor():to(dt) end
  return st.where(count:eq(0), x, st.where(many, mean, written))
end

-- scatter(dim, index, src) / scatter(dim, index, value): out of place, x with x[index[i][j]][j] =
-- src[i][j] (dim 1; likewise for other dims), 1-based indices; src at least index's size in every
-- dim (its leading part is used), or a number. Where the index repeats a place, PyTorch leaves the
-- value undefined; here it is the mean of the values written there (so one value written through
-- repeats is that value), rounded down for integer dtypes. The gradient flows to x (where nothing
-- was written) and to src (a gather of the gradient).
-- lvl: 1 when the caller of scatter_impl's caller is the user's code (a tail call), 2 when one more
-- frame is between.
local function scatter_impl(op, lvl, x, dim, index, src, extra)
  check_tensor(op, x, "argument #1", lvl)
  if extra ~= nil then fail(op, "unexpected argument " .. show(extra) .. " (the arguments are dim, index and src or a value)", lvl) end
  local d = check_dim(op, dim, x:dim(), lvl)
  index = index_arg(op, x, index, lvl)
  if index:dim() ~= math.max(x:dim(), 1) and not (x:dim() == 0 and index:dim() == 0) then
    fail(op, "index of shape " .. shape_str(index) .. " must have as many dims as the tensor of shape " .. shape_str(x), lvl)
  end
  local value
  if type(src) == "number" or type(src) == "boolean" then
    value = U.scalar_for(op, x, src, lvl)
  else
    check_tensor(op, src, "src (a tensor or a number)", lvl)
    if src:dim() ~= index:dim() then
      fail(op, "src of shape " .. shape_str(src) .. " and index of shape " .. shape_str(index) .. " differ in their number of dims", lvl)
    end
    for k = 1, index:dim() do
      if src:size(k) < index:size(k) then
        fail(op, "src of shape " .. shape_str(src) .. " is smaller than index of shape " .. shape_str(index) .. " in dim " .. k, lvl)
      end
    end
    for k = 1, index:dim() do
      if src:size(k) > index:size(k) then src = src:narrow(k, 1, index:size(k)) end
    end
  end
  if index:numel() == 0 then return x:clone() end
  local bool = x:dtype() == "bool"
  local base = bool and x:to("i32") or x
  local count = st.zeros(x:shape(), "i32"):scatter_add(d, index, st.ones(index:shape(), "i32"))
  local written
  if value == nil then
    written = st.zeros(x:shape(), base:dtype()):scatter_add(d, index, src:to(base:dtype()))
  elseif bool then
    value = value and 1 or 0
  end
  local r = replace(base, count, written, value)
  if bool then r = r:ne(0) end
  return r
end

function M.scatter(x, dim, index, src, extra)
  return scatter_impl("scatter", 1, x, dim, index, src, extra)
end

-- x:scatter_(dim, index, src | value): scatter in place (x's storage gets scatter's result, as
-- copy_ writes it: x's views see it; the gradient as scatter's).
function M.scatter_(x, dim, index, src, extra)
  local r = scatter_impl("scatter_", 2, x, dim, index, src, extra)
  x:copy_(r)
  return x
end

-- x:scatter_add_(dim, index, src): scatter_add in place.
function M.scatter_add_(x, dim, index, src, extra)
  check_tensor("scatter_add_", x, "argument #1")
  if extra ~= nil then fail("scatter_add_", "unexpected argument " .. show(extra) .. " (the arguments are dim, index and src)") end
  local ok, r = pcall(x.scatter_add, x, dim, index, src)
  if not ok then error((tostring(r):gsub("^.-scatter_add:", "scatter_add_:", 1)), 2) end
  x:copy_(r)
  return x
end

-- ---------------------------------------------------------------------------------------------
-- nonzero
-- ---------------------------------------------------------------------------------------------

-- The number of true entries of a flat bool tensor (a sync).
local function count_true(flat)
  return flat:sum():item()
end

-- For a flat bool tensor (n) with c true entries: the 1-based flat positions (i64, (c)) of the
-- true entries, in order. Each true entry's rank (cumsum) is its row; false entries go to a spare
-- row c + 1, cut off.
local function true_positions(flat, c)
  local n = flat:size(1)
  local rank = U.cumsum(flat, 1)
  local row = st.where(flat, rank, c + 1)
  local pos = st.arange(1, n + 1)
  return st.zeros({ c + 1 }, "i64"):to(flat:device()):scatter_add(1, row, pos):narrow(1, 1, c)
end

-- nonzero(): the 1-based coordinates (i64, (count, dims)) of the non-zero entries, in row-major
-- order. A sync: the count sizes the result.
function M.nonzero(x, extra)
  check_tensor("nonzero", x, "argument #1")
  if extra ~= nil then fail("nonzero", "unexpected argument " .. show(extra) .. " (it takes none)") end
  local nd = x:dim()
  local flat = (x:dtype() == "bool" and x or x:ne(0)):reshape(-1)
  local c = count_true(flat)
  if nd == 0 then return st.zeros({ c, 0 }, "i64"):to(x:device()) end
  if c == 0 then return st.zeros({ 0, nd }, "i64"):to(x:device()) end
  local p = true_positions(flat, c)           -- 1-based flat positions (c)
  local cols = {}
  local sh = x:shape()
  for k = 1, nd do
    -- coordinate k of every entry: 1..size along dim k, broadcast to x's shape and flattened
    local vs = {}
    for e = 1, nd do vs[e] = e == k and sh[k] or 1 end
    local coord = st.arange(1, sh[k] + 1):reshape(vs):expand(sh):reshape(-1)
    cols[k] = coord:index_select(1, p)
  end
  return st.stack(cols, 2)
end

-- ---------------------------------------------------------------------------------------------
-- Tensor keys: x[mask], x[idx] and assignment through them
-- ---------------------------------------------------------------------------------------------

-- Checks a key against x: "mask" (bool, x's leading shape) or "index" (i32/i64). `lvl` counts
-- to the user's code (the indexing expression: this lib function, then the C metamethod).
local function key_kind(x, key, lvl)
  lvl = lvl + 1
  local dt = key:dtype()
  if dt == "bool" then
    local kd = key:dim()
    if kd == 0 then fail("index", "a 0-d bool mask is not supported (mask of shape (), tensor of shape " .. shape_str(x) .. ")", lvl) end
    local ok = kd <= x:dim()
    for k = 1, kd do ok = ok and key:size(k) == x:size(k) end
    if not ok then
      fail("index", "mask of shape " .. shape_str(key) .. " does not match the leading dims of the tensor of shape " .. shape_str(x), lvl)
    end
    return "mask"
  end
  if is_int(dt) then
    if x:dim() == 0 then fail("index", "cannot index a 0-d tensor with an index tensor of shape " .. shape_str(key), lvl) end
    return "index"
  end
  fail("index", "a tensor key must be a bool mask or an i32/i64 index tensor, got a " .. dt .. " tensor of shape " .. shape_str(key), lvl)
end

-- x viewed as (prod of the mask's dims, rest...).
local function flat_lead(x, kd)
  local sh = x:shape()
  local rest = { numel({ table.unpack(sh, 1, kd) }) }
  for k = kd + 1, #sh do rest[#rest + 1] = sh[k] end
  return x:reshape(rest)
end

local function rest_shape(x, kd, lead)
  local sh = { lead }
  for k = kd + 1, x:dim() do sh[#sh + 1] = x:size(k) end
  return sh
end

-- x[mask]: (count, rest of x's dims), an index_select of the true rows (so the gradient flows
-- back to them). x[idx]: x:index_select(1, idx) shaped (idx's shape, rest of x's dims).
function I.index_get(x, key)
  local kind = key_kind(x, key, 2)
  if kind == "mask" then
    local kd = key:dim()
    local flat = key:reshape(-1)
    local c = count_true(flat)
    local rows = flat_lead(x, kd)
    if c == 0 then return st.zeros(rest_shape(x, kd, 0), x:dtype()):to(x:device()) end
    return rows:index_select(1, true_positions(flat, c))
  end
  local sh = key:shape()
  for k = 2, x:dim() do sh[#sh + 1] = x:size(k) end
  local r = x:index_select(1, key:reshape(-1))
  return r:reshape(sh)
end

-- v (a number, boolean or tensor) broadcast to shape, in x's dtype; errors name both shapes.
local function value_to(x, v, shape, what, lvl)
  lvl = lvl + 1
  if not st.is_tensor(v) then
    if type(v) ~= "number" and type(v) ~= "boolean" then
      fail("index", "the assigned value must be a number, boolean or tensor, got " .. type(v), lvl)
    end
    return U.scalar_for("index", x, v, lvl)
  end
  local ok, r = pcall(function() return v:to(x:dtype()):expand(shape) end)
  if not ok then
    fail("index", "value of shape " .. shape_str(v) .. " does not broadcast to " .. what .. " of shape (" .. table.concat(shape, ", ") .. ")", lvl)
  end
  return r
end

-- x[mask] = v: v a number (every true row), or a tensor broadcasting to (count, rest...) whose
-- rows go to the true rows in order (a gather by each row's rank). x[idx] = v: the rows idx of
-- dim 1 set to v (a number, or broadcasting to (idx's shape, rest...)); repeated indices: the mean
-- of what is written there (scatter's rule). Both write into x's storage.
function I.index_set(x, key, v)
  local kind = key_kind(x, key, 2)
  local new
  if kind == "mask" then
    local kd = key:dim()
    local mshape = key:shape()
    for _ = kd + 1, x:dim() do mshape[#mshape + 1] = 1 end
    local m = key:reshape(mshape)
    if not st.is_tensor(v) then
      new = st.where(m, value_to(x, v, x:shape(), "", 2), x)
    else
      local flat = key:reshape(-1)
      local c = count_true(flat)
      local vv = value_to(x, v, rest_shape(x, kd, c), "the masked rows", 2)
      if c == 0 then return end
      local rank = U.cumsum(flat, 1):clamp(1, c)                 -- (rows): the value row of each row
      local src = vv:index_select(1, rank):reshape(x:shape())
      new = st.where(m, src, x)
    end
  else
    local idx = key:reshape(-1)
    local k = idx:size(1)
    local vshape = key:shape()
    for d = 2, x:dim() do vshape[#vshape + 1] = x:size(d) end
    local vv = value_to(x, v, vshape, "the indexed rows", 2)
    if k == 0 then return end
    local full = rest_shape(x, 1, k)                               -- (k, rest...)
    local ishape = { k }
    for _ = 2, x:dim() do ishape[#ishape + 1] = 1 end
    local index = idx:reshape(ishape):expand(full)
    if st.is_tensor(vv) then
      new = M.scatter(x, 1, index, vv:reshape(full))
    else
      new = M.scatter(x, 1, index, vv)
    end
  end
  x:copy_(new)
end

U.register(M, { scatter = 5, scatter_ = 5, scatter_add_ = 5, nonzero = 2 })
M._index_get, M._index_set = I.index_get, I.index_set   -- after register: not methods
return M
