-- test_runtime.lua — errors as Lua errors (naming both shapes) with the runtime usable afterwards,
-- __close / __gc, st.stats, st.sync, eager mode, memory accounting (the collector sees tensor
-- memory) and out-of-memory retry (st.debug_fail_alloc).
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check = H.test, H.eq, H.check_near

test("shape_error_names_both_shapes", function()
  local err = H.raises(function() return st.ones(2, 3) + st.ones(4) end)
  assert(err:find("(2, 3)", 1, true) and err:find("(4", 1, true), err)
  assert(err:find("test_runtime.lua", 1, true), "error carries the Lua position: " .. err)
  check(st.ones(2, 3) + st.ones(3), {{2, 2, 2}, {2, 2, 2}}, 0, "runtime usable after an error")
  err = H.raises(function() return st.ones(2, 3):matmul(st.ones(2, 3)) end, "matmul")
  assert(err:find("(2, 3)", 1, true), err)
end)

test("arg_errors", function()
  H.raises(function() return st.ones(2) + "x" end, "tensor or number")
  H.raises(function() return st.ones(2):sum("x") end)
  H.raises(function() return st.zeros(-1) end, "negative")
  H.raises(function() return st.ones(2, 3):reshape(4, 2) end)
  H.raises(function() return st.ones(2):view(3) end)
  H.raises(function() return st.cat({}, 1) end, "empty")
  H.raises(function() return st.cat({st.ones(2), 3}) end, "entry 2")
  check(st.ones(2):sum(), 2)
end)

test("close_and_gc", function()
  local x = st.ones(4)
  do
    local y <close> = st.ones(3)
    check(y:sum(), 3)
  end
  local z = st.ones(2)
  local mt = getmetatable(z)
  mt.__close(z)
  mt.__close(z) -- idempotent
  mt.__gc(z)
  eq(tostring(z), "tensor(<closed>)")
  H.raises(function() return z + 1 end, "closed")
  check(x:sum(), 4)
end)

test("stats_fields", function()
  st.reset_stats()
  local y = st.ones(16) * 2 + 1
  st.sync(y)
  local s = st.stats()
  for _, f in ipairs{"flushes", "nodes_recorded", "kernels_launched", "kernels_compiled", "compile_calls",
      "cache_hits_memory", "cache_hits_disk", "interp_groups", "bytes_in_use", "bytes_peak",
      "compile_ms", "exec_ms", "nodes_live", "nodes_pending", "bytes_pending"} do
    assert(type(s[f]) == "number", "stats." .. f)
  end
  assert(s.nodes_recorded > 0, "nodes recorded")
  assert(s.flushes >= 1, "sync flushed")
end)

test("sync", function()
  local a, b = st.ones(3) + 1, st.ones(3) * 3
  local ra, rb = st.sync(a, b)
  eq(ra, a); eq(rb, b)
  st.sync()
  check(a, {2, 2, 2}); check(b, {3, 3, 3})
  eq(a:realize(), a)
end)

test("eager_mode", function()
  local was = st.eager()
  st.eager(true); eq(st.eager(), true)
  check((st.ones(3) + 2):sum(), 9)
  st.eager(false); eq(st.eager(), false)
  check((st.ones(3) + 2):sum(), 9)
  st.eager(was)
end)

test("gc_sees_tensor_memory", function()
  collectgarbage(); collectgarbage()
  local before = st.stats().bytes_in_use
  local n = 1000000 -- 4 MB per tensor
  for i = 1, 60 do
    local y = st.ones(n) + i
    st.sync(y)
  end
  local grown = st.stats().bytes_in_use - before
  assert(grown < 120 * 1024 * 1024, "tensor memory kept by garbage: " .. grown .. " bytes")
end)

-- A function's temporaries die when it returns, before the flush: without a collection first
-- (lhelp.c lt_preflush) their handles would still hold the values the flush stores (here each
-- step, st._store), so none could be freed at its last reader, and all would outlive the flush.
-- Collected first, none outlives it, and on the CPU (where a buffer dies at its last reader; a
-- GPU's live until the flush ends) at most two of the 4 MiB values are alive at once.
test("flush_collects_dead_handles_first", function()
  local x = st.sync(st.rand(1 << 20))
  local function f(t)
    local h = t
    for i = 1, 8 do h = st._store(h * (1 + i / 1000)) end   -- 8 stored temporaries of 4 MiB
    return h:sum()
  end
  local function used(s) return s.bytes_in_use + s.device_bytes_in_use end
  st.reset_stats()
  local s0 = st.stats()
  local l = f(x)
  assert(st.stats().bytes_pending >= (32 << 20), "bytes_pending " .. st.stats().bytes_pending)
  local got = l:item()
  local s1 = st.stats()
  local peak = s1.bytes_peak + s1.device_bytes_peak - used(s0)
  if st.device() == "cpu" then
    assert(peak <= (12 << 20), "the flush kept the dead temporaries: peak grew by " .. peak .. " bytes")
  end
  assert(used(s1) - used(s0) < (1 << 20), "buffers outlived the flush: " .. (used(s1) - used(s0)) .. " bytes")
  assert(st.stats().bytes_pending < (1 << 20), "bytes_pending after the flush " .. st.stats().bytes_pending)
  local scale = 1
  for i = 1, 8 do scale = scale * (1 + i / 1000) end
  local want = x:sum():item() * scale
  assert(math.abs(got - want) <= 1e-4 * math.abs(want), got .. " vs " .. want)
end)

test("oom_retry_and_error", function()
  local keep = st.ones(8) + 1
  -- one failing allocation: the module collects garbage and retries the call once
  local ok = 0
  for nth = 1, 4 do
    st.debug_fail_alloc(nth)
    local r, v = pcall(function() return (st.ones(1000) * 2):sum():item() end)
    st.debug_fail_alloc(0)
    if r then eq(v, 2000); ok = ok + 1
    else assert(tostring(v):lower():find("memory"), "an OOM failure is reported as such: " .. tostring(v)) end
  end
  eq(ok, 4, "calls that succeeded after one failed allocation (collect + retry)")
  check(keep, {2, 2, 2, 2, 2, 2, 2, 2}, 0, "runtime usable after OOM")
  check((st.ones(5) * 3):sum(), 15)
end)

test("debug_and_jit_min", function()
  st.set_debug(0)
  st.set_jit_min(0)
  check((st.ones(100) * 2):sum(), 200)
  st.set_jit_min(32768)
end)

test("realize_many_in_one_flush", function()
  local a, b, c = st.ones(3) * 2, st.ones(3) * 3, st.ones(3) * 4
  local f0 = st.stats().flushes
  st.realize(a, b, c)
  eq(st.stats().flushes - f0, 1, "one flush for three tensors")
  local f1 = st.stats().flushes
  check(a, {2, 2, 2}); check(b, {3, 3, 3}); check(c, {4, 4, 4})
  eq(st.stats().flushes - f1, 0, "reading them needs no further flush: all three were realized")
  local d, e = st.ones(2) + 1, st.ones(2) + 2
  st.realize({d, e})
  local f2 = st.stats().flushes
  check(d, {2, 2}); check(e, {3, 3})
  eq(st.stats().flushes - f2, 0, "a list is realized in the same way")
end)

-- A kernel may write an output into the buffer of an input nothing else holds, read only at the
-- output's own index (fuser/exec.c donated_buffer): an update in place uses no new memory, and
-- inputs read anywhere else keep theirs. Each input is read through one node (else the runtime
-- refuses before the kernel's own rule matters): transposed, flipped, shifted, read by a reduction
-- and again, read at two indices for two outputs (refused); a pointwise update, a column sum's
-- update (a column-blocked reduce kernel), a matmul epilogue, two updates batched into one kernel
-- (taken: the flush's peak stays under its outputs' bytes). Every case against the reference
-- interpreter, its inputs dropped before the flush.
test("outputs_take_dead_inputs_buffers_only_where_safe", function()
  local cases = {
    {"update", {{64, 64}, {64, 64}}, function(x, y) return {x * 0.5 + y * 0.25} end, true},
    {"transposed", {{64, 64}, {64, 64}}, function(x, y) return {x:t() + y} end},
    {"flipped", {{64, 64}, {64, 64}}, function(x, y) return {x:flip(1) + y} end},
    {"shifted", {{64, 64}, {64, 64}}, function(x, y) return {x:pad({0, 0, 1, 0}):narrow(1, 1, 64) * y} end},
    {"reduced_then_read", {{64, 64}, {64, 64}},
      function(x, y) local c = x * 1; return {c - c:mean(2, true) + y} end},
    {"two_indices", {{64, 64}, {64, 64}},
      function(x, y) local c = x * 1; return {c + y, c:flip(1) * 2} end},
    {"column_sum_update", {{64}, {32, 64}}, function(p, g) return {p - g:sum(1) * 0.1} end, true},
    {"matmul_epilogue", {{64, 64}, {64, 64}, {64, 64}},
      function(w, a, b) return {w - a:t():matmul(b) * 0.01} end, true},
    {"two_updates_batched", {{4096}, {4096}, {2048}, {2048}},
      function(p, g, q, h) return {p - g * 0.1, q - h * 0.1} end, true},
  }
  for _, c in ipairs(cases) do
    local name, shapes, f, takes = c[1], c[2], c[3], c[4]
    local function run(eager)
      st.eager(eager)
      st.manual_seed(7)
      local ins = {}
      for i, sh in ipairs(shapes) do ins[i] = st.sync(st.randn(sh)) end
      local outs = f(table.unpack(ins))
      ins = nil
      collectgarbage()
      local bytes = 0
      for _, o in ipairs(outs) do bytes = bytes + 4 * o:numel() end
      st.reset_stats()
      local base = st.stats().bytes_in_use
      st.sync(outs)
      local extra = st.stats().bytes_peak - base
      local r = {}
      for i, o in ipairs(outs) do r[i] = o:tolist() end
      st.eager(false)
      return r, extra, bytes
    end
    st.set_jit_min(0)
    local want = run(true)
    run(false)   -- compiled
    local got, extra, bytes = run(false)
    st.set_jit_min(-1)
    for i = 1, #want do H.check_near(got[i], want[i], 1e-6, name .. " output " .. i) end
    if takes then
      assert(extra < bytes, name .. ": the flush allocated " .. extra .. " bytes for " .. bytes .. " of outputs")
    end
  end
  -- the update's flush adds no buffer of its own
  st.set_jit_min(0)
  local p, g = st.sync(st.randn({256, 256})), st.sync(st.randn({256, 256}))
  for _ = 1, 3 do p:copy_(p - g * 0.1); collectgarbage(); st.sync(p) end
  st.reset_stats()
  local held = st.stats().bytes_in_use
  p:copy_(p - g * 0.1); collectgarbage(); st.sync(p)
  st.set_jit_min(-1)
  eq(st.stats().bytes_peak - held, 0, "p - g * 0.1 written into p's own buffer")
  -- an expression of the old p that outlives the flush unevaluated keeps p's old buffer
  st.set_jit_min(0)
  local old = p:tolist()
  local t
  do
    local c = p * 0.5
    t = c + 1
    p:copy_(c - g)
  end
  collectgarbage()
  st.sync(p)
  st.set_jit_min(-1)
  local tv = t:tolist()
  for i = 1, 256, 37 do H.check_near(tv[i], (function() local r = {} for j = 1, 256 do r[j] = old[i][j] * 0.5 + 1 end return r end)(), 1e-6, "t row " .. i) end
end)

H.done()
