/*
 * test_runtime.c — the runtime around the ops, through the public API only: statistics
 * (flushes, kernels, bytes_in_use back to baseline: no leak over a 1000-step training-like loop
 * with in-place updates), st_reset_stats, st_sync, the trace-size bound (a 100k-op chain
 * auto-flushes and does not blow the stack), out of memory injected at every allocation of a small
 * program (an error or a success, never a crash or a leak), fusion counts (one kernel for
 * ((x+1)*2):exp():sum(2) and for a 20-op elementwise chain, in both tiers), a repeated step
 * compiling nothing, st_interrupt, in-place writes realized by the next flush whatever its targets
 * (a running statistic's versions do not chain across steps), and the host block cache (a step's released blocks are reused,
 * host_bytes_cached, st_empty_cache).
 *
 * Invariant: every test releases everything it made, so bytes_in_use returns to where it started.
 */
#include "test.h"
#include "fuzz_util.h"

#include <stdlib.h>

#define SH(...) ((const int64_t[]){__VA_ARGS__})

static st_stats_t stats(void) {
    st_stats_t s;
    st_stats(&s);
    return s;
}

static void defaults(void) {
    st_set_eager(0);
    st_set_jit_min(32768);
    st_debug_fail_alloc(0);
    st_clear_error();
}

static st_tensor *seq(st_dtype dt, int nd, const int64_t *shape, double scale) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = scale * (double)((i * 37) % 23 - 11) / 11.0;
    st_tensor *t = fu_make(dt, nd, shape, v);
    free(v);
    return t;
}

TEST(stats_and_sync) {
    defaults();
    uint64_t base = stats().bytes_in_use;
    st_tensor *x = seq(ST_F32, 2, SH(8, 16), 1);
    st_reset_stats();
    st_stats_t s0 = stats();
    CHECK_EQ_INT(s0.flushes, 0);
    CHECK_EQ_INT(s0.kernels_launched, 0);
    CHECK_EQ_INT(s0.bytes_peak, s0.bytes_in_use);
    st_tensor *a = st_add_s(x, 1), *b = st_mul_s(x, 2), *c = st_exp(b);
    CHECK(a && b && c);
    CHECK(!st_is_realized(a) && !st_is_realized(b) && !st_is_realized(c));
    CHECK(stats().nodes_recorded > 0);
    CHECK_EQ_INT(stats().flushes, 0);
    CHECK(st_sync() == ST_OK);
    CHECK(st_is_realized(a) && st_is_realized(b) && st_is_realized(c));
    st_stats_t s1 = stats();
    CHECK_EQ_INT(s1.flushes, 1);
    CHECK(s1.kernels_launched >= 1);
    CHECK(s1.bytes_in_use > s0.bytes_in_use);
    CHECK(s1.bytes_peak >= s1.bytes_in_use);
    double v;
    CHECK(st_item(c, &v) == ST_ERR_SHAPE);
    st_clear_error();
    CHECK(st_sync() == ST_OK);
    CHECK_EQ_INT(stats().flushes, 1); /* nothing pending: no flush */
    st_release(a);
    st_release(b);
    st_release(c);
    st_release(x);
    CHECK_EQ_INT(stats().bytes_in_use, base);
    st_reset_stats();
    CHECK_EQ_INT(stats().bytes_peak, base);
    CHECK_EQ_INT(stats().flushes, 0);
}

/* A flush frees each value it materialized after the last kernel that reads it when nothing
 * else holds it (fuser/exec.c release_dead): a chain of 8 products of (256, 256) f32 matrices
 * (256 KiB each, every product its own kernel) peaks at a few of them, not at all 8; a value a
 * tensor still holds is kept (and realized), so is a target. Values as with the whole chain kept. */
TEST(flush_frees_dead_values_early) {
    defaults();
    st_set_jit_min(0);
    const int64_t nb = 256 * 256 * 4;
    st_tensor *w = seq(ST_F32, 2, SH(256, 256), 0.06), *x = seq(ST_F32, 2, SH(256, 256), 1);
    CHECK(st_sync() == ST_OK);
    double want = 0;
    for (int pass = 0; pass < 2; pass++) {   /* pass 1: every step held by a tensor */
        st_tensor *held[8] = {0}, *h = st_retain(x);
        for (int i = 0; i < 8; i++) {
            st_tensor *m = st_matmul(h, w), *n = st_relu(m);   /* one kernel: relu is the epilogue */
            st_release(m);
            st_release(h);
            h = n;
            if (pass == 1) held[i] = st_retain(h);
        }
        st_tensor *total = st_sum(h, 0, NULL, 0);
        st_reset_stats();
        uint64_t base = stats().bytes_in_use;
        double v = 0;
        CHECK(st_item(total, &v) == ST_OK);
        uint64_t peak = stats().bytes_peak - base;
        if (pass == 0) {
            want = v;
            CHECK_MSG(peak <= (uint64_t)(4 * nb), "peak %llu bytes over 8 products of %lld bytes",
                      (unsigned long long)peak, (long long)nb);
        } else {
            CHECK_MSG(v == want, "sum %g with the steps held, %g without", v, want);
            CHECK_MSG(peak >= (uint64_t)(8 * nb), "held steps: peak %llu bytes", (unsigned long long)peak);
            for (int i = 0; i < 8; i++) {   /* the last is read by the sum only: inlined there */
                if (i < 7) CHECK_MSG(st_is_realized(held[i]), "step %d not realized", i);
                st_release(held[i]);
            }
        }
        st_release(total);
        st_release(h);
    }
    st_release(w);
    st_release(x);
    defaults();
}

/* One step of a tiny linear regression with a manual gradient and in-place SGD updates. Returns
 * the loss (pending) or NULL. */
static st_tensor *train_step(st_tensor *w, st_tensor *bias, st_tensor *x, st_tensor *y, double lr) {
    st_tensor *p = st_matmul(x, w), *q = p ? st_add(p, bias) : NULL, *d = q ? st_sub(q, y) : NULL;
    st_tensor *d2 = d ? st_square(d) : NULL;
    st_tensor *loss = d2 ? st_mean(d2, 0, NULL, 0) : NULL;
    st_tensor *xt = x ? st_transpose(x, 0, 1) : NULL;
    st_tensor *g = xt && d ? st_matmul(xt, d) : NULL;
    st_tensor *gs = g ? st_mul_s(g, 2.0 * lr / (double)st_numel(d)) : NULL;
    st_tensor *gb = d ? st_sum(d, 1, (int[]){0}, 0) : NULL;
    st_tensor *gbs = gb ? st_mul_s(gb, 2.0 * lr / (double)st_numel(d)) : NULL;
    st_status s = gs && gbs ? st_sub_(w, gs) : ST_ERR_INTERNAL;
    if (s == ST_OK) s = st_sub_(bias, gbs);
    st_tensor *both[2] = {w, bias};
    if (s == ST_OK) s = st_realize(2, both);
    st_release(p); st_release(q); st_release(d); st_release(d2); st_release(xt); st_release(g);
    st_release(gs); st_release(gb); st_release(gbs);
    if (s != ST_OK) {
        st_release(loss);
        return NULL;
    }
    return loss;
}

static void training_loop(int64_t jit_min) {
    defaults();
    st_set_jit_min(jit_min);
    uint64_t base = stats().bytes_in_use;
    st_manual_seed(3);
    st_tensor *x = st_randn(ST_F32, 2, SH(32, 8)), *wt = st_randn(ST_F32, 2, SH(8, 4));
    st_tensor *y = x && wt ? st_matmul(x, wt) : NULL;
    st_tensor *w = st_zeros(ST_F32, 2, SH(8, 4)), *bias = st_zeros(ST_F32, 1, SH(4));
    CHECK(x && wt && y && w && bias);
    if (!(x && wt && y && w && bias)) return;
    CHECK(st_realize(1, &y) == ST_OK);
    uint64_t at10 = 0, compiles2 = 0, kc2 = 0, plans2 = 0;
    double first = -1, last = -1;
    for (int it = 0; it < 1000; it++) {
        st_tensor *loss = train_step(w, bias, x, y, 0.05);
        if (!loss) {
            TEST_FAILF("step %d failed: %s", it, st_last_error());
            break;
        }
        if (it % 50 == 0 || it == 999) {
            double v;
            CHECK(st_item(loss, &v) == ST_OK);
            if (first < 0) first = v;
            last = v;
        }
        st_release(loss);
        if (it == 10) at10 = stats().bytes_in_use;
        /* warm-up: the step's plan and the every-50-steps loss read are each planned once and
         * compiled at their ST_JIT_HOT-th (3rd) run, the loss read's at step 100 */
        if (it == 150) {
            compiles2 = stats().compile_calls;
            kc2 = stats().kernels_compiled;
            plans2 = stats().plans_built;
        }
    }
    CHECK_MSG(stats().bytes_in_use <= at10, "memory grows: %llu bytes at step 10, %llu at step 1000",
              (unsigned long long)at10, (unsigned long long)stats().bytes_in_use);
    CHECK_MSG(last < first * 0.01, "loss did not go down: %g -> %g", first, last);
    CHECK_MSG(stats().compile_calls == compiles2 && stats().kernels_compiled == kc2,
              "a repeated step compiles: %llu compiler calls after step 150, %llu after step 1000",
              (unsigned long long)compiles2, (unsigned long long)stats().compile_calls);
    CHECK_MSG(stats().plans_built == plans2, "a repeated step plans: %llu plans built after step 150, %llu after "
              "step 1000", (unsigned long long)plans2, (unsigned long long)stats().plans_built);
    st_release(x); st_release(wt); st_release(y); st_release(w); st_release(bias);
    CHECK_MSG(stats().bytes_in_use == base, "leak: %llu bytes in use, %llu at the start",
              (unsigned long long)stats().bytes_in_use, (unsigned long long)base);
}
/* A state tensor written in place every step (a running mean: m = 0.9 m + 0.1 mean(x)) and a
 * flush that asks only for another value (the loss): the write is realized by that flush, so
 * versions do not chain (each would hold its step's x); a tensor dropped before any flush is
 * never computed. */
TEST(in_place_writes_realized_by_next_flush) {
    defaults();
    st_tensor *m = seq(ST_F32, 1, SH(16), 0), *decay = st_scalar(0.9, ST_F32);
    CHECK(st_sync() == ST_OK);
    int64_t live0 = 0;
    for (int step = 0; step < 6; step++) {
        st_tensor *x = seq(ST_F32, 2, SH(4, 16), 1 + step);
        st_tensor *mx = st_mean(x, 0, NULL, 0), *dm = st_mul(m, decay), *upd = st_add(dm, mx);
        st_release(dm);
        CHECK(st_mul_(mx, decay) == ST_OK);   /* a write to a temporary: never asked for */
        CHECK(st_copy_(m, upd) == ST_OK);
        st_release(upd);
        st_tensor *loss = st_sum(x, 0, NULL, 0);
        CHECK(!st_is_realized(m));
        CHECK(st_realize(1, &loss) == ST_OK);
        CHECK_MSG(st_is_realized(m), "step %d: the running mean is still pending", step);
        st_release(mx);
        st_release(loss);
        st_release(x);
        if (step == 1) live0 = (int64_t)stats().nodes_live;
        if (step > 1) CHECK_MSG((int64_t)stats().nodes_live == live0, "step %d: %lld nodes alive, %lld at step 1",
                                step, (long long)stats().nodes_live, (long long)live0);
    }
    /* a written tensor released before the flush: dropped, nothing computed for it */
    st_tensor *t = seq(ST_F32, 1, SH(16), 1);
    CHECK(st_sync() == ST_OK);
    CHECK(st_add_(t, decay) == ST_OK);
    st_release(t);
    uint64_t k0 = stats().kernels_launched;
    st_tensor *one = seq(ST_F32, 1, SH(4), 1), *two = st_add(one, one);
    CHECK(st_realize(1, &two) == ST_OK);
    CHECK(stats().kernels_launched - k0 == 1);
    st_release(one);
    st_release(two);
    /* a write whose value cannot be computed (a gather out of range) fails the next flush, once;
     * later flushes that do not read it run, and reading it raises the error again */
    st_tensor *src = seq(ST_F32, 1, SH(4), 1), *bad = seq(ST_F32, 1, SH(4), 0);
    int64_t ix[4] = {0, 1, 7, 2};
    st_tensor *idx0 = st_from_data(ST_I64, 1, SH(4), ix), *zero = st_scalar(0, ST_I64);
    CHECK(st_sync() == ST_OK);
    st_tensor *idx = st_add(idx0, zero);   /* computed: checked where the kernel reads it */
    st_release(idx0);
    st_release(zero);
    st_tensor *g = st_gather(src, 0, idx);
    CHECK(st_copy_(bad, g) == ST_OK);
    st_release(g);
    st_tensor *u = st_add(src, src), *v = st_mul(src, src);
    CHECK(st_realize(1, &u) != ST_OK);
    CHECK(st_realize(1, &v) == ST_OK);
    CHECK(st_realize(1, &bad) != ST_OK);
    st_release(u);
    st_release(v);
    st_release(bad);
    st_release(idx);
    st_release(src);
    st_clear_error();
    st_release(m);
    st_release(decay);
}

/* A step that releases 100 blocks of one size finds all of them cached for the next step (a
 * cache of 32 blocks returned 68 to the system, whose pages the next step faulted in again);
 * st_empty_cache returns them. */
TEST(released_blocks_are_reused) {
    defaults();
    st_empty_cache();
    enum { NB = 100 };
    const int64_t n = 16384;   /* 64 KiB */
    double *v = calloc((size_t)n, sizeof *v);
    st_tensor *t[NB];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < NB; i++) t[i] = fu_make(ST_F32, 1, &n, v);
        CHECK(stats().host_bytes_cached == 0);   /* round 1: every block came from the cache */
        for (int i = 0; i < NB; i++) st_release(t[i]);
        CHECK_MSG(stats().host_bytes_cached >= (uint64_t)NB * (uint64_t)n * 4,
                  "cached %llu bytes after releasing %d blocks of %lld", (unsigned long long)stats().host_bytes_cached,
                  NB, (long long)n * 4);
    }
    st_empty_cache();
    CHECK(stats().host_bytes_cached == 0);
    free(v);
}

TEST(training_loop_default) { training_loop(32768); }
TEST(training_loop_jit) { training_loop(0); }

TEST(trace_bound) {
    defaults();
    uint64_t base = stats().bytes_in_use;
    st_reset_stats();
    st_tensor *x = st_zeros(ST_F32, 1, SH(4));
    for (int i = 0; x && i < 100000; i++) {
        st_tensor *y = st_add_s(x, 1);
        st_release(x);
        x = y;
    }
    CHECK(x != NULL);
    if (!x) return;
    /* the chain was cut by automatic flushes (ST_TRACE_MAX, default 20000 pending nodes) */
    CHECK_MSG(stats().flushes >= 4, "%llu flushes for a 100k-op chain", (unsigned long long)stats().flushes);
    float out[4];
    CHECK(st_to_host(x, ST_F32, out, sizeof out) == ST_OK);
    CHECK_NEAR(out[0], 100000, 0);
    CHECK_NEAR(out[3], 100000, 0);
    st_release(x);
    /* a long chain of in-place updates on one tensor */
    st_tensor *w = st_zeros(ST_I64, 1, SH(3)), *one = st_ones(ST_I64, 1, SH(3));
    for (int i = 0; i < 50000; i++)
        if (st_add_(w, one) != ST_OK) {
            TEST_FAILF("add_ %d failed: %s", i, st_last_error());
            break;
        }
    int64_t v[3];
    CHECK(st_to_host(w, ST_I64, v, sizeof v) == ST_OK);
    CHECK_EQ_INT(v[2], 50000);
    st_release(w);
    st_release(one);
    /* a pending chain that is dropped without ever being computed frees cleanly */
    st_tensor *z = st_ones(ST_F32, 1, SH(2));
    for (int i = 0; z && i < 15000; i++) {
        st_tensor *y = st_mul_s(z, 1.0001);
        st_release(z);
        z = y;
    }
    st_release(z);
    CHECK_EQ_INT(stats().bytes_in_use, base);
}

/* The program run under injected allocation failures. Returns ST_OK and the result in out[6]. */
static st_status oom_program(double out[6]) {
    st_status s = ST_OK;
    st_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *f = NULL, *g = NULL, *h = NULL;
    static const double av[6] = {1, 2, 3, 4, 5, 6};
    st_manual_seed(11);
#define TRY(x) do { if (!(x)) { s = st_last_status(); goto done; } } while (0)
    TRY(a = fu_make(ST_F32, 2, SH(2, 3), av));
    TRY(b = st_rand(ST_F32, 2, SH(3, 3)));
    TRY(c = st_matmul(a, b));
    TRY(d = st_softmax(c, 1));
    TRY(e = st_add(d, a));
    TRY(f = st_slice(e, 1, 0, 3, 2));
    if ((s = st_fill_(f, 0.5)) != ST_OK) goto done;
    TRY(g = st_sum(e, 1, (int[]){0}, 1));
    TRY(h = st_add(e, g));
    s = st_to_host(h, ST_F64, out, 6 * sizeof(double));
done:
#undef TRY
    st_release(a); st_release(b); st_release(c); st_release(d);
    st_release(e); st_release(f); st_release(g); st_release(h);
    return s;
}

static void oom_sweep(int eager, int64_t jit_min) {
    defaults();
    st_set_eager(eager);
    st_set_jit_min(jit_min);
    double ref[6], out[6];
    uint64_t base = stats().bytes_in_use;
    CHECK(oom_program(ref) == ST_OK);
    int failures = 0;
    for (int n = 1; n <= 60; n++) {
        st_debug_fail_alloc(n);
        st_status s = oom_program(out);
        st_debug_fail_alloc(0);
        if (s != ST_OK) {
            failures++;
            CHECK_MSG(s == ST_ERR_OOM, "failing allocation %d: status %d (%s), expected ST_ERR_OOM", n, (int)s,
                      st_last_error());
        } else {
            for (int i = 0; i < 6; i++) CHECK_NEAR(out[i], ref[i], 1e-6);
        }
        st_clear_error();
        CHECK_MSG(stats().bytes_in_use == base, "failing allocation %d leaked %lld bytes", n,
                  (long long)(stats().bytes_in_use - base));
        /* the runtime still works */
        s = oom_program(out);
        CHECK_MSG(s == ST_OK, "after failing allocation %d the program fails: %s", n, st_last_error());
        for (int i = 0; i < 6 && s == ST_OK; i++) CHECK_NEAR(out[i], ref[i], 1e-6);
        if (test_cur_failed) return;
    }
    CHECK_MSG(failures > 10, "only %d of 60 injected failures were reported", failures);
}
TEST(oom_fused_jit) { oom_sweep(0, 0); }
TEST(oom_default) { oom_sweep(0, 32768); }
TEST(oom_eager) { oom_sweep(1, 32768); }

/* Kernels launched by the one flush that computes `t`. */
static uint64_t kernels_for(st_tensor *t, int *ok) {
    st_reset_stats();
    int64_t n = st_numel(t);
    double *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
    *ok = st_to_host(t, ST_F64, buf, (size_t)n * sizeof *buf) == ST_OK && stats().flushes == 1;
    free(buf);
    return stats().kernels_launched;
}

static void kernel_counts(int64_t jit_min) {
    defaults();
    st_set_jit_min(jit_min);
    st_tensor *x = seq(ST_F32, 3, SH(4, 8, 16), 1);
    int ok;
    /* ((x+1)*2):exp():sum(2) */
    st_tensor *a = st_add_s(x, 1), *b = st_mul_s(a, 2), *c = st_exp(b), *s = st_sum(c, 1, (int[]){2}, 0);
    st_release(a); st_release(b); st_release(c);
    uint64_t k = kernels_for(s, &ok);
    CHECK(ok);
    CHECK_MSG(k == 1, "((x+1)*2):exp():sum(2) took %llu kernels", (unsigned long long)k);
    /* the value */
    double v;
    st_tensor *s00 = st_select(s, 0, 0);
    st_tensor *s0 = s00 ? st_select(s00, 0, 0) : NULL;
    float xv[16];
    st_tensor *row = st_select(x, 0, 0);
    st_tensor *r0 = row ? st_select(row, 0, 0) : NULL;
    if (s0 && r0 && st_item(s0, &v) == ST_OK && st_to_host(r0, ST_F32, xv, sizeof xv) == ST_OK) {
        double want = 0;
        for (int i = 0; i < 16; i++) want += exp((xv[i] + 1.0) * 2.0);
        CHECK_NEAR(v, want, 1e-5);
    } else {
        TEST_FAILF("reading the sum failed: %s", st_last_error());
    }
    st_release(s0); st_release(s00); st_release(r0); st_release(row); st_release(s);
    /* a 20-op elementwise chain */
    st_tensor *y = st_retain(x);
    for (int i = 0; y && i < 20; i++) {
        st_tensor *z = i % 4 == 0 ? st_add_s(y, 0.5) : i % 4 == 1 ? st_tanh(y) : i % 4 == 2 ? st_mul_s(y, 1.5) : st_sigmoid(y);
        st_release(y);
        y = z;
    }
    CHECK(y != NULL);
    if (y) {
        k = kernels_for(y, &ok);
        CHECK(ok);
        CHECK_MSG(k == 1, "a 20-op elementwise chain took %llu kernels", (unsigned long long)k);
    }
    st_release(y);
    /* softmax: one kernel (DESIGN.md: reduction stitching) */
    st_tensor *sm = st_softmax(x, -1);
    k = kernels_for(sm, &ok);
    CHECK(ok);
    CHECK_MSG(k == 1, "softmax took %llu kernels", (unsigned long long)k);
    st_release(sm);
    st_release(x);
}
TEST(kernels_jit) { kernel_counts(0); }
TEST(kernels_default_tier) { kernel_counts(32768); }

TEST(repeat_compiles_nothing) {
    defaults();
    st_set_jit_min(0);
    st_tensor *x = seq(ST_F32, 2, SH(16, 16), 1);
    uint64_t calls = 0, compiled = 0;
    for (int it = 0; it < 5; it++) {
        /* a new user scalar each step: a kernel parameter, not a recompile */
        st_tensor *a = st_mul_s(x, 0.5 + it), *b = st_gelu(a), *c = st_sum(b, 1, (int[]){1}, 0);
        float out[16];
        CHECK(c && st_to_host(c, ST_F32, out, sizeof out) == ST_OK);
        st_release(a); st_release(b); st_release(c);
        if (it == 0) { calls = stats().compile_calls; compiled = stats().kernels_compiled; }
    }
    CHECK_MSG(stats().compile_calls == calls && stats().kernels_compiled == compiled,
              "repeating a step with a new scalar compiled again (%llu -> %llu compiler calls)",
              (unsigned long long)calls, (unsigned long long)stats().compile_calls);
    st_release(x);
}

static void interrupt_case(int eager) {
    defaults();
    st_set_eager(eager);
    st_tensor *x = seq(ST_F32, 1, SH(64), 1);
    st_interrupt();
    st_tensor *y = st_exp(x);
    float out[64];
    if (eager) {
        /* eager: the op's own flush is interrupted */
        CHECK_MSG(y == NULL && st_last_status() == ST_ERR_INTERRUPT,
                  "eager op after st_interrupt: %s (status %d)", y ? "succeeded" : st_last_error(),
                  (int)st_last_status());
    } else {
        CHECK(y != NULL);
        st_status s = y ? st_to_host(y, ST_F32, out, sizeof out) : ST_ERR_INTERNAL;
        CHECK_MSG(s == ST_ERR_INTERRUPT, "flush after st_interrupt: status %d (%s)", (int)s, st_last_error());
    }
    st_clear_error();
    /* and then it works again */
    st_tensor *z = y ? st_retain(y) : st_exp(x);
    CHECK(z && st_to_host(z, ST_F32, out, sizeof out) == ST_OK);
    float xv[64];
    CHECK(st_to_host(x, ST_F32, xv, sizeof xv) == ST_OK);
    CHECK_NEAR(out[5], expf(xv[5]), 1e-6);
    st_release(z);
    st_release(y);
    st_release(x);
}
TEST(interrupt_lazy) { interrupt_case(0); }
TEST(interrupt_eager) { interrupt_case(1); }

int main(void) {
    st_set_poison(1);
    RUN(stats_and_sync);
    RUN(flush_frees_dead_values_early);
    RUN(released_blocks_are_reused);
    RUN(in_place_writes_realized_by_next_flush);
    RUN(training_loop_default);
    RUN(training_loop_jit);
    RUN(trace_bound);
    RUN(oom_fused_jit);
    RUN(oom_default);
    RUN(oom_eager);
    RUN(kernels_jit);
    RUN(kernels_default_tier);
    RUN(repeat_compiles_nothing);
    RUN(interrupt_lazy);
    RUN(interrupt_eager);
    defaults();
    st_shutdown();
    TEST_MAIN_END();
}
