/*
 * llib.c — the Lua part of stitch's library (st.nn, st.optim, st.data, st.progress, and the tensor
 * ops written in Lua: tensor_ops.lua, tensor_sort.lua, tensor_index.lua), embedded.
 *
 * Each lua_frontend/lib/NAME.lua is a chunk called with the module table and returning its own
 * module table. st._lib(NAME) loads one once and caches it in the registry (so every require of
 * stitch in one Lua state shares the same st.nn); the module table's metatable loads the public
 * ones lazily on first access (st.nn costs nothing to a script that never touches it). The tensor_*
 * libs are loaded at once, when the module opens: they add methods to st.Tensor (x:flip(1),
 * x:sort()) that a method lookup cannot load lazily, and lindex.c calls tensor_index.lua for tensor
 * keys (lhelp.c's lt_push_libfn reads this cache). With ST_LUA_LIB=dir set, chunks are read from
 * dir/NAME.lua instead of the embedded copies (development). st.help and st._complete (repl.lua: the
 * REPL's help and Tab completion) load the same way, as fields of their library.
 * Also two tiny host helpers the library needs: st._isatty() and st._now().
 */
#define _POSIX_C_SOURCE 200809L
#include "lstitch_internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* What the module table loads on first access: st.KEY is library LIB itself (field NULL) or its
 * field FIELD. The public keys are also listed in the metatable's __lazy (for the REPL's
 * completion, which cannot see keys that pairs() does not return yet). */
static const struct {
    const char *key, *lib, *field;
    bool public;
} lt_lazy[] = {
    {"nn", "nn", NULL, true},
    {"optim", "optim", NULL, true},
    {"data", "data", NULL, true},
    {"progress", "progress", NULL, true},
    {"autograd", "autograd", NULL, true},    /* st.autograd.Function: autograd.lua */
    {"utils", "utils", NULL, true},          /* st.utils.checkpoint */
    {"amp", "amp", NULL, true},              /* st.amp.GradScaler: amp.lua */
    {"help", "repl", "help", true},          /* help(x): repl.lua */
    {"_complete", "repl", "complete", false}, /* the REPL's Tab completion: repl.lua */
    {NULL, NULL, NULL, false},
};

/* st._lib(name): upvalue 1 is the module table. */
static int lt_lib(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LT_LIBCACHE);
    if (lua_getfield(L, -1, name) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    int cache = lua_gettop(L);
    const char *dir = getenv("ST_LUA_LIB");
    int rc;
    if (dir && *dir) {
        lua_pushfstring(L, "%s/%s.lua", dir, name);
        rc = luaL_loadfile(L, lua_tostring(L, -1));
        lua_remove(L, -2);
    } else {
        const lt_lualib_entry *e = lt_lualib;
        while (e->name && strcmp(e->name, name) != 0) e++;
        if (!e->name) return luaL_error(L, "stitch: no library '%s'", name);
        lua_pushfstring(L, "@stitch/%s.lua", name);
        rc = luaL_loadbufferx(L, e->src, strlen(e->src), lua_tostring(L, -1), "t");
        lua_remove(L, -2);
    }
    if (rc != LUA_OK) return lua_error(L);
    lua_pushvalue(L, LT_UPVALUE(1));
    lua_call(L, 1, 1);
    if (lua_isnil(L, -1)) return luaL_error(L, "stitch: library '%s' returned nothing", name);
    lua_pushvalue(L, -1);
    lua_setfield(L, cache, name);
    return 1;
}

/* __index of the module table: st.nn and friends on first use (then stored as a raw field). */
static int lt_lazy_index(lua_State *L) {
    if (lua_type(L, 2) != LUA_TSTRING) return 0;
    const char *k = lua_tostring(L, 2);
    for (int i = 0; lt_lazy[i].key; i++) {
        if (strcmp(k, lt_lazy[i].key) != 0) continue;
        lua_getfield(L, 1, "_lib");
        lua_pushstring(L, lt_lazy[i].lib);
        lua_call(L, 1, 1);
        if (lt_lazy[i].field) lua_getfield(L, -1, lt_lazy[i].field);
        lua_pushvalue(L, 2);
        lua_pushvalue(L, -2);
        lua_rawset(L, 1);
        return 1;
    }
    return 0;
}

static int lt_isatty(lua_State *L) {
    lua_pushboolean(L, isatty(STDOUT_FILENO));
    return 1;
}

static int lt_now(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

LT_FUNC void lt_open_lib(lua_State *L) {
    int mod = lua_gettop(L);
    static const luaL_Reg lib[] = {{"_lib", lt_lib}, {NULL, NULL}};
    static const luaL_Reg f[] = {{"_isatty", lt_isatty}, {"_now", lt_now}, {NULL, NULL}};
    lua_pushvalue(L, mod);
    lt_setfuncs(L, lib, LT_MODULE, 1);
    lt_setfuncs(L, f, LT_MODULE, 0);
    lua_newtable(L);
    lua_pushcfunction(L, lt_lazy_index);
    lua_setfield(L, -2, "__index");
    lua_newtable(L);
    for (int i = 0, n = 0; lt_lazy[i].key; i++) {
        if (!lt_lazy[i].public) continue;
        lua_pushstring(L, lt_lazy[i].key);
        lua_rawseti(L, -2, ++n);
    }
    lua_setfield(L, -2, "__lazy");
    lua_setmetatable(L, mod);
    /* tensor_ops first: the other two share its checks */
    static const char *const eager[] = {"tensor_ops", "tensor_sort", "tensor_index", NULL};
    for (int i = 0; eager[i]; i++) {
        lua_getfield(L, mod, "_lib");
        lua_pushstring(L, eager[i]);
        lua_call(L, 1, 0);
    }
}

