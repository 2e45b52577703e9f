/*
 * test_sim.c — the simulated GPU catches what it is for (run by tests/sim/run.sh, ST_CUDA_SIM=1).
 *
 * Hand-written CUDA kernels, compiled by the stand-in NVRTC and launched through stitch's own
 * driver layer (jit/nvrtc.c, device/cuda.c), each in a child process (a fault makes the context
 * unusable, as on a GPU): a correct reduction gives the right sums under every schedule; a module
 * loaded after others were unloaded runs its own kernel, not theirs; each
 * planted bug — an out-of-bounds write, a missing barrier (a shared-memory race), a read of shared
 * memory never written, a __syncthreads skipped by part of the block, a shuffle skipped by part of
 * a warp, a launch over __launch_bounds__ or over the block limit — is reported with the kernel's
 * name, and the process's exit status says so; the memory metrics give 4 sectors per request for
 * a coalesced f32 copy, 32 for a 128-byte stride, and 32 wavefronts for a 32-way bank conflict.
 * Device buffers come exactly sized from the caching allocator on the simulator (devalloc's exact
 * mode), so the off-by-one write lands 0 bytes past the end of its 256-byte buffer.
 */
#include "base/base.h"
#include "device/cuda.h"
#include "jit/nvrtc.h"
#include "test.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Compiles src (one kernel, `KNAME`) and launches it on a grid x block with a float buffer of n
 * elements (filled with 1) and n as parameters; reads the buffer back into out (when given).
 * Returns the status of the first call that failed. */
static st_status launch(const char *src, unsigned grid, unsigned block, float *out, long long n) {
    const char *kname = "sim_test_kernel";
    char *unit = nvrtc_unit(1, &src, &kname, NULL, 0);
    void *cubin = NULL, *fn = NULL;
    size_t size = 0;
    double ms;
    st_status s = unit ? nvrtc_compile(unit, "sm_80", "test_sim", &cubin, &size, &ms) : ST_ERR_OOM;
    st_free(unit);
    if (s == ST_OK) s = cuda_module_function(0, cubin, size, kname, &fn);
    st_devptr p = 0;
    if (s == ST_OK) s = cuda_mem_alloc(0, (size_t)n * sizeof(float), &p);
    float *host = malloc((size_t)n * sizeof(float));
    for (long long i = 0; i < n; i++) host[i] = 1.0f;
    if (s == ST_OK) s = cuda_copy_htod(0, p, host, (size_t)n * sizeof(float));
    void *params[] = {&p, &n};
    unsigned g[3] = {grid, 1, 1}, b[3] = {block, 1, 1};
    if (s == ST_OK) s = cuda_launch(0, fn, "sim_test_kernel", g, b, 0, params);
    if (s == ST_OK) s = cuda_copy_dtoh(0, out ? out : host, p, (size_t)n * sizeof(float));
    free(host);
    return s;
}

/* Runs body in a child with the simulator's faults expected; its stderr and exit status. */
static int in_child(void (*body)(void), char *err, size_t cap) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        dup2(fd[1], 1);
        setenv("ST_SIM_EXPECT_FAULTS", "1", 1);
        body();
        fflush(NULL);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got < cap - 1 && (r = read(fd[0], err + got, cap - 1 - got)) > 0) got += (size_t)r;
    err[got] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static const char *cur_src;
static unsigned cur_block = 64;
static void run_cur(void) {
    st_status s = launch(cur_src, 1, cur_block, NULL, 64);
    printf("status %d: %s\n", (int)s, s == ST_OK ? "ok" : st_last_error());
}

/* The child's output must hold every one of the (NULL-terminated) phrases. */
static void expect_fault(const char *src, unsigned block, const char *const *phrases) {
    char out[8192];
    cur_src = src;
    cur_block = block;
    in_child(run_cur, out, sizeof out);
    for (int i = 0; phrases[i]; i++)
        CHECK_MSG(strstr(out, phrases[i]) != NULL, "expected '%s' in:\n%.300s", phrases[i], out);
}

TEST(correct_reduction) {
    /* one block sums 1..n through shared memory, with the barriers */
    static const char src[] =
        "extern \"C\" __global__ void KNAME(float *p, long long n) {\n"
        "    __shared__ float s[64];\n"
        "    float v = 0;\n"
        "    for (long long i = threadIdx.x; i < n; i += blockDim.x) v += (float)(i + 1);\n"
        "    s[threadIdx.x] = v;\n"
        "    __syncthreads();\n"
        "    for (int w = 32; w > 0; w >>= 1) {\n"
        "        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];\n"
        "        __syncthreads();\n"
        "    }\n"
        "    if (threadIdx.x == 0) p[0] = s[0];\n"
        "    float x = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);\n"
        "    if (threadIdx.x < n) p[threadIdx.x + 1 < n ? threadIdx.x + 1 : 0] = threadIdx.x == 0 ? s[0] : x;\n"
        "}\n";
    float out[200];
    st_status s = launch(src, 1, 64, out, 200);
    CHECK_MSG(s == ST_OK, "%s", st_last_error());
    CHECK_NEAR(out[0], 200.0 * 201.0 / 2.0, 0);
    for (int t = 1; t < 64; t++) CHECK_NEAR(out[t + 1 < 200 ? t + 1 : 0], t ^ 1, 0);
}

/* A module loaded after another was unloaded runs its own code. The stand-in driver dlopens each
 * module as /proc/self/fd/N of its memfd; glibc matches a dlopen by that name, so a module that
 * stayed resident after its dlclose (a C++ STB_GNU_UNIQUE symbol makes it NODELETE) answered the
 * next module loaded under the same fd number: the old kernel ran under the new one's name. */
TEST(reload_after_unload) {
    static const char a[] = "extern \"C\" __global__ void KNAME(float *p, long long n) {\n"
                            "    if (threadIdx.x < n) p[threadIdx.x] = 3.0f;\n"
                            "}\n";
    static const char b[] = "extern \"C\" __global__ void KNAME(float *p, long long n) {\n"
                            "    if (threadIdx.x < n) p[threadIdx.x] = 5.0f;\n"
                            "}\n";
    float out[32];
    for (int round = 0; round < 3; round++) {
        CHECK_MSG(launch(round % 2 ? b : a, 1, 32, out, 32) == ST_OK, "%s", st_last_error());
        CHECK_NEAR(out[7], round % 2 ? 5 : 3, 0);
        cuda_unload_modules();
    }
}

TEST(out_of_bounds) {
    expect_fault("extern \"C\" __global__ void KNAME(float *p, long long n) {\n"
                 "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "    if (i <= n) p[i] = 2.0f;   /* off by one */\n"
                 "}\n",
                 128, (const char *[]){"out-of-bounds global write of 4 bytes", "0 bytes past the end of a 256-byte",
                                       "sim_test_kernel", "thread (64,0,0)", NULL});
}

TEST(missing_barrier_race) {
    expect_fault("extern \"C\" __global__ void KNAME(float *p, long long n) {\n"
                 "    __shared__ float s[64];\n"
                 "    if (threadIdx.x == 0) for (int i = 0; i < 64; i++) s[i] = 0;\n"
                 "    __syncthreads();\n"
                 "    s[threadIdx.x] = threadIdx.x;             /* no barrier between this write ... */\n"
                 "    p[threadIdx.x] = s[(threadIdx.x + 1) % 64];  /* ... and another thread's read */\n"
                 "}\n",
                 64, (const char *[]){"shared-memory race", "sim_test_kernel", NULL});
}

TEST(uninitialized_shared) {
    expect_fault("extern \"C\" __global__ void KNAME(float *p, long long n) {\n"
                 "    __shared__ float s[64];\n"
                 "    p[threadIdx.x] = s[threadIdx.x];\n"
                 "}\n",
                 64, (const char *[]){"shared memory not written in this block", NULL});
}

TEST(partial_barrier) {
    expect_fault("extern \"C\" __global__ void KNAME(float *p, long long n) {\n"
                 "    if (threadIdx.x < 16) return;\n"
                 "    __syncthreads();\n"
                 "    p[threadIdx.x] = 1;\n"
                 "}\n",
                 64, (const char *[]){"__syncthreads reached by part of the block", NULL});
}

TEST(partial_shuffle) {
    expect_fault("extern \"C\" __global__ void KNAME(float *p, long long n) {\n"
                 "    if (threadIdx.x == 5) return;\n"
                 "    p[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);\n"
                 "}\n",
                 64, (const char *[]){"a shuffle reached by part of warp 0", "lane 5 has exited", NULL});
}

TEST(launch_limits) {
    expect_fault("extern \"C\" __global__ void __launch_bounds__(32) KNAME(float *p, long long n) {\n"
                 "    p[threadIdx.x] = 1;\n"
                 "}\n",
                 64, (const char *[]){"over its __launch_bounds__(32)", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", NULL});
    expect_fault("extern \"C\" __global__ void KNAME(float *p, long long n) { p[0] = 1; }\n", 2048,
                 (const char *[]){"block 2048x1x1 over the limits", "CUDA_ERROR_INVALID_VALUE", NULL});
}

static void run_metrics(void) {
    setenv("ST_SIM_METRICS", "1", 1);
    static const char *const srcs[] = {
        "extern \"C\" __global__ void KNAME(float *p, long long n) { p[threadIdx.x] += 1; }\n",
        "extern \"C\" __global__ void KNAME(float *p, long long n) { p[(threadIdx.x * 32) % n] += 1; }\n",
        "extern \"C\" __global__ void KNAME(float *p, long long n) {\n"
        "    __shared__ float s[32 * 32];\n"
        "    s[threadIdx.x * 32] = 1;\n"
        "    p[threadIdx.x] = s[threadIdx.x * 32];\n"
        "}\n"};
    for (int i = 0; i < 3; i++) {
        st_status s = launch(srcs[i], 1, 32, NULL, 1024);
        printf("status %d\n", (int)s);
    }
}

TEST(memory_metrics) {
    char out[8192];
    in_child(run_metrics, out, sizeof out);
    /* a load and a store per thread, each one request */
    CHECK_MSG(strstr(out, "global 2 requests, 4.00 sectors/request (100%") != NULL, "coalesced:\n%.300s", out);
    CHECK_MSG(strstr(out, "global 2 requests, 32.00 sectors/request (12%") != NULL, "strided:\n%.300s", out);
    /* the store (g++ forwards it to the thread's own load): 32 words in bank 0 */
    CHECK_MSG(strstr(out, "shared 1 requests, 32.00 wavefronts/request") != NULL, "bank conflicts:\n%.300s", out);
}

int main(void) {
    if (!getenv("ST_CUDA_SIM")) {
        printf("FAIL test_sim: run it with ST_CUDA_SIM=1 (tests/sim/run.sh)\n");
        return 1;
    }
    RUN(correct_reduction);
    RUN(reload_after_unload);
    RUN(out_of_bounds);
    RUN(missing_barrier_race);
    RUN(uninitialized_shared);
    RUN(partial_barrier);
    RUN(partial_shuffle);
    RUN(launch_limits);
    RUN(memory_metrics);
    st_shutdown();
    TEST_MAIN_END();
}
