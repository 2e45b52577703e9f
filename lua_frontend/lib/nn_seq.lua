-- nn_seq.lua — st.nn's sequence layers: MultiheadAttention, TransformerEncoderLayer, LSTM and GRU.
-- nn.lua calls the returned install(M, I) with its module table (the layers it builds on:
-- M.Linear, M.LayerNorm, M.Dropout) and the internals it shares (I: Module, F, init, check_opts,
-- check_size, opt_dtype, shape_str).
local st = ...

local function install(M, I)
  local Module, F, init = I.Module, I.F, I.init
  local check_opts, check_size, opt_dtype, shape_str = I.check_opts, I.check_size, I.opt_dtype, I.shape_str
  -- MultiheadAttention(embed_dim, num_heads, {bias = true, batch_first = false, dropout = 0, dtype}):
  -- in_proj_weight (3E, E) and in_proj_bias (3E) (PyTorch's names and init: xavier_uniform, zero
  -- bias), out_proj a Linear(E, E) with a zero bias. forward(query, key, value, {attn_mask,
  -- key_padding_mask, need_weights = true, average_attn_weights = true, is_causal = false}) returns
  -- the output and the attention weights (averaged over the heads; nil with need_weights = false).
  -- Inputs (L, N, E), or (N, L, E) with batch_first. key_padding_mask (N, S): true marks a padding
  -- key (ignored), as PyTorch; a bool attn_mask (L, S) likewise marks what may NOT be attended
  -- (PyTorch's nn.MultiheadAttention convention, the opposite of F.scaled_dot_product_attention's).
  local MultiheadAttention = Module:extend("MultiheadAttention")
  M.MultiheadAttention = MultiheadAttention
  function MultiheadAttention:__init(e, h, opts)
    opts = check_opts(opts, {"bias", "batch_first", "dropout", "dtype"}, "MultiheadAttention", 3)
    check_size(e, "embed_dim", "MultiheadAttention", 1)
    check_size(h, "num_heads", "MultiheadAttention", 1)
    if e % h ~= 0 then
      error("MultiheadAttention: num_heads (" .. h .. ") must divide embed_dim (" .. e .. ")", 3)
    end
    self.embed_dim, self.num_heads = e, h
    self.batch_first = opts.batch_first == true
    self.dropout = opts.dropout or 0
    if type(self.dropout) ~= "number" or not (self.dropout >= 0 and self.dropout <= 1) then
      error("MultiheadAttention: dropout must be in [0, 1], got " .. tostring(opts.dropout), 3)
    end
    local dt = opt_dtype(opts)
    local bound = math.sqrt(6 / (e + 3 * e))
    self:register_parameter("in_proj_weight", init.uniform({3 * e, e}, -bound, bound, dt))
    if opts.bias ~= false then self:register_parameter("in_proj_bias", st.zeros({3 * e}, dt)) end
    self:add_module("out_proj", M.Linear(e, e, {bias = opts.bias ~= false, dtype = dt}))
    if self.out_proj.bias then
      local guard <close> = st.no_grad()
      self.out_proj.bias:zero_()
    end
  end
  function MultiheadAttention:forward(q, k, v, opts)
    opts = check_opts(opts, {"attn_mask", "key_padding_mask", "need_weights", "average_attn_weights", "is_causal"},
      "MultiheadAttention", 2)
    if q:dim() ~= 3 or k:dim() ~= 3 or v:dim() ~= 3 then
      error("MultiheadAttention: expected 3-D query, key and value, got " .. shape_str(q) .. ", " .. shape_str(k)
        .. ", " .. shape_str(v), 2)
    end
    if not self.batch_first then q, k, v = q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2) end
    local n, l, e = table.unpack(q:shape())
    local s = k:size(2)
    if e ~= self.embed_dim or k:size(3) ~= e or v:size(3) ~= e or k:size(1) ~= n or v:size(1) ~= n or v:size(2) ~= s then
      error("MultiheadAttention: query " .. shape_str(q) .. ", key " .. shape_str(k) .. ", value " .. shape_str(v)
        .. " do not fit embed_dim " .. self.embed_dim, 2)
    end
    local h, d = self.num_heads, e // self.num_heads
    local w, b = self.in_proj_weight, self.in_proj_bias
    local function proj(x, i, len)
      return F.linear(x, w:narrow(1, (i - 1) * e + 1, e), b and b:narrow(1, (i - 1) * e + 1, e))
        :reshape(n, len, h, d):transpose(2, 3)                          -- (N, H, len, d)
    end
    local qh, kh, vh = proj(q, 1, l), proj(k, 2, s), proj(v, 3, s)
    local am, kp = opts.attn_mask, opts.key_padding_mask
    if kp ~= nil then
      if kp:dim() ~= 2 or kp:size(1) ~= n or kp:size(2) ~= s then
        error("MultiheadAttention: key_padding_mask must be (N, S) = (" .. n .. ", " .. s .. "), got " .. shape_str(kp), 2)
      end
      kp = kp:reshape(n, 1, 1, s)
    end
    -- a float mask of another dtype than the heads' promotes the scores: the composed form
    local function fits(m) return m == nil or m:dtype() == "bool" or m:dtype() == qh:dtype() end
    if opts.need_weights == false and fits(am) and fits(kp) then
      -- no weights asked for: the attention op (one kernel, the scores never stored, dropout in it;
      -- F.scaled_dot_product_attention's fast path), the masks as one additive mask (their
      -- broadcast: (N, 1, L, S) for a 2-D attn_mask and a key padding mask)
      local mask
      for _, m in ipairs({am or false, kp or false}) do
        if m then
          if m:dtype() == "bool" then m = st.where(m, -math.huge, st.zeros({}, qh:dtype())) end
          mask = mask and mask + m or m
        end
      end
      local out = st._attention(qh, kh, vh, 1 / math.sqrt(d), not am and not not opts.is_causal, mask,
        self.training and self.dropout or 0)
      out = self.out_proj(out:transpose(2, 3):reshape(n, l, e))
      if not self.batch_first then out = out:transpose(1, 2) end
      return out, nil
    end
    local scores = qh:matmul(kh:transpose(3, 4)) * (1 / math.sqrt(d)) -- (N, H, L, S)
    if opts.is_causal and not am then
      am = st.arange(s):reshape(1, s):gt(st.arange(l):reshape(l, 1))
    end
    if am ~= nil then
      if am:dtype() == "bool" then scores = st.where(am, -math.huge, scores) else scores = scores + am end
    end
    if kp ~= nil then
      if kp:dtype() == "bool" then scores = st.where(kp, -math.huge, scores) else scores = scores + kp end
    end
    local attn = scores:softmax(4)
    local weights = attn
    if self.training and self.dropout > 0 then attn = F.dropout(attn, self.dropout, true) end
    local out = attn:matmul(vh):transpose(2, 3):reshape(n, l, e)
    out = self.out_proj(out)
    if not self.batch_first then out = out:transpose(1, 2) end
    if opts.need_weights == false then return out, nil end
    if opts.average_attn_weights ~= false then weights = weights:mean(2) end
    return out, weights
  end
  function MultiheadAttention:extra_repr()
    return string.format("embed_dim=%d, num_heads=%d, batch_first=%s", self.embed_dim, self.num_heads,
      tostring(self.batch_first))
  end

  -- TransformerEncoderLayer(d_model, nhead, {dim_feedforward = 2048, dropout = 0.1, activation =
  -- "relu" | "gelu", batch_first = false, norm_first = false, layer_norm_eps = 1e-5, bias = true,
  -- dtype}): self-attention and a feed-forward block, each with a residual and a LayerNorm (after
  -- each, or before with norm_first), PyTorch's submodule names. forward(src, {src_mask,
  -- src_key_padding_mask, is_causal}).
  local TransformerEncoderLayer = Module:extend("TransformerEncoderLayer")
  M.TransformerEncoderLayer = TransformerEncoderLayer
  function TransformerEncoderLayer:__init(dm, nhead, opts)
    opts = check_opts(opts, {"dim_feedforward", "dropout", "activation", "batch_first", "norm_first",
      "layer_norm_eps", "bias", "dtype"}, "TransformerEncoderLayer", 3)
    local ff, p = opts.dim_feedforward or 2048, opts.dropout or 0.1
    local act = opts.activation or "relu"
    if act ~= "relu" and act ~= "gelu" then
      error("TransformerEncoderLayer: activation must be \"relu\" or \"gelu\", got " .. tostring(act), 3)
    end
    local dt, eps, bias = opts.dtype, opts.layer_norm_eps or 1e-5, opts.bias ~= false
    self:add_module("self_attn", M.MultiheadAttention(dm, nhead, {dropout = p, batch_first = opts.batch_first,
      bias = bias, dtype = dt}))
    self:add_module("linear1", M.Linear(dm, ff, {bias = bias, dtype = dt}))
    self:add_module("dropout", M.Dropout(p))
    self:add_module("linear2", M.Linear(ff, dm, {bias = bias, dtype = dt}))
    self:add_module("norm1", M.LayerNorm(dm, {eps = eps, bias = bias, dtype = dt}))
    self:add_module("norm2", M.LayerNorm(dm, {eps = eps, bias = bias, dtype = dt}))
    self:add_module("dropout1", M.Dropout(p))
    self:add_module("dropout2", M.Dropout(p))
    self.activation_name, self.norm_first = act, opts.norm_first == true
  end
  function TransformerEncoderLayer:forward(src, opts)
    opts = check_opts(opts, {"src_mask", "src_key_padding_mask", "is_causal"}, "TransformerEncoderLayer", 2)
    local act = self.activation_name == "gelu" and F.gelu or F.relu
    local function sa(x)
      local y = self.self_attn(x, x, x, {attn_mask = opts.src_mask, key_padding_mask = opts.src_key_padding_mask,
        need_weights = false, is_causal = opts.is_causal})
      return self.dropout1(y)
    end
    local function ffb(x) return self.dropout2(self.linear2(self.dropout(act(self.linear1(x))))) end
    local x = src
    if self.norm_first then
      x = x + sa(self.norm1(x))
      x = x + ffb(self.norm2(x))
    else
      x = self.norm1(x + sa(x))
      x = self.norm2(x + ffb(x))
    end
    return x
  end

  -- LSTM / GRU(input_size, hidden_size, {num_layers = 1, bias = true, batch_first = false, dropout = 0,
  -- bidirectional = false, dtype}): PyTorch's equations, parameter names (weight_ih_l0, weight_hh_l0,
  -- bias_ih_l0, bias_hh_l0, ..._reverse) and gate order (LSTM i, f, g, o; GRU r, z, n), every
  -- parameter ~ U(-1/sqrt(hidden), 1/sqrt(hidden)). Input (L, N, in), (N, L, in) with batch_first, or
  -- unbatched (L, in). LSTM: lstm(x [, {h0, c0}]) returns output, {h_n, c_n}; GRU: gru(x [, h0])
  -- returns output, h_n; h0/c0/h_n/c_n are (layers * directions, N, hidden). The input projections of
  -- all time steps are one matmul per layer and direction; the recurrence is a Lua loop over the steps
  -- (lazy: one flush for the whole sequence, forward and backward).
  local function recurrent_class(name, ngates)
    local cls = Module:extend(name)
    function cls:__init(nin, nh, opts)
      opts = check_opts(opts, {"num_layers", "bias", "batch_first", "dropout", "bidirectional", "dtype"}, name, 3)
      check_size(nin, "input_size", name, 1)
      check_size(nh, "hidden_size", name, 1)
      local layers = opts.num_layers or 1
      check_size(layers, "num_layers", name, 1)
      local p = opts.dropout or 0
      if type(p) ~= "number" or p < 0 or p > 1 then error(name .. ": dropout must be in [0, 1], got " .. tostring(p), 3) end
      self.input_size, self.hidden_size, self.num_layers, self.dropout = nin, nh, layers, p
      self.batch_first, self.bidirectional = opts.batch_first == true, opts.bidirectional == true
      self.has_bias = opts.bias ~= false
      local dirs = self.bidirectional and 2 or 1
      local bound, dt = 1 / math.sqrt(nh), opt_dtype(opts)
      for l = 0, layers - 1 do
        for d = 1, dirs do
          local sfx = "_l" .. l .. (d == 2 and "_reverse" or "")
          local lin = l == 0 and nin or nh * dirs
          self:register_parameter("weight_ih" .. sfx, init.uniform({ngates * nh, lin}, -bound, bound, dt))
          self:register_parameter("weight_hh" .. sfx, init.uniform({ngates * nh, nh}, -bound, bound, dt))
          if self.has_bias then
            self:register_parameter("bias_ih" .. sfx, init.uniform({ngates * nh}, -bound, bound, dt))
            self:register_parameter("bias_hh" .. sfx, init.uniform({ngates * nh}, -bound, bound, dt))
          end
        end
      end
    end
    -- one direction of one layer over x (L, N, in): the outputs (L, N, H) and the last state
    function cls:_run(x, sfx, h, c, reverse)
      local nh = self.hidden_size
      local wih, whh = self["weight_ih" .. sfx], self["weight_hh" .. sfx]
      local bih, bhh = self["bias_ih" .. sfx], self["bias_hh" .. sfx]
      local L = x:size(1)
      local xp = x:matmul(wih:t())                     -- (L, N, gates * H)
      if bih then xp = F._add_bias(xp, bih) end        -- (under autocast the bias in the low precision)
      local whh_t = whh:t()
      local outs = {}
      for step = 1, L do
        local t = reverse and L + 1 - step or step
        local hp = h:matmul(whh_t)
        if bhh then hp = F._add_bias(hp, bhh) end
        local xt = xp[t]
        if ngates == 4 then   -- LSTM
          local gates = xt + hp
          local i = gates:narrow(2, 1, nh):sigmoid()
          local f = gates:narrow(2, nh + 1, nh):sigmoid()
          local g = gates:narrow(2, 2 * nh + 1, nh):tanh()
          local o = gates:narrow(2, 3 * nh + 1, nh):sigmoid()
          c = f * c + i * g
          h = o * c:tanh()
        else                  -- GRU
          local r = (xt:narrow(2, 1, nh) + hp:narrow(2, 1, nh)):sigmoid()
          local z = (xt:narrow(2, nh + 1, nh) + hp:narrow(2, nh + 1, nh)):sigmoid()
          local n = (xt:narrow(2, 2 * nh + 1, nh) + r * hp:narrow(2, 2 * nh + 1, nh)):tanh()
          h = (1 - z) * n + z * h
        end
        outs[t] = h
      end
      return st.stack(outs, 1), h, c
    end
    function cls:forward(x, hx)
      local lstm = ngates == 4
      local unbatched = x:dim() == 2
      if unbatched then x = x:unsqueeze(2) elseif x:dim() ~= 3 then
        error(name .. ": expected input (L, N, " .. self.input_size .. ") or (L, " .. self.input_size .. "), got "
          .. shape_str(x), 2)
      end
      if self.batch_first and not unbatched then x = x:transpose(1, 2) end
      if x:size(3) ~= self.input_size then
        error(name .. ": input " .. shape_str(x) .. " has " .. x:size(3) .. " features, expected " .. self.input_size, 2)
      end
      local n, nh, dirs = x:size(2), self.hidden_size, self.bidirectional and 2 or 1
      local h0, c0
      if hx ~= nil then
        if lstm then
          if type(hx) ~= "table" or st.is_tensor(hx) or not st.is_tensor(hx[1]) or not st.is_tensor(hx[2]) then
            error(name .. ": hx must be a table of two tensors {h0, c0}", 2)
          end
          h0, c0 = hx[1], hx[2]
        else
          h0 = hx
        end
        local want = self.num_layers * dirs
        for _, t in ipairs({h0, c0}) do
          if unbatched then t = t:unsqueeze(2) end
          if t:dim() ~= 3 or t:size(1) ~= want or t:size(2) ~= n or t:size(3) ~= nh then
            error(string.format("%s: initial state of shape %s, expected (%d, %d, %d)", name, shape_str(t), want,
              n, nh), 2)
          end
        end
        if unbatched then
          h0 = h0:unsqueeze(2)
          if c0 then c0 = c0:unsqueeze(2) end
        end
      end
      -- under autocast the whole recurrence runs in the low precision, as PyTorch's fused cells:
      -- the matmuls return it, the biases are cast (F._add_bias) and so are the initial states
      local ad = st.autocast_dtype()
      local low = ad and x:dtype() ~= "f64" and ad or nil
      if low then
        if h0 then h0 = h0:to(low) end
        if c0 then c0 = c0:to(low) end
      end
      local zero = st.zeros({n, nh}, low or x:dtype()):to(x:device())
      local hn, cn = {}, {}
      local input = x
      for l = 0, self.num_layers - 1 do
        local outs = {}
        for d = 1, dirs do
          local k = l * dirs + d
          local h = h0 and h0[k] or zero
          local c = lstm and (c0 and c0[k] or zero) or nil
          local sfx = "_l" .. l .. (d == 2 and "_reverse" or "")
          local o, hl, cl = self:_run(input, sfx, h, c, d == 2)
          outs[d], hn[k], cn[k] = o, hl, cl
        end
        input = dirs == 2 and st.cat(outs, 3) or outs[1]
        if self.training and self.dropout > 0 and l < self.num_layers - 1 then
          input = F.dropout(input, self.dropout, true)
        end
      end
      local out = input
      local h_n = st.stack(hn, 1)
      local c_n = lstm and st.stack(cn, 1) or nil
      if unbatched then
        out = out:squeeze(2)
        h_n = h_n:squeeze(2)
        if c_n then c_n = c_n:squeeze(2) end
      elseif self.batch_first then
        out = out:transpose(1, 2)
      end
      if lstm then return out, {h_n, c_n} end
      return out, h_n
    end
    function cls:extra_repr()
      local s = string.format("%d, %d", self.input_size, self.hidden_size)
      if self.num_layers ~= 1 then s = s .. ", num_layers=" .. self.num_layers end
      if self.batch_first then s = s .. ", batch_first=true" end
      if self.bidirectional then s = s .. ", bidirectional=true" end
      if self.dropout ~= 0 then s = s .. string.format(", dropout=%g", self.dropout) end
      if not self.has_bias then s = s .. ", bias=false" end
      return s
    end
    M[name] = cls
  end
  recurrent_class("LSTM", 4)
  recurrent_class("GRU", 3)
end

return install
