// Argument vectors: the MPI launcher's prefix (mpirun or srun) and lookups in the train
// arguments.
#include "launch/launch_internal.h"

#include <stdarg.h>
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

// av_add of a formatted argument (at most 8191 characters).
void av_addf(argv_t *a, const char *fmt, ...) {
    char s[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    av_add(a, s);
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
static void launcher_prefix(const run *r, argv_t *a, int world, bool all_slots) {
    const slm_launch_opts *o = r->o;
    if (r->slurm) {
        av_add(a, "srun");
        av_add(a, "--mpi=pmix");
        av_add(a, "-n");
        av_addf(a, "%d", world);
        av_add(a, "--kill-on-bad-exit=1");
        char ex[2048];
        excluded_list(r, ex, sizeof ex, ',');
        if (ex[0]) av_addf(a, "--exclude=%s", ex);
    } else {
        av_add(a, launcher_name(r));
        av_add(a, "-np");
        av_addf(a, "%d", world);
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

// Open MPI's verbose component selection, from which the job's output tells the transport
// (pml, btl): environment pairs for job_start.
const char *const k_verbose_mpi_env[] = {"OMPI_MCA_pml_base_verbose", "10",
                                         "OMPI_MCA_btl_base_verbose", "10", NULL};

// An attempt's command: the launcher prefix for at->world ranks, then `shardlm train` with the
// user's train arguments (--grad-accum scaled to keep the global batch; --train-from-scratch
// only while `scratch`) and what the launcher adds: --resume auto, --verify-on-resume on a
// restart, --preempt-grace, --heartbeat-dir.
void train_command(const run *r, const attempt *at, bool scratch, argv_t *a) {
    const slm_launch_opts *o = r->o;
    launcher_prefix(r, a, at->world, false);
    av_add(a, o->exe);
    av_add(a, "train");
    int first = o->train_argc > 0 && !strcmp(o->train_argv[0], "train") ? 1 : 0;
    for (int i = first; i < o->train_argc; i++) {
        if (i == r->scratch_idx && !scratch) continue;
        if (i == r->grad_accum_idx + 1 && r->grad_accum_idx >= 0)
            av_addf(a, "%d", at->grad_accum);
        else
            av_add(a, o->train_argv[i]);
    }
    if (r->grad_accum_idx < 0 && at->grad_accum != 1)
        av_add(a, "--grad-accum"), av_addf(a, "%d", at->grad_accum);
    if (r->add_resume && !scratch) av_add(a, "--resume"), av_add(a, "auto");
    // A restart verifies every file of the checkpoint it resumes (--resume auto then falls back
    // to the newest one that verifies), so a corrupt checkpoint cannot cause a restart loop.
    if (at->n > 1 && !r->has_verify) av_add(a, "--verify-on-resume");
    if (!r->has_grace) av_add(a, "--preempt-grace"), av_addf(a, "%g", o->preempt_grace_s);
    if (r->add_heartbeat) av_add(a, "--heartbeat-dir"), av_add(a, r->hb_dir);
}

// The health check's command on `world` ranks (every usable slot), writing its report to
// `report`.
void health_command(const run *r, int world, const char *report, argv_t *a) {
    const slm_launch_opts *o = r->o;
    launcher_prefix(r, a, world, true);
    av_add(a, o->exe);
    av_add(a, "healthcheck");
    av_add(a, "--run-dir");
    av_add(a, r->run_dir);
    av_add(a, "--report");
    av_add(a, report);
    if (o->health_mem) av_add(a, "--mem"), av_add(a, o->health_mem);
    if (r->model) av_add(a, "--model"), av_add(a, r->model);
    // the known-answer GEMM and the ECC check on the device the run will train on
    if (r->device) av_add(a, "--device"), av_add(a, r->device);
}

// The value after the last `name` in the train arguments (NULL: absent or last); *idx: that
// `name`'s index (-1: absent).
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
