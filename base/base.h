/*
 * base.h — internal: the bottom layer. What every other layer uses and that uses nothing above it.
 *
 * base/ owns: errors (error.c), host memory and its out-of-memory hooks (mem.c), dtypes (dtype.c),
 * the settings read from the environment, every one of them, and the runtime flags (settings.c),
 * statistics and the clock (stats.c), shape arithmetic (shape.c), hashing (hash.c), the one string
 * builder and the one growable-array helper (buf.c), whole-file reads and atomic writes (file.c),
 * shutdown hooks (hooks.c), uthash's configuration (uthash_cfg.h) and the math of every op
 * (opmath.h: compiled into the library for the interpreter, embedded as text into every kernel).
 *
 * Invariant: nothing here includes or calls a header of another layer; a higher layer that base
 * must reach (shutdown, out-of-memory trimming) registers a hook. Everything declared here is
 * hidden from libstitch.so's export table (ST_INTERNAL), except the public functions of stitch.h
 * that base implements (st_last_error, st_dtype_name, st_shape_str, ...).
 */
#ifndef ST_BASE_H
#define ST_BASE_H

#include "stitch.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define ST_INTERNAL __attribute__((visibility("hidden")))
#else
#define ST_INTERNAL
#endif

/* Broken invariant: print where and abort. A debug aid only, never for user errors. */
#define ST_ASSERT(c)                                                                            \
    do {                                                                                        \
        if (!(c)) st_assert_fail(#c, __FILE__, __LINE__);                                      \
    } while (0)
ST_INTERNAL _Noreturn void st_assert_fail(const char *what, const char *file, int line);

/* ---- dtypes: one traits table (dtype.c) ---- */
typedef enum { ST_CAT_BOOL = 0, ST_CAT_INT = 1, ST_CAT_FLOAT = 2 } st_category;
typedef struct st_dtype_traits {
    const char *name;       /* "f32" */
    const char *ctype;      /* storage C type: "float", "uint16_t", "uint8_t", ... */
    const char *compute;    /* compute C type: f16/bf16 -> "float", bool -> "uint8_t" */
    size_t size;            /* bytes per element */
    st_category cat;
    int rank;               /* order inside a category for promotion */
} st_dtype_traits;
ST_INTERNAL extern const st_dtype_traits st_dtypes[ST_DTYPE_COUNT];
static inline bool st_is_float(st_dtype dt) { return st_dtypes[dt].cat == ST_CAT_FLOAT; }
static inline bool st_is_int(st_dtype dt) { return st_dtypes[dt].cat == ST_CAT_INT; }
/* Host-side conversions used by the runtime and the interpreter (same rounding as opmath.h). */
ST_INTERNAL double st_load_f64(st_dtype dt, const void *base, int64_t i);
ST_INTERNAL int64_t st_load_i64(st_dtype dt, const void *base, int64_t i);
ST_INTERNAL void st_store_f64(st_dtype dt, void *base, int64_t i, double v);
ST_INTERNAL void st_store_i64(st_dtype dt, void *base, int64_t i, int64_t v);

/* ---- errors: a thread-local status + message (error.c) ---- */
/* Sets the error (printf-style) and returns status, for `return st_error(...)`. */
ST_INTERNAL st_status st_error(st_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Positions in a message: a dim, an index or a list entry is formatted with one of these marks and
 * passed 0-based as a long long; st_last_error() shows it 0-based, st_last_error_base(1) (Lua)
 * 1-based. BASE_POS is for a position the caller gave or could give (a dim, select's index, the
 * k-th tensor of a list): negative values count from the end and are shown as they are.
 * BASE_INDEX is for a value read from an index tensor (Lua shifts those by one before the call),
 * shifted whatever its sign. Example: st_error(ST_ERR_ARG, "permute: dim " BASE_POS " appears
 * twice", BASE_P(d)). */
#define BASE_MARK_POS "\x1d"
#define BASE_MARK_INDEX "\x1e"
#define BASE_POS BASE_MARK_POS "%lld"
#define BASE_INDEX BASE_MARK_INDEX "%lld"
#define BASE_P(v) ((long long)(v))
/* The last message with its marks, for wrapping it into a new one without losing them:
 * st_error(s, "backward: %s", base_error_raw()). */
ST_INTERNAL const char *base_error_raw(void);

/* ---- host memory: one allocation hook for every layer, uthash and (through lua_Alloc) Lua ----
 * NULL with ST_ERR_OOM set on failure, after the trim hooks (caches of freed blocks) and then the
 * host's OOM handler (st_set_oom_handler; Lua: a full GC) were each given a chance to free memory.
 * st_debug_fail_alloc makes these fail on demand. (mem.c) */
ST_INTERNAL void *st_malloc(size_t n);
ST_INTERNAL void *st_calloc(size_t n, size_t size);
ST_INTERNAL void *st_realloc(void *p, size_t n);
ST_INTERNAL void st_free(void *p);
ST_INTERNAL char *st_strdup(const char *s);
/* For allocators above base with their own memory (tensor data blocks, device memory): true when
 * the debug countdown says this allocation must fail; the retry protocol around a failure (trim
 * hooks, then the host's handler); the allocation observer (st_set_alloc_observer). */
ST_INTERNAL bool base_injected_failure(void);
ST_INTERNAL void *base_alloc_retry(size_t n, void *(*fn)(void *arg, size_t n), void *arg);
ST_INTERNAL int st_call_oom_handler(size_t bytes);   /* the host's handler: non-zero = retry */
ST_INTERNAL void base_observe_alloc(int64_t delta_bytes);
/* A trim hook frees what a cache holds (the CPU device's cache of data blocks): the first thing
 * tried when an allocation fails, and run by st_empty_cache. Registering twice is a no-op. */
ST_INTERNAL void base_on_trim(void (*fn)(void));
ST_INTERNAL void base_trim(void);

/* ---- settings: every environment variable stitch reads, named once (settings.c) ---- */
typedef enum st_setting {
    SET_EAGER, SET_DEBUG, SET_POISON, SET_JIT_MIN, SET_JIT_HOT, SET_JIT_ASYNC, SET_TRACE_MAX, SET_DEVICE, SET_THREADS, SET_SPIN_US, SET_FUSE,
    SET_PLAN_CACHE, SET_GRAPH, SET_CC, SET_COMPILE_TIMEOUT, SET_CACHE_DIR, SET_CACHE_MAX, SET_CUDA_LIB, SET_NVRTC_PATH, SET_NVRTC_CHECK,
    SET_NVRTC_CHECK_LOG, SET_NVRTC_CHECK_SEEN, SET_TF32, SET_CUDA_SIM, SET_CUDA_SYNC,
    /* the system's, read where stitch looks for files and tools */
    SET_XDG_CACHE_HOME, SET_HOME, SET_TMPDIR, SET_PATH, SET_CUDA_PATH, SET_CUDA_HOME,
    SET_COUNT
} st_setting;
/* The variable's name ("ST_EAGER") and its value now (NULL when unset or empty). Settings that
 * may be re-read (ST_CC after the compiler is reset, ST_GRAPH) are read through base_env each time;
 * the flags below are read once. */
ST_INTERNAL const char *base_env_name(st_setting s);
ST_INTERNAL const char *base_env(st_setting s);
/* An integer setting: dflt when unset; when malformed or outside [lo, hi], dflt and *bad set (the
 * caller says so where a user will see it; a setting must never fail a run). */
ST_INTERNAL int64_t base_env_int(st_setting s, int64_t dflt, int64_t lo, int64_t hi, int *bad);
/* ST_CUDA_SIM: the directory of the simulated GPU's stand-in libcuda.so.1 and libnvrtc.so (the
 * tests' simulator, tests/sim, built by `make sim`), or NULL when unset. "1" means the `sim`
 * directory beside the running program or its parent's (build/stitch and build/tests/x both find
 * build/sim); another value is the directory itself. ST_CUDA_LIB and ST_NVRTC_PATH still win. */
ST_INTERNAL const char *base_cuda_sim_dir(void);

/* The runtime flags: read from the environment once (st_runtime_init, idempotent; every entry
 * point that depends on them calls it), overridden by the st_set_* functions. */
typedef struct st_runtime {
    int eager;            /* ST_EAGER */
    int debug;            /* ST_DEBUG flags */
    int poison;           /* ST_POISON */
    int64_t jit_min;      /* ST_JIT_MIN */
    int64_t jit_hot;      /* ST_JIT_HOT: runs of a cached plan after which its interpreted groups compile */
    int jit_async;        /* ST_JIT_ASYNC: 1 (default) compile CPU kernels in the background while the
                           * interpreter runs their groups; 0 wait for the compiler */
    int64_t trace_max;    /* pending nodes before an automatic flush (ST_TRACE_MAX) */
    volatile int interrupted;   /* st_interrupt: running work stops at its next safe point */
    int compiles_running; /* C compilers this process runs now (jit/compile.c): the interpreter's
                           * matmuls leave them their cores (trace/interp.c) */
    int inited;
} st_runtime;
ST_INTERNAL extern st_runtime st_rt;
ST_INTERNAL void st_runtime_init(void);

/* ---- statistics and the clock (stats.c) ---- */
ST_INTERNAL extern st_stats_t st_stats_g;
ST_INTERNAL double st_now_ms(void);       /* monotonic clock */

/* ---- shapes (shape.c; st_shape_str is public) ---- */
ST_INTERNAL int64_t st_shape_numel(int ndim, const int64_t *shape);
/* The element count of shape, checked: 1 with *numel set when every size is >= 0 and numel *
 * elem_size fits in an int64 (a tensor's bytes, offsets and strides then all do); 0 otherwise
 * (no error set: the caller names the op). The one check every new node goes through. */
ST_INTERNAL int st_shape_numel_checked(int ndim, const int64_t *shape, size_t elem_size, int64_t *numel);
/* The first and last element a view (shape, strides, offset: in elements) of a tensor with
 * elements reaches: 1 with *lo and *hi set, 0 when computing them overflows (no error set). The one
 * check of a view's extent against its storage (runtime/tensor.c, st_tensor_view). */
ST_INTERNAL int st_view_extent_checked(int ndim, const int64_t *shape, const int64_t *strides, int64_t offset,
                                       int64_t *lo, int64_t *hi);
/* Contiguous strides of a shape, in elements. */
ST_INTERNAL void st_contig_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Do these strides lay the shape out in C order (size-1 dims ignored)? */
ST_INTERNAL int st_is_contiguous_view(int ndim, const int64_t *shape, const int64_t *strides);

/* ---- hashing (hash.c): 128 bits, non-cryptographic (keys and checksums, not security). seed
 * chains segments: hash(b, hash(a, s)) depends on both a and b and on where the boundary is,
 * because each call mixes in its length. ---- */
typedef struct base_hash { uint64_t h[2]; } base_hash;
ST_INTERNAL base_hash base_hash128(const void *data, size_t n, base_hash seed);
ST_INTERNAL void base_hash_hex(base_hash k, char out[33]);   /* 32 lowercase hex digits + NUL */

/* ---- the string builder (buf.c) ----
 * Appends text or bytes to a growable NUL-terminated buffer. oom is sticky: after a failed growth
 * every later append does nothing, so a caller checks once at the end. raw: grow with the C
 * library (malloc), not st_realloc — for code that must not meet st_debug_fail_alloc's injected
 * failures or call the OOM handler (NVRTC's check mode). s is freed with st_free either way. */
typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
    int raw;
} sbuf;
ST_INTERNAL void sbuf_put(sbuf *b, const void *data, size_t n);
ST_INTERNAL void sbuf_puts(sbuf *b, const char *s);
ST_INTERNAL void sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text, handed over to the caller (who st_frees it), and b reset; NULL when b->oom (ST_ERR_OOM
 * set unless raw). */
ST_INTERNAL char *sbuf_take(sbuf *b);
ST_INTERNAL void sbuf_free(sbuf *b);

/* ---- the growable array (buf.c) ----
 * BASE_GROW(arr, cap, n, first): makes room for n elements in arr, a pointer to an st_malloc'ed
 * array of cap elements (an int; arr may be NULL with cap 0), doubling the capacity from `first`.
 * Evaluates to ST_OK, or ST_ERR_OOM with arr and cap unchanged (still valid). */
ST_INTERNAL st_status base_grow_(void *arrp, int *cap, int64_t n, size_t elem, int first);
#define BASE_GROW(arr, cap, n, first)                                                           \
    ((int64_t)(n) <= (int64_t)(cap) ? ST_OK : base_grow_(&(arr), &(cap), (int64_t)(n), sizeof *(arr), (first)))

/* ---- files (file.c): no st_error; -1 with errno set on failure ---- */
ST_INTERNAL int base_mkdir_p(const char *path);   /* mkdir -p */
ST_INTERNAL int base_write_all(int fd, const void *data, size_t n);   /* write(2) until done */
/* Writes data to a temp file in dir and renames it to dir/name, so that a concurrent reader sees
 * the old file or the whole new one, never a part. */
ST_INTERNAL int base_write_atomic(const char *dir, const char *name, const void *data, size_t n);
/* The whole of a regular file (opened without blocking: a FIFO or device is refused with EINVAL),
 * st_malloc'ed into *data (NUL-terminated, *n bytes without the NUL). -2 when out of memory. */
ST_INTERNAL int base_read_file(const char *path, char **data, size_t *n);
/* Opens path for reading only if it is a regular file: opened with O_NONBLOCK (opening a FIFO
 * with no writer, or a device, must not block), checked with fstat, then switched back to
 * blocking reads. Returns the fd (O_CLOEXEC) with *size set; -1 with errno when it cannot be
 * opened or stat'ed; -2 when it is something else (*mode says what: base_file_kind). */
ST_INTERNAL int base_open_regular(const char *path, uint64_t *size, unsigned *mode);
/* "a FIFO", "a directory", "a character device", "a block device", "a socket", "a symbolic link",
 * "a regular file" or "a special file": what a st_mode is, for messages. */
ST_INTERNAL const char *base_file_kind(unsigned mode);
/* pread(2) until n bytes from offset off are in buf: 0; 1 when the file ends first (it is shorter
 * than expected: cut by someone else while we read); -1 with errno on a read error. */
ST_INTERNAL int base_pread_all(int fd, void *buf, size_t n, uint64_t off);

/* ---- hooks (hooks.c) ----
 * A layer that keeps caches registers a shutdown hook the first time it fills one; st_shutdown
 * runs them from the highest layer down (level: BASE_LEVEL_*), so a plan cache that holds kernels
 * is freed before the kernel cache that unloads them. Registering the same function again is a
 * no-op. */
enum { BASE_LEVEL_DEVICE = 1, BASE_LEVEL_JIT = 4, BASE_LEVEL_FUSER = 5 };
ST_INTERNAL void base_on_shutdown(int level, void (*fn)(void));
ST_INTERNAL void base_shutdown(void);

#endif
