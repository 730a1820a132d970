#!/usr/bin/env bash
# shardlm prep (issue 8 items 24, 25, 29):
#  - JSONL: two objects on one line, a \u0000 escape, a lone surrogate: exit 1 naming FILE:LINE
#    and the reason; an escaped backslash before "u0000" and a valid surrogate pair are fine;
#  - documents read / written / skipped (empty) in the log and in manifest.json "documents";
#  - a stale temp directory of a dead pid is removed (and the log says so); a live one is kept.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status ($?) of commands that are meant to fail
slm_corpus "$W/corpus.txt" 50000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tok.json" --quiet \
    || { bad "tokenizer train"; slm_finish; }
prep() { "$BIN" prep --tokenizer "$W/tok.json" --workers 1 --val-fraction 0 "$@"; }

# --- item 25: JSONL lines that used to be mangled silently ---------------------------------
bad_case() { # bad_case NAME LINE2 PATTERN
    printf '{"text": "first line"}\n%s\n{"text": "third"}\n' "$2" > "$W/in.jsonl"
    prep --input "$W/in.jsonl" --out "$W/ds_bad" --quiet 2> "$W/err.txt"
    check "$1: exit 1" 1 $?
    has "$1: names file and line" "$W/err.txt" "in.jsonl:2: "
    has "$1: says why" "$W/err.txt" "$3"
    [ ! -e "$W/ds_bad" ]; check "$1: no dataset written" 0 $?
}
bad_case "two objects on a line" '{"text": "a"} {"text": "b"}' "text after the JSON object"
bad_case "object then garbage" '{"text": "a"}x' "text after the JSON object"
bad_case "NUL escape" '{"text": "a\u0000b"}' 'u0000 (NUL)'
bad_case "NUL escape in another field" '{"text": "a", "id": "\u0000"}' 'u0000 (NUL)'
bad_case "lone high surrogate" '{"text": "x\ud800y"}' 'lone UTF-16 surrogate \\uD800'
bad_case "high surrogate at the end" '{"text": "\uD83D"}' 'lone UTF-16 surrogate \\uD83D'
bad_case "lone low surrogate" '{"text": "\udc00"}' 'lone UTF-16 surrogate \\uDC00'
bad_case "two high surrogates" '{"text": "\ud83d\ud83d"}' 'lone UTF-16 surrogate \\uD83D'

# fine: an escaped backslash followed by u0000 (the text is the 6 characters \u0000), a valid
# surrogate pair (U+1F680), trailing whitespace / CR
printf '{"text": "a\\\\u0000b"}\n{"text": "\\ud83d\\ude80 rocket"}\n{"text": "ok"}  \r\n' \
    > "$W/good.jsonl"
prep --input "$W/good.jsonl" --out "$W/ds_good" --quiet 2> "$W/err.txt"
check "valid JSONL accepted" 0 $?
"$PY" - "$W/ds_good" "$W/tok.json" "$BIN" <<'PY' || bad "python check above"
import json, subprocess, sys, struct, glob
d, tok, binary = sys.argv[1:4]
m = json.load(open(d + "/manifest.json"))
ids = []
for s in m["shards"]:
    b = open(d + "/" + s["file"], "rb").read()
    ids += list(struct.unpack("<%dH" % s["n_tokens"], b[64:]))
text = subprocess.run([binary, "tokenizer", "decode", "--tokenizer", tok],
                      input=" ".join(map(str, ids)) + "\n", capture_output=True,
                      text=True).stdout
for want in ["a\\u0000b", "\U0001F680 rocket", "ok"]:
    if want not in text:
        print("FAIL decoded dataset lacks %r: %r" % (want, text)); sys.exit(1)
print("ok   decoded dataset holds the three texts as written")
PY

# --- item 24: document counts -----------------------------------------------------------------
printf '{"text": "one"}\n{"text": ""}\n\n{"text": "two"}\n{"text": ""}\n{"text": "three"}\n' \
    > "$W/docs.jsonl"
prep --input "$W/docs.jsonl" --out "$W/ds_docs" 2> "$W/log.txt"
check "prep with empty documents" 0 $?
has "log reports read/written/skipped" "$W/log.txt" "documents: 5 read, 3 written, 2 skipped"
"$PY" - "$W/ds_docs/manifest.json" <<'PY' || bad "python check above"
import json, sys
m = json.load(open(sys.argv[1]))
d = m.get("documents")
want = {"read": 5, "written": 3, "skipped_empty": 2}
if d != want:
    print("FAIL manifest documents %r, expected %r" % (d, want)); sys.exit(1)
print("ok   manifest documents %r" % (d,))
PY
# a manifest whose counts do not add up is refused by readers (eval --unigram-entropy reads it)
"$PY" - "$W/ds_docs/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["documents"]["read"] = 9
json.dump(m, open(sys.argv[1], "w"))
PY
"$BIN" eval --data "$W/ds_docs" --split train --unigram-entropy > /dev/null 2> "$W/err.txt"
check "inconsistent documents refused" 1 $?
has "message names the documents field" "$W/err.txt" "documents: read 9"

# --- item 29: stale temp directories of dead pids -------------------------------------------
sleep 0 & dead=$!
wait $dead
while kill -0 "$dead" 2>/dev/null; do sleep 0 & dead=$!; wait $dead; done
mkdir -p "$W/p"
mkdir "$W/p/.ds.prep-tmp.$dead" "$W/p/.ds.prep-tmp.$$" "$W/p/.ds.prep-old.$dead"
touch "$W/p/.ds.prep-tmp.$dead/train_0000_000_000000.bin.partial" "$W/p/.ds.prep-tmp.$$/x"
touch "$W/p/.ds.prep-old.$dead/manifest.json"
prep --input "$W/corpus.txt" --out "$W/p/ds" 2> "$W/log.txt"
check "prep next to stale temp dirs" 0 $?
[ ! -e "$W/p/.ds.prep-tmp.$dead" ]; check "temp dir of dead pid $dead removed" 0 $?
has "log says it removed it" "$W/log.txt" "removed stale temp directory .*prep-tmp.$dead"
[ -f "$W/p/.ds.prep-tmp.$$/x" ]; check "temp dir of a live pid kept" 0 $?
[ -f "$W/p/.ds.prep-old.$dead/manifest.json" ]; check "old dir kept" 0 $?
[ -f "$W/p/ds/manifest.json" ]; check "dataset written" 0 $?
slm_finish
