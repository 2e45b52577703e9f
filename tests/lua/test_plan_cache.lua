-- test_plan_cache.lua — the plan cache in a training loop (docs/fusion.md "Plan cache"): after the
-- first steps a step plans nothing and compiles nothing, and the losses are those of a run with
-- the cache off (ST_PLAN_CACHE=0, run as a child process of this script).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn, F = st.nn, st.nn.functional
st.set_jit_min(0) -- every region compiled from its first run (small ones would compile when hot)

local FULL, LAST, STEPS = 64, 40, 6 -- six full batches, then a partial one

-- Trains a small MLP (Linear, gelu, Linear, cross-entropy, AdamW); per step: the loss and the
-- plans built and kernels compiled by that step's flushes.
local function train()
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
               compiled = s1.kernels_compiled - s0.kernels_compiled }
  end
  return out
end

if arg[1] == "child" then -- the reference run (cache off): print the losses exactly
  for _, r in ipairs(train()) do print(string.format("%.17g", r.loss)) end
  os.exit(0)
end

local run = train()

H.test("steps 3.. plan nothing and compile nothing", function()
  for i = 1, STEPS do
    print(string.format("  step %d: %d plans built, %d cached, %d kernels compiled, loss %.6f", i,
      run[i].built, run[i].hits, run[i].compiled, run[i].loss))
  end
  assert(run[1].built > 0 and run[1].compiled > 0, "step 1 plans and compiles")
  for i = 3, STEPS do
    H.eq(run[i].built, 0, "plans built at step " .. i)
    H.eq(run[i].compiled, 0, "kernels compiled at step " .. i)
    assert(run[i].hits > 0, "no plan cache hit at step " .. i)
  end
end)

H.test("a partial batch plans again but compiles nothing", function()
  local r = run[STEPS + 1]
  print(string.format("  partial batch: %d plans built, %d cached, %d kernels compiled", r.built, r.hits,
    r.compiled))
  assert(r.built > 0, "a new batch size is a new plan")
  H.eq(r.compiled, 0, "kernels compiled for the partial batch")
end)

H.test("losses equal a run with the cache off", function()
  local self = arg[0]
  local exe = arg[-1] or "stitch"
  local p = assert(io.popen(string.format("ST_PLAN_CACHE=0 '%s' '%s' child", exe, self)))
  local ref = {}
  for line in p:lines() do ref[#ref + 1] = tonumber(line) end
  p:close()
  H.eq(#ref, STEPS + 1, "losses from the child run")
  for i = 1, #ref do H.eq(run[i].loss, ref[i], "loss at step " .. i) end
end)

H.done()
