// Straggler detection (slm_train_stragglers, src/train/prom.c): the median of the ranks' busy
// times, streaks above factor x median, flagged once when a streak reaches K windows, re-armed
// when the rank falls back below, and the absolute floor. Expected values worked out by hand below.
#include "test.h"
#include "train/train_internal.h"

static void test_odd_world(void) {
    double busy[3] = {0.10, 0.12, 0.20}, scratch[3], med;
    int streak[3] = {0}, newly[3];
    // median 0.12; 0.20 > 1.5 x 0.12 = 0.18: rank 2 above, flagged at the 2nd window (K = 2)
    CHECK_EQ_INT(slm_train_stragglers(busy, 3, 1.5, 0, 2, streak, newly, scratch, &med), 0);
    CHECK(med == 0.12);
    CHECK_EQ_INT(streak[2], 1);
    CHECK_EQ_INT(slm_train_stragglers(busy, 3, 1.5, 0, 2, streak, newly, scratch, &med), 1);
    CHECK_EQ_INT(newly[0], 2);
    // still slow: counted once only
    CHECK_EQ_INT(slm_train_stragglers(busy, 3, 1.5, 0, 2, streak, newly, scratch, &med), 0);
    CHECK_EQ_INT(streak[2], 3);
    // back to normal (0.17 < 0.18): streak restarts, a new episode needs K windows again
    busy[2] = 0.17;
    CHECK_EQ_INT(slm_train_stragglers(busy, 3, 1.5, 0, 2, streak, newly, scratch, &med), 0);
    CHECK_EQ_INT(streak[2], 0);
    busy[2] = 0.5;
    CHECK_EQ_INT(slm_train_stragglers(busy, 3, 1.5, 0, 2, streak, newly, scratch, &med), 0);
    CHECK_EQ_INT(slm_train_stragglers(busy, 3, 1.5, 0, 2, streak, newly, scratch, &med), 1);
    CHECK(busy[0] == 0.10 && busy[1] == 0.12); // input untouched
}

static void test_even_world_and_edges(void) {
    double busy[4] = {0.4, 0.1, 0.3, 0.2}, scratch[4], med;
    int streak[4] = {0}, newly[4];
    // sorted 0.1 0.2 0.3 0.4: median (0.2 + 0.3) / 2 = 0.25; factor 1.5 -> 0.375: rank 0 only
    CHECK_EQ_INT(slm_train_stragglers(busy, 4, 1.5, 0, 1, streak, newly, scratch, &med), 1);
    CHECK(fabs(med - 0.25) < 1e-15);
    CHECK_EQ_INT(newly[0], 0);
    // one rank: never its own straggler; all zero (no steps timed): none
    double one[1] = {5}, s1[1];
    int st1[1] = {0}, n1[1];
    CHECK_EQ_INT(slm_train_stragglers(one, 1, 1.01, 0, 1, st1, n1, s1, &med), 0);
    double zero[2] = {0, 0}, s2[2];
    int st2[2] = {0}, n2[2];
    CHECK_EQ_INT(slm_train_stragglers(zero, 2, 1.5, 0, 1, st2, n2, s2, &med), 0);
    // the absolute floor: 1.2 ms over a 1 ms median is 2.2 x but below a 10 ms floor
    double fast[3] = {0.001, 0.001, 0.0022}, s3[3];
    int st3[3] = {0}, n3[3];
    CHECK_EQ_INT(slm_train_stragglers(fast, 3, 1.5, 0.010, 1, st3, n3, s3, &med), 0);
    CHECK_EQ_INT(slm_train_stragglers(fast, 3, 1.5, 0.001, 1, st3, n3, s3, &med), 1);
}

int main(void) {
    RUN(test_odd_world);
    RUN(test_even_world_and_edges);
    return TEST_SUMMARY();
}
