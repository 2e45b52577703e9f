-- amp.lua — st.amp: mixed precision. st.amp.autocast is st.autocast (the runtime's mode: matmuls
-- in f16/bf16, reductions, softmax, losses and norms in f32; docs/training.md), and GradScaler
-- scales an f16 loss so that small gradients do not flush to zero, PyTorch's torch.amp.GradScaler:
--
--   local scaler = st.amp.GradScaler()
--   local loss = st.autocast("f16", function() return F.cross_entropy(model(x), y) end)
--   scaler:scale(loss):backward()
--   scaler:step(opt)            -- unscales the gradients; skips the step on an inf/NaN gradient
--   scaler:update()             -- halves the scale after a skip, doubles it every growth_interval
--
-- Invariant: the scale is a Lua number (a kernel argument, never a constant baked into a kernel);
-- step() reads one value (the count of non-finite gradient elements), a sync point, as PyTorch's
-- does; everything else stays lazy.
local st = ...

local M = {}

M.autocast = st.autocast

local check_opts = st.nn.functional._check_opts

local GradScaler = {}
GradScaler.__index = GradScaler
GradScaler.__name = "GradScaler"

local function positive(v, what, pred, want)
  if type(v) ~= "number" or v ~= v or not pred(v) then
    error(string.format("GradScaler: %s must be %s, got %s", what, want, tostring(v)), 4)
  end
  return v
end

-- st.amp.GradScaler{init_scale = 2^16, growth_factor = 2, backoff_factor = 0.5,
-- growth_interval = 2000, enabled = true}
function M.GradScaler(opts)
  opts = check_opts(opts, {"init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"},
    "GradScaler", 2)
  local self = setmetatable({}, GradScaler)
  self._scale = positive(opts.init_scale or 65536.0, "init_scale", function(v) return v > 0 and v < math.huge end,
    "a positive finite number")
  self._growth = positive(opts.growth_factor or 2.0, "growth_factor", function(v) return v > 1 end, "> 1")
  self._backoff = positive(opts.backoff_factor or 0.5, "backoff_factor", function(v) return v > 0 and v < 1 end,
    "in (0, 1)")
  self._interval = positive(opts.growth_interval or 2000, "growth_interval",
    function(v) return v >= 1 and math.type(v) == "integer" end, "a positive integer")
  if opts.enabled ~= nil and type(opts.enabled) ~= "boolean" then
    error("GradScaler: enabled must be a boolean, got " .. type(opts.enabled), 2)
  end
  self._enabled = opts.enabled ~= false
  self._tracker = 0
  self._per_opt = setmetatable({}, {__mode = "k"})
  return self
end

function GradScaler:is_enabled() return self._enabled end
function GradScaler:get_scale() return self._enabled and self._scale or 1.0 end
function GradScaler:get_growth_factor() return self._growth end
function GradScaler:get_backoff_factor() return self._backoff end
function GradScaler:get_growth_interval() return self._interval end

-- t * scale, in f32 at least (an f16 loss times 2^16 would overflow f16; PyTorch's f32 scale
-- promotes it the same way)
local function scaled(t, s)
  local dt = t:dtype()
  if dt == "f16" or dt == "bf16" then t = t:float() end
  return t * s
end

-- scale(t): t * scale; a list of tensors gives a list
function GradScaler:scale(out)
  if not self._enabled then return out end
  if st.is_tensor(out) then return scaled(out, self._scale) end
  if type(out) ~= "table" then
    error("GradScaler:scale: expected a tensor or a list of tensors, got " .. type(out), 2)
  end
  local r = {}
  for i, t in ipairs(out) do
    if not st.is_tensor(t) then error("GradScaler:scale: entry " .. i .. " is not a tensor", 2) end
    r[i] = scaled(t, self._scale)
  end
  return r
end

local function check_optimizer(opt, fname)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    error("GradScaler:" .. fname .. ": expected an optimizer (a table with param_groups), got " .. type(opt), 3)
  end
end

-- unscale_(opt): divides opt's gradients by the scale (lazily) and records how many of their
-- elements are not finite (read by step or update)
function GradScaler:unscale_(opt)
  if not self._enabled then return end
  check_optimizer(opt, "unscale_")
  local s = self._per_opt[opt]
  if s and s.unscaled then
    error("GradScaler:unscale_: already called on this optimizer since the last update()", 2)
  end
  if s and s.stepped then error("GradScaler:unscale_: called after step(); call update() first", 2) end
  local inv = 1.0 / self._scale
  local bad = nil
  local guard <close> = st.no_grad()
  for _, g in ipairs(opt.param_groups) do
    for _, p in ipairs(g.params) do
      local gr = p.grad
      if gr then
        local nb = gr:numel() - gr:isfinite():sum()
        bad = bad and bad + nb or nb
        p.grad = gr * inv
      end
    end
  end
  self._per_opt[opt] = {unscaled = true, bad = bad}
end

-- the count of non-finite elements found by unscale_ (a sync point), cached
local function found_inf(s)
  if s.found == nil then s.found = s.bad ~= nil and s.bad:item() > 0 end
  return s.found
end

-- step(opt, ...): unscale_ unless done, then opt:step(...) unless a gradient was inf/NaN (then the
-- step is skipped and nil returned)
function GradScaler:step(opt, ...)
  if not self._enabled then return opt:step(...) end
  check_optimizer(opt, "step")
  local s = self._per_opt[opt]
  if s and s.stepped then error("GradScaler:step: already called on this optimizer since the last update()", 2) end
  if not (s and s.unscaled) then
    self:unscale_(opt)
    s = self._per_opt[opt]
  end
  s.stepped = true
  if found_inf(s) then return nil end
  return opt:step(...)
end

-- update([new_scale]): backoff after a skipped step, growth after growth_interval good ones
function GradScaler:update(new_scale)
  if not self._enabled then return end
  if new_scale ~= nil then
    self._scale = positive(new_scale, "update's new_scale", function(v) return v > 0 and v < math.huge end,
      "a positive finite number")
    self._tracker = 0
  else
    local any, inf = false, false
    for _, s in pairs(self._per_opt) do
      any = true
      inf = found_inf(s) or inf
    end
    if not any then error("GradScaler:update: no inf checks were recorded; call step() or unscale_() first", 2) end
    if inf then
      self._scale = self._scale * self._backoff
      self._tracker = 0
    else
      self._tracker = self._tracker + 1
      if self._tracker >= self._interval then
        self._scale = self._scale * self._growth
        self._tracker = 0
      end
    end
  end
  self._per_opt = setmetatable({}, {__mode = "k"})
end

function GradScaler:state_dict()
  if not self._enabled then return {} end
  return {scale = self._scale, growth_factor = self._growth, backoff_factor = self._backoff,
    growth_interval = self._interval, _growth_tracker = self._tracker}
end

function GradScaler:load_state_dict(sd)
  if type(sd) ~= "table" then error("GradScaler:load_state_dict: expected a table", 2) end
  check_opts(sd, {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"},
    "GradScaler:load_state_dict", 2)
  if sd.scale == nil then error("GradScaler:load_state_dict: the table has no 'scale' (an empty state is a disabled scaler's)", 2) end
  local fresh = M.GradScaler{init_scale = sd.scale, growth_factor = sd.growth_factor,
    backoff_factor = sd.backoff_factor, growth_interval = sd.growth_interval}
  self._scale, self._growth, self._backoff, self._interval = fresh._scale, fresh._growth, fresh._backoff,
    fresh._interval
  self._tracker = sd._growth_tracker or 0
end

return M
