/*
 * error.c — the per-thread error status and message behind st_last_error().
 *
 * Invariant: every failing public call leaves a non-empty message naming what was wrong; a
 * successful call does not clear an earlier message (callers check return values, not the message).
 */
#include "base/base.h"
#include <stdarg.h>

static _Thread_local st_status err_status;
static _Thread_local char err_msg[8192];

/* Formatted into a scratch buffer first: callers often wrap the previous message
 * (st_error(s, "cuda: %s", st_last_error())), and vsnprintf into the buffer it reads from is
 * undefined (it printed "cuda: cuda:  cannot lower ..."). */
st_status st_error(st_status s, const char *fmt, ...) {
    static _Thread_local char scratch[sizeof err_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(scratch, sizeof scratch, fmt, ap);
    va_end(ap);
    memcpy(err_msg, scratch, strlen(scratch) + 1);
    err_status = s;
    return s;
}

const char *st_last_error(void) { return err_msg; }
st_status st_last_status(void) { return err_status; }
void st_clear_error(void) {
    err_status = ST_OK;
    err_msg[0] = 0;
}

_Noreturn void st_assert_fail(const char *what, const char *file, int line) {
    fprintf(stderr, "stitch: internal assertion failed: %s (%s:%d)\n", what, file, line);
    fflush(stderr);
    abort();
}
