// The linear projections of a block with their LoRA adapters: the one place where a
// projection's forward and backward are written, so llama.c's block functions read as the
// architecture (norm, projections, attention, projection; norm, projections, SwiGLU,
// projection) whatever is trained. Contract in model_internal.h.
#include "model_internal.h"

void slm_proj_fwd(const slm_proj_ctx *pc, int t, const float *x, float *y, bool acc) {
    int64_t out, in;
    slm_lora_target_shape(&pc->m->cfg, t, &out, &in);
    const float *W = pc->p + pc->m->units[pc->l].views[slm_proj_view(t)].offset;
    if (y) slm_dev_linear_fwd(pc->m->dev, pc->m->bf16_compute, y, x, W, pc->N, in, out, acc);
    slm_lora_fwd(pc->m, pc->l, t, pc->blk, x, y, pc->N);
}

void slm_proj_bwd(const slm_proj_ctx *pc, const float *x, float *dx, int n,
                  const slm_proj_dy *dys) {
    const slm_param_view *vw = pc->m->units[pc->l].views;
    SLM_ASSERT(n > 0);
    int64_t out, in, in0;
    slm_lora_target_shape(&pc->m->cfg, dys[0].t, &out, &in0);
    slm_dev_zero(pc->m->dev, dx, (size_t)(pc->N * in0) * sizeof(float));
    for (int i = 0; i < n; i++) {
        int64_t off = vw[slm_proj_view(dys[i].t)].offset;
        slm_lora_target_shape(&pc->m->cfg, dys[i].t, &out, &in);
        SLM_ASSERT(in == in0); // one input shared by all
        slm_dev_linear_bwd(pc->m->dev, pc->m->bf16_compute, dx, pc->g ? pc->g + off : NULL,
                           dys[i].dy, x, pc->p + off, pc->N, in, out);
    }
    for (int i = 0; i < n; i++)
        slm_lora_bwd(pc->m, pc->l, dys[i].t, pc->blk, x, dys[i].dy, dx, pc->N);
}
