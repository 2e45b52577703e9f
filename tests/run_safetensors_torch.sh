#!/bin/sh
# run_safetensors_torch.sh — safetensors interop with PyTorch (Debian's /usr/bin/python3 with torch):
# stitch writes a checkpoint that Python reads and checks value by value, and Python writes one that
# stitch reads and checks. Python uses the `safetensors` package when importable, otherwise a few
# lines of its own (tests/parity/st_format.py), and says which.
# Prints PASS/FAIL lines (counted by tests/run.sh); skips (exit 0) when torch is not importable.
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "SKIP safetensors-torch: torch not importable by $PY (apt-get install python3-torch)"
    exit 0
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# The Python side: save/load with the safetensors package, or our own few lines.
cat > "$tmp/stio.py" <<'EOF'
import torch
try:
    from safetensors.torch import save_file, load_file
    from safetensors import safe_open
    import safetensors
    IMPL = "safetensors " + safetensors.__version__
    def load(path):
        with safe_open(path, "pt") as f:
            return load_file(path), (f.metadata() or {})
    def save(path, tensors, metadata):
        save_file(tensors, path, metadata=metadata)
except ImportError:
    IMPL = "built-in reader/writer (safetensors package not importable)"
    import sys
    sys.path.insert(0, "tests/parity")
    from st_format import load, save
EOF

# 1. stitch writes, Python reads.
cat > "$tmp/write.lua" <<'EOF'
local p = arg[1]
local a = st.arange(6):reshape(2, 3):float() * 0.5 - 1          -- {{-1, -0.5, 0}, {0.5, 1, 1.5}}
st.save(p, {
  fc1 = {weight = a, bias = st.tensor({1.25, -2}, "f64")},
  ints = {i32 = st.tensor({1, -2, 2147483647}, "i32"), i64 = st.tensor({-9007199254740993, 7}, "i64")},
  mask = st.tensor({true, false, true}),
  half = st.tensor({1, -2.5, 65504}, "f16"),
  brain = st.tensor({1, -2.5, 3e38}, "bf16"),
  t = a:t(),                                                      -- a view: saved in C order
  empty = st.zeros({0, 3}),
  scalar = st.tensor(3.5),
}, {format = "pt", epoch = 7})
print("written")
EOF
cat > "$tmp/read.py" <<'EOF'
import sys, torch
sys.path.insert(0, sys.argv[2])
from stio import load, IMPL
t, meta = load(sys.argv[1])
a = torch.arange(6).reshape(2, 3).float() * 0.5 - 1
want = {
    "fc1.weight": a, "fc1.bias": torch.tensor([1.25, -2], dtype=torch.float64),
    "ints.i32": torch.tensor([1, -2, 2147483647], dtype=torch.int32),
    "ints.i64": torch.tensor([-9007199254740993, 7], dtype=torch.int64),
    "mask": torch.tensor([True, False, True]),
    "half": torch.tensor([1, -2.5, 65504], dtype=torch.float16),
    "brain": torch.tensor([1, -2.5, 3e38], dtype=torch.bfloat16),
    "t": a.t().contiguous(), "empty": torch.zeros(0, 3), "scalar": torch.tensor(3.5),
}
bad = []
if sorted(t) != sorted(want):
    bad.append("names %s != %s" % (sorted(t), sorted(want)))
for k, w in want.items():
    g = t.get(k)
    if g is None:
        continue
    if g.dtype != w.dtype or tuple(g.shape) != tuple(w.shape) or not torch.equal(g, w):
        bad.append("%s: got %s %s %s, want %s %s %s" % (k, g.dtype, tuple(g.shape), g.tolist(), w.dtype, tuple(w.shape), w.tolist()))
if meta != {"format": "pt", "epoch": "7"}:
    bad.append("metadata %r" % (meta,))
print("python side: " + IMPL)
if bad:
    print("FAIL torch_reads_stitch: " + "; ".join(bad))
    sys.exit(1)
print("PASS torch_reads_stitch (%d tensors, %s)" % (len(want), IMPL))
EOF
rc=0
if "$BUILD/stitch" "$tmp/write.lua" "$tmp/from_stitch.safetensors" > "$tmp/out1" 2>&1; then
    "$PY" "$tmp/read.py" "$tmp/from_stitch.safetensors" "$tmp" || rc=1
else
    echo "FAIL torch_reads_stitch: stitch could not write the file:"; cat "$tmp/out1"; rc=1
fi

# 2. Python writes, stitch reads.
cat > "$tmp/write.py" <<'EOF'
import sys, torch
sys.path.insert(0, sys.argv[2])
from stio import save
a = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 4 - 1
save(sys.argv[1], {
    "layer.weight": a, "layer.bias": torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64),
    "i32": torch.tensor([5, -6], dtype=torch.int32), "i64": torch.tensor([[1 << 40], [-3]], dtype=torch.int64),
    "b": torch.tensor([False, True]), "h": torch.tensor([0.5, -1], dtype=torch.float16),
    "bf": torch.tensor([2, -0.25], dtype=torch.bfloat16),
    "u8": torch.tensor([0, 200, 255], dtype=torch.uint8), "i8": torch.tensor([-128, 5], dtype=torch.int8),
    "i16": torch.tensor([-300, 32767], dtype=torch.int16),
    "empty": torch.zeros(2, 0), "scalar": torch.tensor(-4.0),
}, {"who": "torch", "step": "12"})
EOF
cat > "$tmp/read.lua" <<'EOF'
local t, meta = st.load(arg[1])
local bad = {}
local function tl(x) return st.is_tensor(x) and x:tolist() or x end
local function same(a, b)
  if type(a) == "table" then
    if type(b) ~= "table" or #a ~= #b then return false end
    for i = 1, #a do if not same(a[i], b[i]) then return false end end
    return true
  end
  return a == b or math.abs(a - b) <= 1e-7 * math.abs(b)
end
local function ser(v)
  if type(v) ~= "table" then return tostring(v) end
  local p = {}
  for i = 1, #v do p[i] = ser(v[i]) end
  return "{" .. table.concat(p, ", ") .. "}"
end
local function want(name, dtype, shape, values)
  local x = t[name]
  if not x then bad[#bad + 1] = name .. " missing"; return end
  if x:dtype() ~= dtype then bad[#bad + 1] = name .. ": dtype " .. x:dtype() .. ", want " .. dtype end
  if ser(x:shape()) ~= ser(shape) then bad[#bad + 1] = name .. ": shape " .. ser(x:shape()) .. ", want " .. ser(shape) end
  if values and not same(tl(x), values) then bad[#bad + 1] = name .. ": " .. ser(tl(x)) .. ", want " .. ser(values) end
end
local w = {}
for i = 0, 2 do w[i + 1] = {} for j = 0, 3 do w[i + 1][j + 1] = (i * 4 + j) / 4 - 1 end end
want("layer.weight", "f32", {3, 4}, w)
want("layer.bias", "f64", {3}, {0.1, -0.2, 0.3})
want("i32", "i32", {2}, {5, -6})
want("i64", "i64", {2, 1}, {{1 << 40}, {-3}})
want("b", "bool", {2}, {false, true})
want("h", "f16", {2}, {0.5, -1})
want("bf", "bf16", {2}, {2, -0.25})
want("u8", "i32", {3}, {0, 200, 255})
want("i8", "i32", {2}, {-128, 5})
want("i16", "i32", {2}, {-300, 32767})
want("empty", "f32", {2, 0}, nil)
want("scalar", "f32", {}, -4)
local n = 0
for _ in pairs(t) do n = n + 1 end
if n ~= 12 then bad[#bad + 1] = n .. " tensors, want 12" end
if meta.who ~= "torch" or meta.step ~= "12" then bad[#bad + 1] = "metadata " .. tostring(meta.who) .. " " .. tostring(meta.step) end
if #bad > 0 then print("FAIL stitch_reads_torch: " .. table.concat(bad, "; ")) os.exit(1) end
print("PASS stitch_reads_torch (12 tensors, U8/I8/I16 as i32)")
EOF
if "$PY" "$tmp/write.py" "$tmp/from_torch.safetensors" "$tmp" > "$tmp/out2" 2>&1; then
    "$BUILD/stitch" "$tmp/read.lua" "$tmp/from_torch.safetensors" || rc=1
else
    echo "FAIL stitch_reads_torch: python could not write the file:"; cat "$tmp/out2"; rc=1
fi
exit $rc
