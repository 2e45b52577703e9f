/*
 * cost.c — the fuser's cost model: bytes moved and launches (docs/fusion.md "Cost model").
 *
 * The partition's fixed rules (partition.c) already follow FusionStitching's criteria where no
 * estimate is needed: fusing never adds bytes or launches there, and free nodes (views,
 * constants, counter-based RNG) cost nothing to recompute, so every reader evaluates them
 * inline. This file gives the estimates a name and makes one decision the rules cannot: whether
 * a *row value* (a reduction's result, or elementwise ops of it at its element count: a
 * layernorm's mean and rstd) that a handle outside the region keeps alive is written now, as an
 * extra output of the kernel computing its rows, or recomputed if it is ever read.
 *
 *   write now:       bytes(x)
 *   recompute later: the bytes its reductions re-read (row_len x bytes(x) each) + one launch
 *
 * Writing wins when recompute >= FUSE_COST_K x write. K = 16 because the write is paid on every
 * flush while the recompute only happens if the value is read again, and a live handle does not
 * say it will be (autograd records retain every input of a grad-requiring op): with K = 16 a
 * stored value adds at most 1/16 of the bytes its kernel already reads (its rows), a bounded loss
 * when no one reads it, against a whole re-read plus a launch saved when the backward does.
 * Big elementwise values are never candidates (recomputing one reads about its own bytes, and
 * storing them is what the rejected attempt did: docs/fusion.md "Not done yet").
 * Invariant: everything here reads the plan and node structure only; the one refcnt read is in
 * partition.c and its bit is in the plan cache key (fuse_row_value says for which nodes).
 */
#include "fuser/fuser.h"

bool fuse_cost_store_wins(int64_t write_bytes, int64_t reread_bytes) {
    return reread_bytes + FUSE_COST_LAUNCH_BYTES >= (int64_t)FUSE_COST_K * write_bytes;
}

bool fuse_row_value(const st_node *x, const uint8_t *rowval) {
    if (st_ops[x->op].kind == OPK_REDUCE) return true;
    if (!st_op_is_elementwise((st_op)x->op)) return false;
    for (int k = 0; k < x->nsrc; k++) {
        const st_node *s = x->src[k];
        if (fuse_in_region(s) && rowval[s->pos] && s->numel == x->numel) return true;
    }
    return false;
}

enum { CONE_MAX = 64 };   /* nodes walked under one row value: beyond, no decision (-1) */

int fuse_cost_row_home(fuse_plan *p, const st_node *x, int64_t *reread) {
    const st_node *stack[CONE_MAX];
    int top = 0, seen = 0, home = -1, stored = -1;
    uint32_t st = ++p->stamp_now;
    *reread = 0;
    stack[top++] = x;
    p->stamp[x->pos] = st;
    while (top) {
        const st_node *y = stack[--top];
        if (++seen > CONE_MAX) return -1;
        if (st_ops[y->op].kind == OPK_REDUCE) { /* computed in its group's rows: stop here */
            if (y->tag < 0 || (home >= 0 && y->tag != home) || y->numel != x->numel) return -1;
            home = y->tag;
            *reread += (int64_t)st_node_nbytes(y->src[0]);
            continue;
        }
        if (!fuse_is_free(p, y)) { /* evaluated at the row's index in the epilogue */
            if (!st_op_is_elementwise((st_op)y->op) || y->numel != x->numel) return -1;
            if (y != x && p->mat[y->pos]) { /* a stored value: loadable only from home itself */
                if (stored >= 0 && y->tag != stored) return -1;
                stored = y->tag;
            }
        }
        for (int k = 0; k < y->nsrc; k++) {
            const st_node *s = y->src[k];
            if (!fuse_in_region(s) || p->stamp[s->pos] == st) continue;
            if (top == CONE_MAX) return -1;
            p->stamp[s->pos] = st;
            stack[top++] = s;
        }
    }
    if (home < 0 || (stored >= 0 && stored != home) || p->groups[home].kind != FG_REDUCE ||
        p->groups[home].batched || p->groups[home].anchor->numel != x->numel)
        return -1;
    return home;
}

/* ---- per-group estimates ---- */
typedef struct cost_walk {
    fuse_plan *p;
    int g;
    fuse_cost c;
    const st_node *loaded[64];   /* buffers counted so far (each once); beyond 64, counted again */
    int nloaded;
} cost_walk;

static st_status count_loads(st_node *y, void *ud) {
    cost_walk *w = ud;
    for (int k = 0; k < y->nsrc; k++) {
        const st_node *s = y->src[k];
        if (!fuse_loads(w->p, s, w->g)) continue;
        bool dup = false;
        for (int i = 0; i < w->nloaded && !dup; i++) dup = w->loaded[i] == s;
        if (dup) continue;
        if (w->nloaded < (int)(sizeof w->loaded / sizeof w->loaded[0])) w->loaded[w->nloaded++] = s;
        w->c.read += (int64_t)st_node_nbytes(s);
    }
    return ST_OK;
}

fuse_cost fuse_cost_group(fuse_plan *p, int g) {
    const fuse_group *G = &p->groups[g];
    fuse_cost c = {0, 0, 0, G->batched ? 0 : 1};
    if (G->kind == FG_HORIZONTAL) {
        for (int m = 0; m < G->nmembers; m++) {
            fuse_cost mc = fuse_cost_group(p, G->members[m]);
            c.read += mc.read;
            c.written += mc.written;
            c.work += mc.work;
        }
        return c;
    }
    cost_walk w = {.p = p, .g = g};
    if (fuse_group_nodes(p, g, count_loads, &w) == ST_OK) c.read = w.c.read;
    for (int i = 0; i < G->nouts; i++) c.written += (int64_t)st_node_nbytes(G->outs[i]);
    const st_node *a = G->anchor;
    if (G->kind == FG_REDUCE) c.work = a->src[0]->numel;
    else if (G->kind == FG_MATMUL) c.work = a->numel * a->src[0]->shape[a->src[0]->ndim - 1];
    else if (G->kind == FG_ATTN) {   /* Lk (E + Ev) multiply-adds per query row */
        int64_t rows = 1;
        for (int d = 0; d < a->ndim - 1; d++) rows *= a->shape[d];
        c.work = rows * a->src[1]->shape[a->ndim - 2] * (a->src[0]->shape[a->ndim - 1] + a->shape[a->ndim - 1]);
    }
    else if (G->kind == FG_POINTWISE) c.work = st_shape_numel(G->ndim, G->shape);
    else c.work = (a ? a : G->outs[0])->numel;
    return c;
}

/* The size of the code a node adds to a kernel's body, in units of one plain arithmetic op
 * (FUSE_MAX_WORK caps a group's sum: partition.c). Measured with gcc -O3 -march=native on
 * kernels of k independent same-shape outputs (bench/NOTES.md "Kernel size cap"): sine and
 * cosine (range reduction, inlined) and the normal draw (Philox, a log, a cosine) weigh 128,
 * a uniform or integer draw (ten Philox rounds, unrolled) 64, the other COST_HIGH ops (exp,
 * log, tanh, pow, erf, GELU...) 8. Views and constants cost nothing. */
int fuse_node_work(const st_node *n) {
    switch (n->op) {
    case ST_OP_VIEW: case ST_OP_CONST: return 0;
    case ST_OP_SIN: case ST_OP_COS: case ST_OP_RAND_N: return 128;
    case ST_OP_RAND_U: case ST_OP_RAND_INT: return 64;
    default: return st_ops[n->op].cost == COST_HIGH ? 8 : 1;
    }
}
