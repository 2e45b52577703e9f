/*
 * plan_cache.c — the plan cache: a flushed region's structure -> its launches, so a repeated
 * training step neither partitions, lowers, renders nor hashes kernel sources (a CUDA group's
 * function is resolved at its first launch and kept in the group: exec_cuda.c).
 *
 * Key: the region serialized into bytes (fuse_pkey_build): the fusion flags, then per node in
 * region order its op, dtype, shape, flags (target), resolved device, the arguments partition and
 * lowering read (view strides/offset/mask, reduced axes, gather/scatter dim, iota axis, the
 * in-place test of a SETVIEW) and its sources: a region position, or an external input (a
 * realized BUFFER node) numbered by first appearance, with its dtype, shape and device the first
 * time. User scalars (CONST values, IOTA start/step, RAND seed/offset/lo/hi) and view offsets
 * (only whether one is 0 is keyed) are left out: they are kernel parameters, refreshed from the
 * new region on a hit (fuse_pentry_refresh). A matmul's operand offsets (fuse_mm_operand) are
 * keyed. Sizes and strides are in the key, so every other parameter is constant per entry.
 *
 * Value (fuse_pentry): per group in execution order its launch (a compiled kernel, or the node
 * list the interpreter tier evaluates, with the kernel kept when there is one so that a hot entry
 * can compile it: exec.c compile_if_hot). A CPU group with a kernel keeps no IR. The cache is
 * bounded by entries and by bytes (FUSE_PCACHE_MAX, FUSE_PCACHE_BYTES), least recently used out.
 *
 * Invariants: a hit requires the whole key to compare equal (the 64-bit hash only picks the
 * chain), so a collision costs a miss, never a wrong plan; two regions with equal keys are
 * planned and lowered identically, which holds as long as partition.c and lower.c read nothing
 * of a node beyond what the key holds. refcnt is read once, by the cost model's decision
 * (partition.c store_kept_rows): whether a row value (fuse_row_value: a reduction or elementwise
 * ops of one at its element count) is kept alive outside the region (fuse_kept). That bit is
 * in the key for row values only; any other node's handles never change its plan. Entries
 * hold function pointers into the JIT's loaded objects, valid until jit_shutdown: st_shutdown
 * frees this cache first.
 */
#include "fuser/fuser.h"
#include "jit/compile.h"

#include <stdlib.h>

#define NBUCKETS 1024   /* power of two, > FUSE_PCACHE_MAX */

static struct {
    fuse_pentry *bucket[NBUCKETS];
    fuse_pentry *mru, *lru;     /* doubly linked, most recently used first */
    int n;
    size_t bytes;               /* what the entries hold (entry_bytes) */
    int enabled;                /* -1: not read yet */
} C = {.enabled = -1};

bool fuse_pcache_enabled(void) {
    if (C.enabled < 0) {
        const char *e = base_env(SET_PLAN_CACHE);
        C.enabled = !(e && e[0] == '0' && e[1] == '\0');
    }
    return C.enabled;
}

void fuse_pcache_set_enabled(bool on) { C.enabled = on; }

/* ---- key ---- */
static bool put(fuse_pkey *k, const void *p, size_t n) {
    sbuf_put(&k->b, p, n);
    return !k->b.oom;
}
static bool put_i64(fuse_pkey *k, int64_t v) { return put(k, &v, sizeof v); }

/* The external input index of BUFFER node x (appended, with its layout, when new). x->tag (unused
 * by the fuser on realized nodes) remembers the index; a stale tag fails the ext[] check. */
static bool put_ext(fuse_pkey *k, st_node *x) {
    int i = x->tag >= 0 && x->tag < k->next && k->ext[x->tag] == x ? x->tag : k->next;
    if (!put_i64(k, -1 - (int64_t)i)) return false;
    if (i < k->next) return true;
    x->tag = i;
    if (BASE_GROW(k->ext, k->capext, k->next + 1, 16) != ST_OK) return false;
    k->ext[k->next++] = x;
    int64_t head[3] = {x->dtype, x->ndim, x->buf ? x->buf->device : -1};
    return put(k, head, sizeof head) && put(k, x->shape, (size_t)x->ndim * sizeof x->shape[0]);
}

/* The arguments of x that partition and lowering read (never user scalars). */
static bool put_args(fuse_pkey *k, const st_node *x) {
    const st_node_arg *a = &x->arg;
    switch ((st_op)x->op) {
    case ST_OP_CONST: case ST_OP_RAND_U: case ST_OP_RAND_N: case ST_OP_RAND_INT:
        return true;   /* scalars only: parameters */
    case ST_OP_MATMUL: { /* an operand offset that no VIEW of the region gives (lower.c mm_offset)
                          * is a constant of the plan */
        int64_t off[2];
        for (int i = 0; i < 2; i++) {
            st_node *base, *ov;
            int64_t str[ST_MAX_DIMS];
            fuse_mm_operand(x->src[i], &base, str, &off[i], &ov);
            if (ov && fuse_in_region(ov)) off[i] = -1;   /* the view's P_VOFF: keyed as 0 or not */
        }
        return put(k, off, sizeof off);
    }
    case ST_OP_ATTN: { /* the operand offsets as a matmul's (-2: no mask), causal and whether there
                        * is dropout (the scale and the dropout's numbers are parameters, refreshed
                        * on a hit) */
        int64_t off[ST_NODE_SRCS + 1];
        for (int i = 0; i < ST_NODE_SRCS; i++) {
            st_node *base, *ov;
            int64_t str[ST_MAX_DIMS];
            if (i >= x->nsrc) {
                off[i] = -2;
                continue;
            }
            fuse_attn_operand(x->src[i], &base, str, &off[i], &ov);
            if (ov && fuse_in_region(ov)) off[i] = -1;
        }
        off[ST_NODE_SRCS] = a->attn.causal + 2 * (a->attn.drop > 0);
        return put(k, off, sizeof off);
    }
    case ST_OP_IOTA: return put_i64(k, a->iota.axis * 2 + fuse_iota_integral(x));
    case ST_OP_GATHER: case ST_OP_SCATTER_ADD: return put_i64(k, a->axis.dim);
    case ST_OP_VIEW: case ST_OP_SETVIEW: {
        const st_node *base = x->src[0];
        int nd = x->op == ST_OP_SETVIEW ? x->src[1]->ndim : x->ndim;
        /* lower.c's in-place SETVIEW test: the base buffer is held by this SETVIEW alone */
        int inplace = x->op == ST_OP_SETVIEW && base->op == ST_OP_BUFFER && base->refcnt == 1 && base->buf &&
                      base->buf->refcnt == 1;
        /* the offset itself is a parameter (P_VOFF, refreshed on a hit): a batch sliced from a
         * dataset at a new offset each step reuses the plan; whether it is 0 is structure */
        int64_t head[3] = {a->view.offset != 0, a->view.has_mask, inplace};
        if (!put(k, head, sizeof head) || !put(k, a->view.strides, (size_t)nd * sizeof a->view.strides[0]))
            return false;
        return !a->view.has_mask || (put(k, a->view.lo, (size_t)nd * sizeof a->view.lo[0]) &&
                                     put(k, a->view.hi, (size_t)nd * sizeof a->view.hi[0]));
    }
    default:
        if (st_op_is_elementwise((st_op)x->op)) return true;
        if (st_ops[x->op].kind == OPK_REDUCE) return put_i64(k, a->red.axes);
        return put(k, a, sizeof *a);   /* an op not listed here: all of it (a miss, never a wrong hit) */
    }
}

st_status fuse_pkey_build(const st_region *r, fuse_pkey *k) {
    k->b.n = 0;
    k->next = 0;
    if (BASE_GROW(k->rowval, k->caprowval, r->n, r->n) != ST_OK) return st_last_status();
    uint8_t *rowval = k->rowval;
    int64_t head[3] = {0x706c616e32LL /* "plan2" */, fuse_flags(), r->n};
    bool ok = put(k, head, sizeof head);
    for (int i = 0; i < r->n && ok; i++) {
        st_node *x = r->nodes[i];
        rowval[i] = fuse_row_value(x, rowval);
        int64_t kept = rowval[i] && fuse_kept(x) ? 0x100 : 0;
        int64_t h[6] = {x->op, x->dtype, x->ndim, x->nsrc, (x->flags & (NODE_TARGET | NODE_WEAK | NODE_STORE)) | kept, x->rdev};
        ok = put(k, h, sizeof h) && put(k, x->shape, (size_t)x->ndim * sizeof x->shape[0]) && put_args(k, x);
        for (int s = 0; s < x->nsrc && ok; s++)
            ok = fuse_in_region(x->src[s]) ? put_i64(k, x->src[s]->pos) : put_ext(k, x->src[s]);
    }
    if (!ok) return st_last_status();
    base_hash h = base_hash128(k->b.s, k->b.n, (base_hash){{0, 0}});
    k->hash = h.h[0] ^ h.h[1];
    return ST_OK;
}

void fuse_pkey_free(fuse_pkey *k) {
    sbuf_free(&k->b);
    st_free(k->ext);
    st_free(k->rowval);
    memset(k, 0, sizeof *k);
}

/* ---- entries ---- */
void fuse_pentry_free(fuse_pentry *e) {
    if (!e) return;
    jit_async_free(e->job);   /* a compile still running is stopped */
    st_free(e->job_groups);
    for (int g = 0; g < e->ngroups; g++) {
        fuse_launch_free(&e->groups[g].L);
        st_free(e->groups[g].outs);
        st_free(e->groups[g].scal);
        st_free(e->groups[g].nodes);
        exec_cuda_fn_free(e->groups[g].cuda);
    }
    st_free(e->groups);
    st_free(e->tag);
    st_free(e->key);
    st_free(e);
}

/* The binding of slot node x: its region position, or its external input index (put_ext). */
static int32_t bind_of(const st_node *x, const fuse_pkey *k) {
    if (fuse_in_region(x)) return x->pos;
    ST_ASSERT(x->tag >= 0 && x->tag < k->next && k->ext[x->tag] == x);
    return -1 - x->tag;
}

/* Collects the nodes an interpreted group evaluates (fuse_group_nodes, per plan group). */
typedef struct inode_walk {
    fuse_pgroup *pg;
    const fuse_plan *p;
    int g, cap;
} inode_walk;

static st_status add_inode(st_node *n, void *ud) {
    inode_walk *w = ud;
    fuse_pgroup *pg = w->pg;
    if (BASE_GROW(pg->nodes, w->cap, pg->nnodes + 1, 16) != ST_OK) return st_last_status();
    pg->nodes[pg->nnodes++] = (fuse_inode){n->pos, (uint8_t)(w->p->mat[n->pos] && n->tag == w->g), 0, 0};
    return ST_OK;
}

/* The index in nodes[a, b) (sorted by position) of the node at position pos, or -1. */
static int inode_find(const fuse_inode *nodes, int a, int b, int32_t pos) {
    while (a < b) {
        int m = a + (b - a) / 2;
        if (nodes[m].pos == pos) return m;
        if (nodes[m].pos < pos) a = m + 1;
        else b = m;
    }
    return -1;
}

/* Marks in nodes[a, b) (one plan group, in evaluation order) the last reader of each temporary:
 * walked backwards, the first reader met is the last. */
static bool mark_dies(fuse_pgroup *pg, const st_region *r, int a, int b) {
    uint8_t *read = st_calloc((size_t)(b - a) + 1, 1);
    if (!read) return false;
    for (int i = b - 1; i >= a; i--) {
        const st_node *n = r->nodes[pg->nodes[i].pos];
        for (int k = 0; k < n->nsrc; k++) {
            int j = fuse_in_region(n->src[k]) ? inode_find(pg->nodes, a, i, n->src[k]->pos) : -1;
            if (j < 0 || pg->nodes[j].keep || read[j - a]) continue;
            read[j - a] = 1;
            pg->nodes[i].dies |= (uint8_t)(1u << k);
        }
    }
    st_free(read);
    return true;
}

static bool collect_inodes(fuse_pgroup *pg, fuse_plan *p, int g) {
    const fuse_group *G = &p->groups[g];
    inode_walk w = {pg, p, g, 0};
    int n = G->nmembers ? G->nmembers : 1;   /* FG_HORIZONTAL: its members, one by one */
    for (int i = 0; i < n; i++) {
        int a = pg->nnodes;
        w.g = G->nmembers ? G->members[i] : g;
        if (fuse_group_nodes(p, w.g, add_inode, &w) != ST_OK || !mark_dies(pg, p->r, a, pg->nnodes)) return false;
        if (pg->nnodes) pg->nodes[pg->nnodes - 1].last = 1;
    }
    pg->nplan = n;
    return true;
}

/* A CPU group with a kernel reads only its IR's argument counts at launch: the instructions go. */
static void drop_ir(fuse_pgroup *pg) {
    if (!pg->fn || dev_target_of(pg->dev) != DEV_TARGET_C) return;
    st_free(pg->L.k.ins);
    pg->L.k.ins = NULL;
    pg->L.k.n = pg->L.k.cap = 0;
}

static bool fill_group(fuse_pgroup *pg, fuse_plan *p, int g, fuse_launch *L, st_kernel_fn fn, int interp,
                       const fuse_pkey *k) {
    const fuse_group *G = &p->groups[g];
    pg->fn = fn;
    pg->dev = G->outs[0]->rdev;
    pg->kind = G->kind;
    pg->interp = interp;
    pg->lowered = !G->interp;   /* set by fuse_execute when the lowering failed */
    pg->anchor = G->anchor ? G->anchor->pos : -1;
    pg->nouts = G->nouts;
    if (!(pg->outs = st_malloc((size_t)G->nouts * sizeof *pg->outs))) return false;
    for (int i = 0; i < G->nouts; i++) pg->outs[i] = G->outs[i]->pos;
    if (interp && !collect_inodes(pg, p, g)) return false;
    if (!pg->lowered) return true;
    if (dev_target_of(pg->dev) == DEV_TARGET_CUDA && !(pg->cuda = exec_cuda_fn_new())) return false;
    for (int i = 0; i < L->k.nbufs; i++) pg->bind[i] = bind_of(L->buf_node[i], k);
    int64_t iv;
    double fv;
    for (int pass = 0; pass < 2; pass++) { /* count, then fill */
        int n = 0;
        for (int i = 0; i < L->k.n; i++) {
            const kir_ins *in = &L->k.ins[i];
            if ((in->op != KI_IPARAM && in->op != KI_FPARAM) || !fuse_user_scalar(in, p->r, &iv, &fv)) continue;
            if (pass) pg->scal[n] = *in;
            n++;
        }
        if (!pass && n && !(pg->scal = st_malloc((size_t)n * sizeof *pg->scal))) return false;
        pg->nscal = n;
    }
    pg->L = *L;   /* moved: the entry owns the kernel and its arguments now */
    memset(L, 0, sizeof *L);
    drop_ir(pg);
    return true;
}

/* The bytes entry e holds (an estimate of its allocations). */
static size_t entry_bytes(const fuse_pentry *e) {
    size_t b = sizeof *e + e->keylen + (size_t)e->n * sizeof *e->tag + (size_t)e->ngroups * sizeof *e->groups;
    for (int g = 0; g < e->ngroups; g++) {
        const fuse_pgroup *pg = &e->groups[g];
        b += (size_t)pg->L.k.cap * sizeof *pg->L.k.ins + (size_t)(pg->L.k.nints + pg->L.k.nflts) * 8 +
             (size_t)pg->nouts * sizeof *pg->outs + (size_t)pg->nscal * sizeof *pg->scal +
             (size_t)pg->nnodes * sizeof *pg->nodes;
    }
    return b;
}

fuse_pentry *fuse_pentry_new(fuse_plan *p, fuse_launch *launch, st_kernel_fn *fns, const uint8_t *interp,
                             const fuse_pkey *k, int64_t work) {
    fuse_pentry *e = st_calloc(1, sizeof *e);
    if (!e) return NULL;
    int ng = p->norder, n = p->r->n;   /* horizontal batches stand for their members */
    e->groups = st_calloc((size_t)ng + 1, sizeof *e->groups);
    e->tag = st_malloc(((size_t)n + 1) * sizeof *e->tag);
    if (!e->groups || !e->tag) goto oom;
    for (int i = 0; i < n; i++) e->tag[i] = p->r->nodes[i]->tag;
    e->n = n;
    e->work = work;
    e->runs = 1;
    for (int k2 = 0; k2 < ng; k2++) {
        int g = p->order[k2];
        e->ngroups = k2 + 1;   /* what fuse_pentry_free must look at */
        fuse_pgroup *pg = &e->groups[k2];
        if (!fill_group(pg, p, g, &launch[g], fns[g], interp[g], k)) goto oom;
        e->ncompilable += pg->interp && pg->lowered;
    }
    return e;
oom:
    /* launches already moved are freed with e; the caller frees the rest */
    fuse_pentry_free(e);
    return NULL;
}

void fuse_pgroup_compiled(fuse_pentry *e, int g, st_kernel_fn fn) {
    fuse_pgroup *pg = &e->groups[g];
    ST_ASSERT(pg->interp && pg->lowered && fn);
    pg->fn = fn;
    pg->interp = 0;
    st_free(pg->nodes);
    pg->nodes = NULL;
    pg->nnodes = pg->nplan = 0;
    drop_ir(pg);
    e->ncompilable--;
    size_t b = entry_bytes(e);
    if (e->key) C.bytes = C.bytes - e->bytes + b;   /* cached: the table's total follows */
    e->bytes = b;
}

void fuse_pentry_refresh(fuse_pentry *e, const st_region *r) {
    for (int g = 0; g < e->ngroups; g++) {
        fuse_pgroup *pg = &e->groups[g];
        for (int i = 0; i < pg->nscal; i++) {
            const kir_ins *in = &pg->scal[i];
            int64_t iv = 0;
            double fv = 0;
            fuse_user_scalar(in, r, &iv, &fv);
            if (in->op == KI_IPARAM) pg->L.ints[in->imm] = iv;
            else pg->L.flts[in->imm] = fv;
        }
    }
}

/* ---- the table (chained buckets) and the LRU list ---- */
static void lru_unlink(fuse_pentry *e) {
    if (e->lru_prev) e->lru_prev->lru_next = e->lru_next;
    else C.mru = e->lru_next;
    if (e->lru_next) e->lru_next->lru_prev = e->lru_prev;
    else C.lru = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}
static void lru_push_front(fuse_pentry *e) {
    e->lru_next = C.mru;
    if (C.mru) C.mru->lru_prev = e;
    C.mru = e;
    if (!C.lru) C.lru = e;
}

fuse_pentry *fuse_pcache_find(const fuse_pkey *k) {
    for (fuse_pentry *e = C.bucket[k->hash & (NBUCKETS - 1)]; e; e = e->chain)
        if (e->hash == k->hash && e->keylen == k->b.n && !memcmp(e->key, k->b.s, k->b.n)) {
            if (C.mru != e) {
                lru_unlink(e);
                lru_push_front(e);
            }
            return e;
        }
    return NULL;
}

static void remove_entry(fuse_pentry *e) {
    fuse_pentry **pp = &C.bucket[e->hash & (NBUCKETS - 1)];
    while (*pp != e) pp = &(*pp)->chain;
    *pp = e->chain;
    lru_unlink(e);
    C.n--;
    C.bytes -= e->bytes;
    fuse_pentry_free(e);
}

st_status fuse_pcache_insert(fuse_pentry *e, const fuse_pkey *k) {
    base_on_shutdown(BASE_LEVEL_FUSER, fuse_pcache_shutdown);
    if (!(e->key = st_malloc(k->b.n ? k->b.n : 1))) {
        fuse_pentry_free(e);
        return st_last_status();
    }
    memcpy(e->key, k->b.s, k->b.n);
    e->keylen = k->b.n;
    e->hash = k->hash;
    e->bytes = entry_bytes(e);
    fuse_pentry **b = &C.bucket[e->hash & (NBUCKETS - 1)];
    e->chain = *b;
    *b = e;
    lru_push_front(e);
    C.n++;
    C.bytes += e->bytes;
    while (C.n > FUSE_PCACHE_MAX || (C.bytes > FUSE_PCACHE_BYTES && C.n > 1)) remove_entry(C.lru);
    return ST_OK;
}

void fuse_pcache_stats(uint64_t *entries, uint64_t *bytes) {
    *entries = (uint64_t)C.n;
    *bytes = C.bytes;
}

void fuse_pcache_shutdown(void) {
    /* A background compile still running (ST_JIT_ASYNC) is waited for, bounded by
     * ST_COMPILE_TIMEOUT and an interrupt, so that its kernels reach the disk cache and the next
     * run of the program finds them; the kernels' installation does not matter any more. One still
     * waiting for a compiler (jit/cache.c: a one-time flush's, whose plan never ran again) is
     * started and waited for too, one after the other: the end of a program is where the
     * compilers no longer slow its work. */
    for (fuse_pentry *e = C.mru; e; e = e->lru_next) {
        if (!e->job) continue;
        st_kernel_fn *fns = st_calloc((size_t)e->njob, sizeof *fns);
        st_status s;
        if (fns) (void)jit_async_poll(e->job, 1, fns, &s);
        st_free(fns);
        st_clear_error();
    }
    st_rt.interrupted = 0;
    while (C.lru) remove_entry(C.lru);
}
