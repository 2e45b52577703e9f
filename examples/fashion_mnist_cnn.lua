-- fashion_mnist_cnn.lua — train a small CNN on Fashion-MNIST with Adam:
--   conv 1->16 3x3 pad 1, ReLU, maxpool 2 -> (16, 14, 14)
--   conv 16->32 3x3 pad 1, ReLU, maxpool 2 -> (32, 7, 7)
--   flatten, linear 1568->128, ReLU, linear 128->10
-- Run: build/stitch examples/fashion_mnist_cnn.lua [--batch N] [--epochs N] [--lr X] [--seed N]
-- Prints per epoch the mean train loss, the test accuracy and the training throughput; the last line
-- is exactly `test accuracy: 0.XXXX`. Needs the Debian package dataset-fashion-mnist (or
-- $FASHION_MNIST_DIR pointing at the four .gz files).
local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/fashion_mnist_common.lua")
local opts = common.options({ epochs = 5, batch = 128, lr = 1e-3, seed = 1 }, "fashion_mnist_cnn.lua")
local nn = st.nn
st.manual_seed(opts.seed)
local train, test = common.load("image")

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
common.train(model, opt, sched, loader, train.x:size(1), test, opts, 500)
