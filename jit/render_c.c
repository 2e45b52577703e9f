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
 *             const float v3 = om_exp(v2);            op math = the base/opmath.h macro of ops.def's MATH
 *             p0[v1] = v3;
 *         }
 *     }
 * Serial reduction loops are printed strip-mined over 16 partial accumulators (see "serial
 * reduction loops" below); a full reduction's row runs its inner loops in parallel; a column
 * reduction's loop (KIR_LOOP_COLS) is printed interchanged, rows outer (render_c_cols.c).
 * Invariant: the text depends only on the IR (never on parameter values), so equal structure
 * gives equal source and one cache entry. Math is never written here: ops print their prelude
 * macro, conversions print ST_CVT / st_h2f / st_f2h / st_bf2f / st_f2bf (one exception: a lane
 * update of max/min spells om_max's NaN rule without its branch, so it vectorizes).
 */
#include "jit/render_c.h"

#include <math.h>
#include <stdarg.h>


static const char *storage_ctype(int dt) { return st_dtypes[dt].ctype; }

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
        unsigned m = kir_operand_mask(in);
        const int32_t ops[4] = {in->a, in->b, in->c, in->d};
        for (int j = 0; j < 4; j++)
            if ((m >> j & 1) && ops[j] >= 0) live[ops[j]] = 1;
    }
}

static void int_literal(sbuf *b, kir_type t, int64_t v) {
    if (v == INT64_MIN) sbuf_printf(b, "((%s)(-9223372036854775807LL - 1))", kir_type_cname[t]);
    else sbuf_printf(b, "((%s)%lldLL)", kir_type_cname[t], (long long)v);
}

/* A comparison of two floats as C's operator (an int 0 or 1), or NULL. */
static const char *float_cmp(const kir_kernel *k, const kir_ins *in) {
    if (in->op != KI_OP) return NULL;
    const char *op;
    switch (in->sop) {   /* binary: both operands are instructions (a unary op's b is -1) */
    case ST_OP_EQ: op = "=="; break;
    case ST_OP_NE: op = "!="; break;
    case ST_OP_LT: op = "<"; break;
    case ST_OP_LE: op = "<="; break;
    case ST_OP_GT: op = ">"; break;
    case ST_OP_GE: op = ">="; break;
    default: return NULL;
    }
    const int t = k->ins[in->a].type;
    return (t == KT_F32 || t == KT_F64) && k->ins[in->b].type == t ? op : NULL;
}

void render_value_expr(sbuf *b, const kir_kernel *k, int i) {
    const kir_ins *in = &k->ins[i];
    const char *T = kir_type_cname[in->type];
    const char *cmp;
    switch ((kir_opcode)in->op) {
    case KI_IPARAM: sbuf_printf(b, "a->ints[%lld]", (long long)in->imm); break;
    case KI_FPARAM: sbuf_printf(b, "a->flts[%lld]", (long long)in->imm); break;
    case KI_ICONST: int_literal(b, (kir_type)in->type, in->imm); break;
    case KI_FCONST:
        if (isinf(in->fimm)) sbuf_printf(b, "((%s)%sINFINITY)", T, in->fimm < 0 ? "-" : "");
        else sbuf_printf(b, "((%s)%.17g)", T, in->fimm);
        break;
    case KI_IADD: sbuf_printf(b, "v%d + v%d", in->a, in->b); break;
    case KI_ISUB: sbuf_printf(b, "v%d - v%d", in->a, in->b); break;
    case KI_IMUL: sbuf_printf(b, "v%d * v%d", in->a, in->b); break;
    case KI_IDIV: sbuf_printf(b, "v%d / v%d", in->a, in->b); break;
    case KI_IMOD: sbuf_printf(b, "v%d %% v%d", in->a, in->b); break;
    case KI_ILT: sbuf_printf(b, "(uint8_t)(v%d < v%d)", in->a, in->b); break;
    case KI_ILE: sbuf_printf(b, "(uint8_t)(v%d <= v%d)", in->a, in->b); break;
    case KI_LAND: sbuf_printf(b, "(uint8_t)(v%d & v%d)", in->a, in->b); break;
    case KI_SEL: sbuf_printf(b, "v%d ? v%d : v%d", in->a, in->b, in->c); break;
    case KI_LOAD:
        if (in->imm == ST_F16) sbuf_printf(b, "st_h2f(p%d[v%d])", in->a, in->b);
        else if (in->imm == ST_BF16) sbuf_printf(b, "st_bf2f(p%d[v%d])", in->a, in->b);
        else sbuf_printf(b, "p%d[v%d]", in->a, in->b);
        break;
    case KI_OP: {
        const st_op_info *oi = &st_ops[in->sop];
        sbuf_printf(b, "%s(v%d", oi->math, in->a);
      if (oi->nsrc > 1) sbuf_printf(b, ", v%d", in->b);
      if (oi->nsrc > 2) sbuf_printf(b, ", v%d", in->c);
      sbuf_printf(b, ")");
        break;
    }
    case KI_CVT:
        /* a float mask (dropout's keep, a ReLU's derivative) straight from its comparison's int: the
         * same 0 or 1, without the uint8_t value that keeps GCC from vectorizing a loop that also
         * has 64-bit lanes (a random number's counter) */
        if ((in->type == KT_F32 || in->type == KT_F64) && (cmp = float_cmp(k, &k->ins[in->a])))
            sbuf_printf(b, "(%s)(v%d %s v%d)", T, k->ins[in->a].a, cmp, k->ins[in->a].b);
        else
            sbuf_printf(b, "ST_CVT(%s, v%d)", T, in->a);
        break;
    case KI_ROUND:
        if (in->imm == ST_BF16) sbuf_printf(b, "st_bf2f(st_f2bf(v%d))", in->a);
        else sbuf_printf(b, "st_h2f(st_f2h(v%d))", in->a);
        break;
    case KI_RAND:
        if (in->sop == ST_OP_RAND_INT)
            sbuf_printf(b, "st_rand_int((uint64_t)v%d, (uint64_t)v%d, v%d, v%d)", in->a, in->b, in->c, in->d);
        else
            sbuf_printf(b, "st_rand_%s_%s((uint64_t)v%d, (uint64_t)v%d)",
                        in->sop == ST_OP_RAND_N ? "normal" : "uniform", in->type == KT_F64 ? "f64" : "f32",
                        in->a, in->b);
        break;
    case KI_MMACC: sbuf_printf(b, "e_acc"); break;   /* the renderers' epilogue loops define these */
    case KI_MMIDX: {
        static const char *const names[] = {"e_flat", "e_i", "e_j", "e_z"};
        sbuf_printf(b, "%s", in->imm >= KIR_MM_FLAT && in->imm <= KIR_MM_BATCH ? names[in->imm] : "0");
        break;
    }
    default:
        sbuf_printf(b, "0 /* bad opcode %d */", in->op);
        break;
    }
}

void render_indent(sbuf *b, int depth) { sbuf_printf(b, "%*s", 4 * depth, ""); }

void render_argupd_line(sbuf *b, const kir_ins *in, const char *sfx) {
    const char *cmp = in->imm == ST_OP_RARGMAX ? ">" : "<";
    sbuf_printf(b,
                "if (v%d%s < 0 || (!(v%d%s != v%d%s) && (v%d %s v%d%s || v%d != v%d))) "
                "{ v%d%s = v%d; v%d%s = v%d; }\n",
                in->b, sfx, in->a, sfx, in->a, sfx, in->c, cmp, in->a, sfx, in->c, in->c, in->a, sfx, in->c, in->b,
                sfx, in->d);
}

void render_value_line(sbuf *b, const kir_kernel *k, int i, int depth) {
    render_indent(b, depth);
    sbuf_printf(b, "const %s v%d = ", kir_type_cname[k->ins[i].type], i);
    render_value_expr(b, k, i);
    sbuf_printf(b, ";\n");
}

void render_loop_open(sbuf *b, const kir_kernel *k, int i, int *depth) {
    render_indent(b, *depth);
    sbuf_printf(b, "for (int64_t v%d = 0; v%d < v%d; v%d++) {\n", i, i, k->ins[i].a, i);
    ++*depth;
}

void render_plain_ins(sbuf *b, const kir_kernel *k, int i, int *depth) {
    switch ((kir_opcode)k->ins[i].op) {
    case KI_IF:
        render_indent(b, *depth);
        sbuf_printf(b, "if (v%d) {\n", k->ins[i].a);
        ++*depth;
        break;
    case KI_ENDLOOP: case KI_ENDIF:
        --*depth;
        render_indent(b, *depth);
        sbuf_printf(b, "}\n");
        break;
    default:
        render_value_line(b, k, i, *depth);
        break;
    }
}

void render_store_expr(sbuf *b, int dt, int v) {
    if (dt == ST_F16) sbuf_printf(b, "st_f2h(v%d)", v);
    else if (dt == ST_BF16) sbuf_printf(b, "st_f2bf(v%d)", v);
    else if (dt == ST_BOOL) sbuf_printf(b, "(uint8_t)(v%d != 0)", v);
    else sbuf_printf(b, "v%d", v);
}

/* Pointwise, reduce and matmul-epilogue kernels write buffers that no other pointer of theirs
 * reaches, so their pointers are restrict: without it GCC must check each pair of pointers for
 * overlap at run time and gives up vectorizing past 10 checks (an Adam update has 7 buffers).
 * The exceptions are the pairs of kir_find_donors, an output and the input whose buffer it may take
 * over (one buffer, read and written at each element's own index: GCC's check lets that through
 * vectorized, and the innermost loops' ivdep says so). Scatter and SETVIEW kernels may write into
 * their input's buffer: no restrict there. */
static void render_buffers(sbuf *b, const kir_kernel *k) {
    const bool any = k->kind == KK_POINTWISE || k->kind == KK_REDUCE || (k->kind == KK_MATMUL && k->mm.epi);
    uint8_t shared[KIR_MAX_BUFS] = {0};
    for (int s = 0; s < k->nbufs; s++)
        if (k->donor[s]) {
            shared[s] = shared[k->donor[s] - 1] = 1;
            sbuf_printf(b, "    /* p%d may be p%d's buffer (kir_find_donors) */\n", s, k->donor[s] - 1);
        }
    for (int s = 0; s < k->nbufs; s++) {
        const char *ct = storage_ctype(k->buf_dtype[s]);
        const char *q = k->buf_out[s] ? "" : "const ";
        const char *r = any && !shared[s] ? "restrict " : "";
        sbuf_printf(b, "    %s%s *%sp%d = (%s%s *)a->bufs[%d];\n", q, ct, r, s, q, ct, s);
    }
}

/* ---- matmul ----
 * Float matmuls call the prelude's GEMM (st_gemm_plan / st_gemm_task_<type>: packed operands, a
 * register-blocked micro-kernel), the very code the interpreter runs, so the two agree bit for
 * bit. The kernel only maps tasks (batch x blocks of C) onto threads: each task owns its output
 * elements, so the split never changes a result. Each thread mallocs its packing scratch once per
 * launch; if that fails its tasks run the prelude's unblocked loop (same sums, same order).
 * Integer matmuls (not performance critical) keep a plain row loop accumulating in uint64_t. */
/* Multiply-adds below which a matmul runs on one thread. A region costs a few microseconds while
 * the pool's threads spin between kernels (device/cpu_pool.c), ~40 us when they sleep (a first
 * kernel, an oversubscribed machine); one thread does ~65 G multiply-adds/s. At 2M (~30 us of
 * work) the attention products of bench_fusion's block (64 x 64x32x64, 8.4M) run on two threads:
 * 218 -> 116-127 us each (they stayed on one under the old 12.6M, sized for libgomp's ~40-80 us
 * wake-up of sleeping threads). */
#define MM_PAR_WORK (1 << 21)

static const char *gemm_dt_name(int dt) {
    switch (dt) {
    case ST_F16: return "ST_GEMM_F16";
    case ST_BF16: return "ST_GEMM_BF16";
    case ST_F64: return "ST_GEMM_F64";
    default: return "ST_GEMM_F32";
    }
}

/* The name of a storage type in the prelude's GEMM functions (st_gemm_task_f32 ...). */
static const char *gemm_sfx(int dt) {
    switch (dt) {
    case ST_F16: return "f16";
    case ST_BF16: return "bf16";
    case ST_F64: return "f64";
    default: return "f32";
    }
}

/* The suffix of the task and tile functions the kernel calls: its storage type's own
 * (st_gemm_task_f32 ...: a kernel then compiles only its type's GEMM code), or, with an operand
 * stored in another type (a cast folded into the loads: kir_matmul), the mixed one
 * st_gemm_task_<C>_<A>_<B>. */
static void gemm_fn_sfx(const kir_kernel *k, char *out, size_t n) {
    const kir_matmul *m = &k->mm;
    int adt = k->buf_dtype[m->a_buf], bdt = k->buf_dtype[m->b_buf];
    if (adt == m->dtype && bdt == m->dtype) snprintf(out, n, "%s", gemm_sfx(m->dtype));
    else snprintf(out, n, "%s_%s_%s", gemm_sfx(m->dtype), gemm_sfx(adt), gemm_sfx(bdt));
}

/* A float matmul with mixed operands instantiates its GEMM, once per translation unit (the
 * kernels of a batch share one). */
static void render_gemm_instance(sbuf *b, const kir_kernel *k) {
    const kir_matmul *m = &k->mm;
    char sfx[32];
    if (!st_is_float((st_dtype)m->dtype)) return;
    gemm_fn_sfx(k, sfx, sizeof sfx);
    if (!strcmp(sfx, gemm_sfx(m->dtype))) return;
    sbuf_printf(b, "#ifndef ST_GEMM_HAVE_%s\n#define ST_GEMM_HAVE_%s\n", sfx, sfx);
    sbuf_printf(b, "ST_GEMM_MIXED(%s, %s, %s)\n#endif\n", gemm_sfx(m->dtype), gemm_sfx(k->buf_dtype[m->a_buf]),
                gemm_sfx(k->buf_dtype[m->b_buf]));
}

/* The operands (each of its own storage type), sizes, row/column strides and the batch count NB. */
static void render_matmul_head(sbuf *b, const kir_kernel *k) {
    const kir_matmul *m = &k->mm;
    const char *st = storage_ctype(m->dtype);
    const char *sa = storage_ctype(k->buf_dtype[m->a_buf]), *sb = storage_ctype(k->buf_dtype[m->b_buf]);
    int nb = m->nbatch;
    sbuf_printf(b, "    const %s *A = (const %s *)a->bufs[%d];\n", sa, sa, m->a_buf);
    sbuf_printf(b, "    const %s *B = (const %s *)a->bufs[%d];\n", sb, sb, m->b_buf);
    if (m->o_buf >= 0) sbuf_printf(b, "    %s *O = (%s *)a->bufs[%d];\n", st, st, m->o_buf);
    sbuf_printf(b, "    const int64_t M = a->ints[%d], N = a->ints[%d], K = a->ints[%d];\n", m->p_m, m->p_n, m->p_k);
    sbuf_printf(b, "    const int64_t sam = a->ints[%d], sak = a->ints[%d], aoff = a->ints[%d];\n",
                m->p_astr + nb, m->p_astr + nb + 1, m->p_aoff);
    sbuf_printf(b, "    const int64_t sbk = a->ints[%d], sbn = a->ints[%d], boff = a->ints[%d];\n",
                m->p_bstr + nb, m->p_bstr + nb + 1, m->p_boff);
    sbuf_printf(b, "    int64_t NB = 1;\n");
    for (int d = 0; d < nb; d++) sbuf_printf(b, "    NB *= a->ints[%d];\n", m->p_bsize + d);
    /* split dims (an implicit GEMM, kir_matmul.sub): the packers gather through SP */
    if (!m->sub[0] && !m->sub[1] && !m->sub[2] && !m->sub[3]) {
        sbuf_printf(b, "    const st_gemm_split *SP = NULL;\n    (void)SP;\n");
        return;
    }
    sbuf_printf(b, "    st_gemm_split sp_ = {{%d, %d, %d, %d}, {{0}}, {{0}}};\n", m->sub[0], m->sub[1], m->sub[2],
                m->sub[3]);
    for (int d = 0; d < 4; d++)
        for (int q = 0; q < m->sub[d]; q++)
            sbuf_printf(b, "    sp_.size[%d][%d] = a->ints[%d]; sp_.stride[%d][%d] = a->ints[%d];\n", d, q,
                        m->p_sub[d] + q, d, q, m->p_sub[d] + m->sub[d] + q);
    sbuf_printf(b, "    const st_gemm_split *SP = &sp_;\n");
}

/* Statements turning batch index `var` (destroyed) into element offsets ao, bo (declared before). */
static void render_batch_offsets(sbuf *b, const kir_matmul *m, const char *var, const char *ind) {
    for (int d = m->nbatch - 1; d >= 0; d--) {
        sbuf_printf(b, "%s{ const int64_t i = %s %% a->ints[%d]; %s /= a->ints[%d];\n", ind, var,
                    m->p_bsize + d, var, m->p_bsize + d);
        sbuf_printf(b, "%s  ao += i * a->ints[%d]; bo += i * a->ints[%d]; }\n", ind, m->p_astr + d,
                    m->p_bstr + d);
    }
    sbuf_printf(b, "%s(void)%s;\n", ind, var);
}

static void render_matmul_float(sbuf *b, const kir_kernel *k) {
    const kir_matmul *m = &k->mm;
    const char *dt = gemm_dt_name(m->dtype);
    char sfx[32];
    gemm_fn_sfx(k, sfx, sizeof sfx);
    render_matmul_head(b, k);
    sbuf_printf(b, "    const int par = a->nthreads > 1 && NB * M * N * K > %d;\n", MM_PAR_WORK);
    sbuf_printf(b, "    const int nt = par ? a->nthreads : 1;\n");
    sbuf_printf(b, "    int64_t mb, nb;\n");
    sbuf_printf(b, "    const int64_t T = st_gemm_plan(%s, M, N, NB >= nt ? 1 : nt, &mb, &nb);\n", dt);
    sbuf_printf(b, "    const size_t wsz = st_gemm_ws_bytes(%s, mb, nb, K);\n", dt);
    sbuf_printf(b, "    #pragma omp parallel num_threads(nt) if (par)\n");
    sbuf_printf(b, "    {\n");
    sbuf_printf(b, "        void *ws = malloc(wsz);   /* NULL: the unblocked loop, same bits */\n");
    sbuf_printf(b, "        #pragma omp for schedule(static)\n");
    sbuf_printf(b, "        for (int64_t t = 0; t < NB * T; t++) {\n");
    sbuf_printf(b, "            int64_t ao = aoff, bo = boff, r = t / T;\n");
    render_batch_offsets(b, m, "r", "            ");
    sbuf_printf(b, "            const st_gemm g = {%s, M, N, K, A + ao, sam, sak, B + bo, sbk, sbn,\n", dt);
    sbuf_printf(b, "                               O + t / T * M * N, N, SP, 0, 0};\n");
    sbuf_printf(b, "            st_gemm_task_%s(&g, t %% T, mb, nb, ws);\n", sfx);
    sbuf_printf(b, "        }\n");
    sbuf_printf(b, "        free(ws);\n");
    sbuf_printf(b, "    }\n");
}

/* The integer GEMM's inner part (both integer kernels: stored, and with an epilogue): for each
 * tile of up to 256 columns of the output row, the sums in uint64_t (wrapping, never a signed
 * overflow) in acc[0..nn); the caller's loop over the tile's columns follows. */
static void render_int_tile_sums(sbuf *b, const kir_matmul *m, const char *st) {
    sbuf_printf(b, "        for (int64_t n0 = 0; n0 < N; n0 += 256) {\n");
    sbuf_printf(b, "            const int64_t nn = N - n0 < 256 ? N - n0 : 256;\n");
    sbuf_printf(b, "            uint64_t acc[256];\n");
    sbuf_printf(b, "            for (int64_t j = 0; j < nn; j++) acc[j] = 0;\n");
    sbuf_printf(b, "            for (int64_t k = 0; k < K; k++) {\n");
    sbuf_printf(b, "                const uint64_t av = (uint64_t)A[ao + k * sak];\n");
    sbuf_printf(b, "                const %s *bp = B + bo + k * sbk + n0 * sbn;\n", st);
    sbuf_printf(b, "                for (int64_t j = 0; j < nn; j++) acc[j] += av * (uint64_t)bp[%s];\n",
                m->b_unit ? "j" : "j * sbn");
    sbuf_printf(b, "            }\n");
}

static void render_matmul_int(sbuf *b, const kir_kernel *k) {
    const kir_matmul *m = &k->mm;
    const char *st = storage_ctype(m->dtype);
    render_matmul_head(b, k);
    sbuf_printf(b, "    (void)sbn;\n");
    sbuf_printf(b, "    #pragma omp parallel for if (NB * M * N * K > %d) num_threads(a->nthreads)\n",
                PAR_THRESHOLD);
    sbuf_printf(b, "    for (int64_t bm = 0; bm < NB * M; bm++) {\n");
    sbuf_printf(b, "        const int64_t m = bm %% M;\n");
    sbuf_printf(b, "        int64_t ao = aoff + m * sam, bo = boff, t = bm / M;\n");
    render_batch_offsets(b, m, "t", "        ");
    sbuf_printf(b, "        %s *orow = O + bm * N;\n", st);
    render_int_tile_sums(b, m, st);
    sbuf_printf(b, "            for (int64_t j = 0; j < nn; j++) orow[n0 + j] = (%s)(int64_t)acc[j];\n", st);
    sbuf_printf(b, "        }\n    }\n");
}


/* ---- serial reduction loops with independent partial accumulators ----
 * A serial loop whose only effects are sum/prod/max/min accumulator updates is a dependent
 * chain (one add per element, latency-bound; GCC may not reorder FP without -ffast-math). It
 * is printed strip-mined instead: RED_LANES partial accumulators per accumulator, a main loop
 * over chunks of RED_LANES elements where element j of a chunk updates lane j (independent
 * chains, which GCC vectorizes), a fixed-order pairwise combine of the lanes into the
 * accumulator, then a scalar tail. The order is fixed by the text, so results are deterministic
 * (they differ from a serial sum by rounding only). max/min keep NaN propagation: a NaN sticks
 * in its lane (om_max(acc, NaN) = NaN), and the combine propagates it. */
#define RED_LANES 16
#define RED_BLOCKS 64  /* most blocks a split row is cut into (each >= 1 chunk) */
#define RED_SPLIT_WORK 65536   /* a full reduction's row loops run in parallel above this */
#define RED_MIN 32     /* rows shorter than this take the plain loop (lane setup costs ~30 ops) */


/* Index of the KI_ENDLOOP matching the KI_LOOP at i. */
int render_loop_end(const kir_kernel *k, int i) {
    int depth = 0;
    for (int j = i; j < k->n; j++) {
        if (k->ins[j].op == KI_LOOP) depth++;
        else if (k->ins[j].op == KI_ENDLOOP && --depth == 0) return j;
    }
    return k->n;
}

/* Can the serial loop [i, e] be split into lanes? Its body has no nested control flow, no
 * argmax updates or products, at least one live ACCUPD of an accumulator defined before the loop, and reads
 * those accumulators nowhere else (a partial value must never be observed). Stores are allowed:
 * the lowering only puts element-wise stores in a reduction loop (a row's copy of the reduced
 * value, at the element's own index), so iterations stay independent in any order. */
static bool lane_loop_ok(const body_ctx *c, int i, int e) {
    const kir_kernel *k = c->k;
    int nacc = 0;
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &k->ins[j];
        if (!c->live[j]) continue;
        switch ((kir_opcode)in->op) {
        case KI_LOOP: case KI_IF: case KI_ARGUPD: case KI_ACC:
            return false;
        case KI_ACCUPD:
            /* products stay in the interpreter's order: regrouping a product moves its
             * overflow/underflow points (a partial product of huge or tiny factors saturates
             * in one order and not in another), far beyond rounding */
            if (in->a >= i || k->ins[in->a].op != KI_ACC || in->imm == ST_OP_RPROD) return false;
            nacc++;
            break;
        default:
            break;
        }
    }
    if (!nacc) return false;
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &k->ins[j];
        if (!c->live[j]) continue;
        unsigned m = kir_operand_mask(in);
        const int32_t ops[4] = {in->a, in->b, in->c, in->d};
        for (int q = 0; q < 4; q++) {
            if (!(m >> q & 1) || ops[q] < 0 || k->ins[ops[q]].op != KI_ACC) continue;
            if (in->op == KI_ACCUPD && q == 0) continue;
            for (int j2 = i + 1; j2 < e; j2++) /* read of an accumulator this loop updates? */
                if (c->live[j2] && k->ins[j2].op == KI_ACCUPD && k->ins[j2].a == ops[q]) return false;
        }
    }
    return true;
}

const char *render_accupd_fn(int64_t op) {
    return op == ST_OP_RSUM ? "om_add" : op == ST_OP_RPROD ? "om_mul" : op == ST_OP_RMAX ? "om_max"
                                                                                             : "om_min";
}

/* The identity element of a combine, as a C literal of type t. */
void render_identity_literal(sbuf *b, int64_t op, kir_type t) {
    bool flt = t == KT_F32 || t == KT_F64, mx = op == ST_OP_RMAX;
    if (op == ST_OP_RSUM || op == ST_OP_RPROD) {
        int_literal(b, t, op == ST_OP_RPROD);
    } else if (flt) {
        sbuf_printf(b, "((%s)%sINFINITY)", kir_type_cname[t], mx ? "-" : "");
    } else if (t == KT_I32) {
        int_literal(b, t, mx ? INT32_MIN : INT32_MAX);
    } else if (t == KT_I64) {
        int_literal(b, t, mx ? INT64_MIN : INT64_MAX);
    } else {
        int_literal(b, t, !mx);
    }
}


/* Narrow loads in a lane loop. The lane loop runs exactly RED_LANES iterations, so GCC's loop
 * vectorizer picks one vector size whose lane count is RED_LANES for the narrowest type in it: a
 * bool mask's 16 bytes put every float of the loop in 128-bit vectors, 4 lanes each (an attention
 * softmax with a causal mask read from memory: 1.8x the time of the same loop in 512-bit vectors).
 * So such loads are read first, per chunk, by a loop of their own (their index arithmetic and the
 * load, widened: bool to uint32_t, f16/bf16 converted to float) into v<j>_w[RED_LANES], and the
 * lane loop reads those. The same values, the same bits. A bool load is widened only when every
 * reader in the loop takes it as a truth value (a where's or select's condition, a cast, a logical
 * op), where uint32_t and uint8_t behave alike. Returns the marks (NULL: none, or on OOM). */
static bool wide_reader_ok(const kir_ins *in, int j) {
    switch ((kir_opcode)in->op) {
    case KI_CVT: return true;
    case KI_SEL: return in->a == j && in->b != j && in->c != j;
    case KI_LAND: return true;
    case KI_OP:
        if (in->sop == ST_OP_WHERE) return in->a == j && in->b != j && in->c != j;
        return in->sop == ST_OP_NOT || in->sop == ST_OP_AND || in->sop == ST_OP_OR;
    default: return false;
    }
}
static uint8_t *widen_narrow_loads(const body_ctx *c, int i, int e) {
    const kir_kernel *k = c->k;
    uint8_t *w = NULL;
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &k->ins[j];
        if (!c->live[j] || in->op != KI_LOAD || st_dtypes[in->imm].size >= 4) continue;
        if (in->type == KT_U8) {
            bool ok = true;
            for (int u = j + 1; u < e && ok; u++) {
                const kir_ins *r = &k->ins[u];
                if (!c->live[u]) continue;
                unsigned m = kir_operand_mask(r);
                const int32_t ops[4] = {r->a, r->b, r->c, r->d};
                for (int q = 0; q < 4; q++)
                    if ((m >> q & 1) && ops[q] == j && !wide_reader_ok(r, j)) ok = false;
            }
            if (!ok) continue;
        } else if (in->type != KT_F32) {
            continue;
        }
        if (!w && !(w = st_calloc((size_t)k->n, 1))) return NULL;
        w[j] = 1;
    }
    return w;
}
static const char *wide_ctype(kir_type t) { return t == KT_U8 ? "uint32_t" : kir_type_cname[t]; }

/* The widening loop of a chunk: for each lane, the index arithmetic the widened loads need
 * (instructions of (i, e) they depend on) and the loads into v<j>_w[l_]. */
static void render_widen_loop(sbuf *b, const body_ctx *c, int i, int e, int depth) {
    const kir_kernel *k = c->k;
    uint8_t *need = st_calloc((size_t)k->n, 1);
    if (!need) {   /* the lane loop would read copies never written: the rendering fails */
        b->oom = 1;
        return;
    }
    for (int j = e - 1; j > i; j--) {
        if (!c->wide[j] && !need[j]) continue;
        need[j] = 1;
        const kir_ins *in = &k->ins[j];
        unsigned m = kir_operand_mask(in);
        const int32_t ops[4] = {in->a, in->b, in->c, in->d};
        for (int q = 0; q < 4; q++)
            if ((m >> q & 1) && ops[q] > i && ops[q] < e) need[ops[q]] = 1;
    }
    for (int j = i + 1; j < e; j++)
        if (c->wide[j]) {
            render_indent(b, depth);
            sbuf_printf(b, "%s v%d_w[%d];\n", wide_ctype((kir_type)k->ins[j].type), j, RED_LANES);
        }
    render_indent(b, depth);
    sbuf_printf(b, "for (int l_ = 0; l_ < %d; l_++) {\n", RED_LANES);
    render_indent(b, depth + 1);
    sbuf_printf(b, "const int64_t v%d = v%d_c + l_;\n", i, i);
    for (int j = i + 1; j < e; j++) {
        if (!need[j] || !c->live[j]) continue;   /* not live: hoisted above the loop */
        const kir_ins *in = &k->ins[j];
        if (in->op == KI_IPARAM || in->op == KI_FPARAM || in->op == KI_ICONST || in->op == KI_FCONST) continue;
        if (c->wide[j]) {
            render_indent(b, depth + 1);
            sbuf_printf(b, "v%d_w[l_] = ", j);
            render_value_expr(b, k, j);
            sbuf_printf(b, ";\n");
        } else {
            render_value_line(b, k, j, depth + 1);
        }
    }
    render_indent(b, depth);
    sbuf_printf(b, "}\n");
    st_free(need);
}

/* Float blocks. A float sum accumulates in double (the interpreter's type), but converting every
 * element and adding it in double costs two conversions and two double adds per 16 floats where a
 * float add costs one: a LayerNorm forward row (1024 floats, L1) took 317 ns against 201 with float
 * partial sums (bench/NOTES.md, twenty-first pass). So a lane of a double sum of converted floats
 * adds its elements in float over a block of RED_FBLOCK chunks (RED_FBLOCK elements a lane), from 0,
 * and adds the block's float sum into its double lane: the error of a block is that of a float sum
 * of RED_FBLOCK values (at most (RED_FBLOCK - 1) u of their magnitudes' sum, u = 2^-24), the rest
 * is exact to double rounding; and a block's float sum overflows where its values' sum exceeds
 * FLT_MAX (values near 3e38 whose total cancels: inf or NaN where the double sum is finite, as a
 * float sum's). Blocks start at the lane loop's first chunk, so the order is still a function of
 * the row length only. Only sums of f32 values (their KI_ACC marked by the lowering): an f64
 * input, a user's cast to f64 included, is summed in double. */
bool fblock_upd(const kir_kernel *k, const kir_ins *in) {
    /* the accumulator's imm: a sum of f32 values (fuser/lower.c phase_open), not of f64 ones */
    if (in->imm != ST_OP_RSUM || k->ins[in->a].type != KT_F64 || k->ins[in->a].imm != 1 || in->b < 0) return false;
    const kir_ins *cv = &k->ins[in->b];
    return cv->op == KI_CVT && cv->type == KT_F64 && cv->a >= 0 && k->ins[cv->a].type == KT_F32;
}
/* Is the update at j the first live one of its accumulator in the loop at i? */
static bool first_upd(const body_ctx *c, int i, int j) {
    for (int j2 = i + 1; j2 < j; j2++)
        if (c->live[j2] && c->k->ins[j2].op == KI_ACCUPD && c->k->ins[j2].a == c->k->ins[j].a) return false;
    return true;
}
/* Is every live update of accumulator acc in the loop [i, e] a float-block one? */
static bool fblock_acc(const body_ctx *c, int i, int e, int acc) {
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &c->k->ins[j];
        if (c->live[j] && in->op == KI_ACCUPD && in->a == acc && !fblock_upd(c->k, in)) return false;
    }
    return true;
}

/* For each float-block accumulator (laned 2) of the loop [i, e]: its block's float lanes declared
 * and zeroed (fold false), or added into its double lanes (fold true). */
static void fblock_lines(sbuf *b, const body_ctx *c, int i, int e, int depth, bool fold) {
    for (int j = i + 1; j < e; j++) {
        const int a = c->k->ins[j].a;
        if (!c->live[j] || c->k->ins[j].op != KI_ACCUPD || c->laned[a] != 2 || !first_upd(c, i, j)) continue;
        render_indent(b, depth);
        if (fold) {
            sbuf_printf(b, "for (int l_ = 0; l_ < %d; l_++) v%d_l[l_] = om_add(v%d_l[l_], (double)v%d_f[l_]);\n",
                        RED_LANES, a, a, a);
        } else {
            sbuf_printf(b, "float v%d_f[%d];\n", a, RED_LANES);
            render_indent(b, depth);
            sbuf_printf(b, "for (int l_ = 0; l_ < %d; l_++) v%d_f[l_] = 0.0f;\n", RED_LANES, a);
        }
    }
}

/* ---- prefetches in a row's later passes ----
 * A parallel row loop's first pass over a buffer streams the row from memory at the rate one
 * core gets; its later passes over the same row find it in L1/L2 and are compute-bound
 * (softmax's and cross-entropy's exps), while memory idles. So a lane loop in a parallel row
 * loop whose loads at `row * S + j` all re-read buffers an earlier loop of the same row read
 * (none streams a row of its own: LayerNorm backward's second pass reads dy first) also
 * prefetches what follows of them, max(S, PF_ELEMS) elements ahead (the next row of 4096, two
 * rows of 1024 ahead; no division per row), one line per 64 bytes of each chunk, into L2
 * (locality 2; 3 was slower in a harness): the next row's first pass finds it there. A
 * prefetch is a hint: the results are the same. bench/NOTES.md, twenty-third pass. */
#define PF_ELEMS 2048

/* The loop that encloses the instruction at i, or -1. */
static int enclosing_loop(const kir_kernel *k, int i) {
    int depth = 0;
    for (int j = i - 1; j >= 0; j--) {
        if (k->ins[j].op == KI_ENDLOOP) depth++;
        else if (k->ins[j].op == KI_LOOP && depth-- == 0) return j;
    }
    return -1;
}

/* The row stride S of a load at index row * S + j (j: loop i's variable, row: loop r's), as an
 * instruction, or -1 when the index has another form. */
static int row_stride(const kir_kernel *k, const kir_ins *ld, int i, int r) {
    const kir_ins *x = &k->ins[ld->b];
    if (x->op != KI_IADD || (x->a != i && x->b != i)) return -1;
    const kir_ins *m = &k->ins[x->a == i ? x->b : x->a];
    if (m->op != KI_IMUL || (m->a != r && m->b != r)) return -1;
    const int s = m->a == r ? m->b : m->a;
    return col_outside(k, s, r) ? s : -1;
}

/* Prints the prefetches of the lane loop [i, e] in its chunk loop, for the chunk at v<i>_c:
 * one per buffer (nothing when the loop is no later pass of a row). */
static void render_prefetch(sbuf *b, const body_ctx *c, int i, int e, int depth) {
    const kir_kernel *k = c->k;
    const int r = c->split ? -1 : enclosing_loop(k, i);
    if (r < 0 || k->ins[r].imm != KIR_LOOP_PAR) return;
    uint8_t seen[KIR_MAX_BUFS] = {0};   /* read by an earlier pass of the row; then: prefetched */
    for (int q = r + 1; q < i; q++)
        if (c->live[q] && k->ins[q].op == KI_LOAD) seen[k->ins[q].a] = 1;
    for (int j = i + 1; j < e; j++) /* a pass that streams a row of its own is not compute-bound */
        if (c->live[j] && k->ins[j].op == KI_LOAD && row_stride(k, &k->ins[j], i, r) >= 0 && !seen[k->ins[j].a])
            return;
    for (int j = i + 1; j < e; j++) {
        const kir_ins *ld = &k->ins[j];
        const int s = c->live[j] && ld->op == KI_LOAD ? row_stride(k, ld, i, r) : -1;
        if (s < 0 || seen[ld->a] == 2) continue;
        seen[ld->a] = 2;
        const int64_t size = st_dtypes[ld->imm].size, lines = size * RED_LANES / 64;
        for (int64_t l = 0; l < (lines > 1 ? lines : 1); l++) {
            render_indent(b, depth);
            sbuf_printf(b, "__builtin_prefetch((const void *)((uintptr_t)p%d + (uintptr_t)(v%d * v%d + v%d_c + "
                        "(v%d > %d ? v%d : %d) + %lld) * %lld), 0, 2);\n", ld->a, r, s, i, s, PF_ELEMS, s,
                        PF_ELEMS, (long long)(l * 64 / size), (long long)size);
        }
    }
}

/* Prints, for every accumulator the loop [i, e] updates: RED_LANES lanes at identity, the chunk
 * loop `for (v<i>_c = c0; v<i>_c < c1; v<i>_c += RED_LANES)` with the body lane-wise, then the
 * fixed-order pairwise combine; the result of each accumulator is left in its lane 0. A float
 * block accumulator (laned 2, above) adds into v<a>_f[RED_LANES], and the chunk loop runs inside
 * a loop over blocks of RED_FBLOCK chunks that folds v<a>_f into v<a>_l after each block. */
static void render_lanes(sbuf *b, body_ctx *c, int i, int e, int depth, const char *c0, const char *c1) {
    const kir_kernel *k = c->k;
    bool fb = false;
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &k->ins[j];
        if (!c->live[j] || in->op != KI_ACCUPD || c->laned[in->a]) continue;
        c->laned[in->a] = fblock_acc(c, i, e, in->a) ? 2 : 1;
        fb |= c->laned[in->a] == 2;
        kir_type t = (kir_type)k->ins[in->a].type;
        render_indent(b, depth);
        sbuf_printf(b, "%s v%d_l[%d];\n", kir_type_cname[t], in->a, RED_LANES);
        render_indent(b, depth);
        sbuf_printf(b, "for (int l_ = 0; l_ < %d; l_++) v%d_l[l_] = ", RED_LANES, in->a);
        render_identity_literal(b, in->imm, t);
        sbuf_printf(b, ";\n");
    }
    int outer = depth;
    if (fb) {
        render_indent(b, depth);
        sbuf_printf(b, "const int64_t v%d_c1 = %s;\n", i, c1);
        render_indent(b, depth);
        sbuf_printf(b, "for (int64_t v%d_b = %s; v%d_b < v%d_c1; v%d_b += %d) {\n", i, c0, i, i, i,
                    RED_LANES * RED_FBLOCK);
        depth++;
        render_indent(b, depth);
        sbuf_printf(b, "const int64_t v%d_e = v%d_c1 - v%d_b > %d ? v%d_b + %d : v%d_c1;\n", i, i, i,
                    RED_LANES * RED_FBLOCK, i, RED_LANES * RED_FBLOCK, i);
        fblock_lines(b, c, i, e, depth, false);
        render_indent(b, depth);
        sbuf_printf(b, "for (int64_t v%d_c = v%d_b; v%d_c < v%d_e; v%d_c += %d) {\n", i, i, i, i, i, RED_LANES);
    } else {
        render_indent(b, depth);
        sbuf_printf(b, "for (int64_t v%d_c = %s; v%d_c < %s; v%d_c += %d) {\n", i, c0, i, c1, i, RED_LANES);
    }
    render_prefetch(b, c, i, e, depth + 1);
    uint8_t *wide = widen_narrow_loads(c, i, e);
    const uint8_t *outer_wide = c->wide;
    if (wide) {
        c->wide = wide;
        render_widen_loop(b, c, i, e, depth + 1);
    }
    /* kept as a loop: the loop vectorizer if-converts max/min selects; fully unrolled first,
     * only the basic-block vectorizer would see it, and it leaves them as branches. ivdep: a lane
     * touches only its own element; without it GCC versions a storing lane loop on an alias check
     * (the outlined omp function loses restrict) and re-broadcasts its constants per chunk */
    render_indent(b, depth + 1);
    sbuf_printf(b, "_Pragma(\"GCC unroll 1\") _Pragma(\"GCC ivdep\") for (int l_ = 0; l_ < %d; l_++) {\n",
                RED_LANES);
    render_indent(b, depth + 2);
    sbuf_printf(b, "const int64_t v%d = v%d_c + l_;\n", i, i);
    const int outer_fb = c->fb_end;
    c->fb_end = fb ? e : 0;
    render_range(b, c, i + 1, e, depth + 2);
    c->fb_end = outer_fb;
    c->wide = outer_wide;
    st_free(wide);
    render_indent(b, depth + 1);
    sbuf_printf(b, "}\n");
    render_indent(b, depth);
    sbuf_printf(b, "}\n");
    if (fb) {
        fblock_lines(b, c, i, e, depth, true);
        depth = outer;
        render_indent(b, depth);
        sbuf_printf(b, "}\n");
    }
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &k->ins[j];
        if (!c->live[j] || in->op != KI_ACCUPD || !c->laned[in->a]) continue;
        c->laned[in->a] = 0;
        const char *fn = render_accupd_fn(in->imm);
        render_indent(b, depth);
        sbuf_printf(b, "for (int s_ = %d; s_ > 0; s_ >>= 1)\n", RED_LANES / 2);
        render_indent(b, depth + 1);
        sbuf_printf(b, "for (int l_ = 0; l_ < s_; l_++) v%d_l[l_] = %s(v%d_l[l_], v%d_l[l_ + s_]);\n", in->a, fn,
                    in->a, in->a);
    }
}

/* Calls fn(acc, update) for each distinct accumulator the loop [i, e] updates. */
static void each_acc(sbuf *b, body_ctx *c, int i, int e, int depth,
                     void (*fn)(sbuf *b, const kir_kernel *k, const kir_ins *upd, int depth, int loop)) {
    for (int j = i + 1; j < e; j++) {
        const kir_ins *in = &c->k->ins[j];
        if (c->live[j] && in->op == KI_ACCUPD && first_upd(c, i, j)) fn(b, c->k, in, depth, i);
    }
}
static void acc_from_lane0(sbuf *b, const kir_kernel *k, const kir_ins *u, int depth, int loop) {
    (void)k;
    (void)loop;
    render_indent(b, depth);
    sbuf_printf(b, "v%d = %s(v%d, v%d_l[0]);\n", u->a, render_accupd_fn(u->imm), u->a, u->a);
}
static void block_decl(sbuf *b, const kir_kernel *k, const kir_ins *u, int depth, int loop) {
    (void)loop;
    render_indent(b, depth);
    sbuf_printf(b, "%s v%d_b[%d];\n", kir_type_cname[k->ins[u->a].type], u->a, RED_BLOCKS);
}
static void block_store(sbuf *b, const kir_kernel *k, const kir_ins *u, int depth, int loop) {
    (void)k;
    render_indent(b, depth);
    sbuf_printf(b, "v%d_b[v%d_q] = v%d_l[0];\n", u->a, loop, u->a);
}
static void block_combine(sbuf *b, const kir_kernel *k, const kir_ins *u, int depth, int loop) {
    (void)k;
    render_indent(b, depth);
    sbuf_printf(b, "for (int64_t q_ = 0; q_ < v%d_nb; q_++) v%d = %s(v%d, v%d_b[q_]);\n", loop, u->a,
                render_accupd_fn(u->imm), u->a, u->a);
}

/* Prints the serial reduction loop [i, e] strip-mined into RED_LANES lanes (see above). In the
 * one row of a full reduction (c->split), the chunks are also cut into up to RED_BLOCKS
 * contiguous blocks, a function of the row length only, reduced in parallel and combined in
 * block order: the result does not depend on the thread count. */
static void render_lane_loop(sbuf *b, body_ctx *c, int i, int e, int depth) {
    const kir_kernel *k = c->k;
    const kir_ins *L = &k->ins[i];
    char n[32], c0[96], c1[96];
    snprintf(n, sizeof n, "v%d_n", i);
    render_indent(b, depth);
    sbuf_printf(b, "{ /* %d partial accumulators (independent chains), fixed-order combine, tail */\n",
                RED_LANES);
    depth++;
    render_indent(b, depth);
    sbuf_printf(b, "const int64_t v%d_n = v%d >= %d ? v%d - v%d %% %d : 0;\n", i, L->a, RED_MIN, L->a, L->a,
                RED_LANES);
    render_indent(b, depth);
    sbuf_printf(b, "if (v%d_n) {\n", i);
    if (c->split) { /* blocks of chunks in parallel, combined in block order */
        render_indent(b, depth + 1);
        sbuf_printf(b, "const int64_t v%d_k = v%d_n / %d, v%d_nb = v%d_k < %d ? v%d_k : %d;\n", i, i, RED_LANES, i, i,
                    RED_BLOCKS, i, RED_BLOCKS);
        each_acc(b, c, i, e, depth + 1, block_decl);
        render_indent(b, depth + 1);
        sbuf_printf(b, "#pragma omp parallel for if (v%d > %d) num_threads(a->nthreads) schedule(static)\n",
                    c->split_work, RED_SPLIT_WORK);
        render_indent(b, depth + 1);
        sbuf_printf(b, "for (int64_t v%d_q = 0; v%d_q < v%d_nb; v%d_q++) {\n", i, i, i, i);
        snprintf(c0, sizeof c0, "v%d_k * v%d_q / v%d_nb * %d", i, i, i, RED_LANES);
        snprintf(c1, sizeof c1, "v%d_k * (v%d_q + 1) / v%d_nb * %d", i, i, i, RED_LANES);
        render_lanes(b, c, i, e, depth + 2, c0, c1);
        each_acc(b, c, i, e, depth + 2, block_store);
        render_indent(b, depth + 1);
        sbuf_printf(b, "}\n");
        each_acc(b, c, i, e, depth + 1, block_combine);
    } else {
        render_lanes(b, c, i, e, depth + 1, "0", n);
        each_acc(b, c, i, e, depth + 1, acc_from_lane0);
    }
    render_indent(b, depth);
    sbuf_printf(b, "}\n");
    render_indent(b, depth);
    sbuf_printf(b, "for (int64_t v%d = v%d_n; v%d < v%d; v%d++) {\n", i, i, i, L->a, i);
    render_range(b, c, i + 1, e, depth + 1);
    render_indent(b, depth);
    sbuf_printf(b, "}\n");
    depth--;
    render_indent(b, depth);
    sbuf_printf(b, "}\n");
}

/* A serial loop that only stores (a reduce kernel's loop over the row's elements for its
 * input-shaped outputs: distinct indices, no accumulators) may run in parallel in a full
 * reduction's row. */
static bool store_loop_ok(const body_ctx *c, int i, int e) {
    bool stores = false;
    for (int j = i + 1; j < e; j++) {
        if (!c->live[j]) continue;
        switch ((kir_opcode)c->k->ins[j].op) {
        case KI_LOOP: case KI_ACC: case KI_ACCUPD: case KI_ARGUPD: return false;
        case KI_STORE: stores = true; break;
        default: break;
        }
    }
    return stores;
}


/* Whether loop i (ending at e) has no loop inside it. */
static int innermost_loop(const kir_kernel *k, int i, int e) {
    for (int j = i + 1; j < e; j++)
        if (k->ins[j].op == KI_LOOP) return 0;
    return 1;
}

/* Does loop i (ending at e) only compute and store elements (no accumulator update)? */
static int element_loop(const kir_kernel *k, int i, int e) {
    for (int j = i + 1; j < e; j++)
        if (k->ins[j].op == KI_ACCUPD || k->ins[j].op == KI_ARGUPD) return 0;
    return 1;
}

/* May instruction `in` run before its loop even when the loop runs zero times? Pure and never
 * trapping: no integer division (a zero-trip loop's divisor may be 0), no load. */
static bool hoist_ok(const kir_ins *in) {
    switch ((kir_opcode)in->op) {
    case KI_IADD: case KI_ISUB: case KI_IMUL: case KI_ILT: case KI_ILE: case KI_LAND: case KI_SEL:
    case KI_CVT: case KI_ROUND:
        return true;
    case KI_OP:
        return in->type == KT_F32 || in->type == KT_F64;
    default:
        return false;
    }
}

/* May a load from buffer slot buf move before loop [i, e] (its index depending on nothing the
 * loop defines, the load outside any IF of the body)? When the loop stores nothing to that slot:
 * a reduce kernel may write a buffer and read it back (a row's copy of a costly value), never
 * at an index that does not change in the loop, but the store would come between. The hoisted
 * load is guarded by the trip count (a zero-trip loop reads nothing, and its index may be out of
 * range); every iteration of a loop that runs reads the same element, so the value is the one
 * the loop would have read. A row's sum read by each element of the row's output loop kept
 * GCC from vectorizing that loop ("latch block not empty": the attention softmax's backward,
 * 406 -> 121 us on one thread, bench/NOTES.md sixteenth pass). */
static bool hoist_load_ok(const kir_kernel *k, int buf, int i, int e) {
    for (int q = i + 1; q < e; q++)
        if (k->ins[q].op == KI_STORE && k->ins[q].a == buf) return false;
    return true;
}

/* Prints, before innermost loop [i, e], its live values that depend on nothing the loop defines
 * (a row's log(sum) in a row kernel's output loop: GCC does not move an inlined log, branches and
 * all, out of the loop, which then stays scalar). Returns the live set without them (the caller
 * renders the loop with it and frees it), or NULL when there are none. */
static uint8_t *hoist_invariants(sbuf *b, const body_ctx *c, int i, int e, int depth) {
    const kir_kernel *k = c->k;
    uint8_t *live = NULL;
    int ifs = 0;
    for (int q = i + 1; q < e; q++) {
        const kir_ins *in = &k->ins[q];
        if (in->op == KI_IF) ifs++;
        else if (in->op == KI_ENDIF) ifs--;
        bool load = in->op == KI_LOAD && !ifs && hoist_load_ok(k, in->a, i, e);
        if (!c->live[q] || !(hoist_ok(in) || load)) continue;
        unsigned m = kir_operand_mask(in);
        const int32_t ops[4] = {in->a, in->b, in->c, in->d};
        bool outside = true;
        for (int j = 0; j < 4 && outside; j++)
            if (m >> j & 1) outside = col_outside(k, ops[j], i) || (live && ops[j] > i && ops[j] < q && !live[ops[j]]);
        if (!outside) continue;
        if (!live) {
            live = st_malloc((size_t)k->n);
            if (!live) {
                b->oom = 1;
                return NULL;
            }
            memcpy(live, c->live, (size_t)k->n);
        }
        if (load) {   /* read only if the loop runs, where every iteration reads it */
            render_indent(b, depth);
            sbuf_printf(b, "const %s v%d = v%d > 0 ? ", kir_type_cname[in->type], q, k->ins[i].a);
            render_value_expr(b, k, q);
            sbuf_printf(b, " : (%s)0;\n", kir_type_cname[in->type]);
        } else {
            render_value_line(b, k, q, depth);
        }
        live[q] = 0;
    }
    return live;
}

/* Is the conversion at j read only by float-block updates (which read its operand) in the lane
 * loop ending at c->fb_end? Then the lane loop does not print it. */
static bool fblock_only_cvt(const body_ctx *c, int j) {
    const kir_kernel *k = c->k;
    if (!c->fb_end || k->ins[j].op != KI_CVT) return false;
    bool read = false;
    for (int u = j + 1; u < c->fb_end; u++) {
        const kir_ins *r = &k->ins[u];
        if (!c->live[u]) continue;
        unsigned m = kir_operand_mask(r);
        const int32_t ops[4] = {r->a, r->b, r->c, r->d};
        for (int q = 0; q < 4; q++) {
            if (!(m >> q & 1) || ops[q] != j) continue;
            if (r->op != KI_ACCUPD || q != 1 || c->laned[r->a] < 2) return false;
            read = true;
        }
    }
    return read;
}

/* Prints the live instructions in [from, to) at the given depth (LOOP/IF bodies nest). */
void render_range(sbuf *b, body_ctx *c, int from, int to, int depth) {
    const kir_kernel *k = c->k;
    for (int i = from; i < to; i++) {
        const kir_ins *in = &k->ins[i];
        if (!c->live[i] || fblock_only_cvt(c, i)) continue;
        if (c->wide && c->wide[i]) {   /* read by the chunk's widening loop (render_lanes) */
            render_indent(b, depth);
            sbuf_printf(b, "const %s v%d = v%d_w[l_];\n", wide_ctype((kir_type)in->type), i, i);
            continue;
        }
        switch ((kir_opcode)in->op) {
        case KI_IPARAM: case KI_FPARAM: case KI_ICONST: case KI_FCONST:
            break;
        case KI_LOOP:
            if (!in->imm) {
                int e = render_loop_end(k, i);
                uint8_t *hoisted = e < to && innermost_loop(k, i, e) ? hoist_invariants(b, c, i, e, depth) : NULL;
                if (hoisted) {   /* the loop again, without them */
                    body_ctx pc = *c;
                    pc.live = hoisted;
                    render_range(b, &pc, i, e + 1, depth);
                    st_free(hoisted);
                    i = e;
                    break;
                }
                if (e < to && lane_loop_ok(c, i, e)) {
                    render_lane_loop(b, c, i, e, depth);
                    i = e;
                    break;
                }
                if (e < to && c->split && store_loop_ok(c, i, e)) {
                    render_indent(b, depth);
                    sbuf_printf(b, "#pragma omp parallel for if (v%d > %d) num_threads(a->nthreads)\n",
                                c->split_work, RED_SPLIT_WORK);
                } else if ((k->kind == KK_POINTWISE || (k->kind == KK_REDUCE && element_loop(k, i, e))) &&
                           innermost_loop(k, i, e)) {
                    /* The pointers are restrict, but GCC 12 does not use block-scope restrict
                     * pointers for a 2-level loop's inner loop with several stores ("no vectype",
                     * "complicated access pattern"): an AdamW member writing p, m and v stayed
                     * scalar. A pointwise element, and an element of a reduce kernel's loop that
                     * only stores a row's outputs, is read and written at its own index only (a
                     * row's reductions are read at the row's index, stored before the loop), so
                     * the loop carries no memory dependence; ivdep says so. (On reduce kernels it
                     * was measured only together with hoist_invariants: layernorm fwd+bwd 0.82x.) */
                    render_indent(b, depth);
                    sbuf_printf(b, "#pragma GCC ivdep\n");
                }
            } else if (in->imm == KIR_LOOP_COLS && !c->split && render_loop_end(k, i) < to &&
                       col_loop_ok(c, i, render_loop_end(k, i))) {
                int e = render_loop_end(k, i);
                render_col_loop(b, c, i, e, depth, true);
                i = e;
                break;
            } else if (in->imm == KIR_LOOP_BLOCK) {
                int e = render_loop_end(k, i);
                if (!c->split && e < to && col_loop_ok(c, i, e)) {
                    render_col_loop(b, c, i, e, depth, false);
                    i = e;
                    break;
                }   /* else a plain serial loop (inside a parallel one) */
            } else if (in->imm == KIR_LOOP_ROW && in->b >= 0 && !c->split) {
                /* a full reduction's one row: serial here, parallel inside when the work is
                 * large (not a nested parallel region: that costs a thread team per call) */
                int e = render_loop_end(k, i);
                render_indent(b, depth);
                sbuf_printf(b, "for (int64_t v%d = 0; v%d < v%d; v%d++) { /* one row: parallel inside */\n", i, i,
                            in->a, i);
                c->split = 1;
                c->split_work = in->b;
                render_range(b, c, i + 1, e, depth + 1);
                c->split = 0;
                render_indent(b, depth);
                sbuf_printf(b, "}\n");
                i = e;
                break;
            } else {
                render_indent(b, depth);
                sbuf_printf(b, "#pragma omp parallel for if (v%d > %d) num_threads(a->nthreads)\n",
                            in->b >= 0 ? in->b : in->a, PAR_THRESHOLD);
            }
            render_loop_open(b, k, i, &depth);
            break;
        case KI_STORE:
            render_indent(b, depth);
            sbuf_printf(b, "p%d[v%d] = ", in->a, in->b);
            render_store_expr(b, (int)in->imm, in->c);
            sbuf_printf(b, ";\n");
            break;
        case KI_ACC:
            render_indent(b, depth);
            sbuf_printf(b, "%s v%d = v%d;\n", kir_type_cname[in->type], i, in->a);
            break;
        case KI_ACCUPD: {
            const char *fn = render_accupd_fn(in->imm);
            render_indent(b, depth);
            if (c->laned[in->a] && (in->imm == ST_OP_RMAX || in->imm == ST_OP_RMIN))
                /* om_max's semantics (NaN in either operand wins) without the short-circuit
                 * `||`, which GCC keeps as a branch: `|` lets it become a compare + blend */
                sbuf_printf(b, "v%d_l[l_] = ((v%d_l[l_] != v%d_l[l_]) | (v%d_l[l_] %s v%d)) ? v%d_l[l_] : v%d;\n",
                            in->a, in->a, in->a, in->a, in->imm == ST_OP_RMAX ? ">" : "<", in->b, in->a, in->b);
            else if (c->laned[in->a] == 3)   /* a column's float block: the float before its conversion */
                sbuf_printf(b, "v%d = %s(v%d, v%d);\n", in->a, fn, in->a, k->ins[in->b].a);
            else if (c->laned[in->a] == 2)   /* a float block: the float before its conversion */
                sbuf_printf(b, "v%d_f[l_] = %s(v%d_f[l_], v%d);\n", in->a, fn, in->a, k->ins[in->b].a);
            else if (c->laned[in->a])
                sbuf_printf(b, "v%d_l[l_] = %s(v%d_l[l_], v%d);\n", in->a, fn, in->a, in->b);
            else
                sbuf_printf(b, "v%d = %s(v%d, v%d);\n", in->a, fn, in->a, in->b);
            break;
        }
        case KI_ARGUPD:
            render_indent(b, depth);
            render_argupd_line(b, in, "");
            break;
        case KI_SETERR:
            render_indent(b, depth);
            sbuf_printf(b, "if (!v%d) __atomic_store_n(a->err, 1, __ATOMIC_RELAXED);\n", in->a);
            break;
        default:   /* KI_IF, KI_ENDLOOP, KI_ENDIF and the pure instructions */
            render_plain_ins(b, k, i, &depth);
            break;
        }
    }
}

/* Parameters and literals, at the top of the function. */
static void render_hoisted(sbuf *b, const kir_kernel *k, const uint8_t *live) {
    for (int i = 0; i < k->n; i++) {
        const kir_ins *in = &k->ins[i];
        if (!live[i] || !(in->op == KI_IPARAM || in->op == KI_FPARAM || in->op == KI_ICONST || in->op == KI_FCONST))
            continue;
        render_value_line(b, k, i, 1);
    }
}

static void render_body(sbuf *b, const kir_kernel *k, const uint8_t *live, uint8_t *laned) {
    render_hoisted(b, k, live);
    body_ctx c = {k, live, laned, 0, -1, NULL, 0};
    render_range(b, &c, 0, k->n, 1);
}

/* ---- matmul epilogues ----
 * The group's elementwise consumers of the product run where the product is stored: per task,
 * tile by tile (st_gemm_tile_<S>: the task's rows x up to ST_GEMM_NC columns, computed into a
 * per-thread buffer after the packing scratch, so it is still in L2), then the epilogue over
 * the tile's elements with e_acc (the stored value: the tile holds the storage type), e_i, e_j,
 * e_z and e_flat bound. Without scratch (malloc failed) the tiles are 1 x 64 on the stack and
 * the unblocked loop fills them: the same bits. The sums are st_gemm_task's, so the epilogue
 * reads exactly what the unfused matmul would have stored. */
static void render_epilogue_body(sbuf *b, const kir_kernel *k, const uint8_t *live, uint8_t *laned,
                                 int depth) {
    body_ctx c = {k, live, laned, 0, -1, NULL, 0};
    render_indent(b, depth);
    sbuf_printf(b, "(void)e_acc; (void)e_i; (void)e_j; (void)e_z; (void)e_flat;\n");
    render_range(b, &c, 0, k->n, depth);
}

static void render_matmul_float_epi(sbuf *b, const kir_kernel *k, const uint8_t *live, uint8_t *laned) {
    const kir_matmul *m = &k->mm;
    const char *dt = gemm_dt_name(m->dtype), *st = storage_ctype(m->dtype);
    const char *ct = m->dtype == ST_F64 ? "double" : "float";
    const char *ld = m->dtype == ST_F16 ? "st_h2f" : m->dtype == ST_BF16 ? "st_bf2f" : "";
    char sfx[32];
    gemm_fn_sfx(k, sfx, sizeof sfx);
    render_matmul_head(b, k);
    render_buffers(b, k);
    render_hoisted(b, k, live);
    sbuf_printf(b, "    const int par = a->nthreads > 1 && NB * M * N * K > %d;\n", MM_PAR_WORK);
    sbuf_printf(b, "    const int nt = par ? a->nthreads : 1;\n");
    sbuf_printf(b, "    int64_t mb, nb;\n");
    sbuf_printf(b, "    const int64_t T = st_gemm_plan(%s, M, N, NB >= nt ? 1 : nt, &mb, &nb);\n", dt);
    sbuf_printf(b, "    const int64_t TC = st_gemm_tile_cols(%s);\n", dt);
    sbuf_printf(b, "    const size_t wsz = st_gemm_ws_bytes(%s, mb, nb, K);\n", dt);
    sbuf_printf(b, "    #pragma omp parallel num_threads(nt) if (par)\n");
    sbuf_printf(b, "    {\n");
    sbuf_printf(b, "        char *ws = malloc(wsz + (size_t)(mb * TC) * sizeof(%s));\n", st);
    sbuf_printf(b, "        %s tile1[64];   /* no scratch: 1 x 64 tiles, the unblocked loop */\n", st);
    sbuf_printf(b, "        %s *tile = ws ? (%s *)(ws + wsz) : tile1;\n", st, st);
    sbuf_printf(b, "        #pragma omp for schedule(static)\n");
    sbuf_printf(b, "        for (int64_t t = 0; t < NB * T; t++) {\n");
    sbuf_printf(b, "            int64_t ao = aoff, bo = boff, r = t / T, i0, i1, j0, j1;\n");
    render_batch_offsets(b, m, "r", "            ");
    sbuf_printf(b, "            const st_gemm g = {%s, M, N, K, A + ao, sam, sak, B + bo, sbk, sbn, NULL, 0, SP, 0, 0};\n", dt);
    sbuf_printf(b, "            const int64_t e_z = t / T, rs = ws ? mb : 1, cs = ws ? TC : 64;\n");
    sbuf_printf(b, "            st_gemm_range(&g, t %% T, mb, nb, &i0, &i1, &j0, &j1);\n");
    sbuf_printf(b, "            for (int64_t r0 = i0; r0 < i1; r0 += rs)\n");
    sbuf_printf(b, "                for (int64_t c0 = j0; c0 < j1; c0 += cs) {\n");
    sbuf_printf(b, "                    const int64_t r1 = r0 + rs < i1 ? r0 + rs : i1, c1 = c0 + cs < j1 ? c0 + cs : j1;\n");
    sbuf_printf(b, "                    st_gemm_tile_%s(&g, r0, r1, c0, c1, ws, tile);\n", sfx);
    sbuf_printf(b, "                    for (int64_t e_i = r0; e_i < r1; e_i++) {\n");
    sbuf_printf(b, "                        const %s *trow = tile + (e_i - r0) * (c1 - c0);\n", st);
    /* As in a pointwise kernel's innermost loop (render_range): GCC 12 does not use the restrict
     * pointers here ("versioning for alias required", more than its 10 run-time checks), and an
     * Adam update fused into a weight gradient ran scalar, 4x the GEMM's time (the MLP step's
     * W1). An epilogue element reads the tile and its buffers at its own index (or inputs it does
     * not write, broadcast) and writes its outputs there: no dependence between iterations. */
    sbuf_printf(b, "                        #pragma GCC ivdep\n");
    sbuf_printf(b, "                        for (int64_t e_j = c0; e_j < c1; e_j++) {\n");
    sbuf_printf(b, "                            const %s e_acc = %s(trow[e_j - c0]);\n", ct, ld);
    sbuf_printf(b, "                            const int64_t e_flat = (e_z * M + e_i) * N + e_j;\n");
    render_epilogue_body(b, k, live, laned, 7);
    sbuf_printf(b, "                        }\n");
    sbuf_printf(b, "                    }\n");
    sbuf_printf(b, "                }\n");
    sbuf_printf(b, "        }\n");
    sbuf_printf(b, "        free(ws);\n");
    sbuf_printf(b, "    }\n");
}

/* An attention kernel (kir_attn): the library's attention (st_attn_task_<S>, base/opmath_attn.h)
 * over the tasks of every batch entry (a batch entry's block of query rows each), batch offsets
 * as a matmul's (q, k, v and the mask's), the dropout's counters by batch entry; per thread its
 * scratch (NULL when malloc fails: the task then recomputes its scores, the same bits). */
static void render_attn(sbuf *b, const kir_kernel *k) {
    const kir_attn *m = &k->at;
    const char *st = m->dtype == ST_F64 ? "double" : "float", *sfx = m->dtype == ST_F64 ? "f64" : "f32";
    const char *dt = m->dtype == ST_F64 ? "ST_ATTN_F64" : "ST_ATTN_F32";
    static const char *const op[4] = {"Q", "K", "V", "M"}, *const lo[4] = {"q", "k", "v", "m"};
    static const char *const rs[4][2] = {{"sqi", "sqd"}, {"skj", "skd"}, {"svj", "sve"}, {"smi", "smj"}};
    const int nb = m->nbatch, nop = m->m_buf >= 0 ? 4 : 3, buf[4] = {m->q_buf, m->k_buf, m->v_buf, m->m_buf};
    for (int i = 0; i < nop; i++)
        sbuf_printf(b, "    const %s *%s = (const %s *)a->bufs[%d];\n", st, op[i], st, buf[i]);
    sbuf_printf(b, "    %s *O = (%s *)a->bufs[%d];\n", st, st, m->o_buf);
    sbuf_printf(b, "    const int64_t Lq = a->ints[%d], Lk = a->ints[%d], E = a->ints[%d], Ev = a->ints[%d];\n",
                m->p_lq, m->p_lk, m->p_e, m->p_ev);
    sbuf_printf(b, "    int64_t NB = 1;\n");
    for (int d = 0; d < nb; d++) sbuf_printf(b, "    NB *= a->ints[%d];\n", m->p_bsize + d);
    sbuf_printf(b, "    const int par = a->nthreads > 1 && NB * Lq * Lk * (E + Ev) > %d;\n", MM_PAR_WORK);
    sbuf_printf(b, "    const int nt = par ? a->nthreads : 1;\n");
    sbuf_printf(b, "    const st_attn g0 = {.dt = %s, .causal = %d, .Lq = Lq, .Lk = Lk, .D = E, .Dv = Ev,", dt, m->causal);
    for (int i = 0; i < nop; i++)
        sbuf_printf(b, " .%s = a->ints[%d], .%s = a->ints[%d],", rs[i][0], m->p_str[i] + nb, rs[i][1],
                    m->p_str[i] + nb + 1);
    if (m->dropout)
        sbuf_printf(b, " .drop = a->flts[%d], .seed = (uint64_t)a->ints[%d],", m->p_drop, m->p_seed);
    sbuf_printf(b, " .scale = a->flts[%d], .rb = st_attn_plan(NB, Lq, nt)};\n", m->p_scale);
    sbuf_printf(b, "    const int64_t T = st_attn_tasks(&g0);\n");
    sbuf_printf(b, "    const size_t wsz = st_attn_ws_bytes(%s, Lk, E, Ev);\n", dt);
    sbuf_printf(b, "    #pragma omp parallel num_threads(nt) if (par)\n    {\n");
    sbuf_printf(b, "        void *ws = malloc(wsz);\n");
    /* a batch entry's row blocks in the order 0, T-1, 1, T-2, ...: a causal block's cost grows
     * with its rows, so each thread's contiguous share holds cheap and dear ones alike */
    sbuf_printf(b, "        #pragma omp for schedule(static)\n");
    sbuf_printf(b, "        for (int64_t t = 0; t < NB * T; t++) {\n");
    sbuf_printf(b, "            const int64_t u = t %% T, blk = u %% 2 ? T - 1 - u / 2 : u / 2;\n");
    sbuf_printf(b, "            int64_t r = t / T");
    for (int i = 0; i < nop; i++) sbuf_printf(b, ", %so = a->ints[%d]", lo[i], m->p_off[i]);
    sbuf_printf(b, ";\n");
    for (int d = nb - 1; d >= 0; d--) {
        sbuf_printf(b, "            { const int64_t i = r %% a->ints[%d]; r /= a->ints[%d];", m->p_bsize + d,
                    m->p_bsize + d);
        for (int i = 0; i < nop; i++) sbuf_printf(b, " %so += i * a->ints[%d];", lo[i], m->p_str[i] + d);
        sbuf_printf(b, " }\n");
    }
    sbuf_printf(b, "            (void)r;\n");
    sbuf_printf(b, "            st_attn g = g0;\n");
    sbuf_printf(b, "           ");
    for (int i = 0; i < nop; i++) sbuf_printf(b, " g.%s = %s + %so;", op[i], op[i], lo[i]);
    sbuf_printf(b, " g.O = O + t / T * Lq * Ev;\n");
    if (m->dropout)   /* the weights' counters: batch entry t / T's (Lq, Lk) block */
        sbuf_printf(b, "            g.ctr = (uint64_t)a->ints[%d] + (uint64_t)(t / T * Lq * Lk);\n", m->p_roff);
    sbuf_printf(b, "            st_attn_task_%s(&g, blk, ws);\n", sfx);
    sbuf_printf(b, "        }\n        free(ws);\n    }\n");
}

/* Integer matmuls: render_matmul_int's row loop, the epilogue where it stores. */
static void render_matmul_int_epi(sbuf *b, const kir_kernel *k, const uint8_t *live, uint8_t *laned) {
    const kir_matmul *m = &k->mm;
    const char *st = storage_ctype(m->dtype);
    render_matmul_head(b, k);
    render_buffers(b, k);
    render_hoisted(b, k, live);
    sbuf_printf(b, "    (void)sbn;\n");
    sbuf_printf(b, "    #pragma omp parallel for if (NB * M * N * K > %d) num_threads(a->nthreads)\n", PAR_THRESHOLD);
    sbuf_printf(b, "    for (int64_t bm = 0; bm < NB * M; bm++) {\n");
    sbuf_printf(b, "        const int64_t e_i = bm %% M, e_z = bm / M;\n");
    sbuf_printf(b, "        int64_t ao = aoff + e_i * sam, bo = boff, t = e_z;\n");
    render_batch_offsets(b, m, "t", "        ");
    render_int_tile_sums(b, m, st);
    sbuf_printf(b, "            for (int64_t j = 0; j < nn; j++) {\n");
    sbuf_printf(b, "                const int64_t e_j = n0 + j, e_flat = bm * N + e_j;\n");
    sbuf_printf(b, "                const %s e_acc = (%s)(int64_t)acc[j];\n", st, st);
    render_epilogue_body(b, k, live, laned, 4);
    sbuf_printf(b, "            }\n");
    sbuf_printf(b, "        }\n    }\n");
}

static void render_matmul(sbuf *b, const kir_kernel *k, const uint8_t *live, uint8_t *laned) {
    bool flt = st_is_float((st_dtype)k->mm.dtype);
    if (k->mm.epi && flt) render_matmul_float_epi(b, k, live, laned);
    else if (k->mm.epi) render_matmul_int_epi(b, k, live, laned);
    else if (flt) render_matmul_float(b, k);
    else render_matmul_int(b, k);
}

char *render_c(const kir_kernel *k) {
    sbuf b = {0};
    uint8_t *live = NULL;
    live = st_calloc(2 * (size_t)(k->n ? k->n : 1), 1);   /* live, then laned */
    if (!live) return NULL;
    render_mark_live(k, live);
    if (k->kind == KK_MATMUL) render_gemm_instance(&b, k);
    sbuf_printf(&b, "// stitch kernel: %s\nvoid KNAME(const st_kargs *a) {\n    ST_POOL_USE(a);\n", k->comment);
    if (k->kind == KK_MATMUL) {
        render_matmul(&b, k, live, live + (k->n ? k->n : 1));
    } else if (k->kind == KK_ATTN) {
        render_attn(&b, k);
    } else {
        render_buffers(&b, k);
        render_body(&b, k, live, live + (k->n ? k->n : 1));
    }
    sbuf_printf(&b, "}\n");
    st_free(live);
    if (b.oom) {
        st_free(b.s);
        st_error(ST_ERR_OOM, "render: out of memory");
        return NULL;
    }
    return b.s;
}
