// Cross-rank agreement on prep's settings (slm_prep_agree, data.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "dist/dist.h"

slm_status slm_prep_agree(const slm_prep_opts *o, double collective_timeout_s) {
    if (slm_dist_world() == 1) return SLM_OK;
    enum { N = 11, VAL = 128 };
    char v[N][VAL];
    slm_buf inputs = {0};
    for (int i = 0; i < o->n_inputs; i++)
        slm_buf_appendf(&inputs, "%s%s", i ? " " : "", o->inputs[i]);
    uint64_t h = 0;
    if (!o->tokenizer_path || slm_file_xxh64(o->tokenizer_path, &h) != SLM_OK)
        snprintf(v[1], VAL, "unreadable");
    else
        snprintf(v[1], VAL, "xxh64 %016llx", (unsigned long long)h);
    snprintf(v[0], VAL, "%s", o->tokenizer_path ? o->tokenizer_path : "(unset)");
    snprintf(v[2], VAL, "%s", o->out_dir ? o->out_dir : "(unset)");
    snprintf(v[3], VAL, "%lld", (long long)o->shard_tokens);
    snprintf(v[4], VAL, "%.17g", o->val_fraction);
    snprintf(v[5], VAL, "%lld", (long long)o->unit_bytes);
    snprintf(v[6], VAL, "%llu", (unsigned long long)o->seed);
    snprintf(v[7], VAL, "%.17g", collective_timeout_s);
    snprintf(v[8], VAL, "%s",
             o->format == SLM_PREP_CHAT                ? "chat"
             : o->format == SLM_PREP_PROMPT_COMPLETION ? "prompt-completion"
                                                       : "text");
    snprintf(v[9], VAL, "%s", o->chat_template ? o->chat_template : "(none)");
    slm_agree_item items[N] = {
        {"--tokenizer", v[0], SLM_E_ARG},
        {"tokenizer file contents", v[1], SLM_E_FORMAT},
        {"--out", v[2], SLM_E_ARG},
        {"--shard-tokens", v[3], SLM_E_ARG},
        {"--val-fraction", v[4], SLM_E_ARG},
        {"--unit-bytes", v[5], SLM_E_ARG},
        {"--seed", v[6], SLM_E_ARG},
        {"--collective-timeout", v[7], SLM_E_ARG},
        {"--input", inputs.data ? inputs.data : "", SLM_E_ARG},
        {"--format", v[8], SLM_E_ARG},
        {"--chat-template", v[9], SLM_E_ARG},
    };
    slm_status st = slm_dist_agree_values(items, N);
    slm_buf_free(&inputs);
    return st;
}
