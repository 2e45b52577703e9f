/*
 * grad.c — the gradient rules: one function per GRAD(f) of trace/ops.def, and the adjoints they
 * share (views, gathers).
 *
 * A rule records the gradient of each src of a node from the node's gradient, with the public
 * tensor ops: the backward pass is ordinary trace work, fused with the forward pass and the
 * optimizer step. The table `rules` is generated from ops.def, so an op whose row names a rule
 * this file lacks does not build. grad_apply runs a node's rule and adds its answers to the
 * pending gradients of the srcs that require grad (autograd.c walks the nodes).
 */
#include "runtime/autograd.h"

#include <math.h>

/* ---- the grad_arena: the temporaries of one rule, released together; the first failure's message is
 * kept (later calls receive NULL arguments and would overwrite it) ---- */

static st_tensor *keep(grad_arena *A, st_tensor *t) {
    if (!t) {
        if (A->status == ST_OK) {
            A->status = st_last_status() ? st_last_status() : ST_ERR_INTERNAL;
            snprintf(A->msg, sizeof A->msg, "%s", base_error_raw()); /* marks kept */
        }
        return NULL;
    }
    if (A->n == GRAD_ARENA_MAX) { /* a rule never needs this many; fail rather than leak */
        st_release(t);
        if (A->status == ST_OK) {
            A->status = ST_ERR_INTERNAL;
            snprintf(A->msg, sizeof A->msg, "backward: too many temporaries in one rule");
        }
        return NULL;
    }
    return A->t[A->n++] = t;
}

static void arena_check(grad_arena *A, st_status s) {
    if (s != ST_OK && A->status == ST_OK) {
        A->status = s;
        snprintf(A->msg, sizeof A->msg, "%s", base_error_raw()); /* marks kept */
    }
}

void grad_arena_free(grad_arena *A) {
    for (int i = 0; i < A->n; i++) st_release(A->t[i]);
    A->n = 0;
}

/* A tensor whose value is node n (a new handle on a new storage). */
static st_tensor *wrap(grad_arena *A, st_node *n) {
    return keep(A, st_tensor_from_node(st_node_retain(n)));
}

/* The adjoint of y = gather(x, d, idx). One pick per row (idx of x's shape but size 1 along d:
 * cross-entropy's target, nll_loss, take_along_dim of an argmax) is pointwise, a one-hot mask:
 * dx[.., j, ..] = (j == idx[.., 0, ..]) ? g[.., 0, ..] : 0, which fuses with the rest of the
 * backward (softmax's, in cross-entropy) instead of a zeros buffer and a serial scatter. Several
 * picks per row may repeat an index and must add up: scatter_add into zeros. */
static st_tensor *gather_adjoint(grad_arena *A, const st_ag *ag, st_tensor *g) {
    st_node *s0 = ag->src[0], *s1 = ag->src[1];
    int d = ag->arg.axis.dim, nd = s0->ndim;
    bool one = s1->shape[d] == 1;
    for (int e = 0; e < nd && one; e++) one = e == d || s1->shape[e] == s0->shape[e];
    if (!one) {
        st_tensor *z = keep(A, st_zeros((st_dtype)s0->dtype, nd, s0->shape));
        return keep(A, st_scatter_add(z, d, wrap(A, s1), g));
    }
    int64_t ishape[ST_MAX_DIMS];
    for (int e = 0; e < nd; e++) ishape[e] = e == d ? s0->shape[d] : 1;
    st_tensor *j = keep(A, st_arange(0, (double)s0->shape[d], 1, (st_dtype)s1->dtype));
    st_tensor *jv = keep(A, st_reshape(j, nd, ishape));
    st_tensor *hit = keep(A, st_eq(jv, wrap(A, s1)));
    st_tensor *zero = keep(A, st_zeros((st_dtype)g->dtype, 0, NULL));
    return keep(A, st_where(hit, g, zero));
}

/* Add contribution c (borrowed; shape of src) to src's pending gradient. */
static void contribute(grad_arena *A, st_node *src, st_tensor *c) {
    if (!c || !src->ag || A->status != ST_OK) return;
    char b1[128], b2[128];
    if (c->ndim != src->ndim || memcmp(c->shape, src->shape, src->ndim * sizeof *src->shape) != 0) {
        A->status = ST_ERR_INTERNAL;
        snprintf(A->msg, sizeof A->msg, "backward: a gradient of shape %s was computed for a value "
                 "of shape %s (op %s)", st_shape_str(c->ndim, c->shape, b1, sizeof b1),
                 st_shape_str(src->ndim, src->shape, b2, sizeof b2), st_ops[src->op].name);
        return;
    }
    if (c->dtype != src->dtype) c = keep(A, st_cast(c, (st_dtype)src->dtype));
    if (!c) return;
    st_tensor *sum = src->ag->grad ? st_add(src->ag->grad, c) : st_retain(c);
    if (!sum) {
        keep(A, NULL);
        return;
    }
    st_release(src->ag->grad);
    src->ag->grad = sum;
}

static st_tensor *scal(grad_arena *A, double v) { return keep(A, st_weak_scalar_f(v)); }

static int axes_of(uint32_t mask, int ndim, int *axes) {
    int n = 0;
    for (int d = 0; d < ndim; d++)
        if (mask & (1u << d)) axes[n++] = d;
    return n;
}

/* A is injective over the dims of size > 1 (no two multi-indices reach one element) and inside
 * [0, numel). */
static int view_injective(int nd, const int64_t *s, const int64_t *t, int64_t o, int64_t numel) {
    int idx[ST_MAX_DIMS], k = 0;
    int64_t last = o;
    for (int d = 0; d < nd; d++) {
        if (s[d] == 1) continue;
        if (t[d] <= 0) return 0;
        idx[k++] = d;
        last += (s[d] - 1) * t[d];
    }
    if (o < 0 || last >= numel) return 0;
    for (int i = 1; i < k; i++) /* sort by stride */
        for (int j = i; j > 0 && t[idx[j]] < t[idx[j - 1]]; j--) {
            int x = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = x;
        }
    int64_t span = 0; /* largest offset reachable with the smaller strides */
    for (int i = 0; i < k; i++) {
        int d = idx[i];
        if (t[d] <= span) return 0;
        span += (s[d] - 1) * t[d];
    }
    return 1;
}

/* Maps each dim of a view (shape s, strides t, offset o) of a contiguous tensor of shape R (m
 * dims; C gets its strides) to a dim of R with the same stride (map[e]: the view dim, or -1),
 * and the offset to a corner (base) such that the view is the box base + [0, s) of R with its
 * dims permuted. False when it is not such a box. */
static int box_map(int nd, const int64_t *s, const int64_t *t, int64_t o, int m, const int64_t *R,
                   int64_t *C, int *map, int64_t *base) {
    st_contig_strides(m, R, C);
    for (int e = 0; e < m; e++) map[e] = -1;
    for (int d = 0; d < nd; d++) {
        if (s[d] == 1) continue;
        int found = -1;
        for (int e = 0; e < m && found < 0; e++)
            if (map[e] < 0 && R[e] > 1 && C[e] == t[d] && R[e] >= s[d]) found = e;
        if (found < 0) return 0;
        map[found] = d;
    }
    int64_t rem = o;
    for (int e = 0; e < m; e++) {
        base[e] = C[e] ? rem / C[e] : 0;
        rem -= base[e] * C[e];
    }
    if (m > 0 && base[0] >= R[0]) return 0;
    for (int e = 0; e < m; e++)
        if (map[e] >= 0 && base[e] + s[map[e]] > R[e]) return 0;
    return 1;
}

/* Splits the dims of contiguous shape S (m dims) where a view's strides cut them: a dim of
 * stride c and extent c*S[e] is cut at each stride b (a view dim's t or t*s) with c < b <
 * c*S[e] that c divides and that divides the extent. *rm, R get the split shape (same layout).
 * False when nothing is cut, the cuts do not nest or there are too many dims. */
static int split_dims(int nd, const int64_t *s, const int64_t *t, int m, const int64_t *S, int *rm,
                      int64_t *R) {
    int64_t C[ST_MAX_DIMS];
    st_contig_strides(m, S, C);
    int k = 0;
    for (int e = 0; e < m; e++) {
        int64_t c = C[e], ext = c * S[e], cuts[2 * ST_MAX_DIMS];
        int nc = 0;
        for (int d = 0; d < nd; d++) {
            if (s[d] <= 1) continue;
            int64_t cand[2] = {t[d], t[d] * s[d]};
            for (int i = 0; i < 2; i++) {
                int64_t b = cand[i], dup = 0;
                if (b <= c || b >= ext || b % c || ext % b) continue;
                for (int j = 0; j < nc; j++) dup |= cuts[j] == b;
                if (!dup) cuts[nc++] = b;
            }
        }
        for (int i = 1; i < nc; i++) /* decreasing */
            for (int j = i; j > 0 && cuts[j] > cuts[j - 1]; j--) {
                int64_t x = cuts[j];
                cuts[j] = cuts[j - 1];
                cuts[j - 1] = x;
            }
        int64_t hi = ext;
        for (int i = 0; i <= nc; i++) {
            int64_t lo = i < nc ? cuts[i] : c;
            if (hi % lo || k == ST_MAX_DIMS) return 0;
            R[k++] = hi / lo;
            hi = lo;
        }
    }
    if (k == m) return 0;
    *rm = k;
    return 1;
}

/* r (over the split shape of split_dims) reshaped to src's shape; r itself when unsplit. */
static st_tensor *unsplit(grad_arena *A, st_tensor *r, const st_node *src) {
    if (!r || st_ndim(r) == src->ndim) return r;
    return keep(A, st_reshape(r, src->ndim, src->shape));
}

static st_tensor *view_adjoint_of(grad_arena *A, st_node *src, st_tensor *g, int nd, int64_t *s, int64_t *t,
                                  int64_t o);
enum { VIEW_MAX_TAPS = 49 };   /* overlapping windows: at most this many terms (a 7x7 window) */

/* The adjoint of a VIEW: the gradient of src (shape S) from the gradient g of the view. */
static st_tensor *view_adjoint(grad_arena *A, const st_ag *ag, const st_node *n, st_tensor *g) {
    const st_view_arg *va = &ag->arg.view;
    st_node *src = ag->src[0];
    int nd = n->ndim, m = src->ndim;
    st_dtype dt = (st_dtype)src->dtype;
    int64_t s[ST_MAX_DIMS], t[ST_MAX_DIMS], o = va->offset;
    memcpy(s, n->shape, sizeof s);
    memcpy(t, va->strides, sizeof t);
    /* 1. only elements inside the mask read src */
    if (va->has_mask) {
        for (int d = 0; d < nd; d++) {
            int64_t lo = va->lo[d] > 0 ? va->lo[d] : 0, hi = va->hi[d] < s[d] ? va->hi[d] : s[d];
            if (hi <= lo) return keep(A, st_zeros(dt, m, src->shape));
            if (lo > 0 || hi < s[d]) {
                g = keep(A, st_slice(g, d, lo, hi, 1));
                o += lo * t[d];
                s[d] = hi - lo;
            }
        }
    }
    /* 2. broadcast dims: every element of the dim read the same src element */
    int axes[ST_MAX_DIMS], na = 0;
    for (int d = 0; d < nd; d++)
        if (t[d] == 0 && s[d] > 1) axes[na++] = d;
    if (na) {
        g = keep(A, st_sum(g, na, axes, 1));
        for (int i = 0; i < na; i++) s[axes[i]] = 1;
    }
    if (!g) return NULL;
    return view_adjoint_of(A, src, g, nd, s, t, o);
}

/* The adjoint of a view of src with shape s, strides t and offset o (no mask, no broadcast dim)
 * read as g. */
static st_tensor *view_adjoint_of(grad_arena *A, st_node *src, st_tensor *g, int nd, int64_t *s, int64_t *t,
                                  int64_t o) {
    int m = src->ndim;
    st_dtype dt = (st_dtype)src->dtype;
    /* 3. the whole src in C order: a reshape */
    if (st_shape_numel(nd, s) == src->numel && o == 0 && st_is_contiguous_view(nd, s, t))
        return keep(A, st_reshape(g, m, src->shape));
    /* 3b. all of src, permuted (a reshape and a permute: NHWC read as NCHW): its dims, taken by
     * decreasing stride, are a C-contiguous layout of src, so g permuted into that order and
     * reshaped is the gradient — a pointwise copy rather than a scatter into zeros */
    if (st_shape_numel(nd, s) == src->numel && o == 0) {
        int order[ST_MAX_DIMS], k = 0, ok3 = 1;
        for (int d = 0; d < nd; d++)
            if (s[d] > 1) order[k++] = d;
        for (int i = 1; i < k; i++) /* by decreasing stride */
            for (int j = i; j > 0 && t[order[j]] > t[order[j - 1]]; j--) {
                int x = order[j];
                order[j] = order[j - 1];
                order[j - 1] = x;
            }
        int64_t expect = 1;
        for (int i = k - 1; i >= 0 && ok3; i--) {
            ok3 = t[order[i]] == expect;
            expect *= s[order[i]];
        }
        if (ok3) {
            for (int d = 0; d < nd; d++)
                if (s[d] <= 1) order[k++] = d;
            st_tensor *p = keep(A, st_permute(g, order));
            return p ? keep(A, st_reshape(p, m, src->shape)) : NULL;
        }
    }
    /* 4. a box of src with its dims permuted (slices, selects, transposes): a masked view of g.
     * src's dims may first be split where the view's strides cut them (q, k, v selected from a
     * (B, L, 3C) projection viewed as (3, B, H, L, D)): the masked view is then over the split
     * shape and reshaped back, so the three gradients add up in one pointwise kernel instead of
     * three copies into zeros */
    int64_t C[ST_MAX_DIMS], base[ST_MAX_DIMS], R[ST_MAX_DIMS];
    int map[ST_MAX_DIMS], rm = m;
    memcpy(R, src->shape, sizeof R);
    int ok = o >= 0 && box_map(nd, s, t, o, rm, R, C, map, base);
    if (!ok && o >= 0 && split_dims(nd, s, t, m, src->shape, &rm, R))
        ok = box_map(nd, s, t, o, rm, R, C, map, base);
    m = rm;
    if (ok && o >= 0 && nd == m) {
        /* no box, just a permutation: a tensor-level permute composes with g's own view (g is
         * often a transposed handle itself), so the result can be read without a copy */
        int perm[ST_MAX_DIMS], used[ST_MAX_DIMS] = {0}, full = 1;
        for (int e = 0; e < m && full; e++) {
            full = base[e] == 0 && (map[e] >= 0 ? s[map[e]] == R[e] : R[e] == 1);
            perm[e] = map[e];
            if (map[e] >= 0) used[map[e]] = 1;
        }
        for (int e = 0; e < m && full; e++) {
            if (perm[e] >= 0) continue;
            int d = 0;
            while (d < nd && (used[d] || s[d] != 1)) d++;
            if (d == nd) full = 0;
            else perm[e] = d, used[d] = 1;
        }
        if (full) return unsplit(A, keep(A, st_permute(g, perm)), src);
    }
    if (ok && o >= 0) {
        int64_t G[ST_MAX_DIMS];
        st_contig_strides(nd, s, G);
        st_node_arg a;
        memset(&a, 0, sizeof a);
        int mask = 0;
        for (int e = 0; e < m; e++) {
            int d = map[e];
            a.view.strides[e] = d >= 0 ? G[d] : 0;
            a.view.offset -= d >= 0 ? base[e] * G[d] : 0;
            a.view.lo[e] = base[e];
            a.view.hi[e] = base[e] + (d >= 0 ? s[d] : 1);
            mask |= a.view.lo[e] != 0 || a.view.hi[e] != R[e];
        }
        a.view.has_mask = mask;
        if (!mask) memset(a.view.lo, 0, sizeof a.view.lo + sizeof a.view.hi);
        st_node *gn = st_tensor_read(g, dt, nd, s);
        if (!gn) return keep(A, NULL);
        st_node *v = st_node_new(ST_OP_VIEW, dt, m, R, 1, &gn, &a);
        st_node_release(gn);
        return unsplit(A, keep(A, st_tensor_from_node(v)), src);
    }
    /* 5. any other injective view (step slices): write g into zeros */
    m = src->ndim;
    if (view_injective(nd, s, t, o, src->numel)) {
        /* zeros on g's device: copy_ into an unbound tensor would move g to the default device */
        st_tensor *z0 = keep(A, st_zeros(dt, m, src->shape));
        st_tensor *z = z0 ? keep(A, st_tensor_from_node(st_node_bind_dev(st_node_retain(z0->storage->node),
                                                                          st_node_dev(g->storage->node))))
                          : NULL;
        st_tensor *v = z ? keep(A, st_tensor_view(z, nd, s, t, o)) : NULL;
        if (v) arena_check(A, st_copy_(v, g));
        return z;
    }
    /* 6. overlapping windows (as_strided: unfold's (N, C, kh, kw, Ho, Wo) of an image): the sum,
     * over the indices of the fewest, shortest dims whose removal leaves an injective view, of
     * the gradients of those injective views (a 3x3 window: 9 masked reads of g, added in one
     * pointwise kernel) */
    int dims[ST_MAX_DIMS], k = 0, drop[ST_MAX_DIMS], nds = 0;
    for (int d = 0; d < nd; d++)
        if (s[d] > 1) dims[k++] = d;
    int64_t terms = VIEW_MAX_TAPS + 1, s1[ST_MAX_DIMS];
    unsigned best = 0;
    for (unsigned mask = 1; o >= 0 && mask < (1u << k); mask++) { /* the subset with the fewest terms */
        int64_t prod = 1;
        memcpy(s1, s, sizeof s1);
        for (int i = 0; i < k; i++)
            if (mask >> i & 1) prod *= s[dims[i]], s1[dims[i]] = 1;
        if (prod < terms && view_injective(nd, s1, t, o, src->numel)) terms = prod, best = mask;
    }
    memcpy(s1, s, sizeof s1);
    for (int i = 0; i < k; i++)
        if (best >> i & 1) drop[nds++] = dims[i], s1[dims[i]] = 1;
    if (nds > 0) {
        st_tensor *sum = NULL;
        for (int64_t q = 0; q < terms; q++) {
            st_tensor *gs = st_retain(g);
            int64_t oq = o, r = q, sq[ST_MAX_DIMS];
            memcpy(sq, s1, sizeof sq);
            for (int i = nds - 1; i >= 0 && gs; i--) { /* the term's index in each dropped dim */
                int d = drop[i];
                int64_t at = r % s[d];
                r /= s[d];
                st_tensor *next = st_slice(gs, d, at, at + 1, 1);
                st_release(gs);
                gs = next;
                oq += at * t[d];
            }
            st_tensor *part = gs ? view_adjoint_of(A, src, keep(A, gs), nd, sq, t, oq) : keep(A, NULL);
            if (!part) return NULL;
            sum = sum ? keep(A, st_add(sum, part)) : part;
            if (!sum) return NULL;
        }
        return sum;
    }
    char b[128];
    A->status = ST_ERR_INTERNAL;
    snprintf(A->msg, sizeof A->msg, "backward: the gradient of a view with overlapping elements "
             "(shape %s) is not supported (more than %d overlapping windows)",
             st_shape_str(nd, s, b, sizeof b), (int)VIEW_MAX_TAPS);
    return NULL;
}

/* The last two dims of node n swapped. When n is itself an unmasked VIEW (a transposed weight),
 * the result is one view of n's source rather than a view of a view, which the fuser would have
 * to materialize before a matmul could read it. */
/* n's view argument and source when n is a VIEW (its record keeps them once n is realized). */
static const st_view_arg *view_of(const st_node *n, st_node **src) {
    if (n->op == ST_OP_VIEW) return *src = n->src[0], &n->arg.view;
    if (n->ag && n->ag->op == ST_OP_VIEW) return *src = n->ag->src[0], &n->ag->arg.view;
    return NULL;
}

static st_tensor *transposed(grad_arena *A, st_node *n, st_tensor *wrapped) {
    st_node *src = NULL;
    const st_view_arg *va = view_of(n, &src);
    int nd = n->ndim;
    if (!va || va->has_mask || nd < 2) return keep(A, st_transpose(wrapped, -2, -1));
    int64_t shape[ST_MAX_DIMS], strides[ST_MAX_DIMS];
    memcpy(shape, n->shape, sizeof shape);
    memcpy(strides, va->strides, sizeof strides);
    shape[nd - 2] = n->shape[nd - 1], shape[nd - 1] = n->shape[nd - 2];
    strides[nd - 2] = va->strides[nd - 1], strides[nd - 1] = va->strides[nd - 2];
    st_tensor *base = wrap(A, src);
    return base ? keep(A, st_tensor_view(base, nd, shape, strides, va->offset)) : NULL;
}

/* Applies n's rule to its gradient g, contributing to the srcs that require grad. */

/* ---- the rules: grad_<f> for each GRAD(f) of trace/ops.def ----
 * In a rule: c->g is the node's gradient, X() Y() OUT() the handles on its srcs and its value
 * (ops whose READS column is 1), K(e) keeps a temporary in the arena; the answer for src i goes to
 * c->d[i], computed only when that src requires grad (c->s0->ag, c->s1->ag). */
#define X() (c->x)
#define Y() (c->y)
#define OUT() (c->out)
#define K(e) keep(c->A, (e))

static void grad_view(grad_ctx *c) { c->d[0] = view_adjoint(c->A, c->ag, c->n, c->g); }
static void grad_cast(grad_ctx *c) { c->d[0] = K(st_cast(c->g, (st_dtype)c->s0->dtype)); }
static void grad_neg(grad_ctx *c) { c->d[0] = K(st_neg(c->g)); }
static void grad_abs(grad_ctx *c) { c->d[0] = K(st_mul(c->g, K(st_sign(X())))); }
static void grad_exp(grad_ctx *c) { c->d[0] = K(st_mul(c->g, OUT())); }
static void grad_log(grad_ctx *c) { c->d[0] = K(st_div(c->g, X())); }
static void grad_sqrt(grad_ctx *c) { c->d[0] = K(st_div(c->g, K(st_mul_s(OUT(), 2)))); }
static void grad_rsqrt(grad_ctx *c) { /* -0.5 x^-1.5 = -0.5 out^3 */
    c->d[0] = K(st_mul(c->g, K(st_mul_s(K(st_mul(OUT(), K(st_mul(OUT(), OUT())))), -0.5))));
}
static void grad_sin(grad_ctx *c) { c->d[0] = K(st_mul(c->g, K(st_cos(X())))); }
static void grad_cos(grad_ctx *c) { c->d[0] = K(st_neg(K(st_mul(c->g, K(st_sin(X())))))); }
static void grad_tanh(grad_ctx *c) { c->d[0] = K(st_mul(c->g, K(st_rsub_s(K(st_mul(OUT(), OUT())), 1)))); }
static void grad_sigmoid(grad_ctx *c) { c->d[0] = K(st_mul(c->g, K(st_mul(OUT(), K(st_rsub_s(OUT(), 1)))))); }
static void grad_relu(grad_ctx *c) {
    c->d[0] = K(st_where(K(st_gt(X(), scal(c->A, 0))), c->g, scal(c->A, 0)));
}
static void grad_gelu(grad_ctx *c) { c->d[0] = K(st_mul(c->g, K(st_gelu_grad(X())))); } /* Phi(x) + x phi(x) */
static void grad_gelu_grad(grad_ctx *c) { /* d/dx (Phi(x) + x phi(x)) = phi(x) (2 - x^2) */
    st_tensor *x2 = K(st_mul(X(), X()));
    st_tensor *pdf = K(st_mul_s(K(st_exp(K(st_mul_s(x2, -0.5)))), 0.39894228040143267794));
    c->d[0] = K(st_mul(c->g, K(st_mul(pdf, K(st_rsub_s(x2, 2))))));
}
static void grad_gelu_tanh(grad_ctx *c) { /* 0.5(1+t) + 0.5 x (1-t^2) k (1 + 3c x^2), t = tanh(k (x + c x^3)) */
    const double k = 0.79788456080286535588, cc = 0.044715;
    st_tensor *x2 = K(st_mul(X(), X()));
    st_tensor *u = K(st_mul_s(K(st_mul(X(), K(st_add_s(K(st_mul_s(x2, cc)), 1)))), k));
    st_tensor *th = K(st_tanh(u));
    st_tensor *left = K(st_mul_s(K(st_add_s(th, 1)), 0.5));
    st_tensor *sech2 = K(st_rsub_s(K(st_mul(th, th)), 1));
    st_tensor *du = K(st_mul_s(K(st_add_s(K(st_mul_s(x2, 3 * cc)), 1)), k));
    st_tensor *right = K(st_mul_s(K(st_mul(K(st_mul(X(), sech2)), du)), 0.5));
    c->d[0] = K(st_mul(c->g, K(st_add(left, right))));
}
static void grad_silu(grad_ctx *c) { /* s (1 + x (1 - s)) */
    st_tensor *sg = K(st_sigmoid(X()));
    c->d[0] = K(st_mul(c->g, K(st_mul(sg, K(st_add_s(K(st_mul(X(), K(st_rsub_s(sg, 1)))), 1))))));
}
static void grad_recip(grad_ctx *c) { c->d[0] = K(st_neg(K(st_mul(c->g, K(st_mul(OUT(), OUT())))))); }
static void grad_log1p(grad_ctx *c) { c->d[0] = K(st_div(c->g, K(st_add_s(X(), 1)))); }
static void grad_expm1(grad_ctx *c) { c->d[0] = K(st_mul(c->g, K(st_add_s(OUT(), 1)))); }
static void grad_erf(grad_ctx *c) { /* 2/sqrt(pi) exp(-x^2) */
    c->d[0] = K(st_mul(c->g, K(st_mul_s(K(st_exp(K(st_neg(K(st_mul(X(), X())))))), 1.12837916709551257390))));
}
static void grad_add(grad_ctx *c) { c->d[0] = c->d[1] = c->g; }
static void grad_sub(grad_ctx *c) {
    c->d[0] = c->g;
    c->d[1] = c->s1->ag ? K(st_neg(c->g)) : NULL;
}
static void grad_mul(grad_ctx *c) {
    c->d[0] = c->s0->ag ? K(st_mul(c->g, Y())) : NULL;
    c->d[1] = c->s1->ag ? K(st_mul(c->g, X())) : NULL;
}
static void grad_div(grad_ctx *c) {
    c->d[0] = c->s0->ag ? K(st_div(c->g, Y())) : NULL;
    c->d[1] = c->s1->ag ? K(st_neg(K(st_div(K(st_mul(c->g, OUT())), Y())))) : NULL;
}
static void grad_pow(grad_ctx *c) {
    st_tensor *zero = scal(c->A, 0);
    if (c->s0->ag) { /* y x^(y-1), 0 where y == 0 */
        st_tensor *d = K(st_mul(Y(), K(st_pow(X(), K(st_sub_s(Y(), 1))))));
        c->d[0] = K(st_mul(c->g, K(st_where(K(st_eq(Y(), zero)), zero, d))));
    }
    if (c->s1->ag) { /* out log x, 0 where x == 0 */
        st_tensor *d = K(st_mul(OUT(), K(st_log(X()))));
        c->d[1] = K(st_mul(c->g, K(st_where(K(st_eq(X(), zero)), zero, d))));
    }
}
/* maximum / minimum: ties split the gradient in half, like torch.maximum */
static void grad_maxmin2(grad_ctx *c, st_tensor *win) {
    st_dtype dt = (st_dtype)c->n->dtype;
    st_tensor *tie = K(st_mul_s(K(st_cast(K(st_eq(X(), Y())), dt)), 0.5));
    st_tensor *wa = K(st_add(K(st_cast(win, dt)), tie));
    if (c->s0->ag) c->d[0] = K(st_mul(c->g, wa));
    if (c->s1->ag) c->d[1] = K(st_mul(c->g, K(st_rsub_s(wa, 1))));
}
static void grad_max(grad_ctx *c) { grad_maxmin2(c, K(st_gt(X(), Y()))); }
static void grad_min(grad_ctx *c) { grad_maxmin2(c, K(st_lt(X(), Y()))); }
/* fmod / remainder: a - q b: d/da = 1, d/db = -q (q truncated or floored) */
static void grad_mod(grad_ctx *c, bool floored) {
    c->d[0] = c->g;
    if (c->s1->ag) {
        st_tensor *q = K(st_div(X(), Y()));
        if (floored) q = K(st_floor(q));
        else q = K(st_where(K(st_lt(q, scal(c->A, 0))), K(st_ceil(q)), K(st_floor(q))));
        c->d[1] = K(st_neg(K(st_mul(c->g, q))));
    }
}
static void grad_fmod(grad_ctx *c) { grad_mod(c, false); }
static void grad_rem(grad_ctx *c) { grad_mod(c, true); }
static void grad_where(grad_ctx *c) {
    st_tensor *cond = X(), *zero = scal(c->A, 0);
    if (c->s1->ag) c->d[1] = K(st_where(cond, c->g, zero));
    if (c->ag->src[2]->ag) c->d[2] = K(st_where(cond, zero, c->g));
}
static void grad_sum(grad_ctx *c) { c->d[0] = K(st_expand(c->g, c->s0->ndim, c->s0->shape)); }
static void grad_prod(grad_ctx *c) { c->d[0] = K(st_div(K(st_mul(c->g, OUT())), X())); }
static void grad_maxmin(grad_ctx *c) { /* split evenly between the elements equal to the result */
    int axes[ST_MAX_DIMS], na = axes_of(c->ag->arg.red.axes, c->s0->ndim, axes);
    st_tensor *hit = K(st_eq(X(), OUT()));
    st_tensor *cnt = K(st_sum(K(st_cast(hit, (st_dtype)c->n->dtype)), na, axes, 1));
    c->d[0] = K(st_where(hit, K(st_expand(K(st_div(c->g, cnt)), c->s0->ndim, c->s0->shape)), scal(c->A, 0)));
}
static void grad_matmul(grad_ctx *c) {
    st_node *s0 = c->s0, *s1 = c->s1;
    if (s0->ag) c->d[0] = K(st_matmul(c->g, transposed(c->A, s1, Y())));
    if (s1->ag) {
        /* B read transposed (x @ W^T, every Linear): compute (g^T @ x)^T, so that W's
         * gradient comes out as a plain matmul result in W's own layout */
        st_node *bsrc;
        const st_view_arg *bv = view_of(s1, &bsrc);
        int nb = s1->ndim;
        if (bv && !bv->has_mask && nb >= 2 && bv->strides[nb - 2] == 1 && bv->strides[nb - 1] > 1)
            c->d[1] = K(st_transpose(K(st_matmul(K(st_transpose(c->g, -2, -1)), X())), -2, -1));
        else c->d[1] = K(st_matmul(transposed(c->A, s0, X()), c->g));
    }
}
static void grad_gather(grad_ctx *c) { c->d[0] = gather_adjoint(c->A, c->ag, c->g); }
static void grad_scatter_add(grad_ctx *c) {
    c->d[0] = c->g;
    if (c->ag->src[2]->ag) c->d[2] = K(st_gather(c->g, c->ag->arg.axis.dim, Y()));
}
static void grad_setview(grad_ctx *c) {
    const st_view_arg *va = &c->ag->arg.view;
    st_node *s1 = c->s1;
    if (c->s0->ag) { /* g with the overwritten region zeroed */
        st_tensor *gc = K(st_tensor_from_node(st_ag_detached_read(c->g, (st_dtype)c->g->dtype)));
        st_tensor *reg = gc ? K(st_tensor_view(gc, s1->ndim, s1->shape, va->strides, va->offset)) : NULL;
        if (reg) arena_check(c->A, st_fill_(reg, 0));
        c->d[0] = gc;
    }
    if (s1->ag) { /* the region of g */
        st_tensor *gi = K(st_tensor_from_node(st_ag_detached_read(c->g, (st_dtype)c->g->dtype)));
        c->d[1] = gi ? K(st_tensor_view(gi, s1->ndim, s1->shape, va->strides, va->offset)) : NULL;
    }
}
/* Attention (flash-style): the scores are not kept, so they are computed again from q and k (one
 * more q k^T product than the composed form, whose autograd keeps P): with P = softmax(S),
 * S = q k^T * scale + M (M the mask, when there is one; keys after the query masked to -inf when
 * causal), G = P * (dP - sum(dP * P)), dP = g v^T: dv = P^T g, dq = G k * scale, dk = G^T q * scale,
 * dM = G (reduced to the mask's shape by its broadcast view's rule); with dropout, D the kept
 * weights' scale (st.rand's numbers of the forward's stream again, F.dropout's keep * 1/(1 - p)),
 * dv = (P D)^T g and dP = (g v^T) D: the composed form's gradients within rounding (its softmax's
 * backward goes through exp, sum and div rules: dq and dk differ in the last bits; dv, from the same
 * P, is the same). */
static void grad_attention(grad_ctx *c) {
    st_node *s2 = c->ag->src[2];
    st_tensor *v = wrap(c->A, s2);
    double scale = c->ag->arg.attn.scale;
    int nd = c->s0->ndim;
    int64_t Lq = c->s0->shape[nd - 2], Lk = c->s1->shape[nd - 2];
    st_tensor *s = K(st_mul_s(K(st_matmul(X(), transposed(c->A, c->s1, Y()))), scale));
    st_node *s3 = c->ag->nsrc > 3 ? c->ag->src[3] : NULL;
    if (s3) s = K(st_add(s, wrap(c->A, s3)));
    if (c->ag->arg.attn.causal) {
        int64_t rs[2] = {Lq, 1}, cs[2] = {1, Lk};
        st_tensor *ri = K(st_reshape(K(st_arange(0, (double)Lq, 1, ST_I64)), 2, rs));
        st_tensor *ci = K(st_reshape(K(st_arange(0, (double)Lk, 1, ST_I64)), 2, cs));
        s = K(st_where(K(st_ge(ri, ci)), s, scal(c->A, -INFINITY)));
    }
    st_tensor *p = K(st_softmax(s, -1)), *kept = NULL, *pd = p;
    const double drop = c->ag->arg.attn.drop;
    if (drop > 0) {
        int64_t ss[ST_MAX_DIMS];
        memcpy(ss, c->n->shape, (size_t)(nd - 1) * sizeof *ss);
        ss[nd - 1] = Lk;
        st_dtype dt = (st_dtype)c->n->dtype;
        st_tensor *u = K(st_rand_at(dt, nd, ss, c->ag->arg.attn.seed, c->ag->arg.attn.offset));
        /* (drop 1 keeps nothing: its scale, inf, would make 0 * inf) */
        kept = K(st_mul(K(st_cast(K(st_ge(u, scal(c->A, drop))), dt)), scal(c->A, drop < 1 ? 1.0 / (1.0 - drop) : 0)));
        pd = K(st_mul(p, kept));
    }
    if (s2->ag) c->d[2] = K(st_matmul(K(st_transpose(pd, -2, -1)), c->g));
    if (!c->s0->ag && !c->s1->ag && !(s3 && s3->ag)) return;
    st_tensor *dp = K(st_matmul(c->g, transposed(c->A, s2, v)));
    if (kept) dp = K(st_mul(dp, kept));
    int last = nd - 1;
    st_tensor *gs = K(st_mul(p, K(st_sub(dp, K(st_sum(K(st_mul(dp, p)), 1, &last, 1))))));
    if (s3 && s3->ag) c->d[3] = gs;
    if (!c->s0->ag && !c->s1->ag) return;
    st_tensor *ds = K(st_mul_s(gs, scale));
    if (c->s0->ag) c->d[0] = K(st_matmul(ds, Y()));
    if (c->s1->ag) c->d[1] = K(st_matmul(K(st_transpose(ds, -2, -1)), X()));
}
#undef X
#undef Y
#undef OUT
#undef K

/* ---- the table and the driver ---- */
typedef void (*grad_rule)(grad_ctx *c);
#define GRAD(f) grad_##f
#define NOGRAD NULL
static const grad_rule rules[ST_OP_COUNT] = {
#define X(NAME, KIND, NSRC, STR, MATH, DTYPE, COST, GRAD_, READS) [ST_OP_##NAME] = GRAD_,
#include "trace/ops.def"
#undef X
};
#undef GRAD
#undef NOGRAD

void grad_apply(grad_arena *A, st_node *n, st_tensor *g) {
    st_ag *ag = n->ag;
    grad_rule rule = rules[ag->op];
    if (!rule) {
        A->status = ST_ERR_INTERNAL;
        snprintf(A->msg, sizeof A->msg, "backward: no gradient rule for op %s", st_ops[ag->op].name);
        return;
    }
    grad_ctx c = {.A = A, .n = n, .ag = ag, .s0 = ag->src[0], .s1 = ag->nsrc > 1 ? ag->src[1] : NULL, .g = g};
    if (st_ops[ag->op].reads) { /* handles on the forward values (no work: a handle does not force
                                 * its node to be stored) */
        c.x = wrap(A, c.s0);
        c.y = c.s1 ? wrap(A, c.s1) : NULL;
        c.out = wrap(A, n);
    }
    rule(&c);
    for (int i = 0; i < ag->nsrc; i++) {
        if (!ag->src[i]->ag) continue;   /* an index or a condition: never requires grad */
        if (!c.d[i] && A->status == ST_OK) keep(A, NULL);
        contribute(A, ag->src[i], c.d[i]);
    }
}
