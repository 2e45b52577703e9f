/*
 * fuzz_file.h — shared by the file-format harnesses: the input bytes as a file the library opens
 * by path (st_load, st_read_idx take paths). One file per process under $TMPDIR, rewritten for each
 * input; the CPU is the only device (a harness must not load a GPU driver).
 */
#ifndef FUZZ_FILE_H
#define FUZZ_FILE_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *fuzz_path(const uint8_t *data, size_t size) {
    static char path[256];
    if (!path[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/stitch-fuzz-%ld", t && *t ? t : "/tmp", (long)getpid());
        setenv("ST_DEVICE", "cpu", 1);
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f)) abort();
    return path;
}
#endif
