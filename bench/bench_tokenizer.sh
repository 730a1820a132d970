#!/usr/bin/env bash
# Tokenizer bench (not a test): byte-level BPE training time and encode throughput of shardlm
# vs SentencePiece's spm_train / spm_encode (BPE) on tinyshakespeare + the KJV (~5.4 MB).
#   usage: bench/bench_tokenizer.sh [path/to/shardlm]   (default build/shardlm)
# Training: 4k and 16k vocab, 2 threads each. Encode: one process, line mode, ids to /dev/null
# (both tools are single-threaded here), MB/s of input text. Prints a side-by-side table.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build/shardlm}"
SHARED="${SLM_SHARED_DIR:-$(pwd)/../shared}"
[ -x "$BIN" ] || { echo "no shardlm binary at $BIN (build first)" >&2; exit 2; }
command -v spm_train >/dev/null || { echo "spm_train not found (apt install sentencepiece)" >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat "$SHARED/data/tinyshakespeare.txt" > "$W/corpus.txt"
bible Gen1:1-Rev22:21 >> "$W/corpus.txt"
MB=$(awk -v b="$(stat -c %s "$W/corpus.txt")" 'BEGIN { printf "%.2f", b / 1e6 }')

# Best of 3 wall-clock seconds of a command.
best3() {
  local best=""
  for _ in 1 2 3; do
    local t0 t1 dt
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s.%N)
    dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    if [ -z "$best" ] || awk -v a="$dt" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$dt; fi
  done
  echo "$best"
}

printf "corpus: tinyshakespeare + KJV, %s MB; %s cores\n\n" "$MB" "$(nproc)"
printf "%-28s %12s %12s %10s\n" "task" "shardlm" "spm" "spm/shardlm"
for V in 4096 16384; do
  ts=$(best3 "$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size "$V" --threads 2 \
       --out "$W/bpe_$V.json" --quiet)
  tp=$(best3 spm_train --input="$W/corpus.txt" --model_prefix="$W/spm_$V" --model_type=bpe \
       --vocab_size="$V" --num_threads=2 --minloglevel=2)
  printf "%-28s %11ss %11ss %9.2fx\n" "train ${V} vocab (2 thr)" "$ts" "$tp" \
    "$(awk -v a="$tp" -v b="$ts" 'BEGIN { print a / b }')"
done
for V in 4096 16384; do
  es=$(best3 sh -c "'$BIN' tokenizer encode --tokenizer '$W/bpe_$V.json' < '$W/corpus.txt'")
  ep=$(best3 sh -c "spm_encode --model='$W/spm_$V.model' --output_format=id < '$W/corpus.txt'")
  ms=$(awk -v m="$MB" -v t="$es" 'BEGIN { printf "%.1f", m / t }')
  mp=$(awk -v m="$MB" -v t="$ep" 'BEGIN { printf "%.1f", m / t }')
  printf "%-28s %9s MB/s %7s MB/s %9.2fx\n" "encode ${V} vocab (1 thr)" "$ms" "$mp" \
    "$(awk -v a="$ms" -v b="$mp" 'BEGIN { print a / b }')"
done
echo
echo "(train: seconds, lower is better; encode: MB/s of text, higher is better; the last column"
echo " is the speed-up of shardlm over spm in both cases)"
