/*
 * cuda.c — the CUDA Driver API, loaded with dlopen; devices, staging copies, modules, launches.
 *
 * We declare the few driver types and entry points we use ourselves (numeric values from the
 * toolkit's cuda.h), so the build needs no CUDA. The probe runs once per process: library, every
 * symbol, cuInit, device count; any failure leaves a plain-words reason and CUDA unusable.
 *
 * A device is activated on first use (cuda_dev.ready): primary context, one non-blocking stream,
 * pinned staging (two halves), one event per half, a caching allocator over cuMemAlloc. All work
 * runs on that one stream, in order: this is what makes the allocator's reuse of freed blocks and
 * the staging buffer's reuse safe. A staging half is written by the host only after the event
 * recorded behind the last copy that used it has completed.
 *
 * The current context is per thread; cur_ctx caches what we last made current on this thread so
 * a launch does not pay for cuCtxSetCurrent (code that changes the context behind our back, in
 * the same thread, is not supported).
 *
 * Errors of asynchronous work (a kernel's fault) surface at a later call, usually one that waits.
 * So that such an error says where it came from, each device keeps the names of the last
 * INFLIGHT kernels launched since its last successful synchronization (dev->ring), and the error
 * lists them; ST_CUDA_SYNC=1 waits after every launch instead, so a fault names its own kernel.
 * Kernels that can report an index error (gather, scatter_add) get a slot of the device's flag
 * array, cleared by an asynchronous memset queued before them; the slots are copied back by the
 * next synchronization point (cuda_synchronize, cuda_copy_dtoh, cuda_synchronize_all: the public
 * st_synchronize, and the stitch executable when a script ends), which reports the first one set
 * with the message its launch gave: a launch itself never waits.
 *
 * Every driver result is checked. Paths that cannot return one (frees, unloads, releases,
 * shutdown) keep the first failure (`later`) and the next entry point that can return an error
 * reports it; ST_DEBUG prints each at once.
 */
#include "device/cuda.h"
#include "device/devalloc.h"
#include "device/device.h"
#include <dlfcn.h>
#include <link.h>

#include "base/uthash_cfg.h"

/* ---- the driver API subset (values from /usr/local/cuda/include/cuda.h) ---- */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_STUB_LIBRARY = 34,
};
enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};
#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_EVENT_DISABLE_TIMING 0x2u
#define CU_MEMHOSTALLOC_PORTABLE 0x1u

/* Every entry point: field, exported symbol (the _v2 ABI where one exists), parameters. */
#define CU_API(X)                                                                                       \
    X(cuInit, "cuInit", (unsigned flags))                                                              \
    X(cuDriverGetVersion, "cuDriverGetVersion", (int *version))                                        \
    X(cuDeviceGetCount, "cuDeviceGetCount", (int *count))                                              \
    X(cuDeviceGet, "cuDeviceGet", (CUdevice *dev, int ordinal))                                        \
    X(cuDeviceGetName, "cuDeviceGetName", (char *name, int len, CUdevice dev))                         \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *value, int attr, CUdevice dev))              \
    X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", (size_t *bytes, CUdevice dev))                          \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *ctx, CUdevice dev))            \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice dev))                       \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext ctx))                                             \
    X(cuCtxSynchronize, "cuCtxSynchronize", (void))                                                    \
    X(cuStreamCreate, "cuStreamCreate", (CUstream *stream, unsigned flags))                            \
    X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream stream))                                        \
    X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream stream))                                   \
    X(cuEventCreate, "cuEventCreate", (CUevent *event, unsigned flags))                                \
    X(cuEventRecord, "cuEventRecord", (CUevent event, CUstream stream))                                \
    X(cuEventSynchronize, "cuEventSynchronize", (CUevent event))                                       \
    X(cuEventDestroy, "cuEventDestroy_v2", (CUevent event))                                            \
    X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *ptr, size_t bytes))                                   \
    X(cuMemFree, "cuMemFree_v2", (CUdeviceptr ptr))                                                    \
    X(cuMemGetInfo, "cuMemGetInfo_v2", (size_t *free_bytes, size_t *total_bytes))                      \
    X(cuMemHostAlloc, "cuMemHostAlloc", (void **ptr, size_t bytes, unsigned flags))                    \
    X(cuMemFreeHost, "cuMemFreeHost", (void *ptr))                                                     \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", (CUdeviceptr dst, const void *src, size_t n, CUstream s)) \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void *dst, CUdeviceptr src, size_t n, CUstream s))   \
    X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)) \
    X(cuMemsetD32Async, "cuMemsetD32Async", (CUdeviceptr dst, unsigned value, size_t n, CUstream s))   \
    X(cuModuleLoadData, "cuModuleLoadData", (CUmodule *mod, const void *image))                        \
    X(cuModuleGetFunction, "cuModuleGetFunction", (CUfunction *fn, CUmodule mod, const char *name))    \
    X(cuModuleUnload, "cuModuleUnload", (CUmodule mod))                                                \
    X(cuLaunchKernel, "cuLaunchKernel",                                                                \
      (CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,     \
       unsigned shmem, CUstream stream, void **params, void **extra))                                   \
    X(cuGetErrorName, "cuGetErrorName", (CUresult err, const char **str))                              \
    X(cuGetErrorString, "cuGetErrorString", (CUresult err, const char **str))

#define CU_FIELD(field, sym, params) CUresult (*field) params;
static struct { CU_API(CU_FIELD) } cu;
#undef CU_FIELD

/* ---- per-device state ---- */
#define CUDA_MAX_DEVICES 16
#define STAGE_BYTES ((size_t)8 << 20)   /* one half of the pinned staging buffer */

/* A function of a loaded module: the handle cuda_module_function hands out (so a launch can name
 * its kernel). Freed when its module is unloaded. */
typedef struct cu_fn {
    char *name;
    CUfunction fn;
    UT_hash_handle hh;
} cu_fn;

typedef struct cu_mod {
    const void *cubin;        /* key: the caller's cubin pointer */
    CUmodule mod;
    cu_fn *fns;
    UT_hash_handle hh;
} cu_mod;

#define INFLIGHT 8          /* kernel names kept for an asynchronous error's message */
#define CHECK_SLOTS 64       /* index-error flags per device between two synchronizations */
#define CHECK_TEXT 160

/* A launched kernel, for messages: its function (valid until its module is unloaded, which
 * empties the ring) and the caller's readable name. */
typedef struct inflight {
    const cu_fn *fn;
    char label[48];
} inflight;

typedef struct cuda_dev {
    int ready;
    CUdevice dev;
    CUcontext ctx;            /* retained primary context, NULL when not retained */
    CUstream stream;
    unsigned char *staging;   /* 2 * STAGE_BYTES, pinned */
    CUevent staged[2];        /* recorded behind the last copy that used each half */
    int next_half;
    devalloc *alloc;
    cu_mod *mods;
    char label[16];           /* "cuda:0" */
    cuda_device_info info;
    dev_info dinfo;           /* the same, as the device interface says it */
    inflight ring[INFLIGHT];  /* the last kernels launched since the last successful sync */
    unsigned nlaunched;       /* launches since then (ring[(nlaunched - 1) % INFLIGHT]: the last) */
    st_devptr flags;          /* CHECK_SLOTS ints for kernels that report index errors (0: not yet) */
    int *flags_host;          /* pinned: where a synchronization reads them back */
    char (*what)[CHECK_TEXT]; /* per slot: the error its kernel reports when it sets its flag */
    int nchecks;              /* slots in use since the last synchronization */
} cuda_dev;

static struct {
    int state;                /* 0: not probed, 1: usable, -1: unavailable */
    void *lib;
    char path[512];           /* the library actually loaded */
    int ndev, version;
    int sync_launches;        /* ST_CUDA_SYNC: wait after every launch */
    char reason[1024];
    cuda_dev devs[CUDA_MAX_DEVICES];
} drv;

static _Thread_local CUcontext cur_ctx;

/* ---- error words ---- */

/* Names and texts for when the driver cannot give them (the stub's cuGetErrorName fails too). */
static const struct { CUresult code; const char *name, *text; } known_errors[] = {
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* "CUDA_ERROR_X (text)" for r, into buf. */
static const char *error_words(CUresult r, char *buf, size_t cap) {
    const char *name = NULL, *text = NULL;
    if (cu.cuGetErrorName && cu.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (cu.cuGetErrorString && cu.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
    for (size_t i = 0; i < sizeof known_errors / sizeof known_errors[0] && !(name && text); i++)
        if (known_errors[i].code == r) {
            if (!name) name = known_errors[i].name;
            if (!text) text = known_errors[i].text;
        }
    if (name && text) snprintf(buf, cap, "%s (%s)", name, text);
    else snprintf(buf, cap, "CUDA error %d", r);
    return buf;
}

static st_status cu_fail(const char *call, CUresult r) {
    char w[256];
    return st_error(ST_ERR_DEVICE, "CUDA error in %s: %s", call, error_words(r, w, sizeof w));
}

/* Evaluates a driver call; on failure returns the ST_ERR_DEVICE naming it. */
#define CU_TRY(call, expr)                                                                      \
    do {                                                                                        \
        CUresult r_ = (expr);                                                                   \
        if (r_ != CUDA_SUCCESS) return cu_fail(call, r_);                                       \
    } while (0)

/* ---- kernels in flight, and errors that cannot be returned ---- */

/* "k3_softmax (st_k_...)", or the function's name alone. */
static const char *kernel_words(const cu_fn *f, const char *label, char *buf, size_t cap) {
    if (label && *label) snprintf(buf, cap, "%s (%s)", label, f->name);
    else snprintf(buf, cap, "%s", f->name);
    return buf;
}

static void record_launch(cuda_dev *d, const cu_fn *f, const char *label) {
    inflight *e = &d->ring[d->nlaunched++ % INFLIGHT];
    e->fn = f;
    snprintf(e->label, sizeof e->label, "%s", label ? label : "");
}

/* Every launch so far has completed without error. */
static void settled(cuda_dev *d) { d->nlaunched = 0; }

/* What was running when an asynchronous error surfaced, for its message. */
static const char *inflight_words(const cuda_dev *d, char *buf, size_t cap) {
    unsigned n = d->nlaunched, kept = n < INFLIGHT ? n : INFLIGHT;
    if (n == 0) {
        snprintf(buf, cap, "no kernel was launched on %s since its last successful synchronization", d->label);
        return buf;
    }
    size_t used = (size_t)snprintf(buf, cap, "kernels in flight on %s since its last successful synchronization, "
                                   "oldest first: ", d->label);
    if (n > kept && used < cap) used += (size_t)snprintf(buf + used, cap - used, "(%u earlier) ", n - kept);
    for (unsigned i = n - kept; i < n && used < cap; i++) {
        const inflight *e = &d->ring[i % INFLIGHT];
        char k[160];
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i > n - kept ? ", " : "",
                                 kernel_words(e->fn, e->label, k, sizeof k));
    }
    return buf;
}

/* A call that waited for the device failed: the error names the kernels that may have caused it. */
static st_status wait_fail(const cuda_dev *d, const char *call, CUresult r) {
    char w[256], k[1400];
    return st_error(ST_ERR_DEVICE, "CUDA error in %s: %s; %s", call, error_words(r, w, sizeof w),
                    inflight_words(d, k, sizeof k));
}

/* Like CU_TRY for a call that waits for the device's stream (or its events). */
#define CU_WAIT(d, call, expr)                                                                  \
    do {                                                                                        \
        CUresult r_ = (expr);                                                                   \
        if (r_ != CUDA_SUCCESS) return wait_fail(d, call, r_);                                  \
    } while (0)

/* The first error of a path that cannot return one (a free, an unload, a release, shutdown). */
static struct {
    int pending;
    st_status code;
    char msg[1800];
} later;

/* Keeps msg for the next entry point that can report it (the first one only: later ones are
 * usually its consequences); ST_DEBUG prints every one at once. */
static void defer(st_status code, const char *msg) {
    if (st_rt.debug) fprintf(stderr, "stitch: %s (reported by the next CUDA call)\n", msg);
    if (later.pending) return;
    later.pending = 1;
    later.code = code;
    snprintf(later.msg, sizeof later.msg, "%s", msg);
}

/* A failed driver call of such a path; d (may be NULL): the device, whose kernels in flight are
 * named when the call waited for them. */
static void defer_cu(const cuda_dev *d, const char *call, const char *doing, CUresult r, int waited) {
    char w[256], k[1400] = "", msg[1800];
    if (d && waited) inflight_words(d, k, sizeof k);
    snprintf(msg, sizeof msg, "CUDA error in %s (%s%s%s): %s%s%s", call, doing, d ? " on " : "", d ? d->label : "",
             error_words(r, w, sizeof w), k[0] ? "; " : "", k);
    defer(ST_ERR_DEVICE, msg);
}

/* Reports the kept error, once: an error status (and message), else ST_OK. */
static st_status report_later(void) {
    if (!later.pending) return ST_OK;
    later.pending = 0;
    return st_error(later.code, "an earlier CUDA call failed where it could not report it: %s", later.msg);
}

/* ---- loading and probing ---- */

/* dlopens the driver; NULL with drv.reason set. */
static void *open_driver(void) {
    const char *env = base_env(SET_CUDA_LIB), *sim = base_cuda_sim_dir();
    if (env || sim) {
        char simlib[4200];
        if (!env) snprintf(simlib, sizeof simlib, "%s/libcuda.so.1", sim);
        void *h = dlopen(env ? env : simlib, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            snprintf(drv.reason, sizeof drv.reason, "no CUDA driver found (%s; the path came from %s)", dlerror(),
                     env ? "ST_CUDA_LIB" : "ST_CUDA_SIM: build the simulator with make sim");
        return h;
    }
    char compat[512] = "";
    const char *cuda_path = base_env(SET_CUDA_PATH);
    if (cuda_path) snprintf(compat, sizeof compat, "%s/compat/libcuda.so.1", cuda_path);
    const char *const paths[] = {"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1",
                                 "/usr/lib/wsl/lib/libcuda.so.1", compat, "/usr/local/cuda/compat/libcuda.so.1"};
    char first[512] = "", tried[1024] = "";
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        if (!*paths[i]) continue;
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
        if (i == 0) snprintf(first, sizeof first, "%s", dlerror());
        else {
            size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", paths[i]);
        }
    }
    snprintf(drv.reason, sizeof drv.reason, "no CUDA driver found (%s; also tried %s)", first, tried);
    return NULL;
}

/* Resolves every entry point of CU_API; 0 with drv.reason naming the first missing one. */
static int resolve_api(void) {
#define CU_RESOLVE(field, sym, params)                                                          \
    {                                                                                           \
        void *p = dlsym(drv.lib, sym);                                                          \
        if (!p) {                                                                               \
            snprintf(drv.reason, sizeof drv.reason,                                             \
                     "the CUDA driver library %s lacks %s (%s)", drv.path, sym,                 \
                     strcmp(sym, "cuInit") ? "a driver older than CUDA 11?" : "not a CUDA driver");  \
            return 0;                                                                           \
        }                                                                                       \
        memcpy(&cu.field, &p, sizeof p);                                                        \
    }
    CU_API(CU_RESOLVE)
#undef CU_RESOLVE
    return 1;
}

/* cuInit + version + device count; 0 with drv.reason set. */
static int init_driver(void) {
    char w[256];
    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        if (r == CUDA_ERROR_STUB_LIBRARY || strstr(drv.path, "/stubs/"))
            snprintf(drv.reason, sizeof drv.reason, "the CUDA driver library is a stub (%s): no GPU driver installed (cuInit: %s)",
                     drv.path, error_words(r, w, sizeof w));
        else
            snprintf(drv.reason, sizeof drv.reason, "cuInit failed: %s (driver library %s)", error_words(r, w, sizeof w),
                     drv.path);
        return 0;
    }
    int n = 0;
    if ((r = cu.cuDriverGetVersion(&drv.version)) != CUDA_SUCCESS || (r = cu.cuDeviceGetCount(&n)) != CUDA_SUCCESS) {
        snprintf(drv.reason, sizeof drv.reason, "the CUDA driver does not answer: %s (driver library %s)",
                 error_words(r, w, sizeof w), drv.path);
        return 0;
    }
    if (n <= 0) {
        snprintf(drv.reason, sizeof drv.reason, "the CUDA driver (%s, CUDA %d.%d) found no GPU", drv.path,
                 drv.version / 1000, drv.version % 1000 / 10);
        return 0;
    }
    drv.ndev = n < CUDA_MAX_DEVICES ? n : CUDA_MAX_DEVICES;
    return 1;
}

static int probe_driver(void) {
    drv.lib = open_driver();
    if (!drv.lib) return 0;
    struct link_map *lm = NULL;
    const char *env = base_env(SET_CUDA_LIB);
    if (dlinfo(drv.lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
        snprintf(drv.path, sizeof drv.path, "%s", lm->l_name);
    else
        snprintf(drv.path, sizeof drv.path, "%s", env ? env : "libcuda.so.1");
    if (!resolve_api()) {
        memset(&cu, 0, sizeof cu);
        dlclose(drv.lib);   /* nothing of it ran yet */
        drv.lib = NULL;
        return 0;
    }
    /* After cuInit ran, the library stays loaded even on failure: unloading a driver that may
     * have started threads is not safe. */
    return init_driver();
}

int cuda_probe(void) {
    if (drv.state == 0) {
        drv.sync_launches = base_env_int(SET_CUDA_SYNC, 0, INT32_MIN, INT32_MAX, NULL) != 0;
        drv.state = probe_driver() ? 1 : -1;
    }
    return drv.state > 0 ? drv.ndev : 0;
}

const char *cuda_unavailable_reason(void) {
    cuda_probe();
    return drv.reason;
}

int cuda_driver_version(void) { return cuda_probe() ? drv.version : 0; }

/* ---- devices ---- */

static CUresult make_current(cuda_dev *d) {
    if (cur_ctx == d->ctx) return CUDA_SUCCESS;
    CUresult r = cu.cuCtxSetCurrent(d->ctx);
    if (r == CUDA_SUCCESS) cur_ctx = d->ctx;
    return r;
}

static st_status backend_alloc(void *ud, size_t n, uint64_t *ptr) {
    cuda_dev *d = ud;
    /* The OOM handler (a GC) may have freed blocks of another device in between. */
    CU_TRY("cuCtxSetCurrent", make_current(d));
    CUdeviceptr p = 0;
    CUresult r = cu.cuMemAlloc(&p, n);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return ST_ERR_OOM;
    if (r != CUDA_SUCCESS) return cu_fail("cuMemAlloc", r);
    *ptr = p;
    return ST_OK;
}

/* Frees wait for the stream first: queued work may still use the block. A failure cannot be
 * returned from a free: it is kept for the next call that can report it (defer_cu). */
static void backend_free(void *ud, uint64_t ptr) {
    cuda_dev *d = ud;
    CUresult r = make_current(d);
    if (r != CUDA_SUCCESS) {
        defer_cu(d, "cuCtxSetCurrent", "freeing a block", r, 0);
        return;
    }
    if ((r = cu.cuStreamSynchronize(d->stream)) != CUDA_SUCCESS) defer_cu(d, "cuStreamSynchronize", "freeing a block", r, 1);
    else settled(d);
    if ((r = cu.cuMemFree((CUdeviceptr)ptr)) != CUDA_SUCCESS) defer_cu(d, "cuMemFree", "freeing a block", r, 0);
}

/* Bumped whenever modules are unloaded: a CUfunction resolved under an older value may be gone. */
static unsigned module_gen = 1;

unsigned cuda_module_generation(void) { return module_gen; }

/* Unloads every module of d (its context current, its stream idle); the ring of kernels in flight
 * names their functions, so it is emptied too. */
static void unload_modules(cuda_dev *d) {
    if (d->mods && !++module_gen) module_gen = 1;
    cu_mod *m, *mt;
    HASH_ITER(hh, d->mods, m, mt) {
        cu_fn *f, *ft;
        HASH_ITER(hh, m->fns, f, ft) {
            HASH_DEL(m->fns, f);
            st_free(f->name);
            st_free(f);
        }
        CUresult r = cu.cuModuleUnload(m->mod);
        if (r != CUDA_SUCCESS) defer_cu(d, "cuModuleUnload", "unloading a module", r, 0);
        HASH_DEL(d->mods, m);
        st_free(m);
    }
    d->nlaunched = 0;
}

/* Releases whatever activation acquired (also a partial activation); the context last. */
static void release_dev(cuda_dev *d) {
    CUresult r;
    if (d->ctx && (r = make_current(d)) != CUDA_SUCCESS) defer_cu(d, "cuCtxSetCurrent", "releasing the device", r, 0);
    else if (d->ctx) {
        if (d->stream && (r = cu.cuStreamSynchronize(d->stream)) != CUDA_SUCCESS)
            defer_cu(d, "cuStreamSynchronize", "releasing the device", r, 1);
        unload_modules(d);
        devalloc_destroy(d->alloc);   /* before the stream: backend_free waits for it */
        d->alloc = NULL;
        for (int h = 0; h < 2; h++)
            if (d->staged[h] && (r = cu.cuEventDestroy(d->staged[h])) != CUDA_SUCCESS)
                defer_cu(d, "cuEventDestroy", "releasing the device", r, 0);
        if (d->staging && (r = cu.cuMemFreeHost(d->staging)) != CUDA_SUCCESS)
            defer_cu(d, "cuMemFreeHost", "releasing the device", r, 0);
        if (d->flags_host && (r = cu.cuMemFreeHost(d->flags_host)) != CUDA_SUCCESS)
            defer_cu(d, "cuMemFreeHost", "releasing the device", r, 0);
        if (d->stream && (r = cu.cuStreamDestroy(d->stream)) != CUDA_SUCCESS)
            defer_cu(d, "cuStreamDestroy", "releasing the device", r, 0);
    }
    devalloc_destroy(d->alloc);   /* the allocator's own memory, when the context could not be made current */
    if (d->ctx) {
        if ((r = cu.cuDevicePrimaryCtxRelease(d->dev)) != CUDA_SUCCESS)
            defer_cu(d, "cuDevicePrimaryCtxRelease", "releasing the device", r, 0);
        if (cur_ctx == d->ctx) cur_ctx = NULL;
    }
    st_free(d->what);
    int ordinal = d->info.ordinal;
    memset(d, 0, sizeof *d);
    d->info.ordinal = ordinal;
}

static st_status query_info(cuda_dev *d) {
    cuda_device_info *in = &d->info;
    CU_TRY("cuDeviceGetName", cu.cuDeviceGetName(in->name, (int)sizeof in->name, d->dev));
    CU_TRY("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(&in->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev));
    CU_TRY("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(&in->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev));
    CU_TRY("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(&in->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev));
    CU_TRY("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(&in->max_threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d->dev));
    CU_TRY("cuDeviceTotalMem", cu.cuDeviceTotalMem(&in->total_mem, d->dev));
    return ST_OK;
}

static st_status acquire_dev(cuda_dev *d, int ordinal) {
    d->info.ordinal = ordinal;
    snprintf(d->label, sizeof d->label, "cuda:%d", ordinal);
    CU_TRY("cuDeviceGet", cu.cuDeviceGet(&d->dev, ordinal));
    st_status s = query_info(d);
    if (s != ST_OK) return s;
    CU_TRY("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev));
    CU_TRY("cuCtxSetCurrent", make_current(d));
    CU_TRY("cuStreamCreate", cu.cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING));
    void *staging = NULL;
    CU_TRY("cuMemHostAlloc", cu.cuMemHostAlloc(&staging, 2 * STAGE_BYTES, CU_MEMHOSTALLOC_PORTABLE));
    d->staging = staging;
    for (int h = 0; h < 2; h++) CU_TRY("cuEventCreate", cu.cuEventCreate(&d->staged[h], CU_EVENT_DISABLE_TIMING));
    devalloc_backend be = {.ud = d, .alloc = backend_alloc, .free = backend_free, .total = d->info.total_mem,
                           .name = "CUDA", .label = d->label, .exact = base_cuda_sim_dir() != NULL};
    d->alloc = devalloc_new(&be);
    if (!d->alloc) return ST_ERR_OOM;
    d->dinfo = (dev_info){d->info.name, d->info.cc_major * 10 + d->info.cc_minor, d->info.sm_count,
                          d->info.max_threads, d->info.total_mem, drv.version};
    d->ready = 1;
    base_on_shutdown(BASE_LEVEL_DEVICE, cuda_shutdown);
    return ST_OK;
}

/* The active device `ordinal`, current on this thread; NULL with the error set. A query (info):
 * an earlier failure that is still to be reported stays for the next operation. */
static cuda_dev *query_dev(int ordinal) {
    int n = cuda_probe();
    if (n == 0) {
        st_error(ST_ERR_DEVICE, "CUDA is not available: %s", drv.reason);
        return NULL;
    }
    if (ordinal < 0 || ordinal >= n) {
        st_error(ST_ERR_DEVICE, "no CUDA device cuda:%d (this machine has %d: cuda:0 to cuda:%d)", ordinal, n, n - 1);
        return NULL;
    }
    cuda_dev *d = &drv.devs[ordinal];
    if (!d->ready) {
        if (acquire_dev(d, ordinal) != ST_OK) {
            snprintf(drv.reason, sizeof drv.reason, "cuda:%d could not be activated: %s", ordinal, st_last_error());
            release_dev(d);
            return NULL;
        }
        drv.reason[0] = 0;   /* an earlier activation failure is no longer the story */
        return d;
    }
    CUresult r = make_current(d);
    if (r != CUDA_SUCCESS) {
        cu_fail("cuCtxSetCurrent", r);
        return NULL;
    }
    return d;
}

/* query_dev for an operation: it fails with an earlier failure that could not be returned then
 * (report_later), once. */
static cuda_dev *get_dev(int ordinal) {
    cuda_dev *d = query_dev(ordinal);
    return d && report_later() == ST_OK ? d : NULL;
}

const cuda_device_info *cuda_device(int ordinal) {
    cuda_dev *d = query_dev(ordinal);
    return d ? &d->info : NULL;
}

/* ---- memory ---- */

st_status cuda_mem_alloc(int dev, size_t n, st_devptr *out) {
    *out = 0;
    cuda_dev *d = get_dev(dev);
    if (!d) return st_last_status();
    return devalloc_alloc(d->alloc, n, out);
}

/* A no-op when the device is not active: nothing of it can be in use then. */
void cuda_mem_free(int dev, st_devptr p) {
    if (!p || drv.state <= 0 || dev < 0 || dev >= drv.ndev || !drv.devs[dev].ready) return;
    devalloc_free(drv.devs[dev].alloc, p);
}

st_status cuda_mem_get_info(int dev, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    if (!get_dev(dev)) return st_last_status();
    CU_TRY("cuMemGetInfo", cu.cuMemGetInfo(free_bytes, total_bytes));
    return ST_OK;
}

void cuda_mem_stats(uint64_t *in_use, uint64_t *reserved, uint64_t *peak) {
    *in_use = *reserved = *peak = 0;
    for (int i = 0; i < drv.ndev; i++) {
        if (!drv.devs[i].ready) continue;
        devalloc_stats s;
        devalloc_get_stats(drv.devs[i].alloc, &s);
        *in_use += s.in_use;
        *reserved += s.reserved;
        *peak += s.peak;
    }
}

void cuda_mem_reset_peak(void) {
    for (int i = 0; i < drv.ndev; i++)
        if (drv.devs[i].ready) devalloc_reset_peak(drv.devs[i].alloc);
}

void cuda_empty_cache(void) {
    for (int i = 0; i < drv.ndev; i++)
        if (drv.devs[i].ready) devalloc_empty_cache(drv.devs[i].alloc);
}

/* ---- transfers ---- */

/* The next staging half, free for the host to write: the copy that last used it has completed. */
static st_status take_half(cuda_dev *d, unsigned char **half, int *h) {
    *h = d->next_half;
    d->next_half ^= 1;
    CU_WAIT(d, "cuEventSynchronize", cu.cuEventSynchronize(d->staged[*h]));
    *half = d->staging + (size_t)*h * STAGE_BYTES;
    return ST_OK;
}

st_status cuda_copy_htod(int dev, st_devptr dst, const void *src, size_t n) {
    if (n == 0) return ST_OK;
    cuda_dev *d = get_dev(dev);
    if (!d) return st_last_status();
    for (size_t off = 0; off < n;) {
        size_t len = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
        unsigned char *half;
        int h;
        st_status s = take_half(d, &half, &h);
        if (s != ST_OK) return s;
        memcpy(half, (const unsigned char *)src + off, len);
        CU_TRY("cuMemcpyHtoDAsync", cu.cuMemcpyHtoDAsync(dst + off, half, len, d->stream));
        CU_TRY("cuEventRecord", cu.cuEventRecord(d->staged[h], d->stream));
        off += len;
    }
    return ST_OK;
}

/* Queues the copy of the index-error flags set since the last synchronization into flags_host
 * (read by take_checks once the stream has passed it). */
static st_status queue_checks(cuda_dev *d) {
    if (d->nchecks == 0) return ST_OK;
    CU_TRY("cuMemcpyDtoHAsync", cu.cuMemcpyDtoHAsync(d->flags_host, d->flags, (size_t)d->nchecks * sizeof(int), d->stream));
    return ST_OK;
}

/* After a successful wait that covered queue_checks: the first flag set (in launch order) is
 * reported with the message its launch gave; every slot is free again. */
static st_status take_checks(cuda_dev *d) {
    int n = d->nchecks;
    d->nchecks = 0;
    for (int i = 0; i < n; i++)
        if (d->flags_host[i]) return st_error(ST_ERR_ARG, "%s", d->what[i]);
    return ST_OK;
}

/* Pipelined: chunk i is copied into one half while the host copies chunk i-1 out of the other.
 * A synchronization point: the index-error flags are read on the way. */
st_status cuda_copy_dtoh(int dev, void *dst, st_devptr src, size_t n) {
    if (n == 0) return ST_OK;
    cuda_dev *d = get_dev(dev);
    if (!d) return st_last_status();
    st_status s = queue_checks(d);
    if (s != ST_OK) return s;
    unsigned char *out = dst, *prev = NULL;
    int prev_h = 0;
    size_t prev_off = 0, prev_len = 0;
    for (size_t off = 0; off < n;) {
        size_t len = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
        unsigned char *half;
        int h;
        if ((s = take_half(d, &half, &h)) != ST_OK) return s;
        CU_TRY("cuMemcpyDtoHAsync", cu.cuMemcpyDtoHAsync(half, src + off, len, d->stream));
        CU_TRY("cuEventRecord", cu.cuEventRecord(d->staged[h], d->stream));
        if (prev) {
            CU_WAIT(d, "cuEventSynchronize", cu.cuEventSynchronize(d->staged[prev_h]));
            memcpy(out + prev_off, prev, prev_len);
        }
        prev = half;
        prev_h = h;
        prev_off = off;
        prev_len = len;
        off += len;
    }
    /* everything queued before this copy has run: no kernel is in flight any more */
    CU_WAIT(d, "cuEventSynchronize", cu.cuEventSynchronize(d->staged[prev_h]));
    settled(d);
    memcpy(out + prev_off, prev, prev_len);
    return take_checks(d);
}

st_status cuda_copy_dtod(int dev, st_devptr dst, st_devptr src, size_t n) {
    if (n == 0) return ST_OK;
    cuda_dev *d = get_dev(dev);
    if (!d) return st_last_status();
    CU_TRY("cuMemcpyDtoDAsync", cu.cuMemcpyDtoDAsync(dst, src, n, d->stream));
    return ST_OK;
}

/* ---- modules and launches ---- */

/* "cubin" or "PTX" (the driver JIT-compiles PTX text for the device at load). */
static const char *image_kind(const void *image, size_t n) {
    return n >= 4 && !memcmp(image, "\177ELF", 4) ? "cubin" : "PTX";
}

static st_status load_module(cuda_dev *d, const void *cubin, size_t n, cu_mod **out) {
    cu_mod *m = st_calloc(1, sizeof *m);
    if (!m) return ST_ERR_OOM;
    CUresult r = cu.cuModuleLoadData(&m->mod, cubin);
    if (r != CUDA_SUCCESS) {
        st_free(m);
        char w[256];
        return st_error(ST_ERR_DEVICE, "CUDA error in cuModuleLoadData: %s (%s of %zu bytes on %s, %s, sm_%d%d, CUDA %d.%d)",
                        error_words(r, w, sizeof w), image_kind(cubin, n), n, d->label, d->info.name,
                        d->info.cc_major, d->info.cc_minor, drv.version / 1000, drv.version % 1000 / 10);
    }
    m->cubin = cubin;
    base_hash_oom = 0;
    HASH_ADD_PTR(d->mods, cubin, m);
    if (base_hash_oom) {
        if ((r = cu.cuModuleUnload(m->mod)) != CUDA_SUCCESS) defer_cu(d, "cuModuleUnload", "out of memory", r, 0);
        st_free(m);
        return ST_ERR_OOM;
    }
    *out = m;
    return ST_OK;
}

static st_status find_function(cu_mod *m, const char *name, cu_fn **out) {
    CUfunction fn;
    CUresult r = cu.cuModuleGetFunction(&fn, m->mod, name);
    if (r != CUDA_SUCCESS) {
        char w[256];
        return st_error(ST_ERR_DEVICE, "CUDA error in cuModuleGetFunction(\"%s\"): %s", name, error_words(r, w, sizeof w));
    }
    cu_fn *f = st_calloc(1, sizeof *f);
    if (!f) return ST_ERR_OOM;
    if (!(f->name = st_strdup(name))) {
        st_free(f);
        return ST_ERR_OOM;
    }
    f->fn = fn;
    base_hash_oom = 0;
    HASH_ADD_KEYPTR(hh, m->fns, f->name, strlen(f->name), f);
    if (base_hash_oom) {
        st_free(f->name);
        st_free(f);
        return ST_ERR_OOM;
    }
    *out = f;
    return ST_OK;
}

st_status cuda_module_function(int dev, const void *cubin, size_t n, const char *name, void **fn) {
    *fn = NULL;
    cuda_dev *d = get_dev(dev);
    if (!d) return st_last_status();
    cu_mod *m;
    HASH_FIND_PTR(d->mods, &cubin, m);
    st_status s;
    if (!m && (s = load_module(d, cubin, n, &m)) != ST_OK) return s;
    cu_fn *f;
    HASH_FIND_STR(m->fns, name, f);
    if (!f && (s = find_function(m, name, &f)) != ST_OK) return s;
    *fn = f;
    return ST_OK;
}

void cuda_unload_modules(void) {
    if (drv.state <= 0) return;
    for (int i = 0; i < drv.ndev; i++) {
        cuda_dev *d = &drv.devs[i];
        if (!d->ready || !d->mods) continue;
        CUresult r = make_current(d);
        if (r != CUDA_SUCCESS) {
            defer_cu(d, "cuCtxSetCurrent", "unloading modules", r, 0);
            continue;
        }
        /* a module may not go while its kernels run */
        if ((r = cu.cuStreamSynchronize(d->stream)) != CUDA_SUCCESS)
            defer_cu(d, "cuStreamSynchronize", "unloading modules", r, 1);
        else
            settled(d);
        unload_modules(d);
    }
}

/* Launches f on d's stream; with ST_CUDA_SYNC waits for it (and reads the index-error flags). */
static st_status launch(cuda_dev *d, const cu_fn *f, const char *label, const unsigned grid[3], const unsigned block[3],
                        unsigned shmem, void **params) {
    CUresult r = cu.cuLaunchKernel(f->fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem, d->stream,
                                   params, NULL);
    char w[256], k[160];
    if (r != CUDA_SUCCESS)
        return st_error(ST_ERR_DEVICE, "CUDA error in cuLaunchKernel: %s (kernel %s, grid %ux%ux%u, block %ux%ux%u, "
                        "%u B shared, %s)", error_words(r, w, sizeof w), kernel_words(f, label, k, sizeof k), grid[0],
                        grid[1], grid[2], block[0], block[1], block[2], shmem, d->label);
    record_launch(d, f, label);
    if (!drv.sync_launches) return ST_OK;
    st_status s = queue_checks(d);
    if (s != ST_OK) return s;
    if ((r = cu.cuStreamSynchronize(d->stream)) != CUDA_SUCCESS)
        return st_error(ST_ERR_DEVICE, "CUDA error in kernel %s on %s: %s (ST_CUDA_SYNC=1: found by the "
                        "synchronization right after its launch)", kernel_words(f, label, k, sizeof k), d->label,
                        error_words(r, w, sizeof w));
    settled(d);
    return take_checks(d);
}

st_status cuda_launch(int dev, void *fn, const char *label, const unsigned grid[3], const unsigned block[3],
                      unsigned shmem, void **params) {
    cuda_dev *d = get_dev(dev);
    if (!d) return st_last_status();
    return launch(d, fn, label, grid, block, shmem, params);
}

/* A synchronization point: reports an asynchronous error with the kernels in flight, else the
 * first index error flagged since the last one. */
st_status cuda_synchronize(int dev) {
    cuda_dev *d = get_dev(dev);
    if (!d) return st_last_status();
    st_status s = queue_checks(d);
    if (s != ST_OK) return s;
    CU_WAIT(d, "cuStreamSynchronize", cu.cuStreamSynchronize(d->stream));
    settled(d);
    return take_checks(d);
}

/* Every device already active, after the error kept for later (reported even when none is): the
 * first error. Never probes the driver nor activates a device: a program that used no GPU pays
 * nothing. */
st_status cuda_synchronize_all(void) {
    if (drv.state <= 0) return ST_OK;
    st_status s = report_later();
    for (int i = 0; i < drv.ndev && s == ST_OK; i++)
        if (drv.devs[i].ready) s = cuda_synchronize(i);
    return s;
}

/* ---- shutdown ---- */

void cuda_shutdown(void) {
    if (drv.state <= 0) return;
    for (int i = 0; i < drv.ndev; i++) {
        cuda_dev *d = &drv.devs[i];
        if (!d->ready) continue;
        CUresult r = make_current(d);
        if (r != CUDA_SUCCESS) {
            defer_cu(d, "cuCtxSetCurrent", "shutting down", r, 0);
            continue;
        }
        /* index errors flagged since the last synchronization are not lost: kept for the next call */
        if (queue_checks(d) != ST_OK) {
            defer(st_last_status(), st_last_error());
            d->nchecks = 0;
        }
        if ((r = cu.cuCtxSynchronize()) != CUDA_SUCCESS) {
            defer_cu(d, "cuCtxSynchronize", "shutting down", r, 1);
            d->nchecks = 0;
        } else {
            settled(d);
            if (take_checks(d) != ST_OK) defer(st_last_status(), st_last_error());
        }
        unload_modules(d);
        if (d->flags) devalloc_free(d->alloc, d->flags);
        d->flags = 0;
        devalloc_empty_cache(d->alloc);
        devalloc_stats s;
        devalloc_get_stats(d->alloc, &s);
        if (s.in_use == 0) release_dev(d);
    }
}

/* ---- the device interface (device/device.h) ---- */

static const dev_info *ops_info(int ord) {
    cuda_dev *d = query_dev(ord);
    return d ? &d->dinfo : NULL;
}

static st_status ops_alloc(int ord, size_t n, void **ptr) {
    st_devptr p = 0;
    st_status s = cuda_mem_alloc(ord, n, &p);
    *ptr = (void *)(uintptr_t)p;
    return s;
}

static void ops_free(int ord, void *ptr, size_t n) {
    (void)n;
    cuda_mem_free(ord, (st_devptr)(uintptr_t)ptr);
}

static st_status ops_copy_in(int ord, void *dst, const void *src, size_t n) {
    return cuda_copy_htod(ord, (st_devptr)(uintptr_t)dst, src, n);
}

static st_status ops_copy_out(int ord, void *dst, const void *src, size_t n) {
    return cuda_copy_dtoh(ord, dst, (st_devptr)(uintptr_t)src, n);
}

static st_status ops_copy(int ord, void *dst, const void *src, size_t n) {
    return cuda_copy_dtod(ord, (st_devptr)(uintptr_t)dst, (st_devptr)(uintptr_t)src, n);
}

/* The index-error flags, their pinned read-back area and their messages: made at the first
 * kernel that reports errors. */
static st_status make_checks(cuda_dev *d) {
    if (!d->what && !(d->what = st_malloc(CHECK_SLOTS * sizeof *d->what))) return ST_ERR_OOM;
    if (!d->flags_host) {
        void *p = NULL;
        CU_TRY("cuMemHostAlloc", cu.cuMemHostAlloc(&p, CHECK_SLOTS * sizeof(int), CU_MEMHOSTALLOC_PORTABLE));
        d->flags_host = p;
    }
    if (!d->flags) return devalloc_alloc(d->alloc, CHECK_SLOTS * sizeof(int), &d->flags);
    return ST_OK;
}

/* The kernel ABI (jit/render.h): every buffer (a device pointer), every int parameter (long
 * long), every float parameter (double), the device error flag, the threads-per-row count, and for
 * a kernel that asks (c->scratch, CL_GRID) a pointer to scratch memory whose first word is 0. A
 * kernel that can report an index error gets a slot of the flag array, cleared by a memset queued
 * before it; the next synchronization point reads the slots (take_checks) and reports c->what
 * for the first one set. Only when every slot is taken does a launch wait, to free them. */
static st_status ops_launch(int ord, const dev_call *c, int *err) {
    *err = 0;
    cuda_dev *d = get_dev(ord);
    if (!d) return st_last_status();
    st_status s;
    if (c->check && (s = make_checks(d)) != ST_OK) return s;
    if (c->check && d->nchecks == CHECK_SLOTS && (s = cuda_synchronize(ord)) != ST_OK) return s;
    st_devptr ep = d->flags + (st_devptr)(c->check ? d->nchecks : 0) * sizeof(int);
    if (c->check) CU_TRY("cuMemsetD32Async", cu.cuMemsetD32Async(ep, 0, 1, d->stream));
    /* scratch (CL_GRID): allocated for this launch, its counter zeroed before it, given back right
     * after: the stream orders every later use of the block after the kernel */
    st_devptr scratch = 0;
    if (c->scratch > 0) {
        if ((s = devalloc_alloc(d->alloc, (size_t)c->scratch, &scratch)) != ST_OK) return s;
        CUresult r = cu.cuMemsetD32Async(scratch, 0, 1, d->stream);
        if (r != CUDA_SUCCESS) {
            devalloc_free(d->alloc, scratch);
            return cu_fail("cuMemsetD32Async", r);
        }
    }
    int np = c->nbufs + c->nints + c->nflts + 3;
    void **params = st_malloc((size_t)np * sizeof *params);
    st_devptr *ptrs = st_malloc((size_t)(c->nbufs ? c->nbufs : 1) * sizeof *ptrs);
    if (!params || !ptrs) {
        st_free(params);
        st_free(ptrs);
        if (scratch) devalloc_free(d->alloc, scratch);
        return st_last_status();
    }
    int p = 0;
    for (int i = 0; i < c->nbufs; i++) {
        ptrs[i] = (st_devptr)(uintptr_t)c->bufs[i];
        params[p++] = &ptrs[i];
    }
    for (int i = 0; i < c->nints; i++) params[p++] = (void *)(uintptr_t)&c->ints[i];   /* int64_t == long long */
    for (int i = 0; i < c->nflts; i++) params[p++] = (void *)(uintptr_t)&c->flts[i];
    int rt = c->rt;
    params[p++] = &ep;
    params[p++] = &rt;
    if (scratch) params[p++] = &scratch;
    if (c->check) /* the slot is taken before the launch: with ST_CUDA_SYNC the launch reads it back */
        snprintf(d->what[d->nchecks++], CHECK_TEXT, "%s", c->what ? c->what : "a kernel reported an index out of range");
    s = launch(d, c->fn, c->name, c->grid, c->block, 0, params);
    if (scratch) devalloc_free(d->alloc, scratch);
    st_free(params);
    st_free(ptrs);
    return s;
}

const st_device_ops dev_cuda_ops = {
    .kind = "cuda",
    .target = DEV_TARGET_CUDA,
    .host_memory = false,
    .count = cuda_probe,
    .unavailable = cuda_unavailable_reason,
    .info = ops_info,
    .alloc = ops_alloc,
    .free = ops_free,
    .copy_in = ops_copy_in,
    .copy_out = ops_copy_out,
    .copy = ops_copy,
    .synchronize = cuda_synchronize,
    .synchronize_all = cuda_synchronize_all,
    .load_function = cuda_module_function,
    .generation = cuda_module_generation,
    .unload_functions = cuda_unload_modules,
    .launch = ops_launch,
    .mem_stats = cuda_mem_stats,
    .reset_peak = cuda_mem_reset_peak,
    .empty_cache = cuda_empty_cache,
};
