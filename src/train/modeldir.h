// train/: model directories (run directory, checkpoint, Hugging Face directory, GGUF file), the
// one place every reader of weights opens. Part of train/train.h (which includes it); modeldir.c
// implements it.
#ifndef SLM_TRAIN_MODELDIR_H
#define SLM_TRAIN_MODELDIR_H

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

// ---------------------------------------------------------------------------------------------
// Model directories
//
// A model directory: the one place eval, generate, ckpt export and train --init-from-hf find a
// model's weights, config and tokenizer. Four kinds are recognised (slm_model_dir_kind):
//   run directory   written by shardlm train: its weights are its checkpoints; the newest
//                   committed checkpoint under RUN_DIR/checkpoints that verifies is read (a
//                   checkpoints root, with `latest` or step_N directories, is taken the same way)
//   checkpoint      a step_N directory (has manifest.json): that checkpoint
//   Hugging Face    config.json + model.safetensors (or model.safetensors.index.json)
//   GGUF file       a llama.cpp GGUF file of the llama architecture (ckpt/: config from its
//                   metadata, weights dequantized to fp32); its tokenizer is written as
//                   tokenizer.json into a temp directory (tmp_dir) when the file's tokenizer is
//                   one shardlm imports (else none, with a warning)
// Checkpoints load in one process whatever world saved them (ckpt/ reshards on read). The
// config comes with the weights (the checkpoint's manifest, the HF config.json or the GGUF
// metadata); a run directory's config.json must describe the same model. The tokenizer is the
// run directory's copy under the file name the checkpoint recorded (none when it recorded none;
// for a step_N directory, only when it sits in RUN_DIR/checkpoints/), or the HF directory's
// tokenizer.json / tokenizer.model (slm_train_find_tokenizer's order). This module does not
// parse command lines.

typedef enum {
    SLM_MODEL_DIR_RUN,
    SLM_MODEL_DIR_CKPT,
    SLM_MODEL_DIR_HF,
    SLM_MODEL_DIR_GGUF
} slm_model_dir_kind;

// An opened model directory (nothing large is read yet). Fields are read-only for callers.
typedef struct slm_model_dir {
    slm_model_dir_kind kind;
    char *path;                // as given (owned)
    char *weights_dir;         // the step_N directory (RUN / CKPT) or the HF directory (owned)
    slm_llama_config cfg;      // the weights' config (manifest.json or the HF config.json)
    slm_ckpt *ckpt;            // RUN / CKPT: the opened checkpoint (owned); NULL for HF
    int64_t step;              // RUN / CKPT: the checkpoint's step; -1 for HF
    char *tokenizer;           // tokenizer file path, NULL if there is none (owned)
    char *tmp_dir;             // s3:// PATH / GGUF: local temp directory holding the fetched or
                               // converted tokenizer, removed by slm_model_dir_close (owned; NULL
                               // otherwise)
    int tmp_track[2];          // slm_tmp_track slots + 1 of tmp_dir and its tokenizer file (0:
                               // none): a signal's exit removes them too
    slm_gguf_file *gguf;       // GGUF: the mapped, parsed file (owned); NULL otherwise
    const char *chat_template; // GGUF: the built-in template its tokenizer.chat_template
                               // matches ("chatml", "llama3", "llama2"; static), or NULL
    // A LoRA checkpoint (adapters only; slm_model_dir_is_lora): the caller may set these
    // before loading. keep_lora: keep the adapters unmerged (PEFT export); otherwise they are
    // merged into the base (slm_llama_lora_merge), so eval / generate / export see one model.
    // lora_base: the base HF directory instead of the one the checkpoint recorded (borrowed;
    // its XXH64 must still match).
    bool keep_lora;
    const char *lora_base;
} slm_model_dir;
// True when d is a LoRA checkpoint: its weights are the recorded base plus adapters.
bool slm_model_dir_is_lora(const slm_model_dir *d);

// Opens PATH as one of the four kinds above and reads its config (and, for a checkpoint, its
// manifest and rank file sizes; a run directory's newest checkpoint is checked in full, XXH64
// included, falling back to older ones with a warning, as slm_ckpt_pick_newest). Warns when the
// tokenizer file's XXH64 differs from the one the checkpoint recorded. On error *d is zeroed.
// Errors: SLM_E_IO for a PATH that is not a directory or holds no weights (naming what was
// looked for; a run directory without a committed checkpoint says so), SLM_E_FORMAT when a run
// directory's config.json describes another model than its checkpoint (naming both files and
// the field) or no checkpoint verifies, and the errors of slm_ckpt_open /
// slm_llama_config_load.
slm_status slm_model_dir_open(const char *path, slm_model_dir *d);
// Releases everything; safe on a zeroed or already closed struct.
void slm_model_dir_close(slm_model_dir *d);
// Allocates *m for d->cfg (parameters and gradients: slm_llama_init; free with slm_llama_free)
// after checking, before any allocation, the weights' shapes against the config (the
// checkpoint's layout: slm_ckpt_check_model, SLM_E_ARG naming manifest.json and the unit; HF:
// slm_hf_check_shapes) and that they fit in the memory available (slm_mem_check: SLM_E_NOMEM
// naming the size and the limit), then reads the weights into it
// (slm_model_dir_read_weights). On error *m is freed.
slm_status slm_model_dir_load_model(slm_model_dir *d, slm_llama *m);
// Reads the weights into an initialised model whose params are allocated; its config must be
// the weights' (checked: slm_ckpt_check_model / slm_hf_load). A LoRA checkpoint reads the base
// from the HF directory its manifest names (or d->lora_base), refusing one whose
// slm_hf_dir_xxh64 differs from the recorded one (SLM_E_FORMAT naming both), attaches and reads
// the adapters and merges them unless d->keep_lora. Every byte read is verified
// (checkpoint chunk XXH64) and checked finite. Errors: SLM_E_ARG / SLM_E_FORMAT for a model
// that does not match, SLM_E_IO, SLM_E_CHECKSUM, naming the file.
slm_status slm_model_dir_read_weights(slm_model_dir *d, slm_llama *m);
// Loads d's tokenizer into *tok (owned; NULL when there is none and !need). Errors: SLM_E_IO
// when need and there is none (naming the directory), the loader's, SLM_E_ARG when its vocab
// is larger than the model's vocab_size.
slm_status slm_model_dir_load_tokenizer(const slm_model_dir *d, slm_tokenizer **tok, bool need);
// Whether PATH is a GGUF file (a regular file starting with the magic "GGUF").
bool slm_is_gguf_file(const char *path);
// train --init-from-gguf: reads the GGUF file's weights into an initialised model with allocated
// params (slm_gguf_open + slm_gguf_load). Errors: those of open and load.
slm_status slm_model_gguf_init_weights(const char *path, slm_llama *m);
// Checks a GGUF file's tensors against cfg without reading their data (slm_gguf_check_shapes).
slm_status slm_model_gguf_check_shapes(const char *path, const slm_llama_config *cfg);
// Checks that the dataset DATA_DIR was prepared with d's tokenizer (its XXH64 against
// manifest.json's); a model directory without a tokenizer passes. Errors: SLM_E_FORMAT naming
// both tokenizer files and the dataset; those of slm_dataset_open.
slm_status slm_model_dir_check_dataset(const slm_model_dir *d, const char *data_dir);
// Opens PATH, loads the model (slm_model_dir_load_model) and, if tok is non-NULL, the tokenizer
// (slm_model_dir_load_tokenizer), then closes PATH. `hf_only`: PATH must be a Hugging Face
// directory (--init-from-hf; SLM_E_ARG otherwise). On error nothing is left allocated.
slm_status slm_model_dir_load(const char *path, bool hf_only, slm_llama *m, slm_tokenizer **tok,
                              bool need_tokenizer);
// The --init-from-hf options' check, from the names in PATH alone (nothing is read): SLM_OK
// unless PATH is a run directory, a checkpoints root or a step_N directory (SLM_E_ARG naming
// what it is and, for a run directory, that --model takes it).
slm_status slm_model_dir_require_hf(const char *path);
// The identity of a Hugging Face directory's weights (the base a LoRA checkpoint refers to): one
// XXH64 folding in, in name order, the XXH64 of config.json and of every *.safetensors file and
// model.safetensors.index.json (reads the files once). Errors: SLM_E_IO naming the file.
slm_status slm_hf_dir_xxh64(const char *dir, uint64_t *out);
// train --init-from-hf: reads the Hugging Face directory DIR's weights into an initialised
// model with allocated params (slm_model_dir_open + slm_model_dir_read_weights). Errors:
// SLM_E_ARG when DIR is a run or checkpoint directory, those of open and read.
slm_status slm_model_dir_init_weights(const char *dir, slm_llama *m);

#endif
