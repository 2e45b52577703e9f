-- test_jit_async.lua — background compiles (ST_JIT_ASYNC=1, the default outside the test suite;
-- fuser/exec.c "Background compiles"). A region whose CPU kernels are not cached runs its groups
-- through the interpreter at once while the C compiler works as a child process; a later run of
-- the same plan swaps the compiled kernels in. Checked in child processes (the suite itself runs
-- with ST_JIT_ASYNC=0) on the CPU with an empty kernel cache: the first run compiled nothing and
-- interpreted, every run gives the same values, the kernels arrive and then run instead of the
-- interpreter; with ST_JIT_ASYNC=0 the first run waits and compiles; a compiler that fails in the
-- background leaves the kernels interpreted with one warning, and the values right.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq = H.test, H.eq
local function check(cond, what) if not cond then error(what, 2) end end
local exe = arg[-1]

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local _, how, code = p:close()
  return out, how == "exit" and code or 128 + code
end
local function tempdir()
  local p = assert(io.popen("mktemp -d"))
  local d = p:read("l")
  p:close()
  return d
end
local function script(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end
-- An executable shell script (a stand-in for ST_CC) with the given text after its #! line.
local function fake_cc(text)
  local cc = os.tmpname()
  local f = assert(io.open(cc, "w"))
  f:write("#!/bin/sh\n" .. text)
  f:close()
  os.execute("chmod +x " .. q(cc))
  return cc
end
local function field(out, name)
  local v = out:match("%f[%w_]" .. name .. "%s+(%-?[%d%.e%-+]+)")
  if not v then error("no '" .. name .. "' in the child's output:\n" .. out, 2) end
  return tonumber(v)
end

-- The child: a (300, 300) expression (90,000 elements: above ST_JIT_MIN, so it would compile),
-- run until its kernels arrive (at most 120 s), each result compared with the first. x comes from
-- a Lua table (no kernel): a background compile of its own (st.rand's) could end during the first
-- run and be counted there (seen once in a loaded test run).
local CHILD = script([[
local rows = {}
for i = 1, 300 do
  local r = {}
  for j = 1, 300 do r[j] = ((i * 7 + j * 13) % 101) / 101 end
  rows[i] = r
end
local x = st.tensor(rows)
local function f() return st.sync((x:exp() * 2 + x:sin()):sum(2)) end
local ref = f():tolist()
local s = st.stats()
print("first_compiled", s.kernels_compiled, "first_interp", s.interp_groups)
-- until a run interprets nothing: its kernels arrived
local worst, runs, t0 = 0, 1, st._now()
local interp_last = 1
while interp_last > 0 and st._now() - t0 < 120 do
  local i0 = st.stats().interp_groups
  local y = f():tolist()
  interp_last = st.stats().interp_groups - i0
  runs = runs + 1
  for i = 1, #y do worst = math.max(worst, math.abs(y[i] - ref[i]) / math.abs(ref[i])) end
end
local before = st.stats().interp_groups
for _ = 1, 3 do
  local y = f():tolist()
  for i = 1, #y do worst = math.max(worst, math.abs(y[i] - ref[i]) / math.abs(ref[i])) end
end
s = st.stats()
print("compiled", s.kernels_compiled, "runs", runs, "interp_after", s.interp_groups - before, "worst", worst)
]])

local function child(env)
  return run("ST_DEVICE=cpu ST_CACHE_DIR=" .. q(tempdir()) .. " " .. env .. " " .. q(exe) .. " " .. q(CHILD))
end

test("background compile: interpreted at once, the same values, then the kernels", function()
  if st.eager() then print("SKIP " .. "background compile: interpreted at once, the same values, then the kernels" .. ": eager mode compiles nothing") return end
  local out, code = child("ST_JIT_ASYNC=1")
  eq(code, 0, "exit status:\n" .. out)
  eq(field(out, "first_compiled"), 0, "the first run waited for no compiler")
  check(field(out, "first_interp") >= 1, "the first run interpreted")
  check(field(out, "compiled") >= 1, "the kernels arrived within 120 s:\n" .. out)
  eq(field(out, "interp_after"), 0, "once they arrived, nothing is interpreted")
  check(field(out, "worst") <= 1e-6, "every run gives the first run's values:\n" .. out)
end)

test("a compile still running at exit is finished: the next run finds its kernels", function()
  if st.eager() then print("SKIP " .. "a compile still running at exit is finished: the next run finds its kernels" .. ": eager mode compiles nothing") return end
  local once = script([[
local x = st.sync(st.rand(300, 300))
local y = st.sync((x:exp() * 2 + x:sin()):sum(2))
local s = st.stats()
print("compiled", s.kernels_compiled, "interp", s.interp_groups, "hits", s.cache_hits_disk + s.cache_hits_memory)
]])
  local dir = tempdir()
  local cmd = "ST_DEVICE=cpu ST_JIT_ASYNC=1 ST_CACHE_DIR=" .. q(dir) .. " " .. q(exe) .. " " .. q(once)
  local out1, c1 = run(cmd)
  local out2, c2 = run(cmd)
  os.remove(once)
  eq(c1, 0, "first run:\n" .. out1)
  eq(c2, 0, "second run:\n" .. out2)
  check(field(out1, "interp") >= 1, "the first run interpreted:\n" .. out1)
  eq(field(out2, "interp"), 0, "the second run interpreted nothing:\n" .. out2)
  eq(field(out2, "compiled"), 0, "and compiled nothing")
  check(field(out2, "hits") >= 1, "its kernels came from the disk cache")
end)

test("ST_JIT_ASYNC=0 waits for the compiler", function()
  if st.eager() then print("SKIP " .. "ST_JIT_ASYNC=0 waits for the compiler" .. ": eager mode compiles nothing") return end
  local out, code = child("ST_JIT_ASYNC=0")
  eq(code, 0, "exit status:\n" .. out)
  check(field(out, "first_compiled") >= 1, "the first run compiled")
  eq(field(out, "first_interp"), 0, "and interpreted nothing")
end)

test("a compiler failing in the background: one warning, the values right", function()
  -- a "compiler" that answers --version and fails every compile
  local cc = fake_cc("if [ \"$1\" = --version ]; then echo fakecc 1.0; exit 0; fi\necho 'fakecc: no' >&2\nexit 1\n")
  local bounded = script([[
local x = st.sync(st.rand(300, 300))
local y0 = st.sync((x:exp() * 2 + x:sin()):sum())
local worst = 0
for _ = 1, 50 do
  local y = st.sync((x:exp() * 2 + x:sin()):sum())
  worst = math.max(worst, math.abs(y:item() - y0:item()))
end
print("compiled", st.stats().kernels_compiled, "worst", worst)
]])
  local out, code = run("ST_DEVICE=cpu ST_JIT_ASYNC=1 ST_CC=" .. q(cc) .. " ST_CACHE_DIR=" .. q(tempdir()) .. " "
    .. q(exe) .. " " .. q(bounded))
  os.remove(cc)
  os.remove(bounded)
  eq(code, 0, "exit status:\n" .. out)
  eq(field(out, "compiled"), 0, "nothing compiled")
  eq(field(out, "worst"), 0, "the interpreter's values every time")
  local _, n = out:gsub("compiling in the background failed", "")
  check(n <= 1, "at most one warning, got " .. n .. ":\n" .. out)
end)

test("a one-time flush's compile gives the compiler up to a plan that runs again", function()
  if st.eager() then print("SKIP " .. "a one-time flush's compile gives the compiler up to a plan that runs again" .. ": eager mode compiles nothing") return end
  -- one background compiler (ST_THREADS=2), each compile slowed by 2 s: the one-time flush's
  -- compile starts first; the step's second run takes its compiler, so the step's kernels are the
  -- first to arrive and, when the step runs compiled, no other kernel has been compiled
  local cc = fake_cc("case \"$1\" in --version) exec gcc --version;; esac\nsleep 2\nexec gcc \"$@\"\n")
  local steps = script([[
local x = st.rand(300, 300)
st.sync((x:cos() * 3):sum(1))   -- one-time: its compile starts at once
local function f() return st.sync((x:exp() * 2 + x:sin()):sum(2)) end
local interp_last, t0 = 1, st._now()
while interp_last > 0 and st._now() - t0 < 120 do
  local i0 = st.stats().interp_groups
  f()
  interp_last = st.stats().interp_groups - i0
end
print("compiled_when_step_ran", st.stats().kernels_compiled, "interp_last", interp_last)
]])
  local out, code = run("ST_DEVICE=cpu ST_JIT_ASYNC=1 ST_THREADS=2 ST_DEBUG=1 ST_CC=" .. q(cc) .. " ST_CACHE_DIR="
    .. q(tempdir()) .. " " .. q(exe) .. " " .. q(steps))
  os.remove(cc)
  os.remove(steps)
  eq(code, 0, "exit status:\n" .. out)
  eq(field(out, "interp_last"), 0, "the step ran compiled within 120 s:\n" .. out)
  check(out:find("plan's first run %(%d+ kernels?%) stopped"), "the one-time compile was stopped:\n" .. out)
  local first = tonumber(out:match("compiled (%d+) kernels? in"))
  check(first, "a compile ended:\n" .. out)
  eq(field(out, "compiled_when_step_ran"), first, "the step's compile was the first to end:\n" .. out)
end)

os.remove(CHILD)
H.done()
