// A resume keeps the run's batch geometry: the global batch (sequences per optimizer step) and
// the sequence length of the run that saved the checkpoint (docs/formats.md "Batch geometry");
// and another --steps re-stretches the LR schedule with a warning. Contract in train_internal.h.
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "train/train_internal.h"

int64_t slm_batch_global(slm_batch_geom g) {
    return (int64_t)g.B * g.W * g.K;
}

void slm_batch_geom_describe(slm_batch_geom g, char *buf, size_t n) {
    snprintf(buf, n, "--batch %d x %d rank%s x --grad-accum %d = %" PRId64 " sequences", g.B, g.W,
             g.W == 1 ? "" : "s", g.K, slm_batch_global(g));
}

// How to keep `G` sequences per step at world W with per-rank batch B: the --grad-accum when
// B x W divides G, else --batch / --grad-accum pairs (per-rank batches <= B first, so the
// activation memory stays what was sized), else the world sizes that can.
static void batch_fix(int64_t G, int B, int W, char *buf, size_t n) {
    size_t u = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (u < n) u += (size_t)snprintf(buf + u, n - u, __VA_ARGS__);                             \
    } while (0)
    if (G % ((int64_t)B * W) == 0) {
        ADD("--grad-accum %" PRId64 " (with --batch %d)", G / ((int64_t)B * W), B);
        return;
    }
    if (G % W == 0) {
        int64_t P = G / W; // sequences per rank and step: --batch b x --grad-accum P / b
        int shown = 0;
        for (int64_t b = P < B ? P : B; b >= 1 && shown < 4; b--)
            if (P % b == 0)
                ADD("%s--batch %" PRId64 " --grad-accum %" PRId64, shown++ ? " or " : "", b, P / b);
        return;
    }
    // no (batch, grad-accum) pair at this world: the nearest world sizes dividing G
    int64_t below = 0, above = 0;
    for (int64_t w = W - 1; w >= 1 && !below; w--)
        if (G % w == 0) below = w;
    for (int64_t w = W + 1; w <= G && !above; w++)
        if (G % w == 0) above = w;
    ADD("no --batch / --grad-accum pair keeps %" PRId64 " sequences at %d ranks (%" PRId64
        " is not a multiple of %d); run at a world size that divides it (",
        G, W, G, W);
    if (below) ADD("%" PRId64 " rank%s", below, below == 1 ? "" : "s");
    if (above) ADD("%s%" PRId64 " ranks", below ? " or " : "", above);
    ADD(")");
#undef ADD
}

slm_status slm_train_check_resume_batch(const slm_ckpt_meta *M, const char *ckpt_dir,
                                        slm_batch_geom now, bool allow_change, bool *changed) {
    *changed = false;
    if (!M->has_batch) return SLM_OK; // an older manifest: nothing recorded to compare
    slm_batch_geom saved = {M->batch, M->seq, M->grad_accum, M->world};
    if (saved.T != now.T)
        return slm_fail(SLM_E_ARG,
                        "checkpoint %s was saved by a run with --seq %d; this run has --seq %d: "
                        "the saved loader position counts windows of %d tokens, so the run "
                        "would continue at another place in the data, on another sequence "
                        "length; resume with --seq %d (--allow-batch-change does not cover "
                        "--seq)",
                        ckpt_dir, saved.T, now.T, saved.T, saved.T);
    int64_t G = slm_batch_global(saved);
    if (G == slm_batch_global(now)) return SLM_OK; // resharding: the same sequences per step
    if (allow_change) {
        *changed = true;
        return SLM_OK;
    }
    char a[128], b[128], fix[512];
    slm_batch_geom_describe(saved, a, sizeof a);
    slm_batch_geom_describe(now, b, sizeof b);
    batch_fix(G, now.B, now.W, fix, sizeof fix);
    return slm_fail(SLM_E_ARG,
                    "checkpoint %s was saved with a global batch of %s; this run's is %s: "
                    "resuming would change the optimisation (sequences per step, gradient "
                    "noise, tokens per step) from the run that saved it. To keep %" PRId64
                    " sequences at %d rank%s: %s; or pass --allow-batch-change to continue with "
                    "the new global batch",
                    ckpt_dir, a, b, G, now.W, now.W == 1 ? "" : "s", fix);
}

slm_status slm_train_check_resume_fit(const char *path, const slm_train_opts *o, slm_batch_geom now,
                                      float min_lr, slm_ckpt **ckpt, bool *changed,
                                      slm_batch_geom *saved) {
    *changed = false;
    slm_status st = slm_ckpt_open(path, ckpt);
    const slm_ckpt_meta *M = st ? NULL : slm_ckpt_get_meta(*ckpt);
    if (M && !M->has_batch)
        slm_warn("checkpoint %s records no batch geometry (written before shardlm recorded "
                 "it): the global batch and --seq of this run (--batch %d x %d rank%s x "
                 "--grad-accum %d, --seq %d) are not checked against the run that saved it",
                 slm_ckpt_dir(*ckpt), now.B, now.W, now.W == 1 ? "" : "s", now.K, now.T);
    if (M)
        st = slm_train_check_resume_batch(M, slm_ckpt_dir(*ckpt), now, o->allow_batch_change,
                                          changed);
    if (M && *changed) {
        *saved = (slm_batch_geom){M->batch, M->seq, M->grad_accum, M->world};
        char a[128], b[128];
        slm_batch_geom_describe(*saved, a, sizeof a);
        slm_batch_geom_describe(now, b, sizeof b);
        slm_warn("--allow-batch-change: the global batch changes from %s (checkpoint %s, "
                 "step %lld) to %s: the optimisation from here differs from the run that "
                 "saved it",
                 a, slm_ckpt_dir(*ckpt), (long long)M->step, b);
    }
    // Another --steps stretches or squeezes the cosine schedule from the resumed step on
    // (slm_lr_at follows the new total): allowed, but never silent.
    if (M && !st && M->lr_total > 0 && M->lr_total != o->steps) {
        float was = slm_lr_at(M->lr_step, M->lr_warmup, M->lr_total, M->adamw.lr_peak, M->lr_min);
        float now_lr = slm_lr_at(M->lr_step, o->warmup, o->steps, o->adamw.lr_peak, min_lr);
        slm_warn("--steps %lld differs from the %lld steps checkpoint %s (step %lld) was "
                 "scheduled for: the LR schedule is re-stretched to --steps %lld; the LR at "
                 "the resumed step is %.3e (%.3e under --steps %lld)%s",
                 (long long)o->steps, (long long)M->lr_total, slm_ckpt_dir(*ckpt),
                 (long long)M->step, (long long)o->steps, now_lr, was, (long long)M->lr_total,
                 M->step >= M->lr_total ? ", where that run's cosine had ended" : "");
    }
    if (st) st = slm_fail_wrap(st, "--resume %s", path);
    return st;
}
