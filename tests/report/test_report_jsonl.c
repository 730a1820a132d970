// metrics.jsonl reader (src/report): hand-written files of both schemas (docs/formats.md), the
// replay of a restart, malformed and wrong-typed lines, and the text summary of a tiny run
// directory built here (every expected value is written out below, not produced by shardlm).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report/report.h"
#include "report/report_internal.h"
#include "test.h"

// Schema 1 (before issue 11): start / step / end only, val_loss inside the step records.
static const char k_schema1[] =
    "{\"event\":\"start\",\"model\":\"tiny\",\"n_params\":1000,\"batch\":2,\"seq\":8,"
    "\"steps\":3,\"peak_gflops\":10,\"flops_per_token\":6000}\n"
    "{\"event\":\"step\",\"step\":1,\"loss\":5.5,\"lr\":0.001,\"grad_norm\":1.0,"
    "\"tokens_per_s\":100,\"mfu\":0.06,\"ms_per_step\":160,\"val_loss\":null,\"tokens\":16,"
    "\"elapsed_s\":0.2}\n"
    "{\"event\":\"step\",\"step\":2,\"loss\":5.0,\"lr\":0.0009,\"grad_norm\":0.9,"
    "\"tokens_per_s\":200,\"mfu\":0.12,\"ms_per_step\":80,\"val_loss\":4.75,\"tokens\":32,"
    "\"elapsed_s\":0.3}\n"
    "{\"event\":\"end\",\"steps\":2,\"loss\":5.0,\"val_loss\":4.75,\"interrupted\":false}\n";

static void test_schema1(void) {
    slm_run_log l;
    CHECK_OK(slm_run_log_parse(k_schema1, strlen(k_schema1), "m1.jsonl", &l));
    CHECK_EQ_INT(l.schema, 1);
    CHECK_EQ_INT(l.n_lines, 4);
    CHECK_EQ_INT(l.n_bad, 0);
    CHECK_EQ_INT(l.n_steps, 2);
    CHECK_EQ_INT(l.n_ranks, 0);
    CHECK_EQ_INT(l.n_events, 2);
    CHECK_EQ_STR(l.events[0].name, "start");
    CHECK_EQ_STR(l.events[1].name, "end");
    CHECK_EQ_INT(l.steps[0].step, 1);
    CHECK(isnan(l.steps[0].val_loss));
    CHECK_CLOSE(l.steps[1].val_loss, 4.75, 0, 0);
    CHECK_CLOSE(l.steps[1].lr, 0.0009, 0, 0);
    CHECK_EQ_INT(l.steps[1].tokens, 32);
    CHECK(isnan(l.steps[1].data_ms)); // not in schema 1
    slm_run_log_free(&l);
}

// Schema 2: a run of 4 steps on 2 ranks, killed after step 3 and restarted from the checkpoint
// of step 2 (steps 3 and 4 logged again: the later records win), with a cut last line.
static const char k_schema2[] =
    "{\"event\":\"start\",\"schema\":2,\"world\":2,\"steps\":4,\"time\":1796000000.5}\n"
    "{\"event\":\"step\",\"step\":1,\"loss\":4.0,\"tokens\":10,\"data_ms\":1.5,\"comm_ms\":2,"
    "\"ckpt_ms\":0,\"ms_per_step\":10}\n"
    "{\"event\":\"ranks\",\"step\":1,\"rss_bytes\":[100,200],\"peak_rss_bytes\":[150,null],"
    "\"cpu_util\":[1.5,\"x\"],\"step_ms\":[10,11]}\n"
    "{\"event\":\"step\",\"step\":2,\"loss\":3.0,\"tokens\":20}\n"
    "{\"event\":\"checkpoint\",\"step\":2,\"bytes\":4096,\"stall_ms\":1.25}\r\n"
    "{\"event\":\"step\",\"step\":3,\"loss\":2.5,\"tokens\":30}\n"
    "\n   \n"
    "not json at all\n"
    "{\"event\":\"start\",\"schema\":2,\"world\":2,\"steps\":4}\n"
    "{\"event\":\"restart\",\"step\":2,\"from\":\"r/checkpoints/step_00000002\"}\n"
    "{\"event\":\"step\",\"step\":3,\"loss\":2.25,\"tokens\":30}\n"
    "{\"event\":\"step\",\"step\":\"four\",\"loss\":1}\n" // no integer step: dropped
    "{\"event\":\"step\",\"step\":4,\"loss\":2.0,\"tokens\":40,\"lr\":\"high\"}\n"
    "{\"event\":\"straggler\",\"step\":4,\"rank\":1,\"ratio\":2.5}\n"
    "{\"step\":5}\n" // no event
    "{\"event\":\"end\",\"steps\":4,\"loss\":2.0,\"interr";

static void test_schema2_restart(void) {
    slm_run_log l;
    CHECK_OK(slm_run_log_parse(k_schema2, strlen(k_schema2), "m2.jsonl", &l));
    CHECK_EQ_INT(l.schema, 2);
    CHECK_EQ_INT(l.n_lines, 15);  // 17 lines, 2 blank
    CHECK_EQ_INT(l.n_bad, 3);     // "not json", {"step":5}, the cut end line
    CHECK_EQ_INT(l.first_bad, 9); // "not json at all" (lines 7 and 8 are blank)
    CHECK_EQ_INT(l.n_steps, 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(l.steps[i].step, i + 1);
    CHECK_CLOSE(l.steps[2].loss, 2.25, 0, 0); // the replayed record of step 3
    CHECK_CLOSE(l.steps[3].loss, 2.0, 0, 0);
    CHECK(isnan(l.steps[3].lr)); // wrong type reads as absent
    CHECK_CLOSE(l.steps[0].data_ms, 1.5, 0, 0);
    CHECK_CLOSE(l.steps[0].comm_ms, 2, 0, 0);
    CHECK_EQ_INT(l.n_ranks, 1);
    CHECK_EQ_INT(l.ranks[0].n_ranks, 2);
    CHECK_CLOSE(l.ranks[0].rss_bytes[1], 200, 0, 0);
    CHECK(isnan(l.ranks[0].peak_rss_bytes[1]));
    CHECK(isnan(l.ranks[0].cpu_util[1]));
    // events in file order: start, checkpoint, start, restart, straggler
    CHECK_EQ_INT(l.n_events, 5);
    CHECK_EQ_STR(l.events[1].name, "checkpoint");
    CHECK_EQ_INT(l.events[1].step, 2);
    CHECK_EQ_STR(l.events[3].name, "restart");
    CHECK_EQ_INT(l.events[3].step, 2);
    CHECK_CLOSE(l.events[0].time, 1796000000.5, 0, 0);
    CHECK(slm_run_log_find(&l, "straggler", 0) == &l.events[4]);
    CHECK(slm_run_log_find(&l, "nonfinite", 0) == NULL);
    CHECK(strstr(l.events[4].json, "\"ratio\":2.5") != NULL);
    slm_run_log_free(&l);
}

static void test_bad_files(void) {
    slm_run_log l;
    const char *junk = "hello\nworld\n";
    CHECK_EQ_INT(slm_run_log_parse(junk, strlen(junk), "junk.jsonl", &l), SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "junk.jsonl: line 1") != NULL);
    CHECK_EQ_INT(l.n_steps, 0);
    CHECK_OK(slm_run_log_parse("", 0, "empty.jsonl", &l)); // a run that has not stepped yet
    CHECK_EQ_INT(l.n_steps, 0);
    slm_run_log_free(&l);
    // embedded NUL and no final newline
    const char nul[] = "{\"event\":\"step\",\"step\":1,\"loss\":1}\n\0{\"event\":\"step\"";
    CHECK_OK(slm_run_log_parse(nul, sizeof nul - 1, "nul.jsonl", &l));
    CHECK_EQ_INT(l.n_steps, 1);
    CHECK_EQ_INT(l.n_bad, 1);
    slm_run_log_free(&l);
    CHECK_EQ_INT(slm_run_log_read("/nonexistent/metrics.jsonl", &l), SLM_E_IO);
}

// The text summary of a run directory holding k_schema1 and one checkpoint directory.
static void test_text_summary(void) {
    char dir[] = "/tmp/slm_report_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char p[256];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    CHECK_OK(slm_file_write_atomic(p, k_schema1, strlen(k_schema1)));
    snprintf(p, sizeof p, "%s/checkpoints/step_00000002", dir);
    CHECK_OK(slm_mkdir_p(p));
    snprintf(p, sizeof p, "%s/checkpoints/step_00000002/rank_00000.bin", dir);
    CHECK_OK(slm_file_write_atomic(p, "0123456789", 10));
    snprintf(p, sizeof p, "%s/checkpoints/latest", dir);
    CHECK_OK(slm_file_write_atomic(p, "step_00000002\n", 14));
    slm_buf b = {0};
    CHECK_OK(slm_report_text(dir, &b));
    printf("%s", b.data);
    CHECK(strstr(b.data, "model tiny (1k parameters), world size not recorded") != NULL);
    CHECK(strstr(b.data, "status: stopped early, 2 of 3 steps") != NULL);
    CHECK(strstr(b.data, "train loss: 5.5000 at step 1 -> 5.0000 at step 2 (each over one step's "
                         "global batch: 2 x 8 tokens = 16 positions)") != NULL);
    // the end event repeats step 2's validation: that one, not a validation at the end
    CHECK(strstr(b.data, "validation loss: 4.7500 after step 2\n") != NULL);
    // steps after the first: 200 tok/s x 0.08 s = 16 tokens in 0.08 s -> 200 tok/s;
    // schema 1 records no world size, so MFU is not recomputed from the peak (it would need the
    // number of ranks): it is the time-weighted mean of the steps' own figures after the first,
    // step 2's 0.12 = 12.0%
    CHECK(strstr(b.data, "32 tokens in 0.30 s, 200 tok/s, MFU 12.0%") != NULL);
    CHECK(strstr(b.data, "checkpoints: 1, newest step_00000002 (10 bytes), named by latest") !=
          NULL);
    slm_buf_free(&b);
    snprintf(p, sizeof p, "%s/report.html", dir);
    CHECK_OK(slm_report_html(dir, p));
    char *html = NULL;
    size_t len = 0;
    CHECK_OK(slm_file_read_all(p, &html, &len));
    CHECK(strstr(html, "<script") == NULL);
    CHECK(strstr(html, "id=\"chart-loss\"") != NULL);
    free(html);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ_INT(system(cmd), 0);
}

// Table numbers, for reading: integers as such, large values rounded to integers, the rest
// with at most 6 significant digits (no float32 noise). Expected strings by hand.
static void test_fmt_num(void) {
    static const struct {
        double v;
        const char *want;
    } k[] = {
        {0.000300000014, "0.0003"}, // --lr 3e-4 as the trainer writes it (%.9g of 3e-4f)
        {0.00300000003, "0.003"},   // --lr 3e-3
        {3.0000001e-05, "3e-05"},   // lr / 10 in float32
        {(double)0.1f, "0.1"},      // a float32 widened exactly
        {0.1, "0.1"},               // a double
        {0.30000000000000004, "0.3"},
        {1796161536.125, "1796161536"}, // near a float32 (was 1.7961615e+09)
        {1796139463.823, "1796139464"},
        {29536, "29536"},
        {-4, "-4"},
        {1e-05, "1e-05"},
        {1.25e5, "125000"},
        {123456.78, "123457"},
        {2.5, "2.5"},
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        char out[40];
        report_fmt_num(k[i].v, out);
        CHECK_EQ_STR(out, k[i].want);
    }
}

int main(void) {
    RUN(test_fmt_num);
    RUN(test_schema1);
    RUN(test_schema2_restart);
    RUN(test_bad_files);
    RUN(test_text_summary);
    return TEST_SUMMARY();
}
