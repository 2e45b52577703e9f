/*
 * compile.h — internal to jit/: the C compiler driver (compile.c) used by the kernel caches
 * (cache.c).
 *
 * Split of responsibilities: compile.c knows the compiler (ST_CC, its identity, the fixed flag
 * list, spawning it without a shell, temp files and logs); cache.c knows keys, the in-memory table,
 * the disk index and loaded shared objects. Neither keeps state the other must know about.
 */
#ifndef ST_JIT_COMPILE_H
#define ST_JIT_COMPILE_H

#include "jit/jit.h"

#include <sys/types.h>

/* Resolves ST_CC (default "cc"; may carry extra words, split on blanks, no quoting), runs
 * `<cc> --version` once (no shell) and builds the identity string: resolved path, extra words,
 * first line of --version, the CPU model and flags (kernels use -march=native). Idempotent; an
 * error (ST_ERR_COMPILE) when the compiler cannot be found or started. */
ST_INTERNAL st_status jit_compiler_init(void);
/* Valid after a successful jit_compiler_init; owned by compile.c. */
ST_INTERNAL const char *jit_compiler_identity(void);
/* The fixed compiler flags, joined with spaces (part of every key). Static storage. */
ST_INTERNAL const char *jit_compile_flags(void);
/* Forgets the compiler (frees its strings); the next jit_compiler_init re-reads ST_CC. */
ST_INTERNAL void jit_compiler_shutdown(void);

#define JIT_NAME_MAX 128 /* longest file name of a cache entry */

/* Compiles the translation unit text[0..n) into a shared object inside dir; what names its
 * kernels for the errors ("kernel st_k_... (add_mul)"). The compiler run is bounded by
 * ST_COMPILE_TIMEOUT (an ST_ERR_COMPILE error naming the setting; the source is kept) and by
 * st_interrupt() (ST_ERR_INTERRUPT, the interrupt consumed, the files removed); either way the
 * compiler's process group is killed and reaped before the call returns. The source is written
 * to <dir>/failed/<tag>-XXXXXX.c and the log next to it (.log); both are deleted on success and
 * kept on failure (the error names them). The object is written by the compiler to a temp name and
 * renamed to <dir>/<tag>-XXXXXX.so, whose file name (not path) is copied to so_name[cap].
 * *ms receives the wall time of the compiler run. Errors: ST_ERR_COMPILE (with the trimmed log),
 * ST_ERR_IO, ST_ERR_OOM. */
ST_INTERNAL st_status jit_compile_batch(const char *dir, const char *tag, const char *what, const char *text, size_t n,
                                        char *so_name, size_t cap, double *ms);

/* The same in two halves, so that the compiler runs while the caller goes on (the background tier:
 * cache.c jit_async_*). jit_compile_start writes the files and starts the compiler (an error
 * leaves nothing running); jit_compile_poll answers 0 while it runs (block: waits, bounded by
 * ST_COMPILE_TIMEOUT and st_interrupt() as above; not blocking: only the timeout applies) and 1
 * once it ended, with jit_compile_batch's result in *status, so_name and *ms. jit_compile_cancel
 * kills a running compiler and removes its files. A job is plain memory (no destructor). */
typedef struct jit_cjob {
    pid_t pid;                 /* the compiler while it runs, else 0 */
    int lfd;                   /* its log (open while it runs) */
    double t0, deadline;       /* st_now_ms() at the start; the timeout's end (0: none) */
    char dir[4096], src[4096], logp[4096], tmp[4096];
    char what[400];            /* the kernels' names, for the errors */
} jit_cjob;
ST_INTERNAL st_status jit_compile_start(const char *dir, const char *tag, const char *what, const char *text,
                                        size_t n, jit_cjob *job);
ST_INTERNAL int jit_compile_poll(jit_cjob *job, int block, char *so_name, size_t cap, double *ms, st_status *status);
ST_INTERNAL void jit_compile_cancel(jit_cjob *job);

/* ---- the cache directory's bound (cache_prune.c) ---- */

/* What one jit_prune_dir call removed, and the bytes of entries left. */
typedef struct jit_prune_result {
    int objects, indexes, temps, failed;
    uint64_t bytes;
} jit_prune_result;

/* A size: digits with an optional K, M, G or T (binary multiples; "KiB", "MB" also read), e.g.
 * "512M", "1G", "200000". -1 when malformed or too large. */
ST_INTERNAL int64_t jit_parse_size(const char *s);
/* Sets path's access time to now (its recency for pruning); errors ignored. */
ST_INTERNAL void jit_touch(const char *path);
/* Brings dir to at most max bytes of entries (0: no bound), least recently used first, never
 * removing an object for which in_use(file name) is nonzero; removes stale temp files, dead
 * index lines, unindexed objects and old failed compiles (cache_prune.c explains which). Best
 * effort: only out of memory is an error. *out (may be NULL) says what it did. */
ST_INTERNAL st_status jit_prune_dir(const char *dir, uint64_t max, int (*in_use)(const char *name),
                                    jit_prune_result *out);

/* s with every non-identifier character replaced by '_' into out[cap] (truncated): safe inside a
 * C comment of a generated translation unit (no "*" "/" surprises). */
ST_INTERNAL void jit_comment_ident(const char *s, char *out, size_t cap);

#endif
