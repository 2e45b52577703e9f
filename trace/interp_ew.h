/*
 * interp_ew.h — internal: the interpreter's elementwise function tables (trace/interp_ew_fns.h)
 * and the AVX-512 copy of them (interp_ew.c).
 *
 * A first-seen expression runs through the interpreter while its kernel compiles (the REPL's
 * first answer), so its loops matter: the library is built for the baseline ISA, where GCC leaves
 * the loops of exp, tanh, sigmoid & co. (a few dozen operations each) scalar: it will not turn
 * their float compares into selects without masked vector operations (AVX2 alone did not
 * vectorize them either). interp_ew.c compiles the same loops for AVX-512, as the JIT's kernels
 * are on such a CPU, and interp_ew_avx2.c for AVX2 with FMA (scalar loops mostly, but the
 * prelude's fused multiply-adds are instructions there, not libm calls). Every operation stays the
 * IEEE one the prelude writes: -std=c11 contracts nothing, and a fused multiply-add is written out
 * (ST_FMAF, rounded once whoever computes it), so every copy, and the kernels, give the same bits
 * (NaN payloads aside).
 */
#ifndef ST_INTERP_EW_H
#define ST_INTERP_EW_H

#include "trace/trace.h"

/* The compute types of the interpreter's values (f16/bf16 compute in float). */
typedef enum { CT_F32, CT_F64, CT_I32, CT_I64, CT_U8 } ctype;

typedef void (*ew1_fn)(ctype ct, const void *a, void *o, int64_t n);
typedef void (*ew2_fn)(ctype ct, const void *a, const void *b, void *o, int64_t n);
typedef void (*ew3_fn)(ctype ct, const uint8_t *c, const void *a, const void *b, void *o, int64_t n);
/* Per op: unary, binary, ternary (where) loops over n compute values (NULL: not that arity). */
typedef struct ew_tables {
    ew1_fn t1[ST_OP_COUNT];
    ew2_fn t2[ST_OP_COUNT];
    ew3_fn t3[ST_OP_COUNT];
} ew_tables;

/* The baseline ISA's tables (interp.c). */
ST_INTERNAL const ew_tables *st_interp_ew_base(void);
/* The AVX-512 tables, or NULL where the CPU lacks AVX-512 F/VL/BW/DQ (or is not x86-64). */
ST_INTERNAL const ew_tables *st_interp_ew_avx512(void);
/* The AVX2+FMA tables, or NULL where the CPU lacks AVX2 or FMA (base_cpu_avx2; or is not x86-64). */
ST_INTERNAL const ew_tables *st_interp_ew_avx2(void);

#endif
