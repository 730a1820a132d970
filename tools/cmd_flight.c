// shardlm flight RUN_DIR: the hang verdict from the ranks' flight-recorder dumps
// (slm_flight_analyze, src/dist/dist.h).
#include <stdio.h>

#include "cmd.h"
#include "dist/dist.h"

typedef struct flight_args {
    int unused;
} flight_args;

static const slm_opt k_flight_opts[] = {{.type = SLM_OPT_END}};

static const slm_cli k_flight_cli = {
    .cmd = "flight",
    .usage = "usage: shardlm flight RUN_DIR\n"
             "Reads RUN_DIR/logs/flight_rank_RRRRR.json (written by every rank on a collective\n"
             "timeout, a fatal signal or SIGUSR2), matches the collectives' sequence numbers per\n"
             "group across ranks and names the rank that never entered the collective the\n"
             "others wait in, with where it was (step, phase, FSDP unit; for a rank without a\n"
             "dump, its RUN_DIR/heartbeat record). docs/operations.md \"Flight recorder\".\n",
    .opts = k_flight_opts,
    .max_positional = 1,
    .footer = "\nexit codes: 0 a rank was named, 1 error (no dump, malformed dump), 2 usage "
              "error, 3 no culprit found (no rank waits on a missing one)\n",
};

int slm_cmd_flight(int argc, char **argv) {
    flight_args a = {0};
    slm_opt_seen seen;
    int rc = slm_opt_parse(&k_flight_cli, argc, argv, &a, &seen);
    if (rc >= 0) return rc;
    if (seen.n_positional != 1) {
        slm_error("flight: give the run directory (shardlm flight RUN_DIR)");
        return SLM_EXIT_USAGE;
    }
    slm_flight_verdict v;
    slm_status st = slm_flight_analyze(seen.positional[0], &v);
    if (st) {
        slm_error("flight: %s", slm_errmsg());
        return SLM_EXIT_ERROR;
    }
    fputs(v.text, stdout);
    if (fflush(stdout) != 0) return SLM_EXIT_ERROR;
    return v.culprit >= 0 ? SLM_EXIT_OK : 3;
}
