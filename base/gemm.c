/*
 * gemm.c — the baseline copy of the prelude's GEMM and the pick of a copy (base/gemm.h).
 */
#include "base/gemm.h"

ST_GEMM_API_TABLE(gemm_baseline)

const st_gemm_api *base_gemm_copy(int isa) {
    switch (isa) {
    case BASE_GEMM_BASELINE: return &gemm_baseline;
    case BASE_GEMM_AVX2: return base_gemm_avx2_();
    case BASE_GEMM_AVX512: return base_gemm_avx512_();
    default: return NULL;
    }
}

/* The widest copy, found once: base_gemm is on every kernel launch (st_kargs.gemm). */
static int picked = -1;
static const st_gemm_api *picked_api;

static int pick(void) {
    if (picked < 0) {
        int isa = BASE_GEMM_COPIES - 1;
        while (isa > BASE_GEMM_BASELINE && !base_gemm_copy(isa)) isa--;
        picked_api = base_gemm_copy(isa);
        picked = isa;
    }
    return picked;
}

const st_gemm_api *base_gemm(void) {
    if (picked < 0) pick();
    return picked_api;
}

bool base_cpu_avx2(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

bool base_cpu_avx512(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
#else
    return false;
#endif
}

const char *base_gemm_isa(void) {
    static const char *const names[BASE_GEMM_COPIES] = {"baseline", "avx2", "avx512"};
    return names[pick()];
}
