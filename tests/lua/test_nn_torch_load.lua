-- test_nn_torch_load.lua — issue 14 item 6: weights PyTorch trained and saved load into the same
-- stitch model in one call, load_state_dict(sd, {from = "torch"}), and the model then gives
-- PyTorch's outputs (within 1e-5). The file holds, for each model NAME, PyTorch's state_dict as
-- "NAME/<key>", inputs "NAME/@in1", ... and PyTorch's outputs "NAME/@out1", ... (written by
-- tests/parity/torch_nn_models.py: nested Sequential with BatchNorm1d, a conv net with BatchNorm2d,
-- a 2-layer bidirectional LSTM, a batch_first GRU saved in f64, MultiheadAttention, a norm_first
-- TransformerEncoderLayer, a module with Embedding, ModuleList, ParameterList and ModuleDict).
--
-- Usage: stitch tests/lua/test_nn_torch_load.lua [FILE [DIR]]
--   FILE defaults to the committed tests/parity/torch_nn_models.safetensors (so this runs where
--   torch is missing); tests/run_torch_load.sh passes a file PyTorch has just written and DIR, into
--   which each model's state_dict({to = "torch"}) is saved for PyTorch to load back (strict).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn = st.nn
local test, eq, check = H.test, H.eq, H.check_near

local here = arg[0]:match("(.*/)") or "./"
local path = arg[1] or here .. "../parity/torch_nn_models.safetensors"
local back_dir = arg[2]
local all = st.load(path)

-- The state_dict, inputs and outputs of one model in the file.
local function group(name)
  local sd, ins, outs = {}, {}, {}
  for k, v in pairs(all) do
    local g, rest = k:match("^([^/]+)/(.*)$")
    if g == name then
      local kind, i = rest:match("^@(%a+)(%d+)$")
      if kind == "in" then ins[tonumber(i)] = v:to(st.device())   -- st.load reads to the CPU
      elseif kind == "out" then outs[tonumber(i)] = v
      else sd[rest] = v end
    end
  end
  assert(next(sd), "no model " .. name .. " in " .. path)
  return sd, ins, outs
end

local Custom = nn.Module:extend("Custom")
function Custom:__init()
  self.emb = nn.Embedding(6, 4)
  self.layers = nn.ModuleList({nn.Linear(4, 4), nn.Linear(4, 4)})
  self.scales = nn.ParameterList({st.randn(4), st.randn(4)})
  self.heads = nn.ModuleDict({a = nn.Linear(4, 2), b = nn.Linear(4, 3)})
end
function Custom:forward(idx)
  local x = self.emb(idx)
  for i, layer in ipairs(self.layers) do x = layer(x):tanh() * self.scales[i] end
  return st.cat({self.heads.a(x), self.heads.b(x)}, -1)
end

-- name -> {make, run}: run(m, inputs) returns the outputs in the file's order.
local MODELS = {
  mlp = {function()
    return nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(),
      nn.Sequential(nn.Linear(8, 6), nn.GELU(), nn.LayerNorm(6)), nn.Linear(6, 3))
  end},
  conv = {function()
    return nn.Sequential(nn.Conv2d(2, 4, 3, {padding = 1}), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
      nn.Flatten(), nn.Linear(16, 3))
  end},
  lstm = {function() return nn.LSTM(3, 3, {num_layers = 2, bidirectional = true}) end,
    function(m, x)
      local y, hc = m(x[1])
      return {y, hc[1], hc[2]}
    end},
  -- saved in f64 by PyTorch: loaded (cast) into an f32 model, run in f32
  gru = {function() return nn.GRU(3, 4, {batch_first = true}) end,
    function(m, x) return {m(x[1]:float())} end},
  mha = {function() return nn.MultiheadAttention(4, 2) end,
    function(m, x) return {m(x[1], x[2], x[3])} end},
  encoder = {function()
    return nn.TransformerEncoderLayer(4, 2, {dim_feedforward = 8, batch_first = true, norm_first = true,
      activation = "gelu"})
  end},
  -- PyTorch's indices count from 0
  custom = {Custom, function(m, x) return {m(x[1] + 1)} end},
}
local ORDER = {"mlp", "conv", "lstm", "gru", "mha", "encoder", "custom"}

for _, name in ipairs(ORDER) do
  test(name .. ": PyTorch's state_dict loads with {from = 'torch'} and gives PyTorch's outputs", function()
    local sd, ins, outs = group(name)
    local make, run = MODELS[name][1], MODELS[name][2] or function(m, x) return {m(x[1])} end
    local m = make():eval()
    local missing, unexpected = m:load_state_dict(sd, {from = "torch"})   -- strict: every key matched
    eq(#missing + #unexpected, 0, "missing and unexpected keys")
    -- every tensor is PyTorch's (cast to the model's dtype)
    local own = m:state_dict({to = "torch"})
    for k, v in pairs(sd) do check(own[k]:double(), v:double(), 1e-7, k) end
    local got = run(m, ins)
    eq(#got, #outs, "number of outputs")
    for i = 1, #outs do
      eq(H.show(got[i]:shape()), H.show(outs[i]:shape()), "output " .. i .. " shape")
      check(got[i]:double(), outs[i]:double(), 1e-5, name .. " output " .. i)
    end
    if back_dir then st.save(back_dir .. "/" .. name .. ".safetensors", m:state_dict({to = "torch"})) end
  end)
end

test("BatchNorm's running statistics and num_batches_tracked come from the file", function()
  local sd = group("mlp")
  local m = MODELS.mlp[1]()
  m:load_state_dict(sd, {from = "torch"})
  eq(m[2].num_batches_tracked:dtype(), "i64")
  eq(m[2].num_batches_tracked:item(), 3, "three training batches in PyTorch")
  check(m[2].running_var, sd["1.running_var"], 0)
  assert(not H.near(m[2].running_mean, st.zeros(8), 1e-3), "not the initial statistics")
end)

test("the same file without {from = 'torch'}, or into another model: errors naming the keys", function()
  local sd = group("mlp")
  local err = H.raises(function() MODELS.mlp[1]():load_state_dict(sd) end, "load_state_dict(Sequential): ")
  assert(err:find('load_state_dict(sd, {from = "torch"})', 1, true), "the hint: " .. err)
  local other = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(),
    nn.Sequential(nn.Linear(8, 7), nn.GELU(), nn.LayerNorm(7)), nn.Linear(7, 3))
  err = H.raises(function() other:load_state_dict(sd, {from = "torch"}) end,
    'shape mismatch for "3.0.weight" (the model\'s "4.1.weight"): the checkpoint has (6, 8), the model (7, 8)')
  assert(err:find('shape mismatch for "4.weight" (the model\'s "5.weight"): the checkpoint has (3, 6), the model (3, 7)',
    1, true), err)
end)

H.done()
