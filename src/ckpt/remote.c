// Checkpoints on S3 (docs/formats.md "Checkpoints on S3"), the writing side: picking the newest
// complete remote checkpoint, and the background uploader (one per host, manifest then `latest`
// last, retention after a newer one is complete). The remote layout and reading: s3_read.c.
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "ckpt/ckpt_internal.h"
#include "dist/dist.h"
#include "objstore/objstore.h"

// ---------------------------------------------------------------------------------------------
// Picking the newest complete remote checkpoint

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

slm_status slm_ckpt_remote_pick(const char *uri, int64_t above, bool full_verify, int64_t *step,
                                char **step_uri) {
    *step = -1;
    *step_uri = NULL;
    slm_ckpt_rlay L;
    slm_status st = slm_ckpt_rlay_parse(uri, &L);
    if (st) return st;
    slm_s3 *s3 = NULL;
    st = slm_s3_open_default(NULL, NULL, &s3);
    // `latest`: only a hint for the log, as locally
    char *lk = slm_ckpt_rlay_key_latest(&L), *data = NULL;
    size_t n = 0;
    bool found = false;
    int64_t hint = -1;
    const char *state = "missing";
    if (!st) st = slm_s3_get(s3, L.bucket, lk, &data, &n, &found);
    if (!st && found) state = slm_ckpt_rlay_parse_step(data, n, &hint) ? "ok" : "unreadable";
    // The candidates: every step_N holding a manifest (without one: an upload in progress or
    // interrupted, not a checkpoint yet).
    int64_t *steps = NULL;
    int ns = 0;
    slm_buf pre = {0};
    slm_buf_appendf(&pre, "%scheckpoints/", L.prefix);
    slm_s3_list l;
    if (!st) st = slm_s3_list_objects(s3, L.bucket, pre.data, NULL, &l);
    for (int64_t i = 0; !st && i < l.n; i++) {
        const char *k = l.obj[i].key + pre.len;
        const char *sl = strchr(k, '/');
        int64_t v;
        if (sl && strcmp(sl, "/manifest.json") == 0 &&
            slm_ckpt_rlay_parse_step(k, (size_t)(sl - k), &v)) {
            steps = slm_xrealloc(steps, (size_t)(ns + 1) * sizeof *steps);
            steps[ns++] = v;
        }
    }
    if (!st) slm_s3_list_free(&l);
    slm_s3_close(s3);
    if (!st && ns > 0) {
        qsort(steps, (size_t)ns, sizeof *steps, cmp_i64);
        slm_buf root = {0};
        slm_buf_appendf(&root, "s3://%s/%scheckpoints", L.bucket, L.prefix);
        st = slm_ckpt_pick_from(root.data, steps, ns, hint, state, above, full_verify, "found",
                                step_uri, step);
        slm_buf_free(&root);
    }
    free(steps);
    slm_buf_free(&pre);
    free(data);
    free(lk);
    slm_ckpt_rlay_free(&L);
    return st;
}

// ---------------------------------------------------------------------------------------------
// The uploader

typedef struct up_file {
    slm_map map;
    char *key;
} up_file;

struct slm_ckpt_uploader {
    slm_ckpt_rlay L;
    char *uri;
    char *root; // local RUN_DIR/checkpoints
    int rank, world, keep;
    bool leader;      // lowest world rank of its host: uploads the host's rank files
    int n_local;      // ranks on this host (leader only)
    int *local_ranks; // [n_local]
    int *leader_of;   // [world] each rank's host leader (rank 0 builds s3_objects from it)
    slm_s3 *s3;       // leaders only (used by the thread)
    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    // jobs for the thread (under mu)
    int64_t files_step; // step whose files to upload (-1: none)
    up_file *files;     // its mapped rank files [n_files]
    int n_files;
    int64_t final_step; // rank 0: manifest + latest + retention of this step (-1: none)
    char *final_manifest;
    size_t final_len;
    bool quit, busy;
    int64_t files_done; // step whose files finished (ok or not), -1
    bool files_failed;
    char files_msg[1024];
    bool final_failed, final_cancelled;
    char final_msg[1024];
    int64_t remote_done; // rank 0: newest step the remote `latest` named at the start or that
                         // this uploader completed (manifest + latest); -1
    // training-thread state
    int64_t pending;        // step handed off whose files are not known complete everywhere (-1)
    char *pending_manifest; // rank 0: its manifest, read at the hand-off (retention may delete it)
    size_t pending_len;
    int64_t last_handed;
    int64_t newest;     // newest committed step the training loop reported (or the catch-up)
    int64_t catchup;    // local checkpoint newer than the remote latest at start (-1: none)
    int64_t retry_step; // failed upload to retry when the server is back (-1: none)
    int retry_n;        // retries of retry_step so far
    double retry_at;    // rank 0's slm_time_s() of the next retry
    bool pending_retry; // the pending upload is such a retry (given up for a newer checkpoint)
    bool cancelling;    // the training thread cancelled the pending upload (abandoned)
    double grace_s;     // --preempt-grace (0: finish waits for every upload)
    bool finishing;     // in slm_ckpt_uploader_finish: no boundary left for a retry
    double deadline;    // finish: slm_time_s() at which uploads are abandoned (0: none)
    int64_t n_done, n_failed, n_abandoned; // abandoned: cancelled (preemption, newer one)
    double stall_total_s, stall_max_s;
    int64_t calls, poll_base;  // slm_ckpt_uploader_step calls; the call of the last hand-off
    double handoff_s;          // of boundary_s: hand-offs (queueing the job)
    double poll_s, poll_max_s; // of boundary_s: boundary polls started / completed (their sum, max)
    int64_t n_polls;
    double settle_s;   // of boundary_s: settling finished uploads (rank 0 queues the manifest)
    double boundary_s; // slm_ckpt_uploader_step's own time besides overlap waits (polls, hand-offs)
    // The boundary poll, off the critical path: a non-blocking all-reduce (MAX) started at one
    // step boundary and completed at the next, so no rank waits there for the slowest one (the
    // step's own collectives between the two boundaries already brought every rank past the
    // start). Decisions use the completed result only, so every rank takes them alike.
    slm_dist_req poll_req;
    int64_t *poll_v;   // [3]: files running anywhere, failed anywhere, retry due (rank 0); heap:
                       // leaked rather than freed under a request that never completed
    int64_t poll_step; // u->pending when the poll started (-1: a retry-due poll)
    bool poll_started; // a poll was started and not yet completed with poll_end
    // Jobs not yet handed to the thread (its mutex was busy: flush_jobs retries at later
    // boundaries, without waiting)
    int64_t defer_files; // a hand-off (-1: none), its mapped files or the mapping's failure:
    up_file *defer_f;
    int defer_n;
    bool defer_failed;
    char defer_msg[1024];
    int64_t defer_final; // rank 0: a settled step whose manifest + latest are to go up (-1),
    bool defer_final_retry, defer_final_ok; // a retry's; its manifest was read; the text:
    char *defer_text;
    size_t defer_len;
};

static void files_free(up_file *f, int n) {
    for (int i = 0; i < n; i++) {
        slm_map_free(&f[i].map);
        free(f[i].key);
    }
    free(f);
}

// Retention: keeps the newest `keep` complete remote checkpoints, deleting every object of the
// older steps (manifest first, so a half-deleted step never looks complete).
static slm_status prune(slm_ckpt_uploader *u) {
    if (u->keep <= 0) return SLM_OK;
    slm_s3_list l;
    slm_status st = slm_s3_list_objects(u->s3, u->L.bucket, u->L.prefix, NULL, &l);
    if (st) return st;
    int64_t *complete = NULL;
    int nc = 0;
    size_t pl = strlen(u->L.prefix);
    // step of each key (or -1)
    int64_t *ks = slm_xcalloc((size_t)(l.n ? l.n : 1), sizeof *ks);
    for (int64_t i = 0; i < l.n; i++) {
        ks[i] = -1;
        const char *k = l.obj[i].key + pl, *c = strstr(k, "checkpoints/step_");
        if (!c || (c != k && !(c - k == 4 && k[0] == 's' && k[3] == '/'))) continue;
        c += strlen("checkpoints/");
        const char *sl = strchr(c, '/');
        int64_t v;
        if (!sl || !slm_ckpt_rlay_parse_step(c, (size_t)(sl - c), &v)) continue;
        ks[i] = v;
        if (c - k == (int64_t)strlen("checkpoints/") && strcmp(sl, "/manifest.json") == 0) {
            complete = slm_xrealloc(complete, (size_t)(nc + 1) * sizeof *complete);
            complete[nc++] = v;
        }
    }
    // the keep-th newest complete step is the oldest kept
    int64_t oldest_kept = -1;
    for (int r = 0; r < u->keep && r < nc; r++) {
        int64_t best = -1;
        for (int i = 0; i < nc; i++)
            if (complete[i] > best && (oldest_kept < 0 || complete[i] < oldest_kept))
                best = complete[i];
        oldest_kept = best;
    }
    if (nc >= u->keep && oldest_kept >= 0) {
        for (int pass = 0; pass < 2 && !st; pass++)
            for (int64_t i = 0; i < l.n && !st; i++) {
                if (ks[i] < 0 || ks[i] >= oldest_kept) continue;
                bool is_manifest = strstr(l.obj[i].key, "/manifest.json") != NULL;
                if (is_manifest != (pass == 0)) continue;
                st = slm_s3_delete(u->s3, u->L.bucket, l.obj[i].key);
            }
    }
    free(ks);
    free(complete);
    slm_s3_list_free(&l);
    return st;
}

static slm_status do_final(slm_ckpt_uploader *u, int64_t step, const char *text, size_t len) {
    cJSON *o = cJSON_ParseWithLength(text, len);
    if (!o) return slm_fail(SLM_E_FORMAT, "step %" PRId64 ": local manifest is not JSON", step);
    cJSON_AddNumberToObject(o, "s3_prefix_shards", u->L.shards);
    // Where each rank file is: host objects hold their ranks' files in rank order (as the
    // leaders sent them).
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(o, "files"), *fe;
    int nf = cJSON_IsArray(files) ? cJSON_GetArraySize(files) : 0;
    int64_t *fr = slm_xcalloc((size_t)(nf ? nf : 1), sizeof *fr),
            *fb = slm_xcalloc((size_t)(nf ? nf : 1), sizeof *fb);
    int k = 0;
    cJSON_ArrayForEach(fe, files) {
        const cJSON *rk = cJSON_GetObjectItemCaseSensitive(fe, "rank"),
                    *by = cJSON_GetObjectItemCaseSensitive(fe, "bytes");
        fr[k] = cJSON_IsNumber(rk) ? (int64_t)rk->valuedouble : -1;
        fb[k] = cJSON_IsNumber(by) ? (int64_t)by->valuedouble : 0;
        k++;
    }
    cJSON *objs = cJSON_AddArrayToObject(o, "s3_objects");
    for (int lead = 0; lead < u->world; lead++) {
        if (u->leader_of[lead] != lead) continue;
        int64_t off = 0;
        char *key = slm_ckpt_rlay_key_host(&u->L, step, lead);
        for (int r = lead; r < u->world; r++) {
            if (u->leader_of[r] != lead) continue;
            for (int i = 0; i < nf; i++)
                if (fr[i] == r) {
                    cJSON *e = cJSON_CreateObject();
                    cJSON_AddNumberToObject(e, "rank", r);
                    cJSON_AddStringToObject(e, "key", key);
                    cJSON_AddNumberToObject(e, "offset", (double)off);
                    cJSON_AddItemToArray(objs, e);
                    off += fb[i];
                }
        }
        free(key);
    }
    free(fr);
    free(fb);
    char *js = cJSON_Print(o);
    cJSON_Delete(o);
    char *mk = slm_ckpt_rlay_key_step(&u->L, step, "manifest.json");
    slm_status st = slm_s3_put(u->s3, u->L.bucket, mk, js, strlen(js));
    free(js);
    free(mk);
    if (!st) {
        char name[64];
        int nl = snprintf(name, sizeof name, "step_%08" PRId64 "\n", step);
        char *lk = slm_ckpt_rlay_key_latest(&u->L);
        st = slm_s3_put(u->s3, u->L.bucket, lk, name, (size_t)nl);
        free(lk);
    }
    if (!st) {
        slm_status p = prune(u);
        if (p) slm_warn("%s: remote retention (--ckpt-keep %d): %s", u->uri, u->keep, slm_errmsg());
    }
    return st;
}

// pthread_cond_timedwait on `cond` (with `mutex` held) for at most `ms` milliseconds from now:
// the deadline is absolute CLOCK_REALTIME, the condition variable's default clock.
static void timed_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mutex, long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cond, mutex, &ts);
}

static void *up_thread(void *arg) {
    slm_ckpt_uploader *u = arg;
    // Uploads need no hurry: the lowest CPU priority for this thread (nice applies per thread on
    // Linux), as the saver's writer thread, so the payload SHA-256 and curl's copies never take
    // a core from the training threads at a step boundary. Best effort.
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    // The training thread neither wakes this one nor waits for its mutex at a step boundary
    // (a woken thread, even at nice 19, may preempt its waker, and one holding the mutex may wait
    // long for a core on a busy machine: both cost the boundary milliseconds): it queues jobs
    // with a trylock (flush_jobs) and this thread looks for them every 20 ms.
    pthread_mutex_lock(&u->mu);
    for (;;) {
        while (!u->quit && u->final_step < 0 && u->files_step < 0) {
            timed_wait_ms(&u->cv, &u->mu, 20);
        }
        if (u->final_step >= 0) {
            int64_t step = u->final_step;
            char *text = u->final_manifest;
            size_t len = u->final_len;
            u->busy = true;
            pthread_mutex_unlock(&u->mu);
            slm_status st = do_final(u, step, text, len);
            free(text);
            // Short critical sections only (no unmapping, freeing or I/O under mu).
            pthread_mutex_lock(&u->mu);
            u->final_manifest = NULL;
            u->final_step = -1;
            u->final_failed = st != SLM_OK;
            u->final_cancelled = st == SLM_E_INTERRUPTED; // slm_s3_cancel
            if (!st && step > u->remote_done) u->remote_done = step;
            if (st) snprintf(u->final_msg, sizeof u->final_msg, "%s", slm_errmsg());
            u->busy = false;
            pthread_cond_broadcast(&u->cv);
            continue;
        }
        if (u->files_step >= 0) {
            int64_t step = u->files_step;
            u->busy = true;
            up_file *f = u->files;
            int n = u->n_files;
            u->files = NULL;
            u->n_files = 0;
            pthread_mutex_unlock(&u->mu);
            slm_status st = SLM_OK;
            // One object per host: the rank files back to back (no copy: segments of the maps).
            if (!st && n > 0) {
                slm_s3_seg *sg = slm_xcalloc((size_t)n, sizeof *sg);
                for (int i = 0; i < n; i++)
                    sg[i] = (slm_s3_seg){f[i].map.data, f[i].map.len};
                char *key = slm_ckpt_rlay_key_host(&u->L, step, u->rank);
                st = slm_s3_put_segments(u->s3, u->L.bucket, key, sg, n);
                free(key);
                free(sg);
            }
            files_free(f, n);
            pthread_mutex_lock(&u->mu);
            u->files_step = -1;
            u->files_done = step;
            u->files_failed = st != SLM_OK;
            if (st) snprintf(u->files_msg, sizeof u->files_msg, "%s", slm_errmsg());
            u->busy = false;
            pthread_cond_broadcast(&u->cv);
            continue;
        }
        if (u->quit) break;
    }
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

// FNV-1a of the host name (or SHARDLM_HOST_ID, for tests that fake several hosts on one).
static int64_t host_id(void) {
    char h[256] = "";
    const char *env = getenv("SHARDLM_HOST_ID");
    if (env && *env)
        snprintf(h, sizeof h, "%s", env);
    else
        gethostname(h, sizeof h - 1);
    uint64_t x = 1469598103934665603ull;
    for (const char *p = h; *p; p++)
        x = (x ^ (uint8_t)*p) * 1099511628211ull;
    return (int64_t)(x >> 1);
}

// Rank 0: refuses a prefix whose newest checkpoint is another run's (model config or tokenizer).
static slm_status check_identity(slm_ckpt_uploader *u, const slm_ckpt_meta *meta) {
    char *lk = slm_ckpt_rlay_key_latest(&u->L), *data = NULL;
    size_t n = 0;
    bool found = false;
    slm_status st = slm_s3_get(u->s3, u->L.bucket, lk, &data, &n, &found);
    int64_t s;
    if (st || !found || !slm_ckpt_rlay_parse_step(data, n, &s)) {
        free(lk);
        free(data);
        return st;
    }
    free(data);
    data = NULL;
    char *mk = slm_ckpt_rlay_key_step(&u->L, s, "manifest.json");
    st = slm_s3_get(u->s3, u->L.bucket, mk, &data, &n, &found);
    if (!st && found) {
        slm_buf where = {0};
        slm_buf_appendf(&where, "s3://%s/%s", u->L.bucket, mk);
        slm_ckpt *c = slm_ckpt_alloc(where.data);
        st = slm_ckpt_parse_manifest(c, data, n);
        if (!st) {
            const slm_ckpt_meta *R = slm_ckpt_get_meta(c);
            cJSON *a = cJSON_CreateObject(), *b = cJSON_CreateObject();
            slm_llama_config_to_json(&R->cfg, false, a);
            slm_llama_config_to_json(&meta->cfg, false, b);
            char *ja = cJSON_PrintUnformatted(a), *jb = cJSON_PrintUnformatted(b);
            if (strcmp(ja, jb) != 0)
                st = slm_fail(SLM_E_ARG,
                              "--ckpt-uri %s holds another run's checkpoints (%s: model_config "
                              "%s, this run's %s); give another prefix",
                              u->uri, where.data, ja, jb);
            else if (R->has_tokenizer != meta->has_tokenizer ||
                     (R->has_tokenizer && R->tokenizer_xxh64 != meta->tokenizer_xxh64)) {
                char x[17] = "-", y[17] = "-";
                if (R->has_tokenizer) slm_hex64(R->tokenizer_xxh64, x);
                if (meta->has_tokenizer) slm_hex64(meta->tokenizer_xxh64, y);
                st = slm_fail(SLM_E_ARG,
                              "--ckpt-uri %s holds another run's checkpoints (%s: tokenizer "
                              "xxh64 %s, this run's %s); give another prefix",
                              u->uri, where.data, x, y);
            }
            free(ja);
            free(jb);
            cJSON_Delete(a);
            cJSON_Delete(b);
        } else {
            st = slm_fail_wrap(st, "--ckpt-uri %s: the remote latest checkpoint", u->uri);
        }
        slm_ckpt_free(c);
        slm_buf_free(&where);
    }
    free(data);
    free(mk);
    free(lk);
    return st;
}

// Rank 0, at start: the step of RUN_DIR/checkpoints/latest if it is newer than the remote latest
// (a previous run stopped or failed before its upload completed), else -1: uploaded at the first
// step boundary, so the remote copy catches up.
static int64_t catchup_step(slm_ckpt_uploader *u) {
    char *lp = slm_path_join(u->root, "latest"), *txt = NULL;
    size_t n = 0;
    int64_t loc = -1, rem = -1;
    if (slm_is_file(lp) && slm_file_read_all(lp, &txt, &n) == SLM_OK &&
        !slm_ckpt_rlay_parse_step(txt, n, &loc))
        loc = -1;
    free(txt);
    free(lp);
    if (loc < 0) return -1;
    char *lk = slm_ckpt_rlay_key_latest(&u->L), *data = NULL;
    bool found = false;
    slm_status st = slm_s3_get(u->s3, u->L.bucket, lk, &data, &n, &found);
    free(lk);
    if (!st && found && !slm_ckpt_rlay_parse_step(data, n, &rem)) rem = -1;
    free(data);
    // (the server unreachable: its latest is unknown, so the local one goes up)
    if (!st) u->remote_done = rem;
    if (loc <= rem) return -1;
    char *dir = slm_ckpt_step_dir(u->root, loc, false);
    char *mp = slm_path_join(dir, "manifest.json");
    bool have = slm_is_file(mp);
    free(mp);
    free(dir);
    if (!have) return -1;
    slm_info("checkpoint upload: local step_%08" PRId64 " is newer than the remote latest "
             "(step %" PRId64 ", -1: none); uploading it",
             loc, rem);
    return loc;
}

slm_status slm_ckpt_uploader_new(const slm_ckpt_upload_opts *o, slm_ckpt_uploader **out) {
    *out = NULL;
    slm_ckpt_uploader *u = slm_xcalloc(1, sizeof *u);
    u->rank = o->rank;
    u->world = o->world;
    u->keep = o->keep;
    u->root = slm_xstrdup(o->root);
    u->uri = slm_xstrdup(o->uri);
    u->files_step = u->final_step = u->files_done = u->pending = u->last_handed = -1;
    u->newest = u->catchup = u->retry_step = u->remote_done = -1;
    u->grace_s = o->preempt_grace_s;
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    u->poll_v = slm_xcalloc(3, sizeof *u->poll_v);
    u->poll_step = u->defer_files = u->defer_final = -1;
    slm_status st = slm_ckpt_rlay_parse(o->uri, &u->L);
    if (!st && (o->prefix_shards < 1 || o->prefix_shards > 100))
        st = slm_fail(SLM_E_ARG, "--s3-prefix-shards %d: expected 1..100", o->prefix_shards);
    if (!st) u->L.shards = o->prefix_shards;
    // Hosts: every rank's host id; the lowest rank of each host leads it.
    int64_t me = host_id();
    int64_t *ids = slm_xcalloc((size_t)o->world, sizeof *ids);
    if (o->world > 1)
        slm_dist_allgather(&me, ids, 1, SLM_DTYPE_I64, "checkpoint upload hosts");
    else
        ids[0] = me;
    int lead = o->rank;
    for (int r = 0; r < o->world; r++)
        if (ids[r] == me && r < lead) lead = r;
    u->leader = lead == o->rank;
    if (u->leader) {
        u->local_ranks = slm_xcalloc((size_t)o->world, sizeof(int));
        for (int r = 0; r < o->world; r++)
            if (ids[r] == me) u->local_ranks[u->n_local++] = r;
    }
    u->leader_of = slm_xcalloc((size_t)o->world, sizeof(int));
    for (int r = 0; r < o->world; r++) {
        u->leader_of[r] = r;
        for (int q = 0; q < r; q++)
            if (ids[q] == ids[r]) {
                u->leader_of[r] = q;
                break;
            }
    }
    free(ids);
    if (!st && u->leader) st = slm_s3_open_default(NULL, NULL, &u->s3);
    if (!st && o->rank == 0 && o->meta) st = check_identity(u, o->meta);
    if (!st && o->rank == 0 && o->meta && o->meta->tokenizer_file[0]) {
        // The run's tokenizer copy (RUN_DIR/<file>), so `ckpt export s3://...` finds it.
        char *run = slm_path_parent(o->root);
        char *tp = slm_path_join(run, o->meta->tokenizer_file);
        slm_buf key = {0};
        slm_buf_appendf(&key, "%s%s", u->L.prefix, o->meta->tokenizer_file);
        if (slm_is_file(tp)) st = slm_s3_put_file(u->s3, u->L.bucket, key.data, tp);
        slm_buf_free(&key);
        free(tp);
        free(run);
    }
    if (!st && o->rank == 0) u->catchup = catchup_step(u);
    if (o->world > 1)
        slm_dist_bcast(&u->catchup, 1, SLM_DTYPE_I64, 0, "checkpoint upload catch-up");
    if (!st && u->leader) {
        if (pthread_create(&u->th, NULL, up_thread, u) != 0)
            st = slm_fail(SLM_E_IO, "checkpoint upload: cannot start the uploader thread");
        else
            u->th_started = true;
    }
    st = o->world > 1 ? slm_dist_agree(st) : st;
    if (st) {
        slm_ckpt_uploader_free(u);
        return st;
    }
    *out = u;
    return SLM_OK;
}

// Collective: [files still running anywhere, failed anywhere, `flag` anywhere] for the pending
// step.
static void poll_pending(slm_ckpt_uploader *u, bool flag, bool *done, bool *failed,
                         bool *any_flag) {
    int64_t v[3] = {0, 0, flag};
    if (u->leader) {
        pthread_mutex_lock(&u->mu);
        v[0] = u->files_done != u->pending;
        v[1] = u->files_done == u->pending && u->files_failed;
        pthread_mutex_unlock(&u->mu);
    }
    if (u->world > 1) slm_dist_allreduce(v, 3, SLM_DTYPE_I64, SLM_OP_MAX, "checkpoint upload poll");
    *done = v[0] == 0;
    *failed = v[1] != 0;
    *any_flag = v[2] != 0;
}

// Starts the boundary poll (collective: every rank at the same boundary, in the same state):
// about the pending upload, or (none pending) whether rank 0's retry delay passed.
static void poll_start(slm_ckpt_uploader *u) {
    int64_t *v = u->poll_v;
    v[0] = v[1] = v[2] = 0;
    if (u->pending >= 0 && u->leader) {
        if (pthread_mutex_trylock(&u->mu) == 0) {
            v[0] = u->files_done != u->pending;
            v[1] = u->files_done == u->pending && u->files_failed;
            pthread_mutex_unlock(&u->mu);
        } else {
            v[0] = 1; // the thread holds its mutex: not known done, ask again later
        }
    }
    if (u->pending < 0 && u->rank == 0) v[2] = slm_time_s() >= u->retry_at;
    u->poll_step = u->pending;
    u->n_polls++;
    double t0 = slm_time_s();
    slm_dist_iallreduce(slm_comm_world(), v, 3, SLM_DTYPE_I64, SLM_OP_MAX, "checkpoint upload poll",
                        &u->poll_req);
    u->poll_s += slm_time_s() - t0;
    u->poll_started = true;
}

// The next boundary's poll, started now (every rank is here in the same state) at boundaries 0,
// 1, 2, 4, 8, 16, then every 16th after the hand-off (or the failure): most boundaries cost
// nothing, and an upload is seen done at most 16 boundaries (or twice its time) late. A world of
// one polls at every boundary itself instead (fresh, no MPI).
static void poll_next(slm_ckpt_uploader *u) {
    int64_t k = u->calls - u->poll_base;
    if (u->world > 1 && ((k & (k - 1)) == 0 || k % 16 == 0)) poll_start(u);
}

// Completes the poll started at an earlier boundary (collective; by now every rank started it,
// so this hardly waits). Returns false when none was started; else v[3] as in poll_start.
static bool poll_end(slm_ckpt_uploader *u, int64_t v[3]) {
    if (!u->poll_req.active && !u->poll_started) return false;
    double t0 = slm_time_s();
    slm_dist_wait(&u->poll_req);
    double w = slm_time_s() - t0;
    u->poll_s += w;
    if (w > u->poll_max_s) u->poll_max_s = w;
    u->poll_started = false;
    memcpy(v, u->poll_v, 3 * sizeof *v);
    return true;
}

// Hands the deferred jobs to the thread: without waiting (a trylock; what cannot go now stays
// deferred for the next boundary), or, with `block`, waiting for its mutex and for the previous
// manifest + latest to finish.
static void flush_jobs(slm_ckpt_uploader *u, bool block) {
    if (u->defer_files < 0 && u->defer_final < 0) return;
    if (block)
        pthread_mutex_lock(&u->mu);
    else if (pthread_mutex_trylock(&u->mu) != 0)
        return;
    while (block && u->defer_final >= 0 && u->final_step >= 0) // the previous one still running
        pthread_cond_wait(&u->cv, &u->mu);
    bool final_went = false;
    if (u->defer_final >= 0 && u->final_step < 0) {
        final_went = true;
        if (u->defer_text) {
            u->final_step = u->defer_final;
            u->final_manifest = u->defer_text;
            u->final_len = u->defer_len;
            u->defer_text = NULL;
        }
    }
    if (u->defer_files >= 0 && u->files_step < 0) {
        if (u->defer_failed) { // the mapping failed: done, failed
            u->files_done = u->defer_files;
            u->files_failed = true;
            snprintf(u->files_msg, sizeof u->files_msg, "%s", u->defer_msg);
        } else {
            u->files = u->defer_f;
            u->n_files = u->defer_n;
            u->files_step = u->defer_files;
            u->defer_f = NULL;
            u->defer_n = 0;
        }
        u->defer_files = -1;
    }
    if (block) pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
    if (final_went) {
        if (!u->defer_final_ok) {
            slm_error("checkpoint upload of step %" PRId64 ": its manifest could not be read at "
                      "the hand-off",
                      u->defer_final);
            u->n_failed++;
        } else {
            u->n_done++;
            if (u->defer_final_retry) u->n_failed--; // counted as failed before, complete now
        }
        u->defer_final = -1;
    }
}

#define RETRY_MAX 8       // retries of one failed checkpoint upload
#define RETRY_FIRST_S 2.0 // first retry this long after the failure, doubling...
#define RETRY_LAST_S 60.0 // ... up to this

// The pending step's files are uploaded everywhere: rank 0 queues the manifest + latest.
static void settle_pending(slm_ckpt_uploader *u, bool failed) {
    int64_t step = u->pending;
    bool retry = u->pending_retry, cancelled = u->cancelling;
    u->pending = -1;
    u->pending_retry = false;
    if (cancelled) {
        u->cancelling = false;
        if (u->s3) slm_s3_cancel(u->s3, false);
    }
    if (failed) {
        if (cancelled) {
            if (u->rank == 0)
                slm_warn("checkpoint upload of step_%08" PRId64 " to %s abandoned (%s); the "
                         "remote latest still names the previous complete checkpoint",
                         step, u->uri,
                         u->deadline > 0 ? "preemption: --preempt-grace" : "a newer checkpoint");
            // its final fate: abandoned (a retry was counted failed at its first attempt)
            if (retry) u->n_failed--;
            u->n_abandoned++;
            return;
        }
        if (!retry) u->n_failed++;
        if (u->leader) {
            pthread_mutex_lock(&u->mu);
            if (u->files_failed) slm_error("checkpoint upload: %s", u->files_msg);
            pthread_mutex_unlock(&u->mu);
        }
        // Retried (bounded) at later step boundaries until a newer checkpoint supersedes it.
        if (u->retry_step != step) u->retry_n = 0;
        u->retry_step = step;
        double delay = RETRY_FIRST_S;
        for (int i = 0; i < u->retry_n && delay < RETRY_LAST_S; i++)
            delay *= 2;
        if (delay > RETRY_LAST_S) delay = RETRY_LAST_S;
        u->retry_at = slm_time_s() + delay;
        u->poll_base = u->calls;
        bool give_up = u->retry_n >= RETRY_MAX;
        if (give_up) u->retry_step = -1;
        if (u->rank == 0) {
            if (u->finishing) // no later boundary: slm_ckpt_uploader_finish says what is missing
                slm_error("checkpoint step_%08" PRId64 " was not uploaded to %s (see the errors "
                          "above)",
                          step, u->uri);
            else if (give_up)
                slm_error("checkpoint step_%08" PRId64 " was not uploaded to %s after %d retries "
                          "(see the errors above); the remote latest still names the previous "
                          "complete one; the next checkpoint is uploaded in full",
                          step, u->uri, u->retry_n);
            else
                slm_error("checkpoint step_%08" PRId64 " was not uploaded to %s (see the errors "
                          "above); the remote latest still names the previous complete one; "
                          "retry %d of %d in %.0f s (or the next checkpoint, whichever first)",
                          step, u->uri, u->retry_n + 1, RETRY_MAX, delay);
        }
        return;
    }
    if (u->retry_step == step) u->retry_step = -1;
    if (u->rank != 0) {
        u->n_done++;
        return;
    }
    if (u->defer_final >= 0) flush_jobs(u, true); // the previous one still waits (rare)
    u->defer_final = step;
    u->defer_final_retry = retry;
    u->defer_text = u->pending_manifest;
    u->defer_len = u->pending_len;
    u->defer_final_ok = u->defer_text != NULL;
    u->pending_manifest = NULL;
    flush_jobs(u, false);
}

// Cancels the pending upload on every leader (collective callers only: every rank calls it at
// the same point); the wait that follows settles it as abandoned.
static void cancel_pending(slm_ckpt_uploader *u) {
    u->cancelling = true;
    if (u->s3) slm_s3_cancel(u->s3, true);
}

typedef enum {
    WAIT_ALL,      // until the pending upload ends
    WAIT_STOP,     // ... or a stop (SIGINT / SIGTERM / SIGUSR1) reached any rank: returns false
    WAIT_DEADLINE, // ... or u->deadline passed on any rank: the upload is cancelled (abandoned)
} wait_mode;

// Completes the boundary poll in flight (if any) and acts on it (collective): settles the
// pending upload when it was done everywhere. Returns whether rank 0 found a failed upload's
// retry due (only for a poll started with nothing pending).
static bool poll_take(slm_ckpt_uploader *u) {
    int64_t v[3];
    if (!poll_end(u, v)) return false;
    if (u->poll_step < 0) return v[2] != 0 && u->pending < 0;
    if (u->poll_step == u->pending && v[0] == 0) {
        double t0 = slm_time_s();
        settle_pending(u, v[1] != 0);
        u->settle_s += slm_time_s() - t0;
    }
    return false;
}

// Waits for the pending upload (collective). Returns whether it settled.
static bool wait_pending(slm_ckpt_uploader *u, wait_mode mode) {
    flush_jobs(u, true); // a deferred hand-off must reach the thread before it can finish
    (void)poll_take(u);  // the boundary poll in flight, if any (it may have settled it)
    while (u->pending >= 0) {
        bool flag = false;
        if (mode == WAIT_STOP) flag = slm_stop_requested();
        if (mode == WAIT_DEADLINE) flag = u->deadline > 0 && slm_time_s() >= u->deadline;
        bool done, failed, any;
        poll_pending(u, flag, &done, &failed, &any);
        if (done) {
            settle_pending(u, failed);
            return true;
        }
        if (any && mode == WAIT_STOP) return false;
        if (any && mode == WAIT_DEADLINE && !u->cancelling) cancel_pending(u);
        usleep(2000);
    }
    return true;
}

// Hands `step` (committed locally) to the uploader: rank 0 reads its manifest, each leader maps
// its host's rank files (a later local retention may delete them; the mappings keep the bytes)
// and queues the job for its thread (flush_jobs: never waiting for the thread's mutex).
static void hand_off(slm_ckpt_uploader *u, int64_t step, bool retry) {
    double t0 = slm_time_s();
    if (step > u->last_handed) u->last_handed = step;
    u->pending = step;
    u->poll_base = u->calls;
    u->pending_retry = retry;
    if (u->retry_step >= 0 && step > u->retry_step) u->retry_step = -1; // superseded
    slm_status st = SLM_OK;
    if (u->rank == 0) {
        char *dir = slm_ckpt_step_dir(u->root, step, false);
        char *mp = slm_path_join(dir, "manifest.json");
        free(u->pending_manifest);
        u->pending_manifest = NULL;
        if (slm_file_read_all(mp, &u->pending_manifest, &u->pending_len))
            slm_error("checkpoint upload: %s", slm_errmsg());
        free(mp);
        free(dir);
    }
    if (u->leader) {
        char *dir = slm_ckpt_step_dir(u->root, step, false);
        up_file *f = slm_xcalloc((size_t)u->n_local, sizeof *f);
        int n = 0;
        for (int i = 0; i < u->n_local && !st; i++) {
            char name[32];
            snprintf(name, sizeof name, "rank_%05d.bin", u->local_ranks[i]);
            char *p = slm_path_join(dir, name);
            if (slm_is_file(p)) { // replicas write no file
                st = slm_map_file(p, &f[n].map);
                if (!st) n++;
            }
            free(p);
        }
        free(dir);
        files_free(u->defer_f, u->defer_n); // (none: a hand-off follows a settled one)
        u->defer_f = NULL;
        u->defer_n = 0;
        u->defer_failed = st != SLM_OK;
        if (st) {
            files_free(f, n);
            snprintf(u->defer_msg, sizeof u->defer_msg, "%s", slm_errmsg());
        } else {
            u->defer_f = f;
            u->defer_n = n;
        }
        u->defer_files = step;
        flush_jobs(u, false);
    }
    u->handoff_s += slm_time_s() - t0;
}

static slm_status uploader_step(slm_ckpt_uploader *u, int64_t committed);

slm_status slm_ckpt_uploader_step(slm_ckpt_uploader *u, int64_t committed) {
    if (!u) return SLM_OK;
    double t0 = slm_time_s(), w0 = u->stall_total_s;
    slm_status st = uploader_step(u, committed);
    u->boundary_s += slm_time_s() - t0 - (u->stall_total_s - w0);
    return st;
}

static slm_status uploader_step(slm_ckpt_uploader *u, int64_t committed) {
    if (committed < u->catchup) committed = u->catchup; // uploaded at the first boundary
    if (committed > u->newest) u->newest = committed;
    u->calls++;
    flush_jobs(u, false); // what the thread's mutex kept from it at an earlier boundary
    bool newer = committed >= 0 && committed > u->last_handed;
    // The poll started at the previous boundary (a world of one: started now, no MPI): settles a
    // finished upload, or says a failed one's retry is due (rank 0's clock).
    if (u->world == 1 && !u->poll_started && (u->pending >= 0 || u->retry_step >= 0)) poll_start(u);
    bool due = poll_take(u);
    if (!newer) {
        if (due && u->pending < 0 && u->retry_step >= 0) {
            u->retry_n++;
            if (u->rank == 0)
                slm_info("checkpoint upload: retrying step_%08" PRId64 " (%d of %d)", u->retry_step,
                         u->retry_n, RETRY_MAX);
            hand_off(u, u->retry_step, true);
        }
        if (u->pending >= 0 || u->retry_step >= 0) poll_next(u);
        return SLM_OK;
    }
    if (u->pending >= 0 && u->pending_retry) {
        // A retry still running when a newer checkpoint commits: give it up for the newer one
        // (training never waits for a retry).
        cancel_pending(u);
        wait_pending(u, WAIT_ALL);
    }
    if (u->pending >= 0) {
        // The next upload would overlap the previous one: training waits (the stall), unless a
        // stop arrives meanwhile (then slm_ckpt_uploader_finish decides, within its deadline).
        double t0 = slm_time_s();
        bool settled = wait_pending(u, WAIT_STOP);
        double w = slm_time_s() - t0;
        u->stall_total_s += w;
        if (w > u->stall_max_s) u->stall_max_s = w;
        if (u->rank == 0 && w > 0.01) // (under 10 ms: it had just finished)
            slm_warn("checkpoint upload: step_%08" PRId64 " committed while the previous upload "
                     "was running; training waited %.2f s for it%s",
                     committed, w, settled ? "" : " (stop requested: waiting no longer)");
        if (!settled) return SLM_OK;
    }
    hand_off(u, committed, false);
    poll_next(u);
    return SLM_OK;
}

// Preemption: the seconds left of --preempt-grace for uploads, agreed (the smallest over the
// ranks a signal reached; clocks are not compared across hosts), or < 0 for no deadline.
static double grace_left(slm_ckpt_uploader *u) {
    double left = 1e300;
    double sig = slm_stop_signal_time();
    if (u->grace_s > 0 && slm_stop_preempted() && sig > 0) {
        // keep a margin for settling, the summary and the exit
        double margin = u->grace_s * 0.25 < 3.0 ? u->grace_s * 0.25 : 3.0;
        left = sig + u->grace_s - margin - slm_time_s();
        if (left < 0) left = 0;
    }
    if (u->world > 1) slm_dist_allreduce(&left, 1, SLM_DTYPE_F64, SLM_OP_MIN, "upload deadline");
    return left < 1e299 ? left : -1;
}

slm_status slm_ckpt_uploader_finish(slm_ckpt_uploader *u) {
    if (!u) return SLM_OK;
    double t0 = slm_time_s();
    u->finishing = true;
    double left = grace_left(u);
    u->deadline = left >= 0 ? t0 + (left > 0 ? left : 1e-9) : 0;
    wait_pending(u, WAIT_DEADLINE);
    // The newest committed step (a stop at a stall left it unhanded), or one more try of a failed
    // upload; not past the deadline (agreed: the deadline is rank-independent up to the clocks'
    // progress, so rank 0 decides).
    int64_t go = -1;
    if (u->newest > u->last_handed)
        go = u->newest;
    else if (u->retry_step >= 0 && u->deadline == 0)
        go = u->retry_step;
    int64_t ok = u->rank == 0 && (u->deadline == 0 || slm_time_s() < u->deadline);
    if (u->world > 1) slm_dist_bcast(&ok, 1, SLM_DTYPE_I64, 0, "checkpoint upload at the end");
    if (go >= 0 && ok) {
        hand_off(u, go, go == u->retry_step);
        wait_pending(u, WAIT_DEADLINE);
    }
    slm_status st = SLM_OK;
    bool abandoned = false;
    int64_t behind = INT64_MAX; // rank 0: what the remote latest names when it is behind
    if (u->rank == 0) {
        flush_jobs(u, true); // the last manifest + latest, if still deferred
        pthread_mutex_lock(&u->mu);
        while (u->final_step >= 0 || u->busy) {
            if (u->deadline > 0 && slm_time_s() >= u->deadline && !abandoned) {
                abandoned = true; // the manifest / latest of the last one: given up
                if (u->s3) slm_s3_cancel(u->s3, true);
            }
            timed_wait_ms(&u->cv, &u->mu, 50);
        }
        if (u->final_failed) {
            if (abandoned || u->final_cancelled) {
                u->n_done--; // counted at the hand-over of its manifest
                u->n_abandoned++;
                slm_warn("checkpoint upload to %s: the final manifest / latest abandoned at the "
                         "preemption deadline: %s",
                         u->uri, u->final_msg);
            } else {
                slm_error("checkpoint upload to %s: %s", u->uri, u->final_msg);
            }
            u->final_failed = false;
        }
        behind = u->newest > u->remote_done ? u->remote_done : INT64_MAX;
        pthread_mutex_unlock(&u->mu);
    }
    // Success only with the newest committed checkpoint on S3: a run that ends with the remote
    // copy behind fails (a preemption excepted: it exits 75 and the next run uploads it), so a
    // supervisor runs it again and that run (already complete, or not) uploads it.
    if (behind != INT64_MAX && u->deadline == 0 && !slm_stop_preempted()) {
        char rl[64] = "no checkpoint";
        if (behind >= 0) snprintf(rl, sizeof rl, "step_%08" PRId64, behind);
        st = slm_fail(SLM_E_IO,
                      "checkpoint upload to %s: step_%08" PRId64 " (committed locally) is not on "
                      "S3, whose latest names %s (see the errors above); run again with --resume "
                      "auto and --ckpt-uri (the same --out) to upload it",
                      u->uri, u->newest, rl);
    }
    if (u->world > 1) st = slm_dist_agree(st);
    double w = slm_time_s() - t0;
    if (u->rank == 0) {
        slm_s3_stats s = {0};
        if (u->s3) slm_s3_get_stats(u->s3, &s);
        slm_info("checkpoint uploads to %s: %lld complete, %lld failed, %lld abandoned; rank 0's "
                 "host: %lld PUTs, "
                 "%.1f MiB, %lld retries (%lld throttled); training waited %.2f s for overlaps, "
                 "%.2f s at the end, %.2f ms at step boundaries (%lld polls %.2f ms, max %.2f ms; "
                 "hand-offs %.2f ms, settling %.2f ms)",
                 u->uri, (long long)u->n_done, (long long)u->n_failed, (long long)u->n_abandoned,
                 (long long)s.puts, (double)s.bytes_up / (1 << 20), (long long)s.retries,
                 (long long)s.throttled, u->stall_total_s, w, 1000 * u->boundary_s,
                 (long long)u->n_polls, 1000 * u->poll_s, 1000 * u->poll_max_s, 1000 * u->handoff_s,
                 1000 * u->settle_s);
        if (u->deadline > 0 && behind != INT64_MAX)
            slm_warn("checkpoint step_%08" PRId64 " (committed locally) not uploaded before the "
                     "preemption deadline; the next run with --resume auto and --ckpt-uri "
                     "uploads it",
                     u->newest);
    }
    return st;
}

slm_status slm_ckpt_upload_catchup(const slm_ckpt_upload_opts *o) {
    slm_ckpt_uploader *u = NULL;
    slm_status st = slm_ckpt_uploader_new(o, &u);
    if (!st) st = slm_ckpt_uploader_step(u, -1); // hands off the catch-up (if any)
    if (!st) st = slm_ckpt_uploader_finish(u);
    slm_ckpt_uploader_free(u);
    return st;
}

void slm_ckpt_uploader_stats(const slm_ckpt_uploader *u, int64_t *puts, int64_t *n_done,
                             double *stall_s) {
    slm_s3_stats s = {0};
    if (u->s3) slm_s3_get_stats(u->s3, &s);
    *puts = s.puts;
    *n_done = u->n_done;
    *stall_s = u->stall_total_s;
}

void slm_ckpt_uploader_free(slm_ckpt_uploader *u) {
    if (!u) return;
    if (u->th_started) {
        // An upload still running (an error path, a preemption past its deadline) is abandoned
        // rather than waited for: the remote `latest` still names the previous complete one.
        slm_s3_cancel(u->s3, true);
        pthread_mutex_lock(&u->mu);
        u->quit = true;
        pthread_cond_broadcast(&u->cv);
        pthread_mutex_unlock(&u->mu);
        pthread_join(u->th, NULL);
    }
    // A boundary poll still in flight (an error path where the ranks did not finish together):
    // MPI may yet write its buffer, so it is left allocated unless the poll completed.
    if (!u->poll_started || slm_dist_test(&u->poll_req)) free(u->poll_v);
    free(u->final_manifest);
    free(u->pending_manifest);
    free(u->defer_text);
    files_free(u->files, u->n_files);
    files_free(u->defer_f, u->defer_n);
    slm_s3_close(u->s3);
    slm_ckpt_rlay_free(&u->L);
    free(u->local_ranks);
    free(u->leader_of);
    free(u->root);
    free(u->uri);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    free(u);
}
