-- demo.lua — the main job for now: train a softmax-regression classifier on a synthetic dataset
-- with hand-written gradients (autograd arrives later), then report accuracy.
-- Run: build/stitch examples/demo.lua [--steps N]
local steps = 300
for i = 1, #arg do
  if arg[i] == "--steps" then steps = tonumber(arg[i + 1]) end
end

st.manual_seed(42)
local N, D, C = 4096, 32, 8
-- Ground truth: a random linear map; labels are the argmax of noisy scores.
local W_true = st.randn(D, C)
local X = st.randn(N, D)
local scores = X:matmul(W_true) + st.randn(N, C) * 0.5
local _, y = scores:max(2)                      -- 1-based class ids, shape (N)
local Y = st.one_hot(y, C):float()              -- (N, C)

local W = st.zeros(D, C)
local b = st.zeros(C)
local lr = 0.5
local t0 = os.clock()
for step = 1, steps do
  local logits = X:matmul(W) + b                -- (N, C)
  local p = logits:softmax(2)                   -- (N, C)
  local g = (p - Y) / N                         -- dLoss/dlogits
  W:sub_(X:t():matmul(g) * lr)
  b:sub_(g:sum(1) * lr)
  if step % 50 == 0 or step == steps then
    local loss = -(Y * logits:log_softmax(2)):sum() / N
    local _, pred = logits:max(2)
    local acc = pred:eq(y):float():mean()
    print(string.format("step %4d  loss %.4f  train accuracy %.4f", step, loss:item(), acc:item()))
  end
end
local s = st.stats()
print(string.format("%d steps in %.2f s cpu; %d flushes, %d kernels launched, %d compiled",
  steps, os.clock() - t0, s.flushes, s.kernels_launched, s.kernels_compiled))
