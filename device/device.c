/*
 * device.c — the registry of devices, their names, the default device, and data buffers.
 *
 * A device number selects an implementation (a row of `impls`) and an ordinal inside it: the CPU
 * is number 0, cuda:N is 1 + N. Everything above this file reaches a device through the table
 * (dev_ops); adding a device is one implementation and one row here.
 *
 * The default device is the runtime's choice (runtime/device.c): a GPU is usable only when its
 * kernel compiler is too, which this layer cannot know.
 */
#include "device/device.h"

#include <errno.h>

/* The implementations: numbers [first, first + max) belong to impl. */
static const struct { const st_device_ops *ops; int first, max; } impls[] = {
    {&dev_cpu_ops, 0, 1},
    {&dev_cuda_ops, 1, DEV_MAX - 1},
};
enum { NIMPLS = sizeof impls / sizeof impls[0] };

const st_device_ops *dev_ops(int dev, int *ord) {
    for (int i = 0; i < NIMPLS; i++)
        if (dev >= impls[i].first && dev < impls[i].first + impls[i].max) {
            *ord = dev - impls[i].first;
            return impls[i].ops;
        }
    *ord = -1;
    return NULL;
}

st_status dev_parse(const char *name, int *dev) {
    if (!name) return st_error(ST_ERR_ARG, "device: NULL name");
    if (!strcmp(name, "gpu")) name = "cuda";
    for (int i = 0; i < NIMPLS; i++) {
        const char *kind = impls[i].ops->kind;
        size_t k = strlen(kind);
        if (strncmp(name, kind, k) != 0) continue;
        if (name[k] == '\0') {
            *dev = impls[i].first;
            return ST_OK;
        }
        if (name[k] == ':' && name[k + 1] >= '0' && name[k + 1] <= '9' && impls[i].max > 1) {
            char *end;
            errno = 0;
            long v = strtol(name + k + 1, &end, 10);
            if (!errno && !*end && v >= 0 && v < impls[i].max) {
                *dev = impls[i].first + (int)v;
                return ST_OK;
            }
        }
    }
    return st_error(ST_ERR_ARG, "unknown device \"%s\" (expected cpu, cuda or cuda:N)", name);
}

st_status dev_check(int dev) {
    int ord;
    const st_device_ops *o = dev_ops(dev, &ord);
    if (!o) return st_error(ST_ERR_DEVICE, "no device number %d", dev);
    int n = o->count();
    if (n == 0) return st_error(ST_ERR_DEVICE, "%s:%d is not available: %s", o->kind, ord, o->unavailable());
    if (ord >= n)
        return st_error(ST_ERR_DEVICE, "%s:%d is not available: this machine has %d %s device%s", o->kind, ord, n,
                        !strcmp(o->kind, "cuda") ? "CUDA" : o->kind, n == 1 ? "" : "s");
    if (!o->info(ord)) return st_last_status();
    return ST_OK;
}

const dev_info *dev_info_of(int dev) {
    int ord;
    const st_device_ops *o = dev_ops(dev, &ord);
    if (!o) {
        st_error(ST_ERR_DEVICE, "no device number %d", dev);
        return NULL;
    }
    return o->info(ord);
}

const char *st_dev_name(int dev, char *buf, size_t n) {
    int ord;
    const st_device_ops *o = dev_ops(dev, &ord);
    if (dev == ST_DEV_ANY || !o) snprintf(buf, n, "any");
    else if (o == &dev_cpu_ops) snprintf(buf, n, "%s", o->kind);
    else snprintf(buf, n, "%s:%d", o->kind, ord);
    return buf;
}

const char *st_dev_static_name(int dev) {
    static char names[DEV_MAX][16];
    if (dev < 0 || dev >= DEV_MAX) return "any";
    if (!names[dev][0]) st_dev_name(dev, names[dev], sizeof names[dev]);
    return names[dev];
}

int dev_first_accel(const char **why) {
    *why = "";
    for (int i = 1; i < NIMPLS; i++) {
        if (impls[i].ops->count() > 0) return impls[i].first;
        *why = impls[i].ops->unavailable();
    }
    return ST_DEV_CPU;
}

int dev_accel_count(void) {
    int n = 0;
    for (int i = 1; i < NIMPLS; i++) n += impls[i].ops->count();
    return n;
}

void dev_mem_stats(uint64_t *in_use, uint64_t *reserved, uint64_t *peak) {
    *in_use = *reserved = *peak = 0;
    for (int i = 0; i < NIMPLS; i++) {
        uint64_t a, b, c;
        impls[i].ops->mem_stats(&a, &b, &c);
        *in_use += a;
        *reserved += b;
        *peak += c;
    }
}

void dev_reset_peak(void) {
    for (int i = 0; i < NIMPLS; i++) impls[i].ops->reset_peak();
}

void dev_empty_caches(void) {
    for (int i = 0; i < NIMPLS; i++) impls[i].ops->empty_cache();
}

void dev_unload_functions(void) {
    for (int i = 0; i < NIMPLS; i++)
        if (impls[i].ops->unload_functions) impls[i].ops->unload_functions();
}

st_status dev_synchronize_all(void) {
    for (int i = 0; i < NIMPLS; i++) {
        st_status s = impls[i].ops->synchronize_all ? impls[i].ops->synchronize_all() : ST_OK;
        if (s != ST_OK) return s;
    }
    return ST_OK;
}

/* ---- buffers ---- */

st_buffer *st_buffer_new(size_t nbytes) { return st_buffer_new_on(ST_DEV_CPU, nbytes); }

st_buffer *st_buffer_new_on(int dev, size_t nbytes) {
    int ord;
    const st_device_ops *o = dev_ops(dev, &ord);
    if (!o) {
        st_error(ST_ERR_DEVICE, "no device number %d", dev);
        return NULL;
    }
    st_buffer *b = st_malloc(sizeof *b);
    if (!b) return NULL;
    if (o->alloc(ord, nbytes ? nbytes : 1, &b->data) != ST_OK) {
        st_free(b);
        return NULL;
    }
    b->refcnt = 1;
    b->device = dev;
    b->nbytes = nbytes;
    if (o->host_memory) {
        /* Poison: 0xFF bytes are NaN for every float type and -1 / true for integers. */
        if (st_rt.poison) memset(b->data, 0xFF, nbytes);
        st_stats_g.bytes_in_use += nbytes;
        if (st_stats_g.bytes_in_use > st_stats_g.bytes_peak) st_stats_g.bytes_peak = st_stats_g.bytes_in_use;
    }
    /* The observer hears of every device's memory, so that a garbage-collected host feels GPU
     * memory pressure too. */
    base_observe_alloc((int64_t)nbytes);
    return b;
}

void st_buffer_release(st_buffer *b) {
    if (!b || --b->refcnt > 0) return;
    int ord;
    const st_device_ops *o = dev_ops(b->device, &ord);
    if (o->host_memory) st_stats_g.bytes_in_use -= b->nbytes;
    base_observe_alloc(-(int64_t)b->nbytes);
    o->free(ord, b->data, b->nbytes ? b->nbytes : 1);
    free(b);
}

st_status dev_copy_bytes(st_buffer *dst, size_t doff, const st_buffer *src, size_t soff, size_t n) {
    if (n == 0) return ST_OK;
    int dord, sord;
    const st_device_ops *d = dev_ops(dst->device, &dord), *s = dev_ops(src->device, &sord);
    char *dp = (char *)dst->data + doff;
    const char *sp = (const char *)src->data + soff;
    if (d->host_memory && s->host_memory) {
        memcpy(dp, sp, n);
        return ST_OK;
    }
    if (s->host_memory) return d->copy_in(dord, dp, sp, n);
    if (d->host_memory) return s->copy_out(sord, dp, sp, n);
    if (dst->device == src->device) return d->copy(dord, dp, sp, n);
    void *tmp = st_malloc(n); /* between two devices: through the host */
    if (!tmp) return st_last_status();
    st_status r = s->copy_out(sord, tmp, sp, n);
    if (r == ST_OK) r = d->copy_in(dord, dp, tmp, n);
    st_free(tmp);
    return r;
}

st_status dev_host_bytes(const st_buffer *b, size_t off, size_t nbytes, const void **out, void **owned) {
    *owned = NULL;
    int ord;
    const st_device_ops *o = dev_ops(b->device, &ord);
    if (o->host_memory) {
        *out = (const char *)b->data + off;
        return ST_OK;
    }
    void *h = st_malloc(nbytes ? nbytes : 1);
    if (!h) return st_last_status();
    st_status s = o->copy_out(ord, h, (const char *)b->data + off, nbytes);
    if (s != ST_OK) {
        st_free(h);
        return s;
    }
    *out = h;
    *owned = h;
    return ST_OK;
}
