-- bench_cnn.lua — the CNN training step of issue 14 in stitch: batch 64 of 3x32x32, two stages of
-- conv 3x3 (padding 1) + ReLU + max_pool 2 with 32 and 64 channels, a linear head (64*8*8 -> 10),
-- cross_entropy (mean), SGD lr 0.01 momentum 0.9. bench_cnn.py runs it and its PyTorch twin and
-- prints the ratio; alone: build/stitch bench/bench_cnn.lua [--quick]
--
-- One timed step = opt:zero_grad(); loss = cross_entropy(model(x), y); loss:backward();
-- opt:step(loss) (the update and the loss realized in one flush, as bench_train.lua). Same batch
-- every step. Memory: the peak resident set over the warm-up and timed steps above the resident
-- set before them (/proc/self/clear_refs resets the peak), and st.stats().bytes_peak.
-- Prints one line `cnn_stitch ms=.. best=.. cold=.. kernels=.. rss_mb=.. bytes_peak_mb=.. loss=..`.
-- --model resnet: the model of examples/fashion_mnist_resnet.lua instead at `--width 16` (the
-- example's default is 24 since 2026-11-30: `--width 24`; 16 keeps the bench's history
-- comparable), batch 128 of 1x28x28,
-- BatchNorm, SGD Nesterov momentum 0.9, weight decay 5e-4, lr 0.1: its training step.
local quick, which, width = false, "cnn", 16
local i = 1
while i <= #arg do
  local a, v = arg[i], arg[i + 1]
  if a == "--quick" then quick = true
  elseif a == "--model" and (v == "cnn" or v == "resnet") then which = v; i = i + 1
  elseif a == "--width" and math.tointeger(tonumber(v or "")) and tonumber(v) >= 1 then
    width = math.tointeger(tonumber(v)); i = i + 1
  else error("bench_cnn.lua: bad argument " .. a .. " (--quick, --model cnn|resnet, --width N)") end
  i = i + 1
end
if width ~= 16 and which ~= "resnet" then error("bench_cnn.lua: --width is for --model resnet") end
local WARM, STEPS = 3, quick and 5 or 20
local now = assert(st._now, "bench_cnn.lua: st._now missing")

local function status_kb(key)
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local s = f:read("a")
  f:close()
  return tonumber(s:match(key .. ":%s*(%d+)")) or 0
end

local nn, F = st.nn, st.nn.functional
st.manual_seed(0)
local model, opt, x, y
if which == "cnn" then
  model = nn.Sequential(
    nn.Conv2d(3, 32, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
  opt = st.optim.SGD(model:parameters(), {lr = 0.01, momentum = 0.9})
  x = st.rand(64, 3, 32, 32) - 0.5
  y = st.randint(1, 10, {64})
else   -- the ResNet example's model (examples/fashion_mnist_resnet.lua; keep the two in step)
  local Block = nn.Module:extend("Block")
  function Block:__init(cin, cout, stride)
    self.conv1 = nn.Conv2d(cin, cout, 3, {stride = stride, padding = 1, bias = false})
    self.bn1 = nn.BatchNorm2d(cout)
    self.conv2 = nn.Conv2d(cout, cout, 3, {padding = 1, bias = false})
    self.bn2 = nn.BatchNorm2d(cout)
    if stride ~= 1 or cin ~= cout then
      self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, {stride = stride, bias = false}), nn.BatchNorm2d(cout))
    end
  end
  function Block:forward(t)
    local h = F.relu(self.bn1(self.conv1(t)))
    h = self.bn2(self.conv2(h))
    return F.relu(h + (self.short and self.short(t) or t))
  end
  local w = width
  model = nn.Sequential(
    nn.Conv2d(1, w, 3, {padding = 1, bias = false}), nn.BatchNorm2d(w), nn.ReLU(),
    Block(w, w, 1), Block(w, 2 * w, 2), Block(2 * w, 4 * w, 2),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 10))
  opt = st.optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9, weight_decay = 5e-4, nesterov = true})
  x = st.rand(128, 1, 28, 28)
  y = st.randint(1, 10, {128})
end
st.sync(x, y, table.unpack(model:parameters()))

local loss
local function step()
  opt:zero_grad()
  loss = F.cross_entropy(model(x), y)
  loss:backward()
  opt:step(loss)
end

collectgarbage()
local rss0 = status_kb("VmRSS")
local f = io.open("/proc/self/clear_refs", "w")
if f then f:write("5"); f:close() end
local t0 = now()
step()
local cold_ms = (now() - t0) * 1e3
for _ = 2, WARM do step() end
local s0 = st.stats()
local times = {}
for i = 1, STEPS do
  local a = now()
  step()
  times[i] = (now() - a) * 1e3
end
local s1 = st.stats()
local hwm = status_kb("VmHWM")
table.sort(times)
print(string.format(which .. "_stitch ms=%.3f best=%.3f cold=%.0f kernels=%.1f rss_mb=%.1f bytes_peak_mb=%.1f loss=%.5f",
  times[(STEPS + 1) // 2], times[1], cold_ms, (s1.kernels_launched - s0.kernels_launched) / STEPS,
  (hwm - rss0) / 1024, s1.bytes_peak / 2^20, loss:item()))
