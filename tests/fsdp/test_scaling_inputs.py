#!/usr/bin/env python3
"""Bad and edge inputs of bench/scaling (issue 14): flowsim.py at H that is not a power of two
(times derived by hand from libnbc's binomial tree), its refusal of rates, sizes and counts that
have no meaning, and run.sh --analyze on an empty or malformed results.tsv (exit 1 and a message
naming the file, not a traceback with exit status 0)."""
import json
import os
import subprocess
import sys
import tempfile

src = sys.argv[1]
sys.path.insert(0, os.path.join(src, "bench", "scaling"))
import flowsim  # noqa: E402

fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += not cond


def close(got, want, what):
    check(abs(got - want) <= 1e-9 * max(1.0, abs(want)), f"{what}: {got} (expected {want})")


# 1. One all-reduce of X = 1 at rate 1, one rank per host (vrank = host), by hand:
#    H = 3: reduce 1->0, then 2->0 (vrank 0 posts it in its second round): 2; broadcast: 0
#      sends to 1 and 2 at once (egress shared): 2. Total 4.
#    H = 5: reduce 1->0 with 3->2, then 2->0, then 4->0: 3; broadcast 0 -> 1, 2, 4 at once: 3;
#      then 1 -> 3: 1. Total 7.
#    H = 6: reduce 1->0 with 3->2 and 5->4, then 2->0, 4->0: 3; 0 -> 1, 2, 4: 3; then 1 -> 3 and
#      1 -> 5 at once (both have highest bit set by 1's subtree): 2. Total 8.
for H, want in ((3, 4.0), (5, 7.0), (6, 8.0)):
    close(flowsim.hybrid_allreduce_s([1.0], H, 1, 1.0), want, f"one all-reduce, H = {H}")
# n = 3 replica groups share each host's link: every message is X / 3 and three move side by
# side on the same links, so the time is that of one group of X: 4 X at H = 3.
close(flowsim.hybrid_allreduce_s([3.0], 3, 3, 1.0), 12.0, "H = 3, n = 3, X = 3")
# A zero-size unit costs nothing and does not stall the others.
close(flowsim.hybrid_allreduce_s([0.0], 4, 1, 1.0), 0.0, "zero-size unit")
close(flowsim.hybrid_allreduce_s([0.0, 1.0], 3, 1, 1.0), 4.0, "zero-size unit before a unit of 1")
# H = 64, n = 8, five units: finishes (the time is printed, not asserted).
r = flowsim.hybrid_allreduce_s([3.2e6] * 4 + [4.2e6], 64, 8, 31.25e6)
check(r > 0, f"H = 64, n = 8, five units: {r:.4f} s simulated")

# 1b. model.py's libnbc FULL_SHARD at H = 3 (n = 1, rate 1 byte/s, no latency): the binomial
#     reduce of a reduce-scatter is ceil(log2 3) = 2 rounds of X into host 1 (log2 3 = 1.58 is no
#     round count), then (H-1)/H X of the scatter; the linear all-gathers (H-1)/H X each. The
#     run.sh config by hand: block 2 C^2 + 2 C KV D + 3 C F + 2 C = 791040, root 2 V C + C =
#     1048832 elements; fp32 (4 bytes) parameters and gradients; blocks gathered twice.
import model  # noqa: E402
cfg = {"vocab_size": 2048, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
       "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 128,
       "tie_word_embeddings": False}
blk, root = 791040 * 4, 1048832 * 4
want = (root + 8 * blk) * 2 / 3 + (root + 4 * blk) * (2 + 2 / 3)
close(model.inter_host_s(cfg, "FULL_SHARD", 3, 1, 1.0, 0.0), want, "model FULL_SHARD libnbc, H = 3")
want = (root + 8 * blk) * 4 / 5 + (root + 4 * blk) * (3 + 4 / 5)
close(model.inter_host_s(cfg, "FULL_SHARD", 5, 1, 1.0, 0.0), want, "model FULL_SHARD libnbc, H = 5")

# 2. Inputs without a meaning are refused with ValueError naming the value.
for args, what in ((([1.0], 4, 1, 0.0), "rate 0"), (([1.0], 4, 1, -1.0), "rate -1"),
                   (([1.0], 4, 1, float("inf")), "rate inf"), (([-1.0], 4, 1, 1.0), "size -1"),
                   (([1.0], 4, 0, 1.0), "n = 0"), (([1.0], 0, 1, 1.0), "H = 0"),
                   (([1.0], 4, 1, 1.0, -0.5), "latency -0.5")):
    try:
        flowsim.hybrid_allreduce_s(*args)
        check(False, f"{what}: refused")
    except ValueError as e:
        check("flowsim:" in str(e), f"{what}: refused ({e})")
# A deadlock (a send without its receive) is an error, not a hang.
try:
    flowsim.simulate([([0, 1], [[[("send", 1, "up")]], []], 1.0)], lambda r: r, 1.0)
    check(False, "deadlock detected")
except RuntimeError as e:
    check("deadlock" in str(e), f"deadlock detected ({e})")

# 3. run.sh --analyze on bad results.tsv files: exit status 1, message naming the file.
cfg = {"vocab_size": 2048, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
       "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 128,
       "tie_word_embeddings": False}
hdr = "strategy\thosts\tranks_per_host\trate\tdelay_ms\tmeasured_ms\n"
cases = [("empty", "", 1, "no measurement rows"), ("header only", hdr, 1, "no measurement rows"),
         ("no header", "garbage\nmore garbage\n", 1, "header lacks column"),
         ("short row", hdr + "FULL_SHARD\t1\t1\t1gbit\t0\t900\nFULL_SHARD\t2\t1\t1gbit\n", 1,
          "line 3: delay_ms"),
         ("non-numeric", hdr + "FULL_SHARD\t1\t1\t1gbit\t0\tfast\n", 1, "line 2: measured_ms"),
         ("hosts 0", hdr + "FULL_SHARD\t0\t1\t1gbit\t0\t900\n", 1, "line 2: hosts"),
         ("good", hdr + "FULL_SHARD\t1\t1\t1gbit\t0\t900\nFULL_SHARD\t2\t1\t1gbit\t0\t1500\n", 0,
          "scaling model error: max")]
with tempfile.TemporaryDirectory() as d:
    for name, text, rc, msg in cases:
        out = os.path.join(d, name.replace(" ", "_"))
        os.mkdir(out)
        with open(os.path.join(out, "results.tsv"), "w") as f:
            f.write(text)
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(cfg, f)
        p = subprocess.run(["bash", os.path.join(src, "bench", "scaling", "run.sh"), "--analyze",
                            "--out", out], capture_output=True, text=True, timeout=120)
        both = p.stdout + p.stderr
        check(p.returncode == rc and msg in both and "Traceback" not in both,
              f"run.sh --analyze, {name}: exit {p.returncode} (expected {rc}), "
              f"'{msg}' {'in' if msg in both else 'NOT in'} the output")
    os.remove(os.path.join(d, "good", "config.json"))
    p = subprocess.run(["bash", os.path.join(src, "bench", "scaling", "run.sh"), "--analyze",
                        "--out", os.path.join(d, "good")], capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 2 and "config.json" in p.stderr,
          f"run.sh --analyze without config.json: exit {p.returncode} (expected 2)")
sys.exit(1 if fails else 0)
