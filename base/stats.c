/*
 * stats.c — the counters behind st_stats (every layer adds to them) and the monotonic clock.
 */
#include "base/base.h"

#include <time.h>

st_stats_t st_stats_g;

double st_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
