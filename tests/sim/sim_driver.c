/*
 * sim_driver.c — a simulated GPU behind the CUDA driver API: the stand-in libcuda.so.1 that
 * ST_CUDA_SIM loads (tests only; never part of the library).
 *
 * stitch drives it exactly as a real driver: context, one stream, pinned staging, events, the
 * caching allocator over cuMemAlloc, cuModuleLoadData of what the stand-in NVRTC (sim_nvrtc.c)
 * produced, cuLaunchKernel. The "cubin" is a host shared object (sim_rt.h); a launch runs the
 * grid on the calling thread at once, one block at a time, one fiber per CUDA thread
 * (sim_fiber.h), in the order ST_SIM_SCHED says (forward, reverse, random[:seed]; blocks and the
 * threads between two synchronization points alike).
 *
 * What a GPU would refuse or a sanitizer would report is a fault, printed with the kernel's name,
 * block and thread: an access outside every live device allocation (device memory is one
 * reserved address range; each allocation is exactly sized, followed by an unmapped page, and
 * never reused after its free), a read of shared memory not written in this block, a shared
 * memory race (two threads, at least one writing, in the same barrier interval: what
 * compute-sanitizer's racecheck reports), __syncthreads reached by part of a block or at
 * different barriers, a warp collective (shuffle, vote, __syncwarp, mma) reached by part of its
 * mask. A launch over a limit (block and grid dimensions, threads per block, __launch_bounds__,
 * shared memory per block) fails at cuLaunchKernel like the real call. A fault makes the context
 * unusable (every later call returns CUDA_ERROR_ILLEGAL_ADDRESS or _LAUNCH_FAILED, as a GPU's
 * sticky error does) and the process exits with status 1 at its end unless
 * ST_SIM_EXPECT_FAULTS=1 (tests that provoke faults on purpose).
 *
 * Settings: ST_SIM_SMS (multiprocessors, default 4), ST_SIM_CC (compute capability, default
 * 80), ST_SIM_SCHED, ST_SIM_METRICS=1 or ST_DEBUG >= 2 (per-launch memory metrics on stderr:
 * global sectors per request, shared wavefronts per request), ST_SIM_EXPECT_FAULTS.
 */
#define _GNU_SOURCE
#include "sim_fiber.h"
#include "sim_mma.h"
#include "sim_rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0,
    E_INVALID_VALUE = 1,
    E_OOM = 2,
    E_NOT_INITIALIZED = 3,
    E_INVALID_DEVICE = 101,
    E_INVALID_IMAGE = 200,
    E_INVALID_CONTEXT = 201,
    E_INVALID_HANDLE = 400,
    E_NOT_FOUND = 500,
    E_ILLEGAL_ADDRESS = 700,
    E_OUT_OF_RESOURCES = 701,
    E_LAUNCH_FAILED = 719,
};

#define SHARED_MAX (48u << 10)
#define STACK_BYTES ((size_t)256 << 10)
#define PAGE ((uintptr_t)4096)
#define ARENA_BYTES ((uintptr_t)1 << 40)
#define TOTAL_MEM ((size_t)16 << 30)

/* ---- state ---- */

static struct {
    int inited, sms, cc, sched, metrics, debug_metrics;
    uint64_t seed;
    CUresult sticky;          /* a fault's error, returned by every later call */
    int faults;
    size_t used;              /* bytes in live device allocations */
} S;

enum { SCHED_FORWARD, SCHED_REVERSE, SCHED_RANDOM };

static uint64_t rng_next(void) {
    S.seed ^= S.seed << 13;
    S.seed ^= S.seed >> 7;
    S.seed ^= S.seed << 17;
    return S.seed;
}

static int env_int(const char *name, int dflt, int lo, int hi) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        fprintf(stderr, "stitch-sim: %s=%s is not an integer in [%d, %d]\n", name, v, lo, hi);
        exit(2);
    }
    return (int)x;
}

static void at_exit_report(void) {
    const char *e = getenv("ST_SIM_EXPECT_FAULTS");   /* read now: a forked test child sets it late */
    if (S.faults && !(e && !strcmp(e, "1"))) {
        fprintf(stderr, "stitch-sim: %d kernel fault%s in this process (reported above); exit status 1\n", S.faults,
                S.faults == 1 ? "" : "s");
        fflush(NULL);
        _exit(1);
    }
}

/* ---- device memory: one reserved range, exact allocations, never reused ---- */

typedef struct alloc_rec {
    uintptr_t base;
    size_t size;
} alloc_rec;

static struct {
    uintptr_t lo, next;
    alloc_rec *v;             /* sorted by base (bases only grow) */
    size_t n, cap;
    size_t hint;
} A;

static int arena_init(void) {
    if (A.lo) return 1;
    void *p = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return 0;
    A.lo = A.next = (uintptr_t)p;
    return 1;
}

static int in_arena(uintptr_t p) { return p - A.lo < ARENA_BYTES; }

/* The number of live allocations whose base is <= p (the index after the one that may hold p). */
static size_t upper(uintptr_t p) {
    size_t lo = 0, hi = A.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (A.v[mid].base <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The live allocation holding [p, p + n), or NULL. */
static alloc_rec *find_alloc(uintptr_t p, size_t n) {
    if (A.hint < A.n && p >= A.v[A.hint].base && p + n <= A.v[A.hint].base + A.v[A.hint].size) return &A.v[A.hint];
    size_t lo = upper(p);
    if (lo == 0) return NULL;
    alloc_rec *r = &A.v[lo - 1];
    if (p + n > r->base + r->size) return NULL;
    A.hint = lo - 1;
    return r;
}

/* Words for an address outside every allocation: where it is relative to the nearest one. */
static void describe_address(uintptr_t p, char *out, size_t cap) {
    size_t lo = upper(p);
    if (lo > 0 && p >= A.v[lo - 1].base)
        snprintf(out, cap, "%zu bytes past the end of a %zu-byte allocation at 0x%llx",
                 (size_t)(p - A.v[lo - 1].base - A.v[lo - 1].size), A.v[lo - 1].size,
                 (unsigned long long)A.v[lo - 1].base);
    else if (lo < A.n)
        snprintf(out, cap, "%zu bytes before a %zu-byte allocation at 0x%llx", (size_t)(A.v[lo].base - p), A.v[lo].size,
                 (unsigned long long)A.v[lo].base);
    else
        snprintf(out, cap, "in no allocation (freed, or never allocated)");
}

static CUresult dev_alloc(size_t n, uintptr_t *out) {
    if (!arena_init()) return E_OOM;
    if (n == 0) return E_INVALID_VALUE;
    if (S.used + n > TOTAL_MEM) return E_OOM;
    size_t span = (n + PAGE - 1) & ~(PAGE - 1);
    if (A.next + span + PAGE > A.lo + ARENA_BYTES) return E_OOM;
    uintptr_t base = A.next;
    if (mprotect((void *)base, span, PROT_READ | PROT_WRITE) != 0) return E_OOM;
    A.next += span + PAGE;   /* an unmapped page after every allocation */
    if (A.n == A.cap) {
        size_t cap = A.cap ? 2 * A.cap : 256;
        alloc_rec *v = realloc(A.v, cap * sizeof *v);
        if (!v) return E_OOM;
        A.v = v;
        A.cap = cap;
    }
    A.v[A.n++] = (alloc_rec){base, n};
    memset((void *)base, 0xa5, span);   /* cuMemAlloc's memory is not zeroed */
    S.used += n;
    *out = base;
    return OK;
}

static CUresult dev_free(uintptr_t p) {
    alloc_rec *r = find_alloc(p, 1);
    if (!r || r->base != p) return E_INVALID_VALUE;
    size_t span = (r->size + PAGE - 1) & ~(PAGE - 1);
    mmap((void *)p, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    S.used -= r->size;
    size_t i = (size_t)(r - A.v);
    memmove(&A.v[i], &A.v[i + 1], (A.n - i - 1) * sizeof *A.v);
    A.n--;
    A.hint = 0;
    return OK;
}

/* A device range for a copy: inside one live allocation. */
static int dev_range_ok(uintptr_t p, size_t n) { return n == 0 || find_alloc(p, n) != NULL; }

/* ---- modules ---- */

#define FN_MAGIC 0x5354464eu

typedef struct sim_module sim_module;
typedef struct sim_fn {
    unsigned magic;
    const sim_kernel *k;
    sim_module *mod;
    struct sim_fn *next;
} sim_fn;

struct sim_module {
    void *dl;
    int fd;                   /* the memfd it was loaded from (its /proc/self/fd name is unique while open) */
    sim_module_info *info;
    sim_fn *fns;
    int loaded;
};

static sim_rt RT;
static sim_fn *dead_fns;   /* functions of unloaded modules: kept (magic cleared) so a stale handle is caught */

/* ---- the launch being run ---- */

enum { T_RUN, T_BAR, T_COLL, T_DONE };

typedef struct site_count {
    const void *site;
    uint32_t n;
} site_count;

typedef struct fiber {
    void *sp;
    char *stack;
    sim_thread th;
    int state;
    const void *bar_site;
    unsigned coll_gen;
    site_count *sites;        /* metrics: dynamic count per access site */
    int nsites, capsites;
} fiber;

typedef struct warp_state {
    unsigned exists, arrived, mask, gen, syncs;
    int kind;
    uint32_t buf[2][32][SIM_COLL_MAX_WORDS];
} warp_state;

/* Shadow of one shared-memory byte: last writer, readers since, with their sync clocks. */
typedef struct shadow {
    int32_t wtid, rtid;       /* -1: none; rtid -2: several threads */
    uint32_t wbar, wsync;     /* block barrier count and the writer's warp __syncwarp count */
    uint32_t rbar, rsync;     /* the same for the latest read (rsync: the largest) */
    int32_t rwarp;            /* the readers' warp, -1 when several */
} shadow;

/* Metrics: one request = one (warp, site, dynamic count); its addresses across the lanes. */
typedef struct request {
    uint32_t warp, k;
    const void *site;
    int shared, bytes, n;
    uintptr_t addr[64];
} request;

static struct {
    const sim_fn *fn;
    void **params;
    sim_dim3 grid, block;
    int nthreads, nwarps;
    fiber *f;                 /* nthreads */
    fiber *cur;
    warp_state *w;            /* nwarps */
    void *sched_sp;
    int failed;
    char msg[1024];
    uint32_t bar;             /* block barriers passed */
    char *shm_lo;
    size_t shm_size;
    shadow *sh;               /* shm_size entries */
    /* metrics */
    request *req;
    size_t nreq, capreq;
    int req_overflow;
    uint64_t g_req, g_sect, g_ideal, s_req, s_wave;   /* g_ideal: distinct bytes requested */
} L;

static char *stack_pool;
static int stack_pool_n;

/* ---- faults ---- */

static void launch_fault(CUresult code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the first fault of the launch (with where it happened) and stops the launch. Called
 * on a fiber: switches back to the scheduler for good. */
static void launch_fault(CUresult code, const char *fmt, ...) {
    if (!L.failed) {
        char what[700];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        if (L.cur)
            snprintf(L.msg, sizeof L.msg, "%s in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", what, L.fn->k->name,
                     RT.block_idx.x, RT.block_idx.y, RT.block_idx.z, L.cur->th.tid.x, L.cur->th.tid.y,
                     L.cur->th.tid.z);
        else
            snprintf(L.msg, sizeof L.msg, "%s in kernel %s, block (%u,%u,%u)", what, L.fn->k->name, RT.block_idx.x,
                     RT.block_idx.y, RT.block_idx.z);
        L.failed = 1;
        S.sticky = code;
        S.faults++;
        fprintf(stderr, "stitch-sim: fault: %s\n", L.msg);
    }
    if (L.cur) {
        fiber *f = L.cur;
        L.cur = NULL;
        sim_fiber_switch(&f->sp, L.sched_sp);
        abort();   /* never resumed */
    }
}

static void rt_fault(const char *what) { launch_fault(E_LAUNCH_FAILED, "%s", what); }

/* ---- memory accesses ---- */

static int thread_warp(int32_t tid) { return tid / 32; }

static uint32_t next_count(fiber *f, const void *site) {
    for (int i = 0; i < f->nsites; i++)
        if (f->sites[i].site == site) return f->sites[i].n++;
    if (f->nsites == f->capsites) {
        int cap = f->capsites ? 2 * f->capsites : 16;
        site_count *v = realloc(f->sites, (size_t)cap * sizeof *v);
        if (!v) return 0;
        f->sites = v;
        f->capsites = cap;
    }
    f->sites[f->nsites++] = (site_count){site, 1};
    return 0;
}

/* Metrics: adds this lane's address to its request (linear search from the end: the lanes of a
 * warp issue their requests in the same order, so the match is near). */
static void record(const void *site, uintptr_t p, size_t n, int shared) {
    fiber *f = L.cur;
    uint32_t k = next_count(f, site), warp = (uint32_t)f->th.warp;
    request *r = NULL;
    for (size_t i = L.nreq; i-- > 0;) {
        request *q = &L.req[i];
        if (q->warp == warp && q->k == k && q->site == site) {
            r = q;
            break;
        }
        if (L.nreq - i > 4096) break;
    }
    if (!r) {
        if (L.nreq == L.capreq) {
            if (L.capreq >= ((size_t)1 << 16)) {
                L.req_overflow = 1;
                return;
            }
            size_t cap = L.capreq ? 2 * L.capreq : 1024;
            request *v = realloc(L.req, cap * sizeof *v);
            if (!v) return;
            L.req = v;
            L.capreq = cap;
        }
        r = &L.req[L.nreq++];
        *r = (request){.warp = warp, .k = k, .site = site, .shared = shared, .bytes = (int)n, .n = 0};
    }
    if (r->n < 64) r->addr[r->n++] = p;
}

static int cmp_uptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Folds the block's requests into the launch's totals. */
static void flush_requests(void) {
    for (size_t i = 0; i < L.nreq; i++) {
        request *r = &L.req[i];
        uintptr_t u[128];
        int m = 0;
        if (!r->shared) {
            /* sectors touched, and the distinct bytes the lanes asked for (broadcasts count once) */
            uintptr_t lo[64];
            for (int j = 0; j < r->n; j++) {
                lo[j] = r->addr[j];
                u[m++] = r->addr[j] / 32;
                u[m++] = (r->addr[j] + (uintptr_t)r->bytes - 1) / 32;
            }
            qsort(u, (size_t)m, sizeof u[0], cmp_uptr);
            qsort(lo, (size_t)r->n, sizeof lo[0], cmp_uptr);
            int d = 0;
            for (int j = 0; j < m; j++)
                if (j == 0 || u[j] != u[j - 1]) d++;
            uint64_t bytes = 0;
            uintptr_t end = 0;
            for (int j = 0; j < r->n; j++) {
                uintptr_t a = lo[j] > end ? lo[j] : end, e = lo[j] + (uintptr_t)r->bytes;
                if (e > a) bytes += e - a;
                if (e > end) end = e;
            }
            L.g_req++;
            L.g_sect += (uint64_t)d;
            L.g_ideal += bytes;
        } else {
            /* a wavefront serves one word per bank; the same word to many lanes is a broadcast */
            for (int j = 0; j < r->n; j++)
                for (uintptr_t w = r->addr[j] / 4; w <= (r->addr[j] + (uintptr_t)r->bytes - 1) / 4; w++)
                    if (m < 128) u[m++] = w;
            qsort(u, (size_t)m, sizeof u[0], cmp_uptr);
            int per_bank[32] = {0}, waves = 1;
            for (int j = 0; j < m; j++)
                if (j == 0 || u[j] != u[j - 1]) {
                    int b = (int)(u[j] % 32);
                    if (++per_bank[b] > waves) waves = per_bank[b];
                }
            L.s_req++;
            L.s_wave += (uint64_t)waves;
        }
    }
    L.nreq = 0;
}

static void shared_access(uintptr_t p, size_t n, int write) {
    size_t off = p - (uintptr_t)L.shm_lo;
    if (off + n > L.shm_size) launch_fault(E_ILLEGAL_ADDRESS, "a %zu-byte shared access crosses the end of shared memory", n);
    fiber *f = L.cur;
    int32_t t = f->th.linear, warp = f->th.warp;
    uint32_t ws = L.w[warp].syncs;
    for (size_t i = 0; i < n; i++) {
        shadow *s = &L.sh[off + i];
        /* ordered with an access of thread u at (bar, sync): a barrier since, or the same warp and
         * a __syncwarp since */
#define ORDERED(u, b_, s_) ((b_) != L.bar || (thread_warp(u) == warp && (s_) != ws))
        if (!write) {
            if (s->wtid < 0)
                launch_fault(E_LAUNCH_FAILED, "a read of shared memory not written in this block (byte %zu of %zu)",
                             off + i, L.shm_size);
            if (s->wtid != t && !ORDERED(s->wtid, s->wbar, s->wsync))
                launch_fault(E_LAUNCH_FAILED,
                             "a shared-memory race: byte %zu written by thread %d and read by thread %d with no "
                             "barrier between", off + i, s->wtid, t);
            if (s->rtid == -1 || s->rbar != L.bar) {
                s->rtid = t;
                s->rwarp = warp;
                s->rsync = ws;
            } else {
                if (s->rtid != t) s->rtid = -2;
                if (s->rwarp != warp) s->rwarp = -1;
                if (ws > s->rsync) s->rsync = ws;
            }
            s->rbar = L.bar;
        } else {
            if (s->wtid >= 0 && s->wtid != t && !ORDERED(s->wtid, s->wbar, s->wsync))
                launch_fault(E_LAUNCH_FAILED,
                             "a shared-memory race: byte %zu written by threads %d and %d with no barrier between",
                             off + i, s->wtid, t);
            if (s->rtid != -1 && s->rtid != t && s->rbar == L.bar && !(s->rwarp == warp && s->rsync != ws))
                launch_fault(E_LAUNCH_FAILED,
                             "a shared-memory race: byte %zu read by thread%s %d and written by thread %d with no "
                             "barrier between", off + i, s->rtid == -2 ? "s incl." : "",
                             s->rtid == -2 ? thread_warp(t) == s->rwarp ? t ^ 1 : -1 : s->rtid, t);
            s->wtid = t;
            s->wbar = L.bar;
            s->wsync = ws;
            s->rtid = -1;
        }
#undef ORDERED
    }
}

static void rt_access(const void *a, size_t n, int write, const void *site) {
    uintptr_t p = (uintptr_t)a;
    if (!L.cur) return;
    if (p - (uintptr_t)L.shm_lo < L.shm_size) {
        shared_access(p, n, write);
        if (S.metrics) record(site, p, n, 1);
        return;
    }
    if (!in_arena(p)) return;   /* the thread's stack, the module's constants */
    if (!find_alloc(p, n)) {
        char where[200];
        describe_address(p, where, sizeof where);
        launch_fault(E_ILLEGAL_ADDRESS, "an out-of-bounds global %s of %zu bytes at 0x%llx (%s)", write ? "write" : "read",
                     n, (unsigned long long)p, where);
    }
    if (S.metrics) record(site, p, n, 0);
}

/* ---- synchronization ---- */

static void yield_to_scheduler(void) {
    fiber *f = L.cur;
    L.cur = NULL;
    sim_fiber_switch(&f->sp, L.sched_sp);
}

static void rt_syncthreads(const void *site) {
    fiber *f = L.cur;
    f->state = T_BAR;
    f->bar_site = site;
    yield_to_scheduler();
}

static const char *coll_name(int kind) {
    switch (kind & 15) {
    case SIM_COLL_SYNCWARP: return "__syncwarp";
    case SIM_COLL_SHFL: return "a shuffle";
    case SIM_COLL_VOTE: return "a vote";
    default: return "an mma";
    }
}

static const uint32_t *rt_collective(int kind, unsigned mask, const uint32_t *words, int n) {
    fiber *f = L.cur;
    warp_state *w = &L.w[f->th.warp];
    unsigned me = 1u << f->th.lane;
    if (!(mask & me)) launch_fault(E_LAUNCH_FAILED, "%s whose mask 0x%08x leaves out its own lane %d", coll_name(kind), mask, f->th.lane);
    if (mask & ~w->exists)
        launch_fault(E_LAUNCH_FAILED, "%s with mask 0x%08x names lanes that do not exist (the warp has 0x%08x)",
                     coll_name(kind), mask, w->exists);
    if (w->arrived == 0) {
        w->kind = kind;
        w->mask = mask;
    } else if (w->kind != kind || w->mask != mask) {
        launch_fault(E_LAUNCH_FAILED, "divergent warp collectives: lane %d reaches %s (mask 0x%08x) while lanes 0x%08x wait in %s (mask 0x%08x)",
                     f->th.lane, coll_name(kind), mask, w->arrived, coll_name(w->kind), w->mask);
    }
    unsigned g = w->gen;
    if (n > 0) memcpy(w->buf[g & 1][f->th.lane], words, (size_t)n * sizeof *words);
    w->arrived |= me;
    if (w->arrived == w->mask) {
        w->gen++;
        w->arrived = 0;
        if ((kind & 15) == SIM_COLL_SYNCWARP) w->syncs++;
        int base = f->th.warp * 32;
        for (int l = 0; l < 32; l++)
            if (((mask >> l) & 1u) && L.f[base + l].state == T_COLL) L.f[base + l].state = T_RUN;
    } else {
        f->state = T_COLL;
        f->coll_gen = g;
        yield_to_scheduler();
    }
    return &w->buf[g & 1][0][0];
}

static void rt_mma(int kind, const uint32_t *all, int lane, float d[4]) {
    uint32_t a[32][4], b[32][2];
    float c[32][4], out[32][4];
    for (int l = 0; l < 32; l++) {
        const uint32_t *w = all + l * SIM_COLL_MAX_WORDS;
        memcpy(a[l], w, 16);
        memcpy(b[l], w + 4, 8);
        memcpy(c[l], w + 6, 16);
    }
    sim_mma((sim_mma_kind)kind, (const uint32_t(*)[4])a, (const uint32_t(*)[2])b, (const float(*)[4])c, out);
    memcpy(d, out[lane], 16);
}

/* ---- running a block ---- */

static void fiber_main(void) {
    L.fn->k->run(L.params);
    fiber *f = L.cur;
    f->state = T_DONE;
    L.cur = NULL;
    void *dead;
    sim_fiber_switch(&dead, L.sched_sp);
    abort();
}

static int ensure_stacks(int n) {
    if (n <= stack_pool_n) return 1;
    size_t one = STACK_BYTES + PAGE;
    void *p = mmap(NULL, one * (size_t)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return 0;
    for (int i = 0; i < n; i++) mprotect((char *)p + one * (size_t)i, PAGE, PROT_NONE);   /* guard below each */
    if (stack_pool) munmap(stack_pool, (STACK_BYTES + PAGE) * (size_t)stack_pool_n);
    stack_pool = p;
    stack_pool_n = n;
    return 1;
}

static void order_of(int *ord, int n) {
    for (int i = 0; i < n; i++) ord[i] = S.sched == SCHED_REVERSE ? n - 1 - i : i;
    if (S.sched == SCHED_RANDOM)
        for (int i = n - 1; i > 0; i--) {
            int j = (int)(rng_next() % (uint64_t)(i + 1)), t = ord[i];
            ord[i] = ord[j];
            ord[j] = t;
        }
}

/* No thread can run: release a barrier all have reached, or report who is stuck where. */
static int resolve_block(void) {
    int at_bar = 0, done = 0;
    const void *site = NULL;
    for (int i = 0; i < L.nthreads; i++) {
        fiber *f = &L.f[i];
        if (f->state == T_COLL) {
            warp_state *w = &L.w[f->th.warp];
            unsigned missing = w->mask & ~w->arrived;
            int l = __builtin_ctz(missing), base = f->th.warp * 32;
            const char *where = L.f[base + l].state == T_DONE ? "has exited" : "waits at __syncthreads";
            launch_fault(E_LAUNCH_FAILED, "%s reached by part of warp %d: lanes 0x%08x arrived, lane %d %s",
                         coll_name(w->kind), f->th.warp, w->arrived, l, where);
            return 0;
        }
        if (f->state == T_DONE) done++;
        if (f->state == T_BAR) {
            if (at_bar++ == 0) site = f->bar_site;
            else if (f->bar_site != site) {
                launch_fault(E_LAUNCH_FAILED, "threads wait at different __syncthreads (barrier sites %p and %p)", site,
                             f->bar_site);
                return 0;
            }
        }
    }
    if (at_bar == 0) return 1;   /* every thread finished */
    if (done) {
        launch_fault(E_LAUNCH_FAILED, "__syncthreads reached by part of the block: %d threads wait at it, %d have exited",
                     at_bar, done);
        return 0;
    }
    L.bar++;
    for (int i = 0; i < L.nthreads; i++) L.f[i].state = T_RUN;
    return -1;
}

static int run_block(int *ord) {
    memset(L.shm_lo, 0xff, L.shm_size);   /* poison: NaN as float, -1 as integer */
    for (size_t i = 0; i < L.shm_size; i++) L.sh[i] = (shadow){-1, -1, 0, 0, 0, 0, -1};
    L.bar = 0;
    for (int w = 0; w < L.nwarps; w++) {
        int lanes = L.nthreads - 32 * w < 32 ? L.nthreads - 32 * w : 32;
        memset(&L.w[w], 0, offsetof(warp_state, buf));
        L.w[w].exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    }
    for (int i = 0; i < L.nthreads; i++) {
        fiber *f = &L.f[i];
        f->stack = stack_pool + (STACK_BYTES + PAGE) * (size_t)i + PAGE;
        f->sp = sim_fiber_make(f->stack, STACK_BYTES, fiber_main);
        f->state = T_RUN;
        f->nsites = 0;
    }
    for (;;) {
        order_of(ord, L.nthreads);
        int ran = 0;
        for (int j = 0; j < L.nthreads && !L.failed; j++) {
            fiber *f = &L.f[ord[j]];
            if (f->state != T_RUN) continue;
            ran = 1;
            L.cur = f;
            RT.cur = &f->th;
            sim_fiber_switch(&L.sched_sp, f->sp);
        }
        if (L.failed) return 0;
        if (ran) continue;
        int r = resolve_block();
        if (r == 0) return 0;
        if (r == 1) break;
    }
    if (S.metrics) flush_requests();
    return 1;
}

static CUresult run_grid(void) {
    uint64_t nblocks = (uint64_t)L.grid.x * L.grid.y * L.grid.z;
    int *ord = malloc((size_t)L.nthreads * sizeof *ord);
    L.f = calloc((size_t)L.nthreads, sizeof *L.f);
    L.w = calloc((size_t)L.nwarps, sizeof *L.w);
    L.sh = malloc((L.shm_size ? L.shm_size : 1) * sizeof *L.sh);
    if (!ord || !L.f || !L.w || !L.sh || !ensure_stacks(L.nthreads)) {
        free(ord);
        free(L.f);
        free(L.w);
        free(L.sh);
        return E_OOM;
    }
    for (int i = 0; i < L.nthreads; i++) {
        fiber *f = &L.f[i];
        f->th.linear = i;
        f->th.lane = i % 32;
        f->th.warp = i / 32;
        f->th.tid = (sim_dim3){(unsigned)i % L.block.x, (unsigned)i / L.block.x % L.block.y,
                               (unsigned)i / (L.block.x * L.block.y)};
    }
    L.g_req = L.g_sect = L.g_ideal = L.s_req = L.s_wave = 0;
    L.nreq = 0;
    L.req_overflow = 0;
    CUresult rc = OK;
    uint64_t *border = NULL;
    if (S.sched == SCHED_RANDOM && nblocks <= ((uint64_t)1 << 24)) {
        border = malloc(nblocks * sizeof *border);
        if (border) {
            for (uint64_t i = 0; i < nblocks; i++) border[i] = i;
            for (uint64_t i = nblocks - 1; i > 0; i--) {
                uint64_t j = rng_next() % (i + 1), t = border[i];
                border[i] = border[j];
                border[j] = t;
            }
        }
    }
    for (uint64_t i = 0; i < nblocks && rc == OK; i++) {
        uint64_t b = border ? border[i] : S.sched == SCHED_REVERSE ? nblocks - 1 - i : i;
        RT.block_idx = (sim_dim3){(unsigned)(b % L.grid.x), (unsigned)(b / L.grid.x % L.grid.y),
                                  (unsigned)(b / ((uint64_t)L.grid.x * L.grid.y))};
        if (!run_block(ord)) rc = S.sticky;
    }
    if (S.metrics && rc == OK) {
        fprintf(stderr,
                "stitch-sim: %s grid %ux%ux%u block %ux%ux%u: global %llu requests, %.2f sectors/request (%.0f%% "
                "of the fetched bytes used), shared %llu requests, %.2f wavefronts/request%s\n",
                L.fn->k->name, L.grid.x, L.grid.y, L.grid.z, L.block.x, L.block.y, L.block.z,
                (unsigned long long)L.g_req, L.g_req ? (double)L.g_sect / (double)L.g_req : 0.0,
                L.g_sect ? 100.0 * (double)L.g_ideal / (32.0 * (double)L.g_sect) : 100.0, (unsigned long long)L.s_req,
                L.s_req ? (double)L.s_wave / (double)L.s_req : 0.0, L.req_overflow ? " (sampled)" : "");
    }
    free(border);
    free(ord);
    for (int i = 0; i < L.nthreads; i++) free(L.f[i].sites);
    free(L.f);
    free(L.w);
    free(L.sh);
    L.f = NULL;
    L.w = NULL;
    L.sh = NULL;
    L.cur = NULL;
    RT.cur = NULL;
    return rc;
}

/* ---- the driver API ---- */

#define CHECK_INIT()                                                                            \
    do {                                                                                        \
        if (!S.inited) return E_NOT_INITIALIZED;                                                \
        if (S.sticky) return S.sticky;                                                          \
    } while (0)

static int ctx_token, stream_token;

EXPORT CUresult cuInit(unsigned flags) {
    if (flags) return E_INVALID_VALUE;
    if (S.inited) return OK;
    S.sms = env_int("ST_SIM_SMS", 4, 1, 1024);
    S.cc = env_int("ST_SIM_CC", 80, 50, 120);
    S.debug_metrics = env_int("ST_DEBUG", 0, -1000000, 1000000) >= 2;
    env_int("ST_SIM_METRICS", 0, 0, 1);        /* checked here, read at each launch */
    env_int("ST_SIM_EXPECT_FAULTS", 0, 0, 1);  /* checked here, read at exit */
    const char *sched = getenv("ST_SIM_SCHED");
    S.seed = 0x2545f4914f6cdd1dull;
    if (!sched || !*sched || !strcmp(sched, "forward")) S.sched = SCHED_FORWARD;
    else if (!strcmp(sched, "reverse")) S.sched = SCHED_REVERSE;
    else if (!strncmp(sched, "random", 6) && (sched[6] == 0 || sched[6] == ':')) {
        S.sched = SCHED_RANDOM;
        if (sched[6] == ':') S.seed ^= strtoull(sched + 7, NULL, 10) * 0x9e3779b97f4a7c15ull;
        if (!S.seed) S.seed = 1;
    } else {
        fprintf(stderr, "stitch-sim: ST_SIM_SCHED=%s: expected forward, reverse, random or random:<seed>\n", sched);
        exit(2);
    }
    RT = (sim_rt){.access = rt_access, .syncthreads = rt_syncthreads, .collective = rt_collective,
                  .fault = rt_fault, .mma = rt_mma, .cvt_tf32 = sim_cvt_rna_tf32};
    atexit(at_exit_report);
    S.inited = 1;
    return OK;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    if (!v) return E_INVALID_VALUE;
    *v = 12080;
    return OK;
}
EXPORT CUresult cuDeviceGetCount(int *n) {
    if (!S.inited) return E_NOT_INITIALIZED;
    if (!n) return E_INVALID_VALUE;
    *n = 1;
    return OK;
}
EXPORT CUresult cuDeviceGet(int *d, int ordinal) {
    CHECK_INIT();
    if (!d) return E_INVALID_VALUE;
    if (ordinal != 0) return E_INVALID_DEVICE;
    *d = 0;
    return OK;
}
EXPORT CUresult cuDeviceGetName(char *name, int len, int dev) {
    CHECK_INIT();
    if (!name || len <= 0) return E_INVALID_VALUE;
    if (dev != 0) return E_INVALID_DEVICE;
    snprintf(name, (size_t)len, "stitch simulated GPU (sm_%d, %d SMs)", S.cc, S.sms);
    return OK;
}
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    CHECK_INIT();
    if (!v) return E_INVALID_VALUE;
    if (dev != 0) return E_INVALID_DEVICE;
    switch (attr) {
    case 1: *v = 1024; return OK;                 /* max threads per block */
    case 2: case 3: *v = 1024; return OK;         /* max block x, y */
    case 4: *v = 64; return OK;                   /* max block z */
    case 5: *v = 2147483647; return OK;           /* max grid x */
    case 6: case 7: *v = 65535; return OK;        /* max grid y, z */
    case 8: *v = (int)SHARED_MAX; return OK;      /* shared memory per block */
    case 10: *v = 32; return OK;                  /* warp size */
    case 16: *v = S.sms; return OK;               /* multiprocessors */
    case 75: *v = S.cc / 10; return OK;
    case 76: *v = S.cc % 10; return OK;
    default: *v = 0; return OK;
    }
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
    CHECK_INIT();
    if (!bytes) return E_INVALID_VALUE;
    if (dev != 0) return E_INVALID_DEVICE;
    *bytes = TOTAL_MEM;
    return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    CHECK_INIT();
    if (!ctx) return E_INVALID_VALUE;
    if (dev != 0) return E_INVALID_DEVICE;
    *ctx = &ctx_token;
    return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return dev == 0 ? OK : E_INVALID_DEVICE; }
EXPORT CUresult cuCtxSetCurrent(void *ctx) {
    CHECK_INIT();
    return !ctx || ctx == &ctx_token ? OK : E_INVALID_CONTEXT;
}
EXPORT CUresult cuCtxGetCurrent(void **ctx) {
    CHECK_INIT();
    if (!ctx) return E_INVALID_VALUE;
    *ctx = &ctx_token;
    return OK;
}
EXPORT CUresult cuCtxSynchronize(void) {
    CHECK_INIT();
    return OK;
}
EXPORT CUresult cuStreamCreate(void **s, unsigned flags) {
    CHECK_INIT();
    (void)flags;
    if (!s) return E_INVALID_VALUE;
    *s = &stream_token;
    return OK;
}
EXPORT CUresult cuStreamDestroy_v2(void *s) { return s == &stream_token ? OK : E_INVALID_HANDLE; }
EXPORT CUresult cuStreamSynchronize(void *s) {
    CHECK_INIT();
    return s && s != &stream_token ? E_INVALID_HANDLE : OK;
}
EXPORT CUresult cuStreamQuery(void *s) { return cuStreamSynchronize(s); }

typedef struct sim_event {
    unsigned magic;
} sim_event;
#define EV_MAGIC 0x53544556u

EXPORT CUresult cuEventCreate(void **e, unsigned flags) {
    CHECK_INIT();
    (void)flags;
    if (!e) return E_INVALID_VALUE;
    sim_event *ev = malloc(sizeof *ev);
    if (!ev) return E_OOM;
    ev->magic = EV_MAGIC;
    *e = ev;
    return OK;
}
static int event_ok(void *e) { return e && ((sim_event *)e)->magic == EV_MAGIC; }
EXPORT CUresult cuEventRecord(void *e, void *s) {
    CHECK_INIT();
    if (!event_ok(e) || (s && s != &stream_token)) return E_INVALID_HANDLE;
    return OK;
}
EXPORT CUresult cuEventSynchronize(void *e) {
    CHECK_INIT();
    return event_ok(e) ? OK : E_INVALID_HANDLE;
}
EXPORT CUresult cuEventQuery(void *e) { return cuEventSynchronize(e); }
EXPORT CUresult cuEventDestroy_v2(void *e) {
    if (!event_ok(e)) return E_INVALID_HANDLE;
    ((sim_event *)e)->magic = 0;
    free(e);
    return OK;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    CHECK_INIT();
    if (!p) return E_INVALID_VALUE;
    uintptr_t u = 0;
    CUresult r = dev_alloc(n, &u);
    *p = r == OK ? (CUdeviceptr)u : 0;
    return r;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    if (!S.inited) return E_NOT_INITIALIZED;
    if (!p) return OK;
    CUresult r = dev_free((uintptr_t)p);
    return r != OK ? r : S.sticky;
}
EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    CHECK_INIT();
    if (!free_bytes || !total) return E_INVALID_VALUE;
    *total = TOTAL_MEM;
    *free_bytes = TOTAL_MEM - S.used;
    return OK;
}
EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    CHECK_INIT();
    (void)flags;
    if (!p) return E_INVALID_VALUE;
    *p = malloc(n ? n : 1);
    return *p ? OK : E_OOM;
}
EXPORT CUresult cuMemFreeHost(void *p) {
    free(p);
    return OK;
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) {
    CHECK_INIT();
    if (s && s != &stream_token) return E_INVALID_HANDLE;
    if (!dev_range_ok((uintptr_t)dst, n) || (n && !src)) return E_INVALID_VALUE;
    if (n) memcpy((void *)(uintptr_t)dst, src, n);
    return OK;
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) {
    CHECK_INIT();
    if (s && s != &stream_token) return E_INVALID_HANDLE;
    if (!dev_range_ok((uintptr_t)src, n) || (n && !dst)) return E_INVALID_VALUE;
    if (n) memcpy(dst, (const void *)(uintptr_t)src, n);
    return OK;
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) {
    CHECK_INIT();
    if (s && s != &stream_token) return E_INVALID_HANDLE;
    if (!dev_range_ok((uintptr_t)dst, n) || !dev_range_ok((uintptr_t)src, n)) return E_INVALID_VALUE;
    if (n) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return OK;
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *s) {
    CHECK_INIT();
    if (s && s != &stream_token) return E_INVALID_HANDLE;
    if (!dev_range_ok((uintptr_t)dst, n)) return E_INVALID_VALUE;
    if (n) memset((void *)(uintptr_t)dst, v, n);
    return OK;
}
EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, void *s) {
    CHECK_INIT();
    if (s && s != &stream_token) return E_INVALID_HANDLE;
    if ((dst & 3) || !dev_range_ok((uintptr_t)dst, n * 4)) return E_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) memcpy((char *)(uintptr_t)dst + 4 * i, &v, 4);
    return OK;
}

EXPORT CUresult cuModuleLoadData(void **mod, const void *image) {
    CHECK_INIT();
    if (!mod || !image) return E_INVALID_VALUE;
    if (memcmp(image, SIM_MAGIC, 8) != 0) return E_INVALID_IMAGE;
    uint64_t n;
    memcpy(&n, (const char *)image + 8, 8);
    /* from memory: a file system round trip per module would cost more than the kernels */
    int fd = memfd_create("stsim_module", MFD_CLOEXEC);
    if (fd < 0) return E_OOM;
    const char *p = (const char *)image + 16;
    size_t left = (size_t)n;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w <= 0) {
            close(fd);
            return E_OOM;
        }
        p += w;
        left -= (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);   /* fd stays open while loaded: a unique name */
    if (!dl) {
        close(fd);
        fprintf(stderr, "stitch-sim: cuModuleLoadData: %s\n", dlerror());
        return E_INVALID_IMAGE;
    }
    sim_module_info *info = dlsym(dl, "st_sim_module");
    if (!info || info->abi != SIM_ABI) {
        dlclose(dl);
        close(fd);
        return E_INVALID_IMAGE;
    }
    size_t shm = (size_t)(info->shared_hi - info->shared_lo);
    if (shm > SHARED_MAX) {
        fprintf(stderr, "stitch-sim: cuModuleLoadData: %zu bytes of static shared memory (the limit is %u)\n", shm,
                SHARED_MAX);
        dlclose(dl);
        close(fd);
        return E_OUT_OF_RESOURCES;
    }
    *info->rt = &RT;
    sim_module *m = calloc(1, sizeof *m);
    if (!m) {
        dlclose(dl);
        close(fd);
        return E_OOM;
    }
    m->dl = dl;
    m->fd = fd;
    m->info = info;
    m->loaded = 1;
    *mod = m;
    return OK;
}

EXPORT CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
    CHECK_INIT();
    sim_module *m = mod;
    if (!fn || !m || !name) return E_INVALID_VALUE;
    if (!m->loaded) return E_INVALID_HANDLE;
    char sym[300];
    snprintf(sym, sizeof sym, "st_sim_k_%s", name);
    const sim_kernel *k = dlsym(m->dl, sym);
    if (!k) return E_NOT_FOUND;
    sim_fn *f = calloc(1, sizeof *f);
    if (!f) return E_OOM;
    *f = (sim_fn){FN_MAGIC, k, m, m->fns};
    m->fns = f;
    *fn = f;
    return OK;
}

EXPORT CUresult cuModuleUnload(void *mod) {
    sim_module *m = mod;
    if (!m || !m->loaded) return E_INVALID_HANDLE;
    for (sim_fn *f = m->fns, *next; f; f = next) {
        next = f->next;
        f->magic = 0;
        f->next = dead_fns;
        dead_fns = f;
    }
    m->fns = NULL;
    m->loaded = 0;
    dlclose(m->dl);
    /* The name /proc/self/fd/N is unique only while fd N is open, and dlopen finds a loaded object
     * by its name: an object dlclose left resident (NODELETE: a STB_GNU_UNIQUE symbol; the stand-in
     * NVRTC compiles with -fno-gnu-unique) would answer the next module loaded from a memfd that
     * reuses N, and run the old kernels under the new names. Such an object keeps its fd. */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", m->fd);
    void *resident = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (resident) dlclose(resident);
    else close(m->fd);
    free(m);
    return S.sticky;
}

/* AddressSanitizer's check of a host range, when the process has it (a sanitized test run). */
static int host_range_poisoned(const void *p, size_t n) {
    static void *(*f)(const void *, size_t);
    static int looked;
    if (!looked) {
        void *s = dlsym(RTLD_DEFAULT, "__asan_region_is_poisoned");
        memcpy(&f, &s, sizeof f);
        looked = 1;
    }
    return f && f(p, n) != NULL;
}

static CUresult launch_error(CUresult code, const sim_kernel *k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static CUresult launch_error(CUresult code, const sim_kernel *k, const char *fmt, ...) {
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fprintf(stderr, "stitch-sim: cuLaunchKernel(%s) refused: %s\n", k->name, what);
    return code;
}

EXPORT CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shmem, void *stream, void **params, void **extra) {
    CHECK_INIT();
    sim_fn *f = fn;
    if (!f) return E_INVALID_VALUE;
    if (f->magic != FN_MAGIC) return E_INVALID_HANDLE;   /* its module was unloaded */
    const sim_kernel *k = f->k;
    if (stream && stream != &stream_token) return E_INVALID_HANDLE;
    if (extra) return launch_error(E_INVALID_VALUE, k, "the extra argument is not supported by the simulator");
    if (!gx || !gy || !gz || !bx || !by || !bz)
        return launch_error(E_INVALID_VALUE, k, "a zero grid or block dimension (grid %ux%ux%u, block %ux%ux%u)", gx, gy,
                            gz, bx, by, bz);
    if (gx > 2147483647u || gy > 65535 || gz > 65535)
        return launch_error(E_INVALID_VALUE, k, "grid %ux%ux%u over the limits (2^31-1, 65535, 65535)", gx, gy, gz);
    if (bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > 1024)
        return launch_error(E_INVALID_VALUE, k, "block %ux%ux%u over the limits (1024, 1024, 64; 1024 threads)", bx, by,
                            bz);
    unsigned threads = bx * by * bz;
    if (k->launch_bound && threads > (unsigned)k->launch_bound)
        return launch_error(E_OUT_OF_RESOURCES, k, "%u threads per block, over its __launch_bounds__(%d)", threads,
                            k->launch_bound);
    size_t stat = (size_t)(f->mod->info->shared_hi - f->mod->info->shared_lo);
    if (stat + shmem > SHARED_MAX)
        return launch_error(E_INVALID_VALUE, k, "%zu bytes of shared memory per block (static %zu + dynamic %u), over %u",
                            stat + shmem, stat, shmem, SHARED_MAX);
    if (shmem) return launch_error(E_INVALID_VALUE, k, "dynamic shared memory is not simulated");
    if (k->nparams && !params) return launch_error(E_INVALID_VALUE, k, "no parameters for %d", k->nparams);
    for (int i = 0; i < k->nparams; i++) {
        if (!params[i]) return launch_error(E_INVALID_VALUE, k, "parameter %d is a null pointer", i + 1);
        if (host_range_poisoned(params[i], k->param_size[i]))
            return launch_error(E_INVALID_VALUE, k,
                                "parameter %d: the kernel reads %u bytes, the host object behind it is smaller",
                                i + 1, k->param_size[i]);
    }
    const char *mv = getenv("ST_SIM_METRICS");   /* read per launch: a test may switch it on */
    S.metrics = S.debug_metrics || (mv && !strcmp(mv, "1"));
    L.fn = f;
    L.params = params;
    L.grid = (sim_dim3){gx, gy, gz};
    L.block = (sim_dim3){bx, by, bz};
    L.nthreads = (int)threads;
    L.nwarps = (int)((threads + 31) / 32);
    L.shm_lo = f->mod->info->shared_lo;
    L.shm_size = stat;
    L.failed = 0;
    RT.block_dim = L.block;
    RT.grid_dim = L.grid;
    CUresult rc = run_grid();
    /* A fault is reported by the calls after the launch, as a GPU's asynchronous error is. */
    return rc == E_OOM ? E_OOM : OK;
}

static const struct { CUresult code; const char *name, *text; } errors[] = {
    {OK, "CUDA_SUCCESS", "no error"},
    {E_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {E_OOM, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {E_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {E_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {E_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {E_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {E_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {E_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {E_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {E_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {E_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
};

static const char *const *error_entry(CUresult e, int text) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == e) return text ? &errors[i].text : &errors[i].name;
    return NULL;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **s) {
    if (!s) return E_INVALID_VALUE;
    const char *const *p = error_entry(e, 0);
    *s = p ? *p : NULL;
    return p ? OK : E_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult e, const char **s) {
    if (!s) return E_INVALID_VALUE;
    const char *const *p = error_entry(e, 1);
    *s = p ? *p : NULL;
    return p ? OK : E_INVALID_VALUE;
}

/* For the simulator's own tests: the message of the last fault ("" when none). */
EXPORT const char *sim_last_fault(void) { return L.failed ? L.msg : ""; }
