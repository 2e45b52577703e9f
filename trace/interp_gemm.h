/*
 * interp_gemm.h — the interpreter's GEMM entry (trace/interp_gemm.c).
 *
 * The prelude's GEMM (base/opmath_gemm.h) adds its products with fused multiply-adds (fmaf/fma). The
 * library is built for the baseline x86-64, where an fmaf is a call into libm per element;
 * interp_gemm.c compiles the same code a second time for AVX2+FMA (vector FMA instructions) and
 * st_interp_gemm_task picks that copy when the CPU has them. FMA rounds once, as IEEE defines it,
 * so both copies and the JIT's kernels (-march=native) give the same bits.
 */
#ifndef ST_INTERP_GEMM_H
#define ST_INTERP_GEMM_H

#include "base/opmath.h"

/* st_gemm_task (base/opmath_gemm.h) on the fastest copy this CPU runs. */
void st_interp_gemm_task(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, void *ws);

#endif
