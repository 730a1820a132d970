// slm_ckpt_open: a local checkpoint path (ckpt.c) or an s3:// URI (s3_read.c).
#include "ckpt/ckpt_internal.h"
#include "objstore/objstore.h"

slm_status slm_ckpt_open(const char *path, slm_ckpt **out) {
    *out = NULL;
    if (slm_s3_is_uri(path)) return slm_ckpt_open_s3(path, out);
    return slm_ckpt_open_local(path, out);
}
