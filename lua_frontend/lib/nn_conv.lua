-- nn_conv.lua — the convolution and pooling half of st.nn.functional (F.conv2d, F.max_pool2d,
-- F.avg_pool2d, F.adaptive_avg_pool2d): windows as views of the padded input, the convolution a
-- matmul over those columns with its own backward (Conv2dFn). Loaded by nn_functional.lua, which
-- passes F and its shared checks; the invariant of nn_functional.lua holds here too.
local st = ...

local function install(F, U)
  local shape_str, pair, check_opts, add_bias = U.shape_str, U.pair, U.check_opts, U.add_bias
  -- Pads dims 3 and 4 of a 4-D tensor with `value`: t rows above, b below, l columns left, r right
  -- (cat, so it is differentiable).
  local function pad2d(x, t, b, l, r, value)
    local s = x:shape()
    local dt = x:dtype()
    if t > 0 or b > 0 then
      local parts = {}
      if t > 0 then parts[#parts + 1] = st.full({s[1], s[2], t, s[4]}, value, dt) end
      parts[#parts + 1] = x
      if b > 0 then parts[#parts + 1] = st.full({s[1], s[2], b, s[4]}, value, dt) end
      x = st.cat(parts, 3)
      s[3] = s[3] + t + b
    end
    if l > 0 or r > 0 then
      local parts = {}
      if l > 0 then parts[#parts + 1] = st.full({s[1], s[2], s[3], l}, value, dt) end
      parts[#parts + 1] = x
      if r > 0 then parts[#parts + 1] = st.full({s[1], s[2], s[3], r}, value, dt) end
      x = st.cat(parts, 4)
    end
    return x
  end

  local function check_int(v, min, what, fname, level)
    if math.type(v) ~= "integer" or v < min then
      error(string.format("%s: %s must be an integer >= %d, got %s", fname, what, min, tostring(v)), level + 1)
    end
    return v
  end

  -- A number or a {a, b} pair of integers >= min as two numbers (kernel sizes, strides, paddings,
  -- dilations); an error naming what otherwise.
  local function int_pair(v, min, what, fname)
    local a, b = pair(v, what, fname)
    check_int(a, min, what, fname, 3)
    check_int(b, min, what, fname, 3)
    return a, b
  end

  -- Output size of a sliding window of k taps dil apart, stride s, over n + pads (the two sides'
  -- padding together); an error naming the sizes when the window does not fit.
  local function out_size(n, k, s, pads, fname, x, dil)
    local o = (n + pads - (dil or 1) * (k - 1) - 1) // s + 1
    if o < 1 then
      error(string.format("%s: kernel %d%s with padding %d does not fit an input of shape %s", fname, k,
        (dil or 1) > 1 and " (dilation " .. dil .. ")" or "", pads, shape_str(x)), 4)
    end
    return o
  end

  -- The padding before and after along one dim: a number (both sides), or "same" (stride 1; the
  -- output as long as the input, the extra padding row after, as PyTorch) or "valid" (none).
  local function conv_pads(padding, k, dil, stride, which, fname)
    if padding == "valid" then return 0, 0 end
    if padding == "same" then
      if stride ~= 1 then error(fname .. ": padding \"same\" needs stride 1, got stride " .. stride, 4) end
      local total = dil * (k - 1)
      return total // 2, total - total // 2
    end
    return padding[which], padding[which]
  end

  -- The columns of a convolution (im2col) as one view of the zero-padded input, (N, G, C/G*kh*kw,
  -- Ho*Wo): row (c, i, j) of image n, group g holds tap (i, j) of channel c at every output position,
  -- in the weight's (c, i, j) order. st._zero_pad is one masked view and as_strided an overlapping one,
  -- so the matmuls read the columns through the view (an implicit GEMM: never stored). g: the geometry (conv2d's
  -- table: sizes n c h w o kh kw, stride sh sw, dilation dh dw, padding pt pb pl pr, groups, ho wo).
  local function conv_padded(x, g)
    if g.pt + g.pb + g.pl + g.pr == 0 then return x end
    return st._zero_pad(x, {0, 0, g.pt, g.pl}, {0, 0, g.pb, g.pr})
  end
  local function conv_cols(x, g, xp)
    xp = xp or conv_padded(x, g)
    local hp, wp = g.h + g.pt + g.pb, g.w + g.pl + g.pr
    local wc = g.c // g.groups
    return xp:as_strided({g.n, g.groups, wc, g.kh, g.kw, g.ho, g.wo},
        {g.c * hp * wp, wc * hp * wp, hp * wp, g.dh * wp, g.dw, g.sh * wp, g.sw})
      :reshape(g.n, g.groups, wc * g.kh * g.kw, g.ho * g.wo)
  end
  -- The columns of the whole batch, (G, C/G*kh*kw, N*Ho*Wo): the images side by side along the
  -- positions (a view of the padded input xp, like conv_cols).
  local function conv_batch_cols(xp, g)
    local hp, wp = g.h + g.pt + g.pb, g.w + g.pl + g.pr
    local wc = g.c // g.groups
    return xp:as_strided({g.groups, wc, g.kh, g.kw, g.n, g.ho, g.wo},
        {wc * hp * wp, hp * wp, g.dh * wp, g.dw, g.c * hp * wp, g.sh * wp, g.sw})
      :reshape(g.groups, wc * g.kh * g.kw, g.n * g.ho * g.wo)
  end

  -- y = weight (G, O/G, C/G*kh*kw) times each image's columns, as (N, O, Ho*Wo): NCHW in memory (a
  -- pool or a norm after it reads rows of adjacent elements). Three dims, so a bias added to it in
  -- the matmul's epilogue reads its channel from the product's row (no division per element).
  local function conv_forward(x, weight, g, cols)
    local og, k = g.o // g.groups, (g.c // g.groups) * g.kh * g.kw
    cols = cols or conv_cols(x, g)
    if g.groups == 1 then return weight:reshape(og, k):matmul(cols:reshape(g.n, k, g.ho * g.wo)) end
    return weight:reshape(g.groups, og, k):matmul(cols):reshape(g.n, g.o, g.ho * g.wo)
  end

  -- The geometry of the convolution whose output is the input gradient of convolution g: the
  -- transposed convolution is a stride-1 convolution of the output gradient dilated by the stride
  -- (stride - 1 zeros between its elements) with the flipped, transposed weight,
  -- padded by dil*(k-1) - pad on each side, plus after the input's rows and columns that no window
  -- reached; nil when it is not one (a padding wider than the dilated kernel).
  local function conv_input_grad_geometry(g)
    local eh, ew = g.dh * (g.kh - 1), g.dw * (g.kw - 1)
    local rh = (g.h + g.pt + g.pb - eh - 1) % g.sh   -- rows past the last window
    local rw = (g.w + g.pl + g.pr - ew - 1) % g.sw
    local t = {n = g.n, c = g.o, h = (g.ho - 1) * g.sh + 1, w = (g.wo - 1) * g.sw + 1, o = g.c, kh = g.kh,
      kw = g.kw, sh = 1, sw = 1, dh = g.dh, dw = g.dw, groups = g.groups, ho = g.h, wo = g.w,
      pt = eh - g.pt, pb = eh - g.pb + rh, pl = ew - g.pl, pr = ew - g.pr + rw}
    if t.pt < 0 or t.pb < 0 or t.pl < 0 or t.pr < 0 then return nil end
    return t
  end

  -- The weight gradient of convolution g, (O, C/G, kh, kw), from the padded input xp: one product
  -- of the batch's columns (taps x N*Ho*Wo) and the output gradient gy's transpose (N*Ho*Wo x O/G),
  -- transposed. Taps as the rows: the GEMM reads the gathered columns in place and its columns are
  -- the few output channels (opmath_gemm.h, the gathered-A path), instead of packing the columns
  -- for a product only O/G rows tall; the batch is part of k, so there is no per-image product to
  -- store and sum (bench/NOTES.md, thirteenth pass).
  local function conv_weight_grad(gy, xp, g)
    local og = g.o // g.groups
    local gyt = gy:reshape(g.n, g.groups, og, g.ho * g.wo):permute(2, 1, 4, 3)
      :reshape(g.groups, g.n * g.ho * g.wo, og)
    return conv_batch_cols(xp, g):matmul(gyt):transpose(2, 3):reshape(g.o, g.c // g.groups, g.kh, g.kw)
  end

  -- Convolution with a convolution's backward (st.autograd.Function): the input gradient is the
  -- convolution of the output gradient with the flipped, transposed weight (conv_input_grad_geometry),
  -- one matmul over its columns instead of a sum over the kh*kw overlapping windows of the columns'
  -- gradient; the weight gradient is conv_weight_grad (the batch's columns of the saved padded input
  -- times the output gradient's transpose).
  local Conv2dFn = st.autograd.Function("conv2d")
  function Conv2dFn.forward(ctx, x, weight, g)
    local xp = conv_padded(x, g)
    local cols = conv_cols(x, g, xp)
    ctx:save_for_backward(xp, weight)   -- the padded input: the weight gradient's GEMM reads it as columns too
    ctx.g = g
    return conv_forward(x, weight, g, cols)
  end

  -- The input gradient of a strided convolution g (col2im): the transposed weight times the output
  -- gradient gives each tap's share, (N, C, kh, kw, Ho, Wo); tap (i, j) of output position (oh, ow)
  -- lands on padded input row oh*sh + i*dh, which is row oh + (i*dh)//sh of phase (i*dh)%sh when
  -- the rows are split by the stride: (N, C, Hq, sh, Wq, sw). Each phase (ph, pw) sums only the
  -- taps landing on it, each a zero-padded shift in (N, C, Hq, Wq), and is stored (the phases batch
  -- into one kernel); their sum in the split shape is one zero-padded view per phase (no division),
  -- stored by one kernel: at stride 2 an element evaluates 2.25 taps and 4 phases instead of 9 taps
  -- (the ResNet's two strided blocks, 16.2 + 12.7 -> 9.7 + 6.8 ms a step). The input (N, C, H, W)
  -- is that buffer with the padding cut, stored contiguous (its readers, the
  -- BatchNorm backward's column reductions, took twice as long through the cut view). It replaces,
  -- for strides > 1, the stride-1 convolution of the zero-dilated gradient, three quarters of whose
  -- products at stride 2 are with zeros (bench/NOTES.md).
  local function conv_col2im(gy, weight, g)
    local og, kk = g.o // g.groups, (g.c // g.groups) * g.kh * g.kw
    local share = weight:reshape(g.groups, og, kk):transpose(2, 3)
      :matmul(gy:reshape(g.n, g.groups, og, g.ho * g.wo)):reshape(g.n, g.c, g.kh, g.kw, g.ho, g.wo)
    local hq = math.max(g.ho + (g.kh - 1) * g.dh // g.sh, (g.pt + g.h + g.sh - 1) // g.sh)
    local wq = math.max(g.wo + (g.kw - 1) * g.dw // g.sw, (g.pl + g.w + g.sw - 1) // g.sw)
    local part = {}   -- [ph * sw + pw + 1]: the taps landing on phase (ph, pw), in (N, C, Hq, Wq)
    for i = 0, g.kh - 1 do
      for j = 0, g.kw - 1 do
        local a, b, p = i * g.dh // g.sh, j * g.dw // g.sw, i * g.dh % g.sh * g.sw + j * g.dw % g.sw + 1
        local t = st._zero_pad(share:select(3, i + 1):select(3, j + 1), {0, 0, a, b},
          {0, 0, hq - g.ho - a, wq - g.wo - b})
        part[p] = part[p] and part[p] + t or t
      end
    end
    local sum
    for p = 1, g.sh * g.sw do
      if part[p] then   -- stored, then its phase's padded view in the split shape
        local ph, pw = (p - 1) // g.sw, (p - 1) % g.sw
        local t = st._zero_pad(st._store(part[p]):reshape(g.n, g.c, hq, 1, wq, 1), {0, 0, 0, ph, 0, pw},
          {0, 0, 0, g.sh - 1 - ph, 0, g.sw - 1 - pw})
        sum = sum and sum + t or t
      end
    end
    return st._store(st._store(sum):reshape(g.n, g.c, hq * g.sh, wq * g.sw)
      :narrow(3, g.pt + 1, g.h):narrow(4, g.pl + 1, g.w))
  end

  function Conv2dFn.backward(ctx, gy)
    local xp, weight = ctx.saved_tensors[1], ctx.saved_tensors[2]
    local g = ctx.g
    local gx, gw
    local og, wc = g.o // g.groups, g.c // g.groups
    if ctx.needs_input_grad[1] and (g.sh > 1 or g.sw > 1) then
      gx = conv_col2im(gy, weight, g)
    elseif ctx.needs_input_grad[1] then
      local t = conv_input_grad_geometry(g)
      local wt = weight:reshape(g.groups, og, wc, g.kh, g.kw):transpose(2, 3):flip(4, 5)
        :reshape(g.c, og, g.kh, g.kw)
      gx = conv_forward(gy:reshape(g.n, g.o, g.ho, g.wo), wt, t):reshape(g.n, g.c, g.h, g.w)   -- stride 1
    end
    if ctx.needs_input_grad[2] then
      gw = conv_weight_grad(gy, xp, g)
    end
    return gx, gw
  end

  -- One spatial option of a convolution as an (h, w) pair of integers >= min: for 2-D a number or
  -- {a, b}; for 1-D (nd 1) a number or {a}, its height `one` (1 for a stride or a dilation, 0 for a
  -- padding). Errors point at the convolution's caller (conv_opts' caller's caller).
  local function conv_pair(v, nd, min, what, fname, one)
    local l
    if type(v) == "number" then l = {v, v}
    elseif type(v) == "table" and not st.is_tensor(v) and #v == nd then l = nd == 2 and v or {one, v[1]}
    else
      error(string.format("%s: %s must be a number or a table of %d number%s", fname, what, nd, nd > 1 and "s" or ""), 4)
    end
    if nd == 1 then l[1] = one end
    return check_int(l[1], min, what, fname, 4), check_int(l[2], min, what, fname, 4)
  end

  -- The options every convolution shares, checked (unknown names, values) and as (h, w) pairs,
  -- 1-D ones with height 1: {sh, sw, dh, dw, groups, padding = "same" | "valid" | {ph, pw}}, and
  -- the checked options table (for the caller's own ones). `strings`: "same"/"valid" allowed.
  local function conv_opts(opts, fname, nd, known, strings)
    opts = check_opts(opts, known, fname, 3)
    local o = {}
    o.sh, o.sw = conv_pair(opts.stride or 1, nd, 1, "stride", fname, 1)
    o.dh, o.dw = conv_pair(opts.dilation or 1, nd, 1, "dilation", fname, 1)
    o.groups = check_int(opts.groups or 1, 1, "groups", fname, 3)
    local padding = opts.padding or 0
    if strings and (padding == "same" or padding == "valid") then
      o.padding = padding
    else
      if type(padding) == "string" then
        error(string.format("%s: padding must be a number%s, got \"%s\"", fname,
          strings and (nd == 2 and ", a pair, \"same\" or \"valid\"" or ", \"same\" or \"valid\"")
            or (nd == 2 and " or a pair" or ""), padding), 3)
      end
      o.padding = {conv_pair(padding, nd, 0, "padding", fname, 0)}
    end
    return o, opts
  end

  -- The channel checks of a convolution whose weight has `wc` input channels per group and `oc`
  -- outputs: errors naming the user's shapes xs and ws.
  local function check_groups(c, oc, wc, groups, fname, xs, ws)
    if c % groups ~= 0 or oc % groups ~= 0 then
      error(string.format("%s: groups=%d must divide the input's %d channels and the weight's %d outputs "
        .. "(input %s, weight %s)", fname, groups, c, oc, shape_str(xs), shape_str(ws)), 4)
    end
    if wc * groups ~= c then
      error(fname .. ": input " .. shape_str(xs) .. " has " .. c .. " channels but weight "
        .. shape_str(ws) .. " expects " .. wc * groups .. (groups > 1 and " (" .. wc .. " per group, groups="
        .. groups .. ")" or ""), 4)
    end
  end

  -- The convolution of x (N, C, H, W) with weight (O, C / groups, kh, kw) under conv_opts' o, plus
  -- the bias, as (N, O, Ho, Wo): conv2d's, and conv1d's on a height-1 view. xs, ws: the user's
  -- tensors, named by the errors. The weight times the columns, a view of the padded input
  -- (conv_cols); the backward is Conv2dFn's, or autograd's through the view when the padding is
  -- wider than the dilated kernel (the input gradient sums the overlapping windows).
  local function conv_apply(x, weight, bias, o, fname, xs, ws)
    local n, c, h, w = table.unpack(x:shape())
    local oc, wc, kh, kw = table.unpack(weight:shape())
    check_groups(c, oc, wc, o.groups, fname, xs, ws)
    local pt, pb = conv_pads(o.padding, kh, o.dh, o.sh, 1, fname)
    local pl, pr = conv_pads(o.padding, kw, o.dw, o.sw, 2, fname)
    local ho, wo = out_size(h, kh, o.sh, pt + pb, fname, xs, o.dh), out_size(w, kw, o.sw, pl + pr, fname, xs, o.dw)
    local g = {n = n, c = c, h = h, w = w, o = oc, kh = kh, kw = kw, sh = o.sh, sw = o.sw, dh = o.dh, dw = o.dw,
      pt = pt, pb = pb, pl = pl, pr = pr, groups = o.groups, ho = ho, wo = wo}
    local y
    if conv_input_grad_geometry(g) then y = Conv2dFn.apply(x, weight, g) else y = conv_forward(x, weight, g) end
    if bias then y = add_bias(y, bias:reshape(oc, 1)) end
    return y:reshape(n, oc, ho, wo)
  end

  -- A convolution over nd spatial dims (2: conv2d, 1: conv1d on height-1 views), batched or not:
  -- conv_apply. Called in tail position, so its errors point at the user's call.
  local function conv_nd(x, weight, bias, opts, fname, nd)
    local o = conv_opts(opts, fname, nd, {"stride", "padding", "dilation", "groups"}, true)
    local xs = x
    local unbatched = x:dim() == nd + 1
    if unbatched then x = x:unsqueeze(1) end
    if x:dim() ~= nd + 2 or weight:dim() ~= nd + 2 then
      error(string.format("%s: expected input %s and weight %s, got %s and %s", fname,
        nd == 2 and "(N, C, H, W)" or "(N, C, L)", nd == 2 and "(O, C / groups, kh, kw)" or "(O, C / groups, k)",
        shape_str(xs), shape_str(weight)), 2)
    end
    for d = 3, nd + 2 do
      if weight:size(d) < 1 then
        error(string.format("%s: weight %s has an empty kernel", fname, shape_str(weight)), 2)
      end
    end
    local y
    if nd == 2 then
      y = conv_apply(x, weight, bias, o, fname, xs, weight)
    else
      y = conv_apply(x:unsqueeze(3), weight:unsqueeze(3), bias, o, fname, xs, weight):squeeze(3)
    end
    if unbatched then y = y:squeeze(1) end
    return y
  end

  -- conv2d(x, weight, bias, {stride = 1, padding = 0 | "same" | "valid", dilation = 1, groups = 1}):
  -- x (N, C, H, W) or (C, H, W); weight (O, C / groups, kh, kw).
  function F.conv2d(x, weight, bias, opts) return conv_nd(x, weight, bias, opts, "conv2d", 2) end

  -- conv1d(x, weight, bias, {stride = 1, padding = 0 | "same" | "valid", dilation = 1, groups = 1}):
  -- x (N, C, L) or (C, L); weight (O, C / groups, k): conv2d's columns, matmul and backward on the
  -- height-1 views (N, C, 1, L) and (O, C / groups, 1, k).
  function F.conv1d(x, weight, bias, opts) return conv_nd(x, weight, bias, opts, "conv1d", 1) end

  -- The transposed convolution of x (N, C, H, W) by weight (C, O / groups, kh, kw) (geometry gt, the
  -- convolution g whose input gradient it is, with its output size ho, wo): conv2d's input gradient
  -- (Conv2dFn.backward's gx). Strided: conv_col2im (the weight times x, then each stride phase's
  -- taps; 2-2.5x faster forward + backward than the form below, bench/NOTES.md). Stride 1: a
  -- convolution of x with the flipped, transposed weight, padded dil*(k-1) - pad before and that
  -- plus output_padding after; a padding wider than the dilated kernel (a negative one) crops the
  -- result instead.
  local function conv_transpose_forward(x, weight, g, oph, opw)
    if g.sh > 1 or g.sw > 1 then return conv_col2im(x, weight, g) end   -- no products with zeros
    local og, cg = g.c // g.groups, g.o // g.groups
    local eh, ew = g.dh * (g.kh - 1), g.dw * (g.kw - 1)
    local t = {n = g.n, c = g.o, h = g.ho, w = g.wo, o = g.c, kh = g.kh,   -- stride 1 here
      kw = g.kw, sh = 1, sw = 1, dh = g.dh, dw = g.dw, groups = g.groups,
      pt = eh - g.pt, pb = eh - g.pt + oph, pl = ew - g.pl, pr = ew - g.pl + opw}
    local ct, cl = math.max(0, -t.pt), math.max(0, -t.pl)   -- rows and columns to crop
    t.pt, t.pb, t.pl, t.pr = math.max(0, t.pt), math.max(0, t.pb), math.max(0, t.pl), math.max(0, t.pr)
    t.ho, t.wo = t.h + t.pt + t.pb - eh, t.w + t.pl + t.pr - ew
    local wt = weight:reshape(g.groups, cg, og, g.kh, g.kw):transpose(2, 3):flip(4, 5):reshape(g.c, cg, g.kh, g.kw)
    local y = conv_forward(x, wt, t):reshape(g.n, g.c, t.ho, t.wo)
    if t.ho ~= g.h then y = y:narrow(3, 1 + ct, g.h) end
    if t.wo ~= g.w then y = y:narrow(4, 1 + cl, g.w) end
    return y
  end

  -- The transposed convolution with its own backward: the input gradient is the convolution g of
  -- the output gradient with the weight (g's forward), the weight gradient the input times g's
  -- columns of the output gradient, summed over the batch (both matmuls read the columns as a view).
  local ConvTranspose2dFn = st.autograd.Function("conv_transpose2d")
  function ConvTranspose2dFn.forward(ctx, x, weight, g, oph, opw)
    ctx:save_for_backward(x, weight)
    ctx.g = g
    return conv_transpose_forward(x, weight, g, oph, opw)
  end
  function ConvTranspose2dFn.backward(ctx, gy)
    local x, weight = ctx.saved_tensors[1], ctx.saved_tensors[2]
    local g = ctx.g
    local gyp = conv_padded(gy, g)
    local cols = conv_cols(gy, g, gyp)
    local gx, gw
    if ctx.needs_input_grad[1] then gx = conv_forward(gy, weight, g, cols):reshape(g.n, g.o, g.ho, g.wo) end
    if ctx.needs_input_grad[2] then
      gw = conv_weight_grad(x, gyp, g)
    end
    return gx, gw
  end

  -- conv_transpose2d(x, weight, bias, {stride = 1, padding = 0, output_padding = 0, groups = 1,
  -- dilation = 1}): x (N, C, H, W) or (C, H, W); weight (C, O / groups, kh, kw) (PyTorch's layout);
  -- output (N, O, Ho, Wo), Ho = (H - 1) * stride - 2 * padding + dilation * (kh - 1) +
  -- output_padding + 1. output_padding must be smaller than the stride or the dilation (PyTorch's
  -- rule). The adjoint of conv2d: ConvTranspose2dFn.
  function F.conv_transpose2d(x, weight, bias, opts)
    local fname = "conv_transpose2d"
    local o, raw = conv_opts(opts, fname, 2, {"stride", "padding", "output_padding", "groups", "dilation"}, false)
    local oph, opw = int_pair(raw.output_padding or 0, 0, "output_padding", fname)
    if (oph >= o.sh and oph >= o.dh) or (opw >= o.sw and opw >= o.dw) then
      error(string.format("%s: output_padding (%d, %d) must be smaller than either the stride (%d, %d) or the "
        .. "dilation (%d, %d)", fname, oph, opw, o.sh, o.sw, o.dh, o.dw), 2)
    end
    local xs = x
    local unbatched = x:dim() == 3
    if unbatched then x = x:unsqueeze(1) end
    if x:dim() ~= 4 or weight:dim() ~= 4 then
      error(fname .. ": expected input (N, C_in, H, W) and weight (C_in, C_out / groups, kh, kw), got "
        .. shape_str(xs) .. " and " .. shape_str(weight), 2)
    end
    local n, c, h, w = table.unpack(x:shape())
    local wi, og, kh, kw = table.unpack(weight:shape())
    if kh < 1 or kw < 1 then
      error(string.format("%s: weight %s has an empty kernel", fname, shape_str(weight)), 2)
    elseif wi ~= c then
      error(string.format("%s: input %s has %d channels but weight %s expects %d (its first dim)", fname,
        shape_str(xs), c, shape_str(weight), wi), 2)
    elseif c % o.groups ~= 0 then
      error(string.format("%s: groups=%d must divide the input's %d channels (input %s, weight %s)", fname,
        o.groups, c, shape_str(xs), shape_str(weight)), 2)
    end
    local ph, pw = o.padding[1], o.padding[2]
    local ho = (h - 1) * o.sh - 2 * ph + o.dh * (kh - 1) + oph + 1
    local wo = (w - 1) * o.sw - 2 * pw + o.dw * (kw - 1) + opw + 1
    if ho < 1 or wo < 1 then
      error(string.format("%s: padding (%d, %d) leaves an empty output (%d x %d) for input %s and weight %s", fname,
        ph, pw, ho, wo, shape_str(xs), shape_str(weight)), 2)
    end
    -- g: the convolution of the output (ho, wo) whose input gradient this is; its bottom and right
    -- padding only as much as its last window (over input row h) reads
    local g = {n = n, c = og * o.groups, h = ho, w = wo, o = c, kh = kh, kw = kw, sh = o.sh, sw = o.sw,
      dh = o.dh, dw = o.dw, groups = o.groups, ho = h, wo = w, pt = ph, pl = pw,
      pb = math.max(0, ph - oph), pr = math.max(0, pw - opw)}
    local y = ConvTranspose2dFn.apply(x, weight, g, oph, opw)
    if bias then y = add_bias(y, bias:reshape(g.c, 1, 1)) end
    if unbatched then y = y:squeeze(1) end
    return y
  end

  -- Shared by the pools: the options checked, kernel/stride/padding as pairs, ceil_mode.
  local function pool_args(x, kernel, opts, fname, known)
    opts = check_opts(opts, known, fname, 3)
    local kh, kw = int_pair(kernel, 1, "kernel_size", fname)
    local sh, sw = int_pair(opts.stride or kernel, 1, "stride", fname)
    local ph, pw = int_pair(opts.padding or 0, 0, "padding", fname)
    if ph > kh // 2 or pw > kw // 2 then
      error(fname .. ": padding must be at most half the kernel size", 3)
    end
    if opts.ceil_mode ~= nil and type(opts.ceil_mode) ~= "boolean" then
      error(fname .. ": ceil_mode must be a boolean, got " .. tostring(opts.ceil_mode), 3)
    end
    if x:dim() ~= 3 and x:dim() ~= 4 then
      error(fname .. ": expected input (N, C, H, W) or (C, H, W), got " .. shape_str(x), 3)
    end
    return {kh = kh, kw = kw, sh = sh, sw = sw, ph = ph, pw = pw, ceil = opts.ceil_mode == true}
  end

  -- A pool's output size along one dim (PyTorch's rule): floor or ceil of (n + 2p - k) / s, plus 1;
  -- with ceil_mode the last window must start inside the input or its left padding.
  local function pool_out(n, k, s, p, ceil, fname, x)
    local span = n + 2 * p - k
    if span < 0 then
      error(fname .. ": kernel " .. k .. " with padding " .. p .. " does not fit an input of shape " .. shape_str(x), 3)
    end
    local o = (ceil and -((-span) // s) or span // s) + 1
    if ceil and (o - 1) * s >= n + p then o = o - 1 end
    return o
  end

  -- The kh*kw strided windows of x padded with `value` (the padding p, and after the input what
  -- ceil_mode's last window reaches past it), combined with fn(acc, view).
  local function pool_windows(x, g, ho, wo, value, fn)
    local s = x:shape()
    local eh = math.max(0, (ho - 1) * g.sh + g.kh - (s[3] + 2 * g.ph))
    local ew = math.max(0, (wo - 1) * g.sw + g.kw - (s[4] + 2 * g.pw))
    local xp = pad2d(x, g.ph, g.ph + eh, g.pw, g.pw + ew, value)
    local acc
    for i = 1, g.kh do
      for j = 1, g.kw do
        local v = xp[{{}, {}, {i, i + g.sh * (ho - 1), g.sh}, {j, j + g.sw * (wo - 1), g.sw}}]
        acc = acc and fn(acc, v) or v
      end
    end
    return acc
  end

  -- max_pool2d(x, kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false}). Padding is
  -- -inf. When the windows tile the input (stride == kernel, no padding, no partial window) it is
  -- one reshape and a max over two dims; otherwise an elementwise maximum over the kh*kw strided
  -- views. Gradient at ties: split evenly between the tied elements (PyTorch gives it to one).
  -- (fname: the caller's name for errors; xs: the user's tensor, named by them; sq: a dim to squeeze
  -- from the result, the 1-D pools' height)
  local function max_pool(x, kernel, opts, fname, xs, sq)
    local g = pool_args(x, kernel, opts, fname, {"stride", "padding", "ceil_mode"})
    local unbatched = x:dim() == 3
    if unbatched then x = x:unsqueeze(1) end
    local n, c, h, w = table.unpack(x:shape())
    local ho = pool_out(h, g.kh, g.sh, g.ph, g.ceil, fname, xs)
    local wo = pool_out(w, g.kw, g.sw, g.pw, g.ceil, fname, xs)
    local y
    if g.sh == g.kh and g.sw == g.kw and g.ph == 0 and g.pw == 0 and ho * g.kh <= h and wo * g.kw <= w then
      if ho * g.kh ~= h then x = x:narrow(3, 1, ho * g.kh) end
      if wo * g.kw ~= w then x = x:narrow(4, 1, wo * g.kw) end
      y = x:reshape(n, c, ho, g.kh, wo, g.kw):max({4, 6})
    else
      y = pool_windows(x, g, ho, wo, -math.huge, st.maximum)
    end
    if unbatched then y = y:squeeze(1) end
    if sq then y = y:squeeze(sq) end
    return y
  end
  function F.max_pool2d(x, kernel, opts) return max_pool(x, kernel, opts, "max_pool2d", x) end

  -- Per output position along one dim, the count avg_pool2d divides by (PyTorch's rule): the window
  -- clipped to the padded input, or with count_include_pad = false to the input itself.
  local function pool_counts(n, k, s, p, o, include_pad)
    local c, all_k = {}, true
    for i = 0, o - 1 do
      local lo, hi = i * s - p, math.min(i * s - p + k, n + p)
      if not include_pad then lo, hi = math.max(lo, 0), math.min(hi, n) end
      c[i + 1] = hi - lo
      all_k = all_k and c[i + 1] == k
    end
    return c, all_k
  end

  -- The (Ho, Wo) reciprocals of avg_pool2d's counts, or nil when every window counts kh*kw; cached
  -- per geometry, dtype and device like the conv selectors (a constant, not a new tensor per call).
  local div_cache = {}
  local function pool_divisors(h, w, g, ho, wo, include_pad, dtype, device)
    local key = table.concat({h, w, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, ho, wo, tostring(include_pad), dtype,
      device}, ",")
    local d = div_cache[key]
    if d == nil then
      local ch, allh = pool_counts(h, g.kh, g.sh, g.ph, ho, include_pad)
      local cw, allw = pool_counts(w, g.kw, g.sw, g.pw, wo, include_pad)
      if allh and allw then
        d = false
      else
        local inv = {}
        for i = 1, ho do
          inv[i] = {}
          for j = 1, wo do inv[i][j] = 1 / (ch[i] * cw[j]) end
        end
        d = st.sync(st.tensor(inv, dtype):to(device))
      end
      div_cache[key] = d
    end
    return d or nil
  end

  -- avg_pool2d(x, kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false,
  -- count_include_pad = true}): the sum of each window over the count PyTorch divides by (the zero
  -- padding counted unless count_include_pad is false; what ceil_mode's last window reaches past the
  -- padding never counted).
  local function avg_pool(x, kernel, opts, fname, xs, sq)
    local g = pool_args(x, kernel, opts, fname, {"stride", "padding", "ceil_mode", "count_include_pad"})
    local cip = opts and opts.count_include_pad
    if cip ~= nil and type(cip) ~= "boolean" then
      error(fname .. ": count_include_pad must be a boolean, got " .. tostring(cip), 2)
    end
    local unbatched = x:dim() == 3
    if unbatched then x = x:unsqueeze(1) end
    local _, _, h, w = table.unpack(x:shape())
    local ho = pool_out(h, g.kh, g.sh, g.ph, g.ceil, fname, xs)
    local wo = pool_out(w, g.kw, g.sw, g.pw, g.ceil, fname, xs)
    local y = pool_windows(x, g, ho, wo, 0, st.add)
    local inv = pool_divisors(h, w, g, ho, wo, cip ~= false, x:dtype(), x:device())
    y = y * (inv or 1 / (g.kh * g.kw))
    if unbatched then y = y:squeeze(1) end
    if sq then y = y:squeeze(sq) end
    return y
  end
  function F.avg_pool2d(x, kernel, opts) return avg_pool(x, kernel, opts, "avg_pool2d", x) end

  -- The 1-D pools: the 2-D ones over a height-1 view, (N, C, L) -> (N, C, 1, L), kernel (1, k),
  -- stride (1, s), padding (0, p); kernel_size, stride and padding a number or {a}.
  local function one_int(v, min, what, fname, level)
    if type(v) == "table" and not st.is_tensor(v) and #v == 1 then v = v[1] end
    if math.type(v) ~= "integer" or v < min then
      error(string.format("%s: %s must be an integer >= %d or a table of one, got %s", fname, what, min,
        type(v) == "table" and "a table" or tostring(v)), level or 4)
    end
    return v
  end
  local function pool1d_args(x, kernel, opts, fname, known)
    opts = check_opts(opts, known, fname, 3)
    if x:dim() ~= 2 and x:dim() ~= 3 then
      error(fname .. ": expected input (N, C, L) or (C, L), got " .. shape_str(x), 3)
    end
    local k = one_int(kernel, 1, "kernel_size", fname)
    local o = {stride = {1, one_int(opts.stride or k, 1, "stride", fname)},
      padding = {0, one_int(opts.padding or 0, 0, "padding", fname)}}
    for _, name in ipairs(known) do
      if name ~= "stride" and name ~= "padding" then o[name] = opts[name] end
    end
    return x:unsqueeze(-2), {1, k}, o, x:dim()
  end
  -- max_pool1d(x, kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false}): x (N, C, L)
  -- or (C, L); max_pool2d's rules over L.
  function F.max_pool1d(x, kernel, opts)
    local x2, k2, o2, nd = pool1d_args(x, kernel, opts, "max_pool1d", {"stride", "padding", "ceil_mode"})
    return max_pool(x2, k2, o2, "max_pool1d", x, nd)
  end
  -- avg_pool1d(x, kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false,
  -- count_include_pad = true}): avg_pool2d's rules over L.
  function F.avg_pool1d(x, kernel, opts)
    local x2, k2, o2, nd = pool1d_args(x, kernel, opts, "avg_pool1d", {"stride", "padding", "ceil_mode",
      "count_include_pad"})
    return avg_pool(x2, k2, o2, "avg_pool1d", x, nd)
  end

  -- The (o, n) matrix averaging each of o adaptive bins of n inputs (bin i: rows floor(i*n/o) ..
  -- ceil((i+1)*n/o) - 1, PyTorch's), cached per size and dtype (a constant).
  local adaptive_cache = {}
  local function adaptive_matrix(n, o, dtype, device)
    local key = table.concat({n, o, dtype, device}, ",")
    local m = adaptive_cache[key]
    if not m then
      local rows = {}
      for i = 0, o - 1 do
        local a, b = (i * n) // o, -((-(i + 1) * n) // o)
        local row = {}
        for r = 0, n - 1 do row[r + 1] = (r >= a and r < b) and 1 / (b - a) or 0 end
        rows[i + 1] = row
      end
      m = st.tensor(rows, dtype):to(device)
      adaptive_cache[key] = m
    end
    return m
  end

  -- adaptive_avg_pool2d(x, output_size): x (N, C, H, W) or (C, H, W) to (..., Oh, Ow) (a number or
  -- a pair), the mean of each of PyTorch's bins (bin i of Oh: rows floor(i*H/Oh) .. ceil((i+1)*H/Oh)
  -- - 1; bins overlap when Oh does not divide H). Bins that tile the input: a reshape and a mean
  -- (the global average pool: a mean over H and W); otherwise the (Oh, H) and (Ow, W) averaging
  -- matrices on either side of each image.
  function F.adaptive_avg_pool2d(x, output_size)
    local oh, ow = int_pair(output_size, 1, "output_size", "adaptive_avg_pool2d")
    if x:dim() ~= 3 and x:dim() ~= 4 then
      error("adaptive_avg_pool2d: expected input (N, C, H, W) or (C, H, W), got " .. shape_str(x), 2)
    end
    local unbatched = x:dim() == 3
    if unbatched then x = x:unsqueeze(1) end
    local n, c, h, w = table.unpack(x:shape())
    local y
    if h % oh == 0 and w % ow == 0 then
      y = x:reshape(n, c, oh, h // oh, ow, w // ow):mean({4, 6})
    else
      local ah = adaptive_matrix(h, oh, x:dtype(), x:device())
      local aw = adaptive_matrix(w, ow, x:dtype(), x:device())
      y = ah:matmul(x):matmul(aw:t())
    end
    if unbatched then y = y:squeeze(1) end
    return y
  end

  -- adaptive_avg_pool1d(x, output_size): x (N, C, L) or (C, L) to (..., O) (a number or {O}):
  -- adaptive_avg_pool2d's bins over L.
  function F.adaptive_avg_pool1d(x, output_size)
    local o = one_int(output_size, 1, "output_size", "adaptive_avg_pool1d", 3)
    if x:dim() ~= 2 and x:dim() ~= 3 then
      error("adaptive_avg_pool1d: expected input (N, C, L) or (C, L), got " .. shape_str(x), 2)
    end
    return F.adaptive_avg_pool2d(x:unsqueeze(-2), {1, o}):squeeze(-2)
  end

  -- ---- interpolation ----

  local function f32(v) return (string.unpack("<f", string.pack("<f", v))) end

  -- Nearest interpolation of n entries to o along one dim, PyTorch 1.13's source indices (0-based,
  -- the CPU kernel's, in float32): o == n: itself; o == 2n: dst // 2; otherwise min(floor(dst *
  -- scale), n - 1), scale = 1 / scale_factor when one was given, else n / o.
  local function nearest_src(n, o, sf)
    local idx = {}
    local scale = sf and f32(1 / sf) or f32(f32(n) / f32(o))
    for d = 0, o - 1 do
      if o == n then idx[d + 1] = d
      elseif o == 2 * n then idx[d + 1] = d // 2
      else idx[d + 1] = math.min(math.floor(f32(d * scale)), n - 1) end
    end
    return idx
  end

  -- Linear interpolation of n entries to o along one dim, PyTorch 1.13's: source position r = scale
  -- * dst (align_corners; scale (n - 1) / (o - 1)) or max(scale * (dst + 0.5) - 0.5, 0) (scale 1 /
  -- scale_factor, or n / o); entries floor(r) and the next (itself at the last), weights 1 - frac and
  -- frac. Returns the two 0-based index lists and the weight lists.
  local function linear_src(n, o, sf, align)
    local scale
    if align then scale = o > 1 and (n - 1) / (o - 1) or 0 else scale = sf and 1 / sf or n / o end
    local i0, i1, l0, l1 = {}, {}, {}, {}
    for d = 0, o - 1 do
      local r = align and scale * d or math.max(scale * (d + 0.5) - 0.5, 0)
      local a = math.floor(r)
      i0[d + 1], i1[d + 1] = a, a < n - 1 and a + 1 or a
      l1[d + 1] = r - a
      l0[d + 1] = 1 - l1[d + 1]
    end
    return i0, i1, l0, l1
  end

  -- Cubic interpolation of n entries to o along one dim, PyTorch 1.13's (upsample_bicubic2d):
  -- source position r = scale * dst (align_corners) or scale * (dst + 0.5) - 0.5, not clamped at 0
  -- (scale as linear_src's); t = r - floor(r); taps floor(r) - 1 .. floor(r) + 2, each clamped to
  -- [0, n - 1], with Keys' cubic convolution weights (A = -0.75) at distances t + 1, t, 1 - t,
  -- 2 - t. Returns four 0-based index lists and their four weight lists.
  local function cubic_src(n, o, sf, align)
    local scale
    if align then scale = o > 1 and (n - 1) / (o - 1) or 0 else scale = sf and 1 / sf or n / o end
    local A = -0.75
    local function near(x) return ((A + 2) * x - (A + 3)) * x * x + 1 end        -- |x| <= 1
    local function far(x) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A end   -- 1 < |x| < 2
    local idx, wts = {{}, {}, {}, {}}, {{}, {}, {}, {}}
    for d = 0, o - 1 do
      local r = align and scale * d or scale * (d + 0.5) - 0.5
      local a = math.floor(r)
      local t = r - a
      local w = {far(t + 1), near(t), near(1 - t), far(2 - t)}
      for k = 1, 4 do
        idx[k][d + 1] = math.max(0, math.min(a + k - 2, n - 1))
        wts[k][d + 1] = w[k]
      end
    end
    return idx, wts
  end

  -- How one dim is resampled, cached per geometry, dtype and device (constants, like the pools'):
  -- {keep = true} (the identity), {rep = k} (nearest, each entry k times: a broadcast view), index
  -- tensors i0 (and i1 with lerp weights l0, l1 shaped to broadcast along dim `dim` of 4), or
  -- (bicubic) taps: four {index tensor, weights} pairs.
  local interp_cache = {}
  local function interp_plan(n, o, sf, mode, align, dim, dtype, device)
    local key = table.concat({n, o, tostring(sf), mode, tostring(align), dim, dtype, device}, ",")
    local p = interp_cache[key]
    if p then return p end
    local function itensor(l)
      local t = {}
      for i, v in ipairs(l) do t[i] = v + 1 end
      return st.tensor(t, "i64"):to(device)
    end
    local shape = dim == 3 and {o, 1} or {o}
    if mode == "nearest" then
      local idx = nearest_src(n, o, sf)
      local k, ident, rep = o // n, o == n, o % n == 0
      for d = 1, o do
        ident = ident and idx[d] == d - 1
        rep = rep and idx[d] == (d - 1) // k
      end
      if ident then p = {keep = true} elseif rep then p = {rep = k} else p = {i0 = itensor(idx)} end
    elseif mode == "bicubic" then
      local idx, wts = cubic_src(n, o, sf, align)
      p = {taps = {}}
      for k = 1, 4 do
        p.taps[k] = {itensor(idx[k]), st.tensor(wts[k], dtype):reshape(table.unpack(shape)):to(device)}
      end
    else
      local i0, i1, l0, l1 = linear_src(n, o, sf, align)
      local ident = o == n
      for d = 1, o do ident = ident and i0[d] == d - 1 and l1[d] == 0 end
      if ident then
        p = {keep = true}
      else
        p = {i0 = itensor(i0), i1 = itensor(i1), l0 = st.tensor(l0, dtype):reshape(table.unpack(shape)):to(device),
          l1 = st.tensor(l1, dtype):reshape(table.unpack(shape)):to(device)}
      end
    end
    interp_cache[key] = p
    return p
  end

  -- x (N, C, H, W) resampled along dim 3 or 4 by plan p (interp_plan).
  local function interp_dim(x, p, dim)
    if p.keep then return x end
    local n, c, h, w = table.unpack(x:shape())
    if p.rep then
      if dim == 3 then return x:reshape(n, c, h, 1, w):expand(n, c, h, p.rep, w):reshape(n, c, h * p.rep, w) end
      return x:reshape(n, c, h, w, 1):expand(n, c, h, w, p.rep):reshape(n, c, h, w * p.rep)
    end
    if p.taps then
      local y
      for _, tap in ipairs(p.taps) do
        local v = x:index_select(dim, tap[1]) * tap[2]
        y = y and y + v or v
      end
      return y
    end
    local a = x:index_select(dim, p.i0)
    if not p.i1 then return a end
    return a * p.l0 + x:index_select(dim, p.i1) * p.l1
  end

  -- the spatial dims each mode takes (0: 1 or 2)
  local interp_modes = {nearest = 0, area = 0, linear = 1, bilinear = 2, bicubic = 2}

  -- The options of interpolate / Upsample checked (names, values; the input's dims are checked at
  -- the call): {size, scale_factor, mode = "nearest", align_corners (nil with "nearest")}.
  local function interp_opts(opts, fname, level)
    opts = check_opts(opts, {"size", "scale_factor", "mode", "align_corners"}, fname, level + 1)
    local mode = opts.mode or "nearest"
    if not interp_modes[mode] then
      error(string.format("%s: mode must be \"nearest\", \"linear\", \"bilinear\", \"bicubic\" or \"area\", got %s", fname,
        type(mode) == "string" and "\"" .. mode .. "\"" or tostring(mode)), level + 1)
    end
    if opts.size ~= nil and opts.scale_factor ~= nil then
      error(fname .. ": give either size or scale_factor, not both", level + 1)
    elseif opts.size == nil and opts.scale_factor == nil then
      error(fname .. ": size or scale_factor is required", level + 1)
    end
    local function check_list(v, what, ok, want)
      local l = type(v) == "table" and not st.is_tensor(v) and v or {v}
      if #l < 1 then error(fname .. ": " .. what .. " must be " .. want .. " or a table of them", level + 2) end
      for _, e in ipairs(l) do
        if not ok(e) then
          error(fname .. ": " .. what .. " must be " .. want .. " or a table of them, got " .. tostring(e), level + 2)
        end
      end
    end
    if opts.size ~= nil then
      check_list(opts.size, "size", function(e) return math.type(e) == "integer" and e >= 1 end, "an integer >= 1")
    else
      check_list(opts.scale_factor, "scale_factor", function(e) return type(e) == "number" and e > 0 and e < math.huge end,
        "a number > 0")
    end
    local ac = opts.align_corners
    if ac ~= nil then
      if type(ac) ~= "boolean" then error(fname .. ": align_corners must be a boolean, got " .. tostring(ac), level + 1) end
      if mode == "nearest" or mode == "area" then
        error(string.format("%s: align_corners can only be set with mode \"linear\", \"bilinear\" or \"bicubic\" "
          .. "(mode is \"%s\")", fname, mode), level + 1)
      end
    end
    return {size = opts.size, scale_factor = opts.scale_factor, mode = mode, align_corners = ac}
  end
  F._interp_opts = interp_opts

  -- interpolate(x, {size | scale_factor, mode = "nearest" | "linear" | "bilinear" | "bicubic" |
  -- "area", align_corners = false}): x (N, C, H, W) (nearest, bilinear, bicubic, area) or (N, C, L)
  -- (nearest, linear, area) resampled to size (a number or one per spatial dim) or floor(in *
  -- scale_factor), PyTorch 1.13's source positions (nearest_src, linear_src, cubic_src).
  -- Separable: one index_select per dim (two and their lerp for the linear modes, four weighted
  -- taps for bicubic); nearest by a whole factor is a broadcast view. "area" is
  -- adaptive_avg_pool2d to the output size, as PyTorch's.
  function F.interpolate(x, opts)
    local o = interp_opts(opts, "interpolate", 2)
    local nd = x:dim() - 2
    if nd ~= 1 and nd ~= 2 then
      error("interpolate: expected input (N, C, L) or (N, C, H, W), got " .. shape_str(x), 2)
    end
    if interp_modes[o.mode] ~= 0 and interp_modes[o.mode] ~= nd then
      error(string.format("interpolate: mode \"%s\" needs a %d-D input, got %s", o.mode, interp_modes[o.mode] + 2,
        shape_str(x)), 2)
    end
    local function per_dim(v, what)
      if type(v) == "number" then
        local l = {}
        for i = 1, nd do l[i] = v end
        return l
      end
      if #v ~= nd then
        error(string.format("interpolate: %s has %d entries for input %s with %d spatial dims", what, #v,
          shape_str(x), nd), 3)
      end
      return v
    end
    local s = x:shape()
    local ins = {table.unpack(s, 3)}
    local outs, sfs = {}, {}
    if o.size then
      outs = per_dim(o.size, "size")
    else
      sfs = per_dim(o.scale_factor, "scale_factor")
      for i = 1, nd do
        outs[i] = math.floor(ins[i] * sfs[i])
        if outs[i] < 1 then
          error(string.format("interpolate: scale_factor %s leaves an empty output for input %s", tostring(sfs[i]),
            shape_str(x)), 2)
        end
      end
    end
    local x4 = nd == 1 and x:unsqueeze(3) or x
    if o.mode == "area" then
      local y = F.adaptive_avg_pool2d(x4, nd == 1 and {1, outs[1]} or outs)
      if nd == 1 then y = y:squeeze(3) end
      return y
    end
    local dt, dev = x:dtype(), x:device()
    local plans = {}
    for i = 1, nd do
      local dim = nd == 1 and 4 or i + 2
      plans[i] = interp_plan(ins[i], outs[i], sfs[i], o.mode, o.align_corners == true, dim, dt, dev)
    end
    local y
    if nd == 2 and plans[1].rep and plans[2].rep then   -- both dims a whole factor: one broadcast view
      local n, c, h, w = table.unpack(s)
      local kh, kw = plans[1].rep, plans[2].rep
      y = x4:reshape(n, c, h, 1, w, 1):expand(n, c, h, kh, w, kw):reshape(n, c, h * kh, w * kw)
    else
      y = x4
      for i = 1, nd do y = interp_dim(y, plans[i], nd == 1 and 4 or i + 2) end
    end
    if nd == 1 then y = y:squeeze(3) end
    return y
  end
end

return install
