/*
 * test_jit.c — the CPU JIT driver and its caches (jit/jit.h): batching (one compiler call per
 * batch), memory and disk hits, recovery from corrupt .so and .k files, compile errors with the
 * log and the saved source, a bad ST_CC, -ffp-contract=off, and a compiler that hangs (stopped by
 * ST_COMPILE_TIMEOUT or st_interrupt(), its whole process group killed and reaped).
 *
 * Every run uses a fresh ST_CACHE_DIR (mkdtemp), removed at the end. The test kernels are
 * written against the real ABI (st_kargs, emitted by the JIT) and the real prelude.
 */
#include "base/base.h"
#include "jit/jit.h"
#include "base/gemm.h"
#include "device/cpu_pool.h"
#include "test.h"

#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char cache_dir[256];

/* y[i] = x[i] * flts[0] + ints[1], with OpenMP (checks -fopenmp). bufs: x, y; ints: n, add */
static const char *K_AXPB =
    "void KNAME(const st_kargs *a) {\n"
    "    const double *x = a->bufs[0]; double *y = a->bufs[1];\n"
    "    int64_t n = a->ints[0];\n"
    "    #pragma omp parallel for num_threads(a->nthreads)\n"
    "    for (int64_t i = 0; i < n; i++) y[i] = x[i] * a->flts[0] + (double)a->ints[1];\n"
    "}\n";
/* y[0] = sum x; sets *err when n < 0. */
static const char *K_SUM =
    "void KNAME(const st_kargs *a) {\n"
    "    const double *x = a->bufs[0]; double *y = a->bufs[1];\n"
    "    if (a->ints[0] < 0) { *a->err = 7; return; }\n"
    "    double s = 0; for (int64_t i = 0; i < a->ints[0]; i++) s += x[i];\n"
    "    y[0] = s;\n"
    "}\n";
/* z[i] = x[i] * y[i] - c[i]: 0 exactly without fma contraction when c = fl(x*y). */
static const char *K_MULSUB =
    "void KNAME(const st_kargs *a) {\n"
    "    const double *x = a->bufs[0], *y = a->bufs[1], *c = a->bufs[2]; double *z = a->bufs[3];\n"
    "    for (int64_t i = 0; i < a->ints[0]; i++) z[i] = x[i] * y[i] - c[i];\n"
    "}";   /* no trailing newline on purpose */

static const char *srcs3[3];
static const char *hints3[3] = {"axpb", "sum", "mul_sub"};

static st_stats_t snap(void) { return st_stats_g; }

/* Runs the three kernels and checks their answers. */
static void check_kernels(st_kernel_fn *fn) {
    enum { N = 1000 };
    static double x[N], y[N], c[N], z[N];
    for (int i = 0; i < N; i++) {
        x[i] = 1.0 + ldexp(1.0, -30) * (i + 1);
        y[i] = 1.0 - ldexp(1.0, -29) * (i + 3);
        c[i] = x[i] * y[i];
        z[i] = -1;
    }
    int32_t err = 0;
    int64_t ints[2] = {N, 5};
    double flts[1] = {2.5};
    void *bufs1[2] = {x, z};
    st_kargs a = {bufs1, ints, flts, &err, 2, NULL, NULL};
    fn[0](&a);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= z[i] == x[i] * 2.5 + 5.0;
    CHECK(ok);

    double s = 0, out = -1;
    for (int i = 0; i < N; i++) s += x[i];
    void *bufs2[2] = {x, &out};
    a.bufs = bufs2;
    fn[1](&a);
    CHECK(out == s && err == 0);
    int64_t neg[1] = {-1};
    a.ints = neg;
    fn[1](&a);
    CHECK(err == 7);

    void *bufs3[4] = {x, y, c, z};
    a.bufs = bufs3;
    a.ints = ints;
    fn[2](&a);
    ok = 1;
    for (int i = 0; i < N; i++) ok &= z[i] == 0.0; /* an fma would leave the rounding error */
    CHECK(ok);
}

/* Name of the (first) non-hidden file in the cache dir ending with suffix; "" if none. */
static int find_file(const char *suffix, char *out, size_t n, int nth) {
    DIR *d = opendir(cache_dir);
    if (!d) return 0;
    struct dirent *e;
    int count = 0;
    out[0] = '\0';
    size_t sl = strlen(suffix);
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' || l < sl || strcmp(e->d_name + l - sl, suffix)) continue;
        if (count++ == nth) snprintf(out, n, "%s/%s", cache_dir, e->d_name);
    }
    closedir(d);
    return count;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

TEST(batch_compiles_once) {
    st_stats_t s0 = snap();
    st_kernel_fn fn[3] = {0};
    CHECK(jit_get_kernels(3, srcs3, hints3, fn) == ST_OK);
    st_stats_t s1 = snap();
    CHECK(s1.compile_calls == s0.compile_calls + 1);
    CHECK(s1.kernels_compiled == s0.kernels_compiled + 3);
    CHECK(s1.compile_ms > s0.compile_ms);
    CHECK(fn[0] && fn[1] && fn[2]);
    if (!(fn[0] && fn[1] && fn[2])) return;
    check_kernels(fn);
    char p[512];
    CHECK(find_file(".so", p, sizeof p, 0) == 1);
    CHECK(find_file(".k", p, sizeof p, 0) == 3);
    CHECK(jit_cache_dir() && !strcmp(jit_cache_dir(), cache_dir));
}

TEST(memory_hits) {
    st_stats_t s0 = snap();
    st_kernel_fn a[3] = {0}, b[3] = {0};
    CHECK(jit_get_kernels(3, srcs3, NULL, a) == ST_OK);
    CHECK(jit_get_kernels(3, srcs3, hints3, b) == ST_OK);
    st_stats_t s1 = snap();
    CHECK(s1.compile_calls == s0.compile_calls && s1.kernels_compiled == s0.kernels_compiled);
    CHECK(s1.cache_hits_memory == s0.cache_hits_memory + 6);
    CHECK(a[0] == b[0] && a[1] == b[1] && a[2] == b[2]);
    CHECK(jit_lookup(srcs3[1], 0) == a[1]);
    CHECK(jit_lookup("void KNAME(const void *p) { (void)p; }", 0) == NULL);
    CHECK(jit_lookup("void KNAME(const void *p) { (void)p; }", 1) == NULL);
    CHECK(snap().compile_calls == s0.compile_calls);
}

TEST(disk_hits) {
    jit_shutdown();
    CHECK(jit_lookup(srcs3[0], 0) == NULL); /* memory is empty after shutdown */
    st_stats_t s0 = snap();
    st_kernel_fn fn[3] = {0};
    CHECK(jit_get_kernels(3, srcs3, hints3, fn) == ST_OK);
    st_stats_t s1 = snap();
    CHECK(s1.compile_calls == s0.compile_calls && s1.kernels_compiled == s0.kernels_compiled);
    CHECK(s1.cache_hits_disk == s0.cache_hits_disk + 3);
    if (fn[0] && fn[1] && fn[2]) check_kernels(fn);
    /* jit_lookup with disk allowed after another shutdown */
    jit_shutdown();
    s0 = snap();
    CHECK(jit_lookup(srcs3[2], 1) != NULL);
    CHECK(snap().cache_hits_disk == s0.cache_hits_disk + 1);
    CHECK(jit_lookup(srcs3[2], 0) != NULL);
}

/* Corrupt the batch object (mode 0: truncate, 1: flip bytes, 2: delete) → recompiled. */
static void corrupt_so_and_reload(int mode) {
    jit_shutdown();
    char so[512];
    CHECK(find_file(".so", so, sizeof so, 0) == 1);
    struct stat st;
    CHECK(stat(so, &st) == 0);
    if (mode == 0) {
        CHECK(truncate(so, st.st_size / 2) == 0);
    } else if (mode == 1) {
        FILE *f = fopen(so, "r+b");
        CHECK(f != NULL);
        if (!f) return;
        fseek(f, st.st_size / 2, SEEK_SET);
        fwrite("\xde\xad\xbe\xef", 1, 4, f);
        fclose(f);
    } else {
        CHECK(unlink(so) == 0);
    }
    st_stats_t s0 = snap();
    st_kernel_fn fn[3] = {0};
    CHECK(jit_get_kernels(3, srcs3, hints3, fn) == ST_OK);
    st_stats_t s1 = snap();
    CHECK(s1.compile_calls == s0.compile_calls + 1);
    CHECK(s1.kernels_compiled == s0.kernels_compiled + 3);
    CHECK(s1.cache_hits_disk == s0.cache_hits_disk);
    CHECK(!file_exists(so)); /* the bad object was removed */
    char p[512];
    CHECK(find_file(".so", p, sizeof p, 0) == 1);
    if (fn[0] && fn[1] && fn[2]) check_kernels(fn);
}
TEST(truncated_so) { corrupt_so_and_reload(0); }
TEST(corrupt_so) { corrupt_so_and_reload(1); }
TEST(missing_so) { corrupt_so_and_reload(2); }

TEST(corrupt_k) {
    jit_shutdown();
    char k[3][512];
    CHECK(find_file(".k", k[0], sizeof k[0], 0) == 3);
    find_file(".k", k[1], sizeof k[1], 1);
    find_file(".k", k[2], sizeof k[2], 2);
    /* one garbage, one truncated, one with an edited digit (same length) */
    FILE *f = fopen(k[0], "wb");
    CHECK(f != NULL);
    if (f) { fputs("garbage\n", f); fclose(f); }
    struct stat st;
    CHECK(stat(k[1], &st) == 0 && truncate(k[1], st.st_size - 10) == 0);
    f = fopen(k[2], "r+b");
    CHECK(f != NULL);
    if (f) {
        char line[512] = {0};
        size_t n = fread(line, 1, sizeof line - 1, f);
        /* line: magic key so size sum linesum\n; n-20 is a digit of the object checksum, which
         * only the line's own checksum can catch */
        CHECK(n > 40);
        if (n > 40) line[n - 20] = line[n - 20] == '0' ? '1' : '0';
        rewind(f);
        fwrite(line, 1, n, f);
        fclose(f);
    }
    st_stats_t s0 = snap();
    st_kernel_fn fn[3] = {0};
    CHECK(jit_get_kernels(3, srcs3, hints3, fn) == ST_OK);
    st_stats_t s1 = snap();
    CHECK(s1.compile_calls == s0.compile_calls + 1);
    CHECK(s1.kernels_compiled == s0.kernels_compiled + 3);
    if (fn[0] && fn[1] && fn[2]) check_kernels(fn);

    /* Only one index bad: the other two come from disk, one kernel is compiled. */
    jit_shutdown();
    find_file(".k", k[0], sizeof k[0], 0);
    f = fopen(k[0], "wb");
    if (f) fclose(f); /* empty */
    s0 = snap();
    CHECK(jit_get_kernels(3, srcs3, hints3, fn) == ST_OK);
    s1 = snap();
    CHECK(s1.compile_calls == s0.compile_calls + 1);
    CHECK(s1.kernels_compiled == s0.kernels_compiled + 1);
    CHECK(s1.cache_hits_disk == s0.cache_hits_disk + 2);
    if (fn[0] && fn[1] && fn[2]) check_kernels(fn);
}

/* A .k or a .so planted in the cache as a FIFO (nobody writing to it) is dropped and the kernels
 * recompiled, instead of the open blocking forever; alarm() turns a hang into a failure. */
static void fifo_entry_and_reload(const char *suffix) {
    jit_shutdown();
    char f[512];
    int n = find_file(suffix, f, sizeof f, 0);
    CHECK(n >= 1);
    for (int i = 0; i < n; i++) { /* every one: all three kernels are recompiled */
        find_file(suffix, f, sizeof f, i);
        CHECK(unlink(f) == 0 && mkfifo(f, 0600) == 0);
    }
    alarm(30);
    st_stats_t s0 = snap();
    st_kernel_fn fn[3] = {0};
    CHECK(jit_get_kernels(3, srcs3, hints3, fn) == ST_OK);
    alarm(0);
    st_stats_t s1 = snap();
    CHECK(s1.compile_calls == s0.compile_calls + 1);
    CHECK(s1.kernels_compiled == s0.kernels_compiled + 3); /* every index led to a FIFO: dropped */
    if (fn[0] && fn[1] && fn[2]) check_kernels(fn);
}
TEST(fifo_k) { fifo_entry_and_reload(".k"); }
TEST(fifo_so) { fifo_entry_and_reload(".so"); }

TEST(mixed_and_duplicates) {
    static const char *K_NEW = "void KNAME(const st_kargs *a) { *a->err = 42; }\n";
    const char *srcs[4] = {srcs3[0], K_NEW, K_NEW, srcs3[1]};
    st_stats_t s0 = snap();
    st_kernel_fn fn[4] = {0};
    CHECK(jit_get_kernels(4, srcs, NULL, fn) == ST_OK);
    st_stats_t s1 = snap();
    CHECK(s1.compile_calls == s0.compile_calls + 1);
    CHECK(s1.kernels_compiled == s0.kernels_compiled + 1);
    CHECK(fn[1] && fn[1] == fn[2]);
    int32_t err = 0;
    st_kargs a = {NULL, NULL, NULL, &err, 1, NULL, NULL};
    if (fn[1]) fn[1](&a);
    CHECK(err == 42);
    CHECK(jit_get_kernels(0, NULL, NULL, NULL) == ST_OK);
}

TEST(compile_error) {
    static const char *K_BAD = "void KNAME(const st_kargs *a) { int x = ; (void)a; }\n";
    st_stats_t s0 = snap();
    st_kernel_fn fn[1] = {(st_kernel_fn)1};
    const char *srcs[1] = {K_BAD};
    st_status s = jit_get_kernels(1, srcs, NULL, fn);
    CHECK(s == ST_ERR_COMPILE);
    CHECK(fn[0] == NULL);
    const char *msg = st_last_error();
    CHECK(strstr(msg, "expected expression") != NULL);
    CHECK(snap().compile_calls == s0.compile_calls + 1);
    CHECK(snap().kernels_compiled == s0.kernels_compiled);
    /* the message names the saved source: <cachedir>/failed/...c */
    char want[300];
    snprintf(want, sizeof want, "%s/failed/", cache_dir);
    const char *p = strstr(msg, want);
    CHECK(p != NULL);
    if (p) {
        char path[512];
        size_t n = strcspn(p, ", \n");
        snprintf(path, sizeof path, "%.*s", (int)n, p);
        CHECK(n > 2 && !strcmp(path + n - 2, ".c"));
        CHECK(file_exists(path));
    }
    /* the JIT still works afterwards, and a bad kernel does not poison a good one in its call */
    fn[0] = NULL;
    CHECK(jit_get_kernels(1, srcs3, NULL, fn) == ST_OK && fn[0] != NULL);
    CHECK(jit_lookup(K_BAD, 1) == NULL);
}

TEST(bad_cc) {
    const char *bad[] = {"/nonexistent/bin/cc", "no-such-compiler-xyz", "false", "   "};
    static const char *K_FRESH = "void KNAME(const st_kargs *a) { (void)a; /* fresh */ }\n";
    for (int i = 0; i < 4; i++) {
        jit_shutdown();
        setenv("ST_CC", bad[i], 1);
        st_kernel_fn fn[1] = {0};
        const char *srcs[1] = {K_FRESH};
        st_status s = jit_get_kernels(1, srcs, NULL, fn);
        CHECK(s == ST_ERR_COMPILE);
        CHECK(fn[0] == NULL);
        CHECK(strstr(st_last_error(), "ST_CC") != NULL);
        CHECK(jit_lookup(K_FRESH, 1) == NULL);
    }
    /* a compiler given with extra words, and back to the default */
    jit_shutdown();
    setenv("ST_CC", "cc -DSTITCH_TEST_WORD=1", 1);
    st_kernel_fn fn[1] = {0};
    const char *srcs[1] = {"#ifndef STITCH_TEST_WORD\n#error no word\n#endif\n"
                                "void KNAME(const st_kargs *a) { (void)a; }\n"};
    CHECK(jit_get_kernels(1, srcs, NULL, fn) == ST_OK && fn[0]);
    jit_shutdown();
    unsetenv("ST_CC");
    CHECK(jit_get_kernels(1, srcs3, NULL, fn) == ST_OK && fn[0]);
}

/* ---- a compiler that hangs ---- */

/* Writes an executable fake compiler <cache_dir>/<name>: `--version` answers at once unless
 * hang_version; a compile (or a hanging --version) records its pid in <name>.pid, starts a
 * grandchild sleep (pid in <name>.kid) and waits for it. */
static void write_fake_cc(const char *name, int hang_version, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", cache_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "#!/bin/sh\n");
    if (!hang_version) fprintf(f, "case \"$1\" in --version) echo 'fakecc 1.0'; exit 0;; esac\n");
    fprintf(f, "echo $$ > %s.pid\nsleep 30 &\necho $! > %s.kid\nwait\n", path, path);
    fclose(f);
    chmod(path, 0755);
}

static pid_t read_pid(const char *path, const char *ext) {
    char p[600];
    snprintf(p, sizeof p, "%s%s", path, ext);
    FILE *f = fopen(p, "r");
    long v = 0;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = 0;
        fclose(f);
    }
    remove(p);
    return (pid_t)v;
}

/* 1 when pid is gone or a zombie waiting for init (dead either way), within 2 s. */
static int process_gone(pid_t pid) {
    for (int i = 0; i < 200; i++) {
        if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
        char p[64], st[512];
        snprintf(p, sizeof p, "/proc/%ld/stat", (long)pid);
        FILE *f = fopen(p, "r");
        if (f) {
            size_t n = fread(st, 1, sizeof st - 1, f);
            fclose(f);
            st[n] = 0;
            const char *c = strrchr(st, ')');
            if (c && c[1] == ' ' && c[2] == 'Z') return 1;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* The compiler and its grandchild are dead, and this process has no child left unreaped. */
static void check_no_compiler_left(const char *cc_path) {
    pid_t cpid = read_pid(cc_path, ".pid"), kid = read_pid(cc_path, ".kid");
    CHECK(cpid > 0 && kid > 0);
    if (cpid > 0) CHECK_MSG(process_gone(cpid), "the compiler %ld is still running", (long)cpid);
    if (kid > 0) CHECK_MSG(process_gone(kid), "the compiler's child %ld is still running", (long)kid);
    errno = 0;
    CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After a hang test: the real compiler, no limit changes, and a fresh kernel compiles. */
static void check_normal_compile_after(const char *tagsrc) {
    jit_shutdown();
    unsetenv("ST_CC");
    unsetenv("ST_COMPILE_TIMEOUT");
    st_kernel_fn fn[1] = {0};
    const char *srcs[1] = {tagsrc};
    CHECK(jit_get_kernels(1, srcs, NULL, fn) == ST_OK && fn[0] != NULL);
}

TEST(compile_timeout) {
    char cc[512];
    write_fake_cc("fakecc-hang", 0, cc, sizeof cc);
    jit_shutdown();
    setenv("ST_CC", cc, 1);
    setenv("ST_COMPILE_TIMEOUT", "1", 1);
    st_kernel_fn fn[1] = {0};
    const char *srcs[1] = {"void KNAME(const st_kargs *a) { (void)a; /* timeout */ }\n"};
    const char *hint[1] = {"hang_kernel"};
    double t0 = now_s();
    st_status s = jit_get_kernels(1, srcs, hint, fn);
    double dt = now_s() - t0;
    CHECK(s == ST_ERR_COMPILE && fn[0] == NULL);
    CHECK_MSG(dt >= 0.9 && dt < 5, "the compile took %.2f s with a 1 s limit", dt);
    const char *e = st_last_error();
    CHECK(strstr(e, "st_k_") && strstr(e, "hang_kernel") && strstr(e, "ST_COMPILE_TIMEOUT"));
    check_no_compiler_left(cc);
    CHECK(jit_lookup(srcs[0], 1) == NULL);

    /* a --version that hangs is bounded too */
    write_fake_cc("fakecc-hang-version", 1, cc, sizeof cc);
    jit_shutdown();
    setenv("ST_CC", cc, 1);
    t0 = now_s();
    s = jit_get_kernels(1, srcs, hint, fn);
    dt = now_s() - t0;
    CHECK(s == ST_ERR_COMPILE && strstr(st_last_error(), "ST_COMPILE_TIMEOUT"));
    CHECK_MSG(dt < 5, "--version took %.2f s with a 1 s limit", dt);
    check_no_compiler_left(cc);
    check_normal_compile_after("void KNAME(const st_kargs *a) { (void)a; /* after timeout */ }\n");
}

static void on_alarm(int sig) {
    (void)sig;
    st_interrupt();
}

TEST(compile_interrupt) {
    char cc[512];
    write_fake_cc("fakecc-int", 0, cc, sizeof cc);
    jit_shutdown();
    setenv("ST_CC", cc, 1);
    setenv("ST_COMPILE_TIMEOUT", "60", 1);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;   /* no SA_RESTART: like a Ctrl-C handler, it may cut a wait short */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old);
    struct itimerval it = {{0, 0}, {0, 500000}};
    setitimer(ITIMER_REAL, &it, NULL);
    st_kernel_fn fn[1] = {0};
    const char *srcs[1] = {"void KNAME(const st_kargs *a) { (void)a; /* interrupt */ }\n"};
    const char *hint[1] = {"interrupted_kernel"};
    double t0 = now_s();
    st_status s = jit_get_kernels(1, srcs, hint, fn);
    double dt = now_s() - t0;
    sigaction(SIGALRM, &old, NULL);
    CHECK(s == ST_ERR_INTERRUPT && fn[0] == NULL);
    CHECK_MSG(dt < 5, "the interrupted compile took %.2f s", dt);
    CHECK(strstr(st_last_error(), "interrupted_kernel") != NULL);
    CHECK(!st_rt.interrupted);   /* consumed: the next flush is not failed by it */
    check_no_compiler_left(cc);
    check_normal_compile_after("void KNAME(const st_kargs *a) { (void)a; /* after interrupt */ }\n");
}

TEST(bad_compile_timeout) {
    jit_shutdown();
    setenv("ST_COMPILE_TIMEOUT", "ten", 1);
    st_kernel_fn fn[1] = {0};
    const char *srcs[1] = {"void KNAME(const st_kargs *a) { (void)a; /* bad timeout */ }\n"};
    CHECK(jit_get_kernels(1, srcs, NULL, fn) == ST_ERR_COMPILE);
    CHECK(strstr(st_last_error(), "ST_COMPILE_TIMEOUT='ten'") != NULL);
    check_normal_compile_after(srcs[0]);
}

/* The `stitch` executable in script mode: the first SIGINT (a Ctrl-C) during a compile stops the
 * compile and the script at once, and leaves no compiler behind. Skipped without build/stitch. */
TEST(script_ctrl_c) {
    char exe[1024], stitch[1100], cc[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = 0;
    for (int up = 0; up < 2; up++) {
        char *sl = strrchr(exe, '/');
        if (sl) *sl = 0;
    }
    snprintf(stitch, sizeof stitch, "%s/stitch", exe);
    if (access(stitch, X_OK) != 0) return;
    write_fake_cc("fakecc-script", 0, cc, sizeof cc);
    char errp[600];
    snprintf(errp, sizeof errp, "%s/script.err", cache_dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); }
        setenv("ST_CC", cc, 1);
        setenv("ST_COMPILE_TIMEOUT", "60", 1);
        setenv("ST_JIT_MIN", "0", 1);
        execl(stitch, stitch, "-e", "local a = st.ones(100, 100); print((a * 2 + 1):sum():item())", (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0);
    if (pid <= 0) return;
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    kill(pid, SIGINT);
    int ws = 0, done = 0;
    for (int i = 0; i < 500 && !done; i++) {
        done = waitpid(pid, &ws, WNOHANG) == pid;
        struct timespec t10 = {0, 10000000};
        if (!done) nanosleep(&t10, NULL);
    }
    CHECK_MSG(done, "stitch still runs 5 s after the first SIGINT");
    if (!done) { kill(pid, SIGKILL); waitpid(pid, &ws, 0); }
    CHECK(done && WIFEXITED(ws) && WEXITSTATUS(ws) != 0);
    FILE *f = fopen(errp, "r");
    char out[4096] = "";
    if (f) { size_t k = fread(out, 1, sizeof out - 1, f); out[k] = 0; fclose(f); }
    CHECK_MSG(strstr(out, "interrupted") != NULL, "stitch said: %.300s", out);
    check_no_compiler_left(cc);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

/* ---- the GEMM: kernels call the library's copy (base/gemm.h) through st_kargs.gemm ---- */

/* C = A @ B + ints[3] (M x K times K x N, f32 or f64 by TYPE), through the prelude's GEMM: the
 * source text differs by the added constant, so each is a kernel of its own. */
#define K_MM_SRC(T, S, D)                                                                           \
    "void KNAME(const st_kargs *a) {\n"                                                             \
    "    ST_POOL_USE(a);\n"                                                                         \
    "    const " T " *A = a->bufs[0], *B = a->bufs[1]; " T " *C = a->bufs[2];\n"                    \
    "    const int64_t M = a->ints[0], N = a->ints[1], K = a->ints[2];\n"                           \
    "    int64_t mb, nb;\n"                                                                         \
    "    const int64_t T = st_gemm_plan(" D ", M, N, 1, &mb, &nb);\n"                              \
    "    void *ws = malloc(st_gemm_ws_bytes(" D ", mb, nb, K));\n"                                 \
    "    const st_gemm g = {" D ", M, N, K, A, K, 1, B, N, 1, C, N, NULL, 0, 0};\n"                \
    "    for (int64_t t = 0; t < T; t++) st_gemm_task_" S "(&g, t, mb, nb, ws);\n"                 \
    "    free(ws);\n"                                                                               \
    "    for (int64_t i = 0; i < M * N; i++) C[i] += (" T ")a->ints[3];\n"                          \
    "}\n"

/* A table that counts the tasks it runs, then runs them on the library's copy. */
static int spy_tasks;
static void spy_task(const st_gemm *g, int64_t t, int64_t mb, int64_t nb, void *ws) {
    spy_tasks++;
    base_gemm()->task[g->dt](g, t, mb, nb, ws);
}

/* Runs an f32 (dbl 0) or f64 GEMM kernel on 37 x 45 x 300 (two k blocks, edge panels) with the
 * GEMM table api and checks every element against fma sums in k order plus 3 (the GEMM's bits). */
static void check_mm(st_kernel_fn fn, int dbl, const st_gemm_api *api) {
    enum { M = 37, N = 45, K = 300 };
    static float a[M * K], b[K * N], c[M * N];
    static double ad[M * K], bd[K * N], cd[M * N];
    for (int i = 0; i < M * K; i++) ad[i] = a[i] = (float)((i * 7 % 23) - 11) / 8.0f;
    for (int i = 0; i < K * N; i++) bd[i] = b[i] = (float)((i * 5 % 19) - 9) / 16.0f + 1e-3f * (float)(i % 7);
    memset(c, 0, sizeof c);
    memset(cd, 0, sizeof cd);
    int32_t err = 0;
    int64_t ints[4] = {M, N, K, 3};
    void *bufs[3] = {dbl ? (void *)ad : (void *)a, dbl ? (void *)bd : (void *)b, dbl ? (void *)cd : (void *)c};
    st_kargs ka = {bufs, ints, NULL, &err, 1, NULL, api};
    fn(&ka);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            if (dbl) {
                double acc = 0;
                for (int k = 0; k < K; k++) acc = fma(ad[i * K + k], bd[k * N + j], acc);
                bad += cd[i * N + j] != acc + 3.0;
            } else {
                float acc = 0;
                for (int k = 0; k < K; k++) acc = fmaf(a[i * K + k], b[k * N + j], acc);
                bad += c[i * N + j] != acc + 3.0f;
            }
        }
    CHECK_MSG(bad == 0, "%d of %d elements differ from the fma sums", bad, M * N);
}

/* A matmul kernel is one compiler run (no GEMM of its own to build, no object beside it), runs
 * the table its st_kargs brings (every copy: the same bits), in the synchronous and the background
 * tier alike. */
TEST(gemm_from_library) {
    jit_shutdown();
    char o[512];
    st_stats_t s0 = snap();
    const char *srcs[1] = {K_MM_SRC("float", "f32", "ST_GEMM_F32")};
    st_kernel_fn fn = NULL;
    CHECK(jit_get_kernels(1, srcs, NULL, &fn) == ST_OK && fn != NULL);
    CHECK_MSG(snap().compile_calls == s0.compile_calls + 1, "%llu compiler runs",
              (unsigned long long)(snap().compile_calls - s0.compile_calls));
    CHECK(find_file(".o", o, sizeof o, 0) == 0);
    for (int isa = 0; fn && isa < BASE_GEMM_COPIES; isa++)
        if (base_gemm_copy(isa)) check_mm(fn, 0, base_gemm_copy(isa));
    /* the kernel calls the table it is given, once per task of its plan (37 x 45: one task) */
    st_gemm_api spy = *base_gemm();
    spy.task[ST_GEMM_F32] = spy_task;
    spy_tasks = 0;
    if (fn) check_mm(fn, 0, &spy);
    CHECK_EQ_INT(spy_tasks, 1);
    /* f64, in the background tier */
    const char *src64[1] = {K_MM_SRC("double", "f64", "ST_GEMM_F64")};
    jit_async *job = NULL;
    fn = NULL;
    s0 = snap();
    CHECK(jit_async_start(1, src64, NULL, 1, &fn, &job) == ST_OK && job != NULL);
    st_status s = ST_ERR_INTERNAL;
    if (job) {
        CHECK(jit_async_poll(job, 1, &fn, &s) == 1);
        jit_async_free(job);
    }
    CHECK(s == ST_OK && fn != NULL);
    CHECK(snap().compile_calls == s0.compile_calls + 1);
    for (int isa = 0; fn && isa < BASE_GEMM_COPIES; isa++)
        if (base_gemm_copy(isa)) check_mm(fn, 1, base_gemm_copy(isa));
    /* a GEMM object an older version left (gemm-<ctx>-<type>.o) goes once stale, unless recent */
    char old_o[700], new_o[700];
    snprintf(old_o, sizeof old_o, "%s/gemm-0123456789abcdef0123456789abcdef-f32.o", cache_dir);
    snprintf(new_o, sizeof new_o, "%s/gemm-0123456789abcdef0123456789abcdee-f64.o", cache_dir);
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(i ? new_o : old_o, "wb");
        CHECK(f != NULL);
        if (f) fclose(f);
    }
    time_t old = time(NULL) - 3 * 3600; /* older than any stale rule */
    struct timespec ts[2] = {{old, 0}, {old, 0}};
    CHECK(utimensat(AT_FDCWD, old_o, ts, 0) == 0);
    CHECK(jit_cache_prune() == ST_OK);
    CHECK(!file_exists(old_o));
    CHECK(file_exists(new_o));
    unlink(new_o);
}

/* At most one background compiler per CPU but one: a job that finds none free waits (not running),
 * and starts once a poll finds one, which the jobs' own polls free (reaping a compiler whose owner
 * never polls again); a kernel another job compiled meanwhile is not compiled again. */
static int run_err_kernel(st_kernel_fn fn) {
    int32_t err = 0;
    st_kargs a = {NULL, NULL, NULL, &err, 1, NULL, NULL};
    fn(&a);
    return err;
}
TEST(async_slots_and_reap) {
    jit_shutdown();
    const int slots = dev_cpu_threads() > 1 ? dev_cpu_threads() - 1 : 1;
    enum { MAXS = 64 };
    if (slots > MAXS) return;
    char text[MAXS][96];
    const char *src[MAXS];
    st_kernel_fn fn[MAXS];
    jit_async *job[MAXS];
    st_stats_t s0 = snap();
    for (int i = 0; i < slots; i++) { /* every slot taken; the first job's owner never polls */
        snprintf(text[i], sizeof text[i], "void KNAME(const st_kargs *a) { *a->err = %d; } /* slot */\n", 700 + i);
        src[i] = text[i];
        fn[i] = NULL;
        job[i] = NULL;
        CHECK(jit_async_start(1, &src[i], NULL, 1, &fn[i], &job[i]) == ST_OK && job[i] != NULL);
        if (job[i]) CHECK(jit_async_running(job[i]));
    }
    /* the first job's kernel again: no compiler free, so it waits */
    st_kernel_fn w = NULL;
    jit_async *wj = NULL;
    CHECK(jit_async_start(1, &src[0], NULL, 1, &w, &wj) == ST_OK && wj != NULL);
    if (!wj) return;
    CHECK(!jit_async_running(wj));
    for (int i = 1; i < slots; i++) { /* the others end and are taken by their owners */
        st_status s = ST_ERR_INTERNAL;
        if (job[i]) CHECK(jit_async_poll(job[i], 1, &fn[i], &s) == 1 && s == ST_OK);
        if (fn[i]) CHECK_EQ_INT(run_err_kernel(fn[i]), 700 + i);
    }
    st_status s = ST_ERR_INTERNAL;
    int done = 0;
    for (int i = 0; i < 6000 && !done; i++) { /* up to 2 minutes, never blocking */
        done = jit_async_poll(wj, 0, &w, &s);
        if (!done) usleep(20000);
    }
    CHECK(done && s == ST_OK && w != NULL);
    if (w) CHECK_EQ_INT(run_err_kernel(w), 700);
    /* one compiler run per slot: the waiting job found its kernel compiled by the first */
    CHECK_MSG(snap().compile_calls == s0.compile_calls + (uint64_t)slots, "%llu compiler runs for %d slots",
              (unsigned long long)(snap().compile_calls - s0.compile_calls), slots);
    for (int i = 0; i < slots; i++) jit_async_free(job[i]);
    jit_async_free(wj);
}

/* A job for a plan's first run (repeats 0: it may never run again) gives its compiler up to one
 * whose plan runs again (repeats 1) that finds none free: the newest such job stops (its compiler
 * killed) and waits; it gets its kernel later all the same. A first-run job stops no one. The
 * first-run jobs' compiler is slowed (a wrapper that sleeps 2 s on their sources) so that they are
 * still running when the repeating job comes. */
static void write_slow_cc(char *path, size_t cap) {
    snprintf(path, cap, "%s/slowcc", cache_dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "#!/bin/sh\ncase \"$1\" in --version) exec gcc --version;; esac\n"
               "for a in \"$@\"; do case \"$a\" in *.c) grep -q slow-compile \"$a\" && sleep 2;; esac; done\n"
               "exec gcc \"$@\"\n");
    fclose(f);
    chmod(path, 0755);
}

TEST(async_first_run_yields) {
    char cc[512];
    write_slow_cc(cc, sizeof cc);
    jit_shutdown();
    setenv("ST_CC", cc, 1);
    const int slots = dev_cpu_threads() > 1 ? dev_cpu_threads() - 1 : 1;
    enum { MAXS = 64 };
    if (slots > MAXS) return;
    char text[MAXS + 2][96];
    const char *src[MAXS + 2];
    st_kernel_fn fn[MAXS + 2];
    jit_async *job[MAXS + 2];
    for (int i = 0; i < slots + 2; i++) {
        snprintf(text[i], sizeof text[i], "void KNAME(const st_kargs *a) { *a->err = %d; } /* %s */\n", 800 + i,
                 i == slots ? "repeats" : "slow-compile");
        src[i] = text[i];
        fn[i] = NULL;
        job[i] = NULL;
    }
    for (int i = 0; i < slots; i++) { /* every slot taken by a first run's job */
        CHECK(jit_async_start(1, &src[i], NULL, 0, &fn[i], &job[i]) == ST_OK && job[i] != NULL);
        if (job[i]) CHECK(jit_async_running(job[i]));
    }
    /* a plan that runs again: it starts at once, the newest first-run job waits */
    CHECK(jit_async_start(1, &src[slots], NULL, 1, &fn[slots], &job[slots]) == ST_OK && job[slots] != NULL);
    if (job[slots]) CHECK(jit_async_running(job[slots]));
    if (job[slots - 1]) CHECK(!jit_async_running(job[slots - 1]));
    for (int i = 0; i < slots - 1; i++)
        if (job[i]) CHECK(jit_async_running(job[i]));
    /* another first run stops no one */
    CHECK(jit_async_start(1, &src[slots + 1], NULL, 0, &fn[slots + 1], &job[slots + 1]) == ST_OK &&
          job[slots + 1] != NULL);
    if (job[slots + 1]) CHECK(!jit_async_running(job[slots + 1]));
    for (int i = 0; i < slots + 2; i++) { /* every job gets its kernel, the stopped one included */
        st_status s = ST_ERR_INTERNAL;
        if (job[i]) CHECK(jit_async_poll(job[i], 1, &fn[i], &s) == 1 && s == ST_OK);
        CHECK(fn[i] != NULL);
        if (fn[i]) CHECK_EQ_INT(run_err_kernel(fn[i]), 800 + i);
        jit_async_free(job[i]);
    }
    check_normal_compile_after("void KNAME(const st_kargs *a) { (void)a; /* after slow cc */ }\n");
}

int main(void) {
    srcs3[0] = K_AXPB;
    srcs3[1] = K_SUM;
    srcs3[2] = K_MULSUB;
    snprintf(cache_dir, sizeof cache_dir, "/tmp/stitch-test-jit-XXXXXX");
    if (!mkdtemp(cache_dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    setenv("ST_CACHE_DIR", cache_dir, 1);
    unsetenv("ST_CC");
    unsetenv("ST_COMPILE_TIMEOUT");
    st_runtime_init();

    RUN(batch_compiles_once);
    RUN(memory_hits);
    RUN(disk_hits);
    RUN(truncated_so);
    RUN(corrupt_so);
    RUN(missing_so);
    RUN(corrupt_k);
    RUN(fifo_k);
    RUN(fifo_so);
    RUN(mixed_and_duplicates);
    RUN(compile_error);
    RUN(bad_cc);
    RUN(compile_timeout);
    RUN(compile_interrupt);
    RUN(bad_compile_timeout);
    RUN(script_ctrl_c);
    RUN(gemm_from_library);
    RUN(async_slots_and_reap);
    RUN(async_first_run_yields);

    jit_shutdown();
    nftw(cache_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    TEST_MAIN_END();
}
