/*
 * test_pool.c — the kernel thread pool (device/cpu_pool.c), alone and under JIT kernels.
 *
 * Checked, each with spinning waits and with sleeping ones (spin budget 0):
 *  - a team of n threads runs the function once per member, thread numbers 0..n-1, n members;
 *  - a barrier inside a region: no member passes round r before all have arrived at it (10,000
 *    rounds over 2, 3 and 4 threads);
 *  - a region started inside a region runs on its caller alone (a team of 1);
 *  - many short regions in a row (no lost wake-up: a hang would be the failure);
 *  - a forked child runs regions (its pool starts afresh);
 *  - a compiled kernel's parallel loop runs on this pool: the pool counts the region, and the
 *    values are right (with libgomp's threads, the pool would count nothing).
 */
#include "test.h"
#include "device/cpu_pool.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXT 8

typedef struct team_rec {
    const st_pool_api *p;
    atomic_int calls;
    atomic_int seen[MAXT];
    atomic_int bad_size;
    int want;
} team_rec;

static void record_member(void *d) {
    team_rec *r = d;
    int i = r->p->thread_num(), n = r->p->num_threads();
    atomic_fetch_add(&r->calls, 1);
    if (n != r->want) atomic_fetch_add(&r->bad_size, 1);
    if (i >= 0 && i < MAXT) atomic_fetch_add(&r->seen[i], 1);
}

static void check_team(int n) {
    team_rec r = {.p = dev_cpu_pool(), .want = n};
    r.p->parallel(record_member, &r, (unsigned)n);
    CHECK_MSG(atomic_load(&r.calls) == n, "team %d: %d calls", n, atomic_load(&r.calls));
    CHECK_MSG(atomic_load(&r.bad_size) == 0, "team %d: a member saw another team size", n);
    for (int i = 0; i < n; i++) CHECK_MSG(atomic_load(&r.seen[i]) == 1, "team %d: thread %d ran %d times", n, i, atomic_load(&r.seen[i]));
    CHECK(r.p->thread_num() == 0 && r.p->num_threads() == 1);   /* outside a region */
}

TEST(team_members) {
    for (int spin = 0; spin < 2; spin++) {
        dev_cpu_pool_set_spin(spin ? 1000 : 0);
        for (int n = 1; n <= 4; n++) check_team(n);
        check_team(3);   /* a smaller team after a larger one: the idle worker stays out */
    }
    dev_cpu_pool_set_spin(-1);
}

#define ROUNDS 10000
typedef struct bar_rec {
    const st_pool_api *p;
    atomic_int arrived[MAXT];
    atomic_int early;
} bar_rec;

static void barrier_rounds(void *d) {
    bar_rec *r = d;
    int i = r->p->thread_num(), n = r->p->num_threads();
    for (int round = 1; round <= ROUNDS; round++) {
        atomic_store(&r->arrived[i], round);
        r->p->barrier();
        for (int j = 0; j < n; j++)
            if (atomic_load(&r->arrived[j]) < round) atomic_fetch_add(&r->early, 1);
        r->p->barrier();   /* nobody starts round + 1 until everyone has looked */
    }
}

TEST(barrier_holds_every_member) {
    for (int spin = 0; spin < 2; spin++) {
        dev_cpu_pool_set_spin(spin ? 1000 : 0);
        for (int n = 2; n <= 4; n++) {
            bar_rec r = {.p = dev_cpu_pool()};
            r.p->parallel(barrier_rounds, &r, (unsigned)n);
            CHECK_MSG(atomic_load(&r.early) == 0, "%d threads, spin %d: %d members passed a barrier early", n, spin,
                      atomic_load(&r.early));
            for (int j = 0; j < n; j++) CHECK(atomic_load(&r.arrived[j]) == ROUNDS);
        }
    }
    dev_cpu_pool_set_spin(-1);
}

typedef struct nest_rec {
    const st_pool_api *p;
    atomic_int inner_calls, inner_not_alone;
} nest_rec;

static void inner(void *d) {
    nest_rec *r = d;
    atomic_fetch_add(&r->inner_calls, 1);
    if (r->p->num_threads() != 1 || r->p->thread_num() != 0) atomic_fetch_add(&r->inner_not_alone, 1);
}

static void outer(void *d) {
    nest_rec *r = d;
    const int i = r->p->thread_num();
    r->p->parallel(inner, r, 4);
    if (r->p->thread_num() != i || r->p->num_threads() != 2) atomic_fetch_add(&r->inner_not_alone, 1);
}

TEST(nested_region_runs_alone) {
    nest_rec r = {.p = dev_cpu_pool()};
    r.p->parallel(outer, &r, 2);
    CHECK_EQ_INT(atomic_load(&r.inner_calls), 2);
    CHECK_EQ_INT(atomic_load(&r.inner_not_alone), 0);
}

typedef struct sum_rec {
    const st_pool_api *p;
    atomic_long sum;
} sum_rec;

static void add_num(void *d) {
    sum_rec *r = d;
    atomic_fetch_add(&r->sum, r->p->thread_num() + 1);
}

TEST(many_short_regions) {
    for (int spin = 0; spin < 2; spin++) {
        dev_cpu_pool_set_spin(spin ? 1000 : 0);
        sum_rec r = {.p = dev_cpu_pool()};
        const uint64_t before = dev_cpu_pool_regions();
        for (int i = 0; i < 20000; i++) r.p->parallel(add_num, &r, 2);
        CHECK_MSG(atomic_load(&r.sum) == 20000L * 3, "sum %ld", (long)atomic_load(&r.sum));
        CHECK(dev_cpu_pool_regions() - before == 20000);
    }
    dev_cpu_pool_set_spin(-1);
}

TEST(forked_child_runs_regions) {
    check_team(2);   /* the parent's workers exist */
    pid_t pid = fork();
    if (pid == 0) {
        sum_rec r = {.p = dev_cpu_pool()};
        for (int i = 0; i < 100; i++) r.p->parallel(add_num, &r, 3);
        _exit(atomic_load(&r.sum) == 100L * 6 ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    check_team(2);
}

TEST(kernels_run_on_the_pool) {
    st_set_jit_min(0);
    const int64_t n = 1 << 20;   /* past the kernels' parallel threshold */
    st_tensor *a = st_arange(0, (double)n, 1, ST_F64);
    st_tensor *b = st_mul_s(a, 2.0);
    st_tensor *c = st_add_s(b, 1.0);
    const uint64_t before = dev_cpu_pool_regions();
    CHECK(st_realize(1, &c) == ST_OK);
    CHECK_MSG(dev_cpu_pool_regions() > before, "the kernel's region did not run on the pool");
    st_tensor *s = st_sum(c, 0, NULL, 0);
    double v = 0;
    CHECK(st_item(s, &v) == ST_OK);
    CHECK_MSG(v == (double)n * (double)n, "sum %.17g, want %.17g", v, (double)n * (double)n);   /* sum of 2i+1 */
    st_release(s);
    st_release(c);
    st_release(b);
    st_release(a);
}

int main(void) {
    setenv("ST_THREADS", "2", 1);   /* before the runtime reads it */
    RUN(team_members);
    RUN(barrier_holds_every_member);
    RUN(nested_region_runs_alone);
    RUN(many_short_regions);
    RUN(forked_child_runs_regions);
    RUN(kernels_run_on_the_pool);
    TEST_MAIN_END();
}
