-- bench_fusion.lua — the stitch side of the fusion-depth benchmarks (issue 5): softmax, layernorm
-- fwd and fwd+bwd, cross-entropy fwd+bwd, an AdamW step, Linear+GELU, one transformer-block training step
-- and the Fashion-MNIST MLP training step of bench_train.lua. The PyTorch twin and the driver that
-- runs both (and the ST_FUSE ablation) is bench_fusion.py; bench/NOTES.md "Fusion depth" says what
-- each case moves and computes.
-- Run: build/stitch bench/bench_fusion.lua RESULTS_FILE [--quick] [--cases=a,b,...] [--nocheck]
--        [--device=cuda]   (with ST_DEVICE=cuda: every tensor is created on the GPU; the driver sets both)
--
-- Inputs and parameters are a deterministic integer pattern, ((i*7919 + s*104729) % 10007)/10007
-- - 0.5 computed in i64 then divided in f32, so stitch and PyTorch start from bit-identical
-- tensors. Correctness guard (once per case, before timing): every output of the case is reduced
-- to two checksums, sum(y * w) with w another pattern and sum(|y|), written as chk_<case>_<k>
-- lines; the driver compares them with PyTorch's (a broken kernel cannot give a fast number).
-- Timing: a first call (its time is <case>_first_ms; the check before it compiled most kernels)
-- and warm-up, then iterations timed one by one until REPS or the time budget (at least 3); each iteration
-- ends with its outputs realized (st.sync) and released. Kernels per iteration: the delta of
-- st.stats().kernels_launched over the timed iterations. Result lines per case: <case>_ms
-- (median), <case>_best_ms, <case>_n, <case>_kernels, <case>_interp, <case>_first_ms.
-- --device=cuda: st.sync only queues the launches on the device's stream, and nothing in the
-- public API waits for the GPU except a device -> host read (docs/cuda.md, "Reading"); so every
-- timed call (first, warm-up, timed) ends with wait(): an item() of a realized 1-element device
-- tensor, one 4-byte copy on the same stream, which returns once every earlier launch has run
-- (cuda_copy_dtoh synchronizes the stream). Its own cost is measured first (sync_us). After the
-- synced iterations, the same number run back to back with one wait() at the end:
-- <case>_pipe_ms (host work hidden behind the GPU where it is shorter). Without a usable GPU the
-- script prints "no CUDA device: ...", writes `cuda_skipped 1` and returns (status 0).
local out_path, quick, nocheck, only, gpu
for _, a in ipairs(arg) do
  if a == "--quick" then quick = true
  elseif a == "--device=cuda" then gpu = true
  elseif a == "--nocheck" then nocheck = true
  elseif a:match("^%-%-cases=") then
    only = {}
    for c in a:sub(9):gmatch("[^,]+") do only[c] = true end
  elseif a:match("^%-") then
    error(string.format("bench_fusion.lua: unknown option %q (options: --quick, --cases=a,b, --nocheck, "
      .. "--device=cuda; any other argument is the results file)", a), 0)
  else out_path = a end
end
local REPS, BUDGET_S = 400, 60
-- Sizes of the memory-bound cases (bench_fusion.py: SIZES). On the GPU 8x the rows and a C = 1024
-- block for AdamW: every working set is well above the GPU's 50 MB L2 (which would otherwise keep
-- inputs between iterations) and every kernel takes ~0.1 ms or more, not ~10 us of launch latency.
local ROWS = gpu and 32768 or 4096
local ADAMW_C = gpu and 1024 or 512
local now = st._now
local nn, F = st.nn, st.nn.functional
local results = {}
local function put(k, v) results[#results + 1] = string.format("%s %.9g", k, v) end
local function write_results()
  if out_path then
    local f = assert(io.open(out_path, "w"))
    f:write(table.concat(results, "\n"), "\n")
    f:close()
  else
    print(table.concat(results, "\n"))
  end
end

if gpu and (st.cuda_device_count() == 0 or not st.device():match("^cuda")) then
  print(string.format("no CUDA device: stitch sees %d GPU(s), default device %s (ST_DEVICE=%s); skipped",
    st.cuda_device_count(), st.device(), os.getenv("ST_DEVICE") or "unset"))
  put("cuda_skipped", 1)
  write_results()
  return
end

-- wait(): returns once the device has run everything queued (a no-op on the CPU, which is
-- synchronous). probe is realized once, so its read launches nothing.
local wait = function() end
if gpu then
  local probe = st.sync(st.zeros({1}) + 1)
  wait = function() probe:item() end
  wait()
  local t0, n = now(), 200
  for _ = 1, n do wait() end
  put("sync_us", (now() - t0) / n * 1e6)
  print(string.format("  stitch on %s: wait() (1-element device -> host read) %.1f us",
    st.device(), (now() - t0) / n * 1e6))
end

-- ---- deterministic inputs (identical in bench_fusion.py) ----
local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end
local function pattern(shape, seed)
  local i = st.arange(numel(shape))
  local v = ((i * 7919 + seed * 104729) % 10007):float() / 10007.0 - 0.5
  return v:reshape(shape)
end
local function input(shape, seed, scale) return st.sync(pattern(shape, seed) * (scale or 1)) end

-- Parameters in registration order: 2-D weights ~ pattern * 2/sqrt(fan_in), LayerNorm weights
-- 1 + 0.2 * pattern, other 1-D (biases) 0.2 * pattern; seed = 100 + position.
local function init_params(model)
  local i = 0
  st.no_grad(function()
    for name, p in model:named_parameters() do
      local s = p:shape()
      local v
      if #s == 2 then v = pattern(s, 100 + i) * (2 / math.sqrt(s[2]))
      elseif name:match("^ln") and name:match("weight$") then v = pattern(s, 100 + i) * 0.2 + 1
      else v = pattern(s, 100 + i) * 0.2 end
      p:copy_(v)
      i = i + 1
    end
  end)
  st.sync(table.unpack(model:parameters()))
end

-- Two checksums of y against PyTorch's: chk_<case>_<name>_w = sum(y * pattern), _l1 = sum(|y|).
local function checksum(case, name, y)
  y = y:detach()
  local w = pattern(y:shape(), 7)
  local a, b = st.sync((y:double() * w:double()):sum(), y:double():abs():sum())
  put("chk_" .. case .. "_" .. name .. "_w", a:item())
  put("chk_" .. case .. "_" .. name .. "_l1", b:item())
end

local function median(v)
  local s = {}
  for i, x in ipairs(v) do s[i] = x end
  table.sort(s)
  return #s % 2 == 1 and s[(#s + 1) // 2] or (s[#s // 2] + s[#s // 2 + 1]) / 2, s[1]
end

-- Times iter() (one iteration, outputs realized inside): a first call and warm-up, then timed
-- runs; a first call slower than 1 s skips the warm-up and needs 2 timed runs (bench_fusion.py's rule).
-- On the GPU each call ends with wait(), then as many iterations run back to back (<case>_pipe_ms).
local function bench(case, step, warm)
  local iter = gpu and function() step(); wait() end or step
  collectgarbage()
  local t0 = now()
  iter()
  local first = (now() - t0) * 1e3
  local slow = first > 1000
  for _ = 2, slow and 1 or (warm or 2) do iter() end
  collectgarbage()
  local s0, times, start = st.stats(), {}, now()
  repeat
    local a = now()
    iter()
    times[#times + 1] = (now() - a) * 1e3
  until #times >= REPS or (#times >= (slow and 2 or 3) and now() - start > BUDGET_S)
  local s1 = st.stats()
  local med, best = median(times)
  local n = #times
  local pipe
  if gpu then
    local p0 = now()
    for _ = 1, n do step() end
    wait()
    pipe = (now() - p0) * 1e3 / n
    put(case .. "_pipe_ms", pipe)
  end
  local kernels = (s1.kernels_launched - s0.kernels_launched) / n
  put(case .. "_ms", med)
  put(case .. "_best_ms", best)
  put(case .. "_n", n)
  put(case .. "_kernels", kernels)
  put(case .. "_interp", (s1.interp_groups - s0.interp_groups) / n)
  put(case .. "_first_ms", first)
  print(string.format("  stitch %-13s %9.3f ms median (best %.3f, %d iters%s), %5.1f kernels/iter, first call %.0f ms",
    case, med, best, n, pipe and string.format("; %.3f pipelined", pipe) or "", kernels, first))
end

-- ---- cases ----
local cases = {}

function cases.softmax()
  local x = input({ROWS, 4096}, 1, 8)
  if not nocheck then checksum("softmax", "y", x:softmax(-1)) end
  bench("softmax", function()
    local y <close> = x:softmax(-1)
    st.sync(y)
  end)
end

function cases.layernorm()
  local x = input({ROWS, 1024}, 1, 4):requires_grad_()
  local w, b = (input({1024}, 2, 0.4) + 1):requires_grad_(), input({1024}, 3):requires_grad_()
  st.sync(w, b)
  local dy = input({ROWS, 1024}, 4)
  local function run()
    x.grad, w.grad, b.grad = nil, nil, nil
    local y = F.layer_norm(x, {1024}, w, b)
    y:backward(dy)
    st.sync(y, x.grad, w.grad, b.grad)
    return y
  end
  if not nocheck then
    local y = run()
    checksum("layernorm", "y", y)
    checksum("layernorm", "dx", x.grad)
    checksum("layernorm", "dw", w.grad)
    checksum("layernorm", "db", b.grad)
  end
  bench("layernorm", run)
end

function cases.layernorm_fwd()
  local x = input({ROWS, 1024}, 1, 4)
  local w, b = input({1024}, 2, 0.4) + 1, input({1024}, 3)
  st.sync(w, b)
  if not nocheck then checksum("layernorm_fwd", "y", F.layer_norm(x, {1024}, w, b)) end
  bench("layernorm_fwd", function()
    local y <close> = F.layer_norm(x, {1024}, w, b)
    st.sync(y)
  end)
end

function cases.cross_entropy()
  local logits = input({ROWS, 1024}, 1, 8):requires_grad_()
  local target = st.sync((st.arange(ROWS) * 31 + 7) % 1024 + 1)
  local function run()
    logits.grad = nil
    local loss = F.cross_entropy(logits, target)
    loss:backward()
    st.sync(loss, logits.grad)
    return loss
  end
  if not nocheck then
    local loss = run()
    put("chk_cross_entropy_loss", loss:item())
    checksum("cross_entropy", "dx", logits.grad)
  end
  bench("cross_entropy", run)
end

-- The transformer block (pre-norm): x + attn(ln1(x)), then + fc2(gelu(fc1(ln2(.)))), a linear
-- head to V classes. Causal multi-head attention with batched matmuls; the mask is a (T, T) bool.
local Block = nn.Module:extend("Block")
function Block:__init(C, H, V)
  self.nhead = H
  self.ln1 = nn.LayerNorm(C)
  self.qkv = nn.Linear(C, 3 * C)
  self.proj = nn.Linear(C, C)
  self.ln2 = nn.LayerNorm(C)
  self.fc1 = nn.Linear(C, 4 * C)
  self.fc2 = nn.Linear(4 * C, C)
  self.head = nn.Linear(C, V)
end
function Block:forward(x, mask)
  local B, T, C = table.unpack(x:shape())
  local H = self.nhead
  local D = C // H
  local qkv = self.qkv(self.ln1(x))
  local function heads(i) return qkv:narrow(3, i * C + 1, C):reshape(B, T, H, D):transpose(2, 3) end
  local q, k, v = heads(0), heads(1), heads(2)
  local att = st.where(mask, q:matmul(k:transpose(3, 4)) * (1 / math.sqrt(D)), -math.huge):softmax(-1)
  x = x + self.proj(att:matmul(v):transpose(2, 3):reshape(B, T, C))
  x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
  return self.head(x)
end
local function causal_mask(T) return st.sync(st.arange(T):reshape(T, 1):ge(st.arange(T):reshape(1, T))) end

-- AdamW (lr 1e-3, wd 1e-2) over the 14 parameters of a C = V = ADAMW_C block (3.4M floats at 512,
-- 13.6M at 1024), with fixed realized gradients: one timed iteration = opt:step() (updates p, m, v
-- in place, one flush).
function cases.adamw()
  local model = Block(ADAMW_C, 8, ADAMW_C)
  init_params(model)
  local params = model:parameters()
  for i, p in ipairs(params) do p.grad = input(p:shape(), 200 + i, 0.01) end
  local opt = st.optim.AdamW(params, {lr = 1e-3, weight_decay = 1e-2})
  if not nocheck then
    opt:step()
    opt:step()
    for i, name in ipairs({"p1", "p3", "p9"}) do
      checksum("adamw", name, params[({1, 3, 9})[i]])
    end
  end
  bench("adamw", function() opt:step() end)
end

function cases.linear_gelu()
  local x = input({4096, 1024}, 1)
  local w, b = input({1024, 1024}, 2, 1 / 16), input({1024}, 3, 0.2)
  local function run() return F.gelu(F.linear(x, w, b)) end
  if not nocheck then checksum("linear_gelu", "y", run()) end
  bench("linear_gelu", function()
    local y <close> = run()
    st.sync(y)
  end)
end

-- One training step: zero_grad, forward, loss, backward, opt:step(loss) (one flush).
local function train_case(case, model, opt, x, target, fwd)
  init_params(model)
  local function step()
    opt:zero_grad()
    local loss = F.cross_entropy(fwd(x), target)
    loss:backward()
    return loss
  end
  if not nocheck then
    local loss = step()
    local p = model:parameters()
    local gs = {loss}
    for i = 1, #p do gs[#gs + 1] = p[i].grad end
    st.sync(gs)
    put("chk_" .. case .. "_loss1", loss:item())
    for i = 1, #p, 2 do checksum(case, "g" .. i, p[i].grad) end
    opt:step(loss)
    local loss2 = step()
    opt:step(loss2)
    put("chk_" .. case .. "_loss2", loss2:item())
  end
  bench(case, function() opt:step(step()) end, 3)
end

function cases.block()
  local B, T, C, H, V = 16, 64, 128, 4, 256
  local model = Block(C, H, V)
  local mask = causal_mask(T)
  local x = input({B, T, C}, 1)
  local target = st.sync((st.arange(B * T) * 31 + 7) % V + 1)
  local opt = st.optim.AdamW(model:parameters(), {lr = 1e-3, weight_decay = 1e-2})
  train_case("block", model, opt, x, target, function(xx) return model(xx, mask):reshape(B * T, V) end)
end

-- The Fashion-MNIST MLP of bench_train.lua: batch 128, 784-256-128-10 ReLU, Adam lr 1e-3.
function cases.mlp()
  local model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
    nn.Linear(128, 10))
  local x = input({128, 784}, 1)
  local target = st.sync((st.arange(128) * 31 + 7) % 10 + 1)
  local opt = st.optim.Adam(model:parameters(), {lr = 1e-3})
  train_case("mlp", model, opt, x, target, function(xx) return model(xx) end)
end

local order = {"softmax", "layernorm_fwd", "layernorm", "cross_entropy", "adamw", "linear_gelu", "block", "mlp"}
for _, c in ipairs(order) do
  if not only or only[c] then
    local ok, err = pcall(cases[c])
    if not ok then print("  stitch " .. c .. " FAILED: " .. tostring(err)) end
    collectgarbage()
  end
end
write_results()
