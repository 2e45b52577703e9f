/*
 * render_cuda_mma.c — tensor-core matmul bodies (mma.sync), for the CL_MATMUL launch of
 * render_cuda.c: the same grid (ceil(N/64), ceil(M/64), batch; y and z grid-strided), 256 threads,
 * a 64x64 output tile per block.
 *
 * Block: 8 warps; warp w owns rows wm = (w / 4) * 32 .. +32 and columns wn = (w % 4) * 16 .. +16
 * of the tile, as 2 x 2 mma tiles of 16x8 (accumulators acc[mi][ni][0..3], f32). k tiles of 32 go
 * through shared memory as As[m][k] and Bs[n][k] (k contiguous: a fragment register is one 32-bit
 * shared load), each row padded (8 halves / 4 words) so that the 32 lanes of a fragment load hit 32
 * distinct banks (row stride 20 words: 20g + t mod 32 is distinct over g < 8, t < 4; 36 words:
 * 4g + t). The global loads are scalar and go through the strides (any layout): thread l takes
 * element l of the tile in the order of the operand's unit-stride dimension when it has one, so
 * the loads coalesce. f16/bf16 are copied as raw bits (no conversion: mma reads them as is); f32
 * is rounded to tf32 (cvt.rna: to nearest, ties away, as cuBLAS/PyTorch) on its way in.
 *
 * Fragment layouts (PTX ISA, section 9.7.14.5 "Matrix Fragments for mma.m16n8k16 / mma.m16n8k8",
 * floating-point types; g = laneid >> 2 "groupID", t = laneid % 4 "threadID_in_group"):
 *   m16n8k16 .f16/.bf16 (4 A registers of 2 elements a0..a7, 2 B registers b0..b3, low half first):
 *     A  a_i: row = g for i in {0,1,4,5}, g + 8 otherwise;  col (k) = 2t + (i & 1) + 8 * (i >= 4)
 *     B  b_i: row (k) = 2t + (i & 1) + 8 * (i >= 2);        col = g
 *   m16n8k8 .tf32 (4 A registers a0..a3, 2 B registers b0..b1, one element each):
 *     A  a_i: row = g for i in {0,2}, g + 8 for {1,3};      col (k) = t for {0,1}, t + 4 for {2,3}
 *     B  b_i: row (k) = t + 4 * i;                          col = g
 *   C/D (both shapes, .f32, c0..c3): row = g + 8 * (i >= 2); col = 2t + (i & 1)
 * As data: cuda_mma_shape (the offsets of each register from the lane's base) and
 * cuda_mma_{a,b,c,out}_elem, which the renderer prints from; tests/test_mma.c checks them against
 * the formulas above and that every output of the 64x64 tile is owned by exactly one accumulator.
 *
 * Numerics (docs/cuda.md): f32 accumulation, but the tensor core sums each k-step's products (16
 * for f16/bf16, 8 for tf32) together with the accumulator in its own order and rounding, so results
 * differ from the CPU's in-order sums by rounding (the output is then rounded to the storage dtype
 * as before). Edges are zero-padded in shared memory: rows past M of A, columns past N of B, and
 * k past K in BOTH operands. A product of a padded zero with real data therefore only reaches an
 * output row/column that is never stored (row >= M or col >= N), so inf * 0 = NaN cannot leak; in
 * a k step straddling K both factors of every padded product are zero (exactly +0, adding nothing
 * but a +0, which the sum starting at +0 already has: -0 cannot result either way, as on the CPU).
 * k steps wholly past K are skipped.
 */
#include "jit/render_cuda_mma.h"

#include <stdlib.h>

#define MMA_T 64        /* output tile per block: CL_MATMUL's (render_cuda.c MM_T) */
#define MMA_KT 32       /* k per shared-memory tile */
#define MMA_THREADS 256 /* CL_MATMUL's block */
#define MMA_WN 4        /* warps along n (so 2 along m) */
#define MMA_WTM 32      /* warp tile: CUDA_MMA_MI m16 tiles ... */
#define MMA_WTN 16      /* ... by CUDA_MMA_NI n8 tiles */

static const cuda_mma_shape shape_f16 = {
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "st_mma_f16_", 16, 2, 2, {{0, 0}, {8, 0}, {0, 8}, {8, 8}}, {{0, 0}, {8, 0}}};
static const cuda_mma_shape shape_bf16 = {
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "st_mma_bf16_", 16, 2, 2, {{0, 0}, {8, 0}, {0, 8}, {8, 8}}, {{0, 0}, {8, 0}}};
static const cuda_mma_shape shape_tf32 = {
    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "st_mma_tf32_", 8, 1, 1, {{0, 0}, {8, 0}, {0, 4}, {8, 4}}, {{0, 0}, {4, 0}}};

const cuda_mma_shape *cuda_mma_shape_of(int dtype) {
    return dtype == ST_F16 ? &shape_f16 : dtype == ST_BF16 ? &shape_bf16 : dtype == ST_F32 ? &shape_tf32 : NULL;
}

void cuda_mma_a_elem(const cuda_mma_shape *s, int lane, int e, int *row, int *k) {
    int r = e / s->epr, h = e % s->epr;
    *row = lane / 4 + s->a_off[r][0];
    *k = s->tk * (lane % 4) + s->a_off[r][1] + h;
}

void cuda_mma_b_elem(const cuda_mma_shape *s, int lane, int e, int *k, int *col) {
    int r = e / s->epr, h = e % s->epr;
    *k = s->tk * (lane % 4) + s->b_off[r][0] + h;
    *col = lane / 4 + s->b_off[r][1];
}

void cuda_mma_c_elem(int lane, int e, int *row, int *col) {
    *row = lane / 4 + 8 * (e >> 1);
    *col = 2 * (lane % 4) + (e & 1);
}

void cuda_mma_out_elem(int w, int mi, int ni, int lane, int e, int *row, int *col) {
    cuda_mma_c_elem(lane, e, row, col);
    *row += (w / MMA_WN) * MMA_WTM + 16 * mi;
    *col += (w % MMA_WN) * MMA_WTN + 8 * ni;
}

/* ---- tf32 opt-in ---- */
static int tf32 = -1;   /* -1: ST_TF32 not read yet */

bool cuda_tf32_allowed(void) {
    if (tf32 < 0) {
        const char *e = base_env(SET_TF32);
        tf32 = e && !strcmp(e, "1");
    }
    return tf32 == 1;
}

void st_cuda_allow_tf32(int on) { tf32 = on != 0; }

bool cuda_mma_eligible(const kir_kernel *k, int sm) {
    if (k->kind != KK_MATMUL || sm < 80) return false;   /* m16n8k16 bf16 and tf32 need sm_80 */
    int dt = k->mm.dtype;
    /* an operand stored in another type (a folded cast) takes the plain path, which converts */
    if (k->buf_dtype[k->mm.a_buf] != dt || k->buf_dtype[k->mm.b_buf] != dt) return false;
    return dt == ST_F16 || dt == ST_BF16 || (dt == ST_F32 && cuda_tf32_allowed());
}

void cuda_mm_off(sbuf *b, const kir_matmul *m, int d, const char *var, const char *stride) {
    int ns = m->sub[d], p = m->p_sub[d];
    if (!ns) {
        sbuf_printf(b, "%s * %s", var, stride);
        return;
    }
    sbuf_printf(b, "(");
    for (int q = 0; q < ns; q++) {   /* digit q: (var / inner sizes) % size q, times stride q */
        sbuf_printf(b, "%s(%s", q ? " + " : "", var);
        if (q < ns - 1) {
            sbuf_printf(b, " / (");
            for (int r = q + 1; r < ns; r++) sbuf_printf(b, "%si%d", r > q + 1 ? " * " : "", p + r);
            sbuf_printf(b, ")");
        }
        if (q > 0) sbuf_printf(b, " %% i%d", p + q);
        sbuf_printf(b, ") * i%d", p + ns + q);
    }
    sbuf_printf(b, ")");
}

void cuda_mm_store_plain(sbuf *b, const kir_kernel *k, const char *row, const char *col, const char *acc,
                         int depth) {
    int dt = k->mm.dtype;
    const char *cv = dt == ST_F16 ? "st_f2h" : dt == ST_BF16 ? "st_f2bf" : "";
    render_indent(b, depth);
    sbuf_printf(b, "O[z * M * N + %s * N + %s] = %s(%s);\n", row, col, cv, acc);
}

/* ---- the body ---- */
static void header(sbuf *b, const kir_kernel *k, const cuda_mma_shape *s) {
    const kir_matmul *m = &k->mm;
    const char *st = st_dtypes[m->dtype].ctype;
    int nb = m->nbatch;
    sbuf_printf(b, "    /* tensor cores: %s (layouts: jit/render_cuda_mma.c) */\n", s->ptx);
    sbuf_printf(b, "    const %s *A = p%d;\n    const %s *B = p%d;\n    %s *O = p%d;\n", st, m->a_buf, st, m->b_buf,
                st, m->o_buf);
    sbuf_printf(b, "    const int64_t M = i%d, N = i%d, K = i%d;\n", m->p_m, m->p_n, m->p_k);
    sbuf_printf(b, "    const int64_t sam = i%d, sak = i%d, aoff = i%d;\n", m->p_astr + nb, m->p_astr + nb + 1,
                m->p_aoff);
    if (m->b_unit) sbuf_printf(b, "    const int64_t sbk = i%d, sbn = 1, boff = i%d;\n", m->p_bstr + nb, m->p_boff);
    else sbuf_printf(b, "    const int64_t sbk = i%d, sbn = i%d, boff = i%d;\n", m->p_bstr + nb, m->p_bstr + nb + 1,
                     m->p_boff);
    sbuf_printf(b, "    int64_t NB = 1;\n");
    for (int d = 0; d < nb; d++) sbuf_printf(b, "    NB *= i%d;\n", m->p_bsize + d);
}

/* Global -> shared: element l of each tile, in the order of the operand's unit-stride dimension. */
/* " ? A[ao + <row offset> + <k offset>] : " for operand A (a = 1) or B (cuda_mm_off). */
static void tile_load(sbuf *b, const kir_matmul *m, int a) {
    sbuf_printf(b, " ? %s[%s + ", a ? "A" : "B", a ? "ao" : "bo");
    cuda_mm_off(b, m, a ? 0 : 2, a ? "gm" : "gkb", a ? "sam" : "sbk");
    sbuf_printf(b, " + ");
    cuda_mm_off(b, m, a ? 1 : 3, a ? "gka" : "gn", a ? "sak" : "sbn");
    sbuf_printf(b, "] : ");
}

static void load_tiles(sbuf *b, const kir_matmul *m, bool tf) {
    sbuf_printf(b, "                for (int l = threadIdx.x; l < %d; l += %d) {\n", MMA_T * MMA_KT, MMA_THREADS);
    sbuf_printf(b, "                    const int am = a_mf ? l %% %d : l / %d, ak = a_mf ? l / %d : l %% %d;\n",
                MMA_T, MMA_KT, MMA_T, MMA_KT);
    sbuf_printf(b, "                    const int bn = b_kf ? l / %d : l %% %d, bk = b_kf ? l %% %d : l / %d;\n",
                MMA_KT, MMA_T, MMA_KT, MMA_T);
    sbuf_printf(b, "                    const int64_t gm = m0 + am, gka = k0 + ak, gn = n0 + bn, gkb = k0 + bk;\n");
    static const char *lhs[2][2] = {{"As[am][ak] =", "Bs[bn][bk] ="}, {"const float av =", "const float bv ="}};
    static const char *cond[2] = {"gm < M && gka < K", "gkb < K && gn < N"};
    for (int i = 0; i < 2; i++) {   /* A, then B: the element, or 0 past the edges */
        sbuf_printf(b, "                    %s %s", lhs[tf][i], cond[i]);
        tile_load(b, m, i == 0);
        sbuf_printf(b, "%s;\n", tf ? "0.0f" : "(uint16_t)0");
    }
    if (tf) {
        sbuf_printf(b, "                    As[am][ak] = st_cvt_tf32_(av);\n");
        sbuf_printf(b, "                    Bs[bn][bk] = st_cvt_tf32_(bv);\n");
    }
    sbuf_printf(b, "                }\n");
}

/* One k step: fragments from shared memory (offsets from the shape table), then the mma tiles. */
static void k_step(sbuf *b, const cuda_mma_shape *s, bool tf) {
    /* a 32-bit register: two consecutive halves (4-byte aligned: even k, even row length) or a word */
    const char *ld = tf ? "" : "*(const uint32_t *)&";
    sbuf_printf(b, "                for (int ks = 0; ks < kn; ks += %d) {   /* steps wholly past K: skipped */\n",
                s->kstep);
    sbuf_printf(b, "                    uint32_t af[%d][4], bf[%d][2];\n", CUDA_MMA_MI, CUDA_MMA_NI);
    sbuf_printf(b, "#pragma unroll\n                    for (int i = 0; i < %d; i++) {\n", CUDA_MMA_MI);
    sbuf_printf(b, "                        const int r = wm + 16 * i + g, c = ks + %d * t;\n", s->tk);
    for (int r = 0; r < 4; r++)
        sbuf_printf(b, "                        af[i][%d] = %sAs[r + %d][c + %d];\n", r, ld, s->a_off[r][0],
                    s->a_off[r][1]);
    sbuf_printf(b, "                    }\n");
    sbuf_printf(b, "#pragma unroll\n                    for (int j = 0; j < %d; j++) {\n", CUDA_MMA_NI);
    sbuf_printf(b, "                        const int n = wn + 8 * j + g, c = ks + %d * t;\n", s->tk);
    for (int r = 0; r < 2; r++)
        sbuf_printf(b, "                        bf[j][%d] = %sBs[n + %d][c + %d];\n", r, ld, s->b_off[r][1],
                    s->b_off[r][0]);
    sbuf_printf(b, "                    }\n");
    sbuf_printf(b, "#pragma unroll\n                    for (int i = 0; i < %d; i++)\n", CUDA_MMA_MI);
    sbuf_printf(b, "#pragma unroll\n                        for (int j = 0; j < %d; j++)\n", CUDA_MMA_NI);
    sbuf_printf(b, "                            %s(acc[i][j], af[i], bf[j]);\n", s->fn);
    sbuf_printf(b, "                }\n");
}

/* Every accumulator to its output (cuda_mma_out_elem's mapping), through store. */
static void store_all(sbuf *b, const kir_kernel *k, cuda_mm_store_fn store) {
    sbuf_printf(b, "#pragma unroll\n            for (int i = 0; i < %d; i++)\n", CUDA_MMA_MI);
    sbuf_printf(b, "#pragma unroll\n                for (int j = 0; j < %d; j++)\n", CUDA_MMA_NI);
    sbuf_printf(b, "#pragma unroll\n                    for (int e = 0; e < 4; e++) {\n");
    sbuf_printf(b, "                        const int64_t gm = m0 + wm + 16 * i + g + 8 * (e >> 1), "
                   "gn = n0 + wn + 8 * j + 2 * t + (e & 1);\n");
    sbuf_printf(b, "                        if (gm < M && gn < N) {\n");
    store(b, k, "gm", "gn", "acc[i][j][e]", 7);
    sbuf_printf(b, "                        }\n");
    sbuf_printf(b, "                    }\n");
}

void render_matmul_mma(sbuf *b, const kir_kernel *k, cuda_mm_store_fn store) {
    const kir_matmul *m = &k->mm;
    const cuda_mma_shape *s = cuda_mma_shape_of(m->dtype);
    if (!s) return;   /* not eligible: the caller checked cuda_mma_eligible */
    bool tf = m->dtype == ST_F32;
    int nb = m->nbatch, row = MMA_KT + (tf ? 4 : 8);
    header(b, k, s);
    sbuf_printf(b, "    __shared__ __align__(16) %s As[%d][%d], Bs[%d][%d];   /* [m][k], [n][k]; rows padded */\n",
                tf ? "uint32_t" : "uint16_t", MMA_T, row, MMA_T, row);
    sbuf_printf(b, "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;\n");
    sbuf_printf(b, "    const int wm = (warp / %d) * %d, wn = (warp %% %d) * %d;   /* the warp's %dx%d */\n", MMA_WN,
                MMA_WTM, MMA_WN, MMA_WTN, MMA_WTM, MMA_WTN);
    sbuf_printf(b, "    const bool a_mf = sak != 1 && sam == 1, b_kf = sbn != 1 && sbk == 1;   /* unit-stride dim */\n");
    sbuf_printf(b, "    const int64_t mt = (M + %d) / %d;\n", MMA_T - 1, MMA_T);
    sbuf_printf(b, "    for (int64_t z = blockIdx.z; z < NB; z += gridDim.z) {\n");
    sbuf_printf(b, "        int64_t ao = aoff, bo = boff;\n");
    if (nb) sbuf_printf(b, "        int64_t zr = z;\n");
    for (int d = nb - 1; d >= 0; d--)
        sbuf_printf(b, "        { const int64_t zi = zr %% i%d; zr /= i%d; ao += zi * i%d; bo += zi * i%d; }\n",
                    m->p_bsize + d, m->p_bsize + d, m->p_astr + d, m->p_bstr + d);
    sbuf_printf(b, "        for (int64_t by = blockIdx.y; by < mt; by += gridDim.y) {\n");
    sbuf_printf(b, "            const int64_t m0 = by * %d, n0 = (int64_t)blockIdx.x * %d;\n", MMA_T, MMA_T);
    sbuf_printf(b, "            float acc[%d][%d][4];\n", CUDA_MMA_MI, CUDA_MMA_NI);
    sbuf_printf(b, "#pragma unroll\n            for (int i = 0; i < %d; i++)\n", CUDA_MMA_MI);
    sbuf_printf(b, "#pragma unroll\n                for (int j = 0; j < %d; j++)\n", CUDA_MMA_NI);
    sbuf_printf(b, "#pragma unroll\n                    for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;\n");
    sbuf_printf(b, "            for (int64_t k0 = 0; k0 < K; k0 += %d) {\n", MMA_KT);
    load_tiles(b, m, tf);
    sbuf_printf(b, "                __syncthreads();\n");
    sbuf_printf(b, "                const int kn = K - k0 < %d ? (int)(K - k0) : %d;\n", MMA_KT, MMA_KT);
    k_step(b, s, tf);
    sbuf_printf(b, "                __syncthreads();\n");
    sbuf_printf(b, "            }\n");
    store_all(b, k, store);
    sbuf_printf(b, "        }\n");
    sbuf_printf(b, "    }\n");
}
