/*
 * bench_plan.c — what the plan cache saves per flush: a region of small kernels flushed again and
 * again with its kernels already compiled, once with the plan cache (a hit: key, lookup, buffers,
 * launches) and once without it (ST_PLAN_CACHE=0's path: partition, lowering, rendering, hashing
 * every source for the kernel cache, then the same launches).
 *
 *   bench_plan RESULTS_FILE [--quick]
 *
 * The region: LAYERS rounds of x = softmax(x * c_k, dim) + 0.5 * tanh(x), alternating dim 1 and 0
 * over an (ROWS, COLS) f32 tensor (reductions over other rows cannot stitch: one kernel per round
 * at least), c_k a new scalar every flush (a kernel parameter: the cache refreshes it). Only the
 * flush (st_realize) is timed; recording the ops is timed apart. Results: µs per flush and per
 * kernel, best and median of REPS flushes.
 */
#include "stitch.h"
#include "fuser/fuser.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *results;
#include "bench_util.h"

enum { ROWS = 16, COLS = 64, LAYERS = 16 };

static st_tensor *layer(st_tensor *x, double c, int dim) {
    st_tensor *xc = st_mul_s(x, c), *sm = st_softmax(xc, dim), *th = st_tanh(x), *h = st_mul_s(th, 0.5);
    st_tensor *y = st_add(sm, h);
    st_release(xc);
    st_release(sm);
    st_release(th);
    st_release(h);
    return y;
}

/* One flush of the region; *rec_s and *flush_s get the record and flush times. */
static int step(st_tensor *x0, int it, double *rec_s, double *flush_s, uint64_t *kernels) {
    double t0 = now_s();
    st_tensor *x = st_clone(x0);
    for (int k = 0; k < LAYERS; k++) {
        st_tensor *y = layer(x, 1.0 + 0.001 * (it + k), k & 1);
        st_release(x);
        x = y;
    }
    st_stats_t s0, s1;
    st_stats(&s0);
    double t1 = now_s();
    st_status s = st_realize(1, &x);
    double t2 = now_s();
    st_stats(&s1);
    st_release(x);
    *rec_s = t1 - t0;
    *flush_s = t2 - t1;
    *kernels = s1.kernels_launched - s0.kernels_launched;
    if (s != ST_OK) printf("  flush failed: %s\n", st_last_error());
    return s == ST_OK ? 0 : 1;
}

static int measure(const char *name, st_tensor *x0, int reps, int cache_on) {
    fuse_pcache_set_enabled(cache_on);
    double rec, fl, *t = malloc((size_t)reps * sizeof *t), *r = malloc((size_t)reps * sizeof *r);
    uint64_t k = 0;
    st_stats_t s0, s1;
    for (int i = 0; i < 3; i++)
        if (step(x0, i, &rec, &fl, &k)) return 1;   /* warm: kernels compiled, plan cached */
    st_stats(&s0);
    for (int i = 0; i < reps; i++) {
        if (step(x0, i, &r[i], &t[i], &k)) return 1;
    }
    st_stats(&s1);
    timing tf = summarize(t, reps), tr = summarize(r, reps);
    printf("  %-22s %3llu kernels  flush %8.1f us (best %7.1f)  %6.2f us/kernel  record %6.1f us  "
           "[%llu plans built, %llu cached, %llu compiled]\n",
           name, (unsigned long long)k, tf.median * 1e6, tf.best * 1e6, tf.median * 1e6 / (double)k, tr.median * 1e6,
           (unsigned long long)(s1.plans_built - s0.plans_built),
           (unsigned long long)(s1.plan_cache_hits - s0.plan_cache_hits),
           (unsigned long long)(s1.kernels_compiled - s0.kernels_compiled));
    char key[64];
    snprintf(key, sizeof key, "plan_%s_flush_us", name);
    put(key, tf.median * 1e6);
    snprintf(key, sizeof key, "plan_%s_us_per_kernel", name);
    put(key, tf.median * 1e6 / (double)k);
    free(t);
    free(r);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_plan RESULTS_FILE [--quick]\n");
        return 2;
    }
    results = fopen(argv[1], "a");
    if (!results) return 1;
    int reps = argc > 2 && !strcmp(argv[2], "--quick") ? 50 : 400;
    st_set_jit_min(0);
    int64_t shape[2] = {ROWS, COLS};
    st_manual_seed(1);
    st_tensor *x0 = st_randn(ST_F32, 2, shape);
    st_realize(1, &x0);
    printf("plan cache: %d layers over (%d, %d) f32, %d flushes each\n", LAYERS, ROWS, COLS, reps);
    int rc = measure("hit", x0, reps, 1) || measure("miss_warm_kernels", x0, reps, 0) || measure("hit_again", x0, reps, 1);
    st_release(x0);
    st_shutdown();
    fclose(results);
    return rc;
}
