/*
 * larity.c — the most arguments each C binding takes, and the guard that enforces it: no argument
 * is ever silently dropped (issue 14). x:sum(1, true, 5) once ran as x:sum(1, true); now it is
 * `sum: unexpected argument #4 (5): sum takes at most 3 (the tensor, dims, keepdim)`.
 *
 * Every C function the module puts in st or st.Tensor is registered through lt_setfuncs, which
 * looks its name up in lt_arities below and pushes it as a guard closure: lt_guard compares
 * lua_gettop with the most arguments (one compare on the way in; the guard calls the binding
 * directly, in the same C frame) and raises naming the function, the argument's position and its
 * value. Positions count the tensor (self) as argument 1, as the bindings read them.
 *
 * Invariants:
 *  - A name with no row here is a hard failure: luaopen_stitch raises (so every test fails) rather
 *    than register an unguarded function. A method's row also covers st.<name> (every method is a
 *    module function too); a module function that shares a method's name has its own row.
 *  - Trailing nils past the most are accepted (nil is "no argument" in Lua, as in lt_sizes_only
 *    and the creation functions); anything else there is an error.
 *  - Varargs bindings (LT_VARARGS: sizes, tensors, ...) check their own tails; they are guarded
 *    all the same, so every C function in st and st.Tensor has the same shape: upvalue 1 is the
 *    guard's data (a userdata whose metatable is named LT_ARITY_MT; tests/lua/test_arity.lua
 *    checks that), a binding's own upvalues follow it (LT_UPVALUE).
 *  - Metamethods (__add, __index, ...) are not guarded: Lua calls them with fixed arguments.
 * Like lhelp.c, every file of lua_frontend/ may call this one; it calls none of them.
 */
#include "lstitch_internal.h"

#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#define LT_ARITY_MT "stitch.arity"
/* Varargs, or a binding that checks its own tail: the creation functions (lt_no_more_args, whose
 * message says how to place a tensor on a device) and the sizes of reshape & co (lt_sizes_only). */
#define LT_VARARGS (-1)

typedef struct lt_arity {
    const char *name;
    int where; /* LT_METHOD: x:name(...) and st.name(x, ...); LT_MODULE: st.name(...) only */
    int max;   /* the most arguments, the tensor counted; LT_VARARGS: the binding checks them */
    const char *args;
} lt_arity;

#define LT_AR_UNARY(n) {#n, LT_METHOD, 1, "the tensor"},
#define LT_AR_BINARY(n) {#n, LT_METHOD, 2, "a, b"},

/* The signatures are docs/lua.md's; keep the two agreeing. */
static const lt_arity lt_arities[] = {
    ST_UNARY_API(LT_AR_UNARY) ST_BINARY_API(LT_AR_BINARY)
    /* lstitch.c: methods */
    {"item", LT_METHOD, 1, "the tensor"},
    {"tolist", LT_METHOD, 1, "the tensor"},
    {"shape", LT_METHOD, 1, "the tensor"},
    {"size", LT_METHOD, 2, "the tensor, dim"},
    {"dim", LT_METHOD, 1, "the tensor"},
    {"ndim", LT_METHOD, 1, "the tensor"},
    {"numel", LT_METHOD, 1, "the tensor"},
    {"dtype", LT_METHOD, 1, "the tensor"},
    {"device", LT_METHOD, 1, "the tensor"},
    {"is_contiguous", LT_METHOD, 1, "the tensor"},
    {"sum", LT_METHOD, 3, "the tensor, dims, keepdim"},
    {"mean", LT_METHOD, 3, "the tensor, dims, keepdim"},
    {"prod", LT_METHOD, 3, "the tensor, dims, keepdim"},
    {"logsumexp", LT_METHOD, 3, "the tensor, dims, keepdim"},
    {"max", LT_METHOD, 3, "the tensor, dim, keepdim; or the tensor, other"},
    {"min", LT_METHOD, 3, "the tensor, dim, keepdim; or the tensor, other"},
    {"argmax", LT_METHOD, 3, "the tensor, dim, keepdim"},
    {"argmin", LT_METHOD, 3, "the tensor, dim, keepdim"},
    {"var", LT_METHOD, 4, "the tensor, dims, keepdim, correction"},
    {"std", LT_METHOD, 4, "the tensor, dims, keepdim, correction"},
    {"softmax", LT_METHOD, 2, "the tensor, dim"},
    {"log_softmax", LT_METHOD, 2, "the tensor, dim"},
    {"matmul", LT_METHOD, 2, "a, b"},
    {"clamp", LT_METHOD, 3, "the tensor, lo, hi"},
    {"to", LT_METHOD, 3, "the tensor, dtype and/or device"},
    {"cuda", LT_METHOD, 2, "the tensor, device"},
    {"cpu", LT_METHOD, 1, "the tensor"},
    {"float", LT_METHOD, 1, "the tensor"},
    {"double", LT_METHOD, 1, "the tensor"},
    {"half", LT_METHOD, 1, "the tensor"},
    {"long", LT_METHOD, 1, "the tensor"},
    {"int", LT_METHOD, 1, "the tensor"},
    {"bool", LT_METHOD, 1, "the tensor"},
    {"add_", LT_METHOD, 2, "the tensor, other"},
    {"sub_", LT_METHOD, 2, "the tensor, other"},
    {"mul_", LT_METHOD, 2, "the tensor, other"},
    {"div_", LT_METHOD, 2, "the tensor, other"},
    {"copy_", LT_METHOD, 2, "the tensor, src"},
    {"fill_", LT_METHOD, 2, "the tensor, value"},
    {"zero_", LT_METHOD, 1, "the tensor"},
    {"realize", LT_METHOD, LT_VARARGS, "tensors, or one list of them"},
    /* lstitch.c: module functions */
    {"tensor", LT_MODULE, 2, "data, dtype"},
    {"zeros", LT_MODULE, LT_VARARGS, "sizes, dtype"},
    {"ones", LT_MODULE, LT_VARARGS, "sizes, dtype"},
    {"empty", LT_MODULE, LT_VARARGS, "sizes, dtype"},
    {"rand", LT_MODULE, LT_VARARGS, "sizes, dtype"},
    {"randn", LT_MODULE, LT_VARARGS, "sizes, dtype"},
    {"full", LT_MODULE, LT_VARARGS, "sizes, value, dtype"},
    {"arange", LT_MODULE, LT_VARARGS, "start, stop, step, dtype"},
    {"linspace", LT_MODULE, LT_VARARGS, "start, stop, n, dtype"},
    {"eye", LT_MODULE, LT_VARARGS, "n, m, dtype"},
    {"randint", LT_MODULE, LT_VARARGS, "lo, hi, sizes, dtype"},
    {"manual_seed", LT_MODULE, 1, "seed"},
    {"get_rng_state", LT_MODULE, 0, ""},
    {"set_rng_state", LT_MODULE, 1, "state"},
    {"where", LT_MODULE, 3, "cond, a, b"},
    {"einsum", LT_MODULE, LT_VARARGS, "spec, tensors"},
    {"is_tensor", LT_MODULE, 1, "value"},
    {"sync", LT_MODULE, LT_VARARGS, "tensors, or one list of them"},
    {"synchronize", LT_MODULE, 0, "no arguments"},
    {"graph", LT_MODULE, LT_VARARGS, "path, tensors"},
    {"stats", LT_MODULE, 0, ""},
    {"reset_stats", LT_MODULE, 0, ""},
    {"device", LT_MODULE, 0, ""},
    {"set_device", LT_MODULE, 1, "device"},
    {"cuda_device_count", LT_MODULE, 0, ""},
    {"empty_cache", LT_MODULE, 0, ""},
    {"eager", LT_MODULE, 1, "on"},
    {"set_debug", LT_MODULE, 1, "level"},
    {"set_jit_min", LT_MODULE, 1, "n"},
    {"set_poison", LT_MODULE, 1, "on"},
    {"debug_fail_alloc", LT_MODULE, 1, "n"},
    {"collectgarbage", LT_MODULE, 0, ""},
    /* lshape.c */
    {"reshape", LT_METHOD, LT_VARARGS, "the tensor, sizes"},
    {"view", LT_METHOD, LT_VARARGS, "the tensor, sizes"},
    {"expand", LT_METHOD, LT_VARARGS, "the tensor, sizes"},
    {"as_strided", LT_METHOD, 4, "the tensor, size, stride, offset"},
    {"expand_as", LT_METHOD, 2, "the tensor, other"},
    {"t", LT_METHOD, 1, "the tensor"},
    {"transpose", LT_METHOD, 3, "the tensor, dim a, dim b"},
    {"permute", LT_METHOD, LT_VARARGS, "the tensor, dims"},
    {"squeeze", LT_METHOD, 2, "the tensor, dim"},
    {"unsqueeze", LT_METHOD, 2, "the tensor, dim"},
    {"flatten", LT_METHOD, 3, "the tensor, start dim, end dim"},
    {"contiguous", LT_METHOD, 1, "the tensor"},
    {"clone", LT_METHOD, 1, "the tensor"},
    {"narrow", LT_METHOD, 4, "the tensor, dim, start, length"},
    {"select", LT_METHOD, 3, "the tensor, dim, index"},
    {"cat", LT_MODULE, 2, "list, dim"},
    {"stack", LT_MODULE, 2, "list, dim"},
    {"_zero_pad", LT_MODULE, 3, "the tensor, pads before, pads after"},
    {"_attention", LT_MODULE, 7, "q, k, v, scale, causal, mask, dropout"},
    {"_store", LT_MODULE, 1, "the tensor"},
    /* lindex.c */
    {"gather", LT_METHOD, 3, "the tensor, dim, index"},
    {"index_select", LT_METHOD, 3, "the tensor, dim, index"},
    {"scatter_add", LT_METHOD, 4, "the tensor, dim, index, src"},
    {"index_add", LT_METHOD, 4, "the tensor, dim, index, src"},
    {"one_hot", LT_MODULE, 2, "index, n"},
    /* lautograd.c */
    {"requires_grad_", LT_METHOD, 2, "the tensor, on"},
    {"backward", LT_METHOD, 2, "the tensor, gradient"},
    {"detach", LT_METHOD, 1, "the tensor"},
    {"retain_grad", LT_METHOD, 1, "the tensor"},
    {"_function_apply", LT_MODULE, 4, "name, inputs, outputs, backward"},
    {"_after_backward", LT_MODULE, 1, "function"},
    {"autocast", LT_MODULE, LT_VARARGS, "dtype, fn, its arguments"},
    {"autocast_dtype", LT_MODULE, 0, ""},
    {"no_grad", LT_MODULE, LT_VARARGS, "fn, its arguments"},
    {"enable_grad", LT_MODULE, LT_VARARGS, "fn, its arguments"},
    {"is_grad_enabled", LT_MODULE, 0, ""},
    /* lio.c */
    {"save", LT_MODULE, 3, "path, tensors, metadata"},
    {"load", LT_MODULE, 1, "path"},
    {"read_idx", LT_MODULE, 1, "path"},
    /* llib.c */
    {"_lib", LT_MODULE, 1, "name"},
    {"_isatty", LT_MODULE, 0, ""},
    {"_now", LT_MODULE, 0, ""},
};

/* What a guard closure holds (its upvalue 1). */
typedef struct lt_guard_data {
    lua_CFunction fn;
    int max; /* INT_MAX for varargs */
    const lt_arity *a;
} lt_guard_data;

/* The argument at i for a message (pushed): numbers and booleans as Lua writes them, strings
 * quoted (cut at 40 bytes), anything else by its type: a tensor is never printed (a sync point). */
static const char *lt_push_argstr(lua_State *L, int i) {
    int ty = lua_type(L, i);
    if (ty == LUA_TNUMBER || ty == LUA_TBOOLEAN) return luaL_tolstring(L, i, NULL);
    if (ty == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(L, i, &n);
        return lua_pushfstring(L, "\"%s\"%s", n > 40 ? lua_pushlstring(L, s, 40) : s, n > 40 ? "..." : "");
    }
    if (luaL_testudata(L, i, LT_MT)) return lua_pushliteral(L, "a tensor");
    return lua_pushfstring(L, "a %s", luaL_typename(L, i));
}

LT_FUNC void lt_check_arity(lua_State *L, int max, const char *name, const char *args) {
    for (int i = max + 1, top = lua_gettop(L); i <= top; i++) {
        if (lua_isnil(L, i)) continue;
        const char *v = lt_push_argstr(L, i);
        if (max == 0) luaL_error(L, "%s: unexpected argument #%d (%s): %s takes no arguments", name, i, v, name);
        luaL_error(L, "%s: unexpected argument #%d (%s): %s takes at most %d (%s)", name, i, v, name, max, args);
    }
}

/* The closure every registered C function becomes; the extra-argument check is the only cost on
 * the way in (the binding runs in this frame, with this stack). */
static int lt_guard(lua_State *L) {
    const lt_guard_data *g = lua_touserdata(L, lua_upvalueindex(1));
    if (lua_gettop(L) > g->max) lt_check_arity(L, g->max, g->a->name, g->a->args);
    return g->fn(L);
}

static const lt_arity *lt_arity_find(const char *name, int where) {
    size_t n = sizeof lt_arities / sizeof lt_arities[0];
    for (size_t k = 0; k < n; k++)
        if (lt_arities[k].where == where && strcmp(lt_arities[k].name, name) == 0) return &lt_arities[k];
    if (where == LT_MODULE) return lt_arity_find(name, LT_METHOD); /* st.backward(x), ... */
    return NULL;
}

LT_FUNC void lt_setfuncs(lua_State *L, const luaL_Reg *l, int where, int nup) {
    luaL_checkstack(L, nup + 2, "too many upvalues");
    luaL_newmetatable(L, LT_ARITY_MT); /* once: it only names the guards' data for the tests */
    lua_pop(L, 1);
    for (; l->name; l++) {
        const lt_arity *a = lt_arity_find(l->name, where);
        if (!a)
            luaL_error(L, "luaopen_stitch: %s '%s' has no row in lua_frontend/larity.c (the most arguments it takes)",
                       where == LT_METHOD ? "method" : "function", l->name);
        lt_guard_data *g = lua_newuserdatauv(L, sizeof *g, 0);
        g->fn = l->func;
        g->max = a->max == LT_VARARGS ? INT_MAX : a->max;
        g->a = a;
        luaL_setmetatable(L, LT_ARITY_MT);
        for (int i = 0; i < nup; i++) lua_pushvalue(L, -nup - 1);
        lua_pushcclosure(L, lt_guard, nup + 1);
        lua_setfield(L, -(nup + 2), l->name);
    }
    lua_pop(L, nup);
}
