/*
 * test_autograd.c — gradient checks and semantics of autograd (include/stitch.h, "autograd").
 *
 * gradcheck() compares, in f64, the analytic gradient of L = sum(f(x) * R) (R a fixed random tensor
 * of f's output shape, so that every output element matters) computed by st_backward with central
 * finite differences of L (eps 1e-6, every element of every input, evaluated with grad mode off
 * from inputs rebuilt with st_from_data). It is run for every differentiable op of trace/ops.def
 * reached through the public API — the elementwise ones from the op table (tests/op_table.h: every
 * differentiable row, inputs from its domains), binary ones with broadcasts on either side — and
 * for the views and in-place ops on non-leaf tensors. The remaining tests check the semantics:
 * accumulation, clearing, errors, in-place on leaves, detach, grad mode, views of leaves, f32/f16
 * grads, laziness (backward records only; forward + backward + grads realize in one flush) and a
 * 10,000-op chain.
 *
 * Invariant: only the public API is used (and the op table, which reads the internal st_ops for
 * whether an op is differentiable); every tensor a test makes goes through K() and is released
 * (pool_to) when the test or the evaluation that made it ends, so the program is clean under
 * -fsanitize=address. Shapes are small so that regions stay below ST_JIT_MIN (interpreter
 * tier) and the whole program runs in a few seconds.
 */
#include "test.h"
#include "fuzz_util.h"
#include "op_table.h"

#include <stdint.h>
#include <stdlib.h>

/* ---- harness ---- */

static st_tensor *pool_[16384];
static int npool_;
/* Registers t for release by pool_to(); returns t (NULL passes through). */
static st_tensor *K(st_tensor *t) {
    if (t && npool_ < (int)(sizeof pool_ / sizeof pool_[0])) pool_[npool_++] = t;
    else if (t) { fprintf(stderr, "test_autograd: tensor pool full\n"); abort(); }
    return t;
}
/* Releases every tensor registered after mark. */
static void pool_to(int mark) {
    while (npool_ > mark) st_release(pool_[--npool_]);
}

#define RUNT(name)                                                                             \
    do {                                                                                       \
        RUN(name);                                                                             \
        pool_to(0);                                                                            \
        for (int k_ = 0; k_ < 64 && !st_grad_enabled(); k_++) st_grad_mode_pop(); /* a failed test may leave it off */ \
    } while (0)

#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define V(...) ((const double[]){__VA_ARGS__})
#define NV(...) ((int64_t)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)))

static int64_t numel_of(int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    return n;
}

/* Host RNG (splitmix64): the test's values do not depend on the library's RNG. */
static uint64_t rng_s = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) {
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double urand(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }
static double nrand(void) {
    double u = urand(), v = urand();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* A new f64 tensor (registered) from host values. */
static st_tensor *mk64(int nd, const int64_t *shape, const double *v) {
    return K(fu_make(ST_F64, nd, shape, v));
}
#define MK(nd, shape, ...) mk64(nd, shape, V(__VA_ARGS__))
static st_tensor *mki64(int nd, const int64_t *shape, const double *v) {
    return K(fu_make(ST_I64, nd, shape, v));
}
/* A leaf of dtype dt that requires grad. */
static st_tensor *leaf(st_dtype dt, int nd, const int64_t *shape, const double *v) {
    st_tensor *t = K(fu_make(dt, nd, shape, v));
    if (t && st_set_requires_grad(t, 1) != ST_OK) return NULL;
    return t;
}

static int same_shape(const st_tensor *t, int nd, const int64_t *shape) {
    int64_t s[ST_MAX_DIMS];
    if (!t || st_ndim(t) != nd) return 0;
    st_shape(t, s);
    for (int i = 0; i < nd; i++)
        if (s[i] != shape[i]) return 0;
    return 1;
}

/* Checks t's values (read as f64) against want[0..n) within tol (relative + absolute). */
static void expect_vals_(int line, const char *what, st_tensor *t, int64_t n, const double *want,
                         double tol) {
    if (test_cur_failed) return;
    if (!t) {
        TEST_FAILF("line %d: %s is NULL [%s]", line, what, st_last_error());
        return;
    }
    if (st_numel(t) != n) {
        TEST_FAILF("line %d: %s has %lld elements, expected %lld", line, what,
                   (long long)st_numel(t), (long long)n);
        return;
    }
    int64_t m;
    double *got = fu_read(t, &m);
    if (!got) {
        TEST_FAILF("line %d: reading %s failed: %s", line, what, st_last_error());
        return;
    }
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])))) {
            TEST_FAILF("line %d: %s[%lld] = %.12g, expected %.12g", line, what, (long long)i, got[i],
                       want[i]);
            break;
        }
    free(got);
}
#define EXPECT(t, tol, ...) expect_vals_(__LINE__, #t, t, NV(__VA_ARGS__), V(__VA_ARGS__), tol)
#define EXPECT_A(t, n, arr, tol) expect_vals_(__LINE__, #t, t, n, arr, tol)

/* ---- gradcheck ---- */

/* Input value domains: op_dom of tests/op_table.h (D_NORMAL, D_POS, D_AWAY, D_DISTINCT, D_WIDE),
 * drawn by draw() below. */

typedef struct gc_in {
    int nd;
    int64_t shape[ST_MAX_DIMS];
    int dom;
} gc_in;

typedef st_tensor *(*gc_fn)(st_tensor *const *x, const void *ctx);

typedef struct gc_case {
    const char *name;
    gc_fn f;
    const void *ctx;
    int n;          /* inputs: every one is a float f64 leaf checked */
    gc_in in[6];
    /* Optional domain check on drawn values (kinks, ties); values are redrawn until it passes. */
    int (*ok)(double *const *v, const struct gc_case *c);
    const void *okctx;
    double eps, tol; /* 0: 1e-6 and 1e-6 */
} gc_case;

/* n values of domain dom: D_NORMAL N(0, 1); D_POS U[0.5, 2); D_AWAY +-U[0.5, 1.5); D_WIDE
 * N(0, 3); D_DISTINCT a shuffled grid with gaps >= 0.3 (no ties for max/min reductions). */
static void draw(double *v, int64_t n, int dom) {
    for (int64_t i = 0; i < n; i++) {
        switch (dom) {
        case D_POS: v[i] = 0.5 + 1.5 * urand(); break;
        case D_AWAY: v[i] = (urand() < 0.5 ? -1 : 1) * (0.5 + urand()); break;
        case D_WIDE: v[i] = 3 * nrand(); break;
        case D_DISTINCT: v[i] = 0.3 * ((double)i - (double)n / 2) + 0.05 * urand(); break;
        default: v[i] = nrand(); break;
        }
    }
    if (dom == D_DISTINCT)
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(rng_next() % (uint64_t)(i + 1));
            double t = v[i];
            v[i] = v[j];
            v[j] = t;
        }
}

static const char *shape_s(int nd, const int64_t *shape, char *buf, size_t n) {
    return st_shape_str(nd, shape, buf, n);
}

/* L = sum(y * R) as a new (registered) 0-d tensor, or NULL. */
static st_tensor *loss_of(st_tensor *y, st_tensor *R) {
    st_tensor *p = K(st_mul(y, R));
    return p ? K(st_sum(p, 0, NULL, 0)) : NULL;
}

/* Evaluates L(x) with grad mode off from host values; NAN on failure (error printed). */
static double eval_loss(const gc_case *c, double *const *vals, st_tensor *R) {
    int mark = npool_;
    st_tensor *x[6];
    double L = NAN;
    for (int i = 0; i < c->n; i++) x[i] = mk64(c->in[i].nd, c->in[i].shape, vals[i]);
    st_tensor *y = K(c->f(x, c->ctx));
    st_tensor *l = y ? loss_of(y, R) : NULL;
    if (!l || st_item(l, &L) != ST_OK) {
        printf("  gradcheck %s: forward failed: %s\n", c->name, st_last_error());
        L = NAN;
    }
    pool_to(mark);
    return L;
}

static int gc_cases, gc_elems; /* totals, printed at the end */

/* Runs one gradient check; records a failure (and prints a line for every failing case). */
static int gradcheck(const gc_case *c) {
    gc_cases++;
    const double eps = c->eps > 0 ? c->eps : 1e-6, tol = c->tol > 0 ? c->tol : 1e-6;
    int mark = npool_, pass = 0;
    double *vals[6] = {0};
    char gbuf[96], gbuf2[96];
    int64_t nel[6];
    for (int i = 0; i < c->n; i++) {
        nel[i] = numel_of(c->in[i].nd, c->in[i].shape);
        vals[i] = malloc((size_t)(nel[i] ? nel[i] : 1) * sizeof(double));
    }
    for (int tries = 0;; tries++) {
        for (int i = 0; i < c->n; i++) draw(vals[i], nel[i], c->in[i].dom);
        if (!c->ok || c->ok(vals, c)) break;
        if (tries == 1000) {
            printf("  gradcheck %s: no valid inputs drawn\n", c->name);
            TEST_FAILF("%s: no valid inputs drawn", c->name);
            goto done;
        }
    }

    /* analytic: leaves that require grad, L = sum(f(x) * R), backward */
    st_tensor *x[6];
    for (int i = 0; i < c->n; i++) {
        x[i] = leaf(ST_F64, c->in[i].nd, c->in[i].shape, vals[i]);
        if (!x[i]) {
            TEST_FAILF("%s: making leaf %d failed: %s", c->name, i, st_last_error());
            goto done;
        }
    }
    st_tensor *y = K(c->f(x, c->ctx));
    if (!y) {
        printf("  gradcheck %s: forward failed: %s\n", c->name, st_last_error());
        TEST_FAILF("%s: forward failed: %s", c->name, st_last_error());
        goto done;
    }
    /* (not is_leaf: a view of a leaf shares the leaf's storage and reports is_leaf = 1) */
    if (!st_requires_grad(y)) {
        printf("  gradcheck %s: output does not require grad\n", c->name);
        TEST_FAILF("%s: output does not require grad", c->name);
        goto done;
    }
    int yn = st_ndim(y);
    int64_t ys[ST_MAX_DIMS];
    st_shape(y, ys);
    int64_t ny = numel_of(yn, ys);
    double *rv = malloc((size_t)(ny ? ny : 1) * sizeof(double));
    for (int64_t i = 0; i < ny; i++) rv[i] = nrand();
    st_tensor *R = mk64(yn, ys, rv);
    free(rv);
    st_tensor *L = loss_of(y, R);
    if (!L || st_backward(L, NULL) != ST_OK) {
        printf("  gradcheck %s: backward failed: %s\n", c->name, st_last_error());
        TEST_FAILF("%s: backward failed: %s", c->name, st_last_error());
        goto done;
    }
    double *ga[6] = {0};
    int bad = 0;
    for (int i = 0; i < c->n && !bad; i++) {
        st_clear_error();
        st_tensor *g = K(st_grad(x[i]));
        ga[i] = calloc((size_t)(nel[i] ? nel[i] : 1), sizeof(double));
        if (!g) {
            if (st_last_status() != ST_OK) {
                printf("  gradcheck %s: st_grad(input %d) failed: %s\n", c->name, i, st_last_error());
                TEST_FAILF("%s: st_grad(input %d) failed: %s", c->name, i, st_last_error());
                bad = 1;
            }
            continue; /* no gradient: zeros, checked against the differences below */
        }
        if (!same_shape(g, c->in[i].nd, c->in[i].shape) || st_dtype_of(g) != ST_F64) {
            int64_t gs[ST_MAX_DIMS];
            st_shape(g, gs);
            printf("  gradcheck %s: grad of input %d has shape %s dtype %s, expected %s f64\n",
                   c->name, i, shape_s(st_ndim(g), gs, gbuf, sizeof gbuf),
                   st_dtype_name(st_dtype_of(g)),
                   shape_s(c->in[i].nd, c->in[i].shape, gbuf2, sizeof gbuf2));
            TEST_FAILF("%s: grad of input %d has shape %s dtype %s, expected %s f64", c->name, i,
                       gbuf, st_dtype_name(st_dtype_of(g)), gbuf2);
            bad = 1;
            continue;
        }
        if (st_to_host(g, ST_F64, ga[i], (size_t)nel[i] * sizeof(double)) != ST_OK) {
            printf("  gradcheck %s: reading grad %d failed: %s\n", c->name, i, st_last_error());
            TEST_FAILF("%s: reading grad %d failed: %s", c->name, i, st_last_error());
            bad = 1;
        }
    }

    /* numeric: central differences with grad mode off */
    if (!bad) {
        st_grad_mode_push(0);
        for (int i = 0; i < c->n && !bad; i++) {
            for (int64_t j = 0; j < nel[i] && !bad; j++) {
                double v0 = vals[i][j];
                vals[i][j] = v0 + eps;
                double lp = eval_loss(c, vals, R);
                vals[i][j] = v0 - eps;
                double lm = eval_loss(c, vals, R);
                vals[i][j] = v0;
                double num = (lp - lm) / (2 * eps), an = ga[i][j];
#ifdef GC_SABOTAGE /* self-test of the checker: every case must fail */
                num *= 1 + 1e-4;
#endif
                gc_elems++;
                if (!(fabs(an - num) <= tol * fabs(num) + tol)) {
                    printf("  gradcheck %s: d/d input%d[%lld] analytic %.12g, numeric %.12g\n",
                           c->name, i, (long long)j, an, num);
                    TEST_FAILF("%s: d/d input%d[%lld]: analytic %.12g, numeric %.12g", c->name, i,
                               (long long)j, an, num);
                    bad = 1;
                }
            }
        }
        st_grad_mode_pop();
    }
    pass = !bad;
    for (int i = 0; i < c->n; i++) free(ga[i]);
done:
    for (int i = 0; i < c->n; i++) free(vals[i]);
    pool_to(mark);
    return pass;
}

/* Runs a list of cases, all of them even after a failure (each failure prints its own line). */
static void gradcheck_all(const gc_case *cs, int n) {
    for (int i = 0; i < n; i++) gradcheck(&cs[i]);
}

#define IN0() {0, {0}, D_NORMAL}
#define IN1(a, d) {1, {a}, d}
#define IN2(a, b, d) {2, {a, b}, d}
#define IN3(a, b, c, d) {3, {a, b, c}, d}
#define IN4(a, b, c, e, d) {4, {a, b, c, e}, d}

/* Calls pred on every pair of elements that a broadcast binary op of inputs 0 and 1 combines. */
static int bcast_pairs_ok(double *const *v, const gc_in *a, const gc_in *b,
                          int (*pred)(double, double)) {
    int nd = a->nd > b->nd ? a->nd : b->nd;
    int64_t os[ST_MAX_DIMS], idx[ST_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - a->nd), db = d - (nd - b->nd);
        int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
        os[d] = sa > sb ? sa : sb;
    }
    int64_t n = numel_of(nd, os);
    for (int64_t k = 0; k < n; k++) {
        int64_t r = k;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = r % os[d];
            r /= os[d];
        }
        int64_t ia = 0, ib = 0;
        for (int d = 0; d < a->nd; d++)
            ia = ia * a->shape[d] + (a->shape[d] == 1 ? 0 : idx[nd - a->nd + d]);
        for (int d = 0; d < b->nd; d++)
            ib = ib * b->shape[d] + (b->shape[d] == 1 ? 0 : idx[nd - b->nd + d]);
        if (!pred(v[0][ia], v[1][ib])) return 0;
    }
    return 1;
}
typedef struct { int (*pred)(double, double); } pred_ctx;
static int ok_pairs(double *const *v, const gc_case *c) {
    return bcast_pairs_ok(v, &c->in[0], &c->in[1], ((const pred_ctx *)c->okctx)->pred);
}
/* maximum/minimum: no ties within the difference step */
static int pred_apart(double a, double b) { return fabs(a - b) > 1e-3; }
/* fmod/remainder: a/b not near an integer (the quotient's jumps) */
static int pred_frac(double a, double b) {
    double q = a / b;
    return fabs(q - nearbyint(q)) > 1e-3;
}
static const pred_ctx PRED_APART = {pred_apart}, PRED_FRAC = {pred_frac};

/* ---- unary ops ---- */

/* Every differentiable unary row of the op table on a (2, 3) input of its domain, then a few
 * shapes and signs by hand. */
static st_tensor *f_case(st_tensor *const *x, const void *c) {
    const op_case *oc = c;
    return op_case_call(oc, x[0], oc->arity == 2 ? x[1] : NULL);
}
static const op_case *case_named(const char *name) {
    for (int k = 0; k < OP_NCASES; k++)
        if (!strcmp(op_cases[k].name, name)) return &op_cases[k];
    fprintf(stderr, "test_autograd: no op table row %s\n", name);
    abort();
}

TEST(unary) {
    int ran = 0;
    for (int k = 0; k < OP_NCASES; k++) {
        const op_case *oc = &op_cases[k];
        if (oc->arity != 1 || !op_case_diff(oc)) continue;
        gc_case c = {oc->name, f_case, oc, 1, {IN2(2, 3, oc->dom_a)}, NULL, NULL, 0, 0};
        gradcheck(&c);
        ran++;
    }
    CHECK_MSG(ran > 0, "no differentiable unary row in the op table");
    const gc_case cs[] = {
        {"reciprocal_neg", f_case, case_named("reciprocal"), 1, {IN1(5, D_AWAY)}, NULL, NULL, 0, 0},
        {"exp_0d", f_case, case_named("exp"), 1, {IN0()}, NULL, NULL, 0, 0},
        {"tanh_3d", f_case, case_named("tanh"), 1, {IN3(2, 1, 3, D_NORMAL)}, NULL, NULL, 0, 0},
    };
    gradcheck_all(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* Non-differentiable ops pass no gradient: x * floor(x) has gradient floor(x); sign, round,
 * comparisons inside where() likewise. */
static st_tensor *f_nondiff(st_tensor *const *x, const void *c) {
    (void)c;
    st_tensor *a = K(st_mul(x[0], K(st_floor(x[0]))));
    st_tensor *b = K(st_mul(x[0], K(st_sign(x[0]))));
    st_tensor *d = K(st_add(K(st_ceil(x[0])), K(st_round(x[0]))));
    st_tensor *z = K(st_zeros(ST_F64, 0, NULL));
    st_tensor *w = K(st_where(K(st_gt(x[0], z)), x[0], d));
    return st_add(K(st_add(a, b)), w);
}

/* casts: f64 -> f64 (identity, a new tensor); f64 -> f32 -> f64 round trip */
static st_tensor *f_cast64(st_tensor *const *x, const void *c) {
    (void)c;
    return st_mul(K(st_cast(x[0], ST_F64)), x[0]);
}
static st_tensor *f_cast32(st_tensor *const *x, const void *c) {
    (void)c;
    return st_cast(K(st_cast(x[0], ST_F32)), ST_F64);
}
static st_tensor *f_cast32_exp(st_tensor *const *x, const void *c) {
    (void)c;
    return st_exp(K(st_cast(K(st_mul_s(K(st_cast(x[0], ST_F32)), 0.5)), ST_F64)));
}

TEST(nondiff_and_cast) {
    static const gc_case cs[] = {
        {"nondiff", f_nondiff, NULL, 1, {IN2(3, 4, D_WIDE)}, NULL, NULL, 0, 0},
        {"cast_f64_identity", f_cast64, NULL, 1, {IN2(2, 3, D_NORMAL)}, NULL, NULL, 0, 0},
        /* through f32 the forward rounds to 2^-24 relative: a difference step of 1e-6 would see
         * the rounding, so step 1e-2 (the function is linear: no truncation error) and a
         * tolerance of 1e-4 (the gradient itself is rounded to f32 on the way back) */
        {"cast_f64_f32_f64", f_cast32, NULL, 1, {IN2(2, 3, D_NORMAL)}, NULL, NULL, 1e-2, 1e-4},
        /* nonlinear through f32: step 1e-3, truncation ~eps^2 = 1e-6, rounding ~1e-7/1e-3 */
        {"cast_f32_exp", f_cast32_exp, NULL, 1, {IN1(4, D_NORMAL)}, NULL, NULL, 1e-3, 1e-3},
    };
    gradcheck_all(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* ---- binary ops ---- */

/* Shape pairs: equal, broadcasts on either side, 0-d on either side. */
typedef struct { gc_in a, b; } shape_pair;
static const shape_pair PAIRS[] = {
    {IN2(2, 3, 0), IN2(2, 3, 0)},       {IN3(3, 1, 4, 0), IN2(5, 1, 0)},
    {IN2(5, 1, 0), IN3(3, 1, 4, 0)},    {IN1(4, 0), IN3(2, 3, 4, 0)},
    {IN2(2, 1, 0), IN2(1, 3, 0)},       {IN2(2, 3, 0), IN0()},
    {IN0(), IN2(3, 2, 0)},              {IN4(2, 1, 3, 1, 0), IN3(2, 1, 2, 0)},
};

/* Every shape pair for binary case oc, inputs from its domains; TF_APART / TF_FRAC rows draw
 * until every combined pair is apart / has its quotient away from integers. */
static void bin_check(const op_case *oc) {
    const pred_ctx *pred = oc->flags & TF_APART ? &PRED_APART : oc->flags & TF_FRAC ? &PRED_FRAC : NULL;
    for (int p = 0; p < (int)(sizeof PAIRS / sizeof PAIRS[0]); p++) {
        char nm[160], s1[64], s2[64];
        gc_case c = {0};
        c.f = f_case;
        c.ctx = oc;
        c.n = 2;
        c.in[0] = PAIRS[p].a;
        c.in[1] = PAIRS[p].b;
        c.in[0].dom = oc->dom_a;
        c.in[1].dom = oc->dom_b;
        if (pred) {
            c.ok = ok_pairs;
            c.okctx = pred;
        }
        snprintf(nm, sizeof nm, "%s %s %s", oc->name, shape_s(c.in[0].nd, c.in[0].shape, s1, sizeof s1),
                 shape_s(c.in[1].nd, c.in[1].shape, s2, sizeof s2));
        c.name = nm;
        gradcheck(&c);
    }
}

/* Every differentiable binary row of the op table, with broadcasts on either side. */
TEST(binary_broadcast) {
    int ran = 0;
    for (int k = 0; k < OP_NCASES; k++) {
        const op_case *oc = &op_cases[k];
        if (oc->arity != 2 || !op_case_diff(oc)) continue;
        bin_check(oc);
        ran++;
    }
    CHECK_MSG(ran > 0, "no differentiable binary row in the op table");
}

/* Scalar forms (x op s, s op x) and weak scalars; the same input used twice (x * x, x / x). */
static st_tensor *f_scalars(st_tensor *const *x, const void *c) {
    (void)c;
    st_tensor *a = K(st_add_s(x[0], 2)), *b = K(st_mul_s(x[0], -3)), *d = K(st_sub_s(x[0], 1.5));
    st_tensor *e = K(st_rsub_s(x[0], 4)), *f = K(st_div_s(x[0], 7)), *g = K(st_rdiv_s(x[0], 2));
    st_tensor *h = K(st_pow_s(x[0], 3)), *i = K(st_pow_s(x[0], 0.5));
    st_tensor *w = K(st_mul(x[0], K(st_weak_scalar_f(1.25))));
    st_tensor *s = K(st_add(K(st_add(K(st_add(a, b)), K(st_mul(d, e)))), K(st_add(f, g))));
    s = K(st_add(s, K(st_mul(h, i))));
    s = K(st_add(s, w));
    return st_add(s, K(st_add(K(st_mul(x[0], x[0])), K(st_div(x[0], x[0])))));
}
/* pow with a tensor exponent that is also the base: x ** x */
static st_tensor *f_pow_self(st_tensor *const *x, const void *c) {
    (void)c;
    return st_pow(x[0], x[0]);
}

TEST(scalars_shared) {
    static const gc_case cs[] = {
        {"scalar_forms", f_scalars, NULL, 1, {IN2(2, 3, D_POS)}, NULL, NULL, 0, 0},
        {"pow_self", f_pow_self, NULL, 1, {IN1(5, D_POS)}, NULL, NULL, 0, 0},
    };
    gradcheck_all(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* maximum/minimum at ties: half the gradient to each side (as torch) */
TEST(max_min_ties) {
    st_tensor *a = leaf(ST_F64, 1, SH(3), V(1, 2, 3));
    st_tensor *b = leaf(ST_F64, 1, SH(3), V(1, 0, 3));
    CHECK(a && b);
    if (!a || !b) return;
    st_tensor *y = K(st_add(K(st_maximum(a, b)), K(st_mul_s(K(st_minimum(a, b)), 10))));
    CHECK(y && st_backward(K(st_sum(y, 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(a)), 1e-12, 5.5, 1, 5.5);
    EXPECT(K(st_grad(b)), 1e-12, 5.5, 10, 5.5);
    /* reductions: ties split the gradient evenly (torch.amax) */
    st_tensor *c = leaf(ST_F64, 2, SH(2, 3), V(1, 3, 3, 2, 2, 2));
    CHECK(c);
    if (!c) return;
    st_tensor *m = K(st_max(c, 1, (const int[]){1}, 0));
    CHECK(m && st_backward(m, MK(1, SH(2), 1, 6)) == ST_OK);
    EXPECT(K(st_grad(c)), 1e-12, 0, 0.5, 0.5, 2, 2, 2);
    st_tensor *d = leaf(ST_F64, 1, SH(4), V(-1, 4, -1, 0));
    CHECK(d);
    if (!d) return;
    st_tensor *mn = K(st_min(d, 0, NULL, 0));
    CHECK(mn && st_backward(mn, NULL) == ST_OK);
    EXPECT(K(st_grad(d)), 1e-12, 0.5, 0, 0.5, 0);
}

/* fmod/remainder gradients against the closed forms: d/da = 1, d/db = -trunc(a/b) / -floor(a/b) */
TEST(fmod_remainder_closed_form) {
    st_tensor *a = leaf(ST_F64, 1, SH(4), V(5.5, -5.5, 7.25, -7.25));
    st_tensor *b = leaf(ST_F64, 1, SH(4), V(2, 2, -3, -3));
    CHECK(a && b);
    if (!a || !b) return;
    CHECK(st_backward(K(st_sum(K(st_fmod(a, b)), 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(a)), 1e-12, 1, 1, 1, 1);
    EXPECT(K(st_grad(b)), 1e-12, -2, 2, 2, -2);
    CHECK(st_set_grad(a, NULL) == ST_OK && st_set_grad(b, NULL) == ST_OK);
    CHECK(st_backward(K(st_sum(K(st_remainder(a, b)), 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(a)), 1e-12, 1, 1, 1, 1);
    EXPECT(K(st_grad(b)), 1e-12, -2, 3, 3, -2);
}

/* ---- where, clamp ---- */

typedef struct { st_tensor *cond; } where_ctx;
static st_tensor *f_where(st_tensor *const *x, const void *c) {
    return st_where(((const where_ctx *)c)->cond, x[0], x[1]);
}
typedef struct { double lo, hi; } clamp_ctx;
static st_tensor *f_clamp(st_tensor *const *x, const void *c) {
    const clamp_ctx *k = c;
    return st_clamp(x[0], k->lo, k->hi);
}
static int ok_clamp(double *const *v, const gc_case *c) {
    const clamp_ctx *k = c->ctx;
    int64_t n = numel_of(c->in[0].nd, c->in[0].shape);
    for (int64_t i = 0; i < n; i++)
        if ((!isnan(k->lo) && fabs(v[0][i] - k->lo) < 1e-2) ||
            (!isnan(k->hi) && fabs(v[0][i] - k->hi) < 1e-2))
            return 0;
    return 1;
}

TEST(where_clamp) {
    st_tensor *cond = K(fu_make(ST_BOOL, 2, SH(2, 3), V(1, 0, 1, 0, 0, 1)));
    st_tensor *cond_b = K(fu_make(ST_BOOL, 2, SH(2, 1), V(0, 1)));
    CHECK(cond && cond_b);
    if (!cond || !cond_b) return;
    where_ctx w1 = {cond}, w2 = {cond_b};
    static const clamp_ctx cl1 = {-0.5, 0.5}, cl2 = {NAN, 0.3}, cl3 = {-0.2, NAN};
    const gc_case cs[] = {
        {"where", f_where, &w1, 2, {IN2(2, 3, D_NORMAL), IN2(2, 3, D_NORMAL)}, NULL, NULL, 0, 0},
        {"where_bcast_ab", f_where, &w1, 2, {IN1(3, D_NORMAL), IN0()}, NULL, NULL, 0, 0},
        {"where_bcast_cond", f_where, &w2, 2, {IN2(1, 3, D_NORMAL), IN3(2, 2, 3, D_NORMAL)}, NULL,
         NULL, 0, 0},
        {"clamp", f_clamp, &cl1, 1, {IN2(3, 4, D_NORMAL)}, ok_clamp, NULL, 0, 0},
        {"clamp_hi_only", f_clamp, &cl2, 1, {IN2(3, 4, D_NORMAL)}, ok_clamp, NULL, 0, 0},
        {"clamp_lo_only", f_clamp, &cl3, 1, {IN2(3, 4, D_NORMAL)}, ok_clamp, NULL, 0, 0},
    };
    gradcheck_all(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* ---- reductions ---- */

enum { R_SUM, R_MEAN, R_PROD, R_MAX, R_MIN, R_LSE, R_VAR, R_STD, R_COUNT };
static const char *red_names[R_COUNT] = {"sum", "mean", "prod", "max", "min", "logsumexp", "var",
                                         "std"};
typedef struct { int op, naxes, axes[3], keep, corr; } red_ctx;
static st_tensor *f_red(st_tensor *const *x, const void *c) {
    const red_ctx *r = c;
    switch (r->op) {
    case R_SUM: return st_sum(x[0], r->naxes, r->axes, r->keep);
    case R_MEAN: return st_mean(x[0], r->naxes, r->axes, r->keep);
    case R_PROD: return st_prod(x[0], r->naxes, r->axes, r->keep);
    case R_MAX: return st_max(x[0], r->naxes, r->axes, r->keep);
    case R_MIN: return st_min(x[0], r->naxes, r->axes, r->keep);
    case R_LSE: return st_logsumexp(x[0], r->naxes, r->axes, r->keep);
    case R_VAR: return st_var(x[0], r->naxes, r->axes, r->corr, r->keep);
    default: return st_std(x[0], r->naxes, r->axes, r->corr, r->keep);
    }
}

TEST(reductions) {
    static const struct { int naxes, axes[3]; } AX[] = {
        {1, {1}}, {1, {-1}}, {2, {0, 2}}, {0, {0}}, {3, {0, 1, 2}},
    };
    for (int op = 0; op < R_COUNT; op++)
        for (int a = 0; a < (int)(sizeof AX / sizeof AX[0]); a++)
            for (int keep = 0; keep < 2; keep++)
                for (int corr = 0; corr < ((op == R_VAR || op == R_STD) ? 2 : 1); corr++) {
                    red_ctx r = {op, AX[a].naxes, {AX[a].axes[0], AX[a].axes[1], AX[a].axes[2]},
                                 keep, corr};
                    char nm[128];
                    snprintf(nm, sizeof nm, "%s axes=%d:{%d,%d,%d} keepdim=%d correction=%d",
                             red_names[op], r.naxes, r.axes[0], r.axes[1], r.axes[2], keep, corr);
                    int dom = op == R_PROD ? D_AWAY : (op == R_MAX || op == R_MIN) ? D_DISTINCT
                                                                                   : D_NORMAL;
                    gc_case c = {nm, f_red, &r, 1, {IN3(2, 3, 4, dom)}, NULL, NULL, 0, 0};
                    gradcheck(&c);
                }
    /* a 1-D and a 0-d input */
    static const red_ctx all_sum = {R_SUM, 0, {0}, 0, 0}, all_max = {R_MAX, 0, {0}, 0, 0};
    static const gc_case cs[] = {
        {"sum_0d", f_red, &all_sum, 1, {IN0()}, NULL, NULL, 0, 0},
        {"max_1d", f_red, &all_max, 1, {IN1(7, D_DISTINCT)}, NULL, NULL, 0, 0},
    };
    gradcheck_all(cs, (int)(sizeof cs / sizeof cs[0]));
}

typedef struct { int dim, log; } sm_ctx;
static st_tensor *f_softmax(st_tensor *const *x, const void *c) {
    const sm_ctx *s = c;
    return s->log ? st_log_softmax(x[0], s->dim) : st_softmax(x[0], s->dim);
}

TEST(softmax) {
    static const sm_ctx s0 = {0, 0}, s1 = {1, 0}, sm1 = {-1, 0}, l0 = {0, 1}, l1 = {1, 1},
                        lm1 = {-1, 1};
    static const gc_case cs[] = {
        {"softmax dim0", f_softmax, &s0, 1, {IN2(3, 4, D_NORMAL)}, NULL, NULL, 0, 0},
        {"softmax dim1 3d", f_softmax, &s1, 1, {IN3(2, 3, 4, D_NORMAL)}, NULL, NULL, 0, 0},
        {"softmax dim-1", f_softmax, &sm1, 1, {IN2(3, 4, D_NORMAL)}, NULL, NULL, 0, 0},
        {"log_softmax dim0", f_softmax, &l0, 1, {IN2(3, 4, D_NORMAL)}, NULL, NULL, 0, 0},
        {"log_softmax dim1 3d", f_softmax, &l1, 1, {IN3(2, 3, 4, D_NORMAL)}, NULL, NULL, 0, 0},
        {"log_softmax dim-1", f_softmax, &lm1, 1, {IN2(3, 4, D_NORMAL)}, NULL, NULL, 0, 0},
    };
    gradcheck_all(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* ---- matmul ---- */

static st_tensor *f_matmul(st_tensor *const *x, const void *c) {
    (void)c;
    return st_matmul(x[0], x[1]);
}
/* matmul of a transposed view (strided operand) */
static st_tensor *f_matmul_t(st_tensor *const *x, const void *c) {
    (void)c;
    return st_matmul(K(st_transpose(x[0], 0, 1)), x[1]);
}

TEST(matmul) {
    static const gc_case cs[] = {
        {"dot 1d.1d", f_matmul, NULL, 2, {IN1(4, D_NORMAL), IN1(4, D_NORMAL)}, NULL, NULL, 0, 0},
        {"2d", f_matmul, NULL, 2, {IN2(3, 4, D_NORMAL), IN2(4, 2, D_NORMAL)}, NULL, NULL, 0, 0},
        {"batched", f_matmul, NULL, 2, {IN3(2, 3, 4, D_NORMAL), IN3(2, 4, 5, D_NORMAL)}, NULL,
         NULL, 0, 0},
        {"broadcast batch", f_matmul, NULL, 2,
         {IN4(2, 1, 3, 4, D_NORMAL), IN3(3, 4, 2, D_NORMAL)}, NULL, NULL, 0, 0},
        {"broadcast batch 2", f_matmul, NULL, 2, {IN2(3, 4, D_NORMAL), IN3(2, 4, 2, D_NORMAL)},
         NULL, NULL, 0, 0},
        {"matrix.vector", f_matmul, NULL, 2, {IN2(3, 4, D_NORMAL), IN1(4, D_NORMAL)}, NULL, NULL,
         0, 0},
        {"vector.matrix", f_matmul, NULL, 2, {IN1(4, D_NORMAL), IN2(4, 3, D_NORMAL)}, NULL, NULL,
         0, 0},
        {"batched.vector", f_matmul, NULL, 2, {IN3(2, 3, 4, D_NORMAL), IN1(4, D_NORMAL)}, NULL,
         NULL, 0, 0},
        {"transposed a", f_matmul_t, NULL, 2, {IN2(4, 3, D_NORMAL), IN2(4, 2, D_NORMAL)}, NULL,
         NULL, 0, 0},
    };
    gradcheck_all(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* ---- gather, index_select, scatter_add, index_add ---- */

typedef struct { int dim; st_tensor *index; } idx_ctx;
static st_tensor *f_gather(st_tensor *const *x, const void *c) {
    const idx_ctx *k = c;
    return st_gather(x[0], k->dim, k->index);
}
static st_tensor *f_index_select(st_tensor *const *x, const void *c) {
    const idx_ctx *k = c;
    return st_index_select(x[0], k->dim, k->index);
}
static st_tensor *f_scatter_add(st_tensor *const *x, const void *c) {
    const idx_ctx *k = c;
    return st_scatter_add(x[0], k->dim, k->index, x[1]);
}
static st_tensor *f_index_add(st_tensor *const *x, const void *c) {
    const idx_ctx *k = c;
    return st_index_add(x[0], k->dim, k->index, x[1]);
}

TEST(indexing) {
    /* repeated indices: gradients of a gathered element used twice must add up */
    st_tensor *gi1 = mki64(2, SH(3, 2), V(0, 3, 3, 3, 1, 0));
    st_tensor *gi0 = mki64(2, SH(2, 4), V(2, 0, 1, 2, 2, 2, 0, 1));
    st_tensor *si = mki64(1, SH(3), V(2, 0, 2));
    st_tensor *sa0 = mki64(2, SH(2, 4), V(0, 2, 1, 0, 0, 0, 2, 1));
    st_tensor *sa1 = mki64(2, SH(3, 2), V(1, 1, 3, 0, 2, 2));
    st_tensor *ia = mki64(1, SH(3), V(1, 3, 1));
    CHECK(gi1 && gi0 && si && sa0 && sa1 && ia);
    if (test_cur_failed) return;
    idx_ctx g1 = {1, gi1}, g0 = {0, gi0}, s0 = {0, si}, s1 = {1, si}, c0 = {0, sa0}, c1 = {1, sa1},
            a0 = {0, ia}, a1 = {-1, ia};
    const gc_case cs[] = {
        {"gather dim1", f_gather, &g1, 1, {IN2(3, 4, D_NORMAL)}, NULL, NULL, 0, 0},
        {"gather dim0", f_gather, &g0, 1, {IN2(3, 4, D_NORMAL)}, NULL, NULL, 0, 0},
        {"index_select dim0", f_index_select, &s0, 1, {IN2(4, 3, D_NORMAL)}, NULL, NULL, 0, 0},
        {"index_select dim1", f_index_select, &s1, 1, {IN3(2, 3, 2, D_NORMAL)}, NULL, NULL, 0, 0},
        {"scatter_add dim0", f_scatter_add, &c0, 2, {IN2(3, 4, D_NORMAL), IN2(2, 4, D_NORMAL)},
         NULL, NULL, 0, 0},
        {"scatter_add dim1", f_scatter_add, &c1, 2, {IN2(3, 4, D_NORMAL), IN2(3, 2, D_NORMAL)},
         NULL, NULL, 0, 0},
        {"index_add dim0", f_index_add, &a0, 2, {IN2(4, 3, D_NORMAL), IN2(3, 3, D_NORMAL)}, NULL,
         NULL, 0, 0},
        {"index_add dim-1", f_index_add, &a1, 2, {IN2(2, 4, D_NORMAL), IN2(2, 3, D_NORMAL)}, NULL,
         NULL, 0, 0},
    };
    gradcheck_all(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* ---- cat, stack ---- */

typedef struct { int n, dim; } join_ctx;
static st_tensor *f_cat(st_tensor *const *x, const void *c) {
    const join_ctx *j = c;
    return st_cat(j->n, x, j->dim);
}
static st_tensor *f_stack(st_tensor *const *x, const void *c) {
    const join_ctx *j = c;
    return st_stack(j->n, x, j->dim);
}

TEST(cat_stack) {
    static const join_ctx c3_1 = {3, 1}, c2_0 = {2, 0}, s2_1 = {2, 1}, s3_0 = {3, 0},
                          s2_m1 = {2, -1};
    static const gc_case cs[] = {
        {"cat dim1", f_cat, &c3_1, 3, {IN2(2, 1, D_NORMAL), IN2(2, 3, D_NORMAL), IN2(2, 2, D_NORMAL)},
         NULL, NULL, 0, 0},
        {"cat dim0", f_cat, &c2_0, 2, {IN2(1, 3, D_NORMAL), IN2(2, 3, D_NORMAL)}, NULL, NULL, 0, 0},
        {"stack dim1", f_stack, &s2_1, 2, {IN2(2, 3, D_NORMAL), IN2(2, 3, D_NORMAL)}, NULL, NULL, 0,
         0},
        {"stack dim0", f_stack, &s3_0, 3, {IN1(3, D_NORMAL), IN1(3, D_NORMAL), IN1(3, D_NORMAL)},
         NULL, NULL, 0, 0},
        {"stack dim-1", f_stack, &s2_m1, 2, {IN2(2, 2, D_NORMAL), IN2(2, 2, D_NORMAL)}, NULL, NULL,
         0, 0},
    };
    gradcheck_all(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* ---- views ---- */

enum {
    VW_RESHAPE, VW_RESHAPE_T, VW_VIEW, VW_PERMUTE, VW_TRANSPOSE, VW_EXPAND, VW_EXPAND_NEW,
    VW_BCAST, VW_SLICE_STEP, VW_SLICE_NEG, VW_SELECT, VW_SELECT_NEG, VW_SQUEEZE, VW_SQUEEZE_ALL,
    VW_UNSQUEEZE, VW_FLATTEN, VW_CONTIGUOUS, VW_CLONE, VW_CHAIN, VW_COUNT
};
static const char *vw_names[VW_COUNT] = {
    "reshape", "reshape of transposed (copy)", "view", "permute", "transpose", "expand",
    "expand new dims", "broadcast_to", "slice step 2", "slice negative start", "select",
    "select negative", "squeeze dim", "squeeze all", "unsqueeze", "flatten", "contiguous", "clone",
    "chain of views"};
typedef struct { int kind; } vw_ctx;
static st_tensor *f_view(st_tensor *const *x, const void *c) {
    st_tensor *a = x[0]; /* (2, 3, 4) unless noted */
    switch (((const vw_ctx *)c)->kind) {
    case VW_RESHAPE: return st_reshape(a, 2, SH(4, -1));
    case VW_RESHAPE_T: return st_reshape(K(st_transpose(a, 0, 2)), 2, SH(6, 4));
    case VW_VIEW: return st_view(a, 3, SH(3, 2, 4));
    case VW_PERMUTE: return st_permute(a, (const int[]){2, 0, 1});
    case VW_TRANSPOSE: return st_transpose(a, -1, 0);
    case VW_EXPAND: return st_expand(K(st_slice(a, 1, 0, 1, 1)), 3, SH(-1, 5, 4));
    case VW_EXPAND_NEW: return st_expand(a, 4, SH(3, 2, 3, 4));
    case VW_BCAST: return st_broadcast_to(K(st_slice(a, 2, 1, 2, 1)), 4, SH(2, 2, 3, 3));
    case VW_SLICE_STEP: return st_slice(a, 2, 0, 4, 2);
    case VW_SLICE_NEG: return st_slice(a, 1, -2, 3, 1);
    case VW_SELECT: return st_select(a, 1, 1);
    case VW_SELECT_NEG: return st_select(a, 2, -1);
    case VW_SQUEEZE: return st_squeeze(K(st_slice(a, 1, 2, 3, 1)), 1);
    case VW_SQUEEZE_ALL: return st_squeeze(K(st_slice(a, 0, 1, 2, 1)), ST_ALL_DIMS);
    case VW_UNSQUEEZE: return st_unsqueeze(a, -1);
    case VW_FLATTEN: return st_flatten(a, 1, 2);
    case VW_CONTIGUOUS: return st_contiguous(K(st_permute(a, (const int[]){1, 2, 0})));
    case VW_CLONE: return st_clone(a);
    default: { /* permute, slice with a step, select, unsqueeze, expand, reshape */
        st_tensor *t = K(st_permute(a, (const int[]){2, 0, 1}));   /* (4, 2, 3) */
        t = K(st_slice(t, 0, 1, 4, 2));                             /* (2, 2, 3) */
        t = K(st_select(t, 1, -1));                                 /* (2, 3) */
        t = K(st_unsqueeze(t, 0));                                  /* (1, 2, 3) */
        t = K(st_expand(t, 3, SH(2, 2, 3)));                        /* (2, 2, 3) */
        st_tensor *u = K(st_transpose(K(st_reshape(t, 2, SH(4, 3))), 0, 1)); /* (3, 4) */
        return st_mul(K(st_reshape(t, 2, SH(3, 4))), K(st_sin(u)));
    }
    }
}

TEST(views) {
    for (int k = 0; k < VW_COUNT; k++) {
        vw_ctx v = {k};
        gc_case c = {vw_names[k], f_view, &v, 1, {IN3(2, 3, 4, D_NORMAL)}, NULL, NULL, 0, 0};
        gradcheck(&c);
    }
}

/* ---- in-place ops on non-leaf tensors ---- */

/* y = x * 1; u = y * y (y's old value); y += z; y[0::2] *= 2; y[-2] = w; returns y + u */
static st_tensor *f_inplace1(st_tensor *const *x, const void *c) {
    (void)c;
    st_tensor *y = K(st_mul_s(x[0], 1.0));                          /* (4, 3) */
    st_tensor *u = K(st_mul(y, y));
    if (!y || !u || st_add_(y, x[1]) != ST_OK) return NULL;         /* z: (3), broadcast */
    st_tensor *s = K(st_slice(y, 0, 0, 4, 2));
    if (!s || st_mul_(s, K(st_scalar(2, ST_F64))) != ST_OK) return NULL;
    st_tensor *r = K(st_slice(y, 0, -2, -1, 1));                    /* row 2: overwritten */
    if (!r || st_copy_(r, x[2]) != ST_OK) return NULL;               /* w: (1, 3) */
    return st_add(y, u);
}
/* y = exp(x); v = y^T (a view made before the writes); y -= z; y /= w; y *= y; returns v */
static st_tensor *f_inplace2(st_tensor *const *x, const void *c) {
    (void)c;
    st_tensor *y = K(st_exp(x[0]));                                  /* (2, 3) */
    st_tensor *v = K(st_transpose(y, 0, 1));
    if (!y || !v || st_sub_(y, x[1]) != ST_OK || st_div_(y, x[2]) != ST_OK) return NULL;
    if (st_mul_(y, y) != ST_OK) return NULL;
    return st_retain(v);
}
/* an in-place write through a view into a column, then a reduction of the base */
static st_tensor *f_inplace3(st_tensor *const *x, const void *c) {
    (void)c;
    st_tensor *y = K(st_tanh(x[0]));                                 /* (3, 4) */
    st_tensor *col = K(st_select(y, 1, 2));                          /* (3) */
    if (!col || st_add_(col, K(st_sin(x[1]))) != ST_OK) return NULL;  /* (3) */
    st_tensor *t = K(st_transpose(y, 0, 1));
    if (!t || st_copy_(K(st_slice(t, 0, 0, 1, 1)), x[1]) != ST_OK) return NULL; /* y[:, 0] = x1 */
    return st_sum(K(st_mul(y, y)), 1, (const int[]){1}, 0);
}

/* y = clone(x); y *= z; y[1] += x[0]; returns y (torch's usual copy-then-modify) */
static st_tensor *f_inplace_clone(st_tensor *const *x, const void *c) {
    (void)c;
    st_tensor *y = K(st_clone(x[0]));                                /* (3, 2) */
    if (!y || st_mul_(y, x[1]) != ST_OK) return NULL;                  /* z: (2) */
    st_tensor *r = K(st_select(y, 0, 1));
    if (!r || st_add_(r, K(st_select(x[0], 0, 0))) != ST_OK) return NULL;
    return st_retain(y);
}

TEST(inplace_nonleaf) {
    static const gc_case cs[] = {
        {"add_/mul_ slice/copy_ slice", f_inplace1, NULL, 3,
         {IN2(4, 3, D_NORMAL), IN1(3, D_NORMAL), IN2(1, 3, D_NORMAL)}, NULL, NULL, 0, 0},
        {"sub_/div_/mul_ self, view before", f_inplace2, NULL, 3,
         {IN2(2, 3, D_NORMAL), IN2(2, 3, D_NORMAL), IN1(3, D_POS)}, NULL, NULL, 0, 0},
        {"add_ into select, copy_ into transposed slice", f_inplace3, NULL, 2,
         {IN2(3, 4, D_NORMAL), IN1(3, D_NORMAL)}, NULL, NULL, 0, 0},
        {"mul_/add_ on a clone", f_inplace_clone, NULL, 2, {IN2(3, 2, D_NORMAL), IN1(2, D_NORMAL)},
         NULL, NULL, 0, 0},
    };
    gradcheck_all(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* ---- semantics ---- */

TEST(accumulate_and_clear) {
    st_tensor *x = leaf(ST_F64, 1, SH(3), V(1, 2, 3));
    CHECK(x);
    if (!x) return;
    CHECK(st_requires_grad(x) && st_is_leaf(x));
    st_clear_error();
    CHECK(K(st_grad(x)) == NULL && st_last_status() == ST_OK); /* none yet */
    CHECK(st_backward(K(st_sum(K(st_mul(x, x)), 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-12, 2, 4, 6);
    CHECK(st_backward(K(st_sum(K(st_mul(x, x)), 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-12, 4, 8, 12);
    CHECK(st_set_grad(x, NULL) == ST_OK);
    st_clear_error();
    CHECK(K(st_grad(x)) == NULL && st_last_status() == ST_OK);
    CHECK(st_backward(K(st_sum(K(st_mul_s(x, 3)), 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-12, 3, 3, 3);
    /* set_grad replaces; the next backward accumulates onto it */
    CHECK(st_set_grad(x, MK(1, SH(3), 10, 20, 30)) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-12, 10, 20, 30);
    CHECK(st_backward(K(st_sum(x, 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-12, 11, 21, 31);
    /* explicit gradient argument: d(3x)/dx * G */
    CHECK(st_set_grad(x, NULL) == ST_OK);
    CHECK(st_backward(K(st_mul_s(x, 3)), MK(1, SH(3), 1, -1, 0.5)) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-12, 3, -3, 1.5);
    /* a one-element non-0-d output takes the implicit gradient too */
    CHECK(st_set_grad(x, NULL) == ST_OK);
    CHECK(st_backward(K(st_sum(x, 1, (const int[]){0}, 1)), NULL) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-12, 1, 1, 1);
    /* set_grad of the wrong shape is refused */
    CHECK(st_set_grad(x, MK(1, SH(2), 1, 2)) != ST_OK);
    st_clear_error();
}

TEST(errors) {
    st_tensor *x = leaf(ST_F64, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6));
    CHECK(x);
    if (!x) return;
    st_tensor *y = K(st_mul_s(x, 2));
    st_status s = st_backward(y, NULL);
    CHECK_EQ_INT(s, ST_ERR_SHAPE);
    CHECK_MSG(strstr(st_last_error(), "(2, 3)") != NULL,
              "backward on non-scalar: message \"%s\" should name the shape (2, 3)",
              st_last_error());
    st_clear_error();
    s = st_backward(y, MK(2, SH(3, 2), 1, 1, 1, 1, 1, 1));
    CHECK(s != ST_OK);
    CHECK_MSG(strstr(st_last_error(), "(2, 3)") && strstr(st_last_error(), "(3, 2)"),
              "backward with a (3, 2) grad for (2, 3): message \"%s\" should name both shapes",
              st_last_error());
    st_clear_error();
    /* the failures left no gradient behind */
    CHECK(K(st_grad(x)) == NULL && st_last_status() == ST_OK);
    /* the runtime is usable afterwards */
    CHECK(st_backward(K(st_sum(y, 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-12, 2, 2, 2, 2, 2, 2);

    st_tensor *i = K(fu_make(ST_I64, 1, SH(3), V(1, 2, 3)));
    CHECK(i && st_set_requires_grad(i, 1) == ST_ERR_DTYPE);
    CHECK(!st_requires_grad(i));
    st_clear_error();
    st_tensor *b = K(fu_make(ST_BOOL, 1, SH(2), V(1, 0)));
    CHECK(b && st_set_requires_grad(b, 1) == ST_ERR_DTYPE);
    st_clear_error();
    /* a non-leaf cannot be switched */
    CHECK(st_set_requires_grad(y, 0) != ST_OK);
    CHECK(st_requires_grad(y));
    st_clear_error();
    /* (st_set_requires_grad(y, 1) on a non-leaf that requires grad is a no-op, as in torch) */
    /* backward on a tensor that does not require grad is refused */
    st_tensor *c = MK(0, NULL, 1);
    CHECK(st_backward(c, NULL) != ST_OK);
    st_clear_error();
}

TEST(inplace_leaf) {
    st_tensor *x = leaf(ST_F64, 1, SH(3), V(1, 2, 3));
    CHECK(x);
    if (!x) return;
    st_tensor *one = MK(1, SH(3), 1, 1, 1);
    /* recorded before the update: must use x's old value (1, 2, 3) */
    CHECK(st_backward(K(st_sum(K(st_mul(x, x)), 0, NULL, 0)), NULL) == ST_OK);
    CHECK(st_add_(x, one) != ST_OK);
    st_clear_error();
    CHECK(st_mul_(K(st_slice(x, 0, 0, 1, 1)), one) != ST_OK);
    st_clear_error();
    CHECK(st_copy_(x, one) != ST_OK);
    st_clear_error();
    CHECK(st_fill_(x, 0) != ST_OK);
    st_clear_error();
    EXPECT(x, 0, 1, 2, 3); /* the refused writes changed nothing */
    st_grad_mode_push(0);
    CHECK(st_add_(x, one) == ST_OK); /* optimizer style: x = (2, 3, 4) */
    CHECK(st_mul_(K(st_slice(x, 0, 2, 3, 1)), MK(0, NULL, 2)) == ST_OK); /* x = (2, 3, 8) */
    st_grad_mode_pop();
    CHECK(st_requires_grad(x) && st_is_leaf(x));
    CHECK(st_backward(K(st_sum(K(st_mul(x, x)), 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(x, 0, 2, 3, 8);
    EXPECT(K(st_grad(x)), 1e-12, 2 + 4, 4 + 6, 6 + 16);
    /* the gradient can be updated in place with grad mode off (zero_grad style) */
    st_tensor *g = K(st_grad(x));
    st_grad_mode_push(0);
    CHECK(g && st_zero_(g) == ST_OK);
    st_grad_mode_pop();
    CHECK(st_backward(K(st_sum(x, 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-12, 1, 1, 1);
}

TEST(detach_and_grad_mode) {
    st_tensor *x = leaf(ST_F64, 1, SH(3), V(1, 2, 3));
    CHECK(x);
    if (!x) return;
    st_tensor *d = K(st_detach(x));
    CHECK(d && !st_requires_grad(d) && st_is_leaf(d));
    /* d(x * detach(x))/dx = detach(x) */
    CHECK(st_backward(K(st_sum(K(st_mul(x, d)), 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-12, 1, 2, 3);
    /* a detached non-leaf: no gradient flows through it */
    st_tensor *e = K(st_detach(K(st_exp(x))));
    CHECK(e && !st_requires_grad(e) && st_is_leaf(e));
    CHECK(st_set_grad(x, NULL) == ST_OK);
    CHECK(st_backward(K(st_sum(K(st_add(K(st_mul(e, x)), e)), 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-9, exp(1), exp(2), exp(3));
    /* a new storage: writes to the detached copy are not seen by x, and are allowed */
    CHECK(st_add_(d, MK(0, NULL, 10)) == ST_OK);
    EXPECT(d, 0, 11, 12, 13);
    EXPECT(x, 0, 1, 2, 3);

    CHECK(st_grad_enabled());
    st_grad_mode_push(0);
    CHECK(!st_grad_enabled());
    st_tensor *y = K(st_mul_s(x, 2));
    CHECK(y && !st_requires_grad(y) && st_is_leaf(y));
    st_grad_mode_push(1);
    CHECK(st_grad_enabled());
    st_tensor *y2 = K(st_mul_s(x, 2));
    CHECK(y2 && st_requires_grad(y2) && !st_is_leaf(y2));
    st_grad_mode_pop();
    CHECK(!st_grad_enabled());
    st_grad_mode_pop();
    CHECK(st_grad_enabled());
    /* is_leaf / requires_grad of plain tensors */
    st_tensor *p = MK(1, SH(2), 1, 2);
    CHECK(st_is_leaf(p) && !st_requires_grad(p));
    st_tensor *q = K(st_exp(p));
    CHECK(q && st_is_leaf(q) && !st_requires_grad(q));
    /* clone() of a leaf is a new tensor computed from it: not a leaf, its flag cannot be switched
     * off, and trying leaves the original alone */
    st_tensor *cl = K(st_clone(x));
    CHECK(cl && st_requires_grad(cl) && !st_is_leaf(cl));
    CHECK(cl && st_set_requires_grad(cl, 0) != ST_OK);
    st_clear_error();
    CHECK(st_requires_grad(x) && st_is_leaf(x));
    /* views of a leaf share its storage: they require grad */
    st_tensor *sl = K(st_slice(x, 0, 1, 3, 1));
    CHECK(sl && st_requires_grad(sl));
    /* requires_grad can be switched off on a leaf */
    st_tensor *z = leaf(ST_F64, 1, SH(2), V(1, 2));
    CHECK(z && st_set_requires_grad(z, 0) == ST_OK && !st_requires_grad(z));
    st_tensor *zz = K(st_mul(z, z));
    CHECK(zz && !st_requires_grad(zz));
}

TEST(grad_of_view) {
    double xv[12];
    for (int i = 0; i < 12; i++) xv[i] = i * 0.5 - 2;
    st_tensor *x = leaf(ST_F64, 2, SH(4, 3), xv);
    CHECK(x);
    if (!x) return;
    CHECK(st_backward(K(st_sum(K(st_mul(x, x)), 0, NULL, 0)), NULL) == ST_OK);
    st_tensor *s = K(st_slice(x, 0, 1, 3, 1));
    st_tensor *gs = K(st_grad(s));
    CHECK(gs && same_shape(gs, 2, SH(2, 3)));
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = 2 * xv[3 + i];
    EXPECT_A(gs, 6, want, 1e-12);
    st_tensor *t = K(st_transpose(x, 0, 1));
    st_tensor *gt = K(st_grad(t));
    CHECK(gt && same_shape(gt, 2, SH(3, 4)));
    EXPECT(K(st_select(gt, 0, 1)), 1e-12, 2 * xv[1], 2 * xv[4], 2 * xv[7], 2 * xv[10]);
}

/* f32 and f16 leaves get gradients of their own dtype, close to the f64 ones */
TEST(low_precision_grads) {
    static const double xv[6] = {0.5, -1.25, 2, 0.75, -0.5, 1.5}, rv[6] = {1, -2, 0.5, 3, -1, 2};
    static const st_dtype dts[3] = {ST_F64, ST_F32, ST_F16};
    double ref[6] = {0};
    for (int k = 0; k < 3; k++) {
        st_dtype dt = dts[k];
        st_tensor *x = leaf(dt, 2, SH(2, 3), xv);
        st_tensor *w = leaf(dt, 1, SH(3), V(0.5, -0.25, 1));
        st_tensor *R = K(fu_make(dt, 2, SH(2, 3), rv));
        CHECK(x && w && R);
        if (test_cur_failed) return;
        st_tensor *y = K(st_mul(K(st_tanh(K(st_mul(x, w)))), R));
        CHECK(y && st_dtype_of(y) == dt);
        CHECK(st_backward(K(st_sum(y, 0, NULL, 0)), NULL) == ST_OK);
        st_tensor *g = K(st_grad(x)), *gw = K(st_grad(w));
        CHECK(g && gw && st_dtype_of(g) == dt && st_dtype_of(gw) == dt);
        CHECK(g && same_shape(g, 2, SH(2, 3)) && gw && same_shape(gw, 1, SH(3)));
        if (test_cur_failed) return;
        int64_t n;
        double *gv = fu_read(g, &n);
        CHECK(gv);
        if (!gv) return;
        if (k == 0) {
            for (int i = 0; i < 6; i++) {
                double wv = ((const double[]){0.5, -0.25, 1})[i % 3], t = tanh(xv[i] * wv);
                ref[i] = rv[i] * (1 - t * t) * wv; /* closed form */
                CHECK_NEAR(gv[i], ref[i], 1e-12);
            }
        } else {
            double tol = dt == ST_F32 ? 1e-5 : 1e-2;
            for (int i = 0; i < 6; i++) CHECK_NEAR(gv[i], ref[i], tol);
        }
        free(gv);
    }
}

/* ---- laziness ---- */

typedef struct { st_tensor *target; } mlp_ctx;
/* x @ W1 + b1 -> relu -> @ W2 + b2 -> log_softmax -> nll (gather of the targets) -> mean */
static st_tensor *f_mlp(st_tensor *const *p, const void *c) {
    const mlp_ctx *m = c;
    st_tensor *h = K(st_relu(K(st_add(K(st_matmul(p[0], p[1])), p[2]))));
    st_tensor *o = K(st_add(K(st_matmul(h, p[3])), p[4]));
    st_tensor *lp = K(st_log_softmax(o, -1));
    st_tensor *nll = K(st_neg(K(st_gather(lp, 1, m->target))));
    return st_mean(nll, 0, NULL, 0);
}

TEST(lazy_backward_mlp) {
    st_tensor *target = mki64(2, SH(4, 1), V(2, 0, 1, 2));
    CHECK(target);
    if (!target) return;
    mlp_ctx m = {target};
    static const gc_in ins[5] = {IN2(4, 6, D_NORMAL), IN2(6, 5, D_NORMAL), IN1(5, D_NORMAL),
                                 IN2(5, 3, D_NORMAL), IN1(3, D_NORMAL)};
    st_tensor *p[5];
    for (int i = 0; i < 5; i++) {
        double v[30];
        draw(v, numel_of(ins[i].nd, ins[i].shape), D_NORMAL);
        p[i] = leaf(ST_F64, ins[i].nd, ins[i].shape, v);
        CHECK(p[i]);
        if (!p[i]) return;
    }
    st_stats_t s0, s1, s2;
    st_tensor *loss = K(f_mlp(p, &m));
    CHECK(loss);
    if (!loss) return;
    const int lazy = !st_get_eager(); /* ST_EAGER=1 runs every op at once: nothing to count */
    st_stats(&s0);
    CHECK(st_backward(loss, NULL) == ST_OK);
    st_stats(&s1);
    if (lazy) CHECK_EQ_INT(s1.flushes, s0.flushes);     /* backward records only */
    CHECK(s1.nodes_recorded > s0.nodes_recorded);
    st_tensor *all[6];
    for (int i = 0; i < 5; i++) {
        all[i] = K(st_grad(p[i]));
        CHECK(all[i] && (!lazy || !st_is_realized(all[i])));
    }
    all[5] = loss;
    if (test_cur_failed) return;
    CHECK(st_realize(6, all) == ST_OK);
    st_stats(&s2);
    if (lazy) CHECK_EQ_INT(s2.flushes - s1.flushes, 1);
    for (int i = 0; i < 6; i++) CHECK(st_is_realized(all[i]));
    /* and the gradients are right */
    gc_case c = {"mlp", f_mlp, &m, 5, {{0}}, NULL, NULL, 0, 0};
    for (int i = 0; i < 5; i++) c.in[i] = ins[i];
    gradcheck(&c);
}

/* The forward is realized (its value read) before backward: the saved inputs survive. */
TEST(realized_forward) {
    st_tensor *x = leaf(ST_F64, 1, SH(3), V(0.5, -1, 2));
    CHECK(x);
    if (!x) return;
    st_tensor *y = K(st_tanh(x));
    CHECK(y && st_realize(1, &y) == ST_OK);
    st_tensor *l = K(st_sum(K(st_mul(y, y)), 0, NULL, 0));
    double lv = 0;
    CHECK(l && st_item(l, &lv) == ST_OK);
    CHECK(st_backward(l, NULL) == ST_OK);
    double want[3];
    for (int i = 0; i < 3; i++) {
        double xi = ((const double[]){0.5, -1, 2})[i], t = tanh(xi);
        want[i] = 2 * t * (1 - t * t);
    }
    EXPECT_A(K(st_grad(x)), 3, want, 1e-12);
}

/* A training loop on sum((x - t)^2): backward, a no-grad SGD update, set_grad(NULL) as
 * zero_grad. Closed form: x_k = t + (x_0 - t) * 0.8^k. Memory stays flat from step to step. */
TEST(training_loop) {
    st_tensor *x = leaf(ST_F64, 1, SH(3), V(1, -2, 3));
    st_tensor *t = MK(1, SH(3), 0.5, 0.5, -1);
    CHECK(x && t);
    if (!x || !t) return;
    uint64_t bytes_at_5 = 0;
    for (int k = 0; k < 20; k++) {
        int mark = npool_;
        st_tensor *d = K(st_sub(x, t));
        CHECK(st_backward(K(st_sum(K(st_mul(d, d)), 0, NULL, 0)), NULL) == ST_OK);
        st_tensor *g = K(st_grad(x));
        CHECK(g);
        if (!g) return;
        st_grad_mode_push(0);
        CHECK(st_sub_(x, K(st_mul_s(g, 0.1))) == ST_OK);
        st_grad_mode_pop();
        CHECK(st_set_grad(x, NULL) == ST_OK);
        pool_to(mark);
        CHECK(st_sync() == ST_OK);
        st_stats_t s;
        st_stats(&s);
        if (k == 5) bytes_at_5 = s.bytes_in_use;
        if (k == 19) CHECK_MSG(s.bytes_in_use <= bytes_at_5, "bytes in use grew from %llu (step 5) to %llu (step 19)",
                               (unsigned long long)bytes_at_5, (unsigned long long)s.bytes_in_use);
    }
    double f = pow(0.8, 20);
    EXPECT(x, 1e-12, 0.5 + 0.5 * f, 0.5 - 2.5 * f, -1 + 4 * f);
    CHECK(st_requires_grad(x) && st_is_leaf(x));
}

/* ---- deep chains ---- */

TEST(deep_chain) {
    st_tensor *x = leaf(ST_F64, 1, SH(2), V(1, -2));
    CHECK(x);
    if (!x) return;
    st_tensor *y = st_retain(x);
    for (int i = 0; i < 10000 && y; i++) {
        st_tensor *n = st_mul_s(y, 1.0001);
        st_release(y);
        y = n;
    }
    CHECK(y);
    if (!y) return;
    K(y);
    double f = pow(1.0001, 10000);
    CHECK(st_backward(K(st_sum(y, 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(x)), 1e-9, f, f);
    EXPECT(y, 1e-9, f, -2 * f);
}

/* Records keep a long chain's nodes alive: past ST_TRACE_MAX pending nodes an automatic flush
 * may run, but not one per op. */
TEST(deep_chain_flushes) {
    if (st_get_eager()) return; /* every op flushes in eager mode */
    st_tensor *x = leaf(ST_F64, 1, SH(2), V(1, -2));
    CHECK(x);
    if (!x) return;
    st_stats_t s0, s1;
    st_stats(&s0);
    st_tensor *y = st_retain(x);
    for (int i = 0; i < 10000 && y; i++) {
        st_tensor *n = st_add_s(y, 0.5);
        st_release(y);
        y = n;
    }
    st_stats(&s1);
    CHECK(y);
    K(y);
    CHECK_MSG(s1.flushes - s0.flushes <= 10, "a 10,000-op chain with grad ran %llu flushes",
              (unsigned long long)(s1.flushes - s0.flushes));
    EXPECT(y, 1e-12, 5001, 4998);
}

/* detach() of a realized tensor shares its buffer (a second BUFFER node): an in-place write into the
 * detached tensor must copy, not write into the shared buffer (SETVIEW checks the buffer's refcount),
 * and a weak float scalar pending at a sync keeps its f64 value. */
TEST(shared_buffer_and_weak_sync) {
    st_set_jit_min(0); /* the in-place SETVIEW is a JIT kernel's decision */
    int64_t sh[1] = {4};
    double xd[4] = {1, 2, 3, 4}, out[4];
    st_tensor *x = st_from_data(ST_F64, 1, sh, xd);
    CHECK(st_realize(1, &x) == ST_OK);
    CHECK(st_set_requires_grad(x, 1) == ST_OK); /* detach of a leaf: a node sharing x's buffer */
    st_tensor *y = st_detach(x);
    CHECK(y && st_realize(1, &y) == ST_OK);
    st_tensor *y0 = st_slice(y, 0, 0, 1, 1);
    CHECK(y0 && st_fill_(y0, 9) == ST_OK);
    CHECK(st_to_host(x, ST_F64, out, sizeof out) == ST_OK);
    CHECK_MSG(out[0] == 1 && out[3] == 4, "x changed through its detached copy: %g %g", out[0], out[3]);
    CHECK(st_to_host(y, ST_F64, out, sizeof out) == ST_OK);
    CHECK_MSG(out[0] == 9 && out[1] == 2, "detached copy: %g %g", out[0], out[1]);
    CHECK(st_to_host(x, ST_F64, out, sizeof out) == ST_OK); /* after the write ran */
    CHECK_MSG(out[0] == 1, "the write into the detached copy reached x: %g", out[0]);
    st_tensor *c = st_weak_scalar_f(1.0001);
    CHECK(st_sync() == ST_OK);
    st_tensor *p = st_mul(x, c);
    double v = 0;
    st_tensor *p0 = st_select(p, 0, 0);
    CHECK(p0 && st_item(p0, &v) == ST_OK);
    CHECK_MSG(v == 1.0001, "weak scalar after a sync: %.17g", v);
    st_release(p0);
    st_release(p);
    st_release(c);
    st_release(y0);
    st_release(y);
    st_release(x);
    st_set_jit_min(32768);
}

/* ---- custom functions (st_function_apply) and retain_grad ---- */
typedef struct cube_ud {
    st_tensor *x;       /* saved input (detached) */
    int mode;           /* 0: 3 x^2 g; 1: fail; 2: wrong shape */
    int *freed;
} cube_ud;
static void cube_free(void *p) {
    cube_ud *u = p;
    (*u->freed)++;
    /* free_ud must not release tensors from inside a node release: the saved tensor is the
     * test's (pooled), so nothing is released here */
    free(u);
}
static st_status cube_backward(void *p, int nout, st_tensor *const *go, int nin, st_tensor **gi) {
    cube_ud *u = p;
    if (nout != 1 || nin != 2) return ST_ERR_INTERNAL;
    if (u->mode == 1) return st_backward(NULL, NULL); /* any failing call: its message is kept */
    if (u->mode == 2) {
        gi[0] = st_reshape(go[0], 2, SH(3, 1));
        return ST_OK;
    }
    st_tensor *x2 = st_mul(u->x, u->x), *t = x2 ? st_mul_s(x2, 3) : NULL;
    gi[0] = t && go[0] ? st_mul(t, go[0]) : NULL;
    st_release(x2);
    st_release(t);
    return gi[0] ? ST_OK : st_last_status();
}

TEST(function_apply) {
    int freed = 0;
    for (int mode = 0; mode < 3; mode++) {
        st_tensor *x = leaf(ST_F64, 1, SH(3), V(1, -2, 0.5));
        st_tensor *c = MK(1, SH(3), 7, 7, 7); /* a second input that needs no gradient */
        if (!x || !c) return;
        st_tensor *y0 = K(st_mul(x, K(st_mul(x, x))));
        cube_ud *u = malloc(sizeof *u);
        u->x = K(st_detach(x));
        u->mode = mode;
        u->freed = &freed;
        st_tensor *in[2] = {x, c}, *out[1] = {y0}, *res[1];
        CHECK(st_function_apply("Cube", 2, in, 1, out, res, cube_backward, u, cube_free) == ST_OK);
        st_tensor *y = K(res[0]);
        CHECK(y && st_requires_grad(y) && !st_is_leaf(y));
        st_tensor *l = K(st_sum(K(st_mul(y, MK(1, SH(3), 1, 10, 100))), 0, NULL, 0));
        st_status s = st_backward(l, NULL);
        if (mode == 0) {
            CHECK(s == ST_OK);
            EXPECT(K(st_grad(x)), 1e-12, 3, 120, 75);
            EXPECT(y, 1e-15, 1, -8, 0.125);
        } else if (mode == 1) {
            CHECK(s == ST_ERR_ARG && strstr(st_last_error(), "backward of the custom function Cube: backward: NULL tensor"));
            CHECK(K(st_grad(x)) == NULL);
        } else {
            CHECK(s == ST_ERR_SHAPE && strstr(st_last_error(), "custom function Cube: the gradient of input 0 has "
                                              "shape (3, 1); the input has shape (3)"));
        }
        st_clear_error();
    }
    pool_to(0);
    CHECK(freed == 3);
    /* no input requires grad: no record, ud freed at once, the output handed back */
    st_tensor *p = MK(1, SH(2), 1, 2);
    cube_ud *u = malloc(sizeof *u);
    u->freed = &freed;
    st_tensor *res[1];
    CHECK(st_function_apply(NULL, 1, &p, 1, &p, res, cube_backward, u, cube_free) == ST_OK);
    CHECK(res[0] == p && freed == 4);
    st_release(res[0]);
}

TEST(retain_grad) {
    st_tensor *x = leaf(ST_F64, 1, SH(2), V(1, 2));
    if (!x) return;
    st_tensor *y = K(st_mul_s(x, 3));
    CHECK(st_retain_grad(y) == ST_OK && st_retain_grad(x) == ST_OK);
    CHECK(st_backward(K(st_sum(K(st_mul(y, y)), 0, NULL, 0)), NULL) == ST_OK);
    EXPECT(K(st_grad(y)), 1e-12, 6, 12);    /* 2 y */
    EXPECT(K(st_grad(x)), 1e-12, 18, 36);   /* 6 y */
    CHECK(st_retain_grad(MK(0, NULL, 1)) == ST_ERR_ARG);
    st_clear_error();
}

/* autocast: matmul in bf16, sums in f32, gradients back in f32; the mode stack */
TEST(autocast) {
    CHECK(st_autocast_dtype() == ST_DTYPE_COUNT);
    CHECK(st_autocast_push(1, ST_F32) == ST_ERR_DTYPE && st_autocast_dtype() == ST_DTYPE_COUNT);
    st_clear_error();
    st_tensor *w = leaf(ST_F32, 2, SH(2, 1), V(1, -1));
    st_tensor *x = K(st_from_data(ST_F32, 2, SH(1, 2), (const float[]){1.0f + 0x1p-8f + 0x1p-10f, 1.0f}));
    if (!w || !x) return;
    CHECK(st_autocast_push(1, ST_BF16) == ST_OK && st_autocast_dtype() == ST_BF16);
    st_tensor *y = K(st_matmul(x, w));
    st_tensor *s = K(st_sum(y, 0, NULL, 0));
    CHECK(st_autocast_push(0, ST_BF16) == ST_OK && st_autocast_dtype() == ST_DTYPE_COUNT);
    st_tensor *y32 = K(st_matmul(x, w));
    st_autocast_pop();
    st_autocast_pop();
    CHECK(st_autocast_dtype() == ST_DTYPE_COUNT);
    CHECK(y && st_dtype_of(y) == ST_BF16 && s && st_dtype_of(s) == ST_F32 && y32 && st_dtype_of(y32) == ST_F32);
    EXPECT(s, 0, 0x1p-7);                /* x rounded to bf16: 1 + 2^-7 */
    EXPECT(y32, 0, 0x1p-8 + 0x1p-10);
    CHECK(st_backward(s, NULL) == ST_OK);
    st_tensor *g = K(st_grad(w));
    CHECK(g && st_dtype_of(g) == ST_F32);
    EXPECT(g, 0, 1 + 0x1p-7, 1);         /* d/dw = bf16(x) */
}

int main(void) {
    st_set_poison(1);
    RUNT(unary);
    RUNT(nondiff_and_cast);
    RUNT(binary_broadcast);
    RUNT(scalars_shared);
    RUNT(max_min_ties);
    RUNT(fmod_remainder_closed_form);
    RUNT(where_clamp);
    RUNT(reductions);
    RUNT(softmax);
    RUNT(matmul);
    RUNT(indexing);
    RUNT(cat_stack);
    RUNT(views);
    RUNT(inplace_nonleaf);
    RUNT(accumulate_and_clear);
    RUNT(errors);
    RUNT(inplace_leaf);
    RUNT(detach_and_grad_mode);
    RUNT(grad_of_view);
    RUNT(low_precision_grads);
    RUNT(lazy_backward_mlp);
    RUNT(realized_forward);
    RUNT(training_loop);
    RUNT(deep_chain);
    RUNT(deep_chain_flushes);
    RUNT(shared_buffer_and_weak_sync);
    RUNT(function_apply);
    RUNT(retain_grad);
    RUNT(autocast);
    printf("gradcheck: %d cases, %d gradient elements compared with finite differences\n",
           gc_cases, gc_elems);
    st_shutdown();
    TEST_MAIN_END();
}
