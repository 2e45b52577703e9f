/*
 * cpu.c — the CPU device: host memory, plain copies, kernels called in this process.
 *
 * Data blocks are 64-byte aligned; from 2 MiB on they are 2 MiB aligned and advised for
 * transparent huge pages. Freed blocks are kept in a cache keyed by size (at most 256 blocks and
 * 1 GiB; the oldest go first): a training loop allocates the same sizes every step, and fresh
 * pages cost a page fault and a zeroing each, more than the kernel that writes them. A small
 * ResNet step (batch 128) releases about 1 GB a step in some 300 blocks: with at most 32 blocks
 * cached, 28% of its time went to zeroing fresh huge pages. A cap of a quarter of the memory
 * instead of 1 GiB was no faster and held 0.45 GB more (bench/NOTES.md). The cache is a trim
 * hook of base/mem.c: emptied when any allocation fails, by st_empty_cache and at shutdown.
 *
 * Kernels (C target) are functions of shared objects the JIT loaded (jit/cache.c); a launch calls
 * one with its st_kargs on this thread; the kernel's parallel regions run on the pool of
 * cpu_pool.c, whose table the launch passes in st_kargs.
 */
#include "device/device.h"
#include "device/cpu_pool.h"
#include "base/gemm.h"

#include <sys/mman.h>
#include <unistd.h>

#define HUGE_MIN ((size_t)2 << 20)
#define CACHE_SLOTS 256
#define CACHE_MAX_BYTES ((size_t)1 << 30)
static struct { void *p; size_t n; } block_cache[CACHE_SLOTS];   /* oldest first */
static int cache_count;
static size_t cache_bytes;

/* Removes entry i, keeping the others in age order. */
static void cache_remove(int i) {
    cache_bytes -= block_cache[i].n;
    memmove(&block_cache[i], &block_cache[i + 1], (size_t)(cache_count - i - 1) * sizeof block_cache[0]);
    cache_count--;
}

static size_t block_size(size_t n) {
    return n >= HUGE_MIN ? (n + HUGE_MIN - 1) & ~(HUGE_MIN - 1) : (n + 63) & ~(size_t)63;
}

static void cpu_trim(void) {
    for (int i = 0; i < cache_count; i++) free(block_cache[i].p);
    cache_count = 0;
    cache_bytes = 0;
}

void *dev_cpu_block_alloc(size_t n) {
    static int hooked;
    if (!hooked) {
        base_on_trim(cpu_trim);
        hooked = 1;
    }
    size_t sz = block_size(n);
    for (int i = cache_count - 1; i >= 0; i--) /* the newest: likeliest still in cache */
        if (block_cache[i].n == sz) {
            void *p = block_cache[i].p;
            cache_remove(i);
            return p;
        }
    void *p = aligned_alloc(n >= HUGE_MIN ? HUGE_MIN : 64, sz);
#ifdef MADV_HUGEPAGE
    if (p && n >= HUGE_MIN) madvise(p, sz, MADV_HUGEPAGE);
#endif
    return p;
}

void dev_cpu_block_free(void *p, size_t n) {
    size_t sz = block_size(n);
    if (sz >= 4096 && sz <= CACHE_MAX_BYTES / 4) {
        while (cache_count && (cache_count == CACHE_SLOTS || cache_bytes + sz > CACHE_MAX_BYTES)) {
            free(block_cache[0].p);
            cache_remove(0);
        }
        block_cache[cache_count].p = p;
        block_cache[cache_count++].n = sz;
        cache_bytes += sz;
        return;
    }
    free(p);
}

uint64_t dev_cpu_cached_bytes(void) { return cache_bytes; }

static int cpu_count(void) { return 1; }
static const char *cpu_unavailable(void) { return ""; }

static const dev_info *cpu_info(int ord) {
    static dev_info info = {"cpu", 0, 0, 1, 0, 0};
    (void)ord;
    if (!info.units) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        info.units = c > 0 ? (int)c : 1;
    }
    return &info;
}

static void *block_alloc_fn(void *unused, size_t n) {
    (void)unused;
    return dev_cpu_block_alloc(n);
}

static st_status cpu_alloc(int ord, size_t n, void **ptr) {
    (void)ord;
    *ptr = base_alloc_retry(n ? n : 1, block_alloc_fn, NULL);
    return *ptr ? ST_OK : st_last_status();
}

static void cpu_free(int ord, void *ptr, size_t n) {
    (void)ord;
    dev_cpu_block_free(ptr, n ? n : 1);
}

static st_status cpu_copy(int ord, void *dst, const void *src, size_t n) {
    (void)ord;
    if (n) memcpy(dst, src, n);
    return ST_OK;
}

static st_status cpu_synchronize(int ord) {
    (void)ord;
    return ST_OK;
}

static st_status cpu_launch(int ord, const dev_call *c, int *err) {
    (void)ord;
    int32_t kerr = 0;
    st_kargs a = {c->bufs, c->ints, c->flts, &kerr, c->nthreads > 0 ? c->nthreads : 1, dev_cpu_pool(), base_gemm()};
    st_kernel_fn fn;
    memcpy(&fn, &c->fn, sizeof fn);
    fn(&a);
    *err = kerr != 0;
    return ST_OK;
}

static void cpu_mem_stats(uint64_t *in_use, uint64_t *reserved, uint64_t *peak) {
    *in_use = *reserved = *peak = 0;   /* the CPU's bytes are st_stats's bytes_in_use / bytes_peak */
}
static void cpu_reset_peak(void) {}

const st_device_ops dev_cpu_ops = {
    .kind = "cpu",
    .target = DEV_TARGET_C,
    .host_memory = true,
    .count = cpu_count,
    .unavailable = cpu_unavailable,
    .info = cpu_info,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_in = cpu_copy,
    .copy_out = cpu_copy,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .load_function = NULL,
    .generation = NULL,
    .launch = cpu_launch,
    .mem_stats = cpu_mem_stats,
    .reset_peak = cpu_reset_peak,
    .empty_cache = cpu_trim,
};
