#!/usr/bin/env bash
# SentencePiece BPE encode throughput: shardlm (tests/spm/spm_cli, one thread) vs spm_encode on
# the same model and text, each timed end to end (load + read + encode + write ids) in CPU
# seconds, best of 3.
# Model: Llama-2-style BPE (identity normalizer, byte fallback, no whitespace removal), vocab
# 8000, trained on 1 MB of tinyshakespeare + KJV. Text: the KJV bible (4.3 MB) + tinyshakespeare.
# Usage: bench/bench_spm.sh [BUILD_DIR]   (default build; needs spm_train, spm_encode, bible)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
cli="$build/tests/spm/spm_cli"
[ -x "$cli" ] || { echo "build $cli first: cmake --build $build --target spm_cli"; exit 2; }
shared="${SLM_SHARED_DIR:-$root/../shared}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
bible Gen1:1-Rev22:21 > kjv.txt
cat kjv.txt "$shared/data/tinyshakespeare.txt" > text.txt
{ head -c 500000 kjv.txt; head -c 500000 "$shared/data/tinyshakespeare.txt"; } > train.txt
spm_train --input=train.txt --model_prefix=m --model_type=bpe --vocab_size=8000 \
  --byte_fallback=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --split_digits=true --minloglevel=2 --num_threads=2 > /dev/null 2>&1
mb=$(awk -v b="$(wc -c < text.txt)" 'BEGIN { printf "%.2f", b / 1e6 }')
# CPU seconds (user + sys) of a command, best of 3: on a shared machine wall time mostly
# measures the neighbours.
best() { # command...
  local b="" t
  for _ in 1 2 3; do
    t=$( { TIMEFORMAT='%U %S'; time "$@" > out.ids; } 2>&1 | awk '{ print $1 + $2 }')
    b=$(awk -v t="$t" -v b="$b" 'BEGIN { if (b == "" || t < b) b = t; print b }')
  done
  echo "$b"
}
t_slm=$(best "$cli" encode m.model text.txt)
cp out.ids slm.ids
t_spm=$(best spm_encode --model=m.model --output_format=id --input=text.txt)
cmp -s slm.ids out.ids && same=identical || same=DIFFERENT
awk -v mb="$mb" -v a="$t_slm" -v b="$t_spm" -v s="$same" 'BEGIN {
  printf "text %.2f MB, ids %s\n", mb, s
  printf "shardlm     %.3f CPU s  %6.2f MB/s\n", a, mb / a
  printf "spm_encode  %.3f CPU s  %6.2f MB/s\n", b, mb / b
  printf "ratio       %.2fx\n", b / a }'
