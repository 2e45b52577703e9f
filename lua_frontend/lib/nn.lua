-- nn.lua — st.nn: the Module base class, layers and loss modules (functional forms in
-- nn_functional.lua and nn_conv.lua, initializers in nn_init.lua, containers in nn_containers.lua,
-- the sequence layers (attention, transformer encoder, LSTM, GRU) in nn_seq.lua).
--
-- A module is a Lua table whose metatable is its class. Its parameters, buffers and child modules
-- live in ordered registries (_parameters/_param_order, _buffers/_buffer_order,
-- _modules/_module_order) rather than as raw fields, so that `self.weight` reads through __index
-- and `self.weight = t` goes through __newindex, which keeps the registries and the registration
-- order (the order parameters(), state_dict() and __tostring follow) in sync. Invariant: a name is
-- in at most one registry, and every name in an order array is a key of its registry.
local st = ...
local F = st._lib("nn_functional")
local init = st._lib("nn_init")
local no_grad = init._no_grad

local M = {}
M.functional = F
M.init = init

local function shape_str(t)
  return "(" .. table.concat(t:shape(), ", ") .. ")"
end

local function is_module(v)
  return type(v) == "table" and rawget(v, "_modules") ~= nil and rawget(v, "_parameters") ~= nil
end
M.is_module = is_module

-- Makes t a parameter: a leaf that requires grad (a no-op while the autograd API is missing).
local function as_parameter(t, on)
  if on == nil then on = true end
  if t.requires_grad_ and t.requires_grad ~= on then t:requires_grad_(on) end
  return t
end

-- st.nn.Parameter(t [, requires_grad = true]): marks t as a trainable leaf and returns it; assigning
-- it into a module registers it.
function M.Parameter(t, requires_grad)
  if not st.is_tensor(t) then error("nn.Parameter: expected a tensor", 2) end
  return as_parameter(t, requires_grad)
end

-- ---- Module ----

local Module = {}
M.Module = Module

local function check_name(self, name, what)
  if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
    error(what .. ": name must be a non-empty string without '.', got " .. tostring(name), 3)
  end
  for _, reg in ipairs({"_parameters", "_buffers", "_modules"}) do
    if rawget(self, reg)[name] ~= nil then
      error(what .. ": '" .. name .. "' is already registered", 3)
    end
  end
  if rawget(self, name) ~= nil then
    error(what .. ": '" .. name .. "' is already a field of the module", 3)
  end
end

local function remove_name(order, name)
  for i = #order, 1, -1 do
    if order[i] == name then table.remove(order, i) end
  end
end

-- __index: registries first (integer keys index the children by position, negative from the
-- end: seq[1], seq[-1]), then the class chain.
local function instance_index(self, k)
  local params = rawget(self, "_parameters")
  if params then
    if math.type(k) == "integer" then
      local order = rawget(self, "_module_order")
      if k < 0 then k = #order + k + 1 end
      local name = order[k]
      return name and rawget(self, "_modules")[name]
    end
    local v = params[k]
    if v ~= nil then return v end
    v = rawget(self, "_buffers")[k]
    if v ~= nil then return v end
    v = rawget(self, "_modules")[k]
    if v ~= nil then return v end
  end
  return getmetatable(self)[k]
end

-- __newindex (only for names that are not raw fields): replaces or removes a registered entry;
-- a tensor that requires grad becomes a parameter, a module a child; anything else a raw field.
local function instance_newindex(self, k, v)
  local params = rawget(self, "_parameters")
  if params == nil or type(k) ~= "string" then return rawset(self, k, v) end
  if params[k] ~= nil then
    if v == nil then
      params[k] = nil
      remove_name(rawget(self, "_param_order"), k)
    elseif st.is_tensor(v) then
      params[k] = v
    else
      error("cannot assign a " .. type(v) .. " to parameter '" .. k .. "' (a tensor or nil)", 2)
    end
    return
  end
  local buffers = rawget(self, "_buffers")
  if buffers[k] ~= nil then
    if v == nil then
      buffers[k] = nil
      remove_name(rawget(self, "_buffer_order"), k)
    elseif st.is_tensor(v) then
      buffers[k] = v
    else
      error("cannot assign a " .. type(v) .. " to buffer '" .. k .. "' (a tensor or nil)", 2)
    end
    return
  end
  local mods = rawget(self, "_modules")
  if mods[k] ~= nil then
    if v == nil then
      mods[k] = nil
      remove_name(rawget(self, "_module_order"), k)
    elseif is_module(v) then
      mods[k] = v
    else
      error("cannot assign a " .. type(v) .. " to child module '" .. k .. "' (a module or nil)", 2)
    end
    return
  end
  if st.is_tensor(v) and v.requires_grad then return self:register_parameter(k, v) end
  if is_module(v) then return self:add_module(k, v) end
  rawset(self, k, v)
end

-- The most arguments cls.__init takes after self (nil: any, a vararg __init).
local function init_arity(cls)
  local info = debug.getinfo(cls.__init, "u")
  if info.isvararg then return nil end
  return math.max(info.nparams - 1, 0)
end

local function construct(cls, ...)
  local most = init_arity(cls)   -- a Lua function drops extra arguments: say so instead
  if most and select("#", ...) > most then F._arg_count(rawget(cls, "__name") or "Module", most, 2, ...) end
  local self = setmetatable({
    _parameters = {}, _param_order = {},
    _buffers = {}, _buffer_order = {}, _nonpersistent = {},
    _modules = {}, _module_order = {},
    training = true,
  }, cls)
  self:__init(...)
  return self
end

local METAMETHODS = {"__index", "__newindex", "__call", "__tostring", "__len", "__pairs"}

-- Module:extend(name): a subclass. Instances are made by calling the class: MyNet(...) runs
-- MyNet.__init(self, ...) on a fresh module (the base part is already set up: no super call
-- needed). The parent class is cls.super, so a subclass of a layer calls
-- st.nn.Linear.__init(self, ...) itself.
function Module.extend(parent, name)
  if type(name) ~= "string" then error("Module:extend: expected a class name", 2) end
  local cls = {__name = name, super = parent}
  for _, mm in ipairs(METAMETHODS) do cls[mm] = rawget(parent, mm) end
  return setmetatable(cls, {__index = parent, __call = construct})
end

Module.__name = "Module"
Module.__index = instance_index
Module.__newindex = instance_newindex
Module.__call = function(self, ...) return self:forward(...) end
Module.__len = function(self) return #rawget(self, "_module_order") end
setmetatable(Module, {__call = construct})

function Module.__init() end

function Module:forward()
  error(getmetatable(self).__name .. ": forward is not implemented", 2)
end

function Module:register_parameter(name, t)
  check_name(self, name, "register_parameter")
  if t == nil then return end
  if not st.is_tensor(t) then error("register_parameter: '" .. name .. "' is not a tensor", 2) end
  self._parameters[name] = as_parameter(t)
  table.insert(self._param_order, name)
end

-- register_buffer(name, t [, persistent = true]): state that is not trained (running statistics);
-- persistent buffers are in state_dict().
function Module:register_buffer(name, t, persistent)
  check_name(self, name, "register_buffer")
  if t == nil then return end
  if not st.is_tensor(t) then error("register_buffer: '" .. name .. "' is not a tensor", 2) end
  self._buffers[name] = t
  table.insert(self._buffer_order, name)
  if persistent == false then self._nonpersistent[name] = true end
end

function Module:add_module(name, m)
  check_name(self, name, "add_module")
  if not is_module(m) then error("add_module: '" .. name .. "' is not a module", 2) end
  self._modules[name] = m
  table.insert(self._module_order, name)
end
Module.register_module = Module.add_module

-- Depth-first walk: fn(prefix, module) for self and every descendant, registration order.
local function walk(self, prefix, fn)
  fn(prefix, self)
  for _, name in ipairs(self._module_order) do
    walk(self._modules[name], prefix .. name .. ".", fn)
  end
end

-- Array of {name, tensor} of registry `reg` over the tree (one module when recurse is false);
-- shared tensors once (first name) when dedup.
local function collect(self, reg, order, recurse, dedup)
  local out, seen = {}, {}
  local function visit(prefix, m)
    for _, name in ipairs(m[order]) do
      local t = m[reg][name]
      if not (dedup and seen[t]) then
        seen[t] = true
        out[#out + 1] = {prefix .. name, t, m, name}
      end
    end
  end
  if recurse == false then visit("", self) else walk(self, "", visit) end
  return out
end

local function pairs_iter(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

-- parameters([recurse = true]): array of tensors, registration order, depth first, each tensor
-- once (shared parameters are listed under their first name).
function Module:parameters(recurse)
  local out = {}
  for i, e in ipairs(collect(self, "_parameters", "_param_order", recurse, true)) do out[i] = e[2] end
  return out
end

-- named_parameters([recurse = true]): an iterator of name, tensor in parameters() order:
--   for name, p in net:named_parameters() do ... end
function Module:named_parameters(recurse)
  return pairs_iter(collect(self, "_parameters", "_param_order", recurse, true))
end

function Module:buffers(recurse)
  local out = {}
  for i, e in ipairs(collect(self, "_buffers", "_buffer_order", recurse, true)) do out[i] = e[2] end
  return out
end

function Module:named_buffers(recurse)
  return pairs_iter(collect(self, "_buffers", "_buffer_order", recurse, true))
end

-- children(): array of the direct child modules; named_children(): iterator of name, module.
function Module:children()
  local out = {}
  for i, name in ipairs(self._module_order) do out[i] = self._modules[name] end
  return out
end

function Module:named_children()
  local list = {}
  for i, name in ipairs(self._module_order) do list[i] = {name, self._modules[name]} end
  return pairs_iter(list)
end

-- modules(): array of self and every descendant, depth first; named_modules(): iterator of
-- name, module ("" for self, then "fc1", "block.1", ...).
function Module:modules()
  local out = {}
  walk(self, "", function(_, m) out[#out + 1] = m end)
  return out
end

function Module:named_modules()
  local list = {}
  walk(self, "", function(prefix, m) list[#list + 1] = {prefix:sub(1, -2), m} end)
  return pairs_iter(list)
end

-- apply(fn): fn(m) for every descendant and then self (children first, as PyTorch); returns self.
function Module:apply(fn)
  for _, c in ipairs(self:children()) do c:apply(fn) end
  fn(self)
  return self
end

function Module:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  return n
end

-- train([on = true]) / eval(): set `training` on self and every descendant; return self.
function Module:train(on)
  if on == nil then on = true end
  for _, m in ipairs(self:modules()) do m.training = on and true or false end
  return self
end

function Module:eval() return self:train(false) end

-- zero_grad(): every parameter's .grad = nil (PyTorch's set_to_none).
function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do p.grad = nil end
end

-- A registered name as PyTorch writes it: the items of the list containers (Sequential,
-- ModuleList, ParameterList: "1", "2", ...; their classes set _index_names) count from 0 there.
local function torch_name(m, name)
  if getmetatable(m)._index_names and name:match("^%d+$") then return tostring(tonumber(name) - 1) end
  return name
end

-- Flat table name -> tensor (parameters, then persistent buffers, module by module depth first),
-- the array of its names in that order, and a table from each name to stitch's name for it. With
-- torch the names are PyTorch's (list items from 0), else stitch's. A tensor registered under
-- several names (tied weights) is under each, as in PyTorch.
local function state_entries(self, torch)
  local sd, keys, native = {}, {}, {}
  local function visit(m, prefix, sprefix)
    local function add(name, t)
      local k = prefix .. (torch and torch_name(m, name) or name)
      sd[k], native[k] = t, sprefix .. name
      keys[#keys + 1] = k
    end
    for _, name in ipairs(m._param_order) do add(name, m._parameters[name]) end
    for _, name in ipairs(m._buffer_order) do
      if not m._nonpersistent[name] then add(name, m._buffers[name]) end
    end
    for _, name in ipairs(m._module_order) do
      visit(m._modules[name], prefix .. (torch and torch_name(m, name) or name) .. ".", sprefix .. name .. ".")
    end
  end
  visit(self, "", "")
  return sd, keys, native
end

-- The naming option of state_dict / state_dict_keys ({to = "stitch" | "torch"}): true for torch.
local function torch_naming(opts, fname, key)
  opts = F._check_opts(opts, {key}, fname, 3)
  local v = opts[key]
  if v ~= nil and v ~= "stitch" and v ~= "torch" then
    error(fname .. ": " .. key .. " must be \"stitch\" or \"torch\", got " .. tostring(v), 3)
  end
  return v == "torch"
end

-- state_dict([{to = "stitch" | "torch"}]): flat table name -> tensor: parameters, then persistent
-- buffers, the live tensors (not copies). One result, so that st.save(path, net:state_dict())
-- works. to = "torch": PyTorch's names (Sequential/ModuleList/ParameterList items from 0), so
-- torch's load_state_dict reads the saved file as it is.
function Module:state_dict(opts)
  return (state_entries(self, torch_naming(opts, "state_dict", "to")))
end

-- state_dict_keys([{to}]): the state_dict() names in registration order (depth first).
function Module:state_dict_keys(opts)
  local _, keys = state_entries(self, torch_naming(opts, "state_dict_keys", "to"))
  return keys
end

local function quoted_list(list)
  local q = {}
  for i, k in ipairs(list) do q[i] = string.format("%q", k) end
  return table.concat(q, ", ")
end

-- load_state_dict(sd [, strict = true | {strict = true, from = "stitch" | "torch"}]): copies sd's
-- tensors into the parameters and buffers (in place, copy_ under no_grad, cast to their dtype: the
-- tensors an optimizer holds stay the same). from = "torch": sd has PyTorch's names (list items
-- from 0, e.g. a file torch's state_dict() was saved to). Strict: one error listing every missing
-- and unexpected key; a shape mismatch is always an error naming both shapes. Keys are named as
-- in sd. Returns the arrays of missing and unexpected keys.
function Module:load_state_dict(sd, opts)
  if type(sd) ~= "table" or st.is_tensor(sd) or is_module(sd) then
    error("load_state_dict: expected a table name -> tensor, got " .. (st.is_tensor(sd) and "a tensor"
      or is_module(sd) and "a module (pass m:state_dict())" or type(sd)), 2)
  end
  local strict, from = true, "stitch"
  if type(opts) == "boolean" then
    strict = opts
  elseif opts ~= nil then
    opts = F._check_opts(opts, {"strict", "from"}, "load_state_dict", 2)
    if opts.strict ~= nil then
      if type(opts.strict) ~= "boolean" then
        error("load_state_dict: strict must be a boolean, got " .. tostring(opts.strict), 2)
      end
      strict = opts.strict
    end
    from = opts.from or from
    if from ~= "stitch" and from ~= "torch" then
      error("load_state_dict: from must be \"stitch\" or \"torch\", got " .. tostring(from), 2)
    end
  end
  local own, keys, native = state_entries(self, from == "torch")
  local missing, unexpected, problems = {}, {}, {}
  for _, k in ipairs(keys) do
    local v = sd[k]
    if v == nil then
      missing[#missing + 1] = k
    elseif not st.is_tensor(v) then
      problems[#problems + 1] = string.format("%q is a %s, not a tensor", k, type(v))
    else
      local a, b = shape_str(v), shape_str(own[k])
      if a ~= b then
        local also = native[k] ~= k and string.format(" (the model's %q)", native[k]) or ""
        problems[#problems + 1] = string.format("shape mismatch for %q%s: the checkpoint has %s, the model %s",
          k, also, a, b)
      end
    end
  end
  for k in pairs(sd) do
    if own[k] == nil then unexpected[#unexpected + 1] = tostring(k) end
  end
  table.sort(unexpected)
  local msg = {}
  if strict and #missing > 0 then msg[#msg + 1] = "missing keys: " .. quoted_list(missing) end
  if strict and #unexpected > 0 then msg[#msg + 1] = "unexpected keys: " .. quoted_list(unexpected) end
  for _, p in ipairs(problems) do msg[#msg + 1] = p end
  if strict and #unexpected > 0 and from == "stitch" then
    -- a PyTorch state_dict loaded with stitch's names: say so
    local torch_own, hits = state_entries(self, true), 0
    for _, k in ipairs(unexpected) do
      if torch_own[k] ~= nil and own[k] == nil then hits = hits + 1 end
    end
    if hits > 0 then
      msg[#msg + 1] = "(PyTorch's names? its Sequential/ModuleList/ParameterList items count from 0: "
        .. "load_state_dict(sd, {from = \"torch\"}))"
    end
  end
  if #msg > 0 then
    error("load_state_dict(" .. getmetatable(self).__name .. "): " .. table.concat(msg, "; "), 2)
  end
  no_grad(function()
    for _, k in ipairs(keys) do
      local v = sd[k]
      if v ~= nil and v ~= own[k] then own[k]:copy_(v) end
    end
  end)
  return missing, unexpected
end

local FLOAT_DTYPES = {
  f32 = "f32", float = "f32", float32 = "f32", f64 = "f64", double = "f64", float64 = "f64",
  f16 = "f16", half = "f16", float16 = "f16", bf16 = "bf16", bfloat16 = "bf16",
}

-- Replaces every parameter and buffer t for which want(t) holds by convert(t) (a parameter: a
-- new leaf, requires_grad kept). A tensor registered in several places (tied weights) is converted
-- once and the one new tensor put in each place, so tied stays tied. Build the optimizer after
-- converting.
local function replace_all(self, want, convert)
  local done = {}   -- old tensor -> its replacement
  no_grad(function()
    for _, m in ipairs(self:modules()) do
      for _, name in ipairs(m._param_order) do
        local p = m._parameters[name]
        if done[p] == nil and want(p) then
          done[p] = as_parameter(convert(p.detach and p:detach() or p), p.requires_grad ~= false)
        end
        if done[p] ~= nil then m._parameters[name] = done[p] end
      end
      for _, name in ipairs(m._buffer_order) do
        local b = m._buffers[name]
        if done[b] == nil and want(b) then done[b] = convert(b) end
        if done[b] ~= nil then m._buffers[name] = done[b] end
      end
    end
  end)
  return self
end

-- Every float parameter and buffer cast to dtype.
local function cast_all(self, dtype)
  return replace_all(self, function(t) return t:dtype() ~= dtype and FLOAT_DTYPES[t:dtype()] end,
    function(t) return t:to(dtype) end)
end

-- Every parameter and buffer moved to device (those already there are kept).
local function move_all(self, device)
  return replace_all(self, function(t) return t:device() ~= device end, function(t) return t:to(device) end)
end

local function is_device(what)
  return what == "cpu" or what == "cuda" or what == "gpu" or (type(what) == "string" and what:match("^cuda:%d+$"))
end

-- to(device | dtype): a device ("cpu", "cuda", "cuda:N") moves the parameters and buffers; a float
-- dtype casts them (new tensors either way).
function Module:to(what)
  if is_device(what) then
    if what == "cuda" or what == "gpu" then what = "cuda:0" end
    return move_all(self, what)
  end
  local dt = type(what) == "string" and FLOAT_DTYPES[what]
  if dt then return cast_all(self, dt) end
  error("Module:to: unknown device or dtype '" .. tostring(what) .. "' (expected cpu, cuda, cuda:N or a float dtype)", 2)
end
function Module:cuda() return self:to("cuda") end
function Module:cpu() return self:to("cpu") end
function Module:float() return cast_all(self, "f32") end
function Module:double() return cast_all(self, "f64") end

-- extra_repr(): the text inside the parentheses of this module's line in __tostring.
function Module:extra_repr() return "" end

-- __tostring: PyTorch's tree, e.g.
--   Sequential(
--     (1): Linear(in_features=784, out_features=256, bias=true)
--     (2): ReLU()
--   )
function Module:__tostring()
  local name = getmetatable(self).__name
  local extra = self:extra_repr()
  local lines = {}
  for l in extra:gmatch("[^\n]+") do lines[#lines + 1] = l end
  local n_extra = #lines
  for _, cname in ipairs(self._module_order) do
    local s = tostring(self._modules[cname]):gsub("\n", "\n  ")
    lines[#lines + 1] = "(" .. cname .. "): " .. s
  end
  if #lines == 0 then return name .. "()" end
  if n_extra == 1 and #lines == 1 then return name .. "(" .. lines[1] .. ")" end
  return name .. "(\n  " .. table.concat(lines, "\n  ") .. "\n)"
end

-- ---- containers (nn_containers.lua) ----

st._lib("nn_containers")(M, {Module = Module, is_module = is_module, as_parameter = as_parameter,
  check_name = check_name, instance_index = instance_index, instance_newindex = instance_newindex,
  shape_str = shape_str})

-- ---- layers ----

local function opt_dtype(opts) return opts and opts.dtype or "f32" end

-- PyTorch's default init of a weight of shape wshape and (unless opts.bias == false) a bias of
-- nbias entries: both U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the weight drawn first (fan_in 0: 0).
local function uniform_weight_bias(self, wshape, nbias, fan_in, opts)
  local bound = fan_in > 0 and 1 / math.sqrt(fan_in) or 0
  local dt = opt_dtype(opts)
  self:register_parameter("weight", init.uniform(wshape, -bound, bound, dt))
  if opts.bias ~= false then self:register_parameter("bias", init.uniform({nbias}, -bound, bound, dt)) end
end
local check_opts = F._check_opts   -- unknown option names are errors (nothing silently ignored)

-- A layer's size argument: an integer >= min, or an error naming the layer and the argument.
local function check_size(v, what, cls, min)
  if math.type(v) ~= "integer" or v < (min or 0) then
    error(string.format("%s: %s must be an integer >= %d, got %s", cls, what, min or 0, tostring(v)), 4)
  end
  return v
end

local Identity = Module:extend("Identity")
M.Identity = Identity
function Identity.forward(_, x) return x end

-- Linear(in_features, out_features, {bias = true, dtype = "f32"}): y = x W^T + b, W (out, in);
-- W and b ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's kaiming_uniform with a = sqrt(5)).
local Linear = Module:extend("Linear")
M.Linear = Linear
function Linear:__init(in_features, out_features, opts)
  opts = check_opts(opts, {"bias", "dtype"}, "Linear", 3)
  check_size(in_features, "in_features", "Linear")
  check_size(out_features, "out_features", "Linear")
  self.in_features, self.out_features = in_features, out_features
  uniform_weight_bias(self, {out_features, in_features}, out_features, in_features, opts)
end
function Linear:forward(x) return F.linear(x, self.weight, self.bias) end
function Linear:extra_repr()
  return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features,
    self.out_features, tostring(self.bias ~= nil))
end

-- Embedding(num_embeddings, embedding_dim, {dtype, padding_idx}): weight ~ N(0, 1), the
-- padding_idx row (1-based; negative counts from the end) zero and never updated by a lookup's
-- gradient (PyTorch's padding_idx); forward(idx) with 1-based indices (a tensor of any shape, or a
-- Lua table).
local Embedding = Module:extend("Embedding")
M.Embedding = Embedding
function Embedding:__init(n, d, opts)
  opts = check_opts(opts, {"dtype", "padding_idx"}, "Embedding", 3)
  check_size(n, "num_embeddings", "Embedding")
  check_size(d, "embedding_dim", "Embedding")
  self.num_embeddings, self.embedding_dim = n, d
  local pad = opts.padding_idx
  if pad ~= nil then
    if math.type(pad) ~= "integer" or pad == 0 or pad > n or pad < -n then
      error("Embedding: padding_idx must be an integer in 1.." .. n .. " (or -" .. n .. "..-1), got "
        .. tostring(pad), 3)
    end
    if pad < 0 then pad = n + 1 + pad end
    self.padding_idx = pad
  end
  local wt = init.normal({n, d}, 0, 1, opt_dtype(opts))
  if pad then
    local keep = st.arange(1, n + 1):ne(pad):to(wt:dtype()):unsqueeze(2)
    wt = st.sync(wt * keep)
  end
  self:register_parameter("weight", wt)
end
function Embedding:forward(idx)
  return F.embedding(idx, self.weight, self.padding_idx and {padding_idx = self.padding_idx} or nil)
end
function Embedding:extra_repr()
  return self.num_embeddings .. ", " .. self.embedding_dim
    .. (self.padding_idx and ", padding_idx=" .. self.padding_idx or "")
end

local function shape_arg(s)
  if type(s) == "number" then return {s} end
  local c = {}
  for i, v in ipairs(s) do c[i] = v end
  return c
end

-- LayerNorm(normalized_shape, {eps = 1e-5, elementwise_affine = true, bias = true, dtype})
local LayerNorm = Module:extend("LayerNorm")
M.LayerNorm = LayerNorm
function LayerNorm:__init(shape, opts)
  opts = check_opts(opts, {"eps", "elementwise_affine", "bias", "dtype"}, "LayerNorm", 3)
  self.normalized_shape = shape_arg(shape)
  self.eps = opts.eps or 1e-5
  self.elementwise_affine = opts.elementwise_affine ~= false
  if self.elementwise_affine then
    self:register_parameter("weight", st.ones(self.normalized_shape, opt_dtype(opts)))
    if opts.bias ~= false then
      self:register_parameter("bias", st.zeros(self.normalized_shape, opt_dtype(opts)))
    end
  end
end
function LayerNorm:forward(x)
  return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
end
function LayerNorm:extra_repr()
  return string.format("(%s), eps=%g, elementwise_affine=%s", table.concat(self.normalized_shape, ", "),
    self.eps, tostring(self.elementwise_affine))
end

-- RMSNorm(normalized_shape, {eps = machine epsilon of the input, elementwise_affine = true, dtype})
local RMSNorm = Module:extend("RMSNorm")
M.RMSNorm = RMSNorm
function RMSNorm:__init(shape, opts)
  opts = check_opts(opts, {"eps", "elementwise_affine", "dtype"}, "RMSNorm", 3)
  self.normalized_shape = shape_arg(shape)
  self.eps = opts.eps
  self.elementwise_affine = opts.elementwise_affine ~= false
  if self.elementwise_affine then
    self:register_parameter("weight", st.ones(self.normalized_shape, opt_dtype(opts)))
  end
end
function RMSNorm:forward(x) return F.rms_norm(x, self.normalized_shape, self.weight, self.eps) end
function RMSNorm:extra_repr()
  return string.format("(%s), eps=%s, elementwise_affine=%s", table.concat(self.normalized_shape, ", "),
    self.eps and string.format("%g", self.eps) or "nil", tostring(self.elementwise_affine))
end

-- BatchNorm1d/2d(num_features, {eps = 1e-5, momentum = 0.1 (false: the cumulative average),
-- affine = true, track_running_stats = true, dtype}): batch statistics in training mode (running_mean and
-- running_var updated, num_batches_tracked counted), the running ones in eval mode; the input
-- (N, C) or (N, C, L) for 1d, (N, C, H, W) for 2d.
local function batch_norm_class(name, dims)
  local cls = Module:extend(name)
  function cls:__init(c, opts)
    opts = check_opts(opts, {"eps", "momentum", "affine", "track_running_stats", "dtype"}, name, 3)
    check_size(c, "num_features", name, 1)
    self.num_features = c
    -- momentum = false: PyTorch's momentum=None, the cumulative average (factor 1 / batches seen)
    local m = opts.momentum
    if m == nil then m = 0.1 end
    if m ~= false and (type(m) ~= "number" or m ~= m) then
      error(name .. ": momentum must be a number or false (the cumulative average), got " .. tostring(m), 3)
    end
    self.momentum = m
    self.eps = opts.eps or 1e-5
    local dt = opt_dtype(opts)
    if opts.affine ~= false then
      self:register_parameter("weight", st.ones({c}, dt))
      self:register_parameter("bias", st.zeros({c}, dt))
    end
    self.track_running_stats = opts.track_running_stats ~= false
    if self.track_running_stats then
      self:register_buffer("running_mean", st.sync(st.zeros({c}, dt)))
      self:register_buffer("running_var", st.sync(st.ones({c}, dt)))
      self:register_buffer("num_batches_tracked", st.sync(st.zeros({}, "i64")))
    end
  end
  function cls:forward(x)
    local ok = false
    for _, d in ipairs(dims) do ok = ok or x:dim() == d end
    if not ok then
      error(name .. ": expected input of " .. table.concat(dims, " or ") .. " dims, got " .. shape_str(x), 2)
    end
    local training = self.training or not self.track_running_stats
    if self.training and self.track_running_stats then
      local guard <close> = st.no_grad()
      self.num_batches_tracked:add_(1)
    end
    local momentum = self.momentum
    if momentum == false then
      -- the cumulative average: a 0-d tensor, so the count stays on the device and nothing syncs
      momentum = self.track_running_stats and (1 / self.num_batches_tracked:to(self.running_mean:dtype())) or 0
    end
    return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
      {training = training, momentum = momentum, eps = self.eps})
  end
  function cls:extra_repr()
    return string.format("%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s", self.num_features,
      self.eps, self.momentum == false and "None" or string.format("%g", self.momentum),
      tostring(self.weight ~= nil), tostring(self.track_running_stats))
  end
  M[name] = cls
end
batch_norm_class("BatchNorm1d", {2, 3})
batch_norm_class("BatchNorm2d", {4})

-- GroupNorm(num_groups, num_channels, {eps = 1e-5, affine = true, dtype})
local GroupNorm = Module:extend("GroupNorm")
M.GroupNorm = GroupNorm
function GroupNorm:__init(g, c, opts)
  opts = check_opts(opts, {"eps", "affine", "dtype"}, "GroupNorm", 3)
  check_size(g, "num_groups", "GroupNorm", 1)
  check_size(c, "num_channels", "GroupNorm", 1)
  if c % g ~= 0 then error("GroupNorm: num_groups (" .. g .. ") must divide num_channels (" .. c .. ")", 3) end
  self.num_groups, self.num_channels, self.eps = g, c, opts.eps or 1e-5
  if opts.affine ~= false then
    self:register_parameter("weight", st.ones({c}, opt_dtype(opts)))
    self:register_parameter("bias", st.zeros({c}, opt_dtype(opts)))
  end
end
function GroupNorm:forward(x) return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps) end
function GroupNorm:extra_repr()
  return string.format("%d, %d, eps=%g, affine=%s", self.num_groups, self.num_channels, self.eps,
    tostring(self.weight ~= nil))
end

-- InstanceNorm1d/2d(num_features, {eps = 1e-5, affine = false, dtype}): per sample and channel;
-- no running statistics (track_running_stats = true is refused).
local function instance_norm_class(name, dims)
  local cls = Module:extend(name)
  function cls:__init(c, opts)
    opts = check_opts(opts, {"eps", "affine", "track_running_stats", "dtype"}, name, 3)
    check_size(c, "num_features", name, 1)
    if opts.track_running_stats then error(name .. ": track_running_stats = true is not supported", 3) end
    self.num_features, self.eps = c, opts.eps or 1e-5
    if opts.affine then
      self:register_parameter("weight", st.ones({c}, opt_dtype(opts)))
      self:register_parameter("bias", st.zeros({c}, opt_dtype(opts)))
    end
  end
  function cls:forward(x)
    if x:dim() ~= dims then error(name .. ": expected input of " .. dims .. " dims, got " .. shape_str(x), 2) end
    return F.instance_norm(x, self.weight, self.bias, self.eps)
  end
  function cls:extra_repr()
    return string.format("%d, eps=%g, affine=%s", self.num_features, self.eps, tostring(self.weight ~= nil))
  end
  M[name] = cls
end
instance_norm_class("InstanceNorm1d", 3)
instance_norm_class("InstanceNorm2d", 4)

-- Dropout(p = 0.5): F.dropout in training mode, identity in eval mode.
local Dropout = Module:extend("Dropout")
M.Dropout = Dropout
function Dropout:__init(p)
  p = p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then error("Dropout: p must be in [0, 1], got " .. tostring(p), 3) end
  self.p = p
end
function Dropout:forward(x) return F.dropout(x, self.p, self.training) end
function Dropout:extra_repr() return string.format("p=%g", self.p) end

-- Parameterless activations: Name() calling F.name.
local function activation(name, fn)
  local cls = Module:extend(name)
  function cls.forward(_, x) return fn(x) end
  M[name] = cls
  return cls
end
activation("ReLU", F.relu)
activation("SiLU", F.silu)
activation("Tanh", F.tanh)
activation("Sigmoid", F.sigmoid)

activation("Mish", F.mish)
activation("Hardswish", F.hardswish)
activation("Hardsigmoid", F.hardsigmoid)

-- Activations with one or two numbers: Name(a [, b]) calling F.name(x, a, b); the numbers are
-- checked when the layer is made.
local function activation_with(name, fn, fields, defaults)
  local cls = Module:extend(name)
  function cls:__init(a, b, extra)
    if extra ~= nil then error(name .. ": unexpected argument #3 (" .. tostring(extra) .. ")", 3) end
    self[fields[1]] = a == nil and defaults[1] or a
    if fields[2] then
      self[fields[2]] = b == nil and defaults[2] or b
    elseif b ~= nil then
      error(name .. ": unexpected argument #2 (" .. tostring(b) .. ")", 3)
    end
    fn(st.zeros(1), self[fields[1]], fields[2] and self[fields[2]] or nil)   -- checks the numbers
  end
  function cls:forward(x) return fn(x, self[fields[1]], fields[2] and self[fields[2]] or nil) end
  function cls:extra_repr()
    local s = string.format("%s=%g", fields[1], self[fields[1]])
    if fields[2] then s = s .. string.format(", %s=%g", fields[2], self[fields[2]]) end
    return s
  end
  M[name] = cls
end
activation_with("LeakyReLU", F.leaky_relu, {"negative_slope"}, {0.01})
activation_with("ELU", F.elu, {"alpha"}, {1})
activation_with("Softplus", F.softplus, {"beta", "threshold"}, {1, 20})

-- PReLU({num_parameters = 1, init = 0.25, dtype}): a learnt slope for x < 0, one or one per channel.
local PReLU = Module:extend("PReLU")
M.PReLU = PReLU
function PReLU:__init(opts)
  opts = check_opts(opts, {"num_parameters", "init", "dtype"}, "PReLU", 3)
  local n = opts.num_parameters or 1
  check_size(n, "num_parameters", "PReLU", 1)
  local init_v = opts.init or 0.25
  if type(init_v) ~= "number" then error("PReLU: init must be a number, got " .. tostring(init_v), 3) end
  self:register_parameter("weight", st.full({n}, init_v, opt_dtype(opts)))
end
function PReLU:forward(x) return F.prelu(x, self.weight) end
function PReLU:extra_repr() return "num_parameters=" .. self.weight:numel() end

-- GELU({approximate = "none" | "tanh"})
local GELU = Module:extend("GELU")
M.GELU = GELU
function GELU:__init(opts)
  if type(opts) == "string" then opts = {approximate = opts} end
  opts = check_opts(opts, {"approximate"}, "GELU", 3)
  self.approximate = opts and opts.approximate or "none"
  if self.approximate ~= "none" and self.approximate ~= "tanh" then
    error("GELU: approximate must be \"none\" or \"tanh\"", 3)
  end
end
function GELU:forward(x) return F.gelu(x, {approximate = self.approximate}) end
function GELU:extra_repr()
  return self.approximate == "none" and "" or "approximate=" .. self.approximate
end

-- Softmax(dim = -1), LogSoftmax(dim = -1)
local function with_dim(name, fn)
  local cls = Module:extend(name)
  function cls:__init(dim)
    if dim ~= nil and math.type(dim) ~= "integer" then
      error(string.format("%s: dim must be an integer, got %s", name, type(dim) == "table" and "a table" or tostring(dim)), 3)
    end
    self.dim = dim or -1
  end
  function cls:forward(x) return fn(x, self.dim) end
  function cls:extra_repr() return "dim=" .. self.dim end
  M[name] = cls
end
with_dim("Softmax", F.softmax)
with_dim("LogSoftmax", F.log_softmax)

-- Flatten(start_dim = 2, end_dim = -1): keeps the batch dim.
local Flatten = Module:extend("Flatten")
M.Flatten = Flatten
function Flatten:__init(start_dim, end_dim)
  for _, d in ipairs({{start_dim, "start_dim"}, {end_dim, "end_dim"}}) do
    if d[1] ~= nil and math.type(d[1]) ~= "integer" then
      error(string.format("Flatten: %s must be an integer, got %s", d[2], type(d[1]) == "table" and "a table" or tostring(d[1])), 3)
    end
  end
  self.start_dim, self.end_dim = start_dim or 2, end_dim or -1
end
function Flatten:forward(x) return x:flatten(self.start_dim, self.end_dim) end
function Flatten:extra_repr() return "start_dim=" .. self.start_dim .. ", end_dim=" .. self.end_dim end

-- A spatial option as an (h, w) pair of integers >= min: a number, or a table of exactly two
-- numbers; anything else is an error naming it (a third entry is not dropped).
local function int_pair(v, what, cls, min)
  local p, entries = nil, 0
  local plain = type(v) == "table" and not st.is_tensor(v)
  if plain then for _ in pairs(v) do entries = entries + 1 end end
  if type(v) == "number" then p = {v, v}
  elseif plain and entries == 2 and v[1] ~= nil and v[2] ~= nil then p = {v[1], v[2]} end
  if not p or math.type(p[1]) ~= "integer" or math.type(p[2]) ~= "integer" or p[1] < min or p[2] < min then
    local got = st.is_tensor(v) and "a tensor" or tostring(v)
    if p and plain then got = "{" .. tostring(v[1]) .. ", " .. tostring(v[2]) .. "}"
    elseif plain then got = "a table of " .. entries .. " entries" end
    error(string.format("%s: %s must be an integer >= %d or a pair of them, got %s", cls, what, min, got), 4)
  end
  return p
end

-- A 1-D layer's spatial option: a number or {a}, an integer >= min.
local function one(v, what, cls, min)
  local got = v
  if type(v) == "table" and not st.is_tensor(v) then
    local entries = 0
    for _ in pairs(v) do entries = entries + 1 end
    got = "a table of " .. entries .. " entries"
    if entries == 1 and v[1] ~= nil then v, got = v[1], v[1] end
  end
  if math.type(v) ~= "integer" or v < min then
    error(string.format("%s: %s must be an integer >= %d, got %s", cls, what, min, tostring(got)), 4)
  end
  return v
end

-- A convolution's groups: an integer >= 1 dividing both channel counts.
local function check_groups(groups, cin, cout, cls)
  if math.type(groups) ~= "integer" or groups < 1 or cin % groups ~= 0 or cout % groups ~= 0 then
    error(string.format("%s: groups must be an integer >= 1 dividing in_channels (%d) and out_channels (%d), got %s",
      cls, cin, cout, tostring(groups)), 4)
  end
  return groups
end

-- Conv2d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0 | "same" | "valid",
-- dilation = 1, groups = 1, bias = true, dtype}): weight (out, in / groups, kh, kw) and bias ~
-- U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in / groups * kh * kw.
local Conv2d = Module:extend("Conv2d")
M.Conv2d = Conv2d
function Conv2d:__init(cin, cout, kernel, opts)
  opts = check_opts(opts, {"stride", "padding", "dilation", "groups", "bias", "dtype"}, "Conv2d", 3)
  check_size(cin, "in_channels", "Conv2d", 1)
  check_size(cout, "out_channels", "Conv2d", 1)
  self.in_channels, self.out_channels = cin, cout
  self.kernel_size = int_pair(kernel, "kernel_size", "Conv2d", 1)
  self.stride = int_pair(opts.stride or 1, "stride", "Conv2d", 1)
  local p = opts.padding or 0
  if p == "same" or p == "valid" then self.padding = p
  elseif type(p) == "string" then
    error("Conv2d: padding must be a number, a pair, \"same\" or \"valid\", got \"" .. p .. "\"", 3)
  else self.padding = int_pair(p, "padding", "Conv2d", 0) end
  if p == "same" and (self.stride[1] ~= 1 or self.stride[2] ~= 1) then
    error(string.format("Conv2d: padding \"same\" needs stride 1, got stride (%d, %d)", self.stride[1], self.stride[2]), 3)
  end
  self.dilation = int_pair(opts.dilation or 1, "dilation", "Conv2d", 1)
  self.groups = check_groups(opts.groups or 1, cin, cout, "Conv2d")
  local kh, kw = self.kernel_size[1], self.kernel_size[2]
  uniform_weight_bias(self, {cout, cin // self.groups, kh, kw}, cout, cin // self.groups * kh * kw, opts)
end
function Conv2d:forward(x)
  return F.conv2d(x, self.weight, self.bias, {stride = self.stride, padding = self.padding,
    dilation = self.dilation, groups = self.groups})
end
function Conv2d:extra_repr()
  local s = string.format("%d, %d, kernel_size=(%d, %d), stride=(%d, %d)", self.in_channels,
    self.out_channels, self.kernel_size[1], self.kernel_size[2], self.stride[1], self.stride[2])
  if type(self.padding) == "string" then
    s = s .. ", padding=" .. self.padding
  elseif self.padding[1] ~= 0 or self.padding[2] ~= 0 then
    s = s .. string.format(", padding=(%d, %d)", self.padding[1], self.padding[2])
  end
  if self.dilation[1] ~= 1 or self.dilation[2] ~= 1 then
    s = s .. string.format(", dilation=(%d, %d)", self.dilation[1], self.dilation[2])
  end
  if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
  if self.bias == nil then s = s .. ", bias=false" end
  return s
end

-- Conv1d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0 | "same" | "valid",
-- dilation = 1, groups = 1, bias = true, dtype}): weight (out, in / groups, k) and bias ~
-- U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in / groups * k (PyTorch's). F.conv1d.
local Conv1d = Module:extend("Conv1d")
M.Conv1d = Conv1d
function Conv1d:__init(cin, cout, kernel, opts)
  opts = check_opts(opts, {"stride", "padding", "dilation", "groups", "bias", "dtype"}, "Conv1d", 3)
  check_size(cin, "in_channels", "Conv1d", 1)
  check_size(cout, "out_channels", "Conv1d", 1)
  self.in_channels, self.out_channels = cin, cout
  self.kernel_size = one(kernel, "kernel_size", "Conv1d", 1)
  self.stride = one(opts.stride or 1, "stride", "Conv1d", 1)
  local p = opts.padding or 0
  if p == "same" or p == "valid" then self.padding = p
  elseif type(p) == "string" then error("Conv1d: padding must be a number, \"same\" or \"valid\", got \"" .. p .. "\"", 3)
  else self.padding = one(p, "padding", "Conv1d", 0) end
  if p == "same" and self.stride ~= 1 then
    error("Conv1d: padding \"same\" needs stride 1, got stride " .. self.stride, 3)
  end
  self.dilation = one(opts.dilation or 1, "dilation", "Conv1d", 1)
  self.groups = check_groups(opts.groups or 1, cin, cout, "Conv1d")
  uniform_weight_bias(self, {cout, cin // self.groups, self.kernel_size}, cout, cin // self.groups * self.kernel_size,
    opts)
end
function Conv1d:forward(x)
  return F.conv1d(x, self.weight, self.bias, {stride = self.stride, padding = self.padding,
    dilation = self.dilation, groups = self.groups})
end
function Conv1d:extra_repr()
  local s = string.format("%d, %d, kernel_size=(%d,), stride=(%d,)", self.in_channels, self.out_channels,
    self.kernel_size, self.stride)
  if type(self.padding) == "string" then s = s .. ", padding=" .. self.padding
  elseif self.padding ~= 0 then s = s .. string.format(", padding=(%d,)", self.padding) end
  if self.dilation ~= 1 then s = s .. string.format(", dilation=(%d,)", self.dilation) end
  if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
  if self.bias == nil then s = s .. ", bias=false" end
  return s
end

-- ConvTranspose2d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0,
-- output_padding = 0, groups = 1, dilation = 1, bias = true, dtype}): weight (in, out / groups, kh,
-- kw) (PyTorch's layout) and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = out / groups * kh
-- * kw (PyTorch's, from the weight's dim 2). output_padding must be smaller than the stride or the
-- dilation. F.conv_transpose2d.
local ConvTranspose2d = Module:extend("ConvTranspose2d")
M.ConvTranspose2d = ConvTranspose2d
function ConvTranspose2d:__init(cin, cout, kernel, opts)
  local cls = "ConvTranspose2d"
  opts = check_opts(opts, {"stride", "padding", "output_padding", "groups", "dilation", "bias", "dtype"}, cls, 3)
  check_size(cin, "in_channels", cls, 1)
  check_size(cout, "out_channels", cls, 1)
  self.in_channels, self.out_channels = cin, cout
  local function ints(v, what, min) return int_pair(v, what, cls, min) end
  self.kernel_size = ints(kernel, "kernel_size", 1)
  self.stride = ints(opts.stride or 1, "stride", 1)
  self.padding = ints(opts.padding or 0, "padding", 0)
  self.output_padding = ints(opts.output_padding or 0, "output_padding", 0)
  self.dilation = ints(opts.dilation or 1, "dilation", 1)
  for i = 1, 2 do
    if self.output_padding[i] >= self.stride[i] and self.output_padding[i] >= self.dilation[i] then
      error(string.format("%s: output_padding (%d, %d) must be smaller than either the stride (%d, %d) or the "
        .. "dilation (%d, %d)", cls, self.output_padding[1], self.output_padding[2], self.stride[1], self.stride[2],
        self.dilation[1], self.dilation[2]), 3)
    end
  end
  self.groups = check_groups(opts.groups or 1, cin, cout, cls)
  local kh, kw = self.kernel_size[1], self.kernel_size[2]
  uniform_weight_bias(self, {cin, cout // self.groups, kh, kw}, cout, cout // self.groups * kh * kw, opts)
end
function ConvTranspose2d:forward(x)
  return F.conv_transpose2d(x, self.weight, self.bias, {stride = self.stride, padding = self.padding,
    output_padding = self.output_padding, groups = self.groups, dilation = self.dilation})
end
function ConvTranspose2d:extra_repr()
  local function p(v) return string.format("(%d, %d)", v[1], v[2]) end
  local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
    p(self.kernel_size), p(self.stride))
  if self.padding[1] ~= 0 or self.padding[2] ~= 0 then s = s .. ", padding=" .. p(self.padding) end
  if self.output_padding[1] ~= 0 or self.output_padding[2] ~= 0 then
    s = s .. ", output_padding=" .. p(self.output_padding)
  end
  if self.dilation[1] ~= 1 or self.dilation[2] ~= 1 then s = s .. ", dilation=" .. p(self.dilation) end
  if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
  if self.bias == nil then s = s .. ", bias=false" end
  return s
end

-- Upsample({size | scale_factor, mode = "nearest" | "linear" | "bilinear" | "bicubic" | "area", align_corners}):
-- F.interpolate with these options (checked here).
local Upsample = Module:extend("Upsample")
M.Upsample = Upsample
function Upsample:__init(opts)
  self.opts = F._interp_opts(opts, "Upsample", 3)
end
function Upsample:forward(x) return F.interpolate(x, self.opts) end
function Upsample:extra_repr()
  local function f(v)
    if type(v) == "table" then
      local l = {}
      for i, e in ipairs(v) do l[i] = tostring(e) end
      return "(" .. table.concat(l, ", ") .. ")"
    end
    return tostring(v)
  end
  local o = self.opts
  local s = o.size and "size=" .. f(o.size) or "scale_factor=" .. f(o.scale_factor)
  s = s .. ", mode=" .. o.mode
  if o.align_corners ~= nil then s = s .. ", align_corners=" .. tostring(o.align_corners) end
  return s
end

-- MaxPool2d(kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false}), AvgPool2d likewise
-- plus count_include_pad = true. The options are checked here and passed on whole.
local function pool(name, fn, known, nd)
  local cls = Module:extend(name)
  function cls:__init(kernel, opts)
    opts = check_opts(opts, known, name, 3)
    self.kernel_size, self.stride, self.padding = kernel, opts.stride or kernel, opts.padding or 0
    -- the values checked now, not at the first forward (the functional form checks them again)
    for _, c in ipairs({{kernel, "kernel_size", 1}, {self.stride, "stride", 1}, {self.padding, "padding", 0}}) do
      if nd == 1 then one(c[1], c[2], name, c[3]) else int_pair(c[1], c[2], name, c[3]) end
    end
    for _, b in ipairs({"ceil_mode", "count_include_pad"}) do
      if opts[b] ~= nil and type(opts[b]) ~= "boolean" then
        error(string.format("%s: %s must be a boolean, got %s", name, b, tostring(opts[b])), 3)
      end
    end
    self.opts = {stride = self.stride, padding = self.padding}
    for _, k in ipairs(known) do
      if k ~= "stride" and k ~= "padding" then self.opts[k] = opts[k] end
    end
  end
  function cls:forward(x) return fn(x, self.kernel_size, self.opts) end
  function cls:extra_repr()
    local function f(v) return type(v) == "number" and tostring(v) or "(" .. table.concat(v, ", ") .. ")" end
    local s = string.format("kernel_size=%s, stride=%s, padding=%s", f(self.kernel_size), f(self.stride),
      f(self.padding))
    if self.opts.ceil_mode then s = s .. ", ceil_mode=true" end
    if self.opts.count_include_pad == false then s = s .. ", count_include_pad=false" end
    return s
  end
  M[name] = cls
end
pool("MaxPool2d", F.max_pool2d, {"stride", "padding", "ceil_mode"}, 2)
pool("AvgPool2d", F.avg_pool2d, {"stride", "padding", "ceil_mode", "count_include_pad"}, 2)
pool("MaxPool1d", F.max_pool1d, {"stride", "padding", "ceil_mode"}, 1)
pool("AvgPool1d", F.avg_pool1d, {"stride", "padding", "ceil_mode", "count_include_pad"}, 1)

-- AdaptiveAvgPool2d(output_size): F.adaptive_avg_pool2d (a number or a pair; 1: the global average);
-- AdaptiveAvgPool1d(output_size): F.adaptive_avg_pool1d (a number or {O}).
local function adaptive_pool(name, fn)
  local cls = Module:extend(name)
  function cls:__init(output_size)
    if output_size == nil then error(name .. ": output_size is required", 3) end
    self.output_size = output_size
  end
  function cls:forward(x) return fn(x, self.output_size) end
  function cls:extra_repr()
    local v = self.output_size
    return "output_size=" .. (type(v) == "table" and "(" .. table.concat(v, ", ") .. ")" or tostring(v))
  end
  M[name] = cls
end
adaptive_pool("AdaptiveAvgPool2d", F.adaptive_avg_pool2d)
adaptive_pool("AdaptiveAvgPool1d", F.adaptive_avg_pool1d)

-- ---- sequence layers (nn_seq.lua): MultiheadAttention, TransformerEncoderLayer, LSTM, GRU ----

st._lib("nn_seq")(M, {Module = Module, F = F, init = init, check_opts = check_opts, check_size = check_size,
  opt_dtype = opt_dtype, shape_str = shape_str})

-- ---- utilities ----
M.utils = {}

-- clip_grad_norm_(parameters, max_norm, {norm_type = 2}): scales every gradient in place so that
-- their joint norm is at most max_norm; returns that norm before clipping (a 0-d tensor: lazy, so
-- it fuses with the optimizer step's flush), computed in f64 when a gradient is f64, else in f32.
-- norm_type a number > 0 or math.huge.
function M.utils.clip_grad_norm_(params, max_norm, opts)
  opts = check_opts(opts, {"norm_type"}, "clip_grad_norm_", 2)
  if type(max_norm) ~= "number" or max_norm < 0 then
    error("clip_grad_norm_: max_norm must be a number >= 0, got " .. tostring(max_norm), 2)
  end
  local p = opts.norm_type or 2
  if type(p) ~= "number" or not (p > 0) then
    error("clip_grad_norm_: norm_type must be a number > 0 or math.huge, got " .. tostring(p), 2)
  end
  if st.is_tensor(params) then params = {params} end
  local guard <close> = st.no_grad()
  local grads = {}
  for _, t in ipairs(params) do
    if t.grad then grads[#grads + 1] = t.grad end
  end
  if #grads == 0 then return st.zeros({}) end
  local dt = "f32"
  for _, g in ipairs(grads) do if g:dtype() == "f64" then dt = "f64" end end
  local total
  for _, g in ipairs(grads) do
    local a = g:to(dt)
    local part
    if p == 2 then part = (a * a):sum()
    elseif p == 1 then part = a:abs():sum()
    elseif p == math.huge then part = a:abs():max()
    else part = a:abs():pow(p):sum() end
    total = total and (p == math.huge and st.maximum(total, part) or total + part) or part
  end
  if p == 2 then total = total:sqrt() elseif p ~= 1 and p ~= math.huge then total = total:pow(1 / p) end
  local coef = (total + 1e-6):reciprocal() * max_norm
  coef = coef:clamp(nil, 1)
  for _, g in ipairs(grads) do g:mul_(coef:to(g:dtype())) end
  return total
end

-- ---- loss modules: Name(opts) called as loss(input, target) ----

local function loss_module(name, fn, keys)
  local cls = Module:extend(name)
  function cls:__init(opts)
    opts = check_opts(opts, keys, name, 3)
    self.opts = {}
    for _, k in ipairs(keys) do self.opts[k] = opts[k] end
    self.reduction = opts.reduction or "mean"
  end
  function cls:forward(input, target) return fn(input, target, self.opts) end
  function cls:extra_repr()
    return self.reduction == "mean" and "" or "reduction=" .. self.reduction
  end
  M[name] = cls
end
loss_module("CrossEntropyLoss", F.cross_entropy, {"weight", "reduction", "label_smoothing", "ignore_index"})
loss_module("NLLLoss", F.nll_loss, {"weight", "reduction", "ignore_index"})
loss_module("MSELoss", F.mse_loss, {"reduction"})
loss_module("L1Loss", F.l1_loss, {"reduction"})
loss_module("BCEWithLogitsLoss", F.binary_cross_entropy_with_logits, {"weight", "pos_weight", "reduction"})
loss_module("BCELoss", F.binary_cross_entropy, {"weight", "reduction"})
loss_module("SmoothL1Loss", F.smooth_l1_loss, {"reduction", "beta"})
loss_module("HuberLoss", F.huber_loss, {"reduction", "delta"})
loss_module("KLDivLoss", F.kl_div, {"reduction", "log_target"})

return M
