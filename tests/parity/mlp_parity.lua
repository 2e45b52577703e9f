-- mlp_parity.lua — the stitch half of the PyTorch parity test (tests/run_torch_parity.sh runs it,
-- then mlp_parity.py replays the same training in PyTorch and compares).
--
-- Usage: stitch tests/parity/mlp_parity.lua DIR
-- Writes into DIR (all safetensors files use PyTorch's state_dict names, "0.weight" ... "4.bias",
-- so torch.nn.Sequential(Linear, ReLU, Linear, ReLU, Linear).load_state_dict reads them as they are):
--   init.safetensors       the initial weights (st.nn's PyTorch-style default init, seed 1234)
--   data.safetensors       "x" (20, 128, 784) f32, U(-1, 1) from st.rand, "y" (20, 128) i64 1-based
--                          classes (a random linear teacher's: a learnable task)
--   sgd_final.safetensors  the weights after 20 SGD steps (lr 0.1, momentum 0.9)
--   losses.txt             one line per step: "sgd|adam STEP LOSS" (cross_entropy, mean)
-- Invariant: both runs start from the weights read back from init.safetensors (not from the live
-- tensors, which training updates in place), so the file PyTorch reads is the start of both runs
-- and the st.save -> st.load round trip is part of what is tested.
local dir = assert(arg and arg[1], "usage: stitch mlp_parity.lua DIR")
local nn, F = st.nn, st.nn.functional

local STEPS, BATCH, CLASSES = 20, 128, 10

st.manual_seed(1234)
local model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
  nn.Linear(128, CLASSES))
st.save(dir .. "/init.safetensors", model:state_dict({to = "torch"}))   -- "0.weight" ... "4.bias"

local xs = st.rand(STEPS, BATCH, 784) * 2 - 1 -- centered: U(-1, 1)
-- Learnable labels, the classes of a random linear teacher (argmax(x W)), so training follows a
-- real gradient signal instead of memorizing noise (20 steps only move the loss a little: 2.31 ->
-- 2.27 with Adam; the comparison is per step, so that is enough).
local ys = xs:matmul(st.randn(784, CLASSES)):argmax(3)
st.save(dir .. "/data.safetensors", {x = xs, y = ys})

local out = assert(io.open(dir .. "/losses.txt", "w"))

local function train(name, make_opt)
  local init = st.load(dir .. "/init.safetensors")
  model:load_state_dict(init, {from = "torch"})
  local opt = make_opt(model:parameters())
  for i = 1, STEPS do
    opt:zero_grad()
    local loss = F.cross_entropy(model(xs[i]), ys[i])
    loss:backward()
    opt:step(loss) -- realizes parameters, optimizer state and the loss in one flush
    out:write(string.format("%s %d %.9g\n", name, i, loss:item()))
  end
end

train("sgd", function(ps) return st.optim.SGD(ps, {lr = 0.1, momentum = 0.9}) end)
st.save(dir .. "/sgd_final.safetensors", model:state_dict({to = "torch"}))
train("adam", function(ps) return st.optim.Adam(ps, {lr = 1e-3}) end)
out:close()
print("stitch: 2 x " .. STEPS .. " steps done")
