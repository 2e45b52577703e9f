/*
 * einsum.c — st_einsum: Einstein summation lowered onto views, sums, elementwise mul and matmul.
 *
 * Nothing here records a node of its own: the result is a composition of public ops (permute,
 * reshape, sum, mul, matmul), so it is lazy, fused and differentiable like them.
 *
 * Labels: 'A'..'Z' are 0..25, 'a'..'z' 26..51 (so the implicit output's "alphabetical" order puts
 * capitals first, as numpy and PyTorch do), and the dims an ellipsis covers are 52.. (right
 * aligned: the last dim of every "..." is the same label). Label sets are 64-bit masks.
 *
 * Lowering. Each operand first becomes a *term*: a view with one dim per distinct label (a repeated
 * label within an operand is its diagonal, a strided view). Terms are contracted left to right; for
 * a pair (a, b) the labels still needed later (the output's and the remaining operands') are `keep`:
 *   - a label in only one of the two and not kept is summed out of that term first (so is a
 *     size-1 dim that the other term broadcasts, after dropping it from its own term);
 *   - kept labels in both are batch dims, kept labels in one are free dims (M from a, N from b);
 *   - labels in both and not kept are contracted (K).
 * a is permuted to (batch, free_a, K) and b to (batch, K, free_b), the free and contracted groups
 * reshaped to one dim each, and one st_matmul computes (batch.., M, N), broadcasting size-1 batch
 * dims itself. Permutes are views and the matmul folds transposed operands, so "bij,bjk->bik" or
 * "bhqd,bhkd->bhqk" is one matmul kernel; a group whose dims are not adjacent in memory is copied
 * by the reshape. With no contracted label the pair is an elementwise st_mul instead (an outer or
 * Hadamard product stays a fusable pointwise op). A single operand is summed. The last term is
 * permuted to the output order.
 */
#include "runtime/tensor.h"

#define EIN_LETTERS 52
#define EIN_LABELS (EIN_LETTERS + ST_MAX_DIMS)

typedef struct ein_term {
    st_tensor *t;               /* owned */
    int nd;                     /* == t's ndim */
    uint8_t lab[ST_MAX_DIMS];   /* the label of each dim, distinct */
} ein_term;

/* The parsed spec: per operand its labels in order (repeats kept), and the output's. */
typedef struct ein_spec {
    const char *text;
    int n, nell;                /* operands; dims the widest "..." covers */
    uint8_t (*in)[ST_MAX_DIMS];
    int *nin;
    uint8_t out[ST_MAX_DIMS];
    int nout;
} ein_spec;

static int letter_label(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    return -1;
}

/* A label as the user wrote it: "'j'" or "'...' dim 2". */
static const char *label_name(int l, char *buf, size_t n) {
    if (l < EIN_LETTERS) snprintf(buf, n, "'%c'", l < 26 ? 'A' + l : 'a' + l - 26);
    else snprintf(buf, n, "'...' dim %d", l - EIN_LETTERS);
    return buf;
}

static uint64_t label_mask(const uint8_t *lab, int n) {
    uint64_t m = 0;
    for (int i = 0; i < n; i++) m |= 1ull << lab[i];
    return m;
}

/* ---- parsing ---- */

/* Reads one subscript [s, e): its letters into lab (at most ST_MAX_DIMS + 1 are kept, enough to
 * detect too many), *nl their count, *ell the letter position of "..." or -1. */
static st_status parse_sub(const ein_spec *sp, const char *s, const char *e, const char *what,
                           uint8_t *lab, int *nl, int *ell) {
    *nl = 0;
    *ell = -1;
    for (const char *p = s; p < e; p++) {
        if (*p == ' ') continue;
        if (*p == '.') {
            if (e - p < 3 || p[1] != '.' || p[2] != '.')
                return st_error(ST_ERR_ARG, "einsum: a '.' that is not part of '...' in %s of \"%s\"", what, sp->text);
            if (*ell >= 0)
                return st_error(ST_ERR_ARG, "einsum: '...' appears twice in %s of \"%s\"", what, sp->text);
            *ell = *nl;
            p += 2;
            continue;
        }
        int l = letter_label(*p);
        if (l < 0)
            return st_error(ST_ERR_ARG, "einsum: bad character '%c' in %s of \"%s\" (indices are letters a-z, A-Z)",
                            *p, what, sp->text);
        if (*nl > ST_MAX_DIMS)
            return st_error(ST_ERR_ARG, "einsum: %s of \"%s\" has more than %d indices", what, sp->text, ST_MAX_DIMS);
        lab[(*nl)++] = (uint8_t)l;
    }
    return ST_OK;
}

/* The labels of operand i (ndim dims): its letters with the "..." dims spliced in at ell, labelled
 * right-aligned from EIN_LABELS for now (parse_spec shifts them once the widest "..." is known). */
static st_status operand_labels(ein_spec *sp, int i, const st_tensor *t, const uint8_t *let, int nl, int ell) {
    char sh[160];
    int nd = t->ndim, e = nd - nl;
    if (ell < 0 ? e != 0 : e < 0)
        return st_error(ST_ERR_SHAPE, "einsum: operand %d has %d dims %s but \"%s\" gives it %d %s", i + 1, nd,
                        st_shape_str(nd, t->shape, sh, sizeof sh), sp->text, nl,
                        ell < 0 ? "indices" : "indices and '...'");
    sp->nin[i] = nd;
    int k = 0;
    for (int j = 0; j <= nl; j++) {
        if (j == ell)
            for (int d = 0; d < e; d++) sp->in[i][k++] = (uint8_t)(EIN_LABELS - e + d);
        if (j < nl) sp->in[i][k++] = let[j];
    }
    return ST_OK;
}

/* Implicit output: the "..." dims, then the letters used exactly once, in label order. */
static st_status implicit_output(ein_spec *sp) {
    int count[EIN_LETTERS] = {0};
    sp->nout = 0;
    for (int d = 0; d < sp->nell; d++) sp->out[sp->nout++] = (uint8_t)(EIN_LETTERS + d);
    for (int i = 0; i < sp->n; i++)
        for (int d = 0; d < sp->nin[i]; d++)
            if (sp->in[i][d] < EIN_LETTERS) count[sp->in[i][d]]++;
    for (int l = 0; l < EIN_LETTERS; l++)
        if (count[l] == 1) {
            if (sp->nout == ST_MAX_DIMS)
                return st_error(ST_ERR_SHAPE, "einsum: the implicit output of \"%s\" would have more than %d dims",
                                sp->text, ST_MAX_DIMS);
            sp->out[sp->nout++] = (uint8_t)l;
        }
    return ST_OK;
}

static st_status explicit_output(ein_spec *sp, const char *s, uint64_t used) {
    uint8_t let[ST_MAX_DIMS + 1];
    int nl, ell;
    char b[32];
    st_status st = parse_sub(sp, s, s + strlen(s), "the output", let, &nl, &ell);
    if (st != ST_OK) return st;
    uint64_t seen = 0;
    for (int j = 0; j < nl; j++) {
        if (seen & (1ull << let[j]))
            return st_error(ST_ERR_ARG, "einsum: index %s appears twice in the output of \"%s\"",
                            label_name(let[j], b, sizeof b), sp->text);
        if (!(used & (1ull << let[j])))
            return st_error(ST_ERR_ARG, "einsum: output index %s of \"%s\" is in no operand",
                            label_name(let[j], b, sizeof b), sp->text);
        seen |= 1ull << let[j];
    }
    int ne = ell >= 0 ? sp->nell : 0;
    if (nl + ne > ST_MAX_DIMS)
        return st_error(ST_ERR_SHAPE, "einsum: the output of \"%s\" would have %d dims (at most %d)", sp->text,
                        nl + ne, ST_MAX_DIMS);
    sp->nout = 0;
    for (int j = 0; j <= nl; j++) {
        if (j == ell)
            for (int d = 0; d < ne; d++) sp->out[sp->nout++] = (uint8_t)(EIN_LETTERS + d);
        if (j < nl) sp->out[sp->nout++] = let[j];
    }
    return ST_OK;
}

static st_status parse_spec(ein_spec *sp, st_tensor *const *ops) {
    const char *arrow = strstr(sp->text, "->");
    const char *end = arrow ? arrow : sp->text + strlen(sp->text);
    if (arrow && strstr(arrow + 2, "->"))
        return st_error(ST_ERR_ARG, "einsum: \"%s\" has more than one '->'", sp->text);
    int commas = 0;
    for (const char *p = sp->text; p < end; p++) commas += *p == ',';
    if (commas + 1 != sp->n)
        return st_error(ST_ERR_ARG, "einsum: \"%s\" names %d operand%s but %d %s given", sp->text, commas + 1,
                        commas ? "s" : "", sp->n, sp->n == 1 ? "was" : "were");
    const char *s = sp->text;
    for (int i = 0; i < sp->n; i++) {
        const char *e = s;
        while (e < end && *e != ',') e++;
        uint8_t let[ST_MAX_DIMS + 1];
        int nl, ell;
        char what[32];
        snprintf(what, sizeof what, "operand %d", i + 1);
        st_status st = parse_sub(sp, s, e, what, let, &nl, &ell);
        if (st == ST_OK) st = operand_labels(sp, i, ops[i], let, nl, ell);
        if (st != ST_OK) return st;
        if (ell >= 0 && ops[i]->ndim - nl > sp->nell) sp->nell = ops[i]->ndim - nl;
        s = e + 1;
    }
    /* shift the "..." labels down so that the widest "..." starts at EIN_LETTERS */
    uint64_t used = 0;
    for (int i = 0; i < sp->n; i++) {
        for (int d = 0; d < sp->nin[i]; d++)
            if (sp->in[i][d] >= EIN_LETTERS) sp->in[i][d] = (uint8_t)(sp->in[i][d] - (ST_MAX_DIMS - sp->nell));
        used |= label_mask(sp->in[i], sp->nin[i]);
    }
    return arrow ? explicit_output(sp, arrow + 2, used) : implicit_output(sp);
}

/* ---- terms ---- */

/* Checks that the sizes of every label are equal or 1 (errors name both operands); a label
 * repeated within one operand (a diagonal) needs equal sizes there, without broadcasting. */
static st_status label_sizes(const ein_spec *sp, st_tensor *const *ops) {
    int owner[EIN_LABELS];
    int64_t size[EIN_LABELS];
    char b[32], x[160], y[160];
    for (int l = 0; l < EIN_LABELS; l++) size[l] = -1, owner[l] = -1;
    for (int i = 0; i < sp->n; i++) {
        int64_t mine[EIN_LABELS];
        for (int l = 0; l < EIN_LABELS; l++) mine[l] = -1;
        for (int d = 0; d < sp->nin[i]; d++) {
            int l = sp->in[i][d];
            int64_t s = ops[i]->shape[d];
            if (mine[l] >= 0 && mine[l] != s)
                return st_error(ST_ERR_SHAPE, "einsum: index %s is repeated in operand %d (shape %s) of \"%s\" "
                                "with sizes %lld and %lld (a diagonal needs equal sizes)",
                                label_name(l, b, sizeof b), i + 1, st_shape_str(ops[i]->ndim, ops[i]->shape, x, sizeof x),
                                sp->text, (long long)mine[l], (long long)s);
            mine[l] = s;
            if (size[l] < 0 || (size[l] == 1 && s != 1)) {
                size[l] = s;
                owner[l] = i;
            } else if (s != 1 && s != size[l]) {
                int o = owner[l];
                return st_error(ST_ERR_SHAPE, "einsum: index %s of \"%s\" has size %lld in operand %d (shape %s) but "
                                "%lld in operand %d (shape %s)", label_name(l, b, sizeof b), sp->text,
                                (long long)size[l], o + 1, st_shape_str(ops[o]->ndim, ops[o]->shape, x, sizeof x),
                                (long long)s, i + 1, st_shape_str(ops[i]->ndim, ops[i]->shape, y, sizeof y));
            }
        }
    }
    return ST_OK;
}

/* Operand i as a term: one dim per distinct label; a repeated label's dims become their diagonal
 * (one dim whose stride is the sum of theirs). */
static st_status make_term(const ein_spec *sp, int i, st_tensor *t, ein_term *out) {
    int64_t shape[ST_MAX_DIMS], strides[ST_MAX_DIMS];
    int first[EIN_LABELS], nd = 0;
    for (int l = 0; l < EIN_LABELS; l++) first[l] = -1;
    for (int d = 0; d < sp->nin[i]; d++) {
        int l = sp->in[i][d];
        if (first[l] >= 0) { /* label_sizes checked that the sizes are equal */
            strides[first[l]] += t->strides[d];
            continue;
        }
        first[l] = nd;
        shape[nd] = t->shape[d];
        strides[nd] = t->strides[d];
        out->lab[nd++] = (uint8_t)l;
    }
    out->nd = nd;
    out->t = st_tensor_view(t, nd, shape, strides, t->offset);
    return out->t ? ST_OK : st_last_status();
}

static int find_label(const ein_term *x, int l) {
    for (int d = 0; d < x->nd; d++)
        if (x->lab[d] == l) return d;
    return -1;
}

/* The size of label l in x; 1 when x does not have it (it broadcasts). */
static int64_t size_in(const ein_term *x, int l) {
    int d = find_label(x, l);
    return d >= 0 ? x->t->shape[d] : 1;
}

/* Drops from x the size-1 dims whose label other has with another size (larger, or 0) and that
 * are not kept: x does not depend on them, and other sums over them alone. */
static st_status drop_broadcast(ein_term *x, const ein_term *other, uint64_t keep) {
    int64_t shape[ST_MAX_DIMS], strides[ST_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < x->nd; d++) {
        int l = x->lab[d];
        if (x->t->shape[d] == 1 && !(keep & (1ull << l)) && find_label(other, l) >= 0 && size_in(other, l) != 1)
            continue;
        shape[k] = x->t->shape[d];
        strides[k] = x->t->strides[d];
        x->lab[k++] = (uint8_t)l;
    }
    if (k == x->nd) return ST_OK;
    st_tensor *v = st_tensor_view(x->t, k, shape, strides, x->t->offset);
    if (!v) return st_last_status();
    st_release(x->t);
    x->t = v;
    x->nd = k;
    return ST_OK;
}

/* Sums x over its labels outside keep (x->t is replaced). */
static st_status sum_out(ein_term *x, uint64_t keep) {
    int axes[ST_MAX_DIMS], na = 0, k = 0;
    for (int d = 0; d < x->nd; d++)
        if (!(keep & (1ull << x->lab[d]))) axes[na++] = d;
        else x->lab[k++] = x->lab[d];
    if (!na) return ST_OK;
    st_tensor *s = st_sum(x->t, na, axes, 0);
    if (!s) return st_last_status();
    st_release(x->t);
    x->t = s;
    x->nd = k;
    return ST_OK;
}

/* x permuted to the label order lab[0..n) (all of x's labels), broadcast to full when given (n
 * sizes), then reshaped to shape (nd dims). A new reference. */
static st_tensor *arrange(const ein_term *x, const uint8_t *lab, int n, const int64_t *full, int nd,
                          const int64_t *shape) {
    int perm[ST_MAX_DIMS];
    for (int i = 0; i < n; i++) perm[i] = find_label(x, lab[i]);
    st_tensor *p = st_permute(x->t, perm);
    st_tensor *e = p && full ? st_expand(p, n, full) : p ? st_retain(p) : NULL;
    st_tensor *r = e ? st_reshape(e, nd, shape) : NULL;
    st_release(p);
    st_release(e);
    return r;
}

/* The labels of x in mask, in x's dim order, appended to lab at *n; returns the product of sizes. */
static int64_t collect(const ein_term *x, uint64_t mask, uint8_t *lab, int *n) {
    int64_t p = 1;
    for (int d = 0; d < x->nd; d++)
        if (mask & (1ull << x->lab[d])) {
            lab[(*n)++] = x->lab[d];
            p *= x->t->shape[d];
        }
    return p;
}

static st_status too_many_dims(const char *spec, int nd) {
    return st_error(ST_ERR_SHAPE, "einsum: an intermediate result of \"%s\" would have %d dims (at most %d); "
                    "order the operands so that fewer indices are live at once", spec, nd, ST_MAX_DIMS);
}

/* The pair as one batched matmul: a as (batch.., M, K), b as (batch.., K, N), batch dims broadcast
 * by st_matmul; a batch too long for the dims left is expanded and flattened to one dim (a copy).
 * lr: the result's labels (nbatch batch, nfa free of a, then free of b), rshape their sizes. */
static st_tensor *pair_matmul(const ein_term *a, const ein_term *b, uint64_t con, const uint8_t *lr, int nr,
                              int nbatch, int nfa, const int64_t *rshape) {
    uint8_t la[ST_MAX_DIMS], lb[ST_MAX_DIMS];
    int64_t sa[ST_MAX_DIMS], sb[ST_MAX_DIMS], fa[ST_MAX_DIMS], fb[ST_MAX_DIMS], M = 1, N = 1;
    int na = nbatch + nfa, nb = nbatch, nsa = 0, nsb = 0, flat = nbatch + 2 > ST_MAX_DIMS;
    memcpy(la, lr, (size_t)na);
    int64_t K = collect(a, con, la, &na);
    memcpy(lb, lr, (size_t)nbatch);
    collect(a, con, lb, &nb);
    memcpy(lb + nb, lr + nbatch + nfa, (size_t)(nr - nbatch - nfa));
    nb += nr - nbatch - nfa;
    for (int d = nbatch; d < nbatch + nfa; d++) M *= rshape[d];
    for (int d = nbatch + nfa; d < nr; d++) N *= rshape[d];
    for (int i = 0; i < na; i++) fa[i] = i < nbatch ? rshape[i] : size_in(a, la[i]);
    for (int i = 0; i < nb; i++) fb[i] = i < nbatch ? rshape[i] : size_in(b, lb[i]);
    if (flat) {
        int64_t B = 1;
        for (int d = 0; d < nbatch; d++) B *= rshape[d];
        sa[nsa++] = sb[nsb++] = B;
    } else {
        for (int d = 0; d < nbatch; d++) {
            sa[nsa++] = size_in(a, lr[d]);
            sb[nsb++] = size_in(b, lr[d]);
        }
    }
    sa[nsa++] = M;
    sa[nsa++] = K;
    sb[nsb++] = K;
    sb[nsb++] = N;
    st_tensor *x = arrange(a, la, na, flat ? fa : NULL, nsa, sa);
    st_tensor *y = x ? arrange(b, lb, nb, flat ? fb : NULL, nsb, sb) : NULL;
    st_tensor *mm = y ? st_matmul(x, y) : NULL;
    st_tensor *r = mm ? st_reshape(mm, nr, rshape) : NULL;
    st_release(x);
    st_release(y);
    st_release(mm);
    return r;
}

/* The pair as an elementwise product: a as (batch, free_a, 1..), b as (batch, 1.., free_b). */
static st_tensor *pair_mul(const ein_term *a, const ein_term *b, const uint8_t *lr, int nr, int nbatch, int nfa) {
    uint8_t lb[ST_MAX_DIMS];
    int64_t sa[ST_MAX_DIMS], sb[ST_MAX_DIMS];
    memcpy(lb, lr, (size_t)nbatch);
    memcpy(lb + nbatch, lr + nbatch + nfa, (size_t)(nr - nbatch - nfa));
    for (int d = 0; d < nr; d++) {
        sa[d] = d < nbatch + nfa ? size_in(a, lr[d]) : 1;
        sb[d] = d < nbatch || d >= nbatch + nfa ? size_in(b, lr[d]) : 1;
    }
    st_tensor *x = arrange(a, lr, a->nd, NULL, nr, sa);
    st_tensor *y = x ? arrange(b, lb, b->nd, NULL, nr, sb) : NULL;
    st_tensor *r = y ? st_mul(x, y) : NULL;
    st_release(x);
    st_release(y);
    return r;
}

/* a and b contracted into a (b's tensor is released): the result's labels are (batch, free_a,
 * free_b), each group in its operand's dim order. */
static st_status contract(const char *spec, ein_term *a, ein_term *b, uint64_t keep) {
    st_status st = drop_broadcast(a, b, keep);
    if (st == ST_OK) st = drop_broadcast(b, a, keep);
    uint64_t ma = label_mask(a->lab, a->nd), mb = label_mask(b->lab, b->nd);
    if (st == ST_OK) st = sum_out(a, keep | mb);
    if (st == ST_OK) st = sum_out(b, keep | ma);
    if (st != ST_OK) return st;
    ma = label_mask(a->lab, a->nd);
    mb = label_mask(b->lab, b->nd);
    uint64_t batch = ma & mb & keep, con = ma & mb & ~keep;
    uint8_t lr[2 * ST_MAX_DIMS];
    int nr = 0;
    collect(a, batch, lr, &nr);
    int nbatch = nr;
    collect(a, ma & ~mb, lr, &nr);
    int nfa = nr - nbatch;
    collect(b, mb & ~ma, lr, &nr);
    if (nr > ST_MAX_DIMS) return too_many_dims(spec, nr);
    int64_t rshape[ST_MAX_DIMS];
    for (int d = 0; d < nr; d++) {
        int64_t x = size_in(a, lr[d]), y = size_in(b, lr[d]);
        rshape[d] = x == 1 ? y : x;
    }
    st_tensor *r = con ? pair_matmul(a, b, con, lr, nr, nbatch, nfa, rshape) : pair_mul(a, b, lr, nr, nbatch, nfa);
    if (!r) return st_last_status();
    st_release(a->t);
    st_release(b->t);
    b->t = NULL;
    a->t = r;
    a->nd = nr;
    memcpy(a->lab, lr, (size_t)nr);
    return ST_OK;
}

/* ---- entry ---- */

static st_tensor *einsum_run(ein_spec *sp, st_tensor *const *ops, ein_term *terms) {
    if (parse_spec(sp, ops) != ST_OK || label_sizes(sp, ops) != ST_OK) return NULL;
    for (int i = 0; i < sp->n; i++)
        if (make_term(sp, i, ops[i], &terms[i]) != ST_OK) return NULL;
    uint64_t out = label_mask(sp->out, sp->nout);
    /* keep for the step that consumes operand k: the output's labels and those of operands > k */
    uint64_t *later = st_calloc((size_t)sp->n + 1, sizeof *later);
    if (!later) return NULL;
    for (int i = sp->n - 1; i >= 0; i--) later[i] = later[i + 1] | label_mask(terms[i].lab, terms[i].nd);
    st_status st = ST_OK;
    for (int k = 1; k < sp->n && st == ST_OK; k++) st = contract(sp->text, &terms[0], &terms[k], out | later[k + 1]);
    st_free(later);
    if (st == ST_OK) st = sum_out(&terms[0], out);
    if (st != ST_OK) return NULL;
    int perm[ST_MAX_DIMS];
    for (int i = 0; i < sp->nout; i++) perm[i] = find_label(&terms[0], sp->out[i]);
    return st_permute(terms[0].t, perm);
}

st_tensor *st_einsum(const char *spec, int n, st_tensor *const *operands) {
    if (!spec) {
        st_error(ST_ERR_ARG, "einsum: NULL spec");
        return NULL;
    }
    if (n < 1 || !operands) {
        st_error(ST_ERR_ARG, "einsum: \"%s\" needs at least one operand, got %d", spec, n);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!operands[i]) {
            st_error(ST_ERR_ARG, "einsum: operand %d is NULL", i + 1);
            return NULL;
        }
    ein_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.text = spec;
    sp.n = n;
    sp.in = st_calloc((size_t)n, sizeof *sp.in);
    sp.nin = st_calloc((size_t)n, sizeof *sp.nin);
    ein_term *terms = st_calloc((size_t)n, sizeof *terms);
    st_tensor *r = sp.in && sp.nin && terms ? einsum_run(&sp, operands, terms) : NULL;
    for (int i = 0; terms && i < n; i++) st_release(terms[i].t);
    st_free(terms);
    st_free(sp.nin);
    st_free(sp.in);
    return r;
}
