/*
 * graph.c — fusion graphs: a flushed region's plan written in Graphviz dot (docs/fusion.md,
 * "Seeing the plan"), for ST_GRAPH=path and st_graph() (runtime/graph.c).
 *
 * The picture: one `subgraph cluster_gN` per group (kernel kN), labelled with its step in the
 * execution order, kernel name, kind, domain, device and tier; inside, the nodes the group
 * evaluates (node->tag == N), materialized ones with a double border; free nodes (views,
 * constants: evaluated inline by every group that reads them) outside any cluster, dashed;
 * realized buffers the region reads as grey input nodes; edges src -> consumer, bold where a
 * value crosses kernels through memory.
 *
 * Invariants: emission never fails a flush (ST_GRAPH problems are a one-time stderr note;
 * st_graph reports its own file errors after the flush); output is a function of the plan only
 * (region positions, input ranks by creation order), so the same program gives the same file.
 * ST_GRAPH writes a plan only when its structural signature (every node's op, dtype, shape,
 * group and srcs, every kernel's name: never data or constant values) was not written before,
 * so a training loop's repeated flushes add nothing; at most GRAPH_MAX_FILES files.
 */
#include "fuser/fuser.h"

#include <errno.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

enum { GRAPH_MAX_FILES = 100 };


/* ST_GRAPH state: read once (fuse_graph_set_auto overrides it). */
static struct {
    int inited;
    char *path;                        /* NULL: off */
    int nfiles;                        /* files written */
    uint64_t sigs[GRAPH_MAX_FILES];    /* their plans' signatures */
    int noted;                         /* the one stderr note was printed (then: off) */
} autog;

/* st_graph's one-shot target during its flush. */
static struct {
    FILE *f;
    int written;
} oneshot;

static void auto_init(void) {
    if (autog.inited) return;
    autog.inited = 1;
    const char *env = base_env(SET_GRAPH);
    if (env) autog.path = st_strdup(env);   /* OOM: ST_GRAPH is simply off */
    if (env && !autog.path) st_clear_error();
}

void fuse_graph_set_auto(const char *path) {
    auto_init();
    st_free(autog.path);
    autog.path = path ? st_strdup(path) : NULL;
    autog.nfiles = 0;
    autog.noted = 0;
}

bool fuse_graph_wanted(void) {
    auto_init();
    return oneshot.f != NULL || (autog.path && !autog.noted);
}

/* ---- file names ---- */
/* path with ".k" inserted before the extension of its last component ("plan.dot" -> "plan.2.dot",
 * "plan" -> "plan.2"); k == 1: path itself. ext, when not NULL, replaces the extension instead of
 * keeping it ("plan.dot" -> "plan.svg"). NULL on OOM. */
static char *file_name(const char *path, int k, const char *ext) {
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    size_t stem = dot && dot > (slash ? slash : path) ? (size_t)(dot - path) : strlen(path);
    const char *old_ext = path + stem;
    size_t n = strlen(path) + 32;
    char *s = st_malloc(n);
    if (!s) return NULL;
    char num[16] = "";
    if (k > 1) snprintf(num, sizeof num, ".%d", k);
    snprintf(s, n, "%.*s%s%s", (int)stem, path, num, ext ? ext : old_ext);
    return s;
}

/* ---- signature ---- */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
static uint64_t fnv_i(uint64_t h, int64_t v) { return fnv(h, &v, sizeof v); }
static uint64_t fnv_shape(uint64_t h, const st_node *n) {
    h = fnv_i(h, n->op * 64 + n->dtype * 8 + n->ndim);
    return fnv(h, n->shape, (size_t)n->ndim * sizeof n->shape[0]);
}

static uint64_t plan_signature(const fuse_plan *p, const fuse_launch *launch) {
    uint64_t h = 1469598103934665603ull;
    const st_region *r = p->r;
    h = fnv_i(h, p->norder);
    for (int k = 0; k < p->norder; k++) {
        int g = p->order[k];
        h = fnv_i(h, g * 16 + p->groups[g].kind);
        h = fnv(h, launch[g].name, strlen(launch[g].name));
    }
    for (int i = 0; i < r->n; i++) {
        const st_node *x = r->nodes[i];
        h = fnv_shape(h, x);
        h = fnv_i(h, (int64_t)x->tag * 4 + p->mat[i] * 2 + !!(x->flags & NODE_TARGET));
        for (int k = 0; k < x->nsrc; k++)
            h = fuse_in_region(x->src[k]) ? fnv_i(h, x->src[k]->pos) : fnv_shape(h, x->src[k]);
    }
    return h;
}

/* ---- dot text ---- */
/* Writes s as the inside of a dot string: quotes and backslashes escaped, newlines as \n. */
static void put_esc(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\n') fputs("\\n", f);
        else if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else fputc(*s, f);
    }
}

/* The realized buffers the region reads, sorted by creation (node id): their ids are in<rank>. */
typedef struct inputs { st_node **v; int n; } inputs;

static int cmp_id(const void *a, const void *b) {
    uint64_t x = (*(st_node *const *)a)->id, y = (*(st_node *const *)b)->id;
    return x < y ? -1 : x > y;
}

static st_status collect_inputs(const st_region *r, inputs *in) {
    int cap = 0;
    for (int i = 0; i < r->n; i++) cap += r->nodes[i]->nsrc;
    in->v = st_malloc(((size_t)cap + 1) * sizeof *in->v);
    in->n = 0;
    if (!in->v) return st_last_status();
    for (int i = 0; i < r->n; i++)
        for (int k = 0; k < r->nodes[i]->nsrc; k++)
            if (!fuse_in_region(r->nodes[i]->src[k])) in->v[in->n++] = r->nodes[i]->src[k];
    qsort(in->v, (size_t)in->n, sizeof *in->v, cmp_id);
    int m = 0;
    for (int i = 0; i < in->n; i++)
        if (!m || in->v[m - 1] != in->v[i]) in->v[m++] = in->v[i];
    in->n = m;
    return ST_OK;
}

static int input_rank(const inputs *in, const st_node *x) {
    st_node *key = (st_node *)x;
    st_node **hit = bsearch(&key, in->v, (size_t)in->n, sizeof *in->v, cmp_id);
    return hit ? (int)(hit - in->v) : -1;
}

static void put_id(FILE *f, const inputs *in, const st_node *x) {
    if (fuse_in_region(x)) fprintf(f, "n%d", x->pos);
    else fprintf(f, "in%d", input_rank(in, x));
}

/* "exp\n(4, 8) f32", with what the op's argument says (reduced dims, a constant's value). */
static void node_label(const st_node *x, char *buf, size_t n) {
    char sh[160];
    size_t k = (size_t)snprintf(buf, n, "%s", x->op == ST_OP_BUFFER ? "input" : st_ops[x->op].name);
    if (x->op == ST_OP_CONST)
        k += (size_t)(st_is_float((st_dtype)x->dtype) ? snprintf(buf + k, n - k, " %g", x->arg.c.f)
                                                       : snprintf(buf + k, n - k, " %lld", (long long)x->arg.c.i));
    else if (st_ops[x->op].kind == OPK_REDUCE && x->nsrc) {
        k += (size_t)snprintf(buf + k, n - k, " dims");
        for (int d = 0; d < x->src[0]->ndim && k < n; d++)
            if (x->arg.red.axes >> d & 1) k += (size_t)snprintf(buf + k, n - k, " %d", d);
    } else if (st_ops[x->op].kind == OPK_GATHER && k < n)
        k += (size_t)snprintf(buf + k, n - k, " dim %d", x->arg.axis.dim);
    if (k < n)
        snprintf(buf + k, n - k, "\n%s %s", st_shape_str(x->ndim, x->shape, sh, sizeof sh),
                 st_dtypes[x->dtype].name);
}

static void put_node(FILE *f, const fuse_plan *p, const inputs *in, const st_node *x, const char *indent) {
    char lab[320];
    node_label(x, lab, sizeof lab);
    fputs(indent, f);
    put_id(f, in, x);
    fputs(" [label=\"", f);
    put_esc(f, lab);
    if (fuse_in_region(x) && p->mat[x->pos]) put_esc(f, x->flags & NODE_TARGET ? "\n[result]" : "\n[stored]");
    if (!fuse_in_region(x)) {
        char dev[24];
        if (x->buf && !dev_host_memory(x->buf->device)) fprintf(f, " on %s", st_dev_name(x->buf->device, dev, sizeof dev));
        fputs("\", shape=box, style=\"rounded,filled\", fillcolor=\"#e8e8e8\"];\n", f);
    } else if (x->tag < 0) {
        fputs("\", style=dashed];\n", f);
    } else if (p->mat[x->pos]) {
        fputs("\", peripheries=2, style=bold];\n", f);
    } else {
        fputs("\"];\n", f);
    }
}

static void group_label(fuse_plan *p, const fuse_launch *launch, int use_jit, int g, int step,
                        char *buf, size_t n) {
    const fuse_group *G = &p->groups[g];
    const st_node *a = G->anchor ? G->anchor : G->outs[0];
    char name[64], dom[200], rows[96], out[96], dev[24];
    int d = G->outs[0]->rdev;
    if (launch[g].name[0]) snprintf(name, sizeof name, "%s", launch[g].name);
    else snprintf(name, sizeof name, "k%d", g);
    const char *tier = dev_target_of(d) == DEV_TARGET_CUDA ? "cuda" : G->interp ? "interpreter (not lowered)"
                     : use_jit ? "jit" : "interpreter (small region)";
    if (G->kind == FG_REDUCE)
        snprintf(dom, sizeof dom, "rows %s -> %s", st_shape_str(a->src[0]->ndim, a->src[0]->shape, rows, sizeof rows),
                 st_shape_str(a->ndim, a->shape, out, sizeof out));
    else
        st_shape_str(G->kind == FG_POINTWISE ? G->ndim : a->ndim, G->kind == FG_POINTWISE ? G->shape : a->shape,
                     dom, sizeof dom);
    fuse_cost c = fuse_cost_group(p, g);   /* the cost model's estimate (cost.c) */
    snprintf(buf, n, "#%d %s\n%s %s\n%s, %s, %d output%s\nread %lld B, write %lld B, %lld elements",
             step, name, fuse_kind_names[G->kind], dom, st_dev_name(d, dev, sizeof dev), tier, G->nouts,
             G->nouts == 1 ? "" : "s", (long long)c.read, (long long)c.written, (long long)c.work);
}

/* Region positions sorted by group: bucket tag + 1 (free nodes in bucket 0) spans
 * idx[off[b] .. off[b + 1]), each bucket in region order. */
static int *by_group(const fuse_plan *p, int **off_out) {
    int n = p->r->n, nb = p->ngroups + 1;
    int *off = st_calloc((size_t)nb + 1, sizeof *off), *fill = st_malloc((size_t)nb * sizeof *fill);
    int *idx = st_malloc(((size_t)n + 1) * sizeof *idx);
    if (!off || !fill || !idx) {
        st_free(off);
        st_free(fill);
        st_free(idx);
        return NULL;
    }
    for (int i = 0; i < n; i++) off[p->r->nodes[i]->tag + 2]++;
    for (int b = 0; b < nb; b++) off[b + 1] += off[b];
    memcpy(fill, off, (size_t)nb * sizeof *fill);
    for (int i = 0; i < n; i++) idx[fill[p->r->nodes[i]->tag + 1]++] = i;
    st_free(fill);
    *off_out = off;
    return idx;
}

static void put_edges(FILE *f, const fuse_plan *p, const inputs *in) {
    for (int i = 0; i < p->r->n; i++) {
        const st_node *x = p->r->nodes[i];
        for (int k = 0; k < x->nsrc; k++) {
            const st_node *s = x->src[k];
            fputs("  ", f);
            put_id(f, in, s);
            fputs(" -> ", f);
            put_id(f, in, x);
            if (fuse_in_region(s) && s->tag < 0) fputs(" [style=dashed]", f);   /* inline, no memory */
            else if (!fuse_in_region(s) || (p->mat[s->pos] && s->tag != x->tag)) fputs(" [style=bold]", f);
            fputs(";\n", f);
        }
    }
}

static st_status write_dot(FILE *f, fuse_plan *p, const fuse_launch *launch, int use_jit) {
    inputs in;
    int *off = NULL, *idx = NULL;
    st_status s = collect_inputs(p->r, &in);
    if (s == ST_OK && !(idx = by_group(p, &off))) s = st_last_status();
    if (s != ST_OK) {
        st_free(in.v);
        return s;
    }
    fprintf(f, "// stitch fusion plan: %d kernel%s, %d nodes, %d inputs\n// execution order:", p->norder,
            p->norder == 1 ? "" : "s", p->r->n, in.n);
    for (int k = 0; k < p->norder; k++)
        fprintf(f, " %s", launch[p->order[k]].name[0] ? launch[p->order[k]].name : "(interpreter group)");
    fputs("\ndigraph stitch {\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n"
          "  edge [color=\"#404040\"];\n", f);
    for (int i = 0; i < in.n; i++) put_node(f, p, &in, in.v[i], "  ");
    for (int k = 0; k < p->norder; k++) {
        int g = p->order[k];
        char lab[512];
        group_label(p, launch, use_jit, g, k + 1, lab, sizeof lab);
        fprintf(f, "  subgraph cluster_g%d {\n    label=\"", g);
        put_esc(f, lab);
        fputs("\";\n    labeljust=l;\n    style=rounded;\n", f);
        for (int j = off[g + 1]; j < off[g + 2]; j++) put_node(f, p, &in, p->r->nodes[idx[j]], "    ");
        for (int m = 0; m < p->groups[g].nmembers; m++) { /* a horizontal batch: its members' nodes */
            int mg = p->groups[g].members[m];
            for (int j = off[mg + 1]; j < off[mg + 2]; j++) put_node(f, p, &in, p->r->nodes[idx[j]], "    ");
        }
        fputs("  }\n", f);
    }
    for (int j = 0; j < off[1]; j++) put_node(f, p, &in, p->r->nodes[idx[j]], "  ");
    put_edges(f, p, &in);
    fputs("}\n", f);
    st_free(in.v);
    st_free(off);
    st_free(idx);
    return ST_OK;
}

/* ---- SVG ---- */
/* Runs `dot -Tsvg path -o <path with .svg>` when dot is on PATH (no shell); a missing dot is
 * silent, a failing one a stderr note. */
static void write_svg(const char *path) {
    char *svg = file_name(path, 1, ".svg");
    if (!svg) {
        st_clear_error();
        return;
    }
    if (!strcmp(svg, path)) { /* path itself ends in .svg: keep the dot text, add .svg */
        st_free(svg);
        size_t n = strlen(path) + 5;
        if (!(svg = st_malloc(n))) {
            st_clear_error();
            return;
        }
        snprintf(svg, n, "%s.svg", path);
    }
    char *argv[] = {"dot", "-Tsvg", (char *)path, "-o", svg, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "dot", NULL, NULL, argv, environ), status = 0;
    if (rc == 0) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fprintf(stderr, "stitch: graph: dot -Tsvg %s failed (status %d); %s not written\n", path, status, svg);
    } else if (rc != ENOENT) {
        fprintf(stderr, "stitch: graph: cannot run dot: %s\n", strerror(rc));
    }
    st_free(svg);
}

/* ---- entry points ---- */
static void emit_auto(fuse_plan *p, const fuse_launch *launch, int use_jit) {
    uint64_t sig = plan_signature(p, launch);
    for (int i = 0; i < autog.nfiles; i++)
        if (autog.sigs[i] == sig) return;
    if (autog.nfiles == GRAPH_MAX_FILES) {
        fprintf(stderr, "stitch: ST_GRAPH: %d plan graphs written; no more this run\n", GRAPH_MAX_FILES);
        autog.noted = 1;
        return;
    }
    char *name = file_name(autog.path, autog.nfiles + 1, NULL);
    FILE *f = name ? fopen(name, "w") : NULL;
    if (!f) {
        fprintf(stderr, "stitch: ST_GRAPH: cannot write %s: %s; no plan graphs this run\n",
                name ? name : autog.path, name ? strerror(errno) : st_last_error());
        autog.noted = 1;
        st_free(name);
        st_clear_error();
        return;
    }
    st_status s = write_dot(f, p, launch, use_jit);
    int bad = ferror(f) != 0;
    bad |= fclose(f) != 0;
    if (s != ST_OK || bad) {
        fprintf(stderr, "stitch: ST_GRAPH: writing %s failed: %s; no plan graphs this run\n", name,
                s != ST_OK ? st_last_error() : strerror(errno));
        autog.noted = 1;
        st_clear_error();
    } else {
        autog.sigs[autog.nfiles++] = sig;
        write_svg(name);
    }
    st_free(name);
}

void fuse_graph_emit(fuse_plan *p, const fuse_launch *launch, int use_jit) {
    if (oneshot.f && !oneshot.written) {
        oneshot.written = 1;
        if (write_dot(oneshot.f, p, launch, use_jit) != ST_OK) { /* OOM: st_graph sees the stream's state */
            st_clear_error();
            oneshot.written = -1;
        }
    }
    if (autog.path && !autog.noted) emit_auto(p, launch, use_jit);
}

st_status fuse_graph_begin(FILE *f) {
    if (oneshot.f) return st_error(ST_ERR_ARG, "graph: called while another st_graph is writing");
    oneshot.f = f;
    oneshot.written = 0;
    return ST_OK;
}

int fuse_graph_end(void) {
    oneshot.f = NULL;
    return oneshot.written;
}

void fuse_graph_svg(const char *path) { write_svg(path); }
