/* c_example.c — the C API in a few lines: record, fuse, read back.
 * Build: cc -Iinclude examples/c_example.c build/libstitch.a -lz -lm -ldl -pthread -o c_example */
#include <stdio.h>
#include "stitch.h"

int main(void) {
    int64_t shape[2] = {2, 3};
    float data[6] = {1, 2, 3, 4, 5, 6};
    st_tensor *x = st_from_data(ST_F32, 2, shape, data);
    st_tensor *y = st_mul_s(x, 2);             /* recorded, not computed */
    st_tensor *e = st_exp(y);
    int axis = 1;
    st_tensor *s = st_sum(e, 1, &axis, 0);     /* exp(2x) summed over rows: one fused kernel */
    float out[2];
    if (!s || st_to_host(s, ST_F32, out, sizeof out) != ST_OK) { /* the sync point */
        fprintf(stderr, "error: %s\n", st_last_error());
        return 1;
    }
    printf("row sums of exp(2x): %g %g\n", out[0], out[1]);
    st_tensor *bad = st_add(x, s);             /* (2, 3) + (2): an immediate, named error */
    if (!bad) printf("error, as expected: %s\n", st_last_error());
    st_release(s);
    st_release(e);
    st_release(y);
    st_release(x);
    st_shutdown();
    return 0;
}
