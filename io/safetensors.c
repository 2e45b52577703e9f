/*
 * safetensors.c — checkpoints in the safetensors format (st_save, st_load and their metadata
 * variants st_save_meta, st_load_meta).
 *
 * Format: an 8-byte little-endian header size H, H bytes of JSON
 *   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...}
 * then the data section: raw little-endian C-order data, offsets relative to its start.
 *
 * Invariants:
 *  - Save never leaves a broken file at `path`: the file is written to a temporary file in the same
 *    directory, flushed, fsync'ed and renamed over path (atomic on POSIX); on any failure the
 *    temporary file is removed and an existing file at path is untouched.
 *  - Load never reads outside the file: the header size, every offset and every size are checked
 *    against the file size before any data is touched, and the JSON parser checks its position
 *    against the end of the header at every byte. The file is read with pread, not mapped: a file
 *    that another process truncates while we read it gives a short read and an error (a mapping
 *    would fault with SIGBUS). BOOL bytes are normalised to 0/1 as they are read. Anything malformed is ST_ERR_IO with a message
 *    "load: FILE: what is wrong"; out of memory stays ST_ERR_OOM.
 *  - What we write is what the reference writes: entries ordered by element size (largest first,
 *    so every tensor's data is aligned to its element size) then by name, data contiguous from 0,
 *    header padded with spaces so the data section starts at a multiple of 8.
 *
 * The JSON parser is a small one of our own: a tree of jval (objects keep keys in file order),
 * depth-limited, duplicate keys refused. Numbers are kept only when they are integers that fit in
 * int64 (the format needs no other numbers); other numbers parse but are flagged as non-integers.
 */
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format's data is little-endian)"
#endif


void (*io_load_test_hook)(const char *path);

#define ST_HEADER_MAX 100000000ull /* the reference implementation's limit */
#define JSON_DEPTH_MAX 64

/* ------------------------------------------------------------------------------------------------
 * dtype names
 * ---------------------------------------------------------------------------------------------- */

typedef enum { CONV_NONE, CONV_U8, CONV_I8, CONV_I16, CONV_U16 } st_conv;
typedef struct {
    const char *name;
    st_dtype dt;       /* the dtype it loads as */
    size_t file_size;  /* bytes per element in the file */
    st_conv conv;      /* conversion to dt, CONV_NONE: loads as itself */
} st_file_dtype;

static const st_file_dtype file_dtypes[] = {
    {"F32", ST_F32, 4, CONV_NONE},  {"F64", ST_F64, 8, CONV_NONE},   {"I32", ST_I32, 4, CONV_NONE},
    {"I64", ST_I64, 8, CONV_NONE},  {"BOOL", ST_BOOL, 1, CONV_NONE}, {"F16", ST_F16, 2, CONV_NONE},
    {"BF16", ST_BF16, 2, CONV_NONE}, {"U8", ST_I32, 1, CONV_U8},     {"I8", ST_I32, 1, CONV_I8},
    {"I16", ST_I32, 2, CONV_I16},   {"U16", ST_I32, 2, CONV_U16},
};
#define N_FILE_DTYPES (sizeof file_dtypes / sizeof file_dtypes[0])

/* The file name of a stitch dtype (the first entry that loads as itself). */
static const char *file_dtype_name(st_dtype dt) {
    for (size_t i = 0; i < N_FILE_DTYPES; i++)
        if (file_dtypes[i].conv == CONV_NONE && file_dtypes[i].dt == dt) return file_dtypes[i].name;
    return NULL;
}

static const st_file_dtype *file_dtype_lookup(const char *s, size_t len) {
    for (size_t i = 0; i < N_FILE_DTYPES; i++)
        if (strlen(file_dtypes[i].name) == len && memcmp(file_dtypes[i].name, s, len) == 0) return &file_dtypes[i];
    return NULL;
}

/* 1 when s[0..n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF); else 0 and *bad = offset. */
static int utf8_valid(const unsigned char *s, size_t n, size_t *bad) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned min, cp;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) { len = 2; min = 0x80; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; min = 0x800; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; min = 0x10000; cp = c & 0x07; }
        else goto fail;
        if (n - i < len) goto fail;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) goto fail;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto fail;
        i += len;
    }
    return 1;
fail:
    if (bad) *bad = i;
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * JSON: a tree of values; every jval is freeable at every point of its construction (zeroed first)
 * ---------------------------------------------------------------------------------------------- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype type;
    int is_int;              /* J_NUM: an integer that fits in int64 */
    int64_t i;               /* J_NUM with is_int */
    int b;                   /* J_BOOL */
    char *s;                 /* J_STR: decoded, NUL-terminated (may contain NULs: see slen) */
    size_t slen;
    struct jval *items;      /* J_ARR: elements; J_OBJ: values */
    char **keys;             /* J_OBJ: decoded keys (NUL-terminated) */
    size_t *klens;
    size_t n;
    int cap;
} jval;

typedef struct {
    const char *base, *p, *end;
    st_status fail;          /* ST_OK, ST_ERR_IO (syntax; msg/pos set) or ST_ERR_OOM */
    char msg[160];
    size_t pos;
} jparser;

static void jfree(jval *v) {
    if (v->type == J_STR) st_free(v->s);
    if (v->type == J_ARR || v->type == J_OBJ) {
        for (size_t k = 0; k < v->n; k++) {
            jfree(&v->items[k]);
            if (v->type == J_OBJ) st_free(v->keys[k]);
        }
        st_free(v->items);
        st_free(v->keys);
        st_free(v->klens);
    }
    memset(v, 0, sizeof *v);
}

static int jerr(jparser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jerr(jparser *P, const char *fmt, ...) {
    if (P->fail == ST_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(P->msg, sizeof P->msg, fmt, ap);
        va_end(ap);
        P->pos = (size_t)(P->p - P->base);
        P->fail = ST_ERR_IO;
    }
    return 0;
}

static int joom(jparser *P) {
    P->fail = ST_ERR_OOM;
    return 0;
}

static void jskip_ws(jparser *P) {
    while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r')) P->p++;
}

static int jhex4(jparser *P, unsigned *out) {
    if (P->end - P->p < 4) return jerr(P, "truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = P->p[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return jerr(P, "bad hex digit in \\u escape");
    }
    P->p += 4;
    *out = v;
    return 1;
}

/* Parses a string at P->p (the opening quote); *out and *len receive a new decoded copy. */
static int jstring(jparser *P, char **out, size_t *len) {
    P->p++; /* opening quote */
    const char *start = P->p;
    /* The decoded text is never longer than the raw text (\uXXXX: 6 bytes -> at most 3, a pair:
     * 12 -> 4), so the raw length bounds the allocation. Find the closing quote first. */
    const char *q = start;
    while (q < P->end && *q != '"') q += (*q == '\\' && q + 1 < P->end) ? 2 : 1;
    if (q >= P->end) return jerr(P, "unterminated string");
    char *s = st_malloc((size_t)(q - start) + 1);
    if (!s) return joom(P);
    size_t n = 0;
    while (P->p < q) {
        unsigned char c = (unsigned char)*P->p;
        if (c < 0x20) {
            st_free(s);
            return jerr(P, "control character 0x%02x in a string", c);
        }
        if (c != '\\') {
            s[n++] = (char)c;
            P->p++;
            continue;
        }
        P->p++;
        char e = *P->p++;
        switch (e) {
        case '"': s[n++] = '"'; break;
        case '\\': s[n++] = '\\'; break;
        case '/': s[n++] = '/'; break;
        case 'b': s[n++] = '\b'; break;
        case 'f': s[n++] = '\f'; break;
        case 'n': s[n++] = '\n'; break;
        case 'r': s[n++] = '\r'; break;
        case 't': s[n++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (!jhex4(P, &cp)) goto bad;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                jerr(P, "lone low surrogate \\u%04x", cp);
                goto bad;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (q - P->p < 6 || P->p[0] != '\\' || P->p[1] != 'u') {
                    jerr(P, "high surrogate \\u%04x without a low surrogate", cp);
                    goto bad;
                }
                P->p += 2;
                if (!jhex4(P, &lo)) goto bad;
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    jerr(P, "high surrogate \\u%04x followed by \\u%04x", cp, lo);
                    goto bad;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp < 0x80) s[n++] = (char)cp;
            else if (cp < 0x800) {
                s[n++] = (char)(0xC0 | (cp >> 6));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                s[n++] = (char)(0xE0 | (cp >> 12));
                s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                s[n++] = (char)(0xF0 | (cp >> 18));
                s[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            P->p--;
            jerr(P, "bad escape '\\%c' in a string", e >= 0x20 && e < 0x7f ? e : '?');
            goto bad;
        }
    }
    s[n] = 0;
    P->p = q + 1;
    *out = s;
    *len = n;
    return 1;
bad:
    st_free(s);
    return 0;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int jnumber(jparser *P, jval *v) {
    const char *p = P->p;
    int neg = 0, overflow = 0, frac = 0;
    uint64_t mag = 0;
    if (p < P->end && *p == '-') { neg = 1; p++; }
    if (p >= P->end || *p < '0' || *p > '9') return jerr(P, "bad number");
    if (*p == '0') p++;
    else
        while (p < P->end && *p >= '0' && *p <= '9') {
            unsigned d = (unsigned)(*p - '0');
            if (mag > (UINT64_MAX - d) / 10) overflow = 1;
            else mag = mag * 10 + d;
            p++;
        }
    if (p < P->end && *p == '.') {
        p++;
        frac = 1;
        if (p >= P->end || *p < '0' || *p > '9') { P->p = p; return jerr(P, "bad number: no digit after '.'"); }
        while (p < P->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < P->end && (*p == 'e' || *p == 'E')) {
        p++;
        frac = 1;
        if (p < P->end && (*p == '+' || *p == '-')) p++;
        if (p >= P->end || *p < '0' || *p > '9') { P->p = p; return jerr(P, "bad number: no digit in the exponent"); }
        while (p < P->end && *p >= '0' && *p <= '9') p++;
    }
    P->p = p;
    v->type = J_NUM;
    if (!frac && !overflow && mag <= (uint64_t)INT64_MAX) {
        v->is_int = 1;
        v->i = neg ? -(int64_t)mag : (int64_t)mag;
    }
    return 1;
}

static int jvalue(jparser *P, jval *v, int depth);

/* Appends a value (moved in) and key (owned, may be NULL for arrays) to container c. */
static int jappend(jparser *P, jval *c, jval *item, char *key, size_t klen) {
    if ((int64_t)c->n >= c->cap) { /* three arrays of one capacity: each grows to the same size */
        int cap = c->cap, ck = c->cap, cl = c->cap;
        if (BASE_GROW(c->items, cap, c->n + 1, 4) != ST_OK) return joom(P);
        if (c->type == J_OBJ &&
            (BASE_GROW(c->keys, ck, c->n + 1, 4) != ST_OK || BASE_GROW(c->klens, cl, c->n + 1, 4) != ST_OK))
            return joom(P);
        c->cap = cap;
    }
    c->items[c->n] = *item;
    if (c->type == J_OBJ) {
        c->keys[c->n] = key;
        c->klens[c->n] = klen;
    }
    c->n++;
    return 1;
}

typedef struct { const char *k; size_t len; } jkey;
static int jkey_cmp(const void *a, const void *b) {
    const jkey *x = a, *y = b;
    size_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->k, y->k, m);
    if (c) return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* Refuses an object with two equal keys (sorting: O(n log n) even for huge headers). */
static int jcheck_dups(jparser *P, const jval *o, const char *at) {
    if (o->n < 2) return 1;
    jkey *ks = st_malloc(o->n * sizeof *ks);
    if (!ks) return joom(P);
    for (size_t k = 0; k < o->n; k++) ks[k] = (jkey){o->keys[k], o->klens[k]};
    qsort(ks, o->n, sizeof *ks, jkey_cmp);
    for (size_t k = 1; k < o->n; k++)
        if (jkey_cmp(&ks[k - 1], &ks[k]) == 0) {
            const char *p = P->p;
            P->p = at;
            jerr(P, "duplicate key \"%.100s\" in an object", ks[k].k);
            P->p = p;
            st_free(ks);
            return 0;
        }
    st_free(ks);
    return 1;
}

static int jcontainer(jparser *P, jval *v, int depth, int obj) {
    const char *open = P->p;
    if (depth >= JSON_DEPTH_MAX) return jerr(P, "nested deeper than %d levels", JSON_DEPTH_MAX);
    v->type = obj ? J_OBJ : J_ARR;
    char close = obj ? '}' : ']';
    P->p++;
    jskip_ws(P);
    if (P->p < P->end && *P->p == close) {
        P->p++;
        return 1;
    }
    for (;;) {
        char *key = NULL;
        size_t klen = 0;
        jskip_ws(P);
        if (obj) {
            if (P->p >= P->end) return jerr(P, "unterminated object");
            if (*P->p != '"') return jerr(P, "expected a string key in an object");
            if (!jstring(P, &key, &klen)) return 0;
            jskip_ws(P);
            if (P->p >= P->end || *P->p != ':') {
                st_free(key);
                return jerr(P, "expected ':' after a key");
            }
            P->p++;
        }
        jval item;
        memset(&item, 0, sizeof item);
        if (!jvalue(P, &item, depth + 1) || !jappend(P, v, &item, key, klen)) {
            jfree(&item);
            st_free(key);
            return 0;
        }
        jskip_ws(P);
        if (P->p >= P->end) return jerr(P, "unterminated %s", obj ? "object" : "array");
        if (*P->p == ',') {
            P->p++;
            continue;
        }
        if (*P->p == close) {
            P->p++;
            break;
        }
        return jerr(P, "expected ',' or '%c' in %s", close, obj ? "an object" : "an array");
    }
    return obj ? jcheck_dups(P, v, open) : 1;
}

static int jliteral(jparser *P, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(P->end - P->p) < n || memcmp(P->p, word, n) != 0) return jerr(P, "unexpected character");
    P->p += n;
    return 1;
}

static int jvalue(jparser *P, jval *v, int depth) {
    jskip_ws(P);
    if (P->p >= P->end) return jerr(P, "unexpected end of the header");
    switch (*P->p) {
    case '{': return jcontainer(P, v, depth, 1);
    case '[': return jcontainer(P, v, depth, 0);
    case '"':
        if (!jstring(P, &v->s, &v->slen)) return 0;
        v->type = J_STR;
        return 1;
    case 't': v->type = J_BOOL; v->b = 1; return jliteral(P, "true");
    case 'f': v->type = J_BOOL; return jliteral(P, "false");
    case 'n': v->type = J_NULL; return jliteral(P, "null");
    default:
        if (*P->p == '-' || (*P->p >= '0' && *P->p <= '9')) return jnumber(P, v);
        return jerr(P, "unexpected character '%c'", *P->p >= 0x20 && *P->p < 0x7f ? *P->p : '?');
    }
}

/* Parses text[0..n) as one JSON value (surrounding whitespace allowed) into *out. */
static int jparse(jparser *P, const char *text, size_t n, jval *out) {
    memset(P, 0, sizeof *P);
    memset(out, 0, sizeof *out);
    P->base = P->p = text;
    P->end = text + n;
    if (!jvalue(P, out, 0)) {
        jfree(out);
        return 0;
    }
    jskip_ws(P);
    if (P->p != P->end) {
        jfree(out);
        return jerr(P, "trailing characters after the JSON value");
    }
    return 1;
}

static const jval *jget(const jval *o, const char *key) {
    size_t n = strlen(key);
    for (size_t k = 0; k < o->n; k++)
        if (o->klens[k] == n && memcmp(o->keys[k], key, n) == 0) return &o->items[k];
    return NULL;
}

/* ------------------------------------------------------------------------------------------------
 * Save
 * ---------------------------------------------------------------------------------------------- */

/* A JSON string literal; s is valid UTF-8 (checked by the caller), passed through unescaped. */
static void sb_json_str(sbuf *b, const char *s) {
    sbuf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"') sbuf_put(b, "\\\"", 2);
        else if (c == '\\') sbuf_put(b, "\\\\", 2);
        else if (c == '\n') sbuf_put(b, "\\n", 2);
        else if (c == '\t') sbuf_put(b, "\\t", 2);
        else if (c == '\r') sbuf_put(b, "\\r", 2);
        else if (c < 0x20) sbuf_printf(b, "\\u%04x", c);
        else sbuf_put(b, (const char *)&c, 1);
    }
    sbuf_put(b, "\"", 1);
}

typedef struct {
    const char *name;
    st_tensor *t;
    const char *dtype;
    size_t esize;
    uint64_t nbytes, begin;
} save_entry;

static int save_entry_cmp(const void *a, const void *b) {
    const save_entry *x = a, *y = b;
    if (x->esize != y->esize) return x->esize > y->esize ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int str_ptr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks a list of names: non-NULL, valid UTF-8, unique (and not "__metadata__" when tensors). */
static st_status check_names(const char *path, const char *what, int n, const char *const *names,
                             int tensors) {
    for (int k = 0; k < n; k++) {
        if (!names[k]) return st_error(ST_ERR_ARG, "save: %s: %s %d is NULL", path, what, k);
        if (!utf8_valid((const unsigned char *)names[k], strlen(names[k]), NULL))
            return st_error(ST_ERR_ARG, "save: %s: %s \"%.100s\" is not valid UTF-8", path, what, names[k]);
        if (tensors && strcmp(names[k], "__metadata__") == 0)
            return st_error(ST_ERR_ARG, "save: %s: \"__metadata__\" is reserved and cannot name a tensor", path);
    }
    if (n < 2) return ST_OK;
    const char **sorted = st_malloc((size_t)n * sizeof *sorted);
    if (!sorted) return ST_ERR_OOM;
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, str_ptr_cmp);
    st_status s = ST_OK;
    for (int k = 1; k < n && s == ST_OK; k++)
        if (strcmp(sorted[k - 1], sorted[k]) == 0)
            s = st_error(ST_ERR_ARG, "save: %s: duplicate %s \"%.100s\"", path, what, sorted[k]);
    st_free(sorted);
    return s;
}

/* Builds the padded JSON header for entries e[0..n) (offsets assigned here) into *hb. */
static st_status build_header(sbuf *hb, int n, save_entry *e, int nmeta, const char *const *keys,
                              const char *const *values) {
    sbuf_puts(hb, "{");
    int first = 1;
    if (nmeta > 0) {
        /* Sorted by key so the same checkpoint gives the same bytes. */
        int *order = st_malloc((size_t)nmeta * sizeof *order);
        if (!order) return ST_ERR_OOM;
        for (int k = 0; k < nmeta; k++) order[k] = k;
        for (int k = 1; k < nmeta; k++) /* insertion sort: metadata is small */
            for (int j = k; j > 0 && strcmp(keys[order[j - 1]], keys[order[j]]) > 0; j--) {
                int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        sbuf_puts(hb, "\"__metadata__\":{");
        for (int k = 0; k < nmeta; k++) {
            if (k) sbuf_puts(hb, ",");
            sb_json_str(hb, keys[order[k]]);
            sbuf_puts(hb, ":");
            sb_json_str(hb, values[order[k]]);
        }
        sbuf_puts(hb, "}");
        st_free(order);
        first = 0;
    }
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        int64_t shape[ST_MAX_DIMS];
        int nd = st_ndim(e[k].t);
        st_shape(e[k].t, shape);
        e[k].begin = off;
        off += e[k].nbytes;
        if (!first) sbuf_puts(hb, ",");
        first = 0;
        sb_json_str(hb, e[k].name);
        sbuf_printf(hb, ":{\"dtype\":\"%s\",\"shape\":[", e[k].dtype);
        for (int d = 0; d < nd; d++) {
            if (d) sbuf_puts(hb, ",");
            sbuf_printf(hb, "%lld", (long long)shape[d]);
        }
        sbuf_printf(hb, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)e[k].begin,
               (unsigned long long)(e[k].begin + e[k].nbytes));
    }
    sbuf_puts(hb, "}");
    while (!hb->oom && hb->n % 8) sbuf_put(hb, " ", 1);
    return hb->oom ? ST_ERR_OOM : ST_OK;
}

static int write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }

/* Where a save to path writes. A regular file is replaced; a symbolic link is followed (a chain
 * of them, a relative one read relative to its own directory) and the file it ends at is replaced,
 * so the link stays a link; nothing there means a new file. Anything else (a directory, a FIFO, a
 * device, a socket) is refused, naming it: rename() would replace a FIFO or a device node with a
 * regular file. *target: st_malloc'ed; *exists: a regular file is there, its stat in *st. */
static st_status save_target(const char *path, char **target, int *exists, struct stat *st) {
    char *cur = st_strdup(path);
    if (!cur) return ST_ERR_OOM;
    *exists = 0;
    for (int hops = 0;; hops++) {
        if (lstat(cur, st) != 0) {
            if (errno == ENOENT) break; /* a new file (or a missing directory: the create says so) */
            st_status s = st_error(ST_ERR_IO, "save: %s: cannot stat '%s': %s", path, cur, strerror(errno));
            st_free(cur);
            return s;
        }
        if (S_ISREG(st->st_mode)) {
            *exists = 1;
            break;
        }
        if (!S_ISLNK(st->st_mode)) {
            st_status s = strcmp(cur, path) == 0
                ? st_error(ST_ERR_IO, "save: %s: is %s; only a regular file can be saved to", path,
                           base_file_kind((unsigned)st->st_mode))
                : st_error(ST_ERR_IO, "save: %s: the symbolic link leads to '%s', which is %s; only a regular file "
                           "can be saved to", path, cur, base_file_kind((unsigned)st->st_mode));
            st_free(cur);
            return s;
        }
        if (hops == 40) {
            st_free(cur);
            return st_error(ST_ERR_IO, "save: %s: too many levels of symbolic links", path);
        }
        size_t cap = (size_t)(st->st_size > 0 ? st->st_size : 255) + 1;
        const char *slash = strrchr(cur, '/');
        size_t dlen = slash ? (size_t)(slash - cur) + 1 : 0; /* the link's directory, with its '/' */
        char *next = st_malloc(dlen + cap + 1);
        if (!next) {
            st_free(cur);
            return ST_ERR_OOM;
        }
        ssize_t len = readlink(cur, next + dlen, cap);
        if (len < 0 || (size_t)len >= cap) {
            st_status s = st_error(ST_ERR_IO, "save: %s: cannot read the symbolic link '%s': %s", path, cur,
                                   len < 0 ? strerror(errno) : "it changed while being read");
            st_free(next);
            st_free(cur);
            return s;
        }
        next[dlen + (size_t)len] = '\0';
        if (next[dlen] == '/') memmove(next, next + dlen, (size_t)len + 1); /* absolute */
        else memcpy(next, cur, dlen);
        st_free(cur);
        cur = next;
    }
    *target = cur;
    return ST_OK;
}

/* Opens a new temporary file next to target (O_EXCL: never reuses someone else's file), with the
 * permission bits of the file it will replace when there is one (else 0666 minus the umask).
 * Messages name path (what the caller asked for). *tmp owned by the caller. */
static FILE *open_temp(const char *path, const char *target, int exists, const struct stat *old, char **tmp) {
    static unsigned counter;
    size_t n = strlen(target) + 64;
    char *name = st_malloc(n);
    if (!name) return NULL;
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(name, n, "%s.tmp-%ld-%u", target, (long)getpid(), counter++);
        int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, exists ? 0600 : 0666);
        if (fd < 0) {
            if (errno == EEXIST) continue;
            st_error(ST_ERR_IO, "save: %s: cannot create the temporary file '%s': %s", path, name, strerror(errno));
            st_free(name);
            return NULL;
        }
        if (exists) {
            /* The replaced file's owner (only root can give a file away; best effort) and mode. */
            if (old->st_uid != geteuid() || old->st_gid != getegid()) (void)!fchown(fd, old->st_uid, old->st_gid);
            if (fchmod(fd, old->st_mode & 07777) != 0) {
                st_error(ST_ERR_IO, "save: %s: cannot set the mode of '%s': %s", path, name, strerror(errno));
                close(fd);
                unlink(name);
                st_free(name);
                return NULL;
            }
        }
        FILE *f = fdopen(fd, "wb");
        if (!f) {
            st_error(ST_ERR_IO, "save: %s: fdopen: %s", path, strerror(errno));
            close(fd);
            unlink(name);
            st_free(name);
            return NULL;
        }
        *tmp = name;
        return f;
    }
    st_error(ST_ERR_IO, "save: %s: cannot find a free temporary file name", path);
    st_free(name);
    return NULL;
}

/* fsync the directory holding path, so the rename itself is durable (best effort). */
static void sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

st_status st_save_meta(const char *path, int n, const char *const *names, st_tensor *const *ts,
                       int nmeta, const char *const *keys, const char *const *values) {
    st_runtime_init();
    if (!path || !*path) return st_error(ST_ERR_ARG, "save: empty path");
    if (n < 0 || nmeta < 0) return st_error(ST_ERR_ARG, "save: %s: negative count", path);
    if ((n > 0 && (!names || !ts)) || (nmeta > 0 && (!keys || !values)))
        return st_error(ST_ERR_ARG, "save: %s: NULL array", path);
    st_status s = check_names(path, "tensor name", n, names, 1);
    if (s == ST_OK) s = check_names(path, "metadata key", nmeta, keys, 0);
    if (s != ST_OK) return s;
    for (int k = 0; k < nmeta; k++) {
        if (!values[k]) return st_error(ST_ERR_ARG, "save: %s: metadata value %d is NULL", path, k);
        if (!utf8_valid((const unsigned char *)values[k], strlen(values[k]), NULL))
            return st_error(ST_ERR_ARG, "save: %s: metadata value for \"%.100s\" is not valid UTF-8", path, keys[k]);
    }
    /* What is at path decides where we write, before anything is computed. */
    char *target = NULL;
    int exists = 0;
    struct stat old;
    s = save_target(path, &target, &exists, &old);
    if (s != ST_OK) return s;
    save_entry *e = st_calloc((size_t)(n ? n : 1), sizeof *e);
    if (!e) {
        st_free(target);
        return ST_ERR_OOM;
    }
    for (int k = 0; k < n; k++) {
        if (!ts[k]) {
            st_free(target);
            st_free(e);
            return st_error(ST_ERR_ARG, "save: %s: tensor \"%.100s\" is NULL", path, names[k]);
        }
        st_dtype dt = st_dtype_of(ts[k]);
        e[k].name = names[k];
        e[k].t = ts[k];
        e[k].dtype = file_dtype_name(dt);
        e[k].esize = st_dtype_size(dt);
        e[k].nbytes = (uint64_t)st_numel(ts[k]) * e[k].esize;
        if (!e[k].dtype) {
            st_free(target);
            st_free(e);
            return st_error(ST_ERR_DTYPE, "save: %s: tensor \"%.100s\" has dtype %s, which safetensors cannot hold",
                            path, names[k], st_dtype_name(dt));
        }
    }
    /* Compute everything before touching the file system: a failing computation creates nothing. */
    s = n > 0 ? st_realize(n, ts) : ST_OK;
    if (s != ST_OK) {
        st_free(target);
        st_free(e);
        return s;
    }
    qsort(e, (size_t)n, sizeof *e, save_entry_cmp);
    sbuf hb = {0};
    s = build_header(&hb, n, e, nmeta, keys, values);
    if (s != ST_OK) {
        st_free(target);
        st_free(hb.s);
        st_free(e);
        return s;
    }
    char *tmp = NULL;
    FILE *f = open_temp(path, target, exists, &old, &tmp);
    if (!f) {
        st_free(target);
        st_free(hb.s);
        st_free(e);
        return st_last_status();
    }
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)hb.n >> (8 * k));
    s = ST_OK;
    if (!write_all(f, len8, 8) || !write_all(f, hb.s, hb.n))
        s = st_error(ST_ERR_IO, "save: %s: write failed: %s", path, strerror(errno));
    for (int k = 0; k < n && s == ST_OK; k++) {
        if (!e[k].nbytes) continue;
        void *buf = st_malloc((size_t)e[k].nbytes);
        if (!buf) {
            s = ST_ERR_OOM;
            break;
        }
        s = st_to_host(e[k].t, st_dtype_of(e[k].t), buf, (size_t)e[k].nbytes);
        if (s == ST_OK && !write_all(f, buf, (size_t)e[k].nbytes))
            s = st_error(ST_ERR_IO, "save: %s: write failed: %s", path, strerror(errno));
        st_free(buf);
    }
    if (s == ST_OK && fflush(f) != 0) s = st_error(ST_ERR_IO, "save: %s: write failed: %s", path, strerror(errno));
    if (s == ST_OK && fsync(fileno(f)) != 0) s = st_error(ST_ERR_IO, "save: %s: fsync failed: %s", path, strerror(errno));
    if (fclose(f) != 0 && s == ST_OK) s = st_error(ST_ERR_IO, "save: %s: close failed: %s", path, strerror(errno));
    if (s == ST_OK && rename(tmp, target) != 0)
        s = st_error(ST_ERR_IO, "save: %s: cannot rename '%s' over '%s': %s", path, tmp, target, strerror(errno));
    if (s != ST_OK) unlink(tmp);
    else sync_dir(target);
    st_free(tmp);
    st_free(target);
    st_free(hb.s);
    st_free(e);
    return s;
}

st_status st_save(const char *path, int n, const char *const *names, st_tensor *const *ts) {
    return st_save_meta(path, n, names, ts, 0, NULL, NULL);
}

/* ------------------------------------------------------------------------------------------------
 * Load
 * ---------------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;            /* borrowed from the JSON tree */
    const st_file_dtype *fdt;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;
} load_entry;

static int load_entry_cmp(const void *a, const void *b) {
    const load_entry *x = *(const load_entry *const *)a, *y = *(const load_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* A non-negative integer JSON value, or -1. */
static int64_t juint(const jval *v) { return v && v->type == J_NUM && v->is_int && v->i >= 0 ? v->i : -1; }

/* Fills le from the header entry v (name: its key). ST_ERR_IO naming what is wrong. */
static st_status parse_entry(const char *path, const char *name, const jval *v, uint64_t data_len,
                             load_entry *le) {
    if (v->type != J_OBJ)
        return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": entry is not an object", path, name);
    const jval *dt = jget(v, "dtype"), *sh = jget(v, "shape"), *off = jget(v, "data_offsets");
    if (!dt || !sh || !off)
        return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": missing \"%s\"", path, name,
                        !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (dt->type != J_STR) return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": dtype is not a string", path, name);
    le->name = name;
    le->fdt = file_dtype_lookup(dt->s, dt->slen);
    if (!le->fdt)
        return st_error(ST_ERR_IO,
                        "load: %s: tensor \"%.100s\": dtype \"%.40s\" is not supported (F32 F64 I32 I64 BOOL F16 "
                        "BF16 U8 I8 I16 U16)", path, name, dt->s);
    if (sh->type != J_ARR) return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": shape is not an array", path, name);
    if (sh->n > ST_MAX_DIMS)
        return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": %zu dims (at most %d)", path, name, sh->n, ST_MAX_DIMS);
    le->ndim = (int)sh->n;
    int64_t numel = 1;
    int zero = 0, overflow = 0;
    for (int d = 0; d < le->ndim; d++) {
        le->shape[d] = juint(&sh->items[d]);
        if (le->shape[d] < 0)
            return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": size %d of the shape is not a non-negative integer",
                            path, name, d);
        if (le->shape[d] == 0) zero = 1;
        else if (__builtin_mul_overflow(numel, le->shape[d], &numel)) overflow = 1;
    }
    uint64_t nbytes = 0;
    if (zero) numel = 0;
    else if (overflow || __builtin_mul_overflow((uint64_t)numel, (uint64_t)le->fdt->file_size, &nbytes))
        return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": shape too large (element count overflows)", path, name);
    if (off->type != J_ARR || off->n != 2 || juint(&off->items[0]) < 0 || juint(&off->items[1]) < 0)
        return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": data_offsets is not [begin, end] of non-negative "
                        "integers", path, name);
    le->begin = (uint64_t)off->items[0].i;
    le->end = (uint64_t)off->items[1].i;
    if (le->begin > le->end)
        return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": data_offsets [%llu, %llu] end before they begin", path,
                        name, (unsigned long long)le->begin, (unsigned long long)le->end);
    if (le->end > data_len)
        return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": data_offsets [%llu, %llu] past the end of the data "
                        "(%llu bytes)", path, name, (unsigned long long)le->begin, (unsigned long long)le->end,
                        (unsigned long long)data_len);
    if (le->end - le->begin != nbytes) {
        char sb[160];
        return st_error(ST_ERR_IO, "load: %s: tensor \"%.100s\": %llu bytes of data for shape %s of %s (expected %llu)",
                        path, name, (unsigned long long)(le->end - le->begin),
                        st_shape_str(le->ndim, le->shape, sb, sizeof sb), le->fdt->name, (unsigned long long)nbytes);
    }
    return ST_OK;
}

/* pread n bytes at off of the file (size bytes when it was opened); ST_ERR_IO naming the file when
 * the read fails or the file ends first (someone truncated it since we opened it). */
static st_status read_at(const char *path, int fd, void *buf, size_t n, uint64_t off, uint64_t size) {
    int r = base_pread_all(fd, buf, n, off);
    if (r == 0) return ST_OK;
    if (r > 0)
        return st_error(ST_ERR_IO, "load: %s: the file ended before byte %llu while it was being read (it had %llu "
                        "bytes when opened): truncated by another process?", path,
                        (unsigned long long)(off + n), (unsigned long long)size);
    return st_error(ST_ERR_IO, "load: %s: read failed at byte %llu: %s", path, (unsigned long long)off, strerror(errno));
}

/* A tensor of le's shape read from the file at off (le->end - le->begin bytes). BOOL bytes are
 * normalised to 0/1 (a file may hold any non-zero byte for true; kernels assume 0/1). */
static st_tensor *make_tensor(const char *path, int fd, uint64_t size, const load_entry *le, uint64_t off) {
    size_t nbytes = (size_t)(le->end - le->begin);
    st_tensor *t = st_empty_host(le->fdt->dt, le->ndim, le->shape);
    if (!t || nbytes == 0) return t;
    unsigned char *data = t->storage->node->buf->data;
    if (le->fdt->conv == CONV_NONE) {
        if (read_at(path, fd, data, nbytes, off, size) != ST_OK) {
            st_release(t);
            return NULL;
        }
        if (le->fdt->dt == ST_BOOL)
            for (size_t i = 0; i < nbytes; i++) data[i] = data[i] != 0;
        return t;
    }
    unsigned char *p = st_malloc(nbytes);
    if (!p || read_at(path, fd, p, nbytes, off, size) != ST_OK) {
        st_free(p);
        st_release(t);
        return NULL;
    }
    int64_t n = st_numel(t);
    int32_t *dst = (int32_t *)data;
    for (int64_t i = 0; i < n; i++) {
        switch (le->fdt->conv) {
        case CONV_U8: dst[i] = p[i]; break;
        case CONV_I8: dst[i] = (int8_t)p[i]; break;
        case CONV_I16: {
            int16_t v;
            memcpy(&v, p + 2 * i, 2);
            dst[i] = v;
            break;
        }
        case CONV_U16: {
            uint16_t v;
            memcpy(&v, p + 2 * i, 2);
            dst[i] = v;
            break;
        }
        default: ST_ASSERT(0);
        }
    }
    st_free(p);
    return t;
}

/* Reads and validates the header of the open file fd (size bytes when opened), then reads each
 * tensor's data with pread: a file cut short meanwhile is an error, never a fault. */
static st_status load_fd(const char *path, int fd, uint64_t size, int *n_out, char ***names_out,
                         st_tensor ***ts_out, int *nmeta_out, char ***keys_out, char ***values_out) {
    if (size < 8)
        return st_error(ST_ERR_IO, "load: %s: file too short (%llu bytes) to hold the 8-byte header size", path,
                        (unsigned long long)size);
    unsigned char len8[8];
    st_status rs = read_at(path, fd, len8, 8, 0, size);
    if (rs != ST_OK) return rs;
    uint64_t hsize = 0;
    for (int k = 7; k >= 0; k--) hsize = (hsize << 8) | len8[k];
    if (hsize > ST_HEADER_MAX)
        return st_error(ST_ERR_IO, "load: %s: header size %llu exceeds the limit of %llu bytes (not a safetensors file?)",
                        path, (unsigned long long)hsize, ST_HEADER_MAX);
    if (hsize > size - 8)
        return st_error(ST_ERR_IO, "load: %s: header size %llu is larger than the rest of the file (%llu bytes): "
                        "truncated?", path, (unsigned long long)hsize, (unsigned long long)(size - 8));
    char *hdr = st_malloc((size_t)hsize + 1);
    if (!hdr) return ST_ERR_OOM;
    rs = read_at(path, fd, hdr, (size_t)hsize, 8, size);
    if (rs != ST_OK) {
        st_free(hdr);
        return rs;
    }
    uint64_t data_len = size - 8 - hsize, data_off = 8 + hsize;
    size_t bad;
    if (!utf8_valid((const unsigned char *)hdr, (size_t)hsize, &bad)) {
        st_free(hdr);
        return st_error(ST_ERR_IO, "load: %s: header is not valid UTF-8 (byte %zu)", path, bad);
    }
    jparser P;
    jval root;
    int parsed = jparse(&P, hdr, (size_t)hsize, &root);
    st_free(hdr); /* the tree holds copies of every string */
    if (!parsed) {
        if (P.fail == ST_ERR_OOM) return ST_ERR_OOM;
        return st_error(ST_ERR_IO, "load: %s: bad header JSON at byte %zu: %s", path, P.pos, P.msg);
    }
    st_status s = ST_OK;
    load_entry *ents = NULL, **sorted = NULL;
    char **names = NULL, **keys = NULL, **values = NULL;
    st_tensor **ts = NULL;
    int n = 0, nmeta = 0;
    const jval *meta = NULL;
    if (root.type != J_OBJ) {
        s = st_error(ST_ERR_IO, "load: %s: header is not a JSON object", path);
        goto done;
    }
    meta = jget(&root, "__metadata__");
    if (root.n - (meta != NULL) > (size_t)INT_MAX) {
        s = st_error(ST_ERR_IO, "load: %s: too many tensors", path);
        goto done;
    }
    if (meta) {
        if (meta->type != J_OBJ) {
            s = st_error(ST_ERR_IO, "load: %s: \"__metadata__\" is not an object", path);
            goto done;
        }
        for (size_t k = 0; k < meta->n; k++)
            if (meta->items[k].type != J_STR || strlen(meta->items[k].s) != meta->items[k].slen ||
                strlen(meta->keys[k]) != meta->klens[k]) {
                s = st_error(ST_ERR_IO, "load: %s: \"__metadata__\" entry \"%.100s\" is not a string without NULs",
                             path, meta->keys[k]);
                goto done;
            }
    }
    ents = st_calloc(root.n ? root.n : 1, sizeof *ents);
    sorted = st_calloc(root.n ? root.n : 1, sizeof *sorted);
    if (!ents || !sorted) {
        s = ST_ERR_OOM;
        goto done;
    }
    for (size_t k = 0; k < root.n; k++) {
        if (&root.items[k] == meta) continue;
        if (strlen(root.keys[k]) != root.klens[k]) {
            s = st_error(ST_ERR_IO, "load: %s: a tensor name contains a NUL character", path);
            goto done;
        }
        s = parse_entry(path, root.keys[k], &root.items[k], data_len, &ents[n]);
        if (s != ST_OK) goto done;
        sorted[n] = &ents[n];
        n++;
    }
    /* No two tensors may share bytes (empty ones occupy nothing). */
    qsort(sorted, (size_t)n, sizeof *sorted, load_entry_cmp);
    {
        const load_entry *prev = NULL;
        for (int k = 0; k < n; k++) {
            if (sorted[k]->begin == sorted[k]->end) continue;
            if (prev && sorted[k]->begin < prev->end) {
                s = st_error(ST_ERR_IO, "load: %s: tensors \"%.100s\" [%llu, %llu] and \"%.100s\" [%llu, %llu] overlap",
                             path, prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end,
                             sorted[k]->name, (unsigned long long)sorted[k]->begin,
                             (unsigned long long)sorted[k]->end);
                goto done;
            }
            prev = sorted[k];
        }
    }
    names = st_calloc((size_t)(n ? n : 1), sizeof *names);
    ts = st_calloc((size_t)(n ? n : 1), sizeof *ts);
    if (!names || !ts) {
        s = ST_ERR_OOM;
        goto done;
    }
    for (int k = 0; k < n; k++) {
        names[k] = st_strdup(ents[k].name);
        ts[k] = names[k] ? make_tensor(path, fd, size, &ents[k], data_off + ents[k].begin) : NULL;
        if (!ts[k]) {
            s = st_last_status() != ST_OK ? st_last_status() : ST_ERR_OOM;
            goto done;
        }
    }
    if (keys_out && meta && meta->n) {
        if (meta->n > (size_t)INT_MAX) {
            s = st_error(ST_ERR_IO, "load: %s: too many metadata entries", path);
            goto done;
        }
        nmeta = (int)meta->n;
        keys = st_calloc(meta->n, sizeof *keys);
        values = st_calloc(meta->n, sizeof *values);
        if (!keys || !values) {
            s = ST_ERR_OOM;
            goto done;
        }
        for (int k = 0; k < nmeta; k++) {
            keys[k] = st_strdup(meta->keys[k]);
            values[k] = st_strdup(meta->items[k].s);
            if (!keys[k] || !values[k]) {
                s = ST_ERR_OOM;
                goto done;
            }
        }
    }
done:
    if (s == ST_OK) {
        *n_out = n;
        *names_out = names;
        *ts_out = ts;
        if (nmeta_out) *nmeta_out = nmeta;
        if (keys_out) *keys_out = keys;
        if (values_out) *values_out = values;
    } else {
        if (names) st_free_loaded(n, names, ts);
        else st_free(ts);
        st_free_meta(nmeta, keys, values);
    }
    st_free(sorted);
    st_free(ents);
    jfree(&root);
    return s;
}

st_status st_load_meta(const char *path, int *n, char ***names, st_tensor ***ts, int *nmeta, char ***keys,
                       char ***values) {
    st_runtime_init();
    if (!path || !n || !names || !ts) return st_error(ST_ERR_ARG, "load: NULL argument");
    *n = 0;
    *names = NULL;
    *ts = NULL;
    if (nmeta) *nmeta = 0;
    if (keys) *keys = NULL;
    if (values) *values = NULL;
    if ((keys != NULL) != (values != NULL) || (keys && !nmeta))
        return st_error(ST_ERR_ARG, "load: nmeta, keys and values go together");
    uint64_t size;
    unsigned mode;
    int fd = base_open_regular(path, &size, &mode);
    if (fd == -2) return st_error(ST_ERR_IO, "load: %s: is %s, not a regular file", path, base_file_kind(mode));
    if (fd < 0) return st_error(ST_ERR_IO, "load: %s: cannot open: %s", path, strerror(errno));
    if (io_load_test_hook) io_load_test_hook(path);
    st_status s = load_fd(path, fd, size, n, names, ts, nmeta, keys, values);
    close(fd);
    return s;
}

st_status st_load(const char *path, int *n, char ***names, st_tensor ***ts) {
    return st_load_meta(path, n, names, ts, NULL, NULL, NULL);
}

void st_free_loaded(int n, char **names, st_tensor **ts) {
    for (int k = 0; k < n; k++) {
        if (names) st_free(names[k]);
        if (ts) st_release(ts[k]);
    }
    st_free(names);
    st_free(ts);
}

void st_free_meta(int nmeta, char **keys, char **values) {
    for (int k = 0; k < nmeta; k++) {
        if (keys) st_free(keys[k]);
        if (values) st_free(values[k]);
    }
    st_free(keys);
    st_free(values);
}
