-- fashion_mnist_resnet.lua — train a small ResNet on Fashion-MNIST with SGD (momentum, weight decay)
-- and a one-cycle learning rate:
--   stem: conv 1->W 3x3 pad 1, BatchNorm, ReLU                      (W, 28, 28)
--   stage 1: a residual block of W channels                          (W, 28, 28)
--   stage 2: a residual block to 2W channels, stride 2               (2W, 14, 14)
--   stage 3: a residual block to 4W channels, stride 2               (4W, 7, 7)
--   global average pool, linear 4W->10
-- A block is conv 3x3, BatchNorm, ReLU, conv 3x3, BatchNorm, plus its input (through a 1x1 conv
-- and BatchNorm when the shape changes), ReLU. Training images are flipped left-right at random;
-- --shift S also shifts each batch by up to S pixels (zero padding; one shift per batch): off by
-- default, as within 10 epochs it costs accuracy (0.9252 with --shift 2 against 0.9343 without,
-- bench/NOTES.md twentieth pass).
-- Run: build/stitch examples/fashion_mnist_resnet.lua [--batch N] [--epochs N] [--lr X] [--seed N]
--      [--width W] [--shift S]
-- Prints per epoch the mean train loss, the test accuracy, the time and the training throughput;
-- the last line is exactly `test accuracy: 0.XXXX`. Needs the Debian package dataset-fashion-mnist
-- (or $FASHION_MNIST_DIR pointing at the four .gz files).
local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/fashion_mnist_common.lua")
local opts = common.options({ epochs = 10, batch = 128, lr = 0.2, width = 24, seed = 1, shift = 0 }, "fashion_mnist_resnet.lua")
if math.type(opts.shift) ~= "integer" or opts.shift < 0 then
  error("fashion_mnist_resnet.lua: --shift must be an integer >= 0, got " .. tostring(opts.shift), 0)
end
local nn, F = st.nn, st.nn.functional
st.manual_seed(opts.seed)
math.randomseed(opts.seed)
local train, test = common.load("image")

-- A residual block: cin -> cout channels, the first conv with `stride`.
local Block = nn.Module:extend("Block")
function Block:__init(cin, cout, stride)
  self.conv1 = nn.Conv2d(cin, cout, 3, { stride = stride, padding = 1, bias = false })
  self.bn1 = nn.BatchNorm2d(cout)
  self.conv2 = nn.Conv2d(cout, cout, 3, { padding = 1, bias = false })
  self.bn2 = nn.BatchNorm2d(cout)
  if stride ~= 1 or cin ~= cout then
    self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, { stride = stride, bias = false }), nn.BatchNorm2d(cout))
  end
end
function Block:forward(x)
  local h = F.relu(self.bn1(self.conv1(x)))
  h = self.bn2(self.conv2(h))
  return F.relu(h + (self.short and self.short(x) or x))
end

local w = opts.width
local model = nn.Sequential(
  nn.Conv2d(1, w, 3, { padding = 1, bias = false }), nn.BatchNorm2d(w), nn.ReLU(),
  Block(w, w, 1), Block(w, 2 * w, 2), Block(2 * w, 4 * w, 2),
  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 10))
local nparams = 0
for _, p in ipairs(model:parameters()) do nparams = nparams + p:numel() end
print(string.format("ResNet, width %d: %d parameters", w, nparams))

local opt = st.optim.SGD(model:parameters(), { lr = opts.lr, momentum = 0.9, weight_decay = 5e-4, nesterov = true })
local loader = st.data.DataLoader(train, { batch_size = opts.batch, shuffle = true, seed = opts.seed })
local sched = st.optim.OneCycleLR(opt, { max_lr = opts.lr, total_steps = opts.epochs * #loader })

-- The batch flipped left-right where a per-image coin says so, then (--shift S > 0) shifted by
-- (dy, dx) in [-S, S] (zero padding, the same shift for the whole batch). Realized on its own (a
-- small flush): left lazy, the first convolution would evaluate the flip's gather under each of
-- its 9 taps.
local function augment(xb)
  local n = xb:size(1)
  local coin = st.rand({ n, 1, 1, 1 }):lt(0.5)
  xb = st.where(coin, xb:flip(4), xb)
  local s = opts.shift
  if s == 0 then return st.sync(xb) end
  local dy, dx = math.random(0, 2 * s), math.random(0, 2 * s)
  local h, wd = xb:size(3), xb:size(4)
  return st.sync(xb:pad({ s, s, s, s }):narrow(3, dy + 1, h):narrow(4, dx + 1, wd))
end

common.train(model, opt, sched, loader, train.x:size(1), test, opts, 500, augment)
