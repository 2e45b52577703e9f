/*
 * opmath_attn.h — the prelude's CPU attention, the third part of base/opmath.h (after
 * opmath_gemm.h): O = softmax(Q K^T * scale) V for one batch entry, one block of query rows per
 * task, the score matrix never stored. The interpreter and every JIT attention kernel run the
 * library's copy of it (st_gemm_api.attn, base/gemm.c), so they agree bit for bit.
 */
#ifndef ST_OPMATH_ATTN_H
#define ST_OPMATH_ATTN_H
#ifndef __CUDACC__
/* ---- attention: O (Lq x Dv) = softmax(Q (Lq x D) K^T (D x Lk) * scale) V (Lk x Dv) ----
 * Row i, in the compute type T (float for f32, double for f64), each step rounded as written:
 *   s_j = sum_d q_id k_jd        d in increasing order, fma, from 0 (the GEMM's sums of Q K^T)
 *   s_j = s_j * scale            (scale rounded to T)
 *   s_j = s_j + M_ij             with a mask M (an additive one: 0 or -inf for a boolean mask)
 *   m = max_j s_j                (a NaN wins)
 *   e_j = exp(s_j - m)           (the prelude's exp: om_exp's function)
 *   l = sum_j e_j                in double, 16 partial sums (lane j % 16, in float blocks of 8
 *                                chunks for f32: ST_ATTN_SUM_), combined pairwise
 *   p_j = e_j / (T)l
 *   p_j = u_j >= (T)drop ? p_j * (T)(1 / (1 - drop)) : 0     with dropout (drop > 0): u_j the
 *                                uniform of st_rand_uniform_<S>(seed, ctr + i Lk + j): st.rand's
 *                                number at the weight's flat index, F.dropout's keep and scale
 *   o_ie = sum_j p_j v_je        j in increasing order, fma, from 0 (the GEMM's sums of P V)
 * over the keys row i sees: all Lk, or with `causal` the keys j <= i (PyTorch's is_causal: the
 * mask's top-left corner is (0, 0)). A row that sees no key (Lk = 0) is 0. Every row is computed
 * the same way whatever the task split, the thread, or the instruction set of the copy (fma and
 * the exp are exact functions of their inputs), so results do not depend on them.
 * Memory: per task, K^T and V packed contiguously (D x Lk and Lk x Dv: the keys the task's rows
 * see) and 8 rows of Lk scores: O(Lk (D + Dv)) per thread, never Lq x Lk (a row always fits: on
 * the CPU there is no second, blocked path). Work per row: Lk (D + Dv) multiply-adds, vectorized
 * over 16 keys (the scores) and 16 output columns, 8 rows at a time.
 * Every rounding step is its own statement: no compiler may contract a * b - c into one fused
 * operation (clang's default -ffp-contract=on does so within one expression), which would make
 * the two paths below differ. */
typedef struct st_attn {
    int dt;                         /* ST_ATTN_F32 or ST_ATTN_F64: the storage type of Q, K, V, M, O */
    int causal;
    int64_t Lq, Lk, D, Dv;
    const void *Q, *K, *V;          /* element [0][0] of this batch entry; strides in elements */
    int64_t sqi, sqd, skj, skd, svj, sve;
    const void *M;                  /* the mask's element [0][0] (Lq x Lk, the storage type), or NULL */
    int64_t smi, smj;
    double drop;                    /* dropout probability of the weights (0: none) */
    uint64_t seed, ctr;             /* its stream: ctr the counter of element (0, 0) of this batch entry */
    void *O;                        /* row-major (Lq x Dv) */
    double scale;
    int64_t rb;                     /* query rows per task (st_attn_plan) */
} st_attn;
enum { ST_ATTN_F32, ST_ATTN_F64 };

static inline int64_t st_attn_tasks(const st_attn *g) { return g->rb > 0 ? (g->Lq + g->rb - 1) / g->rb : 0; }
/* Rows per task: as many as give every thread 4 tasks, up to 512 (a task packs K and V once for
 * its rows: more rows, fewer packings), at least 8. */
static inline int64_t st_attn_plan(int64_t batch, int64_t Lq, int nthreads) {
    int64_t rb = 512;
    while (rb > 8 && batch * ((Lq + rb - 1) / rb) < 4 * (int64_t)nthreads) rb /= 2;
    return rb;
}
#define ST_ATTN_R 8   /* query rows computed together (their outputs' sums are independent chains) */
/* Rows whose 16 sums each are in registers at once: 8 with AVX-512's 32 registers; without them (16
 * registers) 8 rows' sums did not fit (AVX2: 16 accumulators, and GCC kept some on the stack, a
 * reload and a store around their FMAs), so the R rows go through in groups of 8 vectors' worth. */
#if defined(__AVX512F__) && !defined(__clang__)
#define ST_ATTN_RA(T) ST_ATTN_R
#elif defined(__AVX2__)
#define ST_ATTN_RA(T) (sizeof(T) == 8 ? 2 : 4)
#else
#define ST_ATTN_RA(T) (sizeof(T) == 8 ? 1 : 2)
#endif
/* Scratch per thread: K^T and V (keys and output columns padded to 16), ST_ATTN_R rows of scores
 * and of q, 64-byte aligned. */
static inline size_t st_attn_ws_bytes(int dt, int64_t Lk, int64_t D, int64_t Dv) {
    const int64_t lkp = (Lk + 15) / 16 * 16, dvp = (Dv + 15) / 16 * 16;
    return (size_t)(D * lkp + Lk * dvp + ST_ATTN_R * (lkp + D)) * (dt == ST_ATTN_F64 ? sizeof(double) : sizeof(float)) +
           64;
}

#ifndef ST_GEMM_EXTERN
/* The row sum l of e_j = exp(s_j - m) over j < n as the head comment says (lanes j % 16 when
 * n >= 32, then the tail serially), in a row reduction's order: for float, each lane adds its
 * values in float over blocks of 8 chunks (128 values of the row) and adds each block's sum into
 * its double lane (jit/render_c.c "Float blocks"); for double, straight into the lane. E, an
 * expression of the index JX, gives e_j (and may store it). */
#define ST_ATTN_SUM_(T, JX, E)                                                                   \
    double l = 0;                                                                                \
    int64_t j = 0;                                                                               \
    if (n >= 32) {                                                                               \
        double lane[16];                                                                         \
        for (int c = 0; c < 16; c++) lane[c] = 0;                                                \
        const int64_t nm_ = n - n % 16;                                                          \
        while (j < nm_) {                                                                        \
            const int64_t be_ = nm_ - j > 128 ? j + 128 : nm_;                                   \
            T f_[16];                                                                            \
            for (int c = 0; c < 16; c++) f_[c] = 0;                                              \
            for (; j < be_; j += 16)                                                             \
                for (int c = 0; c < 16; c++) {                                                   \
                    const int64_t JX = j + c;                                                    \
                    if (sizeof(T) == 4) f_[c] += (E);                                            \
                    else lane[c] += (double)(E);                                                 \
                }                                                                                \
            if (sizeof(T) == 4)                                                                  \
                for (int c = 0; c < 16; c++) lane[c] += (double)f_[c];                           \
        }                                                                                        \
        for (int w = 8; w > 0; w >>= 1)                                                          \
            for (int c = 0; c < w; c++) lane[c] += lane[c + w];                                  \
        l = lane[0];                                                                             \
    }                                                                                            \
    for (; j < n; j++) {                                                                         \
        const int64_t JX = j;                                                                    \
        l += (double)(E);                                                                        \
    }
/* One task: rows [t rb, (t + 1) rb). With scratch, K^T and V are packed and each row's scores
 * kept; without (ws NULL: the allocation failed), every score is computed again where it is
 * needed, from the same products in the same order: the same bits, three times the q k work. */
#define ST_ATTN_TASK_(T, S, EXP)                                                                 \
    /* the max of x[0..n) (n >= 1), a NaN winning: 16 lanes (k % 16), then the tail; the value  \
     * of a serial scan (a max of any grouping), vectorizable */                                 \
    static inline T st_attn_max_##S##_(const T *x, int64_t n) {                                  \
        T m = x[0];                                                                              \
        int64_t k = 0;                                                                           \
        if (n >= 32) {                                                                           \
            T lane[16];                                                                          \
            for (int c = 0; c < 16; c++) lane[c] = x[c];                                         \
            for (; k + 16 <= n; k += 16)                                                         \
                for (int c = 0; c < 16; c++) {                                                   \
                    const T y = x[k + c];                                                        \
                    lane[c] = (lane[c] != lane[c] || lane[c] > y) ? lane[c] : y;                 \
                }                                                                                \
            for (int w = 8; w > 0; w >>= 1)                                                      \
                for (int c = 0; c < w; c++)                                                      \
                    lane[c] = (lane[c] != lane[c] || lane[c] > lane[c + w]) ? lane[c] : lane[c + w]; \
            m = lane[0];                                                                         \
        }                                                                                        \
        for (; k < n; k++) m = (m != m || m > x[k]) ? m : x[k];                                  \
        return m;                                                                                \
    }                                                                                            \
    static inline T st_attn_score_##S##_(const st_attn *g, const T *Q, const T *K, int64_t i, int64_t j) { \
        T acc = 0;                                                                               \
        for (int64_t d = 0; d < g->D; d++)                                                       \
            acc = ST_GEMM_FMA_##T(Q[i * g->sqi + d * g->sqd], K[j * g->skj + d * g->skd], acc);   \
        const T x = acc * (T)g->scale;                                                           \
        if (!g->M) return x;                                                                     \
        const T y = x + ((const T *)g->M)[i * g->smi + j * g->smj];                              \
        return y;                                                                                \
    }                                                                                            \
    /* dropout of weight p (row i, key j), as F.dropout's x * (keep * (1 / (1 - drop))) */           \
    static inline T st_attn_drop_##S##_(const st_attn *g, int64_t i, int64_t j, T p) {            \
        const T u = st_rand_uniform_##S(g->seed, g->ctr + (uint64_t)(i * g->Lk + j));            \
        const T c = (T)(1.0 / (1.0 - g->drop));                                                  \
        const T y = p * c;                                                                       \
        return u >= (T)g->drop ? y : (T)0;                                                       \
    }                                                                                            \
    static inline T st_attn_exp_##S##_(const st_attn *g, const T *Q, const T *K, int64_t i, int64_t j, T m) { \
        const T x = st_attn_score_##S##_(g, Q, K, i, j);                                         \
        const T y = x - m;                                                                       \
        return EXP(y);                                                                           \
    }                                                                                            \
    static inline void st_attn_task_##S(const st_attn *g, int64_t t, void *ws) {                        \
        const T *Q = (const T *)g->Q, *K = (const T *)g->K, *V = (const T *)g->V;               \
        T *O = (T *)g->O;                                                                        \
        const int64_t Lk = g->Lk, D = g->D, Dv = g->Dv;                                          \
        const int64_t i0 = t * g->rb, i1 = i0 + g->rb < g->Lq ? i0 + g->rb : g->Lq;              \
        const int64_t nk = g->causal ? (i1 < Lk ? i1 : Lk) : Lk;                                 \
        const T sc = (T)g->scale;                                                                \
        if (!ws) {                                                                               \
            for (int64_t i = i0; i < i1; i++) {                                                  \
                const int64_t n = g->causal ? (i + 1 < nk ? i + 1 : nk) : nk;                     \
                T *orow = O + i * Dv;                                                            \
                for (int64_t e = 0; e < Dv; e++) orow[e] = 0;                                    \
                if (n == 0) continue;                                                            \
                T m = st_attn_score_##S##_(g, Q, K, i, 0);                                       \
                for (int64_t k = 0; k < n; k++) {                                                \
                    const T x = st_attn_score_##S##_(g, Q, K, i, k);                             \
                    m = (m != m || m > x) ? m : x;                                               \
                }                                                                                \
                ST_ATTN_SUM_(T, jx, st_attn_exp_##S##_(g, Q, K, i, jx, m))                         \
                const T lt = (T)l;                                                               \
                for (int64_t k = 0; k < n; k++) {                                                \
                    T p = st_attn_exp_##S##_(g, Q, K, i, k, m) / lt;                             \
                    if (g->drop > 0) p = st_attn_drop_##S##_(g, i, k, p);                         \
                    for (int64_t e = 0; e < Dv; e++)                                             \
                        orow[e] = ST_GEMM_FMA_##T(p, V[k * g->svj + e * g->sve], orow[e]);        \
                }                                                                                \
            }                                                                                    \
            return;                                                                              \
        }                                                                                        \
        const int64_t nkp = (nk + 15) & ~(int64_t)15, dvp = (Dv + 15) & ~(int64_t)15;                \
        T *kt = (T *)(((uintptr_t)ws + 63) & ~(uintptr_t)63), *vp = kt + D * nkp, *s = vp + nk * dvp; \
        T *qp = s + ST_ATTN_R * nkp;                                                             \
        const int64_t skd = g->skd, sve = g->sve, sqd = g->sqd;                                  \
        for (int64_t j = 0; j < nkp; j++) {                                                      \
            const T *kr = K + (j < nk ? j : 0) * g->skj;                                         \
            for (int64_t d = 0; d < D; d++) kt[d * nkp + j] = j < nk ? kr[d * skd] : (T)0;       \
        }                                                                                        \
        for (int64_t j = 0; j < nk; j++) {                                                       \
            const T *vr = V + j * g->svj;                                                        \
            T *vo = vp + j * dvp;                                                                \
            if (sve == 1)                                                                        \
                for (int64_t e = 0; e < Dv; e++) vo[e] = vr[e];                                  \
            else                                                                                 \
                for (int64_t e = 0; e < Dv; e++) vo[e] = vr[e * sve];                            \
            for (int64_t e = Dv; e < dvp; e++) vo[e] = 0;                                        \
        }                                                                                        \
        for (int64_t ib = i0; ib < i1; ib += ST_ATTN_R) {                                        \
            const int nr = i1 - ib < ST_ATTN_R ? (int)(i1 - ib) : ST_ATTN_R;                     \
            int64_t nn[ST_ATTN_R];                                                                \
            for (int r = 0; r < ST_ATTN_R; r++)                                                  \
                nn[r] = r >= nr ? 0 : g->causal ? (ib + r + 1 < nk ? ib + r + 1 : nk) : nk;        \
            const int64_t nhi = nn[nr - 1], nlo = nn[0];   /* the rows' most and fewest keys */    \
            for (int r = 0; r < ST_ATTN_R; r++) {                                                \
                const T *qr = Q + (r < nr ? ib + r : ib) * g->sqi;                              \
                if (r >= nr)                                                                     \
                    for (int64_t d = 0; d < D; d++) qp[r * D + d] = 0;                           \
                else if (sqd == 1)                                                               \
                    for (int64_t d = 0; d < D; d++) qp[r * D + d] = qr[d];                       \
                else                                                                             \
                    for (int64_t d = 0; d < D; d++) qp[r * D + d] = qr[d * sqd];                 \
            }                                                                                    \
            /* scores, 16 keys x ST_ATTN_R rows at a time (accumulators in registers) */          \
            for (int64_t k0 = 0; k0 < nhi; k0 += 16)                                             \
            for (int r0 = 0; r0 < ST_ATTN_R; r0 += ST_ATTN_RA(T)) {                              \
                T acc[ST_ATTN_RA(T)][16];                                                        \
                for (int r = 0; r < ST_ATTN_RA(T); r++)                                          \
                    for (int c = 0; c < 16; c++) acc[r][c] = 0;                                  \
                for (int64_t d = 0; d < D; d++) {                                                \
                    const T *kv = kt + d * nkp + k0;                                             \
                    _Pragma("GCC unroll 8") for (int r = 0; r < ST_ATTN_RA(T); r++) {             \
                        const T q = qp[(r0 + r) * D + d];                                        \
                        for (int c = 0; c < 16; c++) acc[r][c] = ST_GEMM_FMA_##T(q, kv[c], acc[r][c]); \
                    }                                                                            \
                }                                                                                \
                for (int r = 0; r < ST_ATTN_RA(T); r++)                                          \
                    for (int c = 0; c < 16; c++) s[(r0 + r) * nkp + k0 + c] = acc[r][c] * sc;     \
            }                                                                                    \
            if (g->M)   /* the mask, added to the keys each row sees */                         \
                for (int r = 0; r < nr; r++) {                                                   \
                    const T *mr = (const T *)g->M + (ib + r) * g->smi;                           \
                    T *restrict sr = s + r * nkp;                                                \
                    const int64_t smj = g->smj;                                                  \
                    if (smj == 1)                                                                \
                        for (int64_t k = 0; k < nn[r]; k++) sr[k] = sr[k] + mr[k];               \
                    else                                                                         \
                        for (int64_t k = 0; k < nn[r]; k++) sr[k] = sr[k] + mr[k * smj];         \
                }                                                                                \
            /* each row's softmax over its keys: s becomes p; rows past nr are 0 */              \
            for (int r = 0; r < ST_ATTN_R; r++) {                                                \
                T *restrict sr = s + r * nkp;                                                    \
                if (r >= nr) {                                                                   \
                    for (int64_t k = 0; k < nhi; k++) sr[k] = 0;                                 \
                    continue;                                                                    \
                }                                                                                \
                const int64_t n_ = nn[r];                                                         \
                if (n_ == 0) continue;                                                           \
                T m = st_attn_max_##S##_(sr, n_);                                                   \
                {                                                                                \
                    const int64_t n = n_;                                                        \
                    ST_ATTN_SUM_(T, jx, (sr[jx] = EXP(sr[jx] - m)))                                \
                    const T lt = (T)l;                                                           \
                    for (int64_t k = 0; k < n; k++) sr[k] = sr[k] / lt;                          \
                    if (g->drop > 0)                                                             \
                        for (int64_t k = 0; k < n; k++) sr[k] = st_attn_drop_##S##_(g, ib + r, k, sr[k]); \
                }                                                                                \
            }                                                                                    \
            /* p v, 16 output columns x ST_ATTN_R rows at a time: the keys every row sees, then  \
             * each row's own last ones (causal), k in order for every output */                 \
            for (int64_t e0 = 0; e0 < Dv; e0 += 16)                                              \
            for (int r0 = 0; r0 < nr; r0 += ST_ATTN_RA(T)) {                                     \
                T acc[ST_ATTN_RA(T)][16];                                                        \
                const int na = nr - r0 < ST_ATTN_RA(T) ? nr - r0 : ST_ATTN_RA(T);                \
                for (int r = 0; r < ST_ATTN_RA(T); r++)                                          \
                    for (int c = 0; c < 16; c++) acc[r][c] = 0;                                  \
                for (int64_t k = 0; k < nlo; k++) {                                              \
                    const T *vr = vp + k * dvp + e0;                                             \
                    _Pragma("GCC unroll 8") for (int r = 0; r < ST_ATTN_RA(T); r++) {             \
                        const T p = s[(r0 + r) * nkp + k];                                       \
                        for (int c = 0; c < 16; c++) acc[r][c] = ST_GEMM_FMA_##T(p, vr[c], acc[r][c]); \
                    }                                                                            \
                }                                                                                \
                for (int r = 0; r < na; r++)                                                     \
                    for (int64_t k = nlo; k < nn[r0 + r]; k++) {                                  \
                        const T p = s[(r0 + r) * nkp + k], *vr = vp + k * dvp + e0;              \
                        for (int c = 0; c < 16; c++) acc[r][c] = ST_GEMM_FMA_##T(p, vr[c], acc[r][c]); \
                    }                                                                            \
                const int ne = Dv - e0 < 16 ? (int)(Dv - e0) : 16;                               \
                for (int r = 0; r < na; r++)                                                     \
                    for (int c = 0; c < ne; c++) O[(ib + r0 + r) * Dv + e0 + c] = acc[r][c];      \
            }                                                                                    \
        }                                                                                        \
    }
ST_ATTN_TASK_(float, f32, st_expf_)
ST_ATTN_TASK_(double, f64, st_expd_)
#else
static inline void st_attn_task_f32(const st_attn *g, int64_t t, void *ws) { st_gemm_api_->attn[ST_ATTN_F32](g, t, ws); }
static inline void st_attn_task_f64(const st_attn *g, int64_t t, void *ws) { st_gemm_api_->attn[ST_ATTN_F64](g, t, ws); }
#endif
#endif /* !__CUDACC__ */
#endif
