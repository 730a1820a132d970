#!/usr/bin/env bash
# SentencePiece parity: trains BPE models with spm_train in a temp dir and checks that shardlm
# encodes id-for-id like `spm_encode --output_format=id` and decodes byte-for-byte like
# `spm_decode --input_format=id`, on tinyshakespeare (all lines), the KJV bible (all lines), a set
# of hostile strings, one long line and random id sequences. Also checks that nmt_nfkc and unigram
# models are refused.
# Usage: spm_parity.sh PATH/TO/spm_cli     (env: SLM_SHARED_DIR)
set -euo pipefail
CLI="$1"
SHARED="${SLM_SHARED_DIR:-$(dirname "$0")/../../../shared}"
for tool in spm_train spm_encode spm_decode bible; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

cp "$SHARED/data/tinyshakespeare.txt" shakespeare.txt
bible Gen1:1-Rev22:21 > kjv.txt
# Training text: a slice of each corpus keeps spm_train to well under a second per model.
{ head -c 300000 shakespeare.txt; head -c 300000 kjv.txt; } > train.txt
# One 400 KB line: BPE over a long sequence (a large merge queue), as spm_encode does per line.
{ tail -c 400000 kjv.txt | tr '\n' ' '; echo; } > oneline.txt

# Hostile strings, one per line (printf interprets the escapes).
{
  printf '%s\n' "" " " "   " "a" " leading" "trailing " "  both  sides  " "multiple    inner   spaces"
  printf 'tab\tseparated\t\tcolumns\n'
  printf '\ttab first and last\t\n'
  printf 'carriage\rreturn\n'
  printf 'emoji \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd family \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 \xf0\x9f\x98\x80\xf0\x9f\x98\x80\n'
  printf 'CJK \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88 \xe4\xb8\xad\xe6\x96\x87 \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4\n'
  printf 'combining e\xcc\x81 a\xcc\x8a n\xcc\x83\xcc\x88 precomposed \xc3\xa9\n'
  printf 'Greek \xce\xb1\xce\xb2\xce\xb3 Cyrillic \xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 Arabic \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7\n'
  printf 'literal meta \xe2\x96\x81 symbol \xe2\x96\x81\xe2\x96\x81 and \xe2\x96\x81\n'
  printf '\xe2\x96\x81\n'
  printf 'specials <s> </s> <unk> <0x41> <pad> text\n'
  printf 'invalid \xff\xfe bytes \xc3 lone \xc0\xaf overlong \xed\xa0\x80 surrogate \xf4\x90\x80\x80 big\n'
  printf 'truncated at end \xe6\x97\n'
  printf 'digits 1234567890 3.14159 1,000,000\n'
  printf 'punctuation !!!??? ... --- ((( ))) """ \x27\x27\x27\n'
  printf 'THE QUICK BROWN FOX thE qUiCk\n'
  printf 'x%.0s' $(seq 1 3000); printf '\n'
  printf 'Supercalifragilisticexpialidocious%.0s' $(seq 1 200); printf '\n'
  printf 'And%.0s the' $(seq 1 500); printf '\n'
  printf ' %.0s' $(seq 1 100); printf 'spaces then text\n'
  printf 'zqxj vbnk wrtp qqq xxx zzz jjj\n'
  printf 'control \x01\x02\x1b[0m chars \x7f\n'
} > nasty.txt

# Random lines built from fragments that stress normalization and segmentation: space runs,
# tabs, user-defined symbols (LORD, <sep>, ▁▁ in the nofb model), the meta symbol itself,
# combining marks, unseen scripts, malformed UTF-8, control-symbol text, digits.
LC_ALL=C awk 'BEGIN {
  srand(4321)
  n = split("a| |  |   |\t|the|LORD|LORDS|<sep>|\342\226\201|\342\226\201\342\226\201|" \
            "\303\251|e\314\201|\346\227\245\346\234\254|\360\237\230\200|\377|\303|" \
            "<s>|</s>|<unk>|1|23|.|,|thee|And|ing|Q|zz|\r", f, "|")
  for (l = 0; l < 3000; l++) {
    k = int(rand() * 16); s = ""
    for (i = 0; i < k; i++) s = s f[1 + int(rand() * n)]
    print s
  }
}' > random.txt

# Random id sequences over the whole vocabulary (decode parity: control ids, byte runs that are
# not valid UTF-8, UNK, pieces in any order).
rand_ids() { # vocab
  awk -v V="$1" 'BEGIN { srand(1234); for (l = 0; l < 400; l++) { n = int(rand() * 30);
    s = ""; for (i = 0; i < n; i++) s = s (i ? " " : "") int(rand() * V); print s } }'
}

fail=0
pass=0
check() { # name ours ref
  if cmp -s "$2" "$3"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $1: first differences (< shardlm, > sentencepiece):"
    diff "$2" "$3" | head -8 | cut -c1-300 || true
  fi
}

common=(--model_type=bpe --byte_fallback=true --normalization_rule_name=identity
        --input=train.txt --minloglevel=2 --num_threads=2)
train() { # prefix args...
  local p=$1; shift
  spm_train --model_prefix="$p" "$@" > "$p.log" 2>&1 || { cat "$p.log"; exit 1; }
}
# default: remove_extra_whitespaces=true
train def "${common[@]}" --vocab_size=4000
# Llama 2 style
train llama "${common[@]}" --vocab_size=4000 --remove_extra_whitespaces=false \
  --add_dummy_prefix=true --split_digits=true --allow_whitespace_only_pieces=true
# no byte fallback (runs of unknown characters -> one <unk>), user-defined and control symbols
train nofb --model_type=bpe --normalization_rule_name=identity --input=train.txt --minloglevel=2 \
  --num_threads=2 --vocab_size=2000 --user_defined_symbols='<sep>,LORD,▁▁' \
  --control_symbols='<ctl>' --pad_id=3 --character_coverage=0.98
# no dummy prefix
train nodp "${common[@]}" --vocab_size=2000 --add_dummy_prefix=false \
  --remove_extra_whitespaces=false
# nmt_nfkc normalizer: must be refused
spm_train --model_type=bpe --byte_fallback=true --normalization_rule_name=nmt_nfkc \
  --input=train.txt --model_prefix=nfkc --vocab_size=1000 --minloglevel=2 > nfkc.log 2>&1

# a unigram model: must be refused
spm_train --model_type=unigram --input=train.txt --model_prefix=uni --vocab_size=1000 \
  --minloglevel=2 > uni.log 2>&1

for m in def llama nofb nodp; do
  vocab=$(wc -l < "$m.vocab")
  rand_ids "$vocab" > "rand_$m.ids"
  for text in shakespeare kjv nasty oneline random; do
    spm_encode --model="$m.model" --output_format=id < "$text.txt" > "$m.$text.ref"
    "$CLI" encode "$m.model" "$text.txt" > "$m.$text.ours"
    check "encode $m/$text" "$m.$text.ours" "$m.$text.ref"
    spm_decode --model="$m.model" --input_format=id < "$m.$text.ref" > "$m.$text.dref"
    "$CLI" decode "$m.model" "$m.$text.ref" > "$m.$text.dours"
    check "decode $m/$text" "$m.$text.dours" "$m.$text.dref"
  done
  spm_encode --model="$m.model" --output_format=id --extra_options=bos:eos < nasty.txt > "$m.be.ref"
  "$CLI" encode "$m.model" nasty.txt bos:eos > "$m.be.ours"
  check "encode bos:eos $m/nasty" "$m.be.ours" "$m.be.ref"
  spm_decode --model="$m.model" --input_format=id < "rand_$m.ids" > "$m.rand.dref"
  "$CLI" decode "$m.model" "rand_$m.ids" > "$m.rand.dours"
  check "decode $m/random ids" "$m.rand.dours" "$m.rand.dref"
done

out=$("$CLI" load nfkc.model || true)
if [[ "$out" == unsupported:*nmt_nfkc*identity* ]]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL nmt_nfkc model not refused with a clear message: $out"
fi

out=$("$CLI" load uni.model || true)
if [[ "$out" == unsupported:*UNIGRAM* ]]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL unigram model not refused with a clear message: $out"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
