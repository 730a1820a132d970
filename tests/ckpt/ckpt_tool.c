// Test driver for the checkpoint / HF cross-checks (tests/ckpt/hf_cross.py, test_ckpt_cli.sh):
//   ckpt_tool make-ckpt ROOT CONFIG SEED STEP   seeded model (+ m = v = params/2) saved as a
//                                               checkpoint under ROOT (a checkpoints root)
//   ckpt_tool hf-logits DIR TOKENS.slt OUT.slt  model from DIR (config.json + safetensors via
//                                               slm_hf_load): logits [B, T, V] of tokens
//   ckpt_tool ckpt-logits PATH TOKENS.slt OUT.slt  the same from a checkpoint's params
//   ckpt_tool gguf-check FILE                   slm_gguf_open only: exit 0 if the GGUF file is
//                                               accepted, 1 (message) if refused
//   ckpt_tool gguf-dump FILE OUT.slt            every tensor of a GGUF file dequantized to f32
//                                               (shape: GGUF's ne reversed)
//   ckpt_tool gguf-logits FILE TOKENS.slt OUT.slt  model from a GGUF file (slm_gguf_llama_config
//                                               + slm_gguf_load): logits [B, T, V]
//   ckpt_tool gguf-params FILE OUT.slt          the model's parameters after slm_gguf_load, by
//                                               HF name (shape as HF's)
//   ckpt_tool gguf-tokenizer FILE DIR          writes the GGUF file's tokenizer as
//   DIR/tokenizer.json ckpt_tool st-check FILE                     slm_st_open only: exit 0 if the
//   safetensors
//                                               file is accepted, 1 (message) if refused
// Exit status 0 on success; errors print the message.
#include "ckpt/ckpt.h"
#include "reference/slm_tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(void) {
    fprintf(stderr, "ckpt_tool: %s\n", slm_errmsg());
    return 1;
}

static int logits_out(slm_llama *m, const char *tokens_path, const char *out) {
    slm_tensor_set in = {0}, res = {0};
    if (slm_tset_load(&in, tokens_path)) return fail();
    const slm_tensor *t = slm_tset_get(&in, "tokens");
    if (!t || t->dtype != SLM_T_I32 || t->ndim != 2) {
        fprintf(stderr, "ckpt_tool: %s: needs tokens [B, T] i32\n", tokens_path);
        return 1;
    }
    int B = (int)t->shape[0], T = (int)t->shape[1];
    slm_llama_set_shape(m, B, T, true);
    m->loss_only = true;
    slm_llama_forward(m, t->data, NULL, B, T);
    int64_t shape[3] = {B, T, m->cfg.vocab_size};
    float *logits = slm_xmalloc((size_t)(B * T) * (size_t)m->cfg.vocab_size * sizeof(float));
    slm_llama_logits_to_host(m, 0, (int64_t)B * T, logits);
    slm_tset_add(&res, "logits", SLM_T_F32, 3, shape, logits);
    free(logits);
    slm_status st = slm_tset_save(&res, out);
    slm_tset_free(&in);
    slm_tset_free(&res);
    return st ? fail() : 0;
}

// Mean loss of tokens [B, T + 1]: inputs [:, :T], targets [:, 1:].
static int loss_out(slm_llama *m, const char *tokens_path) {
    slm_tensor_set in = {0};
    if (slm_tset_load(&in, tokens_path)) return fail();
    const slm_tensor *t = slm_tset_get(&in, "tokens");
    if (!t || t->dtype != SLM_T_I32 || t->ndim != 2 || t->shape[1] < 2) {
        fprintf(stderr, "ckpt_tool: %s: needs tokens [B, T + 1] i32\n", tokens_path);
        return 1;
    }
    int B = (int)t->shape[0], T = (int)t->shape[1] - 1;
    const int32_t *all = t->data;
    int32_t *x = slm_xmalloc((size_t)B * (size_t)T * sizeof *x),
            *y = slm_xmalloc((size_t)B * (size_t)T * sizeof *y);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            x[b * T + i] = all[b * (T + 1) + i];
            y[b * T + i] = all[b * (T + 1) + i + 1];
        }
    slm_llama_set_shape(m, B, T, true);
    float loss = slm_llama_forward_loss(m, x, y, B, T);
    printf("%.9g\n", (double)loss);
    free(x);
    free(y);
    slm_tset_free(&in);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: see the comment at the top of ckpt_tool.c\n");
        return 2;
    }
    const char *mode = argv[1];
    slm_llama m;
    if (!strcmp(mode, "make-ckpt") && argc == 6) {
        slm_llama_config cfg;
        if (slm_llama_config_resolve(argv[3], &cfg) || slm_llama_init(&m, &cfg, true))
            return fail();
        slm_llama_init_weights(&m, strtoull(argv[4], NULL, 10));
        slm_ckpt_shard sh[256];
        float *mv[256];
        for (int u = 0; u < m.n_units; u++) {
            int64_t n = m.units[u].numel;
            mv[u] = slm_xmalloc((size_t)n * 4);
            for (int64_t i = 0; i < n; i++)
                mv[u][i] = m.params[u][i] * 0.5f;
            sh[u] = (slm_ckpt_shard){
                .begin = 0, .end = n, .params = m.params[u], .m = mv[u], .v = mv[u]};
        }
        slm_ckpt_meta meta;
        slm_ckpt_meta_default(&meta, &cfg);
        meta.step = strtoll(argv[5], NULL, 10);
        meta.opt_step = meta.lr_step = meta.step;
        meta.adamw = (slm_adamw_hparams){3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
        slm_ckpt_saver_opts o = {.root = argv[2], .rank = 0, .world = 1};
        slm_ckpt_saver *s = NULL;
        slm_status st = slm_ckpt_saver_new(&o, &s);
        if (!st) st = slm_ckpt_saver_save(s, &meta, m.units, m.n_units, sh);
        if (!st) st = slm_ckpt_saver_finish(s);
        slm_ckpt_saver_free(s);
        for (int u = 0; u < m.n_units; u++)
            free(mv[u]);
        slm_llama_free(&m);
        return st ? fail() : 0;
    }
    if (!strcmp(mode, "gguf-check") && argc == 3) {
        slm_gguf_file g;
        slm_status st = slm_gguf_open(argv[2], &g);
        slm_gguf_close(&g);
        return st ? fail() : 0;
    }
    if (!strcmp(mode, "gguf-tokenizer") && argc == 4) {
        slm_gguf_file g;
        char *p = NULL;
        slm_status st = slm_gguf_open(argv[2], &g);
        if (!st) st = slm_gguf_write_tokenizer(&g, argv[3], &p);
        free(p);
        slm_gguf_close(&g);
        return st ? fail() : 0;
    }
    if (!strcmp(mode, "gguf-dump") && argc == 4) {
        slm_gguf_file g;
        if (slm_gguf_open(argv[2], &g)) return fail();
        slm_tensor_set res = {0};
        for (int64_t i = 0; i < g.n_tensors; i++) {
            const slm_gguf_tensor *t = &g.t[i];
            float *x = slm_xmalloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
            slm_gguf_read_f32(&g, t, x);
            int64_t shape[4];
            for (int d = 0; d < t->n_dims; d++)
                shape[d] = t->ne[t->n_dims - 1 - d];
            slm_tset_add(&res, t->name, SLM_T_F32, t->n_dims, shape, x);
            free(x);
        }
        slm_status st = slm_tset_save(&res, argv[3]);
        slm_tset_free(&res);
        slm_gguf_close(&g);
        return st ? fail() : 0;
    }
    if ((!strcmp(mode, "gguf-logits") && argc == 5) ||
        ((!strcmp(mode, "gguf-params") || !strcmp(mode, "gguf-loss")) && argc == 4)) {
        slm_gguf_file g;
        slm_llama_config cfg;
        if (slm_gguf_open(argv[2], &g)) return fail();
        if (slm_gguf_llama_config(&g, &cfg) || slm_gguf_check_shapes(&g, &cfg) ||
            slm_llama_init(&m, &cfg, true) || slm_gguf_load(&m, &g)) {
            slm_gguf_close(&g);
            return fail();
        }
        slm_gguf_close(&g);
        int rc = 0;
        if (argc == 5) {
            rc = logits_out(&m, argv[3], argv[4]);
        } else if (!strcmp(mode, "gguf-loss")) {
            rc = loss_out(&m, argv[3]);
        } else {
            slm_tensor_set res = {0};
            for (int u = 0; u < m.n_units; u++)
                for (int i = 0; i < m.units[u].n_views; i++) {
                    const slm_param_view *v = &m.units[u].views[i];
                    slm_tset_add(&res, v->name, SLM_T_F32, v->ndim, v->shape,
                                 m.params[u] + v->offset);
                }
            if (slm_tset_save(&res, argv[3])) rc = fail();
            slm_tset_free(&res);
        }
        slm_llama_free(&m);
        return rc;
    }
    if (!strcmp(mode, "hf-logits") && argc == 5) {
        char *cp = slm_path_join(argv[2], "config.json");
        slm_llama_config cfg;
        slm_status st = slm_llama_config_load(cp, &cfg);
        free(cp);
        if (st || slm_llama_init(&m, &cfg, true) || slm_hf_load(&m, argv[2])) return fail();
        int rc = logits_out(&m, argv[3], argv[4]);
        slm_llama_free(&m);
        return rc;
    }
    if (!strcmp(mode, "ckpt-logits") && argc == 5) {
        slm_ckpt *c = NULL;
        if (slm_ckpt_open(argv[2], &c)) return fail();
        if (slm_llama_init(&m, &slm_ckpt_get_meta(c)->cfg, true)) return fail();
        for (int u = 0; u < m.n_units; u++)
            if (slm_ckpt_read_range(c, u, 0, m.units[u].numel, m.params[u], NULL, NULL))
                return fail();
        slm_ckpt_free(c);
        int rc = logits_out(&m, argv[3], argv[4]);
        slm_llama_free(&m);
        return rc;
    }
    if (!strcmp(mode, "st-check") && argc == 3) {
        slm_st_file f;
        if (slm_st_open(argv[2], &f)) return fail();
        slm_st_close(&f);
        return 0;
    }
    fprintf(stderr, "ckpt_tool: bad arguments for \"%s\"\n", mode);
    return 2;
}
