-- test_nn_norm.lua — issue 14, item 3: BatchNorm1d/2d (running statistics, momentum, train/eval),
-- GroupNorm, InstanceNorm1d/2d and F.scaled_dot_product_attention (causal flag, bool and float
-- masks, dropout). References: the statistics computed in Lua, identities with layer_norm and an
-- explicit softmax(q k^T / sqrt(d)) v, finite differences for the gradients.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn, F = st.nn, st.nn.functional
local test, eq, check = H.test, H.eq, H.check_near

local lcg, nested = H.lcg, H.nested

-- per-channel mean and biased / unbiased variance of a (N, C, L) table
local function channel_stats(x)
  local N, C, L = #x, #x[1], #x[1][1]
  local mean, var, uvar = {}, {}, {}
  for c = 1, C do
    local s, n = 0, N * L
    for i = 1, N do for l = 1, L do s = s + x[i][c][l] end end
    local m = s / n
    local q = 0
    for i = 1, N do for l = 1, L do q = q + (x[i][c][l] - m) ^ 2 end end
    mean[c], var[c], uvar[c] = m, q / n, q / (n - 1)
  end
  return mean, var, uvar
end

test("BatchNorm1d: batch statistics in training, running ones in eval", function()
  local xt = nested({4, 3, 5}, lcg(7))
  local x = st.tensor(xt, "f64")
  local bn = nn.BatchNorm1d(3, {dtype = "f64", momentum = 0.2})
  bn.weight = nn.Parameter(st.tensor({1, 2, 0.5}, "f64"))
  bn.bias = nn.Parameter(st.tensor({0, -1, 3}, "f64"))
  local mean, var, uvar = channel_stats(xt)
  local want = {}
  for i = 1, 4 do
    want[i] = {}
    for c = 1, 3 do
      want[i][c] = {}
      local w, b = ({1, 2, 0.5})[c], ({0, -1, 3})[c]
      for l = 1, 5 do want[i][c][l] = (xt[i][c][l] - mean[c]) / math.sqrt(var[c] + 1e-5) * w + b end
    end
  end
  check(bn(x), want, 1e-10, "training output")
  local rm, rv = {}, {}
  for c = 1, 3 do rm[c], rv[c] = 0.2 * mean[c], 0.8 + 0.2 * uvar[c] end
  check(bn.running_mean, rm, 1e-12, "running_mean after one step")
  check(bn.running_var, rv, 1e-12, "running_var (unbiased) after one step")
  eq(bn.num_batches_tracked:item(), 1, "num_batches_tracked")
  bn:eval()
  local y = bn(x)
  local w2 = {}
  for i = 1, 4 do
    w2[i] = {}
    for c = 1, 3 do
      w2[i][c] = {}
      local w, b = ({1, 2, 0.5})[c], ({0, -1, 3})[c]
      for l = 1, 5 do w2[i][c][l] = (xt[i][c][l] - rm[c]) / math.sqrt(rv[c] + 1e-5) * w + b end
    end
  end
  check(y, w2, 1e-10, "eval output uses the running statistics")
  check(bn.running_mean, rm, 1e-12, "eval leaves them alone")
  eq(bn.num_batches_tracked:item(), 1, "eval counts nothing")
  -- the state dict has PyTorch's keys
  local keys = bn:state_dict_keys()
  eq(table.concat(keys, ","), "weight,bias,running_mean,running_var,num_batches_tracked", "state_dict keys")
  -- (N, C) input
  local x2 = st.tensor({{1, 2}, {3, 6}}, "f64")
  check(nn.BatchNorm1d(2, {dtype = "f64", affine = false})(x2), {{-1, -1}, {1, 1}}, 1e-4, "(N, C) input")
end)

test("BatchNorm1d momentum = false: the cumulative average (PyTorch's momentum=None)", function()
  local bn = nn.BatchNorm1d(3, {dtype = "f64", momentum = false})
  local sm, su = {0, 0, 0}, {0, 0, 0}
  for step = 1, 3 do
    local xt = nested({4, 3, 5}, lcg(10 + step))
    bn(st.tensor(xt, "f64"))
    local mean, _, uvar = channel_stats(xt)
    for c = 1, 3 do sm[c], su[c] = sm[c] + mean[c], su[c] + uvar[c] end
  end
  -- after k batches the running statistics are the plain averages of the batches' statistics
  -- (running_var starts at 1 but the first factor is 1/1, so the initial values drop out)
  check(bn.running_mean, {sm[1] / 3, sm[2] / 3, sm[3] / 3}, 1e-12, "running_mean = average of batch means")
  check(bn.running_var, {su[1] / 3, su[2] / 3, su[3] / 3}, 1e-12, "running_var = average of unbiased variances")
  eq(bn.num_batches_tracked:item(), 3, "three batches")
  eq(tostring(bn):match("momentum=(%w+)"), "None", "printed as PyTorch prints it")
  -- bad values are errors; momentum = nil is the default 0.1
  H.raises(function() nn.BatchNorm1d(3, {momentum = "x"}) end, "momentum must be a number or false")
  eq(nn.BatchNorm1d(3).momentum, 0.1, "default momentum")
  H.raises(function() F.batch_norm(st.ones(4, 3), st.zeros(3), st.ones(3), nil, nil,
    {training = true, momentum = st.ones(2)}) end, "momentum tensor must be 0-d")
end)

test("BatchNorm2d: gradients as finite differences; training step fuses", function()
  local xt = nested({2, 2, 3, 3}, lcg(3))
  local r = st.tensor(nested({2, 2, 3, 3}, lcg(9)), "f64")
  local w = st.tensor({1.5, -0.5}, "f64")
  local function f(xx) return F.batch_norm(xx, nil, nil, w, nil, {training = true}) end
  local x = st.tensor(xt, "f64"):requires_grad_()
  local loss = (f(x) * r):sum()
  loss:backward()
  local flat = st.tensor(xt, "f64"):reshape(-1):tolist()
  local g = {}
  for i = 1, #flat do
    local up, dn = {table.unpack(flat)}, {table.unpack(flat)}
    up[i], dn[i] = flat[i] + 1e-6, flat[i] - 1e-6
    g[i] = ((f(st.tensor(up, "f64"):reshape(2, 2, 3, 3)) * r):sum():item()
      - (f(st.tensor(dn, "f64"):reshape(2, 2, 3, 3)) * r):sum():item()) / 2e-6
  end
  check(x.grad:reshape(-1), g, 1e-6, "dx")
  -- kernels of a training forward + backward on the CPU JIT (issue 14 asks one forward, at most
  -- two backward): the forward's mean is stitched into the variance's kernel though the running
  -- mean's update reads it too (partition.c join_side: a value over the rows, stored at the row's
  -- index; was 3 kernels); the normalization and the running statistics' updates are merged into
  -- that kernel (partition.c merge_over_rows; were a second kernel), and num_batches_tracked's
  -- count runs in the same launch (a horizontal batch with the reduce kernel, the CPU's)
  st.set_jit_min(0)
  local m = nn.BatchNorm2d(8)
  local xin = st.randn(16, 8, 6, 6):requires_grad_()
  st.sync(xin)
  for i = 1, 2 do
    local s0 = st.stats().kernels_launched
    local y = m(xin)
    st.sync(y, m.running_mean, m.running_var)
    local s1 = st.stats().kernels_launched
    y:sum():backward()
    st.sync(xin.grad, m.weight.grad, m.bias.grad)
    local s2 = st.stats().kernels_launched
    if i == 2 then
      print(string.format("  BatchNorm2d (16, 8, 6, 6), training: forward with the running statistics %d kernels, backward %d",
        s1 - s0, s2 - s1))
      if st.device() == "cpu" then
        assert(s1 - s0 <= 1 and s2 - s1 <= 2, "more kernels than expected")
      else
        assert(s1 - s0 <= 3 and s2 - s1 <= 4, "more kernels than expected")
      end
    end
    xin.grad = nil
  end
  st.set_jit_min(-1)
end)

-- The composed normalization of xt (f64) over dims (rms: no centering), weight and bias (nil:
-- none) seen in wshape: its loss sum(y * r) against `loss` and its gradients against x's, w's and
-- b's, which a backward of `loss` filled. Returns its mean and biased variance.
local function check_composed_norm(xt, dims, eps, w, b, wshape, r, loss, x, rms)
  local x2 = st.tensor(xt, "f64"):requires_grad_()
  local w2 = w and w:detach():requires_grad_() or nil
  local b2 = b and b:detach():requires_grad_() or nil
  local mean = rms and 0 or x2:mean(dims, true)
  local var = ((x2 - mean) * (x2 - mean)):mean(dims, true)
  local y = (x2 - mean) / (var + eps):sqrt()
  if w2 then y = y * w2:reshape(wshape) end
  if b2 then y = y + b2:reshape(wshape) end
  check((y * r):sum(), loss, 1e-12, "loss")
  ;(y * r):sum():backward()
  check(x.grad, x2.grad, 1e-10, "dx")
  if w2 then check(w.grad, w2.grad, 1e-10, "dweight") end
  if b2 then check(b.grad, b2.grad, 1e-10, "dbias") end
  return mean, var
end

test("BatchNorm's own backward: the composed gradient's values, fewer kernels in a residual block", function()
  -- F.batch_norm's training form is one op whose backward takes two sums of one pass over g and x
  -- (nn_functional.lua batch_norm_fn); the gradients are the composed expression's, through the
  -- batch mean and variance, in f64 with weight and bias, with and without each
  local rnd = lcg(77)
  local xt = nested({3, 4, 2, 5}, rnd)
  local r = st.tensor(nested({3, 4, 2, 5}, rnd), "f64")
  for _, affine in ipairs({true, false}) do
    local w = affine and st.tensor({1.5, -0.5, 0.25, 2}, "f64"):requires_grad_() or nil
    local b = affine and st.tensor({0.1, -0.2, 0.3, 0}, "f64"):requires_grad_() or nil
    local x = st.tensor(xt, "f64"):requires_grad_()
    local rm, rv = st.zeros(4, "f64"), st.ones(4, "f64")
    local loss = (F.batch_norm(x, rm, rv, w, b, {training = true}) * r):sum()
    loss:backward()
    local mean, var = check_composed_norm(xt, {1, 3, 4}, 1e-5, w, b, {1, 4, 1, 1}, r, loss, x)
    -- the running statistics as before (the batch's mean, its unbiased variance)
    local n = 3 * 2 * 5
    check(rm, mean:detach():reshape(4) * 0.1, 1e-12, "running_mean")
    check(rv, st.ones(4, "f64") * 0.9 + var:detach():reshape(4) * (0.1 * n / (n - 1)), 1e-12, "running_var")
  end
  if st.device() ~= "cpu" then return end
  -- a residual block's training step: 12 kernels (14 with the composed gradient, whose three
  -- dependent reductions per BatchNorm cost a kernel each here), and the peak of bytes lower
  st.set_jit_min(0)
  st.manual_seed(1)
  local net = nn.Sequential(nn.Conv2d(4, 8, 3, {padding = 1, bias = false}), nn.BatchNorm2d(8), nn.ReLU(),
    nn.Conv2d(8, 8, 3, {padding = 1, bias = false}), nn.BatchNorm2d(8))
  local x = st.randn(8, 4, 10, 10)
  st.sync(x)
  for i = 1, 2 do
    local s0 = st.stats().kernels_launched
    local loss = (net(x) + st.cat({x, x}, 2)):relu():sum()
    loss:backward()
    local ps = {}
    for _, p in ipairs(net:parameters()) do ps[#ps + 1] = p.grad end
    st.sync(loss, table.unpack(ps))
    local k = st.stats().kernels_launched - s0
    if i == 2 then
      print(string.format("  conv-BatchNorm-ReLU-conv-BatchNorm + residual, training step: %d kernels", k))
      assert(k <= 12, "more kernels than expected: " .. k)
    end
    net:zero_grad()
  end
  st.set_jit_min(-1)
end)

-- A training step of a normalization over the last dim of (R, C) f32 on the CPU, forward and
-- backward in one flush: at most 2 kernels once its plan is cached, and at its first run a peak
-- of memory below 2.5x x's bytes above what was in use (y and dx are 2x). fn(x, w, b) normalizes
-- (b nil without `bias`). The step must be the largest of the process so far: bytes_peak is a
-- high-water mark.
local function norm_step_memory(name, R, C, bias, fn)
  if st.device() ~= "cpu" then return end
  st.set_jit_min(0)
  local xs, ws = st.randn(R, C):requires_grad_(), (st.randn(C) + 1):requires_grad_()
  local bs, dy = bias and st.randn(C):requires_grad_() or nil, st.randn(R, C)
  st.sync(xs, ws, dy, bs or dy)
  local grow
  for i = 1, 2 do
    collectgarbage()
    local s0 = st.stats()
    assert(i == 2 or s0.bytes_peak < s0.bytes_in_use + 2 * R * C * 4, "an earlier peak hides this step's")
    local y = fn(xs, ws, bs)
    y:backward(dy)
    st.sync(y, xs.grad, ws.grad, bs and bs.grad or y)   -- one flush
    local s1 = st.stats()
    local k = s1.kernels_launched - s0.kernels_launched
    if i == 1 then grow = (s1.bytes_peak - s0.bytes_in_use) / (R * C * 4) end
    if i == 2 then
      print(string.format("  %s (%d, %d) training step: %d kernels, peak %.2fx the input's bytes above what was in use",
        name, R, C, k, grow))
      assert(k <= 2, "more kernels than expected: " .. k)
      assert(grow < 2.5, "more memory than y and dx: " .. grow)
    end
    y, xs.grad, ws.grad = nil, nil, nil
    if bs then bs.grad = nil end
  end
  st.set_jit_min(-1)
end

test("LayerNorm's and RMSNorm's own backward: the composed gradients, no normalized copy stored", function()
  -- F.layer_norm and F.rms_norm with a gradient are one op each whose backward rebuilds xhat from
  -- x and the row statistics in each kernel that reads it (nn_functional.lua layer_norm_fn,
  -- rms_norm_fn); the gradients are the composed expression's, in f64, over one and two
  -- normalized dims, with and without affine
  for _, rms in ipairs({false, true}) do
    local rnd = lcg(91)
    local xt = nested({3, 2, 4, 5}, rnd)
    local r = st.tensor(nested({3, 2, 4, 5}, rnd), "f64")
    for _, case in ipairs({{{5}, {5}}, {{4, 5}, {4, 5}}, {{5}, nil}}) do
      local ns, ws = case[1], case[2]
      local w = ws and (st.tensor(nested(ws, rnd), "f64") + 1):requires_grad_() or nil
      local b = ws and not rms and st.tensor(nested(ws, rnd), "f64"):requires_grad_() or nil
      local x = st.tensor(xt, "f64"):requires_grad_()
      local y = rms and F.rms_norm(x, ns, w, 1e-3) or F.layer_norm(x, ns, w, b, 1e-3)
      local loss = (y * r):sum()
      loss:backward()
      check_composed_norm(xt, #ns == 1 and {4} or {3, 4}, 1e-3, w, b, ws, r, loss, x, rms)
    end
  end
  -- without a gradient (no_grad): the plain ops, the same values as the op with its own backward
  local x = st.tensor(nested({3, 5}, lcg(5)), "f64"):requires_grad_()
  check(F.layer_norm(x, {5}), st.no_grad(function() return F.layer_norm(x, {5}) end), 1e-15, "no grad")
  check(F.rms_norm(x, {5}), st.no_grad(function() return F.rms_norm(x, {5}) end), 1e-15, "no grad")
  -- a training step in one flush: 2 kernels (the row kernel with the forward and the input
  -- gradient; the weight (and bias) gradients' column kernel), and no buffer of x's size beyond y
  -- and dx (the composed gradients stored xhat for the column kernel: 3.0x x's bytes); rms_norm's
  -- step larger than layer_norm's, whose peak would hide it
  norm_step_memory("layer_norm", 512, 256, true, function(xs, w, b) return F.layer_norm(xs, {256}, w, b) end)
  norm_step_memory("rms_norm", 1024, 512, false, function(xs, w) return F.rms_norm(xs, {512}, w) end)
end)

test("GroupNorm and InstanceNorm: identities with layer_norm and per-channel statistics", function()
  local x = st.tensor(nested({2, 4, 3, 2}, lcg(5)), "f64")
  -- one group: layer_norm over (C, H, W)
  check(F.group_norm(x, 1), F.layer_norm(x, {4, 3, 2}), 1e-12, "group_norm(1) = layer_norm")
  -- groups of 2 channels: layer_norm of each group's (2, 3, 2) block
  local g = F.group_norm(x, 2):reshape(2, 2, 2, 3, 2)
  check(g, F.layer_norm(x:reshape(2, 2, 2, 3, 2), {2, 3, 2}), 1e-12, "group_norm(2)")
  -- instance norm: each (sample, channel) over (H, W)
  check(F.instance_norm(x), F.layer_norm(x, {3, 2}), 1e-12, "instance_norm")
  local gn = nn.GroupNorm(2, 4, {dtype = "f64"})
  eq(tostring(gn), "GroupNorm(2, 4, eps=1e-05, affine=true)")
  check(gn(x), F.group_norm(x, 2), 1e-12, "GroupNorm module")
  local inn = nn.InstanceNorm2d(4, {affine = true, dtype = "f64"})
  check(inn(x), F.instance_norm(x), 1e-12, "InstanceNorm2d module")
  H.raises(function() return nn.GroupNorm(3, 4) end, "GroupNorm: num_groups (3) must divide num_channels (4)")
  H.raises(function() return F.group_norm(x, 3) end, "group_norm: num_groups must be an integer >= 1 dividing the 4 channels")
  H.raises(function() return nn.InstanceNorm2d(4, {track_running_stats = true}) end, "not supported")
  H.raises(function() return nn.BatchNorm2d(4, {affin = false}) end, "BatchNorm2d: unknown option 'affin'")
  H.raises(function() return nn.BatchNorm2d(4)(st.randn(2, 4, 3)) end, "BatchNorm2d: expected input of 4 dims, got (2, 4, 3)")
  H.raises(function() return F.batch_norm(st.randn(1, 3), nil, nil, nil, nil, {training = true}) end,
    "expected more than 1 value per channel")
end)

test("scaled_dot_product_attention: as the explicit formula; causal, masks, gradients", function()
  local gen = lcg(11)
  local q = st.tensor(nested({2, 3, 4}, gen), "f64")
  local k = st.tensor(nested({2, 5, 4}, gen), "f64")
  local v = st.tensor(nested({2, 5, 6}, gen), "f64")
  local function ref(qq, kk, vv, add) -- softmax(q k^T / 2 + add) v
    local s = qq:matmul(kk:transpose(2, 3)) * 0.5
    if add then s = s + add end
    return s:softmax(3):matmul(vv)
  end
  check(F.scaled_dot_product_attention(q, k, v), ref(q, k, v), 1e-12, "plain")
  check(F.scaled_dot_product_attention(q, k, v, {scale = 0.25}),
    (q:matmul(k:transpose(2, 3)) * 0.25):softmax(3):matmul(v), 1e-12, "scale")
  -- bool mask: key 2 hidden from every query; float mask added
  local keep = st.tensor({{true, false, true, true, true}}, "bool")
  local add = st.tensor({{0, -math.huge, 0, 0, 0}}, "f64")
  check(F.scaled_dot_product_attention(q, k, v, {attn_mask = keep}), ref(q, k, v, add), 1e-12, "bool mask")
  local fm = st.tensor(nested({3, 5}, gen), "f64")
  check(F.scaled_dot_product_attention(q, k, v, {attn_mask = fm}), ref(q, k, v, fm), 1e-12, "float mask")
  -- causal with as many keys as queries: query 1 sees key 1 only
  local kq, vq = k:narrow(2, 1, 3), v:narrow(2, 1, 3)
  local c = F.scaled_dot_product_attention(q, kq, vq, {is_causal = true})
  check(c[{{}, 1}], vq[{{}, 1}], 1e-12, "causal: the first query's output is the first value")
  local tri = st.tensor({{0, -math.huge, -math.huge}, {0, 0, -math.huge}, {0, 0, 0}}, "f64")
  check(c, ref(q, kq, vq, tri), 1e-12, "causal")
  -- gradients through q, k, v against the explicit formula's (itself tested elsewhere)
  local leaves = {q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()}
  local refl = {q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()}
  local r = st.tensor(nested({2, 3, 6}, gen), "f64")
  local l1 = (F.scaled_dot_product_attention(leaves[1], leaves[2], leaves[3], {attn_mask = fm}) * r):sum()
  l1:backward()
  local l2 = (ref(refl[1], refl[2], refl[3], fm) * r):sum()
  l2:backward()
  for i = 1, 3 do check(leaves[i].grad, refl[i].grad, 1e-12, "gradient " .. i) end
  -- dropout: p = 1 drops everything
  check(F.scaled_dot_product_attention(q, k, v, {dropout_p = 1}), st.zeros(2, 3, 6, "f64"), 0, "dropout_p = 1")
  H.raises(function() return F.scaled_dot_product_attention(q, k, v, {causal = true}) end,
    "scaled_dot_product_attention: unknown option 'causal'")
  H.raises(function() return F.scaled_dot_product_attention(q, v, v) end, "do not fit")
  H.raises(function() return F.scaled_dot_product_attention(q, k, v, {attn_mask = keep, is_causal = true}) end,
    "attn_mask and is_causal together")
end)

test("a convolution's epilogue: BatchNorm's affine at inference, the residual and ReLU in its kernel", function()
  -- on the CPU JIT: the padded input (its own kernel: a zero padding stays a base) and one matmul
  -- kernel whose epilogue adds the bias, applies eval BatchNorm's per-channel affine, adds the
  -- residual and the ReLU; the values are the interpreter's
  local conv = nn.Conv2d(4, 4, 3, {padding = 1})
  local bn = nn.BatchNorm2d(4)
  bn.running_mean:copy_(st.randn(4))
  bn.running_var:copy_(st.rand(4) + 0.5)
  bn:eval()
  local x = st.randn(2, 4, 6, 6)
  st.sync(x, conv.weight, conv.bias, bn.running_mean, bn.running_var, bn.weight, bn.bias)
  local function block() return F.relu(bn(conv(x)) + x) end
  st.set_jit_min(1 << 40)
  local want = block()
  st.sync(want)
  st.set_jit_min(0)
  for i = 1, 2 do
    local s0 = st.stats().kernels_launched
    local y = block()
    st.sync(y)
    if st.device() == "cpu" then   -- (the GPU's count is not pinned here)
      eq(st.stats().kernels_launched - s0, 2, "kernels of conv + bias + eval BatchNorm + residual + ReLU (run " .. i .. ")")
    end
    check(y, want, 1e-5, "values")
  end
  st.set_jit_min(-1)
end)

H.done()
