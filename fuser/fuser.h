/*
 * fuser.h — internal: the fuser's plan of a flushed region (partition.c), its lowering to kernel
 * IR (lower.c) and execution (exec.c, which implements fuse_execute from trace/trace.h).
 *
 * Vocabulary. Every region node is one of:
 *   - free: a VIEW or a source (CONST, IOTA, RAND_*) that is neither a target nor needed as a
 *     buffer. It belongs to no group: each group that reads it evaluates it inline (views fold
 *     into load indexing; sources cost nothing or are counter-based, so recomputing is exact);
 *   - inlined into group g: evaluated inside g's kernel, never stored;
 *   - materialized by group g: computed by g's kernel and written to its own buffer (targets,
 *     values read by more than one group, values a consumer needs as a real buffer).
 * node->tag is the group (or -1 for free nodes). The group graph is acyclic (checked when a
 * materialized value joins an existing group) and plan->order is a topological order of it.
 */
#ifndef ST_FUSER_H
#define ST_FUSER_H

#include "kir.h"
#include "../jit/jit.h"

typedef enum fuse_group_kind {
    FG_POINTWISE, FG_REDUCE, FG_MATMUL, FG_SCATTER, FG_SETVIEW,
    FG_HORIZONTAL,            /* independent groups launched as one kernel (horizontal.c) */
    FG_KIND_COUNT
} fuse_group_kind;

/* Where a reduce group computes an output: after the reduction (epilogue, at output index) or
 * inside the reduction loop (a value of the reduction's input shape, stored as it is visited). */
enum { FUSE_OUT_MAIN = 0, FUSE_OUT_INPUT = 1 };

typedef struct fuse_group {
    fuse_group_kind kind;
    st_node *anchor;          /* the REDUCE/MATMUL/SCATTER_ADD/SETVIEW node; NULL for pointwise.
                               * Reduce groups: the reference for the rows (input shape, axes) */
    st_node **reds;           /* reduce groups: every reduction of the group (stitched rows) */
    int nreds, capreds;
    st_node **outs;           /* materialized nodes this group writes (owned array) */
    uint8_t *out_side;        /* FUSE_OUT_* per output (reduce groups) */
    int nouts, capouts;
    int ndim;                 /* pointwise: the domain (every output has this shape) */
    int64_t shape[ST_MAX_DIMS];
    int interp;               /* executed by the interpreter (could not be lowered) */
    int *members;             /* FG_HORIZONTAL: its member groups (owned); outs is their outs */
    int nmembers;
    int batched;              /* a member of an FG_HORIZONTAL group: not in plan->order, never
                               * launched on its own */
} fuse_group;

typedef struct fuse_plan {
    st_region *r;
    fuse_group *groups;
    int ngroups, capgroups;
    int *order;               /* group ids in execution order (norder: batched members of an
                               * FG_HORIZONTAL group are left out, the batch is in) */
    int norder;
    uint8_t *mat;             /* per region position: materialized */
    uint8_t *need;            /* per region position: a consumer needs it as a buffer */
    int *cg;                  /* per position: consumer-group summary (-1 none, -2 several) */
    int *cons_off, *cons;     /* consumers (CSR over region positions) */
    uint32_t *stamp;          /* DFS marks */
    uint32_t stamp_now;
} fuse_plan;

/* flags.c: the fusion kinds switched on (ST_FUSE; see docs/fusion.md). Each kind's decision in
 * partition.c checks its bit; with a bit off that kind of merge is not made. */
enum {
    FUSE_INLINE = 1u << 0,       /* elementwise producers inlined into their single consumer group */
    FUSE_REDUCE = 1u << 1,       /* elementwise producers and epilogues fused into reductions */
    FUSE_STITCH = 1u << 2,       /* reductions stitched with consumers over the same rows */
    FUSE_MM_PROLOGUE = 1u << 3,  /* views and casts folded into matmul operand loads */
    FUSE_MM_EPILOGUE = 1u << 4,  /* elementwise consumers fused into the matmul's store */
    FUSE_MULTI = 1u << 5,        /* several outputs per kernel (siblings, sibling reductions) */
    FUSE_HORIZONTAL = 1u << 6,   /* independent groups batched into one launch */
    FUSE_ALL = (1u << 7) - 1
};
ST_INTERNAL unsigned fuse_flags(void);                 /* ST_FUSE, parsed once */
ST_INTERNAL unsigned fuse_parse_flags(const char *spec);
ST_INTERNAL void fuse_set_flags(unsigned flags);       /* overrides ST_FUSE (tests, benches) */
static inline bool fuse_on(unsigned kind) { return (fuse_flags() & kind) != 0; }

/* True when n is computed in this flush (an unrealized node: every such node reachable from the
 * region is in it). */
static inline bool fuse_in_region(const st_node *n) { return n->op != ST_OP_BUFFER; }
static inline bool fuse_is_free(const fuse_plan *p, const st_node *n) {
    (void)p; /* decided nodes only: tag is set (or left -1 for free nodes) when a node is placed */
    return fuse_in_region(n) && n->tag < 0;
}
/* True when a read of n inside group g must load n's buffer. */
static inline bool fuse_loads(const fuse_plan *p, const st_node *n, int g) {
    return !fuse_in_region(n) || (p->mat[n->pos] && n->tag != g);
}

/* A VIEW that maps flat index f of its shape to flat index f of its src (a contiguous reshape). */
ST_INTERNAL bool fuse_view_is_flat(const st_node *v);
/* Folds a chain of VIEWs under a matmul operand into one strided view of a base node: on return
 * *base is the node to load from (a BUFFER or a node the plan materializes) and strides/offset
 * index base's contiguous layout for every dim of src. */
ST_INTERNAL void fuse_mm_operand(st_node *src, st_node **base, int64_t *strides, int64_t *offset);

/* partition.c: builds the plan (groups, materialization, order). */
ST_INTERNAL st_status fuse_partition(st_region *r, fuse_plan *p);
ST_INTERNAL void fuse_plan_free(fuse_plan *p);
/* Calls fn(node, ud) for every node group g evaluates (its outputs, its anchor, and everything
 * inlined or free under them, stopping at loads), in region order. Returns fn's first non-OK. */
ST_INTERNAL st_status fuse_group_nodes(fuse_plan *p, int g,
                                       st_status (*fn)(st_node *n, void *ud), void *ud);

/* horizontal.c: batches independent pointwise groups of one level of the group DAG into
 * FG_HORIZONTAL groups and rebuilds plan->order (run at the end of fuse_partition). */
ST_INTERNAL st_status fuse_horizontal(fuse_plan *p);

/* lower.c: one group as a kernel plus its launch arguments. */
typedef struct fuse_launch {
    kir_kernel k;
    st_node *buf_node[KIR_MAX_BUFS];   /* the node whose buffer each slot binds at launch */
    int64_t *ints;
    double *flts;
    int inplace;                       /* SETVIEW writing into src0's buffer */
    int64_t work;                      /* elements iterated (tier decision, debug) */
    char name[64];                     /* "k3_add_exp_sum" */
} fuse_launch;
/* Lowers group g. ST_ERR_INTERNAL (with a message) when the group uses something the lowering
 * cannot express: the caller runs it through the interpreter instead. */
ST_INTERNAL st_status fuse_lower(fuse_plan *p, int g, fuse_launch *out);
ST_INTERNAL void fuse_launch_free(fuse_launch *l);
/* horizontal.c: an FG_HORIZONTAL group: each member lowered by fuse_lower, the kernels
 * concatenated (kir_append) into one launch. Fails like fuse_lower when a member does. */
ST_INTERNAL st_status fuse_lower_horizontal(fuse_plan *p, int g, fuse_launch *out);

/* Runs lowered group L on CUDA device ord (fuser/exec_cuda.c): bufs are the slots' device
 * pointers; *err is set when the kernel reported an index out of range. */
ST_INTERNAL st_status exec_cuda_launch(const fuse_launch *L, int ord, void *const *bufs, int *err);
ST_INTERNAL void exec_cuda_shutdown(void);   /* frees the per-device error flags */

#endif
