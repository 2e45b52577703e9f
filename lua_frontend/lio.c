/*
 * lio.c — files from Lua: st.save(path, tbl [, metadata]), st.load(path) -> tbl, metadata and
 * st.read_idx(path) -> tensor, on the C API of io/safetensors.c and io/idx.c.
 *
 * Invariants (those of lstitch.c):
 *  - Nothing the runtime hands back is held only by a C local while Lua may raise: st.load keeps
 *    what st_load_meta returned in a userdata with __gc (lio_loaded) until each tensor has moved
 *    into its own box; st.read_idx pushes its box before the C call.
 *  - st.save takes only borrowed pointers: the flattened names and the tensors' boxes are anchored
 *    in Lua tables on the stack, the pointer arrays are Lua userdata.
 *  - Nested tables flatten with "." between keys: {fc1 = {weight = w}} is saved as "fc1.weight";
 *    integer keys become their decimal text ({layers = {w1}} -> "layers.1"). Loading gives the flat
 *    names back (no unflattening: names are what the file says).
 */
#include "lstitch_internal.h"

#include <lauxlib.h>
#include <string.h>


#define LIO_LOADED_MT "stitch.io_loaded"
#define LIO_DEPTH_MAX 32

/* What st_load_meta returned, until it has moved into Lua values. */
typedef struct lio_loaded {
    int n, nmeta;
    char **names, **keys, **values;
    st_tensor **ts;
} lio_loaded;

static void lio_loaded_clear(lio_loaded *h) {
    st_free_loaded(h->n, h->names, h->ts);
    st_free_meta(h->nmeta, h->keys, h->values);
    memset(h, 0, sizeof *h);
}

static int lio_loaded_gc(lua_State *L) {
    lio_loaded_clear(luaL_checkudata(L, 1, LIO_LOADED_MT));
    return 0;
}

/* The key at stack index k as a name (pushed): strings as they are, integers in decimal. */
static const char *lio_push_key(lua_State *L, int k, const char *prefix) {
    if (lua_type(L, k) == LUA_TSTRING) {
        size_t len;
        const char *s = lua_tolstring(L, k, &len);
        if (strlen(s) != len) luaL_error(L, "save: a key contains a NUL character");
        lua_pushvalue(L, k); /* a copy: lua_tostring on the key itself would confuse lua_next */
    } else if (lua_isinteger(L, k)) {
        lua_pushfstring(L, "%I", (lua_Integer)lua_tointeger(L, k));
    } else {
        luaL_error(L, "save: a key of type %s (keys are strings or integers)", luaL_typename(L, k));
    }
    if (prefix) {
        lua_pushfstring(L, "%s.%s", prefix, lua_tostring(L, -1));
        lua_remove(L, -2);
    }
    return lua_tostring(L, -1);
}

/* Appends every tensor of the table at tbl (recursively) to the sequences at names and tens. */
static void lio_flatten(lua_State *L, int tbl, const char *prefix, int depth, int names, int tens, int *count) {
    if (depth > LIO_DEPTH_MAX)
        luaL_error(L, "save: tables nested deeper than %d levels at \"%s\" (a cycle?)", LIO_DEPTH_MAX, prefix);
    luaL_checkstack(L, 8, "save: nested tables");
    lua_pushnil(L);
    while (lua_next(L, tbl)) {
        const char *name = lio_push_key(L, -2, prefix); /* stack: key, value, name */
        lt_box *b = luaL_testudata(L, -2, LT_MT);
        if (b) {
            if (!b->t) luaL_error(L, "save: tensor \"%s\" was closed", name);
            if (*count == INT32_MAX) luaL_error(L, "save: too many tensors");
            ++*count;
            lua_pushvalue(L, -1);
            lua_rawseti(L, names, *count);
            lua_pushvalue(L, -2);
            lua_rawseti(L, tens, *count);
        } else if (lua_istable(L, -2)) {
            lio_flatten(L, lua_absindex(L, -2), name, depth + 1, names, tens, count);
        } else {
            luaL_error(L, "save: \"%s\" is a %s, not a tensor or a table of tensors", name, luaL_typename(L, -2));
        }
        lua_pop(L, 2); /* name, value: the key stays for lua_next */
    }
}

/* The path argument at index i: a string without NUL bytes (C would cut it at the first one and
 * write or read another file). */
static const char *lio_check_path(lua_State *L, int i, const char *fn) {
    size_t len;
    const char *path = luaL_checklstring(L, i, &len);
    if (strlen(path) != len) luaL_error(L, "%s: the path contains a NUL byte", fn);
    return path;
}

/* st.save(path, tbl [, metadata]) */
static int lio_save(lua_State *L) {
    const char *path = lio_check_path(L, 1, "save");
    luaL_checktype(L, 2, LUA_TTABLE);
    if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);
    lua_newtable(L); /* 4: names */
    lua_newtable(L); /* 5: tensor boxes */
    int n = 0;
    lio_flatten(L, 2, NULL, 0, 4, 5, &n);
    const char **cnames = lua_newuserdatauv(L, sizeof *cnames * (size_t)(n ? n : 1), 0);
    st_tensor **cts = lua_newuserdatauv(L, sizeof *cts * (size_t)(n ? n : 1), 0);
    for (int k = 0; k < n; k++) {
        lua_rawgeti(L, 4, k + 1);
        cnames[k] = lua_tostring(L, -1); /* anchored in the names table */
        lua_rawgeti(L, 5, k + 1);
        cts[k] = lt_list_entry(L, k + 1); /* checked by lio_flatten: cannot raise */
        lua_pop(L, 2);
    }
    /* Metadata: string keys; string, number or boolean values (saved as text). */
    int nmeta = 0;
    lua_newtable(L);
    int mtab = lua_gettop(L);
    if (!lua_isnil(L, 3)) {
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "save: metadata keys must be strings");
            size_t klen, vlen;
            const char *key = lua_tolstring(L, -2, &klen);
            if (strlen(key) != klen) luaL_error(L, "save: %s: a metadata key contains a NUL byte", path);
            int vt = lua_type(L, -1);
            if (vt == LUA_TBOOLEAN) {
                lua_pushstring(L, lua_toboolean(L, -1) ? "true" : "false");
            } else if (vt == LUA_TSTRING || vt == LUA_TNUMBER) {
                /* A NUL would silently cut the value: the format's metadata are text without NULs
                 * (st.load refuses them too). */
                const char *v = lua_tolstring(L, -1, &vlen);
                if (strlen(v) != vlen)
                    luaL_error(L, "save: %s: metadata \"%s\": the value contains a NUL byte (at byte %d)", path, key,
                               (int)strlen(v) + 1);
                lua_pushstring(L, v);
            } else {
                luaL_error(L, "save: metadata \"%s\" is a %s (strings, numbers or booleans)", key, luaL_typename(L, -1));
            }
            lua_rawseti(L, mtab, 2 * nmeta + 2); /* value */
            lua_pushvalue(L, -2);
            lua_rawseti(L, mtab, 2 * nmeta + 1); /* key */
            nmeta++;
            lua_pop(L, 1);
        }
    }
    const char **mkeys = lua_newuserdatauv(L, sizeof *mkeys * (size_t)(nmeta ? nmeta : 1), 0);
    const char **mvals = lua_newuserdatauv(L, sizeof *mvals * (size_t)(nmeta ? nmeta : 1), 0);
    for (int k = 0; k < nmeta; k++) {
        lua_rawgeti(L, mtab, 2 * k + 1);
        mkeys[k] = lua_tostring(L, -1);
        lua_rawgeti(L, mtab, 2 * k + 2);
        mvals[k] = lua_tostring(L, -1);
        lua_pop(L, 2);
    }
    st_status s;
    LT_TRY_STATUS(L, s, st_save_meta(path, n, cnames, (st_tensor *const *)cts, nmeta, mkeys, mvals));
    if (s != ST_OK) return lt_raise(L, "save");
    lt_gc_feed(L);
    return 0;
}

/* st.load(path) -> {name = tensor}, {metadata key = value} */
static int lio_load(lua_State *L) {
    const char *path = lio_check_path(L, 1, "load");
    lua_settop(L, 1);
    lio_loaded *h = lua_newuserdatauv(L, sizeof *h, 0); /* 2 */
    memset(h, 0, sizeof *h);
    luaL_setmetatable(L, LIO_LOADED_MT);
    st_status s;
    LT_TRY_STATUS(L, s, st_load_meta(path, &h->n, &h->names, &h->ts, &h->nmeta, &h->keys, &h->values));
    if (s != ST_OK) return lt_raise(L, "load");
    lua_createtable(L, 0, h->n); /* 3 */
    for (int k = 0; k < h->n; k++) {
        lt_box *b = lt_push_box(L);
        b->t = h->ts[k]; /* moved: the box owns it now */
        h->ts[k] = NULL;
        lua_setfield(L, 3, h->names[k]);
    }
    lua_createtable(L, 0, h->nmeta); /* 4 */
    for (int k = 0; k < h->nmeta; k++) {
        lua_pushstring(L, h->values[k]);
        lua_setfield(L, 4, h->keys[k]);
    }
    lio_loaded_clear(h);
    lt_gc_feed(L);
    return 2;
}

/* st.read_idx(path) -> tensor (i32 for integer data, f32 / f64 for float / double) */
static int lio_read_idx(lua_State *L) {
    const char *path = lio_check_path(L, 1, "read_idx");
    lt_box *box = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_read_idx(path));
    return lt_box_finish(L, box, r, "read_idx");
}

LT_FUNC void lt_open_io(lua_State *L) {
    if (luaL_newmetatable(L, LIO_LOADED_MT)) {
        lua_pushcfunction(L, lio_loaded_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        {"save", lio_save},
        {"load", lio_load},
        {"read_idx", lio_read_idx},
        {NULL, NULL},
    };
    lt_setfuncs(L, fns, LT_MODULE, 0);
}
