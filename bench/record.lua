-- record.lua — the cost of recording one op from Lua: `y = x + 1` on a realized 1-element tensor.
-- Run: build/stitch bench/record.lua RESULTS_FILE [--quick]
--
-- Variants (N ops each, after a warm-up; nothing syncs inside a timed loop):
--   close  `local y <close> = x + 1`: the handle is released at the end of each iteration (__close),
--          so nothing stays pending and no auto-flush runs: the pure record cost through the
--          metamethod, the binding and the C runtime. This is the number held against <= 3 us.
--   gc     `local y = x + 1`: plain Lua; the handles die only when the garbage collector runs, so
--          nodes pile up and the runtime may auto-flush (ST_TRACE_MAX pending nodes) garbage that
--          nobody will read. Shown because it is what a naive script does.
-- Clocks: wall time from `date +%s%N` read before and after a loop (a process spawn outside the
-- timed part: ~1 ms of error over a loop of seconds) and os.clock() (process CPU time).
local out = arg[1] or "/dev/stdout"
local quick = arg[2] == "--quick"
local N = quick and 100000 or 1000000

local function wall_ns()
  local p = assert(io.popen("date +%s%N"))
  local s = p:read("l")
  p:close()
  return tonumber(s)
end

local x = st.full({1}, 2.0)
x:realize()

local function close_loop(n)
  for _ = 1, n do
    local y <close> = x + 1
  end
end

local function gc_loop(n)
  for _ = 1, n do
    local y = x + 1 -- luacheck: ignore (the handle is garbage at once)
  end
end

-- Returns wall us/op, cpu us/op, flushes during the loop.
local function measure(loop, n)
  collectgarbage()
  collectgarbage()
  local f0 = st.stats().flushes
  local w0, c0 = wall_ns(), os.clock()
  loop(n)
  local c1, w1 = os.clock(), wall_ns()
  local f1 = st.stats().flushes
  return (w1 - w0) / 1e3 / n, (c1 - c0) * 1e6 / n, f1 - f0
end

close_loop(10000) -- warm-up
gc_loop(10000)
local best_w, best_c, fl = math.huge, math.huge, 0
for _ = 1, (quick and 1 or 3) do
  local w, c, f = measure(close_loop, N)
  if w < best_w then best_w, best_c, fl = w, c, f end
end
local gw, gcpu, gfl = measure(gc_loop, N)

print(string.format("  Lua close y <close> = x + 1:  %.3f us/op wall, %.3f us/op cpu (best of %d x %d ops; %d flushes)",
  best_w, best_c, quick and 1 or 3, N, fl))
print(string.format("  Lua gc    local y = x + 1:    %.3f us/op wall, %.3f us/op cpu (%d auto-flushes of garbage)",
  gw, gcpu, gfl))
local f = assert(io.open(out, "w"))
f:write(string.format("lua_record_us %.6g\nlua_record_cpu_us %.6g\nlua_record_flushes %d\n", best_w, best_c, fl))
f:write(string.format("lua_record_gc_us %.6g\nlua_record_gc_cpu_us %.6g\nlua_record_gc_flushes %d\n", gw, gcpu, gfl))
f:close()
