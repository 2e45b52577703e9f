/*
 * runtime.c — global runtime state: settings read from the environment, statistics, control API.
 *
 * Environment (read once, at the first call into the runtime): ST_EAGER, ST_DEBUG, ST_POISON,
 * ST_JIT_MIN, ST_TRACE_MAX. The setters override them at run time.
 */
#include "base/base.h"
#include "trace/trace.h"
#include "jit/jit.h"
#include "jit/nvrtc.h"
#include "device/cuda.h"
#include "fuser/fuser.h"
#include <time.h>

st_stats_t st_stats_g;
st_runtime st_rt;

static int64_t env_int(const char *name, int64_t dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long long x = strtoll(v, &end, 0);
    return *end ? dflt : (int64_t)x;
}

void st_runtime_init(void) {
    if (st_rt.inited) return;
    st_rt.inited = 1;
    st_rt.eager = (int)env_int("ST_EAGER", 0);
    st_rt.debug = (int)env_int("ST_DEBUG", 0);
    st_rt.poison = (int)env_int("ST_POISON", 0);
    st_rt.jit_min = env_int("ST_JIT_MIN", 32768);
    st_rt.trace_max = env_int("ST_TRACE_MAX", 20000);
    st_rt.rng_seed = 0x5eed;
    st_rt.rng_offset = 0;
    /* Kernel threads sleep at barriers instead of spinning (libgomp reads this when the first
     * kernel loads it): a spinning thread whose partner lost its core made 2-thread steps 3-30x
     * slower than 1-thread steps on a shared machine. A user's own setting wins. */
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
}

double st_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void st_stats(st_stats_t *out) {
    *out = st_stats_g;
    cuda_mem_stats(&out->device_bytes_in_use, &out->device_bytes_reserved, &out->device_bytes_peak);
}
void st_reset_stats(void) {
    uint64_t in_use = st_stats_g.bytes_in_use;
    memset(&st_stats_g, 0, sizeof st_stats_g);
    st_stats_g.bytes_in_use = in_use;
    st_stats_g.bytes_peak = in_use;
    cuda_mem_reset_peak();
}

void st_set_eager(int on) { st_runtime_init(); st_rt.eager = on; }
int st_get_eager(void) { st_runtime_init(); return st_rt.eager; }
void st_set_jit_min(int64_t elems) { st_runtime_init(); st_rt.jit_min = elems < 0 ? 0 : elems; }
void st_set_poison(int on) { st_runtime_init(); st_rt.poison = on; }
void st_set_debug(int flags) { st_runtime_init(); st_rt.debug = flags; }
void st_interrupt(void) { st_rt.interrupted = 1; }
void st_clear_interrupt(void) { st_rt.interrupted = 0; }
void st_manual_seed(uint64_t seed) {
    st_runtime_init();
    st_rt.rng_seed = seed;
    st_rt.rng_offset = 0;
}

/* Frees the caches; tensors still alive stay valid (their pending work runs when read). */
void st_shutdown(void) {
    fuse_pcache_shutdown();   /* its entries hold kernel pointers jit_shutdown unloads */
    jit_shutdown();
    jit_cubin_shutdown();
    exec_cuda_shutdown();
    cuda_shutdown();
    st_mem_trim();
}
