-- test_soak.lua — a small model's training loop, run as a user writes it (default settings: its
-- regions are small enough for the interpreter tier), stays cheap and flat (DESIGN.md invariants
-- 4 and 5; docs/fusion.md "Plan cache"; bench/soak.lua is the long version):
--   - 2,000 identical steps build no plan after the third, compile nothing after the first hot
--     one (ST_JIT_HOT), and stop running groups through the interpreter;
--   - what the runtime holds (trace nodes, plan-cache entries and bytes, tensor bytes, the Lua
--     heap) and the process's RSS do not grow between step 500 and step 2,000.
-- The loop never calls collectgarbage: dead handles are the frontend's business (lhelp.c
-- lt_gc_feed), and before that they piled up until ST_TRACE_MAX flushed them all as one region.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn, F = st.nn, st.nn.functional

local STEPS = 2000

local function rss_mb()
  local f = io.open("/proc/self/statm")
  if not f then return nil end
  local pages = tonumber(f:read("l"):match("^%d+%s+(%d+)"))
  f:close()
  return pages * 4096 / 1048576
end

st.manual_seed(3)
local l1, l2 = nn.Linear(16, 32), nn.Linear(32, 4)
local params = l1:parameters()
for _, p in ipairs(l2:parameters()) do params[#params + 1] = p end
local opt = st.optim.AdamW(params, { lr = 1e-3 })
local x, y = st.sync(st.randn(8, 16)), st.sync(st.randn(8, 4))

local per_step = {}   -- plans built, kernels compiled, interpreter groups, flushes per step
local at = {}         -- snapshots: step -> {stats, rss}
local first_loss, loss_v
for s = 1, STEPS do
  local s0 = st.stats()
  opt:zero_grad()
  local loss = F.mse_loss(l2(F.relu(l1(x))), y)
  loss:backward()
  opt:step({ loss })
  loss_v = loss:item()
  first_loss = first_loss or loss_v
  local s1 = st.stats()
  per_step[s] = { built = s1.plans_built - s0.plans_built, compiled = s1.kernels_compiled - s0.kernels_compiled,
                  interp = s1.interp_groups - s0.interp_groups, flushes = s1.flushes - s0.flushes }
  if s == 500 or s == STEPS then at[s] = { stats = s1, rss = rss_mb(), lua_kb = collectgarbage("count") } end
end

H.test("2000 identical steps build no plan after the third", function()
  if st.eager() then print("SKIP " .. "2000 identical steps build no plan after the third" .. ": eager mode has no flushes") return end
  for s = 1, 5 do
    local r = per_step[s]
    print(string.format("  step %d: %d plans built, %d kernels compiled, %d interpreter groups, %d flushes", s,
      r.built, r.compiled, r.interp, r.flushes))
  end
  local built, compiled, interp, flushes = 0, 0, 0, 0
  for s = 4, STEPS do
    built = built + per_step[s].built
    flushes = flushes + per_step[s].flushes
    if s > 10 then
      compiled = compiled + per_step[s].compiled
      interp = interp + per_step[s].interp
    end
  end
  H.eq(built, 0, "plans built over steps 4.." .. STEPS)
  H.eq(flushes, STEPS - 3, "one flush per step (no automatic flush of dead handles' work)")
  H.eq(compiled, 0, "kernels compiled over steps 11.." .. STEPS)
  H.eq(interp, 0, "interpreter-tier groups over steps 11.." .. STEPS .. " (the step's plan is hot)")
  assert(loss_v < first_loss, "the model trains: " .. first_loss .. " -> " .. loss_v)
end)

H.test("memory does not grow from step 500 to step 2000", function()
  local a, b = at[500], at[STEPS]
  local function show(what, u, v) print(string.format("  %-20s %12s -> %12s", what, tostring(u), tostring(v))) end
  show("nodes_live", a.stats.nodes_live, b.stats.nodes_live)
  show("nodes_pending", a.stats.nodes_pending, b.stats.nodes_pending)
  show("plan_cache_entries", a.stats.plan_cache_entries, b.stats.plan_cache_entries)
  show("plan_cache_bytes", a.stats.plan_cache_bytes, b.stats.plan_cache_bytes)
  show("bytes_in_use", a.stats.bytes_in_use, b.stats.bytes_in_use)
  show("lua heap KB", math.floor(a.lua_kb), math.floor(b.lua_kb))
  show("rss MB", a.rss and string.format("%.1f", a.rss), b.rss and string.format("%.1f", b.rss))
  -- dead handles between full collections (lt_gc_feed: at most ~8192 nodes recorded): a bound,
  -- not a growth; the plan cache holds the few structures of the first steps and nothing more
  assert(b.stats.nodes_live < 12000, "nodes alive at step " .. STEPS .. ": " .. b.stats.nodes_live)
  assert(b.stats.nodes_pending < 12000, "nodes pending at step " .. STEPS .. ": " .. b.stats.nodes_pending)
  H.eq(b.stats.plan_cache_entries, a.stats.plan_cache_entries, "plan cache entries")
  H.eq(b.stats.plan_cache_bytes, a.stats.plan_cache_bytes, "plan cache bytes")
  assert(b.stats.bytes_in_use < 1 << 20, "tensor bytes in use: " .. b.stats.bytes_in_use)
  assert(b.lua_kb < 4096, "Lua heap: " .. b.lua_kb .. " KB")
  -- RSS: 4 MB of slack (allocator noise); under AddressSanitizer freed memory sits in quarantine
  local maps = io.open("/proc/self/maps")
  local sanitized = maps and maps:read("a"):find("libasan", 1, true)
  if maps then maps:close() end
  if sanitized then print("  (AddressSanitizer: RSS not checked)") end
  if a.rss and b.rss and not sanitized then
    assert(b.rss - a.rss < 4, string.format("RSS grew %.1f MB from step 500 to %d", b.rss - a.rss, STEPS))
  end
end)

H.done()
