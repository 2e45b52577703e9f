/*
 * test_mma.c — tensor-core matmul kernels (jit/render_cuda_mma.c), without a GPU.
 *
 * Checked:
 *  - the fragment tables against the PTX ISA formulas (section 9.7.14.5, m16n8k16 f16/bf16 and
 *    m16n8k8 tf32, written out here independently): every element a lane loads is the element
 *    the instruction expects in that register, and each fragment covers its tile exactly once;
 *  - the block tiling: the 8 warps' 2x2 accumulator tiles cover the 64x64 output tile exactly once;
 *  - eligibility: f16/bf16 on sm >= 80, f32 only with tf32 allowed, never f64/ints/bool or sm < 80;
 *  - the source: mma.sync exactly when eligible, the table's offsets in the fragment loads, the
 *    tf32 switch changes the f32 source (so the cubin key), the geometry is CL_MATMUL's;
 *  - when libnvrtc loads: every tensor-core kernel (f16, bf16, tf32; 0 or 2 batch dims; B unit-stride
 *    or not) compiles for sm_80, sm_90 and sm_90a (what Hopper devices get).
 *    Shapes and strides are kernel parameters, not part of the source.
 * Nothing here runs a kernel: the numerics need a GPU (tests/gpu/run.sh).
 */
#include "base/base.h"
#include "jit/render_cuda_mma.h"
#include "jit/jit.h"
#include "jit/nvrtc.h"
#include "test.h"

#include <stdlib.h>

/* ---- the PTX ISA formulas (g = lane >> 2, t = lane % 4) ---- */
static void ptx_a_f16(int lane, int i, int *row, int *col) {
    int g = lane >> 2, t = lane % 4;
    *row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
    *col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
}
static void ptx_b_f16(int lane, int i, int *row, int *col) {
    int g = lane >> 2, t = lane % 4;
    *row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
    *col = g;
}
static void ptx_a_tf32(int lane, int i, int *row, int *col) {
    int g = lane >> 2, t = lane % 4;
    *row = (i == 0 || i == 2) ? g : g + 8;
    *col = (i < 2) ? t : t + 4;
}
static void ptx_b_tf32(int lane, int i, int *row, int *col) {
    int g = lane >> 2, t = lane % 4;
    *row = i == 0 ? t : t + 4;
    *col = g;
}
static void ptx_c(int lane, int i, int *row, int *col) {
    int g = lane >> 2, t = lane % 4;
    *row = i < 2 ? g : g + 8;
    *col = t * 2 + (i & 1);
}

/* ---- fragments ---- */
static void check_shape(int dt) {
    const cuda_mma_shape *s = cuda_mma_shape_of(dt);
    CHECK(s != NULL);
    if (!s) return;
    int ne_a = 4 * s->epr, ne_b = 2 * s->epr, K = s->kstep;
    CHECK_EQ_INT(32 * ne_a, 16 * K);   /* a warp holds the whole A tile ... */
    CHECK_EQ_INT(32 * ne_b, K * 8);    /* ... and the whole B tile */
    int seen_a[16][16] = {{0}}, seen_b[16][8] = {{0}};
    for (int lane = 0; lane < 32; lane++) {
        for (int e = 0; e < ne_a; e++) {
            int r, c, pr, pc;
            cuda_mma_a_elem(s, lane, e, &r, &c);
            if (dt == ST_F32) ptx_a_tf32(lane, e, &pr, &pc);
            else ptx_a_f16(lane, e, &pr, &pc);
            CHECK_MSG(r == pr && c == pc, "dtype %d A lane %d a%d: (%d, %d), PTX (%d, %d)", dt, lane, e, r, c, pr, pc);
            if (r >= 0 && r < 16 && c >= 0 && c < K) seen_a[r][c]++;
        }
        for (int e = 0; e < ne_b; e++) {
            int r, c, pr, pc;
            cuda_mma_b_elem(s, lane, e, &r, &c);
            if (dt == ST_F32) ptx_b_tf32(lane, e, &pr, &pc);
            else ptx_b_f16(lane, e, &pr, &pc);
            CHECK_MSG(r == pr && c == pc, "dtype %d B lane %d b%d: (%d, %d), PTX (%d, %d)", dt, lane, e, r, c, pr, pc);
            if (r >= 0 && r < K && c >= 0 && c < 8) seen_b[r][c]++;
        }
    }
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < K; c++) CHECK_MSG(seen_a[r][c] == 1, "A (%d, %d) held %d times", r, c, seen_a[r][c]);
    for (int r = 0; r < K; r++)
        for (int c = 0; c < 8; c++) CHECK_MSG(seen_b[r][c] == 1, "B (%d, %d) held %d times", r, c, seen_b[r][c]);
}

TEST(fragments_match_ptx) {
    check_shape(ST_F16);
    check_shape(ST_BF16);
    check_shape(ST_F32);
    CHECK(cuda_mma_shape_of(ST_F64) == NULL && cuda_mma_shape_of(ST_I32) == NULL);
    int seen[16][8] = {{0}};
    for (int lane = 0; lane < 32; lane++)
        for (int e = 0; e < 4; e++) {
            int r, c, pr, pc;
            cuda_mma_c_elem(lane, e, &r, &c);
            ptx_c(lane, e, &pr, &pc);
            CHECK_MSG(r == pr && c == pc, "C lane %d c%d: (%d, %d), PTX (%d, %d)", lane, e, r, c, pr, pc);
            if (r >= 0 && r < 16 && c >= 0 && c < 8) seen[r][c]++;
        }
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++) CHECK_EQ_INT(seen[r][c], 1);
}

TEST(tile_coverage) {
    static int seen[64][64];
    memset(seen, 0, sizeof seen);
    for (int w = 0; w < CUDA_MMA_WARPS; w++)
        for (int mi = 0; mi < CUDA_MMA_MI; mi++)
            for (int ni = 0; ni < CUDA_MMA_NI; ni++)
                for (int lane = 0; lane < 32; lane++)
                    for (int e = 0; e < 4; e++) {
                        int r, c;
                        cuda_mma_out_elem(w, mi, ni, lane, e, &r, &c);
                        CHECK_MSG(r >= 0 && r < 64 && c >= 0 && c < 64, "out (%d, %d) outside the tile", r, c);
                        if (r >= 0 && r < 64 && c >= 0 && c < 64) seen[r][c]++;
                    }
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 64; c++) CHECK_MSG(seen[r][c] == 1, "output (%d, %d) owned %d times", r, c, seen[r][c]);
    CHECK_EQ_INT(CUDA_MMA_WARPS * 32, 256);   /* CL_MATMUL's block */
}

/* ---- kernels ---- */
/* A matmul as lower.c builds it: ints {M, N, K, batch sizes.., astr(batch.., m, k), bstr(batch.., k, n), aoff, boff} */
static void build_mm(kir_kernel *k, st_dtype dt, int nbatch, int b_unit) {
    memset(k, 0, sizeof *k);
    k->kind = KK_MATMUL;
    snprintf(k->comment, sizeof k->comment, "mm %s nb%d u%d", st_dtypes[dt].name, nbatch, b_unit);
    kir_matmul *m = &k->mm;
    m->dtype = dt;
    m->nbatch = nbatch;
    m->a_buf = 0;
    m->b_buf = 1;
    m->o_buf = 2;
    m->p_m = 0;
    m->p_n = 1;
    m->p_k = 2;
    m->p_bsize = 3;
    m->p_astr = 3 + nbatch;
    m->p_bstr = m->p_astr + nbatch + 2;
    m->p_aoff = m->p_bstr + nbatch + 2;
    m->p_boff = m->p_aoff + 1;
    m->b_unit = b_unit;
    k->nints = m->p_boff + 1;
    k->nbufs = 3;
    for (int i = 0; i < 3; i++) {
        k->buf_dtype[i] = (uint8_t)dt;
        k->buf_out[i] = i == 2;
    }
}

static char *render(st_dtype dt, int nbatch, int b_unit, int sm, cuda_launch_desc *d) {
    kir_kernel k;
    build_mm(&k, dt, nbatch, b_unit);
    return render_cuda_sm(&k, sm, d);
}

TEST(eligible) {
    kir_kernel k;
    st_cuda_allow_tf32(0);
    static const st_dtype yes[] = {ST_F16, ST_BF16};
    for (int i = 0; i < 2; i++) {
        build_mm(&k, yes[i], 1, 0);
        CHECK(cuda_mma_eligible(&k, 80) && cuda_mma_eligible(&k, 86) && cuda_mma_eligible(&k, 90));
        CHECK(!cuda_mma_eligible(&k, 75) && !cuda_mma_eligible(&k, 70) && !cuda_mma_eligible(&k, 0));
    }
    static const st_dtype no[] = {ST_F32, ST_F64, ST_I32, ST_I64, ST_BOOL};
    for (int i = 0; i < 5; i++) {
        build_mm(&k, no[i], 1, 1);
        CHECK_MSG(!cuda_mma_eligible(&k, 90), "%s eligible with tf32 off", st_dtypes[no[i]].name);
    }
    st_cuda_allow_tf32(1);
    build_mm(&k, ST_F32, 0, 1);
    CHECK(cuda_mma_eligible(&k, 80) && !cuda_mma_eligible(&k, 75));
    k.buf_dtype[0] = ST_F16;   /* a cast folded into A's loads (a prologue): the plain body */
    CHECK(!cuda_mma_eligible(&k, 80));
    for (int i = 1; i < 5; i++) {
        build_mm(&k, no[i], 1, 1);
        CHECK_MSG(!cuda_mma_eligible(&k, 90), "%s eligible with tf32 on", st_dtypes[no[i]].name);
    }
    build_mm(&k, ST_F16, 0, 0);
    k.kind = KK_POINTWISE;
    CHECK(!cuda_mma_eligible(&k, 90));
    st_cuda_allow_tf32(0);
}

TEST(source) {
    cuda_launch_desc d;
    st_cuda_allow_tf32(0);
    char *h = render(ST_F16, 1, 0, 80, &d);
    CHECK(h && strstr(h, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
    CHECK(d.mode == CL_MATMUL && d.block == 256);
    CHECK(h && strstr(h, "__shared__ __align__(16) uint16_t As[64][40], Bs[64][40]"));
    CHECK(h && strstr(h, "O[z * M * N + gm * N + gn] = st_f2h(acc[i][j][e]);"));
    /* the fragment loads print the table's offsets: A (row, k), B (col, k) */
    const cuda_mma_shape *s = cuda_mma_shape_of(ST_F16);
    char want[128];
    for (int r = 0; r < 4 && h; r++) {
        snprintf(want, sizeof want, "af[i][%d] = *(const uint32_t *)&As[r + %d][c + %d];", r, s->a_off[r][0],
                 s->a_off[r][1]);
        CHECK_MSG(strstr(h, want), "missing: %s", want);
    }
    for (int r = 0; r < 2 && h; r++) {
        snprintf(want, sizeof want, "bf[j][%d] = *(const uint32_t *)&Bs[n + %d][c + %d];", r, s->b_off[r][1],
                 s->b_off[r][0]);
        CHECK_MSG(strstr(h, want), "missing: %s", want);
    }
    st_free(h);
    char *bf = render(ST_BF16, 2, 1, 90, &d);
    CHECK(bf && strstr(bf, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") && strstr(bf, "st_f2bf(acc[i][j][e])"));
    CHECK(bf && strstr(bf, "sbn = 1,"));   /* b_unit baked */
    st_free(bf);
    /* not eligible: the SIMT body */
    static const struct { st_dtype dt; int sm; } no[] = {{ST_F16, 0}, {ST_F16, 75}, {ST_BF16, 70}, {ST_F32, 90},
                                                          {ST_F64, 90}, {ST_I32, 90}, {ST_BOOL, 90}};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        char *x = render(no[i].dt, 1, 0, no[i].sm, &d);
        /* CUDA cores: 64x64 tiles, 4x4 sums a thread (MM_T: 128 measured slower for small matmuls) */
        CHECK_MSG(x && !strstr(x, "mma.sync") && strstr(x, "acc[4][4]"), "%s sm %d", st_dtypes[no[i].dt].name,
                  no[i].sm);
        CHECK(d.tile == 64);
        CHECK(d.mode == CL_MATMUL && d.block == 256);
        st_free(x);
    }
    /* tf32: opt-in, and a different source (cubin key) */
    char *off = render(ST_F32, 1, 1, 80, &d);
    st_cuda_allow_tf32(1);
    char *on = render(ST_F32, 1, 1, 80, &d);
    st_cuda_allow_tf32(0);
    CHECK(off && on && strcmp(off, on) != 0);
    /* the instructions are the prelude's (one function each: the simulated GPU replaces them) */
    CHECK(on && strstr(on, "st_mma_tf32_(acc[i][j], af[i], bf[j]);") && strstr(on, "st_cvt_tf32_(av)"));
    CHECK(strstr(st_prelude_src, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") &&
          strstr(st_prelude_src, "cvt.rna.tf32.f32 %0, %1;"));
    CHECK(on && strstr(on, "uint32_t As[64][36], Bs[64][36]"));
    CHECK(on && strstr(on, "O[z * M * N + gm * N + gn] = (acc[i][j][e]);"));
    st_free(off);
    st_free(on);
}

/* ---- NVRTC ---- */
TEST(nvrtc_compiles) {
    if (nvrtc_load() != ST_OK) {
        printf("skip nvrtc_compiles: %s\n", st_last_error());
        st_clear_error();
        return;
    }
    enum { NK = 3 * 2 * 2 };
    char *srcs[NK];
    char names[NK][32];
    const char *ks[NK], *kn[NK];
    static const st_dtype dts[3] = {ST_F16, ST_BF16, ST_F32};
    int n = 0;
    st_cuda_allow_tf32(1);
    for (int i = 0; i < 3; i++)
        for (int nb = 0; nb <= 2; nb += 2)   /* no batch dim, two */
            for (int u = 0; u < 2; u++) {
                cuda_launch_desc d;
                srcs[n] = render(dts[i], nb, u, 80, &d);
                CHECK(srcs[n] && strstr(srcs[n], "mma.sync"));
                snprintf(names[n], sizeof names[n], "mm_%s_b%d_u%d", st_dtypes[dts[i]].name, nb, u);
                ks[n] = srcs[n] ? srcs[n] : "";
                kn[n] = names[n];
                n++;
            }
    st_cuda_allow_tf32(0);
    char *unit = nvrtc_unit(n, ks, kn, NULL, 1);
    CHECK(unit != NULL);
    static const char *const archs[] = {"sm_80", "sm_90", "sm_90a"};
    for (int a = 0; unit && a < 3; a++) {
        char *log = NULL;
        double ms;
        int rc = nvrtc_try(unit, archs[a], "test_mma", NULL, NULL, &log, &ms);
        CHECK_MSG(rc == 0, "%s: %s: %.600s", archs[a], nvrtc_result_name(rc), log ? log : "");
        free(log);
    }
    free(unit);
    for (int i = 0; i < n; i++) st_free(srcs[i]);
}

int main(void) {
    RUN(fragments_match_ptx);
    RUN(tile_coverage);
    RUN(eligible);
    RUN(source);
    RUN(nvrtc_compiles);
    st_shutdown();
    TEST_MAIN_END();
}
