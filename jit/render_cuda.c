/*
 * render_cuda.c — the CUDA renderer: kernel IR to one `extern "C" __global__` function (CUDA C++
 * for NVRTC, compiled after base/opmath.h), and the launch geometry that goes with it.
 *
 * Kernel ABI (every kernel): p0..p{nbufs-1} (storage C types, const for inputs, __restrict__ where
 * render_c uses restrict), long long i0.. (a->ints), double f0.. (a->flts), int *err (set to 1 on a
 * runtime index error), int rt (threads per row; used by CL_ROWS only).
 *
 * Mapping (render_cuda picks it from the IR and says so in the cuda_launch_desc):
 *   CL_FLAT    one parallel outer loop: a grid-stride loop, one thread per iteration; its inner
 *              loops (if any) run serially in that thread, exactly as in C.
 *   CL_ROWS    an outer loop whose iterations (rows) hold serial inner loops (reductions, 2-D
 *              pointwise): `rt` threads per row (a power of two from cuda_launch_dims). Row-level
 *              values are computed by every thread of the row (they are equal), row-level stores
 *              by the row's thread 0. An inner loop is either
 *                - split: iteration j on thread j % rt, accumulators as per-thread partials that
 *                  start at the combine's identity, combined by a warp butterfly (__shfl_xor_sync)
 *                  and, when rt > 32 (then the row is the whole block), across warps through
 *                  shared memory in warp order; the result is broadcast (lane 0's value, or every
 *                  thread combining the same shared values in the same order), so every thread of
 *                  the row continues with the same bits and the order never depends on timing;
 *                - or redundant: every thread of the row runs it whole (a loop without stores that
 *                  cannot be split: a float product, which C also keeps in order because
 *                  regrouping moves its overflow points, or a loop reading an accumulator it
 *                  updates).
 *              Splitting relies on the lowering's invariant that a serial inner loop only stores
 *              element-wise (distinct indices: render_c's lane loops rely on it too). A kernel
 *              whose rows hold a loop that is neither is rendered CL_FLAT (a thread per row).
 *              Rows that combine or that read what another thread of the row stored ("coop":
 *              cuda_kernel_coop) need rt >= 32: a warp per row, or rt = blockDim (a row per block,
 *              for long rows) so that barriers are never divergent.
 *              A full reduction (KIR_LOOP_ROW: one row) that CL_GRID cannot take is one block of
 *              up to 1024 threads: correct and deterministic, but one SM.
 *   CL_GRID    a full reduction (KIR_LOOP_ROW) whose row holds one loop, splittable, combining
 *              accumulators, with no IF and no store before it (sum, mean, norms, max, argmax of
 *              a whole tensor): the loop is split over a grid of 1024-thread blocks (iteration j
 *              on global thread j % threads), each block combines its partials as a CL_ROWS row
 *              of a block does, thread 0 writes the block's partial to the launch's scratch
 *              memory and takes a ticket (atomicAdd on the scratch's counter, after a
 *              __threadfence); the block that draws the last ticket combines the partials in
 *              block order (deterministic for a given grid), resets the counter to 0 and runs the
 *              rest of the row; the others return. The grid: one block per 8192 elements, at most
 *              2 per SM and GRID_MAX.
 *   CL_COLS    CL_ROWS for a column reduction (the outer loop is KIR_LOOP_COLS: row o's element rr
 *              is at rr * nrows + o, so neighbouring rows are neighbours in memory). Rows as
 *              CL_ROWS would give each row its own threads, which then read a row apart from the
 *              next row's threads: 15% of each fetched sector used (the simulator's metrics; 9%
 *              of a device copy for layernorm's backward on an H100). Here thread t takes row
 *              base + t % COLS_W of a group of COLS_W (8) neighbouring rows, and the block's
 *              rt = blockDim / COLS_W threads of a row split its inner loops (iteration j on the
 *              row's thread j % rt): each 8 lanes of a warp load 32 neighbouring bytes (a whole
 *              sector), and the loop is unrolled by 4 so that a thread has loads in flight (its
 *              sum stays in order). Partials combine through shared memory in thread order (no
 *              shuffles: a warp's lanes hold different rows) and every thread of a row reads the
 *              same combined value. The rows loop runs the same number of times on every thread
 *              (the block's barriers never diverge): a lane past the last row computes the last
 *              row again and stores nothing (r_ok). Rows with an IF are left to CL_ROWS. Measured
 *              on an H100 with groups of 32 rows (a warp each): layernorm fwd+bwd 2.2x faster,
 *              but a 65536x1024 column sum 0.55x (32 blocks: 32 SMs busy, one load in flight a
 *              thread); groups of 8 and the unroll give 4x the blocks and 4x the loads in flight
 *              (not yet measured on a GPU).
 *   CL_MATMUL  shared-memory tiled GEMM: 64x64 output tile per block, 16x16 threads with 4x4
 *              outputs each (rows ty + 16i, columns tx + 16j: coalesced stores), k tiles of 16;
 *              grid (ceil(N/64), ceil(M/64), batch), y and z grid-strided past 65535. Every output
 *              is acc = 0; acc = fma(a, b, acc) for k = 0..K-1 in order, in float (f32/f16/bf16)
 *              or double (f64) — the CPU GEMM's sums (an explicit fma is no contraction: it stays
 *              under --fmad=false), so the bits match; integer
 *              matmuls accumulate in uint64_t as render_c's loop does. A matmul with an
 *              epilogue (fused consumers) runs it in the store loop from the registers, on the
 *              value rounded to the storage dtype (mm_store). Under render_cuda_sm with sm >= 80,
 *              f16/bf16 (and, when allowed, tf32) matmuls WITHOUT an epilogue get
 *              render_cuda_mma.c's tensor-core body instead: same grid and block, different
 *              rounding (an epilogue through the tensor-core store is not written yet).
 *   CL_HORIZONTAL  a horizontal kernel (k->nparts >= 2, fuser/horizontal.c): independent parts,
 *              block-range dispatch. Part p gets nb_p = min(ceil(count_p / 256), HZ_PART_BLOCKS)
 *              blocks (count_p: its one parallel top-level loop's count; the kernel and
 *              cuda_launch_dims compute nb_p the same way) and runs that loop grid-stride over its
 *              own blocks, inner loops serial in the thread (as CL_FLAT). A part of another shape
 *              gets one block and runs on its thread 0. Parts never read what another part
 *              writes, so no part waits for another.
 *   CL_SINGLE  kernels with several top-level loops (scatter_add: copy, then accumulate; setview
 *              when not in place: copy, then write): one block; a parallel (KIR_LOOP_PAR) loop is
 *              split over the block's threads, a serial loop runs on thread 0 (scatter_add's
 *              accumulation: duplicate indices must add in C order, so it is not split — no
 *              atomics, deterministic), __syncthreads() between phases. Anything else that does
 *              not fit that shape runs whole on one thread (block = 1): correct, slow.
 *
 * Invariants: like render_c, the text depends only on the IR (never on parameter values); every
 * op's math is the prelude's (the shared value printer prints the same macros). cuda_launch_dims
 * and render_cuda agree through the same IR scans (cuda_kernel_coop).
 *
 * Indices are 64-bit everywhere (int64_t loop variables and index arithmetic, long long
 * parameters). A 32-bit variant would need: at launch, a proof from the sizes that every index
 * expression stays below 2^31 (numel, and every offset + sum of |stride| * (size - 1), evaluated
 * with kir_eval_int); a second rendering where loop variables and KI_IADD..KI_IMOD values are
 * int32_t (the IR types them int64, so the renderer would retype them); and a cache entry per
 * variant, chosen per launch.
 */
#include "jit/render.h"
#include "jit/render_cuda_mma.h"

#define CU_BLOCK 256        /* threads per block: flat, row and matmul kernels */
#define CU_BLOCK_BIG 1024   /* a full reduction's one row; single-block phases */
#define CU_THREADS_PER_SM 8192  /* grid-stride kernels: at most this many threads per SM (4 waves) */
#define MM_T 64             /* matmul output tile (MM_T x MM_T), 16x16 threads, 4x4 each (every body;
                             * the launch description's tile). 128 (8x8 float sums a thread) was
                             * measured on an H100 (bench/NOTES.md): Linear+GELU 4096x1024x1024
                             * 0.768 -> 0.614 ms, but the MLP and transformer-block steps, whose
                             * matmuls are small, 1.8-2x slower (4x fewer blocks); 64 until the tile
                             * is chosen per launch from M and N */
#define MM_KT 16            /* matmul k tile */
#define HZ_PART_BLOCKS 1024 /* most blocks one part of a horizontal kernel gets (grid-stride past) */
#define CU_COLS_SMEM 32768  /* CL_COLS: shared bytes for the partials before 256 threads, not 1024 */
#define COLS_W 8            /* CL_COLS: neighbouring rows a block takes, one per lane of each 8: 32 bytes
                             * of f32, a whole sector (32 rows: 4x fewer blocks, measured 0.55x) */
#define GRID_MAX 1024       /* CL_GRID: most blocks (scratch: 256 bytes, then GRID_MAX partials per accumulator) */

typedef enum where { W_SERIAL, W_ROW, W_SPLIT } where;

typedef struct cu_ctx {
    const kir_kernel *k;
    const uint8_t *live;
    uint8_t loaded[KIR_MAX_BUFS];   /* some KI_LOAD reads the buffer */
    int block;
    bool cols;                      /* CL_COLS */
} cu_ctx;

/* ---- IR scans ---- */
static void mark_loaded(const kir_kernel *k, uint8_t *loaded) {
    memset(loaded, 0, KIR_MAX_BUFS);
    for (int i = 0; i < k->n; i++)
        if (k->ins[i].op == KI_LOAD && k->ins[i].a >= 0 && k->ins[i].a < KIR_MAX_BUFS) loaded[k->ins[i].a] = 1;
}

/* Do the threads of a row have to cooperate (combine partials, or see each other's stores)? Then
 * a row is a warp or a block. Scans every instruction (live or not): cheap enough per launch and
 * the same answer in the renderer and the launcher. */
static bool cuda_kernel_coop(const kir_kernel *k) {
    uint8_t loaded[KIR_MAX_BUFS];
    mark_loaded(k, loaded);
    for (int i = 0; i < k->n; i++) {
        const kir_ins *in = &k->ins[i];
        if (in->op == KI_ACCUPD || in->op == KI_ARGUPD) return true;
        if (in->op == KI_STORE && loaded[in->a]) return true;
    }
    return false;
}

static bool is_float(kir_type t) { return t == KT_F32 || t == KT_F64; }

/* Does live instruction j update accumulator acc? */
static bool updates(const kir_ins *in, int acc) {
    return (in->op == KI_ACCUPD && in->a == acc) || (in->op == KI_ARGUPD && (in->a == acc || in->b == acc));
}

/* Can loop [i, e] be split over the row's threads? No nested loops or accumulators, updates only
 * of accumulators defined before it (not float products), and no other read of those. */
static bool split_ok(const cu_ctx *c, int i, int e) {
    const kir_kernel *k = c->k;
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &k->ins[j];
        if (!c->live[j]) continue;
        switch ((kir_opcode)in->op) {
        case KI_LOOP: case KI_ACC:
            return false;
        case KI_ACCUPD:
            if (in->a >= i || k->ins[in->a].op != KI_ACC) return false;
            if (in->imm == ST_OP_RPROD && is_float((kir_type)k->ins[in->a].type)) return false;
            break;
        case KI_ARGUPD:
            if (in->a >= i || in->b >= i || k->ins[in->a].op != KI_ACC || k->ins[in->b].op != KI_ACC) return false;
            break;
        default:
            break;
        }
    }
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &k->ins[j];
        if (!c->live[j]) continue;
        unsigned m = kir_operand_mask(in);
        const int32_t ops[4] = {in->a, in->b, in->c, in->d};
        for (int q = 0; q < 4; q++) {
            if (!(m >> q & 1) || ops[q] < 0 || k->ins[ops[q]].op != KI_ACC) continue;
            if ((in->op == KI_ACCUPD && q == 0) || (in->op == KI_ARGUPD && q < 2)) continue;
            for (int j2 = i + 1; j2 < e; j2++)
                if (c->live[j2] && updates(&k->ins[j2], ops[q])) return false;
        }
    }
    return true;
}

/* A loop every thread of the row may run whole: it stores nothing. */
static bool redundant_ok(const cu_ctx *c, int i, int e) {
    for (int j = i + 1; j < e; j++)
        if (c->live[j] && c->k->ins[j].op == KI_STORE) return false;
    return true;
}

/* Row body [from, to): every loop at row level (inside IFs too) splits or runs redundantly.
 * *first_len: the count of the first such loop (-1: none). */
static bool rows_ok(const cu_ctx *c, int from, int to, int *first_len) {
    *first_len = -1;
    for (int i = from; i < to; i++) {
        if (!c->live[i] || c->k->ins[i].op != KI_LOOP) continue;
        int e = render_loop_end(c->k, i);
        if (!split_ok(c, i, e) && !redundant_ok(c, i, e)) return false;
        if (*first_len < 0) *first_len = c->k->ins[i].a;
        i = e;
    }
    return true;
}

/* The top-level loops; *side: a top-level statement with an effect (or an IF) outside them. */
static int top_loops(const cu_ctx *c, int *loops, int max, bool *side) {
    int n = 0;
    *side = false;
    for (int i = 0; i < c->k->n; i++) {
        const kir_ins *in = &c->k->ins[i];
        if (!c->live[i]) continue;
        switch ((kir_opcode)in->op) {
        case KI_LOOP:
            if (n < max) loops[n] = i;
            n++;
            i = render_loop_end(c->k, i);
            break;
        case KI_STORE: case KI_ACC: case KI_ACCUPD: case KI_ARGUPD: case KI_SETERR: case KI_IF: case KI_ENDIF:
            *side = true;
            break;
        default:
            break;
        }
    }
    return n;
}

/* Can the single-block kernel run as phases? No top-level accumulators or IFs, and no loop
 * updates an accumulator defined outside it. */
static bool phases_ok(const cu_ctx *c) {
    const kir_kernel *k = c->k;
    for (int i = 0; i < k->n; i++) {
        const kir_ins *in = &k->ins[i];
        if (!c->live[i]) continue;
        if (in->op == KI_IF || in->op == KI_ACC || in->op == KI_ACCUPD || in->op == KI_ARGUPD) return false;
        if (in->op != KI_LOOP) continue;
        int e = render_loop_end(k, i);
        for (int j = i + 1; j < e; j++) {
            const kir_ins *u = &k->ins[j];
            if (!c->live[j]) continue;
            if ((u->op == KI_ACCUPD && u->a < i) || (u->op == KI_ARGUPD && (u->a < i || u->b < i))) return false;
        }
        i = e;
    }
    return true;
}

/* Part p of a horizontal kernel: instructions [*from, *to). */
static void part_range(const kir_kernel *k, int p, int *from, int *to) {
    *from = k->part_start[p];
    *to = p + 1 < k->nparts ? k->part_start[p + 1] : k->n;
}

/* The one parallel top-level loop of part p with no other top-level effect, or -1. */
static int part_loop(const cu_ctx *c, int p) {
    int from, to, loop = -1;
    part_range(c->k, p, &from, &to);
    for (int i = from; i < to; i++) {
        const kir_ins *in = &c->k->ins[i];
        if (!c->live[i]) continue;
        switch ((kir_opcode)in->op) {
        case KI_LOOP:
            if (loop >= 0 || in->imm == KIR_LOOP_SERIAL) return -1;
            loop = i;
            i = render_loop_end(c->k, i);
            break;
        case KI_STORE: case KI_ACC: case KI_ACCUPD: case KI_ARGUPD: case KI_SETERR: case KI_IF: case KI_ENDIF:
            return -1;
        default:
            break;
        }
    }
    return loop;
}

/* CL_COLS: the accumulators in the row body [from, to) (8 bytes a thread each in shared memory
 * at most), or -1 when the body has an IF (a lane's branch could hold a
 * block barrier that another lane's row skips). */
static int cols_accs(const cu_ctx *c, int from, int to) {
    int n = 0;
    for (int i = from; i < to; i++) {
        const kir_ins *in = &c->k->ins[i];
        if (!c->live[i]) continue;
        if (in->op == KI_IF) return -1;
        if (in->op == KI_ACC) n++;
    }
    return n;
}

/* CL_GRID: the row body [from, to) of a full reduction has exactly one loop, splittable and
 * updating accumulators, no IF, and no store before the loop. Returns the loop, or -1. */
static int grid_loop(const cu_ctx *c, int from, int to) {
    int loop = -1;
    bool accs = false;
    for (int i = from; i < to; i++) {
        const kir_ins *in = &c->k->ins[i];
        if (!c->live[i]) continue;
        if (in->op == KI_IF || (in->op == KI_STORE && loop < 0)) return -1;
        if (in->op != KI_LOOP) continue;
        if (loop >= 0) return -1;
        loop = i;
        int e = render_loop_end(c->k, i);
        if (!split_ok(c, i, e)) return -1;
        for (int j = i + 1; j < e; j++)
            accs |= c->live[j] && (c->k->ins[j].op == KI_ACCUPD || c->k->ins[j].op == KI_ARGUPD);
        i = e;
    }
    return accs ? loop : -1;
}

/* CL_GRID scratch: accumulator acc's partials start at 256 + rank * GRID_MAX * 8, rank counting
 * the live accumulators before it. *n: how many there are. */
static int grid_slot(const cu_ctx *c, int acc, int *n) {
    int rank = -1, cnt = 0;
    for (int i = 0; i < c->k->n; i++) {
        if (!c->live[i] || c->k->ins[i].op != KI_ACC) continue;
        if (i == acc) rank = cnt;
        cnt++;
    }
    if (n) *n = cnt;
    return 256 + rank * GRID_MAX * 8;
}

/* Picks the mapping; *outer: the top-level loop of CL_FLAT / CL_ROWS / CL_COLS / CL_GRID. */
static void plan(const cu_ctx *c, cuda_launch_desc *d, int *outer) {
    const kir_kernel *k = c->k;
    d->count_id = d->rowlen_id = -1;
    d->scratch = d->tile = 0;
    *outer = -1;
    if (k->kind == KK_MATMUL) {
        d->mode = CL_MATMUL;
        d->block = CU_BLOCK;
        return;
    }
    if (k->kind == KK_ATTN) {
        d->mode = CL_ATTN;
        d->block = CU_BLOCK;
        return;
    }
    if (k->nparts >= 2) {
        d->mode = CL_HORIZONTAL;
        d->block = CU_BLOCK;
        for (int p = 0; p < k->nparts; p++) d->part_count[p] = part_loop(c, p) >= 0 ? k->ins[part_loop(c, p)].a : -1;
        return;
    }
    int loops[2];
    bool side;
    int n = top_loops(c, loops, 2, &side);
    if (n == 1 && !side && k->ins[loops[0]].imm != KIR_LOOP_SERIAL) {
        int t = loops[0], e = render_loop_end(k, t), len = -1;
        *outer = t;
        d->count_id = k->ins[t].a;
        d->mode = CL_FLAT;
        d->block = CU_BLOCK;
        bool inner = false;
        for (int j = t + 1; j < e; j++) inner |= c->live[j] && k->ins[j].op == KI_LOOP;
        if (inner && (k->kind == KK_POINTWISE || k->kind == KK_REDUCE) && rows_ok(c, t + 1, e, &len)) {
            d->mode = CL_ROWS;
            d->rowlen_id = len;
            d->block = k->ins[t].imm == KIR_LOOP_ROW ? CU_BLOCK_BIG : CU_BLOCK;
            int naccs = 0;
            if (k->ins[t].imm == KIR_LOOP_ROW && grid_loop(c, t + 1, e) >= 0) {
                d->mode = CL_GRID;
                grid_slot(c, -1, &naccs);
                d->scratch = 256 + naccs * GRID_MAX * 8;
                return;
            }
            int accs = cols_accs(c, t + 1, e);
            if (k->ins[t].imm == KIR_LOOP_COLS && accs >= 0) {
                d->mode = CL_COLS;   /* one partial per thread and accumulator in shared memory */
                d->block = accs * CU_BLOCK_BIG * 8 <= CU_COLS_SMEM ? CU_BLOCK_BIG : CU_BLOCK;
            }
        }
        return;
    }
    d->mode = CL_SINGLE;
    d->block = phases_ok(c) ? CU_BLOCK_BIG : 1;
}

/* ---- statements ---- */
static void hoisted(sbuf *b, const cu_ctx *c) {
    const kir_kernel *k = c->k;
    for (int i = 0; i < k->n; i++) {
        const kir_ins *in = &k->ins[i];
        if (!c->live[i]) continue;
        const char *T = kir_type_cname[in->type];
        if (in->op == KI_IPARAM) {
            sbuf_printf(b, "    const %s v%d = i%lld;\n", T, i, (long long)in->imm);
        } else if (in->op == KI_FPARAM) {
            sbuf_printf(b, "    const %s v%d = f%lld;\n", T, i, (long long)in->imm);
        } else if (in->op == KI_ICONST || in->op == KI_FCONST) {
            render_value_line(b, k, i, 1);
        }
    }
}

static void render_range(sbuf *b, const cu_ctx *c, int from, int to, int depth, where w);

/* Does loop [i, e] store into a buffer the kernel also loads? */
static bool stores_loaded(const cu_ctx *c, int i, int e) {
    for (int j = i + 1; j < e; j++)
        if (c->live[j] && c->k->ins[j].op == KI_STORE && c->loaded[c->k->ins[j].a]) return true;
    return false;
}

/* Calls fn for each distinct accumulator update (ACCUPD, or ARGUPD pair) of loop [i, e]. */
static void each_update(sbuf *b, const cu_ctx *c, int i, int e, int depth,
                        void (*fn)(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth)) {
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &c->k->ins[j];
        if (!c->live[j] || (in->op != KI_ACCUPD && in->op != KI_ARGUPD)) continue;
        bool dup = false;
        for (int j2 = i + 1; j2 < j; j2++)
            dup |= c->live[j2] && c->k->ins[j2].op == in->op && c->k->ins[j2].a == in->a;
        if (!dup) fn(b, c, in, depth);
    }
}

static const char *acc_type(const cu_ctx *c, int acc) { return kir_type_cname[c->k->ins[acc].type]; }
static int arg_max(const kir_ins *u) { return u->imm == ST_OP_RARGMAX; }

static void partial_decl(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth) {
    render_indent(b, depth);
    if (u->op == KI_ARGUPD) {
        sbuf_printf(b, "%s v%d_p = (%s)0;\n", acc_type(c, u->a), u->a, acc_type(c, u->a));
        render_indent(b, depth);
        sbuf_printf(b, "int64_t v%d_p = -1;\n", u->b);
        return;
    }
    sbuf_printf(b, "%s v%d_p = ", acc_type(c, u->a), u->a);
    render_identity_literal(b, u->imm, (kir_type)c->k->ins[u->a].type);
    sbuf_printf(b, ";\n");
}
static void warp_combine(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth) {
    (void)c;
    render_indent(b, depth);
    if (u->op == KI_ARGUPD)
        sbuf_printf(b, "st_arg_merge_(&v%d_p, &v%d_p, st_shfl_xor_(v%d_p, o_), st_shfl_xor_(v%d_p, o_), %d);\n", u->a,
                    u->b, u->a, u->b, arg_max(u));
    else
        sbuf_printf(b, "v%d_p = %s(v%d_p, st_shfl_xor_(v%d_p, o_));\n", u->a, render_accupd_fn(u->imm), u->a, u->a);
}
/* Partials in shared memory: n of each array of accumulator u (an arg-reduction's value and index),
 * the thread's own stored at [at] when guard (a C condition prefix, or "") holds. */
static void smem_partials(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth, int n, const char *guard,
                          const char *at) {
    render_indent(b, depth);
    sbuf_printf(b, "__shared__ %s v%d_s[%d];\n", acc_type(c, u->a), u->a, n);
    if (u->op == KI_ARGUPD) {
        render_indent(b, depth);
        sbuf_printf(b, "__shared__ int64_t v%d_s[%d];\n", u->b, n);
        render_indent(b, depth);
        sbuf_printf(b, "%s{ v%d_s[%s] = v%d_p; v%d_s[%s] = v%d_p; }\n", guard, u->a, at, u->a, u->b, at, u->b);
        return;
    }
    render_indent(b, depth);
    sbuf_printf(b, "%sv%d_s[%s] = v%d_p;\n", guard, u->a, at, u->a);
}

/* v<acc>_p = the partials of accumulator u combined in order: arr_a[first], then arr_a[kth] for
 * w_ = 1 .. count - 1 (kth names w_); arr_b holds an arg-reduction's indices. */
static void ordered_combine(sbuf *b, const kir_ins *u, int depth, const char *arr_a, const char *arr_b,
                            const char *first, const char *kth, const char *count) {
    render_indent(b, depth);
    if (u->op == KI_ARGUPD) {
        sbuf_printf(b, "v%d_p = %s[%s]; v%d_p = %s[%s];\n", u->a, arr_a, first, u->b, arr_b, first);
        render_indent(b, depth);
        sbuf_printf(b, "for (int w_ = 1; w_ < %s; w_++) st_arg_merge_(&v%d_p, &v%d_p, %s[%s], %s[%s], %d);\n", count,
                    u->a, u->b, arr_a, kth, arr_b, kth, arg_max(u));
        return;
    }
    sbuf_printf(b, "v%d_p = %s[%s];\n", u->a, arr_a, first);
    render_indent(b, depth);
    sbuf_printf(b, "for (int w_ = 1; w_ < %s; w_++) v%d_p = %s(v%d_p, %s[%s]);\n", count, u->a,
                render_accupd_fn(u->imm), u->a, arr_a, kth);
}

/* The names of accumulator u's shared arrays (v<a>_s, v<b>_s). */
static void smem_names(const kir_ins *u, char na[24], char nb[24]) {
    snprintf(na, 24, "v%d_s", u->a);
    snprintf(nb, 24, "v%d_s", u->b);
}

/* CL_ROWS, a row per block: lane 0 of each warp stores the warp's partial; combined in warp order */
static void smem_write(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth) {
    smem_partials(b, c, u, depth, c->block / 32, "if ((threadIdx.x & 31) == 0) ", "threadIdx.x >> 5");
}
static void smem_combine(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth) {
    (void)c;
    char na[24], nb[24];
    smem_names(u, na, nb);
    ordered_combine(b, u, depth, na, nb, "0", "w_", "(rt >> 5)");
}
/* CL_COLS: thread x's partial at [x]; the row of c_lane combines [c_lane], [COLS_W + c_lane], ... */
static void cols_write(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth) {
    smem_partials(b, c, u, depth, c->block, "", "threadIdx.x");
}
static void cols_combine(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth) {
    (void)c;
    char na[24], nb[24], kth[32];
    smem_names(u, na, nb);
    snprintf(kth, sizeof kth, "w_ * %d + c_lane", COLS_W);
    ordered_combine(b, u, depth, na, nb, "c_lane", kth, "rt");
}
/* CL_GRID: thread 0 stores the block's partial; the last block reads them all in block order */
static void grid_write(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth) {
    render_indent(b, depth);
    sbuf_printf(b, "((%s *)(scratch + %d))[blockIdx.x] = v%d_p;\n", acc_type(c, u->a), grid_slot(c, u->a, NULL), u->a);
    if (u->op == KI_ARGUPD) {
        render_indent(b, depth);
        sbuf_printf(b, "((int64_t *)(scratch + %d))[blockIdx.x] = v%d_p;\n", grid_slot(c, u->b, NULL), u->b);
    }
}
static void grid_combine(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth) {
    char na[64], nb[64];
    snprintf(na, sizeof na, "((volatile %s *)(scratch + %d))", acc_type(c, u->a), grid_slot(c, u->a, NULL));
    snprintf(nb, sizeof nb, "((volatile int64_t *)(scratch + %d))", u->op == KI_ARGUPD ? grid_slot(c, u->b, NULL) : 0);
    ordered_combine(b, u, depth, na, nb, "0", "w_", "(int)gridDim.x");
}
static void lane0_broadcast(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth) {
    (void)c;
    render_indent(b, depth);
    if (u->op == KI_ARGUPD)
        sbuf_printf(b, "v%d_p = st_shfl0_(v%d_p); v%d_p = st_shfl0_(v%d_p);\n", u->a, u->a, u->b, u->b);
    else
        sbuf_printf(b, "v%d_p = st_shfl0_(v%d_p);\n", u->a, u->a);
}
static void acc_merge(sbuf *b, const cu_ctx *c, const kir_ins *u, int depth) {
    (void)c;
    render_indent(b, depth);
    if (u->op == KI_ARGUPD)
        sbuf_printf(b, "st_arg_merge_(&v%d, &v%d, v%d_p, v%d_p, %d);\n", u->a, u->b, u->a, u->b, arg_max(u));
    else
        sbuf_printf(b, "v%d = %s(v%d, v%d_p);\n", u->a, render_accupd_fn(u->imm), u->a, u->a);
}

/* A row's inner loop [i, e] split over its rt threads, partials combined in a fixed order and
 * broadcast (see the header). Coop kernels only (rt >= 32) when it updates accumulators. */
static void split_loop(sbuf *b, const cu_ctx *c, int i, int e, int depth) {
    const kir_ins *L = &c->k->ins[i];
    bool accs = false;
    for (int j = i + 1; j < e; j++)
        accs |= c->live[j] && (c->k->ins[j].op == KI_ACCUPD || c->k->ins[j].op == KI_ARGUPD);
    render_indent(b, depth);
    sbuf_printf(b, "{ /* split over the row's threads */\n");
    each_update(b, c, i, e, depth + 1, partial_decl);
    render_indent(b, depth + 1);
    if (c->cols) sbuf_printf(b, "#pragma unroll 4\n");   /* loads in flight: each thread's sum stays in order */
    if (c->cols) render_indent(b, depth + 1);
    sbuf_printf(b, "for (int64_t v%d = r_lane; v%d < v%d; v%d += rt) {\n", i, i, L->a, i);
    render_range(b, c, i + 1, e, depth + 2, W_SPLIT);
    render_indent(b, depth + 1);
    sbuf_printf(b, "}\n");
    if (accs && c->cols) {
        render_indent(b, depth + 1);
        sbuf_printf(b, "{ /* the row's warps' partials, in warp order */\n");
        each_update(b, c, i, e, depth + 2, cols_write);
        render_indent(b, depth + 2);
        sbuf_printf(b, "__syncthreads();\n");
        each_update(b, c, i, e, depth + 2, cols_combine);
        render_indent(b, depth + 2);
        sbuf_printf(b, "__syncthreads();\n");
        render_indent(b, depth + 1);
        sbuf_printf(b, "}\n");
        each_update(b, c, i, e, depth + 1, acc_merge);
    } else if (accs) {
        render_indent(b, depth + 1);
        sbuf_printf(b, "for (int o_ = 16; o_ > 0; o_ >>= 1) { /* warp butterfly */\n");
        each_update(b, c, i, e, depth + 2, warp_combine);
        render_indent(b, depth + 1);
        sbuf_printf(b, "}\n");
        render_indent(b, depth + 1);
        sbuf_printf(b, "if (rt > 32) { /* a row per block: warps' partials in warp order */\n");
        each_update(b, c, i, e, depth + 2, smem_write);
        render_indent(b, depth + 2);
        sbuf_printf(b, "__syncthreads();\n");
        each_update(b, c, i, e, depth + 2, smem_combine);
        render_indent(b, depth + 2);
        sbuf_printf(b, "__syncthreads();\n");
        render_indent(b, depth + 1);
        sbuf_printf(b, "} else {\n");
        each_update(b, c, i, e, depth + 2, lane0_broadcast);
        render_indent(b, depth + 1);
        sbuf_printf(b, "}\n");
        each_update(b, c, i, e, depth + 1, acc_merge);
    }
    if (stores_loaded(c, i, e)) { /* later loops of the row read what other threads stored */
        render_indent(b, depth + 1);
        sbuf_printf(b, c->cols ? "__syncthreads();\n" : "ST_ROW_SYNC(rt);\n");
    }
    render_indent(b, depth);
    sbuf_printf(b, "}\n");
}

static void store_stmt(sbuf *b, const kir_ins *in) {
    sbuf_printf(b, "p%d[v%d] = ", in->a, in->b);
    render_store_expr(b, (int)in->imm, in->c);
    sbuf_printf(b, ";\n");
}

/* Prints the live instructions in [from, to). W_SERIAL: as C does; W_ROW: the row level of a
 * CL_ROWS kernel (stores by the row's thread 0, loops split or redundant); W_SPLIT: the body of a
 * split loop (accumulators are the thread's partials v<acc>_p). */
static void render_range(sbuf *b, const cu_ctx *c, int from, int to, int depth, where w) {
    const kir_kernel *k = c->k;
    const char *sfx = w == W_SPLIT ? "_p" : "";
    for (int i = from; i < to; i++) {
        const kir_ins *in = &k->ins[i];
        if (!c->live[i]) continue;
        switch ((kir_opcode)in->op) {
        case KI_IPARAM: case KI_FPARAM: case KI_ICONST: case KI_FCONST:
            break;
        case KI_LOOP:
            if (w == W_ROW) {
                int e = render_loop_end(k, i);
                if (split_ok(c, i, e)) {
                    split_loop(b, c, i, e, depth);
                } else { /* redundant: every thread of the row runs it whole */
                    render_indent(b, depth);
                    sbuf_printf(b, "for (int64_t v%d = 0; v%d < v%d; v%d++) { /* on every thread of the row */\n", i,
                                i, in->a, i);
                    render_range(b, c, i + 1, e, depth + 1, W_SERIAL);
                    render_indent(b, depth);
                    sbuf_printf(b, "}\n");
                }
                i = e;
                break;
            }
            render_loop_open(b, k, i, &depth);
            break;
        case KI_STORE:
            render_indent(b, depth);
            if (w == W_ROW) sbuf_printf(b, c->cols ? "if (r_lane == 0 && r_ok) " : "if (r_lane == 0) ");
            else if (w == W_SPLIT && c->cols) sbuf_printf(b, "if (r_ok) ");
            store_stmt(b, in);
            if (w == W_ROW && c->loaded[in->a]) {
                render_indent(b, depth);
                sbuf_printf(b, c->cols ? "__syncthreads();\n" : "ST_ROW_SYNC(rt);\n");
            }
            break;
        case KI_ACC:
            render_indent(b, depth);
            sbuf_printf(b, "%s v%d = v%d;\n", kir_type_cname[in->type], i, in->a);
            break;
        case KI_ACCUPD:
            render_indent(b, depth);
            sbuf_printf(b, "v%d%s = %s(v%d%s, v%d);\n", in->a, sfx, render_accupd_fn(in->imm), in->a, sfx, in->b);
            break;
        case KI_ARGUPD:
            render_indent(b, depth);
            render_argupd_line(b, in, sfx);
            break;
        case KI_SETERR:
            render_indent(b, depth);
            sbuf_printf(b, "if (!v%d) *err = 1;\n", in->a);
            break;
        default:   /* KI_IF, KI_ENDLOOP, KI_ENDIF and the pure instructions */
            render_plain_ins(b, k, i, &depth);
            break;
        }
    }
}

/* ---- kernel shapes ---- */
static void render_flat(sbuf *b, const cu_ctx *c, int t) {
    int e = render_loop_end(c->k, t);
    render_range(b, c, 0, t, 1, W_SERIAL);
    sbuf_printf(b, "    for (int64_t v%d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v%d < v%d;\n", t, t,
                c->k->ins[t].a);
  sbuf_printf(b, "         v%d += (int64_t)gridDim.x * blockDim.x) {\n", t);
    render_range(b, c, t + 1, e, 2, W_SERIAL);
    sbuf_printf(b, "    }\n");
    render_range(b, c, e + 1, c->k->n, 1, W_SERIAL);
}

static void render_rows(sbuf *b, const cu_ctx *c, int t) {
    int e = render_loop_end(c->k, t);
    render_range(b, c, 0, t, 1, W_SERIAL);
    sbuf_printf(b, "    const int r_lane = (int)(threadIdx.x %% (unsigned)rt);   /* thread within its row */\n");
    sbuf_printf(b, "    const int64_t r_blk = blockDim.x / (unsigned)rt;           /* rows per block */\n");
    sbuf_printf(b, "    for (int64_t v%d = (int64_t)blockIdx.x * r_blk + threadIdx.x / (unsigned)rt; v%d < v%d;\n", t,
                t, c->k->ins[t].a);
  sbuf_printf(b, "         v%d += (int64_t)gridDim.x * r_blk) {\n", t);
    render_range(b, c, t + 1, e, 2, W_ROW);
    sbuf_printf(b, "    }\n");
    render_range(b, c, e + 1, c->k->n, 1, W_SERIAL);
}

static void render_cols(sbuf *b, const cu_ctx *c, int t) {
    int e = render_loop_end(c->k, t), n = c->k->ins[t].a;
    render_range(b, c, 0, t, 1, W_SERIAL);
    sbuf_printf(b, "    const int c_lane = (int)(threadIdx.x %% %d);    /* the row within the block's group */\n", COLS_W);
    sbuf_printf(b, "    const int r_lane = (int)(threadIdx.x / %d);    /* this thread's share of the row */\n", COLS_W);
    sbuf_printf(b, "    for (int64_t c_base = (int64_t)blockIdx.x * %d; c_base < v%d; c_base += (int64_t)gridDim.x * %d) {\n",
                COLS_W, n, COLS_W);
    sbuf_printf(b, "        const bool r_ok = c_base + c_lane < v%d;\n", n);
    sbuf_printf(b, "        const int64_t v%d = r_ok ? c_base + c_lane : v%d - 1;\n", t, n);
    render_range(b, c, t + 1, e, 2, W_ROW);
    sbuf_printf(b, "    }\n");
    render_range(b, c, e + 1, c->k->n, 1, W_SERIAL);
}

/* CL_GRID: the row (one) with its loop L split over the whole grid (see the header). */
static void render_grid(sbuf *b, const cu_ctx *c, int t) {
    const kir_kernel *k = c->k;
    int e = render_loop_end(k, t), L = grid_loop(c, t + 1, e), le = render_loop_end(k, L);
    render_range(b, c, 0, t, 1, W_SERIAL);
    sbuf_printf(b, "    const int r_lane = (int)threadIdx.x;\n");
    sbuf_printf(b, "    const int64_t v%d = 0;   /* the one row */\n", t);
    render_range(b, c, t + 1, L, 1, W_ROW);
    sbuf_printf(b, "    { /* split over the grid */\n");
    each_update(b, c, L, le, 2, partial_decl);
    sbuf_printf(b, "        for (int64_t v%d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v%d < v%d;\n", L, L,
                k->ins[L].a);
    sbuf_printf(b, "             v%d += (int64_t)gridDim.x * blockDim.x) {\n", L);
    render_range(b, c, L + 1, le, 3, W_SPLIT);
    sbuf_printf(b, "        }\n");
    sbuf_printf(b, "        for (int o_ = 16; o_ > 0; o_ >>= 1) { /* warp butterfly */\n");
    each_update(b, c, L, le, 3, warp_combine);
    sbuf_printf(b, "        }\n");
    sbuf_printf(b, "        { /* the block's warps, in warp order */\n");
    each_update(b, c, L, le, 3, smem_write);
    sbuf_printf(b, "            __syncthreads();\n");
    each_update(b, c, L, le, 3, smem_combine);
    sbuf_printf(b, "            __syncthreads();\n");
    sbuf_printf(b, "        }\n");
    sbuf_printf(b, "        __shared__ int g_last;   /* this block finished last */\n");
    sbuf_printf(b, "        if (threadIdx.x == 0) {\n");
    each_update(b, c, L, le, 3, grid_write);
    sbuf_printf(b, "            __threadfence();\n");
    sbuf_printf(b, "            g_last = atomicAdd((unsigned *)scratch, 1u) == gridDim.x - 1;\n");
    sbuf_printf(b, "        }\n");
    sbuf_printf(b, "        __syncthreads();\n");
    sbuf_printf(b, "        if (!g_last) return;\n");
    sbuf_printf(b, "        __threadfence();\n");
    each_update(b, c, L, le, 2, grid_combine);
    sbuf_printf(b, "        if (threadIdx.x == 0) *(unsigned *)scratch = 0u;   /* ready for the next launch */\n");
    each_update(b, c, L, le, 2, acc_merge);
    sbuf_printf(b, "    }\n");
    render_range(b, c, le + 1, e, 1, W_ROW);
    render_range(b, c, e + 1, k->n, 1, W_SERIAL);
}

/* Block-range dispatch over the parts (see CL_HORIZONTAL in the header): hb_ is the block's
 * index within the part being tested, nb_ that part's block count. */
static void render_horizontal(sbuf *b, const cu_ctx *c, const cuda_launch_desc *d) {
    const kir_kernel *k = c->k;
    sbuf_printf(b, "    long long hb_ = blockIdx.x;   /* block index within the current part */\n");
    for (int p = 0; p < k->nparts; p++) {
        int from, to, t = d->part_count[p] >= 0 ? part_loop(c, p) : -1;
        part_range(k, p, &from, &to);
        sbuf_printf(b, "    { /* part %d */\n", p);
        if (t < 0) {
            sbuf_printf(b, "    if (hb_ == 0 && threadIdx.x == 0) {\n");
            render_range(b, c, from, to, 2, W_SERIAL);
            sbuf_printf(b, "    }\n    hb_ -= 1;\n    }\n");
            continue;
        }
        int e = render_loop_end(k, t);
        render_range(b, c, from, t, 1, W_SERIAL);
        sbuf_printf(b, "    const long long nb_ = v%d <= 0 ? 0 : (v%d + %d) / %d < %d ? (v%d + %d) / %d : %d;\n", k->ins[t].a,
                    k->ins[t].a, CU_BLOCK - 1, CU_BLOCK, HZ_PART_BLOCKS, k->ins[t].a, CU_BLOCK - 1, CU_BLOCK,
                    HZ_PART_BLOCKS);
        sbuf_printf(b, "    if (hb_ >= 0 && hb_ < nb_) {\n");
        sbuf_printf(b, "    for (int64_t v%d = hb_ * blockDim.x + threadIdx.x; v%d < v%d; v%d += nb_ * blockDim.x) {\n",
                    t, t, k->ins[t].a, t);
        render_range(b, c, t + 1, e, 2, W_SERIAL);
        sbuf_printf(b, "    }\n");
        render_range(b, c, e + 1, to, 1, W_SERIAL);
        sbuf_printf(b, "    }\n    hb_ -= nb_;\n    }\n");
    }
}

/* The blocks a horizontal launch needs: render_horizontal's nb_ summed over the parts. */
static int64_t horizontal_blocks(const kir_kernel *k, const cuda_launch_desc *d, const int64_t *ints) {
    int64_t total = 0;
    for (int p = 0; p < k->nparts; p++) {
        if (d->part_count[p] < 0) {
            total++;
            continue;
        }
        int64_t n = kir_eval_int(k, d->part_count[p], ints);
        if (n < 0) n = INT64_MAX - CU_BLOCK;   /* unknown: the most blocks */
        int64_t nb = n <= 0 ? 0 : (n + CU_BLOCK - 1) / CU_BLOCK;
        total += nb < HZ_PART_BLOCKS ? nb : HZ_PART_BLOCKS;
    }
    return total;
}

/* One block: parallel loops split over its threads, the rest on thread 0, barriers between. */
static void render_phases(sbuf *b, const cu_ctx *c) {
    const kir_kernel *k = c->k;
    for (int i = 0; i < k->n; i++) {
        const kir_ins *in = &k->ins[i];
        if (!c->live[i]) continue;
        if (in->op == KI_LOOP) {
            int e = render_loop_end(k, i);
            if (in->imm != KIR_LOOP_SERIAL) {
                sbuf_printf(b, "    for (int64_t v%d = threadIdx.x; v%d < v%d; v%d += blockDim.x) {\n", i, i,
                            in->a, i);
                render_range(b, c, i + 1, e, 2, W_SERIAL);
                sbuf_printf(b, "    }\n");
            } else {
                sbuf_printf(b, "    if (threadIdx.x == 0) { /* serial: in order, on one thread */\n");
                sbuf_printf(b, "        for (int64_t v%d = 0; v%d < v%d; v%d++) {\n", i, i, in->a, i);
                render_range(b, c, i + 1, e, 3, W_SERIAL);
                sbuf_printf(b, "        }\n    }\n");
            }
            sbuf_printf(b, "    __syncthreads();\n");
            i = e;
        } else if (in->op == KI_STORE || in->op == KI_SETERR) {
            sbuf_printf(b, "    if (threadIdx.x == 0) {\n");
            render_range(b, c, i, i + 1, 2, W_SERIAL);
            sbuf_printf(b, "    }\n    __syncthreads();\n");
        } else {
            render_range(b, c, i, i + 1, 1, W_SERIAL);
        }
    }
}

/* ---- matmul ----
 * An operand may be stored in another float type than the matmul's (a cast folded into the
 * loads: kir_matmul): each element is loaded to its own compute type and converted to the
 * matmul's, as CAST converts it, so the tiles hold the cast operand's values. */
static const char *mm_load(int dt) { return dt == ST_F16 ? "st_h2f" : dt == ST_BF16 ? "st_bf2f" : ""; }

/* The store of output element (gm, gn) of batch z. With an epilogue (k->mm.epi) the element's
 * value, rounded to the storage dtype as the unfused store would round it, feeds the epilogue's
 * straight-line code from the register (e_acc, e_i, e_j, e_z, e_flat bound as render_c binds
 * them); the epilogue's STOREs are the kernel's writes. */
static void mm_store(sbuf *b, const cu_ctx *c, const char *st) {
    const kir_matmul *m = &c->k->mm;
    bool flt = st_is_float((st_dtype)m->dtype);
    const char *ind = "                    ";
    if (!m->epi) {
        if (m->dtype == ST_F16 || m->dtype == ST_BF16)
            sbuf_printf(b, "%sif (gm < M && gn < N) O[z * M * N + gm * N + gn] = %s(acc[i][j]);\n", ind,
                        m->dtype == ST_F16 ? "st_f2h" : "st_f2bf");
        else if (flt)
            sbuf_printf(b, "%sif (gm < M && gn < N) O[z * M * N + gm * N + gn] = acc[i][j];\n", ind);
        else
            sbuf_printf(b, "%sif (gm < M && gn < N) O[z * M * N + gm * N + gn] = (%s)(int64_t)acc[i][j];\n", ind,
                        st);
        return;
    }
    sbuf_printf(b, "%sif (gm < M && gn < N) {\n", ind);
    if (m->dtype == ST_F16) sbuf_printf(b, "%s    const float e_acc = st_h2f(st_f2h(acc[i][j]));\n", ind);
    else if (m->dtype == ST_BF16) sbuf_printf(b, "%s    const float e_acc = st_bf2f(st_f2bf(acc[i][j]));\n", ind);
    else if (flt) sbuf_printf(b, "%s    const %s e_acc = acc[i][j];\n", ind, st);
    else sbuf_printf(b, "%s    const %s e_acc = (%s)(int64_t)acc[i][j];\n", ind, st, st);
    sbuf_printf(b, "%s    const int64_t e_i = gm, e_j = gn, e_z = z, e_flat = (z * M + gm) * N + gn;\n", ind);
    sbuf_printf(b, "%s    (void)e_acc; (void)e_i; (void)e_j; (void)e_z; (void)e_flat;\n", ind);
    render_range(b, c, 0, c->k->n, 6, W_SERIAL);
    sbuf_printf(b, "%s}\n", ind);
}

static void render_matmul(sbuf *b, const cu_ctx *c) {
    const kir_kernel *k = c->k;
    const kir_matmul *m = &k->mm;
    int adt = k->buf_dtype[m->a_buf], bdt = k->buf_dtype[m->b_buf];
    const char *st = st_dtypes[m->dtype].ctype, *lda = mm_load(adt), *ldb = mm_load(bdt);
    bool flt = st_is_float((st_dtype)m->dtype);
    const char *C = m->dtype == ST_F64 ? "double" : flt ? "float" : "uint64_t";
    int nb = m->nbatch;
    sbuf_printf(b, "    const %s *A = p%d;\n    const %s *B = p%d;\n", st_dtypes[adt].ctype, m->a_buf,
                st_dtypes[bdt].ctype, m->b_buf);
    if (m->epi) hoisted(b, c);
    else sbuf_printf(b, "    %s *O = p%d;\n", st, m->o_buf);
    sbuf_printf(b, "    const int64_t M = i%d, N = i%d, K = i%d;\n", m->p_m, m->p_n, m->p_k);
    sbuf_printf(b, "    const int64_t sam = i%d, sak = i%d, aoff = i%d;\n", m->p_astr + nb, m->p_astr + nb + 1,
                m->p_aoff);
    sbuf_printf(b, "    const int64_t sbk = i%d, sbn = i%d, boff = i%d;\n", m->p_bstr + nb, m->p_bstr + nb + 1,
                m->p_boff);
    sbuf_printf(b, "    int64_t NB = 1;\n");
    for (int d = 0; d < nb; d++) sbuf_printf(b, "    NB *= i%d;\n", m->p_bsize + d);
    const int T = MM_T, R = T / 16;   /* R x R outputs a thread */
    sbuf_printf(b, "    __shared__ %s As[%d][%d + 1], Bs[%d][%d];   /* k-major tiles; As padded */\n",
                C, MM_KT, T, MM_KT, T);
    sbuf_printf(b, "    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;\n");
    sbuf_printf(b, "    const int64_t mt = (M + %d) / %d;\n", T - 1, T);
    sbuf_printf(b, "    for (int64_t z = blockIdx.z; z < NB; z += gridDim.z) {\n");
    sbuf_printf(b, "        int64_t ao = aoff, bo = boff;\n");
    if (nb) sbuf_printf(b, "        int64_t r = z;\n");
    for (int d = nb - 1; d >= 0; d--)
        sbuf_printf(b, "        { const int64_t i = r %% i%d; r /= i%d; ao += i * i%d; bo += i * i%d; }\n",
                    m->p_bsize + d, m->p_bsize + d, m->p_astr + d, m->p_bstr + d);
    sbuf_printf(b, "        for (int64_t by = blockIdx.y; by < mt; by += gridDim.y) {\n");
    sbuf_printf(b, "            const int64_t m0 = by * %d, n0 = (int64_t)blockIdx.x * %d;\n", T, T);
    sbuf_printf(b, "            %s acc[%d][%d];\n", C, R, R);
    sbuf_printf(b, "            for (int i = 0; i < %d; i++)\n", R);
    sbuf_printf(b, "                for (int j = 0; j < %d; j++) acc[i][j] = 0;\n", R);
    sbuf_printf(b, "            for (int64_t k0 = 0; k0 < K; k0 += %d) {\n", MM_KT);
    sbuf_printf(b, "                for (int l = threadIdx.x; l < %d; l += %d) {\n", T * MM_KT, CU_BLOCK);
    sbuf_printf(b, "                    const int am = l >> 4, ak = l & 15, bk = l / %d, bn = l %% %d;\n", T, T);
    sbuf_printf(b, "                    const int64_t gm = m0 + am, gk = k0 + ak, gk2 = k0 + bk, gn = n0 + bn;\n");
    sbuf_printf(b, "                    As[ak][am] = gm < M && gk < K ? (%s)%s(A[ao + ", C, lda);
    cuda_mm_off(b, m, 0, "gm", "sam");
    sbuf_printf(b, " + ");
    cuda_mm_off(b, m, 1, "gk", "sak");
    sbuf_printf(b, "]) : (%s)0;\n", C);
    sbuf_printf(b, "                    Bs[bk][bn] = gk2 < K && gn < N ? (%s)%s(B[bo + ", C, ldb);
    cuda_mm_off(b, m, 2, "gk2", "sbk");
    sbuf_printf(b, " + ");
    cuda_mm_off(b, m, 3, "gn", m->b_unit ? "1" : "sbn");
    sbuf_printf(b, "]) : (%s)0;\n", C);
    sbuf_printf(b, "                }\n");
    sbuf_printf(b, "                __syncthreads();\n");
    /* only the k < K of the tile: a padded zero would turn -0 into +0 and inf * 0 into NaN */
    sbuf_printf(b, "                const int kn = K - k0 < %d ? (int)(K - k0) : %d;\n", MM_KT, MM_KT);
    sbuf_printf(b, "                for (int kk = 0; kk < kn; kk++) {\n");
    sbuf_printf(b, "                    %s a[%d], bv[%d];\n", C, R, R);
    sbuf_printf(b, "                    for (int i = 0; i < %d; i++) a[i] = As[kk][ty + 16 * i];\n", R);
    sbuf_printf(b, "                    for (int j = 0; j < %d; j++) bv[j] = Bs[kk][tx + 16 * j];\n", R);
    sbuf_printf(b, "                    for (int i = 0; i < %d; i++)\n", R);
    if (m->dtype == ST_F64 || flt)   /* the CPU GEMM's fused multiply-add (base/opmath.h) */
        sbuf_printf(b, "                        for (int j = 0; j < %d; j++) acc[i][j] = %s(a[i], bv[j], acc[i][j]);\n",
                    R, m->dtype == ST_F64 ? "fma" : "fmaf");
    else
        sbuf_printf(b, "                        for (int j = 0; j < %d; j++) acc[i][j] = acc[i][j] + a[i] * bv[j];\n", R);
    sbuf_printf(b, "                }\n");
    sbuf_printf(b, "                __syncthreads();\n");
    sbuf_printf(b, "            }\n");
    sbuf_printf(b, "            for (int i = 0; i < %d; i++)\n", R);
    sbuf_printf(b, "                for (int j = 0; j < %d; j++) {\n", R);
    sbuf_printf(b, "                    const int64_t gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;\n");
    mm_store(b, c, st);
    sbuf_printf(b, "                }\n");
    sbuf_printf(b, "        }\n");
    sbuf_printf(b, "    }\n");
}

/* An attention (kir_attn, CL_ATTN): a warp per query row. The keys the row sees go by in chunks
 * of 32, a key per lane: its score (the lane's dot product, fma in d order), then the online
 * softmax (the running max m and sum l rescaled by exp(m_old - m_new) when the max grows, the
 * output accumulators too), then each key's p times its v row added by every lane for its output
 * columns (lane + 32 t, ATT_EV per lane; wider rows take several passes over the keys). No
 * shared memory, no bound on the number of keys. A mask is added to each score as it is made;
 * dropout zeroes or scales each key's weight in p v (not in the sum: the weights are the softmax's
 * before dropout), its uniform at the weight's flat index as the CPU's. Not the CPU's bits (its
 * exact two-pass softmax and double sum): the same values within rounding. */
#define ATT_EV 4
static void render_attn(sbuf *b, const cu_ctx *c) {
    const kir_attn *m = &c->k->at;
    const char *T = m->dtype == ST_F64 ? "double" : "float", *fma = m->dtype == ST_F64 ? "fma" : "fmaf";
    int nb = m->nbatch;
    sbuf_printf(b, "    const %s *Q = p%d, *K = p%d, *V = p%d;\n    %s *O = p%d;\n", T, m->q_buf, m->k_buf, m->v_buf,
                T, m->o_buf);
    sbuf_printf(b, "    const int64_t Lq = i%d, Lk = i%d, E = i%d, Ev = i%d;\n", m->p_lq, m->p_lk, m->p_e, m->p_ev);
    sbuf_printf(b, "    const int64_t sqi = i%d, sqd = i%d, skj = i%d, skd = i%d, svj = i%d, sve = i%d;\n",
                m->p_str[0] + nb, m->p_str[0] + nb + 1, m->p_str[1] + nb, m->p_str[1] + nb + 1, m->p_str[2] + nb,
                m->p_str[2] + nb + 1);
    const bool mk = m->m_buf >= 0;
    if (mk)
        sbuf_printf(b, "    const %s *M = p%d;\n    const int64_t smi = i%d, smj = i%d;\n", T, m->m_buf,
                    m->p_str[3] + nb, m->p_str[3] + nb + 1);
    sbuf_printf(b, "    const %s sc = (%s)f%d;\n    (void)err; (void)rt;\n", T, T, m->p_scale);
    if (m->dropout)
        sbuf_printf(b, "    const %s drop = (%s)f%d, dsc = (%s)(1.0 / (1.0 - f%d));\n"
                    "    const uint64_t seed = (uint64_t)i%d, roff = (uint64_t)i%d;\n", T, T, m->p_drop, T,
                    m->p_drop, m->p_seed, m->p_roff);
    sbuf_printf(b, "    int64_t NB = 1;\n");
    for (int d = 0; d < nb; d++) sbuf_printf(b, "    NB *= i%d;\n", m->p_bsize + d);
    sbuf_printf(b, "    const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;\n");
    sbuf_printf(b, "    for (int64_t row = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); row < NB * Lq;\n");
    sbuf_printf(b, "         row += (int64_t)gridDim.x * wpb) {\n");
    sbuf_printf(b, "        const int64_t i = row %% Lq;\n");
    sbuf_printf(b, "        int64_t r = row / Lq, qo = i%d, ko = i%d, vo = i%d, mo = %s%d;\n", m->p_off[0], m->p_off[1],
                m->p_off[2], mk ? "i" : "", mk ? m->p_off[3] : 0);
    for (int d = nb - 1; d >= 0; d--) {
        sbuf_printf(b, "        { const int64_t x = r %% i%d; r /= i%d; qo += x * i%d; ko += x * i%d; vo += x * i%d;",
                    m->p_bsize + d, m->p_bsize + d, m->p_str[0] + d, m->p_str[1] + d, m->p_str[2] + d);
        if (mk) sbuf_printf(b, " mo += x * i%d;", m->p_str[3] + d);
        sbuf_printf(b, " }\n");
    }
    sbuf_printf(b, "        (void)mo;\n");
    sbuf_printf(b, "        (void)r;\n");
    sbuf_printf(b, "        const int64_t n = %s;\n", m->causal ? "i + 1 < Lk ? i + 1 : Lk" : "Lk");
    sbuf_printf(b, "        %s *orow = O + row * Ev;\n", T);
    sbuf_printf(b, "        for (int64_t e0 = 0; e0 < Ev; e0 += %d) {\n", 32 * ATT_EV);
    sbuf_printf(b, "            %s mx = -INFINITY, l = 0, acc[%d];\n", T, ATT_EV);
    sbuf_printf(b, "            for (int t = 0; t < %d; t++) acc[t] = 0;\n", ATT_EV);
    sbuf_printf(b, "            for (int64_t j0 = 0; j0 < n; j0 += 32) {\n");
    sbuf_printf(b, "                const int64_t j = j0 + lane;\n");
    sbuf_printf(b, "                %s s = -INFINITY;\n", T);
    sbuf_printf(b, "                if (j < n) {\n");
    sbuf_printf(b, "                    %s d_ = 0;\n", T);
    sbuf_printf(b, "                    for (int64_t d = 0; d < E; d++) d_ = %s(Q[qo + i * sqi + d * sqd], K[ko + j * skj + d * skd], d_);\n", fma);
    sbuf_printf(b, "                    s = d_ * sc;\n");
    if (mk) sbuf_printf(b, "                    s = s + M[mo + i * smi + j * smj];\n");
    sbuf_printf(b, "                }\n");
    sbuf_printf(b, "                %s cm = s;\n", T);
    sbuf_printf(b, "                for (int o_ = 16; o_ > 0; o_ >>= 1) { const %s y = st_shfl_xor_(cm, o_); cm = (cm != cm || cm > y) ? cm : y; }\n", T);
    sbuf_printf(b, "                const %s mn = (mx != mx || mx > cm) ? mx : cm;\n", T);
    sbuf_printf(b, "                const %s alpha = mx == -INFINITY ? (%s)0 : om_exp(mx - mn);\n", T, T);
    /* mn still -inf (every score so far -inf): weight 0, not exp(-inf - -inf) = NaN, so a later
     * finite key still gives the CPU's answer */
    sbuf_printf(b, "                const %s p = j < n && mn != -INFINITY ? om_exp(s - mn) : (%s)0;\n", T, T);
    sbuf_printf(b, "                %s ps = p;\n", T);
    if (m->dropout)
        sbuf_printf(b, "                const %s pd = j < n && st_rand_uniform_%s(seed, roff + (uint64_t)(row * Lk + j)) >= drop ? p * dsc : (%s)0;\n",
                    T, m->dtype == ST_F64 ? "f64" : "f32", T);
    else
        sbuf_printf(b, "                const %s pd = p;\n", T);
    sbuf_printf(b, "                for (int o_ = 16; o_ > 0; o_ >>= 1) ps += st_shfl_xor_(ps, o_);\n");
    sbuf_printf(b, "                l = l * alpha + ps;\n");
    sbuf_printf(b, "                for (int t = 0; t < %d; t++) acc[t] *= alpha;\n", ATT_EV);
    sbuf_printf(b, "                const int nj = n - j0 < 32 ? (int)(n - j0) : 32;\n");
    sbuf_printf(b, "                for (int jj = 0; jj < nj; jj++) {\n");
    sbuf_printf(b, "                    const %s pj = __shfl_sync(ST_FULL_MASK, pd, jj);\n", T);
    sbuf_printf(b, "                    for (int t = 0; t < %d; t++) {\n", ATT_EV);
    sbuf_printf(b, "                        const int64_t e = e0 + lane + 32 * t;\n");
    sbuf_printf(b, "                        if (e < Ev) acc[t] = %s(pj, V[vo + (j0 + jj) * svj + e * sve], acc[t]);\n", fma);
    sbuf_printf(b, "                    }\n");
    sbuf_printf(b, "                }\n");
    sbuf_printf(b, "                mx = mn;\n");
    sbuf_printf(b, "            }\n");
    sbuf_printf(b, "            for (int t = 0; t < %d; t++) {\n", ATT_EV);
    sbuf_printf(b, "                const int64_t e = e0 + lane + 32 * t;\n");
    sbuf_printf(b, "                if (e < Ev) orow[e] = n > 0 ? acc[t] / l : (%s)0;\n", T);
    sbuf_printf(b, "            }\n");
    sbuf_printf(b, "        }\n");
    sbuf_printf(b, "    }\n");
}

/* ---- the function ---- */
static void render_signature(sbuf *b, const kir_kernel *k, const cuda_launch_desc *d) {
    static const char *modes[] = {"flat", "rows", "matmul", "single block", "horizontal", "columns", "grid",
                                  "attention"};
    const char *r = k->kind == KK_POINTWISE || k->kind == KK_REDUCE ? "__restrict__ " : "";
    sbuf_printf(b, "// stitch kernel: %s; launch: %s\n", k->comment, modes[d->mode]);
    sbuf_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) KNAME(", d->block);
  for (int s = 0; s < k->nbufs; s++) {
      const char *q = k->buf_out[s] ? "" : "const ";
      sbuf_printf(b, "%s%s *%sp%d, ", q, st_dtypes[k->buf_dtype[s]].ctype, r, s);
  }
  for (int i = 0; i < k->nints; i++) sbuf_printf(b, "long long i%d, ", i);
  for (int i = 0; i < k->nflts; i++) sbuf_printf(b, "double f%d, ", i);
  sbuf_printf(b, d->mode == CL_GRID ? "int *err, int rt, unsigned char *scratch) {\n" : "int *err, int rt) {\n");
}

char *render_cuda(const kir_kernel *k, cuda_launch_desc *d) { return render_cuda_sm(k, 0, d); }

char *render_cuda_sm(const kir_kernel *k, int sm, cuda_launch_desc *d) {
    sbuf b = {0};
    uint8_t *live = st_calloc(k->n ? (size_t)k->n : 1, 1);
    if (!live) return NULL;
    cu_ctx c = {k, live, {0}, 0, false};
    int outer = -1;
    render_mark_live(k, live);
    mark_loaded(k, c.loaded);
    plan(&c, d, &outer);
    c.block = d->block;
    c.cols = d->mode == CL_COLS;
    render_signature(&b, k, d);
    switch ((cuda_launch_mode)d->mode) {
    case CL_MATMUL:
        d->tile = MM_T;
        if (!k->mm.epi && cuda_mma_eligible(k, sm)) render_matmul_mma(&b, k, cuda_mm_store_plain);
        else render_matmul(&b, &c);
        break;
    case CL_ATTN: render_attn(&b, &c); break;
    case CL_FLAT: hoisted(&b, &c); render_flat(&b, &c, outer); break;
    case CL_ROWS: hoisted(&b, &c); render_rows(&b, &c, outer); break;
    case CL_COLS: hoisted(&b, &c); render_cols(&b, &c, outer); break;
    case CL_GRID: hoisted(&b, &c); render_grid(&b, &c, outer); break;
    case CL_HORIZONTAL: hoisted(&b, &c); render_horizontal(&b, &c, d); break;
    case CL_SINGLE:
        hoisted(&b, &c);
        if (d->block == 1) render_range(&b, &c, 0, k->n, 1, W_SERIAL);
        else render_phases(&b, &c);
        break;
    }
    sbuf_printf(&b, "}\n");
    st_free(live);
    if (b.oom) {
        st_free(b.s);
        st_error(ST_ERR_OOM, "render_cuda: out of memory");
        return NULL;
    }
    return b.s;
}

/* ---- launch geometry ---- */
static unsigned clamp_blocks(int64_t want, int64_t cap) {
    if (want < 1) want = 1;
    if (cap < 1) cap = 1;
    return (unsigned)(want < cap ? want : cap);
}

/* Threads per row: coop rows take 32 (a warp) up to the block (then one row per block), about
 * 8 elements per thread; other rows the power of two covering the row, up to the block. */
static int pick_rt(bool coop, int64_t len, int block) {
    int rt = coop ? 32 : 1;
    if (len < 0) return block;   /* unknown: assume long */
    if (coop)
        while (rt < block && (int64_t)rt * 8 < len) rt *= 2;
    else
        while (rt < block && rt < len) rt *= 2;
    return rt < block ? rt : block;
}

void cuda_launch_dims(const kir_kernel *k, const cuda_launch_desc *d, const int64_t *ints, int sm_count,
                      unsigned grid[3], unsigned block[3], int *extra_arg) {
    const int64_t sm = sm_count > 0 ? sm_count : 1;
    const int bs = d->block > 0 ? d->block : 1;
    grid[0] = grid[1] = grid[2] = 1;
    block[0] = (unsigned)bs;
    block[1] = block[2] = 1;
    *extra_arg = 0;
    int64_t count = d->count_id >= 0 ? kir_eval_int(k, d->count_id, ints) : 1;
    if (count < 0) count = INT64_MAX;   /* unknown: the grid-stride loops cover any count */
    switch ((cuda_launch_mode)d->mode) {
    case CL_FLAT:
        grid[0] = clamp_blocks(count / bs + (count % bs != 0), sm * CU_THREADS_PER_SM / bs);
        break;
    case CL_ROWS: {
        int64_t len = d->rowlen_id >= 0 ? kir_eval_int(k, d->rowlen_id, ints) : -1;
        bool coop = cuda_kernel_coop(k);
        int rt = pick_rt(coop, len, bs);
        if (coop && rt > 32) block[0] = (unsigned)rt;   /* a row per block: barriers never diverge */
        int64_t per_block = block[0] / (unsigned)rt;
        grid[0] = clamp_blocks(count / per_block + (count % per_block != 0), sm * CU_THREADS_PER_SM / block[0]);
        *extra_arg = rt;
        break;
    }
    case CL_GRID: {   /* a block per 8192 elements, at most 2 per SM and GRID_MAX */
        int64_t len = d->rowlen_id >= 0 ? kir_eval_int(k, d->rowlen_id, ints) : -1;
        int64_t cap = 2 * sm < GRID_MAX ? 2 * sm : GRID_MAX;
        grid[0] = clamp_blocks(len < 0 ? cap : len / 8192 + (len % 8192 != 0), cap);
        *extra_arg = bs;
        break;
    }
    case CL_COLS:   /* COLS_W rows a block, its threads splitting each row */
        grid[0] = clamp_blocks(count / COLS_W + (count % COLS_W != 0), sm * CU_THREADS_PER_SM / bs);
        *extra_arg = bs / COLS_W;
        break;
    case CL_MATMUL: {
        const kir_matmul *m = &k->mm;
        int64_t M = ints[m->p_m], N = ints[m->p_n], NB = 1;
        for (int i = 0; i < m->nbatch; i++) NB *= ints[m->p_bsize + i];
        const int64_t T = d->tile > 0 ? d->tile : MM_T;
        grid[0] = clamp_blocks((N + T - 1) / T, INT32_MAX);
        grid[1] = clamp_blocks((M + T - 1) / T, 65535);
        grid[2] = clamp_blocks(NB, 65535);
        break;
    }
    case CL_ATTN: {   /* a warp per query row */
        const kir_attn *m = &k->at;
        int64_t rows = ints[m->p_lq];
        for (int i = 0; i < m->nbatch; i++) rows *= ints[m->p_bsize + i];
        int64_t wpb = bs / 32 > 0 ? bs / 32 : 1;
        grid[0] = clamp_blocks(rows / wpb + (rows % wpb != 0), sm * CU_THREADS_PER_SM / bs);
        break;
    }
    case CL_HORIZONTAL: {
        int64_t nb = horizontal_blocks(k, d, ints);
        grid[0] = nb > 0 ? clamp_blocks(nb, INT32_MAX) : 0;   /* 0: every part is empty */
        break;
    }
    case CL_SINGLE:
        break;
    }
}
