-- optim.lua — st.optim: SGD, Adam, AdamW (amsgrad), RMSprop, Adagrad and the learning-rate schedulers
-- StepLR, CosineWarmup, LambdaLR, MultiStepLR, CosineAnnealingLR, OneCycleLR and ReduceLROnPlateau.
--
-- The update formulas are PyTorch's (torch.optim, single-tensor path), written as lazy tensor ops.
-- Invariants:
--   * step() reads no value back (no :item()): every parameter and every state buffer is updated in
--     place under st.no_grad, then all of them are realized in ONE flush (st.sync(list...)).
--   * Hyperparameters that change from step to step (learning rate, bias corrections) enter the
--     expressions as Lua float numbers; the tracer turns a number into a CONST node, which the fuser
--     passes to the kernel as an argument, so a new learning rate or step count never changes the
--     kernel source and never recompiles. Numbers are forced to floats (x + 0.0) so that an integer
--     lr = 1 records the same node kind as lr = 0.5.
--   * Only structural choices (momentum on/off, weight decay on/off, nesterov, amsgrad, centered)
--     select different op graphs; those change only when the user edits a group's options.
-- Parameters are identified by the Lua tensor object (the same userdata the model holds); state is
-- keyed by it, and state_dict() numbers the parameters 1..n in group order, as PyTorch does 0..n-1.
local st = ...

local M = {}

local unpack = table.unpack

-- ---------------------------------------------------------------------------------------------
-- Optimizer base class
-- ---------------------------------------------------------------------------------------------

local Optimizer = {}
Optimizer.__index = Optimizer
M.Optimizer = Optimizer

local function is_float_dtype(dt)
  return dt == "f32" or dt == "f64" or dt == "f16" or dt == "bf16"
end

-- Copies opts over defaults into a new table; unknown keys are an error (catches typos like "lr_").
local function merge_opts(name, defaults, opts)
  local out = {}
  for k, v in pairs(defaults) do out[k] = v end
  if opts ~= nil then
    if type(opts) ~= "table" then error(name .. ": options must be a table", 3) end
    for k, v in pairs(opts) do
      if defaults[k] == nil and k ~= "params" then
        error(string.format("%s: unknown option '%s'", name, tostring(k)), 3)
      end
      out[k] = v
    end
  end
  return out
end

-- Builds one group from the raw table `rg` (its 'params' and its own options), every option filled
-- from the group itself, then `defaults`; `seen` holds the parameters already in some group.
local function make_group(name, rg, gi, defaults, validate, seen)
  if type(rg) ~= "table" or not (type(rg.params) == "table" or st.is_tensor(rg.params)) then
    error(string.format("%s: parameter group %d must be a table with a 'params' list", name, gi), 4)
  end
  local g = {}
  for k, v in pairs(defaults) do g[k] = v end
  for k, v in pairs(rg) do
    if k ~= "params" and defaults[k] == nil then
      error(string.format("%s: parameter group %d: unknown option '%s'", name, gi, tostring(k)), 4)
    end
    g[k] = v
  end
  local ps = rg.params
  if st.is_tensor(ps) then ps = { ps } end
  g.params = {}
  for i, p in ipairs(ps) do
    if not st.is_tensor(p) then
      error(string.format("%s: parameter group %d: entry %d is not a tensor", name, gi, i), 4)
    end
    if not is_float_dtype(p:dtype()) then
      error(string.format("%s: parameter group %d: entry %d has dtype %s; parameters must be floating point",
        name, gi, i, p:dtype()), 4)
    end
    if seen[p] then
      error(string.format("%s: a parameter appears more than once (group %d, entry %d)", name, gi, i), 4)
    end
    seen[p] = true
    g.params[i] = p
  end
  validate(g, name, gi)
  g.initial_lr = g.initial_lr or g.lr
  return g
end

-- Turns what the user passed (a module, a list of tensors, a list of groups) into a list of groups.
local function make_groups(name, params, defaults, validate)
  if type(params) == "table" and type(params.parameters) == "function" then
    params = params:parameters()
  elseif st.is_tensor(params) then
    params = { params }
  end
  if type(params) ~= "table" or #params == 0 then
    error(name .. ": expected a non-empty list of tensors or of parameter groups", 3)
  end
  local raw
  if st.is_tensor(params[1]) then raw = { { params = params } } else raw = params end
  local groups, seen = {}, {}
  for gi, rg in ipairs(raw) do
    groups[gi] = make_group(name, rg, gi, defaults, validate, seen)
  end
  return groups
end

local function new_optimizer(cls, name, params, opts, defaults, validate)
  local d = merge_opts(name, defaults, opts)
  local self = setmetatable({ name = name, defaults = d, state = {}, _validate = validate }, cls)
  self.param_groups = make_groups(name, params, d, validate)
  return self
end

-- add_param_group(group): appends {params = tensor or list, <option> = ...}; options it leaves out
-- come from the constructor's (self.defaults). A parameter already in a group is an error.
function Optimizer:add_param_group(group)
  local seen = {}
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do seen[p] = true end
  end
  local name = self.name .. ":add_param_group"
  if type(group) ~= "table" then error(name .. ": expected a table with a 'params' list", 2) end
  self.param_groups[#self.param_groups + 1] =
    make_group(name, group, #self.param_groups + 1, self.defaults, self._validate, seen)
end

local function check_number(v, what, name, gi, lo)
  if type(v) ~= "number" or v ~= v then
    error(string.format("%s: group %d: %s must be a number, got %s", name, gi, what, tostring(v)), 4)
  end
  if lo and v < lo then
    error(string.format("%s: group %d: invalid %s %s (must be >= %s)", name, gi, what, tostring(v), tostring(lo)), 4)
  end
end

local function check_bool(v, what, name, gi)
  if type(v) ~= "boolean" then
    error(string.format("%s: group %d: %s must be a boolean, got %s", name, gi, what, tostring(v)), 4)
  end
end

-- zero_grad([set_to_none = true]): drops every gradient (x.grad = nil), or zeroes it in place.
function Optimizer:zero_grad(set_to_none)
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      if set_to_none == false then
        local gr = p.grad
        if gr then gr:zero_() end
      else
        p.grad = nil
      end
    end
  end
end

-- Runs the closure (if any) with grad enabled, then the update under no_grad, then one flush over
-- the updated parameters, their state and `extra` (tensors the caller wants realized in the same
-- flush, e.g. the loss: opt:step(loss) or opt:step{loss, acc}).
function Optimizer:step(arg)
  local loss, extra
  if type(arg) == "function" then
    if st.enable_grad then loss = st.enable_grad(arg) else loss = arg() end
    if st.is_tensor(loss) then extra = { loss } end
  elseif st.is_tensor(arg) then
    extra = { arg }
  elseif type(arg) == "table" then
    extra = arg
  elseif arg ~= nil then
    error(self.name .. ":step: expected nothing, a closure, a tensor or a list of tensors", 2)
  end
  local touched = {}
  do
    local guard <close> = st.no_grad and st.no_grad() or nil
    for _, g in ipairs(self.param_groups) do
      self:_update_group(g, touched)
    end
  end
  if extra then
    for _, t in ipairs(extra) do touched[#touched + 1] = t end
  end
  if #touched > 0 then st.sync(unpack(touched)) end
  return loss
end

-- state_dict(): {state = {[i] = {step = n, <name> = tensor, ...}}, param_groups = {{lr = ..., ...,
-- params = {i, ...}}}} with parameters numbered 1..n across groups in order. The tensors are the
-- live buffers (not copies), as in PyTorch.
function Optimizer:state_dict()
  local out = { state = {}, param_groups = {} }
  local idx = 0
  for gi, g in ipairs(self.param_groups) do
    local og = { params = {} }
    for k, v in pairs(g) do
      if k ~= "params" then
        if type(v) == "table" then
          local c = {}
          for i, x in ipairs(v) do c[i] = x end
          og[k] = c
        else
          og[k] = v
        end
      end
    end
    for _, p in ipairs(g.params) do
      idx = idx + 1
      og.params[#og.params + 1] = idx
      local s = self.state[p]
      if s then
        local os_ = {}
        for k, v in pairs(s) do os_[k] = v end
        out.state[idx] = os_
      end
    end
    out.param_groups[gi] = og
  end
  return out
end

local function as_number(v)
  if st.is_tensor(v) then return v:item() end
  return v
end

-- load_state_dict(sd): restores hyperparameters and state. The groups must have the same sizes as
-- this optimizer's; buffers are copied (cast to the parameter's dtype) and must match its shape.
function Optimizer:load_state_dict(sd)
  local name = self.name .. ":load_state_dict"
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" then
    error(name .. ": expected a table with 'param_groups' (and 'state')", 2)
  end
  if #sd.param_groups ~= #self.param_groups then
    error(string.format("%s: the state has %d parameter groups, this optimizer %d", name,
      #sd.param_groups, #self.param_groups), 2)
  end
  for gi, sg in ipairs(sd.param_groups) do
    local g = self.param_groups[gi]
    local n = sg.params and #sg.params or -1
    if n ~= #g.params then
      error(string.format("%s: group %d has %d parameters in the state, %d in this optimizer", name, gi,
        n, #g.params), 2)
    end
  end
  local state = sd.state or {}
  local new_state = {}
  local idx = 0
  for gi, sg in ipairs(sd.param_groups) do
    local g = self.param_groups[gi]
    for k, v in pairs(sg) do
      if k ~= "params" then
        if type(v) == "table" then
          local c = {}
          for i, x in ipairs(v) do c[i] = as_number(x) end
          g[k] = c
        else
          g[k] = as_number(v)
        end
      end
    end
    for pi, p in ipairs(g.params) do
      idx = idx + 1
      local s = state[sg.params[pi]] or state[tostring(sg.params[pi])]
      if s then
        local ns = {}
        for k, v in pairs(s) do
          if st.is_tensor(v) and v:dim() > 0 then
            local ps, vs = p:shape(), v:shape()
            local same = #ps == #vs
            for d = 1, #ps do same = same and ps[d] == vs[d] end
            if not same then
              error(string.format("%s: state '%s' of parameter %d has shape (%s), the parameter (%s)", name,
                k, idx, table.concat(vs, ", "), table.concat(ps, ", ")), 2)
            end
            ns[k] = v:to(p:device()):to(p:dtype()):clone()   -- on the parameter's device, in its dtype
          else
            ns[k] = as_number(v)
          end
        end
        new_state[p] = ns
      end
    end
  end
  self.state = new_state
  local live = {}
  for _, s in pairs(new_state) do
    for _, v in pairs(s) do if st.is_tensor(v) then live[#live + 1] = v end end
  end
  if #live > 0 then st.sync(unpack(live)) end
end

-- pack(sd): a copy of an optimizer (or scheduler) state dict that st.save can write: numbers become
-- 0-d tensors (i64 for integers, f64 for floats), booleans 0-d bool tensors, arrays of numbers 1-D
-- tensors (the group's params, betas). Tensors are kept as they are.
function M.pack(sd)
  local function conv(v)
    if st.is_tensor(v) then return v end
    if type(v) == "boolean" then return st.tensor(v) end
    if math.type(v) == "integer" then return st.tensor(v, "i64") end
    if type(v) == "number" then return st.tensor(v, "f64") end
    if type(v) == "table" then
      if #v > 0 and type(v[1]) == "number" then
        local all_int = true
        for _, x in ipairs(v) do all_int = all_int and math.type(x) == "integer" end
        return st.tensor(v, all_int and "i64" or "f64")
      end
      local out = {}
      for k, x in pairs(v) do out[tostring(k)] = conv(x) end
      return out
    end
    error("optim.pack: cannot store a " .. type(v), 3)
  end
  return conv(sd)
end

-- unpack(flat [, prefix]): the inverse of pack, from what st.load returns (flat keys joined with
-- "."), keeping the keys under `prefix` (e.g. "opt" for {opt = optim.pack(...)}). Under
-- "param_groups" every tensor becomes Lua values again; under "state" only the step counts do.
function M.unpack(flat, prefix)
  local root = {}
  local pre = prefix and (prefix .. ".") or ""
  for key, v in pairs(flat) do
    if key:sub(1, #pre) == pre then
      local parts = {}
      for part in key:sub(#pre + 1):gmatch("[^.]+") do
        parts[#parts + 1] = math.tointeger(tonumber(part)) or part
      end
      local node = root
      for i = 1, #parts - 1 do
        node[parts[i]] = node[parts[i]] or {}
        node = node[parts[i]]
      end
      local leaf = parts[#parts]
      if st.is_tensor(v) and (parts[1] == "param_groups" or leaf == "step" or parts[1] == "last_epoch"
          or parts[1] == "base_lrs") then
        v = v:tolist()
      end
      node[leaf] = v
    end
  end
  return root
end

function Optimizer:__tostring()
  local lines = { self.name .. " (" }
  for gi, g in ipairs(self.param_groups) do
    local keys = {}
    for k in pairs(g) do if k ~= "params" then keys[#keys + 1] = k end end
    table.sort(keys)
    lines[#lines + 1] = string.format("  group %d: %d parameters", gi, #g.params)
    for _, k in ipairs(keys) do
      local v = g[k]
      if type(v) == "table" then v = "{" .. table.concat(v, ", ") .. "}" end
      lines[#lines + 1] = string.format("    %s: %s", k, tostring(v))
    end
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

local function subclass()
  local cls = {}
  for k, v in pairs(Optimizer) do cls[k] = v end
  cls.__index = cls
  return cls
end

-- ---------------------------------------------------------------------------------------------
-- SGD: with d = grad + wd * p,
--   momentum: buf = d (first step), buf = momentum * buf + (1 - dampening) * d (later steps);
--             d = d + momentum * buf (nesterov) or d = buf
--   p = p - lr * d
-- ---------------------------------------------------------------------------------------------

local SGD = subclass()
M.SGD_class = SGD

local function validate_sgd(g, name, gi)
  check_number(g.lr, "learning rate", name, gi, 0)
  check_number(g.momentum, "momentum", name, gi, 0)
  check_number(g.dampening, "dampening", name, gi)
  check_number(g.weight_decay, "weight_decay", name, gi, 0)
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    error(string.format("%s: group %d: nesterov momentum requires a momentum > 0 and zero dampening", name, gi), 4)
  end
end

function M.SGD(params, opts)
  local self = new_optimizer(SGD, "SGD", params, opts,
    { lr = 1e-3, momentum = 0, dampening = 0, nesterov = false, weight_decay = 0 }, validate_sgd)
  return self
end

function SGD:_update_group(g, touched)
  local lr = g.lr + 0.0
  local mom, damp, wd = g.momentum + 0.0, g.dampening + 0.0, g.weight_decay + 0.0
  for _, p in ipairs(g.params) do
    local grad = p.grad
    if grad then
      local d = grad
      if wd ~= 0 then d = d + p * wd end
      if mom ~= 0 then
        local s = self.state[p]
        if not s then s = {}; self.state[p] = s end
        local buf = s.momentum_buffer
        if buf == nil then
          buf = d:clone()
          s.momentum_buffer = buf
        else
          buf:copy_(buf * mom + d * (1.0 - damp))
        end
        touched[#touched + 1] = buf
        if g.nesterov then d = d + buf * mom else d = buf end
      end
      p:sub_(d * lr)
      touched[#touched + 1] = p
    end
  end
end

-- ---------------------------------------------------------------------------------------------
-- Adam / AdamW: with t the parameter's step count (1 on its first update),
--   Adam:  g = grad + wd * p                    AdamW: p = p * (1 - lr * wd), g = grad
--   m = beta1 * m + (1 - beta1) * g
--   v = beta2 * v + (1 - beta2) * g * g
--   amsgrad: vmax = max(vmax, v), and vmax takes v's place below
--   p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
-- ---------------------------------------------------------------------------------------------

local Adam = subclass()
M.Adam_class = Adam

-- The optimizer state s's buffer `key` for parameter p: zeros of p's shape, made on first use.
local function state_zeros(s, key, p)
  local b = s[key]
  if b == nil then
    b = st.zeros(p:shape(), p:dtype())
    s[key] = b
  end
  return b
end

local function validate_adam(g, name, gi)
  check_number(g.lr, "learning rate", name, gi, 0)
  check_number(g.eps, "eps", name, gi, 0)
  check_number(g.weight_decay, "weight_decay", name, gi, 0)
  check_bool(g.amsgrad, "amsgrad", name, gi)
  if type(g.betas) ~= "table" or type(g.betas[1]) ~= "number" or type(g.betas[2]) ~= "number" then
    error(string.format("%s: group %d: betas must be a table of two numbers", name, gi), 4)
  end
  for i = 1, 2 do
    if not (g.betas[i] >= 0 and g.betas[i] < 1) then
      error(string.format("%s: group %d: invalid beta %d: %s (must be in [0, 1))", name, gi, i,
        tostring(g.betas[i])), 4)
    end
  end
  g.betas = { g.betas[1], g.betas[2] } -- a private copy: groups must not share the user's table
end

function M.Adam(params, opts)
  return new_optimizer(Adam, "Adam", params, opts,
    { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, amsgrad = false }, validate_adam)
end

function M.AdamW(params, opts)
  local self = new_optimizer(Adam, "AdamW", params, opts,
    { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, amsgrad = false }, validate_adam)
  self.decoupled = true
  return self
end

function Adam:_update_group(g, touched)
  local lr = g.lr + 0.0
  local b1, b2 = g.betas[1] + 0.0, g.betas[2] + 0.0
  local eps, wd = g.eps + 0.0, g.weight_decay + 0.0
  for _, p in ipairs(g.params) do
    local grad = p.grad
    if grad then
      local s = self.state[p]
      if not s then
        s = { step = 0, exp_avg = st.zeros(p:shape(), p:dtype()), exp_avg_sq = st.zeros(p:shape(), p:dtype()) }
        self.state[p] = s
      end
      s.step = s.step + 1
      local t = s.step
      if wd ~= 0 then
        if self.decoupled then
          p:mul_(1.0 - lr * wd)
        else
          grad = grad + p * wd
        end
      end
      local m, v = s.exp_avg, s.exp_avg_sq
      m:copy_(m * b1 + grad * (1.0 - b1))
      v:copy_(v * b2 + grad * grad * (1.0 - b2))
      local denom_sq = v
      if g.amsgrad then
        -- created here, not with m and v, so that a state saved without amsgrad can turn it on
        local vmax = state_zeros(s, "max_exp_avg_sq", p)
        vmax:copy_(vmax:maximum(v))
        touched[#touched + 1] = vmax
        denom_sq = vmax
      end
      local step_size = lr / (1.0 - b1 ^ t)
      local bc2_sqrt = math.sqrt(1.0 - b2 ^ t)
      p:sub_(m / (denom_sq:sqrt() / bc2_sqrt + eps) * step_size)
      touched[#touched + 1] = p
      touched[#touched + 1] = m
      touched[#touched + 1] = v
    end
  end
end

-- ---------------------------------------------------------------------------------------------
-- RMSprop: with g = grad + wd * p,
--   sq = alpha * sq + (1 - alpha) * g * g
--   centered: ga = alpha * ga + (1 - alpha) * g, avg = sqrt(sq - ga * ga) + eps
--   otherwise: avg = sqrt(sq) + eps
--   momentum > 0: buf = momentum * buf + g / avg, p = p - lr * buf;  otherwise p = p - lr * g / avg
-- (sq, ga and buf start at zero.)
-- ---------------------------------------------------------------------------------------------

local RMSprop = subclass()
M.RMSprop_class = RMSprop

local function validate_rmsprop(g, name, gi)
  check_number(g.lr, "learning rate", name, gi, 0)
  check_number(g.alpha, "alpha", name, gi, 0)
  check_number(g.eps, "eps", name, gi, 0)
  check_number(g.weight_decay, "weight_decay", name, gi, 0)
  check_number(g.momentum, "momentum", name, gi, 0)
  check_bool(g.centered, "centered", name, gi)
end

function M.RMSprop(params, opts)
  return new_optimizer(RMSprop, "RMSprop", params, opts,
    { lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false }, validate_rmsprop)
end

function RMSprop:_update_group(g, touched)
  local lr, alpha = g.lr + 0.0, g.alpha + 0.0
  local eps, wd, mom = g.eps + 0.0, g.weight_decay + 0.0, g.momentum + 0.0
  for _, p in ipairs(g.params) do
    local grad = p.grad
    if grad then
      local s = self.state[p]
      if not s then s = { step = 0 }; self.state[p] = s end
      s.step = (s.step or 0) + 1
      if wd ~= 0 then grad = grad + p * wd end
      local sq = state_zeros(s, "square_avg", p)
      sq:copy_(sq * alpha + grad * grad * (1.0 - alpha))
      touched[#touched + 1] = sq
      local avg
      if g.centered then
        local ga = state_zeros(s, "grad_avg", p)
        ga:copy_(ga * alpha + grad * (1.0 - alpha))
        touched[#touched + 1] = ga
        avg = (sq - ga * ga):sqrt() + eps
      else
        avg = sq:sqrt() + eps
      end
      if mom > 0 then
        local buf = state_zeros(s, "momentum_buffer", p)
        buf:copy_(buf * mom + grad / avg)
        touched[#touched + 1] = buf
        p:sub_(buf * lr)
      else
        p:sub_(grad / avg * lr)
      end
      touched[#touched + 1] = p
    end
  end
end

-- ---------------------------------------------------------------------------------------------
-- Adagrad: with t the parameter's step count and g = grad + wd * p,
--   clr = lr / (1 + (t - 1) * lr_decay)
--   sum = sum + g * g                      (sum starts at initial_accumulator_value)
--   p = p - clr * g / (sqrt(sum) + eps)
-- ---------------------------------------------------------------------------------------------

local Adagrad = subclass()
M.Adagrad_class = Adagrad

local function validate_adagrad(g, name, gi)
  check_number(g.lr, "learning rate", name, gi, 0)
  check_number(g.lr_decay, "lr_decay", name, gi, 0)
  check_number(g.weight_decay, "weight_decay", name, gi, 0)
  check_number(g.initial_accumulator_value, "initial_accumulator_value", name, gi, 0)
  check_number(g.eps, "eps", name, gi, 0)
end

function M.Adagrad(params, opts)
  return new_optimizer(Adagrad, "Adagrad", params, opts,
    { lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10 },
    validate_adagrad)
end

function Adagrad:_update_group(g, touched)
  local lr, lr_decay = g.lr + 0.0, g.lr_decay + 0.0
  local eps, wd = g.eps + 0.0, g.weight_decay + 0.0
  for _, p in ipairs(g.params) do
    local grad = p.grad
    if grad then
      local s = self.state[p]
      if not s then
        s = { step = 0, sum = st.full(p:shape(), g.initial_accumulator_value + 0.0, p:dtype()) }
        self.state[p] = s
      end
      s.step = s.step + 1
      if wd ~= 0 then grad = grad + p * wd end
      local clr = lr / (1.0 + (s.step - 1) * lr_decay)
      local sum = s.sum
      sum:copy_(sum + grad * grad)
      p:sub_(grad / (sum:sqrt() + eps) * clr)
      touched[#touched + 1] = sum
      touched[#touched + 1] = p
    end
  end
end

-- ---------------------------------------------------------------------------------------------
-- Schedulers: they set group.lr from group.initial_lr (the lr each group had when the optimizer
-- was built) and a step counter `last_epoch`, which is 0 after construction (the constructor
-- applies the schedule's first value) and grows by one per step(). Call sched:step() after
-- opt:step(), once per epoch (StepLR, usually) or once per batch (CosineWarmup, usually).
-- ---------------------------------------------------------------------------------------------

local Scheduler = {}
Scheduler.__index = Scheduler

-- bases: the per-group base values given to lr_at (default: each group's initial_lr).
local function new_scheduler(cls, name, opt, lr_at, bases)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    error(name .. ": expected an optimizer as the first argument", 3)
  end
  local self = setmetatable({ name = name, optimizer = opt, last_epoch = 0, lr_at = lr_at }, cls)
  self.base_lrs = {}
  for i, g in ipairs(opt.param_groups) do self.base_lrs[i] = bases and bases[i] or g.initial_lr or g.lr end
  self:_apply()
  return self
end

function Scheduler:_apply()
  self.last_lr = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    -- a group added (add_param_group) after the scheduler was built starts from its own lr
    if self.base_lrs[i] == nil then self.base_lrs[i] = g.initial_lr or g.lr end
    g.lr = self.lr_at(self.base_lrs[i], self.last_epoch, i)
    self.last_lr[i] = g.lr
  end
end

-- step([epoch]): advances by one (or jumps to `epoch`) and sets every group's lr.
function Scheduler:step(epoch)
  if epoch ~= nil then self.last_epoch = epoch else self.last_epoch = self.last_epoch + 1 end
  self:_apply()
end

-- get_last_lr(): the list of learning rates (one per group) set by the last step.
function Scheduler:get_last_lr()
  local out = {}
  for i, v in ipairs(self.last_lr) do out[i] = v end
  return out
end

function Scheduler:state_dict()
  local b = {}
  for i, v in ipairs(self.base_lrs) do b[i] = v end
  return { last_epoch = self.last_epoch, base_lrs = b }
end

function Scheduler:load_state_dict(sd)
  self.last_epoch = as_number(sd.last_epoch)
  if sd.base_lrs then
    for i, v in ipairs(sd.base_lrs) do self.base_lrs[i] = as_number(v) end
  end
  self:_apply()
end

-- StepLR(opt, {step_size, gamma = 0.1}): lr = base_lr * gamma ^ floor(last_epoch / step_size).
function M.StepLR(opt, opts)
  opts = merge_opts("StepLR", { step_size = false, gamma = 0.1 }, opts)
  local ss, gamma = opts.step_size, opts.gamma
  if math.type(ss) ~= "integer" or ss < 1 then
    error("StepLR: step_size must be a positive integer, got " .. tostring(ss), 2)
  end
  if type(gamma) ~= "number" then error("StepLR: gamma must be a number", 2) end
  return new_scheduler(Scheduler, "StepLR", opt, function(base, e)
    return base * gamma ^ (e // ss)
  end)
end

-- CosineWarmup(opt, {warmup_steps, total_steps, min_lr = 0}), with t = last_epoch:
--   t < warmup_steps:  lr = base_lr * (t + 1) / warmup_steps           (linear warmup)
--   otherwise:         q  = min(1, (t - warmup_steps) / max(1, total_steps - warmup_steps))
--                      lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * q)) / 2
-- so the first step runs at base_lr / warmup_steps, step warmup_steps at base_lr, and every step
-- from total_steps on at min_lr.
function M.CosineWarmup(opt, opts)
  opts = merge_opts("CosineWarmup", { warmup_steps = 0, total_steps = false, min_lr = 0 }, opts)
  local w, total, min_lr = opts.warmup_steps, opts.total_steps, opts.min_lr
  if math.type(w) ~= "integer" or w < 0 then
    error("CosineWarmup: warmup_steps must be an integer >= 0, got " .. tostring(w), 2)
  end
  if math.type(total) ~= "integer" or total < w then
    error("CosineWarmup: total_steps must be an integer >= warmup_steps, got " .. tostring(total), 2)
  end
  if type(min_lr) ~= "number" then error("CosineWarmup: min_lr must be a number", 2) end
  return new_scheduler(Scheduler, "CosineWarmup", opt, function(base, t)
    if t < w then return base * (t + 1) / w end
    local q = math.min(1.0, (t - w) / math.max(1, total - w))
    return min_lr + (base - min_lr) * (1.0 + math.cos(math.pi * q)) / 2.0
  end)
end

-- Checks a scheduler option: a number (an integer when `int`), >= lo (> lo when `strict`), <= hi.
local function check_sched(name, what, v, int, lo, strict, hi)
  local ok = type(v) == "number" and v == v and (not int or math.type(v) == "integer")
  if ok and lo then ok = strict and v > lo or (not strict and v >= lo) end
  if ok and hi then ok = v <= hi end
  if not ok then
    local range = ""
    if lo then range = string.format(" (must be %s %s%s)", strict and ">" or ">=", tostring(lo),
      hi and (" and <= " .. tostring(hi)) or "") end
    error(string.format("%s: invalid %s %s%s", name, what, tostring(v), int and (range .. ", an integer") or range), 3)
  end
end

-- LambdaLR(opt, {lr_lambda}): lr = base_lr * lr_lambda(last_epoch); lr_lambda is a function, or a
-- list of functions, one per group. The functions are not part of state_dict().
function M.LambdaLR(opt, opts)
  opts = merge_opts("LambdaLR", { lr_lambda = false }, opts)
  local f = opts.lr_lambda
  local per_group = type(f) == "table"
  if per_group then
    if type(opt) == "table" and type(opt.param_groups) == "table" and #f ~= #opt.param_groups then
      error(string.format("LambdaLR: expected %d lr_lambda functions (one per group), got %d",
        #opt.param_groups, #f), 2)
    end
    for i, fi in ipairs(f) do
      if type(fi) ~= "function" then error("LambdaLR: lr_lambda " .. i .. " is not a function", 2) end
    end
  elseif type(f) ~= "function" then
    error("LambdaLR: lr_lambda must be a function or a list of functions, got " .. tostring(f), 2)
  end
  return new_scheduler(Scheduler, "LambdaLR", opt, function(base, e, gi)
    local fn = per_group and f[gi] or f
    local m = fn(e)
    if type(m) ~= "number" then error("LambdaLR: lr_lambda returned " .. tostring(m) .. ", not a number", 4) end
    return base * m
  end)
end

-- MultiStepLR(opt, {milestones, gamma = 0.1}): lr = base_lr * gamma ^ (the number of milestones
-- <= last_epoch); milestones is a list of positive integers.
function M.MultiStepLR(opt, opts)
  opts = merge_opts("MultiStepLR", { milestones = false, gamma = 0.1 }, opts)
  local ms = opts.milestones
  if type(ms) ~= "table" then error("MultiStepLR: milestones must be a list of integers", 2) end
  local sorted = {}
  for i, m in ipairs(ms) do
    check_sched("MultiStepLR", "milestone", m, true, 0, false)
    sorted[i] = m
  end
  table.sort(sorted)
  check_sched("MultiStepLR", "gamma", opts.gamma)
  local gamma = opts.gamma
  return new_scheduler(Scheduler, "MultiStepLR", opt, function(base, e)
    local n = 0
    for _, m in ipairs(sorted) do if m <= e then n = n + 1 end end
    return base * gamma ^ n
  end)
end

-- CosineAnnealingLR(opt, {T_max, eta_min = 0}):
--   lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * last_epoch / T_max)) / 2
-- (PyTorch's closed form; past T_max the cosine rises again, as PyTorch's does.)
function M.CosineAnnealingLR(opt, opts)
  opts = merge_opts("CosineAnnealingLR", { T_max = false, eta_min = 0 }, opts)
  check_sched("CosineAnnealingLR", "T_max", opts.T_max, true, 0, true)
  check_sched("CosineAnnealingLR", "eta_min", opts.eta_min, false, 0)
  local T, eta_min = opts.T_max, opts.eta_min + 0.0
  return new_scheduler(Scheduler, "CosineAnnealingLR", opt, function(base, e)
    return eta_min + (base - eta_min) * (1.0 + math.cos(math.pi * e / T)) / 2.0
  end)
end

-- OneCycleLR(opt, {max_lr, total_steps, pct_start = 0.3, anneal_strategy = "cos", div_factor = 25,
-- final_div_factor = 1e4}): learning rate only (no momentum cycling). With t = last_epoch,
-- lr0 = max_lr / div_factor, lr_min = lr0 / final_div_factor, e1 = pct_start * total_steps - 1,
-- e2 = total_steps - 1:
--   t <= e1: lr = anneal(lr0, max_lr, t / e1);  otherwise lr = anneal(max_lr, lr_min, (t - e1) / (e2 - e1))
--   anneal "cos": b + (a - b) * (1 + cos(pi * q)) / 2;  "linear": a + (b - a) * q
-- max_lr is a number or a list (one per group); the groups' own lr is ignored. Stepping past
-- total_steps is an error.
function M.OneCycleLR(opt, opts)
  local name = "OneCycleLR"
  opts = merge_opts(name, { max_lr = false, total_steps = false, pct_start = 0.3, anneal_strategy = "cos",
    div_factor = 25, final_div_factor = 1e4 }, opts)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    error(name .. ": expected an optimizer as the first argument", 2)
  end
  local max_lrs = {}
  if type(opts.max_lr) == "table" then
    if #opts.max_lr ~= #opt.param_groups then
      error(string.format("%s: expected %d max_lr values (one per group), got %d", name, #opt.param_groups,
        #opts.max_lr), 2)
    end
    for i, v in ipairs(opts.max_lr) do check_sched(name, "max_lr", v, false, 0); max_lrs[i] = v end
  else
    check_sched(name, "max_lr", opts.max_lr, false, 0)
    for i = 1, #opt.param_groups do max_lrs[i] = opts.max_lr end
  end
  check_sched(name, "total_steps", opts.total_steps, true, 0, true)
  check_sched(name, "pct_start", opts.pct_start, false, 0, false, 1)
  check_sched(name, "div_factor", opts.div_factor, false, 0, true)
  check_sched(name, "final_div_factor", opts.final_div_factor, false, 0, true)
  local strat = opts.anneal_strategy
  local anneal
  if strat == "cos" then
    anneal = function(a, b, q) return b + (a - b) / 2.0 * (math.cos(math.pi * q) + 1.0) end
  elseif strat == "linear" then
    anneal = function(a, b, q) return (b - a) * q + a end
  else
    error(name .. ": anneal_strategy must be \"cos\" or \"linear\", got " .. tostring(strat), 2)
  end
  local total, div, fdiv = opts.total_steps, opts.div_factor + 0.0, opts.final_div_factor + 0.0
  local e1 = opts.pct_start * total - 1.0
  local e2 = total - 1.0
  return new_scheduler(Scheduler, name, opt, function(max_lr, t)
    if t > total then
      error(string.format("%s: tried to step %d times; total_steps is %d", name, t, total), 4)
    end
    local lr0 = max_lr / div
    local lr_min = lr0 / fdiv
    local a, b, num, den = max_lr, lr_min, t - e1, e2 - e1
    if t <= e1 then a, b, num, den = lr0, max_lr, t, e1 end
    if den == 0 then -- an empty phase (pct_start * total_steps = 1, or = total_steps at the last step)
      error(string.format("%s: step %d falls in an empty phase (pct_start %s, total_steps %d)", name, t,
        tostring(opts.pct_start), total), 4)
    end
    return anneal(a, b, num / den)
  end, max_lrs)
end

-- ReduceLROnPlateau(opt, {mode = "min", factor = 0.1, patience = 10, threshold = 1e-4,
-- threshold_mode = "rel", cooldown = 0, min_lr = 0, eps = 1e-8}); step(metric) once per epoch
-- with a number (or a 0-d tensor, read with :item()). A metric is better than `best` when
--   min/rel: m < best * (1 - threshold)     min/abs: m < best - threshold
--   max/rel: m > best * (1 + threshold)     max/abs: m > best + threshold
-- After more than `patience` epochs in a row that are not better (not counting the `cooldown`
-- epochs after a reduction), every group's lr becomes max(lr * factor, min_lr) (unchanged when that
-- moves it by eps or less). min_lr is a number or a list (one per group).
local Plateau = {}
Plateau.__index = Plateau

function M.ReduceLROnPlateau(opt, opts)
  local name = "ReduceLROnPlateau"
  opts = merge_opts(name, { mode = "min", factor = 0.1, patience = 10, threshold = 1e-4,
    threshold_mode = "rel", cooldown = 0, min_lr = 0, eps = 1e-8 }, opts)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    error(name .. ": expected an optimizer as the first argument", 2)
  end
  if opts.mode ~= "min" and opts.mode ~= "max" then
    error(name .. ": mode must be \"min\" or \"max\", got " .. tostring(opts.mode), 2)
  end
  if opts.threshold_mode ~= "rel" and opts.threshold_mode ~= "abs" then
    error(name .. ": threshold_mode must be \"rel\" or \"abs\", got " .. tostring(opts.threshold_mode), 2)
  end
  check_sched(name, "factor", opts.factor, false, 0, false)
  if opts.factor >= 1 then error(name .. ": invalid factor " .. tostring(opts.factor) .. " (must be < 1)", 2) end
  check_sched(name, "patience", opts.patience, true, 0)
  check_sched(name, "threshold", opts.threshold, false, 0)
  check_sched(name, "cooldown", opts.cooldown, true, 0)
  check_sched(name, "eps", opts.eps, false, 0)
  local min_lrs = {}
  if type(opts.min_lr) == "table" then
    if #opts.min_lr ~= #opt.param_groups then
      error(string.format("%s: expected %d min_lr values (one per group), got %d", name, #opt.param_groups,
        #opts.min_lr), 2)
    end
    for i, v in ipairs(opts.min_lr) do check_sched(name, "min_lr", v, false, 0); min_lrs[i] = v end
  else
    check_sched(name, "min_lr", opts.min_lr, false, 0)
    for i = 1, #opt.param_groups do min_lrs[i] = opts.min_lr end
  end
  local self = setmetatable({ name = name, optimizer = opt, mode = opts.mode, factor = opts.factor + 0.0,
    patience = opts.patience, threshold = opts.threshold + 0.0, threshold_mode = opts.threshold_mode,
    cooldown = opts.cooldown, min_lrs = min_lrs, eps = opts.eps + 0.0, last_epoch = 0,
    best = opts.mode == "min" and math.huge or -math.huge, num_bad_epochs = 0, cooldown_counter = 0 }, Plateau)
  self.last_lr = {}
  for i, g in ipairs(opt.param_groups) do self.last_lr[i] = g.lr end
  return self
end

function Plateau:_is_better(m)
  local best, th = self.best, self.threshold
  if self.mode == "min" then
    if self.threshold_mode == "rel" then return m < best * (1.0 - th) end
    return m < best - th
  end
  if self.threshold_mode == "rel" then return m > best * (1.0 + th) end
  return m > best + th
end

function Plateau:step(metric)
  if st.is_tensor(metric) then metric = metric:item() end
  if type(metric) ~= "number" then
    error(self.name .. ":step: expected the metric as a number, got " .. tostring(metric), 2)
  end
  self.last_epoch = self.last_epoch + 1
  if self:_is_better(metric) then
    self.best = metric
    self.num_bad_epochs = 0
  else
    self.num_bad_epochs = self.num_bad_epochs + 1
  end
  if self.cooldown_counter > 0 then
    self.cooldown_counter = self.cooldown_counter - 1
    self.num_bad_epochs = 0
  end
  if self.num_bad_epochs > self.patience then
    for i, g in ipairs(self.optimizer.param_groups) do
      local old = g.lr
      local new = math.max(old * self.factor, self.min_lrs[i] or 0)
      if old - new > self.eps then g.lr = new end
    end
    self.cooldown_counter = self.cooldown
    self.num_bad_epochs = 0
  end
  self.last_lr = {}
  for i, g in ipairs(self.optimizer.param_groups) do self.last_lr[i] = g.lr end
end

Plateau.get_last_lr = Scheduler.get_last_lr

local plateau_keys = { "last_epoch", "best", "num_bad_epochs", "cooldown_counter" }

-- state_dict(): the counters and the best metric (the options are the constructor's).
function Plateau:state_dict()
  local out = {}
  for _, k in ipairs(plateau_keys) do out[k] = self[k] end
  return out
end

function Plateau:load_state_dict(sd)
  for _, k in ipairs(plateau_keys) do
    if sd[k] ~= nil then self[k] = as_number(sd[k]) end
  end
end

return M
