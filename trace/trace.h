/*
 * trace.h — internal: the trace layer. trace/ owns the op table (ops.def: every op named once, with
 * its kind, math, dtype rule, cost and gradient rule), the lazy DAG of nodes (node.c), the regions a
 * flush hands to an executor, and the reference interpreter (interp.c), the oracle. It sits on the
 * device layer (a realized node holds a buffer) and knows nothing above it: autograd attaches to new
 * nodes through hooks (trace_ag_hooks), and the flush that picks an executor is runtime/flush.c.
 *
 * A node is an immutable value: (op, dtype, shape, srcs, arg). Nodes are created by the runtime
 * (runtime/ops.c) and never mutated afterwards, except in one way: a flush may *realize* a node,
 * which gives it a buffer, turns its op into ST_OP_BUFFER and drops its srcs. A realized node's
 * buffer is contiguous in the node's shape and dtype.
 */
#ifndef ST_TRACE_H
#define ST_TRACE_H

#include "device/device.h"

typedef enum st_op_kind {
    OPK_SOURCE, OPK_MOVEMENT, OPK_UNARY, OPK_BINARY, OPK_TERNARY, OPK_REDUCE, OPK_MATMUL,
    OPK_GATHER, OPK_WRITE, OPK_ATTN, OPK_COUNT
} st_op_kind;

/* The result dtype rule of an elementwise op (ops.def's DTYPE column; applied in runtime/ops.c). */
typedef enum st_dtype_rule {
    DT_NONE, DT_SAME, DT_NUMERIC, DT_FLOAT, DT_NOBOOL, DT_TO_BOOL, DT_LOGIC, DT_RULE_COUNT
} st_dtype_rule;
/* Whether a value is worth a store and a reload over recomputing it (ops.def's COST column). */
typedef enum st_op_cost { COST_LOW, COST_HIGH } st_op_cost;

typedef enum st_op {
#define X(NAME, KIND, NSRC, STR, MATH, DTYPE, COST, GRAD, READS) ST_OP_##NAME,
#include "trace/ops.def"
#undef X
    ST_OP_COUNT
} st_op;

typedef struct st_op_info {
    const char *name;     /* "exp" */
    const char *math;     /* the op-math macro of base/opmath.h, "om_exp"; "om_none" if not elementwise */
    st_op_kind kind;
    int nsrc;
    st_dtype_rule dtype;
    st_op_cost cost;
    bool diff;            /* has a gradient rule (runtime/grad.c) */
    bool reads;           /* the rule reads the op's values */
} st_op_info;
ST_INTERNAL extern const st_op_info st_ops[ST_OP_COUNT];
static inline bool st_op_is_elementwise(st_op op) {
    st_op_kind k = st_ops[op].kind;
    return k == OPK_UNARY || k == OPK_BINARY || k == OPK_TERNARY;
}

/* A strided, optionally masked view of src 0's contiguous layout (VIEW), or the region written by
 * SETVIEW (no mask). For output multi-index i (the node's shape, or src 1's shape for SETVIEW):
 *   valid  = !has_mask || all_d(lo[d] <= i[d] < hi[d])
 *   flat   = offset + sum_d i[d] * strides[d]          (an index into src 0's contiguous layout)
 *   value  = valid ? src0.flat[flat] : 0
 * strides may be 0 (broadcast) and flat is only meaningful where valid. */
typedef struct st_view_arg {
    int64_t strides[ST_MAX_DIMS];
    int64_t offset;
    int64_t lo[ST_MAX_DIMS], hi[ST_MAX_DIMS];
    int has_mask;
} st_view_arg;

typedef union st_node_arg {
    struct { double f; int64_t i; } c;                   /* CONST: f for float dtypes, i otherwise */
    struct { double start, step; int axis; } iota;       /* IOTA */
    struct { uint64_t seed, offset; int64_t lo, hi; } rng;/* RAND_*: counter = offset + flat index */
    struct { uint32_t axes; } red;                       /* REDUCE: bit d set = dim d of src 0 reduced */
    struct { int dim; } axis;                            /* GATHER, SCATTER_ADD */
    st_view_arg view;                                    /* VIEW, SETVIEW */
    struct { double scale, drop; int causal; uint64_t seed, offset; } attn;
                                                         /* ATTN: softmax(q k^T * scale + mask) v;
                                                          * causal: query i sees keys j <= i; drop >
                                                          * 0: dropout of the weights, element (b..,
                                                          * i, j) kept when the uniform at counter
                                                          * offset + its flat index is >= drop */
} st_node_arg;

enum {
    NODE_WEAK = 1,     /* CONST from a bare number: promotion by category only */
    NODE_TARGET = 2,   /* scratch during a flush: must be materialized */
    NODE_STORE = 4,    /* st_store_hint: stored by a group of its own wherever it is computed */
};

/* Autograd (runtime/autograd.c). A storage whose tensor requires grad owns an accumulator; leaf
 * nodes (versions of such a storage) point to it. grad is an identity tensor of the storage's base
 * shape or NULL; it is dropped when the storage dies (so freeing an accumulator never frees a
 * tensor). */
typedef struct st_grad_acc {
    int32_t refcnt;
    uint8_t requires_grad;    /* the storage is a leaf that requires grad */
    uint8_t retains_grad;     /* the storage is a non-leaf whose gradient is kept (retain_grad) */
    struct st_tensor *grad;
} st_grad_acc;

/* The autograd record of a node that requires grad: a leaf (acc set, no srcs) or the forward op
 * with its own references to the srcs, kept when the node is realized (which drops node->src). */
typedef struct st_ag {
    st_grad_acc *acc;         /* owned reference; leaf only */
    st_grad_acc *retain;      /* owned reference: a non-leaf whose gradient is kept (retain_grad) */
    struct st_ag_fn *fn;      /* owned: a custom function's record (kind AG_FN); opaque here */
    uint16_t op;
    uint8_t kind;             /* AG_OP, AG_FN or AG_FN_OUT */
    uint8_t nsrc;
    st_node_arg arg;          /* AG_FN_OUT: arg.c.i is the output's index */
    struct st_tensor *grad;   /* scratch during a backward pass */
    uint64_t mark;
    struct st_node *src[];    /* nsrc owned references (st_ag_size(nsrc) bytes in all) */
} st_ag;

/* Record kinds: an op's (its rule in runtime/grad.c; leaves too, with acc set); a custom function
 * (srcs: its inputs that require grad; fn: its backward, called by runtime/autograd_fn.c); one
 * output of a custom function (src 0: the function's node). */
enum { AG_OP, AG_FN, AG_FN_OUT };
static inline size_t st_ag_size(int nsrc) { return sizeof(st_ag) + (size_t)nsrc * sizeof(struct st_node *); }

/* The most srcs a node has (an attention's q, k, v and its mask). */
#define ST_NODE_SRCS 4

typedef struct st_node {
    int32_t refcnt;
    uint16_t op;          /* st_op */
    uint8_t dtype;        /* st_dtype */
    uint8_t ndim;
    uint8_t nsrc;
    uint8_t flags;
    int8_t dev;           /* ST_DEV_ANY, ST_DEV_CPU or 1 + a CUDA ordinal (see st_node_dev) */
    int8_t rdev;          /* scratch during a flush: the device this node runs on */
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    struct st_node *src[ST_NODE_SRCS];
    st_buffer *buf;       /* set once realized (op == ST_OP_BUFFER) */
    st_ag *ag;            /* set when the node requires grad */
    uint64_t id;          /* creation order: ids grow along every src edge */
    uint64_t epoch;       /* flush that last visited this node (region collection) */
    st_node_arg arg;
    /* scratch for the pass running a flush; meaningless outside it */
    int32_t uses;         /* consumers inside the region */
    int32_t pos;          /* index in the region's order */
    int32_t tag;          /* free for the fuser */
    void *aux;            /* free for the executor */
} st_node;

/* Devices. A node's device is where its value lives or will be computed: ST_DEV_CPU, or 1 + the
 * CUDA ordinal. Generated sources (CONST, IOTA, RAND_*) and nodes made only from them (a fill's
 * VIEW of a CONST) are ST_DEV_ANY: they are computed inside whichever kernel reads them, and when
 * materialized themselves they go to the default device (st_rt.default_dev). A realized node's
 * device is its buffer's. Creating a node from sources bound to two different devices is an
 * ST_ERR_DEVICE error naming both. */
ST_INTERNAL int st_node_dev(const st_node *n);   /* the device n is bound to, or ST_DEV_ANY */

/* Create a node; srcs are retained (borrowed from the caller). shape has ndim entries. Returns
 * NULL (ST_ERR_OOM) on allocation failure. The caller owns the returned reference. */
ST_INTERNAL st_node *st_node_new(st_op op, st_dtype dt, int ndim, const int64_t *shape,
                                 int nsrc, st_node *const *srcs, const st_node_arg *arg);
static inline st_node *st_node_retain(st_node *n) { n->refcnt++; return n; }
ST_INTERNAL void st_node_release(st_node *n);   /* frees, recursively releasing srcs, at 0 */
/* Turn n into a realized BUFFER node owning buf (reference taken over); drops its srcs. */
ST_INTERNAL void st_node_realize(st_node *n, st_buffer *buf);
ST_INTERNAL int64_t st_pending_nodes(void);     /* live unrealized nodes */
ST_INTERNAL int64_t st_pending_bytes(void);     /* their results' bytes (views excluded) */
ST_INTERNAL int64_t st_live_nodes(void);        /* live nodes (realized or not) */
/* Autograd attaches itself (runtime/autograd.c registers these when it makes its first record):
 * attach gives a new node whose srcs require grad its record (called by st_node_new for every node
 * with srcs; on failure the node is dropped); when a node with a record is freed, acc_release drops
 * the record's reference to an accumulator (a leaf's, or a retained gradient's) and fn_release
 * frees a custom function's record (neither releases nodes: the record's srcs are released here). */
typedef struct trace_ag_hooks {
    st_status (*attach)(st_node *n);
    void (*acc_release)(st_grad_acc *acc);
    void (*fn_release)(struct st_ag_fn *fn);   /* a custom function's record is freed */
} trace_ag_hooks;
ST_INTERNAL void trace_set_ag_hooks(const trace_ag_hooks *h);
ST_INTERNAL size_t st_node_nbytes(const st_node *n);

/* A new VIEW node reading all of n unchanged (a distinct node with n's value). */
ST_INTERNAL st_node *st_node_identity_view(st_node *n);

/* ---- regions and flushes ---- */
/* A flushed region: the unrealized nodes reachable from the targets, in topological order (srcs
 * before consumers; node->pos is the index). Targets carry NODE_TARGET. Every node's `uses` counts
 * its consumers inside the region; a node with consumers outside the region keeps them through its
 * refcount. While a flush runs it holds one reference to every region node (runtime/flush.c), so
 * "someone else holds it" is refcnt > uses + 1 (fuser/fuser.h fuse_kept), not refcnt > uses. */
typedef struct st_region {
    st_node **nodes;
    int n;
    int ntargets;
} st_region;

/* The reference executor (trace/interp.c): runs a region op by op, the oracle. On success every
 * NODE_TARGET node of the region has node->buf set (a contiguous buffer of its shape and dtype, one
 * reference owned by the node); other nodes may also have buf set (materialized intermediates); the
 * caller then realizes every node with a buffer. On failure no node is left with a partial buffer.
 * Every executor (the fuser's fuse_execute too) keeps this contract. */
ST_INTERNAL st_status interp_execute(st_region *r);

/* The interpreter's single-node primitive, also used by the fuser's interpreter tier: computes
 * node n into out (contiguous, n's shape and dtype), reading every src from src->buf (each src
 * must have a buffer, realized or temporary). */
ST_INTERNAL st_status interp_eval_node(st_node *n, st_buffer *out);
/* A VIEW that repeats one element of its materialized src everywhere (every stride 0 or size 1,
 * no mask): that element's address, else NULL. interp_eval_node's elementwise ops read such a
 * src in place when it has no buffer (the interpreter tier leaves it unevaluated). */
ST_INTERNAL const void *interp_broadcast_elem(const st_node *n);
/* A VIEW (no mask) of a src that has a buffer of its dtype, every element it names inside that
 * buffer: true when an attention may read it as its mask through its strides, unevaluated (the
 * executors leave such a mask unevaluated: a (B, 1, 1, Lk) key padding mask is never expanded). */
ST_INTERNAL bool interp_strided_view(const st_node *n);

#endif
