/*
 * views.c — view ops: reshape, permute, expand, slice, select, squeeze, unsqueeze, flatten,
 * contiguous, clone. Views share the source's storage (writes through one are seen by all); only
 * reshape copies, and only when strides cannot express the new shape (PyTorch's rule).
 */
#include "runtime/tensor.h"

static int check(const char *op, const st_tensor *t) {
    if (!t) st_error(ST_ERR_ARG, "%s: NULL tensor argument", op);
    return t != NULL;
}

/* Strides for viewing (shape, strides) as new_shape without a copy, PyTorch's algorithm: walk
 * chunks of dims that are contiguous with each other. Returns 0 when impossible. */
static int view_strides(int nd, const int64_t *shape, const int64_t *strides, int nn,
                        const int64_t *nshape, int64_t *nstrides) {
    if (nd == 0 || st_shape_numel(nd, shape) == 0) {
        st_contig_strides(nn, nshape, nstrides);
        return 1;
    }
    int view_d = nn - 1;
    int64_t chunk = strides[nd - 1], tensor_numel = 1, view_numel = 1;
    for (int d = nd - 1; d >= 0; d--) {
        tensor_numel *= shape[d];
        if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk)) {
            while (view_d >= 0 && (view_numel < tensor_numel || nshape[view_d] == 1)) {
                nstrides[view_d] = view_numel * chunk;
                view_numel *= nshape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return 0;
            if (d > 0) {
                chunk = strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

/* Resolve one -1 and check the element count. */
static int infer_shape(const char *op, const st_tensor *a, int ndim, const int64_t *shape, int64_t *out) {
    int infer = -1;
    int64_t known = 1, numel = st_numel(a);
    char x[160], y[160];
    if (ndim < 0 || ndim > ST_MAX_DIMS) {
        st_error(ST_ERR_ARG, "%s: %d dims (at most %d)", op, ndim, ST_MAX_DIMS);
        return 0;
    }
    if (ndim > 0 && !shape) {
        st_error(ST_ERR_ARG, "%s: NULL shape for %d dims", op, ndim);
        return 0;
    }
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0) {
                st_error(ST_ERR_ARG, "%s: only one dim can be -1 in %s", op, st_shape_str(ndim, shape, y, sizeof y));
                return 0;
            }
            infer = i;
        } else if (shape[i] < 0) {
            st_error(ST_ERR_ARG, "%s: negative size in %s", op, st_shape_str(ndim, shape, y, sizeof y));
            return 0;
        } else {
            known *= shape[i];
        }
    }
    if (infer >= 0) {
        if (known == 0 || numel % known) goto bad;
        out[infer] = numel / known;
    } else if (known != numel) {
        goto bad;
    }
    return 1;
bad:
    st_error(ST_ERR_SHAPE, "%s: cannot view %s (%lld elements) as %s", op,
             st_shape_str(a->ndim, a->shape, x, sizeof x), (long long)numel,
             st_shape_str(ndim, shape, y, sizeof y));
    return 0;
}

static st_tensor *reshape_impl(const char *op, st_tensor *a, int ndim, const int64_t *shape, int allow_copy) {
    if (!check(op, a)) return NULL;
    int64_t ns[ST_MAX_DIMS], nstr[ST_MAX_DIMS];
    if (!infer_shape(op, a, ndim, shape, ns)) return NULL;
    if (view_strides(a->ndim, a->shape, a->strides, ndim, ns, nstr))
        return st_tensor_view(a, ndim, ns, nstr, a->offset);
    if (!allow_copy) {
        char x[160], y[160];
        st_error(ST_ERR_SHAPE, "view: the strides of %s cannot express %s; use reshape (which copies)",
                 st_shape_str(a->ndim, a->shape, x, sizeof x), st_shape_str(ndim, ns, y, sizeof y));
        return NULL;
    }
    /* A new storage whose value is a's elements in C order, viewed with the new shape. */
    st_node *x = st_tensor_read(a, (st_dtype)a->dtype, a->ndim, a->shape);
    if (!x) return NULL;
    st_node_arg arg;
    memset(&arg, 0, sizeof arg);
    st_contig_strides(ndim, ns, arg.view.strides);
    st_node *n = st_node_new(ST_OP_VIEW, x->dtype, ndim, ns, 1, &x, &arg);
    st_node_release(x);
    return st_tensor_from_node(n);
}
st_tensor *st_reshape(st_tensor *a, int ndim, const int64_t *shape) { return reshape_impl("reshape", a, ndim, shape, 1); }
st_tensor *st_view(st_tensor *a, int ndim, const int64_t *shape) { return reshape_impl("view", a, ndim, shape, 0); }

st_tensor *st_as_strided(st_tensor *a, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset) {
    if (!check("as_strided", a)) return NULL;
    if (ndim < 0 || ndim > ST_MAX_DIMS || (ndim > 0 && (!shape || !strides))) {
        st_error(ST_ERR_ARG, "as_strided: %d dims (0..%d, with a shape and strides each)", ndim, ST_MAX_DIMS);
        return NULL;
    }
    int64_t numel = 1, last = offset;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || strides[d] < 0) {
            st_error(ST_ERR_ARG, "as_strided: dim " BASE_POS " has size %lld and stride %lld (both must be >= 0)",
                     BASE_P(d), (long long)shape[d], (long long)strides[d]);
            return NULL;
        }
        numel *= shape[d];
        if (shape[d] > 0) last += (shape[d] - 1) * strides[d];
    }
    if (offset < 0 || (numel > 0 && last >= st_numel(a))) {
        char x[160], y[160], z[160];
        st_error(ST_ERR_SHAPE, "as_strided: size %s with strides %s and offset %lld reaches element %lld of a "
                 "tensor of %lld elements (shape %s)", st_shape_str(ndim, shape, x, sizeof x),
                 st_shape_str(ndim, strides, y, sizeof y), (long long)offset, (long long)last,
                 (long long)st_numel(a), st_shape_str(a->ndim, a->shape, z, sizeof z));
        return NULL;
    }
    st_tensor *c = st_contiguous(a);
    if (!c) return NULL;
    st_tensor *r = st_tensor_view(c, ndim, shape, strides, c->offset + offset);
    st_release(c);
    return r;
}

st_node *st_pad_view_node(st_tensor *t, st_dtype dt, const int64_t *before, const int64_t *after) {
    st_node_arg arg;
    memset(&arg, 0, sizeof arg);
    int64_t shape[ST_MAX_DIMS];
    st_contig_strides(t->ndim, t->shape, arg.view.strides);
    for (int d = 0; d < t->ndim; d++) {
        shape[d] = t->shape[d] + before[d] + after[d];
        arg.view.lo[d] = before[d];
        arg.view.hi[d] = before[d] + t->shape[d];
        arg.view.offset -= before[d] * arg.view.strides[d];
    }
    arg.view.has_mask = 1;
    st_node *x = st_tensor_read(t, dt, t->ndim, t->shape);
    if (!x) return NULL;
    st_node *n = st_node_new(ST_OP_VIEW, dt, t->ndim, shape, 1, &x, &arg);
    st_node_release(x);
    return n;
}

st_tensor *st_zero_pad(st_tensor *a, const int64_t *before, const int64_t *after) {
    if (!check("zero_pad", a)) return NULL;
    if (a->ndim > 0 && (!before || !after)) {
        st_error(ST_ERR_ARG, "zero_pad: NULL pads for a tensor with %d dims", a->ndim);
        return NULL;
    }
    for (int d = 0; d < a->ndim; d++)
        if (before[d] < 0 || after[d] < 0) {
            st_error(ST_ERR_ARG, "zero_pad: dim " BASE_POS " pads (%lld, %lld) must be >= 0", BASE_P(d),
                     (long long)before[d], (long long)after[d]);
            return NULL;
        }
    st_node *n = st_pad_view_node(a, (st_dtype)a->dtype, before, after);
    return n ? st_tensor_from_node(n) : NULL;
}

st_tensor *st_permute(st_tensor *a, const int *perm) {
    if (!check("permute", a)) return NULL;
    if (a->ndim > 0 && !perm) {
        st_error(ST_ERR_ARG, "permute: NULL perm for a tensor with %d dims", a->ndim);
        return NULL;
    }
    int64_t shape[ST_MAX_DIMS], strides[ST_MAX_DIMS];
    int seen = 0;
    for (int i = 0; i < a->ndim; i++) {
        int d = st_norm_dim("permute", perm[i], a->ndim);
        if (d < 0) return NULL;
        if (seen & (1 << d)) {
            st_error(ST_ERR_ARG, "permute: dim " BASE_POS " appears twice", BASE_P(perm[i]));
            return NULL;
        }
        seen |= 1 << d;
        shape[i] = a->shape[d];
        strides[i] = a->strides[d];
    }
    return st_tensor_view(a, a->ndim, shape, strides, a->offset);
}

st_tensor *st_transpose(st_tensor *a, int d0, int d1) {
    if (!check("transpose", a)) return NULL;
    if (a->ndim < 2 && (d0 == 0 || d0 == -1) && (d1 == 0 || d1 == -1)) return st_tensor_view(a, a->ndim, a->shape, a->strides, a->offset);
    int x = st_norm_dim("transpose", d0, a->ndim), y = x < 0 ? -1 : st_norm_dim("transpose", d1, a->ndim);
    if (y < 0) return NULL;
    int perm[ST_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) perm[i] = i;
    perm[x] = y;
    perm[y] = x;
    return st_permute(a, perm);
}

st_tensor *st_expand(st_tensor *a, int ndim, const int64_t *shape) {
    if (!check("expand", a)) return NULL;
    if (ndim > 0 && !shape) {
        st_error(ST_ERR_ARG, "expand: NULL shape for %d dims", ndim);
        return NULL;
    }
    char x[160], y[160];
    if (ndim < a->ndim || ndim > ST_MAX_DIMS) goto bad;
    int64_t ns[ST_MAX_DIMS], nstr[ST_MAX_DIMS];
    int lead = ndim - a->ndim;
    for (int d = 0; d < ndim; d++) {
        int sd = d - lead;
        int64_t want = shape[d];
        if (sd < 0) {
            if (want < 0) goto bad;
            ns[d] = want;
            nstr[d] = 0;
        } else if (want == -1 || want == a->shape[sd]) {
            ns[d] = a->shape[sd];
            nstr[d] = a->strides[sd];
        } else if (a->shape[sd] == 1 && want >= 0) {
            ns[d] = want;
            nstr[d] = 0;
        } else {
            goto bad;
        }
    }
    return st_tensor_view(a, ndim, ns, nstr, a->offset);
bad:
    st_error(ST_ERR_SHAPE, "expand: cannot expand %s to %s", st_shape_str(a->ndim, a->shape, x, sizeof x),
             st_shape_str(ndim, shape, y, sizeof y));
    return NULL;
}
st_tensor *st_broadcast_to(st_tensor *a, int ndim, const int64_t *shape) { return st_expand(a, ndim, shape); }

st_tensor *st_slice(st_tensor *a, int dim, int64_t start, int64_t end, int64_t step) {
    if (!check("slice", a)) return NULL;
    int d = st_norm_dim("slice", dim, a->ndim);
    if (d < 0) return NULL;
    if (a->ndim == 0) {
        st_error(ST_ERR_ARG, "slice: cannot slice a 0-d tensor");
        return NULL;
    }
    if (step <= 0) {
        st_error(ST_ERR_ARG, "slice: step must be positive, got %lld", (long long)step);
        return NULL;
    }
    int64_t n = a->shape[d];
    if (start < 0) start += n;
    if (end < 0) end += n;
    if (start < 0) start = 0;
    if (start > n) start = n;
    if (end > n) end = n;
    if (end < start) end = start;
    int64_t shape[ST_MAX_DIMS], strides[ST_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    memcpy(strides, a->strides, sizeof strides);
    /* no (end - start + step - 1): it overflows for a huge step (found by tests/fuzz) */
    shape[d] = end == start ? 0 : 1 + (end - start - 1) / step;
    /* one element or none: the step is never taken, its stride is the dim's own */
    if (shape[d] > 1 && __builtin_mul_overflow(a->strides[d], step, &strides[d])) {
        st_error(ST_ERR_ARG, "slice: step %lld overflows the stride along dim " BASE_POS, (long long)step, BASE_P(d));
        return NULL;
    }
    return st_tensor_view(a, a->ndim, shape, strides, a->offset + start * a->strides[d]);
}

st_tensor *st_select(st_tensor *a, int dim, int64_t index) {
    if (!check("select", a)) return NULL;
    int d = a->ndim ? st_norm_dim("select", dim, a->ndim) : -1;
    if (d < 0) {
        if (!a->ndim) st_error(ST_ERR_ARG, "select: cannot index a 0-d tensor");
        return NULL;
    }
    int64_t n = a->shape[d];
    if (index < -n || index >= n) {
        char x[160];
        st_error(ST_ERR_ARG, "select: index " BASE_POS " out of range for dim " BASE_POS " of size %lld in %s",
                 BASE_P(index), BASE_P(dim), (long long)n, st_shape_str(a->ndim, a->shape, x, sizeof x));
        return NULL;
    }
    if (index < 0) index += n;
    int64_t shape[ST_MAX_DIMS], strides[ST_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < a->ndim; i++)
        if (i != d) {
            shape[k] = a->shape[i];
            strides[k++] = a->strides[i];
        }
    return st_tensor_view(a, k, shape, strides, a->offset + index * a->strides[d]);
}

st_tensor *st_squeeze(st_tensor *a, int dim) {
    if (!check("squeeze", a)) return NULL;
    int only = -1;
    if (dim != ST_ALL_DIMS && a->ndim > 0 && (only = st_norm_dim("squeeze", dim, a->ndim)) < 0) return NULL;
    int64_t shape[ST_MAX_DIMS], strides[ST_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != 1 || (only >= 0 && i != only)) {
            shape[k] = a->shape[i];
            strides[k++] = a->strides[i];
        }
    return st_tensor_view(a, k, shape, strides, a->offset);
}

st_tensor *st_unsqueeze(st_tensor *a, int dim) {
    if (!check("unsqueeze", a)) return NULL;
    if (a->ndim >= ST_MAX_DIMS) {
        st_error(ST_ERR_SHAPE, "unsqueeze: already %d dims (the most)", a->ndim);
        return NULL;
    }
    int d = st_norm_dim("unsqueeze", dim, a->ndim + 1);
    if (d < 0) return NULL;
    int64_t shape[ST_MAX_DIMS], strides[ST_MAX_DIMS];
    for (int i = 0, k = 0; i <= a->ndim; i++) {
        if (i == d) {
            shape[i] = 1;
            strides[i] = i < a->ndim ? a->strides[k] * a->shape[k] : 1;
        } else {
            shape[i] = a->shape[k];
            strides[i] = a->strides[k++];
        }
    }
    return st_tensor_view(a, a->ndim + 1, shape, strides, a->offset);
}

st_tensor *st_flatten(st_tensor *a, int start_dim, int end_dim) {
    if (!check("flatten", a)) return NULL;
    if (a->ndim == 0) {
        int64_t one = 1;
        return st_reshape(a, 1, &one);
    }
    int s = st_norm_dim("flatten", start_dim, a->ndim), e = s < 0 ? -1 : st_norm_dim("flatten", end_dim, a->ndim);
    if (e < 0) return NULL;
    if (e < s) {
        st_error(ST_ERR_ARG, "flatten: start dim " BASE_POS " comes after end dim " BASE_POS, BASE_P(start_dim),
                 BASE_P(end_dim));
        return NULL;
    }
    int64_t shape[ST_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < s; i++) shape[k++] = a->shape[i];
    int64_t m = 1;
    for (int i = s; i <= e; i++) m *= a->shape[i];
    shape[k++] = m;
    for (int i = e + 1; i < a->ndim; i++) shape[k++] = a->shape[i];
    return st_reshape(a, k, shape);
}

st_tensor *st_store_hint(st_tensor *a) {
    if (!check("store_hint", a)) return NULL;
    st_node *n = st_tensor_read(a, (st_dtype)a->dtype, a->ndim, a->shape);
    if (!n || n->op == ST_OP_BUFFER) return n ? st_tensor_from_node(n) : NULL;
    /* an identity view carries the flag: a's own node may be shared (another tensor, a leaf's
     * version) and keeps its placement */
    st_node *w = st_node_identity_view(n);
    st_node_release(n);
    if (w) w->flags |= NODE_STORE;
    return w ? st_tensor_from_node(w) : NULL;
}

/* Nodes are immutable values, so the clone's storage may share a's current version: a later
 * write to either storage installs a new version there only (copy on write). */
st_tensor *st_clone(st_tensor *a) {
    if (!check("clone", a)) return NULL;
    st_node *n = st_tensor_read(a, (st_dtype)a->dtype, a->ndim, a->shape);
    if (n && n->ag) {
        /* never share a node that carries an autograd record (a leaf's would make the clone a
         * second handle on the leaf): an identity view records the dependency instead */
        st_node *w = st_node_identity_view(n);
        st_node_release(n);
        n = w;
    }
    return st_tensor_from_node(n);
}

st_tensor *st_contiguous(st_tensor *a) {
    if (!check("contiguous", a)) return NULL;
    if (st_is_contiguous(a)) return st_retain(a);
    return st_clone(a);
}
