/*
 * sim_mma.c — tensor-core mma.sync and cvt.rna.tf32.f32 for the simulated GPU (tests only).
 *
 * Fragment layouts, transcribed from the PTX ISA (section "Warp-level matrix fragments": "Matrix
 * Fragments for mma.m16n8k16 with floating point type" and "Matrix Fragments for mma.m16n8k8",
 * .tf32), independently of stitch's jit/render_cuda_mma.c. g = laneid >> 2 (groupID), t = laneid % 4
 * (threadID_in_group); a register holding two 16-bit elements has the lower-indexed one in its low
 * half ("elements low to high").
 *   m16n8k16 .f16/.bf16: A 16x16, 4 registers = elements a0..a7 (register i / 2, half i % 2)
 *     A  a_i: row = g       for i in {0,1,4,5}, g + 8 otherwise;  col = 2t + (i & 1) (+ 8 for i >= 4)
 *     B  b_i (16x8, 2 registers = b0..b3):  row = 2t + (i & 1) (+ 8 for i >= 2);  col = g
 *   m16n8k8 .tf32: A 16x8, 4 registers = a0..a3; B 8x8, 2 registers = b0..b1 (one element each)
 *     A  a_i: row = g for i in {0,2}, g + 8 for {1,3};  col = t for i in {0,1}, t + 4 for {2,3}
 *     B  b_i: row = t for b0, t + 4 for b1;  col = g
 *   C/D .f32 (both shapes, 16x8, c0..c3): row = g for i < 2, g + 8 for i >= 2;  col = 2t + (i & 1)
 * Invariant: over the 32 lanes each mapping is a bijection onto its matrix (the test checks it).
 *
 * Numerics — a choice, not the hardware's: each product A[m][k] * B[k][n] is exact in double (f16,
 * bf16 and tf32 significands have at most 11 bits, and their exponents squared stay within
 * double's range), the products are summed in double in increasing k (the first product starts the
 * sum, so a sum of -0s stays -0), C is added, and the total is rounded once to f32. Real tensor
 * cores add a k-step's products and the accumulator in their own order and with their own
 * (truncating, on several generations) internal rounding, so they differ from this in the last bits
 * of f32; the simulator is for structure (layouts, indexing, synchronisation), not for bit-exact
 * rounding. Inf and NaN propagate as IEEE arithmetic does (Inf * 0 = NaN, Inf - Inf = NaN); a
 * double total beyond f32's range rounds to +-Inf.
 */
#include "sim_mma.h"

#include <string.h>

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float sim_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | man << 13);   /* Inf, NaN (payload kept) */
    if (exp == 0) {
        if (man == 0) return f32_from_bits(sign);                             /* +-0 */
        /* subnormal: man * 2^-24; normalise so the leading 1 lands in bit 10 */
        int e = -14;
        while (!(man & 0x400)) {
            man <<= 1;
            e--;
        }
        return f32_from_bits(sign | (uint32_t)(e + 127) << 23 | (man & 0x3ff) << 13);
    }
    return f32_from_bits(sign | (exp - 15 + 127) << 23 | man << 13);
}

float sim_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint32_t sim_cvt_rna_tf32(float x) {
    uint32_t u = bits_from_f32(x);
    if ((u & 0x7f800000u) == 0x7f800000u) {
        if (u & 0x007fffffu) return (u & 0xffffe000u) | 0x00400000u;   /* NaN: stays NaN, made quiet */
        return u;                                                        /* +-Inf */
    }
    /* Adding half a tf32 ulp (bit 12) to the magnitude and truncating rounds to nearest with ties
     * away from zero; a carry out of the mantissa bumps the exponent (up to Inf past the largest
     * finite tf32), and subnormals round the same way. The sign bit is never reached: the largest
     * finite magnitude 0x7f7fffff + 0x1000 stays below 0x80000000. */
    return (u + 0x1000u) & 0xffffe000u;
}

/* ---- fragment layouts (PTX ISA; see the head of the file) ---- */

/* Element i of a lane's A fragment (f16/bf16: i = 0..7, tf32: i = 0..3): its (row, col) in A. */
static void a_pos(sim_mma_kind kind, int lane, int i, int *row, int *col) {
    int g = lane >> 2, t = lane % 4;
    if (kind == SIM_MMA_TF32_M16N8K8) {
        *row = (i == 0 || i == 2) ? g : g + 8;
        *col = i < 2 ? t : t + 4;
    } else {
        *row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
        *col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
    }
}

/* Element i of a lane's B fragment (f16/bf16: i = 0..3, tf32: i = 0..1): its (row = k, col) in B. */
static void b_pos(sim_mma_kind kind, int lane, int i, int *row, int *col) {
    int g = lane >> 2, t = lane % 4;
    if (kind == SIM_MMA_TF32_M16N8K8) {
        *row = i == 0 ? t : t + 4;
    } else {
        *row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
    }
    *col = g;
}

/* Element i = 0..3 of a lane's C/D fragment: its (row, col) in the 16x8 C/D. */
static void c_pos(int lane, int i, int *row, int *col) {
    int g = lane >> 2, t = lane % 4;
    *row = i < 2 ? g : g + 8;
    *col = t * 2 + (i & 1);
}

/* Element i of a fragment whose registers are regs[], as f32 (exact). */
static float frag_elem(sim_mma_kind kind, const uint32_t *regs, int i) {
    switch (kind) {
    case SIM_MMA_F16_M16N8K16: return sim_f16_to_f32((uint16_t)(regs[i / 2] >> (16 * (i % 2))));
    case SIM_MMA_BF16_M16N8K16: return sim_bf16_to_f32((uint16_t)(regs[i / 2] >> (16 * (i % 2))));
    case SIM_MMA_TF32_M16N8K8: return f32_from_bits(regs[i] & 0xffffe000u);   /* low 13 bits ignored */
    default: return 0.0f;
    }
}

void sim_mma(sim_mma_kind kind, const uint32_t a[32][4], const uint32_t b[32][2], const float c[32][4],
             float d[32][4]) {
    if ((unsigned)kind >= SIM_MMA_KIND_COUNT) return;
    const int K = kind == SIM_MMA_TF32_M16N8K8 ? 8 : 16;
    const int na = K / 2, nb = K / 4;   /* A and B elements per lane: 8 and 4, or 4 and 2 */
    double A[16][16], B[16][8], C[16][8];
    int row, col;
    /* gather the whole warp's operands first: d may alias c */
    for (int lane = 0; lane < 32; lane++) {
        for (int i = 0; i < na; i++) {
            a_pos(kind, lane, i, &row, &col);
            A[row][col] = frag_elem(kind, a[lane], i);
        }
        for (int i = 0; i < nb; i++) {
            b_pos(kind, lane, i, &row, &col);
            B[row][col] = frag_elem(kind, b[lane], i);
        }
        for (int i = 0; i < 4; i++) {
            c_pos(lane, i, &row, &col);
            C[row][col] = c[lane][i];
        }
    }
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            c_pos(lane, i, &row, &col);
            double s = A[row][0] * B[0][col];
            for (int k = 1; k < K; k++) s += A[row][k] * B[k][col];
            d[lane][i] = (float)(C[row][col] + s);
        }
}
