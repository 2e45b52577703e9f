/*
 * jit.h — internal: the JIT layer. jit/ owns the renderers (render.h: kernel IR to C and to CUDA C,
 * render_cuda_mma.c for tensor cores), the compilers (compile.c: the system C compiler; nvrtc.c:
 * NVRTC, loaded with dlopen, and its CI check mode) and the kernel caches (cache.c: source ->
 * function, in memory and on disk; cache_cuda.c: source -> cubin). It reads kernel IR and knows
 * nothing of plans or tensors. This header is the CPU side: compiling C to callable functions.
 *
 * Kernel ABI (every generated CPU kernel): one exported function
 *     void NAME(const st_kargs *a);
 * where NAME is the macro KNAME, defined by the JIT right before the kernel's source (so the same
 * source always gets the same symbol: st_k_<hash of the key>). The source may use everything in
 * base/opmath.h (prepended once per compilation unit) and OpenMP pragmas.
 * The JIT also defines st_kargs (device/device.h's layout) after the prelude, guarded by
 * ST_KARGS_DEFINED; kernel sources must not define it. Kernels of one batch share a translation
 * unit: a kernel's own helpers must have KNAME-unique names (or live in the prelude).
 *
 * Caches: (1) in memory, uthash, key -> function; (2) on disk under the cache dir (ST_CACHE_DIR,
 * else $XDG_CACHE_HOME/stitch, else ~/.cache/stitch). key = hash(source, compiler identity, flags).
 * All kernels missing from both caches in one jit_get_kernels call are compiled by ONE compiler
 * invocation into one shared object; disk writes go to a temp file and are renamed into place;
 * entries are verified (size + checksum) on load and recompiled when corrupt or truncated.
 */
#ifndef ST_JIT_H
#define ST_JIT_H

#include "device/device.h"

/* st_kargs and st_kernel_fn, the C target's kernel ABI, are the CPU device's (device/device.h). */

/* Get a callable function for each of n kernel sources (each defines KNAME). kname_hint[i] is a
 * readable name for logs ("add_exp_sum"), may be NULL. On success out[i] is set for every i and the
 * counters kernels_compiled / cache_hits_memory / cache_hits_disk / compile_calls / compile_ms are
 * updated. On compile failure: ST_ERR_COMPILE with the compiler log and the saved source path. */
ST_INTERNAL st_status jit_get_kernels(int n, const char *const *sources,
                                      const char *const *kname_hint, st_kernel_fn *out);
/* The background tier (ST_JIT_ASYNC): jit_async_start fills out[i] for every kernel a cache
 * holds and starts ONE compiler run for the others, returning at once with *job (NULL when
 * nothing was missing; an error when the compiler could not be started). jit_async_poll answers 0
 * while it runs and 1 once it ended: then *status is jit_get_kernels's result and, on success,
 * out[i] is set for every i (the kernels are in both caches). block: wait for the end (bounded by
 * ST_COMPILE_TIMEOUT and st_interrupt()). jit_async_free stops a running compile and removes its
 * files. The job is single-threaded: the compiler is a child process, polled. */
typedef struct jit_async jit_async;
ST_INTERNAL st_status jit_async_start(int n, const char *const *sources, const char *const *kname_hint,
                                      int repeats, st_kernel_fn *out, jit_async **job);
ST_INTERNAL int jit_async_poll(jit_async *job, int block, st_kernel_fn *out, st_status *status);
ST_INTERNAL void jit_async_free(jit_async *job);
/* At most one compiler per CPU but one runs in the background: a job that finds none free waits
 * (its sources kept) and starts at a later poll that finds one, looking in the caches again first
 * (what another job compiled meanwhile is not compiled twice); a blocking poll starts it anyway.
 * repeats 0: the job is for a plan's first run (it may never run again); such a job, while it
 * compiles, gives its compiler up to a job whose plan runs again (repeats 1, or polled without
 * block: its owner ran again) that finds none free, and waits again.
 * jit_async_running (for tests): the job's compiler has started and has not been reaped. */
ST_INTERNAL int jit_async_running(const jit_async *job);
/* Reaps every background compiler that has ended (loads and indexes its kernels, frees its slot),
 * whoever's job it is; called by every start and poll, and by each flush (fuse_execute). */
ST_INTERNAL void jit_async_reap(void);
/* Non-compiling probe: the function if the kernel is in the memory cache (or loadable from disk
 * when allow_disk), else NULL. Used to decide between the interpreter tier and compiling. */
ST_INTERNAL st_kernel_fn jit_lookup(const char *source, int allow_disk);
/* Drop the in-memory cache and unload every shared object (st_shutdown). */
ST_INTERNAL void jit_shutdown(void);
/* The cache directory in use (created on demand): the configured one, or when that cannot be
 * written a private temporary directory, removed by jit_shutdown or at exit. */
ST_INTERNAL const char *jit_cache_dir(void);
/* Brings the cache directory under ST_CACHE_MAX now (cache_prune.c: least recently used first,
 * never an object this process has loaded) and cleans up temp files and old failed sources.
 * Runs by itself at initialization and after the process wrote max/8 bytes; ST_ERR_OOM only. */
ST_INTERNAL st_status jit_cache_prune(void);
/* Counts bytes written to the cache directory (the CUDA cache reports its cubins here). */
ST_INTERNAL void jit_cache_wrote(uint64_t bytes);

/* The prelude text (base/opmath.h embedded at build time). */
ST_INTERNAL extern const char st_prelude_src[];

#endif
