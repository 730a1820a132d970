// The resume decision: which checkpoint a training run continues from, decided here once, from
// the three kinds of candidate (ckpt/'s pick finds each kind's newest that verifies; `latest` is
// only a hint). Rank 0 decides, the other ranks get its pick. The rules:
//  - No --resume: a fresh start. A run directory whose checkpoints/ holds step_N directories or a
//    save every rank wrote but nobody committed is never trained over silently: refused, naming
//    --resume auto and --train-from-scratch; --train-from-scratch moves them to
//    checkpoints.replaced-DATE (nothing is deleted).
//  - --resume PATH: that checkpoint (a step directory or an s3:// step URI), whatever else
//    exists; --verify-on-resume verifies it in full first. A pending save is left alone (warned).
//  - --resume auto (needs --out):
//    1. local: a pending save is committed first (it is the newest); then the newest committed
//       RUN_DIR/checkpoints/step_N that verifies (with --verify-on-resume every file's XXH64);
//       `latest` is repaired to name it. None that verifies: an error, unless (2) finds one.
//       No checkpoint at all: a fresh start (refused while a pending save could not be
//       committed: training from step 0 would sweep it away).
//    2. remote (--ckpt-uri): the newest step_N under the prefix that verifies and is newer than
//       the local pick; it wins when found.
//    3. snapshot (--snapshot-every-steps, every rank on one host): the newest node-local
//       snapshot that verifies in full and was saved by this world size and model; it wins
//       when newer than the pick of (1) and (2), which must exist (a snapshot alone never
//       resumes a run: it is a cache of one).
//  - Rank 0's pick (local or remote, and its step) is broadcast; the snapshot rule is applied
//    on every rank with rank 0's answer broadcast.
// A resumed checkpoint must also have been trained with the dataset's tokenizer, and so must the
// run directory's tokenizer copy (slm_train_check_resume_tokenizer, on the pick of 1 and 2).
// Contract in train_internal.h.
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/ckpt.h"
#include "dist/dist.h"
#include "train/train.h"
#include "train/train_internal.h"

// The pick so far.
typedef struct pick {
    char *path;   // checkpoint directory or s3:// step URI (owned; NULL: fresh start)
    int64_t step; // --resume auto: the step picked (-1: none)
    bool remote;  // ... from --ckpt-uri (newer than every local one)
} pick;

// Renames DIR/checkpoints to DIR/checkpoints.replaced-YYYYmmdd-HHMMSS and moves the earlier
// run's metrics.jsonl, config.json and tokenizer copy into it (nothing is deleted).
static slm_status move_checkpoints_aside(const char *dir, const char *root, int n) {
    char stamp[64];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(stamp, sizeof stamp, "checkpoints.replaced-%Y%m%d-%H%M%S", localtime_r(&now, &tmv));
    char *dst = slm_path_join(dir, stamp);
    for (int k = 1; slm_is_dir(dst) || slm_is_file(dst); k++) {
        free(dst);
        char alt[96];
        snprintf(alt, sizeof alt, "%s.%d", stamp, k);
        dst = slm_path_join(dir, alt);
    }
    slm_status st = SLM_OK;
    if (rename(root, dst) != 0) {
        st = slm_fail(SLM_E_IO, "--train-from-scratch: cannot move %s to %s: %s", root, dst,
                      strerror(errno));
    } else {
        // The files the new run rewrites go with the checkpoints they describe, so the earlier
        // run's history, config and tokenizer stay together (nothing is overwritten).
        static const char *const keep[] = {"metrics.jsonl", "config.json", "tokenizer.json",
                                           "tokenizer.model"};
        for (size_t i = 0; !st && i < sizeof keep / sizeof *keep; i++) {
            char *src = slm_path_join(dir, keep[i]), *to = slm_path_join(dst, keep[i]);
            if (slm_is_file(src) && rename(src, to) != 0)
                st = slm_fail(SLM_E_IO, "--train-from-scratch: cannot move %s to %s: %s", src, to,
                              strerror(errno));
            free(src);
            free(to);
        }
        if (!st)
            slm_warn("--train-from-scratch: the earlier run's %d checkpoint%s (with its "
                     "metrics.jsonl, config.json and tokenizer) moved from %s to %s (not "
                     "deleted); training starts from a seeded init",
                     n, n == 1 ? "" : "s", root, dst);
    }
    free(dst);
    return st;
}

// No --resume: ROOT's checkpoints (n committed, the newest `newest`; `pending` >= 0: a pending
// save of that step) are moved aside with --train-from-scratch, else refused.
static slm_status no_resume(const slm_train_opts *o, const char *root, int n, int64_t newest,
                            int64_t pending) {
    slm_status st = SLM_OK;
    if (o->train_from_scratch) {
        if (n > 0 || pending >= 0)
            st = move_checkpoints_aside(o->out_dir, root, n + (pending >= 0));
    } else if (n > 0 || pending >= 0) {
        st = slm_fail(SLM_E_ARG,
                      "%s holds %d checkpoint%s of an earlier run (the newest: step "
                      "%" PRId64 "%s); continue it with --resume auto, or train from a "
                      "seeded init with --train-from-scratch (moves them to "
                      "checkpoints.replaced-DATE; nothing is deleted), or give another --out",
                      root, n + (pending >= 0), n + (pending >= 0) == 1 ? "" : "s",
                      pending >= 0 ? pending : newest,
                      pending >= 0 ? ", a save every rank wrote before the job ended, not "
                                     "yet committed: --resume auto commits it"
                                   : "");
    }
    return st;
}

// --resume auto, rule 2: a remote checkpoint newer than the local pick replaces it. local_bad:
// the local pick's error when no local checkpoint verifies (then a remote one must).
static slm_status prefer_remote(const slm_train_opts *o, const char *resume_hint,
                                const char *local_bad, pick *p) {
    int64_t rs = -1;
    char *ru = NULL;
    slm_status st = slm_ckpt_remote_pick(o->ckpt_uri, p->step, o->verify_on_resume, &rs, &ru);
    if (st) {
        st = slm_fail_wrap(st, "--resume auto with --ckpt-uri %s", o->ckpt_uri);
    } else if (rs > p->step) {
        slm_info("--resume auto: %s (step %" PRId64 ") %s; resuming from S3", ru, rs,
                 p->step >= 0 ? "is newer than the newest local checkpoint"
                 : local_bad  ? "verifies, no local checkpoint does"
                              : "found, no local checkpoint");
        free(p->path);
        p->path = ru;
        p->step = rs;
        p->remote = true;
    } else {
        free(ru);
    }
    if (!st && local_bad && !p->remote)
        st = slm_fail(SLM_E_FORMAT, "--resume auto (%s): %s; and --ckpt-uri %s holds none",
                      resume_hint, local_bad, o->ckpt_uri);
    return st;
}

// --resume auto, rules 1 and 2, under ROOT (RUN_DIR/checkpoints).
static slm_status pick_auto(const slm_train_opts *o, const char *root, pick *p) {
    char resume_hint[1024];
    snprintf(resume_hint, sizeof resume_hint,
             "a run directory holding checkpoints is never trained from scratch silently: "
             "resume one explicitly with --resume %s/step_N, or move them aside with "
             "--train-from-scratch",
             root);
    // A save every rank had written but the job did not live to commit (a rank hung or died
    // before the commit barrier, the job torn down) is committed first: it is the newest.
    int64_t rec = -1;
    slm_status st = slm_ckpt_recover_pending(root, o->ckpt_keep, &rec);
    if (!st) st = slm_ckpt_pick_resume(root, o->verify_on_resume, &p->path, &p->step);
    char *local_bad = NULL; // none of the local checkpoints verifies: a remote one may
    if (st == SLM_E_FORMAT && o->ckpt_uri) {
        local_bad = slm_xstrdup(slm_errmsg());
        st = SLM_OK;
    }
    if (!st && p->step < 0 && !local_bad && (rec = slm_ckpt_find_pending(root)) >= 0)
        st = slm_fail(SLM_E_IO,
                      "%s/step_%08" PRId64 ".tmp holds a save every rank wrote that could "
                      "not be committed (see the warning above) and there is no committed "
                      "checkpoint: training from step 0 would sweep it away",
                      root, rec);
    if (!st && p->step >= 0) // `latest` names what is resumed, even if this run
        st = slm_ckpt_repair_latest(root, p->step); // fails before its first save
    else if (st)
        st = slm_fail_wrap(st, "--resume auto (%s)", resume_hint);
    if (!st && o->ckpt_uri) // the newest that verifies of local and remote (same rules)
        st = prefer_remote(o, resume_hint, local_bad, p);
    free(local_bad);
    return st;
}

// --resume PATH with a run directory whose checkpoints are under ROOT.
static slm_status pick_path(const slm_train_opts *o, const char *root, pick *p) {
    p->path = slm_xstrdup(o->resume);
    int64_t pend = slm_ckpt_find_pending(root);
    if (pend >= 0)
        slm_warn("--resume %s: %s/step_%08" PRId64 ".tmp holds a save of step %" PRId64
                 " every rank wrote but the job did not commit; --resume auto would commit and "
                 "resume it; this run's first checkpoint removes it",
                 o->resume, root, pend, pend);
    slm_status st = SLM_OK;
    if (o->verify_on_resume) {
        slm_ckpt *c = NULL;
        st = slm_ckpt_open(o->resume, &c);
        if (!st) st = slm_ckpt_verify(c);
        slm_ckpt_free(c);
        if (st) st = slm_fail_wrap(st, "--verify-on-resume: --resume %s", o->resume);
    }
    return st;
}

// Rank 0 with --out, the run directory locked: the rules of no --resume, --resume PATH and
// --resume auto's local and remote candidates.
static slm_status pick_rank0(const slm_train_opts *o, pick *p) {
    char *root = slm_path_join(o->out_dir, "checkpoints");
    int64_t *steps = NULL;
    int n = slm_ckpt_list_steps(root, &steps); // an empty checkpoints/ holds none
    int64_t newest = n ? steps[n - 1] : -1;
    free(steps);
    // A save every rank wrote but nobody committed is a checkpoint too (--resume auto commits
    // it): never trained over from scratch, nor swept by this run's first commit.
    int64_t pending = o->resume ? -1 : slm_ckpt_find_pending(root);
    slm_status st;
    if (!o->resume)
        st = no_resume(o, root, n, newest, pending);
    else if (!strcmp(o->resume, "auto"))
        st = pick_auto(o, root, p);
    else
        st = pick_path(o, root, p);
    free(root);
    return st;
}

// World > 1, after rank 0's pick_rank0 succeeded: ranks != 0 get the same checkpoint (rank 0's
// --resume auto pick, broadcast). Collective.
static void share(const slm_train_opts *o, int rank, pick *p) {
    if (!o->resume) return;
    bool is_auto = !strcmp(o->resume, "auto");
    int64_t pk[2] = {rank == 0 ? p->step : -1, rank == 0 ? p->remote : 0};
    if (is_auto) slm_dist_bcast(pk, 2, SLM_DTYPE_I64, 0, "--resume auto step");
    int64_t step = pk[0];
    if (rank == 0) return;
    free(p->path);
    p->path = NULL;
    if (!is_auto) {
        p->path = slm_xstrdup(o->resume);
    } else if (step >= 0 && pk[1]) {
        slm_buf b = {0};
        size_t n = strlen(o->ckpt_uri);
        while (n > 5 && o->ckpt_uri[n - 1] == '/')
            n--;
        slm_buf_appendf(&b, "%.*s/checkpoints/step_%08" PRId64, (int)n, o->ckpt_uri, step);
        p->path = b.data;
    } else if (step >= 0) {
        char *root = slm_path_join(o->out_dir, "checkpoints");
        p->path = slm_ckpt_step_dir(root, step, false);
        free(root);
    }
}

// --resume auto, rule 3: with snapshots, a node-local snapshot newer than the pick replaces it
// (rank 0 decides, broadcast). Also says whether every rank runs on one host. Collective.
static void prefer_snapshot(const slm_resume_in *in, pick *p, bool *one_host) {
    const slm_train_opts *o = in->o;
    if (!o->out_dir || o->snapshot_every_steps <= 0) return;
    *one_host = slm_snapdir_one_host();
    if (!o->resume || strcmp(o->resume, "auto") || !p->path) return;
    int64_t use = -1, disk = -1;
    char *root = slm_train_snapshot_root(o);
    if (in->rank == 0 && *one_host) {
        slm_ckpt *c = NULL;
        if (slm_ckpt_open(p->path, &c) == SLM_OK) disk = slm_ckpt_get_meta(c)->step;
        slm_ckpt_free(c);
        use = slm_snapdir_usable(o, in->cfg, in->W, root, disk);
    }
    slm_dist_bcast(&use, 1, SLM_DTYPE_I64, 0, "snapshot pick");
    if (use >= 0) {
        char name[32];
        snprintf(name, sizeof name, "step_%08lld", (long long)use);
        free(p->path);
        p->path = slm_path_join(root, name);
        if (in->rank == 0)
            slm_info("resuming from the node-local snapshot %s (step %lld, newer than the disk "
                     "checkpoint of step %lld)",
                     p->path, (long long)use, (long long)disk);
    }
    free(root);
}

slm_status slm_resume_decide(const slm_resume_in *in, char **path, bool *snap_one_host) {
    const slm_train_opts *o = in->o;
    pick p = {.path = NULL, .step = -1, .remote = false};
    slm_status st = SLM_OK;
    if (o->out_dir && in->rank == 0) {
        st = pick_rank0(o, &p);
        if (!st && p.path && in->ds) // before the dataset's tokenizer replaces the run's
            st = slm_train_check_resume_tokenizer(o->out_dir, p.path, in->ds);
    }
    st = slm_dist_agree(st);
    if (!st && o->out_dir && in->W > 1) share(o, in->rank, &p);
    if (!st && !o->out_dir && o->resume) { // with a run directory this was decided above
        if (strcmp(o->resume, "auto") != 0)
            p.path = slm_xstrdup(o->resume);
        else
            st = slm_fail(SLM_E_ARG, "--resume auto needs a run directory (--out DIR)");
    }
    if (!st) prefer_snapshot(in, &p, snap_one_host);
    if (st) {
        free(p.path);
        p.path = NULL;
    }
    *path = p.path;
    return st;
}
