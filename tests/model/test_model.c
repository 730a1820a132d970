// Pure-C model tests: presets and config errors, JSON in/out, unit layout, seeded init,
// hook order, activation checkpointing == plain backward, gradient accumulation, ignored
// targets, KV-cache decode == full forward. (PyTorch parity: parity.py.)
#include "model/model.h"
#include "fixtures.h"
#include "test.h"

#include <cjson/cJSON.h>

#include <omp.h>
#include <unistd.h>

static char g_tmpdir[256];

static const char *tmp_path(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", g_tmpdir, name);
    return buf;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static slm_llama_config small_cfg(int V, int C, int F, int L, int H, int KV, bool tied) {
    return slm_test_config(V, C, F, L, H, KV, 64, tied);
}

// Field by field (the struct has padding bytes, so no memcmp).
static bool cfg_equal(const slm_llama_config *a, const slm_llama_config *b) {
    return a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
           a->intermediate_size == b->intermediate_size &&
           a->num_hidden_layers == b->num_hidden_layers &&
           a->num_attention_heads == b->num_attention_heads &&
           a->num_key_value_heads == b->num_key_value_heads &&
           a->max_position_embeddings == b->max_position_embeddings &&
           a->rms_norm_eps == b->rms_norm_eps && a->rope_theta == b->rope_theta &&
           a->tie_word_embeddings == b->tie_word_embeddings &&
           a->initializer_range == b->initializer_range && a->rope_type == b->rope_type &&
           a->rope_factor == b->rope_factor && a->rope_low_freq_factor == b->rope_low_freq_factor &&
           a->rope_high_freq_factor == b->rope_high_freq_factor &&
           a->rope_original_max_position_embeddings == b->rope_original_max_position_embeddings;
}

static void test_presets(void) {
    const char *names[] = {"tiny", "small", "gqa", "kjv"};
    for (int i = 0; i < 4; i++) {
        slm_llama_config c;
        CHECK_OK(slm_llama_config_preset(names[i], &c));
        CHECK_OK(slm_llama_config_validate(&c));
    }
    slm_llama_config c;
    CHECK_OK(slm_llama_config_preset("tiny", &c));
    CHECK_EQ_INT(c.vocab_size, 8192);
    CHECK_EQ_INT(c.hidden_size, 288);
    CHECK_EQ_INT(c.num_hidden_layers, 6);
    CHECK(c.max_position_embeddings >= 256);
    CHECK_OK(slm_llama_config_preset("gqa", &c));
    CHECK_EQ_INT(c.num_attention_heads, 8);
    CHECK_EQ_INT(c.num_key_value_heads, 2);
    CHECK_EQ_INT(c.vocab_size, 32000);
    CHECK_OK(slm_llama_config_preset("kjv", &c));
    CHECK_EQ_INT(c.vocab_size, 4096);
    CHECK_EQ_INT(slm_llama_config_preset("huge", &c), SLM_E_ARG);
    CHECK_MSG(strstr(slm_errmsg(), "huge") && strstr(slm_errmsg(), "tiny") &&
                  strstr(slm_errmsg(), "kjv"),
              "message: %s", slm_errmsg());
    CHECK_EQ_INT(slm_llama_config_resolve("huge", &c), SLM_E_ARG);
    CHECK_EQ_INT(slm_llama_config_resolve("/nonexistent/config.json", &c), SLM_E_IO);
}

static void test_validate_errors(void) {
    slm_llama_config c = small_cfg(97, 40, 72, 2, 4, 2, false);
    CHECK_OK(slm_llama_config_validate(&c));
    c.num_attention_heads = 3; // 40 % 3 != 0
    CHECK_EQ_INT(slm_llama_config_validate(&c), SLM_E_ARG);
    CHECK_MSG(strstr(slm_errmsg(), "hidden_size"), "message: %s", slm_errmsg());
    c = small_cfg(97, 40, 72, 2, 8, 2, false); // head dim 5: odd
    CHECK_EQ_INT(slm_llama_config_validate(&c), SLM_E_ARG);
    CHECK_MSG(strstr(slm_errmsg(), "even"), "message: %s", slm_errmsg());
    c = small_cfg(97, 48, 72, 2, 6, 4, false); // 4 does not divide 6
    CHECK_EQ_INT(slm_llama_config_validate(&c), SLM_E_ARG);
    CHECK_MSG(strstr(slm_errmsg(), "num_key_value_heads"), "message: %s", slm_errmsg());
    c = small_cfg(0, 40, 72, 2, 4, 2, false);
    CHECK_EQ_INT(slm_llama_config_validate(&c), SLM_E_ARG);
    CHECK_MSG(strstr(slm_errmsg(), "vocab_size"), "message: %s", slm_errmsg());
    c = small_cfg(97, 40, 72, 2, 4, 2, false);
    c.rms_norm_eps = 0.0f;
    CHECK_EQ_INT(slm_llama_config_validate(&c), SLM_E_ARG);
    // Element counts must fit 64-bit offsets; memory is the users' check, not validate's.
    c = small_cfg(97, 65536, 131072, 20, 512, 512, false); // ~1e12 parameters: valid
    CHECK_OK(slm_llama_config_validate(&c));
    c = small_cfg(97, 1 << 30, 1 << 30, 2, 1 << 10, 1 << 10, false); // ~1e19 parameters
    CHECK_EQ_INT(slm_llama_config_validate(&c), SLM_E_ARG);
    CHECK_MSG(strstr(slm_errmsg(), "overflows 64-bit"), "message: %s", slm_errmsg());
    c = small_cfg(97, 40, 72, 2, 4, 2, false);
    slm_llama m;
    c.rms_norm_eps = 1e-5f;
    c.num_key_value_heads = 3;
    CHECK_EQ_INT(slm_llama_init(&m, &c, true), SLM_E_ARG);
    slm_llama_free(&m); // safe on the zeroed struct
}

static void test_config_json(void) {
    slm_llama_config c, d;
    const char *p = tmp_path("wrongtype.json");
    write_text(p, "{\"vocab_size\": 100, \"hidden_size\": \"512\"}");
    CHECK_EQ_INT(slm_llama_config_load(p, &c), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), p) && strstr(slm_errmsg(), "hidden_size"), "message: %s",
              slm_errmsg());
    write_text(p, "{\"tie_word_embeddings\": 1}");
    CHECK_EQ_INT(slm_llama_config_load(p, &c), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "tie_word_embeddings"), "message: %s", slm_errmsg());
    write_text(p, "{\"num_hidden_layers\": 2.5}");
    CHECK_EQ_INT(slm_llama_config_load(p, &c), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "num_hidden_layers"), "message: %s", slm_errmsg());
    write_text(p, "{\"vocab_size\": 100,");
    CHECK_EQ_INT(slm_llama_config_load(p, &c), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "JSON"), "message: %s", slm_errmsg());
    // consistent types, inconsistent sizes: a validation error naming the file
    write_text(p, "{\"hidden_size\": 40, \"num_attention_heads\": 3}");
    CHECK_EQ_INT(slm_llama_config_load(p, &c), SLM_E_ARG);
    CHECK_MSG(strstr(slm_errmsg(), p), "message: %s", slm_errmsg());
    // HF defaults; num_key_value_heads missing -> num_attention_heads
    write_text(p, "{\"hidden_size\": 64, \"num_attention_heads\": 4, \"intermediate_size\": 96, "
                  "\"vocab_size\": 50, \"num_hidden_layers\": 1, \"rope_scaling\": null, "
                  "\"hidden_act\": \"silu\", \"torch_dtype\": \"bfloat16\"}");
    CHECK_OK(slm_llama_config_load(p, &c));
    CHECK_EQ_INT(c.num_key_value_heads, 4);
    CHECK_EQ_INT(c.max_position_embeddings, 2048);
    CHECK_CLOSE(c.rms_norm_eps, 1e-6, 1e-6, 0);
    CHECK(!c.tie_word_embeddings);
    write_text(p, "{\"hidden_act\": \"gelu\"}");
    CHECK_EQ_INT(slm_llama_config_load(p, &c), SLM_E_UNSUPPORTED);
    // another architecture, and text after the object, are refused (not silently read)
    write_text(p, "{\"model_type\": \"gpt2\", \"vocab_size\": 50}");
    CHECK_EQ_INT(slm_llama_config_load(p, &c), SLM_E_UNSUPPORTED);
    CHECK_MSG(strstr(slm_errmsg(), "model_type") && strstr(slm_errmsg(), "gpt2"), "message: %s",
              slm_errmsg());
    write_text(p, "{\"vocab_size\": 50} trailing");
    CHECK_EQ_INT(slm_llama_config_load(p, &c), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "after the JSON object"), "message: %s", slm_errmsg());
    write_text(p, "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                  "\"intermediate_size\": 96, \"vocab_size\": 50, \"num_hidden_layers\": 1}\n\n");
    CHECK_OK(slm_llama_config_load(p, &c));
    // save -> load round trip
    c = small_cfg(97, 40, 72, 2, 4, 2, true);
    c.rope_theta = 500000.0f;
    const char *q = tmp_path("roundtrip.json");
    CHECK_OK(slm_llama_config_save(&c, q));
    CHECK_OK(slm_llama_config_load(q, &d));
    CHECK(cfg_equal(&c, &d));
    CHECK_OK(slm_llama_config_resolve(q, &d));
    CHECK_EQ_INT(d.vocab_size, 97);
    unlink(p);
    unlink(q);
}

// RoPE settings in both layouts (transformers 4: top-level rope_theta / rope_scaling;
// transformers 5: rope_parameters), and every math-changing field refused, naming it (issue 8
// item 19). Values are the ones written in the JSON text here.
static void test_config_rope(void) {
    slm_llama_config c;
    const char *p = tmp_path("rope.json");
#define BASE                                                                                       \
    "{\"hidden_size\": 64, \"num_attention_heads\": 4, \"intermediate_size\": 96, "                \
    "\"vocab_size\": 50, \"num_hidden_layers\": 1, "
    write_text(p, BASE "\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": "
                       "\"default\"}}");
    CHECK_OK(slm_llama_config_load(p, &c));
    CHECK_EQ_INT((int64_t)c.rope_theta, 500000);
    write_text(p, BASE "\"rope_theta\": 1000000.0, \"rope_parameters\": {\"rope_theta\": "
                       "1000000.0, \"rope_type\": \"default\"}, \"rope_scaling\": null}");
    CHECK_OK(slm_llama_config_load(p, &c));
    CHECK_EQ_INT((int64_t)c.rope_theta, 1000000);
    write_text(p, BASE "\"rope_theta\": 250000.0, \"rope_scaling\": {\"type\": \"default\"}}");
    CHECK_OK(slm_llama_config_load(p, &c));
    CHECK_EQ_INT((int64_t)c.rope_theta, 250000);
    // rope_parameters without rope_theta: HF's default 1e4
    write_text(p, BASE "\"rope_parameters\": {\"rope_type\": \"default\"}}");
    CHECK_OK(slm_llama_config_load(p, &c));
    CHECK_EQ_INT((int64_t)c.rope_theta, 10000);
    static const struct {
        const char *json, *needle;
        slm_status want;
    } bad[] = {
        {"\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"yarn\", "
         "\"factor\": 2.0}}",
         "rope_parameters.rope_type", SLM_E_UNSUPPORTED},
        {"\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}", "rope_scaling.type",
         SLM_E_UNSUPPORTED},
        {"\"rope_scaling\": {\"rope_type\": \"longrope\", \"factor\": 2.0}}",
         "rope_scaling.rope_type", SLM_E_UNSUPPORTED},
        {"\"rope_parameters\": {\"rope_theta\": 500000.0, \"factor\": 2.0}}",
         "rope_parameters.factor", SLM_E_FORMAT},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}",
         "rope_scaling.low_freq_factor", SLM_E_FORMAT},
        {"\"rope_scaling\": {\"rope_type\": \"linear\"}}", "rope_scaling.factor", SLM_E_FORMAT},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0, "
         "\"low_freq_factor\": 1.0}}",
         "rope_scaling.low_freq_factor", SLM_E_UNSUPPORTED},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"mscale\": 1.0}}",
         "rope_scaling.mscale", SLM_E_UNSUPPORTED},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": \"2\"}}", "rope_scaling.factor",
         SLM_E_FORMAT},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 0.0}}", "factor", SLM_E_ARG},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": "
         "4.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 16}}",
         "high_freq_factor", SLM_E_ARG},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": "
         "1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 16.5}}",
         "rope_scaling.original_max_position_embeddings", SLM_E_FORMAT},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"type\": \"llama3\", \"factor\": 2.0}}",
         "rope_scaling.type", SLM_E_FORMAT},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}, \"rope_parameters\": "
         "{\"rope_type\": \"linear\", \"factor\": 4.0}}",
         "disagrees", SLM_E_FORMAT},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}, \"rope_parameters\": "
         "{\"rope_type\": \"default\"}}",
         "disagrees", SLM_E_FORMAT},
        {"\"rope_theta\": 10000.0, \"rope_parameters\": {\"rope_theta\": 500000.0}}", "disagrees",
         SLM_E_FORMAT},
        {"\"rope_parameters\": {\"rope_theta\": 500000.0, \"partial_rotary_factor\": 0.5}}",
         "partial_rotary_factor", SLM_E_UNSUPPORTED},
        {"\"partial_rotary_factor\": 0.25}", "partial_rotary_factor", SLM_E_UNSUPPORTED},
        {"\"rope_parameters\": 5}", "rope_parameters", SLM_E_FORMAT},
        {"\"rope_parameters\": {\"rope_theta\": \"1e4\"}}", "rope_parameters.rope_theta",
         SLM_E_FORMAT},
        {"\"attention_dropout\": 0.1}", "attention_dropout", SLM_E_UNSUPPORTED},
        {"\"quantization_config\": {\"quant_method\": \"bitsandbytes\"}}", "quantization_config",
         SLM_E_UNSUPPORTED},
        {"\"mlp_bias\": true}", "mlp_bias", SLM_E_UNSUPPORTED},
        {"\"head_dim\": 33}", "head_dim", SLM_E_ARG},
        {"\"head_dim\": \"32\"}", "head_dim", SLM_E_FORMAT},
        // 0 is no head size (transformers fails on it), not the implicit hidden / heads
        {"\"head_dim\": 0}", "head_dim must be even and in [2, 65536]", SLM_E_ARG},
        {"\"head_dim\": 0.0}", "got 0", SLM_E_ARG},
    };
    char buf[512];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(buf, sizeof buf, BASE "%s", bad[i].json);
        write_text(p, buf);
        CHECK_EQ_INT(slm_llama_config_load(p, &c), bad[i].want);
        CHECK_MSG(strstr(slm_errmsg(), bad[i].needle) && strstr(slm_errmsg(), p), "case %zu: %s", i,
                  slm_errmsg());
    }
    // An explicit head_dim is kept (Llama 3.2 style); one equal to hidden / heads is implicit.
    write_text(p, BASE "\"head_dim\": 32}");
    CHECK_OK(slm_llama_config_load(p, &c));
    CHECK_EQ_INT(c.head_dim, 32);
    CHECK_EQ_INT(slm_llama_head_dim(&c), 32);
    snprintf(buf, sizeof buf, BASE "\"head_dim\": %d}", c.hidden_size / c.num_attention_heads);
    write_text(p, buf);
    CHECK_OK(slm_llama_config_load(p, &c));
    CHECK_EQ_INT(c.head_dim, 0);
    write_text(p, BASE "\"head_dim\": null}"); // null: absent (as transformers' LlamaConfig)
    CHECK_OK(slm_llama_config_load(p, &c));
    CHECK_EQ_INT(c.head_dim, 0);
    // Irrelevant fields are accepted: attention_dropout 0, pretraining_tp, token ids, dtype.
    write_text(p, BASE "\"attention_dropout\": 0.0, \"pretraining_tp\": 2, \"bos_token_id\": 7, "
                       "\"dtype\": \"bfloat16\", \"use_cache\": false, \"quantization_config\": "
                       "null}");
    CHECK_OK(slm_llama_config_load(p, &c));
    // Scaled RoPE: llama3 (transformers 4 "rope_scaling" with rope_type or the legacy "type",
    // transformers 5 "rope_parameters", or both when equal) and linear.
    const char *llama3[] = {
        "\"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, "
        "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"rope_type\": "
        "\"llama3\"}}",
        "\"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
        "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}, \"rope_theta\": "
        "500000}",
        "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": "
        "8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
        "\"original_max_position_embeddings\": 8192}}",
        "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": "
        "8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
        "\"original_max_position_embeddings\": 8192}, \"rope_scaling\": {\"rope_type\": "
        "\"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
        "\"original_max_position_embeddings\": 8192}}",
    };
    for (size_t i = 0; i < sizeof llama3 / sizeof llama3[0]; i++) {
        char b2[1024];
        snprintf(b2, sizeof b2, BASE "%s", llama3[i]);
        write_text(p, b2);
        CHECK_OK(slm_llama_config_load(p, &c));
        CHECK_MSG(c.rope_type == SLM_ROPE_LLAMA3 && c.rope_factor == 8.0f &&
                      c.rope_low_freq_factor == 1.0f && c.rope_high_freq_factor == 4.0f &&
                      c.rope_original_max_position_embeddings == 8192 && c.rope_theta == 500000.0f,
                  "llama3 case %zu", i);
    }
    write_text(p, BASE "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.5}}");
    CHECK_OK(slm_llama_config_load(p, &c));
    CHECK(c.rope_type == SLM_ROPE_LINEAR && c.rope_factor == 2.5f);
#undef BASE
    // The saved config carries both layouts with the same theta, and reads back.
    c = small_cfg(97, 40, 72, 2, 4, 2, false);
    c.rope_theta = 500000.0f;
    CHECK_OK(slm_llama_config_save(&c, p));
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(slm_file_read_all(p, &text, &len));
    CHECK_MSG(strstr(text, "\"rope_parameters\"") && strstr(text, "\"rope_type\":\t\"default\""),
              "saved: %s", text);
    free(text);
    slm_llama_config d;
    CHECK_OK(slm_llama_config_load(p, &d));
    CHECK(cfg_equal(&c, &d));
    unlink(p);
}

// --lora-targets: PEFT module names, comma-separated; every item must be one (an empty item from
// a leading, doubled or trailing comma is refused alike), each at most once.
static void test_lora_targets(void) {
    uint32_t m = 0;
    CHECK_OK(slm_lora_parse_targets("q_proj,v_proj", &m));
    CHECK_EQ_INT((int)m, (1 << 0) | (1 << 2));
    CHECK_OK(slm_lora_parse_targets("all", &m));
    CHECK_EQ_INT((int)m, (1 << SLM_LORA_N_TARGETS) - 1);
    const char *bad[] = {"",
                         ",",
                         "q_proj,",
                         ",q_proj",
                         "q_proj,,v_proj",
                         "q_proj, v_proj",
                         "q_proj,q_proj",
                         "all,q_proj",
                         "lm_head",
                         "Q_PROJ"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(slm_lora_parse_targets(bad[i], &m) == SLM_E_ARG, "\"%s\" accepted", bad[i]);
        CHECK_MSG(strstr(slm_errmsg(), "--lora-targets"), "%s", slm_errmsg());
    }
}

static void test_layout(void) {
    slm_llama_config c = small_cfg(97, 40, 72, 2, 4, 2, false);
    slm_llama m;
    CHECK_OK(slm_llama_init(&m, &c, true));
    CHECK_EQ_INT(m.n_units, 3);
    // block: ln1 40, q 40x40, k 20x40, v 20x40, o 40x40, ln2 40, gate 72x40, up 72x40, down 40x72
    int64_t block = 40 + 1600 + 800 + 800 + 1600 + 40 + 3 * 2880;
    CHECK_EQ_INT(m.units[0].numel, block);
    CHECK_EQ_INT(m.units[1].numel, block);
    CHECK_EQ_INT(m.units[2].numel, 97 * 40 + 40 + 97 * 40);
    CHECK_EQ_INT(m.units[0].n_views, 9);
    CHECK_EQ_STR(m.units[1].views[2].name, "model.layers.1.self_attn.k_proj.weight");
    CHECK_EQ_INT(m.units[1].views[2].shape[0], 20);
    CHECK_EQ_INT(m.units[1].views[2].shape[1], 40);
    CHECK_EQ_INT(m.units[1].views[2].offset, 40 + 1600);
    CHECK_EQ_STR(m.units[2].views[2].name, "lm_head.weight");
    int64_t total = 0;
    for (int u = 0; u < m.n_units; u++) {
        int64_t off = 0;
        for (int i = 0; i < m.units[u].n_views; i++) {
            const slm_param_view *v = &m.units[u].views[i];
            CHECK_EQ_INT(v->offset, off); // contiguous, in HF order
            CHECK_EQ_INT(v->weight_decay, v->ndim == 2 && !strstr(v->name, "embed_tokens"));
            off += v->numel;
        }
        CHECK_EQ_INT(off, m.units[u].numel);
        total += off;
    }
    CHECK_EQ_INT(total, slm_llama_n_params(&c));
    int unit = -1;
    const slm_param_view *v = slm_llama_find(&m, "model.layers.0.mlp.down_proj.weight", &unit);
    CHECK(v && unit == 0 && v->shape[0] == 40 && v->shape[1] == 72);
    CHECK(slm_llama_find(&m, "model.norm.weight", &unit) && unit == 2);
    CHECK(slm_llama_find(&m, "model.layers.2.mlp.up_proj.weight", NULL) == NULL);
    slm_llama_free(&m);

    c.tie_word_embeddings = true;
    CHECK_OK(slm_llama_init(&m, &c, false));
    CHECK(m.params[0] == NULL && m.grads[2] == NULL);
    CHECK_EQ_INT(m.units[2].n_views, 2);
    CHECK(slm_llama_find(&m, "lm_head.weight", NULL) == NULL);
    slm_llama_free(&m);

    // llama2.c's stories15M (dim 288, 6 layers, ffn 768, vocab 32000, tied): 15,191,712 params
    CHECK_OK(slm_llama_config_preset("tiny", &c));
    c.vocab_size = 32000;
    c.tie_word_embeddings = true;
    CHECK_EQ_INT(slm_llama_n_params(&c), 15191712);
    // MFU's N: matmul weights incl. lm_head (= embedding when tied), norms and embedding excluded
    CHECK_EQ_INT(slm_llama_n_matmul_params(&c), 15191712 - 13 * 288);
}

static void test_init(void) {
    slm_llama_config c = small_cfg(97, 40, 72, 2, 4, 2, false);
    slm_llama a, b;
    CHECK_OK(slm_llama_init(&a, &c, true));
    CHECK_OK(slm_llama_init(&b, &c, true));
    omp_set_num_threads(1);
    slm_llama_init_weights(&a, 42);
    omp_set_num_threads(2);
    slm_llama_init_weights(&b, 42);
    for (int u = 0; u < a.n_units; u++)
        CHECK(memcmp(a.params[u], b.params[u], (size_t)a.units[u].numel * 4) == 0);
    // per-unit init equals the whole-model init
    float *flat = slm_xmalloc((size_t)a.units[1].numel * 4);
    slm_llama_init_unit_weights(&a, 42, 1, flat);
    CHECK(memcmp(flat, a.params[1], (size_t)a.units[1].numel * 4) == 0);
    free(flat);
    slm_llama_init_weights(&b, 43);
    CHECK(memcmp(a.params[0], b.params[0], (size_t)a.units[0].numel * 4) != 0);
    // norms are 1; matrices N(0, 0.02): sample moments over the embedding (3880 values)
    for (int u = 0; u < a.n_units; u++) {
        for (int i = 0; i < a.units[u].n_views; i++) {
            const slm_param_view *v = &a.units[u].views[i];
            const float *p = a.params[u] + v->offset;
            double s = 0, s2 = 0;
            for (int64_t j = 0; j < v->numel; j++) {
                s += p[j];
                s2 += (double)p[j] * p[j];
            }
            double mean = s / v->numel, sd = sqrt(s2 / v->numel - mean * mean);
            if (v->ndim == 1) {
                CHECK_CLOSE(mean, 1.0, 0, 0);
            } else {
                // 5-sigma bounds for n >= 800 samples
                CHECK_MSG(fabs(mean) < 5 * 0.02 / sqrt((double)v->numel), "%s mean %g", v->name,
                          mean);
                CHECK_MSG(fabs(sd - 0.02) < 0.02 * 5 / sqrt(2.0 * v->numel), "%s std %g", v->name,
                          sd);
            }
        }
    }
    slm_llama_free(&a);
    slm_llama_free(&b);
}

// slm_llama_init_weights stages groups of units on the host (at most 2^24 floats, or the
// largest unit): a root unit larger than that (vocab 140000 x 64, untied: 17.9M floats) puts
// the blocks and the root in separate groups. Every unit must equal the host per-unit init, a
// unit whose params are NULL must be skipped, and the result must not depend on threads.
static void test_init_staged(void) {
    slm_llama_config c = small_cfg(140000, 64, 128, 2, 2, 2, false);
    slm_llama a;
    CHECK_OK(slm_llama_init(&a, &c, true));
    CHECK(a.units[2].numel > ((int64_t)1 << 24));
    float *keep = a.params[1];
    a.params[1] = NULL; // skipped: stays zero
    omp_set_num_threads(2);
    slm_llama_init_weights(&a, 7);
    a.params[1] = keep;
    float *flat = slm_xmalloc((size_t)a.units[2].numel * 4);
    for (int u = 0; u < a.n_units; u++) {
        size_t bytes = (size_t)a.units[u].numel * 4;
        if (u == 1) {
            memset(flat, 0, bytes);
        } else {
            slm_llama_init_unit_weights(&a, 7, u, flat);
        }
        CHECK_MSG(memcmp(flat, a.params[u], bytes) == 0, "unit %d differs", u);
    }
    free(flat);
    slm_llama_free(&a);
}

typedef struct hook_log {
    char text[512];
} hook_log;
static void log_ev(void *ctx, const char *kind, int u) {
    hook_log *h = ctx;
    size_t n = strlen(h->text);
    snprintf(h->text + n, sizeof h->text - n, "%s%d ", kind, u);
}
static void h_pf(void *ctx, int u) {
    log_ev(ctx, "F", u);
}
static void h_qf(void *ctx, int u) {
    log_ev(ctx, "f", u);
}
static void h_pb(void *ctx, int u) {
    log_ev(ctx, "B", u);
}
static void h_qb(void *ctx, int u) {
    log_ev(ctx, "b", u);
}

static void fill_tokens(int32_t *tok, int32_t *tgt, int64_t n, int V, uint64_t seed) {
    slm_rng r;
    slm_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) {
        tok[i] = (int32_t)slm_rng_below(&r, (uint64_t)V);
        if (tgt) tgt[i] = (int32_t)slm_rng_below(&r, (uint64_t)V);
    }
}

static void test_hooks_order(void) {
    slm_llama_config c = small_cfg(31, 16, 24, 2, 2, 1, true);
    slm_llama m;
    CHECK_OK(slm_llama_init(&m, &c, true));
    slm_llama_init_weights(&m, 1);
    hook_log log = {{0}};
    m.hooks = (slm_unit_hooks){&log, h_pf, h_qf, h_pb, h_qb};
    int32_t tok[6], tgt[6];
    fill_tokens(tok, tgt, 6, 31, 5);
    slm_llama_forward(&m, tok, tgt, 2, 3);
    slm_llama_backward(&m, 1.0f);
    CHECK_EQ_STR(log.text, "F2 F0 f0 F1 f1 f2 B2 B1 b1 B0 b0 b2 ");
    slm_llama_free(&m);
}

static float step(slm_llama *m, const int32_t *tok, const int32_t *tgt, int B, int T, float s);

// FSDP-like hooks: params / grads pointers exist only between a unit's pre and post hooks
// (alloc == false); results must equal the plain model's bit for bit.
typedef struct gather_ctx {
    slm_llama *m;
    float **full_p, **full_g; // the "gathered" buffers
    int live_params;          // units whose params are currently set
} gather_ctx;
static void g_pre_fwd(void *ctx, int u) {
    gather_ctx *g = ctx;
    g->m->params[u] = g->full_p[u];
    g->live_params++;
}
static void g_post_fwd(void *ctx, int u) {
    gather_ctx *g = ctx;
    g->m->params[u] = NULL;
    g->live_params--;
}
static void g_pre_bwd(void *ctx, int u) {
    gather_ctx *g = ctx;
    g->m->params[u] = g->full_p[u];
    g->m->grads[u] = g->full_g[u];
}
static void g_post_bwd(void *ctx, int u) {
    gather_ctx *g = ctx;
    g->m->params[u] = NULL;
    g->m->grads[u] = NULL;
}

static void test_hooks_gather(void) {
    slm_llama_config c = small_cfg(41, 24, 40, 3, 4, 2, false);
    slm_llama a, b;
    CHECK_OK(slm_llama_init(&a, &c, true));
    CHECK_OK(slm_llama_init(&b, &c, false));
    slm_llama_init_weights(&a, 3);
    float *fp[4], *fg[4];
    for (int u = 0; u < b.n_units; u++) {
        fp[u] = slm_xmalloc((size_t)b.units[u].numel * 4);
        fg[u] = slm_xcalloc((size_t)b.units[u].numel, 4);
        slm_llama_init_unit_weights(&b, 3, u, fp[u]);
    }
    gather_ctx g = {&b, fp, fg, 0};
    b.hooks = (slm_unit_hooks){&g, g_pre_fwd, g_post_fwd, g_pre_bwd, g_post_bwd};
    b.activation_checkpointing = true;
    enum { B = 2, T = 6 };
    int32_t tok[B * T], tgt[B * T];
    fill_tokens(tok, tgt, B * T, 41, 8);
    float la = step(&a, tok, tgt, B, T, 1.0f);
    float lb = slm_llama_forward(&b, tok, tgt, B, T);
    slm_llama_backward(&b, 1.0f);
    CHECK(la == lb);
    CHECK_EQ_INT(g.live_params, 0);
    for (int u = 0; u < b.n_units; u++) {
        CHECK(b.params[u] == NULL && b.grads[u] == NULL);
        CHECK(memcmp(fg[u], a.grads[u], (size_t)b.units[u].numel * 4) == 0);
    }
    // decode through the same hooks
    slm_kv_cache *kc = slm_kv_cache_new(&b, 4);
    slm_kv_cache *ka = slm_kv_cache_new(&a, 4);
    float lga[41], lgb[41];
    slm_llama_decode_step(&b, kc, 5, 0, lgb);
    slm_llama_decode_step(&a, ka, 5, 0, lga);
    CHECK(memcmp(lga, lgb, sizeof lga) == 0);
    CHECK_EQ_INT(g.live_params, 0);
    slm_kv_cache_free(kc);
    slm_kv_cache_free(ka);
    for (int u = 0; u < b.n_units; u++) {
        free(fp[u]);
        free(fg[u]);
    }
    slm_llama_free(&a);
    slm_llama_free(&b);
}

// Runs forward + backward; returns the loss, grads left in m.
static float step(slm_llama *m, const int32_t *tok, const int32_t *tgt, int B, int T, float s) {
    slm_llama_zero_grad(m);
    float loss = slm_llama_forward(m, tok, tgt, B, T);
    slm_llama_backward(m, s);
    return loss;
}

static double max_rel_diff(const slm_llama *a, const slm_llama *b, double scale_b) {
    double worst = 0;
    for (int u = 0; u < a->n_units; u++) {
        double d = 0, n = 0;
        for (int64_t i = 0; i < a->units[u].numel; i++) {
            double x = a->grads[u][i], y = scale_b * b->grads[u][i];
            d += (x - y) * (x - y);
            n += y * y;
        }
        double r = n > 0 ? sqrt(d / n) : sqrt(d);
        if (r > worst) worst = r;
    }
    return worst;
}

static void test_ckpt_and_accum(void) {
    slm_llama_config c = small_cfg(53, 32, 48, 3, 4, 2, false);
    slm_llama a, b;
    CHECK_OK(slm_llama_init(&a, &c, true));
    CHECK_OK(slm_llama_init(&b, &c, true));
    slm_llama_init_weights(&a, 7);
    slm_llama_init_weights(&b, 7);
    enum { B = 2, T = 11 };
    int32_t tok[B * T], tgt[B * T];
    fill_tokens(tok, tgt, B * T, 53, 9);
    tgt[3] = -1;
    b.activation_checkpointing = true;
    float la = step(&a, tok, tgt, B, T, 1.0f);
    float lb = step(&b, tok, tgt, B, T, 1.0f);
    CHECK(la == lb);
    // The up-front estimate (train's memory check) covers what forward + backward allocated.
    for (int ck = 0; ck < 2; ck++) {
        double est = slm_llama_act_bytes_estimate(&c, B, T, ck);
        double got = (double)slm_llama_act_bytes(ck ? &b : &a);
        CHECK_MSG(est >= got && est <= 1.25 * got + 65536,
                  "estimate %.0f, allocated %.0f (ckpt %d)", est, got, ck);
    }
    CHECK_MSG(max_rel_diff(&a, &b, 1.0) == 0.0, "ckpt grads differ: %g", max_rel_diff(&a, &b, 1.0));
    CHECK_CLOSE(la, log(53.0), 0.05, 0); // near-uniform predictions at init
    // loss_scale 3 == 3 x; two accumulated backwards == 2 x
    b.activation_checkpointing = false;
    step(&b, tok, tgt, B, T, 3.0f);
    CHECK_MSG(max_rel_diff(&b, &a, 3.0) < 1e-6, "scaled: %g", max_rel_diff(&b, &a, 3.0));
    slm_llama_zero_grad(&b);
    for (int k = 0; k < 2; k++) {
        slm_llama_forward(&b, tok, tgt, B, T);
        slm_llama_backward(&b, 1.0f);
    }
    CHECK_MSG(max_rel_diff(&b, &a, 2.0) < 1e-6, "accumulated: %g", max_rel_diff(&b, &a, 2.0));
    // every target ignored: loss 0, zero gradients, no NaN
    for (int i = 0; i < B * T; i++)
        tgt[i] = -1;
    float l0 = step(&b, tok, tgt, B, T, 1.0f);
    CHECK(l0 == 0.0f);
    for (int u = 0; u < b.n_units; u++)
        for (int64_t i = 0; i < b.units[u].numel; i++)
            CHECK(b.grads[u][i] == 0.0f);
    slm_llama_free(&a);
    slm_llama_free(&b);

    // Workspace with and without checkpointing (allocation only) for the kjv preset, B=8 T=256.
    slm_llama_config k;
    CHECK_OK(slm_llama_config_preset("kjv", &k));
    slm_llama m;
    CHECK_OK(slm_llama_init(&m, &k, false));
    slm_llama_set_shape(&m, 8, 256, false);
    size_t plain = slm_llama_act_bytes(&m);
    m.activation_checkpointing = true;
    slm_llama_set_shape(&m, 8, 256, false);
    size_t ck = slm_llama_act_bytes(&m);
    printf("activation workspace, kjv preset B=8 T=256 (forward, before backward scratch): "
           "%.1f MiB plain, %.1f MiB with activation checkpointing (%.0f%% saved)\n",
           plain / 1048576.0, ck / 1048576.0, 100.0 * (1.0 - (double)ck / (double)plain));
    CHECK(ck < plain);
    slm_llama_free(&m);
}

// Backward against central finite differences of the loss (fp32 forward, so a loose tolerance;
// the tight check is the float64 PyTorch parity). Large init makes every path matter.
static void test_finite_differences(void) {
    slm_llama_config c = small_cfg(23, 16, 24, 2, 4, 2, false);
    c.initializer_range = 0.4f;
    slm_llama m;
    CHECK_OK(slm_llama_init(&m, &c, true));
    slm_llama_init_weights(&m, 21);
    enum { B = 2, T = 5 };
    int32_t tok[B * T], tgt[B * T];
    fill_tokens(tok, tgt, B * T, 23, 4);
    tgt[2] = -1;
    step(&m, tok, tgt, B, T, 1.0f);
    m.loss_only = true;
    slm_rng r;
    slm_rng_seed(&r, 99);
    int bad = 0, checked = 0;
    for (int u = 0; u < m.n_units; u++) {
        for (int k = 0; k < 8; k++) {
            int64_t i = (int64_t)slm_rng_below(&r, (uint64_t)m.units[u].numel);
            float *p = &m.params[u][i], p0 = *p, h = 1e-2f;
            *p = p0 + h;
            double lp = slm_llama_forward(&m, tok, tgt, B, T);
            *p = p0 - h;
            double lm = slm_llama_forward(&m, tok, tgt, B, T);
            *p = p0;
            double fdg = (lp - lm) / (2.0 * h), g = m.grads[u][i];
            checked++;
            if (fabs(fdg - g) > 3e-2 * fabs(g) + 3e-4) {
                bad++;
                fprintf(stderr, "  unit %d elem %lld: backward %.6g, finite difference %.6g\n", u,
                        (long long)i, g, fdg);
            }
        }
    }
    slm_llama_free(&m);
    CHECK_MSG(bad == 0, "%d of %d gradient entries differ from finite differences", bad, checked);
}

static void test_decode_matches_forward(void) {
    const bool tied[6] = {false, true, false, true, false, true};
    // rope_theta per variant: decode applies RoPE itself (src/model/decode.c), so it is checked
    // at the default and at non-default thetas (the full forward's RoPE at those thetas is
    // checked against PyTorch by tests/model/parity.py).
    // Variants 4 and 5: llama3 and linear RoPE scaling (decode builds its own RoPE tables).
    const float theta[6] = {10000.0f, 10000.0f, 500000.0f, 1000000.0f, 10000.0f, 10000.0f};
    for (int variant = 0; variant < 6; variant++) {
        slm_llama_config c = small_cfg(67, 48, 80, 2, 6, variant % 2 ? 3 : 1, tied[variant]);
        c.rope_theta = theta[variant];
        if (variant == 4) {
            c.rope_type = SLM_ROPE_LLAMA3;
            c.rope_factor = 8.0f;
            c.rope_low_freq_factor = 1.0f;
            c.rope_high_freq_factor = 4.0f;
            c.rope_original_max_position_embeddings = 16;
        } else if (variant == 5) {
            c.rope_type = SLM_ROPE_LINEAR;
            c.rope_factor = 4.0f;
        }
        c.initializer_range = 0.1f; // sharper attention than at 0.02, a stronger check
        slm_llama m;
        CHECK_OK(slm_llama_init(&m, &c, true));
        slm_llama_init_weights(&m, 11 + variant);
        enum { T = 70 }; // beyond one 64-row attention tile
        int32_t tok[T];
        fill_tokens(tok, NULL, T, 67, 3);
        slm_llama_set_shape(&m, 1, T, true);
        slm_llama_forward(&m, tok, NULL, 1, T);
        // host copy in two pieces (row0 > 0 included); on the CPU device the logits are host
        // memory, so the copy must equal them bit for bit
        float full[T * 67];
        slm_llama_logits_to_host(&m, 0, 31, full);
        slm_llama_logits_to_host(&m, 31, T - 31, full + 31 * 67);
        CHECK(memcmp(full, slm_llama_logits(&m), sizeof full) == 0);
        slm_kv_cache *kc = slm_kv_cache_new(&m, 80);
        float logits[67];
        double worst = 0;
        for (int t = 0; t < T; t++) {
            slm_llama_decode_step(&m, kc, tok[t], t, logits);
            double d = 0, n = 0;
            for (int v = 0; v < 67; v++) {
                double y = full[t * 67 + v];
                d += (logits[v] - y) * (logits[v] - y);
                n += y * y;
            }
            if (sqrt(d / n) > worst) worst = sqrt(d / n);
        }
        slm_kv_cache_free(kc);
        slm_llama_free(&m);
        CHECK_MSG(worst < 1e-5, "variant %d: decode vs forward rel err %g", variant, worst);
    }
}

// The one JSON form of a config (issue 9 item 4): the manifest form (11 fields) and the HF
// config.json form both read back to the same config, floats written shortest ("1e-05").
static void test_config_to_json(void) {
    slm_llama_config c = small_cfg(97, 40, 72, 2, 4, 2, true), back;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 500000.0f;
    c.initializer_range = 0.02f;
    for (int hf = 0; hf < 2; hf++) {
        cJSON *o = cJSON_CreateObject();
        slm_llama_config_to_json(&c, hf, o);
        CHECK_EQ_INT(cJSON_GetArraySize(o), hf ? 19 : 11);
        CHECK(cJSON_IsString(cJSON_GetObjectItem(o, "model_type")) == (hf == 1));
        char *txt = cJSON_PrintUnformatted(o);
        CHECK_MSG(strstr(txt, "\"rms_norm_eps\":1e-05") &&
                      strstr(txt, "\"initializer_range\":0.02"),
                  "%s", txt);
        CHECK_OK(slm_llama_config_parse(txt, strlen(txt), "to_json", &back));
        CHECK(cfg_equal(&c, &back));
        free(txt);
        cJSON_Delete(o);
    }
    // Scaled RoPE round-trips in both forms: config.json carries it in rope_parameters
    // (transformers 5) and rope_scaling (4), a manifest's model_config in rope_scaling.
    for (int kind = 0; kind < 2; kind++) {
        c.rope_type = kind ? SLM_ROPE_LINEAR : SLM_ROPE_LLAMA3;
        c.rope_factor = kind ? 2.5f : 8.0f;
        c.rope_low_freq_factor = kind ? 0.0f : 1.0f;
        c.rope_high_freq_factor = kind ? 0.0f : 4.0f;
        c.rope_original_max_position_embeddings = kind ? 0 : 8192;
        for (int hf = 0; hf < 2; hf++) {
            cJSON *o = cJSON_CreateObject();
            slm_llama_config_to_json(&c, hf, o);
            cJSON *rs = cJSON_GetObjectItem(o, "rope_scaling");
            CHECK(cJSON_IsObject(rs) && cJSON_GetArraySize(rs) == (kind ? 2 : 5));
            if (hf) {
                cJSON *rp = cJSON_GetObjectItem(o, "rope_parameters");
                CHECK(cJSON_IsObject(rp) && cJSON_GetArraySize(rp) == (kind ? 3 : 6));
            }
            char *txt = cJSON_PrintUnformatted(o);
            const char *want =
                kind ? "\"rope_type\":\"linear\",\"factor\":2.5"
                     : "\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
                       "\"high_freq_factor\":4.0,"
                       "\"original_max_position_embeddings\":8192";
            CHECK_MSG(strstr(txt, want), "%s", txt);
            CHECK_OK(slm_llama_config_parse(txt, strlen(txt), "to_json", &back));
            CHECK(cfg_equal(&c, &back));
            free(txt);
            cJSON_Delete(o);
        }
    }
}

int main(void) {
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/slm_test_model_XXXXXX");
    if (!mkdtemp(g_tmpdir)) return 1;
    RUN(test_presets);
    RUN(test_validate_errors);
    RUN(test_config_json);
    RUN(test_config_to_json);
    RUN(test_config_rope);
    RUN(test_lora_targets);
    RUN(test_layout);
    RUN(test_init);
    RUN(test_hooks_order);
    RUN(test_ckpt_and_accum);
    RUN(test_hooks_gather);
    RUN(test_finite_differences);
    RUN(test_decode_matches_forward);
    RUN(test_init_staged);
    rmdir(g_tmpdir);
    return TEST_SUMMARY();
}
