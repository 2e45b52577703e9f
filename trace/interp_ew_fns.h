/*
 * interp_ew_fns.h — the interpreter's elementwise loops, one function per op of trace/ops.def
 * (its MATH column: base/opmath.h's code, the kernels' own), switching on the compute type, and
 * their table EW_TABLES (an ew_tables). Included twice, without a guard: by interp.c (the
 * baseline ISA) and by interp_ew.c under an AVX-512 target (trace/interp_ew.h), so the includer
 * defines EW_TABLES and has included base/opmath.h and trace/interp_ew.h.
 */

/* Results are written in the src compute type T: a comparison's 0/1 converts to T and back to
 * bool at the store (v != 0), so one result type serves every op. */
#define EW_SWITCH(LOOP, FN)                                                                     \
    switch (ct) {                                                                               \
    case CT_F32: LOOP(float, FN); break;                                                        \
    case CT_F64: LOOP(double, FN); break;                                                       \
    case CT_I32: LOOP(int32_t, FN); break;                                                      \
    case CT_I64: LOOP(int64_t, FN); break;                                                      \
    case CT_U8: LOOP(uint8_t, FN); break;                                                       \
    }
#define EW1_LOOP(T, FN)                                                                         \
    do {                                                                                        \
        const T *x_ = a;                                                                        \
        T *y_ = o;                                                                              \
        for (int64_t i = 0; i < n; i++) y_[i] = (T)FN(x_[i]);                                   \
    } while (0)
#define EW2_LOOP(T, FN)                                                                         \
    do {                                                                                        \
        const T *x_ = a, *z_ = b;                                                               \
        T *y_ = o;                                                                              \
        for (int64_t i = 0; i < n; i++) y_[i] = (T)FN(x_[i], z_[i]);                            \
    } while (0)
#define EW3_LOOP(T, FN)                                                                         \
    do {                                                                                        \
        const T *x_ = a, *z_ = b;                                                               \
        T *y_ = o;                                                                              \
        for (int64_t i = 0; i < n; i++) y_[i] = (T)FN(c[i], x_[i], z_[i]);                      \
    } while (0)

#define DEF_OPK_SOURCE(NAME, FN)
#define DEF_OPK_MOVEMENT(NAME, FN)
#define DEF_OPK_REDUCE(NAME, FN)
#define DEF_OPK_MATMUL(NAME, FN)
#define DEF_OPK_ATTN(NAME, FN)
#define DEF_OPK_GATHER(NAME, FN)
#define DEF_OPK_WRITE(NAME, FN)
#define DEF_OPK_UNARY(NAME, FN)                                                                 \
    static void ew_##NAME(ctype ct, const void *a, void *o, int64_t n) { EW_SWITCH(EW1_LOOP, FN) }
#define DEF_OPK_BINARY(NAME, FN)                                                                \
    static void ew_##NAME(ctype ct, const void *a, const void *b, void *o, int64_t n) {         \
        EW_SWITCH(EW2_LOOP, FN)                                                                 \
    }
#define DEF_OPK_TERNARY(NAME, FN)                                                               \
    static void ew_##NAME(ctype ct, const uint8_t *c, const void *a, const void *b, void *o,    \
                          int64_t n) {                                                          \
        EW_SWITCH(EW3_LOOP, FN)                                                                 \
    }
#define X(NAME, KIND, NSRC, STR, MATH, ...) DEF_##KIND(NAME, MATH)
#include "trace/ops.def"
#undef X

#define TAB_NONE(NAME)
#define TAB_FN(NAME) [ST_OP_##NAME] = ew_##NAME,
#define T1_OPK_UNARY TAB_FN
#define T2_OPK_BINARY TAB_FN
#define T3_OPK_TERNARY TAB_FN
#define T1_OPK_BINARY TAB_NONE
#define T1_OPK_TERNARY TAB_NONE
#define T2_OPK_UNARY TAB_NONE
#define T2_OPK_TERNARY TAB_NONE
#define T3_OPK_UNARY TAB_NONE
#define T3_OPK_BINARY TAB_NONE
#define T_OTHER(NAME)
#define T1_OPK_SOURCE T_OTHER
#define T1_OPK_MOVEMENT T_OTHER
#define T1_OPK_REDUCE T_OTHER
#define T1_OPK_MATMUL T_OTHER
#define T1_OPK_ATTN T_OTHER
#define T1_OPK_GATHER T_OTHER
#define T1_OPK_WRITE T_OTHER
#define T2_OPK_SOURCE T_OTHER
#define T2_OPK_MOVEMENT T_OTHER
#define T2_OPK_REDUCE T_OTHER
#define T2_OPK_MATMUL T_OTHER
#define T2_OPK_ATTN T_OTHER
#define T2_OPK_GATHER T_OTHER
#define T2_OPK_WRITE T_OTHER
#define T3_OPK_SOURCE T_OTHER
#define T3_OPK_MOVEMENT T_OTHER
#define T3_OPK_REDUCE T_OTHER
#define T3_OPK_MATMUL T_OTHER
#define T3_OPK_ATTN T_OTHER
#define T3_OPK_GATHER T_OTHER
#define T3_OPK_WRITE T_OTHER

static const ew_tables EW_TABLES = {
    .t1 = {
#define X(NAME, KIND, ...) T1_##KIND(NAME)
#include "trace/ops.def"
#undef X
    },
    .t2 = {
#define X(NAME, KIND, ...) T2_##KIND(NAME)
#include "trace/ops.def"
#undef X
    },
    .t3 = {
#define X(NAME, KIND, ...) T3_##KIND(NAME)
#include "trace/ops.def"
#undef X
    },
};
