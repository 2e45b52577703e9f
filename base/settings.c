/*
 * settings.c — every environment variable stitch reads, named in one table, and the runtime flags.
 *
 * Each setting is read here and nowhere else (base_env). The flags (ST_EAGER, ST_DEBUG, ST_POISON,
 * ST_JIT_MIN, ST_JIT_HOT, ST_TRACE_MAX) are read once, at the first call into the runtime that needs them;
 * the st_set_* functions override them. Other settings are read by the layer that uses them, when
 * it first needs them (ST_DEVICE when the default device is resolved, ST_CC and ST_COMPILE_TIMEOUT
 * when the compiler is set up, ...); README.md's table of settings lists them all with their meaning.
 */
#include "base/base.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

st_runtime st_rt;

static const char *const names[SET_COUNT] = {
    [SET_EAGER] = "ST_EAGER",                 /* 1: every op through the reference interpreter at once */
    [SET_DEBUG] = "ST_DEBUG",                 /* flags: 1 flushes, 2 kernels, 4 sources */
    [SET_POISON] = "ST_POISON",               /* 1: new buffers filled with NaN / sentinel bytes */
    [SET_JIT_MIN] = "ST_JIT_MIN",             /* work (elements) below which small regions interpret */
    [SET_JIT_HOT] = "ST_JIT_HOT",             /* runs of one plan after which it compiles (0: never) */
    [SET_JIT_ASYNC] = "ST_JIT_ASYNC",         /* 0: wait for the C compiler instead of interpreting meanwhile */
    [SET_TRACE_MAX] = "ST_TRACE_MAX",         /* pending nodes before an automatic flush */
    [SET_DEVICE] = "ST_DEVICE",               /* the default device: cpu, cuda, cuda:N */
    [SET_THREADS] = "ST_THREADS",             /* CPU kernel threads */
    [SET_SPIN_US] = "ST_SPIN_US",             /* us a kernel thread spins for work before it sleeps */
    [SET_FUSE] = "ST_FUSE",                   /* fusion kinds switched on */
    [SET_PLAN_CACHE] = "ST_PLAN_CACHE",       /* 0: no plan cache */
    [SET_GRAPH] = "ST_GRAPH",                 /* write every flush's plan as Graphviz dot */
    [SET_CC] = "ST_CC",                       /* the C compiler of the CPU JIT */
    [SET_COMPILE_TIMEOUT] = "ST_COMPILE_TIMEOUT", /* seconds a C compiler run may take (0: no limit) */
    [SET_CACHE_DIR] = "ST_CACHE_DIR",         /* the kernel cache directory */
    [SET_CACHE_MAX] = "ST_CACHE_MAX",         /* size bound of the kernel cache (512M; 0: none) */
    [SET_CUDA_LIB] = "ST_CUDA_LIB",           /* the CUDA driver library to load */
    [SET_NVRTC_PATH] = "ST_NVRTC_PATH",       /* libnvrtc, or a directory holding it */
    [SET_NVRTC_CHECK] = "ST_NVRTC_CHECK",     /* 1: compile every kernel with NVRTC too (CI) */
    [SET_NVRTC_CHECK_LOG] = "ST_NVRTC_CHECK_LOG", /* where the check mode appends its counts */
    [SET_NVRTC_CHECK_SEEN] = "ST_NVRTC_CHECK_SEEN", /* a directory: kernels checked by any process of a run */
    [SET_TF32] = "ST_TF32",                   /* 1: f32 matmuls on tensor cores in tf32 */
    [SET_CUDA_SIM] = "ST_CUDA_SIM",           /* the simulated GPU of the tests (base_cuda_sim_dir) */
    [SET_CUDA_SYNC] = "ST_CUDA_SYNC",         /* 1: wait for every CUDA kernel (a fault names it) */
    [SET_XDG_CACHE_HOME] = "XDG_CACHE_HOME",
    [SET_HOME] = "HOME",
    [SET_TMPDIR] = "TMPDIR",
    [SET_PATH] = "PATH",
    [SET_CUDA_PATH] = "CUDA_PATH",
    [SET_CUDA_HOME] = "CUDA_HOME",
};

const char *base_env_name(st_setting s) { return (unsigned)s < SET_COUNT ? names[s] : "?"; }

const char *base_env(st_setting s) {
    const char *v = (unsigned)s < SET_COUNT ? getenv(names[s]) : NULL;
    return v && *v ? v : NULL;
}

int64_t base_env_int(st_setting s, int64_t dflt, int64_t lo, int64_t hi, int *bad) {
    const char *v = base_env(s);
    if (bad) *bad = 0;
    if (!v) return dflt;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || *end || x < lo || x > hi) {
        if (bad) *bad = 1;
        return dflt;
    }
    return (int64_t)x;
}

const char *base_cuda_sim_dir(void) {
    static char dir[4096];
    const char *v = base_env(SET_CUDA_SIM);
    if (!v || !strcmp(v, "0")) return NULL;
    if (strcmp(v, "1")) return v;
    if (!dir[0]) {
        char exe[2048];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return "sim";
        exe[n] = 0;
        for (int up = 0; up < 2; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = 0;
            struct stat st;
            snprintf(dir, sizeof dir, "%s/sim/libcuda.so.1", exe);
            if (stat(dir, &st) == 0) {
                snprintf(dir, sizeof dir, "%s/sim", exe);
                return dir;
            }
        }
        snprintf(dir, sizeof dir, "sim");   /* not found: the error will name this path */
    }
    return dir;
}

void st_runtime_init(void) {
    if (st_rt.inited) return;
    st_rt.inited = 1;
    st_rt.eager = (int)base_env_int(SET_EAGER, 0, INT32_MIN, INT32_MAX, NULL);
    st_rt.debug = (int)base_env_int(SET_DEBUG, 0, INT32_MIN, INT32_MAX, NULL);
    st_rt.poison = (int)base_env_int(SET_POISON, 0, INT32_MIN, INT32_MAX, NULL);
    st_rt.jit_min = base_env_int(SET_JIT_MIN, 32768, INT64_MIN, INT64_MAX, NULL);
    st_rt.jit_hot = base_env_int(SET_JIT_HOT, 3, 0, INT64_MAX, NULL);
    st_rt.jit_async = (int)base_env_int(SET_JIT_ASYNC, 1, 0, 1, NULL);
    st_rt.trace_max = base_env_int(SET_TRACE_MAX, 20000, INT64_MIN, INT64_MAX, NULL);
    /* For kernels built by a compiler whose OpenMP runtime they still use (clang's libomp; GCC's
     * kernels run on device/cpu_pool.c): threads sleep at barriers instead of spinning (read when
     * the first kernel loads the runtime). A spinning thread whose partner lost its core made
     * 2-thread steps 3-30x slower than 1-thread steps on a shared machine. A user's setting wins. */
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
}
