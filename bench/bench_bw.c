/*
 * bench_bw.c — memory-bound benchmarks: stitch's fused kernels against this machine's memcpy and
 * against hand-written C loops, measured in the same process.
 *
 *   bench_bw RESULTS_FILE [--quick]
 *
 * Cases (f32):
 *   chain     y = gelu_tanh(x * a + b) * c   x: 16M elements, a, b, c scalars (kernel parameters)
 *   chain_erf y = gelu(x * a + b) * c        (erf form; numpy has no erf, so no numpy twin)
 *   rowsum    y = sum(x, dim -1)             x: (4096, 4096)
 *   softmax   y = softmax(x, dim -1)         x: (4096, 4096)
 * GB/s everywhere = bytes the minimal algorithm must move (each input read once, each output written
 * once; 1 GB = 1e9 bytes) / wall time of one warm iteration (best of ITERS; the median is printed
 * too). Nothing is subtracted: a stitch iteration records the ops anew from the realized input,
 * st_realize()s the result (plan lookup, allocation of the output, launch) and releases it.
 * The first iteration (planning + compiling) is timed on its own and reported as compile time.
 *
 * Baselines: memcpy of the same bytes (glibc, one thread, best of ITERS, into a pre-touched
 * destination), a two-thread memcpy, and hand-written loops over the very same prelude math
 * (base/opmath.h) compiled with the JIT's flags, on 1 and 2 threads: the "ideal kernel".
 *
 * Machine-readable results go to RESULTS_FILE as `key value` lines (bench/report.py turns them into
 * the ratio lines); a human-readable log goes to stdout.
 * Invariant: every timed stitch iteration really recomputes (a fresh output node each time, the
 * input realized beforehand), and each result is checked against the hand-written loop.
 */
#include "stitch.h"
#include "base/opmath.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define CHAIN_N (16 * 1024 * 1024)
#define ROWS 4096
#define COLS 4096
#define MAX_ITERS 32

static const float CH_A = 1.25f, CH_B = -0.5f, CH_C = 0.75f;

static int iters = 10;
static FILE *results;
/* Called through a volatile pointer so the compiler cannot drop a memset into a buffer that is
 * freed right after (dead-store elimination would remove the very page faults we time). */
static void *(*volatile memset_v)(void *, int, size_t) = memset;

#include "bench_util.h"

static double gbs(double bytes, double s) { return bytes / s / 1e9; }

/* ---- a tiny fork/join over pthreads for the hand-written baselines ---- */
typedef void (*range_fn)(void *ctx, int64_t lo, int64_t hi);
typedef struct par_job {
    range_fn fn;
    void *ctx;
    int64_t lo, hi;
} par_job;

static void *par_thread(void *p) {
    par_job *j = p;
    j->fn(j->ctx, j->lo, j->hi);
    return NULL;
}

/* Runs fn over [0, n) split into nthreads contiguous chunks (multiples of `align`). */
static void par_run(int nthreads, int64_t n, int64_t align, range_fn fn, void *ctx) {
    par_job jobs[8];
    pthread_t th[8];
    if (nthreads > 8) nthreads = 8;
    int64_t chunk = (n + nthreads - 1) / nthreads;
    chunk = (chunk + align - 1) / align * align;
    for (int t = 0; t < nthreads; t++) {
        int64_t lo = t * chunk, hi = lo + chunk;
        jobs[t] = (par_job){fn, ctx, lo < n ? lo : n, hi < n ? hi : n};
    }
    for (int t = 1; t < nthreads; t++) pthread_create(&th[t], NULL, par_thread, &jobs[t]);
    par_thread(&jobs[0]);
    for (int t = 1; t < nthreads; t++) pthread_join(th[t], NULL);
}

/* ---- hand-written kernels (the same prelude math the JIT uses) ---- */
typedef struct arrays {
    const float *x;
    float *y;
} arrays;

static void copy_range(void *ctx, int64_t lo, int64_t hi) {
    arrays *a = ctx;
    memcpy(a->y + lo, a->x + lo, (size_t)(hi - lo) * sizeof(float));
}
static void chain_tanh_range(void *ctx, int64_t lo, int64_t hi) {
    arrays *a = ctx;
    const float *restrict x = a->x;
    float *restrict y = a->y;
    for (int64_t i = lo; i < hi; i++) y[i] = om_gelu_tanh(x[i] * CH_A + CH_B) * CH_C;
}
static void chain_erf_range(void *ctx, int64_t lo, int64_t hi) {
    arrays *a = ctx;
    const float *restrict x = a->x;
    float *restrict y = a->y;
    for (int64_t i = lo; i < hi; i++) y[i] = om_gelu(x[i] * CH_A + CH_B) * CH_C;
}
/* Row sums, 16 independent accumulators: a strict-FP (no -ffast-math) sum with one accumulator is
 * a serial dependency chain that GCC may not vectorize; 16 lanes let it use one vector register. */
static void rowsum_range(void *ctx, int64_t lo, int64_t hi) {
    arrays *a = ctx;
    for (int64_t r = lo; r < hi; r++) {
        const float *restrict row = a->x + r * COLS;
        float acc[16] = {0};
        for (int64_t c = 0; c < COLS; c += 16)
            for (int k = 0; k < 16; k++) acc[k] += row[c + k];
        float s = 0;
        for (int k = 0; k < 16; k++) s += acc[k];
        a->y[r] = s;
    }
}
/* Softmax rows: max pass, exp + sum pass (the row, 16 KiB, stays in L1), scale pass. */
static void softmax_range(void *ctx, int64_t lo, int64_t hi) {
    arrays *a = ctx;
    for (int64_t r = lo; r < hi; r++) {
        const float *restrict row = a->x + r * COLS;
        float *restrict out = a->y + r * COLS;
        float mx[16], acc[16];
        for (int k = 0; k < 16; k++) mx[k] = -INFINITY, acc[k] = 0;
        for (int64_t c = 0; c < COLS; c += 16)
            for (int k = 0; k < 16; k++) mx[k] = mx[k] > row[c + k] ? mx[k] : row[c + k];
        float m = mx[0];
        for (int k = 1; k < 16; k++) m = m > mx[k] ? m : mx[k];
        for (int64_t c = 0; c < COLS; c += 16)
            for (int k = 0; k < 16; k++) {
                float e = om_exp(row[c + k] - m);
                out[c + k] = e;
                acc[k] += e;
            }
        float s = 0;
        for (int k = 0; k < 16; k++) s += acc[k];
        float inv = 1.0f / s;
        for (int64_t c = 0; c < COLS; c++) out[c] *= inv;
    }
}

/* Best/median of `iters` runs of a hand-written kernel on nthreads threads. */
static timing time_hand(int nthreads, int64_t n, int64_t align, range_fn fn, arrays *a) {
    double t[MAX_ITERS];
    par_run(nthreads, n, align, fn, a); /* warm: touches the output pages */
    for (int i = 0; i < iters; i++) {
        double t0 = now_s();
        par_run(nthreads, n, align, fn, a);
        t[i] = now_s() - t0;
    }
    return summarize(t, iters);
}

/* The same, but every iteration writes into a freshly malloc'ed output (freed in the iteration,
 * as a new tensor is): what a kernel costs when its output buffer is new memory each time. */
static timing time_hand_fresh(int nthreads, int64_t n, int64_t align, range_fn fn, const float *x,
                              int huge) {
    double t[MAX_ITERS];
    for (int i = 0; i < iters; i++) {
        double t0 = now_s();
        void *p = NULL;
        if (posix_memalign(&p, huge ? (size_t)2 << 20 : 64, (size_t)n * sizeof(float))) abort();
        if (huge) madvise(p, (size_t)n * sizeof(float), MADV_HUGEPAGE);
        arrays a = {x, p};
        par_run(nthreads, n, align, fn, &a);
        free(a.y);
        t[i] = now_s() - t0;
    }
    return summarize(t, iters);
}

/* ---- stitch ---- */
typedef st_tensor *(*build_fn)(st_tensor *x);

/* Each builder records the expression from x and returns only the result; every intermediate
 * handle is released at once, as eager C code would (so nothing but the output is materialized). */
static st_tensor *build_chain(st_tensor *x, int erf) {
    st_tensor *t1 = st_mul_s(x, CH_A);
    st_tensor *t2 = t1 ? st_add_s(t1, CH_B) : NULL;
    st_tensor *t3 = t2 ? (erf ? st_gelu(t2) : st_gelu_tanh(t2)) : NULL;
    st_tensor *y = t3 ? st_mul_s(t3, CH_C) : NULL;
    st_release(t1);
    st_release(t2);
    st_release(t3);
    return y;
}
static st_tensor *build_chain_tanh(st_tensor *x) { return build_chain(x, 0); }
static st_tensor *build_chain_erf(st_tensor *x) { return build_chain(x, 1); }
static st_tensor *build_rowsum(st_tensor *x) {
    int ax = -1;
    return st_sum(x, 1, &ax, 0);
}
static st_tensor *build_softmax(st_tensor *x) { return st_softmax(x, -1); }

/* Times `iters` warm iterations of build + st_realize + release after one cold (compiling) one.
 * Writes <name>_gbs, _med_gbs, _first_ms, _compile_ms, _compiled, _launches, _exec_ms, _maxerr.
 * expect (n floats) is the hand-written loop's answer. Returns 0 on success. */
static int time_stitch(const char *name, build_fn build, st_tensor *x, double bytes,
                       const float *expect, int64_t n) {
    char key[64];
    st_stats_t s0, s1;
    st_reset_stats();
    double t0 = now_s();
    st_tensor *y = build(x);
    st_status rc = y ? st_realize(1, &y) : st_last_status();
    double first = now_s() - t0;
    if (rc != ST_OK) {
        printf("  %-10s FAILED: %s\n", name, st_last_error());
        st_release(y);
        return 1;
    }
    st_stats(&s0);
    st_release(y);
    double t[MAX_ITERS];
    /* One timed iteration = record + realize + release: the whole cost of a step of a user loop. */
    for (int i = 0; i < iters; i++) {
        t0 = now_s();
        y = build(x);
        rc = y ? st_realize(1, &y) : st_last_status();
        st_release(y);
        t[i] = now_s() - t0;
        if (rc != ST_OK) {
            printf("  %-10s FAILED on iteration %d: %s\n", name, i, st_last_error());
            return 1;
        }
    }
    st_stats(&s1);
    /* Check one more result against the hand-written loop (outside the timed part). */
    y = build(x);
    if (!y || st_realize(1, &y) != ST_OK) {
        printf("  %-10s FAILED on the check run: %s\n", name, st_last_error());
        st_release(y);
        return 1;
    }
    float *got = malloc((size_t)n * sizeof *got);
    double maxerr = INFINITY;
    if (got && st_to_host(y, ST_F32, got, (size_t)n * sizeof *got) == ST_OK) {
        maxerr = 0;
        for (int64_t i = 0; i < n; i++) {
            double e = fabs((double)got[i] - expect[i]) / (1.0 + fabs((double)expect[i]));
            if (!(e <= maxerr)) maxerr = e; /* NaN wins */
        }
    }
    free(got);
    st_release(y);
    timing tm = summarize(t, iters);
    double launches = (double)(s1.kernels_launched - s0.kernels_launched) / iters;
    double exec_ms = (s1.exec_ms - s0.exec_ms) / iters;
    /* Groups run by the interpreter tier instead of a compiled kernel: should be 0 here. */
    double interp = (double)(s1.interp_groups - s0.interp_groups) / iters;
    printf("  %-10s stitch   %7.2f GB/s best, %7.2f median (%.2f ms; runtime exec_ms %.2f/iter, "
           "%.1f launches + %.1f interpreted groups/iter, %llu compiled in the cold run; cold run "
           "%.1f ms, compile %.1f ms); max rel err vs hand loop %.2g\n",
           name, gbs(bytes, tm.best), gbs(bytes, tm.median), tm.best * 1e3, exec_ms, launches, interp,
           (unsigned long long)s0.kernels_compiled, first * 1e3, s0.compile_ms, maxerr);
#define PUT(suffix, v) (snprintf(key, sizeof key, "%s_%s", name, suffix), put(key, v))
    PUT("gbs", gbs(bytes, tm.best));
    PUT("med_gbs", gbs(bytes, tm.median));
    PUT("first_ms", first * 1e3);
    PUT("compile_ms", s0.compile_ms);
    PUT("compiled", (double)s0.kernels_compiled);
    PUT("launches", launches);
    PUT("exec_ms", exec_ms);
    PUT("interp", interp);
    PUT("best_ms", tm.best * 1e3);
    PUT("maxerr", maxerr);
#undef PUT
    return 0;
}

/* Deterministic inputs in [-3, 3) (a 64-bit LCG; the values do not steer any branch). */
static void fill_inputs(float *x, int64_t n) {
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) * 0x1p-24 * 6.0 - 3.0);
    }
}

static void hand_line(const char *name, const char *what, double bytes, timing t1, timing t2) {
    char key[64];
    printf("  %-10s %-8s %7.2f GB/s on 1 thread, %7.2f GB/s on 2 threads (best)\n", name, what,
           gbs(bytes, t1.best), gbs(bytes, t2.best));
    snprintf(key, sizeof key, "%s_hand1_gbs", name);
    put(key, gbs(bytes, t1.best));
    snprintf(key, sizeof key, "%s_hand2_gbs", name);
    put(key, gbs(bytes, t2.best));
}

int main(int argc, char **argv) {
    int quick, rc = open_results(argc, argv, &quick);
    if (rc) return rc;
    if (quick) iters = 3;

    const int64_t n = CHAIN_N;
    const double bytes_chain = 2.0 * (double)n * sizeof(float);
    const double bytes_sum = (double)ROWS * COLS * sizeof(float) + ROWS * sizeof(float);
    const double bytes_softmax = 2.0 * (double)ROWS * COLS * sizeof(float);
    float *x = aligned_alloc(64, (size_t)n * sizeof(float));
    float *ref = aligned_alloc(64, (size_t)n * sizeof(float));
    float *dst = aligned_alloc(64, (size_t)n * sizeof(float));
    if (!x || !ref || !dst) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    fill_inputs(x, n);
    memset(ref, 0, (size_t)n * sizeof(float));
    memset(dst, 0, (size_t)n * sizeof(float));

    /* ---- the machine: memcpy of the chain's bytes (64 MiB in, 64 MiB out) ---- */
    printf("baselines (%d iterations each, best):\n", iters);
    arrays cp = {x, dst};
    timing m1 = time_hand(1, n, 16, copy_range, &cp);
    timing m2 = time_hand(2, n, 16, copy_range, &cp);
    printf("  memcpy     64 MiB  %7.2f GB/s on 1 thread (%.2f ms), %7.2f GB/s on 2 threads\n",
           gbs(bytes_chain, m1.best), m1.best * 1e3, gbs(bytes_chain, m2.best));
    put("memcpy_gbs", gbs(bytes_chain, m1.best));
    put("memcpy2_gbs", gbs(bytes_chain, m2.best));
    /* First touch of a fresh 64 MiB allocation: what every new output buffer costs when the
     * allocator hands back fresh pages (mmap'ed chunks: page faults + kernel zeroing). */
    {
        double t[MAX_ITERS];
        for (int i = 0; i < iters; i++) {
            float *f = malloc((size_t)n * sizeof(float));
            if (!f) return 1;
            double t0 = now_s();
            memset_v(f, 1, (size_t)n * sizeof(float));
            t[i] = now_s() - t0;
            free(f);
        }
        timing ft = summarize(t, iters);
        /* The same with transparent huge pages asked for (THP is often in "madvise" mode): one
         * fault per 2 MiB instead of per 4 KiB. */
        for (int i = 0; i < iters; i++) {
            void *f = NULL;
            if (posix_memalign(&f, (size_t)2 << 20, (size_t)n * sizeof(float))) return 1;
            madvise(f, (size_t)n * sizeof(float), MADV_HUGEPAGE);
            double t0 = now_s();
            memset_v(f, 1, (size_t)n * sizeof(float));
            t[i] = now_s() - t0;
            free(f);
        }
        timing fh = summarize(t, iters);
        double t0 = now_s();
        memset_v(dst, 1, (size_t)n * sizeof(float));
        double warm = now_s() - t0;
        printf("  memset     64 MiB  %.2f ms into a fresh malloc'ed buffer (4 KiB page faults), "
               "%.2f ms with MADV_HUGEPAGE, %.2f ms into a warm one\n",
               ft.best * 1e3, fh.best * 1e3, warm * 1e3);
        put("fresh_touch_ms", ft.best * 1e3);
        put("fresh_touch_huge_ms", fh.best * 1e3);
        put("warm_memset_ms", warm * 1e3);
    }

    /* ---- hand-written loops (the ideal fused kernels) ---- */
    arrays ch = {x, ref};
    hand_line("chain", "hand", bytes_chain, time_hand(1, n, 16, chain_tanh_range, &ch),
              time_hand(2, n, 16, chain_tanh_range, &ch));
    {
        timing f1 = time_hand_fresh(1, n, 16, chain_tanh_range, x, 0);
        timing f2 = time_hand_fresh(2, n, 16, chain_tanh_range, x, 0);
        printf("  %-10s %-8s %7.2f GB/s on 1 thread, %7.2f GB/s on 2 threads (best; output "
               "allocated and freed in each iteration, as st_buffer_new does)\n", "chain", "hand-new",
               gbs(bytes_chain, f1.best), gbs(bytes_chain, f2.best));
        put("chain_handfresh1_gbs", gbs(bytes_chain, f1.best));
        put("chain_handfresh2_gbs", gbs(bytes_chain, f2.best));
        /* What-if (NOTES.md): the same with huge pages. (The cheaper tanh it once measured is now
         * the prelude's own st_tanhf_.) */
        timing h2 = time_hand_fresh(2, n, 16, chain_tanh_range, x, 1);
        printf("  %-10s what-if  2 threads: fresh output + MADV_HUGEPAGE %.2f GB/s\n", "chain",
               gbs(bytes_chain, h2.best));
        put("chain_whatif_huge_gbs", gbs(bytes_chain, h2.best));
        chain_tanh_range(&ch, 0, n); /* ref back to the prelude's own answer */
    }
    /* ref now holds the tanh chain's answer. */

    st_tensor *xs = NULL, *xm = NULL;
    const int64_t shape1[1] = {n}, shape2[2] = {ROWS, COLS};
    xs = st_from_data(ST_F32, 1, shape1, x);
    xm = xs ? st_from_data(ST_F32, 2, shape2, x) : NULL;
    if (!xs || !xm || st_realize(1, &xs) != ST_OK || st_realize(1, &xm) != ST_OK) {
        printf("stitch: cannot create the inputs: %s\n", st_last_error());
        return 1;
    }
    printf("stitch (%d warm iterations; GB/s = minimal bytes / wall time of one iteration):\n", iters);
    time_stitch("chain", build_chain_tanh, xs, bytes_chain, ref, n);

    hand_line("chain_erf", "hand", bytes_chain, time_hand(1, n, 16, chain_erf_range, &ch),
              time_hand(2, n, 16, chain_erf_range, &ch));
    time_stitch("chain_erf", build_chain_erf, xs, bytes_chain, ref, n);

    arrays rs = {x, ref};
    hand_line("rowsum", "hand", bytes_sum, time_hand(1, ROWS, 1, rowsum_range, &rs),
              time_hand(2, ROWS, 1, rowsum_range, &rs));
    time_stitch("rowsum", build_rowsum, xm, bytes_sum, ref, ROWS);

    arrays sm = {x, ref};
    hand_line("softmax", "hand", bytes_softmax, time_hand(1, ROWS, 1, softmax_range, &sm),
              time_hand(2, ROWS, 1, softmax_range, &sm));
    time_stitch("softmax", build_softmax, xm, bytes_softmax, ref, (int64_t)ROWS * COLS);

    st_release(xs);
    st_release(xm);
    st_shutdown();
    free(x);
    free(ref);
    free(dst);
    fclose(results);
    return 0;
}
