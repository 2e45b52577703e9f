/*
 * graph.c — st_graph: realize tensors and write that flush's fusion plan in Graphviz dot.
 *
 * The picture is drawn by the fuser (fuser/graph.c) while it plans; this is the public entry that
 * opens the file, runs the flush with the fuser waiting for it, and reports what happened.
 */
#include "runtime/tensor.h"
#include "fuser/fuser.h"

#include <errno.h>

st_status st_graph(const char *path, int n, st_tensor *const *ts) {
    st_runtime_init();
    if (!path || !*path) return st_error(ST_ERR_ARG, "graph: no file name given");
    if (n < 0 || (n > 0 && !ts)) return st_error(ST_ERR_ARG, "graph: %d tensors given (want n >= 0 and a list)", n);
    st_status s = fuse_graph_begin(NULL);   /* only checks that no other st_graph is waiting */
    if (s != ST_OK) return s;
    FILE *f = fopen(path, "w");
    if (!f) return st_error(ST_ERR_IO, "graph: cannot write '%s': %s", path, strerror(errno));
    fuse_graph_begin(f);
    uint64_t flushes0 = st_stats_g.flushes;
    s = n ? st_realize(n, ts) : st_sync();
    int written = fuse_graph_end();
    if (!written)
        fprintf(f, "// stitch fusion plan: none: %s\ndigraph stitch {\n}\n",
                st_stats_g.flushes == flushes0 ? "nothing was pending (no flush ran)"
                                               : "the flush ran without the fuser (eager mode or an interpreter fallback)");
    int bad = ferror(f) != 0;
    bad |= fclose(f) != 0;
    if (s != ST_OK) return s;   /* the flush's error wins; what was planned is in the file */
    if (written < 0) return st_error(ST_ERR_OOM, "graph: out of memory writing '%s'", path);
    if (bad) return st_error(ST_ERR_IO, "graph: writing '%s' failed: %s", path, strerror(errno));
    fuse_graph_svg(path);
    return ST_OK;
}
