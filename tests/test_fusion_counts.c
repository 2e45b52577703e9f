/*
 * test_fusion_counts.c — the kernel counts that reduction stitching promises (issue 5), and the
 * ST_FUSE switches of fuser/partition.c.
 *
 * Each pattern is built twice from the same realized inputs: eagerly (st_set_eager(1): every op
 * through the interpreter, the oracle) and lazily with st_set_jit_min(0) (every region through
 * the JIT); values must agree and the lazy flush must launch the promised kernels
 * (st_stats.kernels_launched). Goals: softmax, log_softmax, layernorm, rmsnorm and per-row
 * cross-entropy forward 1 kernel each; cross-entropy with the batch mean 2; every backward at
 * most 2 (layernorm's weight and bias gradients are sibling column reductions: one kernel).
 * Counts are a property of the partition, which depends on the device in two rules only, both
 * the CPU's: partition.c merge_over_rows (a layernorm training step's forward is 1 kernel there,
 * 2 on a GPU) and reduce groups in horizontal batches (fuser/horizontal.c); on a CUDA device the
 * same plan is launched otherwise (tests/test_cuda_counts.c asserts its counts on a fake cuda:0).
 * Switches: each fusion kind turned off (fuse_set_flags) changes the count of an example built
 * for it and never its values.
 */
#include "fuser/fuser.h"
#include "fuse_test_util.h"

#include <stdlib.h>
#include <string.h>

enum { N = 64, C = 512, MAXT = 8 };
/* ---- tensors: every intermediate goes to the pool (K, ft_drain) released at the end of a build ---- */

static st_tensor *input(int ndim, const int64_t *shape, unsigned seed) {
    st_tensor *t = ft_f32_input(ndim, shape, seed);
    st_realize(1, &t);
    return t;
}

static st_tensor *x_in, *w_in, *b_in, *tgt, *idx;   /* (N, C), (C), (C), (N, 1) i64, (8) i64 */

static st_tensor *mean_last(st_tensor *a) {
    int ax = 1;
    return K(st_mean(a, 1, &ax, 1));
}
/* the row statistics of the last norm built (mean, rstd): what its backward reads */
static st_tensor *row_stat, *row_mean;
static st_tensor *layernorm(st_tensor *x, st_tensor *w, st_tensor *b) {
    st_tensor *mu = row_mean = mean_last(x), *xc = K(st_sub(x, mu));
    st_tensor *var = mean_last(K(st_mul(xc, xc)));
    st_tensor *rstd = row_stat = K(st_rsqrt(K(st_add_s(var, 1e-5))));
    st_tensor *y = K(st_mul(xc, rstd));
    return K(st_add(K(st_mul(y, w)), b));
}
static st_tensor *rmsnorm(st_tensor *x, st_tensor *w) {
    st_tensor *ms = mean_last(K(st_mul(x, x)));
    row_stat = K(st_rsqrt(K(st_add_s(ms, 1e-6))));
    return K(st_mul(K(st_mul(x, row_stat)), w));
}
/* per-row cross-entropy: -log_softmax(x):gather(1, t), shape (N) */
static st_tensor *ce_rows(st_tensor *x) {
    st_tensor *g = K(st_gather(K(st_log_softmax(x, 1)), 1, tgt));
    return K(st_neg(K(st_squeeze(g, 1))));
}

/* ---- forward patterns: out[0..] from the inputs (x, w, b) ---- */
typedef int (*build_fn)(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **out);

static int f_softmax(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    o[0] = K(st_softmax(x, 1));
    return 1;
}
static int f_log_softmax(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    o[0] = K(st_log_softmax(x, 1));
    return 1;
}
static int f_layernorm(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    o[0] = layernorm(x, w, b);
    return 1;
}
static int f_rmsnorm(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)b;
    o[0] = rmsnorm(x, w);
    return 1;
}
static int f_ce_rows(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    o[0] = ce_rows(x);
    return 1;
}
static int f_ce_mean(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    o[0] = K(st_mean(ce_rows(x), 0, NULL, 0));
    return 1;
}
/* rows read at other rows: index_select along the kept dim is not row-local (2 kernels) */
static int f_softmax_select(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    o[0] = K(st_index_select(K(st_softmax(x, 1)), 0, idx));
    return 1;
}
/* a gather along the reduced dim with an index of the rows' shape (a permutation in each row) */
static int f_softmax_gather_row(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    st_tensor *ar = K(st_arange(7, N * C + 7, 1, ST_I64));
    st_tensor *perm = K(st_reshape(K(st_remainder(ar, K(st_scalar(C, ST_I64)))), 2, (int64_t[]){N, C}));
    o[0] = K(st_gather(K(st_softmax(x, 1)), 1, perm));
    return 1;
}

/* ---- backward patterns: the leaves' gradients of a scalar loss ----
 * The forward flush realizes the loss and the norms' row statistics (mean, rstd, as a forward kernel
 * that stores what backward reads would): otherwise the backward recomputes the statistic in a
 * kernel of its own before the weight gradient's column reduction can read it (3 kernels). */
static int loss_grads(st_tensor *loss, st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    st_tensor *fwd[3] = {loss, row_stat, row_mean};
    if (!loss || st_realize(3, fwd) != ST_OK) return -1;   /* NULL entries are skipped */
    row_stat = row_mean = NULL;
    st_stats_t s;
    st_stats(&s);
    if (st_backward(loss, NULL) != ST_OK) return -1;
    int n = 0;
    st_tensor *leaves[3] = {x, w, b};
    for (int i = 0; i < 3; i++)
        if ((o[n] = K(st_grad(leaves[i])))) n++;   /* unused leaves have none */
    return n;
}
static st_tensor *weighted_sum(st_tensor *y) {   /* sum(y * x_in): a loss with a dense gradient */
    return K(st_sum(K(st_mul(y, x_in)), 0, NULL, 0));
}
static int b_softmax(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    return loss_grads(weighted_sum(K(st_softmax(x, 1))), x, w, b, o);
}
static int b_log_softmax(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    return loss_grads(weighted_sum(K(st_log_softmax(x, 1))), x, w, b, o);
}
static int b_layernorm(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    return loss_grads(weighted_sum(layernorm(x, w, b)), x, w, b, o);
}
static int b_rmsnorm(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    return loss_grads(weighted_sum(rmsnorm(x, w)), x, w, b, o);
}
static int b_ce_mean(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    st_tensor *outs[1];
    f_ce_mean(x, w, b, outs);
    return loss_grads(outs[0], x, w, b, o);
}

/* The forward flushed alone (a loss:item() before backward): only the loss is realized; the row
 * statistics stay live through the autograd records. The cost model (fuser/cost.c) has the
 * forward's row kernel store them; without it the backward recomputes rstd in a kernel of its
 * own (3 kernels instead of 2). */
static int b_layernorm_alone(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    st_tensor *loss = weighted_sum(layernorm(x, w, b));
    row_stat = row_mean = NULL;
    return loss_grads(loss, x, w, b, o);
}

/* ---- training steps: forward, backward and the loss in one flush (grad = 2) ----
 * The row statistics are then read by the forward's next phase and by the backward's groups:
 * softmax's max and sum (its output feeds a matmul, as attention's probabilities do) and
 * layernorm's variance are stitched into the forward's kernel and stored for the backward. */
static int step_grads(st_tensor *loss, st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    if (!loss || st_backward(loss, NULL) != ST_OK) return -1;
    int n = 0;
    st_tensor *outs[4] = {loss, x, w, b};
    for (int i = 0; i < 4; i++)
        if ((o[n] = i ? K(st_grad(outs[i])) : loss)) n++;
    return n;
}
/* sum((y @ x^T)^2): y feeds a matmul, whose backward reads y again */
static st_tensor *mm_loss(st_tensor *y, st_tensor *x) {
    st_tensor *z = K(st_matmul(y, K(st_transpose(x, 0, 1))));
    return K(st_sum(K(st_mul(z, z)), 0, NULL, 0));
}
static int t_softmax(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    return step_grads(mm_loss(K(st_softmax(x, 1)), x), x, w, b, o);
}
static int t_layernorm(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    return step_grads(mm_loss(layernorm(x, w, b), x), x, w, b, o);
}

/* Fresh leaves (copies of the inputs; requires_grad when grad is set), so gradients never
 * accumulate between the eager and the lazy run. */
static void leaves(int grad, st_tensor **x, st_tensor **w, st_tensor **b) {
    st_tensor *src[3] = {x_in, w_in, b_in}, **dst[3] = {x, w, b};
    for (int i = 0; i < 3; i++) {
        *dst[i] = K(st_clone(src[i]));
        st_realize(1, dst[i]);
        if (grad) st_set_requires_grad(*dst[i], 1);
    }
}

/* Runs fn eagerly and lazily; checks the values; returns the kernels of the lazy flush that
 * realizes the outputs (-1 on failure, recorded). */
static int run_pattern(build_fn fn, int grad) {
    st_tensor *x, *w, *b, *ref[MAXT], *out[MAXT];
    st_set_eager(1);
    leaves(grad, &x, &w, &b);
    row_stat = row_mean = NULL;
    int nref = fn(x, w, b, ref);
    for (int i = 0; i < nref; i++) st_retain(ref[i]);
    ft_drain();
    st_set_eager(0);
    leaves(grad, &x, &w, &b);
    st_sync();
    st_stats_t s0, s1;
    st_stats(&s0);
    row_stat = row_mean = NULL;
    int nout = fn(x, w, b, out);
    if (grad == 1) st_stats(&s0);   /* the forward was realized inside fn: count the backward only */
    st_status s = nout > 0 ? st_realize(nout, out) : ST_ERR_INTERNAL;
    st_stats(&s1);
    int kernels = (int)(s1.kernels_launched - s0.kernels_launched);
    CHECK_MSG(s == ST_OK && nout == nref, "build/realize failed (%d vs %d outputs): %s", nout, nref, st_last_error());
    for (int i = 0; i < nout && i < nref && s == ST_OK; i++) {
        CHECK_EQ_INT(st_numel(out[i]), st_numel(ref[i]));
        double *a = ft_host(out[i]), *e = ft_host(ref[i]);
        for (int64_t j = 0; a && e && j < st_numel(out[i]) && !test_cur_failed; j++) {
            CHECK_NEAR(a[j], e[j], 1e-4);
            if (test_cur_failed) printf("  (output %d, element %lld)\n", i, (long long)j);
        }
        CHECK(a && e);
        free(a);
        free(e);
    }
    for (int i = 0; i < nref; i++) st_release(ref[i]);
    ft_drain();
    return s == ST_OK ? kernels : -1;
}

/* Recompute under broadcast (partition.c amplified_cuts): v, a sum of `terms` column blocks of x
 * (N, C/8 each: one load per block), read 16 times per element through an expand (64K reads).
 * With 8 loads, v is stored once by its own kernel and the consumer loads it (2 kernels); with
 * 2, recomputing is cheaper and it stays inlined (1 kernel). */
static int broadcast_read_of_sum(st_tensor *x, int terms, st_tensor **o) {
    st_tensor *v = NULL;
    for (int k = 0; k < terms; k++) {
        st_tensor *blk = K(st_slice(x, 1, (int64_t)k * (C / 8), (int64_t)(k + 1) * (C / 8), 1));
        v = v ? K(st_add(v, blk)) : blk;
    }
    st_tensor *e = K(st_expand(K(st_reshape(v, 3, (int64_t[]){N, C / 8, 1})), 3, (int64_t[]){N, C / 8, 16}));
    st_tensor *i = K(st_full(ST_F32, 3, (int64_t[]){N, C / 8, 16}, 0.5));
    o[0] = K(st_mul(e, i));
    return 1;
}
static int f_bcast_sum8(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    return broadcast_read_of_sum(x, 8, o);
}
static int f_bcast_sum2(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    return broadcast_read_of_sum(x, 2, o);
}

/* st_store_hint: v = exp(x) read by two products is inlined into their kernel (1 kernel); hinted,
 * it is stored by a kernel of its own and loaded (2), the same values. */
static int store_hinted(st_tensor *x, int hint, st_tensor **o) {
    st_tensor *v = K(st_exp(x));
    if (hint) v = K(st_store_hint(v));
    o[0] = K(st_add(K(st_mul_s(v, 2)), K(st_mul(v, x))));
    return 1;
}
static int f_store_hint(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    return store_hinted(x, 1, o);
}
static int f_no_store_hint(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    return store_hinted(x, 0, o);
}

static void expect(const char *name, build_fn fn, int grad, int want) {
    int k = run_pattern(fn, grad);
    printf("  %-22s %d kernel%s\n", name, k, k == 1 ? "" : "s");
    CHECK_MSG(k == want, "%s: %d kernels, expected %d", name, k, want);
}

TEST(forward_counts) {
    expect("softmax", f_softmax, 0, 1);
    expect("log_softmax", f_log_softmax, 0, 1);
    expect("layernorm", f_layernorm, 0, 1);
    expect("rmsnorm", f_rmsnorm, 0, 1);
    expect("cross-entropy (rows)", f_ce_rows, 0, 1);
    expect("cross-entropy (mean)", f_ce_mean, 0, 2);
}

TEST(gathers_inside_and_outside_the_row) {
    expect("softmax:gather(1, perm)", f_softmax_gather_row, 0, 1);
    expect("index_select(softmax,0)", f_softmax_select, 0, 2);
}

TEST(backward_counts) {
    expect("softmax backward", b_softmax, 1, 1);
    expect("log_softmax backward", b_log_softmax, 1, 1);
    expect("layernorm backward", b_layernorm, 1, 2);
    expect("rmsnorm backward", b_rmsnorm, 1, 2);
    expect("cross-entropy backward", b_ce_mean, 1, 1); /* the one-hot gather adjoint fuses with softmax's */
}

/* cost.c's decision: row statistics kept alive by autograd are stored by the forward kernel that
 * computes them, so a forward flushed alone does not cost the backward a recompute kernel */
TEST(costly_values_read_under_broadcast_are_stored) {
    expect("sum of 8 loads, read 16x", f_bcast_sum8, 0, 2);
    expect("sum of 2 loads, read 16x", f_bcast_sum2, 0, 1);
}

TEST(store_hint_stores_the_value) {
    expect("exp(x) read twice", f_no_store_hint, 0, 1);
    expect("store_hint(exp(x))", f_store_hint, 0, 2);
}

TEST(kept_row_statistics_stored) {
    expect("layernorm bwd (fwd alone)", b_layernorm_alone, 1, 2);
}

/* q, k, v-like pieces selected from one projection: x (N, C) viewed as (4, 2, N, C/8) and split
 * into (heads, rows, features) pieces;
 * loss = sum(p0 * p1 * p2 * p3). Each piece's gradient goes back through the split as a masked
 * view over x's dims split at the view's strides, so the four add up in one pointwise kernel
 * (was four copies into zeros and the adds: 6 kernels). */
static int b_split(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    st_tensor *r = K(st_reshape(x, 4, (int64_t[]){N, 4, 2, C / 8}));
    st_tensor *v = K(st_permute(r, (int[]){1, 2, 0, 3}));   /* (4, heads 2, N, C/8) */
    st_tensor *prod = K(st_select(v, 0, 0));
    for (int i = 1; i < 4; i++) prod = K(st_mul(prod, K(st_select(v, 0, i))));
    return loss_grads(K(st_sum(prod, 0, NULL, 0)), x, w, b, o);
}

/* softmax: the forward 1 kernel (was 3: max, sum, divide), then the product, the loss, the
 * backward's matmuls and its row reduction; layernorm: statistics and rstd 1 kernel (was 2:
 * the rstd apart, stored for the backward), the normalization 1. */
TEST(training_step_counts) {
    /* on the CPU, independent reduce groups of one level are batched into one launch
     * (horizontal.c), and the layernorm forward's normalization is merged into its statistics'
     * kernel (partition.c merge_over_rows) */
    int cpu = strcmp(st_default_device(), "cpu") == 0;
    expect("softmax step", t_softmax, 2, cpu ? 6 : 7);
    expect("layernorm step", t_layernorm, 2, cpu ? 6 : 9);
    expect("split backward", b_split, 1, 1);
}

/* ---- ST_FUSE switches ---- */
static int s_inline(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {   /* tanh(x*2+1) */
    (void)w, (void)b;
    o[0] = K(st_tanh(K(st_add_s(K(st_mul_s(x, 2)), 1))));
    return 1;
}
static int s_reduce(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {  /* exp(x+1):sum(1) */
    (void)w, (void)b;
    int ax = 1;
    o[0] = K(st_sum(K(st_exp(K(st_add_s(x, 1)))), 1, &ax, 0));
    return 1;
}
static int s_multi(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {   /* column sums */
    (void)w, (void)b;
    int ax = 0;
    o[0] = K(st_sum(x, 1, &ax, 0));
    o[1] = K(st_sum(K(st_mul(x, x)), 1, &ax, 0));
    return 2;
}
/* y = x*2 is needed anyway; y^T @ m reads it transposed (prologue) or from a contiguous copy */
static int s_prologue(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    st_tensor *y = K(st_mul_s(x, 2));
    st_tensor *m = K(st_slice(x, 1, 0, 16, 1));   /* (N, 16) */
    o[0] = y;
    o[1] = K(st_matmul(K(st_transpose(y, 0, 1)), m));
    return 2;
}

/* Two unrelated values in one group: t = x + sum(-x, 1) is stitched into the pointwise group
 * that stores m = (x*2)*x (a recent group of the same shape), and m feeds a column sum sibling
 * of sum(x*2, 0). With FUSE_REDUCE off, -x cannot be inlined into t's reduce group; it must not
 * join the column-sum group either: that group loads m from t's group, which would load -x
 * from it (a cycle that no node path shows: the fallback ran the region op by op). */
static int s_cycle(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    int row = 1, col = 0;
    st_tensor *a = K(st_mul_s(x, 2));
    st_tensor *r = K(st_sum(K(st_neg(x)), 1, &row, 1));
    o[0] = K(st_add(x, r));
    o[1] = K(st_sum(K(st_mul(a, x)), 1, &col, 0));
    o[2] = K(st_sum(a, 1, &col, 0));
    return 3;
}

/* The same with pointwise groups only, FUSE_INLINE off: p = u + 2 starts a group, u = x*3 (read
 * by p, not inlined) a second one, which c = -x + 1 joins (a recent group of its shape). -x may
 * not be inlined into c's group and must not join p's: p's group loads u from c's group. */
static int s_cycle_inline(st_tensor *x, st_tensor *w, st_tensor *b, st_tensor **o) {
    (void)w, (void)b;
    st_tensor *nx = K(st_neg(x));
    o[0] = K(st_add_s(nx, 1));
    o[1] = K(st_mul_s(x, 3));
    o[2] = K(st_add_s(o[1], 2));
    return 3;
}

static void expect_switch(const char *name, unsigned kind, build_fn fn, int on, int off) {
    fuse_set_flags(FUSE_ALL);
    int a = run_pattern(fn, 0);
    fuse_set_flags(FUSE_ALL & ~kind);
    int b = run_pattern(fn, 0);
    fuse_set_flags(FUSE_ALL);
    printf("  %-10s on: %d, off: %d kernels\n", name, a, b);
    CHECK_MSG(a == on && b == off, "%s: %d kernels on, %d off; expected %d and %d", name, a, b, on, off);
}

TEST(each_switch_changes_counts_not_values) {
    expect_switch("inline", FUSE_INLINE, s_inline, 1, 3);
    expect_switch("reduce", FUSE_REDUCE, s_reduce, 1, 2);
    expect_switch("stitch", FUSE_STITCH, f_softmax, 1, 3);
    /* the two column sums are independent: with FUSE_MULTI off, the CPU's horizontal batches
     * (fuser/horizontal.c: reduce members on the CPU) would still launch them as one */
    expect_switch("multi", FUSE_MULTI | FUSE_HORIZONTAL, s_multi, 1, 2);
    expect_switch("prologue", FUSE_MM_PROLOGUE, s_prologue, 2, 3);
    fuse_set_flags(0);
    int k = run_pattern(f_layernorm, 0);
    fuse_set_flags(FUSE_ALL);
    printf("  none: layernorm %d kernels\n", k);
    CHECK_MSG(k > 4, "ST_FUSE=none: layernorm in %d kernels", k);
}

/* With a kind off, every region is still planned (no cycle, so no op-by-op fallback). */
TEST(switches_plan_without_cycles) {
    unsigned kinds[] = {FUSE_INLINE, FUSE_REDUCE};
    build_fn fns[] = {s_cycle_inline, s_cycle};
    for (int i = 0; i < 2; i++) {
        uint64_t fb = fuse_plan_fallbacks();
        fuse_set_flags(FUSE_ALL & ~kinds[i]);
        int k = run_pattern(fns[i], 0);
        fuse_set_flags(FUSE_ALL);
        printf("  kind %#x off: %d kernels, %llu planning fallbacks\n", kinds[i], k,
               (unsigned long long)(fuse_plan_fallbacks() - fb));
        CHECK_MSG(k > 0 && fuse_plan_fallbacks() == fb, "kind %#x off: %d kernels, %llu planning fallbacks",
                  kinds[i], k, (unsigned long long)(fuse_plan_fallbacks() - fb));
    }
}

int main(void) {
    if (!ft_cache_dir_create("/tmp/st_fcounts_XXXXXX")) return 1;
    st_set_jit_min(0);
    st_set_poison(1);
    x_in = input(2, (int64_t[]){N, C}, 1);
    w_in = input(1, (int64_t[]){C}, 2);
    b_in = input(1, (int64_t[]){C}, 3);
    int64_t t[N], sel[8] = {3, 0, 63, 5, 5, 17, 1, 40};
    for (int i = 0; i < N; i++) t[i] = (i * 37 + 11) % C;
    tgt = st_from_data(ST_I64, 2, (int64_t[]){N, 1}, t);
    idx = st_from_data(ST_I64, 1, (int64_t[]){8}, sel);
    RUN(forward_counts);
    RUN(gathers_inside_and_outside_the_row);
    RUN(backward_counts);
    RUN(store_hint_stores_the_value);
    RUN(kept_row_statistics_stored);
    RUN(costly_values_read_under_broadcast_are_stored);
    RUN(training_step_counts);
    RUN(each_switch_changes_counts_not_values);
    RUN(switches_plan_without_cycles);
    st_release(x_in);
    st_release(w_in);
    st_release(b_in);
    st_release(tgt);
    st_release(idx);
    st_shutdown();
    ft_cache_dir_remove();
    TEST_MAIN_END();
}
