-- test_nn_rnn.lua — issue 14, item 3: nn.LSTM and nn.GRU (multi-layer, bidirectional,
-- batch_first, initial states, unbatched input). Reference: PyTorch's equations evaluated in plain
-- Lua numbers with the module's own weights; gradients against central finite differences.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local nn = st.nn
local test, eq, check = H.test, H.eq, H.check_near

local function sig(v) return 1 / (1 + math.exp(-v)) end
local function matvec(w, x) -- w: rows of a table, x a table
  local y = {}
  for i = 1, #w do
    local s = 0
    for j = 1, #x do s = s + w[i][j] * x[j] end
    y[i] = s
  end
  return y
end

-- one direction of one layer over xs (a list of input vectors) for one sample, in Lua numbers
local function ref_run(kind, p, xs, h, c, reverse)
  local nh = #h
  local out = {}
  local L = #xs
  for step = 1, L do
    local t = reverse and L + 1 - step or step
    local gx, gh = matvec(p.wih, xs[t]), matvec(p.whh, h)
    for i = 1, #gx do gx[i] = gx[i] + (p.bih and p.bih[i] or 0); gh[i] = gh[i] + (p.bhh and p.bhh[i] or 0) end
    local nhv, ncv = {}, {}
    for j = 1, nh do
      if kind == "LSTM" then
        local i_, f_ = sig(gx[j] + gh[j]), sig(gx[nh + j] + gh[nh + j])
        local g_, o_ = math.tanh(gx[2 * nh + j] + gh[2 * nh + j]), sig(gx[3 * nh + j] + gh[3 * nh + j])
        ncv[j] = f_ * c[j] + i_ * g_
        nhv[j] = o_ * math.tanh(ncv[j])
      else
        local r, z = sig(gx[j] + gh[j]), sig(gx[nh + j] + gh[nh + j])
        local n = math.tanh(gx[2 * nh + j] + r * gh[2 * nh + j])
        nhv[j] = (1 - z) * n + z * h[j]
      end
    end
    h, c = nhv, ncv
    out[t] = h
  end
  return out, h, c
end

-- the whole module for one sample: xs a list of vectors; returns outputs (list) and final h, c lists
local function ref_module(kind, m, xs)
  local dirs = m.bidirectional and 2 or 1
  local hs, cs = {}, {}
  local input = xs
  for l = 0, m.num_layers - 1 do
    local outs = {}
    for d = 1, dirs do
      local sfx = "_l" .. l .. (d == 2 and "_reverse" or "")
      local p = {wih = m["weight_ih" .. sfx]:tolist(), whh = m["weight_hh" .. sfx]:tolist(),
                 bih = m["bias_ih" .. sfx] and m["bias_ih" .. sfx]:tolist(), bhh = m["bias_hh" .. sfx] and m["bias_hh" .. sfx]:tolist()}
      local z = {}
      for j = 1, m.hidden_size do z[j] = 0 end
      local o, h, c = ref_run(kind, p, input, z, z, d == 2)
      outs[d] = o
      hs[#hs + 1], cs[#cs + 1] = h, c
    end
    input = {}
    for t = 1, #xs do
      local v = {}
      for d = 1, dirs do for _, e in ipairs(outs[d][t]) do v[#v + 1] = e end end
      input[t] = v
    end
  end
  return input, hs, cs
end

test("LSTM and GRU against the equations: layers, directions, layouts", function()
  for _, kind in ipairs({"LSTM", "GRU"}) do
    for _, cfg in ipairs({{num_layers = 1}, {num_layers = 2, bidirectional = true}, {num_layers = 2, bias = false}}) do
      st.manual_seed(6)
      local opts = {num_layers = cfg.num_layers, bidirectional = cfg.bidirectional, bias = cfg.bias, dtype = "f64"}
      local m = nn[kind](3, 4, opts)
      local x = st.randn(5, 2, 3, "f64")   -- (L, N, in)
      local out, state = m(x)
      local h_n = kind == "LSTM" and state[1] or state
      local xt = x:tolist()
      for n = 1, 2 do
        local xs = {}
        for t = 1, 5 do xs[t] = xt[t][n] end
        local ro, rh, rc = ref_module(kind, m, xs)
        local what = kind .. " " .. cfg.num_layers .. (cfg.bidirectional and " bidirectional" or "") .. (cfg.bias == false and " no bias" or "")
        check(out[{{}, n}], ro, 1e-12, what .. ": outputs of sample " .. n)
        check(h_n[{{}, n}], rh, 1e-12, what .. ": h_n")
        if kind == "LSTM" then check(state[2][{{}, n}], rc, 1e-12, what .. ": c_n") end
      end
      -- batch_first and unbatched give the same numbers
      local mb = nn[kind](3, 4, {num_layers = cfg.num_layers, bidirectional = cfg.bidirectional, bias = cfg.bias,
        batch_first = true, dtype = "f64"})
      mb:load_state_dict(m:state_dict())
      check(mb(x:transpose(1, 2)), out:transpose(1, 2), 1e-12, kind .. " batch_first")
      check(m(x[{{}, 1}]), out[{{}, 1}], 1e-12, kind .. " unbatched")
    end
  end
  eq(table.concat(nn.LSTM(3, 4, {bidirectional = true}):state_dict_keys(), ","),
    "weight_ih_l0,weight_hh_l0,bias_ih_l0,bias_hh_l0,weight_ih_l0_reverse,weight_hh_l0_reverse,bias_ih_l0_reverse,"
    .. "bias_hh_l0_reverse", "PyTorch's parameter names")
end)

test("initial states and gradients", function()
  st.manual_seed(2)
  local m = nn.LSTM(2, 3, {dtype = "f64"})
  local x = st.randn(4, 1, 2, "f64")
  local h0, c0 = st.randn(1, 1, 3, "f64"), st.randn(1, 1, 3, "f64")
  local out = m(x, {h0, c0})
  -- the equations from h0, c0
  local p = {wih = m.weight_ih_l0:tolist(), whh = m.weight_hh_l0:tolist(), bih = m.bias_ih_l0:tolist(), bhh = m.bias_hh_l0:tolist()}
  local xs = {}
  for t = 1, 4 do xs[t] = x[{t, 1}]:tolist() end
  local ro = ref_run("LSTM", p, xs, h0[{1, 1}]:tolist(), c0[{1, 1}]:tolist(), false)
  check(out[{{}, 1}], ro, 1e-12, "from {h0, c0}")
  -- gradient of a weighted sum of the GRU's outputs with respect to the input
  local g = nn.GRU(2, 3, {dtype = "f64", num_layers = 2})
  local r = st.randn(4, 1, 3, "f64")
  local xv = x:reshape(-1):tolist()
  local function f(flat) return (g(st.tensor(flat, "f64"):reshape(4, 1, 2)) * r):sum():item() end
  local xg = x:clone():requires_grad_()
  local loss = (g(xg) * r):sum()
  loss:backward()
  local fd = {}
  for i = 1, #xv do
    local up, dn = {table.unpack(xv)}, {table.unpack(xv)}
    up[i], dn[i] = xv[i] + 1e-6, xv[i] - 1e-6
    fd[i] = (f(up) - f(dn)) / 2e-6
  end
  check(xg.grad:reshape(-1), fd, 1e-6, "GRU input gradient")
  for name, prm in g:named_parameters() do assert(prm.grad, "no gradient for " .. name) end
  H.raises(function() return m(x, h0) end, "LSTM: hx must be a table of two tensors {h0, c0}")
  H.raises(function() return m(x, {h0, st.zeros(2, 1, 3, "f64")}) end, "LSTM: initial state of shape (2, 1, 3), expected (1, 1, 3)")
  H.raises(function() return m(st.randn(4, 1, 5, "f64")) end, "LSTM: input (4, 1, 5) has 5 features, expected 2")
  H.raises(function() return nn.GRU(2, 3, {layers = 2}) end, "GRU: unknown option 'layers'")
end)

H.done()
