// The checkpoint saver. Asynchronous saves copy the shards into a reused staging buffer on a
// background pthread while the training thread runs the next forward / backward (which only
// read them); slm_ckpt_saver_fence, called before the optimizer step modifies the shards, waits
// for that copy. The same thread then writes + fsyncs the rank file. The commit (status
// agreement, barrier, rank 0's manifest + renames) runs on the training thread at the next step
// boundary where every rank's write has finished, or at the next save / finish. The background
// thread never calls MPI (dist/ initialises MPI FUNNELED).
#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dist/dist.h"

struct slm_ckpt_saver {
    slm_ckpt_saver_opts o;
    char *root;
    // the pending save (staged, being written, or written and not yet committed)
    bool pending;
    bool thread_live; // a pthread was started and not joined
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool copied;             // the background thread has staged the shards (under mu)
    bool done;               // background write finished (under mu)
    slm_status write_status; // its result (under mu)
    char write_msg[1024];    // its message
    char *tmp_dir;
    slm_ckpt_image image;
    slm_ckpt_meta meta;
    slm_unit_layout *layout; // [n_units] deep copy
    slm_ckpt_shard *shards;  // [n_units] descriptors (buffers borrowed until `copied`)
    int n_units;
    double last_stall_s; // save() time + fence wait of the latest save
    int64_t last_committed;
    int64_t n_committed;     // saves committed by this saver
    double save_t0;          // slm_time_s() when the pending save started
    double last_duration_s;  // start to commit of the last committed save
    int64_t bytes_committed; // rank-file bytes this rank wrote into committed saves
};

static void *writer_main(void *arg) {
    slm_ckpt_saver *s = arg;
    bool background = !s->copied; // the async path starts the thread before the copy
    if (!s->copied) {
        if (!s->o.no_write)
            slm_ckpt_stage(&s->image, s->o.rank, s->o.world, s->meta.step, s->layout, s->n_units,
                           s->shards, false);
        pthread_mutex_lock(&s->mu);
        s->copied = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    // Hashing and writing need no hurry: lowest CPU priority for the rest of this thread, so
    // the training threads keep their cores (nice applies per thread on Linux). Best effort.
    if (background && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19) != 0)
        background = false;
    slm_status st = s->o.no_write ? SLM_OK : slm_ckpt_write_image(s->tmp_dir, &s->image);
    pthread_mutex_lock(&s->mu);
    s->write_status = st;
    snprintf(s->write_msg, sizeof s->write_msg, "%s", st ? slm_errmsg() : "");
    s->done = true;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

slm_status slm_ckpt_saver_new(const slm_ckpt_saver_opts *o, slm_ckpt_saver **out) {
    *out = NULL;
    slm_status st = o->rank == 0 ? slm_mkdir_p(o->root) : SLM_OK;
    st = slm_dist_agree(st);
    if (st) return st;
    slm_ckpt_saver *s = slm_xcalloc(1, sizeof *s);
    s->o = *o;
    s->root = slm_xstrdup(o->root);
    s->o.root = s->root;
    s->last_committed = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    *out = s;
    return SLM_OK;
}

static void free_layout(slm_ckpt_saver *s) {
    for (int u = 0; u < s->n_units; u++)
        free(s->layout[u].views);
    free(s->layout);
    free(s->shards);
    s->layout = NULL;
    s->shards = NULL;
    s->n_units = 0;
}

// Joins the thread (if any) and returns the local write status.
static slm_status join_writer(slm_ckpt_saver *s) {
    if (s->thread_live) {
        pthread_join(s->thread, NULL);
        s->thread_live = false;
    }
    if (s->write_status) return slm_fail(s->write_status, "%s", s->write_msg);
    return SLM_OK;
}

// Forgets the pending save; the staging buffer is kept for the next one.
static void clear_pending(slm_ckpt_saver *s) {
    free_layout(s);
    free(s->tmp_dir);
    s->tmp_dir = NULL;
    s->pending = false;
    s->copied = false;
    s->done = false;
    s->write_status = SLM_OK;
    s->write_msg[0] = 0;
}

// Agrees on the write status, then rank 0 commits; on failure rank 0 removes the staging dir
// (the previous checkpoint and `latest` stay as they were). Collective.
static slm_status commit_pending(slm_ckpt_saver *s) {
    slm_status st = slm_dist_agree(join_writer(s));
    if (!st) {
        slm_dist_barrier("checkpoint commit");
        slm_status cs = SLM_OK;
        if (s->o.rank == 0)
            cs = slm_ckpt_commit(s->root, &s->meta, s->layout, s->n_units, s->o.keep);
        st = slm_dist_agree(cs);
    }
    if (st) {
        if (s->o.rank == 0) slm_ckpt_rmdir(s->tmp_dir);
        slm_fail_wrap(st, "checkpoint step %lld not saved (the previous one stays `latest`)",
                      (long long)s->meta.step);
    } else {
        s->last_committed = s->meta.step;
        s->n_committed++;
        s->last_duration_s = slm_time_s() - s->save_t0;
        if (!s->o.no_write) s->bytes_committed += (int64_t)s->image.len;
    }
    clear_pending(s);
    return st;
}

// Whether an asynchronous save may stage a full copy of the shards (params, m, v: 3 x fp32 per
// element): true when the staging buffer kept from an earlier save is large enough, or the
// memory probe has room for it (plus 5% and 64 MiB of slack). Otherwise the save is written
// synchronously, straight from the shards (no copy), and the log says so.
static bool staging_fits(slm_ckpt_saver *s, const slm_ckpt_shard *shards, int n_units) {
    double bytes = SLM_CKPT_HEADER_BYTES;
    for (int u = 0; u < n_units; u++)
        if (shards[u].end > shards[u].begin)
            bytes += 3.0 * (double)(shards[u].end - shards[u].begin) * sizeof(float);
    if (s->image.data && (double)s->image.cap >= bytes) return true;
    slm_mem_info mi;
    slm_mem_probe(&mi);
    bool known = mi.bytes > 0 || mi.rlimit_as >= 0 || mi.cgroup >= 0;
    if (!known || bytes * 1.05 + 64.0 * 1024 * 1024 <= mi.bytes) return true;
    char a[32], b[32];
    slm_info("checkpoint step %lld: a staging copy of this rank's shard (%s) does not fit in "
             "the %s available (%s); writing it synchronously, straight from the shards "
             "(bounded memory; training waits for the write)",
             (long long)s->meta.step, slm_fmt_bytes(bytes, a), slm_fmt_bytes(mi.bytes, b),
             mi.limit_name);
    return false;
}

slm_status slm_ckpt_saver_save(slm_ckpt_saver *s, const slm_ckpt_meta *meta,
                               const slm_unit_layout *layout, int n_units,
                               const slm_ckpt_shard *shards) {
    double t0 = slm_time_s();
    if (s->pending && s->meta.step == meta->step) { // this state is already being saved
        s->last_stall_s = 0;
        return SLM_OK;
    }
    slm_status prev = s->pending ? commit_pending(s) : SLM_OK;
    if (s->last_committed == meta->step) { // this saver just committed this very state
        s->last_stall_s = slm_time_s() - t0;
        return prev;
    }
    // A step_N directory from elsewhere (an earlier run's save whose `latest` update failed, a
    // newer checkpoint skipped by a fallback resume, a partial one) is written again and
    // replaced at the commit (slm_ckpt_commit), never trusted as it is.
    s->meta = *meta;
    s->meta.world = s->o.world;
    s->save_t0 = t0;
    s->n_units = n_units;
    s->layout = slm_xcalloc((size_t)n_units, sizeof *s->layout);
    for (int u = 0; u < n_units; u++) {
        s->layout[u] = layout[u];
        s->layout[u].views = slm_xcalloc((size_t)(layout[u].n_views ? layout[u].n_views : 1),
                                         sizeof(slm_param_view));
        memcpy(s->layout[u].views, layout[u].views,
               (size_t)layout[u].n_views * sizeof(slm_param_view));
    }
    s->shards = slm_xcalloc((size_t)n_units, sizeof *s->shards);
    memcpy(s->shards, shards, (size_t)n_units * sizeof *s->shards);
    s->tmp_dir = slm_ckpt_step_dir(s->root, meta->step, true);
    // Rank 0 prepares a clean staging directory before any rank writes into it.
    slm_status st = SLM_OK;
    if (s->o.rank == 0) {
        slm_ckpt_rmdir(s->tmp_dir);
        if (mkdir(s->tmp_dir, 0755) != 0)
            st = slm_fail(SLM_E_IO, "%s: mkdir failed: %s", s->tmp_dir, strerror(errno));
        else if (!s->o.no_write) // a fully written save survives a job ended before its commit
            st = slm_ckpt_write_pending(s->root, &s->meta, s->layout, s->n_units);
    }
    st = slm_dist_agree(st);
    if (st) {
        clear_pending(s);
        s->last_stall_s = slm_time_s() - t0;
        return st;
    }
    s->pending = true;
    s->copied = false;
    s->done = false;
    s->write_status = SLM_OK;
    bool bounded = !s->o.sync && !s->o.no_write && !staging_fits(s, shards, n_units);
    if (s->o.sync || bounded || pthread_create(&s->thread, NULL, writer_main, s) != 0) {
        // Synchronous (or no thread available, or no memory for a staging copy): write straight
        // from the shards (training waits anyway), or stage a copy when a shard has no m / v.
        bool direct = true;
        for (int u = 0; u < n_units; u++)
            direct &= (shards[u].m && shards[u].v && shards[u].params) || shards[u].read;
        if (!s->o.no_write && direct)
            slm_ckpt_describe(&s->image, s->o.rank, s->o.world, meta->step, layout, n_units,
                              shards);
        else if (!s->o.no_write)
            slm_ckpt_stage(&s->image, s->o.rank, s->o.world, meta->step, layout, n_units, shards,
                           true);
        s->copied = true;
        writer_main(s);
        if (s->o.sync) st = commit_pending(s);
    } else {
        s->thread_live = true;
    }
    s->last_stall_s = slm_time_s() - t0;
    return prev ? prev : st;
}

void slm_ckpt_saver_fence(slm_ckpt_saver *s) {
    if (!s || !s->pending) return;
    double t0 = slm_time_s();
    pthread_mutex_lock(&s->mu);
    while (!s->copied)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    s->last_stall_s += slm_time_s() - t0;
}

slm_status slm_ckpt_saver_poll(slm_ckpt_saver *s) {
    // Every rank takes part in the flag reduction while any rank has a save pending (all ranks
    // start saves at the same steps, so `pending` agrees across ranks).
    if (!s->pending) return SLM_OK;
    pthread_mutex_lock(&s->mu);
    int64_t not_done = s->done ? 0 : 1;
    pthread_mutex_unlock(&s->mu);
    slm_dist_allreduce(&not_done, 1, SLM_DTYPE_I64, SLM_OP_MAX, "checkpoint poll");
    if (not_done) return SLM_OK;
    return commit_pending(s);
}

slm_status slm_ckpt_saver_finish(slm_ckpt_saver *s) {
    if (!s || !s->pending) return SLM_OK;
    return commit_pending(s);
}

slm_status slm_ckpt_saver_settle(slm_ckpt_saver *s, bool collective) {
    if (!s || !s->pending) return SLM_OK;
    int64_t step = s->meta.step;
    if (collective) {
        slm_status st = commit_pending(s);
        if (st)
            slm_error("%s", slm_errmsg());
        else if (s->o.rank == 0)
            slm_info("committed checkpoint step %lld, written before the run stopped",
                     (long long)step);
        return st;
    }
    slm_status st = join_writer(s); // waits for the copy and the write, whatever they gave
    (void)st;
    if (s->o.rank == 0) {
        slm_ckpt_rmdir(s->tmp_dir);
        slm_warn("checkpoint step %lld was being saved when the run failed on some ranks only; "
                 "discarded (%s removed; `latest` stays as it was)",
                 (long long)step, s->tmp_dir);
    }
    clear_pending(s);
    return SLM_OK;
}

int64_t slm_ckpt_saver_n_committed(const slm_ckpt_saver *s) {
    return s->n_committed;
}

double slm_ckpt_saver_last_stall_s(const slm_ckpt_saver *s) {
    return s->last_stall_s;
}
int64_t slm_ckpt_saver_last_committed(const slm_ckpt_saver *s) {
    return s->last_committed;
}
void slm_ckpt_saver_io_stats(const slm_ckpt_saver *s, int64_t *bytes, double *last_duration_s) {
    *bytes = s->bytes_committed;
    *last_duration_s = s->last_duration_s;
}

void slm_ckpt_saver_free(slm_ckpt_saver *s) {
    if (!s) return;
    if (s->thread_live) pthread_join(s->thread, NULL);
    clear_pending(s);
    slm_ckpt_image_free(&s->image);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->root);
    free(s);
}
