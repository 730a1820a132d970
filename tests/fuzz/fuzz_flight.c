// libFuzzer target: flight-recorder dump parsing (slm_flight_parse, src/dist/flight_read.c): a
// dump is read back from RUN_DIR/logs by `shardlm flight` and `shardlm launch`, outside data.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dist/dist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    slm_flight_file f;
    if (slm_flight_parse((const char *)data, size, "fuzz.json", &f) == SLM_OK) {
        // An accepted dump is consistent: its rank is in the world, every group member too.
        if (f.rank < 0 || f.rank >= f.world) __builtin_trap();
        for (int g = 0; g < f.n_groups; g++)
            for (int k = 0; k < f.groups[g].n_ranks; k++)
                if (f.groups[g].ranks[k] < 0 || f.groups[g].ranks[k] >= f.world) __builtin_trap();
        for (int i = 0; i < f.n_entries; i++)
            if (!f.entries[i].group || !f.entries[i].state) __builtin_trap();
        slm_flight_file_free(&f);
    }
    return 0;
}
