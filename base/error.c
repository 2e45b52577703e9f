/*
 * error.c — the per-thread error status and message behind st_last_error().
 *
 * Invariant: every failing public call leaves a non-empty message naming what was wrong; a
 * successful call does not clear an earlier message (callers check return values, not the message).
 *
 * Positions in messages (dims, indices, list entries) are stored marked (BASE_POS, BASE_INDEX in
 * base.h) and 0-based; each reader renders them from the base it counts from: st_last_error() from
 * 0 (the C API), st_last_error_base(1) from 1 (the Lua module). So one message serves both, and
 * no front end has to re-parse or patch English text.
 */
#include "base/base.h"
#include <stdarg.h>

static _Thread_local st_status err_status;
static _Thread_local char err_raw[8192];               /* as formatted, with the position marks */
static _Thread_local char err_msg[sizeof err_raw];     /* rendered from base 0 */
static _Thread_local char err_based[sizeof err_raw];   /* rendered for st_last_error_base(base != 0) */

/* raw rendered into out with every marked position counted from base. A BASE_POS mark shifts only
 * non-negative values (a negative dim counts from the end in every convention); a BASE_INDEX mark
 * shifts every value. A mark not followed by a number is dropped. */
static void render(const char *raw, long long base, char *out, size_t n) {
    size_t o = 0;
    for (const char *p = raw; *p && o + 1 < n;) {
        if (*p != BASE_MARK_POS[0] && *p != BASE_MARK_INDEX[0]) {
            out[o++] = *p++;
            continue;
        }
        int always = *p == BASE_MARK_INDEX[0];
        char *end;
        long long v = strtoll(++p, &end, 10);
        if (end == p) continue;
        p = end;
        if (always || v >= 0) v += base;
        int k = snprintf(out + o, n - o, "%lld", v);
        if (k < 0) break;
        o += (size_t)k < n - o ? (size_t)k : n - o - 1;
    }
    out[o] = 0;
}

/* Formatted into a scratch buffer first: callers often wrap the previous message
 * (st_error(s, "cuda: %s", base_error_raw())), and vsnprintf into the buffer it reads from is
 * undefined (it printed "cuda: cuda:  cannot lower ..."). */
st_status st_error(st_status s, const char *fmt, ...) {
    static _Thread_local char scratch[sizeof err_raw];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(scratch, sizeof scratch, fmt, ap);
    va_end(ap);
    memcpy(err_raw, scratch, strlen(scratch) + 1);
    render(err_raw, 0, err_msg, sizeof err_msg);
    err_status = s;
    return s;
}

const char *base_error_raw(void) { return err_raw; }
const char *st_last_error(void) { return err_msg; }
const char *st_last_error_base(int base) {
    if (base == 0) return err_msg;
    render(err_raw, base, err_based, sizeof err_based);
    return err_based;
}
st_status st_last_status(void) { return err_status; }
void st_clear_error(void) {
    err_status = ST_OK;
    err_raw[0] = err_msg[0] = err_based[0] = 0;
}

_Noreturn void st_assert_fail(const char *what, const char *file, int line) {
    fprintf(stderr, "stitch: internal assertion failed: %s (%s:%d)\n", what, file, line);
    fflush(stderr);
    abort();
}
