/*
 * test_ops.c — the semantics of every public op (include/stitch.h), checked against values
 * computed by hand or by a plain C loop in this file: creation and RNG, the elementwise functions
 * (every row of the op table, tests/op_table.h, against its reference; integer, bool and special
 * values by hand), broadcasting, weak scalars and type promotion, where/clamp, reductions,
 * softmax, matmul, views and writes through views (eager semantics), cat/stack, gather/scatter,
 * one_hot, casts, host copies and errors (immediate, naming both shapes, the runtime usable
 * afterwards).
 *
 * Invariant: the whole suite runs three times — default mode, st_set_eager(1) (reference
 * interpreter op by op) and st_set_jit_min(0) (every fused kernel compiled) — and must give the
 * same answers in each; test names carry the mode as a suffix (`PASS unary_f32/jit`).
 * Only the public API is used, apart from the op table (tests/op_table.h reads the internal st_ops
 * for each case's dtype rule). Every tensor a test makes goes through K() and is released when the
 * test ends.
 */
#include "test.h"
#include "fuzz_util.h"
#include "op_table.h"

#include <float.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- harness ---- */

static st_tensor *pool_[8192];
static int npool_;
/* Registers t for release at the end of the test; returns t (NULL passes through). */
static st_tensor *K(st_tensor *t) {
    if (t && npool_ < (int)(sizeof pool_ / sizeof pool_[0])) pool_[npool_++] = t;
    return t;
}
static void pool_clear(void) {
    while (npool_ > 0) st_release(pool_[--npool_]);
}

enum { MODE_DEFAULT, MODE_EAGER, MODE_JIT, MODE_COUNT };
static const char *mode_names[MODE_COUNT] = {"default", "eager", "jit"};
static int cur_mode;
static void set_mode(int m) {
    cur_mode = m;
    st_set_eager(m == MODE_EAGER);
    st_set_jit_min(m == MODE_JIT ? 0 : 32768);
}

#define RUNM(name)                                                                              \
    do {                                                                                        \
        set_mode(cur_mode);                                                                     \
        test_cur_failed = 0;                                                                    \
        test_cur_msg[0] = 0;                                                                    \
        st_clear_error();                                                                       \
        test_##name();                                                                          \
        pool_clear();                                                                           \
        set_mode(cur_mode);                                                                     \
        if (test_cur_failed) {                                                                  \
            printf("FAIL %s/%s: %s\n", #name, mode_names[cur_mode], test_cur_msg);              \
            test_failed_total++;                                                                \
        } else {                                                                                \
            printf("PASS %s/%s\n", #name, mode_names[cur_mode]);                                \
        }                                                                                       \
        fflush(stdout);                                                                         \
    } while (0)

#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define V(...) ((const double[]){__VA_ARGS__})
#define NV(...) ((int64_t)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)))
#define MK(dt, nd, shape, ...) K(fu_make(dt, nd, shape, V(__VA_ARGS__)))

static int dt_of(const st_tensor *t) { return t ? (int)st_dtype_of(t) : -1; }

static int near(double a, double b, double tol) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (a == b) return 1;
    if (isinf(a) || isinf(b)) return 0;
    return fabs(a - b) <= tol * (1 + fabs(b));
}

/* Checks t's shape (when nd >= 0) and its n values against want. */
static void expect_(int line, const char *what, st_tensor *t, int nd, const int64_t *shape,
                    int64_t n, const double *want, double tol) {
    if (test_cur_failed) return;
    if (!t) {
        TEST_FAILF("line %d: %s is NULL [%s]", line, what, st_last_error());
        return;
    }
    if (nd >= 0) {
        int64_t s[ST_MAX_DIMS];
        st_shape(t, s);
        int ok = st_ndim(t) == nd;
        for (int i = 0; ok && i < nd; i++) ok = s[i] == shape[i];
        if (!ok) {
            char a[128], b[128];
            TEST_FAILF("line %d: %s has shape %s, expected %s", line, what,
                       st_shape_str(st_ndim(t), s, a, sizeof a), st_shape_str(nd, shape, b, sizeof b));
            return;
        }
    }
    if (st_numel(t) != n) {
        TEST_FAILF("line %d: %s has %lld elements, expected %lld", line, what, (long long)st_numel(t),
                   (long long)n);
        return;
    }
    int64_t m;
    double *got = fu_read(t, &m);
    if (!got) {
        TEST_FAILF("line %d: reading %s failed: %s", line, what, st_last_error());
        return;
    }
    for (int64_t i = 0; i < n; i++)
        if (!near(got[i], want[i], tol)) {
            TEST_FAILF("line %d: %s[%lld] = %.9g, expected %.9g", line, what, (long long)i, got[i],
                       want[i]);
            break;
        }
    free(got);
}
#define EXPECT(t, tol, ...) expect_(__LINE__, #t, t, -1, NULL, NV(__VA_ARGS__), V(__VA_ARGS__), tol)
#define EXPECT_S(t, nd, shape, tol, ...) \
    expect_(__LINE__, #t, t, nd, shape, NV(__VA_ARGS__), V(__VA_ARGS__), tol)
#define EXPECT_A(t, n, arr, tol) expect_(__LINE__, #t, t, -1, NULL, n, arr, tol)
#define EXPECT_SHAPE(t, nd, shape) expect_shape_(__LINE__, #t, t, nd, shape)

static void expect_shape_(int line, const char *what, st_tensor *t, int nd, const int64_t *shape) {
    if (test_cur_failed) return;
    if (!t) {
        TEST_FAILF("line %d: %s is NULL [%s]", line, what, st_last_error());
        return;
    }
    int64_t s[ST_MAX_DIMS];
    st_shape(t, s);
    int ok = st_ndim(t) == nd;
    for (int i = 0; ok && i < nd; i++) ok = s[i] == shape[i];
    if (!ok) {
        char a[128], b[128];
        TEST_FAILF("line %d: %s has shape %s, expected %s", line, what,
                   st_shape_str(st_ndim(t), s, a, sizeof a), st_shape_str(nd, shape, b, sizeof b));
    }
}

/* An error result: NULL with the given status and a message containing both strings. */
#define EXPECT_ERR(expr, status, s1, s2) expect_err_(__LINE__, #expr, K(expr), status, s1, s2)
static void expect_err_(int line, const char *what, st_tensor *t, st_status status, const char *s1,
                        const char *s2) {
    if (test_cur_failed) return;
    const char *msg = st_last_error();
    if (t) TEST_FAILF("line %d: %s succeeded, expected an error", line, what);
    else if (st_last_status() != status)
        TEST_FAILF("line %d: %s: status %d, expected %d (%s)", line, what, (int)st_last_status(),
                   (int)status, msg);
    else if ((s1 && !strstr(msg, s1)) || (s2 && !strstr(msg, s2)))
        TEST_FAILF("line %d: %s: message \"%s\" should contain \"%s\" and \"%s\"", line, what, msg,
                   s1 ? s1 : "", s2 ? s2 : "");
    st_clear_error();
}

static st_tensor *iota_f(st_dtype dt, int nd, const int64_t *shape, double start, double step) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = start + step * (double)i;
    st_tensor *t = K(fu_make(dt, nd, shape, v));
    free(v);
    return t;
}

/* ---- dtypes, creation ---- */

TEST(dtypes) {
    CHECK(strcmp(st_dtype_name(ST_BF16), "bf16") == 0);
    CHECK(strcmp(st_dtype_name(ST_BOOL), "bool") == 0);
    CHECK_EQ_INT(st_dtype_from_name("float32"), ST_F32);
    CHECK_EQ_INT(st_dtype_from_name("long"), ST_I64);
    CHECK_EQ_INT(st_dtype_from_name("half"), ST_F16);
    CHECK_EQ_INT(st_dtype_from_name("nope"), -1);
    CHECK_EQ_INT(st_dtype_size(ST_F64), 8);
    CHECK_EQ_INT(st_dtype_size(ST_BF16), 2);
    CHECK_EQ_INT(st_dtype_size(ST_BOOL), 1);
    CHECK_EQ_INT(st_promote_types(ST_I32, ST_I64), ST_I64);
    CHECK_EQ_INT(st_promote_types(ST_BOOL, ST_I32), ST_I32);
    CHECK_EQ_INT(st_promote_types(ST_I64, ST_F16), ST_F16);
    CHECK_EQ_INT(st_promote_types(ST_F16, ST_BF16), ST_F32);
    CHECK_EQ_INT(st_promote_types(ST_F32, ST_F64), ST_F64);
    CHECK_EQ_INT(st_promote_types(ST_BF16, ST_F32), ST_F32);
    CHECK_EQ_INT(st_promote_types(ST_BOOL, ST_BOOL), ST_BOOL);
}

TEST(creation) {
    st_tensor *z = K(st_zeros(ST_F32, 2, SH(2, 3)));
    EXPECT_S(z, 2, SH(2, 3), 0, 0, 0, 0, 0, 0, 0);
    CHECK_EQ_INT(dt_of(z), ST_F32);
    st_tensor *o = K(st_ones(ST_I32, 1, SH(3)));
    EXPECT(o, 0, 1, 1, 1);
    CHECK_EQ_INT(dt_of(o), ST_I32);
    st_tensor *f = K(st_full(ST_F64, 2, SH(1, 2), 2.5));
    EXPECT_S(f, 2, SH(1, 2), 0, 2.5, 2.5);
    st_tensor *fb = K(st_full(ST_BOOL, 1, SH(2), 3));
    EXPECT(fb, 0, 1, 1);
    st_tensor *s0 = K(st_zeros(ST_I64, 0, NULL));
    EXPECT_S(s0, 0, NULL, 0, 0);
    st_tensor *e0 = K(st_zeros(ST_F32, 2, SH(0, 3)));
    EXPECT_SHAPE(e0, 2, SH(0, 3));
    if (e0) CHECK(st_to_host(e0, ST_F32, NULL, 0) == ST_OK);
    st_tensor *em = K(st_empty(ST_F16, 2, SH(4, 5)));
    EXPECT_SHAPE(em, 2, SH(4, 5));

    st_tensor *a = K(st_arange(0, 5, 1, ST_F32));
    EXPECT_S(a, 1, SH(5), 0, 0, 1, 2, 3, 4);
    st_tensor *a2 = K(st_arange(1, 2, 0.25, ST_F64));
    EXPECT(a2, 0, 1, 1.25, 1.5, 1.75);
    st_tensor *a3 = K(st_arange(5, 0, -2, ST_I64));
    EXPECT(a3, 0, 5, 3, 1);
    CHECK_EQ_INT(dt_of(a3), ST_I64);
    st_tensor *a4 = K(st_arange(0, 0, 1, ST_F32));
    EXPECT_SHAPE(a4, 1, SH(0));
    st_tensor *l = K(st_linspace(0, 1, 5, ST_F32));
    EXPECT_S(l, 1, SH(5), 1e-7, 0, 0.25, 0.5, 0.75, 1);
    st_tensor *l1 = K(st_linspace(2, 2, 1, ST_F64));
    EXPECT(l1, 0, 2);
    st_tensor *l0 = K(st_linspace(0, 1, 0, ST_F32));
    EXPECT_SHAPE(l0, 1, SH(0));
    st_tensor *e = K(st_eye(3, -1, ST_F32));
    EXPECT_S(e, 2, SH(3, 3), 0, 1, 0, 0, 0, 1, 0, 0, 0, 1);
    st_tensor *e2 = K(st_eye(2, 3, ST_I64));
    EXPECT_S(e2, 2, SH(2, 3), 0, 1, 0, 0, 0, 1, 0);
    CHECK_EQ_INT(dt_of(e2), ST_I64);
    st_tensor *h = MK(ST_F16, 1, SH(4), 1.5, -2, 65504, 0.099975586);
    EXPECT(h, 0, 1.5, -2, 65504, 0.0999755859375);
    st_tensor *bf = MK(ST_BF16, 1, SH(3), 1.5, -256, 3.140625);
    EXPECT(bf, 0, 1.5, -256, 3.140625);
    st_tensor *sc = K(st_scalar(3.5, ST_F64));
    EXPECT_S(sc, 0, NULL, 0, 3.5);
    CHECK_EQ_INT(dt_of(sc), ST_F64);
    st_tensor *si = K(st_scalar(-7.9, ST_I32));
    EXPECT(si, 0, -7);
}

/* Reads t's raw bytes (its own dtype) into a malloc'ed buffer. */
static void *raw(st_tensor *t) {
    if (!t) return NULL;
    size_t nb = (size_t)st_numel(t) * st_dtype_size(st_dtype_of(t));
    void *p = malloc(nb ? nb : 1);
    if (st_to_host(t, st_dtype_of(t), p, nb) != ST_OK) {
        free(p);
        return NULL;
    }
    return p;
}

/* One random tensor of each kind for a seed, realized in the given mode; raw bytes. */
static void random_set(int eager, int64_t jit_min, uint64_t seed, void *out[4], int fused) {
    st_set_eager(eager);
    st_set_jit_min(jit_min);
    st_manual_seed(seed);
    st_tensor *u = K(st_rand(ST_F32, 1, SH(257)));
    st_tensor *n = K(st_randn(ST_F32, 2, SH(3, 33)));
    st_tensor *i = K(st_randint(-5, 17, ST_I64, 1, SH(100)));
    st_tensor *d = K(st_randn(ST_F64, 1, SH(65)));
    if (fused) { /* realize the random values only as part of expressions */
        st_tensor *e1 = K(st_add_s(u, 0)), *e2 = K(st_mul_s(n, 1)), *e3 = K(st_add(i, K(st_weak_scalar_i(0))));
        st_tensor *e4 = K(st_mul_s(d, 1));
        st_tensor *all[4] = {e1, e2, e3, e4};
        CHECK(st_realize(4, all) == ST_OK);
        out[0] = raw(e1); out[1] = raw(e2); out[2] = raw(e3); out[3] = raw(e4);
    } else {
        out[0] = raw(u); out[1] = raw(n); out[2] = raw(i); out[3] = raw(d);
    }
}

TEST(random) {
    int64_t N = 100000;
    /* same seed -> same numbers; different seed -> different */
    st_manual_seed(42);
    st_tensor *a = K(st_rand(ST_F32, 1, &N));
    st_manual_seed(42);
    st_tensor *b = K(st_rand(ST_F32, 1, &N));
    st_manual_seed(43);
    st_tensor *c = K(st_rand(ST_F32, 1, &N));
    int64_t n;
    double *va = a ? fu_read(a, &n) : NULL, *vb = b ? fu_read(b, &n) : NULL, *vc = c ? fu_read(c, &n) : NULL;
    CHECK(va && vb && vc);
    if (va && vb && vc) {
        int same = 1, diff = 0, inrange = 1;
        double mean = 0;
        for (int64_t i = 0; i < N; i++) {
            same &= va[i] == vb[i];
            diff += va[i] != vc[i];
            inrange &= va[i] >= 0 && va[i] < 1;
            mean += va[i];
        }
        mean /= (double)N;
        CHECK_MSG(same, "rand: same seed gave different numbers");
        CHECK_MSG(diff > N * 9 / 10, "rand: different seeds agree on %d of %lld", (int)(N - diff), (long long)N);
        CHECK_MSG(inrange, "rand: value outside [0, 1)");
        CHECK_NEAR(mean, 0.5, 0.01);
    }
    free(va); free(vb); free(vc);

    /* randn: mean 0, std 1 */
    st_manual_seed(7);
    st_tensor *r = K(st_randn(ST_F32, 1, &N));
    double *vr = r ? fu_read(r, &n) : NULL;
    CHECK(vr != NULL);
    if (vr) {
        double m = 0, s = 0;
        int finite = 1;
        for (int64_t i = 0; i < N; i++) { m += vr[i]; finite &= isfinite(vr[i]); }
        m /= (double)N;
        for (int64_t i = 0; i < N; i++) s += (vr[i] - m) * (vr[i] - m);
        s = sqrt(s / (double)(N - 1));
        CHECK_MSG(finite, "randn: non-finite value");
        CHECK_MSG(fabs(m) < 0.02, "randn: mean %g", m);
        CHECK_MSG(fabs(s - 1) < 0.02, "randn: std %g", s);
    }
    free(vr);

    /* randint in range, every value hit, dtype kept */
    int64_t M = 10000;
    st_tensor *ri = K(st_randint(-3, 5, ST_I32, 1, &M));
    CHECK_EQ_INT(dt_of(ri), ST_I32);
    double *vi = ri ? fu_read(ri, &n) : NULL;
    CHECK(vi != NULL);
    if (vi) {
        int hit[8] = {0}, ok = 1;
        for (int64_t i = 0; i < M; i++) {
            ok &= vi[i] >= -3 && vi[i] < 5 && vi[i] == floor(vi[i]);
            if (ok) hit[(int)vi[i] + 3] = 1;
        }
        CHECK_MSG(ok, "randint: value outside [-3, 5)");
        for (int k = 0; k < 8; k++) CHECK_MSG(hit[k], "randint: %d never drawn", k - 3);
    }
    free(vi);
    st_tensor *rf = K(st_randint(0, 3, ST_F32, 1, SH(50)));
    CHECK_EQ_INT(dt_of(rf), ST_F32);

    /* The stream: two calls take consecutive counter ranges, like one call of the total size. */
    st_manual_seed(9);
    st_tensor *p = K(st_rand(ST_F32, 1, SH(5))), *q = K(st_rand(ST_F32, 1, SH(6)));
    st_manual_seed(9);
    st_tensor *pq = K(st_rand(ST_F32, 1, SH(11)));
    st_tensor *both[2] = {p, q};
    st_tensor *cat = K(st_cat(2, both, 0));
    st_tensor *eq = K(st_eq(cat, pq)), *all = K(st_min(K(st_cast(eq, ST_I32)), 0, NULL, 0));
    EXPECT(all, 0, 1);

    /* Identical numbers whether realized alone or inside expressions, eager or fused. */
    int saved_eager = st_get_eager();
    void *ref[4], *got[4];
    random_set(1, 32768, 1234, ref, 0);
    const size_t sizes[4] = {257 * 4, 99 * 4, 100 * 8, 65 * 8};
    const char *names[4] = {"rand f32", "randn f32", "randint i64", "randn f64"};
    for (int variant = 0; variant < 4; variant++) {
        random_set(variant == 3, variant == 1 ? 0 : 32768, 1234, got, variant != 0);
        for (int k = 0; k < 4; k++) {
            CHECK_MSG(ref[k] && got[k] && memcmp(ref[k], got[k], sizes[k]) == 0,
                      "%s: values differ between eager-alone and variant %d (%s)", names[k], variant,
                      variant == 0 ? "alone, current tier" : variant == 1 ? "fused, jit" :
                      variant == 2 ? "fused, default tier" : "fused expr, eager");
            free(got[k]);
        }
    }
    for (int k = 0; k < 4; k++) free(ref[k]);
    st_set_eager(saved_eager);
}

/* ---- elementwise ---- */

/* The unary and binary cases come from the op table (tests/op_table.h, one per API row of
 * trace/ops.def): each is run on fixed inputs of dtype dt and compared with its reference computed
 * in double and rounded to the result dtype. TF_EXACT cases must match bit for bit in f32 and f64
 * (NaN matches NaN, the sign of zero counts); the others within tol, relative. */

/* r rounded to dt as the dtype stores it (bool and integer results are left alone). */
static double round_to(st_dtype dt, double r) {
    switch (dt) {
    case ST_F16: return fu_h2f(fu_f2h((float)r));
    case ST_BF16: return fu_bf2f(fu_f2bf((float)r));
    case ST_F32: return (float)r;
    default: return r;
    }
}

static int same_bits(double got, double want) {
    return isnan(want) ? isnan(got) : got == want && signbit(got) == signbit(want);
}

/* Runs case c on tensors a (and b) holding the n <= 16 values av (and bv), of dtype dt; checks
 * the result's dtype and values. Returns 0 after recording a failure. */
static int case_check(const op_case *c, st_dtype dt, st_tensor *a, st_tensor *b, const double *av,
                      const double *bv, int n, double tol) {
    int out = op_case_dtype(c, dt);
    int exact = (c->flags & TF_EXACT) && (dt == ST_F32 || dt == ST_F64);
    double want[16];
    if (n > 16) {
        TEST_FAILF("case_check: %d values, at most 16", n);
        return 0;
    }
    for (int i = 0; i < n; i++) want[i] = round_to((st_dtype)out, op_case_ref(c, av[i], bv ? bv[i] : 0));
    st_tensor *y = K(op_case_call(c, a, b));
    if (!y) {
        TEST_FAILF("%s(%s) failed: %s", c->name, st_dtype_name(dt), st_last_error());
        return 0;
    }
    if (dt_of(y) != out) {
        TEST_FAILF("%s(%s) has dtype %s, expected %s", c->name, st_dtype_name(dt),
                   st_dtype_name(st_dtype_of(y)), out < 0 ? "an error" : st_dtype_name((st_dtype)out));
        return 0;
    }
    int64_t m;
    double *got = fu_read(y, &m);
    if (!got) {
        TEST_FAILF("%s: read failed: %s", c->name, st_last_error());
        return 0;
    }
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        ok = exact ? same_bits(got[i], want[i]) : near(got[i], want[i], tol);
        if (ok) continue;
        if (c->arity == 1)
            TEST_FAILF("%s(%s)(%.9g) = %.17g, expected %.17g%s", c->name, st_dtype_name(dt), av[i],
                       got[i], want[i], exact ? " (bit for bit)" : "");
        else
            TEST_FAILF("%s(%s)(%.9g, %.9g) = %.17g, expected %.17g%s", c->name, st_dtype_name(dt),
                       av[i], bv[i], got[i], want[i], exact ? " (bit for bit)" : "");
    }
    free(got);
    return ok;
}

/* Every unary case; D_POS cases on positive inputs, the others on inputs around 0. */
static void unary_check(st_dtype dt, double tol) {
    static const double xs[] = {-2.5, -1.5, -0.7, -0.5, -0.25, 0, 0.3, 0.5, 1, 1.5, 2.5, 3.7};
    static const double ps[] = {0.1, 0.5, 1, 2, 3.7, 10, 100, 0.03125, 7, 2.25, 0.75, 1.5};
    enum { N = 12 };
    double in_q[N], pin_q[N];
    /* the inputs as the dtype stores them */
    for (int i = 0; i < N; i++) {
        in_q[i] = round_to(dt, xs[i]);
        pin_q[i] = round_to(dt, ps[i]);
    }
    st_tensor *x = K(fu_make(dt, 2, SH(3, 4), in_q)), *p = K(fu_make(dt, 2, SH(3, 4), pin_q));
    int ran = 0;
    for (int k = 0; k < OP_NCASES; k++) {
        const op_case *c = &op_cases[k];
        if (c->arity != 1) continue;
        int pos = c->dom_a == D_POS;
        if (!case_check(c, dt, pos ? p : x, NULL, pos ? pin_q : in_q, NULL, N, tol)) return;
        ran++;
    }
    CHECK_MSG(ran > 0, "no unary case in the op table");
}

TEST(unary_f32) { unary_check(ST_F32, 2e-6); }
TEST(unary_f64) { unary_check(ST_F64, 1e-12); }
TEST(unary_f16) { unary_check(ST_F16, 2e-3); }
TEST(unary_bf16) { unary_check(ST_BF16, 1e-2); }

TEST(unary_int_bool) {
    st_tensor *x = MK(ST_I32, 1, SH(5), -3, -1, 0, 2, 5);
    st_tensor *y;
    y = K(st_neg(x)); EXPECT(y, 0, 3, 1, 0, -2, -5); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_abs(x)); EXPECT(y, 0, 3, 1, 0, 2, 5); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_relu(x)); EXPECT(y, 0, 0, 0, 0, 2, 5); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_sign(x)); EXPECT(y, 0, -1, -1, 0, 1, 1); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_floor(x)); EXPECT(y, 0, -3, -1, 0, 2, 5); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_round(x)); EXPECT(y, 0, -3, -1, 0, 2, 5);
    y = K(st_square(x)); EXPECT(y, 0, 9, 1, 0, 4, 25); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_exp(x));
    CHECK_EQ_INT(dt_of(y), ST_F32);
    EXPECT(y, 1e-6, exp(-3), exp(-1), 1, exp(2), exp(5));
    y = K(st_sqrt(x));
    EXPECT(y, 1e-6, NAN, NAN, 0, sqrt(2), sqrt(5));
    y = K(st_logical_not(x)); EXPECT(y, 0, 0, 0, 1, 0, 0); CHECK_EQ_INT(dt_of(y), ST_BOOL);
    st_tensor *l = MK(ST_I64, 1, SH(3), -4000000000.0, 7, 0);
    y = K(st_neg(l)); EXPECT(y, 0, 4000000000.0, -7, 0); CHECK_EQ_INT(dt_of(y), ST_I64);
    y = K(st_abs(l)); EXPECT(y, 0, 4000000000.0, 7, 0);
    st_tensor *b = MK(ST_BOOL, 1, SH(3), 1, 0, 1);
    y = K(st_logical_not(b)); EXPECT(y, 0, 0, 1, 0); CHECK_EQ_INT(dt_of(y), ST_BOOL);
    y = K(st_exp(b)); EXPECT(y, 1e-6, exp(1), 1, exp(1)); CHECK_EQ_INT(dt_of(y), ST_F32);
    EXPECT_ERR(st_neg(b), ST_ERR_DTYPE, "neg", NULL);
}

TEST(unary_special) {
    st_tensor *x = MK(ST_F32, 1, SH(8), 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 3.5);
    st_tensor *y = K(st_round(x)); /* half to even */
    EXPECT(y, 0, 0, 2, 2, -0.0, -2, -2, 0, 4);
    st_tensor *n = MK(ST_F32, 1, SH(6), NAN, INFINITY, -INFINITY, 0, -0.0, -1);
    y = K(st_sign(n)); EXPECT(y, 0, NAN, 1, -1, 0, 0, -1);
    y = K(st_log(n)); EXPECT(y, 0, NAN, INFINITY, NAN, -INFINITY, -INFINITY, NAN);
    y = K(st_sqrt(n)); EXPECT(y, 0, NAN, INFINITY, NAN, 0, -0.0, NAN);
    y = K(st_exp(n)); EXPECT(y, 0, NAN, INFINITY, 0, 1, 1, (float)exp(-1.0));
    y = K(st_reciprocal(n)); EXPECT(y, 0, NAN, 0, -0.0, INFINITY, -INFINITY, -1);
    y = K(st_sigmoid(n)); EXPECT(y, 1e-7, NAN, 1, 0, 0.5, 0.5, 1 / (1 + exp(1.0)));
    y = K(st_tanh(n)); EXPECT(y, 1e-7, NAN, 1, -1, 0, 0, tanh(-1.0));
    y = K(st_relu(n)); EXPECT(y, 0, NAN, INFINITY, 0, 0, 0, 0);
    y = K(st_logical_not(n)); EXPECT(y, 0, 0, 0, 0, 1, 1, 0);
    y = K(st_floor(n)); EXPECT(y, 0, NAN, INFINITY, -INFINITY, 0, 0, -1);
}

/* Every binary case on one set of pairs (signs, zeros, equal values, NaN). */
static void binary_check(st_dtype dt, double tol) {
    static const double as[] = {-2.5, -1, 0, 0.5, 1.5, 3, 7, -7, 0, 1, NAN, 2};
    static const double bs[] = {2, -3, 1, 0.25, 1.5, -2, 3, 3, 0, 0, 1, NAN};
    enum { N = 12 };
    double aq[N], bq[N];
    for (int i = 0; i < N; i++) {
        aq[i] = round_to(dt, as[i]);
        bq[i] = round_to(dt, bs[i]);
    }
    st_tensor *a = K(fu_make(dt, 2, SH(4, 3), aq)), *b = K(fu_make(dt, 2, SH(4, 3), bq));
    int ran = 0;
    for (int k = 0; k < OP_NCASES; k++) {
        const op_case *c = &op_cases[k];
        if (c->arity != 2) continue;
        if (!case_check(c, dt, a, b, aq, bq, N, tol)) return;
        ran++;
    }
    CHECK_MSG(ran > 0, "no binary case in the op table");
}
TEST(binary_f32) { binary_check(ST_F32, 2e-6); }
TEST(binary_f64) { binary_check(ST_F64, 1e-12); }

TEST(binary_int) {
    st_tensor *a = MK(ST_I32, 1, SH(8), 7, -7, 7, -7, 5, 2, -3, 0);
    st_tensor *b = MK(ST_I32, 1, SH(8), 3, 3, -3, -3, 0, 10, 3, 0);
    st_tensor *y;
    y = K(st_fmod(a, b)); EXPECT(y, 0, 1, -1, 1, -1, 0, 2, 0, 0); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_remainder(a, b)); EXPECT(y, 0, 1, 2, -2, -1, 0, 2, 0, 0); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_add(a, b)); EXPECT(y, 0, 10, -4, 4, -10, 5, 12, 0, 0); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_sub(a, b)); EXPECT(y, 0, 4, -10, 10, -4, 5, -8, -6, 0);
    y = K(st_mul(a, b)); EXPECT(y, 0, 21, -21, -21, 21, 0, 20, -9, 0);
    y = K(st_maximum(a, b)); EXPECT(y, 0, 7, 3, 7, -3, 5, 10, 3, 0);
    y = K(st_minimum(a, b)); EXPECT(y, 0, 3, -7, -3, -7, 0, 2, -3, 0);
    y = K(st_div(a, b)); /* true division in f32 */
    CHECK_EQ_INT(dt_of(y), ST_F32);
    EXPECT(y, 1e-6, 7 / 3.0, -7 / 3.0, -7 / 3.0, 7 / 3.0, INFINITY, 0.2, -1, NAN);
    y = K(st_lt(a, b)); EXPECT(y, 0, 0, 1, 0, 1, 0, 1, 1, 0); CHECK_EQ_INT(dt_of(y), ST_BOOL);
    st_tensor *pb = MK(ST_I32, 1, SH(7), 2, -3, 2, 1, -1, 0, 3);
    st_tensor *pe = MK(ST_I32, 1, SH(7), 10, 3, -1, -5, -3, 0, 0);
    y = K(st_pow(pb, pe)); EXPECT(y, 0, 1024, -27, 0, 1, -1, 1, 1); CHECK_EQ_INT(dt_of(y), ST_I32);
    st_tensor *la = MK(ST_I64, 1, SH(3), 3000000000.0, -9, 9), *lb = MK(ST_I64, 1, SH(3), 2, 4, -4);
    y = K(st_mul(la, lb)); EXPECT(y, 0, 6000000000.0, -36, -36); CHECK_EQ_INT(dt_of(y), ST_I64);
    y = K(st_remainder(la, lb)); EXPECT(y, 0, 0, 3, -3);
    y = K(st_fmod(la, lb)); EXPECT(y, 0, 0, -1, 1);
    st_tensor *ba = MK(ST_BOOL, 1, SH(4), 0, 0, 1, 1), *bb = MK(ST_BOOL, 1, SH(4), 0, 1, 0, 1);
    y = K(st_add(ba, bb)); EXPECT(y, 0, 0, 1, 1, 1); CHECK_EQ_INT(dt_of(y), ST_BOOL);
    y = K(st_mul(ba, bb)); EXPECT(y, 0, 0, 0, 0, 1); CHECK_EQ_INT(dt_of(y), ST_BOOL);
    y = K(st_logical_and(ba, bb)); EXPECT(y, 0, 0, 0, 0, 1);
    y = K(st_logical_or(ba, bb)); EXPECT(y, 0, 0, 1, 1, 1);
    y = K(st_eq(ba, bb)); EXPECT(y, 0, 1, 0, 0, 1);
}

TEST(broadcast_scalars) {
    st_tensor *a = MK(ST_F32, 2, SH(2, 3), 1, 2, 3, 4, 5, 6);
    st_tensor *r = MK(ST_F32, 1, SH(3), 10, 20, 30);
    st_tensor *c = MK(ST_F32, 2, SH(2, 1), 100, 200);
    st_tensor *y;
    y = K(st_add(a, r)); EXPECT_S(y, 2, SH(2, 3), 0, 11, 22, 33, 14, 25, 36);
    y = K(st_add(r, a)); EXPECT_S(y, 2, SH(2, 3), 0, 11, 22, 33, 14, 25, 36);
    y = K(st_sub(c, r)); EXPECT_S(y, 2, SH(2, 3), 0, 90, 80, 70, 190, 180, 170);
    st_tensor *s = K(st_scalar(2, ST_F32));
    y = K(st_mul(s, a)); EXPECT_S(y, 2, SH(2, 3), 0, 2, 4, 6, 8, 10, 12);
    y = K(st_add_s(a, 1)); EXPECT(y, 0, 2, 3, 4, 5, 6, 7);
    y = K(st_sub_s(a, 1)); EXPECT(y, 0, 0, 1, 2, 3, 4, 5);
    y = K(st_rsub_s(a, 10)); EXPECT(y, 0, 9, 8, 7, 6, 5, 4);
    y = K(st_mul_s(a, -2)); EXPECT(y, 0, -2, -4, -6, -8, -10, -12);
    y = K(st_div_s(a, 4)); EXPECT(y, 0, 0.25, 0.5, 0.75, 1, 1.25, 1.5);
    y = K(st_rdiv_s(a, 6)); EXPECT(y, 1e-7, 6, 3, 2, 1.5, 1.2, 1);
    y = K(st_pow_s(a, 2)); EXPECT(y, 1e-7, 1, 4, 9, 16, 25, 36);
    CHECK_EQ_INT(dt_of(y), ST_F32);
    /* (2, 1, 3) with (4, 1) -> (2, 4, 3) */
    st_tensor *p = iota_f(ST_F32, 3, SH(2, 1, 3), 0, 1), *q = iota_f(ST_F32, 2, SH(4, 1), 0, 10);
    y = K(st_add(p, q));
    double want[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++) want[(i * 4 + j) * 3 + k] = i * 3 + k + j * 10;
    EXPECT_SHAPE(y, 3, SH(2, 4, 3));
    EXPECT_A(y, 24, want, 0);
    /* empty broadcast */
    st_tensor *e = K(st_zeros(ST_F32, 2, SH(0, 3)));
    y = K(st_add(e, r));
    EXPECT_SHAPE(y, 2, SH(0, 3));
    if (y) CHECK(st_to_host(y, ST_F32, NULL, 0) == ST_OK);
    /* scalar with scalar */
    st_tensor *w = K(st_weak_scalar_f(1.5));
    y = K(st_add(w, s)); EXPECT_S(y, 0, NULL, 0, 3.5);
}

TEST(promotion_weak) {
    st_tensor *i32 = MK(ST_I32, 1, SH(2), 1, 2), *i64 = MK(ST_I64, 1, SH(2), 1, 2);
    st_tensor *f16 = MK(ST_F16, 1, SH(2), 1, 2), *bf = MK(ST_BF16, 1, SH(2), 1, 2);
    st_tensor *f64 = MK(ST_F64, 1, SH(2), 1, 2), *b = MK(ST_BOOL, 1, SH(2), 1, 0);
    st_tensor *f32 = MK(ST_F32, 1, SH(2), 1, 2);
    st_tensor *wi = K(st_weak_scalar_i(3)), *wf = K(st_weak_scalar_f(0.5));
    st_tensor *y;
    y = K(st_add(i64, wi)); CHECK_EQ_INT(dt_of(y), ST_I64); EXPECT(y, 0, 4, 5);
    y = K(st_add(wi, i32)); CHECK_EQ_INT(dt_of(y), ST_I32); EXPECT(y, 0, 4, 5);
    y = K(st_mul(f16, wf)); CHECK_EQ_INT(dt_of(y), ST_F16); EXPECT(y, 0, 0.5, 1);
    y = K(st_add_s(f16, 2)); CHECK_EQ_INT(dt_of(y), ST_F16); EXPECT(y, 0, 3, 4);
    y = K(st_add_s(bf, 2)); CHECK_EQ_INT(dt_of(y), ST_BF16); EXPECT(y, 0, 3, 4);
    y = K(st_add(f16, wi)); CHECK_EQ_INT(dt_of(y), ST_F16); EXPECT(y, 0, 4, 5);
    y = K(st_add_s(i64, 2.5)); CHECK_EQ_INT(dt_of(y), ST_F32); EXPECT(y, 0, 3.5, 4.5);
    y = K(st_add(b, wi)); CHECK_EQ_INT(dt_of(y), ST_I64); EXPECT(y, 0, 4, 3);
    y = K(st_add_s(f64, 0.1)); CHECK_EQ_INT(dt_of(y), ST_F64); EXPECT(y, 0, 1.1, 2.1);
    y = K(st_add(i32, i64)); CHECK_EQ_INT(dt_of(y), ST_I64);
    y = K(st_add(i32, f16)); CHECK_EQ_INT(dt_of(y), ST_F16); EXPECT(y, 0, 2, 4);
    y = K(st_add(f16, bf)); CHECK_EQ_INT(dt_of(y), ST_F32);
    y = K(st_add(f32, f64)); CHECK_EQ_INT(dt_of(y), ST_F64);
    y = K(st_add(b, i32)); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_add(f16, K(st_scalar(1, ST_F32)))); CHECK_EQ_INT(dt_of(y), ST_F32); /* strong 0-d */
    y = K(st_div(i32, i64)); CHECK_EQ_INT(dt_of(y), ST_F32);
    y = K(st_lt(f16, i64)); CHECK_EQ_INT(dt_of(y), ST_BOOL); EXPECT(y, 0, 0, 0);
    y = K(st_eq(i32, wf)); CHECK_EQ_INT(dt_of(y), ST_BOOL); EXPECT(y, 0, 0, 0);
    y = K(st_where(b, i32, f32)); CHECK_EQ_INT(dt_of(y), ST_F32); EXPECT(y, 0, 1, 2);
    y = K(st_sum(i32, 0, NULL, 0)); CHECK_EQ_INT(dt_of(y), ST_I64); EXPECT(y, 0, 3);
    y = K(st_sum(b, 0, NULL, 0)); CHECK_EQ_INT(dt_of(y), ST_I64); EXPECT(y, 0, 1);
    y = K(st_mean(i32, 0, NULL, 0)); CHECK_EQ_INT(dt_of(y), ST_F32); EXPECT(y, 0, 1.5);
    y = K(st_max(i32, 0, NULL, 0)); CHECK_EQ_INT(dt_of(y), ST_I32); EXPECT(y, 0, 2);
    y = K(st_sum(f16, 0, NULL, 0)); CHECK_EQ_INT(dt_of(y), ST_F16); EXPECT(y, 0, 3);
    y = K(st_argmax(f16, 0, 0)); CHECK_EQ_INT(dt_of(y), ST_I64); EXPECT(y, 0, 1);
}

TEST(where_clamp) {
    st_tensor *c = MK(ST_BOOL, 2, SH(2, 3), 1, 0, 1, 0, 0, 1);
    st_tensor *a = MK(ST_F32, 2, SH(2, 3), 1, 2, 3, 4, 5, 6);
    st_tensor *w = K(st_weak_scalar_f(-1));
    st_tensor *y = K(st_where(c, a, w));
    EXPECT_S(y, 2, SH(2, 3), 0, 1, -1, 3, -1, -1, 6);
    st_tensor *c1 = MK(ST_BOOL, 1, SH(3), 0, 1, 0);
    y = K(st_where(c1, a, K(st_neg(a))));
    EXPECT(y, 0, -1, 2, -3, -4, 5, -6);
    st_tensor *ci = MK(ST_I32, 2, SH(2, 1), 0, 5); /* non-bool condition: truthiness */
    y = K(st_where(ci, a, w));
    EXPECT(y, 0, -1, -1, -1, 4, 5, 6);
    y = K(st_clamp(a, 2, 4.5)); EXPECT(y, 0, 2, 2, 3, 4, 4.5, 4.5);
    y = K(st_clamp(a, NAN, 3)); EXPECT(y, 0, 1, 2, 3, 3, 3, 3);
    y = K(st_clamp(a, 5, NAN)); EXPECT(y, 0, 5, 5, 5, 5, 5, 6);
    y = K(st_clamp(a, NAN, NAN)); EXPECT(y, 0, 1, 2, 3, 4, 5, 6);
    CHECK(y != a);
    st_tensor *i = MK(ST_I64, 1, SH(4), -5, 0, 3, 9);
    y = K(st_clamp(i, 0, 5)); EXPECT(y, 0, 0, 0, 3, 5);
    CHECK(st_dtype_of(y) == ST_I64); /* integral bounds keep an integer dtype */
    y = K(st_clamp(i, 0.5, NAN)); EXPECT(y, 0, 0.5, 0.5, 3, 9);
    CHECK(st_dtype_of(y) == ST_F32);
}

/* ---- reductions ---- */

enum { R_SUM, R_MEAN, R_PROD, R_MAX, R_MIN, R_VAR, R_STD, R_LSE, R_COUNT };
static const char *rnames[R_COUNT] = {"sum", "mean", "prod", "max", "min", "var", "std", "logsumexp"};

/* Reference reduction of x (shape s, 3 dims) over mask: out in keepdim C order. */
static int ref_reduce(int kind, const double *x, const int64_t *s, unsigned mask, double *out) {
    int64_t os[3], n = 1, cnt = 1;
    for (int d = 0; d < 3; d++) {
        os[d] = (mask >> d & 1) ? 1 : s[d];
        n *= os[d];
        if (mask >> d & 1) cnt *= s[d];
    }
    double acc[64], acc2[64], mx[64];
    for (int64_t o = 0; o < n; o++) {
        acc[o] = kind == R_PROD ? 1 : 0;
        mx[o] = -INFINITY;
        acc2[o] = 0;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < s[0]; i++)
            for (int64_t j = 0; j < s[1]; j++)
                for (int64_t k = 0; k < s[2]; k++) {
                    double v = x[(i * s[1] + j) * s[2] + k];
                    int64_t oi = (mask & 1) ? 0 : i, oj = (mask & 2) ? 0 : j, ok = (mask & 4) ? 0 : k;
                    int64_t o = (oi * os[1] + oj) * os[2] + ok;
                    if (pass == 0) {
                        if (kind == R_PROD) acc[o] *= v;
                        else acc[o] += v;
                        if (v > mx[o]) mx[o] = v;
                    } else {
                        double m = acc[o] / (double)cnt;
                        if (kind == R_VAR || kind == R_STD) acc2[o] += (v - m) * (v - m);
                        if (kind == R_LSE) acc2[o] += exp(v - mx[o]);
                    }
                }
    for (int64_t o = 0; o < n; o++) {
        switch (kind) {
        case R_SUM: case R_PROD: out[o] = acc[o]; break;
        case R_MEAN: out[o] = acc[o] / (double)cnt; break;
        case R_MAX: out[o] = mx[o]; break;
        case R_VAR: out[o] = acc2[o] / (double)(cnt - 1); break;
        case R_STD: out[o] = sqrt(acc2[o] / (double)(cnt - 1)); break;
        case R_LSE: out[o] = mx[o] + log(acc2[o]); break;
        default: break;
        }
    }
    if (kind == R_MIN) { /* min = -max(-x) */
        double neg[24];
        for (int i = 0; i < 24; i++) neg[i] = -x[i];
        ref_reduce(R_MAX, neg, s, mask, out);
        for (int64_t o = 0; o < n; o++) out[o] = -out[o];
    }
    return (int)n;
}

static st_tensor *do_reduce(int kind, st_tensor *x, int naxes, const int *axes, int keepdim) {
    switch (kind) {
    case R_SUM: return st_sum(x, naxes, axes, keepdim);
    case R_MEAN: return st_mean(x, naxes, axes, keepdim);
    case R_PROD: return st_prod(x, naxes, axes, keepdim);
    case R_MAX: return st_max(x, naxes, axes, keepdim);
    case R_MIN: return st_min(x, naxes, axes, keepdim);
    case R_VAR: return st_var(x, naxes, axes, 1, keepdim);
    case R_STD: return st_std(x, naxes, axes, 1, keepdim);
    default: return st_logsumexp(x, naxes, axes, keepdim);
    }
}

static void reductions_for(st_dtype dt, double tol) {
    static const int64_t s[3] = {2, 3, 4};
    double x[24];
    for (int i = 0; i < 24; i++) x[i] = 0.5 + ((i * 7) % 11) / 10.0 + (i % 3) * 0.03125; /* distinct-ish, 0.5..1.6 */
    for (int i = 0; i < 24; i++) x[i] = dt == ST_F64 ? x[i] : (float)x[i];
    st_tensor *t = K(fu_make(dt, 3, s, x));
    static const struct { int n; int axes[3]; } sets[] = {
        {0, {0}}, {1, {0}}, {1, {1}}, {1, {2}}, {1, {-1}}, {2, {0, 2}}, {2, {-1, 1}}, {3, {0, 1, 2}},
    };
    for (int kind = 0; kind < R_COUNT; kind++)
        for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++)
            for (int keep = 0; keep < 2; keep++) {
                unsigned mask = 0;
                for (int k = 0; k < sets[si].n; k++) mask |= 1u << ((sets[si].axes[k] + 3) % 3);
                if (sets[si].n == 0) mask = 7;
                double want[24];
                int n = ref_reduce(kind, x, s, mask, want);
                int64_t shape[3];
                int nd = 0;
                for (int d = 0; d < 3; d++)
                    if (keep) shape[nd++] = (mask >> d & 1) ? 1 : s[d];
                    else if (!(mask >> d & 1)) shape[nd++] = s[d];
                st_tensor *y = K(do_reduce(kind, t, sets[si].n, sets[si].axes, keep));
                if (!y) {
                    TEST_FAILF("%s(%s, set %d, keepdim %d) failed: %s", rnames[kind], st_dtype_name(dt), (int)si,
                               keep, st_last_error());
                    return;
                }
                if (dt_of(y) != (int)dt) {
                    TEST_FAILF("%s(%s) has dtype %s", rnames[kind], st_dtype_name(dt), st_dtype_name(st_dtype_of(y)));
                    return;
                }
                expect_shape_(__LINE__, rnames[kind], y, nd, shape);
                int64_t m;
                double *got = fu_read(y, &m);
                if (!got) {
                    TEST_FAILF("%s: read failed: %s", rnames[kind], st_last_error());
                    return;
                }
                for (int i = 0; i < n && i < m; i++)
                    if (!near(got[i], want[i], tol)) {
                        TEST_FAILF("%s(%s) over mask %u keepdim %d: [%d] = %.9g, expected %.9g", rnames[kind],
                                   st_dtype_name(dt), mask, keep, i, got[i], want[i]);
                        break;
                    }
                free(got);
                if (test_cur_failed) return;
            }
}
TEST(reductions_f32) { reductions_for(ST_F32, 1e-5); }
TEST(reductions_f64) { reductions_for(ST_F64, 1e-12); }

TEST(reductions_misc) {
    st_tensor *t = MK(ST_F32, 2, SH(2, 3), 1, 3, 3, 2, 2, 0);
    st_tensor *y;
    y = K(st_argmax(t, 1, 0)); EXPECT_S(y, 1, SH(2), 0, 1, 0); CHECK_EQ_INT(dt_of(y), ST_I64);
    y = K(st_argmin(t, 1, 0)); EXPECT_S(y, 1, SH(2), 0, 0, 2);
    y = K(st_argmax(t, 0, 1)); EXPECT_S(y, 2, SH(1, 3), 0, 1, 0, 0);
    y = K(st_argmin(t, -2, 0)); EXPECT_S(y, 1, SH(3), 0, 0, 1, 1);
    y = K(st_argmax(t, ST_ALL_DIMS, 0)); EXPECT_S(y, 0, NULL, 0, 1);
    y = K(st_argmin(t, ST_ALL_DIMS, 1)); EXPECT_S(y, 2, SH(1, 1), 0, 5);
    st_tensor *n = MK(ST_F32, 1, SH(4), 1, NAN, 3, NAN);
    y = K(st_max(n, 0, NULL, 0)); EXPECT(y, 0, NAN);
    y = K(st_min(n, 0, NULL, 0)); EXPECT(y, 0, NAN);
    y = K(st_argmax(n, 0, 0)); EXPECT(y, 0, 1);
    y = K(st_argmin(n, 0, 0)); EXPECT(y, 0, 1);
    y = K(st_sum(n, 0, NULL, 0)); EXPECT(y, 0, NAN);
    st_tensor *i = MK(ST_I32, 2, SH(2, 2), 2000000000, 2000000000, -5, 7);
    y = K(st_sum(i, 1, (int[]){1}, 0)); EXPECT(y, 0, 4000000000.0, 2); CHECK_EQ_INT(dt_of(y), ST_I64);
    y = K(st_prod(i, 1, (int[]){0}, 0)); EXPECT(y, 0, -10000000000.0, 14000000000.0);
    y = K(st_min(i, 0, NULL, 0)); EXPECT(y, 0, -5); CHECK_EQ_INT(dt_of(y), ST_I32);
    y = K(st_argmax(i, 1, 0)); EXPECT(y, 0, 0, 1);
    st_tensor *e = K(st_zeros(ST_F32, 2, SH(3, 0)));
    y = K(st_sum(e, 1, (int[]){1}, 0)); EXPECT_S(y, 1, SH(3), 0, 0, 0, 0);
    y = K(st_prod(e, 1, (int[]){1}, 1)); EXPECT_S(y, 2, SH(3, 1), 0, 1, 1, 1);
    y = K(st_sum(e, 1, (int[]){0}, 0)); EXPECT_SHAPE(y, 1, SH(0));
    EXPECT_ERR(st_max(e, 1, (int[]){1}, 0), ST_ERR_SHAPE, "(3, 0)", NULL);
    EXPECT_ERR(st_argmax(e, 1, 0), ST_ERR_SHAPE, NULL, NULL);
    /* var/std with correction 0, and on ints */
    st_tensor *v = MK(ST_I32, 1, SH(4), 1, 2, 3, 4);
    y = K(st_var(v, 0, NULL, 0, 0)); EXPECT(y, 1e-6, 1.25); CHECK_EQ_INT(dt_of(y), ST_F32);
    y = K(st_std(v, 0, NULL, 1, 0)); EXPECT(y, 1e-6, sqrt(5.0 / 3));
    /* logsumexp stays finite for large inputs and handles -inf rows */
    st_tensor *big = MK(ST_F32, 2, SH(2, 2), 1000, 1000, -INFINITY, -INFINITY);
    y = K(st_logsumexp(big, 1, (int[]){1}, 0)); EXPECT(y, 1e-6, 1000 + log(2.0), -INFINITY);
    /* reductions of a 0-d tensor */
    st_tensor *z = K(st_scalar(4, ST_F32));
    y = K(st_sum(z, 0, NULL, 0)); EXPECT_S(y, 0, NULL, 0, 4);
    /* mean over 0 elements is NaN */
    y = K(st_mean(e, 1, (int[]){1}, 0)); EXPECT(y, 0, NAN, NAN, NAN);
}

/* Reductions whose rows are single elements (a 0-d input; reduced dims of size 1): the input
 * shape is the output shape, so a value a reduce group computes is both over the rows and at the
 * rows' index. Realized together, a logsumexp and a mean of an argmax share a kernel that stores
 * the logsumexp over the rows and reads an unstored reduction there (fuzz seed 43: on a GPU,
 * "cannot lower: reduction read before it is computed"; the CPU ran the group op by op). */
TEST(single_element_rows) {
    for (int nd = 0; nd <= 2; nd += 2) {   /* () and (3, 1) reduced over dim 1 */
        st_tensor *a = nd ? MK(ST_F32, 2, SH(3, 1), 0.5, 1, 2) : MK(ST_F32, 0, NULL, 0.5);
        int dim = 1, nax = nd ? 1 : 0;
        st_tensor *lse = K(st_logsumexp(a, nax, &dim, nd > 0));
        st_tensor *m = K(st_mean(K(st_argmax(a, nd ? 1 : ST_ALL_DIMS, 1)), nax, &dim, nd > 0));
        st_tensor *c = K(st_clamp(m, 0, 3)), *r = K(st_rsub_s(m, -1.5));
        st_tensor *all[4] = {lse, m, c, r};
        CHECK(st_realize(4, all) == ST_OK);
        if (nd) {
            EXPECT_S(lse, 2, SH(3, 1), 1e-6, 0.5, 1, 2);
            EXPECT_S(c, 2, SH(3, 1), 0, 0, 0, 0);
            EXPECT_S(r, 2, SH(3, 1), 0, -1.5, -1.5, -1.5);
        } else {
            EXPECT_S(lse, 0, NULL, 1e-6, 0.5);
            EXPECT_S(c, 0, NULL, 0, 0);
            EXPECT_S(r, 0, NULL, 0, -1.5);
        }
    }
}

/* Groups too big for one kernel: a 5,000-op elementwise chain (deeper than the lowering
 * recurses: the partition cuts it into kernels) and a pairwise sum of 300 tensors (more buffers
 * than a kernel binds: the group is planned again in pieces). On the CPU the interpreter used to
 * run such a group; a GPU has none ("cannot lower: expression too deep", "too many buffers"). */
TEST(big_groups) {
    st_tensor *y = MK(ST_F64, 1, SH(2), 1, -2);
    for (int i = 0; i < 5000 && y; i++) y = K(st_add_s(y, 0.5));
    EXPECT(y, 1e-12, 2501, 2498);
    st_tensor *t[300];
    for (int i = 0; i < 300; i++) t[i] = MK(ST_F32, 1, SH(2), i, 1);
    CHECK(st_realize(300, t) == ST_OK);
    for (int n = 300; n > 1;) {
        int m = 0;
        for (int i = 0; i + 1 < n; i += 2) t[m++] = K(st_add(t[i], t[i + 1]));
        if (n & 1) t[m++] = t[n - 1];
        n = m;
    }
    EXPECT(t[0], 0, 300 * 299 / 2, 300);
}

TEST(softmax) {
    double x[15];
    for (int i = 0; i < 15; i++) x[i] = (float)(((i * 5) % 7) - 3 + 0.1 * i);
    st_tensor *t = K(fu_make(ST_F32, 2, SH(3, 5), x));
    st_tensor *s = K(st_softmax(t, 1)), *ls = K(st_log_softmax(t, -1)), *s0 = K(st_softmax(t, 0));
    double want[15], lwant[15], w0[15];
    for (int r = 0; r < 3; r++) {
        double m = -INFINITY, z = 0;
        for (int c = 0; c < 5; c++) m = fmax(m, x[r * 5 + c]);
        for (int c = 0; c < 5; c++) z += exp(x[r * 5 + c] - m);
        for (int c = 0; c < 5; c++) {
            want[r * 5 + c] = exp(x[r * 5 + c] - m) / z;
            lwant[r * 5 + c] = x[r * 5 + c] - m - log(z);
        }
    }
    for (int c = 0; c < 5; c++) {
        double z = 0;
        for (int r = 0; r < 3; r++) z += exp(x[r * 5 + c]);
        for (int r = 0; r < 3; r++) w0[r * 5 + c] = exp(x[r * 5 + c]) / z;
    }
    EXPECT_A(s, 15, want, 1e-6);
    EXPECT_A(ls, 15, lwant, 1e-6);
    EXPECT_A(s0, 15, w0, 1e-6);
    st_tensor *rs = K(st_sum(s, 1, (int[]){1}, 0));
    EXPECT(rs, 1e-6, 1, 1, 1);
    st_tensor *ers = K(st_sum(K(st_exp(ls)), 1, (int[]){1}, 0));
    EXPECT(ers, 1e-6, 1, 1, 1);
    st_tensor *big = MK(ST_F32, 1, SH(3), 1000, 1001, 1002);
    st_tensor *sb = K(st_softmax(big, 0));
    double e0 = exp(-2.0), e1 = exp(-1.0), zz = e0 + e1 + 1;
    EXPECT(sb, 1e-6, e0 / zz, e1 / zz, 1 / zz);
    st_tensor *si = K(st_softmax(MK(ST_I32, 1, SH(2), 0, 0), 0));
    EXPECT(si, 1e-7, 0.5, 0.5);
    CHECK_EQ_INT(dt_of(si), ST_F32);
}

/* ---- matmul ---- */

static void naive_mm(const double *a, const double *b, double *c, int64_t M, int64_t K_, int64_t N) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K_; k++) s += a[i * K_ + k] * b[k * N + j];
            c[i * N + j] = s;
        }
}

TEST(matmul) {
    double a[2 * 3 * 4], b[5 * 4 * 2], want[2 * 5 * 3 * 2];
    for (int i = 0; i < 24; i++) a[i] = (float)((i % 7) * 0.5 - 1.25);
    for (int i = 0; i < 40; i++) b[i] = (float)((i % 5) * 0.25 - 0.5 + i * 0.01);
    st_tensor *v = K(fu_make(ST_F32, 1, SH(4), a)), *w = K(fu_make(ST_F32, 1, SH(4), b));
    st_tensor *y = K(st_matmul(v, w));
    double dot = a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
    EXPECT_S(y, 0, NULL, 1e-6, dot);
    st_tensor *A = K(fu_make(ST_F32, 2, SH(3, 4), a)), *B = K(fu_make(ST_F32, 2, SH(4, 2), b));
    naive_mm(a, b, want, 3, 4, 2);
    y = K(st_matmul(A, B));
    EXPECT_SHAPE(y, 2, SH(3, 2));
    EXPECT_A(y, 6, want, 1e-6);
    /* (4) x (4, 2) -> (2); (3, 4) x (4) -> (3) */
    naive_mm(a, b, want, 1, 4, 2);
    y = K(st_matmul(v, B)); EXPECT_SHAPE(y, 1, SH(2)); EXPECT_A(y, 2, want, 1e-6);
    naive_mm(a, b, want, 3, 4, 1);
    y = K(st_matmul(A, w)); EXPECT_SHAPE(y, 1, SH(3)); EXPECT_A(y, 3, want, 1e-6);
    /* batched with broadcast batch dims: (2, 1, 3, 4) x (5, 4, 2) -> (2, 5, 3, 2) */
    st_tensor *A4 = K(fu_make(ST_F32, 4, SH(2, 1, 3, 4), a)), *B3 = K(fu_make(ST_F32, 3, SH(5, 4, 2), b));
    y = K(st_matmul(A4, B3));
    EXPECT_SHAPE(y, 4, SH(2, 5, 3, 2));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 5; j++) naive_mm(a + i * 12, b + j * 8, want + (i * 5 + j) * 6, 3, 4, 2);
    EXPECT_A(y, 60, want, 1e-6);
    /* a transposed (non-contiguous) operand: B^T (2, 4) x A^T (4, 3) = (A B)^T */
    st_tensor *Bt = K(st_transpose(B, 0, 1)), *At = K(st_transpose(A, 0, 1));
    y = K(st_matmul(Bt, At));
    naive_mm(a, b, want, 3, 4, 2);
    double wt[6];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) wt[j * 3 + i] = want[i * 2 + j];
    EXPECT_SHAPE(y, 2, SH(2, 3));
    EXPECT_A(y, 6, wt, 1e-6);
    /* ints stay ints; f64 */
    st_tensor *Ai = MK(ST_I32, 2, SH(2, 2), 1, 2, 3, 4), *Bi = MK(ST_I32, 2, SH(2, 2), 5, 6, 7, 8);
    y = K(st_matmul(Ai, Bi)); EXPECT(y, 0, 19, 22, 43, 50); CHECK_EQ_INT(dt_of(y), ST_I32);
    st_tensor *Ad = K(st_cast(A, ST_F64));
    y = K(st_matmul(Ad, B)); CHECK_EQ_INT(dt_of(y), ST_F64);
    naive_mm(a, b, want, 3, 4, 2);
    EXPECT_A(y, 6, want, 1e-12);
    /* larger, to exercise tiling: (33, 70) x (70, 17) */
    enum { M = 33, KK = 70, N = 17 };
    static double la[M * KK], lb[KK * N], lc[M * N];
    for (int i = 0; i < M * KK; i++) la[i] = (float)(((i * 13) % 17) / 8.0 - 1);
    for (int i = 0; i < KK * N; i++) lb[i] = (float)(((i * 7) % 11) / 5.0 - 1);
    naive_mm(la, lb, lc, M, KK, N);
    y = K(st_matmul(K(fu_make(ST_F32, 2, SH(M, KK), la)), K(fu_make(ST_F32, 2, SH(KK, N), lb))));
    EXPECT_A(y, M * N, lc, 1e-5);
    /* K = 0 gives zeros */
    y = K(st_matmul(K(st_zeros(ST_F32, 2, SH(2, 0))), K(st_zeros(ST_F32, 2, SH(0, 3)))));
    EXPECT_S(y, 2, SH(2, 3), 0, 0, 0, 0, 0, 0, 0);
}

/* ---- views ---- */

TEST(views) {
    st_tensor *b = iota_f(ST_F32, 3, SH(2, 3, 4), 0, 1);
    st_tensor *y = K(st_reshape(b, 2, SH(4, -1)));
    EXPECT_SHAPE(y, 2, SH(4, 6));
    double want[24];
    for (int i = 0; i < 24; i++) want[i] = i;
    EXPECT_A(y, 24, want, 0);
    y = K(st_view(b, 1, SH(24)));
    EXPECT_A(y, 24, want, 0);
    st_tensor *p = K(st_permute(b, (int[]){2, 0, 1}));
    EXPECT_SHAPE(p, 3, SH(4, 2, 3));
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) want[(k * 2 + i) * 3 + j] = (i * 3 + j) * 4 + k;
    EXPECT_A(p, 24, want, 0);
    CHECK(p && !st_is_contiguous(p));
    /* reshape of a non-contiguous view copies; view refuses */
    y = K(st_reshape(p, 2, SH(8, 3)));
    EXPECT_SHAPE(y, 2, SH(8, 3));
    EXPECT_A(y, 24, want, 0);
    EXPECT_ERR(st_view(p, 1, SH(24)), ST_ERR_SHAPE, "(4, 2, 3)", "(24)");
    y = K(st_flatten(p, 0, -1));
    EXPECT_A(y, 24, want, 0);
    y = K(st_contiguous(p));
    EXPECT_A(y, 24, want, 0);
    CHECK(y && st_is_contiguous(y));
    st_tensor *same = K(st_contiguous(b));
    CHECK(same == b);
    st_tensor *t = K(st_transpose(b, 0, 2));
    EXPECT_SHAPE(t, 3, SH(4, 3, 2));
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 2; i++) want[(k * 3 + j) * 2 + i] = (i * 3 + j) * 4 + k;
    EXPECT_A(t, 24, want, 0);
    /* slices: step, negatives, clamping, empty */
    st_tensor *r = iota_f(ST_F32, 1, SH(10), 0, 1);
    y = K(st_slice(r, 0, 1, 8, 3)); EXPECT_S(y, 1, SH(3), 0, 1, 4, 7);
    y = K(st_slice(r, 0, -3, 100, 1)); EXPECT(y, 0, 7, 8, 9);
    y = K(st_slice(r, -1, -100, -7, 2)); EXPECT(y, 0, 0, 2);
    y = K(st_slice(r, 0, 5, 2, 1)); EXPECT_SHAPE(y, 1, SH(0));
    y = K(st_slice(K(st_slice(r, 0, 1, 10, 2)), 0, 1, 4, 2)); EXPECT(y, 0, 3, 7);
    y = K(st_slice(b, 1, 1, 3, 1));
    EXPECT_S(y, 3, SH(2, 2, 4), 0, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23);
    y = K(st_slice(b, 2, 0, 4, 3)); EXPECT_S(y, 3, SH(2, 3, 2), 0, 0, 3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 23);
    y = K(st_select(b, 0, -1)); EXPECT_SHAPE(y, 2, SH(3, 4));
    y = K(st_select(y, 1, 2)); EXPECT_S(y, 1, SH(3), 0, 14, 18, 22);
    /* expand */
    st_tensor *c = MK(ST_F32, 2, SH(3, 1), 1, 2, 3);
    y = K(st_expand(c, 2, SH(3, 4))); EXPECT_S(y, 2, SH(3, 4), 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    y = K(st_expand(c, 3, SH(2, -1, 2))); EXPECT_S(y, 3, SH(2, 3, 2), 0, 1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3);
    y = K(st_broadcast_to(c, 2, SH(3, 2))); EXPECT(y, 0, 1, 1, 2, 2, 3, 3);
    EXPECT_ERR(st_expand(c, 2, SH(4, 4)), ST_ERR_SHAPE, "(3, 1)", "(4, 4)");
    /* squeeze / unsqueeze */
    st_tensor *u = K(st_unsqueeze(c, 0)); EXPECT_SHAPE(u, 3, SH(1, 3, 1));
    y = K(st_squeeze(u, ST_ALL_DIMS)); EXPECT_S(y, 1, SH(3), 0, 1, 2, 3);
    y = K(st_squeeze(u, -1)); EXPECT_SHAPE(y, 2, SH(1, 3));
    y = K(st_squeeze(u, 1)); EXPECT_SHAPE(y, 3, SH(1, 3, 1)); /* size 3: unchanged */
    y = K(st_unsqueeze(c, -1)); EXPECT_SHAPE(y, 3, SH(3, 1, 1));
    y = K(st_unsqueeze(K(st_scalar(5, ST_F32)), 0)); EXPECT_S(y, 1, SH(1), 0, 5);
    y = K(st_flatten(b, 1, 2)); EXPECT_SHAPE(y, 2, SH(2, 12));
    /* a view of an expression */
    y = K(st_select(K(st_add_s(b, 100)), 2, 1)); EXPECT_S(y, 2, SH(2, 3), 0, 101, 105, 109, 113, 117, 121);
    /* clone is a copy */
    st_tensor *cl = K(st_clone(c));
    CHECK(st_fill_(c, 9) == ST_OK);
    EXPECT(cl, 0, 1, 2, 3);
    EXPECT(c, 0, 9, 9, 9);
}

/* Writes through views: every view of the storage sees them; values computed before keep the old. */
TEST(view_writes) {
    double ref[12];
    for (int i = 0; i < 12; i++) ref[i] = i;
    st_tensor *base = iota_f(ST_F32, 2, SH(3, 4), 0, 1);
    st_tensor *before = K(st_mul_s(base, 1));        /* pending, computed before the writes */
    st_tensor *row = K(st_select(base, 0, 1));       /* [4 5 6 7] */
    st_tensor *col = K(st_slice(base, 1, 1, 3, 1));  /* cols 1..2 */
    CHECK(st_fill_(col, 7) == ST_OK);
    for (int i = 0; i < 3; i++) ref[i * 4 + 1] = ref[i * 4 + 2] = 7;
    EXPECT_A(base, 12, ref, 0);
    EXPECT(row, 0, 4, 7, 7, 7);
    double orig[12];
    for (int i = 0; i < 12; i++) orig[i] = i;
    EXPECT_A(before, 12, orig, 0);
    st_tensor *snap1 = K(st_clone(base));
    /* add_ on a stepped slice: cols 0 and 2 */
    st_tensor *even = K(st_slice(base, 1, 0, 4, 2));
    st_tensor *ones = K(st_ones(ST_F32, 1, SH(2)));
    CHECK(st_add_(even, ones) == ST_OK);
    for (int i = 0; i < 3; i++) { ref[i * 4] += 1; ref[i * 4 + 2] += 1; }
    EXPECT_A(base, 12, ref, 0);
    EXPECT(row, 0, 5, 7, 8, 7);
    /* copy_ into a transposed view, with broadcast and a cast */
    st_tensor *tr = K(st_transpose(base, 0, 1));    /* (4, 3) */
    st_tensor *sub = K(st_slice(tr, 0, 3, 4, 1));   /* (1, 3): column 3 of base */
    st_tensor *src = MK(ST_I64, 1, SH(3), -1, -2, -3);
    CHECK(st_copy_(sub, src) == ST_OK);
    ref[3] = -1; ref[7] = -2; ref[11] = -3;
    EXPECT_A(base, 12, ref, 0);
    EXPECT(row, 0, 5, 7, 8, -2);
    /* a write through a view of a view, with a pending reader in between */
    st_tensor *pending = K(st_add_s(row, 0));
    st_tensor *r2 = K(st_select(base, 0, 2)), *r2s = K(st_slice(r2, 0, 1, 4, 2)); /* base[2][1], base[2][3] */
    CHECK(st_mul_(r2s, K(st_scalar(10, ST_F32))) == ST_OK);
    ref[9] *= 10; ref[11] *= 10;
    CHECK(st_sub_(row, K(st_ones(ST_F32, 0, NULL))) == ST_OK);
    double pend[4] = {ref[4], ref[5], ref[6], ref[7]};
    for (int i = 4; i < 8; i++) ref[i] -= 1;
    EXPECT_A(base, 12, ref, 0);
    EXPECT_A(pending, 4, pend, 0);
    /* snapshots keep their values */
    double s1[12];
    for (int i = 0; i < 12; i++) s1[i] = i;
    for (int i = 0; i < 3; i++) s1[i * 4 + 1] = s1[i * 4 + 2] = 7;
    EXPECT_A(snap1, 12, s1, 0);
    EXPECT_A(before, 12, orig, 0);
    /* div_, zero_ on a select, whole-tensor writes */
    CHECK(st_div_(base, K(st_scalar(2, ST_F32))) == ST_OK);
    for (int i = 0; i < 12; i++) ref[i] /= 2;
    CHECK(st_zero_(K(st_select(base, 1, 0))) == ST_OK);
    for (int i = 0; i < 3; i++) ref[i * 4] = 0;
    EXPECT_A(base, 12, ref, 0);
    /* writing into an expanded view is an error and changes nothing */
    st_tensor *ex = K(st_expand(K(st_slice(base, 0, 0, 1, 1)), 2, SH(5, 4)));
    CHECK(st_fill_(ex, 1) != ST_OK);
    st_clear_error();
    EXPECT_A(base, 12, ref, 0);
    /* an integer tensor's in-place add truncates into its dtype */
    st_tensor *it = MK(ST_I32, 1, SH(3), 1, 2, 3);
    CHECK(st_add_(it, MK(ST_F32, 1, SH(3), 0.5, 1.5, -2.5)) == ST_OK);
    EXPECT(it, 0, 1, 3, 0);
    CHECK_EQ_INT(dt_of(it), ST_I32);
    /* a self-overlapping update: a[1:] += a[:-1] reads the old values */
    st_tensor *s = iota_f(ST_F32, 1, SH(5), 1, 1);
    CHECK(st_add_(K(st_slice(s, 0, 1, 5, 1)), K(st_slice(s, 0, 0, 4, 1))) == ST_OK);
    EXPECT(s, 0, 1, 3, 5, 7, 9);
}

/* ---- joining, indexing ---- */

TEST(cat_stack) {
    st_tensor *a = MK(ST_F32, 2, SH(2, 3), 1, 2, 3, 4, 5, 6);
    st_tensor *b = MK(ST_F32, 2, SH(1, 3), 7, 8, 9);
    st_tensor *ab[2] = {a, b};
    st_tensor *y = K(st_cat(2, ab, 0));
    EXPECT_S(y, 2, SH(3, 3), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
    st_tensor *aa[3] = {a, a, a};
    y = K(st_cat(2, aa, -1));
    EXPECT_S(y, 2, SH(2, 6), 0, 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6);
    st_tensor *c = MK(ST_I32, 2, SH(2, 1), 10, 20);
    st_tensor *ac[2] = {a, c};
    y = K(st_cat(2, ac, 1));
    EXPECT_S(y, 2, SH(2, 4), 0, 1, 2, 3, 10, 4, 5, 6, 20);
    CHECK_EQ_INT(dt_of(y), ST_F32);
    y = K(st_stack(2, aa, 0));
    EXPECT_S(y, 3, SH(2, 2, 3), 0, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6);
    y = K(st_stack(3, aa, 2));
    EXPECT_S(y, 3, SH(2, 3, 3), 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6);
    st_tensor *e = K(st_zeros(ST_F32, 2, SH(0, 3)));
    st_tensor *ae[2] = {e, a};
    y = K(st_cat(2, ae, 0)); EXPECT_S(y, 2, SH(2, 3), 0, 1, 2, 3, 4, 5, 6);
    /* cat of views (a transposed piece) */
    st_tensor *t = K(st_transpose(K(st_slice(a, 1, 0, 2, 1)), 0, 1)); /* (2, 2): [[1,4],[2,5]] */
    st_tensor *tb[2] = {t, t};
    y = K(st_cat(2, tb, 0)); EXPECT_S(y, 2, SH(4, 2), 0, 1, 4, 2, 5, 1, 4, 2, 5);
    st_tensor *bad[2] = {a, K(st_zeros(ST_F32, 2, SH(2, 4)))};
    EXPECT_ERR(st_cat(2, bad, 0), ST_ERR_SHAPE, "(2, 3)", "(2, 4)");
    EXPECT_ERR(st_stack(2, bad, 0), ST_ERR_SHAPE, "(2, 3)", "(2, 4)");
}

TEST(gather_scatter) {
    st_tensor *a = MK(ST_F32, 2, SH(3, 4), 0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23);
    st_tensor *idx = MK(ST_I64, 2, SH(3, 2), 3, 0, 1, 1, 0, 2);
    st_tensor *y = K(st_gather(a, 1, idx));
    EXPECT_S(y, 2, SH(3, 2), 0, 3, 0, 11, 11, 20, 22);
    st_tensor *i0 = MK(ST_I32, 2, SH(2, 4), 2, 1, 0, 2, 0, 0, 0, 0);
    y = K(st_gather(a, 0, i0));
    EXPECT_S(y, 2, SH(2, 4), 0, 20, 11, 2, 23, 0, 1, 2, 3);
    /* embedding lookup */
    st_tensor *table = iota_f(ST_F32, 2, SH(5, 3), 0, 1);
    st_tensor *ids = MK(ST_I64, 1, SH(4), 4, 0, 4, 2);
    y = K(st_index_select(table, 0, ids));
    EXPECT_S(y, 2, SH(4, 3), 0, 12, 13, 14, 0, 1, 2, 12, 13, 14, 6, 7, 8);
    st_tensor *ids32 = MK(ST_I32, 1, SH(2), 2, 0);
    y = K(st_index_select(table, 1, ids32));
    EXPECT_S(y, 2, SH(5, 2), 0, 2, 0, 5, 3, 8, 6, 11, 9, 14, 12);
    /* a computed (pending) index */
    st_tensor *cidx = K(st_sub_s(K(st_add_s(ids, 1)), 1));
    y = K(st_index_select(table, 0, K(st_cast(cidx, ST_I64))));
    EXPECT(y, 0, 12, 13, 14, 0, 1, 2, 12, 13, 14, 6, 7, 8);
    /* scatter_add with repeated indices */
    st_tensor *z = K(st_zeros(ST_F32, 1, SH(3)));
    st_tensor *si = MK(ST_I64, 1, SH(5), 0, 2, 0, 1, 0), *sv = MK(ST_F32, 1, SH(5), 1, 2, 3, 4, 5);
    y = K(st_scatter_add(z, 0, si, sv)); EXPECT(y, 0, 9, 4, 2);
    EXPECT(z, 0, 0, 0, 0); /* out of place */
    st_tensor *b2 = K(st_ones(ST_F32, 2, SH(2, 3)));
    st_tensor *si2 = MK(ST_I64, 2, SH(2, 2), 2, 2, 0, 1), *sv2 = MK(ST_F32, 2, SH(2, 2), 1, 2, 3, 4);
    y = K(st_scatter_add(b2, 1, si2, sv2)); EXPECT(y, 0, 1, 1, 4, 4, 5, 1);
    /* index_add */
    st_tensor *ia = K(st_zeros(ST_I64, 2, SH(3, 2)));
    st_tensor *ii = MK(ST_I64, 1, SH(3), 0, 2, 0), *is = MK(ST_I64, 2, SH(3, 2), 1, 2, 3, 4, 5, 6);
    y = K(st_index_add(ia, 0, ii, is)); EXPECT(y, 0, 6, 8, 0, 0, 3, 4); CHECK_EQ_INT(dt_of(y), ST_I64);
    /* one_hot */
    st_tensor *oh = K(st_one_hot(MK(ST_I64, 1, SH(3), 0, 2, 1), 3));
    EXPECT_S(oh, 2, SH(3, 3), 0, 1, 0, 0, 0, 0, 1, 0, 1, 0);
    CHECK_EQ_INT(dt_of(oh), ST_I64);
    oh = K(st_one_hot(MK(ST_I32, 2, SH(1, 2), 3, 1), -1));
    EXPECT_S(oh, 3, SH(1, 2, 4), 0, 0, 0, 0, 1, 0, 1, 0, 0);
    /* bad indices: immediate errors when the index is known */
    EXPECT_ERR(st_index_select(table, 0, MK(ST_I64, 1, SH(2), 1, 5)), ST_ERR_ARG, "5", NULL);
    EXPECT_ERR(st_gather(a, 1, MK(ST_I64, 2, SH(1, 1), -1)), ST_ERR_ARG, "-1", NULL);
    EXPECT_ERR(st_gather(a, 1, MK(ST_F32, 2, SH(1, 1), 0)), ST_ERR_DTYPE, "f32", NULL);
    EXPECT_ERR(st_gather(a, 1, MK(ST_I64, 1, SH(1), 0)), ST_ERR_SHAPE, "(1)", "(3, 4)");
    /* a computed out-of-range index fails at the flush, and the runtime keeps working */
    st_tensor *bad = K(st_add(MK(ST_I64, 1, SH(2), 0, 4), K(st_weak_scalar_i(1))));
    st_tensor *g = K(st_index_select(table, 0, bad));
    if (g) {
        float out[6];
        CHECK(st_to_host(g, ST_F32, out, sizeof out) == ST_ERR_ARG);
        st_clear_error();
    } else {
        CHECK(st_last_status() == ST_ERR_ARG);
        st_clear_error();
    }
    y = K(st_index_select(table, 0, ids));
    EXPECT(y, 0, 12, 13, 14, 0, 1, 2, 12, 13, 14, 6, 7, 8);
}

TEST(casts) {
    st_tensor *x = MK(ST_F32, 1, SH(7), 1.7, -1.7, NAN, 1e10, -1e10, INFINITY, -0.5);
    st_tensor *y = K(st_cast(x, ST_I32));
    EXPECT(y, 0, 1, -1, 0, 2147483647, -2147483648.0, 2147483647, 0);
    y = K(st_cast(x, ST_I64));
    int64_t l[7];
    CHECK(y && st_to_host(y, ST_I64, l, sizeof l) == ST_OK);
    CHECK(l[0] == 1 && l[1] == -1 && l[2] == 0 && l[3] == 10000000000LL && l[4] == -10000000000LL &&
          l[5] == INT64_MAX && l[6] == 0);
    y = K(st_cast(x, ST_BOOL)); EXPECT(y, 0, 1, 1, 1, 1, 1, 1, 1);
    y = K(st_cast(MK(ST_F32, 1, SH(2), 0, -0.0), ST_BOOL)); EXPECT(y, 0, 0, 0);
    /* f16 / bf16 rounding (nearest even), overflow, subnormals, round trips */
    static const double hv[] = {1, 1 + 0x1p-11, 1 + 3 * 0x1p-11, 65504, 65519, 65520, 1e-8, 3e-8,
                                6e-5, -2.5, 0.1, 1e5};
    enum { NH = sizeof hv / sizeof hv[0] };
    double wh[NH], wb[NH];
    for (int i = 0; i < NH; i++) {
        wh[i] = fu_h2f(fu_f2h((float)hv[i]));
        wb[i] = fu_bf2f(fu_f2bf((float)hv[i]));
    }
    st_tensor *h = K(fu_make(ST_F32, 1, SH(NH), hv));
    st_tensor *th = K(st_cast(h, ST_F16)), *tb = K(st_cast(h, ST_BF16));
    EXPECT_A(th, NH, wh, 0);
    EXPECT_A(tb, NH, wb, 0);
    y = K(st_cast(th, ST_F32)); EXPECT_A(y, NH, wh, 0);
    y = K(st_cast(K(st_cast(tb, ST_F64)), ST_BF16)); EXPECT_A(y, NH, wb, 0);
    uint16_t bits[NH];
    if (th && st_to_host(th, ST_F16, bits, sizeof bits) == ST_OK)
        for (int i = 0; i < NH; i++) CHECK_MSG(bits[i] == fu_f2h((float)hv[i]), "f16 bits of %g: %04x, expected %04x", hv[i], bits[i], fu_f2h((float)hv[i]));
    if (h && st_to_host(h, ST_BF16, bits, sizeof bits) == ST_OK) /* to_host converts */
        for (int i = 0; i < NH; i++) CHECK_MSG(bits[i] == fu_f2bf((float)hv[i]), "bf16 bits of %g: %04x", hv[i], bits[i]);
    st_tensor *hn = K(st_cast(MK(ST_F32, 1, SH(2), NAN, -INFINITY), ST_F16));
    EXPECT(hn, 0, NAN, -INFINITY);
    /* ints to floats, bools */
    st_tensor *big = MK(ST_I64, 1, SH(3), 16777217, -3, 0);
    y = K(st_cast(big, ST_F32)); EXPECT(y, 0, 16777216, -3, 0);
    y = K(st_cast(big, ST_F16)); EXPECT(y, 0, INFINITY, -3, 0);
    y = K(st_cast(big, ST_BOOL)); EXPECT(y, 0, 1, 1, 0);
    y = K(st_cast(MK(ST_BOOL, 1, SH(2), 1, 0), ST_F64)); EXPECT(y, 0, 1, 0);
    y = K(st_cast(MK(ST_I64, 1, SH(2), 5000000000.0, -1), ST_I32)); /* wraps like C, no trap */
    CHECK(y != NULL);
    /* a cast is a new tensor even to the same dtype */
    st_tensor *c = K(st_cast(x, ST_F32));
    CHECK(c != NULL && c != x);
    CHECK(st_fill_(c, 0) == ST_OK);
    EXPECT(x, 0, 1.7f, -1.7f, NAN, 1e10f, -1e10f, INFINITY, -0.5);
}

TEST(host_item) {
    st_tensor *x = MK(ST_F32, 2, SH(2, 2), 1.5, -2.25, 3, 4);
    int64_t l[4];
    CHECK(st_to_host(x, ST_I64, l, sizeof l) == ST_OK);
    CHECK(l[0] == 1 && l[1] == -2 && l[2] == 3 && l[3] == 4);
    double d[4];
    st_tensor *t = K(st_transpose(x, 0, 1));
    CHECK(st_to_host(t, ST_F64, d, sizeof d) == ST_OK);
    CHECK(d[0] == 1.5 && d[1] == 3 && d[2] == -2.25 && d[3] == 4);
    uint8_t b[4];
    CHECK(st_to_host(x, ST_BOOL, b, sizeof b) == ST_OK);
    CHECK(b[0] == 1 && b[1] == 1);
    CHECK(st_to_host(x, ST_F32, d, 3) == ST_ERR_ARG);
    st_clear_error();
    double v = 0;
    CHECK(st_item(K(st_sum(x, 0, NULL, 0)), &v) == ST_OK);
    CHECK_NEAR(v, 6.25, 0);
    CHECK(st_item(K(st_select(K(st_select(x, 0, 1)), 0, 0)), &v) == ST_OK);
    CHECK_NEAR(v, 3, 0);
    CHECK(st_item(K(st_reshape(K(st_slice(x, 1, 1, 2, 1)), 1, SH(2))), &v) == ST_ERR_SHAPE);
    st_clear_error();
    CHECK(st_item(K(st_slice(K(st_slice(x, 1, 1, 2, 1)), 0, 1, 2, 1)), &v) == ST_OK); /* (1, 1) */
    CHECK_NEAR(v, 4, 0);
    int64_t iv = 0;
    CHECK(st_item_i64(K(st_scalar(-7, ST_I64)), &iv) == ST_OK);
    CHECK_EQ_INT(iv, -7);
    CHECK(st_item_i64(K(st_scalar(9007199254740993.0, ST_I64)), &iv) == ST_OK);
    st_tensor *big = K(st_add(K(st_weak_scalar_i(INT64_C(9007199254740993))), K(st_zeros(ST_I64, 0, NULL))));
    CHECK(st_item_i64(big, &iv) == ST_OK);
    CHECK(iv == INT64_C(9007199254740993));
    CHECK(st_is_realized(x));
    CHECK(strcmp(st_device_of(x), st_default_device()) == 0);   /* made on the default device (cpu, or cuda:0 under make test-sim) */
    CHECK_EQ_INT(st_size(x, -1), 2);
    CHECK_EQ_INT(st_size(x, 2), -1);
}

TEST(errors) {
    st_tensor *a = K(st_zeros(ST_F32, 2, SH(2, 3))), *b = K(st_zeros(ST_F32, 1, SH(4)));
    EXPECT_ERR(st_add(a, b), ST_ERR_SHAPE, "(2, 3)", "(4)");
    EXPECT_ERR(st_where(K(st_zeros(ST_BOOL, 1, SH(5))), a, b), ST_ERR_SHAPE, "(5)", NULL);
    EXPECT_ERR(st_matmul(a, K(st_zeros(ST_F32, 2, SH(4, 5)))), ST_ERR_SHAPE, "(2, 3)", "(4, 5)");
    EXPECT_ERR(st_matmul(K(st_zeros(ST_F32, 3, SH(2, 2, 3))), K(st_zeros(ST_F32, 3, SH(3, 3, 2)))),
               ST_ERR_SHAPE, "(2, 2, 3)", "(3, 3, 2)");
    EXPECT_ERR(st_matmul(a, K(st_scalar(1, ST_F32))), ST_ERR_SHAPE, "(2, 3)", "()");
    EXPECT_ERR(st_reshape(a, 1, SH(4)), ST_ERR_SHAPE, "(2, 3)", "(4)");
    EXPECT_ERR(st_reshape(a, 2, SH(-1, -1)), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_reshape(a, 2, SH(-1, 4)), ST_ERR_SHAPE, "(2, 3)", NULL);
    EXPECT_ERR(st_sum(a, 1, (int[]){5}, 0), ST_ERR_ARG, "5", NULL);
    EXPECT_ERR(st_sum(a, 2, (int[]){1, -1}, 0), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_softmax(a, 2), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_permute(a, (int[]){0, 0}), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_transpose(a, 0, 2), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_slice(a, 1, 0, 2, 0), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_select(a, 1, 3), ST_ERR_ARG, "3", NULL);
    EXPECT_ERR(st_select(a, 0, -3), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_unsqueeze(a, 4), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_flatten(a, 1, 0), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_cast(a, (st_dtype)99), ST_ERR_DTYPE, NULL, NULL);
    EXPECT_ERR(st_zeros((st_dtype)99, 1, SH(2)), ST_ERR_DTYPE, NULL, NULL);
    EXPECT_ERR(st_zeros(ST_F32, 1, SH(-2)), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_rand(ST_I32, 1, SH(2)), ST_ERR_DTYPE, "i32", NULL);
    EXPECT_ERR(st_randint(3, 3, ST_I32, 1, SH(2)), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_arange(0, 1, 0, ST_F32), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_matmul(K(st_zeros(ST_BOOL, 2, SH(2, 2))), K(st_zeros(ST_BOOL, 2, SH(2, 2)))), ST_ERR_DTYPE, NULL, NULL);
    EXPECT_ERR(st_abs(K(st_zeros(ST_BOOL, 1, SH(2)))), ST_ERR_DTYPE, NULL, NULL);
    EXPECT_ERR(st_one_hot(a, 3), ST_ERR_DTYPE, NULL, NULL);
    EXPECT_ERR(st_add(NULL, a), ST_ERR_ARG, NULL, NULL);
    EXPECT_ERR(st_cat(0, NULL, 0), ST_ERR_ARG, NULL, NULL);
    st_tensor *s3 = K(st_zeros(ST_F32, 1, SH(3)));
    CHECK(st_add_(s3, a) == ST_ERR_SHAPE); /* a += b must not grow a */
    CHECK(strstr(st_last_error(), "(3)") && strstr(st_last_error(), "(2, 3)"));
    st_clear_error();
    CHECK(st_copy_(s3, a) == ST_ERR_SHAPE);
    CHECK(strstr(st_last_error(), "(3)") && strstr(st_last_error(), "(2, 3)"));
    st_clear_error();
    CHECK(st_copy_(b, s3) == ST_ERR_SHAPE);
    st_clear_error();
    CHECK(st_last_status() == ST_OK && strcmp(st_last_error(), "") == 0);
    /* failed writes left the tensors as they were; everything still works */
    EXPECT(s3, 0, 0, 0, 0);
    st_tensor *y = K(st_add_s(K(st_matmul(K(st_ones(ST_F32, 2, SH(2, 3))), K(st_ones(ST_F32, 2, SH(3, 2))))), 1));
    EXPECT_S(y, 2, SH(2, 2), 0, 4, 4, 4, 4);
}

/* Positions in messages are 0-based for C (st_last_error) and rendered from 1 for Lua
 * (st_last_error_base(1)); negative dims are shown as given. Integer fills that overflow are
 * errors; one_hot checks its classes. */
static void expect_msgs_(int line, const char *what, int failed, const char *c0, const char *c1) {
    if (test_cur_failed) return;
    if (!failed) TEST_FAILF("line %d: %s succeeded, expected an error", line, what);
    else if (!strstr(st_last_error(), c0)) TEST_FAILF("line %d: %s: \"%s\" lacks \"%s\"", line, what, st_last_error(), c0);
    else if (c1 && !strstr(st_last_error_base(1), c1))
        TEST_FAILF("line %d: %s: base 1: \"%s\" lacks \"%s\"", line, what, st_last_error_base(1), c1);
    else if (strchr(st_last_error(), 0x1d) || strchr(st_last_error(), 0x1e))
        TEST_FAILF("line %d: %s: a position mark is left in \"%s\"", line, what, st_last_error());
    st_clear_error();
}
#define EXPECT_MSGS(expr, c0, c1) expect_msgs_(__LINE__, #expr, !K(expr), c0, c1)
#define EXPECT_MSGS_S(expr, c0, c1) expect_msgs_(__LINE__, #expr, (expr) != ST_OK, c0, c1)
TEST(error_positions) {
    st_tensor *a = K(st_zeros(ST_F32, 2, SH(2, 3)));
    EXPECT_MSGS(st_permute(a, (const int[]){1, 1}), "permute: dim 1 appears twice", "permute: dim 2 appears twice");
    EXPECT_MSGS(st_permute(a, (const int[]){1, -1}), "permute: dim -1 appears twice", "permute: dim -1 appears twice");
    EXPECT_MSGS(st_flatten(a, 1, 0), "start dim 1 comes after end dim 0", "start dim 2 comes after end dim 1");
    EXPECT_MSGS(st_cat(2, (st_tensor *[]){a, K(st_zeros(ST_F32, 2, SH(3, 3)))}, 1),
                "cat: tensor 1 has shape (3, 3), incompatible with (2, 3) along dim 1", "tensor 2 has shape (3, 3), incompatible with (2, 3) along dim 2");
    EXPECT_MSGS(st_stack(2, (st_tensor *[]){a, K(st_zeros(ST_F32, 1, SH(3)))}, 0), "stack: tensor 1 has shape (3) but tensor 0 has",
                "stack: tensor 2 has shape (3) but tensor 1 has");
    EXPECT_MSGS(st_sum(a, 2, (const int[]){1, 1}, 0), "sum: dim 1 given twice", "sum: dim 2 given twice");
    EXPECT_MSGS(st_sum(a, 1, (const int[]){2}, 0), "dim 2 out of range for a tensor with 2 dims", "dim 3 out of range");
    EXPECT_MSGS(st_select(a, 1, 3), "select: index 3 out of range for dim 1 of size 3", "index 4 out of range for dim 2");
    EXPECT_MSGS(st_gather(a, 1, MK(ST_I64, 2, SH(1, 1), 3)), "gather: index 3 out of range for dim 1 of size 3",
                "gather: index 4 out of range for dim 2 of size 3");
    EXPECT_MSGS(st_gather(a, 1, MK(ST_I64, 2, SH(1, 1), -1)), "gather: index -1 out of range", "gather: index 0 out of range");
    /* integer values that overflow; one_hot's classes */
    EXPECT_MSGS(st_full(ST_I32, 1, SH(2), 1099511627776.0), "full: value 1099511627776 cannot be converted to type i32 without overflow", NULL);
    EXPECT_MSGS(st_scalar(9223372036854775808.0, ST_I64), "cannot be converted to type i64 without overflow", NULL);
    EXPECT_MSGS(st_scalar(NAN, ST_I32), "without overflow", NULL);
    st_tensor *i = K(st_zeros(ST_I32, 1, SH(2)));
    EXPECT_MSGS_S(st_fill_(i, 2147483648.0), "fill_: value 2147483648 cannot be converted to type i32", NULL);
    CHECK(st_fill_(i, -2147483648.9) == ST_OK); /* toward zero: in range */
    EXPECT(i, 0, -2147483648.0, -2147483648.0);
    st_tensor *ok = K(st_scalar(-9223372036854775808.0, ST_I64));
    int64_t v = 0;
    CHECK(st_item_i64(ok, &v) == ST_OK && v == INT64_MIN);
    EXPECT_MSGS(st_one_hot(MK(ST_I64, 1, SH(2), 0, 3), 3), "one_hot: class 3 out of range for 3 classes (index of shape (2))",
                "one_hot: class 4 out of range for 3 classes");
    EXPECT_MSGS(st_one_hot(MK(ST_I64, 1, SH(2), -1, 1), 3), "one_hot: class -1 out of range", "one_hot: class 0 out of range");
    EXPECT_MSGS(st_one_hot(MK(ST_I64, 1, SH(1), 0), -2), "one_hot: -2 classes", NULL);
}

int main(int argc, char **argv) {
    int only = -1;
    if (argc > 1) { /* optional: a mode name to run only that mode */
        for (int m = 0; m < MODE_COUNT; m++)
            if (strcmp(argv[1], mode_names[m]) == 0) only = m;
    }
    st_set_poison(1);
    for (int m = 0; m < MODE_COUNT; m++) {
        if (only >= 0 && m != only) continue;
        cur_mode = m;
        RUNM(dtypes);
        RUNM(creation);
        RUNM(random);
        RUNM(unary_f32);
        RUNM(unary_f64);
        RUNM(unary_f16);
        RUNM(unary_bf16);
        RUNM(unary_int_bool);
        RUNM(unary_special);
        RUNM(binary_f32);
        RUNM(binary_f64);
        RUNM(binary_int);
        RUNM(broadcast_scalars);
        RUNM(promotion_weak);
        RUNM(where_clamp);
        RUNM(reductions_f32);
        RUNM(reductions_f64);
        RUNM(reductions_misc);
        RUNM(single_element_rows);
        RUNM(big_groups);
        RUNM(softmax);
        RUNM(matmul);
        RUNM(views);
        RUNM(view_writes);
        RUNM(cat_stack);
        RUNM(gather_scatter);
        RUNM(casts);
        RUNM(host_item);
        RUNM(errors);
        RUNM(error_positions);
    }
    st_shutdown();
    TEST_MAIN_END();
}
