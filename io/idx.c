/*
 * idx.c — st_read_idx: IDX files (the MNIST format), gzip-compressed or plain.
 *
 * Format: bytes 0x00 0x00, a type byte (0x08 ubyte, 0x09 byte, 0x0B short, 0x0C int, 0x0D float,
 * 0x0E double), a dim count; then one big-endian uint32 per dim; then the data, big-endian, C order.
 * Integer data loads as i32, float as f32, double as f64.
 *
 * Invariants: nothing is allocated in proportion to what the header claims before the data is
 * there (the raw buffer grows as bytes arrive, so a lying header cannot make us allocate gigabytes);
 * the element count is checked for overflow; a file with fewer or more data bytes than its dims say
 * is refused (ST_ERR_IO, naming the file, the expected and the actual sizes). zlib's gzread reads
 * plain files as they are, so one path serves both. Only a regular file is read (a FIFO is refused
 * without blocking: base_open_regular).
 */
#include "io/io.h"

#include <errno.h>
#include <limits.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_CHUNK ((size_t)1 << 20)

typedef struct {
    unsigned char code;
    const char *name;
    size_t size;      /* bytes per element in the file */
    st_dtype dt;      /* what it loads as */
} idx_type;

static const idx_type idx_types[] = {
    {0x08, "ubyte", 1, ST_I32}, {0x09, "byte", 1, ST_I32},  {0x0B, "short", 2, ST_I32},
    {0x0C, "int", 4, ST_I32},   {0x0D, "float", 4, ST_F32}, {0x0E, "double", 8, ST_F64},
};

/* Reads up to n bytes; returns the count read (< n only at the end of the data) or -1 on an error
 * (message set). */
static int64_t idx_read(gzFile f, const char *path, void *dst, size_t n) {
    size_t got = 0;
    while (got < n) {
        size_t want = n - got;
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30;
        int r = gzread(f, (char *)dst + got, (unsigned)want);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            st_error(ST_ERR_IO, "read_idx: %s: %s", path, zerr == Z_ERRNO ? strerror(errno) : msg);
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    if (got < n) {
        /* A gzip stream cut short reads as a short count; gzerror tells it from a clean end. */
        int zerr;
        const char *msg = gzerror(f, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END) {
            st_error(ST_ERR_IO, "read_idx: %s: %s", path, zerr == Z_ERRNO ? strerror(errno) : msg);
            return -1;
        }
    }
    return (int64_t)got;
}

static uint64_t be_u(const unsigned char *p, size_t n) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++) v = (v << 8) | p[k];
    return v;
}

/* Converts n big-endian elements of type ty at raw into dst (of ty->dt). */
static void idx_convert(const idx_type *ty, const unsigned char *raw, int64_t n, void *dst) {
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *p = raw + (size_t)i * ty->size;
        switch (ty->code) {
        case 0x08: ((int32_t *)dst)[i] = p[0]; break;
        case 0x09: ((int32_t *)dst)[i] = (int8_t)p[0]; break;
        case 0x0B: ((int32_t *)dst)[i] = (int16_t)(uint16_t)be_u(p, 2); break;
        case 0x0C: ((int32_t *)dst)[i] = (int32_t)(uint32_t)be_u(p, 4); break;
        case 0x0D: {
            uint32_t u = (uint32_t)be_u(p, 4);
            float f;
            memcpy(&f, &u, 4);
            ((float *)dst)[i] = f;
            break;
        }
        case 0x0E: {
            uint64_t u = be_u(p, 8);
            double d;
            memcpy(&d, &u, 8);
            ((double *)dst)[i] = d;
            break;
        }
        default: ST_ASSERT(0);
        }
    }
}

/* The body of st_read_idx on an open file; raw buffer returned in *rawp for the caller to free. */
static st_tensor *idx_read_file(gzFile f, const char *path, unsigned char **rawp) {
    unsigned char head[4];
    int64_t got = idx_read(f, path, head, 4);
    if (got < 0) return NULL;
    if (got < 4) {
        st_error(ST_ERR_IO, "read_idx: %s: file too short (%lld bytes) for the 4-byte IDX magic", path, (long long)got);
        return NULL;
    }
    if (head[0] != 0 || head[1] != 0) {
        st_error(ST_ERR_IO, "read_idx: %s: bad magic %02x %02x (an IDX file starts with 00 00): not an IDX file",
                 path, head[0], head[1]);
        return NULL;
    }
    const idx_type *ty = NULL;
    for (size_t k = 0; k < sizeof idx_types / sizeof idx_types[0]; k++)
        if (idx_types[k].code == head[2]) ty = &idx_types[k];
    if (!ty) {
        st_error(ST_ERR_IO, "read_idx: %s: unknown data type 0x%02x (0x08 0x09 0x0B 0x0C 0x0D 0x0E)", path, head[2]);
        return NULL;
    }
    int nd = head[3];
    if (nd > ST_MAX_DIMS) {
        st_error(ST_ERR_IO, "read_idx: %s: %d dims (at most %d)", path, nd, ST_MAX_DIMS);
        return NULL;
    }
    unsigned char dims[4 * ST_MAX_DIMS];
    got = idx_read(f, path, dims, 4 * (size_t)nd);
    if (got < 0) return NULL;
    if (got < 4 * nd) {
        st_error(ST_ERR_IO, "read_idx: %s: truncated header: %d dims need %d bytes, got %lld", path, nd, 4 * nd,
                 (long long)got);
        return NULL;
    }
    int64_t shape[ST_MAX_DIMS], numel = 1;
    int zero = 0, overflow = 0;
    for (int d = 0; d < nd; d++) {
        shape[d] = (int64_t)be_u(dims + 4 * d, 4);
        if (shape[d] == 0) zero = 1;
        else if (__builtin_mul_overflow(numel, shape[d], &numel)) overflow = 1;
    }
    char sb[160];
    uint64_t want = 0;
    if (zero) numel = 0;
    else if (overflow || __builtin_mul_overflow((uint64_t)numel, (uint64_t)ty->size, &want) ||
             want > (uint64_t)SIZE_MAX / 2) {
        st_error(ST_ERR_IO, "read_idx: %s: shape %s is too large", path, st_shape_str(nd, shape, sb, sizeof sb));
        return NULL;
    }
    /* Grow the raw buffer as data arrives: memory follows the real file, not the header's claim. */
    size_t cap = want < IDX_CHUNK ? (size_t)want : IDX_CHUNK, have = 0;
    unsigned char *raw = st_malloc(cap ? cap : 1);
    if (!raw) return NULL;
    *rawp = raw;
    for (;;) {
        got = idx_read(f, path, raw + have, cap - have);
        if (got < 0) return NULL;
        have += (size_t)got;
        if (have < cap || cap == want) break;
        size_t ncap = cap * 2 < want ? cap * 2 : (size_t)want;
        unsigned char *r2 = st_realloc(raw, ncap);
        if (!r2) return NULL;
        *rawp = raw = r2;
        cap = ncap;
    }
    if (have < want) {
        st_error(ST_ERR_IO, "read_idx: %s: truncated data: shape %s of %s needs %llu bytes, the file has %llu", path,
                 st_shape_str(nd, shape, sb, sizeof sb), ty->name, (unsigned long long)want,
                 (unsigned long long)have);
        return NULL;
    }
    unsigned char extra[256];
    got = idx_read(f, path, extra, sizeof extra);
    if (got < 0) return NULL;
    if (got > 0) {
        st_error(ST_ERR_IO, "read_idx: %s: %s%lld bytes of trailing data after the %llu bytes that shape %s of %s needs",
                 path, got == (int64_t)sizeof extra ? "at least " : "", (long long)got, (unsigned long long)want,
                 st_shape_str(nd, shape, sb, sizeof sb), ty->name);
        return NULL;
    }
    st_tensor *t = st_empty_host(ty->dt, nd, shape);
    if (!t) return NULL;
    if (numel) idx_convert(ty, raw, numel, t->storage->node->buf->data);
    return t;
}

st_tensor *st_read_idx(const char *path) {
    st_runtime_init();
    if (!path || !*path) {
        st_error(ST_ERR_ARG, "read_idx: empty path");
        return NULL;
    }
    /* Opened by us, not by gzopen: a FIFO or a device would block an ordinary open forever. */
    uint64_t size;
    unsigned mode;
    int fd = base_open_regular(path, &size, &mode);
    if (fd < 0) {
        if (fd == -2) st_error(ST_ERR_IO, "read_idx: %s: is %s, not a regular file", path, base_file_kind(mode));
        else st_error(ST_ERR_IO, "read_idx: %s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    errno = 0;
    gzFile f = gzdopen(fd, "rb"); /* owns fd from now on */
    if (!f) {
        st_error(ST_ERR_IO, "read_idx: %s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
        close(fd);
        return NULL;
    }
    unsigned char *raw = NULL;
    st_tensor *t = idx_read_file(f, path, &raw);
    st_free(raw);
    gzclose(f);
    return t;
}
