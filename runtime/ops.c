/*
 * ops.c — recording elementwise ops, reductions, matmul and the compositions built on them.
 *
 * Every function checks shapes and dtypes at once (errors name both shapes), applies broadcasting
 * and type promotion, and records nodes; nothing is computed here. Invariant: elementwise nodes get
 * srcs of the node's shape and one common dtype (docs/api.md has the promotion rules).
 */
#include "runtime/tensor.h"
#include <math.h>

/* ---- shapes ---- */
st_status st_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                              int *nout, int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int ia = na - n + i, ib = nb - n + i;
        int64_t a = ia >= 0 ? sa[ia] : 1, b = ib >= 0 ? sb[ib] : 1;
        if (a != b && a != 1 && b != 1) {
            char x[160], y[160];
            return st_error(ST_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)",
                            op, st_shape_str(na, sa, x, sizeof x), st_shape_str(nb, sb, y, sizeof y),
                            i - n, (long long)a, (long long)b);
        }
        out[i] = a == 1 ? b : a;
    }
    *nout = n;
    return ST_OK;
}

int st_norm_dim(const char *op, int dim, int ndim) {
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= ndim || (ndim == 0 && dim != 0 && dim != -1)) {
        if (ndim == 0 && (dim == 0 || dim == -1)) return 0;
        st_error(ST_ERR_ARG, "%s: dim " BASE_POS " out of range for a tensor with %d dims", op, BASE_P(dim), ndim);
        return -1;
    }
    return d;
}

static st_tensor *check_arg(const char *op, const st_tensor *t) {
    if (!t) st_error(ST_ERR_ARG, "%s: NULL tensor argument", op);
    return (st_tensor *)t;
}

/* ---- dtypes ---- */
static st_dtype default_of(st_category c) { return c == ST_CAT_FLOAT ? ST_F32 : c == ST_CAT_INT ? ST_I64 : ST_BOOL; }

static st_dtype result_type(const st_tensor *a, const st_tensor *b) {
    if (a->weak == b->weak) return st_promote_types((st_dtype)a->dtype, (st_dtype)b->dtype);
    const st_tensor *w = a->weak ? a : b, *s = a->weak ? b : a;
    st_category cw = st_dtypes[w->dtype].cat, cs = st_dtypes[s->dtype].cat;
    return cw > cs ? default_of(cw) : (st_dtype)s->dtype;
}

/* ---- elementwise ---- */
/* The dtype an elementwise op computes in, from its operands' (promoted) dtype dt, by the op's
 * rule (ops.def's DTYPE column); -1 with an ST_ERR_DTYPE error when the rule refuses dt. */
static int compute_dtype(st_op op, st_dtype dt) {
    switch (st_ops[op].dtype) {
    case DT_FLOAT: return st_is_float(dt) ? dt : ST_F32;
    case DT_NOBOOL: return dt == ST_BOOL ? ST_I64 : dt;
    case DT_LOGIC: return ST_BOOL;
    case DT_NUMERIC:
        if (dt != ST_BOOL) return dt;
        st_error(ST_ERR_DTYPE, "%s: not defined for bool tensors (use logical_not)", st_ops[op].name);
        return -1;
    default: return dt;
    }
}
/* The dtype of the result: bool for comparisons and logic, else the compute dtype. */
static st_dtype result_dtype(st_op op, st_dtype ct) {
    st_dtype_rule r = st_ops[op].dtype;
    return r == DT_TO_BOOL || r == DT_LOGIC ? ST_BOOL : ct;
}

/* Under autocast, the elementwise ops on PyTorch's f32 list (exp, expm1, log, log1p, reciprocal,
 * rsqrt, pow) compute f16/bf16 inputs in f32 and return f32 (docs/training.md). */
static st_dtype autocast_f32(st_op op, st_dtype dt) {
    if (st_autocast_dt == ST_DTYPE_COUNT || (dt != ST_F16 && dt != ST_BF16)) return dt;
    switch (op) {
    case ST_OP_EXP: case ST_OP_EXPM1: case ST_OP_LOG: case ST_OP_LOG1P: case ST_OP_RECIP: case ST_OP_RSQRT:
    case ST_OP_POW:
        return ST_F32;
    default:
        return dt;
    }
}

static st_tensor *unary(st_op op, st_tensor *a) {
    if (!check_arg(st_ops[op].name, a)) return NULL;
    int ct = compute_dtype(op, (st_dtype)a->dtype);
    if (ct < 0) return NULL;
    st_dtype dt = autocast_f32(op, (st_dtype)ct);
    st_node *x = st_tensor_read(a, dt, a->ndim, a->shape);
    if (!x) return NULL;
    st_node *n = st_node_new(op, result_dtype(op, dt), a->ndim, a->shape, 1, &x, NULL);
    st_node_release(x);
    return st_tensor_from_node(n);
}

static st_tensor *binary(st_op op, st_tensor *a, st_tensor *b) {
    const char *name = st_ops[op].name;
    if (!check_arg(name, a) || !check_arg(name, b)) return NULL;
    int nd;
    int64_t shape[ST_MAX_DIMS];
    if (st_broadcast_shapes(name, a->ndim, a->shape, b->ndim, b->shape, &nd, shape) != ST_OK) return NULL;
    int ct = compute_dtype(op, result_type(a, b));
    if (ct < 0) return NULL;
    st_dtype dt = autocast_f32(op, (st_dtype)ct);
    st_node *x = st_tensor_read(a, dt, nd, shape);
    st_node *y = x ? st_tensor_read(b, dt, nd, shape) : NULL;
    st_node *n = NULL;
    if (y) {
        st_node *srcs[2] = {x, y};
        n = st_node_new(op, result_dtype(op, dt), nd, shape, 2, srcs, NULL);
    }
    st_node_release(x);
    st_node_release(y);
    st_tensor *t = st_tensor_from_node(n);
    if (t && a->weak && b->weak) t->weak = 1;
    return t;
}

/* The public elementwise API: one function per API row of trace/ops.def; the composites (APIC
 * rows) are written here by hand. The build checks both ways that include/stitch.h declares
 * exactly these functions. ops.def -> stitch.h, before any definition: each row's function is
 * declared there with its arity (an undeclared one does not compile; a wrong arity fails). */
#define API_TYPE_1 st_tensor *(*)(st_tensor *)
#define API_TYPE_2 st_tensor *(*)(st_tensor *, st_tensor *)
#define API_HAS(name, ARITY) \
    _Static_assert(_Generic(&st_##name, API_TYPE_##ARITY: 1, default: 0), "st_" #name ": stitch.h does not declare it as ops.def says");
#define API(name, ARITY, ...) API_HAS(name, ARITY)
#define APIC(name, ARITY, ...) API_HAS(name, ARITY)
#include "trace/ops.def"
#undef API
#undef APIC
/* stitch.h -> ops.def: every name in ST_UNARY_API / ST_BINARY_API is a row of that arity. */
enum {
#define API(name, ARITY, ...) API_ARITY_##name = ARITY,
#define APIC(name, ARITY, ...) API_ARITY_##name = ARITY,
#include "trace/ops.def"
#undef API
#undef APIC
};
#define API_IS_UNARY(name) _Static_assert(API_ARITY_##name == 1, "st_" #name ": not a unary row of ops.def");
#define API_IS_BINARY(name) _Static_assert(API_ARITY_##name == 2, "st_" #name ": not a binary row of ops.def");
ST_UNARY_API(API_IS_UNARY)
ST_BINARY_API(API_IS_BINARY)

#define API_DEF_1(name, OP) st_tensor *st_##name(st_tensor *a) { return unary(ST_OP_##OP, a); }
#define API_DEF_2(name, OP) st_tensor *st_##name(st_tensor *a, st_tensor *b) { return binary(ST_OP_##OP, a, b); }
#define API(name, ARITY, OP, ...) API_DEF_##ARITY(name, OP)
#include "trace/ops.def"
#undef API

st_tensor *st_square(st_tensor *a) { return binary(ST_OP_MUL, a, a); }


/* a (op) scalar, or scalar (op) a when swap. */
static st_tensor *binary_s(st_op op, st_tensor *a, double s, int swap) {
    st_tensor *c = st_weak_scalar_f(s);
    if (!c) return NULL;
    st_tensor *r = swap ? binary(op, c, a) : binary(op, a, c);
    st_release(c);
    return r;
}
st_tensor *st_add_s(st_tensor *a, double s) { return binary_s(ST_OP_ADD, a, s, 0); }
st_tensor *st_mul_s(st_tensor *a, double s) { return binary_s(ST_OP_MUL, a, s, 0); }
st_tensor *st_sub_s(st_tensor *a, double s) { return binary_s(ST_OP_SUB, a, s, 0); }
st_tensor *st_rsub_s(st_tensor *a, double s) { return binary_s(ST_OP_SUB, a, s, 1); }
st_tensor *st_div_s(st_tensor *a, double s) { return binary_s(ST_OP_DIV, a, s, 0); }
st_tensor *st_rdiv_s(st_tensor *a, double s) { return binary_s(ST_OP_DIV, a, s, 1); }
st_tensor *st_pow_s(st_tensor *a, double s) { return binary_s(ST_OP_POW, a, s, 0); }

st_tensor *st_where(st_tensor *c, st_tensor *a, st_tensor *b) {
    if (!check_arg("where", c) || !check_arg("where", a) || !check_arg("where", b)) return NULL;
    int n1, nd;
    int64_t s1[ST_MAX_DIMS], shape[ST_MAX_DIMS];
    if (st_broadcast_shapes("where", c->ndim, c->shape, a->ndim, a->shape, &n1, s1) != ST_OK ||
        st_broadcast_shapes("where", n1, s1, b->ndim, b->shape, &nd, shape) != ST_OK)
        return NULL;
    st_dtype dt = result_type(a, b);
    st_node *srcs[3] = {st_tensor_read(c, ST_BOOL, nd, shape), st_tensor_read(a, dt, nd, shape),
                        st_tensor_read(b, dt, nd, shape)};
    st_node *n = srcs[0] && srcs[1] && srcs[2]
                     ? st_node_new(ST_OP_WHERE, dt, nd, shape, 3, srcs, NULL) : NULL;
    for (int i = 0; i < 3; i++) st_node_release(srcs[i]);
    return st_tensor_from_node(n);
}

/* r op bound, the bound weak: an integral bound keeps an integer tensor's dtype. */
static st_tensor *clamp_step(st_op op, st_tensor *r, double bound) {
    st_tensor *c = !st_is_float((st_dtype)r->dtype) && bound == floor(bound) && fabs(bound) < 9e18
                       ? st_weak_scalar_i((int64_t)bound) : st_weak_scalar_f(bound);
    st_tensor *t = c ? binary(op, r, c) : NULL;
    st_release(c);
    st_release(r);
    return t;
}

st_tensor *st_clamp(st_tensor *a, double lo, double hi) {
    if (!check_arg("clamp", a)) return NULL;
    st_tensor *r = st_retain(a);
    if (!isnan(lo) && !(r = clamp_step(ST_OP_MAX, r, lo))) return NULL;
    if (!isnan(hi) && !(r = clamp_step(ST_OP_MIN, r, hi))) return NULL;
    if (r == a) { /* neither bound: still a new tensor */
        st_release(r);
        return st_cast(a, (st_dtype)a->dtype);
    }
    return r;
}

st_tensor *st_cast(st_tensor *a, st_dtype dt) {
    if (!check_arg("cast", a)) return NULL;
    if ((unsigned)dt >= ST_DTYPE_COUNT) {
        st_error(ST_ERR_DTYPE, "cast: unknown dtype %d", (int)dt);
        return NULL;
    }
    st_node *x = st_tensor_read(a, (st_dtype)a->dtype, a->ndim, a->shape);
    if (!x) return NULL;
    st_node *n = st_node_new(ST_OP_CAST, dt, a->ndim, a->shape, 1, &x, NULL);
    st_node_release(x);
    return st_tensor_from_node(n);
}

/* ---- reductions ---- */
/* Reduce mask over a's dims from (naxes, axes); 0 axes = all. -1 on error. */
static int64_t axes_mask(const char *op, const st_tensor *a, int naxes, const int *axes) {
    uint32_t m = 0;
    if (naxes < 0 || (naxes > 0 && !axes)) {
        st_error(ST_ERR_ARG, "%s: %s", op, naxes < 0 ? "negative number of dims" : "NULL dims array");
        return -1;
    }
    if (naxes == 0) return a->ndim ? (int64_t)((1u << a->ndim) - 1) : 0;
    for (int i = 0; i < naxes; i++) {
        int d = st_norm_dim(op, axes[i], a->ndim);
        if (d < 0) return -1;
        if (a->ndim == 0) continue;
        if (m & (1u << d)) {
            st_error(ST_ERR_ARG, "%s: dim " BASE_POS " given twice", op, BASE_P(axes[i]));
            return -1;
        }
        m |= 1u << d;
    }
    return m;
}

/* Drop the reduced dims of t (a keepdim result) as a view. */
static st_tensor *squeeze_mask(st_tensor *t, uint32_t mask) {
    int64_t shape[ST_MAX_DIMS], strides[ST_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->ndim; d++)
        if (!(mask & (1u << d))) {
            shape[n] = t->shape[d];
            strides[n++] = t->strides[d];
        }
    st_tensor *v = st_tensor_view(t, n, shape, strides, t->offset);
    st_release(t);
    return v;
}

/* The reduction node op over a read as dtype dt; keepdim shape; the mask is validated. */
static st_tensor *reduce_raw(st_op op, st_tensor *a, st_dtype dt, uint32_t mask, int keepdim) {
    int64_t shape[ST_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) shape[d] = (mask & (1u << d)) ? 1 : a->shape[d];
    st_node *x = st_tensor_read(a, dt, a->ndim, a->shape);
    if (!x) return NULL;
    st_node_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.red.axes = mask;
    st_dtype out = (op == ST_OP_RARGMAX || op == ST_OP_RARGMIN) ? ST_I64 : dt;
    st_node *n = st_node_new(op, out, a->ndim, shape, 1, &x, &arg);
    st_node_release(x);
    st_tensor *t = st_tensor_from_node(n);
    return t && !keepdim ? squeeze_mask(t, mask) : t;
}

static st_tensor *reduce(st_op op, const char *name, st_tensor *a, int naxes, const int *axes, int keepdim) {
    if (!check_arg(name, a)) return NULL;
    int64_t mask = axes_mask(name, a, naxes, axes);
    if (mask < 0) return NULL;
    st_dtype dt = (st_dtype)a->dtype;
    if ((op == ST_OP_RSUM || op == ST_OP_RPROD) && !st_is_float(dt)) dt = ST_I64;
    if ((op == ST_OP_RSUM || op == ST_OP_RPROD) && st_autocast_dt != ST_DTYPE_COUNT && (dt == ST_F16 || dt == ST_BF16))
        dt = ST_F32; /* autocast: sums in f32 */
    if (op == ST_OP_RMAX || op == ST_OP_RMIN || op == ST_OP_RARGMAX || op == ST_OP_RARGMIN) {
        for (int d = 0; d < a->ndim; d++)
            if ((mask & (1u << d)) && a->shape[d] == 0) {
                char b[160];
                st_error(ST_ERR_SHAPE, "%s: cannot reduce over dim " BASE_POS " of size 0 in %s", name, BASE_P(d),
                         st_shape_str(a->ndim, a->shape, b, sizeof b));
                return NULL;
            }
    }
    return reduce_raw(op, a, dt, (uint32_t)mask, keepdim);
}

st_tensor *st_sum(st_tensor *a, int n, const int *ax, int k) { return reduce(ST_OP_RSUM, "sum", a, n, ax, k); }
st_tensor *st_prod(st_tensor *a, int n, const int *ax, int k) { return reduce(ST_OP_RPROD, "prod", a, n, ax, k); }
st_tensor *st_max(st_tensor *a, int n, const int *ax, int k) { return reduce(ST_OP_RMAX, "max", a, n, ax, k); }
st_tensor *st_min(st_tensor *a, int n, const int *ax, int k) { return reduce(ST_OP_RMIN, "min", a, n, ax, k); }

/* Number of elements reduced by (naxes, axes). */
static int64_t reduced_count(const st_tensor *a, int64_t mask) {
    int64_t c = 1;
    for (int d = 0; d < a->ndim; d++)
        if (mask & (1LL << d)) c *= a->shape[d];
    return c;
}

/* a as a float tensor; under autocast, f16/bf16 become f32 (mean, var, logsumexp, softmax are on
 * autocast's f32 list) */
static st_tensor *as_float(st_tensor *a) {
    st_dtype dt = (st_dtype)a->dtype;
    if (st_autocast_dt != ST_DTYPE_COUNT && (dt == ST_F16 || dt == ST_BF16)) return st_cast(a, ST_F32);
    return st_is_float(dt) ? st_retain(a) : st_cast(a, ST_F32);
}

st_tensor *st_mean(st_tensor *a, int naxes, const int *axes, int keepdim) {
    if (!check_arg("mean", a)) return NULL;
    int64_t mask = axes_mask("mean", a, naxes, axes);
    if (mask < 0) return NULL;
    st_tensor *f = as_float(a);
    st_tensor *s = f ? st_sum(f, naxes, axes, keepdim) : NULL;
    int64_t cnt = reduced_count(a, mask);
    st_tensor *r = s ? st_mul_s(s, cnt ? 1.0 / (double)cnt : NAN) : NULL;
    st_release(f);
    st_release(s);
    return r;
}

st_tensor *st_var(st_tensor *a, int naxes, const int *axes, int correction, int keepdim) {
    if (!check_arg("var", a)) return NULL;
    int64_t mask = axes_mask("var", a, naxes, axes);
    if (mask < 0) return NULL;
    st_tensor *f = as_float(a), *m = NULL, *d = NULL, *d2 = NULL, *s = NULL, *r = NULL;
    if (!f || !(m = st_mean(f, naxes, axes, 1)) || !(d = st_sub(f, m)) || !(d2 = st_mul(d, d)) ||
        !(s = st_sum(d2, naxes, axes, keepdim)))
        goto done;
    double denom = (double)(reduced_count(a, mask) - correction);
    r = st_mul_s(s, denom > 0 ? 1.0 / denom : NAN);
done:
    st_release(f); st_release(m); st_release(d); st_release(d2); st_release(s);
    return r;
}

st_tensor *st_std(st_tensor *a, int naxes, const int *axes, int correction, int keepdim) {
    st_tensor *v = st_var(a, naxes, axes, correction, keepdim);
    st_tensor *r = v ? st_sqrt(v) : NULL;
    st_release(v);
    return r;
}

st_tensor *st_logsumexp(st_tensor *a, int naxes, const int *axes, int keepdim) {
    if (!check_arg("logsumexp", a)) return NULL;
    st_tensor *f = as_float(a), *m0 = NULL, *m = NULL, *am = NULL, *inf = NULL, *z = NULL, *ms = NULL,
              *d = NULL, *e = NULL, *s = NULL, *l = NULL, *r = NULL, *msq = NULL;
    /* max is taken with keepdim; an infinite max is replaced by 0 so inf - inf never happens. It
     * only keeps exp in range (lse = c + log(sum(exp(x - c))) for any c), so no gradient flows
     * through it (detached, as softmax_impl's): the backward is g * exp(x - lse), pointwise with
     * the row's values, without the max's adjoint (a compare against the max per element). */
    if (!f || !(m0 = st_max(f, naxes, axes, 1)) || !(m = st_detach(m0)) || !(am = st_abs(m)) ||
        !(inf = st_weak_scalar_f(INFINITY)) || !(z = st_eq(am, inf)))
        goto done;
    st_release(inf);
    if (!(inf = st_weak_scalar_f(0.0)) || !(ms = st_where(z, inf, m)) || !(d = st_sub(f, ms)) ||
        !(e = st_exp(d)) || !(s = st_sum(e, naxes, axes, keepdim)) || !(l = st_log(s)))
        goto done;
    if (keepdim) {
        r = st_add(l, ms);
    } else {
        int64_t mask = axes_mask("logsumexp", a, naxes, axes);
        msq = squeeze_mask(st_retain(ms), (uint32_t)mask);
        if (msq) r = st_add(l, msq);
    }
done:
    st_release(f); st_release(m0); st_release(m); st_release(am); st_release(inf); st_release(z); st_release(ms);
    st_release(d); st_release(e); st_release(s); st_release(l); st_release(msq);
    return r;
}

static st_tensor *arg_reduce(st_op op, const char *name, st_tensor *a, int dim, int keepdim) {
    if (!check_arg(name, a)) return NULL;
    if (dim == ST_ALL_DIMS) {
        int64_t n = st_numel(a);
        st_tensor *flat = st_reshape(a, 1, &n);
        if (!flat) return NULL;
        st_tensor *r = arg_reduce(op, name, flat, 0, 0);
        st_release(flat);
        if (r && keepdim && a->ndim > 0) {
            int64_t ones[ST_MAX_DIMS];
            for (int i = 0; i < a->ndim; i++) ones[i] = 1;
            st_tensor *k = st_reshape(r, a->ndim, ones);
            st_release(r);
            r = k;
        }
        return r;
    }
    int d = st_norm_dim(name, dim, a->ndim);
    if (d < 0) return NULL;
    int ax = a->ndim ? d : 0;
    return reduce(op, name, a, 1, &ax, keepdim);
}
st_tensor *st_argmax(st_tensor *a, int dim, int keepdim) { return arg_reduce(ST_OP_RARGMAX, "argmax", a, dim, keepdim); }
st_tensor *st_argmin(st_tensor *a, int dim, int keepdim) { return arg_reduce(ST_OP_RARGMIN, "argmin", a, dim, keepdim); }

static st_tensor *softmax_impl(st_tensor *a, int dim, int log_) {
    const char *name = log_ ? "log_softmax" : "softmax";
    if (!check_arg(name, a)) return NULL;
    int d = st_norm_dim(name, dim, a->ndim);
    if (d < 0) return NULL;
    /* The row max only keeps exp in range: softmax(x - c) = softmax(x) for any c, so no gradient
     * flows through it (detached). Its backward is then y * (g - sum(g * y)) (log_softmax:
     * g - softmax * sum(g)), without the max's own backward (a compare against the max, a second
     * reduction, and a scatter to the argmax of what is zero up to rounding). */
    st_tensor *f = as_float(a), *m0 = NULL, *m = NULL, *x = NULL, *e = NULL, *s = NULL, *l = NULL, *r = NULL;
    if (!f || !(m0 = st_max(f, 1, &d, 1)) || !(m = st_detach(m0)) || !(x = st_sub(f, m)) ||
        !(e = st_exp(x)) || !(s = st_sum(e, 1, &d, 1)))
        goto done;
    if (log_) {
        if ((l = st_log(s))) r = st_sub(x, l);
    } else {
        r = st_div(e, s);
    }
done:
    st_release(f); st_release(m0); st_release(m); st_release(x); st_release(e); st_release(s);
    st_release(l);
    return r;
}
st_tensor *st_softmax(st_tensor *a, int dim) { return softmax_impl(a, dim, 0); }
st_tensor *st_log_softmax(st_tensor *a, int dim) { return softmax_impl(a, dim, 1); }

/* ---- matmul ---- */
st_tensor *st_matmul(st_tensor *a, st_tensor *b) {
    if (!check_arg("matmul", a) || !check_arg("matmul", b)) return NULL;
    char x[160], y[160];
    if (a->ndim == 0 || b->ndim == 0) {
        st_error(ST_ERR_SHAPE, "matmul: both operands need at least 1 dim, got %s and %s",
                 st_shape_str(a->ndim, a->shape, x, sizeof x), st_shape_str(b->ndim, b->shape, y, sizeof y));
        return NULL;
    }
    if (a->dtype == ST_BOOL || b->dtype == ST_BOOL) {
        st_error(ST_ERR_DTYPE, "matmul: bool operands are not supported");
        return NULL;
    }
    /* Promote 1-D operands to matrices, remembering which dims to drop. */
    int64_t as[ST_MAX_DIMS + 1], bs[ST_MAX_DIMS + 1];
    int an = a->ndim, bn = b->ndim;
    if (an == 1) { as[0] = 1; as[1] = a->shape[0]; an = 2; }
    else memcpy(as, a->shape, an * sizeof *as);
    if (bn == 1) { bs[0] = b->shape[0]; bs[1] = 1; bn = 2; }
    else memcpy(bs, b->shape, bn * sizeof *bs);
    int64_t M = as[an - 2], K = as[an - 1], K2 = bs[bn - 2], N = bs[bn - 1];
    if (K != K2) {
        st_error(ST_ERR_SHAPE, "matmul: shapes %s and %s: inner dims differ (%lld vs %lld)",
                 st_shape_str(a->ndim, a->shape, x, sizeof x), st_shape_str(b->ndim, b->shape, y, sizeof y),
                 (long long)K, (long long)K2);
        return NULL;
    }
    if (a->ndim > 2 && b->ndim == 2) {
        /* (..., M, K) @ (K, N), a Linear on a batch of sequences: the batch dims fold into the
         * rows, one 2-D matmul (as PyTorch's linear does). Its weight gradient is then one
         * (K, rows) @ (rows, N) product instead of a product per batch and a sum over them. */
        int64_t rows = 1, s2[2], so[ST_MAX_DIMS];
        for (int d = 0; d < a->ndim - 1; d++) rows *= a->shape[d];
        s2[0] = rows;
        s2[1] = K;
        memcpy(so, a->shape, (size_t)a->ndim * sizeof *so);
        so[a->ndim - 1] = N;
        st_tensor *a2 = st_reshape(a, 2, s2);
        st_tensor *r2 = a2 ? st_matmul(a2, b) : NULL;
        st_tensor *r = r2 ? st_reshape(r2, a->ndim, so) : NULL;
        st_release(a2);
        st_release(r2);
        return r;
    }
    int nb;
    int64_t batch[ST_MAX_DIMS];
    if (st_broadcast_shapes("matmul", an - 2, as, bn - 2, bs, &nb, batch) != ST_OK) {
        st_error(ST_ERR_SHAPE, "matmul: batch dims of %s and %s cannot be broadcast",
                 st_shape_str(a->ndim, a->shape, x, sizeof x), st_shape_str(b->ndim, b->shape, y, sizeof y));
        return NULL;
    }
    if (nb + 2 > ST_MAX_DIMS) {
        st_error(ST_ERR_SHAPE, "matmul: result would have more than %d dims", ST_MAX_DIMS);
        return NULL;
    }
    st_dtype dt = st_promote_types((st_dtype)a->dtype, (st_dtype)b->dtype);
    if (st_autocast_dt != ST_DTYPE_COUNT && (dt == ST_F32 || dt == ST_F16 || dt == ST_BF16))
        dt = (st_dtype)st_autocast_dt; /* autocast: both read in the low precision (a cast folded
                                        * into the matmul's loads) */
    /* Operands as (batch.., M, K) and (batch.., K, N) views (1-D ones reshaped first). */
    st_tensor *a2 = a->ndim == 1 ? st_unsqueeze(a, 0) : st_retain(a);
    st_tensor *b2 = b->ndim == 1 ? st_unsqueeze(b, 1) : st_retain(b);
    st_node *srcs[2] = {NULL, NULL};
    st_tensor *r = NULL;
    if (a2 && b2) {
        int64_t sa[ST_MAX_DIMS], sb[ST_MAX_DIMS], so[ST_MAX_DIMS];
        memcpy(sa, batch, nb * sizeof *sa); sa[nb] = M; sa[nb + 1] = K;
        memcpy(sb, batch, nb * sizeof *sb); sb[nb] = K; sb[nb + 1] = N;
        memcpy(so, batch, nb * sizeof *so); so[nb] = M; so[nb + 1] = N;
        srcs[0] = st_tensor_read(a2, dt, nb + 2, sa);
        srcs[1] = srcs[0] ? st_tensor_read(b2, dt, nb + 2, sb) : NULL;
        if (srcs[1]) r = st_tensor_from_node(st_node_new(ST_OP_MATMUL, dt, nb + 2, so, 2, srcs, NULL));
    }
    st_node_release(srcs[0]);
    st_node_release(srcs[1]);
    st_release(a2);
    st_release(b2);
    if (r && (a->ndim == 1 || b->ndim == 1)) {
        int64_t fs[ST_MAX_DIMS];
        int fn = 0;
        for (int i = 0; i < nb; i++) fs[fn++] = batch[i];
        if (a->ndim != 1) fs[fn++] = M;
        if (b->ndim != 1) fs[fn++] = N;
        st_tensor *v = st_reshape(r, fn, fs);
        st_release(r);
        r = v;
    }
    return r;
}

/* ---- attention ---- */
/* The mask as an additive one in the compute type ct, at its own shape (a boolean: 0 where true,
 * -inf where false), so that the node reads it through a broadcast view, never a (Lq, Lk) copy. */
static st_tensor *attn_mask_as(st_tensor *mask, st_dtype ct) {
    if (mask->dtype == ST_BOOL) {
        st_tensor *z = st_scalar(0, ct), *ninf = z ? st_scalar(-INFINITY, ct) : NULL;
        st_tensor *r = ninf ? st_where(mask, z, ninf) : NULL;
        st_release(z);
        st_release(ninf);
        return r;
    }
    if (mask->dtype == ct) return st_retain(mask);
    return st_cast(mask, ct);
}

st_tensor *st_attention(st_tensor *q, st_tensor *k, st_tensor *v, st_tensor *mask, double scale, int causal,
                        double dropout) {
    if (!check_arg("attention", q) || !check_arg("attention", k) || !check_arg("attention", v) ||
        (mask && !check_arg("attention", mask)))
        return NULL;
    char x[160], y[160], z[160];
#define SHAPES st_shape_str(q->ndim, q->shape, x, sizeof x), st_shape_str(k->ndim, k->shape, y, sizeof y), \
               st_shape_str(v->ndim, v->shape, z, sizeof z)
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2) {
        st_error(ST_ERR_SHAPE, "attention: q, k, v need at least 2 dims (..., L, E), got %s, %s, %s", SHAPES);
        return NULL;
    }
    st_dtype dt = st_promote_types(st_promote_types((st_dtype)q->dtype, (st_dtype)k->dtype), (st_dtype)v->dtype);
    if (!st_is_float(dt)) {
        st_error(ST_ERR_DTYPE, "attention: float operands expected, got %s, %s, %s", st_dtypes[q->dtype].name,
                 st_dtypes[k->dtype].name, st_dtypes[v->dtype].name);
        return NULL;
    }
    /* autocast: f32/f16/bf16 operands are rounded to the low precision (PyTorch's list has the
     * attention), computed in f32 as always, and the result is in the low precision */
    const bool low = st_autocast_dt != ST_DTYPE_COUNT && (dt == ST_F32 || dt == ST_F16 || dt == ST_BF16);
    if (low) dt = (st_dtype)st_autocast_dt;
    if (!(dropout >= 0 && dropout <= 1)) {
        st_error(ST_ERR_ARG, "attention: dropout must be in [0, 1], got %g", dropout);
        return NULL;
    }
    if (mask && mask->dtype != ST_BOOL && !st_is_float((st_dtype)mask->dtype)) {
        st_error(ST_ERR_DTYPE, "attention: the mask must be bool or float, got %s", st_dtypes[mask->dtype].name);
        return NULL;
    }
    int64_t Lq = q->shape[q->ndim - 2], D = q->shape[q->ndim - 1], Lk = k->shape[k->ndim - 2];
    int64_t Dv = v->shape[v->ndim - 1];
    if (k->shape[k->ndim - 1] != D || v->shape[v->ndim - 2] != Lk) {
        st_error(ST_ERR_SHAPE, "attention: q %s, k %s, v %s: q and k need the same last dim and k and v the "
                 "same second-to-last (..., Lq, E), (..., Lk, E), (..., Lk, Ev)", SHAPES);
        return NULL;
    }
    int nb, nb2;
    int64_t batch[ST_MAX_DIMS], batch2[ST_MAX_DIMS];
    if (st_broadcast_shapes("attention", q->ndim - 2, q->shape, k->ndim - 2, k->shape, &nb, batch) != ST_OK ||
        st_broadcast_shapes("attention", nb, batch, v->ndim - 2, v->shape, &nb2, batch2) != ST_OK) {
        st_error(ST_ERR_SHAPE, "attention: the batch dims of q %s, k %s, v %s cannot be broadcast", SHAPES);
        return NULL;
    }
#undef SHAPES
    st_dtype ct = dt == ST_F64 ? ST_F64 : ST_F32;   /* f16/bf16 compute in f32, as softmax does */
    int64_t sq[ST_MAX_DIMS], sk[ST_MAX_DIMS], sv[ST_MAX_DIMS], so[ST_MAX_DIMS], sm[ST_MAX_DIMS];
    memcpy(sq, batch2, (size_t)nb2 * sizeof *sq); sq[nb2] = Lq; sq[nb2 + 1] = D;
    memcpy(sk, batch2, (size_t)nb2 * sizeof *sk); sk[nb2] = Lk; sk[nb2 + 1] = D;
    memcpy(sv, batch2, (size_t)nb2 * sizeof *sv); sv[nb2] = Lk; sv[nb2 + 1] = Dv;
    memcpy(so, batch2, (size_t)nb2 * sizeof *so); so[nb2] = Lq; so[nb2 + 1] = Dv;
    memcpy(sm, batch2, (size_t)nb2 * sizeof *sm); sm[nb2] = Lq; sm[nb2 + 1] = Lk;
    if (mask) {   /* broadcastable to (..., Lq, Lk) without growing it: st_expand's rule */
        st_tensor *e = st_expand(mask, nb2 + 2, sm);
        st_release(e);
        if (!e) {
            st_clear_error();
            st_error(ST_ERR_SHAPE, "attention: mask %s does not broadcast to the scores' shape %s",
                     st_shape_str(mask->ndim, mask->shape, x, sizeof x), st_shape_str(nb2 + 2, sm, y, sizeof y));
            return NULL;
        }
    }
    if (isnan(scale)) scale = 1.0 / sqrt((double)D);   /* E = 0: inf (PyTorch's too) */
    st_tensor *am = mask ? attn_mask_as(mask, ct) : NULL;
    if (mask && !am) return NULL;
    st_node *srcs[ST_NODE_SRCS] = {NULL, NULL, NULL, NULL};
    st_tensor *r = NULL;
    st_node_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.attn.scale = scale;
    arg.attn.causal = causal != 0;
    arg.attn.drop = dropout;
    /* st.rand's stream: the weights' (..., Lq, Lk) numbers, as F.dropout draws them (dropout 1
     * keeps nothing and, as F.dropout, draws nothing) */
    const bool draws = dropout > 0 && dropout < 1;
    if (draws) {
        arg.attn.seed = st_rng_seed;
        arg.attn.offset = st_rng_offset;
    }
    st_tensor *lq = low && q->dtype != dt ? st_cast(q, dt) : st_retain(q);
    st_tensor *lk = low && k->dtype != dt ? st_cast(k, dt) : st_retain(k);
    st_tensor *lv = low && v->dtype != dt ? st_cast(v, dt) : st_retain(v);
    if (lq && lk && lv && (srcs[0] = st_tensor_read(lq, ct, nb2 + 2, sq)) &&
        (srcs[1] = st_tensor_read(lk, ct, nb2 + 2, sk)) && (srcs[2] = st_tensor_read(lv, ct, nb2 + 2, sv)) &&
        (!am || (srcs[3] = st_tensor_read(am, ct, nb2 + 2, sm))))
        r = st_tensor_from_node(st_node_new(ST_OP_ATTN, ct, nb2 + 2, so, am ? 4 : 3, srcs, &arg));
    for (int i = 0; i < ST_NODE_SRCS; i++) st_node_release(srcs[i]);
    st_release(lq);
    st_release(lk);
    st_release(lv);
    st_release(am);
    if (r && ct != dt) {
        st_tensor *c = st_cast(r, dt);
        st_release(r);
        r = c;
    }
    if (r && draws) {   /* the stream advances only for a result returned (as random_impl's) */
        uint64_t ns = 1;
        for (int d = 0; d < nb2 + 2; d++) ns *= (uint64_t)sm[d];
        st_rng_offset += ns;
    }
    return r;
}
