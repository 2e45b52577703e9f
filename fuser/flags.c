/*
 * flags.c — which fusion kinds are on (ST_FUSE), for ablation and for bisecting a fusion bug.
 *
 * ST_FUSE is a comma-separated list read once: a kind name turns it on, "-name" turns it off,
 * "none" turns every kind off and "all" every kind on, applied left to right from "all"
 * (ST_FUSE=-stitch,-horizontal; ST_FUSE=none,+inline). An unknown name is reported once on
 * stderr and ignored: a typo must not fail a run. Every kind off means one kernel per op that
 * is not free (views and sources are still folded into their readers' indexing).
 * Invariant: results never depend on the flags (tests run the fuzzer with kinds switched off);
 * only kernels and bytes moved do. fuse_set_flags overrides the environment (tests, benches).
 */
#include "fuser/fuser.h"

#include <stdlib.h>
#include <string.h>

static const struct { const char *name; unsigned bit; } kinds[] = {
    {"inline", FUSE_INLINE},         {"reduce", FUSE_REDUCE},       {"stitch", FUSE_STITCH},
    {"prologue", FUSE_MM_PROLOGUE},  {"epilogue", FUSE_MM_EPILOGUE}, {"multi", FUSE_MULTI},
    {"horizontal", FUSE_HORIZONTAL}, {"implicit", FUSE_MM_IMPLICIT},
};

static unsigned flags;
static int flags_read;

unsigned fuse_parse_flags(const char *spec) {
    unsigned f = FUSE_ALL;
    if (!spec) return f;
    const char *s = spec;
    while (*s) {
        size_t n = strcspn(s, ",");
        char tok[32];
        if (n > 0 && n < sizeof tok) {
            memcpy(tok, s, n);
            tok[n] = '\0';
            const char *name = tok;
            int on = 1;
            if (*name == '-' || *name == '+') on = *name++ == '+';
            unsigned bit = 0;
            if (!strcmp(name, "none") || !strcmp(name, "all")) {
                f = !strcmp(name, "all") ? FUSE_ALL : 0;
                bit = FUSE_ALL;
            }
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0] && !bit; k++)
                if (!strcmp(name, kinds[k].name)) bit = kinds[k].bit;
            if (!bit) fprintf(stderr, "stitch: ST_FUSE: unknown fusion kind '%s' (ignored; known: inline, "
                                      "reduce, stitch, prologue, epilogue, multi, horizontal, implicit, none, all)\n", tok);
            else if (bit != FUSE_ALL) f = on ? (f | bit) : (f & ~bit);
        }
        s += n;
        if (*s == ',') s++;
    }
    return f;
}

unsigned fuse_flags(void) {
    if (!flags_read) {
        flags = fuse_parse_flags(base_env(SET_FUSE));
        flags_read = 1;
    }
    return flags;
}

void fuse_set_flags(unsigned f) {
    flags = f & FUSE_ALL;
    flags_read = 1;
}
