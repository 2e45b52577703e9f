/*
 * nvrtc.h — internal: CUDA C to cubin through NVRTC (loaded with dlopen, never linked), the cubin
 * cache, and the CI check mode that compiles every generated CUDA kernel without a GPU.
 *
 * Files: nvrtc.c (loading, options, one compilation), cache_cuda.c (memory + disk cubin cache),
 * nvrtc_check.c (ST_NVRTC_CHECK=1). The build needs no CUDA file: we declare the few NVRTC types
 * and functions we call ourselves (nvrtc.c).
 *
 * Translation unit of an NVRTC program (nvrtc_unit): a comment, the prelude (st_prelude_src), then
 * per kernel `#define KNAME <kname>`, its source, `#undef KNAME`. A kernel's own helpers must be
 * KNAME-unique (or live in the prelude): the check mode compiles many kernels per program.
 */
#ifndef ST_JIT_NVRTC_H
#define ST_JIT_NVRTC_H

#include "jit/compile.h"
#include "ir/kir.h"

/* Loads libnvrtc once per process and resolves its functions. Search: ST_NVRTC_PATH (a file, or a
 * directory holding libnvrtc.so*) when set, and then nothing else; otherwise the sonames
 * libnvrtc.so, libnvrtc.so.13, .12, .11.2 in the loader's default path, then libnvrtc.so* in
 * $CUDA_PATH/lib64, $CUDA_HOME/lib64 and /usr/local/cuda/lib64. A failure is remembered and
 * reported again (ST_ERR_DEVICE, naming every path tried) by later calls. */
ST_INTERNAL st_status nvrtc_load(void);
/* The search of nvrtc_load for a given ST_NVRTC_PATH value (NULL or "": the default search),
 * without touching the loaded library: *handle gets a dlopen handle (the caller dlcloses it) and
 * found[cap] the path that loaded. ST_ERR_DEVICE naming every path tried. For tests. */
ST_INTERNAL st_status nvrtc_search(const char *nvrtc_path, void **handle, char *found, size_t cap);
/* The loaded library's version; 0, or -1 when libnvrtc cannot be loaded (error set). */
ST_INTERNAL int nvrtc_version(int *major, int *minor);
/* The path libnvrtc was loaded from (NULL before a successful nvrtc_load). */
ST_INTERNAL const char *nvrtc_library_path(void);
/* The real architectures (compute capability major * 10 + minor, ascending) the loaded NVRTC can
 * compile cubins for: their number, 0 when not known (NVRTC before 11.2, or not loaded). */
ST_INTERNAL int nvrtc_supported_archs(const int **archs);
/* The architecture kernels for a GPU of compute capability cc (major * 10 + minor) are compiled
 * for: the one rule of the runtime and of the check mode. sm_<cc> (a cubin), sm_90a on Hopper
 * with NVRTC 12+; when NVRTC's list of supported architectures lacks cc, compute_<newest
 * supported below cc> (PTX, compiled by the driver at load). Loads libnvrtc. ST_ERR_DEVICE when
 * the GPU is older than every supported architecture (or libnvrtc does not load). */
ST_INTERNAL st_status nvrtc_arch(int cc, char *out, size_t cap);
/* Whether a driver of CUDA version driver_version (12040 for 12.4) loads NVRTC's output for arch:
 * not when NVRTC's major version is newer (its cubins do not load), nor, for PTX (compute_XY),
 * when its version is newer at all. ST_ERR_DEVICE naming both versions and what to do. */
ST_INTERNAL st_status nvrtc_driver_check(int driver_version, const char *arch);
/* Both, for a device of the CUDA target: the architecture to compile for into arch[cap], or
 * ST_ERR_DEVICE saying in words why NVRTC cannot serve this GPU. */
ST_INTERNAL st_status jit_cuda_target(const dev_info *di, char *arch, size_t cap);
/* The fixed options (without --gpu-architecture), joined with spaces: part of every cubin key.
 * Static storage. Documented in nvrtc.c. */
ST_INTERNAL const char *nvrtc_options(void);

/* The translation unit for n kernels: prelude, then each srcs[i] between #define KNAME knames[i]
 * and #undef KNAME (hints[i], if hints and hints[i], names it in a comment). raw: built with the C
 * library's allocator (the check mode must not meet the injected failures of st_debug_fail_alloc)
 * rather than st_malloc. Freed with st_free; NULL when out of memory (ST_ERR_OOM set unless raw). */
ST_INTERNAL char *nvrtc_unit(int n, const char *const *srcs, const char *const *knames, const char *const *hints,
                             int raw);

/* One NVRTC compilation of unit for arch, usable from any thread: no st_error, no st_malloc, no
 * counters. Returns the nvrtcResult (0 on success; -1 when libnvrtc is not loaded or arch is not
 * sm_<digits>[a|f] or compute_<digits>[a|f]). When cubin is not NULL it receives the cubin, or for
 * compute_XY the PTX text with its NUL (malloc'ed, *n its size) on success; *log (if log) the
 * program log, malloc'ed, possibly "" (NULL when out of memory). *ms: wall time. name: the
 * program's file name in the log ("<tag>.cu"). */
ST_INTERNAL int nvrtc_try(const char *unit, const char *arch, const char *name, void **cubin, size_t *n, char **log,
                          double *ms);
/* "NVRTC_ERROR_COMPILATION" for an nvrtcResult (static storage). */
ST_INTERNAL const char *nvrtc_result_name(int rc);
/* Saves unit and log as <cache dir>/failed/<tag>-XXXXXX.cu and .log; the .cu path goes to
 * path[cap]. 0, or -1 (errno set) when they cannot be written. */
ST_INTERNAL int nvrtc_save_failed(const char *unit, const char *log, const char *tag, char *path, size_t cap);

/* Compile one translation unit (prelude + kernels, see nvrtc_unit) for arch ("sm_80", "sm_90a",
 * ...) to a cubin, or for "compute_90" ... to PTX text (NUL included: cuModuleLoadData takes it):
 * *cubin st_malloc'ed (the caller frees it), *n its size, *ms the wall time.
 * Failure: ST_ERR_COMPILE with the NVRTC log and the path of the saved source (<cache
 * dir>/failed/<tag>-XXXXXX.cu, log beside it); ST_ERR_ARG for a malformed arch; ST_ERR_DEVICE
 * when libnvrtc cannot be loaded. */
/* arch is a virtual architecture (compute_XY): NVRTC writes PTX text for it, not a cubin. */
ST_INTERNAL int nvrtc_is_ptx(const char *arch);
ST_INTERNAL st_status nvrtc_compile(const char *src, const char *arch, const char *tag, void **cubin, size_t *n,
                                    double *ms);

/* Kernel cache: cubin for (kernel source, kname, arch), or PTX text for a compute_XY arch; memory
 * (uthash) + disk (<cache dir>/cuda/<key>.cubin or .ptx, temp+rename, header with magic, key, size
 * and checksum, verified on load, recompiled and rewritten if corrupt). key = hash(source, kname,
 * arch, cubin or PTX, NVRTC version, options, prelude). The returned cubin is owned by the cache
 * and valid until jit_cubin_shutdown (which has the devices unload their modules first). Counters
 * st_stats_g.kernels_compiled / cache_hits_memory / cache_hits_disk / compile_calls / compile_ms
 * are updated. kname: the KNAME #defined before the source (the function's name in the cubin).
 * key_out may be NULL. */
ST_INTERNAL st_status jit_cubin_get(const char *src, const char *kname, const char *arch, const void **cubin,
                                    size_t *n, base_hash *key_out);
/* Frees the memory cache (every cubin handed out). Disk entries stay. */
ST_INTERNAL void jit_cubin_shutdown(void);

/* CI check mode (ST_NVRTC_CHECK=1, read once): every kernel the executor lowers is rendered to
 * CUDA C and compiled by NVRTC for what an A100 and an H100 get (nvrtc_arch(80), nvrtc_arch(90):
 * sm_80, sm_90a), in batches, and at exit. A failing kernel is
 * printed with its saved source and log, and the process exits non-zero at exit. */
ST_INTERNAL int jit_nvrtc_check_enabled(void);
/* Compiles the kernels queued so far (the executor calls it at the end of every flush). */
ST_INTERNAL void jit_nvrtc_check_flush(void);
/* Renders k (render_cuda) and queues it. Never changes the CPU run: always ST_OK; a kernel that
 * cannot be rendered or compiled is counted and reported at exit. */
ST_INTERNAL st_status jit_nvrtc_check(const kir_kernel *k, const char *name);
/* Queues a CUDA source (one __global__ named KNAME) directly: jit_nvrtc_check after rendering,
 * and hand-written kernels in tests. A source seen before in this process is not queued again. */
ST_INTERNAL void jit_nvrtc_check_source(const char *src, const char *name);

#endif
