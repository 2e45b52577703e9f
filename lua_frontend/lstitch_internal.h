/*
 * lstitch_internal.h — internal: what the files of the Lua module share. Hidden from the module's
 * export table (LT_FUNC).
 *
 * Dependencies run one way: lstitch.c, the module's entry, calls down into the parts (their
 * lt_open_* and the functions declared under their names below) and into lhelp.c and larity.c; a
 * part calls those two only, never lstitch.c or another part; they call none of them.
 */
#ifndef LSTITCH_INTERNAL_H
#define LSTITCH_INTERNAL_H

#include "lstitch.h"
#include <lauxlib.h>
#include <stdbool.h>

#define LT_FUNC __attribute__((visibility("hidden")))

#define LT_MT "stitch.Tensor"
#define LT_PRINT_THRESHOLD 1000 /* past this many elements, tostring shows 3 + 3 per dim */
#define LT_PRINT_EDGE 3
#define LT_LIBCACHE "stitch.lib" /* registry table: the loaded lua_frontend/lib chunks (llib.c) */

typedef struct lt_box {
    st_tensor *t;
} lt_box;

/* lhelp.c: what every file uses. */

/* Memory accounting: lt_watch_allocs installs the allocation observer (once, from luaopen_stitch);
 * lt_gc_feed runs after each call that may have allocated (a full collection once tensor memory
 * grew past the live size); lt_collect runs a full collection now. */
LT_FUNC void lt_watch_allocs(void);
LT_FUNC void lt_collect(lua_State *L);
LT_FUNC void lt_gc_feed(lua_State *L);
LT_FUNC void lt_preflush(lua_State *L);   /* before a flush asked for from Lua: lhelp.c */
/* Raises st_last_error() as a Lua error, prefixed with name (and clears it). */
LT_FUNC int lt_raise(lua_State *L, const char *name);

/* Boxes: a new empty box (metatable set) on the stack; the box takes r or raises on NULL. */
LT_FUNC lt_box *lt_push_box(lua_State *L);
LT_FUNC int lt_box_finish(lua_State *L, lt_box *b, st_tensor *r, const char *name);
LT_FUNC st_tensor *lt_totensor(lua_State *L, int i); /* NULL when not a tensor; raises when closed */
LT_FUNC st_tensor *lt_check(lua_State *L, int i);    /* raises when not a tensor */
LT_FUNC st_tensor *lt_list_entry(lua_State *L, int k); /* the top as entry k of a list; raises naming k */

/* Argument checks. Dims and indices are 1-based in Lua (negative: from the end); these return
 * the C API's 0-based ones. */
LT_FUNC bool lt_isfloat(st_dtype dt);
LT_FUNC st_dtype lt_optdtype(lua_State *L, int i, st_dtype def);
LT_FUNC const char *lt_shapestr(st_tensor *t, char *buf, size_t n);
LT_FUNC int lt_dim(lua_State *L, lua_Integer d, int nd, bool insert);
LT_FUNC int lt_checkdim(lua_State *L, int arg, int nd, bool insert);
LT_FUNC int64_t lt_norm_index(lua_State *L, lua_Integer i, int64_t n, int d);
LT_FUNC int lt_axes(lua_State *L, int arg, int nd, int axes[ST_MAX_DIMS]);
LT_FUNC int lt_sizes(lua_State *L, int arg, int64_t shape[ST_MAX_DIMS], int *next, const char *what);
LT_FUNC int lt_sizes_only(lua_State *L, int arg, int64_t shape[ST_MAX_DIMS], const char *what);
LT_FUNC int lt_creation_shape(lua_State *L, int arg, int64_t shape[ST_MAX_DIMS], int *next);
LT_FUNC st_tensor **lt_tensor_list(lua_State *L, int arg, int *n);

/* Operands: a tensor, or a Lua number / boolean that becomes a scalar tensor for one call. */
typedef struct lt_operand {
    st_tensor *t;     /* borrowed when kind == LT_TENSOR */
    int kind;
    double f;
    int64_t i;
} lt_operand;
enum { LT_TENSOR, LT_INT, LT_FLOAT, LT_BOOL };
LT_FUNC void lt_operand_get(lua_State *L, int i, lt_operand *o);
LT_FUNC st_tensor *lt_take(const lt_operand *o);         /* cannot raise */
LT_FUNC void lt_put(const lt_operand *o, st_tensor *t);

/* A nested table as a tensor (pushed); the value of a one-element tensor (pushed: a number, an
 * integer for integer dtypes, or a boolean; a sync point); 0-based index tensors <-> 1-based ones
 * (cannot raise). */
LT_FUNC void lt_push_table_tensor(lua_State *L, int idx, int dtin);
LT_FUNC void lt_push_item(lua_State *L, st_tensor *t);
LT_FUNC st_tensor *lt_shift(st_tensor *idx, int64_t delta);
/* Pushes function fn of lua_frontend/lib/<lib>.lua (loaded when the module opened: llib.c). */
LT_FUNC void lt_push_libfn(lua_State *L, const char *lib, const char *fn);

/* The common binding shapes: fn(x) and fn(a, b) with a number on either side. */
typedef st_tensor *(*lt_unfn)(st_tensor *);
typedef st_tensor *(*lt_binfn)(st_tensor *, st_tensor *);
LT_FUNC int lt_unary(lua_State *L, lt_unfn fn, const char *name);
LT_FUNC int lt_binary(lua_State *L, lt_binfn fn, const char *name);

/* Runs expr (a C call, or a helper that cannot raise, returning st_tensor * or NULL); on
 * out-of-memory, collects garbage (finalizers release tensors) and runs it once more. */
#define LT_TRY(L, res, expr)                                                                     \
    do {                                                                                         \
        (res) = (expr);                                                                          \
        if (!(res) && st_last_status() == ST_ERR_OOM) {                                          \
            lt_collect(L);                                                                       \
            (res) = (expr);                                                                      \
        }                                                                                        \
    } while (0)
#define LT_TRY_STATUS(L, s, expr)                                                                \
    do {                                                                                         \
        (s) = (expr);                                                                            \
        if ((s) == ST_ERR_OOM) {                                                                 \
            lt_collect(L);                                                                       \
            (s) = (expr);                                                                        \
        }                                                                                        \
    } while (0)


/* larity.c: every C function of st and st.Tensor is registered through lt_setfuncs (luaL_setfuncs
 * with nup shared upvalues into the table below them), which wraps it in a guard raising on an
 * argument past the most it takes (its row in larity.c's table; a function without a row makes
 * luaopen_stitch fail). where: LT_METHOD (x:name(), also st.name(x)) or LT_MODULE (st.name()).
 * A guarded binding finds its own upvalue i at LT_UPVALUE(i): the guard's data comes first.
 * lt_check_arity raises the same error for arguments past max (trailing nils are fine): for
 * bindings whose most depends on the form they were called in. */
enum { LT_METHOD, LT_MODULE };
#define LT_UPVALUE(i) lua_upvalueindex((i) + 1)
LT_FUNC void lt_setfuncs(lua_State *L, const luaL_Reg *l, int where, int nup);
LT_FUNC void lt_check_arity(lua_State *L, int max, const char *name, const char *args);

/* llib.c: the embedded Lua library (the .lua files in lua_frontend/lib; the table is generated by
 * tools/embed_lua.sh) and st._lib / lazy st.nn, st.optim, ... on the module table at the top. */
typedef struct lt_lualib_entry {
    const char *name;
    const char *src;
} lt_lualib_entry;
LT_FUNC extern const lt_lualib_entry lt_lualib[];
LT_FUNC void lt_open_lib(lua_State *L);

/* lio.c: st.save, st.load, st.read_idx into the module table at the top. */
LT_FUNC void lt_open_io(lua_State *L);

/* lautograd.c: autograd functions into the module table at the top, methods into the table at
 * index `methods`; tensor properties (x.grad, x.requires_grad, x.is_leaf) for __index/__newindex:
 * they return 1 when they handled the key. */
LT_FUNC void lt_open_autograd(lua_State *L, int methods);
LT_FUNC int lt_autograd_get(lua_State *L, st_tensor *t, const char *key);
LT_FUNC int lt_autograd_set(lua_State *L, st_tensor *t, const char *key, int value);

/* lshape.c: views (x:reshape, x:transpose, x:narrow, ...) into the table at index `methods`, st.cat
 * and st.stack into the module table at the top. */
LT_FUNC void lt_open_shape(lua_State *L, int methods);

/* lindex.c: t[key] / t[key] = v for keys that are not strings (stack: t, key [, v]), for lstitch.c's
 * __index / __newindex; the index-tensor ops: methods (x:gather, ...) into the table at index
 * `methods`, st.one_hot into the module table at the top. */
LT_FUNC int lt_index_get(lua_State *L, st_tensor *t);
LT_FUNC int lt_index_set(lua_State *L, st_tensor *t);
LT_FUNC void lt_open_index(lua_State *L, int methods);

/* lprint.c: reading values */
LT_FUNC int lt_item(lua_State *L);
LT_FUNC int lt_tolist(lua_State *L);
LT_FUNC int lt_tostring(lua_State *L);

#endif
