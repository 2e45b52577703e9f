-- test_nn_attention.lua — issue 14, items 3 and 5: nn.MultiheadAttention, nn.TransformerEncoderLayer
-- and nn.utils.clip_grad_norm_. References: the same computation written out with the module's
-- own weights (per head, plain matmuls and softmax), and norms computed in Lua.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn, F = st.nn, st.nn.functional
local test, eq, check = H.test, H.eq, H.check_near

-- multi-head attention written out: x* (N, L, E) batch first; masks as additive (N or 1, L, S)
local function mha_ref(m, q, k, v, add)
  local e, h = m.embed_dim, m.num_heads
  local d = e // h
  local w, b = m.in_proj_weight, m.in_proj_bias
  local qp = q:matmul(w:narrow(1, 1, e):t()) + b:narrow(1, 1, e)
  local kp = k:matmul(w:narrow(1, e + 1, e):t()) + b:narrow(1, e + 1, e)
  local vp = v:matmul(w:narrow(1, 2 * e + 1, e):t()) + b:narrow(1, 2 * e + 1, e)
  local heads, wsum = {}, nil
  for i = 1, h do
    local qi, ki, vi = qp:narrow(3, (i - 1) * d + 1, d), kp:narrow(3, (i - 1) * d + 1, d), vp:narrow(3, (i - 1) * d + 1, d)
    local s = qi:matmul(ki:transpose(2, 3)) * (1 / math.sqrt(d))
    if add then s = s + add end
    local a = s:softmax(3)
    heads[i] = a:matmul(vi)
    wsum = wsum and wsum + a or a
  end
  local out = st.cat(heads, 3):matmul(m.out_proj.weight:t()) + m.out_proj.bias
  return out, wsum * (1 / h)
end

test("MultiheadAttention: the heads written out; masks; batch_first or not", function()
  st.manual_seed(4)
  local m = nn.MultiheadAttention(8, 2, {dtype = "f64"})
  do -- a nonzero out_proj bias and in_proj_bias, so both are exercised
    local guard <close> = st.no_grad()
    m.in_proj_bias:copy_(st.randn(24, "f64") * 0.1)
    m.out_proj.bias:copy_(st.randn(8, "f64") * 0.1)
  end
  local q, k = st.randn(3, 4, 8, "f64"), st.randn(3, 5, 8, "f64")   -- (N, L, E), (N, S, E)
  local v = st.randn(3, 5, 8, "f64")
  local want, ww = mha_ref(m, q, k, v)
  -- the default layout is (L, N, E)
  local got, gw = m(q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2))
  check(got:transpose(1, 2), want, 1e-12, "output (L, N, E)")
  check(gw, ww, 1e-12, "weights averaged over the heads")
  local mb = nn.MultiheadAttention(8, 2, {dtype = "f64", batch_first = true})
  mb:load_state_dict(m:state_dict())
  check(mb(q, k, v), want, 1e-12, "batch_first")
  eq(select(2, mb(q, k, v, {need_weights = false})), nil, "need_weights = false")
  -- key_padding_mask: key 5 of sample 2 is padding; attn_mask (bool, true = masked) hides key 1
  local kpm = st.zeros(3, 5, "bool")
  kpm[{2, 5}] = true
  local add = st.zeros(3, 1, 5, "f64")
  add[{2, 1, 5}] = -math.huge
  check(mb(q, k, v, {key_padding_mask = kpm}), mha_ref(m, q, k, v, add), 1e-12, "key_padding_mask")
  local am = st.tensor({{true, false, false, false, false}}, "bool"):expand(4, 5)
  local add2 = st.tensor({{-math.huge, 0, 0, 0, 0}}, "f64")
  check(mb(q, k, v, {attn_mask = am}), mha_ref(m, q, k, v, add2), 1e-12, "bool attn_mask")
  -- causal self-attention
  local x = st.randn(2, 4, 8, "f64")
  local tri = st.tensor({{0, -math.huge, -math.huge, -math.huge}, {0, 0, -math.huge, -math.huge},
    {0, 0, 0, -math.huge}, {0, 0, 0, 0}}, "f64")
  check(mb(x, x, x, {is_causal = true}), mha_ref(m, x, x, x, tri), 1e-12, "is_causal")
  -- gradients reach every parameter
  mb:zero_grad()
  mb(x, x, x):sum():backward()
  for name, p in mb:named_parameters() do assert(p.grad, "no gradient for " .. name) end
  H.raises(function() return nn.MultiheadAttention(8, 3) end, "num_heads (3) must divide embed_dim (8)")
  H.raises(function() return mb(x, x, x, {mask = am}) end, "MultiheadAttention: unknown option 'mask'")
end)

test("TransformerEncoderLayer: the two blocks written out (post-norm and norm_first), eval mode", function()
  for _, nf in ipairs({false, true}) do
    st.manual_seed(8)
    local t = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, batch_first = true, norm_first = nf,
      dtype = "f64", activation = "gelu"})
    t:eval()
    local x = st.randn(2, 5, 8, "f64")
    local function sa(z) return (t.self_attn(z, z, z, {need_weights = false})) end
    local function ff(z) return t.linear2(F.gelu(t.linear1(z))) end
    local want
    if nf then
      local y = x + sa(t.norm1(x))
      want = y + ff(t.norm2(y))
    else
      local y = t.norm1(x + sa(x))
      want = t.norm2(y + ff(y))
    end
    check(t(x), want, 1e-12, "norm_first = " .. tostring(nf))
  end
  local keys = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16}):state_dict_keys()
  eq(table.concat(keys, ","), "self_attn.in_proj_weight,self_attn.in_proj_bias,self_attn.out_proj.weight,"
    .. "self_attn.out_proj.bias,linear1.weight,linear1.bias,linear2.weight,linear2.bias,norm1.weight,norm1.bias,"
    .. "norm2.weight,norm2.bias", "PyTorch's state_dict keys")
  H.raises(function() return nn.TransformerEncoderLayer(8, 2, {activation = "tanh"}) end, 'activation must be "relu" or "gelu"')
end)

test("clip_grad_norm_: the joint norm returned, gradients scaled to max_norm", function()
  local a = st.tensor({3, 4}, "f64"):requires_grad_()
  local b = st.tensor({{12}}, "f64"):requires_grad_()
  local loss = (a * a):sum() * 0.5 + (b * b):sum() * 0.5   -- grads: a, b
  loss:backward()
  local n = nn.utils.clip_grad_norm_({a, b}, 6.5)
  check(n, 13, 1e-12, "norm of (3, 4, 12)")
  check(a.grad, {1.5, 2}, 1e-6, "a.grad scaled by 6.5 / 13")
  check(b.grad, {{6}}, 1e-6, "b.grad")
  -- below the limit: unchanged
  local n2 = nn.utils.clip_grad_norm_({a, b}, 100)
  check(n2, 6.5, 1e-6, "norm after clipping")
  check(a.grad, {1.5, 2}, 1e-6, "unchanged")
  -- infinity and 1 norms
  check(nn.utils.clip_grad_norm_({a, b}, 100, {norm_type = math.huge}), 6, 1e-6, "max norm")
  check(nn.utils.clip_grad_norm_({a, b}, 100, {norm_type = 1}), 9.5, 1e-6, "1-norm")
  H.raises(function() return nn.utils.clip_grad_norm_({a}, 1, {norm = 2}) end, "clip_grad_norm_: unknown option 'norm'")
  H.raises(function() return nn.utils.clip_grad_norm_({a}, 1, {norm_type = -1}) end,
    "norm_type must be a number > 0 or math.huge, got -1")
  -- any p > 0 (p = 3: (3^3 + 4^3 + 12^3)^(1/3) of the gradients above, now (1.5, 2, 6) after the
  -- clip to 6.5), in f64 for f64 gradients
  local n3 = nn.utils.clip_grad_norm_({a, b}, 100, {norm_type = 3})
  eq(n3:dtype(), "f64", "the norm of f64 gradients is f64")
  check(n3, (a.grad:pow(3):sum() + b.grad:pow(3):sum()):item() ^ (1 / 3), 1e-12, "3-norm")
  check(n3, (1.5 ^ 3 + 2 ^ 3 + 6 ^ 3) ^ (1 / 3), 1e-6, "3-norm, about")
end)

test("clip_grad_norm_ is one flush with the optimizer's step", function()
  local lin = nn.Linear(6, 3)
  local opt = st.optim.SGD(lin:parameters(), {lr = 0.1})
  local x, y = st.randn(8, 6), st.randn(8, 3)
  st.sync(x, y, lin.weight, lin.bias)
  local loss = F.mse_loss(lin(x), y)
  loss:backward()
  local w0, b0 = lin.weight:clone(), lin.bias:clone()
  st.sync(w0, b0)
  local f0 = st.stats().flushes
  local norm = nn.utils.clip_grad_norm_(lin:parameters(), 0.01)
  opt:step({loss, norm})
  eq(st.stats().flushes - f0, 1, "flushes for the clip and the step")
  -- the step moved the weights by lr * the clipped gradient (norm 0.01)
  local moved = (lin.weight - w0):pow(2):sum():item() + (lin.bias - b0):pow(2):sum():item()
  check(math.sqrt(moved), 0.001, 1e-6, "lr * max_norm")
  assert(norm:item() > 0.01, "the norm before clipping")
end)

H.done()
