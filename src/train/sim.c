// --simulate-compute (slm_train_opts.simulate_gflops): the unit hooks of a forward + backward
// without the arithmetic, each unit's compute replaced by a sleep of its FLOPs / rate. Used by
// the emulated cluster of bench/scaling/ (docs/scaling.md) so that many ranks fit on few cores
// while every collective stays real.
#include <errno.h>
#include <time.h>

#include "train/train.h"

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

// Sleeps until `start` + seconds (absolute CLOCK_MONOTONIC deadline, so EINTR restarts lose
// nothing); returns the seconds asked for.
static double sleep_from(struct timespec start, double seconds) {
    if (seconds <= 0) return 0.0;
    double s = (double)start.tv_sec + 1e-9 * (double)start.tv_nsec + seconds;
    struct timespec until = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
    return seconds;
}

static struct timespec now_mono(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t;
}

#define HOOK(m, which, u)                                                                          \
    do {                                                                                           \
        if ((m)->hooks.which) (m)->hooks.which((m)->hooks.ctx, (u));                               \
    } while (0)

double slm_train_sim_forward_backward(slm_llama *m, int B, int T, double gflops) {
    const slm_llama_config *c = &m->cfg;
    int L = c->num_hidden_layers;
    double rate = gflops * 1e9, slept = 0.0, f, b;
    bool ck = m->activation_checkpointing;
    // Forward (slm_llama_forward): root pre hook, embedding (no matmul), blocks, then the head
    // (forward and backward) before the root's post hook.
    HOOK(m, pre_forward, L);
    for (int l = 0; l < L; l++) {
        HOOK(m, pre_forward, l);
        slm_train_unit_flops(c, B, T, ck, l, &f, &b);
        slept += sleep_from(now_mono(), f / rate);
        HOOK(m, post_forward, l);
    }
    slm_train_unit_flops(c, B, T, ck, L, &f, &b);
    slept += sleep_from(now_mono(), f / rate);
    HOOK(m, post_forward, L);
    // Backward (slm_llama_backward): root pre hook (lm_head gradient add, final norm), blocks in
    // reverse, embedding gradient, root post hook.
    HOOK(m, pre_backward, L);
    for (int l = L - 1; l >= 0; l--) {
        HOOK(m, pre_backward, l);
        slm_train_unit_flops(c, B, T, ck, l, &f, &b);
        slept += sleep_from(now_mono(), b / rate);
        HOOK(m, post_backward, l);
    }
    HOOK(m, post_backward, L);
    return slept;
}
