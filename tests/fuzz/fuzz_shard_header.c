// Fuzz target: arbitrary bytes as a token shard file (header parse, size check, checksum,
// token scan: must never crash or read past `size`) and as a manifest.json text.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // An exact-size heap copy, so ASan sees any over-read past the end.
    uint8_t *copy = malloc(size ? size : 1);
    if (size) memcpy(copy, data, size);
    slm_shard_header h;
    if (slm_shard_parse_header("fuzz.bin", copy, size, &h) == SLM_OK) {
        // A header that passed must describe exactly the bytes we have.
        if ((uint64_t)size != SLM_SHARD_HEADER_BYTES + h.n_tokens * h.token_bytes) abort();
    }
    (void)slm_shard_verify("fuzz.bin", copy, size, 0, &h);
    (void)slm_shard_verify("fuzz.bin", copy, size, 300, &h);
    slm_dataset ds;
    if (slm_dataset_parse("/data", "fuzz/manifest.json", (const char *)copy, size, &ds) == SLM_OK) {
        if (ds.train.n_shards < 0 || ds.val.n_shards < 0 || ds.vocab_size <= 0) abort();
    }
    slm_dataset_free(&ds);
    free(copy);
    return 0;
}
