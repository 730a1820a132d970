// Private to src/tokenizer/spm*.c: the in-memory SentencePiece BPE model.
//
// spm.c reads the serialized ModelProto (protobuf wire format, proto2 schema
// sentencepiece_model.proto) into a struct spm_model and refuses models that spm*.c cannot encode
// exactly; spm_encode.c implements normalization, BPE segmentation and decoding with the
// semantics of SentencePiece 0.1.97 (normalizer.cc, bpe_model.cc, sentencepiece_processor.cc).
// A loaded model is immutable; encode/decode keep all scratch state per call.
#ifndef SLM_SPM_H
#define SLM_SPM_H

#include "tokenizer/tok_internal.h"

// ModelProto.SentencePiece.Type values.
enum {
    SPM_NORMAL = 1,
    SPM_UNKNOWN = 2,
    SPM_CONTROL = 3,
    SPM_USER_DEFINED = 4,
    SPM_UNUSED = 5,
    SPM_BYTE = 6,
};

// shardlm's extension of ModelProto (a field number in its extension range 200..max, which
// SentencePiece keeps as an unknown field): a message written for GGUF imports (spm_write.c),
// whose fields override what spm.c would derive from the pieces: whether BOS is prepended by
// default (bool) and the unk / bos / eos / pad ids (int32, -1: none) exactly as the file gave
// them.
enum {
    SPM_EXT_FIELD = 4096,
    SPM_EXT_ADD_BOS = 1,
    SPM_EXT_UNK_ID = 2, // then bos 3, eos 4, pad 5
};

// One vocabulary entry. The text lives in spm_model.strings at `off` (NUL-terminated, `len`
// bytes without the NUL; a piece may in principle contain NUL bytes, `len` is authoritative).
typedef struct spm_piece {
    uint32_t off;
    uint32_t len;
    float score;
    int32_t type;
} spm_piece;

// Open-addressing hash set over piece ids, keyed by the piece text (linear probing, load <= 1/4).
// `slots` has `mask + 1` entries: an id (or -1 when empty) and the high 32 bits of the text's
// hash, compared first so that a miss rarely touches the piece text.
typedef struct spm_slot {
    int32_t id;
    uint32_t tag;
} spm_slot;
typedef struct spm_table {
    spm_slot *slots;
    uint32_t mask;
} spm_table;

typedef struct spm_model {
    char *strings;     // all piece texts, NUL-terminated, owned
    spm_piece *pieces; // [n_pieces], id order
    int32_t n_pieces;
    // SentencePiece keeps two maps: pieces_ (NORMAL, USER_DEFINED, UNUSED: the ones BPE may
    // produce) and reserved_id_map_ (UNKNOWN, CONTROL, BYTE). PieceToId looks in reserved first.
    spm_table normal;
    spm_table reserved;
    spm_table user_defined;    // USER_DEFINED pieces only (prefix matching of the input)
    uint32_t max_user_len;     // longest USER_DEFINED piece in bytes (0: none)
    uint8_t user_first[32];    // bitset of first bytes of USER_DEFINED pieces
    uint32_t max_normal_len;   // longest piece in `normal`, bytes
    bool has_unused;           // any UNUSED piece (enables the re-segmentation pass)
    int32_t *special;          // CONTROL and UNKNOWN ids, matched in text under
    int32_t n_special;         //   SLM_ENC_ALLOW_SPECIAL (owned)
    uint8_t special_first[32]; // bitset of their first bytes
    int32_t unk_id;            // the UNKNOWN piece (exactly one)
    int32_t byte_id[256];      // BYTE piece <0xXX> per byte value, -1 when absent
    bool byte_fallback;        // trainer_spec.byte_fallback
    bool add_dummy_prefix;     // normalizer_spec.add_dummy_prefix
    bool remove_extra_ws;      // normalizer_spec.remove_extra_whitespaces
    char *unk_surface;         // trainer_spec.unk_surface (decode text of UNK), owned
    size_t unk_surface_len;
} spm_model;

// Looks up a piece text in `tab`; returns its id or -1.
int32_t spm_table_find(const spm_model *m, const spm_table *tab, const char *s, size_t len);
// SentencePiece's PieceToId: reserved pieces first, then normal ones, else the UNK id.
int32_t spm_piece_to_id(const spm_model *m, const char *s, size_t len);

#endif
