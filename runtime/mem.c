/*
 * mem.c — the one allocation hook of the runtime, and tensor data buffers.
 *
 * Every host allocation of the runtime goes through st_malloc & co. so that (a) failure is an
 * ST_ERR_OOM error and never a crash, (b) a test can fail the Nth allocation (st_debug_fail_alloc),
 * (c) a garbage-collected host gets one chance to free memory before a failure (st_set_oom_handler).
 * Buffers are 64-byte aligned and counted in st_stats_g.bytes_in_use / bytes_peak.
 */
#include "internal.h"

static int64_t fail_countdown;              /* 0: off; 1: fail the next allocation */
static int (*oom_handler)(size_t, void *);
static void *oom_ud;
static void (*alloc_observer)(int64_t, void *);
static void *observer_ud;

void st_debug_fail_alloc(int64_t nth) { fail_countdown = nth > 0 ? nth : 0; }
void st_set_oom_handler(int (*handler)(size_t, void *), void *ud) { oom_handler = handler; oom_ud = ud; }
void st_set_alloc_observer(void (*observer)(int64_t, void *), void *ud) {
    alloc_observer = observer;
    observer_ud = ud;
}

/* True when the debug countdown says this allocation must fail. */
static bool injected_failure(void) {
    if (fail_countdown == 0) return false;
    if (--fail_countdown == 0) return true;
    return false;
}

static void *with_retry(size_t n, void *(*fn)(void *, size_t), void *arg) {
    if (injected_failure()) goto fail;
    void *p = fn(arg, n);
    if (p || n == 0) return p;
    if (oom_handler && oom_handler(n, oom_ud)) {
        p = fn(arg, n);
        if (p) return p;
    }
fail:
    st_error(ST_ERR_OOM, "out of memory: tried to allocate %zu bytes (%.1f MiB in use by tensors)", n,
             st_stats_g.bytes_in_use / 1048576.0);
    return NULL;
}

static void *do_malloc(void *unused, size_t n) { (void)unused; return malloc(n ? n : 1); }
static void *do_realloc(void *p, size_t n) { return realloc(p, n ? n : 1); }

void *st_malloc(size_t n) { return with_retry(n, do_malloc, NULL); }
void *st_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        st_error(ST_ERR_OOM, "out of memory: allocation size overflows");
        return NULL;
    }
    void *p = st_malloc(n * size);
    if (p) memset(p, 0, n * size);
    return p;
}
void *st_realloc(void *p, size_t n) { return with_retry(n, do_realloc, p); }
void st_free(void *p) { free(p); }
char *st_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = st_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static void *do_aligned(void *unused, size_t n) {
    (void)unused;
    return aligned_alloc(64, (n + 63) & ~(size_t)63);
}

st_buffer *st_buffer_new(size_t nbytes) {
    st_buffer *b = st_malloc(sizeof *b);
    if (!b) return NULL;
    b->data = with_retry(nbytes ? nbytes : 1, do_aligned, NULL);
    if (!b->data) {
        st_free(b);
        return NULL;
    }
    b->refcnt = 1;
    b->device = 0;
    b->nbytes = nbytes;
    /* Poison: 0xFF bytes are NaN for every float type and -1 / true for integers. */
    if (st_rt.poison) memset(b->data, 0xFF, nbytes);
    st_stats_g.bytes_in_use += nbytes;
    if (st_stats_g.bytes_in_use > st_stats_g.bytes_peak) st_stats_g.bytes_peak = st_stats_g.bytes_in_use;
    if (alloc_observer) alloc_observer((int64_t)nbytes, observer_ud);
    return b;
}

void st_buffer_release(st_buffer *b) {
    if (!b || --b->refcnt > 0) return;
    st_stats_g.bytes_in_use -= b->nbytes;
    if (alloc_observer) alloc_observer(-(int64_t)b->nbytes, observer_ud);
    free(b->data);
    free(b);
}
