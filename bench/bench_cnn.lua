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
local quick = false
for _, a in ipairs(arg) do
  if a == "--quick" then quick = true else error("bench_cnn.lua: unknown argument " .. a .. " (--quick)") end
end
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
local model = nn.Sequential(
  nn.Conv2d(3, 32, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
  nn.Conv2d(32, 64, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
  nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
local opt = st.optim.SGD(model:parameters(), {lr = 0.01, momentum = 0.9})
local x = st.rand(64, 3, 32, 32) - 0.5
local y = st.randint(1, 10, {64})
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
print(string.format("cnn_stitch ms=%.3f best=%.3f cold=%.0f kernels=%.1f rss_mb=%.1f bytes_peak_mb=%.1f loss=%.5f",
  times[(STEPS + 1) // 2], times[1], cold_ms, (s1.kernels_launched - s0.kernels_launched) / STEPS,
  (hwm - rss0) / 1024, s1.bytes_peak / 2^20, loss:item()))
