// Argument vectors: the MPI launcher's prefix (mpirun or srun) and lookups in the train
// arguments.
#include "launch/launch_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void av_add(argv_t *a, const char *s) {
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->v = slm_xrealloc(a->v, sizeof(char *) * (size_t)a->cap);
    }
    a->v[a->n++] = slm_xstrdup(s);
    a->v[a->n] = NULL;
}

void av_free(argv_t *a) {
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

char *av_join(const argv_t *a) {
    slm_buf b = {0};
    for (int i = 0; i < a->n; i++)
        slm_buf_appendf(&b, "%s%s", i ? " " : "", a->v[i]);
    slm_buf_append(&b, "", 1);
    return (char *)b.data;
}

// The MPI launcher's program: srun, --mpirun, $MPIEXEC or mpirun.
const char *launcher_name(const run *r) {
    const char *mpirun = r->o->mpirun ? r->o->mpirun : getenv("MPIEXEC");
    return r->slurm ? "srun" : mpirun && *mpirun ? mpirun : "mpirun";
}

// The launcher command: mpirun (or srun) with its options for `world` ranks, then the program.
void launcher_prefix(const run *r, argv_t *a, int world, bool all_slots) {
    const slm_launch_opts *o = r->o;
    char num[32];
    snprintf(num, sizeof num, "%d", world);
    if (r->slurm) {
        av_add(a, "srun");
        av_add(a, "--mpi=pmix");
        av_add(a, "-n");
        av_add(a, num);
        av_add(a, "--kill-on-bad-exit=1");
        char ex[2048];
        excluded_list(r, ex, sizeof ex, ',');
        if (ex[0]) {
            char arg[2100];
            snprintf(arg, sizeof arg, "--exclude=%s", ex);
            av_add(a, arg);
        }
    } else {
        av_add(a, launcher_name(r));
        av_add(a, "-np");
        av_add(a, num);
        if (!r->local) {
            char h[4096];
            host_arg(r, all_slots ? -1 : world, h, sizeof h);
            av_add(a, "--host");
            av_add(a, h);
        }
        av_add(a, "-x");
        av_add(a, "SHARDLM_ATTEMPT");
        if (getenv("SHARDLM_FAULT")) {
            av_add(a, "-x");
            av_add(a, "SHARDLM_FAULT");
        }
    }
    for (int i = 0; i < o->n_mpi_args; i++)
        av_add(a, o->mpi_args[i]);
}

const char *find_arg(const slm_launch_opts *o, const char *name, int *idx) {
    *idx = -1;
    const char *v = NULL;
    for (int i = 0; i < o->train_argc; i++)
        if (!strcmp(o->train_argv[i], name)) {
            *idx = i;
            v = i + 1 < o->train_argc ? o->train_argv[i + 1] : NULL;
        }
    return v;
}
