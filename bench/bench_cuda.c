/*
 * bench_cuda.c — GPU benchmarks (issue 3): stitch's fused CUDA kernels against a device-to-device
 * copy measured in the same process, plus launch overhead, NVRTC compile time and cached loads.
 *
 *   bench_cuda RESULTS_FILE [--quick]
 *
 * Without a usable GPU it prints one line, "bench_cuda: no usable GPU (<why>); skipped", writes
 * `cuda_skipped 1` to RESULTS_FILE and exits 0.
 *
 * Cases (f32, inputs realized on cuda:0 before timing):
 *   chain        out = sigmoid(x * 1.5 + y) * tanh(y) - exp(-(x * x))   x, y: 64M elements; 9 ops,
 *                one output: minimal bytes 3 * 256 MiB
 *   rowsum_1k    sum(x, dim -1), x viewed as (65536, 1024)   bytes: input + output
 *   rowsum_8k    sum(x, dim -1), x viewed as (8192, 8192)
 *   colsum_1k    sum over dim 0 of x viewed as (65536, 1024): a column reduction (CL_COLS); bytes: in + out
 *   sum_all      sum(x) of all 64M elements: a whole-tensor reduction (CL_GRID)  bytes: input
 *   softmax_1k   softmax(x, dim -1), (65536, 1024)           bytes: input + output (2 * 256 MiB)
 *   softmax_8k   softmax(x, dim -1), (8192, 8192)
 *   copy         cuda_copy_dtod of 256 MiB (the driver's device-to-device copy): 2 * 256 MiB moved
 *   tiny         x + 1 on 1024 elements: host cost of one flush (record + realize + launch)
 * GB/s = minimal bytes (1 GB = 1e9 B) / wall time of one iteration. Two timings per case:
 *   synced     each iteration = record + st_realize + st_release + cuda_synchronize(0); best of
 *              ITERS (median printed too). This is the headline figure and what the ratios use.
 *   pipelined  ITERS iterations back to back, one synchronize at the end; total / ITERS (host
 *              overhead hidden behind the GPU when it is shorter than the kernel).
 * Why cuda_synchronize (an internal call, device/cuda.h): st_realize is a sync point of the
 * trace, not of the GPU: it queues the launches on the runtime's stream and returns. The public
 * API has no "wait for the device" call short of a device->host read, which would add a transfer
 * to every timed iteration; the copy baseline uses the internal cuda_copy_dtod for the same reason.
 *
 * The first call of each case (planning, CUDA rendering, NVRTC, module load) is timed apart and
 * reported with the st_stats compile counters. The kernel cache directory is a fresh temporary one
 * (ST_CACHE_DIR is overridden, the directory removed at exit) so the cold run really compiles.
 * Cached load: after all cases, st_shutdown() drops the memory caches (cubins, modules, device
 * blocks); each case runs once more and its first-call time, disk-cache hits and compiled count
 * (must be 0) are reported.
 *
 * Machine-readable results go to RESULTS_FILE as `key value` lines (bench_cuda.py --report turns
 * them into the ratio lines); a human-readable log goes to stdout.
 * Invariant: every timed iteration recomputes (a fresh output node from realized inputs), and one
 * extra result per case is checked on the host against a double-precision reference.
 */
#include "stitch.h"
#include "device/cuda.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_ELEMS (64 * 1024 * 1024)
#define TINY_N 1024
#define TINY_LOOP 1000
#define MAX_ITERS 64

static int iters = 30;
static FILE *results;
static float *hx, *hy, *hout;          /* host copies of the inputs; host buffer for checks */
static st_tensor *X, *Y;               /* 1-D inputs on the GPU */
static st_tensor *X1k, *X8k, *Xtiny;   /* views of X; the tiny input */

#include "bench_util.h"

static void put2(const char *name, const char *suffix, double v) {
    char key[96];
    snprintf(key, sizeof key, "%s_%s", name, suffix);
    put(key, v);
}

static double gbs(double bytes, double s) { return bytes / s / 1e9; }

/* Waits for the GPU; a failure here is an asynchronous kernel error and ends the run. */
static int gpu_sync(void) {
    if (cuda_synchronize(0) == ST_OK) return 1;
    printf("bench_cuda: cuda_synchronize failed: %s\n", st_last_error());
    return 0;
}

/* ---- the cases ---- */
typedef st_tensor *(*build_fn)(void);
typedef double (*check_fn)(st_tensor *out);

static void release_all(st_tensor **t, int n) {
    for (int i = 0; i < n; i++) st_release(t[i]);
}

static st_tensor *build_chain(void) {
    st_tensor *t[8] = {0}, *out = NULL;
    if ((t[0] = st_mul_s(X, 1.5)) && (t[1] = st_add(t[0], Y)) && (t[2] = st_sigmoid(t[1])) &&
        (t[3] = st_tanh(Y)) && (t[4] = st_mul(t[2], t[3])) && (t[5] = st_mul(X, X)) &&
        (t[6] = st_neg(t[5])) && (t[7] = st_exp(t[6])))
        out = st_sub(t[4], t[7]);
    release_all(t, 8);
    return out;
}
static st_tensor *build_rowsum_1k(void) { return st_sum(X1k, 1, (const int[]){-1}, 0); }
static st_tensor *build_rowsum_8k(void) { return st_sum(X8k, 1, (const int[]){-1}, 0); }
static st_tensor *build_colsum_1k(void) { return st_sum(X1k, 1, (const int[]){0}, 0); }
static st_tensor *build_sum_all(void) { return st_sum(X, 0, NULL, 0); }
static st_tensor *build_softmax_1k(void) { return st_softmax(X1k, -1); }
static st_tensor *build_softmax_8k(void) { return st_softmax(X8k, -1); }
static st_tensor *build_tiny(void) { return st_add_s(Xtiny, 1.0); }

/* Copies out (n floats) into hout; 0 (message printed) on failure. */
static int fetch(st_tensor *out, int64_t n) {
    if (st_to_host(out, ST_F32, hout, (size_t)n * sizeof(float)) == ST_OK) return 1;
    printf("  cannot read the result back: %s\n", st_last_error());
    return 0;
}

/* Relative errors |got - want| / (1 + |want|); NaN wins so a broken kernel cannot hide. */
static double worse(double maxerr, double got, double want, double scale) {
    double e = fabs(got - want) / (1.0 + scale);
    return e <= maxerr ? maxerr : e;
}

static double check_chain(st_tensor *out) {
    if (!fetch(out, N_ELEMS)) return INFINITY;
    double m = 0;
    for (int64_t i = 0; i < N_ELEMS; i++) {
        double x = hx[i], y = hy[i];
        double want = 1.0 / (1.0 + exp(-(x * 1.5 + y))) * tanh(y) - exp(-(x * x));
        m = worse(m, hout[i], want, fabs(want));
    }
    return m;
}

/* Row sums of x viewed as (rows, cols); the error is scaled by the row's sum of |x|. */
static double check_rowsum(st_tensor *out, int64_t rows, int64_t cols) {
    if (!fetch(out, rows)) return INFINITY;
    double m = 0;
    for (int64_t r = 0; r < rows; r++) {
        double s = 0, a = 0;
        for (int64_t c = 0; c < cols; c++) s += hx[r * cols + c], a += fabs(hx[r * cols + c]);
        m = worse(m, hout[r], s, a);
    }
    return m;
}
static double check_rowsum_1k(st_tensor *out) { return check_rowsum(out, N_ELEMS / 1024, 1024); }

/* Column sums of x viewed as (65536, 1024), every 13th column checked. */
static double check_colsum_1k(st_tensor *out) {
    if (!fetch(out, 1024)) return INFINITY;
    double m = 0;
    for (int64_t c = 0; c < 1024; c += 13) {
        double s = 0, a = 0;
        for (int64_t r = 0; r < N_ELEMS / 1024; r++) s += hx[r * 1024 + c], a += fabs(hx[r * 1024 + c]);
        m = worse(m, hout[c], s, a);
    }
    return m;
}

static double check_sum_all(st_tensor *out) {
    if (!fetch(out, 1)) return INFINITY;
    double s = 0, a = 0;
    for (int64_t i = 0; i < N_ELEMS; i++) s += hx[i], a += fabs(hx[i]);
    return worse(0, hout[0], s, a);
}
static double check_rowsum_8k(st_tensor *out) { return check_rowsum(out, 8192, 8192); }

/* Softmax rows, every 7th row checked (the whole output is read back). */
static double check_softmax(st_tensor *out, int64_t rows, int64_t cols) {
    if (!fetch(out, N_ELEMS)) return INFINITY;
    double m = 0;
    for (int64_t r = 0; r < rows; r += 7) {
        const float *x = hx + r * cols;
        double mx = -INFINITY, s = 0;
        for (int64_t c = 0; c < cols; c++) mx = x[c] > mx ? x[c] : mx;
        for (int64_t c = 0; c < cols; c++) s += exp(x[c] - mx);
        for (int64_t c = 0; c < cols; c++) m = worse(m, hout[r * cols + c], exp(x[c] - mx) / s, 0);
    }
    return m;
}
static double check_softmax_1k(st_tensor *out) { return check_softmax(out, N_ELEMS / 1024, 1024); }
static double check_softmax_8k(st_tensor *out) { return check_softmax(out, 8192, 8192); }

static double check_tiny(st_tensor *out) {
    if (!fetch(out, TINY_N)) return INFINITY;
    double m = 0;
    for (int i = 0; i < TINY_N; i++) m = worse(m, hout[i], (double)hx[i] + 1.0, fabs((double)hx[i] + 1.0));
    return m;
}

typedef struct bench_case {
    const char *name;
    build_fn build;
    check_fn check;
    double bytes;           /* minimal bytes moved by one iteration */
    /* filled in by run_case */
    double best_ms;
    uint64_t compiled;      /* kernels compiled by the cold call */
    double compile_ms;
} bench_case;

/* One iteration: record, realize, release; with a device synchronize when `sync`. */
static int one_iter(const bench_case *c, int sync) {
    st_tensor *y = c->build();
    st_status rc = y ? st_realize(1, &y) : st_last_status();
    st_release(y);
    if (rc != ST_OK) {
        printf("  %-11s FAILED: %s\n", c->name, st_last_error());
        return 0;
    }
    return sync ? gpu_sync() : 1;
}

/* Times the first (cold) call of c, then synced and pipelined warm iterations; checks a result. */
static int run_case(bench_case *c) {
    st_stats_t s0, s1, s2;
    st_stats(&s0);
    double t0 = now_s();
    if (!one_iter(c, 1)) return 0;
    double first = now_s() - t0;
    st_stats(&s1);
    for (int i = 0; i < 2; i++)  /* warm-up: allocator blocks, instruction caches, clocks */
        if (!one_iter(c, 1)) return 0;
    double t[MAX_ITERS];
    st_stats_t w0;
    st_stats(&w0);
    for (int i = 0; i < iters; i++) {
        t0 = now_s();
        if (!one_iter(c, 1)) return 0;
        t[i] = now_s() - t0;
    }
    st_stats(&s2);
    t0 = now_s();
    for (int i = 0; i < iters; i++)
        if (!one_iter(c, 0)) return 0;
    if (!gpu_sync()) return 0;
    double pipe = (now_s() - t0) / iters;

    st_tensor *y = c->build();
    double maxerr = INFINITY;
    if (y && st_realize(1, &y) == ST_OK) maxerr = c->check(y);
    else printf("  %-11s FAILED on the check run: %s\n", c->name, st_last_error());
    st_release(y);

    timing tm = summarize(t, iters);
    double launches = (double)(s2.kernels_launched - w0.kernels_launched) / iters;
    double host_ms = (s2.exec_ms - w0.exec_ms) / iters;
    c->best_ms = tm.best * 1e3;
    c->compiled = s1.kernels_compiled - s0.kernels_compiled;
    c->compile_ms = s1.compile_ms - s0.compile_ms;
    printf("  %-11s %8.1f GB/s best (%.3f ms), %8.1f median, %8.1f pipelined; %.1f launches/iter, "
           "host exec %.3f ms/iter; cold %.1f ms (%llu compiled, %.1f ms compile); max err %.2g\n",
           c->name, gbs(c->bytes, tm.best), c->best_ms, gbs(c->bytes, tm.median), gbs(c->bytes, pipe),
           launches, host_ms, first * 1e3, (unsigned long long)c->compiled, c->compile_ms, maxerr);
    put2(c->name, "gbs", gbs(c->bytes, tm.best));
    put2(c->name, "med_gbs", gbs(c->bytes, tm.median));
    put2(c->name, "pipe_gbs", gbs(c->bytes, pipe));
    put2(c->name, "best_ms", c->best_ms);
    put2(c->name, "first_ms", first * 1e3);
    put2(c->name, "compiled", (double)c->compiled);
    put2(c->name, "compile_ms", c->compile_ms);
    put2(c->name, "launches", launches);
    put2(c->name, "host_ms", host_ms);
    put2(c->name, "maxerr", maxerr);
    if (!(maxerr <= 1e-4)) printf("  %-11s WARNING: result differs from the reference (max err %.3g)\n", c->name, maxerr);
    return 1;
}

/* After st_shutdown: the same case once more, its kernels from the disk cache. */
static int run_cached(const bench_case *c, double *extra_ms, uint64_t *hits) {
    st_stats_t s0, s1;
    st_stats(&s0);
    double t0 = now_s();
    if (!one_iter(c, 1)) return 0;
    double ms = (now_s() - t0) * 1e3;
    st_stats(&s1);
    uint64_t disk = s1.cache_hits_disk - s0.cache_hits_disk, comp = s1.kernels_compiled - s0.kernels_compiled;
    printf("  %-11s first call %.2f ms (warm %.3f ms): %llu kernels from the disk cache, %llu compiled\n",
           c->name, ms, c->best_ms, (unsigned long long)disk, (unsigned long long)comp);
    put2(c->name, "cached_first_ms", ms);
    put2(c->name, "cached_disk_hits", (double)disk);
    put2(c->name, "cached_compiled", (double)comp);
    if (disk) { /* a case whose kernels an earlier case already loaded says nothing about loading */
        *extra_ms += ms - c->best_ms;
        *hits += disk;
    }
    return 1;
}

/* ---- baselines through the driver layer ---- */

/* cuda_copy_dtod of `bytes` between two fresh device buffers: synced best and pipelined. */
static int bench_copy(size_t bytes) {
    st_devptr a = 0, b = 0;
    if (cuda_mem_alloc(0, bytes, &a) != ST_OK || cuda_mem_alloc(0, bytes, &b) != ST_OK) {
        printf("  copy: cannot allocate 2 x %zu bytes: %s\n", bytes, st_last_error());
        cuda_mem_free(0, a);
        return 0;
    }
    int ok = 1;
    double t[MAX_ITERS], t0;
    for (int i = 0; i < 3 && ok; i++) ok = cuda_copy_dtod(0, b, a, bytes) == ST_OK && gpu_sync();
    for (int i = 0; i < iters && ok; i++) {
        t0 = now_s();
        ok = cuda_copy_dtod(0, b, a, bytes) == ST_OK && gpu_sync();
        t[i] = now_s() - t0;
    }
    t0 = now_s();
    for (int i = 0; i < iters && ok; i++) ok = cuda_copy_dtod(0, b, a, bytes) == ST_OK;
    ok = ok && gpu_sync();
    double pipe = (now_s() - t0) / iters;
    if (ok) {
        timing tm = summarize(t, iters);
        double moved = 2.0 * (double)bytes;
        printf("  %-11s %8.1f GB/s best (%.3f ms), %8.1f median, %8.1f pipelined  (cuda_copy_dtod, "
               "%zu MiB, counted as read + write)\n", "copy", gbs(moved, tm.best), tm.best * 1e3,
               gbs(moved, tm.median), gbs(moved, pipe), bytes >> 20);
        put("copy_gbs", gbs(moved, tm.best));
        put("copy_med_gbs", gbs(moved, tm.median));
        put("copy_pipe_gbs", gbs(moved, pipe));
        put("copy_best_ms", tm.best * 1e3);
    } else {
        printf("  copy: FAILED: %s\n", st_last_error());
    }
    cuda_mem_free(0, a);
    cuda_mem_free(0, b);
    return ok;
}

/* Host cost of a flush: TINY_LOOP flushes of x + 1 (1024 elements) back to back, one synchronize
 * at the end (the GPU runs each in a few µs, so the host is the bottleneck); the synced round trip;
 * and a bare driver enqueue (cuda_copy_dtod of 4 KiB) for scale. */
static int bench_launch(bench_case *tiny) {
    st_stats_t s0, s1;
    st_stats(&s0);
    double t0 = now_s();
    for (int i = 0; i < TINY_LOOP; i++)
        if (!one_iter(tiny, 0)) return 0;
    if (!gpu_sync()) return 0;
    double flush_us = (now_s() - t0) / TINY_LOOP * 1e6;
    st_stats(&s1);
    double launches = (double)(s1.kernels_launched - s0.kernels_launched) / TINY_LOOP;
    t0 = now_s();
    for (int i = 0; i < TINY_LOOP / 4; i++)
        if (!one_iter(tiny, 1)) return 0;
    double sync_us = (now_s() - t0) / (TINY_LOOP / 4) * 1e6;

    st_devptr a = 0, b = 0;
    double bare_us = NAN;
    if (cuda_mem_alloc(0, 4096, &a) == ST_OK && cuda_mem_alloc(0, 4096, &b) == ST_OK) {
        int ok = 1;
        t0 = now_s();
        for (int i = 0; i < TINY_LOOP && ok; i++) ok = cuda_copy_dtod(0, b, a, 4096) == ST_OK;
        if (ok && gpu_sync()) bare_us = (now_s() - t0) / TINY_LOOP * 1e6;
    }
    cuda_mem_free(0, a);
    cuda_mem_free(0, b);
    printf("  %-11s %.2f us per flush (x + 1, %d elements, %d flushes, %.2f launches/flush); %.2f us "
           "with a synchronize each; bare driver enqueue (4 KiB cuda_copy_dtod) %.2f us\n",
           "launch", flush_us, TINY_N, TINY_LOOP, launches, sync_us, bare_us);
    put("tiny_flush_us", flush_us);
    put("tiny_sync_us", sync_us);
    put("tiny_flush_launches", launches);
    if (!isnan(bare_us)) put("dtod4k_us", bare_us);
    return 1;
}

/* ---- setup ---- */

/* Deterministic inputs in [-3, 3) (a 64-bit LCG). */
static void fill_inputs(float *x, int64_t n, uint64_t s) {
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) * 0x1p-24 * 6.0 - 3.0);
    }
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* A fresh kernel cache directory for this run (removed at exit), so the cold call compiles. */
static char cache_dir[4096];
static int fresh_cache_dir(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(cache_dir, sizeof cache_dir, "%s/stitch-bench-cuda-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(cache_dir)) {
        perror(cache_dir);
        return 0;
    }
    setenv("ST_CACHE_DIR", cache_dir, 1);
    return 1;
}

static int make_inputs(void) {
    const int64_t n = N_ELEMS, s1[1] = {N_ELEMS}, s1k[2] = {N_ELEMS / 1024, 1024}, s8k[2] = {8192, 8192},
                  st[1] = {TINY_N};
    hx = malloc((size_t)n * sizeof(float));
    hy = malloc((size_t)n * sizeof(float));
    hout = malloc((size_t)n * sizeof(float));
    if (!hx || !hy || !hout) {
        printf("bench_cuda: out of host memory\n");
        return 0;
    }
    fill_inputs(hx, n, 0x9E3779B97F4A7C15ull);
    fill_inputs(hy, n, 0x2545F4914F6CDD1Dull);
    X = st_from_data(ST_F32, 1, s1, hx);
    Y = X ? st_from_data(ST_F32, 1, s1, hy) : NULL;
    Xtiny = Y ? st_from_data(ST_F32, 1, st, hx) : NULL;
    X1k = Xtiny ? st_view(X, 2, s1k) : NULL;
    X8k = X1k ? st_view(X, 2, s8k) : NULL;
    st_tensor *all[5] = {X, Y, Xtiny, X1k, X8k};
    if (!X8k || st_realize(5, all) != ST_OK || !gpu_sync()) {
        printf("bench_cuda: cannot create the inputs on the GPU: %s\n", st_last_error());
        return 0;
    }
    if (strncmp(st_device_of(X), "cuda", 4)) {
        printf("bench_cuda: the inputs landed on %s, not on the GPU\n", st_device_of(X));
        return 0;
    }
    return 1;
}

static void print_device(double init_ms) {
    const cuda_device_info *d = cuda_device(0);
    int v = cuda_driver_version();
    if (!d) return;
    printf("device: %s, sm_%d%d, %d SMs, %.1f GiB; driver CUDA %d.%d; context + stream set up in %.1f ms\n",
           d->name, d->cc_major, d->cc_minor, d->sm_count, (double)d->total_mem / (1u << 30), v / 1000,
           v % 1000 / 10, init_ms);
    put("sm_count", d->sm_count);
    put("cc", d->cc_major * 10 + d->cc_minor);
    put("cuda_init_ms", init_ms);
}

int main(int argc, char **argv) {
    int quick, rc = open_results(argc, argv, &quick);
    if (rc) return rc;
    if (quick) iters = 5;

    double t0 = now_s();
    if (st_set_default_device("cuda") != ST_OK) {
        printf("bench_cuda: no usable GPU (%s); skipped\n", st_last_error());
        put("cuda_skipped", 1);
        fclose(results);
        return 0;
    }
    print_device((now_s() - t0) * 1e3);
    if (!fresh_cache_dir()) return 1;
    if (!make_inputs()) {
        nftw(cache_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        return 1;
    }

    const double f4 = sizeof(float), n = N_ELEMS, r1k = N_ELEMS / 1024;
    bench_case cases[] = {
        {"chain", build_chain, check_chain, 3 * n * f4, 0, 0, 0},
        {"rowsum_1k", build_rowsum_1k, check_rowsum_1k, (n + r1k) * f4, 0, 0, 0},
        {"rowsum_8k", build_rowsum_8k, check_rowsum_8k, (n + 8192) * f4, 0, 0, 0},
        {"colsum_1k", build_colsum_1k, check_colsum_1k, (n + 1024) * f4, 0, 0, 0},
        {"sum_all", build_sum_all, check_sum_all, n * f4, 0, 0, 0},
        {"softmax_1k", build_softmax_1k, check_softmax_1k, 2 * n * f4, 0, 0, 0},
        {"softmax_8k", build_softmax_8k, check_softmax_8k, 2 * n * f4, 0, 0, 0},
        {"tiny", build_tiny, check_tiny, 2 * TINY_N * f4, 0, 0, 0},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);

    printf("GB/s = minimal bytes / wall time of one iteration; %d iterations, each ending with a device "
           "synchronize (best, median), then %d back to back (pipelined)\n", iters, iters);
    int ok = bench_copy((size_t)N_ELEMS * sizeof(float));
    uint64_t compiled = 0;
    double compile_ms = 0;
    for (int i = 0; i < ncases; i++) {
        ok &= run_case(&cases[i]);
        compiled += cases[i].compiled;
        compile_ms += cases[i].compile_ms;
    }
    ok &= bench_launch(&cases[ncases - 1]);
    printf("NVRTC (cold, fresh cache dir): %llu kernels compiled in %.1f ms: %.1f ms per kernel\n",
           (unsigned long long)compiled, compile_ms, compiled ? compile_ms / (double)compiled : NAN);
    put("kernels_compiled", (double)compiled);
    put("compile_ms", compile_ms);
    if (compiled) put("compile_ms_per_kernel", compile_ms / (double)compiled);

    /* Cached load: memory caches dropped, the inputs stay alive on the device. */
    printf("after st_shutdown (memory caches dropped, kernels from %s):\n", cache_dir);
    st_shutdown();
    double extra = 0;
    uint64_t hits = 0;
    for (int i = 0; i < ncases; i++) ok &= run_cached(&cases[i], &extra, &hits);
    if (hits) {
        printf("cached load: %.2f ms per kernel (first-call time above the warm time, cases with disk hits, %llu hits)\n",
               extra / (double)hits, (unsigned long long)hits);
        put("cached_load_ms_per_kernel", extra / (double)hits);
    }
    put("cache_hits_disk", (double)hits);

    st_tensor *all[5] = {X, Y, Xtiny, X1k, X8k};
    release_all(all, 5);
    st_shutdown();
    nftw(cache_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(hx);
    free(hy);
    free(hout);
    fclose(results);
    return ok ? 0 : 1;
}
