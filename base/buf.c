/*
 * buf.c — the one string builder (sbuf) and the one growable-array helper (BASE_GROW).
 *
 * sbuf keeps its text NUL-terminated after every append, and a failed growth is sticky (oom), so a
 * builder of long text (a kernel's source, a translation unit, a JSON header) appends freely and
 * checks once at the end. Both double their capacity: amortized O(1) appends.
 */
#include "base/base.h"

#include <stdarg.h>

/* Makes room for n more bytes plus the NUL; 0 on failure (b->oom set). */
static int sbuf_room(sbuf *b, size_t n) {
    if (b->oom) return 0;
    if (b->n + n + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) {
        if (cap > SIZE_MAX / 2) {
            b->oom = 1;
            if (!b->raw) st_error(ST_ERR_OOM, "out of memory: a text buffer of %zu bytes", b->n + n + 1);
            return 0;
        }
        cap *= 2;
    }
    char *p = b->raw ? realloc(b->s, cap) : st_realloc(b->s, cap);
    if (!p) {
        b->oom = 1;
        return 0;
    }
    b->s = p;
    b->cap = cap;
    b->s[b->n] = '\0';
    return 1;
}

void sbuf_put(sbuf *b, const void *data, size_t n) {
    if (!sbuf_room(b, n)) return;
    if (n) memcpy(b->s + b->n, data, n);
    b->n += n;
    b->s[b->n] = '\0';
}

void sbuf_puts(sbuf *b, const char *s) { sbuf_put(b, s, strlen(s)); }

void sbuf_printf(sbuf *b, const char *fmt, ...) {
    if (!b->s && !sbuf_room(b, 0)) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int w = vsnprintf(b->s + b->n, room, fmt, ap);
        va_end(ap);
        if (w < 0) return;   /* an encoding error: nothing appended */
        if ((size_t)w < room) {
            b->n += (size_t)w;
            return;
        }
        if (!sbuf_room(b, (size_t)w)) return;
    }
}

char *sbuf_take(sbuf *b) {
    if (!b->s) sbuf_put(b, "", 0);   /* nothing appended: an empty string */
    if (b->oom) {
        if (!b->raw && st_last_status() != ST_ERR_OOM) st_error(ST_ERR_OOM, "out of memory building text");
        sbuf_free(b);
        return NULL;
    }
    char *s = b->s;
    memset(b, 0, sizeof *b);
    return s;
}

void sbuf_free(sbuf *b) {
    free(b->s);
    int raw = b->raw;
    memset(b, 0, sizeof *b);
    b->raw = raw;
}

st_status base_grow_(void *arrp, int *cap, int64_t n, size_t elem, int first) {
    int64_t c = *cap > 0 ? *cap : (first > 0 ? first : 16);
    while (c < n) c *= 2;
    if (c > INT32_MAX || (size_t)c > SIZE_MAX / elem)
        return st_error(ST_ERR_OOM, "out of memory: an array of %lld elements", (long long)n);
    void *old;
    memcpy(&old, arrp, sizeof old);
    void *p = st_realloc(old, (size_t)c * elem);
    if (!p) return st_last_status();
    memcpy(arrp, &p, sizeof p);
    *cap = (int)c;
    return ST_OK;
}
