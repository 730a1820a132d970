#!/usr/bin/env bash
# The bucket probe behind a HEAD 404 (src/objstore/client.c bucket_missing) against SeaweedFS,
# counted in the server's own access log (weed -v=3), not the client's counters:
#  1. one client, 4 missing keys and 1 present one in an existing bucket: every missing key
#     stays "not found" (s3_tool exit 3) and the server sees 5 HEADs and 1 ListObjectsV2;
#  2. a principal allowed to Read but not to List (ListObjectsV2 answers 403 AccessDenied):
#     the same, still 1 ListObjectsV2 (the 403 says the bucket exists; it was asked per key);
#  3. a missing bucket stays an error naming it (NoSuchBucket), for the full principal.
# Usage: test_s3_probe.sh S3_TOOL. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR, SLM_PYTHON.
. "$(dirname "$0")/../lib.sh"
S3TOOL=$1
. "$(dirname "$0")/lib.sh"
set +e
T=$S3TOOL
S3_LOG_REQUESTS=1 slm_s3_start "$W/s3" || exit 1
B=$S3_BUCKET
RK=SLMREADER00000000001 RS=reader/secret000000000000000000000000001
# a second identity that may only read objects: restart with it in the identity file
slm_s3_stop
"$PY" - "$S3_DIR/s3.json" "$RK" "$RS" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["identities"].append({"name": "reader", "actions": ["Read"],
                        "credentials": [{"accessKey": sys.argv[2], "secretKey": sys.argv[3]}]})
json.dump(c, open(sys.argv[1], "w"))
PY
S3_LOG_REQUESTS=1 slm_s3_restart || exit 1
echo hi > "$W/f"
"$T" put "$B" p/present "$W/f" > /dev/null || { bad "put p/present"; slm_finish; }
count() { # count IDENTITY METHOD PATH_REGEX: the server's access-log lines for them
    "$PY" - "$S3_DIR/weed.log" "$1" "$2" "$3" <<'PY'
import re, sys
# weed's access log line (glog level 3): ... stats.go:N] "IDENTITY" METHOD "/BUCKET/KEY" CODE TIME
line = re.compile(r'stats\.go:\d+\]? "([^"]*)" (\w+) "([^"]*)" (\d+) ')
n = 0
for text in open(sys.argv[1], errors="replace"):
    m = line.search(text)
    if m and m.group(1) == sys.argv[2] and m.group(2) == sys.argv[3] and re.fullmatch(sys.argv[4], m.group(3)):
        n += 1
print(n)
PY
}
heads() { # heads NAME IDENTITY -- s3_tool heads ...: checks exit 3, the output, the server's counts
    local name=$1 who=$2 h0 l0 h1 l1
    shift 2
    h0=$(count "$who" HEAD "/$B/p/.*") l0=$(count "$who" GET "/$B/?")
    "$T" heads "$B" p/m1 p/m2 p/present p/m3 p/m4 > "$W/$name.out" 2> "$W/$name.err"
    check "$name: a missing key is 'not found' (exit 3)" 3 $?
    [ "$(grep -c -- ' -1$' "$W/$name.out")" = 4 ] && grep -q '^p/present 3$' "$W/$name.out" &&
        ok "$name: 4 missing, p/present 3 bytes" || { bad "$name: output"; cat "$W/$name.out" "$W/$name.err"; }
    sleep 1 # the access log is written after the answer
    h1=$(count "$who" HEAD "/$B/p/.*") l1=$(count "$who" GET "/$B/?")
    [ $((h1 - h0)) = 5 ] && ok "$name: the server saw 5 HEADs" || bad "$name: $((h1 - h0)) HEADs, expected 5"
    [ $((l1 - l0)) = 1 ] && ok "$name: the server saw 1 bucket probe (ListObjectsV2)" ||
        bad "$name: $((l1 - l0)) ListObjectsV2, expected 1 (one probe per client and bucket)"
}
heads "full principal" admin-SLMTESTK # weed names an Admin identity admin-<key id prefix>
AWS_ACCESS_KEY_ID=$RK AWS_SECRET_ACCESS_KEY=$RS "$T" ls "$B" p/ > /dev/null 2> "$W/ls.err"
has "the reader may not list (403)" "$W/ls.err" "HTTP 403"
AWS_ACCESS_KEY_ID=$RK AWS_SECRET_ACCESS_KEY=$RS heads "read-only principal" reader
"$T" head slm-missing-bucket k > "$W/nb.out" 2>&1
check "missing bucket: an error (exit 1), not 'not found'" 1 $?
has "it names the bucket" "$W/nb.out" "NoSuchBucket.*the bucket slm-missing-bucket does not exist"
slm_finish
