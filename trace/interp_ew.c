/*
 * interp_ew.c — the interpreter's elementwise loops compiled for AVX-512 (trace/interp_ew.h says
 * why), picked at run time by interp.c. As in interp_gemm.c, the system headers come first so
 * that only the prelude's functions and the loops fall under the target pragma.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace/interp_ew.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq")
#pragma GCC optimize("O3")
#include "base/opmath.h"
#define EW_TABLES ew_avx512
#include "trace/interp_ew_fns.h"
#undef EW_TABLES
#pragma GCC pop_options
#include "base/gemm.h"   /* base_cpu_avx512 (after the pragma: the prelude above is the AVX-512 one) */

const ew_tables *st_interp_ew_avx512(void) { return base_cpu_avx512() ? &ew_avx512 : NULL; }
#else
const ew_tables *st_interp_ew_avx512(void) { return NULL; }
#endif
