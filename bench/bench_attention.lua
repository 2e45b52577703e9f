-- bench_attention.lua — stitch's side of bench_attention.py: the attention op (st._attention, one
-- kernel) against the composed form (matmul, where, softmax, matmul: the scores stored) on the same
-- inputs, forward only and forward + backward, per shape, causal, not, and with a key padding mask
-- (a bool (B, 1, 1, L): batch entry b's last (b % 4 + 1) L / 8 keys masked); writes `key value` lines.
--   build/stitch bench/bench_attention.lua [--quick] [OUT]
local quick, out_path = false, nil
for _, a in ipairs(arg) do
  if a == "--quick" then quick = true
  elseif a:match("^%-") then error("bench_attention.lua: unknown option " .. a .. " (--quick, or a results file)", 0)
  else out_path = a end
end
local SHAPES = {{16, 4, 64, 32}, {4, 4, 256, 64}, {2, 4, 1024, 64}}   -- B, H, L, E (the transformer block's first)
local results = {}
local function put(k, v) results[#results + 1] = string.format("%s %.9g", k, v) end

local function composed(q, k, v, scale, causal, mask)
  local s = q:matmul(k:transpose(-2, -1)) * scale
  if mask then s = st.where(mask, s, -math.huge) end
  if causal then
    local lq, lk = q:size(-2), k:size(-2)
    s = st.where(st.arange(lq):reshape(lq, 1):ge(st.arange(lk):reshape(1, lk)), s, -math.huge)
  end
  return s:softmax(-1):matmul(v)
end
local function median_ms(f, n)
  for _ = 1, 2 do f() end
  local ts = {}
  for _ = 1, quick and 3 or 7 do
    local t0 = st._now()
    for _ = 1, n do f() end
    ts[#ts + 1] = (st._now() - t0) * 1e3 / n
  end
  table.sort(ts)
  return ts[(#ts + 1) // 2]
end

for _, s in ipairs(SHAPES) do
  local B, H, L, E = table.unpack(s)
  local name = string.format("b%dh%dl%de%d", B, H, L, E)
  local q, k, v = st.sync(st.randn({B, H, L, E}), st.randn({B, H, L, E}), st.randn({B, H, L, E}))
  local g = st.sync(st.randn({B, H, L, E}))
  local scale = 1 / math.sqrt(E)
  local n = math.max(2, math.floor((quick and 2e7 or 1e8) / (B * H * L * L * E)))
  local keep = {}
  for b = 0, B - 1 do keep[b + 1] = st.arange(L):lt(L - (b % 4 + 1) * L // 8):reshape(1, 1, L) end
  local pad = st.sync(st.stack(keep, 1))   -- (B, 1, 1, L)
  for _, variant in ipairs({"_causal", "", "_padded"}) do
    local tag, causal, mask = name .. variant, variant == "_causal", variant == "_padded" and pad or nil
    for which, f in pairs({fused = function(a, b, c) return st._attention(a, b, c, scale, causal, mask) end,
                           composed = function(a, b, c) return composed(a, b, c, scale, causal, mask) end}) do
      put(tag .. "_" .. which .. "_fwd_ms", median_ms(function() local y <close> = f(q, k, v); st.sync(y) end, n))
      local qa, ka, va = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
      put(tag .. "_" .. which .. "_fwdbwd_ms", median_ms(function()
        qa.grad, ka.grad, va.grad = nil, nil, nil
        f(qa, ka, va):backward(g)
        st.sync(qa.grad, ka.grad, va.grad)
      end, n))
    end
  end
end
local text = table.concat(results, "\n") .. "\n"
if out_path then
  local f = assert(io.open(out_path, "w"))
  f:write(text)
  f:close()
else
  io.write(text)
end
