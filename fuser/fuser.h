/*
 * fuser.h — internal: the fuser layer. fuser/ owns the plan of a flushed region (partition.c, with
 * the cost model in cost.c and horizontal batching in horizontal.c), its lowering to kernel IR
 * (lower.c), the plan cache (plan_cache.c), the fusion flags (flags.c), the plan drawn as a graph
 * (graph.c) and execution (exec.c: fuse_execute, the CPU tiers; exec_cuda.c: groups on a CUDA
 * device). It uses the JIT to render and compile kernels and the device interface to launch them;
 * the runtime's flush calls fuse_execute.
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

#include "ir/kir.h"
#include "jit/jit.h"

/* Partition the region, lower, compile and launch it (exec.c). The executor contract of
 * interp_execute (trace/trace.h). */
ST_INTERNAL st_status fuse_execute(st_region *r);

typedef enum fuse_group_kind {
    FG_POINTWISE, FG_REDUCE, FG_MATMUL, FG_SCATTER, FG_SETVIEW,
    FG_ATTN,                  /* an attention (ST_OP_ATTN): its own kernel, operands read in place */
    FG_HORIZONTAL,            /* independent groups launched as one kernel (horizontal.c) */
    FG_KIND_COUNT
} fuse_group_kind;
/* "pointwise", "reduce", ... (debug lines, graphs) */
ST_INTERNAL extern const char *const fuse_kind_names[FG_KIND_COUNT];

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
    int work;                 /* code size of what it evaluates (fuse_node_work units; at most
                               * FUSE_MAX_WORK unless one node alone is bigger) */
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
    const uint8_t *cut;       /* per position, or NULL: stored by a group of its own (borrowed) */
    uint32_t *stamp;          /* DFS marks */
    int *depth;               /* per position: how deep its group's lowering recurses to it
                               * (partition.c eval_depth; at most FUSE_MAX_DEPTH) */
    uint32_t stamp_now;
    /* scratch of the passes over the plan (partition.c), kept with it so that a flush is
     * re-entrant: a DFS stack, the placed nodes bucketed by group (CSR), a group's node walk */
    struct fuse_dfs_ent *dfs;
    int dfs_cap;
    int *mem_off, *mem_nodes;
    int mem_cap_off, mem_cap_nodes;
    int *walk;
    int walk_cap;
} fuse_plan;
typedef struct fuse_dfs_ent { int pos; int left; } fuse_dfs_ent;

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
    FUSE_MM_IMPLICIT = 1u << 7,  /* a reshape of a strided view read by the GEMM (implicit GEMM) */
    FUSE_ALL = (1u << 8) - 1
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
 * index base's contiguous layout for every dim of src. *offview (when not NULL): the VIEW whose
 * offset *offset is, or NULL when the offset is 0 by construction. */
ST_INTERNAL void fuse_mm_operand(st_node *src, st_node **base, int64_t *strides, int64_t *offset,
                                 st_node **offview);
/* The same, also giving the operand's split matrix dims (FUSE_MM_IMPLICIT, float matmuls): when
 * src is a reshape of a strided VIEW whose dims merge into src's (the columns of a convolution:
 * (N, C*kh*kw, Ho*Wo) over the padded input's (N, C, kh, kw, Ho, Wo)), the VIEW is folded too:
 * each batch dim must be one stride (strides[d]), and the row and column dims (sub[0], sub[1]:
 * 0 = strides[d] alone) may each walk up to KIR_MM_SUB dims of the VIEW (size and stride,
 * outermost first; strides[d] is then 0). The GEMM gathers such an operand as it packs it: the
 * columns are never stored. */
typedef struct fuse_mm_split {
    int sub[2];
    int64_t size[2][KIR_MM_SUB], stride[2][KIR_MM_SUB];
} fuse_mm_split;
ST_INTERNAL void fuse_mm_operand_split(st_node *src, st_node **base, int64_t *strides, int64_t *offset,
                                       st_node **offview, fuse_mm_split *split);
/* With FUSE_MM_PROLOGUE the chain may include one CAST (not a target) from a float dtype to the
 * matmul's, when fuse_mm_cast_ok: *base then has the source's dtype and the GEMM converts each
 * element as it loads it (base/opmath.h ST_GEMM_MIXED). */
ST_INTERNAL bool fuse_mm_cast_ok(st_dtype to, st_dtype from);
/* An attention operand (ST_OP_ATTN's q, k, v) as a strided base: the chain of views only (no
 * CAST), every dim one stride; the kernel reads the base in place. */
ST_INTERNAL void fuse_attn_operand(st_node *src, st_node **base, int64_t *strides, int64_t *offset,
                                   st_node **offview);

/* partition.c: builds the plan (groups, materialization, order). A node that would be evaluated
 * deeper than FUSE_MAX_DEPTH levels into its group's expressions is stored by another group
 * instead (a 10,000-op elementwise chain is cut into kernels of at most this many levels): the
 * lowering recurses once per level (lower.c, whose own limit is above this one). */
enum { FUSE_MAX_DEPTH = 250 };
/* A kernel's body is capped too: the nodes one group evaluates weigh at most FUSE_MAX_WORK units
 * of fuse_node_work (cost.c; a plain arithmetic op is 1), and a node that would take a group past
 * it is stored by another group. The C compiler's time grows faster than linearly with a loop
 * body of many independent expensive ops (32 independent sines: 15 s at -O3; 200 same-shape
 * uniform draws: 34 s), so a region is cut into kernels of bounded size (docs/fusion.md). */
enum { FUSE_MAX_WORK = 1024 };
ST_INTERNAL int fuse_node_work(const st_node *n);
/* partition.c: builds the plan (groups, materialization, order). */
/* cut (per region position, or NULL): nodes placed alone, each materialized by a new group that
 * nothing else joins (fuser/exec.c: a group with no kernel on a device without an interpreter is
 * planned again with its nodes cut apart). */
ST_INTERNAL st_status fuse_partition(st_region *r, fuse_plan *p, const uint8_t *cut);
/* Regions that fell back to the interpreter because planning failed (ST_ERR_INTERNAL: a fuser
 * bug such as a cycle between groups; results stay right). Tests count each as a failure. */
ST_INTERNAL uint64_t fuse_plan_fallbacks(void);
ST_INTERNAL void fuse_plan_free(fuse_plan *p);
/* Calls fn(node, ud) for every node group g evaluates (its outputs, its anchor, and everything
 * inlined or free under them, stopping at loads), in region order. Returns fn's first non-OK. */
ST_INTERNAL st_status fuse_group_nodes(fuse_plan *p, int g,
                                       st_status (*fn)(st_node *n, void *ud), void *ud);

/* ---- cost.c: the cost model (docs/fusion.md "Cost model") ----
 * Estimates in bytes moved and launches. One decision uses them today (partition.c's
 * store_kept_rows): a row value kept alive outside the region is stored by the kernel that
 * computes its rows when recomputing it later would cost more than FUSE_COST_K times the write. */
enum {
    FUSE_COST_K = 16,                  /* store when recompute >= K * write: see cost.c */
    FUSE_COST_LAUNCH_BYTES = 16384     /* a launch, as bytes moved (a few µs at tens of GB/s) */
};
typedef struct fuse_cost {
    int64_t read;                      /* bytes of the buffers the kernel loads, each once */
    int64_t written;                   /* bytes of its materialized outputs */
    int64_t work;                      /* elements iterated (a reduction: its input's) */
    int launches;                      /* 1; 0 for a member of a horizontal batch */
} fuse_cost;
/* x is kept alive outside the region (a handle, an autograd record): flush_region holds one
 * reference to every region node while it runs, and `uses` counts the region's own. */
static inline bool fuse_kept(const st_node *x) { return x->refcnt > x->uses + 1; }
/* The estimate of group g of a finished plan (FG_HORIZONTAL: its members summed, 1 launch). */
ST_INTERNAL fuse_cost fuse_cost_group(fuse_plan *p, int g);
/* A row value: a reduction, or an elementwise op with a source in the region that is a row
 * value of its element count (`sum * c`, `rsqrt(var + eps)`). rowval[pos] holds the answer for
 * every region node before x (region order). Structural only: the plan cache keys the kept bit
 * of exactly these nodes. */
ST_INTERNAL bool fuse_row_value(const st_node *x, const uint8_t *rowval);
/* The reduce group whose epilogue can compute row value x (every reduction x derives from is in
 * it, everything else on the way is elementwise at x's element count, free, or stored by that
 * group), or -1. *reread: the bytes recomputing x later re-reads (each reduction's input). */
ST_INTERNAL int fuse_cost_row_home(fuse_plan *p, const st_node *x, int64_t *reread);
/* Recompute later (reread + a launch) vs write now (bytes): true when writing is cheaper. */
ST_INTERNAL bool fuse_cost_store_wins(int64_t write_bytes, int64_t reread_bytes);
/* ---- end cost.c ---- */

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

/* What a launch of one lowered group needs beyond its IR and arguments: its function and launch
 * geometry on a device of the CUDA target (exec_cuda.c). A plan-cache group owns one, filled at
 * its first launch, so later launches neither render nor hash the kernel; it notices modules
 * unloaded since (the device's generation) and resolves the function again. */
typedef struct exec_cuda_fn exec_cuda_fn;
ST_INTERNAL exec_cuda_fn *exec_cuda_fn_new(void);       /* empty (NULL with ST_ERR_OOM) */
ST_INTERNAL void exec_cuda_fn_free(exec_cuda_fn *f);    /* NULL is a no-op */
/* Runs lowered group L on device dev (of the CUDA target; fuser/exec_cuda.c): bufs are the slots'
 * device pointers. cache: L's slot (NULL: resolved for this launch only); it must always be used
 * with the same L and dev. An index out of range is not known when this returns: the device
 * reports it at its next synchronization point with the error fuse_index_error words for `op`
 * ("gather", "scatter_add"). */
ST_INTERNAL st_status exec_cuda_launch(const fuse_launch *L, int dev, exec_cuda_fn *cache, void *const *bufs,
                                       const char *op);
/* exec.c: the error of kernel `kernel` whose index flag was set: "gather: index out of range
 * (kernel k3_gather)". The same words on every device. */
ST_INTERNAL void fuse_index_error(char *buf, size_t cap, const char *op, const char *kernel);
/* Tests: CUDA sources rendered for launches so far (each costs a render and a hash). */
ST_INTERNAL uint64_t exec_cuda_renders(void);

/* ---- graph.c: the plan in Graphviz dot (ST_GRAPH, st_graph; docs/fusion.md "Seeing the plan") ---- */
/* True when this flush's plan must be written (st_graph is waiting for it, or ST_GRAPH is set and
 * still writing): a plan cache must not skip planning and lowering while it is true. */
ST_INTERNAL bool fuse_graph_wanted(void);
/* Writes the lowered plan (launch[g] for every group; use_jit: the CPU tier decision) where
 * wanted. Never fails the flush: problems are a stderr note (ST_GRAPH) or st_graph's error. */
ST_INTERNAL void fuse_graph_emit(fuse_plan *p, const fuse_launch *launch, int use_jit);
/* st_graph (runtime/graph.c): the next plan emitted is written to f (begin; ST_ERR_ARG while
 * another one is waiting; f NULL: only that check); end stops waiting and says what happened: 0 nothing was planned, 1
 * written, -1 out of memory while writing. svg: `dot -Tsvg` next to path when dot is on PATH. */
ST_INTERNAL st_status fuse_graph_begin(FILE *f);
ST_INTERNAL int fuse_graph_end(void);
ST_INTERNAL void fuse_graph_svg(const char *path);
/* Tests: behave as if ST_GRAPH=path (NULL: off), forgetting the graphs written so far. */
ST_INTERNAL void fuse_graph_set_auto(const char *path);
/* ---- end graph.c ---- */

/* ---- plan cache (plan_cache.c; docs/fusion.md "Plan cache") ----
 * A flushed region's structure (every node's op, dtype, shape, device, non-scalar arguments, its
 * sources as region positions or external inputs numbered by first appearance, targets, the
 * fusion flags) serialized into bytes is the key; the value is what running the region needs
 * without planning: per group in execution order its compiled kernel, output positions and how
 * each buffer slot binds. User scalars (CONST values, IOTA start/step, RAND seed/offset/lo/hi)
 * are not in the key: they are parameter slots refreshed from the new region on a hit
 * (fuse_user_scalar), so partition and lowering must never read those values otherwise.
 * Groups the interpreter tier runs keep the region positions they evaluate (fuse_inode), so
 * small regions are cached too; an entry run st_rt.jit_hot times (ST_JIT_HOT) compiles its
 * interpreted groups that have a kernel (fuse_pentry_hot). ST_PLAN_CACHE=0 switches the cache off. */
enum {
    FUSE_PCACHE_MAX = 512,               /* entries kept; the least recently used is evicted ... */
    FUSE_PCACHE_BYTES = 64 << 20         /* ... also while the entries hold more than this */
};

/* A node an interpreted group evaluates: keep = it is materialized by the group (its buffer
 * outlives the group), else a temporary; last = the end of one plan group (a member of a
 * horizontal batch): its temporaries are dropped there, as a free node may be evaluated again by
 * the next member; dies = bit k: this node is the last of its plan group to read src[k], a
 * temporary of the group, whose buffer is released once this node is evaluated (a chain of n
 * elementwise ops holds two temporaries at a time, not n). */
typedef struct fuse_inode { int32_t pos; uint8_t keep, last, dies; } fuse_inode;

typedef struct fuse_pgroup {
    fuse_launch L;                 /* owned: kernel IR (CUDA launch geometry), ints, flts, name;
                                    * L.buf_node is meaningless here (bind says it) */
    st_kernel_fn fn;               /* CPU kernel; NULL on a CUDA device */
    exec_cuda_fn *cuda;            /* CUDA groups: the resolved kernel (owned); NULL otherwise */
    int dev, kind;                 /* resolved device; fuse_group_kind */
    int interp;                    /* run by the interpreter tier: nodes[] says what it evaluates */
    int lowered;                   /* L, bind and scal are the group's kernel (an interpreted group
                                    * without one can never compile) */
    fuse_inode *nodes;             /* interp: the nodes evaluated, in order (owned) */
    int nnodes;
    int nplan;                     /* interp: plan groups it stands for (interp_groups counts them) */
    int32_t *outs;                 /* region positions the group writes */
    int nouts;
    int32_t anchor;                /* region position of the anchor (in-place SETVIEW), -1 */
    int32_t bind[KIR_MAX_BUFS];    /* >= 0: region position; < 0: external input -1 - bind */
    kir_ins *scal;                 /* the user-scalar KI_IPARAM/KI_FPARAM instructions (slot: imm,
                                    * node position: b), refreshed on every run */
    int nscal;
} fuse_pgroup;

typedef struct fuse_pentry {
    uint64_t hash;
    uint8_t *key;                  /* owned copy of the key bytes (a hit compares them all) */
    size_t keylen;
    fuse_pgroup *groups;           /* in execution order */
    int ngroups;
    int32_t *tag;                  /* node->tag per region position, as the planning left it */
    int n;
    int64_t work;                  /* elements its kernels iterate (the tier decision: ST_JIT_MIN) */
    uint64_t runs;                 /* times run (the first is the run that planned it) */
    int ncompilable;               /* interpreted groups with a kernel: compiled when hot */
    struct jit_async *job;         /* their compile running in the background (ST_JIT_ASYNC), or NULL */
    int *job_groups;               /* the groups it compiles, in its sources' order */
    int njob;
    int job_failed;                /* a background compile failed: they stay interpreted */
    size_t bytes;                  /* memory it holds (fuse_pcache_stats, FUSE_PCACHE_BYTES) */
    struct fuse_pentry *lru_prev, *lru_next, *chain;
} fuse_pentry;

/* One region's key, built per flush (the caller owns it; fuse_pkey_free releases it). */
typedef struct fuse_pkey {
    sbuf b;                        /* the key's bytes */
    uint64_t hash;
    st_node **ext;                 /* external inputs (realized BUFFER nodes) by first appearance */
    int next, capext;
    uint8_t *rowval;               /* per region position: a row value (fuse_row_value), the nodes
                                    * whose kept bit is in the key */
    int caprowval;
} fuse_pkey;

ST_INTERNAL bool fuse_pcache_enabled(void);            /* ST_PLAN_CACHE (default on), read once */
ST_INTERNAL void fuse_pcache_set_enabled(bool on);     /* overrides ST_PLAN_CACHE (tests, benches) */
ST_INTERNAL st_status fuse_pkey_build(const st_region *r, fuse_pkey *k);
ST_INTERNAL void fuse_pkey_free(fuse_pkey *k);
/* The entry for key k (made most recently used), or NULL. */
ST_INTERNAL fuse_pentry *fuse_pcache_find(const fuse_pkey *k);
/* The entry of a planned region: takes ownership of the launch of every group that was lowered
 * (launch[g] left zeroed); fns[g] is group g's CPU kernel, NULL for CUDA groups and for groups
 * the interpreter runs (interp[g] set: their node lists are copied from the plan). work: the
 * region's work. NULL on OOM (the launches not yet moved stay with the caller). */
ST_INTERNAL fuse_pentry *fuse_pentry_new(fuse_plan *p, fuse_launch *launch, st_kernel_fn *fns,
                                         const uint8_t *interp, const fuse_pkey *k, int64_t work);
/* Group g of e now runs compiled kernel fn: its node list is dropped (and, as for every CPU group
 * with a kernel, the IR: only the argument counts are read at launch). */
ST_INTERNAL void fuse_pgroup_compiled(fuse_pentry *e, int g, st_kernel_fn fn);
/* Adds e under k (the cache owns e from now on; the least recently used entry beyond
 * FUSE_PCACHE_MAX is freed). Returns ST_OK or ST_ERR_OOM (e is then freed). */
ST_INTERNAL st_status fuse_pcache_insert(fuse_pentry *e, const fuse_pkey *k);
ST_INTERNAL void fuse_pentry_free(fuse_pentry *e);
/* Rewrites every user-scalar slot of e from region r (same key). */
ST_INTERNAL void fuse_pentry_refresh(fuse_pentry *e, const st_region *r);
ST_INTERNAL void fuse_pcache_shutdown(void);           /* frees every entry (st_shutdown) */
/* Entries cached now and the bytes they hold (st_stats). */
ST_INTERNAL void fuse_pcache_stats(uint64_t *entries, uint64_t *bytes);
/* lower.c: does IOTA n lower in i64 arithmetic (integer start and step within 2^52; part of
 * the plan key)? */
ST_INTERNAL bool fuse_iota_integral(const st_node *n);
/* lower.c: true when parameter instruction `in` is a user scalar; its value in r now. */
ST_INTERNAL bool fuse_user_scalar(const kir_ins *in, const st_region *r, int64_t *iv, double *fv);

#endif
