// `ckpt export --gguf`: a loaded model, its tokenizer and an optional chat template as one GGUF v3
// file for llama.cpp (architecture "llama"), written to a temp sibling and published atomically.
// Layout: ggml's docs/gguf.md (constants in gguf_format.h); tensor names, the Q/K row order and
// the metadata keys as llama.cpp's convert_hf_to_gguf.py writes them. Contract in ckpt.h.
#include "ckpt/ckpt_internal.h"
#include "ckpt/gguf_format.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// general.file_type values (llama.cpp's llama_ftype) of the four export types.
enum { FTYPE_ALL_F32 = 0, FTYPE_MOSTLY_F16 = 1, FTYPE_MOSTLY_Q8_0 = 7, FTYPE_MOSTLY_BF16 = 32 };

slm_status slm_gguf_parse_type(const char *s, uint32_t *out) {
    static const struct {
        const char *name;
        uint32_t t;
    } k[] = {{"f32", SLM_GGML_F32},  {"fp32", SLM_GGML_F32},  {"f16", SLM_GGML_F16},
             {"fp16", SLM_GGML_F16}, {"bf16", SLM_GGML_BF16}, {"q8_0", SLM_GGML_Q8_0}};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++)
        if (!strcasecmp(s, k[i].name)) {
            *out = k[i].t;
            return SLM_OK;
        }
    return slm_fail(SLM_E_ARG, "--type \"%s\": expected f32, f16, bf16 or q8_0", s);
}

// --- Metadata --------------------------------------------------------------------------------

typedef struct kvbuf {
    slm_buf b;
    uint64_t n; // key/value pairs written
} kvbuf;

static void put32(slm_buf *b, uint32_t v) {
    uint8_t p[4];
    slm_put_le32(p, v);
    slm_buf_append(b, p, 4);
}
static void put64(slm_buf *b, uint64_t v) {
    uint8_t p[8];
    slm_put_le64(p, v);
    slm_buf_append(b, p, 8);
}
static void putf32(slm_buf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put32(b, u);
}
static void putstr(slm_buf *b, const char *s) {
    size_t n = strlen(s);
    put64(b, n);
    slm_buf_append(b, s, n);
}
static void key(kvbuf *kv, const char *k, uint32_t vtype) {
    putstr(&kv->b, k);
    put32(&kv->b, vtype);
    kv->n++;
}
static void kv_u32(kvbuf *kv, const char *k, uint32_t v) {
    key(kv, k, SLM_GGUF_UINT32);
    put32(&kv->b, v);
}
static void kv_f32(kvbuf *kv, const char *k, float v) {
    key(kv, k, SLM_GGUF_FLOAT32);
    putf32(&kv->b, v);
}
static void kv_bool(kvbuf *kv, const char *k, bool v) {
    key(kv, k, SLM_GGUF_BOOL);
    uint8_t c = v;
    slm_buf_append(&kv->b, &c, 1);
}
static void kv_str(kvbuf *kv, const char *k, const char *v) {
    key(kv, k, SLM_GGUF_STRING);
    putstr(&kv->b, v);
}
static void kv_array(kvbuf *kv, const char *k, uint32_t elem, uint64_t n) {
    key(kv, k, SLM_GGUF_ARRAY);
    put32(&kv->b, elem);
    put64(&kv->b, n);
}

// The tokenizer keys. Ids past the tokenizer's vocabulary (a model vocab padded beyond it) are
// "[PAD<id>]" pieces of type unused, as llama.cpp's converter writes them.
static slm_status tokenizer_kvs(kvbuf *kv, const slm_tokenizer *t, int32_t V, const char *path) {
    bool spm = slm_tokenizer_type(t) == SLM_TOK_SPM_BPE;
    int32_t tv = slm_tokenizer_vocab_size(t);
    if (tv > V)
        return slm_fail(SLM_E_ARG,
                        "export: tokenizer %s has %d ids but the model's vocabulary is %d", path,
                        tv, V);
    const char *pre = spm ? NULL : slm_tokenizer_pre_name(t);
    if (!spm && !pre)
        return slm_fail(SLM_E_UNSUPPORTED,
                        "export --gguf: tokenizer %s pre-tokenizes with the regex \"%.200s\", "
                        "which has no llama.cpp tokenizer.ggml.pre name shardlm knows (gpt-2, "
                        "smollm, llama-bpe)",
                        path, slm_tokenizer_pretok_regex(t));
    kv_str(kv, SLM_GGUF_KEY_TOK_MODEL, spm ? "llama" : "gpt2");
    if (pre) kv_str(kv, SLM_GGUF_KEY_TOK_PRE, pre);
    kv_array(kv, SLM_GGUF_KEY_TOK_TOKENS, SLM_GGUF_STRING, (uint64_t)V);
    char pad[32];
    for (int32_t i = 0; i < V; i++) {
        const char *p = i < tv ? slm_tokenizer_piece(t, i) : NULL;
        bool gap = !p || (!p[0] && slm_tokenizer_token_kind(t, i) == SLM_GGUF_TOKEN_UNUSED);
        if (gap) snprintf(pad, sizeof pad, "[PAD%d]", i);
        putstr(&kv->b, gap ? pad : p);
    }
    if (spm) {
        kv_array(kv, SLM_GGUF_KEY_TOK_SCORES, SLM_GGUF_FLOAT32, (uint64_t)V);
        for (int32_t i = 0; i < V; i++)
            putf32(&kv->b, i < tv ? slm_tokenizer_score(t, i) : -1000.0f);
    }
    kv_array(kv, SLM_GGUF_KEY_TOK_TYPES, SLM_GGUF_INT32, (uint64_t)V);
    for (int32_t i = 0; i < V; i++)
        put32(&kv->b, (uint32_t)(i < tv ? slm_tokenizer_token_kind(t, i) : SLM_GGUF_TOKEN_UNUSED));
    if (!spm) {
        int32_t nm = slm_tokenizer_n_merges(t);
        kv_array(kv, SLM_GGUF_KEY_TOK_MERGES, SLM_GGUF_STRING, (uint64_t)nm);
        slm_buf s = {0};
        for (int32_t r = 0; r < nm; r++) {
            const char *a, *b;
            slm_tokenizer_merge(t, r, &a, &b);
            s.len = 0;
            slm_buf_appendf(&s, "%s %s", a, b);
            putstr(&kv->b, s.data);
        }
        slm_buf_free(&s);
    }
    int32_t ids[4] = {slm_tokenizer_bos_id(t), slm_tokenizer_eos_id(t), slm_tokenizer_unk_id(t),
                      slm_tokenizer_pad_id(t)};
    const char *keys[4] = {SLM_GGUF_KEY_TOK_BOS, SLM_GGUF_KEY_TOK_EOS, SLM_GGUF_KEY_TOK_UNK,
                           SLM_GGUF_KEY_TOK_PAD};
    for (int i = 0; i < 4; i++)
        if (ids[i] >= 0) kv_u32(kv, keys[i], (uint32_t)ids[i]);
    // shardlm generate / eval prepend BOS when the tokenizer has one, and never append EOS
    kv_bool(kv, SLM_GGUF_KEY_TOK_ADD_BOS, slm_tokenizer_add_bos(t));
    kv_bool(kv, SLM_GGUF_KEY_TOK_ADD_EOS, false);
    if (spm) kv_bool(kv, SLM_GGUF_KEY_TOK_ADD_SPACE_PREFIX, slm_tokenizer_adds_space_prefix(t));
    // GGUF has no key for it: llama.cpp (and transformers' GGUF tokenizer) keep every space
    if (slm_tokenizer_removes_extra_spaces(t))
        slm_warn("export --gguf: tokenizer %s collapses runs of spaces "
                 "(normalizer remove_extra_whitespaces), which a GGUF cannot record: llama.cpp "
                 "will encode text with repeated, leading or trailing spaces into other ids "
                 "than shardlm",
                 path);
    return SLM_OK;
}

// --- Tensors ---------------------------------------------------------------------------------

// One output tensor: a view of the model, its GGUF name and type, and the head count whose rows
// are reordered for llama.cpp's RoPE (0: none).
typedef struct gt {
    char name[64];
    const float *src; // row-major [rows, cols] (cols = ne0), memory of device `dev`
    slm_device *dev;  // the model's device; NULL (the CPU device: host memory) for rope_freqs
    int64_t rows, cols;
    int ndim;
    uint32_t type;
    int permute_heads;
    uint64_t offset, bytes;
} gt;

// Bytes of one row of `cols` elements in `type` (cols a multiple of the block size).
static uint64_t row_bytes(uint32_t type, int64_t cols) {
    return (uint64_t)(cols / slm_ggml_block_size(type)) * (uint64_t)slm_ggml_type_size(type);
}

bool slm_gguf_quant_q8_0(const float *x, int64_t n, uint8_t *out) {
    for (int64_t b = 0; b < n; b += SLM_GGML_QK, out += 2 + SLM_GGML_QK) {
        float amax = 0.0f;
        for (int j = 0; j < SLM_GGML_QK; j++)
            amax = fmaxf(amax, fabsf(x[b + j]));
        uint16_t dh = slm_f32_to_f16_1(amax / 127.0f);
        // up to the next fp16 while 127 d < max|x| (exact: 11 x 7 significant bits): then
        // |x / d| <= 127, no q is clamped and |x - d q| <= d / 2 also for subnormal scales
        while (slm_f16_to_f32_1(dh) * 127.0f < amax && dh < 0x7C00)
            dh++;
        float d = slm_f16_to_f32_1(dh);
        if (!isfinite(d)) return false;
        slm_put_le16(out, dh);
        for (int j = 0; j < SLM_GGML_QK; j++) {
            float q = d > 0.0f ? roundf(x[b + j] / d) : 0.0f;
            q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
            out[2 + j] = (uint8_t)(int8_t)q;
        }
    }
    return true;
}

// Converts one row of n fp32 values to `type` into out[row_bytes(type, n)]; false when a q8_0
// block's scale overflows fp16.
static bool convert_row(uint32_t type, const float *x, int64_t n, uint8_t *out) {
    switch (type) {
    case SLM_GGML_F32:
        memcpy(out, x, (size_t)n * 4);
        break;
    case SLM_GGML_F16:
        for (int64_t i = 0; i < n; i++)
            slm_put_le16(out + 2 * i, slm_f32_to_f16_1(x[i]));
        break;
    case SLM_GGML_BF16:
        for (int64_t i = 0; i < n; i++)
            slm_put_le16(out + 2 * i, slm_f32_to_bf16_1(x[i]));
        break;
    default:
        return slm_gguf_quant_q8_0(x, n, out);
    }
    return true;
}

// Row r of the output for a Q or K projection of `heads` heads of D rows: llama.cpp's converter
// stores each head's rows interleaved (row 2i + s of the head is HF row s D/2 + i), its RoPE
// rotating adjacent pairs where HF's rotate_half pairs i with i + D/2.
static int64_t src_row(const gt *t, int64_t r) {
    if (!t->permute_heads) return r;
    int64_t D = t->rows / t->permute_heads, h = r / D, j = r % D;
    return h * D + (j % 2) * (D / 2) + j / 2;
}

// --- File ------------------------------------------------------------------------------------

static uint64_t align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

// Writes the padding bytes up to the next multiple of the alignment after `pos`.
static bool write_pad(FILE *fp, uint64_t pos) {
    static const uint8_t zero[SLM_GGUF_DEFAULT_ALIGNMENT];
    size_t n = (size_t)(align_up(pos, SLM_GGUF_DEFAULT_ALIGNMENT) - pos);
    return fwrite(zero, 1, n, fp) == n;
}

// "<dir>/.<base>.export-tmp.<pid>" beside path.
static char *tmp_sibling(const char *path) {
    const char *slash = strrchr(path, '/');
    slm_buf b = {0};
    if (slash) slm_buf_appendf(&b, "%.*s/", (int)(slash - path), path);
    slm_buf_appendf(&b, ".%s.export-tmp.%" PRId64, slash ? slash + 1 : path, (int64_t)getpid());
    return b.data;
}

// Writes header + tensors to fp; *written counts the tensor bytes for the progress line.
static slm_status write_file(FILE *fp, const char *tmp, const slm_buf *hdr, const gt *ts, int n,
                             slm_progress *pg) {
    bool ok = fwrite(hdr->data, 1, hdr->len, fp) == hdr->len && write_pad(fp, hdr->len);
    int64_t maxc = 1;
    for (int i = 0; i < n; i++)
        maxc = ts[i].cols > maxc ? ts[i].cols : maxc;
    uint8_t *row = slm_xmalloc((size_t)maxc * 4);
    float *host = NULL; // one tensor at a time, copied from its device (rows are permuted)
    int64_t cap = 0;
    double done = 0;
    for (int i = 0; ok && i < n; i++) {
        const gt *t = &ts[i];
        uint64_t rb = row_bytes(t->type, t->cols);
        int64_t numel = t->rows * t->cols;
        if (numel > cap) {
            free(host);
            host = slm_xmalloc((size_t)numel * sizeof(float));
            cap = numel;
        }
        slm_dev_copy(t->dev, host, t->src, (size_t)numel * sizeof(float), SLM_D2H);
        for (int64_t r = 0; ok && r < t->rows; r++) {
            if (!convert_row(t->type, host + src_row(t, r) * t->cols, t->cols, row)) {
                free(row);
                free(host);
                return slm_fail(SLM_E_ARG,
                                "export --gguf: tensor %s row %" PRId64 ": a block's max |x| "
                                "exceeds q8_0's range (127 x 65504, the largest fp16 scale); "
                                "expected --type f32 or bf16 for such weights",
                                t->name, r);
            }
            ok = fwrite(row, 1, (size_t)rb, fp) == rb;
        }
        ok = ok && write_pad(fp, t->offset + t->bytes);
        done += (double)t->bytes;
        slm_progress_update(pg, done, "%.0f of %.0f MB", done / 1e6, pg->total / 1e6);
    }
    free(row);
    free(host);
    int err = errno;
    if (ok && (fflush(fp) != 0 || fsync(fileno(fp)) != 0)) {
        ok = false;
        err = errno;
    }
    if (!ok) return slm_fail(SLM_E_IO, "export: %s: write failed: %s", tmp, strerror(err));
    return SLM_OK;
}

// Moves tmp to out: rename when overwriting, else renameat2(RENAME_NOREPLACE) (link + unlink
// where the file system lacks it) so that an OUT created meanwhile is never replaced.
static slm_status publish(const char *tmp, const char *out, bool overwrite) {
    int rc =
        overwrite ? rename(tmp, out) : renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_NOREPLACE);
    if (rc != 0 && !overwrite && (errno == EINVAL || errno == ENOSYS)) {
        rc = link(tmp, out);
        if (rc == 0) unlink(tmp);
    }
    if (rc != 0) {
        int e = errno;
        if (e == EEXIST)
            return slm_fail(SLM_E_IO, "export: --gguf %s exists; pass --overwrite to replace it",
                            out);
        return slm_fail(SLM_E_IO, "export: cannot move %s to %s: %s", tmp, out, strerror(e));
    }
    char *parent = slm_path_parent(out);
    slm_status st = slm_fsync_dir(parent);
    free(parent);
    return st;
}

// The output path and options, before anything is read: a file name in an existing directory,
// not a directory, existing only with --overwrite; a tokenizer; a supported type.
static slm_status check_export_args(const char *out_path, const slm_gguf_export_opts *o) {
    struct stat sb;
    size_t ol = strlen(out_path);
    if (!ol || out_path[ol - 1] == '/')
        return slm_fail(SLM_E_ARG, "export: --gguf \"%s\": expected a file name", out_path);
    char *out_dir = slm_path_parent(out_path);
    slm_status dst = slm_is_dir(out_dir)
                         ? SLM_OK
                         : slm_fail(SLM_E_ARG,
                                    "export: --gguf %s: the directory %s does not exist (or is "
                                    "not a directory); create it first",
                                    out_path, out_dir);
    free(out_dir);
    if (dst) return dst;
    if (stat(out_path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return slm_fail(SLM_E_ARG, "export: --gguf %s is a directory; expected a file name",
                            out_path);
        if (!o->overwrite)
            return slm_fail(SLM_E_IO, "export: --gguf %s exists; pass --overwrite to replace it",
                            out_path);
    }
    if (!o->tokenizer_path)
        return slm_fail(SLM_E_ARG,
                        "export --gguf: the model directory has no tokenizer file; a GGUF "
                        "carries its tokenizer (llama.cpp loads none without it)");
    if (o->type != SLM_GGML_F32 && o->type != SLM_GGML_F16 && o->type != SLM_GGML_BF16 &&
        o->type != SLM_GGML_Q8_0)
        return slm_fail(SLM_E_ARG, "export --gguf: type %u is not f32, f16, bf16 or q8_0", o->type);
    return SLM_OK;
}

// The tensor list ts (room for every view + 1): the root's embedding first, the blocks, then
// the final norm and lm_head, each with its llama.cpp name and type (norms f32; q8_0 rows not a
// multiple of 32 fall back to f16, as llama.cpp's converter does). *n receives the count.
static slm_status collect_tensors(const slm_llama *m, uint32_t type, gt *ts, int *n) {
    int n_fallback = 0;
    *n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int u = 0; u < m->n_units; u++)
            for (int i = 0; i < m->units[u].n_views; i++) {
                const slm_param_view *v = &m->units[u].views[i];
                bool emb = !strcmp(v->name, "model.embed_tokens.weight");
                if ((pass == 0) != emb) continue;
                gt *t = &ts[*n];
                if (!slm_gguf_name_of(v->name, &m->cfg, t->name, sizeof t->name, &t->permute_heads))
                    return slm_fail(SLM_E_UNSUPPORTED,
                                    "export --gguf: tensor %s has no llama.cpp name", v->name);
                t->src = m->params[u] + v->offset;
                t->dev = m->dev;
                t->ndim = v->ndim;
                t->rows = v->ndim == 2 ? v->shape[0] : 1;
                t->cols = v->ndim == 2 ? v->shape[1] : v->shape[0];
                t->type = v->ndim == 1 ? SLM_GGML_F32 : type; // norms stay f32
                if (t->type == SLM_GGML_Q8_0 && t->cols % SLM_GGML_QK) {
                    t->type = SLM_GGML_F16; // as llama.cpp's converter falls back
                    n_fallback++;
                }
                t->bytes = row_bytes(t->type, t->cols) * (uint64_t)t->rows;
                (*n)++;
            }
    if (n_fallback)
        slm_warn("export --gguf: %d tensor(s) with rows not a multiple of 32 written as f16 "
                 "instead of q8_0",
                 n_fallback);
    return SLM_OK;
}

// llama 3 scaling: llama.cpp reads per-frequency divisors from rope_freqs.weight. Fills tensor
// t and returns its data (owned by the caller).
static float *rope_freqs_tensor(const slm_llama_config *c, gt *t) {
    int D = slm_llama_head_dim(c);
    double *scaled = slm_xmalloc((size_t)D / 2 * sizeof *scaled);
    double *plain = slm_xmalloc((size_t)D / 2 * sizeof *plain);
    slm_llama_config pc = *c;
    pc.rope_type = SLM_ROPE_DEFAULT;
    slm_llama_rope_inv_freq(c, D, scaled);
    slm_llama_rope_inv_freq(&pc, D, plain);
    float *freqs = slm_xmalloc((size_t)D / 2 * sizeof *freqs);
    for (int i = 0; i < D / 2; i++)
        freqs[i] = (float)(plain[i] / scaled[i]);
    free(scaled);
    free(plain);
    snprintf(t->name, sizeof t->name, SLM_GGUF_T_ROPE_FREQS);
    t->src = freqs;
    t->dev = NULL; // host memory
    t->ndim = 1;
    t->rows = 1;
    t->cols = D / 2;
    t->type = SLM_GGML_F32;
    t->bytes = (uint64_t)D / 2 * 4;
    return freqs;
}

// The llama architecture's metadata, the tokenizer's and the chat template into kv.
static slm_status model_kvs(kvbuf *kv, const slm_llama_config *c, const slm_tokenizer *tok,
                            const slm_gguf_export_opts *o) {
    int D = slm_llama_head_dim(c);
    kv_str(kv, SLM_GGUF_KEY_ARCH, "llama");
    kv_str(kv, SLM_GGUF_KEY_NAME, o->name ? o->name : "shardlm export");
    kv_u32(kv, SLM_GGUF_KEY_ALIGNMENT, SLM_GGUF_DEFAULT_ALIGNMENT);
    uint32_t ft = o->type == SLM_GGML_F32    ? FTYPE_ALL_F32
                  : o->type == SLM_GGML_F16  ? FTYPE_MOSTLY_F16
                  : o->type == SLM_GGML_BF16 ? FTYPE_MOSTLY_BF16
                                             : FTYPE_MOSTLY_Q8_0;
    kv_u32(kv, SLM_GGUF_KEY_FILE_TYPE, ft);
    kv_u32(kv, "general.quantization_version", 2); // ggml's GGML_QNT_VERSION
    kv_u32(kv, SLM_GGUF_KEY_VOCAB_SIZE, (uint32_t)c->vocab_size);
    kv_u32(kv, SLM_GGUF_KEY_CONTEXT_LENGTH, (uint32_t)c->max_position_embeddings);
    kv_u32(kv, SLM_GGUF_KEY_EMBEDDING_LENGTH, (uint32_t)c->hidden_size);
    kv_u32(kv, SLM_GGUF_KEY_BLOCK_COUNT, (uint32_t)c->num_hidden_layers);
    kv_u32(kv, SLM_GGUF_KEY_FEED_FORWARD_LENGTH, (uint32_t)c->intermediate_size);
    kv_u32(kv, SLM_GGUF_KEY_HEAD_COUNT, (uint32_t)c->num_attention_heads);
    kv_u32(kv, SLM_GGUF_KEY_HEAD_COUNT_KV, (uint32_t)c->num_key_value_heads);
    kv_u32(kv, SLM_GGUF_KEY_ROPE_DIM, (uint32_t)D);
    if (D != c->hidden_size / c->num_attention_heads) {
        kv_u32(kv, SLM_GGUF_KEY_KEY_LENGTH, (uint32_t)D);
        kv_u32(kv, SLM_GGUF_KEY_VALUE_LENGTH, (uint32_t)D);
    }
    kv_f32(kv, SLM_GGUF_KEY_ROPE_BASE, c->rope_theta);
    kv_f32(kv, SLM_GGUF_KEY_RMS_EPS, c->rms_norm_eps);
    if (c->rope_type == SLM_ROPE_LINEAR) {
        kv_str(kv, SLM_GGUF_KEY_ROPE_SCALING_TYPE, "linear");
        kv_f32(kv, SLM_GGUF_KEY_ROPE_SCALING_FACTOR, c->rope_factor);
    }
    slm_status st = tokenizer_kvs(kv, tok, c->vocab_size, o->tokenizer_path);
    if (!st && o->chat_template) kv_str(kv, SLM_GGUF_KEY_CHAT_TEMPLATE, o->chat_template);
    return st;
}

// The header: magic, version, counts, the metadata, then each tensor's info; sets each
// tensor's offset, relative to the aligned end of the header.
static void build_header(slm_buf *hdr, const kvbuf *kv, gt *ts, int n) {
    put32(hdr, SLM_GGUF_MAGIC);
    put32(hdr, SLM_GGUF_VERSION);
    put64(hdr, (uint64_t)n);
    put64(hdr, kv->n);
    slm_buf_append(hdr, kv->b.data, kv->b.len);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        gt *t = &ts[i];
        putstr(hdr, t->name);
        put32(hdr, (uint32_t)t->ndim);
        put64(hdr, (uint64_t)t->cols); // ne0: the contiguous dimension first
        if (t->ndim == 2) put64(hdr, (uint64_t)t->rows);
        put32(hdr, t->type);
        put64(hdr, off);
        t->offset = off;
        off = align_up(off + t->bytes, SLM_GGUF_DEFAULT_ALIGNMENT);
    }
    for (int i = 0; i < n; i++)
        ts[i].offset += align_up(hdr->len, SLM_GGUF_DEFAULT_ALIGNMENT);
}

// Writes header and tensors to a temp sibling of out_path (removed on failure and by a signal's
// exit), then renames it into place.
static slm_status write_and_publish(const char *out_path, bool overwrite, const slm_buf *hdr,
                                    const gt *ts, int n) {
    char *tmp = tmp_sibling(out_path);
    FILE *fp = fopen(tmp, "wb");
    slm_status st = SLM_OK;
    if (!fp) st = slm_fail(SLM_E_IO, "export: cannot create %s: %s", tmp, strerror(errno));
    int tslot = fp ? slm_tmp_track(tmp) : -1; // removed by a signal's exit too (tools/shardlm.c)
    if (!st) {
        double total = 0;
        for (int i = 0; i < n; i++)
            total += (double)ts[i].bytes;
        slm_progress pg;
        slm_progress_begin(&pg, "ckpt export", 0, total);
        st = write_file(fp, tmp, hdr, ts, n, &pg);
        if (fclose(fp) != 0 && !st)
            st = slm_fail(SLM_E_IO, "export: %s: close failed: %s", tmp, strerror(errno));
        if (!st) st = publish(tmp, out_path, overwrite);
        if (st)
            slm_progress_abandon(&pg);
        else
            slm_progress_end(&pg, total, "%.0f MB, %d tensors", total / 1e6, n);
    }
    slm_tmp_untrack(tslot);
    unlink(tmp); // gone after a rename; removes the temp file of a failed export
    free(tmp);
    return st;
}

slm_status slm_gguf_export(const slm_llama *m, const char *out_path,
                           const slm_gguf_export_opts *o) {
    slm_status st = check_export_args(out_path, o);
    if (st) return st;
    slm_tokenizer *tok = NULL;
    if ((st = slm_tokenizer_load(o->tokenizer_path, &tok))) return st;
    int n_views = 0, n = 0;
    for (int u = 0; u < m->n_units; u++)
        n_views += m->units[u].n_views;
    gt *ts = slm_xcalloc((size_t)n_views + 1, sizeof *ts);
    float *freqs = NULL;
    kvbuf kv = {0};
    slm_buf hdr = {0};
    st = collect_tensors(m, o->type, ts, &n);
    if (!st && m->cfg.rope_type == SLM_ROPE_LLAMA3) freqs = rope_freqs_tensor(&m->cfg, &ts[n++]);
    if (!st) st = model_kvs(&kv, &m->cfg, tok, o);
    slm_tokenizer_free(tok);
    if (!st) build_header(&hdr, &kv, ts, n);
    slm_buf_free(&kv.b);
    if (!st) st = write_and_publish(out_path, o->overwrite, &hdr, ts, n);
    slm_buf_free(&hdr);
    free(ts);
    free(freqs);
    return st;
}
