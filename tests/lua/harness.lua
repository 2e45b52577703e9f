-- harness.lua — a tiny test harness for the Lua tests: test(name, fn) runs fn under pcall and prints
-- `PASS name` or `FAIL name: why`; done() exits with status 1 if anything failed.
-- Load it with: local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local H = { failed = 0, passed = 0 }

function H.test(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  if ok then
    H.passed = H.passed + 1
    print("PASS " .. name)
  else
    H.failed = H.failed + 1
    print("FAIL " .. name .. ": " .. tostring(err):gsub("\n", "\n    "))
  end
  collectgarbage()
end

-- near(a, b, tol): numbers, or tables of numbers (nested), or tensors (compared through tolist).
function H.near(a, b, tol)
  tol = tol or 1e-5
  if st.is_tensor(a) then a = a:tolist() end
  if st.is_tensor(b) then b = b:tolist() end
  if type(a) == "table" and type(b) == "table" then
    if #a ~= #b then return false end
    for i = 1, #a do
      if not H.near(a[i], b[i], tol) then return false end
    end
    return true
  end
  if type(a) ~= "number" or type(b) ~= "number" then return a == b end
  if a ~= a or b ~= b then return a ~= a and b ~= b end
  return math.abs(a - b) <= tol * (1 + math.abs(b))
end

local function show(v)
  if type(v) == "table" then
    local parts = {}
    for i = 1, #v do parts[i] = show(v[i]) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end
H.show = show

-- check_near(got, want, tol, what): raises a readable error when they differ.
function H.check_near(got, want, tol, what)
  if not H.near(got, want, tol) then
    local g = st.is_tensor(got) and got:tolist() or got
    local w = st.is_tensor(want) and want:tolist() or want
    error((what or "values") .. ": got " .. show(g) .. ", want " .. show(w), 2)
  end
end

function H.eq(got, want, what)
  if got ~= want then
    error((what or "value") .. ": got " .. show(got) .. ", want " .. show(want), 2)
  end
end

-- raises(fn, pattern): fn must raise an error whose message matches pattern (plain find).
function H.raises(fn, pattern)
  local ok, err = pcall(fn)
  if ok then error("expected an error" .. (pattern and (" matching '" .. pattern .. "'") or ""), 2) end
  if pattern and not tostring(err):find(pattern, 1, true) then
    error("error '" .. tostring(err) .. "' does not contain '" .. pattern .. "'", 2)
  end
  return err
end

-- lcg(seed): a function giving deterministic values in [-1, 1) (a linear congruential generator).
function H.lcg(seed)
  local s = seed
  return function()
    s = (s * 1103515245 + 12345) % 2147483648
    return s / 1073741824 - 1
  end
end

-- nested(shape, gen): a nested Lua table of that shape filled by gen().
function H.nested(shape, gen, d)
  d = d or 1
  local t = {}
  for i = 1, shape[d] do t[i] = d == #shape and gen() or H.nested(shape, gen, d + 1) end
  return t
end

function H.done()
  io.stdout:flush()
  if H.failed > 0 then os.exit(1) end
end

return H
