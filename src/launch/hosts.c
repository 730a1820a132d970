// Hosts: the host list, exclusions, usable slots, and the world of the next attempt.
#include "launch/launch_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int slm_launch_parse_hosts(const char *text, bool is_file, char **names, int *slots, int cap) {
    int n = 0, lineno = 0;
    const char *p = text;
    while (*p) {
        const char *e = is_file ? strchr(p, '\n') : strchr(p, ',');
        if (!e) e = p + strlen(p);
        lineno++;
        char item[512];
        size_t len = (size_t)(e - p);
        if (len >= sizeof item) {
            slm_fail(SLM_E_ARG, "%s %d is longer than %zu characters", is_file ? "line" : "item",
                     lineno, sizeof item - 1);
            goto fail;
        }
        memcpy(item, p, len);
        item[len] = 0;
        char *hash = strchr(item, '#');
        if (hash) *hash = 0;
        char name[256] = "", extra[256] = "";
        int got = sscanf(item, " %255[^: \t\r] %255[^\r]", name, extra);
        p = *e ? e + 1 : e;
        if (got < 1 || !name[0]) {
            if (!is_file) {
                slm_fail(SLM_E_ARG, "item %d is empty (expected HOST or HOST:SLOTS)", lineno);
                goto fail;
            }
            continue;
        }
        long s = 1;
        const char *colon = strchr(item, ':');
        const char *sl = strstr(item, "slots=");
        char *end = NULL;
        if (sl)
            s = strtol(sl + 6, &end, 10);
        else if (colon)
            s = strtol(colon + 1, &end, 10);
        if ((sl || colon) && (!end || end == (sl ? sl + 6 : colon + 1) || s < 1 || s > 100000)) {
            slm_fail(SLM_E_ARG, "%s %d \"%s\": slots must be an integer in [1, 100000]",
                     is_file ? "line" : "item", lineno, item);
            goto fail;
        }
        if (n == cap) {
            slm_fail(SLM_E_ARG, "more than %d hosts", cap);
            goto fail;
        }
        names[n] = slm_xstrdup(name);
        slots[n] = (int)s;
        n++;
    }
    if (n == 0) {
        slm_fail(SLM_E_ARG, "no host given");
        return -1;
    }
    return n;
fail:
    for (int i = 0; i < n; i++)
        free(names[i]);
    return -1;
}

int host_index(run *r, const char *name) {
    for (int i = 0; i < r->n_hosts; i++)
        if (!strcmp(r->host[i], name)) return i;
    return -1;
}

int n_excluded(const run *r) {
    int n = 0;
    for (int i = 0; i < r->n_hosts; i++)
        n += r->excluded[i];
    return n;
}

int usable_slots(const run *r) {
    int s = 0;
    for (int i = 0; i < r->n_hosts; i++)
        if (!r->excluded[i]) s += r->slots[i];
    return s;
}

// Excludes host hi from the next attempts ("launch: host H excluded: <why>" and the metrics).
void exclude_host(run *r, int hi, const char *why) {
    r->excluded[hi] = true;
    slm_warn("launch: host %s excluded: %s", r->host[hi], why);
    lm_host_excluded(r->host[hi], n_excluded(r));
}

// The usable host whose slots hold `rank` when ranks fill the usable hosts in order (-1: none).
int host_of_rank(const run *r, int rank) {
    int left = rank;
    for (int i = 0; i < r->n_hosts; i++) {
        if (r->excluded[i]) continue;
        if (left < r->slots[i]) return i;
        left -= r->slots[i];
    }
    return -1;
}

// "--host h1:2,h2:1" covering the first `world` usable slots (or all usable when world < 0).
void host_arg(const run *r, int world, char *out, size_t cap) {
    size_t l = 0;
    out[0] = 0;
    int left = world < 0 ? usable_slots(r) : world;
    for (int i = 0; i < r->n_hosts && left > 0; i++) {
        if (r->excluded[i]) continue;
        int s = r->slots[i] < left ? r->slots[i] : left;
        l += (size_t)snprintf(out + l, cap > l ? cap - l : 0, "%s%s:%d", l ? "," : "", r->host[i],
                              s);
        left -= s;
    }
}

void excluded_list(const run *r, char *out, size_t cap, char sep) {
    size_t l = 0;
    out[0] = 0;
    for (int i = 0; i < r->n_hosts; i++)
        if (r->excluded[i])
            l += (size_t)snprintf(out + l, cap > l ? cap - l : 0, "%s%s", l ? (char[]){sep, 0} : "",
                                  r->host[i]);
}

// Under Slurm: the allocation's node names (`scontrol show hostnames`, which expands
// SLURM_JOB_NODELIST's compressed form), each with an even share of --nproc, so attempts,
// culprits and exclusions name hosts. Left empty (host names unknown, as before) when scontrol
// cannot be run; srun still places the ranks.
void slurm_hosts(run *r) {
    const char *nl = getenv("SLURM_JOB_NODELIST");
    const char *nn = getenv("SLURM_JOB_NUM_NODES");
    if (!nl || !*nl || strchr(nl, '\'') || strlen(nl) > 3000) return;
    int nodes = nn ? atoi(nn) : 1;
    if (nodes < 1) nodes = 1;
    char cmd[3200];
    snprintf(cmd, sizeof cmd, "scontrol show hostnames '%s' 2>/dev/null", nl);
    FILE *f = popen(cmd, "r");
    if (!f) return;
    char line[256];
    int per = (r->o->nproc + nodes - 1) / nodes;
    while (r->n_hosts < MAX_HOSTS && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        r->host[r->n_hosts] = strdup(line);
        if (!r->host[r->n_hosts]) break;
        r->slots[r->n_hosts++] = per;
    }
    pclose(f);
}

// The world of the next attempt: nproc when the usable slots allow, else the largest world in
// [min_nproc, slots] that divides nproc x grad_accum (so the global batch is kept); 0: none.
int choose_world(const run *r) {
    const slm_launch_opts *o = r->o;
    int slots = r->local ? o->nproc : usable_slots(r);
    if (r->slurm) {
        // Under Slurm: the allocation's nodes (SLURM_JOB_NUM_NODES) share nproc evenly.
        const char *nn = getenv("SLURM_JOB_NUM_NODES");
        int nodes = nn ? atoi(nn) : 1, ex = 0;
        for (int i = 0; i < r->n_hosts; i++)
            ex += r->excluded[i];
        if (nodes < 1) nodes = 1;
        int per = (o->nproc + nodes - 1) / nodes;
        slots = (nodes - ex) * per;
    }
    if (slots >= o->nproc) return o->nproc;
    int64_t total = (int64_t)o->nproc * r->grad_accum;
    for (int m = slots; m >= o->min_nproc && m >= 1; m--)
        if (total % m == 0 && m % r->shard_group == 0) return m;
    return 0;
}
