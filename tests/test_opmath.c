/*
 * test_opmath.c — the prelude's own transcendental functions (base/opmath.h), which the
 * interpreter, the C kernels and the CUDA kernels all run so that every device gives the same
 * bits: their accuracy against libm's long double functions (64-bit significands, so the
 * reference is good to about 2^-11 of a double ulp), their special cases (C99 Annex F for pow),
 * and that the kernels really compute those bits.
 *
 * Accuracy: every f32 and f64 function over random bit patterns (all finite values: subnormals,
 * huge sin/cos arguments; and inf, NaN), ranges where each function does its work, the inputs
 * closest to multiples of pi/2, and fixed edges; the worst error in ulps must stay under the
 * limits of docs/ops.md (f32 within 1-2 ulp, f64 within a few). Each function's worst error is
 * printed (`  sin f32: 0.50 ulp max over 1000000 inputs (x = ...)`).
 *
 * Same bits: the same inputs through st_<op> on the default device, once eager (the interpreter)
 * and once compiled (jit_min 0: the C kernel at -O3 -march=native, vectorized; under
 * ST_DEVICE=cuda the NVRTC kernel), must equal this file's direct calls bit for bit (NaN: any
 * NaN). `make test-gpu` runs this program with ST_DEVICE=cuda.
 *
 *   test_opmath [--scale K]    K times the default number of random inputs (a longer run)
 */
#include "test.h"
#include "base/opmath.h"

#include <float.h>
#include <stdlib.h>

static long scale = 1;

/* ---- inputs: a splitmix64 stream ---- */
static uint64_t rs = 0x5eed;
static uint64_t rnd(void) {
    uint64_t z = (rs += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static double unit(void) { return (double)(rnd() >> 11) * 0x1p-53; }
static double uni(double lo, double hi) { return lo + (hi - lo) * unit(); }
static double logu(double lo, double hi) { return exp(uni(log(lo), log(hi))); } /* lo > 0 */
static double sgn(double v) { return (rnd() & 1) ? -v : v; }
static float fbits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static double dbits(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }

/* ---- errors in ulps of the result type, against a long double reference ----
 * inf counts as 2^128 (2^1024), so a result that overflows one ulp early is 1 ulp off, not
 * infinitely; NaN must match NaN. */
static double ulp_err(long double got, long double want, int mant, int emin, long double big) {
    if (isnan(want)) return isnan(got) ? 0 : INFINITY;
    if (isnan(got)) return INFINITY;
    if (isinf(got)) got = got > 0 ? big : -big;
    if (isinf(want)) want = want > 0 ? big : -big;
    if (got == want) return 0;
    int e;
    frexpl(fabsl(want), &e);                           /* |want| in [2^(e-1), 2^e) */
    e = e - 1 < emin ? emin : e - 1;
    long double ulp = ldexpl(1.0L, e - mant);
    return (double)(fabsl(got - want) / ulp);
}
static double ulpf(float got, long double want) {
    if (fabsl(want) > 0x1p128L) want = want > 0 ? INFINITY : -INFINITY;
    return ulp_err(got, want, 23, -126, 0x1p128L);
}
static double ulpd(double got, long double want) {
    if (fabsl(want) > 0x1p1024L) want = want > 0 ? INFINITY : -INFINITY;
    return ulp_err(got, want, 52, -1022, 0x1p1024L);
}

/* the worst error of one function */
typedef struct {
    const char *name;
    double limit, worst, at_x, at_y;
    long n;
} acc;
static void note(acc *a, double e, double x, double y) {
    a->n++;
    if (e > a->worst || (isnan(e) && !isnan(a->worst))) { a->worst = e; a->at_x = x; a->at_y = y; }
}
static void report(acc *a) {
    printf("  %-10s %7.3f ulp max over %ld inputs (x = %.17g", a->name, a->worst, a->n, a->at_x);
    if (!isnan(a->at_y)) printf(", y = %.17g", a->at_y);
    printf(")\n");
    CHECK_MSG(a->worst <= a->limit, "%s: %.3f ulp (limit %.1f) at x = %a, y = %a", a->name, a->worst, a->limit,
              a->at_x, a->at_y);
}

/* ---- the functions under test and their references ---- */
typedef struct {
    const char *name;
    float (*f32)(float);
    double (*f64)(double);
    long double (*ref)(long double);
    double lim32, lim64;
    double lo, hi;      /* the range the function works in (uniform, random sign if lo < 0) */
    int logscale;       /* the range is log-uniform with a random sign */
} unary;
static const unary unaries[] = {
    {"sin", st_sinf_, st_sind_, sinl, 1, 1, -20, 20, 0},
    {"cos", st_cosf_, st_cosd_, cosl, 1, 1, -20, 20, 0},
    {"sin_big", st_sinf_, st_sind_, sinl, 1, 1, 1, 1e300, 1},
    {"cos_big", st_cosf_, st_cosd_, cosl, 1, 1, 1, 1e300, 1},
    {"exp", st_expf_, st_expd_, expl, 2, 2, -750, 710, 0},
    {"log", st_logf_, st_logd_, logl, 2, 1, 1e-320, 1e308, 1},
    {"log_near1", st_logf_, st_logd_, logl, 2, 1, 0.5, 2, 0},
    {"tanh", st_tanhf_, st_tanhd_, tanhl, 3, 3, -25, 25, 0},
    {"expm1", st_expm1f_, st_expm1d_, expm1l, 3, 2, -50, 710, 0},
    {"log1p", st_log1pf_, st_log1pd_, log1pl, 3, 2, -1, 1e30, 0},
    {"log1p_small", st_log1pf_, st_log1pd_, log1pl, 3, 2, 1e-30, 1, 1},
    {"erf", st_erff_, st_erfd_, erfl, 3, 2, -7, 7, 0},
};
enum { NUNARY = (int)(sizeof unaries / sizeof unaries[0]) };

/* The floats and doubles nearest to k pi/2 (the hardest arguments of a reduction), for k up to
 * 2^20, and k pi/2 scaled by powers of 2 up to the largest exponents. */
static double near_pio2(void) {
    long double k = (long double)(rnd() % (1u << 20)) + 1;
    long double v = k * 1.57079632679489661923132169163975144L;
    if (rnd() & 1) v = ldexpl(v, (int)(rnd() % 1000));
    return (double)sgn((double)v);
}

/* Fixed edge inputs. */
static const double edges[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 0x1p-1074, -0x1p-1074, 0x1p-1022, 0x1.fffffffffffffp-1023,
    0x1p-149, 0x1p-126, 0x1.fffffcp-127, 0x1.fffffep127, DBL_MAX, -DBL_MAX, 1e-300, 1e300, INFINITY, -INFINITY, NAN,
    1.5707963267948966, 3.1415926535897931, 0.78539816339744828, 1e22, 0x1p19, 0x1p20, 0x1p24, 0x1p63,
    6381956970095103.0 * 0x1p797, 5.319372648326541e+255, 2.2e-16, -2.2e-16, 0.875, 6.0, 5.92, 22.0, 88.72,
    -103.9, 709.78, -745.13, -708.5, 0.6931471805599453, 1e-8, -0.999999, -1e-30, 1e-30, 1.0000001, 0.9999999};
enum { NEDGES = (int)(sizeof edges / sizeof edges[0]) };

/* One input for function u: a fixed edge, a random bit pattern, near k pi/2, or its range. */
static double draw(const unary *u, int f64, long i) {
    if (i < NEDGES) return edges[i];
    int k = (int)(rnd() % 8);
    if (k == 0) return f64 ? dbits(rnd()) : fbits((uint32_t)rnd());
    if (k == 1) return near_pio2();
    if (u->logscale) return u->lo < 0 ? sgn(logu(-u->lo, u->hi)) : logu(u->lo, u->hi);
    return uni(u->lo, u->hi);
}

TEST(unary_accuracy) {
    for (int k = 0; k < NUNARY; k++) {
        const unary *u = &unaries[k];
        char n32[40], n64[40];
        snprintf(n32, sizeof n32, "%s f32", u->name);
        snprintf(n64, sizeof n64, "%s f64", u->name);
        acc a32 = {n32, u->lim32, 0, 0, NAN, 0}, a64 = {n64, u->lim64, 0, 0, NAN, 0};
        long n = 400000 * scale;
        for (long i = 0; i < n; i++) {
            float xf = (float)draw(u, 0, i);
            note(&a32, ulpf(u->f32(xf), u->ref(xf)), xf, NAN);
        }
        for (long i = 0; i < n / 2; i++) {
            double xd = draw(u, 1, i);
            note(&a64, ulpd(u->f64(xd), u->ref(xd)), xd, NAN);
        }
        report(&a32);
        report(&a64);
    }
}

/* The float sin and cos over a dense sweep of every exponent: 2^16 consecutive floats after
 * each of 2^12 random starts (every binade of the large-argument reduction is visited). */
TEST(sincos_f32_sweep) {
    acc s = {"sin f32 sweep", 1, 0, 0, NAN, 0}, c = {"cos f32 sweep", 1, 0, 0, NAN, 0};
    for (long b = 0; b < 4096 * scale; b++) {
        uint32_t u0 = (uint32_t)rnd() & 0x7f7f0000u;
        for (uint32_t i = 0; i < 256; i++) {
            float x = fbits(u0 + i * 251u);
            long double xl = x;
            note(&s, ulpf(st_sinf_(x), sinl(xl)), x, NAN);
            note(&c, ulpf(st_cosf_(x), cosl(xl)), x, NAN);
        }
    }
    report(&s);
    report(&c);
}

/* exp f32 over every float of [-104, 89] (below, 0 or the smallest subnormal; above, inf), against
 * double exp: 2.2e9 inputs, about a minute, so only with --exp-every-float (docs/api.md's table
 * quotes it: 1.010 ulp). */
static int exp_every_float;
TEST(exp_f32_every_float) {
    acc a = {"exp f32 every float", 1.1, 0, 0, NAN, 0};
    for (uint64_t u = 0; u <= 0xffffffffu; u++) {
        float x = fbits((uint32_t)u);
        if (!(x >= -104.0f && x <= 89.0f)) continue;
        note(&a, ulpf(st_expf_(x), (long double)exp((double)x)), x, NAN);
    }
    report(&a);
}

/* erf f32 over every float of [0, 4.5] (erf is odd and computed from |x|; above 4.5 it is 1),
 * against double erf: 1.1e9 inputs, about 35 s, so only with --erf-every-float (docs/api.md's
 * table quotes it: 2.762 ulp). */
static int erf_every_float;
TEST(erf_f32_every_float) {
    acc a = {"erf f32 every float", 2.8, 0, 0, NAN, 0};
    for (uint32_t u = 0; u <= 0x7f800000u; u++) {
        float x = fbits(u);
        if (!(x <= 4.5f)) break;
        note(&a, ulpf(st_erff_(x), (long double)erf((double)x)), x, NAN);
    }
    report(&a);
}

/* gelu_grad f32 (GELU's backward, Phi(x) + x phi(x)) on every 128th float of [-16, 16] and the
 * edges: its erf takes the exp it shares with the x phi(x) term, and must give st_erff_'s bits
 * (the shared exp is the same float wherever erf's large branch uses it); the whole result within
 * an absolute 2^-22 of the double formula (the result is O(1) and crosses 0 near x = -0.75, so
 * relative ulps say nothing there). */
TEST(gelu_grad_f32) {   /* and f64: 4 million random inputs in [-16, 16], within 1e-15 absolute */
    const long double c = 0.398942280401432678L;
    double worst = 0, worst_x = 0;
    long n = 0, bad = 0;
    for (int sg = 0; sg < 2; sg++)
        for (uint32_t u = 0; u <= 0x41800000u; u += 128) {   /* |x| <= 16 */
            float x = fbits(u | (sg ? 0x80000000u : 0));
            float t = x * 0.707106781186547524f, e = st_expf_(-(t * t));
            float want = 0.5f * (1.0f + st_erff_(t)) + (e == 0.0f ? 0.0f : x * e * 0.398942280401432678f);
            float got = st_gelu_gradf_(x);
            if (memcmp(&got, &want, sizeof got)) {
                if (bad++ < 5) fprintf(stderr, "  gelu_grad(%.9g) = %.9g, erf composed: %.9g\n", x, got, want);
            }
            long double r = 0.5L * (1 + erfl((long double)x / sqrtl(2.0L))) + x * expl(-0.5L * x * x) * c;
            double d = fabs((double)((long double)got - r));
            if (d > worst) worst = d, worst_x = x;
            n++;
        }
    const float edge[] = {INFINITY, -INFINITY, 0.0f, -0.0f, 100.0f, -100.0f};
    const float edge_want[] = {1.0f, 0.0f, 0.5f, 0.5f, 1.0f, 0.0f};
    for (int i = 0; i < 6; i++) CHECK_MSG(st_gelu_gradf_(edge[i]) == edge_want[i], "gelu_grad(%g) = %g, want %g", edge[i], st_gelu_gradf_(edge[i]), edge_want[i]);
    CHECK(isnan(st_gelu_gradf_(NAN)) && isnan(st_gelu_gradd_(NAN)));
    CHECK(st_gelu_gradd_(INFINITY) == 1.0 && st_gelu_gradd_(-INFINITY) == 0.0);
    double worst64 = 0, worst64_x = 0;
    for (long i = 0; i < 4000000; i++) {   /* f64: random in [-16, 16] */
        double x = uni(-16, 16);
        long double r = 0.5L * (1 + erfl((long double)x / sqrtl(2.0L))) + x * expl(-0.5L * x * x) * c;
        double d = fabs((double)((long double)st_gelu_gradd_(x) - r));
        if (d > worst64) worst64 = d, worst64_x = x;
    }
    printf("  gelu_grad f64: max abs error %.3g at %.17g\n", worst64, worst64_x);
    CHECK_MSG(worst64 <= 1e-15, "f64 max abs error %.3g at %.17g", worst64, worst64_x);
    printf("  gelu_grad f32: %ld inputs, %ld differ from erf composed, max abs error %.3g at %.9g\n", n, bad, worst, worst_x);
    CHECK_MSG(bad == 0, "%ld results differ from 0.5 (1 + st_erff_(t)) + x phi(x)", bad);
    CHECK_MSG(worst <= 0x1p-22, "max abs error %.3g at %.9g", worst, worst_x);
}

/* pow: x over all magnitudes with y keeping the result near the finite range; x near 1 with
 * big y; negative x with integer y; integer powers; random bit patterns for both. */
static void pow_pair(int f64, long i, double *x, double *y) {
    int k = (int)(i % 6);
    double lx;
    switch (k) {
    case 0: /* any magnitude, result within range (and a little beyond) */
        *x = f64 ? logu(0x1p-1074, 0x1p1023) : logu(0x1p-149, 0x1p127);
        lx = log2(*x);
        *y = lx == 0 ? uni(-10, 10) : uni(-1.1, 1.1) * (f64 ? 1075 : 150) / fabs(lx);
        break;
    case 1: /* x near 1, y large */
        *x = 1 + sgn(logu(1e-16, 1e-2));
        *y = sgn(logu(1, 1e6));
        break;
    case 2: /* negative x, integer y */
        *x = -logu(1e-3, 1e3);
        *y = (double)((int64_t)(rnd() % 161) - 80);
        break;
    case 3: /* small integer and half-integer powers */
        *x = uni(-10, 10);
        *y = (double)((int64_t)(rnd() % 13) - 6) * 0.5;
        break;
    case 4: /* the ops.def domain */
        *x = uni(0.5, 2);
        *y = uni(-4, 4);
        break;
    default:
        *x = f64 ? dbits(rnd()) : fbits((uint32_t)rnd());
        *y = f64 ? dbits(rnd()) : fbits((uint32_t)rnd());
        if (rnd() & 1) *y = uni(-3, 3);
        break;
    }
}
TEST(pow_accuracy) {
    acc a32 = {"pow f32", 1, 0, 0, NAN, 0}, a64 = {"pow f64", 2, 0, 0, NAN, 0};
    for (long i = 0; i < 1000000 * scale; i++) {
        double x, y;
        pow_pair(0, i, &x, &y);
        float xf = (float)x, yf = (float)y;
        note(&a32, ulpf(st_powf_(xf, yf), powl(xf, yf)), xf, yf);
    }
    for (long i = 0; i < 500000 * scale; i++) {
        double x, y;
        pow_pair(1, i, &x, &y);
        note(&a64, ulpd(st_powd_(x, y), powl(x, y)), x, y);
    }
    report(&a32);
    report(&a64);
}

/* ---- special cases ---- */
/* same value and, for zeros, the same sign; NaN matches NaN */
static int same(double got, double want) {
    if (isnan(want)) return isnan(got);
    return got == want && signbit(got) == signbit(want);
}
TEST(pow_special) {
    /* C99 Annex F.9.4.4, both types: {x, y, pow(x, y)} */
    static const double c[][3] = {
        {NAN, 0.0, 1}, {NAN, -0.0, 1}, {INFINITY, 0.0, 1}, {-3.0, 0.0, 1}, {0.0, 0.0, 1},
        {1.0, NAN, 1}, {1.0, INFINITY, 1}, {1.0, -INFINITY, 1}, {1.0, 12345.5, 1},
        {-1.0, INFINITY, 1}, {-1.0, -INFINITY, 1}, {-1.0, 3.0, -1}, {-1.0, 4.0, 1}, {-1.0, 0.5, NAN},
        {0.0, -3.0, INFINITY}, {-0.0, -3.0, -INFINITY}, {0.0, -2.0, INFINITY}, {-0.0, -2.0, INFINITY},
        {-0.0, -0.5, INFINITY}, {-0.0, -INFINITY, INFINITY}, {0.0, -INFINITY, INFINITY},
        {0.0, 3.0, 0.0}, {-0.0, 3.0, -0.0}, {-0.0, 2.0, 0.0}, {-0.0, 0.5, 0.0}, {-0.0, INFINITY, 0.0},
        {0.5, -INFINITY, INFINITY}, {-0.5, -INFINITY, INFINITY}, {2.0, -INFINITY, 0.0}, {-2.0, -INFINITY, 0.0},
        {0.5, INFINITY, 0.0}, {-0.5, INFINITY, 0.0}, {2.0, INFINITY, INFINITY}, {-2.0, INFINITY, INFINITY},
        {-INFINITY, -3.0, -0.0}, {-INFINITY, -2.0, 0.0}, {-INFINITY, -0.5, 0.0}, {-INFINITY, 3.0, -INFINITY},
        {-INFINITY, 2.0, INFINITY}, {-INFINITY, 0.5, INFINITY}, {INFINITY, -1.0, 0.0}, {INFINITY, 0.5, INFINITY},
        {-8.0, 1.0 / 3, NAN}, {-2.0, 3.0, -8.0}, {-2.0, -3.0, -0.125}, {-2.0, 2.0, 4.0},
        {NAN, 1.0, NAN}, {2.0, NAN, NAN}, {-1.0, NAN, NAN}, {0.0, NAN, NAN},
        {10.0, 400.0, INFINITY}, {10.0, -400.0, 0.0}, {-10.0, 401.0, -INFINITY}, {-10.0, -401.0, -0.0},
        {2.0, -1074.0, 0x1p-1074}, {2.0, 1023.0, 0x1p1023}, {3.0, 2.0, 9.0}, {4.0, 0.5, 2.0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        double x = c[i][0], y = c[i][1], w = c[i][2];
        double gd = st_powd_(x, y);
        CHECK_MSG(same(gd, w), "pow f64(%g, %g) = %g, expected %g", x, y, gd, w);
        float wf = (float)w, gf = st_powf_((float)x, (float)y);
        if (w == 0x1p-1074 || w == 0x1p1023) continue; /* beyond float */
        CHECK_MSG(same(gf, wf), "pow f32(%g, %g) = %g, expected %g", x, y, (double)gf, (double)wf);
    }
    /* odd and even integers: the last odd ones, the first always even ones */
    CHECK(same(st_powf_(-1.0f, 16777215.0f), -1) && same(st_powf_(-1.0f, 16777216.0f), 1));
    CHECK(same(st_powd_(-1.0, 9007199254740991.0), -1) && same(st_powd_(-1.0, 9007199254740992.0), 1));
    CHECK(same(st_powd_(-1.0, 1e300), 1) && same(st_powf_(-1.0f, 1e30f), 1));
    CHECK(same(st_powf_(-0.0f, 1e30f), 0.0) && same(st_powd_(-0.0, -1e300), INFINITY));
    CHECK(same(st_powf_(2.0f, -149.0f), 0x1p-149) && same(st_powf_(2.0f, -151.0f), 0.0));
    CHECK(same(st_powf_(2.0f, 127.0f), 0x1p127) && same(st_powf_(2.0f, 128.0f), INFINITY));
    CHECK(same(st_powd_(2.0, -1075.0), 0.0) && same(st_powd_(2.0, 1024.0), INFINITY));
    CHECK(same(st_powd_(0x1p-1074, 0.5), 0x1p-537) && same(st_powd_(0x1p-1074, -0.5), 0x1p537));
    /* the op macro picks the type's function */
    CHECK(same(om_pow(-2.0f, 3.0f), -8) && same(om_pow(9.0, 0.5), 3));
}

TEST(unary_special) {
    /* {x, f(x)} for the f64 and the f32 function; NAN: any NaN */
    static const struct { const char *name; double x, want; } c[] = {
        {"sin", 0.0, 0.0}, {"sin", -0.0, -0.0}, {"sin", INFINITY, NAN}, {"sin", -INFINITY, NAN}, {"sin", NAN, NAN},
        {"cos", 0.0, 1.0}, {"cos", -0.0, 1.0}, {"cos", INFINITY, NAN}, {"cos", NAN, NAN},
        {"sin", 0x1p-1074, 0x1p-1074}, {"sin", -0x1p-149, -0x1p-149}, {"cos", 0x1p-1074, 1.0},
        {"exp", 0.0, 1}, {"exp", -0.0, 1}, {"exp", INFINITY, INFINITY}, {"exp", -INFINITY, 0}, {"exp", NAN, NAN},
        {"exp", 710.0, INFINITY}, {"exp", -746.0, 0},
        {"log", 1.0, 0.0}, {"log", 0.0, -INFINITY}, {"log", -0.0, -INFINITY}, {"log", -1.0, NAN},
        {"log", INFINITY, INFINITY}, {"log", -INFINITY, NAN}, {"log", NAN, NAN},
        {"tanh", 0.0, 0.0}, {"tanh", -0.0, -0.0}, {"tanh", INFINITY, 1}, {"tanh", -INFINITY, -1}, {"tanh", NAN, NAN},
        {"tanh", 0x1p-1074, 0x1p-1074},
        {"expm1", 0.0, 0.0}, {"expm1", -0.0, -0.0}, {"expm1", INFINITY, INFINITY}, {"expm1", -INFINITY, -1},
        {"expm1", NAN, NAN}, {"expm1", 0x1p-1074, 0x1p-1074},
        {"log1p", 0.0, 0.0}, {"log1p", -0.0, -0.0}, {"log1p", -1.0, -INFINITY}, {"log1p", -2.0, NAN},
        {"log1p", INFINITY, INFINITY}, {"log1p", -INFINITY, NAN}, {"log1p", NAN, NAN}, {"log1p", 0x1p-1074, 0x1p-1074},
        {"erf", 0.0, 0.0}, {"erf", -0.0, -0.0}, {"erf", INFINITY, 1}, {"erf", -INFINITY, -1}, {"erf", NAN, NAN},
        {"erf", 7.0, 1}, {"erf", -7.0, -1},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const unary *u = NULL;
        for (int k = 0; k < NUNARY; k++)
            if (!strcmp(unaries[k].name, c[i].name)) { u = &unaries[k]; break; }
        if (!u) continue;
        double gd = u->f64(c[i].x);
        CHECK_MSG(same(gd, c[i].want), "%s f64(%a) = %a, expected %a", c[i].name, c[i].x, gd, c[i].want);
        float xf = (float)c[i].x, wf = (float)c[i].want;
        if (c[i].x != 0 && xf == 0) wf = u->f32(0.0f); /* an f64 subnormal: the float's zero */
        float gf = u->f32(xf);
        CHECK_MSG(same(gf, wf), "%s f32(%a) = %a, expected %a", c[i].name, (double)xf, (double)gf, (double)wf);
    }
    /* sin and cos stay in [-1, 1], and are odd and even, over huge arguments too */
    for (int i = 0; i < 100000; i++) {
        double x = dbits(rnd() & 0x7fefffffffffffffull);
        float xf = fbits((uint32_t)rnd() & 0x7f7fffffu);
        CHECK(fabs(st_sind_(x)) <= 1 && st_sind_(-x) == -st_sind_(x) && st_cosd_(-x) == st_cosd_(x));
        CHECK(fabsf(st_sinf_(xf)) <= 1 && st_sinf_(-xf) == -st_sinf_(xf) && st_cosf_(-xf) == st_cosf_(xf));
    }
}

/* The normal RNG: cos(2 pi u) by the exact reduction, and the Box-Muller values. */
/* cos(2 pi u) with the reduction done exactly (cosl(2 pi u) itself would be off by 2^-64 of 2 pi u
 * near the zeros of cos) */
static long double cos2pi_ref(long double u) {
    long double a = 4 * u, n = nearbyintl(a), r = (a - n) * 1.57079632679489661923132169163975144L;
    int q = ((int)n + 1) & 3;
    long double v = (q & 1) ? cosl(r) : sinl(r);
    return (q & 2) ? -v : v;
}
/* om_where selects by bits for float and double (branch-free, so a masked loop vectorizes): the
 * chosen operand exactly, NaN payloads, signed zeros and infinities included, for any non-zero
 * condition; the integer types keep the plain conditional. */
TEST(where_selects_exact_bits) {
    const uint32_t fb[6] = {0x7fc00001u, 0xffa00000u, 0x80000000u, 0x00000001u, 0x7f800000u, 0x3f800000u};
    const uint64_t db[4] = {0x7ff8000000000123ull, 0x8000000000000000ull, 0xfff0000000000000ull, 1ull};
    const uint8_t conds[3] = {0, 1, 255};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            for (int c = 0; c < 3; c++) {
                float a = st_bitsf_(fb[i]), b = st_bitsf_(fb[j]);
                uint32_t got = st_fbits_(om_where(conds[c], a, b)), want = conds[c] ? fb[i] : fb[j];
                CHECK_MSG(got == want, "f32 where(%u, %08x, %08x) = %08x", conds[c], fb[i], fb[j], got);
            }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int c = 0; c < 3; c++) {
                double a = st_bitsd_(db[i]), b = st_bitsd_(db[j]);
                uint64_t got = st_dbits_(om_where(conds[c], a, b)), want = conds[c] ? db[i] : db[j];
                CHECK_MSG(got == want, "f64 where(%u, %016llx, %016llx) = %016llx", conds[c],
                          (unsigned long long)db[i], (unsigned long long)db[j], (unsigned long long)got);
            }
    const int64_t i64a = INT64_MIN, i64b = 7;
    const int32_t i32a = -3, i32b = INT32_MAX;
    const uint8_t u8a = 200, u8b = 1;
    CHECK(om_where(2, i64a, i64b) == INT64_MIN && om_where(0, i64a, i64b) == 7);
    CHECK(om_where(1, i32a, i32b) == -3 && om_where(0, i32a, i32b) == INT32_MAX);
    CHECK(om_where(1, u8a, u8b) == 200 && om_where(0, u8a, u8b) == 1);
}

TEST(rand_normal) {
    acc c32 = {"cos2pi f32", 1, 0, 0, NAN, 0}, c64 = {"cos2pi f64", 1, 0, 0, NAN, 0};
    for (long i = 0; i < 200000 * scale; i++) {
        float uf = (float)(rnd() >> 40) * 0x1p-24f;
        double ud = (double)(rnd() >> 11) * 0x1p-53;
        note(&c32, ulpf(st_cos2pif_(uf), cos2pi_ref(uf)), uf, NAN);
        note(&c64, ulpd(st_cos2pid_(ud), cos2pi_ref(ud)), ud, NAN);
    }
    report(&c32);
    report(&c64);
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double v = st_rand_normal_f64(7, (uint64_t)i);
        s += v;
        s2 += v * v;
        CHECK(isfinite(v) && isfinite(st_rand_normal_f32(7, (uint64_t)i)));
    }
    CHECK_MSG(fabs(s / n) < 0.01 && fabs(s2 / n - 1) < 0.02, "mean %g, var %g", s / n, s2 / n);
}

/* ---- the kernels compute the prelude's bits ---- */
/* Compares st_<op>(inputs) on the default device, eager and compiled, with want[] bit for bit. */
static void same_bits(const char *what, st_dtype dt, st_tensor *t, const void *want, int n) {
    size_t es = dt == ST_F64 ? 8 : 4;
    CHECK_MSG(t != NULL, "%s: %s", what, st_last_error());
    if (!t) return;
    void *buf = malloc((size_t)n * es);
    st_status s = st_to_host(t, dt, buf, (size_t)n * es);
    st_release(t);
    CHECK_MSG(s == ST_OK, "%s: %s", what, st_last_error());
    int bad = -1;
    for (int i = 0; i < n && s == ST_OK; i++) {
        if (dt == ST_F64) {
            double g = ((double *)buf)[i], w = ((const double *)want)[i];
            if (!(isnan(g) && isnan(w)) && memcmp(&g, &w, 8)) { bad = i; break; }
        } else {
            float g = ((float *)buf)[i], w = ((const float *)want)[i];
            if (!(isnan(g) && isnan(w)) && memcmp(&g, &w, 4)) { bad = i; break; }
        }
    }
    if (bad >= 0) {
        double g = dt == ST_F64 ? ((double *)buf)[bad] : ((float *)buf)[bad];
        double w = dt == ST_F64 ? ((const double *)want)[bad] : ((const float *)want)[bad];
        CHECK_MSG(0, "%s [%d]: the kernel gave %a, the prelude %a", what, bad, g, w);
    }
    free(buf);
}
TEST(kernels_same_bits) {
    enum { N = 4096 };
    static float xf[N], yf[N], wf[N];
    static double xd[N], yd[N], wd[N];
    for (int i = 0; i < N; i++) {
        const unary *u = &unaries[i % NUNARY];
        xd[i] = draw(u, 1, i < NEDGES ? i : NEDGES + i);
        xf[i] = (i & 1) ? (float)draw(u, 0, NEDGES + i) : (float)xd[i];
        double px, py;
        pow_pair(i & 1, i, &px, &py);
        xd[i] = (i % 7 == 3) ? px : xd[i];
        yd[i] = py;
        yf[i] = (float)py;
    }
    int64_t shape[1] = {N};
    static const struct { const char *name; st_tensor *(*fn)(st_tensor *); } ops[] = {
        {"sin", st_sin}, {"cos", st_cos}, {"exp", st_exp}, {"log", st_log}, {"tanh", st_tanh},
        {"expm1", st_expm1}, {"log1p", st_log1p}, {"erf", st_erf}, {"sigmoid", st_sigmoid}, {"gelu", st_gelu},
        {"gelu_tanh", st_gelu_tanh}, {"silu", st_silu}, {"gelu_grad", st_gelu_grad},
    };
    for (int tier = 0; tier < 2; tier++) {
        st_set_eager(tier == 0);
        st_set_jit_min(tier == 0 ? 32768 : 0);
        const char *tn = tier == 0 ? "eager" : "compiled";
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            for (int d = 0; d < 2; d++) {
                st_dtype dt = d ? ST_F64 : ST_F32;
                for (int i = 0; i < N; i++) {
                    const char *nm = ops[k].name;
                    if (d) {
                        double x = xd[i];
                        wd[i] = !strcmp(nm, "sin") ? om_sin(x) : !strcmp(nm, "cos") ? om_cos(x) : !strcmp(nm, "exp") ? om_exp(x)
                              : !strcmp(nm, "log") ? om_log(x) : !strcmp(nm, "tanh") ? om_tanh(x) : !strcmp(nm, "expm1") ? om_expm1(x)
                              : !strcmp(nm, "log1p") ? om_log1p(x) : !strcmp(nm, "erf") ? om_erf(x) : !strcmp(nm, "sigmoid") ? om_sigmoid(x)
                              : !strcmp(nm, "gelu") ? om_gelu(x) : !strcmp(nm, "gelu_tanh") ? om_gelu_tanh(x)
                              : !strcmp(nm, "gelu_grad") ? om_gelu_grad(x) : om_silu(x);
                    } else {
                        float x = xf[i];
                        wf[i] = !strcmp(nm, "sin") ? om_sin(x) : !strcmp(nm, "cos") ? om_cos(x) : !strcmp(nm, "exp") ? om_exp(x)
                              : !strcmp(nm, "log") ? om_log(x) : !strcmp(nm, "tanh") ? om_tanh(x) : !strcmp(nm, "expm1") ? om_expm1(x)
                              : !strcmp(nm, "log1p") ? om_log1p(x) : !strcmp(nm, "erf") ? om_erf(x) : !strcmp(nm, "sigmoid") ? om_sigmoid(x)
                              : !strcmp(nm, "gelu") ? om_gelu(x) : !strcmp(nm, "gelu_tanh") ? om_gelu_tanh(x)
                              : !strcmp(nm, "gelu_grad") ? om_gelu_grad(x) : om_silu(x);
                    }
                }
                st_tensor *a = st_from_data(dt, 1, shape, d ? (const void *)xd : (const void *)xf);
                char what[64];
                snprintf(what, sizeof what, "%s %s %s", tn, ops[k].name, d ? "f64" : "f32");
                same_bits(what, dt, a ? ops[k].fn(a) : NULL, d ? (const void *)wd : (const void *)wf, N);
                st_release(a);
            }
        }
        for (int d = 0; d < 2; d++) {
            st_dtype dt = d ? ST_F64 : ST_F32;
            for (int i = 0; i < N; i++) {
                if (d) wd[i] = om_pow(xd[i], yd[i]);
                else wf[i] = om_pow(xf[i], yf[i]);
            }
            st_tensor *a = st_from_data(dt, 1, shape, d ? (const void *)xd : (const void *)xf);
            st_tensor *b = st_from_data(dt, 1, shape, d ? (const void *)yd : (const void *)yf);
            char what[64];
            snprintf(what, sizeof what, "%s pow %s", tn, d ? "f64" : "f32");
            same_bits(what, dt, a && b ? st_pow(a, b) : NULL, d ? (const void *)wd : (const void *)wf, N);
            st_release(a);
            st_release(b);
        }
    }
    st_set_eager(0);
    st_set_jit_min(32768);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--scale") && i + 1 < argc) {
            scale = strtol(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--exp-every-float")) {
            exp_every_float = 1;
        } else if (!strcmp(argv[i], "--erf-every-float")) {
            erf_every_float = 1;
        } else {   /* nothing ignored: a typo would run the default checks and look like a pass */
            fprintf(stderr, "test_opmath: unknown option '%s' (options: --scale N, --exp-every-float, "
                            "--erf-every-float)\n", argv[i]);
            return 2;
        }
    }
    if (scale < 1) scale = 1;
    RUN(unary_special);
    RUN(pow_special);
    RUN(unary_accuracy);
    RUN(sincos_f32_sweep);
    if (exp_every_float) RUN(exp_f32_every_float);   /* about a minute: on request */
    if (erf_every_float) RUN(erf_f32_every_float);   /* about 35 s: on request */
    RUN(gelu_grad_f32);
    RUN(pow_accuracy);
    RUN(where_selects_exact_bits);
    RUN(rand_normal);
    RUN(kernels_same_bits);
    TEST_MAIN_END();
}
