-- nn_init.lua — st.nn.init: parameter initializers with PyTorch's names and formulas.
--
-- The `_` functions fill an existing tensor in place (under no_grad, so they work on parameters
-- that require grad) and return it; the values come from st.rand / st.randn (Philox), so they are
-- recorded lazily like any op and depend only on st.manual_seed. The plain functions (uniform,
-- normal) make a new tensor and are what the layers use to build their parameters.
local st = ...
local M = {}

-- Runs fn(...) with grad mode off (plain call while the autograd API is missing).
local function no_grad(fn, ...)
  if st.no_grad then return st.no_grad(fn, ...) end
  return fn(...)
end
M._no_grad = no_grad

-- New tensors (not in place): U(lo, hi) and N(mean, std) of the given shape (a table) and dtype.
function M.uniform(shape, lo, hi, dtype)
  return st.rand(shape, dtype or "f32") * (hi - lo) + lo
end

function M.normal(shape, mean, std, dtype)
  local r = st.randn(shape, dtype or "f32")
  if std ~= 1 then r = r * std end
  if mean ~= 0 then r = r + mean end
  return r
end

-- fan_in, fan_out of a weight: dim 2 and dim 1 sizes times the receptive field (dims 3..).
function M.calculate_fan_in_and_fan_out(t)
  local shape = t:shape()
  if #shape < 2 then
    error("nn.init: fan in and fan out need a tensor with at least 2 dims, got shape ("
      .. table.concat(shape, ", ") .. ")", 2)
  end
  local rf = 1
  for i = 3, #shape do rf = rf * shape[i] end
  return shape[2] * rf, shape[1] * rf
end

function M.calculate_gain(nonlinearity, param)
  nonlinearity = nonlinearity or "leaky_relu"
  if nonlinearity == "linear" or nonlinearity == "sigmoid" or nonlinearity:match("^conv") then return 1 end
  if nonlinearity == "tanh" then return 5 / 3 end
  if nonlinearity == "relu" then return math.sqrt(2) end
  if nonlinearity == "selu" then return 3 / 4 end
  if nonlinearity == "leaky_relu" then
    local slope = param or 0.01
    return math.sqrt(2 / (1 + slope * slope))
  end
  error("nn.init.calculate_gain: unknown nonlinearity '" .. tostring(nonlinearity) .. "'", 2)
end

function M.uniform_(t, a, b)
  a, b = a or 0, b or 1
  no_grad(function() t:copy_(M.uniform(t:shape(), a, b, t:dtype())) end)
  return t
end

function M.normal_(t, mean, std)
  mean, std = mean or 0, std or 1
  no_grad(function() t:copy_(M.normal(t:shape(), mean, std, t:dtype())) end)
  return t
end

function M.constant_(t, v)
  no_grad(function() t:fill_(v) end)
  return t
end
function M.zeros_(t) return M.constant_(t, 0) end
function M.ones_(t) return M.constant_(t, 1) end

local function kaiming_std(t, opts)
  opts = opts or {}
  local fan_in, fan_out = M.calculate_fan_in_and_fan_out(t)
  local fan = (opts.mode or "fan_in") == "fan_in" and fan_in or fan_out
  local gain = M.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0)
  return gain / math.sqrt(fan)
end

-- kaiming_uniform_(t, {a = 0, mode = "fan_in", nonlinearity = "leaky_relu"})
function M.kaiming_uniform_(t, opts)
  local bound = math.sqrt(3) * kaiming_std(t, opts)
  return M.uniform_(t, -bound, bound)
end

function M.kaiming_normal_(t, opts)
  return M.normal_(t, 0, kaiming_std(t, opts))
end

function M.xavier_uniform_(t, gain)
  local fan_in, fan_out = M.calculate_fan_in_and_fan_out(t)
  local a = (gain or 1) * math.sqrt(6 / (fan_in + fan_out))
  return M.uniform_(t, -a, a)
end

function M.xavier_normal_(t, gain)
  local fan_in, fan_out = M.calculate_fan_in_and_fan_out(t)
  return M.normal_(t, 0, (gain or 1) * math.sqrt(2 / (fan_in + fan_out)))
end

return M
