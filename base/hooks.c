/*
 * hooks.c — shutdown hooks: how st_shutdown reaches the caches of every layer without calling up.
 *
 * A layer registers its hook when it first fills a cache (the kernel cache at its first kernel, the
 * plan cache at its first entry, a device when activated). base_shutdown runs the hooks from the
 * highest level down and keeps them registered (a cache refilled after a shutdown is freed by the
 * next one). The table is static: a hook can always be registered, even out of memory.
 */
#include "base/base.h"

enum { MAX_HOOKS = 32 };
static struct { int level; void (*fn)(void); } hooks[MAX_HOOKS];
static int nhooks;

void base_on_shutdown(int level, void (*fn)(void)) {
    for (int i = 0; i < nhooks; i++)
        if (hooks[i].fn == fn) return;
    ST_ASSERT(nhooks < MAX_HOOKS);
    hooks[nhooks].level = level;
    hooks[nhooks++].fn = fn;
}

void base_shutdown(void) {
    int top = 0;
    for (int i = 0; i < nhooks; i++)
        if (hooks[i].level > top) top = hooks[i].level;
    for (int level = top; level >= 0; level--)
        for (int i = nhooks - 1; i >= 0; i--)
            if (hooks[i].level == level) hooks[i].fn();
}
