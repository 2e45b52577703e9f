/*
 * cache.c — the kernel caches: source -> callable function, in memory and on disk.
 *
 * Key of a kernel = base_hash128(source, seeded by ctx), ctx = hash(compiler identity, flag list,
 * prelude text, the ABI text jit_kargs_src), computed once after (re)initialization. The symbol of
 * a kernel is st_k_<key hex> (the JIT defines KNAME to it right before the source), so one key names
 * one function everywhere.
 *
 * Translation unit of a batch: a comment, the prelude, the kernel ABI (jit_kargs_src), then
 * per kernel `#define KNAME st_k_<key>`, its source, `#undef KNAME`. Kernels of one batch share the
 * unit, so a kernel's own helpers must be static and named after KNAME (or live in the prelude).
 * One bad kernel fails its whole batch (one compiler call), and the error names the saved unit.
 *
 * Counters: jit_get_kernels and jit_lookup both count what they find (cache_hits_memory /
 * cache_hits_disk); a compiler call adds compile_calls 1, compile_ms its wall time, and on success
 * kernels_compiled the number of distinct kernels in the batch.
 *
 * Memory: a uthash table key -> (function, loaded object). Objects (dlopen handles) are kept in a
 * list, each .so opened once; they are closed only by jit_shutdown, so a function pointer handed
 * out stays valid until then.
 *
 * Disk, under the cache dir:
 *   <batchkey>-XXXXXX.so   one compiled batch (the unique part comes from the compiler's temp file;
 *                          a name is never reused, so a rename never replaces a mapped object)
 *   <kernelkey>.k          one line: magic, key, .so name, .so size, .so checksum, and a checksum
 *                          of the line itself (a truncated or edited .k is detected as such)
 *   failed/<batch>-XXXXXX.c/.log  the source and log of a failed compilation (kept for the user)
 * Every file is written to a temp name in the same dir and renamed into place. A .k or .so that
 * fails verification (parse, self-checksum, size, content checksum, dlopen, dlsym) is removed and
 * counts as a miss, so the kernel is recompiled: a corrupt cache can cost time, never correctness.
 */
#include "jit/compile.h"
#include "device/cpu_pool.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pwd.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/uthash_cfg.h"

#define JIT_K_MAGIC "stitch-kernel-v1"

/* One dlopen'ed batch. Owns handle; freed by jit_shutdown. */
typedef struct jit_obj {
    char name[JIT_NAME_MAX]; /* file name inside the cache dir */
    void *handle;
    uint64_t size, sum;      /* what was verified when it was opened */
    struct jit_obj *next;
} jit_obj;

typedef struct jit_entry {
    base_hash key;
    st_kernel_fn fn;
    jit_obj *obj;            /* borrowed from the object list */
    UT_hash_handle hh;
} jit_entry;

static struct {
    int ready;        /* dir and ctx valid */
    char *dir;        /* cache dir, owned */
    base_hash ctx;      /* seed of every kernel key */
    jit_entry *table; /* memory cache */
    jit_obj *objs;    /* loaded shared objects */
    uint64_t max;     /* ST_CACHE_MAX in bytes (0: no bound) */
    uint64_t written; /* bytes this process wrote to the dir since it was last pruned */
} J;

/* ---- configuration ---- */

/* A directory we can create files in: made with mkdir -p, then probed with a temp file (access()
 * says yes to root on a read-only mount). 0 if usable, else -1 with errno set. */
static int usable_dir(const char *dir) {
    if (base_mkdir_p(dir) != 0) return -1;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.tmp-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) return -1;
    close(fd);
    unlink(probe);
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

/* The private fallback directory of this process (TMPDIR/stitch-cache-XXXXXX), "" when none:
 * removed by jit_shutdown, or at exit when the process never shuts stitch down. Static storage
 * because the exit handler may run after everything else is gone. */
static char fallback_dir[4200];

static void remove_fallback(void) {
    if (!fallback_dir[0]) return;
    nftw(fallback_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    fallback_dir[0] = '\0';
}

static int obj_in_use(const char *name);

/* ST_CACHE_MAX, read at each (re)initialization: default 512 MiB; 0 turns the bound off; a
 * malformed value is ignored (the default applies) with a note under ST_DEBUG. */
static uint64_t cache_max(void) {
    const char *v = base_env(SET_CACHE_MAX);
    int64_t m = v ? jit_parse_size(v) : -1;
    if (v && m < 0 && (st_rt.debug & 1))
        fprintf(stderr, "stitch: ignoring ST_CACHE_MAX=%s (want a size such as 512M or 2G; 0 for no bound)\n", v);
    return m >= 0 ? (uint64_t)m : (uint64_t)512 << 20;
}

/* ST_CACHE_DIR, else $XDG_CACHE_HOME/stitch, else $HOME/.cache/stitch (home from the password
 * database when HOME is unset); created with mkdir -p. When that directory cannot be created or
 * written (a read-only mount, a file in its place, a HOME that is not ours: containers and
 * sandboxes), a private temporary directory serves instead, so compiling still works; it says
 * so once under ST_DEBUG. */
static st_status init_dir(void) {
    if (J.dir) return ST_OK;
    char buf[4096];
    const char *e = base_env(SET_CACHE_DIR), *src = "ST_CACHE_DIR";
    int n;
    if (e) {
        n = snprintf(buf, sizeof buf, "%s", e);
    } else if ((e = base_env(SET_XDG_CACHE_HOME))) {
        n = snprintf(buf, sizeof buf, "%s/stitch", e);
        src = "XDG_CACHE_HOME";
    } else {
        e = base_env(SET_HOME);
        if (!e || !*e) {
            struct passwd *pw = getpwuid(getuid());
            e = pw ? pw->pw_dir : NULL;
        }
        n = snprintf(buf, sizeof buf, "%s/.cache/stitch", e && *e ? e : "");
        src = "HOME";
        if (!e || !*e) n = 0; /* no home: straight to the fallback */
    }
    if (n >= (int)sizeof buf - 64)
        return st_error(ST_ERR_IO, "kernel cache directory path too long (from %s)", src);
    /* Trailing slashes make no difference but would show up in every message. */
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    int err = n > 0 && usable_dir(buf) == 0 ? 0 : (n > 0 ? errno : ENOENT);
    if (err) {
        remove_fallback();
        const char *tmp = base_env(SET_TMPDIR);
        snprintf(fallback_dir, sizeof fallback_dir, "%s/stitch-cache-XXXXXX", tmp ? tmp : "/tmp");
        if (strlen(fallback_dir) > sizeof buf - 64 || !mkdtemp(fallback_dir)) {
            fallback_dir[0] = '\0';
            return st_error(ST_ERR_IO, "cannot create the kernel cache directory %s (from %s): %s; nor a temporary one in %s",
                            n > 0 ? buf : "(no home directory)", src, strerror(err), tmp ? tmp : "/tmp");
        }
        static int said, registered;
        if ((st_rt.debug & 1) && !said++)
            fprintf(stderr, "stitch: the kernel cache directory %s (from %s) is not usable (%s); using %s, removed at exit\n",
                    n > 0 ? buf : "(no home directory)", src, strerror(err), fallback_dir);
        if (!registered++) atexit(remove_fallback);
        snprintf(buf, sizeof buf, "%s", fallback_dir);
    }
    J.dir = st_strdup(buf);
    if (!J.dir) return ST_ERR_OOM;
    J.max = cache_max();
    return jit_cache_prune(); /* at startup: what earlier processes left */
}

/* The kernel ABI struct as kernels see it, emitted once per translation unit after the prelude
 * (the prelude is shared with the interpreter and does not know the ABI). It must match st_kargs
 * in device.h field for field: the asserts below catch a change on the host side.
 * ST_POOL_USE(a), the first statement of every kernel render_c.c prints, stores the two tables the
 * launch passes: the library's GEMM (st_gemm_api_, which the unit's st_gemm_task_<S> /
 * st_gemm_tile_<S> call: ST_GEMM_EXTERN, base/opmath_gemm.h) and the thread pool's.
 * Then the OpenMP entry points GCC's outlined parallel regions call, defined in the unit itself
 * (hidden: they bind inside the object, and libgomp is not needed) and forwarded to the runtime's
 * thread pool (device/cpu_pool.h). Without a pool table (a kernel called by hand with pool NULL) a
 * region runs on the calling thread. Other compilers (clang: libomp's ABI) keep their own OpenMP
 * runtime. */
static const char jit_kargs_src[] =
    "\n#ifndef ST_KARGS_DEFINED\n#define ST_KARGS_DEFINED\n"
    "struct st_pool_api {\n"
    "    void (*parallel)(void (*fn)(void *), void *data, unsigned nthreads);\n"
    "    void (*barrier)(void);\n"
    "    int (*thread_num)(void);\n"
    "    int (*num_threads)(void);\n"
    "};\n"
    "typedef struct st_kargs {\n"
    "    void *const *bufs;\n"
    "    const int64_t *ints;\n"
    "    const double *flts;\n"
    "    int32_t *err;\n"
    "    int nthreads;\n"
    "    const struct st_pool_api *pool;\n"
    "    const struct st_gemm_api *gemm;\n"
    "} st_kargs;\n"
    "#if defined(_OPENMP) && defined(__GNUC__) && !defined(__clang__)\n"
    "static const struct st_pool_api *st_pool_;\n"
    "#define ST_POOL_USE(a) (st_pool_ = (a)->pool, st_gemm_api_ = (a)->gemm)\n"
    "__attribute__((visibility(\"hidden\"))) void GOMP_parallel(void (*fn)(void *), void *data, unsigned n, unsigned flags) {\n"
    "    (void)flags;\n"
    "    if (st_pool_) st_pool_->parallel(fn, data, n); else fn(data);\n"
    "}\n"
    "__attribute__((visibility(\"hidden\"))) void GOMP_barrier(void) { if (st_pool_) st_pool_->barrier(); }\n"
    "__attribute__((visibility(\"hidden\"))) int omp_get_thread_num(void) { return st_pool_ ? st_pool_->thread_num() : 0; }\n"
    "__attribute__((visibility(\"hidden\"))) int omp_get_num_threads(void) { return st_pool_ ? st_pool_->num_threads() : 1; }\n"
    "#else\n"
    "#define ST_POOL_USE(a) (st_gemm_api_ = (a)->gemm)\n"
    "#endif\n"
    "#endif\n";
_Static_assert(offsetof(st_kargs, bufs) == 0 && offsetof(st_kargs, ints) == sizeof(void *) &&
                   offsetof(st_kargs, flts) == 2 * sizeof(void *) && offsetof(st_kargs, err) == 3 * sizeof(void *) &&
                   offsetof(st_kargs, nthreads) == 4 * sizeof(void *) &&
                   offsetof(st_kargs, pool) == 5 * sizeof(void *) && offsetof(st_kargs, gemm) == 6 * sizeof(void *) &&
                   sizeof(st_kargs) == 7 * sizeof(void *),
               "st_kargs in device.h changed: update jit_kargs_src in jit/cache.c");
_Static_assert(offsetof(st_pool_api, parallel) == 0 && offsetof(st_pool_api, barrier) == sizeof(void (*)(void)) &&
                   offsetof(st_pool_api, thread_num) == 2 * sizeof(void (*)(void)) &&
                   offsetof(st_pool_api, num_threads) == 3 * sizeof(void (*)(void)) &&
                   sizeof(st_pool_api) == 4 * sizeof(void (*)(void)),
               "st_pool_api in device/cpu_pool.h changed: update jit_kargs_src in jit/cache.c");

static st_status ensure_init(void) {
    if (J.ready) return ST_OK;
    st_status s = init_dir();
    if (s == ST_OK) s = jit_compiler_init();
    if (s != ST_OK) return s;
    static const char tag[] = "stitch-jit-key-v1";
    base_hash k = {{0, 0}};
    const char *id = jit_compiler_identity(), *flags = jit_compile_flags();
    k = base_hash128(tag, sizeof tag, k);
    k = base_hash128(id, strlen(id), k);
    k = base_hash128(flags, strlen(flags), k);
    k = base_hash128(st_prelude_src, strlen(st_prelude_src), k);
    k = base_hash128(jit_kargs_src, strlen(jit_kargs_src), k);
    J.ctx = k;
    J.ready = 1;
    base_on_shutdown(BASE_LEVEL_JIT, jit_shutdown);
    return ST_OK;
}

/* The bound is kept at startup (ensure_init) and after every max/8 bytes this process writes,
 * never per compile: a scan costs a directory listing and reading every index line. */
st_status jit_cache_prune(void) {
    if (!J.dir) return ST_OK;
    J.written = 0;
    jit_prune_result r;
    st_status s = jit_prune_dir(J.dir, J.max, obj_in_use, &r);
    if (s == ST_OK && (st_rt.debug & 1) && (r.objects || r.indexes || r.temps || r.failed))
        fprintf(stderr, "stitch: kernel cache %s: removed %d objects, %d index lines, %d temp files, %d failed sources; %.1f MB left\n",
                J.dir, r.objects, r.indexes, r.temps, r.failed, (double)r.bytes / 1e6);
    return s;
}

void jit_cache_wrote(uint64_t bytes) {
    J.written += bytes;
    if (J.dir && J.max > 0 && J.written > J.max / 8) (void)jit_cache_prune();
}

const char *jit_cache_dir(void) {
    return init_dir() == ST_OK ? J.dir : NULL;
}

static inline base_hash kernel_key(const char *source) {
    return base_hash128(source, strlen(source), J.ctx);
}

/* ---- loaded objects ---- */

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", J.dir, name); }

static void debug_drop(const char *what, const char *name, const char *why) {
    if (st_rt.debug & 1) fprintf(stderr, "stitch: dropped %s %s/%s from the kernel cache (%s)\n", what, J.dir, name, why);
}

static jit_obj *find_obj(const char *name) {
    for (jit_obj *o = J.objs; o; o = o->next)
        if (!strcmp(o->name, name)) return o;
    return NULL;
}

static int obj_in_use(const char *name) {
    return find_obj(name) != NULL;
}

/* Reads the whole file at path: its size and checksum. 0 on success. */
static int file_sum(const char *path, uint64_t *size, uint64_t *sum) {
    char *buf;
    size_t n;
    if (base_read_file(path, &buf, &n) != 0) return -1;
    *size = n;
    *sum = base_hash128(buf, n, (base_hash){{0, 0}}).h[0];
    st_free(buf);
    return 0;
}

/* The OpenMP runtime (libgomp, or libomp under clang) comes in as a dependency of the first kernel
 * object. Its worker threads outlive a parallel region, so unloading it with the last kernel
 * object (jit_shutdown) would leave them running in unmapped code. Pin it once: re-open it with
 * RTLD_NODELETE (never closed; a process-lifetime mapping, no heap memory). */
static void pin_openmp(void *handle) {
    static int pinned;
    if (pinned) return;
    static const char *const probes[] = {"GOMP_parallel", "__kmpc_fork_call", "omp_get_num_threads"};
    for (int i = 0; i < 3; i++) {
        void *p = dlsym(handle, probes[i]);
        Dl_info info;
        if (p && dladdr(p, &info) && info.dli_fname && dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) {
            pinned = 1;
            return;
        }
    }
}

/* dlopen's dir/name and records it (size and sum as verified by the caller). NULL on failure
 * with *why describing it (dlerror text; static storage). */
static jit_obj *open_obj(const char *name, uint64_t size, uint64_t sum, const char **why) {
    char path[4200];
    path_of(path, sizeof path, name);
    jit_obj *o = st_calloc(1, sizeof *o);
    if (!o) { *why = "out of memory"; return NULL; }
    o->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!o->handle) {
        const char *e = dlerror();
        *why = e ? e : "dlopen failed";
        st_free(o);
        return NULL;
    }
    pin_openmp(o->handle);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->size = size;
    o->sum = sum;
    o->next = J.objs;
    J.objs = o;
    return o;
}

static st_kernel_fn obj_sym(jit_obj *o, const char *hex) {
    char sym[48];
    snprintf(sym, sizeof sym, "st_k_%s", hex);
    void *p = dlsym(o->handle, sym);
    st_kernel_fn fn = NULL;
    /* POSIX guarantees a data pointer from dlsym converts to a function pointer; memcpy avoids the
     * ISO C (-Wpedantic) complaint about the cast. */
    if (p) memcpy(&fn, &p, sizeof fn);
    return fn;
}

/* Adds key -> fn to the memory cache. ST_ERR_OOM on failure. */
static st_status mem_insert(base_hash key, st_kernel_fn fn, jit_obj *o) {
    jit_entry *e = st_malloc(sizeof *e);
    if (!e) return ST_ERR_OOM;
    memset(e, 0, sizeof *e);
    e->key = key;
    e->fn = fn;
    e->obj = o;
    base_hash_oom = 0;
    HASH_ADD(hh, J.table, key, sizeof(base_hash), e);
    if (base_hash_oom) {
        st_free(e);
        return st_error(ST_ERR_OOM, "out of memory growing the kernel cache");
    }
    return ST_OK;
}

static jit_entry *mem_find(base_hash key) {
    jit_entry *e = NULL;
    HASH_FIND(hh, J.table, &key, sizeof(base_hash), e);
    return e;
}

/* ---- the disk index ---- */

static int valid_so_name(const char *s) {
    size_t n = strlen(s);
    if (n < 4 || n >= JIT_NAME_MAX || strcmp(s + n - 3, ".so") || s[0] == '.') return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              s[i] == '-' || s[i] == '_' || s[i] == '.'))
            return 0;
    return 1;
}

static uint64_t line_sum(const char *s, size_t n) {
    base_hash z = {{0x6b, 0}};
    return base_hash128(s, n, z).h[0];
}

/* Writes <hex>.k pointing at the verified object o. Best effort: a kernel that cannot be indexed
 * still works in this process, it will just be compiled again by the next one. */
static void write_index(const char *hex, const jit_obj *o) {
    char line[512], name[48];
    int n = snprintf(line, sizeof line, JIT_K_MAGIC " %s %s %" PRIu64 " %016" PRIx64, hex, o->name, o->size, o->sum);
    snprintf(line + n, sizeof line - (size_t)n, " %016" PRIx64 "\n", line_sum(line, (size_t)n));
    snprintf(name, sizeof name, "%s.k", hex);
    if (base_write_atomic(J.dir, name, line, strlen(line)) != 0 && (st_rt.debug & 1))
        fprintf(stderr, "stitch: cannot write the kernel index %s/%s: %s\n", J.dir, name, strerror(errno));
}

/* Loads the kernel with this key from disk, verifying the index and the object; removes what is
 * corrupt. Returns NULL on a miss (no error set). */
static st_kernel_fn disk_load(base_hash key, const char *hex) {
    char kname[48], kpath[4200], spath[4200], line[513];
    snprintf(kname, sizeof kname, "%s.k", hex);
    path_of(kpath, sizeof kpath, kname);
    uint64_t ksize;
    unsigned kmode;
    int fd = base_open_regular(kpath, &ksize, &kmode); /* a FIFO planted there must not block us */
    if (fd == -2) {
        debug_drop("index", kname, "not a regular file");
        unlink(kpath);
        return NULL;
    }
    if (fd < 0) return NULL;
    ssize_t r;
    do r = read(fd, line, sizeof line - 1); while (r < 0 && errno == EINTR);
    close(fd);
    if (r < 0) return NULL;
    line[r] = '\0';

    char khex[40], so[JIT_NAME_MAX + 1];
    uint64_t size, sum, lsum;
    int pos = 0;
    char *nl = strchr(line, '\n');
    if (!nl || nl[1] != '\0' ||
        sscanf(line, JIT_K_MAGIC " %39s %128s %" SCNu64 " %" SCNx64 "%n", khex, so, &size, &sum, &pos) != 4 ||
        sscanf(line + pos, " %" SCNx64, &lsum) != 1 || lsum != line_sum(line, (size_t)pos) ||
        strcmp(khex, hex) || !valid_so_name(so)) {
        debug_drop("index", kname, "unreadable or corrupt");
        unlink(kpath);
        return NULL;
    }

    jit_obj *o = find_obj(so);
    if (o) {
        /* Already open (verified then): the index must agree with what we verified. */
        if (o->size != size || o->sum != sum) {
            debug_drop("index", kname, "does not match its shared object");
            unlink(kpath);
            return NULL;
        }
    } else {
        path_of(spath, sizeof spath, so);
        uint64_t fsize, fsum;
        if (file_sum(spath, &fsize, &fsum) != 0) {
            if (errno == ENOENT) {
                debug_drop("index", kname, "its shared object is gone");
            } else {
                debug_drop("object", so, "unreadable");
                unlink(spath);
            }
            unlink(kpath);
            return NULL;
        }
        if (fsize != size || fsum != sum) {
            debug_drop("object", so, fsize != size ? "wrong size" : "wrong checksum");
            unlink(spath);
            unlink(kpath);
            return NULL;
        }
        const char *why = NULL;
        o = open_obj(so, size, sum, &why);
        if (!o) {
            debug_drop("object", so, why);
            unlink(spath);
            unlink(kpath);
            return NULL;
        }
        jit_touch(spath); /* recently used: the last to be pruned */
    }
    st_kernel_fn fn = obj_sym(o, hex);
    if (!fn) {
        debug_drop("index", kname, "symbol missing from its shared object");
        unlink(kpath);
        return NULL;
    }
    if (mem_insert(key, fn, o) != ST_OK) return NULL;
    return fn;
}

/* ---- public (internal) API ---- */

st_kernel_fn jit_lookup(const char *source, int allow_disk) {
    if (!source) return NULL;
    /* The memory path: nothing is cached before the first init, so a cold probe costs nothing. */
    if (!J.ready && !allow_disk) return NULL;
    if (!J.ready && ensure_init() != ST_OK) return NULL;
    if (!J.table && !allow_disk) return NULL;
    base_hash key = kernel_key(source);
    jit_entry *e = mem_find(key);
    if (e) {
        st_stats_g.cache_hits_memory++;
        return e->fn;
    }
    if (!allow_disk) return NULL;
    char hex[33];
    base_hash_hex(key, hex);
    st_kernel_fn fn = disk_load(key, hex);
    if (fn) st_stats_g.cache_hits_disk++;
    return fn;
}

/* Builds the TU of a batch (prelude once, then each kernel between #define KNAME / #undef KNAME)
 * into *b (the caller frees it), its tag btag[33] and the kernels' names for errors what[400]. */
static st_status batch_text(int m, const int *idx, const base_hash *keys, const char *const *sources,
                            const char *const *hints, sbuf *out, char *btag, char *what) {
    char hex[33], line[256];
    base_hash bkey = base_hash128(keys, 0, J.ctx);
    for (int j = 0; j < m; j++) bkey = base_hash128(&keys[idx[j]], sizeof(base_hash), bkey);
    base_hash_hex(bkey, btag);

    sbuf b = {0};
    snprintf(line, sizeof line, "/* stitch kernel batch %s: %d kernel%s */\n", btag, m, m == 1 ? "" : "s");
    sbuf_puts(&b, line);
    sbuf_puts(&b, "#define ST_GEMM_EXTERN 1 /* the library's GEMM, through st_kargs.gemm */\n");
    sbuf_puts(&b, st_prelude_src);
    sbuf_puts(&b, jit_kargs_src);
    for (int j = 0; j < m; j++) {
        int i = idx[j];
        base_hash_hex(keys[i], hex);
        char hint[64] = "";
        if (hints && hints[i]) jit_comment_ident(hints[i], hint, sizeof hint);
        snprintf(line, sizeof line, "\n/* ---- kernel %d/%d%s%s ---- */\n#define KNAME st_k_%s\n", j + 1, m,
                 hint[0] ? ": " : "", hint, hex);
        sbuf_puts(&b, line);
        const char *src = sources[i];
        size_t sl = strlen(src);
        sbuf_put(&b, src, sl);
        sbuf_puts(&b, sl && src[sl - 1] == '\n' ? "#undef KNAME\n" : "\n#undef KNAME\n");
        if (st_rt.debug & 4)
            fprintf(stderr, "stitch: kernel st_k_%s%s%s:\n%s%s", hex, hint[0] ? " " : "", hint, src,
                    sl && src[sl - 1] == '\n' ? "" : "\n");
    }
    if (b.oom) { sbuf_free(&b); return st_error(ST_ERR_OOM, "out of memory building a kernel batch"); }
    *out = b;

    /* The kernels' names for a compile error: "kernel st_k_<key> (hint)", or the batch and its
     * first kernels' names. */
    const size_t wcap = 400;
    size_t wl = 0;
    if (m == 1) {
        base_hash_hex(keys[idx[0]], hex);
        const char *h = hints && hints[idx[0]] ? hints[idx[0]] : NULL;
        snprintf(what, wcap, "kernel st_k_%s%s%s%s", hex, h ? " (" : "", h ? h : "", h ? ")" : "");
    } else {
        wl = (size_t)snprintf(what, wcap, "batch %s of %d kernels (", btag, m);
        for (int j = 0; j < m && wl < wcap; j++) {
            const char *h = hints && hints[idx[j]] ? hints[idx[j]] : "unnamed";
            if (wl + strlen(h) + 8 > wcap) {
                wl += (size_t)snprintf(what + wl, wcap - wl, "%s...", j ? ", " : "");
                break;
            }
            wl += (size_t)snprintf(what + wl, wcap - wl, "%s%s", j ? ", " : "", h);
        }
        if (wl < wcap) snprintf(what + wl, wcap - wl, ")");
    }
    return ST_OK;
}

/* Loads a compiled batch (so, a file name in the cache dir; s the compiler's status, ms its wall
 * time) and indexes every kernel in memory and on disk. */
static st_status batch_load(int m, const int *idx, const base_hash *keys, const char *const *hints,
                            const char *so, double ms, st_status s) {
    char hex[33];
    st_stats_g.compile_calls++;
    st_stats_g.compile_ms += ms;
    if (st_rt.debug & 1)
        fprintf(stderr, "stitch: compiled %d kernel%s in %.1f ms (%.1f ms/kernel)%s\n", m, m == 1 ? "" : "s", ms,
                ms / m, s == ST_OK ? "" : " [failed]");
    if (s != ST_OK) return s;
    st_stats_g.kernels_compiled += (uint64_t)m;

    char path[4200];
    path_of(path, sizeof path, so);
    uint64_t size, sum;
    if (file_sum(path, &size, &sum) != 0)
        return st_error(ST_ERR_IO, "cannot read the compiled kernels %s: %s", path, strerror(errno));
    const char *why = NULL;
    jit_obj *o = open_obj(so, size, sum, &why);
    if (!o) {
        s = st_error(ST_ERR_COMPILE, "cannot load the compiled kernels %s: %s", path, why);
        unlink(path);
        return s;
    }
    for (int j = 0; j < m; j++) {
        int i = idx[j];
        base_hash_hex(keys[i], hex);
        st_kernel_fn fn = obj_sym(o, hex);
        if (!fn)
            return st_error(ST_ERR_COMPILE, "kernel %d of batch %s (%s) defines no function KNAME (st_k_%s)", j + 1,
                            so, hints && hints[i] ? hints[i] : "unnamed", hex);
        s = mem_insert(keys[i], fn, o);
        if (s != ST_OK) return s;
        write_index(hex, o);
    }
    jit_cache_wrote(size);
    return ST_OK;
}

/* Compiles the kernels keys[idx[0..m)] with one compiler call, loads them and indexes them. */
static st_status compile_missing(int m, const int *idx, const base_hash *keys, const char *const *sources,
                                 const char *const *hints) {
    sbuf b = {0};
    char btag[33], what[400], so[JIT_NAME_MAX];
    double ms = 0;
    st_status s = batch_text(m, idx, keys, sources, hints, &b, btag, what);
    if (s != ST_OK) return s;
    s = jit_compile_batch(J.dir, btag, what, b.s, b.n, so, sizeof so, &ms);
    sbuf_free(&b);
    return batch_load(m, idx, keys, hints, so, ms, s);
}

/* Keys of sources[0..n); out[i] for each kernel a cache holds (memory, then disk), NULL for the
 * others, whose indices go to idx (a source given twice once). Returns how many are missing. */
static int find_cached(int n, const char *const *sources, base_hash *keys, int *idx, st_kernel_fn *out) {
    int m = 0;
    char hex[33];
    for (int i = 0; i < n; i++) {
        keys[i] = kernel_key(sources[i]);
        out[i] = NULL;
        jit_entry *e = mem_find(keys[i]);
        if (e) {
            out[i] = e->fn;
            st_stats_g.cache_hits_memory++;
            continue;
        }
        /* The same source twice in one call: compile it once. */
        int dup = 0;
        for (int j = 0; j < m && !dup; j++) dup = !memcmp(&keys[idx[j]], &keys[i], sizeof(base_hash));
        if (dup) continue;
        base_hash_hex(keys[i], hex);
        out[i] = disk_load(keys[i], hex);
        if (out[i]) {
            st_stats_g.cache_hits_disk++;
            continue;
        }
        idx[m++] = i;
    }
    return m;
}

/* Fills in every out[i] still NULL from the memory cache (after a batch was loaded). */
static st_status fill_compiled(int n, const base_hash *keys, st_kernel_fn *out) {
    for (int i = 0; i < n; i++) {
        if (out[i]) continue;
        jit_entry *e = mem_find(keys[i]);
        if (!e) return st_error(ST_ERR_INTERNAL, "jit: kernel %d missing after compilation", i);
        out[i] = e->fn;
    }
    return ST_OK;
}

static st_status check_sources(const char *fn, int n, const char *const *sources, const st_kernel_fn *out) {
    if (n < 0 || (n > 0 && (!sources || !out))) return st_error(ST_ERR_INTERNAL, "%s: bad arguments (n=%d)", fn, n);
    for (int i = 0; i < n; i++)
        if (!sources[i]) return st_error(ST_ERR_INTERNAL, "%s: source %d is NULL", fn, i);
    return ST_OK;
}

st_status jit_get_kernels(int n, const char *const *sources, const char *const *kname_hint, st_kernel_fn *out) {
    st_status s = check_sources("jit_get_kernels", n, sources, out);
    if (s != ST_OK || n == 0) return s;
    if ((s = ensure_init()) != ST_OK) return s;
    base_hash *keys = st_malloc((size_t)n * sizeof *keys);
    int *idx = st_malloc((size_t)n * sizeof *idx);
    if (!keys || !idx) {
        st_free(keys);
        st_free(idx);
        return ST_ERR_OOM;
    }
    int m = find_cached(n, sources, keys, idx, out);
    if (m > 0) s = compile_missing(m, idx, keys, sources, kname_hint);
    if (s == ST_OK) s = fill_compiled(n, keys, out);
    st_free(keys);
    st_free(idx);
    return s;
}

/* ---- the background tier: a batch compiling while the caller goes on ----
 * At most jit_async_slots() compilers run in the background at once (one per CPU but one: the
 * interpreter and the kernels keep a core). A job that finds none free keeps its sources and
 * starts at a later poll that finds one, after looking in the caches again: a kernel another job
 * compiled meanwhile (a second plan of the same step) is not compiled twice. A plan that keeps
 * running polls its job at every run, so it gets the next free compiler; a job whose plan never
 * runs again (a one-time flush) and found no compiler starts only at st_shutdown (fuser/plan_cache.c
 * waits for every job, one after the other). A compiler that has ended is
 * reaped by whichever call comes next (jit_async_reap: every start, poll and flush), which loads
 * and indexes its kernels and frees its slot: a job whose plan never runs again does not hold one.
 * Priority: a job started for a plan's first run (repeats 0: the plan may never run again) gives
 * its compiler up to a job of a plan that runs again (repeats 1, or any non-blocking poll: its
 * owner ran again) that finds none free; it is stopped, waits again with its sources, and starts
 * like any waiting job. So a one-time flush (the first training step, which creates the
 * optimizer's state) does not keep the steady step interpreted while it compiles. */
struct jit_async {
    int n, m;         /* sources; of them missing from both caches (idx) */
    base_hash *keys;
    int *idx;
    char **srcs;      /* n copies until the job has ended (a waiting or stopped job starts from them) */
    char **hints;     /* n copies (NULL entries allowed): the batch's names in errors */
    int started, ended;
    int repeats;      /* its plan runs again: it may take a compiler from a job whose plan may not */
    st_status status; /* once ended: the batch's load, and its error's text (err) */
    char *err;
    struct jit_async *next_running; /* the running list (started, not ended) */
    char btag[33], what[400];
    jit_cjob job;
};
static jit_async *running_jobs;

static int jit_async_slots(void) {
    int n = dev_cpu_threads() - 1;
    return n > 0 ? n : 1;
}

static void unlink_running(jit_async *a) {
    for (jit_async **p = &running_jobs; *p; p = &(*p)->next_running)
        if (*p == a) {
            *p = a->next_running;
            return;
        }
}

static void free_srcs(jit_async *a) {
    if (!a->srcs) return;
    for (int i = 0; i < a->n; i++) st_free(a->srcs[i]);
    st_free(a->srcs);
    a->srcs = NULL;
}

/* Ends a started job whose compiler has ended (block: waits for it): loads and indexes its
 * kernels. 1 when it has ended. */
static int async_end(jit_async *a, int block) {
    char so[JIT_NAME_MAX];
    double ms = 0;
    st_status s;
    if (a->ended) return 1;
    if (!jit_compile_poll(&a->job, block, so, sizeof so, &ms, &s)) return 0;
    a->status = batch_load(a->m, a->idx, a->keys, (const char *const *)a->hints, so, ms, s);
    if (a->status != ST_OK) { /* the owner's poll reports it (the reaper may be another job's call) */
        a->err = st_strdup(st_last_error());
        st_clear_error();
    }
    a->ended = 1;
    unlink_running(a);
    free_srcs(a);
    return 1;
}

void jit_async_reap(void) {
    for (jit_async *a = running_jobs, *next; a; a = next) {
        next = a->next_running;
        (void)async_end(a, 0);
    }
}

int jit_async_running(const jit_async *a) { return a->started && !a->ended; }

void jit_async_free(jit_async *a) {
    if (!a) return;
    if (a->started && !a->ended) {
        jit_compile_cancel(&a->job);
        unlink_running(a);
    }
    free_srcs(a);
    for (int i = 0; i < a->n && a->hints; i++) st_free(a->hints[i]);
    st_free(a->hints);
    st_free(a->err);
    st_free(a->keys);
    st_free(a->idx);
    st_free(a);
}

/* Starts the compiler on the job's m missing kernels (its sources: a->srcs). */
static st_status async_begin(jit_async *a) {
    sbuf b = {0};
    st_status s = batch_text(a->m, a->idx, a->keys, (const char *const *)a->srcs, (const char *const *)a->hints,
                             &b, a->btag, a->what);
    if (s == ST_OK) s = jit_compile_start(J.dir, a->btag, a->what, b.s, b.n, &a->job);
    sbuf_free(&b);
    if (s == ST_OK) {
        a->started = 1;
        a->next_running = running_jobs;
        running_jobs = a;
    }
    return s;
}

/* Is a compiler free for job a? When none is and a's plan runs again, a running job of a plan's
 * first run is stopped (its compiler killed, its files removed) and waits again: its compiler is
 * a's. The last such job started goes first (the least work lost). */
static bool slot_for(jit_async *a) {
    if (st_rt.compiles_running < jit_async_slots()) return true;
    if (!a->repeats) return false;
    jit_async *v = running_jobs;   /* the running list is newest first */
    while (v && v->repeats) v = v->next_running;
    if (!v) return false;
    jit_compile_cancel(&v->job);
    unlink_running(v);
    v->started = 0;
    if (st_rt.debug)
        fprintf(stderr, "stitch: a compile for a plan's first run (%d kernel%s) stopped: its compiler goes to a "
                        "plan that runs again; it waits for the next free one\n", v->m, v->m == 1 ? "" : "s");
    return true;
}

st_status jit_async_start(int n, const char *const *sources, const char *const *kname_hint, int repeats,
                          st_kernel_fn *out, jit_async **job) {
    *job = NULL;
    st_status s = check_sources("jit_async_start", n, sources, out);
    if (s != ST_OK || n == 0) return s;
    if ((s = ensure_init()) != ST_OK) return s;
    jit_async_reap();
    jit_async *a = st_calloc(1, sizeof *a);
    if (!a) return st_last_status();
    a->n = n;
    a->repeats = repeats != 0;
    a->keys = st_malloc((size_t)n * sizeof *a->keys);
    a->idx = st_malloc((size_t)n * sizeof *a->idx);
    a->hints = st_calloc((size_t)n, sizeof *a->hints);
    if (!a->keys || !a->idx || !a->hints) {
        jit_async_free(a);
        return st_last_status();
    }
    a->m = find_cached(n, sources, a->keys, a->idx, out);
    if (a->m == 0) {
        jit_async_free(a);
        return ST_OK;
    }
    if (!(a->srcs = st_calloc((size_t)n, sizeof *a->srcs))) s = st_last_status();
    for (int i = 0; i < n && s == ST_OK; i++)
        if (!(a->srcs[i] = st_strdup(sources[i]))) s = st_last_status();
    for (int i = 0; i < n && s == ST_OK; i++)
        if (kname_hint && kname_hint[i] && !(a->hints[i] = st_strdup(kname_hint[i]))) s = st_last_status();
    if (s == ST_OK && slot_for(a)) s = async_begin(a);   /* else the job waits for a compiler */
    if (s != ST_OK) {
        jit_async_free(a);
        return s;
    }
    *job = a;
    return ST_OK;
}

int jit_async_poll(jit_async *a, int block, st_kernel_fn *out, st_status *status) {
    st_status s;
    jit_async_reap();
    if (!block) a->repeats = 1;   /* its owner ran again */
    if (!a->started) { /* waiting for a compiler, or stopped (block: take one anyway) */
        if (!block && !slot_for(a)) return 0;
        a->m = find_cached(a->n, (const char *const *)a->srcs, a->keys, a->idx, out);
        s = a->m ? async_begin(a) : ST_OK;
        if (s != ST_OK || a->m == 0) { /* failed to start, or every kernel compiled by another job */
            if (s == ST_OK) s = fill_compiled(a->n, a->keys, out);
            *status = s;
            return 1;
        }
    }
    if (!async_end(a, block)) return 0;
    s = a->status;
    if (s != ST_OK) s = st_error(s, "%s", a->err ? a->err : "out of memory keeping a compile error");
    else s = fill_compiled(a->n, a->keys, out);
    *status = s;
    return 1;
}

void jit_shutdown(void) {
    jit_entry *e, *tmp;
    HASH_ITER(hh, J.table, e, tmp) {
        HASH_DEL(J.table, e);
        st_free(e);
    }
    for (jit_obj *o = J.objs, *next; o; o = next) {
        next = o->next;
        dlclose(o->handle);
        st_free(o);
    }
    if (J.dir && !strcmp(J.dir, fallback_dir)) remove_fallback();
    st_free(J.dir);
    memset(&J, 0, sizeof J);
    jit_compiler_shutdown();
}
