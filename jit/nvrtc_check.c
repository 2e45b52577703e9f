/*
 * nvrtc_check.c — the CI check mode (ST_NVRTC_CHECK=1): every kernel the executor lowers is also
 * rendered to CUDA C and compiled by NVRTC for an A100 (compute capability 8.0) and an H100 (9.0),
 * on a machine without a GPU, under the architecture names the runtime would use there
 * (nvrtc_arch: sm_80 and sm_90a). A kernel that does not compile makes the process exit non-zero.
 *
 * Flow: jit_nvrtc_check renders the kernel, drops a source seen before (process-wide, by hash) and
 * queues it. A full queue (CHECK_BATCH kernels or CHECK_BYTES of source) and the end of every flush
 * (jit_nvrtc_check_flush; the exit handler only for kernels queued outside a flush) compile the
 * queue as ONE unit per architecture (the prelude is parsed once per batch, not per
 * kernel), the two architectures in two threads. When a batch fails, its kernels are compiled one
 * by one for that architecture to name the failing ones; each failing source and log is saved
 * under <cache dir>/failed/ and printed. At exit one line goes to stderr:
 *     nvrtc-check: N kernels compiled for sm_80 and sm_90a, F failed (T s)
 * "N F" is appended to $ST_NVRTC_CHECK_LOG when set (make test-nvrtc totals the test programs),
 * and the process ends with _exit(1) when F > 0 (an exit handler cannot change the status in any
 * other way; stdio is flushed first).
 *
 * ST_NVRTC_CHECK_SEEN (a directory; make test gives each run a new one) widens "seen before" to
 * every process of a run: a kernel that compiled for both architectures leaves an empty file
 * <dir>/st_k_<hash of its source> (created after its batch compiled), and a process that meets a
 * source with such a file does not compile it again; the report adds ", N checked by another
 * process". Two processes meeting a new kernel at once both compile it, which costs only time. A
 * kernel that failed leaves nothing, so every process that meets it fails too.
 *
 * Invariants: the check never changes the CPU run. It allocates with plain malloc, not st_malloc,
 * so a test's injected allocation failures (st_debug_fail_alloc) are neither consumed nor turned
 * into false compile failures; a renderer that runs out of memory skips the kernel (counted, not
 * failed). It touches no st_stats_g counter. Only the process that started the check reports (a forked child that exits does not compile its parent's queue again).
 */
#include "jit/nvrtc.h"
#include "jit/render.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#define uthash_malloc(sz) malloc(sz)
#define uthash_free(ptr, sz) free(ptr)
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) do { (void)(obj); C.hash_oom = 1; } while (0)
#define uthash_fatal(msg) do { C.hash_oom = 1; } while (0)
#include <uthash.h>

/* Batch size. Measured with NVRTC 13.0 on the 2-core CI machine: a program costs ~30 ms fixed
 * (start-up, prelude) plus 20-80 ms per kernel per architecture (codegen dominates: test_ops'
 * 433 kernels take 21 s, test_autograd's 518 take 36 s, both architectures in parallel). With
 * batches of 64 the fixed part is a few percent; bigger batches save little, and a failing batch
 * costs a one-by-one recompilation of all its kernels. */
#define CHECK_BATCH 64
#define CHECK_BYTES (256 * 1024)
#define CHECK_NARCH 2
static const int check_cc[CHECK_NARCH] = {80, 90};   /* the GPUs checked for: A100, H100 */

typedef struct check_seen { base_hash key; UT_hash_handle hh; } check_seen;

typedef struct check_item {
    char *src;       /* malloc'ed */
    char name[64];   /* readable hint */
    char kname[40];  /* st_k_<hash of the source> */
} check_item;

static struct {
    int enabled;         /* -1 not read yet */
    pid_t owner;         /* the process that started the check (0: not started) */
    int reported;        /* the exit report ran */
    int hash_oom;
    check_seen *seen;
    check_item *q;
    int nq, capq;
    size_t qbytes;
    unsigned long long compiled, failed, skipped, batches, elsewhere;
    double ms;           /* wall time of the compilations */
    int load_reported;
    char arch[CHECK_NARCH][16];   /* what the runtime compiles for on check_cc (nvrtc_arch) */
} C = {.enabled = -1};

static void check_at_exit(void);

/* The exit handler must run before libnvrtc's own static destructors: compiling after them fails
 * (NVRTC_ERROR_INVALID_OPTION) or crashes. Handlers run in reverse order of registration, so it is
 * registered once libnvrtc is loaded, and again after every batch in case a compilation registered
 * destructors of its own; it acts once. */
static void register_exit(void) {
    if (atexit(check_at_exit) != 0) fprintf(stderr, "nvrtc-check: cannot register the exit report\n");
}

/* First use in this process: load libnvrtc (a failure is reported by the first batch), name the
 * architectures as the runtime does, then register the exit report. */
static void start(void) {
    if (C.owner) return;
    C.owner = getpid();
    (void)nvrtc_load();
    for (int a = 0; a < CHECK_NARCH; a++)
        if (nvrtc_arch(check_cc[a], C.arch[a], sizeof C.arch[a]) != ST_OK) /* no libnvrtc: said by the first batch */
            snprintf(C.arch[a], sizeof C.arch[a], "sm_%d", check_cc[a]);
    register_exit();
}

int jit_nvrtc_check_enabled(void) {
    if (C.enabled < 0) {
        const char *e = base_env(SET_NVRTC_CHECK);
        C.enabled = e && strcmp(e, "0") != 0;
        /* Started now, so that a program generating no kernel still reports its "0 kernels". */
        if (C.enabled) start();
    }
    return C.enabled;
}

/* ---- compiling a batch ---- */

typedef struct check_job {
    const char *unit, *arch, *name;
    int rc;
    char *log;
    double ms;
} check_job;

static void *run_job(void *arg) {
    check_job *j = arg;
    j->rc = nvrtc_try(j->unit, j->arch, j->name, NULL, NULL, &j->log, &j->ms);
    return NULL;
}

/* Prints a failure with the first lines of its log, saving the unit under failed/. */
static void report_failure(const char *what, const char *arch, const char *unit, const char *log, int rc,
                           const char *tag) {
    char path[4200];
    fprintf(stderr, "nvrtc-check: FAILED %s for %s (%s)", what, arch, nvrtc_result_name(rc));
    if (nvrtc_save_failed(unit, log, tag, path, sizeof path) == 0)
        fprintf(stderr, "; source saved in %s, log in %.*s.log\n", path, (int)strlen(path) - 3, path);
    else
        fprintf(stderr, "; the source could not be saved: %s\n", strerror(errno));
    if (log && *log) fprintf(stderr, "%.2048s%s", log, strlen(log) > 2048 ? "\n[... log cut ...]\n" : "");
}

/* Compiles each kernel of the queue alone for arch; marks and reports the failing ones. Returns
 * how many failed. */
static int bisect(const char *arch, unsigned char *bad) {
    int nbad = 0;
    for (int i = 0; i < C.nq; i++) {
        const check_item *it = &C.q[i];
        const char *src = it->src, *kname = it->kname, *hint = it->name;
        char *unit = nvrtc_unit(1, &src, &kname, &hint, 1);
        if (!unit) {
            fprintf(stderr, "nvrtc-check: out of memory building the unit of %s\n", it->name);
            bad[i] = 1, nbad++;
            continue;
        }
        char *log = NULL, fname[64];
        double ms;
        snprintf(fname, sizeof fname, "%s.cu", kname);
        int rc = nvrtc_try(unit, arch, fname, NULL, NULL, &log, &ms);
        C.ms += ms;
        if (rc != 0) {
            char what[160];
            snprintf(what, sizeof what, "kernel %s (%s)", it->name, kname);
            report_failure(what, arch, unit, log, rc, kname);
            bad[i] = 1, nbad++;
        }
        free(log);
        free(unit);
    }
    return nbad;
}

static void clear_queue(void) {
    for (int i = 0; i < C.nq; i++) free(C.q[i].src);
    C.nq = 0;
    C.qbytes = 0;
}

/* The file of kname in ST_NVRTC_CHECK_SEEN into path[cap]; 0 when the setting is not set. */
static int seen_path(const char *kname, char *path, size_t cap) {
    const char *dir = base_env(SET_NVRTC_CHECK_SEEN);
    return dir && snprintf(path, cap, "%s/%s", dir, kname) < (int)cap;
}

/* Records that kname compiled for every architecture (best effort: an unwritable directory only
 * means other processes compile it again). */
static void mark_seen(const char *kname) {
    char path[4200];
    if (!seen_path(kname, path, sizeof path)) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0) close(fd);
}

/* Compiles the queue (one unit, both architectures in parallel), then empties it. */
static void flush_queue(void) {
    if (C.nq == 0) return;
    int n = C.nq;
    if (nvrtc_load() != ST_OK) {
        if (!C.load_reported) fprintf(stderr, "nvrtc-check: %s\n", st_last_error());
        C.load_reported = 1;
        C.failed += (unsigned long long)n;
        clear_queue();
        return;
    }
    const char **srcs = malloc((size_t)n * sizeof *srcs), **knames = malloc((size_t)n * sizeof *knames),
               **hints = malloc((size_t)n * sizeof *hints);
    unsigned char *bad = calloc((size_t)n, 1);
    char *unit = NULL;
    if (srcs && knames && hints && bad) {
        for (int i = 0; i < n; i++) srcs[i] = C.q[i].src, knames[i] = C.q[i].kname, hints[i] = C.q[i].name;
        unit = nvrtc_unit(n, srcs, knames, hints, 1);
    }
    if (!unit) {
        fprintf(stderr, "nvrtc-check: out of memory building a unit of %d kernels\n", n);
        C.failed += (unsigned long long)n;
    } else {
        char bname[64];
        snprintf(bname, sizeof bname, "nvrtc-check-batch-%llu.cu", C.batches + 1);
        check_job jobs[CHECK_NARCH];
        for (int a = 0; a < CHECK_NARCH; a++)
            jobs[a] = (check_job){.unit = unit, .arch = C.arch[a], .name = bname, .rc = 0, .log = NULL, .ms = 0};
        double t0 = st_now_ms();
        pthread_t th;
        int threaded = pthread_create(&th, NULL, run_job, &jobs[1]) == 0;
        run_job(&jobs[0]);
        if (threaded) pthread_join(th, NULL);
        else run_job(&jobs[1]);
        double wall = st_now_ms() - t0;
        C.ms += wall;
        C.batches++;
        register_exit();
        if (st_rt.debug & 1)
            fprintf(stderr, "nvrtc-check: batch %llu: %d kernels, %zu KB of source: %s %.0f ms, %s %.0f ms, wall %.0f ms "
                    "(%.1f ms per kernel for both)\n", C.batches, n, C.qbytes / 1024, jobs[0].arch, jobs[0].ms,
                    jobs[1].arch, jobs[1].ms, wall, wall / n);
        for (int a = 0; a < CHECK_NARCH; a++) {
            if (jobs[a].rc == 0) continue;
            if (bisect(jobs[a].arch, bad) == 0) {
                /* Every kernel compiles alone: they clash with each other (a helper that is not
                 * KNAME-unique), which the contract forbids. */
                report_failure("a batch whose kernels compile alone but not together (a name that is not "
                               "KNAME-unique?)", jobs[a].arch, unit, jobs[a].log, jobs[a].rc, "nvrtc-check-batch");
                memset(bad, 1, (size_t)n);
            }
        }
        for (int a = 0; a < CHECK_NARCH; a++) free(jobs[a].log);
        for (int i = 0; i < n; i++) {
            C.failed += bad[i];
            if (!bad[i]) mark_seen(C.q[i].kname);
        }
        C.compiled += (unsigned long long)n;
    }
    free(unit);
    free(srcs);
    free(knames);
    free(hints);
    free(bad);
    clear_queue();
}

/* ---- queueing ---- */

void jit_nvrtc_check_source(const char *src, const char *name) {
    start();
    base_hash seed = {{0x6e767274ULL, 0}};
    base_hash key = base_hash128(src, strlen(src), seed);
    check_seen *s = NULL;
    HASH_FIND(hh, C.seen, &key, sizeof key, s);
    if (s) return;
    s = calloc(1, sizeof *s);
    if (C.nq == C.capq) {
        int cap = C.capq ? 2 * C.capq : CHECK_BATCH;
        check_item *q = realloc(C.q, (size_t)cap * sizeof *q);
        if (q) C.q = q, C.capq = cap;
    }
    char *copy = strdup(src);
    if (!s || !copy || C.nq == C.capq) {
        free(s);
        free(copy);
        C.skipped++;
        return;
    }
    s->key = key;
    C.hash_oom = 0;
    HASH_ADD(hh, C.seen, key, sizeof key, s);
    if (C.hash_oom) free(s); /* not remembered: a later duplicate is checked twice, no harm */
    check_item *it = &C.q[C.nq];
    char hex[33], path[4200];
    base_hash_hex(key, hex);
    snprintf(it->kname, sizeof it->kname, "st_k_%s", hex);
    if (seen_path(it->kname, path, sizeof path) && access(path, F_OK) == 0) {   /* another process checked it */
        free(copy);
        C.elsewhere++;
        return;
    }
    C.nq++;
    it->src = copy;
    snprintf(it->name, sizeof it->name, "%s", name && *name ? name : "kernel");
    C.qbytes += strlen(src);
    if (C.nq >= CHECK_BATCH || C.qbytes >= CHECK_BYTES) flush_queue();
}

static void check_rendered(const kir_kernel *k, int sm, const char *name) {
    cuda_launch_desc d;
    char *src = render_cuda_sm(k, sm, &d);
    if (src) {
        jit_nvrtc_check_source(src, name);
        st_free(src);
    } else if (st_last_status() == ST_ERR_OOM) {
        /* Often a test's injected failure: the kernel goes unchecked, it has not failed. */
        C.skipped++;
    } else {
        /* A kernel the CUDA backend cannot express: a failure of the check. */
        start();
        fprintf(stderr, "nvrtc-check: FAILED kernel %s: cannot render it to CUDA C: %s\n", name ? name : "",
                st_last_error());
        C.failed++;
    }
}

/* Both sources a kernel can have: the portable one and the one an sm_80+ device gets (tensor-core
 * matmuls); when they are the same text the second is dropped as seen. */
st_status jit_nvrtc_check(const kir_kernel *k, const char *name) {
    check_rendered(k, 0, name);
    check_rendered(k, 80, name);
    return ST_OK;
}

/* The executor calls this at the end of every flush: the queue is compiled while the process is
 * in its normal state. Compiling at exit is not safe: in a module loaded with dlopen (stitch.so
 * under a stock lua5.4), exit handlers run with the dynamic loader's lock held, and NVRTC's first
 * compilation dlopens libnvrtc-builtins, which then waits for that lock forever. */
void jit_nvrtc_check_flush(void) {
    if (C.enabled > 0 && C.nq) flush_queue();
}

/* ---- at exit ---- */

static void check_at_exit(void) {
    if (getpid() != C.owner || C.reported) return;
    C.reported = 1;
    flush_queue();
    fprintf(stderr, "nvrtc-check: %llu kernels compiled for %s and %s, %llu failed (%.1f s)", C.compiled, C.arch[0],
            C.arch[1], C.failed, C.ms / 1000);
    if (C.elsewhere) fprintf(stderr, ", %llu checked by another process", C.elsewhere);
    if (C.skipped) fprintf(stderr, ", %llu not checked (out of memory)", C.skipped);
    fputc('\n', stderr);
    const char *logp = base_env(SET_NVRTC_CHECK_LOG);
    if (logp) {
        /* O_APPEND: the lines of test programs running side by side do not interleave. */
        int fd = open(logp, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0 || dprintf(fd, "%llu %llu\n", C.compiled, C.failed) < 0)
            fprintf(stderr, "nvrtc-check: cannot append to ST_NVRTC_CHECK_LOG=%s: %s\n", logp, strerror(errno));
        if (fd >= 0) close(fd);
    }
    check_seen *s, *tmp;
    HASH_ITER(hh, C.seen, s, tmp) {
        HASH_DEL(C.seen, s);
        free(s);
    }
    free(C.q);
    C.q = NULL;
    C.capq = 0;
    if (C.failed) {
        fflush(NULL);
        _exit(1);
    }
}
