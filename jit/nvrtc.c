/*
 * nvrtc.c — NVRTC, loaded at run time: finding libnvrtc, the fixed compile options, one
 * compilation of a translation unit to a cubin, and saving a failing source with its log.
 *
 * Invariants:
 *  - No link-time dependency on CUDA: the library is dlopen'ed and the few types and functions we
 *    use are declared here (their C ABI has been stable since NVRTC 11.1, which added cubin output).
 *  - The library is searched once per process; the outcome (handle or message) is kept, so a
 *    machine without libnvrtc says why the same way every time without searching again.
 *  - nvrtc_try touches no shared runtime state (no st_error, no st_malloc, no counters), so the
 *    check mode may compile two architectures in two threads; NVRTC programs are independent.
 *  - A failing unit is kept under <cache dir>/failed/ with its log, and the error names both.
 *  - One rule names the architecture a GPU's kernels are compiled for (nvrtc_arch), for the
 *    runtime and the check mode alike: sm_XY, sm_90a on Hopper; when NVRTC cannot compile for the
 *    GPU (its list of supported architectures lacks it), PTX for the newest virtual architecture
 *    it supports below the GPU's (compute_XY), which the driver compiles at load.
 *  - NVRTC must not be newer than the driver (nvrtc_driver_check): cubins of a newer CUDA major
 *    version do not load on an older driver; within one major version they do (CUDA's minor
 *    version compatibility), but PTX of a newer version does not.
 */
#include "jit/nvrtc.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the NVRTC API we use (nvrtc.h, declared here so that the build needs no CUDA) ---- */

typedef int nvrtcResult; /* an enum in nvrtc.h: 0 is NVRTC_SUCCESS */
typedef struct nvrtc_program_s *nvrtcProgram;

enum { NVRTC_OK = 0, NVRTC_ERR_OOM = 1, NVRTC_ERR_COMPILATION = 6 };

static struct {
    int state;          /* 0 not searched, 1 loaded, -1 failed (msg says why) */
    void *handle;
    char path[4096];
    char msg[4096];
    int major, minor;
    nvrtcResult (*version)(int *, int *);
    nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
    nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*log_size)(nvrtcProgram, size_t *);
    nvrtcResult (*get_log)(nvrtcProgram, char *);
    nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
    nvrtcResult (*get_cubin)(nvrtcProgram, char *);
    nvrtcResult (*ptx_size)(nvrtcProgram, size_t *);
    nvrtcResult (*get_ptx)(nvrtcProgram, char *);
    nvrtcResult (*destroy)(nvrtcProgram *);
    const char *(*error_string)(nvrtcResult);
    /* optional (NVRTC 11.2+): the real architectures it compiles for, ascending */
    nvrtcResult (*num_archs)(int *);
    nvrtcResult (*get_archs)(int *);
    int narchs;         /* 0: not known */
    int archs[64];
} L;

/* ---- options ---- */

/* The fixed options, after --gpu-architecture=<arch> (a real sm_XX: the output is a cubin, loaded
 * with cuModuleLoadData without a driver JIT step). Part of every cubin key.
 *   --fmad=false        no a*b+c -> fma contraction: kernels round like the CPU reference (the C
 *                       side's -ffp-contract=off)
 *   --prec-div=true --prec-sqrt=true --ftz=false
 *                       IEEE division and square root, denormals kept: NVRTC's defaults, spelled
 *                       out because they are part of the numerics we promise
 *   -std=c++17          the dialect the CUDA renderer writes (NVRTC 11.2 to 13 accept it; it is
 *                       13's default)
 *   -default-device     functions and variables without an execution space are device code: the
 *                       prelude is shared with the C side and need not annotate each helper */
static const char *const nvrtc_opts[] = {
    "--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false", "-std=c++17", "-default-device",
};
#define NVRTC_NOPTS ((int)(sizeof nvrtc_opts / sizeof nvrtc_opts[0]))
#define NVRTC_LOG_HEAD 3072 /* the first errors are the informative ones */
#define NVRTC_LOG_TAIL 1024

const char *nvrtc_options(void) {
    static char joined[256];
    if (!joined[0]) {
        size_t n = 0;
        for (int i = 0; i < NVRTC_NOPTS; i++)
            n += (size_t)snprintf(joined + n, sizeof joined - n, "%s%s", i ? " " : "", nvrtc_opts[i]);
    }
    return joined;
}

int nvrtc_is_ptx(const char *arch) { return arch && !strncmp(arch, "compute_", 8); }

/* sm_<digits> (a cubin) or compute_<digits> (PTX), with an optional 'a' (arch-specific, e.g.
 * sm_90a) or 'f' (family) suffix. */
static int arch_ok(const char *arch) {
    const char *p;
    if (arch && !strncmp(arch, "sm_", 3)) p = arch + 3;
    else if (nvrtc_is_ptx(arch)) p = arch + 8;
    else return 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') p++, digits++;
    if (*p == 'a' || *p == 'f') p++;
    return digits >= 2 && digits <= 4 && *p == '\0';
}

/* ---- loading ---- */

/* A list of what was tried, for the error message. */
typedef struct tried { char s[3072]; size_t n; } tried;

static void tried_add(tried *t, const char *path, const char *why) {
    if (t->n < sizeof t->s)
        t->n += (size_t)snprintf(t->s + t->n, sizeof t->s - t->n, "\n  %s: %s", path, why ? why : "failed");
}

/* dlopen(path); on failure records dlerror() in t. A file path (with a '/') must lead to a regular
 * file: dlopen of a FIFO (ST_NVRTC_PATH pointing at one) would block forever in open(). */
static void *try_open(const char *path, tried *t, char *found, size_t cap) {
    struct stat st;
    if (strchr(path, '/') && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        char why[64];
        snprintf(why, sizeof why, "is %s, not a regular file", base_file_kind((unsigned)st.st_mode));
        tried_add(t, path, why);
        return NULL;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        /* dlerror usually starts with the path again; keep the part after it. */
        size_t pl = strlen(path);
        if (e && !strncmp(e, path, pl) && e[pl] == ':') e += pl + 1 + (e[pl + 1] == ' ');
        tried_add(t, path, e);
        return NULL;
    }
    snprintf(found, cap, "%s", path);
    return h;
}

static int newer_first(const void *a, const void *b) {
    return strverscmp(*(char *const *)b, *(char *const *)a);
}

/* Opens dir/libnvrtc.so, else the highest-versioned dir/libnvrtc.so.* (not libnvrtc-builtins,
 * not libnvrtc.alt). */
static void *try_dir(const char *dir, tried *t, char *found, size_t cap) {
    char path[4096];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        tried_add(t, dir, "no such directory");
        return NULL;
    }
    snprintf(path, sizeof path, "%s/libnvrtc.so", dir);
    if (access(path, F_OK) == 0) {
        void *h = try_open(path, t, found, cap);
        if (h) return h;
    }
    DIR *d = opendir(dir);
    if (!d) {
        tried_add(t, dir, strerror(errno));
        return NULL;
    }
    char names[16][256];
    char *sorted[16];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 16;)
        if (!strncmp(e->d_name, "libnvrtc.so.", 12) && strlen(e->d_name) < sizeof names[0]) {
            snprintf(names[n], sizeof names[n], "%s", e->d_name);
            sorted[n] = names[n];
            n++;
        }
    closedir(d);
    if (n == 0) {
        tried_add(t, dir, "no libnvrtc.so* there");
        return NULL;
    }
    qsort(sorted, (size_t)n, sizeof sorted[0], newer_first);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, sorted[i]);
        void *h = try_open(path, t, found, cap);
        if (h) return h;
    }
    return NULL;
}

st_status nvrtc_search(const char *nvrtc_path, void **handle, char *found, size_t cap) {
    tried t = {.n = 0};
    t.s[0] = '\0';
    *handle = NULL;
    if (nvrtc_path && *nvrtc_path) {
        /* An explicit choice is honoured or reported, never silently replaced by another library. */
        struct stat st;
        if (stat(nvrtc_path, &st) == 0 && S_ISDIR(st.st_mode)) *handle = try_dir(nvrtc_path, &t, found, cap);
        else *handle = try_open(nvrtc_path, &t, found, cap);
        if (*handle) return ST_OK;
        return st_error(ST_ERR_DEVICE, "cannot load libnvrtc from ST_NVRTC_PATH=%s:%s", nvrtc_path, t.s);
    }
    static const char *const sonames[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"};
    for (size_t i = 0; i < sizeof sonames / sizeof sonames[0]; i++)
        if ((*handle = try_open(sonames[i], &t, found, cap))) return ST_OK;
    const st_setting envs[] = {SET_CUDA_PATH, SET_CUDA_HOME};
    char dir[4096];
    for (int i = 0; i < 2; i++) {
        const char *e = base_env(envs[i]);
        if (!e) continue;
        snprintf(dir, sizeof dir, "%s/lib64", e);
        if ((*handle = try_dir(dir, &t, found, cap))) return ST_OK;
    }
    if ((*handle = try_dir("/usr/local/cuda/lib64", &t, found, cap))) return ST_OK;
    return st_error(ST_ERR_DEVICE,
                    "cannot load libnvrtc (the CUDA runtime compiler); set ST_NVRTC_PATH to the library or "
                    "its directory. Tried:%s",
                    t.s);
}

/* Resolves every function; the name of the first missing one, or NULL. */
static const char *resolve(void *h) {
    struct { const char *name; void *slot; size_t size; } fns[] = {
        {"nvrtcVersion", &L.version, sizeof L.version},
        {"nvrtcCreateProgram", &L.create, sizeof L.create},
        {"nvrtcCompileProgram", &L.compile, sizeof L.compile},
        {"nvrtcGetProgramLogSize", &L.log_size, sizeof L.log_size},
        {"nvrtcGetProgramLog", &L.get_log, sizeof L.get_log},
        {"nvrtcGetCUBINSize", &L.cubin_size, sizeof L.cubin_size},
        {"nvrtcGetCUBIN", &L.get_cubin, sizeof L.get_cubin},
        {"nvrtcGetPTXSize", &L.ptx_size, sizeof L.ptx_size},
        {"nvrtcGetPTX", &L.get_ptx, sizeof L.get_ptx},
        {"nvrtcDestroyProgram", &L.destroy, sizeof L.destroy},
        {"nvrtcGetErrorString", &L.error_string, sizeof L.error_string},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        void *p = dlsym(h, fns[i].name);
        if (!p) return fns[i].name;
        /* POSIX: a dlsym result converts to a function pointer; memcpy avoids ISO C's objection. */
        memcpy(fns[i].slot, &p, fns[i].size);
    }
    void *na = dlsym(h, "nvrtcGetNumSupportedArchs"), *ga = dlsym(h, "nvrtcGetSupportedArchs");
    if (na && ga) {
        memcpy(&L.num_archs, &na, sizeof na);
        memcpy(&L.get_archs, &ga, sizeof ga);
    }
    return NULL;
}

/* The architectures NVRTC supports, when it can say (else L.narchs stays 0: not known). */
static void read_archs(void) {
    int n = 0;
    L.narchs = 0;
    if (!L.num_archs || L.num_archs(&n) != NVRTC_OK || n <= 0 || n > (int)(sizeof L.archs / sizeof L.archs[0]))
        return;
    if (L.get_archs(L.archs) == NVRTC_OK) L.narchs = n;
}

/* Records the file a soname resolved to (for messages), from the address of a resolved function. */
static void resolve_path(void) {
    Dl_info info;
    void *sym;
    memcpy(&sym, &L.version, sizeof sym);
    if (!strchr(L.path, '/') && dladdr(sym, &info) && info.dli_fname)
        snprintf(L.path, sizeof L.path, "%s", info.dli_fname);
}

st_status nvrtc_load(void) {
    if (L.state == 1) return ST_OK;
    if (L.state == -1) return st_error(ST_ERR_DEVICE, "%s", L.msg);
    void *h = NULL;
    const char *path = base_env(SET_NVRTC_PATH), *sim = path ? NULL : base_cuda_sim_dir();
    st_status s = nvrtc_search(path ? path : sim, &h, L.path, sizeof L.path);   /* sim: the tests' stand-in */
    if (s != ST_OK && sim)
        s = st_error(ST_ERR_DEVICE, "cannot load the simulated GPU's libnvrtc from %s (ST_CUDA_SIM; build it with "
                     "make sim)", sim);
    if (s == ST_OK) {
        const char *missing = resolve(h);
        if (missing) {
            s = st_error(ST_ERR_DEVICE, "%s is not a usable libnvrtc: it has no %s (NVRTC 11.1 or newer is needed)",
                         L.path, missing);
        } else {
            resolve_path();
            if (L.version(&L.major, &L.minor) != NVRTC_OK) s = st_error(ST_ERR_DEVICE, "%s: nvrtcVersion failed", L.path);
            else read_archs();
        }
        if (s != ST_OK) dlclose(h);
    }
    if (s != ST_OK) {
        snprintf(L.msg, sizeof L.msg, "%s", st_last_error());
        L.state = -1;
        return s;
    }
    L.handle = h;
    L.state = 1;
    if (st_rt.debug & 1) fprintf(stderr, "stitch: NVRTC %d.%d from %s\n", L.major, L.minor, L.path);
    return ST_OK;
}

int nvrtc_version(int *major, int *minor) {
    if (nvrtc_load() != ST_OK) return -1;
    *major = L.major;
    *minor = L.minor;
    return 0;
}

const char *nvrtc_library_path(void) { return L.state == 1 ? L.path : NULL; }

int nvrtc_supported_archs(const int **archs) {
    *archs = L.archs;
    return L.state == 1 ? L.narchs : 0;
}

/* ---- which architecture, and whether the driver agrees ---- */

/* The name of a real architecture: sm_XY; sm_90a on Hopper (the wgmma-ready target) when NVRTC
 * has arch-specific targets (12.0 and later). */
static void real_arch(int cc, char *out, size_t cap) {
    snprintf(out, cap, "sm_%d%s", cc, cc == 90 && L.major >= 12 ? "a" : "");
}

st_status nvrtc_arch(int cc, char *out, size_t cap) {
    st_status s = nvrtc_load();
    if (s != ST_OK) return s;
    if (L.narchs == 0) { /* NVRTC cannot say: compile for the GPU itself */
        real_arch(cc, out, cap);
        return ST_OK;
    }
    int best = 0;
    for (int i = 0; i < L.narchs; i++) {
        if (L.archs[i] == cc) {
            real_arch(cc, out, cap);
            return ST_OK;
        }
        if (L.archs[i] < cc && L.archs[i] > best) best = L.archs[i];
    }
    if (best == 0)
        return st_error(ST_ERR_DEVICE, "NVRTC %d.%d (%s) compiles for sm_%d to sm_%d; this GPU (sm_%d) is older than "
                        "all of them: use an older CUDA toolkit's NVRTC (ST_NVRTC_PATH)", L.major, L.minor, L.path,
                        L.archs[0], L.archs[L.narchs - 1], cc);
    /* PTX for the newest virtual architecture below the GPU's: the driver compiles it for the GPU */
    snprintf(out, cap, "compute_%d", best);
    return ST_OK;
}

st_status nvrtc_driver_check(int driver_version, const char *arch) {
    st_status s = nvrtc_load();
    if (s != ST_OK) return s;
    int dmaj = driver_version / 1000, dmin = driver_version % 1000 / 10;
    int ptx = nvrtc_is_ptx(arch);
    if (L.major > dmaj)
        return st_error(ST_ERR_DEVICE, "NVRTC %d.%d (%s) is newer than the CUDA driver (CUDA %d.%d): the driver cannot "
                        "load what it compiles. Install a driver for CUDA %d.%d or newer, or set ST_NVRTC_PATH to an "
                        "NVRTC of CUDA %d.x", L.major, L.minor, L.path, dmaj, dmin, L.major, L.minor, dmaj);
    if (ptx && (L.major == dmaj && L.minor > dmin))
        return st_error(ST_ERR_DEVICE, "NVRTC %d.%d (%s) is newer than the CUDA driver (CUDA %d.%d), and this GPU needs "
                        "PTX (%s: NVRTC has no cubin target for it), which a driver older than its NVRTC cannot "
                        "compile. Install a driver for CUDA %d.%d or newer, or set ST_NVRTC_PATH to an NVRTC of "
                        "CUDA %d.%d or older", L.major, L.minor, L.path, dmaj, dmin, arch, L.major, L.minor, dmaj,
                        dmin);
    return ST_OK;
}

st_status jit_cuda_target(const dev_info *di, char *arch, size_t cap) {
    st_status s = nvrtc_arch(di->arch, arch, cap);
    if (s == ST_OK) s = nvrtc_driver_check(di->version, arch);
    return s;
}

const char *nvrtc_result_name(int rc) {
    if (rc == -1) return "libnvrtc not loaded or bad architecture";
    return L.state == 1 ? L.error_string(rc) : "NVRTC_ERROR";
}

/* ---- translation units ---- */

char *nvrtc_unit(int n, const char *const *srcs, const char *const *knames, const char *const *hints, int raw) {
    sbuf b = {.raw = raw};
    char line[320];
    snprintf(line, sizeof line, "/* stitch CUDA unit: %d kernel%s */\n", n, n == 1 ? "" : "s");
    sbuf_puts(&b, line);
    sbuf_puts(&b, st_prelude_src);
    for (int i = 0; i < n; i++) {
        char hint[64] = "";
        if (hints && hints[i]) jit_comment_ident(hints[i], hint, sizeof hint);
        snprintf(line, sizeof line, "\n/* ---- kernel %d/%d%s%s ---- */\n#define KNAME %s\n", i + 1, n,
                 hint[0] ? ": " : "", hint, knames[i]);
        sbuf_puts(&b, line);
        size_t sl = strlen(srcs[i]);
        sbuf_put(&b, srcs[i], sl);
        sbuf_puts(&b, sl && srcs[i][sl - 1] == '\n' ? "#undef KNAME\n" : "\n#undef KNAME\n");
    }
    return sbuf_take(&b);
}

/* ---- compiling ---- */

/* The body of nvrtc_try with the allocator of the outputs as a parameter. */
static int run_nvrtc(const char *unit, const char *arch, const char *name, void **cubin, size_t *n, char **log,
                     double *ms, void *(*alloc)(size_t)) {
    if (cubin) *cubin = NULL;
    if (n) *n = 0;
    if (log) *log = NULL;
    *ms = 0;
    if (L.state != 1 || !arch_ok(arch)) return -1;
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    const char *opts[NVRTC_NOPTS + 1];
    opts[0] = archopt;
    for (int i = 0; i < NVRTC_NOPTS; i++) opts[i + 1] = nvrtc_opts[i];

    double t0 = st_now_ms();
    nvrtcProgram prog = NULL;
    nvrtcResult rc = L.create(&prog, unit, name, 0, NULL, NULL);
    if (rc != NVRTC_OK) return rc;
    rc = L.compile(prog, NVRTC_NOPTS + 1, opts);
    size_t ls = 0;
    if (log && L.log_size(prog, &ls) == NVRTC_OK && (*log = alloc(ls + 1))) {
        (*log)[0] = '\0';
        if (ls > 0 && L.get_log(prog, *log) != NVRTC_OK) (*log)[0] = '\0';
        (*log)[ls] = '\0';
    }
    if (rc == NVRTC_OK && cubin) { /* a cubin for sm_XY; PTX text (with its NUL) for compute_XY */
        int ptx = nvrtc_is_ptx(arch);
        size_t cs = 0;
        rc = ptx ? L.ptx_size(prog, &cs) : L.cubin_size(prog, &cs);
        if (rc == NVRTC_OK && !(*cubin = alloc(cs ? cs : 1))) rc = NVRTC_ERR_OOM;
        if (rc == NVRTC_OK && (rc = ptx ? L.get_ptx(prog, *cubin) : L.get_cubin(prog, *cubin)) == NVRTC_OK) {
            *n = cs;
        } else {
            free(*cubin);
            *cubin = NULL;
        }
    }
    L.destroy(&prog);
    *ms = st_now_ms() - t0;
    return rc;
}

int nvrtc_try(const char *unit, const char *arch, const char *name, void **cubin, size_t *n, char **log, double *ms) {
    return run_nvrtc(unit, arch, name, cubin, n, log, ms, malloc);
}

int nvrtc_save_failed(const char *unit, const char *log, const char *tag, char *path, size_t cap) {
    const char *dir = jit_cache_dir();
    if (!dir) return -1;
    char fdir[4096], logname[4200];
    snprintf(fdir, sizeof fdir, "%s/failed", dir);
    if (base_mkdir_p(fdir) != 0) return -1;
    if ((size_t)snprintf(path, cap, "%s/%s-XXXXXX.cu", fdir, tag) >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    /* mkstemps reserves a unique name; base_write_atomic then replaces the empty file whole. */
    int fd = mkstemps(path, 3);
    if (fd < 0) return -1;
    close(fd);
    const char *base = strrchr(path, '/') + 1;
    size_t bl = strlen(base);
    snprintf(logname, sizeof logname, "%.*s.log", (int)(bl - 3), base);
    if (base_write_atomic(fdir, base, unit, strlen(unit)) != 0 ||
        base_write_atomic(fdir, logname, log ? log : "", log ? strlen(log) : 0) != 0) {
        int e = errno;
        unlink(path);
        errno = e;
        return -1;
    }
    return 0;
}

/* The log for a message: the first NVRTC_LOG_HEAD and last NVRTC_LOG_TAIL bytes when longer. */
static void trimmed(const char *log, char *out, size_t cap) {
    size_t n = strlen(log);
    if (n <= NVRTC_LOG_HEAD + NVRTC_LOG_TAIL) {
        snprintf(out, cap, "%s", log);
        return;
    }
    snprintf(out, cap, "%.*s\n[... %zu bytes of log omitted ...]\n%s", NVRTC_LOG_HEAD, log,
             n - NVRTC_LOG_HEAD - NVRTC_LOG_TAIL, log + n - NVRTC_LOG_TAIL);
}

st_status nvrtc_compile(const char *src, const char *arch, const char *tag, void **cubin, size_t *n, double *ms) {
    *cubin = NULL;
    *n = 0;
    *ms = 0;
    if (!arch_ok(arch))
        return st_error(ST_ERR_ARG, "bad CUDA architecture '%s': expected sm_<digits> or compute_<digits> with an "
                        "optional a or f suffix (sm_80, sm_90a, compute_90)", arch ? arch : "(null)");
    st_status s = nvrtc_load();
    if (s != ST_OK) return s;
    char name[96], *log = NULL;
    snprintf(name, sizeof name, "%s.cu", tag);
    int rc = run_nvrtc(src, arch, name, cubin, n, &log, ms, st_malloc);
    if (rc == NVRTC_OK) {
        st_free(log);
        return ST_OK;
    }
    if (rc == NVRTC_ERR_OOM) {
        st_free(log);
        return st_error(ST_ERR_OOM, "out of memory in NVRTC compiling %s for %s", name, arch);
    }
    char path[4200], saved[4400], text[NVRTC_LOG_HEAD + NVRTC_LOG_TAIL + 128];
    if (nvrtc_save_failed(src, log, tag, path, sizeof path) == 0)
        snprintf(saved, sizeof saved, "source saved in %s, log in %.*s.log", path, (int)strlen(path) - 3, path);
    else
        snprintf(saved, sizeof saved, "the source could not be saved (%s)", strerror(errno));
    trimmed(log ? log : "(no log: out of memory)", text, sizeof text);
    s = st_error(ST_ERR_COMPILE, "NVRTC %d.%d failed to compile %s for %s (%s); %s\n%s", L.major, L.minor, name, arch,
                 L.error_string(rc), saved, text);
    st_free(log);
    return s;
}
