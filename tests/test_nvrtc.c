/*
 * test_nvrtc.c — NVRTC loaded at run time (jit/nvrtc.c), the cubin cache (jit/cache_cuda.c) and the
 * CI check mode (jit/nvrtc_check.c). Needs libnvrtc, not a GPU: without libnvrtc every test prints
 * SKIP with the loader's reason and the program passes.
 *
 * Every run uses a fresh ST_CACHE_DIR (mkdtemp), removed at the end. Kernels are hand-written
 * against the CUDA kernel ABI (buffers, long long ints, double floats, int *err, int rt). The check
 * mode reports at exit, so its tests run it in a forked child and read the child's exit status,
 * stderr and ST_NVRTC_CHECK_LOG line.
 */
#include "base/base.h"
#include "jit/nvrtc.h"
#include "test.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char cache_dir[256];
static int have_nvrtc;
static char skip_reason[1024];

/* y[i] = x[i] * f0 + i1 over i0 elements, grid-stride. */
static const char *K_AXPB =
    "extern \"C\" __global__ void __launch_bounds__(256)\n"
    "KNAME(const float *p0, float *p1, long long i0, long long i1, double f0, int *err, int rt) {\n"
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < i0;\n"
    "         i += (long long)gridDim.x * blockDim.x)\n"
    "        p1[i] = p0[i] * (float)f0 + (float)i1;\n"
    "}\n";
/* y[0] = sum x, one block, warp shuffles; *err = 1 when n < 0. */
static const char *K_SUM =
    "extern \"C\" __global__ void __launch_bounds__(32)\n"
    "KNAME(const double *p0, double *p1, long long i0, int *err, int rt) {\n"
    "    if (i0 < 0) { if (threadIdx.x == 0) *err = 1; return; }\n"
    "    double s = 0;\n"
    "    for (long long i = threadIdx.x; i < i0; i += 32) s += p0[i];\n"
    "    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);\n"
    "    if (threadIdx.x == 0) p1[0] = s;\n"
    "}\n";
/* A syntax error NVRTC reports by name. */
static const char *K_BAD =
    "extern \"C\" __global__ void KNAME(float *p0, int *err, int rt) {\n"
    "    p0[0] = undeclared_thing_xyz + 1.0f;\n"
    "}\n";
/* Two kernels that each compile alone but clash in one unit (a helper that is not KNAME-unique). */
static const char *K_CLASH =
    "__device__ float st_test_helper(float v) { return v * 2.0f; }\n"
    "extern \"C\" __global__ void KNAME(float *p0, int *err, int rt) { p0[0] = st_test_helper(p0[0]); }\n";
static const char *K_CLASH2 =
    "__device__ float st_test_helper(float v) { return v * 3.0f; }\n"
    "extern \"C\" __global__ void KNAME(float *p0, int *err, int rt) { p0[0] = st_test_helper(p0[0]); }\n";

#define SKIP_IF_NO_NVRTC()                                                  \
    do {                                                                    \
        if (!have_nvrtc) {                                                  \
            printf("SKIP %s: %s\n", __func__ + 5, skip_reason);             \
            return;                                                         \
        }                                                                   \
    } while (0)

static int is_elf(const void *p, size_t n) { return n > 4 && !memcmp(p, "\x7f" "ELF", 4); }

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The path after `key` in msg, up to the first ',' ';' or whitespace, into out. */
static int path_after(const char *msg, const char *key, char *out, size_t cap) {
    const char *p = strstr(msg, key);
    if (!p) return 0;
    p += strlen(key);
    size_t n = strcspn(p, ",; \n");
    if (n == 0 || n >= cap) return 0;
    memcpy(out, p, n);
    out[n] = '\0';
    return 1;
}

static uint64_t compiles(void) { return st_stats_g.kernels_compiled; }

TEST(loads) {
    SKIP_IF_NO_NVRTC();
    int major = 0, minor = -1;
    CHECK(nvrtc_version(&major, &minor) == 0);
    CHECK(major >= 11 && minor >= 0);
    CHECK(nvrtc_library_path() != NULL);
    CHECK(strstr(nvrtc_options(), "--fmad=false") != NULL);
}

/* An explicit ST_NVRTC_PATH that does not load is an error naming it, never another library. */
TEST(search_explicit_path) {
    void *h = (void *)1;
    char found[4096] = "";
    CHECK(nvrtc_search("/nonexistent/dir/libnvrtc.so.99", &h, found, sizeof found) == ST_ERR_DEVICE);
    CHECK(h == NULL);
    CHECK(strstr(st_last_error(), "ST_NVRTC_PATH=/nonexistent/dir/libnvrtc.so.99") != NULL);
    CHECK(strstr(st_last_error(), "No such file") != NULL);
    /* A directory without the library: named, and said so. */
    CHECK(nvrtc_search(cache_dir, &h, found, sizeof found) == ST_ERR_DEVICE);
    CHECK(strstr(st_last_error(), cache_dir) != NULL);
    CHECK(strstr(st_last_error(), "no libnvrtc.so") != NULL);
    /* A FIFO (nobody writing): refused at once, not a dlopen blocked in open() forever. */
    char fifo[4200];
    snprintf(fifo, sizeof fifo, "%s/libnvrtc.so.fifo", cache_dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    alarm(20);
    CHECK(nvrtc_search(fifo, &h, found, sizeof found) == ST_ERR_DEVICE);
    alarm(0);
    CHECK(strstr(st_last_error(), "is a FIFO") != NULL);
    unlink(fifo);
    SKIP_IF_NO_NVRTC();
    /* The directory the library was loaded from finds it again. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", nvrtc_library_path());
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        CHECK(nvrtc_search(dir, &h, found, sizeof found) == ST_OK);
        CHECK(h != NULL && !strncmp(found, dir, strlen(dir)));
        if (h) dlclose(h);
    }
}

TEST(compiles_both_archs) {
    SKIP_IF_NO_NVRTC();
    const char *srcs[2] = {K_AXPB, K_SUM}, *knames[2] = {"st_k_test_axpb", "st_k_test_sum"};
    char *unit = nvrtc_unit(2, srcs, knames, NULL, 0);
    CHECK(unit != NULL);
    if (!unit) return;
    const char *archs[3] = {"sm_80", "sm_90", "sm_90a"};
    for (int a = 0; a < 3; a++) {
        void *cubin = NULL;
        size_t n = 0;
        double ms = -1;
        CHECK(nvrtc_compile(unit, archs[a], "test-both", &cubin, &n, &ms) == ST_OK);
        CHECK_MSG(cubin && is_elf(cubin, n), "%s: no ELF cubin (%zu bytes)", archs[a], n);
        CHECK(ms > 0);
        /* The kernels keep their KNAME (extern "C": no mangling). */
        CHECK(cubin && memmem(cubin, n, "st_k_test_axpb", 14) && memmem(cubin, n, "st_k_test_sum", 13));
        st_free(cubin);
    }
    st_free(unit);
}

TEST(compile_error_saves_source) {
    SKIP_IF_NO_NVRTC();
    const char *kn = "st_k_test_bad";
    char *unit = nvrtc_unit(1, &K_BAD, &kn, NULL, 0);
    void *cubin = (void *)1;
    size_t n = 7;
    double ms;
    CHECK(nvrtc_compile(unit, "sm_80", "test-bad", &cubin, &n, &ms) == ST_ERR_COMPILE);
    CHECK(cubin == NULL && n == 0);
    const char *msg = st_last_error();
    CHECK_MSG(strstr(msg, "undeclared_thing_xyz") != NULL, "log text missing: %.300s", msg);
    CHECK(strstr(msg, "sm_80") != NULL);
    char path[4096], logp[4200];
    CHECK(path_after(msg, "source saved in ", path, sizeof path));
    CHECK_MSG(file_exists(path), "saved source %.300s does not exist", path);
    CHECK(strstr(path, "/failed/test-bad-") != NULL);
    snprintf(logp, sizeof logp, "%.*s.log", (int)strlen(path) - 3, path);
    CHECK_MSG(file_exists(logp), "saved log %.300s does not exist", logp);
    st_free(unit);
}

TEST(bad_arch) {
    SKIP_IF_NO_NVRTC();
    void *cubin;
    size_t n;
    double ms;
    const char *bad[] = {"sm80", "compute80", "sm_9", "compute_9", "sm_90b", "sm_90a;rm", ""};
    for (int i = 0; i < 7; i++) {
        CHECK_MSG(nvrtc_compile(K_AXPB, bad[i], "x", &cubin, &n, &ms) == ST_ERR_ARG, "arch '%s' accepted", bad[i]);
        CHECK(strstr(st_last_error(), bad[i]) != NULL);
    }
}

static char entry_path[4300];

static void set_entry_path(base_hash key) {
    char hex[33];
    base_hash_hex(key, hex);
    snprintf(entry_path, sizeof entry_path, "%s/cuda/%s.cubin", cache_dir, hex);
}

TEST(cache_memory_and_disk) {
    SKIP_IF_NO_NVRTC();
    const void *c1, *c2, *c3;
    size_t n1, n2, n3;
    base_hash k1, k2;
    uint64_t comp = compiles(), calls = st_stats_g.compile_calls, mem = st_stats_g.cache_hits_memory,
             disk = st_stats_g.cache_hits_disk;
    CHECK(jit_cubin_get(K_AXPB, "st_k_axpb", "sm_80", &c1, &n1, &k1) == ST_OK);
    CHECK_EQ_INT(compiles() - comp, 1);
    CHECK_EQ_INT(st_stats_g.compile_calls - calls, 1);
    CHECK(is_elf(c1, n1));
    set_entry_path(k1);
    CHECK_MSG(file_exists(entry_path), "no disk entry %.300s", entry_path);

    CHECK(jit_cubin_get(K_AXPB, "st_k_axpb", "sm_80", &c2, &n2, &k2) == ST_OK);
    CHECK_EQ_INT(compiles() - comp, 1);
    CHECK_EQ_INT(st_stats_g.cache_hits_memory - mem, 1);
    CHECK(c2 == c1 && n2 == n1 && !memcmp(&k1, &k2, sizeof k1));

    unsigned char *copy = st_malloc(n1);
    memcpy(copy, c1, n1);
    jit_cubin_shutdown();
    CHECK(jit_cubin_get(K_AXPB, "st_k_axpb", "sm_80", &c3, &n3, NULL) == ST_OK);
    CHECK_EQ_INT(compiles() - comp, 1);
    CHECK_EQ_INT(st_stats_g.cache_hits_disk - disk, 1);
    CHECK(n3 == n1 && !memcmp(c3, copy, n1));
    st_free(copy);
}

TEST(keys_differ) {
    SKIP_IF_NO_NVRTC();
    const void *c;
    size_t n;
    base_hash a, b, d;
    CHECK(jit_cubin_get(K_AXPB, "st_k_axpb", "sm_80", &c, &n, &a) == ST_OK);
    uint64_t comp = compiles();
    CHECK(jit_cubin_get(K_AXPB, "st_k_axpb", "sm_90", &c, &n, &b) == ST_OK);
    CHECK(memcmp(&a, &b, sizeof a) != 0);
    CHECK(jit_cubin_get(K_AXPB, "st_k_axpb2", "sm_80", &c, &n, &d) == ST_OK);
    CHECK(memcmp(&a, &d, sizeof a) != 0 && memcmp(&b, &d, sizeof a) != 0);
    CHECK(memmem(c, n, "st_k_axpb2", 10) != NULL);
    CHECK_EQ_INT(compiles() - comp, 2);
}

/* The one rule naming the architecture a GPU gets (the runtime's and the check mode's): its own
 * sm_XY (sm_90a on Hopper), PTX for the newest supported virtual architecture below it when NVRTC
 * cannot compile for it, an error when it is older than everything NVRTC supports. */
TEST(arch_rule) {
    SKIP_IF_NO_NVRTC();
    int major = 0, minor = 0;
    CHECK(nvrtc_version(&major, &minor) == 0);
    const int *archs;
    int n = nvrtc_supported_archs(&archs);
    CHECK_MSG(n > 0, "NVRTC %d.%d lists no supported architecture", major, minor);   /* 11.2 and later can */
    if (n <= 0) return;
    char a[16];
    CHECK(nvrtc_arch(80, a, sizeof a) == ST_OK && !strcmp(a, "sm_80"));
    CHECK(nvrtc_arch(90, a, sizeof a) == ST_OK && !strcmp(a, major >= 12 ? "sm_90a" : "sm_90"));
    int newest = archs[n - 1], oldest = archs[0];
    CHECK(nvrtc_arch(newest + 30, a, sizeof a) == ST_OK);
    char want[64];
    snprintf(want, sizeof want, "compute_%d", newest);
    CHECK_MSG(!strcmp(a, want), "a GPU newer than NVRTC: %s, expected %s", a, want);
    CHECK_EQ_INT(nvrtc_arch(oldest - 1, a, sizeof a), ST_ERR_DEVICE);
    snprintf(want, sizeof want, "this GPU (sm_%d) is older than", oldest - 1);
    CHECK_MSG(strstr(st_last_error(), want), "message: %s", st_last_error());
    /* what the device layer says, through jit_cuda_target: a device newer than NVRTC gets PTX */
    dev_info di = {.name = "future GPU", .arch = newest + 30, .version = 99000};
    CHECK(jit_cuda_target(&di, a, sizeof a) == ST_OK && !strncmp(a, "compute_", 8));
}

/* NVRTC must not be newer than the driver: never by its major version (its cubins do not load),
 * and not at all when the GPU needs PTX. Both versions are named. */
TEST(driver_check) {
    SKIP_IF_NO_NVRTC();
    int major = 0, minor = 0;
    CHECK(nvrtc_version(&major, &minor) == 0);
    int same = major * 1000 + minor * 10, older_major = (major - 1) * 1000 + 80;
    CHECK(nvrtc_driver_check(same, "sm_90a") == ST_OK);
    CHECK(nvrtc_driver_check(same, "compute_90") == ST_OK);
    CHECK(nvrtc_driver_check(same + 1000, "compute_90") == ST_OK);
    CHECK_EQ_INT(nvrtc_driver_check(older_major, "sm_90a"), ST_ERR_DEVICE);
    char want[96];
    snprintf(want, sizeof want, "NVRTC %d.%d (", major, minor);
    CHECK_MSG(strstr(st_last_error(), want), "message: %s", st_last_error());
    snprintf(want, sizeof want, "is newer than the CUDA driver (CUDA %d.8)", major - 1);
    CHECK_MSG(strstr(st_last_error(), want), "message: %s", st_last_error());
    if (minor > 0) { /* the same major version: cubins load (minor version compatibility), PTX does not */
        int older_minor = major * 1000 + (minor - 1) * 10;
        CHECK(nvrtc_driver_check(older_minor, "sm_90a") == ST_OK);
        CHECK_EQ_INT(nvrtc_driver_check(older_minor, "compute_90"), ST_ERR_DEVICE);
        CHECK_MSG(strstr(st_last_error(), "needs PTX (compute_90"), "message: %s", st_last_error());
    }
    dev_info di = {.name = "old driver", .arch = 80, .version = older_major};
    char a[16];
    CHECK_EQ_INT(jit_cuda_target(&di, a, sizeof a), ST_ERR_DEVICE);
}

/* A virtual architecture gives PTX text (loadable by cuModuleLoadData), cached under its own key
 * and file: never mistaken for the cubin of the same source. */
TEST(ptx_output) {
    SKIP_IF_NO_NVRTC();
    const void *c, *p;
    size_t n, pn;
    base_hash kc, kp;
    CHECK(jit_cubin_get(K_AXPB, "st_k_axpb", "sm_90", &c, &n, &kc) == ST_OK && is_elf(c, n));
    uint64_t comp = compiles();
    CHECK(jit_cubin_get(K_AXPB, "st_k_axpb", "compute_90", &p, &pn, &kp) == ST_OK);
    CHECK_EQ_INT(compiles() - comp, 1);
    CHECK(memcmp(&kc, &kp, sizeof kc) != 0);
    CHECK_MSG(p && pn > 1 && !is_elf(p, pn) && ((const char *)p)[pn - 1] == '\0' && strstr(p, ".version") &&
                  strstr(p, ".entry st_k_axpb("), "not PTX text: %.80s", p ? (const char *)p : "(null)");
    char hex[33], path[4300];
    base_hash_hex(kp, hex);
    snprintf(path, sizeof path, "%s/cuda/%s.ptx", cache_dir, hex);
    CHECK_MSG(file_exists(path), "no disk entry %.300s", path);
    jit_cubin_shutdown();   /* from disk, still PTX */
    uint64_t disk = st_stats_g.cache_hits_disk;
    CHECK(jit_cubin_get(K_AXPB, "st_k_axpb", "compute_90", &p, &pn, NULL) == ST_OK);
    CHECK_EQ_INT(st_stats_g.cache_hits_disk - disk, 1);
    CHECK(p && strstr(p, ".entry st_k_axpb("));
}

/* Damages the disk entry of K_SUM/sm_90 with how, then checks that the next lookup (memory cache
 * dropped) recompiles, and that the rewritten entry is a disk hit again. */
static void damage_and_recover(const char *what, void (*how)(const char *path)) {
    const void *c;
    size_t n;
    base_hash key;
    CHECK(jit_cubin_get(K_SUM, "st_k_sum", "sm_90", &c, &n, &key) == ST_OK);
    set_entry_path(key);
    jit_cubin_shutdown();
    how(entry_path);
    uint64_t comp = compiles(), disk = st_stats_g.cache_hits_disk;
    CHECK(jit_cubin_get(K_SUM, "st_k_sum", "sm_90", &c, &n, NULL) == ST_OK);
    CHECK_MSG(compiles() - comp == 1, "%s: entry not recompiled", what);
    CHECK(is_elf(c, n));
    jit_cubin_shutdown();
    CHECK(jit_cubin_get(K_SUM, "st_k_sum", "sm_90", &c, &n, NULL) == ST_OK);
    CHECK_MSG(st_stats_g.cache_hits_disk - disk == 1 && compiles() - comp == 1, "%s: entry not rewritten", what);
}

static void flip_payload(const char *path) {
    int fd = open(path, O_RDWR);
    unsigned char b;
    if (fd < 0) return;
    if (pread(fd, &b, 1, 200) == 1) {
        b ^= 0x5a;
        if (pwrite(fd, &b, 1, 200) != 1) b = 0;
    }
    close(fd);
}
static void flip_magic(const char *path) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return;
    if (pwrite(fd, "X", 1, 0) != 1) (void)0;
    close(fd);
}
static void truncate_half(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && truncate(path, st.st_size / 2) != 0) (void)0;
}
static void truncate_header(const char *path) {
    if (truncate(path, 20) != 0) (void)0;
}

TEST(cache_corrupt_entries) {
    SKIP_IF_NO_NVRTC();
    damage_and_recover("flipped payload byte", flip_payload);
    damage_and_recover("bad magic", flip_magic);
    damage_and_recover("truncated to half", truncate_half);
    damage_and_recover("truncated inside the header", truncate_header);
}

TEST(cache_compile_error) {
    SKIP_IF_NO_NVRTC();
    const void *c = (void *)1;
    size_t n = 1;
    uint64_t calls = st_stats_g.compile_calls, comp = compiles();
    CHECK(jit_cubin_get(K_BAD, "st_k_bad", "sm_80", &c, &n, NULL) == ST_ERR_COMPILE);
    CHECK(c == NULL && n == 0);
    CHECK(strstr(st_last_error(), "undeclared_thing_xyz") != NULL);
    CHECK_EQ_INT(st_stats_g.compile_calls - calls, 1);
    CHECK_EQ_INT(compiles() - comp, 0);
}

/* ---- the check mode, in a child process ---- */

typedef struct child_out { int status; unsigned long long n, f; int lines; char err[8192]; } child_out;

/* The source sets of the check-mode tests (the child picks one by number). */
enum { SET_PASS, SET_FAIL, SET_CLASH, SET_MANY, NSETS };
#define MANY 150
static char many_bufs[MANY][600];
static const char *set_srcs[NSETS][MANY];
static int set_n[NSETS];

/* A second process asking for the kernel the first one compiled (the disk entry of
 * cache_memory_and_disk, same ST_CACHE_DIR) compiles nothing: exit 0 on one disk hit and no
 * compile, 1 otherwise, 2 on an error. */
static int cubin_child_main(void) {
    const void *c;
    size_t n;
    if (jit_cubin_get(K_AXPB, "st_k_axpb", "sm_80", &c, &n, NULL) != ST_OK || !is_elf(c, n)) return 2;
    return st_stats_g.kernels_compiled == 0 && st_stats_g.cache_hits_disk == 1 && st_stats_g.compile_calls == 0 ? 0 : 1;
}

TEST(cache_second_process) {
    SKIP_IF_NO_NVRTC();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_nvrtc", "--cubin-child", (char *)NULL);
        _exit(97);
    }
    int ws = 0;
    CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid);
    CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "second process: status %d (1: it compiled or missed the disk cache, 2: error)",
              WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
}

static void init_sets(void) {
    const char *pass[4] = {K_AXPB, K_SUM, K_AXPB, K_SUM}; /* duplicates are checked once */
    const char *fail[3] = {K_AXPB, K_BAD, K_SUM};
    const char *clash[2] = {K_CLASH, K_CLASH2};
    memcpy(set_srcs[SET_PASS], pass, sizeof pass), set_n[SET_PASS] = 4;
    memcpy(set_srcs[SET_FAIL], fail, sizeof fail), set_n[SET_FAIL] = 3;
    memcpy(set_srcs[SET_CLASH], clash, sizeof clash), set_n[SET_CLASH] = 2;
    for (int i = 0; i < MANY; i++) {
        snprintf(many_bufs[i], sizeof many_bufs[i],
                 "extern \"C\" __global__ void KNAME(const float *p0, float *p1, long long i0, int *err, int rt) {\n"
                 "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
                 "    if (i < i0) p1[i] = p0[i] * %d.0f + %d.5f;\n"
                 "}\n", i, i);
        set_srcs[SET_MANY][i] = many_bufs[i];
    }
    set_n[SET_MANY] = MANY;
}

/* The child: a fresh process (exec'ed, so libnvrtc is not loaded yet, as in a real test program)
 * that queues set `set` under ST_NVRTC_CHECK=1 and exits; the exit report does the rest. */
static int check_child_main(int set) {
    if (set < 0 || set >= NSETS || !jit_nvrtc_check_enabled()) return 98;
    for (int i = 0; i < set_n[set]; i++) {
        char name[16];
        snprintf(name, sizeof name, "k%d", i);
        jit_nvrtc_check_source(set_srcs[set][i], name);
    }
    return 0;
}

/* The child's ST_NVRTC_CHECK_SEEN (NULL: none). */
static const char *seen_dir;

/* Runs set in a child with ST_NVRTC_CHECK=1 and its own ST_NVRTC_CHECK_LOG; collects its exit
 * status, stderr and log line. */
static void run_check_child(int set, child_out *o) {
    char logp[300], errp[300], arg[16];
    snprintf(logp, sizeof logp, "%s/check.log", cache_dir);
    snprintf(errp, sizeof errp, "%s/check.err", cache_dir);
    snprintf(arg, sizeof arg, "%d", set);
    unlink(logp);
    memset(o, 0, sizeof *o);
    o->status = -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("ST_NVRTC_CHECK", "1", 1);
        setenv("ST_NVRTC_CHECK_LOG", logp, 1);
        if (seen_dir) setenv("ST_NVRTC_CHECK_SEEN", seen_dir, 1);
        else unsetenv("ST_NVRTC_CHECK_SEEN");   /* make test sets one for the whole run */
        if (!freopen(errp, "w", stderr)) _exit(99);
        execl("/proc/self/exe", "test_nvrtc", "--check-child", arg, (char *)NULL);
        _exit(97);
    }
    int ws;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid) return;
    o->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    FILE *f = fopen(logp, "r");
    if (f) {
        unsigned long long n, fl;
        while (fscanf(f, "%llu %llu", &n, &fl) == 2) o->n = n, o->f = fl, o->lines++;
        fclose(f);
    }
    f = fopen(errp, "r");
    if (f) {
        size_t r = fread(o->err, 1, sizeof o->err - 1, f);
        o->err[r] = '\0';
        fclose(f);
    }
}

/* The architectures the runtime compiles for on an A100 and an H100: the check mode uses them. */
static char arch80[16] = "sm_80", arch90[16] = "sm_90a";

TEST(check_mode_passes) {
    SKIP_IF_NO_NVRTC();
    child_out o;
    run_check_child(SET_PASS, &o);
    CHECK_MSG(o.status == 0, "exit status %d, stderr: %.300s", o.status, o.err);
    CHECK_EQ_INT(o.lines, 1);
    CHECK_EQ_INT(o.n, 2);
    CHECK_EQ_INT(o.f, 0);
    char want[128];
    snprintf(want, sizeof want, "nvrtc-check: 2 kernels compiled for %s and %s, 0 failed (", arch80, arch90);
    CHECK_MSG(strstr(o.err, want) != NULL, "stderr: %.300s", o.err);
}

TEST(check_mode_names_the_failing_kernel) {
    SKIP_IF_NO_NVRTC();
    child_out o;
    run_check_child(SET_FAIL, &o);
    CHECK_MSG(o.status == 1, "exit status %d", o.status);
    CHECK_EQ_INT(o.n, 3);
    CHECK_EQ_INT(o.f, 1);
    char want[128], for80[32], for90[32];
    snprintf(want, sizeof want, "nvrtc-check: 3 kernels compiled for %s and %s, 1 failed (", arch80, arch90);
    CHECK(strstr(o.err, want) != NULL);
    /* Named once per architecture, with the log text and a saved source that exists. */
    snprintf(for80, sizeof for80, "for %s (", arch80);
    snprintf(for90, sizeof for90, "for %s (", arch90);
    CHECK_MSG(strstr(o.err, "FAILED kernel k1 (st_k_") && strstr(o.err, for80) && strstr(o.err, for90),
              "stderr: %.300s", o.err);
    CHECK(strstr(o.err, "FAILED kernel k0") == NULL && strstr(o.err, "FAILED kernel k2") == NULL);
    CHECK(strstr(o.err, "undeclared_thing_xyz") != NULL);
    char path[4096];
    CHECK(path_after(o.err, "source saved in ", path, sizeof path) && file_exists(path));
}

TEST(check_mode_clashing_kernels) {
    SKIP_IF_NO_NVRTC();
    child_out o;
    run_check_child(SET_CLASH, &o);
    CHECK_MSG(o.status == 1, "exit status %d", o.status);
    CHECK_EQ_INT(o.f, 2);
    CHECK_MSG(strstr(o.err, "compile alone but not together") != NULL, "stderr: %.300s", o.err);
}

/* More than one batch: MANY distinct kernels (batches of at most 64), all compiled and counted,
 * the last batch by the exit report. */
TEST(check_mode_batches) {
    SKIP_IF_NO_NVRTC();
    child_out o;
    double t0 = st_now_ms();
    run_check_child(SET_MANY, &o);
    double ms = st_now_ms() - t0;
    CHECK_MSG(o.status == 0, "exit status %d, stderr: %.300s", o.status, o.err);
    CHECK_EQ_INT(o.n, MANY);
    CHECK_EQ_INT(o.f, 0);
    printf("  check mode: %d small kernels for %s and %s in %.0f ms (%.1f ms per kernel)\n", MANY, arch80, arch90, ms, ms / MANY);
}

/* ST_NVRTC_CHECK_SEEN: a second process skips what the first compiled, and a kernel that failed
 * fails again in every process. */
TEST(check_mode_seen_by_another_process) {
    SKIP_IF_NO_NVRTC();
    char dir[320];
    snprintf(dir, sizeof dir, "%s/seen", cache_dir);
    CHECK(mkdir(dir, 0777) == 0);
    seen_dir = dir;
    child_out o;
    run_check_child(SET_PASS, &o);
    CHECK_MSG(o.status == 0 && o.n == 2, "exit status %d, n %llu, stderr: %.300s", o.status, o.n, o.err);
    CHECK(strstr(o.err, "checked by another process") == NULL);
    run_check_child(SET_PASS, &o);
    CHECK_MSG(o.status == 0 && o.n == 0, "exit status %d, n %llu, stderr: %.300s", o.status, o.n, o.err);
    CHECK_MSG(strstr(o.err, ", 2 checked by another process") != NULL, "stderr: %.300s", o.err);
    for (int round = 0; round < 2; round++) {   /* k1 does not compile: never marked */
        run_check_child(SET_FAIL, &o);
        CHECK_MSG(o.status == 1 && o.f == 1, "round %d: exit status %d, f %llu", round, o.status, o.f);
    }
    CHECK_MSG(strstr(o.err, "FAILED kernel k1 (st_k_") != NULL, "stderr: %.300s", o.err);
    seen_dir = NULL;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

int main(int argc, char **argv) {
    init_sets();
    if (argc == 3 && !strcmp(argv[1], "--check-child")) return check_child_main(atoi(argv[2]));
    if (argc == 2 && !strcmp(argv[1], "--cubin-child")) return cubin_child_main();
    snprintf(cache_dir, sizeof cache_dir, "/tmp/stitch-test-nvrtc-XXXXXX");
    if (!mkdtemp(cache_dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    setenv("ST_CACHE_DIR", cache_dir, 1);
    st_runtime_init();
    have_nvrtc = nvrtc_load() == ST_OK;
    if (have_nvrtc && (nvrtc_arch(80, arch80, sizeof arch80) != ST_OK || nvrtc_arch(90, arch90, sizeof arch90) != ST_OK))
        printf("FAIL arch names: %s\n", st_last_error()), test_failed_total++;
    if (!have_nvrtc) snprintf(skip_reason, sizeof skip_reason, "no libnvrtc: %s", st_last_error());

    RUN(loads);
    RUN(search_explicit_path);
    RUN(compiles_both_archs);
    RUN(compile_error_saves_source);
    RUN(bad_arch);
    RUN(cache_memory_and_disk);
    RUN(cache_second_process);
    RUN(keys_differ);
    RUN(arch_rule);
    RUN(driver_check);
    RUN(ptx_output);
    RUN(cache_corrupt_entries);
    RUN(cache_compile_error);
    RUN(check_mode_passes);
    RUN(check_mode_names_the_failing_kernel);
    RUN(check_mode_clashing_kernels);
    RUN(check_mode_seen_by_another_process);
    RUN(check_mode_batches);

    jit_cubin_shutdown();
    nftw(cache_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    TEST_MAIN_END();
}
