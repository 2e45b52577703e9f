-- test_optim.lua — st.optim: SGD / Adam / AdamW against the update formulas computed by hand in Lua
-- (3 steps, gradients set by hand), parameter groups, zero_grad, one flush per step, no recompiles
-- when the learning rate changes, state_dict round trips, schedulers, errors, and a least-squares
-- problem solved with autograd (when the build has it).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, check_near, eq, raises = H.test, H.check_near, H.eq, H.raises

local optim = st.optim

-- Per-step gradients (3 steps, 3 elements) and the starting point.
local P0 = { 1.0, -2.0, 0.5 }
local G = { { 0.1, -0.2, 0.3 }, { -0.4, 0.5, 0.25 }, { 0.05, 0.3, -0.6 } }

-- Runs an optimizer built by make(params) for 3 steps on an f64 parameter; returns its values.
local function run3(make)
  local p = st.tensor(P0, "f64")
  local o = make({ p })
  for k = 1, 3 do
    p.grad = st.tensor(G[k], "f64")
    o:step()
  end
  return p:tolist(), o, p
end

-- Reference SGD (PyTorch's formulas) on Lua numbers.
local function ref_sgd(h)
  local p, buf = { table.unpack(P0) }, nil
  for k = 1, 3 do
    local d = {}
    for i = 1, 3 do d[i] = G[k][i] + (h.weight_decay or 0) * p[i] end
    local mom = h.momentum or 0
    if mom ~= 0 then
      if not buf then
        buf = { table.unpack(d) }
      else
        for i = 1, 3 do buf[i] = mom * buf[i] + (1 - (h.dampening or 0)) * d[i] end
      end
      for i = 1, 3 do
        if h.nesterov then d[i] = d[i] + mom * buf[i] else d[i] = buf[i] end
      end
    end
    for i = 1, 3 do p[i] = p[i] - h.lr * d[i] end
  end
  return p
end

-- Reference Adam / AdamW.
local function ref_adam(h, decoupled)
  local p, m, v = { table.unpack(P0) }, { 0, 0, 0 }, { 0, 0, 0 }
  local b1, b2 = h.betas and h.betas[1] or 0.9, h.betas and h.betas[2] or 0.999
  local eps, lr = h.eps or 1e-8, h.lr or 1e-3
  local wd = h.weight_decay or (decoupled and 0.01 or 0)
  for t = 1, 3 do
    local g = {}
    for i = 1, 3 do
      g[i] = G[t][i]
      if decoupled then p[i] = p[i] * (1 - lr * wd) else g[i] = g[i] + wd * p[i] end
      m[i] = b1 * m[i] + (1 - b1) * g[i]
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]
      local mhat = m[i] / (1 - b1 ^ t)
      local vhat = v[i] / (1 - b2 ^ t)
      p[i] = p[i] - lr * mhat / (math.sqrt(vhat) + eps)
    end
  end
  return p
end

local sgd_cases = {
  { lr = 0.1 },
  { lr = 0.1, momentum = 0.9 },
  { lr = 0.05, momentum = 0.8, dampening = 0.3 },
  { lr = 0.1, momentum = 0.9, nesterov = true },
  { lr = 0.1, weight_decay = 0.1 },
  { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.05 },
}
for ci, h in ipairs(sgd_cases) do
  test("SGD formulas, case " .. ci, function()
    local got = run3(function(ps) return optim.SGD(ps, h) end)
    check_near(got, ref_sgd(h), 1e-12, "SGD " .. ci)
  end)
end

local adam_cases = {
  {},
  { lr = 0.01, betas = { 0.8, 0.99 }, eps = 1e-6 },
  { lr = 0.01, weight_decay = 0.1 },
}
for ci, h in ipairs(adam_cases) do
  test("Adam formulas, case " .. ci, function()
    local got = run3(function(ps) return optim.Adam(ps, h) end)
    check_near(got, ref_adam(h, false), 1e-12, "Adam " .. ci)
  end)
  test("AdamW formulas, case " .. ci, function()
    local got = run3(function(ps) return optim.AdamW(ps, h) end)
    check_near(got, ref_adam(h, true), 1e-12, "AdamW " .. ci)
  end)
end

test("AdamW default weight decay 0.01, f32 parameters", function()
  local p = st.tensor(P0)
  local o = optim.AdamW({ p }, { lr = 0.01 })
  eq(o.param_groups[1].weight_decay, 0.01, "weight_decay")
  for k = 1, 3 do p.grad = st.tensor(G[k]); o:step() end
  eq(p:dtype(), "f32", "dtype")
  check_near(p, ref_adam({ lr = 0.01 }, true), 1e-5, "AdamW f32")
end)

test("parameter groups: per-group options, nil grads skipped", function()
  local a, b, c = st.tensor(P0, "f64"), st.tensor(P0, "f64"), st.tensor(P0, "f64")
  local o = optim.SGD({ { params = { a }, lr = 0.1 }, { params = { b, c }, momentum = 0.9 } }, { lr = 0.01 })
  eq(o.param_groups[1].lr, 0.1, "group 1 lr")
  eq(o.param_groups[2].lr, 0.01, "group 2 lr")
  eq(o.param_groups[1].momentum, 0, "group 1 momentum")
  for k = 1, 3 do
    a.grad = st.tensor(G[k], "f64")
    b.grad = st.tensor(G[k], "f64")
    o:step()
  end
  check_near(a, ref_sgd({ lr = 0.1 }), 1e-12, "group 1")
  check_near(b, ref_sgd({ lr = 0.01, momentum = 0.9 }), 1e-12, "group 2")
  check_near(c, P0, 0, "param without grad")
  eq(o.state[c], nil, "no state for a param never updated")
end)

test("zero_grad sets grads to nil (or zeroes them)", function()
  local p = st.tensor(P0)
  local o = optim.SGD({ p }, { lr = 0.1 })
  p.grad = st.tensor(G[1])
  o:zero_grad()
  eq(p.grad, nil, "grad after zero_grad")
  p.grad = st.tensor(G[1])
  o:zero_grad(false)
  check_near(p.grad, { 0, 0, 0 }, 0, "zeroed grad")
end)

-- Counts the flushes and the kernels that were not already in memory over `fn`.
local function measure(fn)
  local s0 = st.stats()
  fn()
  local s1 = st.stats()
  return s1.flushes - s0.flushes,
    (s1.kernels_compiled - s0.kernels_compiled) + (s1.cache_hits_disk - s0.cache_hits_disk)
end

for _, kind in ipairs({ "SGD", "Adam", "AdamW" }) do
  test(kind .. ": one flush per step, no recompiles when lr changes", function()
    if st.eager() then print("SKIP " .. kind .. ": one flush per step, no recompiles when lr changes" .. ": eager mode has no flushes") return end
    st.set_jit_min(0) -- force the JIT even for these small tensors
    local ps = { st.randn(64, 32), st.randn(32), st.randn(10, 64) }
    st.sync(table.unpack(ps))
    local opts = kind == "SGD" and { lr = 0.1, momentum = 0.9, weight_decay = 1e-4 } or { lr = 1e-2 }
    local o = optim[kind](ps, opts)
    local sched = optim.CosineWarmup(o, { warmup_steps = 2, total_steps = 8, min_lr = 0 })
    local grads = {}
    for i, p in ipairs(ps) do grads[i] = st.randn(p:shape()) end
    st.sync(table.unpack(grads))
    for step = 1, 10 do
      for i, p in ipairs(ps) do p.grad = grads[i] end
      local flushes, new_kernels = measure(function() o:step() end)
      sched:step()
      eq(flushes, 1, "flushes in step " .. step)
      if step >= 3 then eq(new_kernels, 0, "new kernels in step " .. step) end
    end
    eq(o.param_groups[1].lr, 0, "lr at the end of the schedule")
    st.set_jit_min(32768)
  end)
end

test("step(loss) realizes extra tensors in the same flush; closures", function()
  if st.eager() then print("SKIP " .. "step(loss) realizes extra tensors in the same flush; closures" .. ": eager mode has no flushes") return end
  local p = st.tensor(P0)
  local o = optim.SGD({ p }, { lr = 0.1 })
  p.grad = st.tensor(G[1])
  local extra = p:sum() * 2
  local flushes = measure(function() o:step(extra) end)
  eq(flushes, 1, "flushes")
  local called = false
  local r = o:step(function() called = true; return 42 end)
  eq(called, true, "closure called")
  eq(r, 42, "closure result returned")
end)

test("state_dict / load_state_dict round trip", function()
  local function build(kind, p)
    if kind == "SGD" then return optim.SGD({ p }, { lr = 0.1, momentum = 0.9 }) end
    return optim[kind]({ p }, { lr = 0.05 })
  end
  for _, kind in ipairs({ "SGD", "Adam", "AdamW" }) do
    local a = st.tensor(P0, "f64")
    local oa = build(kind, a)
    for k = 1, 2 do a.grad = st.tensor(G[k], "f64"); oa:step() end
    local sd = oa:state_dict()
    eq(#sd.param_groups, 1, "groups")
    eq(sd.param_groups[1].params[1], 1, "param index")
    if kind ~= "SGD" then eq(sd.state[1].step, 2, "step count") end
    -- a fresh optimizer on a copy of the parameter, with a different lr that the state overrides
    local b = a:clone()
    local ob = optim[kind]({ b }, { lr = 0.5 })
    ob:load_state_dict(sd)
    eq(ob.param_groups[1].lr, kind == "SGD" and 0.1 or 0.05, "restored lr")
    a.grad = st.tensor(G[3], "f64"); oa:step()
    b.grad = st.tensor(G[3], "f64"); ob:step()
    check_near(b, a, 1e-12, kind .. " after reload")
    -- the loaded state is a copy: writing one optimizer's buffer leaves the other's alone
    local key = kind == "SGD" and "momentum_buffer" or "exp_avg"
    check_near(ob.state[b][key], oa.state[a][key], 1e-12, kind .. " state after reload")
    oa.state[a][key]:fill_(7)
    if H.near(ob.state[b][key], { 7, 7, 7 }, 0) then error(kind .. ": loaded state aliases the source") end
  end
end)

if st.save and st.load then
  test("state_dict through st.save / st.load with optim.pack / optim.unpack", function()
    for _, kind in ipairs({ "SGD", "AdamW" }) do
      local a = st.tensor(P0, "f64")
      local oa = kind == "SGD" and optim.SGD({ a }, { lr = 0.1, momentum = 0.9, nesterov = true })
        or optim.AdamW({ a }, { lr = 0.05, betas = { 0.8, 0.95 } })
      local sa = optim.StepLR(oa, { step_size = 1, gamma = 0.5 })
      for k = 1, 2 do a.grad = st.tensor(G[k], "f64"); oa:step(); sa:step() end
      local path = os.tmpname()
      st.save(path, { opt = optim.pack(oa:state_dict()), sched = optim.pack(sa:state_dict()) })
      local flat = st.load(path)
      os.remove(path)
      local b = a:clone()
      local ob = optim[kind]({ b }, { lr = 1 })
      local sb = optim.StepLR(ob, { step_size = 1, gamma = 0.5 })
      ob:load_state_dict(optim.unpack(flat, "opt"))
      sb:load_state_dict(optim.unpack(flat, "sched"))
      check_near(ob.param_groups[1].lr, oa.param_groups[1].lr, 1e-15, "lr")
      if kind == "AdamW" then check_near(ob.param_groups[1].betas, { 0.8, 0.95 }, 1e-15, "betas") end
      if kind == "SGD" then eq(ob.param_groups[1].nesterov, true, "nesterov") end
      a.grad = st.tensor(G[3], "f64"); oa:step(); sa:step()
      b.grad = st.tensor(G[3], "f64"); ob:step(); sb:step()
      check_near(b, a, 1e-12, kind .. " after a checkpoint")
      check_near(sb:get_last_lr(), sa:get_last_lr(), 1e-15, "scheduler lr")
    end
  end)
end

test("load_state_dict errors name the mismatch", function()
  local o = optim.Adam({ st.zeros(3) })
  local other = optim.Adam({ st.zeros(3), st.zeros(2) })
  raises(function() o:load_state_dict(other:state_dict()) end, "group 1 has 2 parameters in the state, 1 in this optimizer")
  local p = st.zeros(4)
  local o4 = optim.Adam({ p })
  p.grad = st.ones(4)
  o4:step()
  raises(function() o:load_state_dict(o4:state_dict()) end, "has shape (4), the parameter (3)")
end)

test("StepLR", function()
  local o = optim.SGD({ st.zeros(1) }, { lr = 1.0 })
  local s = optim.StepLR(o, { step_size = 2, gamma = 0.5 })
  local want = { 1, 1, 0.5, 0.5, 0.25, 0.25 }
  for e = 1, 6 do
    check_near(s:get_last_lr()[1], want[e], 1e-15, "lr at epoch " .. (e - 1))
    eq(o.param_groups[1].lr, s:get_last_lr()[1], "group lr")
    s:step()
  end
end)

test("CosineWarmup: linear warmup, cosine to min_lr, then min_lr", function()
  local o = optim.AdamW({ { params = { st.zeros(1) }, lr = 1.0 }, { params = { st.zeros(1) }, lr = 0.5 } })
  local s = optim.CosineWarmup(o, { warmup_steps = 4, total_steps = 12, min_lr = 0.1 })
  for t = 0, 14 do
    local lrs = s:get_last_lr()
    for gi, base in ipairs({ 1.0, 0.5 }) do
      local want
      if t < 4 then want = base * (t + 1) / 4
      else
        local q = math.min(1, (t - 4) / 8)
        want = 0.1 + (base - 0.1) * 0.5 * (1 + math.cos(math.pi * q))
      end
      check_near(lrs[gi], want, 1e-12, "group " .. gi .. " lr at t=" .. t)
    end
    s:step()
  end
  check_near(s:get_last_lr()[1], 0.1, 1e-12, "after the end")
  local sd = s:state_dict()
  local s2 = optim.CosineWarmup(o, { warmup_steps = 4, total_steps = 12, min_lr = 0.1 })
  s2:load_state_dict(sd)
  check_near(o.param_groups[1].lr, 0.1, 1e-12, "after load_state_dict")
end)

test("option errors", function()
  local p = st.zeros(2)
  raises(function() optim.SGD({ p }, { lr = 0.1, momentun = 0.9 }) end, "unknown option 'momentun'")
  raises(function() optim.SGD({ p }, { lr = 0.1, nesterov = true }) end, "nesterov momentum requires")
  raises(function() optim.SGD({ p }, { lr = -1 }) end, "invalid learning rate")
  raises(function() optim.Adam({ p }, { betas = { 1.0, 0.9 } }) end, "invalid beta 1")
  raises(function() optim.Adam({}) end, "non-empty list")
  raises(function() optim.Adam({ p, p }) end, "appears more than once")
  raises(function() optim.Adam({ st.zeros(2, "i64") }) end, "must be floating point")
  raises(function() optim.StepLR(optim.SGD({ p }), {}) end, "step_size must be a positive integer")
  raises(function() optim.CosineWarmup(optim.SGD({ p }), { warmup_steps = 5, total_steps = 2 }) end,
    "total_steps must be")
end)

if st.Tensor.requires_grad_ or pcall(function() return st.zeros(1):requires_grad_() end) then
  -- Least squares: min |A w - b|^2 / n, with autograd computing the gradient.
  for _, kind in ipairs({ "SGD", "Adam" }) do
    test("least squares with autograd: " .. kind, function()
      st.manual_seed(1)
      local A = st.randn(64, 4)
      local w_true = st.tensor({ 1.0, -2.0, 0.5, 3.0 })
      local b = A:matmul(w_true)
      local w = st.zeros(4):requires_grad_()
      local o = kind == "SGD" and optim.SGD({ w }, { lr = 0.1, momentum = 0.9 }) or optim.Adam({ w }, { lr = 0.1 })
      for _ = 1, 300 do
        o:zero_grad()
        local r = A:matmul(w) - b
        local loss = (r * r):mean()
        loss:backward()
        o:step(loss)
      end
      check_near(w:detach(), w_true, 1e-3, kind .. " solution")
    end)
  end
else
  print("SKIP least squares with autograd: this build has no autograd yet")
end

H.done()
