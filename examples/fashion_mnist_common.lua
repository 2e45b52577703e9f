-- fashion_mnist_common.lua — what the Fashion-MNIST examples share: their command line, the data
-- (standardized, on the default device), the test accuracy and the training loop with its progress
-- bar and per-epoch line. Loaded by each example with dofile next to it:
--   local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/fashion_mnist_common.lua")
local M = {}

-- Options `--name value` over `defaults` (numbers); an unknown name, a missing or non-numeric
-- value is an error showing the usage line.
function M.options(defaults, script)
  local opts, names = {}, {}
  for k, v in pairs(defaults) do opts[k] = v; names[#names + 1] = k end
  table.sort(names)
  local usage = "usage: " .. script
  for _, k in ipairs(names) do usage = usage .. " [--" .. k .. " X]" end
  local i = 1
  while i <= #arg do
    local k = arg[i]:match("^%-%-(%w+)$")
    local v = arg[i + 1] and tonumber(arg[i + 1])
    if not k or opts[k] == nil or v == nil then error(usage, 0) end
    opts[k] = math.tointeger(v) or v
    i = i + 2
  end
  return opts
end

-- The training and test sets (shape: "flat" rows of 784 or "image" (N, 1, 28, 28)), the pixels
-- standardized with the training set's mean and std (realized once), the whole dataset on the
-- default device (a GPU when there is one; docs/cuda.md), so batches are gathered next to the model.
function M.load(shape)
  local t_load = st._now()
  local train = st.data.fashion_mnist({ split = "train", shape = shape })
  local test = st.data.fashion_mnist({ split = "test", shape = shape })
  local mean, std = train.x:mean():item(), train.x:std():item()
  train.x = st.sync((train.x - mean) / std)
  test.x = st.sync((test.x - mean) / std)
  local dev = st.device()
  train.x, train.y, test.x, test.y = train.x:to(dev), train.y:to(dev), test.x:to(dev), test.y:to(dev)
  print(string.format("Fashion-MNIST: %d train, %d test images (loaded in %.1f s), device %s", train.x:size(1),
    test.x:size(1), st._now() - t_load, dev))
  return train, test
end

-- Accuracy of model on a dataset: the count of correct predictions stays a tensor until one :item().
function M.evaluate(model, data, batch)
  local guard <close> = st.no_grad()
  model:eval()
  local correct = st.zeros({}, "i64")
  for xb, yb in st.data.DataLoader(data, { batch_size = batch }):iter() do
    correct = correct + model(xb):argmax(2):eq(yb):sum()
    st.sync(correct)
  end
  return correct:item() / data.x:size(1)
end

-- Trains model for opts.epochs over loader (n_train images) with cross-entropy: per step the gradients, opt:step
-- (the update, the loss and the running sum in one flush), sched:step(); inputs(xb) may transform
-- a batch (nil: as is). Per epoch a progress bar, then the mean loss, the test accuracy (test,
-- batches of eval_batch), images/s and times; at the end the line `test accuracy: 0.XXXX`.
function M.train(model, opt, sched, loader, n_train, test, opts, eval_batch, inputs)
  local F = st.nn.functional
  local acc
  local t_all = st._now()
  for epoch = 1, opts.epochs do
    model:train()
    local bar = st.progress.new(n_train, { desc = "epoch " .. epoch, unit = "img" })
    local loss_sum = st.zeros({})
    local t0 = st._now()
    for xb, yb in loader:iter() do
      opt:zero_grad()
      local loss = F.cross_entropy(model(inputs and inputs(xb) or xb), yb)
      loss:backward()
      loss_sum = loss_sum + loss:detach()
      -- the update, the loss and the running sum in one flush (BatchNorm's running statistics,
      -- written in place, are realized by it too)
      opt:step({ loss, loss_sum })
      sched:step()
      bar:update(xb:size(1), { loss = loss })
    end
    local dt = st._now() - t0
    bar:close()
    acc = M.evaluate(model, test, eval_batch)
    print(string.format("epoch %d: train loss %.4f, test accuracy %.4f, %.0f images/s (%.1f s; %.1f min in all)",
      epoch, loss_sum:item() / #loader, acc, n_train / dt, dt, (st._now() - t_all) / 60))
  end
  print(string.format("test accuracy: %.4f", acc))
  return acc
end

return M
