-- test_optim_more.lua — st.optim's RMSprop, Adagrad, Adam/AdamW with amsgrad, add_param_group and the
-- schedulers LambdaLR, MultiStepLR, CosineAnnealingLR, OneCycleLR, ReduceLROnPlateau: parameters after
-- 3 steps (f64) against PyTorch's update rules written out in Lua numbers, lr sequences against the
-- formulas, one flush per step, option errors, state_dict round trips.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, check_near, eq, raises = H.test, H.check_near, H.eq, H.raises

local optim = st.optim

local P0 = { 1.0, -2.0, 0.5 }
local G = { { 0.1, -0.2, 0.3 }, { -0.4, 0.5, 0.25 }, { 0.05, 0.3, -0.6 } }

-- A state dict through st.save / st.load (optim.pack / optim.unpack), or as it is in a build without them.
local function through_file(sd)
  if not (st.save and st.load) then return sd end
  local path = os.tmpname()
  st.save(path, { x = optim.pack(sd) })
  local flat = st.load(path)
  os.remove(path)
  return optim.unpack(flat, "x")
end

-- Runs the optimizer built by make(params) for `n` steps (3 by default) on an f64 parameter.
local function run(make, n)
  local p = st.tensor(P0, "f64")
  local o = make({ p })
  for k = 1, n or 3 do
    p.grad = st.tensor(G[k], "f64")
    o:step()
  end
  return p:tolist(), o, p
end

-- Reference RMSprop (PyTorch's rule), element by element.
local function ref_rmsprop(h, n)
  local lr, alpha, eps = h.lr or 1e-2, h.alpha or 0.99, h.eps or 1e-8
  local wd, mom = h.weight_decay or 0, h.momentum or 0
  local p, sq, ga, buf = { table.unpack(P0) }, { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 }
  for k = 1, n or 3 do
    for i = 1, 3 do
      local g = G[k][i] + wd * p[i]
      sq[i] = alpha * sq[i] + (1 - alpha) * g * g
      local avg
      if h.centered then
        ga[i] = alpha * ga[i] + (1 - alpha) * g
        avg = math.sqrt(sq[i] - ga[i] * ga[i]) + eps
      else
        avg = math.sqrt(sq[i]) + eps
      end
      if mom > 0 then
        buf[i] = mom * buf[i] + g / avg
        p[i] = p[i] - lr * buf[i]
      else
        p[i] = p[i] - lr * g / avg
      end
    end
  end
  return p
end

-- Reference Adagrad.
local function ref_adagrad(h, n)
  local lr, lr_decay, wd = h.lr or 1e-2, h.lr_decay or 0, h.weight_decay or 0
  local eps, init = h.eps or 1e-10, h.initial_accumulator_value or 0
  local p, sum = { table.unpack(P0) }, { init, init, init }
  for t = 1, n or 3 do
    local clr = lr / (1 + (t - 1) * lr_decay)
    for i = 1, 3 do
      local g = G[t][i] + wd * p[i]
      sum[i] = sum[i] + g * g
      p[i] = p[i] - clr * g / (math.sqrt(sum[i]) + eps)
    end
  end
  return p
end

-- Reference Adam / AdamW with amsgrad (PyTorch: vmax = max(vmax, v), denominator from vmax).
local function ref_amsgrad(h, decoupled)
  local b1, b2 = h.betas and h.betas[1] or 0.9, h.betas and h.betas[2] or 0.999
  local eps, lr = h.eps or 1e-8, h.lr or 1e-3
  local wd = h.weight_decay or (decoupled and 0.01 or 0)
  local p, m, v, vmax = { table.unpack(P0) }, { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 }
  for t = 1, 3 do
    for i = 1, 3 do
      local g = G[t][i]
      if decoupled then p[i] = p[i] * (1 - lr * wd) else g = g + wd * p[i] end
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      vmax[i] = math.max(vmax[i], v[i])
      local denom = math.sqrt(vmax[i]) / math.sqrt(1 - b2 ^ t) + eps
      p[i] = p[i] - (lr / (1 - b1 ^ t)) * m[i] / denom
    end
  end
  return p, v, vmax
end

local rms_cases = {
  {},
  { lr = 0.05, alpha = 0.9 },
  { lr = 0.01, centered = true },
  { lr = 0.01, momentum = 0.9 },
  { lr = 0.02, alpha = 0.8, eps = 1e-3, weight_decay = 0.1, momentum = 0.5, centered = true },
}
for ci, h in ipairs(rms_cases) do
  test("RMSprop formulas, case " .. ci, function()
    local got = run(function(ps) return optim.RMSprop(ps, h) end)
    check_near(got, ref_rmsprop(h), 1e-12, "RMSprop " .. ci)
  end)
end

local adagrad_cases = {
  {},
  { lr = 0.1, lr_decay = 0.5 },
  { lr = 0.1, weight_decay = 0.2, initial_accumulator_value = 0.3, eps = 1e-4 },
}
for ci, h in ipairs(adagrad_cases) do
  test("Adagrad formulas, case " .. ci, function()
    local got = run(function(ps) return optim.Adagrad(ps, h) end)
    check_near(got, ref_adagrad(h), 1e-12, "Adagrad " .. ci)
  end)
end

local ams_cases = {
  { amsgrad = true, lr = 0.01, betas = { 0.9, 0.5 } },  -- v shrinks on step 3: vmax differs from v
  { amsgrad = true, lr = 0.01, betas = { 0.8, 0.3 }, weight_decay = 0.1, eps = 1e-6 },
}
for ci, h in ipairs(ams_cases) do
  for _, kind in ipairs({ "Adam", "AdamW" }) do
    test(kind .. " amsgrad formulas, case " .. ci, function()
      local got, o, p = run(function(ps) return optim[kind](ps, h) end)
      local want, v, vmax = ref_amsgrad(h, kind == "AdamW")
      check_near(got, want, 1e-12, kind .. " amsgrad " .. ci)
      check_near(o.state[p].exp_avg_sq, v, 1e-12, "exp_avg_sq")
      check_near(o.state[p].max_exp_avg_sq, vmax, 1e-12, "max_exp_avg_sq")
      local differs = false
      for i = 1, 3 do differs = differs or v[i] ~= vmax[i] end
      eq(differs, true, "the case exercises the max")
    end)
  end
end

test("Adam without amsgrad keeps no max_exp_avg_sq", function()
  local _, o, p = run(function(ps) return optim.Adam(ps, { lr = 0.01 }) end)
  eq(o.state[p].max_exp_avg_sq, nil, "max_exp_avg_sq")
  eq(o.param_groups[1].amsgrad, false, "default amsgrad")
end)

-- Counts the flushes and the kernels that were not already in memory over `fn`.
local function measure(fn)
  local s0 = st.stats()
  fn()
  local s1 = st.stats()
  return s1.flushes - s0.flushes,
    (s1.kernels_compiled - s0.kernels_compiled) + (s1.cache_hits_disk - s0.cache_hits_disk)
end

local flush_cases = {
  { "RMSprop", { lr = 0.01, momentum = 0.9, centered = true, weight_decay = 1e-4 } },
  { "Adagrad", { lr = 0.01, lr_decay = 0.01, weight_decay = 1e-4 } },
  { "Adam", { lr = 0.01, amsgrad = true } },
}
for _, c in ipairs(flush_cases) do
  local kind, opts = c[1], c[2]
  test(kind .. ": one flush per step, no recompiles when lr changes", function()
    if st.eager() then print("SKIP " .. kind .. ": one flush per step, no recompiles when lr changes" .. ": eager mode has no flushes") return end
    st.set_jit_min(0)
    local ps = { st.randn(16, 8), st.randn(8) }
    st.sync(table.unpack(ps))
    local o = optim[kind](ps, opts)
    local sched = optim.CosineAnnealingLR(o, { T_max = 6 })
    local grads = {}
    for i, p in ipairs(ps) do grads[i] = st.randn(p:shape()) end
    st.sync(table.unpack(grads))
    for step = 1, 6 do
      for i, p in ipairs(ps) do p.grad = grads[i] end
      local flushes, new_kernels = measure(function() o:step() end)
      sched:step()
      eq(flushes, 1, "flushes in step " .. step)
      if step >= 3 then eq(new_kernels, 0, "new kernels in step " .. step) end
    end
    st.set_jit_min(32768)
  end)
end

test("per-group options for the new optimizers", function()
  local a, b = st.tensor(P0, "f64"), st.tensor(P0, "f64")
  local o = optim.RMSprop({ { params = { a }, centered = true }, { params = { b }, momentum = 0.5 } }, { lr = 0.03 })
  for k = 1, 3 do
    a.grad = st.tensor(G[k], "f64"); b.grad = st.tensor(G[k], "f64")
    o:step()
  end
  check_near(a, ref_rmsprop({ lr = 0.03, centered = true }), 1e-12, "group 1")
  check_near(b, ref_rmsprop({ lr = 0.03, momentum = 0.5 }), 1e-12, "group 2")
end)

test("add_param_group on every optimizer", function()
  local cases = {
    { "SGD", { lr = 0.1 }, { momentum = 0.9 } },
    { "Adam", { lr = 0.01 }, { amsgrad = true, betas = { 0.9, 0.5 } } },
    { "AdamW", { lr = 0.01 }, { weight_decay = 0.1 } },
    { "RMSprop", { lr = 0.01 }, { centered = true, lr = 0.02 } },
    { "Adagrad", { lr = 0.1 }, { lr_decay = 0.5 } },
  }
  for _, c in ipairs(cases) do
    local kind, opts, extra = c[1], c[2], c[3]
    local a, b = st.tensor(P0, "f64"), st.tensor(P0, "f64")
    local o = optim[kind]({ a }, opts)
    local g = { params = b }
    for k, v in pairs(extra) do g[k] = v end
    o:add_param_group(g)
    eq(#o.param_groups, 2, kind .. " groups")
    -- the new group: its own options, the constructor's for the rest
    local want = {}
    for k, v in pairs(opts) do want[k] = v end
    for k, v in pairs(extra) do want[k] = v end
    eq(o.param_groups[2].lr, want.lr, kind .. " lr")
    eq(o.param_groups[2].initial_lr, want.lr, kind .. " initial_lr")
    local _, o2, p2 = run(function(ps) return optim[kind](ps, want) end)
    for k = 1, 3 do
      b.grad = st.tensor(G[k], "f64")
      o:step()
    end
    check_near(b, p2, 1e-12, kind .. " added group's updates")
    check_near(a, P0, 0, kind .. " untouched group")
    raises(function() o:add_param_group({ params = { a } }) end, "appears more than once")
    raises(function() o:add_param_group({ params = { st.tensor(P0, "f64") }, lr_ = 1 }) end,
      "group 3: unknown option 'lr_'")
    raises(function() o:add_param_group({ params = { st.tensor(P0, "f64") }, lr = -1 }) end,
      "group 3: invalid learning rate -1")
    raises(function() o:add_param_group(5) end, "add_param_group")
    eq(#o.param_groups, 2, kind .. " groups after the errors")
    local _ = o2
  end
end)

test("option errors name the option", function()
  local p = st.tensor(P0, "f64")
  raises(function() optim.RMSprop({ p }, { alfa = 0.9 }) end, "RMSprop: unknown option 'alfa'")
  raises(function() optim.RMSprop({ p }, { alpha = -0.1 }) end, "invalid alpha -0.1")
  raises(function() optim.RMSprop({ p }, { eps = -1 }) end, "invalid eps -1")
  raises(function() optim.RMSprop({ p }, { momentum = -1 }) end, "invalid momentum -1")
  raises(function() optim.RMSprop({ p }, { weight_decay = -1 }) end, "invalid weight_decay -1")
  raises(function() optim.RMSprop({ p }, { lr = -1 }) end, "invalid learning rate -1")
  raises(function() optim.RMSprop({ p }, { centered = 1 }) end, "centered must be a boolean")
  raises(function() optim.RMSprop({ { params = { p }, centred = true } }) end,
    "parameter group 1: unknown option 'centred'")
  raises(function() optim.Adagrad({ p }, { lr_decay = -1 }) end, "invalid lr_decay -1")
  raises(function() optim.Adagrad({ p }, { initial_accumulator_value = -1 }) end,
    "invalid initial_accumulator_value -1")
  raises(function() optim.Adagrad({ p }, { eps = -1 }) end, "invalid eps -1")
  raises(function() optim.Adagrad({ p }, { weight_decay = "x" }) end, "weight_decay must be a number")
  raises(function() optim.Adagrad({ p }, { momentum = 0.9 }) end, "Adagrad: unknown option 'momentum'")
  raises(function() optim.Adam({ p }, { amsgrad = "yes" }) end, "amsgrad must be a boolean")
  raises(function() optim.AdamW({ p }, { amsgrad = 1 }) end, "amsgrad must be a boolean")

  local o = optim.SGD({ p }, { lr = 0.1 })
  raises(function() optim.LambdaLR(o, {}) end, "LambdaLR: lr_lambda must be a function")
  raises(function() optim.LambdaLR(o, { lr_lambda = { 1 } }) end, "lr_lambda 1 is not a function")
  raises(function() optim.LambdaLR(o, { lr_lambda = { math.abs, math.abs } }) end, "expected 1 lr_lambda")
  raises(function() optim.LambdaLR(o, { lr_lambda = function() end }) end, "not a number")
  raises(function() optim.LambdaLR(o, { lr_lambda = math.abs, gamma = 1 }) end, "LambdaLR: unknown option 'gamma'")
  raises(function() optim.MultiStepLR(o, { gamma = 0.5 }) end, "milestones must be a list")
  raises(function() optim.MultiStepLR(o, { milestones = { 2, 1.5 } }) end, "invalid milestone 1.5")
  raises(function() optim.MultiStepLR(o, { milestones = { -1 } }) end, "invalid milestone -1")
  raises(function() optim.MultiStepLR(o, { milestones = { 2 }, gamma = "x" }) end, "invalid gamma x")
  raises(function() optim.MultiStepLR(o, { milestones = { 2 }, step_size = 3 }) end, "unknown option 'step_size'")
  raises(function() optim.CosineAnnealingLR(o, {}) end, "invalid T_max false")
  raises(function() optim.CosineAnnealingLR(o, { T_max = 0 }) end, "invalid T_max 0")
  raises(function() optim.CosineAnnealingLR(o, { T_max = 5, eta_min = -1 }) end, "invalid eta_min -1")
  raises(function() optim.CosineAnnealingLR(o, { T_max = 5, etamin = 0 }) end, "unknown option 'etamin'")
  raises(function() optim.OneCycleLR(o, { total_steps = 10 }) end, "invalid max_lr false")
  raises(function() optim.OneCycleLR(o, { max_lr = 1 }) end, "invalid total_steps false")
  raises(function() optim.OneCycleLR(o, { max_lr = 1, total_steps = 10, pct_start = 1.5 }) end, "invalid pct_start 1.5")
  raises(function() optim.OneCycleLR(o, { max_lr = 1, total_steps = 10, div_factor = 0 }) end, "invalid div_factor 0")
  raises(function() optim.OneCycleLR(o, { max_lr = 1, total_steps = 10, final_div_factor = -1 }) end,
    "invalid final_div_factor -1")
  raises(function() optim.OneCycleLR(o, { max_lr = 1, total_steps = 10, anneal_strategy = "exp" }) end,
    "anneal_strategy must be \"cos\" or \"linear\"")
  raises(function() optim.OneCycleLR(o, { max_lr = { 1, 2 }, total_steps = 10 }) end, "expected 1 max_lr")
  raises(function() optim.OneCycleLR(o, { max_lr = 1, total_steps = 10, cycle_momentum = true }) end,
    "unknown option 'cycle_momentum'")
  raises(function() optim.ReduceLROnPlateau(o, { mode = "avg" }) end, "mode must be \"min\" or \"max\"")
  raises(function() optim.ReduceLROnPlateau(o, { factor = 1 }) end, "invalid factor 1")
  raises(function() optim.ReduceLROnPlateau(o, { factor = -0.5 }) end, "invalid factor -0.5")
  raises(function() optim.ReduceLROnPlateau(o, { patience = 1.5 }) end, "invalid patience 1.5")
  raises(function() optim.ReduceLROnPlateau(o, { threshold = -1 }) end, "invalid threshold -1")
  raises(function() optim.ReduceLROnPlateau(o, { threshold_mode = "x" }) end, "threshold_mode must be")
  raises(function() optim.ReduceLROnPlateau(o, { cooldown = -1 }) end, "invalid cooldown -1")
  raises(function() optim.ReduceLROnPlateau(o, { min_lr = -1 }) end, "invalid min_lr -1")
  raises(function() optim.ReduceLROnPlateau(o, { min_lr = { 0, 0 } }) end, "expected 1 min_lr")
  raises(function() optim.ReduceLROnPlateau(o, { paitence = 3 }) end, "unknown option 'paitence'")
  raises(function() optim.ReduceLROnPlateau(o):step("x") end, "expected the metric as a number")
  local oc = optim.OneCycleLR(o, { max_lr = 1, total_steps = 3 })
  for _ = 1, 3 do oc:step() end
  raises(function() oc:step() end, "tried to step 4 times; total_steps is 3")
  raises(function() optim.OneCycleLR(o, { max_lr = 1, total_steps = 4, pct_start = 0.25 }) end,
    "step 0 falls in an empty phase")
end)

-- Builds an SGD with two groups (lr 0.1 and 0.02) for the scheduler tests.
local function two_groups()
  return optim.SGD({ { params = { st.tensor(P0, "f64") }, lr = 0.1 },
                     { params = { st.tensor(P0, "f64") }, lr = 0.02 } })
end

-- Steps `sched` n times; checks every group's lr against want(base_i, t, i) before each step.
local function check_sequence(o, sched, bases, n, want, what)
  for t = 0, n do
    if t > 0 then sched:step() end
    local last = sched:get_last_lr()
    for i, g in ipairs(o.param_groups) do
      local w = want(bases[i], t, i)
      check_near(g.lr, w, 1e-12, string.format("%s: group %d lr at t = %d", what, i, t))
      check_near(last[i], w, 1e-12, string.format("%s: get_last_lr at t = %d", what, t))
    end
  end
end

test("LambdaLR: one function, one per group", function()
  local o = two_groups()
  check_sequence(o, optim.LambdaLR(o, { lr_lambda = function(e) return 0.95 ^ e end }), { 0.1, 0.02 }, 10,
    function(b, t) return b * 0.95 ^ t end, "LambdaLR")
  o = two_groups()
  local fs = { function(e) return 1 / (e + 1) end, function(e) return e + 1.0 end }
  check_sequence(o, optim.LambdaLR(o, { lr_lambda = fs }), { 0.1, 0.02 }, 10,
    function(b, t, i) return i == 1 and b / (t + 1) or b * (t + 1) end, "LambdaLR per group")
end)

test("MultiStepLR", function()
  local o = two_groups()
  local ms = { 6, 2, 6, 9 }   -- unsorted, 6 twice: gamma^2 at 6, as PyTorch
  check_sequence(o, optim.MultiStepLR(o, { milestones = ms, gamma = 0.5 }), { 0.1, 0.02 }, 12,
    function(b, t)
      local n = 0
      for _, m in ipairs(ms) do if t >= m then n = n + 1 end end
      return b * 0.5 ^ n
    end, "MultiStepLR")
  o = two_groups()
  check_sequence(o, optim.MultiStepLR(o, { milestones = { 3 } }), { 0.1, 0.02 }, 5,
    function(b, t) return t >= 3 and b * 0.1 or b end, "MultiStepLR default gamma")
end)

test("CosineAnnealingLR", function()
  local o = two_groups()
  check_sequence(o, optim.CosineAnnealingLR(o, { T_max = 8, eta_min = 0.001 }), { 0.1, 0.02 }, 14,
    function(b, t) return 0.001 + (b - 0.001) * (1 + math.cos(math.pi * t / 8)) / 2 end, "CosineAnnealingLR")
  check_near(o.param_groups[1].lr, 0.001 + (0.1 - 0.001) * (1 + math.cos(math.pi * 14 / 8)) / 2, 1e-12, "t = 14")
end)

-- OneCycleLR reference: the phases written out as PyTorch documents them.
local function ref_onecycle(max_lr, total, pct, strat, div, fdiv, t)
  local lr0 = max_lr / div
  local lrmin = lr0 / fdiv
  local e1, e2 = pct * total - 1, total - 1
  local function ann(a, b, q)
    if strat == "cos" then return b + (a - b) / 2 * (math.cos(math.pi * q) + 1) end
    return (b - a) * q + a
  end
  if t <= e1 then return ann(lr0, max_lr, t / e1) end
  return ann(max_lr, lrmin, (t - e1) / (e2 - e1))
end

test("OneCycleLR: cos and linear, per-group max_lr", function()
  local o = two_groups()
  check_sequence(o, optim.OneCycleLR(o, { max_lr = 1.0, total_steps = 20 }), { 1.0, 1.0 }, 20,
    function(b, t) return ref_onecycle(b, 20, 0.3, "cos", 25, 1e4, t) end, "OneCycleLR cos")
  o = two_groups()
  local s = optim.OneCycleLR(o, { max_lr = 1.0, total_steps = 20 })
  for _ = 1, 19 do s:step() end
  check_near(o.param_groups[1].lr, 1.0 / 25 / 1e4, 1e-12, "step total_steps - 1 is at lr0 / final_div_factor")
  o = two_groups()
  check_sequence(o, optim.OneCycleLR(o, { max_lr = { 0.5, 0.2 }, total_steps = 10, pct_start = 0.25,
      anneal_strategy = "linear", div_factor = 10, final_div_factor = 100 }), { 0.5, 0.2 }, 10,
    function(b, t) return ref_onecycle(b, 10, 0.25, "linear", 10, 100, t) end, "OneCycleLR linear")
  o = two_groups()
  optim.OneCycleLR(o, { max_lr = 2.0, total_steps = 10 })
  check_near(o.param_groups[1].lr, 2.0 / 25, 1e-15, "t = 0 is max_lr / div_factor")
end)

-- ReduceLROnPlateau reference, PyTorch's rule in Lua numbers.
local function ref_plateau(metrics, h, lrs)
  local best = h.mode == "max" and -math.huge or math.huge
  local bad, cd, out = 0, 0, {}
  lrs = { table.unpack(lrs) }
  for k, m in ipairs(metrics) do
    local better
    if h.mode == "max" then better = m > best * (1 + h.threshold) else better = m < best * (1 - h.threshold) end
    if better then best = m; bad = 0 else bad = bad + 1 end
    if cd > 0 then cd = cd - 1; bad = 0 end
    if bad > h.patience then
      for i = 1, #lrs do
        local new = math.max(lrs[i] * h.factor, h.min_lr)
        if lrs[i] - new > 1e-8 then lrs[i] = new end
      end
      cd = h.cooldown; bad = 0
    end
    out[k] = { table.unpack(lrs) }
  end
  return out
end

test("ReduceLROnPlateau: min and max, patience, cooldown, min_lr, threshold", function()
  local metrics = { 5, 4, 4.0001, 4.1, 4.2, 3.9, 3.9, 3.9, 3.9, 3.9, 3.9, 3.9, 3.9, 3.9, 3.0, 3.0, 3.0, 3.0 }
  local cases = {
    { mode = "min", factor = 0.5, patience = 1, threshold = 1e-4, cooldown = 0, min_lr = 0 },
    { mode = "min", factor = 0.1, patience = 2, threshold = 0.05, cooldown = 2, min_lr = 0.0005 },
    { mode = "max", factor = 0.3, patience = 0, threshold = 1e-4, cooldown = 1, min_lr = 0 },
  }
  for ci, h in ipairs(cases) do
    local o = two_groups()
    local s = optim.ReduceLROnPlateau(o, h)
    local want = ref_plateau(metrics, h, { 0.1, 0.02 })
    local reduced = false
    for k, m in ipairs(metrics) do
      s:step(k % 2 == 0 and st.tensor(m, "f64") or m)   -- a number or a 0-d tensor
      for i = 1, 2 do
        check_near(o.param_groups[i].lr, want[k][i], 1e-15, string.format("case %d, epoch %d, group %d", ci, k, i))
      end
      check_near(s:get_last_lr(), want[k], 1e-15, "get_last_lr")
      reduced = reduced or want[k][1] ~= 0.1
    end
    eq(reduced, true, "case " .. ci .. " reduces the lr at least once")
  end
  -- defaults: patience 10, factor 0.1
  local o = two_groups()
  local s = optim.ReduceLROnPlateau(o)
  for _ = 1, 11 do s:step(1.0) end
  eq(o.param_groups[1].lr, 0.1, "10 bad epochs after the first: no reduction yet")
  s:step(1.0)
  check_near(o.param_groups[1].lr, 0.01, 1e-15, "the 11th bad epoch reduces")
end)

test("ReduceLROnPlateau state_dict round trip", function()
  local o = two_groups()
  local s = optim.ReduceLROnPlateau(o, { patience = 2, cooldown = 1 })
  for _, m in ipairs({ 3, 2, 2, 2 }) do s:step(m) end
  local sd = through_file(s:state_dict())
  local o2 = two_groups()
  local s2 = optim.ReduceLROnPlateau(o2, { patience = 2, cooldown = 1 })
  s2:load_state_dict(sd)
  o2:load_state_dict(o:state_dict())
  for _, m in ipairs({ 2, 2, 2, 2, 1.5, 1.5, 1.5, 1.5 }) do
    s:step(m); s2:step(m)
    check_near(s2:get_last_lr(), s:get_last_lr(), 0, "lr after load")
  end
  eq(s2.best, s.best, "best")
  eq(s2.num_bad_epochs, s.num_bad_epochs, "num_bad_epochs")
  eq(s2.cooldown_counter, s.cooldown_counter, "cooldown_counter")
end)

test("scheduler state_dict round trip (MultiStepLR, OneCycleLR)", function()
  local o = two_groups()
  local s = optim.OneCycleLR(o, { max_lr = 1.0, total_steps = 20 })
  for _ = 1, 7 do s:step() end
  local o2 = two_groups()
  local s2 = optim.OneCycleLR(o2, { max_lr = 1.0, total_steps = 20 })
  s2:load_state_dict(through_file(s:state_dict()))
  check_near(s2:get_last_lr(), s:get_last_lr(), 0, "OneCycleLR after load")
  o = two_groups()
  s = optim.MultiStepLR(o, { milestones = { 2, 4 } })
  for _ = 1, 3 do s:step() end
  o2 = two_groups()
  s2 = optim.MultiStepLR(o2, { milestones = { 2, 4 } })
  s2:load_state_dict(s:state_dict())
  s:step(); s2:step()
  check_near(s2:get_last_lr(), s:get_last_lr(), 0, "MultiStepLR after load")
end)

test("a group added after the scheduler starts from its own lr", function()
  local a = st.tensor(P0, "f64")
  local o = optim.SGD({ a }, { lr = 0.1 })
  local s = optim.MultiStepLR(o, { milestones = { 2 }, gamma = 0.5 })
  s:step()
  o:add_param_group({ params = { st.tensor(P0, "f64") }, lr = 0.04 })
  s:step()
  check_near(s:get_last_lr(), { 0.05, 0.02 }, 1e-15, "lrs")
end)

-- Optimizer state_dict round trips: 2 steps, save (through pack/unpack), load into a fresh
-- optimizer on a copy of the parameter, 1 more step on both: the same result as 3 steps.
local rt_cases = {
  { "RMSprop", { lr = 0.02, momentum = 0.5, centered = true, weight_decay = 0.1 }, ref_rmsprop },
  { "Adagrad", { lr = 0.1, lr_decay = 0.5, initial_accumulator_value = 0.1 }, ref_adagrad },
  { "Adam", { lr = 0.01, amsgrad = true, betas = { 0.9, 0.5 } },
    function(h) return (ref_amsgrad(h, false)) end },
}
for _, c in ipairs(rt_cases) do
  local kind, h, ref = c[1], c[2], c[3]
  test(kind .. " state_dict round trip", function()
    local _, o, p = run(function(ps) return optim[kind](ps, h) end, 2)
    local sd = o:state_dict()
    eq(sd.state[1].step, 2, "step")
    local q = st.tensor(p:tolist(), "f64")
    local o2 = optim[kind]({ q }, { lr = 1.0 })   -- options come from the state dict
    o2:load_state_dict(through_file(sd))
    eq(o2.param_groups[1].lr, h.lr, "lr restored")
    for k, v in pairs(o.state[p]) do
      if st.is_tensor(v) then check_near(o2.state[q][k], v, 0, "state " .. k) else eq(o2.state[q][k], v, k) end
    end
    p.grad = st.tensor(G[3], "f64"); o:step()
    q.grad = st.tensor(G[3], "f64"); o2:step()
    local want = ref(h)
    check_near(p, want, 1e-12, "original after 3 steps")
    check_near(q, want, 1e-12, "loaded after 3 steps")
  end)
end

test("load_state_dict checks the new buffers' shapes", function()
  local _, o = run(function(ps) return optim.RMSprop(ps, { centered = true }) end, 1)
  local other = optim.RMSprop({ st.tensor({ 1, 2, 3, 4 }, "f64") }, { centered = true })
  raises(function() other:load_state_dict(o:state_dict()) end, "has shape (3), the parameter (4)")
end)

H.done()
