/*
 * lindex.c — indexing tensors from Lua: reads t[i] / t[{...}] (views; selecting every dim gives a
 * Lua value, as in Torch7), writes t[i] = v / t[{...}] = v into t's storage (a tensor key, t[mask] or
 * t[idx], goes to lua_frontend/lib/tensor_index.lua), and the ops that take
 * 1-based index tensors (gather, index_select, scatter_add, index_add, one_hot). lstitch.c's
 * __index / __newindex call lt_index_get / lt_index_set for keys that are not strings; the methods
 * and functions here are registered by lt_open_index.
 *
 * Invariants (those of lstitch.c): keys are parsed and checked in full before any box is pushed,
 * and the views are made in lt_index_apply, which cannot raise. Lua's 1-based indices and
 * inclusive ranges {a, b, step} become the C API's 0-based [a, b) here (lt_parse_key), index
 * tensors through lt_shift. Calls lhelp.c and larity.c only.
 */
#include "lstitch_internal.h"

#include <lauxlib.h>
#include <stdbool.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------
 * Indexing: t[i], t[{...}] and assignment through them
 * ---------------------------------------------------------------------------------------------- */

typedef struct lt_idx {
    int kind;            /* 0: select index a; 1: slice [a, b) step s; 2: whole dim */
    int64_t a, b, s;
} lt_idx;

static lua_Integer lt_int_at(lua_State *L, int idx, const char *what) {
    int ok;
    lua_Integer v = lua_tointegerx(L, idx, &ok);
    if (!ok) luaL_error(L, "%s must be an integer, got %s", what, luaL_typename(L, idx));
    return v;
}

/* Parses the key at stack index k into spec (one entry per leading dim of t). Returns the count;
 * *scalar is set when every dim was selected by a number (the result is a 0-d view). */
static int lt_parse_key(lua_State *L, int k, st_tensor *t, lt_idx spec[ST_MAX_DIMS], bool *scalar) {
    int nd = st_ndim(t);
    int64_t shape[ST_MAX_DIMS];
    st_shape(t, shape);
    char sb[128];
    if (lua_type(L, k) == LUA_TNUMBER) {
        if (nd == 0) luaL_error(L, "cannot index a 0-d tensor (use :item())");
        spec[0].kind = 0;
        spec[0].a = lt_norm_index(L, lt_int_at(L, k, "index"), shape[0], 0);
        *scalar = nd == 1;
        return 1;
    }
    if (!lua_istable(L, k)) {
        if (lt_totensor(L, k)) luaL_error(L, "a tensor key cannot be combined with other keys");
        luaL_error(L, "bad tensor index of type %s", luaL_typename(L, k));
    }
    int n = (int)lua_rawlen(L, k);
    if (n > nd) luaL_error(L, "too many indices (%d) for a tensor of shape %s", n, lt_shapestr(t, sb, sizeof sb));
    int nsel = 0;
    for (int j = 0; j < n; j++) {
        int ty = lua_rawgeti(L, k, j + 1);
        int64_t size = shape[j];
        if (ty == LUA_TNUMBER) {
            spec[j].kind = 0;
            spec[j].a = lt_norm_index(L, lt_int_at(L, -1, "index"), size, j);
            nsel++;
        } else if (ty == LUA_TTABLE) {
            int m = (int)lua_rawlen(L, -1);
            if (m == 0) {
                spec[j].kind = 2;
            } else if (m <= 3) {
                lua_rawgeti(L, -1, 1);
                lua_Integer a = lt_int_at(L, -1, "range start");
                lua_pop(L, 1);
                lua_Integer b = a, s = 1;
                if (m >= 2) {
                    lua_rawgeti(L, -1, 2);
                    b = lt_int_at(L, -1, "range end");
                    lua_pop(L, 1);
                }
                if (m == 3) {
                    lua_rawgeti(L, -1, 3);
                    s = lt_int_at(L, -1, "range step");
                    lua_pop(L, 1);
                }
                int64_t a1 = a < 0 ? size + a + 1 : a; /* 1-based, inclusive */
                int64_t b1 = b < 0 ? size + b + 1 : b;
                if (a1 < 1 || a1 > size || b1 < a1 - 1 || b1 > size)
                    luaL_error(L, "range {%I, %I} out of bounds for dim %d of size %I", (lua_Integer)a, (lua_Integer)b, j + 1,
                               (lua_Integer)size);
                if (s < 1) luaL_error(L, "range step must be positive, got %I", (lua_Integer)s);
                spec[j].kind = 1;
                spec[j].a = a1 - 1;
                spec[j].b = b1;
                spec[j].s = s;
            } else {
                luaL_error(L, "bad range at index position %d: expected {}, {i}, {a, b} or {a, b, step}", j + 1);
            }
        } else if (lt_totensor(L, -1)) {
            luaL_error(L, "bad index at position %d: a tensor inside a table key is not supported (index with "
                          "the tensor alone: t[mask], t[idx]; or use index_select, gather)", j + 1);
        } else {
            luaL_error(L, "bad index at position %d: expected a number or a table, got %s", j + 1,
                       lua_typename(L, ty));
        }
        lua_pop(L, 1);
    }
    *scalar = nsel == nd && nd > 0;
    return n;
}

/* The view described by spec. Cannot raise. */
static st_tensor *lt_index_apply(st_tensor *t, const lt_idx *spec, int n) {
    st_tensor *cur = st_retain(t);
    int cd = 0;
    for (int j = 0; j < n && cur; j++) {
        st_tensor *next;
        if (spec[j].kind == 2) {
            cd++;
            continue;
        }
        if (spec[j].kind == 0) {
            next = st_select(cur, cd, spec[j].a);
        } else {
            next = st_slice(cur, cd, spec[j].a, spec[j].b, spec[j].s);
            cd++;
        }
        st_release(cur);
        cur = next;
    }
    return cur;
}

/* A tensor key (a bool mask or an index tensor) goes to tensor_index.lua: fn(t, key [, v]). */
static int lt_index_tensor_key(lua_State *L, const char *fn, int nargs) {
    lt_push_libfn(L, "tensor_index", fn);
    lua_insert(L, 1);
    lua_call(L, nargs, nargs == 2 ? 1 : 0);
    return nargs == 2 ? 1 : 0;
}

/* t[key] for a key that is not a string (stack: t, key). */
LT_FUNC int lt_index_get(lua_State *L, st_tensor *t) {
    if (lt_totensor(L, 2)) {
        lua_settop(L, 2);
        return lt_index_tensor_key(L, "_index_get", 2);
    }
    lt_idx spec[ST_MAX_DIMS];
    bool scalar = false;
    int n = lt_parse_key(L, 2, t, spec, &scalar);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, lt_index_apply(t, spec, n));
    lt_box_finish(L, box, r, "index");
    if (scalar) {
        /* Torch7: selecting every dim gives a Lua value, not a 0-d tensor */
        lt_push_item(L, r);
        st_release(box->t);
        box->t = NULL;
    }
    return 1;
}

static st_status lt_assign_apply(st_tensor *view, const lt_operand *v) {
    if (v->kind == LT_TENSOR) return st_copy_(view, v->t);
    return st_fill_(view, v->kind == LT_FLOAT ? v->f : (double)v->i);
}

/* t[key] = v for a key that is not a string (stack: t, key, v): writes into t's storage (v: number,
 * boolean or tensor). */
LT_FUNC int lt_index_set(lua_State *L, st_tensor *t) {
    if (lt_totensor(L, 2)) {
        lua_settop(L, 3);
        return lt_index_tensor_key(L, "_index_set", 3);
    }
    lt_idx spec[ST_MAX_DIMS];
    bool scalar = false;
    int n = lt_parse_key(L, 2, t, spec, &scalar);
    lt_operand v;
    lt_operand_get(L, 3, &v);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, lt_index_apply(t, spec, n));
    lt_box_finish(L, box, r, "index");
    st_status s;
    LT_TRY_STATUS(L, s, lt_assign_apply(r, &v));
    if (s) lt_raise(L, v.kind == LT_TENSOR ? "copy_" : "fill_");
    st_release(box->t);
    box->t = NULL;
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Index tensors (1-based in Lua)
 * ---------------------------------------------------------------------------------------------- */

/* The index argument at arg as a tensor: an integer tensor, or a Lua table converted to i64
 * (pushed) on the device of `on` (the indexed tensor; NULL: the default device), as a table
 * has none of its own. Checked here, before lt_shift: a bool index minus one would become an
 * integer one. */
static st_tensor *lt_index_arg(lua_State *L, int arg, const char *name, st_tensor *on) {
    st_tensor *t = lt_totensor(L, arg);
    if (t) {
        st_dtype dt = st_dtype_of(t);
        if (dt != ST_I32 && dt != ST_I64)
            luaL_error(L, "%s: index must be i32 or i64, got %s", name, st_dtype_name(dt));
        return t;
    }
    if (!lua_istable(L, arg)) luaL_typeerror(L, arg, "index tensor or table");
    lt_push_table_tensor(L, arg, ST_I64);
    lua_replace(L, arg);
    t = lt_totensor(L, arg);
    const char *dev = on ? st_device_of(on) : NULL;
    if (dev && strcmp(dev, st_device_of(t)) != 0) {
        lt_box *box = lt_push_box(L);
        st_tensor *moved;
        LT_TRY(L, moved, st_to(t, dev));
        lt_box_finish(L, box, moved, name);
        lua_replace(L, arg);
        t = moved;
    }
    return t;
}

enum { LT_GATHER, LT_INDEX_SELECT, LT_SCATTER_ADD, LT_INDEX_ADD };
static st_tensor *lt_indexop_apply(int op, st_tensor *t, int d, st_tensor *idx1, st_tensor *src) {
    st_tensor *idx = lt_shift(idx1, -1), *r = NULL;
    if (!idx) return NULL;
    switch (op) {
    case LT_GATHER: r = st_gather(t, d, idx); break;
    case LT_INDEX_SELECT: r = st_index_select(t, d, idx); break;
    case LT_SCATTER_ADD: r = st_scatter_add(t, d, idx, src); break;
    default: r = st_index_add(t, d, idx, src); break;
    }
    st_release(idx);
    return r;
}

static int lt_indexop(lua_State *L, int op, const char *name) {
    st_tensor *t = lt_check(L, 1);
    int d = lt_checkdim(L, 2, st_ndim(t), false);
    st_tensor *idx = lt_index_arg(L, 3, name, t);
    st_tensor *src = op >= LT_SCATTER_ADD ? lt_check(L, 4) : NULL;
    lua_settop(L, 4);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, lt_indexop_apply(op, t, d, idx, src));
    return lt_box_finish(L, box, r, name);
}
static int lt_gather(lua_State *L) { return lt_indexop(L, LT_GATHER, "gather"); }
static int lt_index_select(lua_State *L) { return lt_indexop(L, LT_INDEX_SELECT, "index_select"); }
static int lt_scatter_add(lua_State *L) { return lt_indexop(L, LT_SCATTER_ADD, "scatter_add"); }
static int lt_index_add(lua_State *L) { return lt_indexop(L, LT_INDEX_ADD, "index_add"); }

static st_tensor *lt_one_hot_apply(st_tensor *idx1, int64_t n) {
    st_tensor *idx = lt_shift(idx1, -1);
    st_tensor *r = idx ? st_one_hot(idx, n) : NULL;
    st_release(idx);
    return r;
}

/* st.one_hot(idx [, n]): idx holds 1-based class ids; n omitted or -1: the largest id. */
static int lt_one_hot(lua_State *L) {
    st_tensor *idx = lt_index_arg(L, 1, "one_hot", NULL);
    int64_t n = (int64_t)luaL_optinteger(L, 2, -1);
    lua_settop(L, 2);
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, lt_one_hot_apply(idx, n));
    return lt_box_finish(L, box, r, "one_hot");
}

LT_FUNC void lt_open_index(lua_State *L, int methods) {
    static const luaL_Reg m[] = {
        {"gather", lt_gather}, {"index_select", lt_index_select}, {"scatter_add", lt_scatter_add},
        {"index_add", lt_index_add},
        {NULL, NULL},
    };
    static const luaL_Reg f[] = {
        {"one_hot", lt_one_hot},
        {NULL, NULL},
    };
    lt_setfuncs(L, f, LT_MODULE, 0);
    lua_pushvalue(L, methods);
    lt_setfuncs(L, m, LT_METHOD, 0);
    lua_pop(L, 1);
}
