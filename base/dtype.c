/*
 * dtype.c — the dtype traits table, names, type promotion and host-side element access.
 *
 * Promotion (documented in docs/api.md): categories bool < int < float; the result is the higher
 * category, and inside a category the higher rank (i32 < i64; f16, bf16 < f32 < f64; f16 with bf16
 * gives f32). Host conversions use the prelude's f16/bf16 code so host and kernels round alike.
 */
#include "base/base.h"
#include "base/opmath.h"
#include <strings.h>

const st_dtype_traits st_dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"f32", "float", "float", 4, ST_CAT_FLOAT, 2},
    [ST_F64] = {"f64", "double", "double", 8, ST_CAT_FLOAT, 3},
    [ST_I32] = {"i32", "int32_t", "int32_t", 4, ST_CAT_INT, 0},
    [ST_I64] = {"i64", "int64_t", "int64_t", 8, ST_CAT_INT, 1},
    [ST_BOOL] = {"bool", "uint8_t", "uint8_t", 1, ST_CAT_BOOL, 0},
    [ST_F16] = {"f16", "uint16_t", "float", 2, ST_CAT_FLOAT, 1},
    [ST_BF16] = {"bf16", "uint16_t", "float", 2, ST_CAT_FLOAT, 1},
};

const char *st_dtype_name(st_dtype dt) {
    return (unsigned)dt < ST_DTYPE_COUNT ? st_dtypes[dt].name : "?";
}
size_t st_dtype_size(st_dtype dt) { return (unsigned)dt < ST_DTYPE_COUNT ? st_dtypes[dt].size : 0; }

int st_dtype_from_name(const char *name) {
    static const struct { const char *alias; st_dtype dt; } aliases[] = {
        {"f32", ST_F32},   {"float32", ST_F32}, {"float", ST_F32},  {"f64", ST_F64},
        {"float64", ST_F64}, {"double", ST_F64}, {"i32", ST_I32},   {"int32", ST_I32},
        {"int", ST_I32},   {"i64", ST_I64},     {"int64", ST_I64},  {"long", ST_I64},
        {"bool", ST_BOOL}, {"f16", ST_F16},     {"float16", ST_F16}, {"half", ST_F16},
        {"bf16", ST_BF16}, {"bfloat16", ST_BF16},
    };
    if (!name) {
        st_error(ST_ERR_ARG, "dtype_from_name: NULL name");
        return -1;
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].alias) == 0) return (int)aliases[i].dt;
    return -1;
}

st_dtype st_promote_types(st_dtype a, st_dtype b) {
    if ((unsigned)a >= ST_DTYPE_COUNT || (unsigned)b >= ST_DTYPE_COUNT) {
        st_error(ST_ERR_DTYPE, "promote_types: unknown dtype %d", (int)((unsigned)a >= ST_DTYPE_COUNT ? a : b));
        return ST_DTYPE_COUNT;
    }
    if (a == b) return a;
    const st_dtype_traits *ta = &st_dtypes[a], *tb = &st_dtypes[b];
    if (ta->cat != tb->cat) return ta->cat > tb->cat ? a : b;
    if (ta->rank != tb->rank) return ta->rank > tb->rank ? a : b;
    return ST_F32; /* f16 with bf16 */
}

double st_load_f64(st_dtype dt, const void *base, int64_t i) {
    switch (dt) {
    case ST_F32: return ((const float *)base)[i];
    case ST_F64: return ((const double *)base)[i];
    case ST_I32: return ((const int32_t *)base)[i];
    case ST_I64: return (double)((const int64_t *)base)[i];
    case ST_BOOL: return ((const uint8_t *)base)[i] != 0;
    case ST_F16: return st_h2f(((const uint16_t *)base)[i]);
    case ST_BF16: return st_bf2f(((const uint16_t *)base)[i]);
    default: return 0;
    }
}

int64_t st_load_i64(st_dtype dt, const void *base, int64_t i) {
    switch (dt) {
    case ST_I32: return ((const int32_t *)base)[i];
    case ST_I64: return ((const int64_t *)base)[i];
    case ST_BOOL: return ((const uint8_t *)base)[i] != 0;
    default: return st_f2i64(st_load_f64(dt, base, i));
    }
}

void st_store_f64(st_dtype dt, void *base, int64_t i, double v) {
    switch (dt) {
    case ST_F32: ((float *)base)[i] = (float)v; break;
    case ST_F64: ((double *)base)[i] = v; break;
    case ST_I32: ((int32_t *)base)[i] = st_f2i32(v); break;
    case ST_I64: ((int64_t *)base)[i] = st_f2i64(v); break;
    case ST_BOOL: ((uint8_t *)base)[i] = v != 0; break;
    case ST_F16: ((uint16_t *)base)[i] = st_f2h((float)v); break;
    case ST_BF16: ((uint16_t *)base)[i] = st_f2bf((float)v); break;
    default: break;
    }
}

void st_store_i64(st_dtype dt, void *base, int64_t i, int64_t v) {
    switch (dt) {
    case ST_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case ST_I64: ((int64_t *)base)[i] = v; break;
    case ST_BOOL: ((uint8_t *)base)[i] = v != 0; break;
    default: st_store_f64(dt, base, i, (double)v); break;
    }
}
