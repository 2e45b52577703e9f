/*
 * test_epilogue.c — matmul groups with fused epilogues (docs/fusion.md "matmul"): the elementwise
 * consumers of a matmul's output (bias, activation, residual, scale, cast) run where the GEMM
 * stores each element, so `gelu(x@w + b)` is one kernel.
 *
 * Every graph is built eagerly (the reference interpreter: matmul stored, then each op) and lazily
 * (JIT, st_set_jit_min(0)); all its outputs are realized in one flush and compared element by
 * element (tolerance 0 where the fused kernel must give the interpreter's bits: same GEMM sums,
 * the product rounded to its dtype before the epilogue). Kernel counts come from st_stats; the same
 * graphs with the epilogue kind off (fuse_set_flags) take one more kernel. When libnvrtc loads,
 * the check mode (ST_NVRTC_CHECK=1) compiles every kernel's CUDA rendering for sm_80 and sm_90 too
 * (a failure makes the process exit non-zero).
 */
#include "fuser/fuser.h"
#include "jit/nvrtc.h"
#include "fuse_test_util.h"

#include <stdlib.h>

typedef ft_build_fn build_fn;

static double value(unsigned *seed, st_dtype dt) {
    double u = ft_rand16(seed);
    return st_is_int(dt) ? (double)(int)(u * 20 - 10) : u * 4 - 2;
}
static st_tensor *input(st_dtype dt, int ndim, const int64_t *shape, unsigned seed) {
    return ft_input(dt, ndim, shape, seed, value);
}
/* Multiples of 1/64 in [-2, 2] (7 significant bits: exact in f16 and bf16). Their products are
 * multiples of 2^-12 of magnitude at most 4, so with K < 512 every partial sum of a dot product is
 * a multiple of 2^-12 below 2^11, which f32 holds exactly (23 bits): the product is the same in
 * any summation order, a tensor core's included. */
static double grid_value(unsigned *seed, st_dtype dt) {
    (void)dt;
    return floor(ft_rand16(seed) * 256) / 64 - 2;
}

/* Builds fn with the reference interpreter (on the cpu) and lazily, realizes the lazy outputs in
 * one flush, compares within tol; returns the kernels that flush launched (-1 on a failure, already
 * recorded). */
static int check_graph(build_fn fn, st_tensor **in, int nin, double tol) {
    return ft_check_flush(fn, in, nin, tol, false);
}

/* The same graph with the epilogue kind off: one kernel more, the same values. */
static int check_unfused(build_fn fn, st_tensor **in, int nin, double tol) {
    fuse_set_flags(FUSE_ALL & ~FUSE_MM_EPILOGUE);
    int k = check_graph(fn, in, nin, tol);
    fuse_set_flags(FUSE_ALL);
    return k;
}

/* gelu(x@w + b): in = {x (M, K), w (K, N), b (N)} */
static int g_linear_gelu(st_tensor **in, st_tensor **out) {
    st_tensor *m = st_matmul(in[0], in[1]), *h = st_add(m, in[2]);
    out[0] = st_gelu(h);
    st_release(m);
    st_release(h);
    return 1;
}

/* F.linear's form: gelu(x @ w:t() + b), w (N, K) */
static int g_linear_t_gelu(st_tensor **in, st_tensor **out) {
    st_tensor *wt = st_transpose(in[1], 0, 1), *m = st_matmul(in[0], wt), *h = st_add(m, in[2]);
    out[0] = st_gelu(h);
    st_release(wt);
    st_release(m);
    st_release(h);
    return 1;
}

static void linear_gelu_case(st_dtype dt, int64_t M, int64_t K, int64_t N, double tol) {
    const int64_t xs[2] = {M, K}, ws[2] = {K, N}, bs[1] = {N};
    st_tensor *in[3] = {input(dt, 2, xs, 1), input(dt, 2, ws, 2), input(dt, 1, bs, 3)};
    CHECK_EQ_INT(check_graph(g_linear_gelu, in, 3, tol), 1);
    CHECK_EQ_INT(check_unfused(g_linear_gelu, in, 3, tol), 2);
    for (int i = 0; i < 3; i++) st_release(in[i]);
}

/* Edge tiles everywhere: M, N not multiples of the micro-tile, K over one k block, M over one
 * row block, N over one column tile (f32: 8 x 32 micro-tiles, k blocks of 256, 192 rows, 256
 * columns), and big enough to run on several threads. */
TEST(linear_gelu_f32_is_one_kernel) {
    linear_gelu_case(ST_F32, 37, 53, 29, 0);
    linear_gelu_case(ST_F32, 200, 300, 270, 0);
    const int64_t xs[2] = {45, 70}, ws[2] = {33, 70}, bs[1] = {33};
    st_tensor *in[3] = {input(ST_F32, 2, xs, 4), input(ST_F32, 2, ws, 5), input(ST_F32, 1, bs, 6)};
    CHECK_EQ_INT(check_graph(g_linear_t_gelu, in, 3, 0), 1);
    for (int i = 0; i < 3; i++) st_release(in[i]);
}

TEST(linear_gelu_f64) {
    linear_gelu_case(ST_F64, 37, 53, 29, 0);
    linear_gelu_case(ST_F64, 130, 140, 250, 0);
}

/* The same graph with the product NOT rounded (kept in f32, the compute type) before the bias is
 * added: what a kernel that forgot to round would give (the later ops still round to dt). */
static int g_linear_gelu_unrounded(st_tensor **in, st_tensor **out) {
    st_dtype dt = st_dtype_of(in[0]);
    st_tensor *x = st_cast(in[0], ST_F32), *w = st_cast(in[1], ST_F32), *b = st_cast(in[2], ST_F32);
    st_tensor *m = st_matmul(x, w), *h = st_add(m, b), *hr = st_cast(h, dt);
    out[0] = st_gelu(hr);
    st_release(x), st_release(w), st_release(b), st_release(m), st_release(h), st_release(hr);
    return 1;
}

/* Elements where the rounded and the unrounded graph differ (on the cpu, interpreter). */
static int64_t rounding_matters(st_tensor **in) {
    st_tensor *a[1], *b[1], *c[3];
    for (int i = 0; i < 3; i++) c[i] = st_to(in[i], "cpu");
    st_set_eager(1);
    g_linear_gelu(c, a);
    g_linear_gelu_unrounded(c, b);
    st_set_eager(0);
    int64_t n = 0, m = st_numel(a[0]);
    double *va = ft_host(a[0]), *vb = ft_host(b[0]);
    for (int64_t i = 0; va && vb && i < m; i++) n += va[i] != vb[i];
    free(va), free(vb);
    st_release(a[0]), st_release(b[0]);
    for (int i = 0; i < 3; i++) st_release(c[i]);
    return n;
}

/* f16/bf16: the product is rounded to its dtype before the epilogue adds the bias, as the
 * interpreter stores it (and PyTorch does).
 *  - On the cpu, random inputs: bit for bit (the fused GEMM sums k in the interpreter's order).
 *  - On a GPU the order of a matmul's float sums is the device's (f16/bf16 on tensor cores: the
 *    instruction's own, docs/cuda.md "Tensor cores"), so a product next to a rounding boundary may
 *    round the other way, by 1 ulp of the product, which the bias add can make several ulps of a
 *    smaller output: random inputs are compared within the GPU fuzzer's f16/bf16 tolerance
 *    (relative 1e-2, 2e-2). That cannot tell rounding from not rounding, so
 *  - on every device, inputs on a 1/64 grid (grid_value: every sum exact in f32, so the product is
 *    the same in any order): bit for bit, and on those inputs the unrounded graph differs from the
 *    reference in at least 1% of the elements (checked: the exact compare would catch it). */
static void round_the_product_case(st_dtype dt, int64_t M, int64_t K, int64_t N, bool on_grid) {
    const int64_t xs[2] = {M, K}, ws[2] = {K, N}, bs[1] = {N};
    ft_value_fn v = on_grid ? grid_value : value;
    st_tensor *in[3] = {ft_input(dt, 2, xs, 1, v), ft_input(dt, 2, ws, 2, v), ft_input(dt, 1, bs, 3, v)};
    double tol = on_grid || strcmp(st_default_device(), "cpu") == 0 ? 0 : dt == ST_F16 ? 1e-2 : 2e-2;
    CHECK_EQ_INT(check_graph(g_linear_gelu, in, 3, tol), 1);
    CHECK_EQ_INT(check_unfused(g_linear_gelu, in, 3, tol), 2);
    if (on_grid) {
        int64_t n = rounding_matters(in);
        CHECK_MSG(n >= M * N / 100, "%s %lldx%lldx%lld: not rounding changes only %lld of %lld elements",
                  st_dtype_name(dt), (long long)M, (long long)K, (long long)N, (long long)n, (long long)(M * N));
    }
    for (int i = 0; i < 3; i++) st_release(in[i]);
}
TEST(linear_gelu_f16_bf16_round_the_product) {
    for (int g = 0; g < 2; g++) {
        round_the_product_case(ST_F16, 37, 53, 29, g);
        round_the_product_case(ST_BF16, 37, 53, 29, g);
        round_the_product_case(ST_F16, 100, 300, 40, g);
    }
}

/* (2, 3, M, K) @ (K, N) expanded over the batch, + bias (N), relu, * 0.5 */
static int g_batched(st_tensor **in, st_tensor **out) {
    const int64_t ws[4] = {2, 3, 24, 19};
    st_tensor *w = st_expand(in[1], 4, ws), *m = st_matmul(in[0], w), *h = st_add(m, in[2]), *r = st_relu(h);
    out[0] = st_mul_s(r, 0.5);
    st_release(w);
    st_release(m);
    st_release(h);
    st_release(r);
    return 1;
}
TEST(batched_with_broadcast_bias) {
    const int64_t xs[4] = {2, 3, 17, 24}, ws[2] = {24, 19}, bs[1] = {19};
    st_tensor *in[3] = {input(ST_F32, 4, xs, 7), input(ST_F32, 2, ws, 8), input(ST_F32, 1, bs, 9)};
    CHECK_EQ_INT(check_graph(g_batched, in, 3, 0), 1);
    CHECK_EQ_INT(check_unfused(g_batched, in, 3, 0), 2);
    for (int i = 0; i < 3; i++) st_release(in[i]);
}

/* (x@w) * 3 + b for integers */
static int g_int(st_tensor **in, st_tensor **out) {
    st_tensor *m = st_matmul(in[0], in[1]), *s = st_mul_s(m, 3);
    out[0] = st_add(s, in[2]);
    st_release(m);
    st_release(s);
    return 1;
}
TEST(integer_matmul_epilogue) {
    const st_dtype dts[2] = {ST_I32, ST_I64};
    for (int d = 0; d < 2; d++) {
        const int64_t xs[2] = {13, 21}, ws[2] = {21, 300}, bs[1] = {300};
        st_tensor *in[3] = {input(dts[d], 2, xs, 10), input(dts[d], 2, ws, 11), input(dts[d], 1, bs, 12)};
        CHECK_EQ_INT(check_graph(g_int, in, 3, 0), 1);
        CHECK_EQ_INT(check_unfused(g_int, in, 3, 0), 2);
        for (int i = 0; i < 3; i++) st_release(in[i]);
    }
}

/* gelu(x@w + b) + r, cast to f64: a residual input and a cast in the epilogue */
static int g_residual(st_tensor **in, st_tensor **out) {
    st_tensor *m = st_matmul(in[0], in[1]), *h = st_add(m, in[2]), *g = st_gelu(h), *y = st_add(g, in[3]);
    out[0] = st_cast(y, ST_F64);
    st_release(m);
    st_release(h);
    st_release(g);
    st_release(y);
    return 1;
}
TEST(residual_and_cast) {
    const int64_t xs[2] = {40, 30}, ws[2] = {30, 50}, bs[1] = {50}, rs[2] = {40, 50};
    st_tensor *in[4] = {input(ST_F32, 2, xs, 13), input(ST_F32, 2, ws, 14), input(ST_F32, 1, bs, 15),
                        input(ST_F32, 2, rs, 16)};
    CHECK_EQ_INT(check_graph(g_residual, in, 4, 0), 1);
    CHECK_EQ_INT(check_unfused(g_residual, in, 4, 0), 2);
    for (int i = 0; i < 4; i++) st_release(in[i]);
}

/* Two outputs from one kernel: the pre-activation h (kept by a handle, as autograd keeps it) and
 * gelu(h); and the product itself next to relu of it. */
static int g_two_outputs(st_tensor **in, st_tensor **out) {
    st_tensor *m = st_matmul(in[0], in[1]);
    out[0] = st_add(m, in[2]);
    out[1] = st_gelu(out[0]);
    st_release(m);
    return 2;
}
static int g_product_and_relu(st_tensor **in, st_tensor **out) {
    out[0] = st_matmul(in[0], in[1]);
    out[1] = st_relu(out[0]);
    return 2;
}
/* A sibling of the product's shape recorded before the matmul (so placed after the matmul group
 * exists) joins its epilogue: r * 2 and gelu(x@w + b) from one kernel. */
static int g_sibling_first(st_tensor **in, st_tensor **out) {
    out[0] = st_mul_s(in[3], 2);
    st_tensor *m = st_matmul(in[0], in[1]), *h = st_add(m, in[2]);
    out[1] = st_gelu(h);
    st_release(m);
    st_release(h);
    return 2;
}
TEST(two_outputs_one_kernel) {
    const int64_t xs[2] = {33, 20}, ws[2] = {20, 41}, bs[1] = {41};
    st_tensor *in[3] = {input(ST_F32, 2, xs, 17), input(ST_F32, 2, ws, 18), input(ST_F32, 1, bs, 19)};
    CHECK_EQ_INT(check_graph(g_two_outputs, in, 3, 0), 1);
    CHECK_EQ_INT(check_graph(g_product_and_relu, in, 3, 0), 1);
    CHECK_EQ_INT(check_unfused(g_product_and_relu, in, 3, 0), 2);
    const int64_t rs[2] = {33, 41};
    st_tensor *in4[4] = {in[0], in[1], in[2], input(ST_F32, 2, rs, 25)};
    CHECK_EQ_INT(check_graph(g_sibling_first, in4, 4, 0), 1);
    st_release(in4[3]);
    for (int i = 0; i < 3; i++) st_release(in[i]);
}

/* Consumers that read the product at another element (a transpose) or a reduction of it are not
 * epilogues: the product is stored, and they read its buffer. */
static int g_transposed_consumer(st_tensor **in, st_tensor **out) {
    st_tensor *m = st_matmul(in[0], in[1]), *t = st_transpose(m, 0, 1), *r = st_relu(m);
    out[0] = st_add(t, r);
    st_release(m);
    st_release(t);
    st_release(r);
    return 1;
}
static int g_sum_and_gelu(st_tensor **in, st_tensor **out) {
    st_tensor *m = st_matmul(in[0], in[1]);
    int ax = 1;
    out[0] = st_gelu(m);
    out[1] = st_sum(m, 1, &ax, 0);
    st_release(m);
    return 2;
}
TEST(other_index_reads_are_not_fused) {
    const int64_t xs[2] = {24, 24};
    st_tensor *in[2] = {input(ST_F32, 2, xs, 20), input(ST_F32, 2, xs, 21)};
    CHECK_EQ_INT(check_graph(g_transposed_consumer, in, 2, 0), 2);
    CHECK(check_graph(g_sum_and_gelu, in, 2, 1e-6) >= 1);
    for (int i = 0; i < 2; i++) st_release(in[i]);
}

/* Below the JIT threshold (and its kernel not cached yet) a group on the cpu runs through the
 * interpreter, node by node: same values. A GPU has no interpreter tier: there the same group is
 * its one kernel. */
static int g_sigmoid_two(st_tensor **in, st_tensor **out) {
    st_tensor *m = st_matmul(in[0], in[1]);
    out[0] = st_sub(m, in[2]);
    out[1] = st_sigmoid(out[0]);
    st_release(m);
    return 2;
}
static void interpreter_tier_on(bool on_cpu) {
    st_set_jit_min((int64_t)1 << 40);
    const int64_t xs[2] = {9, 7}, ws[2] = {7, 5}, bs[1] = {5};
    st_tensor *in[3] = {input(ST_F32, 2, xs, 22), input(ST_F32, 2, ws, 23), input(ST_F32, 1, bs, 24)};
    st_stats_t s0, s1;
    st_stats(&s0);
    CHECK_EQ_INT(check_graph(g_sigmoid_two, in, 3, 0), 1);
    st_stats(&s1);
    CHECK_EQ_INT(s1.interp_groups - s0.interp_groups, on_cpu ? 1 : 0);
    st_set_jit_min(0);
    for (int i = 0; i < 3; i++) st_release(in[i]);
}
TEST(interpreter_tier) { ft_cpu_then_default(interpreter_tier_on); }

int main(void) {
    if (!ft_cache_dir_create("/tmp/stitch-epilogue-XXXXXX")) return 1;
    if (nvrtc_load() == ST_OK) setenv("ST_NVRTC_CHECK", "1", 0);   /* CUDA renderings compiled too */
    else printf("note: no libnvrtc (%s): CUDA renderings not compiled\n", st_last_error());
    st_clear_error();
    st_set_jit_min(0);
    st_set_poison(1);
    RUN(linear_gelu_f32_is_one_kernel);
    RUN(linear_gelu_f64);
    RUN(linear_gelu_f16_bf16_round_the_product);
    RUN(batched_with_broadcast_bias);
    RUN(integer_matmul_epilogue);
    RUN(residual_and_cast);
    RUN(two_outputs_one_kernel);
    RUN(other_index_reads_are_not_fused);
    RUN(interpreter_tier);
    st_shutdown();
    ft_cache_dir_remove();
    TEST_MAIN_END();
}
