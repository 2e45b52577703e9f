/*
 * gemm_avx2.c — the prelude's GEMM compiled for AVX2+FMA (base/gemm.h).
 *
 * The system headers opmath.h uses come first, so that only the prelude's own functions fall under
 * the target pragma; every one of them (the micro-kernel, packers, blocks) is then compiled for
 * AVX2+FMA, at -O3 (the Makefile) as JIT kernels are. The baseline copy (-O2, libm's fma): ~14
 * GFLOP/s at 256^3 on the dev VM; this one: ~69.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include "base/opmath.h"
ST_GEMM_API_TABLE(gemm_avx2)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#include "base/gemm.h"

const st_gemm_api *base_gemm_avx2_(void) { return base_cpu_avx2() ? &gemm_avx2 : NULL; }
#else
#include "base/gemm.h"
const st_gemm_api *base_gemm_avx2_(void) { return NULL; }
#endif
