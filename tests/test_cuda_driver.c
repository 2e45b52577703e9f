/*
 * test_cuda_driver.c — the driver-API layer (device/cuda.c) with a missing, wrong, stub, fake
 * and (on a GPU machine) real libcuda.
 *
 * The probe runs once per process, so every case runs in a forked child with its own ST_CUDA_LIB;
 * the child ships its first failed check back through a pipe (a crash is a failure too).
 *  - missing library, a library that is not a driver, the toolkit's stub: cuda_probe() == 0, the
 *    reason names the path and the cause in words, every entry point fails with ST_ERR_DEVICE;
 *  - a fake driver (this very file compiled with -DST_FAKE_LIBCUDA into a temp dir): a host-memory
 *    implementation of the entry points whose asynchronous copies, event records and launches are
 *    queued and run only when something waits, like a real stream. It checks the layer's contract:
 *    copies round-trip through the double-buffered staging (a staging half reused before its
 *    copy ran would corrupt the data), H2D returns before the copy ran yet the caller may reuse
 *    its buffer, frees and unloads happen only with an idle stream, modules load once, shutdown
 *    releases everything (and keeps blocks that are still in use valid); cuInit failures and zero
 *    devices give their messages. It also loads real cubins (ELF images, e.g. from NVRTC): a
 *    function is found when its name is in the image, and launching it only records the launch
 *    (count, grid, block, name; fakecu_stat, fakecu_last_kernel) — no kernel runs, so values are
 *    meaningless — while launching a function of an unloaded module is a violation and an error
 *    (tests/fake_cuda.h, tests/test_cuda_counts.c). PTX text loads too (its .entry names are its
 *    functions: the driver would compile it). Trouble can be injected (fakecu_fault: a kernel
 *    faults when the stream runs it, and waits return CUDA_ERROR_ILLEGAL_ADDRESS; fakecu_raise: a
 *    kernel sets the index-error flag that the last cuMemsetD32Async cleared; fakecu_fail: the
 *    next call of an entry point fails), and FAKE_CUDA_CC / FAKE_CUDA_VERSION set the GPU's
 *    compute capability and the driver's CUDA version;
 *  - on the fake: an asynchronous fault names the kernels in flight since the last successful
 *    synchronization; ST_CUDA_SYNC=1 names the faulting kernel at its launch; index-error flags are
 *    cleared by a memset, never waited for at the launch, and reported at the next synchronization
 *    point with the launch's message; a failed cuMemFree or cuModuleUnload (which cannot be
 *    returned) is reported by the next call;
 *  - the real driver, when one is present: the same round-trip suite, including a PTX launch.
 */
#ifdef ST_FAKE_LIBCUDA
/* ------------------------------------------------------------------------------------------- */
/* The fake libcuda.so.1: built by the test with `cc -shared -fPIC -DST_FAKE_LIBCUDA`.          */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* memmem */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef struct fake_event { int recorded; long seq; } fake_event;
typedef struct fake_op {
    int kind;             /* 0 copy, 1 event record, 2 fill launch, 3 memset, 4 fault, 5 raise a flag */
    void *dst;
    const void *src;
    size_t n;
    unsigned value;
    fake_event *ev;
} fake_op;

static fake_op *queue;
static long qn, qdone, qcap;
static int ctx_refs, stream_live, event_live, pinned_live, allocs_live, loads, unloads, violations, set_current;
static int launches, last_grid[3], last_block[3], ptx_loads, waits, memsets;
static char last_name[128];
static size_t mem_used, mem_cap;
static int ctx_marker, stream_marker, module_marker, fill_marker;
static void *current;
/* Injected trouble (fakecu_fault, fakecu_raise, fakecu_fail): */
static char fault_kernel[128];   /* its next launch faults when the stream runs it */
static int fault;                /* the sticky error of a fault that ran (0: none) */
static char raise_kernel[128];   /* its next launch sets the flag memset last before it */
static unsigned *last_memset;
static char fail_api[64];        /* the next call of this entry point fails with fail_code */
static int fail_code;

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static void run_op(fake_op *o) {
    if (o->kind == 0) memcpy(o->dst, o->src, o->n);
    else if (o->kind == 2)
        for (size_t i = 0; i < o->n; i++) ((unsigned *)o->dst)[i] = (unsigned)i;
    else if (o->kind == 3)
        for (size_t i = 0; i < o->n; i++) ((unsigned *)o->dst)[i] = o->value;
    else if (o->kind == 4) fault = 700;   /* CUDA_ERROR_ILLEGAL_ADDRESS */
    else if (o->kind == 5) *(unsigned *)o->dst = 1;
}
static void run_until(long seq) {
    while (qdone <= seq && qdone < qn) run_op(&queue[qdone++]);
    if (qdone == qn) qn = qdone = 0;
}
/* Whether this call of entry point api must fail (fakecu_fail), once. */
static int failing(const char *api) {
    if (!fail_api[0] || strcmp(fail_api, api)) return 0;
    fail_api[0] = 0;
    return fail_code;
}
/* The next launch of kernel name (fill, or a cubin kernel; "*": any) faults, and every wait afterwards
 * returns CUDA_ERROR_ILLEGAL_ADDRESS, as a real context does after a fault; NULL clears both. */
void fakecu_fault(const char *name);
void fakecu_fault(const char *name) {
    snprintf(fault_kernel, sizeof fault_kernel, "%s", name ? name : "");
    if (!name) fault = 0;
}
/* The next launch of kernel name ("*": any) writes 1 into the flag that the last
 * cuMemsetD32Async before it cleared: the kernel "reports an index error". */
void fakecu_raise(const char *name);
void fakecu_raise(const char *name) { snprintf(raise_kernel, sizeof raise_kernel, "%s", name ? name : ""); }
/* The next call of entry point api (its exported name, e.g. "cuMemFree_v2") fails with code. */
void fakecu_fail(const char *api, int code);
void fakecu_fail(const char *api, int code) {
    snprintf(fail_api, sizeof fail_api, "%s", api ? api : "");
    fail_code = code;
}
static long enqueue(fake_op o) {
    if (qn == qcap) {
        qcap = qcap ? 2 * qcap : 64;
        queue = realloc(queue, (size_t)qcap * sizeof *queue);
    }
    queue[qn] = o;
    return qn++;
}
static int idle(void) { return qn == qdone; }
static int ready(void) { return ctx_refs > 0 && current == &ctx_marker; }

int fakecu_stat(const char *what);
int fakecu_stat(const char *what) {
    if (!strcmp(what, "ctx_refs")) return ctx_refs;
    if (!strcmp(what, "streams")) return stream_live;
    if (!strcmp(what, "events")) return event_live;
    if (!strcmp(what, "pinned")) return pinned_live;
    if (!strcmp(what, "allocs")) return allocs_live;
    if (!strcmp(what, "loads")) return loads;
    if (!strcmp(what, "unloads")) return unloads;
    if (!strcmp(what, "violations")) return violations;
    if (!strcmp(what, "set_current")) return set_current;
    if (!strcmp(what, "pending")) return (int)(qn - qdone);
    if (!strcmp(what, "launches")) return launches;   /* cubin kernels launched */
    if (!strcmp(what, "grid_x")) return last_grid[0];
    if (!strcmp(what, "grid_y")) return last_grid[1];
    if (!strcmp(what, "grid_z")) return last_grid[2];
    if (!strcmp(what, "block_x")) return last_block[0];
    if (!strcmp(what, "block_y")) return last_block[1];
    if (!strcmp(what, "block_z")) return last_block[2];
    if (!strcmp(what, "ptx_loads")) return ptx_loads;   /* modules loaded from PTX text (not fill) */
    if (!strcmp(what, "waits")) return waits;           /* stream, event and context synchronizations */
    if (!strcmp(what, "memsets")) return memsets;
    return -1;
}
const char *fakecu_last_kernel(void);
const char *fakecu_last_kernel(void) { return last_name; }

/* Cubin modules (ELF images) and PTX modules (NVRTC's text): a copy of the image; functions are
 * never freed (a stale handle must stay readable to be caught), they point at their module, which
 * says whether it is loaded. */
typedef struct fake_mod { int live, ptx; unsigned char *img; size_t n; } fake_mod;
typedef struct fake_fn { fake_mod *mod; char name[128]; struct fake_fn *next; } fake_fn;
static fake_fn *fns;

static unsigned long long rd(const unsigned char *p, int n) {
    unsigned long long v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
/* The extent of a little-endian ELF64 image: the furthest of its section and program headers and
 * of its sections' contents. */
static size_t elf_size(const unsigned char *e) {
    unsigned long long phoff = rd(e + 0x20, 8), shoff = rd(e + 0x28, 8);
    unsigned phsz = (unsigned)rd(e + 0x36, 2), phn = (unsigned)rd(e + 0x38, 2);
    unsigned shsz = (unsigned)rd(e + 0x3A, 2), shn = (unsigned)rd(e + 0x3C, 2);
    unsigned long long end = 64;
    if (phoff + (unsigned long long)phsz * phn > end) end = phoff + (unsigned long long)phsz * phn;
    if (shoff + (unsigned long long)shsz * shn > end) end = shoff + (unsigned long long)shsz * shn;
    for (unsigned i = 0; i < shn; i++) {
        const unsigned char *sh = e + shoff + (unsigned long long)i * shsz;
        unsigned long long off = rd(sh + 0x18, 8), size = rd(sh + 0x20, 8);
        if (rd(sh + 4, 4) != 8 /* SHT_NOBITS */ && off + size > end) end = off + size;
    }
    return (size_t)end;
}

#define API(name, params) int name params; int name params
API(cuInit, (unsigned f)) { (void)f; return env_int("FAKE_CUDA_INIT", 0); }
/* CUDA 20.0 unless FAKE_CUDA_VERSION says otherwise: newer than any NVRTC, which must not be newer
 * than the driver (jit/nvrtc.c). */
API(cuDriverGetVersion, (int *v)) { *v = env_int("FAKE_CUDA_VERSION", 20000); return 0; }
API(cuDeviceGetCount, (int *n)) { *n = env_int("FAKE_CUDA_DEVICES", 1); return 0; }
API(cuDeviceGet, (int *d, int o)) { *d = o; return 0; }
API(cuDeviceGetName, (char *s, int n, int d)) { (void)d; strncpy(s, "Fake GPU", (size_t)n); return 0; }
API(cuDeviceGetAttribute, (int *v, int a, int d)) {
    (void)d;
    int cc = env_int("FAKE_CUDA_CC", 90);   /* compute capability, major * 10 + minor */
    *v = a == 75 ? cc / 10 : a == 76 ? cc % 10 : a == 16 ? 132 : a == 1 ? 1024 : 0;
    return 0;
}
API(cuDeviceTotalMem_v2, (size_t *b, int d)) {
    (void)d;
    mem_cap = (size_t)env_int("FAKE_CUDA_MEM_MIB", 256) << 20;
    *b = mem_cap;
    return 0;
}
API(cuDevicePrimaryCtxRetain, (void **c, int d)) { (void)d; ctx_refs++; *c = &ctx_marker; return 0; }
API(cuDevicePrimaryCtxRelease_v2, (int d)) { (void)d; ctx_refs--; return 0; }
API(cuCtxSetCurrent, (void *c)) { set_current++; current = c; return 0; }
API(cuCtxSynchronize, (void)) { waits++; run_until(qn); return fault; }
API(cuStreamCreate, (void **s, unsigned f)) { violations += f != 1; stream_live++; *s = &stream_marker; return 0; }
API(cuStreamDestroy_v2, (void *s)) { violations += s != &stream_marker || !idle(); stream_live--; return 0; }
API(cuStreamSynchronize, (void *s)) {
    violations += s != &stream_marker;
    waits++;
    run_until(qn);
    return fault;
}
API(cuEventCreate, (fake_event **e, unsigned f)) { (void)f; *e = calloc(1, sizeof **e); event_live++; return 0; }
API(cuEventRecord, (fake_event *e, void *s)) {
    violations += s != &stream_marker;
    e->recorded = 1;
    e->seq = enqueue((fake_op){.kind = 1, .ev = e});
    return 0;
}
API(cuEventSynchronize, (fake_event *e)) {
    waits++;
    if (e->recorded) run_until(e->seq);
    return fault;
}
API(cuEventDestroy_v2, (fake_event *e)) { free(e); event_live--; return 0; }
API(cuMemAlloc_v2, (CUdeviceptr *p, size_t n)) {
    if (!ready()) return 201;
    if (mem_used + n > mem_cap) return 2;
    size_t *b = malloc(n + 16);
    if (!b) return 2;
    b[0] = n;
    mem_used += n;
    allocs_live++;
    *p = (CUdeviceptr)(b + 2);
    return 0;
}
API(cuMemFree_v2, (CUdeviceptr p)) {
    int f = failing("cuMemFree_v2");
    if (f) return f;   /* the block stays allocated, as after a real failure */
    violations += !idle() || !ready();
    size_t *b = (size_t *)p - 2;
    mem_used -= b[0];
    allocs_live--;
    free(b);
    return 0;
}
API(cuMemGetInfo_v2, (size_t *f, size_t *t)) { *f = mem_cap - mem_used; *t = mem_cap; return 0; }
API(cuMemHostAlloc, (void **p, size_t n, unsigned f)) { (void)f; *p = malloc(n); pinned_live++; return 0; }
API(cuMemFreeHost, (void *p)) { violations += !idle(); free(p); pinned_live--; return 0; }
API(cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void *s, size_t n, void *st)) {
    violations += st != &stream_marker || !ready();
    enqueue((fake_op){.kind = 0, .dst = (void *)d, .src = s, .n = n});
    return 0;
}
API(cuMemcpyDtoHAsync_v2, (void *d, CUdeviceptr s, size_t n, void *st)) {
    violations += st != &stream_marker || !ready();
    enqueue((fake_op){.kind = 0, .dst = d, .src = (const void *)s, .n = n});
    return 0;
}
API(cuMemcpyDtoDAsync_v2, (CUdeviceptr d, CUdeviceptr s, size_t n, void *st)) {
    violations += st != &stream_marker || !ready();
    enqueue((fake_op){.kind = 0, .dst = (void *)d, .src = (const void *)s, .n = n});
    return 0;
}
API(cuMemsetD32Async, (CUdeviceptr d, unsigned v, size_t n, void *st)) {
    violations += st != &stream_marker || !ready();
    memsets++;
    last_memset = (unsigned *)d;
    enqueue((fake_op){.kind = 3, .dst = (void *)d, .n = n, .value = v});
    return 0;
}
API(cuModuleLoadData, (void **m, const void *image)) {
    const unsigned char *e = image;
    if (!memcmp(e, "\177ELF", 4)) {
        if (e[4] != 2 || e[5] != 1) return 200;   /* ELF64, little-endian */
        fake_mod *fm = calloc(1, sizeof *fm);
        fm->n = elf_size(e);
        fm->img = malloc(fm->n);
        memcpy(fm->img, e, fm->n);
        fm->live = 1;
        loads++;
        *m = fm;
        return 0;
    }
    if (strstr((const char *)image, ".entry fill(")) {
        loads++;
        *m = &module_marker;
        return 0;
    }
    if (!strstr((const char *)image, ".version") || !strstr((const char *)image, ".entry")) return 218;
    fake_mod *fm = calloc(1, sizeof *fm);   /* PTX: the driver would compile it for the device */
    fm->n = strlen(image) + 1;
    fm->img = malloc(fm->n);
    memcpy(fm->img, image, fm->n);
    fm->live = fm->ptx = 1;
    loads++;
    ptx_loads++;
    *m = fm;
    return 0;
}
/* Whether module fm has a function name: a symbol of the ELF image, an entry of the PTX text. */
static int has_function(const fake_mod *fm, const char *name) {
    size_t len = strlen(name);
    if (!fm->ptx) return memmem(fm->img, fm->n, name, len + 1) != NULL;
    for (const char *p = strstr((const char *)fm->img, ".entry "); p; p = strstr(p + 1, ".entry ")) {
        const char *q = p + 7;
        while (*q == ' ') q++;
        if (!strncmp(q, name, len) && (q[len] == '(' || q[len] == ' ' || q[len] == '\n')) return 1;
    }
    return 0;
}
API(cuModuleGetFunction, (void **f, void *m, const char *name)) {
    if (m != &module_marker) {
        fake_mod *fm = m;
        violations += !fm->live;
        size_t len = strlen(name);
        if (!fm->live || len >= sizeof fns->name || !has_function(fm, name)) return 500;
        fake_fn *fn = calloc(1, sizeof *fn);
        fn->mod = fm;
        memcpy(fn->name, name, len + 1);
        fn->next = fns;
        fns = fn;
        *f = fn;
        return 0;
    }
    if (strcmp(name, "fill")) return 500;
    *f = &fill_marker;
    return 0;
}
API(cuModuleUnload, (void *m)) {
    int f = failing("cuModuleUnload");
    if (f) return f;   /* the module stays loaded */
    violations += !idle();
    if (m != &module_marker) {
        fake_mod *fm = m;
        violations += !fm->live;
        fm->live = 0;
        free(fm->img);
        fm->img = NULL;
    }
    unloads++;
    return 0;
}
/* A cubin kernel: recorded, not run. Its handle must come from a module still loaded. */
static int launch_cubin(fake_fn *fn, const unsigned g[3], const unsigned b[3], void **params) {
    fake_fn *k = fns;
    while (k && k != fn) k = k->next;
    if (!k || !k->mod->live || !params || !params[0] || !*(CUdeviceptr *)params[0]) {
        violations++;
        return 400;   /* CUDA_ERROR_INVALID_HANDLE */
    }
    if ((unsigned long long)b[0] * b[1] * b[2] > 1024 || !g[0] || !g[1] || !g[2]) return 1;
    launches++;
    for (int i = 0; i < 3; i++) last_grid[i] = (int)g[i], last_block[i] = (int)b[i];
    strcpy(last_name, k->name);
    return 0;
}
/* Queues the trouble injected for a launch of kernel name. */
static void trouble(const char *name) {
    if (fault_kernel[0] && (!strcmp(fault_kernel, "*") || !strcmp(fault_kernel, name))) {
        fault_kernel[0] = 0;
        enqueue((fake_op){.kind = 4});
    }
    if (raise_kernel[0] && last_memset && (!strcmp(raise_kernel, "*") || !strcmp(raise_kernel, name))) {
        raise_kernel[0] = 0;
        enqueue((fake_op){.kind = 5, .dst = last_memset});
    }
}
API(cuLaunchKernel, (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned sh,
                     void *st, void **params, void **extra)) {
    (void)sh, (void)extra;
    if (fault) return fault;   /* a context that faulted refuses new work */
    if (f != &fill_marker) {
        violations += st != &stream_marker;
        int r = launch_cubin(f, (unsigned[]){gx, gy, gz}, (unsigned[]){bx, by, bz}, params);
        if (r == 0) trouble(last_name);
        return r;
    }
    violations += st != &stream_marker;
    if (bx > 1024) return 1;
    size_t n = *(unsigned *)params[1], threads = (size_t)gx * bx;
    enqueue((fake_op){.kind = 2, .dst = (void *)*(CUdeviceptr *)params[0], .n = n < threads ? n : threads});
    trouble("fill");
    return 0;
}
API(cuGetErrorName, (int e, const char **s)) { (void)e; *s = NULL; return 1; } /* like the stub: no words */
API(cuGetErrorString, (int e, const char **s)) { (void)e; *s = NULL; return 1; }

#else
/* ------------------------------------------------------------------------------------------- */
#include "test.h"
#include "device/cuda.h"
#include "device/device.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

/* Runs fn in a child with ST_CUDA_LIB = lib (unset when NULL) and reports its first failure. */
static void in_child(const char *lib, void (*fn)(void)) {
    int fd[2];
    if (pipe(fd) != 0) {
        TEST_FAILF("pipe failed");
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        if (lib) setenv("ST_CUDA_LIB", lib, 1);
        else unsetenv("ST_CUDA_LIB");
        test_cur_failed = 0;
        test_cur_msg[0] = 0;
        fn();
        char rep[sizeof test_cur_msg + 1];
        rep[0] = test_cur_failed ? 'F' : 'P';
        memcpy(rep + 1, test_cur_msg, sizeof test_cur_msg);
        ssize_t w = write(fd[1], rep, sizeof rep);
        _exit(w == (ssize_t)sizeof rep ? 0 : 1);
    }
    close(fd[1]);
    char rep[sizeof test_cur_msg + 1];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof rep && (r = read(fd[0], rep + got, sizeof rep - got)) > 0) got += (size_t)r;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) TEST_FAILF("the child crashed with signal %d", WTERMSIG(status));
    else if (got != sizeof rep) TEST_FAILF("the child exited (status %d) without a report", WEXITSTATUS(status));
    else if (rep[0] == 'F') TEST_FAILF("%s", rep + 1);
}

/* Every entry point fails cleanly with ST_ERR_DEVICE and the reason. */
static void check_unusable(const char *must_contain) {
    CHECK_EQ_INT(cuda_probe(), 0);
    CHECK_EQ_INT(cuda_probe(), 0);
    const char *why = cuda_unavailable_reason();
    CHECK_MSG(why && strstr(why, must_contain), "reason \"%s\" lacks \"%s\"", why ? why : "(null)", must_contain);
    CHECK_EQ_INT(cuda_driver_version(), 0);
    st_clear_error();
    CHECK(cuda_device(0) == NULL);
    CHECK_EQ_INT(st_last_status(), ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "CUDA is not available: ") && strstr(st_last_error(), must_contain),
              "message: %s", st_last_error());
    st_devptr p = 99;
    CHECK_EQ_INT(cuda_mem_alloc(0, 1024, &p), ST_ERR_DEVICE);
    CHECK_EQ_INT(p, 0);
    CHECK(strstr(st_last_error(), must_contain) != NULL);
    char buf[16] = {0};
    CHECK_EQ_INT(cuda_copy_htod(0, 4096, buf, sizeof buf), ST_ERR_DEVICE);
    CHECK_EQ_INT(cuda_copy_dtoh(0, buf, 4096, sizeof buf), ST_ERR_DEVICE);
    CHECK_EQ_INT(cuda_copy_dtod(0, 4096, 8192, sizeof buf), ST_ERR_DEVICE);
    void *fn = buf;
    CHECK_EQ_INT(cuda_module_function(0, buf, sizeof buf, "k", &fn), ST_ERR_DEVICE);
    CHECK(fn == NULL);
    CHECK_EQ_INT(cuda_synchronize(0), ST_ERR_DEVICE);
    cuda_mem_free(0, 4096); /* no-ops, no crash */
    cuda_empty_cache();
    uint64_t a = 1, b = 1, c = 1;
    cuda_mem_stats(&a, &b, &c);
    CHECK(a == 0 && b == 0 && c == 0);
    cuda_shutdown();
}

static void missing_body(void) { check_unusable("no CUDA driver found (/nonexistent/libcuda.so.1: cannot open shared object file"); }
TEST(missing_library) { in_child("/nonexistent/libcuda.so.1", missing_body); }

static void not_a_driver_body(void) { check_unusable("lacks cuInit"); }
TEST(not_a_driver) { in_child("libm.so.6", not_a_driver_body); }

#define STUB "/usr/local/cuda/lib64/stubs/libcuda.so"
static void stub_body(void) {
    check_unusable("the CUDA driver library is a stub (");
    check_unusable("no GPU driver installed (cuInit: CUDA_ERROR_STUB_LIBRARY");
}
TEST(stub_library) { in_child(STUB, stub_body); }

/* No ST_CUDA_LIB on a machine without a driver: the default search says so. */
static void no_driver_body(void) { check_unusable("no CUDA driver found (libcuda.so.1: "); }
TEST(default_search_no_driver) { in_child(NULL, no_driver_body); }

/* ---- the round-trip suite: fake or real driver ---- */

static int suite_fake;     /* running on the fake driver: its counters can be checked */
static void *fake_handle;

static int fake_stat(const char *what) {
    if (!fake_handle) fake_handle = dlopen(getenv("ST_CUDA_LIB"), RTLD_NOW | RTLD_NOLOAD);
    void *sym = fake_handle ? dlsym(fake_handle, "fakecu_stat") : NULL;
    int (*f)(const char *);
    if (!sym) return -1000;
    memcpy(&f, &sym, sizeof f);
    return f(what);
}

static const char fill_ptx[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry fill(.param .u64 p, .param .u32 n)\n{\n"
    "  .reg .pred %p<2>;\n  .reg .b32 %r<6>;\n  .reg .b64 %rd<4>;\n"
    "  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x;\n  mov.u32 %r3, %ntid.x;\n  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r5, %r2, %r3, %r4;\n  setp.ge.u32 %p1, %r5, %r1;\n  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n  mul.wide.u32 %rd3, %r5, 4;\n  add.s64 %rd2, %rd2, %rd3;\n"
    "  st.global.u32 [%rd2], %r5;\nDONE:\n  ret;\n}\n";

/* Bytes that differ between staging chunks (a pattern periodic in the chunk size would hide a
 * staging half overwritten too early). */
static void pattern(unsigned char *p, size_t n, unsigned seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (unsigned char)(x >> 24);
    }
}

static void suite_devices(void) {
    int n = cuda_probe();
    CHECK(n >= 1);
    CHECK_MSG(!strcmp(cuda_unavailable_reason(), ""), "reason: %s", cuda_unavailable_reason());
    CHECK(cuda_driver_version() >= 11000);
    const cuda_device_info *di = cuda_device(0);
    CHECK(di != NULL);
    if (!di) return;
    CHECK(di->name[0] != 0 && di->cc_major >= 5 && di->sm_count > 0 && di->total_mem > 0 && di->max_threads >= 256);
    CHECK(cuda_device(0) == di);
    CHECK(cuda_device(n) == NULL);
    CHECK_EQ_INT(st_last_status(), ST_ERR_DEVICE);
    CHECK(strstr(st_last_error(), "no CUDA device cuda:") != NULL);
    CHECK(cuda_device(-1) == NULL);
}

static void suite_copies(void) {
    size_t n = MiB, big = 20 * MiB + 3; /* big: three staging chunks, the last one odd */
    unsigned char *h = malloc(big), *h2 = malloc(big), *out = malloc(big);
    st_devptr a = 0, b = 0, c = 0;
    CHECK(h && h2 && out);
    if (!h || !h2 || !out) goto done;
    CHECK(cuda_mem_alloc(0, n, &a) == ST_OK && a);
    CHECK(cuda_mem_alloc(0, n, &b) == ST_OK && b && b != a);
    CHECK(cuda_mem_alloc(0, big, &c) == ST_OK && c);
    pattern(h, n, 1);
    CHECK(cuda_copy_htod(0, a, h, n) == ST_OK);
    CHECK(cuda_copy_dtod(0, b, a, n) == ST_OK);
    memset(out, 0, n);
    CHECK(cuda_copy_dtoh(0, out, b, n) == ST_OK);
    CHECK_MSG(!memcmp(out, h, n), "1 MiB H2D + D2D + D2H round trip differs");
    /* the source buffer may be reused as soon as cuda_copy_htod returns */
    pattern(h, big, 2);
    memcpy(h2, h, big);
    CHECK(cuda_copy_htod(0, c, h, big) == ST_OK);
    memset(h, 0xAB, big);
    memset(out, 0, big);
    CHECK(cuda_copy_dtoh(0, out, c, big) == ST_OK);
    CHECK_MSG(!memcmp(out, h2, big), "20 MiB round trip through staging differs");
    /* odd offsets and lengths */
    pattern(h, 1001, 3);
    CHECK(cuda_copy_htod(0, c + 5, h, 1001) == ST_OK);
    CHECK(cuda_copy_dtoh(0, out, c + 4, 1003) == ST_OK);
    CHECK(out[0] == h2[4] && !memcmp(out + 1, h, 1001) && out[1002] == h2[1006]);
    CHECK(cuda_copy_htod(0, c, h, 0) == ST_OK && cuda_copy_dtoh(0, out, c, 0) == ST_OK);
    CHECK(cuda_synchronize(0) == ST_OK);
done:
    cuda_mem_free(0, a);
    cuda_mem_free(0, b);
    cuda_mem_free(0, c);
    free(h);
    free(h2);
    free(out);
}

static void suite_stats(void) {
    cuda_empty_cache();
    uint64_t u0, r0, p0, u, r, p;
    cuda_mem_stats(&u0, &r0, &p0);
    CHECK_EQ_INT(u0, r0);
    st_devptr x;
    CHECK(cuda_mem_alloc(0, 3 * MiB, &x) == ST_OK);
    static unsigned char src[3 << 20];
    CHECK(cuda_copy_htod(0, x, src, sizeof src) == ST_OK); /* still queued when x is freed below */
    cuda_mem_stats(&u, &r, &p);
    CHECK_EQ_INT(u, u0 + 4 * MiB);
    CHECK(p >= u);
    cuda_mem_free(0, x);
    cuda_mem_stats(&u, &r, &p);
    CHECK_EQ_INT(u, u0);
    CHECK_EQ_INT(r, u0 + 4 * MiB);
    cuda_mem_reset_peak();
    cuda_mem_stats(&u, &r, &p);
    CHECK_EQ_INT(p, u);
    cuda_empty_cache(); /* returns x to the driver: only once the copy into it has run */
    if (suite_fake) CHECK_EQ_INT(fake_stat("violations"), 0);
    cuda_mem_stats(&u, &r, &p);
    CHECK_EQ_INT(r, u);
}

static int oom_calls;
static int count_oom(size_t bytes, void *ud) {
    (void)bytes, (void)ud;
    oom_calls++;
    return 0;
}

static void suite_oom(void) {
    const cuda_device_info *di = cuda_device(0);
    if (!di) return;
    st_devptr p = 1;
    CHECK_EQ_INT(cuda_mem_alloc(0, di->total_mem * 2, &p), ST_ERR_OOM);
    CHECK_EQ_INT(p, 0);
    CHECK_MSG(strstr(st_last_error(), "CUDA out of memory on cuda:0: tried to allocate ") != NULL, "message: %s",
              st_last_error());
    /* more than is free, less than the device: the driver's own OOM, through the whole ladder */
    st_devptr hold = 0;
    CHECK(cuda_mem_alloc(0, di->total_mem / 4, &hold) == ST_OK);
    size_t fr, tot;
    CHECK(cuda_mem_get_info(0, &fr, &tot) == ST_OK);
    CHECK(tot == di->total_mem && fr <= tot);
    size_t want = tot - 4 * MiB;
    if (want > fr + 4 * MiB) {
        oom_calls = 0;
        st_set_oom_handler(count_oom, NULL);
        CHECK_EQ_INT(cuda_mem_alloc(0, want, &p), ST_ERR_OOM);
        st_set_oom_handler(NULL, NULL);
        CHECK_EQ_INT(oom_calls, 1);
        CHECK_MSG(strstr(st_last_error(), "tried to allocate") && strstr(st_last_error(), "in use"), "message: %s",
                  st_last_error());
    }
    else
        CHECK_MSG(0, "%zu bytes free of %zu with a quarter held: cannot provoke the driver's OOM", fr, tot);
    cuda_mem_free(0, hold);
    CHECK(cuda_mem_alloc(0, MiB, &p) == ST_OK && p); /* usable afterwards */
    cuda_mem_free(0, p);
}

static void suite_launch(void) {
    void *fn = NULL, *fn2 = NULL;
    CHECK(cuda_module_function(0, fill_ptx, sizeof fill_ptx, "fill", &fn) == ST_OK && fn);
    CHECK(cuda_module_function(0, fill_ptx, sizeof fill_ptx, "fill", &fn2) == ST_OK && fn2 == fn);
    if (suite_fake) CHECK_EQ_INT(fake_stat("loads"), 1);
    CHECK_EQ_INT(cuda_module_function(0, fill_ptx, sizeof fill_ptx, "nope", &fn2), ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "CUDA error in cuModuleGetFunction(\"nope\"): CUDA_ERROR_NOT_FOUND"), "message: %s",
              st_last_error());
    static const char garbage[] = "not a cubin";
    CHECK_EQ_INT(cuda_module_function(0, garbage, sizeof garbage, "fill", &fn2), ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "CUDA error in cuModuleLoadData: CUDA_ERROR_"), "message: %s", st_last_error());
    if (!fn) return;
    unsigned n = 100003;
    st_devptr d = 0;
    unsigned *out = malloc(n * sizeof *out);
    CHECK(out && cuda_mem_alloc(0, n * sizeof *out, &d) == ST_OK);
    if (out && d) {
        void *params[] = {&d, &n};
        unsigned grid[3] = {(n + 255) / 256, 1, 1}, block[3] = {256, 1, 1}, bad[3] = {4096, 1, 1};
        CHECK(cuda_launch(0, fn, "fill_test", grid, block, 0, params) == ST_OK);
        CHECK(cuda_copy_dtoh(0, out, d, n * sizeof *out) == ST_OK);
        int bad_at = -1;
        for (unsigned i = 0; i < n && bad_at < 0; i++)
            if (out[i] != i) bad_at = (int)i;
        CHECK_MSG(bad_at < 0, "fill kernel: out[%d] = %u", bad_at, bad_at >= 0 ? out[bad_at] : 0);
        CHECK_EQ_INT(cuda_launch(0, fn, NULL, grid, bad, 0, params), ST_ERR_DEVICE);
        CHECK_MSG(strstr(st_last_error(), "CUDA error in cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument) "
                         "(kernel fill, grid"), "message: %s", st_last_error());
        CHECK(cuda_synchronize(0) == ST_OK);
    }
    cuda_mem_free(0, d);
    free(out);
}

/* Shutdown keeps blocks in use valid; with none left the device is released, then re-activated. */
static void suite_shutdown(void) {
    st_devptr live = 0;
    unsigned char h[4096], out[4096];
    pattern(h, sizeof h, 9);
    CHECK(cuda_mem_alloc(0, sizeof h, &live) == ST_OK);
    CHECK(cuda_copy_htod(0, live, h, sizeof h) == ST_OK);
    cuda_shutdown();
    if (suite_fake) {
        CHECK_EQ_INT(fake_stat("ctx_refs"), 1);
        CHECK_EQ_INT(fake_stat("unloads"), fake_stat("loads"));
        CHECK_EQ_INT(fake_stat("allocs"), 1);
    }
    memset(out, 0, sizeof out);
    CHECK(cuda_copy_dtoh(0, out, live, sizeof out) == ST_OK && !memcmp(out, h, sizeof h));
    cuda_mem_free(0, live);
    cuda_shutdown();
    uint64_t u, r, p;
    cuda_mem_stats(&u, &r, &p);
    CHECK(u == 0 && r == 0);
    if (suite_fake) {
        const char *zero[] = {"ctx_refs", "streams", "events", "pinned", "allocs", "pending", "violations"};
        for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++)
            CHECK_MSG(fake_stat(zero[i]) == 0, "fake driver after shutdown: %s = %d", zero[i], fake_stat(zero[i]));
    }
    CHECK(cuda_device(0) != NULL); /* usable again */
    CHECK(cuda_mem_alloc(0, 1000, &live) == ST_OK);
    cuda_mem_free(0, live);
    cuda_shutdown();
    if (suite_fake) CHECK_EQ_INT(fake_stat("ctx_refs"), 0);
}

/* ---- trouble, on the fake driver only: faults, index flags, failures that cannot be returned ---- */

/* A control function of the fake driver (fakecu_fault, fakecu_raise, fakecu_fail). */
static void *fake_fn(const char *name) {
    if (!fake_handle) fake_handle = dlopen(getenv("ST_CUDA_LIB"), RTLD_NOW | RTLD_NOLOAD);
    return fake_handle ? dlsym(fake_handle, name) : NULL;
}
static void fake_fault(const char *kernel) {
    void *p = fake_fn("fakecu_fault");
    void (*f)(const char *);
    if (!p) return;
    memcpy(&f, &p, sizeof f);
    f(kernel);
}
static void fake_raise(const char *kernel) {
    void *p = fake_fn("fakecu_raise");
    void (*f)(const char *);
    if (!p) return;
    memcpy(&f, &p, sizeof f);
    f(kernel);
}
static void fake_fail(const char *api, int code) {
    void *p = fake_fn("fakecu_fail");
    void (*f)(const char *, int);
    if (!p) return;
    memcpy(&f, &p, sizeof f);
    f(api, code);
}

enum { FILL_N = 1000 };
static st_devptr fill_buf;
static void *fill_fn;

/* The fill kernel and a buffer for it. */
static int fill_setup(void) {
    CHECK(cuda_module_function(0, fill_ptx, sizeof fill_ptx, "fill", &fill_fn) == ST_OK && fill_fn);
    CHECK(cuda_mem_alloc(0, FILL_N * sizeof(unsigned), &fill_buf) == ST_OK);
    return fill_fn && fill_buf;
}
static st_status fill(const char *label) {
    unsigned n = FILL_N, grid[3] = {(FILL_N + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
    void *params[] = {&fill_buf, &n};
    return cuda_launch(0, fill_fn, label, grid, block, 0, params);
}

/* An asynchronous fault surfaces at the next wait, naming the kernels launched since the last
 * successful synchronization (and only those). */
static void fault_body(void) {
    if (!fill_setup()) return;
    CHECK(fill("before_sync") == ST_OK);
    CHECK(cuda_synchronize(0) == ST_OK);
    CHECK(fill("first") == ST_OK);
    fake_fault("fill");
    CHECK(fill("second") == ST_OK);          /* asynchronous: the launch itself succeeds */
    CHECK(fill("third") == ST_OK);
    CHECK_EQ_INT(cuda_synchronize(0), ST_ERR_DEVICE);
    const char *m = st_last_error();
    CHECK_MSG(strstr(m, "CUDA error in cuStreamSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS") &&
              strstr(m, "kernels in flight on cuda:0 since its last successful synchronization, oldest first: "
                        "first (fill), second (fill), third (fill)") && !strstr(m, "before_sync"),
              "message: %s", m);
    /* a copy to the host is a wait too */
    unsigned out[4];
    CHECK_EQ_INT(cuda_copy_dtoh(0, out, fill_buf, sizeof out), ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "CUDA error in cuEventSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS") &&
              strstr(st_last_error(), "third (fill)"), "message: %s", st_last_error());
    fake_fault(NULL);   /* the fake's context recovers (a real one would not) */
    CHECK(cuda_synchronize(0) == ST_OK);
    /* more launches than the ring holds: the last 8, and how many came before */
    for (int i = 0; i < 11; i++) {
        char l[16];
        snprintf(l, sizeof l, "k%d", i);
        if (i == 10) fake_fault("fill");
        CHECK(fill(l) == ST_OK);
    }
    CHECK_EQ_INT(cuda_copy_dtoh(0, out, fill_buf, sizeof out), ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "oldest first: (3 earlier) k3 (fill), k4 (fill)") &&
              strstr(st_last_error(), "k10 (fill)") && !strstr(st_last_error(), "k2 "), "message: %s", st_last_error());
    fake_fault(NULL);
    CHECK(cuda_synchronize(0) == ST_OK);
    cuda_mem_free(0, fill_buf);
    cuda_shutdown();
}

/* ST_CUDA_SYNC=1: the launch of the faulting kernel reports it, by name. */
static void sync_body(void) {
    setenv("ST_CUDA_SYNC", "1", 1);   /* read when the driver is probed: before any CUDA call */
    if (!fill_setup()) return;
    int w0 = fake_stat("waits");
    CHECK(fill("good") == ST_OK);
    CHECK(fake_stat("waits") > w0 && fake_stat("pending") == 0);   /* it waited */
    fake_fault("fill");
    CHECK_EQ_INT(fill("k7_bad_gather"), ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "CUDA error in kernel k7_bad_gather (fill) on cuda:0: CUDA_ERROR_ILLEGAL_ADDRESS "
                                      "(an illegal memory access was encountered) (ST_CUDA_SYNC=1"),
              "message: %s", st_last_error());
    fake_fault(NULL);
    cuda_mem_free(0, fill_buf);
    cuda_shutdown();
}

/* Kernels that report index errors (the device interface's check): their flag is cleared by an
 * asynchronous memset, nothing waits at the launch, and the next synchronization point reports
 * the launch's message for the first flag set. */
static st_status check_launch(const char *what) {
    int64_t n = FILL_N;
    void *bufs[1] = {(void *)(uintptr_t)fill_buf};
    dev_call c = {.fn = fill_fn, .bufs = bufs, .ints = &n, .nbufs = 1, .nints = 1, .grid = {4, 1, 1},
                  .block = {256, 1, 1}, .check = 1, .what = what, .name = "k_check"};
    int err = 7;
    st_status s = dev_cuda_ops.launch(0, &c, &err);
    CHECK_EQ_INT(err, 0);   /* never known at the launch */
    return s;
}

static void flags_body(void) {
    if (!fill_setup()) return;
    unsigned out[4];
    int w0 = fake_stat("waits"), m0 = fake_stat("memsets");
    CHECK(check_launch("gather: index out of range (kernel k1_gather)") == ST_OK);
    fake_raise("fill");
    CHECK(check_launch("scatter_add: index out of range (kernel k2_scatter)") == ST_OK);
    CHECK(check_launch("gather: index out of range (kernel k3_gather)") == ST_OK);
    CHECK_EQ_INT(fake_stat("waits"), w0);          /* no launch waited */
    CHECK_EQ_INT(fake_stat("memsets") - m0, 3);    /* each flag cleared on the stream */
    CHECK(fake_stat("pending") > 0);
    CHECK_EQ_INT(cuda_copy_dtoh(0, out, fill_buf, sizeof out), ST_ERR_ARG);
    CHECK_MSG(!strcmp(st_last_error(), "scatter_add: index out of range (kernel k2_scatter)"), "message: %s",
              st_last_error());
    CHECK(out[3] == 3);                            /* the copy itself was done */
    CHECK(cuda_synchronize(0) == ST_OK);           /* reported once */
    CHECK(cuda_copy_dtoh(0, out, fill_buf, sizeof out) == ST_OK);
    /* cuda_synchronize is a synchronization point too */
    fake_raise("fill");
    CHECK(check_launch("gather: index out of range (kernel k4_gather)") == ST_OK);
    CHECK_EQ_INT(cuda_synchronize(0), ST_ERR_ARG);
    CHECK_MSG(strstr(st_last_error(), "k4_gather"), "message: %s", st_last_error());
    /* more check launches than slots: the launch that finds them all taken waits, reads them, and
     * reports one flagged before it */
    for (int i = 0; i < 64; i++) {
        if (i == 5) fake_raise("fill");
        CHECK(check_launch(i == 5 ? "gather: index out of range (kernel k5_gather)" : "no error here") == ST_OK);
    }
    CHECK_EQ_INT(check_launch("after the slots"), ST_ERR_ARG);
    CHECK_MSG(strstr(st_last_error(), "k5_gather"), "message: %s", st_last_error());
    CHECK(cuda_synchronize(0) == ST_OK);
    /* a flag still pending at shutdown is kept for the next call */
    fake_raise("fill");
    CHECK(check_launch("gather: index out of range (kernel k6_gather)") == ST_OK);
    cuda_shutdown();
    CHECK_EQ_INT(cuda_synchronize(0), ST_ERR_ARG);
    CHECK_MSG(strstr(st_last_error(), "an earlier CUDA call failed where it could not report it: gather: index out of "
                                      "range (kernel k6_gather)"), "message: %s", st_last_error());
    CHECK(cuda_synchronize(0) == ST_OK);
    cuda_mem_free(0, fill_buf);
    cuda_shutdown();
    CHECK_EQ_INT(fake_stat("violations"), 0);
}

/* cuda_synchronize_all (st_synchronize; the stitch executable after a script): it neither probes
 * the driver nor activates a device; it reports a flag raised by work nothing waited for, and one
 * that a shutdown kept after releasing the device (no device is left to wait for then). */
static void sync_all_body(void) {
    CHECK(cuda_synchronize_all() == ST_OK);         /* never probed: nothing to wait for */
    CHECK(cuda_probe() > 0);
    CHECK(cuda_synchronize_all() == ST_OK);
    CHECK_EQ_INT(fake_stat("ctx_refs"), 0);         /* probed, not activated */
    if (!fill_setup()) return;
    fake_raise("fill");
    CHECK(check_launch("gather: index out of range (kernel k7_gather)") == ST_OK);
    int waits = fake_stat("waits");
    CHECK_EQ_INT(cuda_synchronize_all(), ST_ERR_ARG);
    CHECK_MSG(!strcmp(st_last_error(), "gather: index out of range (kernel k7_gather)"), "message: %s", st_last_error());
    CHECK(fake_stat("waits") > waits);              /* it waited for the stream */
    CHECK(cuda_synchronize_all() == ST_OK);         /* reported once */
    /* pending at a shutdown that releases the device: kept, and reported without re-activating it */
    fake_raise("fill");
    CHECK(check_launch("gather: index out of range (kernel k8_gather)") == ST_OK);
    cuda_mem_free(0, fill_buf);
    cuda_shutdown();
    CHECK_EQ_INT(fake_stat("ctx_refs"), 0);
    CHECK_EQ_INT(cuda_synchronize_all(), ST_ERR_ARG);
    CHECK_MSG(strstr(st_last_error(), "gather: index out of range (kernel k8_gather)"), "message: %s", st_last_error());
    CHECK_EQ_INT(fake_stat("ctx_refs"), 0);
    CHECK(cuda_synchronize_all() == ST_OK);
    CHECK_EQ_INT(fake_stat("violations"), 0);
}

/* A driver failure in a free or an unload cannot be returned there: the next call that can
 * return an error reports it (once), naming the call. */
static void deferred_body(void) {
    st_devptr p = 0, q = 0;
    CHECK(cuda_mem_alloc(0, 4096, &p) == ST_OK);
    cuda_mem_free(0, p);                        /* cached by the allocator */
    fake_fail("cuMemFree_v2", 1);
    cuda_empty_cache();                         /* the driver's free fails here */
    CHECK_EQ_INT(cuda_mem_alloc(0, 4096, &q), ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "an earlier CUDA call failed where it could not report it: CUDA error in "
                                      "cuMemFree (freeing a block on cuda:0): CUDA_ERROR_INVALID_VALUE"),
              "message: %s", st_last_error());
    CHECK(cuda_mem_alloc(0, 4096, &q) == ST_OK && q);   /* reported once; usable again */
    cuda_mem_free(0, q);
    void *fn = NULL;
    CHECK(cuda_module_function(0, fill_ptx, sizeof fill_ptx, "fill", &fn) == ST_OK);
    fake_fail("cuModuleUnload", 999);
    cuda_shutdown();
    CHECK_EQ_INT(cuda_synchronize(0), ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "CUDA error in cuModuleUnload (unloading a module on cuda:0): CUDA_ERROR_UNKNOWN"),
              "message: %s", st_last_error());
    CHECK(cuda_synchronize(0) == ST_OK);
    cuda_shutdown();
}

static void suite_body(void) {
    suite_devices();
    suite_copies();
    suite_stats();
    suite_oom();
    suite_launch();
    suite_shutdown();
    if (suite_fake) {
        CHECK_EQ_INT(fake_stat("violations"), 0);
        CHECK(fake_stat("set_current") <= 4); /* once per activation (plus frees), not per call */
    }
}

/* The fake driver: this file compiled into a temp dir. */
static char fake_dir[64], fake_lib[128];
static int build_fake(void) {
    snprintf(fake_dir, sizeof fake_dir, "/tmp/st_fakecuda_XXXXXX");
    if (!mkdtemp(fake_dir)) return 0;
    snprintf(fake_lib, sizeof fake_lib, "%s/libcuda.so.1", fake_dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -O1 -DST_FAKE_LIBCUDA -o %s %s 2>&1", fake_lib, __FILE__);
    return system(cmd) == 0;
}

static void fake_init_error_body(void) {
    setenv("FAKE_CUDA_INIT", "100", 1);
    check_unusable("cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)");
}
static void fake_no_device_body(void) {
    setenv("FAKE_CUDA_DEVICES", "0", 1);
    check_unusable("found no GPU");
}
static void fake_suite_body(void) {
    suite_fake = 1;
    suite_body();
}
static void fake_fault_body(void) {
    suite_fake = 1;
    fault_body();
}
static void fake_sync_body(void) {
    suite_fake = 1;
    sync_body();
}
static void fake_flags_body(void) {
    suite_fake = 1;
    flags_body();
}
static void fake_deferred_body(void) {
    suite_fake = 1;
    deferred_body();
}
static void fake_sync_all_body(void) {
    suite_fake = 1;
    sync_all_body();
}
TEST(fake_init_error) { in_child(fake_lib, fake_init_error_body); }
TEST(fault_names_kernels_in_flight) { in_child(fake_lib, fake_fault_body); }
TEST(cuda_sync_names_the_faulting_kernel) { in_child(fake_lib, fake_sync_body); }
TEST(index_flags_read_at_the_next_sync) { in_child(fake_lib, fake_flags_body); }
TEST(unreturnable_errors_reported_later) { in_child(fake_lib, fake_deferred_body); }
TEST(synchronize_all_activates_nothing) { in_child(fake_lib, fake_sync_all_body); }
TEST(fake_no_device) { in_child(fake_lib, fake_no_device_body); }
TEST(fake_driver) { in_child(fake_lib, fake_suite_body); }
TEST(real_driver) { in_child(NULL, suite_body); }

/* Whether the default search finds a usable driver (probed in a child: the probe is once). */
static int have_real_driver(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        unsetenv("ST_CUDA_LIB");
        _exit(cuda_probe() > 0 ? 0 : 1);
    }
    int status = 1;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(void) {
    RUN(missing_library);
    RUN(not_a_driver);
    if (access(STUB, R_OK) == 0) RUN(stub_library);
    else printf("SKIP stub_library: no %s\n", STUB);
    if (have_real_driver()) RUN(real_driver);
    else RUN(default_search_no_driver);
    if (build_fake()) {
        RUN(fake_init_error);
        RUN(fake_no_device);
        RUN(fake_driver);
        RUN(fault_names_kernels_in_flight);
        RUN(cuda_sync_names_the_faulting_kernel);
        RUN(index_flags_read_at_the_next_sync);
        RUN(unreturnable_errors_reported_later);
        RUN(synchronize_all_activates_nothing);
    } else {
        printf("FAIL fake_driver: could not build the fake driver from %s (run from the repository root)\n", __FILE__);
        test_failed_total++;
    }
    if (fake_lib[0]) unlink(fake_lib);
    if (fake_dir[0]) rmdir(fake_dir);
    TEST_MAIN_END();
}
#endif
