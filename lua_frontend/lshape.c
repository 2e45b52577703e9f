/*
 * lshape.c — shape ops from Lua: the views (reshape, view, expand, expand_as, t, transpose,
 * permute, squeeze, unsqueeze, flatten, narrow, select; contiguous and clone with them) as methods,
 * and joining (st.cat, st.stack), registered by lt_open_shape.
 *
 * Invariants (those of lstitch.c): each binding checks all its arguments, pushes its box, then
 * makes its C call. Dims and select's index are 1-based, converted by lhelp.c (lt_dim,
 * lt_norm_index); narrow's 1-based start is converted in lt_narrow. Calls lhelp.c and larity.c only.
 */
#include "lstitch_internal.h"

#include <lauxlib.h>
#include <stdbool.h>

/* ------------------------------------------------------------------------------------------------
 * Views
 * ---------------------------------------------------------------------------------------------- */

typedef st_tensor *(*lt_shapeop)(st_tensor *, int, const int64_t *);
static int lt_shape_view(lua_State *L, lt_shapeop fn, const char *name) {
    st_tensor *t = lt_check(L, 1);
    int64_t shape[ST_MAX_DIMS];
    int nd = lt_sizes_only(L, 2, shape, "size");
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, fn(t, nd, shape));
    return lt_box_finish(L, box, r, name);
}
static int lt_reshape(lua_State *L) { return lt_shape_view(L, st_reshape, "reshape"); }
static int lt_view(lua_State *L) { return lt_shape_view(L, st_view, "view"); }
static int lt_expand(lua_State *L) { return lt_shape_view(L, st_expand, "expand"); }

static int lt_expand_as(lua_State *L) {
    st_tensor *t = lt_check(L, 1), *o = lt_check(L, 2);
    int64_t shape[ST_MAX_DIMS];
    st_shape(o, shape);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_expand(t, st_ndim(o), shape));
    return lt_box_finish(L, box, r, "expand_as");
}

/* Arguments 2 and 3: two tables of integers (sizes, strides, pads) into a and b; their lengths. */
static void lt_two_lists(lua_State *L, int64_t *a, const char *wa, int *na, int64_t *b, const char *wb, int *nb) {
    int next;
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    *na = lt_sizes(L, 2, a, &next, wa);
    *nb = lt_sizes(L, 3, b, &next, wb);
}

/* x:as_strided(size, stride[, offset = 0]): a view of x's elements in C order (st_as_strided);
 * size and stride are tables, offset counts elements from 0 (PyTorch's storage_offset). */
static int lt_as_strided(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int64_t shape[ST_MAX_DIMS], strides[ST_MAX_DIMS];
    int nd, ns;
    lt_two_lists(L, shape, "size", &nd, strides, "stride", &ns);
    if (nd != ns) return luaL_error(L, "as_strided: %d sizes but %d strides", nd, ns);
    lua_Integer off = luaL_optinteger(L, 4, 0);
    if (!lua_isnoneornil(L, 5)) return luaL_argerror(L, 5, "as_strided takes (size, stride[, offset])");
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_as_strided(t, nd, shape, strides, (int64_t)off));
    return lt_box_finish(L, box, r, "as_strided");
}

/* st._zero_pad(x, before, after): tables of per-dim pads >= 0 (st_zero_pad; x:pad's zeros). */
static int lt_zero_pad(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int64_t b[ST_MAX_DIMS], a[ST_MAX_DIMS];
    int nb, na;
    lt_two_lists(L, b, "pad", &nb, a, "pad", &na);
    if (nb != st_ndim(t) || na != st_ndim(t))
        return luaL_error(L, "_zero_pad: %d and %d pads for a tensor with %d dims", nb, na, st_ndim(t));
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_zero_pad(t, b, a));
    return lt_box_finish(L, box, r, "_zero_pad");
}

/* st._store(x): st_store_hint (library code: a value stored once, not evaluated by each reader). */
static int lt_store(lua_State *L) { return lt_unary(L, st_store_hint, "_store"); }

static int lt_transpose(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int nd = st_ndim(t);
    int a = lt_checkdim(L, 2, nd, false), b = lt_checkdim(L, 3, nd, false);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_transpose(t, a, b));
    return lt_box_finish(L, box, r, "transpose");
}

/* x:t(): transpose of a 2-D tensor; 0-d and 1-D tensors are returned as they are. */
static int lt_t(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int nd = st_ndim(t);
    char sb[128];
    if (nd > 2) return luaL_error(L, "t: expects a tensor with at most 2 dims, got shape %s", lt_shapestr(t, sb, sizeof sb));
    if (nd < 2) {
        lua_pushvalue(L, 1);
        return 1;
    }
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_transpose(t, 0, 1));
    return lt_box_finish(L, box, r, "t");
}

static int lt_permute(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int nd = st_ndim(t);
    int64_t dims[ST_MAX_DIMS];
    int n = lt_sizes_only(L, 2, dims, "dim");
    char sb[128];
    if (n != nd)
        return luaL_error(L, "permute: %d dims given for a tensor of shape %s", n, lt_shapestr(t, sb, sizeof sb));
    int perm[ST_MAX_DIMS];
    for (int d = 0; d < n; d++) perm[d] = lt_dim(L, dims[d], nd, false);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_permute(t, perm));
    return lt_box_finish(L, box, r, "permute");
}

static int lt_squeeze(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int d = lua_isnoneornil(L, 2) ? ST_ALL_DIMS : lt_checkdim(L, 2, st_ndim(t), false);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_squeeze(t, d));
    return lt_box_finish(L, box, r, "squeeze");
}

static int lt_unsqueeze(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int d = lt_checkdim(L, 2, st_ndim(t), true);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_unsqueeze(t, d));
    return lt_box_finish(L, box, r, "unsqueeze");
}

static int lt_flatten(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int nd = st_ndim(t);
    int a = lua_isnoneornil(L, 2) ? 0 : lt_checkdim(L, 2, nd, false);
    int b = lua_isnoneornil(L, 3) ? (nd > 0 ? nd - 1 : 0) : lt_checkdim(L, 3, nd, false);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_flatten(t, a, b));
    return lt_box_finish(L, box, r, "flatten");
}

static int lt_contiguous(lua_State *L) { return lt_unary(L, st_contiguous, "contiguous"); }
static int lt_clone(lua_State *L) { return lt_unary(L, st_clone, "clone"); }

/* x:narrow(d, start, len): len entries from the 1-based start along d. */
static int lt_narrow(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int nd = st_ndim(t);
    int d = lt_checkdim(L, 2, nd, false);
    int64_t size = st_size(t, d);
    lua_Integer s1 = luaL_checkinteger(L, 3);
    int64_t start = s1 > 0 ? s1 - 1 : size + s1; /* start == size: an empty narrow at the end */
    int64_t len = (int64_t)luaL_checkinteger(L, 4);
    if (s1 == 0 || start < 0 || len < 0 || start + len > size)
        return luaL_error(L, "narrow: start %I + length %I out of range for dim %d of size %I",
                          (lua_Integer)s1, (lua_Integer)len, d + 1, (lua_Integer)size);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_slice(t, d, start, start + len, 1));
    return lt_box_finish(L, box, r, "narrow");
}

/* x:select(d, i): the 1-based index i along d, removing d. */
static int lt_select(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int d = lt_checkdim(L, 2, st_ndim(t), false);
    int64_t i = lt_norm_index(L, luaL_checkinteger(L, 3), st_size(t, d), d);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_select(t, d, i));
    return lt_box_finish(L, box, r, "select");
}

/* ------------------------------------------------------------------------------------------------
 * Joining
 * ---------------------------------------------------------------------------------------------- */

typedef st_tensor *(*lt_joinfn)(int, st_tensor *const *, int);
static int lt_join(lua_State *L, lt_joinfn fn, bool insert, const char *name) {
    int n;
    lua_settop(L, 2);
    st_tensor **ts = lt_tensor_list(L, 1, &n);
    int d = lt_dim(L, luaL_optinteger(L, 2, 1), st_ndim(ts[0]), insert);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, fn(n, ts, d));
    return lt_box_finish(L, box, r, name);
}
static int lt_cat(lua_State *L) { return lt_join(L, st_cat, false, "cat"); }
static int lt_stack(lua_State *L) { return lt_join(L, st_stack, true, "stack"); }

LT_FUNC void lt_open_shape(lua_State *L, int methods) {
    static const luaL_Reg m[] = {
        {"reshape", lt_reshape}, {"view", lt_view}, {"expand", lt_expand}, {"as_strided", lt_as_strided}, {"expand_as", lt_expand_as},
        {"t", lt_t}, {"transpose", lt_transpose}, {"permute", lt_permute}, {"squeeze", lt_squeeze},
        {"unsqueeze", lt_unsqueeze}, {"flatten", lt_flatten}, {"contiguous", lt_contiguous},
        {"clone", lt_clone}, {"narrow", lt_narrow}, {"select", lt_select},
        {NULL, NULL},
    };
    static const luaL_Reg f[] = {
        {"cat", lt_cat}, {"stack", lt_stack}, {"_zero_pad", lt_zero_pad}, {"_store", lt_store},
        {NULL, NULL},
    };
    lt_setfuncs(L, f, LT_MODULE, 0);
    lua_pushvalue(L, methods);
    lt_setfuncs(L, m, LT_METHOD, 0);
    lua_pop(L, 1);
}
