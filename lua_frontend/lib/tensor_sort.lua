-- tensor_sort.lua — order and sampling ops built from the ops stitch already has: sort, argsort,
-- topk, cumprod, multinomial, bernoulli (and x:bernoulli_). Loaded when the module opens, after
-- tensor_ops.lua (llib.c), whose argument checks it shares; each op becomes a method of st.Tensor
-- and a module function.
--
-- Invariants:
--   * Every op is a composition of lazy ops (comparisons, sum reductions, scatter_add, gather,
--     cat, mul, rand): it fuses, works on every device, and nothing reads values back to Lua.
--   * Sorting is rank by counting: the (0-based) place of entry i along the sorted dim is
--     #{j : x_j before x_i} + #{j < i : x_j ties x_i}, one fused broadcast compare + sum (O(n^2)
--     work per row, no n x n buffer), so it is stable by construction; the permutation comes from
--     a scatter_add of positions into those places, and the values from a gather of x by it, so
--     the values' gradient is the gather's (an index_add of the incoming gradient).
--   * NaN sorts as the largest value (PyTorch), equal to other NaNs.
local st = ...

local U = st._lib("tensor_ops")._util
local fail, show, shape_str = U.fail, U.show, U.shape_str
local check_tensor, check_int, check_dim, check_opts = U.check_tensor, U.check_int, U.check_dim, U.check_opts
local is_float = U.is_float

local M = {}

-- ---------------------------------------------------------------------------------------------
-- Ranks along the last dim
-- ---------------------------------------------------------------------------------------------

-- Keys to compare: bool as i32 (comparisons of bools are not ordered); others as they are.
local function keys_of(x)
  if x:dtype() == "bool" then return x:to("i32") end
  return x
end

-- The 0-based rank (i64, shape of k) of each entry of k along its last dim: the count of entries
-- before it in the order plus the count of earlier entries equal to it. The (..., n, n) comparison
-- is summed over its last dim as it is made: one fused reduction, no n x n buffer. The keys and
-- the positions are realized first (a flush, no host read): inside the n^2 loop a computed key
-- would be recomputed n times, and a position computed from the loop's flat index costs two
-- integer divisions per pair, where a stored one is a load.
-- NaN: the compare counts no NaN (every comparison with one is false), so a non-NaN entry's plain
-- rank is its place among the non-NaNs; NaNs (largest, equal to each other) are placed by the
-- count of NaNs before them, after the non-NaNs (before them when descending).
local function rank_last(k, desc)
  local n = k:size(-1)
  local pos = st.arange(n, "i32"):to(k:device())
  st.realize(k, pos)
  local ki, kj = k:unsqueeze(-1), k:unsqueeze(-2)  -- (..., n, 1): entry i; (..., 1, n): entry j
  -- (the positions broadcast to k's shape first: a (n, n) mask broadcast over the rows is loaded
  -- through a division of the flat index per pair, measured 10x slower for 8 rows of 4096)
  local pk = pos:expand(k:shape())
  local pi, pj = pk:unsqueeze(-1), pk:unsqueeze(-2)
  local plain = (desc and kj:gt(ki) or kj:lt(ki)):logical_or(kj:eq(ki):logical_and(pj:lt(pi))):sum(-1)
  if not is_float(k:dtype()) then return plain end
  local nan = k:ne(k)
  local nn = nan:sum(-1, true)                      -- (..., 1)
  local before = U.cumsum(nan, -1) - nan:long()     -- NaNs before each entry
  if desc then return st.where(nan, before, plain + nn) end
  return st.where(nan, before + (n - nn), plain)
end

-- The sorting permutation (1-based i64 indices, k's shape) of k along its last dim.
local function order_last(k, desc)
  local rank = rank_last(k, desc)
  local sh = k:shape()
  local pos = st.arange(1, sh[#sh] + 1):expand(sh)
  return st.zeros(sh, "i64"):scatter_add(-1, rank + 1, pos)
end

-- ---------------------------------------------------------------------------------------------
-- sort, argsort
-- ---------------------------------------------------------------------------------------------

local sort_opts = { dim = true, descending = true, stable = true }

-- (dim, descending) or ({dim =, descending =, stable =}) → positive dim, desc.
local function sort_args(op, x, dim, desc, lvl)
  lvl = lvl + 1
  if type(dim) == "table" then
    if desc ~= nil then fail(op, "an options table takes no arguments after it", lvl) end
    local o = check_opts(op, dim, sort_opts, lvl)
    if o.stable ~= nil and type(o.stable) ~= "boolean" then fail(op, "stable must be a boolean, got " .. show(o.stable), lvl) end
    dim, desc = o.dim, o.descending
  end
  if desc ~= nil and type(desc) ~= "boolean" then fail(op, "descending must be a boolean, got " .. type(desc) .. " " .. show(desc), lvl) end
  local d = check_dim(op, dim == nil and -1 or dim, x:dim(), lvl)
  return d, desc == true
end

-- Values and indices along dim d (sorted), x moved so that d is last and back.
local function sort_dim(x, d, desc)
  if x:dim() == 0 then return x:clone(), st.ones({}, "i64"):to(x:device()) end
  if x:size(d) == 0 then return x:clone(), st.zeros(x:shape(), "i64"):to(x:device()) end
  local last = x:dim()
  local xm = d == last and x or x:movedim(d, last)
  local idx = order_last(keys_of(xm:detach()), desc)
  local val = xm:gather(-1, idx)
  if d ~= last then val, idx = val:movedim(last, d), idx:movedim(last, d) end
  return val, idx
end

-- sort(dim = -1, descending = false) or sort{dim =, descending =, stable =}: values and 1-based
-- indices (i64). Always stable (ties keep their order), so `stable` changes nothing.
function M.sort(x, dim, desc)
  check_tensor("sort", x, "argument #1")
  local d, ds = sort_args("sort", x, dim, desc, 1)
  local v, i = sort_dim(x, d, ds)
  return v, i
end

function M.argsort(x, dim, desc)
  check_tensor("argsort", x, "argument #1")
  local d, ds = sort_args("argsort", x, dim, desc, 1)
  local _, i = sort_dim(x:detach(), d, ds)
  return i
end

-- ---------------------------------------------------------------------------------------------
-- topk
-- ---------------------------------------------------------------------------------------------

-- Rows longer than 2 * max(TOPK_BLOCK, 2k) are cut into blocks of max(TOPK_BLOCK, 2k): the
-- top k of every block (a rank sort of the block, n * block work) become the candidates, at most
-- half as many as the entries, and the top k of those is found the same way. Candidates keep
-- their block order, so ties still go to the lower index. (On the 2-core CPU, k = 50 of (8, 32000):
-- blocks of 64, 128, 256 and 512 all took 105-145 ms, within the run-to-run noise; 1024: 230 ms.)
local TOPK_BLOCK = 128

local worst_int = { i32 = { -2147483648, 2147483647 }, i64 = { math.mininteger, math.maxinteger } }

-- A key that comes after every other one (ties go to the earlier entry, so padding entries,
-- placed last, lose against equal real ones).
local function worst_key(k, largest)
  local r = worst_int[k:dtype()]
  if r then return largest and r[1] or r[2] end
  return largest and -math.huge or math.huge
end

-- The 1-based positions (i64, (..., k)) of the k first entries of keys (..., n) in the order,
-- sorted. idx (..., n): the original positions of the entries (nil: 1..n).
local function top_last(keys, idx, k, largest)
  local n = keys:size(-1)
  local b = math.max(TOPK_BLOCK, 2 * k)
  if n <= 2 * b then
    local ord = order_last(keys, largest):narrow(-1, 1, k)
    return idx and idx:gather(-1, ord) or ord
  end
  local m = (n + b - 1) // b
  local sh = keys:shape()
  if not idx then idx = st.arange(1, n + 1):expand(sh) end
  if m * b > n then
    local psh = keys:shape()
    psh[#psh] = m * b - n
    keys = st.cat({ keys, st.full(psh, worst_key(keys, largest), keys:dtype()) }, -1)
    idx = st.cat({ idx, st.zeros(psh, "i64") }, -1)
  end
  sh[#sh] = m
  sh[#sh + 1] = b
  local kb, ib = keys:reshape(sh), idx:reshape(sh)           -- (..., m, b)
  local ord = order_last(kb, largest):narrow(-1, 1, k)        -- (..., m, k)
  local ck, ci = kb:gather(-1, ord), ib:gather(-1, ord)
  sh[#sh - 1] = m * k
  sh[#sh] = nil
  return top_last(ck:reshape(sh), ci:reshape(sh), k, largest)
end

local topk_opts = { dim = true, largest = true, sorted = true }

-- topk(k, dim = -1, largest = true, sorted = true) or topk(k, {dim =, largest =, sorted =}):
-- the k largest (smallest) values along dim, sorted, and their 1-based indices (i64); among equal
-- values the lower index comes first.
function M.topk(x, k, dim, largest, sorted)
  check_tensor("topk", x, "argument #1")
  k = check_int("topk", k, "k")
  if type(dim) == "table" then
    if largest ~= nil or sorted ~= nil then fail("topk", "an options table takes no arguments after it") end
    local o = check_opts("topk", dim, topk_opts)
    dim, largest, sorted = o.dim, o.largest, o.sorted
  end
  if largest ~= nil and type(largest) ~= "boolean" then fail("topk", "largest must be a boolean, got " .. type(largest) .. " " .. show(largest)) end
  if sorted ~= nil and type(sorted) ~= "boolean" then fail("topk", "sorted must be a boolean, got " .. type(sorted) .. " " .. show(sorted)) end
  local d = check_dim("topk", dim == nil and -1 or dim, x:dim())
  local n = x:dim() == 0 and 1 or x:size(d)
  if k < 0 or k > n then
    fail("topk", "k = " .. k .. " out of range for dim " .. d .. " of size " .. n .. " (shape " .. shape_str(x) .. ")")
  end
  largest = largest ~= false
  if x:dim() == 0 then return x:clone(), st.ones({}, "i64"):to(x:device()) end
  local last = x:dim()
  local xm = d == last and x or x:movedim(d, last)
  local idx
  if k == 0 then
    local sh = xm:shape()
    sh[#sh] = 0
    idx = st.zeros(sh, "i64"):to(x:device())
  elseif k == 1 and (largest or not is_float(x:dtype())) then
    -- argmax / argmin: the first largest (NaN first, as the order has it) / smallest in one pass.
    -- (Not for the smallest float: argmin would take a NaN, which the order puts last.)
    local keys = keys_of(xm:detach())
    idx = largest and keys:argmax(-1, true) or keys:argmin(-1, true)
  else
    idx = top_last(keys_of(xm:detach()), nil, k, largest)
  end
  local val = xm:gather(-1, idx)
  if d ~= last then val, idx = val:movedim(last, d), idx:movedim(last, d) end
  return val, idx
end

-- ---------------------------------------------------------------------------------------------
-- cumprod(dim)
-- ---------------------------------------------------------------------------------------------

local function ones_block(x, n)
  local sh = x:shape()
  sh[#sh] = n
  return st.ones(sh, x:dtype())
end

-- Inclusive product scan of the last dim (length at most CUMPROD_BLOCK) by doubling: step s
-- multiplies every entry by the one s places earlier (log2 n steps; the fused kernel recomputes
-- each step's two reads, so an output costs about n multiplies: cheap for n <= 16).
local CUMPROD_BLOCK = 16
local function prod_scan_small(y)
  local n = y:size(-1)
  local s = 1
  while s < n do
    y = y * st.cat({ ones_block(y, s), y:narrow(-1, 1, n - s) }, -1)
    s = s * 2
  end
  return y
end

-- Blocked: the scan inside each block of 16, times the exclusive scan of the block products
-- (recursively). Only multiplies, so the gradient (through mul and cat) is right at zeros, where
-- dividing the output by the input would give NaN.
local function prod_scan(x)
  local n = x:size(-1)
  if n <= CUMPROD_BLOCK then return prod_scan_small(x) end
  local b = CUMPROD_BLOCK
  local m = (n + b - 1) // b
  local r = x
  if m * b > n then r = st.cat({ x, ones_block(x, m * b - n) }, -1) end
  local sh = x:shape()
  sh[#sh] = m
  sh[#sh + 1] = b
  local y = prod_scan_small(r:reshape(sh))                      -- (..., m, b)
  -- (a sum over the size-1 dim, not a squeeze: the reduction ends the kernel, so the next level
  -- reads stored totals instead of inlining this level's doubling steps, which would multiply
  -- the kernel by 16 per level)
  local totals = prod_scan(y:narrow(-1, b, 1):sum(-1))          -- (..., m): inclusive
  local offsets = st.cat({ ones_block(totals, 1), totals:narrow(-1, 1, m - 1) }, -1)
  y = y * offsets:unsqueeze(-1)
  sh = x:shape()
  sh[#sh] = m * b
  return y:reshape(sh):narrow(-1, 1, n)
end

-- cumprod(dim): the running product along dim; integer and bool inputs multiply in i64 (PyTorch).
-- Always a new tensor: along a dim of size 1 the scan multiplies nothing, and returned x itself.
function M.cumprod(x, dim)
  return U.scan_along("cumprod", x, dim, prod_scan)
end

-- ---------------------------------------------------------------------------------------------
-- multinomial, bernoulli
-- ---------------------------------------------------------------------------------------------

-- multinomial(num_samples, replacement = false): 1-based category draws (i64) from the weights
-- of each row of p (1-d or 2-d, non-negative, not necessarily normalized).
--   with replacement: u ~ U[0, total) per draw, the draw is 1 + #{j : cdf_j <= u}: a fused compare
--     + sum, O(num_samples * n) work per row.
--   without: the top num_samples of log(p_j) + Gumbel noise (the Gumbel-top-k trick: the same law
--     as drawing one by one and renormalizing), through topk. Zero weights get the key -inf and
--     come last: with fewer non-zero weights than draws they are drawn (PyTorch raises; telling
--     needs a sync). Negative weights are not checked (a sync): they give NaN keys (drawn first).
function M.multinomial(p, num_samples, replacement, extra)
  check_tensor("multinomial", p, "argument #1")
  if extra ~= nil then fail("multinomial", "unexpected argument " .. show(extra) .. " (the arguments are num_samples and replacement)") end
  if not is_float(p:dtype()) then fail("multinomial", "expected a float tensor of weights, got " .. p:dtype()) end
  if p:dim() < 1 or p:dim() > 2 then fail("multinomial", "expected 1-d or 2-d weights, got shape " .. shape_str(p)) end
  local s = check_int("multinomial", num_samples, "num_samples")
  if replacement ~= nil and type(replacement) ~= "boolean" then
    fail("multinomial", "replacement must be a boolean, got " .. type(replacement) .. " " .. show(replacement))
  end
  local n = p:size(-1)
  if n == 0 then fail("multinomial", "no categories (weights of shape " .. shape_str(p) .. ")") end
  if s <= 0 then fail("multinomial", "num_samples must be positive, got " .. s) end
  if not replacement and s > n then
    fail("multinomial", "cannot draw " .. s .. " samples without replacement from " .. n .. " categories (weights of shape " .. shape_str(p) .. ")")
  end
  p = p:detach()
  local sh = p:shape()
  sh[#sh] = s
  if replacement then
    local cdf = U.cumsum(p, -1)
    local u = st.rand(sh, p:dtype()) * cdf:narrow(-1, n, 1)        -- (..., s)
    local c = cdf:unsqueeze(-2):le(u:unsqueeze(-1)):sum(-1)       -- (..., s)
    return c:minimum(n - 1) + 1
  end
  local keys = p:log() - (-st.rand(p:shape(), p:dtype()):log()):log()
  local _, idx = M.topk(keys, s, -1)
  return idx
end

-- bernoulli(p): 1 with probability p (a float tensor), else 0, in p's dtype.
function M.bernoulli(p, extra)
  check_tensor("bernoulli", p, "argument #1")
  if extra ~= nil then fail("bernoulli", "unexpected argument " .. show(extra) .. " (the probabilities are the tensor)") end
  if not is_float(p:dtype()) then fail("bernoulli", "expected a float tensor of probabilities, got " .. p:dtype()) end
  return st.rand(p:shape(), p:dtype()):lt(p:detach()):to(p:dtype())
end

-- x:bernoulli_(p = 0.5): fills x in place with draws of probability p (a number or a tensor
-- broadcasting to x's shape); returns x.
function M.bernoulli_(x, p, extra)
  check_tensor("bernoulli_", x, "argument #1")
  if extra ~= nil then fail("bernoulli_", "unexpected argument " .. show(extra) .. " (the argument is p)") end
  if p == nil then p = 0.5 end
  if type(p) ~= "number" and not st.is_tensor(p) then fail("bernoulli_", "p must be a number or a tensor, got " .. type(p)) end
  if type(p) == "number" and not (p >= 0 and p <= 1) then fail("bernoulli_", "p must be in [0, 1], got " .. show(p)) end
  if st.is_tensor(p) then p = p:detach() end
  local ok, draw = pcall(st.lt, st.rand(x:shape(), is_float(x:dtype()) and x:dtype() or "f32"), p)
  if not ok or shape_str(draw) ~= shape_str(x) then
    fail("bernoulli_", "p of shape " .. shape_str(p) .. " does not broadcast to the tensor's shape " .. shape_str(x))
  end
  x:copy_(draw)
  return x
end

local max_args = { sort = 3, argsort = 3, topk = 5, cumprod = 2 }
U.register(M, max_args)
return M
