/*
 * render_c_cols.c — the C renderer's column-blocked reduction loops (KIR_LOOP_COLS and the serial
 * KIR_LOOP_BLOCK): rows outer, a block's outputs inner, pieces, two rows a step, float blocks of
 * rows, row blocks. render_range (render_c.c) calls col_loop_ok and render_col_loop; docs/fusion.md "Column
 * reductions".
 */
#include "jit/render_c.h"

#include <math.h>

/* ---- column-blocked reduction loops (KIR_LOOP_COLS) ----
 * A column reduction's outer loop runs over outputs o whose inner loops read element rr of o at
 * rr * nout + o: printed as written, every inner loop walks a column at the row stride (a cache
 * miss per element). Its iterations are independent, so the loop is printed interchanged: blocks
 * of adjacent outputs in parallel (the outputs split evenly over the threads, at most COL_BLOCK
 * per block); in a block, each piece of the body (the straight code between inner loops, and
 * each inner loop) runs for the block's outputs in turn, an inner loop as
 * `for rr { for o in block { body } }`: every rr reads a contiguous slice, which vectorizes.
 * Values that cross pieces (accumulators, per-output values such as a mean) live in per-block
 * arrays `v<i>_a[COL_BLOCK]`. Each output still sees exactly its own sequence of operations (only
 * interleaved with other outputs'), so a sum adds its rows in order, serially (f32 ones in float
 * blocks, below; with many rows, in row blocks, below): the same bits whatever the thread count
 * or block size. Loops of fewer than COL_MIN outputs (`x:sum(1)` of an (n, 3) tensor) run as
 * written (partial lanes). */
#define COL_BLOCK 1024  /* most outputs per block (the arrays are on the stack) */
/* A serial (KIR_LOOP_BLOCK) loop's block size. A parallel loop's blocks split the outputs evenly
 * over the threads up to COL_BLOCK: each thread then reads one run of adjacent columns per row
 * (2 KB of a 1024-column f32 row on 2 threads). Capped at 256, the same threads read two 1 KB
 * runs per row in two sweeps: a layernorm weight/bias gradient's column sums (4096 x 1024) took
 * 3.7-4.3 ms of CPU time against 3.0-3.5 (bench/NOTES.md). */
#define COL_BLOCK_SERIAL 256
#define COL_MIN 8

/* Pure index arithmetic and math (what may be printed outside the outputs' loop, or recomputed). */
static bool col_invariant_op(kir_opcode o) {
    return (o >= KI_IADD && o <= KI_SEL) || o == KI_OP || o == KI_CVT || o == KI_ROUND;
}

/* Is value p defined before the loop at i (or a parameter or literal, printed at the top)? */
bool col_outside(const kir_kernel *k, int p, int i) {
    kir_opcode o = (kir_opcode)k->ins[p].op;
    return p < i || o == KI_IPARAM || o == KI_FPARAM || o == KI_ICONST || o == KI_FCONST;
}

/* Does every operand of `in` come from before the loop at i, from [lo, hi), or from a value
 * marked in `also` (NULL: none)? */
static bool col_operands_from(const kir_kernel *k, const kir_ins *in, int i, int lo, int hi, const uint8_t *also) {
    unsigned m = kir_operand_mask(in);
    const int32_t ops[4] = {in->a, in->b, in->c, in->d};
    for (int j = 0; j < 4; j++)
        if ((m >> j & 1) && !col_outside(k, ops[j], i) && !(ops[j] >= lo && ops[j] < hi) && !(also && also[ops[j]]))
            return false;
    return true;
}

/* Is `in` (of a piece whose loop indices are [pre, from)) printed once before the outputs' loop:
 * an invariant op whose operands come from before the loop at i, from [pre, from) or from values
 * already so printed (`hoisted`)? col_piece prints them; col_rows2_ok asks what it would. */
static bool col_hoistable(const kir_kernel *k, const kir_ins *in, int i, int pre, int from, const uint8_t *hoisted) {
    return col_invariant_op((kir_opcode)in->op) && col_operands_from(k, in, i, pre, from, hoisted);
}

/* The loop nested in inner loop j (ending at e2) of a column-blocked loop at i, or -1 when j's
 * body is straight code; -2 when it is neither (see col_loop_ok). */
static int col_nested(const body_ctx *c, int i, int j, int e2) {
    const kir_kernel *k = c->k;
    int nest = -1;
    for (int q = j + 1; q < e2; q++) {
        const kir_ins *in = &k->ins[q];
        if (!c->live[q]) continue;
        if (in->op == KI_IF || in->op == KI_ENDIF || in->op == KI_ACC) return -2;
        if (in->op == KI_LOOP) {
            int e3 = render_loop_end(k, q);
            if (nest >= 0 || in->imm != KIR_LOOP_SERIAL || !col_outside(k, in->a, i) || e3 != e2 - 1) return -2;
            for (int r = j + 1; r < q; r++) /* before it: index arithmetic of j alone */
                if (c->live[r] && (!col_invariant_op((kir_opcode)k->ins[r].op) ||
                                   !col_operands_from(k, &k->ins[r], i, j, r, NULL)))
                    return -2;
            nest = q;
            q = e3;
        }
    }
    return nest;
}

/* Can the loop [i, e] be interchanged? Its body: straight-line code (no IF) and serial inner
 * loops with counts defined outside the loop, each with a straight-line body or a perfectly
 * nested serial loop with one (a reduction's row over two runs of dims: outer, then inner). */
bool col_loop_ok(const body_ctx *c, int i, int e) {
    const kir_kernel *k = c->k;
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &k->ins[j];
        if (!c->live[j]) continue;
        if (in->op == KI_IF || in->op == KI_ENDIF || in->op == KI_ENDLOOP) return false;
        if (in->op != KI_LOOP) continue;
        int e2 = render_loop_end(k, j);
        if (in->imm != KIR_LOOP_SERIAL || e2 >= e || !col_outside(k, in->a, i) || col_nested(c, i, j, e2) == -2)
            return false;
        j = e2;
    }
    return true;
}

/* Is value p read by a live instruction in [from, to)? */
static bool col_used(const body_ctx *c, int p, int from, int to) {
    for (int q = from; q < to; q++) {
        const kir_ins *in = &c->k->ins[q];
        if (!c->live[q]) continue;
        unsigned m = kir_operand_mask(in);
        const int32_t ops[4] = {in->a, in->b, in->c, in->d};
        for (int j = 0; j < 4; j++)
            if ((m >> j & 1) && ops[j] == p) return true;
    }
    return false;
}

/* Does the live range [from, to) update accumulator p? */
static bool col_updates(const body_ctx *c, int p, int from, int to) {
    for (int q = from; q < to; q++) {
        const kir_ins *in = &c->k->ins[q];
        if (c->live[q] && ((in->op == KI_ACCUPD && in->a == p) || (in->op == KI_ARGUPD && (in->a == p || in->b == p))))
            return true;
    }
    return false;
}

/* One piece [from, to) of the loop at i, for output v<i>_0 + v<i>_l: the output index, the
 * cross-piece values it reads (accumulators it updates are mutable and written back), the
 * piece, then the values it defines for later pieces. xp[p]: value p crosses pieces. The piece's
 * values that no output changes (an inner loop's element index unravelled, a row offset: every
 * operand from before the loop at i, from [pre, from) — the piece's loop indices and the index
 * arithmetic printed with them — or itself such a value) are printed once before the outputs'
 * loop (GCC keeps a 64-bit division by a parameter inside it).
 * Cross-piece values that are index arithmetic of the output (xp 2: an output's store index) are
 * recomputed where read, not kept in arrays: read back from an array, GCC sees no affine index and
 * stores through a scatter. rc[p]: p is such arithmetic (or feeds one). */
static void col_piece(sbuf *b, body_ctx *c, int i, int e, const uint8_t *xp, const uint8_t *rc, int pre, int from,
                      int to, int depth, int rows2) {
    const kir_kernel *k = c->k;
    uint8_t *live = st_malloc((size_t)k->n * 3);
    if (!live) {
        b->oom = 1;
        return;
    }
    uint8_t *need = live + k->n, *hoisted = need + k->n;
    memcpy(live, c->live, (size_t)k->n);
    memset(need, 0, (size_t)k->n * 2);
    for (int p = from - 1; p > i; p--) {
        if (!(xp[p] == 2 && col_used(c, p, from, to)) && !need[p]) continue;
        need[p] = 1;
        const kir_ins *in = &k->ins[p];
        unsigned m = kir_operand_mask(in);
        const int32_t ops[4] = {in->a, in->b, in->c, in->d};
        for (int j = 0; j < 4; j++)
            if ((m >> j & 1) && ops[j] > i && ops[j] < from && rc[ops[j]]) need[ops[j]] = 1;
    }
    for (int q = from; q < to && rows2 < 0; q++) {
        const kir_ins *in = &k->ins[q];
        if (!live[q] || xp[q] || !col_hoistable(k, in, i, pre, from, hoisted)) continue;
        render_value_line(b, k, q, depth);
        live[q] = 0;   /* printed: not again inside */
        hoisted[q] = 1;
    }
    body_ctx pc = *c;
    pc.live = live;
    c = &pc;
    render_indent(b, depth);
    sbuf_printf(b, "for (int64_t v%d_l = 0; v%d_l < v%d_m; v%d_l++) {\n", i, i, i, i);
    render_indent(b, depth + 1);
    sbuf_printf(b, "const int64_t v%d = v%d_0 + v%d_l;\n", i, i, i);
    for (int p = i + 1; p < from; p++)
        if (need[p]) render_value_line(b, k, p, depth + 1);
    for (int p = i + 1; p < from; p++) {
        if (xp[p] != 1 || !col_used(c, p, from, to)) continue;
        bool upd = col_updates(c, p, from, to);
        render_indent(b, depth + 1);
        if (c->laned[p] == 3)   /* a float block's sum (render_col_loop) */
            sbuf_printf(b, "float v%d = v%d_fa[v%d_l];\n", p, p, i);
        else
            sbuf_printf(b, "%s%s v%d = v%d_a[v%d_l];\n", upd ? "" : "const ", kir_type_cname[k->ins[p].type], p, p,
                        i);
    }
    if (rows2 >= 0) { /* two rows of the inner loop v<rows2>, in order, the accumulators held */
        for (int r = 0; r < 2; r++) {
            render_indent(b, depth + 1);
            sbuf_printf(b, "{\n");
            render_indent(b, depth + 2);
            sbuf_printf(b, "const int64_t v%d = v%d_u + %d;\n", rows2, rows2, r);
            render_range(b, c, from, to, depth + 2);
            render_indent(b, depth + 1);
            sbuf_printf(b, "}\n");
        }
    } else {
        render_range(b, c, from, to, depth + 1);
    }
    for (int p = i + 1; p < e; p++) {
        bool mine = p >= from && p < to;
        if (xp[p] == 1 && (mine || (p < from && col_used(c, p, from, to) && col_updates(c, p, from, to)))) {
            render_indent(b, depth + 1);
            sbuf_printf(b, "v%d_%s[v%d_l] = v%d;\n", p, c->laned[p] == 3 ? "fa" : "a", i, p);
        }
    }
    render_indent(b, depth);
    sbuf_printf(b, "}\n");
    st_free(live);
}

/* Float blocks in a column-blocked loop (render_c.c "Float blocks"): an accumulator of the block's
 * outputs (a double crossing pieces, xp 1) whose every live update in [i, e] is a float-block one
 * inside inner loop j (ending at e2), and which nothing else in loop j reads, adds its rows in
 * float over blocks of RED_FBLOCK rows, from 0, into v<p>_fa[], each block's sums then added
 * into v<p>_a[]: the column sums' double conversion and add per element become a float add
 * (a 4096 x 1024 column sum on one thread, in a harness: 544-568 -> 392-432 us). Marks them
 * laned 3 (col_piece and render_range print them so); returns how many. */
static int col_fblocks(body_ctx *c, int i, int e, const uint8_t *xp, int j, int e2) {
    const kir_kernel *k = c->k;
    int n = 0;
    for (int p = i + 1; p < j; p++) {
        if (xp[p] != 1 || k->ins[p].op != KI_ACC || k->ins[p].type != KT_F64) continue;
        bool ok = false;
        for (int q = i + 1; q < e; q++) {
            const kir_ins *in = &k->ins[q];
            if (!c->live[q]) continue;
            if (in->op == KI_ACCUPD && in->a == p) {   /* its conversion in loop j too: in scope there */
                ok = q > j && q < e2 && fblock_upd(k, in) && in->b > j && in->b < e2;
                if (!ok) break;
                continue;
            }
            if (q > j && q < e2 && col_used(c, p, q, q + 1)) { ok = false; break; }
        }
        if (ok) {
            c->laned[p] = 3;
            n++;
        }
    }
    return n;
}

/* May inner loop j (ending at e2; a straight body) of the column-blocked loop at i run two rows
 * per step of the outputs' loop? Its body updates accumulators, defines nothing later pieces read
 * (only accumulators cross, loaded before and stored after the two rows), computes nothing
 * costly (exp, erf...: the loop is then bound by its arithmetic, not by the accumulators' loads
 * and stores, and the body would be printed twice for nothing), and every value of it that would
 * be printed once before the outputs' loop is plain index arithmetic (the two rows compute theirs
 * inside it: no division there, which GCC would leave per output). */
static bool col_rows2_ok(const body_ctx *c, int i, const uint8_t *xp, int j, int e2) {
    const kir_kernel *k = c->k;
    uint8_t *hoisted = st_calloc((size_t)k->n, 1);   /* col_piece's choice (col_hoistable), as it makes it */
    bool ok = hoisted != NULL, any_acc = false;
    for (int q = j + 1; q < e2 && ok; q++) {
        const kir_ins *in = &k->ins[q];
        if (!c->live[q]) continue;
        kir_opcode o = (kir_opcode)in->op;
        ok = !xp[q] && !(o == KI_OP && st_ops[in->sop].cost == COST_HIGH);   /* compute-bound: no gain */
        any_acc |= o == KI_ACCUPD;
        if (col_hoistable(k, in, i, j, j + 1, hoisted)) {
            hoisted[q] = 1;
            ok = ok && (o == KI_IADD || o == KI_ISUB || o == KI_IMUL);
        }
    }
    st_free(hoisted);
    return ok && any_acc;
}

/* Inner loop j (ending at e2, no nested loop) of the column-blocked loop at i with float-block
 * accumulators (col_fblocks marked them): blocks of RED_FBLOCK rows, each zeroing the float sums,
 * running its rows (two at a time when col_rows2_ok, then the odd one) and adding the float sums
 * into the double ones; the marks are cleared after. lo, hi: its rows (C expressions). */
static void render_col_fblocks(sbuf *b, body_ctx *c, int i, int e, const uint8_t *xp, const uint8_t *rc, int j,
                               int e2, int depth, const char *lo, const char *hi) {
    const bool rows2 = col_rows2_ok(c, i, xp, j, e2);
    render_indent(b, depth);
    sbuf_printf(b, "for (int64_t v%d_b = %s; v%d_b < %s; v%d_b += %d) { /* float blocks of rows */\n", j, lo, j, hi, j,
                RED_FBLOCK);
    render_indent(b, depth + 1);
    sbuf_printf(b, "const int64_t v%d_e = %s - v%d_b > %d ? v%d_b + %d : %s;\n", j, hi, j, RED_FBLOCK, j,
                RED_FBLOCK, hi);
    for (int p = i + 1; p < j; p++) {
        if (c->laned[p] != 3) continue;
        render_indent(b, depth + 1);
        sbuf_printf(b, "float v%d_fa[%d];\n", p, COL_BLOCK);
        render_indent(b, depth + 1);
        sbuf_printf(b, "for (int64_t l_ = 0; l_ < v%d_m; l_++) v%d_fa[l_] = 0.0f;\n", i, p);
    }
    const int outer_fb = c->fb_end;
    c->fb_end = e2;
    if (rows2) {
        render_indent(b, depth + 1);
        sbuf_printf(b, "for (int64_t v%d_u = v%d_b; v%d_u + 1 < v%d_e; v%d_u += 2) {\n", j, j, j, j, j);
        col_piece(b, c, i, e, xp, rc, j, j + 1, e2, depth + 2, j);
        render_indent(b, depth + 1);
        sbuf_printf(b, "}\n");
        render_indent(b, depth + 1);
        sbuf_printf(b, "for (int64_t v%d = v%d_e - (v%d_e - v%d_b) %% 2; v%d < v%d_e; v%d++) {\n", j, j, j, j, j, j, j);
    } else {
        render_indent(b, depth + 1);
        sbuf_printf(b, "for (int64_t v%d = v%d_b; v%d < v%d_e; v%d++) {\n", j, j, j, j, j);
    }
    col_piece(b, c, i, e, xp, rc, j, j + 1, e2, depth + 2, -1);
    render_indent(b, depth + 1);
    sbuf_printf(b, "}\n");
    c->fb_end = outer_fb;
    for (int p = i + 1; p < j; p++) {
        if (c->laned[p] != 3) continue;
        c->laned[p] = 0;
        render_indent(b, depth + 1);
        sbuf_printf(b, "for (int64_t l_ = 0; l_ < v%d_m; l_++) v%d_a[l_] = om_add(v%d_a[l_], (double)v%d_fa[l_]);\n", i,
                    p, p, p);
    }
    render_indent(b, depth);
    sbuf_printf(b, "}\n");
}

/* Declares the per-block arrays of the values crossing pieces of the column-blocked loop at i. */
static void col_arrays(sbuf *b, const body_ctx *c, int i, int e, const uint8_t *xp, int depth) {
    for (int p = i + 1; p < e; p++) {
        if (xp[p] != 1) continue;
        render_indent(b, depth);
        sbuf_printf(b, "%s v%d_a[%d];\n", kir_type_cname[c->k->ins[p].type], p, COL_BLOCK);
    }
}

/* Prints the pieces of the column-blocked loop at i (ending at e) in [from, to), for the block's
 * outputs: each inner loop over the rows as `for rr { for o in block }` (float blocks, two rows a
 * step or one), each run of straight code once per output. lo, hi: the rows an inner loop runs
 * (C expressions), or NULL for all of them (0 to its count). */
static void col_pieces(sbuf *b, body_ctx *c, int i, int e, const uint8_t *xp, const uint8_t *rc, int from, int to,
                       int depth, const char *lo, const char *hi) {
    const kir_kernel *k = c->k;
    for (int j = from; j < to;) {
        if (k->ins[j].op == KI_LOOP) { /* an inner loop: rows outer, the block's outputs inner */
            int e2 = render_loop_end(k, j);
            char n0[24], n1[24];
            snprintf(n0, sizeof n0, "%s", lo ? lo : "0");
            snprintf(n1, sizeof n1, "v%d", k->ins[j].a);
            if (hi) snprintf(n1, sizeof n1, "%s", hi);
            if (c->live[j] && col_nested(c, i, j, e2) < 0 && col_fblocks(c, i, e, xp, j, e2)) {
                render_col_fblocks(b, c, i, e, xp, rc, j, e2, depth, n0, n1);
            } else if (c->live[j]) {
                int q = col_nested(c, i, j, e2);
                char start[96];
                snprintf(start, sizeof start, "%s", n0);
                if (q < 0 && col_rows2_ok(c, i, xp, j, e2)) {
                    /* two rows at a time: each output's accumulators are loaded and stored once per
                     * two rows (the same adds in the same order); the loop below takes the odd last row */
                    render_indent(b, depth);
                    sbuf_printf(b, "for (int64_t v%d_u = %s; v%d_u + 1 < %s; v%d_u += 2) {\n", j, n0, j, n1, j);
                    col_piece(b, c, i, e, xp, rc, j, j + 1, e2, depth + 1, j);
                    render_indent(b, depth);
                    sbuf_printf(b, "}\n");
                    if (lo)
                        snprintf(start, sizeof start, "%s - (%s - %s) %% 2", n1, n1, n0);
                    else
                        snprintf(start, sizeof start, "%s - %s %% 2", n1, n1);
                }
                render_indent(b, depth);
                sbuf_printf(b, "for (int64_t v%d = %s; v%d < %s; v%d++) {\n", j, start, j, n1, j);
                if (q >= 0) { /* the nested loop: its index arithmetic, then its body per output */
                    for (int r = j + 1; r < q; r++)
                        if (c->live[r]) render_value_line(b, k, r, depth + 1);
                    render_indent(b, depth + 1);
                    sbuf_printf(b, "for (int64_t v%d = 0; v%d < v%d; v%d++) {\n", q, q, k->ins[q].a, q);
                    col_piece(b, c, i, e, xp, rc, j, q + 1, e2 - 1, depth + 2, -1);
                    render_indent(b, depth + 1);
                    sbuf_printf(b, "}\n");
                } else {
                    col_piece(b, c, i, e, xp, rc, j, j + 1, e2, depth + 1, -1);
                }
                render_indent(b, depth);
                sbuf_printf(b, "}\n");
            }
            j = e2 + 1;
        } else { /* straight code up to the next inner loop */
            int end = j;
            while (end < to && k->ins[end].op != KI_LOOP) end++;
            bool any = false;
            for (int q = j; q < end; q++) {
                kir_opcode o = (kir_opcode)k->ins[q].op;
                any |= c->live[q] && o != KI_IPARAM && o != KI_FPARAM && o != KI_ICONST && o != KI_FCONST;
            }
            if (any) col_piece(b, c, i, e, xp, rc, j, j, end, depth, -1);
            j = end;
        }
    }
}

/* The work estimate whose size above PAR_THRESHOLD runs the column loop L in parallel. */
static int col_work(const kir_ins *L) { return L->b >= 0 ? L->b : L->a; }

/* Prints the start of the declaration of a parallel column loop's block size v<i>_s (n outputs):
 * the outputs split evenly over the threads, a multiple of 16, 16..COL_BLOCK each (long
 * contiguous slices per row; it never changes a result, each output is on its own); with `rows`,
 * all n outputs when the row blocks' partials v<i>_pb exist. The caller ends the line. */
static void col_block_size(sbuf *b, int i, int n, bool rows) {
    sbuf_printf(b, "const int64_t v%d_t = (v%d + a->nthreads - 1) / a->nthreads, v%d_s = ", i, n, i);
    if (rows) sbuf_printf(b, "v%d_pb ? v%d : ", i, n);
    sbuf_printf(b, "v%d_t < 16 ? 16 : v%d_t > %d ? %d : (v%d_t + 15) / 16 * 16", i, i, COL_BLOCK, COL_BLOCK, i);
}

/* Opens the loop over blocks of the column-blocked loop at i's outputs (at depth; the caller
 * prints the pieces at depth + 1 and closes it): each block's first output v<i>_0 and size
 * v<i>_m, and the arrays of the values crossing pieces. par: the blocks run in parallel
 * (col_block_size), else serially, COL_BLOCK_SERIAL outputs each (a KIR_LOOP_BLOCK loop). */
static void col_blocks_open(sbuf *b, const body_ctx *c, int i, int e, const uint8_t *xp, int depth, bool par) {
    const kir_kernel *k = c->k;
    const int n = k->ins[i].a;
    render_indent(b, depth);
    if (par) {
        col_block_size(b, i, n, false);
        sbuf_printf(b, ";\n");
        render_indent(b, depth);
        sbuf_printf(b, "#pragma omp parallel for if (v%d > %d) num_threads(a->nthreads) schedule(static)\n",
                    col_work(&k->ins[i]), PAR_THRESHOLD);
    } else {
        sbuf_printf(b, "const int64_t v%d_s = %d;\n", i, COL_BLOCK_SERIAL);
    }
    render_indent(b, depth);
    sbuf_printf(b, "for (int64_t v%d_q = 0; v%d_q < (v%d + v%d_s - 1) / v%d_s; v%d_q++) {\n", i, i, n, i, i, i);
    render_indent(b, depth + 1);
    sbuf_printf(b, "const int64_t v%d_0 = v%d_q * v%d_s, v%d_m = v%d - v%d_0 < v%d_s ? v%d - v%d_0 : v%d_s;\n", i, i,
                i, i, n, i, i, n, i, i);
    col_arrays(b, c, i, e, xp, depth + 1);
}

/* ---- row blocks ----
 * A column-blocked loop splits its outputs over the threads: with few outputs (a bias gradient of
 * 128 features) few threads work, and with 1024 of them on 2 threads each thread reads 2 KB runs
 * of every 4 KB row, which the hardware prefetchers (trained per 4 KB page) follow worse than whole
 * rows: a layernorm weight/bias gradient (4096 x 1024) read its 33.5 MB at ~37 GB/s where the row
 * kernel before it moves ~52. When the body is straight code, one inner loop over the rows whose
 * accumulators are all float-block sums (render_col_fblocks) from 0, and straight code after
 * (`col_split_loop`), and there are 8..COL_BLOCK outputs, at least 2 * ROWS_SPLIT rows and
 * more than PAR_THRESHOLD elements, the rows are cut into blocks of a size that depends on the row count
 * only (ROWS_SPLIT, or more so that there are at most ROWS_NBLOCKS, a multiple of RED_FBLOCK),
 * which run in parallel, each over all outputs, into per-block double partial sums in a
 * malloc'ed array; the last block to finish adds each output's partials in block order and runs
 * the code after the loop (the epilogue). Float blocks fall on the same rows as in the serial
 * loop; only the double additions are grouped differently (per row block, then the blocks), so
 * the f32 result is the serial one's but where a double sum's rounding crosses a float's, which
 * with cancellation can be far (a column of 2^60, ones, -2^60, ones: the serial order keeps the
 * ones after -2^60, the blocks lose them); deterministic, whatever the thread count. The row
 * blocks' count depends on the rows only: a machine with many more threads than blocks (1024
 * rows: 4) runs fewer tasks than the column-blocked loop would. Without the memory, the
 * column-blocked loop. */
#define ROWS_SPLIT 256
#define ROWS_NBLOCKS 64

/* Is the column-blocked loop at i (ending at e) one to print in row blocks? Returns its inner
 * loop, or -1. */
static int col_split_loop(body_ctx *c, int i, int e, const uint8_t *xp) {
    const kir_kernel *k = c->k;
    int j = -1;
    for (int q = i + 1; q < e; q++) {
        const kir_ins *in = &k->ins[q];
        if (!c->live[q]) continue;
        if (in->op == KI_LOOP) {
            if (j >= 0) return -1;
            j = q;
            q = render_loop_end(k, q);
        } else if (in->op == KI_ARGUPD || (in->op == KI_ACC && j >= 0) ||
                   (j < 0 && (in->op == KI_STORE || in->op == KI_ACCUPD))) {
            return -1;
        }
    }
    if (j < 0) return -1;
    const int e2 = render_loop_end(k, j);
    if (col_nested(c, i, j, e2) != -1) return -1;
    int nacc = 0;
    for (int p = i + 1; p < j; p++) {
        const kir_ins *in = &k->ins[p];
        if (!c->live[p] || in->op != KI_ACC) continue;
        const kir_ins *init = &k->ins[in->a];
        if (xp[p] != 1 || init->op != KI_FCONST || init->fimm != 0.0 || signbit(init->fimm)) return -1;
        nacc++;
    }
    int nfb = col_fblocks(c, i, e, xp, j, e2);   /* marks them: cleared below */
    for (int p = i + 1; p < j; p++)
        if (c->laned[p] == 3) c->laned[p] = 0;
    return nacc > 0 && nfb == nacc ? j : -1;
}

/* Prints the column-blocked loop at i (ending at e; inner loop j, col_split_loop) with row
 * blocks, and opens the `if` whose else-branch is the loop as written (fewer than COL_MIN
 * outputs). One loop of tasks serves both forms, each piece printed once: a task is a block of
 * rows for a block of outputs. Row blocks (their partials' memory allocated): every task is one
 * block of rows for all outputs; it stores its sums as partials, and the task that finishes last
 * (a counter, decremented with acquire-release order: it sees every other task's partials) adds
 * each output's partials in block order and runs the code after the inner loop. Else the
 * column-blocked loop: all rows for a block of outputs a task (the blocks split over the
 * threads), the code after the inner loop at once. */
static void render_col_split(sbuf *b, body_ctx *c, int i, int e, const uint8_t *xp, const uint8_t *rc, int j,
                             int depth) {
    const kir_kernel *k = c->k;
    const kir_ins *L = &k->ins[i];
    const int n = L->a, r = k->ins[j].a, e2 = render_loop_end(k, j);
    int nacc = 0;
    for (int p = i + 1; p < j; p++) nacc += c->live[p] && k->ins[p].op == KI_ACC;
    render_indent(b, depth);
    sbuf_printf(b, "const int64_t v%d_rs = (v%d + %d) / %d < %d ? %d : ((v%d + %d) / %d + %d) / %d * %d;\n", i, r,
                ROWS_NBLOCKS - 1, ROWS_NBLOCKS, ROWS_SPLIT, ROWS_SPLIT, r, ROWS_NBLOCKS - 1, ROWS_NBLOCKS,
                RED_FBLOCK - 1, RED_FBLOCK, RED_FBLOCK);
    render_indent(b, depth);
    sbuf_printf(b, "double *v%d_pb = v%d >= %d && v%d <= %d && v%d >= %d && v%d * v%d > %d ? "
                   "malloc(((size_t)((v%d + v%d_rs - 1) / v%d_rs * v%d) * %d + 1) * sizeof(double)) : NULL;\n",
                i, n, COL_MIN, n, COL_BLOCK, r, 2 * ROWS_SPLIT, n, r, PAR_THRESHOLD, r, i, i, n, nacc);
    render_indent(b, depth);
    sbuf_printf(b, "if (v%d_pb || v%d >= %d) { /* row blocks, or column-blocked: blocks of outputs, rows outer */\n",
                i, n, COL_MIN);
    render_indent(b, depth + 1);
    /* one task of all rows for each block of outputs without row blocks (also for 0 rows: the
     * code after the loop still writes the outputs) */
    sbuf_printf(b, "const int64_t v%d_nr = v%d_pb ? v%d_rs : v%d, v%d_nb = v%d_pb ? (v%d + v%d_nr - 1) / v%d_nr : 1;\n",
                i, i, i, r, i, i, r, i, i);
    render_indent(b, depth + 1);
    col_block_size(b, i, n, true);
    sbuf_printf(b, ", v%d_nq = (v%d + v%d_s - 1) / v%d_s;\n", i, n, i, i);
    render_indent(b, depth + 1);
    sbuf_printf(b, "int64_t *v%d_cn = v%d_pb ? (int64_t *)(v%d_pb + v%d_nb * v%d * %d) : NULL;\n", i, i, i, i, n, nacc);
    render_indent(b, depth + 1);
    sbuf_printf(b, "if (v%d_cn) *v%d_cn = v%d_nb;\n", i, i, i);
    render_indent(b, depth + 1);
    sbuf_printf(b, "#pragma omp parallel for if (v%d > %d) num_threads(a->nthreads) schedule(static)\n",
                col_work(L), PAR_THRESHOLD);
    render_indent(b, depth + 1);
    sbuf_printf(b, "for (int64_t v%d_k = 0; v%d_k < v%d_nb * v%d_nq; v%d_k++) {\n", i, i, i, i, i);
    render_indent(b, depth + 2);
    sbuf_printf(b, "const int64_t v%d_r = v%d_k / v%d_nq, v%d_0 = (v%d_k - v%d_r * v%d_nq) * v%d_s, "
                   "v%d_m = v%d - v%d_0 < v%d_s ? v%d - v%d_0 : v%d_s;\n",
                i, i, i, i, i, i, i, i, i, n, i, i, n, i, i);
    render_indent(b, depth + 2);
    sbuf_printf(b, "const int64_t v%d_lo = v%d_r * v%d_nr, v%d_hi = v%d - v%d_lo < v%d_nr ? v%d : v%d_lo + v%d_nr;\n",
                j, i, i, j, r, j, i, r, j, i);
    col_arrays(b, c, i, e, xp, depth + 2);
    char lo[24], hi[24];
    snprintf(lo, sizeof lo, "v%d_lo", j);
    snprintf(hi, sizeof hi, "v%d_hi", j);
    col_pieces(b, c, i, e, xp, rc, i + 1, e2 + 1, depth + 2, lo, hi);
    render_indent(b, depth + 2);
    sbuf_printf(b, "if (v%d_pb) { /* this block's partials; the last task adds them all in block order */\n", i);
    /* copies as memcpy, the adds out of line (st_rows_partials, base/opmath.h): every
     * vectorized loop printed here added to each kernel's compile time */
    for (int p = i + 1, a = 0; p < j; p++) {
        if (!c->live[p] || k->ins[p].op != KI_ACC) continue;
        render_indent(b, depth + 3);
        sbuf_printf(b, "memcpy(v%d_pb + (%d * v%d_nb + v%d_r) * v%d + v%d_0, v%d_a, (size_t)v%d_m * sizeof(double));\n",
                    i, a++, i, i, n, i, p, i);
    }
    render_indent(b, depth + 3);
    sbuf_printf(b, "if (__atomic_sub_fetch(v%d_cn, 1, __ATOMIC_ACQ_REL) != 0) continue;\n", i);
    for (int p = i + 1, a = 0; p < j; p++) {
        if (!c->live[p] || k->ins[p].op != KI_ACC) continue;
        render_indent(b, depth + 3);
        sbuf_printf(b, "memcpy(v%d_a, v%d_pb + %d * v%d_nb * v%d + v%d_0, (size_t)v%d_m * sizeof(double));\n", p, i,
                    a, i, n, i, i);
        render_indent(b, depth + 3);
        sbuf_printf(b, "st_rows_partials(v%d_a, v%d_pb + %d * v%d_nb * v%d + v%d_0, v%d_nb, v%d, v%d_m);\n", p, i,
                    a++, i, n, i, i, n, i);
    }
    render_indent(b, depth + 2);
    sbuf_printf(b, "}\n");
    col_pieces(b, c, i, e, xp, rc, e2 + 1, e, depth + 2, NULL, NULL);
    render_indent(b, depth + 1);
    sbuf_printf(b, "}\n");
    render_indent(b, depth + 1);
    sbuf_printf(b, "free(v%d_pb);\n", i);
}

/* Prints the KIR_LOOP_COLS loop [i, e] column-blocked (see above); small loops as written. A
 * KIR_LOOP_BLOCK loop (par false) is nested in a parallel loop: its blocks run serially, at most
 * COL_BLOCK outputs each. */
void render_col_loop(sbuf *b, body_ctx *c, int i, int e, int depth, bool par) {
    const kir_kernel *k = c->k;
    const kir_ins *L = &k->ins[i];
    /* xp[p]: value p crosses pieces; piece[j]: the first instruction of j's piece (an inner
     * loop, or a run of straight code) */
    uint8_t *xp = st_calloc((size_t)k->n, 2), *rc = xp ? xp + k->n : NULL;
    int *piece = st_calloc((size_t)k->n, sizeof *piece);
    if (!xp || !piece) {
        st_free(xp);
        st_free(piece);
        b->oom = 1;
        return;
    }
    for (int j = i + 1, start = i + 1; j < e; j++) {
        if (k->ins[j].op == KI_LOOP) {
            int e2 = render_loop_end(k, j);
            for (int q = j; q <= e2; q++) piece[q] = j;
            j = e2;
            start = e2 + 1;
        } else {
            piece[j] = start;
        }
    }
    for (int q = i + 1; q < e; q++) { /* values read in another piece than their own */
        const kir_ins *in = &k->ins[q];
        if (!c->live[q]) continue;
        unsigned m = kir_operand_mask(in);
        const int32_t ops[4] = {in->a, in->b, in->c, in->d};
        for (int j = 0; j < 4; j++) {
            int p = ops[j];
            if (!(m >> j & 1) || p <= i || p >= e) continue;
            kir_opcode po = (kir_opcode)k->ins[p].op;
            if (po == KI_IPARAM || po == KI_FPARAM || po == KI_ICONST || po == KI_FCONST) continue;
            if (piece[p] != piece[q] && k->ins[piece[p]].op != KI_LOOP) xp[p] = 1; /* loop bodies' never do */
        }
    }
    for (int p = i + 1; p < e; p++) { /* index arithmetic of the output (v<i>): recomputed, not kept */
        const kir_ins *in = &k->ins[p];
        if (!c->live[p] || in->op < KI_IADD || in->op > KI_IMOD) continue;
        rc[p] = col_operands_from(k, in, i, i, i + 1, rc);
        if (rc[p] && xp[p]) xp[p] = 2;
    }
    const int sj = par ? col_split_loop(c, i, e, xp) : -1;
    if (sj >= 0) {
        render_col_split(b, c, i, e, xp, rc, sj, depth);
    } else {
        render_indent(b, depth);
        sbuf_printf(b, "if (v%d >= %d) { /* column-blocked: blocks of outputs, rows outer */\n", L->a, COL_MIN);
        col_blocks_open(b, c, i, e, xp, depth + 1, par);
        col_pieces(b, c, i, e, xp, rc, i + 1, e, depth + 2, NULL, NULL);
        render_indent(b, depth + 1);
        sbuf_printf(b, "}\n");
    }
    render_indent(b, depth);
    sbuf_printf(b, "} else {\n");
    if (par) {
        render_indent(b, depth + 1);
        sbuf_printf(b, "#pragma omp parallel for if (v%d > %d) num_threads(a->nthreads)\n", col_work(L), PAR_THRESHOLD);
    }
    render_indent(b, depth + 1);
    sbuf_printf(b, "for (int64_t v%d = 0; v%d < v%d; v%d++) {\n", i, i, L->a, i);
    render_range(b, c, i + 1, e, depth + 2);
    render_indent(b, depth + 1);
    sbuf_printf(b, "}\n");
    render_indent(b, depth);
    sbuf_printf(b, "}\n");
    st_free(piece);
    st_free(xp);
}
