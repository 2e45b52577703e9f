/*
 * test_einsum.c — st_einsum: values against a plain C loop over every index assignment (the
 * definition of einsum, with size-1 broadcasting) and against st_matmul / st_sum compositions;
 * implicit output, ellipsis, diagonals, several operands; the error for each invalid spec; the
 * result is lazy; the kernel count of the common contractions (one matmul kernel, like batched
 * st_matmul itself); gradients equal the ones through st_matmul.
 *
 * Values are small multiples of 1/4, so every sum is exact in f32 and results compare tightly.
 */
#include "test.h"
#include "fuzz_util.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define MAXOP 4

static st_tensor *pool_[256];
static int npool_;
static st_tensor *K(st_tensor *t) {
    if (t && npool_ < (int)(sizeof pool_ / sizeof pool_[0])) pool_[npool_++] = t;
    return t;
}
static void pool_clear(void) {
    while (npool_ > 0) st_release(pool_[--npool_]);
}

/* A tensor of the given shape with exact, varied values (seeded by salt). */
static st_tensor *mk(int salt, int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 37 + salt * 11 + 5) % 17 - 8) / 4.0;
    st_tensor *t = K(fu_make(ST_F32, nd, shape, v));
    free(v);
    return t;
}

/* ---- the reference: out[o] = sum over all label values of the product of the operands ---- */

typedef struct ref_op { const char *sub; int nd; int64_t shape[ST_MAX_DIMS]; double *v; } ref_op;

/* Explicit specs of letters only. Sizes: the one other than 1 per letter; a size-1 dim broadcasts. */
static double *ref_einsum(const char *spec, int n, ref_op *ops, int *ndo, int64_t *oshape, int64_t *onumel) {
    int64_t size[128];
    char letters[64];
    for (int c = 0; c < 128; c++) size[c] = -1;
    int nl = 0;
    for (int i = 0; i < n; i++)
        for (int d = 0; d < ops[i].nd; d++) {
            int c = (unsigned char)ops[i].sub[d];
            if (size[c] < 0) letters[nl++] = (char)c;
            if (size[c] < 0 || size[c] == 1) size[c] = ops[i].shape[d];
        }
    const char *out = strstr(spec, "->") + 2;
    *ndo = (int)strlen(out);
    *onumel = 1;
    for (int d = 0; d < *ndo; d++) *onumel *= (oshape[d] = size[(unsigned char)out[d]]);
    double *r = calloc((size_t)(*onumel ? *onumel : 1), sizeof *r);
    int64_t val[128] = {0}, total = 1;
    for (int k = 0; k < nl; k++) total *= size[(unsigned char)letters[k]];
    for (int64_t it = 0; it < total; it++) {
        int64_t rem = it;
        for (int k = nl - 1; k >= 0; k--) {
            int64_t s = size[(unsigned char)letters[k]];
            val[(unsigned char)letters[k]] = rem % s;
            rem /= s;
        }
        double p = 1;
        for (int i = 0; i < n; i++) {
            int64_t off = 0;
            for (int d = 0; d < ops[i].nd; d++)
                off = off * ops[i].shape[d] + (ops[i].shape[d] == 1 ? 0 : val[(unsigned char)ops[i].sub[d]]);
            p *= ops[i].v[off];
        }
        int64_t o = 0;
        for (int d = 0; d < *ndo; d++) o = o * oshape[d] + val[(unsigned char)out[d]];
        r[o] += p;
    }
    return r;
}

/* Checks st_einsum(spec) against ref_einsum(ref_spec) (the same contraction with letters only and
 * an explicit output; NULL: spec itself) for operands of the given shapes. */
static void check_spec(int line, const char *spec, const char *ref_spec, int n, ...) {
    if (test_cur_failed) return;
    if (!ref_spec) ref_spec = spec;
    st_tensor *ts[MAXOP];
    ref_op ops[MAXOP];
    va_list ap;
    va_start(ap, n);
    const char *s = ref_spec;
    for (int i = 0; i < n; i++) {
        int nd = va_arg(ap, int);
        const int64_t *shape = va_arg(ap, const int64_t *);
        ts[i] = mk(i + 1, nd, shape);
        int64_t cnt;
        ops[i].sub = s;
        ops[i].nd = nd;
        memcpy(ops[i].shape, shape, (size_t)nd * sizeof *shape);
        ops[i].v = fu_read(ts[i], &cnt);
        s += nd + 1; /* past the subscript and its ',' (or the "->") */
    }
    va_end(ap);
    int ndo;
    int64_t oshape[ST_MAX_DIMS], on, gn = -1;
    double *want = ref_einsum(ref_spec, n, ops, &ndo, oshape, &on);
    st_tensor *r = K(st_einsum(spec, n, ts));
    double *got = r ? fu_read(r, &gn) : NULL;
    if (!r || !got) {
        TEST_FAILF("line %d: einsum(\"%s\") failed: %s", line, spec, st_last_error());
    } else if (st_ndim(r) != ndo || gn != on) {
        TEST_FAILF("line %d: einsum(\"%s\") has %d dims and %lld elements, expected %d and %lld", line, spec,
                   st_ndim(r), (long long)gn, ndo, (long long)on);
    } else {
        for (int d = 0; d < ndo; d++)
            if (st_size(r, d) != oshape[d]) {
                TEST_FAILF("line %d: einsum(\"%s\") dim %d is %lld, expected %lld", line, spec, d,
                           (long long)st_size(r, d), (long long)oshape[d]);
                break;
            }
        for (int64_t i = 0; i < on && !test_cur_failed; i++)
            if (fabs(got[i] - want[i]) > 1e-6 * (1 + fabs(want[i])))
                TEST_FAILF("line %d: einsum(\"%s\")[%lld] = %.9g, expected %.9g", line, spec, (long long)i,
                           got[i], want[i]);
    }
    free(got);
    free(want);
    for (int i = 0; i < n; i++) free(ops[i].v);
}
#define CHECK_SPEC(spec, ref, n, ...) check_spec(__LINE__, spec, ref, n, __VA_ARGS__)

TEST(matmul_like) {
    CHECK_SPEC("bij,bjk->bik", NULL, 2, 3, SH(2, 3, 4), 3, SH(2, 4, 5));
    CHECK_SPEC("ij,jk", "ij,jk->ik", 2, 2, SH(3, 4), 2, SH(4, 2));
    CHECK_SPEC("ij,j", "ij,j->i", 2, 2, SH(3, 4), 1, SH(4));
    CHECK_SPEC("i,i->", NULL, 2, 1, SH(5), 1, SH(5));
    CHECK_SPEC("bhqd,bhkd->bhqk", NULL, 2, 4, SH(2, 3, 4, 5), 4, SH(2, 3, 6, 5));
    CHECK_SPEC("bhqk,bhkd->bhqd", NULL, 2, 4, SH(2, 3, 4, 6), 4, SH(2, 3, 6, 5));
    CHECK_SPEC("ji,kj->ik", NULL, 2, 2, SH(4, 3), 2, SH(2, 4));      /* both transposed */
    CHECK_SPEC("ijk,jil->kl", NULL, 2, 3, SH(2, 3, 4), 3, SH(3, 2, 5)); /* two contracted dims */
    CHECK_SPEC("bik,bkj->bji", NULL, 2, 3, SH(2, 3, 4), 3, SH(2, 4, 5)); /* permuted output */
    CHECK_SPEC("abc,cd->abd", NULL, 2, 3, SH(2, 3, 4), 2, SH(4, 5));     /* two free dims */
}

TEST(elementwise_and_reductions) {
    CHECK_SPEC("ij->ji", NULL, 1, 2, SH(3, 4));
    CHECK_SPEC("ij->", NULL, 1, 2, SH(3, 4));
    CHECK_SPEC("ijk->ki", NULL, 1, 3, SH(2, 3, 4));
    CHECK_SPEC("i,j->ij", NULL, 2, 1, SH(3), 1, SH(4));
    CHECK_SPEC("ij,ij->ij", NULL, 2, 2, SH(3, 4), 2, SH(3, 4));
    CHECK_SPEC("ij,kl->", NULL, 2, 2, SH(2, 3), 2, SH(4, 5)); /* every index summed out first */
    CHECK_SPEC("ij,jk->j", NULL, 2, 2, SH(2, 3), 2, SH(3, 4));
}

TEST(diagonals) {
    CHECK_SPEC("ii->i", NULL, 1, 2, SH(4, 4));
    CHECK_SPEC("ii", "ii->", 1, 2, SH(4, 4));                 /* trace */
    CHECK_SPEC("bii->bi", NULL, 1, 3, SH(2, 3, 3));
    CHECK_SPEC("iij,jk->ik", NULL, 2, 3, SH(3, 3, 4), 2, SH(4, 2));
    CHECK_SPEC("iii->i", NULL, 1, 3, SH(3, 3, 3));
    /* a diagonal of a transposed view */
    st_tensor *a = mk(1, 2, SH(3, 3)), *at = K(st_transpose(a, 0, 1));
    st_tensor *d1 = K(st_einsum("ii->i", 1, &a)), *d2 = K(st_einsum("ii->i", 1, &at));
    double x[3], y[3];
    CHECK(d1 && d2 && st_to_host(d1, ST_F64, x, sizeof x) == ST_OK && st_to_host(d2, ST_F64, y, sizeof y) == ST_OK);
    for (int i = 0; i < 3; i++) CHECK_NEAR(x[i], y[i], 0);
}

TEST(several_operands) {
    CHECK_SPEC("ij,jk,kl->il", NULL, 3, 2, SH(2, 3), 2, SH(3, 4), 2, SH(4, 5));
    CHECK_SPEC("ij,jk,kl", "ij,jk,kl->il", 3, 2, SH(2, 3), 2, SH(3, 4), 2, SH(4, 5));
    CHECK_SPEC("i,i,i->", NULL, 3, 1, SH(4), 1, SH(4), 1, SH(4));
    CHECK_SPEC("bi,bj,bk->bijk", NULL, 3, 2, SH(2, 3), 2, SH(2, 4), 2, SH(2, 2));
    CHECK_SPEC("ab,bc,cd,da->", NULL, 4, 2, SH(2, 3), 2, SH(3, 4), 2, SH(4, 5), 2, SH(5, 2));
}

TEST(broadcasting) {
    CHECK_SPEC("bij,bjk->bik", NULL, 2, 3, SH(1, 3, 4), 3, SH(5, 4, 2)); /* size-1 batch */
    CHECK_SPEC("bij,bjk->bik", NULL, 2, 3, SH(5, 3, 4), 3, SH(1, 4, 2));
    CHECK_SPEC("ij,jk->ik", NULL, 2, 2, SH(3, 1), 2, SH(4, 2));          /* size-1 contracted */
    CHECK_SPEC("ij,ij->ij", NULL, 2, 2, SH(3, 1), 2, SH(1, 4));
    CHECK_SPEC("bi,bi->", NULL, 2, 2, SH(0, 3), 2, SH(1, 3));              /* size 0 broadcasts too */
    CHECK_SPEC("bi,bi->b", NULL, 2, 2, SH(0, 3), 2, SH(1, 3));
    /* 7 batch dims: no room for them in st_matmul's 8, so they are expanded and flattened */
    CHECK_SPEC("abcdefgk,abcdefgk->abcdefg", NULL, 2, 8, SH(2, 1, 2, 1, 2, 1, 2, 3), 8, SH(1, 2, 2, 2, 1, 1, 2, 3));
}

TEST(ellipsis_and_implicit) {
    CHECK_SPEC("...ij,...jk->...ik", "abij,bjk->abik", 2, 4, SH(2, 1, 3, 4), 3, SH(5, 4, 2));
    CHECK_SPEC("...ij,...jk", "abij,bjk->abik", 2, 4, SH(2, 1, 3, 4), 3, SH(5, 4, 2));
    CHECK_SPEC("b...,b...->b", "bxy,bxy->b", 2, 3, SH(2, 3, 4), 3, SH(2, 3, 4));
    CHECK_SPEC("...ii->...i", "xii->xi", 1, 3, SH(2, 3, 3));
    CHECK_SPEC("i...->i", "ixy->i", 1, 3, SH(2, 3, 4));         /* "..." left out: summed */
    CHECK_SPEC("...->...", "xy->xy", 1, 2, SH(2, 3));
    CHECK_SPEC("i j , j k -> i k", "ij,jk->ik", 2, 2, SH(2, 3), 2, SH(3, 4)); /* spaces */
    CHECK_SPEC("ba", "ba->ab", 1, 2, SH(2, 3));                  /* implicit output is sorted */
    CHECK_SPEC("bA", "bA->Ab", 1, 2, SH(2, 3));                  /* capitals first */
}

TEST(matches_matmul_and_sum_exactly) {
    st_tensor *a = mk(1, 3, SH(3, 5, 7)), *b = mk(2, 3, SH(3, 7, 4));
    st_tensor *ops[2] = {a, b};
    st_tensor *e = K(st_einsum("bij,bjk->bik", 2, ops)), *m = K(st_matmul(a, b));
    float x[60], y[60];
    CHECK(e && m && st_to_host(e, ST_F32, x, sizeof x) == ST_OK && st_to_host(m, ST_F32, y, sizeof y) == ST_OK);
    CHECK(memcmp(x, y, sizeof x) == 0);
    st_tensor *s1 = K(st_einsum("bij->", 1, &a)), *s2 = K(st_sum(a, 0, NULL, 0));
    double u = 0, v = 1;
    CHECK(s1 && s2 && st_item(s1, &u) == ST_OK && st_item(s2, &v) == ST_OK);
    CHECK_NEAR(u, v, 0);
}

/* einsum(spec) fails with ST_ERR_xxx and a message containing every needle (NULL-terminated). */
static void expect_error(int line, const char *spec, int n, st_tensor *const *ops, st_status want, ...) {
    if (test_cur_failed) return;
    st_clear_error();
    st_tensor *r = st_einsum(spec, n, ops);
    if (r) {
        st_release(r);
        TEST_FAILF("line %d: einsum(\"%s\") succeeded", line, spec ? spec : "(null)");
        return;
    }
    if (st_last_status() != want)
        TEST_FAILF("line %d: status %d, expected %d (%s)", line, (int)st_last_status(), (int)want, st_last_error());
    va_list ap;
    va_start(ap, want);
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(st_last_error(), s)) {
            TEST_FAILF("line %d: error \"%s\" does not mention \"%s\"", line, st_last_error(), s);
            break;
        }
    va_end(ap);
}
#define EXPECT_ERROR(spec, n, ops, st, ...) expect_error(__LINE__, spec, n, ops, st, __VA_ARGS__, (const char *)NULL)

TEST(errors) {
    st_tensor *a = mk(1, 2, SH(2, 3)), *b = mk(2, 2, SH(4, 5)), *sq = mk(3, 2, SH(3, 3));
    st_tensor *ab[2] = {a, b}, *aa[2] = {a, a}, *one[1] = {a}, *none[2] = {a, NULL};
    EXPECT_ERROR("ij,jk->ik", 2, ab, ST_ERR_SHAPE, "index 'j'", "\"ij,jk->ik\"", "size 3 in operand 1",
                 "(2, 3)", "4 in operand 2", "(4, 5)");
    EXPECT_ERROR("ij,jk->ik", 1, one, ST_ERR_ARG, "names 2 operands but 1 was given");
    EXPECT_ERROR("ij->ij", 2, aa, ST_ERR_ARG, "names 1 operand but 2 were given");
    EXPECT_ERROR("ij->iz", 1, one, ST_ERR_ARG, "output index 'z'", "in no operand");
    EXPECT_ERROR("ij->ii", 1, one, ST_ERR_ARG, "index 'i' appears twice in the output");
    EXPECT_ERROR("ii->i", 1, one, ST_ERR_SHAPE, "index 'i' is repeated in operand 1", "(2, 3)", "sizes 2 and 3");
    EXPECT_ERROR("ijk->i", 1, one, ST_ERR_SHAPE, "operand 1 has 2 dims", "gives it 3 indices");
    EXPECT_ERROR("i->i", 1, one, ST_ERR_SHAPE, "operand 1 has 2 dims", "gives it 1 indices");
    EXPECT_ERROR("ijk...->i", 1, one, ST_ERR_SHAPE, "operand 1 has 2 dims");
    EXPECT_ERROR("i1->i", 1, one, ST_ERR_ARG, "bad character '1'", "operand 1");
    EXPECT_ERROR("ij->i.", 1, one, ST_ERR_ARG, "'.' that is not part of '...'", "the output");
    EXPECT_ERROR("...i...->i", 1, one, ST_ERR_ARG, "'...' appears twice");
    EXPECT_ERROR("ij->i->j", 1, one, ST_ERR_ARG, "more than one '->'");
    EXPECT_ERROR("ij,jk", 2, none, ST_ERR_ARG, "operand 2 is NULL");
    EXPECT_ERROR("ij", 0, one, ST_ERR_ARG, "at least one operand");
    EXPECT_ERROR(NULL, 1, one, ST_ERR_ARG, "NULL spec");
    st_tensor *sqa[2] = {sq, a};
    EXPECT_ERROR("ij,jk->ik", 2, sqa, ST_ERR_SHAPE, "index 'j'", "size 3 in operand 1", "2 in operand 2");
    /* the runtime is usable afterwards */
    st_tensor *r = K(st_einsum("ij->j", 1, one));
    double v[3];
    CHECK(r && st_to_host(r, ST_F64, v, sizeof v) == ST_OK);
}

TEST(result_is_lazy) {
    st_tensor *a = mk(1, 3, SH(2, 3, 4)), *b = mk(2, 3, SH(2, 4, 5));
    st_tensor *ops[2] = {a, b};
    CHECK(st_realize(2, ops) == ST_OK);
    st_stats_t s0, s1;
    st_stats(&s0);
    st_tensor *r = K(st_einsum("bij,bjk->bik", 2, ops));
    st_stats(&s1);
    CHECK(r && !st_is_realized(r));
    CHECK_EQ_INT(s1.flushes - s0.flushes, 0);
}

/* Every allocation failure while recording is an ST_ERR_OOM error, never a crash or a leak. */
TEST(out_of_memory) {
    st_tensor *ops[3] = {mk(1, 3, SH(2, 3, 3)), mk(2, 3, SH(1, 3, 4)), mk(3, 2, SH(4, 2))};
    int ok = 0;
    for (int nth = 1; nth < 500 && !ok; nth++) {
        st_debug_fail_alloc(nth);
        st_tensor *r = st_einsum("bii,bij,jk->bk", 3, ops);
        st_debug_fail_alloc(0);
        if (r) ok = 1;
        else CHECK_EQ_INT(st_last_status(), ST_ERR_OOM);
        st_release(r);
    }
    CHECK(ok);
}

/* Kernels launched by the flush that realizes fn(a, b) from realized operands. */
static int kernels_for(st_tensor *r) {
    st_stats_t s0, s1;
    st_stats(&s0);
    if (!r || st_realize(1, &r) != ST_OK) return -1;
    st_stats(&s1);
    return (int)(s1.kernels_launched - s0.kernels_launched);
}

static int einsum_kernels(const char *spec, int nda, const int64_t *sa, int ndb, const int64_t *sb) {
    st_tensor *ops[2] = {mk(1, nda, sa), mk(2, ndb, sb)};
    if (st_realize(2, ops) != ST_OK) return -1;
    return kernels_for(K(st_einsum(spec, 2, ops)));
}

static int matmul_kernels(int nda, const int64_t *sa, int ndb, const int64_t *sb) {
    st_tensor *ops[2] = {mk(1, nda, sa), mk(2, ndb, sb)};
    if (st_realize(2, ops) != ST_OK) return -1;
    return kernels_for(K(st_matmul(ops[0], ops[1])));
}

TEST(one_matmul_kernel) {
    CHECK_EQ_INT(einsum_kernels("bij,bjk->bik", 3, SH(2, 3, 4), 3, SH(2, 4, 5)), 1);
    CHECK_EQ_INT(einsum_kernels("bhqd,bhkd->bhqk", 4, SH(2, 3, 4, 5), 4, SH(2, 3, 6, 5)), 1);
    CHECK_EQ_INT(einsum_kernels("bhqk,bhkd->bhqd", 4, SH(2, 3, 4, 6), 4, SH(2, 3, 6, 5)), 1);
    CHECK_EQ_INT(einsum_kernels("ij,jk", 2, SH(3, 4), 2, SH(4, 5)), 1);
    CHECK_EQ_INT(einsum_kernels("ji,kj->ik", 2, SH(4, 3), 2, SH(5, 4)), 1);
    CHECK_EQ_INT(einsum_kernels("bij,bjk->bik", 3, SH(1, 3, 4), 3, SH(5, 4, 2)), 1);
    CHECK_EQ_INT(einsum_kernels("abc,cd->abd", 3, SH(2, 3, 4), 2, SH(4, 5)), 1);
    /* batched st_matmul itself: 3-D, 4-D, broadcast batch dims */
    CHECK_EQ_INT(matmul_kernels(3, SH(2, 3, 4), 3, SH(2, 4, 5)), 1);
    CHECK_EQ_INT(matmul_kernels(4, SH(2, 3, 4, 5), 4, SH(2, 3, 5, 6)), 1);
    CHECK_EQ_INT(matmul_kernels(4, SH(2, 1, 4, 5), 3, SH(3, 5, 6)), 1);
    CHECK_EQ_INT(matmul_kernels(3, SH(3, 4, 5), 2, SH(5, 6)), 1);
}

/* d sum(einsum(spec, a, b)) / d{a, b} equals d sum(ref(a, b)) / d{a, b} (ref returns a new reference). */
static void check_grads(int line, const char *spec, st_tensor *(*ref)(st_tensor *, st_tensor *), int nda,
                        const int64_t *sa, int ndb, const int64_t *sb) {
    if (test_cur_failed) return;
    st_tensor *a = mk(1, nda, sa), *b = mk(2, ndb, sb);
    CHECK(st_set_requires_grad(a, 1) == ST_OK && st_set_requires_grad(b, 1) == ST_OK);
    st_tensor *ops[2] = {a, b};
    double *ga[2] = {NULL, NULL}, *gb[2] = {NULL, NULL};
    int64_t na = 0, nb = 0;
    for (int pass = 0; pass < 2; pass++) {
        st_tensor *r = K(pass ? ref(a, b) : st_einsum(spec, 2, ops));
        st_tensor *s = r ? K(st_sum(r, 0, NULL, 0)) : NULL;
        CHECK(s && st_backward(s, NULL) == ST_OK);
        st_tensor *g1 = K(st_grad(a)), *g2 = K(st_grad(b));
        CHECK(g1 && g2);
        if (!g1 || !g2) break;
        ga[pass] = fu_read(g1, &na);
        gb[pass] = fu_read(g2, &nb);
        st_set_grad(a, NULL);
        st_set_grad(b, NULL);
    }
    if (ga[0] && ga[1] && gb[0] && gb[1]) {
        for (int64_t i = 0; i < na; i++)
            if (fabs(ga[0][i] - ga[1][i]) > 1e-5 * (1 + fabs(ga[1][i])))
                TEST_FAILF("line %d: d/da of \"%s\" [%lld] = %g, expected %g", line, spec, (long long)i, ga[0][i], ga[1][i]);
        for (int64_t i = 0; i < nb; i++)
            if (fabs(gb[0][i] - gb[1][i]) > 1e-5 * (1 + fabs(gb[1][i])))
                TEST_FAILF("line %d: d/db of \"%s\" [%lld] = %g, expected %g", line, spec, (long long)i, gb[0][i], gb[1][i]);
    }
    for (int i = 0; i < 2; i++) free(ga[i]), free(gb[i]);
}

static st_tensor *ref_mm(st_tensor *a, st_tensor *b) { return st_matmul(a, b); }
static st_tensor *ref_mm_bt(st_tensor *a, st_tensor *b) { return st_matmul(a, K(st_transpose(b, -1, -2))); }
static st_tensor *ref_diag_mv(st_tensor *a, st_tensor *b) { /* "ii,ij->j": diag(a) @ b */
    st_tensor *eye = K(st_eye(st_size(a, 0), st_size(a, 0), ST_F32));
    st_tensor *d = K(st_sum(K(st_mul(a, eye)), 1, (const int[]){1}, 0));
    return st_matmul(d, b);
}

TEST(gradients_match_matmul) {
    check_grads(__LINE__, "bij,bjk->bik", ref_mm, 3, SH(2, 3, 4), 3, SH(2, 4, 5));
    check_grads(__LINE__, "bhqd,bhkd->bhqk", ref_mm_bt, 4, SH(2, 2, 3, 4), 4, SH(2, 2, 5, 4));
    check_grads(__LINE__, "bij,bjk->bik", ref_mm, 3, SH(1, 3, 4), 3, SH(3, 4, 5));
    check_grads(__LINE__, "ii,ij->j", ref_diag_mv, 2, SH(3, 3), 2, SH(3, 4));
}

int main(void) {
    char dir[] = "/tmp/stitch-einsum-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    setenv("ST_CACHE_DIR", dir, 1);
    st_set_poison(1);
    RUN(matmul_like); pool_clear();
    RUN(elementwise_and_reductions); pool_clear();
    RUN(diagonals); pool_clear();
    RUN(several_operands); pool_clear();
    RUN(broadcasting); pool_clear();
    RUN(ellipsis_and_implicit); pool_clear();
    RUN(matches_matmul_and_sum_exactly); pool_clear();
    RUN(errors); pool_clear();
    RUN(result_is_lazy); pool_clear();
    RUN(out_of_memory); pool_clear();
    RUN(one_matmul_kernel); pool_clear();
    RUN(gradients_match_matmul); pool_clear();
    /* the same answers with every fused kernel compiled by the JIT */
    st_set_jit_min(0);
    RUN(matmul_like); pool_clear();
    RUN(diagonals); pool_clear();
    RUN(broadcasting); pool_clear();
    RUN(gradients_match_matmul); pool_clear();
    st_shutdown();
    TEST_MAIN_END();
}
