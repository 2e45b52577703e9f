/*
 * partition.c — cuts a flushed region into fusion groups and decides what is materialized.
 *
 * One pass over the region in reverse topological order (consumers before producers), so when a
 * node is decided every consumer already belongs to a group:
 *   - free nodes (VIEWs and sources that are not targets and not needed as buffers) belong to no
 *     group; each group reading them evaluates them inline; so does a CAST that every matmul
 *     reading it folds into its operand loads (a prologue: mm_cast_folded);
 *   - an anchor (REDUCE, MATMUL, SCATTER_ADD, SETVIEW) starts its own group, except a reduction
 *     whose consumers are all in one pointwise group over as many elements as the reduction
 *     produces and reach it only through elementwise ops and flat reshapes: that group becomes
 *     the reduction's epilogue (`x:sum(2):exp()` is one kernel), and likewise for a matmul whose
 *     consumers are all in one pointwise group of its shape (`gelu(x@w + b)`: one kernel, the
 *     epilogue runs where the GEMM stores each element); and a reduction whose consumers
 *     all lie in one group over the same rows (a pointwise group of the reduction's input shape,
 *     or a reduce group with the same input shape and axes) and read it only through "row
 *     broadcasts" (a view that maps every element of a row to that row's result): it is stitched
 *     into that group, which computes its rows one after another (softmax, layernorm: 1 kernel),
 *     provided nothing the group evaluates downstream reads it at another row (a GATHER's data,
 *     a transpose: that row is not computed yet). It is materialized only if something needs
 *     its buffer;
 *   - any other node whose consumers all lie in one group (and that is not a target and not
 *     needed as a buffer) is inlined into it; otherwise it is materialized and joins a compatible
 *     group (same pointwise domain, or the input domain of a reduction, which stores it while
 *     reducing) when that creates no cycle, else it starts a new pointwise group.
 * A node that would sit deeper than FUSE_MAX_DEPTH levels into its group's expressions, or take
 * the group's body past FUSE_MAX_WORK units of code (fuse_node_work), is not inlined there but
 * stored by another group (eval_depth, work_fits), and the nodes of `cut` each get a group
 * of their own (the executor's re-plan of a group that had no kernel: fuser/exec.c).
 * Then the cost model's one decision (store_kept_rows, cost.c): row values kept alive outside the
 * region are stored by the reduce group computing their rows when recomputing them would cost more.
 * Invariant: the group graph stays acyclic — a materialized node joins group g only if no path
 * leaves it through another group and comes back into g, where a path entering a group goes on
 * from every node of it (a group may hold nodes no path connects). Then groups are ordered
 * topologically.
 */
#include "fuser/fuser.h"

const char *const fuse_kind_names[FG_KIND_COUNT] = {
    [FG_POINTWISE] = "pointwise", [FG_REDUCE] = "reduce", [FG_MATMUL] = "matmul", [FG_SCATTER] = "scatter_add",
    [FG_SETVIEW] = "setview", [FG_ATTN] = "attention", [FG_HORIZONTAL] = "horizontal"};

static bool is_anchor(const st_node *n) {
    st_op_kind k = st_ops[n->op].kind;
    return k == OPK_REDUCE || k == OPK_MATMUL || k == OPK_ATTN || n->op == ST_OP_SCATTER_ADD ||
           n->op == ST_OP_SETVIEW;
}
static bool is_free_kind(const st_node *n) {
    return n->op == ST_OP_VIEW || (st_ops[n->op].kind == OPK_SOURCE && n->op != ST_OP_BUFFER);
}
static bool same_shape(int nd, const int64_t *a, int nd2, const int64_t *b) {
    if (nd != nd2) return false;
    for (int i = 0; i < nd; i++)
        if (a[i] != b[i]) return false;
    return true;
}

bool fuse_view_is_flat(const st_node *v) {
    if (v->op != ST_OP_VIEW) return false;
    const st_view_arg *va = &v->arg.view;
    if (va->has_mask || va->offset != 0 || v->numel != v->src[0]->numel) return false;
    int64_t cs[ST_MAX_DIMS];
    st_contig_strides(v->ndim, v->shape, cs);
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] != 1 && va->strides[d] != cs[d]) return false;
    return true;
}

bool fuse_mm_cast_ok(st_dtype to, st_dtype from) {
    return (to == ST_F32 || to == ST_F64) &&
           (from == ST_F16 || from == ST_BF16 || from == ST_F32 || from == ST_F64);
}

/* A CAST the GEMM can apply while it packs its operand (FUSE_MM_PROLOGUE): not a target (then it
 * is stored anyway), between float types the packers convert. The view arithmetic is the same
 * on both sides of it (same shape, so the same contiguous layout). */
static bool mm_cast_foldable(const st_node *n) {
    return n->op == ST_OP_CAST && !(n->flags & NODE_TARGET) && fuse_on(FUSE_MM_PROLOGUE) &&
           fuse_mm_cast_ok(n->dtype, n->src[0]->dtype);
}

/* The chain of views and one CAST under a matmul operand folded into single strides per dim:
 * flat views anywhere, one strided view (seen through flat views keeping src's shape). The rule
 * without FUSE_MM_IMPLICIT (and for integer matmuls). */
static void mm_operand_strided(st_node *src, bool casts, st_node **base, int64_t *strides, int64_t *offset,
                               st_node **offview) {
    st_node *n = src, *ov = NULL;
    int64_t off = 0;
    st_contig_strides(src->ndim, src->shape, strides);
    bool ident = true; /* the mapping is contiguous over n's shape, which equals src's */
    bool cast = false; /* one CAST folded (two in a row round twice: the inner one is stored) */
    for (;;) {
        if (casts && !cast && mm_cast_foldable(n)) {
            cast = true;
            n = n->src[0];
            continue;
        }
        if (n->op != ST_OP_VIEW || (n->flags & NODE_TARGET) || n->arg.view.has_mask) break;
        if (fuse_view_is_flat(n)) {
            ident = ident && same_shape(n->src[0]->ndim, n->src[0]->shape, src->ndim, src->shape);
            n = n->src[0];
            continue;
        }
        if (!ident) break;
        for (int d = 0; d < src->ndim; d++) strides[d] = n->arg.view.strides[d];
        off = n->arg.view.offset;
        ov = n;
        ident = false;
        n = n->src[0];
    }
    *base = n;
    *offset = off;
    *offview = ov;
}

/* An operand dim as sub-dims (size, stride), outermost first: flat strides of the layout of the
 * node the chain has reached. */
typedef struct mm_subs {
    int n;
    int64_t size[ST_MAX_DIMS], stride[ST_MAX_DIMS];
} mm_subs;

static bool mm_subs_push(mm_subs *o, int64_t s, int64_t t) {
    if (o->n && o->stride[o->n - 1] == t * s) { /* merges with the one before */
        o->size[o->n - 1] *= s;
        o->stride[o->n - 1] = t;
        return true;
    }
    if (o->n == ST_MAX_DIMS) return false;
    o->size[o->n] = s;
    o->stride[o->n++] = t;
    return true;
}

/* Re-expresses every sub-dim, a flat stride of v's contiguous layout, over v's dims (strides in
 * its source's layout): sub-dim (s, t) must be a run of v's dims, t the contiguous stride of the
 * innermost one and s their sizes' product (stride-0 sub-dims, broadcasts, stay). */
static bool mm_subs_through(int nd, mm_subs *subs, const st_node *v) {
    int64_t cv[ST_MAX_DIMS];
    st_contig_strides(v->ndim, v->shape, cv);
    for (int d = 0; d < nd; d++) {
        mm_subs o = {0};
        for (int q = 0; q < subs[d].n; q++) {
            int64_t s = subs[d].size[q], t = subs[d].stride[q];
            if (t == 0) {
                if (!mm_subs_push(&o, s, 0)) return false;
                continue;
            }
            int e = v->ndim - 1;
            while (e >= 0 && !(v->shape[e] > 1 && cv[e] == t)) e--;
            int64_t have = 1, rs[ST_MAX_DIMS], rt[ST_MAX_DIMS];
            int nr = 0;
            for (; e >= 0 && have < s; e--) {
                if (v->shape[e] == 1) continue;
                rs[nr] = v->shape[e];
                rt[nr++] = v->arg.view.strides[e];
                have *= v->shape[e];
            }
            if (nr == 0 || have != s) return false;
            for (int r = nr - 1; r >= 0; r--)
                if (!mm_subs_push(&o, rs[r], rt[r])) return false;
        }
        subs[d] = o;
    }
    return true;
}

/* Are the sub-dims a GEMM operand (batch dims one stride, the row and column dims up to
 * max_sub: KIR_MM_SUB, or 1 for attention's operands)? Then fills strides and sp. */
static bool mm_subs_fit(int nd, const mm_subs *subs, int max_sub, int64_t *strides, fuse_mm_split *sp) {
    memset(sp, 0, sizeof *sp);
    for (int d = 0; d < nd; d++) {
        int m = d - (nd - 2);   /* 0: the row dim, 1: the column dim, < 0: a batch dim */
        const mm_subs *u = &subs[d];
        strides[d] = u->n == 1 ? u->stride[0] : 0;
        if (u->n <= 1) continue;
        if (m < 0 || u->n > max_sub) return false;
        sp->sub[m] = u->n;
        memcpy(sp->size[m], u->size, (size_t)u->n * sizeof u->size[0]);
        memcpy(sp->stride[m], u->stride, (size_t)u->n * sizeof u->stride[0]);
    }
    return true;
}

/* The operand walk of a matmul (attn false: one CAST may fold, split dims allowed) or of an
 * attention (attn true: views only, every dim one stride). */
static void operand_walk(st_node *src, bool attn, st_node **base, int64_t *strides, int64_t *offset,
                         st_node **offview, fuse_mm_split *split) {
    const int max_sub = attn ? 1 : KIR_MM_SUB;
    fuse_mm_split sp;
    memset(&sp, 0, sizeof sp);
    st_node *n = src, *ov = NULL;
    int64_t off = 0;
    if (!fuse_on(FUSE_MM_IMPLICIT) || !st_is_float(src->dtype)) {
        mm_operand_strided(src, !attn, &n, strides, &off, &ov);
    } else {
        /* Any chain of views (and one CAST) whose composition gives each dim a run of strides: a
         * strided view reshaped, transposed, reshaped again (a convolution's columns, their
         * transpose, a batch folded into rows). Only the innermost strided view may have an
         * offset (its P_VOFF). The last point where the operand fits the GEMM is kept. */
        mm_subs subs[ST_MAX_DIMS];
        int nd = src->ndim;
        int64_t cs[ST_MAX_DIMS];
        st_contig_strides(nd, src->shape, cs);
        for (int d = 0; d < nd; d++) {
            subs[d].n = src->shape[d] != 1;
            subs[d].size[0] = src->shape[d];
            subs[d].stride[0] = cs[d];
        }
        mm_subs_fit(nd, subs, max_sub, strides, &sp);   /* src itself: contiguous */
        bool cast = false;
        st_node *c = src, *lastv = NULL;   /* lastv: the innermost strided view passed */
        for (;;) {
            if (!attn && !cast && mm_cast_foldable(c)) {
                cast = true;
            } else if (c->op != ST_OP_VIEW || (c->flags & NODE_TARGET) || c->arg.view.has_mask) {
                break;
            } else if (!fuse_view_is_flat(c)) {   /* flat views keep every flat offset */
                if (lastv && lastv->arg.view.offset != 0) break;   /* an outer offset would move */
                if (!mm_subs_through(nd, subs, c)) break;
                lastv = c;
            }
            c = c->src[0];
            int64_t str2[ST_MAX_DIMS];
            fuse_mm_split sp2;
            if (mm_subs_fit(nd, subs, max_sub, str2, &sp2)) {   /* the GEMM can read c: the base so far */
                memcpy(strides, str2, (size_t)nd * sizeof str2[0]);
                sp = sp2;
                n = c;
                ov = lastv;
                off = lastv ? lastv->arg.view.offset : 0;
            }
        }
    }
    if (!fuse_on(FUSE_MM_PROLOGUE) && n != src && fuse_in_region(n)) {
        /* prologue fusion off: a view of a computed value is materialized contiguous first */
        st_contig_strides(src->ndim, src->shape, strides);
        n = src;
        off = 0;
        ov = NULL;
        memset(&sp, 0, sizeof sp);
    }
    *base = n;
    *offset = off;
    if (offview) *offview = ov;
    if (split) *split = sp;
}

void fuse_mm_operand_split(st_node *src, st_node **base, int64_t *strides, int64_t *offset, st_node **offview,
                           fuse_mm_split *split) {
    operand_walk(src, false, base, strides, offset, offview, split);
}

void fuse_mm_operand(st_node *src, st_node **base, int64_t *strides, int64_t *offset, st_node **offview) {
    fuse_mm_operand_split(src, base, strides, offset, offview, NULL);
}

void fuse_attn_operand(st_node *src, st_node **base, int64_t *strides, int64_t *offset, st_node **offview) {
    operand_walk(src, true, base, strides, offset, offview, NULL);
}

/* An anchor's operand as a strided base (a matmul's two, an attention's three). */
static void anchor_operand(st_node *x, int i, st_node **base, int64_t *strides, int64_t *offset) {
    if (x->op == ST_OP_ATTN) fuse_attn_operand(x->src[i], base, strides, offset, NULL);
    else fuse_mm_operand(x->src[i], base, strides, offset, NULL);
}

/* ---- groups ---- */
static int new_group(fuse_plan *p, fuse_group_kind kind, st_node *anchor, const st_node *dom) {
    if (BASE_GROW(p->groups, p->capgroups, p->ngroups + 1, 16) != ST_OK) return -1;
    fuse_group *g = &p->groups[p->ngroups];
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->anchor = anchor;
    g->ndim = dom->ndim;
    memcpy(g->shape, dom->shape, sizeof g->shape);
    return p->ngroups++;
}

static int add_out(fuse_plan *p, int gi, st_node *n, int side) {
    fuse_group *g = &p->groups[gi];
    int capside = g->capouts;
    if (BASE_GROW(g->out_side, capside, g->nouts + 1, 4) != ST_OK ||
        BASE_GROW(g->outs, g->capouts, g->nouts + 1, 4) != ST_OK)
        return -1;
    g->outs[g->nouts] = n;
    g->out_side[g->nouts++] = (uint8_t)side;
    n->tag = gi;
    p->mat[n->pos] = 1;
    return 0;
}

static int combine(int s, int t) {
    if (t == -1) return s;
    if (s == -1) return t;
    return s == t ? s : -2;
}
/* The groups that evaluate x's consumers: -1 none, g, or -2 for several. */
static int consumer_summary(const fuse_plan *p, const st_node *x) {
    int s = -1;
    for (int k = p->cons_off[x->pos]; k < p->cons_off[x->pos + 1]; k++) {
        const st_node *c = p->r->nodes[p->cons[k]];
        s = combine(s, fuse_is_free(p, c) ? p->cg[c->pos] : c->tag);
    }
    return s;
}

/* How deep in group g's expressions x would be evaluated: 1 + the deepest consumer g evaluates
 * by recursing into its sources (its inlined or stored nodes and the free nodes it reads; an
 * anchor starts its own evaluation: a reduction's phase, the GEMM's epilogue). Lowering recurses
 * once per level (fuser/lower.c ev), so no group holds a node deeper than FUSE_MAX_DEPTH. */
static int eval_depth(const fuse_plan *p, const st_node *x, int g) {
    int d = 0;
    for (int k = p->cons_off[x->pos]; k < p->cons_off[x->pos + 1]; k++) {
        const st_node *c = p->r->nodes[p->cons[k]];
        bool in_g = fuse_is_free(p, c) ? (g < 0 || p->cg[c->pos] == g || p->cg[c->pos] == -2) : c->tag == g;
        if (in_g && !is_anchor(c) && p->depth[c->pos] > d) d = p->depth[c->pos];
    }
    return d + 1;
}

/* ---- DFS helpers over consumers ---- */
/* The stack is the plan's (p->dfs: scratch of this flush, freed with the plan). */
static int dfs_push(fuse_plan *p, int *top, int pos, int left) {
    if (BASE_GROW(p->dfs, p->dfs_cap, *top + 1, 256) != ST_OK) return -1;
    p->dfs[(*top)++] = (fuse_dfs_ent){pos, left};
    return 0;
}

/* Can reduction (or matmul) x become the head of pointwise group g's epilogue? Every path from
 * x must go through elementwise ops of g or free flat reshapes evaluated only by g, so g reads x
 * at the very flat index x produces. Past a value g stores, other groups (and the free views
 * they evaluate: layernorm's rstd broadcast to the normalization) load it. */
static bool epilogue_ok(fuse_plan *p, const st_node *x, int g) {
    uint32_t st = ++p->stamp_now;
    int top = 0;
    if (dfs_push(p, &top, x->pos, 0)) return false;
    while (top) {
        int pos = p->dfs[--top].pos;
        const st_node *y = p->r->nodes[pos];
        for (int k = p->cons_off[pos]; k < p->cons_off[pos + 1]; k++) {
            const st_node *c = p->r->nodes[p->cons[k]];
            if (p->stamp[c->pos] == st) continue;
            p->stamp[c->pos] = st;
            if (fuse_is_free(p, c)) {
                if (p->cg[c->pos] != g && y != x && p->mat[y->pos]) continue; /* loads y */
                if (p->cg[c->pos] != g || !fuse_view_is_flat(c)) return false;
            } else if (c->tag != g) {
                if (y == x || !p->mat[y->pos]) return false; /* others must load y */
                continue;
            } else if (!st_op_is_elementwise(c->op)) {
                return false;
            }
            if (dfs_push(p, &top, c->pos, 0)) return false;
        }
    }
    return true;
}

/* Is view c (over a node of reduction x's shape) a row broadcast: input shape, and each element
 * of row o reads element o of x? */
static bool row_broadcast(const st_node *c, const st_node *x) {
    const st_node *in = x->src[0];
    const st_view_arg *va = &c->arg.view;
    if (c->op != ST_OP_VIEW || va->has_mask || va->offset != 0 ||
        !same_shape(c->ndim, c->shape, in->ndim, in->shape) ||
        !same_shape(c->src[0]->ndim, c->src[0]->shape, x->ndim, x->shape))
        return false;
    int64_t cs[ST_MAX_DIMS];
    st_contig_strides(x->ndim, x->shape, cs);
    for (int d = 0; d < c->ndim; d++) {
        if (c->shape[d] == 1) continue;
        int64_t want = (x->arg.red.axes >> d & 1) ? 0 : cs[d];
        if (va->strides[d] != want) return false;
    }
    return true;
}

/* Is GATHER c row-local for reduction x's rows: its data has x's input shape, it gathers along a
 * reduced axis, and it keeps every kept dim whole? Then each element of c reads the row that
 * its own kept indices name (`log_softmax(x):gather(2, t)`: row o's target logit). The index
 * is range-checked, so the read never leaves that row. */
static bool row_gather(const st_node *c, const st_node *x) {
    const st_node *in = x->src[0], *data = c->src[0];
    uint32_t axes = x->arg.red.axes;
    if (!same_shape(data->ndim, data->shape, in->ndim, in->shape) || !(axes >> c->arg.axis.dim & 1))
        return false;
    for (int k = 0; k < c->ndim; k++)
        if (!(axes >> k & 1) && c->shape[k] != in->shape[k]) return false;
    return true;
}

/* Are all of c's dims that x reduces of size `size` (c has x's input rank)? */
static bool reduced_dims_are(const st_node *c, const st_node *x, int64_t size) {
    for (int k = 0; k < c->ndim; k++)
        if ((x->arg.red.axes >> k & 1) && c->shape[k] != size) return false;
    return true;
}

/* Is g's reduction list holding c? */
static bool is_red_of(const fuse_plan *p, const st_node *c, int g) {
    const fuse_group *G = &p->groups[g];
    for (int i = 0; i < G->nreds; i++)
        if (G->reds[i] == c) return true;
    return false;
}

/* Can reduction x be stitched into group g? Two parts, one DFS over x's consumers:
 *   - up to the row broadcast (left = 0): every path from x goes through elementwise ops of g
 *     over x's element count and flat reshapes only g evaluates, and ends in a free row
 *     broadcast that only g evaluates or in g's outputs (g's epilogue at the row's index);
 *   - after it (left = 1): g computes row o's value of x in an inner phase of outer iteration o
 *     and nothing else of x exists yet, so everything g evaluates downstream must be evaluated
 *     at an element of row o only: elementwise ops (same element), flat reshapes (same flat
 *     index), a GATHER's index (read at the gather's own element), the group's other
 *     reductions (they read their input over the row), a row-local GATHER's data (row_gather:
 *     its output is inside the row, or back at the row's index, where the first part's rules
 *     apply again, flat reshapes included: per-row cross-entropy). Any other GATHER's data, a
 *     non-flat view or an anchor would read x at another row (not computed yet): x is then
 *     materialized by its own group and read from its buffer. Nodes of other groups load
 *     materialized values.
 * *reload is set when g reads x after a flat reshape: that read misses the row's register (the
 * index is the same element but another SSA value) and loads the row from x's buffer, written
 * when x's phase ends, so x must be materialized. Otherwise x lives in a register only.
 * `shared`: x will be stored by g anyway (read by other groups too): before the broadcast,
 * reads of x (directly or through free views) by other groups are loads of its buffer. */
static bool stitch_ok(fuse_plan *p, const st_node *x, int g, bool shared, bool *reload) {
    *reload = false;
    /* a node may be reached in both modes (when x's shape equals the input shape): the stamp
     * holds base + (bit 0: seen before the broadcast, bit 1: after) - 1 */
    uint32_t base = p->stamp_now + 1;
    p->stamp_now += 3;
    int top = 0;
    if (dfs_push(p, &top, x->pos, 0)) return false;
    while (top) {
        fuse_dfs_ent e = p->dfs[--top];
        const st_node *y = p->r->nodes[e.pos];
        for (int k = p->cons_off[e.pos]; k < p->cons_off[e.pos + 1]; k++) {
            const st_node *c = p->r->nodes[p->cons[k]];
            uint32_t sv = p->stamp[c->pos], seen = sv >= base && sv < base + 3 ? sv - base + 1 : 0;
            uint32_t bit = e.left ? 2u : 1u;
            if (seen & bit) continue;
            p->stamp[c->pos] = base + (seen | bit) - 1;
            if (!e.left) { /* at the row's output index */
                if (fuse_is_free(p, c)) {
                    int cg = p->cg[c->pos];
                    if (cg != g && (!shared || cg != -2)) {
                        if (shared && cg >= 0) continue;     /* another group loads x */
                        if (y == x || !p->mat[y->pos]) return false;
                        /* every group evaluating c loads y's buffer, unless several do and y is
                         * g's: g may be one of them, computing y itself (c must pass as g's view) */
                        if (cg != -2 || y->tag != g) continue;
                    }
                    if (row_broadcast(c, x)) {
                        if (dfs_push(p, &top, c->pos, 1)) return false;
                    } else if (!fuse_view_is_flat(c) || dfs_push(p, &top, c->pos, 0)) {
                        return false;
                    }
                    continue;
                }
                if (c->tag != g) {
                    if (y != x && p->mat[y->pos]) continue;  /* loads y's buffer */
                    if (shared && (y == x || fuse_is_free(p, y))) continue; /* loads x's */
                    return false;
                }
                if (!st_op_is_elementwise(c->op) || c->numel != x->numel) return false;
                if (dfs_push(p, &top, c->pos, 0)) return false;
                continue;
            }
            if (fuse_is_free(p, c)) {
                int cg = p->cg[c->pos];
                if (cg != g && cg != -2) continue;          /* g does not evaluate it */
                if (!fuse_view_is_flat(c)) return false;     /* free sources have no srcs */
                *reload = true;
            } else if (c->tag != g) {
                continue;                                    /* loads y's buffer */
            } else if (is_red_of(p, c, g)) {
                continue;                                    /* reads y over row o */
            } else if (c->op == ST_OP_GATHER && c->src[0] == y) {
                /* data: read at another element, which must lie in row o */
                if (!row_gather(c, x)) return false;
                if (reduced_dims_are(c, x, 1)) {             /* one value per row: back at the */
                    if (dfs_push(p, &top, c->pos, 0)) return false; /* row's output index */
                    continue;
                }
                if (!same_shape(c->ndim, c->shape, x->src[0]->ndim, x->src[0]->shape)) return false;
            } else if (!st_op_is_elementwise(c->op)) {
                return false;
            }
            if (dfs_push(p, &top, c->pos, 1)) return false;
        }
    }
    return true;
}

/* Does matmul group G write more than the product itself (an epilogue: elementwise consumers
 * evaluated where the GEMM stores each output element)? */
static bool mm_has_epilogue(const fuse_group *G) {
    return G->kind == FG_MATMUL && (G->nouts != 1 || G->outs[0] != G->anchor);
}

/* Is there a node between operand src and its base (fuse_mm_operand's chain: views and one
 * CAST, each read through src[0]) that is x? */
static bool mm_chain_has(const st_node *src, const st_node *base, const st_node *x) {
    for (const st_node *n = src; n != base; n = n->src[0])
        if (n == x) return true;
    return false;
}

/* Is CAST x folded into the operand loads of every matmul that reads it (a prologue): each
 * consumer is a matmul, or a free view whose consumers are, and the operand's chain down to its
 * base (fuse_mm_operand) goes through x? Then no kernel computes x: x is free like a view (each
 * GEMM converts its source's elements while packing, the interpreter tier evaluates it in the
 * matmul's group), and its source is what the matmuls load (`need`). */
static bool mm_cast_folded(fuse_plan *p, const st_node *x) {
    if (!mm_cast_foldable(x)) return false;
    uint32_t st = ++p->stamp_now;
    int top = 0;
    if (dfs_push(p, &top, x->pos, 0)) return false;
    while (top) {
        int pos = p->dfs[--top].pos;
        const st_node *y = p->r->nodes[pos];
        for (int k = p->cons_off[pos]; k < p->cons_off[pos + 1]; k++) {
            st_node *c = p->r->nodes[p->cons[k]];
            if (p->stamp[c->pos] == st) continue;
            p->stamp[c->pos] = st;
            if (c->op == ST_OP_VIEW && fuse_is_free(p, c)) {
                if (dfs_push(p, &top, c->pos, 0)) return false;
                continue;
            }
            if (c->op != ST_OP_MATMUL) return false;
            for (int i = 0; i < 2; i++) {
                st_node *base;
                int64_t str[ST_MAX_DIMS], off;
                if (c->src[i] != y) continue;
                fuse_mm_operand(c->src[i], &base, str, &off, NULL);
                if (!mm_chain_has(c->src[i], base, x)) return false;
            }
        }
    }
    return true;
}

/* Can matmul x become the head of pointwise group g (an epilogue)? g computes over x's elements
 * (its shape, or the same count read through flat reshapes: a Linear on a batch of sequences is
 * a 2-D matmul reshaped back), and the epilogue runs at each output element of the GEMM, so it
 * reads x at that element only (the reduce-epilogue rule, epilogue_ok), the dtype has a compute type the epilogue can
 * take from the accumulator (bool matmuls keep their own kernel), and the kind is on. */
static bool mm_epilogue_ok(fuse_plan *p, const st_node *x, int g) {
    const fuse_group *G = &p->groups[g];
    return fuse_on(FUSE_MM_EPILOGUE) && x->op == ST_OP_MATMUL && x->dtype != ST_BOOL && G->kind == FG_POINTWISE &&
           st_shape_numel(G->ndim, G->shape) == x->numel && epilogue_ok(p, x, g);
}

static int add_red(fuse_plan *p, int gi, st_node *x) {
    fuse_group *g = &p->groups[gi];
    if (BASE_GROW(g->reds, g->capreds, g->nreds + 1, 4) != ST_OK) return -1;
    g->reds[g->nreds++] = x;
    x->tag = gi;
    return 0;
}

/* ---- reachability between groups ----
 * A group may hold nodes no path connects (a materialized value joins a recent group, a sibling
 * reduction joins another's loop), so following node paths is not enough: once a walk enters a
 * group h, every node of h is a start (h runs as one kernel, after everything it loads and before
 * everything that loads any of its values). The members of each placed group (positions after x,
 * placed already) are bucketed once per walk, only when the walk enters a group. */
static int bucket_members(fuse_plan *p, int from) {
    int n = p->r->n, ng = p->ngroups;
    if (BASE_GROW(p->mem_off, p->mem_cap_off, ng + 2, ng + 2) != ST_OK ||
        BASE_GROW(p->mem_nodes, p->mem_cap_nodes, n + 1, n + 1) != ST_OK)
        return -1;
    int *mem_off = p->mem_off, *mem_nodes = p->mem_nodes;
    memset(mem_off, 0, (size_t)(ng + 2) * sizeof *mem_off);
    for (int i = from; i < n; i++) {
        int t = p->r->nodes[i]->tag;
        if (t >= 0) mem_off[t + 2]++;
    }
    for (int h = 0; h < ng; h++) mem_off[h + 2] += mem_off[h + 1];
    for (int i = from; i < n; i++) {   /* mem_off[h + 1] is the fill cursor, ending at h's end */
        int t = p->r->nodes[i]->tag;
        if (t >= 0) mem_nodes[mem_off[t + 1]++] = i;
    }
    return 0;
}

/* Does a path from x reach a node of group g? With left_only, only a path that passes through a
 * node of another group counts (x's consumers in g itself read x in g: no edge). Free nodes are
 * walked through; entering group h continues from every node of h. */
static bool reaches(fuse_plan *p, const st_node *x, int g, bool left_only) {
    uint32_t st0 = ++p->stamp_now, st1 = ++p->stamp_now;
    uint8_t *entered = st_calloc((size_t)p->ngroups + 1, 1);
    bool bucketed = false;
    int top = 0;
    if (!entered || dfs_push(p, &top, x->pos, 0)) goto yes;
    while (top) {
        fuse_dfs_ent e = p->dfs[--top];
        for (int k = p->cons_off[e.pos]; k < p->cons_off[e.pos + 1]; k++) {
            const st_node *c = p->r->nodes[p->cons[k]];
            bool free_c = fuse_is_free(p, c);
            if (!free_c && c->tag == g) {
                if (e.left || !left_only) goto yes;
                continue;
            }
            int left = e.left || !free_c;
            uint32_t mark = left ? st1 : st0;
            /* a node seen with left=1 need not be revisited; left=0 visits are a subset */
            if (p->stamp[c->pos] == st1 || p->stamp[c->pos] == mark) continue;
            p->stamp[c->pos] = mark;
            if (dfs_push(p, &top, c->pos, left)) goto yes;
            if (free_c || entered[c->tag]) continue;
            entered[c->tag] = 1;
            if (!bucketed && bucket_members(p, x->pos + 1)) goto yes;
            bucketed = true;
            for (int j = p->mem_off[c->tag]; j < p->mem_off[c->tag + 1]; j++) {
                int m = p->mem_nodes[j];
                if (p->stamp[m] == st1) continue;
                p->stamp[m] = st1;
                if (dfs_push(p, &top, m, 1)) goto yes;
            }
        }
    }
    st_free(entered);
    return false;
yes: /* also on OOM: the caller then does not join (a new group is always acyclic) */
    st_free(entered);
    return true;
}

/* Would making x (materialized) part of group g close a cycle? True when some path leaves x
 * through a group other than g and reaches g again (g would load what it must run before). */
static bool creates_cycle(fuse_plan *p, const st_node *x, int g) { return reaches(p, x, g, true); }

/* May a producer be computed inside its consumer group g (inlined, or as an extra output)?
 * Elementwise inlining is FUSE_INLINE; producers of a reduction FUSE_REDUCE. */
static bool may_join_consumer(const fuse_plan *p, int g) {
    return fuse_on(p->groups[g].kind == FG_REDUCE ? FUSE_REDUCE : FUSE_INLINE);
}

/* Does any path from x reach a node of group g (through any group or free node)? */
static bool reaches_group(fuse_plan *p, const st_node *x, int g) { return reaches(p, x, g, false); }

/* A reduce group reduction x can join as a sibling (FUSE_MULTI), or -1: same input shape and
 * axes (one loop over the same rows serves both: layernorm backward's weight and bias
 * gradients are one column-reduction kernel), and independent. x's producers come before every
 * node already placed, so g cannot feed x; and no path may lead from x into g, directly or
 * through other groups (g would read x before computing it, or the group graph gets a cycle).
 * x is then an output of g (its consumers are elsewhere). At most 4 candidates are walked. */
static int sibling_group(fuse_plan *p, const st_node *x) {
    if (!fuse_on(FUSE_MULTI)) return -1;
    const st_node *in = x->src[0];
    for (int g = p->ngroups - 1, tries = 0; g >= 0 && tries < 4; g--) {
        const fuse_group *G = &p->groups[g];
        if (G->kind != FG_REDUCE || G->anchor->arg.red.axes != x->arg.red.axes ||
            !same_shape(G->anchor->src[0]->ndim, G->anchor->src[0]->shape, in->ndim, in->shape))
            continue;
        tries++;
        if (!reaches_group(p, x, g)) return g;
    }
    return -1;
}

/* May group g evaluate x as well without its body passing FUSE_MAX_WORK (a group's first node
 * always fits)? */
static bool work_fits(const fuse_plan *p, const st_node *x, int g) {
    int w = p->groups[g].work;
    return w == 0 || w + fuse_node_work(x) <= FUSE_MAX_WORK;
}

/* Output side x would have in group g, or -1 if g cannot compute x. */
static int join_side(const fuse_plan *p, const st_node *x, int g) {
    const fuse_group *G = &p->groups[g];
    if (G->kind == FG_POINTWISE)
        return same_shape(x->ndim, x->shape, G->ndim, G->shape) ? FUSE_OUT_MAIN : -1;
    if (G->kind == FG_REDUCE) {
        const st_node *in = G->anchor->src[0], *r = G->anchor;
        if (same_shape(x->ndim, x->shape, in->ndim, in->shape)) return FUSE_OUT_INPUT;
        /* a value over the rows' results (a mean, `sum * (1/n)`, read by this group's later
         * phases and by another group): computed and stored at the row's index */
        return fuse_on(FUSE_STITCH) && st_op_is_elementwise((st_op)x->op) && same_shape(x->ndim, x->shape, r->ndim, r->shape)
                   ? FUSE_OUT_MAIN : -1;
    }
    /* a matmul's epilogue computes values of its shape; never an operand (`need`: read as a
     * buffer, by this GEMM perhaps, before the epilogue runs) */
    if (mm_has_epilogue(G) && !p->need[x->pos])
        return same_shape(x->ndim, x->shape, G->ndim, G->shape) ? FUSE_OUT_MAIN : -1;
    return -1;
}

/* Does the expression of x (walked through views and elementwise ops, at most *budget nodes)
 * read, through a flat reshape, a view that needs its multi-index (not itself a reshape)? */
static bool reads_reshaped_strided(const st_node *x, int *budget, bool reshaped) {
    if (--*budget < 0) return false;
    if (x->op == ST_OP_VIEW) {
        if (!fuse_view_is_flat(x) && reshaped) return true;
        reshaped = reshaped || fuse_view_is_flat(x);
    } else if (!st_op_is_elementwise((st_op)x->op)) {
        return false;
    }
    for (int i = 0; i < x->nsrc; i++)
        if (reads_reshaped_strided(x->src[i], budget, reshaped)) return true;
    return false;
}

/* Is reduce group G a column reduction: its reduced dims first, some kept dims last (lowered with
 * rows outer and a block of outputs inner)? */
static bool is_column_reduce(const fuse_group *G) {
    const st_node *in = G->anchor->src[0];
    uint32_t axes = G->anchor->arg.red.axes;
    int nred = 0;
    while (nred < in->ndim && (axes >> nred & 1)) nred++;
    return nred > 0 && nred < in->ndim && (axes >> nred) == 0;
}

/* Is group g a column reduction that would compute x, an output over its rows, at a division per
 * element? x read through a reshape of a strided view needs the multi-index of a
 * finer shape: a pointwise group loops over that shape (lower.c refine_by_reshapes), the column
 * loop unravels the column index at every element: the attention's q/k/v gradients padded into
 * the fused qkv gradient, stored by the bias gradient's column sum, took 4-5.6 ms against 0.8 ms
 * as a pointwise kernel and a sum loading it (the transformer-block step, bench_fusion). */
static bool col_reduce_divides(const fuse_plan *p, const st_node *x, int g) {
    const fuse_group *G = &p->groups[g];
    if (G->kind != FG_REDUCE || !is_column_reduce(G)) return false;
    int budget = 64;
    return reads_reshaped_strided(x, &budget, false);
}

/* Does the expression of x (walked through views and elementwise ops, at most *budget nodes)
 * read a reduction over other axes than `axes`? */
static bool reads_other_reduction(const st_node *x, uint32_t axes, int *budget) {
    if (--*budget < 0) return false;
    if (st_ops[x->op].kind == OPK_REDUCE) return x->arg.red.axes != axes;
    if (x->op != ST_OP_VIEW && !st_op_is_elementwise((st_op)x->op)) return false;
    for (int i = 0; i < x->nsrc; i++)
        if (reads_other_reduction(x->src[i], axes, budget)) return true;
    return false;
}

/* Would x, joining reduce group g as a value over its rows, read a reduction of other axes (not
 * placed yet: x's producers come later)? That reduction could be stitched into a pointwise group
 * computing x, but not into g: it then gets a group of its own, and what x reads of its row
 * loop is stored there and loaded by g. Layernorm's backward: its input gradient joined the
 * weight gradient's column sum, and its row kernel stored a partial input gradient (16 MB
 * written, then read) for the column kernel to finish (bench_fusion's layernorm, bench/NOTES.md). */
static bool joins_across_rows(const fuse_plan *p, const st_node *x, int g) {
    const fuse_group *G = &p->groups[g];
    if (G->kind != FG_REDUCE) return false;
    int budget = 64;
    return reads_other_reduction(x, G->anchor->arg.red.axes, &budget);
}

/* The existing group materialized x would join, or -1 (a new group): the group of a consumer
 * (the producer computed where it is read) or a recent sibling, compatible and acyclic. Joining
 * makes a kernel with several outputs (FUSE_MULTI); joining a consumer's group also computes
 * the producer where it is read (FUSE_INLINE, or FUSE_REDUCE for a reduce group). */
static int join_target(fuse_plan *p, const st_node *x, int *side) {
    int cand[16], nc = 0, ncons;
    for (int k = p->cons_off[x->pos]; k < p->cons_off[x->pos + 1] && nc < 8; k++) {
        const st_node *c = p->r->nodes[p->cons[k]];
        int t = fuse_is_free(p, c) ? p->cg[c->pos] : c->tag;
        if (t >= 0) cand[nc++] = t;
    }
    ncons = nc;
    for (int g = p->ngroups - 1; g >= 0 && g >= p->ngroups - 8; g--) cand[nc++] = g;
    for (int i = 0; i < nc && fuse_on(FUSE_MULTI); i++) {
        int g = cand[i], skip = 0;
        for (int j = 0; j < i; j++) skip |= cand[j] == g;
        for (int j = 0; j < ncons; j++) skip |= cand[j] == g && !may_join_consumer(p, g);
        if (skip) continue;
        *side = join_side(p, x, g);
        if (*side >= 0 && eval_depth(p, x, g) <= FUSE_MAX_DEPTH && work_fits(p, x, g) &&
            !(*side == FUSE_OUT_INPUT && (col_reduce_divides(p, x, g) || joins_across_rows(p, x, g))) &&
            !creates_cycle(p, x, g))
            return g;
    }
    return -1;
}

/* Materializes x: joins join_target's group, or starts a new pointwise group. */
static int materialize(fuse_plan *p, st_node *x) {
    int side, g = join_target(p, x, &side);
    if (g >= 0) return add_out(p, g, x, side);
    g = new_group(p, FG_POINTWISE, NULL, x);
    return g < 0 ? -1 : add_out(p, g, x, FUSE_OUT_MAIN);
}

/* Is group g over reduction x's rows (stitching is on): a pointwise group of x's input shape or
 * of x's element count, or a reduce group with x's input shape and axes? */
static bool stitch_fits(const fuse_plan *p, const st_node *x, int g) {
    const fuse_group *G = &p->groups[g];
    const st_node *in = x->src[0];
    if (!fuse_on(FUSE_STITCH)) return false;
    if (G->kind == FG_POINTWISE)
        return same_shape(G->ndim, G->shape, in->ndim, in->shape) || st_shape_numel(G->ndim, G->shape) == x->numel;
    return G->kind == FG_REDUCE && G->anchor->arg.red.axes == x->arg.red.axes &&
           same_shape(G->anchor->src[0]->ndim, G->anchor->src[0]->shape, in->ndim, in->shape);
}

/* Stitches reduction x into group g (stitch_ok holds), stored when `store`. A pointwise g
 * becomes a reduce group: outputs over the rows are computed last in the row; outputs over the
 * rows' results (a row-local gather's `nll`) in the epilogue at the row's index. */
static int stitch_into(fuse_plan *p, st_node *x, int g, bool store) {
    fuse_group *G = &p->groups[g];
    const st_node *in = x->src[0];
    if (G->kind == FG_POINTWISE) {
        bool over_rows = same_shape(G->ndim, G->shape, in->ndim, in->shape);
        G->kind = FG_REDUCE;
        G->anchor = x;
        for (int i = 0; i < G->nouts; i++) G->out_side[i] = over_rows ? FUSE_OUT_INPUT : FUSE_OUT_MAIN;
    }
    return add_red(p, g, x) || (store && add_out(p, g, x, FUSE_OUT_MAIN)) ? -1 : 0;
}

/* Adds the group evaluating c to cand (at most 8, no duplicates). */
static void add_cand(int *cand, int *nc, const st_node *c, const fuse_plan *p) {
    int t = fuse_is_free(p, c) ? p->cg[c->pos] : c->tag;
    for (int i = 0; i < *nc; i++)
        if (cand[i] == t) return;
    if (t >= 0 && *nc < 8) cand[(*nc)++] = t;
}

/* A group that reduction x, read by several groups, can be stitched into and stored by, or -1
 * (FUSE_MULTI: x becomes an output of that group). The training case: softmax's max and sum,
 * layernorm's statistics are read by the forward's next phase and by the backward, which loads
 * them. Candidates are the groups evaluating x's consumers, looking through free views read by
 * several groups; g must be over x's rows, stitch_ok where every other group loads x's buffer,
 * and no path may leave x through another group and come back into g. */
static int shared_stitch_group(fuse_plan *p, const st_node *x) {
    int cand[8], nc = 0;
    if (!fuse_on(FUSE_MULTI)) return -1;
    for (int k = p->cons_off[x->pos]; k < p->cons_off[x->pos + 1]; k++) {
        const st_node *c = p->r->nodes[p->cons[k]];
        if (fuse_is_free(p, c) && p->cg[c->pos] == -2) {   /* a view several groups read */
            for (int j = p->cons_off[c->pos]; j < p->cons_off[c->pos + 1]; j++)
                add_cand(cand, &nc, p->r->nodes[p->cons[j]], p);
        } else {
            add_cand(cand, &nc, c, p);
        }
    }
    for (int i = 0; i < nc; i++) {
        bool reload;
        if (stitch_fits(p, x, cand[i]) && stitch_ok(p, x, cand[i], true, &reload) && !creates_cycle(p, x, cand[i]))
            return cand[i];
    }
    return -1;
}

static int place(fuse_plan *p, st_node *x) {
    int pos = x->pos;
    /* a node cut out of a group that had no kernel (fuse_partition's `cut`) is stored by a new
     * group of its own: its consumers load it, and it joins, heads or stitches nothing */
    bool cut = (p->cut && p->cut[pos]) || (x->flags & NODE_STORE);
    bool keep = (x->flags & NODE_TARGET) || p->need[pos] || cut;
    int s = cut ? -1 : consumer_summary(p, x);
    x->tag = -1;
    if (!keep && s != -1 && (is_free_kind(x) || mm_cast_folded(p, x)) && (s < 0 || work_fits(p, x, s))) {
        p->cg[pos] = s;
        p->depth[pos] = eval_depth(p, x, -1);   /* evaluated by every group reading it */
        if (s >= 0) p->groups[s].work += fuse_node_work(x);
        return 0;
    }
    if (is_anchor(x)) {
        bool red = st_ops[x->op].kind == OPK_REDUCE, reload = false;
        int sib;
        fuse_group *G = s >= 0 ? &p->groups[s] : NULL;
        if (red && G && fuse_on(FUSE_REDUCE) && G->kind == FG_POINTWISE &&
            st_shape_numel(G->ndim, G->shape) == x->numel && epilogue_ok(p, x, s)) {
            G->kind = FG_REDUCE;
            G->anchor = x;
            if (add_red(p, s, x) || (keep && add_out(p, s, x, FUSE_OUT_MAIN))) return -1;
        } else if (red && G && stitch_fits(p, x, s) && stitch_ok(p, x, s, false, &reload)) {
            /* later phases of the row read it from a register; a buffer only when someone
             * needs one (a target, a buffer consumer) or a read goes through a flat reshape.
             * A live handle outside the region is not a reason here: store_kept_rows (the
             * cost model) decides that once every node is placed. */
            if (stitch_into(p, x, s, keep || reload)) return -1;
        } else if (red && s == -2 && (sib = shared_stitch_group(p, x)) >= 0) {
            if (stitch_into(p, x, sib, true)) return -1;
        } else if (red && !cut && (sib = sibling_group(p, x)) >= 0) {
            if (add_red(p, sib, x) || add_out(p, sib, x, FUSE_OUT_MAIN)) return -1;
        } else if (G && mm_epilogue_ok(p, x, s)) {
            /* the GEMM stores through g's outputs; x itself only when something needs it */
            G->kind = FG_MATMUL;
            G->anchor = x;
            x->tag = s;
            if (keep && add_out(p, s, x, FUSE_OUT_MAIN)) return -1;
        } else {
            fuse_group_kind k = x->op == ST_OP_MATMUL ? FG_MATMUL
                              : x->op == ST_OP_ATTN ? FG_ATTN
                              : x->op == ST_OP_SCATTER_ADD ? FG_SCATTER
                              : x->op == ST_OP_SETVIEW ? FG_SETVIEW : FG_REDUCE;
            int g = new_group(p, k, x, x);
            if (g < 0 || add_out(p, g, x, FUSE_OUT_MAIN) || (red && add_red(p, g, x))) return -1;
        }
        if (x->op == ST_OP_MATMUL || x->op == ST_OP_ATTN) {
            for (int i = 0; i < x->nsrc; i++) {
                st_node *base;
                int64_t str[ST_MAX_DIMS], off;
                anchor_operand(x, i, &base, str, &off);
                if (fuse_in_region(base)) p->need[base->pos] = 1;
            }
        }
    } else if (!keep && s >= 0 && p->groups[s].kind != FG_ATTN &&
               (p->groups[s].kind != FG_MATMUL || mm_has_epilogue(&p->groups[s])) &&
               may_join_consumer(p, s) && eval_depth(p, x, s) <= FUSE_MAX_DEPTH && work_fits(p, x, s)) {
        x->tag = s; /* inlined (a matmul's operands are kept: `need`, set when it was placed) */
    } else if (cut) {
        int g = new_group(p, FG_POINTWISE, NULL, x);
        if (g < 0 || add_out(p, g, x, FUSE_OUT_MAIN)) return -1;
    } else if (materialize(p, x)) {   /* (a node too deep for its consumers' group, or too much */
        return -1;                    /* for its body: stored by another, so a long chain is cut) */
    }
    if (x->tag >= 0) p->groups[x->tag].work += fuse_node_work(x);
    p->cg[pos] = x->tag;
    p->depth[pos] = is_anchor(x) ? 0 : eval_depth(p, x, x->tag);
    return 0;
}

/* ---- what a group evaluates, and the order of groups ---- */
/* Positions of the nodes group g evaluates, sorted; returns the count or -1 (OOM). */
static int group_walk(fuse_plan *p, int g) {
    fuse_group *G = &p->groups[g];
    uint32_t st = ++p->stamp_now;
    int n = 0, top = 0;
    int need = p->r->n;
    if (BASE_GROW(p->walk, p->walk_cap, 2 * need, 2 * need) != ST_OK) return -1;
    int *out = p->walk, *stack = p->walk + need;
    for (int i = 0; i <= G->nouts + G->nreds; i++) {
        st_node *root = i < G->nouts ? G->outs[i] : i < G->nouts + G->nreds ? G->reds[i - G->nouts] : G->anchor;
        if (!root || p->stamp[root->pos] == st) continue;
        p->stamp[root->pos] = st;
        stack[top++] = root->pos;
    }
    while (top) {
        int pos = stack[--top];
        out[n++] = pos;
        st_node *y = p->r->nodes[pos];
        for (int k = 0; k < y->nsrc; k++) {
            st_node *s = y->src[k];
            if (fuse_loads(p, s, g) || p->stamp[s->pos] == st) continue;
            p->stamp[s->pos] = st;
            stack[top++] = s->pos;
        }
    }
    /* insertion sort is fine for small groups; use a counting pass for big ones */
    if (n > 64) {
        int m = 0;
        for (int i = 0; i < p->r->n; i++)
            if (p->stamp[i] == st) out[m++] = i;
        return m;
    }
    for (int i = 1; i < n; i++) {
        int v = out[i], j = i;
        while (j > 0 && out[j - 1] > v) { out[j] = out[j - 1]; j--; }
        out[j] = v;
    }
    return n;
}

st_status fuse_group_nodes(fuse_plan *p, int g, st_status (*fn)(st_node *n, void *ud), void *ud) {
    int n = group_walk(p, g);
    if (n < 0) return st_last_status();
    /* fn may call back into the fuser: copy the list first */
    int *copy = st_malloc((size_t)(n ? n : 1) * sizeof *copy);
    if (!copy) return st_last_status();
    memcpy(copy, p->walk, (size_t)n * sizeof *copy);
    st_status s = ST_OK;
    for (int i = 0; i < n && s == ST_OK; i++) s = fn(p->r->nodes[copy[i]], ud);
    st_free(copy);
    return s;
}

/* ---- groups merged into a reduce group over its rows (FUSE_STITCH) ----
 * Placement runs from consumers to producers, so a value over the rows' results that two groups
 * read is materialized before its reduction is placed: BatchNorm's variance, read by the
 * normalization (a pointwise group of the input's shape) and by the running variance's update,
 * gets a group of its own, the variance stitches into that one, and the normalization stays a
 * second kernel that loads what the first stored. Once every node is placed, a pointwise group B
 * that reads reduce group A is merged into A when B is over A's rows: B's shape is A's input
 * shape (its values are computed last in each row, after the row's phases) or B has A's output
 * element count (computed at the row's index with A's epilogue), and every reduction of A still
 * passes stitch_ok with B's nodes in A (then B reads what A computes only at the row being
 * computed). No path may lead from A to B through a third group (A would have to run both
 * before and after it). Only for the CPU's kernels and rows enough to share among the threads:
 * a GPU's reduce kernel has a block per row (BatchNorm: one per channel), far fewer than a
 * pointwise kernel over every element; and not over the input of a column reduction (reduced
 * dims first), whose column loop would walk B's elements a block of columns at a time. */
enum { MERGE_MIN_ROWS = 8 };

/* Marks in `reads` (per group) the groups that group g loads a value of. */
static int group_reads(fuse_plan *p, int g, uint8_t *reads) {
    int n = group_walk(p, g);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) {
        const st_node *y = p->r->nodes[p->walk[i]];
        for (int k = 0; k < y->nsrc; k++) {
            const st_node *s = y->src[k];
            if (fuse_in_region(s) && fuse_loads(p, s, g) && s->tag >= 0 && s->tag != g) reads[s->tag] = 1;
        }
    }
    return 0;
}

/* Does a path of loads lead from group a to group b through another group (edges[h * ng + g]:
 * g loads a value of h)? */
static bool reaches_through(const fuse_plan *p, const uint8_t *edges, int a, int b, int *stack, uint8_t *seen) {
    int ng = p->ngroups, top = 0;
    memset(seen, 0, (size_t)ng);
    for (int g = 0; g < ng; g++)
        if (g != b && edges[(size_t)a * ng + g]) { seen[g] = 1; stack[top++] = g; }
    while (top) {
        int h = stack[--top];
        for (int g = 0; g < ng; g++) {
            if (!edges[(size_t)h * ng + g] || seen[g]) continue;
            if (g == b) return true;
            seen[g] = 1;
            stack[top++] = g;
        }
    }
    return false;
}

/* The deepest eval depth of a node group g evaluates (p->walk holds its walk, n nodes). */
static int walk_depth(const fuse_plan *p, int n) {
    int d = 0;
    for (int i = 0; i < n; i++) if (p->depth[p->walk[i]] > d) d = p->depth[p->walk[i]];
    return d;
}

/* After a merge: an output of A that only A reads now (B loaded it: BatchNorm's `x - mean`), not
 * a target, not needed as a buffer, no reduction, is no longer stored: A computes it where it
 * reads it, as if B had been A's from the start. */
static void drop_private_outputs(fuse_plan *p, int a) {
    fuse_group *A = &p->groups[a];
    for (int k = 0; k < A->nouts;) {
        st_node *x = A->outs[k];
        bool keep = (x->flags & (NODE_TARGET | NODE_STORE)) || p->need[x->pos] || (p->cut && p->cut[x->pos]) ||
                    st_ops[x->op].kind == OPK_REDUCE || consumer_summary(p, x) != a;
        if (keep) { k++; continue; }
        p->mat[x->pos] = 0;
        memmove(&A->outs[k], &A->outs[k + 1], (size_t)(A->nouts - k - 1) * sizeof *A->outs);
        memmove(&A->out_side[k], &A->out_side[k + 1], (size_t)(A->nouts - k - 1));
        A->nouts--;
    }
}

/* Tries to merge pointwise group b into reduce group a (see above): 1 merged, 0 not, -1 OOM. */
static int try_merge(fuse_plan *p, int a, int b) {
    fuse_group *A = &p->groups[a], *B = &p->groups[b];
    const st_node *in = A->anchor->src[0];
    int side = same_shape(B->ndim, B->shape, in->ndim, in->shape) ? FUSE_OUT_INPUT
               : st_shape_numel(B->ndim, B->shape) == A->anchor->numel ? FUSE_OUT_MAIN : -1;
    if (side < 0 || A->work + B->work > FUSE_MAX_WORK) return 0;
    int na = group_walk(p, a), da = na < 0 ? 0 : walk_depth(p, na);
    int nb = group_walk(p, b), db = nb < 0 ? 0 : walk_depth(p, nb);
    if (na < 0 || nb < 0) return -1;
    if (da + db > FUSE_MAX_DEPTH) return 0;
    /* B's nodes and the free nodes only B evaluates move to A */
    int n = p->r->n, *moved = st_malloc(((size_t)n + 1) * sizeof *moved), nm = 0;
    if (!moved) return -1;
    for (int i = 0; i < n; i++) {
        st_node *x = p->r->nodes[i];
        if (x->tag == b || (fuse_is_free(p, x) && p->cg[i] == b)) moved[nm++] = i;
    }
    for (int i = 0; i < nm; i++) {
        st_node *x = p->r->nodes[moved[i]];
        if (x->tag == b) x->tag = a;
        if (p->cg[moved[i]] == b) p->cg[moved[i]] = a;
    }
    int nouts0 = A->nouts, rc = 1;
    for (int k = 0; k < B->nouts && rc == 1; k++)
        if (add_out(p, a, B->outs[k], side)) rc = -1;
    A = &p->groups[a];
    /* every reduction of A against its new members; a read through a flat reshape needs the
     * reduction's buffer (stitch_ok's reload), stored once all pass (a group of more than 64
     * reductions is not merged) */
    uint64_t reload = 0;
    for (int k = 0; k < A->nreds && rc == 1; k++) {
        st_node *x = A->reds[k];
        bool stored = false, rl = false;
        for (int j = 0; j < A->nouts; j++) stored |= A->outs[j] == x;
        if (k >= 64 || !stitch_ok(p, x, a, stored, &rl)) rc = 0;
        else if (rl && !stored) reload |= 1ull << k;
    }
    for (int k = 0; k < A->nreds && rc == 1; k++)
        if ((reload >> k & 1) && add_out(p, a, A->reds[k], FUSE_OUT_MAIN)) rc = -1;
    if (rc != 1) {   /* undone: B's nodes back to B */
        A->nouts = nouts0;
        for (int i = 0; i < nm; i++) {
            st_node *x = p->r->nodes[moved[i]];
            if (x->tag == a) x->tag = b;
            if (p->cg[moved[i]] == a) p->cg[moved[i]] = b;
        }
        st_free(moved);
        return rc;
    }
    for (int i = 0; i < nm; i++) p->depth[moved[i]] += da;   /* B's nodes now sit on A's */
    st_free(moved);
    A->work += B->work;
    /* B leaves the plan: later groups move down one id */
    st_free(B->outs);
    st_free(B->out_side);
    st_free(B->reds);
    st_free(B->members);
    memmove(&p->groups[b], &p->groups[b + 1], (size_t)(p->ngroups - b - 1) * sizeof *p->groups);
    p->ngroups--;
    for (int i = 0; i < n; i++) {
        st_node *x = p->r->nodes[i];
        if (x->tag > b) x->tag--;
        if (p->cg[i] > b) p->cg[i]--;
    }
    if (b < a) a--;
    /* free nodes read by several groups may now be read by A alone (consumers come later) */
    for (int i = n - 1; i >= 0; i--)
        if (p->cg[i] == -2 && fuse_is_free(p, p->r->nodes[i])) p->cg[i] = consumer_summary(p, p->r->nodes[i]);
    drop_private_outputs(p, a);
    return 1;
}

/* Is reduce group a a candidate: the CPU's, enough rows, and B over its input only when it is no
 * column reduction (`*input_ok`)? */
static bool merge_target(const fuse_plan *p, int a, bool *input_ok) {
    const fuse_group *A = &p->groups[a];
    if (A->kind != FG_REDUCE || A->anchor->numel < MERGE_MIN_ROWS ||
        dev_target_of(A->anchor->rdev) != DEV_TARGET_C)
        return false;
    *input_ok = !is_column_reduce(A);
    return true;
}

static int merge_over_rows(fuse_plan *p) {
    if (!fuse_on(FUSE_STITCH) || !fuse_on(FUSE_MULTI)) return 0;
    bool any = false, unused;
    for (int a = 0; a < p->ngroups && !any; a++) any = merge_target(p, a, &unused);
    for (int again = any; again;) {
        again = 0;
        int ng = p->ngroups, rc = 0;
        uint8_t *edges = st_calloc((size_t)ng * ng + 1, 1), *seen = st_malloc((size_t)ng + 1);
        int *stack = st_malloc(((size_t)ng + 1) * sizeof *stack);
        if (!edges || !seen || !stack) rc = -1;
        for (int g = 0; g < ng && !rc; g++) {
            uint8_t *col = seen;   /* scratch: the groups g reads */
            memset(col, 0, (size_t)ng);
            if (group_reads(p, g, col)) rc = -1;
            for (int h = 0; h < ng && !rc; h++) if (col[h]) edges[(size_t)h * ng + g] = 1;
        }
        for (int a = 0; a < ng && !rc && !again; a++) {
            bool input_ok;
            if (!merge_target(p, a, &input_ok)) continue;
            for (int b = 0; b < ng && !rc && !again; b++) {
                const fuse_group *B = &p->groups[b];
                if (b == a || B->kind != FG_POINTWISE || !edges[(size_t)a * ng + b] || edges[(size_t)b * ng + a]) continue;
                const st_node *in = p->groups[a].anchor->src[0];
                if (!input_ok && same_shape(B->ndim, B->shape, in->ndim, in->shape)) continue;
                if (reaches_through(p, edges, a, b, stack, seen)) continue;
                int m = try_merge(p, a, b);
                if (m < 0) rc = -1;
                again = m > 0;
            }
        }
        st_free(edges);
        st_free(seen);
        st_free(stack);
        if (rc) return -1;
    }
    return 0;
}

/* ---- the cost model's one decision (cost.c) ----
 * A row value that a handle outside the region keeps alive (fuse_kept: an autograd record, a
 * user's tensor) is stored by the reduce group whose epilogue can compute it, as an extra
 * output at the row's index (FUSE_MULTI), when fuse_cost_store_wins says the write is cheaper
 * than the recompute a later read would cost. A value inlined into another group h moves to
 * that reduce group: h loads it instead, which adds no edge (h already loads the reductions it
 * derives from). Region order, so a value's row-value sources are decided first. */
static int store_kept_rows(fuse_plan *p) {
    if (!fuse_on(FUSE_MULTI)) return 0;
    int n = p->r->n;
    uint8_t *rowval = st_calloc((size_t)n + 1, 1);
    if (!rowval) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        st_node *x = p->r->nodes[i];
        int64_t reread;
        rowval[i] = fuse_row_value(x, rowval);
        if (!rowval[i] || p->mat[i] || !fuse_kept(x)) continue;
        int g = fuse_cost_row_home(p, x, &reread);
        if (g >= 0 && fuse_cost_store_wins((int64_t)st_node_nbytes(x), reread))
            rc = add_out(p, g, x, FUSE_OUT_MAIN);
    }
    st_free(rowval);
    return rc;
}

/* ST_DEBUG: the groups left when Kahn's algorithm stalls (each on or fed by a cycle), with
 * their kind, anchor and outputs, and the edges between them (a planning bug's evidence); with
 * ST_DEBUG & 2 also every region node (op, group, materialized, sources). */
static void debug_cycle(const fuse_plan *p, const uint8_t *done, int ne, const int *eu, const int *eh) {
    if (!st_rt.debug) return;
    for (int g = 0; g < p->ngroups; g++) {
        if (done[g]) continue;
        const fuse_group *G = &p->groups[g];
        fprintf(stderr, "stitch: cycle: group %d %s anchor %s#%d outs", g, fuse_kind_names[G->kind],
                G->anchor ? st_ops[G->anchor->op].name : "-", G->anchor ? G->anchor->pos : -1);
        for (int i = 0; i < G->nouts; i++) fprintf(stderr, " %s#%d", st_ops[G->outs[i]->op].name, G->outs[i]->pos);
        fputc('\n', stderr);
    }
    for (int i = 0; i < p->r->n && (st_rt.debug & 2); i++) {   /* ST_DEBUG=3: the region too */
        const st_node *x = p->r->nodes[i];
        fprintf(stderr, "stitch: cycle: node %d %s tag %d mat %d srcs", i, st_ops[x->op].name, x->tag, p->mat[i]);
        for (int k = 0; k < x->nsrc; k++) fprintf(stderr, " %d", fuse_in_region(x->src[k]) ? x->src[k]->pos : -1);
        fputc('\n', stderr);
    }
    for (int e = 0; e < ne; e++)
        if (!done[eu[e]] && !done[eh[e]] && eu[e] != eh[e]) fprintf(stderr, "stitch: cycle: edge %d -> %d\n", eu[e], eh[e]);
}

/* The order of the groups: a topological order of their loads. Among the ready groups the one
 * that grows the memory in use least runs first (memory_pick), else the newest (producers were
 * created last, so a producer runs right before its consumers). */

/* Score of ready group g: the bytes its outputs allocate minus the bytes of the values it is the
 * last unscheduled reader of (their buffers die after it, fuser/exec.c), in 64 KiB units so that
 * small differences keep the newest-first order. A training step's weight gradient (it reads the
 * saved activation and the output gradient) then runs as soon as it can, freeing the activation,
 * instead of after the whole input-gradient chain (the ResNet step's live peak: bench/NOTES.md). */
typedef struct order_mem {
    int64_t *out_bytes;   /* per group: bytes of its materialized outputs */
    int *left;            /* per node position: the groups loading it not scheduled yet */
    int *ld_off;          /* per group: its loads are ld[ld_off[g] .. ld_off[g + 1]) */
    const int *ld;        /* the loaded values' positions, one per edge (edges are in group order) */
} order_mem;

static int64_t memory_score(const fuse_plan *p, const order_mem *m, int g) {
    int64_t b = m->out_bytes[g];
    for (int i = m->ld_off[g]; i < m->ld_off[g + 1]; i++) {
        const st_node *v = p->r->nodes[m->ld[i]];
        if (m->left[v->pos] == 1 && !(v->flags & NODE_TARGET)) b -= (int64_t)st_node_nbytes(v);
    }
    return b >= 0 ? b >> 16 : -((-b + 65535) >> 16);
}

static int memory_pick(const fuse_plan *p, const order_mem *m, const uint8_t *done, const int *indeg) {
    int pick = -1;
    int64_t best = 0;
    for (int g = p->ngroups - 1; g >= 0; g--) {
        if (done[g] || indeg[g] != 0) continue;
        int64_t sc = memory_score(p, m, g);
        if (pick < 0 || sc < best) {
            pick = g;
            best = sc;
        }
    }
    return pick;
}

static st_status order_groups(fuse_plan *p) {
    int ng = p->ngroups, nn = p->r->n;
    int *indeg = st_calloc((size_t)ng + 1, sizeof *indeg);
    int *eu = NULL, *eh = NULL, *ev = NULL, ne = 0, cape = 0;
    int *adj_off = st_calloc((size_t)ng + 1, sizeof *adj_off), *adj = NULL;
    uint8_t *done = st_calloc((size_t)ng + 1, 1);
    order_mem m = {0};
    m.out_bytes = st_calloc((size_t)ng + 1, sizeof *m.out_bytes);
    m.left = st_calloc((size_t)nn + 1, sizeof *m.left);
    m.ld_off = st_calloc((size_t)ng + 2, sizeof *m.ld_off);
    p->order = st_malloc(((size_t)ng + 1) * sizeof *p->order);
    st_status s = ST_OK;
    if (!indeg || !adj_off || !done || !p->order || !m.out_bytes || !m.left || !m.ld_off) goto oom;
    for (int h = 0; h < ng; h++) {
        const fuse_group *G = &p->groups[h];
        for (int i = 0; i < G->nouts; i++) m.out_bytes[h] += (int64_t)st_node_nbytes(G->outs[i]);
        int n = group_walk(p, h);
        if (n < 0) goto oom;
        uint32_t st = ++p->stamp_now;   /* each loaded value once per group */
        for (int i = 0; i < n; i++) {
            st_node *y = p->r->nodes[p->walk[i]];
            for (int k = 0; k < y->nsrc; k++) {
                st_node *src = y->src[k];
                if (!fuse_in_region(src) || !fuse_loads(p, src, h) || p->stamp[src->pos] == st) continue;
                p->stamp[src->pos] = st;
                int capeh = cape, capev = cape;
                if (BASE_GROW(eh, capeh, ne + 1, 64) != ST_OK || BASE_GROW(ev, capev, ne + 1, 64) != ST_OK ||
                    BASE_GROW(eu, cape, ne + 1, 64) != ST_OK)
                    goto oom;
                eu[ne] = src->tag;
                ev[ne] = src->pos;
                eh[ne++] = h;
            }
        }
    }
    /* the loads per group and the readers per value */
    m.ld = ev;
    for (int e = 0; e < ne; e++) {
        m.ld_off[eh[e] + 1]++;
        m.left[ev[e]]++;
    }
    for (int g = 0; g < ng; g++) m.ld_off[g + 1] += m.ld_off[g];
    adj = st_malloc(((size_t)ne + 1) * sizeof *adj);
    if (!adj) goto oom;
    for (int e = 0; e < ne; e++) {
        adj_off[eu[e] + 1]++;
        indeg[eh[e]]++;
    }
    for (int g = 0; g < ng; g++) adj_off[g + 1] += adj_off[g];
    {
        int *fill = st_malloc(((size_t)ng + 1) * sizeof *fill);
        if (!fill) goto oom;
        memcpy(fill, adj_off, (size_t)ng * sizeof *fill);
        for (int e = 0; e < ne; e++) adj[fill[eu[e]]++] = eh[e];
        st_free(fill);
    }
    /* Kahn's algorithm, the ready group picked by memory_pick */
    for (int k = 0; k < ng; k++) {
        int pick = memory_pick(p, &m, done, indeg);
        if (pick < 0) {
            debug_cycle(p, done, ne, eu, eh);
            s = st_error(ST_ERR_INTERNAL, "fuser: cycle between fusion groups");
            goto out;
        }
        done[pick] = 1;
        p->order[k] = pick;
        for (int e = adj_off[pick]; e < adj_off[pick + 1]; e++) indeg[adj[e]]--;
        for (int i = m.ld_off[pick]; i < m.ld_off[pick + 1]; i++) m.left[m.ld[i]]--;
    }
    goto out;
oom:
    s = st_last_status();
out:
    st_free(indeg);
    st_free(eu);
    st_free(eh);
    st_free(ev);
    st_free(m.out_bytes);
    st_free(m.left);
    st_free(m.ld_off);
    st_free(adj_off);
    st_free(adj);
    st_free(done);
    return s;
}

/* ---- recompute under broadcast ----
 * An inlined value is evaluated once per element of the group that reads it; read through a
 * broadcasting view (an expand: a max pool's backward reads its incoming gradient once per
 * window element), it is evaluated that many times over. That is right for a cheap value (a
 * bias, a mask from iota) and wrong for one that loads a lot: the conv input gradient as the sum
 * of 9 window taps, recomputed 4 times inside the pool's backward, took 100 ms where storing it
 * takes ~2. After the pass, such values are cut (stored by a group of their own) and the region
 * is planned again: a value read through views with AMP_MIN times its elements or more whose
 * expression in the group loads AMP_LOADS buffers or more, over AMP_ELEMS elements or more (a
 * small recompute costs less than a launch). */
enum { AMP_MIN = 2, AMP_LOADS = 6, AMP_WALK = 64, AMP_ELEMS = 1 << 16 };

/* The most elements a chain of free views over x presents to a group (x's own count when no
 * view reads it). */
static int64_t amp_numel(const fuse_plan *p, const st_node *x, int depth) {
    int64_t most = x->numel;
    if (depth > 8) return most;
    for (int k = p->cons_off[x->pos]; k < p->cons_off[x->pos + 1]; k++) {
        const st_node *c = p->r->nodes[p->cons[k]];
        if (c->op != ST_OP_VIEW || !fuse_is_free(p, c)) continue;
        int64_t m = amp_numel(p, c, depth + 1);
        if (m > most) most = m;
    }
    return most;
}

/* Loads in x's expression as group g evaluates it (through inlined nodes, each walked once, and
 * free views: every view of a buffer is a load of its own), up to AMP_WALK nodes. */
static int amp_loads(fuse_plan *p, const st_node *x, int g, uint32_t st, int *budget) {
    int n = 0;
    for (int k = 0; k < x->nsrc && *budget > 0; k++) {
        const st_node *s = x->src[k];
        while (s->op == ST_OP_VIEW && fuse_is_free(p, s)) s = s->src[0];
        --*budget;
        if (fuse_loads(p, s, g)) {
            n++;
        } else if (fuse_in_region(s) && s->tag == g && !is_anchor(s) && p->stamp[s->pos] != st) {
            p->stamp[s->pos] = st;
            n += amp_loads(p, s, g, st, budget);
        }
    }
    return n;
}

/* Marks in *cut (allocated here, copied from `given`) the inlined values recomputed under
 * broadcast; returns how many, -1 on OOM. */
static int amplified_cuts(fuse_plan *p, const uint8_t *given, uint8_t **cut) {
    int n = p->r->n, found = 0;
    for (int i = n - 1; i >= 0; i--) {
        st_node *x = p->r->nodes[i];
        if (x->tag < 0 || p->mat[i] || is_anchor(x) || !st_op_is_elementwise((st_op)x->op)) continue;
        int64_t reads = amp_numel(p, x, 0);
        if (reads < (int64_t)AMP_MIN * x->numel || reads < AMP_ELEMS) continue;
        int budget = AMP_WALK;
        if (amp_loads(p, x, x->tag, ++p->stamp_now, &budget) < AMP_LOADS) continue;
        if (!*cut) {
            if (!(*cut = st_calloc((size_t)n + 1, 1))) return -1;
            if (given) memcpy(*cut, given, (size_t)n);
        }
        (*cut)[i] = 1;
        found++;
    }
    return found;
}

static st_status partition_once(st_region *r, fuse_plan *p, const uint8_t *cut);

st_status fuse_partition(st_region *r, fuse_plan *p, const uint8_t *cut) {
    st_status s = partition_once(r, p, cut);
    if (s != ST_OK) return s;
    uint8_t *more = NULL;
    int found = amplified_cuts(p, cut, &more);
    if (found < 0) return st_last_status();
    if (found) {
        fuse_plan_free(p);
        s = partition_once(r, p, more);   /* the plan does not keep `cut` past placement */
        p->cut = NULL;
        st_free(more);
        if (s != ST_OK) return s;
    }
    return fuse_horizontal(p);
}

static st_status partition_once(st_region *r, fuse_plan *p, const uint8_t *cut) {
    memset(p, 0, sizeof *p);
    p->r = r;
    p->cut = cut;
    int n = r->n;
    p->mat = st_calloc((size_t)n + 1, 1);
    p->need = st_calloc((size_t)n + 1, 1);
    p->cg = st_malloc(((size_t)n + 1) * sizeof *p->cg);
    p->cons_off = st_calloc((size_t)n + 2, sizeof *p->cons_off);
    p->stamp = st_calloc((size_t)n + 1, sizeof *p->stamp);
    p->depth = st_calloc((size_t)n + 1, sizeof *p->depth);
    if (!p->mat || !p->need || !p->cg || !p->cons_off || !p->stamp || !p->depth) return st_last_status();
    int total = 0;
    for (int i = 0; i < n; i++) {
        st_node *x = r->nodes[i];
        x->tag = -1;
        p->cg[i] = -1;
        for (int k = 0; k < x->nsrc; k++)
            if (fuse_in_region(x->src[k])) {
                p->cons_off[x->src[k]->pos + 1]++;
                total++;
            }
    }
    for (int i = 0; i < n; i++) p->cons_off[i + 1] += p->cons_off[i];
    p->cons = st_malloc(((size_t)total + 1) * sizeof *p->cons);
    int *fill = st_malloc(((size_t)n + 1) * sizeof *fill);
    if (!p->cons || !fill) {
        st_free(fill);
        return st_last_status();
    }
    memcpy(fill, p->cons_off, (size_t)n * sizeof *fill);
    for (int i = 0; i < n; i++) {
        st_node *x = r->nodes[i];
        for (int k = 0; k < x->nsrc; k++)
            if (fuse_in_region(x->src[k])) p->cons[fill[x->src[k]->pos]++] = i;
    }
    st_free(fill);
    for (int i = n - 1; i >= 0; i--)
        if (place(p, r->nodes[i])) return st_last_status();
    if (merge_over_rows(p) || store_kept_rows(p)) return st_last_status();
    return order_groups(p);
}

void fuse_plan_free(fuse_plan *p) {
    for (int g = 0; g < p->ngroups; g++) {
        st_free(p->groups[g].outs);
        st_free(p->groups[g].out_side);
        st_free(p->groups[g].reds);
        st_free(p->groups[g].members);
    }
    st_free(p->groups);
    st_free(p->order);
    st_free(p->mat);
    st_free(p->need);
    st_free(p->cg);
    st_free(p->cons_off);
    st_free(p->cons);
    st_free(p->stamp);
    st_free(p->depth);
    st_free(p->dfs);
    st_free(p->walk);
    st_free(p->mem_off);
    st_free(p->mem_nodes);
    memset(p, 0, sizeof *p);
}
