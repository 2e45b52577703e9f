/*
 * test_interp.c — the reference interpreter (trace/interp.c) and the prelude (base/opmath.h).
 *
 * Nodes are built by hand (st_node_new; data through realized BUFFER nodes), run as small
 * regions through interp_execute, and checked against hand-computed values or libm: every unary
 * op of the op table (tests/op_table.h) against its reference on special values, the binary and
 * integer ops by hand, f16/bf16 bit patterns, Philox known answers, reductions over several axis
 * sets, batched matmul, gather/scatter_add (with the out-of-range error), setview, masked views,
 * buffer release in multi-node regions, failure cleanup and interrupts.
 */
#include "base/base.h"
#include "trace/trace.h"
#include "base/opmath.h"
#include "test.h"
#include "op_table.h"
#include "trace/interp_ew.h"

/* ---- helpers ---- */
static st_node *leaf(st_dtype dt, int nd, const int64_t *shape, const void *data) {
    st_node *n = st_node_new(ST_OP_BUFFER, dt, nd, shape, 0, NULL, NULL);
    st_buffer *b = st_buffer_new(st_node_nbytes(n));
    if (n->numel) memcpy(b->data, data, st_node_nbytes(n));
    st_node_realize(n, b);
    return n;
}
static st_node *leaf_f32(int nd, const int64_t *shape, const float *data) { return leaf(ST_F32, nd, shape, data); }
static st_node *node(st_op op, st_dtype dt, int nd, const int64_t *shape, int nsrc, st_node *a,
                     st_node *b, st_node *c, const st_node_arg *arg) {
    st_node *srcs[3] = {a, b, c};
    return st_node_new(op, dt, nd, shape, nsrc, srcs, arg);
}
/* Runs the one-node region {n} (a target). */
static st_status run1(st_node *n) {
    st_region r = {&n, 1, 1};
    n->flags |= NODE_TARGET;
    n->uses = 0;
    return interp_execute(&r);
}
static const float *F(st_node *n) { return n->buf->data; }
static const double *D(st_node *n) { return n->buf->data; }
static const int32_t *I32(st_node *n) { return n->buf->data; }
static const int64_t *I64(st_node *n) { return n->buf->data; }
static const uint8_t *U8(st_node *n) { return n->buf->data; }

/* Distance in float ulps (NaN == NaN; inf must match exactly). */
static double ulps(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0 : 1e9;
    float w = (float)want;
    if (isinf(w) || isinf(got)) return got == w ? 0 : 1e9;
    double u = fabs(w) < 1.17549435e-38f ? 0x1p-149 : ldexp(1.0, ilogbf(w) - 23);
    return fabs((double)got - want) / u;
}

/* ---- prelude: conversions ---- */
/* base/error.c: a message that wraps the previous one (st_error(s, "...: %s", st_last_error()), 15
 * places) reads and writes the same buffer; it printed "cuda: cuda:  cannot lower" before. */
TEST(error_wraps_previous) {
    st_error(ST_ERR_INTERNAL, "fuser: cannot lower: %s", "expression too deep");
    st_error(ST_ERR_DEVICE, "cuda: %s (this group has no GPU kernel yet)", st_last_error());
    CHECK_MSG(!strcmp(st_last_error(), "cuda: fuser: cannot lower: expression too deep (this group has no GPU kernel yet)"),
              "%s", st_last_error());
    CHECK(st_last_status() == ST_ERR_DEVICE);
    st_clear_error();
}

TEST(f16_bits) {
    CHECK_EQ_INT(st_f2h(1.0f), 0x3C00);
    CHECK_EQ_INT(st_f2h(-2.0f), 0xC000);
    CHECK_EQ_INT(st_f2h(65504.0f), 0x7BFF);
    CHECK_EQ_INT(st_f2h(65519.0f), 0x7BFF);
    CHECK_EQ_INT(st_f2h(65520.0f), 0x7C00);   /* tie at the top rounds to even: inf */
    CHECK_EQ_INT(st_f2h(1e6f), 0x7C00);
    CHECK_EQ_INT(st_f2h(-INFINITY), 0xFC00);
    CHECK_EQ_INT(st_f2h(1e-8f), 0x0000);      /* below half the smallest subnormal */
    CHECK_EQ_INT(st_f2h(6e-8f), 0x0001);      /* smallest subnormal 5.96e-8 */
    CHECK_EQ_INT(st_f2h(0x1p-25f), 0x0000);   /* exact tie -> even (0) */
    CHECK_EQ_INT(st_f2h(0x1.8p-24f), 0x0002); /* 1.5 subnormal units: tie -> even (2) */
    CHECK_EQ_INT(st_f2h(0x1p-14f), 0x0400);   /* smallest normal */
    CHECK_EQ_INT(st_f2h(0x1.ffcp-15f), 0x0400); /* subnormal rounding up into the normals */
    CHECK_EQ_INT(st_f2h(1.0f + 0x1p-11f), 0x3C00);      /* tie -> even */
    CHECK_EQ_INT(st_f2h(1.0f + 3 * 0x1p-11f), 0x3C02);  /* tie -> even (up) */
    CHECK_EQ_INT(st_f2h(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    CHECK_EQ_INT(st_f2h(-0.0f), 0x8000);
    uint16_t hn = st_f2h(NAN);
    CHECK((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0);
    CHECK(st_h2f(0x3C00) == 1.0f);
    CHECK(st_h2f(0x7BFF) == 65504.0f);
    CHECK(st_h2f(0x0001) == 0x1p-24f);
    CHECK(st_h2f(0x03FF) == 0x3FFp-24f);
    CHECK(isinf(st_h2f(0x7C00)) && st_h2f(0xFC00) < 0);
    CHECK(isnan(st_h2f(0x7E00)));
    CHECK(signbit(st_h2f(0x8000)) && st_h2f(0x8000) == 0);
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) { /* every non-NaN half survives a round trip */
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;
        if (st_f2h(st_h2f((uint16_t)h)) != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

TEST(bf16_bits) {
    CHECK_EQ_INT(st_f2bf(1.0f), 0x3F80);
    CHECK_EQ_INT(st_f2bf(-2.0f), 0xC000);
    uint32_t tie_even = 0x3F808000u, tie_odd = 0x3F818000u, above = 0x3F808001u;
    float f;
    memcpy(&f, &tie_even, 4);
    CHECK_EQ_INT(st_f2bf(f), 0x3F80);
    memcpy(&f, &tie_odd, 4);
    CHECK_EQ_INT(st_f2bf(f), 0x3F82);
    memcpy(&f, &above, 4);
    CHECK_EQ_INT(st_f2bf(f), 0x3F81);
    CHECK_EQ_INT(st_f2bf(3.4e38f), 0x7F80);   /* rounds up to inf */
    CHECK_EQ_INT(st_f2bf(INFINITY), 0x7F80);
    uint16_t bn = st_f2bf(NAN);
    CHECK((bn & 0x7F80) == 0x7F80 && (bn & 0x7F) != 0);
    CHECK(st_bf2f(0x3F80) == 1.0f);
    CHECK(isnan(st_bf2f(bn)));
}

TEST(cvt) {
    CHECK_EQ_INT(ST_CVT(int32_t, 3.7f), 3);
    CHECK_EQ_INT(ST_CVT(int32_t, -3.7f), -3);
    CHECK_EQ_INT(ST_CVT(int32_t, NAN), 0);
    CHECK_EQ_INT(ST_CVT(int32_t, 1e10f), INT32_MAX);
    CHECK_EQ_INT(ST_CVT(int32_t, -1e10f), INT32_MIN);
    CHECK_EQ_INT(ST_CVT(int32_t, 2147483647.0), INT32_MAX);
    CHECK_EQ_INT(ST_CVT(int32_t, 1e300), INT32_MAX);
    CHECK_EQ_INT(ST_CVT(int64_t, 1e30), INT64_MAX);
    CHECK_EQ_INT(ST_CVT(int64_t, -1e30f), INT64_MIN);
    CHECK_EQ_INT(ST_CVT(int64_t, 9223372036854775808.0), INT64_MAX);
    CHECK_EQ_INT(ST_CVT(int64_t, -9223372036854775808.0), INT64_MIN);
    CHECK_EQ_INT(ST_CVT(int64_t, (double)NAN), 0);
    CHECK_EQ_INT(ST_CVT(int64_t, -2.5), -2);
    CHECK_EQ_INT(ST_CVT(int32_t, (int64_t)5000000000LL), (int32_t)705032704);
    CHECK_EQ_INT(ST_CVT(uint8_t, 0.5f), 1);
    CHECK_EQ_INT(ST_CVT(uint8_t, -0.0), 0);
    CHECK_EQ_INT(ST_CVT(uint8_t, NAN), 1);
    CHECK(ST_CVT(float, (int64_t)3) == 3.0f);
}

/* ---- prelude: Philox known answers (Random123 kat_vectors) ---- */
TEST(philox_kat) {
    uint32_t o[4];
    st_philox4x32_10(0, 0, o);
    CHECK_EQ_INT(o[0], 0x6627e8d5u);
    CHECK_EQ_INT(o[1], 0xe169c58du);
    CHECK_EQ_INT(o[2], 0xbc57ac4cu);
    CHECK_EQ_INT(o[3], 0x9b00dbd8u);
    uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, k1[2] = {0xffffffffu, 0xffffffffu};
    st_philox4x32_10_raw(c1, k1, o);
    CHECK_EQ_INT(o[0], 0x408f276du);
    CHECK_EQ_INT(o[1], 0x41c83b0eu);
    CHECK_EQ_INT(o[2], 0xa20bc7c6u);
    CHECK_EQ_INT(o[3], 0x6d5451fdu);
    uint32_t c2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, k2[2] = {0xa4093822u, 0x299f31d0u};
    st_philox4x32_10_raw(c2, k2, o);
    CHECK_EQ_INT(o[0], 0xd16cfe09u);
    CHECK_EQ_INT(o[1], 0x94fdcceBu);
    CHECK_EQ_INT(o[2], 0x5001e420u);
    CHECK_EQ_INT(o[3], 0x24126ea1u);
    /* seed/counter packing: key = {lo, hi}, counter = {lo, hi, 0, 0} */
    uint32_t c3[4] = {0x89abcdefu, 0x01234567u, 0, 0}, k3[2] = {0x76543210u, 0xfedcba98u}, r[4];
    st_philox4x32_10_raw(c3, k3, r);
    st_philox4x32_10(0xfedcba9876543210ull, 0x0123456789abcdefull, o);
    CHECK(memcmp(o, r, sizeof o) == 0);
}

/* ---- prelude: float math accuracy against libm over a sweep ---- */
TEST(float_math_ulps) {
    struct { const char *name; double worst, limit; } w[7] = {{"exp", 0, 2}, {"log", 0, 2},
        {"tanh", 0, 3}, {"expm1", 0, 3}, {"log1p", 0, 3}, {"erf", 0, 3}, {"sigmoid", 0, 4}};
    for (int i = 0; i <= 200000; i++) {
        float x = -30.0f + 60.0f * (float)i / 200000.0f, y = fabsf(x) * 1e3f;
        double e[7] = {ulps(om_exp(x), exp(x)), ulps(om_log(y), log(y)), ulps(om_tanh(x), tanh(x)),
                       ulps(om_expm1(x), expm1(x)), ulps(om_log1p(y), log1p(y)),
                       ulps(st_erff_(x * 0.2f), erf(x * 0.2f)),
                       ulps(om_sigmoid(x), 1 / (1 + exp(-(double)x)))};
        for (int k = 0; k < 7; k++)
            if (e[k] > w[k].worst) w[k].worst = e[k];
    }
    for (int k = 0; k < 7; k++) CHECK_MSG(w[k].worst <= w[k].limit, "%s: %.2f ulp", w[k].name, w[k].worst);
    /* special values */
    CHECK(om_exp(-INFINITY) == 0 && isinf(om_exp(INFINITY)) && isnan(om_exp(NAN)));
    CHECK(om_exp(100.0f) == INFINITY && om_exp(-110.0f) == 0 && om_exp(0.0f) == 1);
    CHECK(om_exp(-100.0f) > 0 && om_exp(-100.0f) < 1e-43f); /* subnormal result */
    CHECK(om_log(0.0f) == -INFINITY && om_log(-0.0f) == -INFINITY && isnan(om_log(-1.0f)));
    CHECK(om_log(INFINITY) == INFINITY && isnan(om_log(NAN)) && om_log(1.0f) == 0);
    CHECK(ulps(om_log(1e-40f), log(1e-40)) <= 2);
    CHECK(om_tanh(20.0f) == 1 && om_tanh(-INFINITY) == -1 && isnan(om_tanh(NAN)));
    CHECK(signbit(om_tanh(-0.0f)) && signbit(om_expm1(-0.0f)));
    CHECK(om_expm1(-INFINITY) == -1 && om_expm1(INFINITY) == INFINITY);
    CHECK(om_log1p(-1.0f) == -INFINITY && isnan(om_log1p(-2.0f)) && om_log1p(INFINITY) == INFINITY);
    CHECK(st_erff_(INFINITY) == 1 && st_erff_(-10.0f) == -1 && isnan(st_erff_(NAN)));
}

/* ---- elementwise through the interpreter ---- */
#define NV 10
static const float fv[NV] = {-2.5f, -1.0f, -0.5f, -0.0f, 0.0f, 0.5f, 1.0f, 3.0f, NAN, INFINITY};

/* Every unary row of the op table (tests/op_table.h) that runs a primitive op: a node of that op
 * on f32 and on f64 values, against the row's reference; the result dtype by the op's rule (bool
 * for logical_not). */
TEST(unary_f32_f64) {
    int64_t sh[1] = {NV};
    double dv[NV];
    for (int i = 0; i < NV; i++) dv[i] = fv[i];
    st_node *a = leaf_f32(1, sh, fv), *ad = leaf(ST_F64, 1, sh, dv);
    int ran = 0;
    for (int k = 0; k < OP_NCASES; k++) {
        const op_case *c = &op_cases[k];
        if (c->arity != 1 || c->op < 0) continue;
        st_op op = (st_op)c->op;
        st_dtype odt = (st_dtype)op_case_dtype(c, ST_F32), odtd = (st_dtype)op_case_dtype(c, ST_F64);
        st_node *n = node(op, odt, 1, sh, 1, a, NULL, NULL, NULL);
        st_node *nd = node(op, odtd, 1, sh, 1, ad, NULL, NULL, NULL);
        CHECK(run1(n) == ST_OK);
        CHECK(run1(nd) == ST_OK);
        for (int i = 0; i < NV && n->buf && nd->buf; i++) {
            double want = c->ref1(fv[i]);
            double got = odt == ST_BOOL ? U8(n)[i] : F(n)[i];
            double gotd = odtd == ST_BOOL ? U8(nd)[i] : D(nd)[i];
            /* few ulps, or an absolute slack where the formula cancels (gelu at -2.5) */
            int okf = ulps((float)got, want) <= 4 || fabs(got - want) <= 3e-7 * (1 + fabs(fv[i]));
            CHECK_MSG(okf, "%s(%g) = %.9g, want %.9g", st_ops[op].name, fv[i], got, want);
            CHECK_MSG(gotd == want || (isnan(gotd) && isnan(want)) || fabs(gotd - want) <= 1e-14 * (1 + fabs(want)),
                      "f64 %s(%g) = %.17g, want %.17g", st_ops[op].name, fv[i], gotd, want);
        }
        st_node_release(n);
        st_node_release(nd);
        ran++;
    }
    CHECK_MSG(ran > 0, "no unary primitive row in the op table");
    st_node_release(a);
    st_node_release(ad);
}

TEST(unary_int) {
    int64_t sh[1] = {6};
    int32_t v[6] = {INT32_MIN, -7, -1, 0, 1, 9};
    st_node *a = leaf(ST_I32, 1, sh, v);
    st_op ops[7] = {ST_OP_NEG, ST_OP_ABS, ST_OP_SIGN, ST_OP_RELU, ST_OP_FLOOR, ST_OP_ROUND, ST_OP_NOT};
    int32_t want[7][6] = {{INT32_MIN, 7, 1, 0, -1, -9}, {INT32_MIN, 7, 1, 0, 1, 9},
                          {-1, -1, -1, 0, 1, 1},        {0, 0, 0, 0, 1, 9},
                          {INT32_MIN, -7, -1, 0, 1, 9}, {INT32_MIN, -7, -1, 0, 1, 9},
                          {0, 0, 0, 1, 0, 0}};
    for (int k = 0; k < 7; k++) {
        st_node *n = node(ops[k], ops[k] == ST_OP_NOT ? ST_BOOL : ST_I32, 1, sh, 1, a, NULL, NULL, NULL);
        CHECK(run1(n) == ST_OK);
        for (int i = 0; i < 6; i++) {
            long long got = ops[k] == ST_OP_NOT ? U8(n)[i] : I32(n)[i];
            CHECK_MSG(got == want[k][i], "%s(%d) = %lld, want %d", st_ops[ops[k]].name, v[i], got, want[k][i]);
        }
        st_node_release(n);
    }
    st_node_release(a);
}

TEST(binary_f32) {
    int64_t sh[1] = {8};
    float a[8] = {-7, 7, -7.5f, 7, 2, NAN, 1, -0.0f}, b[8] = {3, -3, 2, 0, 0.5f, 1, NAN, 0.0f};
    st_node *na = leaf_f32(1, sh, a), *nb = leaf_f32(1, sh, b);
    struct { st_op op; float want[8]; } t[] = {
        {ST_OP_ADD, {-4, 4, -5.5f, 7, 2.5f, NAN, NAN, 0}},
        {ST_OP_SUB, {-10, 10, -9.5f, 7, 1.5f, NAN, NAN, -0.0f}},
        {ST_OP_MUL, {-21, -21, -15, 0, 1, NAN, NAN, -0.0f}},
        {ST_OP_DIV, {-7.0f / 3, -7.0f / 3, -3.75f, INFINITY, 4, NAN, NAN, NAN}},
        {ST_OP_POW, {-343, 1.0f / 343, 56.25f, 1, 1.41421356f, NAN, 1, 1}},
        {ST_OP_MAX, {3, 7, 2, 7, 2, NAN, NAN, 0}},
        {ST_OP_MIN, {-7, -3, -7.5f, 0, 0.5f, NAN, NAN, 0}},
        {ST_OP_FMOD, {-1, 1, -1.5f, NAN, 0, NAN, NAN, NAN}},
        {ST_OP_REM, {2, -2, 0.5f, NAN, 0, NAN, NAN, NAN}},
    };
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        st_node *n = node(t[k].op, ST_F32, 1, sh, 2, na, nb, NULL, NULL);
        CHECK(run1(n) == ST_OK);
        for (int i = 0; i < 8; i++) {
            float got = F(n)[i], w = t[k].want[i];
            int ok = isnan(w) ? isnan(got) : (got == w || fabsf(got - w) <= 1e-6f * fabsf(w));
            if (t[k].op == ST_OP_MIN && i == 7) ok = got == 0; /* signed zero: either */
            if (t[k].op == ST_OP_MAX && i == 7) ok = got == 0;
            CHECK_MSG(ok, "%s(%g, %g) = %.9g, want %.9g", st_ops[t[k].op].name, a[i], b[i], got, w);
        }
        st_node_release(n);
    }
    /* comparisons and logic -> bool */
    struct { st_op op; uint8_t want[8]; } c[] = {
        {ST_OP_EQ, {0, 0, 0, 0, 0, 0, 0, 1}}, {ST_OP_NE, {1, 1, 1, 1, 1, 1, 1, 0}},
        {ST_OP_LT, {1, 0, 1, 0, 0, 0, 0, 0}}, {ST_OP_LE, {1, 0, 1, 0, 0, 0, 0, 1}},
        {ST_OP_GT, {0, 1, 0, 1, 1, 0, 0, 0}}, {ST_OP_GE, {0, 1, 0, 1, 1, 0, 0, 1}},
        {ST_OP_AND, {1, 1, 1, 0, 1, 1, 1, 0}}, {ST_OP_OR, {1, 1, 1, 1, 1, 1, 1, 0}},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        st_node *n = node(c[k].op, ST_BOOL, 1, sh, 2, na, nb, NULL, NULL);
        CHECK(run1(n) == ST_OK);
        for (int i = 0; i < 8; i++)
            CHECK_MSG(U8(n)[i] == c[k].want[i], "%s(%g, %g) = %d", st_ops[c[k].op].name, a[i], b[i], U8(n)[i]);
        st_node_release(n);
    }
    st_node_release(na);
    st_node_release(nb);
}

TEST(binary_int) {
    int64_t sh[1] = {8};
    int32_t a[8] = {-7, 7, -7, 7, INT32_MIN, 2, -1, 0}, b[8] = {3, -3, -3, 0, -1, 10, -3, 0};
    st_node *na = leaf(ST_I32, 1, sh, a), *nb = leaf(ST_I32, 1, sh, b);
    struct { st_op op; int32_t want[8]; } t[] = {
        {ST_OP_FMOD, {-1, 1, -1, 0, 0, 2, -1, 0}},
        {ST_OP_REM, {2, -2, -1, 0, 0, 2, -1, 0}},
        {ST_OP_POW, {-343, 0, 0, 1, 0, 1024, -1, 1}},
        {ST_OP_ADD, {-4, 4, -10, 7, INT32_MAX, 12, -4, 0}},
        {ST_OP_MUL, {-21, -21, 21, 0, INT32_MIN, 20, 3, 0}},
        {ST_OP_SUB, {-10, 10, -4, 7, INT32_MIN + 1, -8, 2, 0}},
        {ST_OP_MAX, {3, 7, -3, 7, -1, 10, -1, 0}},
    };
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        st_node *n = node(t[k].op, ST_I32, 1, sh, 2, na, nb, NULL, NULL);
        CHECK(run1(n) == ST_OK);
        for (int i = 0; i < 8; i++)
            CHECK_MSG(I32(n)[i] == t[k].want[i], "%s(%d, %d) = %d, want %d", st_ops[t[k].op].name, a[i],
                      b[i], I32(n)[i], t[k].want[i]);
        st_node_release(n);
    }
    st_node_release(na);
    st_node_release(nb);
    /* bool add = or, mul = and */
    uint8_t x[4] = {0, 0, 1, 1}, y[4] = {0, 1, 0, 1};
    int64_t s4[1] = {4};
    st_node *bx = leaf(ST_BOOL, 1, s4, x), *by = leaf(ST_BOOL, 1, s4, y);
    st_node *add = node(ST_OP_ADD, ST_BOOL, 1, s4, 2, bx, by, NULL, NULL);
    st_node *mul = node(ST_OP_MUL, ST_BOOL, 1, s4, 2, bx, by, NULL, NULL);
    CHECK(run1(add) == ST_OK && run1(mul) == ST_OK);
    CHECK(U8(add)[0] == 0 && U8(add)[1] == 1 && U8(add)[2] == 1 && U8(add)[3] == 1);
    CHECK(U8(mul)[0] == 0 && U8(mul)[1] == 0 && U8(mul)[2] == 0 && U8(mul)[3] == 1);
    st_node_release(add);
    st_node_release(mul);
    st_node_release(bx);
    st_node_release(by);
}

TEST(where_cast_f16) {
    int64_t sh[1] = {4};
    uint8_t c[4] = {1, 0, 1, 0};
    float a[4] = {1, 2, 3, 4}, b[4] = {-1, -2, -3, -4};
    st_node *nc = leaf(ST_BOOL, 1, sh, c), *na = leaf_f32(1, sh, a), *nb = leaf_f32(1, sh, b);
    st_node *w = node(ST_OP_WHERE, ST_F32, 1, sh, 3, nc, na, nb, NULL);
    CHECK(run1(w) == ST_OK);
    CHECK(F(w)[0] == 1 && F(w)[1] == -2 && F(w)[2] == 3 && F(w)[3] == -4);
    st_node_release(w);
    /* casts */
    float v[4] = {3.7f, -3.7f, NAN, 1e10f};
    st_node *nv = leaf_f32(1, sh, v);
    st_node *ci = node(ST_OP_CAST, ST_I32, 1, sh, 1, nv, NULL, NULL, NULL);
    st_node *cb = node(ST_OP_CAST, ST_BOOL, 1, sh, 1, nv, NULL, NULL, NULL);
    st_node *ch = node(ST_OP_CAST, ST_F16, 1, sh, 1, nv, NULL, NULL, NULL);
    st_node *cbf = node(ST_OP_CAST, ST_BF16, 1, sh, 1, nv, NULL, NULL, NULL);
    CHECK(run1(ci) == ST_OK && run1(cb) == ST_OK && run1(ch) == ST_OK && run1(cbf) == ST_OK);
    CHECK(I32(ci)[0] == 3 && I32(ci)[1] == -3 && I32(ci)[2] == 0 && I32(ci)[3] == INT32_MAX);
    CHECK(U8(cb)[0] == 1 && U8(cb)[1] == 1 && U8(cb)[2] == 1 && U8(cb)[3] == 1);
    const uint16_t *h = ch->buf->data, *bf = cbf->buf->data;
    CHECK(h[0] == st_f2h(3.7f) && h[3] == 0x7C00 && (h[2] & 0x3FF));
    CHECK(bf[0] == st_f2bf(3.7f) && bf[1] == st_f2bf(-3.7f));
    /* f16 in, f16 out: computed in float, rounded at the store */
    st_node *e = node(ST_OP_EXP, ST_F16, 1, sh, 1, ch, NULL, NULL, NULL);
    CHECK(run1(e) == ST_OK);
    CHECK(((uint16_t *)e->buf->data)[1] == st_f2h(om_exp(st_h2f(h[1]))));
    st_node_release(e);
    /* i64 -> f64 and bool -> i32 */
    int64_t iv[4] = {-5, 0, 1, 1LL << 40};
    st_node *ni = leaf(ST_I64, 1, sh, iv);
    st_node *cd = node(ST_OP_CAST, ST_F64, 1, sh, 1, ni, NULL, NULL, NULL);
    st_node *bi = node(ST_OP_CAST, ST_I32, 1, sh, 1, nc, NULL, NULL, NULL);
    CHECK(run1(cd) == ST_OK && run1(bi) == ST_OK);
    CHECK(D(cd)[0] == -5 && D(cd)[3] == 1099511627776.0);
    CHECK(I32(bi)[0] == 1 && I32(bi)[1] == 0);
    st_node *nodes[] = {cd, bi, ni, ci, cb, ch, cbf, nv, nc, na, nb};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) st_node_release(nodes[i]);
}

TEST(sources) {
    int64_t sh[2] = {2, 3};
    st_node_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.iota.start = 1;
    arg.iota.step = 0.5;
    arg.iota.axis = 1;
    st_node *io = node(ST_OP_IOTA, ST_F32, 2, sh, 0, NULL, NULL, NULL, &arg);
    arg.iota.axis = 0;
    arg.iota.step = -2.7;
    st_node *ii = node(ST_OP_IOTA, ST_I32, 2, sh, 0, NULL, NULL, NULL, &arg);
    CHECK(run1(io) == ST_OK && run1(ii) == ST_OK);
    float wio[6] = {1, 1.5f, 2, 1, 1.5f, 2};
    int32_t wii[6] = {1, 1, 1, -1, -1, -1}; /* 1 - 2.7 = -1.7 -> -1 (truncation) */
    for (int i = 0; i < 6; i++) {
        CHECK(F(io)[i] == wio[i]);
        CHECK(I32(ii)[i] == wii[i]);
    }
    memset(&arg, 0, sizeof arg);
    arg.c.f = 2.5;
    st_node *cf = node(ST_OP_CONST, ST_F16, 0, NULL, 0, NULL, NULL, NULL, &arg);
    arg.c.i = -3;
    st_node *ci = node(ST_OP_CONST, ST_I64, 0, NULL, 0, NULL, NULL, NULL, &arg);
    st_node *cb = node(ST_OP_CONST, ST_BOOL, 0, NULL, 0, NULL, NULL, NULL, &arg);
    CHECK(run1(cf) == ST_OK && run1(ci) == ST_OK && run1(cb) == ST_OK);
    CHECK(*(uint16_t *)cf->buf->data == st_f2h(2.5f));
    CHECK(I64(ci)[0] == -3 && U8(cb)[0] == 1);
    /* random: counter = offset + flat index */
    int64_t rs[1] = {20000};
    memset(&arg, 0, sizeof arg);
    arg.rng.seed = 42;
    arg.rng.offset = 1000;
    arg.rng.lo = -3;
    arg.rng.hi = 5;
    st_node *ru = node(ST_OP_RAND_U, ST_F32, 1, rs, 0, NULL, NULL, NULL, &arg);
    st_node *rn = node(ST_OP_RAND_N, ST_F64, 1, rs, 0, NULL, NULL, NULL, &arg);
    st_node *ri = node(ST_OP_RAND_INT, ST_I32, 1, rs, 0, NULL, NULL, NULL, &arg);
    CHECK(run1(ru) == ST_OK && run1(rn) == ST_OK && run1(ri) == ST_OK);
    double su = 0, sn = 0, sn2 = 0, si = 0;
    int range_ok = 1;
    for (int i = 0; i < 20000; i++) {
        range_ok &= F(ru)[i] >= 0 && F(ru)[i] < 1;
        range_ok &= I32(ri)[i] >= -3 && I32(ri)[i] < 5;
        su += F(ru)[i];
        sn += D(rn)[i];
        sn2 += D(rn)[i] * D(rn)[i];
        si += I32(ri)[i];
    }
    CHECK(range_ok);
    CHECK_NEAR(su / 20000, 0.5, 0.02);
    CHECK_NEAR(sn / 20000, 0.0, 0.03);
    CHECK_NEAR(sn2 / 20000, 1.0, 0.05);
    CHECK_NEAR(si / 20000, 0.5, 0.1);
    CHECK(F(ru)[7] == st_rand_uniform_f32(42, 1007));
    CHECK(D(rn)[3] == st_rand_normal_f64(42, 1003));
    st_node *nodes[] = {io, ii, cf, ci, cb, ru, rn, ri};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) st_node_release(nodes[i]);
}

/* ---- reductions ---- */
TEST(reductions) {
    int64_t sh[3] = {2, 3, 4};
    float v[24];
    for (int i = 0; i < 24; i++) v[i] = (float)((i * 7) % 11) - 5; /* a scramble with ties */
    st_node *a = leaf_f32(3, sh, v);
    uint32_t sets[5] = {1, 2, 4, 5, 7};
    for (int s = 0; s < 5; s++) {
        int64_t osh[3];
        for (int d = 0; d < 3; d++) osh[d] = (sets[s] >> d) & 1 ? 1 : sh[d];
        st_node_arg arg;
        memset(&arg, 0, sizeof arg);
        arg.red.axes = sets[s];
        st_node *sum = node(ST_OP_RSUM, ST_F32, 3, osh, 1, a, NULL, NULL, &arg);
        st_node *mx = node(ST_OP_RMAX, ST_F32, 3, osh, 1, a, NULL, NULL, &arg);
        st_node *pr = node(ST_OP_RPROD, ST_F32, 3, osh, 1, a, NULL, NULL, &arg);
        CHECK(run1(sum) == ST_OK && run1(mx) == ST_OK && run1(pr) == ST_OK);
        /* brute force: every output element against every input element */
        int64_t on = osh[0] * osh[1] * osh[2];
        for (int64_t o = 0; o < on; o++) {
            int64_t oi[3] = {o / (osh[1] * osh[2]), (o / osh[2]) % osh[1], o % osh[2]};
            double ws = 0, wm = -INFINITY, wp = 1;
            for (int i = 0; i < 24; i++) {
                int64_t ii[3] = {i / 12, (i / 4) % 3, i % 4};
                int in = 1;
                for (int d = 0; d < 3; d++) in &= ((sets[s] >> d) & 1) || ii[d] == oi[d];
                if (!in) continue;
                ws += v[i];
                wm = v[i] > wm ? v[i] : wm;
                wp *= v[i];
            }
            CHECK_MSG(F(sum)[o] == (float)ws, "sum axes %u [%lld] = %g want %g", sets[s], (long long)o, F(sum)[o], ws);
            CHECK_MSG(F(mx)[o] == (float)wm, "max axes %u [%lld]", sets[s], (long long)o);
            CHECK_MSG(F(pr)[o] == (float)wp, "prod axes %u [%lld]", sets[s], (long long)o);
        }
        st_node_release(sum);
        st_node_release(mx);
        st_node_release(pr);
    }
    st_node_release(a);
    /* argmax / argmin: first occurrence, first NaN wins */
    int64_t s2[2] = {3, 4}, o2[2] = {3, 1}, o0[2] = {1, 4};
    float m[12] = {1, 5, 5, 2, NAN, 3, NAN, 9, -1, -1, -4, -4};
    st_node *b = leaf_f32(2, s2, m);
    st_node_arg ar;
    memset(&ar, 0, sizeof ar);
    ar.red.axes = 2;
    st_node *am = node(ST_OP_RARGMAX, ST_I64, 2, o2, 1, b, NULL, NULL, &ar);
    st_node *an = node(ST_OP_RARGMIN, ST_I64, 2, o2, 1, b, NULL, NULL, &ar);
    st_node *mx = node(ST_OP_RMAX, ST_F32, 2, o2, 1, b, NULL, NULL, &ar);
    ar.red.axes = 1;
    st_node *am0 = node(ST_OP_RARGMAX, ST_I64, 2, o0, 1, b, NULL, NULL, &ar);
    CHECK(run1(am) == ST_OK && run1(an) == ST_OK && run1(mx) == ST_OK && run1(am0) == ST_OK);
    CHECK(I64(am)[0] == 1 && I64(am)[1] == 0 && I64(am)[2] == 0);
    CHECK(I64(an)[0] == 0 && I64(an)[1] == 0 && I64(an)[2] == 2);
    CHECK(F(mx)[0] == 5 && isnan(F(mx)[1]) && F(mx)[2] == -1);
    CHECK(I64(am0)[0] == 1 && I64(am0)[1] == 0 && I64(am0)[2] == 1 && I64(am0)[3] == 1);
    st_node_release(am);
    st_node_release(an);
    st_node_release(mx);
    st_node_release(am0);
    st_node_release(b);
    /* integer sum (i64), bool max, empty reduction */
    int64_t iv[6] = {INT64_MAX, 1, 5, -2, 3, 4}, s3[2] = {2, 3}, o3[2] = {2, 1};
    st_node *ni = leaf(ST_I64, 2, s3, iv);
    ar.red.axes = 2;
    st_node *is = node(ST_OP_RSUM, ST_I64, 2, o3, 1, ni, NULL, NULL, &ar);
    st_node *ip = node(ST_OP_RPROD, ST_I64, 2, o3, 1, ni, NULL, NULL, &ar);
    CHECK(run1(is) == ST_OK && run1(ip) == ST_OK);
    CHECK(I64(is)[0] == INT64_MIN + 5 && I64(is)[1] == 5); /* wraps, no UB */
    CHECK(I64(ip)[1] == -24);
    int64_t es[2] = {0, 3}, eo[2] = {1, 3};
    st_node *e = leaf_f32(2, es, NULL);
    ar.red.axes = 1;
    st_node *esum = node(ST_OP_RSUM, ST_F32, 2, eo, 1, e, NULL, NULL, &ar);
    st_node *eprod = node(ST_OP_RPROD, ST_F32, 2, eo, 1, e, NULL, NULL, &ar);
    CHECK(run1(esum) == ST_OK && run1(eprod) == ST_OK);
    CHECK(F(esum)[0] == 0 && F(esum)[2] == 0 && F(eprod)[1] == 1);
    st_node *nodes[] = {is, ip, ni, esum, eprod, e};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) st_node_release(nodes[i]);
}

/* Reductions longer than a chunk (1024 elements), over trailing dims (rows, everything), leading
 * dims (columns) and a middle dim, against a brute-force loop taking each output's elements in
 * flat order (the interpreter's order, to the bit): sums whose value depends on that order,
 * max/min with a NaN in one output. */
TEST(reductions_across_chunks) {
    static const struct { int64_t sh[3]; uint32_t axes; } cases[] = {
        {{3, 1500, 1}, 2}, {{3, 1, 1500}, 4}, {{1500, 3, 1}, 1}, {{700, 2, 3}, 3}, {{7, 600, 1}, 7},
        {{4, 700, 2}, 2}, {{2, 1100, 2}, 5},
    };
    static const st_op ops[4] = {ST_OP_RSUM, ST_OP_RMAX, ST_OP_RMIN, ST_OP_RPROD};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t *sh = cases[c].sh;
        const uint32_t axes = cases[c].axes;
        const int64_t n = sh[0] * sh[1] * sh[2];
        int64_t osh[3];
        for (int d = 0; d < 3; d++) osh[d] = (axes >> d) & 1 ? 1 : sh[d];
        const int64_t on = osh[0] * osh[1] * osh[2];
        st_node_arg arg;
        memset(&arg, 0, sizeof arg);
        arg.red.axes = axes;
        for (int k = 0; k < 4; k++) {
            /* Each output's elements, by their position p in its (flat-order) sequence: 2^60,
             * -2^60, a small value, then zeros, repeating every 7. A double sum keeps only what
             * follows the last pair, so any other order gives another sum. Products: values
             * near 1. Max and min: a NaN in one output. */
            float *v = malloc((size_t)n * sizeof *v);
            double *w = malloc((size_t)on * sizeof *w);
            int64_t *cnt = calloc((size_t)on, sizeof *cnt);
            for (int64_t i = 0; i < n; i++) {
                const int64_t ii[3] = {i / (sh[1] * sh[2]), (i / sh[2]) % sh[1], i % sh[2]};
                int64_t o = 0;
                for (int d = 0; d < 3; d++) o = o * osh[d] + ((axes >> d) & 1 ? 0 : ii[d]);
                const int64_t p = cnt[o]++;
                const double big = ldexp(1.0, 60), x = p % 7 == 0 ? big : p % 7 == 1 ? -big : p % 7 == 2 ? 0.25 * (double)(p + 1) : 0;
                v[i] = (float)(ops[k] == ST_OP_RPROD ? 1 + (double)((i * 7919) % 1000) * 1e-6 : x);
            }
            free(cnt);
            if (ops[k] == ST_OP_RMAX || ops[k] == ST_OP_RMIN) v[n / 3] = NAN;
            for (int64_t o = 0; o < on; o++)
                w[o] = ops[k] == ST_OP_RSUM ? 0 : ops[k] == ST_OP_RPROD ? 1 : ops[k] == ST_OP_RMAX ? -INFINITY : INFINITY;
            for (int64_t i = 0; i < n; i++) {
                const int64_t ii[3] = {i / (sh[1] * sh[2]), (i / sh[2]) % sh[1], i % sh[2]};
                int64_t o = 0;
                for (int d = 0; d < 3; d++) o = o * osh[d] + ((axes >> d) & 1 ? 0 : ii[d]);
                const double x = v[i];
                switch (ops[k]) {
                case ST_OP_RSUM: w[o] += x; break;
                case ST_OP_RMAX: w[o] = (x != x || x > w[o]) ? x : w[o]; break;
                case ST_OP_RMIN: w[o] = (x != x || x < w[o]) ? x : w[o]; break;
                default: w[o] *= x; break;
                }
            }
            st_node *a = leaf_f32(3, sh, v);
            st_node *r = node(ops[k], ST_F32, 3, osh, 1, a, NULL, NULL, &arg);
            CHECK(run1(r) == ST_OK);
            for (int64_t o = 0; o < on; o++) {
                const float want = (float)w[o], got = F(r)[o];
                if (!(got == want || (got != got && want != want))) {
                    CHECK_MSG(0, "case %zu op %d: [%lld] = %.9g, want %.9g", c, k, (long long)o, got, want);
                    break;
                }
            }
            st_node_release(r);
            st_node_release(a);
            free(w);
            free(v);
        }
    }
}

/* The AVX-512 and AVX2+FMA copies of the elementwise loops (interp_ew.c, interp_ew_avx2.c) against
 * the baseline one, bit for bit, for every op of every arity and compute type, on values with
 * NaNs, infinities, signed zeros, subnormals, huge and tiny magnitudes and integers near their
 * limits (a NaN matches any NaN: the payload an operation passes on depends on its operand order,
 * which vectorizing may swap). The baseline copy's fused multiply-adds are libm's fmaf. */
static void check_ew_copy(const char *name, const ew_tables *v);
TEST(elementwise_vector_copy_matches_baseline) {
    const ew_tables *v512 = st_interp_ew_avx512(), *v2 = st_interp_ew_avx2();
    if (v512) check_ew_copy("AVX-512", v512);
    else printf("(no AVX-512 on this CPU)\n");
    if (v2) check_ew_copy("AVX2+FMA", v2);
    else printf("(no AVX2 with FMA on this CPU)\n");
}
static void check_ew_copy(const char *name, const ew_tables *v) {
    const ew_tables *b = st_interp_ew_base();
    enum { N = 999 };   /* odd: vector loops and their tails */
    static float fa[N], fb[N], fo1[N], fo2[N];
    static double da[N], db[N], do1[N], do2[N];
    static int32_t ia[N], ib[N], io1[N], io2[N];
    static int64_t la[N], lb[N], lo1[N], lo2[N];
    static uint8_t ua[N], ub[N], uo1[N], uo2[N], cond[N];
    static const double special[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 1e-40, -1e-310, 1e30, -1e30,
                                     1e300, 88.7, -103.9, 709.0, 0.69314718, 1e-8, NAN, INFINITY, -INFINITY};
    const int ns = (int)(sizeof special / sizeof special[0]);
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        const double x = i < ns ? special[i] : ((double)(r % 200001) - 100000) * 1e-3 * (i % 5 ? 1 : 1e3);
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        const double y = (i * 7) % N < ns ? special[(i * 7) % N] : ((double)(r % 20001) - 10000) * 1e-3;
        fa[i] = (float)x; fb[i] = (float)y; da[i] = x; db[i] = y;
        ia[i] = i % 11 == 0 ? INT32_MIN : (int32_t)(r % 4001) - 2000; ib[i] = (int32_t)(i % 9) - 4;
        la[i] = i % 13 == 0 ? INT64_MAX : (int64_t)(r % 400001) - 200000; lb[i] = (int64_t)(i % 7) - 3;
        ua[i] = (uint8_t)(r & 1); ub[i] = (uint8_t)((r >> 1) & 1); cond[i] = (uint8_t)((r >> 2) & 1);
    }
    const void *A[5] = {fa, da, ia, la, ua}, *B[5] = {fb, db, ib, lb, ub};
    void *O1[5] = {fo1, do1, io1, lo1, uo1}, *O2[5] = {fo2, do2, io2, lo2, uo2};
    static const size_t es[5] = {4, 8, 4, 8, 1};
    int checked = 0;
    for (int op = 0; op < ST_OP_COUNT; op++) {
        for (int ct = 0; ct < 5; ct++) {
            int arity = b->t1[op] ? 1 : b->t2[op] ? 2 : b->t3[op] ? 3 : 0;
            if (!arity) continue;
            memset(O1[ct], 0xAB, N * es[ct]);
            memset(O2[ct], 0xCD, N * es[ct]);
            if (arity == 1) { b->t1[op]((ctype)ct, A[ct], O1[ct], N); v->t1[op]((ctype)ct, A[ct], O2[ct], N); }
            else if (arity == 2) { b->t2[op]((ctype)ct, A[ct], B[ct], O1[ct], N); v->t2[op]((ctype)ct, A[ct], B[ct], O2[ct], N); }
            else { b->t3[op]((ctype)ct, cond, A[ct], B[ct], O1[ct], N); v->t3[op]((ctype)ct, cond, A[ct], B[ct], O2[ct], N); }
            checked++;
            for (int i = 0; i < N; i++) {
                const int nan2 = ct == CT_F32 ? isnan(fo1[i]) && isnan(fo2[i]) : ct == CT_F64 && isnan(do1[i]) && isnan(do2[i]);
                if (!nan2 && memcmp((char *)O1[ct] + i * es[ct], (char *)O2[ct] + i * es[ct], es[ct])) {
                    CHECK_MSG(0, "%s, compute type %d, element %d: the %s copy differs", st_ops[op].name, ct, i, name);
                    break;
                }
            }
        }
    }
    CHECK(checked > 100);
}

/* ---- matmul ---- */
TEST(matmul) {
    int64_t sa[3] = {2, 2, 3}, sb[3] = {2, 3, 2}, so[3] = {2, 2, 2};
    float a[12] = {1, 2, 3, 4, 5, 6, /**/ -1, 0, 1, 2, 2, 2};
    float b[12] = {1, 0, 0, 1, 1, 1, /**/ 1, 2, 3, 4, 5, 6};
    st_node *na = leaf_f32(3, sa, a), *nb = leaf_f32(3, sb, b);
    st_node *mm = node(ST_OP_MATMUL, ST_F32, 3, so, 2, na, nb, NULL, NULL);
    CHECK(run1(mm) == ST_OK);
    float want[8] = {4, 5, 10, 11, /**/ 4, 4, 18, 24};
    for (int i = 0; i < 8; i++) CHECK_MSG(F(mm)[i] == want[i], "mm[%d] = %g want %g", i, F(mm)[i], want[i]);
    int32_t ia[6] = {1, 2, 3, 4, 5, 6}, ib[6] = {7, 8, 9, 10, 11, 12};
    int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s22[2] = {2, 2};
    st_node *xa = leaf(ST_I32, 2, s23, ia), *xb = leaf(ST_I32, 2, s32, ib);
    st_node *im = node(ST_OP_MATMUL, ST_I32, 2, s22, 2, xa, xb, NULL, NULL);
    CHECK(run1(im) == ST_OK);
    CHECK(I32(im)[0] == 58 && I32(im)[1] == 64 && I32(im)[2] == 139 && I32(im)[3] == 154);
    /* K = 0: zeros */
    int64_t s20[2] = {2, 0}, s02[2] = {0, 2};
    st_node *za = leaf_f32(2, s20, NULL), *zb = leaf_f32(2, s02, NULL);
    st_node *zm = node(ST_OP_MATMUL, ST_F32, 2, s22, 2, za, zb, NULL, NULL);
    CHECK(run1(zm) == ST_OK);
    CHECK(F(zm)[0] == 0 && F(zm)[3] == 0);
    st_node *nodes[] = {mm, na, nb, im, xa, xb, zm, za, zb};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) st_node_release(nodes[i]);
}

/* ---- gather / scatter_add / setview / view ---- */
TEST(gather_scatter) {
    int64_t sd[2] = {3, 2}, si[2] = {2, 2};
    float d[6] = {1, 2, 3, 4, 5, 6};
    int64_t idx[4] = {2, 0, 1, 1};
    st_node *nd = leaf_f32(2, sd, d), *ni = leaf(ST_I64, 2, si, idx);
    st_node_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.axis.dim = 0;
    st_node *g = node(ST_OP_GATHER, ST_F32, 2, si, 2, nd, ni, NULL, &arg);
    CHECK(run1(g) == ST_OK);
    CHECK(F(g)[0] == 5 && F(g)[1] == 2 && F(g)[2] == 3 && F(g)[3] == 4);
    st_node_release(g);
    int32_t bad[4] = {0, 3, 1, -1};
    st_node *nbad = leaf(ST_I32, 2, si, bad);
    g = node(ST_OP_GATHER, ST_F32, 2, si, 2, nd, nbad, NULL, &arg);
    CHECK(run1(g) == ST_ERR_ARG);
    CHECK(strstr(st_last_error(), "gather: index 3 out of range for dim 0 of size 3") != NULL);
    CHECK(g->buf == NULL);
    st_node_release(g);
    /* scatter_add along dim 1 with duplicate targets */
    float base[6] = {0, 0, 0, 0, 0, 0}, vals[4] = {1, 2, 3, 4};
    int64_t sidx[4] = {1, 1, 0, 1};
    st_node *nb = leaf_f32(2, sd, base), *nv = leaf_f32(2, si, vals), *nsi = leaf(ST_I64, 2, si, sidx);
    arg.axis.dim = 1;
    st_node *sa = node(ST_OP_SCATTER_ADD, ST_F32, 2, sd, 3, nb, nsi, nv, &arg);
    CHECK(run1(sa) == ST_OK);
    float ws[6] = {0, 3, 3, 4, 0, 0};
    for (int i = 0; i < 6; i++) CHECK_MSG(F(sa)[i] == ws[i], "scatter[%d] = %g", i, F(sa)[i]);
    st_node_release(sa);
    sa = node(ST_OP_SCATTER_ADD, ST_F32, 2, sd, 3, nb, nbad, nv, &arg);
    CHECK(run1(sa) == ST_ERR_ARG && strstr(st_last_error(), "out of range") && sa->buf == NULL);
    st_node_release(sa);
    /* setview: write a (2,) column into column 1 of a (3, 2) base: strides {2}, offset 1 */
    int64_t s2[1] = {2};
    float col[2] = {9, 8};
    st_node *nc = leaf_f32(1, s2, col);
    memset(&arg, 0, sizeof arg);
    arg.view.strides[0] = 2;
    arg.view.offset = 1;
    st_node *sv = node(ST_OP_SETVIEW, ST_F32, 2, sd, 2, nd, nc, NULL, &arg);
    CHECK(run1(sv) == ST_OK);
    float wv[6] = {1, 9, 3, 8, 5, 6};
    for (int i = 0; i < 6; i++) CHECK(F(sv)[i] == wv[i]);
    CHECK(F(nd)[1] == 2); /* the base is untouched */
    st_node_release(sv);
    /* view: transpose (2, 3) of the (3, 2) data, then a masked pad (3, 4) with offset -1 */
    int64_t st[2] = {2, 3};
    memset(&arg, 0, sizeof arg);
    arg.view.strides[0] = 1;
    arg.view.strides[1] = 2;
    st_node *tv = node(ST_OP_VIEW, ST_F32, 2, st, 1, nd, NULL, NULL, &arg);
    CHECK(run1(tv) == ST_OK);
    float wt[6] = {1, 3, 5, 2, 4, 6};
    for (int i = 0; i < 6; i++) CHECK(F(tv)[i] == wt[i]);
    int64_t sp[2] = {3, 4};
    memset(&arg, 0, sizeof arg);
    arg.view.strides[0] = 2;
    arg.view.strides[1] = 1;
    arg.view.offset = -1;
    arg.view.has_mask = 1;
    arg.view.lo[0] = 0; arg.view.hi[0] = 3;
    arg.view.lo[1] = 1; arg.view.hi[1] = 3;
    st_node *pv = node(ST_OP_VIEW, ST_F32, 2, sp, 1, nd, NULL, NULL, &arg);
    CHECK(run1(pv) == ST_OK);
    float wp[12] = {0, 1, 2, 0, 0, 3, 4, 0, 0, 5, 6, 0};
    for (int i = 0; i < 12; i++) CHECK_MSG(F(pv)[i] == wp[i], "pad[%d] = %g", i, F(pv)[i]);
    /* broadcast: stride 0 */
    memset(&arg, 0, sizeof arg);
    arg.view.strides[1] = 1;
    int64_t sbc[2] = {3, 2};
    st_node *bv = node(ST_OP_VIEW, ST_F32, 2, sbc, 1, nc, NULL, NULL, &arg);
    CHECK(run1(bv) == ST_OK);
    CHECK(F(bv)[0] == 9 && F(bv)[1] == 8 && F(bv)[4] == 9 && F(bv)[5] == 8);
    /* a reversed row (stride -1), and a row whose end lies past the src (a row at a time, the
     * ends are what is checked) */
    memset(&arg, 0, sizeof arg);
    arg.view.strides[0] = 2;
    arg.view.strides[1] = -1;
    arg.view.offset = 1;
    int64_t sfl[2] = {3, 2};
    st_node *flv = node(ST_OP_VIEW, ST_F32, 2, sfl, 1, nd, NULL, NULL, &arg);
    CHECK(run1(flv) == ST_OK);
    float wf[6] = {2, 1, 4, 3, 6, 5};
    for (int i = 0; i < 6; i++) CHECK_MSG(F(flv)[i] == wf[i], "flip[%d] = %g", i, F(flv)[i]);
    arg.view.strides[1] = 1;
    st_node *ov = node(ST_OP_VIEW, ST_F32, 2, sfl, 1, nd, NULL, NULL, &arg);
    CHECK(run1(ov) == ST_ERR_INTERNAL && strstr(st_last_error(), "outside its src"));
    st_clear_error();
    st_node *nodes[] = {tv, pv, bv, flv, ov, nc, nb, nv, nsi, nbad, nd, ni};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) st_node_release(nodes[i]);
}

/* Transposed views (the next-to-last dim contiguous in the source) are copied in tiles of rows:
 * every element where the element loop puts it, for 1-, 2-, 4- and 8-byte elements, row counts
 * below, at and past a tile, batches, an offset; a view whose last tile would read past its source
 * is an error. */
TEST(transposed_views_tiled) {
    static const st_dtype dts[4] = {ST_BOOL, ST_F16, ST_F32, ST_F64};
    static const int64_t Rs[] = {2, 5, 16, 17, 40}, Cs[] = {1, 3, 33};
    for (int d = 0; d < 4; d++)
        for (size_t ri = 0; ri < sizeof Rs / sizeof Rs[0]; ri++)
            for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++) {
                const st_dtype dt = dts[d];
                const size_t es = st_dtypes[dt].size;
                const int64_t B = 3, R = Rs[ri], C = Cs[ci], off = 2;
                const int64_t total = off + B * C * R;
                unsigned char *data = malloc((size_t)total * es);
                for (int64_t i = 0; i < total * (int64_t)es; i++) data[i] = (unsigned char)(i * 37 + 11);
                if (dt == ST_BOOL)
                    for (int64_t i = 0; i < total; i++) data[i] &= 1;
                int64_t sh_src[1] = {total};
                st_node *src = leaf(dt, 1, sh_src, data);
                st_node_arg arg;
                memset(&arg, 0, sizeof arg);
                arg.view.strides[0] = C * R;   /* (B, R, C) view of (B, C, R) data at offset off */
                arg.view.strides[1] = 1;
                arg.view.strides[2] = R;
                arg.view.offset = off;
                int64_t sh[3] = {B, R, C};
                st_node *v = node(ST_OP_VIEW, dt, 3, sh, 1, src, NULL, NULL, &arg);
                CHECK(run1(v) == ST_OK);
                int bad = 0;
                for (int64_t b = 0; b < B; b++)
                    for (int64_t r = 0; r < R; r++)
                        for (int64_t c = 0; c < C; c++) {
                            const int64_t o = (b * R + r) * C + c, i = off + b * C * R + r + c * R;
                            bad += memcmp((const char *)v->buf->data + o * (int64_t)es, data + i * (int64_t)es, es) != 0;
                        }
                CHECK_MSG(bad == 0, "dtype %d R %lld C %lld: %d elements misplaced", (int)dt, (long long)R,
                          (long long)C, bad);
                st_node_release(v);
                arg.view.offset = off + 1;   /* the last batch's last tile one element past the end */
                st_node *ov = node(ST_OP_VIEW, dt, 3, sh, 1, src, NULL, NULL, &arg);
                CHECK(run1(ov) == ST_ERR_INTERNAL && strstr(st_last_error(), "outside its src"));
                st_clear_error();
                st_node_release(ov);
                st_node_release(src);
                free(data);
                if (test_cur_failed) return;
            }
}

/* ---- interp_execute: buffer lifetimes, failure cleanup, interrupts, zero-size ---- */
TEST(execute_region) {
    int64_t sh[1] = {3};
    float v[3] = {1, 2, 3};
    st_node *a = leaf_f32(1, sh, v);
    st_node *b = node(ST_OP_EXP, ST_F32, 1, sh, 1, a, NULL, NULL, NULL);     /* intermediate */
    st_node *c = node(ST_OP_NEG, ST_F32, 1, sh, 1, b, NULL, NULL, NULL);     /* held outside */
    st_node *d = node(ST_OP_ADD, ST_F32, 1, sh, 2, c, c, NULL, NULL);         /* target */
    st_node_release(b); /* now only c holds b: freeable after c ran */
    b->uses = 1;
    c->uses = 2;        /* c: refcnt 3 (us + twice d) > uses 2: kept */
    d->uses = 0;
    d->flags |= NODE_TARGET;
    st_node *order[3] = {b, c, d};
    st_region r = {order, 3, 1};
    CHECK(interp_execute(&r) == ST_OK);
    CHECK(b->buf == NULL);
    CHECK(c->buf != NULL && d->buf != NULL);
    if (d->buf) CHECK(F(d)[1] == -2 * om_exp(2.0f));
    st_node_release(d);
    st_node_release(c);

    /* failure in the middle releases what was set */
    int64_t si[1] = {2};
    int64_t badi[2] = {0, 7};
    st_node *ix = leaf(ST_I64, 1, si, badi);
    st_node *e = node(ST_OP_EXP, ST_F32, 1, sh, 1, a, NULL, NULL, NULL);
    st_node_arg arg;
    memset(&arg, 0, sizeof arg);
    st_node *g = node(ST_OP_GATHER, ST_F32, 1, si, 2, e, ix, NULL, &arg);
    st_node *h = node(ST_OP_NEG, ST_F32, 1, si, 1, g, NULL, NULL, NULL);
    e->uses = 1;
    g->uses = 1;
    h->flags |= NODE_TARGET;
    st_node *o2[3] = {e, g, h};
    st_region r2 = {o2, 3, 1};
    CHECK(interp_execute(&r2) == ST_ERR_ARG);
    CHECK(e->buf == NULL && g->buf == NULL && h->buf == NULL);

    /* interrupt: fails, clears the flag, leaves no buffers */
    st_rt.interrupted = 1;
    st_node *o1[1] = {e};
    e->flags |= NODE_TARGET;
    st_region r3 = {o1, 1, 1};
    CHECK(interp_execute(&r3) == ST_ERR_INTERRUPT);
    CHECK(st_rt.interrupted == 0 && e->buf == NULL);
    CHECK(strstr(st_last_error(), "interrupted") != NULL);
    CHECK(interp_execute(&r3) == ST_OK && e->buf != NULL);
    st_node_release(h);
    st_node_release(g);
    st_node_release(e);
    st_node_release(ix);

    /* zero-size tensors */
    int64_t z[2] = {0, 4};
    st_node *za = leaf_f32(2, z, NULL);
    st_node *zb = node(ST_OP_SIN, ST_F32, 2, z, 1, za, NULL, NULL, NULL);
    CHECK(run1(zb) == ST_OK && zb->buf != NULL);
    st_node_release(zb);
    st_node_release(za);
    st_node_release(a);

    /* a larger graph: exp(x) * 2 summed, chunk boundaries crossed */
    int64_t big[1] = {5000};
    float *bv = malloc(5000 * sizeof *bv);
    for (int i = 0; i < 5000; i++) bv[i] = (float)i / 5000.0f;
    st_node *x = leaf_f32(1, big, bv);
    free(bv);
    memset(&arg, 0, sizeof arg);
    arg.c.f = 2;
    st_node *two = node(ST_OP_CONST, ST_F32, 0, NULL, 0, NULL, NULL, NULL, &arg);
    memset(&arg, 0, sizeof arg);
    st_node *tb = node(ST_OP_VIEW, ST_F32, 1, big, 1, two, NULL, NULL, &arg); /* stride 0 */
    st_node *ex = node(ST_OP_EXP, ST_F32, 1, big, 1, x, NULL, NULL, NULL);
    st_node *mu = node(ST_OP_MUL, ST_F32, 1, big, 2, ex, tb, NULL, NULL);
    arg.red.axes = 1;
    int64_t one[1] = {1};
    st_node *sm = node(ST_OP_RSUM, ST_F32, 1, one, 1, mu, NULL, NULL, &arg);
    st_node *seq[5] = {two, tb, ex, mu, sm};
    for (int i = 0; i < 4; i++) { seq[i]->uses = 1; st_node_release(seq[i]); }
    sm->flags |= NODE_TARGET;
    st_region r4 = {seq, 5, 1};
    CHECK(interp_execute(&r4) == ST_OK);
    double want = 0;
    for (int i = 0; i < 5000; i++) want += 2 * exp((double)((float)i / 5000.0f));
    CHECK_NEAR(F(sm)[0], want, 1e-6);
    CHECK(ex->buf == NULL && mu->buf == NULL);
    st_node_release(sm); /* releases the chain */
    st_node_release(x);
}

int main(void) {
    st_runtime_init();
    RUN(error_wraps_previous);
    RUN(f16_bits);
    RUN(bf16_bits);
    RUN(cvt);
    RUN(philox_kat);
    RUN(float_math_ulps);
    RUN(unary_f32_f64);
    RUN(unary_int);
    RUN(binary_f32);
    RUN(binary_int);
    RUN(where_cast_f16);
    RUN(sources);
    RUN(reductions);
    RUN(reductions_across_chunks);
    RUN(elementwise_vector_copy_matches_baseline);
    RUN(matmul);
    RUN(transposed_views_tiled);
    RUN(gather_scatter);
    RUN(execute_region);
    TEST_MAIN_END();
}
