// The checkpoint schedule used by the training loop: when to save, error policy, stall stats.
#include "ckpt/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

struct slm_ckpt_sched {
    slm_ckpt_policy p;
    char *root;
    int rank;
    slm_ckpt_saver *saver;
    slm_ckpt_uploader *up; // --ckpt-uri (NULL: local only)
    double last_save_t;    // slm_time_s() of the last save (or of creation)
    int64_t n_saves, n_failed;
    int64_t last_asked; // step of the last save started (-1: none)
    // The newest failed save's message (agreed: "rank R failed: ..." on the other ranks), so
    // the final "not saved" error names its cause and whose it is, not only "see above".
    char last_err[768];
    double stall_total_s, stall_max_s;
};

slm_status slm_ckpt_sched_new(const slm_ckpt_policy *p, int rank, int world, bool no_write,
                              slm_ckpt_sched **out) {
    *out = NULL;
    slm_ckpt_saver_opts o = {.root = p->root,
                             .sync = p->sync,
                             .keep = p->keep,
                             .rank = rank,
                             .world = world,
                             .no_write = no_write};
    slm_ckpt_saver *sv = NULL;
    slm_status st = slm_ckpt_saver_new(&o, &sv);
    if (st) return st;
    slm_ckpt_uploader *up = NULL;
    if (p->remote_uri) {
        slm_ckpt_upload_opts uo = {.uri = p->remote_uri,
                                   .root = p->root,
                                   .rank = rank,
                                   .world = world,
                                   .keep = p->keep,
                                   .prefix_shards =
                                       p->remote_prefix_shards > 0 ? p->remote_prefix_shards : 1,
                                   .meta = p->meta,
                                   .preempt_grace_s = p->preempt_grace_s};
        st = slm_ckpt_uploader_new(&uo, &up);
        if (st) {
            slm_ckpt_saver_free(sv);
            return st;
        }
    }
    slm_ckpt_sched *s = slm_xcalloc(1, sizeof *s);
    s->p = *p;
    s->root = slm_xstrdup(p->root);
    s->p.root = s->root;
    s->rank = rank;
    s->saver = sv;
    s->up = up;
    s->p.remote_uri = NULL; // borrowed strings are not kept
    s->p.meta = NULL;
    s->last_save_t = slm_time_s();
    s->last_asked = -1;
    *out = s;
    return SLM_OK;
}

bool slm_ckpt_sched_due(slm_ckpt_sched *s, int64_t step, bool force) {
    if (force) return true;
    if (s->p.every_steps > 0 && step % s->p.every_steps == 0) return true;
    if (s->p.every_minutes > 0) {
        int64_t due = slm_time_s() - s->last_save_t >= s->p.every_minutes * 60.0;
        slm_dist_bcast(&due, 1, SLM_DTYPE_I64, 0, "checkpoint schedule");
        return due != 0;
    }
    return false;
}

// Applies --on-ckpt-error to a failed save.
static slm_status on_error(slm_ckpt_sched *s, slm_status st) {
    if (!st) return SLM_OK;
    s->n_failed++;
    snprintf(s->last_err, sizeof s->last_err, "%s", slm_errmsg());
    if (s->p.abort_on_error) return st;
    slm_error("%s (training continues: --on-ckpt-error continue)", slm_errmsg());
    return SLM_OK;
}

slm_status slm_ckpt_sched_step(slm_ckpt_sched *s, bool save, const slm_ckpt_meta *meta,
                               const slm_unit_layout *layout, int n_units,
                               const slm_ckpt_shard *shards) {
    slm_status st = slm_ckpt_saver_poll(s->saver);
    if (st) return on_error(s, st);
    if (s->up) slm_ckpt_uploader_step(s->up, slm_ckpt_saver_last_committed(s->saver));
    if (!save) return SLM_OK;
    s->last_asked = meta->step;
    st = slm_ckpt_saver_save(s->saver, meta, layout, n_units, shards);
    double stall = slm_ckpt_saver_last_stall_s(s->saver);
    s->n_saves++;
    s->stall_total_s += stall;
    if (stall > s->stall_max_s) s->stall_max_s = stall;
    s->last_save_t = slm_time_s();
    return on_error(s, st);
}

void slm_ckpt_sched_fence(slm_ckpt_sched *s) {
    if (!s) return;
    double before = slm_ckpt_saver_last_stall_s(s->saver);
    slm_ckpt_saver_fence(s->saver);
    double wait = slm_ckpt_saver_last_stall_s(s->saver) - before;
    s->stall_total_s += wait;
    if (slm_ckpt_saver_last_stall_s(s->saver) > s->stall_max_s)
        s->stall_max_s = slm_ckpt_saver_last_stall_s(s->saver);
}

slm_status slm_ckpt_sched_finish(slm_ckpt_sched *s) {
    slm_status st = on_error(s, slm_ckpt_saver_finish(s->saver));
    if (!st && s->up) {
        slm_ckpt_uploader_step(s->up, slm_ckpt_saver_last_committed(s->saver));
        st = slm_ckpt_uploader_finish(s->up);
    }
    if (st || s->last_asked < 0) return st;
    // The last save holds the run's final weights: under --on-ckpt-error continue its failure
    // was only logged, but a run must not end without them.
    int64_t done = slm_ckpt_saver_last_committed(s->saver);
    if (done == s->last_asked) return SLM_OK;
    if (done < 0)
        return slm_fail(SLM_E_IO,
                        "%s: the final checkpoint (step %lld) was not saved and no checkpoint was "
                        "committed: the run's weights are lost; the failure: %s",
                        s->root, (long long)s->last_asked,
                        s->last_err[0] ? s->last_err : "not reported");
    return slm_fail(SLM_E_IO,
                    "%s: the final checkpoint (step %lld) was not saved; the newest committed "
                    "one is step_%08lld; the failure: %s",
                    s->root, (long long)s->last_asked, (long long)done,
                    s->last_err[0] ? s->last_err : "not reported");
}

void slm_ckpt_sched_stats(const slm_ckpt_sched *s, int64_t *n_saves, double *stall_total_s,
                          double *stall_max_s) {
    *n_saves = slm_ckpt_saver_n_committed(s->saver);
    *stall_total_s = s->stall_total_s;
    *stall_max_s = s->stall_max_s;
}

void slm_ckpt_sched_io_stats(const slm_ckpt_sched *s, int64_t *last_step, int64_t *bytes,
                             double *last_duration_s) {
    *last_step = slm_ckpt_saver_last_committed(s->saver);
    slm_ckpt_saver_io_stats(s->saver, bytes, last_duration_s);
}

int64_t slm_ckpt_sched_n_failed(const slm_ckpt_sched *s) {
    return s->n_failed;
}

void slm_ckpt_sched_settle(slm_ckpt_sched *s, bool collective) {
    if (!s) return;
    // The run's own error stays the thread's message.
    char *msg = slm_xstrdup(slm_errmsg());
    slm_ckpt_saver_settle(s->saver, collective);
    slm_set_errmsg(msg);
    free(msg);
}

void slm_ckpt_sched_free(slm_ckpt_sched *s) {
    if (!s) return;
    slm_ckpt_uploader_free(s->up);
    slm_ckpt_saver_free(s->saver);
    free(s->root);
    free(s);
}
