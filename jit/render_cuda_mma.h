/*
 * render_cuda_mma.h — internal: the tensor-core (mma.sync) body of CUDA matmul kernels, for
 * f16/bf16 operands (m16n8k16, f32 accumulation) and, when the user opts in, f32 operands
 * rounded to tf32 (m16n8k8). render_cuda.c calls it for a matmul that cuda_mma_eligible accepts;
 * the launch geometry is CL_MATMUL's (64x64 output tile per block, 256 threads, same grid), so
 * cuda_launch_dims does not care which body a kernel has.
 *
 * The fragment layouts are data here (cuda_mma_shape) and in the functions below, which the
 * renderer prints from and tests/test_mma.c checks against the PTX ISA formulas.
 */
#ifndef ST_RENDER_CUDA_MMA_H
#define ST_RENDER_CUDA_MMA_H

#include "jit/render.h"

/* Prints the statements that store the f32 value `acc` at output (row, col) of the current batch
 * entry, at indent depth. Called inside `if (row < M && col < N)`; in scope: O (output pointer),
 * M, N, z (batch index), all int64 but acc. The plain store rounds to the storage dtype. */
typedef void (*cuda_mm_store_fn)(sbuf *b, const kir_kernel *k, const char *row, const char *col, const char *acc,
                                 int depth);
ST_INTERNAL void cuda_mm_store_plain(sbuf *b, const kir_kernel *k, const char *row, const char *col,
                                     const char *acc, int depth);

/* The element offset of index `var` along matmul dim d (kir_matmul.sub: 0 A's rows, 1 A's k, 2
 * B's k, 3 B's columns), appended to b: `var * stride` (stride: the name in scope), or, for a split dim,
 * the sum over its sub-dims of (var's digit) * (sub-dim stride), the slots read as i<slot>. */
ST_INTERNAL void cuda_mm_off(sbuf *b, const kir_matmul *m, int d, const char *var, const char *stride);

/* Does matmul k get the tensor-core body on compute capability sm (major * 10 + minor; 0 =
 * unknown)? f16 and bf16 on sm >= 80; f32 only while tf32 is allowed; never f64 or integers,
 * never an operand stored in another type (a folded cast: the plain body converts it). */
ST_INTERNAL bool cuda_mma_eligible(const kir_kernel *k, int sm);
/* The kernel body (between the signature's brace and the closing one) of an eligible matmul. */
ST_INTERNAL void render_matmul_mma(sbuf *b, const kir_kernel *k, cuda_mm_store_fn store);

/* tf32 for f32 matmuls: off unless ST_TF32=1 (read once) or st_cuda_allow_tf32(1). It changes
 * the kernel source, hence the cubin key. */
ST_INTERNAL bool cuda_tf32_allowed(void);

/* One mma.sync shape. A lane's fragment registers sit at fixed offsets from a base that depends on
 * the lane: g = lane / 4 (groupID), t = lane % 4 (threadID_in_group). */
typedef struct cuda_mma_shape {
    const char *ptx;     /* instruction, without operands */
    const char *fn;      /* the prelude function that issues it (base/opmath.h: st_mma_*) */
    int kstep;           /* k per instruction */
    int epr;             /* elements per 32-bit register (consecutive k): 2 (f16/bf16) or 1 (tf32) */
    int tk;              /* the base's k is tk * t */
    int a_off[4][2];     /* A register r: (row, k) offset from (g, tk * t) */
    int b_off[2][2];     /* B register r: (k, col) offset from (tk * t, g) */
} cuda_mma_shape;
ST_INTERNAL const cuda_mma_shape *cuda_mma_shape_of(int dtype);   /* NULL: no shape for dtype */

/* Element e of a lane's fragment (A, B: e = register * epr + element; C/D: e = 0..3) and where it
 * sits in the 16xK A tile, the Kx8 B tile, the 16x8 C tile. */
ST_INTERNAL void cuda_mma_a_elem(const cuda_mma_shape *s, int lane, int e, int *row, int *k);
ST_INTERNAL void cuda_mma_b_elem(const cuda_mma_shape *s, int lane, int e, int *k, int *col);
ST_INTERNAL void cuda_mma_c_elem(int lane, int e, int *row, int *col);
/* Accumulator e of tile (mi, ni) of warp w's lane: its (row, col) in the block's 64x64 tile. */
ST_INTERNAL void cuda_mma_out_elem(int w, int mi, int ni, int lane, int e, int *row, int *col);
enum { CUDA_MMA_WARPS = 8, CUDA_MMA_MI = 2, CUDA_MMA_NI = 2 };   /* warps per block; m16 x n8 tiles per warp */

#endif
