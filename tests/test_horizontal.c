/*
 * test_horizontal.c — horizontal kernels (fuser/horizontal.c, kir_append) at the IR level.
 *
 * Three kernels built by hand in the shapes fuser/lower.c makes for pointwise groups (1-D flat,
 * 2-D rows with an inner loop, a scalar with no loop) are appended into one kernel: checked are
 * the renumbering (instruction ids, parameter slots, buffer slots), the CUDA mapping
 * (CL_HORIZONTAL, per-part block counts summed into the grid, an empty part taking no block),
 * the C and CUDA text, and — when libnvrtc loads — that the CUDA kernel compiles for sm_80 and
 * sm_90 after the prelude. The Lua side (tests/lua/test_horizontal.lua) checks values and launches.
 */
#include "base/base.h"
#include "jit/jit.h"
#include "jit/render.h"
#include "jit/nvrtc.h"
#include "test.h"

#include <stdlib.h>

static int ip(kir_builder *b, int key) { return kir_emit(b, KI_IPARAM, KT_I64, 0, key, 0, 0, -1, 0, 0); }
static int fp(kir_builder *b, int key) { return kir_emit(b, KI_FPARAM, KT_F64, 0, key, 0, 0, -1, 0, 0); }
static int ld(kir_builder *b, int slot, int idx) { return kir_emit(b, KI_LOAD, KT_F32, 0, slot, idx, -1, -1, ST_F32, 0); }
static void stv(kir_builder *b, int slot, int idx, int v) { kir_emit(b, KI_STORE, KT_VOID, 0, slot, idx, v, -1, ST_F32, 0); }
static int mulf(kir_builder *b, int x, int f) {
    int c = kir_emit(b, KI_CVT, KT_F32, 0, f, -1, -1, -1, 0, 0);
    return kir_emit(b, KI_OP, KT_F32, ST_OP_MUL, x, c, -1, -1, 0, 0);
}
static void two_bufs(kir_kernel *k) {
    k->nbufs = 2;
    k->buf_dtype[0] = k->buf_dtype[1] = ST_F32;
    k->buf_out[0] = 0;
    k->buf_out[1] = 1;
}

/* p1[i] = p0[i] * f0, i < i0 */
static void flat(kir_kernel *k) {
    kir_builder b;
    kir_builder_init(&b, k, KK_POINTWISE);
    int n = ip(&b, 1), f = fp(&b, 2);
    int i = kir_loop(&b, n, -1, KIR_LOOP_PAR);
    stv(&b, 1, i, mulf(&b, ld(&b, 0, i), f));
    kir_endloop(&b);
    two_bufs(k);
    kir_builder_free(&b);
}

/* rows: p1[r * i1 + j] = p0[r * i1 + j] * f0, r < i0, j < i1 */
static void rows(kir_kernel *k) {
    kir_builder b;
    kir_builder_init(&b, k, KK_POINTWISE);
    int nr = ip(&b, 1), nc = ip(&b, 2), f = fp(&b, 3);
    int r = kir_loop(&b, nr, -1, KIR_LOOP_PAR);
    int base = kir_ibin(&b, KI_IMUL, r, nc);
    int j = kir_loop(&b, nc, -1, KIR_LOOP_SERIAL);
    int idx = kir_ibin(&b, KI_IADD, base, j);
    stv(&b, 1, idx, mulf(&b, ld(&b, 0, idx), f));
    kir_endloop(&b);
    kir_endloop(&b);
    two_bufs(k);
    kir_builder_free(&b);
}

/* a scalar: p1[0] = p0[0] * f0 (no loop: runs on one thread) */
static void scalar(kir_kernel *k) {
    kir_builder b;
    kir_builder_init(&b, k, KK_POINTWISE);
    int z = kir_iconst(&b, KT_I64, 0), f = fp(&b, 1);
    stv(&b, 1, z, mulf(&b, ld(&b, 0, z), f));
    two_bufs(k);
    kir_builder_free(&b);
}

static kir_kernel H;
static char *csrc, *cusrc;

/* Parts: flat (slots 0, 1), rows reading flat's input (slot 0 shared, its output slot 2), scalar
 * (slots 3, 4). */
static void build(void) {
    kir_kernel parts[3];
    flat(&parts[0]);
    rows(&parts[1]);
    scalar(&parts[2]);
    memset(&H, 0, sizeof H);
    H.kind = KK_POINTWISE;
    H.nbufs = 5;
    for (int s = 0; s < 5; s++) {
        H.buf_dtype[s] = ST_F32;
        H.buf_out[s] = s == 1 || s == 2 || s == 4;
    }
    static const int maps[3][2] = {{0, 1}, {0, 2}, {3, 4}};
    for (int p = 0; p < 3; p++) {
        CHECK(kir_append(&H, &parts[p], maps[p]) == ST_OK);
        kir_kernel_free(&parts[p]);
    }
}

TEST(renumbering) {
    CHECK(H.nparts == 3);
    CHECK(H.nints == 3 && H.nflts == 3);   /* flat: 1 + 1, rows: 2 + 1, scalar: 0 + 1 */
    int loads[2] = {0}, stores = 0, iparams = 0;
    for (int i = 0; i < H.n; i++) {
        const kir_ins *in = &H.ins[i];
        unsigned m = kir_operand_mask(in);
        const int32_t ops[4] = {in->a, in->b, in->c, in->d};
        for (int q = 0; q < 4; q++)
            if (m >> q & 1) CHECK(ops[q] < i);   /* operands still refer to earlier instructions */
        if (in->op == KI_LOAD) loads[in->a == 0 ? 0 : 1]++;
        if (in->op == KI_STORE) stores |= 1 << in->a;
        if (in->op == KI_IPARAM) iparams |= 1 << in->imm;
    }
    CHECK(loads[0] == 2 && loads[1] == 1);   /* slot 0 shared by two parts, slot 3 by the scalar */
    CHECK(stores == ((1 << 1) | (1 << 2) | (1 << 4)));
    CHECK(iparams == 7);                     /* slots 0, 1, 2: rows' follow flat's */
    CHECK(H.part_start[0] == 0 && H.part_start[1] > 0 && H.part_start[2] > H.part_start[1]);
}

TEST(cuda_mapping) {
    cuda_launch_desc d;
    cusrc = render_cuda(&H, &d);
    CHECK(cusrc != NULL);
    CHECK(d.mode == CL_HORIZONTAL && d.block == 256);
    CHECK(d.part_count[0] >= 0 && d.part_count[1] >= 0 && d.part_count[2] == -1);
    unsigned grid[3], block[3];
    int rt;
    /* flat: 1000 elements -> 4 blocks; rows: 300 rows -> 2 blocks; scalar: 1 block */
    const int64_t ints[3] = {1000, 300, 7};
    cuda_launch_dims(&H, &d, ints, 132, grid, block, &rt);
    CHECK(grid[0] == 7 && grid[1] == 1 && block[0] == 256);
    const int64_t empty[3] = {0, 0, 7};   /* empty parts take no block */
    cuda_launch_dims(&H, &d, empty, 132, grid, block, &rt);
    CHECK(grid[0] == 1);
    const int64_t big[3] = {1 << 30, 1, 1};   /* a part's blocks are capped: grid-stride past */
    cuda_launch_dims(&H, &d, big, 132, grid, block, &rt);
    CHECK(grid[0] == 1024 + 1 + 1);
    CHECK(cusrc && strstr(cusrc, "hb_ -= nb_") && strstr(cusrc, "launch: horizontal"));
    CHECK(cusrc && strstr(cusrc, "if (hb_ == 0 && threadIdx.x == 0)"));   /* the scalar part */
}

TEST(c_text) {
    csrc = render_c(&H);
    CHECK(csrc != NULL);
    int loops = 0;
    for (const char *s = csrc; (s = strstr(s, "#pragma omp parallel for")); s++) loops++;
    CHECK(loops == 2);   /* flat's loop and rows' row loop, one after the other */
}

TEST(nvrtc_compiles) {
    if (nvrtc_load() != ST_OK) {
        printf("skip nvrtc_compiles: %s\n", st_last_error());
        st_clear_error();
        return;
    }
    const char *ks[1] = {cusrc}, *kn[1] = {"horizontal"};
    char *unit = nvrtc_unit(1, ks, kn, NULL, 1);
    CHECK(unit != NULL);
    static const char *const archs[] = {"sm_80", "sm_90"};
    for (int a = 0; unit && a < 2; a++) {
        char *log = NULL;
        double ms;
        int rc = nvrtc_try(unit, archs[a], "test_horizontal", NULL, NULL, &log, &ms);
        CHECK_MSG(!rc, "%s: %.300s", archs[a], log ? log : nvrtc_result_name(rc));
        free(log);
    }
    free(unit);
}

int main(void) {
    build();
    RUN(renumbering);
    RUN(cuda_mapping);
    RUN(c_text);
    RUN(nvrtc_compiles);
    st_free(csrc);
    st_free(cusrc);
    kir_kernel_free(&H);
    st_shutdown();
    TEST_MAIN_END();
}
