-- torch_layers_f64.lua — stitch's half of the f64 parity test with PyTorch (issue 14; run by
-- tests/run_torch_layers.sh after tests/parity/torch_layers_f64.py has written FILE).
--
-- Usage: stitch tests/parity/torch_layers_f64.lua FILE
--
-- For every case in FILE (see torch_layers_f64.py for the layout) it builds the same stitch module
-- or function in f64, loads PyTorch's weights with load_state_dict(sd, {from = "torch"}), runs the
-- forward on the same inputs and the backward with the same upstream gradients (as one backward of
-- sum_i <out_i, gout_i>), and compares the outputs, the input and parameter gradients and the
-- buffers after the step; optimizers: the weights after each of 4 steps; schedulers: the lr after
-- each step. The error of one tensor is max|got - want| / max|want| (the relative error in the max
-- norm); a case passes when every tensor's error is below TOL = 1e-6. Each PASS line names the
-- case's worst error and the tensor it came from.
-- Documented differences handled here: class and embedding indices count from 1 in stitch (the
-- file's are PyTorch's, 0-based: +1, also for ignore_index and padding_idx); PyTorch's
-- momentum=None is BatchNorm's momentum = false; torch's attn_mask/key_padding_mask bool masks
-- (true = may not attend) are the same in stitch's MultiheadAttention and TransformerEncoderLayer.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "../lua/harness.lua")
local nn, F = st.nn, st.nn.functional
local TOL = 1e-6

local path = assert(arg[1], "usage: stitch tests/parity/torch_layers_f64.lua FILE")
local all = {}
for k, v in pairs(st.load(path)) do all[k] = v:to(st.device()) end   -- st.load reads to the CPU

-- The parts of case NAME: sd (state_dict, torch keys), ins, outs, gouts, gins (by input index),
-- grads and after (by torch key), and the rest by name (x, y, loss, lr, step1/..., ...).
local function group(name)
  local g = {sd = {}, ins = {}, outs = {}, gouts = {}, gins = {}, grads = {}, after = {}, steps = {}}
  for k, v in pairs(all) do
    local n, rest = k:match("^([^/]+)/(.*)$")
    if n == name then
      local kind, i = rest:match("^@(%a+)(%d+)$")
      local sub, key = rest:match("^@([%w]+)/(.*)$")
      if kind == "in" then g.ins[tonumber(i)] = v
      elseif kind == "out" then g.outs[tonumber(i)] = v
      elseif kind == "gout" then g.gouts[tonumber(i)] = v
      elseif kind == "gin" then g.gins[tonumber(i)] = v
      elseif sub == "grad" then g.grads[key] = v
      elseif sub == "after" then g.after[key] = v
      elseif sub and sub:match("^step%d+$") then
        local s = tonumber(sub:match("%d+"))
        g.steps[s] = g.steps[s] or {}
        g.steps[s][key] = v
      elseif rest:sub(1, 1) == "@" then g[rest:sub(2)] = v
      else g.sd[rest] = v end
    end
  end
  return g
end

-- Relative error of got against want (max norm), and the tracker of a case's worst.
local function relerr(got, want, what)
  H.eq(H.show(got:shape()), H.show(want:shape()), what .. " shape")
  local g, w = got:double(), want:double()
  local d = (g - w):abs():max():item()
  local m = w:abs():max():item()
  if d ~= d then return math.huge end
  return m > 0 and d / m or d
end
local function tracker()
  local t = {worst = 0, where = "-", bad = {}, n = 0}
  function t.cmp(got, want, what)
    assert(got ~= nil, what .. ": stitch has no value (nil)")
    t.n = t.n + 1
    local e = relerr(got, want, what)
    if e > t.worst or t.where == "-" then t.worst, t.where = e, what end
    if not (e <= TOL) then t.bad[#t.bad + 1] = string.format("%s %.3g", what, e) end
  end
  function t.finish(name)
    if #t.bad > 0 then error(name .. ": relative error over " .. TOL .. " in " .. table.concat(t.bad, ", ")) end
    return string.format("worst rel err %.2e (%s; %d tensors)", t.worst, t.where, t.n)
  end
  return t
end

local results, failed = {}, 0
local function case(name, fn)
  local ok, res = xpcall(fn, debug.traceback, name)
  if ok then
    print(string.format("PASS torch_f64_%s: %s", name, res))
    results[#results + 1] = {name, res}
  else
    failed = failed + 1
    print("FAIL torch_f64_" .. name .. ": " .. tostring(res):gsub("\n", "\n    "))
  end
  collectgarbage()
end

-- Module and functional cases. spec.make() builds the module (nil: spec.fn is a function of the
-- inputs); spec.run(m, ins) returns the outputs (default m(ins[1])); spec.idx: input indices that
-- are PyTorch class/embedding indices (+1); spec.eval: eval mode.
local function layer_case(name, spec)
  case(name, function()
    local g = group(name)
    assert(#g.ins > 0, "no case " .. name .. " in " .. path)
    local m
    if spec.make then
      m = spec.make():double()
      m:train(not spec.eval)
      local missing, unexpected = m:load_state_dict(g.sd, {from = "torch"})
      H.eq(#missing + #unexpected, 0, "missing and unexpected keys")
    end
    local ins = {}
    for i, x in ipairs(g.ins) do
      if spec.idx and spec.idx[i] then ins[i] = x + 1
      else
        ins[i] = x:clone()
        if g.gins[i] then ins[i]:requires_grad_() end
      end
    end
    local outs
    if m then outs = {(spec.run or function(mm, x) return mm(x[1]) end)(m, ins)}
    else outs = {spec.fn(table.unpack(ins))} end
    if #outs == 1 and type(outs[1]) == "table" and not st.is_tensor(outs[1]) then outs = outs[1] end
    H.eq(#outs, #g.outs, "number of outputs")
    local t = tracker()
    local total
    for i, y in ipairs(outs) do
      t.cmp(y, g.outs[i], "out" .. i)
      local s = (y * g.gouts[i]):sum()
      total = total and total + s or s
    end
    total:backward()
    for i, want in pairs(g.gins) do t.cmp(ins[i].grad, want, "grad in" .. i) end
    if m then
      local params = {}
      for k, p in m:named_parameters() do params[k] = p end
      local own = m:state_dict({to = "torch"})
      for k, want in pairs(g.grads) do
        assert(own[k], "no parameter " .. k)
        t.cmp(own[k].grad, want, "grad " .. k)
      end
      for k, want in pairs(g.after) do
        if k:match("num_batches_tracked$") then H.eq(own[k]:item(), want:item(), k)
        else t.cmp(own[k], want, k .. " after") end
      end
    end
    return t.finish(name)
  end)
end

local LAYERS = {
  {"batchnorm1d_train", {make = function() return nn.BatchNorm1d(3) end}},
  {"batchnorm1d_2d_train", {make = function() return nn.BatchNorm1d(3, {momentum = 0.3}) end}},
  {"batchnorm1d_cumulative", {make = function() return nn.BatchNorm1d(3, {momentum = false}) end}},
  {"batchnorm1d_eval", {make = function() return nn.BatchNorm1d(3) end, eval = true}},
  {"batchnorm2d_train", {make = function() return nn.BatchNorm2d(2, {eps = 1e-3}) end}},
  {"batchnorm2d_eval", {make = function() return nn.BatchNorm2d(2) end, eval = true}},
  {"batchnorm2d_nostats", {make = function() return nn.BatchNorm2d(2, {affine = false, track_running_stats = false}) end}},
  {"batchnorm2d_nostats_eval", {make = function()
    return nn.BatchNorm2d(2, {affine = false, track_running_stats = false})
  end, eval = true}},
  {"groupnorm", {make = function() return nn.GroupNorm(2, 4) end}},
  {"instancenorm2d", {make = function() return nn.InstanceNorm2d(3, {affine = true}) end}},
  {"instancenorm2d_noaffine", {make = function() return nn.InstanceNorm2d(3) end}},
  {"instancenorm1d", {make = function() return nn.InstanceNorm1d(3, {affine = true}) end}},
  {"layernorm", {make = function() return nn.LayerNorm({4, 5}) end}},
  {"layernorm_noaffine", {make = function() return nn.LayerNorm(5, {eps = 1e-3, elementwise_affine = false}) end}},
  {"conv2d_stride_pad_groups", {make = function() return nn.Conv2d(4, 6, 3, {stride = 2, padding = 1, groups = 2}) end}},
  {"conv2d_dilation_rect", {make = function()
    return nn.Conv2d(3, 4, {3, 2}, {stride = {1, 2}, padding = {2, 1}, dilation = {2, 1}})
  end}},
  {"conv2d_depthwise_same", {make = function()
    return nn.Conv2d(3, 3, 3, {padding = "same", dilation = 2, groups = 3, bias = false})
  end}},
  {"conv2d_same_even_kernel", {make = function()
    return nn.Conv2d(3, 5, {2, 4}, {padding = "same", dilation = {1, 2}})
  end}},
  {"conv2d_1x1_wide_pad", {make = function() return nn.Conv2d(2, 3, 1, {padding = 1}) end}},
  {"conv2d_stride_uncovered", {make = function() return nn.Conv2d(2, 3, 3, {stride = {2, 3}}) end}},
  {"conv2d_stride_dilation", {make = function()
    return nn.Conv2d(3, 4, 3, {stride = {2, 3}, padding = {2, 1}, dilation = {2, 1}}) end}},
  {"conv2d_1x1_stride2_groups", {make = function() return nn.Conv2d(4, 6, 1, {stride = 2, groups = 2, bias = false}) end}},
  {"adaptive_avgpool2d_uneven", {make = function() return nn.AdaptiveAvgPool2d({3, 2}) end}},
  {"adaptive_avgpool2d_global", {make = function() return nn.AdaptiveAvgPool2d(1) end}},
  {"maxpool2d", {make = function() return nn.MaxPool2d(2) end}},
  {"maxpool2d_pad_ceil", {make = function() return nn.MaxPool2d(3, {stride = 2, padding = 1, ceil_mode = true}) end}},
  {"avgpool2d_pad_ceil", {make = function() return nn.AvgPool2d(3, {stride = 2, padding = 1, ceil_mode = true}) end}},
  {"avgpool2d_pad_ceil_nocount", {make = function()
    return nn.AvgPool2d(3, {stride = 2, padding = 1, ceil_mode = true, count_include_pad = false})
  end}},
  {"maxpool1d_pad_ceil", {make = function() return nn.MaxPool1d(3, {stride = 2, padding = 1, ceil_mode = true}) end}},
  {"avgpool1d_pad_ceil_nocount", {make = function()
    return nn.AvgPool1d(4, {stride = 3, padding = 2, ceil_mode = true, count_include_pad = false})
  end}},
  {"avgpool1d_unbatched", {make = function() return nn.AvgPool1d(2) end}},
  {"adaptive_avgpool1d_uneven", {make = function() return nn.AdaptiveAvgPool1d(4) end}},
  {"conv1d_stride_pad_groups", {make = function() return nn.Conv1d(4, 6, 3, {stride = 2, padding = 1, groups = 2}) end}},
  {"conv1d_same_dilation", {make = function() return nn.Conv1d(3, 5, 4, {padding = "same", dilation = 2}) end}},
  {"conv1d_unbatched_valid", {make = function() return nn.Conv1d(2, 3, 2, {padding = "valid", bias = false}) end}},
  {"convt2d_stride_pad_outpad", {make = function()
    return nn.ConvTranspose2d(3, 4, 3, {stride = 2, padding = 1, output_padding = 1})
  end}},
  {"convt2d_groups", {make = function() return nn.ConvTranspose2d(4, 6, 3, {stride = 2, groups = 2}) end}},
  {"convt2d_dilation_rect", {make = function()
    return nn.ConvTranspose2d(2, 3, {3, 2}, {stride = {1, 2}, padding = {2, 0}, output_padding = {1, 1},
      dilation = {2, 1}})
  end}},
  {"convt2d_wide_pad", {make = function() return nn.ConvTranspose2d(2, 2, 2, {stride = 3, padding = 2, bias = false}) end}},
  {"convt2d_unbatched", {make = function()
    return nn.ConvTranspose2d(2, 3, {2, 3}, {stride = {2, 1}, padding = {0, 1}})
  end}},
  {"interp_nearest_x2", {fn = function(x) return F.interpolate(x, {scale_factor = 2}) end}},
  {"interp_nearest_size", {fn = function(x) return F.interpolate(x, {size = {7, 4}}) end}},
  {"interp_nearest_scale_1_5", {fn = function(x) return F.interpolate(x, {scale_factor = 1.5}) end}},
  {"interp_nearest_x3_1d", {fn = function(x) return F.interpolate(x, {scale_factor = 3}) end}},
  {"interp_bilinear_up", {fn = function(x)
    return F.interpolate(x, {size = {7, 9}, mode = "bilinear", align_corners = false})
  end}},
  {"interp_bilinear_down", {fn = function(x)
    return F.interpolate(x, {size = {4, 5}, mode = "bilinear", align_corners = false})
  end}},
  {"interp_bilinear_ac_up", {fn = function(x)
    return F.interpolate(x, {size = {7, 9}, mode = "bilinear", align_corners = true})
  end}},
  {"interp_bilinear_ac_down", {fn = function(x)
    return F.interpolate(x, {size = {3, 4}, mode = "bilinear", align_corners = true})
  end}},
  {"interp_bilinear_scale", {fn = function(x) return F.interpolate(x, {scale_factor = {2, 0.5}, mode = "bilinear"}) end}},
  {"interp_linear_1d", {fn = function(x) return F.interpolate(x, {size = 8, mode = "linear"}) end}},
  {"interp_bicubic_up", {fn = function(x)
    return F.interpolate(x, {size = {7, 9}, mode = "bicubic", align_corners = false})
  end}},
  {"interp_bicubic_down", {fn = function(x)
    return F.interpolate(x, {size = {4, 5}, mode = "bicubic", align_corners = false})
  end}},
  {"interp_bicubic_ac", {fn = function(x)
    return F.interpolate(x, {size = {6, 3}, mode = "bicubic", align_corners = true})
  end}},
  {"interp_bicubic_scale", {fn = function(x) return F.interpolate(x, {scale_factor = {2, 0.5}, mode = "bicubic"}) end}},
  {"interp_area_down", {fn = function(x) return F.interpolate(x, {size = {3, 4}, mode = "area"}) end}},
  {"interp_area_up_1d", {fn = function(x) return F.interpolate(x, {size = 8, mode = "area"}) end}},
  {"upsample_bilinear_x2", {make = function()
    return nn.Upsample({scale_factor = 2, mode = "bilinear", align_corners = false})
  end}},
  {"mha_causal", {make = function() return nn.MultiheadAttention(8, 2) end,
    run = function(m, x)
      local mask = st.ones(4, 4):triu(1):bool():to(st.device())   -- true: may not attend (PyTorch's module)
      return {m(x[1], x[2], x[3], {attn_mask = mask})}
    end}},
  {"mha_batch_first_padding", {make = function() return nn.MultiheadAttention(6, 3, {batch_first = true}) end,
    run = function(m, x)
      local kpm = st.tensor({{0, 0, 0, 1, 1}, {0, 0, 0, 0, 0}}):bool():to(st.device())
      return {m(x[1], x[2], x[3], {key_padding_mask = kpm, average_attn_weights = false})}
    end}},
  {"encoder_post_norm", {make = function()
    return nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0})
  end, run = function(m, x)
    return m(x[1], {src_mask = st.ones(4, 4):triu(1):bool():to(st.device())})
  end}},
  {"encoder_norm_first_gelu", {make = function()
    return nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0, activation = "gelu",
      batch_first = true, norm_first = true})
  end}},
  -- F.scaled_dot_product_attention (not in torch 1.13: the file has its explicit formula)
  {"sdpa_causal", {fn = function(q, k, v) return F.scaled_dot_product_attention(q, k, v, {is_causal = true}) end}},
  {"sdpa_mask_scale", {fn = function(q, k, v)
    local allow = st.tensor({{true, false, true, true, false}, {true, true, false, true, true},
      {false, true, true, true, true}}):to(st.device())
    return F.scaled_dot_product_attention(q, k, v, {attn_mask = allow, scale = 0.3})
  end}},
  {"sdpa_float_mask", {fn = function(q, k, v, m) return F.scaled_dot_product_attention(q, k, v, {attn_mask = m}) end}},
  {"mha_padding_no_weights", {make = function() return nn.MultiheadAttention(6, 3, {batch_first = true}) end,
    run = function(m, x)
      local kpm = st.tensor({{0, 0, 0, 1, 1}, {0, 0, 0, 0, 0}}):bool():to(st.device())
      local masked = st.tensor({{false, true, false, false, true}, {false, false, true, false, false},
        {true, false, false, false, false}}):to(st.device())
      return (m(x[1], x[2], x[3], {key_padding_mask = kpm, attn_mask = masked, need_weights = false}))
    end}},
  {"lstm", {make = function() return nn.LSTM(3, 4, {num_layers = 2, batch_first = true, bidirectional = true}) end,
    run = function(m, x)
      local y, hc = m(x[1], {x[2], x[3]})
      return {y, hc[1], hc[2]}
    end}},
  {"gru", {make = function() return nn.GRU(3, 4, {num_layers = 2, batch_first = true, bidirectional = true}) end,
    run = function(m, x) return {m(x[1], x[2])} end}},
  {"lstm_seq_first", {make = function() return nn.LSTM(2, 3) end,
    run = function(m, x) return (m(x[1])) end}},
  {"embedding_padding", {make = function() return nn.Embedding(6, 3, {padding_idx = 3}) end, idx = {true}}},
  {"leaky_relu", {make = function() return nn.LeakyReLU(0.2) end}},
  {"elu", {make = function() return nn.ELU(0.7) end}},
  {"softplus", {make = function() return nn.Softplus(2, 3) end}},
  {"mish", {make = function() return nn.Mish() end}},
  {"hardswish", {make = function() return nn.Hardswish() end}},
  {"hardsigmoid", {make = function() return nn.Hardsigmoid() end}},
  {"prelu", {make = function() return nn.PReLU({num_parameters = 4}) end}},
  {"prelu_single", {make = function() return nn.PReLU() end}},
  {"gelu", {make = function() return nn.GELU() end}},
  {"gelu_tanh", {make = function() return nn.GELU({approximate = "tanh"}) end}},
}

-- Losses (functional forms); idx: the class-target inputs (+1); ignore_index 1 in PyTorch is 2 here.
local LOSSES = {
  {"ce_ignore_smoothing", {idx = {[2] = true}, fn = function(x, t, w)
    return F.cross_entropy(x, t, {weight = w, ignore_index = 2, label_smoothing = 0.2})
  end}},
  {"ce_ignore_smoothing_sum", {idx = {[2] = true}, fn = function(x, t)
    return F.cross_entropy(x, t, {ignore_index = 2, label_smoothing = 0.1, reduction = "sum"})
  end}},
  {"ce_kdim_none", {idx = {[2] = true}, fn = function(x, t)
    return F.cross_entropy(x, t, {reduction = "none", label_smoothing = 0.05})
  end}},
  {"ce_prob_targets", {fn = function(x, p, w) return F.cross_entropy(x, p, {weight = w, label_smoothing = 0.1}) end}},
  {"ce_single_sample", {idx = {[2] = true}, fn = function(x, t) return F.cross_entropy(x, t) end}},
  {"ce_plain_mean", {idx = {[2] = true}, fn = function(x, t) return F.cross_entropy(x, t) end}},
  {"ce_plain_kdim_sum", {idx = {[2] = true}, fn = function(x, t) return F.cross_entropy(x, t, {reduction = "sum"}) end}},
  {"ce_plain_none", {idx = {[2] = true}, fn = function(x, t) return F.cross_entropy(x, t, {reduction = "none"}) end}},
  {"nll_ignore_weight", {idx = {[2] = true}, fn = function(x, t, w)
    return F.nll_loss(F.log_softmax(x, 2), t, {weight = w, ignore_index = 2})
  end}},
  {"mse", {fn = function(a, b) return F.mse_loss(a, b) end}},
  {"l1_sum", {fn = function(a, b) return F.l1_loss(a, b, {reduction = "sum"}) end}},
  {"smooth_l1", {fn = function(a, b) return F.smooth_l1_loss(a, b, {beta = 0.5}) end}},
  {"huber", {fn = function(a, b) return F.huber_loss(a, b, {delta = 1.5}) end}},
  {"kl_div_batchmean", {fn = function(a, b) return F.kl_div(a, b, {reduction = "batchmean"}) end}},
  {"kl_div_log_target", {fn = function(a, b) return F.kl_div(a, b, {reduction = "sum", log_target = true}) end}},
  {"bce", {fn = function(p, y, w) return F.binary_cross_entropy(p, y, {weight = w}) end}},
  {"bce_with_logits", {fn = function(x, y, w, pw)
    return F.binary_cross_entropy_with_logits(x, y, {weight = w, pos_weight = pw})
  end}},
  -- the loss modules
  {"m_cross_entropy", {idx = {[2] = true}, fn = function(x, t, w)
    return nn.CrossEntropyLoss({weight = w, ignore_index = 2, label_smoothing = 0.2})(x, t)
  end}},
  {"m_nll", {idx = {[2] = true}, fn = function(x, t, w)
    return nn.NLLLoss({weight = w, ignore_index = 2, reduction = "sum"})(F.log_softmax(x, 2), t)
  end}},
  {"m_mse_sum", {fn = function(a, b) return nn.MSELoss({reduction = "sum"})(a, b) end}},
  {"m_l1_none", {fn = function(a, b) return nn.L1Loss({reduction = "none"})(a, b) end}},
  {"m_smooth_l1", {fn = function(a, b) return nn.SmoothL1Loss({beta = 0.3})(a, b) end}},
  {"m_huber_sum", {fn = function(a, b) return nn.HuberLoss({delta = 0.7, reduction = "sum"})(a, b) end}},
  {"m_kl_div", {fn = function(a, b) return nn.KLDivLoss({reduction = "batchmean", log_target = true})(a, b) end}},
  {"m_bce", {fn = function(p, y, w) return nn.BCELoss({weight = w, reduction = "sum"})(p, y) end}},
  {"m_bce_with_logits", {fn = function(x, y, pw) return nn.BCEWithLogitsLoss({pos_weight = pw})(x, y) end}},
}

local Tiny = nn.Module:extend("Tiny")
function Tiny:__init()
  self.fc1 = nn.Linear(3, 4, {dtype = "f64"})
  self.fc2 = nn.Linear(4, 2, {dtype = "f64"})
end
function Tiny:forward(x) return self.fc2(self.fc1(x):tanh()) end

local O = st.optim
local OPTIMS = {
  {"sgd_momentum", function(p) return O.SGD(p, {lr = 0.1, momentum = 0.9, dampening = 0.1, weight_decay = 0.01}) end},
  {"sgd_nesterov", function(p) return O.SGD(p, {lr = 0.1, momentum = 0.8, nesterov = true}) end},
  {"adam", function(p) return O.Adam(p, {lr = 0.05, betas = {0.8, 0.9}, weight_decay = 0.01}) end},
  {"adamw", function(p) return O.AdamW(p, {lr = 0.05, weight_decay = 0.1}) end},
  {"adam_amsgrad", function(p) return O.Adam(p, {lr = 0.05, amsgrad = true}) end},
  {"adamw_amsgrad", function(p) return O.AdamW(p, {lr = 0.05, weight_decay = 0.05, amsgrad = true}) end},
  {"adam_param_groups", function(p)
    return O.Adam({{params = {p[1], p[2]}, lr = 0.02, weight_decay = 0.1}, {params = {p[3], p[4]}}}, {lr = 0.05})
  end},
  {"rmsprop", function(p) return O.RMSprop(p, {lr = 0.01, alpha = 0.9}) end},
  {"rmsprop_centered_momentum", function(p)
    return O.RMSprop(p, {lr = 0.01, momentum = 0.5, centered = true, weight_decay = 0.01})
  end},
  {"adagrad", function(p)
    return O.Adagrad(p, {lr = 0.1, lr_decay = 0.05, weight_decay = 0.01, initial_accumulator_value = 0.1})
  end},
}

local SCHEDS = {
  {"steplr", function(o) return O.StepLR(o, {step_size = 3, gamma = 0.5}) end},
  {"multisteplr", function(o) return O.MultiStepLR(o, {milestones = {2, 5, 6}, gamma = 0.3}) end},
  {"cosineannealinglr", function(o) return O.CosineAnnealingLR(o, {T_max = 7, eta_min = 0.01}) end},
  {"onecyclelr_cos", function(o) return O.OneCycleLR(o, {max_lr = 1.0, total_steps = 10}) end},
  {"onecyclelr_linear", function(o)
    return O.OneCycleLR(o, {max_lr = 0.5, total_steps = 12, pct_start = 0.25, anneal_strategy = "linear",
      div_factor = 10, final_div_factor = 100})
  end},
  {"lambdalr", function(o) return O.LambdaLR(o, {lr_lambda = function(e) return 0.9 ^ e + 0.05 * (e % 3) end}) end},
  {"reducelronplateau", function(o)
    return O.ReduceLROnPlateau(o, {factor = 0.5, patience = 2, threshold = 0.01, cooldown = 1, min_lr = 0.02})
  end},
  {"reducelronplateau_max_abs", function(o)
    return O.ReduceLROnPlateau(o, {mode = "max", factor = 0.3, patience = 1, threshold = 0.05, threshold_mode = "abs"})
  end},
}
-- the metrics ReduceLROnPlateau's cases step with (one per epoch; the .py file's PLATEAU_METRICS)
local PLATEAU_METRICS = {1.0, 0.9, 0.95, 0.95, 0.96, 0.94, 0.97, 0.98, 0.99, 0.99, 0.5, 0.6, 0.7, 0.7}

for _, c in ipairs(LAYERS) do layer_case(c[1], c[2]) end
for _, c in ipairs(LOSSES) do layer_case(c[1], c[2]) end

for _, c in ipairs(OPTIMS) do
  local name, make = c[1], c[2]
  case(name, function()
    local g = group(name)
    assert(g.x, "no case " .. name .. " in " .. path)
    local m = Tiny()
    m:load_state_dict(g.sd)   -- plain names: no Sequential
    local opt = make(m:parameters())
    local t = tracker()
    local losses = g.loss:tolist()
    for s = 1, #g.steps do
      opt:zero_grad()
      local loss = F.mse_loss(m(g.x), g.y)
      loss:backward()
      opt:step(loss)
      t.cmp(st.tensor({loss:item()}, "f64"), st.tensor({losses[s]}, "f64"), "loss step " .. s)
      local own = m:state_dict()
      for k, want in pairs(g.steps[s]) do t.cmp(own[k], want, k .. " step " .. s) end
    end
    H.eq(#g.steps, 4, "steps in the file")
    return t.finish(name)
  end)
end

for _, c in ipairs(SCHEDS) do
  local name, make = c[1], c[2]
  case(name, function()
    local g = group(name)
    assert(g.lr, "no case " .. name .. " in " .. path)
    local want = g.lr:tolist()
    local p = st.zeros(1, "f64"):requires_grad_()
    local opt = O.SGD({p}, {lr = 0.1})
    local s = make(opt)
    local got = {opt.param_groups[1].lr}
    for i = 2, #want do
      if name:match("^reducelronplateau") then s:step(PLATEAU_METRICS[i - 1]) else s:step() end
      got[#got + 1] = opt.param_groups[1].lr
    end
    local t = tracker()
    t.cmp(st.tensor(got, "f64"), g.lr, "lr")
    -- each lr on its own too (the max-norm error above could hide a small lr's error)
    for i = 1, #want do
      local e = math.abs(got[i] - want[i]) / math.abs(want[i])
      assert(e <= TOL, string.format("lr after %d steps: got %.17g, want %.17g", i - 1, got[i], want[i]))
    end
    return t.finish(name)
  end)
end

print(string.format("%d passed, %d failed", #results, failed))
os.exit(failed == 0 and 0 or 1)
