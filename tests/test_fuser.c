/*
 * test_fuser.c — the fuser (fuser/) and the C renderer: fused kernels against the reference
 * interpreter, and the kernel counts that fusion promises.
 *
 * Every graph is built twice from the same realized inputs: once with st_set_eager(1) (each op
 * through the interpreter at once: the oracle) and once lazily with st_set_jit_min(0) (every
 * region goes through the JIT), then compared elementwise in f64 with a tolerance. Kernel counts
 * come from st_stats (kernels_launched of the one flush that realizes the result). The JIT uses a
 * fresh ST_CACHE_DIR (mkdtemp), removed at the end.
 */
#include "fuser/fuser.h"
#include "fuse_test_util.h"

#include <stdlib.h>

typedef st_tensor *(*build_fn)(st_tensor **in);

static double value(unsigned *seed, st_dtype dt) {
    double u = ft_rand16(seed);
    return dt == ST_BOOL ? (u > 0.5) : st_is_int(dt) ? (double)(int)(u * 20 - 10) : u * 4 - 2;
}
static st_tensor *input(st_dtype dt, int ndim, const int64_t *shape, unsigned seed) {
    return ft_input(dt, ndim, shape, seed, value);
}

/* Builds fn lazily (JIT) and eagerly; checks shapes and values; returns the kernels the lazy
 * flush launched (-1 on a failure, already recorded). */
static int check_graph(build_fn fn, int nin, st_tensor **in, double tol) {
    st_set_eager(1);
    st_manual_seed(42);
    st_tensor *ref = fn(in);
    st_set_eager(0);
    st_manual_seed(42);
    st_tensor *out = fn(in);
    if (!ref || !out) {
        TEST_FAILF("build failed: %s", st_last_error());
        st_release(ref);
        st_release(out);
        return -1;
    }
    (void)nin;
    st_stats_t s0, s1;
    st_stats(&s0);
    st_status s = st_realize(1, &out);
    st_stats(&s1);
    int kernels = (int)(s1.kernels_launched - s0.kernels_launched);
    CHECK_MSG(s == ST_OK, "realize failed: %s", st_last_error());
    CHECK_EQ_INT(st_ndim(out), st_ndim(ref));
    CHECK_EQ_INT(st_numel(out), st_numel(ref));
    CHECK_EQ_INT(st_dtype_of(out), st_dtype_of(ref));
    double *a = ft_host(out), *b = ft_host(ref);
    if (a && b && st_numel(out) == st_numel(ref)) {
        for (int64_t i = 0; i < st_numel(out); i++) {
            CHECK_NEAR(a[i], b[i], tol);
            if (test_cur_failed) {
                printf("  (element %lld of %lld)\n", (long long)i, (long long)st_numel(out));
                break;
            }
        }
    } else {
        CHECK(a && b);
    }
    free(a);
    free(b);
    st_release(ref);
    st_release(out);
    return s == ST_OK ? kernels : -1;
}

static const int64_t S3[3] = {4, 8, 16};
static const int64_t S2[2] = {32, 32};

/* ((x+1)*2):exp():sum(2) — one kernel */
static st_tensor *g_chain_sum(st_tensor **in) {
    st_tensor *a = st_add_s(in[0], 1), *b = st_mul_s(a, 2), *c = st_exp(b);
    int ax = 2;
    st_tensor *d = st_sum(c, 1, &ax, 0);
    st_release(a);
    st_release(b);
    st_release(c);
    return d;
}
TEST(reduce_with_producers_is_one_kernel) {
    st_tensor *x = input(ST_F32, 3, S3, 1);
    int k = check_graph(g_chain_sum, 1, &x, 1e-5);
    CHECK_EQ_INT(k, 1);
    st_release(x);
}

/* sum then an elementwise epilogue through the runtime's reshape: x:sum(2):exp() — one kernel */
static st_tensor *g_sum_epilogue(st_tensor **in) {
    int ax = 2;
    st_tensor *s = st_sum(in[0], 1, &ax, 0), *m = st_mul_s(s, 0.1), *e = st_exp(m);
    st_release(s);
    st_release(m);
    return e;
}
TEST(reduce_epilogue_is_one_kernel) {
    st_tensor *x = input(ST_F32, 3, S3, 2);
    int k = check_graph(g_sum_epilogue, 1, &x, 1e-5);
    CHECK_EQ_INT(k, 1);
    st_release(x);
}

/* 20 elementwise ops with scalars, a broadcast row and a transposed view of an input */
static st_tensor *g_chain20(st_tensor **in) {
    st_tensor *x = in[0], *row = in[1];
    st_tensor *xt = st_transpose(x, 0, 1);
    st_tensor *t = st_retain(x);
#define STEP(expr) do { st_tensor *n_ = (expr); st_release(t); t = n_; } while (0)
    STEP(st_add_s(t, 1));
    STEP(st_mul(t, xt));
    STEP(st_sub(t, row));
    STEP(st_mul_s(t, 0.5));
    STEP(st_tanh(t));
    STEP(st_add(t, x));
    STEP(st_abs(t));
    STEP(st_add_s(t, 1));
    STEP(st_log(t));
    STEP(st_mul(t, row));
    STEP(st_sigmoid(t));
    STEP(st_rsub_s(t, 3));
    STEP(st_sqrt(t));
    STEP(st_div_s(t, 1.5));
    STEP(st_maximum(t, xt));
    STEP(st_neg(t));
    STEP(st_exp(t));
    STEP(st_add(t, xt));
    STEP(st_relu(t));
    STEP(st_mul_s(t, 2));
#undef STEP
    st_release(xt);
    return t;
}
TEST(chain_of_20_is_one_kernel) {
    int64_t rs[1] = {32};
    st_tensor *in[2] = {input(ST_F32, 2, S2, 3), input(ST_F32, 1, rs, 4)};
    int k = check_graph(g_chain20, 2, in, 1e-5);
    CHECK_EQ_INT(k, 1);
    st_release(in[0]);
    st_release(in[1]);
}

static st_tensor *g_softmax(st_tensor **in) { return st_softmax(in[0], -1); }
static st_tensor *g_log_softmax(st_tensor **in) { return st_log_softmax(in[0], 1); }
static st_tensor *g_softmax_manual(st_tensor **in) {
    int ax = 1;
    st_tensor *m = st_max(in[0], 1, &ax, 1), *d = st_sub(in[0], m), *e = st_exp(d);
    st_tensor *s = st_sum(e, 1, &ax, 1), *y = st_div(e, s);
    st_release(m);
    st_release(d);
    st_release(e);
    st_release(s);
    return y;
}
static st_tensor *g_softmax0(st_tensor **in) { return st_softmax(in[0], 0); }
/* layernorm over the last dim with weight and bias: two stitched reductions, one kernel */
static st_tensor *g_layernorm(st_tensor **in) {
    int ax = 2;
    st_tensor *m = st_mean(in[0], 1, &ax, 1), *xc = st_sub(in[0], m), *sq = st_mul(xc, xc);
    st_tensor *v = st_mean(sq, 1, &ax, 1), *ve = st_add_s(v, 1e-5), *rs = st_rsqrt(ve);
    st_tensor *nrm = st_mul(xc, rs), *sc = st_mul(nrm, in[1]), *y = st_add(sc, in[2]);
    st_tensor *all[] = {m, xc, sq, v, ve, rs, nrm, sc};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) st_release(all[k]);
    return y;
}
TEST(softmax_patterns) {
    st_tensor *x = input(ST_F32, 2, S2, 5);
    int64_t sw[1] = {16};
    st_tensor *ln[3] = {input(ST_F32, 3, S3, 51), input(ST_F32, 1, sw, 52), input(ST_F32, 1, sw, 53)};
    int k1 = check_graph(g_softmax, 1, &x, 1e-5);
    int k2 = check_graph(g_log_softmax, 1, &x, 1e-5);
    int k3 = check_graph(g_softmax_manual, 1, &x, 1e-5);
    int k4 = check_graph(g_softmax0, 1, &x, 1e-5), k5 = check_graph(g_layernorm, 3, ln, 1e-5);
    printf("  softmax: %d kernels, log_softmax: %d, exp(x - max) / sum: %d, softmax(dim 0): %d, "
           "layernorm: %d\n", k1, k2, k3, k4, k5);
    CHECK(k1 == 1 && k2 == 1 && k3 == 1 && k4 == 1 && k5 == 1);
    st_release(ln[0]);
    st_release(ln[1]);
    st_release(ln[2]);
    st_release(x);
}

TEST(multi_output_one_kernel) {
    st_tensor *x = input(ST_F32, 3, S3, 6);
    st_set_eager(0);
    st_tensor *a = st_mul_s(x, 2), *b = st_exp(x);
    st_tensor *ts[2] = {a, b};
    st_stats_t s0, s1;
    st_stats(&s0);
    CHECK(st_realize(2, ts) == ST_OK);
    st_stats(&s1);
    CHECK_EQ_INT(s1.kernels_launched - s0.kernels_launched, 1);
    double *xv = ft_host(x), *av = ft_host(a), *bv = ft_host(b);
    for (int i = 0; xv && av && bv && i < 4 * 8 * 16; i++) {
        CHECK_NEAR(av[i], xv[i] * 2, 1e-6);
        CHECK_NEAR(bv[i], exp(xv[i]), 1e-5);
    }
    free(xv);
    free(av);
    free(bv);
    st_release(a);
    st_release(b);
    st_release(x);
}

static st_tensor *g_matmul_t(st_tensor **in) {
    st_tensor *bt = st_transpose(in[1], 1, 2), *y = st_matmul(in[0], bt);
    st_release(bt);
    return y;
}
static st_tensor *g_matmul_at(st_tensor **in) {
    st_tensor *at = st_transpose(in[0], 0, 1), *y = st_matmul(at, in[1]);
    st_tensor *z = st_add_s(y, 1);
    st_release(at);
    st_release(y);
    return z;
}
static st_tensor *g_matmul_computed(st_tensor **in) {
    st_tensor *e = st_exp(in[0]), *y = st_matmul(e, in[1]), *r = st_relu(y);
    st_release(e);
    st_release(y);
    return r;
}
TEST(matmul_transposed_operands) {
    int64_t sa[3] = {3, 5, 7}, sb[3] = {3, 300, 7};
    st_tensor *in[2] = {input(ST_F32, 3, sa, 7), input(ST_F32, 3, sb, 8)};
    CHECK(check_graph(g_matmul_t, 2, in, 1e-4) == 1);
    int64_t s2a[2] = {9, 6}, s2b[2] = {9, 11};
    st_tensor *in2[2] = {input(ST_F32, 2, s2a, 9), input(ST_F32, 2, s2b, 10)};
    CHECK(check_graph(g_matmul_at, 2, in2, 1e-4) >= 1);
    int64_t s3a[2] = {6, 9};
    st_tensor *in3[2] = {input(ST_F32, 2, s3a, 11), in2[1]};
    CHECK(check_graph(g_matmul_computed, 2, in3, 1e-4) >= 1);
    st_tensor *in4[2] = {input(ST_F64, 2, s3a, 12), input(ST_F64, 2, s2b, 13)};
    CHECK(check_graph(g_matmul_computed, 2, in4, 1e-10) >= 1);
    st_release(in[0]);
    st_release(in[1]);
    st_release(in2[0]);
    st_release(in2[1]);
    st_release(in3[0]);
    st_release(in4[0]);
    st_release(in4[1]);
}

static st_tensor *g_bcast(st_tensor **in) {
    int64_t shp[2] = {8, 16};
    st_tensor *e = st_expand(in[0], 2, shp), *y = st_add(e, in[1]);
    st_release(e);
    return y;
}
TEST(broadcast_stride0_view) {
    int64_t sa[2] = {8, 1}, sb[1] = {16};
    st_tensor *in[2] = {input(ST_F32, 2, sa, 14), input(ST_F32, 1, sb, 15)};
    CHECK_EQ_INT(check_graph(g_bcast, 2, in, 1e-6), 1);
    st_release(in[0]);
    st_release(in[1]);
}

static st_tensor *g_slices(st_tensor **in) {
    st_tensor *a = st_slice(in[0], 1, 1, 31, 3), *b = st_slice(a, 0, 2, 30, 2);
    st_tensor *c = st_mul_s(b, 2), *d = st_slice(c, 1, 0, 10, 2), *e = st_exp(d);
    st_release(a);
    st_release(b);
    st_release(c);
    st_release(d);
    return e;
}
TEST(slices_with_steps) {
    st_tensor *x = input(ST_F32, 2, S2, 16);
    CHECK_EQ_INT(check_graph(g_slices, 1, &x, 1e-6), 1);
    st_release(x);
}

static st_tensor *g_cat(st_tensor **in) {
    st_tensor *a = st_exp(in[0]), *b = st_mul_s(in[1], 3);
    st_tensor *ts[2] = {a, b};
    st_tensor *c = st_cat(2, ts, 1), *d = st_add_s(c, 1);
    st_release(a);
    st_release(b);
    st_release(c);
    return d;
}
TEST(cat_masked_views) {
    int64_t sa[2] = {5, 3}, sb[2] = {5, 4};
    st_tensor *in[2] = {input(ST_F32, 2, sa, 17), input(ST_F32, 2, sb, 18)};
    int k = check_graph(g_cat, 2, in, 1e-6);
    CHECK_EQ_INT(k, 1);
    st_release(in[0]);
    st_release(in[1]);
}

static st_tensor *g_embed(st_tensor **in) {
    st_tensor *e = st_index_select(in[0], 0, in[1]), *y = st_mul_s(e, 2), *z = st_tanh(y);
    st_release(e);
    st_release(y);
    return z;
}
static st_tensor *g_gather(st_tensor **in) { return st_gather(in[0], 1, in[2]); }
TEST(gather_and_index_select) {
    int64_t sw[2] = {10, 4}, si[1] = {6}, sg[2] = {10, 3};
    int64_t idx[6] = {3, 0, 9, 3, 1, 7}, gidx[30];
    for (int i = 0; i < 30; i++) gidx[i] = (i * 7) % 4;
    st_tensor *in[3] = {input(ST_F32, 2, sw, 19), st_from_data(ST_I64, 1, si, idx),
                        st_from_data(ST_I64, 2, sg, gidx)};
    CHECK_EQ_INT(check_graph(g_embed, 3, in, 1e-6), 1);
    CHECK(check_graph(g_gather, 3, in, 1e-6) >= 1);
    /* out of range: an error, not a crash; the runtime stays usable */
    idx[2] = 12;
    st_tensor *bad = st_from_data(ST_I64, 1, si, idx);
    st_set_eager(0);
    st_tensor *e = st_index_select(in[0], 0, bad);
    if (e) {
        st_tensor *y = st_add_s(e, 1);
        st_status s = st_realize(1, &y);
        CHECK(s == ST_ERR_ARG);
        CHECK(strstr(st_last_error(), "out of range") != NULL);
        st_release(y);
    }
    st_clear_error();
    st_release(e);
    st_release(bad);
    CHECK_EQ_INT(check_graph(g_embed, 3, in, 1e-6), 1);
    for (int i = 0; i < 3; i++) st_release(in[i]);
}

static st_tensor *g_scatter(st_tensor **in) {
    st_tensor *v = st_exp(in[2]), *y = st_scatter_add(in[0], 0, in[1], v);
    st_release(v);
    return y;
}
TEST(scatter_add) {
    int64_t sb[2] = {5, 3}, si[2] = {7, 3};
    int64_t idx[21];
    for (int i = 0; i < 21; i++) idx[i] = (i * 3 + 1) % 5;
    st_tensor *in[3] = {input(ST_F32, 2, sb, 20), st_from_data(ST_I64, 2, si, idx), input(ST_F32, 2, si, 21)};
    CHECK(check_graph(g_scatter, 3, in, 1e-5) >= 1);
    for (int i = 0; i < 3; i++) st_release(in[i]);
}

/* an in-place write into a slice (SETVIEW), then a read of the whole tensor */
static st_tensor *g_setview(st_tensor **in) {
    st_tensor *x = st_clone(in[0]);
    st_tensor *sl = st_slice(x, 1, 2, 14, 3);
    st_tensor *v = st_exp(in[1]);
    st_add_(sl, v);
    st_release(sl);
    st_release(v);
    st_tensor *y = st_mul_s(x, 2);
    st_release(x);
    return y;
}
TEST(setview_inplace_slice) {
    int64_t sx[2] = {6, 16}, sv[2] = {6, 4};
    st_tensor *in[2] = {input(ST_F32, 2, sx, 22), input(ST_F32, 2, sv, 23)};
    CHECK(check_graph(g_setview, 2, in, 1e-5) >= 1);
    /* write into a realized tensor: in place */
    st_set_eager(0);
    st_tensor *x = st_clone(in[0]);
    st_realize(1, &x);
    st_tensor *sl = st_slice(x, 0, 1, 3, 1);
    CHECK(st_fill_(sl, 7) == ST_OK);
    st_release(sl);
    double *v = ft_host(x), *r = ft_host(in[0]);
    for (int i = 0; v && r && i < 6 * 16; i++) CHECK_NEAR(v[i], (i >= 16 && i < 48) ? 7 : r[i], 1e-6);
    free(v);
    free(r);
    st_release(x);
    st_release(in[0]);
    st_release(in[1]);
}

/* (x * a) + b as one call: the intermediate handle is dropped */
static st_tensor *axpb(st_tensor *x, double a, double b) {
    st_tensor *m = st_mul_s(x, a), *y = st_add_s(m, b);
    st_release(m);
    return y;
}

TEST(scalar_change_does_not_recompile) {
    st_tensor *x = input(ST_F32, 3, S3, 24);
    st_set_eager(0);
    st_tensor *y = axpb(x, 0.5, 1);
    st_realize(1, &y);
    st_stats_t s0, s1;
    st_stats(&s0);
    st_tensor *z = axpb(x, 0.7, 2);
    CHECK(st_realize(1, &z) == ST_OK);
    st_stats(&s1);
    CHECK_EQ_INT(s1.kernels_compiled - s0.kernels_compiled, 0);
    CHECK_EQ_INT(s1.kernels_launched - s0.kernels_launched, 1);
    double *xv = ft_host(x), *zv = ft_host(z);
    for (int i = 0; xv && zv && i < 4 * 8 * 16; i++) CHECK_NEAR(zv[i], (float)((float)xv[i] * 0.7f) + 2.0f, 1e-6);
    free(xv);
    free(zv);
    /* and a new shape of the same structure reuses the kernel too (shape-generic) */
    int64_t s2[3] = {2, 3, 5};
    st_tensor *w = input(ST_F32, 3, s2, 25);
    st_stats(&s0);
    st_tensor *u = axpb(w, 0.25, 3);
    CHECK(st_realize(1, &u) == ST_OK);
    st_stats(&s1);
    CHECK_EQ_INT(s1.kernels_compiled - s0.kernels_compiled, 0);
    st_release(w);
    st_release(u);
    st_release(y);
    st_release(z);
    st_release(x);
}

static st_tensor *g_red_axis0(st_tensor **in) {
    int ax = 0;
    st_tensor *m = st_mean(in[0], 1, &ax, 0);
    return m;
}
static st_tensor *g_red_max_mid(st_tensor **in) {
    int ax = 1;
    return st_max(in[0], 1, &ax, 1);
}
static st_tensor *g_argmax(st_tensor **in) { return st_argmax(in[0], 1, 0); }
static st_tensor *g_prod(st_tensor **in) {
    int ax = 2;
    st_tensor *a = st_mul_s(in[0], 0.3), *p = st_prod(a, 1, &ax, 0);
    st_release(a);
    return p;
}
static st_tensor *g_sum_all(st_tensor **in) { return st_sum(in[0], 0, NULL, 0); }
static st_tensor *g_var(st_tensor **in) {
    int ax = 1;
    return st_var(in[0], 1, &ax, 1, 0);
}
TEST(reductions) {
    st_tensor *x = input(ST_F32, 3, S3, 26);
    CHECK_EQ_INT(check_graph(g_red_axis0, 1, &x, 1e-5), 1);
    CHECK_EQ_INT(check_graph(g_red_max_mid, 1, &x, 0), 1);
    CHECK_EQ_INT(check_graph(g_argmax, 1, &x, 0), 1);
    CHECK_EQ_INT(check_graph(g_prod, 1, &x, 1e-4), 1);
    CHECK_EQ_INT(check_graph(g_sum_all, 1, &x, 1e-5), 1);
    CHECK_EQ_INT(check_graph(g_var, 1, &x, 1e-4), 1);
    st_tensor *xi = input(ST_I32, 3, S3, 27);
    CHECK(check_graph(g_sum_all, 1, &xi, 0) >= 1);
    CHECK(check_graph(g_red_max_mid, 1, &xi, 0) >= 1);
    /* 1e-7: in eager mode the weak scalar 1/(n-1) of var is rounded to f32 (see the report) */
    st_tensor *xd = input(ST_F64, 3, S3, 28);
    CHECK(check_graph(g_var, 1, &xd, 1e-7) >= 1);
    st_release(x);
    st_release(xi);
    st_release(xd);
}

static st_tensor *g_dtypes(st_tensor **in) {
    st_tensor *h = st_cast(in[0], ST_F16), *h2 = st_mul(h, h), *f = st_cast(h2, ST_F32);
    st_tensor *i = st_cast(in[0], ST_I32), *fi = st_cast(i, ST_F32), *c = st_gt(f, fi);
    st_tensor *w = st_where(c, f, fi), *b = st_cast(in[0], ST_BF16), *bf = st_cast(b, ST_F32);
    st_tensor *y = st_add(w, bf);
    st_tensor *all[] = {h, h2, f, i, fi, c, w, b, bf};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) st_release(all[k]);
    return y;
}
static st_tensor *g_int_ops(st_tensor **in) {
    st_tensor *a = st_mul(in[0], in[0]), *b = st_remainder(a, in[1]), *c = st_fmod(a, in[1]);
    st_tensor *d = st_add(b, c), *e = st_maximum(d, in[1]);
    st_release(a);
    st_release(b);
    st_release(c);
    st_release(d);
    return e;
}
static st_tensor *g_rand(st_tensor **in) {
    st_tensor *r = st_rand(ST_F32, 3, S3), *n = st_randn(ST_F32, 3, S3);
    st_tensor *a = st_add(r, n), *y = st_add(a, in[0]);
    st_release(r);
    st_release(n);
    st_release(a);
    return y;
}
static st_tensor *g_iota(st_tensor **in) {
    st_tensor *r = st_arange(0, 16, 1, ST_F32), *y = st_mul(in[0], r);
    st_release(r);
    return y;
}
TEST(dtypes_and_sources) {
    st_tensor *x = input(ST_F32, 3, S3, 29);
    CHECK_EQ_INT(check_graph(g_dtypes, 1, &x, 1e-6), 1);
    CHECK_EQ_INT(check_graph(g_rand, 1, &x, 1e-6), 1);
    CHECK_EQ_INT(check_graph(g_iota, 1, &x, 1e-6), 1);
    st_tensor *ii[2] = {input(ST_I64, 3, S3, 30), input(ST_I64, 3, S3, 31)};
    CHECK_EQ_INT(check_graph(g_int_ops, 2, ii, 0), 1);
    st_release(x);
    st_release(ii[0]);
    st_release(ii[1]);
}

/* Stitching must not let a consumer read a reduction's row other than the current one: the
 * group computes row o's reduction in an inner phase of outer iteration o, later rows do not
 * exist yet (fuzzer seeds 1633 and 500526: a GATHER of softmax's rows read poison). */
static st_tensor *g_norm_gather(st_tensor **in) {
    int ax = 1;
    st_tensor *s = st_sum(in[0], 1, &ax, 1), *y = st_div(in[0], s), *z = st_index_select(y, 0, in[1]);
    st_release(s);
    st_release(y);
    return z;
}
static st_tensor *g_softmax_gather(st_tensor **in) {
    st_tensor *y = st_softmax(in[0], 1), *z = st_index_select(y, 0, in[1]);
    st_release(y);
    return z;
}
static st_tensor *g_softmax_transpose(st_tensor **in) {
    st_tensor *y = st_softmax(in[0], 1), *t = st_transpose(y, 0, 1), *z = st_add_s(t, 1);
    st_release(y);
    st_release(t);
    return z;
}
static st_tensor *g_softmax_roll_rows(st_tensor **in) {
    /* rows rolled by one (cat of two slices: masked views) */
    st_tensor *y = st_softmax(in[0], 1), *a = st_slice(y, 0, 1, 4, 1), *b = st_slice(y, 0, 0, 1, 1);
    st_tensor *ts[2] = {a, b};
    st_tensor *t = st_cat(2, ts, 0), *z = st_mul(t, in[0]);
    st_release(y);
    st_release(a);
    st_release(b);
    st_release(t);
    return z;
}
TEST(stitch_reads_only_the_current_row) {
    int64_t sx[2] = {3, 4}, si[1] = {3}, sq[2] = {4, 4};
    int64_t idx[3] = {2, 0, 1};
    st_tensor *in[2] = {input(ST_F32, 2, sx, 61), st_from_data(ST_I64, 1, si, idx)};
    CHECK(check_graph(g_norm_gather, 2, in, 1e-5) >= 1);
    CHECK(check_graph(g_softmax_gather, 2, in, 1e-5) >= 1);
    st_tensor *q = input(ST_F32, 2, sq, 62);
    CHECK(check_graph(g_softmax_transpose, 1, &q, 1e-5) >= 1);
    CHECK(check_graph(g_softmax_roll_rows, 1, &q, 1e-5) >= 1);
    st_release(q);
    st_release(in[0]);
    st_release(in[1]);
}

/* A value over the rows' results read by two groups (BatchNorm's variance: by the normalization
 * and by the running variance's update) was materialized by a group of its own before its
 * reduction was placed, and the normalization stayed a second kernel. partition.c
 * merge_over_rows folds such a pointwise group into the reduce group when it reads the row only
 * where the row is computed: statistics, normalization and update are one kernel on the CPU.
 * A group reading the normalized rows transposed (another row's values) must stay apart. */
static st_tensor *bn_like(st_tensor *x, st_tensor *rv, int transposed, st_tensor **upd) {
    int ax[2] = {0, 2};
    int64_t c[1] = {8};
    st_tensor *m = st_mean(x, 2, ax, 1), *xc = st_sub(x, m), *sq = st_mul(xc, xc);
    st_tensor *var = st_mean(sq, 2, ax, 1), *ve = st_add_s(var, 1e-5), *rs = st_rsqrt(ve);
    st_tensor *y = st_mul(xc, rs), *t = transposed ? st_transpose(y, 0, 2) : NULL;
    st_tensor *out = st_add_s(t ? t : y, 0.5);
    st_tensor *vr = st_reshape(var, 1, c), *a = st_mul_s(rv, 0.9), *b = st_mul_s(vr, 0.1);
    *upd = st_add(a, b);
    st_tensor *tmp[] = {m, xc, sq, var, ve, rs, y, t, vr, a, b};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) st_release(tmp[i]);
    return out;
}
TEST(row_values_read_by_two_groups_merge_into_the_rows) {
    int64_t sx[3] = {8, 8, 8}, sr[1] = {8};
    st_tensor *x = input(ST_F32, 3, sx, 71), *rv = input(ST_F32, 1, sr, 72);
    for (int transposed = 0; transposed < 2; transposed++) {
        st_tensor *eu, *lu;
        st_set_eager(1);
        st_tensor *ey = bn_like(x, rv, transposed, &eu);
        st_set_eager(0);
        st_tensor *ly = bn_like(x, rv, transposed, &lu);
        st_tensor *ts[2] = {ly, lu};
        st_stats_t s0, s1;
        st_stats(&s0);
        CHECK(st_realize(2, ts) == ST_OK);
        st_stats(&s1);
        int k = (int)(s1.kernels_launched - s0.kernels_launched);
        if (transposed) CHECK_MSG(k >= 2, "transposed rows: %d kernel(s)", k);
        else CHECK_MSG(k == 1, "statistics, normalization and update: %d kernels (1 expected)", k);
        double *a = ft_host(ly), *b = ft_host(ey), *c = ft_host(lu), *d = ft_host(eu);
        for (int i = 0; a && b && i < 512; i++) CHECK_NEAR(a[i], b[i], 1e-5);
        for (int i = 0; c && d && i < 8; i++) CHECK_NEAR(c[i], d[i], 1e-6);
        CHECK(a && b && c && d);
        free(a), free(b), free(c), free(d);
        st_release(ey), st_release(eu), st_release(ly), st_release(lu);
    }
    st_release(x);
    st_release(rv);
}

/* Independent reduce groups of one level share a launch on the CPU (fuser/horizontal.c): a
 * column sum of one tensor and a row max of another, realized together, are one kernel (two
 * with horizontal batching off), the values the interpreter's. */
TEST(independent_reductions_share_a_launch) {
    int64_t sa[2] = {48, 40}, sb[2] = {24, 64};
    st_tensor *x = input(ST_F32, 2, sa, 81), *y = input(ST_F32, 2, sb, 82);
    unsigned saved = fuse_flags();
    for (int hz = 1; hz >= 0; hz--) {
        fuse_set_flags(hz ? saved : saved & ~FUSE_HORIZONTAL);
        int a0 = 0, a1 = 1;
        st_tensor *r[2], *e[2];
        for (int eager = 1; eager >= 0; eager--) {
            st_set_eager(eager);
            st_tensor **o = eager ? e : r;
            o[0] = st_sum(x, 1, &a0, 0);
            o[1] = st_max(y, 1, &a1, 0);
        }
        st_stats_t s0, s1;
        st_stats(&s0);
        CHECK(st_realize(2, r) == ST_OK);
        st_stats(&s1);
        int k = (int)(s1.kernels_launched - s0.kernels_launched);
        CHECK_MSG(k == (hz ? 1 : 2), "horizontal %s: %d kernels", hz ? "on" : "off", k);
        for (int j = 0; j < 2; j++) {
            double *a = ft_host(r[j]), *b = ft_host(e[j]);
            for (int i = 0; a && b && i < st_numel(r[j]); i++) CHECK_NEAR(a[i], b[i], 1e-5);
            CHECK(a && b);
            free(a), free(b);
            st_release(r[j]), st_release(e[j]);
        }
    }
    fuse_set_flags(saved);
    st_release(x);
    st_release(y);
}

/* Reductions over long rows run on partial accumulators (jit/render_c.c: 16 lanes, a main loop
 * over chunks, a fixed-order combine, a scalar tail): rows of 1000 (main + tail), 37, 48
 * (chunks only) and 20 (below the lane threshold: the plain loop); sum, max, min, mean,
 * softmax (and prod, which stays serial) against the interpreter, NaN propagation through a
 * lane, integer sums exact. */
static st_tensor *g_red_sum1(st_tensor **in) { int ax = 1; return st_sum(in[0], 1, &ax, 0); }
static st_tensor *g_red_max1(st_tensor **in) { int ax = 1; return st_max(in[0], 1, &ax, 0); }
static st_tensor *g_red_min1(st_tensor **in) { int ax = 1; return st_min(in[0], 1, &ax, 0); }
static st_tensor *g_red_mean1(st_tensor **in) { int ax = 1; return st_mean(in[0], 1, &ax, 1); }
static st_tensor *g_red_prod1(st_tensor **in) {
    int ax = 1;
    st_tensor *e = st_mul_s(in[0], 0.01), *f = st_add_s(e, 1), *p = st_prod(f, 1, &ax, 0);
    st_release(e);
    st_release(f);
    return p;
}
static st_tensor *g_log_softmax1(st_tensor **in) { return st_log_softmax(in[0], 1); }
TEST(reductions_on_partial_accumulators) {
    const int64_t cols[4] = {1000, 37, 48, 20};
    for (int c = 0; c < 4; c++) {
        int64_t sh[2] = {5, cols[c]};
        st_tensor *x = input(ST_F32, 2, sh, 70 + (unsigned)c);
        CHECK_EQ_INT(check_graph(g_red_sum1, 1, &x, 1e-4), 1);
        CHECK_EQ_INT(check_graph(g_red_max1, 1, &x, 0), 1);
        CHECK_EQ_INT(check_graph(g_red_min1, 1, &x, 0), 1);
        CHECK_EQ_INT(check_graph(g_red_mean1, 1, &x, 1e-5), 1);
        CHECK_EQ_INT(check_graph(g_red_prod1, 1, &x, 1e-4), 1);
        CHECK_EQ_INT(check_graph(g_softmax, 1, &x, 1e-6), 1);
        CHECK_EQ_INT(check_graph(g_log_softmax1, 1, &x, 1e-5), 1);
        CHECK_EQ_INT(check_graph(g_sum_all, 1, &x, 1e-3), 1);
        st_tensor *xd = input(ST_F64, 2, sh, 80 + (unsigned)c), *xi = input(ST_I64, 2, sh, 90 + (unsigned)c);
        CHECK_EQ_INT(check_graph(g_red_sum1, 1, &xd, 1e-10), 1);
        CHECK_EQ_INT(check_graph(g_red_max1, 1, &xd, 0), 1);
        CHECK(check_graph(g_red_sum1, 1, &xi, 0) >= 1);
        CHECK(check_graph(g_red_max1, 1, &xi, 0) >= 1);
        CHECK(check_graph(g_red_min1, 1, &xi, 0) >= 1);
        st_release(xd);
        st_release(xi);
        st_release(x);
    }
    /* a NaN in one lane of one row (row 1, element 21: lane 5 of chunk 1) and at the last
     * element of row 3 (the tail): max and min of those rows are NaN, the others are not */
    int64_t sh[2] = {4, 100};
    double v[400];
    for (int i = 0; i < 400; i++) v[i] = (double)((i * 37) % 101) - 50;
    v[100 + 21] = NAN;
    v[300 + 99] = NAN;
    st_tensor *xn = st_from_data(ST_F64, 2, sh, v), *xf = st_cast(xn, ST_F32);
    st_set_eager(0);
    for (int k = 0; k < 2; k++) {
        int ax = 1;
        st_tensor *m = k ? st_min(xf, 1, &ax, 0) : st_max(xf, 1, &ax, 0);
        double *mv = m && st_realize(1, &m) == ST_OK ? ft_host(m) : NULL;
        CHECK(mv != NULL);
        for (int r = 0; mv && r < 4; r++) CHECK_MSG((r == 1 || r == 3) == isnan(mv[r]), "row %d: %g", r, mv[r]);
        if (mv) CHECK_NEAR(mv[0], k ? -50 : 50, 0);
        free(mv);
        st_release(m);
    }
    st_release(xn);
    st_release(xf);
}

/* count values of mixed magnitudes (1e-3 .. 1e4, both signs); NULL: out of memory (a CHECK failed) */
static float *mixed_values(int64_t count) {
    float *v = malloc((size_t)count * sizeof *v);
    CHECK(v != NULL);
    for (int64_t i = 0; v && i < count; i++)
        v[i] = (float)(((i * 7919) % 2001 - 1000) * (i % 3 == 0 ? 10.0 : i % 3 == 1 ? 0.001 : 0.1) + 0.123456789);
    return v;
}
/* Such values as a (sh[0], sh[1]) f32 tensor, and its sum over dim ax computed by the JIT into got
 * (NULL: out of memory). */
static float *fblock_sum(const int64_t sh[2], int ax, float *got, size_t got_bytes) {
    float *v = mixed_values(sh[0] * sh[1]);
    if (!v) return NULL;
    st_tensor *x = st_from_data(ST_F32, 2, sh, v);
    st_set_eager(0);
    st_tensor *s = st_sum(x, 1, &ax, 0);
    CHECK(s && st_to_host(s, ST_F32, got, got_bytes) == ST_OK);
    st_release(s);
    st_release(x);
    return v;
}

/* A float row sum's order on the CPU JIT (jit/render_c.c "Float blocks"): 16 double lanes, each
 * adding the float sum (from 0) of its elements in a block of 8 chunks (128 elements), a pairwise
 * combine of the lanes, then the tail in double, rounded to float once. The model below is that
 * order; the rendered kernel must give its bits for row lengths with and without a partial last
 * block and a tail. Values of mixed magnitudes make the float and double orders differ: the test
 * checks that they do (so it fails if the kernel adds elements in double). */
static float fblock_model(const float *x, int64_t n, bool fblocks) {
    double d[16] = {0}, acc = 0;
    int64_t nm = n >= 32 ? n - n % 16 : 0;
    for (int64_t b = 0; b < nm; b += 128) {
        float f[16] = {0};
        for (int64_t c = b; c < nm && c < b + 128; c += 16)
            for (int l = 0; l < 16; l++) {
                if (fblocks) f[l] += x[c + l];
                else d[l] += (double)x[c + l];
            }
        for (int l = 0; l < 16 && fblocks; l++) d[l] += (double)f[l];
    }
    for (int s = 8; s > 0; s >>= 1)
        for (int l = 0; l < s; l++) d[l] += d[l + s];
    acc += d[0];
    for (int64_t j = nm; j < n; j++) acc += (double)x[j];
    return (float)acc;
}
TEST(float_row_sums_in_float_blocks) {
    const int64_t lens[6] = {32, 100, 128, 300, 1037, 4096};
    int differ = 0;
    for (int t = 0; t < 6; t++) {
        int64_t n = lens[t], sh[2] = {3, n};
        float got[3] = {0}, *v = fblock_sum(sh, 1, got, sizeof got);
        if (!v) return;
        for (int r = 0; r < 3; r++) {
            float want = fblock_model(v + r * n, n, true);
            differ += want != fblock_model(v + r * n, n, false);
            CHECK_MSG(got[r] == want, "row %d of %lld: %.9g, the float-block order gives %.9g", r, (long long)n,
                      (double)got[r], (double)want);
        }
        free(v);
    }
    CHECK_MSG(differ > 0, "the inputs do not tell float blocks from double lanes");
}

/* A float column sum's order on the CPU JIT (column-blocked: jit/render_c_cols.c render_col_fblocks):
 * each output adds its rows in order in float over blocks of 8 rows, from 0, and adds each
 * block's sum into its double sum, rounded to float once. Bit for bit against that model for row
 * counts with and without a partial last block (and an odd row left by the two-rows step), and the
 * inputs tell it from the all-double order. */
static float fblock_col_model(const float *x, int64_t n, int64_t cols, int64_t c, bool fblocks) {
    double d = 0;
    for (int64_t b = 0; b < n; b += 8) {
        float f = 0;
        for (int64_t r = b; r < n && r < b + 8; r++) {
            if (fblocks) f += x[r * cols + c];
            else d += (double)x[r * cols + c];
        }
        if (fblocks) d += (double)f;
    }
    return (float)d;
}
TEST(float_column_sums_in_float_blocks) {
    const int64_t rows[5] = {7, 8, 9, 100, 501}, cols = 37;   /* 512 rows and 32K elements: row blocks (below) */
    int differ = 0;
    for (int t = 0; t < 5; t++) {
        int64_t n = rows[t], sh[2] = {n, cols};
        float got[37] = {0}, *v = fblock_sum(sh, 0, got, sizeof got);
        if (!v) return;
        for (int64_t c = 0; c < cols; c++) {
            float want = fblock_col_model(v, n, cols, c, true);
            differ += want != fblock_col_model(v, n, cols, c, false);
            CHECK_MSG(got[c] == want, "column %lld of %lld rows: %.9g, the float-block order gives %.9g", (long long)c,
                      (long long)n, (double)got[c], (double)want);
        }
        free(v);
    }
    {   /* more than 1024 columns: serial at any row count (row blocks take 8..1024) */
        const int64_t n = 600, wide = 1025, sh[2] = {n, wide};
        float *got = calloc((size_t)wide, sizeof *got);
        float *v = got ? fblock_sum(sh, 0, got, (size_t)wide * sizeof *got) : NULL;
        for (int64_t c = 0; v && c < wide; c++) {
            float want = fblock_col_model(v, n, wide, c, true);
            differ += want != fblock_col_model(v, n, wide, c, false);
            CHECK_MSG(got[c] == want, "column %lld of %lld x %lld: %.9g, the float-block order gives %.9g",
                      (long long)c, (long long)n, (long long)wide, (double)got[c], (double)want);
        }
        free(v);
        free(got);
    }
    CHECK_MSG(differ > 0, "the inputs do not tell float blocks from double sums");
}

/* Row blocks (jit/render_c_cols.c "row blocks"): with at least 512 rows, 8..1024 columns and
 * 32K elements, the rows are cut into blocks of max(256, ceil(rows / 64) rounded up to 8) rows,
 * each summed (float blocks of 8 rows into a double, from 0) over all columns, and the blocks'
 * sums added in order. Bit for bit against that model, with a partial last block; column 0
 * holds 2^60 at row 0, -2^60 at the second block's first row and ones elsewhere, so the serial
 * order (the ones after 2^60 are lost, those after -2^60 counted) and the row blocks' (the first
 * two blocks' ones are lost, each in its block's partial sum; the later blocks' counted) give
 * different floats: the test fails if the kernel sums serially or groups the blocks otherwise.
 * Below 512 rows the serial order stays. Also in row blocks: two sums in one kernel (x and x^2)
 * with an epilogue (s / 2 + 1), against the model; and 0 rows through the same compiled kernel
 * (its outputs zeros: the row count once divided by zero there). */
static float fblock_rows_model(const float *x, int64_t n, int64_t cols, int64_t c, bool squares) {
    const int64_t rs = (n + 63) / 64 < 256 ? 256 : ((n + 63) / 64 + 7) / 8 * 8;
    double acc = 0;
    for (int64_t r0 = 0; r0 < n; r0 += rs) {
        const int64_t r1 = n - r0 < rs ? n : r0 + rs;
        double d = 0;
        for (int64_t b = r0; b < r1; b += 8) {
            float f = 0;
            for (int64_t r = b; r < r1 && r < b + 8; r++) {
                const float v = x[r * cols + c];
                f += squares ? v * v : v;
            }
            d += (double)f;
        }
        acc += d;
    }
    return (float)acc;
}
TEST(float_column_sums_in_row_blocks) {
    const int64_t rows[4] = {511, 512, 1100, 20000}, cols = 80;
    for (int t = 0; t < 4; t++) {
        const int64_t n = rows[t], sh[2] = {n, cols}, rs = (n + 63) / 64 < 256 ? 256 : ((n + 63) / 64 + 7) / 8 * 8;
        float *v = mixed_values(n * cols), got[80] = {0};
        if (!v) return;
        for (int64_t r = 0; r < n; r++) v[r * cols] = r == 0 ? 0x1p60f : r == rs ? -0x1p60f : 1.0f;
        st_tensor *x = st_from_data(ST_F32, 2, sh, v);
        st_set_eager(0);
        int ax = 0;
        st_tensor *s = st_sum(x, 1, &ax, 0), *x2 = st_square(x), *q = st_sum(x2, 1, &ax, 0);
        st_tensor *h = s ? st_mul_s(s, 0.5) : NULL, *e = h ? st_add_s(h, 1) : NULL;
        CHECK(s && st_to_host(s, ST_F32, got, sizeof got) == ST_OK);
        float gq[80] = {0}, ge[80] = {0};
        st_tensor *both[2] = {e, q};
        CHECK(e && q && st_realize(2, both) == ST_OK && st_to_host(e, ST_F32, ge, sizeof ge) == ST_OK &&
              st_to_host(q, ST_F32, gq, sizeof gq) == ST_OK);
        st_release(e);
        st_release(h);
        st_release(q);
        st_release(x2);
        st_release(s);
        st_release(x);
        const bool blocks = n >= 512;
        for (int64_t c = 0; c < cols; c++) {
            float want = blocks ? fblock_rows_model(v, n, cols, c, false) : fblock_col_model(v, n, cols, c, true);
            CHECK_MSG(got[c] == want, "column %lld of %lld rows: %.9g, the %s order gives %.9g", (long long)c,
                      (long long)n, (double)got[c], blocks ? "row blocks'" : "serial", (double)want);
            if (!blocks) continue;
            float wq = fblock_rows_model(v, n, cols, c, true), we = want * 0.5f + 1.0f;
            CHECK_MSG(gq[c] == wq && ge[c] == we, "column %lld of %lld rows: x^2 %.9g (model %.9g), s / 2 + 1 %.9g "
                      "(model %.9g)", (long long)c, (long long)n, (double)gq[c], (double)wq, (double)ge[c], (double)we);
        }
        CHECK_MSG(fblock_rows_model(v, n, cols, 0, false) != fblock_col_model(v, n, cols, 0, true),
                  "%lld rows: column 0 does not tell row blocks from the serial order", (long long)n);
        free(v);
    }
    const int64_t sh0[2] = {0, cols};   /* the kernel compiled above, with no rows */
    st_tensor *x0 = st_zeros(ST_F32, 2, sh0);
    int ax = 0;
    st_tensor *s0 = x0 ? st_sum(x0, 1, &ax, 0) : NULL;
    float g0[80];
    memset(g0, 0xff, sizeof g0);
    CHECK(s0 && st_to_host(s0, ST_F32, g0, sizeof g0) == ST_OK);
    for (int c = 0; c < cols; c++) CHECK_MSG(g0[c] == 0.0f, "column %d of 0 rows: %g", c, (double)g0[c]);
    st_release(s0);
    st_release(x0);
}

/* The other float-block paths: a full reduction's parallel blocks (each block of chunks starts
 * its own float blocks; the blocks' results added in order), and sums that must stay in double:
 * a user's cast to f64 (`x:double():sum()`) is summed in double lanes (rows) or serially (columns),
 * bit for bit against those orders, never in float. */
static double split_model(const float *x, int64_t n) {
    const int64_t nm = n >= 32 ? n - n % 16 : 0, k = nm / 16, nb = k < 64 ? k : 64;
    double acc = 0;
    for (int64_t q = 0; q < nb; q++) {
        const int64_t c0 = k * q / nb * 16, c1 = k * (q + 1) / nb * 16;
        double d[16] = {0};
        for (int64_t b = c0; b < c1; b += 128) {
            float f[16] = {0};
            for (int64_t c = b; c < c1 && c < b + 128; c += 16)
                for (int l = 0; l < 16; l++) f[l] += x[c + l];
            for (int l = 0; l < 16; l++) d[l] += (double)f[l];
        }
        for (int w = 8; w > 0; w >>= 1)
            for (int l = 0; l < w; l++) d[l] += d[l + w];
        acc += d[0];
    }
    for (int64_t j = nm; j < n; j++) acc += (double)x[j];
    return acc;
}
static double dlane_model(const float *x, int64_t n) {   /* double lanes, no float blocks */
    double d[16] = {0}, acc = 0;
    const int64_t nm = n >= 32 ? n - n % 16 : 0;
    for (int64_t c = 0; c < nm; c += 16)
        for (int l = 0; l < 16; l++) d[l] += (double)x[c + l];
    for (int w = 8; w > 0; w >>= 1)
        for (int l = 0; l < w; l++) d[l] += d[l + w];
    acc += d[0];
    for (int64_t j = nm; j < n; j++) acc += (double)x[j];
    return acc;
}
TEST(float_blocks_split_and_f64_casts) {
    const int64_t n = 300007;
    float *v = mixed_values(n);
    if (v) {   /* a full sum: one row cut into parallel blocks */
        st_tensor *x = st_from_data(ST_F32, 1, &n, v);
        st_set_eager(0);
        st_tensor *s = st_sum(x, 0, NULL, 0);
        float got = 0, want = (float)split_model(v, n);
        CHECK(s && st_to_host(s, ST_F32, &got, sizeof got) == ST_OK);
        CHECK_MSG(got == want, "a full sum of %lld: %.9g, the split float-block order gives %.9g", (long long)n,
                  (double)got, (double)want);
        st_release(s);
        st_release(x);
        free(v);
    }
    const int64_t sh[2] = {100, 300};
    float *u = mixed_values(sh[0] * sh[1]);
    if (!u) return;
    st_tensor *x = st_from_data(ST_F32, 2, sh, u), *xd = st_cast(x, ST_F64);
    for (int ax = 1; ax >= 0; ax--) {
        st_set_eager(0);
        st_tensor *s = st_sum(xd, 1, &ax, 0);
        double got[300] = {0};
        CHECK(s && st_to_host(s, ST_F64, got, (size_t)sh[1 - ax] * sizeof *got) == ST_OK);
        for (int64_t o = 0; o < sh[1 - ax]; o++) {
            double want = 0;
            if (ax == 1) {
                want = dlane_model(u + o * sh[1], sh[1]);
            } else {
                for (int64_t r = 0; r < sh[0]; r++) want += (double)u[r * sh[1] + o];
            }
            CHECK_MSG(got[o] == want, "x:double():sum(%d), output %lld: %.17g, in double %.17g", ax + 1, (long long)o,
                      got[o], want);
            if (got[o] != want) break;
        }
        st_release(s);
    }
    st_release(xd);
    st_release(x);
    free(u);
}

/* Few long rows (a full reduction to one value, or 3 rows of 100k) run row by row with each
 * row's loops parallel inside (blocks combined in a fixed order): same answers as the
 * interpreter, and the same bits on every run. */
static st_tensor *g_max_all(st_tensor **in) { return st_max(in[0], 0, NULL, 0); }
static st_tensor *g_mean_all(st_tensor **in) { return st_mean(in[0], 0, NULL, 0); }
static st_tensor *g_softmax_all(st_tensor **in) {
    int64_t n = st_numel(in[0]);
    st_tensor *f = st_reshape(in[0], 1, &n), *y = st_softmax(f, 0);
    st_release(f);
    return y;
}
TEST(full_reductions_in_parallel) {
    int64_t sh[2] = {3, 100003};
    st_tensor *x = input(ST_F32, 2, sh, 111);
    CHECK_EQ_INT(check_graph(g_sum_all, 1, &x, 1e-2), 1);
    CHECK_EQ_INT(check_graph(g_max_all, 1, &x, 0), 1);
    CHECK_EQ_INT(check_graph(g_mean_all, 1, &x, 1e-6), 1);
    CHECK_EQ_INT(check_graph(g_red_sum1, 1, &x, 1e-2), 1);
    CHECK_EQ_INT(check_graph(g_red_min1, 1, &x, 0), 1);
    CHECK_EQ_INT(check_graph(g_softmax, 1, &x, 1e-9), 1);
    CHECK_EQ_INT(check_graph(g_softmax_all, 1, &x, 1e-9), 1);
    st_tensor *xi = input(ST_I64, 2, sh, 112);
    CHECK(check_graph(g_sum_all, 1, &xi, 0) >= 1);
    double first = 0;
    for (int k = 0; k < 3; k++) {
        st_set_eager(0);
        st_tensor *s = st_sum(x, 0, NULL, 0);
        double v = NAN;
        CHECK(s && st_to_host(s, ST_F64, &v, sizeof v) == ST_OK);
        if (k == 0) first = v;
        CHECK_MSG(v == first, "run %d: %.17g != %.17g", k, v, first);
        st_release(s);
    }
    /* a NaN deep inside one block */
    int64_t n = 200000;
    float *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = (float)(i % 1000);
    h[123457] = NAN;
    st_tensor *xn = st_from_data(ST_F32, 1, &n, h);
    free(h);
    st_set_eager(0);
    st_tensor *m = st_max(xn, 0, NULL, 0);
    double mv = 0;
    CHECK(m && st_to_host(m, ST_F64, &mv, sizeof mv) == ST_OK);
    CHECK(isnan(mv));
    st_release(m);
    st_release(xn);
    st_release(xi);
    st_release(x);
}

/* Fuzzer seeds 1358 and 987. An f16 reduction read from its register by a later phase is
 * rounded to f16 as the interpreter's stored value is (log_softmax of f16 rows); a product keeps
 * the interpreter's order, because regrouping moves its overflow points: 1e200 * 1e200 * 1e-200
 * * 1e-200 is inf from the left but 1 in pairs. */
static st_tensor *g_f16_log_softmax(st_tensor **in) {
    st_tensor *h = st_cast(in[0], ST_F16), *l = st_log_softmax(h, 1), *y = st_mul(in[1], l);
    st_release(h);
    st_release(l);
    return y;
}
TEST(reduction_rounding_and_product_order) {
    int64_t sx[2] = {3, 40}, sc[2] = {3, 1};
    st_tensor *in[2] = {input(ST_F32, 2, sx, 121), input(ST_F32, 2, sc, 122)};
    CHECK_EQ_INT(check_graph(g_f16_log_softmax, 2, in, 1e-5), 1);
    st_release(in[0]);
    st_release(in[1]);
    int64_t n = 40;
    double v[40];
    for (int i = 0; i < 40; i++) v[i] = i < 2 ? 1e200 : i < 4 ? 1e-200 : 1.0;
    st_tensor *x = st_from_data(ST_F64, 1, &n, v);
    st_set_eager(0);
    st_tensor *p = st_prod(x, 0, NULL, 0);
    double pv = 0;
    CHECK(p && st_to_host(p, ST_F64, &pv, sizeof pv) == ST_OK);
    CHECK_MSG(isinf(pv) && pv > 0, "prod = %g, the interpreter's order gives inf", pv);
    st_release(p);
    st_release(x);
}

/* Fuzzer seed 342: an f32 matmul later cast to f64 is compared at f64 precision. The kernel
 * accumulates f32 products in double in the interpreter's k order, so the f32 result is the
 * interpreter's bit for bit. */
static st_tensor *g_matmul_f64_view(st_tensor **in) {
    st_tensor *y = st_matmul(in[0], in[1]), *d = st_cast(y, ST_F64);
    st_release(y);
    return d;
}
TEST(matmul_f32_matches_interpreter_bits) {
    int64_t sa[2] = {3, 130}, sb[2] = {130, 5};
    st_tensor *in[2] = {input(ST_F32, 2, sa, 131), input(ST_F32, 2, sb, 132)};
    CHECK(check_graph(g_matmul_f64_view, 2, in, 0) >= 1);
    st_release(in[0]);
    st_release(in[1]);
}

/* A stitched reduction nobody outside the kernel reads stays in a register: softmax allocates
 * its output and nothing else (no row max / row sum buffers). */
TEST(stitched_reductions_not_materialized) {
    int64_t sh[2] = {64, 256};
    st_tensor *x = input(ST_F32, 2, sh, 99);
    st_set_eager(0);
    st_tensor *y = st_softmax(x, 1);
    st_stats_t s0, s1;
    st_reset_stats();
    st_stats(&s0);
    CHECK(st_realize(1, &y) == ST_OK);
    st_stats(&s1);
    CHECK_EQ_INT(s1.kernels_launched - s0.kernels_launched, 1);
    CHECK_EQ_INT((int64_t)(s1.bytes_peak - s0.bytes_in_use), 64 * 256 * 4);
    st_release(y);
    st_release(x);
}

/* the interpreter tier: below jit_min nothing is compiled, results are the same */
TEST(interpreter_tier) {
    st_set_jit_min(1 << 30);
    st_tensor *x = input(ST_F32, 3, S3, 32);
    st_stats_t s0, s1;
    st_stats(&s0);
    int k = check_graph(g_softmax_manual, 1, &x, 1e-6);
    st_stats(&s1);
    CHECK(k >= 1);
    CHECK_EQ_INT(s1.interp_groups - s0.interp_groups, k);
    st_set_jit_min(0);
    st_release(x);
}

/* The interpreter tier releases a group's temporaries after their last reader (fuse_inode.dies):
 * a chain of 24 x (mul, add, tanh) over 1 MiB, one group, holds its input, its output and two
 * temporaries at a time. It held every one (each op and each broadcast scalar's view: 120 MiB
 * here; 1.9 GB for a 16 MB tensor: ST_JIT_ASYNC=1, the default, interprets a region until its
 * kernels are compiled). Same values as the interpreter. */
static st_tensor *g_tanh_chain(st_tensor **in) {
    st_tensor *y = in[0];
    st_retain(y);
    for (int i = 0; i < 24; i++) {
        st_tensor *m = st_mul_s(y, 1.0001), *a = st_add_s(m, 0.5), *t = st_tanh(a);
        st_release(m);
        st_release(a);
        st_release(y);
        y = t;
    }
    return y;
}
/* One-element broadcasts in the interpreter tier (fuser/exec.c lazy_broadcast): a scalar operand
 * read only by elementwise ops is not materialized (expm1(x) * 3 over 2 MiB peaks at expm1's
 * temporary and the output, not at a broadcast of the scalar too), while one read by a reduction, a matmul or a cast is;
 * f16 and f64 operands; every value as the eager interpreter's. */
static st_tensor *g_bcast_mix(st_tensor **in) {
    st_tensor *c = st_scalar(0.75, st_dtype_of(in[0]));
    st_tensor *e = st_expand(c, st_ndim(in[0]), (int64_t[]){st_size(in[0], 0), st_size(in[0], 1)});
    st_tensor *m = st_mul(in[0], e), *a = st_add_s(m, -1.5), *t = st_tanh(a);   /* elementwise readers */
    int ax = 1;
    st_tensor *r = st_sum(e, 1, &ax, 1);                                        /* a reduction reads e */
    st_tensor *y = st_add(t, r);
    st_tensor *k = st_cast(e, ST_F32), *z = st_cast(y, ST_F32), *w = st_add(z, k);   /* a cast reads e */
    st_tensor *tmp[] = {c, e, m, a, t, r, y, k, z};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) st_release(tmp[i]);
    return w;
}
/* the broadcast's scalar read by another node too (when that node is its last reader and runs
 * before the broadcast's readers, the broadcast is evaluated: lazy_broadcast's guard; the plan
 * decides the order, so this checks the values, whichever way it goes) */
static st_tensor *g_bcast_src_dies_later(st_tensor **in) {
    st_tensor *c0 = st_scalar(0.5, st_dtype_of(in[0])), *c = st_add_s(c0, 0.25);   /* a 0-d temporary */
    st_release(c0);
    st_tensor *e = st_expand(c, st_ndim(in[0]), (int64_t[]){st_size(in[0], 0), st_size(in[0], 1)});
    st_tensor *n = st_neg(c), *m = st_mul(in[0], e), *y = st_add(m, n);
    st_release(c);
    st_release(e);
    st_release(n);
    st_release(m);
    return y;
}
/* e = a broadcast of 3 made first, then expm1(x) * e (f64, a chain no other test compiles) */
static st_tensor *g_expm1_times3(st_tensor **in) {
    st_tensor *c = st_scalar(3, ST_F64), *e = st_expand(c, 2, (int64_t[]){st_size(in[0], 0), st_size(in[0], 1)});
    st_tensor *m = st_expm1(in[0]), *y = st_mul(m, e);
    st_release(c);
    st_release(e);
    st_release(m);
    return y;
}
TEST(interpreter_tier_lazy_broadcasts) {
    st_set_jit_min(1 << 30);
    static const st_dtype dts[3] = {ST_F32, ST_F16, ST_F64};
    for (int d = 0; d < 3; d++) {
        st_tensor *x = input(dts[d], 2, S2, 40 + (unsigned)d);
        st_stats_t s0, s1;
        st_stats(&s0);
        int k = check_graph(g_bcast_mix, 1, &x, 0);
        CHECK(check_graph(g_bcast_src_dies_later, 1, &x, 0) >= 1);
        st_stats(&s1);
        CHECK(k >= 1);
        CHECK(s1.interp_groups - s0.interp_groups >= 1);
        st_release(x);
    }
    const int64_t sh[2] = {512, 512};   /* 2 MiB of f64 */
    st_tensor *x = input(ST_F64, 2, sh, 44);
    st_set_eager(0);
    st_tensor *y = g_expm1_times3(&x);
    st_stats_t s0, s1;
    st_reset_stats();
    st_stats(&s0);
    CHECK(st_realize(1, &y) == ST_OK);
    st_stats(&s1);
    CHECK_EQ_INT(s1.interp_groups - s0.interp_groups, 1);
    /* expm1's temporary and the output; a materialized broadcast would add 2 MiB */
    const int64_t peak = (int64_t)(s1.bytes_peak - s0.bytes_in_use);
    CHECK_MSG(peak < (4 << 20) + 65536, "expm1(x) * 3 over 2 MiB peaked %lld bytes over its input", (long long)peak);
    double *a = ft_host(y), *b = ft_host(x);
    for (int64_t i = 0; a && b && i < 512 * 512; i += 101) CHECK_NEAR(a[i], expm1(b[i]) * 3, 1e-12 * fabs(a[i]) + 1e-15);
    free(a);
    free(b);
    st_release(y);
    st_release(x);
    st_set_eager(1);
    st_set_jit_min(0);
}

TEST(interpreter_tier_releases_temporaries) {
    const int64_t sh[2] = {512, 512};
    st_tensor *x = input(ST_F32, 2, sh, 36);
    st_set_jit_min(1 << 30);
    st_set_eager(0);
    st_tensor *y = g_tanh_chain(&x);
    st_stats_t s0, s1;
    st_reset_stats();
    st_stats(&s0);
    CHECK(st_realize(1, &y) == ST_OK);
    st_stats(&s1);
    CHECK_EQ_INT(s1.interp_groups - s0.interp_groups, 1);
    int64_t mib = (int64_t)(s1.bytes_peak - s0.bytes_in_use) >> 20;
    CHECK_MSG(mib <= 4, "the chain's peak: %lld MiB over its input (at most 4 expected)", (long long)mib);
    st_set_eager(1);
    st_tensor *ref = g_tanh_chain(&x);
    double *a = ft_host(y), *b = ft_host(ref);
    for (int64_t i = 0; a && b && i < 512 * 512; i += 97) CHECK_NEAR(a[i], b[i], 0);
    free(a);
    free(b);
    st_set_eager(0);
    st_set_jit_min(0);
    st_release(ref);
    st_release(y);
    st_release(x);
}

/* The kernel body is capped (FUSE_MAX_WORK units of fuse_node_work): 32 independent sines over
 * one domain, and a sum of 40 sines, are cut into several kernels (a sine weighs 128 of 1024
 * units, so at most 8 per body) with the interpreter's values; without the cap (before it) each
 * was one kernel whose C compile took 15 s and more. Horizontal batching is off so each body is
 * a launch of its own. */
static st_tensor *g_sines_sum(st_tensor **in) {
    st_tensor *acc = st_sin(in[0]);
    for (int i = 1; i < 40; i++) {
        st_tensor *sh = st_add_s(in[0], 0.01 * i), *sn = st_sin(sh), *nx = st_add(acc, sn);
        st_release(sh);
        st_release(sn);
        st_release(acc);
        acc = nx;
    }
    return acc;
}
TEST(kernel_body_is_capped) {
    unsigned saved = fuse_flags();
    fuse_set_flags(saved & ~FUSE_HORIZONTAL);
    st_tensor *x = input(ST_F32, 3, S3, 34);
    int k = check_graph(g_sines_sum, 1, &x, 1e-4);
    CHECK_MSG(k >= 5 && k <= 8, "a sum of 40 sines: %d kernels, expected 5 to 8", k);
    st_tensor *ys[32];
    st_stats_t s0, s1;
    for (int i = 0; i < 32; i++) {
        st_tensor *sh = st_add_s(x, 0.1 * i);
        ys[i] = st_sin(sh);
        st_release(sh);
    }
    st_stats(&s0);
    CHECK(st_realize(32, ys) == ST_OK);
    st_stats(&s1);
    /* each output is an add and a sine: 129 units, 7 per body of 1024: 5 kernels */
    CHECK_EQ_INT(s1.kernels_launched - s0.kernels_launched, 5);
    double *xv = ft_host(x);
    for (int i = 0; i < 32; i++) {
        double *yv = ft_host(ys[i]);
        for (int j = 0; xv && yv && j < 4 * 8 * 16; j += 37) CHECK_NEAR(yv[j], sin((float)(xv[j] + 0.1 * i)), 1e-5);
        free(yv);
        st_release(ys[i]);
    }
    free(xv);
    st_release(x);
    fuse_set_flags(saved);
}

/* allocation failures anywhere in planning, lowering or launching: an error, never a crash or a
 * leak (the sanitizer build checks the leaks), and the runtime keeps working */
TEST(out_of_memory_and_interrupt) {
    st_tensor *x = input(ST_F32, 3, S3, 33);
    st_set_eager(0);
    int ok = 0, oom = 0;
    for (int nth = 1; nth < 80; nth++) {
        st_tensor *y = g_softmax_manual(&x);
        if (!y) continue;
        st_debug_fail_alloc(nth);
        st_status s = st_realize(1, &y);
        st_debug_fail_alloc(0);
        if (s == ST_OK) ok++;
        else if (s == ST_ERR_OOM) oom++;
        else CHECK_MSG(0, "nth=%d: status %d: %s", nth, s, st_last_error());
        st_clear_error();
        st_release(y);
    }
    CHECK(ok > 0 && oom > 0);
    st_tensor *y = g_chain_sum(&x);
    st_interrupt();
    CHECK(st_realize(1, &y) == ST_ERR_INTERRUPT);
    st_clear_error();
    st_release(y);
    CHECK_EQ_INT(check_graph(g_chain_sum, 1, &x, 1e-5), 1);
    st_release(x);
}

/* The order of the groups keeps memory low (partition.c memory_pick): a chain of layers s_i =
 * tanh(W_i @ s_{i-1}) trained one step by hand: the backward's d_i = g_i * (1 - s_i^2) is read by
 * the input gradient g_{i-1} = W_i^T @ d_i and by the weight gradient r_i = d_i @ s_{i-1}^T (small).
 * Run as soon as it is ready, r_i frees d_i and s_{i-1}; deferred to the end (the newest-first
 * order did: r_i's groups were made first), every d_i and s_i stays alive. The live peak of the
 * flush stays near the forward's values plus a few buffers. */
TEST(order_frees_saved_values_early) {
    enum { L = 8 };
    const int64_t xs[2] = {256, 1024}, ws[2] = {256, 256};   /* 1 MiB per activation */
    st_tensor *x = input(ST_F32, 2, xs, 7), *w[L + 1], *s[L + 1], *g, *r[L + 1];
    for (int i = 1; i <= L; i++) {
        st_tensor *t = input(ST_F32, 2, ws, 100 + i);
        w[i] = st_mul_s(t, 1.0 / 32);
        st_release(t);
    }
    CHECK(st_realize(L, w + 1) == ST_OK);
    s[0] = st_retain(x);
    for (int i = 1; i <= L; i++) {
        st_tensor *t = st_matmul(w[i], s[i - 1]);
        s[i] = st_tanh(t);
        st_release(t);
    }
    g = st_mul_s(s[L], 2.0);
    for (int i = L; i >= 1; i--) {
        st_tensor *sq = st_mul(s[i], s[i]), *one = st_rsub_s(sq, 1.0), *d = st_mul(g, one);
        st_tensor *xt = st_transpose(s[i - 1], 0, 1), *wt = st_transpose(w[i], 0, 1);
        r[i] = st_matmul(d, xt);
        st_release(g);
        g = st_matmul(wt, d);
        st_release(sq);
        st_release(one);
        st_release(d);
        st_release(xt);
        st_release(wt);
    }
    for (int i = 1; i <= L; i++) st_release(s[i]);   /* only the outputs are held */
    r[0] = g;
    st_reset_stats();
    st_stats_t s0, s1;
    st_stats(&s0);
    CHECK(st_realize(L + 1, r) == ST_OK);
    st_stats(&s1);
    /* the forward's L activations must be held until the backward reaches them; a good order
     * needs about 3 more (d_i, the next g, a product); deferring every r_i holds all d_i too */
    double peak_mb = (double)(s1.bytes_peak - s0.bytes_in_use) / (1 << 20);
    CHECK_MSG(peak_mb <= L + 4, "live peak %.1f MiB over the inputs (at most %d expected)", peak_mb, L + 4);
    for (int i = 0; i <= L; i++) st_release(r[i]);
    for (int i = 1; i <= L; i++) st_release(w[i]);
    st_release(s[0]);
    st_release(x);
}

int main(void) {
    if (!ft_cache_dir_create("/tmp/stitch-fuser-XXXXXX")) return 1;
    st_set_jit_min(0);
    st_set_poison(1);
    RUN(reduce_with_producers_is_one_kernel);
    RUN(reduce_epilogue_is_one_kernel);
    RUN(chain_of_20_is_one_kernel);
    RUN(kernel_body_is_capped);
    RUN(softmax_patterns);
    RUN(multi_output_one_kernel);
    RUN(matmul_transposed_operands);
    RUN(broadcast_stride0_view);
    RUN(slices_with_steps);
    RUN(cat_masked_views);
    RUN(gather_and_index_select);
    RUN(scatter_add);
    RUN(setview_inplace_slice);
    RUN(scalar_change_does_not_recompile);
    RUN(reductions);
    RUN(dtypes_and_sources);
    RUN(stitch_reads_only_the_current_row);
    RUN(row_values_read_by_two_groups_merge_into_the_rows);
    RUN(independent_reductions_share_a_launch);
    RUN(reductions_on_partial_accumulators);
    RUN(float_row_sums_in_float_blocks);
    RUN(float_column_sums_in_float_blocks);
    RUN(float_column_sums_in_row_blocks);
    RUN(float_blocks_split_and_f64_casts);
    RUN(full_reductions_in_parallel);
    RUN(reduction_rounding_and_product_order);
    RUN(matmul_f32_matches_interpreter_bits);
    RUN(stitched_reductions_not_materialized);
    RUN(interpreter_tier);
    RUN(interpreter_tier_releases_temporaries);
    RUN(interpreter_tier_lazy_broadcasts);
    RUN(out_of_memory_and_interrupt);
    RUN(order_frees_saved_values_early);
    st_shutdown();
    ft_cache_dir_remove();
    TEST_MAIN_END();
}
