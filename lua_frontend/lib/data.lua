-- data.lua — st.data: a DataLoader over in-memory datasets, and the MNIST-format / Fashion-MNIST
-- readers.
--
-- Invariants:
--   * A batch is built with one gather per tensor (index_select on the whole-dataset tensor with a
--     1-based i64 index tensor), or a view (narrow) when the loader does not shuffle: no per-sample
--     Lua loop ever touches tensor data.
--   * Shuffling never touches the global RNG (st.manual_seed's stream): each epoch's permutation is a
--     Fisher-Yates shuffle driven by a private splitmix64 generator seeded from (seed, epoch), so a
--     given seed gives the same batches in every run, and each epoch a different order. Without a
--     seed, the loader draws one seed from the global RNG once, when it is built (so st.manual_seed
--     still makes a run reproducible).
--   * Dataset tensors are realized when the dataset is built, so batches gather from memory instead
--     of re-running the conversion.
local st = ...

local M = {}

-- ---------------------------------------------------------------------------------------------
-- Private RNG: splitmix64 on Lua's 64-bit integers (wrapping arithmetic, >> is a logical shift).
-- ---------------------------------------------------------------------------------------------

local function splitmix64(state)
  state = state + 0x9E3779B97F4A7C15
  local z = state
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return state, z ~ (z >> 31)
end

-- permutation(n, seed, epoch): a list holding 1..n in a random order, a pure function of its
-- arguments. A uniform index in [1, i] is (63 random bits) % i + 1, whose bias (< i / 2^63) is far
-- below anything a shuffle can show.
local function permutation(n, seed, epoch)
  local s = seed * 0x2545F4914F6CDD1D + epoch
  local _
  s, _ = splitmix64(s)
  local perm = {}
  for i = 1, n do perm[i] = i end
  local r
  for i = n, 2, -1 do
    s, r = splitmix64(s)
    local j = (r >> 1) % i + 1
    perm[i], perm[j] = perm[j], perm[i]
  end
  return perm
end
M._permutation = permutation

-- ---------------------------------------------------------------------------------------------
-- DataLoader
-- ---------------------------------------------------------------------------------------------

local DataLoader = {}
DataLoader.__index = DataLoader
M.DataLoader_class = DataLoader

-- DataLoader(dataset, {batch_size = 1, shuffle = false, seed = nil, drop_last = false,
--                      device = nil})
-- dataset is one of:
--   * a table {x = tensor (N, ...), y = tensor (N, ...)} (y optional): batches are xb, yb;
--   * a list of tensors {t1, t2, ...} sharing their first size N: batches are t1b, t2b, ...;
--   * an object with :len() -> N and :get_batch(idx) -> values, where idx is a 1-based i64 tensor
--     of the batch's sample indices (the loader passes it; the object gathers).
local function new_loader(dataset, opts)
  opts = opts or {}
  local known = { batch_size = true, shuffle = true, seed = true, drop_last = true, device = true }
  for k in pairs(opts) do
    if not known[k] then error("DataLoader: unknown option '" .. tostring(k) .. "'", 3) end
  end
  local self = setmetatable({}, DataLoader)
  self.batch_size = opts.batch_size or 1
  if math.type(self.batch_size) ~= "integer" or self.batch_size < 1 then
    error("DataLoader: batch_size must be a positive integer, got " .. tostring(opts.batch_size), 3)
  end
  self.shuffle = opts.shuffle and true or false
  self.drop_last = opts.drop_last and true or false
  self.device = opts.device
  self.epoch = 0
  if type(dataset) ~= "table" then error("DataLoader: dataset must be a table", 3) end
  if type(dataset.get_batch) == "function" then
    if type(dataset.len) ~= "function" then
      error("DataLoader: a dataset with get_batch must also have len()", 3)
    end
    self.object = dataset
    self.n = dataset:len()
  else
    local ts
    if dataset.x ~= nil then
      ts = { dataset.x, dataset.y }
    else
      ts = {}
      for i, t in ipairs(dataset) do ts[i] = t end
    end
    if #ts == 0 then
      error("DataLoader: dataset must be {x = tensor, y = tensor}, a list of tensors, or an object with len() and get_batch(idx)", 3)
    end
    for i, t in ipairs(ts) do
      if not st.is_tensor(t) then error("DataLoader: dataset entry " .. i .. " is not a tensor", 3) end
      if t:dim() == 0 then error("DataLoader: dataset tensors must have at least one dim", 3) end
      if t:size(1) ~= ts[1]:size(1) then
        error(string.format("DataLoader: dataset tensors differ in their first size: %d and %d",
          ts[1]:size(1), t:size(1)), 3)
      end
    end
    self.tensors = ts
    self.n = ts[1]:size(1)
  end
  if math.type(self.n) ~= "integer" or self.n < 0 then
    error("DataLoader: dataset length must be an integer >= 0, got " .. tostring(self.n), 3)
  end
  if opts.seed ~= nil then
    if math.type(opts.seed) ~= "integer" then error("DataLoader: seed must be an integer", 3) end
    self.seed = opts.seed
  elseif self.shuffle then
    self.seed = st.randint(0, 0x7fffffff, { 1 }):item()
  end
  return self
end
M.DataLoader = new_loader

-- Number of batches in one epoch.
function DataLoader:num_batches()
  if self.drop_last then return self.n // self.batch_size end
  return (self.n + self.batch_size - 1) // self.batch_size
end
DataLoader.__len = DataLoader.num_batches

local function to_device(self, ...)
  if self.device == nil or self.device == "cpu" then return ... end
  local out = table.pack(...)
  for i = 1, out.n do
    if st.is_tensor(out[i]) then out[i] = out[i]:to(self.device) end
  end
  return table.unpack(out, 1, out.n)
end

-- The batch of samples start..start+len-1 of this epoch's order.
function DataLoader:_batch(order, start, len)
  if self.object then
    local idx = order and order:narrow(1, start, len) or st.arange(start, start + len)
    return to_device(self, self.object:get_batch(idx))
  end
  local ts, out = self.tensors, {}
  for i = 1, #ts do
    if order then
      -- the order is made on the default device; each tensor is indexed where it lives
      local idx = order:narrow(1, start, len)
      if idx:device() ~= ts[i]:device() then idx = idx:to(ts[i]:device()) end
      out[i] = ts[i]:index_select(1, idx)
    else
      out[i] = ts[i]:narrow(1, start, len)
    end
  end
  return to_device(self, table.unpack(out, 1, #ts))
end

-- iter(): an iterator over one epoch (`for xb, yb in loader:iter() do`). Each call starts a new
-- epoch, with a new order when shuffling.
function DataLoader:iter()
  self.epoch = self.epoch + 1
  local order
  if self.shuffle and self.n > 0 then
    order = st.tensor(permutation(self.n, self.seed, self.epoch), "i64")
  end
  local nb, bs, n = self:num_batches(), self.batch_size, self.n
  local b = 0
  return function()
    if b >= nb then return nil end
    local start = b * bs + 1
    b = b + 1
    return self:_batch(order, start, math.min(bs, n - start + 1))
  end
end

-- `for xb, yb in loader do`: the generic for calls the loader with control value nil first (a new
-- epoch starts), then with the previous first value (never nil inside an epoch).
function DataLoader:__call(_, control)
  if control == nil then self._it = self:iter() end
  local it = self._it
  return it()
end

function DataLoader:__tostring()
  return string.format("DataLoader(%d samples, batch_size=%d, %d batches, shuffle=%s, drop_last=%s)",
    self.n, self.batch_size, self:num_batches(), tostring(self.shuffle), tostring(self.drop_last))
end

-- ---------------------------------------------------------------------------------------------
-- MNIST-format files
-- ---------------------------------------------------------------------------------------------

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- Converts raw IDX images (N, 28, 28) of bytes and labels (N) into a dataset: x f32 in [0, 1],
-- (N, 784) or (N, 1, 28, 28) with shape = "image"; y i64 labels 1..10 (1-based). Both realized.
local function make_dataset(images, labels, opts, what)
  opts = opts or {}
  if images:dim() < 2 then
    error(string.format("%s: images file has %d dims, expected (N, rows, cols)", what, images:dim()), 3)
  end
  if labels:dim() ~= 1 or labels:size(1) ~= images:size(1) then
    error(string.format("%s: %d images but labels of shape (%s)", what, images:size(1),
      table.concat(labels:shape(), ", ")), 3)
  end
  local n = images:size(1)
  local x = images:float() / 255.0
  if opts.shape == "image" then
    local s = images:shape()
    if #s == 3 then x = x:reshape(n, 1, s[2], s[3]) end
  elseif opts.shape == nil or opts.shape == "flat" then
    x = x:reshape(n, -1)
  else
    error(what .. ": shape must be \"flat\" or \"image\", got " .. tostring(opts.shape), 3)
  end
  local y = labels:long() + 1
  st.sync(x, y)
  return { x = x, y = y }
end

-- mnist_idx(images_path, labels_path [, {shape = "flat" | "image"}]): any MNIST-format pair.
function M.mnist_idx(images_path, labels_path, opts)
  local images = st.read_idx(images_path)
  local labels = st.read_idx(labels_path)
  return make_dataset(images, labels, opts, "mnist_idx")
end

M.FASHION_MNIST_DIRS = { "/usr/share/datasets/fashion-mnist" }

local function find_file(dir, base)
  for _, name in ipairs({ base .. ".gz", base }) do
    local p = dir .. "/" .. name
    if file_exists(p) then return p end
  end
  return nil
end

-- fashion_mnist({split = "train" | "test", dir = nil, shape = "flat" | "image"}):
-- 60,000 training or 10,000 test images. Looks in `dir` when given, else in $FASHION_MNIST_DIR
-- (when set) and then the Debian package's directory.
function M.fashion_mnist(opts)
  opts = opts or {}
  local split = opts.split or "train"
  local prefix
  if split == "train" then prefix = "train" elseif split == "test" then prefix = "t10k"
  else error("fashion_mnist: split must be \"train\" or \"test\", got " .. tostring(split), 2) end
  local dirs = {}
  if opts.dir then
    dirs[1] = opts.dir
  else
    local env = os.getenv("FASHION_MNIST_DIR")
    if env and env ~= "" then dirs[#dirs + 1] = env end
    for _, d in ipairs(M.FASHION_MNIST_DIRS) do dirs[#dirs + 1] = d end
  end
  for _, d in ipairs(dirs) do
    local ip = find_file(d, prefix .. "-images-idx3-ubyte")
    local lp = find_file(d, prefix .. "-labels-idx1-ubyte")
    if ip and lp then
      local ds = make_dataset(st.read_idx(ip), st.read_idx(lp), { shape = opts.shape }, "fashion_mnist")
      ds.classes = { "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
        "Sneaker", "Bag", "Ankle boot" }
      return ds
    end
  end
  error("Fashion-MNIST not found in " .. table.concat(dirs, ", ") ..
    "; install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist)", 2)
end

return M
