// The SHARDLM_FAULT plan from base/ alone (this test links slm_base only, as health/ does): the
// environment's plan, the attempt rule and the queries health/ and train/ make, against the
// values written in the specs below (grammar: base/fault.h, docs/operations.md).
#include <stdlib.h>

#include "base/fault.h"
#include "test.h"

static void test_from_env(void) {
    slm_fault_plan p;
    setenv("SHARDLM_FAULT",
           "fail-health:rank=1:check=gemm,kill:rank=0:step=3:always,nan-grad:step=5", 1);
    unsetenv("SHARDLM_ATTEMPT");
    CHECK_OK(slm_fault_plan_from_env(&p));
    CHECK_EQ_INT(p.n, 3);
    CHECK_EQ_INT(p.attempt, 1);
    CHECK(slm_fault_health_fails(&p, 1, "gemm"));
    CHECK(slm_fault_health_fails(&p, 1, NULL));
    CHECK(!slm_fault_health_fails(&p, 1, "allreduce"));
    CHECK(!slm_fault_health_fails(&p, 0, "gemm"));
    const slm_fault *f = slm_fault_find(&p, SLM_FAULT_NAN_GRAD, 5);
    CHECK(f && f->step == 5 && f->rank == -1);
    CHECK(!slm_fault_find(&p, SLM_FAULT_NAN_GRAD, 4));
    CHECK_OK(slm_fault_check_world(&p, 2));
    CHECK(slm_fault_check_world(&p, 1) == SLM_E_ARG); // fail-health names rank 1
    CHECK(strstr(slm_errmsg(), "rank=1 is not a rank of this world of 1 rank"));
    // a later attempt: only the :always fault stays armed
    setenv("SHARDLM_ATTEMPT", "2", 1);
    CHECK_OK(slm_fault_plan_from_env(&p));
    CHECK_EQ_INT(p.attempt, 2);
    CHECK(!slm_fault_health_fails(&p, 1, "gemm"));
    CHECK(!slm_fault_find(&p, SLM_FAULT_NAN_GRAD, 5));
    f = slm_fault_find(&p, SLM_FAULT_KILL, -1);
    CHECK(f && f->always && f->step == 3 && f->rank == 0);
    CHECK_OK(slm_fault_check_world(&p, 1)); // the disarmed rank-1 fault is not judged
    // bad values: usage errors naming the variable, no fault left in the plan
    setenv("SHARDLM_ATTEMPT", "0", 1);
    CHECK(slm_fault_plan_from_env(&p) == SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "SHARDLM_ATTEMPT \"0\""));
    CHECK_EQ_INT(p.n, 0);
    unsetenv("SHARDLM_ATTEMPT");
    setenv("SHARDLM_FAULT", "kill:rank=0", 1);
    CHECK(slm_fault_plan_from_env(&p) == SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "SHARDLM_FAULT item 1 \"kill:rank=0\": kill needs step="));
    CHECK_EQ_INT(p.n, 0);
    unsetenv("SHARDLM_FAULT");
    CHECK_OK(slm_fault_plan_from_env(&p));
    CHECK_EQ_INT(p.n, 0);
}

int main(void) {
    RUN(test_from_env);
    return TEST_SUMMARY();
}
