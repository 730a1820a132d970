// The model FLOPs a token costs (the MFU numerator). Contract in train/flops.h.
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
