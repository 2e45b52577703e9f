/*
 * horizontal.c — horizontal fusion: independent small groups batched into one launch.
 *
 * After partition.c has made the groups and ordered them, this pass gives every group a level in
 * the group DAG (ASAP: the longest path from a group reading only realized buffers), then moves
 * every SINK group (no consumer group in the region) to level max+1, so that the updates of an
 * optimizer step, whatever the depth of the gradients they read, share one level. Every edge goes
 * from a lower to a higher level, so groups of one level never depend on each other: batching
 * any set of them into one launch cannot create a cycle and needs no synchronization inside it.
 * Pointwise groups of one level and one device are batched, in plan order, into FG_HORIZONTAL
 * groups of at most KIR_MAX_PARTS members, HZ_MAX_SLOTS buffer slots and (CUDA) HZ_CUDA_ARGS
 * argument words. Members keep their nodes (node->tag) and are lowered as before; the batch's
 * kernel is their kernels concatenated (kir_append), one part per member. plan->order is rebuilt
 * over batches and remaining groups (Kahn, earliest original position first, so an unbatched plan
 * keeps its order).
 * Invariant: a member is in exactly one batch, never in plan->order; a batch's outs are its
 * members' outs, in member order.
 */
#include "fuser/fuser.h"

#define HZ_MAX_SLOTS KIR_MAX_BUFS
/* CUDA kernel parameters are limited to 4 KB: buffers, int and float parameters are 8 bytes each
 * (plus err and rt). A CUDA group's count is exact: it is lowered once here (cuda_args). */
#define HZ_CUDA_ARGS 500

typedef struct hz_edges {
    int *from, *to;
    int n, cap;
    int cur;              /* the group whose reads are being collected */
    const fuse_plan *p;
    const st_node **seen; /* this group's loaded nodes (for its slot count) */
    int nseen, capseen;
} hz_edges;

static int push_edge(hz_edges *E, int from, int to) {
    int capto = E->cap;
    if (BASE_GROW(E->to, capto, E->n + 1, 64) != ST_OK || BASE_GROW(E->from, E->cap, E->n + 1, 64) != ST_OK)
        return -1;
    E->from[E->n] = from;
    E->to[E->n++] = to;
    return 0;
}

static int note_load(hz_edges *E, const st_node *s) {
    for (int i = 0; i < E->nseen; i++)
        if (E->seen[i] == s) return 0;
    if (BASE_GROW(E->seen, E->capseen, E->nseen + 1, 16) != ST_OK) return -1;
    E->seen[E->nseen++] = s;
    return 0;
}

/* Per node of the current group: an edge from each group whose buffer it loads, and the
 * loaded buffers. */
static st_status collect(st_node *n, void *ud) {
    hz_edges *E = ud;
    for (int k = 0; k < n->nsrc; k++) {
        st_node *s = n->src[k];
        if (!fuse_loads(E->p, s, E->cur)) continue;
        if (note_load(E, s)) return st_last_status();
        if (fuse_in_region(s) && push_edge(E, s->tag, E->cur)) return st_last_status();
    }
    return ST_OK;
}

typedef struct hz_info {
    int level;
    int slots;            /* buffers the group binds (loads + outputs) */
    int args;             /* CUDA argument words (buffers + parameters); past the cap: not batched */
    int pos;              /* position in the original order */
    int unit;             /* the launch it belongs to: itself or its batch */
} hz_info;

/* Pointwise groups; on the CPU small reduce groups too (a CPU kernel runs its parts one after
 * the other, each with its own parallel loops; a CUDA batch spreads its members over the blocks
 * of one grid, flat, which a reduce kernel's cooperative rows cannot be). Small: at most
 * HZ_REDUCE_MAX input elements, where a launch costs as much as the work. A big reduction keeps
 * its own place in the memory-aware order (partition.c order_groups): batched, the weight
 * gradients of a ResNet step's BatchNorms ran later with their batch-mates, their inputs alive
 * that much longer (the step's peak 155 -> 180 MB, bench_cnn.py --model resnet). */
enum { HZ_REDUCE_MAX = 1 << 16 };
static bool batchable(const fuse_plan *p, int g) {
    const fuse_group *G = &p->groups[g];
    if (G->nouts == 0) return false;
    return G->kind == FG_POINTWISE || (G->kind == FG_REDUCE && dev_target_of(G->outs[0]->rdev) == DEV_TARGET_C &&
                                       G->anchor->src[0]->numel <= HZ_REDUCE_MAX);
}

/* The argument words of CUDA group g's kernel; past HZ_CUDA_ARGS when it cannot be lowered (it
 * then stays alone, and its error is reported when exec lowers it). */
static int cuda_args(fuse_plan *p, int g) {
    fuse_launch L;
    if (fuse_lower(p, g, &L) != ST_OK) {
        st_clear_error();
        return HZ_CUDA_ARGS + 1;
    }
    int n = L.k.nbufs + L.k.nints + L.k.nflts;
    fuse_launch_free(&L);
    return n;
}

/* A new FG_HORIZONTAL group over members m[0..n): outs concatenated, members marked. */
static int make_batch(fuse_plan *p, const int *m, int n) {
    if (p->ngroups == p->capgroups) {
        int cap = p->capgroups * 2 + 16;
        fuse_group *g = st_realloc(p->groups, (size_t)cap * sizeof *g);
        if (!g) return -1;
        p->groups = g;
        p->capgroups = cap;
    }
    int nouts = 0;
    for (int i = 0; i < n; i++) nouts += p->groups[m[i]].nouts;
    fuse_group *B = &p->groups[p->ngroups];
    memset(B, 0, sizeof *B);
    B->kind = FG_HORIZONTAL;
    B->outs = st_malloc((size_t)nouts * sizeof *B->outs);
    B->out_side = st_calloc((size_t)nouts, 1);
    B->members = st_malloc((size_t)n * sizeof *B->members);
    if (!B->outs || !B->out_side || !B->members) {
        st_free(B->outs);
        st_free(B->out_side);
        st_free(B->members);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        fuse_group *G = &p->groups[m[i]];
        memcpy(B->outs + B->nouts, G->outs, (size_t)G->nouts * sizeof *G->outs);
        B->nouts += G->nouts;
        B->members[i] = m[i];
        G->batched = 1;
    }
    B->capouts = B->nouts;
    B->nmembers = n;
    B->ndim = p->groups[m[0]].ndim;
    memcpy(B->shape, p->groups[m[0]].shape, sizeof B->shape);
    return p->ngroups++;
}

/* Levels: ASAP over the edges in plan order, then sinks at max + 1. */
static void levels(const fuse_plan *p, hz_info *info, const int *out_off, const int *out_to) {
    int ng = p->ngroups, top = 0;
    for (int k = 0; k < ng; k++) {
        int g = p->order[k];
        for (int e = out_off[g]; e < out_off[g + 1]; e++)
            if (info[out_to[e]].level < info[g].level + 1) info[out_to[e]].level = info[g].level + 1;
        if (info[g].level > top) top = info[g].level;
    }
    for (int g = 0; g < ng; g++)
        if (out_off[g] == out_off[g + 1]) info[g].level = top + 1;
}

/* Batches the batchable groups of each level and device, in plan order, under the caps. */
static int form_batches(fuse_plan *p, hz_info *info, int ng0) {
    int *m = st_malloc((size_t)ng0 * sizeof *m);
    uint8_t *used = st_calloc((size_t)ng0, 1);
    int rc = m && used ? 0 : -1;
    for (int k = 0; k < ng0 && !rc; k++) {
        int a = p->order[k];
        if (used[a] || !batchable(p, a)) continue;
        int dev = p->groups[a].outs[0]->rdev, n = 0, slots = 0, args = 0;
        for (int j = k; j < ng0 && n < KIR_MAX_PARTS; j++) {
            int g = p->order[j];
            if (used[g] || !batchable(p, g) || info[g].level != info[a].level || p->groups[g].outs[0]->rdev != dev)
                continue;
            if (slots + info[g].slots > HZ_MAX_SLOTS) continue;
            if (dev_target_of(dev) == DEV_TARGET_CUDA && args + info[g].args > HZ_CUDA_ARGS) continue;
            slots += info[g].slots;
            args += info[g].args;
            m[n++] = g;
            used[g] = 1;
        }
        if (n < 2) continue;
        int b = make_batch(p, m, n);
        if (b < 0) rc = -1;
        for (int i = 0; i < n && !rc; i++) info[m[i]].unit = b;
    }
    st_free(m);
    st_free(used);
    return rc;
}

/* plan->order over the launches (batches and unbatched groups): Kahn's algorithm, the ready
 * launch with the earliest original position first. */
static st_status reorder(fuse_plan *p, const hz_info *info, int ng0, const hz_edges *E) {
    int ng = p->ngroups;
    int *unit = st_malloc((size_t)ng * sizeof *unit), *first = st_malloc((size_t)ng * sizeof *first);
    int *indeg = st_calloc((size_t)ng, sizeof *indeg);
    uint8_t *done = st_calloc((size_t)ng, 1);
    st_status s = ST_OK;
    if (!unit || !first || !indeg || !done) {
        s = st_last_status();
        goto out;
    }
    for (int g = 0; g < ng; g++) {
        unit[g] = g < ng0 ? info[g].unit : g;
        first[g] = INT32_MAX;
    }
    for (int g = 0; g < ng0; g++)
        if (info[g].pos < first[unit[g]]) first[unit[g]] = info[g].pos;
    for (int e = 0; e < E->n; e++) indeg[unit[E->to[e]]]++;
    int nl = 0;
    for (;;) {
        int pick = -1;
        for (int u = 0; u < ng; u++)
            if (unit[u] == u && !done[u] && indeg[u] == 0 && (pick < 0 || first[u] < first[pick])) pick = u;
        if (pick < 0) break;
        done[pick] = 1;
        p->order[nl++] = pick;
        for (int e = 0; e < E->n; e++)
            if (unit[E->from[e]] == pick) indeg[unit[E->to[e]]]--;
    }
    int want = 0;
    for (int u = 0; u < ng; u++) want += unit[u] == u;
    if (nl != want) s = st_error(ST_ERR_INTERNAL, "fuser: cycle between horizontal batches");
    p->norder = nl;
out:
    st_free(unit);
    st_free(first);
    st_free(indeg);
    st_free(done);
    return s;
}

st_status fuse_horizontal(fuse_plan *p) {
    int ng0 = p->ngroups;
    p->norder = ng0;
    if (!fuse_on(FUSE_HORIZONTAL) || ng0 < 2) return ST_OK;
    hz_edges E = {.p = p};
    hz_info *info = st_calloc((size_t)ng0, sizeof *info);
    int *out_off = st_calloc((size_t)ng0 + 1, sizeof *out_off), *out_to = NULL, *fill = NULL;
    st_status s = ST_OK;
    if (!info || !out_off) goto oom;
    for (int k = 0; k < ng0; k++) info[p->order[k]].pos = k;
    for (int g = 0; g < ng0; g++) {
        E.cur = g;
        E.nseen = 0;
        if ((s = fuse_group_nodes(p, g, collect, &E)) != ST_OK) goto out;
        info[g].unit = g;
        info[g].slots = E.nseen + p->groups[g].nouts;
        if (batchable(p, g) && dev_target_of(p->groups[g].outs[0]->rdev) == DEV_TARGET_CUDA) info[g].args = cuda_args(p, g);
    }
    /* outgoing edges per group (CSR) */
    out_to = st_malloc(((size_t)E.n + 1) * sizeof *out_to);
    fill = st_malloc(((size_t)ng0 + 1) * sizeof *fill);
    if (!out_to || !fill) goto oom;
    for (int e = 0; e < E.n; e++) out_off[E.from[e] + 1]++;
    for (int g = 0; g < ng0; g++) out_off[g + 1] += out_off[g];
    memcpy(fill, out_off, (size_t)ng0 * sizeof *fill);
    for (int e = 0; e < E.n; e++) out_to[fill[E.from[e]]++] = E.to[e];
    levels(p, info, out_off, out_to);
    if (form_batches(p, info, ng0)) goto oom;
    if (p->ngroups > ng0) s = reorder(p, info, ng0, &E);
    goto out;
oom:
    s = st_last_status();
out:
    st_free(E.from);
    st_free(E.to);
    st_free(E.seen);
    st_free(info);
    st_free(out_off);
    st_free(out_to);
    st_free(fill);
    return s;
}

/* ---- lowering: the members' kernels concatenated ---- */

/* The slot of buffer node x in L (a shared read slot when x is already bound for reading). */
static int batch_slot(fuse_launch *L, st_node *x, int dtype, int out) {
    kir_kernel *k = &L->k;
    for (int i = 0; i < k->nbufs && !out; i++)
        if (L->buf_node[i] == x && !k->buf_out[i]) return i;
    if (k->nbufs == KIR_MAX_BUFS) return -1;
    L->buf_node[k->nbufs] = x;
    k->buf_dtype[k->nbufs] = (uint8_t)dtype;
    k->buf_out[k->nbufs] = (uint8_t)out;
    return k->nbufs++;
}

static st_status append_params(fuse_launch *L, const fuse_launch *m) {
    if (m->k.nints) {
        int64_t *a = st_realloc(L->ints, (size_t)(L->k.nints + m->k.nints) * sizeof *a);
        if (!a) return st_last_status();
        memcpy(a + L->k.nints, m->ints, (size_t)m->k.nints * sizeof *a);
        L->ints = a;
    }
    if (m->k.nflts) {
        double *f = st_realloc(L->flts, (size_t)(L->k.nflts + m->k.nflts) * sizeof *f);
        if (!f) return st_last_status();
        memcpy(f + L->k.nflts, m->flts, (size_t)m->k.nflts * sizeof *f);
        L->flts = f;
    }
    return ST_OK;
}

static st_status append_member(fuse_launch *L, const fuse_launch *m) {
    int map[KIR_MAX_BUFS];
    for (int i = 0; i < m->k.nbufs; i++)
        if ((map[i] = batch_slot(L, m->buf_node[i], m->k.buf_dtype[i], m->k.buf_out[i])) < 0)
            return st_error(ST_ERR_INTERNAL, "horizontal kernel: more than %d buffers", KIR_MAX_BUFS);
    st_status s = append_params(L, m);   /* before kir_append moves nints/nflts */
    if (s == ST_OK) s = kir_append(&L->k, &m->k, map);
    if (s == ST_OK) L->work += m->work;
    return s;
}

st_status fuse_lower_horizontal(fuse_plan *p, int g, fuse_launch *out) {
    memset(out, 0, sizeof *out);
    fuse_group *B = &p->groups[g];
    /* a reduce member makes the batch a reduce kernel (its parts' loops are rendered as such) */
    out->k.kind = KK_POINTWISE;
    for (int i = 0; i < B->nmembers; i++)
        if (p->groups[B->members[i]].kind == FG_REDUCE) out->k.kind = KK_REDUCE;
    st_status s = ST_OK;
    for (int i = 0; i < B->nmembers && s == ST_OK; i++) {
        fuse_launch m;
        s = fuse_lower(p, B->members[i], &m);
        if (s != ST_OK) break;
        s = append_member(out, &m);
        if (i == 0 && s == ST_OK) { /* "k9_h12_mul_add": the batch, its size, its first member's ops */
            const char *ops = strchr(m.name, '_');
            snprintf(out->name, sizeof out->name, "k%d_h%d%.40s", g, B->nmembers, ops ? ops : "");
        }
        fuse_launch_free(&m);
    }
    if (s != ST_OK) {
        fuse_launch_free(out);
        return s;
    }
    snprintf(out->k.comment, sizeof out->k.comment, "horizontal; %d %smembers, %d outputs", B->nmembers,
             out->k.kind == KK_REDUCE ? "pointwise and reduce " : "pointwise ", B->nouts);
    kir_find_donors(&out->k);   /* over the whole batch: a member reading another's input rules it out */
    return ST_OK;
}
