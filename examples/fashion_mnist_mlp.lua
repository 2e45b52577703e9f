-- fashion_mnist_mlp.lua — train an MLP (784-256-128-10, ReLU) on Fashion-MNIST with Adam.
-- Run: build/stitch examples/fashion_mnist_mlp.lua [--batch N] [--epochs N] [--lr X] [--seed N]
-- Prints per epoch the mean train loss, the test accuracy and the training throughput; the last line
-- is exactly `test accuracy: 0.XXXX`. Needs the Debian package dataset-fashion-mnist (or
-- $FASHION_MNIST_DIR pointing at the four .gz files).
local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/fashion_mnist_common.lua")
local opts = common.options({ epochs = 5, batch = 128, lr = 1e-3, seed = 1 }, "fashion_mnist_mlp.lua")
local nn = st.nn
st.manual_seed(opts.seed)
local train, test = common.load("flat")

local model = nn.Sequential(
  nn.Linear(784, 256), nn.ReLU(),
  nn.Linear(256, 128), nn.ReLU(),
  nn.Linear(128, 10))
local opt = st.optim.Adam(model:parameters(), { lr = opts.lr })
local loader = st.data.DataLoader(train, { batch_size = opts.batch, shuffle = true, seed = opts.seed })
-- cosine decay of the learning rate to 0 over the whole run, after a short warmup
local sched = st.optim.CosineWarmup(opt, { warmup_steps = 100, total_steps = opts.epochs * #loader })
common.train(model, opt, sched, loader, train.x:size(1), test, opts, 1000)
