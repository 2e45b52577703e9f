-- char_transformer.lua — a small decoder-only transformer trained character by character on a
-- plain-text corpus (the Debian package `fortunes` by default), then sampled from a prompt.
-- Run: build/stitch examples/char_transformer.lua [--steps N] [--batch N] [--ctx N] [--dim N]
--        [--layers N] [--heads N] [--lr X] [--every N] [--sample N] [--temp X] [--prompt S]
--        [--seed N] [--corpus PATH]
-- Model: token embedding + learned positional embedding, `layers` pre-norm blocks (causal
-- multi-head self-attention, MLP dim -> 4*dim -> dim with GELU, each x + f(layernorm(x))), final
-- layernorm, linear head; AdamW with a cosine schedule. Prints the mean train loss every `every`
-- steps (one progress bar per interval), the held-out loss, the throughput, then `sample` sampled
-- characters. --corpus is a text file or a directory of them (fortune files: fortunes separated by
-- lines holding only "%"; files with a `.dat` or `.u8` extension are skipped).
--
-- Loaded with dofile() (tests/lua/test_char_transformer.lua) the script returns
-- {losses = {mean train loss per interval}, val_loss, sample = the sampled text, n_chars (its
-- length in characters), vocab (the vocabulary size), n_fortunes, model (the trained module)}.
-- Invariant: every shape the model sees is fixed by the options (batch x ctx when training,
-- 1 x ctx when sampling), so kernels compile during the first steps and the first character only.
local opts = {
  steps = 1000, batch = 32, ctx = 64, dim = 64, layers = 2, heads = 4, lr = 3e-3, every = 100,
  sample = 300, temp = 0.8, prompt = "The ", seed = 1, corpus = "/usr/share/games/fortunes",
}
local USAGE = "usage: char_transformer.lua [--steps N] [--batch N] [--ctx N] [--dim N] [--layers N] "
  .. "[--heads N] [--lr X] [--every N] [--sample N] [--temp X] [--prompt S] [--seed N] [--corpus PATH]"
do
  local i = 1
  while i <= #arg do
    local k = arg[i]:match("^%-%-(%w+)$")
    if not k or opts[k] == nil or arg[i + 1] == nil then error(USAGE, 0) end
    local v = arg[i + 1]
    if type(opts[k]) == "number" then
      v = math.tointeger(tonumber(v)) or tonumber(v)
      if v == nil then error(USAGE .. "\n--" .. k .. " expects a number, got '" .. arg[i + 1] .. "'", 0) end
    end
    opts[k] = v
    i = i + 2
  end
  if opts.dim % opts.heads ~= 0 then
    error(string.format("--dim (%d) must be a multiple of --heads (%d)", opts.dim, opts.heads), 0)
  end
end

local nn, F = st.nn, st.nn.functional
st.manual_seed(opts.seed)
math.randomseed(opts.seed) -- the sampler's draws

-- ---- corpus ----

-- The text files to read: `path` itself, or the files of directory `path` without .dat/.u8.
local function corpus_files(path)
  local f = io.open(path, "rb")
  if not f then
    error("corpus not found: " .. path .. (path == "/usr/share/games/fortunes"
      and " (install the Debian package fortunes: apt-get install fortunes)" or ""), 0)
  end
  local ok = f:read(0) -- nil on a directory (EISDIR)
  f:close()
  if ok then return { path } end
  local files = {}
  local ls = io.popen("ls -1 '" .. path:gsub("'", "'\\''") .. "'")
  for name in ls:lines() do
    if not name:match("%.dat$") and not name:match("%.u8$") then files[#files + 1] = path .. "/" .. name end
  end
  ls:close()
  if #files == 0 then error("corpus: no text files in " .. path, 0) end
  return files
end

-- The corpus as one string: the fortunes of every file, trailing blanks trimmed, joined by "%" lines.
local function load_corpus(path)
  local fortunes = {}
  for _, file in ipairs(corpus_files(path)) do
    local f = assert(io.open(file, "rb"))
    local text = f:read("a") .. "\n%\n"
    f:close()
    for fortune in text:gmatch("(.-)\n%%\n") do
      fortune = fortune:gsub("%s+$", "")
      if fortune ~= "" then fortunes[#fortunes + 1] = fortune end
    end
  end
  return table.concat(fortunes, "\n%\n") .. "\n%\n", #fortunes
end

local t_load = st._now()
local text, n_fortunes = load_corpus(opts.corpus)
-- Characters are UTF-8 code points (a byte that cannot start one is dropped); ids are 1-based.
local vocab, id_of, ids = {}, {}, {}
for ch in text:gmatch(utf8.charpattern) do
  local id = id_of[ch]
  if not id then
    vocab[#vocab + 1] = ch
    id = #vocab
    id_of[ch] = id
  end
  ids[#ids + 1] = id
end
local V, N = #vocab, #ids
-- the prompt's ids, checked before training (an empty prompt starts from a newline)
local prompt_ids = {}
for ch in opts.prompt:gmatch(utf8.charpattern) do
  local id = id_of[ch]
  if not id then error("--prompt: the character '" .. ch .. "' is not in the corpus", 0) end
  prompt_ids[#prompt_ids + 1] = id
end
if #prompt_ids == 0 then prompt_ids[1] = id_of["\n"] or 1 end
local dev = st.device()
-- 90% to train, the last 10% held out, both on the default device
local n_train = math.floor(N * 0.9)
if n_train <= opts.ctx + 1 or N - n_train <= opts.ctx + 1 then
  error(string.format("corpus too small: %d characters for a context of %d", N, opts.ctx), 0)
end
local train_data, val_data
do
  local data = st.tensor(ids, "i64"):to(dev)
  train_data = data:narrow(1, 1, n_train):contiguous()
  val_data = data:narrow(1, n_train + 1, N - n_train):contiguous()
  st.sync(train_data, val_data)
end
ids = nil
print(string.format("corpus %s: %d fortunes, %d characters, vocabulary %d (loaded in %.1f s), device %s",
  opts.corpus, n_fortunes, N, V, st._now() - t_load, dev))

-- batch(src, B): B random windows of ctx + 1 characters from src, as inputs x (B, ctx) and targets y
-- (the next characters). Lazy: the offsets, the gather and the shift fuse into the step.
local T = opts.ctx
local window = st.arange(T + 1):reshape(1, T + 1):to(dev)
local function batch(src, B)
  local start = st.randint(1, src:size(1) - T, { B, 1 })
  local w = src:index_select(1, (start + window):reshape(-1)):reshape(B, T + 1)
  return w:narrow(2, 1, T), w:narrow(2, 2, T)
end

-- ---- model ----

-- Causal multi-head self-attention: one projection to q, k, v, then F.scaled_dot_product_attention
-- with is_causal (scores masked to the past, softmax, times v).
local Attention = nn.Module:extend("Attention")
function Attention:__init(dim, heads)
  self.heads = heads
  self.qkv = nn.Linear(dim, 3 * dim)
  self.proj = nn.Linear(dim, dim)
end
function Attention:forward(x)
  local B, L, C = x:size(1), x:size(2), x:size(3)
  local H = self.heads
  local D = C // H
  -- (B, L, 3C) -> (3, B, H, L, D)
  local qkv = self.qkv(x):reshape(B, L, 3, H, D):permute(3, 1, 4, 2, 5)
  local q, k, v = qkv:select(1, 1), qkv:select(1, 2), qkv:select(1, 3)
  local y = F.scaled_dot_product_attention(q, k, v, {is_causal = true})
  -- (B, H, L, D) -> (B, L, C)
  return self.proj(y:permute(1, 3, 2, 4):reshape(B, L, C))
end

local Block = nn.Module:extend("Block")
function Block:__init(dim, heads)
  self.ln1 = nn.LayerNorm(dim)
  self.attn = Attention(dim, heads)
  self.ln2 = nn.LayerNorm(dim)
  self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
end
function Block:forward(x)
  x = x + self.attn(self.ln1(x))
  return x + self.mlp(self.ln2(x))
end

local CharTransformer = nn.Module:extend("CharTransformer")
function CharTransformer:__init(vocab_size, o)
  self.tok = nn.Embedding(vocab_size, o.dim)
  self.pos = nn.Embedding(o.ctx, o.dim)
  -- GPT-2's N(0, 0.02) instead of Embedding's N(0, 1)
  nn.init.normal_(self.tok.weight, 0, 0.02)
  nn.init.normal_(self.pos.weight, 0, 0.02)
  local blocks = {}
  for i = 1, o.layers do blocks[i] = Block(o.dim, o.heads) end
  self.blocks = nn.Sequential(blocks)
  self.ln_f = nn.LayerNorm(o.dim)
  self.head = nn.Linear(o.dim, vocab_size)
  self.positions = st.arange(1, o.ctx + 1) -- 1-based position ids (a plain field)
end
-- idx (B, L) 1-based character ids, L <= ctx -> logits (B, L, vocab)
function CharTransformer:forward(idx)
  local L = idx:size(2)
  local pos = L == self.positions:size(1) and self.positions or self.positions:narrow(1, 1, L)
  local x = self.tok(idx) + self.pos(pos)
  return self.head(self.ln_f(self.blocks(x)))
end

local model = CharTransformer(V, opts) -- created on the default device
local opt = st.optim.AdamW(model:parameters(), { lr = opts.lr, weight_decay = 0.01 })
local sched = st.optim.CosineWarmup(opt, { warmup_steps = math.min(100, opts.steps // 10),
  total_steps = opts.steps })
print(string.format("model: %d layers, dim %d, %d heads, context %d: %d parameters", opts.layers,
  opts.dim, opts.heads, T, model:num_parameters()))

local function loss_of(x, y)
  return F.cross_entropy(model(x):reshape(-1, V), y:reshape(-1))
end

-- Mean loss over 8 batches of held-out text.
local function val_loss()
  local guard <close> = st.no_grad()
  model:eval()
  local total = st.zeros({})
  for _ = 1, 8 do total = total + loss_of(batch(val_data, opts.batch)) end
  model:train()
  return total:item() / 8
end

-- ---- training ----

local losses = {}
local tokens_per_step = opts.batch * T
local step, t_train = 0, 0
while step < opts.steps do
  local n = math.min(opts.every, opts.steps - step)
  local bar = st.progress.new(n, { desc = string.format("steps %d-%d", step + 1, step + n), unit = "step" })
  local loss_sum = st.zeros({})
  local t0 = st._now()
  for _ = 1, n do
    opt:zero_grad()
    local loss = loss_of(batch(train_data, opts.batch))
    loss:backward()
    loss_sum = loss_sum + loss:detach()
    opt:step({ loss, loss_sum }) -- forward, backward, update and the running sum in one flush
    sched:step()
    bar:update(1, { loss = loss })
  end
  local dt = st._now() - t0
  bar:close()
  t_train = t_train + dt
  step = step + n
  losses[#losses + 1] = loss_sum:item() / n
  print(string.format("step %d: train loss %.4f, %.1f steps/s, %.0f tokens/s", step, losses[#losses],
    n / dt, n * tokens_per_step / dt))
end
local vl = val_loss()
print(string.format("held-out loss %.4f; trained %d steps in %.1f s (%.1f steps/s, %.0f tokens/s)", vl,
  opts.steps, t_train, opts.steps / t_train, opts.steps * tokens_per_step / t_train))

-- ---- sampling ----

-- Draws an index from the probabilities p (a Lua array summing to 1).
local function draw(p)
  local u, acc = math.random(), 0
  for i = 1, #p do
    acc = acc + p[i]
    if u < acc then return i end
  end
  return #p
end

-- Extends the prompt (character ids) by n characters, each drawn from softmax(logits / temp) at the last position.
-- The model always sees a full (1, ctx) window: the context's last ctx characters at positions
-- 1..len, padding after them (the causal mask keeps it from the logits at len), and the position to
-- read is an index tensor, so every character reuses the same kernels. One flush per character.
local function sample(prompt, n, temp)
  local guard <close> = st.no_grad()
  model:eval()
  local ctx = { table.unpack(prompt) }
  local out = {}
  for _ = 1, n do
    local len = math.min(#ctx, T)
    local window_ids = {}
    for i = 1, T do window_ids[i] = ctx[#ctx - len + math.min(i, len)] end
    local logits = model(st.tensor({ window_ids }, "i64"):to(dev))
    local last = logits:reshape(T, V):index_select(1, st.tensor({ len }, "i64"):to(dev))
    local id = draw((last / temp):softmax(-1):reshape(V):tolist())
    ctx[#ctx + 1] = id
    out[#out + 1] = vocab[id]
  end
  model:train()
  return table.concat(out)
end

local t_sample = st._now()
local sampled = sample(prompt_ids, opts.sample, opts.temp)
local ds = st._now() - t_sample
print(string.format("sample (%d characters, temperature %g, %.0f chars/s):", opts.sample, opts.temp,
  opts.sample / ds))
print(opts.prompt .. sampled)

return { losses = losses, val_loss = vl, sample = sampled, n_chars = utf8.len(sampled), vocab = V,
  n_fortunes = n_fortunes, model = model }
