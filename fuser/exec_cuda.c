/*
 * exec_cuda.c — one lowered group launched on a device of the CUDA target.
 *
 * The group's kernel IR (the same IR the C renderer prints) is rendered as CUDA C
 * (jit/render_cuda.c), compiled by NVRTC for the device's architecture through the cubin cache
 * (jit/cache_cuda.c: memory, then disk, then NVRTC), loaded once per device and launched with the
 * grid and block that cuda_launch_dims computes from the IR and the launch's parameters, all
 * through the device interface (device/device.h: load_function, launch). Nothing here
 * synchronizes; a kernel that can report an index error (gather, scatter_add) is launched with the
 * message of that error, which the device reports at its next synchronization point.
 *
 * A plan-cache group keeps what its first launch resolved (exec_cuda_fn: the function, the launch
 * description, whether it reports errors), so a repeated step's launch renders and hashes nothing:
 * only the grid is computed from the (refreshed) parameters. A slot resolved before the device
 * unloaded its modules (its generation changed: st_shutdown) is resolved again, never launched
 * stale.
 */
#include "fuser/fuser.h"
#include "jit/render.h"
#include "jit/nvrtc.h"
#include "jit/compile.h"
#include "device/device.h"

static int reports_errors(const kir_kernel *k) {
    for (int i = 0; i < k->n; i++)
        if (k->ins[i].op == KI_SETERR) return 1;
    return 0;
}

struct exec_cuda_fn {
    void *fn;              /* owned by the device's module table */
    cuda_launch_desc d;
    unsigned gen;          /* the device's generation when fn was resolved; 0: never */
    int check;             /* the kernel reports index errors */
};

static uint64_t renders;

uint64_t exec_cuda_renders(void) { return renders; }

exec_cuda_fn *exec_cuda_fn_new(void) { return st_calloc(1, sizeof(exec_cuda_fn)); }

void exec_cuda_fn_free(exec_cuda_fn *f) { st_free(f); }

/* Resolves the group's kernel on device ord of o into f: rendered for the architecture NVRTC
 * compiles for on this device (jit_cuda_target: the device's own, or a PTX target below it),
 * hashed, compiled (or found in the cubin cache), its module loaded (or found) and the function
 * looked up. */
static st_status resolve(const fuse_launch *L, const st_device_ops *o, int ord, const dev_info *di, exec_cuda_fn *f) {
    char hex[33], kname[48], arch[16];
    st_status s = jit_cuda_target(di, arch, sizeof arch);
    if (s != ST_OK) return s;
    int sm = atoi(arch + strcspn(arch, "0123456789"));   /* sm_90a, compute_90: 90 */
    char *src = render_cuda_sm(&L->k, sm < di->arch ? sm : di->arch, &f->d);
    if (!src) return st_last_status();
    renders++;
    base_hash_hex(base_hash128(src, strlen(src), (base_hash){{0, 0}}), hex);
    snprintf(kname, sizeof kname, "st_k_%s", hex);
    const void *cubin;
    size_t n;
    s = jit_cubin_get(src, kname, arch, &cubin, &n, NULL);
    st_free(src);
    if (s == ST_OK) s = o->load_function(ord, cubin, n, kname, &f->fn);
    if (s != ST_OK) return s;
    f->gen = o->generation();
    f->check = reports_errors(&L->k);
    return ST_OK;
}

st_status exec_cuda_launch(const fuse_launch *L, int dev, exec_cuda_fn *cache, void *const *bufs, const char *op) {
    int ord;
    const st_device_ops *o = dev_ops(dev, &ord);
    if (!o || o->target != DEV_TARGET_CUDA) return st_error(ST_ERR_DEVICE, "device %d does not run CUDA kernels", dev);
    const dev_info *di = o->info(ord);
    if (!di) return st_last_status();
    exec_cuda_fn once = {0}, *f = cache ? cache : &once;
    st_status s;
    if (f->gen != o->generation() && (s = resolve(L, o, ord, di, f)) != ST_OK) {
        f->gen = 0;
        return s;
    }
    char what[160];
    dev_call c = {.fn = f->fn, .bufs = bufs, .ints = L->ints, .flts = L->flts, .nbufs = L->k.nbufs,
                  .nints = L->k.nints, .nflts = L->k.nflts, .check = f->check, .name = L->name,
                  .scratch = f->d.scratch};
    cuda_launch_dims(&L->k, &f->d, L->ints, di->units, c.grid, c.block, &c.rt);
    if (!c.grid[0] || !c.grid[1] || !c.grid[2]) return ST_OK; /* empty domain: nothing to run */
    if (c.check) {
        fuse_index_error(what, sizeof what, op, L->name);
        c.what = what;
    }
    int err = 0;   /* always 0 on this target: the flag is read at the next synchronization */
    return o->launch(ord, &c, &err);
}
