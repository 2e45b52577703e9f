/*
 * fuzz_util.h — host-side helpers shared by the public-API tests (test_ops.c, test_runtime.c,
 * test_fuzz.c): an independent f16/bf16 conversion (round to nearest even, written here so the
 * tests do not trust the library's own), building tensors from double values of any dtype, and
 * reading tensors back as doubles.
 *
 * Everything is static: each test program includes this once. Uses only include/stitch.h.
 */
#ifndef ST_FUZZ_UTIL_H
#define ST_FUZZ_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "stitch.h"

static inline uint32_t fu_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float fu_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* float -> IEEE half, round to nearest even, overflow -> inf, NaN kept (quiet). */
static inline uint16_t fu_f2h(float f) {
    uint32_t x = fu_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffff;
    if (x >= 0x7f800000) return sign | (x > 0x7f800000 ? 0x7e00 : 0x7c00);
    if (x >= 0x477ff000) return sign | 0x7c00; /* >= 65520 rounds to inf */
    if (x < 0x38800000) {                      /* below the smallest normal half, 2^-14 */
        float r = nearbyintf(fu_float(x) * 16777216.0f); /* units of 2^-24, ties to even */
        return sign | (uint16_t)r;
    }
    uint32_t h = (((x >> 23) - 112) << 10) | ((x & 0x7fffff) >> 13);
    uint32_t rem = x & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

static inline float fu_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-08f; /* 2^-24 */
        return sign ? -v : v;
    }
    if (e == 31) return fu_float(sign | 0x7f800000 | (m << 13));
    return fu_float(sign | ((e + 112) << 23) | (m << 13));
}

/* float -> bfloat16, round to nearest even, NaN kept. */
static inline uint16_t fu_f2bf(float f) {
    uint32_t u = fu_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static inline float fu_bf2f(uint16_t b) { return fu_float((uint32_t)b << 16); }

/* Stores v into element i of a host array of dtype dt (ints truncate; values are in range). */
static inline void fu_store(st_dtype dt, void *base, int64_t i, double v) {
    switch (dt) {
    case ST_F32: ((float *)base)[i] = (float)v; break;
    case ST_F64: ((double *)base)[i] = v; break;
    case ST_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case ST_I64: ((int64_t *)base)[i] = (int64_t)v; break;
    case ST_BOOL: ((uint8_t *)base)[i] = v != 0; break;
    case ST_F16: ((uint16_t *)base)[i] = fu_f2h((float)v); break;
    case ST_BF16: ((uint16_t *)base)[i] = fu_f2bf((float)v); break;
    default: break;
    }
}

/* A new tensor of dtype dt and the given shape from n double values (C order). Caller owns it. */
static inline st_tensor *fu_make(st_dtype dt, int ndim, const int64_t *shape, const double *vals) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    void *buf = malloc((size_t)(n ? n : 1) * 8);
    for (int64_t i = 0; i < n; i++) fu_store(dt, buf, i, vals[i]);
    st_tensor *t = st_from_data(dt, ndim, shape, buf);
    free(buf);
    return t;
}

/* Reads t as doubles into a new malloc'ed array (*n elements); NULL on failure. */
static inline double *fu_read(st_tensor *t, int64_t *n) {
    int64_t m = st_numel(t);
    double *v = malloc((size_t)(m ? m : 1) * sizeof *v);
    if (st_to_host(t, ST_F64, v, (size_t)m * sizeof *v) != ST_OK) {
        free(v);
        return NULL;
    }
    *n = m;
    return v;
}

#endif
