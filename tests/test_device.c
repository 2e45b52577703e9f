/*
 * test_device.c — devices as the user sees them (runtime/device.c, trace/node.c, runtime/flush.c).
 *
 * Checked on every machine:
 *  - names: "cpu", "cuda", "cuda:N" parse; anything else is ST_ERR_ARG naming the string;
 *  - binding: an op on sources bound to two devices is ST_ERR_DEVICE naming both (a cpu node is
 *    bound to a fake cuda:0 by hand, so this runs without a GPU and with any default device); fills and random tensors are unbound
 *    (ST_DEV_ANY) and adopt their consumer's device; a realized node's device is its buffer's;
 *  - st_to(t, "cpu") of a cpu tensor is t's storage itself.
 * Without a usable GPU (this test's own machine): the default device is the cpu, and moving to or
 * selecting "cuda" is ST_ERR_DEVICE saying why in words; then, against the fake driver of
 * tests/test_cuda_driver.c (host memory behind the driver API, no kernels): a GPU becomes the
 * default device, creators put data there, transfers both ways keep every byte, reading a GPU
 * tensor copies it to the host, cpu + cuda is refused naming both, and the device statistics and
 * st_empty_cache account for every block. With a real GPU (tests/gpu/run.sh): round trips for
 * each dtype, and an op on cuda equals the same op on cpu.
 */
#include "test.h"
#include "fake_cuda.h"
#include "runtime/tensor.h"
#include "trace/trace.h"
#include "jit/nvrtc.h"

static int has_gpu;

TEST(names) {
    st_tensor *x = st_arange(0, 4, 1, ST_F32);
    st_tensor *y = st_to(x, "tpu");
    CHECK(y == NULL);
    CHECK(st_last_status() == ST_ERR_ARG);
    CHECK(strstr(st_last_error(), "\"tpu\"") != NULL);
    CHECK(st_to(x, "cuda:x") == NULL && st_last_status() == ST_ERR_ARG);
    CHECK(st_set_default_device("cuda:") == ST_ERR_ARG);
    st_tensor *z = st_to(x, "cpu");
    CHECK(z != NULL);
    if (z) CHECK(strcmp(st_device_of(z), "cpu") == 0);
    st_release(z);
    st_release(x);
}

TEST(no_gpu_is_a_clear_error) {
    if (has_gpu) return;
    CHECK(strcmp(st_default_device(), "cpu") == 0);
    st_tensor *x = st_ones(ST_F32, 1, (int64_t[]){3});
    st_tensor *y = st_to(x, "cuda");
    CHECK(y == NULL);
    CHECK(st_last_status() == ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "cuda:0 is not available: ") != NULL, "message: %s", st_last_error());
    CHECK(st_set_default_device("cuda:1") == ST_ERR_DEVICE);
    CHECK(strcmp(st_default_device(), "cpu") == 0);
    /* the runtime keeps working on the cpu */
    double v = 0;
    st_tensor *s = st_sum(x, 0, NULL, 0);
    CHECK(s && st_item(s, &v) == ST_OK);
    CHECK_NEAR(v, 3, 0);
    st_stats_t st;
    st_stats(&st);
    CHECK_EQ_INT(st.device_bytes_in_use, 0);
    CHECK_EQ_INT(st.device_bytes_reserved, 0);
    st_release(s);
    st_release(x);
}

TEST(mixed_devices_are_refused) {
    float d[3] = {1, 2, 3};
    st_tensor *a = st_from_data_host(ST_F32, 1, (int64_t[]){3}, d);   /* on the cpu, whatever the default */
    st_tensor *b = st_exp(a);                  /* pending, bound to a's device */
    CHECK(b && st_node_dev(b->storage->node) == ST_DEV_CPU);
    if (!b) return;
    b->storage->node->dev = 1;                 /* pretend b is pending on cuda:0 */
    st_tensor *c = st_add(b, a);
    CHECK(c == NULL);
    CHECK(st_last_status() == ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "add: expected all tensors on the same device, got cuda:0 and cpu") != NULL,
              "message: %s", st_last_error());
    b->storage->node->dev = ST_DEV_CPU;
    c = st_add(b, a);
    CHECK(c != NULL);
    st_release(c);
    st_release(b);
    st_release(a);
}

TEST(unbound_values_follow_their_use) {
    st_tensor *z = st_zeros(ST_F32, 2, (int64_t[]){2, 3});
    st_tensor *r = st_rand(ST_F32, 2, (int64_t[]){2, 3});
    CHECK(st_node_dev(z->storage->node) == ST_DEV_ANY);
    CHECK(st_node_dev(r->storage->node) == ST_DEV_ANY);
    CHECK(strcmp(st_device_of(z), st_default_device()) == 0);
    float d[6] = {1, 2, 3, 4, 5, 6};
    st_tensor *a = st_from_data_host(ST_F32, 2, (int64_t[]){2, 3}, d);
    st_tensor *s = st_add(z, a);
    CHECK(s && st_node_dev(s->storage->node) == ST_DEV_CPU);
    /* a bound node stays bound; an unbound one that a flush materializes takes the buffer's device */
    CHECK(st_realize(1, &r) == ST_OK);
    CHECK(st_node_dev(r->storage->node) == st_default_dev());
    st_release(s);
    st_release(r);
    st_release(z);
    st_release(a);
}

TEST(round_trip_on_gpu) {
    if (!has_gpu) return;
    const st_dtype dts[] = {ST_F32, ST_F64, ST_F16, ST_BF16, ST_I32, ST_I64, ST_BOOL};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        st_tensor *ar = st_arange(0, 1000, 1, ST_F64);
        st_tensor *x = st_cast(ar, dts[k]);
        st_release(ar);
        st_tensor *g = st_to(x, "cuda");
        CHECK(g && strcmp(st_device_of(g), "cuda:0") == 0);
        st_tensor *h = g ? st_to(g, "cpu") : NULL;
        CHECK(h != NULL);
        if (h) {
            double a[1000], b[1000];
            CHECK(st_to_host(x, ST_F64, a, sizeof a) == ST_OK);
            CHECK(st_to_host(h, ST_F64, b, sizeof b) == ST_OK);
            CHECK(memcmp(a, b, sizeof a) == 0);
        }
        st_release(h);
        st_release(g);
        st_release(x);
    }
    /* an op on cuda equals the op on cpu; mixing them is refused */
    st_tensor *x = st_randn(ST_F32, 2, (int64_t[]){64, 100});
    st_tensor *xc = st_to(x, "cpu"), *xg = st_to(x, "cuda");
    st_tensor *yc = st_softmax(xc, 1), *yg = st_softmax(xg, 1);
    float a[6400], b[6400];
    CHECK(st_to_host(yc, ST_F32, a, sizeof a) == ST_OK);
    CHECK(st_to_host(yg, ST_F32, b, sizeof b) == ST_OK);
    double md = 0;
    for (int i = 0; i < 6400; i++) md = fmax(md, fabs((double)a[i] - b[i]));
    CHECK_MSG(md < 1e-6, "softmax cpu vs cuda: max difference %g", md);
    st_tensor *bad = st_add(xc, xg);
    CHECK(bad == NULL && st_last_status() == ST_ERR_DEVICE);
    st_release(yc);
    st_release(yg);
    st_release(xc);
    st_release(xg);
    st_release(x);
}

/* ---- the device plumbing against the fake driver of tests/test_cuda_driver.c (host memory behind
 * the driver API; no kernels), in a child process: the driver is probed once per process ---- */
static void fake_body(void) {
    CHECK(st_cuda_device_count() == 1);
    CHECK(strcmp(st_default_device(), "cuda:0") == 0);   /* a GPU is there: it is the default */
    float d[1000];
    for (int i = 0; i < 1000; i++) d[i] = (float)i * 0.5f - 3;
    st_tensor *g = st_from_data(ST_F32, 2, (int64_t[]){10, 100}, d);   /* on the default device */
    CHECK(g && strcmp(st_device_of(g), "cuda:0") == 0);
    if (!g) return;
    st_stats_t s;
    st_stats(&s);
    CHECK(s.device_bytes_in_use >= sizeof d && s.device_bytes_reserved >= s.device_bytes_in_use);
    CHECK_EQ_INT(s.bytes_in_use, 0);               /* the host staging copy is gone */
    float back[1000];
    CHECK(st_to_host(g, ST_F32, back, sizeof back) == ST_OK);   /* device -> host at a sync point */
    CHECK(memcmp(back, d, sizeof d) == 0);
    st_tensor *h = st_to(g, "cpu");
    CHECK(h && strcmp(st_device_of(h), "cpu") == 0);
    st_tensor *h2 = h ? st_to(h, "cuda:0") : NULL;  /* and back: every byte kept */
    CHECK(h2 && strcmp(st_device_of(h2), "cuda:0") == 0);
    st_tensor *bad = h && h2 ? st_add(h, h2) : NULL;
    CHECK(bad == NULL && st_last_status() == ST_ERR_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "got cpu and cuda:0") != NULL, "message: %s", st_last_error());
    memset(back, 0, sizeof back);
    CHECK(h2 && st_to_host(h2, ST_F32, back, sizeof back) == ST_OK && memcmp(back, d, sizeof d) == 0);
    st_tensor *z = st_zeros(ST_F32, 1, (int64_t[]){4});   /* unbound: follows the default */
    CHECK(z && strcmp(st_device_of(z), "cuda:0") == 0);
    CHECK(st_set_default_device("cpu") == ST_OK && strcmp(st_device_of(z), "cpu") == 0);
    st_release(z);
    st_release(h2);
    st_release(h);
    st_release(g);
    st_stats(&s);
    CHECK_EQ_INT(s.device_bytes_in_use, 0);
    CHECK(s.device_bytes_reserved > 0);              /* freed blocks stay cached ... */
    st_empty_cache();
    st_stats(&s);
    CHECK_EQ_INT(s.device_bytes_reserved, 0);        /* ... until empty_cache */
    st_shutdown();
}

TEST(fake_driver_transfers) { fake_cuda_spawn(); }

int main(int argc, char **argv) {
    fake_cuda_child(argc, argv, fake_body);   /* the child of fake_driver_transfers */
    has_gpu = st_cuda_device_count() > 0;
    RUN(names);
    RUN(mixed_devices_are_refused);
    RUN(unbound_values_follow_their_use);
    if (has_gpu) {
        RUN(round_trip_on_gpu);
    } else {
        RUN(no_gpu_is_a_clear_error);
        /* a GPU is usable only with NVRTC beside its driver (runtime/device.c) */
        if (nvrtc_load() == ST_OK) RUN(fake_driver_transfers);
        else printf("SKIP fake_driver_transfers: no libnvrtc: %s\n", st_last_error());
    }
    st_shutdown();
    TEST_MAIN_END();
}
