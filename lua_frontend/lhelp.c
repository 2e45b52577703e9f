/*
 * lhelp.c — what the parts of the Lua module share: memory accounting (the allocation observer,
 * lt_gc_feed, lt_collect), error raising, tensor boxes, argument checks (dtypes, dims, sizes, axes,
 * indices), Lua values as tensors (operands, nested tables, 1-based index tensors), the two
 * common binding shapes (unary, binary) and the lookup of a function of the embedded Lua library
 * (lt_push_libfn: the registry cache llib.c fills). Declared in lstitch_internal.h.
 *
 * Every other file of lua_frontend/ may call this one; it calls none of them (dependencies run
 * one way: lstitch.c -> the parts -> lhelp.c).
 *
 * Invariants (the module's, see lstitch.c, kept here for every binding that uses these):
 *  - The allocation observer only counts bytes (it runs inside the runtime's allocator and never
 *    calls into Lua); lt_gc_feed turns that count into a full collection, lt_collect runs one.
 *  - lt_raise copies st_last_error_base(1) into the Lua error and clears it: the C library marks
 *    the dims, indices and list positions in its messages, so Lua sees them 1-based.
 *  - A box is pushed empty (lt_push_box) before the C call and takes its result afterwards
 *    (lt_box_finish), so no st_tensor * is held only by a C local while Lua may raise. The
 *    helpers that hold temporaries (lt_take's weak scalars, lt_shift's shifted index tensors,
 *    lt_from_host) cannot raise and release what they made.
 *  - Lua's 1-based dims and indices (negative ones count from the end) become the C API's 0-based
 *    ones in lt_dim, lt_norm_index and lt_shift.
 */
#include "lstitch_internal.h"

#include <lauxlib.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------
 * Memory accounting and errors
 * ---------------------------------------------------------------------------------------------- */

static int64_t lt_alloc_since_gc;  /* bytes the runtime allocated since our last full collection */
static int64_t lt_live_after_gc;   /* bytes_in_use right after that collection */
static uint64_t lt_nodes_at_gc;    /* nodes_recorded at that collection */
static uint64_t lt_nodes_after_gc; /* nodes_live right after it */
#define LT_GC_MIN ((int64_t)32 << 20)
#define LT_GC_NODES 8192

/* Called by the runtime from inside its allocator: only counts, never calls into Lua. */
static void lt_observer(int64_t delta, void *ud) {
    (void)ud;
    if (delta > 0) lt_alloc_since_gc += delta;
}

/* Installs the observer (once, from luaopen_stitch). */
LT_FUNC void lt_watch_allocs(void) { st_set_alloc_observer(lt_observer, NULL); }

LT_FUNC void lt_collect(lua_State *L) {
    st_stats_t s;
    lua_gc(L, LUA_GCCOLLECT);
    st_stats(&s);
    lt_live_after_gc = (int64_t)s.bytes_in_use;
    lt_alloc_since_gc = 0;
    lt_nodes_at_gc = s.nodes_recorded;
    lt_nodes_after_gc = s.nodes_live;
}

/* After a call that may have allocated: a full collection once tensor memory grew by more than
 * max(32 MiB, live tensor bytes, Lua heap) since the last one (a 100% pause, like Lua's own), or
 * once more trace nodes were recorded than max(LT_GC_NODES, nodes alive after the last one).
 * Why not lua_gc(LUA_GCSTEP, kb): Lua adds those bytes to its own heap estimate and never sees
 * them freed, so its pause threshold drifts upward and collections get rarer and rarer.
 * Why nodes: a small model's tensors are a few KB, so bytes alone let a collection wait for
 * thousands of steps, while every dead handle keeps its unrealized nodes pending; past
 * ST_TRACE_MAX pending nodes the runtime flushed them all, dead ones included: a one-off region
 * of ~20k nodes planned and compiled every ~1000 steps (bench/NOTES.md "Soak"). */
LT_FUNC void lt_gc_feed(lua_State *L) {
    st_stats_t s;
    st_stats(&s);
    int64_t grown = (int64_t)s.bytes_in_use - lt_live_after_gc;
    if (lt_alloc_since_gc > grown) grown = lt_alloc_since_gc;
    int64_t limit = LT_GC_MIN;
    if (lt_live_after_gc > limit) limit = lt_live_after_gc;
    int64_t heap = (int64_t)lua_gc(L, LUA_GCCOUNT) * 1024;
    if (heap > limit) limit = heap;
    if (s.nodes_recorded < lt_nodes_at_gc) lt_nodes_at_gc = s.nodes_recorded;   /* st_reset_stats */
    uint64_t nodes_limit = lt_nodes_after_gc > LT_GC_NODES ? lt_nodes_after_gc : LT_GC_NODES;
    if (grown >= limit || s.nodes_recorded - lt_nodes_at_gc >= nodes_limit) lt_collect(L);
}

/* Before a flush asked for from Lua (st.sync, item, tolist): a full collection when the pending
 * nodes' results come to LT_PREFLUSH_BYTES or more and handles were made since the last
 * collection (8 nodes recorded). The handles that died since (this step's temporaries: a block's intermediate
 * activations, dead once its forward returned) are released first, so the flush neither stores
 * values only they referred to (targets) nor keeps those buffers until a later collection: the
 * ResNet example's step peaked at 495 MB of live tensors without it, 155 MB with it
 * (bench/NOTES.md). Allocation cannot tell (buffers are allocated inside flushes, and lt_gc_feed's
 * collections fall between them, before this step's temporaries die). A collection of a training
 * script's heap takes ~0.3-0.7 ms: worth it before a flush of 16 MB, not before a small MLP's
 * step. The tensors being realized are on the Lua stack: never collected. */
#define LT_PREFLUSH_BYTES ((uint64_t)16 << 20)
#define LT_PREFLUSH_NODES 8
LT_FUNC void lt_preflush(lua_State *L) {
    st_stats_t s;
    st_stats(&s);
    if (s.nodes_recorded < lt_nodes_at_gc) lt_nodes_at_gc = 0;   /* st_reset_stats: count from it */
    if (s.bytes_pending >= LT_PREFLUSH_BYTES && s.nodes_recorded - lt_nodes_at_gc >= LT_PREFLUSH_NODES) lt_collect(L);
}

/* Raises st_last_error() as a Lua error (with the caller's position), prefixed with name unless
 * the message already starts with it; the positions it names are counted from 1. */
LT_FUNC int lt_raise(lua_State *L, const char *name) {
    const char *msg = st_last_error_base(1);
    if (!msg || !*msg) msg = "unknown error";
    size_t n = strlen(name);
    luaL_where(L, 1);
    if (strncmp(msg, name, n) == 0 && msg[n] == ':')
        lua_pushstring(L, msg);
    else
        lua_pushfstring(L, "%s: %s", name, msg);
    lua_concat(L, 2);
    st_clear_error();
    return lua_error(L);
}

/* ------------------------------------------------------------------------------------------------
 * Boxes
 * ---------------------------------------------------------------------------------------------- */

/* Pushes an empty box; the caller stores the tensor once the C call succeeded. */
LT_FUNC lt_box *lt_push_box(lua_State *L) {
    lt_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->t = NULL;
    luaL_setmetatable(L, LT_MT);
    return b;
}

/* Stores r (a new reference, or NULL on failure) into box b, which is on top of the stack. */
LT_FUNC int lt_box_finish(lua_State *L, lt_box *b, st_tensor *r, const char *name) {
    if (!r) return lt_raise(L, name);
    b->t = r;
    lt_gc_feed(L);
    return 1;
}

/* The tensor at stack index i, or NULL when it is not a tensor; raises when it was closed. */
LT_FUNC st_tensor *lt_totensor(lua_State *L, int i) {
    lt_box *b = luaL_testudata(L, i, LT_MT);
    if (!b) return NULL;
    if (!b->t) luaL_argerror(L, i, "tensor was closed");
    return b->t;
}

/* The entry on top of the stack, entry k (1-based) of a list argument, as a tensor; raises
 * naming the entry when it is not one or was closed (not "bad argument #-1"). */
LT_FUNC st_tensor *lt_list_entry(lua_State *L, int k) {
    lt_box *b = luaL_testudata(L, -1, LT_MT);
    if (!b) luaL_error(L, "bad list entry %d: expected a tensor, got %s", k, luaL_typename(L, -1));
    if (!b->t) luaL_error(L, "bad list entry %d: tensor was closed", k);
    return b->t;
}

LT_FUNC st_tensor *lt_check(lua_State *L, int i) {
    st_tensor *t = lt_totensor(L, i);
    if (!t) luaL_typeerror(L, i, "tensor");
    return t;
}

/* ------------------------------------------------------------------------------------------------
 * Argument checks
 * ---------------------------------------------------------------------------------------------- */

LT_FUNC bool lt_isfloat(st_dtype dt) {
    return dt == ST_F32 || dt == ST_F64 || dt == ST_F16 || dt == ST_BF16;
}

/* Optional dtype string at i (def when absent or nil). */
LT_FUNC st_dtype lt_optdtype(lua_State *L, int i, st_dtype def) {
    if (lua_isnoneornil(L, i)) return def;
    const char *s = luaL_checkstring(L, i);
    int dt = st_dtype_from_name(s);
    if (dt < 0) luaL_error(L, "unknown dtype '%s' (f32, f64, i32, i64, bool, f16, bf16)", s);
    return (st_dtype)dt;
}

LT_FUNC const char *lt_shapestr(st_tensor *t, char *buf, size_t n) {
    int64_t sh[ST_MAX_DIMS];
    st_shape(t, sh);
    return st_shape_str(st_ndim(t), sh, buf, n);
}

/* A 1-based dim d (negative counts from the end) of a tensor with nd dims → 0-based. With insert,
 * one more position is valid (unsqueeze, stack). 0-d tensors accept 1 and -1. */
LT_FUNC int lt_dim(lua_State *L, lua_Integer d, int nd, bool insert) {
    int n = nd + (insert ? 1 : 0);
    if (n == 0) n = 1;
    if (d == 0 || d > n || d < -n)
        return luaL_error(L, "dim %I out of range for a %d-d tensor (dims are 1-based: 1..%d or -%d..-1)",
                          (lua_Integer)d, nd, n, n);
    return d > 0 ? (int)d - 1 : n + (int)d;
}

LT_FUNC int lt_checkdim(lua_State *L, int arg, int nd, bool insert) {
    return lt_dim(L, luaL_checkinteger(L, arg), nd, insert);
}

/* A 1-based index i along a dim (d, 0-based, for the message) of size n → 0-based; negative i
 * counts from the end. */
LT_FUNC int64_t lt_norm_index(lua_State *L, lua_Integer i, int64_t n, int d) {
    if (i >= 1 && i <= n) return i - 1;
    if (i < 0 && i >= -n) return n + i;   /* not -i <= n: -i overflows for the most negative i */
    return luaL_error(L, "index %I out of range for dim %d of size %I (indices are 1-based)", (lua_Integer)i, d + 1,
                      (lua_Integer)n);
}

/* Reduction dims at arg: none/nil (all dims: returns 0), a number or a table of numbers. */
LT_FUNC int lt_axes(lua_State *L, int arg, int nd, int axes[ST_MAX_DIMS]) {
    if (lua_isnoneornil(L, arg)) return 0;
    if (lua_istable(L, arg)) {
        lua_Integer n = luaL_len(L, arg);
        if (n > ST_MAX_DIMS) luaL_error(L, "too many dims (%d)", (int)n);
        for (int k = 0; k < (int)n; k++) {
            lua_rawgeti(L, arg, k + 1);
            int ok;
            lua_Integer d = lua_tointegerx(L, -1, &ok);
            if (!ok) luaL_error(L, "bad dim list entry %d: expected an integer, got %s", k + 1, luaL_typename(L, -1));
            lua_pop(L, 1);
            axes[k] = lt_dim(L, d, nd, false);
        }
        if (n == 0) luaL_error(L, "empty dim list");
        return (int)n;
    }
    axes[0] = lt_checkdim(L, arg, nd, false);
    return 1;
}

/* Sizes (what: "size", or "dim" for permute; for messages) from arg on: a table {2, 3} or integers up to the
 * first non-number. Returns the count and sets *next to the first argument after the sizes.
 * Negative sizes are passed on (reshape's -1); creators check them. */
LT_FUNC int lt_sizes(lua_State *L, int arg, int64_t shape[ST_MAX_DIMS], int *next, const char *what) {
    int n = 0;
    if (lua_istable(L, arg)) {
        lua_Integer len = luaL_len(L, arg);
        if (len > ST_MAX_DIMS) luaL_error(L, "too many dims (%d > %d)", (int)len, ST_MAX_DIMS);
        for (n = 0; n < (int)len; n++) {
            lua_rawgeti(L, arg, n + 1);
            int ok;
            shape[n] = (int64_t)lua_tointegerx(L, -1, &ok);
            if (!ok) luaL_error(L, "bad %s list entry %d: expected an integer, got %s", what, n + 1, luaL_typename(L, -1));
            lua_pop(L, 1);
        }
        *next = arg + 1;
        return n;
    }
    while (lua_type(L, arg + n) == LUA_TNUMBER) {
        if (n == ST_MAX_DIMS) luaL_error(L, "too many dims (> %d)", ST_MAX_DIMS);
        shape[n] = (int64_t)luaL_checkinteger(L, arg + n);
        n++;
    }
    *next = arg + n;
    return n;
}

/* lt_sizes for a call that takes nothing after the sizes (reshape, view, expand, permute): a
 * leftover argument is an error, not dropped (x:reshape("a") is not x:reshape()). */
LT_FUNC int lt_sizes_only(lua_State *L, int arg, int64_t shape[ST_MAX_DIMS], const char *what) {
    int next;
    int n = lt_sizes(L, arg, shape, &next, what);
    for (int i = next; i <= lua_gettop(L); i++) /* trailing nils are fine; anything else is not */
        if (!lua_isnil(L, i))
            luaL_argerror(L, i, lua_pushfstring(L, "expected integer %ss or one table of them, got %s", what,
                                                luaL_typename(L, i)));
    return n;
}

LT_FUNC int lt_creation_shape(lua_State *L, int arg, int64_t shape[ST_MAX_DIMS], int *next) {
    int n = lt_sizes(L, arg, shape, next, "size");
    for (int d = 0; d < n; d++)
        if (shape[d] < 0) luaL_error(L, "negative size %I in dim %d", (lua_Integer)shape[d], d + 1);
    return n;
}

/* Pushes a scratch array of the tensors in the list at arg; returns it and sets *n. */
LT_FUNC st_tensor **lt_tensor_list(lua_State *L, int arg, int *n) {
    luaL_checktype(L, arg, LUA_TTABLE);
    int len = (int)luaL_len(L, arg);
    if (len == 0) luaL_argerror(L, arg, "empty list of tensors");
    st_tensor **ts = lua_newuserdatauv(L, sizeof *ts * (size_t)len, 0);
    for (int k = 0; k < len; k++) {
        lua_rawgeti(L, arg, k + 1);
        ts[k] = lt_list_entry(L, k + 1);
        lua_pop(L, 1);
    }
    *n = len;
    return ts;
}

/* ------------------------------------------------------------------------------------------------
 * Operands: a tensor, or a Lua number / boolean that becomes a scalar tensor for one call
 * ---------------------------------------------------------------------------------------------- */

LT_FUNC void lt_operand_get(lua_State *L, int i, lt_operand *o) {
    o->t = lt_totensor(L, i);
    if (o->t) {
        o->kind = LT_TENSOR;
    } else if (lua_isinteger(L, i)) {
        o->kind = LT_INT;
        o->i = (int64_t)lua_tointeger(L, i);
    } else if (lua_type(L, i) == LUA_TNUMBER) {
        o->kind = LT_FLOAT;
        o->f = (double)lua_tonumber(L, i);
    } else if (lua_isboolean(L, i)) {
        o->kind = LT_BOOL;
        o->i = lua_toboolean(L, i);
    } else {
        luaL_typeerror(L, i, "tensor or number");
    }
}

/* A tensor for o: borrowed for tensors, a new weak scalar otherwise (release with lt_put). */
LT_FUNC st_tensor *lt_take(const lt_operand *o) {
    switch (o->kind) {
    case LT_TENSOR: return o->t;
    case LT_INT: return st_weak_scalar_i(o->i);
    case LT_FLOAT: return st_weak_scalar_f(o->f);
    default: return st_scalar((double)o->i, ST_BOOL);
    }
}
LT_FUNC void lt_put(const lt_operand *o, st_tensor *t) {
    if (o->kind != LT_TENSOR) st_release(t);
}

/* ------------------------------------------------------------------------------------------------
 * Lua values from and to tensors: nested tables, one-element values, 1-based index tensors
 * ---------------------------------------------------------------------------------------------- */

/* from_data in hd (f64 or i64) then cast to dt when it differs. Cannot raise. */
static st_tensor *lt_from_host(st_dtype dt, st_dtype hd, int nd, const int64_t *shape, const void *buf) {
    st_tensor *h = st_from_data(hd, nd, shape, buf);
    if (!h || dt == hd) return h;
    st_tensor *r = st_cast(h, dt);
    st_release(h);
    return r;
}

typedef struct lt_fill_ctx {
    int nd;
    int64_t shape[ST_MAX_DIMS];
    int path[ST_MAX_DIMS];
    bool isint;       /* fill the i64 buffer, else the f64 one */
    st_dtype dt;      /* the tensor's dtype: integer ones check each value's range */
    double *f;
    int64_t *i;
    int64_t pos;
} lt_fill_ctx;

static const char *lt_pathstr(lua_State *L, const lt_fill_ctx *c, int depth) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int d = 0; d < depth; d++) {
        char tmp[32];
        snprintf(tmp, sizeof tmp, "[%d]", c->path[d]);
        luaL_addstring(&b, tmp);
    }
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

/* The number on top as an element of an integer (or bool) tensor: the fraction dropped, and a value
 * the dtype cannot hold an error (as st_full's, and PyTorch's torch.tensor([2**40], dtype=int32)),
 * not a silent wrap. Lua integers stay exact (no trip through a double). */
static int64_t lt_fill_int(lua_State *L, const lt_fill_ctx *c, int d) {
    if (c->dt == ST_BOOL) return lua_tonumber(L, -1) != 0;
    bool i32 = c->dt == ST_I32, ok;
    int64_t v = 0;
    if (lua_isinteger(L, -1)) {
        v = (int64_t)lua_tointeger(L, -1);
        ok = !i32 || (v >= INT32_MIN && v <= INT32_MAX);
    } else {
        double f = (double)lua_tonumber(L, -1);
        ok = i32 ? f > -2147483649.0 && f < 2147483648.0 : f >= -9223372036854775808.0 && f < 9223372036854775808.0;
        if (ok) v = (int64_t)f;
    }
    if (!ok) {
        const char *vs = lua_tostring(L, -1), *at = lt_pathstr(L, c, d + 1);
        luaL_error(L, "tensor: value %s at %s cannot be converted to type %s without overflow", vs, at,
                   st_dtype_name(c->dt));
    }
    return v;
}

/* Walks the nested table at stack index idx (depth d), checking it is rectangular. */
static void lt_fill(lua_State *L, lt_fill_ctx *c, int idx, int d) {
    lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
    if (len != c->shape[d])
        luaL_error(L, "tensor: ragged table at %s: expected %d elements, got %d", lt_pathstr(L, c, d),
                   (int)c->shape[d], (int)len);
    luaL_checkstack(L, 4, "tensor nesting");
    for (lua_Integer k = 1; k <= len; k++) {
        c->path[d] = (int)k;
        int ty = lua_rawgeti(L, idx, k);
        if (d + 1 < c->nd) {
            if (ty != LUA_TTABLE)
                luaL_error(L, "tensor: ragged table at %s: expected a table, got %s", lt_pathstr(L, c, d + 1),
                           lua_typename(L, ty));
            lt_fill(L, c, lua_gettop(L), d + 1);
        } else if (ty == LUA_TNUMBER || ty == LUA_TBOOLEAN) {
            if (c->isint) {
                if (ty == LUA_TBOOLEAN) c->i[c->pos] = lua_toboolean(L, -1);
                else c->i[c->pos] = lt_fill_int(L, c, d);
            } else {
                c->f[c->pos] = ty == LUA_TBOOLEAN ? lua_toboolean(L, -1) : (double)lua_tonumber(L, -1);
            }
            c->pos++;
        } else {
            luaL_error(L, "tensor: ragged table at %s: expected a number, got %s", lt_pathstr(L, c, d + 1),
                       lua_typename(L, ty));
        }
        lua_pop(L, 1);
    }
}

/* Pushes a tensor built from the nested table at idx (dtype dt, or inferred when dt < 0). */
LT_FUNC void lt_push_table_tensor(lua_State *L, int idx, int dtin) {
    lt_fill_ctx c;
    memset(&c, 0, sizeof c);
    idx = lua_absindex(L, idx);
    /* shape: follow first elements */
    lua_pushvalue(L, idx);
    int leaf = LUA_TNIL;
    for (;;) {
        if (c.nd == ST_MAX_DIMS) luaL_error(L, "tensor: more than %d nested levels", ST_MAX_DIMS);
        c.shape[c.nd++] = (int64_t)lua_rawlen(L, -1);
        if (c.shape[c.nd - 1] == 0) break;
        leaf = lua_rawgeti(L, -1, 1);
        lua_remove(L, -2);
        if (leaf != LUA_TTABLE) break;
    }
    lua_pop(L, 1);
    st_dtype dt = dtin >= 0 ? (st_dtype)dtin : (leaf == LUA_TBOOLEAN ? ST_BOOL : ST_F32);
    c.isint = !lt_isfloat(dt);
    c.dt = dt;
    int64_t numel = 1;
    for (int d = 0; d < c.nd; d++) numel *= c.shape[d];
    void *buf = lua_newuserdatauv(L, (size_t)(numel > 0 ? numel : 1) * 8, 0);
    c.f = buf;
    c.i = buf;
    lt_fill(L, &c, idx, 0);
    st_dtype hd = c.isint ? ST_I64 : ST_F64;
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, lt_from_host(dt, hd, c.nd, c.shape, buf));
    lt_box_finish(L, box, r, "tensor");
    lua_remove(L, -2); /* the scratch buffer */
}

/* Pushes the value of a one-element tensor t: a number (integer for integer dtypes) or boolean. */
LT_FUNC void lt_push_item(lua_State *L, st_tensor *t) {
    st_dtype dt = st_dtype_of(t);
    st_status s;
    lt_preflush(L);
    if (lt_isfloat(dt)) {
        double v = 0;
        LT_TRY_STATUS(L, s, st_item(t, &v));
        if (s) lt_raise(L, "item");
        lua_pushnumber(L, (lua_Number)v);
    } else {
        int64_t v = 0;
        LT_TRY_STATUS(L, s, st_item_i64(t, &v));
        if (s) lt_raise(L, "item");
        if (dt == ST_BOOL) lua_pushboolean(L, v != 0);
        else lua_pushinteger(L, (lua_Integer)v);
    }
    lt_gc_feed(L);
}

/* C's 0-based index tensor + 1, or - 1 (delta). Cannot raise. */
LT_FUNC st_tensor *lt_shift(st_tensor *idx, int64_t delta) {
    if (!idx) return NULL;
    st_tensor *one = st_weak_scalar_i(delta < 0 ? -delta : delta);
    st_tensor *r = one ? (delta < 0 ? st_sub(idx, one) : st_add(idx, one)) : NULL;
    st_release(one);
    return r;
}

/* ------------------------------------------------------------------------------------------------
 * The common binding shapes: op(tensor), op(tensor or number, tensor or number)
 * ---------------------------------------------------------------------------------------------- */

static st_tensor *lt_bin_apply(lt_binfn fn, const lt_operand *a, const lt_operand *b) {
    st_tensor *ta = lt_take(a), *tb = NULL, *r = NULL;
    if (ta) tb = lt_take(b);
    if (ta && tb) r = fn(ta, tb);
    if (ta) lt_put(a, ta);
    if (tb) lt_put(b, tb);
    return r;
}

LT_FUNC int lt_binary(lua_State *L, lt_binfn fn, const char *name) {
    lt_operand a, b;
    lt_operand_get(L, 1, &a);
    lt_operand_get(L, 2, &b);
    if (a.kind != LT_TENSOR && b.kind != LT_TENSOR)
        return luaL_error(L, "%s: expected at least one tensor operand", name);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, lt_bin_apply(fn, &a, &b));
    return lt_box_finish(L, box, r, name);
}

LT_FUNC int lt_unary(lua_State *L, lt_unfn fn, const char *name) {
    st_tensor *t = lt_check(L, 1);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, fn(t));
    return lt_box_finish(L, box, r, name);
}

/* Pushes function fn of the (loaded) library lib: lindex.c's tensor keys call tensor_index.lua. */
LT_FUNC void lt_push_libfn(lua_State *L, const char *lib, const char *fn) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LT_LIBCACHE);
    if (lua_getfield(L, -1, lib) != LUA_TTABLE) luaL_error(L, "stitch: library '%s' is not loaded", lib);
    lua_getfield(L, -1, fn);
    lua_replace(L, -3);
    lua_pop(L, 1);
}
