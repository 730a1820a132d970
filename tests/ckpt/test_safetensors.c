// Safetensors and the HF bridge: export -> load round trips (fp32 exact; bf16 / fp16 within
// their rounding bound, checked element by element against a naive double-precision rounding),
// the on-disk layout (8-byte LE length, space padding to 8, __metadata__), sharded export with
// an index, and every malformed input -> a clean error naming the file and the tensor.
#include "ckpt/ckpt.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char g_tmp[256];

static void cfg_small(slm_llama_config *c, bool tie) {
    memset(c, 0, sizeof *c);
    c->vocab_size = 50;
    c->hidden_size = 16;
    c->intermediate_size = 24;
    c->num_hidden_layers = 2;
    c->num_attention_heads = 4;
    c->num_key_value_heads = 2;
    c->max_position_embeddings = 16;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->tie_word_embeddings = tie;
    c->initializer_range = 0.5f; // spread values over many binades for the rounding checks
}

static char *sub(const char *name) {
    char *d = slm_path_join(g_tmp, name);
    slm_mkdir_p(d);
    return d;
}

// |x - round_to_p_bits(x)| bound: half an ulp at precision p (p = 8 for bf16, 11 for fp16).
static bool within_half_ulp(float got, float x, int p) {
    if (x == 0) return got == 0;
    double e = floor(log2(fabs((double)x)));
    if (p == 11 && e < -14) e = -14; // fp16 subnormals: fixed ulp 2^-24
    double half_ulp = ldexp(1.0, (int)e - p);
    return fabs((double)got - (double)x) <= half_ulp * (1 + 1e-12);
}

static void test_export_load_roundtrip(void) {
    const char *dts[3] = {"fp32", "bf16", "fp16"};
    for (int tie = 0; tie < 2; tie++)
        for (int di = 0; di < 3; di++) {
            slm_llama_config c;
            cfg_small(&c, tie);
            slm_llama a, b;
            CHECK_OK(slm_llama_init(&a, &c, true));
            CHECK_OK(slm_llama_init(&b, &c, true));
            slm_llama_init_weights(&a, 99);
            char name[64];
            snprintf(name, sizeof name, "rt_%s_%d", dts[di], tie);
            char *d = sub(name);
            slm_dtype dt;
            CHECK_OK(slm_dtype_parse("dtype", dts[di], &dt));
            CHECK_OK(slm_hf_export(&a, d, dt, 0));
            CHECK_OK(slm_hf_load(&b, d));
            int bad = 0;
            for (int u = 0; u < a.n_units && !bad; u++)
                for (int64_t i = 0; i < a.units[u].numel && !bad; i++) {
                    float x = a.params[u][i], y = b.params[u][i];
                    bad =
                        di == 0 ? memcmp(&x, &y, 4) != 0 : !within_half_ulp(y, x, di == 1 ? 8 : 11);
                    if (bad)
                        fprintf(stderr, "  unit %d elem %lld: %.9g -> %.9g\n", u, (long long)i, x,
                                y);
                }
            CHECK_MSG(!bad, "%s tie=%d: loaded weights differ beyond the dtype's rounding", dts[di],
                      tie);
            // Layout of the file itself.
            char *f = slm_path_join(d, "model.safetensors");
            char *txt;
            size_t len;
            CHECK_OK(slm_file_read_all(f, &txt, &len));
            uint64_t n;
            memcpy(&n, txt, 8);
            CHECK(n % 8 == 0 && n + 8 <= len);
            cJSON *h = cJSON_ParseWithLength(txt + 8, (size_t)n);
            CHECK(h != NULL);
            const cJSON *md = cJSON_GetObjectItemCaseSensitive(h, "__metadata__");
            CHECK(cJSON_IsObject(md));
            CHECK(cJSON_GetObjectItemCaseSensitive(h, "lm_head.weight") ? !tie : tie);
            const cJSON *emb = cJSON_GetObjectItemCaseSensitive(h, "model.embed_tokens.weight");
            CHECK(emb != NULL);
            CHECK_EQ_STR(cJSON_GetObjectItemCaseSensitive(emb, "dtype")->valuestring,
                         di == 0   ? "F32"
                         : di == 1 ? "BF16"
                                   : "F16");
            cJSON_Delete(h);
            free(txt);
            free(f);
            free(d);
            slm_llama_free(&a);
            slm_llama_free(&b);
        }
}

static void test_sharded_export(void) {
    slm_llama_config c;
    cfg_small(&c, false);
    slm_llama a, b;
    CHECK_OK(slm_llama_init(&a, &c, true));
    CHECK_OK(slm_llama_init(&b, &c, true));
    slm_llama_init_weights(&a, 5);
    char *d = sub("sharded");
    CHECK_OK(slm_hf_export(&a, d, SLM_DTYPE_F32, 8000)); // embedding alone is 3200 B
    char *ip = slm_path_join(d, "model.safetensors.index.json");
    CHECK(slm_is_file(ip));
    char *txt;
    size_t len;
    CHECK_OK(slm_file_read_all(ip, &txt, &len));
    cJSON *o = cJSON_ParseWithLength(txt, len);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(o, "weight_map");
    CHECK(cJSON_GetArraySize(wm) == 2 * 9 + 3);
    const char *last = cJSON_GetObjectItemCaseSensitive(wm, "lm_head.weight")->valuestring;
    CHECK_MSG(strstr(last, "-of-") && strcmp(last, "model-00001-of-00001.safetensors"),
              "lm_head in %s", last);
    cJSON_Delete(o);
    free(txt);
    CHECK_OK(slm_hf_load(&b, d));
    for (int u = 0; u < a.n_units; u++)
        CHECK(!memcmp(a.params[u], b.params[u], (size_t)a.units[u].numel * 4));
    free(ip);
    free(d);
    slm_llama_free(&a);
    slm_llama_free(&b);
}

// A hand-made safetensors image: 8-byte length (or `hlen` if non-zero), JSON, data.
static uint8_t *craft(const char *json, size_t data_len, uint64_t hlen, size_t *len) {
    size_t j = strlen(json);
    *len = 8 + j + data_len;
    uint8_t *b = slm_xcalloc(*len, 1);
    uint64_t n = hlen ? hlen : j;
    memcpy(b, &n, 8);
    memcpy(b + 8, json, j);
    return b;
}

static slm_status parse_crafted(const char *json, size_t data_len, uint64_t hlen) {
    size_t len;
    uint8_t *b = craft(json, data_len, hlen, &len);
    slm_st_file f;
    slm_status st = slm_st_parse(b, len, "crafted.safetensors", &f);
    slm_st_close(&f);
    free(b);
    return st;
}

static void test_bad_headers(void) {
    // valid baseline
    CHECK_OK(parse_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"__metadata__\":{\"format\":\"pt\"}}",
                           8, 0));
    slm_status st;
    st = parse_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                       12, 0);
    CHECK_EQ_INT(st, SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "overlaps") && strstr(slm_errmsg(), "crafted.safetensors"));
    st = parse_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, 0);
    CHECK_EQ_INT(st, SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "tensor a") && strstr(slm_errmsg(), "outside the data"));
    st = parse_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1000);
    CHECK_EQ_INT(st, SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "header length 1000 is beyond the file"));
    st = parse_crafted("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0);
    CHECK_EQ_INT(st, SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "unknown") && strstr(slm_errmsg(), "tensor a"));
    st = parse_crafted("{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, 0);
    CHECK_EQ_INT(st, SLM_E_UNSUPPORTED);
    st = parse_crafted("{\"a\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0);
    CHECK_EQ_INT(st, SLM_E_FORMAT); // span != numel * 2
    st = parse_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0);
    CHECK_EQ_INT(st, SLM_E_FORMAT); // hole at the start
    st = parse_crafted("[1,2]", 0, 0);
    CHECK_EQ_INT(st, SLM_E_FORMAT);
    st = parse_crafted("{\"a\":", 0, 0);
    CHECK_EQ_INT(st, SLM_E_FORMAT);
    size_t len;
    uint8_t *b = craft("", 0, 0, &len);
    slm_st_file f;
    CHECK_EQ_INT(slm_st_parse(b, 4, "short", &f), SLM_E_FORMAT);
    slm_st_close(&f);
    free(b);
}

// Rewrites DIR/model.safetensors with every tensor of `a` except `drop` and plus `extra`, using a
// writer independent of the product's (plain fprintf of the JSON header).
static void write_variant(const slm_llama *a, const char *dir, const char *drop, const char *extra,
                          const char *rename_from, int64_t bad_dim) {
    slm_buf h = {0}, data = {0};
    slm_buf_appendf(&h, "{");
    size_t off = 0;
    for (int u = 0; u < a->n_units; u++)
        for (int i = 0; i < a->units[u].n_views; i++) {
            const slm_param_view *v = &a->units[u].views[i];
            if (drop && !strcmp(v->name, drop)) continue;
            const char *nm =
                extra && rename_from && !strcmp(v->name, rename_from) ? extra : v->name;
            int64_t d0 = bad_dim && rename_from && !strcmp(v->name, rename_from) && !extra
                             ? bad_dim
                             : v->shape[0];
            size_t nb = (size_t)v->numel * 4;
            slm_buf_appendf(&h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld", h.len > 1 ? "," : "",
                            nm, (long long)d0);
            if (v->ndim > 1)
                slm_buf_appendf(&h, ",%lld", (long long)(v->shape[1] * v->shape[0] / d0));
            slm_buf_appendf(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + nb);
            slm_buf_append(&data, a->params[u] + v->offset, nb);
            off += nb;
        }
    if (extra && !rename_from) {
        slm_buf_appendf(&h, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                        extra, off, off + 4);
        float z = 0;
        slm_buf_append(&data, &z, 4);
    }
    slm_buf_appendf(&h, "}");
    while (h.len % 8)
        slm_buf_append(&h, " ", 1);
    char *p = slm_path_join(dir, "model.safetensors");
    FILE *f = fopen(p, "wb");
    uint64_t n = h.len;
    fwrite(&n, 8, 1, f);
    fwrite(h.data, 1, h.len, f);
    fwrite(data.data, 1, data.len, f);
    fclose(f);
    free(p);
    slm_buf_free(&h);
    slm_buf_free(&data);
}

static void test_missing_extra_shape(void) {
    slm_llama_config c;
    cfg_small(&c, false);
    slm_llama a;
    CHECK_OK(slm_llama_init(&a, &c, true));
    slm_llama_init_weights(&a, 1);
    char *d = sub("variants");
    CHECK_OK(slm_hf_export(&a, d, SLM_DTYPE_F32, 0)); // config.json
    // the independent writer's full file loads
    write_variant(&a, d, NULL, NULL, NULL, 0);
    CHECK_OK(slm_hf_load(&a, d));
    write_variant(&a, d, "model.layers.1.mlp.up_proj.weight", NULL, NULL, 0);
    CHECK_EQ_INT(slm_hf_load(&a, d), SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "model.layers.1.mlp.up_proj.weight missing"));
    write_variant(&a, d, NULL, "model.layers.7.mlp.up_proj.weight", NULL, 0);
    CHECK_EQ_INT(slm_hf_load(&a, d), SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "unexpected tensor model.layers.7.mlp.up_proj.weight") &&
          strstr(slm_errmsg(), "model.safetensors"));
    write_variant(&a, d, NULL, NULL, "model.layers.0.self_attn.k_proj.weight", 4);
    CHECK_EQ_INT(slm_hf_load(&a, d), SLM_E_FORMAT);
    CHECK_MSG(strstr(slm_errmsg(), "k_proj.weight has shape [4, 32]"), "%s", slm_errmsg());
    // another config
    slm_llama_config c2 = c;
    c2.num_key_value_heads = 4;
    slm_llama b;
    CHECK_OK(slm_llama_init(&b, &c2, true));
    CHECK_EQ_INT(slm_hf_load(&b, d), SLM_E_ARG);
    CHECK(strstr(slm_errmsg(), "config.json"));
    slm_llama_free(&b);
    free(d);
    slm_llama_free(&a);
}

int main(void) {
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_tmp, sizeof g_tmp, "%s/slm_test_st_%d", base, (int)getpid());
    slm_mkdir_p(g_tmp);
    RUN(test_export_load_roundtrip);
    RUN(test_sharded_export);
    RUN(test_bad_headers);
    RUN(test_missing_extra_shape);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return TEST_SUMMARY();
}
