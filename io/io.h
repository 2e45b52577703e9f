/*
 * io.h — internal: the file layer. io/ owns the file formats stitch reads and writes: safetensors
 * checkpoints (safetensors.c: st_save, st_load and their metadata forms, with their own JSON header
 * parser) and IDX files (idx.c: st_read_idx, gzip or not, through zlib). docs/files.md documents
 * both. It sits on the runtime (it makes and reads tensors through it) and nothing in the library
 * calls it but the public API; its functions are declared in include/stitch.h.
 *
 * Invariants: a malformed file is an ST_ERR_IO error naming what is wrong, never a crash or a read
 * out of bounds; a save goes to a temporary file in the same directory, synced and renamed over the
 * path, so a failure never damages an existing file.
 */
#ifndef ST_IO_H
#define ST_IO_H

#include "runtime/tensor.h"

/* Test hook: when set, st_load calls it with the path once the file is open and its size known,
 * before anything is read (tests truncate the file there: another process cutting it while we
 * read). NULL in normal use. */
ST_INTERNAL extern void (*io_load_test_hook)(const char *path);

#endif
