/*
 * cuda.h — the CUDA Driver API layer (internal): devices, memory, transfers, modules, launches.
 *
 * libcuda is loaded with dlopen at the first cuda_probe(); nothing links against CUDA at build
 * time. On a machine without a driver or GPU every entry point fails with ST_ERR_DEVICE and
 * cuda_unavailable_reason() says why in plain words; nothing crashes or exits.
 *
 * Per device, activated lazily on first use: the primary context, ONE non-blocking stream on which
 * all work of the runtime runs (copies, launches; so a freed block may be reused by later work
 * without any event), a pinned staging buffer for host<->device copies, and a caching allocator
 * (devalloc.h). Errors carry the driver call and its error name and text, e.g.
 * "CUDA error in cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument)". Errors of
 * asynchronous work surface at the next call that waits (cuda_copy_dtoh, cuda_synchronize) and
 * name the kernels launched since the device's last successful synchronization (the last 8);
 * ST_CUDA_SYNC=1 waits after every launch, so that a fault is reported by its own launch. A
 * driver failure in a path that cannot return it (a free, an unload, shutdown) is kept and
 * returned by the next call that can (ST_DEBUG prints it at once).
 * Not thread-safe: the runtime calls this layer from one thread at a time.
 */
#ifndef ST_CUDA_H
#define ST_CUDA_H

#include "base/base.h"
#include <stdint.h>

typedef uint64_t st_devptr;

typedef struct cuda_device_info {
    int ordinal, cc_major, cc_minor, sm_count, max_threads;
    size_t total_mem;
    char name[128];
} cuda_device_info;

/* Loads and initializes the driver once per process; the number of usable devices (0: none). The
 * library is ST_CUDA_LIB when set, else libcuda.so.1 from the default search path, then a few
 * standard places (never the toolkit's stub unless ST_CUDA_LIB names it). */
ST_INTERNAL int cuda_probe(void);
/* Why CUDA is unusable, in plain words ("no CUDA driver found (...)"); "" when it is usable. */
ST_INTERNAL const char *cuda_unavailable_reason(void);
/* The driver's CUDA version (e.g. 12040 for 12.4), 0 when unavailable. */
ST_INTERNAL int cuda_driver_version(void);
/* Device ordinal's info, activating it (context, stream, staging, allocator) on first use; NULL
 * with ST_ERR_DEVICE set if CUDA is unavailable, ordinal is out of range or activation failed. */
ST_INTERNAL const cuda_device_info *cuda_device(int ordinal);

/* Device memory through the device's caching allocator. Failure: ST_ERR_OOM ("CUDA out of memory
 * on cuda:0: tried to allocate ...") or ST_ERR_DEVICE. cuda_mem_free(dev, 0) is a no-op. */
ST_INTERNAL st_status cuda_mem_alloc(int dev, size_t n, st_devptr *out);
ST_INTERNAL void cuda_mem_free(int dev, st_devptr p);
/* Free and total memory of the device as the driver sees it (cuMemGetInfo). */
ST_INTERNAL st_status cuda_mem_get_info(int dev, size_t *free_bytes, size_t *total_bytes);
/* Sums over all active devices; peak is the sum of per-device peaks. */
ST_INTERNAL void cuda_mem_stats(uint64_t *in_use, uint64_t *reserved, uint64_t *peak);
ST_INTERNAL void cuda_mem_reset_peak(void);   /* peaks restart at in_use (for st_reset_stats) */
ST_INTERNAL void cuda_empty_cache(void);      /* cached free blocks back to the driver */

/* Host -> device: src is copied into pinned staging and the copy is queued on the stream; returns
 * without waiting for the device (src may be reused at once). */
ST_INTERNAL st_status cuda_copy_htod(int dev, st_devptr dst, const void *src, size_t n);
/* Device -> host, after all work queued before it on the stream; returns when dst holds the data.
 * A synchronization point like cuda_synchronize (its errors are reported; dst is filled anyway
 * when only an index error was flagged). */
ST_INTERNAL st_status cuda_copy_dtoh(int dev, void *dst, st_devptr src, size_t n);
/* Device -> device, queued on the stream. */
ST_INTERNAL st_status cuda_copy_dtod(int dev, st_devptr dst, st_devptr src, size_t n);

/* The function `name` of a cubin (or of PTX text, NUL-terminated, which the driver compiles for
 * the device). The module is loaded once per (dev, cubin pointer) and the function is cached by
 * (module, name): the cubin must not be freed and another one allocated at its address while the
 * module is loaded (until cuda_unload_modules or cuda_shutdown). n is its size, for messages.
 * *fn is this layer's handle of the function (it knows its name), for cuda_launch. */
ST_INTERNAL st_status cuda_module_function(int dev, const void *cubin, size_t n, const char *name, void **fn);
/* Unloads every module of every device, after waiting for its stream (functions handed out
 * become invalid; cuda_module_generation changes): the cubins may be freed afterwards. */
ST_INTERNAL void cuda_unload_modules(void);
/* A number that changes whenever functions handed out by cuda_module_function become invalid
 * (modules unloaded by cuda_shutdown or a device's release): whoever keeps a function across calls
 * keeps the generation it was resolved under and resolves it again when it differs. Never 0. */
ST_INTERNAL unsigned cuda_module_generation(void);
/* Queues fn (from cuda_module_function) on the device's stream; params: one pointer per kernel
 * parameter, in order. label (may be NULL): a readable name for messages, next to the function's.
 * With ST_CUDA_SYNC=1 it waits for the kernel and reports its fault naming it. */
ST_INTERNAL st_status cuda_launch(int dev, void *fn, const char *label, const unsigned grid[3],
                                  const unsigned block[3], unsigned shmem, void **params);
/* Waits for all work queued on the device's stream; reports errors of asynchronous work (naming
 * the kernels in flight), then the first index error flagged since the last synchronization
 * (ST_ERR_ARG, the launch's message; cuda_copy_dtoh does the same). */
ST_INTERNAL st_status cuda_synchronize(int dev);
/* cuda_synchronize on every device already active (none is activated, the driver is not probed),
 * after the error kept from a path that could not return one (a free, an unload, cuda_shutdown's
 * flags): the first error; the devices after it are waited for by the next call. */
ST_INTERNAL st_status cuda_synchronize_all(void);

/* Frees the caches: waits for each device, unloads every module (functions handed out become
 * invalid), returns cached blocks to the driver; a device with no block in use is released
 * completely (stream, staging, allocator, context) and re-activated if used again. Blocks still
 * in use (alive device tensors) stay valid. The driver library stays loaded. */
ST_INTERNAL void cuda_shutdown(void);

#endif
