/*
 * interp_gemm.c — st_interp_gemm_task: the prelude's GEMM for the interpreter, with a copy
 * compiled for AVX2+FMA picked at run time (trace/interp_gemm.h says why).
 *
 * The system headers opmath.h uses come first, so that only the prelude's own functions fall under
 * the target pragma; every one of them (the micro-kernel, packers, blocks) is then compiled for
 * AVX2+FMA (and, by GCC, at -O3, as JIT kernels are), and the prelude is included nowhere else in
 * this file. The old interpreter GEMM (baseline ISA, -O2, multiply and add): ~14 GFLOP/s at
 * 256^3 on the dev VM; this copy: ~69.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ST_IG_X86 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("O3")   /* GCC's -O2 leaves most of the micro-kernel scalar: 27 vs 69 GFLOP/s */
#endif
#include "base/opmath.h"
static void st_gemm_task_avx2_(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, void *ws) {
    st_gemm_task(g, t, mb, nb, ws);
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

#include "trace/interp_gemm.h"

/* The plain copy: this translation unit's prelude is the AVX2 one, so the baseline copy is
 * compiled in interp.c (st_interp_gemm_task_base_). */
void st_interp_gemm_task_base_(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, void *ws);

void st_interp_gemm_task(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, void *ws) {
#ifdef ST_IG_X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        st_gemm_task_avx2_(g, t, mb, nb, ws);
        return;
    }
#endif
    st_interp_gemm_task_base_(g, t, mb, nb, ws);
}
