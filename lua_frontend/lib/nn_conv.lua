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
        (dil or 1) > 1 and " (dilation " .. dil .. ")" or "", pads, shape_str(x)), 3)
    end
    return o
  end

  -- The padding before and after along one dim: a number (both sides), or "same" (stride 1; the
  -- output as long as the input, the extra padding row after, as PyTorch) or "valid" (none).
  local function conv_pads(padding, k, dil, stride, which, fname)
    if padding == "valid" then return 0, 0 end
    if padding == "same" then
      if stride ~= 1 then error(fname .. ": padding \"same\" needs stride 1, got stride " .. stride, 3) end
      local total = dil * (k - 1)
      return total // 2, total - total // 2
    end
    return padding[which], padding[which]
  end

  -- The columns of a convolution (im2col) as one view of the zero-padded input, (N, G, C/G*kh*kw,
  -- Ho*Wo): row (c, i, j) of image n, group g holds tap (i, j) of channel c at every output position,
  -- in the weight's (c, i, j) order. st._zero_pad is one masked view and as_strided an overlapping one,
  -- so the columns cost one gather kernel where the matmul reads them. g: the geometry (conv2d's
  -- table: sizes n c h w o kh kw, stride sh sw, dilation dh dw, padding pt pb pl pr, groups, ho wo).
  local function conv_cols(x, g)
    local xp = x
    if g.pt + g.pb + g.pl + g.pr > 0 then xp = st._zero_pad(x, {0, 0, g.pt, g.pl}, {0, 0, g.pb, g.pr}) end
    local hp, wp = g.h + g.pt + g.pb, g.w + g.pl + g.pr
    local wc = g.c // g.groups
    return xp:as_strided({g.n, g.groups, wc, g.kh, g.kw, g.ho, g.wo},
        {g.c * hp * wp, wc * hp * wp, hp * wp, g.dh * wp, g.dw, g.sh * wp, g.sw})
      :reshape(g.n, g.groups, wc * g.kh * g.kw, g.ho * g.wo)
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
  -- (stride - 1 zeros between its elements: conv_dilate) with the flipped, transposed weight,
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

  -- gy (N, C, H, W) with sh - 1 zero rows between its rows and sw - 1 zero columns between its
  -- columns: a size-1 dim after each zero-padded to the stride, stored once in that 6-dim shape
  -- (st._store; its kernel loops over those dims, no division), then merged and the trailing zeros
  -- cut (free views of the buffer). Left as views, the kernel's kh*kw windows read every element
  -- through the merge, unravelled by division (a stride-2 block's columns: 680 ms a step).
  local function conv_dilate(gy, sh, sw)
    if sh == 1 and sw == 1 then return gy end
    local n, c, h, w = table.unpack(gy:shape())
    return st._store(st._zero_pad(gy:reshape(n, c, h, 1, w, 1), {0, 0, 0, 0, 0, 0}, {0, 0, 0, sh - 1, 0, sw - 1}))
      :reshape(n, c, h * sh, w * sw):narrow(3, 1, (h - 1) * sh + 1):narrow(4, 1, (w - 1) * sw + 1)
  end

  -- Convolution with a convolution's backward (st.autograd.Function): the input gradient is the
  -- convolution of the output gradient with the flipped, transposed weight (conv_input_grad_geometry),
  -- one matmul over its columns instead of a sum over the kh*kw overlapping windows of the columns'
  -- gradient; the weight gradient is the output gradient times the columns, summed over the batch.
  local Conv2dFn = st.autograd.Function("conv2d")
  function Conv2dFn.forward(ctx, x, weight, g)
    local cols = conv_cols(x, g)
    ctx:save_for_backward(cols, weight)   -- the forward's columns: one gather kernel for both matmuls
    ctx.g = g
    return conv_forward(x, weight, g, cols)
  end
  function Conv2dFn.backward(ctx, gy)
    local cols, weight = ctx.saved_tensors[1], ctx.saved_tensors[2]
    local g = ctx.g
    local gx, gw
    local og, wc = g.o // g.groups, g.c // g.groups
    if ctx.needs_input_grad[1] then
      local t = conv_input_grad_geometry(g)
      local wt = weight:reshape(g.groups, og, wc, g.kh, g.kw):transpose(2, 3):flip(4, 5)
        :reshape(g.c, og, g.kh, g.kw)
      gx = conv_forward(conv_dilate(gy:reshape(g.n, g.o, g.ho, g.wo), g.sh, g.sw), wt, t):reshape(g.n, g.c, g.h, g.w)
    end
    if ctx.needs_input_grad[2] then
      gw = gy:reshape(g.n, g.groups, og, g.ho * g.wo):matmul(cols:transpose(3, 4)):sum(1)
        :reshape(g.o, wc, g.kh, g.kw)
    end
    return gx, gw
  end

  -- conv2d(x, weight, bias, {stride = 1, padding = 0 | "same" | "valid", dilation = 1, groups = 1}):
  -- x (N, C, H, W) or (C, H, W); weight (O, C / groups, kh, kw). The weight times the columns, a view
  -- of the padded input (conv_cols); the backward is Conv2dFn's, or autograd's through the view when
  -- the padding is wider than the dilated kernel (the input gradient sums the overlapping windows).
  function F.conv2d(x, weight, bias, opts)
    opts = check_opts(opts, {"stride", "padding", "dilation", "groups"}, "conv2d")
    local unbatched = x:dim() == 3
    if unbatched then x = x:unsqueeze(1) end
    if x:dim() ~= 4 or weight:dim() ~= 4 then
      error("conv2d: expected input (N, C, H, W) and weight (O, C / groups, kh, kw), got " .. shape_str(x)
        .. " and " .. shape_str(weight), 2)
    end
    local sh, sw = int_pair(opts.stride or 1, 1, "stride", "conv2d")
    local dh, dw = int_pair(opts.dilation or 1, 1, "dilation", "conv2d")
    local groups = check_int(opts.groups or 1, 1, "groups", "conv2d", 2)
    local padding = opts.padding or 0
    if padding ~= "same" and padding ~= "valid" then
      if type(padding) == "string" then
        error("conv2d: padding must be a number, a pair, \"same\" or \"valid\", got \"" .. padding .. "\"", 2)
      end
      padding = {int_pair(padding, 0, "padding", "conv2d")}
    end
    local n, c, h, w = table.unpack(x:shape())
    local o, wc, kh, kw = table.unpack(weight:shape())
    if c % groups ~= 0 or o % groups ~= 0 then
      error(string.format("conv2d: groups=%d must divide the input's %d channels and the weight's %d outputs "
        .. "(input %s, weight %s)", groups, c, o, shape_str(x), shape_str(weight)), 2)
    end
    if wc * groups ~= c then
      error("conv2d: input " .. shape_str(x) .. " has " .. c .. " channels but weight "
        .. shape_str(weight) .. " expects " .. wc * groups .. (groups > 1 and " (" .. wc .. " per group, groups="
        .. groups .. ")" or ""), 2)
    end
    local pt, pb = conv_pads(padding, kh, dh, sh, 1, "conv2d")
    local pl, pr = conv_pads(padding, kw, dw, sw, 2, "conv2d")
    local ho, wo = out_size(h, kh, sh, pt + pb, "conv2d", x, dh), out_size(w, kw, sw, pl + pr, "conv2d", x, dw)
    local g = {n = n, c = c, h = h, w = w, o = o, kh = kh, kw = kw, sh = sh, sw = sw, dh = dh, dw = dw,
      pt = pt, pb = pb, pl = pl, pr = pr, groups = groups, ho = ho, wo = wo}
    local y
    if conv_input_grad_geometry(g) then y = Conv2dFn.apply(x, weight, g) else y = conv_forward(x, weight, g) end
    if bias then y = add_bias(y, bias:reshape(o, 1)) end
    y = y:reshape(n, o, ho, wo)
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
  function F.max_pool2d(x, kernel, opts)
    local g = pool_args(x, kernel, opts, "max_pool2d", {"stride", "padding", "ceil_mode"})
    local unbatched = x:dim() == 3
    if unbatched then x = x:unsqueeze(1) end
    local n, c, h, w = table.unpack(x:shape())
    local ho = pool_out(h, g.kh, g.sh, g.ph, g.ceil, "max_pool2d", x)
    local wo = pool_out(w, g.kw, g.sw, g.pw, g.ceil, "max_pool2d", x)
    local y
    if g.sh == g.kh and g.sw == g.kw and g.ph == 0 and g.pw == 0 and ho * g.kh <= h and wo * g.kw <= w then
      if ho * g.kh ~= h then x = x:narrow(3, 1, ho * g.kh) end
      if wo * g.kw ~= w then x = x:narrow(4, 1, wo * g.kw) end
      y = x:reshape(n, c, ho, g.kh, wo, g.kw):max({4, 6})
    else
      y = pool_windows(x, g, ho, wo, -math.huge, st.maximum)
    end
    if unbatched then y = y:squeeze(1) end
    return y
  end

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
  function F.avg_pool2d(x, kernel, opts)
    local g = pool_args(x, kernel, opts, "avg_pool2d", {"stride", "padding", "ceil_mode", "count_include_pad"})
    local cip = opts and opts.count_include_pad
    if cip ~= nil and type(cip) ~= "boolean" then
      error("avg_pool2d: count_include_pad must be a boolean, got " .. tostring(cip), 2)
    end
    local unbatched = x:dim() == 3
    if unbatched then x = x:unsqueeze(1) end
    local _, _, h, w = table.unpack(x:shape())
    local ho = pool_out(h, g.kh, g.sh, g.ph, g.ceil, "avg_pool2d", x)
    local wo = pool_out(w, g.kw, g.sw, g.pw, g.ceil, "avg_pool2d", x)
    local y = pool_windows(x, g, ho, wo, 0, st.add)
    local inv = pool_divisors(h, w, g, ho, wo, cip ~= false, x:dtype(), x:device())
    y = y * (inv or 1 / (g.kh * g.kw))
    if unbatched then y = y:squeeze(1) end
    return y
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
end

return install
