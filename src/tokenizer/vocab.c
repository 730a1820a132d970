// Read access to a loaded tokenizer's vocabulary, merges and scores, for writers of other file
// formats (the GGUF export). Contracts in tokenizer.h.
#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"

#include <string.h>

int slm_tokenizer_token_kind(const slm_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->vocab_size) return 0;
    if (t->type == SLM_TOK_SPM_BPE) {
        const spm_model *m = t->impl;
        return m->pieces[id].type;
    }
    const bpe_model *m = t->impl;
    uint8_t f = m->flags[id];
    if (f & BPE_SPECIAL) return SPM_CONTROL;
    if (f & BPE_ADDED) return SPM_USER_DEFINED;
    if (!(f & BPE_IN_VOCAB)) return SPM_UNUSED;
    return SPM_NORMAL;
}

float slm_tokenizer_score(const slm_tokenizer *t, int32_t id) {
    if (t->type != SLM_TOK_SPM_BPE || id < 0 || id >= t->vocab_size) return 0.0f;
    const spm_model *m = t->impl;
    return m->pieces[id].score;
}

int32_t slm_tokenizer_n_merges(const slm_tokenizer *t) {
    return t->type == SLM_TOK_BYTE_BPE ? ((const bpe_model *)t->impl)->n_merges : 0;
}

bool slm_tokenizer_merge(const slm_tokenizer *t, int32_t rank, const char **left,
                         const char **right) {
    if (rank < 0 || rank >= slm_tokenizer_n_merges(t)) return false;
    const bpe_model *m = t->impl;
    *left = m->piece[m->merge_left[rank]];
    *right = m->piece[m->merge_right[rank]];
    return true;
}

const char *slm_tokenizer_pretok_regex(const slm_tokenizer *t) {
    return t->type == SLM_TOK_BYTE_BPE ? ((const bpe_model *)t->impl)->regex : NULL;
}

bool slm_tokenizer_ignores_merges(const slm_tokenizer *t) {
    return t->type == SLM_TOK_BYTE_BPE && ((const bpe_model *)t->impl)->ignore_merges;
}

bool slm_tokenizer_adds_space_prefix(const slm_tokenizer *t) {
    return t->type == SLM_TOK_SPM_BPE && ((const spm_model *)t->impl)->add_dummy_prefix;
}

bool slm_tokenizer_removes_extra_spaces(const slm_tokenizer *t) {
    return t->type == SLM_TOK_SPM_BPE && ((const spm_model *)t->impl)->remove_extra_ws;
}

const char *slm_tokenizer_gpt2_regex(void) {
    return slm_bpe_gpt2_regex;
}

const char *slm_tokenizer_pre_name(const slm_tokenizer *t) {
    static const char *const names[] = {"gpt-2", "smollm", "llama-bpe"};
    const char *rx = slm_tokenizer_pretok_regex(t);
    for (size_t i = 0; rx && i < sizeof names / sizeof *names; i++) {
        bool im;
        const char *r = slm_bpe_named_regex(names[i], &im);
        if (r && !strcmp(r, rx) && im == slm_tokenizer_ignores_merges(t)) return names[i];
    }
    return NULL;
}
