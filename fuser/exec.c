/*
 * exec.c — fuse_execute: partition the region, lower and render every group, pick a tier, run.
 *
 * Tiers. Small regions (total work below st_rt.jit_min elements) whose kernels are not all
 * compiled already run group by group through the reference interpreter (interp_eval_node on
 * each node a group evaluates, with temporary buffers for values the group keeps internal), so
 * a REPL never waits for the compiler. Otherwise every kernel is fetched from the JIT in ONE
 * jit_get_kernels call (one compiler run for all missing ones) and launched in plan order. A
 * group the lowering cannot express runs through the interpreter in either tier on the CPU; on
 * a GPU (no interpreter next to its memory) the region is planned again with that group's nodes
 * cut apart (cut_group), so only an op with no GPU kernel at all is an error there.
 *
 * Plan cache (plan_cache.c). The region's key is looked up first: on a hit nothing is planned,
 * lowered, rendered or hashed; the entry's kernels run with fresh buffers and refreshed user
 * scalars, its interpreted groups evaluate their node lists. A miss plans as above and runs
 * through the same entry (fuse_pentry_new), which is cached. Both paths leave the nodes in the
 * same state. An entry that keeps coming back is hot (compile_if_hot): its interpreted groups
 * that have a kernel compile, so a small repeated step stops paying the interpreter.
 *
 * Background compiles (ST_JIT_ASYNC=1, the default, with the plan cache on). A region whose CPU
 * kernels are not all cached does not wait for the C compiler: the missing kernels' groups run
 * through the interpreter (the oracle: the same values, up to the rounding of a few reductions'
 * order) while one compiler run for all of them goes on as a child process; a later run of the
 * entry that finds it ended swaps the kernels in (finish_job: one pointer per group). So a first
 * epoch or a new REPL expression pays the interpreter's speed instead of the compiler's latency.
 * When the switch happens depends on the compiler's speed, so runs of one program may differ in
 * the last bits where an interpreted reduction rounds differently; ST_JIT_ASYNC=0 (the test
 * suite's setting) waits for the compiler and is deterministic.
 *
 * Invariant: on failure every buffer this call gave to a node is released and the node's buf
 * reset to NULL, except after an output took a dead input's buffer (donated_buffer): then the
 * values of the groups that completed are realized; temporaries never outlive their group.
 */
#include "fuser/fuser.h"
#include "jit/render.h"
#include "jit/nvrtc.h"
#include "device/cpu_pool.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct exec_state {
    fuse_plan plan;
    fuse_launch *launch;
    char **src;
    st_node **set;          /* nodes given a buffer by this call (released on failure) */
    int nset, capset;
    st_node **temps;        /* temporaries of the interpreter tier's current group */
    int ntemps, captemps;
    int donated;            /* outputs given a dead input's buffer (donated_buffer) */
    int nset_done;          /* set[0 .. nset_done): given by groups that completed */
    uint8_t *mat;           /* donated_buffer: per region position, written by a group of the plan
                             * (made at its first need in a run_entry, freed at its end) */
    uint8_t *reach;         /* kept_reader's scratch (region positions) */
} exec_state;

static st_status push_node(st_node ***arr, int *n, int *cap, st_node *x) {
    st_status s = BASE_GROW(*arr, *cap, *n + 1, 32);
    if (s == ST_OK) (*arr)[(*n)++] = x;
    return s;
}

static st_status give_buffer(exec_state *e, st_node *x, st_buffer *b) {
    if (!b) return st_last_status();
    x->buf = b;
    st_status s = push_node(&e->set, &e->nset, &e->capset, x);
    if (s != ST_OK) {
        st_buffer_release(b);
        x->buf = NULL;
    }
    return s;
}

static void drop_temps(exec_state *e) {
    for (int i = 0; i < e->ntemps; i++) {
        st_buffer_release(e->temps[i]->buf);
        e->temps[i]->buf = NULL;
    }
    e->ntemps = 0;
}

/* ---- interpreter tier ----
 * An interpreted group of an entry evaluates its node list in order: a node the group
 * materializes gets a buffer that outlives it, the others temporaries released after their last
 * reader in the plan group (fuse_inode.dies), and what is left at the end of each plan group (a
 * horizontal batch's members run one by one); a one-element broadcast only elementwise nodes
 * read, and a view only attentions read as their mask, are not evaluated at all (lazy_view). */

/* Node i of the plan group is a temporary broadcast of one element (interp_broadcast_elem) read
 * only by elementwise nodes of the group, or a view (interp_strided_view) read only as the mask of
 * attentions of the group: it is left unevaluated, and they read it in place (a scalar operand of
 * an optimizer's update, materialized, wrote and read the parameter's size again per scalar; a
 * (B, 1, 1, Lk) key padding mask would be expanded to (B, H, Lq, Lk)). Its src, when a temporary
 * that dies here, lives on to the group's end; a temporary src that dies elsewhere keeps the view
 * evaluated. */
static bool lazy_view(const exec_state *e, const st_region *r, const fuse_pgroup *pg, int i) {
    st_node *n = r->nodes[pg->nodes[i].pos];
    if (pg->nodes[i].keep) return false;
    const bool elem = interp_broadcast_elem(n) != NULL, mask = !elem && interp_strided_view(n);
    if (!elem && !mask) return false;
    /* a temporary src that another node releases (its last reader) would go before the readers */
    if (!(pg->nodes[i].dies & 1))
        for (int t = 0; t < e->ntemps; t++)
            if (e->temps[t] == n->src[0]) return false;
    int seen = 0;   /* its readers (n->uses of them, all in the group: n is a temporary) */
    for (int j = i + 1; j < pg->nnodes && seen < n->uses; j++) {
        const st_node *x = r->nodes[pg->nodes[j].pos];
        for (int k = 0; k < x->nsrc; k++) {
            if (x->src[k] != n) continue;
            if (elem ? !st_op_is_elementwise((st_op)x->op) : x->op != ST_OP_ATTN || k != 3) return false;
            seen++;
        }
    }
    return true;
}

static st_status run_interp_pgroup(exec_state *e, const st_region *r, const fuse_pgroup *pg) {
    st_status s = ST_OK;
    for (int i = 0; i < pg->nnodes && s == ST_OK; i++) {
        st_node *n = r->nodes[pg->nodes[i].pos];
        if (lazy_view(e, r, pg, i)) {
            if (pg->nodes[i].last) drop_temps(e);
            continue;
        }
        st_buffer *b = st_buffer_new(st_node_nbytes(n));
        if (!b) {
            s = st_last_status();
            break;
        }
        if (pg->nodes[i].keep) {
            s = give_buffer(e, n, b);
        } else {
            n->buf = b;
            if ((s = push_node(&e->temps, &e->ntemps, &e->captemps, n)) != ST_OK) {
                st_buffer_release(b);
                n->buf = NULL;
            }
        }
        if (s == ST_OK) s = interp_eval_node(n, n->buf);
        for (int k = 0; k < n->nsrc && s == ST_OK; k++)   /* temporaries read for the last time */
            if (pg->nodes[i].dies >> k & 1) {
                st_buffer_release(n->src[k]->buf);
                n->src[k]->buf = NULL;
            }
        if (pg->nodes[i].last) drop_temps(e);
    }
    drop_temps(e);
    st_stats_g.interp_groups += (uint64_t)pg->nplan;
    return s;
}

/* ---- JIT tier ---- */

/* The device group g runs on (its outputs' resolved device). */
static int group_dev(const exec_state *e, int g) { return e->plan.groups[g].outs[0]->rdev; }

/* The node bound to a slot of a plan-cache group: a region node or an external input. */
static st_node *bound_node(const st_region *r, const fuse_pkey *k, int32_t bind) {
    return bind >= 0 ? r->nodes[bind] : k->ext[-1 - bind];
}

/* Whether a node of region r that something outside the region holds (a handle, a later lazy
 * node) reads `in`, directly or through nodes that the flush leaves unrealized: evaluated later,
 * it would read `in` again. Realized at the end are the nodes a group of the plan writes that are
 * targets or held outside (the others may be released at their last reader, release_dead). */
static bool kept_reader(exec_state *e, const st_region *r, const st_node *in) {
    for (int i = 0; i < r->n; i++) {
        const st_node *n = r->nodes[i];
        const bool kept = fuse_kept(n);
        uint8_t reads = 0;
        for (int s = 0; s < n->nsrc && !reads; s++) {
            const st_node *src = n->src[s];
            reads = src == in || (src->op != ST_OP_BUFFER && e->reach[src->pos]);
        }
        e->reach[i] = reads && !(e->mat[i] && (kept || (n->flags & NODE_TARGET)));
        if (e->reach[i] && kept) return true;
    }
    return false;
}

/* The buffer that output x (region position pos) of group j of pe takes over from the input its
 * kernel names for it (kir_find_donors: that input's element is dead once x's is written), or
 * NULL: a CPU kernel; the input a realized tensor read from outside the region (an optimizer's
 * old parameter or moment, the gradient it consumes), of x's byte size, held by nothing but the
 * one node of this flush that reads it (no handle, no autograd record, no other reader: refcnt 1,
 * and its buffer by it alone), read by no later group (a cheap node inlined into two groups would
 * read it twice), and by no expression that outlives the flush unevaluated (kept_reader: `t = p *
 * 0.9` still held by a handle). Saves the new buffer and the reads that writing a fresh one costs
 * (a write to memory first reads each cache line). */
static st_buffer *donated_buffer(exec_state *e, const st_region *r, const fuse_pkey *k, const fuse_pentry *pe,
                                 int j, const fuse_pgroup *pg, int32_t pos, const st_node *x) {
    const kir_kernel *K = &pg->L.k;
    if (!pg->fn || !dev_host_memory(pg->dev)) return NULL;
    int so = -1;
    for (int s = 0; s < K->nbufs && so < 0; s++)
        if (K->buf_out[s] && pg->bind[s] == pos) so = s;
    if (so < 0 || !K->donor[so]) return NULL;
    if (!e->mat) {   /* the positions the plan writes, and kept_reader's scratch: at the first need */
        if (!(e->mat = st_calloc((size_t)r->n * 2 + 1, 1))) {
            st_clear_error();   /* no donation: only a missed saving */
            return NULL;
        }
        e->reach = e->mat + r->n;
        for (int g = 0; g < pe->ngroups; g++)
            for (int i = 0; i < pe->groups[g].nouts; i++) e->mat[pe->groups[g].outs[i]] = 1;
    }
    const int32_t bind = pg->bind[K->donor[so] - 1];
    if (bind >= 0) return NULL;
    st_node *in = bound_node(r, k, bind);
    if (in->op != ST_OP_BUFFER || in->refcnt != 1 || !in->buf || in->buf->refcnt != 1 ||
        in->buf->device != pg->dev || in->buf->nbytes != st_node_nbytes(x))
        return NULL;
    for (int j2 = j + 1; j2 < pe->ngroups; j2++) {
        const fuse_pgroup *q = &pe->groups[j2];
        if (q->interp) {
            for (int i = 0; i < q->nnodes; i++) {
                const st_node *n = r->nodes[q->nodes[i].pos];
                for (int s = 0; s < n->nsrc; s++)
                    if (n->src[s] == in) return NULL;
            }
        } else {
            for (int s = 0; s < q->L.k.nbufs; s++)
                if (q->bind[s] == bind) return NULL;
        }
    }
    if (kept_reader(e, r, in)) return NULL;
    return st_buffer_retain(in->buf);
}

/* Gives the group's outputs their buffers (on the group's device) and collects the buffer
 * pointers of every slot; a slot bound to another device's buffer is an error, never a launch. */
static st_status bind_buffers(exec_state *e, const st_region *r, const fuse_pkey *k, const fuse_pentry *pe,
                              int j, const fuse_pgroup *pg, void **bufs, size_t *bytes) {
    const fuse_launch *L = &pg->L;
    for (int i = 0; i < pg->nouts; i++) {
        st_node *x = r->nodes[pg->outs[i]];
        st_buffer *b = NULL;
        if (L->inplace && pg->outs[i] == pg->anchor) b = st_buffer_retain(x->src[0]->buf);
        else if ((b = donated_buffer(e, r, k, pe, j, pg, pg->outs[i], x))) e->donated++;
        else b = st_buffer_new_on(pg->dev, st_node_nbytes(x));
        st_status s = give_buffer(e, x, b);
        if (s != ST_OK) return s;
    }
    *bytes = 0;
    for (int i = 0; i < L->k.nbufs; i++) {
        st_node *x = bound_node(r, k, pg->bind[i]);
        ST_ASSERT(x->buf != NULL);
        if (x->buf->device != pg->dev) {
            char a[24], b[24];
            return st_error(ST_ERR_DEVICE, "kernel %s runs on %s but reads a tensor on %s (a value shared by "
                            "work on two devices in one flush: realize it first)", L->name,
                            st_dev_name(pg->dev, a, sizeof a), st_dev_name(x->buf->device, b, sizeof b));
        }
        bufs[i] = x->buf->data;
        *bytes += x->buf->nbytes;
    }
    return ST_OK;
}

static void debug_kernel_line(const st_region *r, const fuse_pgroup *pg, size_t bytes, double t0, int donated) {
    if (!(st_rt.debug & 2)) return;
    const st_node *o = r->nodes[pg->anchor >= 0 ? pg->anchor : pg->outs[0]];
    char sh[128], don[48] = "";
    if (donated) snprintf(don, sizeof don, " (%d of its inputs' buffers reused)", donated);
    fprintf(stderr, "stitch:   %-28s %-11s %-18s %10zu B %10.1f us  %s%s%s\n", pg->L.name, fuse_kind_names[pg->kind],
            st_shape_str(o->ndim, o->shape, sh, sizeof sh), bytes, (st_now_ms() - t0) * 1e3,
            dev_target_of(pg->dev) == DEV_TARGET_CUDA ? "cuda" : "jit", pg->L.inplace ? " (in place)" : "", don);
}

void fuse_index_error(char *buf, size_t cap, const char *op, const char *kernel) {
    snprintf(buf, cap, "%s: index out of range (kernel %s)", op, kernel);
}

/* One compiled group of a plan-cache entry: a CPU kernel, or a CUDA launch (compiled by NVRTC
 * through the cubin cache, launched on the device's stream). */
static st_status run_pgroup(exec_state *e, const st_region *r, const fuse_pkey *k, const fuse_pentry *pe, int j) {
    const fuse_pgroup *pg = &pe->groups[j];
    void *bufs[KIR_MAX_BUFS];
    size_t bytes;
    const int donated0 = e->donated;
    st_status s = bind_buffers(e, r, k, pe, j, pg, bufs, &bytes);
    if (s != ST_OK) return s;
    double t0 = st_now_ms();
    int err = 0;
    const char *op = pg->kind == FG_SCATTER ? "scatter_add" : "gather";
    if (dev_target_of(pg->dev) == DEV_TARGET_CUDA) {
        if ((s = exec_cuda_launch(&pg->L, pg->dev, pg->cuda, bufs, op)) != ST_OK) return s;
    } else {
        int ord;
        const st_device_ops *o = dev_ops(pg->dev, &ord);
        dev_call c = {.bufs = bufs, .ints = pg->L.ints, .flts = pg->L.flts, .nbufs = pg->L.k.nbufs,
                      .nints = pg->L.k.nints, .nflts = pg->L.k.nflts, .nthreads = dev_cpu_threads()};
        memcpy(&c.fn, &pg->fn, sizeof pg->fn);
        if ((s = o->launch(ord, &c, &err)) != ST_OK) return s;
    }
    debug_kernel_line(r, pg, bytes, t0, e->donated - donated0);
    if (err) {
        char what[160];
        fuse_index_error(what, sizeof what, op, pg->L.name);
        return st_error(ST_ERR_ARG, "%s", what);
    }
    return ST_OK;
}

static void debug_interp_line(const st_region *r, const fuse_pgroup *pg, double t0) {
    if (!(st_rt.debug & 2)) return;
    const st_node *o = r->nodes[pg->anchor >= 0 ? pg->anchor : pg->outs[0]];
    char sh[128];
    const char *name = pg->lowered && pg->L.name[0] ? pg->L.name : "(group)";
    fprintf(stderr, "stitch:   %-28s %-11s %-18s %10s   %10.1f us  interp\n", name, fuse_kind_names[pg->kind],
            st_shape_str(o->ndim, o->shape, sh, sizeof sh), "-", (st_now_ms() - t0) * 1e3);
}

/* Runs entry pe over region r: user scalars refreshed, node tags as the planning left them, then
 * every group in order (compiled ones launched, the others through the interpreter tier). */
/* The last group of pe that reads or writes each region node (-1: none), into last[r->n]: a
 * compiled group's bound buffers, an interpreted group's evaluated nodes and their sources. */
static void last_groups(const st_region *r, const fuse_pentry *pe, int32_t *last) {
    for (int i = 0; i < r->n; i++) last[i] = -1;
    for (int j = 0; j < pe->ngroups; j++) {
        const fuse_pgroup *pg = &pe->groups[j];
        if (pg->interp) {
            for (int i = 0; i < pg->nnodes; i++) {
                const st_node *n = r->nodes[pg->nodes[i].pos];
                last[pg->nodes[i].pos] = j;
                for (int s = 0; s < n->nsrc; s++)
                    if (n->src[s]->op != ST_OP_BUFFER) last[n->src[s]->pos] = j;
            }
        } else {
            for (int i = 0; i < pg->nouts; i++) last[pg->outs[i]] = j;
            for (int i = 0; i < pg->L.k.nbufs; i++)
                if (pg->bind[i] >= 0) last[pg->bind[i]] = j;
        }
    }
}

/* After group j: releases the buffers of the region values whose last reader it was and that
 * nothing else holds: not a target, no reference from outside the region (a tensor, an autograd
 * record, a lazy node of a later flush: refcnt is the value's in-region uses plus the flush's
 * own), in host memory (a GPU kernel may still be reading when the host gets here). Without
 * this every value a flush materialized lived to its end: a training step's peak was the sum of
 * all its intermediates. byl[j0[j] .. j0[j + 1]): the positions whose last group is j. */
static void release_dead(const st_region *r, const int32_t *byl, const int32_t *j0, int j) {
    for (int i = j0[j]; i < j0[j + 1]; i++) {
        st_node *x = r->nodes[byl[i]];
        if (!x->buf || (x->flags & NODE_TARGET) || x->refcnt != x->uses + 1 || !dev_host_memory(x->buf->device)) continue;
        st_buffer_release(x->buf);
        x->buf = NULL;
    }
}

static st_status run_entry(exec_state *e, st_region *r, const fuse_pkey *k, fuse_pentry *pe) {
    for (int i = 0; i < pe->n; i++) r->nodes[i]->tag = pe->tag[i];
    fuse_pentry_refresh(pe, r);
    int32_t *last = st_malloc(((size_t)r->n * 2 + (size_t)pe->ngroups + 2) * sizeof *last);
    int32_t *byl = last ? last + r->n : NULL, *j0 = last ? byl + r->n : NULL;
    if (last) {   /* positions bucketed by their last group (none: never released here) */
        last_groups(r, pe, last);
        memset(j0, 0, ((size_t)pe->ngroups + 2) * sizeof *j0);
        for (int i = 0; i < r->n; i++)
            if (last[i] >= 0) j0[last[i] + 2]++;
        for (int j = 0; j < pe->ngroups; j++) j0[j + 2] += j0[j + 1];
        for (int i = 0; i < r->n; i++)
            if (last[i] >= 0) byl[j0[last[i] + 1]++] = i;
    }
    st_status s = ST_OK;
    for (int j = 0; j < pe->ngroups && s == ST_OK; j++) {
        const fuse_pgroup *pg = &pe->groups[j];
        e->nset_done = e->nset;   /* groups 0 .. j-1 completed (an interrupt here keeps them) */
        if (st_rt.interrupted) {
            st_rt.interrupted = 0;
            s = st_error(ST_ERR_INTERRUPT, "interrupted");
            break;
        }
        if (pg->interp) {
            double t0 = st_now_ms();
            s = run_interp_pgroup(e, r, pg);
            debug_interp_line(r, pg, t0);
        } else {
            s = run_pgroup(e, r, k, pe, j);
        }
        st_stats_g.kernels_launched++;
        if (s == ST_OK && last) release_dead(r, byl, j0, j);
    }
    st_free(last);
    st_free(e->mat);
    e->mat = e->reach = NULL;
    return s;
}

/* Background compiles (ST_JIT_ASYNC): an entry's job, once the compiler has ended, installs its
 * kernels (each group still interpreted that it compiled), or, when it failed, leaves them
 * interpreted for good with one warning: the results stay right either way. block: wait for the
 * compiler (tests; bounded by ST_COMPILE_TIMEOUT and st_interrupt()). */
static void finish_job(fuse_pentry *pe, int block) {
    st_kernel_fn *fns = st_calloc((size_t)pe->njob, sizeof *fns);
    st_status s;
    if (!fns) { st_clear_error(); return; }   /* polled again on the next run */
    if (!jit_async_poll(pe->job, block, fns, &s)) { st_free(fns); return; }
    if (s == ST_OK) {
        for (int j = 0; j < pe->njob; j++)
            if (pe->groups[pe->job_groups[j]].interp) fuse_pgroup_compiled(pe, pe->job_groups[j], fns[j]);
    } else {
        fprintf(stderr, "stitch: compiling in the background failed; those kernels keep running in the "
                        "interpreter (ST_JIT_ASYNC=0 makes it an error): %s\n", st_last_error());
        st_clear_error();
        pe->ncompilable = 0;
        pe->job_failed = 1;
    }
    jit_async_free(pe->job);
    pe->job = NULL;
    st_free(pe->job_groups);
    pe->job_groups = NULL;
    pe->njob = 0;
    st_free(fns);
}

/* May this flush compile in the background: ST_JIT_ASYNC on and the entry kept by the plan cache
 * (a job lives with its entry; an entry dropped after one run would kill it)? */
static bool async_ok(void) { return st_rt.jit_async && fuse_pcache_enabled() && !fuse_graph_wanted(); }

/* An entry that runs again and still interprets groups that have a kernel compiles them (one
 * compiler run for all) once it is hot: run st_rt.jit_hot times (0: never), or its work is no
 * longer below st_rt.jit_min. A small model's step thus stops paying the interpreter after a
 * few steps, whatever its size. `planned`: the call right after a miss planned it (not a run to
 * count; a region of jit_min work or more left groups interpreted only to compile them in the
 * background). With async_ok() the compiler runs in the background (finish_job swaps the kernels
 * in on a later run once it has ended; a planned entry's job gives its compiler up to one of an
 * entry that runs again: jit/jit.h); else this call waits for it. A compile that fails leaves
 * the entry interpreting (the region still runs; a note under ST_DEBUG) and is not tried again
 * for it; an interrupted one fails the flush as an interrupt (st_rt.interrupted set again) and
 * may be tried again later. */
static void compile_if_hot(fuse_pentry *pe, bool planned) {
    if (pe->job) {
        finish_job(pe, 0);
        return;
    }
    if (!pe->ncompilable) return;
    if (!planned) pe->runs++;
    if (!((st_rt.jit_hot > 0 && pe->runs >= (uint64_t)st_rt.jit_hot) || pe->work >= st_rt.jit_min)) return;
    int n = pe->ncompilable, nj = 0;
    bool async = async_ok();
    char **src = st_calloc((size_t)n, sizeof *src);
    const char **hint = st_calloc((size_t)n, sizeof *hint);
    int *idx = st_calloc((size_t)n, sizeof *idx);
    st_kernel_fn *fns = st_calloc((size_t)n, sizeof *fns);
    st_status s = src && hint && idx && fns ? ST_OK : st_last_status();
    for (int g = 0; g < pe->ngroups && s == ST_OK; g++) {
        fuse_pgroup *pg = &pe->groups[g];
        if (!pg->interp || !pg->lowered) continue;
        if (!(src[nj] = render_c(&pg->L.k))) s = st_last_status();
        hint[nj] = pg->L.name;
        idx[nj++] = g;
    }
    jit_async *job = NULL;
    if (s == ST_OK) s = async ? jit_async_start(nj, (const char **)src, hint, !planned, fns, &job)
                              : jit_get_kernels(nj, (const char **)src, hint, fns);
    if (s == ST_OK) {
        for (int j = 0; j < nj; j++)
            if (fns[j]) fuse_pgroup_compiled(pe, idx[j], fns[j]);   /* (async: the ones cached) */
        if (job) {
            pe->job = job;
            pe->job_groups = idx;
            pe->njob = nj;
            idx = NULL;
        }
    } else if (s == ST_ERR_INTERRUPT) {
        st_clear_error();
        st_rt.interrupted = 1; /* the compile consumed it: run_entry's next check reports it */
        pe->runs = 0;          /* and tries again once hot again */
    } else {
        if (st_rt.debug) fprintf(stderr, "stitch: a hot plan stays interpreted: %s\n", st_last_error());
        st_clear_error();
        pe->ncompilable = 0;   /* not again */
    }
    for (int j = 0; j < nj; j++) st_free(src[j]);
    st_free(src);
    st_free(hint);
    st_free(idx);
    st_free(fns);
}

/* Regions run by interp_execute because planning failed with ST_ERR_INTERNAL (a bug in the
 * fuser, e.g. a cycle between groups). The fallback keeps the user's result; this count lets the
 * fuzzer and tests treat every fallback as a failure. */
static uint64_t plan_fallbacks;

uint64_t fuse_plan_fallbacks(void) { return plan_fallbacks; }

/* A group with no kernel on a device without an interpreter (a GPU) is split: every node it
 * evaluates is cut apart (each stored by a group of its own) and the region planned again, so
 * a program that runs on the CPU runs on the GPU. Marks group g's nodes in *cut (allocated on
 * first use, one byte per region position); returns how many were not cut already (0: g was a
 * single node, so splitting cannot help), or -1 on OOM. */
static int cut_group(const fuse_plan *p, int g, uint8_t **cut) {
    if (!*cut && !(*cut = st_calloc((size_t)p->r->n + 1, 1))) return -1;
    const fuse_group *G = &p->groups[g];
    int more = 0;
    for (int i = 0; i < p->r->n; i++) {
        int t = p->r->nodes[i]->tag, in = t == g;
        for (int m = 0; m < G->nmembers && !in; m++) in = t == G->members[m];   /* FG_HORIZONTAL */
        if (in && !(*cut)[i]) {
            (*cut)[i] = 1;
            more++;
        }
    }
    return more;
}

st_status fuse_execute(st_region *r) {
    exec_state e;
    memset(&e, 0, sizeof e);
    fuse_pkey key;
    memset(&key, 0, sizeof key);
    fuse_pentry *pe = NULL;
    st_kernel_fn *fns = NULL;
    const char **jsrc = NULL, **jhint = NULL;
    int *jidx = NULL;
    uint8_t *interp = NULL;
    uint8_t *cut = NULL;   /* nodes cut apart after a group had no GPU kernel (cut_group) */
    jit_async_reap();      /* background compilers that ended: their kernels in, their slots free */

    /* the key is built even with the cache off: slots bind through its external input list */
    st_status s = fuse_pkey_build(r, &key);
    if (s != ST_OK) goto done;
    /* a wanted fusion graph needs the lowered plan: no cache lookup then */
    if (fuse_pcache_enabled() && !fuse_graph_wanted() && (pe = fuse_pcache_find(&key))) {
        st_stats_g.plan_cache_hits++;
        compile_if_hot(pe, false);
        s = run_entry(&e, r, &key, pe);
        pe = NULL;   /* the cache's */
        goto done;
    }

    int any_cuda = 0;
    for (int i = 0; i < r->n; i++) any_cuda |= !dev_host_memory(r->nodes[i]->rdev);
replan:
    s = fuse_partition(r, &e.plan, cut);
    if (s == ST_ERR_INTERNAL && !any_cuda) {
        /* a planning bug must not cost the user a result: run the region op by op */
        plan_fallbacks++;
        if (st_rt.debug) fprintf(stderr, "stitch: %s; running the interpreter\n", st_last_error());
        fuse_plan_free(&e.plan);
        fuse_pkey_free(&key);
        for (int i = 0; i < r->n; i++) r->nodes[i]->tag = -1;
        return interp_execute(r);
    }
    if (s != ST_OK) goto done;
    st_stats_g.plans_built++;
    int ng = e.plan.ngroups;
    e.launch = st_calloc((size_t)ng + 1, sizeof *e.launch);
    e.src = st_calloc((size_t)ng + 1, sizeof *e.src);
    fns = st_calloc((size_t)ng + 1, sizeof *fns);
    jsrc = st_calloc((size_t)ng + 1, sizeof *jsrc);
    jhint = st_calloc((size_t)ng + 1, sizeof *jhint);
    jidx = st_calloc((size_t)ng + 1, sizeof *jidx);
    interp = st_calloc((size_t)ng + 1, 1);
    if (!e.launch || !e.src || !fns || !jsrc || !jhint || !jidx || !interp) {
        s = st_last_status();
        goto done;
    }
    /* lower and render */
    int64_t work = 0;
    int nj = 0;
    for (int g = 0; g < ng; g++) {
        fuse_group *G = &e.plan.groups[g];
        if (G->batched) continue;   /* lowered as a part of its FG_HORIZONTAL group */
        s = G->kind == FG_HORIZONTAL ? fuse_lower_horizontal(&e.plan, g, &e.launch[g])
                                     : fuse_lower(&e.plan, g, &e.launch[g]);
        if (s == ST_ERR_OOM) goto done;
        if (s != ST_OK && !dev_host_memory(group_dev(&e, g))) { /* no interpreter next to a GPU's memory */
            int more = cut_group(&e.plan, g, &cut);
            if (more < 0) {
                s = st_last_status();
                goto done;
            }
            if (more == 0) {
                s = st_error(ST_ERR_DEVICE, "cuda: %s (an op with no GPU kernel; run it on the cpu)", st_last_error());
                goto done;
            }
            if (st_rt.debug) fprintf(stderr, "stitch: group %d: %s; planning again with its %d nodes apart\n", g,
                                     st_last_error(), more);
            st_clear_error();
            for (int j = 0; j < ng; j++) fuse_launch_free(&e.launch[j]);
            for (int j = 0; j < ng; j++) st_free(e.src[j]);
            st_free(e.launch);
            st_free(e.src);
            st_free(fns);
            st_free(jsrc);
            st_free(jhint);
            st_free(jidx);
            st_free(interp);
            e.launch = NULL;
            e.src = NULL;
            fns = NULL;
            jsrc = jhint = NULL;
            jidx = NULL;
            interp = NULL;
            fuse_plan_free(&e.plan);
            goto replan;
        }
        if (s != ST_OK) {
            if (st_rt.debug & 2) fprintf(stderr, "stitch: group %d: %s (interpreter)\n", g, st_last_error());
            st_clear_error();
            G->interp = 1;
            for (int i = 0; i < G->nouts; i++) work += G->outs[i]->numel;
            s = ST_OK;
            continue;
        }
        if (jit_nvrtc_check_enabled()) /* CI: CUDA codegen checked without a GPU (reported at exit) */
            jit_nvrtc_check(&e.launch[g].k, e.launch[g].name);
        if (dev_target_of(group_dev(&e, g)) != DEV_TARGET_C) continue;   /* compiled by NVRTC when it runs */
        if (!(e.src[g] = render_c(&e.launch[g].k))) {
            s = st_last_status();
            goto done;
        }
        work += e.launch[g].work;
        jsrc[nj] = e.src[g];
        jhint[nj] = e.launch[g].name;
        jidx[nj++] = g;
    }

    /* tier */
    int use_jit = nj > 0;
    int probed = 0; /* small region: JIT only if every kernel is cached (the probe's hits count) */
    if (use_jit && work < st_rt.jit_min) {
        for (int j = 0; j < nj && use_jit; j++) use_jit = (fns[jidx[j]] = jit_lookup(jsrc[j], 1)) != NULL;
        probed = use_jit;
        if (!use_jit)
            for (int j = 0; j < nj; j++) fns[jidx[j]] = NULL;
    }
    bool async = use_jit && !probed && async_ok();
    if (async) {
        /* the kernels a cache holds run now; the others' groups run in the interpreter while
         * compile_if_hot (below) compiles them in the background */
        for (int j = 0; j < nj; j++) fns[jidx[j]] = jit_lookup(jsrc[j], 1);
    } else if (use_jit && !probed) {
        st_kernel_fn *tmp = st_calloc((size_t)nj, sizeof *tmp);
        if (!tmp) {
            s = st_last_status();
            goto done;
        }
        s = jit_get_kernels(nj, jsrc, jhint, tmp);
        for (int j = 0; j < nj && s == ST_OK; j++) fns[jidx[j]] = tmp[j];
        st_free(tmp);
        if (s != ST_OK) goto done;
    }

    if (fuse_graph_wanted()) fuse_graph_emit(&e.plan, e.launch, use_jit); /* ST_GRAPH, st_graph */

    /* run: groups without a CPU kernel or a GPU go to the interpreter */
    for (int g = 0; g < ng; g++) interp[g] = dev_target_of(group_dev(&e, g)) == DEV_TARGET_C && !fns[g];
    if (!(pe = fuse_pentry_new(&e.plan, e.launch, fns, interp, &key, work))) {
        s = st_last_status();
        goto done;
    }
    if (async) compile_if_hot(pe, true);
    s = run_entry(&e, r, &key, pe);
    if (s == ST_OK && fuse_pcache_enabled()) {
        if (fuse_pcache_insert(pe, &key) != ST_OK) st_clear_error();   /* only a later miss */
        pe = NULL;
    }

done:
    jit_nvrtc_check_flush();   /* CI check mode: this flush's CUDA kernels (never left for exit) */
    if (s != ST_OK) {
        drop_temps(&e);
        /* A donated buffer's old value is gone, so the groups that completed are kept: their
         * values are realized (a retry reads them, never the overwritten input); the rest is
         * dropped as always. Without a donation nothing was overwritten: everything is dropped
         * and a retry recomputes it from the inputs. */
        for (int i = 0; i < e.nset; i++) {
            st_node *x = e.set[i];
            if (e.donated && i < e.nset_done && x->buf) {
                st_node_realize(x, x->buf);
                continue;
            }
            st_buffer_release(x->buf);
            x->buf = NULL;
        }
    }
    if (e.launch)
        for (int g = 0; g < e.plan.ngroups; g++) fuse_launch_free(&e.launch[g]);
    if (e.src)
        for (int g = 0; g < e.plan.ngroups; g++) st_free(e.src[g]);
    fuse_pentry_free(pe);
    fuse_pkey_free(&key);
    st_free(e.launch);
    st_free(e.src);
    st_free(e.set);
    st_free(e.temps);
    st_free(fns);
    st_free(jsrc);
    st_free(jhint);
    st_free(jidx);
    st_free(interp);
    st_free(cut);
    fuse_plan_free(&e.plan);
    return s;
}
