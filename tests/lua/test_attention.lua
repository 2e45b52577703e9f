-- test_attention.lua — issue 14, item 3: the attention op (st._attention, F.scaled_dot_product_attention,
-- nn.MultiheadAttention with need_weights = false), with or without a mask and dropout: one kernel, the
-- scores never stored, against the composed form (matmul, where, softmax, matmul) and its autograd.
-- On the CPU the fused op's f32 forward without causality gives the composed form's bits (the same
-- sums in the same order: base/opmath_attn.h; a causal row sums fewer terms, so f64 may differ in
-- the last bit); elsewhere, and on a GPU (the simulated one in make test), the same values within
-- rounding.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn, F = st.nn, st.nn.functional
local test, eq = H.test, H.eq
local cpu = st.device() == "cpu"

-- the composed form: matmul, the mask (bool: true may attend; float: added), causality, softmax,
-- F.dropout's (p), matmul
local function composed(q, k, v, scale, causal, mask, p)
  local s = q:matmul(k:transpose(-2, -1)) * scale
  if mask and mask:dtype() == "bool" then s = st.where(mask, s, -math.huge) elseif mask then s = s + mask end
  if causal then
    local lq, lk = q:size(-2), k:size(-2)
    s = st.where(st.arange(lq):reshape(lq, 1):ge(st.arange(lk):reshape(1, lk)), s, -math.huge)
  end
  local w = s:softmax(-1)
  if p then w = F.dropout(w, p, true) end
  return w:matmul(v)
end

-- max |a - b| / (1 + max |b|)
local function rel(a, b)
  local d = (a:double() - b:double()):abs():max():item()
  return d / (1 + b:double():abs():max():item())
end
-- within rounding; exact: the same bits
local function same(a, b, what, exact)
  local tol = exact and 0 or (a:dtype() == "f64" and 1e-13 or 2e-6)
  local e = rel(a, b)
  if e > tol then error(string.format("%s: relative difference %.3g > %.3g", what, e, tol), 2) end
end

local function randn(shape, dt) return st.randn(shape):to(dt) end

test("attention: the composed form's values (shapes, causal, long and short rows, views, dtypes)", function()
  st.manual_seed(3)
  -- (B, H, Lq, E, Lk, Ev): rows shorter and longer than 32 keys, Lq > Lk and Lq < Lk (causal),
  -- rows of more than one float block of the row sum (128 keys: jit/render_c.c "Float blocks")
  local shapes = {{2, 3, 5, 4, 6, 7}, {1, 2, 40, 8, 70, 16}, {2, 2, 33, 16, 17, 5}, {1, 1, 1, 3, 1, 2},
    {1, 1, 9, 8, 300, 8}}
  for _, dt in ipairs({"f32", "f64"}) do
    for _, s in ipairs(shapes) do
      local B, Hh, Lq, E, Lk, Ev = table.unpack(s)
      local q, k, v = randn({B, Hh, Lq, E}, dt), randn({B, Hh, Lk, E}, dt), randn({B, Hh, Lk, Ev}, dt)
      for _, causal in ipairs({false, true}) do
        local a = st._attention(q, k, v, nil, causal)
        eq(table.concat(a:shape(), "x"), table.concat({B, Hh, Lq, Ev}, "x"), "shape")
        eq(a:dtype(), dt, "dtype")
        same(a, composed(q, k, v, 1 / math.sqrt(E), causal), string.format("%s %s causal %s", dt,
          table.concat(s, "x"), tostring(causal)), cpu and dt == "f32" and not causal)
      end
    end
  end
  -- q, k, v as permuted views of one projection (the transformer's layout): read in place
  local x = st.randn({2, 16, 3 * 4 * 8})
  local qkv = x:reshape(2, 16, 3, 4, 8):permute(3, 1, 4, 2, 5)
  local q, k, v = qkv:select(1, 1), qkv:select(1, 2), qkv:select(1, 3)
  same(st._attention(q, k, v, 0.3, true), composed(q, k, v, 0.3, true), "views")
  -- batch dims broadcast (one k, v for every head), a 2-D call, f16 computed in f32
  local qb, kb, vb = st.randn({3, 5, 8}), st.randn({1, 7, 8}), st.randn({1, 7, 4})
  same(st._attention(qb, kb, vb), composed(qb, kb:expand(3, 7, 8), vb:expand(3, 7, 4), 1 / math.sqrt(8), false),
    "broadcast batch")
  same(st._attention(qb[1], kb[1], vb[1], nil, true), composed(qb[1], kb[1], vb[1], 1 / math.sqrt(8), true), "2-D")
  local h = st._attention(qb:half(), kb:half(), vb:half())
  eq(h:dtype(), "f16", "f16 result")
  same(h, composed(qb:half():float(), kb:half():float(), vb:half():float(), 1 / math.sqrt(8), false):half(), "f16")
  -- a row whose first 32 keys score -inf and later ones not (the GPU's online softmax must not
  -- take exp(-inf - -inf)); every key -inf: NaN, as the composed form
  local kinf = st.cat({st.full({1, 32, 2}, -math.huge), st.randn({1, 8, 2})}, 2)
  local vinf = st.randn({1, 40, 3})
  same(st._attention(st.ones(1, 2, 2), kinf, vinf, 1), composed(st.ones(1, 2, 2), kinf, vinf, 1, false), "-inf scores first")
  local allinf = st._attention(st.ones(1, 2, 2), st.full({1, 3, 2}, -math.huge), st.randn({1, 3, 3}), 1)
  eq(allinf:isnan():all():item(), true, "every score -inf gives NaN")
  -- no keys: 0; no queries: empty
  local z = st._attention(st.randn({2, 3, 4}), st.randn({2, 0, 4}), st.randn({2, 0, 5}))
  eq(z:abs():sum():item(), 0, "no keys gives 0")
  eq(st._attention(st.randn({2, 0, 4}), st.randn({2, 3, 4}), st.randn({2, 3, 5})):numel(), 0, "no queries")
end)

test("attention: F.scaled_dot_product_attention and MultiheadAttention use it, with the same results", function()
  st.manual_seed(5)
  local q, k, v = st.sync(st.randn({2, 2, 9, 8}), st.randn({2, 2, 9, 8}), st.randn({2, 2, 9, 8}))
  local s0 = st.stats().kernels_launched
  local y = st.sync(F.scaled_dot_product_attention(q, k, v, {is_causal = true, scale = 0.2}))
  eq(st.stats().kernels_launched - s0, 1, "F.scaled_dot_product_attention's kernels")
  same(y, composed(q, k, v, 0.2, true), "sdpa")
  -- is_causal as any true value (1 too), as the composed form reads it
  same(F.scaled_dot_product_attention(q, k, v, {is_causal = 1}), composed(q, k, v, 1 / math.sqrt(8), true), "is_causal = 1")
  local mha = nn.MultiheadAttention(8, 2, {batch_first = true})
  local x = st.randn({3, 6, 8})
  local calls, op = 0, st._attention
  st._attention = function(...) calls = calls + 1; return op(...) end
  local fast = mha(x, x, x, {need_weights = false, is_causal = true})
  local slow = mha(x, x, x, {is_causal = true})
  st._attention = op
  eq(calls, 1, "MultiheadAttention without weights takes the attention op (and with weights not)")
  same(fast, slow, "MultiheadAttention without weights")
  H.raises(function() return F.scaled_dot_product_attention(q, k, v, {scale = "big"}) end, "scale must be a number")
end)

test("attention: the gradients of the composed form (recomputed scores), causal or not", function()
  st.manual_seed(7)
  for _, causal in ipairs({false, true}) do
    for _, dt in ipairs({"f64", "f32"}) do
      local q0, k0, v0 = randn({2, 3, 6, 5}, dt), randn({2, 3, 7, 5}, dt), randn({2, 3, 7, 4}, dt)
      local r = randn({2, 3, 6, 4}, dt)
      local a = {q0:clone():requires_grad_(), k0:clone():requires_grad_(), v0:clone():requires_grad_()}
      local b = {q0:clone():requires_grad_(), k0:clone():requires_grad_(), v0:clone():requires_grad_()}
      ;(st._attention(a[1], a[2], a[3], 0.4, causal) * r):sum():backward()
      ;(composed(b[1], b[2], b[3], 0.4, causal) * r):sum():backward()
      for i = 1, 3 do same(a[i].grad, b[i].grad, dt .. " gradient " .. i .. (causal and " causal" or "")) end
    end
  end
  -- batch dims broadcast (one k and v for every head): their gradients summed back
  local qb = st.randn({2, 3, 4, 5}):requires_grad_()
  local kb, vb = st.randn({2, 1, 6, 5}):requires_grad_(), st.randn({1, 6, 4}):requires_grad_()
  local qr, kr, vr0 = qb:detach():clone():requires_grad_(), kb:detach():clone():requires_grad_(), vb:detach():clone():requires_grad_()
  st._attention(qb, kb, vb, nil, true):sum():backward()
  composed(qr, kr:expand(2, 3, 6, 5), vr0:expand(2, 3, 6, 4), 1 / math.sqrt(5), true):sum():backward()
  eq(table.concat(kb.grad:shape(), "x"), "2x1x6x5", "broadcast k's gradient shape")
  same(qb.grad, qr.grad, "broadcast: dq")
  same(kb.grad, kr.grad, "broadcast: dk")
  same(vb.grad, vr0.grad, "broadcast: dv")
  -- only v requires grad: dq and dk are not computed
  local q, k = st.randn({4, 5}), st.randn({6, 5})
  local v = st.randn({6, 3}):requires_grad_()
  st._attention(q, k, v):sum():backward()
  local vr = v:detach():clone():requires_grad_()
  composed(q, k, vr, 1 / math.sqrt(5), false):sum():backward()
  same(v.grad, vr.grad, "v only")
end)

test("attention: one kernel, no (Lq, Lk) buffer, the scale refreshed on a plan cache hit", function()
  st.manual_seed(9)
  local B, L, E = 2, 512, 16
  local q, k, v = st.sync(st.randn({B, L, E}), st.randn({B, L, E}), st.randn({B, L, E}))
  for i, scale in ipairs({0.5, 0.125, 0.5}) do
    st.reset_stats()
    local s0 = st.stats()
    local y = st.sync(st._attention(q, k, v, scale, true))
    local s1 = st.stats()
    eq(s1.kernels_launched - s0.kernels_launched, 1, "kernels")
    if i > 1 then eq(s1.plan_cache_hits - s0.plan_cache_hits, 1, "a new scale reuses the plan") end
    if cpu and i == 1 then   -- the scores would be B * L * L floats (2 MB); the output is 64 KB
      local grow = s1.bytes_peak - s0.bytes_in_use
      if grow > 4 * B * L * E * 4 then error("peak grew " .. grow .. " bytes over what was in use") end
    end
    same(y, composed(q, k, v, scale, true), "scale " .. scale)
  end
  -- the interpreter (eager mode) runs the library's attention too: the fused kernel's bits
  if cpu then
    local fused = st.sync(st._attention(q, k, v, 0.3))
    local was = st.eager()
    st.eager(true)
    local eager = st._attention(q, k, v, 0.3)
    st.eager(was)
    eq(st.eager(), false, "eager mode off again")
    eq(rel(eager, fused), 0, "interpreter and kernel")
  end
end)

local function composed_masked(q, k, v, scale, mask, causal) return composed(q, k, v, scale, causal, mask) end

local JIT_MIN = tonumber(os.getenv("ST_JIT_MIN")) or 32768

test("attention with a mask: the composed form's values (bool and float, broadcast, views, causal)", function()
  st.manual_seed(11)
  -- small shapes run interpreted under the default threshold: once compiled too
  for _, jit_min in ipairs({JIT_MIN, 0}) do
  st.set_jit_min(jit_min)
  for _, dt in ipairs({"f32", "f64"}) do
    for _, sh in ipairs({{2, 3, 5, 4, 6, 7}, {1, 2, 40, 8, 70, 16}, {2, 1, 33, 16, 17, 5}}) do
      local B, Hh, Lq, E, Lk, Ev = table.unpack(sh)
      local q, k, v = randn({B, Hh, Lq, E}, dt), randn({B, Hh, Lk, E}, dt), randn({B, Hh, Lk, Ev}, dt)
      -- every key row keeps key 1, so no row is all -inf
      local function keep1(m) return st.where(st.arange(Lk):eq(0), true, m) end
      local masks = {
        full = keep1(st.rand({B, Hh, Lq, Lk}):gt(0.4)),
        rows = keep1(st.rand({Lq, Lk}):gt(0.3)),
        keys = keep1(st.rand({B, 1, 1, Lk}):gt(0.5)),                 -- a key padding mask
        heads = st.randn({1, Hh, Lq, Lk}):to(dt),                      -- a float bias (ALiBi-like)
        transposed = st.randn({Lk, Lq}):to(dt):t(),                    -- a strided view
        scalar = st.full({1}, -2.5, dt),
      }
      for name, m in pairs(masks) do
        for _, causal in ipairs({false, true}) do
          local a = st._attention(q, k, v, 0.7, causal, m)
          same(a, composed_masked(q, k, v, 0.7, m, causal), string.format("%s %s mask %s causal %s jit_min %d", dt,
            table.concat(sh, "x"), name, tostring(causal), jit_min), cpu and dt == "f32" and not causal)
        end
      end
    end
  end
  end
  st.set_jit_min(JIT_MIN)
  -- every key of a row masked: NaN, as the composed form; the other rows unharmed
  local q, k, v = st.randn({1, 3, 4}), st.randn({1, 5, 4}), st.randn({1, 5, 2})
  local m = st.ones(3, 5, "bool")
  m[2] = false
  local y = st._attention(q, k, v, nil, false, m)
  eq(y[1][2]:isnan():all():item(), true, "a row with every key masked is NaN")
  eq(y[1][1]:isnan():any():item(), false, "the other rows are numbers")
  -- f16 operands and mask, computed in f32
  local mh = st.randn({3, 5}):half()
  same(st._attention(q:half(), k:half(), v:half(), nil, false, mh),
    composed_masked(q:half():float(), k:half():float(), v:half():float(), 0.5, mh:float(), false):half(), "f16")
end)

test("attention with a mask: one kernel, the mask never expanded, its plan reused; the interpreter's bits", function()
  st.manual_seed(13)
  local B, Hh, L, E = 2, 4, 256, 16
  local q, k, v = st.sync(st.randn({B, Hh, L, E}), st.randn({B, Hh, L, E}), st.randn({B, Hh, L, E}))
  for i = 1, 2 do
    local pad = st.sync(st.arange(L):lt(L - 10 * i):reshape(1, 1, 1, L):expand(B, 1, 1, L):contiguous())
    st.reset_stats()
    local s0 = st.stats()
    local y = st.sync(F.scaled_dot_product_attention(q, k, v, {attn_mask = pad}))
    local s1 = st.stats()
    -- the bool mask's additive form (B, 1, 1, L) and the attention
    eq(s1.kernels_launched - s0.kernels_launched, 2, "kernels")
    if i > 1 then eq(s1.plan_cache_hits - s0.plan_cache_hits, 1, "a new mask reuses the plan") end
    if cpu then   -- the scores or an expanded mask would be B * H * L * L floats (2 MB)
      local grow = s1.bytes_peak - s0.bytes_in_use
      if grow > 4 * B * Hh * L * E * 4 then error("peak grew " .. grow .. " bytes over what was in use") end
    end
    same(y, composed_masked(q, k, v, 0.25, pad, false), "key padding " .. i, cpu)
  end
  -- unfused (eager mode, and a plan interpreted: the tier below the JIT threshold) the mask is
  -- read through its broadcast too, never expanded to (B, H, L, L)
  if cpu then   -- a kind of its own (3-D, f64, causal): no kernel of it compiled or cached yet
    local L2, E2 = 200, 12
    local q2, k2, v2 = st.sync(randn({B * Hh, L2, E2}, "f64"), randn({B * Hh, L2, E2}, "f64"), randn({B * Hh, L2, E2}, "f64"))
    local pad = st.sync(randn({B * Hh, 1, L2}, "f64"))
    local want = composed_masked(q2, k2, v2, 0.25, pad, true)
    for _, mode in ipairs({"eager", "interpreted"}) do
      local was = st.eager()
      if mode == "eager" then st.eager(true) else st.set_jit_min(1 << 40) end
      st.reset_stats()
      local s0 = st.stats()
      local y = st.sync(st._attention(q2, k2, v2, 0.25, true, pad))
      local s1 = st.stats()
      st.eager(was)
      st.set_jit_min(JIT_MIN)
      if mode == "eager" then eq(s1.kernels_launched - s0.kernels_launched, 0, mode .. ": no kernel")
      else eq(s1.interp_groups - s0.interp_groups, 1, mode .. ": the attention's group interpreted") end
      local grow = s1.bytes_peak - s0.bytes_in_use
      if grow > 4 * B * Hh * L2 * E2 * 8 then error(mode .. ": peak grew " .. grow .. " bytes over what was in use") end
      same(y, want, mode .. " with a broadcast mask")
    end
  end
  local bias = st.sync(st.randn({Hh, L, L}))
  st.reset_stats()
  local y = st.sync(st._attention(q, k, v, 0.3, true, bias))
  eq(st.stats().kernels_launched, 1, "a realized float mask: one kernel")
  if cpu then
    local was = st.eager()
    st.eager(true)
    local eager = st._attention(q, k, v, 0.3, true, bias)
    st.eager(was)
    eq(st.eager(), false, "eager mode off again")
    eq(rel(eager, y), 0, "interpreter and kernel with a mask")
  end
end)

test("attention with a mask: gradients (the float mask's too), F.scaled_dot_product_attention, MultiheadAttention", function()
  st.manual_seed(17)
  for _, dt in ipairs({"f64", "f32"}) do
    for _, causal in ipairs({false, true}) do
      local q0, k0, v0 = randn({2, 3, 6, 5}, dt), randn({2, 3, 7, 5}, dt), randn({2, 3, 7, 4}, dt)
      local m0, r = randn({3, 6, 7}, dt), randn({2, 3, 6, 4}, dt)
      local function leaves() return {q0:clone():requires_grad_(), k0:clone():requires_grad_(),
        v0:clone():requires_grad_(), m0:clone():requires_grad_()} end
      local a, b = leaves(), leaves()
      ;(st._attention(a[1], a[2], a[3], 0.4, causal, a[4]) * r):sum():backward()
      ;(composed_masked(b[1], b[2], b[3], 0.4, b[4], causal) * r):sum():backward()
      eq(table.concat(a[4].grad:shape(), "x"), "3x6x7", "the mask's gradient shape")
      for i = 1, 4 do same(a[i].grad, b[i].grad, dt .. " gradient " .. i .. (causal and " causal" or "")) end
    end
  end
  -- a bool mask: no gradient of its own, q's the composed form's
  local q = st.randn({2, 4, 3}):requires_grad_()
  local k, v, m = st.randn({2, 5, 3}), st.randn({2, 5, 2}), st.rand({2, 1, 5}):gt(0.3)
  m = st.where(st.arange(5):eq(0), true, m)
  local qr = q:detach():clone():requires_grad_()
  st._attention(q, k, v, nil, false, m):sum():backward()
  composed_masked(qr, k, v, 1 / math.sqrt(3), m, false):sum():backward()
  same(q.grad, qr.grad, "bool mask: dq")
  -- F.scaled_dot_product_attention takes the op with a mask (float or bool)
  local calls, op = 0, st._attention
  st._attention = function(...) calls = calls + 1; return op(...) end
  local qq, kk, vv = st.randn({2, 2, 9, 8}), st.randn({2, 2, 9, 8}), st.randn({2, 2, 9, 8})
  local bm = st.where(st.arange(9):eq(0), true, st.rand({9, 9}):gt(0.5))
  local y1 = F.scaled_dot_product_attention(qq, kk, vv, {attn_mask = bm})
  local fm = st.randn({9, 9})
  local y2 = F.scaled_dot_product_attention(qq, kk, vv, {attn_mask = fm, scale = 0.3})
  eq(calls, 2, "F.scaled_dot_product_attention with a mask takes the op")
  same(y1, composed_masked(qq, kk, vv, 1 / math.sqrt(8), bm, false), "sdpa, bool mask")
  same(y2, composed_masked(qq, kk, vv, 0.3, fm, false), "sdpa, float mask")
  -- MultiheadAttention: key padding and attention masks (PyTorch's convention: true is masked out)
  local mha = nn.MultiheadAttention(8, 2, {batch_first = true})
  local x = st.randn({3, 6, 8})
  local kpm = st.tensor({{false, false, false, false, true, true}, {false, false, false, false, false, false},
    {false, true, false, true, false, true}})
  local am = st.arange(6):reshape(1, 6):gt(st.arange(6):reshape(6, 1))   -- causal as a mask
  local fam = st.randn({6, 6})
  calls = 0
  for _, o in ipairs({{key_padding_mask = kpm}, {attn_mask = am}, {attn_mask = am, key_padding_mask = kpm},
                      {attn_mask = fam, key_padding_mask = kpm}, {key_padding_mask = kpm, is_causal = true}}) do
    local slow = mha(x, x, x, o)
    o.need_weights = false
    local fast = mha(x, x, x, o)
    same(fast, slow, "MultiheadAttention with masks")
  end
  -- a float mask of another dtype promotes the scores: the composed form, the same result dtype
  local f64m = st.randn({6, 6}, "f64")
  local slow64 = mha(x, x, x, {attn_mask = f64m})
  local fast64 = mha(x, x, x, {attn_mask = f64m, need_weights = false})
  eq(fast64:dtype(), slow64:dtype(), "an f64 mask: the same result dtype with and without weights")
  st._attention = op
  eq(calls, 5, "MultiheadAttention without weights takes the op with masks (of the heads' dtype)")
end)

-- with dropout: F.dropout's numbers (st.rand over the weights' shape)
local function composed_dropout(q, k, v, scale, causal, p) return composed(q, k, v, scale, causal, nil, p) end

test("attention with dropout: F.dropout's numbers in the kernel, the stream advanced alike, gradients", function()
  for _, dt in ipairs({"f32", "f64"}) do
    for _, sh in ipairs({{2, 3, 5, 4, 6, 7}, {1, 2, 40, 8, 70, 16}}) do
      local B, Hh, Lq, E, Lk, Ev = table.unpack(sh)
      st.manual_seed(19)
      local q, k, v = randn({B, Hh, Lq, E}, dt), randn({B, Hh, Lk, E}, dt), randn({B, Hh, Lk, Ev}, dt)
      for _, causal in ipairs({false, true}) do
        local what = string.format("%s %s causal %s", dt, table.concat(sh, "x"), tostring(causal))
        st.manual_seed(23)
        local a = st._attention(q, k, v, 0.6, causal, nil, 0.3)
        local after_a = st.rand({1}):item()
        st.manual_seed(23)
        local b = composed_dropout(q, k, v, 0.6, causal, 0.3)
        local after_b = st.rand({1}):item()
        same(a, b, what, cpu and dt == "f32" and not causal)
        eq(after_a, after_b, "the stream advances as F.dropout's: " .. what)
        -- and it is dropout: some weights dropped (the result differs from no dropout)
        if rel(a, st._attention(q, k, v, 0.6, causal)) < 1e-3 then error("no weight dropped: " .. what) end
        -- gradients, the same numbers drawn again by the backward
        local r = randn({B, Hh, Lq, Ev}, dt)
        local function leaves() return {q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()} end
        local la, lb = leaves(), leaves()
        st.manual_seed(29)
        ;(st._attention(la[1], la[2], la[3], 0.6, causal, nil, 0.3) * r):sum():backward()
        st.manual_seed(29)
        ;(composed_dropout(lb[1], lb[2], lb[3], 0.6, causal, 0.3) * r):sum():backward()
        for i = 1, 3 do same(la[i].grad, lb[i].grad, what .. " gradient " .. i) end
      end
    end
  end
  -- with a mask too, and through F.scaled_dot_product_attention
  local q, k, v = st.randn({2, 2, 9, 8}), st.randn({2, 2, 9, 8}), st.randn({2, 2, 9, 8})
  local m = st.randn({9, 9})
  st.manual_seed(31)
  local y = F.scaled_dot_product_attention(q, k, v, {attn_mask = m, dropout_p = 0.5})
  st.manual_seed(31)
  local s = q:matmul(k:transpose(-2, -1)) * (1 / math.sqrt(8)) + m
  same(y, F.dropout(s:softmax(-1), 0.5, true):matmul(v), "sdpa with a mask and dropout")
  -- dropout 1 draws nothing, as F.dropout: the stream stays where it was
  local state = st.get_rng_state()
  st._attention(q, k, v, nil, false, nil, 1)
  local after_op = st.rand({1}):item()
  st.set_rng_state(state)
  eq(st.rand({1}):item(), after_op, "dropout 1 leaves the stream alone")
  -- dropout 1 drops every weight: 0, and zero gradients (never 0 * inf)
  local qg = st.randn({2, 3, 4}):requires_grad_()
  local z = st._attention(qg, st.randn({2, 5, 4}), st.randn({2, 5, 2}), nil, false, nil, 1)
  eq(z:abs():sum():item(), 0, "dropout 1 gives 0")
  z:sum():backward()
  eq(qg.grad:abs():sum():item(), 0, "dropout 1: zero gradients")
end)

test("attention with dropout: one kernel, new numbers each call through the same plan, the interpreter's bits", function()
  local B, Hh, L, E = 2, 2, 128, 16
  local q, k, v = st.sync(st.randn({B, Hh, L, E}), st.randn({B, Hh, L, E}), st.randn({B, Hh, L, E}))
  local prev
  for i = 1, 3 do
    local seed_before = st.get_rng_state()
    st.reset_stats()
    local y = st.sync(st._attention(q, k, v, 0.25, i == 3, nil, 0.2))
    local s1 = st.stats()
    eq(s1.kernels_launched, 1, "kernels")
    if i == 2 then eq(s1.plan_cache_hits, 1, "new numbers reuse the plan") end
    st.set_rng_state(seed_before)
    same(y, composed_dropout(q, k, v, 0.25, i == 3, 0.2), "call " .. i, cpu and i < 3)
    if prev and i == 2 and rel(y, prev) == 0 then error("the same numbers twice") end
    prev = y
  end
  if cpu then
    local state = st.get_rng_state()
    local fused = st.sync(st._attention(q, k, v, 0.3, false, nil, 0.4))
    st.set_rng_state(state)
    local was = st.eager()
    st.eager(true)
    local eager = st._attention(q, k, v, 0.3, false, nil, 0.4)
    st.eager(was)
    eq(rel(eager, fused), 0, "interpreter and kernel with dropout")
  end
  -- MultiheadAttention in training with dropout takes the op; in eval no dropout
  local mha = nn.MultiheadAttention(8, 2, {batch_first = true, dropout = 0.5})
  local x = st.randn({3, 6, 8})
  local calls, op = 0, st._attention
  st._attention = function(...) calls = calls + 1; return op(...) end
  local state = st.get_rng_state()
  local fast = mha(x, x, x, {need_weights = false})
  st.set_rng_state(state)
  local slow = mha(x, x, x)
  st._attention = op
  eq(calls, 1, "MultiheadAttention with dropout takes the op")
  same(fast, slow, "MultiheadAttention with dropout, fused and composed")
  mha:eval()
  same(mha(x, x, x, {need_weights = false}), mha(x, x, x), "MultiheadAttention in eval")
  H.raises(function() return nn.MultiheadAttention(8, 2, {dropout = 1.5}) end, "dropout must be in [0, 1], got 1.5")
end)

test("attention: errors name the shapes and dtypes", function()
  local q, k, v = st.randn({2, 3, 4}), st.randn({2, 5, 4}), st.randn({2, 5, 6})
  H.raises(function() return st._attention(q, v, v) end, "attention: q (2, 3, 4), k (2, 5, 6), v (2, 5, 6)")
  H.raises(function() return st._attention(q, k, st.randn({2, 4, 6})) end, "the same second-to-last")
  H.raises(function() return st._attention(st.randn({4}), k, v) end, "at least 2 dims")
  H.raises(function() return st._attention(q, st.randn({3, 5, 4}), v) end, "cannot be broadcast")
  H.raises(function() return st._attention(q:long(), k:long(), v:long()) end, "float operands expected")
  H.raises(function() return st._attention(q, k, v, nil, false, st.ones(4, 5, "bool")) end,
    "mask (4, 5) does not broadcast to the scores' shape (2, 3, 5)")
  H.raises(function() return st._attention(q, k, v, nil, false, st.ones(7, 2, 3, 5, "bool")) end,
    "does not broadcast")
  H.raises(function() return st._attention(q, k, v, nil, false, st.ones(3, 5, "i32")) end,
    "the mask must be bool or float, got i32")
  H.raises(function() return st._attention(q, k, v, nil, false, nil, -0.1) end, "dropout must be in [0, 1], got -0.1")
  H.raises(function() return st._attention(q, k, v, nil, false, nil, 0 / 0) end, "dropout must be in [0, 1]")
end)

H.done()
