// SHARDLM_FAULT / SHARDLM_ATTEMPT parsing (src/train/fault.c) against the grammar of the
// contract (train.h "Fault injection", docs/operations.md): every kind with its fields, the
// attempt rule, and the usage errors a bad value must give (naming the variable and the field).
#include "test.h"
#include "train/train.h"

static void test_kinds(void) {
    slm_fault_plan p;
    CHECK_OK(slm_fault_parse("kill:rank=1:step=7,stop:rank=0:step=5,exit:rank=1:step=3,"
                             "fail-health:rank=1,corrupt-ckpt:step=10,slow:rank=1:ms=200",
                             &p));
    CHECK_EQ_INT(p.n, 6);
    CHECK_EQ_INT(p.attempt, 1);
    CHECK(p.f[0].kind == SLM_FAULT_KILL);
    CHECK_EQ_INT(p.f[0].rank, 1);
    CHECK_EQ_INT(p.f[0].step, 7);
    CHECK(p.f[1].kind == SLM_FAULT_STOP);
    CHECK_EQ_INT(p.f[1].rank, 0);
    CHECK_EQ_INT(p.f[1].step, 5);
    CHECK(p.f[2].kind == SLM_FAULT_EXIT);
    CHECK_EQ_INT(p.f[2].step, 3);
    CHECK(p.f[3].kind == SLM_FAULT_FAIL_HEALTH);
    CHECK_EQ_INT(p.f[3].rank, 1);
    CHECK_EQ_STR(p.f[3].check, "");
    CHECK(p.f[4].kind == SLM_FAULT_CORRUPT_CKPT);
    CHECK_EQ_INT(p.f[4].step, 10);
    CHECK_EQ_INT(p.f[4].rank, -1);
    CHECK(p.f[5].kind == SLM_FAULT_SLOW);
    CHECK_EQ_INT(p.f[5].ms, 200);
    CHECK_EQ_INT(p.f[5].step, 0);
    for (int i = 0; i < p.n; i++)
        CHECK(!p.f[i].always);
    CHECK_EQ_STR(slm_fault_kind_name(p.f[3].kind), "fail-health");
    // fields in any order, :always, optional fields
    CHECK_OK(slm_fault_parse("exit:step=3:rank=2:always,nan-grad:step=4,fail-health:rank=0:"
                             "check=allreduce,corrupt-ckpt:rank=1:step=2",
                             &p));
    CHECK_EQ_INT(p.n, 4);
    CHECK_EQ_INT(p.f[0].rank, 2);
    CHECK_EQ_INT(p.f[0].step, 3);
    CHECK(p.f[0].always);
    CHECK(p.f[1].kind == SLM_FAULT_NAN_GRAD);
    CHECK_EQ_INT(p.f[1].rank, -1);
    CHECK_EQ_STR(p.f[2].check, "allreduce");
    CHECK_EQ_INT(p.f[3].rank, 1);
    CHECK_OK(slm_fault_parse(NULL, &p));
    CHECK_EQ_INT(p.n, 0);
    CHECK_OK(slm_fault_parse("", &p));
    CHECK_EQ_INT(p.n, 0);
}

// Each bad value is SLM_E_ARG with a message naming SHARDLM_FAULT and the offending part.
static void expect_bad(const char *spec, const char *needle) {
    slm_fault_plan p;
    slm_status st = slm_fault_parse(spec, &p);
    CHECK_MSG(st == SLM_E_ARG, "\"%s\": status %d, expected SLM_E_ARG", spec, (int)st);
    CHECK_MSG(strstr(slm_errmsg(), "SHARDLM_FAULT") && strstr(slm_errmsg(), needle),
              "\"%s\": message \"%s\" lacks \"%s\"", spec, slm_errmsg(), needle);
    CHECK_EQ_INT(p.n, 0);
}

static void test_errors(void) {
    expect_bad("explode:rank=1:step=2", "unknown fault kind \"explode\"");
    expect_bad("kill:rank=1", "kill needs step=");
    expect_bad("kill:step=3", "kill needs rank=");
    expect_bad("slow:rank=1", "slow needs ms=");
    expect_bad("corrupt-ckpt", "corrupt-ckpt needs step=");
    expect_bad("kill:rank=1:step=0", "expected a step, an integer >= 1");
    expect_bad("kill:rank=-1:step=2", "expected a world rank");
    expect_bad("kill:rank=1x:step=2", "rank=\"1x\"");
    expect_bad("kill:rank=:step=2", "rank=\"\"");
    expect_bad("kill:rank=1:step=2:ms=5", "kill takes no field \"ms\"");
    expect_bad("kill:rank=1:rank=2:step=2", "field \"rank\" given twice");
    expect_bad("kill:rank=1:step=2:forever", "\"forever\" is not key=value");
    expect_bad("kill:rank=1:step=2,", "item 2 is empty");
    expect_bad(",kill:rank=1:step=2", "item 1 is empty");
    expect_bad("kill:rank=1:step=2,stop:rank=1", "item 2 \"stop:rank=1\"");
    expect_bad("slow:rank=1:ms=99999999", "milliseconds");
    expect_bad("kill:rank=1:step=99999999999999999999", "step=");
    expect_bad("fail-health:rank=1:check=", "health check name");
}

static void test_attempt(void) {
    int a = 0;
    CHECK_OK(slm_fault_parse_attempt(NULL, &a));
    CHECK_EQ_INT(a, 1);
    CHECK_OK(slm_fault_parse_attempt("3", &a));
    CHECK_EQ_INT(a, 3);
    CHECK(slm_fault_parse_attempt("0", &a) == SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "SHARDLM_ATTEMPT"));
    CHECK(slm_fault_parse_attempt("two", &a) == SLM_E_ARG);
    // the attempt rule: only the first attempt fires, unless :always
    slm_fault_plan p;
    CHECK_OK(
        slm_fault_parse("exit:rank=1:step=3,kill:rank=0:step=3:always,fail-health:rank=2", &p));
    CHECK(slm_fault_find(&p, SLM_FAULT_EXIT, 3) == &p.f[0]);
    CHECK(slm_fault_find(&p, SLM_FAULT_EXIT, 4) == NULL);
    CHECK(slm_fault_find(&p, SLM_FAULT_EXIT, -1) == &p.f[0]);
    CHECK(slm_fault_health_fails(&p, 2, "gemm"));
    CHECK(!slm_fault_health_fails(&p, 1, NULL));
    p.attempt = 2;
    CHECK(slm_fault_find(&p, SLM_FAULT_EXIT, 3) == NULL);
    CHECK(slm_fault_find(&p, SLM_FAULT_KILL, 3) == &p.f[1]);
    CHECK(!slm_fault_health_fails(&p, 2, NULL));
    CHECK(!slm_fault_health_fails(NULL, 0, NULL));
    CHECK_OK(slm_fault_parse("fail-health:rank=1:check=allreduce", &p));
    CHECK(slm_fault_health_fails(&p, 1, "allreduce"));
    CHECK(slm_fault_health_fails(&p, 1, NULL));
    CHECK(!slm_fault_health_fails(&p, 1, "gemm"));
}

// A rank beyond the world never fires: slm_fault_check_world names the item and the world.
static void test_world(void) {
    slm_fault_plan p;
    CHECK_OK(slm_fault_parse("slow:rank=1:ms=5,corrupt-ckpt:step=2:rank=3,nan-grad:step=1", &p));
    CHECK_OK(slm_fault_check_world(&p, 4));
    CHECK(slm_fault_check_world(&p, 3) == SLM_E_ARG);
    CHECK_EQ_STR(slm_errmsg(),
                 "SHARDLM_FAULT item 2 \"corrupt-ckpt:step=2:rank=3\": rank=3 is not "
                 "a rank of this world of 3 ranks (0..2): the fault would never fire");
    CHECK(slm_fault_check_world(&p, 1) == SLM_E_ARG); // item 1 first
    CHECK(strstr(slm_errmsg(), "item 1 \"slow:rank=1:ms=5\"") != NULL);
    p.attempt = 2; // inert on a later attempt: not an error
    CHECK_OK(slm_fault_check_world(&p, 1));
    CHECK_OK(slm_fault_parse("kill:rank=2:step=1:always", &p));
    p.attempt = 2;
    CHECK(slm_fault_check_world(&p, 2) == SLM_E_ARG);
}

int main(void) {
    RUN(test_kinds);
    RUN(test_world);
    RUN(test_errors);
    RUN(test_attempt);
    return TEST_SUMMARY();
}
