// Test driver for the SentencePiece parity script (not a test by itself):
//   spm_cli encode MODEL TEXT [bos:eos]  one line of space-separated ids per input line (like
//                               `spm_encode --output_format=id`)
//   spm_cli decode MODEL IDS    one decoded line per line of ids (like `spm_decode
//                               --input_format=id`)
//   spm_cli load MODEL          loads the model; prints "ok" or "<status>: <message>"
// Exit status: 0 ok, 1 on a tokenizer error (message on stderr), 2 on usage errors.
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int encode_file(const slm_tokenizer *t, const char *path, int flags) {
    char *data = NULL;
    size_t len = 0;
    if (slm_file_read_all(path, &data, &len)) {
        fprintf(stderr, "%s\n", slm_errmsg());
        return 1;
    }
    slm_ivec ids = {0};
    slm_buf line = {0};
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (data + pos)) : len - pos;
        ids.len = 0;
        if (slm_tokenizer_encode(t, data + pos, n, flags, &ids)) {
            fprintf(stderr, "%s\n", slm_errmsg());
            return 1;
        }
        line.len = 0;
        for (size_t i = 0; i < ids.len; i++)
            slm_buf_appendf(&line, i ? " %d" : "%d", ids.data[i]);
        slm_buf_append(&line, "\n", 1);
        fwrite(line.data, 1, line.len, stdout);
        pos += n + 1;
    }
    slm_ivec_free(&ids);
    slm_buf_free(&line);
    free(data);
    return 0;
}

static int decode_file(const slm_tokenizer *t, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    slm_ivec ids = {0};
    slm_buf out = {0};
    int rc = 0;
    while (getline(&line, &cap, f) >= 0) {
        ids.len = 0;
        char *p = line;
        for (;;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            slm_ivec_push(&ids, (int32_t)v);
            p = end;
        }
        out.len = 0;
        if (slm_tokenizer_decode(t, ids.data, ids.len, &out)) {
            fprintf(stderr, "%s\n", slm_errmsg());
            rc = 1;
            break;
        }
        fwrite(out.data, 1, out.len, stdout);
        fputc('\n', stdout);
    }
    free(line);
    slm_ivec_free(&ids);
    slm_buf_free(&out);
    fclose(f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 3 || ((!strcmp(argv[1], "encode") || !strcmp(argv[1], "decode")) && argc < 4)) {
        fprintf(stderr,
                "usage: spm_cli encode MODEL FILE [bos:eos] | decode MODEL FILE | load MODEL\n");
        return 2;
    }
    slm_tokenizer *t = NULL;
    slm_status st = slm_tokenizer_load(argv[2], &t);
    if (!strcmp(argv[1], "load")) {
        if (st)
            printf("%s: %s\n", slm_status_name(st), slm_errmsg());
        else
            printf("ok %s vocab=%d bos=%d eos=%d unk=%d pad=%d\n", slm_tokenizer_type_name(t),
                   slm_tokenizer_vocab_size(t), slm_tokenizer_bos_id(t), slm_tokenizer_eos_id(t),
                   slm_tokenizer_unk_id(t), slm_tokenizer_pad_id(t));
        slm_tokenizer_free(t);
        return st ? 1 : 0;
    }
    if (st) {
        fprintf(stderr, "%s\n", slm_errmsg());
        return 1;
    }
    int flags = 0;
    if (argc > 4 && strstr(argv[4], "bos")) flags |= SLM_ENC_ADD_BOS;
    if (argc > 4 && strstr(argv[4], "eos")) flags |= SLM_ENC_ADD_EOS;
    int rc = !strcmp(argv[1], "encode") ? encode_file(t, argv[3], flags) : decode_file(t, argv[3]);
    slm_tokenizer_free(t);
    return rc;
}
