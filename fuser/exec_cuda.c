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
 * Kernel ABI (jit/render.h): buffers, then every int parameter (long long), every float parameter
 * (double), the device error flag, the threads-per-row count.
 */
#include "fuser.h"
#include "../jit/render.h"
#include "../jit/nvrtc.h"
#include "../jit/compile.h"
#include "../runtime/cuda.h"

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

/* The function for the group's kernel on device ord. */
static st_status kernel_function(const fuse_launch *L, const cuda_device_info *di, cuda_launch_desc *d, void **fn) {
    char *src = render_cuda_sm(&L->k, di->cc_major * 10 + di->cc_minor, d);
    if (!src) return st_last_status();
    char hex[33], kname[48], arch[16];
    jit_key_hex(jit_hash128(src, strlen(src), (jit_key){{0, 0}}), hex);
    snprintf(kname, sizeof kname, "st_k_%s", hex);
    arch_of(di, arch, sizeof arch);
    const void *cubin;
    size_t n;
    st_status s = jit_cubin_get(src, kname, arch, &cubin, &n, NULL);
    st_free(src);
    if (s == ST_OK) s = cuda_module_function(di->ordinal, cubin, n, kname, fn);
    return s;
}

st_status exec_cuda_launch(const fuse_launch *L, int ord, void *const *bufs, int *err) {
    *err = 0;
    if (ord < 0 || ord >= MAX_DEVS) return st_error(ST_ERR_DEVICE, "cuda:%d: device number out of range", ord);
    const cuda_device_info *di = cuda_device(ord);
    if (!di) return st_last_status();
    cuda_launch_desc d;
    void *fn;
    st_status s = kernel_function(L, di, &d, &fn);
    if (s != ST_OK) return s;
    unsigned grid[3], block[3];
    int rt = 0;
    cuda_launch_dims(&L->k, &d, L->ints, di->sm_count, grid, block, &rt);
    if (!grid[0] || !grid[1] || !grid[2]) return ST_OK; /* empty domain: nothing to run */

    const kir_kernel *k = &L->k;
    int check = reports_errors(k);
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
    s = cuda_launch(ord, fn, grid, block, 0, params);
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
