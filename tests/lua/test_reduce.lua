-- test_reduce.lua — reductions with dims (number or table), keepdim, max/min with 1-based indices,
-- argmax, var/std, logsumexp, softmax.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check = H.test, H.eq, H.check_near

local m = st.tensor{{1, 5, 3}, {4, 2, 6}}

test("sum_mean_prod", function()
  eq(m:sum():dim(), 0); check(m:sum():item(), 21)
  check(m:sum(1), {5, 7, 9}); check(m:sum(2), {9, 12}); check(m:sum(-1), {9, 12})
  check(m:sum(2, true), {{9}, {12}}); eq(H.show(m:sum(1, true):shape()), "{1, 3}")
  check(m:sum({1, 2}), 21)
  check(m:mean(2), {3, 4}); check(m:prod(1), {4, 10, 18})
  check(st.sum(m, 1), {5, 7, 9})
  H.raises(function() m:sum(3) end, "out of range")
  H.raises(function() m:sum(0) end, "1-based")
end)

test("max_values_and_indices", function()
  local v, i = m:max(2)
  check(v, {5, 6}); check(i, {2, 3}); eq(i:dtype(), "i64")
  v, i = m:min(1)
  check(v, {1, 2, 3}); check(i, {1, 2, 1})
  v, i = m:max(1, true)
  eq(H.show(v:shape()), "{1, 3}"); check(i, {{2, 1, 2}})
  local all = m:max()
  eq(all:dim(), 0); eq(all:item(), 6)
  check(m:min():item(), 1)
  check(m:max(st.tensor{3}), {{3, 5, 3}, {4, 3, 6}}, 0, "max with a tensor is elementwise")
end)

test("argmax", function()
  check(m:argmax(2), {2, 3}); check(m:argmin(2), {1, 2})
  eq(m:argmax():item(), 6, "flat 1-based index")
  eq(m:argmax(1, true):dim(), 2)
end)

test("var_std", function()
  local x = st.tensor{1, 2, 3, 4}
  check(x:var(), 5 / 3, 1e-5); check(x:std(), math.sqrt(5 / 3), 1e-5)
  check(x:var(1, false, 0), 1.25, 1e-5)
  check(x:var(1, false, false), 1.25, 1e-5)
  check(m:var(2), {4, 4}, 1e-5)
end)

test("logsumexp_softmax", function()
  local x = st.tensor{{0, 0}, {1, 1}}
  check(x:logsumexp(2), {math.log(2), 1 + math.log(2)}, 1e-5)
  check(x:softmax(2), {{0.5, 0.5}, {0.5, 0.5}}, 1e-6)
  check(x:softmax(), {{0.5, 0.5}, {0.5, 0.5}}, 1e-6)
  check(x:log_softmax(2), {{-math.log(2), -math.log(2)}, {-math.log(2), -math.log(2)}}, 1e-5)
  local e1, e2 = math.exp(0), math.exp(1)
  check(x:softmax(1), {{e1 / (e1 + e2), e1 / (e1 + e2)}, {e2 / (e1 + e2), e2 / (e1 + e2)}}, 1e-5)
end)

test("reduce_int", function()
  local i = st.tensor({{1, 2}, {3, 4}}, "i64")
  eq(math.type(i:sum():item()), "integer"); eq(i:sum():item(), 10)
  local v, idx = i:max(1)
  check(v, {3, 4}); check(idx, {2, 2})
end)

-- Whole-tensor reductions large enough for a GPU to split them over several blocks (CL_GRID: a
-- block per 8192 elements, the last one partial): on the default device against the same values
-- on the CPU, and against a sum in Lua's doubles.
test("full_reductions_over_many_blocks", function()
  for _, n in ipairs({8193, 70001, 300000}) do
    local x = st.randn({n})
    local xc = x:to("cpu")
    local vals, ref = xc:tolist(), 0
    for i = 1, n do ref = ref + vals[i] end
    local function close(a, b, what)
      if math.abs(a - b) > 1e-5 * math.max(1, math.abs(b)) then
        error(string.format("%s over %d elements: %.9g on %s, expected %.9g", what, n, a, x:device(), b))
      end
    end
    close(x:sum():item(), ref, "sum")
    close(x:mean():item(), ref / n, "mean")
    close((x * x):sum():sqrt():item(), (xc * xc):sum():sqrt():item(), "norm")
    eq(x:max():item(), xc:max():item(), "max over " .. n)
    eq(x:min():item(), xc:min():item(), "min over " .. n)
    eq(x:argmax():item(), xc:argmax():item(), "argmax over " .. n)
    eq(x:argmin():item(), xc:argmin():item(), "argmin over " .. n)
    local i = st.arange(n) % 7                       -- integer sums are exact on every device
    eq(i:sum():item(), i:to("cpu"):sum():item(), "integer sum over " .. n)
  end
end)

H.done()
