/*
 * create.c — creation ops: scalars, full/zeros/ones, host data, arange/linspace/eye, random.
 *
 * Creation records source nodes (CONST broadcast by a stride-0 VIEW, IOTA, RAND_*): nothing is
 * allocated until a value is needed, and a zeros() that feeds an add fuses into it. Random ops take
 * the next numel counters of the global Philox stream (seed, offset), so their numbers depend only
 * on the seed and the order of random calls — never on fusion or the device.
 */
#include "runtime/tensor.h"
#include <math.h>

static int check_shape(const char *op, int ndim, const int64_t *shape, st_dtype dt) {
    if (ndim < 0 || ndim > ST_MAX_DIMS) {
        st_error(ST_ERR_ARG, "%s: %d dims (at most %d)", op, ndim, ST_MAX_DIMS);
        return 0;
    }
    if (ndim > 0 && !shape) {
        st_error(ST_ERR_ARG, "%s: NULL shape for %d dims", op, ndim);
        return 0;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            char b[160];
            st_error(ST_ERR_ARG, "%s: negative size in %s", op, st_shape_str(ndim, shape, b, sizeof b));
            return 0;
        }
    int64_t n;
    if (!st_shape_numel_checked(ndim, shape, st_dtypes[dt].size, &n)) {
        char b[200];
        st_error(ST_ERR_ARG, "%s: size %s is too large (%s elements: its bytes do not fit in 64 bits)", op,
                 st_shape_str(ndim, shape, b, sizeof b), st_dtypes[dt].name);
        return 0;
    }
    return 1;
}

static int check_dtype(const char *op, st_dtype dt) {
    if ((unsigned)dt < ST_DTYPE_COUNT) return 1;
    st_error(ST_ERR_DTYPE, "%s: unknown dtype %d", op, (int)dt);
    return 0;
}

/* A value that an integer dtype cannot hold (or NaN, or an infinity) is an error, as PyTorch's
 * "value cannot be converted to type int32 without overflow" for full, fill_ and tensor(...): a
 * silent wrap (2^40 into i32 is 0) would hide the mistake. The fraction is dropped (toward zero),
 * as in C and PyTorch. Float dtypes round; bool is v != 0. */
static int check_value(const char *op, st_dtype dt, double v) {
    if (!st_is_int(dt)) return 1;
    int ok = st_dtypes[dt].size == 4 ? v > -2147483649.0 && v < 2147483648.0 /* trunc(v) in [-2^31, 2^31) */
                                     : v >= -9223372036854775808.0 && v < 9223372036854775808.0; /* 2^63 */
    if (ok) return 1;
    st_error(ST_ERR_ARG, "%s: value %.17g cannot be converted to type %s without overflow", op, v, st_dtype_name(dt));
    return 0;
}

static st_node *const_node(st_dtype dt, double v, int flags) {
    st_node_arg a;
    memset(&a, 0, sizeof a);
    if (st_is_float(dt)) a.c.f = v;
    else if (dt == ST_BOOL) a.c.i = v != 0;
    else a.c.i = isnan(v) ? 0 : (int64_t)v;
    st_node *n = st_node_new(ST_OP_CONST, dt, 0, NULL, 0, NULL, &a);
    if (n) n->flags = (uint8_t)flags;
    return n;
}

st_tensor *st_scalar_op(const char *op, double v, st_dtype dt) {
    st_runtime_init();
    if (!check_dtype(op, dt) || !check_value(op, dt, v)) return NULL;
    return st_tensor_from_node(const_node(dt, v, 0));
}
st_tensor *st_scalar(double v, st_dtype dt) { return st_scalar_op("scalar", v, dt); }

st_tensor *st_weak_scalar_f(double v) {
    st_runtime_init();
    st_tensor *t = st_tensor_from_node(const_node(ST_F32, v, NODE_WEAK));
    if (t) t->weak = 1;
    return t;
}

st_tensor *st_weak_scalar_i(int64_t v) {
    st_runtime_init();
    st_node_arg a;
    memset(&a, 0, sizeof a);
    a.c.i = v;
    st_node *n = st_node_new(ST_OP_CONST, ST_I64, 0, NULL, 0, NULL, &a);
    if (n) n->flags = NODE_WEAK;
    st_tensor *t = st_tensor_from_node(n);
    if (t) t->weak = 1;
    return t;
}

/* A CONST broadcast to shape: the storage's node is a stride-0 VIEW. */
static st_tensor *full_impl(const char *op, st_dtype dt, int ndim, const int64_t *shape, double v) {
    st_runtime_init();
    if (!check_dtype(op, dt) || !check_shape(op, ndim, shape, dt) || !check_value(op, dt, v)) return NULL;
    st_node *c = const_node(dt, v, 0);
    if (!c) return NULL;
    if (ndim == 0) return st_tensor_from_node(c);
    st_node_arg a;
    memset(&a, 0, sizeof a);
    st_node *n = st_node_new(ST_OP_VIEW, dt, ndim, shape, 1, &c, &a);
    st_node_release(c);
    return st_tensor_from_node(n);
}
st_tensor *st_full(st_dtype dt, int nd, const int64_t *s, double v) { return full_impl("full", dt, nd, s, v); }
st_tensor *st_zeros(st_dtype dt, int nd, const int64_t *s) { return full_impl("zeros", dt, nd, s, 0); }
st_tensor *st_ones(st_dtype dt, int nd, const int64_t *s) { return full_impl("ones", dt, nd, s, 1); }

/* A realized tensor with uninitialized contents (poisoned in test mode). */
static st_tensor *buffer_tensor(const char *op, st_dtype dt, int ndim, const int64_t *shape) {
    st_runtime_init();
    if (!check_dtype(op, dt) || !check_shape(op, ndim, shape, dt)) return NULL;
    st_node *n = st_node_new(ST_OP_BUFFER, dt, ndim, shape, 0, NULL, NULL);
    if (!n) return NULL;
    st_buffer *b = st_buffer_new(st_node_nbytes(n));
    if (!b) {
        st_node_release(n);
        return NULL;
    }
    st_node_realize(n, b);
    return st_tensor_from_node(n);
}

st_tensor *st_empty_host(st_dtype dt, int ndim, const int64_t *shape) {
    return buffer_tensor("empty", dt, ndim, shape);
}

st_tensor *st_from_data_host(st_dtype dt, int ndim, const int64_t *shape, const void *data) {
    st_tensor *t = buffer_tensor("from_data", dt, ndim, shape);
    if (t && st_numel(t)) {
        if (!data) {
            st_release(t);
            st_error(ST_ERR_ARG, "from_data: NULL data");
            return NULL;
        }
        memcpy(t->storage->node->buf->data, data, st_node_nbytes(t->storage->node));
    }
    return t;
}

/* The public creators put data on the default device: built on the host, then moved. */
static st_tensor *to_default(st_tensor *t) {
    if (!t || dev_host_memory(st_default_dev())) return t;
    st_tensor *d = st_to_dev(t, st_default_dev());
    st_release(t);
    return d;
}

st_tensor *st_empty(st_dtype dt, int ndim, const int64_t *shape) {
    if (!dev_host_memory(st_default_dev())) { /* no host copy of garbage: allocate on the device */
        st_runtime_init();
        if (!check_dtype("empty", dt) || !check_shape("empty", ndim, shape, dt)) return NULL;
        st_node *n = st_node_new(ST_OP_BUFFER, dt, ndim, shape, 0, NULL, NULL);
        st_buffer *b = n ? st_buffer_new_on(st_default_dev(), st_node_nbytes(n)) : NULL;
        if (!b) {
            st_node_release(n);
            return NULL;
        }
        st_node_realize(n, b);
        return st_tensor_from_node(n);
    }
    return st_empty_host(dt, ndim, shape);
}

st_tensor *st_from_data(st_dtype dt, int ndim, const int64_t *shape, const void *data) {
    return to_default(st_from_data_host(dt, ndim, shape, data));
}

static st_tensor *iota(st_dtype dt, int ndim, const int64_t *shape, int axis, double start, double step) {
    st_node_arg a;
    memset(&a, 0, sizeof a);
    a.iota.start = start;
    a.iota.step = step;
    a.iota.axis = axis;
    return st_tensor_from_node(st_node_new(ST_OP_IOTA, dt, ndim, shape, 0, NULL, &a));
}

st_tensor *st_arange(double start, double end, double step, st_dtype dt) {
    st_runtime_init();
    if (!check_dtype("arange", dt)) return NULL;
    if (step == 0 || isnan(step) || isnan(start) || isnan(end) || isinf(start) || isinf(end)) {
        st_error(ST_ERR_ARG, "arange: bad range [%g, %g) with step %g", start, end, step);
        return NULL;
    }
    double len = ceil((end - start) / step);
    if (len > 1e15) {
        st_error(ST_ERR_ARG, "arange: range [%g, %g) with step %g is too long", start, end, step);
        return NULL;
    }
    int64_t n = len > 0 ? (int64_t)len : 0;
    return iota(dt, 1, &n, 0, start, step);
}

st_tensor *st_linspace(double start, double end, int64_t n, st_dtype dt) {
    st_runtime_init();
    if (!check_dtype("linspace", dt)) return NULL;
    if (n < 0) {
        st_error(ST_ERR_ARG, "linspace: negative number of points %lld", (long long)n);
        return NULL;
    }
    return iota(dt, 1, &n, 0, start, n > 1 ? (end - start) / (double)(n - 1) : 0);
}

st_tensor *st_eye(int64_t n, int64_t m, st_dtype dt) {
    st_runtime_init();
    if (m < 0) m = n;
    int64_t shape[2] = {n, m};
    if (!check_dtype("eye", dt) || !check_shape("eye", 2, shape, dt)) return NULL;
    st_tensor *r = iota(ST_I64, 2, shape, 0, 0, 1), *c = iota(ST_I64, 2, shape, 1, 0, 1);
    st_tensor *e = r && c ? st_eq(r, c) : NULL;
    st_tensor *out = e ? st_cast(e, dt) : NULL;
    st_release(r);
    st_release(c);
    st_release(e);
    return out;
}

static st_tensor *random_node(st_op rop, st_dtype dt, int ndim, const int64_t *shape, uint64_t seed,
                              uint64_t offset, int64_t lo, int64_t hi) {
    st_node_arg a;
    memset(&a, 0, sizeof a);
    a.rng.seed = seed;
    a.rng.offset = offset;
    a.rng.lo = lo;
    a.rng.hi = hi;
    return st_tensor_from_node(st_node_new(rop, dt, ndim, shape, 0, NULL, &a));
}

static st_tensor *random_impl(const char *op, st_op rop, st_dtype dt, int ndim, const int64_t *shape,
                              int64_t lo, int64_t hi) {
    st_runtime_init();
    if (!check_dtype(op, dt) || !check_shape(op, ndim, shape, dt)) return NULL;
    st_tensor *t = random_node(rop, dt, ndim, shape, st_rng_seed, st_rng_offset, lo, hi);
    /* the stream advances only for a tensor returned: a call that failed (out of memory) and is
     * made again draws the same numbers */
    if (t) st_rng_offset += (uint64_t)t->storage->node->numel;
    return t;
}

st_tensor *st_rand_at(st_dtype dt, int ndim, const int64_t *shape, uint64_t seed, uint64_t offset) {
    return random_node(ST_OP_RAND_U, dt, ndim, shape, seed, offset, 0, 0);
}

st_tensor *st_rand(st_dtype dt, int ndim, const int64_t *shape) {
    if (!check_dtype("rand", dt)) return NULL;
    if (!st_is_float(dt)) {
        st_error(ST_ERR_DTYPE, "rand: needs a float dtype, got %s", st_dtype_name(dt));
        return NULL;
    }
    return random_impl("rand", ST_OP_RAND_U, dt, ndim, shape, 0, 0);
}

st_tensor *st_randn(st_dtype dt, int ndim, const int64_t *shape) {
    if (!check_dtype("randn", dt)) return NULL;
    if (!st_is_float(dt)) {
        st_error(ST_ERR_DTYPE, "randn: needs a float dtype, got %s", st_dtype_name(dt));
        return NULL;
    }
    return random_impl("randn", ST_OP_RAND_N, dt, ndim, shape, 0, 0);
}

st_tensor *st_randint(int64_t lo, int64_t hi, st_dtype dt, int ndim, const int64_t *shape) {
    if (hi <= lo) {
        st_error(ST_ERR_ARG, "randint: empty range [%lld, %lld)", (long long)lo, (long long)hi);
        return NULL;
    }
    if (!check_dtype("randint", dt)) return NULL;
    if (st_is_int(dt)) return random_impl("randint", ST_OP_RAND_INT, dt, ndim, shape, lo, hi);
    st_tensor *i = random_impl("randint", ST_OP_RAND_INT, ST_I64, ndim, shape, lo, hi);
    st_tensor *r = i ? st_cast(i, dt) : NULL;
    st_release(i);
    return r;
}
