/*
 * shape.c — shape arithmetic every layer shares: element counts, contiguous strides, printing.
 */
#include "base/base.h"

int64_t st_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

int st_view_extent_checked(int ndim, const int64_t *shape, const int64_t *strides, int64_t offset,
                            int64_t *lo, int64_t *hi) {
    int64_t l = offset, h = offset, ext;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 1) continue;   /* a size-1 dim's stride moves nothing */
        if (__builtin_mul_overflow(shape[i] - 1, strides[i], &ext)) return 0;
        if (ext < 0 ? __builtin_add_overflow(l, ext, &l) : __builtin_add_overflow(h, ext, &h)) return 0;
    }
    *lo = l;
    *hi = h;
    return 1;
}

int st_shape_numel_checked(int ndim, const int64_t *shape, size_t elem_size, int64_t *numel) {
    int64_t n = 1, bytes;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n)) return 0;
    if (__builtin_mul_overflow(n, (int64_t)(elem_size ? elem_size : 1), &bytes)) return 0;
    *numel = n;
    return 1;
}

void st_contig_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        /* saturates instead of overflowing: the product can only exceed int64 for a shape with a
         * 0 in it (numel 0, checked elsewhere), whose strides address nothing */
        if (i > 0 && __builtin_mul_overflow(s, shape[i], &s)) s = INT64_MAX;
    }
}

int st_is_contiguous_view(int ndim, const int64_t *shape, const int64_t *strides) {
    int64_t expect = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] == 1) continue;
        if (strides[i] != expect) return 0;
        expect *= shape[i];
    }
    return 1;
}

char *st_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    if (!buf || n == 0 || ndim < 0 || ndim > ST_MAX_DIMS || (ndim > 0 && !shape)) {
        st_error(ST_ERR_ARG, "shape_str: %s", !buf || n == 0 ? "no output buffer" : !shape && ndim > 0 ? "NULL shape" : "bad dim count");
        return NULL;
    }
    size_t k = 0;
    k += snprintf(buf + k, n - k, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}
