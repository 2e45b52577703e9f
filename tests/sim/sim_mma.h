/*
 * sim_mma.h — the simulated GPU's tensor-core arithmetic (tests only): mma.sync for the shapes and
 * types stitch emits, and the cvt.rna.tf32.f32 conversion that feeds the tf32 shape.
 *
 * Pure functions, no state. The simulator executes mma.sync as a warp collective: every lane of
 * the warp deposits its fragment registers, then sim_mma turns the 32 lanes' registers into the
 * whole 16x8 result and each lane takes back its own four accumulators. Fragment layouts follow
 * the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type" and "for mma.m16n8k8",
 * .tf32) — see sim_mma.c for the formulas; stitch's own table (jit/render_cuda_mma.c) is NOT
 * consulted, so a disagreement between the two shows up as a wrong result.
 */
#ifndef ST_SIM_MMA_H
#define ST_SIM_MMA_H

#include <stdint.h>

typedef enum {
    SIM_MMA_F16_M16N8K16,    /* mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 */
    SIM_MMA_BF16_M16N8K16,   /* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 */
    SIM_MMA_TF32_M16N8K8,    /* mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 */
    SIM_MMA_KIND_COUNT
} sim_mma_kind;

/* mma.sync.aligned.<shape>.row.col.f32.<type>.<type>.f32 d, a, b, c; for the whole warp.
 * a[lane][0..3], b[lane][0..1] are each lane's 32-bit A and B fragment registers (two packed
 * halves for f16/bf16, low half = the lower-indexed element; one tf32 value in a b32 register for
 * tf32: its low 13 mantissa bits are ignored), c[lane][0..3] each lane's f32 accumulators; writes
 * d[lane][0..3] for every lane. d may be the same array as c (all of c is read before d is
 * written). Arithmetic: D[m][n] = C[m][n] + sum_k A[m][k] * B[k][n] with exact products, summed in
 * double in increasing k, then C added, then one rounding to f32 (sim_mma.c says why). */
void sim_mma(sim_mma_kind kind, const uint32_t a[32][4], const uint32_t b[32][2], const float c[32][4],
             float d[32][4]);

/* cvt.rna.tf32.f32: round to nearest, ties away from zero, to tf32 (10 explicit mantissa bits),
 * returned as the b32 bit pattern with the low 13 bits zero; NaN and Inf pass through (a NaN keeps
 * its sign and top payload bits and is made quiet, so clearing its low bits cannot turn it into an
 * Inf). Finite values too large for tf32 round to Inf, as in IEEE round-to-nearest. */
uint32_t sim_cvt_rna_tf32(float x);

/* Exact widening of an IEEE binary16 / bfloat16 bit pattern to f32 (every value, subnormals, Inf
 * and NaN payloads included, is representable). */
float sim_f16_to_f32(uint16_t h);
float sim_bf16_to_f32(uint16_t h);

#endif
