#!/usr/bin/env python3
"""CPU starvation of the emulated ranks (issue 14, docs/scaling.md): how long the ranks were
runnable but not running (the kernel's run-queue delay, /proc/PID/schedstat field 2).

usage: runq.py MATCH OUT_FILE   (runs until SIGTERM / SIGINT)

Every 0.2 s it reads /proc/PID/schedstat of every process whose command line contains MATCH
(the run's directory) and keeps the last value per process; on SIGTERM it writes one line to
OUT_FILE: "<processes> <total CPU s> <total run-queue delay s> <machine system s> <machine
softirq s> <wall s>" (the last three from /proc/stat over the sampling time, every process of
the machine: the emulated links' packet processing runs there, on the same cores). The ranks sleep through their
simulated compute and poll in their waits, so on an oversubscribed machine the run-queue delay
is time a rank could have progressed a collective (or run the optimizer) and did not.
"""
import os
import signal
import sys
import time

match, out = sys.argv[1].encode(), sys.argv[2]
last = {}
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)


def sample():
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
            if match not in cmd or not cmd.split(b"\0")[0].endswith(b"shardlm"):
                continue  # the ranks only (not mpirun, whose command line names them too)
            with open(f"/proc/{p}/schedstat") as f:
                cpu_ns, wait_ns, _ = (int(x) for x in f.read().split())
            last[p] = (cpu_ns, wait_ns)
        except (OSError, ValueError):
            pass


def cpu_stat():
    with open("/proc/stat") as f:
        v = f.readline().split()[1:]
    hz = os.sysconf("SC_CLK_TCK")
    return int(v[2]) / hz, int(v[5]) / hz + int(v[6]) / hz, time.monotonic()  # system, irq + softirq


t0 = cpu_stat()
while not stop:
    sample()
    time.sleep(0.2)
sample()
with open(out, "w") as f:
    cpu = sum(v[0] for v in last.values()) / 1e9
    wait = sum(v[1] for v in last.values()) / 1e9
    t1 = cpu_stat()
    f.write(f"{len(last)} {cpu:.3f} {wait:.3f} {t1[0] - t0[0]:.2f} {t1[1] - t0[1]:.2f} {t1[2] - t0[2]:.2f}\n")
