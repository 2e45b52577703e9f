/*
 * bench_util.h — what every C benchmark shares: the monotonic clock, best/median of a set of
 * timings, the command line (RESULTS_FILE [--quick]) and the `key value` result lines that
 * report.py reads. Header-only (static functions);
 * a program defines `static FILE *results;` before including it.
 */
#ifndef ST_BENCH_UTIL_H
#define ST_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct timing {
    double best, median; /* seconds */
} timing;

/* Sorts t[0..n) in place. */
static inline timing summarize(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    timing r = {t[0], n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2])};
    return r;
}

/* One `key value` line of the results file. */
static inline void put(const char *key, double v) {
    fprintf(results, "%s %.6g\n", key, v);
    fflush(results);
}

/* `prog RESULTS_FILE [--quick]`: opens the results file for writing and sets *quick. Returns 0, or
 * 2 (main's exit status) after printing the usage or why the file did not open. */
static inline int open_results(int argc, char **argv, int *quick) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s RESULTS_FILE [--quick]\n", argv[0]);
        return 2;
    }
    results = fopen(argv[1], "w");
    if (!results) {
        perror(argv[1]);
        return 2;
    }
    *quick = argc > 2 && !strcmp(argv[2], "--quick");
    return 0;
}

#endif
