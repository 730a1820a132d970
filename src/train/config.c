// The model a run trains: its config resolved from a preset, config.json or GGUF file, and its
// agreement with the dataset's tokenizer. Contract in train_internal.h.
#include "train/train.h"
#include "train/train_internal.h"

slm_status slm_train_resolve_config(const char *spec, int32_t vocab_override, int T,
                                    slm_llama_config *cfg) {
    if (!spec) return slm_fail(SLM_E_ARG, "no model given (--model PRESET|config.json)");
    slm_status st;
    if (slm_is_gguf_file(spec)) { // a GGUF file: its llama metadata
        slm_gguf_file g;
        st = slm_gguf_open(spec, &g);
        if (!st) st = slm_gguf_llama_config(&g, cfg);
        slm_gguf_close(&g);
    } else {
        st = slm_llama_config_resolve(spec, cfg);
    }
    if (st) return st;
    if (vocab_override > 0) cfg->vocab_size = vocab_override;
    st = slm_llama_config_validate(cfg);
    if (st) return slm_fail_wrap(st, "model %s", spec);
    if (T > cfg->max_position_embeddings)
        return slm_fail(SLM_E_ARG,
                        "--seq %d is longer than the model's max_position_embeddings %d (%s); "
                        "HINT: use --seq <= %d or a config.json with a larger "
                        "max_position_embeddings",
                        T, cfg->max_position_embeddings, spec, cfg->max_position_embeddings);
    return SLM_OK;
}

slm_status slm_train_check_vocab(const slm_dataset *ds, const slm_tokenizer *tok,
                                 const slm_llama_config *cfg, const char *model_spec) {
    int32_t tv = slm_tokenizer_vocab_size(tok);
    if (tv != ds->vocab_size)
        return slm_fail(SLM_E_ARG,
                        "%s: the tokenizer %s has %d ids but manifest.json says vocab_size %d "
                        "(dataset prepared with another tokenizer?)",
                        ds->dir, ds->tokenizer_file, tv, ds->vocab_size);
    if (cfg->vocab_size != ds->vocab_size)
        return slm_fail(SLM_E_ARG,
                        "vocab mismatch: model %s has vocab_size %d but dataset %s (tokenizer %s) "
                        "has %d; HINT: pass --vocab-size %d or a config.json with vocab_size %d",
                        model_spec, cfg->vocab_size, ds->dir, ds->tokenizer_file, ds->vocab_size,
                        ds->vocab_size, ds->vocab_size);
    return SLM_OK;
}
