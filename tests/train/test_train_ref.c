// Training parity with PyTorch: 10 optimizer steps of shardlm's loop (synthetic tokens, gradient
// accumulation 2, warmup + cosine LR, clipping, AdamW with decay ranges) from a seeded init,
// replayed by the independent reference (tests/reference/llama_ref.py + torch.optim.AdamW in
// float64, tests/train/train_ref_check.py). Losses must agree to rel 1e-4, weights to 1e-3.
// With --compute-dtype bf16 the replay runs the float32 reference under
// torch.autocast("cpu", bfloat16); the bound is train_ref_check.py's (stated there).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "reference/slm_tensors.h"
#include "test.h"
#include "train/train.h"

static double g_loss[64];
static int g_n;

static void hook(void *ctx, const slm_step_metrics *m) {
    (void)ctx;
    if (g_n < 64) g_loss[g_n++] = m->loss;
}

static void add_weights(slm_tensor_set *s, const slm_llama *m, const char *prefix) {
    for (int u = 0; u < m->n_units; u++)
        for (int i = 0; i < m->units[u].n_views; i++) {
            const slm_param_view *v = &m->units[u].views[i];
            char name[160];
            snprintf(name, sizeof name, "%s%s", prefix, v->name);
            slm_tset_add(s, name, SLM_T_F32, v->ndim, v->shape, m->params[u] + v->offset);
        }
}

static void ten_steps_vs_torch(slm_dtype compute) {
    char dir[] = "/tmp/slm_test_train_ref_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *cfg = slm_path_join(dir, "config.json"), *run = slm_path_join(dir, "run");
    char *dump = slm_path_join(dir, "dump.slt");
    const char *json = "{\"vocab_size\": 64, \"hidden_size\": 48, \"intermediate_size\": 96,"
                       " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                       " \"num_key_value_heads\": 2, \"max_position_embeddings\": 32,"
                       " \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0,"
                       " \"tie_word_embeddings\": false, \"initializer_range\": 0.05}";
    CHECK_OK(slm_file_write_atomic(cfg, json, strlen(json)));
    slm_train_opts o;
    slm_train_opts_default(&o);
    o.synthetic = true;
    o.model = cfg;
    o.out_dir = run;
    o.B = 2, o.T = 16, o.grad_accum = 2, o.steps = 10, o.warmup = 3;
    o.adamw.lr_peak = 1e-2f;
    o.min_lr = 1e-3f;
    o.grad_clip = 0.5f;
    o.seed = 7;
    o.log_every = 0;
    o.peak_gflops = 1;
    o.compute_dtype = compute;
    g_n = 0;
    slm_train_std_hooks std = {0}; // the final checkpoint holds the weights read back below
    CHECK_OK(slm_train_add_std_hooks(&o, &std));
    slm_train_add_hook(&o, hook, NULL);
    CHECK_OK(slm_train_run(&o, NULL));
    CHECK_EQ_INT(g_n, 10);

    slm_tensor_set s = {0};
    slm_llama_config c;
    CHECK_OK(slm_llama_config_load(cfg, &c));
    slm_llama init;
    CHECK_OK(slm_llama_init(&init, &c, true));
    slm_llama_init_weights(&init, o.seed); // the same seeded init the run started from
    add_weights(&s, &init, "init/");
    slm_llama_free(&init);
    slm_llama fin;
    CHECK_OK(slm_model_dir_load(run, false, &fin, NULL, false));
    add_weights(&s, &fin, "final/");
    slm_llama_free(&fin);
    // The synthetic token stream documented in train.h.
    int64_t rows = o.steps * o.grad_accum * o.B, cols = o.T + 1;
    int32_t *tok = malloc((size_t)(rows * cols) * sizeof(int32_t));
    slm_rng r;
    slm_rng_seed(&r, o.seed ^ SLM_TRAIN_SYNTH_SEED_XOR);
    for (int64_t i = 0; i < rows * cols; i++)
        tok[i] = (int32_t)slm_rng_below(&r, 64);
    int64_t shp[2] = {rows, cols};
    slm_tset_add(&s, "tokens", SLM_T_I32, 2, shp, tok);
    int64_t ls = 10;
    slm_tset_add(&s, "losses", SLM_T_F64, 1, &ls, g_loss);
    char meta[512];
    snprintf(meta, sizeof meta,
             "{\"B\": %d, \"T\": %d, \"K\": %d, \"steps\": %lld, \"warmup\": %lld, \"lr\": %.9g,"
             " \"min_lr\": %.9g, \"weight_decay\": %.9g, \"grad_clip\": %.9g, \"beta1\": %.9g,"
             " \"beta2\": %.9g, \"eps\": %.9g, \"compute\": \"%s\"}",
             o.B, o.T, o.grad_accum, (long long)o.steps, (long long)o.warmup,
             (double)o.adamw.lr_peak, (double)o.min_lr, (double)o.adamw.weight_decay,
             (double)o.grad_clip, (double)o.adamw.beta1, (double)o.adamw.beta2, (double)o.adamw.eps,
             compute == SLM_DTYPE_BF16 ? "bf16" : "fp32");
    slm_tset_set_meta(&s, meta);
    CHECK_OK(slm_tset_save(&s, dump));
    slm_tset_free(&s);
    free(tok);

    const char *py = getenv("SLM_PYTHON"), *src = getenv("SLM_SOURCE_DIR");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "\"%s\" \"%s/tests/train/train_ref_check.py\" \"%s\" \"%s\"",
             py ? py : "python3", src ? src : ".", dump, cfg);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "PyTorch replay disagrees (rc %d), see the lines above", rc);
    snprintf(cmd, sizeof cmd, "rm -rf \"%s\"", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    free(cfg), free(run), free(dump);
}

static void test_ten_steps_vs_torch(void) {
    ten_steps_vs_torch(SLM_DTYPE_F32);
}

// bf16 compute against PyTorch's autocast(bfloat16) on the CPU, same weights and batches.
static void test_ten_steps_bf16_vs_autocast(void) {
    ten_steps_vs_torch(SLM_DTYPE_BF16);
}

// slm_eval_token_ids on lines of different lengths vs the reference's mean loss over all targets.
static void test_eval_token_ids_vs_torch(void) {
    char dir[] = "/tmp/slm_test_eval_ref_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *cfg = slm_path_join(dir, "config.json"), *ids = slm_path_join(dir, "ids.txt");
    char *dump = slm_path_join(dir, "dump.slt"), *chk = slm_path_join(dir, "check.py");
    const char *json = "{\"vocab_size\": 50, \"hidden_size\": 32, \"intermediate_size\": 80,"
                       " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                       " \"num_key_value_heads\": 1, \"max_position_embeddings\": 24,"
                       " \"tie_word_embeddings\": true, \"initializer_range\": 0.2}";
    CHECK_OK(slm_file_write_atomic(cfg, json, strlen(json)));
    slm_llama_config c;
    CHECK_OK(slm_llama_config_load(cfg, &c));
    slm_llama m;
    CHECK_OK(slm_llama_init(&m, &c, true));
    slm_llama_init_weights(&m, 99);
    // Lines of 25 (max_pos + 1), 2, 1 (skipped), 0 (skipped) and 10 ids, with extra spaces.
    slm_rng r;
    slm_rng_seed(&r, 5);
    const int lens[] = {25, 2, 1, 0, 10};
    slm_buf text = {0};
    for (int l = 0; l < 5; l++) {
        for (int i = 0; i < lens[l]; i++)
            slm_buf_appendf(&text, "%s%d", i ? (i % 3 ? " " : "  \t") : "",
                            (int)slm_rng_below(&r, 50));
        slm_buf_appendf(&text, "\n");
    }
    CHECK_OK(slm_file_write_atomic(ids, text.data, text.len));
    slm_buf_free(&text);
    slm_eval_result er;
    CHECK_OK(slm_eval_token_ids(&m, ids, &er));
    CHECK_EQ_INT(er.n_seqs, 3);
    CHECK_EQ_INT(er.n_tokens, 24 + 1 + 9);
    slm_tensor_set s = {0};
    add_weights(&s, &m, "w/");
    CHECK_OK(slm_tset_save(&s, dump));
    slm_tset_free(&s);
    slm_llama_free(&m);
    // The reference: every line with >= 2 ids, inputs ids[:-1], targets ids[1:], mean over all.
    const char *py_src = "import sys, numpy as np, torch\n"
                         "sys.path.insert(0, sys.argv[1] + '/tests/reference')\n"
                         "import llama_ref as R\n"
                         "t, _ = R.read_tensors(sys.argv[2])\n"
                         "m = R.build_model(R.load_config(sys.argv[3]), dtype=torch.float64)\n"
                         "R.load_flat_weights(m, t, prefix='w/')\n"
                         "tot, n = 0.0, 0\n"
                         "for line in open(sys.argv[4]):\n"
                         "    ids = [int(x) for x in line.split()]\n"
                         "    if len(ids) < 2: continue\n"
                         "    a = np.array([ids])\n"
                         "    _, loss = R.forward(m, a[:, :-1], a[:, 1:])\n"
                         "    tot += float(loss) * (len(ids) - 1); n += len(ids) - 1\n"
                         "print(repr(tot / n))\n";
    CHECK_OK(slm_file_write_atomic(chk, py_src, strlen(py_src)));
    const char *py = getenv("SLM_PYTHON"), *src = getenv("SLM_SOURCE_DIR");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "\"%s\" \"%s\" \"%s\" \"%s\" \"%s\" \"%s\"", py ? py : "python3", chk,
             src ? src : ".", dump, cfg, ids);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    double want = NAN;
    int got = fscanf(f, "%lf", &want);
    int rc = pclose(f);
    CHECK_MSG(got == 1 && rc == 0, "reference failed (rc %d)", rc);
    fprintf(stderr, "  eval --token-ids: shardlm %.7f torch %.7f\n", er.loss, want);
    CHECK_CLOSE(er.loss, want, 1e-5, 0);
    CHECK_CLOSE(er.perplexity, exp(want), 1e-4, 0);
    // An id outside the vocabulary names the line.
    CHECK_OK(slm_file_write_atomic(ids, "1 2 3\n4 50 6\n", 13));
    CHECK_OK(slm_llama_init(&m, &c, true));
    CHECK_EQ_INT(slm_eval_token_ids(&m, ids, &er), SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "ids.txt:2") != NULL);
    CHECK_OK(slm_file_write_atomic(ids, "1 2 x\n", 6));
    CHECK_EQ_INT(slm_eval_token_ids(&m, ids, &er), SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "ids.txt:1:5") != NULL);
    slm_llama_free(&m);
    snprintf(cmd, sizeof cmd, "rm -rf \"%s\"", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    free(cfg), free(ids), free(dump), free(chk);
}

int main(void) {
    RUN(test_ten_steps_vs_torch);
    RUN(test_ten_steps_bf16_vs_autocast);
    RUN(test_eval_token_ids_vs_torch);
    return TEST_SUMMARY();
}
