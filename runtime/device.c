/*
 * device.c — devices as the user sees them: names, the default device, moving tensors.
 *
 * The registry and the buffers are the device layer's (device/device.c); this file is the public
 * API over it. A device is usable when the device layer can activate it AND the JIT can compile
 * for it (a GPU needs NVRTC, agreeing with its driver: jit_cuda_target); so the default device is
 * chosen here, the one layer that sees both. A GPU asked for by name that is not usable is an
 * error saying why; the default falls back to the CPU silently (a CPU-only machine is normal),
 * saying why only when a GPU was asked for with ST_DEVICE, or under ST_DEBUG.
 *
 * Moving (st_to_dev): the source is realized contiguous on its own device, then one copy goes
 * through the device interface (CUDA: pinned staging host -> device, asynchronous on the runtime's
 * stream; device -> host waits for the stream, as a sync point does). Unbound values (fills, random
 * tensors: ST_DEV_ANY) are computed directly on the target instead of being copied.
 */
#include "runtime/tensor.h"
#include "jit/nvrtc.h"

static int default_dev = -2;   /* -2: not resolved yet */

/* dev can run kernels now: the device activates and its kernels can be compiled. ST_ERR_DEVICE
 * ("cuda:0 is not available: ...") saying why. */
static st_status usable(int dev) {
    st_status s = dev_check(dev);
    if (s != ST_OK || dev_target_of(dev) != DEV_TARGET_CUDA) return s;
    const dev_info *di = dev_info_of(dev);
    char arch[16], name[24];
    if (!di) return st_last_status();
    if (jit_cuda_target(di, arch, sizeof arch) == ST_OK) return ST_OK;
    char why[4096];
    snprintf(why, sizeof why, "%s", st_last_error());
    return st_error(ST_ERR_DEVICE, "%s is not available: %s", st_dev_name(dev, name, sizeof name), why);
}

int st_default_dev(void) {
    if (default_dev != -2) return default_dev;
    st_runtime_init();
    default_dev = ST_DEV_CPU;
    const char *env = base_env(SET_DEVICE);
    if (env) {
        int d;
        if (dev_parse(env, &d) != ST_OK) {
            fprintf(stderr, "stitch: ignoring %s=%s (expected cpu, cuda or cuda:N); running on the cpu\n",
                    base_env_name(SET_DEVICE), env);
        } else if (usable(d) != ST_OK) {
            fprintf(stderr, "stitch: %s=%s: %s; running on the cpu\n", base_env_name(SET_DEVICE), env, st_last_error());
        } else {
            default_dev = d;
        }
        st_clear_error();
        return default_dev;
    }
    /* the first GPU, when its driver and its compiler are there; else the CPU, saying why only
     * under ST_DEBUG */
    const char *why;
    int gpu = dev_first_accel(&why);
    if (gpu != ST_DEV_CPU && usable(gpu) == ST_OK) default_dev = gpu;
    else if (st_rt.debug)
        fprintf(stderr, "stitch: no usable GPU (%s); running on the cpu\n", gpu == ST_DEV_CPU ? why : st_last_error());
    st_clear_error();
    return default_dev;
}

const char *st_default_device(void) { return st_dev_static_name(st_default_dev()); }

st_status st_set_default_device(const char *name) {
    int d;
    st_status s = dev_parse(name, &d);
    if (s == ST_OK) s = usable(d);
    if (s == ST_OK) default_dev = d;
    return s;
}

int st_cuda_device_count(void) { return dev_accel_count(); }

/* The device t's value lives on (or, unbound, would be computed on). */
static int tensor_dev(const st_tensor *t) {
    int d = st_node_dev(t->storage->node);
    return d == ST_DEV_ANY ? st_default_dev() : d;
}

const char *st_device_of(const st_tensor *t) {
    if (!t) {
        st_error(ST_ERR_ARG, "device_of: NULL tensor");
        return NULL;
    }
    return st_dev_static_name(tensor_dev(t));
}

st_tensor *st_to_dev(st_tensor *t, int dev) {
    if (usable(dev) != ST_OK) return NULL;
    st_node *node = t->storage->node;
    if (st_node_dev(node) == dev) return st_retain(t);
    if (st_node_dev(node) == ST_DEV_ANY) { /* unbound: compute it there */
        st_tensor *c = st_contiguous(t);
        st_node *v = c ? st_node_identity_view(c->storage->node) : NULL;
        st_release(c);
        if (!v) return NULL;
        v->dev = (int8_t)dev;
        st_tensor *r = st_tensor_from_node(v);
        if (r && st_realize(1, &r) != ST_OK) {
            st_release(r);
            return NULL;
        }
        return r;
    }
    st_tensor *c = st_contiguous(t);
    if (!c || st_realize(1, &c) != ST_OK) {
        st_release(c);
        return NULL;
    }
    const st_node *cn = c->storage->node;
    size_t es = st_dtypes[cn->dtype].size, n = (size_t)st_numel(c) * es;
    st_node *out = st_node_new(ST_OP_BUFFER, (st_dtype)c->dtype, c->ndim, c->shape, 0, NULL, NULL);
    st_buffer *b = out ? st_buffer_new_on(dev, n) : NULL;
    st_status s = b ? dev_copy_bytes(b, 0, cn->buf, (size_t)c->offset * es, n) : st_last_status();
    st_release(c);
    if (s != ST_OK) {
        st_buffer_release(b);
        st_node_release(out);
        return NULL;
    }
    st_node_realize(out, b);
    return st_tensor_from_node(out);
}

st_tensor *st_to(st_tensor *t, const char *device) {
    int d;
    if (!t) {
        st_error(ST_ERR_ARG, "to: NULL tensor");
        return NULL;
    }
    if (dev_parse(device, &d) != ST_OK) return NULL;
    return st_to_dev(t, d);
}

void st_empty_cache(void) { dev_empty_caches(); }
