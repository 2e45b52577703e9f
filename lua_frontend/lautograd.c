/*
 * lautograd.c — autograd in Lua: x:requires_grad_(), x.grad, x.requires_grad, x.is_leaf,
 * x:backward(), x:detach(), st.no_grad (a to-be-closed guard or a function wrapper),
 * st.enable_grad, st.is_grad_enabled. st.grad(f) is written in Lua on top of these (below).
 *
 * Grad mode is a push/pop stack in the runtime; every push made here is popped on every path,
 * including errors raised inside st.no_grad(fn) (the pop runs before the error propagates).
 */
#include "lstitch_internal.h"

#include <string.h>

static int la_requires_grad_(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int on = lua_isnoneornil(L, 2) ? 1 : lua_toboolean(L, 2);
    st_status s;
    LT_TRY_STATUS(L, s, st_set_requires_grad(t, on));
    if (s != ST_OK) return lt_raise(L, "requires_grad_");
    lua_settop(L, 1);
    return 1;
}

static int la_backward(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    st_tensor *g = lua_isnoneornil(L, 2) ? NULL : lt_check(L, 2);
    st_status s;
    LT_TRY_STATUS(L, s, st_backward(t, g));
    if (s != ST_OK) return lt_raise(L, "backward");
    return 0;
}

static int la_detach(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    lt_box *b = lt_push_box(L);
    st_tensor *r;
    LT_TRY(L, r, st_detach(t));
    return lt_box_finish(L, b, r, "detach");
}

LT_FUNC int lt_autograd_get(lua_State *L, st_tensor *t, const char *key) {
    if (!strcmp(key, "grad")) {
        lt_box *b = lt_push_box(L);
        st_tensor *g;
        LT_TRY(L, g, st_grad(t));
        if (!g) {
            if (st_last_status() != ST_OK) return lt_raise(L, "grad");
            lua_pop(L, 1);
            lua_pushnil(L);
            return 1;
        }
        b->t = g;
        return 1;
    }
    if (!strcmp(key, "requires_grad")) {
        lua_pushboolean(L, st_requires_grad(t));
        return 1;
    }
    if (!strcmp(key, "is_leaf")) {
        lua_pushboolean(L, st_is_leaf(t));
        return 1;
    }
    return 0;
}

LT_FUNC int lt_autograd_set(lua_State *L, st_tensor *t, const char *key, int value) {
    if (!strcmp(key, "grad")) {
        st_tensor *g = lua_isnil(L, value) ? NULL : lt_check(L, value);
        st_status s;
        LT_TRY_STATUS(L, s, st_set_grad(t, g));
        if (s != ST_OK) lt_raise(L, "grad");
        return 1;
    }
    if (!strcmp(key, "requires_grad")) {
        st_status s;
        LT_TRY_STATUS(L, s, st_set_requires_grad(t, lua_toboolean(L, value)));
        if (s != ST_OK) lt_raise(L, "requires_grad");
        return 1;
    }
    return 0;
}

/* The guard returned by st.no_grad(): closing it pops the mode once (closing twice is harmless). */
#define LA_GUARD "stitch.GradGuard"
typedef struct la_guard {
    int active;
} la_guard;

static int la_guard_close(lua_State *L) {
    la_guard *g = luaL_checkudata(L, 1, LA_GUARD);
    if (g->active) {
        g->active = 0;
        st_grad_mode_pop();
    }
    return 0;
}

/* st.no_grad() -> guard; st.no_grad(fn, ...) -> fn(...) with grad mode off (mode: upvalue 1). */
static int la_mode(lua_State *L) {
    int enabled = (int)lua_toboolean(L, LT_UPVALUE(1));
    if (lua_isnoneornil(L, 1)) {
        la_guard *g = lua_newuserdatauv(L, sizeof *g, 0);
        g->active = 0;
        luaL_setmetatable(L, LA_GUARD);
        st_grad_mode_push(enabled);
        g->active = 1;
        return 1;
    }
    luaL_checktype(L, 1, LUA_TFUNCTION);
    int n = lua_gettop(L);
    st_grad_mode_push(enabled);
    int rc = lua_pcall(L, n - 1, LUA_MULTRET, 0);
    st_grad_mode_pop();
    if (rc != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

static int la_is_grad_enabled(lua_State *L) {
    lua_pushboolean(L, st_grad_enabled());
    return 1;
}

/* st.grad(f): gradients of the one-element f(...) w.r.t. each tensor argument (in order). */
static const char la_grad_src[] =
    "local st = ...\n"
    "local function callable(f)\n"
    "  local mt = getmetatable(f)\n"
    "  return type(f) == 'function' or (type(mt) == 'table' and mt.__call ~= nil)\n"
    "end\n"
    "return function(f)\n"
    "  if not callable(f) then error('grad: expected a function, got ' .. type(f), 2) end\n"
    "  return function(...)\n"
    "    local args = table.pack(...)\n"
    "    local leaves = {}\n"
    "    for i = 1, args.n do\n"
    "      if st.is_tensor(args[i]) then\n"
    "        args[i] = args[i]:detach():requires_grad_()\n"
    "        leaves[#leaves + 1] = args[i]\n"
    "      end\n"
    "    end\n"
    "    local y = st.enable_grad(f, table.unpack(args, 1, args.n))\n"
    "    if not st.is_tensor(y) then\n"
    "      error('grad: the function must return a one-element tensor, got ' .. (y == nil and 'nil' or type(y) .. ' ' .. tostring(y)), 2)\n"
    "    end\n"
    "    if y:numel() ~= 1 then\n"
    "      error('grad: the function must return a one-element tensor, got shape (' .. table.concat(y:shape(), ', ') .. ')', 2)\n"
    "    end\n"
    "    y:backward()\n"
    "    local grads = {}\n"
    "    for i, x in ipairs(leaves) do grads[i] = x.grad or st.zeros(x:shape(), x:dtype()) end\n"
    "    return table.unpack(grads)\n"
    "  end\n"
    "end\n";

LT_FUNC void lt_open_autograd(lua_State *L, int methods) {
    int mod = lua_gettop(L);
    static const luaL_Reg m[] = {
        {"requires_grad_", la_requires_grad_}, {"backward", la_backward}, {"detach", la_detach},
        {NULL, NULL},
    };
    lt_setfuncs(L, m, LT_MODULE, 0);        /* st.backward(x), st.detach(x) */
    lua_pushvalue(L, methods);
    lt_setfuncs(L, m, LT_METHOD, 0);
    lua_pop(L, 1);
    if (luaL_newmetatable(L, LA_GUARD)) {
        /* no __gc: a guard that is never closed must not pop someone else's mode at a random
         * collection */
        lua_pushcfunction(L, la_guard_close);
        lua_setfield(L, -2, "__close");
    }
    lua_pop(L, 1);
    static const luaL_Reg no_grad[] = {{"no_grad", la_mode}, {NULL, NULL}};
    static const luaL_Reg enable_grad[] = {{"enable_grad", la_mode}, {NULL, NULL}};
    static const luaL_Reg f[] = {{"is_grad_enabled", la_is_grad_enabled}, {NULL, NULL}};
    lua_pushboolean(L, 0);
    lt_setfuncs(L, no_grad, LT_MODULE, 1);
    lua_pushboolean(L, 1);
    lt_setfuncs(L, enable_grad, LT_MODULE, 1);
    lt_setfuncs(L, f, LT_MODULE, 0);
    if (luaL_loadbufferx(L, la_grad_src, sizeof la_grad_src - 1, "=stitch.grad", "t") == LUA_OK) {
        lua_pushvalue(L, mod);
        lua_call(L, 1, 1);
        lua_setfield(L, mod, "grad");
    } else {
        lua_pop(L, 1);
    }
}
