/*
 * test_sim_mma.c — checks the simulated GPU's mma.sync and cvt.rna.tf32.f32 (tests/sim/sim_mma.c).
 *
 * Build and run (standalone: no libstitch, hence its own few check macros in test.h's style):
 *   mkdir -p build/sim
 *   cc -std=c11 -O1 -I tests -I tests/sim tests/sim/sim_mma.c tests/sim/test_sim_mma.c -lm -o build/sim/test_sim_mma
 *   build/sim/test_sim_mma
 * Prints `PASS name` / `FAIL name: why` per test and a last line `N passed, N failed`; exits 1 when
 * anything failed.
 *
 * The fragment layouts here are written as the inverse of sim_mma.c's: for each matrix element,
 * which lane and which element of that lane's fragment holds it (the PTX ISA's layout figures read
 * cell by cell), so the two codings check each other. Values are decoded with ldexp from their
 * fields, not with sim_mma.c's bit conversions. Matmuls are checked exactly on values whose sums are
 * exact in f32 (any summation order gives the same bits), and within a rounding bound on wide
 * random values. Checked by mutation: swapping two A registers, two B registers, two C or D
 * elements, or the halves of A's registers in sim_mma.c each fails several tests. One class of
 * slip is invisible by construction: the same permutation of k in both A's and B's decoding (say,
 * both swapping the halves of every register) leaves every D unchanged, on any input, so it is
 * harmless as well as undetectable.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sim_mma.h"

/* ---- checks ---- */
static int n_passed, n_failed, cur_failed;
static char cur_msg[512];

#define CHECK_MSG(cond, ...)                                                                   \
    do {                                                                                       \
        if (!(cond) && !cur_failed) {                                                          \
            int n_ = snprintf(cur_msg, sizeof cur_msg, "%s:%d: ", __FILE__, __LINE__);         \
            snprintf(cur_msg + n_, sizeof cur_msg - (size_t)n_, __VA_ARGS__);                  \
            cur_failed = 1;                                                                    \
        }                                                                                      \
    } while (0)

#define RUN(fn)                                                                                \
    do {                                                                                       \
        cur_failed = 0;                                                                        \
        cur_msg[0] = 0;                                                                        \
        fn();                                                                                  \
        if (cur_failed) {                                                                      \
            printf("FAIL %s: %s\n", #fn, cur_msg);                                             \
            n_failed++;                                                                        \
        } else {                                                                               \
            printf("PASS %s\n", #fn);                                                          \
            n_passed++;                                                                        \
        }                                                                                      \
        fflush(stdout);                                                                        \
    } while (0)

/* ---- helpers ---- */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {   /* splitmix64, high half */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static float fbits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t ubits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Reference decoders, from the fields: sign, biased exponent, fraction. */
static double ref_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static double ref_bf16(uint16_t h) {
    int s = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return s ? -v : v;
}

static double ref_tf32(uint32_t r) {   /* the top 10 fraction bits only */
    int s = (int)(r >> 31), e = (int)((r >> 23) & 0xff), m = (int)((r >> 13) & 0x3ff);
    double v = e == 0 ? ldexp(m, -136) : e == 255 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 137);
    return s ? -v : v;
}

/* ---- the PTX ISA layouts, element -> (lane, fragment element) ---- */
typedef struct shape {
    sim_mma_kind kind;
    const char *name;
    int K;     /* A is 16xK, B is Kx8 */
    int epr;   /* elements per 32-bit register */
} shape;

static const shape shapes[SIM_MMA_KIND_COUNT] = {
    [SIM_MMA_F16_M16N8K16] = {SIM_MMA_F16_M16N8K16, "f16.m16n8k16", 16, 2},
    [SIM_MMA_BF16_M16N8K16] = {SIM_MMA_BF16_M16N8K16, "bf16.m16n8k16", 16, 2},
    [SIM_MMA_TF32_M16N8K8] = {SIM_MMA_TF32_M16N8K8, "tf32.m16n8k8", 8, 1},
};

/* A[m][k]: lane 4 * (row within its 8-row half) + column pair/column within its k-half;
 * element: f16/bf16 a0..a7 = (k odd) + 2 * (lower half) + 4 * (right half),
 *          tf32 a0..a3 = (lower half) + 2 * (right half). */
static void a_home(const shape *s, int m, int k, int *lane, int *e) {
    if (s->epr == 2) {
        *lane = 4 * (m % 8) + (k % 8) / 2;
        *e = k % 2 + 2 * (m / 8) + 4 * (k / 8);
    } else {
        *lane = 4 * (m % 8) + k % 4;
        *e = m / 8 + 2 * (k / 4);
    }
}

/* B[k][n]: lane 4 * n + (k's pair / k within its half); f16/bf16 b0..b3 = (k odd) + 2 * (k >= 8),
 * tf32 b0..b1 = (k >= 4). */
static void b_home(const shape *s, int k, int n, int *lane, int *e) {
    if (s->epr == 2) {
        *lane = 4 * n + (k % 8) / 2;
        *e = k % 2 + 2 * (k / 8);
    } else {
        *lane = 4 * n + k % 4;
        *e = k / 4;
    }
}

/* C[m][n] (16x8, both shapes): c0..c3 = (n odd) + 2 * (m >= 8). */
static void c_home(int m, int n, int *lane, int *e) {
    *lane = 4 * (m % 8) + n / 2;
    *e = n % 2 + 2 * (m / 8);
}

/* One warp's operands: the raw element bits (16-bit patterns for f16/bf16, b32 for tf32), their
 * values, and the per-lane registers. */
typedef struct mats {
    uint32_t abits[16][16], bbits[16][8];
    double av[16][16], bv[16][8];
    float c[16][8];
    uint32_t ra[32][4], rb[32][2];
    float rc[32][4], rd[32][4];
    float d[16][8];
} mats;

static void put(uint32_t *regs, int epr, int e, uint32_t bits) {
    if (epr == 1) regs[e] = bits;
    else regs[e / 2] |= (bits & 0xffff) << (16 * (e % 2));   /* lower-indexed element: low half */
}

static double decode(const shape *s, uint32_t bits) {
    return s->kind == SIM_MMA_F16_M16N8K16    ? ref_f16((uint16_t)bits)
           : s->kind == SIM_MMA_BF16_M16N8K16 ? ref_bf16((uint16_t)bits)
                                               : ref_tf32(bits);
}

/* abits, bbits, c filled in: decode, pack, run sim_mma, unpack into d. */
static void run_mma(const shape *s, mats *x) {
    int lane, e;
    memset(x->ra, 0, sizeof x->ra);
    memset(x->rb, 0, sizeof x->rb);
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < s->K; k++) {
            x->av[m][k] = decode(s, x->abits[m][k]);
            a_home(s, m, k, &lane, &e);
            put(x->ra[lane], s->epr, e, x->abits[m][k]);
        }
    for (int k = 0; k < s->K; k++)
        for (int n = 0; n < 8; n++) {
            x->bv[k][n] = decode(s, x->bbits[k][n]);
            b_home(s, k, n, &lane, &e);
            put(x->rb[lane], s->epr, e, x->bbits[k][n]);
        }
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            c_home(m, n, &lane, &e);
            x->rc[lane][e] = x->c[m][n];
        }
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) x->rd[l][i] = fbits(0x7fbadbadu);   /* poison: a NaN */
    sim_mma(s->kind, (const uint32_t(*)[4])x->ra, (const uint32_t(*)[2])x->rb, (const float(*)[4])x->rc, x->rd);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            c_home(m, n, &lane, &e);
            x->d[m][n] = x->rd[lane][e];
        }
}

/* A random element: sign, exponent in [elo, ehi] (unbiased), the top `frac` fraction bits random
 * (the rest zero; for tf32 the 13 ignored bits get garbage). One in 16 is zero when zeros. */
static uint32_t rand_elem(const shape *s, int elo, int ehi, int frac, int zeros) {
    uint32_t sign = rnd() & 1, e = (uint32_t)(elo + (int)(rnd() % (uint32_t)(ehi - elo + 1)));
    if (zeros && rnd() % 16 == 0) return sign << (s->epr == 2 ? 15 : 31);
    switch (s->kind) {
    case SIM_MMA_F16_M16N8K16: return sign << 15 | (e + 15) << 10 | (rnd() % (1u << frac)) << (10 - frac);
    case SIM_MMA_BF16_M16N8K16: return sign << 15 | (e + 127) << 7 | (rnd() % (1u << frac)) << (7 - frac);
    default: return sign << 31 | (e + 127) << 23 | (rnd() % (1u << frac)) << (23 - frac) | (rnd() & 0x1fff);
    }
}

/* ---- tests ---- */

/* The test's own layouts are bijections: every (lane, element) holds exactly one matrix element. */
static void layouts_are_bijections(void) {
    for (int kd = 0; kd < SIM_MMA_KIND_COUNT; kd++) {
        const shape *s = &shapes[kd];
        int seen_a[32][8] = {{0}}, seen_b[32][4] = {{0}}, seen_c[32][4] = {{0}}, lane, e;
        for (int m = 0; m < 16; m++)
            for (int k = 0; k < s->K; k++) {
                a_home(s, m, k, &lane, &e);
                CHECK_MSG(lane >= 0 && lane < 32 && e >= 0 && e < 2 * s->K / 4, "%s A", s->name);
                seen_a[lane][e]++;
            }
        for (int k = 0; k < s->K; k++)
            for (int n = 0; n < 8; n++) {
                b_home(s, k, n, &lane, &e);
                CHECK_MSG(lane >= 0 && lane < 32 && e >= 0 && e < s->K / 4, "%s B", s->name);
                seen_b[lane][e]++;
            }
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                c_home(m, n, &lane, &e);
                seen_c[lane][e]++;
            }
        for (int l = 0; l < 32; l++) {
            for (int i = 0; i < s->K / 2; i++) CHECK_MSG(seen_a[l][i] == 1, "%s A lane %d e %d", s->name, l, i);
            for (int i = 0; i < s->K / 4; i++) CHECK_MSG(seen_b[l][i] == 1, "%s B lane %d e %d", s->name, l, i);
            for (int i = 0; i < 4; i++) CHECK_MSG(seen_c[l][i] == 1, "C lane %d e %d", l, i);
        }
    }
}

/* Values with 4 significant bits and exponents in [-2, 2]: every partial sum is exact in f32, so
 * D must equal the reference bit for bit whatever the summation order. Catches any layout slip. */
static void exact_kind(sim_mma_kind kind) {
    const shape *s = &shapes[kind];
    static mats x;
    for (int trial = 0; trial < 50; trial++) {
        for (int m = 0; m < 16; m++)
            for (int k = 0; k < s->K; k++) x.abits[m][k] = rand_elem(s, -2, 2, 3, 1);
        for (int k = 0; k < s->K; k++)
            for (int n = 0; n < 8; n++) x.bbits[k][n] = rand_elem(s, -2, 2, 3, 1);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) x.c[m][n] = (float)((int)(rnd() % 2001) - 1000) / 8.0f;
        run_mma(s, &x);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                double ref = x.c[m][n];
                for (int k = 0; k < s->K; k++) ref += x.av[m][k] * x.bv[k][n];
                CHECK_MSG(x.d[m][n] == (float)ref, "%s trial %d: D[%d][%d] = %.9g, expected %.9g", s->name, trial, m,
                          n, x.d[m][n], ref);
            }
    }
}

static void mma_exact_f16(void) { exact_kind(SIM_MMA_F16_M16N8K16); }
static void mma_exact_bf16(void) { exact_kind(SIM_MMA_BF16_M16N8K16); }
static void mma_exact_tf32(void) { exact_kind(SIM_MMA_TF32_M16N8K8); }

/* Wide random values (f16: the whole normal range plus subnormals): within one f32 rounding of the
 * magnitude of the terms, against a long double sum in decreasing k. */
static void random_kind(sim_mma_kind kind) {
    const shape *s = &shapes[kind];
    static mats x;
    int elo = kind == SIM_MMA_F16_M16N8K16 ? -15 : -30, ehi = kind == SIM_MMA_F16_M16N8K16 ? 15 : 30;
    int frac = kind == SIM_MMA_F16_M16N8K16 ? 10 : kind == SIM_MMA_BF16_M16N8K16 ? 7 : 10;
    for (int trial = 0; trial < 200; trial++) {
        /* exponent -15 gives the f16 exponent field 0: subnormal halves */
        for (int m = 0; m < 16; m++)
            for (int k = 0; k < s->K; k++) x.abits[m][k] = rand_elem(s, elo, ehi, frac, 1);
        for (int k = 0; k < s->K; k++)
            for (int n = 0; n < 8; n++) x.bbits[k][n] = rand_elem(s, elo, ehi, frac, 1);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {   /* C: any f32 with exponent in [-20, 20] */
                uint32_t e = (uint32_t)(127 + (int)(rnd() % 41) - 20);
                x.c[m][n] = fbits((rnd() & 0x80000000u) | e << 23 | (rnd() & 0x7fffff));
            }
        run_mma(s, &x);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                long double ref = x.c[m][n], mag = fabsl((long double)x.c[m][n]);
                for (int k = s->K - 1; k >= 0; k--) {
                    ref += (long double)x.av[m][k] * x.bv[k][n];
                    mag += fabsl((long double)x.av[m][k] * x.bv[k][n]);
                }
                double err = fabs((double)x.d[m][n] - (double)ref), tol = ldexp((double)mag, -23) + FLT_TRUE_MIN;
                CHECK_MSG(err <= tol, "%s trial %d: D[%d][%d] = %.9g, expected %.9Lg", s->name, trial, m, n, x.d[m][n],
                          ref);
            }
    }
}

static void mma_random_f16(void) { random_kind(SIM_MMA_F16_M16N8K16); }
static void mma_random_bf16(void) { random_kind(SIM_MMA_BF16_M16N8K16); }
static void mma_random_tf32(void) { random_kind(SIM_MMA_TF32_M16N8K8); }

/* One nonzero product per output: D[m][n] = C[m][n] + A[m][m % K] * B[m % K][n], probing every
 * element's position on its own (a misplaced element turns up as a wrong single term). */
static void mma_single_terms(void) {
    for (int kd = 0; kd < SIM_MMA_KIND_COUNT; kd++) {
        const shape *s = &shapes[kd];
        static mats x;
        for (int kk = 0; kk < s->K; kk++) {   /* the one k used */
            memset(x.abits, 0, sizeof x.abits);
            memset(x.bbits, 0, sizeof x.bbits);
            for (int m = 0; m < 16; m++) x.abits[m][kk] = rand_elem(s, 0, 3, 3, 0);
            for (int n = 0; n < 8; n++) x.bbits[kk][n] = rand_elem(s, 0, 3, 3, 0);
            for (int m = 0; m < 16; m++)
                for (int n = 0; n < 8; n++) x.c[m][n] = (float)(m * 8 + n);
            run_mma(s, &x);
            for (int m = 0; m < 16; m++)
                for (int n = 0; n < 8; n++) {
                    double ref = x.c[m][n] + x.av[m][kk] * x.bv[kk][n];
                    CHECK_MSG(x.d[m][n] == (float)ref, "%s k=%d: D[%d][%d] = %.9g, expected %.9g", s->name, kk, m, n,
                              x.d[m][n], ref);
                }
        }
    }
}

/* d may be the accumulator array itself (acc = mma(a, b, acc)). */
static void mma_in_place(void) {
    const shape *s = &shapes[SIM_MMA_F16_M16N8K16];
    static mats x;
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++) x.abits[m][k] = rand_elem(s, -2, 2, 3, 1);
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 8; n++) x.bbits[k][n] = rand_elem(s, -2, 2, 3, 1);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) x.c[m][n] = (float)(m - n);
    run_mma(s, &x);   /* out of place: the reference */
    float acc[32][4];
    memcpy(acc, x.rc, sizeof acc);
    sim_mma(s->kind, (const uint32_t(*)[4])x.ra, (const uint32_t(*)[2])x.rb, (const float(*)[4])acc, acc);
    CHECK_MSG(!memcmp(acc, x.rd, sizeof acc), "in-place result differs from out-of-place");
}

/* Inf, NaN, subnormal halves and signed zeros through the mma path. A NaN anywhere in column n of
 * B reaches all of column n of D (0 * NaN = NaN); one in row m of A, all of row m. */
static void mma_specials(void) {
    for (int kd = 0; kd < SIM_MMA_KIND_COUNT; kd++) {
        const shape *s = &shapes[kd];
        static mats x;
        int f16 = s->kind == SIM_MMA_F16_M16N8K16, bf16 = s->kind == SIM_MMA_BF16_M16N8K16, K = s->K;
        uint32_t one = f16 ? 0x3c00 : bf16 ? 0x3f80 : 0x3f800000;
        uint32_t inf = f16 ? 0x7c00 : bf16 ? 0x7f80 : 0x7f800000;
        uint32_t nan = f16 ? 0x7e00 : bf16 ? 0x7fc0 : 0x7fc00000;
        uint32_t sub = f16 || bf16 ? 0x0001 : 0x00002000;   /* the smallest subnormal */
        uint32_t neg = s->epr == 2 ? 0x8000 : 0x80000000;   /* the sign bit */
        memset(x.abits, 0, sizeof x.abits);
        memset(x.bbits, 0, sizeof x.bbits);
        memset(x.c, 0, sizeof x.c);
        x.abits[3][K - 3] = inf;   /* row 3: Inf * B[K-3][n]: +-Inf, NaN where that is 0 */
        for (int n = 0; n < 8; n++) x.bbits[K - 3][n] = n == 2 ? 0 : n == 5 ? (one | neg) : one;
        x.bbits[1][6] = nan;       /* column 6: NaN */
        x.abits[7][2] = nan;       /* row 7: NaN */
        x.abits[9][K - 1] = sub;   /* D[9][0]: subnormal * subnormal */
        x.bbits[K - 1][0] = sub;
        run_mma(s, &x);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                float v = x.d[m][n];
                if (n == 6 || m == 7) CHECK_MSG(isnan(v), "%s: D[%d][%d] = %g, expected NaN", s->name, m, n, v);
                else if (m == 3 && n == 2) CHECK_MSG(isnan(v), "%s: Inf * 0 gave %g", s->name, v);
                else if (m == 3) CHECK_MSG(isinf(v) && (v < 0) == (n == 5), "%s: D[3][%d] = %g", s->name, n, v);
                else if (m == 9 && n == 0) {
                    /* f16: 2^-24 * 2^-24 = 2^-48, an f32 normal; bf16 2^-266 and tf32 2^-272: 0 */
                    float want = f16 ? ldexpf(1, -48) : 0.0f;
                    CHECK_MSG(v == want && !signbit(v), "%s: subnormal product gave %g, expected %g", s->name, v,
                              want);
                } else CHECK_MSG(v == 0 && !signbit(v), "%s: D[%d][%d] = %g, expected +0", s->name, m, n, v);
            }
        /* all terms -0 (-0 * +0) and C = -0: D = -0 (the sum starts from the first product) */
        for (int m = 0; m < 16; m++)
            for (int k = 0; k < K; k++) x.abits[m][k] = neg;
        memset(x.bbits, 0, sizeof x.bbits);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) x.c[m][n] = -0.0f;
        run_mma(s, &x);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++)
                CHECK_MSG(x.d[m][n] == 0 && signbit(x.d[m][n]), "%s: -0 sum gave D[%d][%d] = %g", s->name, m, n,
                          x.d[m][n]);
    }
}

/* tf32: the 13 low bits of a register are ignored, whatever they hold. */
static void mma_tf32_ignores_low_bits(void) {
    const shape *s = &shapes[SIM_MMA_TF32_M16N8K8];
    static mats x, y;
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 8; k++) x.abits[m][k] = rand_elem(s, -5, 5, 10, 0);
    for (int k = 0; k < 8; k++)
        for (int n = 0; n < 8; n++) x.bbits[k][n] = rand_elem(s, -5, 5, 10, 0);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) x.c[m][n] = 1.0f;
    y = x;
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 8; k++) y.abits[m][k] &= 0xffffe000u;
    for (int k = 0; k < 8; k++)
        for (int n = 0; n < 8; n++) y.bbits[k][n] = (y.bbits[k][n] & 0xffffe000u) | 0x1fff;
    run_mma(s, &x);
    run_mma(s, &y);
    CHECK_MSG(!memcmp(x.d, y.d, sizeof x.d), "low 13 bits changed the result");
}

/* Every f16 and bf16 bit pattern widens exactly (NaNs: still NaN, sign and payload kept). */
static void half_conversions(void) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = sim_f16_to_f32((uint16_t)h), g = sim_bf16_to_f32((uint16_t)h);
        double rf = ref_f16((uint16_t)h), rg = ref_bf16((uint16_t)h);
        if (isnan(rf))
            CHECK_MSG(isnan(f) && ubits(f) >> 31 == h >> 15 && (ubits(f) >> 13 & 0x3ff) == (h & 0x3ff),
                      "f16 %04x -> %08x", (unsigned)h, (unsigned)ubits(f));
        else CHECK_MSG(f == rf && !signbit(f) == !(h >> 15), "f16 %04x -> %.9g, expected %.9g", (unsigned)h, f, rf);
        if (isnan(rg)) CHECK_MSG(isnan(g) && ubits(g) == h << 16, "bf16 %04x -> %08x", (unsigned)h, (unsigned)ubits(g));
        else CHECK_MSG(g == rg && !signbit(g) == !(h >> 15), "bf16 %04x -> %.9g, expected %.9g", (unsigned)h, g, rg);
    }
}

/* cvt.rna.tf32.f32 at the edges: ties away from zero (where ties-to-even would differ), carries
 * into the exponent, overflow, Inf, NaN, negatives, subnormals, zeros. */
static void cvt_tf32_edges(void) {
    static const struct {
        uint32_t in, out;
    } cases[] = {
        {0x3f800000, 0x3f800000},   /* 1.0 */
        {0x3f802000, 0x3f802000},   /* 1 + 2^-10: already tf32 */
        {0x3f800fff, 0x3f800000},   /* just below half an ulp: down */
        {0x3f801000, 0x3f802000},   /* tie, even tf32 mantissa: away (ties-to-even would go down) */
        {0x3f801001, 0x3f802000},   /* just above the tie: up */
        {0x3f803000, 0x3f804000},   /* tie, odd tf32 mantissa: away */
        {0xbf801000, 0xbf802000},   /* negative tie: away from zero, i.e. down */
        {0xbf800fff, 0xbf800000},   /* negative, below the tie: toward zero */
        {0x3ffff000, 0x40000000},   /* tie at 2 - 2^-11: carries into the exponent, 2.0 */
        {0x3fffffff, 0x40000000},   /* 2 - 2^-23: carries into the exponent */
        {0xbfffffff, 0xc0000000},   /* the same, negative */
        {0x7f7fe000, 0x7f7fe000},   /* largest finite tf32 */
        {0x7f7fefff, 0x7f7fe000},   /* below its tie: stays finite */
        {0x7f7ff000, 0x7f800000},   /* tie above it: Inf */
        {0x7f7fffff, 0x7f800000},   /* FLT_MAX: Inf */
        {0xff7fffff, 0xff800000},   /* -FLT_MAX: -Inf */
        {0x7f800000, 0x7f800000},   /* Inf */
        {0xff800000, 0xff800000},   /* -Inf */
        {0x7fc00000, 0x7fc00000},   /* quiet NaN */
        {0xffc00000, 0xffc00000},   /* negative quiet NaN */
        {0x00000000, 0x00000000},   /* +0 */
        {0x80000000, 0x80000000},   /* -0 */
        {0x00000001, 0x00000000},   /* smallest subnormal: to 0 */
        {0x00000fff, 0x00000000},   /* below half of tf32's subnormal ulp 2^-136 */
        {0x00001000, 0x00002000},   /* subnormal tie: away */
        {0x80001000, 0x80002000},   /* negative subnormal tie: away */
        {0x007ff000, 0x00800000},   /* largest subnormal tie: carries to the smallest normal */
        {0x00800000, 0x00800000},   /* smallest normal */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t got = sim_cvt_rna_tf32(fbits(cases[i].in));
        CHECK_MSG(got == cases[i].out, "cvt(%08x) = %08x, expected %08x", (unsigned)cases[i].in, (unsigned)got,
                  (unsigned)cases[i].out);
    }
    /* NaNs whose payload lies only in the dropped bits stay NaN (not Inf), with their sign */
    static const uint32_t nans[] = {0x7f800001, 0xff800001, 0x7f801fff, 0x7fbfffff};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint32_t got = sim_cvt_rna_tf32(fbits(nans[i]));
        CHECK_MSG(isnan(fbits(got)) && (got & 0x1fff) == 0 && got >> 31 == nans[i] >> 31, "cvt(NaN %08x) = %08x",
                  (unsigned)nans[i], (unsigned)got);
    }
}

/* Random finite floats against an independent rounding: |x| / ulp rounded half away in double. */
static void cvt_tf32_random(void) {
    for (int i = 0; i < 200000; i++) {
        uint32_t u = rnd();
        if ((u & 0x7f800000u) == 0x7f800000u) continue;
        float x = fbits(u);
        int e = (int)((u >> 23) & 0xff);
        double ulp = ldexp(1, (e ? e : 1) - 137);   /* tf32 ulp: 2^(exponent - 10) */
        double want = floor(fabs((double)x) / ulp + 0.5) * ulp;
        if (want > ldexp(2047, 117)) want = INFINITY;   /* beyond the largest finite tf32 */
        if (signbit(x)) want = -want;
        uint32_t got = sim_cvt_rna_tf32(x);
        CHECK_MSG((got & 0x1fff) == 0 && fbits(got) == (float)want && !signbit(fbits(got)) == !signbit(x),
                  "cvt(%08x) = %08x, expected %.9g", (unsigned)u, (unsigned)got, want);
    }
}

int main(void) {
    RUN(layouts_are_bijections);
    RUN(mma_exact_f16);
    RUN(mma_exact_bf16);
    RUN(mma_exact_tf32);
    RUN(mma_random_f16);
    RUN(mma_random_bf16);
    RUN(mma_random_tf32);
    RUN(mma_single_terms);
    RUN(mma_in_place);
    RUN(mma_specials);
    RUN(mma_tf32_ignores_low_bits);
    RUN(half_conversions);
    RUN(cvt_tf32_edges);
    RUN(cvt_tf32_random);
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
