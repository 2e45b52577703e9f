/*
 * opmath.h — the math of every elementwise op, dtype conversions, the Philox RNG and the GEMM.
 *
 * This header is BOTH #included by the library (the reference interpreter) AND prepended as text
 * to every JIT compilation unit (tools/embed.sh -> st_prelude_src). Invariant: the interpreter
 * and the generated kernels run the very same code here, so given the same compiler flags they
 * get bit-identical results. Hence: self-contained (C11 + libm only), everything ST_FN
 * or a macro, no globals, no reliance on -ffast-math. Float exp/log/tanh/expm1/log1p/erf are our
 * own branch-free code so GCC can vectorize fused loops; double versions call libm.
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
 * device math library (expf, sqrtf, fmodf, rintf, erf, tanh, ...) is built in. */
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
ST_FN float st_expf_(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    xc = xc == xc ? xc : 0.0f;
    int32_t n;
    float p = 1.0f + st_exp_reduce_(xc, &n);
    int32_t n1 = n / 2, n2 = n - n1;                        /* two steps: 2^n may not be a float */
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
 * of erf(x)/x and erfc(x) exp(x^2), errors 5e-10 relative and 1e-9 absolute) ---- */
ST_FN float st_erff_(float x) {
    float a = fabsf(x), z = a * a;
    float p = 8.392699158578376e-05f;
    p = -0.0008148509043693769f + z * p; p = 0.0052015923650271245f + z * p;
    p = -0.02685964792204701f + z * p; p = 0.11283700542255143f + z * p;
    p = -0.37612634110642257f + z * p; p = 1.128379166683384f + z * p;
    float ac = a < 0.921875f ? 0.921875f : (a > 4.0f ? 4.0f : a);  /* erf(4) == 1.0f */
    float s = (ac - 2.4609375f) / 1.5390625f;                       /* [0.92, 4] -> [-1, 1] */
    static const float q[13] = {0.21374909276497697f, -0.11748100608515555f,
        0.06134659060319638f, -0.03061823435425792f, 0.01467433200872615f,
        -0.006773163328874492f, 0.0030245319895566246f, -0.0013295082169347214f,
        0.0005607225298515234f, -0.0001964618869058404f, 7.735262756290023e-05f,
        -5.6746328610966544e-05f, 2.195700904576714e-05f};        /* erfc(x) exp(x^2) */
    float r = q[12];
    for (int i = 11; i >= 0; i--) r = q[i] + s * r;
    float big = 1.0f - st_expf_(-(ac * ac)) * r;
    return a < 0.921875f ? x * p : copysignf(big, x);
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
ST_FN float st_relu_f32(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }
ST_FN double st_relu_f64(double x) { return (x > 0.0 || x != x) ? x : 0.0; }
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
ST_FN float st_pow_f32(float a, float b) { return powf(a, b); }
ST_FN double st_pow_f64(double a, double b) { return pow(a, b); }
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
ST_FN double st_sigmoidd_(double x) { return 1.0 / (1.0 + exp(-x)); }
ST_FN float st_siluf_(float x) { return x * st_sigmoidf_(x); }
ST_FN double st_silud_(double x) { return x * st_sigmoidd_(x); }
ST_FN float st_geluf_(float x) { return 0.5f * x * (1.0f + st_erff_(x * 0.707106781186547524f)); }
ST_FN double st_gelud_(double x) { return 0.5 * x * (1.0 + erf(x * 0.707106781186547524)); }
ST_FN float st_gelu_tanhf_(float x) {
    return 0.5f * x * (1.0f + st_tanhf_(0.797884560802865356f * (x + 0.044715f * x * x * x)));
}
ST_FN double st_gelu_tanhd_(double x) {
    return 0.5 * x * (1.0 + tanh(0.797884560802865356 * (x + 0.044715 * x * x * x)));
}
ST_FN double st_div_d_(double a, double b) { return a / b; }

#define om_neg(x) ST_G1(st_neg, x)
#define om_abs(x) ST_G1(st_abs, x)
#define om_exp(x) ST_GF(st_expf_, exp, x)
#define om_log(x) ST_GF(st_logf_, log, x)
#define om_sqrt(x) ST_GF(sqrtf, sqrt, x)
#define om_rsqrt(x) ST_GF(st_rsqrtf_, st_rsqrtd_, x)
#define om_sin(x) ST_GF(sinf, sin, x)
#define om_cos(x) ST_GF(cosf, cos, x)
#define om_tanh(x) ST_GF(st_tanhf_, tanh, x)
#define om_sigmoid(x) ST_GF(st_sigmoidf_, st_sigmoidd_, x)
#define om_relu(x) ST_G1(st_relu, x)
#define om_erf(x) ST_GF(st_erff_, erf, x)
#define om_gelu(x) ST_GF(st_geluf_, st_gelud_, x)
#define om_gelu_tanh(x) ST_GF(st_gelu_tanhf_, st_gelu_tanhd_, x)
#define om_silu(x) ST_GF(st_siluf_, st_silud_, x)
#define om_floor(x) ST_G1(st_floor, x)
#define om_ceil(x) ST_G1(st_ceil, x)
#define om_round(x) ST_G1(st_round, x)
#define om_sign(x) ST_G1(st_sign, x)
#define om_recip(x) ST_GF(st_recipf_, st_recipd_, x)
#define om_not(x) ((uint8_t)((x) == 0))
#define om_log1p(x) ST_GF(st_log1pf_, log1p, x)
#define om_expm1(x) ST_GF(st_expm1f_, expm1, x)
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
#define om_where(c, a, b) ((c) ? (a) : (b))

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
    return sqrtf(-2.0f * st_logf_(u1)) * cosf(6.28318530717958648f * u2);
}
ST_FN double st_rand_normal_f64(uint64_t seed, uint64_t c) {
    uint32_t o[4];
    st_philox4x32_10(seed, c, o);
    double u1 = (double)(((((uint64_t)o[0] << 32) | o[1]) >> 11) + 1) * 0x1p-53;
    double u2 = (double)((((uint64_t)o[2] << 32) | o[3]) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.28318530717958648 * u2);
}
/* Integer in [lo, hi); hi <= lo yields lo. */
ST_FN int64_t st_rand_int(uint64_t seed, uint64_t c, int64_t lo, int64_t hi) {
    uint32_t o[4];
    st_philox4x32_10(seed, c, o);
    uint64_t range = (uint64_t)hi - (uint64_t)lo;
    if (hi <= lo) return lo;
    return (int64_t)((uint64_t)lo + ((((uint64_t)o[0] << 32) | o[1]) % range));
}

#ifndef __CUDACC__ /* the CPU GEMM (malloc'ed scratch, OpenMP tasks); CUDA kernels tile their own */
/* ---- GEMM: C (M x N) = A (M x K) @ B (K x N), the one matmul of the interpreter and the JIT ----
 * Bit-identity rule: every C[i][j] is acc = 0; for k = 0..K-1 in increasing order:
 * acc = acc + A[i][k] * B[k][j] (a separately rounded multiply and add in the compute type: float
 * for f32/f16/bf16, double for f64), then one rounding to the storage type. Blocking over i and j,
 * vectorizing over j and which thread runs a block do not change that; a K split continues the
 * same accumulator (kept in C itself for f32/f64, in a float buffer for f16/bf16). So every build
 * of this code (the interpreter at -O2, kernels at -O3 -march=native; never -ffast-math, never FMA
 * contraction) gives the same bits, and so does the unblocked loop used when there is no scratch.
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
 * share a translation unit). */
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
typedef struct st_gemm {
    int dt;
    int64_t M, N, K;
    const void *A;
    int64_t sam, sak;
    const void *B;
    int64_t sbk, sbn;
    void *C;
    int64_t ldc;
} st_gemm;

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

/* The micro-kernel: c[i*ldc + j] (MR x NR) = (first ? 0 : c) + sum over k of ap[k][i] * bp[k][j],
 * added in k order. Fixed trip counts: the j loop becomes vector adds and acc lives in registers. */
#define ST_GEMM_UKR_(T, U, NR)                                                                   \
    static inline void st_gemm_ukr_##U##_(int64_t kc, const T *restrict ap, const T *restrict bp, \
                                          T *restrict c, int64_t ldc, int first) {              \
        T acc[ST_GEMM_MR][NR];                                                                   \
        if (first) {                                                                             \
            for (int i = 0; i < ST_GEMM_MR; i++)                                                 \
                for (int j = 0; j < NR; j++) acc[i][j] = 0;                                      \
        } else {                                                                                 \
            for (int i = 0; i < ST_GEMM_MR; i++)                                                 \
                for (int j = 0; j < NR; j++) acc[i][j] = c[i * ldc + j];                         \
        }                                                                                        \
        for (int64_t k = 0; k < kc; k++) {                                                       \
            const T *a = ap + k * ST_GEMM_MR, *b = bp + k * NR;                                  \
            for (int i = 0; i < ST_GEMM_MR; i++) {                                               \
                const T ai = a[i];                                                               \
                for (int j = 0; j < NR; j++) acc[i][j] = acc[i][j] + ai * b[j];                  \
            }                                                                                    \
        }                                                                                        \
        for (int i = 0; i < ST_GEMM_MR; i++)                                                     \
            for (int j = 0; j < NR; j++) c[i * ldc + j] = acc[i][j];                             \
    }

/* Packing (storage type S, compute type T, named by U: f or d): A rows [i0, i0+mb) x k [p0, p0+kc)
 * into panels ap[panel][k][MR]; B k [p0, p0+kc) x columns [j0, j0+nc) into panels
 * bp[panel][k][NR]. Rows and columns past the block are zeros. The loop order follows the unit
 * stride, so a transposed operand is read along its rows too. An element of another type than T
 * is converted as CAST converts it: ST_GEMM_LD_S gives S's compute type, then a C conversion. */
#define ST_GEMM_PACK_(T, S, U, NR)                                                               \
    static inline void st_gemm_pack_a_##S##_##U(const st_gemm *g, int64_t i0, int64_t mb,      \
                                             int64_t p0, int64_t kc, T *restrict ap) {          \
        const int64_t sam = g->sam, sak = g->sak;                                                \
        for (int64_t r = 0; r < mb; r += ST_GEMM_MR, ap += ST_GEMM_MR * kc) {                    \
            const int64_t mr = st_gemm_min_(ST_GEMM_MR, mb - r), base = (i0 + r) * sam + p0 * sak; \
            if (sak == 1) {                                                                      \
                for (int64_t i = 0; i < mr; i++)                                                 \
                    for (int64_t k = 0; k < kc; k++)                                             \
                        ap[k * ST_GEMM_MR + i] = (T)ST_GEMM_LD_##S(g->A, base + i * sam + k);    \
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
        for (int64_t q = 0; q < nc; q += NR, bp += NR * kc) {                                    \
            const int64_t nr = st_gemm_min_(NR, nc - q), base = p0 * sbk + (j0 + q) * sbn;       \
            if (sbn == 1 || sbk != 1) {                                                          \
                for (int64_t k = 0; k < kc; k++)                                                 \
                    for (int64_t j = 0; j < nr; j++)                                             \
                        bp[k * NR + j] = (T)ST_GEMM_LD_##S(g->B, base + k * sbk + j * sbn);      \
            } else {                                                                             \
                for (int64_t j = 0; j < nr; j++)                                                 \
                    for (int64_t k = 0; k < kc; k++)                                             \
                        bp[k * NR + j] = (T)ST_GEMM_LD_##S(g->B, base + k + j * sbn);            \
            }                                                                                    \
            for (int64_t k = 0; k < kc; k++)                                                     \
                for (int64_t j = nr; j < NR; j++) bp[k * NR + j] = 0;                            \
        }                                                                                        \
    }

/* One task's block C[i0:i1, j0:j1] (named S; operands of storage SA, SB; compute T, micro-kernel
 * U). ws: scratch of
 * st_gemm_ws_bytes, 64-byte aligned. Loop order: column chunks of NC, k blocks of KC (B packed
 * once per chunk and k block, A once per k block), then B panels (kept in L1) x A panels. An
 * edge tile of C goes through a full-size local tile (one micro-kernel call site: it is large).
 * LOWP (f16/bf16): accumulate in the float buffer cb (padded, so every tile is full) and round
 * to storage with STORE after the last k block. */
#define ST_GEMM_BLOCK_(T, S, SA, SB, U, NR, KC, NC, LOWP, STORE)                                 \
    static inline void st_gemm_block_##S##_(const st_gemm *g, int64_t i0, int64_t i1,          \
                                            int64_t j0, int64_t j1, T *ws) {                    \
        const int64_t mb = i1 - i0, mbp = st_gemm_rup_(mb, ST_GEMM_MR), K = g->K;                \
        const int64_t kcm = st_gemm_min_(K, KC), ncm = st_gemm_min_(st_gemm_rup_(j1 - j0, NR), NC); \
        T *ap = ws, *bp = ap + st_gemm_rup_(mbp * kcm, 16), *cb = bp + st_gemm_rup_(kcm * ncm, 16); \
        for (int64_t jc = j0; jc < j1; jc += NC) {                                               \
            const int64_t nc = st_gemm_min_(NC, j1 - jc), ncp = st_gemm_rup_(nc, NR);            \
            T *cc = LOWP ? cb : (T *)g->C + i0 * g->ldc + jc;                                    \
            const int64_t ldcc = LOWP ? ncp : g->ldc;                                            \
            for (int64_t pc = 0; pc < K; pc += KC) {                                             \
                const int64_t kc = st_gemm_min_(KC, K - pc);                                     \
                st_gemm_pack_b_##SB##_##U(g, pc, kc, jc, nc, bp);                                \
                st_gemm_pack_a_##SA##_##U(g, i0, mb, pc, kc, ap);                                \
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
                    acc = acc + (T)ST_GEMM_LD_##SA(g->A, i * g->sam + k * g->sak) *              \
                                    (T)ST_GEMM_LD_##SB(g->B, k * g->sbk + j * g->sbn);           \
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
#define ST_GEMM_TASK_(T, S)                                                                      \
    static inline void st_gemm_task_##S(const st_gemm *g, int64_t t, int64_t mb, int64_t nb,   \
                                        void *ws) {                                             \
        const int64_t ntn = (g->N + nb - 1) / nb;                                                \
        const int64_t i0 = t / ntn * mb, j0 = t % ntn * nb;                                      \
        const int64_t i1 = st_gemm_min_(g->M, i0 + mb), j1 = st_gemm_min_(g->N, j0 + nb);        \
        if (g->K == 0 || !ws) { /* K == 0: the loop writes the zeros */                          \
            st_gemm_naive_##S##_(g, i0, i1, j0, j1);                                             \
            return;                                                                              \
        }                                                                                        \
        st_gemm_block_##S##_(g, i0, i1, j0, j1, (T *)(((uintptr_t)ws + 63) & ~(uintptr_t)63));   \
    }

ST_GEMM_UKR_(float, f, ST_GEMM_NRF)
ST_GEMM_UKR_(double, d, ST_GEMM_NRD)
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
ST_GEMM_TASK_(float, f32)
ST_GEMM_TASK_(float, f16)
ST_GEMM_TASK_(float, bf16)
ST_GEMM_TASK_(double, f64)

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
#define ST_GEMM_TILE_(T, S, SA, SB, STO)                                                         \
    static __attribute__((noinline, unused)) void st_gemm_tile_##S(                            \
        const st_gemm *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, void *ws, STO *tile) { \
        st_gemm h = *g;                                                                          \
        h.A = (const ST_GEMM_T_##SA *)g->A + i0 * g->sam;                                        \
        h.B = (const ST_GEMM_T_##SB *)g->B + j0 * g->sbn;                                        \
        h.M = i1 - i0;                                                                           \
        h.N = j1 - j0;                                                                           \
        h.C = tile;                                                                              \
        h.ldc = j1 - j0;                                                                         \
        if (g->K == 0 || !ws) st_gemm_naive_##S##_(&h, 0, h.M, 0, h.N);                          \
        else st_gemm_block_##S##_(&h, 0, h.M, 0, h.N, (T *)(((uintptr_t)ws + 63) & ~(uintptr_t)63)); \
    }
ST_GEMM_TILE_(float, f32, f32, f32, float)
ST_GEMM_TILE_(float, f16, f16, f16, uint16_t)
ST_GEMM_TILE_(float, bf16, bf16, bf16, uint16_t)
ST_GEMM_TILE_(double, f64, f64, f64, double)

/* Mixed operands (see the GEMM's head comment): C f32 (float sums) or f64 (double sums). */
#define ST_GEMM_MIXED_f32_(S, SA, SB)                                                           \
    ST_GEMM_BLOCK_(float, S, SA, SB, f, ST_GEMM_NRF, ST_GEMM_KCF, ST_GEMM_NCF, 0, ST_GEMM_ST_none) \
    ST_GEMM_NAIVE_(float, S, SA, SB, float, f32)                                                 \
    ST_GEMM_TASK_(float, S)                                                                      \
    ST_GEMM_TILE_(float, S, SA, SB, float)
#define ST_GEMM_MIXED_f64_(S, SA, SB)                                                           \
    ST_GEMM_BLOCK_(double, S, SA, SB, d, ST_GEMM_NRD, ST_GEMM_KCD, ST_GEMM_NCD, 0, ST_GEMM_ST_none) \
    ST_GEMM_NAIVE_(double, S, SA, SB, double, f64)                                               \
    ST_GEMM_TASK_(double, S)                                                                     \
    ST_GEMM_TILE_(double, S, SA, SB, double)
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

#endif
