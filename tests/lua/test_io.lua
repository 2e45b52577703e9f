-- test_io.lua — st.save / st.load (safetensors) and st.read_idx from Lua: nested tables flattened
-- with "." keys, metadata, every dtype, views, and every failure raised as a Lua error naming the file.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check = H.test, H.eq, H.check_near

local dir = os.tmpname()  -- a unique name; the files of this test live next to it
os.remove(dir)
local function path(name) return dir .. "-" .. name end

local function keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return table.concat(ks, " ")
end

test("save_load_nested_and_metadata", function()
  local w = st.tensor{{1, 2, 3}, {4, 5, 6}}
  local p = path("nested.safetensors")
  st.save(p, {fc1 = {weight = w, bias = st.tensor({1, 2}, "i64")}, layers = {st.ones(2), st.zeros(3)},
              scale = st.tensor(2.5, "f64")},
          {epoch = 3, note = "hi", done = true})
  local t, meta = st.load(p)
  eq(keys(t), "fc1.bias fc1.weight layers.1 layers.2 scale", "flattened names")
  check(t["fc1.weight"], {{1, 2, 3}, {4, 5, 6}})
  eq(t["fc1.weight"]:dtype(), "f32")
  eq(t["fc1.bias"]:dtype(), "i64"); check(t["fc1.bias"], {1, 2})
  check(t["layers.1"], {1, 1}); check(t["layers.2"], {0, 0, 0})
  eq(t.scale:dim(), 0); eq(t.scale:item(), 2.5); eq(t.scale:dtype(), "f64")
  eq(meta.epoch, "3"); eq(meta.note, "hi"); eq(meta.done, "true")
  -- Without metadata: an empty table comes back.
  st.save(p, {x = w})
  local t2, m2 = st.load(p)
  eq(keys(t2), "x"); eq(next(m2), nil, "no metadata")
  os.remove(p)
end)

test("every_dtype_and_views", function()
  local p = path("dtypes.safetensors")
  local base = st.arange(12):reshape(3, 4)
  local tbl = {}
  for _, dt in ipairs{"f32", "f64", "i32", "i64", "bool", "f16", "bf16"} do
    tbl[dt] = {full = base:to(dt), view = base:t():to(dt), empty = st.zeros({0, 2}, dt)}
  end
  tbl.strided = base[{{}, {1, 4, 2}}]   -- columns 1 and 3
  st.save(p, tbl)
  local t = st.load(p)
  for _, dt in ipairs{"f32", "f64", "i32", "i64", "bool", "f16", "bf16"} do
    eq(t[dt .. ".full"]:dtype(), dt)
    check(t[dt .. ".full"], tbl[dt].full, 0, dt)
    check(t[dt .. ".view"], tbl[dt].view, 0, dt .. " view")
    eq(H.show(t[dt .. ".empty"]:shape()), "{0, 2}")
  end
  check(t.strided, {{0, 2}, {4, 6}, {8, 10}})
  os.remove(p)
end)

test("errors_are_lua_errors", function()
  local p = path("bad.safetensors")
  H.raises(function() st.load(path("missing.safetensors")) end, "cannot open")
  local f = io.open(p, "wb"); f:write("\16\0\0\0\0\0\0\0{\"a\":{}}        "); f:close()
  H.raises(function() st.load(p) end, "missing \"dtype\"")
  f = io.open(p, "wb"); f:write("xx"); f:close()
  H.raises(function() st.load(p) end, p)
  H.raises(function() st.save(path("nodir/x/y.safetensors"), {a = st.ones(1)}) end, "cannot create")
  H.raises(function() st.save(p, {a = 1}) end, "\"a\" is a number")
  H.raises(function() st.save(p, {a = {b = "x"}}) end, "\"a.b\" is a string")
  H.raises(function() st.save(p, {["a.b"] = st.ones(1), a = {b = st.ones(1)}}) end, "duplicate")
  H.raises(function() st.save(p, {[true] = st.ones(1)}) end, "key of type boolean")
  H.raises(function() st.save(p, {a = st.ones(1)}, {k = {}}) end, "metadata")
  local cyc = {}; cyc.self = cyc
  H.raises(function() st.save(p, cyc) end, "nested deeper")
  H.raises(function() st.save(p) end, "table expected")
  H.raises(function() st.read_idx(path("nothere.idx")) end, "read_idx")
  H.raises(function() st.read_idx(p) end, "too short")
  os.remove(p)
  -- The runtime stays usable.
  eq(st.ones(2):sum():item(), 2)
end)

-- A NUL byte in metadata (or in a path) would be cut off silently by the C strings underneath:
-- it is refused, and nothing is written.
test("nul_bytes_refused", function()
  local p = path("nul.safetensors")
  H.raises(function() st.save(p, {a = st.ones(1)}, {note = "a\0b"}) end, "metadata \"note\": the value contains a NUL")
  H.raises(function() st.save(p, {a = st.ones(1)}, {["k\0x"] = "v"}) end, "metadata key contains a NUL")
  eq(io.open(p, "rb"), nil, "nothing written")
  H.raises(function() st.save(p .. "\0.x", {a = st.ones(1)}) end, "path contains a NUL")
  eq(io.open(p, "rb"), nil, "nothing written")
  H.raises(function() st.load(p .. "\0.x") end, "path contains a NUL")
  H.raises(function() st.read_idx(p .. "\0.x") end, "path contains a NUL")
  -- A BOOL byte other than 0/1 in a file loads as true (1).
  local f = io.open(p, "wb")
  f:write("\56\0\0\0\0\0\0\0{\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}} ", "\2\255")
  f:close()
  local t = st.load(p)
  eq(t.b:sum():item(), 2, "sum of two true values")
  eq(t.b:tolist()[1], true)
  os.remove(p)
end)

test("failed_save_keeps_old_file", function()
  local p = path("keep.safetensors")
  st.save(p, {w = st.tensor{1, 2, 3}})
  H.raises(function() st.save(p, {w = st.ones(1), v = 3}) end, "not a tensor")
  check(st.load(p).w, {1, 2, 3})
  os.remove(p)
end)

test("read_idx", function()
  local p = path("x.idx")
  local f = io.open(p, "wb")
  f:write("\0\0\8\2", "\0\0\0\2", "\0\0\0\3", "\1\2\3\250\251\252"); f:close()
  local t = st.read_idx(p)
  eq(t:dtype(), "i32"); check(t, {{1, 2, 3}, {250, 251, 252}})
  os.remove(p)
  local labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"
  local lf = io.open(labels, "rb")
  if lf then
    lf:close()
    local y = st.read_idx(labels)
    eq(H.show(y:shape()), "{10000}")
    check(y[{{1, 5}}], {9, 2, 1, 1, 6})
  end
end)

H.done()
