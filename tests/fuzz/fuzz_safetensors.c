/*
 * fuzz_safetensors.c — libFuzzer harness for the safetensors reader (io/safetensors.c, st_load_meta):
 * any byte string is either loaded (then every tensor is realized and read back, so a header that
 * promises more data than the file holds would be caught by AddressSanitizer) or refused with an
 * error; nothing else. Seeds: tests/fuzz/seeds/safetensors (make fuzz-files writes them).
 */
#include "stitch.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path(data, size);
    int n = 0, nmeta = 0;
    char **names = NULL, **keys = NULL, **values = NULL;
    st_tensor **ts = NULL;
    if (st_load_meta(path, &n, &names, &ts, &nmeta, &keys, &values) != ST_OK) {
        if (!st_last_error()[0]) abort();   /* a refusal always says why */
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (!names[i] || !ts[i]) abort();
        size_t bytes = (size_t)st_numel(ts[i]) * st_dtype_size(st_dtype_of(ts[i]));
        void *buf = malloc(bytes ? bytes : 1);
        if (!buf || st_to_host(ts[i], st_dtype_of(ts[i]), buf, bytes) != ST_OK) abort();
        free(buf);
    }
    for (int i = 0; i < nmeta; i++)
        if (!keys[i] || !values[i]) abort();
    st_free_loaded(n, names, ts);
    st_free_meta(nmeta, keys, values);
    return 0;
}
