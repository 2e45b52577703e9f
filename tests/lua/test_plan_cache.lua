-- test_plan_cache.lua — the plan cache in a training loop (docs/fusion.md "Plan cache"): after the
-- first steps a step plans nothing and compiles nothing, and the losses are those of a run with
-- the cache off (ST_PLAN_CACHE=0, run as a child process of this script).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn, F = st.nn, st.nn.functional
st.set_jit_min(0) -- every region compiled from its first run (small ones would compile when hot)

local FULL, LAST, STEPS = 64, 40, 6 -- six full batches, then a partial one

-- Trains a small MLP (Linear, gelu, Linear, cross-entropy, AdamW); per step: the loss and the
-- plans built and kernels compiled by that step's flushes. sliced: the batches are views of one
-- dataset tensor at a new offset each step (narrow, as a data loader that does not shuffle), the
-- last one partial.
local function train(sliced)
  st.manual_seed(5)
  local l1, l2 = nn.Linear(48, 96), nn.Linear(96, 10)
  local params = l1:parameters()
  for _, p in ipairs(l2:parameters()) do params[#params + 1] = p end
  local opt = st.optim.AdamW(params, { lr = 1e-2 })
  local xs, ys = {}, {}
  for i = 1, STEPS + 1 do -- the batches, realized before training (as a data loader hands them)
    local b = i <= STEPS and FULL or LAST
    xs[i], ys[i] = st.sync(st.randn(b, 48)), st.sync(st.randint(1, 10, { b }))
  end
  if sliced then
    local n = STEPS * FULL + LAST
    local X, Y = st.sync(st.cat(xs, 1)), st.sync(st.cat(ys, 1))
    H.eq(X:size(1), n, "dataset rows")
    for i = 1, STEPS + 1 do
      local b = i <= STEPS and FULL or LAST
      xs[i], ys[i] = X:narrow(1, (i - 1) * FULL + 1, b), Y:narrow(1, (i - 1) * FULL + 1, b)
    end
  end
  local out = {}
  for i = 1, STEPS + 1 do
    local s0 = st.stats()
    opt:zero_grad()
    local loss = F.cross_entropy(l2(F.gelu(l1(xs[i]))), ys[i])
    loss:backward()
    opt:step({ loss })
    local l = loss:item()
    local s1 = st.stats()
    out[i] = { loss = l, built = s1.plans_built - s0.plans_built, hits = s1.plan_cache_hits - s0.plan_cache_hits,
               compiled = s1.kernels_compiled - s0.kernels_compiled,
               loaded = s1.cache_hits_disk - s0.cache_hits_disk }
  end
  return out
end

-- A matmul whose left operand is a view at a new offset each call, and in-place writes at a new
-- offset each call (SETVIEW): per call one flush; the results, and the plan cache hits.
local function slices()
  local X = st.sync(st.arange(0, 64):reshape(16, 4):float() / 8)
  local W = st.sync(st.arange(0, 12):reshape(4, 3):float() / 4 - 1)
  local r = { sums = {}, hits = 0 }
  local h0 = st.stats().plan_cache_hits
  for i = 1, 12 do
    local y = X:narrow(1, i, 4):matmul(W) * 2 + 1
    r.sums[#r.sums + 1] = y:sum():item()
  end
  local buf = st.zeros(10)
  for i = 1, 10 do
    buf[i] = i * i
    st.sync(buf)
  end
  for i = 1, 10 do r.sums[#r.sums + 1] = buf[i] end
  r.hits = st.stats().plan_cache_hits - h0
  return r
end

if arg[1] == "child" then -- the reference run (cache off): print the losses and results exactly
  for _, r in ipairs(train()) do print(string.format("%.17g", r.loss)) end
  for _, r in ipairs(train(true)) do print(string.format("%.17g", r.loss)) end
  for _, v in ipairs(slices().sums) do print(string.format("%.17g", v)) end
  os.exit(0)
end

local run = train()
local run_sliced = train(true)
local sl = slices()

H.test("steps 3.. plan nothing and compile nothing", function()
  if st.eager() then print("SKIP " .. "steps 3.. plan nothing and compile nothing" .. ": eager mode plans nothing") return end
  for i = 1, STEPS do
    print(string.format("  step %d: %d plans built, %d cached, %d kernels compiled, %d loaded from disk, loss %.6f",
      i, run[i].built, run[i].hits, run[i].compiled, run[i].loaded, run[i].loss))
  end
  -- its kernels come from the compiler or, when the run's cache already holds them (another test
  -- program, or CI's plain pass before the sanitized one), from the disk cache
  assert(run[1].built > 0 and run[1].compiled + run[1].loaded > 0, "step 1 plans and compiles (or loads)")
  for i = 3, STEPS do
    H.eq(run[i].built, 0, "plans built at step " .. i)
    H.eq(run[i].compiled, 0, "kernels compiled at step " .. i)
    H.eq(run[i].loaded, 0, "kernels loaded from disk at step " .. i)
    assert(run[i].hits > 0, "no plan cache hit at step " .. i)
  end
end)

H.test("a partial batch plans again but compiles nothing", function()
  if st.eager() then print("SKIP " .. "a partial batch plans again but compiles nothing" .. ": eager mode plans nothing") return end
  local r = run[STEPS + 1]
  print(string.format("  partial batch: %d plans built, %d cached, %d kernels compiled", r.built, r.hits,
    r.compiled))
  assert(r.built > 0, "a new batch size is a new plan")
  H.eq(r.compiled, 0, "kernels compiled for the partial batch")
end)

H.test("batches sliced at a new offset each step reuse the plan (the offset is a parameter)", function()
  if st.eager() then print("SKIP " .. "batches sliced at a new offset each step reuse the plan (the offset is a parameter)" .. ": eager mode plans nothing") return end
  for i = 1, STEPS + 1 do
    print(string.format("  step %d: %d plans built, %d cached, %d kernels compiled, loss %.6f", i,
      run_sliced[i].built, run_sliced[i].hits, run_sliced[i].compiled, run_sliced[i].loss))
  end
  for i = 3, STEPS do
    H.eq(run_sliced[i].built, 0, "plans built at step " .. i)
    assert(run_sliced[i].hits > 0, "no plan cache hit at step " .. i)
  end
  H.eq(run_sliced[STEPS + 1].compiled, 0, "kernels compiled for the partial batch")
  -- views of one dataset: the same numbers as the separate batches
  for i = 1, STEPS + 1 do H.eq(run_sliced[i].loss, run[i].loss, "sliced loss at step " .. i) end
end)

H.test("matmul operands and in-place writes at new offsets: hits, right results", function()
  if st.eager() then print("SKIP " .. "matmul operands and in-place writes at new offsets: hits, right results" .. ": eager mode plans nothing") return end
  print(string.format("  %d plan cache hits in 22 flushes", sl.hits))
  assert(sl.hits >= 15, "plan cache hits: " .. sl.hits)
  -- in-place writes: every element where it was written
  for i = 1, 10 do H.eq(sl.sums[12 + i], i * i, "buf[" .. i .. "]") end
  -- the matmul's sums differ from call to call (a stale offset would repeat one)
  for i = 2, 12 do assert(sl.sums[i] ~= sl.sums[i - 1], "matmul sum " .. i .. " repeats the last") end
end)

H.test("losses and results equal a run with the cache off", function()
  local self = arg[0]
  local exe = arg[-1] or "stitch"
  local p = assert(io.popen(string.format("ST_PLAN_CACHE=0 '%s' '%s' child", exe, self)))
  local ref = {}
  for line in p:lines() do ref[#ref + 1] = tonumber(line) end
  p:close()
  H.eq(#ref, 2 * (STEPS + 1) + 22, "numbers from the child run")
  for i = 1, STEPS + 1 do H.eq(run[i].loss, ref[i], "loss at step " .. i) end
  for i = 1, STEPS + 1 do H.eq(run_sliced[i].loss, ref[STEPS + 1 + i], "sliced loss at step " .. i) end
  for i = 1, 22 do H.eq(sl.sums[i], ref[2 * (STEPS + 1) + i], "slices result " .. i) end
end)

H.done()
