/*
 * test_io.c — checkpoints (safetensors) and IDX files, through the public API.
 *
 * safetensors: round trip of every dtype with ordinary, 0-d and empty shapes; strided views saved
 * in C order; the exact bytes we write (checked against a file spelled out here) and a hand-written
 * file with escapes and padding read back; metadata; malformed files refused with ST_ERR_IO and a
 * message naming the file (every prefix of a valid file, bad header sizes, bad JSON, bad entries,
 * overlaps, overflowing shapes, random byte flips); a failed save (missing directory, target is a
 * directory, injected out-of-memory at every allocation) leaves the old file intact and no temporary
 * file behind; out-of-memory at every allocation of a load is an error, never a crash or a leak.
 * IDX: every data type, plain and gzip (written here with zlib), truncated / trailing / garbage
 * files refused, and the Fashion-MNIST test labels when the Debian package is installed.
 *
 * Invariant: every test releases what it made (bytes_in_use returns to where it started) and
 * removes its files.
 */
#include "test.h"
#include "io/io.h"

#include <dirent.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>


#define SH(...) ((const int64_t[]){__VA_ARGS__})

static char tmpdir[64];

static const char *tpath(const char *name) {
    static char buf[64][256]; /* rotating: a test uses fewer than 64 paths at once */
    static int k;
    k = (k + 1) % 64;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static uint64_t in_use(void) {
    st_stats_t s;
    st_stats(&s);
    return s.bytes_in_use;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return fclose(f) == 0 && w == n;
}

/* The whole file in a malloc'ed buffer (*n bytes), NULL when unreadable. */
static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)sz + 1);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

/* A safetensors file from a header text and data bytes (header size written as given). */
static int write_st(const char *path, const char *header, const void *data, size_t ndata) {
    size_t h = strlen(header);
    unsigned char *p = malloc(8 + h + ndata + 1);
    for (int k = 0; k < 8; k++) p[k] = (unsigned char)((uint64_t)h >> (8 * k));
    memcpy(p + 8, header, h);
    if (ndata) memcpy(p + 8 + h, data, ndata);
    int ok = write_file(path, p, 8 + h + ndata);
    free(p);
    return ok;
}

/* 1 when t holds exactly the bytes want (n bytes of t's dtype). */
static int same_bytes(st_tensor *t, const void *want, size_t n) {
    if (n != (size_t)st_numel(t) * st_dtype_size(st_dtype_of(t))) return 0;
    unsigned char *got = malloc(n ? n : 1);
    int ok = st_to_host(t, st_dtype_of(t), got, n) == ST_OK && (n == 0 || memcmp(got, want, n) == 0);
    free(got);
    return ok;
}

static int find_name(int n, char **names, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(names[k], name) == 0) return k;
    return -1;
}

static int count_temp_files(void) {
    DIR *d = opendir(tmpdir);
    int c = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp-")) c++;
    if (d) closedir(d);
    return c;
}

/* ---------------------------------------------------------------------------------------------- */

TEST(roundtrip_every_dtype) {
    uint64_t base = in_use();
    /* Raw bytes per dtype (f16/bf16 as bit patterns, bool as 0/1). */
    static const float f32[6] = {1.5f, -2, 0, 3.25f, 1e-20f, -1e30f};
    static const double f64[6] = {1.0 / 3, -2, 0, 1e300, -0.0, 7};
    static const int32_t i32[6] = {1, -2, INT32_MAX, INT32_MIN, 0, 42};
    static const int64_t i64[6] = {1, -2, INT64_MAX, INT64_MIN, 0, (int64_t)1 << 40};
    static const uint8_t bl[6] = {1, 0, 1, 1, 0, 0};
    static const uint16_t f16[6] = {0x3c00, 0xc000, 0x0000, 0x7bff, 0x0001, 0x3555};
    static const uint16_t bf16[6] = {0x3f80, 0xc000, 0x0000, 0x7f7f, 0x0001, 0x3eab};
    const void *data[ST_DTYPE_COUNT] = {f32, f64, i32, i64, bl, f16, bf16};
    const char *path = tpath("all.safetensors");
    enum { NSHAPES = 4 };
    st_tensor *ts[ST_DTYPE_COUNT * NSHAPES];
    char namebuf[ST_DTYPE_COUNT * NSHAPES][32];
    const char *names[ST_DTYPE_COUNT * NSHAPES];
    int n = 0;
    for (int dt = 0; dt < ST_DTYPE_COUNT; dt++) {
        ts[n] = st_from_data((st_dtype)dt, 2, SH(2, 3), data[dt]);
        ts[n + 1] = st_from_data((st_dtype)dt, 0, NULL, data[dt]);
        ts[n + 2] = st_from_data((st_dtype)dt, 2, SH(0, 3), data[dt]);
        ts[n + 3] = st_from_data((st_dtype)dt, 4, SH(1, 1, 5, 1), data[dt]);
        for (int k = 0; k < NSHAPES; k++) {
            snprintf(namebuf[n + k], sizeof namebuf[n + k], "%s.shape%d", st_dtype_name((st_dtype)dt), k);
            names[n + k] = namebuf[n + k];
            CHECK(ts[n + k] != NULL);
        }
        n += NSHAPES;
    }
    CHECK_EQ_INT(st_save(path, n, names, ts), ST_OK);
    int m = 0;
    char **lnames = NULL;
    st_tensor **lts = NULL;
    CHECK_EQ_INT(st_load(path, &m, &lnames, &lts), ST_OK);
    CHECK_EQ_INT(m, n);
    for (int k = 0; k < n && m == n; k++) {
        int j = find_name(m, lnames, names[k]);
        CHECK_MSG(j >= 0, "name %s missing", names[k]);
        if (j < 0) continue;
        st_dtype dt = st_dtype_of(ts[k]);
        CHECK_EQ_INT(st_dtype_of(lts[j]), dt);
        CHECK_EQ_INT(st_ndim(lts[j]), st_ndim(ts[k]));
        int64_t a[ST_MAX_DIMS], b[ST_MAX_DIMS];
        st_shape(ts[k], a);
        st_shape(lts[j], b);
        CHECK(memcmp(a, b, sizeof(int64_t) * (size_t)st_ndim(ts[k])) == 0);
        CHECK_MSG(same_bytes(lts[j], data[dt], (size_t)st_numel(ts[k]) * st_dtype_size(dt)), "data of %s", names[k]);
    }
    st_free_loaded(m, lnames, lts);
    for (int k = 0; k < n; k++) st_release(ts[k]);
    /* No tensors at all: a valid file too. */
    CHECK_EQ_INT(st_save(path, 0, NULL, NULL), ST_OK);
    CHECK_EQ_INT(st_load(path, &m, &lnames, &lts), ST_OK);
    CHECK_EQ_INT(m, 0);
    st_free_loaded(m, lnames, lts);
    unlink(path);
    CHECK_EQ_INT(in_use(), base);
}

TEST(views_saved_in_c_order) {
    uint64_t base = in_use();
    const char *path = tpath("views.safetensors");
    st_tensor *x = st_arange(0, 24, 1, ST_F32);
    st_tensor *r = st_reshape(x, 3, SH(2, 3, 4));
    st_tensor *v[4];
    v[0] = st_transpose(r, 0, 2);                /* (4, 3, 2) */
    v[1] = st_slice(r, 2, 1, 4, 2);              /* (2, 3, 2) */
    st_tensor *tmp = st_select(r, 1, 1);          /* (2, 4) */
    v[2] = st_expand(tmp, 3, SH(3, 2, 4));       /* broadcast: stride 0 */
    st_release(tmp);
    v[3] = st_add_s(v[0], 1); /* pending (lazy) work */
    const char *names[4] = {"t", "s", "e", "lazy"};
    CHECK_EQ_INT(st_save(path, 4, names, v), ST_OK);
    int m = 0;
    char **ln;
    st_tensor **lt;
    CHECK_EQ_INT(st_load(path, &m, &ln, &lt), ST_OK);
    CHECK_EQ_INT(m, 4);
    for (int k = 0; k < 4 && m == 4; k++) {
        int j = find_name(m, ln, names[k]);
        CHECK(j >= 0);
        if (j < 0) continue;
        size_t nb = (size_t)st_numel(v[k]) * 4;
        float *want = malloc(nb);
        CHECK_EQ_INT(st_to_host(v[k], ST_F32, want, nb), ST_OK);
        CHECK_MSG(same_bytes(lt[j], want, nb), "view %s", names[k]);
        CHECK(st_is_contiguous(lt[j]));
        free(want);
    }
    st_free_loaded(m, ln, lt);
    for (int k = 0; k < 4; k++) st_release(v[k]);
    st_release(r);
    st_release(x);
    unlink(path);
    CHECK_EQ_INT(in_use(), base);
}

/* The format, byte for byte: entries by element size then name, offsets contiguous from 0, the
 * header padded with spaces to a multiple of 8, metadata first. */
TEST(exact_bytes_written) {
    const char *path = tpath("exact.safetensors");
    float a[1] = {1.5f};
    int32_t b[2] = {1, -2};
    double c = 0.25;
    st_tensor *ts[3] = {st_from_data(ST_I32, 1, SH(2), b), st_from_data(ST_F32, 1, SH(1), a),
                        st_from_data(ST_F64, 0, NULL, &c)};
    const char *names[3] = {"b", "a", "c"};
    const char *keys[2] = {"z", "format"}, *values[2] = {"1", "pt"};
    CHECK_EQ_INT(st_save_meta(path, 3, names, ts, 2, keys, values), ST_OK);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\",\"z\":\"1\"},"
                      "\"c\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                      "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[12,20]}}";
    size_t h = strlen(hdr), hp = (h + 7) / 8 * 8;
    unsigned char want[512];
    memset(want, 0, sizeof want);
    for (int k = 0; k < 8; k++) want[k] = (unsigned char)((uint64_t)hp >> (8 * k));
    memcpy(want + 8, hdr, h);
    memset(want + 8 + h, ' ', hp - h);
    memcpy(want + 8 + hp, &c, 8);
    memcpy(want + 8 + hp + 8, a, 4);
    memcpy(want + 8 + hp + 12, b, 8);
    size_t n = 0;
    unsigned char *got = read_file(path, &n);
    CHECK(got != NULL);
    CHECK_EQ_INT(n, 8 + hp + 20);
    CHECK_MSG(got && n == 8 + hp + 20 && memcmp(got, want, n) == 0, "bytes differ: header %.*s", got ? (int)(n - 8) : 0,
              got ? (const char *)got + 8 : "");
    free(got);
    /* Metadata comes back. */
    int m = 0, nm = 0;
    char **ln, **mk, **mv;
    st_tensor **lt;
    CHECK_EQ_INT(st_load_meta(path, &m, &ln, &lt, &nm, &mk, &mv), ST_OK);
    CHECK_EQ_INT(m, 3);
    CHECK_EQ_INT(nm, 2);
    int zk = nm == 2 ? (strcmp(mk[0], "z") == 0 ? 0 : 1) : 0;
    CHECK(nm == 2 && strcmp(mk[zk], "z") == 0 && strcmp(mv[zk], "1") == 0 && strcmp(mv[1 - zk], "pt") == 0);
    st_free_meta(nm, mk, mv);
    st_free_loaded(m, ln, lt);
    for (int k = 0; k < 3; k++) st_release(ts[k]);
    unlink(path);
}

/* A file written by hand: whitespace, escapes in names, unsorted offsets, gaps, padding, an extra
 * entry field, U8/I8/I16/U16 converted to i32. */
TEST(hand_written_file) {
    const char *path = tpath("hand.safetensors");
    unsigned char data[64];
    memset(data, 0xEE, sizeof data);
    float w[2] = {1.25f, -3};
    memcpy(data + 16, w, 8);                    /* "w\u00e9ight": [16, 24) */
    data[0] = 200; data[1] = 7;                 /* U8 [0, 2) */
    data[2] = 0xFF; data[3] = 0x80;             /* I8 [2, 4) */
    int16_t i16[2] = {-300, 300};
    memcpy(data + 4, i16, 4);                   /* I16 [4, 8) */
    uint16_t u16[2] = {65535, 1};
    memcpy(data + 8, u16, 4);                   /* U16 [8, 12) */
    const char *hdr =
        " {\n \"w\\u00e9ight\" : {\"shape\": [2], \"dtype\": \"F32\", \"data_offsets\": [16, 24], \"extra\": null},\n"
        "  \"q\\\"uote\\\\\": {\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
        "  \"i8\": {\"dtype\":\"I8\",\"shape\":[2, 1],\"data_offsets\":[2,4]},"
        "  \"i16\": {\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[4,8]},"
        "  \"u16\": {\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[8,12]},"
        "  \"empty\": {\"dtype\":\"F64\",\"shape\":[3, 0],\"data_offsets\":[12,12]},"
        "  \"__metadata__\": {\"k\\n\": \"v\\u2603\"}\n}      ";
    CHECK(write_st(path, hdr, data, sizeof data));
    int m = 0, nm = 0;
    char **ln, **mk, **mv;
    st_tensor **lt;
    CHECK_EQ_INT(st_load_meta(path, &m, &ln, &lt, &nm, &mk, &mv), ST_OK);
    CHECK_EQ_INT(m, 6);
    CHECK_EQ_INT(nm, 1);
    if (nm == 1) CHECK(strcmp(mk[0], "k\n") == 0 && strcmp(mv[0], "v\xe2\x98\x83") == 0);
    int j = find_name(m, ln, "w\xc3\xa9ight");
    CHECK(j >= 0 && st_dtype_of(lt[j]) == ST_F32 && same_bytes(lt[j], w, 8));
    int32_t want_u8[2] = {200, 7}, want_i8[2] = {-1, -128}, want_i16[2] = {-300, 300}, want_u16[2] = {65535, 1};
    j = find_name(m, ln, "q\"uote\\");
    CHECK(j >= 0 && st_dtype_of(lt[j]) == ST_I32 && same_bytes(lt[j], want_u8, 8));
    j = find_name(m, ln, "i8");
    CHECK(j >= 0 && st_ndim(lt[j]) == 2 && st_size(lt[j], 0) == 2 && same_bytes(lt[j], want_i8, 8));
    j = find_name(m, ln, "i16");
    CHECK(j >= 0 && same_bytes(lt[j], want_i16, 8));
    j = find_name(m, ln, "u16");
    CHECK(j >= 0 && same_bytes(lt[j], want_u16, 8));
    j = find_name(m, ln, "empty");
    CHECK(j >= 0 && st_dtype_of(lt[j]) == ST_F64 && st_numel(lt[j]) == 0 && st_size(lt[j], 0) == 3);
    st_free_meta(nm, mk, mv);
    st_free_loaded(m, ln, lt);
    unlink(path);
}

/* Loading path must fail with ST_ERR_IO, a message naming the file and containing what. */
static void expect_bad(const char *path, const char *what, int line) {
    int m = -1;
    char **ln = (char **)1;
    st_tensor **lt = (st_tensor **)1;
    st_clear_error();
    st_status s = st_load(path, &m, &ln, &lt);
    if (s != ST_ERR_IO) {
        TEST_FAILF("line %d: load gave status %d, expected ST_ERR_IO (%s) [%s]", line, (int)s, what, st_last_error());
        if (s == ST_OK) st_free_loaded(m, ln, lt);
        return;
    }
    if (m != 0 || ln != NULL || lt != NULL) TEST_FAILF("line %d: outputs not cleared on failure", line);
    if (!strstr(st_last_error(), path)) TEST_FAILF("line %d: message does not name the file: %s", line, st_last_error());
    if (what && !strstr(st_last_error(), what))
        TEST_FAILF("line %d: message '%s' does not contain '%s'", line, st_last_error(), what);
}

static void expect_bad_header(const char *header, size_t ndata, const char *what, int line) {
    const char *path = tpath("bad.safetensors");
    unsigned char data[64] = {0};
    write_st(path, header, data, ndata);
    expect_bad(path, what, line);
}
#define BAD_HEADER(h, nd, what) expect_bad_header(h, nd, what, __LINE__)

TEST(malformed_headers) {
    uint64_t base = in_use();
    BAD_HEADER("", 0, "unexpected end");
    BAD_HEADER("{", 0, "unterminated object");
    BAD_HEADER("[]", 0, "not a JSON object");
    BAD_HEADER("{\"a\":1}", 0, "not an object");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing \"data_offsets\"");
    BAD_HEADER("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "missing \"dtype\"");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing \"shape\"");
    BAD_HEADER("{\"a\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype is not a string");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4, "past the end");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "expected 8");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8, "overlap");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "overlap");
    BAD_HEADER("{\"a\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "\"U64\" is not supported");
    BAD_HEADER("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8, "F8_E4M3");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate key \"a\"");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 8,
               "overflow");
    BAD_HEADER("{\"a\":{\"dtype\":\"F64\",\"shape\":[3037000500,3037000500],\"data_offsets\":[0,4]}}", 8, "overflow");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 8, "non-negative");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 8, "non-negative integer");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 8, "non-negative");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 8, "9 dims");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 8, "data_offsets is not");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, "data_offsets is not");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8, "data_offsets is not");
    BAD_HEADER("{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 8, "shape is not an array");
    BAD_HEADER("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "NUL");
    BAD_HEADER("{\"__metadata__\":[1]}", 0, "\"__metadata__\" is not an object");
    BAD_HEADER("{\"__metadata__\":{\"k\":1}}", 0, "not a string");
    BAD_HEADER("{\"a\\q\":1}", 0, "bad escape");
    BAD_HEADER("{\"a\x01\":1}", 0, "control character");
    BAD_HEADER("{\"\\ud800\":1}", 0, "surrogate");
    BAD_HEADER("{\"\\udc00\":1}", 0, "surrogate");
    BAD_HEADER("{\"\\u12\"}", 0, "hex digit");
    BAD_HEADER("{\"a\xff\":1}", 0, "UTF-8");
    BAD_HEADER("{\"a\xc0\x80\":1}", 0, "UTF-8");
    BAD_HEADER("{\"a\":{}} x", 0, "trailing characters");
    BAD_HEADER("{\"a\" {}}", 0, "expected ':'");
    BAD_HEADER("{\"a\":{} \"b\":{}}", 0, "expected ','");
    BAD_HEADER("{a:1}", 0, "expected a string key");
    BAD_HEADER("{\"a\":tru}", 0, "unexpected character");
    BAD_HEADER("{\"a\":-}", 0, "bad number");
    BAD_HEADER("{\"a\":1.}", 0, "no digit after");
    BAD_HEADER("{\"a\":1e}", 0, "exponent");
    BAD_HEADER("{\"a\":01}", 0, "expected ','");
    BAD_HEADER("{\"a\":\"abc", 0, "unterminated string");
    /* Deep nesting: refused by the depth limit, without blowing the stack. */
    char deep[4096];
    strcpy(deep, "{\"a\":");
    for (int k = 0; k < 3000; k++) strcat(deep, "[");
    BAD_HEADER(deep, 0, "nested deeper");
    /* Not refused: other JSON values in unused places, an object with many keys. */
    const char *path = tpath("ok.safetensors");
    write_st(path, "{\"__metadata__\":{},\"a\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2],"
                   "\"x\":[true,false,null,-1.5e-3,{\"y\":[]}]}}", "\x01\x00", 2);
    int m;
    char **ln;
    st_tensor **lt;
    CHECK_EQ_INT(st_load(path, &m, &ln, &lt), ST_OK);
    CHECK_EQ_INT(m, 1);
    if (m == 1) CHECK(same_bytes(lt[0], "\x01\x00", 2));
    st_free_loaded(m, ln, lt);
    unlink(path);
    unlink(tpath("bad.safetensors"));
    CHECK_EQ_INT(in_use(), base);
}

/* Header sizes that lie, and every truncation of a valid file. */
TEST(malformed_sizes_and_truncation) {
    uint64_t base = in_use();
    const char *good = tpath("good.safetensors"), *bad = tpath("trunc.safetensors");
    float a[3] = {1, 2, 3};
    int64_t b[2] = {5, 6};
    st_tensor *ts[2] = {st_from_data(ST_F32, 1, SH(3), a), st_from_data(ST_I64, 2, SH(1, 2), b)};
    const char *names[2] = {"a", "b"};
    CHECK_EQ_INT(st_save(good, 2, names, ts), ST_OK);
    st_release(ts[0]);
    st_release(ts[1]);
    size_t n = 0;
    unsigned char *file = read_file(good, &n);
    CHECK(file && n > 8);
    for (size_t len = 0; file && len < n; len++) {
        write_file(bad, file, len);
        expect_bad(bad, NULL, (int)len);
        if (test_cur_failed) {
            TEST_FAILF("truncated at %zu of %zu bytes: %s", len, n, st_last_error());
            break;
        }
    }
    /* Header sizes: zero, larger than the file, past the 100 MB limit, 2^64 - 1. */
    uint64_t sizes[4] = {0, n, 200000000ull, UINT64_MAX};
    const char *msgs[4] = {"unexpected end", "larger than the rest", "exceeds the limit", "exceeds the limit"};
    for (int k = 0; k < 4 && file; k++) {
        unsigned char *copy = malloc(n);
        memcpy(copy, file, n);
        for (int j = 0; j < 8; j++) copy[j] = (unsigned char)(sizes[k] >> (8 * j));
        write_file(bad, copy, n);
        expect_bad(bad, msgs[k], k);
        free(copy);
    }
    /* Random byte flips: an error or a success, never a crash (ASan build checks the reads). */
    uint64_t rng = 12345;
    for (int it = 0; it < 3000 && file; it++) {
        unsigned char *copy = malloc(n);
        memcpy(copy, file, n);
        int flips = 1 + it % 4;
        for (int f = 0; f < flips; f++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)(rng >> 33) % n;
            copy[pos] = (unsigned char)(rng >> 20);
        }
        write_file(bad, copy, n);
        free(copy);
        int m;
        char **ln;
        st_tensor **lt;
        st_status s = st_load(bad, &m, &ln, &lt);
        if (s == ST_OK) st_free_loaded(m, ln, lt);
        else if (s != ST_ERR_IO) {
            TEST_FAILF("flip %d: status %d: %s", it, (int)s, st_last_error());
            break;
        }
    }
    /* Not a file: missing, a directory. */
    expect_bad(tpath("missing.safetensors"), "cannot open", 0);
    expect_bad(tmpdir, "not a regular file", 0);
    free(file);
    unlink(good);
    unlink(bad);
    CHECK_EQ_INT(in_use(), base);
}

/* The file is cut by "another process" after st_load opened it and took its size, before it read
 * anything (io_load_test_hook): at every stage of the file the load is an error naming the file,
 * not a SIGBUS (as copying out of a mapping was), and nothing leaks. */
static const char *trunc_path;
static off_t trunc_at;
static void truncate_hook(const char *path) {
    if (trunc_path && strcmp(path, trunc_path) == 0 && truncate(path, trunc_at) != 0) trunc_at = -1;
}

TEST(truncated_while_loading) {
    uint64_t base = in_use();
    const char *path = tpath("cut.safetensors");
    enum { NA = 1 << 16 };
    float *a = malloc(NA * sizeof *a);
    for (int k = 0; k < NA; k++) a[k] = (float)k;
    uint8_t b[5] = {1, 0, 1, 1, 0};
    st_tensor *ts[2] = {st_from_data(ST_F32, 1, SH(NA), a), st_from_data(ST_BOOL, 1, SH(5), b)};
    const char *names[2] = {"a", "b"};
    CHECK_EQ_INT(st_save(path, 2, names, ts), ST_OK);
    st_release(ts[0]);
    st_release(ts[1]);
    free(a);
    size_t n = 0;
    unsigned char *file = read_file(path, &n);
    CHECK(file && n > 8 + 4 * (size_t)NA);
    if (!file) return;
    uint64_t h = 0;
    for (int k = 7; k >= 0; k--) h = (h << 8) | file[k];
    /* nothing left, a part of the size, half the header, the header only, a page into the data,
     * one byte short */
    off_t cuts[6] = {0, 5, (off_t)(8 + h / 2), (off_t)(8 + h), (off_t)(8 + h + 4096), (off_t)n - 1};
    io_load_test_hook = truncate_hook;
    trunc_path = path;
    for (int k = 0; k < 6; k++) {
        write_file(path, file, n);
        trunc_at = cuts[k];
        expect_bad(path, "truncated", k);
        CHECK_MSG(trunc_at >= 0, "truncate failed");
        if (test_cur_failed) break;
    }
    io_load_test_hook = NULL;
    trunc_path = NULL;
    /* Untouched, the same file loads. */
    write_file(path, file, n);
    int m = 0;
    char **ln = NULL;
    st_tensor **lt = NULL;
    CHECK_EQ_INT(st_load(path, &m, &ln, &lt), ST_OK);
    CHECK_EQ_INT(m, 2);
    st_free_loaded(m, ln, lt);
    free(file);
    remove(path);
    CHECK_EQ_INT(in_use(), base);
}

/* A BOOL byte other than 0 or 1 in a file loads as 1 (true), so sums and comparisons see 0/1. */
TEST(bool_bytes_normalised) {
    uint64_t base = in_use();
    const char *path = tpath("bool.safetensors");
    const unsigned char data[4] = {2, 0, 255, 1};
    CHECK(write_st(path, "{\"b\":{\"dtype\":\"BOOL\",\"shape\":[4],\"data_offsets\":[0,4]}}", data, 4));
    int m = 0;
    char **ln = NULL;
    st_tensor **lt = NULL;
    CHECK_EQ_INT(st_load(path, &m, &ln, &lt), ST_OK);
    if (m == 1) {
        static const unsigned char want[4] = {1, 0, 1, 1};
        CHECK(same_bytes(lt[0], want, 4));
        st_tensor *s = st_sum(lt[0], 0, NULL, 0);
        int64_t v = -1;
        CHECK(s && st_item_i64(s, &v) == ST_OK);
        CHECK_EQ_INT(v, 3); /* was 258 */
        st_tensor *e = st_eq(lt[0], lt[0]);
        st_tensor *all = e ? st_sum(e, 0, NULL, 0) : NULL;
        CHECK(all && st_item_i64(all, &v) == ST_OK && v == 4);
        st_release(all);
        st_release(e);
        st_release(s);
    }
    st_free_loaded(m, ln, lt);
    remove(path);
    CHECK_EQ_INT(in_use(), base);
}

TEST(save_refuses_bad_arguments) {
    const char *path = tpath("args.safetensors");
    float a = 1;
    st_tensor *t = st_from_data(ST_F32, 0, NULL, &a);
    st_tensor *ts[2] = {t, t};
    const char *dup[2] = {"x", "x"}, *meta[1] = {"__metadata__"}, *badutf[1] = {"\xff"};
    CHECK_EQ_INT(st_save(path, 2, dup, ts), ST_ERR_ARG);
    CHECK(strstr(st_last_error(), "duplicate") != NULL);
    CHECK_EQ_INT(st_save(path, 1, meta, ts), ST_ERR_ARG);
    CHECK_EQ_INT(st_save(path, 1, badutf, ts), ST_ERR_ARG);
    st_tensor *nul[1] = {NULL};
    CHECK_EQ_INT(st_save(path, 1, dup, nul), ST_ERR_ARG);
    const char *k2[2] = {"k", "k"}, *v2[2] = {"1", "2"};
    CHECK_EQ_INT(st_save_meta(path, 1, dup, ts, 2, k2, v2), ST_ERR_ARG);
    CHECK(access(path, F_OK) != 0); /* nothing was created */
    CHECK_EQ_INT(count_temp_files(), 0);
    st_release(t);
}

/* A save that fails leaves the old file as it was and no temporary file. */
/* 1 when the file at path loads as one tensor "w" equal to want (4 floats). */
static int holds(const char *path, const float *want) {
    int m = 0;
    char **ln = NULL;
    st_tensor **lt = NULL;
    if (st_load(path, &m, &ln, &lt) != ST_OK) return 0;
    float got[4];
    int ok = m == 1 && strcmp(ln[0], "w") == 0 && st_numel(lt[0]) == 4 &&
             st_to_host(lt[0], ST_F32, got, sizeof got) == ST_OK && memcmp(got, want, sizeof got) == 0;
    st_free_loaded(m, ln, lt);
    return ok;
}

static int is_type(const char *path, unsigned type) {
    struct stat st;
    return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == type;
}

/* save writes regular files only: a symbolic link is followed (the link stays, its target gets the
 * new data, atomically), an existing file keeps its mode, and a FIFO, a directory, a socket or a
 * device node is refused with a message naming the path and what it is, and left as it was. */
TEST(save_to_links_and_special_files) {
    uint64_t base = in_use();
    float a[4] = {1, 2, 3, 4}, b[4] = {9, 8, 7, 6};
    st_tensor *ta = st_from_data(ST_F32, 1, SH(4), a), *tb = st_from_data(ST_F32, 1, SH(4), b);
    const char *names[1] = {"w"};
    const char *real = tpath("real.safetensors"), *link = tpath("link.safetensors");
    const char *chain = tpath("chain.safetensors"), *dangling = tpath("dangling.safetensors");
    const char *created = tpath("created.safetensors");
    char abs_link[300];
    snprintf(abs_link, sizeof abs_link, "%s", link);

    /* A relative link, and a chain of an absolute link to it: the target is replaced. */
    CHECK_EQ_INT(st_save(real, 1, names, &ta), ST_OK);
    CHECK(symlink("real.safetensors", link) == 0 && symlink(abs_link, chain) == 0);
    CHECK_EQ_INT(st_save(link, 1, names, &tb), ST_OK);
    CHECK(is_type(link, S_IFLNK) && is_type(real, S_IFREG));
    CHECK(holds(real, b));
    CHECK_EQ_INT(st_save(chain, 1, names, &ta), ST_OK);
    CHECK(is_type(chain, S_IFLNK) && is_type(link, S_IFLNK) && holds(real, a));
    char buf[300] = "";
    CHECK(readlink(link, buf, sizeof buf - 1) > 0 && strcmp(buf, "real.safetensors") == 0);
    /* A dangling link: the file it names is created. */
    CHECK(symlink("created.safetensors", dangling) == 0);
    CHECK_EQ_INT(st_save(dangling, 1, names, &tb), ST_OK);
    CHECK(is_type(dangling, S_IFLNK) && is_type(created, S_IFREG) && holds(created, b));
    /* A loop of links. */
    const char *l1 = tpath("loop1"), *l2 = tpath("loop2");
    CHECK(symlink("loop2", l1) == 0 && symlink("loop1", l2) == 0);
    CHECK_EQ_INT(st_save(l1, 1, names, &ta), ST_ERR_IO);
    CHECK_MSG(strstr(st_last_error(), "symbolic links"), "message: %s", st_last_error());

    /* Modes: a 0600 file stays 0600, a 0640 one 0640. */
    const unsigned modes[2] = {0600, 0640};
    for (int k = 0; k < 2; k++) {
        CHECK(chmod(real, modes[k]) == 0);
        CHECK_EQ_INT(st_save(real, 1, names, &tb), ST_OK);
        struct stat st;
        CHECK(stat(real, &st) == 0);
        CHECK_MSG((st.st_mode & 07777) == modes[k], "mode %o after saving over a %o file", st.st_mode & 07777, modes[k]);
        CHECK(holds(real, b));
        CHECK_EQ_INT(st_save(link, 1, names, &ta), ST_OK); /* through the link too */
        CHECK(stat(real, &st) == 0 && (st.st_mode & 07777) == modes[k] && holds(real, a));
    }

    /* Refused: a FIFO (alarm: a save that opened it would block), a link to it, a socket, a device. */
    const char *fifo = tpath("fifo.safetensors"), *tofifo = tpath("tofifo.safetensors");
    CHECK(mkfifo(fifo, 0600) == 0 && symlink("fifo.safetensors", tofifo) == 0);
    alarm(20);
    CHECK_EQ_INT(st_save(fifo, 1, names, &ta), ST_ERR_IO);
    CHECK_MSG(strstr(st_last_error(), fifo) && strstr(st_last_error(), "is a FIFO"), "message: %s", st_last_error());
    CHECK_EQ_INT(st_save(tofifo, 1, names, &ta), ST_ERR_IO);
    CHECK_MSG(strstr(st_last_error(), tofifo) && strstr(st_last_error(), "which is a FIFO"), "message: %s",
              st_last_error());
    alarm(0);
    CHECK(is_type(fifo, S_IFIFO) && is_type(tofifo, S_IFLNK));
    const char *sock = tpath("sock");
    int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    CHECK(sfd >= 0 && bind(sfd, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK_EQ_INT(st_save(sock, 1, names, &ta), ST_ERR_IO);
    CHECK_MSG(strstr(st_last_error(), "is a socket"), "message: %s", st_last_error());
    CHECK(is_type(sock, S_IFSOCK));
    if (sfd >= 0) close(sfd);
    /* A character device with /dev/null's numbers, made here (needs root and CAP_MKNOD). */
    const char *dev = tpath("null");
    if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        CHECK_EQ_INT(st_save(dev, 1, names, &ta), ST_ERR_IO);
        CHECK_MSG(strstr(st_last_error(), "is a character device"), "message: %s", st_last_error());
        CHECK(is_type(dev, S_IFCHR));
        remove(dev);
    } else {
        printf("  (save_to_links_and_special_files: no device node test: mknod: %s)\n", strerror(errno));
    }
    CHECK_EQ_INT(count_temp_files(), 0);
    const char *all[] = {real, link, chain, dangling, created, l1, l2, fifo, tofifo, sock};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) remove(all[k]);
    st_release(ta);
    st_release(tb);
    CHECK_EQ_INT(in_use(), base);
}

TEST(failed_save_keeps_old_file) {
    uint64_t base = in_use();
    const char *path = tpath("keep.safetensors"), *other = tpath("new.safetensors");
    float a[4] = {1, 2, 3, 4}, b[4] = {9, 8, 7, 6};
    st_tensor *ta = st_from_data(ST_F32, 1, SH(4), a);
    st_tensor *tb = st_from_data(ST_F32, 2, SH(2, 2), b);
    const char *names[1] = {"w"};
    CHECK_EQ_INT(st_save(path, 1, names, &ta), ST_OK);
    CHECK_EQ_INT(st_save(other, 1, names, &tb), ST_OK);
    size_t n_old = 0, n_new = 0, n = 0;
    unsigned char *old = read_file(path, &n_old), *neu = read_file(other, &n_new);
    /* A path in a missing directory; a path that is a directory. */
    CHECK_EQ_INT(st_save(tpath("nodir/x.safetensors"), 1, names, &tb), ST_ERR_IO);
    CHECK(strstr(st_last_error(), "nodir") != NULL);
    mkdir(tpath("adir"), 0755);
    CHECK_EQ_INT(st_save(tpath("adir"), 1, names, &tb), ST_ERR_IO);
    CHECK(strstr(st_last_error(), "is a directory") != NULL);
    rmdir(tpath("adir"));
    CHECK_EQ_INT(count_temp_files(), 0);
    /* Out of memory at every allocation of a save: the file is the old one or the new one. */
    int succeeded = 0;
    for (int k = 1; k < 200 && old && neu; k++) {
        st_debug_fail_alloc(k);
        st_status s = st_save(path, 1, names, &tb);
        st_debug_fail_alloc(0);
        unsigned char *now = read_file(path, &n);
        if (s == ST_OK) {
            CHECK_MSG(n == n_new && memcmp(now, neu, n) == 0, "alloc %d: success but not the new content", k);
            succeeded = 1;
            free(now);
            write_file(path, old, n_old);
            break;
        }
        CHECK_MSG(s == ST_ERR_OOM, "alloc %d: status %d (%s)", k, (int)s, st_last_error());
        CHECK_MSG(now && n == n_old && memcmp(now, old, n) == 0, "alloc %d: old file changed (%zu vs %zu bytes; %s)", k, n, n_old, st_last_error());
        free(now);
        CHECK_EQ_INT(count_temp_files(), 0);
    }
    CHECK(succeeded);
    /* Not writable (only meaningful when not root: root writes anywhere). */
    if (geteuid() != 0) {
        chmod(tmpdir, 0555);
        CHECK_EQ_INT(st_save(path, 1, names, &tb), ST_ERR_IO);
        chmod(tmpdir, 0755);
        unsigned char *now = read_file(path, &n);
        CHECK(now && n == n_old && memcmp(now, old, n) == 0);
        free(now);
    }
    free(old);
    free(neu);
    st_release(ta);
    st_release(tb);
    unlink(path);
    unlink(other);
    CHECK_EQ_INT(in_use(), base);
}

/* Out of memory at every allocation of a load: an error or a success, no leak. */
TEST(load_out_of_memory) {
    const char *path = tpath("oom.safetensors");
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint8_t u[3] = {1, 2, 3};
    st_tensor *ts[2] = {st_from_data(ST_F32, 2, SH(2, 3), a), st_from_data(ST_BOOL, 1, SH(3), u)};
    const char *names[2] = {"a", "b"}, *k[1] = {"key"}, *v[1] = {"value"};
    CHECK_EQ_INT(st_save_meta(path, 2, names, ts, 1, k, v), ST_OK);
    st_release(ts[0]);
    st_release(ts[1]);
    uint64_t base = in_use();
    int ok = 0;
    for (int nth = 1; nth < 200 && !ok; nth++) {
        int m, nm;
        char **ln, **mk, **mv;
        st_tensor **lt;
        st_debug_fail_alloc(nth);
        st_status s = st_load_meta(path, &m, &ln, &lt, &nm, &mk, &mv);
        st_debug_fail_alloc(0);
        if (s == ST_OK) {
            ok = 1;
            CHECK_EQ_INT(m, 2);
            CHECK_EQ_INT(nm, 1);
            st_free_meta(nm, mk, mv);
            st_free_loaded(m, ln, lt);
        } else {
            CHECK_MSG(s == ST_ERR_OOM, "alloc %d: status %d (%s)", nth, (int)s, st_last_error());
        }
        CHECK_EQ_INT(in_use(), base);
    }
    CHECK(ok);
    unlink(path);
}

/* ---------------------------------------------------------------------------------------------- */
/* IDX */

/* An IDX image: magic, dims (big-endian), then raw data bytes as given. *n: its size. */
static unsigned char *idx_bytes(int type, int nd, const uint32_t *dims, const void *data, size_t ndata, size_t *n) {
    *n = 4 + 4 * (size_t)nd + ndata;
    unsigned char *p = malloc(*n + 1);
    p[0] = 0;
    p[1] = 0;
    p[2] = (unsigned char)type;
    p[3] = (unsigned char)nd;
    for (int d = 0; d < nd; d++)
        for (int k = 0; k < 4; k++) p[4 + 4 * d + k] = (unsigned char)(dims[d] >> (24 - 8 * k));
    if (ndata) memcpy(p + 4 + 4 * nd, data, ndata);
    return p;
}

static int write_gz(const char *path, const void *p, size_t n) {
    gzFile f = gzopen(path, "wb");
    if (!f) return 0;
    int ok = n == 0 || gzwrite(f, p, (unsigned)n) == (int)n;
    return gzclose(f) == Z_OK && ok;
}

TEST(idx_every_type_plain_and_gzip) {
    uint64_t base = in_use();
    const char *plain = tpath("x.idx"), *gz = tpath("x.idx.gz");
    /* ubyte (2, 3) */
    unsigned char ub[6] = {0, 1, 127, 128, 200, 255};
    int32_t want_ub[6] = {0, 1, 127, 128, 200, 255}, want_b[6] = {0, 1, 127, -128, -56, -1};
    /* short, int big-endian */
    unsigned char sh[4] = {0xFF, 0x38, 0x01, 0x2C};          /* -200, 300 */
    int32_t want_sh[2] = {-200, 300};
    unsigned char in[8] = {0x80, 0, 0, 0, 0x00, 0x01, 0xE2, 0x40}; /* INT32_MIN, 123456 */
    int32_t want_in[2] = {INT32_MIN, 123456};
    unsigned char fl[8] = {0x3F, 0xC0, 0, 0, 0xC0, 0x20, 0, 0};   /* 1.5, -2.5 */
    float want_fl[2] = {1.5f, -2.5f};
    unsigned char db[8] = {0x3F, 0xD0, 0, 0, 0, 0, 0, 0};         /* 0.25 */
    double want_db[1] = {0.25};
    struct {
        int type, nd;
        uint32_t dims[3];
        const void *data;
        size_t ndata;
        st_dtype dt;
        const void *want;
        size_t nwant;
    } cases[] = {
        {0x08, 2, {2, 3}, ub, 6, ST_I32, want_ub, 24},
        {0x09, 3, {3, 1, 2}, ub, 6, ST_I32, want_b, 24},
        {0x0B, 1, {2}, sh, 4, ST_I32, want_sh, 8},
        {0x0C, 1, {2}, in, 8, ST_I32, want_in, 8},
        {0x0D, 2, {1, 2}, fl, 8, ST_F32, want_fl, 8},
        {0x0E, 0, {0}, db, 8, ST_F64, want_db, 8},
        {0x08, 2, {0, 5}, NULL, 0, ST_I32, NULL, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n;
        unsigned char *img = idx_bytes(cases[c].type, cases[c].nd, cases[c].dims, cases[c].data, cases[c].ndata, &n);
        for (int z = 0; z < 2; z++) {
            const char *path = z ? gz : plain;
            CHECK(z ? write_gz(path, img, n) : write_file(path, img, n));
            st_tensor *t = st_read_idx(path);
            CHECK_MSG(t != NULL, "case %zu %s: %s", c, z ? "gz" : "plain", st_last_error());
            if (!t) continue;
            CHECK_EQ_INT(st_dtype_of(t), cases[c].dt);
            CHECK_EQ_INT(st_ndim(t), cases[c].nd);
            for (int d = 0; d < cases[c].nd; d++) CHECK_EQ_INT(st_size(t, d), cases[c].dims[d]);
            CHECK_MSG(same_bytes(t, cases[c].want, cases[c].nwant), "case %zu data", c);
            st_release(t);
        }
        free(img);
    }
    unlink(plain);
    unlink(gz);
    CHECK_EQ_INT(in_use(), base);
}

static void expect_idx_bad(const char *path, const char *what, int line) {
    st_clear_error();
    st_tensor *t = st_read_idx(path);
    if (t) {
        TEST_FAILF("line %d: read_idx succeeded, expected an error (%s)", line, what ? what : "");
        st_release(t);
        return;
    }
    if (st_last_status() != ST_ERR_IO) TEST_FAILF("line %d: status %d: %s", line, (int)st_last_status(), st_last_error());
    else if (!strstr(st_last_error(), path)) TEST_FAILF("line %d: message does not name the file: %s", line, st_last_error());
    else if (what && !strstr(st_last_error(), what))
        TEST_FAILF("line %d: message '%s' does not contain '%s'", line, st_last_error(), what);
}

/* A FIFO (nobody writing to it) given to read_idx or load is refused at once instead of blocking
 * in open() forever; alarm() turns a hang into a failure. */
TEST(fifo_refused) {
    const char *p = tpath("fifo");
    CHECK(mkfifo(p, 0600) == 0);
    alarm(20);
    st_clear_error();
    st_tensor *t = st_read_idx(p);
    CHECK(t == NULL && st_last_status() == ST_ERR_IO);
    CHECK_MSG(strstr(st_last_error(), p) && strstr(st_last_error(), "is a FIFO"), "message: %s", st_last_error());
    st_release(t);
    expect_bad(p, "is a FIFO", __LINE__);
    alarm(0);
    remove(p);
}

TEST(idx_malformed) {
    uint64_t base = in_use();
    const char *p = tpath("bad.idx"), *gz = tpath("bad.idx.gz");
    unsigned char data[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    uint32_t dims[2] = {3, 4};
    size_t n;
    unsigned char *img = idx_bytes(0x08, 2, dims, data, 12, &n);
    /* Every truncation, plain and gzip. */
    for (size_t len = 0; len < n; len++) {
        write_file(p, img, len);
        expect_idx_bad(p, NULL, (int)len);
        write_gz(gz, img, len);
        expect_idx_bad(gz, NULL, (int)len);
        if (test_cur_failed) break;
    }
    write_file(p, img, n - 1);
    expect_idx_bad(p, "needs 12 bytes, the file has 11", __LINE__);
    /* A gzip stream cut short (compressed bytes missing). */
    write_gz(gz, img, n);
    size_t gn;
    unsigned char *gzb = read_file(gz, &gn);
    write_file(gz, gzb, gn - 6);
    expect_idx_bad(gz, NULL, __LINE__);
    /* Corrupted compressed data. */
    if (gn > 14) gzb[12] ^= 0x55, gzb[13] ^= 0xAA;
    write_file(gz, gzb, gn);
    expect_idx_bad(gz, NULL, __LINE__);
    free(gzb);
    /* Trailing data. */
    unsigned char *longer = malloc(n + 3);
    memcpy(longer, img, n);
    memset(longer + n, 0, 3);
    write_file(p, longer, n + 3);
    expect_idx_bad(p, "3 bytes of trailing data", __LINE__);
    free(longer);
    /* Bad magic, unknown type, too many dims. */
    img[0] = 1;
    write_file(p, img, n);
    expect_idx_bad(p, "bad magic", __LINE__);
    img[0] = 0;
    img[2] = 0x0A;
    write_file(p, img, n);
    expect_idx_bad(p, "unknown data type 0x0a", __LINE__);
    img[2] = 0x08;
    img[3] = 9;
    write_file(p, img, n);
    expect_idx_bad(p, "9 dims", __LINE__);
    free(img);
    /* A header claiming a huge size: refused by the data check, without a huge allocation. */
    uint32_t big[3] = {0xFFFFFFFFu, 0xFFFFFFFFu, 2};
    img = idx_bytes(0x0E, 3, big, data, 12, &n);
    write_file(p, img, n);
    expect_idx_bad(p, "too large", __LINE__);
    free(img);
    uint32_t bigish[2] = {100000, 100000};
    img = idx_bytes(0x08, 2, bigish, data, 12, &n);
    write_file(p, img, n);
    expect_idx_bad(p, "truncated data", __LINE__);
    free(img);
    /* Garbage text, a missing file, a directory. */
    write_file(p, "hello, world", 12);
    expect_idx_bad(p, "bad magic", __LINE__);
    expect_idx_bad(tpath("nothere.idx"), "cannot open", __LINE__);
    expect_idx_bad(tmpdir, NULL, __LINE__);
    unlink(p);
    unlink(gz);
    CHECK_EQ_INT(in_use(), base);
}

TEST(fashion_mnist_labels) {
    const char *path = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
    if (access(path, R_OK) != 0) {
        printf("  (skipped: %s not installed; apt-get install dataset-fashion-mnist)\n", path);
        return;
    }
    st_tensor *t = st_read_idx(path);
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_INT(st_ndim(t), 1);
    CHECK_EQ_INT(st_size(t, 0), 10000);
    CHECK_EQ_INT(st_dtype_of(t), ST_I32);
    int32_t *v = malloc(10000 * 4);
    CHECK_EQ_INT(st_to_host(t, ST_I32, v, 10000 * 4), ST_OK);
    int32_t first[5] = {9, 2, 1, 1, 6};
    CHECK(memcmp(v, first, sizeof first) == 0);
    int counts[10] = {0};
    int in_range = 1;
    for (int i = 0; i < 10000; i++) {
        if (v[i] < 0 || v[i] > 9) in_range = 0;
        else counts[v[i]]++;
    }
    CHECK(in_range);
    for (int c = 0; c < 10; c++) CHECK_EQ_INT(counts[c], 1000);
    free(v);
    st_release(t);
}

int main(void) {
    st_set_poison(1);
    /* tmpfs when there is one: thousands of small files are written (slow on some disks). */
    snprintf(tmpdir, sizeof tmpdir, "%s/stitch_test_io_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(roundtrip_every_dtype);
    RUN(views_saved_in_c_order);
    RUN(exact_bytes_written);
    RUN(hand_written_file);
    RUN(malformed_headers);
    RUN(malformed_sizes_and_truncation);
    RUN(truncated_while_loading);
    RUN(bool_bytes_normalised);
    RUN(save_refuses_bad_arguments);
    RUN(failed_save_keeps_old_file);
    RUN(save_to_links_and_special_files);
    RUN(load_out_of_memory);
    RUN(idx_every_type_plain_and_gzip);
    RUN(idx_malformed);
    RUN(fifo_refused);
    RUN(fashion_mnist_labels);
    rmdir(tmpdir);
    st_shutdown();
    TEST_MAIN_END();
}
