/*
 * devalloc.h — a caching allocator for device memory, generic over a raw backend (internal).
 *
 * A raw device allocation (cuMemAlloc) costs tens of microseconds and may synchronize the device;
 * a training step allocates the same sizes every iteration. So freed blocks are kept, per size
 * class, and handed out again. The backend is a pair of function pointers, which lets the tests
 * drive the allocator with a fake device (tests/test_devalloc.c) and cuda.c put it on cuMemAlloc.
 *
 * Size classes: requests up to DEVALLOC_SMALL_MAX are rounded up to a multiple of 512 B, larger
 * ones to a multiple of 2 MiB; a freed block is reused only for a request of exactly its class
 * (no splitting, no coalescing: simple, and exact for the repeated sizes of a training loop).
 * A backend with `exact` set (the tests' simulated GPU) gets every request at its own size.
 *
 * Out of memory: (1) return every cached block to the backend and retry, (2) give the host's OOM
 * handler (st_call_oom_handler; under Lua a full GC that may free device tensors) its chance and
 * retry, (3) fail with ST_ERR_OOM and a message with human units. The allocator stays usable.
 *
 * Statistics count class-rounded block sizes: in_use = blocks handed out, reserved = in_use +
 * cached free blocks (what the backend really holds), peak = high-water mark of in_use since the
 * last devalloc_reset_peak. Not thread-safe: the runtime calls it from one thread.
 */
#ifndef ST_DEVALLOC_H
#define ST_DEVALLOC_H

#include "base/base.h"
#include <stdint.h>

#define DEVALLOC_SMALL_ROUND ((size_t)512)
#define DEVALLOC_LARGE_ROUND ((size_t)2 << 20)
#define DEVALLOC_SMALL_MAX ((size_t)1 << 20)

/* The raw device memory below the cache. alloc returns ST_OK with *ptr set (non-zero), ST_ERR_OOM
 * when the device is out of memory (no message needed), or another status after setting the
 * error message itself (st_error). free must accept every pointer alloc returned. */
typedef struct devalloc_backend {
    void *ud;
    st_status (*alloc)(void *ud, size_t n, uint64_t *ptr);
    void (*free)(void *ud, uint64_t ptr);
    uint64_t total;      /* device memory in bytes (for messages; 0 = unknown) */
    const char *name;    /* "CUDA": the message says "CUDA out of memory ..." */
    const char *label;   /* "cuda:0" */
    bool exact;          /* classes are the requested sizes (the simulated GPU: an overrun of the
                          * tensor, not of the rounded block, reaches the end of the allocation) */
} devalloc_backend;

typedef struct devalloc_stats {
    uint64_t in_use, reserved, peak;
    uint64_t raw_allocs, raw_frees;   /* backend calls made so far */
} devalloc_stats;

typedef struct devalloc devalloc;

/* A new allocator over a copy of *be (name and label are copied too); NULL with ST_ERR_OOM. */
ST_INTERNAL devalloc *devalloc_new(const devalloc_backend *be);
/* Returns every block, cached or still handed out, to the backend and frees a. Every pointer the
 * allocator handed out is invalid afterwards. NULL is a no-op. */
ST_INTERNAL void devalloc_destroy(devalloc *a);
/* A block of at least n bytes (n = 0 gives the smallest class). Failure: ST_ERR_OOM with
 * "<name> out of memory on <label>: tried to allocate ...", or the backend's own error. */
ST_INTERNAL st_status devalloc_alloc(devalloc *a, size_t n, uint64_t *out);
/* Gives p (from devalloc_alloc of a) back to the cache; 0 is a no-op. */
ST_INTERNAL void devalloc_free(devalloc *a, uint64_t p);
/* Returns every cached free block to the backend. */
ST_INTERNAL void devalloc_empty_cache(devalloc *a);
ST_INTERNAL void devalloc_get_stats(const devalloc *a, devalloc_stats *s);
ST_INTERNAL void devalloc_reset_peak(devalloc *a);   /* peak restarts at in_use */
/* The class a request of n bytes is rounded to; 0 if the rounding overflows. */
ST_INTERNAL size_t devalloc_class(size_t n);
/* n in human units ("512 B", "1.50 KiB", "2.00 GiB") with `decimals` digits, into buf. */
ST_INTERNAL const char *devalloc_human(uint64_t n, int decimals, char *buf, size_t cap);

#endif
