/*
 * interp_ew_avx2.c — the interpreter's elementwise loops compiled for AVX2 with FMA (trace/interp_ew.h):
 * on a CPU without AVX-512 the prelude's fused multiply-adds (ST_FMAF: exp's reduction and
 * polynomial) are instructions here, not a libm call each as in the baseline copy. As in
 * interp_ew.c, the system headers come first so that only the prelude and the loops fall under
 * the target pragma.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace/interp_ew.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("O3")
#include "base/opmath.h"
#define EW_TABLES ew_avx2
#include "trace/interp_ew_fns.h"
#undef EW_TABLES
#pragma GCC pop_options
#include "base/gemm.h"   /* base_cpu_avx2 (after the pragma: the prelude above is the AVX2 one) */

const ew_tables *st_interp_ew_avx2(void) { return base_cpu_avx2() ? &ew_avx2 : NULL; }
#else
const ew_tables *st_interp_ew_avx2(void) { return NULL; }
#endif
