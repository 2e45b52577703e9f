/*
 * fuse_test_util.h — helpers shared by the fuser's C tests (test_fuser.c, test_epilogue.c,
 * test_prologue.c, test_colred.c, test_plan_cache.c, test_fusion_counts.c, test_cuda_counts.c):
 * the tests' LCG, realized inputs from generated values, a pool of intermediates, reading a
 * tensor back as doubles, the comparison of a multi-output graph's lazy flush (and its kernel count)
 * with the reference interpreter on the cpu, and a fresh ST_CACHE_DIR (mkdtemp) removed at the end.
 *
 * Everything is static: each test program includes this once, after test.h (the checks record
 * their failures in the current test). Inputs are reproducible: a seed gives the same values in
 * every test and on every run.
 */
#ifndef ST_FUSE_TEST_UTIL_H
#define ST_FUSE_TEST_UTIL_H

#include "base/base.h"
#include "trace/trace.h"
#include "test.h"
#include "fuzz_util.h"

#include <ftw.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

/* One step of the tests' LCG: u in [0, 1) from 16 (or 24) bits of the new seed. */
static inline double ft_rand16(unsigned *seed) {
    *seed = *seed * 1103515245u + 12345u;
    return (double)(*seed >> 8 & 0xffff) / 65536.0;
}
static inline double ft_rand24(unsigned *seed) {
    *seed = *seed * 1103515245u + 12345u;
    return (double)(*seed >> 8 & 0xffffff) / 16777216.0;
}

/* A realized tensor of dtype dt: the values val(&seed, dt) in order, made in f64 and cast. */
typedef double (*ft_value_fn)(unsigned *seed, st_dtype dt);
static inline st_tensor *ft_input(st_dtype dt, int ndim, const int64_t *shape, unsigned seed,
                                  ft_value_fn val) {
    int64_t n = st_shape_numel(ndim, shape);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = val(&seed, dt);
    st_tensor *f = st_from_data(ST_F64, ndim, shape, v);
    free(v);
    st_tensor *t = st_cast(f, dt);
    st_release(f);
    st_realize(1, &t);
    return t;
}

/* An f32 tensor (not realized again) of values in [-2, 2) made directly in f32: no cast. */
static inline st_tensor *ft_f32_input(int ndim, const int64_t *shape, unsigned seed) {
    int64_t n = st_shape_numel(ndim, shape);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(ft_rand16(&seed) * 4 - 2);
    st_tensor *t = st_from_data(ST_F32, ndim, shape, v);
    free(v);
    return t;
}

/* A pool of intermediates released together: a builder wraps every tensor it makes in K() (a
 * short name, since nearly every line of a builder does), ft_drain releases them all. */
static st_tensor *ft_pool[512];
static int ft_npool;
static inline st_tensor *K(st_tensor *t) {
    if (t && ft_npool < (int)(sizeof ft_pool / sizeof ft_pool[0])) ft_pool[ft_npool++] = t;
    return t;
}
static inline void ft_drain(void) {
    while (ft_npool) st_release(ft_pool[--ft_npool]);
}

/* t's values as doubles (malloc'd; the caller frees); NULL when they cannot be read. */
static inline double *ft_host(st_tensor *t) {
    int64_t n;
    return fu_read(t, &n);
}

/* Builds fn eagerly with the reference interpreter — on the cpu, with in[0..nin) copied there, on
 * every default device (on a GPU an eager op would be a GPU kernel of its own, and a lone matmul's
 * kernel is not the fused one's) — and lazily on in's own device, realizes the lazy outputs in one
 * flush and compares them element by element: within tol (CHECK_NEAR), or with bits set the very
 * same values. Returns the kernels that flush launched (-1 on a failure, already recorded). */
enum { FT_MAXOUT = 3, FT_MAXIN = 8 };
typedef int (*ft_build_fn)(st_tensor **in, st_tensor **out);   /* returns the number of outputs */
static inline int ft_check_flush(ft_build_fn fn, st_tensor **in, int nin, double tol, bool bits) {
    st_tensor *ref[FT_MAXOUT] = {0}, *out[FT_MAXOUT] = {0}, *cpu_in[FT_MAXIN] = {0};
    bool ok = nin > 0 && nin <= FT_MAXIN;
    CHECK_MSG(ok, "%d inputs (at most %d)", nin, FT_MAXIN);
    for (int i = 0; ok && i < nin; i++) ok = (cpu_in[i] = st_to(in[i], "cpu")) != NULL;
    if (!ok) {
        CHECK_MSG(0, "input to the cpu: %s", st_last_error());
        for (int i = 0; i < FT_MAXIN; i++) st_release(cpu_in[i]);
        return -1;
    }
    st_set_eager(1);
    int n = fn(cpu_in, ref);
    st_set_eager(0);
    for (int i = 0; i < nin; i++) st_release(cpu_in[i]);
    int n2 = fn(in, out);
    CHECK_EQ_INT(n2, n);
    st_stats_t s0, s1;
    st_stats(&s0);
    st_status s = st_realize(n, out);
    st_stats(&s1);
    CHECK_MSG(s == ST_OK, "realize failed: %s", st_last_error());
    for (int o = 0; o < n && s == ST_OK; o++) {
        CHECK_EQ_INT(st_numel(out[o]), st_numel(ref[o]));
        CHECK_EQ_INT(st_dtype_of(out[o]), st_dtype_of(ref[o]));
        double *a = ft_host(out[o]), *b = ft_host(ref[o]);
        CHECK(a && b);
        for (int64_t i = 0; a && b && i < st_numel(out[o]) && !test_cur_failed; i++) {
            if (bits) CHECK_MSG(a[i] == b[i], "%.17g vs %.17g", a[i], b[i]);
            else CHECK_NEAR(a[i], b[i], tol);
            if (test_cur_failed) printf("  (output %d, element %lld)\n", o, (long long)i);
        }
        free(a);
        free(b);
    }
    for (int o = 0; o < n; o++) {
        st_release(ref[o]);
        st_release(out[o]);
    }
    return s == ST_OK ? (int)(s1.kernels_launched - s0.kernels_launched) : -1;
}

/* Runs body(true) with the cpu as the default device (inputs made there, so its groups run on the
 * cpu), then, when the default device is a GPU (ST_DEVICE=cuda, the simulated cuda:0), body(false)
 * there; the default is restored. For what only the cpu has, such as the interpreter tier. */
static inline void ft_cpu_then_default(void (*body)(bool on_cpu)) {
    const char *dev = st_default_device();
    CHECK(st_set_default_device("cpu") == ST_OK);
    body(true);
    CHECK(st_set_default_device(dev) == ST_OK);
    if (strcmp(dev, "cpu") != 0) body(false);
}

/* The JIT's cache of this test program: a fresh directory, removed (with what the test wrote
 * there) by ft_cache_dir_remove. */
static char ft_cache_dir[256];

/* tmpl: a mkdtemp template ("/tmp/stitch-xxx-XXXXXX"); sets ST_CACHE_DIR; 0 on failure. */
static inline int ft_cache_dir_create(const char *tmpl) {
    snprintf(ft_cache_dir, sizeof ft_cache_dir, "%s", tmpl);
    if (!mkdtemp(ft_cache_dir)) return 0;
    setenv("ST_CACHE_DIR", ft_cache_dir, 1);
    return 1;
}

static inline int ft_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}
static inline void ft_cache_dir_remove(void) {
    nftw(ft_cache_dir, ft_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
