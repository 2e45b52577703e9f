/*
 * node.c — the op table and the life of trace nodes.
 *
 * Nodes are immutable values with refcounts. Release is iterative (a trace can be a chain of a
 * million nodes; recursion would overflow the C stack). Freed nodes go to a free list, so recording
 * an op costs one list pop in the steady state.
 */
#include "trace/trace.h"

#define GRAD(f) true
#define NOGRAD false
const st_op_info st_ops[ST_OP_COUNT] = {
#define X(NAME, KIND, NSRC, STR, MATH, DTYPE, COST, GRAD_, READS) \
    [ST_OP_##NAME] = {STR, #MATH, KIND, NSRC, DTYPE, COST, GRAD_, READS},
#include "trace/ops.def"
#undef X
};
#undef GRAD
#undef NOGRAD

static st_node *free_list;     /* linked through src[0] */
static trace_ag_hooks ag_hooks;   /* autograd's, once it made its first record */

void trace_set_ag_hooks(const trace_ag_hooks *h) { ag_hooks = *h; }
static int64_t pending;        /* live unrealized nodes */
static int64_t live;           /* nodes not on the free list */
static uint64_t next_id = 1;

static int64_t pending_bytes;  /* their bytes, views not counted */
int64_t st_pending_nodes(void) { return pending; }
int64_t st_pending_bytes(void) { return pending_bytes; }
static int64_t node_bytes(const st_node *n) { return n->op == ST_OP_VIEW ? 0 : n->numel * (int64_t)st_dtype_size((st_dtype)n->dtype); }
int64_t st_live_nodes(void) { return live; }

st_node *st_node_identity_view(st_node *n) {
    st_node_arg a;
    memset(&a, 0, sizeof a);
    st_contig_strides(n->ndim, n->shape, a.view.strides);
    return st_node_new(ST_OP_VIEW, (st_dtype)n->dtype, n->ndim, n->shape, 1, &n, &a);
}

int st_node_dev(const st_node *n) {
    if (n->op == ST_OP_BUFFER) return n->buf ? n->buf->device : n->dev;
    if (st_ops[n->op].kind == OPK_SOURCE) return ST_DEV_ANY;
    return n->dev;
}

/* The device a new node of these sources is bound to; ST_DEV_ANY when none is bound, -2 (with
 * ST_ERR_DEVICE set) when two sources are bound to different devices. */
static int common_dev(st_op op, int nsrc, st_node *const *srcs) {
    int dev = ST_DEV_ANY;
    for (int i = 0; i < nsrc; i++) {
        int d = st_node_dev(srcs[i]);
        if (d == ST_DEV_ANY || d == dev) continue;
        if (dev == ST_DEV_ANY) {
            dev = d;
            continue;
        }
        char a[24], b[24];
        st_error(ST_ERR_DEVICE, "%s: expected all tensors on the same device, got %s and %s", st_ops[op].name,
                 st_dev_name(dev, a, sizeof a), st_dev_name(d, b, sizeof b));
        return -2;
    }
    return dev;
}

size_t st_node_nbytes(const st_node *n) { return (size_t)n->numel * st_dtypes[n->dtype].size; }

st_node *st_node_new(st_op op, st_dtype dt, int ndim, const int64_t *shape, int nsrc,
                     st_node *const *srcs, const st_node_arg *arg) {
    ST_ASSERT(ndim >= 0 && ndim <= ST_MAX_DIMS && nsrc >= 0 && nsrc <= ST_NODE_SRCS);
    int64_t numel;
    if (!st_shape_numel_checked(ndim, shape, st_dtypes[dt].size, &numel)) {
        char b[200];
        st_error(ST_ERR_SHAPE, "%s: shape %s is too large (its %s bytes do not fit in 64 bits)", st_ops[op].name,
                 st_shape_str(ndim, shape, b, sizeof b), st_dtypes[dt].name);
        return NULL;
    }
    int dev = common_dev(op, nsrc, srcs);
    if (dev == -2) return NULL;
    st_node *n = free_list;
    if (n) free_list = n->src[0];
    else if (!(n = st_malloc(sizeof *n))) return NULL;
    memset(n, 0, offsetof(st_node, arg));
    n->refcnt = 1;
    n->op = (uint16_t)op;
    n->dtype = (uint8_t)dt;
    n->ndim = (uint8_t)ndim;
    n->nsrc = (uint8_t)nsrc;
    n->dev = (int8_t)dev;
    n->numel = numel;
    for (int i = 0; i < ndim; i++) n->shape[i] = shape[i];
    for (int i = 0; i < nsrc; i++) n->src[i] = st_node_retain(srcs[i]);
    if (arg) n->arg = *arg;
    else memset(&n->arg, 0, sizeof n->arg);
    n->id = next_id++;
    n->aux = NULL;
    live++;
    if (op != ST_OP_BUFFER) {
        pending++;
        pending_bytes += node_bytes(n);
    }
    st_stats_g.nodes_recorded++;
    if (nsrc && ag_hooks.attach && ag_hooks.attach(n) != ST_OK) {
        st_node_release(n);
        return NULL;
    }
    return n;
}

/* A small explicit stack for iterative release. */
static st_node **rel_stack;
static size_t rel_cap;

void st_node_release(st_node *n) {
    if (!n || --n->refcnt > 0) return;
    size_t top = 0;
    for (;;) {
        /* n has refcnt 0: free it, pushing srcs (and its autograd record's srcs) that drop to 0. */
        st_ag *ag = n->ag;
        int nsrc = n->nsrc + (ag ? ag->nsrc : 0);
        for (int i = 0; i < nsrc; i++) {
            st_node *s = i < n->nsrc ? n->src[i] : ag->src[i - n->nsrc];
            if (--s->refcnt > 0) continue;
            if (top == rel_cap) {
                size_t cap = rel_cap ? rel_cap * 2 : 256;
                st_node **p = realloc(rel_stack, cap * sizeof *p);
                ST_ASSERT(p != NULL); /* release cannot report errors; 2 KiB steps rarely fail */
                rel_stack = p;
                rel_cap = cap;
            }
            rel_stack[top++] = s;
        }
        if (ag) {
            if (ag->acc) ag_hooks.acc_release(ag->acc);
            if (ag->retain) ag_hooks.acc_release(ag->retain);
            if (ag->fn) ag_hooks.fn_release(ag->fn);
            st_free(ag);
            n->ag = NULL;
        }
        if (n->op != ST_OP_BUFFER) {
            pending--;
            pending_bytes -= node_bytes(n);
        }
        st_buffer_release(n->buf);
        n->buf = NULL;
        n->nsrc = 0;
        n->src[0] = free_list;
        free_list = n;
        live--;
        if (top == 0) break;
        n = rel_stack[--top];
    }
}

void st_node_realize(st_node *n, st_buffer *buf) {
    n->dev = (int8_t)buf->device;
    if (n->op == ST_OP_BUFFER) { /* a fresh leaf: just attach its data */
        if (n->buf && n->buf != buf) st_buffer_release(n->buf);
        n->buf = buf;
        return;
    }
    if (n->buf && n->buf != buf) st_buffer_release(n->buf);
    n->buf = buf;
    pending_bytes -= node_bytes(n);
    n->op = ST_OP_BUFFER;
    pending--;
    int ns = n->nsrc;
    st_node *srcs[ST_NODE_SRCS];
    memcpy(srcs, n->src, sizeof srcs);
    n->nsrc = 0;
    memset(n->src, 0, sizeof n->src);
    memset(&n->arg, 0, sizeof n->arg);
    for (int i = 0; i < ns; i++) st_node_release(srcs[i]);
}
