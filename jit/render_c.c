/*
 * render_c.c — the C renderer: kernel IR to one C11 function per kernel.
 *
 * Output shape:
 *     // stitch kernel: pointwise; out: (d0, d1) f32, 1 output
 *     void KNAME(const st_kargs *a) {
 *         float *p0 = (float *)a->bufs[0];          buffers, storage types
 *         const int64_t v0 = a->ints[0];            parameters and literals, hoisted
 *         #pragma omp parallel for if (v0 > 32768) num_threads(a->nthreads)
 *         for (int64_t v1 = 0; v1 < v0; v1++) {     one statement per live instruction
 *             const float v2 = p1[v1];
 *             const float v3 = st_exp(v2);            op math = the prelude macro of ops.def's FN
 *             p0[v1] = v3;
 *         }
 *     }
 * Invariant: the text depends only on the IR (never on parameter values), so equal structure
 * gives equal source and one cache entry. Math is never written here: ops print their prelude
 * macro, conversions print ST_CVT / st_h2f / st_f2h / st_bf2f / st_f2bf.
 */
#include "render.h"

#include <math.h>
#include <stdarg.h>

#define PAR_THRESHOLD 32768   /* elements of work below which a kernel runs on one thread */

void render_printf(render_buf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int w = b->s ? vsnprintf(b->s + b->n, room, fmt, ap) : -1;
        va_end(ap);
        if (w >= 0 && (size_t)w < room) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (w >= 0 && cap - b->n <= (size_t)w) cap *= 2;
        char *p = st_realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
}

static const char *storage_ctype(int dt) { return st_dtypes[dt].ctype; }

/* Which of a, b, c, d are value operands (bits 0..3). */
static unsigned operand_mask(const kir_ins *in) {
    switch ((kir_opcode)in->op) {
    case KI_IPARAM: case KI_FPARAM: case KI_ICONST: case KI_FCONST: case KI_ENDLOOP: case KI_ENDIF:
        return 0;
    case KI_LOOP: return in->b >= 0 ? 3u : 1u;
    case KI_IF: case KI_CVT: case KI_ROUND: case KI_ACC: case KI_SETERR: return 1u;
    case KI_LOAD: return 2u;
    case KI_STORE: return 6u;
    case KI_ACCUPD: return 3u;
    case KI_ARGUPD: return 15u;
    case KI_RAND: return in->sop == ST_OP_RAND_INT ? 15u : 3u;
    case KI_SEL: return 7u;
    case KI_OP: return (1u << st_ops[in->sop].nsrc) - 1;
    default: return 3u; /* integer binaries */
    }
}

void render_mark_live(const kir_kernel *k, uint8_t *live) {
    for (int i = 0; i < k->n; i++) {
        kir_opcode op = (kir_opcode)k->ins[i].op;
        live[i] = op == KI_LOOP || op == KI_ENDLOOP || op == KI_IF || op == KI_ENDIF ||
                  op == KI_STORE || op == KI_ACC || op == KI_ACCUPD || op == KI_ARGUPD ||
                  op == KI_SETERR;
    }
    for (int i = k->n - 1; i >= 0; i--) {
        if (!live[i]) continue;
        const kir_ins *in = &k->ins[i];
        unsigned m = operand_mask(in);
        const int32_t ops[4] = {in->a, in->b, in->c, in->d};
        for (int j = 0; j < 4; j++)
            if ((m >> j & 1) && ops[j] >= 0) live[ops[j]] = 1;
    }
}

static void int_literal(render_buf *b, kir_type t, int64_t v) {
    if (v == INT64_MIN) render_printf(b, "((%s)(-9223372036854775807LL - 1))", kir_type_cname[t]);
    else render_printf(b, "((%s)%lldLL)", kir_type_cname[t], (long long)v);
}

void render_value_expr(render_buf *b, const kir_kernel *k, int i) {
    const kir_ins *in = &k->ins[i];
    const char *T = kir_type_cname[in->type];
    switch ((kir_opcode)in->op) {
    case KI_IPARAM: render_printf(b, "a->ints[%lld]", (long long)in->imm); break;
    case KI_FPARAM: render_printf(b, "a->flts[%lld]", (long long)in->imm); break;
    case KI_ICONST: int_literal(b, (kir_type)in->type, in->imm); break;
    case KI_FCONST:
        if (isinf(in->fimm)) render_printf(b, "((%s)%sINFINITY)", T, in->fimm < 0 ? "-" : "");
        else render_printf(b, "((%s)%.17g)", T, in->fimm);
        break;
    case KI_IADD: render_printf(b, "v%d + v%d", in->a, in->b); break;
    case KI_ISUB: render_printf(b, "v%d - v%d", in->a, in->b); break;
    case KI_IMUL: render_printf(b, "v%d * v%d", in->a, in->b); break;
    case KI_IDIV: render_printf(b, "v%d / v%d", in->a, in->b); break;
    case KI_IMOD: render_printf(b, "v%d %% v%d", in->a, in->b); break;
    case KI_ILT: render_printf(b, "(uint8_t)(v%d < v%d)", in->a, in->b); break;
    case KI_ILE: render_printf(b, "(uint8_t)(v%d <= v%d)", in->a, in->b); break;
    case KI_LAND: render_printf(b, "(uint8_t)(v%d & v%d)", in->a, in->b); break;
    case KI_SEL: render_printf(b, "v%d ? v%d : v%d", in->a, in->b, in->c); break;
    case KI_LOAD:
        if (in->imm == ST_F16) render_printf(b, "st_h2f(p%d[v%d])", in->a, in->b);
        else if (in->imm == ST_BF16) render_printf(b, "st_bf2f(p%d[v%d])", in->a, in->b);
        else render_printf(b, "p%d[v%d]", in->a, in->b);
        break;
    case KI_OP: {
        const st_op_info *oi = &st_ops[in->sop];
        render_printf(b, "%s(v%d", oi->fn, in->a);
        if (oi->nsrc > 1) render_printf(b, ", v%d", in->b);
        if (oi->nsrc > 2) render_printf(b, ", v%d", in->c);
        render_printf(b, ")");
        break;
    }
    case KI_CVT: render_printf(b, "ST_CVT(%s, v%d)", T, in->a); break;
    case KI_ROUND:
        if (in->imm == ST_BF16) render_printf(b, "st_bf2f(st_f2bf(v%d))", in->a);
        else render_printf(b, "st_h2f(st_f2h(v%d))", in->a);
        break;
    case KI_RAND:
        if (in->sop == ST_OP_RAND_INT)
            render_printf(b, "st_rand_int((uint64_t)v%d, (uint64_t)v%d, v%d, v%d)", in->a, in->b, in->c, in->d);
        else
            render_printf(b, "st_rand_%s_%s((uint64_t)v%d, (uint64_t)v%d)",
                          in->sop == ST_OP_RAND_N ? "normal" : "uniform", in->type == KT_F64 ? "f64" : "f32",
                          in->a, in->b);
        break;
    default:
        render_printf(b, "0 /* bad opcode %d */", in->op);
        break;
    }
}

static void indent(render_buf *b, int depth) { render_printf(b, "%*s", 4 * depth, ""); }

static void store_expr(render_buf *b, int dt, int v) {
    if (dt == ST_F16) render_printf(b, "st_f2h(v%d)", v);
    else if (dt == ST_BF16) render_printf(b, "st_f2bf(v%d)", v);
    else if (dt == ST_BOOL) render_printf(b, "(uint8_t)(v%d != 0)", v);
    else render_printf(b, "v%d", v);
}

static void render_buffers(render_buf *b, const kir_kernel *k) {
    for (int s = 0; s < k->nbufs; s++) {
        const char *ct = storage_ctype(k->buf_dtype[s]);
        const char *q = k->buf_out[s] ? "" : "const ";
        render_printf(b, "    %s%s *p%d = (%s%s *)a->bufs[%d];\n", q, ct, s, q, ct, s);
    }
}

static void render_matmul(render_buf *b, const kir_kernel *k) {
    const kir_matmul *m = &k->mm;
    const char *st = storage_ctype(m->dtype);
    int isf = st_is_float((st_dtype)m->dtype);
    const char *acc = m->dtype == ST_F64 ? "double" : isf ? "float" : "uint64_t";
    const char *ld = m->dtype == ST_F16 ? "st_h2f" : m->dtype == ST_BF16 ? "st_bf2f" : "";
    int nb = m->nbatch;
    render_printf(b, "    const %s *A = (const %s *)a->bufs[%d];\n", st, st, m->a_buf);
    render_printf(b, "    const %s *B = (const %s *)a->bufs[%d];\n", st, st, m->b_buf);
    render_printf(b, "    %s *O = (%s *)a->bufs[%d];\n", st, st, m->o_buf);
    render_printf(b, "    const int64_t M = a->ints[%d], N = a->ints[%d], K = a->ints[%d];\n", m->p_m, m->p_n, m->p_k);
    render_printf(b, "    const int64_t sam = a->ints[%d], sak = a->ints[%d], aoff = a->ints[%d];\n",
                  m->p_astr + nb, m->p_astr + nb + 1, m->p_aoff);
    render_printf(b, "    const int64_t sbk = a->ints[%d], sbn = a->ints[%d], boff = a->ints[%d];\n",
                  m->p_bstr + nb, m->p_bstr + nb + 1, m->p_boff);
    render_printf(b, "    int64_t NB = 1;\n");
    for (int d = 0; d < nb; d++) render_printf(b, "    NB *= a->ints[%d];\n", m->p_bsize + d);
    render_printf(b, "    (void)sbn;\n");
    render_printf(b, "    #pragma omp parallel for if (NB * M * N * K > %d) num_threads(a->nthreads)\n",
                  PAR_THRESHOLD);
    render_printf(b, "    for (int64_t bm = 0; bm < NB * M; bm++) {\n");
    render_printf(b, "        const int64_t m = bm %% M;\n");
    render_printf(b, "        int64_t ao = aoff + m * sam, bo = boff, t = bm / M;\n");
    for (int d = nb - 1; d >= 0; d--) {
        render_printf(b, "        { const int64_t i = t %% a->ints[%d]; t /= a->ints[%d];\n", m->p_bsize + d,
                      m->p_bsize + d);
        render_printf(b, "          ao += i * a->ints[%d]; bo += i * a->ints[%d]; }\n", m->p_astr + d, m->p_bstr + d);
    }
    render_printf(b, "        (void)t;\n");
    render_printf(b, "        %s *orow = O + bm * N;\n", st);
    render_printf(b, "        for (int64_t n0 = 0; n0 < N; n0 += 256) {\n");
    render_printf(b, "            const int64_t nn = N - n0 < 256 ? N - n0 : 256;\n");
    render_printf(b, "            %s acc[256];\n", acc);
    render_printf(b, "            for (int64_t j = 0; j < nn; j++) acc[j] = 0;\n");
    render_printf(b, "            for (int64_t k = 0; k < K; k++) {\n");
    render_printf(b, "                const %s av = (%s)%s(A[ao + k * sak]);\n", acc, acc, ld);
    render_printf(b, "                const %s *bp = B + bo + k * sbk + n0 * sbn;\n", st);
    render_printf(b, "                for (int64_t j = 0; j < nn; j++) acc[j] += av * (%s)%s(bp[%s]);\n", acc, ld,
                  m->b_unit ? "j" : "j * sbn");
    render_printf(b, "            }\n");
    const char *sto = m->dtype == ST_F16 ? "st_f2h(acc[j])" : m->dtype == ST_BF16 ? "st_f2bf(acc[j])" : NULL;
    if (sto) render_printf(b, "            for (int64_t j = 0; j < nn; j++) orow[n0 + j] = %s;\n", sto);
    else if (isf) render_printf(b, "            for (int64_t j = 0; j < nn; j++) orow[n0 + j] = acc[j];\n");
    else render_printf(b, "            for (int64_t j = 0; j < nn; j++) orow[n0 + j] = (%s)(int64_t)acc[j];\n", st);
    render_printf(b, "        }\n    }\n");
}

static void render_body(render_buf *b, const kir_kernel *k, const uint8_t *live) {
    /* hoisted: parameters and literals */
    for (int i = 0; i < k->n; i++) {
        const kir_ins *in = &k->ins[i];
        if (!live[i] || !(in->op == KI_IPARAM || in->op == KI_FPARAM || in->op == KI_ICONST || in->op == KI_FCONST))
            continue;
        render_printf(b, "    const %s v%d = ", kir_type_cname[in->type], i);
        render_value_expr(b, k, i);
        render_printf(b, ";\n");
    }
    int depth = 1;
    for (int i = 0; i < k->n; i++) {
        const kir_ins *in = &k->ins[i];
        if (!live[i]) continue;
        switch ((kir_opcode)in->op) {
        case KI_IPARAM: case KI_FPARAM: case KI_ICONST: case KI_FCONST:
            break;
        case KI_LOOP:
            if (in->imm) {
                indent(b, depth);
                render_printf(b, "#pragma omp parallel for if (v%d > %d) num_threads(a->nthreads)\n",
                              in->b >= 0 ? in->b : in->a, PAR_THRESHOLD);
            }
            indent(b, depth);
            render_printf(b, "for (int64_t v%d = 0; v%d < v%d; v%d++) {\n", i, i, in->a, i);
            depth++;
            break;
        case KI_IF:
            indent(b, depth);
            render_printf(b, "if (v%d) {\n", in->a);
            depth++;
            break;
        case KI_ENDLOOP: case KI_ENDIF:
            depth--;
            indent(b, depth);
            render_printf(b, "}\n");
            break;
        case KI_STORE:
            indent(b, depth);
            render_printf(b, "p%d[v%d] = ", in->a, in->b);
            store_expr(b, (int)in->imm, in->c);
            render_printf(b, ";\n");
            break;
        case KI_ACC:
            indent(b, depth);
            render_printf(b, "%s v%d = v%d;\n", kir_type_cname[in->type], i, in->a);
            break;
        case KI_ACCUPD: {
            const char *fn = in->imm == ST_OP_RSUM ? "st_add_op" : in->imm == ST_OP_RPROD ? "st_mul_op"
                           : in->imm == ST_OP_RMAX ? "st_max_op" : "st_min_op";
            indent(b, depth);
            render_printf(b, "v%d = %s(v%d, v%d);\n", in->a, fn, in->a, in->b);
            break;
        }
        case KI_ARGUPD: {
            const char *cmp = in->imm == ST_OP_RARGMAX ? ">" : "<";
            indent(b, depth);
            render_printf(b, "if (v%d < 0 || (!(v%d != v%d) && (v%d %s v%d || v%d != v%d))) { v%d = v%d; v%d = v%d; }\n",
                          in->b, in->a, in->a, in->c, cmp, in->a, in->c, in->c, in->a, in->c, in->b, in->d);
            break;
        }
        case KI_SETERR:
            indent(b, depth);
            render_printf(b, "if (!v%d) __atomic_store_n(a->err, 1, __ATOMIC_RELAXED);\n", in->a);
            break;
        default:
            indent(b, depth);
            render_printf(b, "const %s v%d = ", kir_type_cname[in->type], i);
            render_value_expr(b, k, i);
            render_printf(b, ";\n");
            break;
        }
    }
}

char *render_c(const kir_kernel *k) {
    render_buf b = {0};
    uint8_t *live = NULL;
    if (k->kind != KK_MATMUL) {
        live = st_malloc((size_t)(k->n ? k->n : 1));
        if (!live) return NULL;
        render_mark_live(k, live);
    }
    render_printf(&b, "// stitch kernel: %s\nvoid KNAME(const st_kargs *a) {\n", k->comment);
    if (k->kind == KK_MATMUL) {
        render_matmul(&b, k);
    } else {
        render_buffers(&b, k);
        render_body(&b, k, live);
    }
    render_printf(&b, "}\n");
    st_free(live);
    if (b.oom) {
        st_free(b.s);
        st_error(ST_ERR_OOM, "render: out of memory");
        return NULL;
    }
    return b.s;
}
