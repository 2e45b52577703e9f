/*
 * tensor.c — tensor handles and storages: creation, reading as trace nodes, in-place writes,
 * inspection, sync points and copies to the host.
 *
 * Invariant: a write never mutates a node; it installs a new version in the storage (the value
 * itself when the whole base is written, else SETVIEW(old, value)). Nodes that captured the old
 * version keep it, which gives eager semantics without read/write races inside the trace.
 */
#include "runtime/tensor.h"

static st_storage live_head = {0, NULL, NULL, &live_head, &live_head, NULL, 0};

static st_storage *storage_new(st_node *n) {
    st_storage *s = st_malloc(sizeof *s);
    if (!s) return NULL;
    s->refcnt = 1;
    s->node = n;
    s->acc = NULL;
    s->wnext = NULL;
    s->written = 0;
    s->next = live_head.next;
    s->prev = &live_head;
    live_head.next->prev = s;
    live_head.next = s;
    return s;
}

static void written_unlink(st_storage *s);

static void storage_release(st_storage *s) {
    if (--s->refcnt > 0) return;
    if (s->written) written_unlink(s);
    s->prev->next = s->next;
    s->next->prev = s->prev;
    if (s->acc) {
        st_tensor *g = s->acc->grad;
        s->acc->grad = NULL;
        s->acc->requires_grad = 0;
        s->acc->retains_grad = 0;
        st_ag_acc_release(s->acc);
        st_release(g);
    }
    st_node_release(s->node);
    st_free(s);
}

/* ---- written state (tensor.h) ---- */
static st_storage *written_head;

static void note_written(st_storage *s) {
    if (s->written || s->node->op == ST_OP_BUFFER) return;
    s->written = 1;
    s->wnext = written_head;
    written_head = s;
}

/* A storage freed while listed leaves the list (it holds no reference: a dropped tensor's
 * pending write is never computed). */
static void written_unlink(st_storage *s) {
    for (st_storage **link = &written_head; *link; link = &(*link)->wnext)
        if (*link == s) {
            *link = s->wnext;
            return;
        }
}

/* A listed storage counts while its value is pending (a constant stays symbolic, as st_sync). */
static int written_counts(const st_storage *s) {
    return s->node->op != ST_OP_BUFFER && s->node->op != ST_OP_CONST;
}

int st_written_nodes(st_node ***out) {
    *out = NULL;
    int n = 0;
    for (st_storage *s = written_head; s; s = s->wnext) n += written_counts(s);
    if (!n) return 0;
    st_node **v = st_malloc((size_t)n * sizeof *v);
    if (!v) return -1;
    n = 0;
    for (st_storage *s = written_head; s; s = s->wnext)
        if (written_counts(s)) v[n++] = s->node;
    *out = v;
    return n;
}

void st_written_clear(void) {
    while (written_head) {
        st_storage *s = written_head;
        written_head = s->wnext;
        s->written = 0;
        s->wnext = NULL;
    }
}

/* Pending nodes left after the last automatic flush: nodes that only autograd records hold stay
 * pending (nothing asks for their value), so the next automatic flush waits for trace_max more. */
static int64_t pending_floor;

static st_status auto_flush(void) {
    st_status s = st_sync();
    pending_floor = st_pending_nodes();
    return s;
}

static st_status maybe_auto_flush(st_tensor *t) {
    if (st_rt.eager) {
        /* Unbound values (CONST, fills, aranges, random tensors and what is made of them alone) stay
         * symbolic until an op reads them: a weak scalar must reach an f64 op with its full
         * precision, and a fill must be computed on the device of the op that uses it (flushed
         * here, it would land on the default device, where a tensor on another device cannot
         * read it). */
        st_node *n = t->storage->node;
        if (n->op != ST_OP_BUFFER && st_node_dev(n) != ST_DEV_ANY) return st_flush_nodes(1, &n);
    } else if (st_pending_nodes() > st_rt.trace_max + pending_floor) {
        return auto_flush();
    }
    return ST_OK;
}

st_tensor *st_tensor_from_node(st_node *n) {
    if (!n) return NULL;
    st_tensor *t = st_malloc(sizeof *t);
    st_storage *s = t ? storage_new(n) : NULL;
    if (!s) {
        st_free(t);
        st_node_release(n);
        return NULL;
    }
    t->refcnt = 1;
    t->ndim = n->ndim;
    t->dtype = n->dtype;
    t->identity = 1;
    t->weak = 0;
    t->offset = 0;
    memcpy(t->shape, n->shape, sizeof t->shape);
    st_contig_strides(n->ndim, n->shape, t->strides);
    t->storage = s;
    if (maybe_auto_flush(t) != ST_OK) {
        st_release(t);
        return NULL;
    }
    return t;
}

st_tensor *st_tensor_view(st_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                          int64_t offset) {
    int64_t numel;
    if (!st_shape_numel_checked(ndim, shape, st_dtypes[t->dtype].size, &numel)) {
        char b[200];
        st_error(ST_ERR_SHAPE, "view: shape %s is too large (its %s bytes do not fit in 64 bits)",
                 st_shape_str(ndim, shape, b, sizeof b), st_dtypes[t->dtype].name);
        return NULL;
    }
    /* every element the view reaches lies in its storage: a view never reads or writes outside it */
    int64_t lo = 0, hi = 0, base_numel = t->storage->node->numel;
    int fits = numel == 0 || st_view_extent_checked(ndim, shape, strides, offset, &lo, &hi);
    if (!fits || (numel > 0 && (lo < 0 || hi >= base_numel))) {
        char b[200], c[200], r[80] = "elements whose index overflows";
        if (fits) snprintf(r, sizeof r, "elements %lld to %lld", (long long)lo, (long long)hi);
        st_error(ST_ERR_SHAPE, "view: shape %s with strides %s and offset %lld reaches %s, outside its storage of %lld "
                 "elements", st_shape_str(ndim, shape, b, sizeof b), st_shape_str(ndim, strides, c, sizeof c),
                 (long long)offset, r, (long long)base_numel);
        return NULL;
    }
    st_tensor *v = st_malloc(sizeof *v);
    if (!v) return NULL;
    v->refcnt = 1;
    v->ndim = (uint8_t)ndim;
    v->dtype = t->dtype;
    v->weak = 0;
    memset(v->shape, 0, sizeof v->shape);
    memset(v->strides, 0, sizeof v->strides);
    memcpy(v->shape, shape, ndim * sizeof *shape);
    memcpy(v->strides, strides, ndim * sizeof *strides);
    v->offset = offset;
    v->storage = t->storage;
    v->storage->refcnt++;
    const st_node *base = v->storage->node;
    v->identity = offset == 0 && numel == base->numel &&
                  ndim == base->ndim &&
                  memcmp(shape, base->shape, ndim * sizeof *shape) == 0 &&
                  st_is_contiguous_view(ndim, shape, strides);
    return v;
}

st_tensor *st_retain(st_tensor *t) {
    if (t) t->refcnt++;
    return t;
}

void st_release(st_tensor *t) {
    if (!t || --t->refcnt > 0) return;
    storage_release(t->storage);
    st_free(t);
}

/* CONST nodes convert at record time: a weak 2 meeting an f16 tensor becomes an f16 CONST. */
static st_node *const_as(const st_node *c, st_dtype dt) {
    st_node_arg a = c->arg;
    if (st_is_float(c->dtype) && !st_is_float(dt)) {
        a.c.i = dt == ST_BOOL ? c->arg.c.f != 0 : (int64_t)c->arg.c.f;
    } else if (!st_is_float(c->dtype) && st_is_float(dt)) {
        a.c.f = (double)c->arg.c.i;
    } else if (dt == ST_BOOL) {
        a.c.i = c->arg.c.i != 0;
    } else if (dt == ST_I32) {
        a.c.i = (int32_t)c->arg.c.i;
    }
    st_node *n = st_node_new(ST_OP_CONST, dt, 0, NULL, 0, NULL, &a);
    if (n) n->flags = c->flags & NODE_WEAK;
    return n;
}

st_node *st_tensor_read(st_tensor *t, st_dtype dt, int ndim, const int64_t *shape) {
    st_node *base = t->storage->node;
    st_node *n;
    int same_shape = ndim == t->ndim && memcmp(shape, t->shape, ndim * sizeof *shape) == 0;
    if (base->op == ST_OP_CONST && dt != base->dtype) {
        n = const_as(base, dt); /* 0-d: the view below broadcasts it */
        if (!n) return NULL;
        dt = n->dtype;
        base = n;
    } else {
        n = st_node_retain(base);
    }
    if (!(t->identity && same_shape) || base->ndim != ndim) {
        st_node_arg a;
        memset(&a, 0, sizeof a);
        int lead = ndim - t->ndim;
        for (int d = 0; d < ndim; d++) {
            int sd = d - lead;
            if (sd < 0 || (t->shape[sd] == 1 && shape[d] != 1)) a.view.strides[d] = 0;
            else a.view.strides[d] = t->shape[sd] == 1 ? 0 : t->strides[sd];
        }
        a.view.offset = t->offset;
        st_node *v = st_node_new(ST_OP_VIEW, n->dtype, ndim, shape, 1, &n, &a);
        st_node_release(n);
        if (!v) return NULL;
        n = v;
    }
    if (n->dtype != dt) {
        st_node *c = st_node_new(ST_OP_CAST, dt, ndim, shape, 1, &n, NULL);
        st_node_release(n);
        n = c;
    }
    return n;
}

st_node *st_node_bind_dev(st_node *value, int dev) {
    if (!value || dev == ST_DEV_ANY || st_node_dev(value) != ST_DEV_ANY) return value;
    st_node *v = st_node_identity_view(value);
    st_node_release(value);
    if (v) v->dev = (int8_t)dev;
    return v;
}

st_status st_tensor_write(st_tensor *t, st_node *value) {
    if (!value) return st_last_status();
    st_storage *s = t->storage;
    int leaf = s->acc && s->acc->requires_grad;
    if (leaf && st_grad_mode) {
        char b[128];
        st_node_release(value);
        return st_error(ST_ERR_ARG, "in-place write into a leaf tensor %s that requires grad: run it "
                        "with grad mode off (st_grad_mode_push(0), st.no_grad)",
                        st_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    st_node *nv;
    if (t->identity) {
        /* an unbound value (x:fill_(v), x:copy_(st.zeros(...))) is computed where the storage
         * lives, else the storage would move to the default device */
        nv = st_node_bind_dev(value, st_node_dev(s->node));
        if (!nv) return st_last_status();
    } else {
        for (int d = 0; d < t->ndim; d++)
            if (t->strides[d] == 0 && t->shape[d] > 1) {
                st_node_release(value);
                return st_error(ST_ERR_ARG, "in-place write into an expanded view (dim " BASE_POS " has "
                                "stride 0): more than one element refers to one memory location", BASE_P(d));
            }
        st_node_arg a;
        memset(&a, 0, sizeof a);
        memcpy(a.view.strides, t->strides, sizeof a.view.strides);
        a.view.offset = t->offset;
        st_node *srcs[2] = {s->node, value};
        nv = st_node_new(ST_OP_SETVIEW, s->node->dtype, s->node->ndim, s->node->shape, 2, srcs, &a);
        st_node_release(value);
        if (!nv) return st_last_status();
    }
    /* the write commits only when the leaf's record is made too: a failure (out of memory) leaves
     * the tensor as it was, so a caller that retries (the Lua bindings do) writes once */
    st_node *old = s->node;
    s->node = nv;
    if (leaf) {
        st_status r = st_ag_mark_leaf(s);
        if (r != ST_OK) {
            st_node_release(s->node);
            s->node = old;
            return r;
        }
        nv = s->node;
    }
    st_node_release(old);
    note_written(s);
    if (st_rt.eager && nv->op != ST_OP_BUFFER && st_node_dev(nv) != ST_DEV_ANY) return st_flush_nodes(1, &nv);
    if (st_pending_nodes() > st_rt.trace_max + pending_floor) return auto_flush();
    return ST_OK;
}

/* ---- inspection ----
 * These return plain values, so a NULL tensor gets the value stitch.h documents (-1 for counts and
 * sizes, 0 for predicates, ST_DTYPE_COUNT for a dtype) and an ST_ERR_ARG error. */
static int null_tensor(const st_tensor *t, const char *fn) {
    if (t) return 0;
    st_error(ST_ERR_ARG, "%s: NULL tensor", fn);
    return 1;
}
int st_ndim(const st_tensor *t) { return null_tensor(t, "ndim") ? -1 : t->ndim; }
int64_t st_size(const st_tensor *t, int dim) {
    if (null_tensor(t, "size")) return -1;
    if (dim < 0) dim += t->ndim;
    return dim < 0 || dim >= t->ndim ? -1 : t->shape[dim];
}
void st_shape(const st_tensor *t, int64_t out[ST_MAX_DIMS]) {
    if (!out) {
        st_error(ST_ERR_ARG, "shape: NULL output array");
        return;
    }
    memset(out, 0, ST_MAX_DIMS * sizeof *out);
    if (!null_tensor(t, "shape")) memcpy(out, t->shape, t->ndim * sizeof *out);
}
int64_t st_numel(const st_tensor *t) { return null_tensor(t, "numel") ? -1 : st_shape_numel(t->ndim, t->shape); }
st_dtype st_dtype_of(const st_tensor *t) { return null_tensor(t, "dtype") ? ST_DTYPE_COUNT : (st_dtype)t->dtype; }
int st_is_contiguous(const st_tensor *t) {
    return !null_tensor(t, "is_contiguous") && st_is_contiguous_view(t->ndim, t->shape, t->strides);
}
int st_is_realized(const st_tensor *t) { return !null_tensor(t, "is_realized") && t->storage->node->op == ST_OP_BUFFER; }


/* ---- sync points ---- */
st_status st_realize(int n, st_tensor *const *ts) {
    st_runtime_init();
    if (n < 0 || (n > 0 && !ts)) return st_error(ST_ERR_ARG, "realize: %s", n < 0 ? "negative count" : "NULL array");
    st_node *stack[64];
    st_node **nodes = n <= 64 ? stack : st_malloc(n * sizeof *nodes);
    if (!nodes) return st_last_status();
    int k = 0;
    for (int i = 0; i < n; i++)
        if (ts[i] && ts[i]->storage->node->op != ST_OP_BUFFER) nodes[k++] = ts[i]->storage->node;   /* NULL: skipped */
    st_status s = k ? st_flush_nodes(k, nodes) : ST_OK;
    if (nodes != stack) st_free(nodes);
    return s;
}

st_status st_sync(void) {
    st_runtime_init();
    int n = 0, cap = 0;
    st_node **nodes = NULL;
    for (st_storage *s = live_head.next; s != &live_head; s = s->next) {
        /* constants stay symbolic: a weak float scalar stored as f32 would lose f64 precision */
        if (s->node->op == ST_OP_BUFFER || s->node->op == ST_OP_CONST) continue;
        if (BASE_GROW(nodes, cap, n + 1, 64) != ST_OK) {
            st_free(nodes);
            return st_last_status();
        }
        nodes[n++] = s->node;
    }
    st_status r = n ? st_flush_nodes(n, nodes) : ST_OK;
    st_free(nodes);
    if (st_pending_nodes() < pending_floor) pending_floor = st_pending_nodes();
    return r;
}

st_status st_to_host(st_tensor *t, st_dtype dt, void *dst, size_t nbytes) {
    if (!t) return st_error(ST_ERR_ARG, "to_host: NULL tensor");
    int64_t numel = st_numel(t);
    if ((unsigned)dt >= ST_DTYPE_COUNT) return st_error(ST_ERR_DTYPE, "to_host: bad dtype %d", (int)dt);
    if (nbytes != (size_t)numel * st_dtypes[dt].size)
        return st_error(ST_ERR_ARG, "to_host: %zu bytes given for %lld elements of %s", nbytes,
                        (long long)numel, st_dtypes[dt].name);
    if (!dst && nbytes) return st_error(ST_ERR_ARG, "to_host: NULL destination for %zu bytes", nbytes);
    st_status s = st_realize(1, &t);
    if (s != ST_OK) return s;
    const st_node *base = t->storage->node;
    const void *src;
    void *owned;   /* a host copy of GPU data */
    s = dev_host_bytes(base->buf, 0, st_node_nbytes(base), &src, &owned);
    if (s != ST_OK) return s;
    st_dtype sdt = (st_dtype)base->dtype;
    int64_t idx[ST_MAX_DIMS] = {0};
    int same = sdt == dt;
    size_t es = st_dtypes[dt].size;
    for (int64_t i = 0; i < numel; i++) {
        int64_t off = t->offset;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        if (same) memcpy((char *)dst + i * es, (const char *)src + off * es, es);
        else if (st_is_float(dt) || st_is_float(sdt)) st_store_f64(dt, dst, i, st_load_f64(sdt, src, off));
        else st_store_i64(dt, dst, i, st_load_i64(sdt, src, off));
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    st_free(owned);
    return ST_OK;
}

st_status st_item(st_tensor *t, double *out) {
    if (!t || !out) return st_error(ST_ERR_ARG, "item: NULL %s", t ? "output pointer" : "tensor");
    if (st_numel(t) != 1) {
        char b[128];
        return st_error(ST_ERR_SHAPE, "item: the tensor has %lld elements %s, not 1",
                        (long long)st_numel(t), st_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    return st_to_host(t, ST_F64, out, sizeof *out);
}

st_status st_item_i64(st_tensor *t, int64_t *out) {
    if (!t || !out) return st_error(ST_ERR_ARG, "item: NULL %s", t ? "output pointer" : "tensor");
    if (st_numel(t) != 1) {
        char b[128];
        return st_error(ST_ERR_SHAPE, "item: the tensor has %lld elements %s, not 1",
                        (long long)st_numel(t), st_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    return st_to_host(t, ST_I64, out, sizeof *out);
}
