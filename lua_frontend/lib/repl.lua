-- repl.lua — help and Tab completion for the REPL: st.help(x) (the global `help` in the stitch
-- executable's REPL) and st._complete(line), which the libedit completion hook of main.c calls on
-- Tab. Both are plain Lua functions of a string or a value, so tests call them without a terminal.
--
-- The one-line docs come from help_docs.lua, the one place they are written; test_repl.lua checks
-- that every public function of st, st.Tensor, st.nn (and its functional, init and utils tables,
-- and Module), st.optim (and Optimizer), st.data and st.progress has an entry, and that every entry
-- names something that exists.
--
-- Invariants: completion never raises and never calls anything but __index (every index is under
-- pcall; expressions such as `f().x` or `("a"):` are not evaluated: they get no candidates); help
-- reads no tensor values (shape, dtype and device only: no sync point).
local st = ...
local docs = st._lib("help_docs")

local M = {}

local KEYWORDS = {"and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto",
  "if", "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"}
local is_keyword = {}
for _, k in ipairs(KEYWORDS) do is_keyword[k] = true end

-- A name usable after `.` or `:` or as a global (not a keyword: `x:repeat()` is a syntax error).
local function is_name(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil and not is_keyword[k]
end

local function get(v, k)
  local ok, r = pcall(function() return v[k] end)
  if ok then return r end
  return nil
end

-- The fields a tensor reads through its C __index besides its methods.
local TENSOR_FIELDS = {"grad", "requires_grad", "is_leaf"}

local function is_module(v)
  local nn = rawget(st, "nn")   -- loaded only when something used st.nn
  return nn ~= nil and nn.is_module(v)
end

-- The names reachable from obj with `.` (fns false) or `:` (fns true: functions only): its own
-- fields when it is a table, then along its metatables' __index tables. An __index function is
-- opaque; two kinds are known: a tensor's (st.Tensor plus the autograd fields) and a class whose
-- instances index through a function (st.nn modules: the metatable is the class, so its fields
-- and its own __index chain). st's __lazy lists the libraries it loads on first access.
local function members(obj, fns)
  local out = {}
  local function add_raw(t)
    for k, v in next, t do
      if is_name(k) and (not fns or type(v) == "function") then out[k] = true end
    end
  end
  local v, seen = obj, {}
  for _ = 1, 32 do
    if type(v) == "table" or type(v) == "userdata" then   -- (not any value: NaN is no table key)
      if seen[v] then break end
      seen[v] = true
    end
    if type(v) == "table" then add_raw(v) end
    local mt = getmetatable(v)
    if type(mt) ~= "table" then break end
    local lazy = rawget(mt, "__lazy")
    if type(lazy) == "table" and not fns then
      for _, k in ipairs(lazy) do
        if is_name(k) then out[k] = true end
      end
    end
    local idx = rawget(mt, "__index")
    if type(idx) == "table" then
      v = idx
    elseif type(idx) == "function" and st.is_tensor(v) then
      add_raw(st.Tensor)
      if not fns then for _, k in ipairs(TENSOR_FIELDS) do out[k] = true end end
      break
    elseif type(idx) == "function" then
      v = mt
    else
      break
    end
  end
  if not fns and is_module(obj) then
    for _, reg in ipairs({"_parameters", "_buffers", "_modules"}) do
      for k in pairs(rawget(obj, reg)) do
        if is_name(k) then out[k] = true end
      end
    end
  end
  return out
end
M.members = members

-- st._complete(line): the completions of the name chain that ends line (the text before the
-- cursor): a global (`pri` -> `print`), a field (`st.nn.Lin` -> `st.nn.Linear`) or a method
-- (`x:resh` -> `x:reshape`, functions only). Returns a sorted list of whole chains and the byte
-- position in line where the chain starts (so the caller knows what they replace). Names starting
-- with `_` are offered only when the typed part starts with `_`. No candidates (an empty list) when
-- the chain does not start with a name (`("a").`, `f():`, `x[1].`, `1.5`) or a name on the way is
-- not there.
function M.complete(line, ...)
  if select("#", ...) > 0 then error("_complete: takes one argument (the line)", 2) end
  if type(line) ~= "string" then error("_complete: expected a string, got " .. type(line), 2) end
  local s = line:find("[%w_%.:]*$")
  local chain = line:sub(s)
  local cut = chain:match("^.*%.%.()")     -- after a `..` operator: a new expression
  if cut then
    s = s + cut - 1
    chain = chain:sub(cut)
  end
  local head, sep, partial = chain:match("^(.-)([%.:])([%w_]*)$")
  local obj
  if head then
    if head == "" or head:find(":", 1, true) then return {}, s end
    obj = _G
    for part in (head .. "."):gmatch("(.-)%.") do
      if not is_name(part) then return {}, s end
      obj = get(obj, part)
      if obj == nil then return {}, s end
    end
  else
    partial, sep = chain, ""
    if partial:match("^%d") then return {}, s end
    obj = _G
  end
  local names = members(obj, sep == ":")
  if sep == "" then
    for _, k in ipairs(KEYWORDS) do names[k] = true end
  end
  local prefix = head and (head .. sep) or ""
  local out = {}
  local private = partial:sub(1, 1) == "_"
  for name in pairs(names) do
    if name:sub(1, #partial) == partial and (private or name:sub(1, 1) ~= "_") then
      out[#out + 1] = prefix .. name
    end
  end
  table.sort(out)
  return out, s
end

-- ---- help ----

-- The documented tables, in the order a short name is searched: the key in help_docs.lua and how
-- to reach the table from st.
local SPACES = {
  {"Tensor", {"Tensor"}}, {"st", {}}, {"nn", {"nn"}}, {"nn.functional", {"nn", "functional"}},
  {"nn.init", {"nn", "init"}}, {"nn.utils", {"nn", "utils"}}, {"nn.Module", {"nn", "Module"}},
  {"optim", {"optim"}}, {"optim.Optimizer", {"optim", "Optimizer"}}, {"data", {"data"}},
  {"progress", {"progress"}}, {"autograd", {"autograd"}}, {"utils", {"utils"}}, {"amp", {"amp"}},
}
M.SPACES = SPACES

local function space_table(path)
  local t = st
  for _, k in ipairs(path) do t = t[k] end
  return t
end

-- value -> {space, name}, built on first use (it loads st.nn, st.optim, ...).
local index
local function value_index()
  if index then return index end
  index = {}
  for _, sp in ipairs(SPACES) do
    local t = space_table(sp[2])
    index[t] = index[t] or {"table", sp[1] == "st" and "st" or "st." .. sp[1]}
    for k, v in pairs(t) do
      local tv = type(v)
      if (tv == "function" or tv == "table") and type(k) == "string" and not index[v] then
        if docs[sp[1]][k] then index[v] = {sp[1], k}
        elseif sp[1] == "st" and docs.Tensor[k] then index[v] = {"Tensor", k} end   -- st.backward
      end
    end
  end
  return index
end

local function wrap(names, indent)
  local lines, cur = {}, indent
  for i, n in ipairs(names) do
    local piece = n .. (i < #names and "," or "")
    if #cur + #piece + 1 > 100 and cur ~= indent then
      lines[#lines + 1] = cur
      cur = indent
    end
    cur = cur == indent and cur .. piece or cur .. " " .. piece
  end
  lines[#lines + 1] = cur
  return table.concat(lines, "\n")
end

local function sorted_keys(set)
  local r = {}
  for k in pairs(set) do if k:sub(1, 1) ~= "_" then r[#r + 1] = k end end
  table.sort(r)
  return r
end

local function shape_str(t)
  return "(" .. table.concat(t:shape(), ", ") .. ")"
end

local INTRO = [[
help(x): the one-line doc of a function or method (help(st.zeros), help(x.reshape)), the fields of
a table (help(st.nn)), the parameters and methods of a module or tensor (help(net), help(x)).
help("name") looks a name up: "reshape", "x:reshape", "st.nn.Linear", "relu" (every match).
Tab completes globals, fields (st.nn.Lin -> st.nn.Linear) and methods (x:resh -> x:reshape).
The reference: docs/lua.md, docs/nn.md, docs/training.md.]]

-- The fields of a table grouped by kind, and its methods (functions reached through metatables).
local function table_text(t, title)
  local fns, tabs, vals = {}, {}, {}
  for k, v in next, t do
    if is_name(k) and k:sub(1, 1) ~= "_" then
      local tv = type(v)
      if tv == "function" then fns[#fns + 1] = k
      elseif tv == "table" then tabs[#tabs + 1] = k
      else vals[#vals + 1] = k end
    end
  end
  local mt = getmetatable(t)
  if type(mt) == "table" and type(rawget(mt, "__lazy")) == "table" then
    for _, k in ipairs(rawget(mt, "__lazy")) do
      if rawget(t, k) == nil then
        if k == "help" then fns[#fns + 1] = k else tabs[#tabs + 1] = k end
      end
    end
  end
  local own = {}
  for _, k in ipairs(fns) do own[k] = true end
  local methods = {}
  for k in pairs(members(t, true)) do
    if not own[k] and k:sub(1, 1) ~= "_" then methods[#methods + 1] = k end
  end
  for _, l in ipairs({fns, tabs, vals, methods}) do table.sort(l) end
  local out = {title}
  if #fns > 0 then out[#out + 1] = "functions:\n" .. wrap(fns, "  ") end
  if #tabs > 0 then out[#out + 1] = "tables:\n" .. wrap(tabs, "  ") end
  if #vals > 0 then out[#out + 1] = "values:\n" .. wrap(vals, "  ") end
  if #methods > 0 then out[#out + 1] = "methods:\n" .. wrap(methods, "  ") end
  if #out == 1 then out[#out + 1] = "(no fields)" end
  return table.concat(out, "\n")
end

local function module_text(m)
  local cls = getmetatable(m)
  local e = value_index()[cls]
  local out = {(rawget(cls, "__name") or "?") .. " module" ..
    (e and (": " .. docs[e[1]][e[2]]) or "")}
  local function reg(what, order_key, reg_key)
    local parts = {}
    for _, k in ipairs(rawget(m, order_key)) do
      local v = rawget(m, reg_key)[k]
      parts[#parts + 1] = st.is_tensor(v) and (k .. " " .. shape_str(v) .. " " .. v:dtype())
        or (k .. " (" .. (rawget(getmetatable(v), "__name") or "module") .. ")")
    end
    if #parts > 0 then out[#out + 1] = what .. ":\n" .. wrap(parts, "  ") end
  end
  reg("parameters", "_param_order", "_parameters")
  reg("buffers", "_buffer_order", "_buffers")
  reg("children", "_module_order", "_modules")
  out[#out + 1] = "methods (help(st.nn.Module) for what they do):\n" ..
    wrap(sorted_keys(members(m, true)), "  ")
  return table.concat(out, "\n")
end

-- The entry `name` of the documented table `space`: its line, or (nil, the value) when the value is
-- a table (a class: help lists its methods too).
local function entry(space, name)
  for _, sp in ipairs(SPACES) do
    if sp[1] == space then
      local ok, v = pcall(function() return space_table(sp[2])[name] end)
      if ok and type(v) == "table" then return nil, v end
    end
  end
  return docs[space][name]
end

-- A name given as a string: "st.zeros", "zeros", "x:reshape", "Tensor.reshape", "nn.Linear",
-- "st.nn" (a table: as help(st.nn)). A short name gives every entry of that name.
local function name_text(name)
  local n = name:gsub("^st%.", "")
  local meth = n:match("^[%a_][%w_]*:([%a_][%w_]*)$")
  if meth then n = "Tensor." .. meth end
  local ns, short = n:match("^(.*)%.([^.]+)$")
  if ns and docs[ns] and docs[ns][short] then return entry(ns, short) end
  if name == "st" or n == "Tensor" then return nil, (n == "Tensor" and st.Tensor or st) end
  for _, sp in ipairs(SPACES) do
    if sp[1] == n then return nil, space_table(sp[2]) end
  end
  if not n:find("[.:]") then
    local found = {}
    for _, sp in ipairs(SPACES) do
      if docs[sp[1]][n] then found[#found + 1] = sp[1] end
    end
    if #found == 1 then return entry(found[1], n) end
    for i, sp in ipairs(found) do found[i] = docs[sp][n] end
    if #found > 0 then return table.concat(found, "\n") end
  end
  -- nothing: names that begin with (or contain) the last part
  local last = n:match("([%w_]+)$") or n
  local near, seen = {}, {}
  for _, sp in ipairs(SPACES) do
    for k in pairs(docs[sp[1]]) do
      if #last > 0 and k:find(last, 1, true) and not seen[k] then
        seen[k] = true
        near[#near + 1] = k
      end
    end
  end
  table.sort(near)
  local msg = "help: nothing is documented as '" .. name .. "'"
  if #near > 0 then
    while #near > 12 do near[#near] = nil end
    msg = msg .. "; names containing '" .. last .. "': " .. table.concat(near, ", ")
  end
  return msg
end

-- The text help(x) prints (tests read it); n: how many arguments help got.
local function text(n, x)
  if n == 0 then return INTRO end
  local tx = type(x)
  if tx == "string" then
    local text, tbl = name_text(x)
    if text then return text end
    x, tx = tbl, "table"
  end
  if st.is_tensor(x) then
    local ok, desc = pcall(function()
      return "tensor of shape " .. shape_str(x) .. ", dtype " .. x:dtype() .. ", on " .. x:device()
    end)
    return (ok and desc or "tensor (closed)") .. "\nmethods (help(\"name\") for one):\n" ..
      wrap(sorted_keys(members(x, true)), "  ") .. "\nfields: grad, requires_grad, is_leaf"
  end
  local e = (tx == "function" or tx == "table") and value_index()[x]
  if e and e[1] ~= "table" then
    local text = docs[e[1]][e[2]]
    if tx == "table" then
      local methods = sorted_keys(members(x, true))
      if #methods > 0 then text = text .. "\nmethods:\n" .. wrap(methods, "  ") end
    end
    return text
  end
  if tx == "table" then
    if is_module(x) then return module_text(x) end
    local title = e and (e[2] .. (docs.tables[e[2]] and (": " .. docs.tables[e[2]]) or ""))
    if not title then  -- an object: its class's __name, or its name field (optimizers, schedulers)
      local mt = getmetatable(x)
      local cname = type(mt) == "table" and rawget(mt, "__name") or rawget(x, "name")
      title = "a table" .. (type(cname) == "string" and (" (" .. cname .. ")") or "")
    end
    return table_text(x, title)
  end
  if tx == "function" then
    local info = debug.getinfo(x, "S")
    local what = "without an entry (not part of stitch's documented API)"
    if info.what == "C" then return "help: a C function " .. what end
    return "help: a Lua function " .. what .. ", defined at " .. info.short_src .. ":" ..
      info.linedefined
  end
  if x == nil then
    return "help: got nil (a misspelt name? help(\"name\") searches the docs; Tab completes names)"
  end
  return "help: no help for a " .. tx .. " value (" .. tostring(x) .. "); help() says what it does"
end

-- How many arguments count (trailing nils are none, but help(nil) is not help()); one more raises.
local function nargs(...)
  local n = select("#", ...)
  while n > 1 and select(n, ...) == nil do n = n - 1 end
  if n > 1 then
    local v = select(2, ...)
    error("help: unexpected argument #2 (" .. (type(v) == "string" and string.format("%q", v) or
      tostring(v)) .. "): help takes at most 1", 3)
  end
  return n
end

function M.help_text(...)
  return text(nargs(...), ...)
end

-- st.help(x): prints help_text(x); returns nothing.
function M.help(...)
  io.write(text(nargs(...), ...), "\n")
end

return M
