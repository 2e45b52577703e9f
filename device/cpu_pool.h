/*
 * cpu_pool.h — the threads of CPU kernels: stitch's own team, in place of the OpenMP runtime's.
 *
 * A kernel's `#pragma omp parallel` regions are outlined by the C compiler into calls of four
 * OpenMP entry points (GOMP_parallel, GOMP_barrier, omp_get_thread_num, omp_get_num_threads:
 * GCC's ABI). Every kernel translation unit defines those four itself, as hidden functions that
 * forward to the st_pool_api a launch passes in st_kargs (jit/cache.c), so a kernel's threads are
 * this pool's. Why not libgomp's: between two kernels its threads either sleep
 * (OMP_WAIT_POLICY=PASSIVE: waking them cost ~40 us per parallel region on the 2-core dev VM, some
 * 1.7 ms of a 42-kernel transformer step) or spin for a fixed count (3-30x slower steps when another
 * process wants the cores). This pool spins for a bounded time (ST_SPIN_US, default 1 ms) and
 * then sleeps on a futex, and stops spinning at all while the machine has more runnable threads
 * than CPUs (sampled from /proc/loadavg at most every 20 ms).
 *
 * Semantics are OpenMP's for what kernels use: a team of n threads runs fn(data), the caller as
 * thread 0; the call returns when every member has returned; GOMP_barrier inside waits for the
 * whole team. A region started inside a region, or while another host thread is using the pool,
 * runs on the calling thread alone (a team of 1), as nested regions do under libgomp's defaults.
 */
#ifndef ST_CPU_POOL_H
#define ST_CPU_POOL_H

#include "base/base.h"

/* The table a kernel's OpenMP entry points forward to (layout printed into every kernel unit by
 * jit/cache.c; keep the two in step). */
typedef struct st_pool_api {
    void (*parallel)(void (*fn)(void *), void *data, unsigned nthreads);
    void (*barrier)(void);
    int (*thread_num)(void);
    int (*num_threads)(void);
} st_pool_api;

/* The pool's table (the pool itself starts its threads at the first region that needs them). */
ST_INTERNAL const st_pool_api *dev_cpu_pool(void);

/* Threads a kernel may use: ST_THREADS when set to a positive integer (read once), else the
 * number of online CPUs. A malformed or non-positive ST_THREADS is ignored (with a note under
 * ST_DEBUG): it must never fail a flush. */
ST_INTERNAL int dev_cpu_threads(void);

/* Regions run with a team of more than one thread since the process started (tests). */
ST_INTERNAL uint64_t dev_cpu_pool_regions(void);

/* Microseconds a waiting thread spins before it sleeps: ST_SPIN_US until set here (tests);
 * negative: back to ST_SPIN_US. */
ST_INTERNAL void dev_cpu_pool_set_spin(int64_t us);

#endif
