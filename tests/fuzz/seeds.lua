-- seeds.lua DIR — writes the seed inputs of the libFuzzer harnesses (tests/fuzz/run.sh): small
-- safetensors files of every dtype st.save writes, with and without metadata (DIR/safetensors), IDX
-- files of every data type code (DIR/idx; run.sh adds gzip copies), and index-grammar bytes
-- (DIR/index).
local dir = assert(arg[1], "usage: seeds.lua DIR")
local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end
local st_dir, idx_dir, ix_dir = dir .. "/safetensors", dir .. "/idx", dir .. "/index"
local i = 0
for _, dt in ipairs({"f32", "f64", "i64", "i32", "bool", "f16", "bf16"}) do
  i = i + 1
  st.save(string.format("%s/seed%d.safetensors", st_dir, i), {a = st.arange(6):reshape(2, 3):to(dt),
    b = st.ones(1):to(dt)})
end
st.save(st_dir .. "/meta.safetensors", {x = st.zeros(2, 2)}, {format = "pt", note = "seed"})
st.save(st_dir .. "/empty.safetensors", {e = st.zeros(0, 3)})
-- IDX: magic 0 0 type ndim, big-endian dims, data
local types = {[0x08] = 1, [0x09] = 1, [0x0B] = 2, [0x0C] = 4, [0x0D] = 4, [0x0E] = 8}
for code, size in pairs(types) do
  local dims = {2, 3}
  local b = {string.char(0, 0, code, #dims)}
  for _, d in ipairs(dims) do b[#b + 1] = string.pack(">I4", d) end
  b[#b + 1] = string.rep(string.char(1), 6 * size)
  write(string.format("%s/t%02x.idx", idx_dir, code), table.concat(b))
end
for k = 1, 8 do
  local t = {}
  for j = 1, 24 do t[j] = string.char((k * 37 + j * 11) % 256) end
  write(string.format("%s/g%d", ix_dir, k), table.concat(t))
end
