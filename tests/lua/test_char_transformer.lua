-- test_char_transformer.lua — runs examples/char_transformer.lua end to end with a tiny model on a
-- tiny fortune-format corpus written to a temporary directory: the corpus parsing (fortunes split on
-- "%" lines, .dat files skipped), a decreasing training loss, sampling of exactly the requested
-- number of characters from one window shape, causal attention (no logit
-- depends on a later character), and the errors for a missing corpus and bad options.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local EXAMPLE = "examples/char_transformer.lua"

-- Runs the example with the given command-line arguments; returns its result table.
local function run_example(args)
  local saved = arg
  arg = { [0] = EXAMPLE, table.unpack(args) }
  local ok, res = pcall(dofile, EXAMPLE)
  arg = saved
  if not ok then error(res, 0) end
  return res
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- Two fortune files (3 + 2 fortunes, one of them empty and so dropped) and a .dat file that must be
-- skipped (its "%" lines would add fortunes and its "#" characters a vocabulary entry).
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))
local lines = {}
for i = 1, 40 do lines[i] = "the cat sat on the mat " .. ("ab"):rep(i % 3 + 1) end
write(dir .. "/one", table.concat(lines, "\n", 1, 20) .. "\n%\nthe mat sat on the cat\n%\n"
  .. "a cat\n%\n")
write(dir .. "/two", table.concat(lines, "\n", 21, 40) .. "\n%\n%\nthe end\n")
write(dir .. "/one.dat", "###\n%\n###\n%\n")

local TINY = { "--corpus", dir, "--steps", "40", "--every", "10", "--batch", "8", "--ctx", "16", "--dim",
  "16", "--layers", "1", "--heads", "2", "--lr", "1e-2", "--sample", "25", "--prompt", "the ",
  "--seed", "3" }

H.test("tiny_transformer_trains_and_samples", function()
  local s0 = st.stats()
  local r = run_example(TINY)
  H.eq(r.n_fortunes, 5, "fortunes")
  -- the letters of "the cat sat on the mat ab", "the end", newline and "%"; nothing from the .dat file
  local want_vocab = 0
  for _ in ("thecasonmbd \n%"):gmatch(".") do want_vocab = want_vocab + 1 end
  H.eq(r.vocab, want_vocab, "vocabulary size")
  H.eq(#r.losses, 4, "loss reports")
  for _, l in ipairs(r.losses) do assert(l == l and l > 0, "loss not a positive number: " .. tostring(l)) end
  assert(r.losses[4] < 0.7 * r.losses[1], string.format("loss did not decrease: %.4f -> %.4f",
    r.losses[1], r.losses[4]))
  assert(r.val_loss == r.val_loss and r.val_loss < r.losses[1], "held-out loss " .. tostring(r.val_loss))
  H.eq(r.n_chars, 25, "sampled characters")
  H.eq(utf8.len(r.sample), 25, "sample length")
  assert(st.stats().flushes > s0.flushes)
  -- causal: changing the last character of a window changes no logits before it (a mask letting
  -- positions see the future would also train to a suspiciously low loss)
  local guard <close> = st.no_grad()
  local ids = {}
  for i = 1, 16 do ids[i] = i % r.vocab + 1 end
  local a = r.model(st.tensor({ ids }, "i64"))
  ids[16] = ids[16] % r.vocab + 1
  local b = r.model(st.tensor({ ids }, "i64"))
  H.check_near(b:narrow(2, 1, 15), a:narrow(2, 1, 15), 1e-6, "logits before the changed position")
  assert((b:narrow(2, 16, 1) - a:narrow(2, 16, 1)):abs():max():item() > 1e-4, "the last position ignores its input")
end)

H.test("sampling_feeds_one_window_shape", function()
  -- Every character runs the model on a full (1, ctx) window, so the sampling graphs are identical
  -- from character to character (same plans, same kernels): the windows are the 2-D index tensors
  -- the script builds with st.tensor; training builds none.
  local shapes, real_tensor = {}, st.tensor
  st.tensor = function(v, ...)
    local t = real_tensor(v, ...)
    if t:dim() == 2 then shapes[#shapes + 1] = table.concat(t:shape(), "x") end
    return t
  end
  local ok, r = pcall(run_example, TINY)
  st.tensor = real_tensor
  if not ok then error(r, 0) end
  H.eq(#shapes, r.n_chars, "windows built")
  for i, s in ipairs(shapes) do H.eq(s, "1x16", "window " .. i .. " shape") end
end)

H.test("bad_options_are_clear_errors", function()
  local ok, err = pcall(run_example, { "--corpus", dir .. "/nope", "--steps", "1" })
  assert(not ok)
  assert(tostring(err):find("corpus not found: " .. dir .. "/nope", 1, true), err)
  ok, err = pcall(run_example, { "--dim", "10", "--heads", "4" })
  assert(not ok and tostring(err):find("multiple of --heads", 1, true), err)
  ok, err = pcall(run_example, { "--corpus", dir, "--prompt", "the zoo" }) -- before any training
  assert(not ok and tostring(err):find("--prompt: the character 'z' is not in the corpus", 1, true), err)
end)

os.execute("rm -rf '" .. dir .. "'")
H.done()
