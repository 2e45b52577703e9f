/*
 * test_devalloc.c — the caching device allocator (device/devalloc.c) over a fake device.
 *
 * The fake backend hands out fake addresses (never dereferenced) from a capacity of 1 GiB, counts
 * its calls and checks that every free names a live block. Invariants checked:
 *  - size classes (512 B multiples up to 1 MiB, 2 MiB multiples above) and reuse: a free + alloc
 *    of the same class makes no backend call;
 *  - stats: in_use / reserved / peak, reset of the peak; empty_cache frees exactly the cached
 *    blocks; reserved always equals what the backend holds;
 *  - out of memory: a request larger than the device fails at once with ST_ERR_OOM and a message
 *    in human units; a raw OOM empties the cache and retries; then the host's OOM handler runs and
 *    its frees are used; then ST_ERR_OOM; the allocator works afterwards;
 *  - a backend error other than OOM is passed through; host allocation failures (st_malloc) at
 *    every point leave the allocator and the backend consistent.
 */
#include "test.h"
#include "device/devalloc.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define FAKE_MAX_BLOCKS 256

typedef struct fake_dev {
    uint64_t capacity, used, next_addr;
    int allocs, frees, bad_frees;
    st_status fail_with;   /* != ST_OK: the next alloc fails with it (a non-OOM device error) */
    int nlive;
    struct { uint64_t ptr; size_t n; } live[FAKE_MAX_BLOCKS];
} fake_dev;

static st_status fake_alloc(void *ud, size_t n, uint64_t *ptr) {
    fake_dev *f = ud;
    if (f->fail_with != ST_OK) {
        st_status s = f->fail_with;
        f->fail_with = ST_OK;
        return st_error(s, "fake device error in alloc");
    }
    if (f->used + n > f->capacity || f->nlive == FAKE_MAX_BLOCKS) return ST_ERR_OOM;
    *ptr = f->next_addr;
    f->next_addr += n + 4096;
    f->used += n;
    f->live[f->nlive].ptr = *ptr;
    f->live[f->nlive++].n = n;
    f->allocs++;
    return ST_OK;
}

static void fake_free(void *ud, uint64_t ptr) {
    fake_dev *f = ud;
    for (int i = 0; i < f->nlive; i++)
        if (f->live[i].ptr == ptr) {
            f->used -= f->live[i].n;
            f->live[i] = f->live[--f->nlive];
            f->frees++;
            return;
        }
    f->bad_frees++;
}

static devalloc *fake_allocator(fake_dev *f) {
    memset(f, 0, sizeof *f);
    f->capacity = GiB;
    f->next_addr = 0x10000;
    devalloc_backend be = {.ud = f, .alloc = fake_alloc, .free = fake_free, .total = GiB, .name = "CUDA",
                           .label = "cuda:0"};
    return devalloc_new(&be);
}

static void check_consistent(devalloc *a, fake_dev *f) {
    devalloc_stats s;
    devalloc_get_stats(a, &s);
    CHECK_EQ_INT(s.reserved, f->used);
    CHECK_EQ_INT(s.raw_allocs, f->allocs);
    CHECK_EQ_INT(s.raw_frees, f->frees);
    CHECK_EQ_INT(f->bad_frees, 0);
    CHECK(s.in_use <= s.reserved && s.peak >= s.in_use);
}

TEST(size_classes) {
    CHECK_EQ_INT(devalloc_class(0), 512);
    CHECK_EQ_INT(devalloc_class(1), 512);
    CHECK_EQ_INT(devalloc_class(512), 512);
    CHECK_EQ_INT(devalloc_class(513), 1024);
    CHECK_EQ_INT(devalloc_class(MiB), MiB);
    CHECK_EQ_INT(devalloc_class(MiB + 1), 2 * MiB);
    CHECK_EQ_INT(devalloc_class(3 * MiB), 4 * MiB);
    CHECK_EQ_INT(devalloc_class(4 * MiB), 4 * MiB);
    CHECK_EQ_INT(devalloc_class(SIZE_MAX), 0);
    char b[32];
    CHECK(!strcmp(devalloc_human(512, 2, b, sizeof b), "512 B"));
    CHECK(!strcmp(devalloc_human(1536, 2, b, sizeof b), "1.50 KiB"));
    CHECK(!strcmp(devalloc_human(2 * GiB, 2, b, sizeof b), "2.00 GiB"));
    CHECK(!strcmp(devalloc_human((uint64_t)(75.1 * GiB), 1, b, sizeof b), "75.1 GiB"));
}

TEST(reuse) {
    fake_dev f;
    devalloc *a = fake_allocator(&f);
    uint64_t p, q, r;
    CHECK(devalloc_alloc(a, 1000, &p) == ST_OK && p != 0);
    CHECK_EQ_INT(f.allocs, 1);
    devalloc_free(a, p);
    CHECK_EQ_INT(f.frees, 0);                   /* cached, not returned */
    CHECK(devalloc_alloc(a, 700, &q) == ST_OK); /* same class (1024): the same block */
    CHECK_EQ_INT(q, p);
    CHECK_EQ_INT(f.allocs, 1);
    CHECK(devalloc_alloc(a, 1100, &r) == ST_OK); /* another class: a new block */
    CHECK_EQ_INT(f.allocs, 2);
    CHECK(r != q);
    devalloc_free(a, q);
    devalloc_free(a, r);
    uint64_t big1, big2;
    CHECK(devalloc_alloc(a, 5 * MiB + 3, &big1) == ST_OK); /* class 6 MiB */
    devalloc_free(a, big1);
    CHECK(devalloc_alloc(a, 6 * MiB, &big2) == ST_OK);
    CHECK_EQ_INT(big2, big1);
    CHECK_EQ_INT(f.allocs, 3);
    devalloc_free(a, big2);
    devalloc_free(a, 0); /* no-op */
    check_consistent(a, &f);
    devalloc_destroy(a);
    CHECK_EQ_INT(f.used, 0);
    CHECK_EQ_INT(f.frees, f.allocs);
}

TEST(stats_and_empty_cache) {
    fake_dev f;
    devalloc *a = fake_allocator(&f);
    uint64_t p[3];
    CHECK(devalloc_alloc(a, 3 * MiB, &p[0]) == ST_OK); /* 4 MiB */
    CHECK(devalloc_alloc(a, 100, &p[1]) == ST_OK);     /* 512 B */
    CHECK(devalloc_alloc(a, 10 * MiB, &p[2]) == ST_OK);
    devalloc_stats s;
    devalloc_get_stats(a, &s);
    CHECK_EQ_INT(s.in_use, 14 * MiB + 512);
    CHECK_EQ_INT(s.reserved, 14 * MiB + 512);
    CHECK_EQ_INT(s.peak, 14 * MiB + 512);
    devalloc_free(a, p[0]);
    devalloc_free(a, p[1]);
    devalloc_get_stats(a, &s);
    CHECK_EQ_INT(s.in_use, 10 * MiB);
    CHECK_EQ_INT(s.reserved, 14 * MiB + 512);
    CHECK_EQ_INT(s.peak, 14 * MiB + 512);
    devalloc_reset_peak(a);
    devalloc_get_stats(a, &s);
    CHECK_EQ_INT(s.peak, 10 * MiB);
    devalloc_empty_cache(a);
    devalloc_get_stats(a, &s);
    CHECK_EQ_INT(f.frees, 2); /* exactly the two cached blocks */
    CHECK_EQ_INT(s.reserved, 10 * MiB);
    CHECK_EQ_INT(s.in_use, 10 * MiB);
    check_consistent(a, &f);
    devalloc_free(a, p[2]);
    devalloc_destroy(a);
    CHECK_EQ_INT(f.used, 0);
}

TEST(larger_than_device) {
    fake_dev f;
    devalloc *a = fake_allocator(&f);
    uint64_t keep, cached, p = 123;
    CHECK(devalloc_alloc(a, 256 * MiB, &keep) == ST_OK);
    CHECK(devalloc_alloc(a, 8 * MiB, &cached) == ST_OK);
    devalloc_free(a, cached);
    st_clear_error();
    CHECK(devalloc_alloc(a, 2 * GiB, &p) == ST_ERR_OOM);
    CHECK_EQ_INT(p, 0);
    CHECK_EQ_INT(st_last_status(), ST_ERR_OOM);
    const char *m = st_last_error();
    CHECK_MSG(strstr(m, "CUDA out of memory on cuda:0: tried to allocate 2.00 GiB; 256.0 MiB in use, 264.0 MiB reserved, "
                        "1.0 GiB total") != NULL, "message: %s", m);
    CHECK_EQ_INT(f.allocs, 2); /* no backend call, and the cache was kept: it could not help */
    CHECK_EQ_INT(f.frees, 0);
    CHECK(devalloc_alloc(a, SIZE_MAX, &p) == ST_ERR_OOM);
    CHECK(devalloc_alloc(a, 8 * MiB, &p) == ST_OK && p == cached);
    devalloc_free(a, p);
    devalloc_free(a, keep);
    check_consistent(a, &f);
    devalloc_destroy(a);
}

TEST(oom_empties_cache) {
    fake_dev f;
    devalloc *a = fake_allocator(&f);
    uint64_t p, q;
    CHECK(devalloc_alloc(a, 600 * MiB, &p) == ST_OK);
    devalloc_free(a, p); /* 600 MiB cached */
    CHECK(devalloc_alloc(a, 602 * MiB, &q) == ST_OK); /* fits only once the cache is returned */
    CHECK_EQ_INT(f.frees, 1);
    CHECK_EQ_INT(f.allocs, 2);
    devalloc_stats s;
    devalloc_get_stats(a, &s);
    CHECK_EQ_INT(s.reserved, 602 * MiB);
    devalloc_free(a, q);
    check_consistent(a, &f);
    devalloc_destroy(a);
}

/* An OOM handler that frees one held block, like a GC finalizing a tensor. */
static struct { devalloc *a; uint64_t held; int calls; size_t bytes; } handler_state;
static int free_held_block(size_t bytes, void *ud) {
    (void)ud;
    handler_state.calls++;
    handler_state.bytes = bytes;
    if (!handler_state.held) return 0;
    devalloc_free(handler_state.a, handler_state.held);
    handler_state.held = 0;
    return 1;
}

TEST(oom_handler) {
    fake_dev f;
    devalloc *a = fake_allocator(&f);
    memset(&handler_state, 0, sizeof handler_state);
    handler_state.a = a;
    st_set_oom_handler(free_held_block, NULL);
    /* another class: the handler's free lands in the cache, which is then returned */
    CHECK(devalloc_alloc(a, 600 * MiB, &handler_state.held) == ST_OK);
    uint64_t p = 0;
    CHECK(devalloc_alloc(a, 500 * MiB, &p) == ST_OK);
    CHECK_EQ_INT(handler_state.calls, 1);
    CHECK_EQ_INT(handler_state.bytes, 500 * MiB);
    CHECK_EQ_INT(f.frees, 1);
    devalloc_free(a, p);
    devalloc_empty_cache(a);
    /* the same class: the block the handler frees is reused, with no backend call */
    uint64_t filler = 0, q = 0;
    CHECK(devalloc_alloc(a, 1000 * MiB, &filler) == ST_OK);
    CHECK(devalloc_alloc(a, 20 * MiB, &handler_state.held) == ST_OK); /* 1020 of 1024 MiB */
    uint64_t held = handler_state.held;
    int raw = f.allocs;
    CHECK(devalloc_alloc(a, 20 * MiB, &q) == ST_OK);
    CHECK_EQ_INT(handler_state.calls, 2);
    CHECK_EQ_INT(f.allocs, raw);
    CHECK_EQ_INT(q, held);
    devalloc_free(a, q);
    devalloc_free(a, filler);
    st_set_oom_handler(NULL, NULL);
    check_consistent(a, &f);
    devalloc_destroy(a);
    CHECK_EQ_INT(f.used, 0);
}

TEST(oom_then_usable) {
    fake_dev f;
    devalloc *a = fake_allocator(&f);
    memset(&handler_state, 0, sizeof handler_state);
    handler_state.a = a;
    st_set_oom_handler(free_held_block, NULL); /* holds nothing: it cannot help */
    uint64_t big, small, p = 7;
    CHECK(devalloc_alloc(a, 900 * MiB, &big) == ST_OK);
    CHECK(devalloc_alloc(a, MiB, &small) == ST_OK);
    devalloc_free(a, small); /* cached: returned before failing */
    CHECK(devalloc_alloc(a, 200 * MiB, &p) == ST_ERR_OOM);
    CHECK_EQ_INT(p, 0);
    CHECK_EQ_INT(handler_state.calls, 1);
    CHECK_EQ_INT(f.frees, 1);
    const char *m = st_last_error();
    CHECK_MSG(strstr(m, "tried to allocate 200.00 MiB; 900.0 MiB in use, 900.0 MiB reserved, 1.0 GiB total") != NULL,
              "message: %s", m);
    st_set_oom_handler(NULL, NULL);
    CHECK(devalloc_alloc(a, 100 * MiB, &p) == ST_OK && p != 0);
    devalloc_free(a, p);
    devalloc_free(a, big);
    check_consistent(a, &f);
    devalloc_destroy(a);
}

TEST(backend_error_passes_through) {
    fake_dev f;
    devalloc *a = fake_allocator(&f);
    memset(&handler_state, 0, sizeof handler_state);
    st_set_oom_handler(free_held_block, NULL);
    f.fail_with = ST_ERR_DEVICE;
    uint64_t p = 1;
    CHECK(devalloc_alloc(a, 4096, &p) == ST_ERR_DEVICE);
    CHECK(strstr(st_last_error(), "fake device error") != NULL);
    CHECK_EQ_INT(handler_state.calls, 0);
    CHECK_EQ_INT(p, 0);
    st_set_oom_handler(NULL, NULL);
    CHECK(devalloc_alloc(a, 4096, &p) == ST_OK);
    devalloc_free(a, p);
    check_consistent(a, &f);
    devalloc_destroy(a);
}

/* Fail the Nth host allocation inside alloc/free for every N until a run passes without one. */
TEST(host_alloc_failures) {
    fake_dev f;
    for (int nth = 1; nth < 20; nth++) {
        devalloc *a = fake_allocator(&f);
        CHECK(a != NULL);
        uint64_t p = 0, q = 0;
        st_debug_fail_alloc(nth);
        st_status s1 = devalloc_alloc(a, 1000, &p);
        st_status s2 = devalloc_alloc(a, 3 * MiB, &q);
        devalloc_free(a, p);
        devalloc_free(a, q);
        uint64_t r = 0;
        st_status s3 = devalloc_alloc(a, 1000, &r);
        devalloc_free(a, r);
        st_debug_fail_alloc(0);
        CHECK(s1 == ST_OK || s1 == ST_ERR_OOM);
        CHECK(s2 == ST_OK || s2 == ST_ERR_OOM);
        CHECK(s3 == ST_OK || s3 == ST_ERR_OOM);
        check_consistent(a, &f);
        devalloc_stats s;
        devalloc_get_stats(a, &s);
        CHECK_EQ_INT(s.in_use, 0);
        devalloc_destroy(a);
        CHECK_EQ_INT(f.used, 0);
        if (s1 == ST_OK && s2 == ST_OK && s3 == ST_OK) break;
    }
}

int main(void) {
    RUN(size_classes);
    RUN(reuse);
    RUN(stats_and_empty_cache);
    RUN(larger_than_device);
    RUN(oom_empties_cache);
    RUN(oom_handler);
    RUN(oom_then_usable);
    RUN(backend_error_passes_through);
    RUN(host_alloc_failures);
    TEST_MAIN_END();
}
