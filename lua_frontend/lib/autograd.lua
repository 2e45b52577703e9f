-- autograd.lua — st.autograd: custom differentiable functions in PyTorch's style.
--
--   local Cube = st.autograd.Function("Cube")
--   function Cube.forward(ctx, x) ctx:save_for_backward(x); return x * x * x end
--   function Cube.backward(ctx, g) local x = ctx.saved_tensors[1]; return g * 3 * x * x end
--   local y = Cube.apply(x)
--
-- forward(ctx, ...) runs with grad mode off and returns one or more values; its tensor results are
-- recorded (st._function_apply) as the outputs of one node of the graph whose backward, called
-- during x:backward() with grad mode off, is backward(ctx, grad_outputs...) -> one gradient per
-- argument of forward (nil for an argument that needs none; trailing nils may be left out). Like
-- the built-in rules, a backward records its gradient ops lazily: they are fused with the rest.
-- Invariant: the backward closure holds the ctx, the class and the inputs' shapes, never the inputs
-- or the outputs themselves (a record that held its own outputs would never be freed);
-- save_for_backward keeps detached copies (the values at save time, without their history).
local st = ...

local M = {}

local function shape_str(s) return "(" .. table.concat(s, ", ") .. ")" end

local function describe(v)
  if st.is_tensor(v) then return "a tensor" end
  return "a " .. type(v)
end

-- ---- ctx ----
local Ctx = {}
Ctx.__index = Ctx
Ctx.__name = "autograd.FunctionCtx"

-- ctx:save_for_backward(...): tensors (or nil) for backward, read back as ctx.saved_tensors (a
-- list, n = how many were saved).
function Ctx:save_for_backward(...)
  local saved = table.pack(...)
  for i = 1, saved.n do
    local t = saved[i]
    if t ~= nil and not st.is_tensor(t) then
      error(string.format("save_for_backward: argument %d is %s; only tensors (or nil) can be saved "
        .. "(keep other values as fields of ctx)", i, describe(t)), 2)
    end
    if t ~= nil then saved[i] = t:detach() end
  end
  rawset(self, "saved_tensors", saved)
end

-- ctx:set_materialize_grads(false): outputs no gradient reached are passed to backward as nil
-- instead of zeros (the default, as PyTorch).
function Ctx:set_materialize_grads(on)
  if type(on) ~= "boolean" then
    error("set_materialize_grads: expected a boolean, got " .. describe(on), 2)
  end
  rawset(self, "_materialize", on)
end

-- ctx:mark_non_differentiable(t, ...): those outputs of forward do not require grad; backward
-- receives nil for them.
function Ctx:mark_non_differentiable(...)
  local nd = rawget(self, "_nondiff") or {}
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if not st.is_tensor(t) then
      error(string.format("mark_non_differentiable: argument %d is %s, not a tensor", i, describe(t)), 2)
    end
    nd[t] = true
  end
  rawset(self, "_nondiff", nd)
end

-- ---- Function ----

-- {ctx, tensors it returned as gradients} of the backwards run in the current backward pass;
-- after_backward closes their other saved tensors when the outermost x:backward() returns.
local closing = {}
local function after_backward()
  local list = closing
  closing = {}
  for _, e in ipairs(list) do
    local ctx, returned = e[1], e[2]
    local saved = rawget(ctx, "saved_tensors")
    if saved then
      for i = 1, saved.n do
        local t = saved[i]
        if t ~= nil and not returned[t] then getmetatable(t).__close(t) end
      end
      rawset(ctx, "saved_tensors", nil)
    end
  end
end
st._after_backward(after_backward)

local function apply(cls, ...)
  local name = cls.name
  if type(cls.forward) ~= "function" or type(cls.backward) ~= "function" then
    error(string.format("autograd.Function %s: define %s.forward(ctx, ...) and %s.backward(ctx, ...) "
      .. "before calling apply", name, name, name), 3)
  end
  local args = table.pack(...)
  local grad_on = st.is_grad_enabled()
  local ctx = setmetatable({needs_input_grad = {}}, Ctx)
  local tin, tpos, shapes, any = {}, {}, {}, false
  for i = 1, args.n do
    local a = args[i]
    local needs = false
    if st.is_tensor(a) then
      tin[#tin + 1], tpos[#tpos + 1], shapes[#shapes + 1] = a, i, a:shape()
      needs = grad_on and a.requires_grad
    end
    ctx.needs_input_grad[i] = needs
    any = any or needs
  end
  local outs = table.pack(st.no_grad(cls.forward, ctx, ...))
  if not any then return table.unpack(outs, 1, outs.n) end
  local nondiff = rawget(ctx, "_nondiff") or {}
  local touts, opos, oshape, odtype = {}, {}, {}, {}
  for i = 1, outs.n do
    local o = outs[i]
    if st.is_tensor(o) and not nondiff[o] then
      touts[#touts + 1], opos[#opos + 1] = o, i
      oshape[#touts], odtype[#touts] = o:shape(), o:dtype()
    end
  end
  if #touts == 0 then return table.unpack(outs, 1, outs.n) end
  local nargs, nin, nout, nouts = args.n, #tin, #touts, outs.n
  local argdesc, isinput = {}, {}
  for p = 1, nargs do argdesc[p] = describe(args[p]) end
  for j, p in ipairs(tpos) do isinput[p] = j end
  local function backward(...)
    local gs = table.pack(...)
    local full = {}
    local materialize = rawget(ctx, "_materialize") ~= false
    for k = 1, nout do
      local g = gs[k]
      if g == nil and materialize and odtype[k]:sub(1, 1) ~= "i" and odtype[k] ~= "bool" and odtype[k]:sub(1, 1) ~= "u" then
        g = st.zeros(oshape[k], odtype[k])
      end
      full[opos[k]] = g
    end
    local ret = table.pack(cls.backward(ctx, table.unpack(full, 1, nouts)))
    if ret.n > nargs then
      error(string.format("backward of %s returned %d values; forward took %d arguments", name, ret.n,
        nargs), 0)
    end
    local res = {}
    for p = 1, ret.n do
      local g, j = ret[p], isinput[p]
      if g ~= nil then
        if not j then
          error(string.format("backward of %s: argument %d of forward was %s, not a tensor; its "
            .. "gradient must be nil, got %s", name, p, argdesc[p], describe(g)), 0)
        end
        if not st.is_tensor(g) then
          error(string.format("backward of %s: the gradient of argument %d must be a tensor or nil, got %s",
            name, p, describe(g)), 0)
        end
        local gs_, is_ = g:shape(), shapes[j]
        local same = #gs_ == #is_
        for d = 1, #is_ do same = same and gs_[d] == is_[d] end
        if not same then
          error(string.format("backward of %s: the gradient of argument %d has shape %s; the argument "
            .. "has shape %s", name, p, shape_str(gs_), shape_str(is_)), 0)
        end
        local dt = g:dtype()
        if dt ~= "f16" and dt ~= "bf16" and dt ~= "f32" and dt ~= "f64" then
          error(string.format("backward of %s: the gradient of argument %d is %s; gradients are float "
            .. "tensors", name, p, dt), 0)
        end
        res[j] = g
      end
    end
    -- The record runs once (st_backward has no retain_graph): its saved tensors are dead once
    -- the backward pass ends. Drop their references then (after_backward), not when the collector
    -- finds the ctx, so the flush that follows can free their buffers after their last use (the
    -- conv's columns: 19 MB of the CNN step). Not here: a backward pass that runs out of memory
    -- is undone and run again, calling this backward again. A saved tensor returned as a
    -- gradient stays open.
    if rawget(ctx, "saved_tensors") then
      local returned = {}
      for j = 1, nin do if res[j] ~= nil then returned[res[j]] = true end end
      closing[#closing + 1] = {ctx, returned}
    end
    return table.unpack(res, 1, nin)
  end
  local results = st._function_apply(name, tin, touts, backward)
  for k = 1, nout do outs[opos[k]] = results[k] end
  return table.unpack(outs, 1, outs.n)
end

-- st.autograd.Function(name) or st.autograd.Function{name = , forward = , backward = }: a new
-- function class; define Cls.forward and Cls.backward, call Cls.apply(...).
function M.Function(spec)
  local def = {}
  if spec == nil or type(spec) == "string" then
    def.name = spec
  elseif type(spec) == "table" and not st.is_tensor(spec) then
    for k, v in pairs(spec) do
      if k ~= "name" and k ~= "forward" and k ~= "backward" then
        error("autograd.Function: unknown option '" .. tostring(k) .. "' (known: backward, forward, name)", 2)
      end
      if k == "name" and type(v) ~= "string" then error("autograd.Function: name must be a string", 2) end
      if k ~= "name" and type(v) ~= "function" then
        error("autograd.Function: " .. k .. " must be a function, got " .. describe(v), 2)
      end
      def[k] = v
    end
  else
    error("autograd.Function: expected a name or a table {name =, forward =, backward =}, got " .. describe(spec), 2)
  end
  local cls = {name = def.name or "Function", forward = def.forward, backward = def.backward}
  cls.apply = function(...) return apply(cls, ...) end
  return cls
end

return M
