/*
 * render.h — internal: kernel IR (ir/kir.h) to source text.
 *
 * One IR, two renderers: the C renderer (render_c.c) prints a kernel as one C11 function
 * `void KNAME(const st_kargs *a)` with OpenMP pragmas; the CUDA renderer (render_cuda.c) prints the
 * same instruction list as one `extern "C" __global__` function with the outer parallel loop mapped
 * to the grid. Both use the value expression printer (render_value_expr) and the string builder,
 * which know nothing about loops.
 */
#ifndef ST_RENDER_H
#define ST_RENDER_H

#include "ir/kir.h"

/* Appends the right-hand side of pure instruction i of k (a C expression of the instruction's
 * type, with operands named v<id> and buffers p<slot>). Shared by the C and CUDA renderers. */
ST_INTERNAL void render_value_expr(sbuf *b, const kir_kernel *k, int i);

/* Marks the instructions whose values reach a side effect (dead code is not printed, so
 * lowering may emit freely). live has k->n entries. */
ST_INTERNAL void render_mark_live(const kir_kernel *k, uint8_t *live);

/* Small pieces both renderers print the same way (defined in render_c.c). */
ST_INTERNAL int render_loop_end(const kir_kernel *k, int i);   /* the KI_ENDLOOP of the KI_LOOP at i */
ST_INTERNAL const char *render_accupd_fn(int64_t op);         /* combine macro of RSUM/RPROD/RMAX/RMIN */
ST_INTERNAL void render_identity_literal(sbuf *b, int64_t op, kir_type t); /* its identity element */
ST_INTERNAL void render_store_expr(sbuf *b, int dt, int v); /* v<v> converted to storage dtype dt */
ST_INTERNAL void render_indent(sbuf *b, int depth);
/* KI_ARGUPD in: keep the first index of the max (min), or of the first NaN; the accumulators
 * are v<a><sfx> and v<b><sfx> (sfx "" in C; "_p" for a CUDA thread's partials). */
ST_INTERNAL void render_argupd_line(sbuf *b, const kir_ins *in, const char *sfx);
/* `const T v<i> = <expr>;` for pure instruction i, at depth (a line of its own). */
ST_INTERNAL void render_value_line(sbuf *b, const kir_kernel *k, int i, int depth);
/* A serial KI_LOOP at i: `for (int64_t v<i> = 0; v<i> < v<a>; v<i>++) {` at *depth, then one deeper. */
ST_INTERNAL void render_loop_open(sbuf *b, const kir_kernel *k, int i, int *depth);
/* Instruction i when it is neither a side effect nor a loop (each renderer prints those its own
 * way): KI_IF opens a block and KI_ENDLOOP / KI_ENDIF close one (moving *depth); any other
 * instruction is pure (render_value_line). */
ST_INTERNAL void render_plain_ins(sbuf *b, const kir_kernel *k, int i, int *depth);

/* The C source of k: an st_malloc'ed NUL-terminated string, or NULL (ST_ERR_OOM set). */
ST_INTERNAL char *render_c(const kir_kernel *k);

/* ---- CUDA (render_cuda.c) ----
 * How a kernel maps onto the GPU (chosen by render_cuda from the IR, read by the launcher):
 *   CL_FLAT    grid-stride loop over the outer loop's count (one thread per iteration);
 *   CL_ROWS    the outer loop's iterations are rows, `rt` threads (the trailing kernel argument)
 *              cooperate on one row, its inner loops split over them;
 *   CL_COLS    CL_ROWS for a column reduction (KIR_LOOP_COLS: neighbouring rows are neighbours in
 *              memory): the 32 lanes of a warp take 32 neighbouring rows, the block's warps
 *              (`rt` of them) split each row's inner loops;
 *   CL_GRID    a full reduction (one row) whose one loop combines accumulators: the loop is split
 *              over a grid of blocks; each block's partial goes to the launch's scratch memory
 *              and the last block to finish combines them in block order and finishes the row;
 *   CL_MATMUL  tiled GEMM: grid (ceil(N/tile), ceil(M/tile), batch), 256 threads;
 *   CL_SINGLE  one block: phases separated by block barriers (scatter, multi-loop kernels);
 *   CL_HORIZONTAL  a horizontal kernel (k->nparts >= 2): consecutive ranges of blocks run the
 *              parts, each part's range sized from its own loop count (part_count);
 *   CL_ATTN    an attention (KK_ATTN): a warp per query row (grid-stride over batch x rows), keys
 *              in chunks of 32 with an online softmax (flash-style: any number of keys). */
typedef enum cuda_launch_mode {
    CL_FLAT, CL_ROWS, CL_MATMUL, CL_SINGLE, CL_HORIZONTAL, CL_COLS, CL_GRID, CL_ATTN
} cuda_launch_mode;
typedef struct cuda_launch_desc {
    int mode;          /* cuda_launch_mode */
    int count_id;      /* IR value id (kir) of the outer loop count: elements (CL_FLAT) or rows (CL_ROWS,
                        * CL_COLS); -1 = 1 */
    int rowlen_id;     /* CL_ROWS: IR value id of a representative inner length (picks threads per row); -1 unknown */
    int block;         /* threads per block the kernel was written for (its __launch_bounds__) */
    int part_count[KIR_MAX_PARTS];  /* CL_HORIZONTAL: IR value id of each part's flat loop count
                                     * (grid-stride over its blocks); -1: the part runs on one thread */
    int tile;          /* CL_MATMUL: the output tile's side (the grid is ceil(N/tile) x ceil(M/tile)) */
    int scratch;       /* CL_GRID: bytes of device scratch memory the launch passes after `rt` (a
                        * counter at 0, kept 0 between launches, then the blocks' partials); else 0 */
} cuda_launch_desc;
/* CUDA C source of k (one extern "C" __global__ function named by the macro KNAME), or NULL (ST_ERR_OOM).
 * render_cuda_sm: for compute capability sm (major * 10 + minor): matmuls that cuda_mma_eligible
 * accepts use tensor cores (jit/render_cuda_mma.c); same launch geometry. render_cuda: sm = 0
 * (unknown: no architecture-specific instruction). */
ST_INTERNAL char *render_cuda(const kir_kernel *k, cuda_launch_desc *d);
ST_INTERNAL char *render_cuda_sm(const kir_kernel *k, int sm, cuda_launch_desc *d);
/* Grid and block for one launch; *extra_arg receives the value of the trailing `int rt` parameter
 * (threads per row: CL_ROWS, CL_COLS) or 0. sm_count: the device's multiprocessors (caps grid-stride grids). */
ST_INTERNAL void cuda_launch_dims(const kir_kernel *k, const cuda_launch_desc *d, const int64_t *ints,
                                  int sm_count, unsigned grid[3], unsigned block[3], int *extra_arg);

#endif
