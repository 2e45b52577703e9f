/*
 * fake_cuda.h — tests: a GPU without a GPU. Builds the fake libcuda.so.1 of tests/test_cuda_driver.c
 * (host memory behind the driver API; cubins load, their launches are recorded, not run) into a
 * temp dir, runs this test program again as a child with ST_CUDA_LIB pointing at it (the driver is
 * probed once per process, so the fake must be there from the start), and reads the fake's
 * counters from inside that child.
 *
 * Usage: main() calls fake_cuda_child(argc, argv, body) first (the child runs body and exits with
 * its result), then fake_cuda_spawn(name) from a test (the parent: builds, runs, cleans up, and
 * fails the current test with the child's report). Run from the repository root.
 */
#ifndef ST_FAKE_CUDA_H
#define ST_FAKE_CUDA_H

#include "test.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define FAKE_CUDA_ARG "--fake-child"

/* In the child: a counter of the fake driver (fakecu_stat: "loads", "unloads", "launches",
 * "grid_x", "violations", ...); -1000 when the loaded driver is not the fake. */
static inline int fake_cuda_stat(const char *what) {
    static void *h;
    const char *lib = getenv("ST_CUDA_LIB");
    if (!h && lib) h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    void *sym = h ? dlsym(h, "fakecu_stat") : NULL;
    int (*f)(const char *);
    if (!sym) return -1000;
    memcpy(&f, &sym, sizeof f);
    return f(what);
}

/* In the child: a function the fake driver exports (fakecu_fault, fakecu_raise, fakecu_fail: see
 * tests/test_cuda_driver.c), NULL when the loaded driver is not the fake. */
static inline void *fake_cuda_sym(const char *name) {
    void *h = getenv("ST_CUDA_LIB") ? dlopen(getenv("ST_CUDA_LIB"), RTLD_NOW | RTLD_NOLOAD) : NULL;
    void *sym = h ? dlsym(h, name) : NULL;
    if (h) dlclose(h);   /* balances the NOLOAD reference; the library stays loaded */
    return sym;
}

/* In the child: the fake's fakecu_fault / fakecu_raise (a kernel name, "*": the next kernel). */
static inline void fake_cuda_trouble(const char *fn, const char *kernel) {
    void *sym = fake_cuda_sym(fn);
    void (*f)(const char *);
    if (!sym) return;
    memcpy(&f, &sym, sizeof f);
    f(kernel);
}

/* In the child: the name of the last cubin kernel launched ("" when none, or not the fake). */
static inline const char *fake_cuda_last_kernel(void) {
    void *h = getenv("ST_CUDA_LIB") ? dlopen(getenv("ST_CUDA_LIB"), RTLD_NOW | RTLD_NOLOAD) : NULL;
    void *sym = h ? dlsym(h, "fakecu_last_kernel") : NULL;
    if (h) dlclose(h);   /* balances the NOLOAD reference; the library stays loaded */
    const char *(*f)(void);
    if (!sym) return "";
    memcpy(&f, &sym, sizeof f);
    return f();
}

/* When this process is the child (argv[1] == FAKE_CUDA_ARG): runs body, writes its first failure
 * (if any) to stdout, which is the parent's pipe, and exits with its status. Returns otherwise. */
static inline void fake_cuda_child(int argc, char **argv, void (*body)(void)) {
    if (argc != 2 || strcmp(argv[1], FAKE_CUDA_ARG)) return;
    test_cur_failed = 0;
    test_cur_msg[0] = 0;
    body();
    if (test_cur_failed) printf("%s", test_cur_msg);
    fflush(stdout);
    exit(test_cur_failed);
}

/* Builds the fake driver into a new temp dir: dir[] = "/tmp/st_fakecuda_XXXXXX" (filled in), lib
 * gets dir/libcuda.so.1. 0 with the test failed when it cannot (run from the repository root);
 * fake_cuda_remove cleans up. */
static inline int fake_cuda_build(char dir[24], char lib[96]) {
    char cmd[512];
    if (!mkdtemp(dir)) {
        TEST_FAILF("mkdtemp failed");
        return 0;
    }
    snprintf(lib, 96, "%s/libcuda.so.1", dir);
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -O1 -DST_FAKE_LIBCUDA -o %s tests/test_cuda_driver.c", lib);
    if (system(cmd) != 0) {
        TEST_FAILF("could not build the fake driver (run from the repository root)");
        return 0;
    }
    return 1;
}
static inline void fake_cuda_remove(const char *dir, const char *lib) {
    unlink(lib);
    rmdir(dir);
}

/* In the parent: builds the fake driver, runs `/proc/self/exe FAKE_CUDA_ARG` with ST_CUDA_LIB set
 * (ST_DEVICE unset: the fake GPU is the default device) and fails the current test with whatever
 * the child reported, or how it died. The child's stderr is the parent's. */
static inline void fake_cuda_spawn(void) {
    char dir[24] = "/tmp/st_fakecuda_XXXXXX", lib[96];
    int fd[2], ok = fake_cuda_build(dir, lib);
    if (ok && pipe(fd) != 0) {
        TEST_FAILF("pipe failed");
        ok = 0;
    }
    if (ok) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            close(fd[0]);
            dup2(fd[1], 1);
            setenv("ST_CUDA_LIB", lib, 1);
            unsetenv("ST_DEVICE");
            execl("/proc/self/exe", "fake-cuda-child", FAKE_CUDA_ARG, (char *)NULL);
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
        if (got) TEST_FAILF("child: %s", msg);
        else if (WIFSIGNALED(status)) TEST_FAILF("the child died of signal %d", WTERMSIG(status));
        else CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    }
    fake_cuda_remove(dir, lib);
}

#endif
