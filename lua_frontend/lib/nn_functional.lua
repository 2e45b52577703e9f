-- nn_functional.lua — st.nn.functional: layers and losses as functions, PyTorch's argument order,
-- Lua's conventions (1-based dims, 1-based class targets), keyword arguments in a trailing table.
--
-- Invariant: every function here is built only from lazy tensor ops that autograd differentiates
-- (views, cat/stack, pointwise, reductions, matmul, gather/index_select). Nothing reads values back
-- to Lua (no item/tolist), so a forward and its backward stay in the trace and fuse; checks that
-- would need values (class targets in range) are left to the ops, which raise at the sync point.
local st = ...
local F = {}

local function is_float(t)
  local dt = t:dtype()
  return dt == "f32" or dt == "f64" or dt == "f16" or dt == "bf16"
end

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

-- Checks an options table: nil or a table whose every key is one of `known` (a list of names);
-- an unknown name is an error naming it and the known ones (nothing is silently ignored). level:
-- the error level of the caller's caller. Returns opts or {}.
local function check_opts(opts, known, fname, level)
  if opts == nil then return {} end
  if type(opts) ~= "table" or st.is_tensor(opts) then
    error(fname .. ": options must be a table, got " .. (st.is_tensor(opts) and "a tensor" or type(opts)),
      (level or 2) + 1)
  end
  for k in pairs(opts) do
    local ok = false
    for _, n in ipairs(known) do ok = ok or k == n end
    if not ok then
      local names = {}
      for _, n in ipairs(known) do names[#names + 1] = n end
      table.sort(names)
      error(string.format("%s: unknown option '%s' (%s)", fname, tostring(k),
        #names > 0 and "known: " .. table.concat(names, ", ") or "it takes no options"), (level or 2) + 1)
    end
  end
  return opts
end
F._check_opts = check_opts

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

-- y + b, with b in y's dtype under autocast (PyTorch's linear and conv are one op whose bias is cast
-- too: the output stays in the low precision)
local function add_bias(y, b)
  local ad = st.autocast_dtype()
  if ad and y:dtype() == ad and b:dtype() ~= ad and b:dtype() ~= "f64" then b = b:to(ad) end
  return y + b
end
F._add_bias = add_bias

function F.linear(x, w, b)
  local y = x:matmul(w:t())
  if b then y = add_bias(y, b) end
  return y
end

function F.relu(x) return x:relu() end
function F.silu(x) return x:silu() end
function F.tanh(x) return x:tanh() end
function F.sigmoid(x) return x:sigmoid() end

-- gelu(x, {approximate = "none" | "tanh"})
function F.gelu(x, opts)
  local a = check_opts(opts, {"approximate"}, "gelu").approximate or "none"
  if a == "none" then return x:gelu() end
  if a == "tanh" then return x:gelu_tanh() end
  error("gelu: approximate must be \"none\" or \"tanh\", got \"" .. tostring(a) .. "\"", 2)
end

local function check_number(v, what, fname, positive)
  if type(v) ~= "number" or v ~= v or (positive and v <= 0) then
    error(string.format("%s: %s must be a%s number, got %s", fname, what, positive and " positive" or "",
      tostring(v)), 3)
  end
  return v
end

-- leaky_relu(x, negative_slope = 0.01): x where x > 0, else negative_slope * x (gradient at 0:
-- the slope, as PyTorch).
function F.leaky_relu(x, negative_slope)
  local a = check_number(negative_slope or 0.01, "negative_slope", "leaky_relu")
  return st.where(x:gt(0), x, x * a)
end

-- y in x's dtype when x is f16/bf16 and autocast made y f32 (an activation built on an op of the
-- f32 list keeps its input's precision, as PyTorch's elu and mish do under autocast)
local function keep_low(y, x)
  local dt = x:dtype()
  if (dt == "f16" or dt == "bf16") and y:dtype() ~= dt then return y:to(dt) end
  return y
end

-- elu(x, alpha = 1): x where x > 0, else alpha * (exp(x) - 1); the exponential of min(x, 0) only,
-- so a large x never makes an inf whose zero gradient would turn into NaN.
function F.elu(x, alpha)
  local a = check_number(alpha or 1, "alpha", "elu")
  return keep_low(st.where(x:gt(0), x, x:clamp(nil, 0):expm1() * a), x)
end

-- softplus(x, beta = 1, threshold = 20): log(1 + exp(beta x)) / beta, and x itself where
-- beta x > threshold (PyTorch's linear region, also for the gradient).
function F.softplus(x, beta, threshold)
  local b = check_number(beta or 1, "beta", "softplus", true)
  local t = check_number(threshold or 20, "threshold", "softplus")
  local bx = x * b
  return st.where(bx:gt(t), x, bx:clamp(nil, t):exp():log1p() * (1 / b))
end

-- mish(x) = x * tanh(softplus(x))
function F.mish(x) return keep_low(x * F.softplus(x):tanh(), x) end

-- hardsigmoid(x) = clamp(x / 6 + 1/2, 0, 1); hardswish(x) = x * hardsigmoid(x)
function F.hardsigmoid(x) return (x * (1 / 6) + 0.5):clamp(0, 1) end
function F.hardswish(x) return x * F.hardsigmoid(x) end

-- prelu(x, weight): x where x > 0, else weight * x; weight has 1 entry or one per channel (dim 2
-- of x, dim 1 for a 1-D x), as PyTorch.
function F.prelu(x, weight)
  if not st.is_tensor(weight) or weight:dim() > 1 then
    error("prelu: weight must be a 1-D tensor (1 entry, or one per channel)", 2)
  end
  local n = weight:numel()
  local w = weight
  if n > 1 then
    local cdim = x:dim() >= 2 and 2 or 1
    if x:size(cdim) ~= n then
      error("prelu: weight of " .. n .. " entries for input of shape " .. shape_str(x) .. " (channels: dim "
        .. cdim .. ")", 2)
    end
    local s = {}
    for i = 1, x:dim() do s[i] = 1 end
    s[cdim] = n
    w = weight:reshape(s)
  end
  return st.where(x:gt(0), x, x * w)
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

-- (x - mean) * rstd, then the weight and bias (nil: none) seen in shape cs (nil: as they are).
local function normalize(x, mean, rstd, weight, bias, cs)
  local y = (x - mean) * rstd
  if weight then y = y * (cs and weight:reshape(cs) or weight) end
  if bias then y = y + (cs and bias:reshape(cs) or bias) end
  return y
end

-- x * rstd, then the weight (nil: none): RMSNorm's normalization.
local function rms_scale(x, rstd, weight)
  local y = x * rstd
  if weight then y = y * weight end
  return y
end

-- LayerNorm's training form as one op with its own backward (as BatchNorm's, below): y = (x -
-- mean) * rstd * weight + bias with mean and rstd computed outside. With xhat = (x - mean) * rstd,
-- gw = g * weight and the means over the normalized dims,
--   gx = (gw - mean(gw) - xhat * mean(gw * xhat)) * rstd,
-- and the weight and bias gradients sum g * xhat and g over the leading dims. xhat is built twice,
-- once for the input gradient and once for the weight gradient, so that each kernel computes its
-- own from x and the row statistics: through the composed ops' gradient one xhat was read by the
-- row kernel and by the weight gradient's column kernel, so the row kernel stored it (a write and
-- a read of x's size), and the gradient chained through the mean and the variance (bench/NOTES.md
-- sixteenth pass).
local LayerNormFn
-- t summed over the dims before dims[1] (a normalization's leading dims: a weight's gradient)
local function sum_lead(t, dims)
  if dims[1] == 1 then return t end
  local lead = {}
  for d = 1, dims[1] - 1 do lead[d] = d end
  return t:sum(lead)
end
local function layer_norm_fn()
  if LayerNormFn then return LayerNormFn end
  LayerNormFn = st.autograd.Function("layer_norm")
  function LayerNormFn.forward(ctx, x, mean, rstd, weight, bias, dims)
    ctx:save_for_backward(x, mean, rstd, weight)
    ctx.dims = dims
    return normalize(x, mean, rstd, weight, bias)
  end
  function LayerNormFn.backward(ctx, g)
    local x, mean, rstd, weight = table.unpack(ctx.saved_tensors, 1, 4)
    local dims, need = ctx.dims, ctx.needs_input_grad
    local gx, gw, gb
    if need[1] then
      local xhat = (x - mean) * rstd
      local gxw = weight and g * weight or g
      gx = (gxw - gxw:mean(dims, true) - xhat * (gxw * xhat):mean(dims, true)) * rstd
    end
    if weight and need[4] then gw = sum_lead(g * ((x - mean) * rstd), dims) end
    if need[5] then gb = sum_lead(g, dims) end
    return gx, nil, nil, gw, gb
  end
  return LayerNormFn
end

-- Does an op of these tensors (nil ones skipped) record a gradient?
local function wants_grad(...)
  if not st.is_grad_enabled() then return false end
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if t and t.requires_grad then return true end
  end
  return false
end

-- layer_norm(x, normalized_shape, weight, bias, eps = 1e-5): biased variance, like PyTorch. When a
-- gradient is wanted, one op with its own backward (layer_norm_fn); else the composed ops.
function F.layer_norm(x, normalized_shape, weight, bias, eps)
  local dims = norm_dims(x, normalized_shape, "layer_norm")
  eps = eps or 1e-5
  local mean, rstd = no_grad(function()
    local m = x:mean(dims, true)
    local xc = x - m
    return m, ((xc * xc):mean(dims, true) + eps):rsqrt()
  end)
  if wants_grad(x, weight, bias) then return layer_norm_fn().apply(x, mean, rstd, weight, bias, dims) end
  return normalize(x, mean, rstd, weight, bias)
end

local function finfo_eps(dtype)
  if dtype == "f64" then return 2.220446049250313e-16 end
  if dtype == "f16" then return 0.0009765625 end
  if dtype == "bf16" then return 0.0078125 end
  return 1.1920928955078125e-07
end

-- RMSNorm's training form, as LayerNorm's (layer_norm_fn): y = x * rstd * weight with rstd
-- computed outside; with xhat = x * rstd and gw = g * weight, gx = (gw - xhat * mean(gw * xhat))
-- * rstd, and the weight's gradient sums g * xhat over the leading dims, xhat built once per kernel.
local RMSNormFn
local function rms_norm_fn()
  if RMSNormFn then return RMSNormFn end
  RMSNormFn = st.autograd.Function("rms_norm")
  function RMSNormFn.forward(ctx, x, rstd, weight, dims)
    ctx:save_for_backward(x, rstd, weight)
    ctx.dims = dims
    return rms_scale(x, rstd, weight)
  end
  function RMSNormFn.backward(ctx, g)
    local x, rstd, weight = table.unpack(ctx.saved_tensors, 1, 3)
    local dims, need = ctx.dims, ctx.needs_input_grad
    local gx, gw
    if need[1] then
      local xhat = x * rstd
      local gxw = weight and g * weight or g
      gx = (gxw - xhat * (gxw * xhat):mean(dims, true)) * rstd
    end
    if weight and need[3] then gw = sum_lead(g * (x * rstd), dims) end
    return gx, nil, gw
  end
  return RMSNormFn
end

-- rms_norm(x, normalized_shape, weight, eps = machine epsilon of x's dtype, as PyTorch). When a
-- gradient is wanted, one op with its own backward (rms_norm_fn); else the composed ops.
function F.rms_norm(x, normalized_shape, weight, eps)
  local dims = norm_dims(x, normalized_shape, "rms_norm")
  eps = eps or finfo_eps(x:dtype())
  local rstd = no_grad(function() return ((x * x):mean(dims, true) + eps):rsqrt() end)
  if wants_grad(x, weight) then return rms_norm_fn().apply(x, rstd, weight, dims) end
  return rms_scale(x, rstd, weight)
end

-- The shape (1, C, 1, ...) of a per-channel vector broadcast along dim 2 of x, and the dims other
-- than the channel dim (the ones batch statistics reduce).
local function channel_shape(x, c)
  local s, dims = {}, {}
  for i = 1, x:dim() do
    s[i] = i == 2 and c or 1
    if i ~= 2 then dims[#dims + 1] = i end
  end
  return s, dims
end

-- BatchNorm's batch-statistics form as one op with its own backward (st.autograd.Function):
-- y = (x - mean) * rstd * weight + bias with mean and rstd computed outside (they also update the
-- running statistics). With xhat = (x - mean) * rstd and the sums over every dim but the channel's,
-- the gradients are gbias = sum(g), gweight = sum(g * xhat) and
--   gx = (g - (sum(g) + xhat * sum(g * xhat)) / n) * rstd * weight,
-- two sums of one pass over g and x and one pointwise pass. The composed ops' gradient went
-- through the mean and the variance: a chain of three dependent reductions, each pass re-reading
-- 4-5 of the step's largest tensors (~37 ms of the ResNet step's kernel time: bench/NOTES.md).
local BatchNormFn
local function batch_norm_fn()
  if BatchNormFn then return BatchNormFn end
  BatchNormFn = st.autograd.Function("batch_norm")
  function BatchNormFn.forward(ctx, x, mean, rstd, weight, bias, cs, dims)
    ctx:save_for_backward(x, mean, rstd, weight)
    ctx.cs, ctx.dims = cs, dims
    return normalize(x, mean, rstd, weight, bias, cs)
  end
  function BatchNormFn.backward(ctx, g)
    local x, mean, rstd, weight = table.unpack(ctx.saved_tensors, 1, 4)
    local cs, dims, need = ctx.cs, ctx.dims, ctx.needs_input_grad
    local c = cs[2]
    local xhat = (x - mean) * rstd
    local sg = g:sum(dims, true)
    local sgx = (g * xhat):sum(dims, true)
    local gx, gw, gb
    if need[1] then
      local scale = weight and rstd * weight:reshape(cs) or rstd
      gx = (g - (sg + xhat * sgx) * (c / x:numel())) * scale
    end
    if weight and need[4] then gw = sgx:reshape(c) end
    if need[5] then gb = sg:reshape(c) end
    return gx, nil, nil, gw, gb
  end
  return BatchNormFn
end

-- batch_norm(x, running_mean, running_var, weight, bias, {training = false, momentum = 0.1,
-- eps = 1e-5}): x (N, C, ...); momentum a number or a 0-d tensor. Training (or no running statistics): normalizes with the batch's
-- mean and biased variance over every dim but the channel dim, and updates running_mean and
-- running_var in place (under no_grad: momentum-weighted, the variance unbiased, as PyTorch);
-- otherwise normalizes with the running statistics.
function F.batch_norm(x, running_mean, running_var, weight, bias, opts)
  opts = check_opts(opts, {"training", "momentum", "eps"}, "batch_norm")
  if x:dim() < 2 then error("batch_norm: expected input (N, C, ...), got " .. shape_str(x), 2) end
  local c = x:size(2)
  for what, t in pairs({running_mean = running_mean, running_var = running_var, weight = weight, bias = bias}) do
    if t ~= nil and (not st.is_tensor(t) or t:dim() ~= 1 or t:size(1) ~= c) then
      error("batch_norm: " .. what .. " must be a tensor of " .. c .. " entries (the channels of input "
        .. shape_str(x) .. ")", 2)
    end
  end
  local eps = check_number(opts.eps or 1e-5, "eps", "batch_norm", true)
  local momentum = opts.momentum or 0.1   -- a number, or a 0-d tensor (BatchNorm's cumulative average)
  if st.is_tensor(momentum) then
    if momentum:dim() ~= 0 then
      error("batch_norm: a momentum tensor must be 0-d, got " .. shape_str(momentum), 2)
    end
  else
    momentum = check_number(momentum, "momentum", "batch_norm")
  end
  local cs, dims = channel_shape(x, c)
  local mean, var
  if opts.training or not running_mean then
    local n = x:numel() // c
    if opts.training and n <= 1 then
      error("batch_norm: expected more than 1 value per channel when training, got input of shape " .. shape_str(x), 2)
    end
    -- the statistics without a gradient of their own: batch_norm_fn's backward is theirs
    local rstd = no_grad(function()
      mean = x:mean(dims, true)
      local xc = x - mean
      var = (xc * xc):mean(dims, true)
      if opts.training and running_mean then
        running_mean:copy_(running_mean * (1 - momentum) + mean:reshape(c) * momentum)
        running_var:copy_(running_var * (1 - momentum) + var:reshape(c) * (momentum * n / (n - 1)))
      end
      return (var + eps):rsqrt()
    end)
    return batch_norm_fn().apply(x, mean, rstd, weight, bias, cs, dims)
  end
  return normalize(x, running_mean:reshape(cs), (running_var:reshape(cs) + eps):rsqrt(), weight, bias, cs)
end

-- group_norm(x, num_groups, weight, bias, eps = 1e-5): x (N, C, ...) in num_groups groups of C /
-- num_groups channels, each normalized over its channels and the rest of the dims (biased
-- variance); weight and bias per channel.
function F.group_norm(x, num_groups, weight, bias, eps)
  if x:dim() < 2 then error("group_norm: expected input (N, C, ...), got " .. shape_str(x), 2) end
  local n, c = x:size(1), x:size(2)
  if math.type(num_groups) ~= "integer" or num_groups < 1 or c % num_groups ~= 0 then
    error("group_norm: num_groups must be an integer >= 1 dividing the " .. c .. " channels of input "
      .. shape_str(x) .. ", got " .. tostring(num_groups), 2)
  end
  eps = check_number(eps or 1e-5, "eps", "group_norm", true)
  local g = x:reshape(n, num_groups, -1)
  local xc = g - g:mean(3, true)
  local y = (xc * ((xc * xc):mean(3, true) + eps):rsqrt()):reshape(x:shape())
  local cs = channel_shape(x, c)
  if weight then y = y * weight:reshape(cs) end
  if bias then y = y + bias:reshape(cs) end
  return y
end

-- instance_norm(x, weight, bias, eps = 1e-5): each (sample, channel) normalized over the other dims.
function F.instance_norm(x, weight, bias, eps)
  if x:dim() < 3 then error("instance_norm: expected input (N, C, L, ...), got " .. shape_str(x), 2) end
  return F.group_norm(x, x:size(2), weight, bias, eps)
end

-- scaled_dot_product_attention(q, k, v, {attn_mask, dropout_p = 0, is_causal = false, scale}):
-- softmax(q k^T * scale + mask) v over the last two dims, scale 1/sqrt(q's last dim) by default.
-- attn_mask: a bool tensor (true: may attend) or a float one added to the scores; is_causal: query
-- i attends to keys j <= i (with more keys than queries, PyTorch's top-left alignment). Float
-- operands (and a bool or float mask) are one attention op (st._attention: one kernel, the scores
-- never stored, recomputed by the backward; a mask is read through its broadcast; dropout draws
-- F.dropout's numbers in the kernel; docs/fusion.md); the others the composition below (matmul,
-- where or add, softmax, dropout, matmul).
function F.scaled_dot_product_attention(q, k, v, opts)
  opts = check_opts(opts, {"attn_mask", "dropout_p", "is_causal", "scale"}, "scaled_dot_product_attention")
  for what, t in pairs({q = q, k = k, v = v}) do
    if not st.is_tensor(t) or t:dim() < 2 then
      error("scaled_dot_product_attention: " .. what .. " must be a tensor of at least 2 dims", 2)
    end
  end
  local d, lq, lk = q:size(-1), q:size(-2), k:size(-2)
  if k:size(-1) ~= d or v:size(-2) ~= lk then
    error("scaled_dot_product_attention: q " .. shape_str(q) .. ", k " .. shape_str(k) .. " and v " .. shape_str(v)
      .. " do not fit (q and k share the last dim, k and v the one before)", 2)
  end
  if opts.is_causal and opts.attn_mask then
    error("scaled_dot_product_attention: attn_mask and is_causal together (PyTorch refuses it too)", 2)
  end
  local scale = opts.scale or 1 / math.sqrt(d)
  if type(scale) ~= "number" or scale ~= scale then
    error("scaled_dot_product_attention: scale must be a number (not NaN), got " .. tostring(scale), 2)
  end
  local p = opts.dropout_p or 0
  if type(p) ~= "number" or p < 0 or p > 1 then
    error("scaled_dot_product_attention: dropout_p must be in [0, 1], got " .. tostring(p), 2)
  end
  local mask = opts.attn_mask
  if mask ~= nil and not st.is_tensor(mask) then error("scaled_dot_product_attention: attn_mask must be a tensor", 2) end
  if is_float(q) and is_float(k) and is_float(v) and (mask == nil or mask:dtype() == "bool" or is_float(mask)) then
    return st._attention(q, k, v, scale, not not opts.is_causal, mask, p)
  end
  local scores = q:matmul(k:transpose(-2, -1)) * scale
  if opts.is_causal then
    mask = st.arange(lk):reshape(1, lk):le(st.arange(lq):reshape(lq, 1))
  end
  if mask ~= nil then
    if mask:dtype() == "bool" then
      scores = st.where(mask, scores, -math.huge)
    else
      scores = scores + mask
    end
  end
  local attn = scores:softmax(-1)
  if p > 0 then attn = F.dropout(attn, p, true) end
  return attn:matmul(v)
end

-- dropout(x, p = 0.5, training = true): zeroes each element with probability p (st.rand, Philox,
-- so the mask fuses with its neighbours) and scales the rest by 1/(1-p).
function F.dropout(x, p, training)
  p = p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then
    error("dropout: p must be a number in [0, 1], got " .. (type(p) == "table" and "a table" or tostring(p)), 2)
  end
  if training == false or p == 0 then return x end
  if p == 1 then return x * 0 end
  local keep = st.rand(x:shape(), x:dtype()):ge(p):to(x:dtype())
  return x * (keep * (1 / (1 - p)))
end

-- embedding(idx, weight, {padding_idx}): rows of weight at the 1-based indices idx (any shape, or
-- a Lua table); the result has idx's shape plus weight's last dim. padding_idx (1-based; negative
-- counts from the end): that row's lookups pass no gradient to weight (PyTorch's padding_idx).
function F.embedding(idx, weight, opts)
  opts = check_opts(opts, {"padding_idx"}, "embedding")
  if not st.is_tensor(idx) then idx = st.tensor(idx, "i64") end
  local shape = idx:shape()
  local flat = idx:reshape(-1)
  local rows = weight:index_select(1, flat)
  local pad = opts.padding_idx
  if pad ~= nil then
    local n = weight:size(1)
    if math.type(pad) ~= "integer" or pad == 0 or pad > n or pad < -n then
      error("embedding: padding_idx must be an integer in 1.." .. n .. " (or -" .. n .. "..-1) for weight of shape "
        .. shape_str(weight) .. ", got " .. tostring(pad), 2)
    end
    if pad < 0 then pad = n + 1 + pad end
    -- the same values; the gradient only through the rows that are not padding
    local keep = flat:ne(pad):to(weight:dtype()):unsqueeze(2)
    rows = rows * keep + rows:detach() * (1 - keep)
  end
  shape[#shape + 1] = weight:size(2)
  return rows:reshape(shape)
end

st._lib("nn_conv")(F, {shape_str = shape_str, pair = pair, check_opts = check_opts, add_bias = add_bias})

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

-- ignore_index: nil, or an integer class id whose targets count for nothing (checked); returns the
-- targets made safe to gather (ignored ones replaced by class 1) and the 0/1 mask of the kept ones
-- in dtype dt, or target and nil.
local function ignore_mask(target, ign, dt, fname)
  if ign == nil then return target, nil end
  if math.type(ign) ~= "integer" then
    error(fname .. ": ignore_index must be an integer class id, got " .. tostring(ign), 3)
  end
  local keep = target:ne(ign)
  return st.where(keep, target, 1), keep:to(dt)
end

-- The per-target weights (weight's entry at each target's class, times keep) or keep, or nil.
local function target_weights(weight, safe, keep)
  local wt = weight and weight:index_select(1, safe:reshape(-1)):reshape(safe:shape())
  if wt and keep then return wt * keep end
  return wt or keep
end

-- A per-target loss weighted by the targets' class weights and ignore mask (target_weights) and
-- reduced; "mean" with weights divides by the sum of the weights, as PyTorch.
local function weighted_reduce(loss, weight, safe, keep, r)
  local wt = target_weights(weight, safe, keep)
  if wt then
    loss = loss * wt
    if r == "mean" then return loss:sum() / wt:sum() end
  end
  return reduce(loss, r)
end

-- nll_loss(logprobs, target, {weight = nil, reduction = "mean", ignore_index = nil}): -logprobs at
-- the target class; "mean" with a weight divides by the sum of the targets' weights, as PyTorch;
-- targets equal to ignore_index add nothing and are not counted by "mean".
function F.nll_loss(input, target, opts)
  opts = check_opts(opts, {"weight", "reduction", "ignore_index"}, "nll_loss")
  local r = check_reduction(opts.reduction, "nll_loss")
  local cdim = check_target(input, target, "nll_loss")
  local safe, keep = ignore_mask(target, opts.ignore_index, input:dtype(), "nll_loss")
  local loss = -input:gather(cdim, safe:unsqueeze(cdim)):squeeze(cdim)
  return weighted_reduce(loss, opts.weight, safe, keep, r)
end

-- A target of the input's shape holds class probabilities (PyTorch's rule); it must then be a float
-- tensor. Other targets are class indices (check_target).
local FLOAT_TARGET = {f32 = true, f64 = true, f16 = true, bf16 = true}
local function is_probability_target(input, target)
  if not st.is_tensor(target) or not st.is_tensor(input) then return false end
  local float = FLOAT_TARGET[target:dtype()]
  if shape_str(target) == shape_str(input) then
    if not float then
      error("cross_entropy: a target of the input's shape " .. shape_str(input) .. " holds class probabilities "
        .. "and must be a float tensor, got " .. target:dtype(), 3)
    end
    return true
  end
  if float then
    error("cross_entropy: a float target holds class probabilities and must have the input's shape "
      .. shape_str(input) .. ", got " .. shape_str(target) .. " (class indices: an integer tensor, i64 or i32)", 3)
  end
  return false
end

-- Class-probability targets (PyTorch's soft labels): per sample -sum_c w_c * y_c * logp_c over the
-- class dim, with smoothing eps y = (1 - eps) * y + eps / C; "mean" divides by the number of samples
-- (every element but the class dim; not by the weights, as PyTorch). ignore_index is refused.
local function prob_cross_entropy(input, target, opts, r, eps)
  if opts.ignore_index ~= nil then
    error("cross_entropy: ignore_index is not supported with class-probability targets (a float target "
      .. shape_str(target) .. ")", 3)
  end
  local cdim = input:dim() == 1 and 1 or 2
  local c = input:size(cdim)
  local w = opts.weight
  if w ~= nil and (not st.is_tensor(w) or w:dim() ~= 1 or w:numel() ~= c) then
    error("cross_entropy: weight must be a 1-D tensor of C = " .. c .. " class weights, got "
      .. (st.is_tensor(w) and "shape " .. shape_str(w) or type(w)), 3)
  end
  local logp = input:log_softmax(cdim)
  local y = target
  if eps > 0 then y = y * (1 - eps) + eps / c end
  local terms = logp * y
  if w then terms = terms * class_view(w, input:dim(), cdim) end
  local loss = -terms:sum(cdim)
  return reduce(loss, r)
end

-- cross_entropy(logits, target, {weight = nil, reduction = "mean", label_smoothing = 0,
-- ignore_index = nil}): logits (N, C) (or (N, C, d1, ...), or (C)), target the 1-based classes (N)
-- (or (N, d1, ...)), or class probabilities: a float target of the logits' shape
-- (prob_cross_entropy). Each row's loss is logsumexp(x) - x[target], nll_loss(log_softmax(x))
-- written so that its backward is pointwise: softmax * g (logsumexp's adjoint) minus g at the
-- target (gather's one-hot), where log_softmax's adjoint would sum the one-hot gradient over every
-- row, and the forward reads the target logit from x itself, not from a stored log_softmax. With
-- smoothing eps: (1 - eps) * nll + eps / C * (-sum_c w_c logp_c), reduced like PyTorch (ignored
-- targets add nothing to either term and are not counted by "mean"). A target outside 1..C (and
-- not ignore_index) raises at the sync point (gather's range check).
function F.cross_entropy(input, target, opts)
  opts = check_opts(opts, {"weight", "reduction", "label_smoothing", "ignore_index"}, "cross_entropy")
  local r = check_reduction(opts.reduction, "cross_entropy")
  local eps = opts.label_smoothing or 0
  if type(eps) ~= "number" or eps < 0 or eps > 1 then
    error("cross_entropy: label_smoothing must be in [0, 1], got " .. tostring(eps), 2)
  end
  if is_probability_target(input, target) then
    local loss = prob_cross_entropy(input, target, opts, r, eps)   -- not a tail call: error levels
    return loss
  end
  local cdim = check_target(input, target, "cross_entropy")
  local dt = input:dtype()
  if (dt == "f16" or dt == "bf16") and st.autocast_dtype() then
    input = input:float()   -- cross-entropy is on autocast's f32 list (as log_softmax is in C)
  end
  local safe, keep = ignore_mask(target, opts.ignore_index, input:dtype(), "cross_entropy")
  local pick = input:gather(cdim, safe:unsqueeze(cdim)):squeeze(cdim)
  -- logsumexp as log_softmax computes it: the row max only keeps exp in range (detached); no
  -- guard for an infinite max (logsumexp's: a stored value of its own), whose row is nan as
  -- PyTorch's cross-entropy
  local m = input:max(cdim, true):detach()
  local lse = ((input - m):exp():sum(cdim, true):log() + m):squeeze(cdim)
  local nll = weighted_reduce(lse - pick, opts.weight, safe, keep, r)
  if eps == 0 then return nll end
  local logp = input:log_softmax(cdim)
  local c = input:size(cdim)
  local smooth
  if opts.weight then
    smooth = -(logp * class_view(opts.weight, input:dim(), cdim)):sum(cdim)
  else
    smooth = -logp:sum(cdim)
  end
  if keep then smooth = smooth * keep end
  if r == "mean" then
    local wt = target_weights(opts.weight, safe, keep)
    smooth = wt and smooth:sum() / wt:sum() or smooth:mean()
  elseif r == "sum" then
    smooth = smooth:sum()
  end
  return nll * (1 - eps) + smooth * (eps / c)
end

-- smooth_l1_loss(input, target, {reduction = "mean", beta = 1}): 0.5 d^2 / beta where |d| < beta,
-- else |d| - 0.5 beta (beta = 0: the L1 loss), d = input - target.
function F.smooth_l1_loss(input, target, opts)
  opts = check_opts(opts, {"reduction", "beta"}, "smooth_l1_loss")
  local r = check_reduction(opts.reduction, "smooth_l1_loss")
  local beta = opts.beta or 1
  if type(beta) ~= "number" or beta < 0 then
    error("smooth_l1_loss: beta must be a number >= 0, got " .. tostring(beta), 2)
  end
  local d = (input - target):abs()
  if beta == 0 then return reduce(d, r) end
  return reduce(st.where(d:lt(beta), d * d * (0.5 / beta), d - 0.5 * beta), r)
end

-- huber_loss(input, target, {reduction = "mean", delta = 1}): 0.5 d^2 where |d| < delta, else
-- delta (|d| - 0.5 delta).
function F.huber_loss(input, target, opts)
  opts = check_opts(opts, {"reduction", "delta"}, "huber_loss")
  local r = check_reduction(opts.reduction, "huber_loss")
  local delta = opts.delta or 1
  if type(delta) ~= "number" or delta <= 0 then
    error("huber_loss: delta must be a positive number, got " .. tostring(delta), 2)
  end
  local d = (input - target):abs()
  return reduce(st.where(d:lt(delta), d * d * 0.5, (d - 0.5 * delta) * delta), r)
end

-- kl_div(input, target, {reduction = "mean", log_target = false}): input holds log-probabilities;
-- target probabilities (or log-probabilities with log_target): target * (log target - input), 0
-- where target is 0. reduction "batchmean": the sum over the batch size (input's dim 1), the
-- mathematically right KL divergence; "mean" divides by every element, as PyTorch.
function F.kl_div(input, target, opts)
  opts = check_opts(opts, {"reduction", "log_target"}, "kl_div")
  local r = opts.reduction or "mean"
  if r ~= "batchmean" then r = check_reduction(r, "kl_div") end
  local loss
  if opts.log_target then
    loss = target:exp() * (target - input)
  else
    local pos = target:gt(0)
    local logt = st.where(pos, target, 1):log()   -- log 1 = 0 where target is 0: no -inf
    loss = st.where(pos, target * (logt - input), 0)
  end
  if r == "batchmean" then return loss:sum() * (1 / (input:dim() > 0 and input:size(1) or 1)) end
  return reduce(loss, r)
end

-- mse_loss(input, target, {reduction = "mean"})
function F.mse_loss(input, target, opts)
  local r = check_reduction(check_opts(opts, {"reduction"}, "mse_loss").reduction, "mse_loss")
  local d = input - target
  return reduce(d * d, r)
end

-- l1_loss(input, target, {reduction = "mean"})
function F.l1_loss(input, target, opts)
  local r = check_reduction(check_opts(opts, {"reduction"}, "l1_loss").reduction, "l1_loss")
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
  opts = check_opts(opts, {"weight", "pos_weight", "reduction"}, "binary_cross_entropy_with_logits")
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
  opts = check_opts(opts, {"weight", "reduction"}, "binary_cross_entropy")
  local r = check_reduction(opts.reduction, "binary_cross_entropy")
  local loss = -(y * p:log():clamp(-100, nil) + (1 - y) * (1 - p):log():clamp(-100, nil))
  if opts.weight then loss = loss * opts.weight end
  return reduce(loss, r)
end

-- pad(x, pads [, mode [, value]]): PyTorch's F.pad, the tensor method x:pad (docs/lua.md).
function F.pad(x, pads, mode, value)
  if not st.is_tensor(x) then error("pad: expected a tensor, got " .. type(x), 2) end
  return x:pad(pads, mode, value)
end

-- The error of name called with more than `most` arguments (trailing nils pass nothing: no error),
-- naming the extra values; level as error's, counted from check_count's caller. Also the module
-- constructor's check (nn.lua construct).
local function check_count(name, most, level, ...)
  local n = select("#", ...)
  while n > most and select(n, ...) == nil do n = n - 1 end
  if n <= most then return end
  local got = {}
  for i = most + 1, n do
    local v = select(i, ...)
    got[#got + 1] = st.is_tensor(v) and "a tensor" or (type(v) == "table" and "a table" or tostring(v))
  end
  error(string.format("%s: %s, got %d (unexpected: %s)", name, most == 0 and "takes no arguments"
    or string.format("takes at most %d argument%s", most, most == 1 and "" or "s"), n, table.concat(got, ", ")),
    level + 1)
end
F._arg_count = check_count

-- Extra positional arguments are errors: Lua drops them silently (`F.dropout(x, 0.1, true, extra)`
-- would run as if `extra` were not there), so every F.name taking a fixed number of arguments is
-- wrapped in a count check (trailing nils, a forwarded optional argument, pass nothing and are
-- allowed). The wrapper tail-calls the function, so errors raised inside it still
-- point at the user's call.
for name, fn in pairs(F) do
  if type(fn) == "function" and name:sub(1, 1) ~= "_" then
    local info = debug.getinfo(fn, "u")
    if not info.isvararg then
      local most = info.nparams
      F[name] = function(...)
        if select("#", ...) > most then check_count(name, most, 2, ...) end
        return fn(...)
      end
    end
  end
end

return F
