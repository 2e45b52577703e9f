-- test_data.lua — st.data (DataLoader, Fashion-MNIST / IDX datasets) and st.progress (output in the
-- plain and bar modes, written to a temp file).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, check_near, eq, raises = H.test, H.check_near, H.eq, H.raises

local data = st.data

-- A dataset whose sample i has x = {i, -i} and y = i, so a batch tells which samples it holds.
local function numbered(n)
  local xs, ys = {}, {}
  for i = 1, n do xs[i] = { i, -i }; ys[i] = i end
  return { x = st.tensor(xs), y = st.tensor(ys, "i64") }
end

-- Runs one epoch; returns the list of batches' label lists.
local function epoch(loader)
  local out = {}
  for xb, yb in loader:iter() do
    local ys = yb:tolist()
    local xs = xb:tolist()
    for k = 1, #ys do
      if xs[k][1] ~= ys[k] or xs[k][2] ~= -ys[k] then error("x and y rows do not match") end
    end
    out[#out + 1] = ys
  end
  return out
end

local function flat(batches)
  local out = {}
  for _, b in ipairs(batches) do for _, v in ipairs(b) do out[#out + 1] = v end end
  return out
end

test("DataLoader: batch counts with and without drop_last", function()
  local ds = numbered(10)
  for _, c in ipairs({ { 3, false, 4, { 3, 3, 3, 1 } }, { 3, true, 3, { 3, 3, 3 } },
                       { 5, false, 2, { 5, 5 } }, { 5, true, 2, { 5, 5 } },
                       { 20, false, 1, { 10 } }, { 20, true, 0, {} }, { 1, false, 10, nil } }) do
    local bs, dl, nb, sizes = c[1], c[2], c[3], c[4]
    local l = data.DataLoader(ds, { batch_size = bs, drop_last = dl })
    eq(#l, nb, string.format("#loader (bs %d, drop_last %s)", bs, tostring(dl)))
    local batches = epoch(l)
    eq(#batches, nb, "batches yielded")
    if sizes then
      for i, s in ipairs(sizes) do eq(#batches[i], s, "batch " .. i .. " size") end
    end
  end
end)

test("DataLoader: in order without shuffle; x and y stay paired", function()
  local l = data.DataLoader(numbered(7), { batch_size = 3 })
  local b = epoch(l)
  eq(H.show(b), "{{1, 2, 3}, {4, 5, 6}, {7}}", "batches")
end)

test("DataLoader: shuffle covers every sample once, reproducible with a seed", function()
  local ds = numbered(50)
  local l1 = data.DataLoader(ds, { batch_size = 8, shuffle = true, seed = 7 })
  local l2 = data.DataLoader(ds, { batch_size = 8, shuffle = true, seed = 7 })
  local l3 = data.DataLoader(ds, { batch_size = 8, shuffle = true, seed = 8 })
  local e1a, e1b = flat(epoch(l1)), flat(epoch(l1))
  local e2a, e2b = flat(epoch(l2)), flat(epoch(l2))
  local e3a = flat(epoch(l3))
  for _, e in ipairs({ e1a, e1b, e3a }) do
    local seen = {}
    for _, v in ipairs(e) do
      if seen[v] then error("sample " .. v .. " twice in one epoch") end
      seen[v] = true
    end
    for i = 1, 50 do if not seen[i] then error("sample " .. i .. " missing") end end
  end
  eq(H.show(e1a), H.show(e2a), "same seed, epoch 1")
  eq(H.show(e1b), H.show(e2b), "same seed, epoch 2")
  if H.show(e1a) == H.show(e1b) then error("two epochs gave the same order") end
  if H.show(e1a) == H.show(e3a) then error("two seeds gave the same order") end
  local sorted = {}
  for i = 1, 50 do sorted[i] = i end
  if H.show(e1a) == H.show(sorted) then error("shuffle left the order unchanged") end
end)

test("DataLoader: shuffle ignores the global RNG stream; unseeded follows manual_seed", function()
  local ds = numbered(20)
  st.manual_seed(1)
  local a = flat(epoch(data.DataLoader(ds, { batch_size = 4, shuffle = true, seed = 3 })))
  st.manual_seed(2)
  st.rand(5)
  local b = flat(epoch(data.DataLoader(ds, { batch_size = 4, shuffle = true, seed = 3 })))
  eq(H.show(a), H.show(b), "seeded order")
  st.manual_seed(5)
  local c = flat(epoch(data.DataLoader(ds, { batch_size = 4, shuffle = true })))
  st.manual_seed(5)
  local d = flat(epoch(data.DataLoader(ds, { batch_size = 4, shuffle = true })))
  eq(H.show(c), H.show(d), "unseeded order after the same manual_seed")
end)

test("DataLoader: `for xb, yb in loader do` runs one epoch per loop", function()
  local l = data.DataLoader(numbered(5), { batch_size = 2, shuffle = true, seed = 1 })
  local epochs = {}
  for e = 1, 2 do
    local ys = {}
    for _, yb in l do
      for _, v in ipairs(yb:tolist()) do ys[#ys + 1] = v end
    end
    eq(#ys, 5, "samples in loop " .. e)
    epochs[e] = H.show(ys)
  end
  if epochs[1] == epochs[2] then error("the two loops gave the same order") end
  -- a loop that breaks early does not leave the next loop mid-epoch
  for _ in l do break end
  local n = 0
  for _ in l do n = n + 1 end
  eq(n, 3, "batches after an early break")
end)

test("DataLoader: list datasets, object datasets, errors", function()
  local a, b = st.arange(6):float(), st.arange(6):reshape(6, 1) * 10
  local l = data.DataLoader({ a, b }, { batch_size = 4 })
  local it = l:iter()
  local x1, y1 = it()
  eq(H.show(x1:tolist()), "{0.0, 1.0, 2.0, 3.0}", "list dataset batch")
  eq(H.show(y1:tolist()), "{{0}, {10}, {20}, {30}}", "list dataset second tensor")
  local obj = { n = 5 }
  function obj:len() return self.n end
  function obj:get_batch(idx) return idx * 2, "tag" end
  local ol = data.DataLoader(obj, { batch_size = 2, shuffle = true, seed = 4 })
  local total, tags = {}, 0
  for v, tag in ol:iter() do
    for _, x in ipairs(v:tolist()) do total[#total + 1] = x end
    if tag == "tag" then tags = tags + 1 end
  end
  table.sort(total)
  eq(H.show(total), "{2, 4, 6, 8, 10}", "object dataset indices (1-based)")
  eq(tags, 3, "extra values passed through")
  raises(function() data.DataLoader({ x = st.zeros(3), y = st.zeros(4) }) end, "differ in their first size: 3 and 4")
  raises(function() data.DataLoader(numbered(3), { batch_size = 0 }) end, "batch_size must be a positive integer")
  raises(function() data.DataLoader(numbered(3), { batchsize = 2 }) end, "unknown option 'batchsize'")
  raises(function() data.DataLoader({}) end, "dataset must be")
end)

test("permutation: deterministic, a permutation, uniform-ish", function()
  local perm = data._permutation
  eq(H.show(perm(10, 1, 1)), H.show(perm(10, 1, 1)), "deterministic")
  -- position counts of element 1 over many epochs: each of 4 positions about 1/4 of the time
  local counts = { 0, 0, 0, 0 }
  for e = 1, 4000 do
    local p = perm(4, 99, e)
    for i = 1, 4 do if p[i] == 1 then counts[i] = counts[i] + 1 end end
  end
  for i = 1, 4 do
    if counts[i] < 850 or counts[i] > 1150 then error("position counts " .. H.show(counts)) end
  end
end)

test("fashion_mnist: error names the directory and the Debian package", function()
  local err = raises(function() data.fashion_mnist({ dir = "/nonexistent/fm" }) end,
    "Fashion-MNIST not found in /nonexistent/fm; install the Debian package dataset-fashion-mnist")
  if not err:find("apt-get install dataset-fashion-mnist", 1, true) then error("no apt-get hint: " .. err) end
  raises(function() data.fashion_mnist({ split = "valid" }) end, 'split must be "train" or "test"')
end)

local FM = "/usr/share/datasets/fashion-mnist"
local have_fm = io.open(FM .. "/t10k-images-idx3-ubyte.gz", "rb")
if have_fm then have_fm:close() end
if have_fm and st.read_idx then
  test("fashion_mnist: test split shapes, ranges, labels", function()
    local ds = data.fashion_mnist({ split = "test", dir = FM })
    eq(H.show(ds.x:shape()), "{10000, 784}", "x shape")
    eq(ds.x:dtype(), "f32", "x dtype")
    eq(H.show(ds.y:shape()), "{10000}", "y shape")
    eq(ds.y:dtype(), "i64", "y dtype")
    eq(ds.y:min():item(), 1, "min label")
    eq(ds.y:max():item(), 10, "max label")
    check_near(ds.x:min():item(), 0, 0, "min pixel")
    check_near(ds.x:max():item(), 1, 0, "max pixel")
    -- balanced: 1,000 test images per class
    local counts = st.one_hot(ds.y, 10):sum(1):tolist()
    for c = 1, 10 do eq(counts[c], 1000, "class " .. c .. " count") end
    local img = data.fashion_mnist({ split = "test", dir = FM, shape = "image" })
    eq(H.show(img.x:shape()), "{10000, 1, 28, 28}", "image shape")
    local l = data.DataLoader(ds, { batch_size = 128, shuffle = true, seed = 1 })
    eq(#l, 79, "batches")
    local xb, yb = l:iter()()
    eq(H.show(xb:shape()), "{128, 784}", "batch x")
    eq(H.show(yb:shape()), "{128}", "batch y")
  end)
else
  print("SKIP fashion_mnist data: " .. (st.read_idx and (FM .. " not installed") or "no st.read_idx in this build"))
end

-- Runs fn(file) with a temp file; returns what was written.
local function capture(fn)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  fn(f)
  f:close()
  f = assert(io.open(path, "r"))
  local s = f:read("a")
  f:close()
  os.remove(path)
  return s
end

test("progress: plain mode prints about every 10% and a final line", function()
  local out = capture(function(f)
    local p = st.progress.new(1000, { desc = "epoch 1", unit = "img", mode = "plain", file = f })
    for _ = 1, 100 do p:update(10, { loss = 0.5 }) end
    p:close()
  end)
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  if #lines < 9 or #lines > 11 then error("expected about 10 lines, got " .. #lines .. ":\n" .. out) end
  if out:find("\r", 1, true) then error("carriage return in plain mode") end
  local last = lines[#lines]
  if not last:find("^epoch 1: 1000/1000 %(100%%%), [%d.]+ img/s, elapsed %d%d:%d%d, loss=0.5$") then
    error("last line: " .. last)
  end
  if not lines[1]:find("^epoch 1: 100/1000 %(10%%%)") then error("first line: " .. lines[1]) end
  if not lines[1]:find("eta ", 1, true) then error("no eta: " .. lines[1]) end
end)

test("progress: bar mode redraws one line with \\r", function()
  local out = capture(function(f)
    local p = st.progress.new(50, { desc = "train", unit = "img", mode = "bar", file = f, min_redraw = 0 })
    for _ = 1, 5 do p:update(10, { loss = 1.25 }) end
    p:close()
  end)
  local n_cr = select(2, out:gsub("\r", ""))
  if n_cr < 6 then error("expected >= 6 redraws, got " .. n_cr) end
  eq(select(2, out:gsub("\n", "")), 1, "newlines")
  local last = out:match("\r([^\r]*)\n$")
  if not last or not last:find("^train: 100%%|" .. string.rep("█", 30) .. "| 50/50 %[%d%d:%d%d<%d%d:%d%d, [%d.]+ img/s, loss=1.25%]") then
    error("last bar: " .. tostring(last))
  end
end)

test("progress: off mode, unknown totals, wrap", function()
  eq(capture(function(f)
    local p = st.progress.new(10, { mode = "off", file = f })
    p:update(10); p:close()
  end), "", "off mode output")
  local out = capture(function(f)
    local p = st.progress.new(nil, { mode = "plain", file = f, unit = "batch" })
    p:update(3); p:close()
  end)
  if not out:find("^3 batch, [%d.]+ batch/s") then error("unknown total: " .. out) end
  local l = data.DataLoader(numbered(10), { batch_size = 4 })
  local n = 0
  out = capture(function(f)
    for xb in st.progress.wrap(l, { mode = "plain", file = f, desc = "w" }) do n = n + xb:size(1) end
  end)
  eq(n, 10, "samples through wrap")
  if not out:find("w: 3/3 (100%)", 1, true) then error("wrap output: " .. out) end
  eq(st.progress.format_time(3725), "1:02:05", "format_time")
  eq(st.progress.format_time(75), "01:15", "format_time")
end)

H.done()
