// Parity driver: builds a model from a config, seeds its weights, runs one forward/backward on
// seeded tokens and writes everything the PyTorch reference needs to check it to a .slt file:
//   param/<hf name>  initial weights      tokens, targets [B, T] i32 (targets may hold -1)
//   logits [B, T, V] (keep_logits forward, loss_only)     loss_eval [1] (same forward's loss)
//   loss [1] (training forward)          grad/<hf name> d(loss * loss_scale)/d(param)
// Usage: model_dump --config SPEC --out PATH [--batch B] [--seq T] [--seed S] [--ckpt]
//                   [--ignore-every K] [--loss-scale X] [--chunk ROWS] [--keep] [--weights F]
// --weights F: a .slt file with param/<hf name> for every tensor (instead of the seeded init)
// and optionally tokens / targets [B, T] (instead of seeded ones; they set B and T) and pos
// [B, T] (packed samples: slm_llama_forward_packed).
#include "model/model.h"
#include "reference/slm_tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Copies param/<name> of every view from `w` into the model.
static int load_weights(slm_llama *m, const slm_tensor_set *w, const char *path) {
    for (int u = 0; u < m->n_units; u++) {
        for (int i = 0; i < m->units[u].n_views; i++) {
            const slm_param_view *v = &m->units[u].views[i];
            char name[128];
            snprintf(name, sizeof name, "param/%s", v->name);
            const slm_tensor *t = slm_tset_get(w, name);
            if (!t || t->dtype != SLM_T_F32 || t->numel != v->numel || t->ndim != v->ndim ||
                t->shape[0] != v->shape[0]) {
                fprintf(stderr, "model_dump: %s: %s missing or not f32 of the model's shape\n",
                        path, name);
                return 1;
            }
            memcpy(m->params[u] + v->offset, t->data, (size_t)v->numel * sizeof(float));
        }
    }
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: model_dump --config SPEC --out PATH [--batch B] [--seq T] [--seed S] "
                    "[--ckpt] [--ignore-every K] [--loss-scale X] [--chunk ROWS] [--keep]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *spec = NULL, *out = NULL, *weights = NULL;
    int B = 2, T = 7, ignore_every = 0, chunk = 0;
    uint64_t seed = 1234;
    bool ckpt = false, keep = false;
    double loss_scale = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ckpt"))
            ckpt = true;
        else if (!strcmp(a, "--keep"))
            keep = true;
        else if (!v)
            return usage();
        else if (!strcmp(a, "--config"))
            spec = v, i++;
        else if (!strcmp(a, "--out"))
            out = v, i++;
        else if (!strcmp(a, "--batch"))
            B = atoi(v), i++;
        else if (!strcmp(a, "--seq"))
            T = atoi(v), i++;
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--ignore-every"))
            ignore_every = atoi(v), i++;
        else if (!strcmp(a, "--loss-scale"))
            loss_scale = atof(v), i++;
        else if (!strcmp(a, "--chunk"))
            chunk = atoi(v), i++;
        else if (!strcmp(a, "--weights"))
            weights = v, i++;
        else
            return usage();
    }
    if (!spec || !out || B <= 0 || T <= 0) return usage();
    slm_llama_config cfg;
    slm_llama m;
    if (slm_llama_config_resolve(spec, &cfg) || slm_llama_init(&m, &cfg, true)) {
        fprintf(stderr, "model_dump: %s\n", slm_errmsg());
        return 1;
    }
    slm_llama_init_weights(&m, seed);
    slm_tensor_set w = {0};
    const slm_tensor *wtok = NULL, *wtgt = NULL, *wpos = NULL;
    if (weights) {
        if (slm_tset_load(&w, weights)) {
            fprintf(stderr, "model_dump: %s\n", slm_errmsg());
            slm_llama_free(&m);
            return 1;
        }
        if (load_weights(&m, &w, weights)) {
            slm_tset_free(&w);
            slm_llama_free(&m);
            return 1;
        }
        wtok = slm_tset_get(&w, "tokens");
        wtgt = slm_tset_get(&w, "targets");
        wpos = slm_tset_get(&w, "pos"); // packed samples: positions [B, T] (optional)
        if (wtok && wtgt && wtok->ndim == 2 && wtok->dtype == SLM_T_I32 &&
            wtgt->dtype == SLM_T_I32 && wtgt->numel == wtok->numel) {
            B = (int)wtok->shape[0];
            T = (int)wtok->shape[1];
        } else {
            wtok = wtgt = NULL;
        }
        if (wpos && !(wtok && wpos->dtype == SLM_T_I32 && wpos->numel == wtok->numel)) {
            fprintf(stderr, "model_dump: %s: pos must be i32 [B, T] like tokens\n", weights);
            return 1;
        }
    }
    m.activation_checkpointing = ckpt;
    m.head_chunk_rows = chunk;
    int64_t N = (int64_t)B * T, V = cfg.vocab_size;
    int32_t *tokens = slm_xmalloc((size_t)N * sizeof(int32_t));
    int32_t *targets = slm_xmalloc((size_t)N * sizeof(int32_t));
    slm_rng r;
    slm_rng_seed(&r, seed + 1);
    for (int64_t i = 0; i < N; i++) {
        tokens[i] = (int32_t)slm_rng_below(&r, (uint64_t)V);
        targets[i] = (int32_t)slm_rng_below(&r, (uint64_t)V);
        if (ignore_every > 0 && i % ignore_every == 0) targets[i] = -1;
    }
    int32_t *pos = NULL;
    if (wtok) {
        memcpy(tokens, wtok->data, (size_t)N * sizeof(int32_t));
        memcpy(targets, wtgt->data, (size_t)N * sizeof(int32_t));
    }
    if (wpos) {
        pos = slm_xmalloc((size_t)N * sizeof(int32_t));
        memcpy(pos, wpos->data, (size_t)N * sizeof(int32_t));
    }
    slm_tset_free(&w);

    slm_tensor_set s = {0};
    for (int u = 0; u < m.n_units; u++) {
        for (int i = 0; i < m.units[u].n_views; i++) {
            const slm_param_view *v = &m.units[u].views[i];
            char name[128];
            snprintf(name, sizeof name, "param/%s", v->name);
            slm_tset_add(&s, name, SLM_T_F32, v->ndim, v->shape, m.params[u] + v->offset);
        }
    }
    int64_t bt[2] = {B, T}, btv[3] = {B, T, V}, one[1] = {1};
    slm_tset_add(&s, "tokens", SLM_T_I32, 2, bt, tokens);
    slm_tset_add(&s, "targets", SLM_T_I32, 2, bt, targets);

    // 1) evaluation forward with the logits kept
    slm_llama_set_shape(&m, B, T, true);
    m.loss_only = true;
    float loss_eval = slm_llama_forward_packed(&m, tokens, targets, pos, B, T);
    float *logits = slm_xmalloc((size_t)(B * T * V) * sizeof(float));
    slm_llama_logits_to_host(&m, 0, (int64_t)B * T, logits);
    slm_tset_add(&s, "logits", SLM_T_F32, 3, btv, logits);
    free(logits);
    slm_tset_add(&s, "loss_eval", SLM_T_F32, 1, one, &loss_eval);

    // 2) training forward + backward (chunked fused head unless --keep)
    slm_llama_set_shape(&m, B, T, keep);
    m.loss_only = false;
    slm_llama_zero_grad(&m);
    float loss = slm_llama_forward_packed(&m, tokens, targets, pos, B, T);
    slm_llama_backward(&m, (float)loss_scale);
    slm_tset_add(&s, "loss", SLM_T_F32, 1, one, &loss);
    for (int u = 0; u < m.n_units; u++) {
        for (int i = 0; i < m.units[u].n_views; i++) {
            const slm_param_view *v = &m.units[u].views[i];
            char name[128];
            snprintf(name, sizeof name, "grad/%s", v->name);
            slm_tset_add(&s, name, SLM_T_F32, v->ndim, v->shape, m.grads[u] + v->offset);
        }
    }
    char meta[256];
    snprintf(meta, sizeof meta, "{\"loss_scale\": %.17g, \"ckpt\": %s, \"act_bytes\": %zu}",
             loss_scale, ckpt ? "true" : "false", slm_llama_act_bytes(&m));
    slm_tset_set_meta(&s, meta);
    int rc = 0;
    if (slm_tset_save(&s, out)) {
        fprintf(stderr, "model_dump: %s\n", slm_errmsg());
        rc = 1;
    }
    slm_tset_free(&s);
    free(tokens);
    free(targets);
    free(pos);
    slm_llama_free(&m);
    return rc;
}
