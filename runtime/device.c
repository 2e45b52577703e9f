/*
 * device.c — devices as the user sees them: names, the default device, moving tensors.
 *
 * Names: "cpu", "cuda" (= "cuda:0"), "cuda:N". Internally a device is a number (ST_DEV_CPU, or 1 +
 * the CUDA ordinal; see runtime/internal.h). The default device is read once: ST_DEVICE if set,
 * else cuda:0 when the driver loads and reports a GPU, else the CPU — and then stitch says once,
 * on stderr, why there is no GPU. A requested GPU that is not there is said once too, and the CPU
 * is used: a sync point must never fail because of the environment.
 *
 * Moving (st_to_dev): the source is realized contiguous on its own device, then one copy goes
 * through the driver layer (pinned staging host -> device, asynchronous on the runtime's stream;
 * device -> host waits for the stream, as a sync point does). Unbound values (fills, random
 * tensors: ST_DEV_ANY) are computed directly on the target instead of being copied.
 */
#include "runtime/tensor.h"
#include "device/cuda.h"
#include "trace/trace.h"

#include <errno.h>

static int default_dev = -2;   /* -2: not resolved yet */

/* Parses a device name; ST_ERR_ARG naming it when malformed. */
static st_status parse_dev(const char *name, int *dev) {
    if (!name) return st_error(ST_ERR_ARG, "device: NULL name");
    if (!strcmp(name, "cpu")) {
        *dev = ST_DEV_CPU;
        return ST_OK;
    }
    if (!strcmp(name, "cuda") || !strcmp(name, "gpu")) {
        *dev = 1;
        return ST_OK;
    }
    if (!strncmp(name, "cuda:", 5) && name[5] >= '0' && name[5] <= '9') {
        char *end;
        errno = 0;
        long v = strtol(name + 5, &end, 10);
        if (!errno && !*end && v >= 0 && v < 64) {
            *dev = 1 + (int)v;
            return ST_OK;
        }
    }
    return st_error(ST_ERR_ARG, "unknown device \"%s\" (expected cpu, cuda or cuda:N)", name);
}

/* ST_OK when dev can be used now; else ST_ERR_DEVICE saying why in plain words. */
static st_status check_dev(int dev) {
    if (dev == ST_DEV_CPU) return ST_OK;
    int n = cuda_probe();
    if (n == 0) return st_error(ST_ERR_DEVICE, "cuda:%d is not available: %s", dev - 1, cuda_unavailable_reason());
    if (dev - 1 >= n)
        return st_error(ST_ERR_DEVICE, "cuda:%d is not available: this machine has %d CUDA device%s", dev - 1, n,
                        n == 1 ? "" : "s");
    if (!cuda_device(dev - 1)) return st_last_status();
    return ST_OK;
}

int st_default_dev(void) {
    if (default_dev != -2) return default_dev;
    default_dev = ST_DEV_CPU;
    const char *env = getenv("ST_DEVICE");
    if (env && *env) {
        int d;
        if (parse_dev(env, &d) != ST_OK) {
            fprintf(stderr, "stitch: ignoring ST_DEVICE=%s (expected cpu, cuda or cuda:N); running on the cpu\n", env);
        } else if (check_dev(d) != ST_OK) {
            fprintf(stderr, "stitch: ST_DEVICE=%s: %s; running on the cpu\n", env, st_last_error());
        } else {
            default_dev = d;
        }
        st_clear_error();
        return default_dev;
    }
    if (cuda_probe() > 0 && cuda_device(0)) default_dev = 1;
    else fprintf(stderr, "stitch: no usable GPU (%s); running on the cpu\n", cuda_unavailable_reason());
    st_clear_error();
    return default_dev;
}

const char *st_dev_static_name(int dev) {
    static const char *const cuda_names[] = {"cuda:0", "cuda:1", "cuda:2", "cuda:3",
                                             "cuda:4", "cuda:5", "cuda:6", "cuda:7"};
    if (dev == ST_DEV_CPU || dev == ST_DEV_ANY) return dev == ST_DEV_CPU ? "cpu" : "any";
    return dev - 1 < 8 ? cuda_names[dev - 1] : "cuda:8+";
}

const char *st_default_device(void) { return st_dev_static_name(st_default_dev()); }

st_status st_set_default_device(const char *name) {
    int d;
    st_status s = parse_dev(name, &d);
    if (s == ST_OK) s = check_dev(d);
    if (s == ST_OK) default_dev = d;
    return s;
}

int st_cuda_device_count(void) { return cuda_probe(); }

/* The device t's value lives on (or, unbound, would be computed on). */
static int tensor_dev(const st_tensor *t) {
    int d = st_node_dev(t->storage->node);
    return d == ST_DEV_ANY ? st_default_dev() : d;
}

const char *st_device_of(const st_tensor *t) { return st_dev_static_name(tensor_dev(t)); }

/* Copies n bytes between buffers of (possibly) different devices. */
static st_status copy_bytes(st_buffer *dst, size_t doff, const st_buffer *src, size_t soff, size_t n) {
    if (n == 0) return ST_OK;
    char *d = (char *)dst->data, *s = (char *)src->data;
    if (dst->device == ST_DEV_CPU && src->device == ST_DEV_CPU) {
        memcpy(d + doff, s + soff, n);
        return ST_OK;
    }
    if (src->device == ST_DEV_CPU)
        return cuda_copy_htod(dst->device - 1, (st_devptr)(uintptr_t)(d + doff), s + soff, n);
    if (dst->device == ST_DEV_CPU)
        return cuda_copy_dtoh(src->device - 1, d + doff, (st_devptr)(uintptr_t)(s + soff), n);
    if (dst->device == src->device)
        return cuda_copy_dtod(dst->device - 1, (st_devptr)(uintptr_t)(d + doff), (st_devptr)(uintptr_t)(s + soff), n);
    void *tmp = st_malloc(n); /* between two GPUs: through the host */
    if (!tmp) return st_last_status();
    st_status r = cuda_copy_dtoh(src->device - 1, tmp, (st_devptr)(uintptr_t)(s + soff), n);
    if (r == ST_OK) r = cuda_copy_htod(dst->device - 1, (st_devptr)(uintptr_t)(d + doff), tmp, n);
    st_free(tmp);
    return r;
}

st_tensor *st_to_dev(st_tensor *t, int dev) {
    if (check_dev(dev) != ST_OK) return NULL;
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
    st_status s = b ? copy_bytes(b, 0, cn->buf, (size_t)c->offset * es, n) : st_last_status();
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
    if (parse_dev(device, &d) != ST_OK) return NULL;
    return st_to_dev(t, d);
}

void st_empty_cache(void) {
    st_mem_trim();
    cuda_empty_cache();
}

/* A host copy of a realized node's bytes [off, off + n): data itself on the CPU, else a fresh
 * st_malloc'ed block the caller frees (*owned set). */
st_status st_host_bytes(const st_node *n, size_t off, size_t nbytes, const void **out, void **owned) {
    *owned = NULL;
    if (n->buf->device == ST_DEV_CPU) {
        *out = (const char *)n->buf->data + off;
        return ST_OK;
    }
    void *h = st_malloc(nbytes ? nbytes : 1);
    if (!h) return st_last_status();
    st_status s = cuda_copy_dtoh(n->buf->device - 1, h, (st_devptr)(uintptr_t)((char *)n->buf->data + off), nbytes);
    if (s != ST_OK) {
        st_free(h);
        return s;
    }
    *out = h;
    *owned = h;
    return ST_OK;
}
