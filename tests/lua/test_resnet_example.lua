-- test_resnet_example.lua — runs examples/fashion_mnist_resnet.lua end to end on a tiny stand-in
-- for Fashion-MNIST (IDX files written to a temporary directory, which st.data.fashion_mnist is
-- made to read): one epoch at width 4 with the default augmentation (flips only) and
-- with --shift 2, the per-epoch line and the last line `test accuracy: 0.XXXX`, and the errors for
-- bad --shift values (before any data is read).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local EXAMPLE = "examples/fashion_mnist_resnet.lua"

-- Runs the example with the given arguments; returns what it printed (one string) or raises its error.
local function run_example(args)
  local saved_arg, saved_print = arg, print
  local out = {}
  arg = { [0] = EXAMPLE, table.unpack(args) }
  print = function(...)
    local t = table.pack(...)
    for i = 1, t.n do t[i] = tostring(t[i]) end
    out[#out + 1] = table.concat(t, "\t")
  end
  local ok, err = pcall(dofile, EXAMPLE)
  arg, print = saved_arg, saved_print
  if not ok then error(err, 0) end
  return table.concat(out, "\n")
end

-- IDX files: n images of 28 x 28 bytes (a bright square whose corner depends on the label, plus
-- noise) and their labels 0..9.
local function write_idx(dir, prefix, n, seed)
  math.randomseed(seed)
  local img, lab = { string.pack(">I4I4I4I4", 0x803, n, 28, 28) }, { string.pack(">I4I4", 0x801, n) }
  for i = 1, n do
    local y = (i - 1) % 10
    local px = {}
    for r = 0, 27 do
      for c = 0, 27 do
        local on = r >= 2 * y and r < 2 * y + 8 and c >= 4 and c < 12
        px[#px + 1] = string.char(on and 200 + math.random(0, 55) or math.random(0, 40))
      end
    end
    img[#img + 1] = table.concat(px)
    lab[#lab + 1] = string.char(y)
  end
  for name, parts in pairs({ ["-images-idx3-ubyte"] = img, ["-labels-idx1-ubyte"] = lab }) do
    local f = assert(io.open(dir .. "/" .. prefix .. name, "wb"))
    f:write(table.concat(parts))
    f:close()
  end
end

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))
-- fewer images on a GPU: on the simulated one (make test-sim, three schedules) every thread of
-- every kernel runs on the CPU: 640 images took ~5.5 minutes a schedule, 64 ~40 s
local gpu = st.device() ~= "cpu"
local NTRAIN, NTEST = gpu and 64 or 640, gpu and 32 or 200
write_idx(dir, "train", NTRAIN, 1)
write_idx(dir, "t10k", NTEST, 2)
local fashion_mnist = st.data.fashion_mnist
st.data.fashion_mnist = function(o) o.dir = dir; return fashion_mnist(o) end

local function check_run(args)
  local out = run_example(args)
  assert(out:find(string.format("Fashion%%-MNIST: %d train, %d test images", NTRAIN, NTEST)),
    "the stand-in data was not used:\n" .. out)
  assert(out:find("ResNet, width 4: %d+ parameters"), "no model line:\n" .. out)
  local loss, acc = out:match("epoch 1: train loss ([%d.]+), test accuracy ([%d.]+), [%d.]+ images/s")
  assert(loss and acc, "no epoch line:\n" .. out)
  local last = out:match("test accuracy: (%d%.%d%d%d%d)$")
  assert(last == string.format("%.4f", tonumber(acc)), "last line is not `test accuracy: " .. acc .. "`:\n" .. out)
  assert(tonumber(loss) > 0 and tonumber(loss) == tonumber(loss), "train loss " .. loss)
end

H.test("resnet_example_runs_flips_only", function()
  check_run({ "--epochs", "1", "--width", "4", "--batch", "64" })
end)

H.test("resnet_example_runs_with_shift", function()
  check_run({ "--epochs", "1", "--width", "4", "--batch", "64", "--shift", "2" })
end)

H.test("resnet_example_bad_shift", function()
  for _, v in ipairs({ "-1", "1.5" }) do
    local ok, err = pcall(run_example, { "--shift", v })
    assert(not ok and tostring(err):find("%-%-shift must be an integer >= 0, got " .. v:gsub("%p", "%%%0")),
      "--shift " .. v .. ": " .. tostring(err))
  end
  local ok, err = pcall(run_example, { "--shfit", "1" })
  assert(not ok and tostring(err):find("usage: fashion_mnist_resnet.lua"), tostring(err))
end)

st.data.fashion_mnist = fashion_mnist
os.execute("rm -rf '" .. dir .. "'")
H.done()
