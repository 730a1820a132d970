// shardlm: one binary, one subcommand per job. Dispatch only; each cmd_*.c declares its option
// table (tools/opt.h) and parses with it.
#include "cmd.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"prep", slm_cmd_prep, "tokenize a corpus into token shards + manifest.json"},
    {"train", slm_cmd_train, "train a Llama model (AdamW, cosine LR) into a run directory"},
    {"eval", slm_cmd_eval, "loss / perplexity of a run on a split or token ids; unigram entropy"},
    {"generate", slm_cmd_generate, "sample text from a run with the KV cache"},
    {"bench-peak", slm_cmd_bench_peak, "measure the sgemm peak (MFU denominator)"},
    {"tokenizer", slm_cmd_tokenizer, "train a byte-level BPE; encode/decode/info for tokenizers"},
    {"healthcheck", slm_cmd_healthcheck, "preflight checks of every rank, its host and the links"},
    {"launch", slm_cmd_launch,
     "run training under mpirun / srun, supervised, restarted on failure"},
    {"ckpt", slm_cmd_ckpt, "inspect / verify checkpoints; export to Hugging Face safetensors"},
    {"report", slm_cmd_report, "a run as one HTML page with charts (-o), or a text summary"},
    {"flight", slm_cmd_flight, "name the hung rank from a run's flight-recorder dumps"},
    {NULL, NULL, NULL},
};

static void usage(FILE *f) {
    fprintf(f, "usage: shardlm <command> [options]   (shardlm <command> --help for options)\n\n"
               "commands:\n");
    for (size_t i = 0; commands[i].name; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-12s %s\n", "version", "print the version");
}

// SIGINT / SIGTERM before a subcommand installs its own handling (train stops at a step
// boundary, prep cleans its temp directory) or in subcommands that have none: one line on stderr
// and exit 1, never a bare death by signal (shell status 130 / 143). Async-signal-safe.
static void on_early_signal(int sig) {
    static const char msg_int[] = "shardlm error: interrupted by SIGINT; stopping (exit 1)\n";
    static const char msg_term[] = "shardlm error: terminated by SIGTERM; stopping (exit 1)\n";
    slm_tmp_remove_tracked(); // a half-written export, a model's temp directory
    ssize_t w = sig == SIGINT ? write(2, msg_int, sizeof msg_int - 1)
                              : write(2, msg_term, sizeof msg_term - 1);
    (void)w;
    _exit(SLM_EXIT_ERROR);
}

static void install_early_signal_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_early_signal;
    sigemptyset(&sa.sa_mask);
    // A signal the parent set to be ignored (a shell's background job: SIGINT) stays ignored.
    int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

int main(int argc, char **argv) {
    install_early_signal_handlers();
    slm_progress_enable(true); // long work shows progress on stderr; --quiet turns it off
    if (argc < 2) {
        usage(stderr);
        return SLM_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "help")) {
        usage(stdout);
        return SLM_EXIT_OK;
    }
    if (!strcmp(name, "version") || !strcmp(name, "--version")) {
        printf("shardlm 0.1.0\n");
        return SLM_EXIT_OK;
    }
    for (size_t i = 0; commands[i].name; i++)
        if (!strcmp(name, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    slm_error("unknown command \"%s\"", name);
    usage(stderr);
    return SLM_EXIT_USAGE;
}
