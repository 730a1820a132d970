// Tokenizer front door: loads a file, detects its family, dispatches encode/decode.
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

slm_status slm_tokenizer_load(const char *path, slm_tokenizer **out) {
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    slm_status st = slm_file_read_all(path, &data, &len);
    if (st) return st;
    if (len == 0) {
        free(data);
        return slm_fail(SLM_E_FORMAT, "%s: empty tokenizer file", path);
    }
    slm_tokenizer *t = slm_xcalloc(1, sizeof *t);
    t->bos_id = t->eos_id = t->unk_id = t->pad_id = -1;
    size_t i = 0;
    while (i < len && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t'))
        i++;
    // tokenizer.json starts with '{'; a SentencePiece ModelProto starts with field 1 (pieces,
    // length-delimited: tag byte 0x0a).
    if (i < len && data[i] == '{') {
        t->type = SLM_TOK_BYTE_BPE;
        st = slm_bpe_load_json(path, data, len, t);
    } else if ((unsigned char)data[0] == 0x0a) {
        t->type = SLM_TOK_SPM_BPE;
        st = slm_spm_load(path, (const uint8_t *)data, len, t);
    } else {
        st = slm_fail(SLM_E_FORMAT,
                      "%s: not a tokenizer: expected a tokenizer.json (JSON object) or a "
                      "SentencePiece tokenizer.model (protobuf)",
                      path);
    }
    if (st == SLM_OK) t->hash = slm_xxh64(data, len, 0);
    free(data);
    if (st) {
        free(t);
        return st;
    }
    *out = t;
    return SLM_OK;
}

void slm_tokenizer_free(slm_tokenizer *t) {
    if (!t) return;
    if (t->type == SLM_TOK_BYTE_BPE)
        slm_bpe_free(t->impl);
    else if (t->type == SLM_TOK_SPM_BPE)
        slm_spm_free(t->impl);
    free(t);
}

slm_tok_type slm_tokenizer_type(const slm_tokenizer *t) {
    return t->type;
}
const char *slm_tokenizer_type_name(const slm_tokenizer *t) {
    return t->type == SLM_TOK_BYTE_BPE ? "byte_bpe" : "sentencepiece_bpe";
}
int32_t slm_tokenizer_vocab_size(const slm_tokenizer *t) {
    return t->vocab_size;
}
bool slm_tokenizer_add_bos(const slm_tokenizer *t) {
    return t->bos_id >= 0 && !t->no_default_bos;
}
int32_t slm_tokenizer_bos_id(const slm_tokenizer *t) {
    return t->bos_id;
}
int32_t slm_tokenizer_eos_id(const slm_tokenizer *t) {
    return t->eos_id;
}
int32_t slm_tokenizer_unk_id(const slm_tokenizer *t) {
    return t->unk_id;
}
int32_t slm_tokenizer_pad_id(const slm_tokenizer *t) {
    return t->pad_id;
}
uint64_t slm_tokenizer_hash(const slm_tokenizer *t) {
    return t->hash;
}

const char *slm_tokenizer_piece(const slm_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->vocab_size) return NULL;
    return t->type == SLM_TOK_BYTE_BPE ? slm_bpe_piece(t, id) : slm_spm_piece(t, id);
}

slm_status slm_tokenizer_encode(const slm_tokenizer *t, const char *text, size_t len, int flags,
                                slm_ivec *out) {
    if (flags & ~(SLM_ENC_ADD_BOS | SLM_ENC_ADD_EOS | SLM_ENC_ALLOW_SPECIAL))
        return slm_fail(SLM_E_ARG, "tokenizer encode: unknown flags 0x%x", flags);
    return t->type == SLM_TOK_BYTE_BPE ? slm_bpe_encode(t, text, len, flags, out)
                                       : slm_spm_encode(t, text, len, flags, out);
}

// Every id in [0, vocab_size). Errors: SLM_E_ARG naming the first id outside and its position.
static slm_status check_ids(const slm_tokenizer *t, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return slm_fail(SLM_E_ARG, "tokenizer decode: id %d at position %zu is outside [0, %d)",
                            ids[i], i, t->vocab_size);
    return SLM_OK;
}

slm_status slm_tokenizer_decode(const slm_tokenizer *t, const int32_t *ids, size_t n,
                                slm_buf *out) {
    slm_status st = check_ids(t, ids, n);
    if (st) return st;
    return t->type == SLM_TOK_BYTE_BPE ? slm_bpe_decode(t, ids, n, out)
                                       : slm_spm_decode(t, ids, n, out);
}

slm_status slm_tokenizer_decode_bytes(const slm_tokenizer *t, const int32_t *ids, size_t n,
                                      slm_buf *out) {
    slm_status st = check_ids(t, ids, n);
    if (st) return st;
    return t->type == SLM_TOK_BYTE_BPE ? slm_bpe_decode(t, ids, n, out)
                                       : slm_spm_decode_ex(t, ids, n, true, out);
}

// Length (0..3) of the suffix of b[0..n) that is a proper prefix of a well-formed UTF-8
// sequence (RFC 3629: no overlongs, no surrogates, <= U+10FFFF), i.e. a character that more
// bytes may still complete; 0 when the data ends on a character boundary or in bytes that are
// malformed whatever follows.
static size_t utf8_open_tail(const uint8_t *b, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        uint8_t c = b[n - k];
        if ((c & 0xC0) == 0x80) continue; // a continuation byte: the lead is further back
        size_t need = (c >= 0xC2 && c <= 0xDF)   ? 2
                      : (c >= 0xE0 && c <= 0xEF) ? 3
                      : (c >= 0xF0 && c <= 0xF4) ? 4
                                                 : 0;
        if (need <= k) return 0; // ASCII, a complete character, or a byte that is never a lead
        if (k >= 2) {
            uint8_t c1 = b[n - k + 1];
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
                (c == 0xF4 && c1 > 0x8F))
                return 0;
        }
        return k;
    }
    return 0;
}

void slm_tok_stream_init(slm_tok_stream *s, const slm_tokenizer *t, bool raw) {
    memset(s, 0, sizeof *s);
    s->tok = t;
    s->raw = raw;
}

// Bytes at the end of s->text that a later id may still change.
static size_t stream_unstable(const slm_tok_stream *s) {
    const slm_tokenizer *t = s->tok;
    if (t->type == SLM_TOK_BYTE_BPE) // raw bytes, token after token
        return utf8_open_tail((const uint8_t *)s->text.data, s->text.len);
    // SentencePiece: only the trailing run of byte-fallback pieces can change; it is flushed as
    // a whole (each byte of a malformed sequence -> U+FFFD), so an open tail of k raw bytes is k
    // raw bytes (raw) or k replacement characters (decode) at the end of the text.
    uint8_t tail[3];
    size_t k = 0;
    for (size_t i = s->ids.len; i > 0 && k < 3; i--) {
        int v = slm_spm_byte_of(t, s->ids.data[i - 1]);
        if (v < 0) break;
        tail[2 - k++] = (uint8_t)v;
    }
    size_t open = utf8_open_tail(tail + 3 - k, k);
    size_t hold = s->raw ? open : 3 * open;
    return hold <= s->text.len ? hold : s->text.len;
}

slm_status slm_tok_stream_push(slm_tok_stream *s, const int32_t *ids, size_t n, const char **bytes,
                               size_t *len) {
    *bytes = "";
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->tok->vocab_size)
            return slm_fail(SLM_E_ARG, "tokenizer decode: id %d is outside [0, %d)", ids[i],
                            s->tok->vocab_size);
    for (size_t i = 0; i < n; i++)
        slm_ivec_push(&s->ids, ids[i]);
    // Decoding everything again keeps the one-shot rules (SentencePiece's leading-space rule,
    // byte runs) exact; generation is dominated by the model, not by this.
    s->text.len = 0;
    slm_status st = s->raw ? slm_tokenizer_decode_bytes(s->tok, s->ids.data, s->ids.len, &s->text)
                           : slm_tokenizer_decode(s->tok, s->ids.data, s->ids.len, &s->text);
    if (st) return st;
    size_t stable = s->text.len - stream_unstable(s);
    if (stable > s->shown) {
        *bytes = s->text.data + s->shown;
        *len = stable - s->shown;
        s->shown = stable;
    }
    return SLM_OK;
}

void slm_tok_stream_finish(slm_tok_stream *s, const char **bytes, size_t *len) {
    *bytes = "";
    *len = 0;
    if (s->text.len > s->shown) {
        *bytes = s->text.data + s->shown;
        *len = s->text.len - s->shown;
        s->shown = s->text.len;
    }
}

void slm_tok_stream_free(slm_tok_stream *s) {
    slm_ivec_free(&s->ids);
    slm_buf_free(&s->text);
    memset(s, 0, sizeof *s);
}
