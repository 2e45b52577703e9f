/*
 * device.c — devices as the user sees them: names, the default device, moving tensors.
 *
 * The registry, the default device and the buffers are the device layer's (device/device.c);
 * this file is the public API over it.
 *
 * Moving (st_to_dev): the source is realized contiguous on its own device, then one copy goes
 * through the device interface (CUDA: pinned staging host -> device, asynchronous on the runtime's
 * stream; device -> host waits for the stream, as a sync point does). Unbound values (fills, random
 * tensors: ST_DEV_ANY) are computed directly on the target instead of being copied.
 */
#include "runtime/tensor.h"

const char *st_default_device(void) { return st_dev_static_name(st_default_dev()); }

st_status st_set_default_device(const char *name) {
    int d;
    st_status s = dev_parse(name, &d);
    if (s == ST_OK) s = dev_check(d);
    if (s == ST_OK) dev_set_default(d);
    return s;
}

int st_cuda_device_count(void) { return dev_accel_count(); }

/* The device t's value lives on (or, unbound, would be computed on). */
static int tensor_dev(const st_tensor *t) {
    int d = st_node_dev(t->storage->node);
    return d == ST_DEV_ANY ? st_default_dev() : d;
}

const char *st_device_of(const st_tensor *t) { return st_dev_static_name(tensor_dev(t)); }

st_tensor *st_to_dev(st_tensor *t, int dev) {
    if (dev_check(dev) != ST_OK) return NULL;
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
    if (dev_parse(device, &d) != ST_OK) return NULL;
    return st_to_dev(t, d);
}

void st_empty_cache(void) { dev_empty_caches(); }
