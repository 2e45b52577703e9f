/*
 * interp.c — the reference interpreter: executes a region op by op with plain loops. It is the
 * oracle every fused kernel is checked against, so it is written to be obviously correct first
 * and only then reasonably fast (a switch on the op outside every element loop, values handled
 * in chunks of CHUNK elements).
 *
 * Invariants: every op's math comes from base/opmath.h (the X-macro over trace/ops.def's MATH
 * column), the same code the JIT compiles, so the interpreter and kernels agree bit for bit on
 * elementwise ops. Values are computed in compute types (float for f32/f16/bf16, double, int32_t,
 * int64_t, uint8_t for bool) and rounded to the storage type only at the store. Indices are
 * int64_t throughout and zero-size tensors are fine. Float sums and products accumulate in double
 * (accuracy over speed); float matmuls run the prelude's GEMM (compute-type accumulation), the
 * same code as the JIT's matmul kernels, so the two agree bit for bit.
 */
#include "trace/trace.h"
#include "base/opmath.h"
#include "base/gemm.h"
#include "device/cpu_pool.h"
#include "trace/interp_ew.h"

#include <stdatomic.h>

/* ---- compute types (ctype: trace/interp_ew.h) ---- */
static ctype ct_of(st_dtype dt) {
    switch (dt) {
    case ST_F64: return CT_F64;
    case ST_I32: return CT_I32;
    case ST_I64: return CT_I64;
    case ST_BOOL: return CT_U8;
    default: return CT_F32; /* f32, f16, bf16 */
    }
}

/* Bytes of one compute value. */
static size_t ct_size(ctype ct) {
    static const size_t sz[] = {4, 8, 4, 8, 1};
    return sz[ct];
}

/* dt's storage is exactly compute type ct's values (so a buffer of dt can be read as ct in place). */
static bool in_place_as(st_dtype dt, ctype ct) {
    switch (dt) {
    case ST_F32: return ct == CT_F32;
    case ST_F64: return ct == CT_F64;
    case ST_I32: return ct == CT_I32;
    case ST_I64: return ct == CT_I64;
    case ST_BOOL: return ct == CT_U8;
    default: return false;
    }
}

#define CHUNK 1024
typedef union chunk {
    float f[CHUNK];
    double d[CHUNK];
    int32_t i[CHUNK];
    int64_t l[CHUNK];
    uint8_t b[CHUNK];
} chunk;

/* Elements between two interrupt checks inside long loops. */
#define CHECK_EVERY ((int64_t)1 << 20)

static st_status check_interrupt(void) {
    if (!st_rt.interrupted) return ST_OK;
    st_rt.interrupted = 0;
    return st_error(ST_ERR_INTERRUPT, "interrupted");
}

/* ---- loads and stores: storage <-> compute type, n <= CHUNK elements at flat index start ---- */
static void load_chunk(st_dtype dt, const void *base, int64_t start, int64_t n, void *dst) {
    if (n <= 0) return;
    if (dt == ST_F16 || dt == ST_BF16) {
        const uint16_t *s = (const uint16_t *)base + start;
        float *d = dst;
        if (dt == ST_F16) for (int64_t i = 0; i < n; i++) d[i] = st_h2f(s[i]);
        else for (int64_t i = 0; i < n; i++) d[i] = st_bf2f(s[i]);
        return;
    }
    size_t es = st_dtypes[dt].size;
    memcpy(dst, (const char *)base + (size_t)start * es, (size_t)n * es);
}

/* src holds compute values of dt's compute type. */
static void store_chunk(st_dtype dt, void *base, int64_t start, int64_t n, const void *src) {
    if (n <= 0) return;
    if (dt == ST_F16 || dt == ST_BF16) {
        uint16_t *d = (uint16_t *)base + start;
        const float *s = src;
        if (dt == ST_F16) for (int64_t i = 0; i < n; i++) d[i] = st_f2h(s[i]);
        else for (int64_t i = 0; i < n; i++) d[i] = st_f2bf(s[i]);
        return;
    }
    if (dt == ST_BOOL) {
        uint8_t *d = (uint8_t *)base + start;
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = s[i] != 0;
        return;
    }
    size_t es = st_dtypes[dt].size;
    memcpy((char *)base + (size_t)start * es, src, (size_t)n * es);
}

/* Converts n compute values between compute types with the prelude's ST_CVT (CAST semantics). */
#define CVT_LOOP(TF, TT)                                                                        \
    do {                                                                                        \
        const TF *s_ = src;                                                                     \
        TT *d_ = dst;                                                                           \
        for (int64_t i = 0; i < n; i++) d_[i] = ST_CVT(TT, s_[i]);                              \
    } while (0)
#define CVT_TO(TF)                                                                              \
    switch (to) {                                                                               \
    case CT_F32: CVT_LOOP(TF, float); break;                                                    \
    case CT_F64: CVT_LOOP(TF, double); break;                                                   \
    case CT_I32: CVT_LOOP(TF, int32_t); break;                                                  \
    case CT_I64: CVT_LOOP(TF, int64_t); break;                                                  \
    case CT_U8: CVT_LOOP(TF, uint8_t); break;                                                   \
    }
static void cvt_chunk(ctype from, ctype to, const void *src, void *dst, int64_t n) {
    switch (from) {
    case CT_F32: CVT_TO(float); break;
    case CT_F64: CVT_TO(double); break;
    case CT_I32: CVT_TO(int32_t); break;
    case CT_I64: CVT_TO(int64_t); break;
    case CT_U8: CVT_TO(uint8_t); break;
    }
}

/* Loads n elements (any n) of storage dtype dt from flat index start as compute type `to`. */
static void load_as(st_dtype dt, const void *base, int64_t start, int64_t n, ctype to, void *dst) {
    static const size_t ctsz[] = {4, 8, 4, 8, 1};
    ctype own = ct_of(dt);
    chunk tmp;
    for (int64_t o = 0; o < n; o += CHUNK) {
        int64_t m = n - o < CHUNK ? n - o : CHUNK;
        char *d = (char *)dst + (size_t)o * ctsz[to];
        if (own == to) {
            load_chunk(dt, base, start + o, m, d);
        } else {
            load_chunk(dt, base, start + o, m, &tmp);
            cvt_chunk(own, to, &tmp, d, m);
        }
    }
}

/* Stores n compute values of type `from` (converted like CAST) at flat index start. */
static void store_as(ctype from, const void *src, int64_t n, st_dtype dt, void *base, int64_t start) {
    static const size_t ctsz[] = {4, 8, 4, 8, 1};
    ctype own = ct_of(dt);
    chunk tmp;
    for (int64_t o = 0; o < n; o += CHUNK) {
        int64_t m = n - o < CHUNK ? n - o : CHUNK;
        const char *s = (const char *)src + (size_t)o * ctsz[from];
        if (own == from) {
            store_chunk(dt, base, start + o, m, s);
        } else {
            cvt_chunk(from, own, s, &tmp, m);
            store_chunk(dt, base, start + o, m, &tmp);
        }
    }
}

/* Copies one element of es bytes. */
static inline void copy_elem(size_t es, void *dst, int64_t di, const void *src, int64_t si) {
    switch (es) {
    case 1: ((uint8_t *)dst)[di] = ((const uint8_t *)src)[si]; break;
    case 2: ((uint16_t *)dst)[di] = ((const uint16_t *)src)[si]; break;
    case 4: ((uint32_t *)dst)[di] = ((const uint32_t *)src)[si]; break;
    default: ((uint64_t *)dst)[di] = ((const uint64_t *)src)[si]; break;
    }
}
static inline void zero_elem(size_t es, void *dst, int64_t di) {
    memset((char *)dst + (size_t)di * es, 0, es);
}

/* Advances the C-order multi-index idx over shape, keeping *off = sum idx[d] * st[d] (+ base). */
static inline void idx_next(int nd, const int64_t *shape, int64_t *idx, const int64_t *st,
                            int64_t *off) {
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) {
            *off += st[d];
            return;
        }
        *off -= st[d] * (shape[d] - 1);
        idx[d] = 0;
    }
}

/* ---- elementwise ops: trace/interp_ew_fns.h, this ISA's copy (ew_base) and, where the CPU has
 * AVX-512, interp_ew.c's (vectorized), else with AVX2 and FMA interp_ew_avx2.c's: the same
 * operations, the same bits ---- */
#define EW_TABLES ew_base
#include "trace/interp_ew_fns.h"
#undef EW_TABLES

const ew_tables *st_interp_ew_base(void) { return &ew_base; }

static const ew_tables *ew_pick(void) {
    static const ew_tables *t;
    if (!t) {
        const ew_tables *v = st_interp_ew_avx512();
        if (!v) v = st_interp_ew_avx2();
        t = v ? v : &ew_base;
    }
    return t;
}

static st_status bad_node(const st_node *n, const char *why) {
    return st_error(ST_ERR_INTERNAL, "interp: %s node: %s", st_ops[n->op].name, why);
}

const void *interp_broadcast_elem(const st_node *n) {
    if (!interp_strided_view(n)) return NULL;
    for (int d = 0; d < n->ndim; d++)
        if (n->arg.view.strides[d] != 0 && n->shape[d] != 1) return NULL;
    return (const char *)n->src[0]->buf->data + (size_t)n->arg.view.offset * st_dtypes[n->dtype].size;
}

bool interp_strided_view(const st_node *n) {
    if (n->op != ST_OP_VIEW || n->arg.view.has_mask || n->numel < 1) return false;
    const st_node *s = n->src[0];
    if (!s->buf || s->dtype != n->dtype) return false;
    int64_t lo = n->arg.view.offset, hi = lo;
    for (int d = 0; d < n->ndim; d++) {
        const int64_t r = (n->shape[d] - 1) * n->arg.view.strides[d];
        if (r < 0) lo += r;
        else hi += r;
    }
    return lo >= 0 && hi < s->numel;
}

static st_status eval_elementwise(st_node *n, st_buffer *out) {
    int ns = st_ops[n->op].nsrc;
    st_op op = (st_op)n->op;
    st_dtype sdt = (st_dtype)(op == ST_OP_WHERE ? n->src[1]->dtype : n->src[0]->dtype);
    ctype ct = ct_of(sdt), oct = ct_of((st_dtype)n->dtype);
    for (int k = 0; k < ns; k++)
        if (n->src[k]->numel != n->numel) return bad_node(n, "a src's shape differs from the node's");
    const ew_tables *T = ew_pick();
    int have = op == ST_OP_CAST || (op == ST_OP_WHERE ? T->t3[op] != NULL
                                    : ns == 2 ? T->t2[op] != NULL : T->t1[op] != NULL);
    if (!have) return bad_node(n, "no elementwise function");
    /* A source stored as its compute values (f32, f64, i32, i64, and bool read as u8) is read in
     * place, and a result stored as computed is written in place: no chunk copies (the loops
     * read and write each element at its own index, so an output over a source is fine). */
    /* A source left unevaluated as a broadcast of one element (fuser/exec.c, run_interp_pgroup) is
     * that element in every lane of a chunk, filled once. */
    const void *srcp[3] = {NULL, NULL, NULL};
    bool filled[3] = {false, false, false};
    chunk in[3], res, conv;
    for (int k = 0; k < ns; k++) {
        ctype want = (op == ST_OP_WHERE && k == 0) ? CT_U8 : ct;
        const st_node *s = n->src[k];
        if (!s->buf) {
            const void *e = interp_broadcast_elem(s);
            if (!e) return bad_node(n, "a src has no buffer");
            const size_t w = ct_size(want);
            load_as((st_dtype)s->dtype, e, 0, 1, want, &in[k]);
            for (int64_t i = 1; i < CHUNK; i++) memcpy(in[k].b + i * w, in[k].b, w);
            filled[k] = true;
        } else if (in_place_as((st_dtype)s->dtype, want)) {
            srcp[k] = s->buf->data;
        }
    }
    const size_t cs = ct_size(ct);
    const bool out_direct = op != ST_OP_CAST && ct == oct && n->dtype != ST_BOOL &&
                            in_place_as((st_dtype)n->dtype, oct);
    for (int64_t start = 0; start < n->numel; start += CHUNK) {
        int64_t m = n->numel - start < CHUNK ? n->numel - start : CHUNK;
        if (start && start % CHECK_EVERY == 0 && st_rt.interrupted) return check_interrupt();
        const void *a[3];
        for (int k = 0; k < ns; k++) {
            ctype want = (op == ST_OP_WHERE && k == 0) ? CT_U8 : ct;
            const st_node *s = n->src[k];
            if (filled[k]) {
                a[k] = &in[k];
            } else if (srcp[k]) {
                a[k] = (const char *)srcp[k] + (size_t)start * ct_size(want);
            } else {
                load_as((st_dtype)s->dtype, s->buf->data, start, m, want, &in[k]);
                a[k] = &in[k];
            }
        }
        void *o = out_direct ? (char *)out->data + (size_t)start * cs : (void *)&res;
        const void *r = o;
        if (op == ST_OP_CAST) r = a[0];
        else if (op == ST_OP_WHERE) T->t3[op](ct, a[0], a[1], a[2], o, m);
        else if (ns == 2) T->t2[op](ct, a[0], a[1], o, m);
        else T->t1[op](ct, a[0], o, m);
        if (out_direct) continue;
        if (ct != oct) {
            cvt_chunk(ct, oct, r, &conv, m);
            r = &conv;
        }
        store_chunk((st_dtype)n->dtype, out->data, start, m, r);
    }
    return ST_OK;
}

/* ---- sources ---- */
static st_status eval_source(st_node *n, st_buffer *out) {
    st_dtype dt = (st_dtype)n->dtype;
    bool isf = st_is_float(dt);
    chunk v;
    int ax = n->arg.iota.axis;
    int64_t inner = 1;
    if (n->op == ST_OP_IOTA) {
        if (n->ndim > 0 && (ax < 0 || ax >= n->ndim)) return bad_node(n, "iota axis out of range");
        for (int d = ax + 1; d < n->ndim; d++) inner *= n->shape[d];
    }
    for (int64_t start = 0; start < n->numel; start += CHUNK) {
        int64_t m = n->numel - start < CHUNK ? n->numel - start : CHUNK;
        if (start && start % CHECK_EVERY == 0 && st_rt.interrupted) return check_interrupt();
        ctype from = CT_F64;
        switch (n->op) {
        case ST_OP_CONST:
            if (isf) for (int64_t i = 0; i < m; i++) v.d[i] = n->arg.c.f;
            else { for (int64_t i = 0; i < m; i++) v.l[i] = n->arg.c.i; from = CT_I64; }
            break;
        case ST_OP_IOTA:
            for (int64_t i = 0; i < m; i++) {
                int64_t k = n->ndim > 0 ? ((start + i) / inner) % n->shape[ax] : 0;
                v.d[i] = n->arg.iota.start + (double)k * n->arg.iota.step;
            }
            break;
        case ST_OP_RAND_U:
        case ST_OP_RAND_N: {
            uint64_t seed = n->arg.rng.seed, c0 = n->arg.rng.offset + (uint64_t)start;
            int normal = n->op == ST_OP_RAND_N;
            if (dt == ST_F64) {
                for (int64_t i = 0; i < m; i++)
                    v.d[i] = normal ? st_rand_normal_f64(seed, c0 + (uint64_t)i)
                                    : st_rand_uniform_f64(seed, c0 + (uint64_t)i);
            } else {
                for (int64_t i = 0; i < m; i++)
                    v.f[i] = normal ? st_rand_normal_f32(seed, c0 + (uint64_t)i)
                                    : st_rand_uniform_f32(seed, c0 + (uint64_t)i);
                from = CT_F32;
            }
            break;
        }
        case ST_OP_RAND_INT: {
            uint64_t seed = n->arg.rng.seed, c0 = n->arg.rng.offset + (uint64_t)start;
            for (int64_t i = 0; i < m; i++)
                v.l[i] = st_rand_int(seed, c0 + (uint64_t)i, n->arg.rng.lo, n->arg.rng.hi);
            from = CT_I64;
            break;
        }
        default: return bad_node(n, "not a source");
        }
        store_as(from, &v, m, dt, out->data, start);
    }
    return ST_OK;
}

/* ---- VIEW: a strided, optionally masked read of src 0's contiguous layout ---- */

/* rows x len elements: dst row r, column c (row stride len, from di) = src[si + r + c * st], in
 * tiles of TILE_T columns, so each source cache line (consecutive r) is read once per tile
 * instead of once per row. */
#define TILE_T 16
static void copy_tiles(size_t es, void *dst, int64_t di, const void *src, int64_t si, int64_t st, int64_t rows,
                       int64_t len) {
#define COPY_TILES_(T)                                                                          \
    do {                                                                                        \
        T *d_ = (T *)dst + di;                                                                  \
        const T *s_ = (const T *)src + si;                                                      \
        for (int64_t c0 = 0; c0 < len; c0 += TILE_T) {                                          \
            const int64_t c1 = c0 + TILE_T < len ? c0 + TILE_T : len;                           \
            for (int64_t r = 0; r < rows; r++)                                                  \
                for (int64_t c = c0; c < c1; c++) d_[r * len + c] = s_[r + c * st];             \
        }                                                                                       \
    } while (0)
    switch (es) {
    case 1: COPY_TILES_(uint8_t); break;
    case 2: COPY_TILES_(uint16_t); break;
    case 4: COPY_TILES_(uint32_t); break;
    default: COPY_TILES_(uint64_t); break;
    }
#undef COPY_TILES_
}

/* len elements of es bytes from src[si + j * st] to dst[di + j] (st 0: a broadcast, 1: a copy). */
static void copy_run(size_t es, void *dst, int64_t di, const void *src, int64_t si, int64_t st, int64_t len) {
    if (st == 1) {
        memcpy((char *)dst + (size_t)di * es, (const char *)src + (size_t)si * es, (size_t)len * es);
        return;
    }
    if (st == 0 && len > 0) { /* a fill (the library's -O2 leaves a fill loop scalar): doubling copies */
        char *d = (char *)dst + (size_t)di * es;
        const size_t total = (size_t)len * es;
        memcpy(d, (const char *)src + (size_t)si * es, es);
        for (size_t done = es; done < total;) {
            const size_t c = done < total - done ? done : total - done;
            memcpy(d + done, d, c);
            done += c;
        }
        return;
    }
    copy_tiles(es, dst, di, src, si, st, 1, len);
}

static st_status view_rows(st_node *n, const st_node *s, size_t es, st_buffer *out) {
    const st_view_arg *v = &n->arg.view;
    const int nd = n->ndim;
    const int64_t len = n->shape[nd - 1], st = v->strides[nd - 1];
    /* a transposed matrix (the next-to-last dim contiguous in src): TILE_T rows at a time */
    const bool tiled = nd >= 2 && st != 1 && v->strides[nd - 2] == 1 && n->shape[nd - 2] > 1;
    int64_t idx[ST_MAX_DIMS] = {0}, flat = v->offset;
    for (int64_t i = 0; i < n->numel;) {
        if (i && i % CHECK_EVERY < len && st_rt.interrupted) return check_interrupt();
        int64_t rows = 1;
        if (tiled) {
            rows = n->shape[nd - 2] - idx[nd - 2];
            if (rows > TILE_T) rows = TILE_T;
        }
        const int64_t last = flat + (rows - 1) + (len - 1) * st;   /* rows > 1 only when tiled */
        if (flat < 0 || flat >= s->numel || last < 0 || last >= s->numel || flat + (len - 1) * st < 0 ||
            flat + (len - 1) * st >= s->numel || flat + rows - 1 >= s->numel)
            return bad_node(n, "view reads outside its src");
        if (rows > 1) copy_tiles(es, out->data, i, s->buf->data, flat, st, rows, len);
        else copy_run(es, out->data, i, s->buf->data, flat, st, len);
        if (rows > 1) idx[nd - 2] += rows - 1;
        idx[nd - 1] = len - 1;   /* on to the next row */
        flat = last;
        idx_next(nd, n->shape, idx, v->strides, &flat);
        i += rows * len;
    }
    return ST_OK;
}

static st_status eval_view(st_node *n, st_buffer *out) {
    const st_node *s = n->src[0];
    const st_view_arg *v = &n->arg.view;
    if (s->dtype != n->dtype) return bad_node(n, "dtype differs from its src");
    size_t es = st_dtypes[n->dtype].size;
    int64_t idx[ST_MAX_DIMS] = {0}, flat = v->offset;
    int nd = n->ndim;
    const void *one = interp_broadcast_elem(n);
    if (one) { /* one element everywhere: one fill */
        copy_run(es, out->data, 0, one, 0, 0, n->numel);
        return ST_OK;
    }
    if (!v->has_mask && nd > 0 && n->shape[nd - 1] > 0)
        return view_rows(n, s, es, out);
    for (int64_t i = 0; i < n->numel; i++) {
        if (i && i % CHECK_EVERY == 0 && st_rt.interrupted) return check_interrupt();
        int valid = 1;
        if (v->has_mask)
            for (int d = 0; d < nd; d++) valid &= v->lo[d] <= idx[d] && idx[d] < v->hi[d];
        if (valid) {
            if (flat < 0 || flat >= s->numel) return bad_node(n, "view reads outside its src");
            copy_elem(es, out->data, i, s->buf->data, flat);
        } else {
            zero_elem(es, out->data, i);
        }
        idx_next(nd, n->shape, idx, v->strides, &flat);
    }
    return ST_OK;
}

/* ---- reductions (keepdim shape) ---- */

/* One float sum/prod/max/min step (NaN propagates through max/min): the general loop of
 * eval_reduce and reduce_runs both take it from here. */
#define RED_STEP(OP, A, X)                                                                      \
    ((OP) == ST_OP_RSUM ? (A) + (X) : (OP) == ST_OP_RPROD ? (A) * (X)                           \
     : (OP) == ST_OP_RMAX ? (((X) != (X) || (X) > (A)) ? (X) : (A))                             \
                          : (((X) != (X) || (X) < (A)) ? (X) : (A)))
#define RED_RUN(OP, ACC, V, LEN)                                                                \
    for (int64_t t_ = 0; t_ < (LEN); t_++) ACC = RED_STEP(OP, ACC, (V)[t_])
#define RED_COLS(OP, AD, V, LEN)                                                                \
    for (int64_t t_ = 0; t_ < (LEN); t_++) (AD)[t_] = RED_STEP(OP, (AD)[t_], (V)[t_])

/* m values of a float sum/prod/max/min at flat index start, reduced over a suffix of the dims
 * (rows of `run` elements, output start / run) or a prefix (columns: output start % run): the
 * steps of the general loop in eval_reduce, in the same order for every output (its elements in
 * flat order), so the same bits, without a multi-index step and a switch per element. A
 * first-seen expression runs here before its kernel is compiled (the REPL's first answer). */
static void reduce_runs(st_op op, bool suffix, int64_t run, int64_t start, int64_t m, const double *v,
                        double *ad) {
    for (int64_t i = 0; i < m;) {
        const int64_t g = start + i, pos = g % run, len = m - i < run - pos ? m - i : run - pos;
        if (suffix) {
            double acc = ad[g / run];
            switch (op) {
            case ST_OP_RSUM: RED_RUN(ST_OP_RSUM, acc, v + i, len); break;
            case ST_OP_RPROD: RED_RUN(ST_OP_RPROD, acc, v + i, len); break;
            case ST_OP_RMAX: RED_RUN(ST_OP_RMAX, acc, v + i, len); break;
            default: RED_RUN(ST_OP_RMIN, acc, v + i, len); break;
            }
            ad[g / run] = acc;
        } else {
            double *a = ad + pos;
            switch (op) {
            case ST_OP_RSUM: RED_COLS(ST_OP_RSUM, a, v + i, len); break;
            case ST_OP_RPROD: RED_COLS(ST_OP_RPROD, a, v + i, len); break;
            case ST_OP_RMAX: RED_COLS(ST_OP_RMAX, a, v + i, len); break;
            default: RED_COLS(ST_OP_RMIN, a, v + i, len); break;
            }
        }
        i += len;
    }
}

static st_status eval_reduce(st_node *n, st_buffer *out) {
    const st_node *s = n->src[0];
    int nd = s->ndim;
    uint32_t axes = n->arg.red.axes;
    st_op op = (st_op)n->op;
    if (n->ndim != nd) return bad_node(n, "rank differs from its src");
    for (int d = 0; d < nd; d++)
        if (n->shape[d] != (((axes >> d) & 1) ? 1 : s->shape[d]))
            return bad_node(n, "shape is not the keepdim shape of its src");
    int64_t ost[ST_MAX_DIMS], idx[ST_MAX_DIMS] = {0}, o = 0;
    st_contig_strides(nd, n->shape, ost);
    for (int d = 0; d < nd; d++)
        if ((axes >> d) & 1) ost[d] = 0;
    int arg = op == ST_OP_RARGMAX || op == ST_OP_RARGMIN;
    int ax = 0;
    if (arg) {
        while (ax < nd && !((axes >> ax) & 1)) ax++;
        if (ax == nd || (axes & ~(1u << ax))) return bad_node(n, "argmax/argmin needs one axis");
    }
    bool isf = st_is_float((st_dtype)s->dtype);
    int64_t no = n->numel;
    /* A float reduction over trailing dims (rows; everything) or leading ones (columns). */
    int low = 0;
    while (low < nd && !((axes >> low) & 1)) low++;
    const uint32_t all = nd ? (uint32_t)((1ull << nd) - 1) : 0;
    const bool suffix = nd > 0 && low < nd && axes == (all & ~((1u << low) - 1));
    const bool prefix = !suffix && nd > 0 && (axes & 1) && ((axes + 1) & axes) == 0 && axes != all;
    const bool runs = isf && !arg && (suffix || prefix) && no > 0;
    const int64_t run = suffix ? s->numel / (no ? no : 1) : no;
    /* acc: the running value (double for floats, int64 otherwise); best: argmax's index. */
    void *acc = st_malloc((size_t)(no ? no : 1) * 8);
    int64_t *best = arg ? st_calloc((size_t)(no ? no : 1), sizeof *best) : NULL;
    if (!acc || (arg && !best)) {
        st_free(acc);
        st_free(best);
        return ST_ERR_OOM;
    }
    double *ad = acc;
    int64_t *al = acc;
    for (int64_t i = 0; i < no; i++) {
        switch (op) {
        case ST_OP_RSUM: if (isf) ad[i] = 0; else al[i] = 0; break;
        case ST_OP_RPROD: if (isf) ad[i] = 1; else al[i] = 1; break;
        case ST_OP_RMAX: case ST_OP_RARGMAX: if (isf) ad[i] = -INFINITY; else al[i] = INT64_MIN; break;
        default: if (isf) ad[i] = INFINITY; else al[i] = INT64_MAX; break;
        }
    }
    chunk v;
    st_status st = ST_OK;
    for (int64_t start = 0; start < s->numel && !st; start += CHUNK) {
        int64_t m = s->numel - start < CHUNK ? s->numel - start : CHUNK;
        if (start && start % CHECK_EVERY == 0 && st_rt.interrupted) { st = check_interrupt(); break; }
        load_as((st_dtype)s->dtype, s->buf->data, start, m, isf ? CT_F64 : CT_I64, &v);
        if (runs) {
            reduce_runs(op, suffix, run, start, m, v.d, ad);
            continue;
        }
        for (int64_t i = 0; i < m; i++, idx_next(nd, s->shape, idx, ost, &o)) {
            if (isf) {
                double x = v.d[i], a = ad[o];
                switch (op) {
                case ST_OP_RSUM: ad[o] = RED_STEP(ST_OP_RSUM, a, x); break;
                case ST_OP_RPROD: ad[o] = RED_STEP(ST_OP_RPROD, a, x); break;
                case ST_OP_RMAX: ad[o] = RED_STEP(ST_OP_RMAX, a, x); break;
                case ST_OP_RMIN: ad[o] = RED_STEP(ST_OP_RMIN, a, x); break;
                default: { /* argmax/argmin: first max, or the first NaN */
                    int first = idx[ax] == 0, better;
                    if (a != a && !first) better = 0;
                    else if (x != x) better = 1;
                    else better = op == ST_OP_RARGMAX ? x > a : x < a;
                    if (first || better) { ad[o] = x; best[o] = idx[ax]; }
                    break;
                }
                }
            } else {
                int64_t x = v.l[i], a = al[o];
                switch (op) {
                case ST_OP_RSUM: al[o] = (int64_t)((uint64_t)a + (uint64_t)x); break;
                case ST_OP_RPROD: al[o] = (int64_t)((uint64_t)a * (uint64_t)x); break;
                case ST_OP_RMAX: al[o] = x > a ? x : a; break;
                case ST_OP_RMIN: al[o] = x < a ? x : a; break;
                default: {
                    int first = idx[ax] == 0;
                    int better = op == ST_OP_RARGMAX ? x > a : x < a;
                    if (first || better) { al[o] = x; best[o] = idx[ax]; }
                    break;
                }
                }
            }
        }
    }
    if (!st) {
        if (arg) store_as(CT_I64, best, no, (st_dtype)n->dtype, out->data, 0);
        else store_as(isf ? CT_F64 : CT_I64, acc, no, (st_dtype)n->dtype, out->data, 0);
    }
    st_free(acc);
    st_free(best);
    return st;
}

/* ---- MATMUL: (B.., M, K) x (B.., K, N) -> (B.., M, N) ----
 * Floats go through the prelude's GEMM on the library's widest copy for this CPU (base_gemm():
 * AVX-512, AVX2+FMA or baseline), the very code JIT kernels call, so eager and fused matmuls agree
 * bit for bit (f32/f16/bf16 accumulate in float, f64 in double, k in order, fused multiply-adds).
 * The tasks of all batch entries are shared among the CPU pool's threads, less one per compiler
 * running in the background (a task owns its outputs: the bits do not depend on which thread runs
 * it); the interrupt flag is read between tasks. */
static int gemm_dtype(st_dtype dt) {
    switch (dt) {
    case ST_F16: return ST_GEMM_F16;
    case ST_BF16: return ST_GEMM_BF16;
    case ST_F64: return ST_GEMM_F64;
    default: return ST_GEMM_F32;
    }
}

/* Tasks 0 .. total-1 shared among nt of the pool's threads (an atomic counter: a task owns its
 * outputs, so the bits do not depend on which thread runs it), each thread with wsb bytes of
 * scratch (ws NULL: none); the interrupt flag is read between tasks. run(ud, task, ws). */
typedef struct task_job {
    void (*run)(void *ud, int64_t i, void *ws);
    void *ud;
    int64_t total;
    char *ws;
    size_t wsb;
    atomic_llong next;         /* the next task to take */
    atomic_int stop;           /* interrupted */
} task_job;

static void task_worker(void *data) {
    task_job *j = data;
    void *ws = j->ws ? j->ws + (size_t)dev_cpu_pool()->thread_num() * j->wsb : NULL;
    for (;;) {
        if (atomic_load_explicit(&j->stop, memory_order_relaxed)) return;
        int64_t i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= j->total) return;
        if (st_rt.interrupted) {   /* read only: the caller clears it (check_interrupt) */
            atomic_store(&j->stop, 1);
            return;
        }
        j->run(j->ud, i, ws);
    }
}

/* Runs the tasks on nt threads (at most total); ws: nt * wsb bytes or NULL. ST_ERR_INTERRUPT when
 * interrupted (the outputs are then incomplete). */
static st_status run_tasks(void (*run)(void *, int64_t, void *), void *ud, int64_t total, int nt, char *ws,
                           size_t wsb) {
    task_job j = {.run = run, .ud = ud, .total = total, .ws = ws, .wsb = wsb};
    atomic_init(&j.next, 0);
    atomic_init(&j.stop, 0);
    if (nt > total) nt = (int)total;
    if (nt > 1) dev_cpu_pool()->parallel(task_worker, &j, (unsigned)nt);
    else task_worker(&j);
    if (!atomic_load(&j.stop)) return ST_OK;
    st_rt.interrupted = 0;   /* the result is incomplete: an interrupt, whatever the flag says now */
    return st_error(ST_ERR_INTERRUPT, "interrupted");
}

/* Threads for w multiply-adds: one below ~1M (waking the team would cost more than it saves); a
 * core left to each compiler running in the background (a team member that has to wait for a core
 * holds up the whole product: the MLP example's interpreted steps, 7-9 ms on one thread, 15-20 ms
 * on two beside the compiler). */
static int task_threads(int64_t w) {
    int nt = dev_cpu_threads() - st_rt.compiles_running;
    return nt < 1 || w < ((int64_t)1 << 20) ? 1 : nt;
}

typedef struct mm_job {
    const st_gemm_api *gemm;
    st_gemm g;                 /* batch entry 0's product; entry bt's operands are offset by bt */
    size_t es;
    int64_t tasks, mb, nb;
} mm_job;

static void mm_task(void *ud, int64_t i, void *ws) {
    const mm_job *j = ud;
    const int64_t M = j->g.M, N = j->g.N, K = j->g.K, bt = i / j->tasks;
    st_gemm g = j->g;
    g.A = (const char *)g.A + (size_t)(bt * M * K) * j->es;
    g.B = (const char *)g.B + (size_t)(bt * K * N) * j->es;
    g.C = (char *)g.C + (size_t)(bt * M * N) * j->es;
    j->gemm->task[g.dt](&g, i % j->tasks, j->mb, j->nb, ws);
}

static st_status matmul_float(st_node *n, st_buffer *out, int64_t batch, int64_t M, int64_t N, int64_t K) {
    const st_node *a = n->src[0], *b = n->src[1];
    int dt = gemm_dtype((st_dtype)n->dtype);
    int64_t mb, nb;
    int nt = task_threads(batch * M * N * K);
    int64_t tasks = st_gemm_plan(dt, M, N, nt, &mb, &nb);
    if (!tasks || batch <= 0) return ST_OK;
    mm_job j = {.gemm = base_gemm(),
                .g = {dt, M, N, K, a->buf->data, K, 1, b->buf->data, N, 1, out->data, N, NULL, 0, 0},
                .es = st_dtypes[n->dtype].size, .tasks = tasks, .mb = mb, .nb = nb};
    const size_t wsb = (st_gemm_ws_bytes(dt, mb, nb, K) + 63) & ~(size_t)63;
    if (nt > batch * tasks) nt = (int)(batch * tasks);
    char *ws = st_malloc(wsb * (size_t)nt);
    if (!ws) return ST_ERR_OOM;
    st_status s = run_tasks(mm_task, &j, batch * tasks, nt, ws, wsb);
    st_free(ws);
    return s;
}

static st_status eval_matmul(st_node *n, st_buffer *out) {
    const st_node *a = n->src[0], *b = n->src[1];
    int nd = n->ndim;
    if (nd < 2 || a->ndim != nd || b->ndim != nd) return bad_node(n, "operands need rank >= 2");
    int64_t M = a->shape[nd - 2], K = a->shape[nd - 1], N = b->shape[nd - 1];
    if (b->shape[nd - 2] != K || n->shape[nd - 2] != M || n->shape[nd - 1] != N)
        return bad_node(n, "inner dims disagree");
    int64_t batch = 1;
    for (int d = 0; d < nd - 2; d++) {
        if (a->shape[d] != n->shape[d] || b->shape[d] != n->shape[d])
            return bad_node(n, "batch dims disagree");
        batch *= n->shape[d];
    }
    if (a->dtype != n->dtype || b->dtype != n->dtype) return bad_node(n, "operand dtypes differ");
    if (st_is_float((st_dtype)n->dtype)) return matmul_float(n, out, batch, M, N, K);
    /* Integers: both operands as int64, one output row at a time, wrapping uint64 sums. */
    void *A = st_malloc((size_t)(a->numel ? a->numel : 1) * 8);
    void *B = st_malloc((size_t)(b->numel ? b->numel : 1) * 8);
    void *row = st_malloc((size_t)(N ? N : 1) * 8);
    st_status st = ST_OK;
    if (!A || !B || !row) { st = ST_ERR_OOM; goto done; }
    load_as((st_dtype)a->dtype, a->buf->data, 0, a->numel, CT_I64, A);
    load_as((st_dtype)b->dtype, b->buf->data, 0, b->numel, CT_I64, B);
    int64_t work = 0;
    for (int64_t bt = 0; bt < batch; bt++) {
        for (int64_t i = 0; i < M; i++) {
            if ((work += K * N + 1) >= CHECK_EVERY) {
                work = 0;
                if ((st = check_interrupt())) goto done;
            }
            uint64_t *r = row;
            const int64_t *Ar = (const int64_t *)A + (bt * M + i) * K, *Bb = (const int64_t *)B + bt * K * N;
            for (int64_t j = 0; j < N; j++) r[j] = 0;
            for (int64_t k = 0; k < K; k++) {
                uint64_t x = (uint64_t)Ar[k];
                const int64_t *Bk = Bb + k * N;
                for (int64_t j = 0; j < N; j++) r[j] += x * (uint64_t)Bk[j];
            }
            store_as(CT_I64, row, N, (st_dtype)n->dtype, out->data, (bt * M + i) * N);
        }
    }
done:
    st_free(A);
    st_free(B);
    st_free(row);
    return st;
}

/* ---- ATTN: softmax(q k^T * scale) v over the last two dims (base/opmath_attn.h) ----
 * The library's attention (base_gemm()->attn), the code JIT attention kernels call: the same bits.
 * Tasks (a batch entry's block of query rows) run as a matmul's (run_tasks). */
typedef struct attn_job {
    const st_gemm_api *gemm;
    st_attn g;                 /* batch entry 0's; entry bt's operands are offset by bt */
    size_t es;
    int64_t tasks;
    int nb;                    /* batch dims: their sizes and the mask's strides along them */
    const int64_t *bshape;
    int64_t mstr[ST_MAX_DIMS];
} attn_job;

static void attn_task(void *ud, int64_t i, void *ws) {
    const attn_job *j = ud;
    const int64_t bt = i / j->tasks;
    st_attn g = j->g;
    g.Q = (const char *)g.Q + (size_t)(bt * g.Lq * g.D) * j->es;
    g.K = (const char *)g.K + (size_t)(bt * g.Lk * g.D) * j->es;
    g.V = (const char *)g.V + (size_t)(bt * g.Lk * g.Dv) * j->es;
    if (g.M) {
        int64_t mo = 0, r = bt;
        for (int d = j->nb - 1; d >= 0; d--) {
            mo += r % j->bshape[d] * j->mstr[d];
            r /= j->bshape[d];
        }
        g.M = (const char *)g.M + mo * (int64_t)j->es;
    }
    g.ctr += (uint64_t)(bt * g.Lq * g.Lk);
    g.O = (char *)g.O + (size_t)(bt * g.Lq * g.Dv) * j->es;
    j->gemm->attn[g.dt](&g, i % j->tasks, ws);
}

static st_status eval_attention(st_node *n, st_buffer *out) {
    const st_node *q = n->src[0], *k = n->src[1], *v = n->src[2], *m = n->nsrc > 3 ? n->src[3] : NULL;
    int nd = n->ndim;
    if (nd < 2 || q->ndim != nd || k->ndim != nd || v->ndim != nd || (m && m->ndim != nd))
        return bad_node(n, "operands need rank >= 2");
    int64_t Lq = q->shape[nd - 2], D = q->shape[nd - 1], Lk = k->shape[nd - 2], Dv = v->shape[nd - 1];
    if (k->shape[nd - 1] != D || v->shape[nd - 2] != Lk || n->shape[nd - 2] != Lq || n->shape[nd - 1] != Dv ||
        (m && (m->shape[nd - 2] != Lq || m->shape[nd - 1] != Lk)))
        return bad_node(n, "operand dims disagree");
    int64_t batch = 1;
    for (int d = 0; d < nd - 2; d++) {
        if (q->shape[d] != n->shape[d] || k->shape[d] != n->shape[d] || v->shape[d] != n->shape[d] ||
            (m && m->shape[d] != n->shape[d]))
            return bad_node(n, "batch dims disagree");
        batch *= n->shape[d];
    }
    if ((n->dtype != ST_F32 && n->dtype != ST_F64) || q->dtype != n->dtype || k->dtype != n->dtype ||
        v->dtype != n->dtype || (m && m->dtype != n->dtype))
        return bad_node(n, "operands must all be f32 or all f64");
    if (!n->numel) return ST_OK;
    int dt = n->dtype == ST_F64 ? ST_ATTN_F64 : ST_ATTN_F32;
    int nt = task_threads(batch * Lq * Lk * (D + Dv));
    /* the mask: its buffer (contiguous), or read in place through its view (interp_strided_view) */
    const void *mp = NULL;
    int64_t mstr[ST_MAX_DIMS];
    if (m && m->buf) {
        mp = m->buf->data;
        st_contig_strides(nd, m->shape, mstr);
    } else if (m) {
        mp = (const char *)m->src[0]->buf->data + m->arg.view.offset * (int64_t)st_dtypes[m->dtype].size;
        memcpy(mstr, m->arg.view.strides, (size_t)nd * sizeof *mstr);
    }
    attn_job j = {.gemm = base_gemm(),
                  .g = {.dt = dt, .causal = n->arg.attn.causal, .Lq = Lq, .Lk = Lk, .D = D, .Dv = Dv,
                        .Q = q->buf->data, .K = k->buf->data, .V = v->buf->data,
                        .sqi = D, .sqd = 1, .skj = D, .skd = 1, .svj = Dv, .sve = 1,
                        .M = mp, .smi = mstr[nd - 2], .smj = mstr[nd - 1],
                        .drop = n->arg.attn.drop, .seed = n->arg.attn.seed, .ctr = n->arg.attn.offset,
                        .O = out->data, .scale = n->arg.attn.scale, .rb = st_attn_plan(batch, Lq, nt)},
                  .es = st_dtypes[n->dtype].size, .nb = nd - 2, .bshape = n->shape};
    if (m) memcpy(j.mstr, mstr, (size_t)(nd - 2) * sizeof *mstr);
    j.tasks = st_attn_tasks(&j.g);
    const size_t wsb = (st_attn_ws_bytes(dt, Lk, D, Dv) + 63) & ~(size_t)63;
    if (nt > batch * j.tasks) nt = (int)(batch * j.tasks);
    char *ws = st_malloc(wsb * (size_t)nt);
    if (!ws) {   /* each score recomputed where it is needed: the same bits, on one thread */
        st_clear_error();
        nt = 1;
    }
    st_status s = run_tasks(attn_task, &j, batch * j.tasks, nt, ws, wsb);
    st_free(ws);
    return s;
}

/* ---- GATHER / SCATTER_ADD along arg.axis.dim ---- */
static st_status eval_gather(st_node *n, st_buffer *out) {
    const st_node *data = n->src[0], *ix = n->src[1];
    int d = n->arg.axis.dim, nd = n->ndim;
    if (data->ndim != nd || ix->ndim != nd || ix->numel != n->numel || d < 0 || d >= nd)
        return bad_node(n, "bad operand ranks or dim");
    if (data->dtype != n->dtype) return bad_node(n, "dtype differs from its data");
    for (int e = 0; e < nd; e++)
        if (e != d && n->shape[e] > data->shape[e]) return bad_node(n, "index larger than data");
    int64_t *I = st_malloc((size_t)(n->numel ? n->numel : 1) * sizeof *I);
    if (!I) return ST_ERR_OOM;
    load_as((st_dtype)ix->dtype, ix->buf->data, 0, n->numel, CT_I64, I);
    int64_t dst[ST_MAX_DIMS], idx[ST_MAX_DIMS] = {0}, base = 0;
    st_contig_strides(nd, data->shape, dst);
    int64_t dstride = dst[d];
    dst[d] = 0; /* base = data offset of idx with idx[d] := 0 */
    size_t es = st_dtypes[n->dtype].size;
    int64_t bad = 0, badv = 0;
    for (int64_t i = 0; i < n->numel; i++, idx_next(nd, n->shape, idx, dst, &base)) {
        int64_t j = I[i];
        if (j < 0 || j >= data->shape[d]) {
            if (!bad) badv = j;
            bad = 1;
            zero_elem(es, out->data, i);
        } else {
            copy_elem(es, out->data, i, data->buf->data, base + j * dstride);
        }
    }
    st_free(I);
    if (bad)
        return st_error(ST_ERR_ARG, "gather: index " BASE_INDEX " out of range for dim " BASE_POS " of size %lld",
                        BASE_P(badv), BASE_P(d), (long long)data->shape[d]);
    return ST_OK;
}

static st_status eval_scatter_add(st_node *n, st_buffer *out) {
    const st_node *base = n->src[0], *ix = n->src[1], *val = n->src[2];
    int d = n->arg.axis.dim, nd = n->ndim;
    st_dtype dt = (st_dtype)n->dtype;
    if (base->numel != n->numel || base->dtype != n->dtype || val->dtype != n->dtype ||
        ix->ndim != nd || val->numel != ix->numel || d < 0 || d >= nd)
        return bad_node(n, "bad operands");
    for (int e = 0; e < nd; e++)
        if (e != d && ix->shape[e] > n->shape[e]) return bad_node(n, "index larger than output");
    size_t es = st_dtypes[dt].size;
    if (n->numel) memcpy(out->data, base->buf->data, (size_t)n->numel * es);
    ctype ct = ct_of(dt);
    int64_t *I = st_malloc((size_t)(ix->numel ? ix->numel : 1) * sizeof *I);
    void *V = st_malloc((size_t)(ix->numel ? ix->numel : 1) * 8);
    if (!I || !V) {
        st_free(I);
        st_free(V);
        return ST_ERR_OOM;
    }
    load_as((st_dtype)ix->dtype, ix->buf->data, 0, ix->numel, CT_I64, I);
    load_as(dt, val->buf->data, 0, val->numel, ct, V);
    int64_t ost[ST_MAX_DIMS], idx[ST_MAX_DIMS] = {0}, off = 0;
    st_contig_strides(nd, n->shape, ost);
    int64_t dstride = ost[d];
    ost[d] = 0;
    int64_t bad = 0, badv = 0;
    void *o = out->data;
    for (int64_t i = 0; i < ix->numel; i++, idx_next(nd, ix->shape, idx, ost, &off)) {
        int64_t j = I[i];
        if (j < 0 || j >= n->shape[d]) {
            if (!bad) badv = j;
            bad = 1;
            continue;
        }
        int64_t t = off + j * dstride;
        switch (dt) { /* accumulate in the compute type, round at each store (as a kernel does) */
        case ST_F32: ((float *)o)[t] += ((float *)V)[i]; break;
        case ST_F64: ((double *)o)[t] += ((double *)V)[i]; break;
        case ST_I32: ((int32_t *)o)[t] = om_add(((int32_t *)o)[t], ((int32_t *)V)[i]); break;
        case ST_I64: ((int64_t *)o)[t] = om_add(((int64_t *)o)[t], ((int64_t *)V)[i]); break;
        case ST_BOOL: ((uint8_t *)o)[t] = ((uint8_t *)o)[t] | (((uint8_t *)V)[i] != 0); break;
        case ST_F16: ((uint16_t *)o)[t] = st_f2h(st_h2f(((uint16_t *)o)[t]) + ((float *)V)[i]); break;
        case ST_BF16: ((uint16_t *)o)[t] = st_f2bf(st_bf2f(((uint16_t *)o)[t]) + ((float *)V)[i]); break;
        default: break;
        }
    }
    st_free(I);
    st_free(V);
    if (bad)
        return st_error(ST_ERR_ARG, "scatter_add: index " BASE_INDEX " out of range for dim " BASE_POS " of size %lld",
                        BASE_P(badv), BASE_P(d), (long long)n->shape[d]);
    return ST_OK;
}

/* ---- SETVIEW: out = src0, then the strided region of out := src1 ---- */
static st_status eval_setview(st_node *n, st_buffer *out) {
    const st_node *base = n->src[0], *val = n->src[1];
    const st_view_arg *v = &n->arg.view;
    if (base->numel != n->numel || base->dtype != n->dtype || val->dtype != n->dtype)
        return bad_node(n, "bad operands");
    size_t es = st_dtypes[n->dtype].size;
    if (n->numel) memcpy(out->data, base->buf->data, (size_t)n->numel * es);
    int64_t idx[ST_MAX_DIMS] = {0}, flat = v->offset;
    for (int64_t i = 0; i < val->numel; i++, idx_next(val->ndim, val->shape, idx, v->strides, &flat)) {
        if (flat < 0 || flat >= n->numel) return bad_node(n, "region outside the base");
        copy_elem(es, out->data, flat, val->buf->data, i);
    }
    return ST_OK;
}

st_status interp_eval_node(st_node *n, st_buffer *out) {
    if (!out || out->nbytes < st_node_nbytes(n) || (n->numel && !out->data))
        return bad_node(n, "output buffer too small");
    for (int k = 0; k < n->nsrc; k++) {   /* elementwise ops also read unevaluated broadcasts */
        const st_node *s = n->src[k];
        if (!s || (!s->buf && !(st_op_is_elementwise((st_op)n->op) && interp_broadcast_elem(s)) &&
                    !(n->op == ST_OP_ATTN && k == 3 && interp_strided_view(s))))
            return bad_node(n, "a src has no buffer");
    }
    switch (st_ops[n->op].kind) {
    case OPK_SOURCE:
        if (n->op == ST_OP_BUFFER) { /* never evaluated by the executors; a copy is harmless */
            if (!n->buf) return bad_node(n, "buffer node without data");
            if (n->numel) memcpy(out->data, n->buf->data, st_node_nbytes(n));
            return ST_OK;
        }
        return eval_source(n, out);
    case OPK_MOVEMENT: return eval_view(n, out);
    case OPK_UNARY:
    case OPK_BINARY:
    case OPK_TERNARY: return eval_elementwise(n, out);
    case OPK_REDUCE: return eval_reduce(n, out);
    case OPK_MATMUL: return eval_matmul(n, out);
    case OPK_GATHER: return n->op == ST_OP_GATHER ? eval_gather(n, out) : eval_scatter_add(n, out);
    case OPK_WRITE: return eval_setview(n, out);
    case OPK_ATTN: return eval_attention(n, out);
    default: return bad_node(n, "unknown op kind");
    }
}

/* Runs the region in order. Each node gets a fresh buffer; a src's buffer is released as soon as
 * its last in-region consumer ran, unless it is a target or held outside the region (refcnt >
 * uses), in which case the caller realizes it. On failure every buffer set here is released. */
static bool in_region(const st_region *r, const st_node *s) {
    return s->pos >= 0 && s->pos < r->n && r->nodes[s->pos] == s;
}

/* Whether node n of region r (positions set) is read only as an attention's mask (src 3). */
static bool interp_attn_mask_only(const st_region *r, const st_node *n) {
    int readers = 0;   /* n->uses of them, all after n */
    for (int i = n->pos + 1; i < r->n && readers < n->uses; i++) {
        const st_node *x = r->nodes[i];
        for (int k = 0; k < x->nsrc; k++) {
            if (x->src[k] != n) continue;
            if (x->op != ST_OP_ATTN || k != 3) return false;
            readers++;
        }
    }
    return readers > 0;
}

st_status interp_execute(st_region *r) {
    int nn = r->n;
    int32_t *left = st_calloc((size_t)(nn ? nn : 1), sizeof *left);
    uint8_t *mine = st_calloc((size_t)(nn ? nn : 1), 1);
    st_status st = ST_OK;
    if (!left || !mine) { st = ST_ERR_OOM; goto out; }
    for (int i = 0; i < nn; i++) r->nodes[i]->pos = i;
    for (int i = 0; i < nn; i++) {
        st_node *n = r->nodes[i];
        for (int k = 0; k < n->nsrc; k++) {
            st_node *s = n->src[k];
            if (in_region(r, s)) left[s->pos]++;
            else if (!s->buf) { /* srcs outside the region must already have their values */
                st = st_error(ST_ERR_INTERNAL, "interp: a %s node's src (%s) is neither realized "
                              "nor in the region", st_ops[n->op].name, st_ops[s->op].name);
                goto out;
            }
        }
    }
    for (int i = 0; i < nn; i++) {
        st_node *n = r->nodes[i];
        if (n->op == ST_OP_BUFFER || n->buf) continue; /* already has its value */
        if (!(n->flags & NODE_TARGET) && interp_strided_view(n) && interp_attn_mask_only(r, n))
            continue;   /* an attention's mask, read through its strides (its src kept to the end;
                         * the view stays unevaluated, as any lazy node no target needs) */
        if ((st = check_interrupt())) goto out;
        st_buffer *b = st_buffer_new(st_node_nbytes(n));
        if (!b) { st = ST_ERR_OOM; goto out; }
        if ((st = interp_eval_node(n, b))) {
            st_buffer_release(b);
            goto out;
        }
        n->buf = b;
        mine[i] = 1;
        for (int k = 0; k < n->nsrc; k++) {
            st_node *s = n->src[k];
            if (!in_region(r, s) || --left[s->pos] > 0) continue;
            if ((s->flags & NODE_TARGET) || s->refcnt > s->uses || !mine[s->pos]) continue;
            st_buffer_release(s->buf);
            s->buf = NULL;
            mine[s->pos] = 0;
        }
    }
out:
    if (st && mine) {
        for (int i = 0; i < nn; i++) {
            if (!mine[i]) continue;
            st_buffer_release(r->nodes[i]->buf);
            r->nodes[i]->buf = NULL;
        }
    }
    st_free(left);
    st_free(mine);
    return st;
}
