/*
 * cache_cuda.c — the cubin cache: (kernel source, KNAME, architecture) -> cubin, in memory and on
 * disk, compiling with NVRTC (nvrtc.c) on a miss.
 *
 * Key = jit_hash128 over a version tag, the NVRTC version, the fixed options, the prelude, the
 * architecture, KNAME and the source, each hashed as its own segment (boundaries count). The NVRTC
 * version and options are read after libnvrtc is loaded, so a lookup loads it.
 *
 * Memory: a uthash table key -> cubin (st_malloc'ed, owned here). A pointer handed out stays valid
 * until jit_cubin_shutdown, which frees them all: whoever caches modules by cubin pointer (the
 * driver layer) must drop them first.
 *
 * Disk: <cache dir>/cuda/<32-hex key>.cubin = a 40-byte header (magic "STCUBIN1", the key, the
 * payload size, a checksum of the payload; host byte order: the cache is per machine) followed by
 * the cubin. Written whole to a temp name and renamed (jit_write_atomic). An entry whose magic,
 * key, size or checksum does not match is removed and the kernel recompiled and rewritten: a
 * corrupt cache costs time, never correctness. Disk writes are best effort (a read-only cache dir
 * only means recompiling next time).
 */
#include "jit/nvrtc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* uthash allocates through st_malloc and never exits: a failed add is rolled back and reported as
 * ST_ERR_OOM (same pattern as cache.c). */
static int cubin_hash_oom;
#define uthash_malloc(sz) st_malloc(sz)
#define uthash_free(ptr, sz) st_free(ptr)
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) do { (void)(obj); cubin_hash_oom = 1; } while (0)
#define uthash_fatal(msg) do { cubin_hash_oom = 1; } while (0)
#include <uthash.h>

#define CUBIN_MAGIC "STCUBIN1"

typedef struct cubin_header {
    char magic[8];
    uint64_t key[2];
    uint64_t size; /* payload bytes */
    uint64_t sum;  /* jit_hash128(payload).h[0] */
} cubin_header;
_Static_assert(sizeof(cubin_header) == 40, "cubin_header must have no padding");

typedef struct cubin_entry {
    jit_key key;
    void *block;       /* st_malloc'ed; the cubin starts at block + off */
    size_t off, size;
    UT_hash_handle hh;
} cubin_entry;

static cubin_entry *cubins;

static uint64_t payload_sum(const void *p, size_t n) {
    jit_key seed = {{0x63756269ULL, 0}};
    return jit_hash128(p, n, seed).h[0];
}

/* The part of every key that does not depend on the kernel: computed once (the prelude is long,
 * and a memory hit should cost one hash of the kernel's own source). */
static jit_key cubin_ctx(void) {
    static int ready;
    static jit_key ctx;
    if (!ready) {
        static const char tag[] = "stitch-cubin-key-v1";
        int major = 0, minor = 0;
        char ver[32];
        (void)nvrtc_version(&major, &minor); /* loaded by the caller */
        snprintf(ver, sizeof ver, "nvrtc %d.%d", major, minor);
        const char *opts = nvrtc_options();
        ctx = jit_hash128(tag, sizeof tag, ctx);
        ctx = jit_hash128(ver, strlen(ver), ctx);
        ctx = jit_hash128(opts, strlen(opts), ctx);
        ctx = jit_hash128(st_prelude_src, strlen(st_prelude_src), ctx);
        ready = 1;
    }
    return ctx;
}

static jit_key cubin_key(const char *src, const char *kname, const char *arch) {
    jit_key k = cubin_ctx();
    k = jit_hash128(arch, strlen(arch), k);
    k = jit_hash128(kname, strlen(kname), k);
    return jit_hash128(src, strlen(src), k);
}

static cubin_entry *mem_find(jit_key key) {
    cubin_entry *e = NULL;
    HASH_FIND(hh, cubins, &key, sizeof(jit_key), e);
    return e;
}

/* Takes ownership of block (freed on failure). */
static st_status mem_insert(jit_key key, void *block, size_t off, size_t size, cubin_entry **out) {
    cubin_entry *e = st_malloc(sizeof *e);
    if (!e) {
        st_free(block);
        return ST_ERR_OOM;
    }
    memset(e, 0, sizeof *e);
    e->key = key;
    e->block = block;
    e->off = off;
    e->size = size;
    cubin_hash_oom = 0;
    HASH_ADD(hh, cubins, key, sizeof(jit_key), e);
    if (cubin_hash_oom) {
        st_free(block);
        st_free(e);
        return st_error(ST_ERR_OOM, "out of memory growing the cubin cache");
    }
    *out = e;
    return ST_OK;
}

static void debug_drop(const char *path, const char *why) {
    if (st_rt.debug & 1) fprintf(stderr, "stitch: dropped %s from the kernel cache (%s)\n", path, why);
}

/* Reads <cuda dir>/<hex>.cubin and verifies it. On success *block holds the whole file (header
 * first). A corrupt entry is removed. 0 on a hit, -1 on a miss (no error set), -2 when out of
 * memory (error set). */
static int disk_load(const char *cdir, const char *hex, jit_key key, void **block, size_t *size) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s.cubin", cdir, hex);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size < sizeof(cubin_header)) {
        close(fd);
        debug_drop(path, "shorter than its header");
        unlink(path);
        return -1;
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = st_malloc(n);
    if (!buf) {
        close(fd);
        return -2;
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    cubin_header h;
    memcpy(&h, buf, sizeof h);
    const char *why = NULL;
    if (got != n) why = "unreadable";
    else if (memcmp(h.magic, CUBIN_MAGIC, 8)) why = "bad magic";
    else if (h.key[0] != key.h[0] || h.key[1] != key.h[1]) why = "wrong key";
    else if (h.size != n - sizeof h) why = "wrong size";
    else if (h.sum != payload_sum(buf + sizeof h, h.size)) why = "wrong checksum";
    if (why) {
        st_free(buf);
        debug_drop(path, why);
        unlink(path);
        return -1;
    }
    *block = buf;
    *size = n - sizeof h;
    return 0;
}

/* Writes the entry for a freshly compiled cubin (best effort). */
static void disk_store(const char *cdir, const char *hex, jit_key key, const void *cubin, size_t n) {
    char name[48];
    snprintf(name, sizeof name, "%s.cubin", hex);
    cubin_header h;
    memcpy(h.magic, CUBIN_MAGIC, 8);
    h.key[0] = key.h[0];
    h.key[1] = key.h[1];
    h.size = n;
    h.sum = payload_sum(cubin, n);
    char *buf = st_malloc(sizeof h + n);
    if (!buf) return; /* only the disk copy is lost; the lookup itself succeeds */
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, cubin, n);
    if ((jit_mkdir_p(cdir) != 0 || jit_write_atomic(cdir, name, buf, sizeof h + n) != 0) && (st_rt.debug & 1))
        fprintf(stderr, "stitch: cannot write the kernel cache entry %s/%s: %s\n", cdir, name, strerror(errno));
    st_free(buf);
}

st_status jit_cubin_get(const char *src, const char *kname, const char *arch, const void **cubin, size_t *n,
                        jit_key *key_out) {
    if (!src || !kname || !arch || !cubin || !n)
        return st_error(ST_ERR_INTERNAL, "jit_cubin_get: NULL argument");
    *cubin = NULL;
    *n = 0;
    st_status s = nvrtc_load();
    if (s != ST_OK) return s;
    jit_key key = cubin_key(src, kname, arch);
    if (key_out) *key_out = key;

    cubin_entry *e = mem_find(key);
    if (e) {
        st_stats_g.cache_hits_memory++;
        *cubin = (char *)e->block + e->off;
        *n = e->size;
        return ST_OK;
    }
    const char *dir = jit_cache_dir();
    if (!dir) return st_last_status();
    char cdir[4200], hex[33];
    snprintf(cdir, sizeof cdir, "%s/cuda", dir);
    jit_key_hex(key, hex);

    void *block = NULL;
    size_t size = 0;
    int r = disk_load(cdir, hex, key, &block, &size);
    if (r == -2) return ST_ERR_OOM;
    if (r == 0) {
        if ((s = mem_insert(key, block, sizeof(cubin_header), size, &e)) != ST_OK) return s;
        st_stats_g.cache_hits_disk++;
    } else {
        char *unit = nvrtc_unit(1, &src, &kname, NULL, st_malloc);
        if (!unit) return ST_ERR_OOM;
        double ms = 0;
        s = nvrtc_compile(unit, arch, hex, &block, &size, &ms);
        st_free(unit);
        st_stats_g.compile_calls++;
        st_stats_g.compile_ms += ms;
        if (st_rt.debug & 1)
            fprintf(stderr, "stitch: NVRTC compiled %s for %s in %.1f ms%s\n", kname, arch, ms,
                    s == ST_OK ? "" : " [failed]");
        if (s != ST_OK) return s;
        st_stats_g.kernels_compiled++;
        disk_store(cdir, hex, key, block, size);
        if ((s = mem_insert(key, block, 0, size, &e)) != ST_OK) return s;
    }
    *cubin = (char *)e->block + e->off;
    *n = e->size;
    return ST_OK;
}

void jit_cubin_shutdown(void) {
    cubin_entry *e, *tmp;
    HASH_ITER(hh, cubins, e, tmp) {
        HASH_DEL(cubins, e);
        st_free(e->block);
        st_free(e);
    }
}
