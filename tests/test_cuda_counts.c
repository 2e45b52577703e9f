/*
 * test_cuda_counts.c — the fusion kernel counts on the CUDA backend, and the plan cache's CUDA
 * launches after warm-up (issue 5; DESIGN.md invariant 4).
 *
 * Without a GPU (this test's usual machine) everything runs in a child process against the fake
 * driver of tests/test_cuda_driver.c (tests/fake_cuda.h), with the fake GPU as the default device:
 * every CUDA kernel is really rendered (render_cuda), compiled by NVRTC into a cubin for the fake's
 * sm_90, loaded (cuModuleLoadData of that ELF image; the function looked up by name in it) and
 * launched (cuLaunchKernel, recorded with its grid and block). The fake runs no kernel, so the
 * VALUES ARE MEANINGLESS here and never read: what is checked is
 *  - counts: each pattern of tests/test_fusion_counts.c (softmax, log_softmax, layernorm, rmsnorm,
 *    per-row cross-entropy forward 1 kernel each; cross-entropy mean at most 2; backward of
 *    softmax and log_softmax 1, of layernorm and rmsnorm 2 with the row statistics stored by the
 *    forward, of the cross-entropy mean 1), plus gelu(x@w+b) in 1 and an AdamW-like update of four
 *    parameters in one flush in at most 2, launches on "cuda:0" exactly as many kernels as on the
 *    cpu (run in the same process, same builders), each one reaching the driver (the fake's
 *    launch count) with no driver contract broken (the fake's violations);
 *  - the plan cache: repeated steps of one structure (fresh inputs, a new learning rate each
 *    step) after the first build no plan, render no CUDA source, compile nothing, and launch the
 *    same kernels with the same grid and block; after cuda_shutdown unloaded every module, the
 *    next step resolves its functions again (renders, no compile) instead of launching stale ones.
 * With a real GPU (tests/gpu/run.sh) the same bodies run in-process; the fake's counters are then
 * not checked.
 */
#include "fuse_test_util.h"
#include "fake_cuda.h"
#include "fuser/fuser.h"
#include "device/cuda.h"


enum { N = 64, C = 512, D = 32, MAXT = 8 };

static int fake;   /* the driver is tests/test_cuda_driver.c's fake: its counters are checked */

/* ---- tensors: every intermediate goes to the pool (K, ft_drain) released after each pattern ---- */

/* A realized f32 input on the default device (values in [-2, 2), from seed). */
static st_tensor *input(int ndim, const int64_t *shape, unsigned seed, int grad) {
    st_tensor *t = K(ft_f32_input(ndim, shape, seed));
    if (t && grad) st_set_requires_grad(t, 1);
    return t;
}
static st_tensor *targets(void) {   /* (N, 1) i64 classes */
    int64_t t[N];
    for (int i = 0; i < N; i++) t[i] = (i * 37 + 11) % C;
    return K(st_from_data(ST_I64, 2, (int64_t[]){N, 1}, t));
}

/* ---- the patterns (as in tests/test_fusion_counts.c) ---- */
static st_stats_t before;   /* stats at the start of the counted flush */
static int before_launches;  /* the fake's launches then */
static void mark(void) {
    st_stats(&before);
    before_launches = fake_cuda_stat("launches");
}
static st_tensor *row_stat, *row_mean;

static st_tensor *mean_last(st_tensor *a) {
    int ax = 1;
    return K(st_mean(a, 1, &ax, 1));
}
static st_tensor *layernorm(st_tensor *x, st_tensor *w, st_tensor *b) {
    st_tensor *mu = row_mean = mean_last(x), *xc = K(st_sub(x, mu));
    st_tensor *var = mean_last(K(st_mul(xc, xc)));
    st_tensor *rstd = row_stat = K(st_rsqrt(K(st_add_s(var, 1e-5))));
    return K(st_add(K(st_mul(K(st_mul(xc, rstd)), w)), b));
}
static st_tensor *rmsnorm(st_tensor *x, st_tensor *w) {
    row_stat = K(st_rsqrt(K(st_add_s(mean_last(K(st_mul(x, x))), 1e-6))));
    return K(st_mul(K(st_mul(x, row_stat)), w));
}
static st_tensor *ce_rows(st_tensor *x) {
    st_tensor *g = K(st_gather(K(st_log_softmax(x, 1)), 1, targets()));
    return K(st_neg(K(st_squeeze(g, 1))));
}
static st_tensor *ce_mean(st_tensor *x) { return K(st_mean(ce_rows(x), 0, NULL, 0)); }

/* kind: which pattern; bwd: its leaves' gradients instead of the forward. Fills out[], returns
 * how many, with `before` taken just before the flush to count. */
enum { P_SOFTMAX, P_LOG_SOFTMAX, P_LAYERNORM, P_RMSNORM, P_CE_ROWS, P_CE_MEAN, P_GELU_LINEAR, P_ADAMW };

static st_tensor *forward(int kind, st_tensor *x, st_tensor *w, st_tensor *b) {
    switch (kind) {
    case P_SOFTMAX: return K(st_softmax(x, 1));
    case P_LOG_SOFTMAX: return K(st_log_softmax(x, 1));
    case P_LAYERNORM: return layernorm(x, w, b);
    case P_RMSNORM: return rmsnorm(x, w);
    case P_CE_ROWS: return ce_rows(x);
    case P_CE_MEAN: return ce_mean(x);
    default: return NULL;
    }
}

/* AdamW over four parameters of different shapes: every new p, m, v realized in one flush. */
static int adamw(st_tensor **out, double lr, unsigned seed) {
    const int64_t shapes[4][2] = {{N, C}, {C, 1}, {C, D}, {D, 1}};
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, bc1 = 1 - b1, bc2 = 1 - b2;
    int n = 0;
    for (int i = 0; i < 4; i++) {
        int nd = shapes[i][1] == 1 ? 1 : 2;
        unsigned sd = seed + 4 * (unsigned)i;
        st_tensor *p = input(nd, shapes[i], sd, 0), *g = input(nd, shapes[i], sd + 1, 0);
        st_tensor *m = input(nd, shapes[i], sd + 2, 0), *v = input(nd, shapes[i], sd + 3, 0);
        st_tensor *m1 = K(st_add(K(st_mul_s(m, b1)), K(st_mul_s(g, 1 - b1))));
        st_tensor *v1 = K(st_add(K(st_mul_s(v, b2)), K(st_mul_s(K(st_mul(g, g)), 1 - b2))));
        st_tensor *den = K(st_add_s(K(st_sqrt(K(st_div_s(v1, bc2)))), eps));
        st_tensor *upd = K(st_add(K(st_div(K(st_div_s(m1, bc1)), den)), K(st_mul_s(p, wd))));
        out[n++] = K(st_sub(p, K(st_mul_s(upd, lr))));
        out[n++] = m1;
        out[n++] = v1;
    }
    return n;
}

static int build(int kind, int bwd, st_tensor **out) {
    st_tensor *x = input(2, (int64_t[]){N, C}, 1, bwd), *w = input(1, (int64_t[]){C}, 2, bwd);
    st_tensor *b = input(1, (int64_t[]){C}, 3, bwd);
    st_tensor *in[3] = {x, w, b};
    if (st_realize(3, in) != ST_OK) return -1;
    row_stat = row_mean = NULL;
    if (kind == P_ADAMW) {
        st_sync();
        mark();
        return adamw(out, 1e-3, 10);
    }
    if (kind == P_GELU_LINEAR) {
        st_tensor *wm = input(2, (int64_t[]){C, D}, 4, 0), *bias = input(1, (int64_t[]){D}, 5, 0);
        st_sync();
        mark();
        out[0] = K(st_gelu(K(st_add(K(st_matmul(x, wm)), bias))));
        return 1;
    }
    st_tensor *y = forward(kind, x, w, b);
    if (!bwd) {
        mark();
        out[0] = y;
        return 1;
    }
    /* the loss sum(y * x) (a dense gradient), realized with the row statistics it stores */
    st_tensor *loss = kind == P_CE_MEAN ? y : K(st_sum(K(st_mul(y, x)), 0, NULL, 0));
    st_tensor *fwd[3] = {loss, row_stat, row_mean};
    if (!loss || st_realize(3, fwd) != ST_OK) return -1;
    mark();
    if (st_backward(loss, NULL) != ST_OK) return -1;
    int n = 0;
    for (int i = 0; i < 3; i++)
        if ((out[n] = K(st_grad(in[i])))) n++;   /* unused leaves have none */
    return n;
}

/* Kernels launched by the flush that realizes the pattern on `device` (-1 on failure, recorded). */
static int count_on(const char *device, int kind, int bwd) {
    CHECK(st_set_default_device(device) == ST_OK);
    st_tensor *out[16];
    int n = build(kind, bwd, out);
    st_status s = n > 0 ? st_realize(n, out) : ST_ERR_INTERNAL;
    st_stats_t after;
    st_stats(&after);
    CHECK_MSG(s == ST_OK, "pattern %d%s on %s: %s", kind, bwd ? " backward" : "", device, st_last_error());
    int k = (int)(after.kernels_launched - before.kernels_launched);
    if (fake && strcmp(device, "cpu")) /* every kernel reached cuLaunchKernel */
        CHECK_MSG(fake_cuda_stat("launches") - before_launches == k, "pattern %d: %d kernels, %d launches on the "
                  "driver", kind, k, fake_cuda_stat("launches") - before_launches);
    ft_drain();
    return s == ST_OK ? k : -1;
}

static void expect(const char *name, int kind, int bwd, int want, int at_most) {
    int cpu = count_on("cpu", kind, bwd), gpu = count_on("cuda:0", kind, bwd);
    fprintf(stderr, "  %-24s cpu %d, cuda %d kernels\n", name, cpu, gpu);
    CHECK_MSG(cpu == gpu, "%s: %d kernels on the cpu, %d on cuda:0", name, cpu, gpu);
    CHECK_MSG(at_most ? gpu >= 1 && gpu <= want : gpu == want, "%s: %d kernels on cuda:0, expected %s%d", name, gpu,
              at_most ? "at most " : "", want);
}

static void counts_body(void) {
    st_set_jit_min(0);   /* the cpu runs through the JIT too (counts do not depend on the tier) */
    uint64_t r0 = exec_cuda_renders();
    expect("softmax", P_SOFTMAX, 0, 1, 0);
    expect("log_softmax", P_LOG_SOFTMAX, 0, 1, 0);
    expect("layernorm", P_LAYERNORM, 0, 1, 0);
    expect("rmsnorm", P_RMSNORM, 0, 1, 0);
    expect("cross-entropy (rows)", P_CE_ROWS, 0, 1, 0);
    expect("cross-entropy (mean)", P_CE_MEAN, 0, 2, 1);
    expect("gelu(x@w+b)", P_GELU_LINEAR, 0, 1, 0);
    expect("adamw, 4 parameters", P_ADAMW, 0, 2, 1);
    expect("softmax backward", P_SOFTMAX, 1, 1, 0);
    expect("log_softmax backward", P_LOG_SOFTMAX, 1, 1, 0);
    expect("layernorm backward", P_LAYERNORM, 1, 2, 0);
    expect("rmsnorm backward", P_RMSNORM, 1, 2, 0);
    expect("cross-entropy backward", P_CE_MEAN, 1, 1, 0);
    CHECK(exec_cuda_renders() > r0);   /* the CUDA kernels were rendered, not skipped */
    if (fake) {
        CHECK_EQ_INT(fake_cuda_stat("violations"), 0);
        CHECK(fake_cuda_stat("loads") > 0);
    }
}

/* ---- the plan cache after warm-up ---- */

/* One training-like step on cuda:0: a layernorm flush, then an AdamW flush with learning rate lr
 * (a user scalar: a kernel parameter, never a recompile). */
static st_status step(double lr) {
    st_tensor *out[16];
    st_tensor *x = input(2, (int64_t[]){N, C}, 1, 0), *w = input(1, (int64_t[]){C}, 2, 0);
    st_tensor *y = layernorm(x, w, input(1, (int64_t[]){C}, 3, 0));
    st_status s = st_realize(1, &y);
    int n = adamw(out, lr, 10);
    if (s == ST_OK) s = st_realize(n, out);
    ft_drain();
    return s;
}

typedef struct snap {
    st_stats_t st;
    uint64_t renders;
    int launches, grid[3], block[3];
    char kernel[128];
} snap;

static void take(snap *p) {
    st_stats(&p->st);
    p->renders = exec_cuda_renders();
    p->launches = fake_cuda_stat("launches");
    const char *g[3] = {"grid_x", "grid_y", "grid_z"}, *b[3] = {"block_x", "block_y", "block_z"};
    for (int i = 0; i < 3; i++) p->grid[i] = fake_cuda_stat(g[i]), p->block[i] = fake_cuda_stat(b[i]);
    snprintf(p->kernel, sizeof p->kernel, "%s", fake_cuda_last_kernel());
}

static void cache_body(void) {
    CHECK(st_set_default_device("cuda:0") == ST_OK);
    snap a, b;
    take(&a);
    CHECK(step(1e-3) == ST_OK);   /* warm-up: plans, renders, compiles */
    take(&b);
    int kernels = (int)(b.st.kernels_launched - a.st.kernels_launched);
    CHECK(kernels >= 2 && b.renders - a.renders == (uint64_t)kernels);
    CHECK_EQ_INT(b.st.plans_built - a.st.plans_built, 2);
    if (fake) CHECK_EQ_INT(b.launches - a.launches, kernels);
    snap first = b;
    for (int i = 2; i <= 4; i++) {
        take(&a);
        CHECK(step(1e-3 * i) == ST_OK);
        take(&b);
        CHECK_EQ_INT(b.st.plans_built - a.st.plans_built, 0);
        CHECK_EQ_INT(b.st.plan_cache_hits - a.st.plan_cache_hits, 2);
        CHECK_EQ_INT(b.renders - a.renders, 0);   /* no CUDA source rendered or hashed */
        CHECK_EQ_INT(b.st.compile_calls - a.st.compile_calls, 0);
        CHECK_EQ_INT(b.st.kernels_compiled - a.st.kernels_compiled, 0);
        CHECK_EQ_INT(b.st.kernels_launched - a.st.kernels_launched, kernels);
        if (!fake) continue;
        CHECK_EQ_INT(b.launches - a.launches, kernels);
        CHECK_MSG(!strcmp(b.kernel, first.kernel), "step %d: last kernel %s, first step's %s", i, b.kernel,
                  first.kernel);
        CHECK_MSG(!memcmp(b.grid, first.grid, sizeof b.grid) && !memcmp(b.block, first.block, sizeof b.block),
                  "step %d: grid %dx%dx%d block %dx%dx%d, first step's grid %dx%dx%d block %dx%dx%d", i, b.grid[0],
                  b.grid[1], b.grid[2], b.block[0], b.block[1], b.block[2], first.grid[0], first.grid[1],
                  first.grid[2], first.block[0], first.block[1], first.block[2]);
    }
    /* every module unloaded: the cached functions are stale; the next step resolves them again
     * (from the cubin cache: nothing compiled) and never launches a dead one */
    cuda_shutdown();
    take(&a);
    CHECK(step(5e-3) == ST_OK);
    take(&b);
    CHECK_EQ_INT(b.st.plans_built - a.st.plans_built, 0);
    CHECK_EQ_INT(b.renders - a.renders, kernels);
    CHECK_EQ_INT(b.st.kernels_compiled - a.st.kernels_compiled, 0);
    if (fake) {
        CHECK_EQ_INT(b.launches - a.launches, kernels);
        CHECK_EQ_INT(fake_cuda_stat("violations"), 0);
    }
}

static void child_body(void) {
    CHECK_MSG(st_cuda_device_count() >= 1 && !strcmp(st_default_device(), "cuda:0"), "no GPU in the child: %s",
              st_default_device());
    fake = fake_cuda_stat("loads") != -1000;   /* after the probe loaded the driver */
    CHECK_MSG(fake || !getenv("ST_CUDA_LIB"), "ST_CUDA_LIB=%s is not the fake driver", getenv("ST_CUDA_LIB"));
    if (test_cur_failed) return;
    const char *part = getenv("ST_TEST_PART");
    if (part && !strcmp(part, "cache")) cache_body();
    else counts_body();
    ft_drain();
    st_shutdown();
}

static int has_gpu;
static void run_part(const char *part) {
    setenv("ST_TEST_PART", part, 1);
    if (has_gpu) child_body();
    else fake_cuda_spawn();
}
TEST(counts_on_cuda_equal_cpu) { run_part("counts"); }
TEST(cached_plans_launch_without_rendering) { run_part("cache"); }

int main(int argc, char **argv) {
    fake_cuda_child(argc, argv, child_body);
    /* the cubin cache: shared by both children (the second finds the first's cubins) */
    if (!ft_cache_dir_create("/tmp/st_cudacnt_XXXXXX")) return 1;
    has_gpu = st_cuda_device_count() > 0;
    RUN(counts_on_cuda_equal_cpu);
    RUN(cached_plans_launch_without_rendering);
    ft_cache_dir_remove();
    TEST_MAIN_END();
}
