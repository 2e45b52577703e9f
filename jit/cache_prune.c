/*
 * cache_prune.c — keeping the kernel cache directory bounded: least-recently-used pruning to
 * ST_CACHE_MAX bytes, and cleanup of what crashed or racing processes leave behind.
 *
 * Only names stitch itself writes are ever deleted (the directory may be shared with other files
 * by mistake, ST_CACHE_DIR=$HOME):
 *   <32 hex>-XXXXXX.so      a compiled batch: one unit of pruning, together with every .k naming it
 *   <32 hex>.k              an index line; removed with its .so, or when its .so is gone
 *   gemm-<32 hex>-<type>.o  a GEMM object left by versions before 2026-11-30 (the GEMM is in the
 *                           library now, base/gemm.h): no index names it, so it goes as an
 *                           unindexed .so does, once older than JIT_STALE_S
 *   cuda/<32 hex>.cubin|ptx a GPU kernel: a unit of its own
 *   .tmp-XXXXXX, .<32 hex>-XXXXXX.tmp  temp files (base_write_atomic, the compiler's output):
 *                           removed when older than JIT_STALE_S (a live writer renames within it)
 *   failed/<32 hex>-XXXXXX.c|.log  sources of failed (or interrupted) compiles: the newest
 *                           JIT_FAILED_KEEP kept
 * A .so that no .k names (a batch compiled twice by concurrent processes: the later index wins)
 * is removed once older than JIT_STALE_S. Recency of a unit = max(atime, mtime); the caches
 * set the atime explicitly when they load an entry (jit_touch), so noatime/relatime mounts do not
 * matter. An object this process has mapped (in_use) is never removed. Removing a file another
 * process has mapped is safe: its mapping stays until it unmaps it.
 */
#include "jit/compile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define JIT_STALE_S 3600
#define JIT_FAILED_KEEP 16

int64_t jit_parse_size(const char *s) {
    if (!s) return -1;
    const char *p = s;
    while (*p == ' ') p++;
    if (*p < '0' || *p > '9') return -1;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10) return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    int shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    case 't': case 'T': shift = 40; p++; break;
    default: break;
    }
    if (shift && (*p == 'i' || *p == 'I')) p++;
    if (*p == 'b' || *p == 'B') p++;
    while (*p == ' ') p++;
    if (*p || v > ((uint64_t)INT64_MAX >> shift)) return -1;
    return (int64_t)(v << shift);
}

void jit_touch(const char *path) {
    struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    (void)utimensat(AT_FDCWD, path, ts, 0);
}

/* s[0..n) is lowercase or uppercase hex. */
static int is_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F')))
            return 0;
    return 1;
}

/* <32 hex>-XXXXXX<ext> (the mkstemps suffix: letters and digits). */
static int is_batch_name(const char *s, const char *ext) {
    size_t n = strlen(s), el = strlen(ext);
    if (n != 32 + 7 + el || !is_hex(s, 32) || s[32] != '-' || strcmp(s + 39, ext)) return 0;
    for (int i = 33; i < 39; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return 1;
}

/* gemm-<32 hex>-<type>.o, the type 1-8 lowercase letters and digits. */
static int is_gemm_name(const char *s) {
    size_t n = strlen(s);
    if (n < 5 + 32 + 1 + 1 + 2 || n > 5 + 32 + 1 + 8 + 2 || strncmp(s, "gemm-", 5) || !is_hex(s + 5, 32) ||
        s[37] != '-' || strcmp(s + n - 2, ".o"))
        return 0;
    for (size_t i = 38; i < n - 2; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z'))) return 0;
    return 1;
}

static int is_temp_name(const char *s) {
    if (!strncmp(s, ".tmp-", 5) && strlen(s) == 11) return 1;
    return s[0] == '.' && is_batch_name(s + 1, ".tmp");
}

static int64_t recency(const struct stat *st) {
    return st->st_atime > st->st_mtime ? (int64_t)st->st_atime : (int64_t)st->st_mtime;
}

typedef struct prune_unit {
    char name[JIT_NAME_MAX + 8]; /* relative to the cache dir ("x.so", "cuda/x.cubin") */
    uint64_t size;               /* with its index lines */
    int64_t when;
    int refs, in_use;
} prune_unit;

typedef struct prune_index {
    char name[40], so[JIT_NAME_MAX + 1];
    uint64_t size;
} prune_index;

typedef struct prune_ctx {
    const char *dir;
    prune_unit *u;
    int nu, capu;
    prune_index *k;
    int nk, capk;
    int64_t now;
    jit_prune_result res;
} prune_ctx;

static void remove_rel(prune_ctx *c, const char *rel) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", c->dir, rel);
    if (unlink(path) == 0 && (st_rt.debug & 1))
        fprintf(stderr, "stitch: pruned %s from the kernel cache\n", path);
}

/* The .so an index line names ("" when unreadable). */
static void index_target(const char *path, char *so, size_t cap) {
    so[0] = '\0';
    uint64_t size;
    unsigned mode;
    int fd = base_open_regular(path, &size, &mode);
    if (fd < 0) return;
    char line[513];
    ssize_t r;
    do r = read(fd, line, sizeof line - 1); while (r < 0 && errno == EINTR);
    close(fd);
    if (r <= 0) return;
    line[r] = '\0';
    char magic[32], key[40], name[JIT_NAME_MAX + 1];
    if (sscanf(line, "%31s %39s %128s", magic, key, name) == 3 && strlen(name) < cap) snprintf(so, cap, "%s", name);
}

static int by_when(const void *a, const void *b) {
    const prune_unit *x = a, *y = b;
    return (x->when > y->when) - (x->when < y->when);
}

/* Scans dir/sub (sub "" or "cuda"): stale temps removed, units and index lines collected. */
static st_status scan(prune_ctx *c, const char *sub, int (*in_use)(const char *name)) {
    char path[4400];
    snprintf(path, sizeof path, "%s%s%s", c->dir, *sub ? "/" : "", sub);
    DIR *d = opendir(path);
    if (!d) return ST_OK;
    struct dirent *e;
    st_status s = ST_OK;
    while (s == ST_OK && (e = readdir(d))) {
        const char *nm = e->d_name;
        char rel[JIT_NAME_MAX + 8], full[4600];
        if (strlen(nm) > JIT_NAME_MAX) continue;
        snprintf(rel, sizeof rel, "%s%s%s", sub, *sub ? "/" : "", nm);
        snprintf(full, sizeof full, "%s/%s", c->dir, rel);
        struct stat st;
        if (nm[0] == '.' && !is_temp_name(nm)) continue;
        if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (is_temp_name(nm)) {
            if (c->now - (int64_t)st.st_mtime > JIT_STALE_S) {
                remove_rel(c, rel);
                c->res.temps++;
            }
            continue;
        }
        size_t n = strlen(nm);
        int unit = *sub ? (n == 32 + 6 && is_hex(nm, 32) && !strcmp(nm + 32, ".cubin")) ||
                              (n == 32 + 4 && is_hex(nm, 32) && !strcmp(nm + 32, ".ptx"))
                        : is_batch_name(nm, ".so") || is_gemm_name(nm);
        if (unit) {
            s = BASE_GROW(c->u, c->capu, c->nu + 1, 64);
            if (s != ST_OK) break;
            prune_unit *u = &c->u[c->nu++];
            memset(u, 0, sizeof *u);
            snprintf(u->name, sizeof u->name, "%s", rel);
            u->size = (uint64_t)st.st_size;
            u->when = recency(&st);
            u->in_use = !*sub && in_use && in_use(nm);
        } else if (!*sub && n == 34 && is_hex(nm, 32) && !strcmp(nm + 32, ".k")) {
            s = BASE_GROW(c->k, c->capk, c->nk + 1, 64);
            if (s != ST_OK) break;
            prune_index *k = &c->k[c->nk++];
            snprintf(k->name, sizeof k->name, "%s", nm);
            index_target(full, k->so, sizeof k->so);
            k->size = (uint64_t)st.st_size;
        }
    }
    closedir(d);
    return s;
}

typedef struct failed_file {
    char stem[48];
    int64_t when;
} failed_file;

static int by_stem(const void *a, const void *b) { return strcmp(((const failed_file *)a)->stem, ((const failed_file *)b)->stem); }
static int by_when_desc(const void *a, const void *b) {
    const failed_file *x = a, *y = b;
    return (x->when < y->when) - (x->when > y->when);
}

/* failed/: keeps the sources and logs of the newest JIT_FAILED_KEEP compiles. */
static void trim_failed(prune_ctx *c) {
    char path[4400];
    snprintf(path, sizeof path, "%s/failed", c->dir);
    DIR *d = opendir(path);
    if (!d) return;
    failed_file *f = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (!is_batch_name(nm, ".c") && !is_batch_name(nm, ".log")) continue;
        char full[4700];
        struct stat st;
        snprintf(full, sizeof full, "%s/%s", path, nm);
        if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (BASE_GROW(f, cap, n + 1, 64) != ST_OK) break;
        snprintf(f[n].stem, sizeof f[n].stem, "%.39s", nm);
        f[n++].when = (int64_t)st.st_mtime;
    }
    closedir(d);
    if (n > 0) qsort(f, (size_t)n, sizeof *f, by_stem);
    int m = 0; /* one per stem, the newest time of its files */
    for (int i = 0; i < n; i++) {
        if (m > 0 && !strcmp(f[m - 1].stem, f[i].stem)) {
            if (f[i].when > f[m - 1].when) f[m - 1].when = f[i].when;
        } else {
            f[m++] = f[i];
        }
    }
    if (m > 0) qsort(f, (size_t)m, sizeof *f, by_when_desc);
    for (int i = JIT_FAILED_KEEP; i < m; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "failed/%s.c", f[i].stem);
        remove_rel(c, rel);
        snprintf(rel, sizeof rel, "failed/%s.log", f[i].stem);
        remove_rel(c, rel);
        c->res.failed++;
    }
    st_free(f);
}

static int unit_by_name(const void *a, const void *b) {
    return strcmp(((const prune_unit *)a)->name, ((const prune_unit *)b)->name);
}
static int name_vs_unit(const void *key, const void *u) { return strcmp((const char *)key, ((const prune_unit *)u)->name); }
static int name_vs_index(const void *key, const void *k) { return strcmp((const char *)key, ((const prune_index *)k)->so); }
static int index_by_so(const void *a, const void *b) {
    return strcmp(((const prune_index *)a)->so, ((const prune_index *)b)->so);
}

st_status jit_prune_dir(const char *dir, uint64_t max, int (*in_use)(const char *name), jit_prune_result *out) {
    prune_ctx c = {0};
    c.dir = dir;
    c.now = (int64_t)time(NULL);
    st_status s = scan(&c, "", in_use);
    if (s == ST_OK) s = scan(&c, "cuda", in_use);
    if (s == ST_OK) trim_failed(&c);
    /* Attach index lines to their objects; a line whose object is gone is dead. Objects sorted
     * by name, index lines by the object they name: a lookup each, not a scan (20,000 files took
     * 0.16 s of string compares at every start). */
    if (c.nu > 1) qsort(c.u, (size_t)c.nu, sizeof *c.u, unit_by_name);
    if (c.nk > 1) qsort(c.k, (size_t)c.nk, sizeof *c.k, index_by_so);
    for (int i = 0; s == ST_OK && i < c.nk; i++) {
        prune_unit *u = c.nu ? bsearch(c.k[i].so, c.u, (size_t)c.nu, sizeof *c.u, name_vs_unit) : NULL;
        if (u) {
            u->size += c.k[i].size;
            u->refs++;
        } else {
            remove_rel(&c, c.k[i].name);
            c.k[i].so[0] = '\0';
            c.res.indexes++;
        }
    }
    uint64_t total = 0;
    for (int j = 0; s == ST_OK && j < c.nu; j++) {
        prune_unit *u = &c.u[j];
        /* An object no index names: a duplicate from a racing process, once it cannot be one in
         * the middle of being indexed. */
        if (!strchr(u->name, '/') && !u->refs && !u->in_use && c.now - u->when > JIT_STALE_S) {
            remove_rel(&c, u->name);
            u->size = 0;
            u->name[0] = '\0';
            c.res.objects++;
        }
        total += u->size;
    }
    if (s == ST_OK && max > 0 && total > max) {
        qsort(c.u, (size_t)c.nu, sizeof *c.u, by_when);
        for (int j = 0; j < c.nu && total > max; j++) {
            prune_unit *u = &c.u[j];
            if (!u->name[0] || u->in_use) continue;
            remove_rel(&c, u->name);
            /* its index lines: a run of c.k (sorted by .so above) */
            prune_index *hit = c.nk ? bsearch(u->name, c.k, (size_t)c.nk, sizeof *c.k, name_vs_index) : NULL;
            int i = hit ? (int)(hit - c.k) : c.nk;
            while (i > 0 && !strcmp(c.k[i - 1].so, u->name)) i--;
            for (; i < c.nk && !strcmp(c.k[i].so, u->name); i++) remove_rel(&c, c.k[i].name);
            total -= u->size;
            c.res.objects++;
        }
    }
    c.res.bytes = total;
    if (out) *out = c.res;
    st_free(c.u);
    st_free(c.k);
    return s;
}
