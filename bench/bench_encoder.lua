-- bench_encoder.lua — stitch's side of bench_encoder.py: one training step (forward, backward,
-- SGD) of nn.TransformerEncoderLayer(128, 4, {dim_feedforward = 512, batch_first = true}) on a
-- causal (B, L, 128) batch, with dropout 0.1 (training) and 0; prints `key value` lines (median ms
-- per step and the last loss).
--   build/stitch bench/bench_encoder.lua [--quick] [OUT]
local quick, out_path = false, nil
for _, a in ipairs(arg) do
  if a == "--quick" then quick = true
  elseif a:match("^%-") then error("bench_encoder.lua: unknown option " .. a .. " (--quick, or a results file)", 0)
  else out_path = a end
end
local SHAPES = {{16, 64}, {4, 256}}   -- B, L
local results = {}
local function put(k, v) results[#results + 1] = string.format("%s %.9g", k, v) end

for _, s in ipairs(SHAPES) do
  local B, L = table.unpack(s)
  for _, drop in ipairs({0.1, 0}) do
    st.manual_seed(1)
    local layer = st.nn.TransformerEncoderLayer(128, 4, {dim_feedforward = 512, dropout = drop, batch_first = true})
    local opt = st.optim.SGD(layer:parameters(), {lr = 0.01})
    local x = st.sync(st.randn({B, L, 128}))
    local loss
    local function step()
      opt:zero_grad()
      local y = layer(x, {is_causal = true})
      loss = (y * y):mean()
      loss:backward()
      opt:step()
    end
    for _ = 1, 5 do step(); st.sync(loss) end
    local ts = {}
    for _ = 1, quick and 3 or 7 do
      local t0 = st._now()
      for _ = 1, 10 do step() end
      st.sync(loss)
      ts[#ts + 1] = (st._now() - t0) * 100
    end
    table.sort(ts)
    local tag = string.format("b%dl%d_drop%g", B, L, drop)
    put(tag .. "_ms", ts[(#ts + 1) // 2])
    put(tag .. "_loss", loss:item())
  end
end
local text = table.concat(results, "\n") .. "\n"
if out_path then
  local f = assert(io.open(out_path, "w"))
  f:write(text)
  f:close()
else
  io.write(text)
end
