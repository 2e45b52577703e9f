-- test_graph.lua — st.graph from Lua: it realizes its tensors and returns them (like st.sync),
-- writes the flush's plan in Graphviz dot (one cluster per kernel), st.graph(path) takes
-- everything pending, and an unwritable path is a Lua error naming it. The dot content itself
-- is checked in tests/test_graph.c.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq = H.test, H.eq

local dir = os.tmpname()  -- a unique name; the files of this test live next to it
os.remove(dir)
local function path(name) return dir .. "-" .. name end
local function slurp(p)
  local f = assert(io.open(p, "rb"))
  local s = f:read("a")
  f:close()
  return s
end
local function count(s, pat)
  local n = 0
  for _ in s:gmatch(pat) do n = n + 1 end
  return n
end

test("graph_returns_tensors_and_writes_dot", function()
  if st.eager() then print("SKIP " .. "graph_returns_tensors_and_writes_dot" .. ": eager mode has no pending plan") return end
  local x = st.tensor{{1, 2, 3}, {4, 5, 6}}
  local y, z = x:softmax(2), (x * 2):sum()
  local a, b = st.graph(path("two.dot"), y, z)
  eq(a, y, "first result")
  eq(b, z, "second result")
  eq(z:item(), 42)
  local s = slurp(path("two.dot"))
  assert(s:find("digraph stitch {", 1, true), "a digraph")
  assert(count(s, "subgraph cluster_g%d+") >= 1, "clusters")
  assert(s:find("(2, 3) f32", 1, true), "shapes in labels")
  os.remove(path("two.dot"))
  os.remove(path("two.svg"))
end)

test("graph_everything_pending", function()
  if st.eager() then print("SKIP " .. "graph_everything_pending" .. ": eager mode has no pending plan") return end
  local w = st.tensor{1, 2, 3}:exp()
  eq(select("#", st.graph(path("all.dot"))), 0, "no results")
  assert(slurp(path("all.dot")):find("exp", 1, true), "exp in the plan")
  os.remove(path("all.dot"))
  os.remove(path("all.svg"))
end)

test("graph_unwritable_path", function()
  local v = st.tensor{1, 2} + 1
  H.raises(function() st.graph("/nonexistent-stitch-dir/g.dot", v) end, "/nonexistent-stitch-dir/g.dot")
end)

H.done()
