/*
 * flush.c — sync points: collect the region a set of targets needs, execute it, realize results.
 *
 * Invariants: the region holds exactly the unrealized nodes reachable from the targets, in a
 * topological order (srcs first); every region node is retained for the whole flush (a garbage
 * collector running inside an allocation cannot free it); after a successful flush every target is
 * a realized BUFFER node, and so is every node the executor chose to materialize.
 */
#include "runtime/tensor.h"
#include "fuser/fuser.h"

static uint64_t flush_epoch;

/* Iterative post-order DFS from the targets over unrealized nodes. */
static st_status collect(int nt, st_node *const *targets, st_region *r) {
    uint64_t epoch = ++flush_epoch;
    int cap = 0, n = 0, top = 0, scap = 0;
    st_node **order = NULL;
    struct frame { st_node *n; int next; } *stack = NULL;
    if (BASE_GROW(order, cap, 64, 64) != ST_OK || BASE_GROW(stack, scap, 64, 64) != ST_OK) goto oom;
    for (int t = 0; t < nt; t++) {
        st_node *root = targets[t];
        if (root->op == ST_OP_BUFFER) continue;
        root->flags |= NODE_TARGET;
        if (root->epoch == epoch) continue;
        root->epoch = epoch;
        stack[top++] = (struct frame){root, 0};
        while (top) {
            struct frame *f = &stack[top - 1];
            if (f->next < f->n->nsrc) {
                st_node *s = f->n->src[f->next++];
                if (s->op == ST_OP_BUFFER || s->epoch == epoch) continue;
                s->epoch = epoch;
                if (BASE_GROW(stack, scap, top + 1, 64) != ST_OK) goto oom;
                stack[top++] = (struct frame){s, 0};
                continue;
            }
            if (BASE_GROW(order, cap, n + 1, 64) != ST_OK) goto oom;
            f->n->pos = n;
            f->n->uses = 0;
            order[n++] = f->n;
            top--;
        }
    }
    st_free(stack);
    for (int i = 0; i < n; i++) {
        st_node *x = order[i];
        for (int k = 0; k < x->nsrc; k++)
            if (x->src[k]->op != ST_OP_BUFFER) x->src[k]->uses++;
        if (x->flags & NODE_TARGET) r->ntargets++;
    }
    r->nodes = order;
    r->n = n;
    return ST_OK;
oom:
    for (int t = 0; t < nt; t++) targets[t]->flags &= ~NODE_TARGET;
    st_free(order);
    st_free(stack);
    return st_last_status();
}

/* A VIEW that reads its source's layout unchanged (a reshape: same dtype and element count,
 * contiguous strides, no offset or mask) can share its source's buffer, unless it is bound to a
 * device its source is not (st_to_dev's move of an unbound value: sharing would compute the value
 * on the default device and leave the "moved" tensor there). */
static int is_alias_view(const st_node *n) {
    if (n->op != ST_OP_VIEW || n->arg.view.has_mask || n->arg.view.offset != 0) return 0;
    const st_node *s = n->src[0];
    if (st_node_dev(n) != ST_DEV_ANY && st_node_dev(s) != st_node_dev(n)) return 0;
    return s->numel == n->numel && s->dtype == n->dtype &&
           st_is_contiguous_view(n->ndim, n->shape, n->arg.view.strides);
}

static st_status flush_region(int nt, st_node *const *targets);

static st_status flush_targets(int nt, st_node *const *targets);

/* The targets and the written state (tensor.h): storages that in-place writes left pending. */
st_status st_flush_nodes(int nt, st_node *const *targets) {
    st_runtime_init();
    st_node **w;
    int nw = st_written_nodes(&w);
    if (nw < 0) return st_last_status();
    if (nw == 0) {
        st_status s = flush_targets(nt, targets);
        st_written_clear();
        return s;
    }
    st_node **all = st_malloc((size_t)(nt + nw) * sizeof *all);
    if (!all) {
        st_free(w);
        return st_last_status();
    }
    if (nt) memcpy(all, targets, (size_t)nt * sizeof *all);
    memcpy(all + nt, w, (size_t)nw * sizeof *all);
    st_free(w);
    st_status s = flush_targets(nt + nw, all);
    st_free(all);
    st_written_clear();
    return s;
}

/* Targets that are reshapes of other nodes are realized by sharing their source's buffer: the
 * source becomes the target instead (no copy kernel), then the view adopts its buffer. */
static st_status flush_targets(int nt, st_node *const *targets) {
    int naliased = 0;
    for (int i = 0; i < nt; i++) naliased += is_alias_view(targets[i]);
    if (!naliased) return flush_region(nt, targets);
    st_node **bases = st_malloc((size_t)nt * sizeof *bases);
    if (!bases) return st_last_status();
    for (int i = 0; i < nt; i++) {
        st_node *b = targets[i];
        while (is_alias_view(b)) b = b->src[0];
        bases[i] = b;
    }
    st_status s = flush_region(nt, bases);
    if (s == ST_OK)
        for (int i = 0; i < nt; i++) {
            st_node *t = targets[i];
            if (t != bases[i] && t->op != ST_OP_BUFFER) st_node_realize(t, st_buffer_retain(bases[i]->buf));
        }
    st_free(bases);
    return s;
}

/* Decides where each region node runs (rdev): its bound device; else the device of a consumer in
 * the region (a fill or a random tensor is computed where it is used); else the default device.
 * Consumers come after their sources in the region's order, so one backward walk suffices.
 * Returns whether any node runs on a device whose memory the interpreter cannot touch. */
static int resolve_devices(st_region *r) {
    int gpu = 0;
    for (int i = 0; i < r->n; i++) r->nodes[i]->rdev = (int8_t)st_node_dev(r->nodes[i]);
    for (int i = r->n - 1; i >= 0; i--) {
        st_node *x = r->nodes[i];
        if (x->rdev == ST_DEV_ANY) x->rdev = (int8_t)st_default_dev();
        gpu |= !dev_host_memory(x->rdev);
        for (int k = 0; k < x->nsrc; k++)
            if (x->src[k]->op != ST_OP_BUFFER && x->src[k]->rdev == ST_DEV_ANY) x->src[k]->rdev = x->rdev;
    }
    return gpu;
}

static st_status flush_region(int nt, st_node *const *targets) {
    st_region r = {0};
    st_status s = collect(nt, targets, &r);
    if (s != ST_OK || r.n == 0) {
        st_free(r.nodes);
        return s;
    }
    for (int i = 0; i < r.n; i++) st_node_retain(r.nodes[i]);
    double t0 = st_now_ms();
    uint64_t launched0 = st_stats_g.kernels_launched, compiled0 = st_stats_g.kernels_compiled;
    uint64_t hits0 = st_stats_g.cache_hits_memory + st_stats_g.cache_hits_disk;
    uint64_t plan_hits0 = st_stats_g.plan_cache_hits;
    int gpu = resolve_devices(&r);   /* the interpreter cannot touch GPU memory: eager mode is CPU-only */
    s = st_rt.eager && !gpu ? interp_execute(&r) : fuse_execute(&r);
    if (s == ST_OK) {
        for (int i = 0; i < r.n; i++) {
            st_node *x = r.nodes[i];
            ST_ASSERT(!(x->flags & NODE_TARGET) || x->buf);
            if (x->buf) st_node_realize(x, x->buf);
        }
    } else {
        for (int i = 0; i < r.n; i++) { /* executors clean up; this is belt and braces */
            if (r.nodes[i]->op == ST_OP_BUFFER) continue;   /* kept by the executor (fuser/exec.c) */
            st_buffer_release(r.nodes[i]->buf);
            r.nodes[i]->buf = NULL;
        }
    }
    for (int i = 0; i < r.n; i++) r.nodes[i]->flags &= ~NODE_TARGET;
    double ms = st_now_ms() - t0;
    st_stats_g.flushes++;
    st_stats_g.exec_ms += ms;
    if (st_rt.debug & 1)
        fprintf(stderr,
                "stitch: flush %llu: %d nodes, %d targets, %llu kernels (%llu compiled, %llu cached), "
                "%s, %.2f ms%s\n",
                (unsigned long long)st_stats_g.flushes, r.n, r.ntargets,
                (unsigned long long)(st_stats_g.kernels_launched - launched0),
                (unsigned long long)(st_stats_g.kernels_compiled - compiled0),
                (unsigned long long)(st_stats_g.cache_hits_memory + st_stats_g.cache_hits_disk - hits0),
                st_rt.eager && !gpu ? "eager"
                : st_stats_g.plan_cache_hits != plan_hits0 ? "fused, plan cached" : "fused, planned",
                ms, s == ST_OK ? "" : " (failed)");
    for (int i = 0; i < r.n; i++) st_node_release(r.nodes[i]);
    st_free(r.nodes);
    return s;
}
