-- soak.lua — a small model trained for a long time: memory and planning must stay flat
-- (DESIGN.md invariants 4 and 5; bench/NOTES.md "Soak").
--   build/stitch bench/soak.lua [--steps N] [--every K] [--quick]     (make -C bench soak [QUICK=1])
-- A 16 -> 32 -> 4 MLP (Linear, relu, Linear, mean squared error) trained with AdamW on one batch of 8,
-- one flush per step (the loss is realized with the step). Every K steps (and after step 1) it
-- prints the process's RSS, the plans built and cached, kernels compiled, interpreter-tier groups,
-- tensor bytes in use and the mean ms per step since the previous line. The end line compares the
-- last report with the first after warm-up (step K): both RSS and plans_built should not move.
-- Defaults: 100000 steps, a line every 10000; --quick: 10000 steps, a line every 1000.
local steps, every = 100000, 10000
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--quick" then steps, every = 10000, 1000
  elseif a == "--steps" then i = i + 1; steps = assert(tonumber(arg[i]), "--steps N")
  elseif a == "--every" then i = i + 1; every = assert(tonumber(arg[i]), "--every K")
  else error("soak.lua: unknown argument " .. a .. " (--steps N, --every K, --quick)") end
  i = i + 1
end

local nn, F = st.nn, st.nn.functional
local now = st._now or os.clock -- st._now: CLOCK_MONOTONIC seconds (lua_frontend/llib.c)

-- Resident set size of this process in MB (Linux /proc; nil elsewhere).
local function rss_mb()
  local f = io.open("/proc/self/statm")
  if not f then return nil end
  local line = f:read("l")
  f:close()
  local pages = tonumber(line:match("^%d+%s+(%d+)"))
  return pages * 4096 / 1048576
end

st.manual_seed(1)
local l1, l2 = nn.Linear(16, 32), nn.Linear(32, 4)
local params = l1:parameters()
for _, p in ipairs(l2:parameters()) do params[#params + 1] = p end
local opt = st.optim.AdamW(params, { lr = 1e-3 })
local x = st.sync(st.randn(8, 16))
local y = st.sync(st.randn(8, 4))

print(string.format("soak: 16->32->4 MLP, AdamW, batch 8, %d steps (machine: %s)", steps,
  (io.popen("nproc"):read("l") or "?") .. " cores"))
print(string.format("%8s %9s %8s %9s %9s %10s %10s %9s", "step", "rss_MB", "plans", "plan_hits", "compiled",
  "interp", "in_use_B", "ms/step"))
local first, last
local t_prev, s_prev = now(), 0
local loss_v
for s = 1, steps do
  opt:zero_grad()
  local loss = F.mse_loss(l2(F.relu(l1(x))), y)
  loss:backward()
  opt:step({ loss })
  loss_v = loss:item()
  if s == 1 or s % every == 0 or s == steps then
    local t = now()
    local ms = (t - t_prev) * 1000 / (s - s_prev)
    t_prev, s_prev = t, s
    local st_ = st.stats()
    local row = { step = s, rss = rss_mb() or 0, plans = st_.plans_built, hits = st_.plan_cache_hits,
                  compiled = st_.kernels_compiled, interp = st_.interp_groups, in_use = st_.bytes_in_use, ms = ms }
    print(string.format("%8d %9.1f %8d %9d %9d %10d %10d %9.3f", row.step, row.rss, row.plans, row.hits,
      row.compiled, row.interp, row.in_use, row.ms))
    io.stdout:flush()
    if s == every then first = row end
    last = row
  end
end
if first and last and last.step > first.step then
  print(string.format("after warm-up (step %d -> %d): rss %+.1f MB, plans built %+d, kernels compiled %+d; "
    .. "final loss %.4f", first.step, last.step, last.rss - first.rss, last.plans - first.plans,
    last.compiled - first.compiled, loss_v))
end
