// `ckpt export`: a loaded model (and its tokenizer file) as a Hugging Face directory, staged in
// a temp sibling and swapped in (export_dir.c). Contract in ckpt.h.
#include "ckpt/ckpt.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

// True when OUT_DIR is SRC_DIR or contains it (both exist): the swap would move the source.
static bool contains(const char *out_dir, const char *src_dir) {
    char ro[PATH_MAX], rs[PATH_MAX];
    if (!realpath(out_dir, ro) || !realpath(src_dir, rs)) return false;
    size_t n = strlen(ro);
    return !strncmp(rs, ro, n) && (rs[n] == '/' || rs[n] == 0 || n == 1);
}

// Copies the tokenizer file into DIR under its own name, then the transformers-side files.
static slm_status copy_tokenizer(const char *tokenizer_path, const char *dir,
                                 int32_t max_positions) {
    const char *slash = strrchr(tokenizer_path, '/');
    char *dst = slm_path_join(dir, slash ? slash + 1 : tokenizer_path);
    slm_status st = slm_file_copy(tokenizer_path, dst, NULL);
    // tokenizer_config.json & co., bos / eos ids in config.json (for transformers)
    if (!st) st = slm_hf_write_tokenizer_files(dir, dst, max_positions);
    free(dst);
    return st;
}

slm_status slm_peft_export_dir(const slm_llama *m, const char *src_dir, const char *base_ref,
                               const char *out_dir, slm_dtype dtype) {
    if (contains(out_dir, src_dir))
        return slm_fail(SLM_E_ARG,
                        "export: --hf %s is or contains %s, the adapters being exported; "
                        "expected an output directory outside it (and outside the run directory)",
                        out_dir, src_dir);
    char *tmp = NULL;
    slm_status st = slm_export_dir_begin(out_dir, &tmp);
    if (st) return st;
    st = slm_peft_export(m, base_ref, tmp, dtype);
    if (!st) st = slm_export_dir_commit(tmp, out_dir);
    if (st) slm_export_dir_abort(tmp);
    free(tmp);
    return st;
}

slm_status slm_hf_export_dir(const slm_llama *m, const char *src_dir, const char *tokenizer_path,
                             const char *out_dir, slm_dtype dtype, size_t max_shard_bytes) {
    if (contains(out_dir, src_dir))
        return slm_fail(SLM_E_ARG,
                        "export: --hf %s is or contains %s, the weights being exported; "
                        "expected an output directory outside it (and outside the run directory)",
                        out_dir, src_dir);
    char *tmp = NULL;
    slm_status st = slm_export_dir_begin(out_dir, &tmp);
    if (st) return st;
    st = slm_hf_export(m, tmp, dtype, max_shard_bytes);
    if (!st && tokenizer_path)
        st = copy_tokenizer(tokenizer_path, tmp, m->cfg.max_position_embeddings);
    if (!st) st = slm_export_dir_commit(tmp, out_dir);
    if (st) slm_export_dir_abort(tmp);
    free(tmp);
    return st;
}
