/*
 * cache_cuda.c — the cubin cache: (kernel source, KNAME, architecture) -> cubin, in memory and on
 * disk, compiling with NVRTC (nvrtc.c) on a miss. For a virtual architecture (compute_XY) the
 * entry is PTX text instead of a cubin; everything else is the same.
 *
 * Key = base_hash128 over a version tag, the NVRTC version, the fixed options, the prelude, the
 * kind of output (cubin or PTX), the architecture, KNAME and the source, each hashed as its own
 * segment (boundaries count). The NVRTC version and options are read after libnvrtc is loaded, so
 * a lookup loads it.
 *
 * Memory: a uthash table key -> cubin (st_malloc'ed, owned here). A pointer handed out stays valid
 * until jit_cubin_shutdown, which has every device unload its modules (they are cached by cubin
 * pointer: dev_unload_functions) and then frees them all. This is the only place cubins are
 * freed: the memory cache has no eviction.
 *
 * Disk: <cache dir>/cuda/<32-hex key>.cubin (.ptx for PTX) = a 40-byte header (magic "STCUBIN1",
 * the key, the payload size, a checksum of the payload; host byte order: the cache is per machine)
 * followed by the cubin. Written whole to a temp name and renamed (base_write_atomic). An entry whose magic,
 * key, size or checksum does not match is removed and the kernel recompiled and rewritten: a
 * corrupt cache costs time, never correctness. Disk writes are best effort (a read-only cache dir
 * only means recompiling next time).
 */
#include "jit/nvrtc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/uthash_cfg.h"

#define CUBIN_MAGIC "STCUBIN1"

typedef struct cubin_header {
    char magic[8];
    uint64_t key[2];
    uint64_t size; /* payload bytes */
    uint64_t sum;  /* base_hash128(payload).h[0] */
} cubin_header;
_Static_assert(sizeof(cubin_header) == 40, "cubin_header must have no padding");

typedef struct cubin_entry {
    base_hash key;
    void *block;       /* st_malloc'ed; the cubin starts at block + off */
    size_t off, size;
    UT_hash_handle hh;
} cubin_entry;

static cubin_entry *cubins;

static uint64_t payload_sum(const void *p, size_t n) {
    base_hash seed = {{0x63756269ULL, 0}};
    return base_hash128(p, n, seed).h[0];
}

/* The part of every key that does not depend on the kernel: computed once (the prelude is long,
 * and a memory hit should cost one hash of the kernel's own source). */
static base_hash cubin_ctx(void) {
    static int ready;
    static base_hash ctx;
    if (!ready) {
        static const char tag[] = "stitch-cubin-key-v2";
        int major = 0, minor = 0;
        char ver[32];
        (void)nvrtc_version(&major, &minor); /* loaded by the caller */
        snprintf(ver, sizeof ver, "nvrtc %d.%d", major, minor);
        const char *opts = nvrtc_options();
        ctx = base_hash128(tag, sizeof tag, ctx);
        ctx = base_hash128(ver, strlen(ver), ctx);
        ctx = base_hash128(opts, strlen(opts), ctx);
        ctx = base_hash128(st_prelude_src, strlen(st_prelude_src), ctx);
        ready = 1;
    }
    return ctx;
}

/* What NVRTC writes for arch: PTX text for a virtual architecture (compute_XY), else a cubin. */
static const char *output_kind(const char *arch) { return nvrtc_is_ptx(arch) ? "ptx" : "cubin"; }

static base_hash cubin_key(const char *src, const char *kname, const char *arch) {
    base_hash k = cubin_ctx();
    const char *kind = output_kind(arch);
    k = base_hash128(kind, strlen(kind), k);
    k = base_hash128(arch, strlen(arch), k);
    k = base_hash128(kname, strlen(kname), k);
    return base_hash128(src, strlen(src), k);
}

static cubin_entry *mem_find(base_hash key) {
    cubin_entry *e = NULL;
    HASH_FIND(hh, cubins, &key, sizeof(base_hash), e);
    return e;
}

/* Takes ownership of block (freed on failure). */
static st_status mem_insert(base_hash key, void *block, size_t off, size_t size, cubin_entry **out) {
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
    base_hash_oom = 0;
    base_on_shutdown(BASE_LEVEL_JIT, jit_cubin_shutdown);
    HASH_ADD(hh, cubins, key, sizeof(base_hash), e);
    if (base_hash_oom) {
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

/* Reads <cuda dir>/<hex>.<ext> and verifies it. On success *block holds the whole file (header
 * first). A corrupt entry is removed. 0 on a hit, -1 on a miss (no error set), -2 when out of
 * memory (error set). */
static int disk_load(const char *cdir, const char *hex, const char *ext, base_hash key, void **block, size_t *size) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s.%s", cdir, hex, ext);
    char *buf;
    size_t n;
    int r = base_read_file(path, &buf, &n);
    if (r == -2) return -2;
    if (r != 0) {
        if (errno == EINVAL || errno == EIO) { /* not a regular file, or truncated as we read it */
            debug_drop(path, "unreadable");
            unlink(path);
        }
        return -1;
    }
    if (n < sizeof(cubin_header)) {
        st_free(buf);
        debug_drop(path, "shorter than its header");
        unlink(path);
        return -1;
    }
    cubin_header h;
    memcpy(&h, buf, sizeof h);
    const char *why = NULL;
    if (memcmp(h.magic, CUBIN_MAGIC, 8)) why = "bad magic";
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
    jit_touch(path); /* recently used: the last to be pruned */
    return 0;
}

/* Writes the entry for a freshly compiled cubin (best effort). */
static void disk_store(const char *cdir, const char *hex, const char *ext, base_hash key, const void *cubin, size_t n) {
    char name[48];
    snprintf(name, sizeof name, "%s.%s", hex, ext);
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
    if (base_mkdir_p(cdir) != 0 || base_write_atomic(cdir, name, buf, sizeof h + n) != 0) {
        if (st_rt.debug & 1)
            fprintf(stderr, "stitch: cannot write the kernel cache entry %s/%s: %s\n", cdir, name, strerror(errno));
    } else {
        jit_cache_wrote(sizeof h + n);
    }
    st_free(buf);
}

st_status jit_cubin_get(const char *src, const char *kname, const char *arch, const void **cubin, size_t *n,
                        base_hash *key_out) {
    if (!src || !kname || !arch || !cubin || !n)
        return st_error(ST_ERR_INTERNAL, "jit_cubin_get: NULL argument");
    *cubin = NULL;
    *n = 0;
    st_status s = nvrtc_load();
    if (s != ST_OK) return s;
    base_hash key = cubin_key(src, kname, arch);
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
    base_hash_hex(key, hex);

    void *block = NULL;
    size_t size = 0;
    const char *ext = output_kind(arch);
    int r = disk_load(cdir, hex, ext, key, &block, &size);
    if (r == -2) return ST_ERR_OOM;
    if (r == 0) {
        if ((s = mem_insert(key, block, sizeof(cubin_header), size, &e)) != ST_OK) return s;
        st_stats_g.cache_hits_disk++;
    } else {
        char *unit = nvrtc_unit(1, &src, &kname, NULL, 0);
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
        disk_store(cdir, hex, ext, key, block, size);
        if ((s = mem_insert(key, block, 0, size, &e)) != ST_OK) return s;
    }
    *cubin = (char *)e->block + e->off;
    *n = e->size;
    return ST_OK;
}

/* The devices' modules first: they are keyed by the cubins' addresses, and a module must be
 * unloaded before the memory it was loaded from is freed (and reused for another cubin). */
void jit_cubin_shutdown(void) {
    if (cubins) dev_unload_functions();
    cubin_entry *e, *tmp;
    HASH_ITER(hh, cubins, e, tmp) {
        HASH_DEL(cubins, e);
        st_free(e->block);
        st_free(e);
    }
}
