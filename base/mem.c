/*
 * mem.c — the one allocation hook of every layer, and the out-of-memory protocol.
 *
 * Every host allocation goes through st_malloc & co. so that (a) failure is an ST_ERR_OOM error
 * and never a crash, (b) a test can fail the Nth allocation (st_debug_fail_alloc), (c) before a
 * failure is reported, the trim hooks (caches of freed blocks, registered by the layers that keep
 * them) and then a garbage-collected host (st_set_oom_handler) each get a chance to free memory.
 * Allocators above base (tensor data, device memory) run the same protocol (base_alloc_retry).
 */
#include "base/base.h"

int base_hash_oom;                          /* uthash_cfg.h */
static int64_t fail_countdown;              /* 0: off; 1: fail the next allocation */
static int (*oom_handler)(size_t, void *);
static void *oom_ud;
static void (*alloc_observer)(int64_t, void *);
static void *observer_ud;
enum { MAX_TRIMS = 8 };
static void (*trims[MAX_TRIMS])(void);
static int ntrims;

int64_t st_debug_fail_alloc(int64_t nth) {
    int64_t left = fail_countdown;
    fail_countdown = nth > 0 ? nth : 0;
    return left;
}
void st_set_oom_handler(int (*handler)(size_t, void *), void *ud) { oom_handler = handler; oom_ud = ud; }
void st_set_alloc_observer(void (*observer)(int64_t, void *), void *ud) {
    alloc_observer = observer;
    observer_ud = ud;
}

int st_call_oom_handler(size_t n) { return oom_handler ? oom_handler(n, oom_ud) : 0; }

void base_observe_alloc(int64_t delta) {
    if (alloc_observer) alloc_observer(delta, observer_ud);
}

void base_on_trim(void (*fn)(void)) {
    for (int i = 0; i < ntrims; i++)
        if (trims[i] == fn) return;
    ST_ASSERT(ntrims < MAX_TRIMS);
    trims[ntrims++] = fn;
}

void base_trim(void) {
    for (int i = 0; i < ntrims; i++) trims[i]();
}

bool base_injected_failure(void) {
    if (fail_countdown == 0) return false;
    if (--fail_countdown == 0) return true;
    return false;
}

void *base_alloc_retry(size_t n, void *(*fn)(void *, size_t), void *arg) {
    if (base_injected_failure()) goto fail;
    void *p = fn(arg, n);
    if (p || n == 0) return p;
    base_trim();
    if ((p = fn(arg, n))) return p;
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

void *st_malloc(size_t n) { return base_alloc_retry(n, do_malloc, NULL); }
void *st_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        st_error(ST_ERR_OOM, "out of memory: allocation size overflows");
        return NULL;
    }
    void *p = st_malloc(n * size);
    if (p) memset(p, 0, n * size);
    return p;
}
void *st_realloc(void *p, size_t n) { return base_alloc_retry(n, do_realloc, p); }
void st_free(void *p) { free(p); }
char *st_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = st_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
