// Reading flight-recorder dumps (slm_flight_parse) and the hang verdict across ranks
// (slm_flight_analyze). Contract in dist.h ("Flight recorder").
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "dist/dist.h"

// A string field that may be null (or absent): *out NULL then. Owned copy.
static slm_status str_field(const char *what, const cJSON *o, const char *key, bool nullable,
                            char **out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (nullable && slm_json_absent_or_null(x)) {
        *out = NULL;
        return SLM_OK;
    }
    const char *s;
    slm_status st = slm_json_str(what, o, key, &s);
    if (!st) *out = slm_xstrdup(s);
    return st;
}

static slm_status parse_groups(const char *what, const cJSON *root, slm_flight_file *f) {
    const cJSON *g = slm_json_arr(root, "groups");
    if (!g) return slm_fail(SLM_E_FORMAT, "%s: field \"groups\": expected an array", what);
    int n = cJSON_GetArraySize(g);
    if (n > SLM_FLIGHT_MAX_GROUPS)
        return slm_fail(SLM_E_FORMAT, "%s: %d groups, expected at most %d", what, n,
                        SLM_FLIGHT_MAX_GROUPS);
    f->groups = slm_xcalloc((size_t)(n ? n : 1), sizeof *f->groups);
    char w[512];
    for (int i = 0; i < n; i++) {
        const cJSON *o = cJSON_GetArrayItem(g, i);
        slm_flight_grp *G = &f->groups[i];
        f->n_groups = i + 1;
        snprintf(w, sizeof w, "%s: groups[%d]", what, i);
        if (!cJSON_IsObject(o)) return slm_fail(SLM_E_FORMAT, "%s: expected an object", w);
        int64_t size;
        slm_status st = str_field(w, o, "name", false, &G->name);
        if (!st) st = slm_json_i64(w, o, "size", 1, f->world, &size);
        if (!st) st = slm_json_u64(w, o, "seq", &G->seq);
        if (st) return st;
        G->size = (int)size;
        const cJSON *r = slm_json_arr(o, "ranks");
        if (!r) return slm_fail(SLM_E_FORMAT, "%s: field \"ranks\": expected an array", w);
        int nr = cJSON_GetArraySize(r);
        if (nr > G->size)
            return slm_fail(SLM_E_FORMAT, "%s: %d ranks listed for a group of %d", w, nr, G->size);
        G->ranks = slm_xcalloc((size_t)(nr ? nr : 1), sizeof(int));
        for (int k = 0; k < nr; k++) {
            double v;
            char wk[560];
            snprintf(wk, sizeof wk, "%s.ranks[%d]", w, k);
            st =
                slm_json_check_num(wk, "rank", cJSON_GetArrayItem(r, k), 0, f->world - 1, true, &v);
            if (st) return st;
            G->ranks[k] = (int)v;
            G->n_ranks = k + 1;
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(f->groups[k].name, G->name))
                return slm_fail(SLM_E_FORMAT, "%s: group \"%s\" listed twice", w, G->name);
    }
    return SLM_OK;
}

static slm_status parse_entries(const char *what, const cJSON *root, slm_flight_file *f) {
    const cJSON *e = slm_json_arr(root, "entries");
    if (!e) return slm_fail(SLM_E_FORMAT, "%s: field \"entries\": expected an array", what);
    int n = cJSON_GetArraySize(e);
    if (n > SLM_FLIGHT_RING)
        return slm_fail(SLM_E_FORMAT, "%s: %d entries, expected at most %d", what, n,
                        SLM_FLIGHT_RING);
    f->entries = slm_xcalloc((size_t)(n ? n : 1), sizeof *f->entries);
    char w[512];
    for (int i = 0; i < n; i++) {
        const cJSON *o = cJSON_GetArrayItem(e, i);
        slm_flight_rec *R = &f->entries[i];
        f->n_entries = i + 1;
        snprintf(w, sizeof w, "%s: entries[%d]", what, i);
        if (!cJSON_IsObject(o)) return slm_fail(SLM_E_FORMAT, "%s: expected an object", w);
        double ts = 0, te = 0;
        slm_status st = slm_json_u64(w, o, "seq", &R->seq);
        if (!st) st = str_field(w, o, "group", false, &R->group);
        if (!st) st = str_field(w, o, "op", false, &R->op);
        if (!st) st = str_field(w, o, "what", true, &R->what);
        if (!st) st = slm_json_i64(w, o, "bytes", 0, INT64_MAX, &R->bytes);
        if (!st) st = slm_json_i64(w, o, "step", INT64_MIN, INT64_MAX, &R->step);
        if (!st) st = str_field(w, o, "phase", true, &R->phase);
        if (!st) st = str_field(w, o, "context", true, &R->context);
        if (!st) st = str_field(w, o, "state", false, &R->state);
        if (!st && !slm_json_absent_or_null(cJSON_GetObjectItemCaseSensitive(o, "t_start")))
            st = slm_json_num(w, o, "t_start", 0, 1e15, false, &ts);
        if (!st && !slm_json_absent_or_null(cJSON_GetObjectItemCaseSensitive(o, "t_end")))
            st = slm_json_num(w, o, "t_end", 0, 1e15, false, &te);
        if (st) return st;
        R->t_start = ts, R->t_end = te;
        if (strcmp(R->state, "started") && strcmp(R->state, "waiting") && strcmp(R->state, "done"))
            return slm_fail(SLM_E_FORMAT,
                            "%s: field \"state\" is \"%.40s\", expected started, waiting or done",
                            w, R->state);
        bool known = !strcmp(R->group, "?");
        for (int k = 0; k < f->n_groups && !known; k++)
            known = !strcmp(f->groups[k].name, R->group);
        if (!known)
            return slm_fail(SLM_E_FORMAT, "%s: group \"%.64s\" is not in the dump's groups", w,
                            R->group);
    }
    return SLM_OK;
}

slm_status slm_flight_parse(const char *text, size_t len, const char *what, slm_flight_file *out) {
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return slm_fail(SLM_E_FORMAT, "%s: not a JSON object", what);
    }
    const char *fmt = NULL;
    int64_t rank = 0, world = 0;
    slm_status st = slm_json_str(what, root, "format", &fmt);
    if (!st && strcmp(fmt, "shardlm-flight-1"))
        st = slm_fail(SLM_E_FORMAT, "%s: field \"format\" is \"%.40s\", expected shardlm-flight-1",
                      what, fmt);
    if (!st) st = slm_json_i64(what, root, "world", 1, 1 << 24, &world);
    if (!st) st = slm_json_i64(what, root, "rank", 0, world - 1, &rank);
    out->rank = (int)rank, out->world = (int)world;
    if (!st) st = slm_json_i64(what, root, "pid", 0, INT64_MAX, &out->pid);
    if (!st) st = str_field(what, root, "host", false, &out->host);
    if (!st) st = str_field(what, root, "reason", false, &out->reason);
    if (!st) st = slm_json_num(what, root, "time", 0, 1e15, false, &out->time);
    if (!st) st = slm_json_i64(what, root, "step", INT64_MIN, INT64_MAX, &out->step);
    if (!st) st = str_field(what, root, "phase", true, &out->phase);
    if (!st) st = str_field(what, root, "context", true, &out->context);
    if (!st) st = parse_groups(what, root, out);
    if (!st) st = parse_entries(what, root, out);
    cJSON_Delete(root);
    if (st) slm_flight_file_free(out);
    return st;
}

void slm_flight_file_free(slm_flight_file *f) {
    for (int i = 0; i < f->n_groups; i++)
        free(f->groups[i].name), free(f->groups[i].ranks);
    for (int i = 0; i < f->n_entries; i++) {
        slm_flight_rec *R = &f->entries[i];
        free(R->group), free(R->op), free(R->what), free(R->phase), free(R->context);
        free(R->state);
    }
    free(f->groups), free(f->entries);
    free(f->host), free(f->reason), free(f->phase), free(f->context);
    memset(f, 0, sizeof *f);
}

// ---------------------------------------------------------------------------------------------
// Verdict

static const slm_flight_grp *find_group(const slm_flight_file *f, const char *name) {
    for (int i = 0; i < f->n_groups; i++)
        if (!strcmp(f->groups[i].name, name)) return &f->groups[i];
    return NULL;
}

// The collective a rank is blocked in: its newest entry in state "waiting" (NULL: none).
static const slm_flight_rec *blocked_in(const slm_flight_file *f) {
    for (int i = f->n_entries - 1; i >= 0; i--)
        if (!strcmp(f->entries[i].state, "waiting")) return &f->entries[i];
    return NULL;
}

// The heartbeat of a rank without a dump: "its last heartbeat: step S, phase P, X s before
// the dumps" appended to b (nothing when there is none).
static void heartbeat_note(slm_buf *b, const char *run_dir, int rank, double t_dump,
                           int64_t *step) {
    char name[64];
    snprintf(name, sizeof name, "heartbeat/rank_%05d.json", rank);
    char *p = slm_path_join(run_dir, name), *txt = NULL;
    size_t len = 0;
    if (slm_file_read_all(p, &txt, &len) == SLM_OK) {
        cJSON *o = cJSON_ParseWithLength(txt, len);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(o, "phase");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "time");
        if (cJSON_IsNumber(s) && cJSON_IsString(ph)) {
            *step = (int64_t)s->valuedouble;
            slm_buf_appendf(b, "; its last heartbeat (%s): step %lld, phase %.32s", p,
                            (long long)*step, ph->valuestring);
            if (cJSON_IsNumber(t) && t_dump > 0)
                slm_buf_appendf(b, ", %.1f s before the first dump", t_dump - t->valuedouble);
        }
        cJSON_Delete(o);
    }
    free(txt);
    free(p);
}

static void list_ranks(slm_buf *b, const int *r, int n) {
    for (int i = 0; i < n; i++)
        slm_buf_appendf(b, "%s%d", i ? (i + 1 == n ? " and " : ", ") : "", r[i]);
}

// Reads every logs/flight_rank_RRRRR.json of the run into *F (*n of them, owned): at least one,
// all of the same world, no rank twice. On error nothing is returned.
static slm_status read_dumps(const char *logs, slm_flight_file **F_out, int *n_out) {
    DIR *d = opendir(logs);
    if (!d) return slm_fail(SLM_E_IO, "%s: no logs directory (no flight-recorder dump)", logs);
    int cap = 0, n = 0;
    slm_flight_file *F = NULL;
    slm_status st = SLM_OK;
    for (struct dirent *e; !st && (e = readdir(d));) {
        int r;
        char tail[8];
        if (sscanf(e->d_name, "flight_rank_%d.jso%1[n]", &r, tail) != 2 ||
            strlen(e->d_name) != strlen("flight_rank_00000.json"))
            continue;
        char *p = slm_path_join(logs, e->d_name), *txt = NULL;
        size_t len = 0;
        st = slm_file_read_all(p, &txt, &len);
        if (!st) {
            if (n == cap) F = slm_xrealloc(F, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *F);
            st = slm_flight_parse(txt, len, p, &F[n]);
            if (!st) n++;
        }
        free(txt);
        free(p);
    }
    closedir(d);
    if (!st && n == 0)
        st = slm_fail(SLM_E_IO, "%s: no flight-recorder dump (flight_rank_RRRRR.json)", logs);
    int W = 0;
    for (int i = 0; !st && i < n; i++) {
        if (W && F[i].world != W)
            st = slm_fail(SLM_E_FORMAT, "%s: dumps of different worlds (%d and %d ranks)", logs, W,
                          F[i].world);
        W = F[i].world;
        for (int k = 0; !st && k < i; k++)
            if (F[k].rank == F[i].rank)
                st = slm_fail(SLM_E_FORMAT, "%s: two dumps of rank %d", logs, F[i].rank);
    }
    if (st) {
        for (int i = 0; i < n; i++)
            slm_flight_file_free(&F[i]);
        free(F);
        return st;
    }
    *F_out = F;
    *n_out = n;
    return SLM_OK;
}

// The rank most waiting ranks name: a member of the group a rank is blocked in that has no
// dump, no such group or an older sequence number in it (-1: none). *any_blocked: some rank
// waits in a collective.
static int vote_culprit(const slm_flight_file *F, int n, const slm_flight_file **by_rank, int W,
                        bool *any_blocked) {
    int *votes = slm_xcalloc((size_t)W, sizeof(int));
    *any_blocked = false;
    for (int i = 0; i < n; i++) {
        const slm_flight_rec *b = blocked_in(&F[i]);
        const slm_flight_grp *G = b ? find_group(&F[i], b->group) : NULL;
        if (!G) continue;
        *any_blocked = true;
        for (int k = 0; k < G->n_ranks; k++) {
            int m = G->ranks[k];
            if (m == F[i].rank) continue;
            const slm_flight_grp *Gm = by_rank[m] ? find_group(by_rank[m], b->group) : NULL;
            if (!by_rank[m] || !Gm || Gm->seq < b->seq) votes[m]++;
        }
    }
    int culprit = -1;
    for (int r = 0; r < W; r++)
        if (votes[r] && (culprit < 0 || votes[r] > votes[culprit])) culprit = r;
    free(votes);
    return culprit;
}

// The collective the culprit c never entered: the first waiting rank naming c gives it; the
// ranks waiting in that same collective go to waiters (v->n_waiting of them).
static const slm_flight_rec *missed_collective(const slm_flight_file *F, int n,
                                               const slm_flight_file **by_rank, int c,
                                               slm_flight_verdict *v, int *waiters) {
    const slm_flight_rec *b = NULL;
    for (int i = 0; i < n; i++) {
        const slm_flight_rec *bi = blocked_in(&F[i]);
        const slm_flight_grp *G = bi ? find_group(&F[i], bi->group) : NULL;
        bool names = false;
        for (int k = 0; G && k < G->n_ranks; k++)
            names = names || G->ranks[k] == c;
        const slm_flight_grp *Gc = by_rank[c] && bi ? find_group(by_rank[c], bi->group) : NULL;
        if (!names || (Gc && Gc->seq >= bi->seq)) continue;
        if (!b) b = bi;
        if (!strcmp(bi->group, b->group) && bi->seq == b->seq) waiters[v->n_waiting++] = F[i].rank;
    }
    return b;
}

// Where the culprit was, from its dump C: step, phase, context and its last collective in the
// group `group`.
static void culprit_dump_note(slm_buf *t, slm_flight_verdict *v, const slm_flight_file *C,
                              const char *group) {
    int c = v->culprit;
    v->culprit_dumped = true;
    v->culprit_step = C->step;
    snprintf(v->culprit_phase, sizeof v->culprit_phase, "%s", C->phase ? C->phase : "");
    snprintf(v->culprit_context, sizeof v->culprit_context, "%s", C->context ? C->context : "");
    const slm_flight_grp *Gc = find_group(C, group);
    slm_buf_appendf(t,
                    "  rank %d (host %s, pid %lld) was at step %lld, phase %s (%s); its "
                    "last collective in %s is #%llu",
                    c, C->host, (long long)C->pid, (long long)C->step, C->phase ? C->phase : "?",
                    C->context ? C->context : "no context", group,
                    (unsigned long long)(Gc ? Gc->seq : 0));
    for (int i = C->n_entries - 1; i >= 0; i--)
        if (!strcmp(C->entries[i].group, group)) {
            slm_buf_appendf(t, " (%s \"%s\", %s)", C->entries[i].op,
                            C->entries[i].what ? C->entries[i].what : "", C->entries[i].state);
            break;
        }
    slm_buf_appendf(t, "\n");
}

// The verdict of a hang whose culprit is v->culprit: the collective it never entered, who waits
// in it, and where the culprit was (its dump, else its heartbeat).
static void describe_hang(slm_buf *t, slm_flight_verdict *v, const slm_flight_file *F, int n,
                          const slm_flight_file **by_rank, const char *run_dir, double t_first) {
    int c = v->culprit;
    int *waiters = slm_xcalloc((size_t)v->world, sizeof(int));
    v->hang = true;
    const slm_flight_rec *b = missed_collective(F, n, by_rank, c, v, waiters);
    snprintf(v->group, sizeof v->group, "%s", b->group);
    snprintf(v->op, sizeof v->op, "%s", b->op);
    snprintf(v->what, sizeof v->what, "%s", b->what ? b->what : "");
    v->seq = b->seq;
    slm_buf_appendf(t,
                    "flight recorder: rank %d never entered collective #%llu of group %s (%s "
                    "\"%s\" at step %lld, phase %s; last dist context: %s) that rank%s ",
                    c, (unsigned long long)b->seq, b->group, b->op, b->what ? b->what : "",
                    (long long)b->step, b->phase ? b->phase : "?",
                    b->context && b->context[0] ? b->context : "none", v->n_waiting > 1 ? "s" : "");
    list_ranks(t, waiters, v->n_waiting);
    slm_buf_appendf(t, " wait%s in\n", v->n_waiting > 1 ? "" : "s");
    free(waiters);
    if (by_rank[c]) {
        culprit_dump_note(t, v, by_rank[c], b->group);
    } else {
        slm_buf_appendf(t,
                        "  rank %d wrote no flight record: it is stopped, hung outside MPI "
                        "or dead",
                        c);
        heartbeat_note(t, run_dir, c, t_first, &v->culprit_step);
        slm_buf_appendf(t, "\n");
    }
}

slm_status slm_flight_analyze(const char *run_dir, slm_flight_verdict *v) {
    memset(v, 0, sizeof *v);
    v->culprit = -1;
    v->culprit_step = -1;
    char *logs = slm_path_join(run_dir, "logs");
    int n = 0;
    slm_flight_file *F = NULL;
    slm_status st = read_dumps(logs, &F, &n);
    free(logs);
    if (st) return st;
    int W = F[0].world;
    v->world = W;
    v->n_dumps = n;
    // by_rank[r]: rank r's dump or NULL
    const slm_flight_file **by_rank = slm_xcalloc((size_t)W, sizeof *by_rank);
    double t_first = 0;
    for (int i = 0; i < n; i++) {
        by_rank[F[i].rank] = &F[i];
        if (t_first == 0 || F[i].time < t_first) t_first = F[i].time;
    }
    bool any_blocked = false;
    v->culprit = vote_culprit(F, n, by_rank, W, &any_blocked);
    slm_buf t = {0};
    if (v->culprit >= 0)
        describe_hang(&t, v, F, n, by_rank, run_dir, t_first);
    else if (any_blocked)
        slm_buf_appendf(&t, "flight recorder: ranks wait in collectives every member entered (a "
                            "communication problem, not a missing rank)\n");
    else
        slm_buf_appendf(&t, "flight recorder: no rank waits in a collective\n");
    slm_buf_appendf(&t, "  dumps from %d of %d ranks", n, W);
    int missing = 0;
    for (int r = 0; r < W; r++)
        if (!by_rank[r]) slm_buf_appendf(&t, "%s%d", missing++ ? ", " : "; none from rank ", r);
    slm_buf_appendf(&t, "\n");
    snprintf(v->text, sizeof v->text, "%s", t.data);
    slm_buf_free(&t);
    free(by_rank);
    for (int i = 0; i < n; i++)
        slm_flight_file_free(&F[i]);
    free(F);
    return SLM_OK;
}
