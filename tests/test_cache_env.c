/*
 * test_cache_env.c — the kernel cache directory in hostile environments (jit/cache.c,
 * jit/cache_prune.c): a cache directory that cannot be written falls back to a private temporary
 * one; ST_CACHE_MAX bounds the directory, least recently used first, never an object in use;
 * stale temp files, dead index lines, unindexed objects and old failed sources are cleaned.
 *
 * Unwritable directories are made in ways that stop root too: a regular file in the directory's
 * place, and a path whose parent is a regular file. Everything lives under one mkdtemp directory
 * (also TMPDIR, so the fallback lands there), removed at the end.
 */
#include "base/base.h"
#include "jit/compile.h"
#include "test.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char root[256], cache[320];

static st_stats_t snap(void) { return st_stats_g; }

/* A kernel source unique to n (each compiles to its own batch when asked for alone). */
static const char *kernel(int n) {
    static char src[8][160];
    snprintf(src[n], sizeof src[n], "void KNAME(const st_kargs *a) { *a->err = %d; }\n", 100 + n);
    return src[n];
}

static int run_kernel(int n) {
    const char *s = kernel(n);
    st_kernel_fn fn = NULL;
    if (jit_get_kernels(1, &s, NULL, &fn) != ST_OK || !fn) return -1;
    int32_t err = 0;
    st_kargs a = {NULL, NULL, NULL, &err, 1, NULL, NULL};
    fn(&a);
    return err;
}

static int exists(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0;
}

static void touch_file(const char *p, const char *text, time_t when) {
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    struct timespec ts[2] = {{when, 0}, {when, 0}};
    utimensat(AT_FDCWD, p, ts, 0);
}

/* Entries of dir ending with suffix (dot files left out); the nth name into out. */
static int count_files(const char *dir, const char *suffix, char *out, size_t n, int nth) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int c = 0;
    size_t sl = strlen(suffix);
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' || l < sl || strcmp(e->d_name + l - sl, suffix)) continue;
        if (out && c == nth) snprintf(out, n, "%.199s", e->d_name);
        c++;
    }
    closedir(d);
    return c;
}

static uint64_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    uint64_t t = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[1400];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) == 0 && S_ISREG(st.st_mode)) t += (uint64_t)st.st_size;
    }
    if (d) closedir(d);
    return t;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

static void fresh_cache(void) {
    jit_shutdown();
    nftw(cache, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    setenv("ST_CACHE_DIR", cache, 1);
    unsetenv("ST_CACHE_MAX");
}

/* ST_CACHE_DIR set to bad: compiling still works, from a private directory under TMPDIR that
 * jit_shutdown removes. */
static void falls_back(const char *bad) {
    jit_shutdown();
    setenv("ST_CACHE_DIR", bad, 1);
    CHECK(run_kernel(1) == 101);
    const char *dir = jit_cache_dir();
    char want[300];
    snprintf(want, sizeof want, "%s/stitch-cache-", root);
    CHECK(dir && !strncmp(dir, want, strlen(want)));
    char used[300] = "";
    if (dir) snprintf(used, sizeof used, "%s", dir);
    CHECK(used[0] && exists(used));
    CHECK(count_files(used, ".so", NULL, 0, 0) == 1);
    jit_shutdown();
    CHECK(used[0] && !exists(used)); /* removed at shutdown */
}

TEST(fallback_file_in_place) {
    char f[400];
    snprintf(f, sizeof f, "%s/a-file", root);
    touch_file(f, "not a directory\n", time(NULL));
    falls_back(f);
}

TEST(fallback_parent_is_file) {
    char f[400];
    snprintf(f, sizeof f, "%s/a-file/cache", root);
    falls_back(f);
}

TEST(fallback_home_unwritable) {
    jit_shutdown();
    char f[400];
    snprintf(f, sizeof f, "%s/a-file", root);
    const char *home = getenv("HOME");
    char saved[600] = "";
    if (home) snprintf(saved, sizeof saved, "%s", home);
    unsetenv("ST_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", f, 1);
    CHECK(run_kernel(2) == 102);
    const char *dir = jit_cache_dir();
    CHECK(dir && strstr(dir, "/stitch-cache-") != NULL);
    jit_shutdown();
    if (saved[0]) setenv("HOME", saved, 1);
    fresh_cache();
}

TEST(parse_size) {
    CHECK(jit_parse_size("512M") == 512LL << 20);
    CHECK(jit_parse_size("1G") == 1LL << 30);
    CHECK(jit_parse_size("200k") == 200LL << 10);
    CHECK(jit_parse_size("2GiB") == 2LL << 30);
    CHECK(jit_parse_size("64MB") == 64LL << 20);
    CHECK(jit_parse_size("12345") == 12345);
    CHECK(jit_parse_size("0") == 0);
    CHECK(jit_parse_size("") == -1);
    CHECK(jit_parse_size("abc") == -1);
    CHECK(jit_parse_size("1.5G") == -1);
    CHECK(jit_parse_size("10X") == -1);
    CHECK(jit_parse_size("-5") == -1);
    CHECK(jit_parse_size("99999999999T") == -1);
}

/* A .so in the cache dir not among the nknown names in known (the one just compiled). */
static void new_object(char known[][200], int nknown, char *out, size_t cap) {
    out[0] = '\0';
    char nm[200];
    int n = count_files(cache, ".so", NULL, 0, 0);
    for (int i = 0; i < n; i++) {
        count_files(cache, ".so", nm, sizeof nm, i);
        int seen = 0;
        for (int j = 0; j < nknown && !seen; j++) seen = !strcmp(known[j], nm);
        if (!seen) snprintf(out, cap, "%s", nm);
    }
}

TEST(lru_bound) {
    fresh_cache();
    /* Four batches, as four processes would leave them. */
    char so[5][200];
    for (int i = 0; i < 4; i++) {
        CHECK(run_kernel(i) == 100 + i);
        new_object(so, i, so[i], sizeof so[i]);
        CHECK(so[i][0]);
        jit_shutdown();
    }
    CHECK(count_files(cache, ".so", NULL, 0, 0) == 4);
    uint64_t size[4] = {0};
    time_t now = time(NULL);
    for (int i = 0; i < 4; i++) {
        char p[1400];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", cache, so[i]);
        if (stat(p, &st) == 0) size[i] = (uint64_t)st.st_size;
        /* ages: 0 oldest ... 3 newest, an hour apart at most */
        struct timespec ts[2] = {{now - 400 + 100 * i, 0}, {now - 400 + 100 * i, 0}};
        CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
    }
    jit_shutdown();
    /* Use kernel 0 again: loading it from disk makes it the most recently used. */
    st_stats_t s0 = snap();
    CHECK(run_kernel(0) == 100);
    CHECK(snap().cache_hits_disk == s0.cache_hits_disk + 1 && snap().compile_calls == s0.compile_calls);
    jit_shutdown();

    /* Room for 0 and 3 (and the index lines), not for 2: the next start prunes 1 and 2. */
    char max[32];
    uint64_t bound = size[0] + size[3] + 4 * 200 + size[2] / 2;
    snprintf(max, sizeof max, "%llu", (unsigned long long)bound);
    setenv("ST_CACHE_MAX", max, 1);
    s0 = snap();
    CHECK(run_kernel(3) == 103);
    CHECK(dir_bytes(cache) <= bound);
    char p[1400];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", cache, so[i]);
        CHECK_MSG(exists(p) == (i == 0 || i == 3), "object of kernel %d %s", i, exists(p) ? "kept" : "pruned");
    }
    CHECK(count_files(cache, ".k", NULL, 0, 0) == 2); /* the pruned objects' index lines went too */
    CHECK(run_kernel(0) == 100);
    CHECK(snap().cache_hits_disk == s0.cache_hits_disk + 2 && snap().compile_calls == s0.compile_calls);
    CHECK(run_kernel(1) == 101); /* pruned: compiled again */
    CHECK(snap().compile_calls == s0.compile_calls + 1);

    /* A bound of 1 byte removes nothing this process has loaded. */
    setenv("ST_CACHE_MAX", "1", 1);
    jit_shutdown();
    count_files(cache, ".so", so[4], sizeof so[4], 0); /* the startup prune leaves none... */
    CHECK(run_kernel(2) == 102);     /* compiled (its object was pruned): in use from here on */
    CHECK(count_files(cache, ".so", so[4], sizeof so[4], 0) == 1);
    CHECK(jit_cache_prune() == ST_OK);
    snprintf(p, sizeof p, "%s/%s", cache, so[4]);
    CHECK(so[4][0] && exists(p));
    CHECK(count_files(cache, ".so", NULL, 0, 0) == 1);
    CHECK(run_kernel(2) == 102);
    unsetenv("ST_CACHE_MAX");
}

TEST(cleans_temporaries) {
    fresh_cache();
    CHECK(run_kernel(5) == 105);
    jit_shutdown();
    time_t old = time(NULL) - 2 * 3600, now = time(NULL);
    const char *hex = "0123456789abcdef0123456789abcdef";
    char p[1400];
    struct {
        const char *name;
        time_t when;
        int kept;
    } f[] = {
        {".tmp-Ab12Cd", old, 0},               /* base_write_atomic's, abandoned */
        {".tmp-Xy34Zw", now, 1},               /* one being written right now */
        {".0123456789abcdef0123456789abcdef-Qw12Er.tmp", old, 0}, /* the compiler's output */
        {"0123456789abcdef0123456789abcdef-Zz99Yy.so", old, 0},   /* a duplicate nobody indexes */
        {"fedcba9876543210fedcba9876543210-Zz99Yy.so", now, 1},   /* ... just renamed, index to come */
        {"0123456789abcdef0123456789abcdee.k", now, 0},           /* index of a missing object */
        {".profile", old, 1},                  /* not stitch's: never touched */
        {"notes.txt", old, 1},
    };
    int nf = (int)(sizeof f / sizeof f[0]);
    for (int i = 0; i < nf; i++) {
        snprintf(p, sizeof p, "%s/%s", cache, f[i].name);
        touch_file(p, i == 5 ? "stitch-kernel-v1 0123456789abcdef0123456789abcdee "
                               "0123456789abcdef0123456789abcdef-Gone00.so 10 0 0\n" : "x\n", f[i].when);
    }
    /* Twenty failed compiles: the sixteen newest stay, with their logs. */
    char fdir[500];
    snprintf(fdir, sizeof fdir, "%s/failed", cache);
    mkdir(fdir, 0755);
    for (int i = 0; i < 20; i++) {
        snprintf(p, sizeof p, "%s/%s-f%05d.c", fdir, hex, i);
        touch_file(p, "int x = ;\n", now - 1000 + i);
        snprintf(p, sizeof p, "%s/%s-f%05d.log", fdir, hex, i);
        touch_file(p, "error\n", now - 1000 + i);
    }
    CHECK(run_kernel(5) == 105); /* startup: cleans up */
    for (int i = 0; i < nf; i++) {
        snprintf(p, sizeof p, "%s/%s", cache, f[i].name);
        CHECK_MSG(exists(p) == f[i].kept, "%s %s", f[i].name, exists(p) ? "kept" : "removed");
    }
    CHECK_EQ_INT(count_files(fdir, ".c", NULL, 0, 0), 16);
    CHECK_EQ_INT(count_files(fdir, ".log", NULL, 0, 0), 16);
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s-f%05d.c", fdir, hex, i);
        CHECK(!exists(p)); /* the oldest went */
    }
    jit_shutdown();
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/stitch-test-cache-env-XXXXXX");
    if (!mkdtemp(root)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    snprintf(cache, sizeof cache, "%s/cache", root);
    setenv("TMPDIR", root, 1);
    setenv("ST_CACHE_DIR", cache, 1);
    unsetenv("ST_CACHE_MAX");
    unsetenv("ST_CC");
    st_runtime_init();

    RUN(parse_size);
    RUN(fallback_file_in_place);
    RUN(fallback_parent_is_file);
    RUN(fallback_home_unwritable);
    RUN(lru_bound);
    RUN(cleans_temporaries);

    jit_shutdown();
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    TEST_MAIN_END();
}
