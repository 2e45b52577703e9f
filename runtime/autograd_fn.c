/*
 * autograd_fn.c — custom functions (st_function_apply; st.autograd.Function in Lua) and
 * retain_grad.
 *
 * A custom function is recorded as one node F (a CONST that nothing computes) whose record (kind
 * AG_FN) holds the inputs that require grad as its srcs and the caller's backward; each float output
 * is a fresh node with the output's value whose record (kind AG_FN_OUT) has F as its only src. F is
 * made after every input and before every output, so in the backward walk (decreasing node id)
 * every output, and every consumer of one, is visited before F: each output's gradient is complete
 * when it is parked in F's slots, and F's backward runs once with all of them. The backward is the
 * caller's code (a Lua function through the frontend's hook), run with grad mode off: like the
 * built-in rules it records gradient ops lazily.
 *
 * Invariant: F's slots (gout) hold tensors only during a backward pass; st_backward clears them on
 * every path, so freeing a record (fn_release, called from the trace) never releases a node.
 */
#include "runtime/autograd.h"

struct st_ag_fn {
    char name[64];
    st_function_backward_fn backward;
    void *ud;
    void (*free_ud)(void *ud);
    int nin, nout;
    int *slot;          /* per input: its index among the record's srcs, or -1 (needs no gradient) */
    st_tensor **gout;   /* per output: its gradient, parked until F is visited */
    int pending;        /* a gradient was parked */
};

void st_ag_fn_release(st_ag_fn *f) {
    if (!f) return;
    if (f->free_ud) f->free_ud(f->ud);
    st_free(f->slot);
    st_free(f->gout);
    st_free(f);
}

void st_ag_fn_clear(st_ag_fn *f) {
    for (int i = 0; i < f->nout; i++) {
        st_release(f->gout[i]);
        f->gout[i] = NULL;
    }
    f->pending = 0;
}

void st_ag_fn_park(st_node *out, st_tensor *g) {
    st_ag_fn *f = out->ag->src[0]->ag->fn;
    int k = (int)out->ag->arg.c.i;
    st_tensor *old = f->gout[k];
    f->gout[k] = st_retain(g); /* one node per output: nothing was parked there in this pass */
    st_release(old);
    f->pending = 1;
}

/* Adds c (new reference, taken over) to src's pending gradient. */
static st_status contribute(st_node *src, st_tensor *c) {
    if (c->dtype != src->dtype) {
        st_tensor *cc = st_cast(c, (st_dtype)src->dtype);
        st_release(c);
        if (!(c = cc)) return st_last_status();
    }
    st_tensor *sum = src->ag->grad ? st_add(src->ag->grad, c) : st_retain(c);
    st_release(c);
    if (!sum) return st_last_status();
    st_release(src->ag->grad);
    src->ag->grad = sum;
    return ST_OK;
}

st_status st_ag_fn_run(st_node *n) {
    const st_ag *ag = n->ag;
    st_ag_fn *f = ag->fn;
    if (!f->pending) return ST_OK;
    st_tensor **gin = st_calloc(f->nin ? (size_t)f->nin : 1, sizeof *gin);
    if (!gin) return st_last_status();
    st_clear_error();
    st_status s = f->backward(f->ud, f->nout, f->gout, f->nin, gin);
    st_ag_fn_clear(f);
    if (s != ST_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", base_error_raw());
        s = st_error(s, "backward of the custom function %s: %s", f->name,
                     msg[0] ? msg : "it failed without a message");
    }
    char b1[128], b2[128];
    for (int i = 0; i < f->nin; i++) {
        st_tensor *c = gin[i];
        gin[i] = NULL;
        if (!c || s != ST_OK || f->slot[i] < 0) {
            st_release(c);
            continue;
        }
        st_node *src = ag->src[f->slot[i]];
        if (c->ndim != src->ndim || memcmp(c->shape, src->shape, src->ndim * sizeof *src->shape)) {
            s = st_error(ST_ERR_SHAPE, "backward of the custom function %s: the gradient of input "
                         BASE_POS " has shape %s; the input has shape %s", f->name, BASE_P(i),
                         st_shape_str(c->ndim, c->shape, b1, sizeof b1),
                         st_shape_str(src->ndim, src->shape, b2, sizeof b2));
            st_release(c);
        } else if (!st_is_float((st_dtype)c->dtype)) {
            s = st_error(ST_ERR_DTYPE, "backward of the custom function %s: the gradient of input "
                         BASE_POS " is %s; a gradient must be a float tensor", f->name, BASE_P(i),
                         st_dtypes[c->dtype].name);
            st_release(c);
        } else {
            s = contribute(src, c);
        }
    }
    st_free(gin);
    return s;
}

/* ---- public API ---- */

st_status st_function_apply(const char *name, int nin, st_tensor *const *inputs, int nout,
                            st_tensor *const *outputs, st_tensor **results,
                            st_function_backward_fn backward, void *ud, void (*free_ud)(void *ud)) {
    st_status s = ST_OK;
    st_node *srcs[255], *F = NULL;
    int ns = 0;
    st_ag_fn *f = NULL;
    int ud_owned = 0;
    if (results && outputs && nout > 0)
        for (int i = 0; i < nout; i++) results[i] = NULL;
    if (!backward || !outputs || !results || nout < 1 || nin < 0 || nin > 255 || (nin && !inputs)) {
        s = st_error(ST_ERR_ARG, "function_apply: needs a backward, 1 or more outputs, a results "
                     "array and 0 to 255 inputs (got %d outputs, %d inputs)", nout, nin);
        goto fail;
    }
    int any = 0;
    for (int i = 0; i < nin; i++) {
        if (!inputs[i]) {
            s = st_error(ST_ERR_ARG, "function_apply: input " BASE_POS " is NULL", BASE_P(i));
            goto fail;
        }
        any |= inputs[i]->storage->node->ag != NULL;
    }
    for (int i = 0; i < nout; i++)
        if (!outputs[i]) {
            s = st_error(ST_ERR_ARG, "function_apply: output " BASE_POS " is NULL", BASE_P(i));
            goto fail;
        }
    if (!any || !st_grad_mode) {
        for (int i = 0; i < nout; i++) results[i] = st_retain(outputs[i]);
        goto fail; /* not a failure: no record, so ud is done with */
    }
    st_ag_register_hooks();
    if (!(f = st_calloc(1, sizeof *f)) || !(f->slot = st_calloc(nin ? (size_t)nin : 1, sizeof *f->slot)) ||
        !(f->gout = st_calloc((size_t)nout, sizeof *f->gout))) {
        s = st_last_status();
        goto fail;
    }
    snprintf(f->name, sizeof f->name, "%s", name && *name ? name : "(unnamed)");
    f->backward = backward;
    f->nin = nin;
    f->nout = nout;
    /* the inputs as they are viewed (a view of a leaf reads it through a VIEW record) */
    st_grad_mode_push(1);
    for (int i = 0; i < nin && s == ST_OK; i++) {
        st_tensor *t = inputs[i];
        f->slot[i] = -1;
        if (!t->storage->node->ag) continue;
        st_node *r = st_tensor_read(t, (st_dtype)t->dtype, t->ndim, t->shape);
        if (!r) s = st_last_status();
        else if (!r->ag) st_node_release(r); /* cannot happen: a read of a tensor with a record has one */
        else f->slot[i] = ns, srcs[ns++] = r;
    }
    st_grad_mode_pop();
    if (s != ST_OK) goto fail;
    st_grad_mode_push(0);
    F = st_node_new(ST_OP_CONST, ST_F32, 0, NULL, 0, NULL, NULL);
    st_grad_mode_pop();
    st_ag *fa = F ? st_calloc(1, st_ag_size(ns)) : NULL;
    if (!fa) {
        s = st_last_status();
        goto fail;
    }
    fa->kind = AG_FN;
    fa->op = ST_OP_CONST;
    fa->nsrc = (uint8_t)ns;
    for (int i = 0; i < ns; i++) fa->src[i] = srcs[i]; /* references taken over */
    ns = 0;
    f->ud = ud;
    f->free_ud = free_ud;
    fa->fn = f; /* F owns f, and so ud, from here on */
    f = NULL;
    ud_owned = 1;
    F->ag = fa;
    for (int i = 0; i < nout; i++) {
        st_tensor *t = outputs[i];
        if (!st_is_float((st_dtype)t->dtype)) {
            results[i] = st_retain(t);
            continue;
        }
        st_node *m = st_ag_fresh_read(t);
        st_ag *oa = m ? st_calloc(1, st_ag_size(1)) : NULL;
        if (!oa) {
            s = st_last_status();
            st_node_release(m);
            goto fail;
        }
        oa->kind = AG_FN_OUT;
        oa->op = ST_OP_CONST;
        oa->nsrc = 1;
        oa->src[0] = st_node_retain(F);
        oa->arg.c.i = i;
        m->ag = oa;
        if (!(results[i] = st_tensor_from_node(m))) {
            s = st_last_status();
            goto fail;
        }
    }
    st_node_release(F);
    return ST_OK;
fail:
    if (s != ST_OK && results && outputs && nout > 0)
        for (int i = 0; i < nout; i++) {
            st_release(results[i]);
            results[i] = NULL;
        }
    for (int i = 0; i < ns; i++) st_node_release(srcs[i]);
    if (F) st_node_release(F); /* frees the record, and ud with it, once no output holds F */
    if (f) {
        st_free(f->slot);
        st_free(f->gout);
        st_free(f);
    }
    if (!ud_owned && free_ud) free_ud(ud);
    return s;
}

st_status st_retain_grad(st_tensor *t) {
    if (!t) return st_error(ST_ERR_ARG, "retain_grad: NULL tensor");
    st_storage *s = t->storage;
    st_ag *ag = s->node->ag;
    char b[128];
    if (!ag)
        return st_error(ST_ERR_ARG, "retain_grad: the tensor %s does not require grad",
                        st_shape_str(t->ndim, t->shape, b, sizeof b));
    if (ag->acc || ag->retain) return ST_OK; /* a leaf, or already retained */
    if (!s->acc) {
        if (!(s->acc = st_calloc(1, sizeof *s->acc))) return st_last_status();
        s->acc->refcnt = 1;
    }
    s->acc->retains_grad = 1;
    s->acc->refcnt++;
    ag->retain = s->acc;
    return ST_OK;
}
