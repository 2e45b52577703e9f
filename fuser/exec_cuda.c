/*
 * exec_cuda.c — one lowered group launched on a CUDA device.
 *
 * The group's kernel IR (the same IR the C renderer prints) is rendered as CUDA C
 * (jit/render_cuda.c), compiled by NVRTC for the device's architecture through the cubin cache
 * (jit/cache_cuda.c: memory, then disk, then NVRTC), loaded once per device (runtime/cuda.c) and
 * launched on the runtime's stream with the grid and block that cuda_launch_dims computes from the
 * IR and the launch's parameters. Nothing here synchronizes, except for kernels that can report an
 * index error (gather, scatter_add): their error flag is read back after the launch.
 *
 * A plan-cache group keeps what its first launch resolved (exec_cuda_fn: the CUfunction, the launch
 * description, whether it reports errors), so a repeated step's launch renders and hashes nothing:
 * only the grid is computed from the (refreshed) parameters. The function belongs to a module of
 * runtime/cuda.c; a slot resolved before modules were unloaded (cuda_module_generation changed:
 * cuda_shutdown) is resolved again, never launched stale.
 *
 * Kernel ABI (jit/render.h): buffers, then every int parameter (long long), every float parameter
 * (double), the device error flag, the threads-per-row count.
 */
#include "fuser/fuser.h"
#include "jit/render.h"
#include "jit/nvrtc.h"
#include "jit/compile.h"
#include "device/cuda.h"

#define MAX_DEVS 64

/* Per device: the error flag (one device int, allocated on first need). */
static st_devptr err_flag[MAX_DEVS];

/* The NVRTC architecture of a device: its compute capability; sm_90a on Hopper (wgmma-ready). */
static void arch_of(const cuda_device_info *d, char *out, size_t n) {
    snprintf(out, n, "sm_%d%d%s", d->cc_major, d->cc_minor, d->cc_major == 9 && d->cc_minor == 0 ? "a" : "");
}

static int reports_errors(const kir_kernel *k) {
    for (int i = 0; i < k->n; i++)
        if (k->ins[i].op == KI_SETERR) return 1;
    return 0;
}

struct exec_cuda_fn {
    void *fn;              /* owned by runtime/cuda.c's module table */
    cuda_launch_desc d;
    unsigned gen;          /* cuda_module_generation() when fn was resolved; 0: never */
    int check;             /* the kernel reports index errors */
};

static uint64_t renders;

uint64_t exec_cuda_renders(void) { return renders; }

exec_cuda_fn *exec_cuda_fn_new(void) { return st_calloc(1, sizeof(exec_cuda_fn)); }

void exec_cuda_fn_free(exec_cuda_fn *f) { st_free(f); }

/* Resolves the group's kernel on device di into f: rendered, hashed, compiled (or found in the
 * cubin cache), its module loaded (or found) and the function looked up. */
static st_status resolve(const fuse_launch *L, const cuda_device_info *di, exec_cuda_fn *f) {
    char *src = render_cuda_sm(&L->k, di->cc_major * 10 + di->cc_minor, &f->d);
    if (!src) return st_last_status();
    renders++;
    char hex[33], kname[48], arch[16];
    jit_key_hex(jit_hash128(src, strlen(src), (jit_key){{0, 0}}), hex);
    snprintf(kname, sizeof kname, "st_k_%s", hex);
    arch_of(di, arch, sizeof arch);
    const void *cubin;
    size_t n;
    st_status s = jit_cubin_get(src, kname, arch, &cubin, &n, NULL);
    st_free(src);
    if (s == ST_OK) s = cuda_module_function(di->ordinal, cubin, n, kname, &f->fn);
    if (s != ST_OK) return s;
    f->gen = cuda_module_generation();
    f->check = reports_errors(&L->k);
    return ST_OK;
}

st_status exec_cuda_launch(const fuse_launch *L, int ord, exec_cuda_fn *cache, void *const *bufs, int *err) {
    *err = 0;
    if (ord < 0 || ord >= MAX_DEVS) return st_error(ST_ERR_DEVICE, "cuda:%d: device number out of range", ord);
    const cuda_device_info *di = cuda_device(ord);
    if (!di) return st_last_status();
    exec_cuda_fn once = {0}, *f = cache ? cache : &once;
    st_status s;
    if (f->gen != cuda_module_generation() && (s = resolve(L, di, f)) != ST_OK) {
        f->gen = 0;
        return s;
    }
    const cuda_launch_desc *d = &f->d;
    unsigned grid[3], block[3];
    int rt = 0;
    cuda_launch_dims(&L->k, d, L->ints, di->sm_count, grid, block, &rt);
    if (!grid[0] || !grid[1] || !grid[2]) return ST_OK; /* empty domain: nothing to run */

    const kir_kernel *k = &L->k;
    int check = f->check;
    if (check && !err_flag[ord] && (s = cuda_mem_alloc(ord, sizeof(int), &err_flag[ord])) != ST_OK) return s;
    int zero = 0;
    if (check && (s = cuda_copy_htod(ord, err_flag[ord], &zero, sizeof zero)) != ST_OK) return s;

    int np = k->nbufs + k->nints + k->nflts + 2;
    void **params = st_malloc((size_t)np * sizeof *params);
    st_devptr *ptrs = st_malloc((size_t)(k->nbufs ? k->nbufs : 1) * sizeof *ptrs);
    if (!params || !ptrs) {
        st_free(params);
        st_free(ptrs);
        return st_last_status();
    }
    int p = 0;
    for (int i = 0; i < k->nbufs; i++) {
        ptrs[i] = (st_devptr)(uintptr_t)bufs[i];
        params[p++] = &ptrs[i];
    }
    for (int i = 0; i < k->nints; i++) params[p++] = &L->ints[i];   /* int64_t == long long */
    for (int i = 0; i < k->nflts; i++) params[p++] = &L->flts[i];
    st_devptr ep = err_flag[ord];
    params[p++] = &ep;
    params[p++] = &rt;
    s = cuda_launch(ord, f->fn, grid, block, 0, params);
    st_free(params);
    st_free(ptrs);
    if (s == ST_OK && check) {
        int flag = 0;
        s = cuda_copy_dtoh(ord, &flag, err_flag[ord], sizeof flag);
        *err = flag;
    }
    return s;
}

void exec_cuda_shutdown(void) {
    for (int i = 0; i < MAX_DEVS; i++)
        if (err_flag[i]) {
            cuda_mem_free(i, err_flag[i]);
            err_flag[i] = 0;
        }
}
