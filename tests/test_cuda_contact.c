/*
 * test_cuda_contact.c — first contact with a machine (issue 12): what the runtime does when the
 * CUDA driver, NVRTC and the GPU do not all fit, and when a kernel goes wrong on the GPU.
 *
 * The driver is probed once per process, so every case runs this program again as a child with
 * its own environment (no driver, or the fake driver of tests/test_cuda_driver.c: fake_cuda.h),
 * its stderr captured:
 *  - the default device: with no driver, with the fake driver but no NVRTC, or with an NVRTC newer
 *    (by major version) than the fake driver, the default is the cpu and nothing is printed;
 *    ST_DEBUG=1 or ST_DEVICE=cuda say why; asking for "cuda" by name is an error saying why (both
 *    versions named);
 *  - an index out of range on the fake GPU: the flush succeeds without waiting for the device, and
 *    the next read fails with the error the cpu gives at once (same words, same kernel); it is
 *    reported once; with ST_CUDA_SYNC=1 the flush itself fails;
 *  - a fault of a fused kernel: the read that finds it names the kernel (the fuser's name and its
 *    function) among the kernels in flight;
 *  - a GPU NVRTC has no cubin target for (FAKE_CUDA_CC=150): its kernels are compiled to PTX for
 *    the newest virtual architecture NVRTC supports, loaded (the driver would compile it) and
 *    launched;
 *  - the cubin cache's shutdown has the device unload every module before it frees the cubins,
 *    and the next launch resolves its function again;
 *  - a fake libnvrtc (this file built with -DST_FAKE_LIBNVRTC: the real NVRTC behind it, its version
 *    and its list of supported architectures set by FAKE_NVRTC_VERSION and FAKE_NVRTC_ARCHS, the
 *    list functions absent with -DFAKE_NVRTC_NO_LIST): without the list every GPU gets its own sm_XY;
 *    an NVRTC newer than the driver by a minor version is accepted for cubins (minor version
 *    compatibility) and refused, naming both versions, for a GPU that needs PTX.
 * Needs libnvrtc for the cases that compile (SKIP otherwise).
 */
#ifdef ST_FAKE_LIBNVRTC
/* ------------------------------------------------------------------------------------------- */
/* The fake libnvrtc: built by the test with `cc -shared -fPIC -DST_FAKE_LIBNVRTC`; every call
 * goes to the real library ($FAKE_NVRTC_REAL) but the version and the supported architectures. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *real(const char *name) {
    static void *h;
    if (!h) h = dlopen(getenv("FAKE_NVRTC_REAL"), RTLD_NOW | RTLD_LOCAL);
    return h ? dlsym(h, name) : NULL;
}
/* Defines fn with parameters params, forwarding args to the real library's fn. */
#define FORWARD(ret, fn, params, args)                                                          \
    ret fn params;                                                                              \
    ret fn params {                                                                             \
        ret(*f) params;                                                                         \
        void *sym_ = real(#fn);                                                                 \
        memcpy(&f, &sym_, sizeof f);                                                            \
        return f args;                                                                          \
    }
typedef struct prog *nvrtcProgram;
FORWARD(int, nvrtcCreateProgram, (nvrtcProgram *p, const char *src, const char *name, int n, const char *const *h,
                                  const char *const *i), (p, src, name, n, h, i))
FORWARD(int, nvrtcCompileProgram, (nvrtcProgram p, int n, const char *const *o), (p, n, o))
FORWARD(int, nvrtcGetProgramLogSize, (nvrtcProgram p, size_t *n), (p, n))
FORWARD(int, nvrtcGetProgramLog, (nvrtcProgram p, char *s), (p, s))
FORWARD(int, nvrtcGetCUBINSize, (nvrtcProgram p, size_t *n), (p, n))
FORWARD(int, nvrtcGetCUBIN, (nvrtcProgram p, char *s), (p, s))
FORWARD(int, nvrtcGetPTXSize, (nvrtcProgram p, size_t *n), (p, n))
FORWARD(int, nvrtcGetPTX, (nvrtcProgram p, char *s), (p, s))
FORWARD(int, nvrtcDestroyProgram, (nvrtcProgram *p), (p))
FORWARD(const char *, nvrtcGetErrorString, (int r), (r))

/* FAKE_NVRTC_VERSION="13.5", else the real one. */
int nvrtcVersion(int *major, int *minor);
int nvrtcVersion(int *major, int *minor) {
    const char *v = getenv("FAKE_NVRTC_VERSION");
    if (v && sscanf(v, "%d.%d", major, minor) == 2) return 0;
    int (*f)(int *, int *);
    void *p = real("nvrtcVersion");
    memcpy(&f, &p, sizeof f);
    return f(major, minor);
}
#ifndef FAKE_NVRTC_NO_LIST
/* FAKE_NVRTC_ARCHS="75,80,90" (built with -DFAKE_NVRTC_NO_LIST: no such functions, as before
 * NVRTC 11.2). */
static int archs(int *out) {
    const char *v = getenv("FAKE_NVRTC_ARCHS");
    int n = 0;
    for (const char *p = v; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        if (out) out[n] = atoi(p);
        n++;
    }
    return n;
}
int nvrtcGetNumSupportedArchs(int *n);
int nvrtcGetNumSupportedArchs(int *n) {
    *n = archs(NULL);
    return *n ? 0 : 7;   /* NVRTC_ERROR_BUILTIN_OPERATION_FAILURE */
}
int nvrtcGetSupportedArchs(int *a);
int nvrtcGetSupportedArchs(int *a) { return archs(a) ? 0 : 7; }
#endif

#else
/* ------------------------------------------------------------------------------------------- */
#include "test.h"
#include "fake_cuda.h"
#include "runtime/tensor.h"
#include "jit/nvrtc.h"
#include "device/cuda.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>

static char fake_dir[24] = "/tmp/st_fakecuda_XXXXXX", fake_lib[96], cache_dir[64] = "/tmp/st_contact_XXXXXX";
static int have_fake, have_nvrtc, nvrtc_major, nvrtc_minor;
static char skip_reason[1024];

#define SKIP_IF_NO_NVRTC()                                                  \
    do {                                                                    \
        if (!have_nvrtc) {                                                  \
            printf("SKIP %s: %s\n", __func__ + 5, skip_reason);             \
            return;                                                         \
        }                                                                   \
    } while (0)

/* ---- in the child: one body per part (ST_TEST_PART) ---- */

/* The default device is the cpu; asking for "cuda" by name fails with CONTACT_WHY in the message. */
static void default_cpu_body(void) {
    CHECK_MSG(!strcmp(st_default_device(), "cpu"), "default device %s", st_default_device());
    const char *why = getenv("CONTACT_WHY");
    CHECK_EQ_INT(st_set_default_device("cuda"), ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "cuda:0 is not available: ") && (!why || strstr(st_last_error(), why)),
              "message: %s", st_last_error());
    CHECK(!strcmp(st_default_device(), "cpu"));
    st_tensor *x = st_ones(ST_F32, 1, (int64_t[]){3});
    CHECK(st_to(x, "cuda") == NULL && st_last_status() == ST_ERR_DEVICE);
    st_release(x);
}

/* x (8, 4) and an index with one entry out of range, on the default device. The index is computed
 * (i + 0): a realized one would be checked at the call, on the host; this one reaches the kernel. */
static void gather_inputs(st_tensor **x, st_tensor **idx) {
    float xs[32];
    for (int i = 0; i < 32; i++) xs[i] = (float)i;
    int64_t is[3] = {1, 9, 2};
    *x = st_from_data(ST_F32, 2, (int64_t[]){8, 4}, xs);
    st_tensor *i = st_from_data(ST_I64, 1, (int64_t[]){3}, is), *z = st_zeros(ST_I64, 1, (int64_t[]){3});
    *idx = st_add(i, z);
    st_release(z);
    st_release(i);
    CHECK(*x && *idx && st_realize(1, x) == ST_OK);
}

/* The cpu's error for the same gather (reported at the flush). */
static void cpu_gather_error(char *msg, size_t cap) {
    CHECK(st_set_default_device("cpu") == ST_OK);
    st_tensor *x, *idx;
    gather_inputs(&x, &idx);
    st_tensor *g = st_index_select(x, 0, idx);
    CHECK_MSG(g && st_realize(1, &g) == ST_ERR_ARG, "%.300s", st_last_error());
    snprintf(msg, cap, "%s", st_last_error());
    CHECK_MSG(strstr(msg, "gather: index out of range (kernel "), "cpu message: %.300s", msg);
    st_release(g);
    st_release(idx);
    st_release(x);
    CHECK(st_set_default_device("cuda:0") == ST_OK);
}

static void index_body(void) {
    st_set_jit_min(0);   /* the cpu runs the same compiled kernel (the interpreter words it differently) */
    char want[512];
    cpu_gather_error(want, sizeof want);
    st_tensor *x, *idx;
    gather_inputs(&x, &idx);
    st_tensor *g = st_index_select(x, 0, idx);
    CHECK_MSG(g != NULL, "index_select on cuda:0: %.300s", st_last_error());
    if (!g) return;
    fake_cuda_trouble("fakecu_raise", "*");   /* the next kernel after a flag's memset sets it */
    int waits = fake_cuda_stat("waits"), memsets = fake_cuda_stat("memsets");
    int sync = getenv("ST_CUDA_SYNC") != NULL;
    float out[12];
    if (sync) { /* the launch waits and reports */
        CHECK_EQ_INT(st_realize(1, &g), ST_ERR_ARG);
        CHECK_MSG(!strcmp(st_last_error(), want), "cuda: \"%.150s\", cpu: \"%.150s\"", st_last_error(), want);
    } else {
        CHECK(st_realize(1, &g) == ST_OK);            /* the launch did not wait ... */
        CHECK_EQ_INT(fake_cuda_stat("waits"), waits);
        CHECK_EQ_INT(fake_cuda_stat("memsets") - memsets, 1);   /* ... its flag was cleared on the stream */
        CHECK_EQ_INT(st_to_host(g, ST_F32, out, sizeof out), ST_ERR_ARG);   /* ... the read reports it */
        CHECK_MSG(!strcmp(st_last_error(), want), "cuda: \"%.150s\", cpu: \"%.150s\"", st_last_error(), want);
    }
    CHECK(st_to_host(g, ST_F32, out, sizeof out) == ST_OK);   /* once */
    /* in range: no error anywhere */
    int64_t ok[2] = {7, 0};
    st_tensor *idx2 = st_from_data(ST_I64, 1, (int64_t[]){2}, ok), *g2 = st_index_select(x, 0, idx2);
    CHECK(g2 && st_realize(1, &g2) == ST_OK && st_to_host(g2, ST_F32, out, 8 * sizeof(float)) == ST_OK);
    CHECK_EQ_INT(fake_cuda_stat("violations"), 0);
    st_release(g2);
    st_release(idx2);
    st_release(g);
    st_release(idx);
    st_release(x);
    st_shutdown();
}
/* An index error that no read follows: st_synchronize reports it (once, with the cpu's words);
 * one still pending at st_shutdown is printed on stderr by it (the parent checks), not dropped. */
static void pending_body(void) {
    st_set_jit_min(0);
    char want[512];
    cpu_gather_error(want, sizeof want);
    st_tensor *x, *idx;
    gather_inputs(&x, &idx);
    CHECK(st_synchronize() == ST_OK);   /* nothing flagged */
    for (int round = 0; round < 2; round++) {
        st_tensor *g = st_index_select(x, 0, idx);
        CHECK_MSG(g != NULL, "index_select on cuda:0: %.300s", st_last_error());
        if (!g) break;
        fake_cuda_trouble("fakecu_raise", "*");
        CHECK(st_realize(1, &g) == ST_OK);
        st_release(g);   /* nothing will read it */
        if (round == 0) {
            CHECK_EQ_INT(st_synchronize(), ST_ERR_ARG);
            CHECK_MSG(!strcmp(st_last_error(), want), "cuda: \"%.150s\", cpu: \"%.150s\"", st_last_error(), want);
            CHECK(st_synchronize() == ST_OK);   /* once */
        }
    }
    st_release(idx);
    st_release(x);
    fflush(stdout);
    st_shutdown();   /* round 1's error: on stderr */
    CHECK(st_synchronize() == ST_OK);   /* said there, not kept */
}

static void fault_body(void) {
    st_tensor *x = st_randn(ST_F32, 2, (int64_t[]){16, 64});
    st_tensor *y = st_softmax(x, 1);
    CHECK(st_realize(1, &x) == ST_OK);
    fake_cuda_trouble("fakecu_fault", "*");
    CHECK(st_realize(1, &y) == ST_OK);   /* the fault is not known yet */
    const char *k = fake_cuda_last_kernel();
    char fn[64];
    snprintf(fn, sizeof fn, "(%s)", k);
    float out[16 * 64];
    CHECK_EQ_INT(st_to_host(y, ST_F32, out, sizeof out), ST_ERR_DEVICE);
    const char *m = st_last_error();
    CHECK_MSG(strstr(m, "CUDA_ERROR_ILLEGAL_ADDRESS") && strstr(m, "kernels in flight on cuda:0") &&
              strstr(m, "_exp_sum_div (st_k_") && k[0] && strstr(m, fn), "message: %.300s (last kernel %s)", m, k);
    fake_cuda_trouble("fakecu_fault", NULL);
    st_release(y);
    st_release(x);
}

static void ptx_body(void) {
    int loads = fake_cuda_stat("ptx_loads"), launches = fake_cuda_stat("launches");
    st_tensor *x = st_randn(ST_F32, 2, (int64_t[]){16, 64});
    st_tensor *y = st_softmax(x, 1);
    CHECK_MSG(st_realize(1, &y) == ST_OK, "%s", st_last_error());
    CHECK(fake_cuda_stat("ptx_loads") > loads);
    CHECK(fake_cuda_stat("launches") > launches);
    CHECK(!strncmp(fake_cuda_last_kernel(), "st_k_", 5));
    CHECK_EQ_INT(fake_cuda_stat("violations"), 0);
    st_release(y);
    st_release(x);
    st_shutdown();
}

static void unload_body(void) {
    st_tensor *x = st_randn(ST_F32, 2, (int64_t[]){16, 64});
    st_tensor *y = st_softmax(x, 1), *y2 = NULL;
    CHECK(st_realize(1, &y) == ST_OK);
    CHECK(fake_cuda_stat("loads") > fake_cuda_stat("unloads"));
    unsigned gen = cuda_module_generation();
    jit_cubin_shutdown();   /* the cubins are freed: their modules must be gone first */
    CHECK_MSG(fake_cuda_stat("unloads") == fake_cuda_stat("loads"), "%d modules loaded, %d unloaded",
              fake_cuda_stat("loads"), fake_cuda_stat("unloads"));
    CHECK(cuda_module_generation() != gen);
    int launches = fake_cuda_stat("launches");
    y2 = st_softmax(x, 1);   /* the same plan: its function is resolved again (from the disk cache) */
    CHECK(st_realize(1, &y2) == ST_OK);
    CHECK(fake_cuda_stat("launches") > launches);
    CHECK_EQ_INT(fake_cuda_stat("violations"), 0);
    st_release(y2);
    st_release(y);
    st_release(x);
    st_shutdown();
    CHECK_EQ_INT(fake_cuda_stat("unloads"), fake_cuda_stat("loads"));
}

/* NVRTC without the list of supported architectures: every GPU gets its own cubin target. */
static void nolist_body(void) {
    const int *archs;
    CHECK_EQ_INT(nvrtc_supported_archs(&archs), 0);
    char a[16];
    CHECK(nvrtc_arch(150, a, sizeof a) == ST_OK && !strcmp(a, "sm_150"));
    CHECK(nvrtc_arch(90, a, sizeof a) == ST_OK && !strcmp(a, "sm_90a"));
    CHECK_MSG(!strcmp(st_default_device(), "cuda:0"), "default device %s", st_default_device());
    int loads = fake_cuda_stat("loads");
    st_tensor *x = st_randn(ST_F32, 2, (int64_t[]){16, 64}), *y = st_softmax(x, 1);
    CHECK_MSG(st_realize(1, &y) == ST_OK, "%.300s", st_last_error());
    CHECK(fake_cuda_stat("loads") > loads && fake_cuda_stat("ptx_loads") == 0);
    st_release(y);
    st_release(x);
    st_shutdown();
}

static void child_body(void) {
    const char *part = getenv("ST_TEST_PART");
    if (!part) return;
    if (!strcmp(part, "default_cpu")) default_cpu_body();
    else if (!strcmp(part, "default_gpu")) CHECK_MSG(!strcmp(st_default_device(), "cuda:0"), "%s", st_default_device());
    else if (!strcmp(part, "index")) index_body();
    else if (!strcmp(part, "pending")) pending_body();
    else if (!strcmp(part, "fault")) fault_body();
    else if (!strcmp(part, "ptx")) ptx_body();
    else if (!strcmp(part, "unload")) unload_body();
    else if (!strcmp(part, "nolist")) nolist_body();
    else CHECK_MSG(0, "no part %s", part);
}

/* ---- in the parent ---- */

typedef struct child_out {
    char err[8192];    /* its stderr */
} child_out;

/* Runs part in a child with env changes ("NAME=value", or "NAME" to unset; NULL-terminated) on
 * top of: ST_DEVICE, ST_DEBUG, ST_CUDA_SYNC, ST_NVRTC_CHECK unset, ST_CUDA_LIB = the fake driver.
 * Fails the current test with the child's report; o gets its stderr. */
static void run_part(const char *part, const char *const *env, child_out *o) {
    char errpath[] = "/tmp/st_contact_err_XXXXXX";
    int efd = mkstemp(errpath), fd[2];
    o->err[0] = 0;
    if (efd < 0 || pipe(fd) != 0) {
        TEST_FAILF("mkstemp or pipe failed");
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 1);
        dup2(efd, 2);
        const char *unset[] = {"ST_DEVICE", "ST_DEBUG", "ST_CUDA_SYNC", "ST_NVRTC_CHECK", "ST_NVRTC_PATH"};
        for (size_t i = 0; i < sizeof unset / sizeof unset[0]; i++) unsetenv(unset[i]);
        setenv("ST_CUDA_LIB", fake_lib, 1);
        setenv("ST_TEST_PART", part, 1);
        for (int i = 0; env && env[i]; i++) {
            const char *eq = strchr(env[i], '=');
            if (!eq) {
                unsetenv(env[i]);
                continue;
            }
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(eq - env[i]), env[i]);
            setenv(name, eq + 1, 1);
        }
        execl("/proc/self/exe", "contact-child", FAKE_CUDA_ARG, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char msg[600] = "";
    size_t got = 0;
    ssize_t n;
    while (got < sizeof msg - 1 && (n = read(fd[0], msg + got, sizeof msg - 1 - got)) > 0) got += (size_t)n;
    msg[got] = 0;
    close(fd[0]);
    int status = 1;
    waitpid(pid, &status, 0);
    ssize_t e = pread(efd, o->err, sizeof o->err - 1, 0);
    o->err[e > 0 ? e : 0] = 0;
    close(efd);
    unlink(errpath);
    if (got) TEST_FAILF("%s child: %.400s", part, msg);
    else if (WIFSIGNALED(status)) TEST_FAILF("%s child died of signal %d; stderr: %.300s", part, WTERMSIG(status), o->err);
    else CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s child status %d; stderr: %.300s", part, status,
                   o->err);
}

#define NO_DRIVER "ST_CUDA_LIB=/nonexistent/libcuda.so.1"

/* No driver: the cpu, without a word. */
TEST(no_driver_is_silent) {
    child_out o;
    const char *env[] = {NO_DRIVER, "CONTACT_WHY=no CUDA driver found", NULL};
    run_part("default_cpu", env, &o);
    CHECK_MSG(o.err[0] == 0, "stderr: %.300s", o.err);
}

/* ... unless ST_DEBUG is set, or ST_DEVICE asked for a GPU. */
TEST(no_driver_said_when_asked) {
    child_out o;
    const char *debug[] = {NO_DRIVER, "ST_DEBUG=1", NULL};
    run_part("default_cpu", debug, &o);
    CHECK_MSG(strstr(o.err, "stitch: no usable GPU (no CUDA driver found ("), "stderr: %.300s", o.err);
    const char *asked[] = {NO_DRIVER, "ST_DEVICE=cuda", NULL};
    run_part("default_cpu", asked, &o);
    CHECK_MSG(strstr(o.err, "stitch: ST_DEVICE=cuda: cuda:0 is not available: no CUDA driver found ("), "stderr: %.300s",
              o.err);
}

/* A driver and a GPU without NVRTC: nothing can be compiled for it, so the cpu, silently. */
TEST(driver_without_nvrtc_is_the_cpu) {
    child_out o;
    const char *env[] = {"ST_NVRTC_PATH=/nonexistent/libnvrtc.so", "CONTACT_WHY=ST_NVRTC_PATH=/nonexistent", NULL};
    run_part("default_cpu", env, &o);
    CHECK_MSG(o.err[0] == 0, "stderr: %.300s", o.err);
}

/* NVRTC of a newer CUDA major version than the driver: its cubins would not load. */
TEST(nvrtc_newer_than_driver) {
    SKIP_IF_NO_NVRTC();
    char ver[48], why[128];
    snprintf(ver, sizeof ver, "FAKE_CUDA_VERSION=%d", (nvrtc_major - 1) * 1000 + 20);
    snprintf(why, sizeof why, "CONTACT_WHY=NVRTC %d.%d (", nvrtc_major, nvrtc_minor);
    child_out o;
    const char *env[] = {ver, why, NULL};
    run_part("default_cpu", env, &o);
    CHECK_MSG(o.err[0] == 0, "stderr: %.300s", o.err);
    char want[160];
    snprintf(want, sizeof want, "is newer than the CUDA driver (CUDA %d.2): the driver cannot load what it compiles",
             nvrtc_major - 1);
    const char *asked[] = {ver, "ST_DEVICE=cuda", NULL};
    run_part("default_cpu", asked, &o);
    CHECK_MSG(strstr(o.err, "stitch: ST_DEVICE=cuda: cuda:0 is not available: NVRTC ") && strstr(o.err, want),
              "stderr: %.300s", o.err);
    /* the same driver, new enough: the GPU is the default */
    const char *fine[] = {NULL};
    run_part("default_gpu", fine, &o);
}

TEST(index_error_surfaces_at_the_next_read) {
    SKIP_IF_NO_NVRTC();
    child_out o;
    const char *env[] = {NULL};
    run_part("index", env, &o);
    const char *sync[] = {"ST_CUDA_SYNC=1", NULL};
    run_part("index", sync, &o);
}

TEST(pending_index_error_reported_by_synchronize_or_shutdown) {
    SKIP_IF_NO_NVRTC();
    child_out o;
    const char *env[] = {NULL};
    run_part("pending", env, &o);
    CHECK_MSG(strstr(o.err, "stitch: found by st_shutdown, which cannot return it: ") &&
              strstr(o.err, "gather: index out of range (kernel "), "stderr: %.300s", o.err);
}

TEST(fault_names_the_fused_kernel) {
    SKIP_IF_NO_NVRTC();
    child_out o;
    const char *env[] = {NULL};
    run_part("fault", env, &o);
}

TEST(gpu_newer_than_nvrtc_gets_ptx) {
    SKIP_IF_NO_NVRTC();
    child_out o;
    const char *env[] = {"FAKE_CUDA_CC=150", NULL};
    run_part("ptx", env, &o);
}

TEST(modules_unloaded_before_cubins_freed) {
    SKIP_IF_NO_NVRTC();
    child_out o;
    const char *env[] = {NULL};
    run_part("unload", env, &o);
}

/* ---- against the fake libnvrtc ---- */

static char nvrtc_dir[32] = "/tmp/st_fakenvrtc_XXXXXX", nvrtc_list[96], nvrtc_nolist[96];
static int have_fake_nvrtc;

/* Builds both fake libnvrtc (with and without the list functions); the real one is behind them. */
static int build_fake_nvrtc(void) {
    if (!have_nvrtc || !mkdtemp(nvrtc_dir)) return 0;
    snprintf(nvrtc_list, sizeof nvrtc_list, "%s/list.so", nvrtc_dir);
    snprintf(nvrtc_nolist, sizeof nvrtc_nolist, "%s/nolist.so", nvrtc_dir);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -O1 -DST_FAKE_LIBNVRTC -o %s tests/test_cuda_contact.c -ldl && "
             "cc -shared -fPIC -O1 -DST_FAKE_LIBNVRTC -DFAKE_NVRTC_NO_LIST -o %s tests/test_cuda_contact.c -ldl",
             nvrtc_list, nvrtc_nolist);
    setenv("FAKE_NVRTC_REAL", nvrtc_library_path(), 1);
    return system(cmd) == 0;
}

#define SKIP_IF_NO_FAKE_NVRTC()                                                                 \
    do {                                                                                        \
        if (!have_fake_nvrtc) {                                                                 \
            printf("SKIP %s: %s\n", __func__ + 5, have_nvrtc ? "the fake libnvrtc did not build" : skip_reason); \
            return;                                                                             \
        }                                                                                       \
    } while (0)

TEST(nvrtc_without_arch_list) {
    SKIP_IF_NO_FAKE_NVRTC();
    char path[128];
    snprintf(path, sizeof path, "ST_NVRTC_PATH=%s", nvrtc_nolist);
    child_out o;
    const char *env[] = {path, NULL};
    run_part("nolist", env, &o);
}

/* NVRTC newer than the driver by a minor version: cubins are fine, PTX is not. */
TEST(nvrtc_minor_newer_than_driver) {
    SKIP_IF_NO_FAKE_NVRTC();
    char path[128], ver[48], drv[48], why[320];
    snprintf(path, sizeof path, "ST_NVRTC_PATH=%s", nvrtc_list);
    snprintf(ver, sizeof ver, "FAKE_NVRTC_VERSION=%d.%d", nvrtc_major, nvrtc_minor + 5);
    snprintf(drv, sizeof drv, "FAKE_CUDA_VERSION=%d", nvrtc_major * 1000 + (nvrtc_minor + 2) * 10);
    snprintf(why, sizeof why, "CONTACT_WHY=NVRTC %d.%d (%s) is newer than the CUDA driver (CUDA %d.%d), and this GPU "
             "needs PTX (compute_90", nvrtc_major, nvrtc_minor + 5, nvrtc_list, nvrtc_major, nvrtc_minor + 2);
    child_out o;
    const char *cubin[] = {path, ver, drv, "FAKE_NVRTC_ARCHS=75,80,90", "FAKE_CUDA_CC=90", NULL};
    run_part("default_gpu", cubin, &o);
    CHECK_MSG(o.err[0] == 0, "stderr: %.300s", o.err);
    const char *ptx[] = {path, ver, drv, "FAKE_NVRTC_ARCHS=75,80,90", "FAKE_CUDA_CC=150", why, NULL};
    run_part("default_cpu", ptx, &o);
    CHECK_MSG(o.err[0] == 0, "stderr: %.300s", o.err);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(int argc, char **argv) {
    fake_cuda_child(argc, argv, child_body);
    if (!mkdtemp(cache_dir)) return 1;
    setenv("ST_CACHE_DIR", cache_dir, 1);   /* shared by the children: one compiles, the next finds it */
    have_nvrtc = nvrtc_version(&nvrtc_major, &nvrtc_minor) == 0;
    if (!have_nvrtc) snprintf(skip_reason, sizeof skip_reason, "no libnvrtc: %s", st_last_error());
    have_fake = fake_cuda_build(fake_dir, fake_lib);
    if (have_fake) {
        RUN(no_driver_is_silent);
        RUN(no_driver_said_when_asked);
        RUN(driver_without_nvrtc_is_the_cpu);
        RUN(nvrtc_newer_than_driver);
        RUN(index_error_surfaces_at_the_next_read);
        RUN(pending_index_error_reported_by_synchronize_or_shutdown);
        RUN(fault_names_the_fused_kernel);
        RUN(gpu_newer_than_nvrtc_gets_ptx);
        RUN(modules_unloaded_before_cubins_freed);
        have_fake_nvrtc = build_fake_nvrtc();
        RUN(nvrtc_without_arch_list);
        RUN(nvrtc_minor_newer_than_driver);
    } else {
        printf("FAIL fake_driver: could not build the fake driver (run from the repository root)\n");
        test_failed_total++;
    }
    fake_cuda_remove(fake_dir, fake_lib);
    nftw(cache_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (nvrtc_list[0]) nftw(nvrtc_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    TEST_MAIN_END();
}
#endif
