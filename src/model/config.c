// Llama configuration: named presets, HF config.json in and out, validation, parameter counts.
#include "model.h"

#include "base/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Presets. Llama-2 conventions throughout: rms_norm_eps 1e-5, rope_theta 1e4, untied lm_head,
// initializer_range 0.02. Sizes follow llama2.c's TinyStories models where they exist.
typedef struct preset {
    const char *name;
    slm_llama_config cfg;
} preset;

#define LLAMA_PRESET(nm, V, C, F, L, H, KV, T)                                                     \
    {                                                                                              \
        nm, {                                                                                      \
            .vocab_size = V, .hidden_size = C, .intermediate_size = F, .num_hidden_layers = L,     \
            .num_attention_heads = H, .num_key_value_heads = KV, .max_position_embeddings = T,     \
            .rms_norm_eps = 1e-5f, .rope_theta = 10000.0f, .tie_word_embeddings = false,           \
            .initializer_range = 0.02f                                                             \
        }                                                                                          \
    }

static const preset k_presets[] = {
    // llama2.c stories15M shape with an 8k vocabulary.
    LLAMA_PRESET("tiny", 8192, 288, 768, 6, 6, 6, 512),
    LLAMA_PRESET("small", 8192, 512, 1376, 8, 8, 8, 1024),
    // grouped-query attention (4 query heads per kv head) with Llama-2's 32k vocabulary.
    LLAMA_PRESET("gqa", 32000, 512, 1376, 8, 8, 2, 1024),
    // quick start on the KJV bible with a 4k SentencePiece vocabulary: minutes on a laptop CPU.
    LLAMA_PRESET("kjv", 4096, 256, 688, 4, 8, 8, 256),
};
#define N_PRESETS ((int)(sizeof k_presets / sizeof k_presets[0]))

slm_status slm_llama_config_preset(const char *name, slm_llama_config *c) {
    for (int i = 0; i < N_PRESETS; i++) {
        if (name && strcmp(name, k_presets[i].name) == 0) {
            *c = k_presets[i].cfg;
            return SLM_OK;
        }
    }
    char known[256] = "";
    for (int i = 0; i < N_PRESETS; i++) {
        if (i) strncat(known, ", ", sizeof known - strlen(known) - 1);
        strncat(known, k_presets[i].name, sizeof known - strlen(known) - 1);
    }
    return slm_fail(SLM_E_ARG,
                    "unknown model preset \"%s\" (known presets: %s); HINT: or pass a path to "
                    "an HF config.json",
                    name ? name : "(null)", known);
}

slm_status slm_llama_config_validate(const slm_llama_config *c) {
#define REQ_POS(field)                                                                             \
    if (c->field <= 0)                                                                             \
        return slm_fail(SLM_E_ARG, "model config: " #field " must be > 0, got %d", (int)c->field);
    REQ_POS(vocab_size)
    REQ_POS(hidden_size)
    REQ_POS(intermediate_size)
    REQ_POS(num_hidden_layers)
    REQ_POS(num_attention_heads)
    REQ_POS(num_key_value_heads)
    REQ_POS(max_position_embeddings)
#undef REQ_POS
    if (c->head_dim < 0 || c->head_dim > 65536 || c->head_dim % 2 != 0)
        return slm_fail(SLM_E_ARG,
                        "model config: head_dim must be even and in [2, 65536] (or absent: "
                        "hidden_size / num_attention_heads), got %d",
                        (int)c->head_dim);
    if (c->head_dim == 0 && c->hidden_size % c->num_attention_heads != 0)
        return slm_fail(SLM_E_ARG,
                        "model config: hidden_size (%d) must be divisible by "
                        "num_attention_heads (%d) (or give head_dim explicitly)",
                        c->hidden_size, c->num_attention_heads);
    int D = slm_llama_head_dim(c);
    if (D % 2 != 0)
        return slm_fail(SLM_E_ARG,
                        "model config: head dim hidden_size / num_attention_heads = %d / %d = %d "
                        "must be even (RoPE rotates pairs of halves)",
                        c->hidden_size, c->num_attention_heads, D);
    if (c->num_key_value_heads > c->num_attention_heads ||
        c->num_attention_heads % c->num_key_value_heads != 0)
        return slm_fail(SLM_E_ARG,
                        "model config: num_key_value_heads (%d) must divide "
                        "num_attention_heads (%d)",
                        c->num_key_value_heads, c->num_attention_heads);
    if (c->num_hidden_layers > 100000)
        return slm_fail(SLM_E_ARG, "model config: num_hidden_layers must be <= 100000, got %d",
                        c->num_hidden_layers);
    // Keeps every element count, and its size in bytes, inside int64_t / size_t (2^60 elements
    // x 4 bytes < 2^63). Whether the model fits in memory is checked by its users (train's
    // up-front estimate, the model-directory loader's check), not here.
    double C = c->hidden_size, F = c->intermediate_size;
    double HD = (double)c->num_attention_heads * D;
    double n =
        c->num_hidden_layers * (2.0 * C * C + 2.0 * HD * C + 3.0 * F * C) + 2.0 * c->vocab_size * C;
    if (n >= 0x1p60)
        return slm_fail(SLM_E_ARG,
                        "model config: %.3g parameters overflows 64-bit element offsets (at most "
                        "2^60 = %.3g)",
                        n, 0x1p60);
    if (!(c->rms_norm_eps > 0.0f) || !isfinite(c->rms_norm_eps))
        return slm_fail(SLM_E_ARG, "model config: rms_norm_eps must be a finite number > 0, got %g",
                        (double)c->rms_norm_eps);
    if (!(c->rope_theta > 0.0f) || !isfinite(c->rope_theta))
        return slm_fail(SLM_E_ARG, "model config: rope_theta must be a finite number > 0, got %g",
                        (double)c->rope_theta);
    if (c->rope_type != SLM_ROPE_DEFAULT && c->rope_type != SLM_ROPE_LINEAR &&
        c->rope_type != SLM_ROPE_LLAMA3)
        return slm_fail(SLM_E_ARG, "model config: rope_type %d is not default, linear or llama3",
                        (int)c->rope_type);
    if (c->rope_type != SLM_ROPE_DEFAULT && !(c->rope_factor > 0.0f && isfinite(c->rope_factor)))
        return slm_fail(SLM_E_ARG,
                        "model config: rope_scaling.factor must be a finite number > 0, got %g",
                        (double)c->rope_factor);
    if (c->rope_type == SLM_ROPE_LLAMA3 &&
        !(c->rope_low_freq_factor > 0.0f && isfinite(c->rope_high_freq_factor) &&
          c->rope_high_freq_factor > c->rope_low_freq_factor &&
          c->rope_original_max_position_embeddings > 0))
        return slm_fail(SLM_E_ARG,
                        "model config: llama3 rope_scaling needs 0 < low_freq_factor < "
                        "high_freq_factor and original_max_position_embeddings > 0, got %g, %g, "
                        "%d",
                        (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor,
                        (int)c->rope_original_max_position_embeddings);
    if (!(c->initializer_range >= 0.0f) || !isfinite(c->initializer_range))
        return slm_fail(SLM_E_ARG,
                        "model config: initializer_range must be a finite number >= 0, got %g",
                        (double)c->initializer_range);
    return SLM_OK;
}

// HF LlamaConfig defaults (transformers' configuration_llama.py) for fields a config.json omits.
static void hf_defaults(slm_llama_config *c) {
    c->vocab_size = 32000;
    c->hidden_size = 4096;
    c->intermediate_size = 11008;
    c->num_hidden_layers = 32;
    c->num_attention_heads = 32;
    c->num_key_value_heads = 0; // 0: same as num_attention_heads (resolved after parsing)
    c->max_position_embeddings = 2048;
    c->rms_norm_eps = 1e-6f;
    c->rope_theta = 10000.0f;
    c->tie_word_embeddings = false;
    c->initializer_range = 0.02f;
    c->head_dim = 0; // 0: hidden_size / num_attention_heads
}

// RoPE scaling keys, in slm_llama_config order (rope_factor, rope_low_freq_factor,
// rope_high_freq_factor, rope_original_max_position_embeddings).
enum { RK_FACTOR, RK_LOW, RK_HIGH, RK_ORIG, RK_COUNT };
static const char *const k_rope_keys[RK_COUNT] = {"factor", "low_freq_factor", "high_freq_factor",
                                                  "original_max_position_embeddings"};
// Which keys each rope_type takes (all of them required), indexed by SLM_ROPE_*.
static const bool k_rope_takes[3][RK_COUNT] = {
    {false, false, false, false}, {true, false, false, false}, {true, true, true, true}};

const char *slm_rope_type_name(int32_t rope_type) {
    switch (rope_type) {
    case SLM_ROPE_DEFAULT:
        return "default";
    case SLM_ROPE_LINEAR:
        return "linear";
    case SLM_ROPE_LLAMA3:
        return "llama3";
    default:
        return "(invalid)";
    }
}

// What one RoPE settings object says: type (-1 when it names none), theta when given, the
// scaling values (zero when absent).
typedef struct rope_obj {
    int32_t type;
    bool has_theta;
    float theta;
    double v[RK_COUNT];
} rope_obj;

// One RoPE settings object: transformers >= 5 writes "rope_parameters": {"rope_type",
// "rope_theta", ...}; transformers 4 wrote "rope_scaling" (an alias of rope_parameters in 5).
// rope_type (or the older "type") "default", "linear" (factor) or "llama3" (factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings), each with exactly its
// keys; partial_rotary_factor 1. Any other type or key is refused, naming it.
static slm_status read_rope_object(const char *path, const cJSON *root, const char *field,
                                   rope_obj *r) {
    r->type = -1;
    r->has_theta = false;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!o || cJSON_IsNull(o)) return SLM_OK;
    if (!cJSON_IsObject(o))
        return slm_fail(SLM_E_FORMAT, "%s: field \"%s\": expected an object or null", path, field);
    const cJSON *e;
    const char *type_key = NULL;
    bool has[RK_COUNT] = {false};
    cJSON_ArrayForEach(e, o) {
        const char *k = e->string;
        int rk = -1;
        for (int i = 0; i < RK_COUNT; i++)
            if (!strcmp(k, k_rope_keys[i])) rk = i;
        if (!strcmp(k, "rope_type") || !strcmp(k, "type")) {
            if (!cJSON_IsString(e))
                return slm_fail(SLM_E_FORMAT, "%s: field \"%s.%s\": expected a string", path, field,
                                k);
            const char *v = e->valuestring;
            int32_t t = !strcmp(v, "default")  ? SLM_ROPE_DEFAULT
                        : !strcmp(v, "linear") ? SLM_ROPE_LINEAR
                        : !strcmp(v, "llama3") ? SLM_ROPE_LLAMA3
                                               : -1;
            if (t < 0)
                return slm_fail(SLM_E_UNSUPPORTED,
                                "%s: field \"%s.%s\" is \"%.40s\": shardlm implements \"default\" "
                                "(unscaled), \"linear\" and \"llama3\" RoPE only",
                                path, field, k, v);
            if (type_key && r->type != t)
                return slm_fail(SLM_E_FORMAT, "%s: fields \"%s.%s\" and \"%s.%s\" disagree", path,
                                field, type_key, field, k);
            r->type = t;
            type_key = k;
        } else if (!strcmp(k, "rope_theta")) {
            if (!cJSON_IsNumber(e))
                return slm_fail(SLM_E_FORMAT, "%s: field \"%s.rope_theta\": expected a number",
                                path, field);
            r->theta = (float)e->valuedouble;
            r->has_theta = true;
        } else if (!strcmp(k, "partial_rotary_factor")) {
            if (!cJSON_IsNumber(e) || e->valuedouble != 1.0)
                return slm_fail(SLM_E_UNSUPPORTED,
                                "%s: field \"%s.partial_rotary_factor\": only 1 (RoPE on the "
                                "whole head dim) is implemented",
                                path, field);
        } else if (rk >= 0) {
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
                return slm_fail(SLM_E_FORMAT, "%s: field \"%s.%s\": expected a number", path, field,
                                k);
            if (rk == RK_ORIG && !(e->valuedouble >= 1 && e->valuedouble <= INT32_MAX &&
                                   e->valuedouble == floor(e->valuedouble)))
                return slm_fail(SLM_E_FORMAT, "%s: field \"%s.%s\": expected an integer >= 1", path,
                                field, k);
            r->v[rk] = e->valuedouble;
            has[rk] = true;
        } else {
            return slm_fail(SLM_E_UNSUPPORTED,
                            "%s: field \"%s.%.60s\": not implemented (shardlm reads rope_type, "
                            "rope_theta, partial_rotary_factor 1 and the keys of the linear and "
                            "llama3 scalings)",
                            path, field, k);
        }
    }
    for (int i = 0; i < RK_COUNT; i++) {
        if (has[i] && r->type < 0)
            return slm_fail(SLM_E_FORMAT,
                            "%s: field \"%s.%s\" without \"%s.rope_type\" (which scaling?)", path,
                            field, k_rope_keys[i], field);
        if (r->type < 0) continue;
        if (has[i] && !k_rope_takes[r->type][i])
            return slm_fail(SLM_E_UNSUPPORTED,
                            "%s: field \"%s.%s\": not part of rope_type \"%s\" (scaled RoPE "
                            "variants other than linear and llama3 are not implemented)",
                            path, field, k_rope_keys[i], slm_rope_type_name(r->type));
        if (!has[i] && k_rope_takes[r->type][i])
            return slm_fail(SLM_E_FORMAT, "%s: field \"%s.%s\" missing (rope_type \"%s\" needs it)",
                            path, field, k_rope_keys[i], slm_rope_type_name(r->type));
    }
    return SLM_OK;
}

// rope_theta and the RoPE scaling from the top level and / or rope_parameters / rope_scaling.
// Every value given must agree (transformers 4 reads the top level and rope_scaling, 5 the
// nested object: a disagreement would give the two libraries different models).
static slm_status read_rope(const char *path, const cJSON *root, slm_llama_config *c) {
    static const char *fields[] = {"rope_parameters", "rope_scaling"};
    float top = c->rope_theta;
    bool has_top = cJSON_GetObjectItemCaseSensitive(root, "rope_theta") != NULL;
    slm_status st = slm_json_opt_f32(path, root, "rope_theta", &top);
    if (st) return st;
    const char *src = has_top ? "rope_theta" : NULL;
    float val = top;
    const char *type_src = NULL;
    rope_obj scale = {.type = SLM_ROPE_DEFAULT};
    for (int i = 0; i < 2; i++) {
        rope_obj r = {0};
        if ((st = read_rope_object(path, root, fields[i], &r))) return st;
        if (r.type >= 0) {
            if (type_src && (r.type != scale.type || memcmp(r.v, scale.v, sizeof r.v) != 0))
                return slm_fail(SLM_E_FORMAT,
                                "%s: field \"%s\" (rope_type \"%s\") disagrees with \"%s\" "
                                "(rope_type \"%s\"): the scalings must be identical",
                                path, fields[i], slm_rope_type_name(r.type), type_src,
                                slm_rope_type_name(scale.type));
            type_src = fields[i];
            scale = r;
        }
        if (!r.has_theta) continue;
        if (src && r.theta != val)
            return slm_fail(SLM_E_FORMAT,
                            "%s: field \"%s.rope_theta\" (%g) disagrees with \"%s\" (%g)", path,
                            fields[i], (double)r.theta, src, (double)val);
        if (!src) src = fields[i];
        val = r.theta;
    }
    const cJSON *prf = cJSON_GetObjectItemCaseSensitive(root, "partial_rotary_factor");
    if (prf && !cJSON_IsNull(prf) && !(cJSON_IsNumber(prf) && prf->valuedouble == 1.0))
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: field \"partial_rotary_factor\": only 1 (RoPE on the whole head "
                        "dim) is implemented",
                        path);
    c->rope_theta = val;
    c->rope_type = scale.type;
    c->rope_factor = (float)scale.v[RK_FACTOR];
    c->rope_low_freq_factor = (float)scale.v[RK_LOW];
    c->rope_high_freq_factor = (float)scale.v[RK_HIGH];
    c->rope_original_max_position_embeddings = (int32_t)scale.v[RK_ORIG];
    return SLM_OK;
}

void slm_llama_rope_inv_freq(const slm_llama_config *c, int D, double *inv_freq) {
    const double pi = 3.14159265358979323846;
    double factor = c->rope_factor, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
    double old_ctx = c->rope_original_max_position_embeddings;
    for (int i = 0; i < D / 2; i++) {
        // theta^(-2i/D), as HF's default RoPE (in double here).
        double f = pow((double)c->rope_theta, -2.0 * (double)i / (double)D);
        if (c->rope_type == SLM_ROPE_LINEAR) {
            f /= factor; // positions divided by factor, folded into the frequency
        } else if (c->rope_type == SLM_ROPE_LLAMA3) {
            // Wavelengths shorter than old_ctx / hi keep their frequency, longer than
            // old_ctx / lo are slowed by factor, in between a linear blend in old_ctx / wavelen.
            double wavelen = 2.0 * pi / f;
            if (wavelen > old_ctx / lo) {
                f /= factor;
            } else if (!(wavelen < old_ctx / hi)) {
                double s = (old_ctx / wavelen - lo) / (hi - lo);
                f = (1.0 - s) * f / factor + s * f;
            }
        }
        inv_freq[i] = f;
    }
}

static bool rel_close(float a, float b) {
    return fabs((double)a - (double)b) <= 1e-6 * fmax(fabs((double)a), fabs((double)b));
}

bool slm_llama_rope_same(const slm_llama_config *a, const slm_llama_config *b) {
    if (!rel_close(a->rope_theta, b->rope_theta) || a->rope_type != b->rope_type) return false;
    if (a->rope_type == SLM_ROPE_DEFAULT) return true;
    if (!rel_close(a->rope_factor, b->rope_factor)) return false;
    if (a->rope_type == SLM_ROPE_LINEAR) return true;
    return rel_close(a->rope_low_freq_factor, b->rope_low_freq_factor) &&
           rel_close(a->rope_high_freq_factor, b->rope_high_freq_factor) &&
           a->rope_original_max_position_embeddings == b->rope_original_max_position_embeddings;
}

// config.json fields shardlm reads (above) or knows to be irrelevant to the model's math
// (docs/model.md has the table). Anything else draws one warning listing the names.
static const char *const k_known_fields[] = {
    // read
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_parameters", "rope_scaling", "partial_rotary_factor", "initializer_range",
    "tie_word_embeddings", "model_type", "hidden_act", "attention_bias", "mlp_bias", "head_dim",
    "attention_dropout", "quantization_config",
    // irrelevant to the math
    "architectures", "transformers_version", "torch_dtype", "dtype", "use_cache", "bos_token_id",
    "eos_token_id", "pad_token_id", "pretraining_tp", "_name_or_path", "output_attentions",
    "output_hidden_states", "return_dict", "torchscript", "use_return_dict", "tokenizer_class",
    "_attn_implementation", "_attn_implementation_autoset", NULL};

static void warn_unknown_fields(const char *path, const cJSON *root) {
    char list[512] = "";
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        bool known = false;
        for (int i = 0; k_known_fields[i] && !known; i++)
            known = !strcmp(e->string, k_known_fields[i]);
        if (known) continue;
        if (n++ < 8) {
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s\"%.48s\"", l ? ", " : "", e->string);
        }
    }
    if (n)
        slm_warn("%s: ignoring %d field%s that shardlm does not know: %s%s (see docs/model.md "
                 "for the fields it reads)",
                 path, n, n == 1 ? "" : "s", list, n > 8 ? ", ..." : "");
}

// Fields whose non-default values change the architecture beyond what shardlm implements.
static slm_status check_unsupported(const char *path, const cJSON *root, int C, int H) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (it && !(cJSON_IsString(it) && strcmp(it->valuestring, "silu") == 0))
        return slm_fail(SLM_E_UNSUPPORTED, "%s: field \"hidden_act\": only \"silu\" is supported",
                        path);
    it = cJSON_GetObjectItemCaseSensitive(root, "attention_dropout");
    if (it && !cJSON_IsNull(it) && !(cJSON_IsNumber(it) && it->valuedouble == 0.0))
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: field \"attention_dropout\": only 0 is supported (shardlm "
                        "implements no dropout)",
                        path);
    it = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (it && !cJSON_IsNull(it))
        return slm_fail(SLM_E_UNSUPPORTED,
                        "%s: field \"quantization_config\": quantized weights are not supported",
                        path);
    const char *bias_fields[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        it = cJSON_GetObjectItemCaseSensitive(root, bias_fields[i]);
        if (it && !cJSON_IsFalse(it))
            return slm_fail(SLM_E_UNSUPPORTED, "%s: field \"%s\": only false is supported", path,
                            bias_fields[i]);
    }
    (void)C, (void)H;
    return SLM_OK;
}

slm_status slm_llama_config_parse(const char *text, size_t len, const char *path,
                                  slm_llama_config *c) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (root && end) { // nothing but whitespace (or a NUL) may follow the top-level object
        const char *p = end, *stop = text + len;
        while (p < stop && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
            p++;
        if (p < stop && *p != '\0') {
            cJSON_Delete(root);
            return slm_fail(SLM_E_FORMAT, "%s: unexpected text after the JSON object at byte %ld",
                            path, (long)(p - text));
        }
    }
    if (!root || !cJSON_IsObject(root)) {
        const char *ep = cJSON_GetErrorPtr();
        long off = (root == NULL && ep && ep >= text && ep <= text + len) ? (long)(ep - text) : -1;
        cJSON_Delete(root);
        if (off >= 0)
            return slm_fail(SLM_E_FORMAT, "%s: not valid JSON (error near byte %ld)", path, off);
        return slm_fail(SLM_E_FORMAT, "%s: expected a JSON object at the top level", path);
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "llama") != 0)) {
        slm_status e = slm_fail(SLM_E_UNSUPPORTED,
                                "%s: field \"model_type\" is %s%s%s; shardlm implements \"llama\" "
                                "(LlamaForCausalLM) only",
                                path, cJSON_IsString(mt) ? "\"" : "",
                                cJSON_IsString(mt) ? mt->valuestring : "not a string",
                                cJSON_IsString(mt) ? "\"" : "");
        cJSON_Delete(root);
        return e;
    }
    slm_llama_config t;
    hf_defaults(&t);
    slm_status st;
    if ((st = slm_json_opt_i32(path, root, "vocab_size", false, &t.vocab_size)) ||
        (st = slm_json_opt_i32(path, root, "hidden_size", false, &t.hidden_size)) ||
        (st = slm_json_opt_i32(path, root, "intermediate_size", false, &t.intermediate_size)) ||
        (st = slm_json_opt_i32(path, root, "num_hidden_layers", false, &t.num_hidden_layers)) ||
        (st = slm_json_opt_i32(path, root, "num_attention_heads", false, &t.num_attention_heads)) ||
        (st = slm_json_opt_i32(path, root, "num_key_value_heads", true, &t.num_key_value_heads)) ||
        (st = slm_json_opt_i32(path, root, "max_position_embeddings", false,
                               &t.max_position_embeddings)) ||
        (st = slm_json_opt_f32(path, root, "rms_norm_eps", &t.rms_norm_eps)) ||
        (st = read_rope(path, root, &t)) ||
        (st = slm_json_opt_f32(path, root, "initializer_range", &t.initializer_range)) ||
        (st = slm_json_opt_bool(path, root, "tie_word_embeddings", &t.tie_word_embeddings)) ||
        (st = slm_json_opt_i32(path, root, "head_dim", true, &t.head_dim)) ||
        (st = check_unsupported(path, root, t.hidden_size, t.num_attention_heads)))
        goto out;
    if (t.num_key_value_heads == 0) t.num_key_value_heads = t.num_attention_heads;
    // An explicit head_dim 0 is no head size (transformers builds zero-width projections from it
    // and fails); 0 is only this struct's "absent", so it must not silently mean hidden / heads.
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(root, "head_dim");
    if (hd && cJSON_IsNumber(hd) && t.head_dim == 0) {
        st = slm_fail(SLM_E_ARG,
                      "%s: model config: head_dim must be even and in [2, 65536] (or absent / "
                      "null: hidden_size / num_attention_heads), got 0",
                      path);
        goto out;
    }
    // head_dim equal to hidden_size / heads is the implicit one (stored as 0, as presets do)
    if (t.head_dim > 0 && t.num_attention_heads > 0 &&
        (int64_t)t.head_dim * t.num_attention_heads == t.hidden_size)
        t.head_dim = 0;
    if ((st = slm_llama_config_validate(&t))) {
        st = slm_fail_wrap(st, "%s", path);
        goto out;
    }
    warn_unknown_fields(path, root);
    *c = t;
out:
    cJSON_Delete(root);
    return st;
}

slm_status slm_llama_config_load(const char *path, slm_llama_config *c) {
    char *text = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(path, &text, &len);
    if (st) return st;
    st = slm_llama_config_parse(text, len, path, c);
    free(text);
    return st;
}

slm_status slm_llama_config_resolve(const char *spec, slm_llama_config *c) {
    if (!spec || !*spec) return slm_fail(SLM_E_ARG, "model: empty preset name / config path");
    if (slm_is_file(spec)) return slm_llama_config_load(spec, c);
    if (strchr(spec, '/') || strstr(spec, ".json"))
        return slm_fail(SLM_E_IO, "%s: model config file not found", spec);
    return slm_llama_config_preset(spec, c);
}

// Adds a float as the shortest decimal that reads back to the same float ("1e-05", not
// "9.9999997473787516e-06").
static void add_float(cJSON *obj, const char *name, float v) {
    char buf[48];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    // JSON has no "inf"; validated configs are finite.
    cJSON_AddItemToObject(obj, name, cJSON_CreateRaw(buf));
}

// add_float, but always with a decimal point or exponent ("8.0", not "8"): transformers checks
// that rope_scaling's factors are floats (warns on a JSON integer).
static void add_float_f(cJSON *obj, const char *name, float v) {
    add_float(obj, name, v);
    cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (strpbrk(it->valuestring, ".eEn")) return;
    char buf[64];
    snprintf(buf, sizeof buf, "%s.0", it->valuestring);
    cJSON_ReplaceItemInObjectCaseSensitive(obj, name, cJSON_CreateRaw(buf));
}

// The scaling keys of c's rope_type (none for default) into a rope_scaling / rope_parameters
// object.
static void add_rope_scaling(cJSON *o, const slm_llama_config *c) {
    if (c->rope_type == SLM_ROPE_DEFAULT) return;
    add_float_f(o, "factor", c->rope_factor);
    if (c->rope_type != SLM_ROPE_LLAMA3) return;
    add_float_f(o, "low_freq_factor", c->rope_low_freq_factor);
    add_float_f(o, "high_freq_factor", c->rope_high_freq_factor);
    cJSON_AddNumberToObject(o, "original_max_position_embeddings",
                            c->rope_original_max_position_embeddings);
}

void slm_llama_config_to_json(const slm_llama_config *c, bool hf, cJSON *o) {
    if (hf) {
        cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
        cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
        cJSON_AddStringToObject(o, "model_type", "llama");
        cJSON_AddStringToObject(o, "hidden_act", "silu");
    }
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(o, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->num_attention_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", c->num_key_value_heads);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_position_embeddings);
    add_float(o, "rms_norm_eps", c->rms_norm_eps);
    add_float(o, "rope_theta", c->rope_theta);
    if (hf) {
        // transformers >= 5 reads RoPE settings from rope_parameters, 4 from rope_theta and
        // rope_scaling: both.
        cJSON *rp = cJSON_AddObjectToObject(o, "rope_parameters");
        cJSON_AddStringToObject(rp, "rope_type", slm_rope_type_name(c->rope_type));
        add_float(rp, "rope_theta", c->rope_theta);
        add_rope_scaling(rp, c);
        if (c->rope_type == SLM_ROPE_DEFAULT) {
            cJSON_AddNullToObject(o, "rope_scaling");
        } else {
            cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
            cJSON_AddStringToObject(rs, "rope_type", slm_rope_type_name(c->rope_type));
            add_rope_scaling(rs, c);
        }
    } else if (c->rope_type != SLM_ROPE_DEFAULT) {
        // checkpoint manifests: only when scaled (unscaled manifests keep their 11 fields).
        cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", slm_rope_type_name(c->rope_type));
        add_rope_scaling(rs, c);
    }
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
    add_float(o, "initializer_range", c->initializer_range);
    if (c->head_dim > 0) // explicit only (configs without one keep their exact fields)
        cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    if (hf) {
        cJSON_AddBoolToObject(o, "attention_bias", false);
        cJSON_AddBoolToObject(o, "mlp_bias", false);
        cJSON_AddStringToObject(o, "torch_dtype", "float32");
    }
}

slm_status slm_llama_config_save(const slm_llama_config *c, const char *path) {
    cJSON *o = cJSON_CreateObject();
    slm_llama_config_to_json(c, true, o);
    slm_status st = slm_json_write_file(path, o);
    cJSON_Delete(o);
    return st;
}

int64_t slm_llama_n_matmul_params(const slm_llama_config *c) {
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    int64_t D = slm_llama_head_dim(c);
    int64_t HD = (int64_t)c->num_attention_heads * D, KVD = (int64_t)c->num_key_value_heads * D;
    int64_t per_block = HD * C + 2 * KVD * C + C * HD + 3 * F * C;
    // lm_head counts even when tied: it is a matmul either way.
    return c->num_hidden_layers * per_block + V * C;
}

int64_t slm_llama_n_params(const slm_llama_config *c) {
    int64_t C = c->hidden_size, V = c->vocab_size;
    int64_t n = slm_llama_n_matmul_params(c) + (int64_t)c->num_hidden_layers * 2 * C + C;
    // embedding; the lm_head matrix is the same tensor when tied.
    return c->tie_word_embeddings ? n : n + V * C;
}
