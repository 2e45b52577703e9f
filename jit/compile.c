/*
 * compile.c — the CPU kernel compiler driver: finds the C compiler (ST_CC), computes its identity
 * once, and turns one translation unit into one shared object with one compiler invocation.
 *
 * Invariants:
 *  - No shell is ever involved: the compiler is started with posix_spawn and an argv array, its
 *    stdin is /dev/null, its stdout+stderr go to a log file. ST_CC is split on blanks (no quoting,
 *    no expansion), so a user's cache dir or source can never be interpreted as shell text.
 *  - Nothing here exits or aborts: a compiler that is missing, cannot start, crashes or rejects the
 *    source is an ST_ERR_COMPILE error carrying the (trimmed) log and the saved source path.
 *  - Files that other processes may read (the .so) appear only by rename(), complete. Files that
 *    only this process touches (the source, the log) have unique mkstemp names.
 *  - Every compiler run is bounded: it starts as the leader of its own process group (so a
 *    terminal's Ctrl-C reaches stitch, not the compiler), and the wait polls with a deadline
 *    (ST_COMPILE_TIMEOUT) and st_interrupt(). On either, the whole group is killed with SIGKILL
 *    and the compiler reaped before the error returns: no compiler outlives the call that started it.
 */
#include "jit/compile.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The fixed flag list, part of every kernel key (changing it invalidates the disk cache):
 *   -O3 -march=native        speed; the CPU model is part of the identity because of -march
 *   -fPIC -shared            a dlopen-able object
 *   -fopenmp                 kernels use `#pragma omp` for threads (links libgomp)
 *   -std=c11                 the language the renderers emit
 *   -ffp-contract=off        no a*b+c -> fma: fused kernels must round like the interpreter does
 *   -fno-math-errno          lets sqrt & co. vectorize; we never read errno in kernels
 *   -fno-trapping-math       lets GCC if-convert (so vectorize) a loop where it had split a
 *                            clamp into branches around a float multiply (exp's); without AVX-512's
 *                            masks it may not run such an op on lanes that had not, while it "could
 *                            trap". Results are the same; kernels never read the FP exception flags
 *   -Werror=implicit-function-declaration
 *                            a missing prelude function is a compile error with a log line, not a
 *                            dlopen "undefined symbol" later
 *   -pipe -g0                compile latency: no temp files for the assembler, no debug info
 *   -lm (after the source)   libm for the math functions the prelude calls */
static const char *const jit_flags[] = {
    "-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-std=c11", "-ffp-contract=off",
    "-fno-math-errno", "-fno-trapping-math", "-Werror=implicit-function-declaration", "-pipe", "-g0",
};
#define JIT_NFLAGS ((int)(sizeof jit_flags / sizeof jit_flags[0]))
#define JIT_MAX_WORDS 16
#define JIT_LOG_HEAD 3072 /* the first errors are the informative ones */
#define JIT_LOG_TAIL 1024

static struct {
    int ready;
    char *words;                 /* st_strdup(ST_CC), split in place */
    char *path;                  /* resolved compiler path (argv[0] of every spawn) */
    const char *argv[JIT_MAX_WORDS]; /* [0] = path, then ST_CC's extra words */
    int nargv;
    int64_t timeout_s;           /* ST_COMPILE_TIMEOUT: seconds per compiler run, 0 = no limit */
    char *identity;
} cc;

#define JIT_TIMEOUT_DEFAULT 300 /* seconds: far above any real batch, short of "forever" */

/* ---- spawning (no shell) ---- */

/* Starts argv[0] (a path) with stdin from /dev/null and stdout+stderr on out_fd, as the leader
 * of a new process group (killed as a whole by wait_child). Returns 0 and the child's pid, or an
 * errno value when it could not be started. */
static int spawn_start(const char *const *argv, int out_fd, pid_t *pid) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc != 0) return rc;
    rc = posix_spawnattr_init(&at);
    if (rc != 0) { posix_spawn_file_actions_destroy(&fa); return rc; }
    rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
    if (rc == 0) rc = posix_spawnattr_setpgroup(&at, 0);
    if (rc == 0) rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    /* posix_spawn's argv is char *const[] for historical reasons; the strings are not written. */
    if (rc == 0) rc = posix_spawn(pid, argv[0], &fa, &at, (char *const *)(uintptr_t)argv, environ);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

/* Kills a child started by spawn_start (its whole process group: a driver's cc1/as/ld too) and
 * reaps it. */
static void kill_child(pid_t pid, int *wstatus) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL); /* in case it left its group */
    while (waitpid(pid, wstatus, 0) < 0 && errno == EINTR) {}
}

/* wait_child's answers besides 0 and errno values (negative, so they never clash). */
enum { JIT_WAIT_TIMEOUT = -1, JIT_WAIT_INTERRUPT = -2 };

/* Waits for pid (a process group leader started by spawn_start): 0 and its wait status, or an
 * errno value. It polls (sleeps of 1 ms doubling to 20 ms: a short compile is not slowed, a
 * signal cuts the sleep short), and when the deadline (st_now_ms; 0: none) has passed or
 * st_interrupt() was called, it kills the child's whole process group, reaps the child and
 * answers JIT_WAIT_TIMEOUT or JIT_WAIT_INTERRUPT (the interrupt flag is left set for the caller). */
static int wait_child(pid_t pid, double deadline, int *wstatus) {
    long step_ns = 1000000;
    for (;;) {
        pid_t r = waitpid(pid, wstatus, WNOHANG);
        if (r == pid) return 0;
        if (r < 0 && errno != EINTR) return errno;
        int why = st_rt.interrupted ? JIT_WAIT_INTERRUPT
                  : deadline > 0 && st_now_ms() >= deadline ? JIT_WAIT_TIMEOUT : 0;
        if (why) {
            kill_child(pid, wstatus);
            return why;
        }
        struct timespec ts = {0, step_ns};
        nanosleep(&ts, NULL); /* EINTR (a Ctrl-C) just ends the sleep early */
        if (step_ns < 20000000) step_ns *= 2;
    }
}

/* "exited with status 1" / "was killed by signal 11". */
static void describe_wait(int ws, char *buf, size_t n) {
    if (WIFEXITED(ws)) snprintf(buf, n, "exited with status %d", WEXITSTATUS(ws));
    else if (WIFSIGNALED(ws)) snprintf(buf, n, "was killed by signal %d", WTERMSIG(ws));
    else snprintf(buf, n, "ended with wait status %d", ws);
}

/* Reads fd (from offset 0) into a NUL-terminated st_malloc'ed string, keeping the first head and
 * the last tail bytes when longer, with a note of what was cut. NULL on failure (error set). */
static char *read_trimmed(int fd, size_t head, size_t tail) {
    struct stat st;
    if (fstat(fd, &st) != 0) { st_error(ST_ERR_IO, "cannot read the compiler log: %s", strerror(errno)); return NULL; }
    size_t size = (size_t)st.st_size;
    int cut = size > head + tail;
    char *out = st_malloc((cut ? head + tail + 64 : size) + 1);
    if (!out) return NULL;
    size_t len = 0;
    size_t parts[2][2] = {{0, cut ? head : size}, {size - tail, tail}};
    for (int k = 0; k < (cut ? 2 : 1); k++) {
        size_t off = parts[k][0], want = parts[k][1];
        while (want > 0) {
            ssize_t r = pread(fd, out + len, want, (off_t)off);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            len += (size_t)r; off += (size_t)r; want -= (size_t)r;
        }
        if (k == 0 && cut)
            len += (size_t)snprintf(out + len, 64, "\n[... %zu bytes of log omitted ...]\n", size - head - tail);
    }
    out[len] = '\0';
    return out;
}

/* ---- the compiler ---- */

/* Finds an executable for name: as given when it contains '/', else along PATH. realpath'ed into
 * an st_malloc'ed string; NULL when not found (no error set). */
static char *resolve_exe(const char *name) {
    char buf[4096];
    if (strchr(name, '/')) {
        if (access(name, X_OK) != 0) return NULL;
        char *r = realpath(name, NULL);
        if (!r) return NULL;
        char *s = st_strdup(r);
        free(r); /* realpath allocated it with malloc */
        return s;
    }
    const char *path = base_env(SET_PATH);
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        int n = len ? snprintf(buf, sizeof buf, "%.*s/%s", (int)len, path, name)
                    : snprintf(buf, sizeof buf, "./%s", name);
        struct stat st;
        if (n > 0 && n < (int)sizeof buf && stat(buf, &st) == 0 && S_ISREG(st.st_mode) &&
            access(buf, X_OK) == 0)
            return resolve_exe(buf);
        path += len;
        if (*path == ':') path++;
    }
    return NULL;
}

/* Appends the first "model name" and "flags" lines of /proc/cpuinfo (best effort). */
static void append_cpu(char *buf, size_t cap) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192];
    int got_model = 0, got_flags = 0;
    while ((!got_model || !got_flags) && fgets(line, sizeof line, f)) {
        int is_model = !strncmp(line, "model name", 10), is_flags = !strncmp(line, "flags", 5);
        if ((is_model && !got_model) || (is_flags && !got_flags)) {
            size_t len = strlen(buf);
            snprintf(buf + len, cap - len, "%s", line);
            got_model |= is_model;
            got_flags |= is_flags;
        }
    }
    fclose(f);
}

void jit_compiler_shutdown(void) {
    st_free(cc.words);
    st_free(cc.path);
    st_free(cc.identity);
    memset(&cc, 0, sizeof cc);
}

st_status jit_compiler_init(void) {
    if (cc.ready) return ST_OK;
    jit_compiler_shutdown();
    const char *env = base_env(SET_CC);
    if (!env) env = "cc";
    cc.words = st_strdup(env);
    if (!cc.words) return ST_ERR_OOM;
    char *first = NULL;
    char *save = NULL;
    for (char *w = strtok_r(cc.words, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
        if (!first) { first = w; cc.nargv = 1; continue; }
        if (cc.nargv >= JIT_MAX_WORDS) {
            st_status s = st_error(ST_ERR_COMPILE, "ST_CC='%s' has too many words (at most %d)", env,
                                   JIT_MAX_WORDS);
            jit_compiler_shutdown();
            return s;
        }
        cc.argv[cc.nargv++] = w;
    }
    if (!first) {
        jit_compiler_shutdown();
        return st_error(ST_ERR_COMPILE, "ST_CC is blank: set it to a C compiler such as cc, gcc or clang");
    }
    cc.path = resolve_exe(first);
    if (!cc.path) {
        st_status s = st_error(ST_ERR_COMPILE,
                               "cannot find the C compiler '%s' (ST_CC='%s'): not an executable file%s; "
                               "set ST_CC to a C compiler such as cc, gcc or clang",
                               first, env, strchr(first, '/') ? "" : " on PATH");
        jit_compiler_shutdown();
        return s;
    }
    cc.argv[0] = cc.path;
    int bad = 0;
    cc.timeout_s = base_env_int(SET_COMPILE_TIMEOUT, JIT_TIMEOUT_DEFAULT, 0, INT32_MAX, &bad);
    if (bad) {
        st_status s = st_error(ST_ERR_COMPILE,
                               "ST_COMPILE_TIMEOUT='%s' is not a number of seconds: set it to a whole number "
                               "(0 for no limit; default %d)",
                               base_env(SET_COMPILE_TIMEOUT), JIT_TIMEOUT_DEFAULT);
        jit_compiler_shutdown();
        return s;
    }

    /* Identity: `<cc> [words] --version`, first line. Output into an anonymous file, read once
     * the compiler has ended, so the bounded wait is the only place that can block. */
    int ofd = memfd_create("stitch-cc-version", MFD_CLOEXEC);
    if (ofd < 0) {
        jit_compiler_shutdown();
        return st_error(ST_ERR_IO, "cannot create a file for the C compiler's output: %s", strerror(errno));
    }
    const char *argv[JIT_MAX_WORDS + 2];
    int na = 0;
    for (int i = 0; i < cc.nargv; i++) argv[na++] = cc.argv[i];
    argv[na++] = "--version";
    argv[na] = NULL;
    pid_t pid;
    int ws = 0;
    int rc = spawn_start(argv, ofd, &pid);
    if (rc == 0) rc = wait_child(pid, cc.timeout_s > 0 ? st_now_ms() + 1e3 * (double)cc.timeout_s : 0, &ws);
    char out[512];
    ssize_t len = rc == 0 ? pread(ofd, out, sizeof out - 1, 0) : 0;
    close(ofd);
    out[len > 0 ? len : 0] = '\0';
    if (rc == JIT_WAIT_TIMEOUT || rc == JIT_WAIT_INTERRUPT) {
        st_status s = rc == JIT_WAIT_TIMEOUT
            ? st_error(ST_ERR_COMPILE,
                       "the C compiler %s (ST_CC='%s') did not answer '--version' within %lld s and was stopped; "
                       "raise ST_COMPILE_TIMEOUT (seconds, 0 for no limit) or set ST_CC to a working compiler",
                       cc.path, env, (long long)cc.timeout_s)
            : st_error(ST_ERR_INTERRUPT, "interrupted while asking the C compiler %s (ST_CC='%s') for its version",
                       cc.path, env);
        if (rc == JIT_WAIT_INTERRUPT) st_rt.interrupted = 0;
        jit_compiler_shutdown();
        return s;
    }
    if (rc != 0) {
        st_status s = st_error(ST_ERR_COMPILE, "cannot start the C compiler %s (ST_CC='%s'): %s", cc.path, env,
                               strerror(rc));
        jit_compiler_shutdown();
        return s;
    }
    out[strcspn(out, "\r\n")] = '\0';
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0 || !out[0]) {
        char why[64];
        describe_wait(ws, why, sizeof why);
        st_status s = st_error(ST_ERR_COMPILE,
                               "the C compiler %s (ST_CC='%s') does not work: '%s --version' %s%s%s",
                               cc.path, env, cc.path, why, out[0] ? ": " : "", out);
        jit_compiler_shutdown();
        return s;
    }

    char idbuf[16384];
    int n = snprintf(idbuf, sizeof idbuf, "cc: %s\n", cc.path);
    for (int i = 1; i < cc.nargv && n < (int)sizeof idbuf; i++)
        n += snprintf(idbuf + n, sizeof idbuf - (size_t)n, "arg: %s\n", cc.argv[i]);
    if (n < (int)sizeof idbuf) snprintf(idbuf + n, sizeof idbuf - (size_t)n, "version: %s\n", out);
    append_cpu(idbuf, sizeof idbuf);
    cc.identity = st_strdup(idbuf);
    if (!cc.identity) { jit_compiler_shutdown(); return ST_ERR_OOM; }
    cc.ready = 1;
    return ST_OK;
}

const char *jit_compiler_identity(void) { return cc.identity; }

const char *jit_compile_flags(void) {
    static char joined[512];
    if (!joined[0]) {
        size_t n = 0;
        for (int i = 0; i < JIT_NFLAGS; i++)
            n += (size_t)snprintf(joined + n, sizeof joined - n, "%s%s", i ? " " : "", jit_flags[i]);
        n += (size_t)snprintf(joined + n, sizeof joined - n, " -lm");
    }
    return joined;
}

/* The first half of a compile: source and log written, the output's temp name made, the compiler
 * started. On error nothing is left running and the files are removed (the source is kept when
 * the compiler could not be started, to name it). */
st_status jit_compile_start(const char *dir, const char *tag, const char *what, const char *text, size_t n,
                            jit_cjob *job) {
    memset(job, 0, sizeof *job);
    job->lfd = -1;
    st_status s = jit_compiler_init();
    if (s != ST_OK) return s;
    char fdir[4096];
    snprintf(job->what, sizeof job->what, "%s", what);
    if (snprintf(job->dir, sizeof job->dir, "%s", dir) >= (int)sizeof job->dir)
        return st_error(ST_ERR_IO, "kernel cache path too long: %s", dir);
    snprintf(fdir, sizeof fdir, "%s/failed", dir);
    if (base_mkdir_p(fdir) != 0)
        return st_error(ST_ERR_IO, "cannot create the kernel cache directory %s: %s", fdir, strerror(errno));

    /* Source: unique name, only this process reads it. The compiler reports errors against this
     * path, and it is where a failing source stays, so the log and the file agree. */
    char *src = job->src, *logp = job->logp, *tmp = job->tmp;
    if (snprintf(src, sizeof job->src, "%s/%s-XXXXXX.c", fdir, tag) >= (int)sizeof job->src)
        return st_error(ST_ERR_IO, "kernel cache path too long: %s", dir);
    int sfd = mkstemps(src, 2);
    if (sfd < 0) return st_error(ST_ERR_IO, "cannot create a kernel source file in %s: %s", fdir, strerror(errno));
    mode_t um = umask(0);
    umask(um);
    (void)fchmod(sfd, 0666 & ~um); /* a file for the user to read, not a private temp */
    int bad = base_write_all(sfd, text, n);
    if (close(sfd) != 0) bad = -1;
    if (bad) {
        s = st_error(ST_ERR_IO, "cannot write the kernel source %s: %s", src, strerror(errno));
        unlink(src);
        return s;
    }
    /* Log next to it: same unique stem, ".log". */
    size_t sl = strlen(src);
    snprintf(logp, sizeof job->logp, "%.*s.log", (int)(sl - 2), src);
    int lfd = open(logp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (lfd < 0) {
        s = st_error(ST_ERR_IO, "cannot create the compiler log %s: %s", logp, strerror(errno));
        unlink(src);
        return s;
    }
    /* Output: a hidden temp name in dir (same file system), renamed once the compiler succeeded. */
    snprintf(tmp, sizeof job->tmp, "%s/.%s-XXXXXX.tmp", dir, tag);
    int tfd = mkstemps(tmp, 4);
    if (tfd < 0) {
        s = st_error(ST_ERR_IO, "cannot create a temp file in %s: %s", dir, strerror(errno));
        close(lfd); unlink(logp); unlink(src);
        return s;
    }
    close(tfd);

    const char *argv[JIT_MAX_WORDS + JIT_NFLAGS + 16];
    int na = 0;
    for (int i = 0; i < cc.nargv; i++) argv[na++] = cc.argv[i];
    for (int i = 0; i < JIT_NFLAGS; i++) argv[na++] = jit_flags[i];
    argv[na++] = "-o";
    argv[na++] = tmp;
    argv[na++] = src;
    argv[na++] = "-lm";
    argv[na] = NULL;

    job->t0 = st_now_ms();
    job->deadline = cc.timeout_s > 0 ? job->t0 + 1e3 * (double)cc.timeout_s : 0;
    int rc = spawn_start(argv, lfd, &job->pid);
    if (rc != 0) {
        s = st_error(ST_ERR_COMPILE, "cannot start the C compiler %s: %s (source kept in %s)", cc.path,
                     strerror(rc), src);
        close(lfd); unlink(logp); unlink(tmp);
        job->pid = 0;
        return s;
    }
    job->lfd = lfd;
    st_rt.compiles_running++;
    return ST_OK;
}

/* The second half: the compiler's end (rc from wait_child, ws its status) turned into the object's
 * final name or an error; the job's files are removed or kept as jit_compile_batch says. */
static st_status compile_finish(jit_cjob *job, int rc, int ws, char *so_name, size_t cap, double *ms) {
    const char *what = job->what, *src = job->src, *logp = job->logp, *tmp = job->tmp;
    int lfd = job->lfd;
    st_status s;
    char dst[4096];
    *ms = st_now_ms() - job->t0;
    job->pid = 0;
    job->lfd = -1;
    st_rt.compiles_running--;
    if (rc == JIT_WAIT_INTERRUPT) { /* the user asked to stop: nothing worth keeping */
        st_rt.interrupted = 0;
        close(lfd); unlink(logp); unlink(tmp); unlink(src);
        return st_error(ST_ERR_INTERRUPT, "interrupted while compiling %s: the C compiler %s was stopped", what,
                        cc.path);
    }
    if (rc == JIT_WAIT_TIMEOUT) { /* the source stays, to reproduce with the compiler by hand */
        close(lfd); unlink(tmp);
        return st_error(ST_ERR_COMPILE,
                        "compiling %s took longer than %lld s: the C compiler %s was stopped; raise "
                        "ST_COMPILE_TIMEOUT (seconds, 0 for no limit) if it is just slow (source saved in %s, "
                        "log in %s)",
                        what, (long long)cc.timeout_s, cc.path, src, logp);
    }
    if (rc != 0) {
        s = st_error(ST_ERR_COMPILE, "cannot wait for the C compiler %s: %s (source kept in %s)", cc.path,
                     strerror(rc), src);
        close(lfd); unlink(logp); unlink(tmp);
        return s;
    }
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        char why[64];
        describe_wait(ws, why, sizeof why);
        char *log = read_trimmed(lfd, JIT_LOG_HEAD, JIT_LOG_TAIL);
        close(lfd);
        unlink(tmp);
        if (!log) return st_last_status();
        s = st_error(ST_ERR_COMPILE, "kernel compilation failed: %s %s; source saved in %s, full log in %s\n%s",
                     cc.path, why, src, logp, log);
        st_free(log);
        return s;
    }
    close(lfd);

    /* tmp is ".<tag>-XXXXXX.tmp": the final name reuses its unique part, so a rename never
     * replaces an object that this or another process may have mapped. */
    const char *base = strrchr(tmp, '/') + 1;
    size_t bl = strlen(base);
    if ((size_t)snprintf(so_name, cap, "%.*s.so", (int)(bl - 5), base + 1) >= cap ||
        snprintf(dst, sizeof dst, "%s/%s", job->dir, so_name) >= (int)sizeof dst) {
        unlink(tmp);
        return st_error(ST_ERR_IO, "kernel cache path too long: %s", job->dir);
    }
    if (rename(tmp, dst) != 0) {
        s = st_error(ST_ERR_IO, "cannot rename %s to %s: %s", tmp, dst, strerror(errno));
        unlink(tmp);
        return s;
    }
    unlink(src);
    unlink(logp);
    return ST_OK;
}

int jit_compile_poll(jit_cjob *job, int block, char *so_name, size_t cap, double *ms, st_status *status) {
    int ws = 0, rc;
    if (block) {
        rc = wait_child(job->pid, job->deadline, &ws);
    } else {
        pid_t r = waitpid(job->pid, &ws, WNOHANG);
        if (r == 0) {
            if (!(job->deadline > 0 && st_now_ms() >= job->deadline)) return 0;
            kill_child(job->pid, &ws);
            rc = JIT_WAIT_TIMEOUT;
        } else {
            rc = r == job->pid ? 0 : errno;
        }
    }
    *status = compile_finish(job, rc, ws, so_name, cap, ms);
    return 1;
}

void jit_compile_cancel(jit_cjob *job) {
    if (!job->pid) return;
    int ws;
    kill_child(job->pid, &ws);
    close(job->lfd);
    unlink(job->tmp);
    unlink(job->src);
    unlink(job->logp);
    job->pid = 0;
    job->lfd = -1;
    st_rt.compiles_running--;
}

st_status jit_compile_batch(const char *dir, const char *tag, const char *what, const char *text, size_t n,
                            char *so_name, size_t cap, double *ms) {
    *ms = 0;
    jit_cjob *job = st_malloc(sizeof *job);
    if (!job) return st_last_status();
    st_status s = jit_compile_start(dir, tag, what, text, n, job);
    if (s == ST_OK) (void)jit_compile_poll(job, 1, so_name, cap, ms, &s);
    st_free(job);
    return s;
}

void jit_comment_ident(const char *s, char *out, size_t cap) {
    size_t k = 0;
    for (; *s && k + 1 < cap; s++)
        out[k++] = ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')) ? *s : '_';
    if (cap) out[k] = '\0';
}
