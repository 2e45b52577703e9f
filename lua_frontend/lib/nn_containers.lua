-- nn_containers.lua — st.nn's containers: Sequential, ModuleList, ModuleDict, ParameterList,
-- ParameterDict. nn.lua calls the returned install(M, I) with its module table and the Module
-- internals it shares (I: Module, is_module, as_parameter, check_name, instance_index,
-- instance_newindex, shape_str).
--
-- The containers keep their items in the ordinary registries (children in _modules/_module_order,
-- parameters in _parameters/_param_order), so parameters(), state_dict(), to() and load_state_dict()
-- see them like any other module's. Invariant: a list's items are registered under the names "1",
-- "2", ..., "n" in that order (1-based, like the rest of the Lua API; state_dict({to = "torch"})
-- counts them from 0); a dict's under its keys, in insertion order. Lists index by position
-- (negative from the end; out of range reads nil, as a Lua table, so ipairs works); dicts by string
-- key. Writing a bad key or a value of the wrong kind is an error naming it.
local st = ...

local function install(M, I)
  local Module, is_module, as_parameter = I.Module, I.is_module, I.as_parameter
  local check_name, instance_index, instance_newindex = I.check_name, I.instance_index, I.instance_newindex
  local shape_str = I.shape_str

  local function describe(v)
    if st.is_tensor(v) then return "a tensor " .. shape_str(v) end
    if is_module(v) then return "a module (" .. getmetatable(v).__name .. ")" end
    return "a " .. type(v) .. " (" .. tostring(v) .. ")"
  end

  -- A list's position k (an integer; negative counts from the end) as 1..n, or nil out of range.
  local function position(k, n)
    if math.type(k) ~= "integer" then return nil end
    if k < 0 then k = n + k + 1 end
    if k >= 1 and k <= n then return k end
    return nil
  end

  -- An ordered iterator over the names of order and their values in reg.
  local function ordered_pairs(order, reg)
    local names, i = {table.unpack(order)}, 0
    return function()
      i = i + 1
      local name = names[i]
      if name ~= nil then return name, reg[name] end
    end
  end

  -- ---- lists of modules ----

  -- seq[i] = m: replaces child i (1..n; negative from the end) or appends at n + 1.
  local function list_newindex(self, k, v)
    if type(k) == "string" then return instance_newindex(self, k, v) end
    local cls = getmetatable(self).__name
    local n = #self._module_order
    if math.type(k) ~= "integer" then
      error(cls .. ": index must be an integer, got " .. describe(k), 2)
    end
    if not is_module(v) then
      error(cls .. ": item " .. k .. " must be a module, got " .. (v == nil and "nil (items cannot be removed)"
        or describe(v)), 2)
    end
    local i = position(k, n)
    if i then
      self._modules[self._module_order[i]] = v
    elseif k == n + 1 then
      self:add_module(tostring(k), v)
    else
      error(string.format("%s: index %d out of range (%d items; n + 1 appends)", cls, k, n), 2)
    end
  end

  -- Sequential(m1, m2, ...) or Sequential({m1, m2, ...}): children "1", "2", ...; seq[i] is the
  -- i-th (negative from the end), #seq their count; forward runs them in order.
  local Sequential = Module:extend("Sequential")
  M.Sequential = Sequential
  Sequential._index_names = true     -- state_dict({to = "torch"}) counts its children from 0
  Sequential.__newindex = list_newindex

  function Sequential:__init(...)
    local mods = table.pack(...)
    if mods.n == 1 and type(mods[1]) == "table" and not is_module(mods[1]) then
      mods = mods[1]
      mods.n = #mods
    end
    for i = 1, mods.n do
      if not is_module(mods[i]) then error("Sequential: argument " .. i .. " is not a module", 3) end
      self:add_module(tostring(i), mods[i])
    end
  end

  function Sequential:append(m)
    if not is_module(m) then error(getmetatable(self).__name .. ":append: expected a module, got " .. describe(m), 2) end
    self:add_module(tostring(#self._module_order + 1), m)
    return self
  end

  -- extend(list): appends each module of the array (or of another list); returns self.
  function Sequential:extend(list)
    if type(list) ~= "table" then error(getmetatable(self).__name .. ":extend: expected an array of modules", 2) end
    local items = is_module(list) and list:children() or list
    for i, m in ipairs(items) do
      if not is_module(m) then error(getmetatable(self).__name .. ":extend: item " .. i .. " is not a module", 2) end
    end
    for _, m in ipairs(items) do self:append(m) end
    return self
  end

  -- insert(i, m): m becomes item i (1..n + 1), the later ones move up; negative i counts from the
  -- end as Python's list.insert (-1: before the last).
  function Sequential:insert(i, m)
    local n, cls = #self._module_order, getmetatable(self).__name
    local at = i
    if math.type(i) == "integer" and i < 0 then at = n + i + 1 end
    if math.type(at) ~= "integer" or at < 1 or at > n + 1 then
      error(string.format("%s:insert: index %s out of range 1..%d (or -%d..-1)", cls, tostring(i), n + 1, n), 2)
    end
    i = at
    if not is_module(m) then error(cls .. ":insert: expected a module, got " .. describe(m), 2) end
    local items = self:children()
    table.insert(items, i, m)
    self._modules, self._module_order = {}, {}
    for j, c in ipairs(items) do self:add_module(tostring(j), c) end
    return self
  end

  function Sequential:forward(x)
    for _, name in ipairs(self._module_order) do x = self._modules[name](x) end
    return x
  end

  -- ModuleList({m1, ...}): a list of children ("1", "2", ...) without a forward.
  local ModuleList = Module:extend("ModuleList")
  M.ModuleList = ModuleList
  ModuleList._index_names = true
  ModuleList.__newindex = list_newindex
  function ModuleList:__init(mods)
    if mods ~= nil and (type(mods) ~= "table" or is_module(mods)) then
      error("ModuleList: expected an array of modules, got " .. describe(mods), 3)
    end
    for i, m in ipairs(mods or {}) do
      if not is_module(m) then error("ModuleList: item " .. i .. " is not a module", 3) end
      self:add_module(tostring(i), m)
    end
  end
  ModuleList.append, ModuleList.extend, ModuleList.insert = Sequential.append, Sequential.extend, Sequential.insert
  function ModuleList:forward() error("ModuleList has no forward: iterate over its children", 2) end

  -- ---- dicts ----

  -- A key a dict may take: a non-empty string without '.', and not the name of a method or field
  -- (md.keys must stay the method; PyTorch refuses such keys too).
  local function check_key(self, k, level)
    local cls = getmetatable(self).__name
    if type(k) ~= "string" then error(cls .. ": keys are strings, got " .. describe(k), level + 1) end
    if k == "" or k:find(".", 1, true) then
      error(cls .. ": key must be a non-empty string without '.', got \"" .. k .. "\"", level + 1)
    end
    if getmetatable(self)[k] ~= nil or rawget(self, k) ~= nil then
      error(cls .. ": key \"" .. k .. "\" is the name of a method or field of " .. cls, level + 1)
    end
  end

  -- The entries of a dict constructor or update(): {name = value, ...} (sorted by name: a Lua table
  -- has no order) or an array of {name, value} pairs (in that order).
  local function dict_entries(cls, items, level)
    if items == nil then return {} end
    if type(items) ~= "table" or is_module(items) or st.is_tensor(items) then
      error(cls .. ": expected a table of name = value or an array of {name, value} pairs, got "
        .. describe(items), level + 1)
    end
    local out = {}
    if #items > 0 then
      for i, e in ipairs(items) do
        if type(e) ~= "table" or is_module(e) or st.is_tensor(e) or #e ~= 2 then
          error(cls .. ": item " .. i .. " must be a {name, value} pair, got " .. describe(e), level + 1)
        end
        out[i] = {e[1], e[2]}
      end
      for k in pairs(items) do
        if math.type(k) ~= "integer" then
          error(cls .. ": mixed array and name = value entries (key \"" .. tostring(k) .. "\")", level + 1)
        end
      end
      return out
    end
    for k, v in pairs(items) do out[#out + 1] = {k, v} end
    for _, e in ipairs(out) do
      if type(e[1]) ~= "string" then error(cls .. ": keys are strings, got " .. describe(e[1]), level + 1) end
    end
    table.sort(out, function(a, b) return a[1] < b[1] end)
    return out
  end

  -- dict_class(name, reg, order, is_item, register, what): a dict over registry reg/order whose
  -- values satisfy is_item and are added with register(self, key, value).
  local function dict_class(name, reg, order, is_item, register, what)
    local cls = Module:extend(name)
    M[name] = cls

    local function set(self, k, v, level)
      if type(k) ~= "string" then error(name .. ": keys are strings, got " .. describe(k), level + 1) end
      local items = rawget(self, reg)
      if v == nil then
        if items[k] ~= nil then instance_newindex(self, k, nil) end
        return
      end
      if not is_item(v) then
        error(name .. ": value for key \"" .. k .. "\" must be " .. what .. ", got " .. describe(v), level + 1)
      end
      if items[k] ~= nil then
        items[k] = reg == "_parameters" and as_parameter(v) or v
        return
      end
      check_key(self, k, level + 1)
      check_name(self, k, name)
      register(self, k, v)
    end

    function cls:__init(items)
      for _, e in ipairs(dict_entries(name, items, 3)) do set(self, e[1], e[2], 3) end
    end
    cls.__index = function(self, k)
      if type(k) ~= "string" then error(name .. ": keys are strings, got " .. describe(k), 2) end
      return instance_index(self, k)
    end
    cls.__newindex = function(self, k, v) set(self, k, v, 2) end
    cls.__len = function(self) return #rawget(self, order) end
    cls.__pairs = function(self) return ordered_pairs(rawget(self, order), rawget(self, reg)) end

    -- update(items): the constructor's forms; existing keys are replaced (in place), new ones added.
    function cls:update(items)
      for _, e in ipairs(dict_entries(name, items, 2)) do set(self, e[1], e[2], 2) end
      return self
    end
    function cls:keys() return {table.unpack(rawget(self, order))} end
    function cls:values()
      local out = {}
      for i, k in ipairs(rawget(self, order)) do out[i] = rawget(self, reg)[k] end
      return out
    end
    function cls:items() return ordered_pairs(rawget(self, order), rawget(self, reg)) end
    function cls:contains(k) return type(k) == "string" and rawget(self, reg)[k] ~= nil end
    -- pop(key): removes the entry and returns its value; a missing key is an error naming the keys.
    function cls:pop(k)
      local v = type(k) == "string" and rawget(self, reg)[k] or nil
      if v == nil then
        local keys = {}
        for i, n in ipairs(rawget(self, order)) do keys[i] = string.format("%q", n) end
        error(name .. ":pop: no key " .. (type(k) == "string" and string.format("%q", k) or describe(k))
          .. " (keys: " .. (#keys > 0 and table.concat(keys, ", ") or "none") .. ")", 2)
      end
      instance_newindex(self, k, nil)
      return v
    end
    function cls:clear()
      for _, k in ipairs(self:keys()) do instance_newindex(self, k, nil) end
      return self
    end
    function cls:forward() error(name .. " has no forward: index it by key", 2) end
    return cls
  end

  -- ModuleDict({name = module, ...} or {{name, module}, ...}): children under their keys.
  dict_class("ModuleDict", "_modules", "_module_order", is_module,
    function(self, k, m) self:add_module(k, m) end, "a module")

  -- ParameterDict({name = tensor, ...} or {{name, tensor}, ...}): parameters under their keys (each
  -- tensor made a leaf that requires grad, as nn.Parameter).
  local ParameterDict = dict_class("ParameterDict", "_parameters", "_param_order", st.is_tensor,
    function(self, k, t) self:register_parameter(k, t) end, "a tensor")

  local function param_line(t)
    return "Parameter containing: [" .. t:dtype() .. " of size " .. table.concat(t:shape(), "x") .. "]"
  end
  function ParameterDict:extra_repr()
    local lines = {}
    for i, k in ipairs(self._param_order) do lines[i] = "(" .. k .. "): " .. param_line(self._parameters[k]) end
    return table.concat(lines, "\n")
  end

  -- ---- ParameterList ----

  -- ParameterList({t1, t2, ...}): parameters "1", "2", ... (each made a leaf that requires grad).
  -- pl[i] (negative from the end), pl[i] = t (1..n replaces, n + 1 appends), #pl, ipairs(pl).
  local ParameterList = Module:extend("ParameterList")
  M.ParameterList = ParameterList
  ParameterList._index_names = true
  function ParameterList:__init(ts)
    if ts ~= nil and (type(ts) ~= "table" or st.is_tensor(ts) or is_module(ts)) then
      error("ParameterList: expected an array of tensors, got " .. describe(ts), 3)
    end
    for i, t in ipairs(ts or {}) do
      if not st.is_tensor(t) then error("ParameterList: item " .. i .. " must be a tensor, got " .. describe(t), 3) end
    end
    for _, t in ipairs(ts or {}) do self:append(t) end
  end
  ParameterList.__index = function(self, k)
    if type(k) == "number" then
      local order = rawget(self, "_param_order")
      local i = position(k, #order)
      return i and rawget(self, "_parameters")[order[i]]
    end
    return instance_index(self, k)
  end
  ParameterList.__newindex = function(self, k, v)
    local n = #self._param_order
    if type(k) == "string" then
      if st.is_tensor(v) or is_module(v) then
        error("ParameterList: items are set by position (pl[i] = t), not by name (\"" .. k .. "\")", 2)
      end
      return instance_newindex(self, k, v)
    end
    if math.type(k) ~= "integer" then error("ParameterList: index must be an integer, got " .. describe(k), 2) end
    if not st.is_tensor(v) then
      error("ParameterList: item " .. k .. " must be a tensor, got " .. (v == nil and "nil (items cannot be removed)"
        or describe(v)), 2)
    end
    local i = position(k, n)
    if i then
      self._parameters[self._param_order[i]] = as_parameter(v)
    elseif k == n + 1 then
      self:append(v)
    else
      error(string.format("ParameterList: index %d out of range (%d items; n + 1 appends)", k, n), 2)
    end
  end
  ParameterList.__len = function(self) return #rawget(self, "_param_order") end
  ParameterList.__pairs = function(self)
    local i = 0
    return function()
      i = i + 1
      local t = self[i]
      if t ~= nil then return i, t end
    end
  end
  function ParameterList:append(t)
    if not st.is_tensor(t) then error("ParameterList:append: expected a tensor, got " .. describe(t), 2) end
    self:register_parameter(tostring(#self._param_order + 1), t)
    return self
  end
  function ParameterList:extend(ts)
    if type(ts) ~= "table" then error("ParameterList:extend: expected an array of tensors", 2) end
    local items = is_module(ts) and ts:parameters(false) or ts
    for i, t in ipairs(items) do
      if not st.is_tensor(t) then error("ParameterList:extend: item " .. i .. " must be a tensor, got " .. describe(t), 2) end
    end
    for _, t in ipairs(items) do self:append(t) end
    return self
  end
  function ParameterList:forward() error("ParameterList has no forward: index it", 2) end
  ParameterList.extra_repr = ParameterDict.extra_repr
end

return install
