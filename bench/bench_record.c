/*
 * bench_record.c — the cost of recording one op from C (no flush, no kernel: just the trace).
 *
 *   bench_record RESULTS_FILE [--quick]
 *
 * Variants, each over OPS ops on a realized 1-element f32 tensor x (after a warm-up):
 *   scalar   y = st_add_s(x, 1); st_release(y)     the op a user writes most (`x + 1`): it records a
 *            weak CONST node for the 1 and the ADD node, makes a handle, then frees it all again.
 *            Nothing stays pending, so no auto-flush can run: this is the pure record cost, and
 *            the number reported against the <= 1 us goal.
 *   tensor   y = st_add(x, one); st_release(y)     binary op on two existing tensors (no CONST).
 *   chain    y = st_add_s(y, 1), keeping y         nodes stay pending, so the runtime auto-flushes
 *            every ST_TRACE_MAX pending nodes (default 20000); the per-op time then includes those
 *            flushes, amortized. Shown for information (record + execute), run on CHAIN_OPS ops.
 * Invariant: nothing syncs inside a timed loop except the runtime's own auto-flush (chain).
 */
#include "stitch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static FILE *results;
#include "bench_util.h"

static int fail(const char *what) {
    printf("  %s FAILED: %s\n", what, st_last_error());
    return 1;
}

/* Each run_* times `ops` ops of one variant and stores microseconds per op in *us. */
static int run_scalar(st_tensor *x, long ops, double *us) {
    double t0 = now_s();
    for (long i = 0; i < ops; i++) {
        st_tensor *y = st_add_s(x, 1.0);
        if (!y) return fail("scalar");
        st_release(y);
    }
    *us = (now_s() - t0) / (double)ops * 1e6;
    return 0;
}

static int run_tensor(st_tensor *x, st_tensor *one, long ops, double *us) {
    double t0 = now_s();
    for (long i = 0; i < ops; i++) {
        st_tensor *y = st_add(x, one);
        if (!y) return fail("tensor");
        st_release(y);
    }
    *us = (now_s() - t0) / (double)ops * 1e6;
    return 0;
}

static int run_chain(st_tensor *x, long ops, double *us, double *value) {
    st_tensor *y = st_retain(x);
    double t0 = now_s();
    for (long i = 0; i < ops; i++) {
        st_tensor *z = st_add_s(y, 1.0);
        st_release(y);
        if (!z) return fail("chain");
        y = z;
    }
    *us = (now_s() - t0) / (double)ops * 1e6;
    /* Outside the timed part: check that the chain really computed x + ops. */
    st_status rc = st_item(y, value);
    st_release(y);
    return rc == ST_OK ? 0 : fail("chain item");
}

int main(int argc, char **argv) {
    int quick, rc = open_results(argc, argv, &quick);
    if (rc) return rc;
    long ops = quick ? 100000 : 1000000, chain_ops = quick ? 40000 : 200000;
    int reps = quick ? 1 : 3;

    const int64_t shape[1] = {1};
    st_tensor *x = st_full(ST_F32, 1, shape, 2.0);
    st_tensor *one = st_full(ST_F32, 1, shape, 1.0);
    if (!x || !one || st_realize(1, &x) != ST_OK || st_realize(1, &one) != ST_OK)
        return fail("setup");

    double us, best_scalar = 1e30, best_tensor = 1e30, chain_us = 0, chain_val = 0;
    st_stats_t s0, s1;
    if (run_scalar(x, 10000, &us) || run_tensor(x, one, 10000, &us)) return 1; /* warm-up */
    st_stats(&s0);
    for (int r = 0; r < reps; r++) {
        if (run_scalar(x, ops, &us)) return 1;
        if (us < best_scalar) best_scalar = us;
        if (run_tensor(x, one, ops, &us)) return 1;
        if (us < best_tensor) best_tensor = us;
    }
    st_stats(&s1);
    unsigned long long flushes = (unsigned long long)(s1.flushes - s0.flushes);
    printf("  C scalar  y = x + 1, release: %.3f us/op (best of %d x %ld ops; %llu flushes)\n",
           best_scalar, reps, ops, flushes);
    printf("  C tensor  y = x + t, release: %.3f us/op\n", best_tensor);
    fprintf(results, "c_record_us %.6g\nc_record_tensor_us %.6g\nc_record_flushes %llu\n",
            best_scalar, best_tensor, flushes);

    st_stats(&s0);
    if (run_chain(x, chain_ops, &chain_us, &chain_val)) return 1;
    st_stats(&s1);
    printf("  C chain   y = y + 1 kept:     %.3f us/op incl. %llu auto-flushes over %ld ops "
           "(value %.0f, expected %.0f)\n",
           chain_us, (unsigned long long)(s1.flushes - s0.flushes), chain_ops, chain_val,
           2.0 + (double)chain_ops);
    fprintf(results, "c_record_chain_us %.6g\nc_record_chain_flushes %llu\nc_record_chain_ok %d\n",
            chain_us, (unsigned long long)(s1.flushes - s0.flushes),
            chain_val == 2.0 + (double)chain_ops);
    st_release(x);
    st_release(one);
    st_shutdown();
    fclose(results);
    return 0;
}
