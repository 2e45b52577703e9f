/*
 * test_render_cuda.c — the CUDA renderer (jit/render_cuda.c) and the prelude under NVRTC.
 *
 * Kernels are built by hand with kir_builder in the shapes fuser/lower.c produces (pointwise 1-D
 * and 2-D, a softmax-like reduce with a cached row, argmax, a float product, a full reduction,
 * scatter_add, setview, matmul of every storage type). Checked:
 *  - kir_eval_int on parameter expressions (and -1 for what is not one);
 *  - the mapping render_cuda picks (mode, block) and cuda_launch_dims' geometry: grid sizes,
 *    threads per row for short and long rows, coop rows never below a warp;
 *  - the text: ABI parameter order, shuffles and barriers in reductions, shared memory in matmul,
 *    a serial scatter accumulation, the float product kept whole on every thread;
 *  - when libnvrtc can be loaded (dlopen; skipped with a message otherwise): every kernel above,
 *    after the prelude, compiles for sm_80 and sm_90 with --fmad=false.
 */
#include "base/base.h"
#include "jit/jit.h"
#include "jit/render.h"
#include "jit/nvrtc.h"
#include "test.h"

#include <stdlib.h>

/* ---- building kernels ---- */
static int ip(kir_builder *b, int key) { return kir_emit(b, KI_IPARAM, KT_I64, 0, key, 0, 0, -1, 0, 0); }
static int ld(kir_builder *b, int slot, st_dtype dt, int idx) {
    return kir_emit(b, KI_LOAD, kir_type_of(dt), 0, slot, idx, -1, -1, dt, 0);
}
static void st(kir_builder *b, int slot, st_dtype dt, int idx, int v) {
    kir_emit(b, KI_STORE, KT_VOID, 0, slot, idx, v, -1, dt, 0);
}
static int op2(kir_builder *b, kir_type t, st_op op, int x, int y) {
    return kir_emit(b, KI_OP, t, op, x, y, -1, -1, 0, 0);
}
static int cvt(kir_builder *b, int v, kir_type t) { return kir_emit(b, KI_CVT, t, 0, v, -1, -1, -1, 0, 0); }
static void bufs(kir_kernel *k, int n, const st_dtype *dts, const uint8_t *out) {
    k->nbufs = n;
    for (int i = 0; i < n; i++) {
        k->buf_dtype[i] = (uint8_t)dts[i];
        k->buf_out[i] = out[i];
    }
}

enum { K_PW1, K_PW2, K_SOFTMAX, K_ARGMAX, K_PROD, K_FULL, K_INTRED, K_READACC, K_SCATTER, K_SETVIEW,
       K_RAND, K_MM_F32, K_MM_F16, K_MM_BF16, K_MM_F64, K_MM_I32, K_MM_BOOL, K_COLSUM, K_COUNT };
static const char *const kname[K_COUNT] = {
    "pw1", "pw2", "softmax", "argmax", "prod", "full", "intred", "readacc", "scatter", "setview",
    "rand", "mm_f32", "mm_f16", "mm_bf16", "mm_f64", "mm_i32", "mm_bool", "colsum"};

/* y = exp(x) * f0, 1-D: ints {n} */
static void build_pw1(kir_builder *b) {
    int n = ip(b, 1);
    int i = kir_loop(b, n, -1, KIR_LOOP_PAR);
    int f = kir_emit(b, KI_FPARAM, KT_F64, 0, 2, 0, 0, -1, 0, 0);
    int x = kir_emit(b, KI_OP, KT_F32, ST_OP_EXP, ld(b, 0, ST_F32, i), -1, -1, -1, 0, 0);
    st(b, 1, ST_F16, i, kir_emit(b, KI_ROUND, KT_F32, 0, op2(b, KT_F32, ST_OP_MUL, x, cvt(b, f, KT_F32)), -1, -1, -1,
                                 ST_F16, 0));
    kir_endloop(b);
    bufs(b->k, 2, (const st_dtype[]){ST_F32, ST_F16}, (const uint8_t[]){0, 1});
}

/* 2-D pointwise as lower_pointwise: rows loop, inner loop over the last dim: ints {rows, last} */
static void build_pw2(kir_builder *b) {
    int rows = ip(b, 1), last = ip(b, 2);
    int r = kir_loop(b, rows, kir_ibin(b, KI_IMUL, rows, last), KIR_LOOP_PAR);
    int base = kir_ibin(b, KI_IMUL, r, last);
    int j = kir_loop(b, last, -1, KIR_LOOP_SERIAL);
    int i = kir_ibin(b, KI_IADD, base, j);
    int bias = ld(b, 1, ST_I32, j);    /* broadcast over rows */
    st(b, 2, ST_I32, i, op2(b, KT_I32, ST_OP_ADD, ld(b, 0, ST_I32, i), bias));
    kir_endloop(b);
    kir_endloop(b);
    bufs(b->k, 3, (const st_dtype[]){ST_I32, ST_I32, ST_I32}, (const uint8_t[]){0, 0, 1});
}

/* softmax over rows as lower_reduce: max phase, sum phase caching e = exp(x - max) in the output,
 * output loop reloading it; the row sum is also an output: ints {rows, nred} */
static void build_softmax(kir_builder *b) {
    int rows = ip(b, 1), nred = ip(b, 2);
    int o = kir_loop(b, rows, kir_ibin(b, KI_IMUL, rows, nred), KIR_LOOP_PAR);
    int mx = kir_emit(b, KI_ACC, KT_F32, 0, kir_fconst(b, KT_F32, -INFINITY), -1, -1, -1, 0, 0);
    int rr = kir_loop(b, nred, -1, KIR_LOOP_SERIAL);
    int flat = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, o, nred), rr);
    kir_emit(b, KI_ACCUPD, KT_VOID, 0, mx, ld(b, 0, ST_F32, flat), -1, -1, ST_OP_RMAX, 0);
    kir_endloop(b);
    int sum = kir_emit(b, KI_ACC, KT_F64, 0, kir_fconst(b, KT_F64, 0), -1, -1, -1, 0, 0);
    rr = kir_loop(b, nred, -1, KIR_LOOP_SERIAL);
    flat = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, o, nred), rr);
    int e = kir_emit(b, KI_OP, KT_F32, ST_OP_EXP, op2(b, KT_F32, ST_OP_SUB, ld(b, 0, ST_F32, flat), mx), -1, -1, -1, 0,
                     0);
    st(b, 1, ST_F32, flat, e);
    kir_emit(b, KI_ACCUPD, KT_VOID, 0, sum, cvt(b, e, KT_F64), -1, -1, ST_OP_RSUM, 0);
    kir_endloop(b);
    int s = cvt(b, sum, KT_F32);
    st(b, 2, ST_F32, o, s);
    rr = kir_loop(b, nred, -1, KIR_LOOP_SERIAL);
    flat = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, o, nred), rr);
    st(b, 1, ST_F32, flat, op2(b, KT_F32, ST_OP_DIV, ld(b, 1, ST_F32, flat), s));
    kir_endloop(b);
    kir_endloop(b);
    bufs(b->k, 3, (const st_dtype[]){ST_F32, ST_F32, ST_F32}, (const uint8_t[]){0, 1, 1});
}

/* argmax over rows of f64: ints {rows, nred} */
static void build_argmax(kir_builder *b) {
    int rows = ip(b, 1), nred = ip(b, 2);
    int o = kir_loop(b, rows, kir_ibin(b, KI_IMUL, rows, nred), KIR_LOOP_PAR);
    int v = kir_emit(b, KI_ACC, KT_F64, 0, kir_fconst(b, KT_F64, 0), -1, -1, -1, 0, 0);
    int ix = kir_emit(b, KI_ACC, KT_I64, 0, kir_iconst(b, KT_I64, -1), -1, -1, -1, 0, 0);
    int rr = kir_loop(b, nred, -1, KIR_LOOP_SERIAL);
    int flat = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, o, nred), rr);
    kir_emit(b, KI_ARGUPD, KT_VOID, 0, v, ix, ld(b, 0, ST_F64, flat), rr, ST_OP_RARGMAX, 0);
    kir_endloop(b);
    st(b, 1, ST_I64, o, ix);
    kir_endloop(b);
    bufs(b->k, 2, (const st_dtype[]){ST_F64, ST_I64}, (const uint8_t[]){0, 1});
}

/* a float product over rows (kept in order) plus a sum (split): ints {rows, nred} */
static void build_prod(kir_builder *b) {
    int rows = ip(b, 1), nred = ip(b, 2);
    int o = kir_loop(b, rows, kir_ibin(b, KI_IMUL, rows, nred), KIR_LOOP_PAR);
    int p = kir_emit(b, KI_ACC, KT_F64, 0, kir_fconst(b, KT_F64, 1), -1, -1, -1, 0, 0);
    int rr = kir_loop(b, nred, -1, KIR_LOOP_SERIAL);
    int flat = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, o, nred), rr);
    kir_emit(b, KI_ACCUPD, KT_VOID, 0, p, cvt(b, ld(b, 0, ST_F32, flat), KT_F64), -1, -1, ST_OP_RPROD, 0);
    kir_endloop(b);
    st(b, 1, ST_F32, o, cvt(b, p, KT_F32));
    kir_endloop(b);
    bufs(b->k, 2, (const st_dtype[]){ST_F32, ST_F32}, (const uint8_t[]){0, 1});
}

/* a full reduction (one row, KIR_LOOP_ROW) of bf16 by sum: ints {1, nred} */
static void build_full(kir_builder *b) {
    int one = ip(b, 1), nred = ip(b, 2);
    int o = kir_loop(b, one, kir_ibin(b, KI_IMUL, one, nred), KIR_LOOP_ROW);
    int s = kir_emit(b, KI_ACC, KT_F64, 0, kir_fconst(b, KT_F64, 0), -1, -1, -1, 0, 0);
    int rr = kir_loop(b, nred, -1, KIR_LOOP_SERIAL);
    kir_emit(b, KI_ACCUPD, KT_VOID, 0, s, cvt(b, ld(b, 0, ST_BF16, rr), KT_F64), -1, -1, ST_OP_RSUM, 0);
    kir_endloop(b);
    st(b, 1, ST_BF16, o, kir_emit(b, KI_ROUND, KT_F32, 0, cvt(b, s, KT_F32), -1, -1, -1, ST_BF16, 0));
    kir_endloop(b);
    bufs(b->k, 2, (const st_dtype[]){ST_BF16, ST_BF16}, (const uint8_t[]){0, 1});
}

/* a column sum (KIR_LOOP_COLS: element rr of output column o at rr * ncols + o): ints {ncols, nred} */
static void build_colsum(kir_builder *b) {
    int ncols = ip(b, 1), nred = ip(b, 2);
    int o = kir_loop(b, ncols, kir_ibin(b, KI_IMUL, ncols, nred), KIR_LOOP_COLS);
    int s = kir_emit(b, KI_ACC, KT_F64, 0, kir_fconst(b, KT_F64, 0), -1, -1, -1, 0, 0);
    int rr = kir_loop(b, nred, -1, KIR_LOOP_SERIAL);
    int at = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, rr, ncols), o);
    kir_emit(b, KI_ACCUPD, KT_VOID, 0, s, cvt(b, ld(b, 0, ST_F32, at), KT_F64), -1, -1, ST_OP_RSUM, 0);
    kir_endloop(b);
    st(b, 1, ST_F32, o, cvt(b, s, KT_F32));
    kir_endloop(b);
    bufs(b->k, 2, (const st_dtype[]){ST_F32, ST_F32}, (const uint8_t[]){0, 1});
}

/* integer reductions in one row loop: i32 max, i64 sum, bool min (and): ints {rows, nred} */
static void build_intred(kir_builder *b) {
    int rows = ip(b, 1), nred = ip(b, 2);
    int o = kir_loop(b, rows, kir_ibin(b, KI_IMUL, rows, nred), KIR_LOOP_PAR);
    int mx = kir_emit(b, KI_ACC, KT_I32, 0, kir_iconst(b, KT_I32, INT32_MIN), -1, -1, -1, 0, 0);
    int sm = kir_emit(b, KI_ACC, KT_I64, 0, kir_iconst(b, KT_I64, 0), -1, -1, -1, 0, 0);
    int mn = kir_emit(b, KI_ACC, KT_U8, 0, kir_iconst(b, KT_U8, 1), -1, -1, -1, 0, 0);
    int rr = kir_loop(b, nred, -1, KIR_LOOP_SERIAL);
    int flat = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, o, nred), rr);
    int x = ld(b, 0, ST_I32, flat);
    kir_emit(b, KI_ACCUPD, KT_VOID, 0, mx, x, -1, -1, ST_OP_RMAX, 0);
    kir_emit(b, KI_ACCUPD, KT_VOID, 0, sm, cvt(b, x, KT_I64), -1, -1, ST_OP_RSUM, 0);
    kir_emit(b, KI_ACCUPD, KT_VOID, 0, mn, cvt(b, x, KT_U8), -1, -1, ST_OP_RMIN, 0);
    kir_endloop(b);
    st(b, 1, ST_I32, o, mx);
    st(b, 2, ST_I64, o, sm);
    st(b, 3, ST_BOOL, o, mn);
    kir_endloop(b);
    bufs(b->k, 4, (const st_dtype[]){ST_I32, ST_I32, ST_I64, ST_BOOL}, (const uint8_t[]){0, 1, 1, 1});
}

/* a loop that stores its running sum (reads the accumulator it updates): cannot be split, stores
 * so cannot run redundantly -> a thread per row. ints {rows, nred} */
static void build_readacc(kir_builder *b) {
    int rows = ip(b, 1), nred = ip(b, 2);
    int o = kir_loop(b, rows, kir_ibin(b, KI_IMUL, rows, nred), KIR_LOOP_PAR);
    int s = kir_emit(b, KI_ACC, KT_F32, 0, kir_fconst(b, KT_F32, 0), -1, -1, -1, 0, 0);
    int rr = kir_loop(b, nred, -1, KIR_LOOP_SERIAL);
    int flat = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, o, nred), rr);
    kir_emit(b, KI_ACCUPD, KT_VOID, 0, s, ld(b, 0, ST_F32, flat), -1, -1, ST_OP_RSUM, 0);
    st(b, 1, ST_F32, flat, s);
    kir_endloop(b);
    kir_endloop(b);
    bufs(b->k, 2, (const st_dtype[]){ST_F32, ST_F32}, (const uint8_t[]){0, 1});
}

/* scatter_add along dim 0 of a 1-D output, as lower_scatter: ints {nout, nidx} */
static void build_scatter(kir_builder *b) {
    int nout = ip(b, 1), nidx = ip(b, 2);
    int i = kir_loop(b, nout, -1, KIR_LOOP_PAR);
    st(b, 3, ST_F32, i, ld(b, 0, ST_F32, i));
    kir_endloop(b);
    int f = kir_loop(b, nidx, -1, KIR_LOOP_SERIAL);
    int iv = cvt(b, ld(b, 1, ST_I32, f), KT_I64);
    int valid = kir_ibin(b, KI_LAND, kir_ibin(b, KI_ILE, kir_iconst(b, KT_I64, 0), iv), kir_ibin(b, KI_ILT, iv, nout));
    kir_emit(b, KI_SETERR, KT_VOID, 0, valid, -1, -1, -1, 0, 0);
    kir_if(b, valid);
    st(b, 3, ST_F32, iv, op2(b, KT_F32, ST_OP_ADD, ld(b, 3, ST_F32, iv), ld(b, 2, ST_F32, f)));
    kir_endif(b);
    kir_endloop(b);
    bufs(b->k, 4, (const st_dtype[]){ST_F32, ST_I32, ST_F32, ST_F32}, (const uint8_t[]){0, 0, 0, 1});
}

/* setview, not in place: copy, then write the strided region: ints {nout, nval, off, stride} */
static void build_setview(kir_builder *b) {
    int nout = ip(b, 1), nval = ip(b, 2), off = ip(b, 3), str = ip(b, 4);
    int i = kir_loop(b, nout, -1, KIR_LOOP_PAR);
    st(b, 2, ST_F16, i, ld(b, 0, ST_F16, i));
    kir_endloop(b);
    int f = kir_loop(b, nval, -1, KIR_LOOP_PAR);
    st(b, 2, ST_F16, kir_ibin(b, KI_IADD, off, kir_ibin(b, KI_IMUL, f, str)), ld(b, 1, ST_F16, f));
    kir_endloop(b);
    bufs(b->k, 3, (const st_dtype[]){ST_F16, ST_F16, ST_F16}, (const uint8_t[]){0, 0, 1});
}

/* random normals and ints: ints {n, seed, off, lo, hi} */
static void build_rand(kir_builder *b) {
    int n = ip(b, 1), seed = ip(b, 2), off = ip(b, 3), lo = ip(b, 4), hi = ip(b, 5);
    int i = kir_loop(b, n, -1, KIR_LOOP_PAR);
    int ctr = kir_ibin(b, KI_IADD, off, i);
    st(b, 0, ST_F64, i, kir_emit(b, KI_RAND, KT_F64, ST_OP_RAND_N, seed, ctr, -1, -1, 0, 0));
    st(b, 1, ST_I32, i, cvt(b, kir_emit(b, KI_RAND, KT_I64, ST_OP_RAND_INT, seed, ctr, lo, hi, 0, 0), KT_I32));
    int u = kir_emit(b, KI_RAND, KT_F32, ST_OP_RAND_U, seed, ctr, -1, -1, 0, 0);
    st(b, 2, ST_BOOL, i, op2(b, KT_U8, ST_OP_LT, u, kir_fconst(b, KT_F32, 0.5)));
    kir_endloop(b);
    bufs(b->k, 3, (const st_dtype[]){ST_F64, ST_I32, ST_BOOL}, (const uint8_t[]){1, 1, 1});
}

/* matmul with one batch dim: ints {M, N, K, B, astr(b, m, k), bstr(b, k, n), aoff, boff} */
static void build_mm(kir_kernel *k, st_dtype dt) {
    kir_matmul *m = &k->mm;
    m->dtype = dt;
    m->nbatch = 1;
    m->a_buf = 0;
    m->b_buf = 1;
    m->o_buf = 2;
    m->p_m = 0;
    m->p_n = 1;
    m->p_k = 2;
    m->p_bsize = 3;
    m->p_astr = 4;
    m->p_bstr = 7;
    m->p_aoff = 10;
    m->p_boff = 11;
    m->b_unit = dt == ST_F32;
    k->nints = 12;
    bufs(k, 3, (const st_dtype[]){dt, dt, dt}, (const uint8_t[]){0, 0, 1});
}

static kir_kernel kernels[K_COUNT];
static char *srcs[K_COUNT];
static cuda_launch_desc descs[K_COUNT];

static void build_all(void) {
    for (int i = 0; i < K_COUNT; i++) {
        kir_builder b;
        static const kir_kind kinds[K_COUNT] = {
            [K_SCATTER] = KK_SCATTER, [K_SETVIEW] = KK_SETVIEW, [K_SOFTMAX] = KK_REDUCE, [K_ARGMAX] = KK_REDUCE,
            [K_PROD] = KK_REDUCE, [K_FULL] = KK_REDUCE, [K_INTRED] = KK_REDUCE, [K_READACC] = KK_REDUCE,
            [K_MM_F32] = KK_MATMUL, [K_MM_F16] = KK_MATMUL, [K_MM_BF16] = KK_MATMUL, [K_MM_F64] = KK_MATMUL,
            [K_MM_I32] = KK_MATMUL, [K_MM_BOOL] = KK_MATMUL};
        if (kir_builder_init(&b, &kernels[i], kinds[i]) != ST_OK) continue;
        snprintf(kernels[i].comment, sizeof kernels[i].comment, "%s", kname[i]);
        switch (i) {
        case K_PW1: build_pw1(&b); break;
        case K_PW2: build_pw2(&b); break;
        case K_SOFTMAX: build_softmax(&b); break;
        case K_ARGMAX: build_argmax(&b); break;
        case K_PROD: build_prod(&b); break;
        case K_FULL: build_full(&b); break;
        case K_COLSUM: build_colsum(&b); break;
        case K_INTRED: build_intred(&b); break;
        case K_READACC: build_readacc(&b); break;
        case K_SCATTER: build_scatter(&b); break;
        case K_SETVIEW: build_setview(&b); break;
        case K_RAND: build_rand(&b); break;
        case K_MM_F32: build_mm(&kernels[i], ST_F32); break;
        case K_MM_F16: build_mm(&kernels[i], ST_F16); break;
        case K_MM_BF16: build_mm(&kernels[i], ST_BF16); break;
        case K_MM_F64: build_mm(&kernels[i], ST_F64); break;
        case K_MM_I32: build_mm(&kernels[i], ST_I32); break;
        default: build_mm(&kernels[i], ST_BOOL); break;
        }
        kir_builder_free(&b);
        srcs[i] = render_cuda(&kernels[i], &descs[i]);
    }
}

/* ---- tests ---- */
TEST(eval_int) {
    kir_kernel k;
    kir_builder b;
    CHECK(kir_builder_init(&b, &k, KK_POINTWISE) == ST_OK);
    int p0 = ip(&b, 1), p1 = ip(&b, 2), c3 = kir_iconst(&b, KT_I64, 3);
    int mul = kir_ibin(&b, KI_IMUL, p0, p1), add = kir_ibin(&b, KI_IADD, mul, c3);
    int dv = kir_ibin(&b, KI_IDIV, add, p1), md = kir_ibin(&b, KI_IMOD, add, p1);
    int sub = kir_ibin(&b, KI_ISUB, add, c3);
    int dz = kir_ibin(&b, KI_IDIV, add, kir_ibin(&b, KI_ISUB, p1, p1));
    int lp = kir_loop(&b, add, -1, KIR_LOOP_PAR);
    int load = ld(&b, 0, ST_F32, lp);
    int idx = kir_ibin(&b, KI_IADD, lp, p0);
    kir_endloop(&b);
    kir_builder_free(&b);
    const int64_t ints[2] = {6, 7};
    CHECK_EQ_INT(kir_eval_int(&k, p0, ints), 6);
    CHECK_EQ_INT(kir_eval_int(&k, c3, ints), 3);
    CHECK_EQ_INT(kir_eval_int(&k, mul, ints), 42);
    CHECK_EQ_INT(kir_eval_int(&k, add, ints), 45);
    CHECK_EQ_INT(kir_eval_int(&k, dv, ints), 6);
    CHECK_EQ_INT(kir_eval_int(&k, md, ints), 3);
    CHECK_EQ_INT(kir_eval_int(&k, sub, ints), 42);
    CHECK_EQ_INT(kir_eval_int(&k, dz, ints), -1);     /* division by zero: not a value */
    CHECK_EQ_INT(kir_eval_int(&k, lp, ints), -1);     /* a loop index */
    CHECK_EQ_INT(kir_eval_int(&k, load, ints), -1);
    CHECK_EQ_INT(kir_eval_int(&k, idx, ints), -1);
    CHECK_EQ_INT(kir_eval_int(&k, -1, ints), -1);
    CHECK_EQ_INT(kir_eval_int(&k, k.n + 5, ints), -1);
    kir_kernel_free(&k);
}

TEST(modes) {
    for (int i = 0; i < K_COUNT; i++) CHECK_MSG(srcs[i] != NULL, "%s: not rendered", kname[i]);
    static const struct { int k, mode, block; } want[] = {
        {K_PW1, CL_FLAT, 256},      {K_PW2, CL_ROWS, 256},      {K_SOFTMAX, CL_ROWS, 256},
        {K_ARGMAX, CL_ROWS, 256},   {K_PROD, CL_ROWS, 256},     {K_FULL, CL_GRID, 1024},
        {K_INTRED, CL_ROWS, 256},   {K_READACC, CL_FLAT, 256},  {K_SCATTER, CL_SINGLE, 1024},
        {K_SETVIEW, CL_SINGLE, 1024}, {K_RAND, CL_FLAT, 256},   {K_MM_F32, CL_MATMUL, 256},
        {K_MM_BOOL, CL_MATMUL, 256}, {K_COLSUM, CL_COLS, 1024}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const cuda_launch_desc *d = &descs[want[i].k];
        CHECK_MSG(d->mode == want[i].mode && d->block == want[i].block, "%s: mode %d block %d, expected %d %d",
                  kname[want[i].k], d->mode, d->block, want[i].mode, want[i].block);
    }
    /* counts are the outer loops' counts, row lengths the inner loops' */
    const int64_t ints[2] = {1000, 77};
    CHECK_EQ_INT(kir_eval_int(&kernels[K_PW1], descs[K_PW1].count_id, ints), 1000);
    CHECK_EQ_INT(kir_eval_int(&kernels[K_SOFTMAX], descs[K_SOFTMAX].count_id, ints), 1000);
    CHECK_EQ_INT(kir_eval_int(&kernels[K_SOFTMAX], descs[K_SOFTMAX].rowlen_id, ints), 77);
    CHECK_EQ_INT(descs[K_MM_F32].count_id, -1);
}

static void dims(int kid, const int64_t *ints, int sm, unsigned g[3], unsigned bl[3], int *rt) {
    cuda_launch_dims(&kernels[kid], &descs[kid], ints, sm, g, bl, rt);
}

TEST(launch_dims) {
    unsigned g[3], bl[3];
    int rt;
    /* flat: one thread per element up to 8192 threads per SM, then grid-stride */
    dims(K_PW1, (const int64_t[]){1000000}, 132, g, bl, &rt);
    CHECK_EQ_INT(g[0], 3907);
    CHECK_EQ_INT(bl[0], 256);
    CHECK_EQ_INT(rt, 0);
    dims(K_PW1, (const int64_t[]){1000000000}, 132, g, bl, &rt);
    CHECK_EQ_INT(g[0], 132 * 32);
    dims(K_PW1, (const int64_t[]){0}, 132, g, bl, &rt);
    CHECK_EQ_INT(g[0], 1);
    /* coop rows: a warp per short row (8 rows a block) ... */
    dims(K_SOFTMAX, (const int64_t[]){4096, 100}, 132, g, bl, &rt);
    CHECK_EQ_INT(rt, 32);
    CHECK_EQ_INT(bl[0], 256);
    CHECK_EQ_INT(g[0], 512);
    dims(K_SOFTMAX, (const int64_t[]){4096, 3}, 132, g, bl, &rt);
    CHECK_EQ_INT(rt, 32);   /* never below a warp: the butterfly needs the whole warp */
    /* ... a block per long row, the block as large as the row needs */
    dims(K_SOFTMAX, (const int64_t[]){4096, 1000}, 132, g, bl, &rt);
    CHECK_EQ_INT(rt, 128);
    CHECK_EQ_INT(bl[0], 128);
    CHECK_EQ_INT(g[0], 4096);
    dims(K_SOFTMAX, (const int64_t[]){10, 100000}, 132, g, bl, &rt);
    CHECK_EQ_INT(rt, 256);
    CHECK_EQ_INT(bl[0], 256);
    CHECK_EQ_INT(g[0], 10);
    /* the full reduction (CL_GRID): a block of 1024 per 8192 elements, at most 2 per SM */
    dims(K_FULL, (const int64_t[]){1, 1 << 24}, 132, g, bl, &rt);
    CHECK_EQ_INT(rt, 1024);
    CHECK_EQ_INT(bl[0], 1024);
    CHECK_EQ_INT(g[0], 264);
    dims(K_FULL, (const int64_t[]){1, 8193}, 132, g, bl, &rt);
    CHECK_EQ_INT(g[0], 2);
    dims(K_FULL, (const int64_t[]){1, 5}, 132, g, bl, &rt);
    CHECK_EQ_INT(g[0], 1);
    CHECK(descs[K_FULL].scratch == 256 + 1024 * 8);   /* the counter, then one accumulator's partials */
    /* column sums (CL_COLS): 8 columns a block, the block's 128 threads of a column splitting it */
    dims(K_COLSUM, (const int64_t[]){1000, 5000}, 132, g, bl, &rt);
    CHECK_EQ_INT(bl[0], 1024);
    CHECK_EQ_INT(rt, 128);
    CHECK_EQ_INT(g[0], 125);
    /* non-coop rows (2-D pointwise): the power of two covering the row, many rows a block */
    dims(K_PW2, (const int64_t[]){1000, 3}, 132, g, bl, &rt);
    CHECK_EQ_INT(rt, 4);
    CHECK_EQ_INT(bl[0], 256);
    CHECK_EQ_INT(g[0], 16);
    dims(K_PW2, (const int64_t[]){1000, 5000}, 132, g, bl, &rt);
    CHECK_EQ_INT(rt, 256);
    CHECK_EQ_INT(g[0], 1000);
    /* matmul: 64x64 tiles on CUDA cores (the launch description's tile), batch in z */
    int64_t mm[12] = {100, 200, 30, 3, 6000, 30, 1, 6000, 200, 1, 0, 0};
    dims(K_MM_F32, mm, 132, g, bl, &rt);
    CHECK_EQ_INT(descs[K_MM_F32].tile, 64);
    CHECK_EQ_INT(g[0], 4);
    CHECK_EQ_INT(g[1], 2);
    CHECK_EQ_INT(g[2], 3);
    CHECK_EQ_INT(bl[0], 256);
    dims(K_MM_F64, mm, 132, g, bl, &rt);
    CHECK_EQ_INT(descs[K_MM_F64].tile, 64);
    CHECK_EQ_INT(g[0], 4);
    CHECK_EQ_INT(g[1], 2);
    mm[3] = 100000;
    mm[0] = 128 * 70000;
    dims(K_MM_F32, mm, 132, g, bl, &rt);
    CHECK_EQ_INT(g[1], 65535);   /* grid-strided in the kernel */
    CHECK_EQ_INT(g[2], 65535);
    /* single block */
    dims(K_SCATTER, (const int64_t[]){10, 20}, 132, g, bl, &rt);
    CHECK_EQ_INT(g[0], 1);
    CHECK_EQ_INT(bl[0], 1024);
}

TEST(source_structure) {
    if (!srcs[K_SOFTMAX] || !srcs[K_MM_F16] || !srcs[K_PW1]) {
        CHECK(0);
        return;
    }
    /* ABI order: buffers (const inputs), ints, floats, err, rt */
    CHECK(strstr(srcs[K_PW1], "KNAME(const float *__restrict__ p0, uint16_t *__restrict__ p1, long long i0, "
                              "double f0, int *err, int rt)"));
    CHECK(strstr(srcs[K_SCATTER], "KNAME(const float *p0, const int32_t *p1, const float *p2, float *p3, long long "
                                  "i0, long long i1, int *err, int rt)"));
    CHECK(strstr(srcs[K_PW1], "extern \"C\" __global__ void __launch_bounds__(256) KNAME("));
    /* reductions: butterfly shuffles, cross-warp shared memory, broadcast, row barrier after the
     * cached row is stored (the output loop reads it) */
    CHECK(strstr(srcs[K_SOFTMAX], "st_shfl_xor_("));
    CHECK(strstr(srcs[K_SOFTMAX], "__shared__ double"));
    CHECK(strstr(srcs[K_SOFTMAX], "st_shfl0_("));
    CHECK(strstr(srcs[K_SOFTMAX], "ST_ROW_SYNC(rt);"));
    CHECK(strstr(srcs[K_SOFTMAX], "if (r_lane == 0) p2["));
    CHECK(strstr(srcs[K_SOFTMAX], "+= rt)"));
    CHECK(strstr(srcs[K_ARGMAX], "st_arg_merge_("));
    /* the float product runs whole on each thread of the row; no shuffle for it */
    CHECK(strstr(srcs[K_PROD], "on every thread of the row"));
    CHECK(!strstr(srcs[K_PROD], "st_shfl_xor_("));
    /* 2-D pointwise: split inner loop, no combine, no barrier */
    CHECK(strstr(srcs[K_PW2], "+= rt)"));
    CHECK(!strstr(srcs[K_PW2], "__syncthreads") && !strstr(srcs[K_PW2], "ST_ROW_SYNC"));
    /* matmul: shared tiles, f16 conversions, float accumulation in k order */
    CHECK(strstr(srcs[K_MM_F16], "__shared__ float As["));
    CHECK(strstr(srcs[K_MM_F16], "st_h2f(A["));
    CHECK(strstr(srcs[K_MM_F16], "st_f2h(acc[i][j])"));
    CHECK(strstr(srcs[K_MM_F16], "acc[i][j] = fmaf(a[i], bv[j], acc[i][j])"));   /* the CPU GEMM's fma */
    CHECK(strstr(srcs[K_MM_I32], "uint64_t acc[4][4]"));
    CHECK(strstr(srcs[K_MM_F64], "double acc[4][4]"));
    CHECK(strstr(srcs[K_MM_F64], "acc[i][j] = fma(a[i], bv[j], acc[i][j])"));
    CHECK(strstr(srcs[K_MM_I32], "acc[i][j] = acc[i][j] + a[i] * bv[j]"));   /* integers: no fma */
    /* scatter: the copy split over the block, the accumulation on thread 0, a barrier between */
    CHECK(strstr(srcs[K_SCATTER], "+= blockDim.x)"));
    CHECK(strstr(srcs[K_SCATTER], "if (threadIdx.x == 0) {"));
    CHECK(strstr(srcs[K_SCATTER], "__syncthreads();"));
    CHECK(strstr(srcs[K_SCATTER], "*err = 1;"));
    /* the text depends on the IR only */
    cuda_launch_desc d2;
    char *again = render_cuda(&kernels[K_SOFTMAX], &d2);
    CHECK(again && !strcmp(again, srcs[K_SOFTMAX]));
    st_free(again);
}

/* ---- NVRTC, through the project's loader (jit/nvrtc.c: dlopen, never unloaded, the fixed
 * options) and the check mode's translation-unit layout (nvrtc_unit) ---- */

/* Compiles unit for arch; returns NULL on success or the log (malloc'ed). */
static char *nvrtc_build(const char *unit, const char *arch) {
    char *log = NULL;
    double ms;
    int rc = nvrtc_try(unit, arch, "test_render_cuda", NULL, NULL, &log, &ms);
    if (!rc) {
        free(log);
        return NULL;
    }
    if (log && *log) return log;
    free(log);
    return strdup(nvrtc_result_name(rc));
}

TEST(nvrtc_compiles) {
    if (nvrtc_load() != ST_OK) {
        printf("skip nvrtc_compiles: %s\n", st_last_error());
        st_clear_error();
        return;
    }
    static const char *const archs[] = {"sm_80", "sm_90"};
    for (int a = 0; a < 2; a++) { /* the prelude alone */
        char *log = nvrtc_build(st_prelude_src, archs[a]);
        CHECK_MSG(!log, "prelude alone, %s: %.300s", archs[a], log ? log : "");
        free(log);
    }
    const char *ks[K_COUNT], *kn[K_COUNT];
    int n = 0;
    for (int i = 0; i < K_COUNT; i++)
        if (srcs[i]) {
            ks[n] = srcs[i];
            kn[n++] = kname[i];
        }
    char *unit = nvrtc_unit(n, ks, kn, NULL, 1); /* then every kernel in one program */
    CHECK(unit != NULL);
    for (int a = 0; unit && a < 2; a++) {
        char *log = nvrtc_build(unit, archs[a]);
        CHECK_MSG(!log, "kernels, %s: %.300s", archs[a], log ? log : "");
        free(log);
    }
    free(unit);
}

int main(void) {
    build_all();
    RUN(eval_int);
    RUN(modes);
    RUN(launch_dims);
    RUN(source_structure);
    RUN(nvrtc_compiles);
    for (int i = 0; i < K_COUNT; i++) {
        st_free(srcs[i]);
        kir_kernel_free(&kernels[i]);
    }
    st_shutdown();
    TEST_MAIN_END();
}
