// libFuzzer target: the launcher's readers of outside data: heartbeat records
// (src/launch/heartbeat.c; RUN_DIR/heartbeat/rank_R.json, written by other processes, possibly
// torn or stale) and host lists (src/launch/hosts.c; --hosts / --hostfile text). The first
// input byte picks the parser.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "launch/launch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] & 1) {
        slm_heartbeat hb;
        if (slm_launch_parse_heartbeat(text, len, &hb) == SLM_OK) {
            // An accepted record is in range and its strings are terminated.
            if (hb.rank < 0 || hb.pid < 1 || hb.step < 0 || !(hb.time >= 0)) __builtin_trap();
            if (strnlen(hb.host, sizeof hb.host) == sizeof hb.host) __builtin_trap();
            if (strnlen(hb.phase, sizeof hb.phase) == sizeof hb.phase) __builtin_trap();
        }
        return 0;
    }
    char *s = malloc(len + 1); // the host parsers read NUL-terminated text
    if (!s) return 0;
    memcpy(s, text, len);
    s[len] = 0;
    char *names[16];
    int slots[16];
    int n = slm_launch_parse_hosts(s, (data[0] & 2) != 0, names, slots, 16);
    if (n > 16) __builtin_trap();
    for (int i = 0; i < n; i++) {
        if (slots[i] < 1 || !names[i][0]) __builtin_trap();
        free(names[i]);
    }
    free(s);
    return 0;
}
