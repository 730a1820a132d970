// libFuzzer target: bench/scaling/delayswitch's frame path (learning, flooding, the per-port
// GCRA queues and their bounds, delivery). Frames come from the hosts' network stacks, outside
// data. The input is a sequence of records: port byte, time step byte (x 100 us), length byte
// pair (little-endian, capped to what is left), frame bytes. The ports have no descriptor
// (fd -1: every write fails and is counted), so nothing leaves the process.
// Invariants: every accepted frame is delivered once all queues drain (tx + write errors =
// frames enqueued), each port's queued bytes return to 0, and a port's queue never holds more
// than --queue-bytes; LeakSanitizer checks every queued frame is freed.
#ifndef _GNU_SOURCE // as delayswitch.c, before any header (CMake passes -D_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include <stddef.h>
#include <stdint.h>
#include <string.h>

int delayswitch_main(int argc, char **argv);
#define main delayswitch_main
#include "../../bench/scaling/delayswitch.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    memset(ports, 0, sizeof ports);
    n_ports = 4;
    for (int i = 0; i < n_ports; i++)
        ports[i].fd = -1;
    n_macs = 0;
    delay_ns = 3000000;
    rate_bps = 100000000;
    burst_bytes = 2000;
    queue_ns = 2000000;
    queue_bytes = 8192;
    uint64_t enq_before[MAX_PORTS] = {0};
    int64_t t = 0;
    size_t i = 0;
    while (i + 4 <= size) {
        int in = data[i] % n_ports;
        t += (int64_t)data[i + 1] * 100000;
        size_t len = (size_t)data[i + 2] | (size_t)data[i + 3] << 8;
        i += 4;
        if (len > size - i) len = size - i;
        for (int o = 0; o < n_ports; o++)
            deliver(o, t);
        switch_frame(in, data + i, (uint32_t)len, t);
        for (int o = 0; o < n_ports; o++)
            if (ports[o].q_bytes > queue_bytes) __builtin_trap();
        i += len;
    }
    for (int o = 0; o < n_ports; o++) {
        size_t queued = 0;
        for (frame *f = ports[o].head; f; f = f->next)
            queued++;
        enq_before[o] = queued + ports[o].tx_frames + ports[o].tx_errors;
        deliver(o, INT64_MAX);
        if (ports[o].head || ports[o].tail || ports[o].q_bytes != 0) __builtin_trap();
        if (ports[o].tx_frames + ports[o].tx_errors != enq_before[o]) __builtin_trap();
    }
    return 0;
}
