// The library's step hooks: the stop flag, metrics.jsonl and checkpoint scheduling, attached to
// the training loop by whoever runs it (tools/cmd_train.c). Contract in train.h.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "train/train.h"
#include "train/train_internal.h"

// ---------------------------------------------------------------------------------------------
// Stop flag

static bool stop_flag(void *ctx) {
    (void)ctx;
    return slm_stop_requested();
}

slm_status slm_train_add_stop_hook(slm_train_opts *o) {
    slm_train_hook h = {.name = "stop flag", .want_stop = stop_flag};
    return slm_train_attach(o, &h);
}

// ---------------------------------------------------------------------------------------------
// metrics.jsonl (rank 0 with out_dir)

static void jsonl_num(slm_buf *b, const char *key, double x) {
    if (isfinite(x))
        slm_buf_appendf(b, ",\"%s\":%.9g", key, x);
    else
        slm_buf_appendf(b, ",\"%s\":null", key);
}

static void put_line(FILE *f, slm_buf *b) {
    fputs(b->data, f);
    fflush(f);
    slm_buf_free(b);
}

static slm_status metrics_start(void *ctx, slm_trainer *tr) {
    FILE **fp = ctx;
    const slm_train_opts *o = tr->o;
    *fp = NULL;
    if (!o->out_dir || tr->rank != 0) return SLM_OK;
    char *p = slm_path_join(o->out_dir, "metrics.jsonl");
    *fp = fopen(p, "a"); // the open phase emptied it for a fresh run
    slm_status st = *fp ? SLM_OK : slm_fail(SLM_E_IO, "%s: cannot open for writing", p);
    free(p);
    if (st) return st;
    slm_buf b = {0};
    slm_buf_appendf(&b,
                    "{\"event\":\"start\",\"model\":\"%s\",\"n_params\":%lld,\"batch\":%d,"
                    "\"seq\":%d,\"grad_accum\":%d,\"steps\":%lld,\"warmup\":%lld,\"lr\":%.9g,"
                    "\"min_lr\":%.9g,\"weight_decay\":%.9g,\"grad_clip\":%.9g,\"seed\":%llu,"
                    "\"threads\":%d,\"peak_gflops\":%.6g,\"flops_per_token\":%.9g}\n",
                    o->model, (long long)slm_llama_n_params(&tr->cfg), tr->B, tr->T, tr->K,
                    (long long)o->steps, (long long)o->warmup, (double)o->adamw.lr_peak,
                    (double)tr->min_lr, (double)o->adamw.weight_decay, (double)o->grad_clip,
                    (unsigned long long)o->seed, omp_get_max_threads(), tr->peak, tr->fpt);
    put_line(*fp, &b);
    return SLM_OK;
}

static slm_status metrics_step(void *ctx, slm_trainer *tr, const slm_step_metrics *s) {
    (void)tr;
    FILE *f = *(FILE **)ctx;
    if (!f) return SLM_OK;
    slm_buf b = {0};
    slm_buf_appendf(&b, "{\"event\":\"step\",\"step\":%lld", (long long)s->step);
    jsonl_num(&b, "loss", s->loss);
    jsonl_num(&b, "lr", s->lr);
    jsonl_num(&b, "grad_norm", s->grad_norm);
    jsonl_num(&b, "tokens_per_s", s->tokens_per_s);
    jsonl_num(&b, "mfu", s->mfu);
    jsonl_num(&b, "ms_per_step", s->ms_per_step);
    jsonl_num(&b, "val_loss", s->val_loss);
    slm_buf_appendf(&b, ",\"tokens\":%lld", (long long)s->tokens_seen);
    jsonl_num(&b, "elapsed_s", s->elapsed_s);
    if (s->skipped) // --on-nonfinite skip
        slm_buf_appendf(&b, ",\"skipped\":true,\"nonfinite_skips\":%lld",
                        (long long)s->nonfinite_skips);
    if (s->loss_spike) jsonl_num(&b, "loss_spike_z", s->loss_z);
    slm_buf_appendf(&b, "}\n");
    put_line(f, &b);
    return SLM_OK;
}

static slm_status metrics_finish(void *ctx, slm_trainer *tr, slm_status st) {
    FILE **fp = ctx;
    if (!*fp) return SLM_OK;
    if (!st) {
        const slm_train_result *r = slm_trainer_result(tr);
        slm_buf b = {0};
        slm_buf_appendf(&b, "{\"event\":\"end\",\"steps\":%lld", (long long)r->steps_done);
        jsonl_num(&b, "loss", r->final_loss);
        jsonl_num(&b, "val_loss", r->final_val_loss);
        jsonl_num(&b, "tokens_per_s", r->tokens_per_s);
        jsonl_num(&b, "mfu", r->mfu);
        slm_buf_appendf(&b, ",\"interrupted\":%s}\n", r->interrupted ? "true" : "false");
        put_line(*fp, &b);
    }
    fclose(*fp);
    *fp = NULL;
    return SLM_OK;
}

slm_status slm_train_add_metrics_hook(slm_train_opts *o, slm_train_std_hooks *h) {
    slm_train_hook k = {.name = "metrics.jsonl",
                        .ctx = &h->metrics,
                        .on_start = metrics_start,
                        .on_step = metrics_step,
                        .on_finish = metrics_finish};
    return slm_train_attach(o, &k);
}

// ---------------------------------------------------------------------------------------------
// Checkpoints (out_dir/checkpoints)

static slm_status ckpt_start(void *ctx, slm_trainer *tr) {
    slm_ckpt_sched **cs = ctx;
    const slm_train_opts *o = tr->o;
    *cs = NULL;
    if (!o->out_dir) return SLM_OK;
    // Every rank writes its shard file, except replicas (NO_SHARD / HYBRID_SHARD shard groups
    // > 0), whose shards equal shard group 0's.
    char *root = slm_path_join(o->out_dir, "checkpoints");
    // The run's identity (model config, tokenizer) for --ckpt-uri's check of the remote prefix.
    slm_ckpt_meta meta;
    slm_ckpt_shard *sh = slm_xcalloc((size_t)tr->model.n_units, sizeof *sh);
    slm_trainer_ckpt_state(tr, tr->step, &meta, sh);
    free(sh);
    slm_ckpt_policy pol = {.root = root,
                           .every_steps = o->ckpt_every_steps,
                           .every_minutes = o->ckpt_every_minutes,
                           .keep = o->ckpt_keep,
                           .sync = o->ckpt_sync,
                           .abort_on_error = o->ckpt_abort_on_error,
                           .remote_uri = o->ckpt_uri,
                           .remote_prefix_shards = o->s3_prefix_shards,
                           .meta = &meta};
    slm_status st = slm_ckpt_sched_new(&pol, tr->rank, tr->W, slm_fsdp_is_replica(&tr->fsdp), cs);
    free(root);
    return st;
}

// Polls the pending checkpoint and, if `save`, starts one of the current state.
static slm_status ckpt_poll(slm_ckpt_sched *cs, slm_trainer *tr, bool save) {
    slm_ckpt_meta meta;
    int NU = 0;
    const slm_unit_layout *lay = slm_trainer_ckpt_layout(tr, &NU);
    slm_ckpt_shard *sh = slm_xcalloc((size_t)NU, sizeof *sh);
    slm_trainer_ckpt_state(tr, tr->step, &meta, sh);
    slm_status st = slm_ckpt_sched_step(cs, save, &meta, lay, NU, sh);
    free(sh);
    return st;
}

static void ckpt_fence(void *ctx, slm_trainer *tr) {
    (void)tr;
    slm_ckpt_sched_fence(*(slm_ckpt_sched **)ctx); // an async save may still copy params / m / v
}

static slm_status ckpt_step(void *ctx, slm_trainer *tr, const slm_step_metrics *m) {
    slm_ckpt_sched *cs = *(slm_ckpt_sched **)ctx;
    if (!cs) return SLM_OK;
    slm_status st = ckpt_poll(cs, tr, slm_ckpt_sched_due(cs, m->step, false));
    slm_trainer_fault_after_ckpt(tr);
    return st;
}

static void ckpt_summary(const slm_ckpt_sched *cs, const char *out_dir) {
    int64_t n_saves;
    double stall_total, stall_max;
    slm_ckpt_sched_stats(cs, &n_saves, &stall_total, &stall_max);
    int64_t n_failed = slm_ckpt_sched_n_failed(cs);
    char failed[64] = "";
    if (n_failed)
        snprintf(failed, sizeof failed, " (%lld failed, see the errors above)",
                 (long long)n_failed);
    slm_info("checkpoints: %lld saved%s under %s/checkpoints, training stall %.1f ms max, %.1f "
             "ms total",
             (long long)n_saves, failed, out_dir, stall_max * 1e3, stall_total * 1e3);
}

// The final state (end, --max-minutes or a stop) is always checkpointed. On an error exit a
// save that finished writing is committed when every rank gets here together (a world of one,
// a non-finite loss agreed by the all-reduce), otherwise discarded with a warning.
static slm_status ckpt_finish(void *ctx, slm_trainer *tr, slm_status st) {
    slm_ckpt_sched **cs = ctx;
    if (!*cs) return SLM_OK;
    slm_status r = SLM_OK;
    if (st) {
        slm_ckpt_sched_settle(*cs, tr->W == 1 || st == SLM_E_NUMERIC);
    } else {
        r = ckpt_poll(*cs, tr, true);
        if (!r) r = slm_ckpt_sched_finish(*cs);
        if (!r) ckpt_summary(*cs, tr->o->out_dir);
        if (r) slm_ckpt_sched_settle(*cs, tr->W == 1);
    }
    slm_trainer_fault_after_ckpt(tr);
    slm_ckpt_sched_free(*cs); // joins a background write before the shards are freed
    *cs = NULL;
    return r;
}

slm_status slm_train_add_ckpt_hook(slm_train_opts *o, slm_train_std_hooks *h) {
    slm_train_hook k = {.name = "checkpoints",
                        .ctx = &h->ckpt,
                        .on_start = ckpt_start,
                        .before_update = ckpt_fence,
                        .on_step = ckpt_step,
                        .on_finish = ckpt_finish};
    return slm_train_attach(o, &k);
}

slm_status slm_train_add_std_hooks(slm_train_opts *o, slm_train_std_hooks *h) {
    slm_status st = slm_train_add_stop_hook(o);
    if (!st) st = slm_train_add_ckpt_hook(o, h);
    if (!st) st = slm_train_add_metrics_hook(o, h);
    if (!st) st = slm_train_add_heartbeat_hook(o);
    if (!st) st = slm_train_add_snapshot_hook(o);
    return st;
}
