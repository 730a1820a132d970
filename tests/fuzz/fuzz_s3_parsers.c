// libFuzzer target: the objstore parsers of outside data. The first byte picks one:
// 0 ListObjectsV2 page (slm_s3_xml_list), 1 element text (slm_s3_xml_text, as for error Code /
// UploadId), 2 ~/.aws/credentials profile, 3 ~/.aws/config profile (slm_aws_ini_parse); with
// bit 2 set, a ListMultipartUploads page (slm_s3_xml_uploads).
#include "objstore/objstore.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] & 4) {
        slm_s3_list l = {0};
        bool trunc;
        char *k = NULL, *u = NULL;
        if (slm_s3_xml_uploads(p, n, &l, &trunc, &k, &u) == SLM_OK) {
            for (int64_t i = 0; i < l.n; i++)
                if (!l.obj[i].key || !l.obj[i].upload_id) __builtin_trap();
        }
        free(k);
        free(u);
        slm_s3_list_free(&l);
        return 0;
    }
    switch (data[0] & 3) {
    case 0: {
        slm_s3_list l = {0};
        bool trunc;
        char *tok = NULL;
        if (slm_s3_xml_list(p, n, &l, &trunc, &tok) == SLM_OK) {
            for (int64_t i = 0; i < l.n; i++)
                if (!l.obj[i].key || l.obj[i].size < 0) __builtin_trap();
        }
        free(tok);
        slm_s3_list_free(&l);
        break;
    }
    case 1: {
        char *t = NULL;
        slm_s3_xml_text(p, n, "Code", &t);
        free(t);
        break;
    }
    default: {
        slm_aws_profile pr = {0};
        slm_aws_ini_parse(p, n, "default", (data[0] & 3) == 3, "fuzz.ini", &pr);
        slm_aws_profile_free(&pr);
        break;
    }
    }
    return 0;
}
