// Memory probe and byte formatting for train/ (train_internal.h): thin names over base/'s.
#include "train/train_internal.h"

double slm_train_mem_available(void) { return slm_mem_available(); }

const char *slm_train_fmt_bytes(double bytes, char buf[32]) { return slm_fmt_bytes(bytes, buf); }
