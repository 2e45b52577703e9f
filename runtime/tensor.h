/*
 * tensor.h — internal: the runtime layer, the public API (include/stitch.h). runtime/ owns tensor
 * handles and storages (tensor.c), creation and the RNG stream (create.c, runtime.c), elementwise
 * ops, reductions and matmul (ops.c: the elementwise API generated from trace/ops.def), einsum,
 * views, joining and indexing (views.c, index.c), autograd (autograd.c: records and the backward
 * walk; grad.c: the gradient rules), sync points (flush.c: collect the region, run the fuser or the
 * interpreter, realize), st_graph (graph.c), devices as the user names them (device.c) and the
 * control API (runtime.c). This header is the helpers ops use to read and make tensors.
 *
 * Ownership, in one paragraph: a public st_tensor is a handle = (storage, strided view). A storage
 * owns the current *version* of its data as a trace node of the storage's base shape. Reading a
 * tensor reads VIEW(storage->node); an in-place write replaces storage->node by a new node (the
 * op's result, or SETVIEW(old, value) for a strided region), so every view of the storage sees the
 * write and nodes stay immutable values (no read/write race inside the trace). Nodes are
 * refcounted: held by consumer nodes (src), storages, tensors' cached view nodes and flushes. A
 * realized node has op ST_OP_BUFFER and a contiguous buffer of its shape and dtype.
 *
 * st_tensor = (storage, strided view). storage->node is the current version of the data, a node of
 * the storage's base shape whose contiguous C-order layout the view's strides and offset index.
 * Invariants: t->dtype == storage->node->dtype; a view never has a mask; `identity` is set exactly
 * when the view is the whole base in C order (then reading t reads storage->node itself).
 */
#ifndef ST_TENSOR_H
#define ST_TENSOR_H

#include "trace/trace.h"

typedef struct st_storage {
    int32_t refcnt;
    st_node *node;                    /* owned reference: current version */
    st_grad_acc *acc;                 /* owned reference: gradient accumulator, or NULL */
    struct st_storage *prev, *next;   /* list of live storages (st_sync) */
    struct st_storage *wnext;         /* list of written storages (st_written_*), when `written` */
    uint8_t written;
} st_storage;

struct st_tensor {
    int32_t refcnt;
    uint8_t ndim;
    uint8_t dtype;
    uint8_t identity;
    uint8_t weak;                     /* a bare number (st_weak_scalar_*) */
    int64_t shape[ST_MAX_DIMS];
    int64_t strides[ST_MAX_DIMS];     /* in elements of the base layout */
    int64_t offset;
    st_storage *storage;              /* owned reference */
};

/* A new tensor owning a new storage whose version is n (the reference to n is taken over). NULL on
 * OOM (n is released). Runs eager mode and the trace-size bound. */
ST_INTERNAL st_tensor *st_tensor_from_node(st_node *n);
/* st_to_dev (runtime/device.c): t on device dev (t itself, retained, when already there). */
ST_INTERNAL st_tensor *st_to_dev(st_tensor *t, int dev);
/* The default device (runtime/device.c): ST_DEVICE if set and usable, else the first GPU whose
 * driver and kernel compiler (NVRTC) load and agree, else the CPU. Resolved once;
 * st_set_default_device changes it. Falling back to the CPU is silent unless a GPU was asked for
 * (ST_DEVICE) or ST_DEBUG is set: then stderr says why, once. */
ST_INTERNAL int st_default_dev(void);
/* The global random stream (runtime.c): seed, and the next counter a random op takes. */
ST_INTERNAL extern uint64_t st_rng_seed, st_rng_offset;
/* st_rand's numbers of a given stream (seed, first counter), the global one untouched: a
 * backward's copy of the numbers a forward op drew (the attention's dropout). */
ST_INTERNAL st_tensor *st_rand_at(st_dtype dt, int ndim, const int64_t *shape, uint64_t seed, uint64_t offset);
/* Host-memory creators for loaders that write the data themselves (st_empty/st_from_data put data
 * on the default device). */
/* st_scalar with op naming the caller in errors (an integer dtype given a value it cannot hold). */
ST_INTERNAL st_tensor *st_scalar_op(const char *op, double v, st_dtype dt);
ST_INTERNAL st_tensor *st_empty_host(st_dtype dt, int ndim, const int64_t *shape);
ST_INTERNAL st_tensor *st_from_data_host(st_dtype dt, int ndim, const int64_t *shape, const void *data);
/* A new handle on t's storage with the given view (a view op's result). NULL with ST_ERR_SHAPE,
 * naming shape, strides and offset, when the view reaches an element outside the storage. */
ST_INTERNAL st_tensor *st_tensor_view(st_tensor *t, int ndim, const int64_t *shape,
                                      const int64_t *strides, int64_t offset);
/* A new node reference reading t broadcast to shape (ndim >= t's) and cast to dt: the storage node
 * itself, or a VIEW of it, plus a CAST when dt differs (weak CONSTs are converted in place). */
ST_INTERNAL st_node *st_tensor_read(st_tensor *t, st_dtype dt, int ndim, const int64_t *shape);
/* t's elements (as dt) with before[d] zeros in front of and after[d] behind each dim d: one masked
 * VIEW node, read as 0 outside t (st_zero_pad; st_cat's pieces). NULL on error. */
ST_INTERNAL st_node *st_pad_view_node(st_tensor *t, st_dtype dt, const int64_t *before, const int64_t *after);
/* value bound to device dev: value itself when it is bound already or dev is ST_DEV_ANY, else an
 * identity VIEW of it bound to dev (an unbound value, a fill or an arange, is then computed there,
 * as st_to_dev does without a flush). The reference to value is taken over; NULL on OOM. */
ST_INTERNAL st_node *st_node_bind_dev(st_node *value, int dev);
/* Replace the region of t's storage that t views by value (a node of t's shape and dtype; the
 * reference is taken over). The in-place primitive behind add_, copy_, fill_, indexing writes. */
ST_INTERNAL st_status st_tensor_write(st_tensor *t, st_node *value);
/* Broadcast two shapes; on failure an ST_ERR_SHAPE error naming both, prefixed by op. */
ST_INTERNAL st_status st_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb,
                                          const int64_t *sb, int *nout, int64_t *out);
/* Normalize dim (negative from the end) for ndim dims; -1 with an ST_ERR_ARG error if out of range. */
ST_INTERNAL int st_norm_dim(const char *op, int dim, int ndim);
/* Make s->node a leaf node of s's accumulator (runtime/autograd.c): a node nobody else holds,
 * with a leaf autograd record. */
ST_INTERNAL st_status st_ag_mark_leaf(st_storage *s);
/* Grad mode (st_grad_mode_push/pop), the record of a new node (trace_ag_hooks.attach) and the
 * release of an accumulator reference (runtime/autograd.c). */
ST_INTERNAL extern int st_grad_mode;
/* The autocast dtype (ST_F16 / ST_BF16) or ST_DTYPE_COUNT when off (runtime.c). */
ST_INTERNAL extern int st_autocast_dt;
ST_INTERNAL st_status st_ag_attach(st_node *n);
ST_INTERNAL void st_ag_acc_release(st_grad_acc *acc);
/* Realize the given nodes (and what they need) in one flush (runtime/flush.c). */
ST_INTERNAL st_status st_flush_nodes(int n, st_node *const *targets);

/* Written state: a storage an in-place write gives a pending value (BatchNorm's running
 * statistics, an optimizer's buffers, x[mask] = v) is realized by the next flush whatever its
 * targets. Left pending, the next write builds on it, and each version holds the graph of the
 * step that wrote it (a ResNet's running statistics: 135 MB more in use a step). tensor.c lists
 * the storages (no reference: a storage freed first leaves the list); st_flush_nodes (flush.c)
 * adds their nodes to its targets and then clears the list, also when the flush failed: a write
 * whose value cannot be computed (an index out of range) fails that one flush and is raised
 * again only where it is read, so later flushes that do not need it still run. */
ST_INTERNAL int st_written_nodes(st_node ***out);   /* the listed pending nodes (st_malloc'ed); -1: OOM */
ST_INTERNAL void st_written_clear(void);

#endif
