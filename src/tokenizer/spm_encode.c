// SentencePiece BPE encode/decode with the semantics of SentencePiece 0.1.97:
//   normalizer.cc      identity normalization (no precompiled_charsmap): malformed UTF-8 ->
//                      U+FFFD per byte, optional removal of extra spaces, dummy prefix, ' ' ->
//                      U+2581
//   bpe_model.cc       greedy BPE over characters: repeatedly merge the adjacent pair whose
//                      concatenation is a piece with the highest score (ties: leftmost pair),
//                      user-defined symbols are atomic, UNUSED pieces are re-split afterwards
//   sentencepiece_processor.cc  unknown pieces -> byte pieces <0xXX> (byte_fallback) or one UNK
//                      per run of unknowns; decoding with byte reassembly and removal of the
//                      dummy-prefix space.
// Everything here works on a const model and per-call scratch memory, so it is thread-safe.
#include "tokenizer/spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPM_WS "\xE2\x96\x81" // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's escaped space
#define SPM_WS_LEN 3

// ---------------------------------------------------------------------------------------------
// UTF-8 and prefix matching

// SentencePiece's DecodeUTF8 validity rule: returns the length of the well-formed character at
// s[0..n) (1..4), or 0 when it is malformed (overlong, surrogate, > U+10FFFF, bad trail byte,
// truncated). n >= 1.
static int utf8_valid_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    if (n >= 2 && (c & 0xE0) == 0xC0) {
        uint32_t cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        if ((s[1] & 0xC0) == 0x80 && cp >= 0x80) return 2;
    } else if (n >= 3 && (c & 0xF0) == 0xE0) {
        uint32_t cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        if ((s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 && cp >= 0x800 &&
            (cp < 0xD800 || cp >= 0xE000))
            return 3;
    } else if (n >= 4 && (c & 0xF8) == 0xF0) {
        uint32_t cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                      ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if ((s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80 &&
            cp >= 0x10000 && cp <= 0x10FFFF)
            return 4;
    }
    return 0;
}

// Longest USER_DEFINED piece that is a prefix of s[0..n); its length, or 0 when none.
static size_t user_prefix(const spm_model *m, const char *s, size_t n) {
    if (m->max_user_len == 0) return 0;
    uint8_t b = (uint8_t)s[0];
    if (!(m->user_first[b >> 3] & (1u << (b & 7)))) return 0;
    size_t l = n < m->max_user_len ? n : m->max_user_len;
    for (; l > 0; l--)
        if (spm_table_find(m, &m->user_defined, s, l) >= 0) return l;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Normalization (identity rule)

// One step of Normalizer::NormalizePrefix: the text to emit for the input at s[0..n) and the
// number of input bytes it consumes.
static void normalize_prefix(const spm_model *m, const char *s, size_t n, const char **piece,
                             size_t *piece_len, size_t *consumed) {
    size_t u = user_prefix(m, s, n);
    if (u) {
        *piece = s;
        *piece_len = *consumed = u;
        return;
    }
    int l = utf8_valid_len((const uint8_t *)s, n);
    if (l == 0) {
        *piece = "\xEF\xBF\xBD"; // U+FFFD REPLACEMENT CHARACTER, consuming one byte
        *piece_len = 3;
        *consumed = 1;
    } else {
        *piece = s;
        *piece_len = *consumed = (size_t)l;
    }
}

// Normalizer::Normalize: writes the normalized form of in[0..n) to `out` (reset first).
static void normalize(const spm_model *m, const char *in, size_t n, slm_buf *out) {
    out->len = 0;
    size_t pos = 0, plen, used;
    const char *piece;
    if (m->remove_extra_ws) { // drop leading spaces
        while (pos < n) {
            normalize_prefix(m, in + pos, n - pos, &piece, &plen, &used);
            if (!(plen == 1 && piece[0] == ' ')) break;
            pos += used;
        }
    }
    if (pos == n) return;
    slm_buf_reserve(out, (n - pos) * 3 + SPM_WS_LEN + 1);
    if (m->add_dummy_prefix) slm_buf_append(out, SPM_WS, SPM_WS_LEN);
    bool prev_space = m->remove_extra_ws;
    while (pos < n) {
        normalize_prefix(m, in + pos, n - pos, &piece, &plen, &used);
        // With remove_extra_whitespaces, spaces after a space are dropped.
        while (prev_space && plen > 0 && piece[0] == ' ') {
            piece++;
            plen--;
        }
        if (plen > 0) {
            for (size_t i = 0; i < plen; i++) {
                if (piece[i] == ' ')
                    slm_buf_append(out, SPM_WS, SPM_WS_LEN);
                else
                    slm_buf_append(out, piece + i, 1);
            }
            prev_space = piece[plen - 1] == ' ';
        }
        pos += used;
        if (!m->remove_extra_ws) prev_space = false;
    }
    if (m->remove_extra_ws) { // drop trailing (escaped) spaces, dummy prefix included
        while (out->len >= SPM_WS_LEN &&
               memcmp(out->data + out->len - SPM_WS_LEN, SPM_WS, SPM_WS_LEN) == 0)
            out->len -= SPM_WS_LEN;
    }
}

// ---------------------------------------------------------------------------------------------
// BPE segmentation

typedef struct bpe_sym {
    int32_t prev, next; // neighbours in the linked list, -1 at the ends
    uint32_t start;     // byte offset into the normalized text
    uint32_t len;       // bytes; 0 once merged into its left neighbour
    bool freeze;        // a user-defined symbol: never merged
} bpe_sym;

typedef struct bpe_pair {
    float score;
    int32_t left, right;
    uint32_t size; // bytes of left + right when the pair was made (detects stale entries)
} bpe_pair;

// Max-heap order: higher score first, then the leftmost pair (bpe_model.cc's comparator).
static bool pair_before(const bpe_pair *a, const bpe_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct bpe_heap {
    bpe_pair *v;
    size_t n, cap;
} bpe_heap;

static void heap_push(bpe_heap *h, bpe_pair p) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        h->v = slm_xrealloc(h->v, h->cap * sizeof *h->v);
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = p;
}

static bpe_pair heap_pop(bpe_heap *h) {
    bpe_pair top = h->v[0];
    bpe_pair last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && pair_before(&h->v[c + 1], &h->v[c])) c++;
        if (!pair_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

// A pair (left, right) whose concatenation became an UNUSED piece: remembered so the piece can be
// split back (bpe_model.cc's rev_merge, keyed by text; the latest entry wins).
typedef struct rev_merge {
    uint32_t start, len, left_len;
} rev_merge;

typedef struct bpe_state {
    const spm_model *m;
    const char *text;
    bpe_sym *sym;
    bpe_heap heap;
    rev_merge *rev;
    size_t n_rev, cap_rev;
    slm_ivec *out;
    bool prev_unk;
} bpe_state;

static void maybe_add_pair(bpe_state *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const bpe_sym *l = &s->sym[left], *r = &s->sym[right];
    if (l->freeze || r->freeze) return;
    uint32_t size = l->len + r->len;
    if (size > s->m->max_normal_len) return;
    int32_t id = spm_table_find(s->m, &s->m->normal, s->text + l->start, size);
    if (id < 0) return;
    heap_push(&s->heap, (bpe_pair){s->m->pieces[id].score, left, right, size});
    if (s->m->pieces[id].type == SPM_UNUSED) {
        if (s->n_rev == s->cap_rev) {
            s->cap_rev = s->cap_rev ? 2 * s->cap_rev : 16;
            s->rev = slm_xrealloc(s->rev, s->cap_rev * sizeof *s->rev);
        }
        s->rev[s->n_rev++] = (rev_merge){l->start, size, l->len};
    }
}

// Appends the id(s) of one final piece: byte fallback or merged UNK runs as in
// SentencePieceProcessor::Encode.
static void emit(bpe_state *s, const char *w, size_t len, int32_t id) {
    const spm_model *m = s->m;
    bool is_unk = m->pieces[id].type == SPM_UNKNOWN;
    if (is_unk && m->byte_fallback) {
        for (size_t i = 0; i < len; i++) {
            uint8_t b = (uint8_t)w[i];
            int32_t bid = m->byte_id[b];
            if (bid < 0) { // no BYTE piece: PieceToId("<0xXX>") over the remaining maps
                char name[8];
                snprintf(name, sizeof name, "<0x%02X>", b);
                bid = spm_piece_to_id(m, name, 6);
            }
            slm_ivec_push(s->out, bid);
        }
    } else if (!(is_unk && s->prev_unk)) {
        slm_ivec_push(s->out, id); // a run of unknowns becomes one UNK
    }
    s->prev_unk = is_unk;
}

// bpe_model.cc's resegment: an UNUSED piece is replaced by the pair it was merged from.
static void resegment(bpe_state *s, uint32_t start, uint32_t len) {
    const char *w = s->text + start;
    int32_t id = spm_piece_to_id(s->m, w, len);
    if (s->m->pieces[id].type == SPM_UNUSED) {
        for (size_t i = s->n_rev; i-- > 0;) {
            const rev_merge *r = &s->rev[i];
            if (r->len == len && memcmp(s->text + r->start, w, len) == 0) {
                uint32_t ll = r->left_len;
                resegment(s, start, ll);
                resegment(s, start + ll, len - ll);
                return;
            }
        }
    }
    emit(s, w, len, id);
}

// Encodes one normalized string (bpe_model.cc Model::Encode + the processor's unknown handling).
static void bpe_encode(const spm_model *m, const char *text, size_t n, slm_ivec *out) {
    if (n == 0) return;
    bpe_state s = {.m = m, .text = text, .out = out};
    s.sym = slm_xmalloc(n * sizeof *s.sym);
    int32_t ns = 0;
    for (size_t pos = 0; pos < n;) {
        size_t l = user_prefix(m, text + pos, n - pos);
        bool freeze = l > 0;
        if (!freeze) {
            // One character by its lead byte (SentencePiece's OneCharLen; the text is valid
            // UTF-8 after normalization).
            static const uint8_t k_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
            l = k_len[(uint8_t)text[pos] >> 4];
            if (l > n - pos) l = n - pos;
        }
        s.sym[ns] = (bpe_sym){ns - 1, -1, (uint32_t)pos, (uint32_t)l, freeze};
        if (ns > 0) s.sym[ns - 1].next = ns;
        ns++;
        pos += l;
    }
    for (int32_t i = 1; i < ns; i++)
        maybe_add_pair(&s, i - 1, i);

    while (s.heap.n > 0) {
        bpe_pair top = heap_pop(&s.heap);
        bpe_sym *l = &s.sym[top.left], *r = &s.sym[top.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != top.size) continue; // stale
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0) s.sym[r->next].prev = top.left;
        r->len = 0;
        maybe_add_pair(&s, l->prev, top.left);
        maybe_add_pair(&s, top.left, l->next);
    }

    for (int32_t i = 0; i != -1; i = s.sym[i].next) {
        if (m->has_unused)
            resegment(&s, s.sym[i].start, s.sym[i].len);
        else
            emit(&s, text + s.sym[i].start, s.sym[i].len,
                 spm_piece_to_id(m, text + s.sym[i].start, s.sym[i].len));
    }
    free(s.sym);
    free(s.heap.v);
    free(s.rev);
}

// Normalizes and encodes one span of text.
static void encode_span(const spm_model *m, const char *text, size_t len, slm_buf *norm,
                        slm_ivec *out) {
    normalize(m, text, len, norm);
    bpe_encode(m, norm->data, norm->len, out);
}

// Longest CONTROL/UNKNOWN piece text at s[0..n); its id (and *mlen), or -1.
static int32_t match_special(const spm_model *m, const char *s, size_t n, size_t *mlen) {
    uint8_t b = (uint8_t)s[0];
    if (!(m->special_first[b >> 3] & (1u << (b & 7)))) return -1;
    int32_t best = -1;
    size_t best_len = 0;
    for (int32_t i = 0; i < m->n_special; i++) {
        const spm_piece *p = &m->pieces[m->special[i]];
        if (p->len > best_len && p->len <= n && memcmp(m->strings + p->off, s, p->len) == 0) {
            best = m->special[i];
            best_len = p->len;
        }
    }
    *mlen = best_len;
    return best;
}

// SentencePiece never matches control symbols in text; with SLM_ENC_ALLOW_SPECIAL the text is
// split at (leftmost-longest) occurrences of CONTROL/UNKNOWN piece texts ("<s>", "</s>",
// "<unk>", ...), each becomes its id, and the spans between are encoded independently (each is
// normalized on its own, so each gets its dummy prefix). This is a shardlm convention, not
// SentencePiece behaviour; Hugging Face's Llama tokenizers may treat the spans differently.
slm_status slm_spm_encode(const slm_tokenizer *t, const char *text, size_t len, int flags,
                          slm_ivec *out) {
    const spm_model *m = t->impl;
    // Symbol indices are int32 and normalization can triple the size (U+FFFD per bad byte).
    if (len > (size_t)INT32_MAX / 4)
        return slm_fail(SLM_E_ARG,
                        "SentencePiece encode: input of %zu bytes exceeds 512 MiB; HINT: encode "
                        "documents or lines separately",
                        len);
    if ((flags & SLM_ENC_ADD_BOS) && t->bos_id >= 0) slm_ivec_push(out, t->bos_id);
    slm_buf norm = {0};
    if ((flags & SLM_ENC_ALLOW_SPECIAL) && m->n_special > 0) {
        size_t span = 0;
        for (size_t pos = 0; pos < len;) {
            size_t mlen = 0;
            int32_t id = match_special(m, text + pos, len - pos, &mlen);
            if (id < 0) {
                pos++;
                continue;
            }
            encode_span(m, text + span, pos - span, &norm, out);
            slm_ivec_push(out, id);
            pos += mlen;
            span = pos;
        }
        encode_span(m, text + span, len - span, &norm, out);
    } else {
        encode_span(m, text, len, &norm, out);
    }
    slm_buf_free(&norm);
    if ((flags & SLM_ENC_ADD_EOS) && t->eos_id >= 0) slm_ivec_push(out, t->eos_id);
    return SLM_OK;
}

// ---------------------------------------------------------------------------------------------
// Decoding

// Appends a run of byte-piece bytes: each well-formed UTF-8 character as is, each byte of a
// malformed sequence as U+FFFD (ProcessBytePieces).
static void flush_bytes(slm_buf *out, const uint8_t *b, size_t n) {
    size_t off = 0;
    while (off < n) {
        int l = utf8_valid_len(b + off, n - off);
        if (l == 0) {
            slm_buf_append(out, "\xEF\xBF\xBD", 3);
            off++;
        } else {
            slm_buf_append(out, b + off, (size_t)l);
            off += (size_t)l;
        }
    }
}

static int hex_val(char c) {
    return c <= '9' ? c - '0' : c - 'A' + 10;
}

int slm_spm_byte_of(const slm_tokenizer *t, int32_t id) {
    const spm_model *m = t->impl;
    if (id < 0 || id >= m->n_pieces || m->pieces[id].type != SPM_BYTE) return -1;
    const char *w = m->strings + m->pieces[id].off;
    return hex_val(w[3]) * 16 + hex_val(w[4]);
}

slm_status slm_spm_decode(const slm_tokenizer *t, const int32_t *ids, size_t n, slm_buf *out) {
    return slm_spm_decode_ex(t, ids, n, false, out);
}

slm_status slm_spm_decode_ex(const slm_tokenizer *t, const int32_t *ids, size_t n, bool raw,
                             slm_buf *out) {
    const spm_model *m = t->impl;
    size_t base = out->len;
    uint8_t *bytes = NULL;
    size_t n_bytes = 0;
    // SentencePiece 0.1.97 (is_bos_ws / bos_ws_seen): when the model adds a dummy prefix or
    // removes extra spaces, the leading U+2581 of a piece is dropped while nothing has been
    // written yet. With remove_extra_whitespaces every such piece loses it; otherwise only the
    // first piece that had one (so "▁" "▁the" decodes to " the").
    bool strip_first = m->add_dummy_prefix || m->remove_extra_ws;
    bool is_bos_ws = true, bos_ws_seen = false;
    for (size_t i = 0; i < n; i++) {
        const spm_piece *p = &m->pieces[ids[i]];
        const char *w = m->strings + p->off;
        if (p->type == SPM_BYTE) {
            if (!bytes) bytes = slm_xmalloc(n);
            bytes[n_bytes++] = (uint8_t)(hex_val(w[3]) * 16 + hex_val(w[4]));
            continue;
        }
        if (raw && n_bytes)
            slm_buf_append(out, bytes, n_bytes);
        else if (!raw)
            flush_bytes(out, bytes, n_bytes);
        n_bytes = 0;
        if (bos_ws_seen || out->len > base) is_bos_ws = false;
        bos_ws_seen = false;
        if (p->type == SPM_CONTROL) continue;
        if (p->type == SPM_UNKNOWN) {
            slm_buf_append(out, m->unk_surface, m->unk_surface_len);
            continue;
        }
        size_t len = p->len, j = 0;
        if (is_bos_ws && strip_first && len >= SPM_WS_LEN && memcmp(w, SPM_WS, SPM_WS_LEN) == 0) {
            j = SPM_WS_LEN;
            bos_ws_seen = !m->remove_extra_ws;
        }
        while (j < len) { // U+2581 -> ' '
            const char *ws = memmem(w + j, len - j, SPM_WS, SPM_WS_LEN);
            size_t run = ws ? (size_t)(ws - (w + j)) : len - j;
            slm_buf_append(out, w + j, run);
            j += run;
            if (ws) {
                slm_buf_append(out, " ", 1);
                j += SPM_WS_LEN;
            }
        }
    }
    if (raw && n_bytes)
        slm_buf_append(out, bytes, n_bytes);
    else if (!raw)
        flush_bytes(out, bytes, n_bytes);
    free(bytes);
    slm_buf_reserve(out, out->len); // keep data non-NULL and NUL-terminated even when empty
    out->data[out->len] = '\0';
    return SLM_OK;
}
