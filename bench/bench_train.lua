-- bench_train.lua — one MLP training step in stitch: batch 128, 784-256-128-10 with ReLU,
-- cross_entropy (mean), Adam lr 1e-3; forward + backward + optimizer step (st.nn + st.optim).
-- Run: build/stitch bench/bench_train.lua RESULTS_FILE [--quick]     (bench/run.sh does)
--
-- One timed step = opt:zero_grad(); loss = cross_entropy(model(x), y); loss:backward();
-- opt:step(loss) — step() updates the parameters and the Adam state in place and realizes them,
-- and the loss, in one flush, so the step's work is finished when the clock stops (no read-back
-- of the loss: PyTorch's twin does not call .item() either). The batch is the same realized
-- tensor every step (data loading is not part of the step, in either bench).
-- Warm-up steps first (the first compiles the step's kernels: reported apart as the cold step),
-- then STEPS timed one by one: the median is the figure (the machine is shared; best is printed
-- too). Kernels per step: the delta of st.stats().kernels_launched over the timed steps / STEPS.
-- Writes `key value` lines (train_<n>t_* instead of train_* under ST_THREADS=n): train_ms (median),
-- train_best_ms, train_cold_ms, train_kernels, train_flushes, train_interp (interpreted groups per
-- step), train_nodes (trace nodes recorded per step), train_exec_ms (st.stats().exec_ms per step:
-- time in kernels, mean), train_record_ms (median time to record forward + loss + backward, before
-- opt:step), train_loss (last loss, a sanity check: the same batch every step, so it falls to ~0).
local out_path, quick -- no RESULTS_FILE: print only
for _, a in ipairs(arg) do
  if a == "--quick" then quick = true else out_path = a end
end
local WARM, STEPS = 5, quick and 20 or 50
-- With ST_THREADS=n in the environment the keys are train_<n>t_ms, ... (run.sh runs a 1-thread twin).
local threads = os.getenv("ST_THREADS")
local prefix = threads and threads:match("^%d+$") and ("train_" .. threads .. "t_") or "train_"

local now = st._now or function() -- st._now: CLOCK_MONOTONIC seconds (lua_frontend/llib.c)
  local p = assert(io.popen("date +%s%N"))
  local s = p:read("l")
  p:close()
  return tonumber(s) * 1e-9
end

local nn, F = st.nn, st.nn.functional
st.manual_seed(0)
local model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
  nn.Linear(128, 10))
local opt = st.optim.Adam(model:parameters(), {lr = 1e-3})
local x = st.rand(128, 784)
local y = st.randint(1, 10, {128})
st.sync(x, y, table.unpack(model:parameters()))

local loss, t_rec
local function step()
  opt:zero_grad()
  loss = F.cross_entropy(model(x), y)
  loss:backward()
  t_rec = now() -- forward + backward recorded (lazy: nothing has run yet)
  opt:step(loss)
end

local t0 = now()
step()
local cold_ms = (now() - t0) * 1e3
for _ = 2, WARM do step() end

collectgarbage()
local s0 = st.stats()
local times, recs = {}, {}
for i = 1, STEPS do
  local a = now()
  step()
  times[i] = (now() - a) * 1e3
  recs[i] = (t_rec - a) * 1e3
end
local s1 = st.stats()
local function median_of(v)
  table.sort(v)
  return #v % 2 == 1 and v[(#v + 1) // 2] or (v[#v // 2] + v[#v // 2 + 1]) / 2
end
local median, rec_ms = median_of(times), median_of(recs)
local kernels = (s1.kernels_launched - s0.kernels_launched) / STEPS
local flushes = (s1.flushes - s0.flushes) / STEPS
local interp = (s1.interp_groups - s0.interp_groups) / STEPS
local nodes = (s1.nodes_recorded - s0.nodes_recorded) / STEPS
local exec_ms = (s1.exec_ms - s0.exec_ms) / STEPS
local last_loss = loss:item()

print(string.format("  stitch%s: %.3f ms/step median (best %.3f, worst %.3f; %d steps after %d warm-up), "
  .. "cold first step %.0f ms; %.1f kernels/step, %.1f flushes/step, %.1f interpreted groups/step; "
  .. "%.0f nodes recorded/step, %.3f ms/step in kernels (mean); recording forward + backward %.3f ms "
  .. "(median); loss %.4f",
  threads and (" (ST_THREADS=" .. threads .. ")") or "", median, times[1], times[STEPS],
  STEPS, WARM, cold_ms, kernels, flushes, interp, nodes, exec_ms, rec_ms, last_loss))
if not out_path then return end
local f = assert(io.open(out_path, "w"))
local lines = string.format("train_ms %.6f\ntrain_best_ms %.6f\ntrain_cold_ms %.3f\ntrain_kernels %.3f\n"
  .. "train_flushes %.3f\ntrain_interp %.3f\ntrain_nodes %.1f\ntrain_exec_ms %.6f\n"
  .. "train_record_ms %.6f\ntrain_loss %.6f\n",
  median, times[1], cold_ms, kernels, flushes, interp, nodes, exec_ms, rec_ms, last_loss)
f:write((lines:gsub("train_", prefix)))
f:close()
