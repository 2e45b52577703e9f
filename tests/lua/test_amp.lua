-- test_amp.lua — st.autocast (matmuls in bf16/f16, reductions, softmax and losses in f32) and
-- st.amp.GradScaler: values against bf16 rounding done in plain Lua (string.pack), dtypes of each
-- op family, gradients under autocast against explicitly cast code, and the scaler's rules (scale,
-- unscale_, a skipped step on inf, backoff and growth) against hand-computed numbers.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check, raises = H.test, H.eq, H.check_near, H.raises
local F = st.nn.functional

-- round an f64 to bf16 (nearest, ties to even), through its f32 bits
local function bf16(v)
  local u = string.unpack("<I4", string.pack("<f", v))
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000
  return (string.unpack("<f", string.pack("<I4", u)))
end

test("matmul_in_bf16", function()
  local g = H.lcg(21)
  local xs, ws = H.nested({3, 16}, g), H.nested({16, 4}, g)
  local x, w = st.tensor(xs), st.tensor(ws)
  local y = st.autocast("bf16", function() return x:matmul(w) end)
  eq(y:dtype(), "bf16", "dtype")
  local want = {}
  for i = 1, 3 do
    want[i] = {}
    for j = 1, 4 do
      local s = 0
      for k = 1, 16 do s = s + bf16(xs[i][k]) * bf16(ws[k][j]) end
      want[i][j] = bf16(s)
    end
  end
  check(y:float(), want, 8e-3, "bf16(sum bf16(x) bf16(w))") -- one bf16 ulp
  -- the inputs are rounded: 1 + 2^-8 + 2^-10 is 1 + 2^-7 in bf16, so x @ (1, -1) is 2^-7 (f32: 2^-8 + 2^-10)
  local a = st.tensor({{1 + 2 ^ -8 + 2 ^ -10, 1}})
  local b = st.tensor({{1}, {-1}})
  check(st.autocast("bf16", function() return a:matmul(b) end):float(), {{2 ^ -7}}, 0, "bf16 inputs")
  check(a:matmul(b), {{2 ^ -8 + 2 ^ -10}}, 0, "f32 outside autocast")
  -- f16 the same way; f64 and integer matmuls are left alone
  eq(st.autocast("f16", function() return x:matmul(w) end):dtype(), "f16", "f16")
  eq(st.autocast("bf16", function() return x:double():matmul(w:double()) end):dtype(), "f64", "f64 untouched")
  eq(st.autocast("bf16", function() return st.ones(2, 2, "i64"):matmul(st.ones(2, 2, "i64")) end):dtype(), "i64", "i64")
end)

test("f32_ops_under_autocast", function()
  local h = st.ones(301, "bf16")
  local guard <close> = st.autocast("bf16")
  eq(st.autocast_dtype(), "bf16", "autocast_dtype")
  local s = h:sum()
  eq(s:dtype(), "f32", "sum dtype")
  eq(s:item(), 301, "sum in f32 (bf16 cannot hold 301)")
  local g = H.lcg(5)
  local vals = H.nested({2, 5}, g)
  local xb = st.tensor(vals):to("bf16")
  local sm = xb:softmax(2)
  eq(sm:dtype(), "f32", "softmax dtype")
  local want = {}
  for i = 1, 2 do
    local m, z = -math.huge, 0
    for j = 1, 5 do m = math.max(m, bf16(vals[i][j])) end
    for j = 1, 5 do z = z + math.exp(bf16(vals[i][j]) - m) end
    want[i] = {}
    for j = 1, 5 do want[i][j] = math.exp(bf16(vals[i][j]) - m) / z end
  end
  check(sm, want, 1e-6, "softmax of the bf16 values, in f32")
  eq(xb:log_softmax(2):dtype(), "f32", "log_softmax")
  eq(xb:mean():dtype(), "f32", "mean")
  eq(xb:var():dtype(), "f32", "var")
  eq(xb:logsumexp(2):dtype(), "f32", "logsumexp")
  eq(F.cross_entropy(xb, st.tensor({1, 3}, "i64")):dtype(), "f32", "cross_entropy")
  eq(F.layer_norm(xb, {5}):dtype(), "f32", "layer_norm")
  eq(xb:max():dtype(), "bf16", "max keeps its dtype (not on the f32 list)")
  -- a Linear's output stays in bf16 (its bias is cast too), conv2d's as well
  local lin = st.nn.Linear(5, 3)
  eq(lin(st.tensor(vals)):dtype(), "bf16", "Linear")
  local conv = st.nn.Conv2d(2, 3, 3)
  eq(conv(st.randn(1, 2, 5, 5)):dtype(), "bf16", "Conv2d")
end)

test("autocast_f32_elementwise_and_low_precision_attention", function()
  local g = H.lcg(9)
  local vals = H.nested({2, 6}, g)
  local xb = st.tensor(vals):to("bf16")
  do
    local guard <close> = st.autocast("bf16")
    -- PyTorch's f32 list: f16/bf16 in, f32 out, computed from the rounded inputs
    for _, name in ipairs({"exp", "expm1", "log1p", "reciprocal"}) do
      local y = xb[name](xb)
      eq(y:dtype(), "f32", name .. " dtype")
      check(y, xb:float()[name](xb:float()), 0, name .. " of the bf16 values, in f32")
    end
    local pos = xb:abs() + 0.5
    eq(pos:log():dtype(), "f32", "log")
    eq(pos:rsqrt():dtype(), "f32", "rsqrt")
    eq(xb:pow(2):dtype(), "f32", "pow")
    check(xb:pow(3), xb:float():pow(3), 0, "pow in f32")
    -- the rest keeps the inputs' dtype
    eq(xb:sigmoid():dtype(), "bf16", "sigmoid")
    eq(F.elu(xb):dtype(), "bf16", "elu keeps its input's precision (PyTorch's lists do not name it)")
    eq(F.mish(xb):dtype(), "bf16", "mish likewise")
    eq(F.softplus(xb):dtype(), "f32", "softplus is on the f32 list")
    eq(xb:tanh():dtype(), "bf16", "tanh")
    eq((xb * xb):dtype(), "bf16", "mul")
    -- f32 stays f32 (only f16/bf16 are promoted)
    eq(st.tensor(vals):exp():dtype(), "f32", "f32 exp")
  end
  -- attention: f32 operands rounded to bf16, computed in f32, returned in bf16; gradients reach
  -- the f32 operands
  local q, k, v = st.randn(2, 4, 8):requires_grad_(), st.randn(2, 5, 8):requires_grad_(), st.randn(2, 5, 8):requires_grad_()
  local y = st.autocast("bf16", function() return F.scaled_dot_product_attention(q, k, v) end)
  eq(y:dtype(), "bf16", "attention dtype")
  local want = F.scaled_dot_product_attention(q:detach():to("bf16"), k:detach():to("bf16"), v:detach():to("bf16"))
  check(y:float(), want:float(), 0, "attention of the rounded operands")
  y:float():sum():backward()
  eq(q.grad:dtype(), "f32", "q's gradient dtype")
  assert(q.grad:abs():sum():item() > 0, "q has a gradient")
end)

test("recurrent_layers_under_autocast", function()
  -- the whole recurrence in bf16 (PyTorch's fused cells): outputs and final states bf16, close to
  -- the f32 run; the f32 parameters get f32 gradients
  st.manual_seed(3)
  for _, name in ipairs({"LSTM", "GRU"}) do
    local m = st.nn[name](5, 6, {num_layers = 2, batch_first = true})
    local x = st.randn(3, 4, 5)
    local want = m(x)
    local y, hx = st.autocast("bf16", function() return m(x) end)
    eq(y:dtype(), "bf16", name .. " output dtype")
    local hn = name == "LSTM" and hx[1] or hx
    eq(hn:dtype(), "bf16", name .. " final state dtype")
    if name == "LSTM" then eq(hx[2]:dtype(), "bf16", "LSTM cell state dtype") end
    check(y:float(), want, 0.05, name .. " values near the f32 run")
    y:float():sum():backward()
    eq(m.weight_ih_l0.grad:dtype(), "f32", name .. " gradient dtype")
    -- an f32 initial state is cast too
    local h0 = st.zeros(2, 3, 6)
    local y2 = st.autocast("bf16", function()
      return m(x, name == "LSTM" and {h0, st.zeros(2, 3, 6)} or h0)
    end)
    eq(y2:dtype(), "bf16", name .. " with an initial state")
  end
end)

test("autocast_scopes_and_errors", function()
  eq(st.autocast_dtype(), nil, "off by default")
  local seen = {}
  st.autocast("f16", function()
    seen[1] = st.autocast_dtype()
    st.autocast(false, function() seen[2] = st.autocast_dtype() end)
    do
      local g <close> = st.autocast("bf16")
      seen[3] = st.autocast_dtype()
    end
    seen[4] = st.autocast_dtype()
  end)
  eq(seen[1], "f16", "on"); eq(seen[2], nil, "off inside"); eq(seen[3], "bf16", "nested guard"); eq(seen[4], "f16", "restored")
  eq(st.autocast_dtype(), nil, "off after")
  raises(function() st.autocast("f32") end, 'autocast: the dtype must be "bf16" or "f16", got "f32"')
  raises(function() st.autocast(3) end, "autocast: expected a dtype")
  raises(function() st.autocast("f16", function() error("inside") end) end, "inside")
  eq(st.autocast_dtype(), nil, "popped after an error")
  eq(select(2, st.autocast("bf16", function(a, b) return a, b end, 1, 2)), 2, "arguments and results")
end)

test("gradients_under_autocast", function()
  local g = H.lcg(77)
  local x = st.tensor(H.nested({4, 6}, g))
  local y = st.tensor({1, 3, 2, 1}, "i64")
  local w1, b1 = st.tensor(H.nested({5, 6}, g)):requires_grad_(), st.tensor(H.nested({5}, g)):requires_grad_()
  local w2 = st.tensor(H.nested({3, 5}, g)):requires_grad_()
  local loss = st.autocast("bf16", function()
    return F.cross_entropy(F.linear(F.linear(x, w1, b1):relu(), w2), y)
  end)
  eq(loss:dtype(), "f32", "loss")
  loss:backward()
  eq(w1.grad:dtype(), "f32", "f32 parameters get f32 gradients")
  -- the same computation with the casts written out
  local v1, c1, v2 = w1:detach():requires_grad_(), b1:detach():requires_grad_(), w2:detach():requires_grad_()
  local h = (x:to("bf16"):matmul(v1:to("bf16"):t()) + c1:to("bf16")):relu()
  local z = h:matmul(v2:to("bf16"):t())
  local l2 = F.cross_entropy(z:float(), y)
  l2:backward()
  check(loss:item(), l2:item(), 1e-6, "loss")
  check(w1.grad, v1.grad, 1e-5, "w1.grad")
  check(b1.grad, c1.grad, 1e-5, "b1.grad")
  check(w2.grad, v2.grad, 1e-5, "w2.grad")
  -- and close to the f32 gradients (bf16 precision)
  local u2 = w2:detach():requires_grad_()
  F.cross_entropy(F.linear(F.linear(x, w1:detach(), b1:detach()):relu(), u2), y):backward()
  check(w2.grad, u2.grad, 3e-2, "near f32")
end)

-- ---- GradScaler ----

test("grad_scaler_scales_unscales_and_grows", function()
  local w = st.tensor({1, 2}):requires_grad_()
  local x = st.tensor({3, 4})
  local opt = st.optim.SGD({w}, {lr = 0.5})
  local sc = st.amp.GradScaler{init_scale = 1024, growth_interval = 2}
  eq(sc:get_scale(), 1024, "init")
  local l = (x * w):sum()
  check(sc:scale(l), 1024 * 11, 0, "scaled loss")
  sc:scale(l):backward()
  check(w.grad, {3 * 1024, 4 * 1024}, 0, "scaled gradient")
  sc:unscale_(opt)
  check(w.grad, {3, 4}, 0, "unscaled")
  raises(function() sc:unscale_(opt) end, "already called on this optimizer")
  sc:step(opt)
  check(w, {1 - 1.5, 2 - 2}, 1e-6, "stepped with the unscaled gradient")
  raises(function() sc:step(opt) end, "step: already called")
  sc:update()
  eq(sc:get_scale(), 1024, "one good step: unchanged")
  opt:zero_grad()
  sc:scale((x * w):sum()):backward()
  sc:step(opt)                 -- unscale_ inside
  check(w, {-0.5 - 1.5, 0 - 2}, 1e-6, "second step")
  sc:update()
  eq(sc:get_scale(), 2048, "growth after growth_interval good steps")
  raises(function() sc:update() end, "no inf checks were recorded")
  eq(sc:state_dict().scale, 2048, "state_dict")
end)

test("grad_scaler_skips_on_inf_and_backs_off", function()
  local w = st.tensor({1, 2}):requires_grad_()
  local opt = st.optim.SGD({w}, {lr = 0.5})
  local sc = st.amp.GradScaler{init_scale = 8}
  ;(w * st.tensor({math.huge, 1})):sum():backward()
  eq(sc:step(opt), nil, "skipped")
  check(w, {1, 2}, 0, "parameters untouched")
  sc:update()
  eq(sc:get_scale(), 4, "backoff")
  opt:zero_grad()
  ;(w * st.tensor({0 / 0, 1})):sum():backward()  -- NaN
  sc:step(opt)
  check(w, {1, 2}, 0, "NaN: skipped too")
  sc:update()
  eq(sc:get_scale(), 2, "backoff again")
end)

test("grad_scaler_keeps_small_f16_gradients", function()
  -- h and the loss in f16: the gradient reaching w's f16 copy is 1e-4 * 1e-4 = 1e-8, below f16's
  -- smallest subnormal (6e-8): unscaled it flushes to zero, scaled by 2^12 it is 4e-5 (and the scaled
  -- loss is f32, as PyTorch's scale promotes an f16 loss)
  local function grad(scale)
    local sc = st.amp.GradScaler{init_scale = scale}
    local w = st.tensor({1, 1}):requires_grad_()
    local opt = st.optim.SGD({w}, {lr = 0})
    local loss = (w:to("f16") * 1e-4 * 1e-4):sum()
    eq(loss:dtype(), "f16", "f16 loss")
    local scaled = sc:scale(loss)
    eq(scaled:dtype(), "f32", "scaled in f32")
    scaled:backward()
    sc:unscale_(opt)
    return w.grad:tolist()
  end
  check(grad(1), {0, 0}, 0, "flushed to zero in f16")
  check(grad(4096), {1e-8, 1e-8}, 2e-2, "kept with a scale of 2^12")
  eq(st.amp.GradScaler():get_scale(), 65536, "default scale")
end)

test("grad_scaler_options_and_disabled", function()
  raises(function() st.amp.GradScaler{init_scal = 1} end, "unknown option 'init_scal'")
  raises(function() st.amp.GradScaler{growth_factor = 0.5} end, "growth_factor must be > 1")
  raises(function() st.amp.GradScaler{backoff_factor = 2} end, "backoff_factor must be in (0, 1)")
  raises(function() st.amp.GradScaler{growth_interval = 1.5} end, "growth_interval must be a positive integer")
  raises(function() st.amp.GradScaler{enabled = 1} end, "enabled must be a boolean")
  local sc = st.amp.GradScaler{enabled = false}
  local w = st.tensor({1.0}):requires_grad_()
  local l = w:sum()
  eq(sc:scale(l), l, "disabled: scale is the identity")
  l:backward()
  local opt = st.optim.SGD({w}, {lr = 1})
  sc:step(opt)
  check(w, {0}, 0, "disabled: a plain step")
  sc:update()
  eq(sc:get_scale(), 1.0, "disabled scale")
  eq(st.amp.autocast, st.autocast, "st.amp.autocast")
end)

H.done()
