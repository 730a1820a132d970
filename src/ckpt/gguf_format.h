// GGUF v3 file-format constants shared by the GGUF reader (gguf.c) and writer (ckpt/ only; not
// part of the public API). The format (ggml's docs/gguf.md): a little-endian header
//   u32 magic "GGUF", u32 version (3), u64 n_tensors, u64 n_kv,
// then n_kv metadata pairs (gguf string key, u32 value type, value), then n_tensors tensor infos
//   (gguf string name, u32 n_dims, u64 ne[n_dims] fastest-varying first, u32 ggml type,
//    u64 offset relative to the data section, a multiple of the alignment),
// padding to the alignment (key general.alignment, u32, default 32), then the data section.
// A gguf string is u64 length + bytes (no terminator); an array is u32 element type + u64 count +
// the elements (arrays of arrays are allowed by the format; strings inside arrays likewise).
#ifndef SLM_CKPT_GGUF_FORMAT_H
#define SLM_CKPT_GGUF_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLM_GGUF_MAGIC 0x46554747u // "GGUF" read as a little-endian u32
#define SLM_GGUF_VERSION 3u
#define SLM_GGUF_DEFAULT_ALIGNMENT 32u
#define SLM_GGUF_MAX_DIMS 4

// Metadata value types (u32 in the file).
typedef enum slm_gguf_vtype {
    SLM_GGUF_UINT8 = 0,
    SLM_GGUF_INT8 = 1,
    SLM_GGUF_UINT16 = 2,
    SLM_GGUF_INT16 = 3,
    SLM_GGUF_UINT32 = 4,
    SLM_GGUF_INT32 = 5,
    SLM_GGUF_FLOAT32 = 6,
    SLM_GGUF_BOOL = 7,
    SLM_GGUF_STRING = 8,
    SLM_GGUF_ARRAY = 9,
    SLM_GGUF_UINT64 = 10,
    SLM_GGUF_INT64 = 11,
    SLM_GGUF_FLOAT64 = 12,
    SLM_GGUF_VTYPE_COUNT = 13,
} slm_gguf_vtype;

// ggml tensor types (u32 in the file) that shardlm reads; the numbers are ggml's. Types with no
// entry here (Q5_0, Q5_1, Q8_1, Q2_K, Q3_K, Q8_K, IQ*, ...) are refused by the reader by number.
typedef enum slm_gguf_ttype {
    SLM_GGML_F32 = 0,
    SLM_GGML_F16 = 1,
    SLM_GGML_Q4_0 = 2,
    SLM_GGML_Q4_1 = 3,
    SLM_GGML_Q8_0 = 8,
    SLM_GGML_Q4_K = 12,
    SLM_GGML_Q5_K = 13,
    SLM_GGML_Q6_K = 14,
    SLM_GGML_BF16 = 30,
} slm_gguf_ttype;

// Elements per block (QK) and bytes per block of each type above:
//   F32 1/4, F16 1/2, BF16 1/2,
//   Q8_0 32/34  (f16 d, i8 q[32]),
//   Q4_0 32/18  (f16 d, u8 qs[16]: low nibbles = elements 0..15, high = 16..31; x = (q - 8) d),
//   Q4_1 32/20  (f16 d, f16 m, u8 qs[16]; x = q d + m),
//   Q4_K 256/144 (f16 d, f16 dmin, u8 scales[12]: 8 six-bit scales + 8 six-bit mins, u8 qs[128]),
//   Q5_K 256/176 (f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]),
//   Q6_K 256/210 (u8 ql[128], u8 qh[64], i8 scales[16], f16 d).
#define SLM_GGML_QK 32
#define SLM_GGML_QK_K 256
#define SLM_GGML_K_SCALE_SIZE 12

// Block size (elements) and block bytes of ggml type t; 0 for a type shardlm does not read.
static inline int slm_ggml_block_size(uint32_t t) {
    switch (t) {
    case SLM_GGML_F32:
    case SLM_GGML_F16:
    case SLM_GGML_BF16:
        return 1;
    case SLM_GGML_Q8_0:
    case SLM_GGML_Q4_0:
    case SLM_GGML_Q4_1:
        return SLM_GGML_QK;
    case SLM_GGML_Q4_K:
    case SLM_GGML_Q5_K:
    case SLM_GGML_Q6_K:
        return SLM_GGML_QK_K;
    default:
        return 0;
    }
}
static inline int slm_ggml_type_size(uint32_t t) {
    switch (t) {
    case SLM_GGML_F32:
        return 4;
    case SLM_GGML_F16:
    case SLM_GGML_BF16:
        return 2;
    case SLM_GGML_Q8_0:
        return 2 + SLM_GGML_QK;
    case SLM_GGML_Q4_0:
        return 2 + SLM_GGML_QK / 2;
    case SLM_GGML_Q4_1:
        return 4 + SLM_GGML_QK / 2;
    case SLM_GGML_Q4_K:
        return 4 + SLM_GGML_K_SCALE_SIZE + SLM_GGML_QK_K / 2;
    case SLM_GGML_Q5_K:
        return 4 + SLM_GGML_K_SCALE_SIZE + SLM_GGML_QK_K / 8 + SLM_GGML_QK_K / 2;
    case SLM_GGML_Q6_K:
        return SLM_GGML_QK_K / 2 + SLM_GGML_QK_K / 4 + SLM_GGML_QK_K / 16 + 2;
    default:
        return 0;
    }
}

// Metadata keys (llama architecture; "%s" = general.architecture's value where it applies).
#define SLM_GGUF_KEY_ARCH "general.architecture"
#define SLM_GGUF_KEY_ALIGNMENT "general.alignment"
#define SLM_GGUF_KEY_NAME "general.name"
#define SLM_GGUF_KEY_FILE_TYPE "general.file_type"
#define SLM_GGUF_KEY_VOCAB_SIZE "llama.vocab_size"
#define SLM_GGUF_KEY_CONTEXT_LENGTH "llama.context_length"
#define SLM_GGUF_KEY_EMBEDDING_LENGTH "llama.embedding_length"
#define SLM_GGUF_KEY_BLOCK_COUNT "llama.block_count"
#define SLM_GGUF_KEY_FEED_FORWARD_LENGTH "llama.feed_forward_length"
#define SLM_GGUF_KEY_HEAD_COUNT "llama.attention.head_count"
#define SLM_GGUF_KEY_HEAD_COUNT_KV "llama.attention.head_count_kv"
#define SLM_GGUF_KEY_RMS_EPS "llama.attention.layer_norm_rms_epsilon"
#define SLM_GGUF_KEY_KEY_LENGTH "llama.attention.key_length"
#define SLM_GGUF_KEY_VALUE_LENGTH "llama.attention.value_length"
#define SLM_GGUF_KEY_ROPE_DIM "llama.rope.dimension_count"
#define SLM_GGUF_KEY_ROPE_BASE "llama.rope.freq_base"
#define SLM_GGUF_KEY_ROPE_SCALING_TYPE "llama.rope.scaling.type"
#define SLM_GGUF_KEY_ROPE_SCALING_FACTOR "llama.rope.scaling.factor"
#define SLM_GGUF_KEY_ROPE_SCALING_ORIG_CTX "llama.rope.scaling.original_context_length"
#define SLM_GGUF_KEY_ROPE_SCALE_LINEAR "llama.rope.scale_linear"
#define SLM_GGUF_KEY_EXPERT_COUNT "llama.expert_count"
#define SLM_GGUF_KEY_TOK_MODEL "tokenizer.ggml.model"
#define SLM_GGUF_KEY_TOK_PRE "tokenizer.ggml.pre"
#define SLM_GGUF_KEY_TOK_TOKENS "tokenizer.ggml.tokens"
#define SLM_GGUF_KEY_TOK_SCORES "tokenizer.ggml.scores"
#define SLM_GGUF_KEY_TOK_TYPES "tokenizer.ggml.token_type"
#define SLM_GGUF_KEY_TOK_MERGES "tokenizer.ggml.merges"
#define SLM_GGUF_KEY_TOK_BOS "tokenizer.ggml.bos_token_id"
#define SLM_GGUF_KEY_TOK_EOS "tokenizer.ggml.eos_token_id"
#define SLM_GGUF_KEY_TOK_UNK "tokenizer.ggml.unknown_token_id"
#define SLM_GGUF_KEY_TOK_PAD "tokenizer.ggml.padding_token_id"
#define SLM_GGUF_KEY_TOK_ADD_BOS "tokenizer.ggml.add_bos_token"
#define SLM_GGUF_KEY_TOK_ADD_EOS "tokenizer.ggml.add_eos_token"
#define SLM_GGUF_KEY_TOK_ADD_SPACE_PREFIX "tokenizer.ggml.add_space_prefix"
#define SLM_GGUF_KEY_CHAT_TEMPLATE "tokenizer.chat_template"

// Token types (tokenizer.ggml.token_type, i32 per token).
enum {
    SLM_GGUF_TOKEN_NORMAL = 1,
    SLM_GGUF_TOKEN_UNKNOWN = 2,
    SLM_GGUF_TOKEN_CONTROL = 3,
    SLM_GGUF_TOKEN_USER_DEFINED = 4,
    SLM_GGUF_TOKEN_UNUSED = 5,
    SLM_GGUF_TOKEN_BYTE = 6,
};

// Tensor names (llama.cpp's): per block "blk.%d.<name>.weight".
#define SLM_GGUF_T_TOKEN_EMBD "token_embd.weight"
#define SLM_GGUF_T_OUTPUT_NORM "output_norm.weight"
#define SLM_GGUF_T_OUTPUT "output.weight"
#define SLM_GGUF_T_ATTN_NORM "attn_norm"
#define SLM_GGUF_T_ATTN_Q "attn_q"
#define SLM_GGUF_T_ATTN_K "attn_k"
#define SLM_GGUF_T_ATTN_V "attn_v"
#define SLM_GGUF_T_ATTN_OUT "attn_output"
#define SLM_GGUF_T_FFN_NORM "ffn_norm"
#define SLM_GGUF_T_FFN_GATE "ffn_gate"
#define SLM_GGUF_T_FFN_UP "ffn_up"
#define SLM_GGUF_T_FFN_DOWN "ffn_down"
#define SLM_GGUF_T_ROPE_FREQS "rope_freqs.weight"

// The GGUF tensor name of HF view `hf` ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight") into out[cap], and in *rope_heads the head count whose rows llama.cpp's
// converter permutes for its RoPE layout (q: attention heads, k: KV heads; 0: none). False for
// a name llama.cpp's llama architecture has no tensor for. (gguf_llama.c; the reader and the
// writer share it.)
struct slm_llama_config;
bool slm_gguf_name_of(const char *hf, const struct slm_llama_config *c, char *out, size_t cap,
                      int *rope_heads);

#endif
