-- nn_functional.lua — st.nn.functional: layers and losses as functions, PyTorch's argument order,
-- Lua's conventions (1-based dims, 1-based class targets), keyword arguments in a trailing table.
--
-- Invariant: every function here is built only from lazy tensor ops that autograd differentiates
-- (views, cat/stack, pointwise, reductions, matmul, gather/index_select). Nothing reads values back
-- to Lua (no item/tolist), so a forward and its backward stay in the trace and fuse; checks that
-- would need values (class targets in range) are left to the ops, which raise at the sync point.
local st = ...
local F = {}

local function shape_str(t)
  return "(" .. table.concat(t:shape(), ", ") .. ")"
end

-- Runs fn(...) with grad mode off (plain call while the autograd API is missing).
local function no_grad(fn, ...)
  if st.no_grad then return st.no_grad(fn, ...) end
  return fn(...)
end

-- A number or a {a, b} pair as two numbers (kernel sizes, strides, paddings).
local function pair(v, what, fname)
  if type(v) == "number" then return v, v end
  if type(v) == "table" and #v == 2 then return v[1], v[2] end
  error(fname .. ": " .. what .. " must be a number or a table of 2 numbers", 3)
end

local function check_reduction(r, fname)
  r = r or "mean"
  if r ~= "mean" and r ~= "sum" and r ~= "none" then
    error(fname .. ": reduction must be \"mean\", \"sum\" or \"none\", got \"" .. tostring(r) .. "\"", 3)
  end
  return r
end

local function reduce(loss, r)
  if r == "mean" then return loss:mean() end
  if r == "sum" then return loss:sum() end
  return loss
end

-- ---- layers ----

function F.linear(x, w, b)
  local y = x:matmul(w:t())
  if b then y = y + b end
  return y
end

function F.relu(x) return x:relu() end
function F.silu(x) return x:silu() end
function F.tanh(x) return x:tanh() end
function F.sigmoid(x) return x:sigmoid() end

-- gelu(x, {approximate = "none" | "tanh"})
function F.gelu(x, opts)
  local a = opts and opts.approximate or "none"
  if a == "none" then return x:gelu() end
  if a == "tanh" then return x:gelu_tanh() end
  error("gelu: approximate must be \"none\" or \"tanh\", got \"" .. tostring(a) .. "\"", 2)
end

function F.softmax(x, dim) return x:softmax(dim or -1) end
function F.log_softmax(x, dim) return x:log_softmax(dim or -1) end

function F.flatten(x, start_dim, end_dim) return x:flatten(start_dim or 1, end_dim or -1) end

-- The last #normalized_shape dims of x (checked against normalized_shape) as a table of dims.
local function norm_dims(x, normalized_shape, fname)
  if type(normalized_shape) == "number" then normalized_shape = {normalized_shape} end
  local shape, k = x:shape(), #normalized_shape
  local ok = #shape >= k
  local dims = {}
  for i = 1, k do
    local d = #shape - k + i
    dims[i] = d
    if not ok or shape[d] ~= normalized_shape[i] then ok = false end
  end
  if not ok then
    error(fname .. ": input of shape " .. shape_str(x) .. " does not end with normalized_shape ("
      .. table.concat(normalized_shape, ", ") .. ")", 3)
  end
  return dims
end

-- layer_norm(x, normalized_shape, weight, bias, eps = 1e-5): biased variance, like PyTorch.
function F.layer_norm(x, normalized_shape, weight, bias, eps)
  local dims = norm_dims(x, normalized_shape, "layer_norm")
  local xc = x - x:mean(dims, true)
  local y = xc * ((xc * xc):mean(dims, true) + (eps or 1e-5)):rsqrt()
  if weight then y = y * weight end
  if bias then y = y + bias end
  return y
end

local function finfo_eps(dtype)
  if dtype == "f64" then return 2.220446049250313e-16 end
  if dtype == "f16" then return 0.0009765625 end
  if dtype == "bf16" then return 0.0078125 end
  return 1.1920928955078125e-07
end

-- rms_norm(x, normalized_shape, weight, eps = machine epsilon of x's dtype, as PyTorch).
function F.rms_norm(x, normalized_shape, weight, eps)
  local dims = norm_dims(x, normalized_shape, "rms_norm")
  local y = x * ((x * x):mean(dims, true) + (eps or finfo_eps(x:dtype()))):rsqrt()
  if weight then y = y * weight end
  return y
end

-- dropout(x, p = 0.5, training = true): zeroes each element with probability p (st.rand, Philox,
-- so the mask fuses with its neighbours) and scales the rest by 1/(1-p).
function F.dropout(x, p, training)
  p = p or 0.5
  if p < 0 or p > 1 then error("dropout: p must be in [0, 1], got " .. tostring(p), 2) end
  if training == false or p == 0 then return x end
  if p == 1 then return x * 0 end
  local keep = st.rand(x:shape(), x:dtype()):ge(p):to(x:dtype())
  return x * (keep * (1 / (1 - p)))
end

-- embedding(idx, weight): rows of weight at the 1-based indices idx (any shape, or a Lua table);
-- the result has idx's shape plus weight's last dim.
function F.embedding(idx, weight)
  if not st.is_tensor(idx) then idx = st.tensor(idx, "i64") end
  local shape = idx:shape()
  local rows = weight:index_select(1, idx:reshape(-1))
  shape[#shape + 1] = weight:size(2)
  return rows:reshape(shape)
end

-- Pads dims 3 and 4 of a 4-D tensor with ph rows / pw columns of `value` on both sides (cat, so it
-- is differentiable).
local function pad2d(x, ph, pw, value)
  local s = x:shape()
  local dt = x:dtype()
  if ph > 0 then
    local z = st.full({s[1], s[2], ph, s[4]}, value, dt)
    x = st.cat({z, x, z}, 3)
    s[3] = s[3] + 2 * ph
  end
  if pw > 0 then
    local z = st.full({s[1], s[2], s[3], pw}, value, dt)
    x = st.cat({z, x, z}, 4)
  end
  return x
end

-- Output size of a sliding window; an error naming the sizes when the window does not fit.
local function out_size(n, k, s, p, fname, x)
  local o = (n + 2 * p - k) // s + 1
  if o < 1 then
    error(fname .. ": kernel " .. k .. " with padding " .. p .. " does not fit an input of shape "
      .. shape_str(x), 3)
  end
  return o
end

-- The 0/1 selection matrix of a sliding window along one dim: S[(i, o), r] = 1 when input row r
-- (0-based) is tap i of output row o, i.e. r == o * stride + i - pad (rows outside the input, the
-- zero padding, select nothing). (k * out, n); cached per geometry and dtype (a constant).
local sel_cache = {}
local function window_selector(n, k, stride, pad, out, dtype)
  local key = table.concat({n, k, stride, pad, out, dtype}, ",")
  local s = sel_cache[key]
  if not s then
    s = no_grad(function()
      local r = st.arange(n):reshape(1, 1, n)
      local o = st.arange(out):reshape(1, out, 1)
      local i = st.arange(k):reshape(k, 1, 1)
      return r:eq(o * stride + i - pad):to(dtype):reshape(k * out, n)
    end)
    sel_cache[key] = s
  end
  return s
end

-- conv2d(x, weight, bias, {stride = 1, padding = 0}): x (N, C, H, W) or (C, H, W); weight
-- (O, C, kh, kw). im2col through the matmul path: two matmuls with 0/1 selection matrices (which
-- also do the stride and the zero padding) gather the windows as (N*C, kh*Ho, kw*Wo), one permute
-- makes the (N*Ho*Wo, C*kh*kw) columns, and one matmul with the (C*kh*kw, O) weight finishes.
-- (Building the columns from padded, shifted slices with cat/stack is 20x slower in the fuser.)
function F.conv2d(x, weight, bias, opts)
  opts = opts or {}
  if opts.dilation and opts.dilation ~= 1 then error("conv2d: dilation is not supported", 2) end
  if opts.groups and opts.groups ~= 1 then error("conv2d: groups are not supported", 2) end
  local unbatched = x:dim() == 3
  if unbatched then x = x:unsqueeze(1) end
  if x:dim() ~= 4 or weight:dim() ~= 4 then
    error("conv2d: expected input (N, C, H, W) and weight (O, C, kh, kw), got " .. shape_str(x)
      .. " and " .. shape_str(weight), 2)
  end
  local sh, sw = pair(opts.stride or 1, "stride", "conv2d")
  local ph, pw = pair(opts.padding or 0, "padding", "conv2d")
  local n, c, h, w = table.unpack(x:shape())
  local o, wc, kh, kw = table.unpack(weight:shape())
  if wc ~= c then
    error("conv2d: input " .. shape_str(x) .. " has " .. c .. " channels but weight "
      .. shape_str(weight) .. " expects " .. wc, 2)
  end
  local ho, wo = out_size(h, kh, sh, ph, "conv2d", x), out_size(w, kw, sw, pw, "conv2d", x)
  local dt = x:dtype()
  local S = window_selector(h, kh, sh, ph, ho, dt)                 -- (kh*Ho, H)
  local T = window_selector(w, kw, sw, pw, wo, dt)                 -- (kw*Wo, W)
  local win = S:matmul(x:reshape(n * c, h, w):matmul(T:t()))      -- (N*C, kh*Ho, kw*Wo)
  local col = win:reshape(n, c, kh, ho, kw, wo):permute(1, 4, 6, 2, 3, 5)
    :reshape(n * ho * wo, c * kh * kw)                             -- weight's (c, i, j) order
  local y = col:matmul(weight:reshape(o, c * kh * kw):t())
  if bias then y = y + bias end
  y = y:reshape(n, ho, wo, o):permute(1, 4, 2, 3)
  if unbatched then y = y:squeeze(1) end
  return y
end

-- Shared by the pools: kernel/stride/padding, 3-D input as a batch of one.
local function pool_args(x, kernel, opts, fname)
  opts = opts or {}
  local kh, kw = pair(kernel, "kernel_size", fname)
  local sh, sw = pair(opts.stride or kernel, "stride", fname)
  local ph, pw = pair(opts.padding or 0, "padding", fname)
  if ph > kh // 2 or pw > kw // 2 then
    error(fname .. ": padding must be at most half the kernel size", 3)
  end
  if opts.ceil_mode then error(fname .. ": ceil_mode is not supported", 3) end
  if x:dim() ~= 3 and x:dim() ~= 4 then
    error(fname .. ": expected input (N, C, H, W) or (C, H, W), got " .. shape_str(x), 3)
  end
  return kh, kw, sh, sw, ph, pw
end

-- The kh*kw strided windows of the padded x, combined with fn(acc, view).
local function pool_windows(x, kh, kw, sh, sw, ph, pw, value, fname, fn)
  local s = x:shape()
  local ho, wo = out_size(s[3], kh, sh, ph, fname, x), out_size(s[4], kw, sw, pw, fname, x)
  local xp = pad2d(x, ph, pw, value)
  local acc
  for i = 1, kh do
    for j = 1, kw do
      local v = xp[{{}, {}, {i, i + sh * (ho - 1), sh}, {j, j + sw * (wo - 1), sw}}]
      acc = acc and fn(acc, v) or v
    end
  end
  return acc, ho, wo
end

-- max_pool2d(x, kernel_size, {stride = kernel_size, padding = 0}). Padding is -inf. When the
-- windows tile the input (stride == kernel, no padding) it is one reshape and a max over two dims;
-- otherwise an elementwise maximum over the kh*kw strided views. Gradient at ties: split evenly
-- between the tied elements (PyTorch gives it to one).
function F.max_pool2d(x, kernel, opts)
  local kh, kw, sh, sw, ph, pw = pool_args(x, kernel, opts, "max_pool2d")
  local unbatched = x:dim() == 3
  if unbatched then x = x:unsqueeze(1) end
  local y
  if sh == kh and sw == kw and ph == 0 and pw == 0 then
    local n, c, h, w = table.unpack(x:shape())
    local ho, wo = out_size(h, kh, sh, 0, "max_pool2d", x), out_size(w, kw, sw, 0, "max_pool2d", x)
    if ho * kh ~= h then x = x:narrow(3, 1, ho * kh) end
    if wo * kw ~= w then x = x:narrow(4, 1, wo * kw) end
    y = x:reshape(n, c, ho, kh, wo, kw):max({4, 6})
  else
    y = pool_windows(x, kh, kw, sh, sw, ph, pw, -math.huge, "max_pool2d", st.maximum)
  end
  if unbatched then y = y:squeeze(1) end
  return y
end

-- avg_pool2d(x, kernel_size, {stride = kernel_size, padding = 0}): zero padding counted in the
-- average (PyTorch's count_include_pad = true).
function F.avg_pool2d(x, kernel, opts)
  local kh, kw, sh, sw, ph, pw = pool_args(x, kernel, opts, "avg_pool2d")
  local unbatched = x:dim() == 3
  if unbatched then x = x:unsqueeze(1) end
  local y = pool_windows(x, kh, kw, sh, sw, ph, pw, 0, "avg_pool2d", st.add)
  y = y * (1 / (kh * kw))
  if unbatched then y = y:squeeze(1) end
  return y
end

-- ---- losses ----

-- Checks that target has input's shape without the class dim (dim 2; dim 1 for a 1-D input)
-- and is an integer tensor; returns the class dim.
local function check_target(input, target, fname)
  if not st.is_tensor(target) then error(fname .. ": target must be a tensor", 3) end
  local dt = target:dtype()
  if dt ~= "i64" and dt ~= "i32" then
    error(fname .. ": target must be an integer tensor of 1-based class indices (i64 or i32), got "
      .. dt, 3)
  end
  local cdim = input:dim() == 1 and 1 or 2
  local is, ts = input:shape(), target:shape()
  local ok = #ts == #is - 1
  if ok then
    local j = 1
    for i = 1, #is do
      if i ~= cdim then
        if ts[j] ~= is[i] then ok = false end
        j = j + 1
      end
    end
  end
  if not ok then
    error(fname .. ": target of shape " .. shape_str(target) .. " does not match input of shape "
      .. shape_str(input) .. " (expected the input's shape without the class dim " .. cdim .. ")", 3)
  end
  return cdim
end

-- weight (C) viewed to broadcast along the class dim of an input with ndim dims.
local function class_view(weight, ndim, cdim)
  local s = {}
  for i = 1, ndim do s[i] = 1 end
  s[cdim] = weight:numel()
  return weight:reshape(s)
end

-- nll_loss(logprobs, target, {weight = nil, reduction = "mean"}): -logprobs at the target class;
-- "mean" with a weight divides by the sum of the targets' weights, as PyTorch.
function F.nll_loss(input, target, opts)
  opts = opts or {}
  local r = check_reduction(opts.reduction, "nll_loss")
  local cdim = check_target(input, target, "nll_loss")
  local loss = -input:gather(cdim, target:unsqueeze(cdim)):squeeze(cdim)
  if opts.weight then
    local wt = opts.weight:index_select(1, target:reshape(-1)):reshape(target:shape())
    loss = loss * wt
    if r == "mean" then return loss:sum() / wt:sum() end
  end
  return reduce(loss, r)
end

-- cross_entropy(logits, target, {weight = nil, reduction = "mean", label_smoothing = 0}):
-- logits (N, C) (or (N, C, d1, ...), or (C)), target the 1-based classes (N) (or (N, d1, ...)).
-- log_softmax + gather; with smoothing eps: (1 - eps) * nll + eps / C * (-sum_c w_c logp_c),
-- reduced like PyTorch. A target outside 1..C raises at the sync point (gather's range check).
function F.cross_entropy(input, target, opts)
  opts = opts or {}
  local r = check_reduction(opts.reduction, "cross_entropy")
  local cdim = check_target(input, target, "cross_entropy")
  local eps = opts.label_smoothing or 0
  if eps < 0 or eps > 1 then
    error("cross_entropy: label_smoothing must be in [0, 1], got " .. tostring(eps), 2)
  end
  local logp = input:log_softmax(cdim)
  local nll = F.nll_loss(logp, target, {weight = opts.weight, reduction = r})
  if eps == 0 then return nll end
  local c = input:size(cdim)
  local smooth
  if opts.weight then
    smooth = -(logp * class_view(opts.weight, input:dim(), cdim)):sum(cdim)
  else
    smooth = -logp:sum(cdim)
  end
  if r == "mean" then
    if opts.weight then
      smooth = smooth:sum() / opts.weight:index_select(1, target:reshape(-1)):sum()
    else
      smooth = smooth:mean()
    end
  elseif r == "sum" then
    smooth = smooth:sum()
  end
  return nll * (1 - eps) + smooth * (eps / c)
end

-- mse_loss(input, target, {reduction = "mean"})
function F.mse_loss(input, target, opts)
  local r = check_reduction(opts and opts.reduction, "mse_loss")
  local d = input - target
  return reduce(d * d, r)
end

-- l1_loss(input, target, {reduction = "mean"})
function F.l1_loss(input, target, opts)
  local r = check_reduction(opts and opts.reduction, "l1_loss")
  return reduce((input - target):abs(), r)
end

-- softplus(-x) = log(1 + exp(-x)) computed as m + log(exp(-m) + exp(-x - m)) with m = max(-x, 0)
-- taken with grad off: stable for any x, and its gradient is exactly -sigmoid(-x) everywhere
-- (the max/abs form has a kink at 0 where autograd's subgradient would give the wrong value).
local function softplus_neg(x)
  local m = no_grad(function() return (-x):relu() end)
  return m + ((-m):exp() + (-x - m):exp()):log()
end

-- binary_cross_entropy_with_logits(x, y, {weight = nil, pos_weight = nil, reduction = "mean"}):
-- (1 - y) * x + (1 + (pos_weight - 1) * y) * log(1 + exp(-x)), stable for any x.
function F.binary_cross_entropy_with_logits(x, y, opts)
  opts = opts or {}
  local r = check_reduction(opts.reduction, "binary_cross_entropy_with_logits")
  local loss
  if opts.pos_weight then
    loss = (1 - y) * x + ((opts.pos_weight - 1) * y + 1) * softplus_neg(x)
  else
    loss = (1 - y) * x + softplus_neg(x)
  end
  if opts.weight then loss = loss * opts.weight end
  return reduce(loss, r)
end

-- binary_cross_entropy(p, y, {weight = nil, reduction = "mean"}): log clamped at -100 like PyTorch.
function F.binary_cross_entropy(p, y, opts)
  opts = opts or {}
  local r = check_reduction(opts.reduction, "binary_cross_entropy")
  local loss = -(y * p:log():clamp(-100, nil) + (1 - y) * (1 - p):log():clamp(-100, nil))
  if opts.weight then loss = loss * opts.weight end
  return reduce(loss, r)
end

return F
