// Training: options and their defaults, hook registration, the stop flag, and slm_train_run
// composing the phases of trainer.c (open, init, step, finish). Hooks in hooks.c. Contract in
// train.h.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "dist/dist.h"
#include "train/train.h"
#include "train/train_internal.h"
#include "ckpt/ckpt.h"

// The stop flag is base/'s (slm_stop_*): these name the trainer's messages. A stop is honoured at
// the next micro-batch or step boundary (saved, resumable); a second SIGINT exits at once.
void slm_train_install_signal_handlers(void) {
    slm_stop_install("\nshardlm: stop requested: stopping at the next micro-batch boundary "
                     "(interrupt again to exit at once, without saving)\n",
                     "\nshardlm: second interrupt: exiting now without saving (the last "
                     "committed checkpoint is kept)\n");
}

void slm_train_request_stop(void) {
    slm_stop_request();
}
bool slm_train_stop_requested(void) {
    return slm_stop_requested();
}
void slm_train_reset_stop(void) {
    slm_stop_reset();
}

void slm_train_opts_default(slm_train_opts *o) {
    memset(o, 0, sizeof *o);
    slm_fsdp_opts_default(&o->fsdp);        // fsdp/ owns its options' defaults
    slm_opt_defaults(slm_train_options, o); // the rest: the option table (options.c)
}

slm_status slm_train_attach(slm_train_opts *o, const slm_train_hook *h) {
    if (o->n_hooks >= SLM_TRAIN_MAX_HOOKS)
        return slm_fail(SLM_E_ARG, "too many step hooks (at most %d)", SLM_TRAIN_MAX_HOOKS);
    o->hooks[o->n_hooks++] = *h;
    return SLM_OK;
}

slm_status slm_train_add_hook(slm_train_opts *o, slm_step_hook_fn fn, void *ctx) {
    slm_train_hook h = {.name = "step hook", .ctx = ctx, .observe = fn};
    return slm_train_attach(o, &h);
}

slm_status slm_train_run(const slm_train_opts *o, slm_train_result *res) {
    slm_trainer *tr = NULL;
    slm_status st = slm_train_open(o, &tr);
    if (!st) st = slm_train_init(tr);
    while (!st && !slm_train_done(tr)) {
        slm_step_metrics m;
        st = slm_train_step(tr, &m);
    }
    st = slm_train_finish(tr, st);
    if (res && tr && (st == SLM_OK || st == SLM_E_INTERRUPTED)) *res = *slm_trainer_result(tr);
    slm_train_close(tr);
    return st;
}
