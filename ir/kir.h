/*
 * kir.h — internal: the kernel IR, a small typed SSA instruction list that the fuser lowers every
 * fusion group to and that the renderers print (jit/render_c.c as C, jit/render_cuda.c as CUDA C).
 * ir/ owns the IR, its builder (hash-consing, scopes), the horizontal concatenation of kernels and
 * the small queries the renderers and launchers share (operand masks, host evaluation of integer
 * expressions); it sits between the fuser that produces kernels and the renderers that consume
 * them, and knows neither.
 *
 * A kernel is a flat list of instructions; the value of instruction i is "v<i>". Structure is
 * expressed by bracketing instructions (KI_LOOP ... KI_ENDLOOP, KI_IF ... KI_ENDIF), so one walk
 * over the list renders it. Invariants:
 *   - operands always refer to earlier instructions (ids grow along every edge);
 *   - a value defined inside a LOOP/IF body is only used inside that body;
 *   - everything that depends on sizes, strides, offsets or user scalars is a parameter
 *     (KI_IPARAM / KI_FPARAM read a->ints[slot] / a->flts[slot]); literals (KI_ICONST,
 *     KI_FCONST) are only structural constants (0, identity elements), so kernels that differ
 *     only in shapes or scalar values have the same source and are compiled once.
 * Matmul kernels are a fixed blocked-loop template described by kir_matmul (the operands' strides
 * are parameters too). A matmul with an epilogue (kir_matmul.epi) also has an instruction list:
 * straight-line code (no LOOP/IF) that the renderers run once per output element where the GEMM
 * stores it, reading the element through KI_MMACC / KI_MMIDX; its STOREs are the kernel's only
 * writes (the matmul itself is stored there only when it is an output of the group).
 */
#ifndef ST_KIR_H
#define ST_KIR_H

#include "trace/trace.h"

/* Compute types of SSA values (C types: uint8_t int32_t int64_t float double). */
typedef enum kir_type { KT_VOID, KT_U8, KT_I32, KT_I64, KT_F32, KT_F64, KT_COUNT } kir_type;

typedef enum kir_opcode {
    KI_IPARAM,   /* int64 a->ints[imm]; a,b,c are a semantic key (dedup only) */
    KI_FPARAM,   /* double a->flts[imm]; a,b are a semantic key */
    KI_ICONST,   /* literal imm, of type `type` */
    KI_FCONST,   /* literal fimm (double; +-inf allowed), of type `type` */
    KI_LOOP,     /* for (int64 v = 0; v < a; v++); imm: KIR_LOOP_* (work estimate: b, -1: a) */
    KI_ENDLOOP,
    KI_IF,       /* if (a) { */
    KI_ENDIF,
    /* int64 index arithmetic */
    KI_IADD, KI_ISUB, KI_IMUL, KI_IDIV, KI_IMOD,
    KI_ILT, KI_ILE,   /* -> u8 */
    KI_LAND,          /* u8 && u8 -> u8 */
    KI_SEL,           /* a ? b : c (any type) */
    /* memory */
    KI_LOAD,     /* bufs[a][b] of storage dtype imm, converted to the compute type */
    KI_STORE,    /* bufs[a][b] = c, converted to storage dtype imm */
    /* values */
    KI_OP,       /* elementwise op sop (st_op) on a[,b[,c]] through the FN macro of ops.def */
    KI_CVT,      /* a converted to `type` (CAST semantics: saturating float->int, !=0 to bool) */
    KI_ROUND,    /* float a rounded through storage dtype imm (f16/bf16), as a store+load would */
    KI_RAND,     /* sop = RAND_U/RAND_N/RAND_INT; a = seed, b = counter, c = lo, d = hi (int64) */
    /* reductions */
    KI_ACC,      /* mutable accumulator of `type`, initialized to a */
    KI_ACCUPD,   /* acc a <- combine(acc, b); imm = st_op (RSUM RPROD RMAX RMIN) */
    KI_ARGUPD,   /* accs a (value), b (index); candidate c at index d; imm = RARGMAX/RARGMIN */
    KI_SETERR,   /* if (!a) *err = 1 (a runtime error such as an index out of range) */
    /* matmul epilogues (kir_matmul.epi): the current output element of the GEMM */
    KI_MMACC,    /* the matmul's value there, as stored (rounded to its dtype), in the compute type */
    KI_MMIDX,    /* int64 index there; imm: KIR_MM_FLAT, KIR_MM_ROW, KIR_MM_COL, KIR_MM_BATCH */
    KI_OPCODE_COUNT
} kir_opcode;

typedef struct kir_ins {
    uint8_t op;       /* kir_opcode */
    uint8_t type;     /* kir_type of the result (KT_VOID for statements) */
    uint16_t sop;     /* st_op for KI_OP / KI_RAND */
    int32_t a, b, c, d;
    int64_t imm;
    double fimm;
} kir_ins;

/* KI_MMIDX (imm): the flat index of the output element ((batch * M + row) * N + col), its row
 * (0..M-1), its column (0..N-1), its flat batch index (0..prod(batch dims)-1). */
enum { KIR_MM_FLAT = 0, KIR_MM_ROW = 1, KIR_MM_COL = 2, KIR_MM_BATCH = 3 };

/* KI_LOOP modes (imm). KIR_LOOP_ROW: the row loop of a full reduction (one row): it runs
 * serially and its loops over the row's elements run in parallel instead (reductions as blocks
 * of partial accumulators combined in a fixed order, element-wise store loops split) when the
 * work (b) is large enough. KIR_LOOP_COLS: a parallel loop (independent iterations, as PAR) over
 * the outputs of a column reduction, whose adjacent iterations read adjacent elements in each of
 * their inner loops; the C renderer may interchange it with its inner loops (blocks of
 * iterations, each inner loop run for the whole block at once: see render_c.c), other renderers
 * print it as PAR. KIR_LOOP_BLOCK: a loop of independent iterations (a reduction's outputs along
 * one dim) nested in a parallel loop; the C renderer prints it column-blocked as KIR_LOOP_COLS,
 * serially (the enclosing loop has the threads); the CPU lowering only emits it. */
enum { KIR_LOOP_SERIAL = 0, KIR_LOOP_PAR = 1, KIR_LOOP_ROW = 2, KIR_LOOP_COLS = 3, KIR_LOOP_BLOCK = 4 };

typedef enum kir_kind { KK_POINTWISE, KK_REDUCE, KK_MATMUL, KK_SCATTER, KK_SETVIEW, KK_ATTN, KK_COUNT } kir_kind;

/* The matmul template: out (B.., M, N) = A (B.., M, K) @ B (B.., K, N). Every int below is a slot
 * of a->ints; per operand: batch strides (nbatch of them), row/col strides, offset. An operand's
 * storage dtype is its slot's (buf_dtype[a_buf], buf_dtype[b_buf]): dtype, or, for a float
 * matmul (f32/f64) whose operand is a cast of a float value folded into the loads (a prologue),
 * the value's own (f16 bf16 f32 f64); the renderers convert each element as CAST does. */
#define KIR_MM_SUB 3   /* most sub-dims of one split matrix dim */
typedef struct kir_matmul {
    int dtype;                 /* st_dtype of the product (and of A and B, but for a prologue) */
    int nbatch;                /* batch dims */
    int a_buf, b_buf, o_buf;   /* buffer slots */
    int p_m, p_n, p_k;         /* size slots */
    int p_bsize;               /* first of nbatch batch size slots */
    int p_astr, p_bstr;        /* first of nbatch+2 stride slots (batch.., row, col) */
    int p_aoff, p_boff;
    int b_unit;                /* B's column stride is 1 (baked: the inner loop is vectorizable) */
    /* Split matrix dims (an implicit GEMM: the operand is a reshape of a strided view, and a row
     * or column index walks several of its dims, as a convolution's columns do). sub[d] for d =
     * A's rows, A's columns (k), B's rows (k), B's columns: 0 when the dim has one stride (the
     * p_astr/p_bstr slot), else its KIR_MM_SUB >= sub[d] >= 2 sub-dims, outermost first, whose
     * sizes then strides are the 2 * sub[d] slots from p_sub[d] (the stride slot is then 0). */
    int sub[4];
    int p_sub[4];
    int epi;                   /* the instruction list is an epilogue per output element; o_buf
                                * is then -1 (the epilogue stores what the group writes) */
} kir_matmul;

/* The attention template (ST_OP_ATTN): out (B.., Lq, Ev) = softmax(q k^T * scale) v with q (B..,
 * Lq, E), k (B.., Lk, E), v (B.., Lk, Ev), each operand a strided view of its buffer. Every int
 * below is a slot of a->ints (per operand: nbatch batch strides, then row and column strides,
 * then its offset); scale is a slot of a->flts; causal is baked (query i sees keys j <= i). No
 * instruction list: the C kernel calls the library's attention (base/opmath_attn.h), the CUDA
 * kernel is rendered whole (jit/render_cuda.c). */
typedef struct kir_attn {
    int dtype;                       /* ST_F32 or ST_F64: the storage of all four */
    int nbatch;
    int q_buf, k_buf, v_buf, o_buf;  /* buffer slots */
    int m_buf;                       /* the additive mask's (same dtype, (batch.., Lq, Lk)), or -1 */
    int p_lq, p_lk, p_e, p_ev;       /* size slots */
    int p_bsize;                     /* first of nbatch batch size slots */
    int p_str[4];                    /* q, k, v, mask: first of nbatch + 2 stride slots (batch.., row, col) */
    int p_off[4];
    int p_scale;                     /* a->flts slot */
    int causal;
    int dropout;                     /* of the weights: p_drop a flts slot, p_seed and p_roff ints */
    int p_drop, p_seed, p_roff;
} kir_attn;

#define KIR_MAX_BUFS 256   /* buffer slots of one kernel (a horizontal AdamW step: ~7 per parameter) */
#define KIR_MAX_PARTS 64   /* members of one horizontal kernel */

typedef struct kir_kernel {
    kir_kind kind;
    kir_ins *ins;
    int n, cap;
    int nbufs;
    uint8_t buf_dtype[KIR_MAX_BUFS];   /* storage dtype of each buffer slot */
    uint8_t buf_out[KIR_MAX_BUFS];     /* written by the kernel */
    int nints, nflts;
    kir_matmul mm;
    kir_attn at;                       /* KK_ATTN */
    char comment[160];                 /* "out: (B, T, C)"-style shape comment */
    /* A horizontal kernel (nparts >= 2): the concatenation of nparts independent kernels, part p
     * being instructions [part_start[p], part_start[p+1] or n). No part reads a buffer another
     * part writes, so the parts may run in any order or at once. 0: an ordinary kernel. */
    int nparts;
    int part_start[KIR_MAX_PARTS];
    /* donor[o]: 1 + the input slot whose buffer output slot o may take over at launch (0: none;
     * kir_find_donors). The kernel is correct whether or not the two are one buffer. */
    int16_t donor[KIR_MAX_BUFS];
} kir_kernel;

/* ---- the builder: appends instructions with hash-consing (identical pure instructions in an
 * open scope are emitted once) ---- */
typedef struct kir_memo_ent { uint64_t key[4]; int32_t val; int32_t depth; } kir_memo_ent;
typedef struct kir_builder {
    kir_kernel *k;
    kir_memo_ent *memo;        /* open addressing, cap entries, key[0] == 0: empty */
    int memo_cap, memo_n;
    int *undo;                 /* memo slots filled, in order (popped when a scope closes) */
    int nundo, undo_cap;
    int *scope_mark;           /* undo length at each open scope */
    int depth, scope_cap;
    int failed;                /* an allocation failed: the kernel is unusable */
} kir_builder;

ST_INTERNAL st_status kir_builder_init(kir_builder *b, kir_kernel *k, kir_kind kind);
ST_INTERNAL void kir_builder_free(kir_builder *b);   /* frees the memo, not the kernel */
ST_INTERNAL void kir_kernel_free(kir_kernel *k);     /* frees k->ins */

/* Append an instruction; pure ones (every opcode but LOOP/ENDLOOP/IF/ENDIF/STORE/ACC/ACCUPD/
 * ARGUPD/SETERR) are looked up first and an existing id is returned. -1 on OOM. */
ST_INTERNAL int kir_emit(kir_builder *b, kir_opcode op, kir_type t, int sop, int a, int bb, int c,
                         int d, int64_t imm, double fimm);
/* Open / close a scope (loop or if body): memo entries made inside are forgotten at close. */
ST_INTERNAL int kir_loop(kir_builder *b, int count, int work, int parallel); /* returns the index */
ST_INTERNAL void kir_endloop(kir_builder *b);
ST_INTERNAL void kir_if(kir_builder *b, int cond);
ST_INTERNAL void kir_endif(kir_builder *b);
/* Generic memo for lowering-level facts (e.g. "node n at flat index v"): key -> value id. */
ST_INTERNAL int kir_memo_get(kir_builder *b, uint64_t k0, uint64_t k1, uint64_t k2);
ST_INTERNAL void kir_memo_put(kir_builder *b, uint64_t k0, uint64_t k1, uint64_t k2, int val);

/* Appends src to dst as a new part (see nparts): instruction ids are shifted past dst's,
 * parameter slots past dst's nints/nflts, and buffer slot s of src becomes slot_map[s] of dst
 * (slots the caller has already declared in dst). Kinds must agree; matmul kernels cannot be
 * appended. ST_ERR_INTERNAL past KIR_MAX_PARTS parts, ST_ERR_OOM. */
ST_INTERNAL st_status kir_append(kir_kernel *dst, const kir_kernel *src, const int *slot_map);

/* Finds k->donor: for each output slot stored exactly once (one KI_STORE, at index value i, which
 * changes with every iteration of the store's innermost loop), an
 * input slot of its storage dtype that the kernel reads only at that same index value and only
 * before that store (KI_LOAD ids below the store's), that is not a matmul operand, and that no
 * other output takes: an element of the input is dead once the output's element is written, so
 * the launch may give the output the input's buffer when nothing else holds it (fuser/exec.c).
 * Pointwise, reduce and matmul-epilogue kernels without a runtime error check (KI_SETERR) only (the
 * others keep 0). The C renderer does not
 * declare such a pair restrict; only CPU launches share the buffers (CUDA kernels keep theirs). */
ST_INTERNAL void kir_find_donors(kir_kernel *k);

/* Which of a, b, c, d of an instruction are value operands (bits 0..3). */
ST_INTERNAL unsigned kir_operand_mask(const kir_ins *in);

/* Value of integer IR value id given the kernel's int parameters; -1 if id is not an expression of params/consts. */
ST_INTERNAL int64_t kir_eval_int(const kir_kernel *k, int id, const int64_t *ints);

/* Shorthands. */
ST_INTERNAL int kir_iconst(kir_builder *b, kir_type t, int64_t v);
ST_INTERNAL int kir_fconst(kir_builder *b, kir_type t, double v);
ST_INTERNAL int kir_ibin(kir_builder *b, kir_opcode op, int x, int y); /* folds 0/1 operands */

/* The compute type of a dtype. */
static inline kir_type kir_type_of(st_dtype dt) {
    switch (dt) {
    case ST_F64: return KT_F64;
    case ST_I32: return KT_I32;
    case ST_I64: return KT_I64;
    case ST_BOOL: return KT_U8;
    default: return KT_F32;
    }
}
ST_INTERNAL extern const char *const kir_type_cname[KT_COUNT];

#endif
