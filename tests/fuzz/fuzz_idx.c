/*
 * fuzz_idx.c — libFuzzer harness for the IDX reader (io/idx.c, st_read_idx), plain and gzip: any
 * byte string is either read (then realized and copied out whole) or refused with an error.
 */
#include "stitch.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path(data, size);
    st_tensor *t = st_read_idx(path);
    if (!t) {
        if (!st_last_error()[0]) abort();
        return 0;
    }
    size_t bytes = (size_t)st_numel(t) * st_dtype_size(st_dtype_of(t));
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf || st_to_host(t, st_dtype_of(t), buf, bytes) != ST_OK) abort();
    free(buf);
    st_release(t);
    return 0;
}
