/*
 * test_views.c — a view never reaches outside its storage. Every view (reshape, permute, expand,
 * slice, select, the gradient's and einsum's internal views) is made by st_tensor_view
 * (runtime/tensor.c), which checks the first and last element that (shape, strides, offset)
 * reaches against the storage's element count (base/shape.c: st_view_extent_checked, overflow
 * included) and refuses one outside it with ST_ERR_SHAPE naming the shape, the strides and the
 * offset, instead of letting a kernel read or write out of bounds. The public view ops at their
 * edges (last index, empty slices at the end, expanded dims) are accepted and read right.
 *
 * Invariant: every test releases everything it made (bytes_in_use back where it started).
 */
#include "test.h"
#include "runtime/tensor.h"

#include <stdint.h>

#define SH(...) ((const int64_t[]){__VA_ARGS__})

/* base: (2, 3) = 0..5 in C order. */
static st_tensor *base23(void) {
    float v[6] = {0, 1, 2, 3, 4, 5};
    return st_from_data(ST_F32, 2, SH(2, 3), v);
}

/* Reads t (numel n <= 8) and compares with want. */
static void check_values(st_tensor *t, int n, const float *want) {
    float got[8];
    CHECK_MSG(t && st_to_host(t, ST_F32, got, (size_t)n * sizeof(float)) == ST_OK, "read: %s", st_last_error());
    for (int i = 0; t && i < n; i++) CHECK_NEAR(got[i], want[i], 0);
}

/* st_tensor_view(b, ...) must fail with ST_ERR_SHAPE and a message containing `words`. */
static void refused(st_tensor *b, int nd, const int64_t *shape, const int64_t *strides, int64_t offset,
                    const char *words) {
    st_clear_error();
    st_tensor *v = st_tensor_view(b, nd, shape, strides, offset);
    CHECK_MSG(v == NULL && st_last_status() == ST_ERR_SHAPE, "accepted (status %d): wanted \"%s\"",
              (int)st_last_status(), words);
    CHECK_MSG(strstr(st_last_error(), words), "message \"%s\" lacks \"%s\"", st_last_error(), words);
    st_release(v);
}

TEST(views_inside_the_storage_are_accepted) {
    st_stats_t s0;
    st_stats(&s0);
    st_tensor *b = base23();
    /* (2, 2) from element 1: 1 2 / 4 5 (the last element, 5, is the storage's last) */
    st_tensor *v = st_tensor_view(b, 2, SH(2, 2), SH(3, 1), 1);
    check_values(v, 4, (const float[]){1, 2, 4, 5});
    /* an expanded dim (stride 0) at the last element */
    st_tensor *e = st_tensor_view(b, 1, SH(3), SH(0), 5);
    check_values(e, 3, (const float[]){5, 5, 5});
    /* a view of a view is bounded by the storage, not by the view it came from */
    st_tensor *col = st_slice(b, 1, 0, 1, 1);   /* (2, 1): 0 / 3 */
    st_tensor *all = col ? st_tensor_view(col, 1, SH(6), SH(1), 0) : NULL;
    check_values(all, 6, (const float[]){0, 1, 2, 3, 4, 5});
    /* no element: nothing is reached, whatever the offset */
    st_tensor *none = st_tensor_view(b, 2, SH(0, 3), SH(3, 1), 6);
    CHECK(none && st_numel(none) == 0);
    /* the public ops at their edges */
    st_tensor *last = st_select(b, 0, -1), *tail = st_slice(b, 1, 3, 3, 1), *step = st_slice(b, 1, 0, 3, 2);
    check_values(last, 3, (const float[]){3, 4, 5});
    CHECK(tail && st_numel(tail) == 0);
    check_values(step, 4, (const float[]){0, 2, 3, 5});
    st_tensor *t = st_transpose(b, 0, 1), *c2 = st_select(b, 1, 2), *x = c2 ? st_expand(c2, 2, SH(4, 2)) : NULL;
    check_values(t, 6, (const float[]){0, 3, 1, 4, 2, 5});
    check_values(x, 8, (const float[]){2, 5, 2, 5, 2, 5, 2, 5});
    st_tensor *ts[] = {v, e, col, all, none, last, tail, step, t, c2, x, b};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) st_release(ts[i]);
    st_stats_t s1;
    st_stats(&s1);
    CHECK_EQ_INT(s1.bytes_in_use, s0.bytes_in_use);
}

TEST(views_outside_the_storage_are_refused) {
    st_stats_t s0;
    st_stats(&s0);
    st_tensor *b = base23();
    refused(b, 2, SH(2, 3), SH(3, 1), 3,
            "view: shape (2, 3) with strides (3, 1) and offset 3 reaches elements 3 to 8, outside its storage of 6 "
            "elements");
    refused(b, 1, SH(2), SH(1), -1, "offset -1 reaches elements -1 to 0");
    refused(b, 1, SH(2), SH(6), 0, "strides (6) and offset 0 reaches elements 0 to 6");
    refused(b, 1, SH(3), SH(-1), 1, "reaches elements -1 to 1");
    refused(b, 2, SH(1, 7), SH(9, 1), 0, "reaches elements 0 to 6");   /* size-1 dim: its stride moves nothing */
    refused(b, 1, SH(3), SH(INT64_MAX), 0, "reaches elements whose index overflows");
    refused(b, 2, SH(3, 2), SH(INT64_MAX / 2 + 1, 1), 0, "reaches elements whose index overflows");   /* 2 * 2^62 */
    refused(b, 1, SH(1), SH(1), 6, "offset 6 reaches elements 6 to 6");
    /* the runtime goes on: b reads right */
    check_values(b, 6, (const float[]){0, 1, 2, 3, 4, 5});
    st_release(b);
    st_stats_t s1;
    st_stats(&s1);
    CHECK_EQ_INT(s1.bytes_in_use, s0.bytes_in_use);
}

int main(void) {
    st_set_default_device("cpu");
    RUN(views_inside_the_storage_are_accepted);
    RUN(views_outside_the_storage_are_refused);
    st_shutdown();
    TEST_MAIN_END();
}
