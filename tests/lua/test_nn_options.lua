-- test_nn_options.lua — issue 14, item 1: every layer and functional form checks its options
-- (an unknown name or an unsupported value is an error naming it), and the options that used to
-- be dropped work: Conv2d dilation, groups and padding "same"/"valid", MaxPool2d/AvgPool2d
-- ceil_mode and count_include_pad, Embedding padding_idx, cross_entropy/nll_loss ignore_index.
-- References: naive loops in Lua (conv), hand-computed windows (pools), the subset of the batch
-- that is not ignored (losses).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn, F = st.nn, st.nn.functional
local test, eq, raises = H.test, H.eq, H.raises

-- Deterministic values in [-1, 1).
local lcg, nested = H.lcg, H.nested

-- PyTorch's conv2d semantics as plain loops: stride, padding before (pt, pl) and after (the
-- output size given), dilation, groups.
local function naive_conv2d(x, w, b, g)
  local N, C, Hh, W = #x, #x[1], #x[1][1], #x[1][1][1]
  local O, Cg, KH, KW = #w, #w[1], #w[1][1], #w[1][1][1]
  local Og = O // g.groups
  local y = {}
  for n = 1, N do
    y[n] = {}
    for o = 1, O do
      local grp = (o - 1) // Og
      y[n][o] = {}
      for i = 1, g.ho do
        y[n][o][i] = {}
        for j = 1, g.wo do
          local s = b and b[o] or 0
          for c = 1, Cg do
            local cin = grp * Cg + c
            for p = 1, KH do
              for q = 1, KW do
                local r = (i - 1) * g.sh + (p - 1) * g.dh - g.pt + 1
                local cc = (j - 1) * g.sw + (q - 1) * g.dw - g.pl + 1
                if r >= 1 and r <= Hh and cc >= 1 and cc <= W then
                  s = s + x[n][cin][r][cc] * w[o][c][p][q]
                end
              end
            end
          end
          y[n][o][i][j] = s
        end
      end
    end
  end
  return y
end

test("unknown options are errors naming them, for every layer and functional form", function()
  local x4 = st.randn(1, 2, 4, 4)
  local logits, tgt = st.randn(3, 4), st.tensor({1, 2, 3}, "i64")
  local cases = {
    {function() return nn.Linear(2, 2, {biass = false}) end, "Linear: unknown option 'biass' (known: bias, dtype)"},
    {function() return nn.Embedding(5, 2, {padding = 1}) end, "Embedding: unknown option 'padding'"},
    {function() return nn.LayerNorm(4, {epsilon = 1e-3}) end, "LayerNorm: unknown option 'epsilon'"},
    {function() return nn.RMSNorm(4, {bias = false}) end, "RMSNorm: unknown option 'bias'"},
    {function() return nn.GELU({approx = "tanh"}) end, "GELU: unknown option 'approx'"},
    {function() return nn.Conv2d(2, 2, 3, {dilations = 2}) end, "Conv2d: unknown option 'dilations'"},
    {function() return nn.MaxPool2d(2, {count_include_pad = false}) end, "MaxPool2d: unknown option 'count_include_pad'"},
    {function() return nn.AvgPool2d(2, {ceil = true}) end, "AvgPool2d: unknown option 'ceil'"},
    {function() return nn.CrossEntropyLoss({ignore = 1}) end, "CrossEntropyLoss: unknown option 'ignore'"},
    {function() return nn.MSELoss({reductio = "sum"}) end, "MSELoss: unknown option 'reductio'"},
    {function() return F.gelu(x4, {approx = "tanh"}) end, "gelu: unknown option 'approx'"},
    {function() return F.conv2d(x4, st.randn(2, 2, 3, 3), nil, {pad = 1}) end, "conv2d: unknown option 'pad'"},
    {function() return F.max_pool2d(x4, 2, {ceilmode = true}) end, "max_pool2d: unknown option 'ceilmode'"},
    {function() return F.avg_pool2d(x4, 2, {count_include_padding = false}) end, "avg_pool2d: unknown option 'count_include_padding'"},
    {function() return F.cross_entropy(logits, tgt, {smoothing = 0.1}) end, "cross_entropy: unknown option 'smoothing'"},
    {function() return F.nll_loss(logits, tgt, {weights = st.ones(4)}) end, "nll_loss: unknown option 'weights'"},
    {function() return F.mse_loss(logits, logits, {mean = true}) end, "mse_loss: unknown option 'mean'"},
    {function() return F.l1_loss(logits, logits, {mean = true}) end, "l1_loss: unknown option 'mean'"},
    {function() return F.binary_cross_entropy(logits:sigmoid(), logits:sigmoid(), {pos_weight = 2}) end,
      "binary_cross_entropy: unknown option 'pos_weight'"},
    {function() return F.binary_cross_entropy_with_logits(logits, logits, {weigth = 2}) end,
      "binary_cross_entropy_with_logits: unknown option 'weigth'"},
    {function() return F.embedding({1, 2}, st.randn(3, 2), {max_norm = 1}) end, "embedding: unknown option 'max_norm'"},
    {function() return F.conv2d(x4, st.randn(2, 2, 3, 3), nil, 1) end, "conv2d: options must be a table, got number"},
    {function() return nn.Conv1d(2, 2, 3, {dilations = 2}) end, "Conv1d: unknown option 'dilations'"},
    {function() return F.conv1d(st.randn(1, 2, 5), st.randn(2, 2, 3), nil, {pad = 1}) end, "conv1d: unknown option 'pad'"},
    {function() return nn.ConvTranspose2d(2, 2, 3, {out_padding = 1}) end, "ConvTranspose2d: unknown option 'out_padding'"},
    {function() return F.conv_transpose2d(x4, st.randn(2, 2, 3, 3), nil, {output_pad = 1}) end,
      "conv_transpose2d: unknown option 'output_pad'"},
    {function() return F.interpolate(x4, {scale = 2}) end,
      "interpolate: unknown option 'scale' (known: align_corners, mode, scale_factor, size)"},
    {function() return nn.Upsample({scale = 2}) end, "Upsample: unknown option 'scale'"},
  }
  for i, c in ipairs(cases) do
    local err = raises(c[1], c[2])
    if i == 1 then print("  e.g. " .. err) end
  end
end)

test("unsupported values are errors naming them", function()
  local x4 = st.randn(1, 4, 5, 5)
  raises(function() return nn.Conv2d(3, 4, 3, {groups = 2}) end,
    "Conv2d: groups must be an integer >= 1 dividing in_channels (3) and out_channels (4), got 2")
  raises(function() return F.conv2d(x4, st.randn(4, 3, 3, 3), nil, {groups = 2}) end,
    "conv2d: input (1, 4, 5, 5) has 4 channels but weight (4, 3, 3, 3) expects 6 (3 per group, groups=2)")
  -- an unbatched input is named as the user gave it
  raises(function() return F.conv2d(st.randn(2, 3, 5), st.randn(4, 3, 3, 3)) end,
    "conv2d: input (2, 3, 5) has 2 channels but weight (4, 3, 3, 3) expects 3")
  raises(function() return F.conv2d(x4, st.randn(4, 4, 3, 3), nil, {padding = "same", stride = 2}) end,
    "conv2d: padding \"same\" needs stride 1, got stride 2")
  raises(function() return F.conv2d(x4, st.randn(4, 4, 3, 3), nil, {padding = "full"}) end,
    "conv2d: padding must be a number, a pair, \"same\" or \"valid\", got \"full\"")
  raises(function() return F.conv2d(x4, st.randn(4, 4, 3, 3), nil, {dilation = 0}) end,
    "conv2d: dilation must be an integer >= 1, got 0")
  raises(function() return F.conv2d(x4, st.randn(4, 4, 3, 3), nil, {dilation = 3}) end,
    "conv2d: kernel 3 (dilation 3) with padding 0 does not fit an input of shape (1, 4, 5, 5)")
  raises(function() return F.max_pool2d(x4, 2, {ceil_mode = 1}) end, "max_pool2d: ceil_mode must be a boolean, got 1")
  raises(function() return F.avg_pool2d(x4, 2, {count_include_pad = "no"}) end,
    "avg_pool2d: count_include_pad must be a boolean, got no")
  raises(function() return nn.Embedding(5, 2, {padding_idx = 6}) end,
    "Embedding: padding_idx must be an integer in 1..5 (or -5..-1), got 6")
  raises(function() return F.cross_entropy(st.randn(2, 3), st.tensor({1, 2}, "i64"), {ignore_index = 1.5}) end,
    "cross_entropy: ignore_index must be an integer class id, got 1.5")
  raises(function() return nn.Linear(2.5, 2) end, "Linear: in_features must be an integer >= 0, got 2.5")
  raises(function() return nn.Dropout("0.5") end, "Dropout: p must be in [0, 1], got 0.5")
end)

test("conv1d, conv_transpose2d, interpolate: unsupported values and shapes are errors naming them", function()
  local x3, x4 = st.randn(2, 4, 9), st.randn(1, 4, 5, 5)
  -- conv1d
  raises(function() return F.conv1d(x3, st.randn(6, 4, 3, 3)) end,
    "conv1d: expected input (N, C, L) and weight (O, C / groups, k), got (2, 4, 9) and (6, 4, 3, 3)")
  raises(function() return F.conv1d(x3, st.randn(6, 3, 3), nil, {groups = 2}) end,
    "conv1d: input (2, 4, 9) has 4 channels but weight (6, 3, 3) expects 6 (3 per group, groups=2)")
  raises(function() return F.conv1d(x3, st.randn(6, 4, 3), nil, {padding = "same", stride = 2}) end,
    "conv1d: padding \"same\" needs stride 1, got stride 2")
  raises(function() return F.conv1d(x3, st.randn(6, 4, 3), nil, {padding = "full"}) end,
    "conv1d: padding must be a number, \"same\" or \"valid\", got \"full\"")
  raises(function() return F.conv1d(x3, st.randn(6, 4, 3), nil, {stride = {1, 2}}) end,
    "conv1d: stride must be a number or a table of 1 number")
  raises(function() return F.conv1d(x3, st.randn(6, 4, 5), nil, {dilation = 3}) end,
    "conv1d: kernel 5 (dilation 3) with padding 0 does not fit an input of shape (2, 4, 9)")
  raises(function() return nn.Conv1d(4, 6, 3, {groups = 4}) end,
    "Conv1d: groups must be an integer >= 1 dividing in_channels (4) and out_channels (6), got 4")
  raises(function() return nn.Conv1d(4, 6, {3, 3}) end, "Conv1d: kernel_size must be an integer >= 1")
  -- conv_transpose2d: output_padding below the stride or the dilation (PyTorch's rule)
  raises(function() return F.conv_transpose2d(x4, st.randn(4, 2, 3, 3), nil, {stride = 2, output_padding = 2}) end,
    "conv_transpose2d: output_padding (2, 2) must be smaller than either the stride (2, 2) or the dilation (1, 1)")
  raises(function() return F.conv_transpose2d(x4, st.randn(4, 2, 3, 3), nil, {output_padding = {0, 1}}) end,
    "conv_transpose2d: output_padding (0, 1) must be smaller than either the stride (1, 1) or the dilation (1, 1)")
  raises(function() return nn.ConvTranspose2d(4, 2, 3, {stride = {2, 1}, output_padding = 1}) end,
    "ConvTranspose2d: output_padding (1, 1) must be smaller than either the stride (2, 1) or the dilation (1, 1)")
  eq(table.concat(F.conv_transpose2d(x4, st.randn(4, 2, 3, 3), nil, {dilation = 2, output_padding = 1}):shape(), "x"),
    "1x2x10x10", "output_padding below the dilation")
  raises(function() return F.conv_transpose2d(x4, st.randn(4, 2, 3, 3), nil, {padding = "same"}) end,
    "conv_transpose2d: padding must be a number or a pair, got \"same\"")
  raises(function() return F.conv_transpose2d(x4, st.randn(3, 2, 3, 3)) end,
    "conv_transpose2d: input (1, 4, 5, 5) has 4 channels but weight (3, 2, 3, 3) expects 3 (its first dim)")
  raises(function() return F.conv_transpose2d(x4, st.randn(4, 2, 3, 3), nil, {groups = 3}) end,
    "conv_transpose2d: groups=3 must divide the input's 4 channels (input (1, 4, 5, 5), weight (4, 2, 3, 3))")
  raises(function() return F.conv_transpose2d(x4, st.randn(4, 2, 3)) end,
    "conv_transpose2d: expected input (N, C_in, H, W) and weight (C_in, C_out / groups, kh, kw), got (1, 4, 5, 5) and (4, 2, 3)")
  raises(function() return F.conv_transpose2d(st.randn(1, 4, 1, 1), st.randn(4, 2, 1, 1), nil, {padding = 1}) end,
    "conv_transpose2d: padding (1, 1) leaves an empty output (-1 x -1) for input (1, 4, 1, 1) and weight (4, 2, 1, 1)")
  -- interpolate / Upsample
  raises(function() return F.interpolate(x4, {scale_factor = 2, mode = "trilinear"}) end,
    "interpolate: mode must be \"nearest\", \"linear\", \"bilinear\", \"bicubic\" or \"area\", got \"trilinear\"")
  raises(function() return nn.Upsample({size = 4, mode = "cubic"}) end,
    "Upsample: mode must be \"nearest\", \"linear\", \"bilinear\", \"bicubic\" or \"area\", got \"cubic\"")
  raises(function() return F.interpolate(x3, {scale_factor = 2, mode = "bicubic"}) end,
    "interpolate: mode \"bicubic\" needs a 4-D input, got (2, 4, 9)")
  raises(function() return F.interpolate(x4, {size = 2, mode = "area", align_corners = false}) end,
    "interpolate: align_corners can only be set with mode \"linear\", \"bilinear\" or \"bicubic\" (mode is \"area\")")
  raises(function() return F.interpolate(x4, {size = 4, scale_factor = 2}) end,
    "interpolate: give either size or scale_factor, not both")
  raises(function() return nn.Upsample({size = 4, scale_factor = 2}) end, "Upsample: give either size or scale_factor, not both")
  raises(function() return F.interpolate(x4, {mode = "bilinear"}) end, "interpolate: size or scale_factor is required")
  raises(function() return F.interpolate(x4, {scale_factor = 2, align_corners = true}) end,
    "interpolate: align_corners can only be set with mode \"linear\", \"bilinear\" or \"bicubic\" (mode is \"nearest\")")
  raises(function() return F.interpolate(x4, {scale_factor = 2, mode = "bilinear", align_corners = 1}) end,
    "interpolate: align_corners must be a boolean, got 1")
  raises(function() return F.interpolate(x3, {scale_factor = 2, mode = "bilinear"}) end,
    "interpolate: mode \"bilinear\" needs a 4-D input, got (2, 4, 9)")
  raises(function() return F.interpolate(x4, {scale_factor = 2, mode = "linear"}) end,
    "interpolate: mode \"linear\" needs a 3-D input, got (1, 4, 5, 5)")
  raises(function() return F.interpolate(x4, {size = {3, 4, 5}}) end,
    "interpolate: size has 3 entries for input (1, 4, 5, 5) with 2 spatial dims")
  raises(function() return F.interpolate(x4, {size = 2.5}) end, "interpolate: size must be an integer >= 1 or a table of them, got 2.5")
  raises(function() return F.interpolate(x4, {scale_factor = -1}) end,
    "interpolate: scale_factor must be a number > 0 or a table of them, got -1")
  raises(function() return F.interpolate(x4, {scale_factor = 0.1}) end,
    "interpolate: scale_factor 0.1 leaves an empty output for input (1, 4, 5, 5)")
  raises(function() return F.interpolate(st.randn(4, 5), {size = 3}) end,
    "interpolate: expected input (N, C, L) or (N, C, H, W), got (4, 5)")
  eq(tostring(nn.Upsample({size = {5, 7}, mode = "bilinear", align_corners = true})),
    "Upsample(size=(5, 7), mode=bilinear, align_corners=true)", "Upsample repr")
end)

test("conv1d is conv2d on a height-1 view; conv_transpose2d is conv2d's adjoint (values and gradients)", function()
  local gen = lcg(23)
  local x = st.tensor(nested({2, 4, 11}, gen), "f64")
  local w = st.tensor(nested({6, 2, 3}, gen), "f64")
  local b = st.tensor(nested({6}, gen), "f64")
  local y1 = F.conv1d(x, w, b, {stride = 2, padding = 2, dilation = 2, groups = 2})
  local y2 = F.conv2d(x:unsqueeze(3), w:unsqueeze(3), b, {stride = {1, 2}, padding = {0, 2}, dilation = {1, 2}, groups = 2})
  H.check_near(y1, y2:squeeze(3), 0, "conv1d")
  H.check_near(F.conv1d(x[1], w, nil, {groups = 2}), F.conv1d(x, w, nil, {groups = 2})[1], 0, "unbatched conv1d")
  -- <conv_transpose2d(u, W), v> = <u, conv2d(v, W)> for every geometry, and the gradients: d/du of
  -- <conv_transpose2d(u, W), v> is conv2d(v, W), d/dW is the gradient of <u, conv2d(v, W)> in W
  local cases = {
    {C = 4, O = 6, H = 4, W = 5, k = {3, 3}, stride = {2, 2}, pad = {1, 1}, op = {1, 1}, dil = {1, 1}, groups = 2},
    {C = 2, O = 3, H = 3, W = 4, k = {2, 3}, stride = {3, 1}, pad = {0, 2}, op = {2, 0}, dil = {1, 2}, groups = 1},
    {C = 3, O = 3, H = 5, W = 3, k = {3, 2}, stride = {1, 2}, pad = {3, 1}, op = {1, 1}, dil = {2, 1}, groups = 3},
    -- a padding wider than the dilated kernel: the result cropped
    {C = 2, O = 2, H = 4, W = 5, k = {2, 1}, stride = {3, 2}, pad = {2, 1}, op = {1, 0}, dil = {1, 1}, groups = 1},
  }
  for ci, c in ipairs(cases) do
    local u = st.tensor(nested({2, c.C, c.H, c.W}, gen), "f64"):requires_grad_()
    local W = st.tensor(nested({c.C, c.O // c.groups, c.k[1], c.k[2]}, gen), "f64"):requires_grad_()
    local y = F.conv_transpose2d(u, W, nil, {stride = c.stride, padding = c.pad, output_padding = c.op,
      dilation = c.dil, groups = c.groups})
    local ho = (c.H - 1) * c.stride[1] - 2 * c.pad[1] + c.dil[1] * (c.k[1] - 1) + c.op[1] + 1
    local wo = (c.W - 1) * c.stride[2] - 2 * c.pad[2] + c.dil[2] * (c.k[2] - 1) + c.op[2] + 1
    eq(table.concat(y:shape(), "x"), table.concat({2, c.O, ho, wo}, "x"), "shape, case " .. ci)
    local v = st.tensor(nested({2, c.O, ho, wo}, gen), "f64"):requires_grad_()
    local cv = F.conv2d(v, W:detach(), nil, {stride = c.stride, padding = c.pad, dilation = c.dil, groups = c.groups})
    -- conv2d's output may be longer by the output_padding rows no input row reaches: cut them
    cv = cv:narrow(3, 1, c.H):narrow(4, 1, c.W)
    local lhs = (y * v:detach()):sum()
    H.check_near(lhs:item(), (u:detach() * cv):sum():item(), 1e-10, "adjoint, case " .. ci)
    lhs:backward()
    H.check_near(u.grad, cv, 1e-12, "input gradient, case " .. ci)
    local Wr = W:detach():clone():requires_grad_()
    local cv2 = F.conv2d(v:detach(), Wr, nil, {stride = c.stride, padding = c.pad, dilation = c.dil, groups = c.groups})
    local r = (u:detach() * cv2:narrow(3, 1, c.H):narrow(4, 1, c.W)):sum()
    r:backward()
    H.check_near(W.grad, Wr.grad, 1e-12, "weight gradient, case " .. ci)
  end
end)

test("interpolate nearest and bilinear: hand-computed values", function()
  local g = st.arange(1, 5):reshape(1, 1, 2, 2):double()
  H.check_near(F.interpolate(g, {scale_factor = 2}):reshape(4, 4),
    {{1, 1, 2, 2}, {1, 1, 2, 2}, {3, 3, 4, 4}, {3, 3, 4, 4}}, 0, "nearest x2")
  -- 5 -> 7: src = floor(dst * 5/7) = 0 0 1 2 2 3 4
  local r = st.arange(1, 6):reshape(1, 1, 1, 5):double()
  H.check_near(F.interpolate(r, {size = {1, 7}}):reshape(7), {1, 1, 2, 3, 3, 4, 5}, 0, "nearest 5 -> 7")
  -- bilinear 2 -> 4, align_corners false: src = max((dst + 0.5) / 2 - 0.5, 0) = 0, 0.25, 0.75, 1.25 (clamped index)
  local l = st.tensor({{{0, 4}}}, "f64")
  H.check_near(F.interpolate(l, {size = 4, mode = "linear"}):reshape(4), {0, 1, 3, 4}, 1e-12, "linear, corners false")
  H.check_near(F.interpolate(l, {size = 4, mode = "linear", align_corners = true}):reshape(4), {0, 4 / 3, 8 / 3, 4},
    1e-12, "linear, corners true")
  local b = F.interpolate(g, {size = {3, 3}, mode = "bilinear", align_corners = true})
  H.check_near(b:reshape(3, 3), {{1, 1.5, 2}, {2, 2.5, 3}, {3, 3.5, 4}}, 1e-12, "bilinear, corners true")
  -- the gradient of nearest x2 sums each 2x2 block
  local xg = g:clone():requires_grad_()
  local y = F.interpolate(xg, {scale_factor = 2})
  local loss = (y * st.arange(1, 17):reshape(1, 1, 4, 4):double()):sum()
  loss:backward()
  H.check_near(xg.grad:reshape(2, 2), {{1 + 2 + 5 + 6, 3 + 4 + 7 + 8}, {9 + 10 + 13 + 14, 11 + 12 + 15 + 16}}, 0,
    "nearest gradient")
  eq(table.concat(nn.Upsample({scale_factor = 2})(g):shape(), "x"), "1x1x4x4", "Upsample")
end)

test("conv2d dilation, groups, padding same/valid against naive loops (values and gradients)", function()
  local gen = lcg(11)
  local cases = {
    {C = 2, O = 3, H = 7, W = 6, k = {3, 3}, stride = {1, 1}, dil = {2, 2}, groups = 1, pad = {1, 1}},
    {C = 4, O = 6, H = 6, W = 6, k = {3, 2}, stride = {1, 2}, dil = {1, 1}, groups = 2, pad = {1, 0}},
    {C = 3, O = 3, H = 5, W = 5, k = {3, 3}, stride = {1, 1}, dil = {1, 1}, groups = 3, pad = {0, 0}}, -- depthwise
    {C = 2, O = 4, H = 6, W = 5, k = {4, 3}, stride = {1, 1}, dil = {1, 2}, groups = 2, pad = "same"},
    {C = 2, O = 2, H = 5, W = 5, k = {3, 3}, stride = {2, 1}, dil = {1, 1}, groups = 1, pad = "valid"},
  }
  for ci, c in ipairs(cases) do
    local N = 2
    local xt = nested({N, c.C, c.H, c.W}, gen)
    local wt = nested({c.O, c.C // c.groups, c.k[1], c.k[2]}, gen)
    local bt = nested({c.O}, gen)
    local g = {sh = c.stride[1], sw = c.stride[2], dh = c.dil[1], dw = c.dil[2], groups = c.groups}
    if c.pad == "same" then
      local th, tw = c.dil[1] * (c.k[1] - 1), c.dil[2] * (c.k[2] - 1)
      g.pt, g.pl, g.ho, g.wo = th // 2, tw // 2, c.H, c.W
    else
      local p = c.pad == "valid" and {0, 0} or c.pad
      g.pt, g.pl = p[1], p[2]
      g.ho = (c.H + 2 * p[1] - c.dil[1] * (c.k[1] - 1) - 1) // c.stride[1] + 1
      g.wo = (c.W + 2 * p[2] - c.dil[2] * (c.k[2] - 1) - 1) // c.stride[2] + 1
    end
    local want = naive_conv2d(xt, wt, bt, g)
    local x = st.tensor(xt, "f64"):requires_grad_()
    local w = st.tensor(wt, "f64"):requires_grad_()
    local b = st.tensor(bt, "f64"):requires_grad_()
    local y = F.conv2d(x, w, b, {stride = c.stride, padding = c.pad, dilation = c.dil, groups = c.groups})
    H.check_near(y, want, 1e-12, "conv2d case " .. ci)
    -- gradients: d(sum(y * r))/dx against the same loops on perturbed inputs would be slow; the
    -- adjoint identity <conv(x), r> = <x, dL/dx> for this linear map checks dx exactly, and
    -- <conv(x; w), r> = <w, dL/dw> (bias 0 part) checks dw.
    local r = st.tensor(nested({N, c.O, g.ho, g.wo}, gen), "f64")
    local loss = (y * r):sum()
    loss:backward()
    local y0 = F.conv2d(x:detach(), w:detach(), nil, {stride = c.stride, padding = c.pad, dilation = c.dil,
      groups = c.groups})
    local lin = (y0 * r):sum():item()
    H.check_near((x.grad * x:detach()):sum():item(), lin, 1e-10, "dx adjoint, case " .. ci)
    H.check_near((w.grad * w:detach()):sum():item(), lin, 1e-10, "dw adjoint, case " .. ci)
    H.check_near(b.grad, r:sum({1, 3, 4}), 1e-12, "db, case " .. ci)
  end
end)

test("Conv2d module: dilation, groups and padding reach the forward", function()
  local m = nn.Conv2d(4, 6, 3, {groups = 2, dilation = 2, padding = "same"})
  eq(table.concat(m.weight:shape(), "x"), "6x2x3x3", "weight shape")
  local y = m(st.randn(2, 4, 9, 8))
  eq(table.concat(y:shape(), "x"), "2x6x9x8", "output shape")
  eq(tostring(m), "Conv2d(4, 6, kernel_size=(3, 3), stride=(1, 1), padding=same, dilation=(2, 2), groups=2)", "repr")
end)

local function grid(n, m)   -- (1, 1, n, m) holding 1..n*m row by row
  return st.arange(1, n * m + 1):reshape(1, 1, n, m):float()
end

test("max_pool2d ceil_mode: the partial last windows", function()
  local y = F.max_pool2d(grid(5, 5), 2, {ceil_mode = true})
  H.check_near(y:reshape(3, 3), {{7, 9, 10}, {17, 19, 20}, {22, 24, 25}}, 0, "5x5, k 2, ceil")
  H.check_near(F.max_pool2d(grid(5, 5), 2):reshape(2, 2), {{7, 9}, {17, 19}}, 0, "5x5, k 2, floor")
  -- padding 1, k 3, stride 2 on 6x6: floor gives 3, ceil 4 (its last window starts at row 5, inside)
  local yc = F.max_pool2d(grid(6, 6), 3, {stride = 2, padding = 1, ceil_mode = true})
  eq(table.concat(yc:shape(), "x"), "1x1x4x4", "ceil shape")
  -- its last row of windows holds input row 6 only (31..36), columns {1, 2}, {2..4}, {4..6}, {6}
  H.check_near(yc[{1, 1, 4}], {32, 34, 36, 36}, 0, "last row of windows")
  -- the module passes it on
  eq(table.concat(nn.MaxPool2d(2, {ceil_mode = true})(grid(5, 5)):shape(), "x"), "1x1x3x3", "module")
end)

test("avg_pool2d count_include_pad and ceil_mode divide as PyTorch", function()
  local x = grid(4, 4)
  local excl = F.avg_pool2d(x, 3, {stride = 2, padding = 1, count_include_pad = false})
  H.check_near(excl:reshape(2, 2), {{14 / 4, 30 / 6}, {57 / 6, 99 / 9}}, 1e-6, "count_include_pad = false")
  local incl = F.avg_pool2d(x, 3, {stride = 2, padding = 1})
  H.check_near(incl:reshape(2, 2), {{14 / 9, 30 / 9}, {57 / 9, 99 / 9}}, 1e-6, "count_include_pad = true")
  local ceil = F.avg_pool2d(grid(5, 5), 2, {ceil_mode = true})
  H.check_near(ceil:reshape(3, 3), {{4, 6, 7.5}, {14, 16, 17.5}, {21.5, 23.5, 25}}, 1e-6, "ceil_mode")
  -- the gradient of the mean pool: each input gets the sum of 1/count over the windows holding it
  local xg = grid(5, 5):requires_grad_()
  F.avg_pool2d(xg, 2, {ceil_mode = true}):sum():backward()
  H.check_near(xg.grad[{1, 1, 5}], {0.5, 0.5, 0.5, 0.5, 1}, 1e-6, "grad of the last row")
  local m = nn.AvgPool2d(3, {stride = 2, padding = 1, count_include_pad = false})
  H.check_near(m(x):reshape(2, 2), excl:reshape(2, 2), 0, "module")
end)

test("Embedding padding_idx: zero row, no gradient through it, values unchanged", function()
  local e = nn.Embedding(5, 3, {padding_idx = 2})
  H.check_near(e.weight[2], {0, 0, 0}, 0, "padding row at init")
  do -- a user may set it: lookups still return it
    local guard <close> = st.no_grad()
    e.weight[2] = st.tensor({7, 8, 9})
  end
  local idx = st.tensor({{1, 2}, {2, 4}}, "i64")
  local y = e(idx)
  H.check_near(y[{1, 2}], {7, 8, 9}, 0, "lookup of the padding row")
  local loss = (y * st.arange(1, 13):reshape(2, 2, 3):float()):sum()
  loss:backward()
  local g = e.weight.grad
  H.check_near(g[2], {0, 0, 0}, 0, "no gradient for the padding row")
  H.check_near(g[1], {1, 2, 3}, 0, "row 1's gradient")
  H.check_near(g[4], {10, 11, 12}, 0, "row 4's gradient")
  eq(tostring(nn.Embedding(5, 3, {padding_idx = -1})), "Embedding(5, 3, padding_idx=5)", "negative counts from the end")
end)

test("cross_entropy / nll_loss ignore_index: as the batch without the ignored targets", function()
  local gen = lcg(5)
  local logits = st.tensor(nested({6, 4}, gen), "f64")
  local tgt = st.tensor({1, 0, 3, 0, 4, 2}, "i64")        -- 0: ignored (out of 1..4 otherwise)
  local keep = st.tensor({1, 3, 5, 6}, "i64")
  local sub, subt = logits:index_select(1, keep), tgt:index_select(1, keep)
  local w = st.tensor({0.5, 1, 2, 1.5}, "f64")
  for _, o in ipairs({{}, {weight = w}, {label_smoothing = 0.2}, {weight = w, label_smoothing = 0.1}}) do
    for _, red in ipairs({"mean", "sum"}) do
      local oi = {ignore_index = 0, reduction = red, weight = o.weight, label_smoothing = o.label_smoothing}
      local os_ = {reduction = red, weight = o.weight, label_smoothing = o.label_smoothing}
      local what = red .. (o.weight and " weight" or "") .. (o.label_smoothing and " smoothing" or "")
      H.check_near(F.cross_entropy(logits, tgt, oi), F.cross_entropy(sub, subt, os_), 1e-12, "cross_entropy " .. what)
    end
  end
  local none = F.cross_entropy(logits, tgt, {ignore_index = 0, reduction = "none"})
  H.check_near(none[2], 0, 0, "an ignored target's loss")
  H.check_near(F.nll_loss(logits:log_softmax(2), tgt, {ignore_index = 0}), F.nll_loss(sub:log_softmax(2), subt),
    1e-12, "nll_loss")
  -- no gradient reaches an ignored row
  local lg = logits:clone():requires_grad_()
  F.cross_entropy(lg, tgt, {ignore_index = 0, label_smoothing = 0.1}):backward()
  H.check_near(lg.grad[2], {0, 0, 0, 0}, 0, "gradient of an ignored row")
  local ce = nn.CrossEntropyLoss({ignore_index = 0})
  H.check_near(ce(logits, tgt), F.cross_entropy(sub, subt), 1e-12, "module")
end)

test("extra arguments, malformed pairs and empty kernels are errors, checked when the layer is made", function()
  -- a Lua function drops extra arguments: layers and functional forms refuse them instead
  raises(function() return nn.ReLU({inplace = true}) end, "ReLU: takes no arguments, got 1 (unexpected: a table)")
  raises(function() return nn.Dropout(0.1, {inplace = true}) end,
    "Dropout: takes at most 1 argument, got 2 (unexpected: a table)")
  raises(function() return nn.Softmax(2, 3) end, "Softmax: takes at most 1 argument, got 2 (unexpected: 3)")
  raises(function() return nn.Flatten(2, 3, 4) end, "Flatten: takes at most 2 arguments, got 3 (unexpected: 4)")
  raises(function() return nn.Linear(2, 2, {bias = false}, "f64") end,
    "Linear: takes at most 3 arguments, got 4 (unexpected: f64)")
  raises(function() return F.dropout(st.randn(3), 0.1, true, 5) end,
    "dropout: takes at most 3 arguments, got 4 (unexpected: 5)")
  raises(function() return F.leaky_relu(st.randn(3), 0.1, true) end,
    "leaky_relu: takes at most 2 arguments, got 3 (unexpected: true)")
  raises(function() return F.relu(st.randn(3), st.randn(3)) end, "relu: takes at most 1 argument, got 2 (unexpected: a tensor)")
  -- trailing nils (a forwarded optional argument) pass nothing
  eq(F.leaky_relu(st.tensor({-1}), 0.5, nil):tolist()[1], -0.5, "trailing nil")
  eq(#nn.Softmax(2, nil)(st.randn(2, 3)):shape(), 2, "trailing nil to a layer")
  -- wrong types fail when the layer is made, not at its first forward
  raises(function() return nn.Softmax({dim = 1}) end, "Softmax: dim must be an integer, got a table")
  raises(function() return nn.Flatten({start_dim = 2}) end, "Flatten: start_dim must be an integer, got a table")
  raises(function() return F.dropout(st.randn(3), {p = 0.5}) end, "dropout: p must be a number in [0, 1], got a table")
  -- pairs: a number or exactly two integers; a third entry is not dropped
  raises(function() return nn.Conv2d(4, 4, {3, 3, 3}) end,
    "Conv2d: kernel_size must be an integer >= 1 or a pair of them, got a table of 3 entries")
  raises(function() return nn.Conv2d(4, 4, 3, {stride = {1, 2, 3}}) end,
    "Conv2d: stride must be an integer >= 1 or a pair of them, got a table of 3 entries")
  raises(function() return nn.Conv2d(4, 4, 0) end, "Conv2d: kernel_size must be an integer >= 1 or a pair of them, got 0")
  raises(function() return nn.Conv2d(4, 4, 3, {stride = 1.5}) end,
    "Conv2d: stride must be an integer >= 1 or a pair of them, got 1.5")
  raises(function() return nn.Conv2d(4, 4, 3, {dilation = {1, 0}}) end,
    "Conv2d: dilation must be an integer >= 1 or a pair of them, got {1, 0}")
  raises(function() return nn.Conv2d(4, 4, 3, {padding = -1}) end,
    "Conv2d: padding must be an integer >= 0 or a pair of them, got -1")
  raises(function() return nn.Conv2d(4, 4, 3, {padding = "reflect"}) end,
    "Conv2d: padding must be a number, a pair, \"same\" or \"valid\", got \"reflect\"")
  raises(function() return nn.Conv2d(4, 4, 3, {padding = "same", stride = 2}) end,
    "Conv2d: padding \"same\" needs stride 1, got stride (2, 2)")
  raises(function() return nn.Conv1d(4, 4, 3, {padding = "same", stride = 2}) end,
    "Conv1d: padding \"same\" needs stride 1, got stride 2")
  raises(function() return nn.ConvTranspose2d(4, 4, {3, 3, 3}) end,
    "ConvTranspose2d: kernel_size must be an integer >= 1 or a pair of them, got a table of 3 entries")
  -- an empty kernel given as a weight
  raises(function() return F.conv2d(st.randn(1, 4, 6, 6), st.randn(4, 4, 0, 0)) end,
    "conv2d: weight (4, 4, 0, 0) has an empty kernel")
  raises(function() return F.conv1d(st.randn(1, 4, 6), st.randn(4, 4, 0)) end, "conv1d: weight (4, 4, 0) has an empty kernel")
  raises(function() return F.conv_transpose2d(st.randn(1, 4, 6, 6), st.randn(4, 4, 0, 3)) end,
    "conv_transpose2d: weight (4, 4, 0, 3) has an empty kernel")
  -- the 1-D pools: their own names and the user's shapes in errors
  local x3 = st.randn(2, 3, 10)
  raises(function() return F.max_pool1d(x3, {2, 2}) end,
    "max_pool1d: kernel_size must be an integer >= 1 or a table of one, got a table")
  raises(function() return F.max_pool1d(st.randn(2, 3, 4, 5), 2) end,
    "max_pool1d: expected input (N, C, L) or (C, L), got (2, 3, 4, 5)")
  raises(function() return F.avg_pool1d(x3, 20) end, "avg_pool1d: kernel 20 with padding 0 does not fit an input of shape (2, 3, 10)")
  raises(function() return F.avg_pool1d(x3, 2, {count_include_pad = 1}) end,
    "avg_pool1d: count_include_pad must be a boolean, got 1")
  raises(function() return nn.MaxPool1d(2, {dilation = 2}) end, "MaxPool1d: unknown option 'dilation'")
  raises(function() return F.adaptive_avg_pool1d(x3, 0) end,
    "adaptive_avg_pool1d: output_size must be an integer >= 1 or a table of one, got 0")
  raises(function() return nn.MaxPool1d({2, 2}) end, "MaxPool1d: kernel_size must be an integer >= 1, got a table of 2 entries")
  raises(function() return nn.Conv1d(2, 2, {3, 3}) end, "Conv1d: kernel_size must be an integer >= 1, got a table of 2 entries")
  -- the pool modules check their values when made
  raises(function() return nn.MaxPool2d(0) end, "MaxPool2d: kernel_size must be an integer >= 1 or a pair of them, got 0")
  raises(function() return nn.AvgPool2d(2, {stride = {1, 2, 3}}) end,
    "AvgPool2d: stride must be an integer >= 1 or a pair of them, got a table of 3 entries")
  raises(function() return nn.MaxPool2d(2, {ceil_mode = 1}) end, "MaxPool2d: ceil_mode must be a boolean, got 1")
  raises(function() return nn.AvgPool1d(3, {count_include_pad = "no"}) end, "AvgPool1d: count_include_pad must be a boolean, got no")
  eq(table.concat(nn.MaxPool1d(3, {stride = 2, padding = 1, ceil_mode = true})(x3):shape(), " "), "2 3 6", "MaxPool1d")
  eq(table.concat(nn.AdaptiveAvgPool1d({4})(x3[1]):shape(), " "), "3 4", "AdaptiveAvgPool1d unbatched")
  H.check_near(F.pad(x3, {1, 2}, "reflect"), x3:pad({1, 2}, "reflect"), 0, "F.pad")
  -- the well-formed forms still build what they say
  local c = nn.Conv2d(4, 6, {3, 5}, {stride = {1, 2}, padding = {1, 2}, dilation = 1})
  eq(table.concat(c.weight:shape(), " "), "6 4 3 5", "kernel pair")
  eq(table.concat(c(st.randn(1, 4, 8, 8)):shape(), " "), "1 6 8 4", "stride and padding pairs")
end)

H.done()
