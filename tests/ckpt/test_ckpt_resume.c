// Exact resume through the training loop (world of one): 20 steps straight vs 10 steps, a stop
// (the SIGTERM path: a hook sets the stop flag after step 10, the loop saves a checkpoint and
// returns SLM_E_INTERRUPTED), --resume auto and the remaining 10 steps. The per-step losses and
// the final params, AdamW m and v must be bitwise identical, both with synthetic tokens (the
// trainer's RNG state) and with a real prepared dataset (the loader position), with
// asynchronous and synchronous saves. Also: --resume of another model config is refused, and
// --resume auto without a checkpoint starts fresh.
#include "ckpt/ckpt.h"
#include "data/data.h"
#include "test.h"
#include "tokenizer/tokenizer.h"
#include "train/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char g_tmp[256];
static char *g_data, *g_cfg;

typedef struct losses {
    double loss[64];
    int64_t stop_at;
} losses;

static void hook(void *ctx, const slm_step_metrics *m) {
    losses *l = ctx;
    if (m->step < 64) l->loss[m->step] = m->loss;
    if (l->stop_at && m->step == l->stop_at) slm_train_request_stop();
}

static slm_train_std_hooks g_std; // stop flag, checkpoints, metrics.jsonl (as shardlm train)

static void base_opts(slm_train_opts *o, bool synthetic, const char *out, losses *l) {
    slm_train_opts_default(o);
    slm_train_add_std_hooks(o, &g_std);
    o->synthetic = synthetic;
    o->data_dir = synthetic ? NULL : g_data;
    o->model = g_cfg;
    o->out_dir = out;
    o->B = 2;
    o->T = 16;
    o->grad_accum = 2;
    o->steps = 20;
    o->warmup = 3;
    o->adamw.lr_peak = 3e-3f;
    o->seed = 5;
    o->threads = 2;
    o->peak_gflops = 10;
    o->log_every = 0;
    slm_train_add_hook(o, hook, l);
}

static int compare_ckpts(const char *a, const char *b) {
    slm_ckpt *x = NULL, *y = NULL;
    if (slm_ckpt_open(a, &x) || slm_ckpt_open(b, &y)) {
        fprintf(stderr, "  %s\n", slm_errmsg());
        slm_ckpt_free(x);
        return 1;
    }
    int bad = slm_ckpt_get_meta(x)->step != slm_ckpt_get_meta(y)->step ||
              slm_ckpt_get_meta(x)->opt_step != slm_ckpt_get_meta(y)->opt_step ||
              slm_ckpt_get_meta(x)->tokens_seen != slm_ckpt_get_meta(y)->tokens_seen ||
              slm_ckpt_get_meta(x)->loader.pos != slm_ckpt_get_meta(y)->loader.pos ||
              memcmp(&slm_ckpt_get_meta(x)->rng, &slm_ckpt_get_meta(y)->rng, sizeof(slm_rng));
    for (int u = 0; u < slm_ckpt_n_units(x) && !bad; u++) {
        int64_t n = slm_ckpt_unit(x, u)->numel;
        float *p = slm_xmalloc((size_t)n * 12), *q = slm_xmalloc((size_t)n * 12);
        bad |= slm_ckpt_read_range(x, u, 0, n, p, p + n, p + 2 * n) != SLM_OK;
        bad |= slm_ckpt_read_range(y, u, 0, n, q, q + n, q + 2 * n) != SLM_OK;
        if (!bad && memcmp(p, q, (size_t)n * 12)) {
            fprintf(stderr, "  unit %d: params / m / v differ\n", u);
            bad = 1;
        }
        free(p);
        free(q);
    }
    slm_ckpt_free(x);
    slm_ckpt_free(y);
    return bad;
}

static void resume_case(bool synthetic, bool sync) {
    char name[64];
    snprintf(name, sizeof name, "%s_%s", synthetic ? "synth" : "data", sync ? "sync" : "async");
    char *dir = slm_path_join(g_tmp, name);
    char *ra = slm_path_join(dir, "straight"), *rb = slm_path_join(dir, "resumed");
    losses la, lb;
    memset(&la, 0, sizeof la);
    memset(&lb, 0, sizeof lb);
    slm_train_opts o;
    base_opts(&o, synthetic, ra, &la);
    o.ckpt_sync = sync;
    o.ckpt_every_steps = 7; // saves at 7, 14 and the end (20), async ones overlapping steps
    CHECK_OK(slm_train_run(&o, NULL));
    // first half, stopped after step 10 (what SIGTERM does)
    base_opts(&o, synthetic, rb, &lb);
    o.ckpt_sync = sync;
    o.ckpt_every_steps = 7;
    lb.stop_at = 10;
    slm_status st = slm_train_run(&o, NULL);
    slm_train_reset_stop();
    CHECK_EQ_INT(st, SLM_E_INTERRUPTED);
    {
        slm_ckpt *c = NULL;
        CHECK_OK(slm_ckpt_open(rb, &c));
        CHECK_EQ_INT(slm_ckpt_get_meta(c)->step, 10);
        slm_ckpt_free(c);
    }
    // second half
    lb.stop_at = 0;
    base_opts(&o, synthetic, rb, &lb);
    o.ckpt_sync = sync;
    o.ckpt_every_steps = 7;
    o.resume = "auto";
    CHECK_OK(slm_train_run(&o, NULL));
    for (int s = 1; s <= 20; s++)
        CHECK_MSG(memcmp(&la.loss[s], &lb.loss[s], sizeof(double)) == 0,
                  "%s: step %d loss %.17g (straight) vs %.17g (resumed)", name, s, la.loss[s],
                  lb.loss[s]);
    CHECK_MSG(compare_ckpts(ra, rb) == 0, "%s: final checkpoints differ", name);
    free(ra);
    free(rb);
    free(dir);
}

static void test_resume_synthetic_async(void) {
    resume_case(true, false);
}
static void test_resume_synthetic_sync(void) {
    resume_case(true, true);
}
static void test_resume_dataset_async(void) {
    resume_case(false, false);
}

static void test_resume_errors(void) {
    losses l;
    memset(&l, 0, sizeof l);
    char *run = slm_path_join(g_tmp, "synth_async/straight");
    slm_train_opts o;
    // another model config than the checkpoint's
    base_opts(&o, true, NULL, &l);
    char *other = slm_path_join(g_tmp, "other.json");
    const char *cfg = "{\"vocab_size\": 300, \"hidden_size\": 48, \"intermediate_size\": 64, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                      "\"max_position_embeddings\": 32}";
    CHECK_OK(slm_file_write_atomic(other, cfg, strlen(cfg)));
    o.model = other;
    o.resume = run;
    o.steps = 2;
    slm_status st = slm_train_run(&o, NULL);
    CHECK_MSG(st == SLM_E_ARG && strstr(slm_errmsg(), "manifest.json"), "status %d: %s", (int)st,
              slm_errmsg());
    // auto without any checkpoint: a fresh start
    char *fresh = slm_path_join(g_tmp, "fresh");
    base_opts(&o, true, fresh, &l);
    o.resume = "auto";
    o.steps = 2;
    CHECK_OK(slm_train_run(&o, NULL));
    free(fresh);
    free(other);
    free(run);
}

static slm_status make_dataset(void) {
    char *corpus = slm_path_join(g_tmp, "corpus.txt");
    char *text = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(slm_test_shared("data/tinyshakespeare.txt"), &text, &len);
    if (st) return st;
    st = slm_file_write_atomic(corpus, text, len < 60000 ? len : 60000);
    free(text);
    if (st) return st;
    const char *inputs[1] = {corpus};
    const char *specials[2] = {"<|bos|>", "<|eos|>"};
    slm_bpe_train_opts bo = {.inputs = inputs,
                             .n_inputs = 1,
                             .vocab_size = 300,
                             .specials = specials,
                             .n_specials = 2,
                             .threads = 1};
    slm_tokenizer *tok = NULL;
    char *tpath = slm_path_join(g_tmp, "tokenizer.json");
    st = slm_bpe_train(&bo, &tok);
    if (!st) st = slm_tokenizer_save_json(tok, tpath);
    slm_tokenizer_free(tok);
    g_data = slm_path_join(g_tmp, "data");
    slm_prep_opts po = {.tokenizer_path = tpath,
                        .inputs = inputs,
                        .n_inputs = 1,
                        .out_dir = g_data,
                        .shard_tokens = 4000,
                        .val_fraction = 0.1,
                        .workers = 1,
                        .seed = 3};
    if (!st) st = slm_prep_run(&po);
    free(tpath);
    free(corpus);
    return st;
}

int main(void) {
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_tmp, sizeof g_tmp, "%s/slm_test_resume_%d", base, (int)getpid());
    slm_mkdir_p(g_tmp);
    g_cfg = slm_path_join(g_tmp, "config.json");
    const char *cfg = "{\"vocab_size\": 300, \"hidden_size\": 32, \"intermediate_size\": 64, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                      "\"num_key_value_heads\": 2, \"max_position_embeddings\": 32}";
    if (slm_file_write_atomic(g_cfg, cfg, strlen(cfg)) || make_dataset()) {
        fprintf(stderr, "setup failed: %s\n", slm_errmsg());
        return 1;
    }
    RUN(test_resume_synthetic_async);
    RUN(test_resume_synthetic_sync);
    RUN(test_resume_dataset_async);
    RUN(test_resume_errors);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    free(g_cfg);
    free(g_data);
    return TEST_SUMMARY();
}
