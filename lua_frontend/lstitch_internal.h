/*
 * lstitch_internal.h — internal: what the parts of the Lua module share (boxes, error raising,
 * memory accounting). Hidden from the module's export table.
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

typedef struct lt_box {
    st_tensor *t;
} lt_box;


LT_FUNC void lt_collect(lua_State *L);
LT_FUNC void lt_gc_feed(lua_State *L);
LT_FUNC int lt_raise(lua_State *L, const char *name);
LT_FUNC st_tensor *lt_check(lua_State *L, int i);
LT_FUNC bool lt_isfloat(st_dtype dt);

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


/* lprint.c: reading values */
LT_FUNC void lt_push_item(lua_State *L, st_tensor *t);
LT_FUNC int lt_item(lua_State *L);
LT_FUNC int lt_tolist(lua_State *L);
LT_FUNC int lt_tostring(lua_State *L);

#endif
