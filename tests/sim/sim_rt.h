/*
 * sim_rt.h — the contract between a simulated kernel module and the simulated driver (tests only).
 *
 * A module is a host shared object built by the stand-in NVRTC (sim_nvrtc.c) from the exact CUDA
 * C++ unit stitch hands to NVRTC, compiled after sim_cuda.h. The driver (sim_driver.c) dlopens it,
 * writes its runtime table into the module's `st_sim_rt` and looks up one `sim_kernel` record per
 * kernel (symbol st_sim_k_<name>). Everything the kernel code asks of the "hardware" goes through
 * the table: who am I (thread, block), barriers, warp collectives, and every memory access (the
 * module is compiled with GCC's thread-sanitizer instrumentation, whose __tsan_* hooks the module
 * forwards to `access`; no TSan runtime is involved).
 *
 * The driver runs one block at a time on the calling OS thread, one fiber per CUDA thread, so
 * function-local statics of the module are per-block shared memory (sim_cuda.h puts __shared__
 * variables into one ELF section whose bounds the module reports).
 */
#ifndef ST_SIM_RT_H
#define ST_SIM_RT_H

#include <stddef.h>
#include <stdint.h>

typedef struct sim_dim3 {
    unsigned x, y, z;
} sim_dim3;

/* The running CUDA thread, as kernel code sees it. */
typedef struct sim_thread {
    sim_dim3 tid;          /* threadIdx */
    int linear, lane, warp;
} sim_thread;

/* Kinds of warp collectives (all lanes named by the mask must reach the same kind). */
enum { SIM_COLL_SYNCWARP, SIM_COLL_SHFL, SIM_COLL_VOTE, SIM_COLL_MMA };

#define SIM_COLL_MAX_WORDS 12

typedef struct sim_rt {
    sim_thread *cur;
    sim_dim3 block_idx, block_dim, grid_dim;
    /* A load (write 0) or store (write 1) of size bytes at addr by the current thread; site is the
     * instruction's return address (same site + same dynamic count across a warp = one request). */
    void (*access)(const void *addr, size_t size, int write, const void *site);
    void (*syncthreads)(const void *site);
    /* A warp collective: deposits n 32-bit words, waits for every lane of mask, returns the words
     * of all lanes ([32][SIM_COLL_MAX_WORDS], valid until this lane's next collective). */
    const uint32_t *(*collective)(int kind, unsigned mask, const uint32_t *words, int n);
    /* Reports a kernel error (formatted) and abandons the launch; does not return. */
    void (*fault)(const char *what);
    /* Tensor cores: lane's accumulators d += its part of A*B, from every lane's collective words
     * (a[4], b[2], c[4] per lane); kind 0 f16 m16n8k16, 1 bf16 m16n8k16, 2 tf32 m16n8k8. */
    void (*mma)(int kind, const uint32_t *all, int lane, float d[4]);
    uint32_t (*cvt_tf32)(float x);   /* cvt.rna.tf32.f32 */
} sim_rt;

/* One kernel of a module: exported as st_sim_k_<name>. */
typedef struct sim_kernel {
    const char *name;
    int nparams;
    const unsigned short *param_size;   /* bytes of each parameter, in order */
    int launch_bound;                   /* __launch_bounds__ max threads; 0: none */
    /* Runs the kernel body for the current thread with params (cuLaunchKernel's array). */
    void (*run)(void **params);
} sim_kernel;

/* What a module exports besides its kernels (symbol st_sim_module). */
typedef struct sim_module_info {
    int abi;                            /* SIM_ABI */
    sim_rt **rt;                        /* where the driver writes its table */
    char *shared_lo, *shared_hi;        /* the module's static shared memory */
} sim_module_info;

#define SIM_ABI 2   /* bumped with every change of this table */
#define SIM_MAGIC "STSIMSO1"            /* "cubin" = magic, then the shared object's bytes */

#endif
