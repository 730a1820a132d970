# Checkpoint uploads from several real "hosts" (tests/netns_lib.sh network namespaces, each with
# its own hostname) to one SeaweedFS server (tests/objstore/lib.sh) listening on the hosts'
# bridge in the machine's own namespace, with the server's request log on, so PUTs are counted
# by the server itself. Source after tests/lib.sh (and export S3TOOL). Gives:
#   slm_s3_netns_up H        H hosts, the server on NET.254 (exit 77 where netns is not possible)
#   slm_s3_netns_train MODE HOSTS RANKS_PER_HOST OUT TRAIN_ARGS...
#                            `shardlm train ... --out OUT --ckpt-uri s3://$S3_BUCKET/${OUT##*/}/`
#                            under mpirun over TCP on hosts 1..HOSTS; MODE leader: the hosts as they
#                            are (gethostname), one uploader per host; MODE per-rank: every rank
#                            its own "host" (SHARDLM_HOST_ID=rankR), the no-leader baseline.
#                            Output in OUT.log; returns mpirun's status
#   slm_s3_puts PREFIX       from the server's log, per checkpoint step under s3://BUCKET/PREFIX/:
#                            "STEP RANK_DATA_PUTS MANIFEST_PUTS KEYS" (KEYS: the rank data
#                            objects' names, sorted, comma-separated), one line per step, then
#                            "latest N" (PUTs of checkpoints/latest; the log orders requests by
#                            completion, so they are not attributed to steps) and "other N" (PUTs
#                            under the prefix that are none of these)
. "$SRC/tests/netns_lib.sh"
. "$SRC/tests/objstore/lib.sh"
slm_s3_netns_up() {
    local rc
    set +e
    slm_netns_up "$1"
    rc=$?
    set -e
    [ "$rc" = 0 ] || exit "$rc"
    S3_IP=$SLM_NET.254 S3_LOG_REQUESTS=1 slm_s3_start "$W/s3"
}
slm_s3_netns_train() {
    local mode=$1 hosts=$2 per=$3 out=$4 wrap=()
    shift 4
    if [ "$mode" = per-rank ]; then
        printf '#!/bin/sh\nSHARDLM_HOST_ID=rank$OMPI_COMM_WORLD_RANK exec "$@"\n' > "$W/per-rank.sh"
        chmod +x "$W/per-rank.sh"
        wrap=("$W/per-rank.sh")
    fi
    timeout 300 "$MPIEXEC" --host "$(slm_netns_hosts "$per" "$hosts")" -np $((hosts * per)) \
        "${SLM_NET_MPI[@]}" -x OMP_NUM_THREADS=1 -x AWS_ENDPOINT_URL -x AWS_ACCESS_KEY_ID \
        -x AWS_SECRET_ACCESS_KEY -x AWS_REGION -x AWS_SHARED_CREDENTIALS_FILE -x AWS_CONFIG_FILE \
        "${wrap[@]}" "$BIN" train "$@" --out "$out" --ckpt-uri "s3://$S3_BUCKET/${out##*/}/" \
        > "$out.log" 2>&1
}
slm_s3_puts() {
    "$PY" - "$S3_DIR/weed.log" "/$S3_BUCKET/$1/" <<'PY'
import re, sys
# weed's access log line (glog level 3): ... stats.go:N "IDENTITY" METHOD "/BUCKET/KEY" CODE TIME
line = re.compile(r'stats\.go:\d+\]? "[^"]*" PUT "([^"]*)" 200 ')
step_file = re.compile(r'checkpoints/step_(\d+)/(.+)$')
prefix, steps, other, latest = sys.argv[2], {}, 0, 0
for text in open(sys.argv[1], errors="replace"):
    m = line.search(text)
    if not m or not m.group(1).startswith(prefix):
        continue
    key = m.group(1)[len(prefix):]
    sm = step_file.match(key)
    if sm:
        d = steps.setdefault(int(sm.group(1)), {"data": [], "manifest": 0})
        if sm.group(2) == "manifest.json":
            d["manifest"] += 1
        elif re.fullmatch(r"host_\d+\.bin", sm.group(2)):
            d["data"].append(sm.group(2))
        else:
            other += 1
    elif key == "checkpoints/latest":
        latest += 1
    else:
        other += 1
for s in sorted(steps):
    d = steps[s]
    print(s, len(d["data"]), d["manifest"], ",".join(sorted(d["data"])))
print("latest", latest)
print("other", other)
PY
}
