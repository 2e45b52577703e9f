/*
 * cpu_pool.c — the team of threads that runs CPU kernels' parallel regions (cpu_pool.h).
 *
 * One region at a time: the caller publishes (fn, data, team) and bumps `gen`; workers 1..team-1
 * run fn(data) and count `pending` down; the caller runs it as thread 0 and waits for pending == 0.
 * Every wait (a worker for the next region, the caller for the workers, a barrier) spins on its
 * word for at most the spin budget, then sleeps on it with a futex; whoever changes a word wakes
 * its sleepers only when there are any (counted), so a region between busy threads is a few
 * atomic operations and no system call.
 *
 * The spin budget is ST_SPIN_US (default 1000 us), and 0 while the machine is oversubscribed: a
 * spinning thread holds a core that a descheduled team member, or another process, needs, and a
 * region then waits a scheduler time slice for its last member. The caller samples the runnable
 * threads of the machine (/proc/loadavg's fourth field) at most every 20 ms: when the others plus
 * this team exceed the online CPUs, nobody spins (the old OMP_WAIT_POLICY=PASSIVE behaviour).
 *
 * Workers start at the first region that needs them, with every signal blocked (signals stay the
 * caller's: Ctrl-C in the REPL), and are joined by st_shutdown; a forked child starts afresh.
 */
#include "device/cpu_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX 512                 /* workers at most; a larger team gets this many */
#define SPIN_US_DEFAULT 1000
#define SAMPLE_NS (20 * 1000 * 1000) /* oversubscription check period */

static struct {
    pthread_mutex_t lock;            /* held by the host thread running a region */
    int nworkers;
    pthread_t threads[POOL_MAX];
    unsigned start_gen[POOL_MAX + 1];   /* gen when worker i started */
    /* the current region (read by workers between two loads of gen) */
    _Atomic(void (*)(void *)) fn;
    _Atomic(void *) data;
    atomic_int team;
    atomic_uint gen;                 /* bumped to start a region; 0 stop */
    atomic_int stop;
    atomic_uint pending;             /* workers of the region not finished */
    atomic_int gen_sleepers, pending_sleepers;
    /* barrier */
    atomic_uint bar_gen, bar_count;
    atomic_int bar_sleepers;
    /* spinning */
    atomic_llong spin_ns;            /* the budget now */
    int64_t spin_set_us;             /* dev_cpu_pool_set_spin; -1: ST_SPIN_US */
    int64_t spin_env_us;             /* ST_SPIN_US, read when the first workers start */
    int64_t next_sample;
    int loadavg_fd;                  /* -1: not open yet; -2: unavailable */
    int ncpu;
    atomic_ullong regions;
    int atfork;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .spin_set_us = -1, .loadavg_fd = -1};

static _Thread_local int t_num, t_team = 1, t_in;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void futex_wait(atomic_uint *w, unsigned v) {
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *w) {
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Returns once *w != old: spins up to the budget, then sleeps (counted in *sleepers). */
static void wait_change(atomic_uint *w, unsigned old, atomic_int *sleepers) {
    const int64_t budget = atomic_load_explicit(&P.spin_ns, memory_order_relaxed);
    if (budget > 0) {
        const int64_t t0 = now_ns();
        for (unsigned i = 1;; i++) {
            if (atomic_load_explicit(w, memory_order_acquire) != old) return;
            cpu_relax();
            if ((i & 63) == 0 && now_ns() - t0 > budget) break;
        }
    }
    atomic_fetch_add(sleepers, 1);
    while (atomic_load(w) == old) futex_wait(w, old);
    atomic_fetch_sub(sleepers, 1);
}

/* Wakes the sleepers on a word just changed, if there are any (no system call otherwise). */
static void wake_all(atomic_uint *w, atomic_int *sleepers) {
    if (atomic_load(sleepers)) futex_wake(w);
}

static void *worker(void *arg) {
    const int id = (int)(intptr_t)arg;
    unsigned seen = P.start_gen[id];
    for (;;) {
        wait_change(&P.gen, seen, &P.gen_sleepers);
        if (atomic_load(&P.stop)) return NULL;
        /* The region's parameters belong to the gen read before them if gen is unchanged after. */
        unsigned g = atomic_load(&P.gen);
        void (*fn)(void *) = atomic_load(&P.fn);
        void *data = atomic_load(&P.data);
        int team = atomic_load(&P.team);
        if (atomic_load(&P.gen) != g) continue;
        seen = g;
        if (id >= team) continue;
        t_num = id;
        t_team = team;
        t_in = 1;
        fn(data);
        t_in = 0;
        t_team = 1;
        t_num = 0;
        if (atomic_fetch_sub(&P.pending, 1) == 1) wake_all(&P.pending, &P.pending_sleepers);
    }
}

static void after_fork_child(void) {
    /* The workers did not come along: start afresh (their slots are simply forgotten). */
    pthread_mutex_init(&P.lock, NULL);
    P.nworkers = 0;
    atomic_store(&P.gen_sleepers, 0);
    atomic_store(&P.pending_sleepers, 0);
    atomic_store(&P.bar_sleepers, 0);
    atomic_store(&P.bar_count, 0);
    t_in = 0;
    t_team = 1;
    t_num = 0;
}

/* Stops and joins the workers (st_shutdown; a later region starts new ones). */
static void pool_shutdown(void) {
    pthread_mutex_lock(&P.lock);
    if (P.nworkers) {
        atomic_store(&P.stop, 1);
        atomic_fetch_add(&P.gen, 1);
        futex_wake(&P.gen);
        for (int i = 0; i < P.nworkers; i++) pthread_join(P.threads[i], NULL);
        P.nworkers = 0;
        atomic_store(&P.stop, 0);
    }
    pthread_mutex_unlock(&P.lock);
}

/* Starts workers until there are `want` (fewer if the system refuses); returns how many there are. */
static int grow(int want) {
    if (!P.atfork) {
        P.atfork = 1;
        pthread_atfork(NULL, NULL, after_fork_child);
        base_on_shutdown(BASE_LEVEL_DEVICE, pool_shutdown);
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        P.ncpu = c > 0 ? (int)c : 1;
        P.spin_env_us = base_env_int(SET_SPIN_US, SPIN_US_DEFAULT, 0, 1000000, NULL);
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (P.nworkers < want) {
        const int id = P.nworkers + 1;
        P.start_gen[id] = atomic_load(&P.gen);
        if (pthread_create(&P.threads[P.nworkers], NULL, worker, (void *)(intptr_t)id) != 0) break;
        P.nworkers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return P.nworkers;
}

/* The budget for the next waits: ST_SPIN_US (or the test's), 0 while the machine is
 * oversubscribed (checked at most every SAMPLE_NS). */
static void update_spin(int team) {
    const int64_t t = now_ns();
    if (t < P.next_sample) return;
    P.next_sample = t + SAMPLE_NS;
    int64_t us = P.spin_set_us >= 0 ? P.spin_set_us : P.spin_env_us;
    if (us > 0 && P.loadavg_fd != -2) {
        if (P.loadavg_fd == -1) {
            P.loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
            if (P.loadavg_fd < 0) P.loadavg_fd = -2;
        }
        char buf[128];
        ssize_t n = P.loadavg_fd >= 0 ? pread(P.loadavg_fd, buf, sizeof buf - 1, 0) : -1;
        long running = 0;
        if (n > 0) {
            buf[n] = 0;
            const char *s = buf;
            for (int f = 0; f < 3 && s; f++) {   /* skip the three load averages */
                s = strchr(s, ' ');
                if (s) s++;
            }
            if (s) running = strtol(s, NULL, 10);
        }
        /* Runnable now: this thread, the workers still spinning, everyone else. */
        const long ours = 1 + (P.nworkers - atomic_load(&P.gen_sleepers));
        if (running - ours + team > P.ncpu) us = 0;
    }
    atomic_store_explicit(&P.spin_ns, us * 1000, memory_order_relaxed);
}

static void run_alone(void (*fn)(void *), void *data) {
    const int num = t_num, team = t_team, in = t_in;
    t_num = 0;
    t_team = 1;
    t_in = 1;
    fn(data);
    t_num = num;
    t_team = team;
    t_in = in;
}

static void pool_parallel(void (*fn)(void *), void *data, unsigned nthreads) {
    if (nthreads <= 1 || t_in || pthread_mutex_trylock(&P.lock) != 0) {
        run_alone(fn, data);
        return;
    }
    int team = nthreads > POOL_MAX + 1 ? POOL_MAX + 1 : (int)nthreads;
    if (P.nworkers < team - 1) team = 1 + grow(team - 1);
    if (team <= 1) {
        pthread_mutex_unlock(&P.lock);
        run_alone(fn, data);
        return;
    }
    update_spin(team);
    atomic_store(&P.fn, fn);
    atomic_store(&P.data, data);
    atomic_store(&P.team, team);
    atomic_store(&P.pending, (unsigned)(team - 1));
    atomic_fetch_add(&P.gen, 1);
    wake_all(&P.gen, &P.gen_sleepers);
    t_num = 0;
    t_team = team;
    t_in = 1;
    fn(data);
    t_in = 0;
    t_team = 1;
    for (unsigned v; (v = atomic_load(&P.pending)) != 0;) wait_change(&P.pending, v, &P.pending_sleepers);
    atomic_fetch_add_explicit(&P.regions, 1, memory_order_relaxed);
    pthread_mutex_unlock(&P.lock);
}

static void pool_barrier(void) {
    const int n = t_team;
    if (n <= 1) return;
    const unsigned g = atomic_load(&P.bar_gen);
    if (atomic_fetch_add(&P.bar_count, 1) == (unsigned)n - 1) {
        atomic_store(&P.bar_count, 0);
        atomic_fetch_add(&P.bar_gen, 1);
        wake_all(&P.bar_gen, &P.bar_sleepers);
    } else {
        wait_change(&P.bar_gen, g, &P.bar_sleepers);
    }
}

static int pool_thread_num(void) { return t_num; }
static int pool_num_threads(void) { return t_team; }

static const st_pool_api api = {pool_parallel, pool_barrier, pool_thread_num, pool_num_threads};

const st_pool_api *dev_cpu_pool(void) { return &api; }

int dev_cpu_threads(void) {
    static int n;
    if (!n) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        int bad;
        n = (int)base_env_int(SET_THREADS, c > 0 ? c : 1, 1, 4096, &bad);
        if (bad && st_rt.debug)
            fprintf(stderr, "stitch: ignoring ST_THREADS=%s (want a positive integer)\n", base_env(SET_THREADS));
    }
    return n;
}

uint64_t dev_cpu_pool_regions(void) { return atomic_load(&P.regions); }

void dev_cpu_pool_set_spin(int64_t us) {
    pthread_mutex_lock(&P.lock);
    P.spin_set_us = us < 0 ? -1 : us;
    P.next_sample = 0;
    pthread_mutex_unlock(&P.lock);
}
