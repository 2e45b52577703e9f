-- utils.lua — st.utils: gradient checkpointing.
--
--   local y = st.utils.checkpoint(block, x)      -- y = block(x), its intermediates not kept
--
-- checkpoint(fn, ...) runs fn(...) with grad mode off, so the graph keeps only its inputs (as
-- detached copies) and its outputs; in backward it runs fn again with grad mode on from the saved
-- inputs and the saved RNG state (dropout draws the same mask) and back-propagates the outputs'
-- gradients through that recomputation: the inputs get their gradients through the custom
-- function (st.autograd.Function), and the parameters fn uses accumulate theirs as in an ordinary
-- backward. Memory for compute: the forward's intermediates exist only during the backward.
-- Invariant: fn must compute the same function both times (no state changed between the runs other
-- than the RNG, which is restored).
local st = ...

local M = {}

local autograd = st.autograd

local Checkpoint = autograd.Function("checkpoint")

-- args: fn, the anchor (a one-element leaf requiring grad: the record exists whenever grad mode is
-- on, so the parameters inside fn get gradients even when no input requires grad), then fn's
-- arguments.
function Checkpoint.forward(ctx, fn, _, ...)
  local args = table.pack(...)
  for i = 1, args.n do
    if st.is_tensor(args[i]) then args[i] = args[i]:detach() end
  end
  ctx.fn, ctx.args, ctx.rng = fn, args, st.get_rng_state()
  return fn(...)
end

function Checkpoint.backward(ctx, ...)
  local grads = table.pack(...)
  local saved, args = ctx.args, {}
  for i = 1, saved.n do
    local a = saved[i]
    if st.is_tensor(a) then
      a = a:detach()
      if ctx.needs_input_grad[i + 2] then a:requires_grad_() end
    end
    args[i] = a
  end
  local rng = st.get_rng_state()
  st.set_rng_state(ctx.rng)
  local fn = ctx.fn
  local ok, outs = pcall(st.enable_grad, function() return table.pack(fn(table.unpack(args, 1, saved.n))) end)
  st.set_rng_state(rng)
  if not ok then error(outs, 0) end
  local roots, rgrads = {}, {}
  for k = 1, outs.n do
    local o, g = outs[k], grads[k]
    if st.is_tensor(o) and o.requires_grad and g ~= nil then roots[#roots + 1], rgrads[#rgrads + 1] = o, g end
  end
  if #roots == 1 then
    roots[1]:backward(rgrads[1])
  elseif #roots > 1 then
    -- one pass for all outputs: d(sum_k <o_k, g_k>)/d o_k = g_k exactly, and the sum itself is
    -- never computed (nothing reads it)
    local s = st.enable_grad(function()
      local acc = (roots[1] * rgrads[1]):sum()
      for k = 2, #roots do acc = acc + (roots[k] * rgrads[k]):sum() end
      return acc
    end)
    s:backward()
  end
  local res = {}
  for i = 1, saved.n do
    if st.is_tensor(args[i]) and ctx.needs_input_grad[i + 2] then res[i + 2] = args[i].grad end
  end
  return table.unpack(res, 1, saved.n + 2)
end

-- st.utils.checkpoint(fn, ...) -> fn(...), recomputed in backward instead of stored.
function M.checkpoint(fn, ...)
  local mt = getmetatable(fn)
  if type(fn) ~= "function" and not (type(mt) == "table" and mt.__call ~= nil) then
    error("checkpoint: expected a function (or a callable module) first, got " .. type(fn), 2)
  end
  local anchor = nil
  if st.is_grad_enabled() then anchor = st.zeros(1):requires_grad_() end
  return Checkpoint.apply(fn, anchor, ...)
end

return M
