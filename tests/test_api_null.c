/*
 * test_api_null.c — every exported function of libstitch.so called with NULL for each pointer
 * argument (and with bad enum values where it takes a dtype): each call returns the error its kind
 * of function promises in include/stitch.h ("NULL arguments") and sets st_last_error, never crashes.
 *
 * Coverage is checked against the library itself: every symbol that `nm -D` lists as defined in
 * the libstitch.so next to this program (BUILD/libstitch.so) must have a case here or an entry in
 * the no_pointer list, so a new function cannot be forgotten. Each case runs in a forked child,
 * so a crash names its function and the others still run; then every case runs again in this
 * process (the runtime stays usable after all those errors; under the sanitizers: no leak).
 */
#include "test.h"

#include <libgen.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static st_tensor *T;   /* (2, 3) f32 */
static st_tensor *I;   /* (2, 3) i64 zeros: a valid index for T */
static st_tensor *S;   /* 0-d f32 */
static char dir[64];

/* A failing call: st_last_status() is not ST_OK and st_last_error() is not empty. */
static int failed_with_message(void) { return st_last_status() != ST_OK && st_last_error()[0] != '\0'; }

/* call returns a tensor (or another pointer): expect NULL with an error set. */
#define EXPECT_NULL(call)                                                                      \
    do {                                                                                       \
        st_clear_error();                                                                      \
        void *p_ = (void *)(call);                                                             \
        if (p_ || !failed_with_message())                                                      \
            TEST_FAILF("%s:%d: %s returned %s, error \"%s\"", __FILE__, __LINE__, #call,       \
                       p_ ? "non-NULL" : "NULL", st_last_error());                             \
    } while (0)
#define EXPECT_NULL_T(call)                                                                    \
    do {                                                                                       \
        st_clear_error();                                                                      \
        st_tensor *t_ = (call);                                                                \
        if (t_ || !failed_with_message())                                                      \
            TEST_FAILF("%s:%d: %s returned %s, error \"%s\"", __FILE__, __LINE__, #call,       \
                       t_ ? "a tensor" : "NULL", st_last_error());                             \
        st_release(t_);                                                                        \
    } while (0)
/* call returns st_status: expect an error status that st_last_status() repeats. */
#define EXPECT_ERR(call)                                                                       \
    do {                                                                                       \
        st_clear_error();                                                                      \
        st_status s_ = (call);                                                                 \
        if (s_ == ST_OK || s_ != st_last_status() || !st_last_error()[0])                      \
            TEST_FAILF("%s:%d: %s returned %d, error \"%s\"", __FILE__, __LINE__, #call,       \
                       (int)s_, st_last_error());                                              \
    } while (0)
/* call returns a plain value: expect the documented value v and an error set. */
#define EXPECT_VAL(call, v)                                                                    \
    do {                                                                                       \
        st_clear_error();                                                                      \
        long long r_ = (long long)(call);                                                      \
        if (r_ != (long long)(v) || !failed_with_message())                                    \
            TEST_FAILF("%s:%d: %s returned %lld (expected %lld), error \"%s\"", __FILE__,      \
                       __LINE__, #call, r_, (long long)(v), st_last_error());                  \
    } while (0)
/* call returns nothing: expect an error set. */
#define EXPECT_VOID_ERR(call)                                                                  \
    do {                                                                                       \
        st_clear_error();                                                                      \
        call;                                                                                  \
        if (!failed_with_message())                                                            \
            TEST_FAILF("%s:%d: %s set no error", __FILE__, __LINE__, #call);                   \
    } while (0)

#define SH2 ((const int64_t[]){2, 3})
#define BAD_DT ((st_dtype)99)

/* ---- errors, handles, dtypes ---- */
TEST(st_retain) {
    CHECK(st_retain(NULL) == NULL); /* like st_release(NULL): nothing to do, not an error */
}
TEST(st_release) { st_release(NULL); }
TEST(st_dtype_name) {
    CHECK(strcmp(st_dtype_name(BAD_DT), "?") == 0);
    CHECK(strcmp(st_dtype_name((st_dtype)-1), "?") == 0);
}
TEST(st_dtype_from_name) { EXPECT_VAL(st_dtype_from_name(NULL), -1); }
TEST(st_dtype_size) { CHECK(st_dtype_size(BAD_DT) == 0 && st_dtype_size((st_dtype)-1) == 0); }
TEST(st_promote_types) {
    EXPECT_VAL(st_promote_types(BAD_DT, ST_F32), ST_DTYPE_COUNT);
    EXPECT_VAL(st_promote_types(ST_F32, (st_dtype)-1), ST_DTYPE_COUNT);
}

/* ---- inspection ---- */
TEST(st_ndim) { EXPECT_VAL(st_ndim(NULL), -1); }
TEST(st_size) { EXPECT_VAL(st_size(NULL, 0), -1); }
TEST(st_shape) {
    int64_t out[ST_MAX_DIMS] = {7, 7};
    EXPECT_VOID_ERR(st_shape(NULL, out));
    CHECK(out[0] == 0 && out[1] == 0); /* zeroed: a caller that ignores the error reads ndim 0 */
    EXPECT_VOID_ERR(st_shape(T, NULL));
}
TEST(st_numel) { EXPECT_VAL(st_numel(NULL), -1); }
TEST(st_dtype_of) { EXPECT_VAL(st_dtype_of(NULL), ST_DTYPE_COUNT); }
TEST(st_device_of) { EXPECT_NULL(st_device_of(NULL)); }
TEST(st_is_contiguous) { EXPECT_VAL(st_is_contiguous(NULL), 0); }
TEST(st_is_realized) { EXPECT_VAL(st_is_realized(NULL), 0); }
TEST(st_shape_str) {
    char buf[32];
    EXPECT_NULL(st_shape_str(2, NULL, buf, sizeof buf));
    EXPECT_NULL(st_shape_str(2, SH2, NULL, sizeof buf));
    EXPECT_NULL(st_shape_str(2, SH2, buf, 0));
    EXPECT_NULL(st_shape_str(-1, SH2, buf, sizeof buf));
    CHECK(st_shape_str(0, NULL, buf, sizeof buf) == buf && strcmp(buf, "()") == 0);
    CHECK(st_shape_str(2, SH2, buf, 4) == buf && strlen(buf) == 3); /* cut, terminated */
}

/* ---- creation ---- */
TEST(st_scalar) { EXPECT_NULL_T(st_scalar(1, BAD_DT)); }
#define CREATE_CASE(fn)                                                                        \
    TEST(fn) {                                                                                 \
        EXPECT_NULL_T(fn(ST_F32, 2, NULL));                                                    \
        EXPECT_NULL_T(fn(BAD_DT, 2, SH2));                                                     \
    }
CREATE_CASE(st_zeros)
CREATE_CASE(st_ones)
CREATE_CASE(st_empty)
CREATE_CASE(st_rand)
CREATE_CASE(st_randn)
TEST(st_randint) {
    EXPECT_NULL_T(st_randint(0, 5, ST_I64, 2, NULL));
    EXPECT_NULL_T(st_randint(0, 5, BAD_DT, 2, SH2));
}
TEST(st_full) {
    EXPECT_NULL_T(st_full(ST_F32, 2, NULL, 1));
    EXPECT_NULL_T(st_full(BAD_DT, 2, SH2, 1));
}
TEST(st_arange) { EXPECT_NULL_T(st_arange(0, 3, 1, BAD_DT)); }
TEST(st_linspace) { EXPECT_NULL_T(st_linspace(0, 3, 4, BAD_DT)); }
TEST(st_eye) { EXPECT_NULL_T(st_eye(2, 2, BAD_DT)); }
TEST(st_from_data) {
    float d[6] = {0};
    EXPECT_NULL_T(st_from_data(ST_F32, 2, NULL, d));
    EXPECT_NULL_T(st_from_data(ST_F32, 2, SH2, NULL));
    EXPECT_NULL_T(st_from_data(BAD_DT, 2, SH2, d));
}

/* ---- elementwise ---- */
#define UNARY_CASE(name) TEST(st_##name) { EXPECT_NULL_T(st_##name(NULL)); }
#define BINARY_CASE(name)                                                                      \
    TEST(st_##name) {                                                                          \
        EXPECT_NULL_T(st_##name(NULL, T));                                                     \
        EXPECT_NULL_T(st_##name(T, NULL));                                                     \
        EXPECT_NULL_T(st_##name(NULL, NULL));                                                  \
    }
ST_UNARY_API(UNARY_CASE)
ST_BINARY_API(BINARY_CASE)
#define SCALAR_CASE(fn) TEST(fn) { EXPECT_NULL_T(fn(NULL, 2)); }
SCALAR_CASE(st_add_s)
SCALAR_CASE(st_mul_s)
SCALAR_CASE(st_sub_s)
SCALAR_CASE(st_rsub_s)
SCALAR_CASE(st_div_s)
SCALAR_CASE(st_rdiv_s)
SCALAR_CASE(st_pow_s)
TEST(st_where) {
    EXPECT_NULL_T(st_where(NULL, T, T));
    EXPECT_NULL_T(st_where(T, NULL, T));
    EXPECT_NULL_T(st_where(T, T, NULL));
}
TEST(st_clamp) { EXPECT_NULL_T(st_clamp(NULL, 0, 1)); }
TEST(st_cast) {
    EXPECT_NULL_T(st_cast(NULL, ST_F32));
    EXPECT_NULL_T(st_cast(T, BAD_DT));
}

/* ---- reductions ---- */
#define REDUCE_CASE(fn)                                                                        \
    TEST(fn) {                                                                                 \
        int ax = 0;                                                                            \
        EXPECT_NULL_T(fn(NULL, 0, NULL, 0));                                                   \
        EXPECT_NULL_T(fn(NULL, 1, &ax, 0));                                                    \
        EXPECT_NULL_T(fn(T, 1, NULL, 0));                                                      \
    }
REDUCE_CASE(st_sum)
REDUCE_CASE(st_mean)
REDUCE_CASE(st_prod)
REDUCE_CASE(st_max)
REDUCE_CASE(st_min)
REDUCE_CASE(st_logsumexp)
#define VAR_CASE(fn)                                                                           \
    TEST(fn) {                                                                                 \
        EXPECT_NULL_T(fn(NULL, 0, NULL, 1, 0));                                                \
        EXPECT_NULL_T(fn(T, 1, NULL, 1, 0));                                                   \
    }
VAR_CASE(st_var)
VAR_CASE(st_std)
TEST(st_argmax) { EXPECT_NULL_T(st_argmax(NULL, 0, 0)); }
TEST(st_argmin) { EXPECT_NULL_T(st_argmin(NULL, 0, 0)); }
TEST(st_softmax) { EXPECT_NULL_T(st_softmax(NULL, 0)); }
TEST(st_log_softmax) { EXPECT_NULL_T(st_log_softmax(NULL, 0)); }

/* ---- linear algebra ---- */
TEST(st_matmul) {
    EXPECT_NULL_T(st_matmul(NULL, T));
    EXPECT_NULL_T(st_matmul(T, NULL));
}
TEST(st_attention) {
    EXPECT_NULL_T(st_attention(NULL, T, T, NULL, NAN, 0, 0));
    EXPECT_NULL_T(st_attention(T, NULL, T, T, 1.0, 1, 0.5));
    EXPECT_NULL_T(st_attention(T, T, NULL, NULL, NAN, 0, 0));
}
TEST(st_einsum) {
    st_tensor *ops[2] = {T, NULL};
    EXPECT_NULL_T(st_einsum(NULL, 1, ops));
    EXPECT_NULL_T(st_einsum("ij->ji", 1, NULL));
    EXPECT_NULL_T(st_einsum("ij,jk->ik", 2, ops));
}

/* ---- views ---- */
#define SHAPE_VIEW_CASE(fn)                                                                    \
    TEST(fn) {                                                                                 \
        EXPECT_NULL_T(fn(NULL, 2, SH2));                                                       \
        EXPECT_NULL_T(fn(T, 2, NULL));                                                         \
    }
SHAPE_VIEW_CASE(st_reshape)
SHAPE_VIEW_CASE(st_view)
SHAPE_VIEW_CASE(st_expand)
SHAPE_VIEW_CASE(st_broadcast_to)
TEST(st_permute) {
    int perm[2] = {1, 0};
    EXPECT_NULL_T(st_permute(NULL, perm));
    EXPECT_NULL_T(st_permute(T, NULL));
}
TEST(st_transpose) { EXPECT_NULL_T(st_transpose(NULL, 0, 1)); }
TEST(st_slice) { EXPECT_NULL_T(st_slice(NULL, 0, 0, 1, 1)); }
TEST(st_select) { EXPECT_NULL_T(st_select(NULL, 0, 0)); }
TEST(st_squeeze) { EXPECT_NULL_T(st_squeeze(NULL, ST_ALL_DIMS)); }
TEST(st_unsqueeze) { EXPECT_NULL_T(st_unsqueeze(NULL, 0)); }
TEST(st_flatten) { EXPECT_NULL_T(st_flatten(NULL, 0, -1)); }
TEST(st_contiguous) { EXPECT_NULL_T(st_contiguous(NULL)); }
TEST(st_as_strided) {
    const int64_t str[2] = {3, 1};
    EXPECT_NULL_T(st_as_strided(NULL, 2, SH2, str, 0));
    EXPECT_NULL_T(st_as_strided(T, 2, NULL, str, 0));
    EXPECT_NULL_T(st_as_strided(T, 2, SH2, NULL, 0));
}
TEST(st_zero_pad) {
    const int64_t pads[2] = {1, 0};
    EXPECT_NULL_T(st_zero_pad(NULL, pads, pads));
    EXPECT_NULL_T(st_zero_pad(T, NULL, pads));
    EXPECT_NULL_T(st_zero_pad(T, pads, NULL));
}
TEST(st_clone) { EXPECT_NULL_T(st_clone(NULL)); }
TEST(st_store_hint) { EXPECT_NULL_T(st_store_hint(NULL)); }

/* ---- joining, indexing ---- */
#define JOIN_CASE(fn)                                                                          \
    TEST(fn) {                                                                                 \
        st_tensor *ts[2] = {T, NULL};                                                          \
        EXPECT_NULL_T(fn(2, NULL, 0));                                                         \
        EXPECT_NULL_T(fn(2, ts, 0));                                                           \
    }
JOIN_CASE(st_cat)
JOIN_CASE(st_stack)
TEST(st_gather) {
    EXPECT_NULL_T(st_gather(NULL, 0, I));
    EXPECT_NULL_T(st_gather(T, 0, NULL));
}
TEST(st_index_select) {
    EXPECT_NULL_T(st_index_select(NULL, 0, I));
    EXPECT_NULL_T(st_index_select(T, 0, NULL));
}
#define SCATTER_CASE(fn)                                                                       \
    TEST(fn) {                                                                                 \
        EXPECT_NULL_T(fn(NULL, 0, I, T));                                                      \
        EXPECT_NULL_T(fn(T, 0, NULL, T));                                                      \
        EXPECT_NULL_T(fn(T, 0, I, NULL));                                                      \
    }
SCATTER_CASE(st_scatter_add)
SCATTER_CASE(st_index_add)
TEST(st_one_hot) { EXPECT_NULL_T(st_one_hot(NULL, 3)); }

/* ---- in-place ---- */
#define INPLACE_CASE(fn)                                                                       \
    TEST(fn) {                                                                                 \
        EXPECT_ERR(fn(NULL, T));                                                               \
        EXPECT_ERR(fn(T, NULL));                                                               \
    }
INPLACE_CASE(st_add_)
INPLACE_CASE(st_sub_)
INPLACE_CASE(st_mul_)
INPLACE_CASE(st_div_)
INPLACE_CASE(st_copy_)
TEST(st_fill_) { EXPECT_ERR(st_fill_(NULL, 1)); }
TEST(st_zero_) { EXPECT_ERR(st_zero_(NULL)); }

/* ---- sync points ---- */
TEST(st_realize) {
    st_tensor *ts[2] = {T, NULL};
    EXPECT_ERR(st_realize(2, NULL));
    EXPECT_ERR(st_realize(-1, ts));
    st_clear_error();   /* a NULL entry is skipped (documented): T is realized, no error */
    CHECK(st_realize(2, ts) == ST_OK && st_last_status() == ST_OK);
}
TEST(st_graph) {
    char p[128];
    snprintf(p, sizeof p, "%s/g.dot", dir);
    st_tensor *ts[2] = {T, NULL};
    EXPECT_ERR(st_graph(NULL, 1, ts));
    EXPECT_ERR(st_graph(p, 2, NULL));
    CHECK(st_graph(p, 2, ts) == ST_OK);   /* NULL entries are skipped, as by st_realize */
}
TEST(st_to_host) {
    float d[6];
    EXPECT_ERR(st_to_host(NULL, ST_F32, d, sizeof d));
    EXPECT_ERR(st_to_host(T, ST_F32, NULL, sizeof d));
}
TEST(st_item) {
    double d;
    EXPECT_ERR(st_item(NULL, &d));
    EXPECT_ERR(st_item(S, NULL));
}
TEST(st_item_i64) {
    int64_t d;
    EXPECT_ERR(st_item_i64(NULL, &d));
    EXPECT_ERR(st_item_i64(S, NULL));
}

/* ---- autograd ---- */
TEST(st_set_requires_grad) { EXPECT_ERR(st_set_requires_grad(NULL, 1)); }
TEST(st_requires_grad) { EXPECT_VAL(st_requires_grad(NULL), 0); }
TEST(st_is_leaf) { EXPECT_VAL(st_is_leaf(NULL), 0); }
TEST(st_grad) { EXPECT_NULL_T(st_grad(NULL)); }
TEST(st_set_grad) { EXPECT_ERR(st_set_grad(NULL, T)); }
TEST(st_backward) { EXPECT_ERR(st_backward(NULL, NULL)); }
TEST(st_detach) { EXPECT_NULL_T(st_detach(NULL)); }
TEST(st_retain_grad) { EXPECT_ERR(st_retain_grad(NULL)); }
static int ud_freed;
static void count_free(void *ud) { (void)ud; ud_freed++; }
static st_status no_backward(void *ud, int nout, st_tensor *const *go, int nin, st_tensor **gi) {
    (void)ud, (void)nout, (void)go, (void)nin, (void)gi;
    return ST_OK;
}
TEST(st_function_apply) {
    st_tensor *in[1] = {T}, *out[1] = {T}, *res[1], *none[1] = {NULL};
    ud_freed = 0;
    EXPECT_ERR(st_function_apply("f", 1, in, 1, out, res, NULL, NULL, count_free));
    EXPECT_ERR(st_function_apply("f", 1, NULL, 1, out, res, no_backward, NULL, count_free));
    EXPECT_ERR(st_function_apply("f", 1, in, 1, NULL, res, no_backward, NULL, count_free));
    EXPECT_ERR(st_function_apply("f", 1, in, 1, out, NULL, no_backward, NULL, count_free));
    EXPECT_ERR(st_function_apply("f", 1, none, 1, out, res, no_backward, NULL, count_free));
    EXPECT_ERR(st_function_apply("f", 1, in, 1, none, res, no_backward, NULL, count_free));
    if (ud_freed != 6) TEST_FAILF("free_ud ran %d times for 6 failed calls", ud_freed);
}
TEST(st_get_rng_state) { st_get_rng_state(NULL, NULL); }

/* ---- files ---- */
TEST(st_save) {
    char p[128];
    snprintf(p, sizeof p, "%s/a.safetensors", dir);
    const char *names[1] = {"a"}, *nonames[1] = {NULL};
    st_tensor *ts[1] = {T}, *nots[1] = {NULL};
    EXPECT_ERR(st_save(NULL, 1, names, ts));
    EXPECT_ERR(st_save(p, 1, NULL, ts));
    EXPECT_ERR(st_save(p, 1, names, NULL));
    EXPECT_ERR(st_save(p, 1, nonames, ts));
    EXPECT_ERR(st_save(p, 1, names, nots));
}
TEST(st_save_meta) {
    char p[128];
    snprintf(p, sizeof p, "%s/a.safetensors", dir);
    const char *names[1] = {"a"}, *keys[1] = {"k"}, *values[1] = {"v"}, *none[1] = {NULL};
    st_tensor *ts[1] = {T};
    EXPECT_ERR(st_save_meta(NULL, 1, names, ts, 1, keys, values));
    EXPECT_ERR(st_save_meta(p, 1, names, ts, 1, NULL, values));
    EXPECT_ERR(st_save_meta(p, 1, names, ts, 1, keys, NULL));
    EXPECT_ERR(st_save_meta(p, 1, names, ts, 1, none, values));
    EXPECT_ERR(st_save_meta(p, 1, names, ts, 1, keys, none));
}
TEST(st_load) {
    char p[128];
    snprintf(p, sizeof p, "%s/missing.safetensors", dir);
    int n;
    char **names;
    st_tensor **ts;
    EXPECT_ERR(st_load(NULL, &n, &names, &ts));
    EXPECT_ERR(st_load(p, NULL, &names, &ts));
    EXPECT_ERR(st_load(p, &n, NULL, &ts));
    EXPECT_ERR(st_load(p, &n, &names, NULL));
}
TEST(st_load_meta) {
    char p[128];
    snprintf(p, sizeof p, "%s/missing.safetensors", dir);
    int n, nm;
    char **names, **keys, **values;
    st_tensor **ts;
    EXPECT_ERR(st_load_meta(NULL, &n, &names, &ts, &nm, &keys, &values));
    EXPECT_ERR(st_load_meta(p, NULL, &names, &ts, &nm, &keys, &values));
    EXPECT_ERR(st_load_meta(p, &n, NULL, &ts, &nm, &keys, &values));
    EXPECT_ERR(st_load_meta(p, &n, &names, NULL, &nm, &keys, &values));
    EXPECT_ERR(st_load_meta(p, &n, &names, &ts, NULL, &keys, &values));
    EXPECT_ERR(st_load_meta(p, &n, &names, &ts, &nm, NULL, &values));
}
TEST(st_free_loaded) {
    st_free_loaded(2, NULL, NULL); /* nothing to free: fine */
}
TEST(st_free_meta) { st_free_meta(2, NULL, NULL); }
TEST(st_read_idx) { EXPECT_NULL_T(st_read_idx(NULL)); }

/* ---- devices, runtime control ---- */
TEST(st_to) {
    EXPECT_NULL_T(st_to(NULL, "cpu"));
    EXPECT_NULL_T(st_to(T, NULL));
}
TEST(st_set_default_device) { EXPECT_ERR(st_set_default_device(NULL)); }
TEST(st_stats) { EXPECT_VOID_ERR(st_stats(NULL)); }
TEST(st_set_oom_handler) { st_set_oom_handler(NULL, NULL); /* NULL: no handler */ }
TEST(st_set_alloc_observer) { st_set_alloc_observer(NULL, NULL); /* NULL: no observer */ }

/* Exported functions that take no pointer (nothing to pass NULL for) or only enums tested above. */
static const char *const no_pointer[] = {
    "st_last_error", "st_last_error_base", "st_last_status", "st_clear_error", "st_weak_scalar_f", "st_weak_scalar_i",
    "st_manual_seed", "st_set_rng_state", "st_autocast_push", "st_autocast_pop", "st_autocast_dtype", "st_sync", "st_synchronize", "st_grad_mode_push", "st_grad_mode_pop", "st_grad_enabled",
    "st_default_device", "st_cuda_device_count", "st_empty_cache", "st_cuda_allow_tf32",
    "st_reset_stats", "st_set_eager", "st_get_eager", "st_set_jit_min", "st_set_poison",
    "st_interrupt", "st_clear_interrupt", "st_set_debug", "st_debug_fail_alloc", "st_shutdown",
};

typedef struct {
    const char *name;
    void (*fn)(void);
} api_case;

#define CASE(fn) {#fn, test_##fn},
#define UNARY_ENTRY(name) {"st_" #name, test_st_##name},
static const api_case cases[] = {
    CASE(st_retain) CASE(st_release) CASE(st_dtype_name) CASE(st_dtype_from_name) CASE(st_dtype_size)
    CASE(st_promote_types) CASE(st_ndim) CASE(st_size) CASE(st_shape) CASE(st_numel) CASE(st_dtype_of)
    CASE(st_device_of) CASE(st_is_contiguous) CASE(st_is_realized) CASE(st_shape_str) CASE(st_scalar)
    CASE(st_zeros) CASE(st_ones) CASE(st_empty) CASE(st_rand) CASE(st_randn) CASE(st_randint) CASE(st_full)
    CASE(st_arange) CASE(st_linspace) CASE(st_eye) CASE(st_from_data)
    ST_UNARY_API(UNARY_ENTRY) ST_BINARY_API(UNARY_ENTRY)
    CASE(st_add_s) CASE(st_mul_s) CASE(st_sub_s) CASE(st_rsub_s) CASE(st_div_s) CASE(st_rdiv_s)
    CASE(st_pow_s) CASE(st_where) CASE(st_clamp) CASE(st_cast)
    CASE(st_sum) CASE(st_mean) CASE(st_prod) CASE(st_max) CASE(st_min) CASE(st_logsumexp) CASE(st_var)
    CASE(st_std) CASE(st_argmax) CASE(st_argmin) CASE(st_softmax) CASE(st_log_softmax)
    CASE(st_matmul) CASE(st_attention) CASE(st_einsum)
    CASE(st_reshape) CASE(st_view) CASE(st_expand) CASE(st_broadcast_to) CASE(st_permute)
    CASE(st_transpose) CASE(st_slice) CASE(st_select) CASE(st_squeeze) CASE(st_unsqueeze)
    CASE(st_flatten) CASE(st_contiguous) CASE(st_as_strided) CASE(st_zero_pad) CASE(st_store_hint) CASE(st_clone)
    CASE(st_cat) CASE(st_stack) CASE(st_gather) CASE(st_index_select) CASE(st_scatter_add)
    CASE(st_index_add) CASE(st_one_hot)
    CASE(st_add_) CASE(st_sub_) CASE(st_mul_) CASE(st_div_) CASE(st_copy_) CASE(st_fill_) CASE(st_zero_)
    CASE(st_realize) CASE(st_graph) CASE(st_to_host) CASE(st_item) CASE(st_item_i64)
    CASE(st_set_requires_grad) CASE(st_requires_grad) CASE(st_is_leaf) CASE(st_grad) CASE(st_set_grad)
    CASE(st_backward) CASE(st_detach) CASE(st_retain_grad) CASE(st_function_apply) CASE(st_get_rng_state)
    CASE(st_save) CASE(st_save_meta) CASE(st_load) CASE(st_load_meta) CASE(st_free_loaded)
    CASE(st_free_meta) CASE(st_read_idx)
    CASE(st_to) CASE(st_set_default_device) CASE(st_stats) CASE(st_set_oom_handler)
    CASE(st_set_alloc_observer)
};
#define NCASES (sizeof cases / sizeof cases[0])
#define NNOPTR (sizeof no_pointer / sizeof no_pointer[0])

static char libpath[4096];

/* Every defined dynamic symbol of libstitch.so has a case (or is listed in no_pointer), and every
 * case names an exported function. */
TEST(every_export_covered) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s' 2>&1", libpath);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    if (!p) return;
    char line[512], missing[300] = "";
    int nsyms = 0, seen[NCASES + NNOPTR];
    memset(seen, 0, sizeof seen);
    while (fgets(line, sizeof line, p)) {
        char addr[64], type[8], sym[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, sym) != 3 || !strchr("TDBRW", type[0])) continue;
        if (sym[0] == '_') continue; /* _init, _fini */
        nsyms++;
        int found = 0;
        for (size_t i = 0; i < NCASES; i++)
            if (strcmp(cases[i].name, sym) == 0) seen[i] = found = 1;
        for (size_t i = 0; i < NNOPTR; i++)
            if (strcmp(no_pointer[i], sym) == 0) seen[NCASES + i] = found = 1;
        if (!found && strlen(missing) + strlen(sym) + 2 < sizeof missing) {
            strcat(missing, " ");
            strcat(missing, sym);
        }
    }
    int rc = pclose(p);
    CHECK_MSG(rc == 0 && nsyms > 100, "nm -D %.300s: exit %d, %d symbols", libpath, rc, nsyms);
    CHECK_MSG(missing[0] == '\0', "exported but not called with NULLs here:%s", missing);
    for (size_t i = 0; i < NCASES + NNOPTR; i++)
        CHECK_MSG(seen[i], "%s is tested here but not exported",
                  i < NCASES ? cases[i].name : no_pointer[i - NCASES]);
}

/* Runs one case in a forked child: a crash is reported as the case's failure. */
static void run_forked(const api_case *c) {
    int fds[2];
    fflush(stdout);
    if (pipe(fds) != 0) {
        printf("FAIL %s: pipe\n", c->name);
        test_failed_total++;
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        test_cur_failed = 0;
        test_cur_msg[0] = 0;
        c->fn();
        char out[700];
        int n = test_cur_failed ? snprintf(out, sizeof out, "FAIL %s: %s\n", c->name, test_cur_msg)
                                : snprintf(out, sizeof out, "PASS %s\n", c->name);
        if (write(fds[1], out, (size_t)n) != n) _exit(3);
        _exit(0);
    }
    close(fds[1]);
    char out[700];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof out - 1 && (r = read(fds[0], out + got, sizeof out - 1 - got)) > 0) got += (size_t)r;
    out[got] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got == 0) {
        if (WIFSIGNALED(status)) printf("FAIL %s: crashed (signal %d: %s)\n", c->name, WTERMSIG(status),
                                        strsignal(WTERMSIG(status)));
        else printf("FAIL %s: exited with status %d without a result\n", c->name, WEXITSTATUS(status));
        test_failed_total++;
        return;
    }
    fputs(out, stdout);
    if (strncmp(out, "FAIL", 4) == 0) test_failed_total++;
}

/* Every case again in this process; the runtime is still usable afterwards. */
TEST(all_in_one_process) {
    int before = test_cur_failed;
    for (size_t i = 0; i < NCASES; i++) {
        cases[i].fn();
        if (test_cur_failed && !before) {
            char m[sizeof test_cur_msg];
            snprintf(m, sizeof m, "%s", test_cur_msg);
            snprintf(test_cur_msg, sizeof test_cur_msg, "%s: %.400s", cases[i].name, m);
            before = 1;
        }
    }
    st_tensor *y = st_add_s(T, 1);
    double s = 0;
    st_tensor *sum = y ? st_sum(y, 0, NULL, 0) : NULL;
    CHECK(sum && st_item(sum, &s) == ST_OK && s == 6);
    st_release(sum);
    st_release(y);
}

int main(int argc, char **argv) {
    (void)argc;
    char self[2048];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(libpath, sizeof libpath, "%.2000s/../libstitch.so", dirname(self));
    snprintf(dir, sizeof dir, "/tmp/stitch_test_api_XXXXXX");
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    T = st_zeros(ST_F32, 2, SH2);
    I = st_zeros(ST_I64, 2, SH2);
    S = st_scalar(1, ST_F32);
    if (!T || !I || !S) {
        printf("FAIL setup: %s\n", st_last_error());
        return 1;
    }
    RUN(every_export_covered);
    for (size_t i = 0; i < NCASES; i++) run_forked(&cases[i]);
    RUN(all_in_one_process);
    st_release(T);
    st_release(I);
    st_release(S);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("FAIL cleanup: %s\n", cmd);
    st_shutdown();
    TEST_MAIN_END();
}
