-- test_horizontal.lua — horizontal fusion (fuser/horizontal.c): an optimizer step over many
-- parameters is at most 2 launches and gives the values of per-parameter steps (one flush per
-- parameter, where nothing can be batched); a small MLP's training step launches fewer kernels
-- than with ST_FUSE=-horizontal (a child process) and reaches the same losses.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test = H.test
local function check(ok, what) if not ok then error(what, 2) end end

local optim, nn, F = st.optim, st.nn, st.nn.functional

local SHAPES = { {7}, {3, 5}, {16}, {4, 4, 2}, {1}, {33}, {2, 9}, {64, 3}, {5}, {6, 6}, {129}, {3, 1, 7} }

-- 12 parameters (fixed seed) with realized gradients.
local function params()
  st.manual_seed(7)
  local ps = {}
  for i, sh in ipairs(SHAPES) do
    ps[i] = st.randn(sh)
    ps[i].grad = st.randn(sh)
    ps[i]:realize()
    ps[i].grad:realize()
  end
  return ps
end

local MAKERS = {
  SGD = function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9, weight_decay = 0.01 }) end,
  Adam = function(ps) return optim.Adam(ps, { lr = 1e-2, weight_decay = 0.01 }) end,
  AdamW = function(ps) return optim.AdamW(ps, { lr = 1e-2, weight_decay = 0.1 }) end,
}

-- A few training steps of a small MLP; returns the kernels of the last step and the losses.
local function train()
  st.manual_seed(3)
  local model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local x, y = st.randn({ 8, 20 }), st.randint(1, 4, { 8 })
  local losses, kernels = {}, 0
  for i = 1, 3 do
    st.sync()
    st.reset_stats()
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    losses[i] = loss:item()
    opt:step()
    st.sync()
    kernels = st.stats().kernels_launched
  end
  return kernels, losses
end

if arg[1] == "--child" then
  local k, losses = train()
  print(k, table.concat(losses, " "))
  os.exit(0)
end

for _, name in ipairs({ "SGD", "Adam", "AdamW" }) do
  test(name .. ": a step over 12 parameters is at most 2 launches, values as per-parameter steps", function()
    local ps, ref = params(), params()
    local opt = MAKERS[name](ps)
    local refs = {}
    for i, p in ipairs(ref) do refs[i] = MAKERS[name]({ p }) end
    for step = 1, 2 do
      st.sync()
      st.reset_stats()
      opt:step()
      st.sync()
      local k = st.stats().kernels_launched
      check(k <= 2, name .. " step " .. step .. ": " .. k .. " kernels for 12 parameters (want <= 2)")
      for i, o in ipairs(refs) do
        o:step()
        st.sync()   -- one parameter per flush: nothing to batch
      end
      for i = 1, #ps do
        check(H.near(ps[i], ref[i], 1e-6), name .. ": parameter " .. i .. " differs from the reference")
        local s, r = opt.state[ps[i]], refs[i].state[ref[i]]
        for _, key in ipairs({ "exp_avg", "exp_avg_sq", "momentum_buffer" }) do
          if s and s[key] then check(H.near(s[key], r[key], 1e-6), name .. ": " .. key .. " " .. i .. " differs") end
        end
      end
    end
  end)
end

test("MLP training step: fewer kernels than without horizontal fusion, same losses", function()
  if st.eager() then print("SKIP " .. "MLP training step: fewer kernels than without horizontal fusion, same losses" .. ": eager mode launches no kernel") return end
  local k, losses = train()
  local cmd = string.format("ST_FUSE=-horizontal %s %s --child", arg[-1], arg[0])
  local f = assert(io.popen(cmd))
  local out = f:read("a")
  f:close()
  local ck, rest = out:match("^(%d+)%s+(.*)$")
  check(ck, "child output: " .. out)
  local child = {}
  for v in rest:gmatch("%S+") do child[#child + 1] = tonumber(v) end
  check(k < tonumber(ck), "kernels per step: " .. k .. " with horizontal fusion, " .. ck .. " without")
  check(H.near(losses, child, 1e-6), "losses differ: " .. table.concat(losses, " ") .. " vs " .. rest)
end)

H.done()
