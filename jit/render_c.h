/*
 * render_c.h — internal to the C renderer: what render_c.c (kernels, lanes, matmuls) and
 * render_c_cols.c (column-blocked reduction loops) share.
 */
#ifndef ST_RENDER_C_H
#define ST_RENDER_C_H

#include "jit/render.h"

#include <stdbool.h>

#define PAR_THRESHOLD 32768   /* elements of work below which a kernel runs on one thread */
#define RED_FBLOCK 8          /* values a float block adds before its double sum (render_c.c "Float blocks") */

/* How render_range prints the current body. */
typedef struct body_ctx {
    const kir_kernel *k;
    const uint8_t *live;
    uint8_t *laned;         /* per instruction: an accumulator updated lane-wise right now */
    int split;              /* inside a full reduction's one row (KIR_LOOP_ROW): the loops over
                             * the row's elements run in parallel when v<split_work> is large */
    int split_work;
    const uint8_t *wide;    /* per instruction, or NULL: a narrow load that the lane loop reads
                             * from its widened copy v<i>_w[l_] (render_lanes, widen_narrow_loads) */
    int fb_end;             /* inside a lane loop with float blocks: its KI_ENDLOOP (else 0) */
} body_ctx;

/* Prints the live instructions in [from, to) at the given depth (LOOP/IF bodies nest). */
ST_INTERNAL void render_range(sbuf *b, body_ctx *c, int from, int to, int depth);
/* Is accumulator update `in` of k a float-block one: a sum of f32 values (its KI_ACC marked by the
 * lowering) whose value is an f32-to-f64 conversion? (render_c.c "Float blocks") */
ST_INTERNAL bool fblock_upd(const kir_kernel *k, const kir_ins *in);

/* ---- column-blocked reduction loops (render_c_cols.c) ---- */
/* Is value p defined before the loop at i (or a parameter or literal, printed at the top)? */
ST_INTERNAL bool col_outside(const kir_kernel *k, int p, int i);
/* Can the KIR_LOOP_COLS (or KIR_LOOP_BLOCK) loop [i, e] be printed column-blocked? */
ST_INTERNAL bool col_loop_ok(const body_ctx *c, int i, int e);
/* Prints it so (par: its blocks of outputs run in parallel). */
ST_INTERNAL void render_col_loop(sbuf *b, body_ctx *c, int i, int e, int depth, bool par);

#endif
