-- fashion_mnist_cnn.lua — train a small CNN on Fashion-MNIST with Adam:
--   conv 1->16 3x3 pad 1, ReLU, maxpool 2 -> (16, 14, 14)
--   conv 16->32 3x3 pad 1, ReLU, maxpool 2 -> (32, 7, 7)
--   flatten, linear 1568->128, ReLU, linear 128->10
-- Run: build/stitch examples/fashion_mnist_cnn.lua [--epochs N] [--batch N] [--lr X] [--seed N]
-- Prints per epoch the mean train loss, the test accuracy and the training throughput; the last line
-- is exactly `test accuracy: 0.XXXX`. Needs the Debian package dataset-fashion-mnist (or
-- $FASHION_MNIST_DIR pointing at the four .gz files).
local opts = { epochs = 5, batch = 128, lr = 1e-3, seed = 1 }
do
  local i = 1
  while i <= #arg do
    local k = arg[i]:match("^%-%-(%w+)$")
    if not k or opts[k] == nil or arg[i + 1] == nil then
      error("usage: fashion_mnist_cnn.lua [--epochs N] [--batch N] [--lr X] [--seed N]", 0)
    end
    opts[k] = math.tointeger(tonumber(arg[i + 1])) or tonumber(arg[i + 1])
    i = i + 2
  end
end

local nn, F = st.nn, st.nn.functional
st.manual_seed(opts.seed)

local t_load = st._now()
local train = st.data.fashion_mnist({ split = "train", shape = "image" })
local test = st.data.fashion_mnist({ split = "test", shape = "image" })
local n_train, n_test = train.x:size(1), test.x:size(1)
-- standardize the pixels with the training set's mean and std (both sets, realized once)
local mean, std = train.x:mean():item(), train.x:std():item()
train.x = st.sync((train.x - mean) / std)
test.x = st.sync((test.x - mean) / std)
-- the whole dataset on the default device (a GPU when there is one; docs/cuda.md)
local dev = st.device()
train.x, train.y, test.x, test.y = train.x:to(dev), train.y:to(dev), test.x:to(dev), test.y:to(dev)
print(string.format("Fashion-MNIST: %d train, %d test images (loaded in %.1f s), device %s", n_train, n_test,
  st._now() - t_load, dev))

local model = nn.Sequential(
  nn.Conv2d(1, 16, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
  nn.Conv2d(16, 32, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
  nn.Flatten(),
  nn.Linear(32 * 7 * 7, 128), nn.ReLU(),
  nn.Linear(128, 10))
local opt = st.optim.Adam(model:parameters(), { lr = opts.lr })
local loader = st.data.DataLoader(train, { batch_size = opts.batch, shuffle = true, seed = opts.seed })
-- cosine decay of the learning rate to 0 over the whole run, after a short warmup
local sched = st.optim.CosineWarmup(opt, { warmup_steps = 100, total_steps = opts.epochs * #loader })
local test_loader = st.data.DataLoader(test, { batch_size = 500 })

-- Accuracy on the test set: the count of correct predictions stays a tensor until one :item().
local function evaluate()
  local guard <close> = st.no_grad()
  model:eval()
  local correct = st.zeros({}, "i64")
  for xb, yb in test_loader:iter() do
    correct = correct + model(xb):argmax(2):eq(yb):sum()
    st.sync(correct)
  end
  return correct:item() / n_test
end

local acc
for epoch = 1, opts.epochs do
  model:train()
  local bar = st.progress.new(n_train, { desc = "epoch " .. epoch, unit = "img" })
  local loss_sum = st.zeros({})
  local t0 = st._now()
  for xb, yb in loader:iter() do
    opt:zero_grad()
    local loss = F.cross_entropy(model(xb), yb)
    loss:backward()
    loss_sum = loss_sum + loss:detach()
    opt:step({ loss, loss_sum }) -- the update, the loss and the running sum in one flush
    sched:step()
    bar:update(xb:size(1), { loss = loss })
  end
  local dt = st._now() - t0
  bar:close()
  acc = evaluate()
  print(string.format("epoch %d: train loss %.4f, test accuracy %.4f, %.0f images/s (%.1f s)", epoch,
    loss_sum:item() / #loader, acc, n_train / dt, dt))
end
print(string.format("test accuracy: %.4f", acc))
