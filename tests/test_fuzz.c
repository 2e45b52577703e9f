/*
 * test_fuzz.c — the differential fuzzer: random op graphs built through the public API, run once
 * through the reference interpreter op by op (st_set_eager(1)) and once fused (st_set_jit_min(0):
 * every kernel compiled, or the default jit_min: the interpreter tier of the fused plan), with
 * poisoned buffers; every live tensor is read back and compared with a per-dtype tolerance (NaN
 * must match NaN, Inf must match Inf). Graphs with an odd pool size are realized in two flushes
 * (a fixed half, then the rest), so the first flush has values kept alive outside it. A fused
 * region that fell back to the interpreter because its planning failed (fuse_plan_fallbacks: a
 * cycle between groups) fails the graph too, though its values are right.
 *
 *   test_fuzz [--graphs N] [--seed S] [--jit-every K] [--max-ops M] [--verbose]
 *
 * Graph i uses seed S + i; every K-th graph runs fused with jit_min 0, the others with the default
 * tier (K = 1: all compiled). Prints `PASS fuzz_<N>_graphs` when all agree, else one
 * `FAIL fuzz_seed_<seed>: ...` line per failing graph (at most 20), followed by the graph's op list.
 *
 * Invariant (what makes the comparison meaningful): a graph is a pure function of its seed. Every
 * decision comes from this file's PRNG and from shapes/dtypes (never from computed values), so
 * both runs record the same ops. Each pool tensor carries `exact` (its values are bit-identical in
 * both runs: no float reduction, no f16/bf16 rounding difference upstream) and `bound` (an upper
 * bound of |value|): discontinuous or domain-sensitive ops (floor, comparisons, casts to int,
 * argmax, log, div, ...) are only applied to exact tensors, and integer arithmetic only when the
 * bound proves it cannot overflow (signed overflow would be undefined behaviour). The unary and
 * binary elementwise ops are the rows of the op table (tests/op_table.h), which says which are
 * sensitive (TF_SENS), which stay exact on f16/bf16 (TF_HALF_EXACT), the result bound (BOUND) and
 * the result dtype (the op's dtype rule).
 *
 * Exact means exact on every device: with --device cuda the reference runs on the CPU and the
 * fused graph on the GPU, and an exact tensor must still be equal there. That holds because every
 * elementwise function, f32 and f64 (exp, log, sin, cos, pow, tanh, erf, ... and randn's
 * Box-Muller), is the prelude's own code (base/opmath.h, docs/api.md "Numerics"), compiled without
 * FMA contraction on both devices, so sin(x) or pow(a, b) of exact inputs is exact and may feed
 * floor, comparisons or casts to int. What is not exact anywhere: float sums (sum, mean, var,
 * softmax, logsumexp, float matmul: the order differs between the interpreter, the C kernels and
 * the GPU's tensor cores and shuffles) and f16/bf16 results of a non-TF_HALF_EXACT op. Exact tensors
 * are compared for equality (+0 == -0: max over {+0, -0} depends on the order), the others within
 * the dtype's tolerance.
 */
#include "fuzz_util.h"
#include "op_table.h"
#include "base/base.h"
#include "fuser/fuser.h"   /* fuse_plan_fallbacks: a planning bug hidden by the fallback fails */

#include <stdio.h>

#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) && defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define FZ_HAVE_SAN_CALLBACK 1
#endif
#endif

/* ---- PRNG (splitmix64) ---- */
typedef struct { uint64_t s; } prng;
static uint64_t pr_next(prng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static int pr_int(prng *r, int n) { return n <= 0 ? 0 : (int)(pr_next(r) % (uint64_t)n); }
static int pr_range(prng *r, int lo, int hi) { return lo + pr_int(r, hi - lo + 1); } /* [lo, hi] */
static double pr_unit(prng *r) { return (double)(pr_next(r) >> 11) * 0x1p-53; }
static int pr_pct(prng *r, int pct) { return pr_int(r, 100) < pct; }

/* ---- the pool of live tensors of one graph ---- */
#define MAXP 32
#define MAXSTEPS 64
typedef struct {
    st_tensor *t;
    int id;         /* t<id> in the op list */
    int exact;      /* bit-identical in both runs */
    double bound;   /* |value| <= bound */
    int group;      /* storage group: views and writes share it */
} ent;

typedef struct {
    prng r;
    ent e[MAXP];
    int n, next_id, ngroups;
    char *log;
    size_t len, cap;
    unsigned char err[MAXSTEPS]; /* per step: 0 ok / skipped, 1 the API returned an error */
    int step;
} graph;

static void glog(graph *g, const char *fmt, ...) {
    va_list ap;
    char line[512];
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k >= sizeof line) k = sizeof line - 1;
    if (g->len + (size_t)k + 1 > g->cap) {
        g->cap = (g->len + (size_t)k + 1) * 2;
        g->log = realloc(g->log, g->cap);
    }
    memcpy(g->log + g->len, line, (size_t)k + 1);
    g->len += (size_t)k;
}

static const char *desc(const st_tensor *t, char *buf, size_t n) {
    int64_t s[ST_MAX_DIMS];
    char sh[128];
    st_shape(t, s);
    snprintf(buf, n, "%s%s", st_dtype_name(st_dtype_of(t)), st_shape_str(st_ndim(t), s, sh, sizeof sh));
    return buf;
}

static int isflt(st_dtype dt) { return dt == ST_F32 || dt == ST_F64 || dt == ST_F16 || dt == ST_BF16; }
static int ishalf(st_dtype dt) { return dt == ST_F16 || dt == ST_BF16; }
static int isintdt(st_dtype dt) { return dt == ST_I32 || dt == ST_I64; }
/* Largest |value| integer arithmetic may produce in dt without overflow worries. */
static double int_limit(st_dtype dt) { return dt == ST_I32 ? 1e9 : dt == ST_I64 ? 4e18 : 1; }
/* The |value| a saturating cast to dt can produce. */
static double sat_bound(st_dtype dt) { return dt == ST_I32 ? 2147483648.0 : dt == ST_I64 ? 9.3e18 : 1; }

/* Adds t (ownership taken) to the pool; evicts a random entry when full. Logs the result. */
static void push(graph *g, st_tensor *t, int exact, double bound, int group, const char *what) {
    char d[160];
    int slot = g->n;
    if (g->n == MAXP) {
        slot = pr_int(&g->r, MAXP);
        st_release(g->e[slot].t);
    } else {
        g->n++;
    }
    if (group < 0) group = g->ngroups++;
    if (isintdt(st_dtype_of(t)) && bound > sat_bound(st_dtype_of(t))) bound = sat_bound(st_dtype_of(t));
    if (st_dtype_of(t) == ST_BOOL) bound = 1;
    g->e[slot] = (ent){t, g->next_id++, exact, bound, group};
    glog(g, "  t%d = %s -> %s%s\n", g->e[slot].id, what, desc(t, d, sizeof d), exact ? "" : " ~");
}

/* Records the outcome of an API call that returned NULL / a status. */
static void failed(graph *g, const char *what) {
    glog(g, "  %s -> error: %s\n", what, st_last_error());
    if (g->step < MAXSTEPS) g->err[g->step] = 1;
    st_clear_error();
}

/* A random pool index, biased towards recent tensors. */
static int pick(graph *g) {
    if (g->n == 0) return -1;
    if (pr_pct(&g->r, 40)) return g->n - 1 - pr_int(&g->r, g->n < 3 ? g->n : 3);
    return pr_int(&g->r, g->n);
}

static int64_t shape_numel(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    return n;
}

/* ---- inputs ---- */
typedef struct { int nd; int64_t s[ST_MAX_DIMS]; } shp;
static const shp small_shapes[] = {
    {0, {0}}, {1, {1}}, {1, {5}}, {1, {4}}, {2, {3, 4}}, {2, {4, 1}}, {2, {1, 4}}, {2, {2, 3}},
    {3, {2, 3, 4}}, {3, {2, 1, 4}}, {3, {3, 4, 1}}, {4, {2, 1, 3, 2}}, {2, {3, 1}}, {1, {3}},
    {2, {7, 6}}, {3, {1, 3, 1}},
};
static const shp odd_shapes[] = {
    {2, {0, 3}}, {1, {0}}, {1, {33}}, {2, {5, 33}}, {1, {130}}, {3, {2, 0, 4}}, {2, {33, 4}}, {2, {130, 3}},
};

static shp random_shape(prng *r) {
    if (pr_pct(r, 10)) return odd_shapes[pr_int(r, (int)(sizeof odd_shapes / sizeof odd_shapes[0]))];
    return small_shapes[pr_int(r, (int)(sizeof small_shapes / sizeof small_shapes[0]))];
}

static st_dtype random_dtype(prng *r) {
    static const st_dtype dts[] = {ST_F32, ST_F32, ST_F32, ST_F64, ST_I32, ST_I64, ST_BOOL, ST_F16, ST_BF16};
    return dts[pr_int(r, (int)(sizeof dts / sizeof dts[0]))];
}

/* A new realized tensor of random values; *bound gets |value| bound. Caller owns it. */
static st_tensor *make_input(graph *g, st_dtype dt, int nd, const int64_t *s, double *bound, int idx_hi) {
    int64_t n = shape_numel(nd, s);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    int specials = isflt(dt) && pr_pct(&g->r, 25);
    int coarse = pr_pct(&g->r, 30);
    *bound = isflt(dt) ? 4 : dt == ST_BOOL ? 1 : 9;
    for (int64_t i = 0; i < n; i++) {
        if (idx_hi > 0) v[i] = pr_int(&g->r, idx_hi);
        else if (dt == ST_BOOL) v[i] = pr_int(&g->r, 2);
        else if (!isflt(dt)) v[i] = pr_range(&g->r, -9, 9);
        else if (specials && pr_pct(&g->r, 8)) {
            static const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0};
            v[i] = sp[pr_int(&g->r, 5)];
            if (isinf(v[i])) *bound = INFINITY;
        } else if (coarse) v[i] = pr_range(&g->r, -16, 16) * 0.25;
        else v[i] = pr_unit(&g->r) * 8 - 4;
    }
    if (idx_hi > 0) *bound = idx_hi;
    st_tensor *t = fu_make(dt, nd, s, v);
    free(v);
    return t;
}

static void op_input(graph *g) {
    shp s = random_shape(&g->r);
    st_dtype dt = random_dtype(&g->r);
    double b;
    st_tensor *t = make_input(g, dt, s.nd, s.s, &b, 0);
    if (!t) { failed(g, "from_data"); return; }
    push(g, t, 1, b, -1, "from_data");
}

static void op_random(graph *g) {
    shp s = random_shape(&g->r);
    int k = pr_int(&g->r, 3);
    st_tensor *t;
    char w[96];
    if (k == 0) {
        st_dtype dt = pr_pct(&g->r, 70) ? ST_F32 : pr_pct(&g->r, 50) ? ST_F64 : ST_F16;
        t = st_rand(dt, s.nd, s.s);
        snprintf(w, sizeof w, "rand(%s)", st_dtype_name(dt));
        if (!t) { failed(g, w); return; }
        push(g, t, !ishalf(dt), 1, -1, w);
    } else if (k == 1) {
        st_dtype dt = pr_pct(&g->r, 70) ? ST_F32 : ST_F64;
        t = st_randn(dt, s.nd, s.s);
        snprintf(w, sizeof w, "randn(%s)", st_dtype_name(dt));
        if (!t) { failed(g, w); return; }
        push(g, t, 1, 9, -1, w); /* Box-Muller in the prelude: the same bits everywhere; < 8.6 */
    } else {
        static const st_dtype dts[] = {ST_I32, ST_I64, ST_F32};
        st_dtype dt = dts[pr_int(&g->r, 3)];
        int lo = pr_range(&g->r, -10, 5), hi = lo + pr_range(&g->r, 1, 12);
        t = st_randint(lo, hi, dt, s.nd, s.s);
        snprintf(w, sizeof w, "randint(%d, %d, %s)", lo, hi, st_dtype_name(dt));
        if (!t) { failed(g, w); return; }
        push(g, t, 1, fmax(fabs((double)lo), fabs((double)hi)), -1, w);
    }
}

/* ---- elementwise: the rows of the op table (tests/op_table.h) ----
 * A TF_SENS row (a jump or a domain edge) only takes exact inputs; on f16/bf16 only a
 * TF_HALF_EXACT row keeps its result exact; op_case_bound bounds the result (BOUND) and
 * op_case_dtype gives its dtype (the op's dtype rule). */

/* A random row of the op table of the given arity (1 or 2). */
static const op_case *pick_case(graph *g, int arity) {
    int n = 0;
    for (int k = 0; k < OP_NCASES; k++) n += op_cases[k].arity == arity;
    int j = pr_int(&g->r, n);
    for (int k = 0; k < OP_NCASES; k++)
        if (op_cases[k].arity == arity && j-- == 0) return &op_cases[k];
    return NULL;
}

static void op_unary(graph *g) {
    int i = pick(g);
    if (i < 0) return;
    ent a = g->e[i];
    const op_case *u = pick_case(g, 1);
    if (!u) return;
    st_dtype dt = st_dtype_of(a.t);
    if ((u->flags & TF_SENS) && !a.exact) return;
    int od = op_case_dtype(u, dt);
    /* a dtype the op's rule refuses (neg of bool): the error path, now and then */
    if (od < 0 && !pr_pct(&g->r, 10)) return;
    st_dtype out = od < 0 ? dt : (st_dtype)od;
    double b = op_case_bound(u, a.bound, 0);
    if (isintdt(out) && b > int_limit(out)) return;
    char w[96];
    snprintf(w, sizeof w, "%s(t%d)", u->name, a.id);
    st_tensor *t = op_case_call(u, a.t, NULL);
    if (!t) { failed(g, w); return; }
    int exact = a.exact && (!ishalf(out) || (u->flags & TF_HALF_EXACT));
    push(g, t, exact, b, -1, w);
}

/* A shape that broadcasts with s: equal, some dims set to 1, a suffix, or extra leading dims. */
static shp partner_shape(prng *r, const int64_t *s, int nd) {
    shp p;
    int k = pr_int(r, 4);
    if (k == 0 || nd == 0) {
        p.nd = nd;
        memcpy(p.s, s, sizeof(int64_t) * (size_t)nd);
        if (nd < 3 && pr_pct(r, 30)) { /* a new leading dim */
            memmove(p.s + 1, p.s, sizeof(int64_t) * (size_t)nd);
            p.s[0] = pr_range(r, 1, 3);
            p.nd++;
        }
    } else if (k == 1) {
        p.nd = nd;
        for (int i = 0; i < nd; i++) p.s[i] = pr_pct(r, 50) ? 1 : s[i];
    } else if (k == 2) {
        p.nd = pr_range(r, 0, nd);
        memcpy(p.s, s + (nd - p.nd), sizeof(int64_t) * (size_t)p.nd);
    } else {
        p.nd = nd;
        memcpy(p.s, s, sizeof(int64_t) * (size_t)nd);
    }
    return p;
}

/* Finds a pool tensor broadcastable with entry ia, or makes a new input of a partner shape and
 * pushes it. Returns the pool index (-1 on failure). */
static int broadcast_partner(graph *g, int ia) {
    int64_t s[ST_MAX_DIMS];
    st_shape(g->e[ia].t, s);
    int nd = st_ndim(g->e[ia].t);
    if (pr_pct(&g->r, 50)) {
        int start = pr_int(&g->r, g->n);
        for (int k = 0; k < g->n; k++) {
            int j = (start + k) % g->n;
            int64_t t[ST_MAX_DIMS];
            st_shape(g->e[j].t, t);
            int nt = st_ndim(g->e[j].t), ok = 1;
            for (int d = 1; ok && d <= nd && d <= nt; d++) {
                int64_t x = s[nd - d], y = t[nt - d];
                ok = x == y || x == 1 || y == 1;
            }
            if (ok && (j != ia || pr_pct(&g->r, 30))) return j;
        }
    }
    shp p = partner_shape(&g->r, s, nd);
    st_dtype dt = pr_pct(&g->r, 60) ? st_dtype_of(g->e[ia].t) : random_dtype(&g->r);
    double b;
    st_tensor *t = make_input(g, dt, p.nd, p.s, &b, 0);
    if (!t) {
        failed(g, "from_data");
        return -1;
    }
    push(g, t, 1, b, -1, "from_data");
    for (int k = 0; k < g->n; k++)
        if (g->e[k].t == t) return k;
    return -1;
}

static int half_conv(st_dtype out, st_dtype a, st_dtype b) { return ishalf(out) && (a != out || b != out); }

static void op_binary(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    const op_case *c = pick_case(g, 2);
    if (!c) return;
    int ib = broadcast_partner(g, ia);
    if (ib < 0) return;
    ent a = g->e[ia], b = g->e[ib];
    if (pr_pct(&g->r, 50)) { ent t = a; a = b; b = t; }
    st_dtype da = st_dtype_of(a.t), db = st_dtype_of(b.t), dt = st_promote_types(da, db);
    int od = op_case_dtype(c, dt);
    st_dtype out = od < 0 ? dt : (st_dtype)od;
    if ((c->flags & TF_SENS) && !(a.exact && b.exact)) return;
    if (c->bound == TB_POW && isintdt(out) && b.bound > 3) return;
    double bound = op_case_bound(c, a.bound, b.bound);
    if (isintdt(out) && bound > int_limit(out)) return;
    if (dt == ST_BOOL && c->op == ST_OP_SUB && !pr_pct(&g->r, 20)) return; /* bool - bool: seldom */
    char w[96];
    snprintf(w, sizeof w, "%s(t%d, t%d)", c->name, a.id, b.id);
    st_tensor *t = op_case_call(c, a.t, b.t);
    if (!t) { failed(g, w); return; }
    int exact = a.exact && b.exact && !(ishalf(out) && !(c->flags & TF_HALF_EXACT)) && !half_conv(out, da, db);
    push(g, t, exact, bound, -1, w);
}

/* A scalar on either side: the _s functions (weak float) or a weak int with a binary op. */
static void op_scalar(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    st_dtype dt = st_dtype_of(a.t);
    static const double vals[] = {2, 0.5, -1.5, 3, 0.1, -2, 1, 0};
    double s = vals[pr_int(&g->r, 8)];
    int k = pr_int(&g->r, 9);
    char w[96];
    st_tensor *t = NULL;
    st_dtype out = isflt(dt) ? dt : ST_F32;
    double bound = INFINITY;
    switch (k) {
    case 0: t = st_add_s(a.t, s); bound = a.bound + fabs(s); snprintf(w, sizeof w, "add_s(t%d, %g)", a.id, s); break;
    case 1: t = st_mul_s(a.t, s); bound = a.bound * fabs(s); snprintf(w, sizeof w, "mul_s(t%d, %g)", a.id, s); break;
    case 2: t = st_sub_s(a.t, s); bound = a.bound + fabs(s); snprintf(w, sizeof w, "sub_s(t%d, %g)", a.id, s); break;
    case 3: t = st_rsub_s(a.t, s); bound = a.bound + fabs(s); snprintf(w, sizeof w, "rsub_s(t%d, %g)", a.id, s); break;
    case 4:
        if (s == 0) s = 4;
        t = st_div_s(a.t, s); bound = a.bound / fabs(s); snprintf(w, sizeof w, "div_s(t%d, %g)", a.id, s); break;
    case 5:
        if (!a.exact) return;
        t = st_rdiv_s(a.t, s); snprintf(w, sizeof w, "rdiv_s(t%d, %g)", a.id, s); break;
    case 6:
        if (!a.exact) return;
        s = pr_pct(&g->r, 50) ? 2 : 0.5;
        t = st_pow_s(a.t, s); bound = s == 2 ? a.bound * a.bound : sqrt(a.bound) + 1;
        snprintf(w, sizeof w, "pow_s(t%d, %g)", a.id, s); break;
    default: { /* weak int on either side of add / mul / sub / maximum / remainder */
        int64_t v = pr_range(&g->r, -3, 5);
        static const char *names[] = {"add", "mul", "sub", "maximum", "remainder"};
        int op = pr_int(&g->r, 5);
        if (op == 4 && (!a.exact || v == 0)) return;
        out = dt == ST_BOOL ? ST_I64 : dt;
        bound = op == 1 ? a.bound * 5 : op == 4 ? 5 : a.bound + 5;
        if (isintdt(out) && bound > int_limit(out)) return;
        st_tensor *c = st_weak_scalar_i(v);
        int swap = pr_pct(&g->r, 50);
        st_tensor *x = swap ? c : a.t, *y = swap ? a.t : c;
        t = op == 0 ? st_add(x, y) : op == 1 ? st_mul(x, y) : op == 2 ? st_sub(x, y) : op == 3 ? st_maximum(x, y)
                                                                                         : st_remainder(x, y);
        st_release(c);
        if (swap) snprintf(w, sizeof w, "%s(%lld, t%d)", names[op], (long long)v, a.id);
        else snprintf(w, sizeof w, "%s(t%d, %lld)", names[op], a.id, (long long)v);
        if (op == 2 && dt == ST_BOOL) out = ST_I64;
        break;
    }
    }
    if (!t) { failed(g, w); return; }
    int exact = a.exact && !ishalf(out);
    push(g, t, exact, bound, -1, w);
}

static void op_where(graph *g) {
    int ic = pick(g);
    if (ic < 0 || !g->e[ic].exact) return;
    int ia = broadcast_partner(g, ic);
    if (ia < 0) return;
    int ib = broadcast_partner(g, ia);
    if (ib < 0) return;
    ent c = g->e[ic], a = g->e[ia], b = g->e[ib];
    st_tensor *cond = st_dtype_of(c.t) == ST_BOOL ? st_retain(c.t) : NULL;
    char w[96];
    if (!cond) {
        st_tensor *z = st_zeros(st_dtype_of(c.t), 0, NULL);
        cond = z ? st_gt(c.t, z) : NULL;
        st_release(z);
        snprintf(w, sizeof w, "where(t%d > 0, t%d, t%d)", c.id, a.id, b.id);
    } else {
        snprintf(w, sizeof w, "where(t%d, t%d, t%d)", c.id, a.id, b.id);
    }
    if (!cond) { failed(g, w); return; }
    st_tensor *t = st_where(cond, a.t, b.t);
    st_release(cond);
    if (!t) { failed(g, w); return; }
    st_dtype out = st_dtype_of(t);
    push(g, t, a.exact && b.exact && !half_conv(out, st_dtype_of(a.t), st_dtype_of(b.t)), fmax(a.bound, b.bound), -1, w);
}

static void op_clamp(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    static const double lows[] = {NAN, -1, 0, -2.5, 0.25};
    static const double highs[] = {NAN, 1, 2, 0.5, 3};
    double lo = lows[pr_int(&g->r, 5)], hi = highs[pr_int(&g->r, 5)];
    char w[96];
    snprintf(w, sizeof w, "clamp(t%d, %g, %g)", a.id, lo, hi);
    st_tensor *t = st_clamp(a.t, lo, hi);
    if (!t) { failed(g, w); return; }
    push(g, t, a.exact && !ishalf(st_dtype_of(t)), a.bound, -1, w);
}

static void op_cast(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    st_dtype to = random_dtype(&g->r), from = st_dtype_of(a.t);
    if (!isflt(to) && isflt(from) && !a.exact) return;
    double b = a.bound;
    if (!isflt(to)) b = fmin(b, sat_bound(to));
    char w[96];
    snprintf(w, sizeof w, "cast(t%d, %s)", a.id, st_dtype_name(to));
    st_tensor *t = st_cast(a.t, to);
    if (!t) { failed(g, w); return; }
    push(g, t, a.exact && !(ishalf(to) && to != from), b, -1, w);
}

/* ---- views ---- */
static void op_view(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    int nd = st_ndim(a.t);
    int64_t s[ST_MAX_DIMS];
    st_shape(a.t, s);
    int64_t numel = st_numel(a.t);
    char w[160];
    st_tensor *t = NULL;
    int k = pr_int(&g->r, 10);
    if (nd == 0 && k < 6) k = 6;
    switch (k) {
    case 0: { /* permute */
        int perm[ST_MAX_DIMS];
        for (int i = 0; i < nd; i++) perm[i] = i;
        for (int i = nd - 1; i > 0; i--) {
            int j = pr_int(&g->r, i + 1), x = perm[i];
            perm[i] = perm[j];
            perm[j] = x;
        }
        char p[64] = "";
        for (int i = 0; i < nd; i++) snprintf(p + strlen(p), sizeof p - strlen(p), i ? ",%d" : "%d", perm[i]);
        snprintf(w, sizeof w, "permute(t%d, [%s])", a.id, p);
        t = st_permute(a.t, perm);
        break;
    }
    case 1: {
        int d0 = pr_int(&g->r, nd), d1 = pr_int(&g->r, nd) - (pr_pct(&g->r, 30) ? nd : 0);
        snprintf(w, sizeof w, "transpose(t%d, %d, %d)", a.id, d0, d1);
        t = st_transpose(a.t, d0, d1);
        break;
    }
    case 2: case 3: { /* slice */
        int d = pr_int(&g->r, nd);
        int64_t n = s[d];
        int64_t st = pr_range(&g->r, (int)-n - 1, (int)n), en = pr_range(&g->r, (int)-n - 1, (int)n + 1);
        if (pr_pct(&g->r, 30)) st = 0, en = n;
        int64_t step = pr_range(&g->r, 1, 3);
        if (pr_pct(&g->r, 30)) d -= nd;
        snprintf(w, sizeof w, "slice(t%d, %d, %lld, %lld, %lld)", a.id, d, (long long)st, (long long)en, (long long)step);
        t = st_slice(a.t, d, st, en, step);
        break;
    }
    case 4: { /* select */
        int d = pr_int(&g->r, nd);
        if (s[d] == 0) return;
        int64_t i = pr_range(&g->r, (int)-s[d], (int)s[d] - 1);
        snprintf(w, sizeof w, "select(t%d, %d, %lld)", a.id, d, (long long)i);
        t = st_select(a.t, d, i);
        break;
    }
    case 5: { /* flatten */
        int d0 = pr_int(&g->r, nd), d1 = d0 + pr_int(&g->r, nd - d0);
        snprintf(w, sizeof w, "flatten(t%d, %d, %d)", a.id, d0, d1);
        t = st_flatten(a.t, d0, d1);
        break;
    }
    case 6: { /* expand */
        int64_t ns[ST_MAX_DIMS];
        int lead = nd < 4 && pr_pct(&g->r, 40) ? 1 : 0;
        if (lead) ns[0] = pr_range(&g->r, 1, 3);
        for (int i = 0; i < nd; i++)
            ns[lead + i] = s[i] == 1 && pr_pct(&g->r, 70) ? pr_range(&g->r, 1, 4) : pr_pct(&g->r, 30) ? -1 : s[i];
        char sh[128];
        snprintf(w, sizeof w, "expand(t%d, %s)", a.id, st_shape_str(nd + lead, ns, sh, sizeof sh));
        t = st_expand(a.t, nd + lead, ns);
        break;
    }
    case 7: { /* reshape */
        int64_t ns[ST_MAX_DIMS];
        int nn;
        int64_t divs[16];
        int nd_ = 0;
        for (int64_t q = 1; q <= numel && nd_ < 16; q++)
            if (numel % q == 0) divs[nd_++] = q;
        int r = pr_int(&g->r, 3);
        if (numel == 0 || nd_ == 0 || r == 0) {
            nn = 1;
            ns[0] = pr_pct(&g->r, 50) ? -1 : numel;
        } else if (r == 1) {
            int64_t q = divs[pr_int(&g->r, nd_)];
            nn = 2;
            ns[0] = q;
            ns[1] = pr_pct(&g->r, 50) ? -1 : numel / q;
        } else {
            int64_t q = divs[pr_int(&g->r, nd_)];
            nn = 3;
            ns[0] = 1;
            ns[1] = numel / q;
            ns[2] = pr_pct(&g->r, 50) ? -1 : q;
        }
        char sh[128];
        snprintf(w, sizeof w, "reshape(t%d, %s)", a.id, st_shape_str(nn, ns, sh, sizeof sh));
        t = st_reshape(a.t, nn, ns);
        break;
    }
    case 8: {
        int d = pr_range(&g->r, -nd - 1, nd);
        if (nd >= 4) return;
        snprintf(w, sizeof w, "unsqueeze(t%d, %d)", a.id, d);
        t = st_unsqueeze(a.t, d);
        break;
    }
    default: {
        if (pr_pct(&g->r, 30)) {
            snprintf(w, sizeof w, "%s(t%d)", pr_pct(&g->r, 50) ? "contiguous" : "clone", a.id);
            t = w[1] == 'o' ? st_contiguous(a.t) : st_clone(a.t);
            if (t) push(g, t, a.exact, a.bound, w[1] == 'o' ? a.group : -1, w);
            else failed(g, w);
            return;
        }
        int d = nd && pr_pct(&g->r, 60) ? pr_int(&g->r, nd) : ST_ALL_DIMS;
        snprintf(w, sizeof w, "squeeze(t%d, %d)", a.id, d);
        t = st_squeeze(a.t, d);
        break;
    }
    }
    if (!t) { failed(g, w); return; }
    push(g, t, a.exact, a.bound, a.group, w);
}

/* ---- reductions, softmax, matmul ---- */
static void op_reduce(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    int nd = st_ndim(a.t);
    int64_t s[ST_MAX_DIMS];
    st_shape(a.t, s);
    st_dtype dt = st_dtype_of(a.t);
    int axes[ST_MAX_DIMS], na = 0;
    int64_t count = 1;
    unsigned mask = 0;
    if (nd > 0 && pr_pct(&g->r, 75)) {
        int want = pr_range(&g->r, 1, nd);
        for (int k = 0; k < want; k++) {
            int d = pr_int(&g->r, nd);
            if (mask >> d & 1) continue;
            mask |= 1u << d;
            axes[na++] = pr_pct(&g->r, 30) ? d - nd : d;
        }
    } else {
        mask = nd ? (1u << nd) - 1 : 0;
    }
    for (int d = 0; d < nd; d++)
        if (mask >> d & 1) count *= s[d];
    int keep = pr_pct(&g->r, 40);
    int k = pr_int(&g->r, 11);
    char ax[64] = "";
    for (int i = 0; i < na; i++) snprintf(ax + strlen(ax), sizeof ax - strlen(ax), i ? ",%d" : "%d", axes[i]);
    char w[160];
    st_tensor *t = NULL;
    int exact = 0;
    double bound = INFINITY;
    static const char *names[] = {"sum", "mean", "prod", "max", "min", "var", "std", "logsumexp", "argmax", "argmin", "sum"};
    if (k == 8 || k == 9) {
        if (!a.exact) return;
        int d = nd && pr_pct(&g->r, 80) ? pr_int(&g->r, nd) : ST_ALL_DIMS;
        snprintf(w, sizeof w, "%s(t%d, dim %d, keepdim %d)", names[k], a.id, d, keep);
        t = k == 8 ? st_argmax(a.t, d, keep) : st_argmin(a.t, d, keep);
        if (!t) { failed(g, w); return; }
        { push(g, t, 1, (double)st_numel(a.t), -1, w); return; }
    }
    snprintf(w, sizeof w, "%s(t%d, [%s], keepdim %d)", names[k], a.id, ax, keep);
    switch (k) {
    case 0: case 10:
        if (!isflt(dt) && a.bound * (double)count > int_limit(ST_I64)) return;
        t = st_sum(a.t, na, axes, keep);
        exact = a.exact && !isflt(dt);
        bound = a.bound * (double)count;
        break;
    case 1: t = st_mean(a.t, na, axes, keep); bound = a.bound; break;
    case 2:
        if (!isflt(dt) && (count > 40 || pow(fmax(a.bound, 1), (double)count) > int_limit(ST_I64))) return;
        t = st_prod(a.t, na, axes, keep);
        exact = a.exact && !isflt(dt);
        bound = pow(fmax(a.bound, 1), (double)count);
        break;
    case 3: case 4:
        t = k == 3 ? st_max(a.t, na, axes, keep) : st_min(a.t, na, axes, keep);
        exact = a.exact;
        bound = a.bound;
        break;
    case 5: case 6: {
        int corr = pr_int(&g->r, 2);
        snprintf(w, sizeof w, "%s(t%d, [%s], correction %d, keepdim %d)", names[k], a.id, ax, corr, keep);
        t = k == 5 ? st_var(a.t, na, axes, corr, keep) : st_std(a.t, na, axes, corr, keep);
        break;
    }
    default: t = st_logsumexp(a.t, na, axes, keep); break;
    }
    if (!t) { failed(g, w); return; }
    push(g, t, exact, bound, -1, w);
}

static void op_softmax(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    int nd = st_ndim(a.t);
    int d = nd ? pr_int(&g->r, nd) - (pr_pct(&g->r, 50) ? nd : 0) : 0;
    int lg = pr_pct(&g->r, 40);
    char w[96];
    snprintf(w, sizeof w, "%s(t%d, %d)", lg ? "log_softmax" : "softmax", a.id, d);
    st_tensor *t = lg ? st_log_softmax(a.t, d) : st_softmax(a.t, d);
    if (!t) { failed(g, w); return; }
    push(g, t, 0, lg ? INFINITY : 1, -1, w);
}

static void op_matmul(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    int nd = st_ndim(a.t);
    st_dtype dt = st_dtype_of(a.t);
    if (nd == 0 || nd > 3 || dt == ST_BOOL) return;
    int64_t s[ST_MAX_DIMS];
    st_shape(a.t, s);
    int64_t K = s[nd - 1];
    shp p;
    int k = pr_int(&g->r, 3);
    if (k == 0) { p.nd = 1; p.s[0] = K; }
    else if (k == 1 || nd < 3) { p.nd = 2; p.s[0] = K; p.s[1] = pr_range(&g->r, 1, 5); }
    else { p.nd = 3; p.s[0] = pr_pct(&g->r, 50) ? s[0] : 1; p.s[1] = K; p.s[2] = pr_range(&g->r, 1, 4); }
    st_dtype db = pr_pct(&g->r, 75) ? dt : (isflt(dt) ? ST_F32 : ST_I64);
    double bb;
    st_tensor *b = make_input(g, db, p.nd, p.s, &bb, 0);
    if (!b) { failed(g, "from_data"); return; }
    push(g, b, 1, bb, -1, "from_data");
    ent eb = g->e[0];
    for (int j = 0; j < g->n; j++)
        if (g->e[j].t == b) eb = g->e[j];
    /* a may have been evicted by the push: re-find it */
    int found = 0;
    for (int j = 0; j < g->n; j++)
        if (g->e[j].t == a.t && g->e[j].id == a.id) found = 1;
    if (!found) return;
    st_dtype out = st_promote_types(dt, db);
    double bound = a.bound * bb * (double)(K ? K : 1);
    if (isintdt(out) && bound > int_limit(out)) return;
    char w[96];
    snprintf(w, sizeof w, "matmul(t%d, t%d)", a.id, eb.id);
    st_tensor *t = st_matmul(a.t, b);
    if (!t) { failed(g, w); return; }
    push(g, t, a.exact && eb.exact && !isflt(out), bound, -1, w);
}

/* ---- joining, indexing ---- */
static void op_cat(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    int nd = st_ndim(a.t);
    if (nd == 0) return;
    int64_t s[ST_MAX_DIMS];
    st_shape(a.t, s);
    int stack = pr_pct(&g->r, 30) && nd < 6;
    int d = pr_int(&g->r, stack ? nd + 1 : nd);
    int n = pr_range(&g->r, 2, 3);
    st_tensor *ts[3] = {a.t, NULL, NULL};
    ent parts[3] = {a};
    char w[160];
    int exact = a.exact;
    double bound = a.bound;
    for (int i = 1; i < n; i++) {
        if (pr_pct(&g->r, 40)) {
            ts[i] = a.t;
            parts[i] = a;
            continue;
        }
        int64_t ps[ST_MAX_DIMS];
        memcpy(ps, s, sizeof ps);
        if (!stack) ps[d] = pr_range(&g->r, 0, 4);
        st_dtype dt = pr_pct(&g->r, 70) ? st_dtype_of(a.t) : random_dtype(&g->r);
        double b;
        st_tensor *t = make_input(g, dt, nd, ps, &b, 0);
        if (!t) { failed(g, "from_data"); return; }
        push(g, t, 1, b, -1, "from_data");
        ts[i] = t;
        parts[i] = (ent){t, g->next_id - 1, 1, b, 0};
    }
    for (int i = 0; i < n; i++) /* every part must still be alive (a push may evict) */
        for (int j = 0, found = 0; j <= g->n; j++) {
            if (j == g->n) {
                if (!found) return;
                break;
            }
            if (g->e[j].t == ts[i]) found = 1;
        }
    st_dtype out = st_dtype_of(a.t);
    for (int i = 0; i < n; i++) {
        out = st_promote_types(out, st_dtype_of(ts[i]));
        exact &= parts[i].exact;
        bound = fmax(bound, parts[i].bound);
    }
    for (int i = 0; i < n; i++)
        if (ishalf(out) && st_dtype_of(ts[i]) != out) exact = 0;
    char ids[64] = "";
    for (int i = 0; i < n; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), i ? ", t%d" : "t%d", parts[i].id);
    snprintf(w, sizeof w, "%s([%s], %d)", stack ? "stack" : "cat", ids, d);
    st_tensor *t = stack ? st_stack(n, ts, d) : st_cat(n, ts, d);
    if (!t) { failed(g, w); return; }
    push(g, t, exact, bound, -1, w);
}

/* A valid index tensor of the given shape with values in [0, hi): from host data, or computed
 * (pending) as remainder(x, hi) of a random integer tensor. Caller owns it. */
static st_tensor *make_index(graph *g, int nd, const int64_t *s, int64_t hi, char *w, size_t wn) {
    st_dtype dt = pr_pct(&g->r, 50) ? ST_I64 : ST_I32;
    double b;
    if (pr_pct(&g->r, 30)) {
        st_tensor *raw = make_input(g, dt, nd, s, &b, 0); /* values in [-9, 9] */
        st_tensor *m = raw ? st_weak_scalar_i(hi) : NULL;
        st_tensor *t = m ? st_remainder(raw, m) : NULL;
        st_release(raw);
        st_release(m);
        snprintf(w, wn, "remainder(%s input, %lld)", st_dtype_name(dt), (long long)hi);
        return t;
    }
    snprintf(w, wn, "%s index < %lld", st_dtype_name(dt), (long long)hi);
    return make_input(g, dt, nd, s, &b, (int)hi);
}

static void op_gather(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    int nd = st_ndim(a.t);
    if (nd == 0) return;
    int64_t s[ST_MAX_DIMS];
    st_shape(a.t, s);
    int d = pr_int(&g->r, nd);
    if (s[d] == 0) return;
    char iw[96], w[200];
    st_tensor *idx, *t;
    if (pr_pct(&g->r, 50)) {
        int64_t n = pr_range(&g->r, 1, 5);
        idx = make_index(g, 1, &n, s[d], iw, sizeof iw);
        snprintf(w, sizeof w, "index_select(t%d, %d, [%s] (%lld))", a.id, d, iw, (long long)n);
        t = idx ? st_index_select(a.t, d, idx) : NULL;
    } else {
        int64_t is[ST_MAX_DIMS];
        for (int i = 0; i < nd; i++) is[i] = i == d ? pr_range(&g->r, 1, 4) : pr_range(&g->r, s[i] ? 1 : 0, (int)s[i]);
        idx = make_index(g, nd, is, s[d], iw, sizeof iw);
        char sh[96];
        snprintf(w, sizeof w, "gather(t%d, %d, [%s] %s)", a.id, d, iw, st_shape_str(nd, is, sh, sizeof sh));
        t = idx ? st_gather(a.t, d, idx) : NULL;
    }
    st_release(idx);
    if (!t) { failed(g, w); return; }
    push(g, t, a.exact, a.bound, -1, w);
}

static void op_scatter(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    int nd = st_ndim(a.t);
    if (nd == 0) return;
    int64_t s[ST_MAX_DIMS];
    st_shape(a.t, s);
    int d = pr_int(&g->r, nd);
    if (s[d] == 0) return;
    st_dtype dt = st_dtype_of(a.t);
    char iw[96], w[200];
    int64_t is[ST_MAX_DIMS];
    int index_add = pr_pct(&g->r, 40);
    int64_t L = pr_range(&g->r, 1, 4);
    for (int i = 0; i < nd; i++)
        is[i] = i == d ? L : index_add ? s[i] : pr_range(&g->r, s[i] ? 1 : 0, (int)s[i]);
    double sb;
    st_tensor *src = make_input(g, pr_pct(&g->r, 80) ? dt : random_dtype(&g->r), nd, is, &sb, 0);
    double bound = a.bound + sb * (double)shape_numel(nd, is);
    if (isintdt(dt) && bound > int_limit(dt)) {
        st_release(src);
        return;
    }
    st_tensor *idx = index_add ? make_index(g, 1, &L, s[d], iw, sizeof iw) : make_index(g, nd, is, s[d], iw, sizeof iw);
    char sh[96];
    snprintf(w, sizeof w, "%s(t%d, %d, [%s], %s src %s)", index_add ? "index_add" : "scatter_add", a.id, d, iw,
             src ? st_dtype_name(st_dtype_of(src)) : "?", st_shape_str(nd, is, sh, sizeof sh));
    st_tensor *t = idx && src ? (index_add ? st_index_add(a.t, d, idx, src) : st_scatter_add(a.t, d, idx, src)) : NULL;
    st_release(idx);
    st_release(src);
    if (!t) { failed(g, w); return; }
    push(g, t, a.exact && !isflt(dt), bound, -1, w);
}

/* ---- in-place writes through views of live tensors ---- */
static void op_inplace(graph *g) {
    int ia = pick(g);
    if (ia < 0) return;
    ent a = g->e[ia];
    int nd = st_ndim(a.t);
    int64_t s[ST_MAX_DIMS];
    st_shape(a.t, s);
    st_dtype dt = st_dtype_of(a.t);
    char vw[96], w[200];
    st_tensor *v;
    int k = pr_int(&g->r, 4);
    if (nd == 0) k = 0;
    if (k == 0) {
        v = st_retain(a.t);
        snprintf(vw, sizeof vw, "t%d", a.id);
    } else if (k == 1) {
        int d = pr_int(&g->r, nd);
        int64_t n = s[d], st = pr_range(&g->r, 0, (int)n), step = pr_range(&g->r, 1, 2);
        v = st_slice(a.t, d, st, n, step);
        snprintf(vw, sizeof vw, "t%d[dim %d: %lld::%lld]", a.id, d, (long long)st, (long long)step);
    } else if (k == 2) {
        int d = pr_int(&g->r, nd);
        if (s[d] == 0) return;
        int64_t i = pr_int(&g->r, (int)s[d]);
        v = st_select(a.t, d, i);
        snprintf(vw, sizeof vw, "t%d[dim %d = %lld]", a.id, d, (long long)i);
    } else {
        v = st_transpose(a.t, 0, nd - 1);
        snprintf(vw, sizeof vw, "t%d^T", a.id);
    }
    if (!v) { failed(g, vw); return; }
    int vnd = st_ndim(v);
    int64_t vs[ST_MAX_DIMS];
    st_shape(v, vs);
    int op = pr_int(&g->r, 7);
    st_status st;
    int wexact = 1;
    double nb = a.bound;
    if (op <= 1) { /* fill_ / zero_ */
        static const double fv[] = {0, 1, -2, 0.5, 3.25, -7};
        double x = op == 1 ? 0 : fv[pr_int(&g->r, 6)];
        if (!isflt(dt)) x = floor(x);
        snprintf(w, sizeof w, "%s(%s, %g)", op == 1 ? "zero_" : "fill_", vw, x);
        st = op == 1 ? st_zero_(v) : st_fill_(v, x);
        nb = fmax(nb, fabs(x));
    } else {
        /* a value broadcastable into the view's shape */
        shp p = partner_shape(&g->r, vs, vnd);
        if (p.nd > vnd) p.nd = vnd, memcpy(p.s, vs, sizeof(int64_t) * (size_t)vnd);
        st_dtype sdt = pr_pct(&g->r, 70) ? dt : random_dtype(&g->r);
        double sb;
        st_tensor *src = make_input(g, sdt, p.nd, p.s, &sb, 0);
        if (!src) {
            st_release(v);
            { failed(g, "from_data"); return; }
        }
        static const char *names[] = {"", "", "copy_", "add_", "sub_", "mul_", "div_"};
        if (op == 6 && (!isflt(dt) || ishalf(dt))) op = 3;
        st_dtype res = op == 2 ? sdt : st_promote_types(dt, sdt);
        if (op == 2) nb = fmax(nb, sb);
        else if (op == 5) nb = nb * sb;
        else if (op == 6) nb = INFINITY;
        else nb = nb + sb;
        if (isintdt(dt) && (nb > int_limit(dt) || (isintdt(res) && nb > int_limit(res)))) {
            st_release(src);
            st_release(v);
            return;
        }
        if (!isflt(dt) && isflt(sdt) && !a.exact) { /* float -> int truncation needs exact values */
            st_release(src);
            st_release(v);
            return;
        }
        if (dt == ST_BOOL && op == 4 && !pr_pct(&g->r, 20)) op = 3;
        snprintf(w, sizeof w, "%s(%s, %s%s)", names[op], vw, st_dtype_name(sdt),
                 st_shape_str(p.nd, p.s, (char[64]){0}, 64));
        st = op == 2 ? st_copy_(v, src) : op == 3 ? st_add_(v, src) : op == 4 ? st_sub_(v, src)
                     : op == 5 ? st_mul_(v, src) : st_div_(v, src);
        st_release(src);
        /* copy_: only a conversion into f16/bf16 may round differently; the ops: the arithmetic
         * must not happen in (or be stored to) a half type, and reads a's values */
        wexact = op == 2 ? !(ishalf(dt) && sdt != dt) : a.exact && !ishalf(res) && !ishalf(dt);
    }
    st_release(v);
    if (st != ST_OK) { failed(g, w); return; }
    glog(g, "  %s\n", w);
    /* every tensor sharing the storage (approximately: the group) sees the write */
    for (int j = 0; j < g->n; j++)
        if (g->e[j].group == a.group) {
            g->e[j].exact &= wexact;
            if (!(st_dtype_of(g->e[j].t) == ST_BOOL)) g->e[j].bound = fmax(g->e[j].bound, nb);
        }
}

/* ---- one graph ---- */
typedef struct {
    int n;                /* tensors read back */
    st_dtype dt[MAXP];
    int exact[MAXP];
    int64_t numel[MAXP];
    double *f[MAXP];      /* float dtypes: values as double */
    int64_t *i[MAXP];     /* int / bool dtypes */
    char name[MAXP][200];
} results;

static void results_free(results *r) {
    for (int k = 0; k < r->n; k++) {
        free(r->f[k]);
        free(r->i[k]);
    }
    memset(r, 0, sizeof *r);
}

static int max_ops = 25;

/* Builds graph `seed`, realizes it, reads every live tensor into res. Returns 0, or -1 with
 * *why set when the realize / read failed. g->log gets the op list. */
static int run_graph(uint64_t seed, graph *g, results *res, char *why, size_t whyn) {
    memset(g->err, 0, sizeof g->err);
    g->r.s = seed * 0x2545F4914F6CDD1DULL + 12345;
    g->n = 0;
    g->next_id = 0;
    g->ngroups = 0;
    g->len = 0;
    if (g->log) g->log[0] = 0;
    st_manual_seed(seed);
    int nops = pr_range(&g->r, 5, max_ops);
    for (int k = 0; k < 2; k++) op_input(g);
    for (g->step = 0; g->step < nops; g->step++) {
        int x = pr_int(&g->r, 100);
        if (x < 8) op_input(g);
        else if (x < 20) op_unary(g);
        else if (x < 36) op_binary(g);
        else if (x < 43) op_scalar(g);
        else if (x < 47) op_where(g);
        else if (x < 50) op_clamp(g);
        else if (x < 55) op_cast(g);
        else if (x < 67) op_view(g);
        else if (x < 76) op_reduce(g);
        else if (x < 78) op_softmax(g);
        else if (x < 82) op_matmul(g);
        else if (x < 85) op_cat(g);
        else if (x < 89) op_gather(g);
        else if (x < 91) op_scatter(g);
        else if (x < 98) op_inplace(g);
        else op_random(g);
    }
    /* realize everything in one flush, then read it back */
    st_tensor *ts[MAXP];
    for (int k = 0; k < g->n; k++) ts[k] = g->e[k].t;
    int rc = 0;
    if (g->n & 1) { /* odd pools: a fixed half first, the rest left live outside that flush
                      * (values kept by handles: the cost model's stores, fuser/cost.c) */
        st_tensor *first[MAXP];
        int nf = 0;
        for (int k = 0; k < g->n; k++)
            if ((unsigned)k * 2654435761u >> 7 & 1) first[nf++] = ts[k];
        if (nf && st_realize(nf, first) != ST_OK) {
            snprintf(why, whyn, "st_realize failed: %s", st_last_error());
            st_clear_error();
            rc = -1;
        }
    }
    if (rc == 0 && st_realize(g->n, ts) != ST_OK) {
        snprintf(why, whyn, "st_realize failed: %s", st_last_error());
        st_clear_error();
        rc = -1;
    }
    memset(res, 0, sizeof *res);
    for (int k = 0; k < g->n && rc == 0; k++) {
        st_tensor *t = g->e[k].t;
        int64_t n = st_numel(t);
        st_dtype dt = st_dtype_of(t);
        res->dt[k] = dt;
        res->exact[k] = g->e[k].exact;
        res->numel[k] = n;
        desc(t, res->name[k], sizeof res->name[k]);
        char tmp[200];
        snprintf(tmp, sizeof tmp, "t%d %s", g->e[k].id, res->name[k]);
        memcpy(res->name[k], tmp, sizeof tmp);
        st_status s;
        if (isflt(dt)) {
            res->f[k] = malloc((size_t)(n ? n : 1) * sizeof(double));
            s = st_to_host(t, ST_F64, res->f[k], (size_t)n * sizeof(double));
        } else {
            res->i[k] = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
            s = st_to_host(t, ST_I64, res->i[k], (size_t)n * sizeof(int64_t));
        }
        res->n = k + 1;
        if (s != ST_OK) {
            snprintf(why, whyn, "st_to_host(%s) failed: %s", res->name[k], st_last_error());
            st_clear_error();
            rc = -1;
        }
    }
    for (int k = 0; k < g->n; k++) st_release(g->e[k].t);
    g->n = 0;
    return rc;
}

/* Compares the fused run b against the reference a; 0 when they agree, else -1 and *why. */
static int compare(const results *a, const results *b, const graph *ga, const graph *gb, char *why, size_t whyn) {
    for (int s = 0; s < MAXSTEPS; s++)
        if (ga->err[s] != gb->err[s]) {
            snprintf(why, whyn, "step %d: %s in eager, %s fused", s, ga->err[s] ? "error" : "ok", gb->err[s] ? "error" : "ok");
            return -1;
        }
    if (a->n != b->n) {
        snprintf(why, whyn, "%d tensors in eager, %d fused", a->n, b->n);
        return -1;
    }
    for (int k = 0; k < a->n; k++) {
        if (a->dt[k] != b->dt[k] || a->numel[k] != b->numel[k] || strcmp(a->name[k], b->name[k])) {
            snprintf(why, whyn, "tensor %s in eager, %s fused", a->name[k], b->name[k]);
            return -1;
        }
        st_dtype dt = a->dt[k];
        if (!isflt(dt)) {
            for (int64_t i = 0; i < a->numel[k]; i++)
                if (a->i[k][i] != b->i[k][i]) {
                    snprintf(why, whyn, "%s [%lld]: eager %lld, fused %lld", a->name[k], (long long)i,
                             (long long)a->i[k][i], (long long)b->i[k][i]);
                    return -1;
                }
            continue;
        }
        double rtol = dt == ST_F32 ? 1e-4 : dt == ST_F64 ? 1e-9 : dt == ST_F16 ? 1e-2 : 2e-2;
        double atol = dt == ST_F32 ? 1e-5 : dt == ST_F64 ? 1e-12 : dt == ST_F16 ? 1e-3 : 1e-2;
        double scale = 0;
        if (!a->exact[k]) /* inexact values: errors relative to the tensor's magnitude */
            for (int64_t i = 0; i < a->numel[k]; i++)
                if (isfinite(a->f[k][i])) scale = fmax(scale, fabs(a->f[k][i]));
        for (int64_t i = 0; i < a->numel[k]; i++) {
            double x = a->f[k][i], y = b->f[k][i];
            int ok;
            if (isnan(x) || isnan(y)) ok = isnan(x) && isnan(y);
            else if (isinf(x) || isinf(y) || a->exact[k]) ok = x == y;  /* exact: equal (+0 == -0) */
            else ok = fabs(x - y) <= atol + rtol * fmax(fabs(x), 0.1 * scale);
            if (!ok) {
                snprintf(why, whyn, "%s%s [%lld]: eager %.9g, fused %.9g", a->name[k], a->exact[k] ? "" : " ~",
                         (long long)i, x, y);
                return -1;
            }
        }
    }
    return 0;
}

/* ---- crash reporting: the seed being run is printed when the process dies ---- */
static char crash_msg[128];
static void on_crash(int sig) {
    (void)!write(1, crash_msg, strlen(crash_msg));
    signal(sig, SIG_DFL);
    raise(sig);
}
#ifdef FZ_HAVE_SAN_CALLBACK
static void on_san_death(void) { (void)!write(1, crash_msg, strlen(crash_msg)); }
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long ngraphs = 2000, jit_every = 4;
    uint64_t seed0 = 1;
    int verbose = 0;
    const char *device = NULL;   /* --device cuda: the fused run on a GPU, the reference on the cpu */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--graphs") && i + 1 < argc) ngraphs = strtol(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed0 = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--jit-every") && i + 1 < argc) jit_every = strtol(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--max-ops") && i + 1 < argc) max_ops = (int)strtol(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--verbose")) verbose = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--graphs N] [--seed S] [--jit-every K] [--max-ops M] [--device D] [--verbose]\n",
                    argv[0]);
            return 2;
        }
    }
    if (jit_every < 1) jit_every = 1;
    if (max_ops < 5) max_ops = 5;
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGFPE, on_crash);
    signal(SIGABRT, on_crash);
#ifdef FZ_HAVE_SAN_CALLBACK
    __sanitizer_set_death_callback(on_san_death);
#endif
    st_set_poison(1);
    if (device && st_set_default_device(device) != ST_OK) {
        printf("FAIL fuzz_device: %s\n", st_last_error());
        return 1;
    }
    graph ga = {0}, gb = {0};
    results ra, rb;
    int nfail = 0, njit = 0;
    double t0 = now_s();
    st_stats_t s0;
    st_stats(&s0);
    uint64_t base = s0.bytes_in_use;
    for (long gi = 0; gi < ngraphs; gi++) {
        uint64_t seed = seed0 + (uint64_t)gi;
        int jit = gi % jit_every == 0;
        njit += jit;
        snprintf(crash_msg, sizeof crash_msg, "FAIL fuzz_seed_%llu: crashed (%s; rerun with --seed %llu --graphs 1 --verbose)\n",
                 (unsigned long long)seed, jit ? "jit" : "default tier", (unsigned long long)seed);
        char why[600] = "";
        int bad = 0;
        st_set_eager(1);
        st_set_jit_min(32768);
        if (device) st_set_default_device("cpu");
        if (run_graph(seed, &ga, &ra, why, sizeof why) != 0) {
            bad = 1;
            char tmp[600];
            snprintf(tmp, sizeof tmp, "eager run: %s", why);
            memcpy(why, tmp, sizeof why);
        }
        st_set_eager(0);
        st_set_jit_min(jit ? 0 : 32768);
        if (device) st_set_default_device(device);
        uint64_t fb0 = fuse_plan_fallbacks();
        if (!bad && run_graph(seed, &gb, &rb, why, sizeof why) != 0) bad = 1;
        else if (!bad && compare(&ra, &rb, &ga, &gb, why, sizeof why) != 0) bad = 1;
        else if (!bad && fuse_plan_fallbacks() != fb0) {
            /* right values, but the plan was invalid: the region ran op by op (ST_DEBUG=1 says why) */
            snprintf(why, sizeof why, "%llu region(s) fell back to the interpreter after a planning error",
                     (unsigned long long)(fuse_plan_fallbacks() - fb0));
            bad = 1;
        }
        if (!bad) {
            st_stats_t s;
            st_stats(&s);
            if (s.bytes_in_use != base) {
                snprintf(why, sizeof why, "leak: %lld bytes in use after releasing every tensor",
                         (long long)(s.bytes_in_use - base));
                base = s.bytes_in_use;
                bad = 1;
            }
        }
        if (bad) {
            nfail++;
            if (nfail <= 20) {
                printf("FAIL fuzz_seed_%llu: %s (%s)\n%s", (unsigned long long)seed, why, jit ? "jit_min 0" : "default jit_min",
                       gb.log && gb.len ? gb.log : ga.log ? ga.log : "");
                fflush(stdout);
            }
        } else if (verbose) {
            printf("# seed %llu ok (%s)\n%s", (unsigned long long)seed, jit ? "jit" : "default tier", gb.log ? gb.log : "");
        }
        results_free(&ra);
        results_free(&rb);
        st_clear_error();
    }
    double dt = now_s() - t0;
    st_stats_t s1;
    st_stats(&s1);
    if (nfail == 0) printf("PASS fuzz_%ld_graphs\n", ngraphs);
    else if (nfail > 20) printf("FAIL fuzz: %d more failing graphs not shown\n", nfail - 20);
    printf("# fuzz: %ld graphs from seed %llu in %.1f s (%.1f graphs/s); %d fused with jit_min 0 (1 in %ld), "
           "the rest with the default jit_min (interpreter tier); %llu kernels compiled in %llu compiler calls "
           "(%.1f s), %llu launched, %llu memory cache hits; %d failed\n",
           ngraphs, (unsigned long long)seed0, dt, ngraphs / (dt > 0 ? dt : 1), njit, jit_every,
           (unsigned long long)(s1.kernels_compiled - s0.kernels_compiled),
           (unsigned long long)(s1.compile_calls - s0.compile_calls), (s1.compile_ms - s0.compile_ms) / 1e3,
           (unsigned long long)(s1.kernels_launched - s0.kernels_launched),
           (unsigned long long)(s1.cache_hits_memory - s0.cache_hits_memory), nfail);
    free(ga.log);
    free(gb.log);
    st_shutdown();
    return nfail ? 1 : 0;
}
