/*
 * sim_cuda.h — CUDA built-ins for host C++: what a simulated kernel module is compiled against
 * (tests only). The stand-in NVRTC (sim_nvrtc.c) compiles `#include "sim_cuda.h"` + the exact unit
 * stitch hands to NVRTC (prelude and kernels) + one ST_SIM_KERNEL(name, bound) line per kernel,
 * with g++ -std=c++17 -fsanitize=thread (instrumentation only: the __tsan_* hooks below forward
 * every memory access to the simulated driver; no TSan runtime is linked).
 *
 * Mapping:
 *  - threadIdx, blockIdx, blockDim, gridDim: fields of the driver's runtime table (sim_rt.h).
 *  - __shared__: a function-local static in the section "st_sim_shm". Blocks run one at a time on
 *    one OS thread, so a static is exactly one block's shared memory; the driver poisons the
 *    section before each block and tracks every access to it (uninitialized reads, races, bank
 *    conflicts). -fno-ipa-reference and the compiler barriers around every synchronization keep
 *    g++ from caching shared values across a barrier.
 *  - __syncthreads, __syncwarp, shuffles, votes, the prelude's mma and tf32 conversion: calls into
 *    the driver, which switches fibers; barrier sites are numbered with __COUNTER__ so that two
 *    different __syncthreads in divergent code are told apart.
 */
#ifndef ST_SIM_CUDA_H
#define ST_SIM_CUDA_H

#include "sim_rt.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <utility>

#define __CUDACC__ 1
#define ST_CUDA_SIM 1
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static __attribute__((section("st_sim_shm")))
#define warpSize 32

#define ST_SIM_HIDDEN __attribute__((visibility("hidden")))
#define ST_SIM_NOSAN __attribute__((no_sanitize_thread, visibility("hidden"), noinline))

extern "C" ST_SIM_HIDDEN sim_rt *st_sim_rt;
sim_rt *st_sim_rt;

#define threadIdx (st_sim_rt->cur->tid)
#define blockIdx (st_sim_rt->block_idx)
#define blockDim (st_sim_rt->block_dim)
#define gridDim (st_sim_rt->grid_dim)

#define ST_SIM_BARRIER() __asm__ __volatile__("" ::: "memory")

/* ---- bit casts ---- */
static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float f) { int x; memcpy(&x, &f, 4); return x; }
static inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned x; memcpy(&x, &f, 4); return x; }
static inline double __longlong_as_double(long long x) { double f; memcpy(&f, &x, 8); return f; }
static inline long long __double_as_longlong(double f) { long long x; memcpy(&x, &f, 8); return x; }

/* ---- barriers ---- */
#define __syncthreads()                                                                         \
    do {                                                                                        \
        ST_SIM_BARRIER();                                                                       \
        st_sim_rt->syncthreads((const void *)(uintptr_t)(__COUNTER__ + 1));                     \
        ST_SIM_BARRIER();                                                                       \
    } while (0)

static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    ST_SIM_BARRIER();
    st_sim_rt->collective(SIM_COLL_SYNCWARP, mask, NULL, 0);
    ST_SIM_BARRIER();
}

/* ---- shuffles and votes ---- */
/* The value of lane src (computed from this lane and the arguments by pick) among the lanes of mask. */
template <class T, class P> static inline T st_sim_shfl_(unsigned mask, T v, P pick) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 64 bits");
    uint32_t w[2] = {0, 0};
    memcpy(w, &v, sizeof(T));
    const uint32_t *all = st_sim_rt->collective(SIM_COLL_SHFL, mask, w, 2);
    int lane = st_sim_rt->cur->lane, src = pick(lane);
    if (src < 0 || src > 31 || !((mask >> src) & 1u)) st_sim_rt->fault("a shuffle reads a lane outside its mask");
    T r;
    memcpy(&r, all + src * SIM_COLL_MAX_WORDS, sizeof(T));
    return r;
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return st_sim_shfl_(mask, v, [=](int lane) { return (lane & ~(width - 1)) + (src & (width - 1)); });
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
    return st_sim_shfl_(mask, v, [=](int lane) {
        int s = lane ^ m;
        return (s & ~(width - 1)) == (lane & ~(width - 1)) ? s : lane;
    });
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return st_sim_shfl_(mask, v, [=](int lane) {
        int s = lane + (int)d;
        return (s & ~(width - 1)) == (lane & ~(width - 1)) ? s : lane;
    });
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return st_sim_shfl_(mask, v, [=](int lane) {
        int s = lane - (int)d;
        return s >= (lane & ~(width - 1)) ? s : lane;
    });
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    uint32_t w = pred != 0;
    const uint32_t *all = st_sim_rt->collective(SIM_COLL_VOTE, mask, &w, 1);
    unsigned r = 0;
    for (int l = 0; l < 32; l++)
        if (((mask >> l) & 1u) && all[l * SIM_COLL_MAX_WORDS]) r |= 1u << l;
    return r;
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }

/* ---- atomics (one OS thread runs the grid: plain read-modify-write, still seen by the hooks) ---- */
template <class T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
static inline void __threadfence(void) {}   /* blocks run one after another */
template <class T> static inline T atomicMax(T *p, T v) { T o = *p; *p = o < v ? v : o; return o; }
template <class T> static inline T atomicMin(T *p, T v) { T o = *p; *p = v < o ? v : o; return o; }
template <class T> static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <class T> static inline T atomicCAS(T *p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }

/* ---- tensor cores (the prelude's st_mma_* and st_cvt_tf32_ call these under ST_CUDA_SIM) ---- */
/* mma.sync for the warp: this lane's fragments in, its accumulators updated in place. */
static inline void st_sim_mma(int kind, float d[4], const uint32_t a[4], const uint32_t b[2]) {
    uint32_t w[10];
    memcpy(w, a, 16);
    memcpy(w + 4, b, 8);
    memcpy(w + 6, d, 16);
    const uint32_t *all = st_sim_rt->collective(SIM_COLL_MMA + (kind << 4), 0xffffffffu, w, 10);
    st_sim_rt->mma(kind, all, st_sim_rt->cur->lane, d);
}
static inline uint32_t st_sim_cvt_tf32(float x) { return st_sim_rt->cvt_tf32(x); }

/* ---- the instrumentation hooks (GCC -fsanitize=thread calls them; hidden: each module its own) ---- */
extern "C" {
ST_SIM_NOSAN void __tsan_init(void) {}
ST_SIM_NOSAN void __tsan_func_entry(void *pc) { (void)pc; }
ST_SIM_NOSAN void __tsan_func_exit(void) {}
ST_SIM_NOSAN void __tsan_vptr_update(void **p, void *v) { (void)p; (void)v; }
ST_SIM_NOSAN void __tsan_vptr_read(void **p) { (void)p; }
#define ST_SIM_HOOK(name, n, w)                                                                 \
    ST_SIM_NOSAN void name(void *a) {                                                           \
        if (st_sim_rt) st_sim_rt->access(a, n, w, __builtin_return_address(0));                 \
    }
#define ST_SIM_HOOKS(n)                                                                         \
    ST_SIM_HOOK(__tsan_read##n, n, 0)                                                           \
    ST_SIM_HOOK(__tsan_write##n, n, 1)                                                          \
    ST_SIM_HOOK(__tsan_unaligned_read##n, n, 0)                                                 \
    ST_SIM_HOOK(__tsan_unaligned_write##n, n, 1)                                                \
    ST_SIM_HOOK(__tsan_volatile_read##n, n, 0)                                                  \
    ST_SIM_HOOK(__tsan_volatile_write##n, n, 1)
ST_SIM_HOOK(__tsan_read1, 1, 0)
ST_SIM_HOOK(__tsan_write1, 1, 1)
ST_SIM_HOOK(__tsan_volatile_read1, 1, 0)
ST_SIM_HOOK(__tsan_volatile_write1, 1, 1)
ST_SIM_HOOKS(2)
ST_SIM_HOOKS(4)
ST_SIM_HOOKS(8)
ST_SIM_HOOKS(16)
ST_SIM_NOSAN void __tsan_read_range(void *a, unsigned long n) {
    if (st_sim_rt) st_sim_rt->access(a, n, 0, __builtin_return_address(0));
}
ST_SIM_NOSAN void __tsan_write_range(void *a, unsigned long n) {
    if (st_sim_rt) st_sim_rt->access(a, n, 1, __builtin_return_address(0));
}
}

/* ---- the module's exports ---- */
extern "C" ST_SIM_HIDDEN char __start_st_sim_shm[] __attribute__((weak));
extern "C" ST_SIM_HIDDEN char __stop_st_sim_shm[] __attribute__((weak));

template <class... A, size_t... I> static void st_sim_call_(void (*f)(A...), void **p, std::index_sequence<I...>) {
    f(*static_cast<A *>(p[I])...);
}
template <auto F> struct st_sim_kfn_;
template <class... A, void (*F)(A...)> struct st_sim_kfn_<F> {
    static void run(void **p) { st_sim_call_(F, p, std::index_sequence_for<A...>{}); }
    static constexpr int n = (int)sizeof...(A);
    static constexpr unsigned short sizes[sizeof...(A) + 1] = {(unsigned short)sizeof(A)..., 0};
};

/* Appended by the stand-in NVRTC after the unit, once per kernel. */
#define ST_SIM_KERNEL(name, bound)                                                              \
    extern "C" __attribute__((visibility("default"))) const sim_kernel st_sim_k_##name = {       \
        #name, st_sim_kfn_<name>::n, st_sim_kfn_<name>::sizes, bound, st_sim_kfn_<name>::run};

/* Appended once, after the kernels (the section bounds are known only to the linker). */
#define ST_SIM_MODULE()                                                                         \
    extern "C" __attribute__((visibility("default"))) sim_module_info st_sim_module = {          \
        SIM_ABI, &st_sim_rt, __start_st_sim_shm, __stop_st_sim_shm};

#endif
