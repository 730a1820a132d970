// LoRA parity driver: a seeded base model with LoRA adapters (lora_A seeded as PEFT inits it,
// lora_B random instead of zero so that every adapter gradient is non-trivial), one eval
// forward (logits) and one training forward/backward on seeded tokens, written to a .slt file
// for lora_parity.py:
//   param/<hf name>   base weights        lora/<adapter name>   adapter weights
//   tokens, targets [B, T] i32            logits [B, T, V] (eval forward: no dropout)
//   loss [1] (training forward)           lgrad/<adapter name>  d(loss * scale)/d(adapter)
//   mask/<l>/<t> [B*T, in] f32: the dropout factor (0 or 1/(1-p)) of target t's input in
//   block l (only with --dropout > 0), from the public slm_lora_dropout_keep
//   base_grad_absmax [1]: max |grad| over the base's gradient buffers (must stay exactly 0)
// Usage: lora_dump --config SPEC --out PATH --rank R --alpha A --targets LIST [--dropout P]
//                  [--batch B] [--seq T] [--seed S] [--ckpt] [--loss-scale X]
#include "model/model.h"
#include "reference/slm_tensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr, "usage: lora_dump --config SPEC --out PATH --rank R --alpha A --targets LIST "
                    "[--dropout P] [--batch B] [--seq T] [--seed S] [--ckpt] [--loss-scale X]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *spec = NULL, *out = NULL, *targets_s = NULL;
    int B = 2, T = 7;
    uint64_t seed = 1234;
    bool ckpt = false;
    double loss_scale = 1.0;
    slm_lora_config lc = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ckpt"))
            ckpt = true;
        else if (!v)
            return usage();
        else if (!strcmp(a, "--config"))
            spec = v, i++;
        else if (!strcmp(a, "--out"))
            out = v, i++;
        else if (!strcmp(a, "--rank"))
            lc.rank = atoi(v), i++;
        else if (!strcmp(a, "--alpha"))
            lc.alpha = (float)atof(v), i++;
        else if (!strcmp(a, "--dropout"))
            lc.dropout = (float)atof(v), i++;
        else if (!strcmp(a, "--targets"))
            targets_s = v, i++;
        else if (!strcmp(a, "--batch"))
            B = atoi(v), i++;
        else if (!strcmp(a, "--seq"))
            T = atoi(v), i++;
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--loss-scale"))
            loss_scale = atof(v), i++;
        else
            return usage();
    }
    if (!spec || !out || !targets_s || B <= 0 || T <= 0) return usage();
    slm_llama_config cfg;
    slm_llama m;
    if (slm_lora_parse_targets(targets_s, &lc.targets) || slm_llama_config_resolve(spec, &cfg) ||
        slm_llama_init(&m, &cfg, true) || slm_llama_lora_init(&m, &lc, true, seed)) {
        fprintf(stderr, "lora_dump: %s\n", slm_errmsg());
        return 1;
    }
    slm_llama_init_weights(&m, seed);
    int L = cfg.num_hidden_layers;
    slm_rng r;
    slm_rng_seed(&r, seed + 7);
    for (int l = 0; l < L; l++) // lora_B: random (PEFT's zero init would make dA vanish)
        for (int i = 1; i < m.lora_units[l].n_views; i += 2) {
            const slm_param_view *v = &m.lora_units[l].views[i];
            for (int64_t k = 0; k < v->numel; k++)
                m.lora_params[l][v->offset + k] = 0.05f * slm_rng_normal(&r);
        }
    m.activation_checkpointing = ckpt;
    int64_t N = (int64_t)B * T, V = cfg.vocab_size;
    int32_t *tokens = slm_xmalloc((size_t)N * sizeof(int32_t));
    int32_t *targets = slm_xmalloc((size_t)N * sizeof(int32_t));
    slm_rng_seed(&r, seed + 1);
    for (int64_t i = 0; i < N; i++) {
        tokens[i] = (int32_t)slm_rng_below(&r, (uint64_t)V);
        targets[i] = (int32_t)slm_rng_below(&r, (uint64_t)V);
    }
    slm_tensor_set s = {0};
    char name[160];
    for (int u = 0; u < m.n_units; u++)
        for (int i = 0; i < m.units[u].n_views; i++) {
            const slm_param_view *v = &m.units[u].views[i];
            snprintf(name, sizeof name, "param/%s", v->name);
            slm_tset_add(&s, name, SLM_T_F32, v->ndim, v->shape, m.params[u] + v->offset);
        }
    for (int l = 0; l < L; l++)
        for (int i = 0; i < m.lora_units[l].n_views; i++) {
            const slm_param_view *v = &m.lora_units[l].views[i];
            snprintf(name, sizeof name, "lora/%s", v->name);
            slm_tset_add(&s, name, SLM_T_F32, 2, v->shape, m.lora_params[l] + v->offset);
        }
    int64_t bt[2] = {B, T}, btv[3] = {B, T, V}, one[1] = {1};
    slm_tset_add(&s, "tokens", SLM_T_I32, 2, bt, tokens);
    slm_tset_add(&s, "targets", SLM_T_I32, 2, bt, targets);

    slm_llama_set_shape(&m, B, T, true);
    float loss_eval = slm_llama_forward_loss(&m, tokens, targets, B, T);
    float *logits = slm_xmalloc((size_t)(B * T * V) * sizeof(float));
    slm_llama_logits_to_host(&m, 0, (int64_t)B * T, logits);
    slm_tset_add(&s, "logits", SLM_T_F32, 3, btv, logits);
    free(logits);
    slm_tset_add(&s, "loss_eval", SLM_T_F32, 1, one, &loss_eval);

    slm_llama_set_shape(&m, B, T, false);
    slm_llama_zero_grad(&m);
    slm_llama_lora_zero_grad(&m);
    m.lora_dropout_key = seed * 0x9e3779b97f4a7c15ull + 11;
    float loss = slm_llama_forward(&m, tokens, targets, B, T);
    slm_llama_backward(&m, (float)loss_scale);
    slm_tset_add(&s, "loss", SLM_T_F32, 1, one, &loss);
    for (int l = 0; l < L; l++)
        for (int i = 0; i < m.lora_units[l].n_views; i++) {
            const slm_param_view *v = &m.lora_units[l].views[i];
            snprintf(name, sizeof name, "lgrad/%s", v->name);
            slm_tset_add(&s, name, SLM_T_F32, 2, v->shape, m.lora_grads[l] + v->offset);
        }
    float gmax = 0;
    for (int u = 0; u < m.n_units; u++)
        for (int64_t i = 0; i < m.units[u].numel; i++)
            gmax = fmaxf(gmax, fabsf(m.grads[u][i]));
    slm_tset_add(&s, "base_grad_absmax", SLM_T_F32, 1, one, &gmax);
    float **masks = slm_xcalloc((size_t)L * SLM_LORA_N_TARGETS, sizeof *masks);
    if (lc.dropout > 0) {
        float keep = 1.0f / (1.0f - lc.dropout);
        for (int l = 0; l < L; l++)
            for (int t = 0; t < SLM_LORA_N_TARGETS; t++) {
                if (!(lc.targets & (1u << t))) continue;
                int64_t o, in;
                slm_lora_target_shape(&cfg, t, &o, &in);
                float *mk = slm_xmalloc((size_t)(N * in) * sizeof(float));
                for (int64_t i = 0; i < N * in; i++)
                    mk[i] = slm_lora_dropout_keep(m.lora_dropout_key, l, t, i, lc.dropout) ? keep
                                                                                           : 0.0f;
                masks[l * SLM_LORA_N_TARGETS + t] = mk;
                int64_t shp[2] = {N, in};
                snprintf(name, sizeof name, "mask/%d/%s", l, slm_lora_target_name(t));
                slm_tset_add(&s, name, SLM_T_F32, 2, shp, mk);
            }
    }
    char meta[256];
    snprintf(meta, sizeof meta,
             "{\"loss_scale\": %.17g, \"rank\": %d, \"alpha\": %.9g, \"dropout\": %.9g}",
             loss_scale, lc.rank, (double)lc.alpha, (double)lc.dropout);
    slm_tset_set_meta(&s, meta);
    int rc = 0;
    if (slm_tset_save(&s, out)) {
        fprintf(stderr, "lora_dump: %s\n", slm_errmsg());
        rc = 1;
    }
    slm_tset_free(&s);
    for (int i = 0; i < L * SLM_LORA_N_TARGETS; i++)
        free(masks[i]);
    free(masks);
    free(tokens);
    free(targets);
    slm_llama_free(&m);
    return rc;
}
