/*
 * device.h — internal: the device layer. One device interface, its implementations, and the
 * buffers every tensor's data lives in.
 *
 * device/ owns: the interface (st_device_ops: a table of functions) and the registry that maps a
 * device number to an implementation (device.c); the CPU implementation with its cache of freed
 * data blocks (cpu.c); the CUDA implementation over the driver API (cuda.c, cuda.h) with its
 * caching allocator (devalloc.c, devalloc.h); refcounted data buffers (st_buffer, device.c).
 *
 * Devices are numbers: ST_DEV_CPU (0), or 1 + a CUDA ordinal; ST_DEV_ANY: not bound. Code above
 * this layer never decides by a device's number: it asks the registry (dev_target, dev_host_memory,
 * dev_info ...) and calls through the table. Adding a device is one implementation of
 * st_device_ops and one row of the registry (device.c).
 */
#ifndef ST_DEVICE_H
#define ST_DEVICE_H

#include "base/base.h"

enum { ST_DEV_ANY = -1, ST_DEV_CPU = 0 };
enum { DEV_MAX = 65 };   /* device numbers 0 .. DEV_MAX-1: the CPU and CUDA ordinals 0..63 */

/* The kernel language a device runs: C compiled by the system compiler (jit/compile.c) or CUDA C
 * compiled by NVRTC (jit/nvrtc.c). The fuser renders and compiles a group for its device's target. */
typedef enum dev_target { DEV_TARGET_C, DEV_TARGET_CUDA, DEV_TARGET_COUNT } dev_target;

/* What a device says of itself (valid while the device is active). */
typedef struct dev_info {
    const char *name;      /* "cpu", "NVIDIA H100 80GB HBM3" */
    int arch;              /* CUDA: compute capability major * 10 + minor; CPU: 0 */
    int units;             /* CUDA: multiprocessors; CPU: online processors */
    int max_threads;       /* threads per block (CUDA); 1 (CPU) */
    size_t total_mem;      /* bytes (CUDA); 0: unknown (CPU) */
    int version;           /* CUDA: the driver's CUDA version (12040 for 12.4); CPU: 0 */
} dev_info;

/* The kernel ABI of the C target: every generated CPU kernel is `void NAME(const st_kargs *a)`.
 * The JIT prints this layout into every translation unit (jit/cache.c checks it). */
typedef struct st_kargs {
    void *const *bufs;      /* buffer base pointers, in the order the kernel declares */
    const int64_t *ints;    /* integer parameters: sizes, strides, offsets, seeds */
    const double *flts;     /* float parameters: user scalars */
    int32_t *err;           /* a kernel sets *err non-zero on a runtime error (index out of range) */
    int nthreads;           /* threads the kernel may use (>= 1) */
    const struct st_pool_api *pool; /* the threads of its parallel regions (cpu_pool.h); NULL: one */
    const struct st_gemm_api *gemm; /* the library's GEMM (base/gemm.h) a matmul kernel calls; NULL
                                     * only for kernels that multiply no matrices */
} st_kargs;
typedef void (*st_kernel_fn)(const st_kargs *a);

/* One kernel launch in the device's kernel ABI: buffers, int parameters, float parameters (CUDA
 * adds the device error flag and rt, jit/render.h). check: the kernel may report an index error.
 * The C target reads the flag back at once (launch's *err); a CUDA launch does not wait: its
 * flag is read at the device's next synchronization point (synchronize, copy_out), which then
 * fails with ST_ERR_ARG and the message `what`. */
typedef struct dev_call {
    void *fn;                      /* C: st_kernel_fn; CUDA: a function from load_function */
    void *const *bufs;
    const int64_t *ints;
    const double *flts;
    int nbufs, nints, nflts;
    unsigned grid[3], block[3];    /* CUDA geometry */
    int rt;                        /* CUDA: threads per row (CL_ROWS), else 0 */
    int scratch;                   /* CUDA: > 0: the kernel takes a pointer to this many bytes of
                                    * the device's scratch memory after rt (its first 4 bytes 0
                                    * before the launch; the kernel leaves them 0) */
    int nthreads;                  /* C: threads the kernel may use (>= 1) */
    int check;
    const char *what;              /* CUDA, with check: the error its flag means (copied) */
    const char *name;              /* CUDA: a readable name for error messages ("k3_softmax"), or NULL */
} dev_call;

/* A device implementation. ord is the ordinal within the implementation (cuda:ord). Every function
 * reports failure with st_error (ST_ERR_DEVICE, ST_ERR_OOM) and leaves the device usable. */
typedef struct st_device_ops {
    const char *kind;                     /* "cpu", "cuda": the name is kind or kind:ord */
    dev_target target;
    bool host_memory;                     /* buffers are host memory: the interpreter runs there */
    int (*count)(void);                   /* devices usable now (0: none; unavailable says why) */
    const char *(*unavailable)(void);     /* why none is usable, in plain words ("" when usable) */
    const dev_info *(*info)(int ord);     /* activates ord on first use; NULL with the error set */
    st_status (*alloc)(int ord, size_t n, void **ptr);
    void (*free)(int ord, void *ptr, size_t n);
    st_status (*copy_in)(int ord, void *dst, const void *src, size_t n);   /* host -> device, queued */
    st_status (*copy_out)(int ord, void *dst, const void *src, size_t n);  /* device -> host, waits */
    st_status (*copy)(int ord, void *dst, const void *src, size_t n);      /* on the device, queued */
    st_status (*synchronize)(int ord);    /* reports asynchronous errors (and flagged index errors) */
    /* synchronize on every ordinal already in use (activating none), after reporting an error kept
     * from a path that could not return one; the first error. NULL: nothing is ever deferred. */
    st_status (*synchronize_all)(void);
    /* The function `name` of a compiled image (a cubin), loaded once per image; NULL for targets
     * whose kernels the JIT loads itself (C). */
    st_status (*load_function)(int ord, const void *image, size_t n, const char *name, void **fn);
    /* Changes whenever functions from load_function become invalid (modules unloaded); never 0. */
    unsigned (*generation)(void);
    /* Unloads every module load_function loaded (on every ordinal; the generation changes): the
     * images they came from may be freed afterwards, not before. NULL when there is nothing to do. */
    void (*unload_functions)(void);
    st_status (*launch)(int ord, const dev_call *c, int *err);   /* *err: the kernel's error flag */
    void (*mem_stats)(uint64_t *in_use, uint64_t *reserved, uint64_t *peak);   /* all ordinals */
    void (*reset_peak)(void);
    void (*empty_cache)(void);
} st_device_ops;

ST_INTERNAL extern const st_device_ops dev_cpu_ops;    /* cpu.c */
ST_INTERNAL extern const st_device_ops dev_cuda_ops;   /* cuda.c */

/* ---- the registry (device.c) ---- */
/* The implementation of device dev and its ordinal there; NULL for a number no implementation has. */
ST_INTERNAL const st_device_ops *dev_ops(int dev, int *ord);
static inline dev_target dev_target_of(int dev) {
    int ord;
    const st_device_ops *o = dev_ops(dev, &ord);
    return o ? o->target : DEV_TARGET_C;
}
static inline bool dev_host_memory(int dev) {
    int ord;
    const st_device_ops *o = dev_ops(dev, &ord);
    return !o || o->host_memory;
}
/* Parses "cpu", "cuda", "gpu", "cuda:N"; ST_ERR_ARG naming it when malformed. */
ST_INTERNAL st_status dev_parse(const char *name, int *dev);
/* ST_OK when dev can be used now (activating it); else ST_ERR_DEVICE saying why in plain words.
 * The device alone: whether its kernels can be compiled is the JIT's to say (runtime/device.c
 * asks both). */
ST_INTERNAL st_status dev_check(int dev);
ST_INTERNAL const dev_info *dev_info_of(int dev);          /* NULL with the error set */
ST_INTERNAL const char *st_dev_name(int dev, char *buf, size_t n);   /* "cpu", "cuda:0", "any" */
ST_INTERNAL const char *st_dev_static_name(int dev);      /* the same, static storage */
ST_INTERNAL int dev_accel_count(void);          /* usable devices that are not the CPU */
/* The first device of the first implementation after the CPU that reports one (cuda:0), else
 * ST_DEV_CPU with *why saying in words why there is none. */
ST_INTERNAL int dev_first_accel(const char **why);
/* Sums of every implementation's memory statistics; peaks restart; cached blocks freed. */
ST_INTERNAL void dev_mem_stats(uint64_t *in_use, uint64_t *reserved, uint64_t *peak);
ST_INTERNAL void dev_reset_peak(void);
ST_INTERNAL void dev_empty_caches(void);
/* Every implementation's unload_functions (before a cache frees the images they came from). */
ST_INTERNAL void dev_unload_functions(void);
/* Waits for every device in use and reports the first error its asynchronous work left (an index
 * error flagged by a kernel, a fault, an error kept from a free or a shutdown); activates none.
 * An error stops the round: the devices after it are waited for by the next call. */
ST_INTERNAL st_status dev_synchronize_all(void);

/* ---- buffers (device.c) ----
 * Tensor data: refcounted, on one device. On the CPU: 64-byte aligned host memory counted in
 * st_stats_g.bytes_in_use; elsewhere data is the device's pointer, counted by its allocator. */
typedef struct st_buffer {
    int32_t refcnt;
    int32_t device;
    size_t nbytes;
    void *data;
} st_buffer;
ST_INTERNAL st_buffer *st_buffer_new(size_t nbytes);                 /* on the CPU; poisoned when poisoning is on */
ST_INTERNAL st_buffer *st_buffer_new_on(int dev, size_t nbytes);    /* NULL with the error set */
ST_INTERNAL void st_buffer_release(st_buffer *b);
static inline st_buffer *st_buffer_retain(st_buffer *b) { b->refcnt++; return b; }
/* Copies n bytes between buffers of any devices (through the host between two devices). */
ST_INTERNAL st_status dev_copy_bytes(st_buffer *dst, size_t doff, const st_buffer *src, size_t soff, size_t n);
/* Bytes [off, off + n) of a buffer readable on the host: the data itself on a host-memory device
 * (*owned NULL), else a fresh st_malloc'ed copy (*owned set; the caller st_frees it). */
ST_INTERNAL st_status dev_host_bytes(const st_buffer *b, size_t off, size_t n, const void **out, void **owned);

/* cpu.c: the CPU's data blocks (64-byte aligned; 2 MiB aligned and huge-page advised from 2 MiB;
 * a small cache of freed blocks by size, emptied by the base_trim hook). */
ST_INTERNAL void *dev_cpu_block_alloc(size_t n);   /* NULL (no error set) on failure */
ST_INTERNAL void dev_cpu_block_free(void *p, size_t n);
ST_INTERNAL uint64_t dev_cpu_cached_bytes(void);   /* freed blocks the cache holds */

#endif
