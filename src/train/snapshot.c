// Node-local snapshots (--snapshot-every-steps N): the hook that keeps the newest sharded state
// in shared memory (/dev/shm) in checkpoint format. Its directory is snapdir.c's; the restart
// rule that prefers a snapshot to an older disk checkpoint is resume.c's. Contract in train.h;
// docs/operations.md "Snapshots".
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/ckpt.h"
#include "dist/dist.h"
#include "train/train.h"
#include "train/train_internal.h"

// ---------------------------------------------------------------------------------------------
// The hook

// The hook's state is the snapshot schedule, in the caller's slm_train_std_hooks (snapshot):
// made by on_start (NULL when no snapshots are taken), freed by on_finish.

static slm_status snap_start(void *ctx, slm_trainer *tr) {
    slm_ckpt_sched **snap = ctx;
    const slm_train_opts *o = tr->o;
    *snap = NULL;
    if (!o->out_dir || o->snapshot_every_steps <= 0) return SLM_OK;
    if (!tr->snap_one_host) {
        if (tr->rank == 0)
            slm_info("--snapshot-every-steps: the ranks run on several hosts; node-local "
                     "snapshots cannot restore such a world, so none are taken");
        return SLM_OK;
    }
    char *root = slm_train_snapshot_root(o);
    slm_status st =
        slm_dist_agree(tr->rank == 0 ? slm_snapdir_claim(o, root, !tr->resume_path) : SLM_OK);
    slm_ckpt_policy pol = {.root = root,
                           .every_steps = o->snapshot_every_steps,
                           .keep = 1,
                           .sync = true,
                           .abort_on_error = false};
    if (!st) st = slm_ckpt_sched_new(&pol, tr->rank, tr->W, slm_fsdp_is_replica(&tr->fsdp), snap);
    if (!st && tr->rank == 0)
        slm_info("snapshots: every %lld steps into %s (node-local, newest kept)",
                 (long long)o->snapshot_every_steps, root);
    free(root);
    return st;
}

static slm_status snap_step(void *ctx, slm_trainer *tr, const slm_step_metrics *m) {
    slm_ckpt_sched *snap = *(slm_ckpt_sched **)ctx;
    if (!snap) return SLM_OK;
    int NU = 0;
    const slm_unit_layout *lay = slm_trainer_ckpt_layout(tr, &NU); // LoRA: the adapters
    slm_ckpt_meta meta;
    slm_ckpt_shard *sh = slm_xcalloc((size_t)NU, sizeof *sh);
    slm_trainer_ckpt_state(tr, tr->step, &meta, sh);
    slm_status st =
        slm_ckpt_sched_step(snap, slm_ckpt_sched_due(snap, m->step, false), &meta, lay, NU, sh);
    free(sh);
    return st;
}

static slm_status snap_finish(void *ctx, slm_trainer *tr, slm_status st) {
    slm_ckpt_sched **snap = ctx;
    if (!*snap) return SLM_OK;
    slm_status r = st ? SLM_OK : slm_ckpt_sched_finish(*snap);
    if (st) slm_ckpt_sched_settle(*snap, tr->W == 1);
    // A snapshot is a cache: its last save failing (a full /dev/shm, ...) is no reason to fail a
    // run whose disk checkpoints are fine (the ranks agreed on r, so all of them go on).
    if (r) {
        if (tr->rank == 0)
            slm_warn("snapshots: the last snapshot (step %lld) under %s was not saved (see the "
                     "error above); snapshots are a cache, the run's weights are in its disk "
                     "checkpoints",
                     (long long)tr->step, tr->o->snapshot_dir ? tr->o->snapshot_dir : "/dev/shm");
        r = SLM_OK;
    }
    int64_t n;
    double stall_total, stall_max;
    slm_ckpt_sched_stats(*snap, &n, &stall_total, &stall_max);
    slm_ckpt_sched_free(*snap);
    *snap = NULL;
    if (tr->rank == 0)
        slm_info("snapshots: %lld taken, %.1f ms max, %.1f ms total", (long long)n, stall_max * 1e3,
                 stall_total * 1e3);
    // A run that ended without an error and whose final checkpoint is committed on disk (as new
    // as any snapshot): the shared memory goes back.
    char name[64];
    snprintf(name, sizeof name, "checkpoints/step_%08lld", (long long)tr->step);
    char *final = slm_path_join(tr->o->out_dir, name);
    if (!st && !r && tr->rank == 0 && slm_is_dir(final)) {
        char *root = slm_train_snapshot_root(tr->o);
        if (slm_snapdir_owner(tr->o, root, NULL, 0) > 0) slm_snapdir_remove(tr->o, root);
        free(root);
    }
    free(final);
    return r;
}

slm_status slm_train_add_snapshot_hook(slm_train_opts *o, slm_train_std_hooks *h) {
    if (o->snapshot_every_steps <= 0) return SLM_OK;
    slm_train_hook k = {.name = "snapshots",
                        .ctx = &h->snapshot,
                        .on_start = snap_start,
                        .on_step = snap_step,
                        .on_finish = snap_finish};
    return slm_train_attach(o, &k);
}
