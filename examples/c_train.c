/* c_train.c — the Fashion-MNIST MLP (784-256-128-10, ReLU, Adam, batch 128) trained through the C
 * API alone: autograd records the backward into the trace, the Adam update runs with grad mode off,
 * and one st_realize per step computes forward, backward and update in one flush.
 *
 * Build: cc -Iinclude examples/c_train.c build/libstitch.a -lz -lm -ldl -pthread -o c_train
 * Run:   ./c_train [--epochs N] [--limit N] [--data DIR]
 * The last line is "test accuracy: 0.XXXX". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "stitch.h"

/* Every tensor made during a step goes into a scope, released at its end: the C API returns new
 * references, and this keeps the training loop readable. */
typedef struct scope {
    st_tensor *t[256];
    int n;
} scope;

static st_tensor *T(scope *s, st_tensor *t) {
    if (!t) {
        fprintf(stderr, "error: %s\n", st_last_error());
        exit(1);
    }
    if (s->n == 256) {
        fprintf(stderr, "error: scope full\n");
        exit(1);
    }
    return s->t[s->n++] = t;
}

static void scope_end(scope *s) {
    while (s->n) st_release(s->t[--s->n]);
}

static void check(st_status s) {
    if (s != ST_OK) {
        fprintf(stderr, "error: %s\n", st_last_error());
        exit(1);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* images (N, 784) f32 in [0, 1] and labels (N) i64, from the IDX files in dir. */
static void load(const char *dir, const char *split, int64_t limit, st_tensor **x, st_tensor **y) {
    char p[1024];
    scope s = {.n = 0};
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte.gz", dir, split);
    st_tensor *img = st_read_idx(p);
    if (!img) {
        fprintf(stderr, "error: %s\n(install the Debian package dataset-fashion-mnist, or pass --data DIR)\n",
                st_last_error());
        exit(1);
    }
    T(&s, img);
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    st_tensor *lab = T(&s, st_read_idx(p));
    int64_t n = st_size(img, 0);
    if (limit > 0 && limit < n) n = limit;
    int64_t shape[2] = {n, 784};
    st_tensor *flat = T(&s, st_reshape(T(&s, st_slice(img, 0, 0, n, 1)), 2, shape));
    *x = st_div_s(T(&s, st_cast(flat, ST_F32)), 255.0);
    *y = st_cast(T(&s, st_slice(lab, 0, 0, n, 1)), ST_I64);
    check(st_realize(1, x));
    check(st_realize(1, y));
    scope_end(&s);
}

/* PyTorch's nn.Linear init: U(-1/sqrt(in), 1/sqrt(in)) for weight (out, in) and bias (out). */
static void linear_init(int64_t in, int64_t out, st_tensor **w, st_tensor **b) {
    scope s = {.n = 0};
    double k = 1.0 / sqrt((double)in);
    int64_t ws[2] = {out, in}, bs[1] = {out};
    *w = st_sub_s(T(&s, st_mul_s(T(&s, st_rand(ST_F32, 2, ws)), 2 * k)), k);
    *b = st_sub_s(T(&s, st_mul_s(T(&s, st_rand(ST_F32, 1, bs)), 2 * k)), k);
    check(st_set_requires_grad(*w, 1));
    check(st_set_requires_grad(*b, 1));
    scope_end(&s);
}

#define NP 6
static st_tensor *params[NP], *adam_m[NP], *adam_v[NP];

/* logits (B, 10) of images x (B, 784) */
static st_tensor *forward(scope *s, st_tensor *x) {
    st_tensor *h = x;
    for (int l = 0; l < 3; l++) {
        st_tensor *wt = T(s, st_transpose(params[2 * l], 0, 1));
        h = T(s, st_add(T(s, st_matmul(h, wt)), params[2 * l + 1]));
        if (l < 2) h = T(s, st_relu(h));
    }
    return h;
}

/* Adam (PyTorch's formulas, no weight decay), in place, grad mode off. */
static void adam_step(scope *s, int step, double lr) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double c1 = 1 - pow(b1, step), c2 = 1 - pow(b2, step);
    st_grad_mode_push(0);
    for (int i = 0; i < NP; i++) {
        st_tensor *g = T(s, st_grad(params[i]));
        check(st_mul_(adam_m[i], T(s, st_weak_scalar_f(b1))));
        check(st_add_(adam_m[i], T(s, st_mul_s(g, 1 - b1))));
        check(st_mul_(adam_v[i], T(s, st_weak_scalar_f(b2))));
        check(st_add_(adam_v[i], T(s, st_mul_s(T(s, st_mul(g, g)), 1 - b2))));
        st_tensor *den = T(s, st_add_s(T(s, st_div_s(T(s, st_sqrt(adam_v[i])), sqrt(c2))), eps));
        check(st_sub_(params[i], T(s, st_mul_s(T(s, st_div(adam_m[i], den)), lr / c1))));
        check(st_set_grad(params[i], NULL));
    }
    st_grad_mode_pop();
}

int main(int argc, char **argv) {
    int epochs = 1;
    int64_t limit = 0;
    const char *dir = getenv("FASHION_MNIST_DIR") ? getenv("FASHION_MNIST_DIR") : "/usr/share/datasets/fashion-mnist";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--epochs")) epochs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--limit")) limit = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--data")) dir = argv[i + 1];
    }
    st_tensor *xtr, *ytr, *xte, *yte;
    load(dir, "train", limit, &xtr, &ytr);
    load(dir, "t10k", limit, &xte, &yte);
    st_manual_seed(0);
    int64_t sizes[4] = {784, 256, 128, 10};
    for (int l = 0; l < 3; l++) {
        linear_init(sizes[l], sizes[l + 1], &params[2 * l], &params[2 * l + 1]);
        int64_t sh[ST_MAX_DIMS];
        for (int j = 0; j < 2; j++) {
            st_shape(params[2 * l + j], sh);
            adam_m[2 * l + j] = st_zeros(ST_F32, st_ndim(params[2 * l + j]), sh);
            adam_v[2 * l + j] = st_zeros(ST_F32, st_ndim(params[2 * l + j]), sh);
        }
    }
    check(st_realize(NP, params));
    const int64_t B = 128, N = st_size(xtr, 0);
    int64_t *perm = malloc(sizeof *perm * (size_t)N);
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int step = 0;
    for (int ep = 1; ep <= epochs; ep++) {
        for (int64_t i = 0; i < N; i++) perm[i] = i;
        for (int64_t i = N - 1; i > 0; i--) { /* Fisher-Yates with xorshift64 */
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int64_t j = (int64_t)(rng % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        double t0 = now(), loss_sum = 0;
        int64_t nb = 0;
        for (int64_t b0 = 0; b0 + B <= N; b0 += B, nb++) {
            scope s = {.n = 0};
            int64_t bs[1] = {B};
            st_tensor *idx = T(&s, st_from_data(ST_I64, 1, bs, perm + b0));
            st_tensor *xb = T(&s, st_index_select(xtr, 0, idx));
            st_tensor *yb = T(&s, st_unsqueeze(T(&s, st_index_select(ytr, 0, idx)), 1));
            st_tensor *logp = T(&s, st_log_softmax(forward(&s, xb), 1));
            st_tensor *loss = T(&s, st_neg(T(&s, st_mean(T(&s, st_gather(logp, 1, yb)), 0, NULL, 0))));
            check(st_backward(loss, NULL));
            adam_step(&s, ++step, 1e-3);
            st_tensor *sync[3 * NP + 1];
            memcpy(sync, params, sizeof params);
            memcpy(sync + NP, adam_m, sizeof adam_m);
            memcpy(sync + 2 * NP, adam_v, sizeof adam_v);
            sync[3 * NP] = loss;
            check(st_realize(3 * NP + 1, sync)); /* forward, backward and update: one flush */
            double l;
            check(st_item(loss, &l));
            loss_sum += l;
            scope_end(&s);
        }
        double dt = now() - t0;
        /* test accuracy */
        scope s = {.n = 0};
        st_grad_mode_push(0);
        st_tensor *pred = T(&s, st_argmax(forward(&s, xte), 1, 0));
        st_tensor *hit = T(&s, st_sum(T(&s, st_eq(pred, yte)), 0, NULL, 0));
        st_grad_mode_pop();
        double correct;
        check(st_item(hit, &correct));
        printf("epoch %d: train loss %.4f, test accuracy %.4f, %.0f images/s\n", ep, loss_sum / (double)nb,
               correct / (double)st_size(xte, 0), (double)(nb * B) / dt);
        if (ep == epochs) printf("test accuracy: %.4f\n", correct / (double)st_size(xte, 0));
        scope_end(&s);
    }
    for (int i = 0; i < NP; i++) {
        st_release(params[i]);
        st_release(adam_m[i]);
        st_release(adam_v[i]);
    }
    st_release(xtr);
    st_release(ytr);
    st_release(xte);
    st_release(yte);
    free(perm);
    st_shutdown();
    return 0;
}
