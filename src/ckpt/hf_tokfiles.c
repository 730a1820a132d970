// The transformers-side tokenizer files of an HF export: tokenizer_config.json,
// special_tokens_map.json, generation_config.json, and bos / eos / pad ids in config.json, so
// that AutoTokenizer reproduces shardlm's encoding (BOS prepended, as `shardlm generate` does)
// and generate() knows BOS / EOS. The tokenizer file itself is left byte-identical to the run's
// (its XXH64 identifies the tokenizer to shardlm).
#include "ckpt/ckpt.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

// Writes DIR/NAME from `o` (consumed).
static slm_status write_json(const char *dir, const char *name, cJSON *o) {
    char *p = slm_path_join(dir, name);
    slm_status st = slm_json_write_file(p, o);
    cJSON_Delete(o);
    free(p);
    return st;
}

// Sets obj[name] to the id, or null when the tokenizer has none (id < 0).
static void set_id(cJSON *obj, const char *name, int32_t id) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, name);
    if (id >= 0)
        cJSON_AddNumberToObject(obj, name, id);
    else
        cJSON_AddNullToObject(obj, name);
}

// Sets obj[name] to the token's text, or null.
static void set_token(cJSON *obj, const char *name, const slm_tokenizer *t, int32_t id) {
    const char *piece = id >= 0 ? slm_tokenizer_piece(t, id) : NULL;
    if (piece)
        cJSON_AddStringToObject(obj, name, piece);
    else
        cJSON_AddNullToObject(obj, name);
}

// cJSON prints a parsed 8.0 as 8; transformers wants rope_scaling's factors to be JSON floats
// (it warns on an integer), so those keys are put back as "8.0" before config.json is rewritten.
static void keep_rope_floats(cJSON *cfg) {
    static const char *objs[] = {"rope_scaling", "rope_parameters"};
    static const char *keys[] = {"factor", "low_freq_factor", "high_freq_factor"};
    for (int i = 0; i < 2; i++) {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(cfg, objs[i]);
        if (!cJSON_IsObject(o)) continue;
        for (int k = 0; k < 3; k++) {
            cJSON *v = cJSON_GetObjectItemCaseSensitive(o, keys[k]);
            if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
                fabs(v->valuedouble) > 1e15)
                continue;
            char buf[48];
            snprintf(buf, sizeof buf, "%.1f", v->valuedouble);
            cJSON_ReplaceItemInObjectCaseSensitive(o, keys[k], cJSON_CreateRaw(buf));
        }
    }
}

slm_status slm_hf_write_tokenizer_files(const char *out_dir, const char *tokenizer_path,
                                        int32_t max_positions) {
    slm_tokenizer *t = NULL;
    slm_status st = slm_tokenizer_load(tokenizer_path, &t);
    if (st) return st;
    int32_t bos = slm_tokenizer_bos_id(t), eos = slm_tokenizer_eos_id(t),
            pad = slm_tokenizer_pad_id(t), unk = slm_tokenizer_unk_id(t);
    bool spm = slm_tokenizer_type(t) == SLM_TOK_SPM_BPE;

    // config.json (written by slm_hf_export just before): the special ids.
    char *cp = slm_path_join(out_dir, "config.json");
    char *txt = NULL;
    size_t len = 0;
    st = slm_file_read_all(cp, &txt, &len);
    cJSON *cfg = st ? NULL : cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!st && !cJSON_IsObject(cfg)) st = slm_fail(SLM_E_FORMAT, "%s: not a JSON object", cp);
    free(cp);
    if (st) {
        cJSON_Delete(cfg);
        slm_tokenizer_free(t);
        return st;
    }
    set_id(cfg, "bos_token_id", bos);
    set_id(cfg, "eos_token_id", eos);
    set_id(cfg, "pad_token_id", pad);
    keep_rope_floats(cfg);
    st = write_json(out_dir, "config.json", cfg);

    // generation_config.json: the ids generate() uses (sampling settings stay transformers').
    if (!st) {
        cJSON *g = cJSON_CreateObject();
        set_id(g, "bos_token_id", bos);
        set_id(g, "eos_token_id", eos);
        set_id(g, "pad_token_id", pad);
        st = write_json(out_dir, "generation_config.json", g);
    }
    if (!st) {
        cJSON *m = cJSON_CreateObject();
        set_token(m, "bos_token", t, bos);
        set_token(m, "eos_token", t, eos);
        set_token(m, "pad_token", t, pad);
        set_token(m, "unk_token", t, unk);
        st = write_json(out_dir, "special_tokens_map.json", m);
    }
    // tokenizer_config.json. transformers 4.x adds BOS to a tokenizer.json only through
    // LlamaTokenizerFast's add_bos_token (PreTrainedTokenizerFast has no such option), which
    // keeps the file's own pre-tokenizer and model when loading it (from_slow stays false: no
    // add_prefix_space given). tokenizer.model: LlamaTokenizer (SentencePiece), BOS likewise.
    if (!st) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "tokenizer_class",
                                spm ? "LlamaTokenizer" : "LlamaTokenizerFast");
        cJSON_AddBoolToObject(c, "add_bos_token", bos >= 0);
        cJSON_AddBoolToObject(c, "add_eos_token", false);
        set_token(c, "bos_token", t, bos);
        set_token(c, "eos_token", t, eos);
        set_token(c, "pad_token", t, pad);
        set_token(c, "unk_token", t, unk);
        // shardlm encodes special-token text in a prompt as plain text (tokenizer encode
        // without --allow-special, generate): transformers does so with split_special_tokens.
        cJSON_AddBoolToObject(c, "split_special_tokens", true);
        cJSON_AddBoolToObject(c, "clean_up_tokenization_spaces", false);
        cJSON_AddBoolToObject(c, "legacy", spm);
        cJSON_AddNumberToObject(c, "model_max_length", max_positions);
        st = write_json(out_dir, "tokenizer_config.json", c);
    }
    slm_tokenizer_free(t);
    return st;
}
