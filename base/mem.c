/*
 * mem.c — the one allocation hook of the runtime, and tensor data buffers.
 *
 * Every host allocation of the runtime goes through st_malloc & co. so that (a) failure is an
 * ST_ERR_OOM error and never a crash, (b) a test can fail the Nth allocation (st_debug_fail_alloc),
 * (c) a garbage-collected host gets one chance to free memory before a failure (st_set_oom_handler).
 * Buffers are 64-byte aligned and counted in st_stats_g.bytes_in_use / bytes_peak. Freed data
 * blocks are kept in a small cache keyed by size (a training loop allocates the same sizes every
 * step; fresh pages cost a page fault each, more than the kernel that writes them), and large
 * blocks are 2 MiB aligned and asked for transparent huge pages.
 */
#include "base/base.h"
#include "device/cuda.h"
#include <sys/mman.h>

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

int st_call_oom_handler(size_t n) { return oom_handler ? oom_handler(n, oom_ud) : 0; }

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
    st_mem_trim();
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

#define HUGE_MIN ((size_t)2 << 20)
#define CACHE_SLOTS 32
#define CACHE_MAX_BYTES ((size_t)1 << 30)
static struct { void *p; size_t n; } block_cache[CACHE_SLOTS];
static int cache_count;
static size_t cache_bytes;

static size_t block_size(size_t n) {
    return n >= HUGE_MIN ? (n + HUGE_MIN - 1) & ~(HUGE_MIN - 1) : (n + 63) & ~(size_t)63;
}

static void *do_aligned(void *unused, size_t n) {
    (void)unused;
    size_t sz = block_size(n);
    for (int i = 0; i < cache_count; i++)
        if (block_cache[i].n == sz) {
            void *p = block_cache[i].p;
            cache_bytes -= sz;
            block_cache[i] = block_cache[--cache_count];
            return p;
        }
    void *p = aligned_alloc(n >= HUGE_MIN ? HUGE_MIN : 64, sz);
#ifdef MADV_HUGEPAGE
    if (p && n >= HUGE_MIN) madvise(p, sz, MADV_HUGEPAGE);
#endif
    return p;
}

static void block_free(void *p, size_t n) {
    size_t sz = block_size(n);
    if (sz >= 4096 && sz <= CACHE_MAX_BYTES / 4) {
        while (cache_count && (cache_count == CACHE_SLOTS || cache_bytes + sz > CACHE_MAX_BYTES)) {
            cache_bytes -= block_cache[0].n;
            free(block_cache[0].p);
            block_cache[0] = block_cache[--cache_count];
        }
        block_cache[cache_count].p = p;
        block_cache[cache_count++].n = sz;
        cache_bytes += sz;
        return;
    }
    free(p);
}

void st_mem_trim(void) {
    for (int i = 0; i < cache_count; i++) free(block_cache[i].p);
    cache_count = 0;
    cache_bytes = 0;
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

/* Device buffers: data holds the device pointer; the device's caching allocator owns the memory
 * (counted in its own statistics, not bytes_in_use). The observer still hears of it, so that a
 * garbage-collected host feels GPU memory pressure too. */
st_buffer *st_buffer_new_on(int dev, size_t nbytes) {
    if (dev == ST_DEV_CPU) return st_buffer_new(nbytes);
    st_buffer *b = st_malloc(sizeof *b);
    if (!b) return NULL;
    st_devptr p;
    if (cuda_mem_alloc(dev - 1, nbytes ? nbytes : 1, &p) != ST_OK) {
        st_free(b);
        return NULL;
    }
    b->data = (void *)(uintptr_t)p;
    b->refcnt = 1;
    b->device = dev;
    b->nbytes = nbytes;
    if (alloc_observer) alloc_observer((int64_t)nbytes, observer_ud);
    return b;
}

void st_buffer_release(st_buffer *b) {
    if (!b || --b->refcnt > 0) return;
    if (b->device != ST_DEV_CPU) {
        if (alloc_observer) alloc_observer(-(int64_t)b->nbytes, observer_ud);
        cuda_mem_free(b->device - 1, (st_devptr)(uintptr_t)b->data);
        free(b);
        return;
    }
    st_stats_g.bytes_in_use -= b->nbytes;
    if (alloc_observer) alloc_observer(-(int64_t)b->nbytes, observer_ud);
    block_free(b->data, b->nbytes ? b->nbytes : 1);
    free(b);
}
