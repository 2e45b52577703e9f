-- test_nn_containers.lua — issue 14 item 6 (and 3, part): ModuleDict, ParameterList, ParameterDict
-- and the list containers' item assignment (registration, indexing, iteration, length, state_dict
-- names, errors on bad keys); to(dtype) keeping tied weights tied; state_dict({to = "torch"}) and
-- load_state_dict(sd, {from = "torch"}) names written out by hand (PyTorch's, items from 0), their
-- round trip and their errors. The load of a file PyTorch wrote: test_nn_torch_load.lua.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn = st.nn
local test, eq, check, raises = H.test, H.eq, H.check_near, H.raises
local show = H.show

local function names(iter)
  local out = {}
  for k in iter do out[#out + 1] = k end
  return out
end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

test("to(dtype) keeps tied weights tied", function()
  local Tied = nn.Module:extend("Tied")
  function Tied:__init()
    self.emb = nn.Embedding(5, 3)
    self.head = nn.Linear(3, 5)
    self.head.weight = self.emb.weight            -- weight tying (PyTorch's idiom)
    self.a = nn.Module()
    self.b = nn.Module()
    local stats = st.zeros(4)
    self.a:register_buffer("stats", stats)
    self.b:register_buffer("stats", stats)         -- one buffer in two places
  end
  local m = Tied()
  local w0 = m.emb.weight:tolist()
  eq(#m:parameters(), 2, "emb.weight (shared) and head.bias")
  m:double()
  eq(m.emb.weight:dtype(), "f64")
  assert(rawequal(m.emb.weight, m.head.weight), "double(): one tensor for both after the cast")
  assert(rawequal(m.a.stats, m.b.stats), "double(): one buffer for both")
  eq(m.a.stats:dtype(), "f64")
  eq(#m:parameters(), 2, "still shared: listed once")
  check(m.emb.weight, w0, 1e-6, "values kept")
  m:to("f32")
  assert(rawequal(m.emb.weight, m.head.weight), "to(f32): still tied")
  eq(m.head.weight:dtype(), "f32")
  eq(m.emb.weight.requires_grad, true)
  local dev = st.device()
  m:to("cpu")
  assert(rawequal(m.emb.weight, m.head.weight), "to(cpu): still tied")
  m:to(dev)
  assert(rawequal(m.emb.weight, m.head.weight), "to(" .. dev .. "): still tied")
  -- one step of SGD moves the one tensor: both uses see it
  local idx = st.tensor({1, 4}, "i64")
  local loss = m.head(m.emb(idx)):sum()
  loss:backward()
  local opt = st.optim.SGD(m:parameters(), {lr = 0.5})
  opt:step()
  assert(not H.near(m.emb.weight, w0, 1e-3), "trained")
  check(m.head.weight, m.emb.weight, 0, "the same values through both names")
end)

test("ModuleDict: registration, order, indexing, iteration, length", function()
  st.manual_seed(1)
  -- name = module: sorted by name (a Lua table has no order)
  local md = nn.ModuleDict({relu = nn.ReLU(), fc = nn.Linear(2, 3), act = nn.Tanh()})
  eq(show(md:keys()), "{act, fc, relu}")
  eq(#md, 3)
  -- {name, module} pairs: in that order
  local pd = nn.ModuleDict({{"fc", nn.Linear(2, 3)}, {"act", nn.Tanh()}})
  eq(show(pd:keys()), "{fc, act}")
  eq(getmetatable(pd.fc).__name, "Linear")
  assert(rawequal(pd["fc"], pd.fc))
  eq(pd.missing, nil, "an absent key reads nil, as a Lua table")
  eq(pd:contains("act"), true); eq(pd:contains("nope"), false)
  -- assignment registers, replaces in place (same position), nil removes
  pd.out = nn.Linear(3, 1)
  eq(show(pd:keys()), "{fc, act, out}")
  pd.act = nn.ReLU()
  eq(show(pd:keys()), "{fc, act, out}")
  eq(getmetatable(pd.act).__name, "ReLU")
  pd.act = nil
  eq(show(pd:keys()), "{fc, out}")
  pd.never = nil                                 -- removing an absent key: nothing, as a Lua table
  local seen = {}
  for k, v in pairs(pd) do seen[#seen + 1] = k .. ":" .. getmetatable(v).__name end
  eq(show(seen), "{fc:Linear, out:Linear}", "pairs in order")
  seen = {}
  for k in pd:items() do seen[#seen + 1] = k end
  eq(show(seen), "{fc, out}", "items()")
  eq(#pd:values(), 2)
  -- the model sees it: parameters, state_dict names, forward through it
  local Net = nn.Module:extend("DictNet")
  function Net:__init() self.blocks = pd end
  function Net:forward(x) return self.blocks.out(self.blocks.fc(x)) end
  local net = Net()
  eq(#net:parameters(), 4)
  eq(show(net:state_dict_keys()), "{blocks.fc.weight, blocks.fc.bias, blocks.out.weight, blocks.out.bias}")
  eq(show(net:state_dict_keys({to = "torch"})), "{blocks.fc.weight, blocks.fc.bias, blocks.out.weight, blocks.out.bias}")
  eq(show(net:named_parameters() and names(net:named_parameters())),
    "{blocks.fc.weight, blocks.fc.bias, blocks.out.weight, blocks.out.bias}")
  eq(net(st.ones(4, 2)):shape()[2], 1)
  net:double()
  eq(pd.fc.weight:dtype(), "f64", "to(dtype) reaches the dict's modules")
  -- update: replaces existing keys, adds new ones
  pd:update({{"out", nn.Identity()}, {"z", nn.ReLU()}})
  eq(show(pd:keys()), "{fc, out, z}")
  eq(getmetatable(pd.out).__name, "Identity")
  -- pop and clear
  local fc = pd:pop("fc")
  eq(getmetatable(fc).__name, "Linear")
  eq(show(pd:keys()), "{out, z}")
  pd:clear()
  eq(#pd, 0)
  eq(tostring(nn.ModuleDict({{"a", nn.ReLU()}})), "ModuleDict(\n  (a): ReLU()\n)")
end)

test("ModuleDict: bad keys and values are errors naming them", function()
  local md = nn.ModuleDict({a = nn.ReLU()})
  raises(function() return md[1] end, "ModuleDict: keys are strings, got a number (1)")
  raises(function() md[1] = nn.ReLU() end, "ModuleDict: keys are strings, got a number (1)")
  raises(function() md.b = 3 end, "ModuleDict: value for key \"b\" must be a module, got a number (3)")
  raises(function() md.a = st.ones(2) end, "ModuleDict: value for key \"a\" must be a module, got a tensor (2)")
  raises(function() md["x.y"] = nn.ReLU() end, "ModuleDict: key must be a non-empty string without '.', got \"x.y\"")
  raises(function() md[""] = nn.ReLU() end, "key must be a non-empty string")
  raises(function() md.keys = nn.ReLU() end, "ModuleDict: key \"keys\" is the name of a method or field of ModuleDict")
  raises(function() md.to = nn.ReLU() end, "key \"to\" is the name of a method or field")
  raises(function() md:pop("zz") end, "ModuleDict:pop: no key \"zz\" (keys: \"a\")")
  raises(function() nn.ModuleDict({a = 1}) end, "value for key \"a\" must be a module, got a number (1)")
  raises(function() nn.ModuleDict({{"a"}}) end, "item 1 must be a {name, value} pair")
  raises(function() nn.ModuleDict({{"a", nn.ReLU()}, b = nn.ReLU()}) end, "mixed array and name = value entries")
  raises(function() nn.ModuleDict(nn.ReLU()) end, "expected a table of name = value or an array of {name, value} pairs")
  raises(function() md:forward(st.ones(1)) end, "ModuleDict has no forward")
  eq(show(md:keys()), "{a}", "nothing registered by the failed calls")
end)

test("ParameterList: registration, indexing, iteration, gradients, errors", function()
  local pl = nn.ParameterList({st.ones(2), st.full({2, 2}, 2)})
  eq(#pl, 2)
  eq(pl[1].requires_grad, true, "made parameters")
  eq(show(pl[-1]:shape()), "{2, 2}")
  eq(pl[3], nil, "past the end reads nil (ipairs stops there)")
  pl:append(st.zeros(3))
  pl[4] = st.full({1}, 7)                        -- n + 1 appends
  eq(#pl, 4)
  local shapes = {}
  for i, p in ipairs(pl) do shapes[i] = show(p:shape()) end
  eq(show(shapes), "{{2}, {2, 2}, {3}, {1}}", "ipairs")
  local idx = {}
  for i in pairs(pl) do idx[#idx + 1] = i end
  eq(show(idx), "{1, 2, 3, 4}", "pairs")
  pl:extend({st.ones(1)})
  eq(#pl, 5)
  pl[3] = st.full({3}, 5)                         -- replaces in place
  check(pl[3], {5, 5, 5})
  eq(pl[3].requires_grad, true)
  local Net = nn.Module:extend("PLNet")
  function Net:__init() self.ws = pl; self.fc = nn.Linear(1, 1) end
  local net = Net()
  eq(show(net:state_dict_keys()), "{ws.1, ws.2, ws.3, ws.4, ws.5, fc.weight, fc.bias}")
  eq(show(net:state_dict_keys({to = "torch"})), "{ws.0, ws.1, ws.2, ws.3, ws.4, fc.weight, fc.bias}")
  eq(#net:parameters(), 7)
  local loss = (pl[1] * pl[2][1]):sum() + pl[4]:sum() * 3
  loss:backward()
  check(pl[1].grad, {2, 2}); check(pl[2].grad, {{1, 1}, {0, 0}}); check(pl[4].grad, {3})
  net:double()
  eq(pl[2]:dtype(), "f64", "to(dtype) reaches the list")
  eq(tostring(nn.ParameterList({st.ones(2, 3)})), "ParameterList((1): Parameter containing: [f32 of size 2x3])")
  raises(function() pl[7] = st.ones(1) end, "ParameterList: index 7 out of range (5 items; n + 1 appends)")
  raises(function() pl[0] = st.ones(1) end, "index 0 out of range")
  raises(function() pl[1] = 3 end, "ParameterList: item 1 must be a tensor, got a number (3)")
  raises(function() pl[1] = nil end, "items cannot be removed")
  raises(function() pl[1.5] = st.ones(1) end, "ParameterList: index must be an integer, got a number (1.5)")
  raises(function() pl.extra = st.ones(1):requires_grad_() end, "items are set by position")
  raises(function() pl:append("w") end, "ParameterList:append: expected a tensor, got a string (w)")
  raises(function() nn.ParameterList({st.ones(1), 2}) end, "ParameterList: item 2 must be a tensor, got a number (2)")
  raises(function() nn.ParameterList(st.ones(1)) end, "ParameterList: expected an array of tensors, got a tensor (1)")
  eq(#pl, 5, "nothing registered by the failed calls")
end)

test("ParameterDict", function()
  local pd = nn.ParameterDict({{"scale", st.ones(3)}, {"shift", st.zeros(3)}})
  eq(show(pd:keys()), "{scale, shift}")
  eq(pd.scale.requires_grad, true)
  pd.gate = st.full({1}, 0.5)
  eq(#pd, 3)
  eq(show(names(pairs(pd))), "{scale, shift, gate}")
  local m = nn.Module()
  m.p = pd
  eq(show(m:state_dict_keys()), "{p.scale, p.shift, p.gate}")
  eq(#m:parameters(), 3)
  pd.shift = nil
  eq(show(pd:keys()), "{scale, gate}")
  check(pd:pop("gate"), {0.5})
  eq(#pd, 1)
  raises(function() pd.w = nn.ReLU() end, "ParameterDict: value for key \"w\" must be a tensor, got a module (ReLU)")
  raises(function() pd.parameters = st.ones(1) end, "key \"parameters\" is the name of a method or field")
  raises(function() return pd[2] end, "ParameterDict: keys are strings")
  raises(function() pd:pop("nope") end, "ParameterDict:pop: no key \"nope\" (keys: \"scale\")")
end)

test("Sequential and ModuleList: item assignment, insert, extend, errors", function()
  local seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
  seq[2] = nn.Tanh()                              -- replaces
  eq(getmetatable(seq[2]).__name, "Tanh")
  seq[3] = nn.Identity()                          -- appends
  eq(#seq, 3)
  eq(show(seq:state_dict_keys()), "{1.weight, 1.bias}")
  local ml = nn.ModuleList({nn.ReLU()})
  ml:insert(1, nn.Tanh())
  ml:extend({nn.Identity(), nn.Sigmoid()})
  ml:insert(-1, nn.ReLU())                        -- before the last
  local kinds = {}
  for i, m in ipairs(ml) do kinds[i] = getmetatable(m).__name end
  eq(show(kinds), "{Tanh, ReLU, Identity, ReLU, Sigmoid}")
  eq(show(names(ml:named_children())), "{1, 2, 3, 4, 5}")
  raises(function() ml[9] = nn.ReLU() end, "ModuleList: index 9 out of range (5 items; n + 1 appends)")
  raises(function() ml[1] = 3 end, "ModuleList: item 1 must be a module, got a number (3)")
  raises(function() ml[1] = nil end, "items cannot be removed")
  raises(function() ml:insert(8, nn.ReLU()) end, "ModuleList:insert: index 8 out of range 1..6 (or -5..-1)")
  raises(function() ml:insert(-6, nn.ReLU()) end, "ModuleList:insert: index -6 out of range")
  raises(function() ml:append(st.ones(1)) end, "ModuleList:append: expected a module, got a tensor (1)")
  raises(function() nn.ModuleList({nn.ReLU(), 4}) end, "ModuleList: item 2 is not a module")
  eq(#ml, 5)
end)

-- A model with every kind of list nesting and the torch names written out by hand.
local function nested()
  local m = nn.Module()
  m.stem = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(),
    nn.Sequential(nn.Linear(4, 4, {bias = false}), nn.ModuleList({nn.LayerNorm(4)})))
  m.heads = nn.ModuleDict({{"cls", nn.Linear(4, 2)}})
  m.extra = nn.ParameterList({st.zeros(2)})
  m.rnn = nn.ModuleList({nn.GRU(4, 2)})
  return m
end
local TORCH_KEYS = {
  "stem.0.weight", "stem.0.bias", "stem.1.weight", "stem.1.bias", "stem.1.running_mean", "stem.1.running_var",
  "stem.1.num_batches_tracked", "stem.3.0.weight", "stem.3.1.0.weight", "stem.3.1.0.bias", "heads.cls.weight",
  "heads.cls.bias", "extra.0", "rnn.0.weight_ih_l0", "rnn.0.weight_hh_l0", "rnn.0.bias_ih_l0", "rnn.0.bias_hh_l0",
}

test("state_dict({to = 'torch'}) and load_state_dict(sd, {from = 'torch'}): names and round trip", function()
  st.manual_seed(5)
  local a, b = nested(), nested()
  eq(show(a:state_dict_keys({to = "torch"})), show(TORCH_KEYS))
  local sd = a:state_dict({to = "torch"})
  eq(show(sorted_keys(sd)), show((function() local k = {table.unpack(TORCH_KEYS)} table.sort(k) return k end)()))
  assert(rawequal(sd["stem.3.0.weight"], a.stem[4][1].weight), "the live tensors")
  st.no_grad(function() a.stem[2].running_mean:fill_(0.25); a.extra[1]:fill_(3) end)
  local missing, unexpected = b:load_state_dict(sd, {from = "torch"})
  eq(#missing + #unexpected, 0)
  for _, k in ipairs(a:state_dict_keys()) do
    check(b:state_dict()[k], a:state_dict()[k], 0, k)
  end
  check(b.extra[1], {3, 3}, 0, "ParameterList item")
  check(b.stem[2].running_mean, {0.25, 0.25, 0.25, 0.25}, 0, "BatchNorm running_mean")
  -- through a file as well
  local path = os.tmpname()
  st.save(path, a:state_dict({to = "torch"}))
  local c = nested()
  c:load_state_dict(st.load(path), {from = "torch", strict = true})
  os.remove(path)
  check(c.stem[1].weight, a.stem[1].weight, 0)
  -- half-precision checkpoints are cast to the model's dtype
  local lin = nn.Linear(2, 2)
  lin:load_state_dict({weight = st.full({2, 2}, 1.5):to("f16"), bias = st.full({2}, -2):to("bf16")}, {from = "torch"})
  check(lin.weight, {{1.5, 1.5}, {1.5, 1.5}}, 0); check(lin.bias, {-2, -2}, 0); eq(lin.weight:dtype(), "f32")
  -- the stitch names still load as before (default, false, {strict = false})
  nested():load_state_dict(a:state_dict())
  nested():load_state_dict(a:state_dict(), false)
  nested():load_state_dict(a:state_dict(), {strict = false, from = "stitch"})
end)

test("load_state_dict from torch: errors name the keys and both shapes", function()
  local m = nested()
  local sd = {}
  for k, v in pairs(m:state_dict({to = "torch"})) do sd[k] = v end
  sd["stem.3.1.0.bias"] = nil
  sd["stem.9.weight"] = st.ones(1)
  sd["stem.0.weight"] = st.ones(4, 5)
  local err = raises(function() m:load_state_dict(sd, {from = "torch"}) end, "load_state_dict(Module): ")
  for _, s in ipairs({'missing keys: "stem.3.1.0.bias"', 'unexpected keys: "stem.9.weight"',
      'shape mismatch for "stem.0.weight" (the model\'s "stem.1.weight"): the checkpoint has (4, 5), the model (4, 3)'}) do
    assert(err:find(s, 1, true), "error lists " .. s .. ": " .. err)
  end
  -- not strict: the lists come back in the checkpoint's names; the shape mismatch is still an error
  sd["stem.0.weight"] = m.stem[1].weight
  local missing, unexpected = m:load_state_dict(sd, {from = "torch", strict = false})
  eq(show(missing), "{stem.3.1.0.bias}"); eq(show(unexpected), "{stem.9.weight}")
  -- PyTorch's names loaded without from = "torch": the error says so
  err = raises(function() m:load_state_dict(m:state_dict({to = "torch"})) end, 'missing keys: "stem.2.weight"')
  assert(err:find('load_state_dict(sd, {from = "torch"})', 1, true), err)
  -- options are checked
  raises(function() m:load_state_dict(sd, {form = "torch"}) end, "load_state_dict: unknown option 'form' (known: from, strict)")
  raises(function() m:load_state_dict(sd, {from = "pytorch"}) end, "load_state_dict: from must be \"stitch\" or \"torch\", got pytorch")
  raises(function() m:load_state_dict(sd, {strict = "yes"}) end, "load_state_dict: strict must be a boolean, got yes")
  raises(function() m:state_dict({to = "onnx"}) end, "state_dict: to must be \"stitch\" or \"torch\", got onnx")
  raises(function() m:state_dict({from = "torch"}) end, "state_dict: unknown option 'from' (known: to)")
  raises(function() m:load_state_dict(m) end, "load_state_dict: expected a table name -> tensor, got a module")
end)

H.done()
