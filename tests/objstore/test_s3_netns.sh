#!/usr/bin/env bash
# Issue 12, "one uploader per host": 2 real hosts (network namespaces with their own hostnames,
# tests/netns_lib.sh) x 2 ranks train with --ckpt-uri through mpirun over TCP to a SeaweedFS
# server on the hosts' bridge; the server's own request log counts the PUTs. Per checkpoint:
#  - with the per-host leader: 2 rank-data PUTs (= hosts), the objects host_00000.bin and
#    host_00002.bin (the leaders: the lowest world rank of h1 and of h2), one manifest, and one
#    `latest` per checkpoint;
#  - every rank its own host (SHARDLM_HOST_ID=rankR, the no-leader baseline): 4 rank-data PUTs
#    (= ranks), host_00000..3.bin; so the rank-data PUTs follow the hosts, not the ranks;
#  - both remote checkpoints verify (`ckpt verify s3://...`) and nothing else was PUT.
# Args: MPIEXEC S3_TOOL. Skips (77) without root / network namespaces or the weed binary.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=$1
export S3TOOL=$2
. "$(dirname "$0")/netns_s3.sh"
slm_s3_netns_up 2
slm_tiny_config "$W/config.json" vocab_size=128 num_hidden_layers=2
TRA=(--synthetic --model "$W/config.json" --batch 4 --seq 16 --steps 6 --seed 3 --threads 1
     --peak-gflops 10 --log-every 0 --ckpt-every-steps 2 --collective-timeout 60)
set +e
for mode in leader per-rank; do
    slm_s3_netns_train $mode 2 "$W/$mode" "${TRA[@]}" --heartbeat-dir "$W/$mode.hb"
    rc=$?
    check "$mode: 2 hosts x 2 ranks train with --ckpt-uri" 0 $rc
    [ "$rc" = 0 ] || cat "$W/$mode.log"
    where=$(for r in 0 1 2 3; do sed -n 's/.*"host":"\([^"]*\)".*/\1/p' "$W/$mode.hb/rank_0000$r.json"; done | tr '\n' ' ')
    [ "$where" = "h1 h1 h2 h2 " ] && ok "$mode: ranks 0-3 ran on h1 h1 h2 h2 (heartbeats)" ||
        bad "$mode: ranks ran on '$where'"
    slm_s3_puts "$mode" > "$W/$mode.puts"
    echo "server-counted PUTs ($mode): step rank-data manifest keys"
    sed 's/^/    /' "$W/$mode.puts"
done
for mode in leader per-rank; do
    if [ $mode = leader ]; then
        want="2 1 host_00000.bin,host_00002.bin"
    else
        want="4 1 host_00000.bin,host_00001.bin,host_00002.bin,host_00003.bin"
    fi
    for s in 2 4 6; do
        got=$(awk -v s=$s '$1 == s { print $2, $3, $4 }' "$W/$mode.puts")
        [ "$got" = "$want" ] && ok "$mode, step $s: rank-data / manifest PUTs and keys: $want" ||
            bad "$mode, step $s: server counted '$got', expected '$want'"
    done
    [ "$(grep '^latest' "$W/$mode.puts")" = "latest 3" ] && ok "$mode: 3 PUTs of latest" ||
        bad "$mode: $(grep '^latest' "$W/$mode.puts") PUTs of latest, expected 3"
    [ "$(grep '^other' "$W/$mode.puts")" = "other 0" ] && ok "$mode: no other PUT under the prefix" ||
        bad "$mode: other PUTs: $(grep '^other' "$W/$mode.puts")"
    "$BIN" ckpt verify "s3://$S3_BUCKET/$mode/" > "$W/$mode.verify" 2>&1
    check "$mode: ckpt verify of the remote latest checkpoint" 0 $?
done
# the leader and per-rank runs trained the same model: the final local weights are equal
same=1
for f in "$W"/leader/checkpoints/step_00000006/*; do
    cmp -s "$f" "$W/per-rank/checkpoints/step_00000006/$(basename "$f")" || same=0
done
[ $same = 1 ] && ok "same final checkpoint files either way" || bad "final checkpoints differ"
slm_s3_stop
slm_netns_down
[ -z "$(slm_netns_leftovers)" ] && ok "no namespace or link left" || bad "left behind: $(slm_netns_leftovers)"
slm_finish
