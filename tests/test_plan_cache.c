/*
 * test_plan_cache.c — the plan cache (fuser/plan_cache.c): a region repeated with new data and
 * new user scalars plans nothing and compiles nothing, and still gives the interpreter's answer;
 * anything structural (a shape, a fusion flag, the in-place test of a write) misses.
 *
 * Every graph is built lazily (st_set_jit_min(0): every region is compiled, so cacheable) and
 * checked against the same graph built with st_set_eager(1) (the reference interpreter). Counts
 * come from st_stats deltas around the lazy flush. The JIT uses a fresh ST_CACHE_DIR.
 */
#include "runtime/tensor.h"
#include "fuser/fuser.h"
#include "fuse_test_util.h"

#include <stdlib.h>

static st_tensor *input(int64_t rows, int64_t cols, unsigned seed) {
    st_tensor *t = ft_f32_input(2, (int64_t[]){rows, cols}, seed);
    st_realize(1, &t);
    return t;
}

static void check_same(st_tensor *got, st_tensor *want, double tol) {
    CHECK_EQ_INT(st_numel(got), st_numel(want));
    double *g = ft_host(got), *w = ft_host(want);
    CHECK(g && w);
    for (int64_t i = 0; g && w && i < st_numel(got); i++) CHECK_NEAR(g[i], w[i], tol);
    free(g);
    free(w);
}

typedef struct delta { uint64_t built, hits, compiled, launched; } delta;
static st_stats_t mark;
static void begin(void) { st_stats(&mark); }
static delta end(void) {
    st_stats_t s;
    st_stats(&s);
    return (delta){s.plans_built - mark.plans_built, s.plan_cache_hits - mark.plan_cache_hits,
                   s.kernels_compiled - mark.kernels_compiled, s.kernels_launched - mark.kernels_launched};
}

/* Several groups with user scalars: out[0] = softmax(x * c, 1) + tanh(x - c - 1.5) (a stitched
 * reduction with an elementwise tail), out[1] = its row sums plus an iota (arange) per row, out[2]
 * = x * U[0, 1) noise (a RAND source). On the CPU they share one launch (the row sums' group
 * and the noise's are independent and small: a horizontal batch with a reduce member), so the hit
 * below also replays such a batch. */
static void build(st_tensor *x, double c, st_tensor **out) {
    st_tensor *xc = st_mul_s(x, c), *sm = st_softmax(xc, 1), *xs = st_sub_s(x, c + 1.5), *th = st_tanh(xs);
    out[0] = st_add(sm, th);
    int ax = 1;
    st_tensor *rs = st_sum(out[0], 1, &ax, 0);
    st_tensor *io = st_arange(c, c + (double)st_numel(rs) * 0.5 - 1e-9, 0.5, ST_F32);
    out[1] = st_add(rs, io);
    int64_t shape[ST_MAX_DIMS];
    st_shape(x, shape);
    st_tensor *u = st_rand(ST_F32, 2, shape);
    out[2] = st_mul(x, u);
    st_release(xc);
    st_release(sm);
    st_release(xs);
    st_release(th);
    st_release(rs);
    st_release(io);
    st_release(u);
}

/* Runs build lazily and eagerly (same RNG seed); checks values; returns the lazy flush's counts. */
static delta run_checked(st_tensor *x, double c, uint64_t seed, st_tensor **keep) {
    st_tensor *ref[3], *out[3];
    st_set_eager(1);
    st_manual_seed(seed);
    build(x, c, ref);
    st_set_eager(0);
    st_manual_seed(seed);
    build(x, c, out);
    begin();
    CHECK(st_realize(3, out) == ST_OK);
    delta d = end();
    for (int i = 0; i < 3; i++) check_same(out[i], ref[i], 1e-5);
    for (int i = 0; i < 3; i++) {
        st_release(ref[i]);
        if (keep && i == 2) keep[0] = out[i];
        else st_release(out[i]);
    }
    return d;
}

TEST(repeat_with_new_scalars_and_data_plans_nothing) {
    st_tensor *x1 = input(48, 200, 1), *x2 = input(48, 200, 2), *n1 = NULL, *n2 = NULL;
    delta a = run_checked(x1, 0.5, 7, &n1);
    CHECK_EQ_INT(a.built, 1);
    CHECK(a.launched >= 1);
    delta b = run_checked(x2, 2.0, 8, &n2);
    CHECK_EQ_INT(b.built, 0);
    CHECK_EQ_INT(b.hits, 1);
    CHECK_EQ_INT(b.compiled, 0);
    CHECK_EQ_INT(b.launched, a.launched);
    /* the RAND node got a new seed on the hit: other noise (x1 = x2 would not matter: x differs) */
    double *v1 = ft_host(n1), *v2 = ft_host(n2), *xa = ft_host(x1), *xb = ft_host(x2);
    int differ = 0;
    for (int i = 0; v1 && v2 && xa && xb && i < 48 * 200; i++) differ += v1[i] / xa[i] != v2[i] / xb[i];
    CHECK(differ > 48 * 200 / 2);
    free(v1);
    free(v2);
    free(xa);
    free(xb);
    /* a third run with the first run's inputs and seed: a hit, the first run's numbers */
    st_tensor *n3 = NULL;
    delta c = run_checked(x1, 0.5, 7, &n3);
    CHECK_EQ_INT(c.hits, 1);
    check_same(n3, n1, 0);
    st_release(n1);
    st_release(n2);
    st_release(n3);
    st_release(x1);
    st_release(x2);
}

TEST(new_shape_misses_without_compiling) {
    st_tensor *x1 = input(32, 100, 3), *x2 = input(32, 101, 4), *x3 = input(33, 101, 5);
    run_checked(x1, 1.0, 1, NULL);
    delta a = run_checked(x2, 1.0, 1, NULL);
    CHECK_EQ_INT(a.built, 1);
    CHECK_EQ_INT(a.hits, 0);
    CHECK_EQ_INT(a.compiled, 0);   /* sizes are kernel parameters */
    delta b = run_checked(x3, 1.0, 1, NULL);
    CHECK_EQ_INT(b.built, 1);
    CHECK_EQ_INT(b.compiled, 0);
    delta c = run_checked(x2, 3.0, 2, NULL);
    CHECK_EQ_INT(c.hits, 1);
    st_release(x1);
    st_release(x2);
    st_release(x3);
}

TEST(fusion_flags_are_part_of_the_key) {
    st_tensor *x = input(16, 64, 6);
    run_checked(x, 1.0, 1, NULL);
    CHECK_EQ_INT(run_checked(x, 1.0, 1, NULL).hits, 1);
    fuse_set_flags(FUSE_ALL & ~FUSE_STITCH);
    delta a = run_checked(x, 1.0, 1, NULL);
    CHECK_EQ_INT(a.built, 1);
    CHECK_EQ_INT(a.hits, 0);
    CHECK_EQ_INT(run_checked(x, 2.0, 1, NULL).hits, 1);
    fuse_set_flags(FUSE_ALL);
    CHECK_EQ_INT(run_checked(x, 1.0, 1, NULL).hits, 1);
    st_release(x);
}

/* x[1:3, :] = v * s on a realized x. In place when x's buffer is held by x alone; a clone of a
 * realized tensor shares its buffer, so writing into the clone must copy (else x0 would change).
 * Same structure otherwise: the in-place test is part of the key. *in_place: whether x kept its
 * buffer. */
static delta setview_run(st_tensor *v, double s, int shared, int *in_place) {
    st_tensor *x0 = input(6, 40, 9), *x = shared ? st_clone(x0) : st_mul_s(x0, 1.0);
    st_realize(1, &x);
    const void *before = x->storage->node->buf->data;
    st_tensor *vs = st_mul_s(v, s), *sl = st_slice(x, 0, 1, 3, 1);
    CHECK(st_copy_(sl, vs) == ST_OK);
    st_release(sl);
    begin();
    CHECK(st_realize(1, &x) == ST_OK);
    delta d = end();
    *in_place = x->storage->node->buf->data == before;
    double *xv = ft_host(x), *x0v = ft_host(x0), *vv = ft_host(v);
    double *x0w = NULL;   /* x0 as it was made: input() again */
    st_tensor *x0again = input(6, 40, 9);
    x0w = ft_host(x0again);
    st_release(x0again);
    for (int i = 0; xv && x0v && vv && x0w && i < 6 * 40; i++) {
        CHECK_NEAR(xv[i], (i >= 40 && i < 120) ? (double)(float)(vv[i - 40] * s) : x0w[i], 1e-6);
        CHECK_NEAR(x0v[i], x0w[i], 0);   /* the write never reaches x0 */
    }
    free(x0w);
    free(xv);
    free(x0v);
    free(vv);
    st_release(vs);
    st_release(x);
    st_release(x0);
    return d;
}

TEST(setview_in_place_and_copy_are_different_plans) {
    st_tensor *v = input(2, 40, 10);
    int inplace = -1;
    CHECK_EQ_INT(setview_run(v, 1.5, 0, &inplace).built, 1);
    CHECK_EQ_INT(inplace, 1);
    delta a = setview_run(v, 2.5, 0, &inplace);
    CHECK_EQ_INT(a.hits, 1);
    CHECK_EQ_INT(a.built, 0);
    CHECK_EQ_INT(inplace, 1);
    delta b = setview_run(v, 3.5, 1, &inplace);   /* a clone: must not reuse the in-place plan */
    CHECK_EQ_INT(b.hits, 0);
    CHECK_EQ_INT(b.built, 1);
    CHECK_EQ_INT(inplace, 0);
    delta c = setview_run(v, 4.5, 1, &inplace);
    CHECK_EQ_INT(c.hits, 1);
    CHECK_EQ_INT(inplace, 0);
    st_release(v);
}

/* The cost model (partition.c store_kept_rows) stores a row value a handle keeps alive: here the
 * row means m of sum((x - m)^2), computed by the row kernel and, when held, also written by it.
 * Whether m is held is in the key: each plan is reused only when the same is true again, and a
 * held m is already realized after the flush (realizing it then launches nothing). */
static delta kept_run(st_tensor *x, int hold, uint64_t *later) {
    int ax = 1;
    st_tensor *s = st_sum(x, 1, &ax, 1), *m = st_mul_s(s, 0.5), *d = st_sub(x, m), *d2 = st_mul(d, d);
    st_tensor *y = st_sum(d2, 0, NULL, 0);
    st_release(s);
    st_release(d);
    st_release(d2);
    if (!hold) st_release(m);
    begin();
    CHECK(st_realize(1, &y) == ST_OK);
    delta r = end();
    if (hold) {
        begin();
        CHECK(st_realize(1, &m) == ST_OK);
        *later = end().launched;
        st_set_eager(1);
        st_tensor *s2 = st_sum(x, 1, &ax, 1), *want = st_mul_s(s2, 0.5);
        st_set_eager(0);
        check_same(m, want, 1e-5);
        st_release(s2);
        st_release(want);
        st_release(m);
    }
    st_release(y);
    return r;
}

TEST(kept_row_value_is_part_of_the_key) {
    st_tensor *x = input(16, 64, 12);
    uint64_t later = 99;
    CHECK_EQ_INT(kept_run(x, 0, NULL).built, 1);
    delta a = kept_run(x, 1, &later);
    CHECK_EQ_INT(a.built, 1);
    CHECK_EQ_INT(a.hits, 0);
    CHECK_EQ_INT(later, 0);
    later = 99;
    CHECK_EQ_INT(kept_run(x, 1, &later).hits, 1);
    CHECK_EQ_INT(later, 0);
    CHECK_EQ_INT(kept_run(x, 0, NULL).hits, 1);
    st_release(x);
}

/* x + 3 * float(arange(start, .., step) as i64) per row: lazily and by the interpreter; the
 * lazy flush's counts. */
static delta iota_run(st_tensor *x, double start, double step) {
    int64_t c = st_numel(x) / 16;
    st_tensor *out[2];
    for (int e = 1; e >= 0; e--) {
        st_set_eager(e);
        st_tensor *io = st_arange(start, start + (double)c * step - step / 2, step, ST_I64);
        st_tensor *m = st_mul_s(io, 3), *f = st_cast(m, ST_F32);
        out[e] = st_add(x, f);
        st_release(io);
        st_release(m);
        st_release(f);
    }
    begin();
    CHECK(st_realize(1, &out[0]) == ST_OK);
    delta d = end();
    check_same(out[0], out[1], 0);
    st_release(out[0]);
    st_release(out[1]);
    return d;
}

/* An i64 arange with integer start and step lowers in i64 arithmetic (lower.c
 * fuse_iota_integral), so whether it does is part of the key: a hit refreshes start and step as
 * integers; a fractional start or step (truncated per element, as the interpreter does) plans
 * its own f64 kernel. */
TEST(integral_iota_is_part_of_the_key) {
    st_tensor *x = input(16, 40, 13);
    CHECK_EQ_INT(iota_run(x, 2, 3).built, 1);
    delta a = iota_run(x, -5, 7);
    CHECK_EQ_INT(a.hits, 1);
    CHECK_EQ_INT(a.built, 0);
    delta b = iota_run(x, 0.5, 1.5);   /* 0, 2, 3, 5, ...: as integers 0, 1, 2, ... */
    CHECK_EQ_INT(b.built, 1);
    CHECK_EQ_INT(b.hits, 0);
    CHECK_EQ_INT(iota_run(x, 1.25, -0.5).hits, 1);
    CHECK_EQ_INT(iota_run(x, 4, 1).hits, 1);
    st_release(x);
}

TEST(disabled_cache_plans_every_flush) {
    st_tensor *x = input(16, 64, 11);
    fuse_pcache_set_enabled(false);
    run_checked(x, 1.0, 1, NULL);
    delta a = run_checked(x, 2.0, 2, NULL);
    CHECK_EQ_INT(a.built, 1);
    CHECK_EQ_INT(a.hits, 0);
    CHECK_EQ_INT(a.compiled, 0);
    fuse_pcache_set_enabled(true);
    st_release(x);
}

/* A small region (the interpreter tier: work < jit_min, kernels not compiled) is cached too, and
 * compiled once its entry is hot (st_rt.jit_hot runs); with jit_hot 0 it never compiles. Each
 * run checked against the reference interpreter, with new scalars. */
typedef struct small_delta { delta d; uint64_t interp; } small_delta;
static void build_small(st_tensor *x, double c, st_tensor **out) {   /* ops no other test here uses */
    st_tensor *a = st_mul_s(x, c), *b = c < 0 ? st_erf(a) : st_sigmoid(a), *e = st_square(x);
    out[0] = st_add(b, e);
    int ax = 0;
    out[1] = st_sum(out[0], 1, &ax, 0);
    st_tensor *q = st_mul_s(x, 0.25);
    out[2] = st_expm1(q);
    st_release(q);
    st_release(a);
    st_release(b);
    st_release(e);
}
static small_delta small_run(st_tensor *x, double c) {
    st_tensor *ref[3], *out[3];
    st_set_eager(1);
    build_small(x, c, ref);
    st_set_eager(0);
    build_small(x, c, out);
    st_stats_t s0, s1;
    st_stats(&s0);
    begin();
    CHECK(st_realize(3, out) == ST_OK);
    small_delta r = {end(), 0};
    st_stats(&s1);
    r.interp = s1.interp_groups - s0.interp_groups;
    for (int i = 0; i < 3; i++) {
        check_same(out[i], ref[i], 1e-5);
        st_release(ref[i]);
        st_release(out[i]);
    }
    return r;
}

TEST(small_region_cached_then_compiled_when_hot) {
    int64_t jit_min = st_rt.jit_min, jit_hot = st_rt.jit_hot;
    st_set_jit_min(1 << 30);
    st_rt.jit_hot = 3;
    st_tensor *x = input(6, 10, 12);
    small_delta r[5];
    for (int i = 0; i < 5; i++) r[i] = small_run(x, 0.5 + i);
    CHECK_EQ_INT(r[0].d.built, 1);   /* planned, interpreted, cached */
    CHECK(r[0].interp > 0);
    CHECK_EQ_INT(r[0].d.compiled, 0);
    CHECK_EQ_INT(r[1].d.built, 0);   /* a hit, still interpreted */
    CHECK_EQ_INT(r[1].d.hits, 1);
    CHECK_EQ_INT(r[1].interp, r[0].interp);
    CHECK_EQ_INT(r[1].d.compiled, 0);
    CHECK_EQ_INT(r[2].d.hits, 1);    /* the third run: hot, compiled */
    CHECK(r[2].d.compiled > 0);
    CHECK_EQ_INT(r[2].interp, 0);
    for (int i = 3; i < 5; i++) {
        CHECK_EQ_INT(r[i].d.built, 0);
        CHECK_EQ_INT(r[i].d.compiled, 0);
        CHECK_EQ_INT(r[i].interp, 0);
        CHECK_EQ_INT(r[i].d.launched, r[0].d.launched);
    }
    /* jit_hot 0: a small region (erf for sigmoid: kernels not compiled yet) stays interpreted,
     * planned once */
    st_rt.jit_hot = 0;
    st_tensor *y = input(7, 10, 13);
    for (int i = 0; i < 5; i++) {
        small_delta q = small_run(y, -1.0 - i);
        CHECK_EQ_INT(q.d.built, i == 0);
        CHECK_EQ_INT(q.d.compiled, 0);
        CHECK(q.interp > 0);
    }
    st_release(x);
    st_release(y);
    st_set_jit_min(jit_min);
    st_rt.jit_hot = jit_hot;
}

int main(void) {
    if (!ft_cache_dir_create("/tmp/stitch-plan-XXXXXX")) return 1;
    st_set_jit_min(0);
    st_set_poison(1);
    fuse_pcache_set_enabled(true);
    RUN(repeat_with_new_scalars_and_data_plans_nothing);
    RUN(new_shape_misses_without_compiling);
    RUN(fusion_flags_are_part_of_the_key);
    RUN(setview_in_place_and_copy_are_different_plans);
    RUN(kept_row_value_is_part_of_the_key);
    RUN(integral_iota_is_part_of_the_key);
    RUN(disabled_cache_plans_every_flush);
    RUN(small_region_cached_then_compiled_when_hot);
    st_shutdown();
    ft_cache_dir_remove();
    TEST_MAIN_END();
}
