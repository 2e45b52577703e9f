/*
 * lstitch.c — the `stitch` Lua module's entry: luaopen_stitch (the tensor metatable, the method
 * table st.Tensor, the module table) and the core tensor bindings — elementwise ops, creation,
 * __index / __newindex dispatch and the other metamethods, inspection, reductions, linear algebra,
 * casts and devices, in-place ops, runtime control — on top of the public C API (include/stitch.h)
 * only. docs/lua.md is the reference. The other parts register their own bindings when
 * luaopen_stitch calls their lt_open_*: lshape.c (views, cat, stack), lindex.c (t[i], t[{...}]
 * and index-tensor ops), lautograd.c, lio.c, llib.c (the embedded Lua library); lprint.c provides
 * item, tolist and __tostring. Dependencies run one way: this file calls the parts, lhelp.c and
 * larity.c (the shared helpers); the parts call those two only, never this file. Every C function
 * goes into st and st.Tensor through larity.c's lt_setfuncs, which guards it against extra
 * arguments.
 *
 * Invariants (of the whole module; every binding, in this file or a part, keeps them):
 *  - A tensor userdata (lt_box) owns exactly one reference to its st_tensor * (NULL once closed);
 *    __gc and __close drop it, idempotently.
 *  - Lua errors are longjmps, so no st_tensor * is ever held only by a C local across something that
 *    can raise: every binding (1) checks all its arguments, (2) pushes the result's box, (3) runs the
 *    C calls in a helper that cannot raise and releases its own temporaries, (4) stores the result
 *    in the box or raises with st_last_error_base(1) (positions 1-based). Scratch host memory is Lua userdata.
 *  - Lua conventions at the boundary: dims and indices are 1-based (negative ones count from the
 *    end), index tensors hold 1-based indices; the C API is 0-based. Conversions happen in the
 *    bindings only (lhelp.c: lt_dim, lt_norm_index, lt_shift; lindex.c: the index keys).
 *  - Lua's collector cannot see tensor memory: the allocation observer (lhelp.c) counts the bytes
 *    the runtime allocates, and after each call a full collection runs when that growth passes the
 *    live size (lt_gc_feed). An out-of-memory failure collects and retries the call once (LT_TRY):
 *    st calls are functional, a failed call leaves nothing behind.
 */
#include "lstitch_internal.h"

#include <lauxlib.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

typedef st_tensor *(*lt_redfn)(st_tensor *, int, const int *, int);

/* ------------------------------------------------------------------------------------------------
 * Elementwise: st.exp(x) / x:exp(), st.add(a, b) / a:add(b) / a + b (a number on either side)
 * ---------------------------------------------------------------------------------------------- */

#define LT_DEF_UNARY(name)                                                                       \
    static int lt_u_##name(lua_State *L) { return lt_unary(L, st_##name, #name); }
#define LT_DEF_BINARY(name)                                                                      \
    static int lt_b_##name(lua_State *L) { return lt_binary(L, st_##name, #name); }
ST_UNARY_API(LT_DEF_UNARY)
ST_BINARY_API(LT_DEF_BINARY)

/* ------------------------------------------------------------------------------------------------
 * Creation
 * ---------------------------------------------------------------------------------------------- */

/* st.tensor(tbl | number | boolean | tensor [, dtype]) */
static int lt_tensor_new(lua_State *L) {
    int dt = lua_isnoneornil(L, 2) ? -1 : (int)lt_optdtype(L, 2, ST_F32);
    st_tensor *src = lt_totensor(L, 1);
    if (lua_istable(L, 1) && !src) {
        lt_push_table_tensor(L, 1, dt);
        return 1;
    }
    lt_box *box;
    st_tensor *r;
    if (src) {
        box = lt_push_box(L);
        if (dt < 0) LT_TRY(L, r, st_clone(src));
        else LT_TRY(L, r, st_cast(src, (st_dtype)dt));
    } else if (lua_isboolean(L, 1)) {
        box = lt_push_box(L);
        LT_TRY(L, r, st_scalar(lua_toboolean(L, 1), dt < 0 ? ST_BOOL : (st_dtype)dt));
    } else {
        double v = (double)luaL_checknumber(L, 1);
        box = lt_push_box(L);
        LT_TRY(L, r, st_scalar(v, dt < 0 ? ST_F32 : (st_dtype)dt));
    }
    return lt_box_finish(L, box, r, "tensor");
}

/* A creation function's arguments end at i - 1: anything at i or after that is not nil is an error
 * (st.randn(2, 3, "f32", "cpu") once dropped "cpu" silently and made the tensor elsewhere). */
static void lt_no_more_args(lua_State *L, int i, const char *name) {
    for (int top = lua_gettop(L); i <= top; i++) {
        if (lua_isnil(L, i)) continue;
        luaL_where(L, 1);
        lua_pushfstring(L, "%s: unexpected argument #%d (%s%s%s): the arguments are the sizes and an optional "
                           "dtype; put a tensor on a device with :to(device)",
                        name, i, lua_type(L, i) == LUA_TSTRING ? "\"" : "a ",
                        lua_type(L, i) == LUA_TSTRING ? lua_tostring(L, i) : luaL_typename(L, i),
                        lua_type(L, i) == LUA_TSTRING ? "\"" : "");
        lua_concat(L, 2);
        lua_error(L);
    }
}

typedef st_tensor *(*lt_shapefn)(st_dtype, int, const int64_t *);
static int lt_create(lua_State *L, lt_shapefn fn, const char *name) {
    int64_t shape[ST_MAX_DIMS];
    int next;
    int nd = lt_creation_shape(L, 1, shape, &next);
    st_dtype dt = lt_optdtype(L, next, ST_F32);
    lt_no_more_args(L, next + 1, name);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, fn(dt, nd, shape));
    return lt_box_finish(L, box, r, name);
}
static int lt_zeros(lua_State *L) { return lt_create(L, st_zeros, "zeros"); }
static int lt_ones(lua_State *L) { return lt_create(L, st_ones, "ones"); }
static int lt_empty(lua_State *L) { return lt_create(L, st_empty, "empty"); }
static int lt_rand(lua_State *L) { return lt_create(L, st_rand, "rand"); }
static int lt_randn(lua_State *L) { return lt_create(L, st_randn, "randn"); }

/* st.full(shape, v [, dtype]) */
static int lt_full(lua_State *L) {
    int64_t shape[ST_MAX_DIMS];
    int next;
    int nd = lt_creation_shape(L, 1, shape, &next);
    double v = lua_isboolean(L, next) ? lua_toboolean(L, next) : (double)luaL_checknumber(L, next);
    st_dtype def = lua_isboolean(L, next) ? ST_BOOL : ST_F32;
    st_dtype dt = lt_optdtype(L, next + 1, def);
    lt_no_more_args(L, next + 2, "full");
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_full(dt, nd, shape, v));
    return lt_box_finish(L, box, r, "full");
}

/* st.arange(n) / st.arange(a, b [, step]) [, dtype]: [a, b) like PyTorch; i64 when every bound is an
 * integer, f32 otherwise. */
static int lt_arange(lua_State *L) {
    int nnum = 0;
    bool allint = true;
    while (nnum < 3 && lua_type(L, nnum + 1) == LUA_TNUMBER) {
        if (!lua_isinteger(L, nnum + 1)) allint = false;
        nnum++;
    }
    if (nnum == 0) luaL_argerror(L, 1, "number expected");
    double a = 0, b, step = 1;
    if (nnum == 1) {
        b = (double)lua_tonumber(L, 1);
    } else {
        a = (double)lua_tonumber(L, 1);
        b = (double)lua_tonumber(L, 2);
        if (nnum == 3) step = (double)lua_tonumber(L, 3);
    }
    st_dtype dt = lt_optdtype(L, nnum + 1, allint ? ST_I64 : ST_F32);
    lt_no_more_args(L, nnum + 2, "arange");
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_arange(a, b, step, dt));
    return lt_box_finish(L, box, r, "arange");
}

static int lt_linspace(lua_State *L) {
    double a = (double)luaL_checknumber(L, 1), b = (double)luaL_checknumber(L, 2);
    int64_t n = (int64_t)luaL_checkinteger(L, 3);
    st_dtype dt = lt_optdtype(L, 4, ST_F32);
    lt_no_more_args(L, 5, "linspace");
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_linspace(a, b, n, dt));
    return lt_box_finish(L, box, r, "linspace");
}

/* st.eye(n [, m] [, dtype]) */
static int lt_eye(lua_State *L) {
    int64_t n = (int64_t)luaL_checkinteger(L, 1), m = n;
    int next = 2;
    if (lua_type(L, 2) == LUA_TNUMBER) m = (int64_t)luaL_checkinteger(L, next++);
    st_dtype dt = lt_optdtype(L, next, ST_F32);
    lt_no_more_args(L, next + 1, "eye");
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_eye(n, m, dt));
    return lt_box_finish(L, box, r, "eye");
}

/* st.randint(lo, hi, shape... [, dtype]): both ends inclusive, like math.random. */
static int lt_randint(lua_State *L) {
    int64_t lo = (int64_t)luaL_checkinteger(L, 1), hi = (int64_t)luaL_checkinteger(L, 2);
    int64_t shape[ST_MAX_DIMS];
    int next;
    int nd = lt_creation_shape(L, 3, shape, &next);
    st_dtype dt = lt_optdtype(L, next, ST_I64);
    lt_no_more_args(L, next + 1, "randint");
    if (hi < lo) return luaL_error(L, "randint: empty range [%I, %I]", (lua_Integer)lo, (lua_Integer)hi);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_randint(lo, hi + 1, dt, nd, shape));
    return lt_box_finish(L, box, r, "randint");
}

static int lt_manual_seed(lua_State *L) {
    st_manual_seed((uint64_t)luaL_checkinteger(L, 1));
    return 0;
}

/* st.get_rng_state() -> {seed, offset}; st.set_rng_state(state) (integers: the 64-bit patterns) */
static int lt_get_rng_state(lua_State *L) {
    uint64_t seed, offset;
    st_get_rng_state(&seed, &offset);
    lua_createtable(L, 2, 0);
    lua_pushinteger(L, (lua_Integer)seed);
    lua_rawseti(L, -2, 1);
    lua_pushinteger(L, (lua_Integer)offset);
    lua_rawseti(L, -2, 2);
    return 1;
}

static int lt_set_rng_state(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer v[2];
    for (int i = 0; i < 2; i++) {
        lua_geti(L, 1, i + 1);
        int ok;
        v[i] = lua_tointegerx(L, -1, &ok);
        if (!ok) return luaL_error(L, "set_rng_state: expected the table st.get_rng_state() returns ({seed, offset}: two integers)");
        lua_pop(L, 1);
    }
    st_set_rng_state((uint64_t)v[0], (uint64_t)v[1]);
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Metamethods and inspection
 * ---------------------------------------------------------------------------------------------- */

/* __index: method names, tensor properties (lautograd.c), then t[i] / t[{...}] (lindex.c).
 * upvalue 1: the methods table. */
static int lt_index(lua_State *L) {
    if (lua_type(L, 2) == LUA_TSTRING) {
        lua_pushvalue(L, 2);
        if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
        lua_pop(L, 1);
        if (lt_autograd_get(L, lt_check(L, 1), lua_tostring(L, 2))) return 1;
        lua_pushnil(L);
        return 1;
    }
    return lt_index_get(L, lt_check(L, 1));
}

/* __newindex: tensor properties (lautograd.c), then t[i] = v / t[{...}] = v (lindex.c). */
static int lt_newindex(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING) {
        if (lt_autograd_set(L, t, lua_tostring(L, 2), 3)) return 0;
        return luaL_error(L, "cannot set field '%s' on a tensor (add methods to st.Tensor)", lua_tostring(L, 2));
    }
    return lt_index_set(L, t);
}

static int lt_gc(lua_State *L) {
    lt_box *b = luaL_checkudata(L, 1, LT_MT);
    st_release(b->t);
    b->t = NULL;
    return 0;
}

static int lt_len(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    if (st_ndim(t) == 0) return luaL_error(L, "len() of a 0-d tensor");
    lua_pushinteger(L, (lua_Integer)st_size(t, 0));
    return 1;
}

static void lt_push_shape(lua_State *L, st_tensor *t) {
    int nd = st_ndim(t);
    int64_t sh[ST_MAX_DIMS];
    st_shape(t, sh);
    lua_createtable(L, nd, 0);
    for (int d = 0; d < nd; d++) {
        lua_pushinteger(L, (lua_Integer)sh[d]);
        lua_rawseti(L, -2, d + 1);
    }
}

static int lt_shape(lua_State *L) {
    lt_push_shape(L, lt_check(L, 1));
    return 1;
}

static int lt_size(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    if (lua_isnoneornil(L, 2)) {
        lt_push_shape(L, t);
        return 1;
    }
    int d = lt_checkdim(L, 2, st_ndim(t), false);
    lua_pushinteger(L, st_ndim(t) == 0 ? 1 : (lua_Integer)st_size(t, d));
    return 1;
}

static int lt_ndim(lua_State *L) {
    lua_pushinteger(L, st_ndim(lt_check(L, 1)));
    return 1;
}
static int lt_numel(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)st_numel(lt_check(L, 1)));
    return 1;
}
static int lt_dtype(lua_State *L) {
    lua_pushstring(L, st_dtype_name(st_dtype_of(lt_check(L, 1))));
    return 1;
}
static int lt_device(lua_State *L) {
    lua_pushstring(L, st_device_of(lt_check(L, 1)));
    return 1;
}
static int lt_is_contiguous(lua_State *L) {
    lua_pushboolean(L, st_is_contiguous(lt_check(L, 1)));
    return 1;
}
static int lt_is_tensor(lua_State *L) {
    lua_pushboolean(L, luaL_testudata(L, 1, LT_MT) != NULL);
    return 1;
}

/* ------------------------------------------------------------------------------------------------
 * Reductions
 * ---------------------------------------------------------------------------------------------- */

static int lt_reduce(lua_State *L, lt_redfn fn, const char *name) {
    st_tensor *t = lt_check(L, 1);
    int axes[ST_MAX_DIMS];
    int n = lt_axes(L, 2, st_ndim(t), axes);
    int keep = lua_toboolean(L, 3);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, fn(t, n, axes, keep));
    return lt_box_finish(L, box, r, name);
}
static int lt_sum(lua_State *L) { return lt_reduce(L, st_sum, "sum"); }
static int lt_mean(lua_State *L) { return lt_reduce(L, st_mean, "mean"); }
static int lt_prod(lua_State *L) { return lt_reduce(L, st_prod, "prod"); }
static int lt_logsumexp(lua_State *L) { return lt_reduce(L, st_logsumexp, "logsumexp"); }

typedef st_tensor *(*lt_varfn)(st_tensor *, int, const int *, int, int);
static int lt_varstd(lua_State *L, lt_varfn fn, const char *name) {
    st_tensor *t = lt_check(L, 1);
    int axes[ST_MAX_DIMS];
    int n = lt_axes(L, 2, st_ndim(t), axes);
    int keep = lua_toboolean(L, 3);
    int corr = 1;
    if (lua_isboolean(L, 4)) corr = lua_toboolean(L, 4);
    else if (!lua_isnoneornil(L, 4)) corr = (int)luaL_checkinteger(L, 4);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, fn(t, n, axes, corr, keep));
    return lt_box_finish(L, box, r, name);
}
static int lt_var(lua_State *L) { return lt_varstd(L, st_var, "var"); }
static int lt_std(lua_State *L) { return lt_varstd(L, st_std, "std"); }

static st_tensor *lt_arg_apply(st_tensor *t, int dim, int keep, bool ismax) {
    st_tensor *i0 = ismax ? st_argmax(t, dim, keep) : st_argmin(t, dim, keep);
    st_tensor *r = lt_shift(i0, 1);
    st_release(i0);
    return r;
}

/* x:argmax([d [, keepdim]]): 1-based indices; over the flattened tensor without d. */
static int lt_arg(lua_State *L, bool ismax) {
    st_tensor *t = lt_check(L, 1);
    int dim = lua_isnoneornil(L, 2) ? ST_ALL_DIMS : lt_checkdim(L, 2, st_ndim(t), false);
    int keep = lua_toboolean(L, 3);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, lt_arg_apply(t, dim, keep, ismax));
    return lt_box_finish(L, box, r, ismax ? "argmax" : "argmin");
}
static int lt_argmax(lua_State *L) { return lt_arg(L, true); }
static int lt_argmin(lua_State *L) { return lt_arg(L, false); }

/* x:max() → 0-d; x:max(d [, keepdim]) → values, 1-based indices; x:max({d1, d2}) → values;
 * x:max(y) with a tensor or number y → elementwise maximum (Torch7). */
static int lt_maxmin(lua_State *L, bool ismax) {
    const char *name = ismax ? "max" : "min";
    if (lt_totensor(L, 2)) {
        lt_check_arity(L, 2, name, "the tensor, other"); /* no keepdim for the elementwise form */
        return lt_binary(L, ismax ? st_maximum : st_minimum, name);
    }
    st_tensor *t = lt_check(L, 1);
    if (lua_type(L, 2) != LUA_TNUMBER) return lt_reduce(L, ismax ? st_max : st_min, name);
    int dim = lt_checkdim(L, 2, st_ndim(t), false);
    int keep = lua_toboolean(L, 3);
    lt_box *bv = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, (ismax ? st_max : st_min)(t, 1, &dim, keep));
    lt_box_finish(L, bv, r, name);
    lt_box *bi = lt_push_box(L);
    LT_TRY(L, r, lt_arg_apply(t, dim, keep, ismax));
    lt_box_finish(L, bi, r, name);
    return 2;
}
static int lt_max(lua_State *L) { return lt_maxmin(L, true); }
static int lt_min(lua_State *L) { return lt_maxmin(L, false); }

typedef st_tensor *(*lt_dimfn)(st_tensor *, int);
static int lt_softmax_like(lua_State *L, lt_dimfn fn, const char *name) {
    st_tensor *t = lt_check(L, 1);
    int dim = lua_isnoneornil(L, 2) ? lt_dim(L, -1, st_ndim(t), false) : lt_checkdim(L, 2, st_ndim(t), false);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, fn(t, dim));
    return lt_box_finish(L, box, r, name);
}
static int lt_softmax(lua_State *L) { return lt_softmax_like(L, st_softmax, "softmax"); }
static int lt_log_softmax(lua_State *L) { return lt_softmax_like(L, st_log_softmax, "log_softmax"); }

/* ------------------------------------------------------------------------------------------------
 * Elementwise extras, linear algebra, casts and devices
 * ---------------------------------------------------------------------------------------------- */

static int lt_matmul(lua_State *L) {
    st_tensor *a = lt_check(L, 1), *b = lt_check(L, 2);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_matmul(a, b));
    return lt_box_finish(L, box, r, "matmul");
}

/* st._attention(q, k, v, scale, causal, mask, dropout): st_attention (scale nil: 1/sqrt(E); mask
 * nil: none; dropout nil: 0); the checked entry is F.scaled_dot_product_attention
 * (lib/nn_functional.lua). */
static int lt_attention(lua_State *L) {
    st_tensor *q = lt_check(L, 1), *k = lt_check(L, 2), *v = lt_check(L, 3);
    double scale = lua_isnoneornil(L, 4) ? NAN : luaL_checknumber(L, 4);
    int causal = lua_toboolean(L, 5);
    st_tensor *mask = lua_isnoneornil(L, 6) ? NULL : lt_check(L, 6);
    double dropout = luaL_optnumber(L, 7, 0);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_attention(q, k, v, mask, scale, causal, dropout));
    return lt_box_finish(L, box, r, "_attention");
}

/* st.einsum(spec, a, b, ...) or st.einsum(spec, {a, b, ...}) */
static int lt_einsum(lua_State *L) {
    const char *spec = luaL_checkstring(L, 1);
    int n;
    st_tensor **ts;
    if (lua_istable(L, 2)) {
        lua_settop(L, 2);
        ts = lt_tensor_list(L, 2, &n);
    } else {
        n = lua_gettop(L) - 1;
        if (n < 1) return luaL_error(L, "einsum: no operands for \"%s\"", spec);
        ts = lua_newuserdatauv(L, sizeof *ts * (size_t)n, 0);
        for (int k = 0; k < n; k++) ts[k] = lt_check(L, k + 2);
    }
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_einsum(spec, n, ts));
    return lt_box_finish(L, box, r, "einsum");
}

static int lt_clamp(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    double lo = lua_isnoneornil(L, 2) ? NAN : (double)luaL_checknumber(L, 2);
    double hi = lua_isnoneornil(L, 3) ? NAN : (double)luaL_checknumber(L, 3);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_clamp(t, lo, hi));
    return lt_box_finish(L, box, r, "clamp");
}

static st_tensor *lt_where_apply(st_tensor *c, const lt_operand *a, const lt_operand *b) {
    st_tensor *ta = lt_take(a), *tb = NULL, *r = NULL;
    if (ta) tb = lt_take(b);
    if (ta && tb) r = st_where(c, ta, tb);
    if (ta) lt_put(a, ta);
    if (tb) lt_put(b, tb);
    return r;
}

static int lt_where(lua_State *L) {
    st_tensor *c = lt_check(L, 1);
    lt_operand a, b;
    lt_operand_get(L, 2, &a);
    lt_operand_get(L, 3, &b);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, lt_where_apply(c, &a, &b));
    return lt_box_finish(L, box, r, "where");
}

static int lt_cast_to(lua_State *L, st_dtype dt) {
    st_tensor *t = lt_check(L, 1);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_cast(t, dt));
    return lt_box_finish(L, box, r, "to");
}

/* st.device(): the default device's name; st.set_device(name) changes it (an error if unusable). */
static int l_device(lua_State *L) {
    lua_pushstring(L, st_default_device());
    return 1;
}
static int l_set_device(lua_State *L) {
    if (st_set_default_device(luaL_checkstring(L, 1)) != ST_OK) return luaL_error(L, "%s", st_last_error_base(1));
    return 0;
}
static int l_cuda_device_count(lua_State *L) {
    lua_pushinteger(L, st_cuda_device_count());
    return 1;
}
static int l_empty_cache(lua_State *L) {
    (void)L;
    st_empty_cache();
    return 0;
}

static bool lt_on_device(st_tensor *t, const char *device) {
    return strcmp(st_device_of(t), device) == 0 || (strcmp(device, "cuda") == 0 && strcmp(st_device_of(t), "cuda:0") == 0);
}

/* x:to(device) moves (x itself when already there); x:to(dtype) casts. */
static int lt_move(lua_State *L, const char *device) {
    st_tensor *t = lt_check(L, 1);
    if (lt_on_device(t, device)) {
        lua_pushvalue(L, 1);
        return 1;
    }
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_to(t, device));
    return lt_box_finish(L, box, r, "to");
}
/* The device or dtype name at i: a string, not a number (Lua would turn 99 into "99", reported as
 * an unknown device "99"; the device numbered 99 is "cuda:99"). */
static const char *lt_device_name(lua_State *L, int i, const char *what) {
    if (lua_type(L, i) == LUA_TSTRING) return lua_tostring(L, i);
    if (lua_type(L, i) == LUA_TNUMBER)
        luaL_argerror(L, i, lua_pushfstring(L, "expected %s name as a string, got the number %s (the device numbered "
                                               "%s is \"cuda:%s\")", what, lua_tostring(L, i), lua_tostring(L, i),
                                            lua_tostring(L, i)));
    luaL_typeerror(L, i, what);
    return NULL;
}
static bool lt_is_device(const char *s) {
    return strcmp(s, "cpu") == 0 || strcmp(s, "cuda") == 0 || strcmp(s, "gpu") == 0 || strncmp(s, "cuda:", 5) == 0;
}
/* A cast, then a move unless the cast is there already. Cannot raise. */
static st_tensor *lt_cast_move(st_tensor *t, st_dtype dt, const char *device) {
    st_tensor *c = st_cast(t, dt);
    if (!c || lt_on_device(c, device)) return c;
    st_tensor *r = st_to(c, device);
    st_release(c);
    return r;
}
/* x:to(dtype), x:to(device), x:to(dtype, device) or x:to(device, dtype) */
static int lt_to(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    const char *device = NULL;
    int dt = -1;
    for (int i = 2; i <= 3; i++) {
        if (i == 3 && lua_isnoneornil(L, 3)) break;
        const char *s = lt_device_name(L, i, "a device or dtype");
        if (lt_is_device(s)) {
            if (device) luaL_argerror(L, i, "a second device (to takes a dtype and/or a device)");
            device = s;
        } else {
            if (dt >= 0) luaL_argerror(L, i, "a second dtype (to takes a dtype and/or a device)");
            dt = (int)lt_optdtype(L, i, ST_F32);
        }
    }
    if (dt < 0) return lt_move(L, device);
    if (!device) return lt_cast_to(L, (st_dtype)dt);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, lt_cast_move(t, (st_dtype)dt, device));
    return lt_box_finish(L, box, r, "to");
}
static int lt_cuda(lua_State *L) { return lt_move(L, lua_isnoneornil(L, 2) ? "cuda" : lt_device_name(L, 2, "a device")); }
static int lt_cpu(lua_State *L) { return lt_move(L, "cpu"); }
static int lt_float(lua_State *L) { return lt_cast_to(L, ST_F32); }
static int lt_double(lua_State *L) { return lt_cast_to(L, ST_F64); }
static int lt_half(lua_State *L) { return lt_cast_to(L, ST_F16); }
static int lt_long(lua_State *L) { return lt_cast_to(L, ST_I64); }
static int lt_int(lua_State *L) { return lt_cast_to(L, ST_I32); }
static int lt_bool(lua_State *L) { return lt_cast_to(L, ST_BOOL); }

/* ------------------------------------------------------------------------------------------------
 * In place (return x)
 * ---------------------------------------------------------------------------------------------- */

typedef st_status (*lt_inplacefn)(st_tensor *, st_tensor *);
static st_status lt_inplace_apply(lt_inplacefn fn, st_tensor *t, const lt_operand *o) {
    st_tensor *x = lt_take(o);
    if (!x) return st_last_status() ? st_last_status() : ST_ERR_INTERNAL;
    st_status s = fn(t, x);
    lt_put(o, x);
    return s;
}

static int lt_inplace(lua_State *L, lt_inplacefn fn, const char *name) {
    st_tensor *t = lt_check(L, 1);
    lt_operand o;
    lt_operand_get(L, 2, &o);
    st_status s;
    LT_TRY_STATUS(L, s, lt_inplace_apply(fn, t, &o));
    if (s) return lt_raise(L, name);
    lt_gc_feed(L);
    lua_settop(L, 1);
    return 1;
}
static int lt_add_(lua_State *L) { return lt_inplace(L, st_add_, "add_"); }
static int lt_sub_(lua_State *L) { return lt_inplace(L, st_sub_, "sub_"); }
static int lt_mul_(lua_State *L) { return lt_inplace(L, st_mul_, "mul_"); }
static int lt_div_(lua_State *L) { return lt_inplace(L, st_div_, "div_"); }
static int lt_copy_(lua_State *L) { return lt_inplace(L, st_copy_, "copy_"); }

static int lt_fill_(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    double v = lua_isboolean(L, 2) ? lua_toboolean(L, 2) : (double)luaL_checknumber(L, 2);
    st_status s;
    LT_TRY_STATUS(L, s, st_fill_(t, v));
    if (s) return lt_raise(L, "fill_");
    lua_settop(L, 1);
    return 1;
}

static int lt_zero_(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    st_status s;
    LT_TRY_STATUS(L, s, st_zero_(t));
    if (s) return lt_raise(L, "zero_");
    lua_settop(L, 1);
    return 1;
}

/* ------------------------------------------------------------------------------------------------
 * Runtime control
 * ---------------------------------------------------------------------------------------------- */

/* st.sync(a, b, ...) or st.sync({a, b, ...}) realizes those tensors in one flush (and returns its
 * arguments); st.sync() realizes everything pending. st.realize is the same function. */
static int lt_sync(lua_State *L) {
    int n = lua_gettop(L);
    st_status s;
    lt_preflush(L);
    if (n == 0) {
        LT_TRY_STATUS(L, s, st_sync());
    } else if (n == 1 && lua_istable(L, 1)) {
        int m = (int)luaL_len(L, 1);
        st_tensor **ts = lua_newuserdatauv(L, sizeof *ts * (size_t)(m ? m : 1), 0);
        for (int k = 0; k < m; k++) {
            lua_geti(L, 1, k + 1);
            ts[k] = lt_list_entry(L, k + 1); /* the table keeps it alive */
            lua_pop(L, 1);
        }
        LT_TRY_STATUS(L, s, st_realize(m, ts));
    } else {
        st_tensor **ts = lua_newuserdatauv(L, sizeof *ts * (size_t)n, 0);
        for (int k = 0; k < n; k++) ts[k] = lt_check(L, k + 1);
        LT_TRY_STATUS(L, s, st_realize(n, ts));
    }
    if (s) return lt_raise(L, "sync");
    lt_gc_feed(L);
    lua_settop(L, n);
    return n;
}

static int lt_realize(lua_State *L) { return lt_sync(L); }

/* st.synchronize() waits for the work launched on every device and raises the first error it
 * left: a GPU kernel's index error (gather out of range) surfaces only at a synchronization point
 * (st_synchronize). Runs nothing pending: st.sync first for that. */
static int lt_synchronize(lua_State *L) {
    st_status s;
    LT_TRY_STATUS(L, s, st_synchronize());
    if (s) return lt_raise(L, "synchronize");
    return 0;
}

/* __gc of the state's sentinel (luaopen_stitch): when the state closes, an error that GPU work
 * left and that no call has reported (nothing read its result afterwards) is said on stderr rather
 * than lost; a finalizer cannot raise. The stitch executable waits itself after each chunk, so
 * there this finds nothing; it serves `require "stitch"` from a stock lua5.4. */
static int lt_state_closing(lua_State *L) {
    (void)L;
    if (st_synchronize() != ST_OK) {
        fprintf(stderr, "stitch: %s (found when the Lua state closed; st.synchronize() reports it sooner)\n",
                st_last_error_base(1));
        fflush(stderr);
        st_clear_error();
    }
    return 0;
}

/* st.graph(path, a, b, ...) is st.sync(a, b, ...) that also writes the flush's fusion plan to
 * path in Graphviz dot (st_graph); st.graph(path): everything pending. Returns the tensors. */
static int lt_graph(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int n = lua_gettop(L) - 1;
    st_tensor **ts = lua_newuserdatauv(L, sizeof *ts * (size_t)(n ? n : 1), 0);
    for (int k = 0; k < n; k++) ts[k] = lt_check(L, k + 2);
    st_status s;
    LT_TRY_STATUS(L, s, st_graph(path, n, ts));
    if (s) return lt_raise(L, "graph");
    lt_gc_feed(L);
    lua_settop(L, n + 1);
    return n;
}

static int lt_stats(lua_State *L) {
    st_stats_t s;
    st_stats(&s);
    lua_createtable(L, 0, 24);
#define LT_FIELD_U(f)                                                                            \
    lua_pushinteger(L, (lua_Integer)s.f);                                                        \
    lua_setfield(L, -2, #f);
#define LT_FIELD_D(f)                                                                            \
    lua_pushnumber(L, (lua_Number)s.f);                                                          \
    lua_setfield(L, -2, #f);
    LT_FIELD_U(flushes)
    LT_FIELD_U(nodes_recorded)
    LT_FIELD_U(kernels_launched)
    LT_FIELD_U(kernels_compiled)
    LT_FIELD_U(plans_built)
    LT_FIELD_U(plan_cache_hits)
    LT_FIELD_U(compile_calls)
    LT_FIELD_U(cache_hits_memory)
    LT_FIELD_U(cache_hits_disk)
    LT_FIELD_U(interp_groups)
    LT_FIELD_U(bytes_in_use)
    LT_FIELD_U(bytes_peak)
    LT_FIELD_U(device_bytes_in_use)
    LT_FIELD_U(device_bytes_reserved)
    LT_FIELD_U(device_bytes_peak)
    LT_FIELD_D(compile_ms)
    LT_FIELD_D(exec_ms)
    LT_FIELD_U(nodes_live)
    LT_FIELD_U(nodes_pending)
    LT_FIELD_U(bytes_pending)
    LT_FIELD_U(plan_cache_entries)
    LT_FIELD_U(plan_cache_bytes)
    LT_FIELD_U(host_bytes_cached)
#undef LT_FIELD_U
#undef LT_FIELD_D
    return 1;
}

static int lt_reset_stats(lua_State *L) {
    (void)L;
    st_reset_stats();
    return 0;
}

/* st.eager([on]): sets the mode when given; returns the mode now. */
static int lt_eager(lua_State *L) {
    if (!lua_isnone(L, 1)) st_set_eager(lua_toboolean(L, 1));
    lua_pushboolean(L, st_get_eager());
    return 1;
}
static int lt_set_debug(lua_State *L) {
    st_set_debug((int)luaL_checkinteger(L, 1));
    return 0;
}
static int lt_set_jit_min(lua_State *L) {
    st_set_jit_min((int64_t)luaL_checkinteger(L, 1));
    return 0;
}
static int lt_set_poison(lua_State *L) {
    st_set_poison(lua_toboolean(L, 1));
    return 0;
}
static int lt_debug_fail_alloc(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)st_debug_fail_alloc((int64_t)luaL_checkinteger(L, 1)));
    return 1;
}
static int lt_collectgarbage(lua_State *L) {
    lt_collect(L);
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Registration
 * ---------------------------------------------------------------------------------------------- */

static const luaL_Reg lt_meta[] = {
    {"__gc", lt_gc},          {"__close", lt_gc},         {"__tostring", lt_tostring},
    {"__len", lt_len},        {"__add", lt_b_add},        {"__sub", lt_b_sub},
    {"__mul", lt_b_mul},      {"__div", lt_b_div},        {"__mod", lt_b_remainder},
    {"__pow", lt_b_pow},      {"__unm", lt_u_neg},        {"__newindex", lt_newindex},
    {NULL, NULL},
};

/* Methods; also module functions (st.sum(x, 1) == x:sum(1)). lshape.c and lindex.c add theirs. */
static const luaL_Reg lt_methods[] = {
    {"item", lt_item}, {"tolist", lt_tolist}, {"shape", lt_shape}, {"size", lt_size}, {"dim", lt_ndim},
    {"ndim", lt_ndim}, {"numel", lt_numel}, {"dtype", lt_dtype}, {"device", lt_device},
    {"is_contiguous", lt_is_contiguous}, {"sum", lt_sum}, {"mean", lt_mean}, {"prod", lt_prod},
    {"max", lt_max}, {"min", lt_min}, {"argmax", lt_argmax}, {"argmin", lt_argmin}, {"var", lt_var},
    {"std", lt_std}, {"logsumexp", lt_logsumexp}, {"softmax", lt_softmax},
    {"log_softmax", lt_log_softmax}, {"matmul", lt_matmul}, {"clamp", lt_clamp}, {"to", lt_to},
    {"cuda", lt_cuda}, {"cpu", lt_cpu},
    {"float", lt_float}, {"double", lt_double}, {"half", lt_half}, {"long", lt_long}, {"int", lt_int},
    {"bool", lt_bool}, {"add_", lt_add_}, {"sub_", lt_sub_}, {"mul_", lt_mul_},
    {"div_", lt_div_}, {"copy_", lt_copy_}, {"fill_", lt_fill_}, {"zero_", lt_zero_},
    {"realize", lt_realize},
    {NULL, NULL},
};

#define LT_REG_UNARY(name) {#name, lt_u_##name},
#define LT_REG_BINARY(name) {#name, lt_b_##name},
static const luaL_Reg lt_elementwise[] = {
    ST_UNARY_API(LT_REG_UNARY) ST_BINARY_API(LT_REG_BINARY){NULL, NULL},
};

static const luaL_Reg lt_functions[] = {
    {"tensor", lt_tensor_new}, {"zeros", lt_zeros}, {"ones", lt_ones}, {"empty", lt_empty},
    {"rand", lt_rand}, {"randn", lt_randn}, {"full", lt_full}, {"arange", lt_arange},
    {"linspace", lt_linspace}, {"eye", lt_eye}, {"randint", lt_randint}, {"manual_seed", lt_manual_seed},
    {"get_rng_state", lt_get_rng_state}, {"set_rng_state", lt_set_rng_state},
    {"where", lt_where}, {"einsum", lt_einsum}, {"_attention", lt_attention},
    {"is_tensor", lt_is_tensor}, {"sync", lt_sync}, {"synchronize", lt_synchronize}, {"graph", lt_graph},
    {"stats", lt_stats},
    {"reset_stats", lt_reset_stats},
    {"device", l_device}, {"set_device", l_set_device}, {"cuda_device_count", l_cuda_device_count},
    {"empty_cache", l_empty_cache},
    {"eager", lt_eager}, {"set_debug", lt_set_debug}, {"set_jit_min", lt_set_jit_min},
    {"set_poison", lt_set_poison}, {"debug_fail_alloc", lt_debug_fail_alloc},
    {"collectgarbage", lt_collectgarbage},
    {NULL, NULL},
};

ST_API int luaopen_stitch(lua_State *L) {
    luaL_checkversion(L);
    lt_watch_allocs();
    /* the sentinel, made before any tensor: finalizers run in reverse order, so at lua_close it
     * waits after the tensors are released */
    if (lua_getfield(L, LUA_REGISTRYINDEX, "stitch.closing") == LUA_TNIL) {
        lua_newuserdatauv(L, 1, 0);
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, lt_state_closing);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        lua_setfield(L, LUA_REGISTRYINDEX, "stitch.closing");
    }
    lua_pop(L, 1);

    /* methods table: st.Tensor (Lua code may add methods to it) */
    lua_newtable(L);
    lt_setfuncs(L, lt_methods, LT_METHOD, 0);
    lt_setfuncs(L, lt_elementwise, LT_METHOD, 0);
    int methods = lua_gettop(L);

    luaL_newmetatable(L, LT_MT);
    luaL_setfuncs(L, lt_meta, 0);
    lua_pushvalue(L, methods);
    lua_pushcclosure(L, lt_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    lua_newtable(L);
    lt_setfuncs(L, lt_functions, LT_MODULE, 0);
    lt_open_shape(L, methods); /* before the copy below: their methods are module functions too */
    lt_open_index(L, methods);
    /* every method is also a module function; constructors win on a name clash */
    lua_pushnil(L);
    while (lua_next(L, methods)) {
        lua_pushvalue(L, -2);
        if (lua_rawget(L, -4) == LUA_TNIL) {
            lua_pop(L, 1);
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, -4);
        } else {
            lua_pop(L, 2);
        }
    }
    lua_pushvalue(L, methods);
    lua_setfield(L, -2, "Tensor");
    lua_pushliteral(L, "0.1");
    lua_setfield(L, -2, "version");
    lt_open_io(L);
    lt_open_autograd(L, methods);
    lt_open_lib(L);
    lua_remove(L, methods);
    return 1;
}
