/*
 * opmath.h — the math of every elementwise op, dtype conversions, the Philox RNG and the GEMM.
 *
 * This header is BOTH #included by the library (the reference interpreter) AND prepended as text
 * to every JIT compilation unit (tools/embed.sh -> st_prelude_src). Invariant: the interpreter
 * and the generated kernels run the very same code here, so given the same compiler flags they
 * get bit-identical results. Hence: self-contained (C11 + libm only), everything ST_FN
 * or a macro, no globals, no reliance on -ffast-math.
 * Same bits on every device: the CPU (cc, -ffp-contract=off) and the GPU (NVRTC, --fmad=false)
 * compile this same text, and every transcendental function here, f32 and f64 (exp, log, sin, cos,
 * tanh, expm1, log1p, erf, pow, and the normal RNG), is our own code made of IEEE +, -, *, /,
 * integer arithmetic and bit casts, never a libm or CUDA math-library call. The library calls that
 * remain are exact or correctly rounded in both libraries: sqrt, fabs, floor, ceil, rint, fmod,
 * copysign. So an op gives the same bits on the CPU and the GPU (docs/api.md, "Numerics"; the
 * accuracy and the identity are tests/test_opmath.c's). The float functions are branch-free (bit
 * selects, not float compares GCC would not if-convert) so that fused loops vectorize; float sin,
 * cos and pow compute in double and round once. Constants and fits: tools/opmath_consts.py.
 *
 * The op macros om_<op> (named by the MATH column of trace/ops.def; their own prefix, so that no
 * macro shadows an API function) take compute-type values: float (f32, f16, bf16), double,
 * int32_t, int64_t, uint8_t (bool). Comparisons and logical ops yield uint8_t 0/1; the others yield
 * the input's compute type. Integer arithmetic wraps (never UB); integer division or remainder by
 * zero yields 0; fmod follows C (the dividend's sign), remainder Lua and Python (the divisor's);
 * max and min propagate NaN; docs/api.md has the dtype rules around them.
 */
#ifndef ST_OPMATH_H
#define ST_OPMATH_H

#ifdef __CUDACC__
/* CUDA C++ (NVRTC): the same functions become device functions. NVRTC has no system headers
 * (__CUDACC_RTC__): the fixed-width types and the few libm macros we use are defined here; the
 * device math library (sqrtf, fmodf, rintf, floor, ...: only exact functions are used) is built in. */
#define ST_FN static __device__ __forceinline__
/* "declared but never referenced" (177): each kernel uses a few of these functions, and the
 * renderers declare values (a loop's work estimate, a baked stride) that some kernels ignore */
#pragma nv_diag_suppress 177
#ifdef __CUDACC_RTC__
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)
#define INT32_MAX 2147483647
#define INT64_MAX 9223372036854775807LL
#else
#include <math.h>
#include <stdint.h>
#endif
#else
#define ST_FN static inline   /* C: every function of this header */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#endif

/* ---- bit casts ---- */
#ifdef __CUDACC__
ST_FN uint32_t st_fbits_(float f) { return __float_as_uint(f); }
ST_FN float st_bitsf_(uint32_t u) { return __uint_as_float(u); }
#else
ST_FN uint32_t st_fbits_(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
ST_FN float st_bitsf_(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
#endif

/* ---- f16 / bf16 storage conversions (round to nearest even, NaN kept, overflow -> inf) ---- */
ST_FN float st_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    /* Exponent rebias by a float multiply: exact for normals and subnormals alike. */
    float mag = st_bitsf_(em << 13) * 0x1p112f;
    uint32_t bits = em >= 0x7c00u ? (0x7f800000u | (em & 0x3ffu) << 13) : st_fbits_(mag);
    return st_bitsf_(sign | bits);
}
ST_FN uint16_t st_f2h(float f) {
    uint32_t x = st_fbits_(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    uint32_t e = ax >> 23, mant = ax & 0x7fffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | (mant >> 13)); /* quiet NaN */
    if (ax >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);                /* >= 65536: inf */
    if (e < 113) {                                   /* half subnormal (or zero) */
        uint32_t s = 126 - e;                        /* shift of the 24-bit significand */
        if (e == 0 || s >= 25) return (uint16_t)sign;
        uint32_t m = mant | 0x800000u, q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
        q += (rem > half || (rem == half && (q & 1u)));
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((e - 112) << 10) | (mant >> 13), rem = mant & 0x1fffu;
    h += (rem > 0x1000u || (rem == 0x1000u && (h & 1u))); /* a carry may reach inf: correct */
    return (uint16_t)(sign | h);
}
ST_FN float st_bf2f(uint16_t b) { return st_bitsf_((uint32_t)b << 16); }
ST_FN uint16_t st_f2bf(float f) {
    uint32_t x = st_fbits_(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- safe float -> int (truncation, NaN -> 0, saturation) and CAST ---- */
ST_FN int32_t st_f2i32(double v) {  /* clamp first: a branch-free, vectorizable select */
    double c = v == v ? v : 0.0;
    c = c < -2147483648.0 ? -2147483648.0 : c;
    c = c > 2147483647.0 ? 2147483647.0 : c;
    return (int32_t)c;
}
ST_FN int64_t st_f2i64(double v) {
    double c = v == v ? v : 0.0;
    c = c < -9223372036854775808.0 ? -9223372036854775808.0 : c;
    c = c > 9223372036854774784.0 ? 9223372036854774784.0 : c;  /* largest double < 2^63 */
    int64_t r = (int64_t)c;
    return v >= 9223372036854775808.0 ? INT64_MAX : r;
}
ST_FN int32_t st_f2i32f_(float v) {  /* float twin: keeps float loops vectorizable */
    float c = v == v ? v : 0.0f;
    c = c < -2147483648.0f ? -2147483648.0f : c;
    c = c > 2147483520.0f ? 2147483520.0f : c;                  /* largest float < 2^31 */
    int32_t r = (int32_t)c;
    return v >= 2147483648.0f ? INT32_MAX : r;
}
ST_FN int64_t st_f2i64f_(float v) {
    float c = v == v ? v : 0.0f;
    c = c < -9223372036854775808.0f ? -9223372036854775808.0f : c;
    c = c > 9223371487098961920.0f ? 9223371487098961920.0f : c; /* largest float < 2^63 */
    int64_t r = (int64_t)c;
    return v >= 9223372036854775808.0f ? INT64_MAX : r;
}
ST_FN int32_t st_i2i32_(int64_t v) { return (int32_t)v; }
ST_FN int64_t st_i2i64_(int64_t v) { return v; }
/* ST_CVT(to_compute_ctype, v): a compute-type value converted to another compute type. */
#define ST_CVT(T, v) ST_CVT_##T(v)
#define ST_CVT_float(v) ((float)(v))
#define ST_CVT_double(v) ((double)(v))
#ifdef __CUDACC__ /* C++ has no _Generic: overloads with the same type mapping */
ST_FN int32_t st_cvt_i32_(float v) { return st_f2i32f_(v); }
ST_FN int32_t st_cvt_i32_(double v) { return st_f2i32(v); }
template <class T> ST_FN int32_t st_cvt_i32_(T v) { return st_i2i32_(v); }
ST_FN int64_t st_cvt_i64_(float v) { return st_f2i64f_(v); }
ST_FN int64_t st_cvt_i64_(double v) { return st_f2i64(v); }
template <class T> ST_FN int64_t st_cvt_i64_(T v) { return st_i2i64_(v); }
#define ST_CVT_int32_t(v) st_cvt_i32_(v)
#define ST_CVT_int64_t(v) st_cvt_i64_(v)
#else
#define ST_CVT_int32_t(v) _Generic((v), float: st_f2i32f_, double: st_f2i32, default: st_i2i32_)(v)
#define ST_CVT_int64_t(v) _Generic((v), float: st_f2i64f_, double: st_f2i64, default: st_i2i64_)(v)
#endif
#define ST_CVT_uint8_t(v) ((uint8_t)((v) != 0))

/* A fused multiply-add, rounded once as IEEE defines it: the FMA instruction (kernels at
 * -march=native, the interpreter's AVX-512 and AVX2 copies), libm's fmaf (a baseline build) and
 * CUDA's fmaf give the same bits. Written out where it is meant: no build contracts a*b+c itself
 * (-ffp-contract=off). */
#ifdef __CUDACC__
#define ST_FMAF(a, b, c) fmaf(a, b, c)
#else
#define ST_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#endif

/* ---- float exp family: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, Taylor to r^7 ---- */
ST_FN float st_expm1_poly_(float r) { /* expm1(r), |r| <= 0.35, ~1 ulp */
    float p = 1.0f / 5040;
    p = 1.0f / 720 + r * p; p = 1.0f / 120 + r * p; p = 1.0f / 24 + r * p;
    p = 1.0f / 6 + r * p; p = 0.5f + r * p;
    return r + (r * r) * p;
}
/* Returns expm1 of the reduced argument and n; xc must be finite and |xc| < 2^20. */
ST_FN float st_exp_reduce_(float xc, int32_t *n) {
    float t = xc * 1.44269504088896341f;
    float fn = (t + 12582912.0f) - 12582912.0f;            /* round to nearest integer */
    float r = xc - fn * 0.693359375f;                       /* ln2 hi (exact product) */
    r = r - fn * -2.12194440e-4f;                           /* ln2 lo */
    *n = (int32_t)fn;
    return st_expm1_poly_(r);
}
/* exp: the same reduction with fused multiply-adds, exp(r) = 1 + r + r^2 P(r) with P of degree 5
 * (Cephes' expf coefficients) in Horner form, 2^n applied in two steps (2^n may not be a float);
 * n read from the rounding constant's low bits (a NaN goes through as garbage, never through an
 * undefined conversion, and the last select returns it). Every float in [-104, 89] within 1.01
 * ulp (exhaustive check against double exp; the Taylor form before: 1.03). The Horner chain of
 * fmas is half as long as the multiply-add pairs' (GCC's AVX-512 loop: ~46 instructions per 16
 * lanes against ~52, and 1.36x the speed: bench/NOTES.md, fifteenth pass). */
ST_FN float st_expf_(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    float t = xc * 1.44269504088896341f;
    float kf = t + 12582912.0f;                              /* 1.5 * 2^23: rounds t to an integer */
    float fn = kf - 12582912.0f;
    int32_t n = (int32_t)(st_fbits_(kf) - 0x4B400000u);      /* that integer, from kf's low bits */
    float r = ST_FMAF(fn, -0.693359375f, xc);                /* ln2 hi */
    r = ST_FMAF(fn, 2.12194440e-4f, r);                      /* ln2 lo */
    float p = 1.9875691500e-4f;
    p = ST_FMAF(p, r, 1.3981999507e-3f);
    p = ST_FMAF(p, r, 8.3334519073e-3f);
    p = ST_FMAF(p, r, 4.1665795894e-2f);
    p = ST_FMAF(p, r, 1.6666665459e-1f);
    p = ST_FMAF(p, r, 5.0000001201e-1f);
    p = 1.0f + ST_FMAF(p, r * r, r);
    int32_t n1 = n >> 1, n2 = n - n1;
    float y = p * st_bitsf_((uint32_t)(n1 + 127) << 23) * st_bitsf_((uint32_t)(n2 + 127) << 23);
    return x == x ? y : x;
}
ST_FN float st_expm1f_(float x) {
    float xc = x > 64.0f ? 64.0f : x;
    xc = xc < -32.0f ? -32.0f : xc;
    xc = xc == xc ? xc : 0.0f;
    int32_t n;
    float q = st_exp_reduce_(xc, &n);
    float s = st_bitsf_((uint32_t)(n + 127) << 23);
    float y = s * q + (s - 1.0f);
    y = x > 64.0f ? st_expf_(x) : y;
    return (x == x && x != 0.0f) ? y : x;               /* NaN, and -0 stays -0 */
}
ST_FN float st_tanhf_(float x) {
    /* expm1(2|x|) inlined for |x| <= 10 (no overflow branch, so no second exp per vector lane). */
    float a = fabsf(x);
    a = a > 10.0f ? 10.0f : a;                              /* tanh(10) == 1.0f */
    a = a == a ? a : 0.0f;
    int32_t n;
    float q = st_exp_reduce_(2.0f * a, &n);
    float s = st_bitsf_((uint32_t)(n + 127) << 23);
    float t = s * q + (s - 1.0f);
    float r = copysignf(t / (t + 2.0f), x);
    return x == x ? r : x;
}
/* ---- float log: x = 2^e m, m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(f / (2 + f)) ---- */
ST_FN float st_logf_(float x) {
    /* Conditions on the bits, not float compares: GCC will not if-convert a float compare it
     * thinks could trap, and the loop would not vectorize. */
    uint32_t ux = st_fbits_(x);
    uint32_t sub = ux < 0x00800000u;                        /* +subnormal or +0: scale 2^23 */
    uint32_t ix = st_fbits_(x * st_bitsf_(0x3f800000u + sub * (23u << 23)));
    uint32_t mb = ix & 0x007fffffu;
    uint32_t big = mb > 0x003504f3u;                        /* mantissa > sqrt(2): halve it */
    int32_t e = (int32_t)((ix >> 23) & 0xffu) - 127 - (int32_t)(sub * 23u) + (int32_t)big;
    float m = st_bitsf_(mb | (0x3f800000u - (big << 23)));
    float f = m - 1.0f, s = f / (2.0f + f), z = s * s;
    float R = z * (0.666666666f + z * (0.4f + z * (0.285714286f + z * 0.222222222f)));
    float hfsq = 0.5f * f * f;
    float lf = f - (hfsq - s * (hfsq + R));
    float fe = (float)e;
    float y = (fe * -2.12194440e-4f + lf) + fe * 0.693359375f;
    uint32_t sp = ux > 0x7f800000u ? 0x7fc00000u : ux;      /* NaN or negative: NaN; +inf */
    sp = (ux & 0x7fffffffu) == 0 ? 0xff800000u : sp;        /* +-0: -inf */
    uint32_t ok = 0u - (uint32_t)(ux - 1u < 0x7f7fffffu);   /* positive, finite, non-zero */
    return st_bitsf_((st_fbits_(y) & ok) | (sp & ~ok));     /* a bit select: never a branch */
}
ST_FN float st_log1pf_(float x) {
    float u = 1.0f + x;                                     /* log(u) * x / (u - 1): exact-ish */
    float y = u == 1.0f ? x : st_logf_(u) * (x / (u - 1.0f));
    return x == INFINITY ? x : y;
}
/* ---- float erf: x P(x^2) below 0.921875, 1 - exp(-x^2) Q(x) above (our own least-squares fits
 * of erf(x)/x and erfc(x) exp(x^2), errors 5e-10 relative and 1e-9 absolute), both in Horner form
 * with fused multiply-adds (ST_FMAF, as exp): every float in [0, 4.5] within 2.762 ulp of double
 * erf, as before the fmas (1,561,245 results changed); 1.25x the speed of the multiply-add form
 * (4M floats, one thread: 5.0 -> 4.0 ms; bench/NOTES.md sixteenth pass). Both branches are
 * computed and one selected, so the loop vectorizes. ---- */
/* The two polynomials, shared with st_gelu_gradf_: erf(x)/x in z = x^2 (below 0.921875) and
 * erfc(x) exp(x^2) in s (above). */
ST_FN float st_erff_p_(float z) {
    float p = 8.392699158578376e-05f;
    p = ST_FMAF(p, z, -0.0008148509043693769f); p = ST_FMAF(p, z, 0.0052015923650271245f);
    p = ST_FMAF(p, z, -0.02685964792204701f); p = ST_FMAF(p, z, 0.11283700542255143f);
    p = ST_FMAF(p, z, -0.37612634110642257f); p = ST_FMAF(p, z, 1.128379166683384f);
    return p;
}
ST_FN float st_erff_r_(float ac) {
    float s = ST_FMAF(ac, 0.64974619289340101f, -1.5989847715736041f); /* (ac - 2.4609375) / 1.5390625: [0.92, 4] -> [-1, 1] */
    float r = 2.195700904576714e-05f;
    r = ST_FMAF(r, s, -5.6746328610966544e-05f); r = ST_FMAF(r, s, 7.735262756290023e-05f);
    r = ST_FMAF(r, s, -0.0001964618869058404f); r = ST_FMAF(r, s, 0.0005607225298515234f);
    r = ST_FMAF(r, s, -0.0013295082169347214f); r = ST_FMAF(r, s, 0.0030245319895566246f);
    r = ST_FMAF(r, s, -0.006773163328874492f); r = ST_FMAF(r, s, 0.01467433200872615f);
    r = ST_FMAF(r, s, -0.03061823435425792f); r = ST_FMAF(r, s, 0.06134659060319638f);
    r = ST_FMAF(r, s, -0.11748100608515555f); r = ST_FMAF(r, s, 0.21374909276497697f);
    return r;
}
ST_FN float st_erff_(float x) {
    float a = fabsf(x), p = st_erff_p_(a * a);
    float ac = a < 0.921875f ? 0.921875f : (a > 4.0f ? 4.0f : a);  /* erf(4) == 1.0f */
    float r = st_erff_r_(ac);
    float big = ST_FMAF(-st_expf_(-(ac * ac)), r, 1.0f);
    return a < 0.921875f ? x * p : copysignf(big, x);
}

/* ---- double building blocks: bit casts, exact sums and products ----
 * Everything below is IEEE arithmetic in round-to-nearest (+ - * / and sqrt, correctly rounded on
 * both devices), integer arithmetic and bit casts: no libm call and no FMA. Dekker's product
 * (Veltkamp's split) gives a*b exactly as p + e where an FMA would; written out, it is the same
 * on a CPU without one, so the interpreter (no -mfma) and every kernel agree. */
#ifdef __CUDACC__
ST_FN uint64_t st_dbits_(double d) { return (uint64_t)__double_as_longlong(d); }
ST_FN double st_bitsd_(uint64_t u) { return __longlong_as_double((long long)u); }
#else
ST_FN uint64_t st_dbits_(double d) { uint64_t u; memcpy(&u, &d, sizeof u); return u; }
ST_FN double st_bitsd_(uint64_t u) { double d; memcpy(&d, &u, sizeof d); return d; }
#endif
ST_FN double st_two_sum_(double a, double b, double *e) { /* a + b = s + *e exactly (Knuth) */
    double s = a + b, bb = s - a;
    *e = (a - (s - bb)) + (b - bb);
    return s;
}
ST_FN double st_two_prod_(double a, double b, double *e) { /* a b = p + *e exactly; |a|, |b| < 2^995 */
    double p = a * b;
    double ca = 134217729.0 * a, ah = ca - (ca - a), al = a - ah;
    double cb = 134217729.0 * b, bh = cb - (cb - b), bl = b - bh;
    *e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return p;
}
ST_FN double st_rintd_(double x) { return (x + 0x1.8p52) - 0x1.8p52; } /* nearest integer, |x| < 2^51 */
/* n = rint(x) for |x| < 2^11 as a double (*fn) and, from the bits of x + 1.5 2^52, as an int: no
 * float-to-int conversion, so a NaN x gives some n in [-2048, 2047], never undefined behaviour,
 * and needs no test before (a test GCC would thread, and the loop would not vectorize). */
ST_FN int64_t st_rint_k_(double x, double *fn) {
    double kd = x + 0x1.8p52;
    *fn = kd - 0x1.8p52;
    return (int64_t)((st_dbits_(kd) + 0x800u) & 0xfffu) - 0x800;
}
/* Selects by bit masks: c ? a : b with both computed. A ?: whose arm is used nowhere else lets GCC
 * sink the arm's float ops under a branch, which it then will not if-convert (they "could trap"):
 * the loop would not vectorize. */
ST_FN double st_seld_(int c, double a, double b) {
    uint64_t m = 0 - (uint64_t)(c != 0);
    return st_bitsd_((st_dbits_(a) & m) | (st_dbits_(b) & ~m));
}
ST_FN float st_self_(int c, float a, float b) {
    uint32_t m = 0 - (uint32_t)(c != 0);
    return st_bitsf_((st_fbits_(a) & m) | (st_fbits_(b) & ~m));
}
ST_FN int32_t st_seli_(int c, int32_t a, int32_t b) {
    uint32_t m = 0 - (uint32_t)(c != 0);
    return (int32_t)(((uint32_t)a & m) | ((uint32_t)b & ~m));
}
/* v with |v| clamped to lim (a positive double; NaN becomes +-lim), by integer ops on the bits:
 * a float clamp to a constant is a path GCC folds and threads, and then will not vectorize. */
ST_FN double st_clampd_(double v, double lim) {
    uint64_t u = st_dbits_(v), a = u & 0x7fffffffffffffffull, l = st_dbits_(lim);
    return st_bitsd_((u ^ a) | (a < l ? a : l));
}
ST_FN double st_negd_if_(int c, double v) { return st_bitsd_(st_dbits_(v) ^ ((uint64_t)(c != 0) << 63)); }
ST_FN float st_negf_if_(int c, float v) { return st_bitsf_(st_fbits_(v) ^ ((uint32_t)(c != 0) << 31)); }
#define ST_LN2_HI 0x1.62e42fefa3800p-1  /* ln 2 to 42 bits: k ST_LN2_HI is exact for |k| < 2^11 */
#define ST_LN2_LO 0x1.ef35793c76730p-45
/* 2 when y is an odd integer, 1 an even integer (or +-inf), 0 anything else (NaN too). */
ST_FN int64_t st_intkind_d_(double y) { /* 64-bit throughout: a loop of one width vectorizes */
    uint64_t u = st_dbits_(y) & 0x7fffffffffffffffull;
    int64_t sh = 1075 - (int64_t)(u >> 52);                 /* fraction bits of |y| >= 1 */
    int64_t sc = sh < 0 ? 0 : (sh > 52 ? 52 : sh);
    uint64_t m = (u & 0x000fffffffffffffull) | 0x0010000000000000ull;
    int64_t k = (m & ((1ull << sc) - 1)) ? 0 : 1 + (int64_t)((m >> sc) & 1u);
    k = sh < 0 ? 1 : k;                                     /* |y| >= 2^53, inf: even */
    k = sh > 52 ? (u == 0 ? 1 : 0) : k;                     /* |y| < 1: only 0 is an integer */
    return u > 0x7ff0000000000000ull ? 0 : k;
}
ST_FN int32_t st_intkind_f_(float y) {
    uint32_t u = st_fbits_(y) & 0x7fffffffu;
    int32_t sh = 150 - (int32_t)(u >> 23);
    int32_t sc = sh < 0 ? 0 : (sh > 23 ? 23 : sh);
    uint32_t m = (u & 0x007fffffu) | 0x00800000u;
    int32_t k = (m & ((1u << sc) - 1)) ? 0 : 1 + (int32_t)((m >> sc) & 1u);
    k = sh < 0 ? 1 : k;
    k = sh > 23 ? (u == 0 ? 1 : 0) : k;
    return u > 0x7f800000u ? 0 : k;
}

/* ---- double exp family ---- */
/* expm1(r) for |r| <= 0.35: Taylor to r^13 (the first neglected term is 2^-57 of the result). */
ST_FN double st_expm1_polyd_(double r) {
    double p = 0x1.6124613a86d09p-33;
    p = 0x1.1eed8eff8d898p-29 + r * p; p = 0x1.ae64567f544e4p-26 + r * p;
    p = 0x1.27e4fb7789f5cp-22 + r * p; p = 0x1.71de3a556c734p-19 + r * p;
    p = 0x1.a01a01a01a01ap-16 + r * p; p = 0x1.a01a01a01a01ap-13 + r * p;
    p = 0x1.6c16c16c16c17p-10 + r * p; p = 0x1.1111111111111p-7 + r * p;
    p = 0x1.5555555555555p-5 + r * p; p = 0x1.5555555555555p-3 + r * p;
    p = 0.5 + r * p;
    return r + (r * r) * p;
}
/* e^(hi + lo) with |lo| <= 2^-40 |hi| (a double-double exponent, pow's): hi = k ln2 + r (Cody-Waite:
 * k ST_LN2_HI is exact and so is the first subtraction), then 2^k in two factors, so that a
 * subnormal result is rounded once. About 1 ulp. */
ST_FN double st_exp_dd_(double hi, double lo) {
    double hc = st_clampd_(hi, 746.0);                      /* e^710 = inf, e^-746 = 0 */
    lo = st_seld_(hc == hi, lo, 0.0);                       /* clamped (or NaN): lo is noise */
    double fk;
    int64_t k = st_rint_k_(hc * 0x1.71547652b82fep0, &fk), k1 = k / 2, k2 = k - k1;
    double r = ((hc - fk * ST_LN2_HI) - fk * ST_LN2_LO) + lo;
    double y = (1.0 + st_expm1_polyd_(r)) * st_bitsd_((uint64_t)(k1 + 1023) << 52)
               * st_bitsd_((uint64_t)(k2 + 1023) << 52);
    return st_seld_(hi == hi, y, hi);
}
ST_FN double st_expd_(double x) { return st_exp_dd_(x, 0.0); }
/* expm1 for |x| <= 700: 2^k expm1(r) + (2^k - 1), exact but for the last addition. */
ST_FN double st_expm1_cored_(double xc) {
    double fk;
    int64_t k = st_rint_k_(xc * 0x1.71547652b82fep0, &fk);
    double r = (xc - fk * ST_LN2_HI) - fk * ST_LN2_LO;      /* k = 0: r = x exactly */
    double s = st_bitsd_((uint64_t)(k + 1023) << 52);
    return s * st_expm1_polyd_(r) + (s - 1.0);
}
ST_FN double st_expm1d_(double x) {
    double xc = x > 700.0 ? 700.0 : x;
    xc = xc < -40.0 ? -40.0 : xc;                           /* expm1(-40) == -1 */
    double y = st_seld_(x > 700.0, st_expd_(x), st_expm1_cored_(xc));
    return st_seld_((x == x) & (x != 0.0), y, x);           /* NaN, and -0 stays -0 */
}
ST_FN double st_tanhd_(double x) { /* expm1(2|x|) / (expm1(2|x|) + 2); tanh(22) == 1 */
    double a = fabs(x);
    a = a > 22.0 ? 22.0 : a;
    double t = st_expm1_cored_(2.0 * a);
    double r = st_negd_if_(x < 0.0, t / (t + 2.0));
    return st_seld_((x == x) & (x != 0.0), r, x);
}

/* ---- double log: x = 2^k m, m in [0.75, 1.5); c = 0.75 + j/128 nearest m, log c from a table
 * (to 106 bits); s = (m - c) / (m + c) in double-double (|s| < 2^-8.5), and
 * log m = log c + 2 atanh(s) = log c + 2s + 2s^3/3 + ... The result is hi + *lo with a relative
 * error near 2^-68: pow needs that much. x positive and finite (subnormals too). ---- */
ST_FN double st_log_dd_(double x, double *lo) {
    static const double tab[97][2] = { /* log(0.75 + j/128): hi, lo (tools/opmath_consts.py) */
        {-0x1.269621134db92p-2, -0x1.e0efadd9db02bp-56}, {-0x1.1bf99635a6b95p-2, 0x1.12aeb84249223p-57},
        {-0x1.1178e8227e47cp-2, 0x1.0e63a5f01c691p-57}, {-0x1.07138604d5862p-2, -0x1.cdb16ed4e9138p-56},
        {-0x1.f991c6cb3b379p-3, -0x1.f665066f980a2p-57}, {-0x1.e530effe71012p-3, -0x1.2276041f43042p-59},
        {-0x1.d1037f2655e7bp-3, -0x1.60629242471a2p-57}, {-0x1.bd087383bd8adp-3, -0x1.dd355f6a516d7p-60},
        {-0x1.a93ed3c8ad9e3p-3, -0x1.bcafa9de97203p-57}, {-0x1.95a5adcf7017fp-3, -0x1.142c507fb7a3dp-58},
        {-0x1.823c16551a3c2p-3, 0x1.1232ce70be781p-57}, {-0x1.6f0128b756abcp-3, 0x1.8de59c21e166cp-57},
        {-0x1.5bf406b543db2p-3, 0x1.1f5b44c0df7e7p-61}, {-0x1.4913d8333b561p-3, 0x1.0d5604930f135p-58},
        {-0x1.365fcb0159016p-3, -0x1.7d411a5b944adp-58}, {-0x1.23d712a49c202p-3, 0x1.6e38161051d69p-57},
        {-0x1.1178e8227e47cp-3, 0x1.0e63a5f01c691p-58}, {-0x1.fe89139dbd566p-4, 0x1.ac9f4215f9393p-58},
        {-0x1.da727638446a2p-4, -0x1.401fa71733019p-58}, {-0x1.b6ac88dad5b1cp-4, 0x1.0057eed1ca59fp-59},
        {-0x1.9335e5d594989p-4, 0x1.478a85704ccb7p-58}, {-0x1.700d30aeac0e1p-4, 0x1.72566212cdd05p-61},
        {-0x1.4d3115d207eacp-4, -0x1.769f42c7842ccp-58}, {-0x1.2aa04a44717a5p-4, 0x1.d15d38d2fa3f7p-58},
        {-0x1.08598b59e3a07p-4, 0x1.dd7009902bf32p-58}, {-0x1.ccb73cdddb2ccp-5, 0x1.e48fb0500efd4p-59},
        {-0x1.894aa149fb343p-5, -0x1.a8be97660a23dp-60}, {-0x1.466aed42de3eap-5, 0x1.cdd6f7f4a137ep-59},
        {-0x1.0415d89e74444p-5, -0x1.c05cf1d753622p-59}, {-0x1.8492528c8cabfp-6, 0x1.d192d0619fa67p-60},
        {-0x1.0205658935847p-6, -0x1.27c8e8416e71fp-60}, {-0x1.010157588de71p-7, -0x1.46662d417ced0p-62},
        {0x0.0p+0, 0x0.0p+0}, {0x1.fe02a6b106789p-8, -0x1.e44b7e3711ebfp-67},
        {0x1.fc0a8b0fc03e4p-7, -0x1.83092c59642a1p-62}, {0x1.7b91b07d5b11bp-6, -0x1.5b602ace3a510p-60},
        {0x1.f829b0e783300p-6, 0x1.33e3f04f1ef23p-60}, {0x1.39e87b9febd60p-5, -0x1.5bfa937f551bbp-59},
        {0x1.77458f632dcfcp-5, 0x1.18d3ca87b9296p-59}, {0x1.b42dd711971bfp-5, -0x1.eb9759c130499p-60},
        {0x1.f0a30c01162a6p-5, 0x1.85f325c5bbacdp-59}, {0x1.16536eea37ae1p-4, -0x1.79da3e8c22cdap-60},
        {0x1.341d7961bd1d1p-4, -0x1.b599f227becbbp-58}, {0x1.51b073f06183fp-4, 0x1.a49e39a1a8be4p-58},
        {0x1.6f0d28ae56b4cp-4, -0x1.906d99184b992p-58}, {0x1.8c345d6319b21p-4, -0x1.4a697ab3424a9p-61},
        {0x1.a926d3a4ad563p-4, 0x1.942f48aa70ea9p-58}, {0x1.c5e548f5bc743p-4, 0x1.5d617ef8161b1p-60},
        {0x1.e27076e2af2e6p-4, -0x1.61578001e0162p-60}, {0x1.fec9131dbeabbp-4, -0x1.5746b9981b36cp-58},
        {0x1.0d77e7cd08e59p-3, 0x1.9a5dc5e9030acp-57}, {0x1.1b72ad52f67a0p-3, 0x1.483023472cd74p-58},
        {0x1.29552f81ff523p-3, 0x1.301771c407dbfp-57}, {0x1.371fc201e8f74p-3, 0x1.de6cb62af18a0p-58},
        {0x1.44d2b6ccb7d1ep-3, 0x1.9f4f6543e1f88p-57}, {0x1.526e5e3a1b438p-3, -0x1.746ff8a470d3ap-57},
        {0x1.5ff3070a793d4p-3, -0x1.bc60efafc6f6ep-58}, {0x1.6d60fe719d21dp-3, -0x1.caae268ecd179p-57},
        {0x1.7ab890210d909p-3, 0x1.be36b2d6a0608p-59}, {0x1.87fa06520c911p-3, -0x1.bf7fdbfa08d9ap-57},
        {0x1.9525a9cf456b4p-3, 0x1.d904c1d4e2e26p-57}, {0x1.a23bc1fe2b563p-3, 0x1.93711b07a998cp-59},
        {0x1.af3c94e80bff3p-3, -0x1.398cff3641985p-58}, {0x1.bc286742d8cd6p-3, 0x1.4fce744870f55p-58},
        {0x1.c8ff7c79a9a22p-3, -0x1.4f689f8434012p-57}, {0x1.d5c216b4fbb91p-3, 0x1.6e443597e4d40p-57},
        {0x1.e27076e2af2e6p-3, -0x1.61578001e0162p-59}, {0x1.ef0adcbdc5936p-3, 0x1.48637950dc20dp-57},
        {0x1.fb9186d5e3e2bp-3, -0x1.caaae64f21acbp-57}, {0x1.0402594b4d041p-2, -0x1.28ec217a5022dp-57},
        {0x1.0a324e27390e3p-2, 0x1.7dcfde8061c03p-56}, {0x1.1058bf9ae4ad5p-2, 0x1.89fa0ab4cb31dp-58},
        {0x1.1675cababa60ep-2, 0x1.ce63eab883717p-61}, {0x1.1c898c16999fbp-2, -0x1.0e5c62aff1c44p-60},
        {0x1.22941fbcf7966p-2, -0x1.76f5eb09628afp-56}, {0x1.2895a13de86a3p-2, 0x1.7ad24c13f040ep-56},
        {0x1.2e8e2bae11d31p-2, -0x1.8f4cdb95ebdf9p-56}, {0x1.347dd9a987d55p-2, -0x1.4dd4c580919f8p-57},
        {0x1.3a64c556945eap-2, -0x1.c68651945f97cp-57}, {0x1.404308686a7e4p-2, -0x1.0bcfb6082ce6dp-56},
        {0x1.4618bc21c5ec2p-2, 0x1.f42decdeccf1dp-56}, {0x1.4be5f957778a1p-2, -0x1.259b35b04813dp-57},
        {0x1.51aad872df82dp-2, 0x1.3927ac19f55e3p-59}, {0x1.5767717455a6cp-2, 0x1.526adb283660cp-56},
        {0x1.5d1bdbf5809cap-2, 0x1.4236383dc7fe1p-56}, {0x1.62c82f2b9c795p-2, 0x1.7b7af915300e5p-57},
        {0x1.686c81e9b14afp-2, -0x1.ddea0f7f58e3dp-57}, {0x1.6e08eaa2ba1e4p-2, -0x1.cfb1b39ca3a0fp-56},
        {0x1.739d7f6bbd007p-2, -0x1.8c76ceb014b04p-56}, {0x1.792a55fdd47a2p-2, 0x1.f057691fe9ed7p-56},
        {0x1.7eaf83b82afc3p-2, 0x1.92ce979ed2950p-56}, {0x1.842d1da1e8b17p-2, 0x1.24ec519784676p-56},
        {0x1.89a3386c1425bp-2, -0x1.29639dfbbf0fbp-56}, {0x1.8f11e873662c7p-2, 0x1.f85da755a61a3p-56},
        {0x1.947941c2116fbp-2, -0x1.16cc8bae0bbe4p-56}, {0x1.99d958117e08bp-2, -0x1.a2b6889dc3e72p-57},
        {0x1.9f323ecbf984cp-2, -0x1.a92e513217f5cp-59},
    };
    uint64_t ux = st_dbits_(x);
    uint64_t sub = ux < 0x0010000000000000ull;              /* subnormal: scale by 2^54 */
    uint64_t ix = st_dbits_(x * st_bitsd_(0x3ff0000000000000ull + sub * (54ull << 52)));
    uint64_t mb = ix & 0x000fffffffffffffull;
    uint64_t big = mb >= 0x0008000000000000ull;             /* m >= 1.5: halve it */
    int64_t k = (int64_t)(ix >> 52) - 1023 - (int64_t)(sub * 54u) + (int64_t)big;
    double m = st_bitsd_(mb | (0x3ff0000000000000ull - (big << 52)));
    int64_t j = (int64_t)((m - 0.75) * 128.0 + 0.5);       /* 0..96 (int64: a gather GCC vectorizes) */
    double c = 0.75 + (double)j * 0x1p-7;
    double u = m - c;                                       /* exact (Sterbenz) */
    double vl, vh = st_two_sum_(m, c, &vl);
    double sh = u / vh, pl, ph = st_two_prod_(sh, vh, &pl);
    double sl = (((u - ph) - pl) - sh * vl) / vh;           /* s = sh + sl */
    double z = sh * sh;
    double t = (sh * z) * (0x1.5555555555555p-1 + z * (0x1.999999999999ap-2
               + z * (0x1.2492492492492p-2 + z * 0x1.c71c71c71c71cp-3)));
    double fk = (double)k, e1, e2;
    double h = st_two_sum_(fk * ST_LN2_HI, tab[j][0], &e1);
    h = st_two_sum_(h, 2.0 * sh, &e2);
    *lo = (e1 + e2) + (((fk * ST_LN2_LO + tab[j][1]) + 2.0 * sl) + t);
    return h;
}
/* Special values by bits (as st_logf_): NaN or negative: NaN; +-0: -inf; +inf: +inf. */
ST_FN double st_log_special_(double x, double y) {
    uint64_t ux = st_dbits_(x);
    uint64_t sp = ux > 0x7ff0000000000000ull ? 0x7ff8000000000000ull : ux;
    sp = (ux & 0x7fffffffffffffffull) == 0 ? 0xfff0000000000000ull : sp;
    int ok = ux - 1u < 0x7fefffffffffffffull;               /* positive, finite, non-zero */
    return st_seld_(ok, y, st_bitsd_(sp));
}
ST_FN double st_logd_(double x) {
    double lo, hi = st_log_dd_(x, &lo);                     /* any bits: no UB, selected away */
    return st_log_special_(x, hi + lo);
}
ST_FN double st_log1pd_(double x) {
    /* 1 + x = u + ul exactly; log(u + ul) = log(u) + ul / u (|ul / u| <= 2^-53) */
    double ul, u = st_two_sum_(1.0, x, &ul);
    double lo, hi = st_log_dd_(u, &lo);
    double y = st_log_special_(u, hi + (lo + ul / u));
    return st_seld_((x == INFINITY) | (x == 0.0), x, y);   /* -0 stays -0 */
}

/* ---- pow: e^(y log|x|) with log|x| in double-double, y log|x| by Dekker's product, then the
 * signs and the special cases of C99 Annex F, all by selects ---- */
ST_FN double st_powd_(double x, double y) {
    double ax = fabs(x);
    int fin = st_dbits_(ax) - 1u < 0x7fefffffffffffffull;   /* finite, non-zero */
    double l, h = st_log_dd_(ax, &l);                      /* x = 0, inf, NaN: finite junk */
    double H = h + l, L = l - (H - h);
    /* beyond 2^70, |y log x| > 2^16 (|log x| >= 2^-54 unless x == 1): the same overflow */
    double yc = st_clampd_(y, 0x1p70);
    double pe, p = st_two_prod_(yc, H, &pe);
    pe = pe + yc * L;
    double th = p + pe, tl = pe - (th - p);
    double r = st_exp_dd_(th, tl), xy = x + y;
    int yinf = fabs(y) == INFINITY;
    double sp = (ax > 1.0) == (y > 0.0) ? INFINITY : 0.0;   /* x = 0 or inf, or y = +-inf */
    r = st_seld_((!fin) | yinf, sp, r);
    r = st_seld_((ax == 1.0) & yinf, 1.0, r);               /* pow(-1, +-inf) = 1 */
    int64_t kind = st_intkind_d_(y);
    r = st_negd_if_((st_dbits_(x) >> 63 != 0) & (kind == 2), r); /* x < 0 (-0, -inf too), odd y */
    r = st_seld_((x < 0.0) & (x > -INFINITY) & (kind == 0), NAN, r); /* x < 0, non-integer y */
    r = st_seld_((x != x) | (y != y), xy, r);
    return st_seld_((y == 0.0) | (x == 1.0), 1.0, r);       /* even for a NaN operand */
}
/* The float pow: log|x| to about 2^-46 and e^t in double, one rounding to float at the end. */
ST_FN float st_powf_(float x, float y) {
    float ax = fabsf(x);
    uint32_t ua = st_fbits_(ax);
    int fin = ua - 1u < 0x7f7fffffu;
    uint32_t sub = ua < 0x00800000u;
    uint32_t ix = st_fbits_(ax * st_bitsf_(0x3f800000u + sub * (23u << 23))); /* any bits */
    uint32_t mb = ix & 0x007fffffu;
    uint32_t big = mb > 0x003504f3u;                        /* m in [sqrt(1/2), sqrt(2)) */
    int32_t e = (int32_t)((ix >> 23) & 0xffu) - 127 - (int32_t)(sub * 23u) + (int32_t)big;
    double m = (double)st_bitsf_(mb | (0x3f800000u - (big << 23)));
    double s = (m - 1.0) / (m + 1.0), z = s * s;            /* log m = 2 atanh(s), |s| < 0.172 */
    double q = 0x1.af286bca1af28p-4;
    q = 0x1.e1e1e1e1e1e1ep-4 + z * q; q = 0x1.1111111111111p-3 + z * q;
    q = 0x1.3b13b13b13b14p-3 + z * q; q = 0x1.745d1745d1746p-3 + z * q;
    q = 0x1.c71c71c71c71cp-3 + z * q; q = 0x1.2492492492492p-2 + z * q;
    q = 0x1.999999999999ap-2 + z * q; q = 0x1.5555555555555p-1 + z * q;
    double lg = (double)e * 0x1.62e42fefa39efp-1 + (2.0 * s + (s * z) * q);
    double t = (double)y * lg;                              /* |t| < 2^136: no overflow */
    double tc = st_clampd_(t, 110.0);                       /* e^110 and e^-110 round to inf, 0 */
    double fk;
    int64_t k = st_rint_k_(tc * 0x1.71547652b82fep0, &fk);
    double r = (tc - fk * ST_LN2_HI) - fk * ST_LN2_LO;
    double p = 0x1.27e4fb7789f5cp-22;                       /* e^r, Taylor to r^10 */
    p = 0x1.71de3a556c734p-19 + r * p; p = 0x1.a01a01a01a01ap-16 + r * p;
    p = 0x1.a01a01a01a01ap-13 + r * p; p = 0x1.6c16c16c16c17p-10 + r * p;
    p = 0x1.1111111111111p-7 + r * p; p = 0x1.5555555555555p-5 + r * p;
    p = 0x1.5555555555555p-3 + r * p; p = 0.5 + r * p;
    p = 1.0 + (r + (r * r) * p);
    float res = (float)(p * st_bitsd_((uint64_t)(k + 1023) << 52)), xy = x + y;
    int yinf = fabsf(y) == INFINITY;
    float sp = (ax > 1.0f) == (y > 0.0f) ? INFINITY : 0.0f;
    res = st_self_((!fin) | yinf, sp, res);
    res = st_self_((ax == 1.0f) & yinf, 1.0f, res);
    int32_t kind = st_intkind_f_(y);
    res = st_negf_if_((int)(st_fbits_(x) >> 31) & (kind == 2), res);
    res = st_self_((x < 0.0f) & (x > -INFINITY) & (kind == 0), NAN, res);
    res = st_self_((x != x) | (y != y), xy, res);
    return st_self_((y == 0.0f) | (x == 1.0f), 1.0f, res);
}

/* ---- erf (double): x P(x^2) below 0.875; above, 1 - e^(-x^2) erfcx(x) with erfcx a polynomial
 * in s = (4 / (4 + x) - mid) / half (our own Chebyshev fits, tools/opmath_consts.py: errors 3e-19
 * and 6e-20 before the coefficients' rounding); x^2 exact (Dekker) into e^. ---- */
ST_FN double st_erfd_(double x) {
    double a = fabs(x), z = a * a;
    double p = -0x1.dc6f00288b59bp-31;
    p = 0x1.e541441ab429dp-27 + z * p; p = -0x1.5dcf0eeb43e89p-23 + z * p;
    p = 0x1.b9c0f24056849p-20 + z * p; p = -0x1.f4d0198dfdacdp-17 + z * p;
    p = 0x1.f9a30fd49d11cp-14 + z * p; p = -0x1.c02db363e49a7p-11 + z * p;
    p = 0x1.565bcd0bcba51p-8 + z * p; p = -0x1.b82ce3127b6e8p-6 + z * p;
    p = 0x1.ce2f21a0429b5p-4 + z * p; p = -0x1.812746b0379e5p-2 + z * p;
    p = 0x1.20dd750429b6dp+0 + z * p;
    double ac = st_clampd_(a, 6.0);                         /* erf(6) == 1; below 0.875 unused */
    double s = (4.0 / (4.0 + ac) - 0x1.3873873873874p-1) / 0x1.ae9ae9ae9ae9bp-3;
    double g = 0x1.0a9d24d97407ap-45;                       /* erfcx */
    g = -0x1.4a71b755285c3p-42 + s * g; g = -0x1.1e6963a027461p-39 + s * g;
    g = 0x1.9feba051e32a1p-37 + s * g; g = 0x1.36a006923797cp-33 + s * g;
    g = -0x1.db7e47db07e81p-34 + s * g; g = -0x1.2a461db7884f3p-27 + s * g;
    g = -0x1.94d9b48d87ba4p-25 + s * g; g = 0x1.b36a28c022a03p-23 + s * g;
    g = 0x1.649d03ba2933dp-18 + s * g; g = 0x1.9f98caf62273cp-15 + s * g;
    g = 0x1.4c75836375e3ep-12 + s * g; g = 0x1.9eadfe81aa874p-10 + s * g;
    g = 0x1.a8066c2bf72f5p-8 + s * g; g = 0x1.6c38d7e946288p-6 + s * g;
    g = 0x1.09f756a38d0d5p-4 + s * g; g = 0x1.4b952239e1892p-3 + s * g;
    g = 0x1.a790749e0a025p-3 + s * g;
    double zl, zh = st_two_prod_(ac, ac, &zl);
    double big = st_negd_if_(x < 0.0, 1.0 - st_exp_dd_(-zh, -zl) * g);
    return st_seld_((a < 0.875) | (x != x), x * p, big);   /* NaN: x * p is NaN */
}

/* ---- sin and cos ----
 * x = n pi/2 + r, then the Taylor series of sin or cos of r (|r| <= pi/4) by the quadrant n.
 * Reduction: below 2^19 (f32) or 2^20 (f64), Cody-Waite with pi/2 in pieces of 33 bits (n times a
 * piece is exact; f64 carries r as y0 + y1 through exact two-sums, four pieces, 152 bits of pi/2);
 * above, Payne-Hanek: x 2/pi mod 4 from the integer significand times a window of the bits of 2/pi
 * chosen by the exponent, in integer arithmetic (f32: 96 bits, one 64-bit fixed-point word, and
 * branch-free, so float loops still vectorize; f64: 224 bits in 32-bit limbs, behind a branch).
 * Both keep more bits than the closest float or double comes to a multiple of pi/2 needs. */
ST_FN double st_sin_kernd_(double y0, double y1) { /* sin(y0 + y1), |y1| <= 2^-52 |y0| */
    double z = y0 * y0, v = z * y0;
    double p = 0x1.952c77030ad4ap-49;                       /* Taylor to y^17 */
    p = -0x1.ae7f3e733b81fp-41 + z * p; p = 0x1.6124613a86d09p-33 + z * p;
    p = -0x1.ae64567f544e4p-26 + z * p; p = 0x1.71de3a556c734p-19 + z * p;
    p = -0x1.a01a01a01a01ap-13 + z * p; p = 0x1.1111111111111p-7 + z * p;
    p = -0x1.5555555555555p-3 + z * p;
    return y0 + (v * p + y1 * (1.0 - 0.5 * z));
}
ST_FN double st_cos_kernd_(double y0, double y1) { /* cos(y0 + y1); w's rounding error is exact */
    double z = y0 * y0, hz = 0.5 * z, w = 1.0 - hz;
    double q = 0x1.ae7f3e733b81fp-45;                       /* Taylor to y^16 */
    q = -0x1.93974a8c07c9dp-37 + z * q; q = 0x1.1eed8eff8d898p-29 + z * q;
    q = -0x1.27e4fb7789f5cp-22 + z * q; q = 0x1.a01a01a01a01ap-16 + z * q;
    q = -0x1.6c16c16c16c17p-10 + z * q; q = 0x1.5555555555555p-5 + z * q;
    return w + (((1.0 - w) - hz) + ((z * z) * q - y0 * y1));
}
/* Payne-Hanek for 2^20 <= ax < inf: returns y0 (and *y1, *n) with ax = n pi/2 + y0 + y1. */
ST_FN double st_rem_pio2_large_(double ax, double *y1, int32_t *n) {
    static const uint32_t tpi[42] = {0, 0, /* two zero words, then the bits of 2/pi */
        0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u, 0xdb629599u, 0x3c439041u, 0xfe5163abu,
        0xdebbc561u, 0xb7246e3au, 0x424dd2e0u, 0x06492eeau, 0x09d1921cu, 0xfe1deb1cu, 0xb129a73eu,
        0xe88235f5u, 0x2ebb4484u, 0xe99c7026u, 0xb45f7e41u, 0x3991d639u, 0x835339f4u, 0x9c845f8bu,
        0xbdf9283bu, 0x1ff897ffu, 0xde05980fu, 0xef2f118bu, 0x5a0a6d1fu, 0x6d367ecfu, 0x27cb09b7u,
        0x4f463f66u, 0x9e5fea2du, 0x7527bac7u, 0xebe5f17bu, 0x3d0739f7u, 0x8a5292eau, 0x6bfb5fb1u,
        0x1f8d5d08u, 0x56033046u, 0xfc7b6babu, 0xf0cfbc20u, 0x9af4361du};
    uint64_t u = st_dbits_(ax);
    uint64_t M = (u & 0x000fffffffffffffull) | 0x0010000000000000ull;
    int32_t E = (int32_t)(u >> 52) - 1075;                  /* ax = M 2^E, E >= -32 */
    /* Bits of 2/pi up to E - 2 add multiples of 4 to x 2/pi: the window starts at word k0, the
     * one holding bit E - 1 (word k: bits 32k+1 .. 32k+32; tpi[k + 2]). */
    int32_t k0 = (E + 62) / 32 - 2, s = E - 32 * k0;       /* s in [2, 33] */
    uint32_t p[9], m0 = (uint32_t)M, m1 = (uint32_t)(M >> 32);
    uint64_t c = 0;
    for (int i = 0; i < 7; i++) {                           /* p = m0 W, W = words k0 .. k0+6 */
        uint64_t t = (uint64_t)m0 * tpi[k0 + 8 - i] + c;
        p[i] = (uint32_t)t;
        c = t >> 32;
    }
    p[7] = (uint32_t)c;
    c = 0;
    for (int i = 0; i < 7; i++) {                           /* p += m1 W 2^32 */
        uint64_t t = (uint64_t)m1 * tpi[k0 + 8 - i] + p[i + 1] + c;
        p[i + 1] = (uint32_t)t;
        c = t >> 32;
    }
    p[8] = (uint32_t)c;
    /* x 2/pi = p 2^(s - 224): its units bit is bit 224 - s of p; take 2 integer and 126 fraction
     * bits, from bit 98 - s up */
    uint64_t w[2];
    for (int h = 0; h < 2; h++) {
        int32_t off = 98 - s + 64 * h, li = off >> 5, sh = off & 31;
        uint64_t lo2 = ((uint64_t)p[li + 1] << 32) | p[li];
        w[h] = (lo2 >> sh) | (((uint64_t)p[li + 2] << 32) << (32 - sh));
    }
    uint64_t fh = w[1] & 0x3fffffffffffffffull, fl = w[0];
    uint32_t nq = (uint32_t)(w[1] >> 62), neg = (uint32_t)(w[1] >> 61) & 1u;
    if (neg) { /* fraction >= 1/2: round n up, and take 1 - fraction */
        nq += 1;
        fh = 0x4000000000000000ull - fh - (fl != 0);
        fl = 0 - fl;
    }
    /* the fraction (126 bits) as three exact doubles of 42 bits, then times pi/2 */
    double da = (double)(fh >> 20) * 0x1p-42;
    double db = (double)(((fh & 0xfffffu) << 22) | (fl >> 42)) * 0x1p-84;
    double dc = (double)(fl & 0x3ffffffffffull) * 0x1p-126;
    double e1, f = st_two_sum_(da, db, &e1);
    double fe = e1 + dc, pe, pr = st_two_prod_(f, 0x1.921fb54442d18p0, &pe);
    pe = pe + (f * 0x1.1a62633145c07p-54 + fe * 0x1.921fb54442d18p0);
    double y0 = pr + pe;
    *y1 = pe - (y0 - pr);
    *n = (int32_t)(nq & 3u);
    if (neg) { y0 = -y0; *y1 = -*y1; }
    return y0;
}
/* x = n pi/2 + y0 + y1 for finite x; returns y0. */
ST_FN double st_rem_pio2_(double x, double *y1, int32_t *n) {
    if (fabs(x) >= 0x1p20) {
        double y0 = st_rem_pio2_large_(fabs(x), y1, n);
        if (x < 0.0) { y0 = -y0; *y1 = -*y1; *n = -*n; }
        return y0;
    }
    double fn = st_rintd_(x * 0x1.45f306dc9c883p-1);       /* |n| < 2^20 */
    double r0 = x - fn * 0x1.921fb54400000p+0;              /* exact */
    double a1, a0 = st_two_sum_(r0, -(fn * 0x1.0b4611a600000p-34), &a1);
    double b1, b0 = st_two_sum_(a0, -(fn * 0x1.3198a2e000000p-69), &b1);
    double lo = (a1 + b1) - fn * 0x1.b839a252049c1p-104;
    double e, y0 = st_two_sum_(b0, lo, &e);
    *y1 = e;
    *n = (int32_t)fn;
    return y0;
}
ST_FN double st_sincosd_(double x, uint32_t cosine) {
    int fin = fabs(x) < INFINITY;
    double y1;
    int32_t n;
    double y0 = st_rem_pio2_(fin ? x : 0.0, &y1, &n);
    uint32_t q = (uint32_t)n + cosine;
    double v = st_negd_if_((int)(q & 2u), st_seld_((int)(q & 1u), st_cos_kernd_(y0, y1), st_sin_kernd_(y0, y1)));
    v = st_seld_((x == 0.0) & !cosine, x, v);               /* sin(-0) = -0 */
    return st_seld_(fin, v, x - x);                         /* inf, NaN: NaN */
}
ST_FN double st_sind_(double x) { return st_sincosd_(x, 0); }
ST_FN double st_cosd_(double x) { return st_sincosd_(x, 1); }
/* float: the reduction and the series in double, one rounding to float at the end. */
ST_FN double st_rem_pio2f_(float x, int32_t *n) { /* x finite; returns r, x = n pi/2 + r */
    static const uint32_t tab[23] = { /* tab[j]: the 32 bits of 2/pi from bit 8j - 9 */
        0x0028be60u, 0x28be60dbu, 0xbe60db93u, 0x60db9391u, 0xdb939105u, 0x9391054au, 0x91054a7fu,
        0x054a7f09u, 0x4a7f09d5u, 0x7f09d5f4u, 0x09d5f47du, 0xd5f47d4du, 0xf47d4d37u, 0x7d4d3770u,
        0x4d377036u, 0x377036d8u, 0x7036d8a5u, 0x36d8a566u, 0xd8a5664fu, 0xa5664f10u, 0x664f10e4u,
        0x4f10e410u, 0x10e4107fu};
    double xd = (double)x, kd = xd * 0x1.45f306dc9c883p-1 + 0x1.8p52, fn = kd - 0x1.8p52;
    int32_t nm = (int32_t)(uint32_t)st_dbits_(kd);          /* rint(x 2/pi) below 2^19: no UB above */
    double rm = (xd - fn * 0x1.921fb54400000p+0) - fn * 0x1.0b4611a626331p-34;
    /* |x| >= 2^19: x = M' 2^8q (M' = significand << (E mod 8) < 2^31); three words of 2/pi
     * from bit 8q - 1 give x 2/pi mod 4 in units of 2^-62 */
    uint32_t ux = st_fbits_(x) & 0x7fffffffu;
    int32_t E = (int32_t)(ux >> 23) - 150;
    E = E < -4 ? -4 : (E > 104 ? 104 : E);
    int32_t j = (E + 8) >> 3, sh = (E + 8) & 7;
    uint32_t M = ((ux & 0x7fffffu) | 0x800000u) << sh;
    uint64_t res = ((uint64_t)(uint32_t)(M * tab[j]) << 32) + (uint64_t)M * tab[j + 4]
                   + (((uint64_t)M * tab[j + 8]) >> 32);
    uint64_t nl = (res + (1ull << 61)) >> 62;
    double rl = (double)(int64_t)(res - (nl << 62)) * 0x1.921fb54442d18p-62;
    int32_t nb = (int32_t)(nl & 3u);
    int big = ux >= 0x49000000u, neg = x < 0.0f;            /* |x| >= 2^19 */
    *n = st_seli_(big, st_seli_(neg, -nb, nb), nm);
    return st_seld_(big, st_negd_if_(neg, rl), rm);
}
ST_FN float st_sincos_kernf_(double r, uint32_t q) { /* sin(r + q pi/2), |r| <= pi/4 */
    double z = r * r;
    double s = -0x1.ae64567f544e4p-26;                      /* Taylor to r^11 and r^12 */
    s = 0x1.71de3a556c734p-19 + z * s; s = -0x1.a01a01a01a01ap-13 + z * s;
    s = 0x1.1111111111111p-7 + z * s; s = -0x1.5555555555555p-3 + z * s;
    s = r + (r * z) * s;
    double c = 0x1.1eed8eff8d898p-29;
    c = -0x1.27e4fb7789f5cp-22 + z * c; c = 0x1.a01a01a01a01ap-16 + z * c;
    c = -0x1.6c16c16c16c17p-10 + z * c; c = 0x1.5555555555555p-5 + z * c;
    c = 1.0 + z * (-0.5 + z * c);
    return (float)st_negd_if_((int)(q & 2u), st_seld_((int)(q & 1u), c, s));
}
ST_FN float st_sinf_(float x) {
    int fin = fabsf(x) < INFINITY;
    int32_t n;
    double r = st_rem_pio2f_(st_self_(fin, x, 0.0f), &n);
    float v = st_sincos_kernf_(r, (uint32_t)n);
    return st_self_(fin, st_self_(x == 0.0f, x, v), x - x);
}
ST_FN float st_cosf_(float x) {
    int fin = fabsf(x) < INFINITY;
    int32_t n;
    double r = st_rem_pio2f_(st_self_(fin, x, 0.0f), &n);
    return st_self_(fin, st_sincos_kernf_(r, (uint32_t)n + 1u), x - x);
}
/* cos(2 pi u) for u in [0, 1) (the normal RNG): the reduction is exact, 4u - n. */
ST_FN float st_cos2pif_(float u) {
    double a = 4.0 * (double)u, fn = st_rintd_(a);
    return st_sincos_kernf_((a - fn) * 0x1.921fb54442d18p0, (uint32_t)(int32_t)fn + 1u);
}
ST_FN double st_cos2pid_(double u) {
    double a = 4.0 * u, fn = st_rintd_(a), f = a - fn, e;
    double p = st_two_prod_(f, 0x1.921fb54442d18p0, &e);
    e = e + f * 0x1.1a62633145c07p-54;
    double y0 = p + e, y1 = e - (y0 - p);
    uint32_t q = (uint32_t)(int32_t)fn + 1u;
    return st_negd_if_((int)(q & 2u), st_seld_((int)(q & 1u), st_cos_kernd_(y0, y1), st_sin_kernd_(y0, y1)));
}

/* ---- per-type helpers (integer math wraps through unsigned; never UB) ---- */
#define ST_WRAP32(a, op, b) ((int32_t)((uint32_t)(a) op (uint32_t)(b)))
#define ST_WRAP64(a, op, b) ((int64_t)((uint64_t)(a) op (uint64_t)(b)))
ST_FN float st_neg_f32(float x) { return -x; }
ST_FN double st_neg_f64(double x) { return -x; }
ST_FN int32_t st_neg_i32(int32_t x) { return ST_WRAP32(0, -, x); }
ST_FN int64_t st_neg_i64(int64_t x) { return ST_WRAP64(0, -, x); }
ST_FN uint8_t st_neg_u8(uint8_t x) { return x; }
ST_FN float st_abs_f32(float x) { return fabsf(x); }
ST_FN double st_abs_f64(double x) { return fabs(x); }
ST_FN int32_t st_abs_i32(int32_t x) { return x < 0 ? ST_WRAP32(0, -, x) : x; }
ST_FN int64_t st_abs_i64(int64_t x) { return x < 0 ? ST_WRAP64(0, -, x) : x; }
ST_FN uint8_t st_abs_u8(uint8_t x) { return x; }
/* One compare (NaN fails it and passes through; -0 gives +0): GCC makes it a compare and a mask.
 * The former `((x > 0) | (x != x)) ? x : 0` stayed a compare and a branch in a scalar loop, where
 * a loop did not vectorize: the ReLU'd, zero-padded input of a conv's columns took 10x longer */
ST_FN float st_relu_f32(float x) { return x <= 0.0f ? 0.0f : x; }
ST_FN double st_relu_f64(double x) { return x <= 0.0 ? 0.0 : x; }
ST_FN int32_t st_relu_i32(int32_t x) { return x > 0 ? x : 0; }
ST_FN int64_t st_relu_i64(int64_t x) { return x > 0 ? x : 0; }
ST_FN uint8_t st_relu_u8(uint8_t x) { return x; }
ST_FN float st_sign_f32(float x) { return x != x ? x : (float)((x > 0.0f) - (x < 0.0f)); }
ST_FN double st_sign_f64(double x) { return x != x ? x : (double)((x > 0.0) - (x < 0.0)); }
ST_FN int32_t st_sign_i32(int32_t x) { return (x > 0) - (x < 0); }
ST_FN int64_t st_sign_i64(int64_t x) { return (x > 0) - (x < 0); }
ST_FN uint8_t st_sign_u8(uint8_t x) { return x != 0; }
#define ST_IDENT_INT(name)                                                                      \
    ST_FN int32_t name##_i32(int32_t x) { return x; }                                           \
    ST_FN int64_t name##_i64(int64_t x) { return x; }                                           \
    ST_FN uint8_t name##_u8(uint8_t x) { return x; }
ST_IDENT_INT(st_floor)
ST_IDENT_INT(st_ceil)
ST_IDENT_INT(st_round)
ST_FN float st_floor_f32(float x) { return floorf(x); }
ST_FN double st_floor_f64(double x) { return floor(x); }
ST_FN float st_ceil_f32(float x) { return ceilf(x); }
ST_FN double st_ceil_f64(double x) { return ceil(x); }
ST_FN float st_round_f32(float x) { return rintf(x); }  /* half to even */
ST_FN double st_round_f64(double x) { return rint(x); }

ST_FN float st_add_f32(float a, float b) { return a + b; }
ST_FN double st_add_f64(double a, double b) { return a + b; }
ST_FN int32_t st_add_i32(int32_t a, int32_t b) { return ST_WRAP32(a, +, b); }
ST_FN int64_t st_add_i64(int64_t a, int64_t b) { return ST_WRAP64(a, +, b); }
ST_FN uint8_t st_add_u8(uint8_t a, uint8_t b) { return (uint8_t)(a | b); }
ST_FN float st_sub_f32(float a, float b) { return a - b; }
ST_FN double st_sub_f64(double a, double b) { return a - b; }
ST_FN int32_t st_sub_i32(int32_t a, int32_t b) { return ST_WRAP32(a, -, b); }
ST_FN int64_t st_sub_i64(int64_t a, int64_t b) { return ST_WRAP64(a, -, b); }
ST_FN uint8_t st_sub_u8(uint8_t a, uint8_t b) { return (uint8_t)(a ^ b); }
ST_FN float st_mul_f32(float a, float b) { return a * b; }
ST_FN double st_mul_f64(double a, double b) { return a * b; }
ST_FN int32_t st_mul_i32(int32_t a, int32_t b) { return ST_WRAP32(a, *, b); }
ST_FN int64_t st_mul_i64(int64_t a, int64_t b) { return ST_WRAP64(a, *, b); }
ST_FN uint8_t st_mul_u8(uint8_t a, uint8_t b) { return (uint8_t)(a & b); }
ST_FN float st_div_f32(float a, float b) { return a / b; }
ST_FN double st_div_f64(double a, double b) { return a / b; }
ST_FN int64_t st_ipow_(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t r = 1, base = (uint64_t)a;
    for (; b; b >>= 1, base *= base) if (b & 1) r *= base;
    return (int64_t)r;
}
ST_FN float st_pow_f32(float a, float b) { return st_powf_(a, b); }
ST_FN double st_pow_f64(double a, double b) { return st_powd_(a, b); }
ST_FN int32_t st_pow_i32(int32_t a, int32_t b) { return (int32_t)st_ipow_(a, b); }
ST_FN int64_t st_pow_i64(int64_t a, int64_t b) { return st_ipow_(a, b); }
ST_FN uint8_t st_pow_u8(uint8_t a, uint8_t b) { return (uint8_t)(b == 0 || a); }
/* max/min: NaN in either operand propagates. */
#define ST_MAXMIN(T, S)                                                                         \
    ST_FN T st_max_##S(T a, T b) { return ((a != a) | (a > b)) ? a : b; }                          \
    ST_FN T st_min_##S(T a, T b) { return ((a != a) | (a < b)) ? a : b; }
ST_MAXMIN(float, f32)
ST_MAXMIN(double, f64)
ST_MAXMIN(int32_t, i32)
ST_MAXMIN(int64_t, i64)
ST_MAXMIN(uint8_t, u8)
ST_FN float st_fmod_f32(float a, float b) { return fmodf(a, b); }
ST_FN double st_fmod_f64(double a, double b) { return fmod(a, b); }
ST_FN int32_t st_fmod_i32(int32_t a, int32_t b) { return (b == 0 || b == -1) ? 0 : a % b; }
ST_FN int64_t st_fmod_i64(int64_t a, int64_t b) { return (b == 0 || b == -1) ? 0 : a % b; }
ST_FN uint8_t st_fmod_u8(uint8_t a, uint8_t b) { return (uint8_t)(b ? a % b : 0); }
/* remainder: the result takes the divisor's sign (Python/Lua %). */
#define ST_REM(T, S)                                                                            \
    ST_FN T st_rem_##S(T a, T b) {                                                              \
        T r = st_fmod_##S(a, b);                                                                \
        return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;                               \
    }
ST_REM(float, f32)
ST_REM(double, f64)
ST_REM(int32_t, i32)
ST_REM(int64_t, i64)
ST_FN uint8_t st_rem_u8(uint8_t a, uint8_t b) { return st_fmod_u8(a, b); }

/* ---- the op macros (MATH column of ops.def) ---- */
#ifdef __CUDACC__
/* C++: overloads f##_o_ chosen by the type of the (first) operand, as _Generic does in C; the
 * second operand converts to the first's type as the C call converts it. */
#define ST_OVL1_(f)                                                                             \
    ST_FN float f##_o_(float x) { return f##_f32(x); }                                          \
    ST_FN double f##_o_(double x) { return f##_f64(x); }                                        \
    ST_FN int32_t f##_o_(int32_t x) { return f##_i32(x); }                                      \
    ST_FN int64_t f##_o_(int64_t x) { return f##_i64(x); }                                      \
    ST_FN uint8_t f##_o_(uint8_t x) { return f##_u8(x); }
#define ST_OVL2_(f)                                                                             \
    template <class B> ST_FN float f##_o_(float a, B b) { return f##_f32(a, (float)b); }        \
    template <class B> ST_FN double f##_o_(double a, B b) { return f##_f64(a, (double)b); }     \
    template <class B> ST_FN int32_t f##_o_(int32_t a, B b) { return f##_i32(a, (int32_t)b); } \
    template <class B> ST_FN int64_t f##_o_(int64_t a, B b) { return f##_i64(a, (int64_t)b); } \
    template <class B> ST_FN uint8_t f##_o_(uint8_t a, B b) { return f##_u8(a, (uint8_t)b); }
ST_OVL1_(st_neg)
ST_OVL1_(st_abs)
ST_OVL1_(st_relu)
ST_OVL1_(st_floor)
ST_OVL1_(st_ceil)
ST_OVL1_(st_round)
ST_OVL1_(st_sign)
ST_OVL2_(st_add)
ST_OVL2_(st_sub)
ST_OVL2_(st_mul)
ST_OVL2_(st_pow)
ST_OVL2_(st_max)
ST_OVL2_(st_min)
ST_OVL2_(st_fmod)
ST_OVL2_(st_rem)
#define ST_G1(f, x) f##_o_(x)
#define ST_G2(f, a, b) f##_o_(a, b)
/* float-only ops: float x calls ff, anything else fd on (double)x (the lambdas name the libm
 * function or macro argument, as the _Generic selection does) */
template <class F, class D> ST_FN float st_gf_(F ff, D, float x) { return ff(x); }
template <class F, class D, class T> ST_FN double st_gf_(F, D fd, T x) { return fd((double)x); }
#define ST_GF(ff, fd, x) st_gf_([](float v_) { return ff(v_); }, [](double v_) { return fd(v_); }, x)
#else
#define ST_G1(f, x)                                                                             \
    _Generic((x), float: f##_f32, double: f##_f64, int32_t: f##_i32, int64_t: f##_i64,         \
             uint8_t: f##_u8)(x)
#define ST_G2(f, a, b)                                                                          \
    _Generic((a), float: f##_f32, double: f##_f64, int32_t: f##_i32, int64_t: f##_i64,         \
             uint8_t: f##_u8)(a, b)
/* float-only ops: the runtime casts ints to f32 first; anything but float goes to double. */
#define ST_GF(ff, fd, x) _Generic((x), float: ff, default: fd)(x)
#endif
ST_FN float st_rsqrtf_(float x) { return 1.0f / sqrtf(x); }
ST_FN double st_rsqrtd_(double x) { return 1.0 / sqrt(x); }
ST_FN float st_recipf_(float x) { return 1.0f / x; }
ST_FN double st_recipd_(double x) { return 1.0 / x; }
ST_FN float st_sigmoidf_(float x) { return 1.0f / (1.0f + st_expf_(-x)); }
ST_FN double st_sigmoidd_(double x) { return 1.0 / (1.0 + st_expd_(-x)); }
ST_FN float st_siluf_(float x) { return x * st_sigmoidf_(x); }
ST_FN double st_silud_(double x) { return x * st_sigmoidd_(x); }
ST_FN float st_geluf_(float x) { return 0.5f * x * (1.0f + st_erff_(x * 0.707106781186547524f)); }
ST_FN double st_gelud_(double x) { return 0.5 * x * (1.0 + st_erfd_(x * 0.707106781186547524)); }
/* d/dx gelu(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi): with t = x / sqrt(2),
 * 0.5 (1 + erf(t)) + x exp(-t^2) / sqrt(2 pi), the exp shared with erf's large branch (one exp
 * instead of two: the GELU's backward, ~1.5x; bench/NOTES.md seventeenth pass). The x phi(x) term
 * is 0 where exp(-t^2) is (|x| > ~14, infinities included: 1 at +inf, 0 at -inf, not inf * 0). */
ST_FN float st_gelu_gradf_(float x) {
    float t = x * 0.707106781186547524f, a = fabsf(t), p = st_erff_p_(a * a);
    float ac = a < 0.921875f ? 0.921875f : (a > 4.0f ? 4.0f : a);
    float r = st_erff_r_(ac), e = st_expf_(-(a * a));   /* exp(-ac^2) where the large branch is taken */
    float ef = a < 0.921875f ? t * p : copysignf(ST_FMAF(-e, r, 1.0f), t);
    float xp = e == 0.0f ? 0.0f : x * e * 0.398942280401432678f;
    return 0.5f * (1.0f + ef) + xp;
}
ST_FN double st_gelu_gradd_(double x) {
    double e = st_expd_(-0.5 * (x * x));
    double xp = e == 0.0 ? 0.0 : x * e * 0.398942280401432678;
    return 0.5 * (1.0 + st_erfd_(x * 0.707106781186547524)) + xp;
}
ST_FN float st_gelu_tanhf_(float x) {
    return 0.5f * x * (1.0f + st_tanhf_(0.797884560802865356f * (x + 0.044715f * x * x * x)));
}
ST_FN double st_gelu_tanhd_(double x) {
    return 0.5 * x * (1.0 + st_tanhd_(0.797884560802865356 * (x + 0.044715 * x * x * x)));
}
ST_FN double st_div_d_(double a, double b) { return a / b; }

#define om_neg(x) ST_G1(st_neg, x)
#define om_abs(x) ST_G1(st_abs, x)
#define om_exp(x) ST_GF(st_expf_, st_expd_, x)
#define om_log(x) ST_GF(st_logf_, st_logd_, x)
#define om_sqrt(x) ST_GF(sqrtf, sqrt, x)
#define om_rsqrt(x) ST_GF(st_rsqrtf_, st_rsqrtd_, x)
#define om_sin(x) ST_GF(st_sinf_, st_sind_, x)
#define om_cos(x) ST_GF(st_cosf_, st_cosd_, x)
#define om_tanh(x) ST_GF(st_tanhf_, st_tanhd_, x)
#define om_sigmoid(x) ST_GF(st_sigmoidf_, st_sigmoidd_, x)
#define om_relu(x) ST_G1(st_relu, x)
#define om_erf(x) ST_GF(st_erff_, st_erfd_, x)
#define om_gelu(x) ST_GF(st_geluf_, st_gelud_, x)
#define om_gelu_tanh(x) ST_GF(st_gelu_tanhf_, st_gelu_tanhd_, x)
#define om_gelu_grad(x) ST_GF(st_gelu_gradf_, st_gelu_gradd_, x)
#define om_silu(x) ST_GF(st_siluf_, st_silud_, x)
#define om_floor(x) ST_G1(st_floor, x)
#define om_ceil(x) ST_G1(st_ceil, x)
#define om_round(x) ST_G1(st_round, x)
#define om_sign(x) ST_G1(st_sign, x)
#define om_recip(x) ST_GF(st_recipf_, st_recipd_, x)
#define om_not(x) ((uint8_t)((x) == 0))
#define om_log1p(x) ST_GF(st_log1pf_, st_log1pd_, x)
#define om_expm1(x) ST_GF(st_expm1f_, st_expm1d_, x)
#define om_cast(x) (x) /* marker: CAST is rendered with ST_CVT(to, v) */

#define om_add(a, b) ST_G2(st_add, a, b)
#define om_sub(a, b) ST_G2(st_sub, a, b)
#define om_mul(a, b) ST_G2(st_mul, a, b)
#ifdef __CUDACC__
template <class B> ST_FN float st_div_o_(float a, B b) { return st_div_f32(a, (float)b); }
template <class A, class B> ST_FN double st_div_o_(A a, B b) { return st_div_d_((double)a, (double)b); }
#define om_div(a, b) st_div_o_(a, b)
#else
#define om_div(a, b) _Generic((a), float: st_div_f32, default: st_div_d_)(a, b)
#endif
#define om_pow(a, b) ST_G2(st_pow, a, b)
#define om_max(a, b) ST_G2(st_max, a, b)
#define om_min(a, b) ST_G2(st_min, a, b)
#define om_fmod(a, b) ST_G2(st_fmod, a, b)
#define om_rem(a, b) ST_G2(st_rem, a, b)
#define om_eq(a, b) ((uint8_t)((a) == (b)))
#define om_ne(a, b) ((uint8_t)((a) != (b)))
#define om_lt(a, b) ((uint8_t)((a) < (b)))
#define om_le(a, b) ((uint8_t)((a) <= (b)))
#define om_gt(a, b) ((uint8_t)((a) > (b)))
#define om_ge(a, b) ((uint8_t)((a) >= (b)))
#define om_and(a, b) ((uint8_t)(((a) != 0) & ((b) != 0)))
#define om_or(a, b) ((uint8_t)(((a) != 0) | ((b) != 0)))
#ifdef __CUDACC__
#define om_where(c, a, b) ((c) ? (a) : (b))   /* a predicated select on the GPU */
#else
/* float and double select by bits: GCC keeps `c ? a : b` on floats as a branch (mispredicted on a
 * ReLU mask or a pool's tie mask, ~8 ns an element in a pool's backward) and the loop around it
 * scalar; an and/or of the two values' bits is the same value, NaN payloads included */
ST_FN float st_where_f32(uint8_t c, float a, float b) {
    uint32_t m = 0u - (uint32_t)(c != 0);
    return st_bitsf_((st_fbits_(a) & m) | (st_fbits_(b) & ~m));
}
ST_FN double st_where_f64(uint8_t c, double a, double b) {
    uint64_t m = (uint64_t)0 - (uint64_t)(c != 0);
    return st_bitsd_((st_dbits_(a) & m) | (st_dbits_(b) & ~m));
}
#define om_where(c, a, b)                                                                       \
    _Generic((a), float: st_where_f32((uint8_t)((c) != 0), (float)(a), (float)(b)),            \
             double: st_where_f64((uint8_t)((c) != 0), (double)(a), (double)(b)),          \
             default: ((c) ? (a) : (b)))
#endif

/* ---- Philox 4x32-10 (counter-based RNG) ---- */
ST_FN void st_philox4x32_10_raw(const uint32_t ctr[4], const uint32_t key[2],
                                        uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
/* key = {lo32(seed), hi32(seed)}, counter = {lo32(c), hi32(c), 0, 0} */
ST_FN void st_philox4x32_10(uint64_t seed, uint64_t c, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    st_philox4x32_10_raw(ctr, key, out);
}
ST_FN float st_rand_uniform_f32(uint64_t seed, uint64_t c) {
    uint32_t o[4];
    st_philox4x32_10(seed, c, o);
    return (float)(o[0] >> 8) * 0x1p-24f;
}
ST_FN double st_rand_uniform_f64(uint64_t seed, uint64_t c) {
    uint32_t o[4];
    st_philox4x32_10(seed, c, o);
    return (double)((((uint64_t)o[0] << 32) | o[1]) >> 11) * 0x1p-53;
}
ST_FN float st_rand_normal_f32(uint64_t seed, uint64_t c) {
    uint32_t o[4];
    st_philox4x32_10(seed, c, o);
    float u1 = (float)((o[0] >> 8) + 1) * 0x1p-24f, u2 = (float)(o[1] >> 8) * 0x1p-24f;
    return sqrtf(-2.0f * st_logf_(u1)) * st_cos2pif_(u2);
}
ST_FN double st_rand_normal_f64(uint64_t seed, uint64_t c) {
    uint32_t o[4];
    st_philox4x32_10(seed, c, o);
    double u1 = (double)(((((uint64_t)o[0] << 32) | o[1]) >> 11) + 1) * 0x1p-53;
    double u2 = (double)((((uint64_t)o[2] << 32) | o[3]) >> 11) * 0x1p-53;
    return sqrt(-2.0 * st_logd_(u1)) * st_cos2pid_(u2);
}
/* Integer in [lo, hi); hi <= lo yields lo. */
ST_FN int64_t st_rand_int(uint64_t seed, uint64_t c, int64_t lo, int64_t hi) {
    uint32_t o[4];
    st_philox4x32_10(seed, c, o);
    uint64_t range = (uint64_t)hi - (uint64_t)lo;
    if (hi <= lo) return lo;
    return (int64_t)((uint64_t)lo + ((((uint64_t)o[0] << 32) | o[1]) % range));
}

#ifdef __CUDACC__
/* ---- CUDA only: combines across the threads of a row (jit/render_cuda.c) ----
 * st_shfl_xor_: the value of lane (lane ^ m) of the warp; st_shfl0_: lane 0's value. Every lane
 * of the warp must call them (full mask). uint8_t travels as an int. */
#define ST_FULL_MASK 0xffffffffu
ST_FN float st_shfl_xor_(float v, int m) { return __shfl_xor_sync(ST_FULL_MASK, v, m); }
ST_FN double st_shfl_xor_(double v, int m) { return __shfl_xor_sync(ST_FULL_MASK, v, m); }
ST_FN int32_t st_shfl_xor_(int32_t v, int m) { return __shfl_xor_sync(ST_FULL_MASK, v, m); }
ST_FN int64_t st_shfl_xor_(int64_t v, int m) { return __shfl_xor_sync(ST_FULL_MASK, v, m); }
ST_FN uint8_t st_shfl_xor_(uint8_t v, int m) { return (uint8_t)__shfl_xor_sync(ST_FULL_MASK, (int)v, m); }
ST_FN float st_shfl0_(float v) { return __shfl_sync(ST_FULL_MASK, v, 0); }
ST_FN double st_shfl0_(double v) { return __shfl_sync(ST_FULL_MASK, v, 0); }
ST_FN int32_t st_shfl0_(int32_t v) { return __shfl_sync(ST_FULL_MASK, v, 0); }
ST_FN int64_t st_shfl0_(int64_t v) { return __shfl_sync(ST_FULL_MASK, v, 0); }
ST_FN uint8_t st_shfl0_(uint8_t v) { return (uint8_t)__shfl_sync(ST_FULL_MASK, (int)v, 0); }
/* Argmax/argmin partials (value, index; index < 0: empty) over disjoint index sets: the merge is
 * the serial scan's answer (the first NaN, else the first index of the max/min), whatever the
 * grouping, and symmetric, so every lane that merges the same partials gets the same bits. */
template <class T> ST_FN void st_arg_merge_(T *v, int64_t *i, T v2, int64_t i2, int mx) {
    bool n1 = *v != *v, n2 = v2 != v2;
    bool better = mx ? v2 > *v : v2 < *v;
    bool take = i2 >= 0 && (*i < 0 || (n1 ? (n2 && i2 < *i) : (n2 || better || (v2 == *v && i2 < *i))));
    if (take) { *v = v2; *i = i2; }
}
/* A barrier for the threads of one row: a warp (rt <= 32) or the whole block (rt > 32: a row
 * per block); also orders their memory accesses. */
#define ST_ROW_SYNC(rt) do { if ((rt) <= 32) __syncwarp(); else __syncthreads(); } while (0)

/* ---- CUDA only: tensor-core instructions (jit/render_cuda_mma.c), one function each ----
 * st_mma_<type>_(d, a, b): d += A*B for the warp's m16n8k16 (f16, bf16) or m16n8k8 (tf32) tile, f32
 * accumulators d[4], this lane's A registers a[4] and B registers b[2] (PTX ISA fragment layouts);
 * every lane of the warp calls it together. st_cvt_tf32_: cvt.rna.tf32.f32 (to nearest, ties away).
 * The simulated device of the tests (tests/sim, ST_CUDA_SIM) replaces each by its model of the
 * instruction; on a GPU they are the instruction itself. */
#ifdef ST_CUDA_SIM
ST_FN void st_mma_f16_(float d[4], const uint32_t a[4], const uint32_t b[2]) { st_sim_mma(0, d, a, b); }
ST_FN void st_mma_bf16_(float d[4], const uint32_t a[4], const uint32_t b[2]) { st_sim_mma(1, d, a, b); }
ST_FN void st_mma_tf32_(float d[4], const uint32_t a[4], const uint32_t b[2]) { st_sim_mma(2, d, a, b); }
ST_FN uint32_t st_cvt_tf32_(float x) { return st_sim_cvt_tf32(x); }
#else
#define ST_MMA_(name, ptx)                                                                      \
    ST_FN void name(float d[4], const uint32_t a[4], const uint32_t b[2]) {                     \
        asm(ptx " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"              \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                    \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                \
    }
ST_MMA_(st_mma_f16_, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
ST_MMA_(st_mma_bf16_, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
ST_MMA_(st_mma_tf32_, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
ST_FN uint32_t st_cvt_tf32_(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
#endif
#endif

#ifndef __CUDACC__
/* The row blocks' partial sums of a column-blocked loop (jit/render_c_cols.c "row blocks"):
 * acc[l] += part[r * stride + l] for r = 1 .. nb - 1 in that order, l < m. Out of line and not
 * vectorized: a vectorized loop nest printed in each kernel, or here, added 50-80 ms to GCC's
 * time for a layernorm backward's column kernel (its unit 0.47 s). Scalar, a (4096, 1024) sum's
 * 16 blocks are 15K independent adds per accumulator (microseconds, estimated, not timed). */
#ifdef __clang__ /* no `optimize` attribute (an unknown-attribute warning: -Werror builds fail) */
__attribute__((noinline, unused))
#else
__attribute__((noinline, unused, optimize("no-tree-vectorize")))
#endif
static void st_rows_partials(double *restrict acc, const double *restrict part, int64_t nb, int64_t stride, int64_t m) {
    for (int64_t r = 1; r < nb; r++)
        for (int64_t l = 0; l < m; l++) acc[l] = om_add(acc[l], part[r * stride + l]);
}
#endif

/* The CPU GEMM is the prelude's second file (base/opmath_gemm.h, after everything above) and its
 * attention the third (base/opmath_attn.h): C units
 * get them through these includes; the JIT's prelude text is the three files joined (Makefile:
 * gen/prelude.h), which defines ST_PRELUDE_JOINED so that the include is not needed. */
#ifndef ST_PRELUDE_JOINED
#include "base/opmath_gemm.h"
#include "base/opmath_attn.h"
#endif
#endif
