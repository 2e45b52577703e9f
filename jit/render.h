/*
 * render.h — internal: kernel IR (fuser/kir.h) to source text.
 *
 * One IR, several renderers: the C renderer (render_c.c) prints a kernel as one C11 function
 * `void KNAME(const st_kargs *a)` with OpenMP pragmas. A CUDA renderer prints the same
 * instruction list with the outer parallel loop mapped to the grid; it reuses the value
 * expression printer (render_value_expr) and the string builder, which know nothing about loops.
 */
#ifndef ST_RENDER_H
#define ST_RENDER_H

#include "../fuser/kir.h"

/* A growable string; oom is sticky (later appends do nothing). */
typedef struct render_buf {
    char *s;
    size_t n, cap;
    int oom;
} render_buf;
ST_INTERNAL void render_printf(render_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends the right-hand side of pure instruction i of k (a C expression of the instruction's
 * type, with operands named v<id> and buffers p<slot>). Shared by the C and CUDA renderers. */
ST_INTERNAL void render_value_expr(render_buf *b, const kir_kernel *k, int i);

/* Marks the instructions whose values reach a side effect (dead code is not printed, so
 * lowering may emit freely). live has k->n entries. */
ST_INTERNAL void render_mark_live(const kir_kernel *k, uint8_t *live);

/* The C source of k: an st_malloc'ed NUL-terminated string, or NULL (ST_ERR_OOM set). */
ST_INTERNAL char *render_c(const kir_kernel *k);

#endif
