// The resume batch check (src/train/resume_batch.c) on hand-built checkpoint metas: which
// geometries pass (same global batch at any world / split: resharding), which are refused
// (SLM_E_ARG) and the fix each message names, worked out by hand from G = B x W x K:
//   --grad-accum G / (B x W) when B x W divides G; else --batch b --grad-accum (G / W) / b for
//   the divisors b <= B of G / W (largest first); else the nearest world sizes dividing G.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/base.h"
#include "ckpt/ckpt_internal.h"
#include "test.h"
#include "train/train_internal.h"

static slm_ckpt_meta meta(int B, int T, int K, int W) {
    slm_ckpt_meta m;
    memset(&m, 0, sizeof m);
    m.has_batch = true;
    m.batch = B, m.seq = T, m.grad_accum = K, m.world = W;
    return m;
}

// Refused with SLM_E_ARG and a message holding `want`.
static void refused(slm_ckpt_meta m, slm_batch_geom now, bool allow, const char *want) {
    bool changed = true;
    slm_status st = slm_train_check_resume_batch(&m, "CK", now, allow, &changed);
    CHECK_EQ_INT(st, SLM_E_ARG);
    CHECK(!changed);
    CHECK_MSG(strstr(slm_errmsg(), want) != NULL, "\"%s\" not in \"%s\"", want, slm_errmsg());
}

static void test_accepted(void) {
    bool changed = true;
    slm_ckpt_meta m = meta(2, 16, 2, 2); // 8 sequences
    // same geometry; 4 ranks x K 1; 1 rank x B 8; 8 ranks x B 1; another B / K split
    slm_batch_geom ok[] = {
        {2, 16, 2, 2}, {2, 16, 1, 4}, {8, 16, 1, 1}, {1, 16, 1, 8}, {1, 16, 4, 2}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        CHECK_OK(slm_train_check_resume_batch(&m, "CK", ok[i], false, &changed));
        CHECK(!changed);
    }
    // another global batch with the opt-in: accepted and reported
    CHECK_OK(slm_train_check_resume_batch(&m, "CK", (slm_batch_geom){2, 16, 2, 3}, true, &changed));
    CHECK(changed);
    // an older manifest records nothing: not checked
    m.has_batch = false;
    CHECK_OK(slm_train_check_resume_batch(&m, "CK", (slm_batch_geom){5, 8, 3, 7}, false, &changed));
    CHECK(!changed);
}

static void test_refused(void) {
    // 2 ranks x B 1 x K 3 = 6 at 3 ranks, same B, K (9): --grad-accum 2 keeps 6
    refused(
        meta(1, 16, 3, 2), (slm_batch_geom){1, 16, 3, 3}, false,
        "checkpoint CK was saved with a global batch of --batch 1 x 2 ranks x --grad-accum 3 = 6 "
        "sequences; this run's is --batch 1 x 3 ranks x --grad-accum 3 = 9 sequences");
    refused(meta(1, 16, 3, 2), (slm_batch_geom){1, 16, 3, 3}, false,
            "To keep 6 sequences at 3 ranks: --grad-accum 2 (with --batch 1); or pass "
            "--allow-batch-change");
    // 2 x 2 x 2 = 8 at 4 ranks x K 2 (16): K halved
    refused(meta(2, 16, 2, 2), (slm_batch_geom){2, 16, 2, 4}, false,
            "To keep 8 sequences at 4 ranks: --grad-accum 1 (with --batch 2)");
    // 12 at 4 ranks with B 4: 16 does not divide 12; 3 per rank: --batch 3 x 1 or 1 x 3
    refused(meta(2, 16, 3, 2), (slm_batch_geom){4, 16, 3, 4}, false,
            "To keep 12 sequences at 4 ranks: --batch 3 --grad-accum 1 or --batch 1 "
            "--grad-accum 3;");
    // 8 at 3 ranks: no pair (8 = 3 x ...); 2 and 4 ranks divide 8
    refused(meta(2, 16, 2, 2), (slm_batch_geom){2, 16, 2, 3}, false,
            "no --batch / --grad-accum pair keeps 8 sequences at 3 ranks (8 is not a multiple of "
            "3); run at a world size that divides it (2 ranks or 4 ranks)");
    // 6 at 7 ranks: 6 ranks below, none above (only up to G)
    refused(meta(3, 16, 1, 2), (slm_batch_geom){1, 16, 1, 7}, false,
            "(6 is not a multiple of 7); run at a world size that divides it (6 ranks)");
    // one rank: the singular
    refused(meta(2, 16, 1, 2), (slm_batch_geom){3, 16, 1, 1}, false,
            "To keep 4 sequences at 1 rank: --batch 2 --grad-accum 2 or --batch 1 --grad-accum 4");
    // --seq: refused whatever the opt-in, with or without the same global batch
    refused(meta(2, 16, 2, 2), (slm_batch_geom){2, 32, 2, 2}, false,
            "checkpoint CK was saved by a run with --seq 16; this run has --seq 32");
    refused(meta(2, 16, 2, 2), (slm_batch_geom){2, 8, 1, 2}, true,
            "resume with --seq 16 (--allow-batch-change does not cover --seq)");
}

static void test_describe(void) {
    char buf[128];
    slm_batch_geom_describe((slm_batch_geom){3, 64, 5, 1}, buf, sizeof buf);
    CHECK_EQ_STR(buf, "--batch 3 x 1 rank x --grad-accum 5 = 15 sequences");
    CHECK_EQ_INT(slm_batch_global((slm_batch_geom){1 << 20, 8, 1 << 10, 1 << 10}),
                 (int64_t)1 << 40);
}

// The manifest's "batch" record: tests/fuzz/corpus/ckpt_manifest/small.json (world_size 1, no
// record: has_batch false) with a record BATCH (JSON text) added. Returns the parse status.
static slm_status parse_with(const char *batch, slm_ckpt_meta *out) {
    const char *src = getenv("SLM_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/ckpt_manifest/small.json", src ? src : ".");
    char *text = NULL;
    size_t len = 0;
    if (slm_file_read_all(path, &text, &len) != SLM_OK) {
        fprintf(stderr, "cannot read %s\n", path);
        return SLM_E_IO; // the callers' checks of the status fail
    }
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    if (batch) cJSON_AddItemToObject(o, "batch", cJSON_Parse(batch));
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    slm_ckpt *c = slm_ckpt_alloc("/nonexistent/step_00000003");
    slm_status st = slm_ckpt_parse_manifest(c, t, strlen(t));
    if (!st) *out = *slm_ckpt_get_meta(c);
    slm_ckpt_free(c);
    free(t);
    return st;
}

static void test_manifest(void) {
    slm_ckpt_meta m;
    CHECK_OK(parse_with(NULL, &m)); // an older manifest: no record
    CHECK(!m.has_batch);
    // 2 x 1 x 3 = 6 sequences, x 16 = 96 tokens
    CHECK_OK(parse_with("{\"micro_batch\": 2, \"seq\": 16, \"grad_accum\": 3, \"world\": 1, "
                        "\"global_sequences\": 6, \"global_tokens\": 96}",
                        &m));
    CHECK(m.has_batch);
    CHECK_EQ_INT(m.batch, 2);
    CHECK_EQ_INT(m.seq, 16);
    CHECK_EQ_INT(m.grad_accum, 3);
    CHECK_EQ_INT(m.world, 1);
    struct {
        const char *batch, *want;
    } bad[] = {
        {"[1]", "\"batch\" is not an object"},
        {"{\"micro_batch\": 2, \"seq\": 16, \"grad_accum\": 3, \"world\": 2, "
         "\"global_sequences\": 12, \"global_tokens\": 192}",
         "batch.world 2, but world_size is 1"},
        {"{\"micro_batch\": 2, \"seq\": 16, \"grad_accum\": 3, \"world\": 1, "
         "\"global_sequences\": 7, \"global_tokens\": 112}",
         "global_sequences 7 and global_tokens 112, expected micro_batch 2 x world 1 x grad_accum "
         "3"},
        {"{\"micro_batch\": 2, \"seq\": 16, \"grad_accum\": 3, \"world\": 1, "
         "\"global_sequences\": 6, \"global_tokens\": 97}",
         "and that x seq 16"},
        {"{\"micro_batch\": 0, \"seq\": 16, \"grad_accum\": 3, \"world\": 1, "
         "\"global_sequences\": 0, \"global_tokens\": 0}",
         "micro_batch"},
        {"{\"micro_batch\": 2, \"grad_accum\": 3, \"world\": 1, \"global_sequences\": 6, "
         "\"global_tokens\": 96}",
         "seq"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        slm_status st = parse_with(bad[i].batch, &m);
        CHECK_EQ_INT(st, SLM_E_FORMAT);
        CHECK_MSG(strstr(slm_errmsg(), bad[i].want) != NULL, "\"%s\" not in \"%s\"", bad[i].want,
                  slm_errmsg());
        CHECK_MSG(strstr(slm_errmsg(), "/nonexistent/step_00000003/manifest.json") != NULL,
                  "the file is not named: %s", slm_errmsg());
    }
}

int main(void) {
    RUN(test_accepted);
    RUN(test_manifest);
    RUN(test_refused);
    RUN(test_describe);
    return TEST_SUMMARY();
}
