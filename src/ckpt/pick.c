// --resume auto: which committed checkpoint to continue from (`latest` is only a hint).
#include "ckpt/ckpt_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "objstore/objstore.h"

// Checks one committed checkpoint, a local step directory or an s3:// step prefix: manifest, its
// step, the files' sizes (a HEAD per object remotely) and, with full_verify, every file's hash.
static slm_status check_candidate(const char *dir, int64_t step, bool full_verify) {
    if (!slm_s3_is_uri(dir)) {
        struct stat sb;
        if (lstat(dir, &sb) == 0 && S_ISLNK(sb.st_mode))
            return slm_fail(SLM_E_FORMAT,
                            "%s is a symbolic link, not a checkpoint directory (not followed; "
                            "left as it is)",
                            dir);
        if (lstat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
            return slm_fail(SLM_E_FORMAT,
                            "%s is not a directory (a checkpoint step_N is a directory; left as "
                            "it is)",
                            dir);
        char *mp = slm_path_join(dir, "manifest.json");
        bool have = slm_is_file(mp);
        free(mp);
        if (!have)
            return slm_fail(SLM_E_FORMAT, "%s/manifest.json is missing (incomplete checkpoint)",
                            dir);
    }
    slm_ckpt *c = NULL;
    slm_status st = slm_ckpt_open(dir, &c);
    if (!st && slm_ckpt_get_meta(c)->step != step)
        st = slm_fail(SLM_E_FORMAT,
                      "%s/manifest.json: \"step\" is %" PRId64
                      " but the directory is named for step %" PRId64,
                      dir, slm_ckpt_get_meta(c)->step, step);
    if (!st) st = slm_ckpt_check_files(c);
    if (!st && full_verify) st = slm_ckpt_verify(c);
    slm_ckpt_free(c);
    return st;
}

// Reads ROOT/latest: the step it names (-1 if none) and a word on its state for the log.
static int64_t read_latest(const char *root, const char **state) {
    char *lp = slm_path_join(root, "latest");
    int64_t step = -1;
    *state = "missing";
    if (slm_is_file(lp)) {
        char *txt = NULL;
        size_t len = 0;
        *state = "unreadable";
        if (slm_file_read_all(lp, &txt, &len) == SLM_OK) {
            while (len && (txt[len - 1] == '\n' || txt[len - 1] == ' '))
                txt[--len] = 0;
            const char *p = txt;
            if (!strncmp(p, "step_", 5) && p[5]) {
                int64_t s = 0;
                for (p += 5; *p >= '0' && *p <= '9' && s < INT64_MAX / 10 - 10; p++)
                    s = s * 10 + (*p - '0');
                if (!*p) step = s, *state = "ok";
            }
        }
        free(txt);
    }
    free(lp);
    return step;
}

slm_status slm_ckpt_repair_latest(const char *root, int64_t step) {
    const char *state;
    if (read_latest(root, &state) == step) return SLM_OK;
    char name[64];
    int nl = snprintf(name, sizeof name, "step_%08" PRId64 "\n", step);
    char *lp = slm_path_join(root, "latest");
    slm_status st = slm_file_write_atomic(lp, name, (size_t)nl);
    if (!st) slm_info("%s repaired: it now names step_%08" PRId64, lp, step);
    free(lp);
    return st;
}

slm_status slm_ckpt_pick_resume(const char *root, bool full_verify, char **out_dir,
                                int64_t *out_step) {
    return slm_ckpt_pick_newest(root, full_verify, "resuming from", out_dir, out_step);
}

slm_status slm_ckpt_pick_newest(const char *root, bool full_verify, const char *use, char **out_dir,
                                int64_t *out_step) {
    *out_dir = NULL;
    *out_step = -1;
    int64_t *steps = NULL;
    int n = slm_ckpt_list_steps(root, &steps);
    const char *lstate = "missing";
    int64_t hint = n ? read_latest(root, &lstate) : -1;
    slm_status st =
        slm_ckpt_pick_from(root, steps, n, hint, lstate, -1, full_verify, use, out_dir, out_step);
    free(steps);
    return st;
}

slm_status slm_ckpt_pick_from(const char *root, const int64_t *steps, int n, int64_t hint,
                              const char *hint_state, int64_t above, bool full_verify,
                              const char *use, char **out_dir, int64_t *out_step) {
    *out_dir = NULL;
    *out_step = -1;
    int lo = 0; // the candidates: steps[lo..n) (above `above`)
    while (lo < n && steps[lo] <= above)
        lo++;
    if (lo == n) return SLM_OK;
    char first_bad[1024] = "";
    int n_bad = 0;
    for (int i = n - 1; i >= lo; i--) {
        char *d = slm_ckpt_step_dir(root, steps[i], false);
        slm_status st = check_candidate(d, steps[i], full_verify);
        if (st) {
            if (!n_bad) snprintf(first_bad, sizeof first_bad, "%s", slm_errmsg());
            n_bad++;
            char next[128];
            if (i > lo)
                snprintf(next, sizeof next, "falling back to the previous one");
            else if (above >= 0)
                snprintf(next, sizeof next, "none older here is newer than step_%08" PRId64, above);
            else
                snprintf(next, sizeof next, "no older checkpoint left");
            slm_warn("checkpoint %s does not verify: %s; %s", d, slm_errmsg(), next);
            free(d);
            continue;
        }
        char why[256];
        const char *name = strrchr(d, '/') && !slm_s3_is_uri(d) ? strrchr(d, '/') + 1 : d;
        if (hint == steps[i])
            snprintf(why, sizeof why, "latest names it");
        else if (hint < 0)
            snprintf(why, sizeof why, "latest %s", hint_state);
        else
            snprintf(why, sizeof why, "latest names step_%08" PRId64 "%s", hint,
                     hint > steps[i] ? ", which is missing or does not verify" : ", an older one");
        slm_info("%s; %s %s (the newest checkpoint that verifies%s%s)", why, use, name,
                 full_verify ? ", checksums included" : ", manifest and sizes",
                 n_bad ? "; newer ones skipped, see the warnings" : "");
        *out_dir = d;
        *out_step = steps[i];
        return SLM_OK;
    }
    if (above >= 0) return SLM_OK; // the caller has one at `above`
    return slm_fail(SLM_E_FORMAT, "%s: none of its %d checkpoints verifies (the newest: %s)", root,
                    n, first_bad);
}
