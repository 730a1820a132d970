// The model FLOPs a token and an FSDP unit cost (the MFU numerator). Contract in
// train/flops.h.
#include "train/train.h"

double slm_train_flops_per_token(const slm_llama_config *c, int T) {
    // 6N: forward 2N + backward 4N multiply-adds counted as 2 FLOPs each; 12 L A T: the
    // attention score and value products (QK^T and AV), forward and backward, over the
    // attention width A (slm_train_attn_width).
    return 6.0 * (double)slm_llama_n_matmul_params(c) +
           12.0 * (double)c->num_hidden_layers * slm_train_attn_width(c) * (double)T;
}

double slm_train_attn_width(const slm_llama_config *c) {
    // An explicit head_dim: the query / key width heads x head_dim (q_proj's rows). Without one
    // the count stays the hidden size C, as it always was.
    return c->head_dim > 0 ? (double)c->num_attention_heads * (double)c->head_dim
                           : (double)c->hidden_size;
}

void slm_train_unit_flops(const slm_llama_config *c, int B, int T, bool activation_checkpointing,
                          int unit, double *fwd, double *bwd) {
    double N = (double)B * (double)T, C = c->hidden_size, V = c->vocab_size;
    int L = c->num_hidden_layers;
    if (unit == L) {
        *fwd = 6.0 * N * V * C; // lm_head forward + its backward, both inside slm_llama_forward
        *bwd = 0.0;
        return;
    }
    double per_block = ((double)slm_llama_n_matmul_params(c) - V * C) / (double)L;
    double f = 2.0 * N * per_block + 4.0 * N * (double)T * slm_train_attn_width(c);
    *fwd = f;
    *bwd = 2.0 * f + (activation_checkpointing && unit != L - 1 ? f : 0.0);
}
