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
#include "runtime/autograd.h"

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
    st_ag *ag = st_calloc(1, st_ag_size(n->nsrc));
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

void st_ag_register_hooks(void) {
    static const trace_ag_hooks hooks = {st_ag_attach, st_ag_acc_release, st_ag_fn_release};
    trace_set_ag_hooks(&hooks);
}

st_status st_ag_mark_leaf(st_storage *s) {
    st_ag_register_hooks();   /* from the first leaf on, new nodes may need records */
    st_node *n = s->node;
    if (n->ag && n->ag->acc == s->acc) return ST_OK;
    if (n->refcnt > 1 || n->ag) {
        st_node *m = fresh_node(n);
        if (!m) return st_last_status();
        st_node_release(n);
        s->node = n = m;
    }
    st_ag *ag = st_calloc(1, st_ag_size(0));
    if (!ag) return st_last_status();
    ag->acc = s->acc;
    s->acc->refcnt++;
    n->ag = ag;
    return ST_OK;
}

/* A node reading t (its view, dtype dt) that carries no autograd record. New reference. */
st_node *st_ag_detached_read(st_tensor *t, st_dtype dt) {
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

st_node *st_ag_fresh_read(st_tensor *t) {
    st_node *n = st_ag_detached_read(t, (st_dtype)t->dtype);
    if (n && n->refcnt > 1) {
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

int st_requires_grad(const st_tensor *t) {
    if (!t) {
        st_error(ST_ERR_ARG, "requires_grad: NULL tensor");
        return 0;
    }
    return t->storage->node->ag != NULL;
}

int st_is_leaf(const st_tensor *t) {
    if (!t) {
        st_error(ST_ERR_ARG, "is_leaf: NULL tensor");
        return 0;
    }
    const st_ag *ag = t->storage->node->ag;
    return !ag || ag->acc != NULL;
}

st_tensor *st_grad(st_tensor *t) {
    if (!t) {
        st_error(ST_ERR_ARG, "grad: NULL tensor");
        return NULL;
    }
    st_clear_error();
    st_grad_acc *acc = t->storage->acc;
    if (!acc || !acc->grad) return NULL;
    if (t->identity) return st_retain(acc->grad);
    return st_tensor_view(acc->grad, t->ndim, t->shape, t->strides, t->offset);
}

/* Replace acc's gradient by an identity tensor with g's value (g: new reference, taken over). */
static st_status acc_store(st_grad_acc *acc, st_tensor *g, st_dtype dt) {
    st_node *n = st_ag_detached_read(g, dt);
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
    return st_tensor_from_node(st_ag_detached_read(t, (st_dtype)t->dtype));
}

/* ---- backward ---- */

static int by_id_desc(const void *a, const void *b) {
    const st_node *x = *(st_node *const *)a, *y = *(st_node *const *)b;
    return x->id < y->id ? 1 : x->id > y->id ? -1 : 0;
}

/* Grow *arr (capacity *cap) to hold n + 1 entries. */
static int reserve(st_node ***arr, int *cap, int n) { return BASE_GROW(*arr, *cap, n + 1, 256) == ST_OK; }

/* Leaf: add g into the storage's accumulated gradient. An unbound g is bound to dev, the device of
 * the tensor it is the gradient of: a gradient made only from the implicit seed (ones) and weak
 * scalars ((x * 2):sum()), or a zero one, is unbound, and would land on the default device when
 * realized (a CPU leaf got a GPU gradient when the default device is a GPU). */
static st_status accumulate(st_grad_acc *acc, st_tensor *g, int dev) {
    if (!acc->requires_grad && !acc->retains_grad) return ST_OK; /* the storage died or stopped requiring grad */
    st_dtype dt = acc->grad ? (st_dtype)acc->grad->dtype : (st_dtype)g->dtype;
    if (!acc->grad) {
        if (dev == ST_DEV_ANY || st_node_dev(g->storage->node) != ST_DEV_ANY) return acc_store(acc, st_retain(g), dt);
        st_tensor *bg = st_tensor_from_node(st_node_bind_dev(st_tensor_read(g, (st_dtype)g->dtype, g->ndim, g->shape), dev));
        return bg ? acc_store(acc, bg, dt) : st_last_status();
    }
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
    st_tensor *g0 = grad ? st_tensor_from_node(st_ag_detached_read(grad, (st_dtype)root->dtype))
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
    grad_arena A;
    A.n = 0;
    A.status = ST_OK;
    A.msg[0] = 0;
    for (int i = 0; i < nlist && status == ST_OK; i++) {
        st_node *n = list[i];
        st_tensor *g = n->ag->grad;
        n->ag->grad = NULL;
        if (n->ag->kind == AG_FN) {   /* every output was visited: run the custom backward */
            status = st_ag_fn_run(n);
            continue;
        }
        if (!g) continue;
        if (n->ag->retain) status = accumulate(n->ag->retain, g, st_node_dev(n));  /* retain_grad: a copy */
        if (status != ST_OK) {
            /* stop: the failure is reported below */
        } else if (n->ag->kind == AG_FN_OUT) {
            st_ag_fn_park(n, g);
        } else if (n->ag->acc) {
            status = accumulate(n->ag->acc, g, st_node_dev(n));
        } else {
            grad_apply(&A, n, g);
            grad_arena_free(&A);
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
        if (list[i]->ag->kind == AG_FN) st_ag_fn_clear(list[i]->ag->fn);
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
