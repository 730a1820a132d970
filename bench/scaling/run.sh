#!/usr/bin/env bash
# Scaling on an emulated cluster vs the communication model of docs/scaling.md (issue 14).
# H netns hosts (cluster.sh: shaped links, Open MPI TCP between hosts, shared memory within) x
# 1-2 ranks per host, FULL_SHARD and HYBRID_SHARD (shard group = host), `shardlm train
# --simulate-compute` (real collectives, compute replaced by waits of FLOPs / GFLOPS). For every
# point: measured step time (mean of the steps after the first, rank 0) vs model.py's
# prediction (compute + the H = 1 run's intra-host time + the inter-host collectives, no
# overlap), error, scaling efficiency (step time at 1 host / at H hosts: throughput per rank,
# same per-rank batch). Prints the table, then `scaling model error: max X% over N points`
# (H > 1 points: H = 1 is where the intra-host term is measured), the per-unit exposed
# communication of the H = 2, one-rank-per-host runs (units.py), and writes an SVG chart
# (efficiency vs hosts: measured points, predicted lines) and results.tsv under --out.
# Usage: run.sh [--quick] [--out DIR] [--bin SHARDLM]  (root: network namespaces)
#   --analyze: no measurement, only the table / chart / error line of --out's results.tsv
#   --quick: H = 1, 2, 4, one link speed, no latency sweep (under 10 minutes here);
#   full: H = 1, 2, 4, 8, two link speeds, two latencies (one-way host-to-host delay: cluster.sh).
# A benchmark, not a test (it prints timings); needs an idle-ish machine.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${SHARDLM_BIN:-$ROOT/build/shardlm}
OUT=$ROOT/bench/out/scaling
QUICK=0
ANALYZE=0
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --out) OUT=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --analyze) ANALYZE=1 ;;
    *) echo "usage: run.sh [--quick] [--out DIR] [--bin SHARDLM] [--analyze]" >&2; exit 2 ;;
    esac
    shift
done
if [ "$ANALYZE" = 1 ]; then
    [ -f "$OUT/results.tsv" ] || { echo "run.sh: no $OUT/results.tsv to analyze" >&2; exit 2; }
    [ -f "$OUT/config.json" ] || { echo "run.sh: no $OUT/config.json (the model config of the run) to analyze" >&2; exit 2; }
else
[ -x "$BIN" ] || { echo "run.sh: no shardlm binary at $BIN (build first or --bin)" >&2; exit 2; }
. "$HERE/cluster.sh"
cluster_requirements || exit $?
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
PY=python3

# The scaled-down workload (docs/scaling.md "Scale-down rule"): a 4.2 M-parameter Llama (fp32
# units of 3.2 MB, root 4.2 MB), 512 tokens per rank per step at a simulated 20 GFLOP/s
# (0.6 s of compute), so that at 1 Gbit/s FULL_SHARD's inter-host bytes take about half the
# compute time, as 7B on p5 nodes' 3200 Gb/s links.
CFG=$OUT/config.json
cat > "$CFG" <<'JSON'
{"vocab_size": 2048, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 128,
 "tie_word_embeddings": false}
JSON
B=4 T=128 K=1 GF=20 STEPS=5
if [ "$QUICK" = 1 ]; then
    HS="1 2 4" RATES="1gbit" DELAYS="0"
else
    HS="1 2 4 8" RATES="1gbit 250mbit" DELAYS="0 5"
fi
NS="1 2"
STRATS="FULL_SHARD HYBRID_SHARD"
# Repeats per point (the full sweep: 2): the machine is shared, a neighbour's burst only ever
# adds time, so the analysis takes each point's fastest repeat.
REPEAT=1
[ "$QUICK" = 1 ] || REPEAT=2
# Development overrides (a subset of the sweep): SCALING_HS, SCALING_NS, SCALING_RATES,
# SCALING_STEPS, SCALING_REPEAT, SCALING_DELAYS (one-way host-to-host ms, e.g. "0 5"),
# SCALING_STRATS (e.g. FULL_SHARD), SCALING_MPI_OPTS (extra mpirun options, e.g.
# "--mca mpi_yield_when_idle 1").
HS=${SCALING_HS:-$HS} NS=${SCALING_NS:-$NS} RATES=${SCALING_RATES:-$RATES} STEPS=${SCALING_STEPS:-$STEPS}
REPEAT=${SCALING_REPEAT:-$REPEAT}
DELAYS=${SCALING_DELAYS:-$DELAYS}
STRATS=${SCALING_STRATS:-$STRATS}
MPI_OPTS=${SCALING_MPI_OPTS:-}
RES=$OUT/results.tsv
printf 'strategy\thosts\tranks_per_host\trate\tdelay_ms\tmeasured_ms\tcompute_ms\texposed_comm_ms\tload1\trunq_ms\tsys_pct\n' > "$RES"

# one_run STRATEGY N RATE DELAY: appends a result row (one per repeat); the log and run directory
# of the fastest repeat so far keep the point's names (run_*.log, rd_*: units.py reads those).
declare -A BEST_MS
one_run() {
    local s=$1 n=$2 rate=$3 delay=$4 extra=() key log rd
    key=${s}_H${CL_H}_n${n}_${rate}_${delay}
    log=$OUT/run_$key.log.try
    # The run directory keeps every rank's flight recorder (SHARDLM_FLIGHT_DUMP=end, dumped
    # before the final checkpoint): units.py reads the per-collective wait times from it.
    rd=$OUT/rd_$key.try
    rm -rf "$rd"
    [ "$s" = HYBRID_SHARD ] && extra=(--shard-group-size "$n")
    "$PY" "$HERE/runq.py" "$rd" "$rd.runq" &
    local rq=$!
    timeout 300 bash -c "$(declare -f cluster_mpirun cl_addr cl_ns); CL_H=$CL_H CL_NET=$CL_NET CL_WORK=$CL_WORK CL_PREFIX=$CL_PREFIX; cluster_mpirun $n $MPI_OPTS -x OMP_NUM_THREADS=1 -x SHARDLM_FLIGHT_DUMP=end -- $BIN train --model $CFG --synthetic --seq $T --batch $B --grad-accum $K --steps $STEPS --threads 1 --peak-gflops 100 --log-every 1 --collective-timeout 240 --simulate-compute $GF --sharding $s ${extra[*]} --out $rd" > "$log" 2>&1
    local rc=$?
    kill -TERM "$rq" 2>/dev/null
    wait "$rq" 2>/dev/null
    rm -rf "$rd/checkpoints"
    if [ "$rc" != 0 ]; then
        echo "run failed (exit $rc): $s H=$CL_H n=$n $rate ${delay}ms; see $log" >&2
        return 1
    fi
    # load1: the machine's 1-minute load average right after the run (it is shared).
    # runq_ms: the ranks' run-queue delay (runq.py) per rank and step (start-up included).
    "$PY" - "$log" "$s" "$CL_H" "$n" "$rate" "$delay" "$(cut -d' ' -f1 /proc/loadavg)" "$(cat "$rd.runq" 2>/dev/null)" "$STEPS" >> "$RES" <<'PY'
import re, sys
log, s, H, n, rate, delay, load, rq, steps = sys.argv[1:]
rq = rq.split()
runq = f"{1e3 * float(rq[2]) / int(rq[0]) / int(steps):.1f}" if len(rq) >= 3 and int(rq[0]) > 0 else "-"
# sys_pct: the machine's system + softirq CPU share during the run (2 cores = 200%)
sys_pct = f"{100 * (float(rq[3]) + float(rq[4])) / float(rq[5]):.0f}" if len(rq) == 6 and float(rq[5]) > 0 else "-"
rows = re.findall(r"step +(\d+)/\d+ \| simulated \| ([0-9.]+) ms/step \| compute ([0-9.]+) ms \| exposed comm ([0-9.]+) ms", open(log).read())
rows = [r for r in rows if int(r[0]) > 1] or rows
m = [sum(float(r[i]) for r in rows) / len(rows) for i in (1, 2, 3)]
print(f"{s}\t{H}\t{n}\t{rate}\t{delay}\t{m[0]:.1f}\t{m[1]:.1f}\t{m[2]:.1f}\t{load}\t{runq}\t{sys_pct}")
PY
    local ms
    ms=$(tail -1 "$RES" | cut -f6)
    if [ -z "${BEST_MS[$key]:-}" ] || awk -v a="$ms" -v b="${BEST_MS[$key]}" 'BEGIN { exit !(a < b) }'; then
        BEST_MS[$key]=$ms
        rm -rf "$OUT/rd_$key"
        mv "$rd" "$OUT/rd_$key" && mv "$log" "$OUT/run_$key.log"
    else
        rm -rf "$rd" "$log"
    fi
    rm -f "$rd.runq"
    tail -1 "$RES" | awk -F'\t' '{printf "  %-13s H=%s n=%s %-8s %3s ms: %8.1f ms/step (compute %.1f, exposed comm %.1f; load %s, run queue %s ms/rank/step, system+softirq CPU %s%%)\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11}'
}

t0=$(date +%s)
echo "emulated cluster: model $(basename "$CFG") (P = 4.2 M), B=$B T=$T, --simulate-compute $GF GFLOP/s, $STEPS steps"
for H in $HS; do
    cluster_up "$H" "${RATES%% *}" 0 > /dev/null || { echo "cluster set-up failed" >&2; exit 1; }
    for rate in $RATES; do
        for delay in $DELAYS; do
            [ "$H" = 1 ] && { [ "$rate" != "${RATES%% *}" ] || [ "$delay" != 0 ]; } && continue
            if [ "$delay" != 0 ] && [ "$CL_LATENCY" != 1 ]; then # cluster.sh: delayswitch or netem
                echo "  (no latency emulation here: latency ${delay} ms skipped)"
                continue
            fi
            cluster_shape "$rate" "$delay" || exit 1
            for ((rep = 1; rep <= REPEAT; rep++)); do
                for n in $NS; do
                    for s in $STRATS; do one_run "$s" "$n" "$rate" "$delay"; done
                done
            done
        done
    done
    cluster_down
done
echo "benchmark time: $(( $(date +%s) - t0 )) s"
fi # ANALYZE
B=4 T=128 K=1 GF=20 CFG=$OUT/config.json RES=$OUT/results.tsv PY=python3

"$PY" - "$RES" "$CFG" "$OUT/scaling.svg" "$B" "$T" "$K" "$GF" "$HERE" <<'PY' || exit 1
import csv, json, sys
res, cfgp, svg, B, T, K, GF, here = sys.argv[1:]
sys.path.insert(0, here)
import model
cfg = json.load(open(cfgp))
B, T, K, GF = int(B), int(T), int(K), float(GF)
rows = list(csv.DictReader(open(res), delimiter="\t"))
# A results.tsv that is empty, lacks a column or holds a short or non-numeric row is an error
# naming the file, line and field (not a traceback, not an empty table with exit status 0).
need = ("strategy", "hosts", "ranks_per_host", "rate", "delay_ms", "measured_ms")
if not rows:
    sys.exit(f"run.sh: {res}: no measurement rows (expected a header line and one row per point)")
miss = [c for c in need if c not in rows[0]]
if miss:
    sys.exit(f"run.sh: {res}: header lacks column(s) {', '.join(miss)} (expected {', '.join(need)})")
for i, r in enumerate(rows):
    for c in need:
        v = r.get(c)
        ok = v not in (None, "")
        if ok and c in ("hosts", "ranks_per_host"):
            ok = v.isdigit() and int(v) >= 1
        elif ok and c in ("delay_ms", "measured_ms"):
            try:
                ok = float(v) >= 0 and (c != "measured_ms" or float(v) > 0)
            except ValueError:
                ok = False
        elif ok and c == "strategy":
            ok = v in ("FULL_SHARD", "HYBRID_SHARD")
        if not ok:
            sys.exit(f"run.sh: {res}: line {i + 2}: {c} = {v!r} is missing or invalid")
# Repeats of a point: the fastest one (the machine is shared; a neighbour only adds time).
fast = {}
for r in rows:
    k = (r["strategy"], r["hosts"], r["ranks_per_host"], r["rate"], r["delay_ms"])
    if k not in fast or float(r["measured_ms"]) < float(fast[k]["measured_ms"]):
        fast[k] = r
rows = list(fast.values())
def bits(r):
    return model_rate(r)
def model_rate(r):
    u = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for k, v in u.items():
        if r.endswith(k): return float(r[: -len(k)]) * v
    return float(r)
# At H = 1, FULL_SHARD and HYBRID_SHARD (G = n) are the same configuration (S = n, R = 1: the
# same collectives on the same buffers), measured twice: the less disturbed (lower) of the two
# is the intra-host term and the efficiency baseline of both (the machine is shared: a
# neighbour's burst adds 100-300 ms to one run, never removes any).
best = {}
for r in rows:
    if r["hosts"] == "1":
        k = r["ranks_per_host"]
        if k not in best or float(r["measured_ms"]) < float(best[k]["measured_ms"]):
            best[k] = r
base = {(r["strategy"], r["ranks_per_host"]): best[r["ranks_per_host"]] for r in rows if r["hosts"] == "1"}
print()
print(f"{'config':<13} {'hosts':>5} {'rph':>3} {'link':>8} {'lat ms':>6} {'measured ms':>11} {'predicted ms':>12} {'error %':>8} {'eff meas':>8} {'eff pred':>8} {'serial ms':>9} {'docs ring ms':>12} {'load':>5} {'runq ms':>7} {'sys %':>5}")
errs, ring_errs, serial_errs, pipe_errs, pts, by_h = [], [], [], [], [], {}
for r in rows:
    s, H, n = r["strategy"], int(r["hosts"]), int(r["ranks_per_host"])
    b = base.get((s, r["ranks_per_host"]))
    if not b: continue
    meas = float(r["measured_ms"]) / 1e3
    compute = model.flops_per_token(cfg, T) * B * T * K / (GF * 1e9)
    local = float(b["measured_ms"]) / 1e3 - compute
    pred, _, comm = model.predict(cfg, s, H, n, model_rate(r["rate"]), float(r["delay_ms"]), GF, B, T, K, local)
    ring, _, _ = model.predict(cfg, s, H, n, model_rate(r["rate"]), float(r["delay_ms"]), GF, B, T, K, local, algo="ring")
    serial, _, _ = model.predict(cfg, s, H, n, model_rate(r["rate"]), float(r["delay_ms"]), GF, B, T, K, local, algo="libnbc-serial")
    pipe, _, _ = model.predict(cfg, s, H, n, model_rate(r["rate"]), float(r["delay_ms"]), GF, B, T, K, local, algo="libnbc-pipelined")
    err = 100 * (pred - meas) / meas
    e_m = float(b["measured_ms"]) / 1e3 / meas
    e_p = float(b["measured_ms"]) / 1e3 / pred
    if H > 1:
        errs.append(abs(err))
        by_h.setdefault(H, []).append(abs(err))
        ring_errs.append(abs(100 * (ring - meas) / meas))
        serial_errs.append(abs(100 * (serial - meas) / meas))
        pipe_errs.append(abs(100 * (pipe - meas) / meas))
    pts.append((s, n, r["rate"], r["delay_ms"], H, e_m, e_p))
    print(f"{s:<13} {H:>5} {n:>3} {r['rate']:>8} {r['delay_ms']:>6} {meas*1e3:>11.1f} {pred*1e3:>12.1f} {err:>+8.1f} {100*e_m:>7.1f}% {100*e_p:>7.1f}% {serial*1e3:>9.1f} {ring*1e3:>12.1f} {r.get('load1') or '-':>5} {r.get('runq_ms') or '-':>7} {r.get('sys_pct') or '-':>5}")
# SVG: efficiency vs hosts, one colour per (strategy, ranks per host, link); dots measured,
# lines predicted.
W, Hh, L, R, Tp, Bt = 720, 420, 60, 230, 30, 50
xs = sorted({p[4] for p in pts}) or [1]
def X(h): return L + (W - L - R) * (xs.index(h) / max(1, len(xs) - 1))
def Y(e): return Tp + (Hh - Tp - Bt) * (1 - max(0.0, min(1.05, e)) / 1.05)
cols = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f",
        "#aec7e8", "#ff9896", "#98df8a", "#c5b0d5", "#ffbb78", "#c49c94", "#9edae5", "#bcbd22"]
o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{Hh}" font-family="sans-serif" font-size="12">',
     f'<rect width="{W}" height="{Hh}" fill="white"/>',
     f'<text x="{L}" y="18" font-size="14">Scaling efficiency on the emulated cluster: measured (dots) vs model (lines)</text>']
for e in (0, 0.25, 0.5, 0.75, 1.0):
    o.append(f'<line x1="{L}" x2="{W-R}" y1="{Y(e):.1f}" y2="{Y(e):.1f}" stroke="#ddd"/>')
    o.append(f'<text x="{L-8}" y="{Y(e)+4:.1f}" text-anchor="end">{int(e*100)}%</text>')
for h in xs:
    o.append(f'<text x="{X(h):.1f}" y="{Hh-Bt+18}" text-anchor="middle">{h}</text>')
o.append(f'<text x="{(L+W-R)/2:.1f}" y="{Hh-12}" text-anchor="middle">hosts H</text>')
series = sorted({(p[0], p[1], p[2], p[3]) for p in pts})
for i, key in enumerate(series):
    c = cols[i % len(cols)]
    ps = sorted([p for p in pts if (p[0], p[1], p[2], p[3]) == key], key=lambda p: p[4])
    dash = ' stroke-dasharray="6,3"' if key[3] != "0" else ""  # the latency series dashed
    o.append('<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>' % (c, dash, " ".join(f"{X(p[4]):.1f},{Y(p[6]):.1f}" for p in ps)))
    for p in ps:
        o.append(f'<circle cx="{X(p[4]):.1f}" cy="{Y(p[5]):.1f}" r="4" fill="{c}"/>')
    ly = Tp + 16 * i
    lab = f"{key[0].replace('_SHARD','')} {key[1]}/host {key[2]}" + (f" {key[3]} ms" if key[3] != "0" else "")
    o.append(f'<line x1="{W-R+12}" x2="{W-R+32}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="2"/><circle cx="{W-R+22}" cy="{ly}" r="3.5" fill="{c}"/>')
    o.append(f'<text x="{W-R+38}" y="{ly+4}">{lab}</text>')
o.append("</svg>")
open(svg, "w").write("\n".join(o) + "\n")
print()
print(f"chart: {svg}")
if errs:
    print(f"(the earlier docs ring model, per-rank ring bytes at link / ranks per host: max "
          f"{max(ring_errs):.1f}% over the same points)")
    print(f"(libnbc with HYBRID's replica all-reduces charged one after the other, \"serial\": max "
          f"{max(serial_errs):.1f}% over the same points)")
    print(f"(libnbc with HYBRID's replica all-reduces in the closed-form pipeline, \"pipelined\": max "
          f"{max(pipe_errs):.1f}% over the same points)")
    print("by hosts: " + ", ".join(f"H = {h}: max {max(v):.1f}% over {len(v)}" for h, v in sorted(by_h.items())))
    print(f"scaling model error: max {max(errs):.1f}% over {len(errs)} points")
else:
    print("scaling model error: no multi-host points measured")
PY
# The per-unit check of the overlap assumption (units.py) for H = 2, one rank per host.
for rate in $(awk -F'\t' 'NR > 1 && $2 == 2 && $3 == 1 && $5 == 0 { print $4 }' "$RES" | sort -u); do
    for s in FULL_SHARD HYBRID_SHARD; do
        if [ -d "$OUT/rd_${s}_H2_n1_${rate}_0" ]; then "$PY" "$HERE/units.py" "$OUT" "rd_${s}_H2_n1_${rate}_0"; fi
    done
done
