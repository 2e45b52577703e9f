/*
 * internal.h — internal runtime declarations (not part of the public API).
 *
 * dtype traits, errors, memory, statistics and global runtime state. Everything declared here is
 * hidden from libstitch.so's export table (ST_INTERNAL).
 *
 * Ownership model, in one paragraph: a public st_tensor is a handle = (storage, strided view).
 * A storage owns the current *version* of its data as a trace node (st_node) of the storage's base
 * shape. Reading a tensor reads VIEW(storage->node); an in-place write replaces storage->node by a
 * new node (the op's result, or SETVIEW(old, value) for a strided region), so every view of the
 * storage sees the write and nodes stay immutable values (no read/write race inside the trace).
 * Nodes are refcounted: held by consumer nodes (src), storages, tensors' cached view nodes and
 * flushes. A realized node has op ST_OP_BUFFER and a contiguous buffer of its shape and dtype.
 */
#ifndef ST_INTERNAL_H
#define ST_INTERNAL_H

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

/* ---- dtypes: one traits table ---- */
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
/* Host-side conversions used by the runtime and the interpreter (same rounding as prelude.h). */
ST_INTERNAL double st_load_f64(st_dtype dt, const void *base, int64_t i);
ST_INTERNAL int64_t st_load_i64(st_dtype dt, const void *base, int64_t i);
ST_INTERNAL void st_store_f64(st_dtype dt, void *base, int64_t i, double v);
ST_INTERNAL void st_store_i64(st_dtype dt, void *base, int64_t i, int64_t v);

/* ---- errors: a thread-local status + message ---- */
/* Sets the error (printf-style) and returns status, for `return st_error(...)`. */
ST_INTERNAL st_status st_error(st_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- memory: one allocation hook for runtime, uthash and (through lua_Alloc) Lua ---- */
/* Host allocations for runtime objects; NULL with ST_ERR_OOM set on failure (after the OOM
 * handler was given one chance to free memory). st_debug_fail_alloc makes these fail on demand. */
ST_INTERNAL void *st_malloc(size_t n);
ST_INTERNAL void *st_calloc(size_t n, size_t size);
ST_INTERNAL void *st_realloc(void *p, size_t n);
ST_INTERNAL void st_free(void *p);
ST_INTERNAL char *st_strdup(const char *s);

/* Devices as numbers: ST_DEV_CPU, or 1 + a CUDA ordinal; ST_DEV_ANY: not bound (trace/trace.h). */
enum { ST_DEV_ANY = -1, ST_DEV_CPU = 0 };
ST_INTERNAL int st_default_dev(void);   /* resolved once (runtime/device.c) */

/* Tensor data buffers: refcounted, 64-byte aligned, counted in bytes_in_use. */
typedef struct st_buffer {
    int32_t refcnt;
    int32_t device;     /* ST_DEV_CPU (0), or 1 + the CUDA ordinal */
    size_t nbytes;
    void *data;
} st_buffer;
ST_INTERNAL st_buffer *st_buffer_new(size_t nbytes); /* poisoned when poisoning is on */
/* A buffer on device dev (ST_DEV_CPU, or 1 + a CUDA ordinal: data is then a device pointer). */
ST_INTERNAL st_buffer *st_buffer_new_on(int dev, size_t nbytes);
ST_INTERNAL void st_buffer_release(st_buffer *b);
ST_INTERNAL void st_mem_trim(void);   /* free the cache of released data blocks */
/* Give the host's OOM handler (st_set_oom_handler; Lua: a full GC) its chance to free memory;
 * non-zero when it asks for a retry. Used by the device allocator before it reports OOM. */
ST_INTERNAL int st_call_oom_handler(size_t bytes);
static inline st_buffer *st_buffer_retain(st_buffer *b) { b->refcnt++; return b; }

/* ---- statistics and global state ---- */
ST_INTERNAL extern st_stats_t st_stats_g;
typedef struct st_runtime {
    int eager;            /* ST_EAGER */
    int debug;            /* ST_DEBUG flags */
    int poison;           /* ST_POISON */
    int64_t jit_min;      /* ST_JIT_MIN */
    int64_t trace_max;    /* pending nodes before an automatic flush (ST_TRACE_MAX) */
    volatile int interrupted;
    uint64_t rng_seed, rng_offset;
    int inited;
} st_runtime;
ST_INTERNAL extern st_runtime st_rt;
ST_INTERNAL void st_runtime_init(void);   /* idempotent; reads the environment */
ST_INTERNAL double st_now_ms(void);       /* monotonic clock */

#endif
