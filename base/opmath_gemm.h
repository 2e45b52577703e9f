/*
 * opmath_gemm.h — the prelude's CPU GEMM, the second half of base/opmath.h (split from it at 1,600
 * lines): C (M x N) = A (M x K) @ B (K x N) for the interpreter and every JIT kernel, and the
 * epilogue tiles. Needs base/opmath.h's definitions (storage conversions) before it: include
 * base/opmath.h, which includes this file; the JIT's prelude text is the two files joined.
 */
#ifndef ST_OPMATH_GEMM_H
#define ST_OPMATH_GEMM_H
#ifndef __CUDACC__ /* the CPU GEMM (malloc'ed scratch, OpenMP tasks); CUDA kernels tile their own */
/* ---- GEMM: C (M x N) = A (M x K) @ B (K x N), the one matmul of the interpreter and the JIT ----
 * Bit-identity rule: every C[i][j] is acc = 0; for k = 0..K-1 in increasing order:
 * acc = fma(A[i][k], B[k][j], acc) (a fused multiply-add, rounded once, in the compute type: float
 * for f32/f16/bf16, double for f64), then one rounding to the storage type. Blocking over i and j,
 * vectorizing over j and which thread runs a block do not change that; a K split continues the
 * same accumulator (kept in C itself for f32/f64, in a float buffer for f16/bf16). IEEE defines
 * fma exactly, so every build of this code gives the same bits: kernels at -O3 -march=native (the
 * FMA instruction), the library's AVX-512 and AVX2+FMA copies (base/gemm.c), and a baseline build
 * (libm's fma; correct, slow), and so does the unblocked loop used when there is no scratch. The
 * fma is explicit: builds still never contract a*b+c themselves (-ffp-contract=off elsewhere).
 * FMA, not a multiply and an add: one instruction instead of two per step, ~1.35x the GFLOP/s on
 * the dev VM's AMD EPYC (bench/NOTES.md "FMA, and a BLAS?").
 * Speed: per block, the operands are packed (whatever their strides: transposed, broadcast, f16)
 * into zero-padded, k-major panels of ST_GEMM_MR rows of A and NR columns of B, and a register-
 * blocked MR x NR micro-kernel, written as fixed-size loops that GCC vectorizes with the
 * accumulators in registers, runs over them (the zero padding only feeds discarded lanes).
 * Work split: st_gemm_plan cuts C into tasks (row blocks of <= ST_GEMM_MC rows x column blocks);
 * a task owns its output elements, so tasks may run on any thread, in any order.
 * Use: plan once; give each thread st_gemm_ws_bytes(...) of scratch (NULL is allowed: the
 * unblocked loop); call st_gemm_task (or the storage type's own st_gemm_task_f32/_f16/_bf16/_f64,
 * which is all a JIT kernel needs to compile) for each task t in [0, tasks).
 * Mixed operands (a matmul prologue: an operand cast to the matmul's type, folded into the loads):
 * ST_GEMM_MIXED(C, SA, SB) defines st_gemm_task_C_SA_SB and st_gemm_tile_C_SA_SB for C = f32 or
 * f64 and operand storage types SA, SB (f32 f16 bf16 f64); the packers convert each element as
 * CAST does (to the compute type, through the source's own compute type), so the panels, and so
 * every sum, are the ones of the cast operand: the bits of "cast, then multiply". A kernel
 * instantiates the combination it calls (guarded by ST_GEMM_HAVE_C_SA_SB, as kernels of one batch
 * share a translation unit).
 * Compiled once, in the library: a storage type's st_gemm_task_<S> and st_gemm_tile_<S> are the same
 * code in every kernel, and GCC needed ~1.3 s for f32's, so the library compiles them (base/gemm.c:
 * a copy per instruction set, AVX-512, AVX2+FMA, baseline, picked at run time) and a JIT kernel
 * (ST_GEMM_EXTERN) calls that copy through the table its st_kargs brings (st_gemm_api below): the
 * interpreter and every kernel run the same machine code, and a first matmul kernel compiles in a
 * fraction of the time (docs/caches.md, bench/NOTES.md fourteenth pass). */
#include <stdlib.h>

enum { ST_GEMM_F32, ST_GEMM_F16, ST_GEMM_BF16, ST_GEMM_F64 };
#define ST_GEMM_MR 8      /* rows of a micro-tile (8 x 32 floats: 16 AVX-512 accumulators) */
#define ST_GEMM_NRF 32    /* columns of a float micro-tile */
#define ST_GEMM_NRD 24    /* columns of a double micro-tile (8 x 24: 24 accumulators) */
#define ST_GEMM_KCF 256   /* k block, float: a 32 KiB B panel stays in L1 across the A panels */
#define ST_GEMM_KCD 128   /* k block, double: a 24 KiB B panel */
#define ST_GEMM_MC 192    /* most rows of a task: its packed A block (<= 192 KiB) stays in L2 */
#define ST_GEMM_NCF 256   /* columns packed at once (the B block, <= 256 KiB); a multiple of NR */
#define ST_GEMM_NCD 240   /* the same for double (a multiple of 24) */

/* One matrix product. A and B point at element [0][0] (strides in elements, any sign, 0 for
 * broadcast); C is row-major with row stride ldc. dt: ST_GEMM_*, the storage type of all three
 * (of C only for a mixed task, whose name gives A's and B's). */
/* Split dims (an implicit GEMM: a matrix dim that walks several dims of a strided view, as a
 * convolution's columns walk the padded input's channel, tap and position; kir_matmul.sub):
 * dim d = 0 A's rows, 1 A's k, 2 B's k, 3 B's columns has n[d] sub-dims (2 or 3; 0: the dim's
 * own stride), sizes and strides outermost first. The packers gather such an operand. */
typedef struct st_gemm_split {
    int n[4];
    int64_t size[4][3], stride[4][3];
} st_gemm_split;
typedef struct st_gemm {
    int dt;
    int64_t M, N, K;
    const void *A;
    int64_t sam, sak;
    const void *B;
    int64_t sbk, sbn;
    void *C;
    int64_t ldc;
    const st_gemm_split *split;   /* NULL: every dim has its stride */
    int64_t om, on;               /* origin of split rows / columns (a tile's); 0 otherwise */
} st_gemm;

/* Element offset of index i along dim d (st_gemm_split), the dim's stride otherwise. */
static inline int64_t st_gemm_off_(const st_gemm_split *s, int d, int64_t i, int64_t stride) {
    if (!s || !s->n[d]) return i * stride;
    int64_t o = 0;
    for (int q = s->n[d] - 1; q > 0; q--) {
        o += i % s->size[d][q] * s->stride[d][q];
        i /= s->size[d][q];
    }
    return o + i * s->stride[d][0];
}
/* Offsets of the n indices i0, i0 + 1, ... along dim d into out: one st_gemm_off_, then the
 * sub-dim indices counted up with carries (no division per index). */
static inline void st_gemm_offs_(const st_gemm_split *s, int d, int64_t i0, int64_t n, int64_t stride,
                                 int64_t *out) {
    if (!s || !s->n[d]) {
        for (int64_t i = 0; i < n; i++) out[i] = (i0 + i) * stride;
        return;
    }
    const int nd = s->n[d];
    int64_t idx[3] = {0, 0, 0}, r = i0, o = st_gemm_off_(s, d, i0, stride);
    for (int q = nd - 1; q > 0; q--) {
        idx[q] = r % s->size[d][q];
        r /= s->size[d][q];
    }
    for (int64_t i = 0; i < n; i++) {
        out[i] = o;
        int q = nd - 1;   /* step the innermost sub-dim, carrying into the outer ones */
        o += s->stride[d][q];
        while (q > 0 && ++idx[q] == s->size[d][q]) {
            idx[q] = 0;
            o += s->stride[d][q - 1] - s->size[d][q] * s->stride[d][q];
            q--;
        }
    }
}
#define ST_GEMM_OAM_(g, i) st_gemm_off_((g)->split, 0, (g)->om + (i), (g)->sam)
#define ST_GEMM_OAK_(g, k) st_gemm_off_((g)->split, 1, (k), (g)->sak)
#define ST_GEMM_OBK_(g, k) st_gemm_off_((g)->split, 2, (k), (g)->sbk)
#define ST_GEMM_OBN_(g, j) st_gemm_off_((g)->split, 3, (g)->on + (j), (g)->sbn)

static inline int64_t st_gemm_rup_(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static inline int64_t st_gemm_min_(int64_t a, int64_t b) { return a < b ? a : b; }
/* Loads (storage -> compute type) and stores (compute -> storage) per storage type. */
#define ST_GEMM_LD_f32(p, i) (((const float *)(p))[i])
#define ST_GEMM_LD_f16(p, i) st_h2f(((const uint16_t *)(p))[i])
#define ST_GEMM_LD_bf16(p, i) st_bf2f(((const uint16_t *)(p))[i])
#define ST_GEMM_LD_f64(p, i) (((const double *)(p))[i])
#define ST_GEMM_ST_f16(v) st_f2h(v)
#define ST_GEMM_ST_bf16(v) st_f2bf(v)
#define ST_GEMM_ST_none(v) ((uint16_t)0)   /* f32/f64 never use the float buffer */
#define ST_GEMM_T_f32 float      /* element types of the storage types */
#define ST_GEMM_T_f16 uint16_t
#define ST_GEMM_T_bf16 uint16_t
#define ST_GEMM_T_f64 double

/* One step of a sum: fma(a, b, acc) = a * b + acc rounded once (IEEE fused multiply-add: exactly
 * defined, so every build that adds in the same order gets the same bits, the hardware instruction
 * or libm's fmaf alike). */
#define ST_GEMM_FMA_float __builtin_fmaf
#define ST_GEMM_FMA_double __builtin_fma

/* The micro-kernel: c[i*ldc + j] (MR x NR) = (first ? 0 : c) + sum over k of ap[k][i] * bp[k][j],
 * added in k order (kc >= 1). Fixed trip counts: the j loop becomes vector adds and acc lives in
 * registers. Step k = 0 starts the sums itself, fma(a, b, 0) or fma(a, b, c): the same operations
 * as zeroing acc and then adding, but GCC turned that zeroing into a memset of acc in memory, a
 * call per micro-tile (2.5% of the transformer step, whose GEMMs have k = 32 to 512). */
#define ST_GEMM_UKR_(T, U, NR)                                                                   \
    static inline void st_gemm_ukr_##U##_(int64_t kc, const T *restrict ap, const T *restrict bp, \
                                          T *restrict c, int64_t ldc, int first) {              \
        T acc[ST_GEMM_MR][NR];                                                                   \
        if (first) {                                                                             \
            for (int i = 0; i < ST_GEMM_MR; i++)                                                 \
                for (int j = 0; j < NR; j++) acc[i][j] = ST_GEMM_FMA_##T(ap[i], bp[j], (T)0);    \
        } else {                                                                                 \
            for (int i = 0; i < ST_GEMM_MR; i++)                                                 \
                for (int j = 0; j < NR; j++) acc[i][j] = ST_GEMM_FMA_##T(ap[i], bp[j], c[i * ldc + j]); \
        }                                                                                        \
        for (int64_t k = 1; k < kc; k++) {                                                       \
            const T *a = ap + k * ST_GEMM_MR, *b = bp + k * NR;                                  \
            for (int i = 0; i < ST_GEMM_MR; i++) {                                               \
                const T ai = a[i];                                                               \
                for (int j = 0; j < NR; j++) acc[i][j] = ST_GEMM_FMA_##T(ai, b[j], acc[i][j]);   \
            }                                                                                    \
        }                                                                                        \
        for (int i = 0; i < ST_GEMM_MR; i++)                                                     \
            for (int j = 0; j < NR; j++) c[i * ldc + j] = acc[i][j];                             \
    }

/* An 8 x 8 float block transposed: dst[c * ldd + r] = src[r * lds + c] (r, c < 8), in vector
 * registers (GCC/clang vector extensions; no intrinsics header, which would slow every kernel
 * compile). A copy: no arithmetic, so no effect on any sum. The packers below use it where a
 * panel reads its operand across the unit stride (A row-major, B transposed): element by element
 * those are scattered stores, ~12% of the time of x @ W^T (128x784x256). */
typedef float st_v8f_ __attribute__((vector_size(32)));
static inline void st_gemm_tr8r_f_(st_v8f_ *r, float *restrict dst, int64_t ldd) {
    st_v8f_ t[8];
    for (int i = 0; i < 8; i += 2) {   /* pairs of rows, interleaved */
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int i = 0; i < 8; i += 4) {   /* then pairs of pairs */
        r[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        r[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        r[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        r[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
    for (int i = 0; i < 4; i++) {   /* then the 128-bit halves of rows i and i + 4 */
        t[i] = __builtin_shufflevector(r[i], r[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        t[i + 4] = __builtin_shufflevector(r[i], r[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
    for (int i = 0; i < 8; i++) memcpy(dst + i * ldd, &t[i], sizeof t[i]);   /* t[i]: column i */
}
static inline void st_gemm_tr8_f_(const float *restrict src, int64_t lds, float *restrict dst, int64_t ldd) {
    st_v8f_ r[8];
    for (int i = 0; i < 8; i++) memcpy(&r[i], src + i * lds, sizeof r[i]);
    st_gemm_tr8r_f_(r, dst, ldd);
}
/* A gathered B panel's 8 k x NR block whose 8 k are adjacent in memory (column j's elements at
 * B + co[j] + kb .. + 7: a weight gradient's columns over the output positions), transposed 8
 * columns at a time. Float panels of an f32 operand only; the others return 0 (nothing done). */
/* n (a multiple of 8) columns at offsets co, each with 8 adjacent k from kb, into 8 rows of bp
 * (row stride ldd), 8 columns at a time. */
static inline void st_gemm_tr8cols_f_(const float *B, const int64_t *co, int64_t kb, int64_t n, int64_t ldd,
                                      float *restrict bp) {
    for (int64_t j = 0; j < n; j += 8) {
        st_v8f_ r[8];
        for (int i = 0; i < 8; i++) memcpy(&r[i], B + co[j + i] + kb, sizeof r[i]);
        st_gemm_tr8r_f_(r, bp + j, ldd);
    }
}
static inline int st_gemm_gtpack_b_f32_f_(const float *B, const int64_t *co, int64_t kb, float *restrict bp) {
    st_gemm_tr8cols_f_(B, co, kb, ST_GEMM_NRF, ST_GEMM_NRF, bp);
    return 1;
}
#define ST_GEMM_GTPACK_B_f32_f(g, co, kb, bp) st_gemm_gtpack_b_f32_f_((const float *)(g)->B, co, kb, bp)
/* A gathered B panel of an f32 operand copied by segments: columns whose offsets step by 1 (a row
 * of a stride-1 convolution's output positions) or by 2 (stride 2) are moved with masked vector
 * loads and stores, up to 16 (8 at step 2) columns each; other columns one by one. For panels
 * whose rows break the 8-column runs above: a 28-wide output row, a 7- or 14-wide one, stride 2.
 * A copy: the panel holds the same values. AVX-512 GCC builds only (the masked-move builtins
 * without the intrinsics header). st_gemm_segs_f32_f_ cuts the panel's nr column offsets co into
 * segments (seg[e] = column | length << 8 | step << 16) and returns their count, or 0 where it
 * does not pay (no two neighbouring columns step by 1 or 2; not an AVX-512 build); then
 * st_gemm_segrow_f32_f_ copies one k row (src: B + that row's offset) into d[0, NR). */
#if defined(__AVX512F__) && defined(__AVX512VL__) && !defined(__clang__)
typedef float st_v16f_ __attribute__((vector_size(64)));
#define ST_VFMA_(a, b, c) __builtin_ia32_vfmaddps512_mask(a, b, c, (unsigned short)0xffff, 4)
static inline int st_gemm_segs_f32_f_(const int64_t *co, int64_t nr, int *seg) {
    int ns = 0, longest = 1;
    for (int j = 0; j < nr;) {   /* left to right */
        const int64_t d = j + 1 < nr ? co[j + 1] - co[j] : 0;
        const int st = d == 2 ? 2 : 1, lim = d == 1 ? 16 : d == 2 ? 8 : 1;
        int len = 1;
        while (j + len < nr && len < lim && co[j + len] - co[j + len - 1] == st) len++;
        seg[ns++] = j | len << 8 | st << 16;
        longest = len > longest ? len : longest;
        j += len;
    }
    return longest < 2 ? 0 : ns;
}
static inline void st_gemm_segrow_f32_f_(const float *src, const int64_t *co, int64_t nr, const int *seg, int ns,
                                         float *restrict d) {
    const st_v16f_ z = {0};
    for (int e = 0; e < ns; e++) {
        const int j = seg[e] & 255, len = seg[e] >> 8 & 255;
        if (len == 1) {
            d[j] = src[co[j]];
        } else if (seg[e] >> 16 == 1) {
            const unsigned short m = (unsigned short)((1u << len) - 1);
            __builtin_ia32_storeups512_mask(d + j, __builtin_ia32_loadups512_mask(src + co[j], z, m), m);
        } else {   /* every other element of 2 * len - 1 */
            const unsigned short m = (unsigned short)(0x5555u & ((1u << (2 * len - 1)) - 1));
            const st_v16f_ v = __builtin_ia32_loadups512_mask(src + co[j], z, m);
            const st_v8f_ h = __builtin_shufflevector(v, v, 0, 2, 4, 6, 8, 10, 12, 14);
            __builtin_ia32_storeups256_mask(d + j, h, (unsigned char)((1u << len) - 1));
        }
    }
    for (int64_t j = nr; j < ST_GEMM_NRF; j++) d[j] = 0;
}
#define ST_GEMM_SEGS_f32_f(co, nr, seg) st_gemm_segs_f32_f_(co, nr, seg)
#define ST_GEMM_SEGROW_f32_f(g, k0, co, nr, seg, ns, d) \
    st_gemm_segrow_f32_f_((const float *)(g)->B + (k0), co, nr, seg, ns, d)
#else
#define ST_GEMM_SEGS_f32_f(co, nr, seg) 0
#define ST_GEMM_SEGROW_f32_f(g, k0, co, nr, seg, ns, d) ((void)0)
#endif
#define ST_GEMM_SEGS_OTHER_(co, nr, seg) 0
#define ST_GEMM_SEGROW_OTHER_(g, k0, co, nr, seg, ns, d) ((void)0)
#define ST_GEMM_SEGS_f16_f ST_GEMM_SEGS_OTHER_
#define ST_GEMM_SEGS_bf16_f ST_GEMM_SEGS_OTHER_
#define ST_GEMM_SEGS_f64_f ST_GEMM_SEGS_OTHER_
#define ST_GEMM_SEGS_f32_d ST_GEMM_SEGS_OTHER_
#define ST_GEMM_SEGS_f16_d ST_GEMM_SEGS_OTHER_
#define ST_GEMM_SEGS_bf16_d ST_GEMM_SEGS_OTHER_
#define ST_GEMM_SEGS_f64_d ST_GEMM_SEGS_OTHER_
#define ST_GEMM_SEGROW_f16_f ST_GEMM_SEGROW_OTHER_
#define ST_GEMM_SEGROW_bf16_f ST_GEMM_SEGROW_OTHER_
#define ST_GEMM_SEGROW_f64_f ST_GEMM_SEGROW_OTHER_
#define ST_GEMM_SEGROW_f32_d ST_GEMM_SEGROW_OTHER_
#define ST_GEMM_SEGROW_f16_d ST_GEMM_SEGROW_OTHER_
#define ST_GEMM_SEGROW_bf16_d ST_GEMM_SEGROW_OTHER_
#define ST_GEMM_SEGROW_f64_d ST_GEMM_SEGROW_OTHER_

#define ST_GEMM_GTPACK_B_f16_f(g, co, kb, bp) 0
#define ST_GEMM_GTPACK_B_bf16_f(g, co, kb, bp) 0
#define ST_GEMM_GTPACK_B_f64_f(g, co, kb, bp) 0
#define ST_GEMM_GTPACK_B_f32_d(g, co, kb, bp) 0
#define ST_GEMM_GTPACK_B_f16_d(g, co, kb, bp) 0
#define ST_GEMM_GTPACK_B_bf16_d(g, co, kb, bp) 0
#define ST_GEMM_GTPACK_B_f64_d(g, co, kb, bp) 0
/* The transposing packers' fast path, for float panels of an f32 operand only (the others are
 * 0: nothing done). Each returns how many k it packed (a multiple of 8; the loop does the rest). */
static inline int64_t st_gemm_tpack_a_f32_f_(const float *A, int64_t base, int64_t sam, int64_t mr, int64_t kc,
                                             float *ap) {
    if (mr != ST_GEMM_MR) return 0;
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) st_gemm_tr8_f_(A + base + k, sam, ap + k * ST_GEMM_MR, ST_GEMM_MR);
    return k;
}
static inline int64_t st_gemm_tpack_b_f32_f_(const float *B, int64_t base, int64_t sbn, int64_t nr, int64_t kc,
                                             float *bp) {
    if (nr != ST_GEMM_NRF) return 0;
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8)
        for (int64_t j = 0; j < ST_GEMM_NRF; j += 8)
            st_gemm_tr8_f_(B + base + k + j * sbn, sbn, bp + k * ST_GEMM_NRF + j, ST_GEMM_NRF);
    return k;
}
#define ST_GEMM_TPACK_A_f32_f(g, base, sam, mr, kc, ap) st_gemm_tpack_a_f32_f_((const float *)(g)->A, base, sam, mr, kc, ap)
#define ST_GEMM_TPACK_B_f32_f(g, base, sbn, nr, kc, bp) st_gemm_tpack_b_f32_f_((const float *)(g)->B, base, sbn, nr, kc, bp)
#define ST_GEMM_TPACK_A_f16_f(g, base, sam, mr, kc, ap) 0
#define ST_GEMM_TPACK_B_f16_f(g, base, sbn, nr, kc, bp) 0
#define ST_GEMM_TPACK_A_bf16_f(g, base, sam, mr, kc, ap) 0
#define ST_GEMM_TPACK_B_bf16_f(g, base, sbn, nr, kc, bp) 0
#define ST_GEMM_TPACK_A_f64_f(g, base, sam, mr, kc, ap) 0
#define ST_GEMM_TPACK_B_f64_f(g, base, sbn, nr, kc, bp) 0
#define ST_GEMM_TPACK_A_f32_d(g, base, sam, mr, kc, ap) 0
#define ST_GEMM_TPACK_B_f32_d(g, base, sbn, nr, kc, bp) 0
#define ST_GEMM_TPACK_A_f16_d(g, base, sam, mr, kc, ap) 0
#define ST_GEMM_TPACK_B_f16_d(g, base, sbn, nr, kc, bp) 0
#define ST_GEMM_TPACK_A_bf16_d(g, base, sam, mr, kc, ap) 0
#define ST_GEMM_TPACK_B_bf16_d(g, base, sbn, nr, kc, bp) 0
#define ST_GEMM_TPACK_A_f64_d(g, base, sam, mr, kc, ap) 0
#define ST_GEMM_TPACK_B_f64_d(g, base, sbn, nr, kc, bp) 0

/* Packing (storage type S, compute type T, named by U: f or d): A rows [i0, i0+mb) x k [p0, p0+kc)
 * into panels ap[panel][k][MR]; B k [p0, p0+kc) x columns [j0, j0+nc) into panels
 * bp[panel][k][NR]. Rows and columns past the block are zeros. The loop order follows the unit
 * stride, so a transposed operand is read along its rows too. An element of another type than T
 * is converted as CAST converts it: ST_GEMM_LD_S gives S's compute type, then a C conversion. */
#define ST_GEMM_PACK_(T, S, U, NR)                                                               \
    static inline void st_gemm_gpack_a_##S##_##U(const st_gemm *g, int64_t i0, int64_t mb,     \
                                              int64_t p0, int64_t kc, T *restrict ap) {         \
        int64_t ko_[ST_GEMM_KCF];   /* kc <= KC <= ST_GEMM_KCF */                              \
        st_gemm_offs_(g->split, 1, p0, kc, g->sak, ko_);                                         \
        for (int64_t r = 0; r < mb; r += ST_GEMM_MR, ap += ST_GEMM_MR * kc) {                    \
            const int64_t mr = st_gemm_min_(ST_GEMM_MR, mb - r);                                 \
            int64_t ro[ST_GEMM_MR];                                                              \
            st_gemm_offs_(g->split, 0, g->om + i0 + r, mr, g->sam, ro);                          \
            for (int64_t k = 0; k < kc; k++) {                                                   \
                const int64_t ko = ko_[k];                                                       \
                for (int64_t i = 0; i < mr; i++)                                                 \
                    ap[k * ST_GEMM_MR + i] = (T)ST_GEMM_LD_##S(g->A, ro[i] + ko);                \
                for (int64_t i = mr; i < ST_GEMM_MR; i++) ap[k * ST_GEMM_MR + i] = 0;            \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
    /* B gathered: runs of 8 adjacent columns are copied (a convolution's output positions); a  \
     * full panel without them whose 8 k are adjacent is transposed (a weight gradient's); other \
     * rows are copied by segments where they pay (st_gemm_segs_f32_f_), else one by one */    \
    static inline void st_gemm_gpack_b_##S##_##U(const st_gemm *g, int64_t p0, int64_t kc,     \
                                              int64_t j0, int64_t nc, T *restrict bp) {         \
        int64_t ko[ST_GEMM_KCF];   /* kc <= KC <= ST_GEMM_KCF */                               \
        st_gemm_offs_(g->split, 2, p0, kc, g->sbk, ko);                                          \
        for (int64_t q = 0; q < nc; q += NR, bp += NR * kc) {                                    \
            const int64_t nr = st_gemm_min_(NR, nc - q);                                         \
            int64_t co[NR];                                                                      \
            int run[NR / 8], runs = 1, seg[NR], ns = 0;                                          \
            (void)seg;                                                                           \
            st_gemm_offs_(g->split, 3, g->on + j0 + q, nr, g->sbn, co);                          \
            for (int64_t j = 0; j < NR / 8; j++) {                                               \
                run[j] = sizeof(ST_GEMM_T_##S) == sizeof(T) && j * 8 + 8 <= nr;                  \
                for (int64_t e = 1; e < 8 && run[j]; e++) run[j] = co[j * 8 + e] == co[j * 8] + e; \
                runs = runs && run[j];                                                           \
            }                                                                                    \
            if (!runs) ns = ST_GEMM_SEGS_##S##_##U(co, nr, seg);                                \
            for (int64_t k = 0; k < kc;) {                                                       \
                if (!runs && nr == NR && k + 8 <= kc && ko[k + 7] == ko[k] + 7) {                \
                    int adj = 1;                                                                 \
                    for (int e = 1; e < 7; e++) adj = adj && ko[k + e] == ko[k] + e;             \
                    if (adj && ST_GEMM_GTPACK_B_##S##_##U(g, co, ko[k], bp + k * NR)) {          \
                        k += 8;                                                                  \
                        continue;                                                                \
                    }                                                                            \
                }                                                                                \
                T *restrict d = bp + k * NR;                                                     \
                if (ns) {                                                                        \
                    ST_GEMM_SEGROW_##S##_##U(g, ko[k], co, nr, seg, ns, d);                      \
                    k++;                                                                         \
                    continue;                                                                    \
                }                                                                                \
                for (int64_t j = 0; j < NR / 8; j++) {                                           \
                    if (run[j]) {                                                                \
                        __builtin_memcpy(d + j * 8, (const T *)g->B + ko[k] + co[j * 8], 8 * sizeof(T)); \
                    } else {                                                                     \
                        for (int64_t e = j * 8; e < j * 8 + 8; e++)                              \
                            d[e] = e < nr ? (T)ST_GEMM_LD_##S(g->B, ko[k] + co[e]) : (T)0;       \
                    }                                                                            \
                }                                                                                \
                k++;                                                                             \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
    static inline void st_gemm_pack_a_##S##_##U(const st_gemm *g, int64_t i0, int64_t mb,      \
                                             int64_t p0, int64_t kc, T *restrict ap) {          \
        const int64_t sam = g->sam, sak = g->sak;                                                \
        if (g->split && (g->split->n[0] || g->split->n[1])) {                                    \
            st_gemm_gpack_a_##S##_##U(g, i0, mb, p0, kc, ap);                                    \
            return;                                                                              \
        }                                                                                        \
        for (int64_t r = 0; r < mb; r += ST_GEMM_MR, ap += ST_GEMM_MR * kc) {                    \
            const int64_t mr = st_gemm_min_(ST_GEMM_MR, mb - r), base = (i0 + r) * sam + p0 * sak; \
            if (sak == 1) {                                                                      \
                const int64_t k0 = ST_GEMM_TPACK_A_##S##_##U(g, base, sam, mr, kc, ap);          \
                for (int64_t i = 0; i < mr; i++)                                                 \
                    for (int64_t k = k0; k < kc; k++)                                            \
                        ap[k * ST_GEMM_MR + i] = (T)ST_GEMM_LD_##S(g->A, base + i * sam + k);    \
            } else if (sam == 1 && mr == ST_GEMM_MR && sizeof(ST_GEMM_T_##S) == sizeof(T)) {     \
                /* a panel's rows adjacent (A^T B): constant-size copies, vector moves; the loop \
                 * below became a memmove call of mr elements per k (GCC's loop distribution) */ \
                for (int64_t k = 0; k < kc; k++)                                                 \
                    __builtin_memcpy(ap + k * ST_GEMM_MR, (const T *)g->A + base + k * sak,      \
                                     ST_GEMM_MR * sizeof(T));                                    \
            } else {                                                                             \
                for (int64_t k = 0; k < kc; k++)                                                 \
                    for (int64_t i = 0; i < mr; i++)                                             \
                        ap[k * ST_GEMM_MR + i] = (T)ST_GEMM_LD_##S(g->A, base + i * sam + k * sak); \
            }                                                                                    \
            for (int64_t i = mr; i < ST_GEMM_MR; i++)                                            \
                for (int64_t k = 0; k < kc; k++) ap[k * ST_GEMM_MR + i] = 0;                     \
        }                                                                                        \
    }                                                                                            \
    static inline void st_gemm_pack_b_##S##_##U(const st_gemm *g, int64_t p0, int64_t kc,      \
                                             int64_t j0, int64_t nc, T *restrict bp) {          \
        const int64_t sbk = g->sbk, sbn = g->sbn;                                                \
        if (g->split && (g->split->n[2] || g->split->n[3])) {                                    \
            st_gemm_gpack_b_##S##_##U(g, p0, kc, j0, nc, bp);                                    \
            return;                                                                              \
        }                                                                                        \
        for (int64_t q = 0; q < nc; q += NR, bp += NR * kc) {                                    \
            const int64_t nr = st_gemm_min_(NR, nc - q), base = p0 * sbk + (j0 + q) * sbn;       \
            if (sbn == 1 && nr == NR && sizeof(ST_GEMM_T_##S) == sizeof(T)) { /* S is T: */      \
                for (int64_t k = 0; k < kc; k++) /* constant-size copies, inlined as vector moves */ \
                    __builtin_memcpy(bp + k * NR, (const T *)g->B + base + k * sbk, NR * sizeof(T)); \
            } else if (sbn == 1 || sbk != 1) {                                                   \
                for (int64_t k = 0; k < kc; k++)                                                 \
                    for (int64_t j = 0; j < nr; j++)                                             \
                        bp[k * NR + j] = (T)ST_GEMM_LD_##S(g->B, base + k * sbk + j * sbn);      \
            } else {                                                                             \
                const int64_t k0 = ST_GEMM_TPACK_B_##S##_##U(g, base, sbn, nr, kc, bp);          \
                for (int64_t j = 0; j < nr; j++)                                                 \
                    for (int64_t k = k0; k < kc; k++)                                            \
                        bp[k * NR + j] = (T)ST_GEMM_LD_##S(g->B, base + k + j * sbn);            \
            }                                                                                    \
            for (int64_t k = 0; k < kc; k++)                                                     \
                for (int64_t j = nr; j < NR; j++) bp[k * NR + j] = 0;                            \
        }                                                                                        \
    }

/* One task's block C[i0:i1, j0:j1] (named S; operands of storage SA, SB; compute T, micro-kernel
 * U). ws: scratch of
 * st_gemm_ws_bytes, 64-byte aligned. Loop order: k blocks of KC (A's block packed once each),
 * column chunks of NC (B packed once per k block and chunk), then B panels (kept in L1) x A
 * panels; LOWP: the chunks outermost (see the loop). Packing A once per k block instead of once
 * per chunk and k block: 1024^3 5%, a 256x128x784 weight gradient 16% faster (bench/NOTES.md). An
 * edge tile of C goes through a full-size local tile (one micro-kernel call site: it is large).
 * LOWP (f16/bf16): accumulate in the float buffer cb (padded, so every tile is full) and round
 * to storage with STORE after the last k block. */
#define ST_GEMM_BLOCK_(T, S, SA, SB, U, NR, KC, NC, LOWP, STORE)                                 \
    static inline void st_gemm_block_##S##_(const st_gemm *g, int64_t i0, int64_t i1,          \
                                            int64_t j0, int64_t j1, T *ws) {                    \
        const int64_t mb = i1 - i0, mbp = st_gemm_rup_(mb, ST_GEMM_MR), K = g->K;                \
        const int64_t kcm = st_gemm_min_(K, KC), ncm = st_gemm_min_(st_gemm_rup_(j1 - j0, NR), NC); \
        T *ap = ws, *bp = ap + st_gemm_rup_(mbp * kcm, 16), *cb = bp + st_gemm_rup_(kcm * ncm, 16); \
        /* f32/f64: k blocks outside the column chunks, so A's block is packed once per k     \
         * block (C itself carries the sums); LOWP: the float buffer holds one chunk, so the   \
         * chunks are outside and A is packed again for each */                                \
        const int64_t jstep = LOWP ? NC : j1 - j0, pstep = LOWP ? K : KC;                        \
        for (int64_t pco = 0; pco < K; pco += pstep)                                             \
        for (int64_t jco = j0; jco < j1; jco += jstep) {                                         \
        for (int64_t jc = jco; jc < st_gemm_min_(j1, jco + jstep); jc += NC) {                   \
            const int64_t nc = st_gemm_min_(NC, j1 - jc), ncp = st_gemm_rup_(nc, NR);            \
            T *cc = LOWP ? cb : (T *)g->C + i0 * g->ldc + jc;                                    \
            const int64_t ldcc = LOWP ? ncp : g->ldc;                                            \
            for (int64_t pc = pco; pc < st_gemm_min_(K, pco + pstep); pc += KC) {               \
                const int64_t kc = st_gemm_min_(KC, K - pc);                                     \
                st_gemm_pack_b_##SB##_##U(g, pc, kc, jc, nc, bp);                                \
                if (LOWP || jc == jco) st_gemm_pack_a_##SA##_##U(g, i0, mb, pc, kc, ap);         \
                for (int64_t jr = 0; jr < nc; jr += NR) {                                        \
                    for (int64_t ir = 0; ir < mb; ir += ST_GEMM_MR) {                            \
                        const int64_t mr = st_gemm_min_(ST_GEMM_MR, mb - ir);                    \
                        const int64_t nr = st_gemm_min_(NR, nc - jr);                            \
                        const int edge = !LOWP && (mr < ST_GEMM_MR || nr < NR);                  \
                        T t[ST_GEMM_MR * NR];                                                    \
                        T *c = cc + ir * ldcc + jr, *cu = edge ? t : c;                          \
                        if (edge && pc)                                                          \
                            for (int64_t i = 0; i < mr; i++)                                     \
                                for (int64_t j = 0; j < nr; j++) t[i * NR + j] = c[i * ldcc + j]; \
                        st_gemm_ukr_##U##_(kc, ap + ir * kc, bp + jr * kc, cu, edge ? NR : ldcc, \
                                           pc == 0);                                             \
                        if (edge)                                                                \
                            for (int64_t i = 0; i < mr; i++)                                     \
                                for (int64_t j = 0; j < nr; j++) c[i * ldcc + j] = t[i * NR + j]; \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
            if (LOWP) {                                                                          \
                uint16_t *o = (uint16_t *)g->C + i0 * g->ldc + jc;                               \
                for (int64_t i = 0; i < mb; i++)                                                 \
                    for (int64_t j = 0; j < nc; j++) o[i * g->ldc + j] = STORE(cb[i * ncp + j]); \
            }                                                                                    \
        }                                                                                        \
        }                                                                                        \
    }

/* The unblocked loop (no scratch): the same sums in the same order, slowly. C's storage: STO,
 * rounded by ST_GEMM_STO_##OS. */
#define ST_GEMM_NAIVE_(T, S, SA, SB, STO, OS)                                                    \
    static inline void st_gemm_naive_##S##_(const st_gemm *g, int64_t i0, int64_t i1,          \
                                            int64_t j0, int64_t j1) {                           \
        for (int64_t i = i0; i < i1; i++) {                                                      \
            for (int64_t j = j0; j < j1; j++) {                                                  \
                T acc = 0;                                                                       \
                for (int64_t k = 0; k < g->K; k++)                                               \
                    acc = ST_GEMM_FMA_##T((T)ST_GEMM_LD_##SA(g->A, ST_GEMM_OAM_(g, i) + ST_GEMM_OAK_(g, k)), \
                                          (T)ST_GEMM_LD_##SB(g->B, ST_GEMM_OBK_(g, k) + ST_GEMM_OBN_(g, j)), \
                                          acc);                                                  \
                ((STO *)g->C)[i * g->ldc + j] = ST_GEMM_STO_##OS(acc);                           \
            }                                                                                    \
        }                                                                                        \
    }
#define ST_GEMM_STO_f32(v) (v)
#define ST_GEMM_STO_f16(v) st_f2h(v)
#define ST_GEMM_STO_bf16(v) st_f2bf(v)
#define ST_GEMM_STO_f64(v) (v)

/* Task t of st_gemm_plan(..., &mb, &nb) for one storage type: computes and stores its block of
 * C. ws: scratch of st_gemm_ws_bytes (any alignment), or NULL for the unblocked loop. */
#define ST_GEMM_TASK_(T, S, D, LINK)                                                             \
    LINK void st_gemm_task_##S(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, void *ws) { \
        const int64_t ntn = (g->N + nb - 1) / nb;                                                \
        const int64_t i0 = t / ntn * mb, j0 = t % ntn * nb;                                      \
        const int64_t i1 = st_gemm_min_(g->M, i0 + mb), j1 = st_gemm_min_(g->N, j0 + nb);        \
        if (g->K == 0 || !ws) { /* K == 0: the loop writes the zeros */                          \
            st_gemm_naive_##S##_(g, i0, i1, j0, j1);                                             \
            return;                                                                              \
        }                                                                                        \
        T *wsa = (T *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);                                 \
        if (D(g, i0, i1, j0, j1, wsa)) return;                                                   \
        st_gemm_block_##S##_(g, i0, i1, j0, j1, wsa);                                            \
    }

/* The micro-kernels of AVX-512 GCC builds: the same sums (k in order, fma(a, b, 0) or fma(a, b, c)
 * first) with the MR x NR accumulators as vector variables (NR / VL vectors of VL lanes per row),
 * and `first` a constant in each of two copies. Written as arrays of scalars, GCC kept acc in
 * memory outside the k loop: MR * NR / VL vector stores and reloads on every call (~20% of a
 * k = 32 product, bench/NOTES.md seventeenth pass); the k loop runs at least once (kc >= 1), so no
 * path skips it. */
#if defined(__AVX512F__) && defined(__AVX512VL__) && !defined(__clang__)
typedef double st_v8d_ __attribute__((vector_size(64)));
#define ST_VFMAD_(a, b, c) __builtin_ia32_vfmaddpd512_mask(a, b, c, (unsigned char)0xff, 4)
#define ST_GEMM_VUKR_(T, U, NR, V, VL, FMA)                                                      \
    static inline __attribute__((always_inline)) void st_gemm_ukr1_##U##_(                       \
        int64_t kc, const T *restrict ap, const T *restrict bp, T *restrict c, int64_t ldc, const int first) { \
        const V z = {0};                                                                         \
        V acc[ST_GEMM_MR][NR / VL];                                                              \
        for (int i = 0; i < ST_GEMM_MR; i++)                                                     \
            for (int v = 0; v < NR / VL; v++) {                                                  \
                if (first) acc[i][v] = z;                                                        \
                else __builtin_memcpy(&acc[i][v], c + i * ldc + v * VL, sizeof(V));              \
            }                                                                                    \
        int64_t k = 0;                                                                           \
        do {                                                                                     \
            V b[NR / VL];                                                                        \
            for (int v = 0; v < NR / VL; v++) __builtin_memcpy(&b[v], bp + k * NR + v * VL, sizeof(V)); \
            for (int i = 0; i < ST_GEMM_MR; i++) {                                               \
                const V ai = ap[k * ST_GEMM_MR + i] - z;   /* x - (+0) is x, a zero's sign too */ \
                for (int v = 0; v < NR / VL; v++) acc[i][v] = FMA(ai, b[v], acc[i][v]);          \
            }                                                                                    \
        } while (++k < kc);                                                                      \
        for (int i = 0; i < ST_GEMM_MR; i++)                                                     \
            for (int v = 0; v < NR / VL; v++) __builtin_memcpy(c + i * ldc + v * VL, &acc[i][v], sizeof(V)); \
    }                                                                                            \
    static inline void st_gemm_ukr_##U##_(int64_t kc, const T *restrict ap, const T *restrict bp, \
                                          T *restrict c, int64_t ldc, int first) {              \
        if (first) st_gemm_ukr1_##U##_(kc, ap, bp, c, ldc, 1);                                   \
        else st_gemm_ukr1_##U##_(kc, ap, bp, c, ldc, 0);                                         \
    }
ST_GEMM_VUKR_(float, f, ST_GEMM_NRF, st_v16f_, 16, ST_VFMA_)
ST_GEMM_VUKR_(double, d, ST_GEMM_NRD, st_v8d_, 8, ST_VFMAD_)
#elif defined(__AVX2__) && defined(__FMA__) && !defined(__clang__)
/* The micro-kernels of AVX2 GCC builds (the library's AVX2 copy, base/gemm_avx2.c; JIT kernels on
 * such a CPU): AVX2 has 16 vector registers, and the MR x NR tile's MR * NR / VL accumulators (32
 * for float, 48 for double) do not fit: GCC kept most of them on the stack, a reload and a store
 * around most FMAs. So the tile runs as sub-tiles of ST_GEMM_SUBR_ rows x 2 vectors (8
 * accumulators, 2 B vectors and a broadcast: 11 registers), each over all of kc, B's sub-panel
 * (2 vectors x kc) read again by the next sub-tile's rows, from L1. Each element's sum is the one
 * of ST_GEMM_UKR_ (k in order, fma(a, b, 0) or fma(a, b, c) first). */
typedef double st_v4d_ __attribute__((vector_size(32)));
#define ST_GEMM_SUBR_ 4
#define ST_GEMM_V2UKR_(T, U, NR, V, VL, FMA)                                                     \
    static inline __attribute__((always_inline)) void st_gemm_ukrs_##U##_(                       \
        int64_t kc, const T *restrict ap, const T *restrict bp, T *restrict c, int64_t ldc, const int first) { \
        const V z = {0};                                                                         \
        V acc[ST_GEMM_SUBR_][2];                                                                 \
        for (int i = 0; i < ST_GEMM_SUBR_; i++)                                                  \
            for (int v = 0; v < 2; v++) {                                                        \
                if (first) acc[i][v] = z;                                                        \
                else __builtin_memcpy(&acc[i][v], c + i * ldc + v * VL, sizeof(V));              \
            }                                                                                    \
        int64_t k = 0;                                                                           \
        do {                                                                                     \
            V b[2];                                                                              \
            for (int v = 0; v < 2; v++) __builtin_memcpy(&b[v], bp + k * NR + v * VL, sizeof(V)); \
            for (int i = 0; i < ST_GEMM_SUBR_; i++) {                                            \
                const V ai = ap[k * ST_GEMM_MR + i] - z;   /* x - (+0) is x, a zero's sign too */ \
                for (int v = 0; v < 2; v++) acc[i][v] = FMA(ai, b[v], acc[i][v]);               \
            }                                                                                    \
        } while (++k < kc);                                                                      \
        for (int i = 0; i < ST_GEMM_SUBR_; i++)                                                  \
            for (int v = 0; v < 2; v++) __builtin_memcpy(c + i * ldc + v * VL, &acc[i][v], sizeof(V)); \
    }                                                                                            \
    static inline void st_gemm_ukr_##U##_(int64_t kc, const T *restrict ap, const T *restrict bp, \
                                          T *restrict c, int64_t ldc, int first) {              \
        for (int j = 0; j < NR; j += 2 * VL)                                                     \
            for (int i = 0; i < ST_GEMM_MR; i += ST_GEMM_SUBR_) {                                \
                if (first) st_gemm_ukrs_##U##_(kc, ap + i, bp + j, c + i * ldc + j, ldc, 1);     \
                else st_gemm_ukrs_##U##_(kc, ap + i, bp + j, c + i * ldc + j, ldc, 0);           \
            }                                                                                    \
    }
ST_GEMM_V2UKR_(float, f, ST_GEMM_NRF, st_v8f_, 8, __builtin_ia32_vfmaddps256)
ST_GEMM_V2UKR_(double, d, ST_GEMM_NRD, st_v4d_, 4, __builtin_ia32_vfmaddpd256)
#else
ST_GEMM_UKR_(float, f, ST_GEMM_NRF)
ST_GEMM_UKR_(double, d, ST_GEMM_NRD)
#endif
ST_GEMM_PACK_(float, f32, f, ST_GEMM_NRF)
ST_GEMM_PACK_(float, f16, f, ST_GEMM_NRF)
ST_GEMM_PACK_(float, bf16, f, ST_GEMM_NRF)
ST_GEMM_PACK_(float, f64, f, ST_GEMM_NRF)
ST_GEMM_PACK_(double, f64, d, ST_GEMM_NRD)
ST_GEMM_PACK_(double, f32, d, ST_GEMM_NRD)
ST_GEMM_PACK_(double, f16, d, ST_GEMM_NRD)
ST_GEMM_PACK_(double, bf16, d, ST_GEMM_NRD)
ST_GEMM_BLOCK_(float, f32, f32, f32, f, ST_GEMM_NRF, ST_GEMM_KCF, ST_GEMM_NCF, 0, ST_GEMM_ST_none)
ST_GEMM_BLOCK_(float, f16, f16, f16, f, ST_GEMM_NRF, ST_GEMM_KCF, ST_GEMM_NCF, 1, ST_GEMM_ST_f16)
ST_GEMM_BLOCK_(float, bf16, bf16, bf16, f, ST_GEMM_NRF, ST_GEMM_KCF, ST_GEMM_NCF, 1, ST_GEMM_ST_bf16)
ST_GEMM_BLOCK_(double, f64, f64, f64, d, ST_GEMM_NRD, ST_GEMM_KCD, ST_GEMM_NCD, 0, ST_GEMM_ST_none)
ST_GEMM_NAIVE_(float, f32, f32, f32, float, f32)
ST_GEMM_NAIVE_(float, f16, f16, f16, uint16_t, f16)
ST_GEMM_NAIVE_(float, bf16, bf16, bf16, uint16_t, bf16)
ST_GEMM_NAIVE_(double, f64, f64, f64, double, f64)
/* The direct path (AVX-512 GCC builds): B's columns are output rows of 4 to 32 positions at
 * stride 1 (a stride-1 convolution's columns over the padded image, st_gemm_split with the
 * columns' inner sub-dim of stride 1): B is not packed at all. For each k block A's block is
 * packed as usual, and for each piece of C's columns and each 8-row A panel, st_gemm_dukr_f32_
 * loads B's k-th row piece straight from the image (masked loads: lanes past the piece read
 * nothing) and adds a[i] * b into 8 x 32 accumulators with vector FMAs, k in order: the same sums
 * as the packed micro-kernel (fma(a, b, 0) first, or fma(a, b, c) on C from the previous k block),
 * so the same bits. A piece is part of one output row (<= 32 columns, contiguous in the image at
 * every k), or, where output rows are narrower than that, as many whole rows as fit in 32 lanes
 * of the image: rows of 7 at a row stride of 9 (a 7x7 output, padding 1) are lanes 0-6, 9-15 and
 * 18-24; the lanes between rows are computed and dropped, C's columns read and written with
 * expanding loads and compressing stores. Why: a convolution with 16-64 output channels feeds each
 * gathered element to only Cout multiply-adds, so copying it into a panel cost about as much as the
 * multiply-adds (bench/NOTES.md, eleventh pass); whole rows: 7-wide rows were packed, 14-wide ones
 * filled half the accumulators (thirteenth pass). */
#if defined(__AVX512F__) && defined(__AVX512VL__) && !defined(__clang__)
/* C's piece of a row: lanes m0 of the first vector, m1 of the second; packed (cmp) or at lanes
 * 0-15 and 16-31 */
static inline st_v16f_ st_gemm_dld_(const float *c, unsigned short m, int cmp) {
    const st_v16f_ z = {0};
    return cmp ? __builtin_ia32_expandloadsf512_mask((const st_v16f_ *)c, z, m) : __builtin_ia32_loadups512_mask(c, z, m);
}
static inline void st_gemm_dst_(float *c, st_v16f_ v, unsigned short m, int cmp) {
    if (cmp) __builtin_ia32_compressstoresf512_mask((st_v16f_ *)c, v, m);
    else __builtin_ia32_storeups512_mask(c, v, m);
}
static inline __attribute__((always_inline)) void st_gemm_dukr_f32_(int64_t kc, const float *restrict ap, const float *b,
                                                                    const int64_t *ko, unsigned short m0,
                                                                    unsigned short m1, int cmp, float *c,
                                                                    int64_t ldc, int mr, int first) {
    const st_v16f_ z = {0};
    const int64_t o1 = cmp ? __builtin_popcount(m0) : 16;   /* C's column of the second vector's first lane */
    st_v16f_ a0[ST_GEMM_MR], a1[ST_GEMM_MR];
    for (int i = 0; i < ST_GEMM_MR; i++) {
        a0[i] = first || i >= mr ? z : st_gemm_dld_(c + i * ldc, m0, cmp);
        a1[i] = first || i >= mr || !m1 ? z : st_gemm_dld_(c + i * ldc + o1, m1, cmp);
    }
    if (m1) {
        for (int64_t k = 0; k < kc; k++) {
            const float *bk = b + ko[k], *a = ap + k * ST_GEMM_MR;
            const st_v16f_ b0 = __builtin_ia32_loadups512_mask(bk, z, m0);
            const st_v16f_ b1 = __builtin_ia32_loadups512_mask(bk + 16, z, m1);
            for (int i = 0; i < ST_GEMM_MR; i++) {
                const st_v16f_ ai = a[i] - z;   /* x - (+0) is x, a zero's sign too */
                a0[i] = ST_VFMA_(ai, b0, a0[i]);
                a1[i] = ST_VFMA_(ai, b1, a1[i]);
            }
        }
    } else {
        for (int64_t k = 0; k < kc; k++) {
            const float *a = ap + k * ST_GEMM_MR;
            const st_v16f_ b0 = __builtin_ia32_loadups512_mask(b + ko[k], z, m0);
            for (int i = 0; i < ST_GEMM_MR; i++) a0[i] = ST_VFMA_(a[i] - z, b0, a0[i]);
        }
    }
    for (int i = 0; i < ST_GEMM_MR; i++) {   /* a fixed count: the accumulators stay registers */
        if (i >= mr) break;
        st_gemm_dst_(c + i * ldc, a0[i], m0, cmp);
        if (m1) st_gemm_dst_(c + i * ldc + o1, a1[i], m1, cmp);
    }
}
static inline int st_gemm_direct_f32_(const st_gemm *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, float *ws) {
    const st_gemm_split *s = g->split;
    if (!s || s->n[3] != 2 || s->stride[3][1] != 1 || s->size[3][1] < 4 || s->size[3][1] > 32) return 0;
    const int64_t wo = s->size[3][1], rs = s->stride[3][0], K = g->K, mb = i1 - i0;
    /* whole output rows per piece: the most whose image span fits 32 lanes */
    const int64_t rows = rs >= wo && rs < 32 ? (32 - wo) / rs + 1 : 1;
    if (wo < 12 && rows < 2) return 0;
    int64_t ko[ST_GEMM_KCF];
    for (int64_t pc = 0; pc < K; pc += ST_GEMM_KCF) {
        const int64_t kc = st_gemm_min_(ST_GEMM_KCF, K - pc);
        st_gemm_pack_a_f32_f(g, i0, mb, pc, kc, ws);
        st_gemm_offs_(s, 2, pc, kc, g->sbk, ko);
        for (int64_t j = j0; j < j1;) {   /* pieces: whole rows, or part of one */
            const int64_t jj = g->on + j, x = jj % wo, r = x ? 1 : st_gemm_min_(rows, (j1 - j) / wo);
            const float *b = (const float *)g->B + jj / wo * rs + x;
            uint32_t lanes;
            int64_t len;
            if (r >= 2) {
                lanes = 0;
                for (int64_t q = 0; q < r; q++) lanes |= ((1u << wo) - 1) << (q * rs);
                len = r * wo;
            } else {
                len = st_gemm_min_(wo - x, j1 - j);
                lanes = len >= 32 ? 0xffffffffu : (1u << len) - 1;
            }
            const unsigned short m0 = (unsigned short)lanes, m1 = (unsigned short)(lanes >> 16);
            for (int64_t ir = 0; ir < mb; ir += ST_GEMM_MR) {   /* cmp a constant in each copy */
                float *c = (float *)g->C + (i0 + ir) * g->ldc + j;
                const int mr = (int)st_gemm_min_(ST_GEMM_MR, mb - ir);
                if (r >= 2) st_gemm_dukr_f32_(kc, ws + ir * kc, b, ko, m0, m1, 1, c, g->ldc, mr, pc == 0);
                else st_gemm_dukr_f32_(kc, ws + ir * kc, b, ko, m0, m1, 0, c, g->ldc, mr, pc == 0);
            }
            j += len;
        }
    }
    return 1;
}
/* The gathered-A path (AVX-512 GCC builds): A a split operand (a convolution's columns as the
 * rows: a weight gradient written taps x positions times the output gradient's transpose) and C
 * at most 64 columns wide (the output channels). A is not packed: B's block is packed into rows
 * of NV vectors (st_gemm_dapack_b_f32_; K x N, small), and for each block of R rows (10, 8, 4 for
 * NV 1, 2, 4: the row pointers stay in registers) and each k, st_gemm_daukr<NV>_f32_ broadcasts A's
 * element straight from memory (row pointer + the k offset) and adds it times B's k-th row, NV
 * vectors of 16 columns, into R x NV accumulators with vector FMAs, k in order: the same sums as
 * the packed micro-kernel, so the same bits. Why: packing a gathered A costs about as much as the
 * multiply-adds when each element meets only N <= 64 columns, and the packed micro-kernel's 32-wide
 * panels waste half their lanes on 16 columns (bench/NOTES.md, thirteenth pass). Rows past the
 * block read row 0 (valid memory; never stored); columns past N are masked. */
#define ST_GEMM_DAUKR_(NV, R)                                                                    \
    static inline void st_gemm_daukr##NV##_f32_(int64_t kc, const float *const *ar, const int64_t *ko, \
                                                const float *bp, const unsigned short *m, float *c, \
                                                int64_t ldc, int mr, int first) {               \
        const st_v16f_ z = {0};                                                                  \
        const float *p[R];                                                                       \
        st_v16f_ acc[R][NV];                                                                     \
        for (int i = 0; i < R; i++) {                                                            \
            p[i] = ar[i];                                                                        \
            for (int v = 0; v < NV; v++)                                                         \
                acc[i][v] = first || i >= mr || !m[v] ? z : __builtin_ia32_loadups512_mask(c + i * ldc + 16 * v, z, m[v]); \
        }                                                                                        \
        for (int64_t k = 0; k < kc; k++) {                                                       \
            const int64_t o = ko[k];                                                             \
            st_v16f_ b[NV];                                                                      \
            for (int v = 0; v < NV; v++) __builtin_memcpy(&b[v], bp + (k * NV + v) * 16, 64);    \
            for (int i = 0; i < R; i++) {                                                        \
                const st_v16f_ ai = p[i][o] - z;   /* x - (+0) is x, a zero's sign too */        \
                for (int v = 0; v < NV; v++) acc[i][v] = ST_VFMA_(ai, b[v], acc[i][v]);          \
            }                                                                                    \
        }                                                                                        \
        for (int i = 0; i < R; i++) {                                                            \
            if (i >= mr) break;                                                                  \
            for (int v = 0; v < NV; v++)                                                         \
                if (m[v]) __builtin_ia32_storeups512_mask(c + i * ldc + 16 * v, acc[i][v], m[v]); \
        }                                                                                        \
    }
/* B's block k [p0, p0 + kc) x columns [j0, j0 + nc) for the gathered-A path: rows of W = 16 NV
 * floats, bp[k * W + j], zeros past nc. Eight k adjacent in memory for each of eight columns (the
 * output gradient's transpose) are transposed in registers; otherwise element by element. */
static inline void st_gemm_dapack_b_f32_(const st_gemm *g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                                         int64_t W, float *restrict bp) {
    int64_t ko[ST_GEMM_KCF], co[64];
    st_gemm_offs_(g->split, 2, p0, kc, g->sbk, ko);
    st_gemm_offs_(g->split, 3, g->on + j0, nc, g->sbn, co);
    const float *B = (const float *)g->B;
    const st_v16f_ z = {0};
    for (int64_t k = 0; k < kc; k++)
        for (int64_t v = nc / 16; v < W / 16; v++) __builtin_memcpy(bp + k * W + v * 16, &z, 64);
    for (int64_t k = 0; k < kc; k += 8) {
        const int64_t ke = st_gemm_min_(8, kc - k);
        int adj = ke == 8;
        for (int e = 1; e < 8 && adj; e++) adj = ko[k + e] == ko[k] + e;
        const int64_t n8 = adj ? nc / 8 * 8 : 0;
        st_gemm_tr8cols_f_(B, co, ko[k], n8, W, bp + k * W);
        for (int64_t j = n8; j < nc; j++)
            for (int64_t e = 0; e < ke; e++) bp[(k + e) * W + j] = B[co[j] + ko[k + e]];
    }
}
#define ST_GEMM_DAR_ 10   /* rows of the 1-vector kernel, the most of the three */
ST_GEMM_DAUKR_(1, ST_GEMM_DAR_)
ST_GEMM_DAUKR_(2, 8)
ST_GEMM_DAUKR_(4, 4)
__attribute__((noinline, unused)) static int st_gemm_directa_f32_(const st_gemm *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, float *ws) {
    const st_gemm_split *s = g->split;
    const int64_t nc = j1 - j0, K = g->K;
    if (!s || !(s->n[0] || s->n[1]) || nc > 64) return 0;
    const int nv = nc <= 16 ? 1 : nc <= 32 ? 2 : 4, R = nv == 1 ? ST_GEMM_DAR_ : nv == 2 ? 8 : 4;
    unsigned short m[4];
    for (int v = 0; v < 4; v++) {
        const int64_t l = nc - 16 * v;
        m[v] = (unsigned short)(l >= 16 ? 0xffffu : l > 0 ? (1u << l) - 1 : 0);
    }
    int64_t ko[ST_GEMM_KCF], ro[ST_GEMM_DAR_];
    const float *ar[ST_GEMM_DAR_];
    for (int64_t pc = 0; pc < K; pc += ST_GEMM_KCF) {
        const int64_t kc = st_gemm_min_(ST_GEMM_KCF, K - pc);
        st_gemm_dapack_b_f32_(g, pc, kc, j0, nc, 16 * nv, ws);
        st_gemm_offs_(s, 1, pc, kc, g->sak, ko);
        for (int64_t ir = i0; ir < i1; ir += R) {
            const int mr = (int)st_gemm_min_(R, i1 - ir);
            st_gemm_offs_(s, 0, g->om + ir, mr, g->sam, ro);
            for (int i = 0; i < R; i++) ar[i] = (const float *)g->A + ro[i < mr ? i : 0];
            float *c = (float *)g->C + ir * g->ldc + j0;
            if (nv == 1) st_gemm_daukr1_f32_(kc, ar, ko, ws, m, c, g->ldc, mr, pc == 0);
            else if (nv == 2) st_gemm_daukr2_f32_(kc, ar, ko, ws, m, c, g->ldc, mr, pc == 0);
            else st_gemm_daukr4_f32_(kc, ar, ko, ws, m, c, g->ldc, mr, pc == 0);
        }
    }
    return 1;
}
#define ST_GEMM_DIRECT_f32(g, i0, i1, j0, j1, ws) \
    (st_gemm_direct_f32_(g, i0, i1, j0, j1, ws) || st_gemm_directa_f32_(g, i0, i1, j0, j1, ws))
#else
#define ST_GEMM_DIRECT_f32(g, i0, i1, j0, j1, ws) 0
#endif
#define ST_GEMM_DIRECT_none(g, i0, i1, j0, j1, ws) 0
/* The library's compiled copies (base/gemm.c): a table per instruction set, one function of each
 * kind per storage type (index ST_GEMM_*; the tile's buffer is the type's storage). A JIT kernel's
 * unit defines ST_GEMM_EXTERN: its st_gemm_task_<S> / st_gemm_tile_<S> then call the table its
 * st_kargs brings (st_gemm_api_, set on entry by ST_POOL_USE, jit/cache.c), so GCC compiles no GEMM
 * for a kernel and the interpreter and the kernels run one copy (the head comment says why). */
typedef void (*st_gemm_task_fn)(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, void *ws);
typedef void (*st_gemm_tile_fn)(const st_gemm *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, void *ws,
                                void *tile);
struct st_attn;   /* base/opmath_attn.h: the library's attention rides in the same table */
typedef struct st_gemm_api {
    st_gemm_task_fn task[4];
    st_gemm_tile_fn tile[4];
    void (*attn[2])(const struct st_attn *g, int64_t t, void *ws);   /* index ST_ATTN_F32, _F64 */
} st_gemm_api;
#ifdef ST_GEMM_EXTERN
static const st_gemm_api *st_gemm_api_;
#define ST_GEMM_FWD_(S, D, STO)                                                                  \
    static inline void st_gemm_task_##S(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, void *ws) { \
        st_gemm_api_->task[D](g, t, mb, nb, ws);                                                 \
    }                                                                                            \
    static inline void st_gemm_tile_##S(const st_gemm *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, \
                                        void *ws, STO *tile) {                                   \
        st_gemm_api_->tile[D](g, i0, i1, j0, j1, ws, tile);                                      \
    }
ST_GEMM_FWD_(f32, ST_GEMM_F32, float)
ST_GEMM_FWD_(f16, ST_GEMM_F16, uint16_t)
ST_GEMM_FWD_(bf16, ST_GEMM_BF16, uint16_t)
ST_GEMM_FWD_(f64, ST_GEMM_F64, double)
#else
ST_GEMM_TASK_(float, f32, ST_GEMM_DIRECT_f32, static inline)
ST_GEMM_TASK_(float, f16, ST_GEMM_DIRECT_none, static inline)
ST_GEMM_TASK_(float, bf16, ST_GEMM_DIRECT_none, static inline)
ST_GEMM_TASK_(double, f64, ST_GEMM_DIRECT_none, static inline)
#endif

/* ---- Epilogues: a JIT matmul whose consumers are fused (jit/render_c.c) ----
 * The kernel runs its tasks in tiles of at most the task's rows x ST_GEMM_NC columns: each tile
 * is computed into a small row-major buffer (storage type, so an f16 value is rounded exactly as
 * the stored matmul is) while it is hot in L2, then the kernel's epilogue reads it element by
 * element and stores the group's outputs. st_gemm_tile_<S> computes C[i0:i1, j0:j1] with the
 * same sums in the same order as st_gemm_task (a block of the same GEMM with its origin moved),
 * so the epilogue sees the very bits the unfused matmul stores. ws: st_gemm_ws_bytes of scratch
 * for the task's mb x nb, or NULL for the unblocked loop (then any tile size works).
 * st_gemm_tile_<S> is never inlined: inlined into a kernel with an epilogue, GCC spilled the
 * micro-kernel's accumulators (a GEMM of 1.7x the time), out of line it is st_gemm_task's code. */
static inline void st_gemm_range(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, int64_t *i0, int64_t *i1,
                                 int64_t *j0, int64_t *j1) {
    const int64_t ntn = (g->N + nb - 1) / nb;
    *i0 = t / ntn * mb;
    *j0 = t % ntn * nb;
    *i1 = st_gemm_min_(g->M, *i0 + mb);
    *j1 = st_gemm_min_(g->N, *j0 + nb);
}
static inline int64_t st_gemm_tile_cols(int dt) { return dt == ST_GEMM_F64 ? ST_GEMM_NCD : ST_GEMM_NCF; }
#define ST_GEMM_TILE_(T, S, SA, SB, STO, D, LINK)                                                \
    LINK __attribute__((noinline, unused)) void st_gemm_tile_##S(                              \
        const st_gemm *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, void *ws, STO *tile) { \
        st_gemm h = *g;                                                                          \
        if (g->split && g->split->n[0]) h.om = g->om + i0; /* a split dim: its origin moves */  \
        else h.A = (const ST_GEMM_T_##SA *)g->A + i0 * g->sam;                                   \
        if (g->split && g->split->n[3]) h.on = g->on + j0;                                       \
        else h.B = (const ST_GEMM_T_##SB *)g->B + j0 * g->sbn;                                   \
        h.M = i1 - i0;                                                                           \
        h.N = j1 - j0;                                                                           \
        h.C = tile;                                                                              \
        h.ldc = j1 - j0;                                                                         \
        T *wsa = (T *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);                                 \
        if (g->K == 0 || !ws) st_gemm_naive_##S##_(&h, 0, h.M, 0, h.N);                          \
        else if (!D(&h, 0, h.M, 0, h.N, wsa)) st_gemm_block_##S##_(&h, 0, h.M, 0, h.N, wsa);     \
    }
#ifndef ST_GEMM_EXTERN
ST_GEMM_TILE_(float, f32, f32, f32, float, ST_GEMM_DIRECT_f32, static)
ST_GEMM_TILE_(float, f16, f16, f16, uint16_t, ST_GEMM_DIRECT_none, static)
ST_GEMM_TILE_(float, bf16, bf16, bf16, uint16_t, ST_GEMM_DIRECT_none, static)
ST_GEMM_TILE_(double, f64, f64, f64, double, ST_GEMM_DIRECT_none, static)
/* A table of this unit's copies (base/gemm*.c: one per instruction set). */
#define ST_GEMM_API_TILE_(S, STO)                                                                \
    static void st_gemm_tile_api_##S##_(const st_gemm *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, \
                                        void *ws, void *tile) {                                  \
        st_gemm_tile_##S(g, i0, i1, j0, j1, ws, (STO *)tile);                                    \
    }
#define ST_GEMM_API_TABLE(NAME)                                                                  \
    ST_GEMM_API_TILE_(f32, float)                                                                \
    ST_GEMM_API_TILE_(f16, uint16_t)                                                             \
    ST_GEMM_API_TILE_(bf16, uint16_t)                                                            \
    ST_GEMM_API_TILE_(f64, double)                                                               \
    static const st_gemm_api NAME = {{st_gemm_task_f32, st_gemm_task_f16, st_gemm_task_bf16, st_gemm_task_f64}, \
                                     {st_gemm_tile_api_f32_, st_gemm_tile_api_f16_, st_gemm_tile_api_bf16_,    \
                                      st_gemm_tile_api_f64_},                                   \
                                     {st_attn_task_f32, st_attn_task_f64}};
#endif

/* Mixed operands (see the GEMM's head comment): C f32 (float sums) or f64 (double sums). */
#define ST_GEMM_MIXED_f32_(S, SA, SB)                                                           \
    ST_GEMM_BLOCK_(float, S, SA, SB, f, ST_GEMM_NRF, ST_GEMM_KCF, ST_GEMM_NCF, 0, ST_GEMM_ST_none) \
    ST_GEMM_NAIVE_(float, S, SA, SB, float, f32)                                                 \
    ST_GEMM_TASK_(float, S, ST_GEMM_DIRECT_none, static inline)                                  \
    ST_GEMM_TILE_(float, S, SA, SB, float, ST_GEMM_DIRECT_none, static)
#define ST_GEMM_MIXED_f64_(S, SA, SB)                                                           \
    ST_GEMM_BLOCK_(double, S, SA, SB, d, ST_GEMM_NRD, ST_GEMM_KCD, ST_GEMM_NCD, 0, ST_GEMM_ST_none) \
    ST_GEMM_NAIVE_(double, S, SA, SB, double, f64)                                               \
    ST_GEMM_TASK_(double, S, ST_GEMM_DIRECT_none, static inline)                                 \
    ST_GEMM_TILE_(double, S, SA, SB, double, ST_GEMM_DIRECT_none, static)
#define ST_GEMM_MIXED(C, SA, SB) ST_GEMM_MIXED_##C##_(C##_##SA##_##SB, SA, SB)

/* Any storage type (the interpreter's entry; kernels call their type's own). */
static inline void st_gemm_task(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, void *ws) {
    switch (g->dt) {
    case ST_GEMM_F16: st_gemm_task_f16(g, t, mb, nb, ws); break;
    case ST_GEMM_BF16: st_gemm_task_bf16(g, t, mb, nb, ws); break;
    case ST_GEMM_F64: st_gemm_task_f64(g, t, mb, nb, ws); break;
    default: st_gemm_task_f32(g, t, mb, nb, ws); break;
    }
}

/* Cuts C into tasks for about nthreads threads: row blocks of <= MC rows (so the packed A block
 * fits in L2), split further (columns first, then rows) until there are >= nthreads tasks, and
 * a task count that divides evenly when it is small. Sets the block sizes; returns the count. */
static inline int64_t st_gemm_plan(int dt, int64_t M, int64_t N, int64_t nthreads, int64_t *mb,
                                   int64_t *nb) {
    const int64_t nr = dt == ST_GEMM_F64 ? ST_GEMM_NRD : ST_GEMM_NRF;
    *mb = *nb = 1;
    if (M <= 0 || N <= 0) return 0;
    if (nthreads < 1) nthreads = 1;
    const int64_t mpan = (M + ST_GEMM_MR - 1) / ST_GEMM_MR, npan = (N + nr - 1) / nr;
    int64_t mt = (M + ST_GEMM_MC - 1) / ST_GEMM_MC, nt = 1;
    if (mt < nthreads) {
        nt = st_gemm_min_((nthreads + mt - 1) / mt, npan);
        if (mt * nt < nthreads) mt = st_gemm_min_((nthreads + nt - 1) / nt, mpan);
    } else if (mt < 4 * nthreads) {
        mt = st_gemm_min_(st_gemm_rup_(mt, nthreads), mpan);
    }
    *mb = st_gemm_rup_((M + mt - 1) / mt, ST_GEMM_MR);
    *nb = st_gemm_rup_((N + nt - 1) / nt, nr);
    return ((M + *mb - 1) / *mb) * ((N + *nb - 1) / *nb);
}

/* Scratch bytes one thread needs for tasks of st_gemm_plan's mb x nb (64 bytes of it are slack
 * for alignment). */
static inline size_t st_gemm_ws_bytes(int dt, int64_t mb, int64_t nb, int64_t K) {
    const int d = dt == ST_GEMM_F64;
    const int64_t nr = d ? ST_GEMM_NRD : ST_GEMM_NRF, nc = d ? ST_GEMM_NCD : ST_GEMM_NCF;
    const int64_t kc = st_gemm_min_(K, d ? ST_GEMM_KCD : ST_GEMM_KCF);
    const int64_t mbp = st_gemm_rup_(mb, ST_GEMM_MR), ncm = st_gemm_min_(st_gemm_rup_(nb, nr), nc);
    int64_t n = st_gemm_rup_(mbp * kc, 16) + st_gemm_rup_(kc * ncm, 16);
    if (dt == ST_GEMM_F16 || dt == ST_GEMM_BF16) n += mbp * ncm;
    return (size_t)n * (d ? sizeof(double) : sizeof(float)) + 64;
}
#endif /* !__CUDACC__ */

#endif
