/*
 * gemm.h — the library's compiled copies of the prelude's GEMM (base/opmath_gemm.h), one per
 * instruction set, and the pick for this CPU.
 *
 * The library is built for the baseline x86-64, where the GEMM's fused multiply-adds are libm
 * calls; gemm_avx2.c and gemm_avx512.c compile the same code again under a target pragma, and
 * base_gemm() answers the widest copy the CPU runs (checked once). The interpreter calls it for
 * every float matmul, and each JIT kernel calls it through st_kargs.gemm (ST_GEMM_EXTERN), so no
 * kernel compiles a GEMM of its own. FMA rounds once, as IEEE defines it, and every copy makes
 * the same sums in the same order: every copy gives the same bits (tests/test_gemm.c checks it).
 */
#ifndef ST_BASE_GEMM_H
#define ST_BASE_GEMM_H

#include "base/base.h"
#include "base/opmath.h"

enum { BASE_GEMM_BASELINE, BASE_GEMM_AVX2, BASE_GEMM_AVX512, BASE_GEMM_COPIES };

/* The copy for instruction set `isa` (BASE_GEMM_*), or NULL where this CPU (or this build) has none. */
ST_INTERNAL const st_gemm_api *base_gemm_copy(int isa);
/* The widest copy this CPU runs (never NULL). */
ST_INTERNAL const st_gemm_api *base_gemm(void);
/* Its name: "avx512", "avx2" or "baseline". */
ST_INTERNAL const char *base_gemm_isa(void);

/* The CPU runs the library's AVX2+FMA copies (this GEMM's, the interpreter's elementwise loops):
 * AVX2 and FMA (F16C goes with them on every such CPU, and clang's __builtin_cpu_supports does not
 * know its name). */
ST_INTERNAL bool base_cpu_avx2(void);
/* The CPU runs the library's AVX-512 copies (this GEMM's, the interpreter's elementwise loops):
 * AVX-512 F/VL/BW/DQ with AVX2, FMA and BMI2 (F16C goes with them on every such CPU, and clang's
 * __builtin_cpu_supports does not know its name). */
ST_INTERNAL bool base_cpu_avx512(void);

/* The copies (gemm_avx2.c, gemm_avx512.c): NULL where the CPU lacks the instructions. */
ST_INTERNAL const st_gemm_api *base_gemm_avx2_(void);
ST_INTERNAL const st_gemm_api *base_gemm_avx512_(void);

#endif
