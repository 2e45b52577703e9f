/*
 * stitch.h — the public C API of stitch, a tensor runtime with lazy tracing fusion.
 *
 * Every function here records work into a lazy trace and returns at once; values are computed
 * (fused, compiled, launched) only at a sync point: st_to_host, st_item, st_realize, st_sync.
 *
 * Conventions
 *  - Tensors are opaque, reference-counted handles. Every function returning st_tensor * returns a
 *    NEW reference that the caller owns and must drop with st_release. Arguments are borrowed: a
 *    function never steals the caller's reference.
 *  - Dims are 0-based; a negative dim counts from the end (-1 is the last dim).
 *  - Errors are immediate: a bad shape, dtype or argument makes the call return NULL (or a non-zero
 *    st_status) and st_last_error() holds a message naming the offending shapes. Nothing reachable
 *    from this API exits or aborts the process. Errors are per thread.
 *  - NULL arguments: a NULL tensor, or a NULL array/pointer that the call needs (a shape with
 *    ndim > 0, axes with naxes > 0, a perm, a destination, an output pointer, a path), is an
 *    ST_ERR_ARG error like any other bad argument: NULL / the error status, with st_last_error set.
 *    Functions that return a plain value cannot return a status; on a NULL tensor they return
 *    -1 (st_ndim, st_size, st_numel), 0 (st_is_contiguous, st_is_realized, st_requires_grad,
 *    st_is_leaf), ST_DTYPE_COUNT (st_dtype_of) or NULL (st_device_of, st_shape_str), and set the
 *    error; void functions (st_shape, st_stats) only set it. A successful call does not clear the
 *    error, so call st_clear_error() first when you need to tell such a value from a real one.
 *    NULL is fine where a function says so (st_release, st_retain, st_set_grad's g, st_backward's
 *    grad, the optional outputs of st_load_meta, the handlers' callbacks).
 *  - The runtime is single-threaded: use one thread at a time.
 */
#ifndef STITCH_H
#define STITCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ST_API __attribute__((visibility("default")))
#else
#define ST_API
#endif

#define ST_MAX_DIMS 8

typedef struct st_tensor st_tensor;

typedef enum st_dtype {
    ST_F32 = 0, /* default */
    ST_F64,
    ST_I32,
    ST_I64,
    ST_BOOL,
    ST_F16,     /* storage type: arithmetic in f32 */
    ST_BF16,    /* storage type: arithmetic in f32 */
    ST_DTYPE_COUNT
} st_dtype;

typedef enum st_status {
    ST_OK = 0,
    ST_ERR_SHAPE,     /* incompatible shapes */
    ST_ERR_DTYPE,     /* unsupported dtype for the op */
    ST_ERR_ARG,       /* bad argument value (dim out of range, bad index, ...) */
    ST_ERR_OOM,       /* out of memory */
    ST_ERR_COMPILE,   /* the kernel compiler failed; the message carries its log and the source */
    ST_ERR_IO,        /* file or process error */
    ST_ERR_DEVICE,    /* device error */
    ST_ERR_INTERRUPT, /* st_interrupt() was called while work was running */
    ST_ERR_INTERNAL,  /* a bug in stitch */
    ST_STATUS_COUNT
} st_status;

/* ---- errors ---- */
ST_API const char *st_last_error(void);   /* message of the last failure on this thread, "" if none */
ST_API st_status st_last_status(void);
/* st_last_error() with the dims, indices and list positions it names counted from base (0 gives
 * st_last_error()'s text; the Lua module asks for 1). Valid until the next call on this thread. */
ST_API const char *st_last_error_base(int base);
ST_API void st_clear_error(void);

/* ---- handles ---- */
ST_API st_tensor *st_retain(st_tensor *t); /* returns t (NULL stays NULL, not an error) */
ST_API void st_release(st_tensor *t);      /* NULL is fine */

/* ---- dtypes ---- */
ST_API const char *st_dtype_name(st_dtype dt);          /* "f32", "f64", "i32", "i64", "bool", "f16", "bf16" */
ST_API int st_dtype_from_name(const char *name);        /* -1 if unknown; accepts "float32", "float", "int64", "long", ... */
ST_API size_t st_dtype_size(st_dtype dt);
ST_API st_dtype st_promote_types(st_dtype a, st_dtype b); /* ST_DTYPE_COUNT (and an error) for an unknown dtype */

/* ---- inspection (never flushes; a NULL tensor: see "NULL arguments" above) ---- */
ST_API int st_ndim(const st_tensor *t);
ST_API int64_t st_size(const st_tensor *t, int dim);    /* dim may be negative; -1 on a bad dim */
ST_API void st_shape(const st_tensor *t, int64_t out[ST_MAX_DIMS]);
ST_API int64_t st_numel(const st_tensor *t);
ST_API st_dtype st_dtype_of(const st_tensor *t);
ST_API const char *st_device_of(const st_tensor *t);    /* "cpu", "cuda:0", ... */
ST_API int st_is_contiguous(const st_tensor *t);
ST_API int st_is_realized(const st_tensor *t);          /* data already computed (no pending work) */
/* Writes "(2, 3)"-style text of a shape into buf (cut to n - 1 characters); returns buf, or NULL
 * when buf is NULL, n is 0, ndim is not 0..ST_MAX_DIMS or shape is NULL with ndim > 0. */
ST_API char *st_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* ---- creation ---- */
/* st_scalar, st_full and st_fill_ drop v's fraction for integer dtypes (toward zero); a v that the
 * dtype cannot hold (2^40 for i32, NaN, an infinity) is an ST_ERR_ARG error, as in PyTorch. */
ST_API st_tensor *st_scalar(double v, st_dtype dt);     /* 0-d tensor */
/* A "weak" 0-d scalar, as a bare number in an expression: it adopts the other operand's dtype when
 * that is of the same or a higher category (bool < int < float); see docs/api.md. */
ST_API st_tensor *st_weak_scalar_f(double v);
ST_API st_tensor *st_weak_scalar_i(int64_t v);
ST_API st_tensor *st_zeros(st_dtype dt, int ndim, const int64_t *shape);
ST_API st_tensor *st_ones(st_dtype dt, int ndim, const int64_t *shape);
ST_API st_tensor *st_full(st_dtype dt, int ndim, const int64_t *shape, double v);
ST_API st_tensor *st_empty(st_dtype dt, int ndim, const int64_t *shape); /* contents unspecified */
ST_API st_tensor *st_arange(double start, double end, double step, st_dtype dt); /* [start, end) */
ST_API st_tensor *st_linspace(double start, double end, int64_t n, st_dtype dt); /* both ends */
ST_API st_tensor *st_eye(int64_t n, int64_t m, st_dtype dt);
/* Copies numel(shape) elements of dtype dt from data (C order). */
ST_API st_tensor *st_from_data(st_dtype dt, int ndim, const int64_t *shape, const void *data);
/* Counter-based RNG (Philox 4x32-10): the same seed gives the same numbers whatever the fusion
 * and the device. Each random op takes the next range of counters from the global stream. */
ST_API void st_manual_seed(uint64_t seed);
/* The stream's position: the seed and the next counter. Setting a saved state replays the same
 * numbers (gradient checkpointing recomputes dropout masks this way). */
ST_API void st_get_rng_state(uint64_t *seed, uint64_t *offset);
ST_API void st_set_rng_state(uint64_t seed, uint64_t offset);
ST_API st_tensor *st_rand(st_dtype dt, int ndim, const int64_t *shape);    /* U[0, 1) */
ST_API st_tensor *st_randn(st_dtype dt, int ndim, const int64_t *shape);   /* N(0, 1) */
ST_API st_tensor *st_randint(int64_t lo, int64_t hi, st_dtype dt, int ndim, const int64_t *shape); /* [lo, hi) */

/* ---- elementwise (broadcasting, type promotion) ---- */
#define ST_UNARY_API(X) X(neg) X(abs) X(exp) X(log) X(sqrt) X(rsqrt) X(sin) X(cos) X(tanh) \
    X(sigmoid) X(relu) X(gelu) X(gelu_tanh) X(gelu_grad) X(silu) X(floor) X(ceil) X(round) X(sign)       \
    X(reciprocal) X(logical_not) X(log1p) X(expm1) X(erf) X(square)
#define ST_BINARY_API(X) X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum) X(fmod)      \
    X(remainder) X(eq) X(ne) X(lt) X(le) X(gt) X(ge) X(logical_and) X(logical_or)
#define ST_DECL_UNARY(name) ST_API st_tensor *st_##name(st_tensor *a);
#define ST_DECL_BINARY(name) ST_API st_tensor *st_##name(st_tensor *a, st_tensor *b);
ST_UNARY_API(ST_DECL_UNARY)
ST_BINARY_API(ST_DECL_BINARY)
/* Scalar on either side: st_add_s(a, 2) is a + 2, st_rsub_s(a, 2) is 2 - a. */
ST_API st_tensor *st_add_s(st_tensor *a, double s);
ST_API st_tensor *st_mul_s(st_tensor *a, double s);
ST_API st_tensor *st_sub_s(st_tensor *a, double s);
ST_API st_tensor *st_rsub_s(st_tensor *a, double s);
ST_API st_tensor *st_div_s(st_tensor *a, double s);
ST_API st_tensor *st_rdiv_s(st_tensor *a, double s);
ST_API st_tensor *st_pow_s(st_tensor *a, double s);
ST_API st_tensor *st_where(st_tensor *cond, st_tensor *a, st_tensor *b);
/* Either bound may be NAN for "none". */
ST_API st_tensor *st_clamp(st_tensor *a, double lo, double hi);
ST_API st_tensor *st_cast(st_tensor *a, st_dtype dt);   /* a new tensor even when dt matches */

/* ---- reductions: axes[0..naxes) (naxes == 0: all dims), keepdim keeps them as size 1 ---- */
ST_API st_tensor *st_sum(st_tensor *a, int naxes, const int *axes, int keepdim);
ST_API st_tensor *st_mean(st_tensor *a, int naxes, const int *axes, int keepdim);
ST_API st_tensor *st_prod(st_tensor *a, int naxes, const int *axes, int keepdim);
ST_API st_tensor *st_max(st_tensor *a, int naxes, const int *axes, int keepdim);
ST_API st_tensor *st_min(st_tensor *a, int naxes, const int *axes, int keepdim);
ST_API st_tensor *st_logsumexp(st_tensor *a, int naxes, const int *axes, int keepdim);
/* correction: 1 for the unbiased (sample) estimate, 0 for the population one. */
ST_API st_tensor *st_var(st_tensor *a, int naxes, const int *axes, int correction, int keepdim);
ST_API st_tensor *st_std(st_tensor *a, int naxes, const int *axes, int correction, int keepdim);
/* Index (i64) of the first max/min along dim; dim == ST_ALL_DIMS: over the flattened tensor. */
#define ST_ALL_DIMS (-1000)
ST_API st_tensor *st_argmax(st_tensor *a, int dim, int keepdim);
ST_API st_tensor *st_argmin(st_tensor *a, int dim, int keepdim);
ST_API st_tensor *st_softmax(st_tensor *a, int dim);
ST_API st_tensor *st_log_softmax(st_tensor *a, int dim);

/* ---- linear algebra ---- */
/* numpy/PyTorch matmul rules: 1-D x 1-D dot, 2-D, batched with broadcast batch dims. */
ST_API st_tensor *st_matmul(st_tensor *a, st_tensor *b);
/* Attention: softmax(q k^T * scale + mask) v over the last two dims, q (..., Lq, E), k (..., Lk, E),
 * v (..., Lk, Ev) -> (..., Lq, Ev), batch dims broadcast; mask NULL, or bool (true: may attend;
 * false adds -inf) or float (added; it gets a gradient), broadcastable to (..., Lq, Lk); scale NaN
 * means 1/sqrt(E); causal: query i sees keys j <= i only (with a mask too); dropout in [0, 1]: each
 * weight zeroed with that probability and the rest scaled by 1/(1 - dropout), the numbers of
 * st_rand over the weights' (..., Lq, Lk) shape (it advances the stream as that call would; 1
 * draws nothing, as F.dropout). One
 * op of the trace: one kernel, the (Lq, Lk) scores never stored (docs/fusion.md). f32 or f64
 * (f16/bf16 compute in f32 and round the result). The gradient recomputes the scores and the
 * dropout's numbers (docs/autograd.md). */
ST_API st_tensor *st_attention(st_tensor *q, st_tensor *k, st_tensor *v, st_tensor *mask, double scale,
                               int causal, double dropout);
/* Einstein summation, numpy/PyTorch rules: "bij,bjk->bik", implicit output without "->" (the
 * indices used once, capitals first), "..." broadcasting, a repeated index within an operand takes
 * its diagonal, sizes match or are 1. n operands, contracted left to right in pairs; each pair is
 * one batched matmul (or an elementwise product when nothing is contracted) plus views and sums.
 * Errors name the spec, the index, the operands (numbered from 1) and their shapes. */
ST_API st_tensor *st_einsum(const char *spec, int n, st_tensor *const *operands);

/* ---- views (no copy; they alias the source's storage) ---- */
ST_API st_tensor *st_reshape(st_tensor *a, int ndim, const int64_t *shape); /* one -1 allowed; copies when strides cannot express it */
ST_API st_tensor *st_view(st_tensor *a, int ndim, const int64_t *shape);    /* like reshape, but an error instead of a copy */
ST_API st_tensor *st_permute(st_tensor *a, const int *perm);                /* perm has ndim entries */
ST_API st_tensor *st_transpose(st_tensor *a, int d0, int d1);
ST_API st_tensor *st_expand(st_tensor *a, int ndim, const int64_t *shape);  /* -1 keeps a size */
ST_API st_tensor *st_broadcast_to(st_tensor *a, int ndim, const int64_t *shape);
ST_API st_tensor *st_slice(st_tensor *a, int dim, int64_t start, int64_t end, int64_t step); /* [start, end), clamped, negative = from end */
ST_API st_tensor *st_select(st_tensor *a, int dim, int64_t index);          /* removes dim */
ST_API st_tensor *st_squeeze(st_tensor *a, int dim);                        /* dim == ST_ALL_DIMS: every size-1 dim */
ST_API st_tensor *st_unsqueeze(st_tensor *a, int dim);
ST_API st_tensor *st_flatten(st_tensor *a, int start_dim, int end_dim);
/* A view of a's elements in C order (a copied contiguous first when it is not): element (i0, i1..)
 * is element offset + sum(i_d * strides[d]) of a. Strides >= 0 and may overlap (sliding windows:
 * unfold); every element reached must lie inside a. Differentiable: overlapping windows' gradients
 * add up. */
ST_API st_tensor *st_as_strided(st_tensor *a, int ndim, const int64_t *shape, const int64_t *strides,
                                int64_t offset);
/* a with before[d] zeros in front of and after[d] behind each dim d (>= 0): one masked view of a,
 * read as 0 outside it (no copy until something reads it). */
ST_API st_tensor *st_zero_pad(st_tensor *a, const int64_t *before, const int64_t *after);
/* A tensor with a's value that a flush stores in a buffer of its own wherever it computes it, and
 * every kernel reading it loads it, instead of evaluating it inside each reader: for library code
 * that reads a value many times through index arithmetic costlier than a load (a convolution's
 * dilated output gradient under the kernel's windows). Changes no value; a realized a is returned
 * as is (new reference). */
ST_API st_tensor *st_store_hint(st_tensor *a);
ST_API st_tensor *st_contiguous(st_tensor *a);                              /* a itself (new ref) if already contiguous */
ST_API st_tensor *st_clone(st_tensor *a);                                   /* always a new storage */

/* ---- joining, indexing ---- */
ST_API st_tensor *st_cat(int n, st_tensor *const *ts, int dim);
ST_API st_tensor *st_stack(int n, st_tensor *const *ts, int dim);
/* out[i][j][k] = a[index[i][j][k]][j][k] for dim 0 (index: i64, same ndim as a). */
ST_API st_tensor *st_gather(st_tensor *a, int dim, st_tensor *index);
ST_API st_tensor *st_index_select(st_tensor *a, int dim, st_tensor *index); /* index: 1-D integer */
/* out = a with out[index[i][j]][j] += src[i][j] (dim 0); out of place. */
ST_API st_tensor *st_scatter_add(st_tensor *a, int dim, st_tensor *index, st_tensor *src);
ST_API st_tensor *st_index_add(st_tensor *a, int dim, st_tensor *index, st_tensor *src);
/* i64, last dim added; num_classes -1: the largest class + 1. A sync point: a class outside
 * [0, num_classes) is an ST_ERR_ARG error naming it (not a row of zeros). */
ST_API st_tensor *st_one_hot(st_tensor *index, int64_t num_classes);

/* ---- in-place (eager semantics; every view of the same storage sees the write) ---- */
ST_API st_status st_add_(st_tensor *a, st_tensor *b);
ST_API st_status st_sub_(st_tensor *a, st_tensor *b);
ST_API st_status st_mul_(st_tensor *a, st_tensor *b);
ST_API st_status st_div_(st_tensor *a, st_tensor *b);
ST_API st_status st_copy_(st_tensor *dst, st_tensor *src);   /* src broadcast to dst, cast to dst's dtype */
ST_API st_status st_fill_(st_tensor *a, double v);
ST_API st_status st_zero_(st_tensor *a);

/* ---- sync points ----
 * Every flush (these, the reads to the host, the automatic one) also realizes the tensors in-place
 * writes left pending since the last flush and still referenced: written state never chains. */
/* Realize (compute) these tensors in one flush. NULL entries are skipped (an optional output, such as
 * a gradient that does not exist); a NULL array with n > 0 is an error. */
ST_API st_status st_realize(int n, st_tensor *const *ts);
/* Realize every pending tensor still referenced. */
ST_API st_status st_sync(void);
/* Waits for the work already launched on every device in use and reports the first error it
 * left: a GPU kernel reports an index error (gather, scatter_add, ...) and faults only at the
 * device's next synchronization point (a copy to the host, this call), not at the flush that
 * launched it (docs/cuda.md, "Errors"). Runs nothing pending in the trace (st_sync first for that);
 * on the CPU, where every error comes with its flush, always ST_OK. */
ST_API st_status st_synchronize(void);
/* st_realize (n == 0: st_sync) that also writes that flush's fusion plan to path in Graphviz dot:
 * one cluster per kernel, its nodes, inputs and edges (docs/fusion.md, "Seeing the plan"), plus an
 * SVG next to it (path with its extension replaced by .svg) when Graphviz's `dot` is on PATH.
 * When nothing was pending the file holds an empty graph and a comment saying so. ST_ERR_IO when
 * path cannot be written (checked before the flush); a flush error is returned as st_realize's. */
ST_API st_status st_graph(const char *path, int n, st_tensor *const *ts);
/* Copies the tensor (any strides) to dst in C order, as dtype dt (converted); nbytes must be
 * numel * st_dtype_size(dt). */
ST_API st_status st_to_host(st_tensor *t, st_dtype dt, void *dst, size_t nbytes);
ST_API st_status st_item(st_tensor *t, double *out);         /* one-element tensor */
ST_API st_status st_item_i64(st_tensor *t, int64_t *out);

/* ---- autograd ----
 * Gradients are recorded as trace nodes: backward() records the gradient computation into the lazy
 * trace (nothing runs until a sync point), so it is fused with the forward and the optimizer step.
 * A tensor requires grad when it is a leaf marked with st_set_requires_grad, or when it was computed
 * with grad mode on from a tensor that requires grad. Only float tensors can require grad. Gradients
 * accumulate (sum) into a leaf's storage across backward calls until cleared with st_set_grad(t, NULL).
 * Ops that are not differentiable (comparisons, floor, argmax, ...) pass no gradient.
 * In-place ops on a leaf that requires grad are refused while grad mode is on (run optimizer
 * updates with grad mode off); in-place ops on other tensors are recorded like any op. */
ST_API st_status st_set_requires_grad(st_tensor *t, int on); /* t: a leaf (not computed from grad-requiring tensors) of a float dtype */
ST_API int st_requires_grad(const st_tensor *t);
/* 1 unless t was computed from a tensor that requires grad (a view handle shares its storage's
 * answer: a view of a leaf reports 1, unlike PyTorch) */
ST_API int st_is_leaf(const st_tensor *t);
/* The gradient accumulated for t's storage, viewed like t: a new reference, or NULL with
 * st_last_status() == ST_OK when there is none. */
ST_API st_tensor *st_grad(st_tensor *t);
/* Replace the accumulated gradient of t's storage (t must be a whole-storage leaf; g of t's shape,
 * cast to t's dtype); g == NULL clears it. */
ST_API st_status st_set_grad(st_tensor *t, st_tensor *g);
/* Accumulate d(t)/d(leaf) * grad into every leaf t depends on. grad == NULL means ones and needs a
 * one-element t; otherwise grad must have t's shape. Records work only (no flush). */
ST_API st_status st_backward(st_tensor *t, st_tensor *grad);
/* A tensor with t's current value that does not require grad (a new storage: later in-place writes
 * to either one are not seen by the other). */
ST_API st_tensor *st_detach(st_tensor *t);
/* Keep the gradient of a tensor that is not a leaf: after a backward pass st_grad(t) returns it
 * (accumulating like a leaf's). ST_ERR_ARG when t does not require grad; nothing to do for a leaf. */
ST_API st_status st_retain_grad(st_tensor *t);

/* Custom functions (st.autograd.Function in Lua). The caller computes a function's outputs itself
 * (usually with grad mode off) and records them with st_function_apply: results[i] gets a new
 * reference with outputs[i]'s value which, when grad mode is on and an input requires grad (and the
 * output is a float tensor), requires grad through the function; otherwise results[i] is
 * st_retain(outputs[i]). During a later st_backward, backward(ud, nout, grad_outputs, nin,
 * grad_inputs) runs once, with grad mode off, after every consumer of the outputs: grad_outputs[i]
 * is the gradient of output i (borrowed) or NULL when none reached it; it sets grad_inputs[i] (all
 * NULL on entry) to a new reference of inputs[i]'s shape (any float dtype; cast to the input's) or
 * leaves it NULL (no gradient), and returns ST_OK or an error status (the backward pass then fails
 * with that status, its message naming the function). Gradients are recorded ops like any other.
 * A gradient of the wrong shape is an ST_ERR_SHAPE error naming the function, the input and both
 * shapes. free_ud(ud) (may be NULL) runs once, when the record dies or at once when none is made,
 * including on error; it must not release tensors. name: for messages (copied). nin <= 255. */
typedef st_status (*st_function_backward_fn)(void *ud, int nout, st_tensor *const *grad_outputs,
                                             int nin, st_tensor **grad_inputs);
ST_API st_status st_function_apply(const char *name, int nin, st_tensor *const *inputs, int nout,
                                   st_tensor *const *outputs, st_tensor **results,
                                   st_function_backward_fn backward, void *ud,
                                   void (*free_ud)(void *ud));
/* Autocast (mixed precision, PyTorch's torch.autocast lists): while it is on with dtype dt (ST_F16
 * or ST_BF16), st_matmul (and so linear layers, convolutions and einsum) reads f32/f16/bf16 operands
 * as dt and returns dt, and sum, prod, mean, var, std, logsumexp, softmax and log_softmax compute
 * f16/bf16 inputs in f32 and return f32 (so do losses and norms built on them). f64 and integer
 * operands are left alone. st_autocast_push(0, ...) turns it off in a region; push/pop nest (256
 * levels). ST_ERR_DTYPE (nothing pushed) when on with another dtype. st_autocast_dtype: the active
 * dtype, ST_DTYPE_COUNT when off. */
ST_API st_status st_autocast_push(int enabled, st_dtype dt);
ST_API void st_autocast_pop(void);
ST_API st_dtype st_autocast_dtype(void);
/* Grad mode (default on): ops record gradient information only while it is on. Push/pop nest. */
ST_API void st_grad_mode_push(int enabled);
ST_API void st_grad_mode_pop(void);
ST_API int st_grad_enabled(void);

/* ---- files ----
 * safetensors (https://github.com/huggingface/safetensors format): an 8-byte little-endian header
 * size, a JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
 * "__metadata__": {..}}, then the raw little-endian data. st_save writes to a temporary file in the
 * same directory, fsyncs it and renames it over path, so a crash never leaves a broken file; it
 * writes regular files only: a symbolic link is followed (the file it leads to is replaced, the
 * link stays), an existing file keeps its mode, and a directory, FIFO, device or socket at path is
 * refused (ST_ERR_IO naming it). st_load
 * validates the header, dtypes, shapes and offsets and rejects a malformed file with ST_ERR_IO
 * naming what is wrong; it never reads out of bounds. U8/I8/I16/U16 data loads as i32; BOOL, I32,
 * I64, F16, BF16, F32, F64 load as themselves; other dtypes are refused. */
ST_API st_status st_save(const char *path, int n, const char *const *names, st_tensor *const *ts);
/* On success *names and *ts are arrays of n entries owned by the caller: free with st_free_loaded. */
ST_API st_status st_load(const char *path, int *n, char ***names, st_tensor ***ts);
ST_API void st_free_loaded(int n, char **names, st_tensor **ts);  /* releases the tensors too */
/* st_save with a "__metadata__" map of nmeta string pairs keys[i] -> values[i] (UTF-8, unique keys).
 * Entries are written ordered by element size (largest first), then name, like the reference
 * implementation, which keeps every tensor's data aligned to its element size. */
ST_API st_status st_save_meta(const char *path, int n, const char *const *names, st_tensor *const *ts,
                              int nmeta, const char *const *keys, const char *const *values);
/* st_load that also returns the "__metadata__" map: on success *keys and *values are arrays of *nmeta
 * strings owned by the caller (free with st_free_meta); nmeta, keys and values may all be NULL. */
ST_API st_status st_load_meta(const char *path, int *n, char ***names, st_tensor ***ts, int *nmeta,
                              char ***keys, char ***values);
ST_API void st_free_meta(int nmeta, char **keys, char **values);
/* An IDX file (the MNIST format), gzip-compressed or not: ubyte/byte/short/int data as i32,
 * float as f32, double as f64, with the file's dims as the shape. */
ST_API st_tensor *st_read_idx(const char *path);

/* ---- devices (docs/cuda.md) ----
 * Names: "cpu", "cuda" (= "cuda:0"), "cuda:N". The default device is ST_DEVICE if set, else the
 * first GPU when the CUDA driver loads and reports one, else the CPU. Creators (st_zeros, st_rand,
 * st_from_data, ...) make tensors on the default device; an op on tensors bound to two devices is
 * an ST_ERR_DEVICE error naming both. */
ST_API st_tensor *st_to(st_tensor *t, const char *device);  /* t itself (new ref) if already there */
ST_API const char *st_default_device(void);
ST_API st_status st_set_default_device(const char *device); /* ST_ERR_DEVICE if not usable */
ST_API int st_cuda_device_count(void);                     /* 0 without a driver or GPU */
ST_API void st_empty_cache(void);   /* return cached free blocks (host and device) to the system */
/* f32 matmuls on CUDA tensor cores with inputs rounded to tf32 (10-bit mantissa), like
 * torch.backends.cuda.matmul.allow_tf32: off by default (it changes f32 results); ST_TF32=1 turns it
 * on at start. Affects kernels rendered after the call (the option is part of their source). */
ST_API void st_cuda_allow_tf32(int on);

/* ---- runtime control ---- */
typedef struct st_stats_t {
    uint64_t flushes;            /* sync points that ran work */
    uint64_t nodes_recorded;     /* trace nodes created */
    uint64_t kernels_launched;   /* kernels of the fusion plans executed, whichever tier ran them */
    uint64_t kernels_compiled;   /* kernels compiled by the JIT */
    uint64_t compile_calls;      /* compiler invocations (one per flush with new kernels) */
    uint64_t cache_hits_memory;  /* kernels found in the in-memory cache */
    uint64_t cache_hits_disk;    /* kernels loaded from the disk cache */
    uint64_t interp_groups;      /* fused groups executed by the reference interpreter tier */
    uint64_t plans_built;        /* flushes that partitioned and lowered their region (plan cache misses) */
    uint64_t plan_cache_hits;    /* flushes that reused a cached plan (no planning, no rendering) */
    uint64_t bytes_in_use;       /* tensor memory held now */
    uint64_t bytes_peak;         /* high-water mark of bytes_in_use since the last reset */
    uint64_t device_bytes_in_use;   /* GPU memory held by tensors (all devices) */
    uint64_t device_bytes_reserved; /* GPU memory held by the caching allocator (in use + cached) */
    uint64_t device_bytes_peak;     /* high-water mark of device_bytes_in_use */
    double compile_ms;           /* total wall time spent compiling */
    double exec_ms;              /* total wall time spent executing flushes */
    /* gauges (what is held now; st_reset_stats leaves them): */
    uint64_t nodes_live;         /* trace nodes alive (held by tensors, autograd records, other nodes) */
    uint64_t nodes_pending;      /* of those, not computed yet */
    uint64_t bytes_pending;      /* their results' bytes (views excluded): what a flush may store */
    uint64_t plan_cache_entries; /* flushed regions' plans cached */
    uint64_t plan_cache_bytes;   /* host memory those plans hold */
    uint64_t host_bytes_cached;  /* freed host blocks kept for reuse (st_empty_cache returns them) */
} st_stats_t;
ST_API void st_stats(st_stats_t *out);
ST_API void st_reset_stats(void);   /* zeroes the counters; bytes_peak restarts at bytes_in_use */

/* Execution mode. Default: from ST_EAGER (1: every op through the reference interpreter at once). */
ST_API void st_set_eager(int on);
ST_API int st_get_eager(void);
/* Regions whose total work is below this many elements run through the interpreter unless their
 * kernels are already compiled (keeps the REPL responsive). Default: ST_JIT_MIN or 32768; 0: always JIT. */
ST_API void st_set_jit_min(int64_t elems);
/* Fill every newly allocated buffer with a NaN/sentinel pattern (tests). Default: ST_POISON. */
ST_API void st_set_poison(int on);
/* Ask running work to stop at the next safe point (signal-safe); the flush fails with
 * ST_ERR_INTERRUPT and the runtime stays usable. */
ST_API void st_interrupt(void);
/* Withdraw an interrupt that arrived while no work was running (a REPL calls it before each command). */
ST_API void st_clear_interrupt(void);
/* Debug flags (ST_DEBUG): 1 flush lines, 2 kernel lines, 4 generated source. */
ST_API void st_set_debug(int flags);
/* Fail the nth allocation from now (1 = the next one); 0 disables. For out-of-memory tests.
 * Returns the countdown this call replaces: 0 when the failure it set up has fired (or none was
 * set), else how many allocations were still to come before it. */
ST_API int64_t st_debug_fail_alloc(int64_t nth);
/* Allocation hook: called with the bytes about to be allocated when an allocation fails, so a
 * host (Lua) can collect garbage; return non-zero to retry once. */
ST_API void st_set_oom_handler(int (*handler)(size_t bytes, void *ud), void *ud);
/* Report of memory growth so that a garbage-collected host can account for it. */
ST_API void st_set_alloc_observer(void (*observer)(int64_t delta_bytes, void *ud), void *ud);
/* Frees every cache the runtime holds (compiled kernels stay on disk). Call at exit for leak checks.
 * It waits for the devices; an error their work left that no call has reported (st_synchronize
 * first to get it as a status) is printed on stderr, "stitch: found by st_shutdown, which cannot
 * return it: ...", never dropped. */
ST_API void st_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
