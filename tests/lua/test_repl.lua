-- test_repl.lua: the REPL's Tab completion (st._complete, repl.lua) and help (st.help): candidates for
-- globals, nested fields, tensor and module methods (through metatables and __index chains), no
-- candidates and no error on odd input; help's texts for functions, methods, tables, modules,
-- tensors and unknown values; and that every public function has a one-line doc (help_docs.lua)
-- and every doc names something that exists. The libedit hook itself: tests/lua/run_repl_test.sh
-- (through a pseudo-terminal).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq = H.test, H.eq
local R = st._lib("repl")
local docs = st._lib("help_docs")
local nn = st.nn

local function complete(line)
  local c, pos = st._complete(line)
  return c, pos
end

local function same_list(got, want, what)
  eq(table.concat(got, " "), table.concat(want, " "), what)
end

test("complete_globals_and_keywords", function()
  same_list(complete("pri"), {"print"}, "pri")
  same_list(complete("whi"), {"while"}, "keyword")
  same_list(complete("ipa"), {"ipairs"}, "ipa")
  local c, pos = complete("print(st.ze")
  same_list(c, {"st.zero_", "st.zeros", "st.zeros_like"}, "after a parenthesis")
  eq(pos, 7, "the chain starts after '('")
  c, pos = complete("a..st.ma")
  same_list(c, {"st.manual_seed", "st.masked_fill", "st.matmul", "st.max", "st.maximum"}, "after ..")
  eq(pos, 4, "the chain starts after '..'")
end)

test("complete_nested_fields", function()
  same_list(complete("st.nn.Lin"), {"st.nn.Linear"}, "st.nn.Lin")
  same_list(complete("st.nn.functional.cross"), {"st.nn.functional.cross_entropy"}, "functional")
  same_list(complete("st.optim.Ad"),
    {"st.optim.Adagrad", "st.optim.Adagrad_class", "st.optim.Adam", "st.optim.AdamW", "st.optim.Adam_class"},
    "optim")
  same_list(complete("st.nn.init.xav"), {"st.nn.init.xavier_normal_", "st.nn.init.xavier_uniform_"}, "init")
  -- the libraries st loads on first use are offered before anything loaded them (st's __lazy)
  local c = complete("st.pro")
  same_list(c, {"st.prod", "st.progress"}, "st.pro")
  same_list(complete("st.he"), {"st.help"}, "st.help")
  -- every public function of st.nn.functional, counted by hand from the table
  local n = 0
  for k in pairs(st.nn.functional) do if k:sub(1, 1) ~= "_" then n = n + 1 end end
  c = complete("st.nn.functional.")
  eq(#c, n, "all of st.nn.functional")
  for _, name in ipairs(c) do assert(name:match("^st%.nn%.functional%.[%a][%w_]*$"), name) end
  -- names starting with _ only when the typed part does
  same_list(complete("st.nn.functional._ch"), {"st.nn.functional._check_opts"}, "private")
  same_list(complete("st._li"), {"st._lib"}, "st._lib")
  for _, name in ipairs(complete("st.")) do assert(not name:find("^st%._"), name) end
  -- strings: their metatable's __index is the string table
  s_test = "abc"
  same_list(complete("s_test:up"), {"s_test:upper"}, "string method")
  s_test = nil
  -- a userdata whose metatable's __index is a table (a file)
  same_list(complete("io.stdout:wr"), {"io.stdout:write"}, "file method")
end)

test("complete_tensor_methods_and_fields", function()
  x_test = st.ones(2, 3)
  same_list(complete("x_test:res"), {"x_test:reshape"}, "x:res")
  same_list(complete("x_test:re"), {"x_test:realize", "x_test:reciprocal", "x_test:relu",
    "x_test:remainder", "x_test:repeat_tensor", "x_test:requires_grad_", "x_test:reshape", "x_test:retain_grad"},
    "x:re (not the keyword repeat)")
  same_list(complete("x_test.gr"), {"x_test.grad"}, "autograd field with .")
  same_list(complete("x_test:gr"), {}, "a field is no method")
  local all = complete("x_test:")
  local n = 0
  for k, v in pairs(st.Tensor) do
    if type(v) == "function" and k ~= "repeat" then n = n + 1 end
  end
  eq(#all, n, "x: offers every method of st.Tensor")
  x_test = nil
end)

test("complete_module_methods_and_registered_names", function()
  local Net = nn.Module:extend("TestNet")
  function Net:__init()
    self.fc1 = nn.Linear(2, 3)
    self.scale = nn.Parameter(st.ones(1))
  end
  function Net:forward(x) return self.fc1(x) * self.scale end
  m_test = Net()
  same_list(complete("m_test.fc"), {"m_test.fc1"}, "a child")
  same_list(complete("m_test.sc"), {"m_test.scale"}, "a parameter")
  same_list(complete("m_test.fc1.we"), {"m_test.fc1.weight"}, "a child's parameter")
  same_list(complete("m_test:for"), {"m_test:forward"}, "the subclass's method")
  same_list(complete("m_test:num"), {"m_test:num_parameters"}, "an inherited method (Module)")
  same_list(complete("m_test.fc1:for"), {"m_test.fc1:forward"}, "a child's method")
  same_list(complete("m_test:fc"), {}, "a child is no method")
  same_list(complete("st.nn.Module:ex"), {"st.nn.Module:extend", "st.nn.Module:extra_repr"}, "class")
  -- a plain class chain: obj -> Derived -> Base through __index tables
  local Base = {greet = function() end}
  Base.__index = Base
  local Derived = setmetatable({wave = function() end, value = 1}, {__index = Base})
  Derived.__index = Derived
  o_test = setmetatable({own = 2}, Derived)
  same_list(complete("o_test:"), {"o_test:greet", "o_test:wave"}, "methods along the chain")
  same_list(complete("o_test."), {"o_test.greet", "o_test.own", "o_test.value", "o_test.wave"}, "fields")
  m_test, o_test = nil, nil
end)

test("complete_no_candidates_and_never_raises", function()
  for _, line in ipairs({"st.nn.Nope", "st.nn.Nope.x", "nosuchglobal.x", "1.5", "0x1F.", "st:x.y",
                         '("a").', "f():", "t[1].", "x_missing:", "st.nn.functional.relu.",
                         "st..", "..."}) do
    local c = complete(line)
    if line ~= "st.." and line ~= "..." then same_list(c, {}, line) end
  end
  -- an __index that raises, a cycle of __index tables, a metatable hidden by __metatable
  bad_test = setmetatable({}, {__index = function() error("boom") end})
  local cyc = {}
  cyc.__index = cyc
  cyc_test = setmetatable({}, cyc)
  hid_test = setmetatable({}, {__metatable = "no", __index = {a = 1}})
  x_test = st.ones(2)
  nan_test = 0 / 0
  local weird = {"nan_test.", "nan_test:", "x_test:", "..", '("a").', "st.nn.functional.", "", ":", ".", "...", "x_test::",
    "st.", "a.b.c.d.e", "\0", string.rep("a.", 1000), "x_test:y:z", "_G._G._G.", "f():", "t[1].",
    "x_test.grad.", "'st.n", "bad_test.x.y", "bad_test.", "bad_test:", "cyc_test:", "cyc_test.",
    "hid_test.", "st.nn.Linear.__index.", "--st.n", "x_test:reshape(", "x_test[", "\255\254."}
  for _, line in ipairs(weird) do
    local ok, c, pos = pcall(st._complete, line)
    assert(ok, "raised on " .. line .. ": " .. tostring(c))
    assert(type(c) == "table" and math.type(pos) == "integer" and pos >= 1 and pos <= #line + 1,
      "bad result for " .. line)
  end
  same_list(complete("bad_test.x.y"), {}, "a raising __index gives nothing")
  same_list(complete("x_test:"), complete("x_test:"), "")
  H.raises(function() return st._complete() end, "_complete: expected a string, got nil")
  H.raises(function() return st._complete(1) end, "_complete: expected a string, got number")
  H.raises(function() return st._complete("x", 2) end, "_complete: takes one argument")
  bad_test, cyc_test, hid_test, x_test, nan_test = nil, nil, nil, nil, nil
end)

-- help's text (st.help prints it)
local help = R.help_text

test("help_functions_and_methods", function()
  local x = st.ones(2, 3)
  eq(help(st.zeros), docs.st.zeros, "help(st.zeros)")
  assert(help(st.zeros):find("^st%.zeros%(.* %-%- .*zeros"), help(st.zeros))
  assert(help(x.reshape):find("^x:reshape%(.* %-%- "), help(x.reshape))
  eq(help("reshape"), help(x.reshape), "by name")
  eq(help("x:reshape"), help(x.reshape), "as a method call")
  eq(help("st.reshape"), help(x.reshape), "st.reshape is the method")
  eq(help(st.reshape), help(x.reshape), "the same function")
  assert(help(st.backward):find("^x:backward"), "st.backward: " .. help(st.backward))
  local lin = help(st.nn.Linear)
  assert(lin:find("^nn%.Linear%(in, out"), lin)
  assert(lin:find("forward") and lin:find("parameters"), "a class lists its methods: " .. lin)
  eq(help("st.nn.Linear"), lin, "by full name")
  eq(help("Linear"), lin, "by short name")
  -- a short name in several tables gives every entry
  local relu = help("relu")
  assert(relu:find("x:relu()", 1, true) and relu:find("F.relu(x)", 1, true), relu)
  assert(help(st.nn.functional.cross_entropy):find("^F%.cross_entropy%("), "F.cross_entropy")
  assert(help(st.optim.Adam):find("^optim%.Adam%("), "optim.Adam")
  assert(help(nn.Module.parameters):find("^m:parameters"), "Module:parameters")
  assert(help("grad"):find("x.grad", 1, true), "a tensor field")
end)

test("help_tables_modules_tensors", function()
  local t = help(st.nn)
  assert(t:find("^st%.nn: ") and t:find("Linear") and t:find("functional"), t)
  eq(help("st.nn"), t, "by name")
  t = help(st.nn.functional)
  assert(t:find("cross_entropy") and not t:find("_check_opts"), t)
  t = help(st)
  assert(t:find("zeros") and t:find("progress") and t:find("help"), "st lists its lazy libraries")
  local x = st.ones(2, 3, "f64")
  t = help(x)
  assert(t:find("shape (2, 3)", 1, true) and t:find("f64") and t:find("reshape") and t:find("grad"), t)
  local net = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
  t = help(net)
  assert(t:find("^Sequential module: nn%.Sequential"), t)
  assert(t:find("1 (Linear)", 1, true) and t:find("num_parameters"), t)
  t = help(net[1])
  assert(t:find("weight (3, 2) f32", 1, true) and t:find("bias (3) f32", 1, true), t)
  t = help({a = 1, f = print})
  assert(t:find("functions:\n  f") and t:find("values:\n  a"), t)
  t = help(st.optim.SGD({st.ones(1):requires_grad_()}))
  assert(t:find("step") and t:find("zero_grad"), "an optimizer's methods: " .. t)
end)

test("help_unknown_values_and_arguments", function()
  assert(help():find("^help%(x%)"), "help() explains itself")
  assert(help(42):find("no help for a number value (42)", 1, true), help(42))
  assert(help(nil):find("got nil"), help(nil))
  assert(help(true):find("no help for a boolean"), help(true))
  assert(help(print):find("a C function without an entry"), help(print))
  local f = function() end
  assert(help(f):find("a Lua function without an entry.*test_repl%.lua:%d+"), help(f))
  t_msg = help("nosuchthing")
  assert(t_msg:find("nothing is documented as 'nosuchthing'"), t_msg)
  assert(help("resh"):find("names containing 'resh': reshape"), help("resh"))
  assert(help("st.nn.Nope"):find("nothing is documented as 'st.nn.Nope'"), help("st.nn.Nope"))
  H.raises(function() st.help(1, 2) end, "help: unexpected argument #2 (2): help takes at most 1")
  H.raises(function() st.help(1, "a") end, 'help: unexpected argument #2 ("a")')
  eq(help(st.zeros, nil), help(st.zeros), "a trailing nil is no argument")
  -- st.help prints the text and returns nothing
  local path = os.tmpname()
  local old = io.output()
  io.output(path)
  local n = select("#", st.help(st.zeros))
  io.output():close()
  io.output(old)
  local fh = io.open(path)
  local printed = fh:read("a")
  fh:close()
  os.remove(path)
  eq(printed, docs.st.zeros .. "\n", "printed")
  eq(n, 0, "returns nothing")
  t_msg = nil
end)

-- Every public function (or callable class) has a doc line; every doc line names something real.
test("every_public_function_has_a_doc", function()
  local missing, stale = {}, {}
  local function callable(v)
    if type(v) == "function" then return true end
    local mt = type(v) == "table" and getmetatable(v)
    return type(mt) == "table" and mt.__call ~= nil
  end
  for _, sp in ipairs(R.SPACES) do
    local name, path = sp[1], sp[2]
    local t = st
    for _, k in ipairs(path) do t = t[k] end
    local d = docs[name]
    assert(type(d) == "table", "no docs for " .. name)
    for k, v in pairs(t) do
      if type(k) == "string" and k:sub(1, 1) ~= "_" and callable(v) then
        local ok = d[k] ~= nil or (name == "st" and st.Tensor[k] ~= nil and docs.Tensor[k] ~= nil)
        if not ok then missing[#missing + 1] = name .. "." .. k end
      end
    end
    for k, line in pairs(d) do
      local fields = docs.fields[name]
      if not (fields and fields[k]) and t[k] == nil then stale[#stale + 1] = name .. "." .. k end
      if type(line) ~= "string" or not line:find(" -- ", 1, true) then
        stale[#stale + 1] = name .. "." .. k .. " (not 'call -- text')"
      end
    end
  end
  table.sort(missing)
  table.sort(stale)
  eq(table.concat(missing, ", "), "", "public functions without a line in help_docs.lua")
  eq(table.concat(stale, ", "), "", "lines in help_docs.lua naming nothing")
  -- the lazy st.help itself, and every documented table
  assert(docs.st.help and docs.tables["st.nn.functional"], "help and the tables")
end)

-- The elementwise functions' lines say what docs/ops.md (generated from trace/ops.def) says.
test("elementwise_docs_agree_with_ops_md", function()
  local dir = arg[0]:match("(.*/)") or "./"
  local fh = assert(io.open(dir .. "../../docs/ops.md"))
  local n = 0
  for row in fh:lines() do
    local name, what = row:match("^| `st_([%w_]+)%(.-| `[%w_]+:[%w_]+%(.-%)` |.*| ([^|]-) |$")
    if name then
      n = n + 1
      local line = docs.Tensor[name]
      assert(line, "no line for " .. name)
      eq(line:match(" %-%- (.*)$"), what, "the line of " .. name)
    end
  end
  fh:close()
  assert(n >= 40, "read only " .. n .. " rows of docs/ops.md")
end)

H.done()
