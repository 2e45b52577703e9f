-- test_deferred_errors.lua — an index error that a GPU reports late is never lost. A GPU kernel
-- (gather, scatter_add, ...) sets a flag that the device's next synchronization point reads; a
-- program that never synchronizes again still hears of it: the stitch executable waits for the
-- devices after a script, after -e code and after each REPL command (exit status 1 for the first
-- two), st.synchronize() waits and raises it, and a stock lua5.4's state says it on stderr when it
-- closes (docs/cuda.md, "Errors"). On the CPU the same programs fail at st.sync, where the CPU
-- finds the error: every check below holds on both, and the GPU's own words are checked there.
-- Runs children: this interpreter (arg[-1]) on scripts written to temporary files.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test = H.test
local gpu = st.device() ~= "cpu"
local exe = arg[-1]
local bindir = exe:match("(.*)/") or "."

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- run(command): its stdout and stderr together, and its exit code.
local function run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local _, how, code = p:close()
  return out, how == "exit" and code or 128 + code
end

local function has(out, s, what)
  if not out:find(s, 1, true) then error((what or "output") .. " lacks '" .. s .. "':\n" .. out, 2) end
end

-- x (4, 10) gathered along dim 2 with 0 and 11 among the (1-based) indices; the index is computed,
-- so that it reaches the kernel (a GPU checks it there, late).
local BAD = [[
local x = st.randn({4, 10})
local i = st.tensor({{1}, {0}, {3}, {11}}, "i64") + 0
local g = x:gather(2, i)
st.sync(g)
]]

local function script(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

test("script_ending_with_a_pending_index_error_fails", function()
  if st.eager() then print("SKIP " .. "script_ending_with_a_pending_index_error_fails" .. ": eager mode raises at the op, not at the sync point") return end
  local path = script(BAD .. 'print("end of script")\n')
  local out, code = run(q(exe) .. " " .. q(path))
  os.remove(path)
  assert(code ~= 0, "exit status 0:\n" .. out)
  has(out, "gather: index")
  has(out, "out of range")
  if gpu then
    has(out, "end of script")   -- the flush succeeded; the wait at the end found it
    has(out, path .. ": gather: index out of range (kernel ")
    has(out, "found when the script ended")
  else
    has(out, ":4: sync: gather: index 0 out of range for dim 2 of size 10")
  end
end)

test("e_code_ending_with_a_pending_index_error_fails", function()
  local out, code = run(q(exe) .. " -e " .. q(BAD:gsub("\n", " ")) .. " -e " .. q('print("second chunk")'))
  assert(code ~= 0, "exit status 0:\n" .. out)
  has(out, "gather: index")
  assert(not out:find("second chunk", 1, true), "the chunk after the failing one ran:\n" .. out)
  if gpu then has(out, "(command line): gather: index out of range (kernel ") end
end)

test("clean_script_exits_0_and_says_nothing", function()
  local path = script('local g = st.randn({4, 10}):gather(2, st.tensor({{1}, {10}, {3}, {2}}, "i64") + 0)\n' ..
                      'st.sync(g)\nst.synchronize()\n')
  -- ST_NVRTC_CHECK=0: make test's NVRTC check mode prints a count line at exit (not an error)
  local out, code = run("ST_NVRTC_CHECK=0 " .. q(exe) .. " " .. q(path))
  os.remove(path)
  H.eq(code, 0, "exit status")
  H.eq(out, "", "output")
end)

test("synchronize_raises_a_pending_error_once", function()
  if st.eager() then print("SKIP " .. "synchronize_raises_a_pending_error_once" .. ": eager mode raises at the op, not at the sync point") return end
  st.synchronize()   -- nothing pending: no error
  local x = st.randn({4, 10})
  local g = x:gather(2, st.tensor({{1}, {0}, {3}, {11}}, "i64") + 0)
  local ok, err = pcall(st.sync, g)
  if gpu then
    assert(ok, err)   -- launched; the device has not been waited for
    err = H.raises(function() st.synchronize() end, "synchronize: gather: index out of range (kernel ")
    assert(err:find("test_deferred_errors.lua:%d+:"), "no position: " .. err)
  else
    assert(not ok and err:find("gather: index 0 out of range", 1, true), tostring(err))
  end
  st.synchronize()   -- reported once
  H.check_near(st.ones(3):sum():item(), 3, 0, "runtime usable")
end)

test("repl_reports_after_the_command_that_left_it", function()
  local input = script(BAD:gsub("\n", " ") .. '\nprint("next " .. "command")\n')
  local out, code = run(q(exe) .. " < " .. q(input))
  os.remove(input)
  H.eq(code, 0, "the REPL's exit status")
  local e, n = out:find("gather: index", 1, true), out:find("next command", 1, true)
  assert(e and n and e < n, "the error is not reported before the next command's output:\n" .. out)
  if gpu then has(out, "found when the command ended") end
end)

-- require "stitch" from a stock lua5.4: the state's close waits and says it on stderr (a finalizer
-- cannot raise, nor change the exit status).
local lua = run("command -v lua5.4"):match("[^\n]+")
local so = bindir .. "/stitch.so"
local function exists(p) local f = io.open(p) if f then f:close() end return f ~= nil end
local sanitized = bindir:find("san", 1, true)   -- the module needs the sanitizer runtimes preloaded there
local module_test = (lua and exists(so) and not sanitized) and test or function(name)
  print("# skip " .. name .. " (no lua5.4, no " .. so .. ", or a sanitizer build)")
end

module_test("stock_lua_state_close_says_a_pending_error", function()
  local env = "LUA_CPATH=" .. q(bindir .. "/?.so")
  local sim = os.getenv("ST_CUDA_SIM")
  -- "1" finds the simulator next to the executable, which is lua5.4 here: name it
  if sim == "1" then env = env .. " ST_CUDA_SIM=" .. q(bindir .. "/sim") end
  local code = 'local st = require "stitch" ' .. BAD:gsub("\n", " ") .. ' print("end")'
  local out = run(env .. " " .. q(lua) .. " -e " .. q(code))
  has(out, "gather: index")
  if gpu then has(out, "end") has(out, "found when the Lua state closed") end
end)

H.done()
