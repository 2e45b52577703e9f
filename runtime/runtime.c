/*
 * runtime.c — the runtime control API: statistics, flags, the RNG stream, interrupts, shutdown.
 *
 * The flags live in base/settings.c (read from the environment once); the setters here override
 * them. st_shutdown reaches every layer's caches through the hooks they registered (base/hooks.c).
 * st_synchronize waits for the devices; errors their asynchronous work left are reported there (or,
 * when nothing asked before st_shutdown, printed on stderr by it: never dropped).
 */
#include "runtime/tensor.h"
#include "fuser/fuser.h"

/* The global random stream: each random op takes the next range of counters (create.c). */
uint64_t st_rng_seed = 0x5eed, st_rng_offset;

void st_stats(st_stats_t *out) {
    if (!out) {
        st_error(ST_ERR_ARG, "stats: NULL output");
        return;
    }
    *out = st_stats_g;
    dev_mem_stats(&out->device_bytes_in_use, &out->device_bytes_reserved, &out->device_bytes_peak);
    out->nodes_live = (uint64_t)st_live_nodes();
    out->nodes_pending = (uint64_t)st_pending_nodes();
    out->bytes_pending = (uint64_t)st_pending_bytes();
    fuse_pcache_stats(&out->plan_cache_entries, &out->plan_cache_bytes);
    out->host_bytes_cached = dev_cpu_cached_bytes();
}
void st_reset_stats(void) {
    uint64_t in_use = st_stats_g.bytes_in_use;
    memset(&st_stats_g, 0, sizeof st_stats_g);
    st_stats_g.bytes_in_use = in_use;
    st_stats_g.bytes_peak = in_use;
    dev_reset_peak();
}

void st_set_eager(int on) { st_runtime_init(); st_rt.eager = on; }
int st_get_eager(void) { st_runtime_init(); return st_rt.eager; }
void st_set_jit_min(int64_t elems) { st_runtime_init(); st_rt.jit_min = elems < 0 ? 0 : elems; }
void st_set_poison(int on) { st_runtime_init(); st_rt.poison = on; }
void st_set_debug(int flags) { st_runtime_init(); st_rt.debug = flags; }
void st_interrupt(void) { st_rt.interrupted = 1; }
void st_clear_interrupt(void) { st_rt.interrupted = 0; }
void st_manual_seed(uint64_t seed) {
    st_rng_seed = seed;
    st_rng_offset = 0;
}
/* ---- autocast: a mode stack like grad mode's ---- */
int st_autocast_dt = ST_DTYPE_COUNT;
#define ST_AUTOCAST_DEPTH 256
static uint8_t autocast_stack[ST_AUTOCAST_DEPTH];
static int autocast_depth;

st_status st_autocast_push(int enabled, st_dtype dt) {
    if (enabled && dt != ST_F16 && dt != ST_BF16)
        return st_error(ST_ERR_DTYPE, "autocast: the dtype must be f16 or bf16, got %s",
                        (unsigned)dt < ST_DTYPE_COUNT ? st_dtypes[dt].name : "an unknown dtype");
    if (autocast_depth < ST_AUTOCAST_DEPTH) autocast_stack[autocast_depth] = (uint8_t)st_autocast_dt;
    autocast_depth++;
    st_autocast_dt = enabled ? (int)dt : ST_DTYPE_COUNT;
    return ST_OK;
}

void st_autocast_pop(void) {
    if (autocast_depth == 0) return;
    autocast_depth--;
    st_autocast_dt = autocast_depth < ST_AUTOCAST_DEPTH ? autocast_stack[autocast_depth] : ST_DTYPE_COUNT;
}

st_dtype st_autocast_dtype(void) { return (st_dtype)st_autocast_dt; }

void st_get_rng_state(uint64_t *seed, uint64_t *offset) {
    if (seed) *seed = st_rng_seed;
    if (offset) *offset = st_rng_offset;
}
void st_set_rng_state(uint64_t seed, uint64_t offset) {
    st_rng_seed = seed;
    st_rng_offset = offset;
}

st_status st_synchronize(void) { return dev_synchronize_all(); }

/* Frees the caches; tensors still alive stay valid (their pending work runs when read). The
 * devices' shutdown waits for their work; an error it finds (or one kept from earlier) has no call
 * left to report it, so it goes to stderr rather than nowhere. */
void st_shutdown(void) {
    base_shutdown();
    base_trim();
    if (dev_synchronize_all() != ST_OK) {
        fprintf(stderr, "stitch: found by st_shutdown, which cannot return it: %s\n", st_last_error());
        fflush(stderr);
        st_clear_error();
    }
}
