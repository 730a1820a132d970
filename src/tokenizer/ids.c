// Lines of token ids as text (eval --token-ids, tokenizer decode).
#include "tokenizer/tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

slm_status slm_token_ids_parse_line(const char *what, const char *s, int32_t vocab,
                                    const char *vocab_name, slm_ivec *ids) {
    const char *p = s;
    ids->len = 0;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (!*p || *p == '\n') break;
        if (!isdigit((unsigned char)*p))
            return slm_fail(SLM_E_FORMAT, "%s:%lld: expected a token id, found '%c'", what,
                            (long long)(p - s) + 1, *p);
        errno = 0;
        char *end = NULL;
        long long x = strtoll(p, &end, 10);
        if (errno || x >= vocab)
            return slm_fail(SLM_E_ARG, "%s:%lld: token id %.*s is outside %s [0, %d)", what,
                            (long long)(p - s) + 1, (int)(end - p > 24 ? 24 : end - p), p,
                            vocab_name, vocab);
        slm_ivec_push(ids, (int32_t)x);
        p = end;
    }
    return SLM_OK;
}
