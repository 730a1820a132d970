#!/usr/bin/env bash
# Issue 12, "one uploader per host": real hosts (network namespaces with their own hostnames,
# tests/netns_lib.sh) train 4 ranks with --ckpt-uri through mpirun over TCP to a SeaweedFS
# server on the hosts' bridge; the server's own request log counts the PUTs. Per checkpoint:
#  - 2 hosts x 2 ranks with the per-host leader: 2 rank-data PUTs (= hosts), the objects
#    host_00000.bin and host_00002.bin (the leaders: the lowest world rank of h1 and of h2);
#  - the same without a leader (every rank its own host, SHARDLM_HOST_ID=rankR, the baseline):
#    4 rank-data PUTs (= ranks), host_00000..3.bin;
#  - 4 hosts x 1 rank with the leader: 4 rank-data PUTs (= hosts): the count follows the hosts;
#  - each run: one manifest per checkpoint, one `latest` per checkpoint, nothing else PUT, the
#    remote checkpoint verifies (`ckpt verify s3://...`), the ranks ran on the hosts meant
#    (heartbeats' host names), the same final checkpoint files in all three; nothing left.
# Args: MPIEXEC S3_TOOL. Skips (77) without root / network namespaces or the weed binary.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=$1
export S3TOOL=$2
. "$(dirname "$0")/netns_s3.sh"
slm_s3_netns_up 4
slm_tiny_config "$W/config.json" vocab_size=128 num_hidden_layers=2
TRA=(--synthetic --model "$W/config.json" --batch 4 --seq 16 --steps 6 --seed 3 --threads 1
     --peak-gflops 10 --log-every 0 --ckpt-every-steps 2 --collective-timeout 60)
set +e
# name mode hosts ranks-per-host  rank-data PUTs per checkpoint  their keys  hosts of ranks 0-3
runs=("leader2x2 leader 2 2 2 host_00000.bin,host_00002.bin h1,h1,h2,h2"
      "perrank2x2 per-rank 2 2 4 host_00000.bin,host_00001.bin,host_00002.bin,host_00003.bin h1,h1,h2,h2"
      "leader4x1 leader 4 1 4 host_00000.bin,host_00001.bin,host_00002.bin,host_00003.bin h1,h2,h3,h4")
for run in "${runs[@]}"; do
    read -r name mode hosts per want keys where <<< "$run"
    slm_s3_netns_train "$mode" "$hosts" "$per" "$W/$name" "${TRA[@]}" --heartbeat-dir "$W/$name.hb"
    rc=$?
    check "$name: $hosts hosts x $per ranks ($mode) train with --ckpt-uri" 0 $rc
    [ "$rc" = 0 ] || cat "$W/$name.log"
    got=$(for r in 0 1 2 3; do sed -n 's/.*"host":"\([^"]*\)".*/\1/p' "$W/$name.hb/rank_0000$r.json"; done | paste -sd,)
    [ "$got" = "$where" ] && ok "$name: ranks 0-3 ran on $where (heartbeats)" || bad "$name: ranks ran on '$got'"
    slm_s3_puts "$name" > "$W/$name.puts"
    echo "server-counted PUTs ($name): step rank-data manifest keys"
    sed 's/^/    /' "$W/$name.puts"
    for s in 2 4 6; do
        got=$(awk -v s=$s '$1 == s { print $2, $3, $4 }' "$W/$name.puts")
        [ "$got" = "$want 1 $keys" ] && ok "$name, step $s: $want rank-data PUTs ($keys), 1 manifest" ||
            bad "$name, step $s: server counted '$got', expected '$want 1 $keys'"
    done
    [ "$(grep -c '^[0-9]' "$W/$name.puts")" = 3 ] && ok "$name: 3 checkpoints uploaded" ||
        bad "$name: $(grep -c '^[0-9]' "$W/$name.puts") checkpoint steps in the log"
    [ "$(grep '^latest' "$W/$name.puts")" = "latest 3" ] && ok "$name: 3 PUTs of latest" ||
        bad "$name: $(grep '^latest' "$W/$name.puts") PUTs of latest, expected 3"
    [ "$(grep '^other' "$W/$name.puts")" = "other 0" ] && ok "$name: no other PUT under the prefix" ||
        bad "$name: other PUTs: $(grep '^other' "$W/$name.puts")"
    "$BIN" ckpt verify "s3://$S3_BUCKET/$name/" > "$W/$name.verify" 2>&1
    check "$name: ckpt verify of the remote latest checkpoint" 0 $?
done
# the three runs trained the same model: the final local checkpoints are equal
same=1
for name in perrank2x2 leader4x1; do
    for f in "$W"/leader2x2/checkpoints/step_00000006/*; do
        cmp -s "$f" "$W/$name/checkpoints/step_00000006/$(basename "$f")" || same=0
    done
done
[ $same = 1 ] && ok "same final checkpoint files in all three runs" || bad "final checkpoints differ"
slm_s3_stop
slm_netns_down
[ -z "$(slm_netns_leftovers)" ] && ok "no namespace or link left" || bad "left behind: $(slm_netns_leftovers)"
slm_finish
