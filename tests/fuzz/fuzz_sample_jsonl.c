// libFuzzer target: arbitrary bytes as a chat template file (prep --chat-template FILE) and as
// one JSONL record of instruction data (prep --format prompt-completion / chat). Parsed as JSON,
// then read as both formats; a record that reads must render with every template (none, llama2,
// llama3) or be refused with a reason, and a rendered sample's segments must be well formed (text
// with its length, or a bare id).
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_segs(const slm_sample_segs *g) {
    for (int i = 0; i < g->n; i++) {
        const slm_sample_seg *s = &g->segs[i];
        if (s->id >= 0 ? s->text != NULL : (!s->text || strlen(s->text) != s->len)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static slm_chat_template *tpl[3];
    static int loaded;
    if (!loaded) {
        if (slm_chat_template_load("llama2", &tpl[1]) || slm_chat_template_load("llama3", &tpl[2]))
            abort();
        loaded = 1;
    }
    // the same bytes as a chat template file: parses or is refused; a parsed one renders a fixed
    // chat or refuses it with a reason
    slm_chat_template *ft = NULL;
    if (slm_chat_template_parse((const char *)data, size, "fuzz.json", &ft) == SLM_OK) {
        slm_sample s = {0};
        const char *k = "{\"messages\": [{\"role\": \"system\", \"content\": \" s \"}, "
                        "{\"role\": \"user\", \"content\": \"u\"}, {\"role\": "
                        "\"assistant\", \"content\": \"a\"}]}";
        cJSON *kj = cJSON_Parse(k);
        char why[256];
        if (!kj || !slm_sample_from_json(kj, SLM_PREP_CHAT, &s, why, sizeof why)) abort();
        slm_sample_segs g;
        why[0] = 0;
        if (slm_sample_render(ft, &s, false, 1, 2, &g, why, sizeof why)) {
            check_segs(&g);
            slm_sample_segs_free(&g);
        } else if (!why[0]) {
            abort();
        }
        slm_sample_free(&s);
        cJSON_Delete(kj);
        slm_chat_template_free(ft);
    }
    cJSON *j = cJSON_ParseWithLength((const char *)data, size);
    if (!j) return 0;
    for (int fmt = SLM_PREP_PROMPT_COMPLETION; fmt <= SLM_PREP_CHAT; fmt++) {
        slm_sample s;
        char why[256];
        why[0] = 0;
        if (!slm_sample_from_json(j, fmt, &s, why, sizeof why)) {
            if (!why[0]) abort(); // a refusal always says why
            continue;
        }
        if (s.n_msgs < 1) abort();
        for (int t = 0; t < 3; t++)
            for (int gen = 0; gen < 2; gen++) {
                slm_sample_segs g;
                why[0] = 0;
                if (slm_sample_render(tpl[t], &s, gen, 1, 2, &g, why, sizeof why)) {
                    check_segs(&g);
                    slm_sample_segs_free(&g);
                } else if (!why[0]) {
                    abort();
                }
            }
        slm_sample_free(&s);
    }
    cJSON_Delete(j);
    return 0;
}
