/*
 * autograd.c — reverse-mode differentiation, recorded into the lazy trace.
 *
 * A node that requires grad carries an st_ag record: for a leaf, the accumulator of its storage;
 * otherwise a copy of its op, arg and (its own references to) its srcs, which survive the node's
 * realization. Backward walks these records from the output in decreasing node id (ids grow along
 * every src edge, so that is a reverse topological order) and applies each op's rule written with
 * the public tensor ops: the gradient is recorded like any other work, and the fuser sees forward,
 * backward and the optimizer step as one trace.
 *
 * Invariants: records are created only while grad mode is on, and only for float nodes of
 * differentiable ops with at least one src that requires grad. A leaf node is held by its storage
 * alone (st_ag_mark_leaf gives the storage a fresh node when the old one is shared), so marking it
 * never makes an unrelated tensor require grad. Versions are immutable, so in-place ops on non-leaf
 * tensors differentiate like any other op (SETVIEW has a rule).
 */
#include "runtime/tensor.h"

int st_grad_mode = 1;

#define ST_GRAD_MODE_DEPTH 256
static uint8_t mode_stack[ST_GRAD_MODE_DEPTH];
static int mode_depth;
static uint64_t bw_epoch;

void st_grad_mode_push(int enabled) {
    if (mode_depth < ST_GRAD_MODE_DEPTH) mode_stack[mode_depth] = (uint8_t)st_grad_mode;
    mode_depth++;
    st_grad_mode = enabled != 0;
}

void st_grad_mode_pop(void) {
    if (mode_depth == 0) return;
    mode_depth--;
    st_grad_mode = mode_depth < ST_GRAD_MODE_DEPTH ? mode_stack[mode_depth] : 1;
}

int st_grad_enabled(void) { return st_grad_mode; }

/* ---- records ---- */

st_status st_ag_attach(st_node *n) {
    if (!st_grad_mode || !st_ops[n->op].diff || !st_is_float((st_dtype)n->dtype)) return ST_OK;
    int any = 0;
    for (int i = 0; i < n->nsrc; i++) any |= n->src[i]->ag != NULL;
    if (!any) return ST_OK;
    st_ag *ag = st_calloc(1, sizeof *ag);
    if (!ag) return st_last_status();
    ag->op = n->op;
    ag->nsrc = n->nsrc;
    for (int i = 0; i < n->nsrc; i++) ag->src[i] = st_node_retain(n->src[i]);
    ag->arg = n->arg;
    n->ag = ag;
    return ST_OK;
}

void st_ag_acc_release(st_grad_acc *acc) {
    if (acc && --acc->refcnt == 0) st_free(acc);
}

/* A new node with n's value that nobody else holds and that carries no record: a BUFFER sharing
 * n's data when n is realized, else an identity VIEW (computed at the next flush). */
static st_node *fresh_node(st_node *n) {
    st_grad_mode_push(0);
    st_node *m;
    if (n->op == ST_OP_BUFFER && n->buf) {
        m = st_node_new(ST_OP_BUFFER, (st_dtype)n->dtype, n->ndim, n->shape, 0, NULL, NULL);
        if (m) m->buf = st_buffer_retain(n->buf);
    } else {
        m = st_node_identity_view(n);
    }
    st_grad_mode_pop();
    return m;
}

st_status st_ag_mark_leaf(st_storage *s) {
    static const trace_ag_hooks hooks = {st_ag_attach, st_ag_acc_release};
    trace_set_ag_hooks(&hooks);   /* from the first leaf on, new nodes may need records */
    st_node *n = s->node;
    if (n->ag && n->ag->acc == s->acc) return ST_OK;
    if (n->refcnt > 1 || n->ag) {
        st_node *m = fresh_node(n);
        if (!m) return st_last_status();
        st_node_release(n);
        s->node = n = m;
    }
    st_ag *ag = st_calloc(1, sizeof *ag);
    if (!ag) return st_last_status();
    ag->acc = s->acc;
    s->acc->refcnt++;
    n->ag = ag;
    return ST_OK;
}

/* A node reading t (its view, dtype dt) that carries no autograd record. New reference. */
static st_node *detached_read(st_tensor *t, st_dtype dt) {
    st_grad_mode_push(0);
    st_node *n = st_tensor_read(t, dt, t->ndim, t->shape);
    st_grad_mode_pop();
    if (n && n->ag) {
        st_node *m = fresh_node(n);
        st_node_release(n);
        n = m;
    }
    return n;
}

/* ---- public API ---- */

static const char *shape_of(const st_tensor *t, char *b, size_t n) {
    return st_shape_str(t->ndim, t->shape, b, n);
}

st_status st_set_requires_grad(st_tensor *t, int on) {
    if (!t) return st_error(ST_ERR_ARG, "requires_grad: NULL tensor");
    char b[128];
    st_storage *s = t->storage;
    st_node *n = s->node;
    int nonleaf = n->ag && !n->ag->acc;
    if (!on) {
        if (nonleaf)
            return st_error(ST_ERR_ARG, "requires_grad: the tensor %s was computed from tensors that "
                            "require grad; only a leaf's flag can be turned off (use detach())",
                            shape_of(t, b, sizeof b));
        if (s->acc) s->acc->requires_grad = 0;
        if (n->ag) {
            st_ag_acc_release(n->ag->acc);
            st_free(n->ag);
            n->ag = NULL;
        }
        return ST_OK;
    }
    if (!st_is_float((st_dtype)t->dtype))
        return st_error(ST_ERR_DTYPE, "requires_grad: only float tensors can require grad (this one "
                        "is %s %s)", st_dtypes[t->dtype].name, shape_of(t, b, sizeof b));
    if (nonleaf) return ST_OK; /* already requires grad, through its inputs */
    if (!s->acc) {
        if (!(s->acc = st_calloc(1, sizeof *s->acc))) return st_last_status();
        s->acc->refcnt = 1;
    }
    s->acc->requires_grad = 1;
    return st_ag_mark_leaf(s);
}

int st_requires_grad(const st_tensor *t) { return t && t->storage->node->ag != NULL; }

int st_is_leaf(const st_tensor *t) {
    const st_ag *ag = t ? t->storage->node->ag : NULL;
    return !ag || ag->acc != NULL;
}

st_tensor *st_grad(st_tensor *t) {
    st_clear_error();
    if (!t) return NULL;
    st_grad_acc *acc = t->storage->acc;
    if (!acc || !acc->grad) return NULL;
    if (t->identity) return st_retain(acc->grad);
    return st_tensor_view(acc->grad, t->ndim, t->shape, t->strides, t->offset);
}

/* Replace acc's gradient by an identity tensor with g's value (g: new reference, taken over). */
static st_status acc_store(st_grad_acc *acc, st_tensor *g, st_dtype dt) {
    st_node *n = detached_read(g, dt);
    st_release(g);
    st_tensor *ng = st_tensor_from_node(n);
    if (!ng) return st_last_status();
    st_tensor *old = acc->grad;
    acc->grad = ng;
    st_release(old);
    return ST_OK;
}

st_status st_set_grad(st_tensor *t, st_tensor *g) {
    if (!t) return st_error(ST_ERR_ARG, "set_grad: NULL tensor");
    st_storage *s = t->storage;
    char b1[128], b2[128];
    if (!g) {
        if (s->acc && s->acc->grad) {
            st_tensor *old = s->acc->grad;
            s->acc->grad = NULL;
            st_release(old);
        }
        return ST_OK;
    }
    if (!t->identity)
        return st_error(ST_ERR_ARG, "set_grad: the tensor %s is a view; set the gradient of the whole "
                        "tensor it views", shape_of(t, b1, sizeof b1));
    if (g->ndim != t->ndim || memcmp(g->shape, t->shape, t->ndim * sizeof *t->shape) != 0)
        return st_error(ST_ERR_SHAPE, "set_grad: gradient shape %s does not match the tensor's shape %s",
                        shape_of(g, b1, sizeof b1), shape_of(t, b2, sizeof b2));
    if (!st_is_float((st_dtype)t->dtype))
        return st_error(ST_ERR_DTYPE, "set_grad: only float tensors have gradients (this one is %s)",
                        st_dtypes[t->dtype].name);
    if (!s->acc) {
        if (!(s->acc = st_calloc(1, sizeof *s->acc))) return st_last_status();
        s->acc->refcnt = 1;
    }
    return acc_store(s->acc, st_retain(g), (st_dtype)t->dtype);
}

st_tensor *st_detach(st_tensor *t) {
    if (!t) {
        st_error(ST_ERR_ARG, "detach: NULL tensor");
        return NULL;
    }
    return st_tensor_from_node(detached_read(t, (st_dtype)t->dtype));
}

/* ---- backward rules ---- */

/* The temporaries of one rule, released together; the first failure's message is kept (later
 * calls receive NULL arguments and would overwrite it). */
#define ARENA_MAX 48
typedef struct arena {
    st_tensor *t[ARENA_MAX];
    int n;
    st_status status;
    char msg[512];
} arena;

static st_tensor *keep(arena *A, st_tensor *t) {
    if (!t) {
        if (A->status == ST_OK) {
            A->status = st_last_status() ? st_last_status() : ST_ERR_INTERNAL;
            snprintf(A->msg, sizeof A->msg, "%s", st_last_error());
        }
        return NULL;
    }
    if (A->n == ARENA_MAX) { /* a rule never needs this many; fail rather than leak */
        st_release(t);
        if (A->status == ST_OK) {
            A->status = ST_ERR_INTERNAL;
            snprintf(A->msg, sizeof A->msg, "backward: too many temporaries in one rule");
        }
        return NULL;
    }
    return A->t[A->n++] = t;
}

static void arena_check(arena *A, st_status s) {
    if (s != ST_OK && A->status == ST_OK) {
        A->status = s;
        snprintf(A->msg, sizeof A->msg, "%s", st_last_error());
    }
}

static void arena_free(arena *A) {
    for (int i = 0; i < A->n; i++) st_release(A->t[i]);
    A->n = 0;
}

/* A tensor whose value is node n (a new handle on a new storage). */
static st_tensor *wrap(arena *A, st_node *n) {
    return keep(A, st_tensor_from_node(st_node_retain(n)));
}

/* The adjoint of y = gather(x, d, idx). One pick per row (idx of x's shape but size 1 along d:
 * cross-entropy's target, nll_loss, take_along_dim of an argmax) is pointwise, a one-hot mask:
 * dx[.., j, ..] = (j == idx[.., 0, ..]) ? g[.., 0, ..] : 0, which fuses with the rest of the
 * backward (softmax's, in cross-entropy) instead of a zeros buffer and a serial scatter. Several
 * picks per row may repeat an index and must add up: scatter_add into zeros. */
static st_tensor *gather_adjoint(arena *A, const st_ag *ag, st_tensor *g) {
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
static void contribute(arena *A, st_node *src, st_tensor *c) {
    if (!c || !src->ag || A->status != ST_OK) return;
    char b1[128], b2[128];
    if (c->ndim != src->ndim || memcmp(c->shape, src->shape, src->ndim * sizeof *src->shape) != 0) {
        A->status = ST_ERR_INTERNAL;
        snprintf(A->msg, sizeof A->msg, "backward: a gradient of shape %s was computed for a value "
                 "of shape %s (op %s)", shape_of(c, b1, sizeof b1),
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

static st_tensor *scal(arena *A, double v) { return keep(A, st_weak_scalar_f(v)); }

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
static st_tensor *unsplit(arena *A, st_tensor *r, const st_node *src) {
    if (!r || st_ndim(r) == src->ndim) return r;
    return keep(A, st_reshape(r, src->ndim, src->shape));
}

/* The adjoint of a VIEW: the gradient of src (shape S) from the gradient g of the view. */
static st_tensor *view_adjoint(arena *A, const st_ag *ag, const st_node *n, st_tensor *g) {
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
        st_tensor *z = keep(A, st_zeros(dt, m, src->shape));
        st_tensor *v = z ? keep(A, st_tensor_view(z, nd, s, t, o)) : NULL;
        if (v) arena_check(A, st_copy_(v, g));
        return z;
    }
    char b[128];
    A->status = ST_ERR_INTERNAL;
    snprintf(A->msg, sizeof A->msg, "backward: the gradient of a view with overlapping elements "
             "(shape %s) is not supported", st_shape_str(nd, n->shape, b, sizeof b));
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

static st_tensor *transposed(arena *A, st_node *n, st_tensor *wrapped) {
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
static void apply_rule(arena *A, st_node *n, st_tensor *g) {
    st_ag *ag = n->ag;
    st_node *s0 = ag->src[0], *s1 = ag->nsrc > 1 ? ag->src[1] : NULL;
    st_tensor *r = NULL, *r1 = NULL;
    int axes[ST_MAX_DIMS], na;
    /* handles on the forward values (no work: a handle does not force its node to be stored) */
    int uses_values = ag->op != ST_OP_VIEW && ag->op != ST_OP_CAST && ag->op != ST_OP_NEG &&
                      ag->op != ST_OP_ADD && ag->op != ST_OP_SUB && ag->op != ST_OP_RSUM;
    st_tensor *x = uses_values ? wrap(A, s0) : NULL;
    st_tensor *y = uses_values && s1 ? wrap(A, s1) : NULL;
    st_tensor *out = uses_values ? wrap(A, n) : NULL;
#define X() x
#define Y() y
#define OUT() out
#define K(e) keep(A, (e))
    switch ((st_op)ag->op) {
    case ST_OP_VIEW: r = view_adjoint(A, ag, n, g); break;
    case ST_OP_CAST: r = K(st_cast(g, (st_dtype)s0->dtype)); break;
    case ST_OP_NEG: r = K(st_neg(g)); break;
    case ST_OP_ABS: r = K(st_mul(g, K(st_sign(X())))); break;
    case ST_OP_EXP: r = K(st_mul(g, OUT())); break;
    case ST_OP_LOG: r = K(st_div(g, X())); break;
    case ST_OP_SQRT: r = K(st_div(g, K(st_mul_s(OUT(), 2)))); break;
    case ST_OP_RSQRT: /* -0.5 x^-1.5 = -0.5 out^3 */
        r = K(st_mul(g, K(st_mul_s(K(st_mul(OUT(), K(st_mul(OUT(), OUT())))), -0.5))));
        break;
    case ST_OP_SIN: r = K(st_mul(g, K(st_cos(X())))); break;
    case ST_OP_COS: r = K(st_neg(K(st_mul(g, K(st_sin(X())))))); break;
    case ST_OP_TANH: r = K(st_mul(g, K(st_rsub_s(K(st_mul(OUT(), OUT())), 1)))); break;
    case ST_OP_SIGMOID: r = K(st_mul(g, K(st_mul(OUT(), K(st_rsub_s(OUT(), 1)))))); break;
    case ST_OP_RELU: r = K(st_where(K(st_gt(X(), scal(A, 0))), g, scal(A, 0))); break;
    case ST_OP_GELU: { /* Phi(x) + x phi(x) */
        st_tensor *cdf = K(st_mul_s(K(st_add_s(K(st_erf(K(st_mul_s(X(), 0.70710678118654752440)))), 1)), 0.5));
        st_tensor *pdf = K(st_mul_s(K(st_exp(K(st_mul_s(K(st_mul(X(), X())), -0.5)))), 0.39894228040143267794));
        r = K(st_mul(g, K(st_add(cdf, K(st_mul(X(), pdf))))));
        break;
    }
    case ST_OP_GELU_TANH: { /* 0.5(1+t) + 0.5 x (1-t^2) k (1 + 3c x^2), t = tanh(k (x + c x^3)) */
        const double k = 0.79788456080286535588, c = 0.044715;
        st_tensor *x2 = K(st_mul(X(), X()));
        st_tensor *u = K(st_mul_s(K(st_mul(X(), K(st_add_s(K(st_mul_s(x2, c)), 1)))), k));
        st_tensor *th = K(st_tanh(u));
        st_tensor *left = K(st_mul_s(K(st_add_s(th, 1)), 0.5));
        st_tensor *sech2 = K(st_rsub_s(K(st_mul(th, th)), 1));
        st_tensor *du = K(st_mul_s(K(st_add_s(K(st_mul_s(x2, 3 * c)), 1)), k));
        st_tensor *right = K(st_mul_s(K(st_mul(K(st_mul(X(), sech2)), du)), 0.5));
        r = K(st_mul(g, K(st_add(left, right))));
        break;
    }
    case ST_OP_SILU: { /* s (1 + x (1 - s)) */
        st_tensor *sg = K(st_sigmoid(X()));
        r = K(st_mul(g, K(st_mul(sg, K(st_add_s(K(st_mul(X(), K(st_rsub_s(sg, 1)))), 1))))));
        break;
    }
    case ST_OP_RECIP: r = K(st_neg(K(st_mul(g, K(st_mul(OUT(), OUT())))))); break;
    case ST_OP_LOG1P: r = K(st_div(g, K(st_add_s(X(), 1)))); break;
    case ST_OP_EXPM1: r = K(st_mul(g, K(st_add_s(OUT(), 1)))); break;
    case ST_OP_ERF: /* 2/sqrt(pi) exp(-x^2) */
        r = K(st_mul(g, K(st_mul_s(K(st_exp(K(st_neg(K(st_mul(X(), X())))))), 1.12837916709551257390))));
        break;
    case ST_OP_ADD: r = g; r1 = g; break;
    case ST_OP_SUB: r = g; r1 = s1->ag ? K(st_neg(g)) : NULL; break;
    case ST_OP_MUL:
        r = s0->ag ? K(st_mul(g, Y())) : NULL;
        r1 = s1->ag ? K(st_mul(g, X())) : NULL;
        break;
    case ST_OP_DIV:
        r = s0->ag ? K(st_div(g, Y())) : NULL;
        r1 = s1->ag ? K(st_neg(K(st_div(K(st_mul(g, OUT())), Y())))) : NULL;
        break;
    case ST_OP_POW: {
        st_tensor *zero = scal(A, 0);
        if (s0->ag) { /* y x^(y-1), 0 where y == 0 */
            st_tensor *d = K(st_mul(Y(), K(st_pow(X(), K(st_sub_s(Y(), 1))))));
            r = K(st_mul(g, K(st_where(K(st_eq(Y(), zero)), zero, d))));
        }
        if (s1->ag) { /* out log x, 0 where x == 0 */
            st_tensor *d = K(st_mul(OUT(), K(st_log(X()))));
            r1 = K(st_mul(g, K(st_where(K(st_eq(X(), zero)), zero, d))));
        }
        break;
    }
    case ST_OP_MAX: case ST_OP_MIN: { /* ties split the gradient in half, like torch.maximum */
        st_dtype dt = (st_dtype)n->dtype;
        st_tensor *win = K(ag->op == ST_OP_MAX ? st_gt(X(), Y()) : st_lt(X(), Y()));
        st_tensor *tie = K(st_mul_s(K(st_cast(K(st_eq(X(), Y())), dt)), 0.5));
        st_tensor *wa = K(st_add(K(st_cast(win, dt)), tie));
        if (s0->ag) r = K(st_mul(g, wa));
        if (s1->ag) r1 = K(st_mul(g, K(st_rsub_s(wa, 1))));
        break;
    }
    case ST_OP_FMOD: case ST_OP_REM: { /* a - q b: d/da = 1, d/db = -q (q truncated or floored) */
        r = g;
        if (s1->ag) {
            st_tensor *q = K(st_div(X(), Y()));
            if (ag->op == ST_OP_REM) q = K(st_floor(q));
            else q = K(st_where(K(st_lt(q, scal(A, 0))), K(st_ceil(q)), K(st_floor(q))));
            r1 = K(st_neg(K(st_mul(g, q))));
        }
        break;
    }
    case ST_OP_WHERE: {
        st_tensor *c = wrap(A, s0), *zero = scal(A, 0);
        if (s1->ag) contribute(A, s1, K(st_where(c, g, zero)));
        if (ag->src[2]->ag) contribute(A, ag->src[2], K(st_where(c, zero, g)));
        return;
    }
    case ST_OP_RSUM:
        r = K(st_expand(g, s0->ndim, s0->shape));
        break;
    case ST_OP_RPROD:
        r = K(st_div(K(st_mul(g, OUT())), X()));
        break;
    case ST_OP_RMAX: case ST_OP_RMIN: { /* split evenly between the elements equal to the result */
        na = axes_of(ag->arg.red.axes, s0->ndim, axes);
        st_tensor *hit = K(st_eq(X(), OUT()));
        st_tensor *cnt = K(st_sum(K(st_cast(hit, (st_dtype)n->dtype)), na, axes, 1));
        r = K(st_where(hit, K(st_expand(K(st_div(g, cnt)), s0->ndim, s0->shape)), scal(A, 0)));
        break;
    }
    case ST_OP_MATMUL:
        if (s0->ag) r = K(st_matmul(g, transposed(A, s1, Y())));
        if (s1->ag) {
            /* B read transposed (x @ W^T, every Linear): compute (g^T @ x)^T, so that W's
             * gradient comes out as a plain matmul result in W's own layout */
            st_node *bsrc;
            const st_view_arg *bv = view_of(s1, &bsrc);
            int nb = s1->ndim;
            if (bv && !bv->has_mask && nb >= 2 && bv->strides[nb - 2] == 1 && bv->strides[nb - 1] > 1)
                r1 = K(st_transpose(K(st_matmul(K(st_transpose(g, -2, -1)), X())), -2, -1));
            else r1 = K(st_matmul(transposed(A, s0, X()), g));
        }
        break;
    case ST_OP_GATHER: r = gather_adjoint(A, ag, g); break;
    case ST_OP_SCATTER_ADD:
        r = g;
        if (ag->src[2]->ag) contribute(A, ag->src[2], K(st_gather(g, ag->arg.axis.dim, wrap(A, s1))));
        break;
    case ST_OP_SETVIEW: {
        const st_view_arg *va = &ag->arg.view;
        if (s0->ag) { /* g with the overwritten region zeroed */
            st_tensor *gc = K(st_tensor_from_node(detached_read(g, (st_dtype)g->dtype)));
            st_tensor *reg = gc ? K(st_tensor_view(gc, s1->ndim, s1->shape, va->strides, va->offset)) : NULL;
            if (reg) arena_check(A, st_fill_(reg, 0));
            r = gc;
        }
        if (s1->ag) { /* the region of g */
            st_tensor *gi = K(st_tensor_from_node(detached_read(g, (st_dtype)g->dtype)));
            r1 = gi ? K(st_tensor_view(gi, s1->ndim, s1->shape, va->strides, va->offset)) : NULL;
        }
        break;
    }
    default:
        A->status = ST_ERR_INTERNAL;
        snprintf(A->msg, sizeof A->msg, "backward: no gradient rule for op %s", st_ops[ag->op].name);
        return;
    }
#undef X
#undef Y
#undef OUT
#undef K
    if (s0->ag && ag->op != ST_OP_WHERE) {
        if (!r && A->status == ST_OK) keep(A, NULL);
        contribute(A, s0, r);
    }
    if (s1 && s1->ag && ag->op != ST_OP_WHERE && ag->op != ST_OP_SCATTER_ADD && ag->op != ST_OP_GATHER) {
        if (!r1 && A->status == ST_OK) keep(A, NULL);
        contribute(A, s1, r1);
    }
}

/* ---- backward ---- */

static int by_id_desc(const void *a, const void *b) {
    const st_node *x = *(st_node *const *)a, *y = *(st_node *const *)b;
    return x->id < y->id ? 1 : x->id > y->id ? -1 : 0;
}

/* Grow *arr (capacity *cap) to hold n + 1 entries. */
static int reserve(st_node ***arr, int *cap, int n) { return BASE_GROW(*arr, *cap, n + 1, 256) == ST_OK; }

/* Leaf: add g into the storage's accumulated gradient. */
static st_status accumulate(st_grad_acc *acc, st_tensor *g) {
    if (!acc->requires_grad) return ST_OK; /* the storage died or stopped requiring grad */
    st_dtype dt = acc->grad ? (st_dtype)acc->grad->dtype : (st_dtype)g->dtype;
    if (!acc->grad) return acc_store(acc, st_retain(g), dt);
    st_tensor *sum = st_add(acc->grad, g);
    if (!sum) return st_last_status();
    return acc_store(acc, sum, dt);
}

st_status st_backward(st_tensor *t, st_tensor *grad) {
    if (!t) return st_error(ST_ERR_ARG, "backward: NULL tensor");
    char b1[128], b2[128];
    if (!t->storage->node->ag)
        return st_error(ST_ERR_ARG, "backward: the tensor %s does not require grad (none of its "
                        "inputs requires grad, or it was computed with grad mode off)",
                        shape_of(t, b1, sizeof b1));
    if (!grad && st_numel(t) != 1)
        return st_error(ST_ERR_SHAPE, "backward: the tensor has shape %s; pass a gradient of that "
                        "shape (only a one-element tensor has an implicit gradient of 1)",
                        shape_of(t, b1, sizeof b1));
    if (grad && (grad->ndim != t->ndim || memcmp(grad->shape, t->shape, t->ndim * sizeof *t->shape)))
        return st_error(ST_ERR_SHAPE, "backward: gradient shape %s does not match the tensor's shape %s",
                        shape_of(grad, b1, sizeof b1), shape_of(t, b2, sizeof b2));
    /* the root: t's own view of its storage, recorded with grad mode on so it has a record */
    st_grad_mode_push(1);
    st_node *root = st_tensor_read(t, (st_dtype)t->dtype, t->ndim, t->shape);
    st_grad_mode_pop();
    if (!root) return st_last_status();
    st_grad_mode_push(0);
    st_status status = ST_OK;
    st_node **list = NULL, **stack = NULL;
    int nlist = 0, capl = 0, nstack = 0, caps = 0;
    uint64_t epoch = ++bw_epoch;
    st_tensor *g0 = grad ? st_tensor_from_node(detached_read(grad, (st_dtype)root->dtype))
                         : st_ones((st_dtype)root->dtype, t->ndim, t->shape);
    if (!g0 || !reserve(&stack, &caps, 0)) {
        status = st_last_status();
        goto done;
    }
    /* every node that requires grad reachable from root, stopping at leaves */
    stack[nstack++] = root;
    while (nstack) {
        st_node *n = stack[--nstack];
        if (n->ag->mark == epoch) continue;
        n->ag->mark = epoch;
        if (!reserve(&list, &capl, nlist)) {
            status = st_last_status();
            goto done;
        }
        list[nlist++] = st_node_retain(n);
        if (n->ag->acc) continue;
        for (int i = 0; i < n->ag->nsrc; i++) {
            st_node *s = n->ag->src[i];
            if (!s->ag || s->ag->mark == epoch) continue;
            if (!reserve(&stack, &caps, nstack)) {
                status = st_last_status();
                goto done;
            }
            stack[nstack++] = s;
        }
    }
    qsort(list, nlist, sizeof *list, by_id_desc);
    root->ag->grad = g0;
    g0 = NULL;
    arena A;
    A.n = 0;
    A.status = ST_OK;
    A.msg[0] = 0;
    for (int i = 0; i < nlist && status == ST_OK; i++) {
        st_node *n = list[i];
        st_tensor *g = n->ag->grad;
        n->ag->grad = NULL;
        if (!g) continue;
        if (n->ag->acc) {
            status = accumulate(n->ag->acc, g);
        } else {
            apply_rule(&A, n, g);
            arena_free(&A);
            if (A.status != ST_OK) status = st_error(A.status, "%s", A.msg);
        }
        st_release(g);
        if (status == ST_OK && st_rt.interrupted) {
            st_rt.interrupted = 0;
            status = st_error(ST_ERR_INTERRUPT, "backward: interrupted");
        }
    }
done:
    for (int i = 0; i < nlist; i++) {
        st_release(list[i]->ag->grad);
        list[i]->ag->grad = NULL;
        st_node_release(list[i]);
    }
    st_free(list);
    st_free(stack);
    st_release(g0);
    st_node_release(root);
    st_grad_mode_pop();
    return status;
}
