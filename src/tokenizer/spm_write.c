// A SentencePiece ModelProto (tokenizer.model) written from a vocabulary given as arrays: the
// `llama` tokenizer of a GGUF file (tokens, scores, token types, special ids), which llama.cpp
// encodes as SentencePiece BPE (highest-scoring merge first, byte fallback when the vocabulary
// has <0xXX> byte pieces). The output is what spm.c reads, so a GGUF import and a
// tokenizer.model from Hugging Face share one encoder, and it is a valid model for SentencePiece
// itself (fields of sentencepiece_model.proto; shardlm's own additions live in ModelProto's
// extension range, which SentencePiece keeps as unknown fields).
#include "tokenizer/spm.h"

#include <stdlib.h>
#include <string.h>

static void put_varint(slm_buf *b, uint64_t v) {
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    slm_buf_append(b, t, n);
}

// A varint field (bool, enum, int32: a negative int32 is its 64-bit two's complement, 10 bytes).
static void put_int(slm_buf *b, uint32_t field, int64_t v) {
    put_varint(b, (uint64_t)field << 3);
    put_varint(b, (uint64_t)v);
}

// A length-delimited field (string, bytes, embedded message).
static void put_bytes(slm_buf *b, uint32_t field, const void *d, size_t n) {
    put_varint(b, (uint64_t)field << 3 | 2);
    put_varint(b, n);
    slm_buf_append(b, d, n);
}

static void put_float(slm_buf *b, uint32_t field, float x) {
    uint32_t u;
    uint8_t t[4];
    memcpy(&u, &x, 4);
    slm_put_le32(t, u);
    put_varint(b, (uint64_t)field << 3 | 5);
    slm_buf_append(b, t, 4);
}

slm_status slm_tokenizer_vocab_spm(const slm_tok_vocab *v, const char *what, slm_buf *out) {
    if (!v->scores || !v->token_type || v->n_tokens <= 0)
        return slm_fail(SLM_E_ARG, "%s: a SentencePiece vocabulary needs tokens, scores and types",
                        what);
    const int32_t ids[4] = {v->unk_id, v->bos_id, v->eos_id, v->pad_id};
    for (int i = 0; i < 4; i++)
        if (ids[i] < -1 || ids[i] >= v->n_tokens)
            return slm_fail(SLM_E_FORMAT,
                            "%s: special token id %d is outside the vocabulary [0, %d)", what,
                            ids[i], v->n_tokens);
    bool byte_fallback = false;
    size_t start = out->len;
    slm_buf m = {0};
    for (int32_t i = 0; i < v->n_tokens; i++) {
        m.len = 0;
        put_bytes(&m, 1, v->tokens[i], v->token_len[i]);
        put_float(&m, 2, v->scores[i]);
        put_int(&m, 3, v->token_type[i]);
        put_bytes(out, 1, m.data, m.len);
        byte_fallback |= v->token_type[i] == SPM_BYTE;
    }
    // TrainerSpec: BPE; the special pieces by text (how SentencePiece finds them) and id.
    m.len = 0;
    put_int(&m, 3, 2); // model_type BPE
    put_int(&m, 35, byte_fallback);
    for (int i = 0; i < 4; i++) {
        put_int(&m, 40 + (uint32_t)i, ids[i]); // unk_id, bos_id, eos_id, pad_id
        if (ids[i] >= 0)                       // unk_piece, bos_piece, eos_piece, pad_piece
            put_bytes(&m, 45 + (uint32_t)i, v->tokens[ids[i]], v->token_len[ids[i]]);
    }
    put_bytes(out, 2, m.data, m.len);
    // NormalizerSpec: identity (GGUF keeps no normalization rule; llama.cpp applies none), the
    // space prefix as the file says, spaces kept (llama.cpp's SentencePiece mode never collapses
    // them), spaces escaped as U+2581.
    m.len = 0;
    put_bytes(&m, 1, "identity", 8);
    put_int(&m, 3, v->add_space_prefix);
    put_int(&m, 4, 0);
    put_int(&m, 5, 1);
    put_bytes(out, 3, m.data, m.len);
    // shardlm's extension: the special ids exactly as given and whether BOS is prepended.
    m.len = 0;
    put_int(&m, SPM_EXT_ADD_BOS, v->add_bos);
    for (int i = 0; i < 4; i++)
        put_int(&m, SPM_EXT_UNK_ID + (uint32_t)i, ids[i]);
    put_bytes(out, SPM_EXT_FIELD, m.data, m.len);
    slm_buf_free(&m);
    // What was written must load (duplicate pieces, a missing UNKNOWN piece, a BYTE piece that
    // is not <0xXX>, ... are reported here, naming `what`).
    slm_tokenizer t = {0};
    slm_status st = slm_spm_load(what, (const uint8_t *)out->data + start, out->len - start, &t);
    if (!st) slm_spm_free(t.impl);
    if (st) out->len = start;
    return st;
}
