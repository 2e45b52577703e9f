/*
 * fuzz_index.c — libFuzzer harness for the Lua indexing parser (lua_frontend/lindex.c: t[i],
 * t[{...}] reads and writes). The input bytes drive a small grammar that writes a Lua chunk: a
 * tensor of 0-4 dims (sizes 0-4), a key built of integers (small, 0, negative, huge), ranges
 * {a}, {a, b}, {a, b, step}, empty tables, nested tables, non-integers, strings, booleans and
 * tensors, then a read t[k] and a write t[k] = v (a number, a tensor of some shape, a table), each
 * under pcall, then a sync. Every outcome is fine except a crash, a sanitizer report or a Lua error
 * escaping pcall (which would mean an error raised outside the protected call: abort).
 */
#include "stitch.h"
#include "lua_frontend/lstitch.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gen {
    const uint8_t *p;
    size_t n, i;
    char out[4096];
    size_t len;
    int full;   /* the chunk did not fit: the input is skipped */
} gen;

static unsigned next(gen *g) { return g->i < g->n ? g->p[g->i++] : 0; }

static void put(gen *g, const char *s) {
    size_t l = strlen(s);
    if (g->len + l + 1 < sizeof g->out) {
        memcpy(g->out + g->len, s, l);
        g->len += l;
        g->out[g->len] = 0;
    } else {
        g->full = 1;
    }
}

static void integer(gen *g) {
    static const char *const special[] = {"0", "-1", "math.maxinteger", "math.mininteger", "2^53",
                                          "-2^63", "1.5", "0/0", "1/0", "'2'", "true", "nil"};
    unsigned b = next(g);
    char s[32];
    if (b < 200) {
        snprintf(s, sizeof s, "%d", (int)(b % 13) - 6);
        put(g, s);
    } else {
        put(g, special[(b - 200) % (sizeof special / sizeof special[0])]);
    }
}

static void key(gen *g, int depth) {
    unsigned b = next(g) % 9;
    if (depth > 3) b = 0;
    switch (b) {
    case 0: integer(g); break;
    case 1: put(g, "{}"); break;
    case 2: put(g, "{"); integer(g); put(g, "}"); break;
    case 3: put(g, "{"); integer(g); put(g, ", "); integer(g); put(g, "}"); break;
    case 4: put(g, "{"); integer(g); put(g, ", "); integer(g); put(g, ", "); integer(g); put(g, "}"); break;
    case 5: put(g, "st.tensor({1, 2}, 'i64')"); break;
    case 6: put(g, "'a'"); break;
    default: { /* a table of up to 5 entries, each a key */
        int m = (int)(next(g) % 6);
        put(g, "{");
        for (int j = 0; j < m; j++) {
            if (j) put(g, ", ");
            key(g, depth + 1);
        }
        put(g, "}");
    }
    }
}

static void value(gen *g) {
    char s[128];
    switch (next(g) % 5) {
    case 0: integer(g); break;
    case 1: snprintf(s, sizeof s, "st.ones(%u)", next(g) % 5); put(g, s); break;
    case 2: snprintf(s, sizeof s, "st.ones(%u, %u)", next(g) % 4, next(g) % 4); put(g, s); break;
    case 3: put(g, "{1, 2}"); break;
    default: put(g, "t[1]"); break;
    }
}

static lua_State *L;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!L) {
        setenv("ST_DEVICE", "cpu", 1);
        L = luaL_newstate();
        luaL_openlibs(L);
        luaL_requiref(L, "stitch", luaopen_stitch, 0);
        lua_setglobal(L, "st");
    }
    gen g = {.p = data, .n = size};
    static const char *const dts[] = {"f32", "i64", "f64", "bool", "i32", "f16"};
    unsigned nd = next(&g) % 5, sz[4], numel = 1;
    for (unsigned d = 0; d < nd; d++) numel *= (sz[d] = next(&g) % 5);
    char s[256];
    snprintf(s, sizeof s, "local t = st.arange(%u):to('%s')", numel, dts[next(&g) % 6]);
    put(&g, s);
    put(&g, ":reshape({");
    for (unsigned d = 0; d < nd; d++) {
        snprintf(s, sizeof s, d ? ", %u" : "%u", sz[d]);
        put(&g, s);
    }
    put(&g, "})\nlocal k = ");
    key(&g, 0);
    put(&g, "\npcall(function() local r = t[k]; if st.is_tensor(r) then st.sync(r) end end)\n"
            "pcall(function() t[k] = ");
    value(&g);
    put(&g, " end)\npcall(function() st.sync(t) end)\n");
    if (g.full) return 0;
    /* a chunk that does not parse (a grammar slip) is a harness bug, not a finding */
    if (luaL_loadstring(L, g.out) != LUA_OK) {
        fprintf(stderr, "fuzz_index: chunk does not parse: %s\n%s\n", lua_tostring(L, -1), g.out);
        abort();
    }
    if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
        fprintf(stderr, "fuzz_index: error outside pcall: %s\n%s\n", lua_tostring(L, -1), g.out);
        abort();
    }
    lua_gc(L, LUA_GCSTEP, 0);
    return 0;
}
