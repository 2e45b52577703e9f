/*
 * test_gemm.c — the GEMM shared by the interpreter and the JIT (base/opmath_gemm.h: st_gemm_plan,
 * st_gemm_task; used by trace/interp.c eval_matmul and jit/render_c.c render_matmul).
 *
 * Invariants checked:
 *  - the prelude GEMM itself: the blocked path (any plan, any thread count) and the unblocked
 *    loop (no scratch) give the same bits on odd shapes, K splits, edge tiles, transposed,
 *    broadcast (stride 0) and negative strides, for f32/f16/bf16/f64;
 *  - through the public API: a matmul run by a JIT kernel (st_set_jit_min(0), operands as strided
 *    views of their buffers) and by the interpreter (st_set_eager(1), operands materialized) are
 *    BIT-identical, for every float dtype, odd shapes, K = 0, transposed operands, sliced operands
 *    (offsets), broadcast batch dims, and sizes past every block (M > MC, N > NC, K > KC, threads);
 *  - both are within rounding of a double-precision reference;
 *  - the sums use fused multiply-adds (one rounding per step), in both tiers;
 *  - the library's attention: every copy, with or without scratch, any task split, the same bits.
 * Every tensor a test makes is released before it returns.
 */
#include "test.h"
#include "base/opmath.h"   /* after stitch.h: its op macros (st_exp, ...) would rename API declarations */
#include "base/gemm.h"

#include <stdint.h>
#include <stdlib.h>

/* ---- deterministic inputs ---- */
static uint32_t rng_state = 12345;
static float rnd(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) * 0x1p-24f * 2.0f - 1.0f;
}

static const st_dtype float_dts[4] = {ST_F32, ST_F16, ST_BF16, ST_F64};

/* The blocked runs below go through this copy of the library's GEMM (base/gemm.h), or, when NULL,
 * through this file's own build of the prelude; the unblocked references are always this file's. */
static const st_gemm_api *use_api;
static void task(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, void *ws) {
    if (use_api) use_api->task[g->dt](g, t, mb, nb, ws);
    else st_gemm_task(g, t, mb, nb, ws);
}

/* ---- 1. the prelude GEMM: blocked == unblocked, bit for bit ---- */

/* A (M x K) and B (K x N) live in buffers with the given strides (base offsets chosen so that
 * negative strides stay in bounds); C is computed by plan(nthreads) + tasks with scratch and by
 * the unblocked loop, and compared bytewise. */
static void gemm_case(int dt, int64_t M, int64_t N, int64_t K, int64_t sam, int64_t sak, int64_t sbk,
                      int64_t sbn, int nthreads) {
    size_t es = dt == ST_GEMM_F64 ? 8 : dt == ST_GEMM_F32 ? 4 : 2;
    /* extent of an operand: 1 + sum |stride| * (size - 1) */
    int64_t ea = 1 + llabs(sam) * (M > 0 ? M - 1 : 0) + llabs(sak) * (K > 0 ? K - 1 : 0);
    int64_t eb = 1 + llabs(sbk) * (K > 0 ? K - 1 : 0) + llabs(sbn) * (N > 0 ? N - 1 : 0);
    unsigned char *A = malloc((size_t)ea * es), *B = malloc((size_t)eb * es);
    unsigned char *C1 = malloc((size_t)(M * N + 1) * es), *C2 = malloc((size_t)(M * N + 1) * es);
    if (!A || !B || !C1 || !C2) {
        CHECK(!"malloc");
        goto out;
    }
    for (int64_t i = 0; i < ea; i++) {
        float v = rnd();
        if (dt == ST_GEMM_F64) ((double *)A)[i] = (double)v * (1.0 + 0x1p-40);
        else if (dt == ST_GEMM_F32) ((float *)A)[i] = v;
        else ((uint16_t *)A)[i] = dt == ST_GEMM_F16 ? st_f2h(v) : st_f2bf(v);
    }
    for (int64_t i = 0; i < eb; i++) {
        float v = rnd();
        if (dt == ST_GEMM_F64) ((double *)B)[i] = (double)v * (1.0 - 0x1p-40);
        else if (dt == ST_GEMM_F32) ((float *)B)[i] = v;
        else ((uint16_t *)B)[i] = dt == ST_GEMM_F16 ? st_f2h(v) : st_f2bf(v);
    }
    int64_t a0 = (sam < 0 ? -sam * (M - 1) : 0) + (sak < 0 ? -sak * (K - 1) : 0);
    int64_t b0 = (sbk < 0 ? -sbk * (K - 1) : 0) + (sbn < 0 ? -sbn * (N - 1) : 0);
    memset(C1, 0xA5, (size_t)(M * N + 1) * es);
    memset(C2, 0x5A, (size_t)(M * N + 1) * es);
    st_gemm g = {dt, M, N, K, A + a0 * (int64_t)es, sam, sak, B + b0 * (int64_t)es, sbk, sbn, C1, N, NULL, 0, 0};
    int64_t mb, nb, T = st_gemm_plan(dt, M, N, nthreads, &mb, &nb);
    void *ws = malloc(st_gemm_ws_bytes(dt, mb, nb, K));
    CHECK(ws != NULL);
    for (int64_t t = 0; t < T; t++) task(&g, t, mb, nb, ws);
    free(ws);
    g.C = C2;
    int64_t mb2, nb2, T2 = st_gemm_plan(dt, M, N, 1, &mb2, &nb2);
    for (int64_t t = 0; t < T2; t++) st_gemm_task(&g, t, mb2, nb2, NULL);
    CHECK_MSG(!memcmp(C1, C2, (size_t)(M * N) * es),
              "dt %d %lldx%lldx%lld strides A (%lld, %lld) B (%lld, %lld), %d threads: blocked != unblocked",
              dt, (long long)M, (long long)K, (long long)N, (long long)sam, (long long)sak, (long long)sbk,
              (long long)sbn, nthreads);
    /* the byte past C is untouched by both */
    CHECK(C1[M * N * es] == 0xA5 && C2[M * N * es] == 0x5A);
    /* plan: every task in range, tasks cover C (checked by the comparison: the 0xA5 / 0x5A fills
     * differ, so an element missed by either run would differ) */
    CHECK(T == 0 || (mb % ST_GEMM_MR == 0 && mb > 0 && nb > 0));
out:
    free(A);
    free(B);
    free(C1);
    free(C2);
}

static void blocked_cases(void) {
    static const int64_t shapes[][3] = {{1, 1, 1},   {7, 13, 5},    {33, 65, 17}, {130, 1, 257},
                                        {5, 7, 0},   {1, 300, 9},   {9, 40, 300}, {200, 300, 600},
                                        {8, 32, 256}, {17, 520, 129}, {0, 5, 3},    {4, 0, 3}};
    for (int d = 0; d < 4; d++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            int dt = d == 3 ? ST_GEMM_F64 : d;
            gemm_case(dt, M, N, K, K, 1, N, 1, 1);                  /* row-major */
            gemm_case(dt, M, N, K, 1, M, 1, K, 2);                  /* both transposed */
            gemm_case(dt, M, N, K, K + 3, 1, 1, K + 5, 3);          /* B transposed, padded rows */
            gemm_case(dt, M, N, K, 2, 2 * M + 1, N, 1, 7);          /* A strided both ways */
            gemm_case(dt, M, N, K, 0, 1, 0, 1, 2);                  /* broadcast rows / B rows */
            gemm_case(dt, M, N, K, -K, 1, N, -1, 2);                /* negative strides */
            if (test_cur_failed) return;
        }
    }
}

TEST(prelude_blocked_equals_unblocked) { blocked_cases(); }

/* ---- 1b. split dims (an implicit GEMM: st_gemm_split) ----
 * A matrix dim that walks several dims of a strided buffer (a convolution's columns) is gathered
 * by the packers: the product equals, bit for bit, the one of the same operands copied into
 * contiguous matrices first, blocked (any plan), unblocked (no scratch) and tile by tile
 * (st_gemm_tile_*: split origins moved). The offsets are computed here on their own. */
typedef struct split_dim {
    int n;                 /* 0: one stride, stride[0] */
    int64_t size[3], stride[3];
} split_dim;
static int64_t split_off(const split_dim *d, int64_t i) {
    if (!d->n) return i * d->stride[0];
    int64_t o = 0;
    for (int q = d->n - 1; q >= 0; q--) {
        o += (q ? i % d->size[q] : i) * d->stride[q];
        i /= d->size[q];
    }
    return o;
}
static int64_t split_len(const split_dim *d) {
    int64_t n = 1;
    for (int q = 0; q < (d->n ? d->n : 1); q++) n *= d->n ? d->size[q] : d->size[0];
    return n;
}
static int64_t split_extent(const split_dim *d) {   /* the largest offset + 1 */
    int64_t e = 0;
    for (int q = 0; q < (d->n ? d->n : 1); q++) e += (d->size[q] - 1) * d->stride[q];
    return e + 1;
}
static void store_elem(int dt, void *p, int64_t i, double v) {
    if (dt == ST_GEMM_F64) ((double *)p)[i] = v;
    else if (dt == ST_GEMM_F32) ((float *)p)[i] = (float)v;
    else ((uint16_t *)p)[i] = dt == ST_GEMM_F16 ? st_f2h((float)v) : st_f2bf((float)v);
}
static void copy_elem(int dt, void *dst, int64_t i, const void *src, int64_t j) {
    size_t es = dt == ST_GEMM_F64 ? 8 : dt == ST_GEMM_F32 ? 4 : 2;
    memcpy((char *)dst + (size_t)i * es, (const char *)src + (size_t)j * es, es);
}
/* d[0..3]: A's rows, A's k, B's k, B's columns */
static void split_case(int dt, const split_dim *d) {
    size_t es = dt == ST_GEMM_F64 ? 8 : dt == ST_GEMM_F32 ? 4 : 2;
    int64_t M = split_len(&d[0]), K = split_len(&d[1]), N = split_len(&d[3]);
    CHECK_EQ_INT(split_len(&d[2]), K);
    int64_t ea = split_extent(&d[0]) + split_extent(&d[1]), eb = split_extent(&d[2]) + split_extent(&d[3]);
    char *A = malloc((size_t)ea * es), *B = malloc((size_t)eb * es), *Ac = malloc((size_t)(M * K) * es);
    char *Bc = malloc((size_t)(K * N) * es), *C0 = malloc((size_t)(M * N) * es), *C1 = malloc((size_t)(M * N) * es);
    char *T = malloc((size_t)(M * N) * es);
    if (!A || !B || !Ac || !Bc || !C0 || !C1 || !T) {
        CHECK(!"malloc");
        goto out;
    }
    for (int64_t i = 0; i < ea; i++) store_elem(dt, A, i, rnd() * (1.0 + 0x1p-40));
    for (int64_t i = 0; i < eb; i++) store_elem(dt, B, i, rnd() * (1.0 - 0x1p-40));
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) copy_elem(dt, Ac, i * K + k, A, split_off(&d[0], i) + split_off(&d[1], k));
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) copy_elem(dt, Bc, k * N + j, B, split_off(&d[2], k) + split_off(&d[3], j));
    st_gemm_split sp;
    memset(&sp, 0, sizeof sp);
    for (int q = 0; q < 4; q++) {
        sp.n[q] = d[q].n;
        memcpy(sp.size[q], d[q].size, sizeof d[q].size);
        memcpy(sp.stride[q], d[q].stride, sizeof d[q].stride);
    }
    st_gemm ref = {dt, M, N, K, Ac, K, 1, Bc, N, 1, C0, N, NULL, 0, 0};
    st_gemm g = {dt, M, N, K, A, d[0].stride[0], d[1].stride[0], B, d[2].stride[0], d[3].stride[0], C1, N, &sp, 0, 0};
    int64_t mb, nb, tasks = st_gemm_plan(dt, M, N, 1, &mb, &nb);
    void *ws = malloc(st_gemm_ws_bytes(dt, mb, nb, K));
    CHECK(ws != NULL);
    for (int64_t t = 0; t < tasks; t++) st_gemm_task(&ref, t, mb, nb, ws);
    free(ws);
    for (int run = 0; run < 3; run++) {   /* 1 thread, 3 threads' plan, no scratch */
        memset(C1, 0x5A, (size_t)(M * N) * es);
        int64_t tn = st_gemm_plan(dt, M, N, run == 1 ? 3 : 1, &mb, &nb);
        void *w = run == 2 ? NULL : malloc(st_gemm_ws_bytes(dt, mb, nb, K));
        for (int64_t t = 0; t < tn; t++) task(&g, t, mb, nb, w);
        free(w);
        CHECK_MSG(!memcmp(C0, C1, (size_t)(M * N) * es), "dt %d %lldx%lldx%lld split (%d %d %d %d), run %d", dt,
                  (long long)M, (long long)K, (long long)N, d[0].n, d[1].n, d[2].n, d[3].n, run);
    }
    if (dt == ST_GEMM_F32) {   /* tiles of 5 rows x 37 columns: split origins moved */
        void *w = malloc(st_gemm_ws_bytes(dt, 5, 37, K));
        for (int64_t r0 = 0; r0 < M; r0 += 5)
            for (int64_t c0 = 0; c0 < N; c0 += 37) {
                int64_t r1 = r0 + 5 < M ? r0 + 5 : M, c1 = c0 + 37 < N ? c0 + 37 : N;
                if (use_api) use_api->tile[ST_GEMM_F32](&g, r0, r1, c0, c1, w, T);
                else st_gemm_tile_f32(&g, r0, r1, c0, c1, w, (float *)T);
                for (int64_t i = r0; i < r1; i++)
                    CHECK(!memcmp(T + (size_t)((i - r0) * (c1 - c0)) * es, C0 + (size_t)(i * N + c0) * es,
                                  (size_t)(c1 - c0) * es));
            }
        free(w);
    }
out:
    free(A);
    free(B);
    free(Ac);
    free(Bc);
    free(C0);
    free(C1);
    free(T);
}

static void split_cases(void) {
    /* a 3x3 convolution's columns over a padded (C, Hp, Wp) image: k = (c, i, j), n = (oh, ow) */
    const int64_t C = 5, Hp = 12, Wp = 21, Ho = 10, Wo = 19;
    const split_dim plain_a = {0, {7}, {C * 9}}, plain_ak = {0, {C * 9}, {1}};
    const split_dim cols_k = {3, {C, 3, 3}, {Hp * Wp, Wp, 1}}, cols_n = {2, {Ho, Wo}, {Wp, 1}};
    const split_dim strided_n = {2, {5, 9}, {2 * Wp, 2}};   /* stride 2: no runs */
    const split_dim gy_k = {0, {Ho * Wo}, {1}}, gy_m = {0, {6}, {Ho * Wo}};
    const split_dim wide_n = {2, {3, 40}, {50, 1}}, wide_k = {3, {2, 17, 9}, {1000, 30, 1}};
    const split_dim plain_bn = {0, {6}, {1}};
    const split_dim gyt_k = {0, {Ho * Wo}, {1}}, gyt_n = {0, {6}, {Ho * Wo}};
    const split_dim rows7_n = {2, {7, 7}, {9, 1}}, rows7_k = {3, {C, 3, 3}, {81, 9, 1}};
    for (int d = 0; d < 4; d++) {
        int dt = d == 3 ? ST_GEMM_F64 : d;
        const split_dim fwd[4] = {plain_a, plain_ak, cols_k, cols_n};        /* w @ cols */
        const split_dim fwd2[4] = {plain_a, plain_ak, cols_k, strided_n};    /* stride 2 */
        const split_dim wgrad[4] = {gy_m, gy_k, cols_n, cols_k};             /* gy @ cols^T */
        const split_dim arow[4] = {cols_n, cols_k, plain_ak, plain_bn};      /* cols^T @ w^T */
        const split_dim big[4] = {plain_a, {0, {2 * 17 * 9}, {1}}, wide_k, wide_n};   /* K > KC, N > NC */
        split_case(dt, fwd);
        split_case(dt, fwd2);
        split_case(dt, wgrad);
        split_case(dt, arow);
        split_case(dt, big);
        const split_dim gath[4] = {cols_k, cols_n, gyt_k, gyt_n};           /* cols @ gy^T: taps as rows */
        const split_dim rows7[4] = {plain_a, plain_ak, rows7_k, rows7_n};    /* 7x7 outputs: whole rows */
        split_case(dt, gath);
        split_case(dt, rows7);
        if (test_cur_failed) return;
    }
}

TEST(prelude_split_dims) { split_cases(); }

/* Every copy of the library's GEMM this CPU runs (baseline, AVX2+FMA, AVX-512: the one the
 * interpreter and the JIT's kernels call is the widest) gives this file's bits on every case
 * above: the copies' own paths (AVX-512: the direct and gathered paths) included. */
TEST(library_copies_agree) {
    int copies = 0;
    for (int isa = 0; isa < BASE_GEMM_COPIES; isa++) {
        if (!(use_api = base_gemm_copy(isa))) continue;
        copies++;
        blocked_cases();
        split_cases();
        CHECK_MSG(!test_cur_failed, "copy %d", isa);
        if (test_cur_failed) break;
    }
    use_api = NULL;
    CHECK(copies >= 1 && base_gemm() != NULL);
    CHECK(base_gemm_copy(BASE_GEMM_BASELINE) != NULL);
    printf("  (%d copies; this CPU's: %s)\n", copies, base_gemm_isa());
}

TEST(plan_covers_and_balances) {
    static const int64_t mn[][2] = {{1, 1}, {1024, 1024}, {128, 256}, {256, 784}, {130, 1}, {7, 3000}, {500, 9}};
    for (size_t s = 0; s < sizeof mn / sizeof mn[0]; s++) {
        for (int nt = 1; nt <= 8; nt++) {
            for (int dt = 0; dt < 4; dt++) {
                int64_t M = mn[s][0], N = mn[s][1], mb, nb;
                int64_t T = st_gemm_plan(dt, M, N, nt, &mb, &nb);
                CHECK_EQ_INT(T, ((M + mb - 1) / mb) * ((N + nb - 1) / nb));
                CHECK(mb <= ST_GEMM_MC || M <= ST_GEMM_MR);
                /* enough tasks for the threads unless C has fewer micro-tiles than threads (for more
                 * than 2 threads, rounding blocks to whole micro-tiles may leave fewer) */
                int64_t tiles = ((M + 7) / 8) * ((N + (dt == ST_GEMM_F64 ? ST_GEMM_NRD : ST_GEMM_NRF) - 1) /
                                                 (dt == ST_GEMM_F64 ? ST_GEMM_NRD : ST_GEMM_NRF));
                int64_t want = nt < tiles ? nt : tiles;
                CHECK_MSG(nt <= 2 ? T >= want : 2 * T >= want, "M %lld N %lld, %d threads: %lld tasks",
                          (long long)M, (long long)N, nt, (long long)T);
            }
        }
    }
    int64_t mb, nb;
    CHECK_EQ_INT(st_gemm_plan(ST_GEMM_F32, 1024, 1024, 2, &mb, &nb) % 2, 0);
    CHECK_EQ_INT(st_gemm_plan(ST_GEMM_F32, 128, 256, 2, &mb, &nb), 2);
}

/* ---- 2. through the public API: JIT == interpreter, bit for bit, and close to a reference ---- */

/* An operand: a realized base tensor of shape base[] and the view of it the matmul reads. */
typedef struct operand {
    st_tensor *base, *view;
} operand;

/* A (.., rows, cols) operand for a matmul: batch dims bshape[0..nb), then the matrix; transposed:
 * the base is (.., cols, rows) and the view swaps the last two dims; sliced: the base has 2 extra
 * rows and 3 extra cols and the view starts at (1, 2). Values come from rnd(). */
static operand make_operand(st_dtype dt, int nb, const int64_t *bshape, int64_t rows, int64_t cols, int trans,
                            int sliced) {
    operand o = {NULL, NULL};
    int64_t shape[ST_MAX_DIMS];
    int nd = nb + 2;
    if (nb) memcpy(shape, bshape, (size_t)nb * sizeof *shape);
    int64_t r = rows + (sliced ? 2 : 0), c = cols + (sliced ? 3 : 0);
    shape[nb] = trans ? c : r;
    shape[nb + 1] = trans ? r : c;
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    float *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    if (!h) return o;
    for (int64_t i = 0; i < n; i++) h[i] = rnd();
    st_tensor *f = st_from_data(ST_F32, nd, shape, h);
    free(h);
    o.base = st_cast(f, dt);
    st_release(f);
    if (!o.base || st_realize(1, &o.base) != ST_OK) return o;
    st_tensor *v = trans ? st_transpose(o.base, nb, nb + 1) : st_retain(o.base);
    if (v && sliced) {
        st_tensor *s1 = st_slice(v, nb, 1, rows + 1, 1);
        st_tensor *s2 = s1 ? st_slice(s1, nb + 1, 2, cols + 2, 1) : NULL;
        st_release(s1);
        st_release(v);
        v = s2;
    }
    o.view = v;
    return o;
}

/* Host copy of t in dtype dt (NULL on failure; caller frees). */
static void *host(st_tensor *t, st_dtype dt) {
    size_t n = (size_t)st_numel(t) * st_dtype_size(dt);
    void *p = malloc(n ? n : 1);
    if (p && st_to_host(t, dt, p, n) != ST_OK) {
        free(p);
        p = NULL;
    }
    return p;
}

/* a @ b with the interpreter (eager) and with a JIT kernel; the results compared bytewise and
 * against a double reference computed from the operands' values. */
static void api_case(st_dtype dt, operand a, operand b) {
    CHECK(a.view && b.view);
    if (!a.view || !b.view) return;
    st_set_eager(1);
    st_tensor *ref = st_matmul(a.view, b.view);
    st_set_eager(0);
    st_set_jit_min(0);
    st_stats_t s0, s1;
    st_stats(&s0);
    st_tensor *out = st_matmul(a.view, b.view);
    st_status s = out ? st_realize(1, &out) : ST_ERR_ARG;
    st_stats(&s1);
    st_set_jit_min(32768);
    CHECK_MSG(ref && s == ST_OK, "matmul failed: %s", st_last_error());
    CHECK_MSG(s1.interp_groups == s0.interp_groups && s1.kernels_launched > s0.kernels_launched,
              "the lazy matmul did not run as a JIT kernel");
    int64_t shape[ST_MAX_DIMS], ash[ST_MAX_DIMS], bsh[ST_MAX_DIMS];
    void *x = ref ? host(ref, dt) : NULL, *y = out ? host(out, dt) : NULL;
    double *av = host(a.view, ST_F64), *bv = host(b.view, ST_F64), *ov = out ? host(out, ST_F64) : NULL;
    if (!x || !y || !av || !bv || !ov) {
        CHECK(!"host copies");
        goto done;
    }
    int nd = st_ndim(out);
    st_shape(out, shape);
    st_shape(a.view, ash);
    st_shape(b.view, bsh);
    int an = st_ndim(a.view), bn = st_ndim(b.view);
    int64_t M = shape[nd - 2], N = shape[nd - 1], Kd = ash[an - 1];
    CHECK_MSG(!memcmp(x, y, (size_t)st_numel(out) * st_dtype_size(dt)),
              "%s M %lld N %lld K %lld: JIT and interpreter results differ", st_dtype_name(dt), (long long)M,
              (long long)N, (long long)Kd);
    /* reference: out[.., i, j] = sum_k a[.., i, k] * b[.., k, j] with broadcast batch dims */
    int64_t nbatch = M > 0 && N > 0 ? st_numel(out) / (M * N) : 0;
    double ua = dt == ST_F64 ? 0x1p-53 : 0x1p-24;
    double us = dt == ST_F64 ? 0x1p-53 : dt == ST_F32 ? 0x1p-24 : dt == ST_F16 ? 0x1p-11 : 0x1p-8;
    int bad = 0;
    for (int64_t bt = 0; bt < nbatch && M > 0 && N > 0 && !bad; bt++) {
        /* batch multi-index of the output -> flat matrix index of each operand */
        int64_t ia = 0, ib = 0, r = bt, sa = 1, sb = 1;
        for (int d = nd - 3; d >= 0; d--) {
            int64_t i = r % shape[d];
            r /= shape[d];
            int da = d - (nd - an), db = d - (nd - bn);
            if (da >= 0) { ia += (ash[da] == 1 ? 0 : i) * sa; sa *= ash[da]; }
            if (db >= 0) { ib += (bsh[db] == 1 ? 0 : i) * sb; sb *= bsh[db]; }
        }
        const double *A = av + ia * M * Kd, *B = bv + ib * Kd * N;
        for (int64_t i = 0; i < M && !bad; i++) {
            for (int64_t j = 0; j < N; j++) {
                double sum = 0, mag = 0;
                for (int64_t k = 0; k < Kd; k++) {
                    sum += A[i * Kd + k] * B[k * N + j];
                    mag += fabs(A[i * Kd + k] * B[k * N + j]);
                }
                double got = ov[(bt * M + i) * N + j];
                if (!(fabs(got - sum) <= 2.0 * (double)(Kd + 2) * ua * mag + us * fabs(sum) + 1e-300)) {
                    CHECK_MSG(0, "%s batch %lld [%lld][%lld] = %.9g, reference %.9g", st_dtype_name(dt),
                              (long long)bt, (long long)i, (long long)j, got, sum);
                    bad = 1;
                    break;
                }
            }
        }
    }
done:
    free(x);
    free(y);
    free(av);
    free(bv);
    free(ov);
    st_release(ref);
    st_release(out);
}

static void release_op(operand o) {
    st_release(o.base);
    st_release(o.view);
}

/* (M, K) @ (K, N), with A and/or B transposed and/or sliced. */
static void api_2d(st_dtype dt, int64_t M, int64_t N, int64_t K, int ta, int tb, int sliced) {
    operand a = make_operand(dt, 0, NULL, M, K, ta, sliced);
    operand b = make_operand(dt, 0, NULL, K, N, tb, sliced);
    api_case(dt, a, b);
    release_op(a);
    release_op(b);
}

TEST(jit_equals_interp_odd_shapes) {
    static const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {130, 1, 257}, {6, 9, 0}, {1, 70, 40}};
    for (int d = 0; d < 4; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int v = 0; v < 8 && !test_cur_failed; v++)
                api_2d(float_dts[d], shapes[s][0], shapes[s][1], shapes[s][2], v & 1, (v >> 1) & 1, v >> 2);
}

/* Past every block size (M > MC, N > NC, K > KC of both float and double) and big enough to run
 * on several threads: the MLP shapes and one odd one. */
TEST(jit_equals_interp_blocked_threads) {
    api_2d(ST_F32, 128, 256, 784, 0, 1, 0);   /* x @ W^T */
    api_2d(ST_F32, 256, 784, 128, 1, 0, 0);   /* g^T @ x */
    api_2d(ST_F32, 201, 290, 531, 0, 0, 1);
    api_2d(ST_F64, 201, 290, 300, 1, 1, 0);
    api_2d(ST_F16, 197, 263, 300, 0, 1, 1);
    api_2d(ST_BF16, 150, 300, 270, 1, 0, 0);
}

/* Batched, with broadcast batch dims: (2, 1, M, K) @ (3, K, N) -> (2, 3, M, N), and a matrix
 * times a batch: (M, K) @ (4, K, N). */
TEST(jit_equals_interp_batched) {
    for (int d = 0; d < 4 && !test_cur_failed; d++) {
        st_dtype dt = float_dts[d];
        for (int v = 0; v < 4; v++) {
            int64_t ba[2] = {2, 1}, bb[1] = {3};
            operand a = make_operand(dt, 2, ba, 9, 21, v & 1, 0);
            operand b = make_operand(dt, 1, bb, 21, 35, v >> 1, v == 3);
            api_case(dt, a, b);
            release_op(a);
            release_op(b);
            int64_t b4[1] = {4};
            operand c = make_operand(dt, 0, NULL, 40, 70, v & 1, v == 2);
            operand e = make_operand(dt, 1, b4, 70, 50, v >> 1, 0);
            api_case(dt, c, e);
            release_op(c);
            release_op(e);
        }
    }
    /* many small batches (one task each) */
    int64_t b16[1] = {16};
    operand a = make_operand(ST_F32, 1, b16, 12, 64, 0, 0), b = make_operand(ST_F32, 1, b16, 64, 12, 1, 0);
    api_case(ST_F32, a, b);
    release_op(a);
    release_op(b);
}

/* The (1, 1) product of a (1, K) and a (K, 1) matrix of dtype dt (shapes sa, sb) in the eager tier
 * (eager 1) or compiled (jit_min 0), read as a double; -1 when it failed (checked). Leaves the
 * lazy mode and the default jit_min. */
static double row_times_col(st_dtype dt, const int64_t *sa, const int64_t *sb, const void *a, const void *b,
                            int eager) {
    st_set_eager(eager);
    st_set_jit_min(0);
    st_tensor *x = st_from_data(dt, 2, sa, a), *y = st_from_data(dt, 2, sb, b);
    st_tensor *z = st_matmul(x, y);
    double r = -1;
    CHECK(z && st_to_host(z, ST_F64, &r, sizeof r) == ST_OK);
    st_release(x);
    st_release(y);
    st_release(z);
    st_set_eager(0);
    st_set_jit_min(32768);
    return r;
}

/* An f32 matmul accumulates in float now: a sum whose double-precision value differs from its
 * float one shows that, in both tiers (1 + 2^-24 + 2^-24 is 1 in float k order, not in double). */
TEST(f32_accumulates_in_float) {
    float a[3] = {1.0f, 0x1p-24f, 0x1p-24f}, b[3] = {1.0f, 1.0f, 1.0f};
    int64_t sa[2] = {1, 3}, sb[2] = {3, 1};
    for (int eager = 1; eager >= 0; eager--) {
        double r = row_times_col(ST_F32, sa, sb, a, b, eager);
        CHECK_MSG(r == 1.0, "%s: %.9g, expected 1 (float accumulation in k order)", eager ? "eager" : "jit", r);
    }
}

/* The sums use fused multiply-adds (one rounding per step) in both tiers, f32 and f64: with
 * -1 * 1 first and then (1 + e)^2 = 1 + 2e + e^2, a separate multiply rounds e^2 away (1 + 2e,
 * then 2e), FMA keeps it (2e + e^2). e = 2^-12 (f32), 2^-27 (f64). Also the prelude called
 * directly (this file's baseline-ISA copy: libm's fma, the same bits). */
TEST(sums_use_fma) {
    for (int d = 0; d < 2; d++) {
        const st_dtype dt = d ? ST_F64 : ST_F32;
        const double e = d ? 0x1p-27 : 0x1p-12, want = 2 * e + e * e;
        double av[2] = {-1.0, 1.0 + e}, bv[2] = {1.0, 1.0 + e};
        float af[2] = {(float)av[0], (float)av[1]}, bf[2] = {(float)bv[0], (float)bv[1]};
        void *pa = d ? (void *)av : (void *)af, *pb = d ? (void *)bv : (void *)bf;
        int64_t sa[2] = {1, 2}, sb[2] = {2, 1};
        for (int eager = 1; eager >= 0; eager--) {
            double r = row_times_col(dt, sa, sb, pa, pb, eager);
            CHECK_MSG(r == want, "%s %s: %.17g, expected %.17g (fused multiply-add)", st_dtype_name(dt),
                      eager ? "eager" : "jit", r, want);
        }
        double c = -1;
        float cf = -1;
        st_gemm g = {d ? ST_GEMM_F64 : ST_GEMM_F32, 1, 1, 2, pa, 2, 1, pb, 1, 1, d ? (void *)&c : (void *)&cf, 1, NULL, 0, 0};
        int64_t mb, nb;
        CHECK_EQ_INT(st_gemm_plan(g.dt, 1, 1, 1, &mb, &nb), 1);
        void *ws = malloc(st_gemm_ws_bytes(g.dt, mb, nb, 2));
        CHECK(ws != NULL);
        st_gemm_task(&g, 0, mb, nb, ws);
        free(ws);
        CHECK(d ? c == want : (double)cf == want);
    }
}


/* ---- the library's attention (base/opmath_attn.h) ----
 * Every copy (baseline, AVX2+FMA, AVX-512), with scratch or without (ws NULL: the scores
 * recomputed), and any rows per task give the same bits; they are within rounding of a double
 * reference; causal rows see keys j <= i only. Odd sizes (past the 16-key and 16-column chunks, a
 * partial block of 8 rows, rows of fewer and more than 32 keys), f32 and f64, q and k read
 * transposed (column-major), v row-major. */
/* drop > 0: weight (i, j) kept when the uniform of the kernel's type at counter ctr + i Lk + j is
 * >= drop, and scaled by 1 / (1 - drop) */
static void attn_ref(int causal, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, const float *Q, const float *K,
                     const float *V, const float *M, double scale, int f64, double drop, uint64_t seed,
                     uint64_t ctr, double *out) {
    for (int64_t i = 0; i < Lq; i++) {
        int64_t n = causal ? (i + 1 < Lk ? i + 1 : Lk) : Lk;
        double m = -INFINITY, l = 0, s[80];
        for (int64_t j = 0; j < n; j++) {
            double a = 0;
            for (int64_t d = 0; d < D; d++) a += (double)Q[i * D + d] * K[j * D + d];
            s[j] = a * scale + (M ? M[i * Lk + j] : 0);
            m = s[j] > m ? s[j] : m;
        }
        for (int64_t j = 0; j < n; j++) l += exp(s[j] - m);
        for (int64_t e = 0; e < Dv; e++) {
            double o = 0;
            for (int64_t j = 0; j < n; j++) {
                double w = exp(s[j] - m) / l;
                if (drop > 0) {
                    const uint64_t c = ctr + (uint64_t)(i * Lk + j);
                    const int keep = f64 ? st_rand_uniform_f64(seed, c) >= drop
                                         : st_rand_uniform_f32(seed, c) >= (float)drop;
                    w = keep ? w / (1 - drop) : 0;
                }
                o += w * V[j * Dv + e];
            }
            out[i * Dv + e] = n ? o : 0;
        }
    }
}

TEST(attention_copies_scratch_and_rows_agree) {
    static const int64_t cases[][4] = {{13, 70, 9, 21}, {8, 16, 16, 16}, {3, 5, 4, 3}, {40, 33, 7, 40}, {1, 0, 3, 2}};
    for (int dt = 0; dt < 2; dt++) {   /* ST_ATTN_F32, ST_ATTN_F64 */
        const size_t es = dt ? 8 : 4;
        for (int ci = 0; ci < 5; ci++) {
            const int64_t Lq = cases[ci][0], Lk = cases[ci][1], D = cases[ci][2], Dv = cases[ci][3];
            /* q and k stored transposed (column-major), v row-major: every operand strided its own way */
            float *Qf = malloc((size_t)(Lq * D) * 4), *Kf = malloc((size_t)(Lk * D + 1) * 4);
            float *Vf = malloc((size_t)(Lk * Dv + 1) * 4);
            char *Q = malloc((size_t)(Lq * D) * es), *K = malloc((size_t)(Lk * D + 1) * es);
            char *V = malloc((size_t)(Lk * Dv + 1) * es), *O = malloc((size_t)(Lq * Dv) * es);
            char *O0 = malloc((size_t)(Lq * Dv) * es);
            double *R = malloc((size_t)(Lq * Dv) * sizeof *R);
            /* a mask: values and -inf, key 0 always finite (no row all -inf), stored transposed */
            float *Mf = malloc((size_t)(Lq * Lk + 1) * 4);
            char *Mk = malloc((size_t)(Lq * Lk + 1) * es);
            for (int64_t i = 0; i < Lq; i++)
                for (int64_t j = 0; j < Lk; j++) {
                    const float x = rnd();
                    Mf[i * Lk + j] = j > 0 && x > 0.7f ? -INFINITY : x;
                    if (dt) ((double *)Mk)[j * Lq + i] = Mf[i * Lk + j];
                    else ((float *)Mk)[j * Lq + i] = Mf[i * Lk + j];
                }
            for (int64_t i = 0; i < Lq * D; i++) Qf[i] = rnd() * 2;
            for (int64_t i = 0; i < Lk * D; i++) Kf[i] = rnd() * 2;
            for (int64_t i = 0; i < Lk * Dv; i++) Vf[i] = rnd();
            /* element (i, d) of q at d * Lq + i; (j, d) of k at d * Lk + j; (j, e) of v at e * Lk + j */
            for (int64_t i = 0; i < Lq; i++)
                for (int64_t d = 0; d < D; d++) {
                    if (dt) ((double *)Q)[d * Lq + i] = Qf[i * D + d];
                    else ((float *)Q)[d * Lq + i] = Qf[i * D + d];
                }
            for (int64_t j = 0; j < Lk; j++)
                for (int64_t d = 0; d < D; d++) {
                    if (dt) ((double *)K)[d * Lk + j] = Kf[j * D + d];
                    else ((float *)K)[d * Lk + j] = Kf[j * D + d];
                }
            for (int64_t i = 0; i < Lk * Dv; i++) {
                if (dt) ((double *)V)[i] = Vf[i];
                else ((float *)V)[i] = Vf[i];
            }
            for (int cm = 0; cm < 8; cm++) {   /* causal, masked, dropout: every combination */
                const int causal = cm & 1, masked = cm >> 1 & 1;
                const double drop = cm >> 2 ? 0.3 : 0;
                attn_ref(causal, Lq, Lk, D, Dv, Qf, Kf, Vf, masked ? Mf : NULL, 0.35, dt, drop, 77, 1000, R);
                int first = 1;
                for (int isa = 0; isa < BASE_GEMM_COPIES; isa++) {
                    const st_gemm_api *api = base_gemm_copy(isa);
                    if (!api) continue;
                    for (int scratch = 0; scratch < 2; scratch++) {
                        for (int64_t rb = 1; rb <= 64; rb *= 4) {
                            st_attn g = {.dt = dt, .causal = causal, .Lq = Lq, .Lk = Lk, .D = D, .Dv = Dv,
                                         .Q = Q, .K = K, .V = V, .sqi = 1, .sqd = Lq, .skj = 1, .skd = Lk,
                                         .svj = Dv, .sve = 1, .M = masked ? Mk : NULL, .smi = 1, .smj = Lq,
                                         .drop = drop, .seed = 77, .ctr = 1000, .O = O, .scale = 0.35,
                                         .rb = rb};
                            void *ws = scratch ? malloc(st_attn_ws_bytes(dt, Lk, D, Dv)) : NULL;
                            memset(O, 0xff, (size_t)(Lq * Dv) * es);   /* NaN everywhere */
                            for (int64_t t = 0; t < st_attn_tasks(&g); t++) api->attn[dt](&g, t, ws);
                            free(ws);
                            if (first) {
                                memcpy(O0, O, (size_t)(Lq * Dv) * es);
                                first = 0;
                                for (int64_t i = 0; i < Lq * Dv; i++) {
                                    double o = dt ? ((double *)O)[i] : ((float *)O)[i];
                                    CHECK_MSG(fabs(o - R[i]) <= (dt ? 1e-12 : 1e-5) * (1 + fabs(R[i])),
                                              "dt %d case %d causal %d mask %d drop %g: %g vs %g", dt, ci, causal,
                                              masked, drop, o, R[i]);
                                }
                            } else {
                                CHECK_MSG(!memcmp(O, O0, (size_t)(Lq * Dv) * es),
                                          "dt %d case %d causal %d mask %d drop %g copy %d scratch %d rows %lld", dt,
                                          ci, causal, masked, drop, isa, scratch, (long long)rb);
                            }
                        }
                    }
                }
            }
            free(Qf); free(Kf); free(Vf); free(Q); free(K); free(V); free(O); free(O0); free(R); free(Mf); free(Mk);
        }
    }
}

int main(void) {
    RUN(prelude_blocked_equals_unblocked);
    RUN(prelude_split_dims);
    RUN(library_copies_agree);
    RUN(plan_covers_and_balances);
    RUN(jit_equals_interp_odd_shapes);
    RUN(jit_equals_interp_blocked_threads);
    RUN(jit_equals_interp_batched);
    RUN(f32_accumulates_in_float);
    RUN(sums_use_fma);
    RUN(attention_copies_scratch_and_rows_agree);
    st_shutdown();
    TEST_MAIN_END();
}
