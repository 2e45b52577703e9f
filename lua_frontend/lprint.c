/*
 * lprint.c — reading tensor values into Lua: item (on lhelp.c's lt_push_item, which t[i] also
 * uses), tolist, and __tostring (PyTorch-style text, summarized with "..." past LT_PRINT_THRESHOLD
 * elements). Each of them is a sync point. Calls lhelp.c only.
 */
#include "lstitch_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------
 * Reading values: item, tolist, tostring
 * ---------------------------------------------------------------------------------------------- */

/* Host copy dtype: f64 for float dtypes, i64 for integers and bools. */
static st_dtype lt_hostdtype(st_dtype dt) { return lt_isfloat(dt) ? ST_F64 : ST_I64; }

static void lt_push_value(lua_State *L, st_dtype dt, const void *buf, int64_t k) {
    if (lt_isfloat(dt)) lua_pushnumber(L, (lua_Number)((const double *)buf)[k]);
    else if (dt == ST_BOOL) lua_pushboolean(L, ((const int64_t *)buf)[k] != 0);
    else lua_pushinteger(L, (lua_Integer)((const int64_t *)buf)[k]);
}

LT_FUNC int lt_item(lua_State *L) {
    lt_push_item(L, lt_check(L, 1));
    return 1;
}

/* Pushes a host copy of t (f64 or i64 per lt_hostdtype) as a userdata; returns its data. */
static void *lt_fetch(lua_State *L, st_tensor *t, const char *name) {
    int64_t n = st_numel(t);
    size_t nbytes = (size_t)n * 8;
    void *buf = lua_newuserdatauv(L, nbytes ? nbytes : 1, 0);
    st_status s;
    lt_preflush(L);
    LT_TRY_STATUS(L, s, st_to_host(t, lt_hostdtype(st_dtype_of(t)), buf, nbytes));
    if (s) lt_raise(L, name);
    lt_gc_feed(L);
    return buf;
}

static void lt_push_list(lua_State *L, st_dtype dt, const void *buf, const int64_t *shape, int nd, int d,
                         int64_t *pos) {
    if (d == nd) {
        lt_push_value(L, dt, buf, (*pos)++);
        return;
    }
    luaL_checkstack(L, 3, "tolist");
    lua_createtable(L, (int)shape[d], 0);
    for (int64_t k = 0; k < shape[d]; k++) {
        lt_push_list(L, dt, buf, shape, nd, d + 1, pos);
        lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
}

LT_FUNC int lt_tolist(lua_State *L) {
    st_tensor *t = lt_check(L, 1);
    int64_t shape[ST_MAX_DIMS];
    st_shape(t, shape);
    void *buf = lt_fetch(L, t, "tolist");
    int64_t pos = 0;
    lt_push_list(L, st_dtype_of(t), buf, shape, st_ndim(t), 0, &pos);
    return 1;
}

/* The tensor cut to its first and last LT_PRINT_EDGE entries along every dim marked in cut, copied
 * to host. Cannot raise. */
static st_status lt_summary_to_host(st_tensor *t, const bool *cut, st_dtype hd, void *buf, size_t nbytes) {
    st_tensor *cur = st_retain(t);
    int nd = st_ndim(t);
    for (int d = 0; d < nd && cur; d++) {
        if (!cut[d]) continue;
        int64_t n = st_size(cur, d);
        st_tensor *parts[2] = {st_slice(cur, d, 0, LT_PRINT_EDGE, 1), NULL};
        if (parts[0]) parts[1] = st_slice(cur, d, n - LT_PRINT_EDGE, n, 1);
        st_tensor *next = parts[1] ? st_cat(2, parts, d) : NULL;
        st_release(parts[0]);
        st_release(parts[1]);
        st_release(cur);
        cur = next;
    }
    if (!cur) return st_last_status() ? st_last_status() : ST_ERR_INTERNAL;
    st_status s = st_to_host(cur, hd, buf, nbytes);
    st_release(cur);
    return s;
}

typedef struct lt_printer {
    luaL_Buffer *b;
    st_dtype dt;
    const double *f;
    const int64_t *i;
    int nd;
    int64_t shape[ST_MAX_DIMS]; /* of the summary */
    int64_t stride[ST_MAX_DIMS];
    bool cut[ST_MAX_DIMS];
    bool sci;
    int width;
} lt_printer;

static int lt_fmt_elem(const lt_printer *p, int64_t k, char *out, size_t n) {
    if (p->dt == ST_BOOL) return snprintf(out, n, "%s", p->i[k] ? "true" : "false");
    if (!lt_isfloat(p->dt)) return snprintf(out, n, "%lld", (long long)p->i[k]);
    double v = p->f[k];
    if (isnan(v)) return snprintf(out, n, "nan");
    if (isinf(v)) return snprintf(out, n, v > 0 ? "inf" : "-inf");
    return snprintf(out, n, p->sci ? "%.4e" : "%.4f", v);
}

/* Separator between entries of dim d: ", " inside a row, else "," + one newline per dim below d
 * (a blank line between matrices) + the indent of "tensor(" and the open brackets. */
static void lt_print_sep(lt_printer *p, int d) {
    if (d == p->nd - 1) {
        luaL_addstring(p->b, ", ");
        return;
    }
    luaL_addchar(p->b, ',');
    for (int nl = 0; nl < p->nd - d - 1; nl++) luaL_addchar(p->b, '\n');
    for (int s = 0; s < 7 + d + 1; s++) luaL_addchar(p->b, ' ');
}

static void lt_print_rec(lt_printer *p, int d, int64_t off) {
    char tmp[64];
    luaL_addchar(p->b, '[');
    for (int64_t k = 0; k < p->shape[d]; k++) {
        if (k > 0) lt_print_sep(p, d);
        if (p->cut[d] && k == LT_PRINT_EDGE) {
            luaL_addstring(p->b, "...");
            lt_print_sep(p, d);
        }
        if (d == p->nd - 1) {
            int len = lt_fmt_elem(p, off + k * p->stride[d], tmp, sizeof tmp);
            for (int s = len; s < p->width; s++) luaL_addchar(p->b, ' ');
            luaL_addstring(p->b, tmp);
        } else {
            lt_print_rec(p, d + 1, off + k * p->stride[d]);
        }
    }
    luaL_addchar(p->b, ']');
}

LT_FUNC int lt_tostring(lua_State *L) {
    lt_box *box = luaL_checkudata(L, 1, LT_MT);
    if (!box->t) {
        lua_pushstring(L, "tensor(<closed>)");
        return 1;
    }
    st_tensor *t = box->t;
    lt_printer p;
    memset(&p, 0, sizeof p);
    p.nd = st_ndim(t);
    p.dt = st_dtype_of(t);
    int64_t shape[ST_MAX_DIMS];
    st_shape(t, shape);
    bool summarize = st_numel(t) > LT_PRINT_THRESHOLD;
    int64_t n = 1;
    for (int d = 0; d < p.nd; d++) {
        p.cut[d] = summarize && shape[d] > 2 * LT_PRINT_EDGE;
        p.shape[d] = p.cut[d] ? 2 * LT_PRINT_EDGE : shape[d];
        n *= p.shape[d];
    }
    for (int d = p.nd - 1, s = 1; d >= 0; d--) {
        p.stride[d] = s;
        s *= (int)p.shape[d];
    }
    void *buf = lua_newuserdatauv(L, (size_t)(n ? n : 1) * 8, 0);
    st_status s;
    st_dtype hd = lt_hostdtype(p.dt);
    LT_TRY_STATUS(L, s, lt_summary_to_host(t, p.cut, hd, buf, (size_t)n * 8));
    if (s) lt_raise(L, "tostring");
    lt_gc_feed(L);
    p.f = buf;
    p.i = buf;
    if (lt_isfloat(p.dt)) {
        double maxa = 0, minnz = INFINITY;
        for (int64_t k = 0; k < n; k++) {
            double a = fabs(p.f[k]);
            if (!isfinite(a)) continue;
            if (a > maxa) maxa = a;
            if (a > 0 && a < minnz) minnz = a;
        }
        p.sci = maxa >= 1e8 || minnz < 1e-4;
    }
    char tmp[64];
    for (int64_t k = 0; k < n; k++) {
        int len = lt_fmt_elem(&p, k, tmp, sizeof tmp);
        if (len > p.width) p.width = len;
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    p.b = &b;
    luaL_addstring(&b, "tensor(");
    if (p.nd == 0) {
        lt_fmt_elem(&p, 0, tmp, sizeof tmp);
        luaL_addstring(&b, tmp);
    } else if (n == 0) {
        luaL_addstring(&b, "[]");
    } else {
        lt_print_rec(&p, 0, 0);
    }
    char sh[128];
    snprintf(tmp, sizeof tmp, ", dtype=%s, shape=", st_dtype_name(p.dt));
    luaL_addstring(&b, tmp);
    luaL_addstring(&b, st_shape_str(p.nd, shape, sh, sizeof sh));
    luaL_addstring(&b, ", device=");
    luaL_addstring(&b, st_device_of(t));
    luaL_addchar(&b, ')');
    luaL_pushresult(&b);
    return 1;
}

