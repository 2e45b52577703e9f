/*
 * gemm_avx512.c — the prelude's GEMM compiled for AVX-512 (base/gemm.h): the instruction sets the
 * JIT's kernels get from -march=native on such a CPU, so the GEMM's AVX-512 paths (the direct and
 * gathered convolution paths of base/opmath_gemm.h) are in it. GCC only: those paths are GCC's.
 * As in gemm_avx2.c, the system headers come first and only the prelude falls under the pragma.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,avx512f,avx512vl,avx512bw,avx512dq")
#include "base/opmath.h"
ST_GEMM_API_TABLE(gemm_avx512)
#pragma GCC pop_options
#include "base/gemm.h"

const st_gemm_api *base_gemm_avx512_(void) { return base_cpu_avx512() ? &gemm_avx512 : NULL; }
#else
#include "base/gemm.h"
const st_gemm_api *base_gemm_avx512_(void) { return NULL; }
#endif
