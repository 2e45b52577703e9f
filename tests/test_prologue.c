/*
 * test_prologue.c — matmul prologues (docs/fusion.md "matmul"): an operand that is a cast of a
 * float value (x:float() @ w, or the promotion of f16 @ f32), possibly under views (transposes,
 * broadcasts), is read by the GEMM in its own storage type and converted as it is packed, so the
 * cast is never stored: one kernel where the cast used to take its own.
 *
 * Every graph is built eagerly (the reference interpreter: the cast stored, then the matmul) and
 * lazily (JIT, st_set_jit_min(0)); its outputs are realized in one flush and compared element by
 * element with tolerance 0 (the packers convert as CAST does, so the GEMM sums the very values
 * the interpreter multiplies). Kernel counts come from st_stats; with the prologue kind off
 * (fuse_set_flags) the cast takes its own kernel again. When libnvrtc loads, the check mode
 * (ST_NVRTC_CHECK=1) compiles every kernel's CUDA rendering for sm_80 and sm_90 too (a failure
 * makes the process exit non-zero).
 */
#include "fuser/fuser.h"
#include "jit/nvrtc.h"
#include "fuse_test_util.h"

#include <stdlib.h>

typedef ft_build_fn build_fn;

/* Values with more mantissa bits than f16 keeps (so an f64 -> f32 cast rounds). */
static double value(unsigned *seed, st_dtype dt) {
    (void)dt;
    return (ft_rand24(seed) * 4 - 2) * (1.0 + 0x1p-35);
}
static st_tensor *input(st_dtype dt, int ndim, const int64_t *shape, unsigned seed) {
    return ft_input(dt, ndim, shape, seed, value);
}

/* Builds fn eagerly and lazily, realizes the lazy outputs in one flush, compares bit for bit;
 * returns the kernels that flush launched (-1 on a failure, already recorded). */
static int check_graph(build_fn fn, st_tensor **in, int nin) { return ft_check_flush(fn, in, nin, 0, true); }

/* The same graph with the prologue kind off: the cast is stored by a kernel of its own. */
static int check_unfused(build_fn fn, st_tensor **in, int nin) {
    fuse_set_flags(FUSE_ALL & ~FUSE_MM_PROLOGUE);
    int k = check_graph(fn, in, nin);
    fuse_set_flags(FUSE_ALL);
    return k;
}

/* in[0] @ in[1], the dtypes promoted by st_matmul (a CAST of the narrower operand) */
static int g_promote(st_tensor **in, st_tensor **out) {
    out[0] = st_matmul(in[0], in[1]);
    return 1;
}
/* in[0]:float() @ in[1] */
static int g_cast_a(st_tensor **in, st_tensor **out) {
    st_tensor *x = st_cast(in[0], ST_F32);
    out[0] = st_matmul(x, in[1]);
    st_release(x);
    return 1;
}
/* in[0] @ in[1]:t():float(), in[1] (N, K): F.linear's weight, stored in f16 */
static int g_cast_wt(st_tensor **in, st_tensor **out) {
    st_tensor *t = st_transpose(in[1], 0, 1), *w = st_cast(t, ST_F32);
    out[0] = st_matmul(in[0], w);
    st_release(t);
    st_release(w);
    return 1;
}
/* the same with the view above the cast: in[0] @ in[1]:float():t() */
static int g_cast_then_t(st_tensor **in, st_tensor **out) {
    st_tensor *w = st_cast(in[1], ST_F32), *t = st_transpose(w, 0, 1);
    out[0] = st_matmul(in[0], t);
    st_release(t);
    st_release(w);
    return 1;
}

/* Runs fn on inputs of the given dtypes and shapes: 1 kernel, 2 with the prologue off. */
static void case2(build_fn fn, st_dtype da, const int64_t *as, st_dtype db, const int64_t *bs, unsigned seed) {
    st_tensor *in[2] = {input(da, 2, as, seed), input(db, 2, bs, seed + 1)};
    CHECK_EQ_INT(check_graph(fn, in, 2), 1);
    CHECK_EQ_INT(check_unfused(fn, in, 2), 2);
    for (int i = 0; i < 2; i++) st_release(in[i]);
}

/* f16 @ f32 and bf16 @ f32 promote to f32, f32 @ f64 to f64, f16 @ f64 too. Sizes with edge
 * micro-tiles, K over one k block (256 floats, 128 doubles) and M over one row block (192). */
TEST(promoted_operands_are_one_kernel) {
    const int64_t a1[2] = {37, 53}, b1[2] = {53, 29}, a2[2] = {200, 300}, b2[2] = {300, 70};
    case2(g_promote, ST_F16, a1, ST_F32, b1, 1);
    case2(g_promote, ST_F32, a1, ST_BF16, b1, 3);
    case2(g_promote, ST_F16, a2, ST_F32, b2, 5);
    case2(g_promote, ST_F32, a1, ST_F64, b1, 7);
    case2(g_promote, ST_F64, a2, ST_F32, b2, 9);
    case2(g_promote, ST_F16, a1, ST_F64, b1, 11);
}

/* x:float() @ w for x f16, bf16 and f64 (a rounding cast: the packer rounds as CAST does) */
TEST(cast_operand_is_one_kernel) {
    const int64_t as[2] = {45, 130}, bs[2] = {130, 66}, a2[2] = {200, 270}, b2[2] = {270, 33};
    case2(g_cast_a, ST_F16, as, ST_F32, bs, 13);
    case2(g_cast_a, ST_BF16, as, ST_F32, bs, 15);
    case2(g_cast_a, ST_F64, as, ST_F32, bs, 17);
    case2(g_cast_a, ST_F16, a2, ST_F32, b2, 19);
    const int64_t a0[2] = {5, 0}, b0[2] = {0, 7};   /* K = 0: the unblocked loop writes zeros */
    case2(g_cast_a, ST_F16, a0, ST_F32, b0, 20);
}

/* transposed cast operands, the transpose below and above the cast */
TEST(transposed_cast_operand) {
    const int64_t xs[2] = {41, 70}, ws[2] = {35, 70};
    case2(g_cast_wt, ST_F32, xs, ST_F16, ws, 21);
    case2(g_cast_then_t, ST_F32, xs, ST_BF16, ws, 23);
    case2(g_cast_wt, ST_F32, xs, ST_F64, ws, 25);
}

/* (2, 3, M, K) f32 @ w (K, N) f16 broadcast over the batch and cast: one batched GEMM that
 * reads w's one copy for every batch; and the batch of x cast from bf16 with a 2-D weight
 * (the batch folds into the rows through a reshape of the cast). */
static int g_batched(st_tensor **in, st_tensor **out) {
    const int64_t ws[4] = {2, 3, 24, 19};
    st_tensor *e = st_expand(in[1], 4, ws), *w = st_cast(e, ST_F32);
    out[0] = st_matmul(in[0], w);
    st_release(e);
    st_release(w);
    return 1;
}
TEST(batched_broadcast_cast) {
    const int64_t xs[4] = {2, 3, 17, 24}, ws[2] = {24, 19};
    st_tensor *in[2] = {input(ST_F32, 4, xs, 27), input(ST_F16, 2, ws, 28)};
    CHECK_EQ_INT(check_graph(g_batched, in, 2), 1);
    CHECK_EQ_INT(check_unfused(g_batched, in, 2), 2);
    st_release(in[0]);
    st_release(in[1]);
    st_tensor *in2[2] = {input(ST_BF16, 4, xs, 29), input(ST_F32, 2, ws, 30)};
    CHECK_EQ_INT(check_graph(g_cast_a, in2, 2), 1);
    CHECK_EQ_INT(check_unfused(g_cast_a, in2, 2), 2);
    st_release(in2[0]);
    st_release(in2[1]);
}

/* gelu(x:float() @ w + b): prologue and epilogue in one kernel */
static int g_prologue_epilogue(st_tensor **in, st_tensor **out) {
    st_tensor *x = st_cast(in[0], ST_F32), *m = st_matmul(x, in[1]), *h = st_add(m, in[2]);
    out[0] = st_gelu(h);
    st_release(x);
    st_release(m);
    st_release(h);
    return 1;
}
TEST(with_an_epilogue_one_kernel) {
    const int64_t xs[2] = {37, 53}, ws[2] = {53, 29}, bs[1] = {29};
    st_tensor *in[3] = {input(ST_F16, 2, xs, 31), input(ST_F32, 2, ws, 32), input(ST_F32, 1, bs, 33)};
    CHECK_EQ_INT(check_graph(g_prologue_epilogue, in, 3), 1);
    CHECK_EQ_INT(check_unfused(g_prologue_epilogue, in, 3), 2);
    fuse_set_flags(FUSE_ALL & ~FUSE_MM_EPILOGUE);
    CHECK_EQ_INT(check_graph(g_prologue_epilogue, in, 3), 2);
    fuse_set_flags(FUSE_ALL);
    for (int i = 0; i < 3; i++) st_release(in[i]);
}

/* One cast read by two matmuls: both fold it, nothing stores it. A cast also read elementwise
 * is computed where that consumer is; the matmul still reads the source. A cast that is an
 * output is stored, and the matmul reads the stored cast. */
static int g_shared(st_tensor **in, st_tensor **out) {
    st_tensor *x = st_cast(in[0], ST_F32), *t = st_transpose(in[1], 0, 1);
    out[0] = st_matmul(x, in[1]);
    out[1] = st_matmul(t, x);   /* (K, M) @ (M, K): x as the right operand */
    st_release(x);
    st_release(t);
    return 2;
}
static int g_also_exp(st_tensor **in, st_tensor **out) {
    st_tensor *x = st_cast(in[0], ST_F32);
    out[0] = st_matmul(x, in[1]);
    out[1] = st_exp(x);
    st_release(x);
    return 2;
}
static int g_cast_is_output(st_tensor **in, st_tensor **out) {
    out[0] = st_cast(in[0], ST_F32);
    out[1] = st_matmul(out[0], in[1]);
    return 2;
}
TEST(shared_and_stored_casts) {
    const int64_t xs[2] = {30, 30};
    st_tensor *in[2] = {input(ST_F16, 2, xs, 34), input(ST_F32, 2, xs, 35)};
    CHECK_EQ_INT(check_graph(g_shared, in, 2), 2);
    CHECK(check_graph(g_also_exp, in, 2) >= 2);
    CHECK_EQ_INT(check_graph(g_cast_is_output, in, 2), 2);
    for (int i = 0; i < 2; i++) st_release(in[i]);
}

/* A cast of a computed value: the value is stored in its own (narrower) type and the GEMM
 * converts it; two casts in a row round twice, so only the outer one is folded. */
static int g_cast_of_sum(st_tensor **in, st_tensor **out) {
    st_tensor *s = st_add(in[0], in[0]), *x = st_cast(s, ST_F32);
    out[0] = st_matmul(x, in[1]);
    st_release(s);
    st_release(x);
    return 1;
}
static int g_double_cast(st_tensor **in, st_tensor **out) {
    st_tensor *h = st_cast(in[1], ST_F16), *w = st_cast(h, ST_F32);
    out[0] = st_matmul(in[0], w);
    st_release(h);
    st_release(w);
    return 1;
}
TEST(computed_and_twice_cast_sources) {
    const int64_t xs[2] = {19, 40}, ws[2] = {40, 23};
    st_tensor *in[2] = {input(ST_F16, 2, xs, 36), input(ST_F32, 2, ws, 37)};
    CHECK_EQ_INT(check_graph(g_cast_of_sum, in, 2), 2);
    st_tensor *in2[2] = {input(ST_F32, 2, xs, 38), input(ST_F32, 2, ws, 39)};
    CHECK_EQ_INT(check_graph(g_double_cast, in2, 2), 2);
    for (int i = 0; i < 2; i++) {
        st_release(in[i]);
        st_release(in2[i]);
    }
}

/* Below the JIT threshold (and its kernel not cached yet: a dtype pair no test above uses) the
 * matmul group on the cpu runs through the interpreter, node by node (the folded cast evaluated
 * there): one group, same values. A GPU has no interpreter tier: there it is its one kernel. */
static void interpreter_tier_on(bool on_cpu) {
    st_set_jit_min((int64_t)1 << 40);
    const int64_t xs[2] = {9, 7}, ws[2] = {7, 5};
    st_tensor *in[2] = {input(ST_BF16, 2, xs, 40), input(ST_F64, 2, ws, 41)};
    st_stats_t s0, s1;
    st_stats(&s0);
    CHECK_EQ_INT(check_graph(g_promote, in, 2), 1);
    st_stats(&s1);
    CHECK_EQ_INT(s1.interp_groups - s0.interp_groups, on_cpu ? 1 : 0);
    st_set_jit_min(0);
    for (int i = 0; i < 2; i++) st_release(in[i]);
}
TEST(interpreter_tier) { ft_cpu_then_default(interpreter_tier_on); }

/* ---- implicit GEMM (FUSE_MM_IMPLICIT): a reshape of a strided view read by the GEMM ----
 * A 3x3 convolution's columns (N, C*9, Ho*Wo) are one overlapping strided view of the image
 * (as_strided), reshaped: the GEMM walks (c, i, j) and (oh, ow) as it packs them, so no kernel
 * stores the columns. Images in[0] (N, C, H, W), weight in[1] (O, C*9), output gradient in[2]
 * (N, O, Ho*Wo); conv_stride: the windows' step (1 but in implicit_gemm_row_segments); `pad`:
 * the image zero-padded by 1 first (a masked view: stored by its own kernel,
 * then read by the GEMM). Compared bit for bit with the interpreter (columns stored, then the
 * matmul). */
static int conv_pad, conv_stride = 1;
static st_tensor *conv_cols(st_tensor *x) {
    int64_t s[ST_MAX_DIMS];
    st_shape(x, s);
    int64_t n = s[0], c = s[1], p = conv_pad, st = conv_stride, hp = s[2] + 2 * p, wp = s[3] + 2 * p;
    int64_t ho = (hp - 3) / st + 1, wo = (wp - 3) / st + 1;
    const int64_t lo[4] = {0, 0, p, p};
    st_tensor *xp = p ? st_zero_pad(x, lo, lo) : x;
    const int64_t shape[6] = {n, c, 3, 3, ho, wo}, str[6] = {c * hp * wp, hp * wp, wp, 1, wp * st, st};
    const int64_t cs[3] = {n, c * 9, ho * wo};
    st_tensor *v = st_as_strided(xp, 6, shape, str, 0), *cols = st_reshape(v, 3, cs);
    if (p) st_release(xp);
    st_release(v);
    return cols;
}
static int g_conv(st_tensor **in, st_tensor **out) {   /* w @ cols */
    st_tensor *cols = conv_cols(in[0]);
    out[0] = st_matmul(in[1], cols);
    st_release(cols);
    return 1;
}
static int g_conv_relu(st_tensor **in, st_tensor **out) {   /* relu(w @ cols): an epilogue */
    st_tensor *cols = conv_cols(in[0]), *y = st_matmul(in[1], cols);
    out[0] = st_relu(y);
    st_release(cols);
    st_release(y);
    return 1;
}
static int g_wgrad(st_tensor **in, st_tensor **out) {   /* gy @ cols^T: split k and columns */
    st_tensor *cols = conv_cols(in[0]), *t = st_transpose(cols, 1, 2);
    out[0] = st_matmul(in[2], t);
    st_release(cols);
    st_release(t);
    return 1;
}
static int g_rows(st_tensor **in, st_tensor **out) {   /* cols^T @ w^T: split rows and k */
    st_tensor *cols = conv_cols(in[0]), *t = st_transpose(cols, 1, 2), *wt = st_transpose(in[1], 0, 1);
    out[0] = st_matmul(t, wt);
    st_release(cols);
    st_release(t);
    st_release(wt);
    return 1;
}
static int g_wgrad_rows(st_tensor **in, st_tensor **out) {   /* cols @ gy^T: split rows and k */
    st_tensor *cols = conv_cols(in[0]), *t = st_transpose(in[2], 1, 2);
    out[0] = st_matmul(cols, t);
    st_release(cols);
    st_release(t);
    return 1;
}
static int g_conv_computed(st_tensor **in, st_tensor **out) {   /* columns of a computed image */
    st_tensor *x2 = st_mul(in[0], in[0]), *cols = conv_cols(x2);
    out[0] = st_matmul(in[1], cols);
    st_release(x2);
    st_release(cols);
    return 1;
}

/* Kernels with the implicit kind on, then off (the columns stored by a kernel of their own). The
 * interpreter's bits, but for f16/bf16 on a GPU: the tensor cores sum k in steps of 16 (docs/cuda.md
 * "Tensor cores"), so within test_epilogue's tolerance there. */
static int implicit_check(build_fn fn, st_tensor **in) {
    st_dtype dt = st_dtype_of(in[0]);
    bool gpu = strcmp(st_default_device(), "cpu") != 0, low = dt == ST_F16 || dt == ST_BF16;
    return ft_check_flush(fn, in, 3, gpu && low ? (dt == ST_F16 ? 1e-2 : 2e-2) : 0, !(gpu && low));
}
static void implicit_case(const char *what, build_fn fn, st_tensor **in, int on, int off) {
    int k = implicit_check(fn, in);
    CHECK_MSG(k == on, "%s, %s, pad %d: %d kernels, expected %d", what, st_dtypes[st_dtype_of(in[0])].name, conv_pad,
              k, on);
    fuse_set_flags(FUSE_ALL & ~FUSE_MM_IMPLICIT);
    k = implicit_check(fn, in);
    CHECK_MSG(k == off, "%s, %s, pad %d, implicit off: %d kernels, expected %d", what,
              st_dtypes[st_dtype_of(in[0])].name, conv_pad, k, off);
    fuse_set_flags(FUSE_ALL);
}

TEST(implicit_gemm_convolution) {
    static const st_dtype dts[4] = {ST_F32, ST_F64, ST_F16, ST_BF16};
    for (int d = 0; d < 4 && !test_cur_failed; d++) {
        const int64_t xs[4] = {2, 4, 12, 21}, ws[2] = {6, 4 * 9};
        for (conv_pad = 0; conv_pad <= 1; conv_pad++) {
            int64_t hw = (12 + 2 * conv_pad - 2) * (21 + 2 * conv_pad - 2);
            const int64_t gs[3] = {2, 6, hw};
            st_tensor *in[3] = {input(dts[d], 4, xs, 50 + d), input(dts[d], 2, ws, 60 + d), input(dts[d], 3, gs, 70 + d)};
            /* unpadded: the GEMM reads the image itself (1 kernel; 2 with the columns stored);
             * padded: the padded image is stored first (2 kernels either way); a computed image
             * is stored (its squares), padded or not */
            int p = conv_pad;
            implicit_case("conv", g_conv, in, 1 + p, 2);
            implicit_case("conv_relu", g_conv_relu, in, 1 + p, 2);
            implicit_case("wgrad", g_wgrad, in, 1 + p, 2);
            implicit_case("rows", g_rows, in, 1 + p, 2);
            implicit_case("conv_computed", g_conv_computed, in, 2, 2);
            for (int i = 0; i < 3; i++) st_release(in[i]);
        }
    }
}

/* A bf16 image times an f32 weight: st_matmul casts the columns to f32 (a CAST above the
 * reshape), folded too: the GEMM gathers bf16 elements and converts them (1 kernel). */
TEST(implicit_gemm_cast_operand) {
    conv_pad = 0;
    const int64_t xs[4] = {2, 4, 12, 21}, ws[2] = {6, 4 * 9}, gs[3] = {2, 6, 10 * 19};
    st_tensor *in[3] = {input(ST_BF16, 4, xs, 90), input(ST_F32, 2, ws, 91), input(ST_F32, 3, gs, 92)};
    CHECK_EQ_INT(check_graph(g_conv, in, 3), 1);
    for (int i = 0; i < 3; i++) st_release(in[i]);
}

/* A row or column dim over more than KIR_MM_SUB strides (a 2x3x3 window over depth, channel,
 * rows and columns of a (N, C, D, H, W) volume: k = (c, dz, i, j)) is stored by a gather kernel
 * first: 2 kernels, the same bits. */
static int g_conv3d(st_tensor **in, st_tensor **out) {
    const int64_t shape[7] = {2, 2, 2, 3, 3, 4, 5}, str[7] = {2 * 3 * 6 * 7, 3 * 6 * 7, 6 * 7, 7, 1, 7, 1};
    const int64_t cs[3] = {2, 2 * 2 * 9, 20};
    st_tensor *v = st_as_strided(in[0], 7, shape, str, 0), *cols = st_reshape(v, 3, cs);
    out[0] = st_matmul(in[1], cols);
    st_release(v);
    st_release(cols);
    return 1;
}
TEST(implicit_gemm_too_many_strides) {
    const int64_t xs[5] = {2, 2, 3, 6, 7}, ws[2] = {5, 36};
    st_tensor *in[2] = {input(ST_F32, 5, xs, 95), input(ST_F32, 2, ws, 96)};
    CHECK_EQ_INT(check_graph(g_conv3d, in, 2), 2);
    for (int i = 0; i < 2; i++) st_release(in[i]);
}

/* Output rows of 4, 7, 14 and 28 positions at stride 1 and 2 (conv_stride), no padding: a
 * 32-column panel of the GEMM's B spans several output rows, so its columns are not runs of 8.
 * At stride 1 they take the direct path (st_gemm_direct_f32_: B read from the image, not packed):
 * rows of 28 as parts of one row, rows of 4, 7 and 14 as whole rows, 5, 3 and 2 of them in 32
 * lanes of the image (C read and written through expanding loads and compressing stores, so with
 * 32 channels, k > KC, C is read back too); every stride-2 case is packed by segments of columns
 * stepping by 2 (st_gemm_segs_f32_f_); both in AVX-512 builds only. The results must be the
 * interpreter's bits. Images (2, C, H, H), 3x3, 16 output channels; through an epilogue too
 * (relu: tiles of the task's columns cut the rows). */
TEST(implicit_gemm_row_segments) {
    static const int64_t hw[][3] = {{9, 1, 3}, {16, 1, 3}, {30, 1, 3}, {15, 2, 3}, {29, 2, 3}, {57, 2, 3},
                                    {6, 1, 32}, {9, 1, 32}, {16, 1, 32}, {11, 1, 5}};   /* H, stride, C */
    for (size_t i = 0; i < sizeof hw / sizeof hw[0] && !test_cur_failed; i++) {
        conv_pad = 0;
        conv_stride = (int)hw[i][1];
        const int64_t xs[4] = {2, hw[i][2], hw[i][0], hw[i][0]}, ws[2] = {16, hw[i][2] * 9};
        st_tensor *in[2] = {input(ST_F32, 4, xs, 100 + (unsigned)i), input(ST_F32, 2, ws, 110 + (unsigned)i)};
        CHECK_MSG(check_graph(g_conv, in, 2) == 1, "H %lld stride %d C %lld", (long long)hw[i][0], conv_stride,
                  (long long)hw[i][2]);
        CHECK_MSG(check_graph(g_conv_relu, in, 2) == 1, "relu: H %lld stride %d C %lld", (long long)hw[i][0],
                  conv_stride, (long long)hw[i][2]);
        for (int j = 0; j < 2; j++) st_release(in[j]);
    }
    conv_stride = 1;
}

/* A weight gradient with the taps as rows (cols @ gy^T, nn_conv.lua conv_weight_grad): A is the
 * gathered columns and C at most 64 columns wide, the gathered-A path in AVX-512 builds
 * (st_gemm_directa_f32_: A read from the image, not packed; 1, 2 or 4 vectors of columns, rows
 * in blocks of 10, 8 or 4 with a partial last block, columns past N masked). 27 taps, 440
 * positions (two k blocks), 1 to 64 output channels; the interpreter's bits. */
TEST(implicit_gemm_gathered_rows) {
    static const int64_t outs[] = {1, 5, 16, 20, 32, 40, 64, 65};
    static const st_dtype dts[2] = {ST_F32, ST_F64};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0] && !test_cur_failed; i++) {
        for (int d = 0; d < 2; d++) {
            for (conv_pad = 0; conv_pad <= 1; conv_pad++) {
                const int64_t h = 22 - 2 * conv_pad, w = 24 - 2 * conv_pad;
                const int64_t xs[4] = {2, 3, h, w}, ws[2] = {1, 27}, gs[3] = {2, outs[i], 20 * 22};
                st_tensor *in[3] = {input(dts[d], 4, xs, 120 + (unsigned)i), input(dts[d], 2, ws, 130),
                                    input(dts[d], 3, gs, 140 + (unsigned)i)};
                int k = check_graph(g_wgrad_rows, in, 3);
                CHECK_MSG(k == 1 + conv_pad, "%lld outputs, %s, pad %d: %d kernels", (long long)outs[i],
                          st_dtypes[dts[d]].name, conv_pad, k);
                for (int j = 0; j < 3; j++) st_release(in[j]);
            }
        }
    }
    conv_pad = 0;
}

/* Sizes past the GEMM's blocks (K > KC, N > NC, several row tasks and threads): same bits. */
TEST(implicit_gemm_blocks) {
    conv_pad = 1;
    const int64_t xs[4] = {2, 32, 18, 20}, ws[2] = {200, 32 * 9}, gs[3] = {2, 200, 18 * 20};
    st_tensor *in[3] = {input(ST_F32, 4, xs, 80), input(ST_F32, 2, ws, 81), input(ST_F32, 3, gs, 82)};
    CHECK_EQ_INT(check_graph(g_conv, in, 3), 2);
    CHECK_EQ_INT(check_graph(g_wgrad, in, 3), 2);
    CHECK_EQ_INT(check_graph(g_rows, in, 3), 2);
    for (int i = 0; i < 3; i++) st_release(in[i]);
}

int main(void) {
    if (!ft_cache_dir_create("/tmp/stitch-prologue-XXXXXX")) return 1;
    if (nvrtc_load() == ST_OK) setenv("ST_NVRTC_CHECK", "1", 0);   /* CUDA renderings compiled too */
    else printf("note: no libnvrtc (%s): CUDA renderings not compiled\n", st_last_error());
    st_clear_error();
    st_set_jit_min(0);
    st_set_poison(1);
    RUN(promoted_operands_are_one_kernel);
    RUN(cast_operand_is_one_kernel);
    RUN(transposed_cast_operand);
    RUN(batched_broadcast_cast);
    RUN(with_an_epilogue_one_kernel);
    RUN(shared_and_stored_casts);
    RUN(computed_and_twice_cast_sources);
    RUN(interpreter_tier);
    RUN(implicit_gemm_convolution);
    RUN(implicit_gemm_blocks);
    RUN(implicit_gemm_row_segments);
    RUN(implicit_gemm_gathered_rows);
    RUN(implicit_gemm_cast_operand);
    RUN(implicit_gemm_too_many_strides);
    st_shutdown();
    ft_cache_dir_remove();
    TEST_MAIN_END();
}
