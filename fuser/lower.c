/*
 * lower.c — turns one fusion group into kernel IR plus the arguments of its launch.
 *
 * The heart is ev(node, context): the SSA value of a node at one element, where a context is a
 * flat index into the node's own shape (multi-index derived on demand by div/mod). Elementwise
 * ops pass the context through unchanged (so contiguous loads stay `p[i]`), VIEWs map it to
 * their src (strided, broadcast, masked), GATHER reads its index then the data, and nodes the
 * group does not compute are loaded from their buffers. Results are memoized per (node, flat
 * index value), so a DAG inside a group is computed once per element.
 *
 * Invariant (shape-generic kernels): sizes, strides, offsets, seeds and user scalars only ever
 * enter as parameters, keyed by their meaning (which node, which dim, which shape class), never
 * by their value; the source depends only on the group's structure and dtypes.
 */
#include "fuser/fuser.h"

#define FUSE_PHASE_MAX 4   /* reductions sharing one loop over a row (lower_reduce) */

#include <math.h>

enum {  /* parameter keys */
    P_NUMEL = 1, P_SIZE, P_CSTR, P_NRED, P_VOFF, P_VSTR, P_LO, P_HI, P_CONST, P_IOTA0, P_IOTA1,
    P_SEED, P_ROFF, P_RLO, P_RHI, P_MM, P_VQ, P_RDIV, P_RMOD, P_RMUL, P_ASCALE, P_ADROP, P_ASEED, P_AROFF,
};
enum { MEMO_NODE = 1, MEMO_DONE };
#define MAX_CLASSES 128
#define MAX_DEPTH 4000   /* a guard: partition.c keeps every group within FUSE_MAX_DEPTH levels */

typedef struct lctx {
    int flat;                  /* value id of the flat index into the shape of class cls */
    int cls;
    int midx[ST_MAX_DIMS];
    int has_midx;
    int row;                   /* an element of the current row of a reduce group (row_loop) */
    /* a source read through view `via` from context `from` (ev_view): its multi-index, when
     * asked for, comes from from's without a division where the view allows (view_src_midx) */
    struct lctx *from;
    const st_node *via;
} lctx;

/* The rows of a reduce group: every reduction of the group reduces the same axes of the same
 * input shape, so one outer loop over output elements o (the rows) serves them all. */
typedef struct rows {
    int scls, nred, nout, o;
    uint32_t axes;
    bool suffix;                /* the reduced dims are the last ones: row o is contiguous */
    bool prefix;                /* the reduced dims are the first ones (column reductions): element
                                 * rr of row o is at rr * nout + o */
    bool single;                /* every reduced dim has size 1: row o is the one element o, the
                                 * input shape is the output shape */
    int nd, firstr;
    bool block;                 /* o's inner loop is column-blocked (KIR_LOOP_BLOCK) */
    int kept[ST_MAX_DIMS];      /* kept dims' indices, computed from o */
} rows;

typedef struct lw {
    fuse_plan *p;
    int g;
    fuse_group *G;
    fuse_launch *L;
    kir_builder b;
    int cap_ints, cap_flts;
    int nclasses;
    struct { int ndim; int64_t shape[ST_MAX_DIMS]; } cls[MAX_CLASSES];
    int depth;
    int bad;                   /* lowering impossible (message set) */
    const struct rows *rows;   /* reduce groups: the rows being lowered */
    /* a multi-index the loops give for a flat index of a class (lower_pointwise over a refined
     * shape): a context of that class at that flat index takes it instead of dividing */
    struct { int cls, flat; int midx[ST_MAX_DIMS]; } known;
    int has_known;
    /* reduce groups: an expensive reduction input kept in an input-side output's buffer (the
     * row's "on-chip" copy): cache_node[i] lives in cache_out[i]'s buffer at the row's flat
     * index from the end of its phase until that output is stored (softmax: exp(x - max) is
     * computed once, in the sum phase, and reloaded by the output loop) */
    st_node *cache_node[8], *cache_out[8];
    int ncache;
    /* reduce groups: input-side outputs a reduction phase stored (reduce_phase) */
    const st_node *stored[8];
    int nstored;
} lw;

static int fail(lw *w, const char *why) {
    if (!w->bad) st_error(ST_ERR_INTERNAL, "fuser: cannot lower: %s", why);
    w->bad = 1;
    return -1;
}

/* ---- parameters, buffers, shape classes ---- */
static int iparam(lw *w, int key, int k1, int k2, int64_t value) {
    int before = w->L->k.nints;
    int id = kir_emit(&w->b, KI_IPARAM, KT_I64, 0, key, k1, k2, -1, 0, 0);
    if (id < 0) return -1;
    if (w->L->k.nints > before) {
        if (BASE_GROW(w->L->ints, w->cap_ints, w->L->k.nints, 32) != ST_OK) return fail(w, "out of memory");
        w->L->ints[w->L->k.nints - 1] = value;
    }
    return id;
}
static int fparam(lw *w, int key, int k1, double value) {
    int before = w->L->k.nflts;
    int id = kir_emit(&w->b, KI_FPARAM, KT_F64, 0, key, k1, 0, -1, 0, 0);
    if (id < 0) return -1;
    if (w->L->k.nflts > before) {
        if (BASE_GROW(w->L->flts, w->cap_flts, w->L->k.nflts, 8) != ST_OK) return fail(w, "out of memory");
        w->L->flts[w->L->k.nflts - 1] = value;
    }
    return id;
}

static int buf_slot(lw *w, st_node *n, int out) {
    kir_kernel *k = &w->L->k;
    for (int i = 0; i < k->nbufs; i++)
        if (w->L->buf_node[i] == n) {
            k->buf_out[i] |= (uint8_t)out;
            return i;
        }
    if (k->nbufs == KIR_MAX_BUFS) return fail(w, "too many buffers in one kernel");
    w->L->buf_node[k->nbufs] = n;
    k->buf_dtype[k->nbufs] = n->dtype;
    k->buf_out[k->nbufs] = (uint8_t)out;
    return k->nbufs++;
}

static int shape_class_of(lw *w, int nd, const int64_t *shape) {
    for (int c = 0; c < w->nclasses; c++) {
        if (w->cls[c].ndim != nd) continue;
        if (!memcmp(w->cls[c].shape, shape, (size_t)nd * sizeof shape[0])) return c;
    }
    if (w->nclasses == MAX_CLASSES) return fail(w, "too many shapes in one kernel");
    w->cls[w->nclasses].ndim = nd;
    memset(w->cls[w->nclasses].shape, 0, sizeof w->cls[w->nclasses].shape);
    memcpy(w->cls[w->nclasses].shape, shape, (size_t)nd * sizeof shape[0]);
    return w->nclasses++;
}
static int shape_class(lw *w, const st_node *n) { return shape_class_of(w, n->ndim, n->shape); }
static int size_p(lw *w, int cls, int d) { return iparam(w, P_SIZE, cls, d, w->cls[cls].shape[d]); }
static int numel_p(lw *w, int cls) {
    return iparam(w, P_NUMEL, cls, -1, st_shape_numel(w->cls[cls].ndim, w->cls[cls].shape));
}
static int cstride_p(lw *w, int cls, int d) {
    /* the last dim's contiguous stride is always 1: a literal, so `p[i * s + j]` is unit-stride */
    if (d == w->cls[cls].ndim - 1) return kir_iconst(&w->b, KT_I64, 1);
    int64_t cs[ST_MAX_DIMS];
    st_contig_strides(w->cls[cls].ndim, w->cls[cls].shape, cs);
    return iparam(w, P_CSTR, cls, d, cs[d]);
}

static int zero_of(lw *w, kir_type t) {
    return t == KT_F32 || t == KT_F64 ? kir_fconst(&w->b, t, 0.0) : kir_iconst(&w->b, t, 0);
}
static int cvt(lw *w, int v, kir_type to) {
    if (v < 0) return -1;
    if (w->b.k->ins[v].type == to) return v;
    return kir_emit(&w->b, KI_CVT, to, 0, v, -1, -1, -1, 0, 0);
}
static int sel(lw *w, int c, int a, int b) {
    return kir_emit(&w->b, KI_SEL, w->b.k->ins[a].type, 0, c, a, b, -1, 0, 0);
}

static lctx ctx_flat(int flat, int cls) {
    lctx c;
    memset(&c, 0, sizeof c);
    c.flat = flat;
    c.cls = cls;
    return c;
}
/* Which dim of view n's source each dim of the view walks in, and by how many of that dim's
 * steps (q), when the view reads its source in C order with every dim of size > 1 inside one
 * dim of the source: its stride a multiple q of that dim's contiguous stride, and the dims that
 * walk one source dim together never leave it (the sum of q * (extent - 1) below its size). Then
 * the source's index along dim d is the sum of m[k] * q[k] over the view dims k in d: the C-order
 * unravel of the view's flat index, without a division. Permutes, splits, broadcasts and stepped
 * slices from 0 qualify, and so does a masked view whose window's first element [lo] is the
 * source's element 0 (a zero padding of a permuted source: the index is (m - lo) * q inside the
 * mask, the extent hi - lo); views with another offset do not (false). dim[k] is -1 for a view
 * dim that moves nothing (extent 1 or stride 0). */
static bool view_src_map(const st_node *n, int *dim, int64_t *q) {
    const st_node *src = n->src[0];
    const st_view_arg *va = &n->arg.view;
    if (n->op != ST_OP_VIEW) return false;
    int64_t cs[ST_MAX_DIMS], span[ST_MAX_DIMS] = {0}, origin = 0;
    st_contig_strides(src->ndim, src->shape, cs);
    for (int k = 0; k < n->ndim; k++) {
        int64_t s = va->strides[k], ext = va->has_mask ? va->hi[k] - va->lo[k] : n->shape[k];
        if (va->has_mask) origin += va->lo[k] * s;
        dim[k] = -1;
        if (ext <= 1 || s == 0) continue;
        if (s < 0) return false;
        for (int d = src->ndim - 1; d >= 0; d--)   /* the outermost dim whose stride is <= s */
            if (src->shape[d] > 1 && cs[d] <= s) dim[k] = d;
            else if (src->shape[d] > 1) break;
        if (dim[k] < 0 || s % cs[dim[k]]) return false;
        q[k] = s / cs[dim[k]];
        span[dim[k]] += q[k] * (ext - 1);
    }
    if (va->offset + origin != 0) return false;
    for (int d = 0; d < src->ndim; d++)
        if (span[d] > src->shape[d] - 1) return false;
    return true;
}

static const int *ctx_midx(lw *w, lctx *c);
static int iparam(lw *w, int key, int k1, int k2, int64_t value);

/* Masked view n's mask along dim d at index m: lo <= m < hi (u8); *lo gets lo's value id. */
static int view_mask_dim(lw *w, const st_node *n, int d, int m, int *lo) {
    const st_view_arg *va = &n->arg.view;
    *lo = iparam(w, P_LO, n->pos, d, va->lo[d]);
    int hi = iparam(w, P_HI, n->pos, d, va->hi[d]);
    return kir_ibin(&w->b, KI_LAND, kir_ibin(&w->b, KI_ILE, *lo, m), kir_ibin(&w->b, KI_ILT, m, hi));
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Do the dims of two shapes of the same element count nest: every C-order dim boundary (a
 * contiguous stride, or a stride times its size) of either divides every larger one? */
static bool bounds_nest(int na, const int64_t *a, int nb, const int64_t *b) {
    int64_t bd[4 * ST_MAX_DIMS + 2], p;
    int n = 0;
    bd[n++] = 1;
    p = 1;
    for (int d = na - 1; d >= 0; d--) bd[n++] = p *= a[d];
    p = 1;
    for (int d = nb - 1; d >= 0; d--) bd[n++] = p *= b[d];
    qsort(bd, (size_t)n, sizeof bd[0], cmp_i64);
    for (int i = 1; i < n; i++)
        if (bd[i] % bd[i - 1]) return false;
    return true;
}

/* c's multi-index when c has the flat index of context c->from in another shape (a flat reshape
 * between them: c->via, or none for a matmul epilogue's output of another shape) and c->from has
 * its multi-index: where the two shapes' dim boundaries nest, each of c's dims is a sum over
 * from's dims that overlap it of (m / lo) % hi * mul, with the division and modulo only where a
 * dim of from straddles one of c's boundaries. A reduce group's row (N, T, V) read as (N * T, V),
 * a Linear's bias added to (N, T, V) in the GEMM epilogue of (N * T, V): the last index is the
 * column itself, the rest from the row, which is constant along the inner loop (no division per
 * element, which also kept these loops from vectorizing). */
static bool view_src_midx(lw *w, lctx *c);
static bool reshape_midx(lw *w, lctx *c) {
    lctx *f = c->from;
    if (!f || (c->via && !fuse_view_is_flat(c->via))) return false;
    /* from's own multi-index only when it has one or derives it from its context's (a padding's
     * source: the padded index), never by unravelling its flat index (more divisions, not fewer) */
    if (!f->has_midx && !(f->from && f->via && !fuse_view_is_flat(f->via) && view_src_midx(w, f))) return false;
    int fnd = w->cls[f->cls].ndim, tnd = w->cls[c->cls].ndim;
    const int64_t *fs = w->cls[f->cls].shape, *ts = w->cls[c->cls].shape;
    int64_t numel = st_shape_numel(fnd, fs);
    if (numel <= 0 || numel != st_shape_numel(tnd, ts) || !bounds_nest(fnd, fs, tnd, ts)) return false;
    int64_t fcs[ST_MAX_DIMS], tcs[ST_MAX_DIMS];
    st_contig_strides(fnd, fs, fcs);
    st_contig_strides(tnd, ts, tcs);
    kir_builder *b = &w->b;
    for (int d = 0; d < tnd; d++) {
        int64_t lo = tcs[d], hi = tcs[d] * ts[d];
        int acc = -1;
        for (int a = 0; a < fnd && ts[d] > 1; a++) {
            int64_t alo = fcs[a], ahi = fcs[a] * fs[a];
            if (fs[a] == 1 || ahi <= lo || alo >= hi) continue;
            int v = f->midx[a], pair = f->cls * MAX_CLASSES + c->cls, key = a * ST_MAX_DIMS + d;
            if (alo < lo) v = kir_ibin(b, KI_IDIV, v, iparam(w, P_RDIV, pair, key, lo / alo));
            if (ahi > hi) v = kir_ibin(b, KI_IMOD, v, iparam(w, P_RMOD, pair, key, hi / (alo > lo ? alo : lo)));
            if (alo > lo) v = kir_ibin(b, KI_IMUL, v, iparam(w, P_RMUL, pair, key, alo / lo));
            acc = acc < 0 ? v : kir_ibin(b, KI_IADD, acc, v);
        }
        c->midx[d] = acc < 0 ? kir_iconst(b, KT_I64, 0) : acc;
    }
    c->has_midx = 1;
    return true;
}

/* c's multi-index from the context it was read from through view c->via (view_src_map; through
 * a mask, a zero padding's among them, the index minus the window's start and 0 outside the mask,
 * as the flat index is, so a view under it never indexes out of its source), or through a flat
 * reshape (reshape_midx). */
static bool view_src_midx(lw *w, lctx *c) {
    int dim[ST_MAX_DIMS];
    int64_t q[ST_MAX_DIMS];
    const st_node *n = c->via;
    if (reshape_midx(w, c)) return true;
    if (!n || !c->from || !view_src_map(n, dim, q)) return false;
    const int *m = ctx_midx(w, c->from);
    int nd = n->src[0]->ndim;
    for (int d = 0; d < nd; d++) c->midx[d] = -1;
    for (int k = 0; k < n->ndim; k++) {
        if (dim[k] < 0) continue;
        int mk = m[k];
        if (n->arg.view.has_mask) {   /* (m - lo) inside the mask, 0 outside (as the flat index) */
            int lo, ok = view_mask_dim(w, n, k, m[k], &lo);
            mk = kir_emit(&w->b, KI_SEL, KT_I64, 0, ok, kir_ibin(&w->b, KI_ISUB, m[k], lo), kir_iconst(&w->b, KT_I64, 0),
                          -1, 0, 0);
        }
        int t = q[k] == 1 ? mk : kir_ibin(&w->b, KI_IMUL, mk, iparam(w, P_VQ, n->pos, k, q[k]));
        c->midx[dim[k]] = c->midx[dim[k]] < 0 ? t : kir_ibin(&w->b, KI_IADD, c->midx[dim[k]], t);
    }
    for (int d = 0; d < nd; d++)
        if (c->midx[d] < 0) c->midx[d] = kir_iconst(&w->b, KT_I64, 0);
    c->has_midx = 1;
    return true;
}

/* The multi-index of a context (from the context it was read from through a view, else the C
 * order unravel of its flat index). */
static const int *ctx_midx(lw *w, lctx *c) {
    if (c->has_midx) return c->midx;
    if (w->has_known && w->known.cls == c->cls && w->known.flat == c->flat) {
        memcpy(c->midx, w->known.midx, sizeof c->midx);
        c->has_midx = 1;
        return c->midx;
    }
    if (view_src_midx(w, c)) return c->midx;
    int nd = w->cls[c->cls].ndim, rem = c->flat;
    for (int d = nd - 1; d >= 1; d--) {
        int s = size_p(w, c->cls, d);
        c->midx[d] = kir_ibin(&w->b, KI_IMOD, rem, s);
        rem = kir_ibin(&w->b, KI_IDIV, rem, s);
    }
    if (nd > 0) c->midx[0] = rem;
    c->has_midx = 1;
    return c->midx;
}

static int load(lw *w, st_node *n, int flat) {
    int slot = buf_slot(w, n, 0);
    if (slot < 0 || flat < 0) return -1;
    return kir_emit(&w->b, KI_LOAD, kir_type_of(n->dtype), 0, slot, flat, -1, -1, n->dtype, 0);
}
static void store(lw *w, st_node *n, int flat, int v) {
    int slot = buf_slot(w, n, 1);
    if (slot < 0 || flat < 0 || v < 0) return;
    kir_emit(&w->b, KI_STORE, KT_VOID, 0, slot, flat, v, -1, n->dtype, 0);
}
/* A value of dtype f16/bf16 that is not stored is rounded anyway, so a fused kernel sees what the
 * op-by-op interpreter (which stores every node) sees. */
static int round_storage(lw *w, st_node *n, int v) {
    if (v < 0 || (n->dtype != ST_F16 && n->dtype != ST_BF16)) return v;
    return kir_emit(&w->b, KI_ROUND, KT_F32, 0, v, -1, -1, -1, n->dtype, 0);
}

static int ev(lw *w, st_node *n, lctx *c);

/* A view stride: 0 and 1 are baked into the kernel (a broadcast or a unit-stride load that the
 * compiler can vectorize; the pattern of strides is structure, like the op list), other values
 * are parameters. */
static int stride_p(lw *w, int pos, int d, int64_t v) {
    if (v == 0 || v == 1) return kir_iconst(&w->b, KT_I64, v);
    return iparam(w, P_VSTR, pos, d, v);
}

/* Is view n a broadcast of one value per row of the current reduce group over the rows' input
 * shape (src: the input shape with the reduced dims 1, contiguous)? */
static bool row_broadcast_of_rows(lw *w, const st_node *n) {
    const rows *R = w->rows;
    const st_node *src = n->src[0];
    const st_view_arg *va = &n->arg.view;
    if (!R || va->has_mask || va->offset != 0 || n->ndim != R->nd || src->ndim != R->nd) return false;
    if (memcmp(n->shape, w->cls[R->scls].shape, (size_t)R->nd * sizeof n->shape[0])) return false;
    int64_t cs[ST_MAX_DIMS];
    st_contig_strides(src->ndim, src->shape, cs);
    for (int d = 0; d < R->nd; d++) {
        bool red = R->axes >> d & 1;
        if (src->shape[d] != (red ? 1 : n->shape[d])) return false;
        if (n->shape[d] != 1 && va->strides[d] != (red ? 0 : cs[d])) return false;
    }
    return true;
}

static int ev_view(lw *w, st_node *n, lctx *c) {
    st_node *src = n->src[0];
    kir_type t = kir_type_of(n->dtype);
    if (src->numel == 0) return zero_of(w, t);
    int scls = shape_class(w, src);
    if (scls < 0) return -1;
    if (fuse_view_is_flat(n)) {
        lctx sc = ctx_flat(c->flat, scls);
        sc.from = c;
        sc.via = n;
        return ev(w, src, &sc);
    }
    const st_view_arg *va = &n->arg.view;
    if (c->row && row_broadcast_of_rows(w, n)) { /* every element of row o reads element o */
        lctx sc = ctx_flat(w->rows->o, scls);
        return ev(w, src, &sc);
    }
    const int *m = ctx_midx(w, c);
    int valid = -1;
    if (va->has_mask) {
        for (int d = 0; d < n->ndim; d++) {
            int lo, ok = view_mask_dim(w, n, d, m[d], &lo);
            valid = valid < 0 ? ok : kir_ibin(&w->b, KI_LAND, valid, ok);
        }
    }
    int flat;
    if (src->numel == 1) {
        flat = kir_iconst(&w->b, KT_I64, 0);
    } else {
        flat = iparam(w, P_VOFF, n->pos, -1, va->offset);
        for (int d = 0; d < n->ndim; d++)
            flat = kir_ibin(&w->b, KI_IADD, flat,
                            kir_ibin(&w->b, KI_IMUL, m[d], stride_p(w, n->pos, d, va->strides[d])));
    }
    if (valid >= 0) flat = sel(w, valid, flat, kir_iconst(&w->b, KT_I64, 0));
    lctx sc = ctx_flat(flat, scls);
    sc.from = c;
    sc.via = n;
    int v = ev(w, src, &sc);
    if (v >= 0 && valid >= 0) v = sel(w, valid, v, zero_of(w, t));
    return v;
}

/* Does gather n, evaluated at context c, read its data inside the current row o of the reduce
 * group being lowered (partition.c's row_gather)? Its data has the rows' input shape, it gathers
 * along a reduced axis, it keeps the kept dims whole, and c lies in row o: a row element of the
 * input shape, or the row's output index o in the reduction's (keepdim) shape. Then a row
 * broadcast in the data reads the row's register (a stitched reduction of row o). */
static bool gather_in_row(lw *w, const st_node *n, const lctx *c) {
    const rows *R = w->rows;
    const st_node *data = n->src[0];
    if (!R || !(R->axes >> n->arg.axis.dim & 1) || data->ndim != R->nd || n->ndim != R->nd ||
        memcmp(data->shape, w->cls[R->scls].shape, (size_t)R->nd * sizeof data->shape[0]))
        return false;
    bool one = c->flat == R->o; /* the row's output index: every reduced dim must be 1 */
    for (int d = 0; d < R->nd; d++) {
        bool red = R->axes >> d & 1;
        if (!red && n->shape[d] != data->shape[d]) return false;
        if (red && n->shape[d] != 1) one = false;
    }
    return one || (c->row && c->cls == R->scls);
}

static int ev_gather(lw *w, st_node *n, lctx *c) {
    st_node *data = n->src[0], *index = n->src[1];
    int d = n->arg.axis.dim;
    kir_type t = kir_type_of(n->dtype);
    int dcls = shape_class(w, data);
    if (dcls < 0) return -1;
    int iv = cvt(w, ev(w, index, c), KT_I64);
    if (iv < 0) return -1;
    int valid = kir_ibin(&w->b, KI_LAND, kir_ibin(&w->b, KI_ILE, kir_iconst(&w->b, KT_I64, 0), iv),
                         kir_ibin(&w->b, KI_ILT, iv, size_p(w, dcls, d)));
    kir_emit(&w->b, KI_SETERR, KT_VOID, 0, valid, -1, -1, -1, 0, 0);
    int idx = sel(w, valid, iv, kir_iconst(&w->b, KT_I64, 0));
    const int *m = ctx_midx(w, c);
    lctx dc = ctx_flat(-1, dcls);
    int flat = kir_iconst(&w->b, KT_I64, 0);
    for (int k = 0; k < data->ndim; k++) {
        dc.midx[k] = k == d ? idx : m[k];
        flat = kir_ibin(&w->b, KI_IADD, flat, kir_ibin(&w->b, KI_IMUL, dc.midx[k], cstride_p(w, dcls, k)));
    }
    dc.flat = flat;
    dc.has_midx = 1;
    dc.row = gather_in_row(w, n, c);
    int v = ev(w, data, &dc);
    return v < 0 ? -1 : sel(w, valid, v, zero_of(w, t));
}

static int ev_source(lw *w, st_node *n, lctx *c) {
    kir_type t = kir_type_of(n->dtype);
    switch ((st_op)n->op) {
    case ST_OP_CONST:
        if (st_is_float(n->dtype)) return cvt(w, fparam(w, P_CONST, n->pos, n->arg.c.f), t);
        return cvt(w, iparam(w, P_CONST, n->pos, -1, n->arg.c.i), t);
    case ST_OP_IOTA: {
        int ax = n->arg.iota.axis;
        int idx = (n->ndim > 0 && ax >= 0 && ax < n->ndim) ? ctx_midx(w, c)[ax]
                                                           : kir_iconst(&w->b, KT_I64, 0);
        if (fuse_iota_integral(n)) { /* the same values in i64 arithmetic (vectorizes with its compares) */
            int step = iparam(w, P_IOTA1, n->pos, -1, (int64_t)n->arg.iota.step);
            int start = iparam(w, P_IOTA0, n->pos, -1, (int64_t)n->arg.iota.start);
            return cvt(w, kir_ibin(&w->b, KI_IADD, start, kir_ibin(&w->b, KI_IMUL, idx, step)), t);
        }
        int x = cvt(w, idx, KT_F64);
        int step = fparam(w, P_IOTA1, n->pos, n->arg.iota.step);
        int start = fparam(w, P_IOTA0, n->pos, n->arg.iota.start);
        int prod = kir_emit(&w->b, KI_OP, KT_F64, ST_OP_MUL, x, step, -1, -1, 0, 0);
        return cvt(w, kir_emit(&w->b, KI_OP, KT_F64, ST_OP_ADD, start, prod, -1, -1, 0, 0), t);
    }
    case ST_OP_RAND_U:
    case ST_OP_RAND_N:
    case ST_OP_RAND_INT: {
        int seed = iparam(w, P_SEED, n->pos, -1, (int64_t)n->arg.rng.seed);
        int off = iparam(w, P_ROFF, n->pos, -1, (int64_t)n->arg.rng.offset);
        int ctr = kir_ibin(&w->b, KI_IADD, off, c->flat);
        if (n->op == ST_OP_RAND_INT) {
            int lo = iparam(w, P_RLO, n->pos, -1, n->arg.rng.lo);
            int hi = iparam(w, P_RHI, n->pos, -1, n->arg.rng.hi);
            return cvt(w, kir_emit(&w->b, KI_RAND, KT_I64, n->op, seed, ctr, lo, hi, 0, 0), t);
        }
        if (t != KT_F32 && t != KT_F64) return fail(w, "random floats of an integer dtype");
        return kir_emit(&w->b, KI_RAND, t, n->op, seed, ctr, -1, -1, 0, 0);
    }
    default:
        return fail(w, st_ops[n->op].name);
    }
}

/* Does IOTA n lower in i64 arithmetic: dtype i64 (narrower types keep the f64 path's
 * conversion), and start and step integers within 2^52 (so start + i * step, computed in f64 by
 * the interpreter, is the same number)? The plan key holds the answer (plan_cache.c): a cached
 * plan's refreshed start and step keep it. */
bool fuse_iota_integral(const st_node *n) {
    double a = n->arg.iota.start, b = n->arg.iota.step, lim = 4503599627370496.0;
    return n->dtype == ST_I64 && a == floor(a) && b == floor(b) && fabs(a) < lim && fabs(b) < lim;
}

/* The plan cache (plan_cache.c) keys a region without its user scalars and refreshes them on a
 * hit through this function, so it must name every parameter ev_source keys by a node's value:
 * true when `in` (a KI_IPARAM/KI_FPARAM) is such a scalar, with its value in region r now. */
bool fuse_user_scalar(const kir_ins *in, const st_region *r, int64_t *iv, double *fv) {
    if (in->b < 0 || in->b >= r->n) return false;   /* k1 is a node position for every such key */
    const st_node *n = r->nodes[in->b];
    switch (in->a) {
    case P_CONST: *iv = n->arg.c.i; *fv = n->arg.c.f; return true;
    case P_VOFF: *iv = n->arg.view.offset; return true;   /* a VIEW's or SETVIEW's */
    case P_IOTA0: *fv = n->arg.iota.start; *iv = (int64_t)n->arg.iota.start; return true;
    case P_IOTA1: *fv = n->arg.iota.step; *iv = (int64_t)n->arg.iota.step; return true;
    case P_SEED: *iv = (int64_t)n->arg.rng.seed; return true;
    case P_ROFF: *iv = (int64_t)n->arg.rng.offset; return true;
    case P_RLO: *iv = n->arg.rng.lo; return true;
    case P_RHI: *iv = n->arg.rng.hi; return true;
    case P_ASCALE: *fv = n->arg.attn.scale; return true;   /* an attention's scale and dropout */
    case P_ADROP: *fv = n->arg.attn.drop; return true;
    case P_ASEED: *iv = (int64_t)n->arg.attn.seed; return true;
    case P_AROFF: *iv = (int64_t)n->arg.attn.offset; return true;
    default: return false;
    }
}

static int ev(lw *w, st_node *n, lctx *c) {
    if (w->bad || c->flat < 0) return -1;
    if (fuse_loads(w->p, n, w->g)) return load(w, n, c->flat);
    int memo = kir_memo_get(&w->b, MEMO_NODE, (uint64_t)(uintptr_t)n, (uint64_t)c->flat);
    if (memo >= 0) return memo;
    if (++w->depth > MAX_DEPTH) return fail(w, "expression too deep");
    kir_type t = kir_type_of(n->dtype);
    int v = -1;
    st_op op = (st_op)n->op;
    st_op_kind kind = st_ops[op].kind;
    if (op == ST_OP_VIEW) {
        v = ev_view(w, n, c);
    } else if (kind == OPK_SOURCE) {
        v = round_storage(w, n, ev_source(w, n, c));
    } else if (op == ST_OP_GATHER) {
        v = ev_gather(w, n, c);
    } else if (op == ST_OP_CAST) {
        int a = ev(w, n->src[0], c);
        v = round_storage(w, n, a >= 0 && w->b.k->ins[a].type == t ? a : cvt(w, a, t));
    } else if (st_op_is_elementwise(op)) {
        int s[3] = {-1, -1, -1};
        for (int i = 0; i < n->nsrc; i++) {
            lctx sc = *c;   /* same shape: same flat index and multi-index */
            if ((s[i] = ev(w, n->src[i], &sc)) < 0) break;
            if (sc.has_midx && !c->has_midx) *c = sc;
        }
        if (s[n->nsrc - 1] >= 0)
            v = round_storage(w, n, kir_emit(&w->b, KI_OP, t, op, s[0], s[1], s[2], -1, 0, 0));
    } else if (kind == OPK_REDUCE && n->tag == w->g) {
        /* a reduction of this group read at another index than its own row's: that row was
         * stored by an earlier phase of this outer iteration (stitching guarantees the row) */
        if (!w->p->mat[n->pos] || kir_memo_get(&w->b, MEMO_DONE, (uint64_t)(uintptr_t)n, 0) < 0)
            return fail(w, "reduction read before it is computed");
        v = load(w, n, c->flat);
    } else {
        return fail(w, st_ops[op].name);
    }
    w->depth--;
    if (v >= 0) kir_memo_put(&w->b, MEMO_NODE, (uint64_t)(uintptr_t)n, (uint64_t)c->flat, v);
    return v;
}

/* ---- kernels ---- */
/* On the CPU, two or more dims: a parallel loop over rows and an inner loop over the last dim,
 * with the multi-index of the row computed once per row. A single flat loop would unravel every
 * element's index with a 64-bit division per dim (3 ns an element); the inner loop has none and
 * vectorizes. On a GPU the parallel loop is what the threads share: rows would give each thread a
 * row (neighbouring threads a row apart: 14% of each fetched sector used, measured on an H100 at
 * 2% of a device copy for AdamW), so a GPU kernel is one flat loop, and a view that needs the
 * multi-index unravels it by division (dead code where nothing reads it). */

/* The common refinement of (nd, shape) and b (the same number of elements): the shape whose dims
 * split the dims of both (every C-order stride of either is one of its strides). Replaces
 * (nd, shape) and returns true when one exists and has more dims; false otherwise. */
static bool refine_shape(int *nd, int64_t *shape, int nb, const int64_t *b) {
    int64_t numel = st_shape_numel(*nd, shape);
    if (numel <= 1 || numel != st_shape_numel(nb, b)) return false;
    int64_t bd[2 * ST_MAX_DIMS + 2], p = 1;
    int n = 0, k = 0;
    bd[n++] = 1;
    for (int d = *nd - 1; d >= 0; d--) bd[n++] = p *= shape[d];
    p = 1;
    for (int d = nb - 1; d >= 0; d--) bd[n++] = p *= b[d];
    qsort(bd, (size_t)n, sizeof bd[0], cmp_i64);
    for (int i = 1; i < n; i++)
        if (bd[i] != bd[k]) {
            if (bd[i] % bd[k]) return false;
            bd[++k] = bd[i];
        }
    if (k > ST_MAX_DIMS || k <= *nd) return false;
    for (int i = 0; i < k; i++) shape[i] = bd[k - i] / bd[k - i - 1];
    *nd = k;
    return true;
}

/* Does n's expression in this group read something through a view that needs its multi-index
 * (not a reshape)? */
static bool reads_strided_view(lw *w, st_node *n, int *budget) {
    if (--*budget < 0 || fuse_loads(w->p, n, w->g)) return false;
    if (n->op == ST_OP_VIEW && !fuse_view_is_flat(n)) return true;
    for (int i = 0; i < n->nsrc; i++)
        if (reads_strided_view(w, n->src[i], budget)) return true;
    return false;
}

/* Refine (nd, shape) by the sources of the reshapes in n's expression whose own expression reads
 * a strided view: a pool's window index (N, C, Ho, 2, Wo, 2) read through a merge to (N, C, H, W)
 * would be unravelled by division at every element; looping over the refined shape gives it. */
static void refine_by_reshapes(lw *w, st_node *n, int *nd, int64_t *shape, int *budget) {
    if (--*budget < 0 || fuse_loads(w->p, n, w->g)) return;
    if (fuse_view_is_flat(n) && n->src[0]->ndim > 0) {
        int inner = 64;
        if (reads_strided_view(w, n->src[0], &inner)) refine_shape(nd, shape, n->src[0]->ndim, n->src[0]->shape);
    }
    for (int i = 0; i < n->nsrc; i++) refine_by_reshapes(w, n->src[i], nd, shape, budget);
}

/* The CPU loops of a pointwise group over shape class rcls (the output class cls, or its
 * refinement by refine_by_reshapes) for output class cls: a parallel loop over the first p dims,
 * its index unravelled once per step, then one loop per remaining dim, the flat index built by
 * multiply-adds (the last loop unit-stride). The multi-index is registered (w->known) for the
 * reshapes' sources; the output class's own multi-index is merged from it (no division). Returns
 * the output context; *nloops is the number of loops opened. */
enum { SHORT_LAST_DIM = 4 };
static lctx nested_loops(lw *w, int cls, int rcls, int p, int n, int *nloops) {
    kir_builder *b = &w->b;
    int rnd = w->cls[rcls].ndim;
    int nrows = size_p(w, rcls, 0);
    for (int d = 1; d < p; d++) nrows = kir_ibin(b, KI_IMUL, nrows, size_p(w, rcls, d));
    int r = kir_loop(b, nrows, n, 1);
    int *m = w->known.midx, rem = r;
    for (int d = p - 1; d >= 1; d--) {
        int sz = size_p(w, rcls, d);
        m[d] = kir_ibin(b, KI_IMOD, rem, sz);
        rem = kir_ibin(b, KI_IDIV, rem, sz);
    }
    m[0] = rem;
    int flat = r;
    /* a last dim of a few elements under a longer one (a pool's window column: (Wo, 2)) is the
     * outer of the two loops, so the inner one is long enough to vectorize (stride 2 or so) */
    const int64_t *rs = w->cls[rcls].shape;
    bool swap = rnd - p >= 2 && rs[rnd - 1] <= SHORT_LAST_DIM && rs[rnd - 2] >= 4 * rs[rnd - 1];
    for (int d = p; d < rnd - (swap ? 2 : 0); d++) {
        int sz = size_p(w, rcls, d);
        int base = kir_ibin(b, KI_IMUL, flat, sz);
        m[d] = kir_loop(b, sz, -1, 0);
        flat = kir_ibin(b, KI_IADD, base, m[d]);
    }
    if (swap) {
        int s1 = size_p(w, rcls, rnd - 1), s2 = size_p(w, rcls, rnd - 2);
        m[rnd - 1] = kir_loop(b, s1, -1, 0);
        m[rnd - 2] = kir_loop(b, s2, -1, 0);
        flat = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, flat, s2), m[rnd - 2]), s1),
                        m[rnd - 1]);
    }
    *nloops = 1 + rnd - p;
    w->known.cls = rcls;
    w->known.flat = flat;
    w->has_known = 1;
    lctx c = ctx_flat(flat, cls);
    int64_t ocs[ST_MAX_DIMS], rcs[ST_MAX_DIMS];
    st_contig_strides(w->cls[cls].ndim, w->cls[cls].shape, ocs);
    st_contig_strides(rnd, w->cls[rcls].shape, rcs);
    for (int d = 0, k = 0; d < w->cls[cls].ndim; d++) {
        c.midx[d] = -1;
        for (; k < rnd && rcs[k] >= ocs[d]; k++)   /* the refined dims inside output dim d */
            c.midx[d] = c.midx[d] < 0 ? m[k] : kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, c.midx[d], size_p(w, rcls, k)), m[k]);
        if (c.midx[d] < 0) c.midx[d] = kir_iconst(b, KT_I64, 0);
    }
    c.has_midx = 1;
    return c;
}

static void lower_pointwise(lw *w) {
    int cls = shape_class(w, w->G->outs[0]);
    if (cls < 0) return;
    int n = numel_p(w, cls), nd = w->cls[cls].ndim;
    kir_builder *b = &w->b;
    lctx c;
    int i;
    bool cpu = dev_target_of(w->G->outs[0]->rdev) == DEV_TARGET_C;
    int rnd = nd, nloops = 1;
    int64_t rshape[ST_MAX_DIMS];
    memcpy(rshape, w->cls[cls].shape, sizeof rshape);
    if (cpu) {
        int budget = 256;
        for (int o = 0; o < w->G->nouts; o++) refine_by_reshapes(w, w->G->outs[o], &rnd, rshape, &budget);
    }
    if (cpu && rnd >= 2) {
        /* the parallel loop over the leading dims (>= 256 steps, or all dims but the last), one
         * loop per remaining dim: an im2col's (N, C, kh, kw, Ho, Wo) unravels once per image and
         * channel, not once per row of Wo */
        int rcls = rnd > nd ? shape_class_of(w, rnd, rshape) : cls, p = 1;
        if (rcls < 0) return;
        for (int64_t prod = rshape[0]; p < rnd - 1 && prod < 256; p++) prod *= rshape[p];
        c = nested_loops(w, cls, rcls, p, n, &nloops);
        i = c.flat;
    } else {
        i = kir_loop(b, n, -1, 1);
        c = ctx_flat(i, cls);
    }
    for (int o = 0; o < w->G->nouts; o++) store(w, w->G->outs[o], i, ev(w, w->G->outs[o], &c));
    for (int l = 0; l < nloops; l++) kir_endloop(b);
    w->has_known = 0;
    w->L->work = w->G->outs[0]->numel;
}

/* The loop over the elements of row o (the reduced dims), opened by row_loop and closed by
 * row_loop_end: rr is the element's flat index over the reduced dims (C order), ic its input
 * context. The multi-index is given with the flat index (kept dims from o, reduced dims from rr;
 * dead when nothing reads it), so a view inside the row indexes by it: a weight broadcast over
 * the rows of a row reduction (layernorm's w[j] for x[i, j]) reads p[rr], without a division per
 * element.
 * On the CPU, when the reduced dims are neither the last ones nor the first ones (BatchNorm's
 * (N, H, W) of NCHW), the row is two loops: the outer one over the reduced dims before the last
 * run of adjacent reduced dims (their indices unravelled once per outer step), the inner one over
 * that run, which is contiguous in the input's shape, so the flat index is an affine function of
 * the inner index and no element pays a 64-bit division (one loop over rr unravelled every
 * element: ~4 ns an element, 2 ms for a (64, 32, 16, 16) BatchNorm mean on 2 cores). The inner
 * loop is the one the C renderer strip-mines into lanes. The order of a product or an argmax is
 * unchanged (outer then inner is rr's order); a sum's lanes are per inner loop (rounding only). */
typedef struct row_loop_t { int rr, nest; } row_loop_t;

static lctx row_loop(lw *w, const rows *R, row_loop_t *RL) {
    kir_builder *b = &w->b;
    lctx ic = ctx_flat(-1, R->scls);
    ic.row = 1;
    int lastr = -1;
    for (int d = 0; d < R->nd; d++)
        if (R->axes >> d & 1) lastr = d;
    int rs = lastr;   /* the last run of adjacent reduced dims: [rs, lastr] */
    while (rs > 0 && (R->axes >> (rs - 1) & 1)) rs--;
    bool nest = !R->suffix && !R->prefix && !R->single && lastr >= 0 &&
                dev_target_of(w->G->outs[0]->rdev) == DEV_TARGET_C;
    RL->nest = 0;
    if (nest) {
        int outer = -1, ninner = size_p(w, R->scls, rs);
        for (int d = rs + 1; d <= lastr; d++) ninner = kir_ibin(b, KI_IMUL, ninner, size_p(w, R->scls, d));
        if (rs > R->firstr) {   /* reduced dims before the run: the outer loop */
            int nouter = -1;
            for (int d = 0; d < rs; d++) {
                if (!(R->axes >> d & 1)) continue;
                nouter = nouter < 0 ? size_p(w, R->scls, d) : kir_ibin(b, KI_IMUL, nouter, size_p(w, R->scls, d));
            }
            outer = kir_loop(b, nouter, -1, 0);
            RL->nest = 1;
            int rem = outer;
            for (int d = rs - 1; d >= 0; d--) {
                if (!(R->axes >> d & 1)) continue;
                if (d == R->firstr) {
                    ic.midx[d] = rem;
                } else {
                    int sz = size_p(w, R->scls, d);
                    ic.midx[d] = kir_ibin(b, KI_IMOD, rem, sz);
                    rem = kir_ibin(b, KI_IDIV, rem, sz);
                }
            }
        }
        int inner = kir_loop(b, ninner, -1, 0);
        RL->rr = outer < 0 ? inner : kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, outer, ninner), inner);
        int rem = inner;
        for (int d = lastr; d >= rs; d--) {
            if (d == rs) {
                ic.midx[d] = rem;
            } else {
                int sz = size_p(w, R->scls, d);
                ic.midx[d] = kir_ibin(b, KI_IMOD, rem, sz);
                rem = kir_ibin(b, KI_IDIV, rem, sz);
            }
        }
        int flat = kir_ibin(b, KI_IMUL, inner, cstride_p(w, R->scls, lastr));   /* the run, C-contiguous */
        for (int d = 0; d < R->nd; d++) {
            if (d >= rs && d <= lastr) continue;
            if (!(R->axes >> d & 1)) ic.midx[d] = R->kept[d];
            flat = kir_ibin(b, KI_IADD, flat, kir_ibin(b, KI_IMUL, ic.midx[d], cstride_p(w, R->scls, d)));
        }
        ic.flat = flat;
        ic.has_midx = 1;
        return ic;
    }
    int rr = RL->rr = kir_loop(b, R->nred, -1, 0);
    int rem = rr;
    for (int d = R->nd - 1; d >= 0; d--) {
        if (!(R->axes >> d & 1)) {
            ic.midx[d] = R->kept[d];
        } else if (d == R->firstr) {
            ic.midx[d] = rem;
        } else {
            int sz = size_p(w, R->scls, d);
            ic.midx[d] = kir_ibin(b, KI_IMOD, rem, sz);
            rem = kir_ibin(b, KI_IDIV, rem, sz);
        }
    }
    ic.has_midx = 1;
    if (R->single) {
        /* the row's element is the row's output element: the same SSA index, so a value read
         * both in the row loop and at the output index (a degenerate reduction's consumer, of
         * the input shape and the output shape alike) finds the row's register through the memo */
        ic.flat = R->o;
    } else if (R->suffix) {
        ic.flat = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, R->o, R->nred), rr);
    } else if (R->prefix) {
        ic.flat = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, rr, R->nout), R->o);
    } else {
        int flat = kir_iconst(b, KT_I64, 0);
        for (int d = 0; d < R->nd; d++)
            flat = kir_ibin(b, KI_IADD, flat, kir_ibin(b, KI_IMUL, ic.midx[d], cstride_p(w, R->scls, d)));
        ic.flat = flat;
    }
    return ic;
}

static void row_loop_end(lw *w, const row_loop_t *RL) {
    kir_endloop(&w->b);
    if (RL->nest) kir_endloop(&w->b);
}

/* Does group g compute, inside its own kernel, some costly op of n's expression (looking at most
 * at `budget` nodes)? Reductions and loads end the walk. */
static bool costly_expr(lw *w, st_node *n, int *budget) {
    if (--*budget < 0 || fuse_loads(w->p, n, w->g) || st_ops[n->op].kind == OPK_REDUCE) return false;
    if (st_ops[n->op].cost == COST_HIGH) return true;   /* worth a store and a reload from L1/L2 */
    for (int i = 0; i < n->nsrc; i++)
        if (costly_expr(w, n->src[i], budget)) return true;
    return false;
}

/* Does y's expression in group g read n at the same element (through elementwise ops only)? */
static bool reads_elementwise(lw *w, st_node *y, const st_node *n, int *budget) {
    if (y == n) return true;
    if (--*budget < 0 || fuse_loads(w->p, y, w->g) || !st_op_is_elementwise((st_op)y->op)) return false;
    for (int i = 0; i < y->nsrc; i++)
        if (reads_elementwise(w, y->src[i], n, budget)) return true;
    return false;
}

/* Was output x stored by a reduction phase (its input: reduce_phase)? */
static bool stored_by_phase(const lw *w, const st_node *x) {
    for (int i = 0; i < w->nstored; i++)
        if (w->stored[i] == x) return true;
    return false;
}

/* The input-side output whose buffer can hold reduction input `in` for the rest of the row, or
 * NULL: in is costly, f32/f64 (stored exactly), read elementwise by that output, and the output's
 * buffer holds nothing else yet. */
static st_node *cache_target(lw *w, st_node *in) {
    if (w->ncache == (int)(sizeof w->cache_node / sizeof w->cache_node[0])) return NULL;
    if ((in->dtype != ST_F32 && in->dtype != ST_F64) || fuse_loads(w->p, in, w->g) ||
        !st_op_is_elementwise((st_op)in->op))
        return NULL;
    int budget = 64;
    if (!costly_expr(w, in, &budget)) return NULL;
    for (int i = 0; i < w->G->nouts; i++) {
        st_node *y = w->G->outs[i];
        if (w->G->out_side[i] != FUSE_OUT_INPUT || y->dtype != in->dtype || y == in) continue;
        bool taken = false;
        for (int c = 0; c < w->ncache; c++) taken |= w->cache_out[c] == y || w->cache_node[c] == in;
        taken |= stored_by_phase(w, y);   /* its buffer holds its own values already */
        budget = 256;
        if (!taken && reads_elementwise(w, y, in, &budget)) return y;
    }
    return NULL;
}

/* At the start of a loop over row elements (context ic): every cached value reads from its
 * buffer (dead, and not printed, when the loop does not use it). */
static void seed_cached(lw *w, const lctx *ic) {
    for (int c = 0; c < w->ncache; c++) {
        int v = load(w, w->cache_out[c], ic->flat);
        if (v >= 0) kir_memo_put(&w->b, MEMO_NODE, (uint64_t)(uintptr_t)w->cache_node[c], (uint64_t)ic->flat, v);
    }
}

/* One reduction over row o: accumulator, inner loop, final value (memoized as r at index o and
 * stored right away when r is materialized, so later phases of the row can load it). A phase
 * may reduce several independent reductions in one loop over the row (reduce_phases). */
typedef struct red_acc {
    st_node *r;
    kir_type t, at;
    int acc, acci;
    bool count;
} red_acc;

/* The accumulator(s) of r, before its loop. */
static void phase_open(lw *w, st_node *r, red_acc *A) {
    kir_builder *b = &w->b;
    st_node *in = r->src[0];
    st_op op = (st_op)r->op;
    kir_type t = kir_type_of(r->dtype), vt = kir_type_of(in->dtype), at = t;
    int acc = -1, acci = -1;
    /* A float sum of a cast from bool (a count: a max's ties, `(p == y):float():sum()`) adds 0s
     * and 1s: exact in an int64 accumulator, as in the f64 one below 2^53, so the bits are the
     * interpreter's; the integer one vectorizes beside strided float loads where GCC leaves a
     * double accumulator scalar (a pool's tie count, bench/NOTES.md). Only when this group
     * computes the cast: a loaded one is summed as loaded (its bool is not evaluated again) */
    bool count = op == ST_OP_RSUM && (vt == KT_F32 || vt == KT_F64) && in->op == ST_OP_CAST &&
                 in->src[0]->dtype == ST_BOOL && !fuse_loads(w->p, in, w->g);
    if (op == ST_OP_RSUM || op == ST_OP_RPROD) {
        at = count ? KT_I64 : (vt == KT_F32 || vt == KT_F64) ? KT_F64 : vt == KT_U8 ? KT_U8 : KT_I64;
        int one = op == ST_OP_RPROD;
        int init = at == KT_F64 ? kir_fconst(b, at, one) : kir_iconst(b, at, one);
        /* imm 1: a sum of f32 values (f16/bf16 computed in f32) in its double accumulator, which
         * the C renderer may add in float blocks (jit/render_c.c); an f64 input (a user's
         * `x:double():sum()` too) is summed in double throughout */
        const int fsum = op == ST_OP_RSUM && !count && vt == KT_F32;
        acc = kir_emit(b, KI_ACC, at, 0, init, -1, -1, -1, fsum, 0);
    } else if (op == ST_OP_RMAX || op == ST_OP_RMIN) {
        int mx = op == ST_OP_RMAX, init;
        at = vt;
        if (vt == KT_F32 || vt == KT_F64) init = kir_fconst(b, at, mx ? -INFINITY : INFINITY);
        else if (vt == KT_I32) init = kir_iconst(b, at, mx ? INT32_MIN : INT32_MAX);
        else if (vt == KT_I64) init = kir_iconst(b, at, mx ? INT64_MIN : INT64_MAX);
        else init = kir_iconst(b, at, mx ? 0 : 1);
        acc = kir_emit(b, KI_ACC, at, 0, init, -1, -1, -1, 0, 0);
    } else {
        acc = kir_emit(b, KI_ACC, vt, 0, zero_of(w, vt), -1, -1, -1, 0, 0);
        acci = kir_emit(b, KI_ACC, KT_I64, 0, kir_iconst(b, KT_I64, -1), -1, -1, -1, 0, 0);
    }
    *A = (red_acc){r, t, at, acc, acci, count};
}

/* r's update for the element at ic (inside the row loop; rr its index in the row). */
static void phase_body(lw *w, lctx *ic, int rr, const red_acc *A) {
    kir_builder *b = &w->b;
    st_node *r = A->r, *in = r->src[0];
    st_op op = (st_op)r->op;
    st_node *keep_in = cache_target(w, in);
    int v = ev(w, in, ic);
    if (v >= 0 && keep_in) { /* the row's copy of in: stored element by element (distinct indices) */
        store(w, keep_in, ic->flat, v);
        w->cache_node[w->ncache] = in;
        w->cache_out[w->ncache++] = keep_in;
    }
    /* in, or what in reshapes (the same flat index), is itself an output over the rows (a bias
     * gradient's input, stored for the weight gradient's GEMM): stored here, where it is computed
     * anyway, not recomputed by the output loop after the reductions (lower_reduce skips it) */
    const st_node *src = in;
    bool free_buf = true;   /* not holding a cached value for later phases (softmax's exp(x - max)) */
    while (src->op == ST_OP_VIEW && fuse_view_is_flat(src) && !fuse_loads(w->p, src, w->g)) src = src->src[0];
    for (int c = 0; c < w->ncache; c++) free_buf = free_buf && w->cache_out[c] != src;
    if (v >= 0 && free_buf && !stored_by_phase(w, src) && w->nstored < 8)
        for (int k = 0; k < w->G->nouts; k++)
            if (w->G->outs[k] == src && w->G->out_side[k] == FUSE_OUT_INPUT) {
                store(w, w->G->outs[k], ic->flat, v);
                w->stored[w->nstored++] = src;
                break;
            }
    if (v >= 0) {
        if (A->acci >= 0) kir_emit(b, KI_ARGUPD, KT_VOID, 0, A->acc, A->acci, v, rr, op, 0);
        else if (A->count) kir_emit(b, KI_ACCUPD, KT_VOID, 0, A->acc, cvt(w, ev(w, in->src[0], ic), A->at), -1, -1, op, 0);
        else kir_emit(b, KI_ACCUPD, KT_VOID, 0, A->acc, cvt(w, v, A->at), -1, -1, op, 0);
    }
}

/* r's value after its loop: memoized at the row's index, stored when materialized. */
static void phase_close(lw *w, const rows *R, const red_acc *A) {
    kir_builder *b = &w->b;
    st_node *r = A->r;
    /* an f16/bf16 reduction's value is rounded as its store would round it: later phases and
     * the epilogue read the register, the interpreter reads the stored value */
    int val = A->acci >= 0 ? A->acci : round_storage(w, r, cvt(w, A->acc, A->t));
    if (val < 0) return;
    kir_memo_put(b, MEMO_NODE, (uint64_t)(uintptr_t)r, (uint64_t)R->o, val);
    kir_memo_put(b, MEMO_DONE, (uint64_t)(uintptr_t)r, 0, 1);
    if (w->p->mat[r->pos]) store(w, r, R->o, val);
}

/* Reductions reds[0..n) over the row in one loop: each keeps its own accumulator and the order
 * of its own updates, so every value is what a loop of its own gives (the same bits); the row is
 * read once for all of them (a column kernel walks the whole input once per loop: layernorm's
 * weight and bias gradients read the output gradient twice). */
static void reduce_phases(lw *w, const rows *R, st_node *const *reds, int n) {
    red_acc A[FUSE_PHASE_MAX];
    for (int k = 0; k < n; k++) phase_open(w, reds[k], &A[k]);
    row_loop_t RL;
    lctx ic = row_loop(w, R, &RL);
    seed_cached(w, &ic);
    for (int k = 0; k < n; k++) phase_body(w, &ic, RL.rr, &A[k]);
    row_loop_end(w, &RL);
    for (int k = 0; k < n; k++) phase_close(w, R, &A[k]);
}

/* Does evaluating r's input in this group read any of reds[0..n) (a reduction of the group,
 * memoized at the row's index once its phase is done)? Walks the nodes the group evaluates
 * inline (loaded ones are buffers); a walk too large to finish says yes. */
static bool reads_reductions(lw *w, const st_node *r, st_node *const *reds, int n) {
    enum { MAXW = 256 };
    const st_node *stack[MAXW];
    int top = 0, seen = 0;
    uint32_t st = ++w->p->stamp_now;
    stack[top++] = r->src[0];
    while (top) {
        const st_node *y = stack[--top];
        if (++seen > MAXW) return true;
        for (int k = 0; k < n; k++)
            if (y == reds[k]) return true;
        for (int k = 0; k < y->nsrc; k++) {
            const st_node *s = y->src[k];
            if (!fuse_in_region(s) || fuse_loads(w->p, s, w->g) || w->p->stamp[s->pos] == st) continue;
            if (top == MAXW) return true;
            w->p->stamp[s->pos] = st;
            stack[top++] = s;
        }
    }
    return false;
}

static int cmp_pos(const void *a, const void *b) {
    const st_node *x = *(st_node *const *)a, *y = *(st_node *const *)b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static void lower_reduce(lw *w) {
    fuse_group *G = w->G;
    st_node *r = G->anchor, *in = r->src[0];
    rows R;
    memset(&R, 0, sizeof R);
    R.axes = r->arg.red.axes;
    R.scls = shape_class(w, in);
    int ocls = shape_class(w, r);
    if (R.scls < 0 || ocls < 0) return;
    R.nd = in->ndim;
    int first = R.nd, firstk = -1;
    R.firstr = -1;
    int64_t nred_v = 1;
    for (int d = 0; d < R.nd; d++) {
        if (R.axes >> d & 1) {
            nred_v *= in->shape[d];
            if (first == R.nd) first = d;
            if (R.firstr < 0) R.firstr = d;
        } else if (firstk < 0) {
            firstk = d;
        }
    }
    R.single = nred_v == 1;
    R.suffix = R.prefix = true;
    for (int d = first; d < R.nd; d++) R.suffix = R.suffix && (R.axes >> d & 1);
    for (int d = firstk < 0 ? R.nd : firstk; d < R.nd; d++) R.prefix = R.prefix && !(R.axes >> d & 1);
    kir_builder *b = &w->b;
    int nout = R.nout = numel_p(w, ocls);
    R.nred = iparam(w, P_NRED, R.scls, -1, nred_v);
    /* a full reduction (every dim reduced: one row) parallelizes inside its row instead; a
     * column reduction (reduced dims first, kept dims last) is printed column-blocked on the CPU
     * (KIR_LOOP_COLS: rows outer, a block of adjacent outputs inner) */
    bool full = firstk < 0;
    int mode = full && R.nd > 0 ? KIR_LOOP_ROW : R.prefix && !R.suffix ? KIR_LOOP_COLS : KIR_LOOP_PAR;
    /* On the CPU, rows over two or more kept dims are two loops, as lower_pointwise's: a parallel
     * one over the kept dims before the last and an inner one over the last kept dim, so a row's
     * kept indices are unravelled once per outer step instead of once per row (short rows, a max
     * pool's 2x2 windows: a 64-bit division per kept dim per row was most of the kernel's time).
     * Only when the outer loop still has work for every thread and the inner one is not tiny. */
    int lastk = -1;
    for (int d = R.nd - 1; d >= 0 && lastk < 0; d--)
        if (!(R.axes >> d & 1)) lastk = d;
    bool nest_rows = mode == KIR_LOOP_PAR && lastk > firstk && firstk >= 0 &&
                     dev_target_of(G->outs[0]->rdev) == DEV_TARGET_C && in->shape[lastk] >= 4 &&
                     r->numel / in->shape[lastk] >= 64;
    /* The inner loop runs column-blocked (KIR_LOOP_BLOCK: for each element of the row, a block
     * of adjacent outputs, which vectorizes across outputs) when the rows cannot vectorize along
     * themselves: the last dim is kept (a row walks at a stride, its neighbour output starts at
     * the next element), or the last run of reduced dims is short (a max pool's 2x2 windows:
     * scalar code with a branch per compare was ~35 ns an output). Each output still reduces its
     * elements in order. */
    if (nest_rows) {
        int64_t run = 1;
        for (int d = R.nd - 1; d >= 0 && (R.axes >> d & 1); d--) run *= in->shape[d];
        R.block = lastk == R.nd - 1 || run < 32;
    }
    int work = kir_ibin(b, KI_IMUL, nout, R.nred);
    int outer_o = -1, lsz = -1;
    if (nest_rows) {
        int nouter = -1;
        for (int d = 0; d < lastk; d++)
            if (!(R.axes >> d & 1))
                nouter = nouter < 0 ? size_p(w, R.scls, d) : kir_ibin(b, KI_IMUL, nouter, size_p(w, R.scls, d));
        lsz = size_p(w, R.scls, lastk);
        outer_o = kir_loop(b, nouter, work, mode);
    } else {
        R.o = kir_loop(b, nout, work, mode);
    }
    w->rows = &R;
    { /* the kept dims' indices depend only on o (dead unless a view reads them); nested rows:
       * the dims before the last kept one from the outer index, outside the inner loop */
        int rem = nest_rows ? outer_o : R.o;
        for (int d = (nest_rows ? lastk - 1 : R.nd - 1); d >= 0; d--) {
            if (R.axes >> d & 1) continue;
            if (d == firstk) {
                R.kept[d] = rem;
            } else {
                int sz = size_p(w, R.scls, d);
                R.kept[d] = kir_ibin(b, KI_IMOD, rem, sz);
                rem = kir_ibin(b, KI_IDIV, rem, sz);
            }
        }
    }
    if (nest_rows) {
        int inner = kir_loop(b, lsz, -1, R.block ? KIR_LOOP_BLOCK : KIR_LOOP_SERIAL);
        R.o = kir_ibin(b, KI_IADD, kir_ibin(b, KI_IMUL, outer_o, lsz), inner);
        R.kept[lastk] = inner;
    }
    /* phases in region order: a reduction only depends on reductions before it. On the CPU,
     * consecutive reductions that read none of each other share one loop over the row (at most
     * FUSE_PHASE_MAX of them); on a GPU each keeps its own loop (its block-wide combine) */
    qsort(G->reds, (size_t)G->nreds, sizeof *G->reds, cmp_pos);
    bool share = dev_target_of(G->outs[0]->rdev) == DEV_TARGET_C;
    for (int k = 0; k < G->nreds && !w->bad;) {
        int n = 1;
        while (share && k + n < G->nreds && n < FUSE_PHASE_MAX && !reads_reductions(w, G->reds[k + n], G->reds + k, n))
            n++;
        reduce_phases(w, &R, G->reds + k, n);
        k += n;
    }
    /* values over the rows' elements (they may read every reduction of the row) */
    bool any_in = false;
    for (int k = 0; k < G->nouts; k++) any_in |= G->out_side[k] == FUSE_OUT_INPUT && !stored_by_phase(w, G->outs[k]);
    if (any_in) {
        row_loop_t RL;
        lctx ic = row_loop(w, &R, &RL);
        seed_cached(w, &ic);   /* loads come before any output of this element is stored */
        for (int k = 0; k < G->nouts; k++)
            if (G->out_side[k] == FUSE_OUT_INPUT && !stored_by_phase(w, G->outs[k])) {
                lctx oc = ic;
                store(w, G->outs[k], ic.flat, ev(w, G->outs[k], &oc));
            }
        row_loop_end(w, &RL);
    }
    /* the epilogue at the row's output index */
    for (int k = 0; k < G->nouts; k++) {
        st_node *x = G->outs[k];
        if (G->out_side[k] != FUSE_OUT_MAIN || st_ops[x->op].kind == OPK_REDUCE) continue;
        int xc = shape_class(w, x);
        if (xc < 0) return;
        lctx oc = ctx_flat(R.o, xc);
        store(w, x, R.o, ev(w, x, &oc));
    }
    kir_endloop(b);
    if (nest_rows) kir_endloop(b);
    w->rows = NULL;
    w->L->work = in->numel * (G->nreds + any_in);
}

static void lower_scatter(lw *w) {
    st_node *s = w->G->anchor, *base = s->src[0], *index = s->src[1], *vals = s->src[2];
    int d = s->arg.axis.dim;
    kir_builder *b = &w->b;
    int ocls = shape_class(w, s), icls = shape_class(w, index);
    if (ocls < 0 || icls < 0) return;
    int i = kir_loop(b, numel_p(w, ocls), -1, 1);
    lctx c = ctx_flat(i, ocls);
    store(w, s, i, ev(w, base, &c));
    kir_endloop(b);
    /* accumulation in C order of the index: a serial loop */
    int f = kir_loop(b, numel_p(w, icls), -1, 0);
    lctx ic = ctx_flat(f, icls);
    int iv = cvt(w, ev(w, index, &ic), KT_I64);
    if (iv < 0) return;
    int valid = kir_ibin(b, KI_LAND, kir_ibin(b, KI_ILE, kir_iconst(b, KT_I64, 0), iv),
                         kir_ibin(b, KI_ILT, iv, size_p(w, ocls, d)));
    kir_emit(b, KI_SETERR, KT_VOID, 0, valid, -1, -1, -1, 0, 0);
    kir_if(b, valid);
    const int *m = ctx_midx(w, &ic);
    int dst = kir_iconst(b, KT_I64, 0);
    for (int k = 0; k < s->ndim; k++)
        dst = kir_ibin(b, KI_IADD, dst, kir_ibin(b, KI_IMUL, k == d ? iv : m[k], cstride_p(w, ocls, k)));
    int old = load(w, s, dst), v = ev(w, vals, &ic);
    if (old >= 0 && v >= 0)
        store(w, s, dst, kir_emit(b, KI_OP, kir_type_of(s->dtype), ST_OP_ADD, old, v, -1, -1, 0, 0));
    kir_endif(b);
    kir_endloop(b);
    w->L->work = s->numel + index->numel;
}

static void lower_setview(lw *w) {
    st_node *sv = w->G->anchor, *base = sv->src[0], *val = sv->src[1];
    kir_builder *b = &w->b;
    const st_view_arg *va = &sv->arg.view;
    w->L->inplace = base->op == ST_OP_BUFFER && base->refcnt == 1 && base->buf && base->buf->refcnt == 1 &&
                    base->dtype == sv->dtype && base->numel == sv->numel;
    int ocls = shape_class(w, sv), vcls = shape_class(w, val);
    if (ocls < 0 || vcls < 0) return;
    if (!w->L->inplace) {
        int i = kir_loop(b, numel_p(w, ocls), -1, 1);
        lctx c = ctx_flat(i, ocls);
        store(w, sv, i, ev(w, base, &c));
        kir_endloop(b);
    }
    int f = kir_loop(b, numel_p(w, vcls), -1, 1);
    lctx vc = ctx_flat(f, vcls);
    const int *m = ctx_midx(w, &vc);
    int dst = iparam(w, P_VOFF, sv->pos, -1, va->offset);
    for (int d = 0; d < val->ndim; d++)
        dst = kir_ibin(b, KI_IADD, dst, kir_ibin(b, KI_IMUL, m[d], iparam(w, P_VSTR, sv->pos, d, va->strides[d])));
    int v = ev(w, val, &vc);
    store(w, sv, dst, v);
    kir_endloop(b);
    w->L->work = val->numel + (w->L->inplace ? 0 : sv->numel);
}

/* The epilogue of matmul group G: straight-line code for one output element of mm, whose value
 * (KI_MMACC: rounded to mm's dtype, as the interpreter stores it before its consumers read it)
 * is memoized as mm at that element, so the group's outputs read it through ev like any inlined
 * node; each output (mm itself too when it is one) is stored at the element's flat index. The
 * outputs have mm's shape or its element count (partition: mm_epilogue_ok; mm read through flat
 * reshapes only), so the element's multi-index is known: batch dims (from the batch index), row,
 * column. */
static void lower_mm_epilogue(lw *w, st_node *mm) {
    kir_builder *b = &w->b;
    int nb = mm->ndim - 2, cls = shape_class(w, mm);
    kir_type t = kir_type_of(mm->dtype);
    if (cls < 0) return;
    if (mm->dtype == ST_BOOL) {
        fail(w, "matmul epilogue of a bool matmul");
        return;
    }
    int idx[4];
    for (int q = KIR_MM_FLAT; q <= KIR_MM_BATCH; q++) idx[q] = kir_emit(b, KI_MMIDX, KT_I64, 0, -1, -1, -1, -1, q, 0);
    lctx c = ctx_flat(idx[KIR_MM_FLAT], cls);
    c.midx[nb] = idx[KIR_MM_ROW];
    c.midx[nb + 1] = idx[KIR_MM_COL];
    int rem = idx[KIR_MM_BATCH];
    for (int d = nb - 1; d >= 1; d--) {
        int sz = size_p(w, cls, d);
        c.midx[d] = kir_ibin(b, KI_IMOD, rem, sz);
        rem = kir_ibin(b, KI_IDIV, rem, sz);
    }
    if (nb > 0) c.midx[0] = rem;
    c.has_midx = 1;
    int acc = kir_emit(b, KI_MMACC, t, 0, -1, -1, -1, -1, 0, 0);
    kir_memo_put(b, MEMO_NODE, (uint64_t)(uintptr_t)mm, (uint64_t)c.flat, acc);
    for (int o = 0; o < w->G->nouts && !w->bad; o++) {
        /* an output of another shape (the matmul read through a flat reshape: a Linear on a
         * batch folds it into rows) is the same flat element in its own shape */
        st_node *out = w->G->outs[o];
        lctx oc = out->ndim == mm->ndim && !memcmp(out->shape, mm->shape, (size_t)mm->ndim * sizeof mm->shape[0])
                      ? c : ctx_flat(c.flat, shape_class(w, out));
        if (oc.cls < 0) return;
        if (oc.cls != c.cls) oc.from = &c;   /* its multi-index from the row and column */
        store(w, out, c.flat, ev(w, out, &oc));
    }
}

/* A matmul size/stride parameter: returns its slot in a->ints. */
static int mm_param(lw *w, int *key, int64_t v) {
    int id = iparam(w, P_MM, (*key)++, 0, v);
    return id < 0 ? 0 : (int)w->b.k->ins[id].imm;
}

/* An operand's offset: its VIEW's P_VOFF when a view of the region gives it (refreshed on a plan
 * cache hit: a batch sliced at a new offset reuses the plan), else a position-keyed constant. */
static int mm_offset(lw *w, int *key, const st_node *view, int64_t v) {
    if (!view || !fuse_in_region(view)) return mm_param(w, key, v);
    int id = iparam(w, P_VOFF, view->pos, -1, v);
    return id < 0 ? 0 : (int)w->b.k->ins[id].imm;
}

static void lower_matmul(lw *w) {
    st_node *mm = w->G->anchor;
    kir_matmul *k = &w->L->k.mm;
    int nb = mm->ndim - 2;
    if (nb < 0) {
        fail(w, "matmul of fewer than 2 dims");
        return;
    }
    st_node *base[2];
    st_node *ov[2];
    int64_t str[2][ST_MAX_DIMS], off[2];
    fuse_mm_split sp[2];
    for (int i = 0; i < 2; i++) {
        fuse_mm_operand_split(mm->src[i], &base[i], str[i], &off[i], &ov[i], &sp[i]);
        /* another dtype: a folded cast (prologue), converted by the GEMM as it loads */
        if (base[i]->dtype != mm->dtype && !fuse_mm_cast_ok(mm->dtype, base[i]->dtype)) {
            fail(w, "matmul operand of another dtype");
            return;
        }
    }
    k->dtype = mm->dtype;
    k->nbatch = nb;
    k->a_buf = buf_slot(w, base[0], 0);
    k->b_buf = buf_slot(w, base[1], 0);
    k->epi = w->G->nouts != 1 || w->G->outs[0] != mm;
    k->o_buf = k->epi ? -1 : buf_slot(w, mm, 1);
    int key = 0;
    k->p_m = mm_param(w, &key, mm->shape[nb]);
    k->p_n = mm_param(w, &key, mm->shape[nb + 1]);
    k->p_k = mm_param(w, &key, mm->src[0]->shape[nb + 1]);
    k->p_bsize = w->L->k.nints;   /* the next params get consecutive slots: their keys are new */
    for (int d = 0; d < nb; d++) mm_param(w, &key, mm->shape[d]);
    k->p_astr = w->L->k.nints;
    for (int d = 0; d < nb + 2; d++) mm_param(w, &key, str[0][d]);
    k->p_bstr = w->L->k.nints;
    for (int d = 0; d < nb + 2; d++) mm_param(w, &key, str[1][d]);
    k->p_aoff = mm_offset(w, &key, ov[0], off[0]);
    k->p_boff = mm_offset(w, &key, ov[1], off[1]);
    for (int i = 0; i < 2; i++) {
        for (int d = 0; d < 2; d++) {   /* split rows / columns: sizes, then strides */
            int n = sp[i].sub[d];
            k->sub[2 * i + d] = n;
            k->p_sub[2 * i + d] = w->L->k.nints;
            for (int q = 0; q < n; q++) mm_param(w, &key, sp[i].size[d][q]);
            for (int q = 0; q < n; q++) mm_param(w, &key, sp[i].stride[d][q]);
        }
    }
    k->b_unit = str[1][nb + 1] == 1 && !k->sub[3];
    w->L->work = mm->numel * mm->src[0]->shape[nb + 1];
    if (k->epi) lower_mm_epilogue(w, mm);
}

/* An attention group (kir_attn): its three or four operands (q, k, v, the mask) as strided bases
 * read in place, like a matmul's (sizes, strides and offsets in P_MM slots, an offset a view of the
 * region gives in its P_VOFF; a broadcast mask's strides are 0), the scale and the dropout's
 * probability, seed and offset user scalars (P_ASCALE, P_ADROP, P_ASEED, P_AROFF, refreshed on a
 * plan cache hit; whether there is dropout is baked). */
static void lower_attn(lw *w) {
    st_node *at = w->G->anchor;
    kir_attn *k = &w->L->k.at;
    int nb = at->ndim - 2;
    if (nb < 0 || (at->dtype != ST_F32 && at->dtype != ST_F64)) {
        fail(w, "attention of fewer than 2 dims or not f32/f64");
        return;
    }
    const int ns = at->nsrc;
    st_node *base[ST_NODE_SRCS], *ov[ST_NODE_SRCS];
    int64_t str[ST_NODE_SRCS][ST_MAX_DIMS], off[ST_NODE_SRCS];
    for (int i = 0; i < ns; i++) {
        fuse_attn_operand(at->src[i], &base[i], str[i], &off[i], &ov[i]);
        if (base[i]->dtype != at->dtype) {
            fail(w, "attention operand of another dtype");
            return;
        }
    }
    k->dtype = at->dtype;
    k->nbatch = nb;
    k->causal = at->arg.attn.causal;
    k->q_buf = buf_slot(w, base[0], 0);
    k->k_buf = buf_slot(w, base[1], 0);
    k->v_buf = buf_slot(w, base[2], 0);
    k->m_buf = ns > 3 ? buf_slot(w, base[3], 0) : -1;
    k->o_buf = buf_slot(w, at, 1);
    int key = 0;
    k->p_lq = mm_param(w, &key, at->shape[nb]);
    k->p_lk = mm_param(w, &key, at->src[1]->shape[nb]);
    k->p_e = mm_param(w, &key, at->src[0]->shape[nb + 1]);
    k->p_ev = mm_param(w, &key, at->shape[nb + 1]);
    k->p_bsize = w->L->k.nints;
    for (int d = 0; d < nb; d++) mm_param(w, &key, at->shape[d]);
    for (int i = 0; i < 4; i++) k->p_str[i] = k->p_off[i] = -1;
    for (int i = 0; i < ns; i++) {
        k->p_str[i] = w->L->k.nints;
        for (int d = 0; d < nb + 2; d++) mm_param(w, &key, str[i][d]);
    }
    for (int i = 0; i < ns; i++) k->p_off[i] = mm_offset(w, &key, ov[i], off[i]);
    int id = fparam(w, P_ASCALE, at->pos, at->arg.attn.scale);
    k->p_scale = id < 0 ? 0 : (int)w->b.k->ins[id].imm;
    k->dropout = at->arg.attn.drop > 0;
    k->p_drop = k->p_seed = k->p_roff = -1;
    if (k->dropout) {
        id = fparam(w, P_ADROP, at->pos, at->arg.attn.drop);
        k->p_drop = id < 0 ? 0 : (int)w->b.k->ins[id].imm;
        id = iparam(w, P_ASEED, at->pos, -1, (int64_t)at->arg.attn.seed);
        k->p_seed = id < 0 ? 0 : (int)w->b.k->ins[id].imm;
        id = iparam(w, P_AROFF, at->pos, -1, (int64_t)at->arg.attn.offset);
        k->p_roff = id < 0 ? 0 : (int)w->b.k->ins[id].imm;
    }
    int64_t nrows = 1;
    for (int d = 0; d <= nb; d++) nrows *= at->shape[d];
    w->L->work = nrows * at->src[1]->shape[nb] * (at->src[0]->shape[nb + 1] + at->shape[nb + 1]);
}

/* "k3_add_exp_sum": the group's ops, in order, without views and leaves. */
static st_status name_op(st_node *n, void *ud) {
    char *name = ud;
    if (n->op == ST_OP_VIEW || st_ops[n->op].kind == OPK_SOURCE) return ST_OK;
    const char *s = st_ops[n->op].name;
    size_t len = strlen(name), sl = strlen(s);
    const char *last = strrchr(name, '_');
    if (last && !strcmp(last + 1, s)) return ST_OK;
    if (len + sl + 2 < 40) snprintf(name + len, 64 - len, "_%s", s);
    return ST_OK;
}

static void shape_comment(fuse_group *G, kir_kernel *k) {
    const st_node *o = G->anchor ? G->anchor : G->outs[0];
    int n = snprintf(k->comment, sizeof k->comment, "%s; out: (", fuse_kind_names[G->kind]);
    for (int d = 0; d < o->ndim && n < 120; d++)
        n += snprintf(k->comment + n, sizeof k->comment - (size_t)n, "%sd%d", d ? ", " : "", d);
    snprintf(k->comment + n, sizeof k->comment - (size_t)n, ") %s, %d output%s", st_dtypes[o->dtype].name,
             G->nouts, G->nouts == 1 ? "" : "s");
}

st_status fuse_lower(fuse_plan *p, int g, fuse_launch *out) {
    memset(out, 0, sizeof *out);
    fuse_group *G = &p->groups[g];
    static const kir_kind kk[FG_KIND_COUNT] = {[FG_POINTWISE] = KK_POINTWISE, [FG_REDUCE] = KK_REDUCE,
                                               [FG_MATMUL] = KK_MATMUL, [FG_SCATTER] = KK_SCATTER,
                                               [FG_SETVIEW] = KK_SETVIEW, [FG_ATTN] = KK_ATTN};
    lw *w = st_calloc(1, sizeof *w);
    if (!w) return st_last_status();
    w->p = p;
    w->g = g;
    w->G = G;
    w->L = out;
    st_status s = kir_builder_init(&w->b, &out->k, kk[G->kind]);
    if (s == ST_OK) {
        switch (G->kind) {
        case FG_POINTWISE: lower_pointwise(w); break;
        case FG_REDUCE: lower_reduce(w); break;
        case FG_MATMUL: lower_matmul(w); break;
        case FG_SCATTER: lower_scatter(w); break;
        case FG_SETVIEW: lower_setview(w); break;
        case FG_ATTN: lower_attn(w); break;
        default: fail(w, "group kind"); break;
        }
        if (w->b.failed && !w->bad) fail(w, "out of memory");
        if (w->bad) s = st_last_status() != ST_OK ? st_last_status() : ST_ERR_INTERNAL;
    }
    kir_builder_free(&w->b);
    st_free(w);
    if (s == ST_OK) {
        snprintf(out->name, sizeof out->name, "k%d", g);
        fuse_group_nodes(p, g, name_op, out->name);
        shape_comment(G, &out->k);
        kir_find_donors(&out->k);
    } else {
        fuse_launch_free(out);
    }
    return s;
}

void fuse_launch_free(fuse_launch *l) {
    kir_kernel_free(&l->k);
    st_free(l->ints);
    st_free(l->flts);
    l->ints = NULL;
    l->flts = NULL;
}
