/*
 * test.h — the tiny test harness of stitch's C tests.
 *
 * TEST(name) { ... } defines a test; CHECK* record failures without stopping the test; RUN(name)
 * runs one and prints `PASS name` or `FAIL name: why` (the first failed check); TEST_MAIN_END
 * returns 1 when anything failed. tests/run.sh counts the PASS/FAIL lines of every test program.
 */
#ifndef ST_TEST_H
#define ST_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>
#include "stitch.h"

static int test_failed_total;
static int test_cur_failed;
static char test_cur_msg[512];

#define TEST(name) static void test_##name(void)

#define TEST_FAILF(...)                                                                        \
    do {                                                                                       \
        if (!test_cur_failed) snprintf(test_cur_msg, sizeof test_cur_msg, __VA_ARGS__);        \
        test_cur_failed = 1;                                                                   \
    } while (0)

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) TEST_FAILF("%s:%d: CHECK(%s) [last error: %s]", __FILE__, __LINE__, #cond, \
                                st_last_error());                                              \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                   \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            char m_[400];                                                                      \
            snprintf(m_, sizeof m_, __VA_ARGS__);                                              \
            TEST_FAILF("%s:%d: %s", __FILE__, __LINE__, m_);                                   \
        }                                                                                      \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                  \
    do {                                                                                       \
        double a_ = (double)(a), b_ = (double)(b);                                             \
        if (!(fabs(a_ - b_) <= (tol) * (1 + fabs(b_))) && !(isnan(a_) && isnan(b_)))          \
            TEST_FAILF("%s:%d: %s = %.9g, expected %.9g", __FILE__, __LINE__, #a, a_, b_);     \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                     \
    do {                                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                                    \
        if (a_ != b_) TEST_FAILF("%s:%d: %s = %lld, expected %lld", __FILE__, __LINE__, #a, a_, b_); \
    } while (0)

#define RUN(name)                                                                              \
    do {                                                                                       \
        test_cur_failed = 0;                                                                   \
        test_cur_msg[0] = 0;                                                                   \
        st_clear_error();                                                                      \
        test_##name();                                                                         \
        if (test_cur_failed) {                                                                 \
            printf("FAIL %s: %s\n", #name, test_cur_msg);                                      \
            test_failed_total++;                                                               \
        } else {                                                                               \
            printf("PASS %s\n", #name);                                                        \
        }                                                                                      \
        fflush(stdout);                                                                        \
    } while (0)

#define TEST_MAIN_END() return test_failed_total ? 1 : 0

#endif
