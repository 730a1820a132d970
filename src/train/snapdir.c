// The node-local snapshot directory (--snapshot-every-steps N): where it is, the marker naming
// the run that owns it, claiming and clearing it, and which snapshot in it a restart can use.
// The hook that writes snapshots is snapshot.c; the restart rule that prefers a snapshot to an
// older disk checkpoint is resume.c's. Contract in train_internal.h; docs/operations.md
// "Snapshots".
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "dist/dist.h"
#include "train/train.h"
#include "train/train_internal.h"

// The absolute --out path into buf (what names the run a snapshot directory belongs to).
static void abs_out(const slm_train_opts *o, char *buf, size_t cap) {
    char cwd[4096] = "";
    if (o->out_dir && o->out_dir[0] != '/' && getcwd(cwd, sizeof cwd))
        snprintf(buf, cap, "%s/%s", cwd, o->out_dir);
    else
        snprintf(buf, cap, "%s", o->out_dir ? o->out_dir : "");
}

char *slm_train_snapshot_root(const slm_train_opts *o) {
    if (o->snapshot_dir) return slm_xstrdup(o->snapshot_dir);
    char buf[4200];
    abs_out(o, buf, sizeof buf);
    char root[64];
    snprintf(root, sizeof root, "/dev/shm/shardlm-%016llx",
             (unsigned long long)slm_xxh64(buf, strlen(buf), 0x736e6170ull));
    return slm_xstrdup(root);
}

// The marker file naming the run (absolute --out) a snapshot directory belongs to. Snapshots
// delete what they do not keep, so they only ever delete inside a directory that carries it
// (or that they created), and never restore another run's state from a shared --snapshot-dir.
#define SNAP_MARKER ".shardlm-snapshots"

// Whose snapshots ROOT holds: 1 this run's (marker names o's --out), 0 no marker, -1 another
// run's (its --out into other, when given).
int slm_snapdir_owner(const slm_train_opts *o, const char *root, char *other, size_t cap) {
    char *mp = slm_path_join(root, SNAP_MARKER), *txt = NULL;
    size_t len = 0;
    char *keep = slm_xstrdup(slm_errmsg());
    int r = 0;
    if (slm_is_file(mp) && slm_file_read_all(mp, &txt, &len) == SLM_OK) {
        char me[4200];
        abs_out(o, me, sizeof me);
        size_t n = len;
        while (n && (txt[n - 1] == '\n' || txt[n - 1] == '\r'))
            n--;
        r = n == strlen(me) && !memcmp(txt, me, n) ? 1 : -1;
        if (r < 0 && other) snprintf(other, cap, "%.*s", (int)(n < 1024 ? n : 1024), txt);
    }
    slm_set_errmsg(keep);
    free(keep);
    free(txt);
    free(mp);
    return r;
}

// Writes ROOT's marker naming this run.
static slm_status write_marker(const slm_train_opts *o, const char *root) {
    char me[4200];
    abs_out(o, me, sizeof me - 1);
    size_t n = strlen(me);
    me[n++] = '\n';
    char *mp = slm_path_join(root, SNAP_MARKER);
    slm_status st = slm_file_write_atomic(mp, me, n);
    free(mp);
    return st;
}

// True for the entries snapshots write into their directory: step_N (committed, .tmp,
// .replaced.tmp), latest and its temporary, the marker.
static bool snapshot_entry(const char *name) {
    return !strncmp(name, "step_", 5) || !strcmp(name, "latest") ||
           !strncmp(name, "latest.tmp.", 11) || !strcmp(name, SNAP_MARKER);
}

// Removes ROOT's snapshot entries (step_N directories, flat; `latest`; the marker) and ROOT
// itself when that leaves it empty; anything else in it is left alone. Only called on a
// directory that carries this run's marker. Errors are ignored (a snapshot is a cache).
void slm_snapdir_remove(const slm_train_opts *o, const char *root) {
    DIR *d = opendir(root);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!snapshot_entry(e->d_name) || !strcmp(e->d_name, SNAP_MARKER)) continue;
        char *p = slm_path_join(root, e->d_name);
        if (!strncmp(e->d_name, "step_", 5))
            slm_rmdir_flat_quiet(p);
        else
            unlink(p);
        free(p);
    }
    closedir(d);
    // the marker goes last, and only when nothing else is left (what could not be removed
    // stays claimed by this run)
    char *mp = slm_path_join(root, SNAP_MARKER);
    if (rmdir(root) != 0 && unlink(mp) == 0 && rmdir(root) != 0) {
        (void)write_marker(o, root);
    }
    free(mp);
}

// True when ROOT is missing or an empty directory.
static bool empty_or_missing(const char *root) {
    DIR *d = opendir(root);
    if (!d) return !slm_is_dir(root) && access(root, F_OK) != 0;
    bool empty = true;
    for (struct dirent *e; empty && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = false;
    closedir(d);
    return empty;
}

// Rank 0 at start: makes ROOT this run's snapshot directory. A fresh run (no resume) clears its
// own earlier snapshots. Refuses a directory that holds another run's snapshots, or that is not
// empty and carries no marker (a user's directory: snapshots would delete in it), except the
// default one under /dev/shm, which is this run's by its name.
slm_status slm_snapdir_claim(const slm_train_opts *o, const char *root, bool fresh) {
    char other[1100] = "";
    int own = slm_snapdir_owner(o, root, other, sizeof other);
    if (own < 0)
        return slm_fail(SLM_E_ARG,
                        "--snapshot-dir %s holds the snapshots of another run (--out %s, in "
                        "%s/" SNAP_MARKER "): give each run its own snapshot directory",
                        root, other, root);
    if (own == 0 && o->snapshot_dir && !empty_or_missing(root))
        return slm_fail(
            SLM_E_ARG,
            "--snapshot-dir %s: not empty and not a shardlm snapshot directory (no " SNAP_MARKER
            "); snapshots delete what they do not keep, so name a new or "
            "empty directory",
            root);
    // an earlier run's, never resumed (the default directory is this run's by its name, marker
    // or not)
    if (fresh && (own > 0 || !o->snapshot_dir)) slm_snapdir_remove(o, root);
    slm_status st = slm_mkdir_p(root);
    if (!st && slm_snapdir_owner(o, root, NULL, 0) <= 0) st = write_marker(o, root);
    return st;
}

// One host for the whole world (snapshots are node-local: a world over several hosts cannot
// resume from them, since no host holds every rank's file). Collective.
bool slm_snapdir_one_host(void) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    int64_t h = (int64_t)slm_xxh64(host, strlen(host), 0), lo = h, hi = h;
    slm_dist_allreduce(&lo, 1, SLM_DTYPE_I64, SLM_OP_MIN, "snapshot host check");
    slm_dist_allreduce(&hi, 1, SLM_DTYPE_I64, SLM_OP_MAX, "snapshot host check");
    return lo == hi;
}

// Rank 0: the step of a snapshot under root that verifies in full (every file's XXH64) and fits
// this run (world, model); -1 otherwise, with the reason logged.
int64_t slm_snapdir_usable(const slm_train_opts *o, const slm_llama_config *cfg, int W,
                           const char *root, int64_t disk_step) {
    if (!slm_is_dir(root)) return -1;
    char other[1100] = "";
    int own = slm_snapdir_owner(o, root, other, sizeof other);
    if (own < 0 || (own == 0 && o->snapshot_dir)) {
        if (own < 0 || !empty_or_missing(root))
            slm_warn("snapshots under %s: %s; not used (resuming from the disk checkpoint)", root,
                     own < 0 ? "they are another run's (--out of " SNAP_MARKER " differs)"
                             : "no " SNAP_MARKER " naming this run");
        return -1;
    }
    char *dir = NULL;
    int64_t s = -1;
    if (slm_ckpt_pick_newest(root, true, "found snapshot", &dir, &s)) {
        slm_warn("snapshots under %s: %s; resuming from the disk checkpoint", root, slm_errmsg());
        return -1;
    }
    int64_t use = -1;
    slm_ckpt *c = NULL;
    if (s >= 0 && s <= disk_step) {
        slm_info("snapshot step %lld is not newer than the disk checkpoint (step %lld): not used",
                 (long long)s, (long long)disk_step);
    } else if (s >= 0 && slm_ckpt_open(dir, &c) == SLM_OK) {
        const slm_ckpt_meta *M = slm_ckpt_get_meta(c);
        const slm_llama_config *a = &M->cfg, *b = cfg;
        bool same_model = a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
                          a->intermediate_size == b->intermediate_size &&
                          a->num_hidden_layers == b->num_hidden_layers &&
                          a->num_attention_heads == b->num_attention_heads &&
                          a->num_key_value_heads == b->num_key_value_heads;
        if (M->world != W || !same_model)
            slm_warn("snapshot %s was saved by %s (%d ranks); this run has %d ranks: not used "
                     "(resuming from the disk checkpoint)",
                     dir, same_model ? "the same model" : "another model", M->world, W);
        else
            use = s;
        slm_ckpt_free(c);
    }
    free(dir);
    return use;
}
