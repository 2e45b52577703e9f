/*
 * kir.c — building kernel IR: appending instructions with hash-consing and scoped memos.
 *
 * Invariant: a memo entry made inside a scope (loop or if body) is forgotten when that scope
 * closes, so a value defined in one loop body is never reused in another; parameters and literals
 * are scope-free (the renderers hoist them to the top of the kernel), so each semantic parameter
 * gets exactly one slot.
 */
#include "ir/kir.h"

const char *const kir_type_cname[KT_COUNT] = {
    [KT_VOID] = "void", [KT_U8] = "uint8_t", [KT_I32] = "int32_t", [KT_I64] = "int64_t",
    [KT_F32] = "float", [KT_F64] = "double",
};

enum { TAG_EMPTY = 0, TAG_TOMB = 1, TAG_INS = 2, TAG_USER = 3 };

st_status kir_builder_init(kir_builder *b, kir_kernel *k, kir_kind kind) {
    memset(b, 0, sizeof *b);
    memset(k, 0, sizeof *k);
    k->kind = kind;
    b->k = k;
    b->memo_cap = 256;
    b->memo = st_calloc((size_t)b->memo_cap, sizeof *b->memo);
    if (!b->memo) return st_last_status();
    return ST_OK;
}

void kir_builder_free(kir_builder *b) {
    st_free(b->memo);
    st_free(b->undo);
    st_free(b->scope_mark);
    b->memo = NULL;
    b->undo = NULL;
    b->scope_mark = NULL;
}

void kir_kernel_free(kir_kernel *k) {
    st_free(k->ins);
    k->ins = NULL;
    k->n = k->cap = 0;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}
static uint64_t key_hash(const uint64_t key[4]) {
    return mix(key[0] ^ mix(key[1] ^ mix(key[2] ^ mix(key[3]))));
}

/* Returns the slot holding key, or -1. */
static int memo_find(const kir_builder *b, const uint64_t key[4]) {
    uint64_t mask = (uint64_t)b->memo_cap - 1;
    for (uint64_t i = key_hash(key) & mask;; i = (i + 1) & mask) {
        const kir_memo_ent *e = &b->memo[i];
        if ((e->key[0] & 0xff) == TAG_EMPTY) return -1;
        if (!memcmp(e->key, key, sizeof e->key)) return (int)i;
    }
}

static int memo_grow(kir_builder *b) {
    /* Tombstones are dropped; undo entries refer to slots, so remap them by re-finding keys. */
    int ocap = b->memo_cap;
    kir_memo_ent *old = b->memo;
    int ncap = ocap * 2;
    while (b->memo_n * 4 >= ncap) ncap *= 2;
    kir_memo_ent *nm = st_calloc((size_t)ncap, sizeof *nm);
    if (!nm) return -1;
    b->memo = nm;
    b->memo_cap = ncap;
    int live = 0;
    uint64_t mask = (uint64_t)ncap - 1;
    for (int i = 0; i < ocap; i++) {
        uint64_t tag = old[i].key[0] & 0xff;
        if (tag == TAG_EMPTY || tag == TAG_TOMB) continue;
        uint64_t j = key_hash(old[i].key) & mask;
        while ((nm[j].key[0] & 0xff) != TAG_EMPTY) j = (j + 1) & mask;
        nm[j] = old[i];
        live++;
    }
    for (int u = 0; u < b->nundo; u++) b->undo[u] = memo_find(b, old[b->undo[u]].key);
    st_free(old);
    b->memo_n = live;
    return 0;
}

static void memo_insert(kir_builder *b, const uint64_t key[4], int val, int scoped) {
    if (b->failed) return;
    if ((b->memo_n + 1) * 2 > b->memo_cap && memo_grow(b)) {
        b->failed = 1;
        return;
    }
    uint64_t mask = (uint64_t)b->memo_cap - 1;
    uint64_t i = key_hash(key) & mask;
    while ((b->memo[i].key[0] & 0xff) != TAG_EMPTY) i = (i + 1) & mask;
    memcpy(b->memo[i].key, key, sizeof b->memo[i].key);
    b->memo[i].val = val;
    b->memo[i].depth = scoped ? b->depth : 0;
    b->memo_n++;
    if (scoped && b->depth > 0) {
        if (BASE_GROW(b->undo, b->undo_cap, b->nundo + 1, 256) != ST_OK) {
            b->failed = 1;
            return;
        }
        b->undo[b->nundo++] = (int)i;
    }
}

static int push_ins(kir_builder *b, const kir_ins *in) {
    kir_kernel *k = b->k;
    if (b->failed) return -1;
    if (BASE_GROW(k->ins, k->cap, k->n + 1, 128) != ST_OK) {
        b->failed = 1;
        return -1;
    }
    k->ins[k->n] = *in;
    return k->n++;
}

static int is_pure(kir_opcode op) {
    switch (op) {
    case KI_LOOP: case KI_ENDLOOP: case KI_IF: case KI_ENDIF: case KI_STORE: case KI_ACC:
    case KI_ACCUPD: case KI_ARGUPD: case KI_SETERR:
        return 0;
    default:
        return 1;
    }
}
static int is_hoisted(kir_opcode op) {
    return op == KI_IPARAM || op == KI_FPARAM || op == KI_ICONST || op == KI_FCONST;
}

int kir_emit(kir_builder *b, kir_opcode op, kir_type t, int sop, int a, int bb, int c, int d,
             int64_t imm, double fimm) {
    if (b->failed) return -1;
    kir_ins in = {(uint8_t)op, (uint8_t)t, (uint16_t)sop, a, bb, c, d, imm, fimm};
    if (!is_pure(op)) return push_ins(b, &in);
    uint64_t fb;
    memcpy(&fb, &fimm, sizeof fb);
    uint64_t key[4] = {TAG_INS | (uint64_t)op << 8 | (uint64_t)t << 16 | (uint64_t)sop << 24,
                       (uint32_t)a | (uint64_t)(uint32_t)bb << 32,
                       (uint32_t)c | (uint64_t)(uint32_t)d << 32,
                       op == KI_FCONST ? fb : (op == KI_IPARAM || op == KI_FPARAM) ? 0 : (uint64_t)imm};
    int f = memo_find(b, key);
    if (f >= 0) return b->memo[f].val;
    if (op == KI_IPARAM) in.imm = b->k->nints++;
    if (op == KI_FPARAM) in.imm = b->k->nflts++;
    int id = push_ins(b, &in);
    if (id >= 0) memo_insert(b, key, id, !is_hoisted(op));
    return id;
}

static void scope_open(kir_builder *b) {
    if (BASE_GROW(b->scope_mark, b->scope_cap, b->depth + 1, 16) != ST_OK) {
        b->failed = 1;
        return;
    }
    b->scope_mark[b->depth++] = b->nundo;
}
static void scope_close(kir_builder *b) {
    if (b->depth == 0) return;
    int mark = b->scope_mark[--b->depth];
    while (b->nundo > mark) {
        int s = b->undo[--b->nundo];
        if (s >= 0) b->memo[s].key[0] = TAG_TOMB;
    }
}

int kir_loop(kir_builder *b, int count, int work, int parallel) {
    int id = kir_emit(b, KI_LOOP, KT_I64, 0, count, work, -1, -1, parallel, 0);
    scope_open(b);
    return id;
}
void kir_endloop(kir_builder *b) {
    scope_close(b);
    kir_emit(b, KI_ENDLOOP, KT_VOID, 0, -1, -1, -1, -1, 0, 0);
}
void kir_if(kir_builder *b, int cond) {
    kir_emit(b, KI_IF, KT_VOID, 0, cond, -1, -1, -1, 0, 0);
    scope_open(b);
}
void kir_endif(kir_builder *b) {
    scope_close(b);
    kir_emit(b, KI_ENDIF, KT_VOID, 0, -1, -1, -1, -1, 0, 0);
}

int kir_memo_get(kir_builder *b, uint64_t k0, uint64_t k1, uint64_t k2) {
    uint64_t key[4] = {TAG_USER, k0, k1, k2};
    int f = memo_find(b, key);
    return f >= 0 ? b->memo[f].val : -1;
}
void kir_memo_put(kir_builder *b, uint64_t k0, uint64_t k1, uint64_t k2, int val) {
    uint64_t key[4] = {TAG_USER, k0, k1, k2};
    memo_insert(b, key, val, 1);
}

int kir_iconst(kir_builder *b, kir_type t, int64_t v) {
    return kir_emit(b, KI_ICONST, t, 0, -1, -1, -1, -1, v, 0);
}
int kir_fconst(kir_builder *b, kir_type t, double v) {
    return kir_emit(b, KI_FCONST, t, 0, -1, -1, -1, -1, 0, v);
}

static int is_iconst(const kir_builder *b, int x, int64_t v) {
    return x >= 0 && b->k->ins[x].op == KI_ICONST && b->k->ins[x].imm == v;
}

int kir_ibin(kir_builder *b, kir_opcode op, int x, int y) {
    if (x < 0 || y < 0) return -1;
    switch (op) {
    case KI_IADD:
        if (is_iconst(b, x, 0)) return y;
        if (is_iconst(b, y, 0)) return x;
        break;
    case KI_ISUB:
        if (is_iconst(b, y, 0)) return x;
        break;
    case KI_IMUL:
        if (is_iconst(b, x, 0) || is_iconst(b, y, 0)) return kir_iconst(b, KT_I64, 0);
        if (is_iconst(b, x, 1)) return y;
        if (is_iconst(b, y, 1)) return x;
        break;
    case KI_IDIV:
        if (is_iconst(b, y, 1)) return x;
        break;
    case KI_IMOD:
        if (is_iconst(b, y, 1)) return kir_iconst(b, KT_I64, 0);
        break;
    default:
        break;
    }
    kir_type t = (op == KI_ILT || op == KI_ILE || op == KI_LAND) ? KT_U8 : KT_I64;
    return kir_emit(b, op, t, 0, x, y, -1, -1, 0, 0);
}

st_status kir_append(kir_kernel *dst, const kir_kernel *src, const int *slot_map) {
    /* a pointwise part may join a reduce kernel (a CPU horizontal batch, fuser/horizontal.c) */
    if ((dst->kind != src->kind && !(dst->kind == KK_REDUCE && src->kind == KK_POINTWISE)) || src->kind == KK_MATMUL ||
        src->kind == KK_ATTN)
        return st_error(ST_ERR_INTERNAL, "kir_append: kernel kinds %d and %d cannot be concatenated", dst->kind,
                        src->kind);
    if (dst->nparts >= KIR_MAX_PARTS)
        return st_error(ST_ERR_INTERNAL, "kir_append: more than %d parts in one kernel", KIR_MAX_PARTS);
    int base = dst->n;
    if (BASE_GROW(dst->ins, dst->cap, dst->n + src->n, 128) != ST_OK) return st_last_status();
    for (int i = 0; i < src->n; i++) {
        kir_ins in = src->ins[i];
        unsigned m = kir_operand_mask(&in);
        int32_t *ops[4] = {&in.a, &in.b, &in.c, &in.d};
        for (int j = 0; j < 4; j++)
            if ((m >> j & 1) && *ops[j] >= 0) *ops[j] += base;
        if (in.op == KI_LOAD || in.op == KI_STORE) in.a = slot_map[in.a];
        if (in.op == KI_IPARAM) in.imm += dst->nints;
        if (in.op == KI_FPARAM) in.imm += dst->nflts;
        dst->ins[dst->n++] = in;
    }
    dst->part_start[dst->nparts++] = base;
    dst->nints += src->nints;
    dst->nflts += src->nflts;
    return ST_OK;
}

/* Which of a, b, c, d are value operands (bits 0..3). */
/* Inputs (bits: slot) that value id depends on, through its operands and accumulator updates. */
typedef struct kir_slots { uint64_t w[KIR_MAX_BUFS / 64]; } kir_slots;

/* Whether value id varies with loop variable v (the KI_LOOP's id), through its operands; memo[i]
 * (zeroed for each v): 1 no, 2 yes. */
static bool varies_with(const kir_kernel *k, int id, int v, uint8_t *memo) {
    if (id == v) return true;
    if (id < v) return false;   /* defined before the loop: invariant in it */
    if (memo[id]) return memo[id] == 2;
    const kir_ins *in = &k->ins[id];
    const unsigned m = kir_operand_mask(in);
    const int ops[4] = {in->a, in->b, in->c, in->d};
    bool yes = false;
    for (int q = 0; q < 4 && !yes; q++)
        yes = (m >> q & 1u) && ops[q] >= 0 && ops[q] < id && varies_with(k, ops[q], v, memo);
    memo[id] = yes ? 2 : 1;
    return yes;
}

void kir_find_donors(kir_kernel *k) {
    memset(k->donor, 0, sizeof k->donor);
    if (!(k->kind == KK_POINTWISE || k->kind == KK_REDUCE || (k->kind == KK_MATMUL && k->mm.epi))) return;
    /* per slot: its one store (instruction, innermost loop); its loads' one index value (-2: more
     * than one) and the last of them */
    int store_at[KIR_MAX_BUFS], store_loop[KIR_MAX_BUFS], nstore[KIR_MAX_BUFS], nload[KIR_MAX_BUFS],
        load_idx[KIR_MAX_BUFS], last_load[KIR_MAX_BUFS], loops[64], depth = 0;
    uint8_t taken[KIR_MAX_BUFS];
    for (int s = 0; s < k->nbufs; s++) store_at[s] = last_load[s] = -1, nstore[s] = nload[s] = 0, taken[s] = 0;
    for (int i = 0; i < k->n; i++) {
        const kir_ins *in = &k->ins[i];
        if (in->op == KI_LOOP) {
            if (depth == 64) return;
            loops[depth++] = i;
        } else if (in->op == KI_ENDLOOP) {
            depth--;
        } else if (in->op == KI_STORE) {
            nstore[in->a]++, store_at[in->a] = i, store_loop[in->a] = depth ? loops[depth - 1] : -1;
        } else if (in->op == KI_LOAD) {
            load_idx[in->a] = !nload[in->a]++ || load_idx[in->a] == in->b ? in->b : -2;
            last_load[in->a] = i;
        } else if (in->op == KI_SETERR) {
            return;   /* a kernel that can fail half way writes no input's buffer */
        }
    }
    if (k->kind == KK_MATMUL) {   /* the GEMM reads its operands anywhere */
        if (k->mm.a_buf >= 0) taken[k->mm.a_buf] = 1;
        if (k->mm.b_buf >= 0) taken[k->mm.b_buf] = 1;
    }
    int nout = 0, outs[KIR_MAX_BUFS];
    uint8_t *memo = st_malloc((size_t)k->n + 1);
    if (!memo) { st_clear_error(); return; }   /* no donors: only a missed saving */
    /* an output stored once, at an index that changes with every iteration of the store's loop
     * (else a later iteration would read an element its input has lost) */
    for (int o = 0; o < k->nbufs; o++) {
        if (!k->buf_out[o] || nstore[o] != 1 || nload[o]) continue;
        if (store_loop[o] >= 0) memset(memo, 0, (size_t)k->n);
        if (store_loop[o] < 0 || varies_with(k, k->ins[store_at[o]].b, store_loop[o], memo)) outs[nout++] = o;
    }
    st_free(memo);
    if (!nout) return;
    bool cand[KIR_MAX_BUFS];   /* inputs not yet given to an output */
    for (int s = 0; s < k->nbufs; s++) cand[s] = !k->buf_out[s] && !taken[s] && nload[s] > 0;
    kir_slots *dep = st_calloc((size_t)k->n, sizeof *dep);
    if (!dep) { st_clear_error(); return; }   /* no donors: only a missed saving */
    for (int i = 0; i < k->n; i++) {
        const kir_ins *in = &k->ins[i];
        unsigned m = kir_operand_mask(in);
        const int ops[4] = {in->a, in->b, in->c, in->d};
        for (int q = 0; q < 4; q++)
            if ((m >> q & 1u) && ops[q] >= 0 && ops[q] < i)
                for (int w = 0; w < KIR_MAX_BUFS / 64; w++) dep[i].w[w] |= dep[ops[q]].w[w];
        if (in->op == KI_LOAD) dep[i].w[in->a / 64] |= 1ull << (in->a % 64);
        if ((in->op == KI_ACCUPD || in->op == KI_ARGUPD) && in->a >= 0 && in->a < i)
            for (int w = 0; w < KIR_MAX_BUFS / 64; w++) dep[in->a].w[w] |= dep[i].w[w];
    }
    /* Each output takes one input, preferring one its value depends on and, among those, the one
     * fewest outputs depend on (an optimizer's m' takes m, v' v, p' p, and a value computed from
     * all of them what is left); outputs with fewer inputs choose first, then those computed
     * earlier (p' before a value of p'). */
    int64_t ndep[KIR_MAX_BUFS];
    int users[KIR_MAX_BUFS] = {0};
    for (int a = 0; a < nout; a++) {
        const kir_slots *d = &dep[store_at[outs[a]]];
        ndep[a] = 0;
        for (int s = 0; s < k->nbufs; s++)
            if (d->w[s / 64] >> (s % 64) & 1u) ndep[a]++, users[s]++;
    }
    for (int a = 0; a < nout; a++) ndep[a] = ndep[a] * k->n + k->ins[store_at[outs[a]]].c;   /* then the earlier value */
    for (int a = 1; a < nout; a++)
        for (int b = a; b > 0 && ndep[b] < ndep[b - 1]; b--) {
            int64_t t = ndep[b]; ndep[b] = ndep[b - 1]; ndep[b - 1] = t;
            int u = outs[b]; outs[b] = outs[b - 1]; outs[b - 1] = u;
        }
    for (int a = 0; a < nout; a++) {
        const int o = outs[a], st = store_at[o], idx = k->ins[st].b;
        const kir_slots *d = &dep[st];
        int best = -1, best_key = 0;
        for (int s = 0; s < k->nbufs; s++) {
            /* an input read only at the output's store index, and only before the store */
            if (!cand[s] || k->buf_dtype[s] != k->buf_dtype[o] || load_idx[s] != idx || last_load[s] > st) continue;
            const int key = ((d->w[s / 64] >> (s % 64) & 1u) ? 0 : 1 << 16) + users[s];
            if (best < 0 || key < best_key) best = s, best_key = key;
        }
        if (best >= 0) k->donor[o] = (int16_t)(best + 1), cand[best] = false;
    }
    st_free(dep);
}

unsigned kir_operand_mask(const kir_ins *in) {
    switch ((kir_opcode)in->op) {
    case KI_IPARAM: case KI_FPARAM: case KI_ICONST: case KI_FCONST: case KI_ENDLOOP: case KI_ENDIF:
    case KI_MMACC: case KI_MMIDX:
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

/* ---- evaluating integer IR on the host ---- */
static int64_t eval_rec(const kir_kernel *k, int id, const int64_t *ints, int depth) {
    if (id < 0 || id >= k->n || depth > 64) return -1;
    const kir_ins *in = &k->ins[id];
    if (in->op == KI_IPARAM) return in->imm >= 0 && in->imm < k->nints ? ints[in->imm] : -1;
    if (in->op == KI_ICONST) return in->imm;
    if (in->op < KI_IADD || in->op > KI_IMOD) return -1;
    int64_t x = eval_rec(k, in->a, ints, depth + 1), y = eval_rec(k, in->b, ints, depth + 1);
    if (x < 0 || y < 0) return -1;   /* sizes and counts are never negative */
    switch ((kir_opcode)in->op) {
    case KI_IADD: return (int64_t)((uint64_t)x + (uint64_t)y);
    case KI_ISUB: return x - y;
    case KI_IMUL: return (int64_t)((uint64_t)x * (uint64_t)y);
    case KI_IDIV: return y ? x / y : -1;
    default: return y ? x % y : -1;
    }
}

int64_t kir_eval_int(const kir_kernel *k, int id, const int64_t *ints) { return eval_rec(k, id, ints, 0); }
