-- test_nn_more.lua — issue 14, item 3: the activations LeakyReLU, ELU, Softplus, Mish, Hardswish,
-- Hardsigmoid, PReLU and the losses smooth_l1 / huber / kl_div, cross_entropy with class-probability
-- targets, functional and module forms.
-- Values against the formulas evaluated in Lua element by element; gradients against central
-- finite differences in f64; options and arguments checked.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn, F = st.nn, st.nn.functional
local test, eq, check = H.test, H.eq, H.check_near

local xs = {-30, -4, -3, -2.5, -1, -0.3, 0.2, 1, 2.9, 3.5, 7, 25}

local function softplus_ref(v, b, t)
  b, t = b or 1, t or 20
  if v * b > t then return v end
  return math.log(1 + math.exp(b * v)) / b
end
local refs = {
  leaky_relu = function(v) return v > 0 and v or 0.01 * v end,
  elu = function(v) return v > 0 and v or math.exp(v) - 1 end,
  softplus = function(v) return softplus_ref(v) end,
  mish = function(v)
    local sp = softplus_ref(v)
    return v * ((math.exp(2 * sp) - 1) / (math.exp(2 * sp) + 1))
  end,
  hardsigmoid = function(v) return math.min(math.max(v / 6 + 0.5, 0), 1) end,
  hardswish = function(v) return v * math.min(math.max(v / 6 + 0.5, 0), 1) end,
}

-- d(sum(f(x) * r))/dx by central differences, element by element
local function fd_grad(f, xt, r, h)
  h = h or 1e-6
  local g = {}
  for i = 1, #xt do
    local up, dn = {table.unpack(xt)}, {table.unpack(xt)}
    up[i], dn[i] = xt[i] + h, xt[i] - h
    local a = (f(st.tensor(up, "f64")) * r):sum():item()
    local b = (f(st.tensor(dn, "f64")) * r):sum():item()
    g[i] = (a - b) / (2 * h)
  end
  return g
end

test("activations: values as the formulas, gradients as finite differences", function()
  local r = st.tensor({0.3, -1.2, 0.7, 1.1, -0.4, 0.9, 1.3, -0.6, 0.5, 0.8, -1.5, 0.2}, "f64")
  for name, ref in pairs(refs) do
    local want = {}
    for i, v in ipairs(xs) do want[i] = ref(v) end
    check(F[name](st.tensor(xs, "f64")), want, 1e-12, name .. " values")
    -- away from the kinks (-3, 0, 3) for the finite differences
    local smooth = {-4.2, -2.5, -1, -0.3, 0.2, 1, 2.5, 3.5, 7, 25, -30, 0.7}
    local x = st.tensor(smooth, "f64"):requires_grad_()
    local y = F[name](x)
    local loss = (y * r):sum()
    loss:backward()
    check(x.grad, fd_grad(F[name], smooth, r), 1e-6, name .. " gradient")
  end
  -- the modules call the same functions
  local x = st.tensor(xs, "f64")
  check(nn.LeakyReLU(0.2)(x), F.leaky_relu(x, 0.2), 0, "LeakyReLU(0.2)")
  check(nn.ELU(0.5)(x), F.elu(x, 0.5), 0, "ELU(0.5)")
  check(nn.Softplus(2, 5)(x), F.softplus(x, 2, 5), 0, "Softplus(2, 5)")
  check(F.softplus(st.tensor({1, 3}, "f64"), 2, 5), {softplus_ref(1, 2, 5), 3}, 1e-12, "softplus beta, threshold")
  check(nn.Mish()(x), F.mish(x), 0, "Mish")
  check(nn.Hardswish()(x), F.hardswish(x), 0, "Hardswish")
  check(nn.Hardsigmoid()(x), F.hardsigmoid(x), 0, "Hardsigmoid")
  -- no NaN from the unused branch: elu and softplus of huge inputs, with gradients
  local big = st.tensor({800, -800}, "f64"):requires_grad_()
  local s = F.elu(big):sum() + F.softplus(big):sum() + F.mish(big):sum()
  s:backward()
  check(big.grad, {3, 0}, 1e-12, "gradients at +-800")
  -- the kinks: PyTorch's one-sided choices
  local k = st.tensor({0}, "f64"):requires_grad_()
  F.leaky_relu(k, 0.1):sum():backward()
  check(k.grad, {0.1}, 0, "leaky_relu'(0) is the slope")
end)

test("PReLU: one slope or one per channel, learnt", function()
  local x = st.tensor({{{-1, 2}, {-3, 4}}, {{5, -6}, {7, -8}}}, "f64")   -- (N=2, C=2, L=2)
  local m = nn.PReLU({num_parameters = 2, dtype = "f64"})
  eq(tostring(m), "PReLU(num_parameters=2)")
  check(m.weight, {0.25, 0.25}, 0, "init")
  local y = m(x)
  check(y, {{{-0.25, 2}, {-0.75, 4}}, {{5, -1.5}, {7, -2}}}, 1e-12, "values")
  y:sum():backward()
  check(m.weight.grad, {-1 - 6, -3 - 8}, 1e-12, "weight gradient: the sum of the negative inputs per channel")
  check(F.prelu(x, st.tensor({0.5}, "f64")):reshape(-1), {-0.5, 2, -1.5, 4, 5, -3, 7, -4}, 1e-12, "one slope")
  H.raises(function() return F.prelu(x, st.ones(3)) end, "prelu: weight of 3 entries for input of shape (2, 2, 2)")
end)

test("smooth_l1, huber and kl_div against the formulas, reductions, gradients", function()
  local a = {0.1, -2, 3.5, 0.4, -0.7, 1.2}
  local b = {0.3, 1, 3.4, -0.2, -0.7, 0.1}
  local x, y = st.tensor(a, "f64"), st.tensor(b, "f64")
  local function sl1(beta)
    local t = {}
    for i = 1, #a do
      local d = math.abs(a[i] - b[i])
      t[i] = beta == 0 and d or (d < beta and 0.5 * d * d / beta or d - 0.5 * beta)
    end
    return t
  end
  local function hub(delta)
    local t = {}
    for i = 1, #a do
      local d = math.abs(a[i] - b[i])
      t[i] = d < delta and 0.5 * d * d or delta * (d - 0.5 * delta)
    end
    return t
  end
  local function mean(t) local s = 0 for _, v in ipairs(t) do s = s + v end return s / #t end
  check(F.smooth_l1_loss(x, y, {reduction = "none"}), sl1(1), 1e-12, "smooth_l1 none")
  check(F.smooth_l1_loss(x, y, {beta = 0.5}), mean(sl1(0.5)), 1e-12, "smooth_l1 beta 0.5 mean")
  check(F.smooth_l1_loss(x, y, {beta = 0, reduction = "none"}), sl1(0), 1e-12, "smooth_l1 beta 0 = l1")
  check(F.huber_loss(x, y, {delta = 2, reduction = "none"}), hub(2), 1e-12, "huber delta 2")
  check(nn.HuberLoss({delta = 0.5})(x, y), mean(hub(0.5)), 1e-12, "HuberLoss")
  check(nn.SmoothL1Loss({reduction = "sum"})(x, y), mean(sl1(1)) * #a, 1e-12, "SmoothL1Loss sum")
  -- gradients by finite differences (no input sits on a kink)
  local r = st.tensor({1, 2, 3, 4, 5, 6}, "f64")
  for _, f in ipairs({function(t) return F.smooth_l1_loss(t, y, {reduction = "none", beta = 0.5}) end,
                      function(t) return F.huber_loss(t, y, {reduction = "none", delta = 0.8}) end}) do
    local xg = st.tensor(a, "f64"):requires_grad_()
    local loss = (f(xg) * r):sum()
    loss:backward()
    check(xg.grad, fd_grad(f, a, r), 1e-6, "loss gradient")
  end
  -- kl_div: input log-probabilities, target probabilities with a 0
  local p = {{0.2, 0.5, 0.3}, {0, 0.6, 0.4}}
  local q = {{0.3, 0.3, 0.4}, {0.1, 0.7, 0.2}}
  local logq = st.tensor(q, "f64"):log()
  local pt = st.tensor(p, "f64")
  local want, sum = {}, 0
  for i = 1, 2 do
    want[i] = {}
    for j = 1, 3 do
      want[i][j] = p[i][j] > 0 and p[i][j] * (math.log(p[i][j]) - math.log(q[i][j])) or 0
      sum = sum + want[i][j]
    end
  end
  check(F.kl_div(logq, pt, {reduction = "none"}), want, 1e-12, "kl_div none")
  check(F.kl_div(logq, pt, {reduction = "batchmean"}), sum / 2, 1e-12, "kl_div batchmean")
  check(F.kl_div(logq, pt), sum / 6, 1e-12, "kl_div mean (over elements, as PyTorch)")
  check(F.kl_div(logq, pt:clamp(1e-300, nil):log(), {reduction = "sum", log_target = true}), sum, 1e-12,
    "kl_div log_target")
  check(nn.KLDivLoss({reduction = "batchmean"})(logq, pt), sum / 2, 1e-12, "KLDivLoss")
  local lg = logq:clone():requires_grad_()
  F.kl_div(lg, pt, {reduction = "sum"}):backward()
  check(lg.grad, {{-0.2, -0.5, -0.3}, {0, -0.6, -0.4}}, 1e-12, "kl_div gradient: -target")
end)

test("cross_entropy with class-probability targets: formulas, options, gradients", function()
  -- logits (3, 4) and soft targets (the last row does not sum to 1: PyTorch does not ask it to)
  local x = {{0.5, -1.2, 2.0, 0.1}, {-0.3, 0.8, 0.0, -2.2}, {1.5, 1.4, -0.6, 0.9}}
  local y = {{0.1, 0.2, 0.6, 0.1}, {0.0, 1.0, 0.0, 0.0}, {0.3, 0.3, 0.2, 0.4}}
  local w = {0.5, 2.0, 1.0, 1.5}
  local function per_sample(eps, wt)
    local out = {}
    for n = 1, 3 do
      local m = -math.huge
      for c = 1, 4 do m = math.max(m, x[n][c]) end
      local z = 0
      for c = 1, 4 do z = z + math.exp(x[n][c] - m) end
      local lse, s = m + math.log(z), 0
      for c = 1, 4 do
        local yc = y[n][c] * (1 - eps) + eps / 4
        s = s - (wt and wt[c] or 1) * yc * (x[n][c] - lse)
      end
      out[n] = s
    end
    return out
  end
  local function mean(t) local s = 0 for _, v in ipairs(t) do s = s + v end return s / #t end
  local xt, yt, wt = st.tensor(x, "f64"), st.tensor(y, "f64"), st.tensor(w, "f64")
  check(F.cross_entropy(xt, yt), mean(per_sample(0)), 1e-12, "mean")
  check(F.cross_entropy(xt, yt, {reduction = "none"}), per_sample(0), 1e-12, "none")
  check(F.cross_entropy(xt, yt, {reduction = "sum"}), mean(per_sample(0)) * 3, 1e-12, "sum")
  -- with a weight "mean" divides by the number of samples, not by the weights (PyTorch)
  check(F.cross_entropy(xt, yt, {weight = wt}), mean(per_sample(0, w)), 1e-12, "weight mean")
  check(F.cross_entropy(xt, yt, {label_smoothing = 0.2, reduction = "none"}), per_sample(0.2), 1e-12,
    "label_smoothing")
  check(F.cross_entropy(xt, yt, {weight = wt, label_smoothing = 0.1}), mean(per_sample(0.1, w)), 1e-12,
    "weight and label_smoothing")
  check(nn.CrossEntropyLoss({weight = wt, reduction = "sum"})(xt, yt), mean(per_sample(0, w)) * 3, 1e-12,
    "CrossEntropyLoss")
  -- PyTorch 1.13's value for these numbers, weight and label_smoothing = 0.1 (an independent check)
  check(F.cross_entropy(xt, yt, {weight = wt, label_smoothing = 0.1}), 1.909656947801923, 1e-12, "PyTorch's value")
  -- 1-D input (C) with a (C) target: one sample
  check(F.cross_entropy(st.tensor(x[1], "f64"), st.tensor(y[1], "f64")), per_sample(0)[1], 1e-12, "1-D")
  -- (N, C, d): the class dim is 2; the same samples laid out along d
  local x3 = xt:t():unsqueeze(1)           -- (1, 4, 3)
  local y3 = yt:t():unsqueeze(1)
  check(F.cross_entropy(x3, y3, {reduction = "none"}), {per_sample(0)}, 1e-12, "(N, C, d) none")
  check(F.cross_entropy(x3, y3, {weight = wt}), mean(per_sample(0, w)), 1e-12, "(N, C, d) weight mean")
  -- gradients for the logits and the targets by central differences
  local flat_x, flat_y = {}, {}
  for n = 1, 3 do for c = 1, 4 do flat_x[#flat_x + 1] = x[n][c]; flat_y[#flat_y + 1] = y[n][c] end end
  local opts = {weight = wt, label_smoothing = 0.15}
  local xg = xt:clone():requires_grad_()
  local yg = yt:clone():requires_grad_()
  F.cross_entropy(xg, yg, opts):backward()
  local one = st.tensor(1, "f64")
  local gx = fd_grad(function(t) return F.cross_entropy(t:reshape(3, 4), yt, opts) end, flat_x, one)
  local gy = fd_grad(function(t) return F.cross_entropy(xt, t:reshape(3, 4), opts) end, flat_y, one)
  check(xg.grad:reshape(-1), gx, 1e-6, "gradient for the logits")
  check(yg.grad:reshape(-1), gy, 1e-6, "gradient for the targets")
  -- errors: a float target of another shape, an integer target of the input's shape, ignore_index
  H.raises(function() return F.cross_entropy(xt, st.ones(3, "f64")) end,
    "a float target holds class probabilities and must have the input's shape (3, 4), got (3)")
  H.raises(function() return F.cross_entropy(xt, st.ones({3, 4}, "i64")) end,
    "a target of the input's shape (3, 4) holds class probabilities and must be a float tensor, got i64")
  H.raises(function() return F.cross_entropy(xt, yt, {ignore_index = 1}) end,
    "ignore_index is not supported with class-probability targets")
  H.raises(function() return F.cross_entropy(xt, yt, {weight = st.ones(3, "f64")}) end,
    "weight must be a 1-D tensor of C = 4 class weights, got shape (3)")
  H.raises(function() return F.cross_entropy(xt, yt, {label_smoothing = 1.5}) end,
    "label_smoothing must be in [0, 1], got 1.5")
end)

test("arguments and options are checked", function()
  H.raises(function() return nn.LeakyReLU("x") end, "leaky_relu: negative_slope must be a number, got x")
  H.raises(function() return nn.Softplus(0) end, "softplus: beta must be a positive number, got 0")
  H.raises(function() return nn.ELU(1, 2) end, "ELU: unexpected argument #2 (2)")
  H.raises(function() return nn.PReLU({num_parameter = 2}) end, "PReLU: unknown option 'num_parameter'")
  H.raises(function() return nn.PReLU({num_parameters = 0}) end, "PReLU: num_parameters must be an integer >= 1, got 0")
  H.raises(function() return F.huber_loss(st.ones(2), st.ones(2), {delta = 0}) end,
    "huber_loss: delta must be a positive number, got 0")
  H.raises(function() return F.smooth_l1_loss(st.ones(2), st.ones(2), {betta = 1}) end,
    "smooth_l1_loss: unknown option 'betta'")
  H.raises(function() return F.kl_div(st.ones(2), st.ones(2), {reduction = "batch"}) end,
    "kl_div: reduction must be")
  H.raises(function() return nn.KLDivLoss({logtarget = true}) end, "KLDivLoss: unknown option 'logtarget'")
end)

H.done()
