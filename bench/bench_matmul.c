/*
 * bench_matmul.c — f32 matmul GFLOP/s through the public API (st_matmul + st_realize: a JIT
 * kernel running the prelude's GEMM on the default thread count), against numpy's matmul
 * (OpenBLAS) and, when /usr/bin/python3 has it, torch's (torch.set_num_threads(2), or ST_THREADS
 * when set; for numpy set OPENBLAS_NUM_THREADS too), measured in the same run on the same shapes.
 *
 * Run: bench_matmul [RESULTS_FILE] [--quick]   (bench/run.sh does). Shapes, M x K x N:
 *   1024^3; 128x784x256 with B transposed (x @ W^T of a Linear layer); 256x128x784 with A
 *   transposed (g^T @ x, a weight gradient); 128x256x128 plain; batched attention products
 *   16 x (128x64 @ 64x128, B transposed: Q @ K^T) and 16 x (128x128 @ 128x64: P @ V), and the
 *   transformer-block step's: 64 x (64x32 @ 32x64, B transposed) and 64 x (64x64 @ 64x32).
 * BENCH_PY=python: the python for the numpy/torch twins (a venv with PyPI's torch; default: the
 * first python3 with numpy; BENCH_PY=none: none). BENCH_BLAS=libfoo.so: also time that library's cblas_sgemm on the
 * same shapes and layouts (dlopen'ed, so nothing links against it; threads: OPENBLAS_NUM_THREADS
 * or BLIS_NUM_THREADS; a batched case is one call per product).
 * GFLOP/s = 2*M*N*K / best wall time of ITERS warm iterations (median printed too). One stitch
 * iteration = record st_matmul on realized operands (views for the transposed ones) + st_realize +
 * st_release, i.e. output allocation included, as in a training loop; the first run (kernel
 * compile) is not timed. One python iteration = `a @ b` on the same views (a fresh result).
 * The stitch result is checked against a double-precision loop (max relative error printed).
 * ST_JIT_ASYNC defaults to 0 here (compiled kernels, not the interpreter tier, are timed).
 * RESULTS_FILE gets `key value` lines (mm_<case>_gflops, np_mm_<case>_gflops, torch_...).
 */
#include "stitch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

typedef struct mm_case {
    const char *name;
    int64_t M, K, N;
    int ta, tb;   /* operand stored transposed (the matmul reads a transposed view) */
    int64_t batch;   /* 0: 2-D operands; else (batch, rows, cols), one product per batch index */
} mm_case;

static const mm_case cases[] = {
    {"sq1024", 1024, 1024, 1024, 0, 0, 0},
    {"xWt", 128, 784, 256, 0, 1, 0},
    {"gtx", 256, 128, 784, 1, 0, 0},
    {"h128", 128, 256, 128, 0, 0, 0},
    {"qkt", 128, 64, 128, 0, 1, 16},   /* attention scores Q @ K^T, 16 (batch x heads) of 128 x 64 */
    {"pv", 128, 128, 64, 0, 0, 16},    /* attention output P @ V */
    /* the transformer-block step's (bench_fusion.lua: batch 16 x 4 heads, 64 tokens, head dim 32):
     * k = 32 and 64, where the micro-kernel's start and store weigh the most */
    {"qkt64", 64, 32, 64, 0, 1, 64},
    {"pv64", 64, 64, 32, 0, 0, 64},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A realized f32 operand of logical shape (rows, cols) with values in [-1, 1); stored as
 * (cols, rows) and returned as a transposed view when trans. *host gets the logical values. */
static st_tensor *operand(int64_t nb, int64_t rows, int64_t cols, int trans, unsigned seed, float **host) {
    const int64_t bt = nb ? nb : 1, n = bt * rows * cols;
    float *h = malloc((size_t)n * sizeof *h), *s = malloc((size_t)n * sizeof *s);
    if (!h || !s) {
        free(h);
        free(s);
        return NULL;
    }
    srand(seed);
    for (int64_t i = 0; i < n; i++) h[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    for (int64_t b = 0; b < bt; b++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                s[b * rows * cols + (trans ? j * rows + i : i * cols + j)] = h[b * rows * cols + i * cols + j];
    int64_t shape[3] = {nb, trans ? cols : rows, trans ? rows : cols};
    st_tensor *t = nb ? st_from_data(ST_F32, 3, shape, s) : st_from_data(ST_F32, 2, shape + 1, s);
    free(s);
    if (t && st_realize(1, &t) != ST_OK) {
        st_release(t);
        t = NULL;
    }
    if (t && trans) {
        st_tensor *v = nb ? st_transpose(t, 1, 2) : st_transpose(t, 0, 1);
        st_release(t);
        t = v;
    }
    *host = h;
    return t;
}

/* stitch: best and median seconds of iters runs; max relative error vs a double loop. */
static int bench_stitch(const mm_case *c, int iters, double *best, double *med, double *err) {
    float *ha = NULL, *hb = NULL;
    st_tensor *a = operand(c->batch, c->M, c->K, c->ta, 1, &ha), *b = operand(c->batch, c->K, c->N, c->tb, 2, &hb);
    const int64_t bt = c->batch ? c->batch : 1;
    int ok = a && b;
    double *ts = malloc((size_t)iters * sizeof *ts);
    float *out = malloc((size_t)(bt * c->M * c->N) * sizeof *out);
    ok = ok && ts && out;
    for (int it = -1; ok && it < iters; it++) {   /* it == -1: the warm-up (compiles) */
        double t0 = now();
        st_tensor *y = st_matmul(a, b);
        ok = y && st_realize(1, &y) == ST_OK;
        double dt = now() - t0;
        if (ok && it == iters - 1) ok = st_to_host(y, ST_F32, out, (size_t)(bt * c->M * c->N) * sizeof *out) == ST_OK;
        st_release(y);
        if (it >= 0) ts[it] = dt;
    }
    if (ok) {
        qsort(ts, (size_t)iters, sizeof *ts, cmp_d);
        *best = ts[0];
        *med = ts[iters / 2];
        double e = 0;   /* checked on a sample of rows (the full check is O(MNK) in doubles) */
        for (int64_t bi = 0; bi < bt; bi += 5) {
            const float *pa = ha + bi * c->M * c->K, *pb = hb + bi * c->K * c->N, *po = out + bi * c->M * c->N;
            for (int64_t i = 0; i < c->M; i += 7) {
                for (int64_t j = 0; j < c->N; j++) {
                    double s = 0, mag = 0;
                    for (int64_t k = 0; k < c->K; k++) {
                        s += (double)pa[i * c->K + k] * pb[k * c->N + j];
                        mag += fabs((double)pa[i * c->K + k] * pb[k * c->N + j]);
                    }
                    double r = fabs(po[i * c->N + j] - s) / (mag > 0 ? mag : 1);
                    if (r > e) e = r;
                }
            }
        }
        *err = e;
    } else {
        fprintf(stderr, "bench_matmul: %s failed: %s\n", c->name, st_last_error());
    }
    st_release(a);
    st_release(b);
    free(ha);
    free(hb);
    free(ts);
    free(out);
    return ok;
}

/* A BLAS's cblas_sgemm (BENCH_BLAS), dlopen'ed: best and median seconds. */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
static int bench_blas(void *lib, const mm_case *c, int iters, double *best, double *med) {
    sgemm_fn f;
    *(void **)&f = dlsym(lib, "cblas_sgemm");
    if (!f) return 0;
    const int64_t bt = c->batch ? c->batch : 1, na = bt * c->M * c->K, nb = bt * c->K * c->N;
    float *a = malloc((size_t)na * sizeof *a), *b = malloc((size_t)nb * sizeof *b);
    double *ts = malloc((size_t)iters * sizeof *ts);
    if (!a || !b || !ts) {
        free(a);
        free(b);
        free(ts);
        return 0;
    }
    for (int64_t i = 0; i < na; i++) a[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    for (int64_t i = 0; i < nb; i++) b[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    /* CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112; stored like the stitch operands */
    const int M = (int)c->M, K = (int)c->K, N = (int)c->N;
    for (int it = -1; it < iters; it++) {
        double t0 = now();
        float *y = malloc((size_t)(bt * M * N) * sizeof *y);   /* a fresh result, as stitch's */
        for (int64_t q = 0; q < bt; q++)
            f(101, c->ta ? 112 : 111, c->tb ? 112 : 111, M, N, K, 1.0f, a + q * M * K, c->ta ? M : K,
              b + q * K * N, c->tb ? K : N, 0.0f, y + q * M * N, N);
        double dt = now() - t0;
        free(y);
        if (it >= 0) ts[it] = dt;
    }
    qsort(ts, (size_t)iters, sizeof *ts, cmp_d);
    *best = ts[0];
    *med = ts[iters / 2];
    free(a);
    free(b);
    free(ts);
    return 1;
}

/* The python side: numpy (and torch when importable) on the same shapes and layouts. */
static const char *py_src =
    "import os, sys, time\n"
    "import numpy as np\n"
    "cases = [(n, int(m), int(k), int(nn), int(ta), int(tb), int(bt)) for n, m, k, nn, ta, tb, bt in\n"
    "         (a.split(',') for a in sys.argv[2:])]\n"
    "iters = int(sys.argv[1])\n"
    "def run(lib, mk, mm):\n"
    "    for name, M, K, N, ta, tb, bt in cases:\n"
    "        sh = (bt,) if bt else ()\n"
    "        a = mk(*sh, K, M).swapaxes(-1, -2) if ta else mk(*sh, M, K)\n"
    "        b = mk(*sh, N, K).swapaxes(-1, -2) if tb else mk(*sh, K, N)\n"
    "        mm(a, b)\n"
    "        ts = []\n"
    "        for _ in range(iters):\n"
    "            t0 = time.perf_counter(); y = mm(a, b); ts.append(time.perf_counter() - t0); del y\n"
    "        ts.sort()\n"
    "        print('%s %s %.9g %.9g' % (lib, name, ts[0], ts[len(ts) // 2]), flush=True)\n"
    "rng = np.random.default_rng(1)\n"
    "run('numpy', lambda *s: (rng.random(s, dtype=np.float32) * 2 - 1), np.matmul)\n"
    "try:\n"
    "    import torch\n"
    "    torch.set_num_threads(int(os.environ.get('ST_THREADS', '2')))\n"
    "    run('torch', lambda *s: torch.rand(*s) * 2 - 1, torch.matmul)\n"
    "    print('version torch', torch.__version__)\n"
    "except ImportError:\n"
    "    pass\n"
    "blas = sorted({w for w in open('/proc/self/maps').read().split() if 'blas' in w or 'mkl' in w})\n"
    "print('version numpy', np.__version__, 'BLAS:', ', '.join(blas) or 'unknown')\n";

/* Results of the python run: [lib][case] best / median seconds (0: missing). */
static double py_best[2][NCASES], py_med[2][NCASES];

static void bench_python(int iters) {
    /* BENCH_PY: a python of one's choice (a venv with PyPI's torch) */
    const char *pys[3] = {getenv("BENCH_PY"), "python3", "/usr/bin/python3"};
    const char *py = NULL;
    for (int i = 0; i < (pys[0] ? 1 : 3) && !py; i++) {   /* BENCH_PY=none: no python run */
        if (!pys[i] || !*pys[i]) continue;
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' >/dev/null 2>&1", pys[i]);
        if (system(cmd) == 0) py = pys[i];
    }
    if (!py) {
        printf("  no python3 with numpy: numpy ratios skipped\n");
        return;
    }
    char path[] = "/tmp/bench_matmul_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(path);
        return;
    }
    fputs(py_src, f);
    fclose(f);
    char cmd[1024];
    int n = snprintf(cmd, sizeof cmd, "%s %s %d", py, path, iters);
    for (int i = 0; i < NCASES && n < (int)sizeof cmd; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " %s,%lld,%lld,%lld,%d,%d,%lld", cases[i].name,
                      (long long)cases[i].M, (long long)cases[i].K, (long long)cases[i].N, cases[i].ta, cases[i].tb,
                      (long long)cases[i].batch);
    FILE *p = popen(cmd, "r");
    if (p) {
        char line[256], lib[32], name[64];
        double b, m;
        while (fgets(line, sizeof line, p)) {
            if (!strncmp(line, "version ", 8)) {
                printf("  (%s", line + 8);
                continue;
            }
            if (sscanf(line, "%31s %63s %lf %lf", lib, name, &b, &m) != 4) continue;
            int l = !strcmp(lib, "torch");
            for (int i = 0; i < NCASES; i++) {
                if (strcmp(name, cases[i].name)) continue;
                py_best[l][i] = b;
                py_med[l][i] = m;
            }
        }
        pclose(p);
    }
    unlink(path);
}

int main(int argc, char **argv) {
    const char *out_path = NULL;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else out_path = argv[i];
    }
    int iters = quick ? 5 : 20;
    /* the timed runs use compiled kernels: with the default background compile (ST_JIT_ASYNC=1)
     * the interpreter would run them until the compiler is done (40-50 GFLOP/s instead of 200+
     * on the dev VM); bench/run.sh sets it too, this covers a bare run */
    setenv("ST_JIT_ASYNC", "0", 0);
    FILE *res = out_path ? fopen(out_path, "w") : NULL;
    double sb[NCASES] = {0}, sm[NCASES] = {0};
    printf("== matmul (f32, GFLOP/s = 2MNK / best time; threads: ST_THREADS or all cores) ==\n");
    for (int i = 0; i < NCASES; i++) {
        const mm_case *c = &cases[i];
        double e = 0;
        int it = c->M * c->N * c->K >= (1 << 28) ? iters / 2 + 1 : iters;
        if (!bench_stitch(c, it, &sb[i], &sm[i], &e)) continue;
        double fl = 2.0 * (double)(c->M * c->N * c->K) * (double)(c->batch ? c->batch : 1);
        if (c->batch) printf("  %-7s %3lld x %3lldx%3lldx%3lld%s%s stitch %7.1f GFLOP/s best, %7.1f median (%.3f ms), max rel err %.1e\n",
                             c->name, (long long)c->batch, (long long)c->M, (long long)c->K, (long long)c->N,
                             c->ta ? " A^T" : "    ", c->tb ? " B^T" : "", fl / sb[i] / 1e9, fl / sm[i] / 1e9,
                             sb[i] * 1e3, e);
        else printf("  %-7s %4lldx%4lldx%4lld%s%s stitch %7.1f GFLOP/s best, %7.1f median (%.3f ms), max rel err %.1e\n",
               c->name, (long long)c->M, (long long)c->K, (long long)c->N, c->ta ? " A^T" : "    ",
               c->tb ? " B^T" : "    ", fl / sb[i] / 1e9, fl / sm[i] / 1e9, sb[i] * 1e3, e);
        if (res) fprintf(res, "mm_%s_gflops %.6g\nmm_%s_best_ms %.6g\n", c->name, fl / sb[i] / 1e9, c->name, sb[i] * 1e3);
    }
    const char *blas = getenv("BENCH_BLAS");
    void *lib = blas && *blas ? dlopen(blas, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (blas && *blas && !lib) printf("  BENCH_BLAS: %s\n", dlerror());
    for (int i = 0; lib && i < NCASES; i++) {
        const mm_case *c = &cases[i];
        double b = 0, m = 0;
        int it = c->M * c->N * c->K >= (1 << 28) ? iters / 2 + 1 : iters;
        if (!bench_blas(lib, c, it, &b, &m)) {
            printf("  BENCH_BLAS: no cblas_sgemm in %s\n", blas);
            break;
        }
        double fl = 2.0 * (double)(c->M * c->N * c->K) * (double)(c->batch ? c->batch : 1);
        printf("  %-7s %-6s %7.1f GFLOP/s best, %7.1f median (%.3f ms)", c->name, "blas", fl / b / 1e9, fl / m / 1e9,
               b * 1e3);
        if (sb[i] > 0) printf("; stitch/blas = %.2f x", b / sb[i]);
        printf("\n");
        if (res) fprintf(res, "blas_mm_%s_gflops %.6g\n", c->name, fl / b / 1e9);
    }
    if (lib) dlclose(lib);
    bench_python(iters);
    static const char *libs[2] = {"numpy", "torch"};
    for (int l = 0; l < 2; l++) {
        for (int i = 0; i < NCASES; i++) {
            const mm_case *c = &cases[i];
            if (py_best[l][i] <= 0) continue;
            double fl = 2.0 * (double)(c->M * c->N * c->K) * (double)(c->batch ? c->batch : 1);
            printf("  %-7s %-6s %7.1f GFLOP/s best, %7.1f median (%.3f ms)", c->name, libs[l], fl / py_best[l][i] / 1e9,
                   fl / py_med[l][i] / 1e9, py_best[l][i] * 1e3);
            if (sb[i] > 0) printf("; stitch/%s = %.2f x", libs[l], py_best[l][i] / sb[i]);
            printf("\n");
            if (res) fprintf(res, "%s_mm_%s_gflops %.6g\n", l ? "torch" : "np", c->name, fl / py_best[l][i] / 1e9);
        }
    }
    if (res) fclose(res);
    st_shutdown();
    return 0;
}
