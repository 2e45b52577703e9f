/*
 * devalloc.c — the caching device allocator (see devalloc.h for the policy).
 *
 * Every block the backend gave us has one record (devblock). A record is in exactly one place:
 * the `live` table (keyed by pointer, handed out) or the free list of its size class (cached).
 * Invariants: in_use = sum of live sizes, cached = sum of free-list sizes, reserved = in_use +
 * cached = bytes the backend holds for us; raw_allocs - raw_frees = number of records.
 */
#include "device/devalloc.h"
#include <inttypes.h>

#include "base/uthash_cfg.h"

typedef struct devblock {
    uint64_t ptr;
    size_t size;              /* its class */
    struct devblock *next;    /* free list of its class while cached */
    UT_hash_handle hh;        /* live table while handed out */
} devblock;

typedef struct devclass {
    size_t size;
    devblock *free;
    UT_hash_handle hh;
} devclass;

struct devalloc {
    devalloc_backend be;
    char name[32], label[32];
    devblock *live;
    devclass *classes;
    uint64_t in_use, cached, peak, raw_allocs, raw_frees;
};

size_t devalloc_class(size_t n) {
    size_t r = n <= DEVALLOC_SMALL_MAX ? DEVALLOC_SMALL_ROUND : DEVALLOC_LARGE_ROUND;
    if (n == 0) return DEVALLOC_SMALL_ROUND;
    if (n > SIZE_MAX - (r - 1)) return 0;
    return (n + r - 1) / r * r;
}

const char *devalloc_human(uint64_t n, int decimals, char *buf, size_t cap) {
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (n < 1024) {
        snprintf(buf, cap, "%" PRIu64 " B", n);
        return buf;
    }
    double v = (double)n / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.*f %s", decimals, v, units[u]);
    return buf;
}

devalloc *devalloc_new(const devalloc_backend *be) {
    devalloc *a = st_calloc(1, sizeof *a);
    if (!a) return NULL;
    a->be = *be;
    snprintf(a->name, sizeof a->name, "%s", be->name ? be->name : "device");
    snprintf(a->label, sizeof a->label, "%s", be->label ? be->label : "device");
    a->be.name = a->name;
    a->be.label = a->label;
    return a;
}

static void raw_free(devalloc *a, devblock *b) {
    a->be.free(a->be.ud, b->ptr);
    a->raw_frees++;
    st_free(b);
}

void devalloc_empty_cache(devalloc *a) {
    devclass *c, *tmp;
    HASH_ITER(hh, a->classes, c, tmp) {
        while (c->free) {
            devblock *b = c->free;
            c->free = b->next;
            a->cached -= b->size;
            raw_free(a, b);
        }
        HASH_DEL(a->classes, c);
        st_free(c);
    }
}

void devalloc_destroy(devalloc *a) {
    if (!a) return;
    devalloc_empty_cache(a);
    devblock *b, *tmp;
    HASH_ITER(hh, a->live, b, tmp) {
        HASH_DEL(a->live, b);
        raw_free(a, b);
    }
    st_free(a);
}

/* A cached block of class cls, taken off its free list, or NULL. */
static devblock *take_cached(devalloc *a, size_t cls) {
    devclass *c;
    HASH_FIND(hh, a->classes, &cls, sizeof cls, c);
    if (!c || !c->free) return NULL;
    devblock *b = c->free;
    c->free = b->next;
    a->cached -= cls;
    return b;
}

static st_status oom_error(devalloc *a, size_t n) {
    char req[32], used[32], res[32], tot[32];
    devalloc_human(n, 2, req, sizeof req);
    devalloc_human(a->in_use, 1, used, sizeof used);
    devalloc_human(a->in_use + a->cached, 1, res, sizeof res);
    if (a->be.total)
        return st_error(ST_ERR_OOM, "%s out of memory on %s: tried to allocate %s; %s in use, %s reserved, %s total",
                        a->name, a->label, req, used, res, devalloc_human(a->be.total, 1, tot, sizeof tot));
    return st_error(ST_ERR_OOM, "%s out of memory on %s: tried to allocate %s; %s in use, %s reserved", a->name,
                    a->label, req, used, res);
}

static st_status raw_alloc(devalloc *a, size_t cls, devblock *b) {
    st_status s = a->be.alloc(a->be.ud, cls, &b->ptr);
    if (s == ST_OK) a->raw_allocs++;
    return s;
}

/* A new block of class cls from the backend, through the OOM ladder: the cache, then the host's
 * OOM handler (whose frees may land blocks of this very class in the cache). n is what the
 * caller asked for, for the message. */
static st_status fresh_block(devalloc *a, size_t n, size_t cls, devblock **out) {
    devblock *b = st_calloc(1, sizeof *b);
    if (!b) return ST_ERR_OOM;
    b->size = cls;
    st_status s = raw_alloc(a, cls, b);
    if (s == ST_ERR_OOM && a->cached) {
        devalloc_empty_cache(a);
        s = raw_alloc(a, cls, b);
    }
    if (s == ST_ERR_OOM && st_call_oom_handler(cls)) {
        devblock *c = take_cached(a, cls);
        if (c) {
            st_free(b);
            *out = c;
            return ST_OK;
        }
        devalloc_empty_cache(a);
        s = raw_alloc(a, cls, b);
    }
    if (s != ST_OK) {
        st_free(b);
        return s == ST_ERR_OOM ? oom_error(a, n) : s;
    }
    *out = b;
    return ST_OK;
}

st_status devalloc_alloc(devalloc *a, size_t n, uint64_t *out) {
    *out = 0;
    size_t cls = a->be.exact && n > 0 ? n : devalloc_class(n);
    /* A request larger than the device can never succeed: fail before emptying the cache or
     * running a GC for nothing. */
    if (!cls || (a->be.total && cls > a->be.total)) return oom_error(a, n);
    devblock *b = take_cached(a, cls);
    if (!b) {
        st_status s = fresh_block(a, n, cls, &b);
        if (s != ST_OK) return s;
    }
    base_hash_oom = 0;
    HASH_ADD(hh, a->live, ptr, sizeof b->ptr, b);
    if (base_hash_oom) {
        raw_free(a, b);
        return st_error(ST_ERR_OOM, "out of host memory while tracking a %s block on %s", a->name, a->label);
    }
    a->in_use += cls;
    if (a->in_use > a->peak) a->peak = a->in_use;
    *out = b->ptr;
    return ST_OK;
}

void devalloc_free(devalloc *a, uint64_t p) {
    if (!p) return;
    devblock *b;
    HASH_FIND(hh, a->live, &p, sizeof p, b);
    ST_ASSERT(b != NULL); /* a pointer this allocator did not hand out, or a double free */
    HASH_DEL(a->live, b);
    a->in_use -= b->size;
    devclass *c;
    HASH_FIND(hh, a->classes, &b->size, sizeof b->size, c);
    if (!c) {
        c = st_calloc(1, sizeof *c);
        if (c) {
            c->size = b->size;
            base_hash_oom = 0;
            HASH_ADD(hh, a->classes, size, sizeof c->size, c);
            if (base_hash_oom) {
                st_free(c);
                c = NULL;
            }
        }
        if (!c) { /* no host memory to cache it: give it back instead */
            raw_free(a, b);
            return;
        }
    }
    b->next = c->free;
    c->free = b;
    a->cached += b->size;
}

void devalloc_get_stats(const devalloc *a, devalloc_stats *s) {
    s->in_use = a->in_use;
    s->reserved = a->in_use + a->cached;
    s->peak = a->peak;
    s->raw_allocs = a->raw_allocs;
    s->raw_frees = a->raw_frees;
}

void devalloc_reset_peak(devalloc *a) { a->peak = a->in_use; }
