// model: the Llama-2 architecture (Touvron et al. 2023) on flat parameter buffers, with
// forward, backward and a KV-cache decode step, on a device (device.h; the CPU by default).
//
// Parameter storage (what makes FSDP, checkpoints and resharding simple): the model is split
// into units, as FSDP's transformer wrap policy does: unit l (0 <= l < L) is decoder block l, and
// unit L is the root (embedding, final norm, lm_head). Each unit's parameters live in ONE
// contiguous fp32 buffer, its FlatParameter; every tensor is a view (HF name, shape, offset)
// into it. Gradients use the identical layout. Layout is [out, in] (HF / nn.Linear) for weights.
//
// Per block, in HF order: input_layernorm.weight [C], self_attn.q_proj.weight [H*D, C],
// k_proj [KV*D, C], v_proj [KV*D, C], o_proj [C, H*D], post_attention_layernorm.weight [C],
// mlp.gate_proj [F, C], mlp.up_proj [F, C], mlp.down_proj [C, F]; root: embed_tokens [V, C],
// norm [C], lm_head [V, C] (absent when tie_word_embeddings: the embedding is reused).
// RoPE follows HF `rotate_half`: the head dim is split in two halves (x1 = x[:D/2],
// x2 = x[D/2:]) and rotated as (x1 cos - x2 sin, x2 cos + x1 sin), frequency
// theta^(-2i/D) for i < D/2 (not the interleaved-pairs convention of Meta's original code).
//
// The model does not know about MPI or sharding: the per-unit hooks let fsdp/ gather a unit's
// parameters before it runs and reduce-scatter its gradients after, by pointing params[u] /
// grads[u] at its own buffers.
#ifndef SLM_MODEL_H
#define SLM_MODEL_H

#include "base/base.h"
#include "device/device.h"

// Hugging Face LlamaConfig fields (same names, same meaning).
typedef struct slm_llama_config {
    int32_t vocab_size;
    int32_t hidden_size;             // C
    int32_t intermediate_size;       // F
    int32_t num_hidden_layers;       // L
    int32_t num_attention_heads;     // H
    int32_t num_key_value_heads;     // KV (GQA when KV < H; must divide H)
    int32_t max_position_embeddings; // longest T
    float rms_norm_eps;
    float rope_theta;
    bool tie_word_embeddings;
    float initializer_range; // std of the normal init (HF default 0.02)
    // RoPE scaling (HF rope_scaling / rope_parameters), applied to the inverse frequencies:
    // SLM_ROPE_DEFAULT (none; the zero value, so presets and old manifests are unscaled),
    // SLM_ROPE_LINEAR (inv_freq / factor) or SLM_ROPE_LLAMA3 (Llama 3.1's per-band factor).
    int32_t rope_type;
    float rope_factor;                             // linear, llama3 (> 0)
    float rope_low_freq_factor;                    // llama3 (> 0)
    float rope_high_freq_factor;                   // llama3 (> rope_low_freq_factor)
    int32_t rope_original_max_position_embeddings; // llama3 (> 0)
    // HF head_dim: 0 (the zero value, so presets and old manifests keep it) means
    // hidden_size / num_attention_heads; else an explicit D (Llama 3.2, ...), even, with
    // q_proj [H*D, C], k/v_proj [KV*D, C], o_proj [C, H*D] and attention scale 1/sqrt(D).
    int32_t head_dim;
} slm_llama_config;

// The attention head dim D of a config: head_dim, or hidden_size / num_attention_heads.
static inline int slm_llama_head_dim(const slm_llama_config *c) {
    return c->head_dim > 0 ? c->head_dim : c->hidden_size / c->num_attention_heads;
}

// slm_llama_config.rope_type values.
enum { SLM_ROPE_DEFAULT = 0, SLM_ROPE_LINEAR = 1, SLM_ROPE_LLAMA3 = 2 };
// The HF rope_type name of a slm_llama_config.rope_type ("default", "linear", "llama3").
const char *slm_rope_type_name(int32_t rope_type);
// RoPE inverse frequencies for head dim D: inv_freq[D/2] (caller-owned), theta^(-2i/D) adjusted
// by the config's scaling exactly as transformers' _compute_linear_scaling_rope_parameters /
// _compute_llama3_parameters do (computed in double here).
void slm_llama_rope_inv_freq(const slm_llama_config *c, int D, double *inv_freq);
// Whether a and b have the same RoPE settings (theta and scaling; floats to 1e-6 relative).
bool slm_llama_rope_same(const slm_llama_config *a, const slm_llama_config *b);

// Named presets ("tiny", "small", "gqa", "kjv"; sizes in model/config.c and docs/model.md).
// A caller may overwrite c->vocab_size afterwards to match its tokenizer (then validate).
// Errors: SLM_E_ARG naming the unknown preset and listing the known ones.
slm_status slm_llama_config_preset(const char *name, slm_llama_config *c);
// Reads an HF config.json (fields above; rope_theta from the top level, rope_parameters or
// rope_scaling; math-changing fields shardlm does not implement are SLM_E_UNSUPPORTED naming
// them; irrelevant ones ignored, unknown ones warned about: docs/model.md). Missing optional
// fields take HF's defaults. Errors: SLM_E_IO, SLM_E_FORMAT naming the file and field (wrong JSON
// type), then slm_llama_config_validate's errors.
slm_status slm_llama_config_load(const char *path, slm_llama_config *c);
// The same from JSON text [len bytes] in memory; `path` only names it in messages.
slm_status slm_llama_config_parse(const char *text, size_t len, const char *path,
                                  slm_llama_config *c);
// `spec` is a preset name or a path to a config.json (an existing file wins; a spec containing
// '/' or ".json" that does not exist is SLM_E_IO).
slm_status slm_llama_config_resolve(const char *spec, slm_llama_config *c);
// Checks consistency (positive sizes, hidden_size divisible by heads, even head dim, KV heads
// dividing heads, ...). Errors: SLM_E_ARG naming the field and the expectation.
slm_status slm_llama_config_validate(const slm_llama_config *c);
// Writes an HF-compatible config.json (architectures: LlamaForCausalLM) atomically.
slm_status slm_llama_config_save(const slm_llama_config *c, const char *path);
// Adds the config's fields to the cJSON object `o` (the one JSON form of a config; every float
// as the shortest decimal that reads back to the same float). With `hf`, also the fields HF's
// LlamaConfig expects (architectures, model_type, hidden_act, rope_parameters, rope_scaling,
// attention_bias, mlp_bias, torch_dtype): config.json. Without: the 11 fields of a checkpoint
// manifest's model_config, plus "rope_scaling" when the RoPE is scaled. Both read back with
// slm_llama_config_parse.
struct cJSON;
void slm_llama_config_to_json(const slm_llama_config *c, bool hf, struct cJSON *o);
// Parameter counts: all parameters / matmul parameters (incl. lm_head; embedding excluded),
// the N of the MFU formula 6N + 12 L A T (slm_train_flops_per_token).
int64_t slm_llama_n_params(const slm_llama_config *c);
int64_t slm_llama_n_matmul_params(const slm_llama_config *c);

// One tensor of a unit: a view into the unit's FlatParameter.
typedef struct slm_param_view {
    char name[96];    // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
    int ndim;         // 1 or 2
    int64_t shape[2]; // [out, in] for weights, [C] for norms
    int64_t offset;   // elements from the start of the unit's flat buffer
    int64_t numel;
    bool weight_decay; // AdamW decays it (matmul weights) or not (norms, embedding)
} slm_param_view;

// One FSDP unit: a list of views over one FlatParameter of `numel` fp32 elements.
typedef struct slm_unit_layout {
    int n_views;
    slm_param_view *views; // owned
    int64_t numel;
} slm_unit_layout;

// Callbacks around each unit's compute (fsdp/ gathers / frees / reduce-scatters here).
// `unit` is 0..L-1 for blocks, L for the root. May be NULL. Order of one step:
//   forward:  pre_forward(L) [embedding] pre_forward(0) post_forward(0) ... pre_forward(L-1)
//             post_forward(L-1) [final norm, lm_head, loss, lm_head backward] post_forward(L)
//   backward: pre_backward(L) [lm_head + final norm grads] pre_backward(L-1) post_backward(L-1)
//             ... pre_backward(0) post_backward(0) [embedding grads] post_backward(L)
// So the root's parameters are needed from pre_forward(L) to post_forward(L) and again from
// pre_backward(L) to the final-norm backward; its grads from pre_backward(L) to
// post_backward(L). params[u] / grads[u] are read only after the unit's pre hook.
// slm_llama_decode_step calls pre_forward / post_forward in the forward order.
typedef struct slm_unit_hooks {
    void *ctx;
    void (*pre_forward)(void *ctx, int unit);
    void (*post_forward)(void *ctx, int unit);
    void (*pre_backward)(void *ctx, int unit);
    void (*post_backward)(void *ctx, int unit);
} slm_unit_hooks;

// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"), as PEFT's
// LoraLayer computes it: a targeted projection y = x W^T becomes
//   y = x W^T + s * (dropout(x) A^T) B^T,   A [r, in], B [out, r], s = alpha / r,
// with the base W frozen. Target bits in block order (SLM_LORA_Q .. SLM_LORA_DOWN); their names
// are PEFT's target_modules ("q_proj", ..., "down_proj").
enum {
    SLM_LORA_Q,
    SLM_LORA_K,
    SLM_LORA_V,
    SLM_LORA_O,
    SLM_LORA_GATE,
    SLM_LORA_UP,
    SLM_LORA_DOWN,
    SLM_LORA_N_TARGETS
};
typedef struct slm_lora_config {
    int32_t rank;     // r >= 1; 0: no LoRA
    float alpha;      // lora_alpha (> 0); the scale is alpha / r
    float dropout;    // lora_dropout in [0, 1): inverted dropout on the adapter input (training)
    uint32_t targets; // bit t set: projection t has an adapter (1u << SLM_LORA_Q, ...)
} slm_lora_config;
// "q_proj", "k_proj", ..., "down_proj" for t < SLM_LORA_N_TARGETS; NULL otherwise.
const char *slm_lora_target_name(int t);
// Parses a comma-separated target list ("q_proj,v_proj"; "all" = every projection) into bits.
// Errors: SLM_E_ARG naming the unknown or repeated name and the accepted ones.
slm_status slm_lora_parse_targets(const char *s, uint32_t *out);
// Checks r >= 1, alpha > 0 and finite, 0 <= dropout < 1, a non-empty target set.
// Errors: SLM_E_ARG naming the --lora-* option and the expectation.
slm_status slm_lora_config_validate(const slm_lora_config *lc);
// Whether two configs describe the same adapters (rank, targets; alpha, dropout to 1e-6).
bool slm_lora_config_same(const slm_lora_config *a, const slm_lora_config *b);
// Input / output features of target t of a block of config c ([out, in] = W's shape).
void slm_lora_target_shape(const slm_llama_config *c, int t, int64_t *out, int64_t *in);

typedef struct slm_lora_acts slm_lora_acts; // adapter activations (private)

typedef struct slm_llama_acts slm_llama_acts; // activation workspace (private)

typedef struct slm_llama {
    slm_llama_config cfg;
    // The device every buffer of the model lives on and every op runs on (device.h; NULL: the
    // CPU device). Set before slm_llama_init's allocation (slm_llama_init_on) and never changed.
    slm_device *dev;
    int n_units;            // L + 1
    slm_unit_layout *units; // [n_units], owned
    float **params;         // [n_units] -> [units[u].numel] f32 FlatParameter of each unit
    float **grads;          // [n_units] -> same layout, gradients (accumulated by backward)
    bool owns_buffers;      // params/grads allocated by slm_llama_init (freed by slm_llama_free)
    slm_unit_hooks hooks;
    bool activation_checkpointing; // keep block inputs only, recompute in backward
    // bf16 compute (--compute-dtype bf16): every matmul (projections, LoRA, lm_head, attention's
    // q, k, v) takes its inputs rounded to bf16 and accumulates in fp32 (kernels.h
    // slm_linear_fwd); norms, softmax, loss and the parameters stay fp32. false: all fp32.
    bool bf16_compute;
    bool loss_only;       // forward with targets computes the loss only (eval): no head backward,
                          // no slm_llama_backward possible. Default false.
    int head_chunk_rows;  // rows per lm_head + cross-entropy chunk; 0 = automatic (~16 MiB of
                          // logits, >= 256 rows). Read by slm_llama_set_shape.
    slm_llama_acts *acts; // owned
    // LoRA (slm_llama_lora_init; lora.rank == 0: none). With adapters every base weight is
    // frozen: backward computes no base gradient (grads[u] may be NULL and is never written)
    // and adds the adapters' into lora_grads. Adapter unit l holds block l's lora_A / lora_B
    // of every target, in target order (A then B), named like PEFT's keys without its
    // "base_model.model." prefix: "model.layers.0.self_attn.q_proj.lora_A.weight".
    slm_lora_config lora;
    slm_unit_layout *lora_units; // [L], owned
    float **lora_params;         // [L] -> [lora_units[l].numel] f32 adapter FlatParameter
    float **lora_grads;          // [L] -> same layout, adapter gradients (backward adds)
    bool lora_owns_buffers;      // allocated by slm_llama_lora_init (alloc)
    uint64_t lora_dropout_key;   // dropout masks of the next training forward derive from it
                                 // (slm_lora_dropout_keep); the caller sets one per micro-batch
    slm_lora_acts *lora_acts;    // owned
} slm_llama;

// Builds the unit layout for `cfg` on device `dev` (NULL: the CPU device) and, if `alloc` is
// true, allocates zeroed params and grads there (slm_dev_alloc). With alloc == false params[u] /
// grads[u] are NULL for the caller (fsdp/) to point at its own buffers (on the same device).
// params, grads, lora_params, lora_grads, the activation workspace and KV caches are device
// memory: other modules read or write them through slm_dev_copy (host addresses on the CPU
// device). Errors: slm_llama_config_validate's.
slm_status slm_llama_init_on(slm_llama *m, slm_device *dev, const slm_llama_config *cfg,
                             bool alloc);
// slm_llama_init_on on the CPU device.
slm_status slm_llama_init(slm_llama *m, const slm_llama_config *cfg, bool alloc);
void slm_llama_free(slm_llama *m);
// Finds a view by HF name; returns NULL if absent. *unit receives its unit index.
const slm_param_view *slm_llama_find(const slm_llama *m, const char *name, int *unit);
// Checks x[0, n), elements [begin, begin + n) of unit `unit` whose layout is `lay` (may be
// NULL), for NaN / inf. Errors: SLM_E_FORMAT naming `src` (file), `what` ("weights", "AdamW m"),
// the tensor, its unit and the element index inside the tensor.
slm_status slm_check_finite(const slm_unit_layout *lay, int unit, int64_t begin, const float *x,
                            int64_t n, const char *what, const char *src);

// Initializes one unit's FlatParameter `flat` [units[unit].numel], a HOST buffer, exactly as
// slm_llama_init_weights does for that unit (for callers that own the unit buffers).
void slm_llama_init_unit_weights(const slm_llama *m, uint64_t seed, int unit, float *flat);

// Seeded init (documented in docs/model.md): every matmul weight and the embedding ~ N(0,
// initializer_range), norms = 1, drawn unit by unit, view by view from one xoshiro stream per
// view seeded by (seed, unit, view index), so the result does not depend on threads or sharding.
// Units whose params[u] is NULL are skipped. Generated on the host (slm_parallel_tasks, host
// staging of at most 64 MiB or one unit) and copied to the device.
void slm_llama_init_weights(slm_llama *m, uint64_t seed);

// Attaches LoRA adapters to an initialised model (before fsdp/ takes it, if it does): builds
// the [L] adapter unit layouts and, with alloc, allocates zeroed lora_params / lora_grads and
// initialises them as PEFT does (slm_llama_lora_init_unit_weights). Errors:
// slm_lora_config_validate's.
slm_status slm_llama_lora_init(slm_llama *m, const slm_lora_config *lc, bool alloc, uint64_t seed);
// PEFT's init of adapter unit l into the HOST buffer flat [lora_units[l].numel]: A ~
// kaiming_uniform(a = sqrt 5), i.e. U(-1/sqrt(in), 1/sqrt(in)), B = 0; one xoshiro stream per A
// seeded by (seed, L + 1 + l, view index), so it does not depend on threads or sharding.
void slm_llama_lora_init_unit_weights(const slm_llama *m, uint64_t seed, int l, float *flat);
// Finds an adapter view by name ("model.layers.0.self_attn.q_proj.lora_A.weight"); NULL if
// absent. *l receives its block.
const slm_param_view *slm_llama_lora_find(const slm_llama *m, const char *name, int *l);
// The view index of target t's lora_A inside an adapter unit (lora_B is the next one); -1
// when t has no adapter.
int slm_llama_lora_view(const slm_llama *m, int t);
// Whether element i of the adapter input of target t in block l is kept by dropout under `key`
// (a counter-based hash: no state, the same mask in an activation-checkpointing recompute):
// one slm_mix64 per group of 4 elements, element i kept when its 16-bit lane is >=
// round(p * 65536) (so P(drop) is p to 1/65536). Kept elements are scaled by 1 / (1 - p).
bool slm_lora_dropout_keep(uint64_t key, int l, int t, int64_t i, float p);
// Merges the adapters into the base weights (params allocated by the caller, as for export):
// W += (alpha / r) * B A per target, as PEFT's merge_and_unload; then detaches LoRA (lora.rank
// 0, adapter buffers freed).
void slm_llama_lora_merge(slm_llama *m);
// Zeroes the adapter gradients (lora_grads that are non-NULL).
void slm_llama_lora_zero_grad(slm_llama *m);
// Parameter count of the adapters of config lc on model config c.
int64_t slm_lora_n_params(const slm_llama_config *c, const slm_lora_config *lc);

// Forward pass over tokens[B, T] (int32 ids < vocab_size). If `targets` [B, T] is non-NULL,
// returns the mean cross-entropy over targets != -1 (the ignore index) in nats and keeps
// what backward needs; otherwise returns 0. Logits of the last call are available through
// slm_llama_logits only when `keep_logits` was set in slm_llama_set_shape.
// B * T must not exceed the shape given to slm_llama_set_shape (called with B, T, false if it
// never was). Tokens / targets outside the vocabulary are fatal (the loader validates data).
// With targets (and !loss_only) the forward also runs the lm_head backward for the mean loss,
// chunk by chunk, so the [B*T, V] logits never exist (unless keep_logits).
float slm_llama_forward(slm_llama *m, const int32_t *tokens, const int32_t *targets, int B, int T);
// slm_llama_forward over packed samples: pos [B, T] is each token's position in its sample (0
// at row start and at every sample start, else the previous one's + 1; < the workspace's T):
// RoPE uses these positions and attention is confined to each sample (block-diagonal causal
// mask), so every sample computes exactly what it would alone. pos == NULL is
// slm_llama_forward. The next slm_llama_backward uses the same positions. Bad positions are
// fatal (the loader produces them).
float slm_llama_forward_packed(slm_llama *m, const int32_t *tokens, const int32_t *targets,
                               const int32_t *pos, int B, int T);
// slm_llama_forward_loss over packed samples (pos as above).
float slm_llama_forward_loss_packed(slm_llama *m, const int32_t *tokens, const int32_t *targets,
                                    const int32_t *pos, int B, int T);
// Evaluation forward: slm_llama_forward with loss_only set for this call only (no lm_head
// backward work; no slm_llama_backward may follow), m->loss_only restored. Returns the mean
// loss over targets != -1 (targets required).
float slm_llama_forward_loss(slm_llama *m, const int32_t *tokens, const int32_t *targets, int B,
                             int T);
// Backward of the last forward: ADDS d(loss * loss_scale)/d(param) into grads (so gradient
// accumulation over micro-batches is a sum; zero with slm_llama_zero_grad). At most one
// backward per forward (fatal otherwise).
void slm_llama_backward(slm_llama *m, float loss_scale);
void slm_llama_zero_grad(slm_llama *m);
// (Re)allocates activation workspace for up to B x T tokens. keep_logits: retain [B, T, V]
// logits for slm_llama_logits (tests, eval); otherwise the loss is fused and logits are
// processed in chunks.
void slm_llama_set_shape(slm_llama *m, int B, int T, bool keep_logits);
// Bytes of activation workspace currently allocated (for reports: activation checkpointing
// keeps the [L+1, B*T, C] block inputs and one block's activations instead of L blocks').
size_t slm_llama_act_bytes(const slm_llama *m);
// Estimate, in bytes (a double: configs can overflow size_t), of the activation workspace that
// slm_llama_set_shape(B, T, false) followed by a backward allocates for `c` (the layout of
// acts_new / acts_alloc_backward in llama.c, plus the lm_head gradient scratch [V, C]), with or
// without activation checkpointing. Used for the up-front memory checks of train.
double slm_llama_act_bytes_estimate(const slm_llama_config *c, int B, int T,
                                    bool activation_checkpointing);
// Logits [B, T, V] f32 of the last forward (requires keep_logits): DEVICE memory, borrowed (for
// device-side consumers; the host reads them with slm_llama_logits_to_host).
const float *slm_llama_logits(const slm_llama *m);
// Copies rows [row0, row0 + rows) of the last forward's logits (row = b * T + t; each V floats)
// into the host buffer `host` [rows, V]. Requires keep_logits and rows inside the last forward's
// B * T (assertion).
void slm_llama_logits_to_host(const slm_llama *m, int64_t row0, int64_t rows, float *host);

// KV-cache decoding for generation: cache for `max_T` positions of batch 1; k and v of every
// layer after RoPE, [L, KV, max_T, D] f32, on the model's device. Owned by the caller
// (slm_kv_cache_free).
typedef struct slm_kv_cache slm_kv_cache;
slm_kv_cache *slm_kv_cache_new(const slm_llama *m, int max_T);
// Bytes slm_kv_cache_new(m, max_T) allocates for a model of config `c` (K and V caches, RoPE
// tables, scores, per-token vectors and the logits), so callers can check memory before
// creating it.
double slm_kv_cache_bytes_estimate(const slm_llama_config *c, int64_t max_T);
void slm_kv_cache_free(slm_kv_cache *c);
// Runs one token at position `pos` (0-based, < max_T) and writes logits [V] f32 into the HOST
// buffer `logits` (the cache belongs to the same model, hence device). Positions
// must be fed in order 0, 1, ... (re-feeding pos p overwrites p and forgets later ones). The
// logits equal the full forward's at that position (up to fp32 summation order).
void slm_llama_decode_step(slm_llama *m, slm_kv_cache *c, int32_t token, int pos, float *logits);

#endif
