/*
 * index.c — joining (cat, stack), index-driven ops (gather, index_select, scatter_add, index_add,
 * one_hot) and in-place ops (add_, copy_, fill_, ...).
 *
 * cat is a sum of masked views (each input padded with zeros to the output's shape), so it fuses
 * into one pointwise kernel with its consumers. In-place ops compute the new value lazily and install
 * it as a new version of the storage (st_tensor_write).
 */
#include "runtime/tensor.h"

static int check(const char *op, const st_tensor *t) {
    if (!t) st_error(ST_ERR_ARG, "%s: NULL tensor argument", op);
    return t != NULL;
}

st_tensor *st_cat(int n, st_tensor *const *ts, int dim) {
    if (n <= 0) {
        st_error(ST_ERR_ARG, "cat: needs at least one tensor");
        return NULL;
    }
    if (!ts) {
        st_error(ST_ERR_ARG, "cat: NULL array of tensors");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!check("cat", ts[i])) return NULL;
    const st_tensor *a = ts[0];
    if (a->ndim == 0) {
        st_error(ST_ERR_SHAPE, "cat: 0-d tensors cannot be concatenated (use stack)");
        return NULL;
    }
    int d = st_norm_dim("cat", dim, a->ndim);
    if (d < 0) return NULL;
    int64_t shape[ST_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[d] = 0;
    st_dtype dt = (st_dtype)a->dtype;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = ts[i];
        int ok = t->ndim == a->ndim;
        for (int k = 0; ok && k < a->ndim; k++) ok = k == d || t->shape[k] == a->shape[k];
        if (!ok) {
            char x[160], y[160];
            st_error(ST_ERR_SHAPE, "cat: tensor " BASE_POS " has shape %s, incompatible with %s along dim " BASE_POS,
                     BASE_P(i), st_shape_str(t->ndim, t->shape, x, sizeof x), st_shape_str(a->ndim, a->shape, y, sizeof y),
                     BASE_P(dim));
            return NULL;
        }
        shape[d] += t->shape[d];
        dt = st_promote_types(dt, (st_dtype)t->dtype);
    }
    if (n == 1) return st_cast(ts[0], dt);
    st_node *acc = NULL;
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        st_tensor *t = ts[i];
        int64_t before[ST_MAX_DIMS] = {0}, after[ST_MAX_DIMS] = {0};
        before[d] = off;
        after[d] = shape[d] - off - t->shape[d];
        off += t->shape[d];
        st_node *p = st_pad_view_node(t, dt, before, after);   /* t in its place, 0 elsewhere */
        if (!p) goto fail;
        if (!acc) {
            acc = p;
            continue;
        }
        st_node *srcs[2] = {acc, p};
        st_node *s = st_node_new(ST_OP_ADD, dt, a->ndim, shape, 2, srcs, NULL);
        st_node_release(acc);
        st_node_release(p);
        if (!(acc = s)) goto fail;
    }
    return st_tensor_from_node(acc);
fail:
    st_node_release(acc);
    return NULL;
}

st_tensor *st_stack(int n, st_tensor *const *ts, int dim) {
    if (n <= 0) {
        st_error(ST_ERR_ARG, "stack: needs at least one tensor");
        return NULL;
    }
    if (!ts) {
        st_error(ST_ERR_ARG, "stack: NULL array of tensors");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!check("stack", ts[i])) return NULL;
    for (int i = 1; i < n; i++)
        if (ts[i]->ndim != ts[0]->ndim || memcmp(ts[i]->shape, ts[0]->shape, ts[0]->ndim * sizeof(int64_t))) {
            char x[160], y[160];
            st_error(ST_ERR_SHAPE, "stack: tensor " BASE_POS " has shape %s but tensor " BASE_POS " has %s", BASE_P(i),
                     st_shape_str(ts[i]->ndim, ts[i]->shape, x, sizeof x),
                     BASE_P(0), st_shape_str(ts[0]->ndim, ts[0]->shape, y, sizeof y));
            return NULL;
        }
    int d = st_norm_dim("stack", dim, ts[0]->ndim + 1);
    if (d < 0) return NULL;
    st_tensor *stackbuf[16];
    st_tensor **u = n <= 16 ? stackbuf : st_calloc(n, sizeof *u);
    if (!u) return NULL;
    st_tensor *r = NULL;
    int k = 0;
    for (; k < n; k++)
        if (!(u[k] = st_unsqueeze(ts[k], d))) break;
    if (k == n) r = st_cat(n, u, d);
    for (int i = 0; i < k; i++) st_release(u[i]);
    if (u != stackbuf) st_free(u);
    return r;
}

/* Index tensors must be integers; when already computed, their range is checked at once. */
static int check_index(const char *op, st_tensor *index, int64_t bound, int dim) {
    if (!st_is_int((st_dtype)index->dtype)) {
        st_error(ST_ERR_DTYPE, "%s: index must be i32 or i64, got %s", op, st_dtype_name((st_dtype)index->dtype));
        return 0;
    }
    if (!st_is_realized(index) || st_numel(index) == 0) return 1; /* kernels guard and report */
    int64_t n = st_numel(index);
    int64_t *v = st_malloc(n * sizeof *v);
    if (!v) return 0;
    int ok = st_to_host(index, ST_I64, v, n * sizeof *v) == ST_OK;
    for (int64_t i = 0; ok && i < n; i++)
        if (v[i] < 0 || v[i] >= bound) {
            st_error(ST_ERR_ARG, "%s: index " BASE_INDEX " out of range for dim " BASE_POS " of size %lld", op,
                     BASE_P(v[i]), BASE_P(dim), (long long)bound);
            ok = 0;
        }
    st_free(v);
    return ok;
}

st_tensor *st_gather(st_tensor *a, int dim, st_tensor *index) {
    if (!check("gather", a) || !check("gather", index)) return NULL;
    int d = st_norm_dim("gather", dim, a->ndim);
    if (d < 0) return NULL;
    char x[160], y[160];
    int ok = index->ndim == a->ndim;
    for (int k = 0; ok && k < a->ndim; k++) ok = k == d || index->shape[k] <= a->shape[k];
    if (!ok) {
        st_error(ST_ERR_SHAPE, "gather: index shape %s does not fit input shape %s (dim " BASE_POS ")",
                 st_shape_str(index->ndim, index->shape, x, sizeof x), st_shape_str(a->ndim, a->shape, y, sizeof y),
                 BASE_P(dim));
        return NULL;
    }
    if (!check_index("gather", index, a->shape[d], dim)) return NULL;
    st_node *srcs[2] = {st_tensor_read(a, (st_dtype)a->dtype, a->ndim, a->shape),
                        st_tensor_read(index, (st_dtype)index->dtype, index->ndim, index->shape)};
    st_node_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.axis.dim = d;
    st_node *n = srcs[0] && srcs[1] ? st_node_new(ST_OP_GATHER, a->dtype, index->ndim, index->shape, 2, srcs, &arg) : NULL;
    st_node_release(srcs[0]);
    st_node_release(srcs[1]);
    return st_tensor_from_node(n);
}

/* index (1-D) viewed as (1,..,n,..,1) and expanded to shape, for index_select / index_add. */
static st_tensor *expand_index(const char *op, st_tensor *index, int ndim, const int64_t *shape, int d) {
    if (index->ndim != 1) {
        char x[160];
        st_error(ST_ERR_SHAPE, "%s: index must be 1-D, got %s", op, st_shape_str(index->ndim, index->shape, x, sizeof x));
        return NULL;
    }
    int64_t s[ST_MAX_DIMS], str[ST_MAX_DIMS];
    for (int k = 0; k < ndim; k++) {
        s[k] = shape[k];
        str[k] = k == d ? index->strides[0] : 0;
    }
    return st_tensor_view(index, ndim, s, str, index->offset);
}

st_tensor *st_index_select(st_tensor *a, int dim, st_tensor *index) {
    if (!check("index_select", a) || !check("index_select", index)) return NULL;
    int d = st_norm_dim("index_select", dim, a->ndim);
    if (d < 0 || !check_index("index_select", index, a->shape[d], dim)) return NULL;
    int64_t shape[ST_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[d] = index->ndim == 1 ? index->shape[0] : 0;
    st_tensor *e = expand_index("index_select", index, a->ndim, shape, d);
    st_tensor *r = e ? st_gather(a, d, e) : NULL;
    st_release(e);
    return r;
}

st_tensor *st_scatter_add(st_tensor *a, int dim, st_tensor *index, st_tensor *src) {
    if (!check("scatter_add", a) || !check("scatter_add", index) || !check("scatter_add", src)) return NULL;
    int d = st_norm_dim("scatter_add", dim, a->ndim);
    if (d < 0) return NULL;
    char x[160], y[160];
    int ok = index->ndim == a->ndim && src->ndim == index->ndim &&
             !memcmp(src->shape, index->shape, index->ndim * sizeof(int64_t));
    for (int k = 0; ok && k < a->ndim; k++) ok = k == d || index->shape[k] <= a->shape[k];
    if (!ok) {
        st_error(ST_ERR_SHAPE, "scatter_add: index %s and src %s must have one shape that fits into %s",
                 st_shape_str(index->ndim, index->shape, x, sizeof x), st_shape_str(src->ndim, src->shape, y, sizeof y),
                 st_shape_str(a->ndim, a->shape, (char[160]){0}, 160));
        return NULL;
    }
    if (!check_index("scatter_add", index, a->shape[d], dim)) return NULL;
    st_dtype dt = (st_dtype)a->dtype;
    st_node *srcs[3] = {st_tensor_read(a, dt, a->ndim, a->shape),
                        st_tensor_read(index, (st_dtype)index->dtype, index->ndim, index->shape),
                        st_tensor_read(src, dt, src->ndim, src->shape)};
    st_node_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.axis.dim = d;
    st_node *n = srcs[0] && srcs[1] && srcs[2] ? st_node_new(ST_OP_SCATTER_ADD, dt, a->ndim, a->shape, 3, srcs, &arg) : NULL;
    for (int i = 0; i < 3; i++) st_node_release(srcs[i]);
    return st_tensor_from_node(n);
}

st_tensor *st_index_add(st_tensor *a, int dim, st_tensor *index, st_tensor *src) {
    if (!check("index_add", a) || !check("index_add", index) || !check("index_add", src)) return NULL;
    int d = st_norm_dim("index_add", dim, a->ndim);
    if (d < 0) return NULL;
    int64_t shape[ST_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[d] = index->ndim == 1 ? index->shape[0] : 0;
    if (src->ndim != a->ndim || memcmp(src->shape, shape, a->ndim * sizeof(int64_t))) {
        char x[160], y[160];
        st_error(ST_ERR_SHAPE, "index_add: src has shape %s, expected %s", st_shape_str(src->ndim, src->shape, x, sizeof x),
                 st_shape_str(a->ndim, shape, y, sizeof y));
        return NULL;
    }
    st_tensor *e = expand_index("index_add", index, a->ndim, shape, d);
    st_tensor *r = e ? st_scatter_add(a, d, e, src) : NULL;
    st_release(e);
    return r;
}

st_tensor *st_one_hot(st_tensor *index, int64_t num_classes) {
    if (!check("one_hot", index)) return NULL;
    if (!st_is_int((st_dtype)index->dtype)) {
        st_error(ST_ERR_DTYPE, "one_hot: index must be an integer tensor, got %s", st_dtype_name((st_dtype)index->dtype));
        return NULL;
    }
    if (num_classes < -1) {
        st_error(ST_ERR_ARG, "one_hot: %lld classes (want >= 0, or -1 to infer the count from the index)",
                 (long long)num_classes);
        return NULL;
    }
    /* The class ids are checked (a sync point, as in PyTorch): one out of range would give a row of
     * zeros, silently. */
    if (st_numel(index) > 0) {
        st_tensor *mm[2] = {st_min(index, 0, NULL, 0), st_max(index, 0, NULL, 0)};
        int64_t lo = 0, hi = 0;
        st_status s = mm[0] && mm[1] ? st_realize(2, mm) : st_last_status();
        if (s == ST_OK) s = st_item_i64(mm[0], &lo);
        if (s == ST_OK) s = st_item_i64(mm[1], &hi);
        st_release(mm[0]);
        st_release(mm[1]);
        if (s != ST_OK) return NULL;
        if (num_classes == -1) num_classes = hi + 1;
        if (lo < 0 || hi >= num_classes) {
            char x[160];
            st_error(ST_ERR_ARG, "one_hot: class " BASE_INDEX " out of range for %lld classes (index of shape %s)",
                     BASE_P(lo < 0 ? lo : hi), (long long)num_classes,
                     st_shape_str(index->ndim, index->shape, x, sizeof x));
            return NULL;
        }
    } else if (num_classes == -1) {
        st_error(ST_ERR_ARG, "one_hot: cannot infer the number of classes from an empty index");
        return NULL;
    }
    if (index->ndim >= ST_MAX_DIMS) {
        st_error(ST_ERR_SHAPE, "one_hot: index already has %d dims", index->ndim);
        return NULL;
    }
    int64_t shape[ST_MAX_DIMS];
    memcpy(shape, index->shape, index->ndim * sizeof *shape);
    shape[index->ndim] = num_classes;
    st_node_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.iota.step = 1;
    arg.iota.axis = index->ndim;
    st_tensor *u = st_unsqueeze(index, -1);
    st_tensor *io = st_tensor_from_node(st_node_new(ST_OP_IOTA, ST_I64, index->ndim + 1, shape, 0, NULL, &arg));
    st_tensor *e = u && io ? st_eq(u, io) : NULL;
    st_tensor *r = e ? st_cast(e, ST_I64) : NULL;
    st_release(u);
    st_release(io);
    st_release(e);
    return r;
}

/* ---- in-place ---- */
/* Install value (any tensor broadcastable to a) into a's region, cast to a's dtype. */
static st_status write_tensor(const char *op, st_tensor *a, st_tensor *value) {
    int nd;
    int64_t shape[ST_MAX_DIMS];
    if (st_broadcast_shapes(op, a->ndim, a->shape, value->ndim, value->shape, &nd, shape) != ST_OK)
        return st_last_status();
    if (nd != a->ndim || memcmp(shape, a->shape, nd * sizeof *shape)) {
        char x[160], y[160];
        return st_error(ST_ERR_SHAPE, "%s: a value of shape %s cannot be written into a tensor of shape %s", op,
                        st_shape_str(value->ndim, value->shape, x, sizeof x), st_shape_str(a->ndim, a->shape, y, sizeof y));
    }
    return st_tensor_write(a, st_tensor_read(value, (st_dtype)a->dtype, a->ndim, a->shape));
}

static st_status inplace(const char *op, st_tensor *(*fn)(st_tensor *, st_tensor *), st_tensor *a, st_tensor *b) {
    if (!check(op, a) || !check(op, b)) return st_last_status();
    /* Check the shape before computing: a += b must not grow a. */
    int nd;
    int64_t shape[ST_MAX_DIMS];
    if (st_broadcast_shapes(op, a->ndim, a->shape, b->ndim, b->shape, &nd, shape) != ST_OK) return st_last_status();
    st_tensor *v = fn(a, b);
    if (!v) return st_last_status();
    st_status s = write_tensor(op, a, v);
    st_release(v);
    return s;
}
st_status st_add_(st_tensor *a, st_tensor *b) { return inplace("add_", st_add, a, b); }
st_status st_sub_(st_tensor *a, st_tensor *b) { return inplace("sub_", st_sub, a, b); }
st_status st_mul_(st_tensor *a, st_tensor *b) { return inplace("mul_", st_mul, a, b); }
st_status st_div_(st_tensor *a, st_tensor *b) { return inplace("div_", st_div, a, b); }

/* A source on another device is moved to dst's first (as PyTorch's copy_ does): a checkpoint
 * loaded on the cpu can be copied into a model's GPU parameters. */
st_status st_copy_(st_tensor *dst, st_tensor *src) {
    if (!check("copy_", dst) || !check("copy_", src)) return st_last_status();
    int dd = st_node_dev(dst->storage->node), sd = st_node_dev(src->storage->node);
    if (dd == ST_DEV_ANY) dd = st_default_dev();
    if (sd == ST_DEV_ANY || sd == dd) return write_tensor("copy_", dst, src);
    st_tensor *moved = st_to_dev(src, dd);
    if (!moved) return st_last_status();
    st_status s = write_tensor("copy_", dst, moved);
    st_release(moved);
    return s;
}

st_status st_fill_(st_tensor *a, double v) {
    if (!check("fill_", a)) return st_last_status();
    st_tensor *c = st_scalar_op("fill_", v, (st_dtype)a->dtype);
    if (!c) return st_last_status();
    st_status s = write_tensor("fill_", a, c);
    st_release(c);
    return s;
}
st_status st_zero_(st_tensor *a) { return st_fill_(a, 0); }
