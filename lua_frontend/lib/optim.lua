-- optim.lua — st.optim: SGD, Adam, AdamW and the learning-rate schedulers StepLR and CosineWarmup.
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
--   * Only structural choices (momentum on/off, weight decay on/off, nesterov) select different op
--     graphs; those change only when the user edits a group's options.
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

-- Turns what the user passed (a module, a list of tensors, a list of groups) into a list of groups,
-- each with every option filled from the group itself, then the constructor's options.
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
    if type(rg) ~= "table" or type(rg.params) ~= "table" then
      error(string.format("%s: parameter group %d must be a table with a 'params' list", name, gi), 3)
    end
    local g = {}
    for k, v in pairs(defaults) do g[k] = v end
    for k, v in pairs(rg) do
      if k ~= "params" and defaults[k] == nil then
        error(string.format("%s: parameter group %d: unknown option '%s'", name, gi, tostring(k)), 3)
      end
      g[k] = v
    end
    local ps = rg.params
    if st.is_tensor(ps) then ps = { ps } end
    g.params = {}
    for i, p in ipairs(ps) do
      if not st.is_tensor(p) then
        error(string.format("%s: parameter group %d: entry %d is not a tensor", name, gi, i), 3)
      end
      if not is_float_dtype(p:dtype()) then
        error(string.format("%s: parameter group %d: entry %d has dtype %s; parameters must be floating point",
          name, gi, i, p:dtype()), 3)
      end
      if seen[p] then
        error(string.format("%s: a parameter appears more than once (group %d, entry %d)", name, gi, i), 3)
      end
      seen[p] = true
      g.params[i] = p
    end
    validate(g, name, gi)
    g.initial_lr = g.initial_lr or g.lr
    groups[gi] = g
  end
  return groups
end

local function new_optimizer(cls, name, params, opts, defaults, validate)
  local d = merge_opts(name, defaults, opts)
  local self = setmetatable({ name = name, defaults = d, state = {} }, cls)
  self.param_groups = make_groups(name, params, d, validate)
  return self
end

local function check_number(v, what, name, gi, lo)
  if type(v) ~= "number" or v ~= v then
    error(string.format("%s: group %d: %s must be a number, got %s", name, gi, what, tostring(v)), 4)
  end
  if lo and v < lo then
    error(string.format("%s: group %d: invalid %s %s (must be >= %s)", name, gi, what, tostring(v), tostring(lo)), 4)
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
--   p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
-- ---------------------------------------------------------------------------------------------

local Adam = subclass()
M.Adam_class = Adam

local function validate_adam(g, name, gi)
  check_number(g.lr, "learning rate", name, gi, 0)
  check_number(g.eps, "eps", name, gi, 0)
  check_number(g.weight_decay, "weight_decay", name, gi, 0)
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
    { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0 }, validate_adam)
end

function M.AdamW(params, opts)
  local self = new_optimizer(Adam, "AdamW", params, opts,
    { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2 }, validate_adam)
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
      local step_size = lr / (1.0 - b1 ^ t)
      local bc2_sqrt = math.sqrt(1.0 - b2 ^ t)
      p:sub_(m / (v:sqrt() / bc2_sqrt + eps) * step_size)
      touched[#touched + 1] = p
      touched[#touched + 1] = m
      touched[#touched + 1] = v
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

local function new_scheduler(cls, name, opt, lr_at)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    error(name .. ": expected an optimizer as the first argument", 3)
  end
  local self = setmetatable({ name = name, optimizer = opt, last_epoch = 0, lr_at = lr_at }, cls)
  self.base_lrs = {}
  for i, g in ipairs(opt.param_groups) do self.base_lrs[i] = g.initial_lr or g.lr end
  self:_apply()
  return self
end

function Scheduler:_apply()
  self.last_lr = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    g.lr = self.lr_at(self.base_lrs[i], self.last_epoch)
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

return M
