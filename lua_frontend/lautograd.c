/*
 * lautograd.c — autograd in Lua: x:requires_grad_(), x.grad, x.requires_grad, x.is_leaf,
 * x:backward(), x:detach(), x:retain_grad(), st._function_apply (custom functions; st.autograd.Function
 * is written in Lua on top of it, lib/autograd.lua), st.no_grad (a to-be-closed guard or a function wrapper),
 * st.enable_grad, st.is_grad_enabled. st.grad(f) is written in Lua on top of these (below).
 *
 * Grad mode is a push/pop stack in the runtime; every push made here is popped on every path,
 * including errors raised inside st.no_grad(fn) (the pop runs before the error propagates).
 */
#include "lstitch_internal.h"

#include <stdlib.h>
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

/* ---- custom functions: st._function_apply (st.autograd.Function is lib/autograd.lua) ----
 * The runtime calls la_fn_backward during st_backward; it calls the Lua closure given to
 * st._function_apply (kept in the registry) on the Lua state running the backward (la_running, set
 * by la_backward). The closure runs under lua_pcall, so a Lua error never jumps over the runtime's
 * frames: it is parked in the registry (LA_FNERR) and la_backward raises it once st_backward has
 * returned, with the runtime cleaned up. A record can outlive the Lua state (or be freed in the
 * middle of a collection), so freeing it never calls Lua: the closure's reference goes to a list of
 * dead references that the next call from Lua releases. */
#define LA_HOST "stitch.FnHost"       /* the metatable */
#define LA_HOST_KEY "stitch.fn_host"  /* the registry field holding this state's host */
#define LA_FNERR "stitch.fn_error"
#define LA_AFTER "stitch.after_backward"  /* st._after_backward's function */
typedef struct la_host {
    int alive;       /* the Lua state is open */
    int refs;        /* the state's userdata + one per live record */
    int *dead;       /* registry references whose records died */
    int ndead, capdead;
    lua_State *main; /* the state's main thread */
} la_host;

typedef struct la_fnud {
    la_host *host;
    int ref;         /* the closure, in the registry */
    char name[64];
} la_fnud;

static lua_State *la_running; /* the state running st_backward (NULL outside la_backward) */

static void la_host_drop(la_host *h) {
    if (--h->refs > 0) return;
    free(h->dead);
    free(h);
}

static int la_host_gc(lua_State *L) {
    la_host **hp = luaL_checkudata(L, 1, LA_HOST);
    if (*hp) {
        (*hp)->alive = 0;
        la_host_drop(*hp);
        *hp = NULL;
    }
    return 0;
}

/* This state's host (made on first use), its dead references released. */
static la_host *la_get_host(lua_State *L) {
    la_host *h = NULL;
    if (lua_getfield(L, LUA_REGISTRYINDEX, LA_HOST_KEY) == LUA_TUSERDATA) h = *(la_host **)lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!h) {
        la_host **hp = lua_newuserdatauv(L, sizeof *hp, 0);
        *hp = NULL;
        luaL_setmetatable(L, LA_HOST);
        if (!(h = calloc(1, sizeof *h))) luaL_error(L, "not enough memory");
        h->alive = 1;
        h->refs = 1;
        lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
        h->main = lua_tothread(L, -1);
        lua_pop(L, 1);
        *hp = h;
        lua_setfield(L, LUA_REGISTRYINDEX, LA_HOST_KEY);
    }
    while (h->ndead > 0) luaL_unref(L, LUA_REGISTRYINDEX, h->dead[--h->ndead]);
    return h;
}

static void la_fn_free(void *ud) {
    la_fnud *u = ud;
    la_host *h = u->host;
    if (h->alive) { /* park the reference; on failure it stays in the registry (a small leak) */
        if (h->ndead == h->capdead) {
            int cap = h->capdead ? 2 * h->capdead : 16;
            int *p = realloc(h->dead, (size_t)cap * sizeof *p);
            if (p) h->dead = p, h->capdead = cap;
        }
        if (h->ndead < h->capdead) h->dead[h->ndead++] = u->ref;
    }
    la_host_drop(h);
    free(u);
}

typedef struct la_fncall {
    la_fnud *u;
    int nout, nin;
    st_tensor *const *gout;
    st_tensor **gin;
} la_fncall;

/* Under lua_pcall: closure(grad_outputs...) -> up to nin gradients (tensors or nil). */
static int la_fn_call(lua_State *L) {
    la_fncall *c = lua_touserdata(L, 1);
    luaL_checkstack(L, c->nout + 4, "custom function backward");
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->u->ref);
    for (int i = 0; i < c->nout; i++) {
        if (!c->gout[i]) {
            lua_pushnil(L);
            continue;
        }
        lt_box *b = lt_push_box(L);
        b->t = st_retain(c->gout[i]);
    }
    int base = lua_gettop(L) - c->nout - 1;
    lua_call(L, c->nout, LUA_MULTRET);
    int nret = lua_gettop(L) - base;
    if (nret > c->nin)
        return luaL_error(L, "the backward returned %d gradients for %d tensor inputs", nret, c->nin);
    for (int i = 0; i < nret; i++) {
        int idx = base + 1 + i;
        if (lua_isnil(L, idx)) continue;
        st_tensor *g = lt_totensor(L, idx);
        if (!g) return luaL_error(L, "gradient %d is a %s, not a tensor or nil", i + 1, luaL_typename(L, idx));
        c->gin[i] = st_retain(g);
    }
    return 0;
}

static st_status la_fn_backward(void *ud, int nout, st_tensor *const *gout, int nin, st_tensor **gin) {
    la_fnud *u = ud;
    lua_State *L = la_running;
    if (!L || !u->host->alive) return ST_ERR_ARG; /* a backward started from C, not from Lua */
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    int same = lua_tothread(L, -1) == u->host->main;
    lua_pop(L, 1);
    if (!same) return ST_ERR_ARG; /* the function belongs to another Lua state */
    if (!lua_checkstack(L, 4)) return ST_ERR_OOM;
    la_fncall c = {u, nout, nin, gout, gin};
    lua_pushcfunction(L, la_fn_call);
    lua_pushlightuserdata(L, &c);
    if (lua_pcall(L, 1, 0, 0) == LUA_OK) return ST_OK;
    for (int i = 0; i < nin; i++) { /* the runtime takes nothing from a failed backward */
        st_release(gin[i]);
        gin[i] = NULL;
    }
    if (lua_type(L, -1) == LUA_TSTRING) {
        const char *m = lua_tostring(L, -1);
        if (strncmp(m, "backward of ", 12) != 0) { /* a nested backward's error names its function */
            lua_pushfstring(L, "backward of the custom function %s: %s", u->name, m);
            lua_remove(L, -2);
        }
    }
    lua_setfield(L, LUA_REGISTRYINDEX, LA_FNERR);
    return ST_ERR_ARG;
}

/* st._function_apply(name, inputs, outputs, backward) -> results: the tensors of the list outputs,
 * recorded as the outputs of a function of the tensors of the list inputs whose backward is the
 * Lua function backward(grad_outputs...) -> grad_inputs... (see st_function_apply). */
static int la_function_apply(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    luaL_checktype(L, 4, LUA_TFUNCTION);
    int nin = (int)luaL_len(L, 2), nout = (int)luaL_len(L, 3);
    if (nin > 255 || nout > 255 || nout < 1)
        return luaL_error(L, "autograd.Function %s: 1 to 255 tensor outputs and at most 255 tensor "
                          "inputs (got %d outputs, %d inputs)", name, nout, nin);
    st_tensor *in[255], *out[255], *res[255];
    for (int i = 0; i < nin; i++) {
        lua_geti(L, 2, i + 1);
        in[i] = lt_list_entry(L, i + 1);
        lua_pop(L, 1);
    }
    for (int i = 0; i < nout; i++) {
        lua_geti(L, 3, i + 1);
        out[i] = lt_list_entry(L, i + 1);
        lua_pop(L, 1);
    }
    la_host *h = la_get_host(L);
    lua_createtable(L, nout, 0); /* the result boxes, made before anything that needs freeing */
    lt_box *boxes[255];
    for (int i = 0; i < nout; i++) {
        boxes[i] = lt_push_box(L);
        lua_rawseti(L, -2, i + 1);
    }
    st_status s = ST_ERR_OOM;
    /* out of memory: garbage collected and tried once more, like every binding (LT_TRY); a failed
     * call has freed its u, so each try makes its own */
    for (int attempt = 0; attempt < 2 && s == ST_ERR_OOM; attempt++) {
        if (attempt) lt_collect(L);
        lua_pushvalue(L, 4);
        int ref = luaL_ref(L, LUA_REGISTRYINDEX);
        la_fnud *u = malloc(sizeof *u);
        if (!u) {
            luaL_unref(L, LUA_REGISTRYINDEX, ref);
            return luaL_error(L, "not enough memory");
        }
        u->host = h;
        u->ref = ref;
        snprintf(u->name, sizeof u->name, "%s", name);
        h->refs++;
        s = st_function_apply(name, nin, in, nout, out, res, la_fn_backward, u, la_fn_free);
    }
    if (s != ST_OK) return lt_raise(L, "autograd.Function");
    for (int i = 0; i < nout; i++) boxes[i]->t = res[i];
    return 1;
}

static int la_retain_grad(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    st_status s;
    LT_TRY_STATUS(L, s, st_retain_grad(t));
    if (s != ST_OK) return lt_raise(L, "retain_grad");
    lua_settop(L, 1);
    return 1;
}

/* st._after_backward(fn): fn() runs when an outermost x:backward() has returned, success or not
 * (lib/autograd.lua: custom functions close their saved tensors then, not inside their backward,
 * which runs again when st_backward is retried after running out of memory). */
static int la_set_after_backward(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, LA_AFTER);
    return 0;
}

static void la_after_backward(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, LA_AFTER) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        return;
    }
    if (lua_pcall(L, 0, 0, 0) != LUA_OK) lua_pop(L, 1);   /* closing tensors: nothing to report */
}

static int la_backward(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    st_tensor *g = lua_isnoneornil(L, 2) ? NULL : lt_check(L, 2);
    st_status s;
    lua_State *outer = la_running;
    la_running = L;
    LT_TRY_STATUS(L, s, st_backward(t, g));
    la_running = outer;
    if (!outer) la_after_backward(L);
    if (s != ST_OK) {
        if (lua_getfield(L, LUA_REGISTRYINDEX, LA_FNERR) != LUA_TNIL) { /* a Lua backward raised */
            lua_pushnil(L);
            lua_setfield(L, LUA_REGISTRYINDEX, LA_FNERR);
            st_clear_error();
            return lua_error(L);
        }
        lua_pop(L, 1);
        return lt_raise(L, "backward");
    }
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

/* ---- autocast: st.autocast(dtype | false [, fn, ...]), st.autocast_dtype() ---- */
#define LA_ACGUARD "stitch.AutocastGuard"
static int la_acguard_close(lua_State *L) {
    la_guard *g = luaL_checkudata(L, 1, LA_ACGUARD);
    if (g->active) {
        g->active = 0;
        st_autocast_pop();
    }
    return 0;
}

/* st.autocast("bf16" | "f16" | false) -> a to-be-closed guard; st.autocast(dtype, fn, ...) ->
 * fn(...) with autocast on (off with false); the mode is popped on every path. */
static int la_autocast(lua_State *L) {
    int enabled = 1;
    st_dtype dt = ST_BF16;
    if (lua_isboolean(L, 1) && !lua_toboolean(L, 1)) enabled = 0;
    else if (lua_type(L, 1) != LUA_TSTRING)
        return luaL_error(L, "autocast: expected a dtype (\"bf16\" or \"f16\") or false, got %s",
                          luaL_typename(L, 1));
    else dt = lt_optdtype(L, 1, ST_BF16);
    if (enabled && dt != ST_F16 && dt != ST_BF16)
        return luaL_error(L, "autocast: the dtype must be \"bf16\" or \"f16\", got \"%s\"", lua_tostring(L, 1));
    if (lua_isnoneornil(L, 2)) {
        if (lua_gettop(L) > 2) return luaL_error(L, "autocast: arguments after nil; pass a function to call");
        la_guard *g = lua_newuserdatauv(L, sizeof *g, 0);
        g->active = 0;
        luaL_setmetatable(L, LA_ACGUARD);
        if (st_autocast_push(enabled, dt) != ST_OK) return lt_raise(L, "autocast");
        g->active = 1;
        return 1;
    }
    luaL_checktype(L, 2, LUA_TFUNCTION);
    int n = lua_gettop(L);
    if (st_autocast_push(enabled, dt) != ST_OK) return lt_raise(L, "autocast");
    int rc = lua_pcall(L, n - 2, LUA_MULTRET, 0);
    st_autocast_pop();
    if (rc != LUA_OK) return lua_error(L);
    return lua_gettop(L) - 1;
}

static int la_autocast_dtype(lua_State *L) {
    st_dtype dt = st_autocast_dtype();
    if (dt == ST_DTYPE_COUNT) lua_pushnil(L);
    else lua_pushstring(L, st_dtype_name(dt));
    return 1;
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
        {"retain_grad", la_retain_grad}, {NULL, NULL},
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
    if (luaL_newmetatable(L, LA_HOST)) {
        lua_pushcfunction(L, la_host_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, LA_ACGUARD)) { /* no __gc, as the grad guard */
        lua_pushcfunction(L, la_acguard_close);
        lua_setfield(L, -2, "__close");
    }
    lua_pop(L, 1);
    static const luaL_Reg fn[] = {{"_function_apply", la_function_apply},
                                  {"_after_backward", la_set_after_backward},
                                  {"autocast", la_autocast},
                                  {"autocast_dtype", la_autocast_dtype},
                                  {NULL, NULL}};
    lt_setfuncs(L, fn, LT_MODULE, 0);
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
