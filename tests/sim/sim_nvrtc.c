/*
 * sim_nvrtc.c — the stand-in libnvrtc of the simulated GPU (tests only; ST_CUDA_SIM).
 *
 * It takes exactly what stitch gives NVRTC (the unit: prelude and kernels, each kernel's name as
 * `#define KNAME <name>`) and builds a host shared object from it: `#include "sim_cuda.h"`, the
 * unit, one ST_SIM_KERNEL(name, launch bound) per kernel and ST_SIM_MODULE(), compiled by the host
 * C++ compiler with -std=c++17 -O1 -ffp-contract=off (NVRTC's --fmad=false) -fno-exceptions
 * -fsanitize=thread (instrumentation only: sim_cuda.h defines the hooks; SIM_CXXFLAGS, from the
 * Makefile) and linked with -nostdlib (libm only: what else a module calls, the process has). The prelude
 * comes from the precompiled header sim_pre.h (sim_cuda.h + base/opmath.h) when the unit holds it
 * verbatim, which saves about half of each compile. The "cubin" is SIM_MAGIC, the object's
 * size (8 bytes) and the object; the simulated driver (sim_driver.c) loads it. A compile error is
 * NVRTC_ERROR_COMPILATION with the compiler's messages as the program log.
 *
 * sim_cuda.h, sim_rt.h and a precompiled sim_cuda.h.gch (the Makefile builds it) are looked for
 * next to this library. The compiler is $ST_SIM_CXX or g++. ST_SIM_KEEP=1 keeps each unit's directory
 * (the source as compiled, the object, the log) and names it on stderr.
 */
#define _GNU_SOURCE
#include "sim_rt.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* The Makefile passes both (the precompiled header is built with the same flags). */
#ifndef SIM_CXX
#define SIM_CXX "g++"
#endif
#ifndef SIM_CXXFLAGS
#define SIM_CXXFLAGS "-std=c++17 -O1 -fPIC -ffp-contract=off -fno-ipa-reference -fno-exceptions -fsanitize=thread -w"
#endif

typedef int nvrtcResult;
enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
};

typedef struct prog {
    char *src, *name, *log;
    unsigned char *image;
    size_t image_size;
} prog;

EXPORT nvrtcResult nvrtcVersion(int *major, int *minor) {
    if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
    *major = 12;
    *minor = 8;
    return NVRTC_SUCCESS;
}

static const int archs[] = {75, 80, 86, 89, 90};

EXPORT nvrtcResult nvrtcGetNumSupportedArchs(int *n) {
    if (!n) return NVRTC_ERROR_INVALID_INPUT;
    *n = (int)(sizeof archs / sizeof archs[0]);
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetSupportedArchs(int *out) {
    if (!out) return NVRTC_ERROR_INVALID_INPUT;
    memcpy(out, archs, sizeof archs);
    return NVRTC_SUCCESS;
}

EXPORT const char *nvrtcGetErrorString(nvrtcResult r) {
    switch (r) {
    case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
    case NVRTC_ERROR_OUT_OF_MEMORY: return "NVRTC_ERROR_OUT_OF_MEMORY";
    case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_ERROR_INVALID_OPTION: return "NVRTC_ERROR_INVALID_OPTION";
    case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    default: return "NVRTC_ERROR_INTERNAL_ERROR";
    }
}

EXPORT nvrtcResult nvrtcCreateProgram(prog **out, const char *src, const char *name, int nh, const char *const *h,
                                      const char *const *hn) {
    (void)h;
    (void)hn;
    if (!out || !src || nh != 0) return NVRTC_ERROR_INVALID_INPUT;
    prog *p = calloc(1, sizeof *p);
    if (!p || !(p->src = strdup(src)) || !(p->name = strdup(name ? name : "default_program"))) {
        if (p) free(p->src);
        free(p);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    *out = p;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcDestroyProgram(prog **pp) {
    if (!pp || !*pp) return NVRTC_ERROR_INVALID_PROGRAM;
    prog *p = *pp;
    free(p->src);
    free(p->name);
    free(p->log);
    free(p->image);
    free(p);
    *pp = NULL;
    return NVRTC_SUCCESS;
}

/* The directory of this library (where sim_cuda.h lives). */
static const char *own_dir(void) {
    static char dir[4096];
    if (!dir[0]) {
        Dl_info info;
        static const int anchor = 1;   /* any object of this library */
        if (dladdr(&anchor, &info) && info.dli_fname) {
            snprintf(dir, sizeof dir, "%s", info.dli_fname);
            char *slash = strrchr(dir, '/');
            if (slash) *slash = 0;
            else snprintf(dir, sizeof dir, ".");
        } else {
            snprintf(dir, sizeof dir, ".");
        }
    }
    return dir;
}

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            char *b = realloc(buf, cap + 1);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);
    buf[len] = 0;
    *n = len;
    return buf;
}

/* The prelude as the precompiled header sim_pre.h holds it (its text after the first line, which
 * includes sim_cuda.h); NULL when there is no such header (then every unit is parsed whole). */
static const char *pch_prelude(void) {
    static int looked;
    static char *text;
    if (!looked) {
        looked = 1;
        char path[4200];
        size_t n;
        snprintf(path, sizeof path, "%s/sim_pre.h", own_dir());
        char *all = read_all(path, &n);
        char *nl = all ? strchr(all, '\n') : NULL;
        if (nl) text = strdup(nl + 1);
        free(all);
    }
    return text;
}

/* Writes the unit to compile: the precompiled sim_pre.h first when the unit holds the prelude
 * verbatim (it always does; a stale build falls back to parsing everything), the kernels, and an
 * ST_SIM_KERNEL line per `#define KNAME <name>` with the __launch_bounds__ that follows it. */
static int write_unit(FILE *f, const char *src) {
    const char *pre = pch_prelude(), *at = pre && *pre ? strstr(src, pre) : NULL;
    if (at) {
        fputs("#include \"sim_pre.h\"\n", f);
        fprintf(f, "#line 1 \"unit.cu\"\n%.*s\n/* [the prelude: sim_pre.h] */\n", (int)(at - src), src);
        fputs(at + strlen(pre), f);
    } else {
        fputs("#include \"sim_cuda.h\"\n#line 1 \"unit.cu\"\n", f);
        fputs(src, f);
    }
    fputs("\n", f);
    int n = 0;
    for (const char *p = strstr(src, "#define KNAME "); p; p = strstr(p + 1, "#define KNAME ")) {
        const char *q = p + 14;
        size_t len = strcspn(q, " \t\r\n");
        if (len == 0 || len > 200) continue;
        const char *next = strstr(q, "#define KNAME ");
        const char *lb = strstr(q, "__launch_bounds__(");
        int bound = lb && (!next || lb < next) ? atoi(lb + 18) : 0;
        fprintf(f, "ST_SIM_KERNEL(%.*s, %d)\n", (int)len, q, bound);
        n++;
    }
    fputs("ST_SIM_MODULE()\n", f);
    return n;
}

EXPORT nvrtcResult nvrtcCompileProgram(prog *p, int nopt, const char *const *opts) {
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    int arch = 0;
    for (int i = 0; i < nopt; i++) {
        const char *o = opts[i];
        if (!strncmp(o, "--gpu-architecture=", 19) || !strncmp(o, "-arch=", 6)) {
            const char *a = strchr(o, '=') + 1;
            if (strncmp(a, "sm_", 3) && strncmp(a, "compute_", 8)) return NVRTC_ERROR_INVALID_OPTION;
            arch = atoi(a + (a[0] == 's' ? 3 : 8));
        } else if (strcmp(o, "--fmad=false") && strcmp(o, "--prec-div=true") && strcmp(o, "--prec-sqrt=true") &&
                   strcmp(o, "--ftz=false") && strcmp(o, "-std=c++17") && strcmp(o, "-default-device")) {
            return NVRTC_ERROR_INVALID_OPTION;   /* an option the simulator would ignore: refuse it */
        }
    }
    int known = 0;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) known |= archs[i] == arch;
    if (!known) return NVRTC_ERROR_INVALID_OPTION;   /* as NVRTC answers an architecture it lacks */
    char dir[] = "/tmp/stsim_cc_XXXXXX";
    if (!mkdtemp(dir)) return NVRTC_ERROR_OUT_OF_MEMORY;
    char cpp[64], obj[64], so[64], log[64], cmd[8192];
    snprintf(cpp, sizeof cpp, "%s/unit.cpp", dir);
    snprintf(obj, sizeof obj, "%s/unit.o", dir);
    snprintf(so, sizeof so, "%s/unit.so", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    FILE *f = fopen(cpp, "w");
    if (!f) {
        rmdir(dir);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    write_unit(f, p->src);
    fclose(f);
    const char *cxx = getenv("ST_SIM_CXX");
    if (!cxx || !*cxx) cxx = SIM_CXX;
    snprintf(cmd, sizeof cmd, "%s " SIM_CXXFLAGS " -I'%s' -c '%s' -o '%s' > '%s' 2>&1 && %s -shared -nostdlib -o '%s' '%s' -lm >> '%s' 2>&1",
             cxx, own_dir(), cpp, obj, log, cxx, so, obj, log);
    int rc = system(cmd);
    size_t n = 0;
    free(p->log);
    p->log = read_all(log, &n);
    nvrtcResult r = NVRTC_SUCCESS;
    if (rc != 0) {
        r = NVRTC_ERROR_COMPILATION;
    } else {
        size_t sz = 0;
        char *img = read_all(so, &sz);
        if (!img) r = NVRTC_ERROR_OUT_OF_MEMORY;
        else {
            free(p->image);
            p->image = malloc(sz + 16);
            if (!p->image) r = NVRTC_ERROR_OUT_OF_MEMORY;
            else {
                uint64_t n64 = sz;
                memcpy(p->image, SIM_MAGIC, 8);
                memcpy(p->image + 8, &n64, 8);
                memcpy(p->image + 16, img, sz);
                p->image_size = sz + 16;
            }
            free(img);
        }
    }
    if (getenv("ST_SIM_KEEP")) {   /* debugging: keep the unit and the object */
        fprintf(stderr, "stitch-sim: kept %s\n", dir);
        return r;
    }
    unlink(cpp);
    unlink(obj);
    unlink(so);
    unlink(log);
    rmdir(dir);
    return r;
}

EXPORT nvrtcResult nvrtcGetProgramLogSize(prog *p, size_t *n) {
    if (!p || !n) return NVRTC_ERROR_INVALID_INPUT;
    *n = (p->log ? strlen(p->log) : 0) + 1;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetProgramLog(prog *p, char *out) {
    if (!p || !out) return NVRTC_ERROR_INVALID_INPUT;
    strcpy(out, p->log ? p->log : "");
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBINSize(prog *p, size_t *n) {
    if (!p || !n) return NVRTC_ERROR_INVALID_INPUT;
    if (!p->image) return NVRTC_ERROR_INVALID_PROGRAM;
    *n = p->image_size;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBIN(prog *p, char *out) {
    if (!p || !out) return NVRTC_ERROR_INVALID_INPUT;
    if (!p->image) return NVRTC_ERROR_INVALID_PROGRAM;
    memcpy(out, p->image, p->image_size);
    return NVRTC_SUCCESS;
}

/* PTX output is the same image: the simulated driver loads either. */
EXPORT nvrtcResult nvrtcGetPTXSize(prog *p, size_t *n) { return nvrtcGetCUBINSize(p, n); }
EXPORT nvrtcResult nvrtcGetPTX(prog *p, char *out) { return nvrtcGetCUBIN(p, out); }
