-- test_einsum.lua — st.einsum from Lua: operands as arguments or as a list, values against matmul,
-- sum and transposes, error messages raised as Lua errors, kernel count, gradients. The C tests
-- (tests/test_einsum.c) check the semantics against a plain loop; here the binding is exercised.
local H = dofile((arg[0]:match("(.*/)") or "./") .. "harness.lua")
local test, eq, check = H.test, H.eq, H.check_near

local a = st.tensor{{1, 2, 3}, {4, 5, 6}}
local b = st.tensor{{1, 0}, {0, 1}, {1, 1}}

test("two_operands", function()
  check(st.einsum("ij,jk->ik", a, b), {{4, 5}, {10, 11}})
  check(st.einsum("ij,jk", a, b), st.matmul(a, b), 0, "implicit output")
  check(st.einsum("ij,jk->ik", {a, b}), {{4, 5}, {10, 11}}, 0, "operands as a list")
  check(st.einsum("i,j->ij", st.tensor{1, 2}, st.tensor{3, 4, 5}), {{3, 4, 5}, {6, 8, 10}})
  check(st.einsum("i,i->", st.tensor{1, 2}, st.tensor{3, 4}), 11)
end)

test("one_operand", function()
  check(st.einsum("ij->ji", a), {{1, 4}, {2, 5}, {3, 6}})
  check(st.einsum("ij->", a), 21)
  check(st.einsum("ij->j", a), {5, 7, 9})
  local m = st.tensor{{1, 2}, {3, 4}}
  check(st.einsum("ii->i", m), {1, 4}, 0, "diagonal")
  check(st.einsum("ii", m), 5, 0, "trace")
end)

test("batched_and_attention", function()
  local x, y = st.randn(2, 3, 4), st.randn(2, 4, 5)
  check(st.einsum("bij,bjk->bik", x, y), st.matmul(x, y), 1e-5)
  local q, k = st.randn(2, 2, 3, 4), st.randn(2, 2, 5, 4)
  check(st.einsum("bhqd,bhkd->bhqk", q, k), st.matmul(q, k:transpose(3, 4)), 1e-5)
  local p, v = st.randn(2, 2, 3, 5), st.randn(2, 2, 5, 4)
  check(st.einsum("bhqk,bhkd->bhqd", p, v), st.matmul(p, v), 1e-5)
  local one = st.randn(1, 3, 4)
  check(st.einsum("bij,bjk->bik", one, y), st.matmul(one, y), 1e-5, "size-1 batch broadcasts")
  check(st.einsum("...ij,...jk->...ik", x, y), st.matmul(x, y), 1e-5, "ellipsis")
end)

test("three_operands", function()
  local c = st.tensor{{1, 2}, {3, 4}}
  check(st.einsum("ij,jk,kl->il", a, b, c), st.matmul(st.matmul(a, b), c))
end)

test("errors", function()
  H.raises(function() st.einsum("ij,jk->ik", a, a) end, "index 'j' of \"ij,jk->ik\" has size 3 in operand 1")
  H.raises(function() st.einsum("ij,jk->ik", a) end, "names 2 operands but 1 was given")
  H.raises(function() st.einsum("ij->iz", a) end, "output index 'z'")
  H.raises(function() st.einsum("ij->ii", a) end, "appears twice in the output")
  H.raises(function() st.einsum("ii->i", a) end, "a diagonal needs equal sizes")
  H.raises(function() st.einsum("ijk", a) end, "operand 1 has 2 dims")
  H.raises(function() st.einsum("ij") end, "no operands")
  H.raises(function() st.einsum("ij", 3) end, "tensor expected")
end)

test("one_matmul_kernel", function()
  if st.eager() then print("SKIP " .. "one_matmul_kernel" .. ": eager mode launches no kernel") return end
  local x, y = st.randn(4, 8, 16), st.randn(4, 16, 8)
  st.sync(x, y)
  local r = st.einsum("bij,bjk->bik", x, y)
  st.reset_stats()
  st.sync(r)
  eq(st.stats().kernels_launched, 1, "kernels for bij,bjk->bik")
end)

test("gradients_match_matmul", function()
  local x, y = st.randn(2, 3, 4):requires_grad_(), st.randn(2, 4, 5):requires_grad_()
  st.einsum("bij,bjk->bik", x, y):sum():backward()
  local gx, gy = x.grad, y.grad
  x.grad, y.grad = nil, nil
  st.matmul(x, y):sum():backward()
  check(gx, x.grad, 1e-5)
  check(gy, y.grad, 1e-5)
end)

H.done()
