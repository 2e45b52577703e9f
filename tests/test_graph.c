/*
 * test_graph.c — fusion graphs (fuser/graph.c): st_graph's dot file for one- and two-kernel
 * flushes (clusters, nodes, shapes, the edge through a materialized buffer), ST_GRAPH's numbering
 * and de-duplication (through fuse_graph_set_auto, which ST_GRAPH's value would set), unwritable
 * paths, the empty graph, determinism, and the SVG when Graphviz's dot is on PATH.
 *
 * The dot text is read back with a tiny line parser that knows the writer's layout: clusters
 * open with "  subgraph cluster_gN {" and close with "  }", nodes are "ID [label=...", edges
 * "A -> B".
 */
#include "base/base.h"
#include "fuser/fuser.h"
#include "test.h"

#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static char *path_in(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* The parsed graph: each node id's cluster (-1: outside), and the edges. */
typedef struct parsed {
    char ids[256][16];
    int cluster[256];
    int nnodes;
    int from[512], to[512];   /* node indices */
    int nedges;
    int nclusters;
} parsed;

static int node_index(parsed *g, const char *id) {
    for (int i = 0; i < g->nnodes; i++)
        if (!strcmp(g->ids[i], id)) return i;
    return -1;
}

static void parse(const char *text, parsed *g) {
    memset(g, 0, sizeof *g);
    int cur = -1;
    char line[1024];
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(line, sizeof line, "%.*s", (int)n, p);
        p += n + (e != NULL);
        int c;
        char a[16], b[16];
        if (sscanf(line, "  subgraph cluster_g%d {", &c) == 1) {
            cur = c;
            g->nclusters++;
        } else if (!strcmp(line, "  }")) {
            cur = -1;
        } else if (sscanf(line, " %15s -> %15[^ ;]", a, b) == 2) {
            g->from[g->nedges] = node_index(g, a);
            g->to[g->nedges++] = node_index(g, b);
        } else if (strstr(line, " [label=") && sscanf(line, " %15s [label=", a) == 1 && g->nnodes < 256) {
            snprintf(g->ids[g->nnodes], sizeof g->ids[0], "%s", a);
            g->cluster[g->nnodes++] = cur;
        }
    }
}

/* A realized input made from host data (no flush: ST_GRAPH sees only the flushes under test). */
static st_tensor *input(int ndim, const int64_t *shape) {
    int64_t n = st_shape_numel(ndim, shape);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)((i * 37) % 11) / 4.0f;
    st_tensor *t = st_from_data(ST_F32, ndim, shape, v);
    free(v);
    return t;
}

TEST(softmax_one_cluster) {
    int64_t sh[2] = {4, 8};
    st_tensor *x = input(2, sh), *y = st_softmax(x, 1);
    CHECK(st_graph(path_in("softmax.dot"), 1, &y) == ST_OK);
    CHECK(st_is_realized(y));
    char *s = slurp(path_in("softmax.dot"));
    CHECK(s != NULL);
    if (s) {
        parsed g;
        parse(s, &g);
        CHECK_EQ_INT(g.nclusters, 1);
        CHECK(strstr(s, "digraph stitch {") != NULL);
        CHECK(strstr(s, "_max_sub_exp_sum") != NULL);          /* the kernel's name */
        CHECK(strstr(s, "reduce rows (4, 8) -> (4, 1)") != NULL);
        CHECK(strstr(s, "exp\\n(4, 8) f32") != NULL);            /* a node: op, shape, dtype */
        CHECK(strstr(s, "[result]\", peripheries=2") != NULL);   /* the output, drawn distinctly */
        /* the group's compute nodes are inside the cluster; the input outside it */
        int in_cluster = 0, inputs = 0;
        for (int i = 0; i < g.nnodes; i++) {
            in_cluster += g.cluster[i] >= 0;
            inputs += !strncmp(g.ids[i], "in", 2) && g.cluster[i] < 0;
        }
        CHECK(in_cluster >= 5);   /* max, sub, exp, sum, div */
        CHECK_EQ_INT(inputs, 1);
        for (int e = 0; e < g.nedges; e++) CHECK(g.from[e] >= 0 && g.to[e] >= 0);
    }
    free(s);
    st_release(x);
    st_release(y);
}

TEST(two_kernels_edge_through_buffer) {
    int64_t sh[2] = {6, 5};
    int64_t idx[3] = {4, 0, 2};
    st_tensor *x = input(2, sh), *i = st_from_data(ST_I64, 1, (int64_t[]){3}, idx);
    st_tensor *sm = st_softmax(x, 1), *y = st_index_select(sm, 0, i);
    st_stats_t s0, s1;
    st_stats(&s0);
    CHECK(st_graph(path_in("two.dot"), 1, &y) == ST_OK);
    st_stats(&s1);
    char *s = slurp(path_in("two.dot"));
    CHECK(s != NULL);
    if (s) {
        parsed g;
        parse(s, &g);
        CHECK_EQ_INT(g.nclusters, (int)(s1.kernels_launched - s0.kernels_launched));
        CHECK_EQ_INT(g.nclusters, 2);
        CHECK(strstr(s, "(6, 5) f32\\n[stored]") != NULL);   /* softmax, materialized */
        CHECK(strstr(s, "(3, 5) f32\\n[result]") != NULL);
        int cross = 0;
        for (int e = 0; e < g.nedges; e++) {
            int a = g.from[e], b = g.to[e];
            cross += a >= 0 && b >= 0 && g.cluster[a] >= 0 && g.cluster[b] >= 0 && g.cluster[a] != g.cluster[b];
        }
        CHECK(cross >= 1);
        CHECK(strstr(s, "// execution order:") != NULL);
    }
    free(s);
    st_release(x);
    st_release(i);
    st_release(sm);
    st_release(y);
}

TEST(same_program_same_file) {
    int64_t sh[2] = {3, 7};
    char *txt[2];
    for (int r = 0; r < 2; r++) {
        st_tensor *x = input(2, sh), *l = st_log_softmax(x, 0), *y = st_exp(l);
        CHECK(st_graph(path_in(r ? "det2.dot" : "det1.dot"), 1, &y) == ST_OK);
        txt[r] = slurp(path_in(r ? "det2.dot" : "det1.dot"));
        st_release(x);
        st_release(l);
        st_release(y);
    }
    CHECK(txt[0] && txt[1] && strstr(txt[0], "subgraph cluster_g") && !strcmp(txt[0], txt[1]));
    free(txt[0]);
    free(txt[1]);
}

TEST(nothing_pending) {
    CHECK(st_sync() == ST_OK);
    CHECK(st_graph(path_in("empty.dot"), 0, NULL) == ST_OK);
    char *s = slurp(path_in("empty.dot"));
    CHECK(s && strstr(s, "nothing was pending") && strstr(s, "digraph stitch {") && !strstr(s, "cluster"));
    free(s);
}

TEST(unwritable_path) {
    int64_t sh[1] = {5};
    st_tensor *x = input(1, sh), *y = st_exp(x);
    CHECK_EQ_INT(st_graph("/nonexistent-stitch-dir/g.dot", 1, &y), ST_ERR_IO);
    CHECK(strstr(st_last_error(), "/nonexistent-stitch-dir/g.dot") != NULL);
    CHECK(strstr(st_last_error(), "No such file") != NULL);
    CHECK(!st_is_realized(y));   /* refused before the flush */
    /* ST_GRAPH to an unwritable place: a note on stderr, never a failed flush */
    fuse_graph_set_auto("/nonexistent-stitch-dir/auto.dot");
    CHECK(st_realize(1, &y) == ST_OK);
    fuse_graph_set_auto(NULL);
    st_release(x);
    st_release(y);
}

static st_status softmax_flush(int64_t rows, int64_t cols) {
    int64_t sh[2] = {rows, cols};
    st_tensor *x = input(2, sh), *y = st_softmax(x, 1);
    st_status s = st_realize(1, &y);
    st_release(x);
    st_release(y);
    return s;
}

TEST(auto_numbering_and_dedup) {
    fuse_graph_set_auto(path_in("auto.dot"));
    CHECK(fuse_graph_wanted());
    /* a training loop: the same plan structure every step writes one file */
    for (int step = 0; step < 3; step++) CHECK(softmax_flush(4, 8) == ST_OK);
    CHECK(exists(path_in("auto.dot")));
    CHECK(!exists(path_in("auto.2.dot")));
    /* a different structure (shape) gets the next number; a repeat of an older one nothing */
    CHECK(softmax_flush(4, 9) == ST_OK);
    CHECK(softmax_flush(4, 8) == ST_OK);
    CHECK(exists(path_in("auto.2.dot")));
    CHECK(!exists(path_in("auto.3.dot")));
    char *s = slurp(path_in("auto.2.dot"));
    CHECK(s && strstr(s, "(4, 9)"));
    free(s);
    /* at most 100 files, then ST_GRAPH stops (one stderr note) */
    for (int k = 0; k < 100; k++) CHECK(softmax_flush(2, 10 + k) == ST_OK);
    CHECK(exists(path_in("auto.100.dot")));
    CHECK(!exists(path_in("auto.101.dot")));
    CHECK(!fuse_graph_wanted());
    fuse_graph_set_auto(NULL);
    CHECK(!fuse_graph_wanted());
}

static bool dot_on_path(void) {
    const char *path = getenv("PATH");
    char buf[1024];
    for (const char *p = path; p && *p;) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(buf, sizeof buf, "%.*s/dot", (int)n, p);
        if (access(buf, X_OK) == 0) return true;
        p += n + (e != NULL);
    }
    return false;
}

TEST(svg_when_dot_exists) {
    if (!dot_on_path()) {
        printf("  (skipped: Graphviz's dot is not on PATH, no SVG checked)\n");
        return;
    }
    int64_t sh[2] = {4, 8};
    st_tensor *x = input(2, sh), *y = st_softmax(x, 1);
    CHECK(st_graph(path_in("pic.dot"), 1, &y) == ST_OK);
    char *s = slurp(path_in("pic.svg"));
    CHECK(s && strstr(s, "<svg") && strstr(s, "_max_sub_exp_sum"));   /* dot parsed our labels */
    free(s);
    st_release(x);
    st_release(y);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/stitch-graph-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    setenv("ST_CACHE_DIR", dir, 1);
    unsetenv("ST_GRAPH");
    st_set_default_device("cpu");
    RUN(softmax_one_cluster);
    RUN(two_kernels_edge_through_buffer);
    RUN(same_program_same_file);
    RUN(nothing_pending);
    RUN(unwritable_path);
    RUN(auto_numbering_and_dedup);
    RUN(svg_when_dot_exists);
    st_shutdown();
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    TEST_MAIN_END();
}
