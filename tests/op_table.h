/*
 * op_table.h — the test table of the public elementwise API: one case per API / APIC row of
 * trace/ops.def (its reference function, input domains, result bound and flags), from which the
 * op tests (test_ops.c), the gradient checks (test_autograd.c), the interpreter tests
 * (test_interp.c) and the fuzzer's op choice (test_fuzz.c) draw their elementwise cases, so that
 * a new function is tested everywhere by adding its row to ops.def.
 *
 * For every row it generates ref_<name>, the row's REF expression as a static function of doubles
 * (double ref_<name>(double x), or (double a, double b) for a binary row), and an entry of
 * op_cases[] (OP_NCASES of them, in ops.def's order). The helpers give a case's result dtype for
 * an input dtype (the op's dtype rule, as runtime/ops.c applies it), whether it is differentiable,
 * its result bound from input bounds (the BOUND column) and a call of its public function.
 *
 * Everything is static: each test program includes this once. It reads the op table st_ops of
 * trace/trace.h (internal), so a program that includes it links the static library.
 */
#ifndef ST_OP_TABLE_H
#define ST_OP_TABLE_H

#include <math.h>
#include "stitch.h"
#include "trace/trace.h"

/* Where a test draws an input (DOM_A / DOM_B). Each test maps these to its own values (fixed
 * lists in test_ops.c, random draws in test_autograd.c). */
typedef enum op_dom {
    D_NORMAL,   /* around 0: N(0, 1) */
    D_POS,      /* positive, U[0.5, 2): log, sqrt, rsqrt, pow base, reciprocal, log1p */
    D_AWAY,     /* +-U[0.5, 1.5): away from 0 and from kinks (abs, relu), divisors */
    D_DISTINCT, /* a shuffled grid with gaps >= 0.3: no ties (max/min reductions; no ops.def row) */
    D_WIDE,     /* a wider range, N(0, 3): dividends of fmod/remainder, comparisons, rounding */
    D_NONE,     /* no such input (DOM_B of a unary row) */
} op_dom;

/* How large |result| is from bounds of |inputs| (BOUND; op_case_bound gives the numbers). */
typedef enum op_bound {
    TB_SAME, TB_ONE, TB_EXP, TB_SQUARE, TB_SQRT, TB_INF,                  /* unary */
    TB_ADD, TB_MUL, TB_MAXMIN, TB_DIV, TB_POW, TB_MOD, TB_CMP, TB_LOGIC,  /* binary */
} op_bound;

/* FLAGS, or-ed. */
enum {
    TF_EXACT = 1,       /* f32/f64 results are the reference correctly rounded: bit for bit */
    TF_SENS = 2,        /* a jump or a domain edge: needs exact inputs (the fuzzer) */
    TF_HALF_EXACT = 4,  /* exact on f16/bf16 inputs too (the result is one of them, or an integer) */
    TF_APART = 8,       /* gradient checks need the two inputs apart (no ties) */
    TF_FRAC = 16,       /* gradient checks need a / b away from integers */
    TF_NODIFF = 32,     /* a composite with no gradient */
};

/* The reference functions, ref_<name>. */
#define OT_REF_1(name, REF) static double ref_##name(double x) { return (double)(REF); }
#define OT_REF_2(name, REF) static double ref_##name(double a, double b) { return (double)(REF); }
#define API(name, ARITY, OP, REF, ...) OT_REF_##ARITY(name, REF)
#define APIC(name, ARITY, REF, ...) OT_REF_##ARITY(name, REF)
#include "trace/ops.def"
#undef API
#undef APIC

typedef struct op_case {
    const char *name;                              /* "exp": the public function st_exp */
    int arity;                                     /* 1 or 2 */
    int op;                                        /* the primitive st_op it runs; -1: a composite */
    st_tensor *(*fn1)(st_tensor *);                /* arity 1: st_<name>, else NULL */
    st_tensor *(*fn2)(st_tensor *, st_tensor *);   /* arity 2: st_<name>, else NULL */
    double (*ref1)(double);                        /* arity 1: ref_<name>, else NULL */
    double (*ref2)(double, double);                /* arity 2: ref_<name>, else NULL */
    op_dom dom_a, dom_b;                           /* dom_b is D_NONE for arity 1 */
    op_bound bound;
    unsigned flags;                                /* TF_* */
} op_case;

#define OT_FN_1(name) .fn1 = st_##name, .ref1 = ref_##name
#define OT_FN_2(name) .fn2 = st_##name, .ref2 = ref_##name
static const op_case op_cases[] = {
#define OT_CASE(NM, ARITY, OP, DA, DB, BOUND, FLAGS) \
    {.name = #NM, .arity = ARITY, .op = OP, OT_FN_##ARITY(NM), .dom_a = DA, .dom_b = DB, \
     .bound = BOUND, .flags = FLAGS},
#define API(NM, ARITY, OP, REF, DA, DB, BOUND, FLAGS, DOC) \
    OT_CASE(NM, ARITY, ST_OP_##OP, DA, DB, BOUND, FLAGS)
#define APIC(NM, ARITY, REF, DA, DB, BOUND, FLAGS, DOC) OT_CASE(NM, ARITY, -1, DA, DB, BOUND, FLAGS)
#include "trace/ops.def"
#undef API
#undef APIC
};
enum { OP_NCASES = (int)(sizeof op_cases / sizeof op_cases[0]) };
#undef OT_CASE
#undef OT_FN_1
#undef OT_FN_2
#undef OT_REF_1
#undef OT_REF_2

/* The dtype of c's result on inputs of (promoted) dtype dt: the op's dtype rule (ops.def's DTYPE)
 * as runtime/ops.c applies it; a composite keeps dt. -1 when the rule refuses dt (DT_NUMERIC on
 * bool: the call fails with ST_ERR_DTYPE). */
static inline int op_case_dtype(const op_case *c, st_dtype dt) {
    if (c->op < 0) return (int)dt;
    switch (st_ops[c->op].dtype) {
    case DT_FLOAT: return st_is_float(dt) ? (int)dt : (int)ST_F32;
    case DT_NOBOOL: return dt == ST_BOOL ? (int)ST_I64 : (int)dt;
    case DT_TO_BOOL: case DT_LOGIC: return (int)ST_BOOL;
    case DT_NUMERIC: return dt == ST_BOOL ? -1 : (int)dt;
    default: return (int)dt;
    }
}

/* Whether gradients flow through c: the op's gradient rule (ops.def's GRAD), or for a composite
 * the absence of TF_NODIFF. */
static inline int op_case_diff(const op_case *c) {
    return c->op >= 0 ? (int)st_ops[c->op].diff : !(c->flags & TF_NODIFF);
}

/* The reference value of c at x (and y, binary). */
static inline double op_case_ref(const op_case *c, double x, double y) {
    return c->arity == 1 ? c->ref1(x) : c->ref2(x, y);
}

/* Calls c's public function (b unused for a unary case); the caller owns the result. */
static inline st_tensor *op_case_call(const op_case *c, st_tensor *a, st_tensor *b) {
    return c->arity == 1 ? c->fn1(a) : c->fn2(a, b);
}

/* A bound of |result| from bounds ba (and bb) of |inputs| (BOUND): the fuzzer's guard against
 * integer overflow. INFINITY when nothing is known. */
static inline double op_case_bound(const op_case *c, double ba, double bb) {
    switch (c->bound) {
    case TB_SAME: return ba + 1;
    case TB_ONE: return 1;
    case TB_EXP: return ba > 700 ? INFINITY : exp(ba) + 1;
    case TB_SQUARE: return ba * ba;
    case TB_SQRT: return sqrt(ba) + 1;
    case TB_ADD: return ba + bb;
    case TB_MUL: return ba * bb;
    case TB_MAXMIN: return fmax(ba, bb);
    case TB_MOD: return fmin(fmax(ba, 1), fmax(bb, 1));
    case TB_CMP: case TB_LOGIC: return 1;
    case TB_POW: return bb <= 3 ? pow(fmax(ba, 1), 3) : INFINITY;
    case TB_INF: case TB_DIV: default: return INFINITY;
    }
}

#endif
