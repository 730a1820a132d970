#!/usr/bin/env bash
# S3 benchmark, issue 12 figure "PUT requests per checkpoint with and without the per-host
# leader for 2 hosts x 2 ranks (network namespaces)". Two real hosts on this machine
# (tests/netns_lib.sh: network namespaces with their own hostnames, a bridge), a SeaweedFS
# `weed mini` on the bridge in the machine's own namespace, `shardlm train --ckpt-uri` with 2
# ranks per host under mpirun over TCP; PUTs counted by the server itself (its request log, glog
# level 3). With the leader: the hosts as they are (one uploader per host); without: every rank
# its own host (SHARDLM_HOST_ID=rankR), each rank uploading its own file. Needs root (exit 77
# otherwise).
#
#   bench/bench_s3_netns.sh [--build build] [--checkpoints 3]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build NCK=3
while [ $# -gt 0 ]; do
    case "$1" in
        --build) BUILD="$2"; shift 2 ;;
        --checkpoints) NCK="$2"; shift 2 ;;
        *) echo "usage: $0 [--build DIR] [--checkpoints N]" >&2; exit 2 ;;
    esac
done
. bench/s3_env.sh
. tests/objstore/netns_s3.sh
slm_s3_netns_up 2
cat > "$W/config.json" <<JSON
{"vocab_size": 2048, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 128}
JSON
echo "== PUTs per checkpoint, 2 hosts x 2 ranks (network namespaces h1, h2; Open MPI over TCP), $NCK checkpoints"
declare -A data total
for how in leader per-rank; do
    slm_s3_netns_train $how 2 2 "$W/$how" --synthetic --model "$W/config.json" --batch 4 --seq 64 \
        --steps $((2 * NCK)) --seed 1 --threads 1 --log-every 0 --ckpt-every-steps 2 ||
        { echo "training ($how) failed:"; tail -20 "$W/$how.log"; exit 1; }
    slm_s3_puts "$how" > "$W/$how.puts"
    n=$(grep -cv '^latest\|^other' "$W/$how.puts")
    d=$(awk '$1 != "latest" && $1 != "other" { s += $2 } END { print s + 0 }' "$W/$how.puts")
    m=$(awk '$1 != "latest" && $1 != "other" { s += $3 } END { print s + 0 }' "$W/$how.puts")
    l=$(awk '$1 == "latest" { print $2 }' "$W/$how.puts")
    o=$(awk '$1 == "other" { print $2 }' "$W/$how.puts")
    bytes=$(du -cb "$W/$how"/checkpoints/step_00000002/rank_* | tail -1 | cut -f1)
    data[$how]=$(awk -v d="$d" -v n="$n" 'BEGIN { printf "%.2f", d / n }')
    total[$how]=$(awk -v t=$((d + m + l + o)) -v n="$n" 'BEGIN { printf "%.2f", t / n }')
    printf "  %-9s %d checkpoints (%.1f MiB of rank files each): %d rank-data PUTs = %s per checkpoint (%s);\n" \
        "$how" "$n" "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')" "$d" "${data[$how]}" \
        "$(awk 'NR == 1 { print $4 }' "$W/$how.puts")"
    printf "  %-9s all PUTs (with %d manifest, %d latest, %d other) = %s per checkpoint\n" "" "$m" "$l" "$o" "${total[$how]}"
done
printf "  with / without the leader: rank-data PUTs %.2fx, all PUTs %.2fx\n" \
    "$(awk -v a="${data[leader]}" -v b="${data[per-rank]}" 'BEGIN { print a / b }')" \
    "$(awk -v a="${total[leader]}" -v b="${total[per-rank]}" 'BEGIN { print a / b }')"
