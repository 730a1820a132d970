#!/usr/bin/env bash
# shardlm tokenizer (issue 8 items 15, 23, 28, 30):
#  - train --out equal to an --input (same file, or a symlink to it) is refused, corpus intact;
#    so is an --out that is a file of an --input directory, or a new file inside one;
#  - encode / decode with a directory on stdin exit 1 (a read error is not end of input);
#  - a single --special token is BOS (as the help says: the first is BOS);
#  - --vocab-size larger than the corpus allows warns with the real number of ids;
#  - decode --bytes writes the tokens' raw bytes.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status ($?) of commands that are meant to fail
slm_corpus "$W/corpus.txt" 100000
cp "$W/corpus.txt" "$W/orig.txt"

# item 15
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/corpus.txt" --quiet \
    2> "$W/err.txt"
check "--out = --input refused" 2 $?
has "message names --out and --input" "$W/err.txt" "is the --input file"
cmp -s "$W/corpus.txt" "$W/orig.txt"; check "corpus intact" 0 $?
ln -s "$W/corpus.txt" "$W/link.txt"
"$BIN" tokenizer train --input "$W/link.txt" --vocab-size 300 --out "$W/corpus.txt" --quiet \
    2> /dev/null
check "--out = target of an --input symlink refused" 2 $?
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/link.txt" --quiet \
    2> /dev/null
check "--out a symlink to an --input refused" 2 $?
cmp -s "$W/corpus.txt" "$W/orig.txt"; check "corpus still intact" 0 $?
# --out is a file the --input directory walk reads, or (new) lies where a rerun would read it
mkdir -p "$W/td/sub" "$W/td/.hidden"
cp "$W/corpus.txt" "$W/td/a.txt"
head -c 2000 "$W/corpus.txt" > "$W/td/sub/b.txt"
"$BIN" tokenizer train --input "$W/td" --vocab-size 300 --out "$W/td/a.txt" --quiet 2> "$W/err.txt"
check "--out a file inside the --input directory refused" 2 $?
has "message names the input directory" "$W/err.txt" "is the input file .*td/a.txt (read from the --input directory .*td)"
cmp -s "$W/td/a.txt" "$W/orig.txt"; check "that corpus file intact" 0 $?
"$BIN" tokenizer train --input "$W/td" --vocab-size 300 --out "$W/td/sub/../sub/b.txt" --quiet \
    2> /dev/null
check "--out a nested input file (another spelling) refused" 2 $?
[ "$(wc -c < "$W/td/sub/b.txt")" = 2000 ]; check "nested corpus file intact" 0 $?
"$BIN" tokenizer train --input "$W/td" --vocab-size 300 --out "$W/td/sub/new.json" --quiet \
    2> "$W/err.txt"
check "a new --out inside the --input directory refused" 2 $?
has "message says a rerun would read it" "$W/err.txt" "lies inside the --input directory .*a rerun would read"
[ ! -e "$W/td/sub/new.json" ]; check "nothing written there" 0 $?
"$BIN" tokenizer train --input "$W/td" --vocab-size 300 --out "$W/td/.hidden/tok.json" --quiet
check "--out in a dot-directory the walk skips is fine" 0 $?
"$BIN" tokenizer train --input "$W/td/sub" --vocab-size 300 --out "$W/td/tok.json" --quiet
check "--out beside (not inside) the --input directory is fine" 0 $?

# item 30: one special token is BOS; the help says so
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/one.json" \
    --special "<s>" --quiet
check "train with one special" 0 $?
"$BIN" tokenizer info --tokenizer "$W/one.json" > "$W/info.txt"
has "single special is BOS (id 299 = 256 + 43 merges)" "$W/info.txt" "^bos_id: 299$"
has "and there is no EOS" "$W/info.txt" "^eos_id: -1$"
"$BIN" tokenizer --help | grep "the first is BOS" > /dev/null; check "help says the first is BOS" 0 $?

# item 30: fewer ids than asked for
printf 'aaaa bbbb aaaa\n' > "$W/tiny.txt"
"$BIN" tokenizer train --input "$W/tiny.txt" --vocab-size 1000 --out "$W/tiny.json" --quiet \
    2> "$W/err.txt"
check "small corpus trains" 0 $?
"$BIN" tokenizer info --tokenizer "$W/tiny.json" > "$W/info.txt"
n=$(sed -n 's/^vocab_size: //p' "$W/info.txt")
[ -n "$n" ] && [ "$n" -lt 1000 ]; check "fewer ids than asked ($n)" 0 $?
has "warning gives the real id count" "$W/err.txt" "the tokenizer has $n ids, fewer than the 1000"

# item 28: stdin read errors
echo "hello" | "$BIN" tokenizer encode --tokenizer "$W/one.json" > /dev/null
check "encode from a pipe" 0 $?
"$BIN" tokenizer encode --tokenizer "$W/one.json" < / > /dev/null 2> "$W/err.txt"
check "encode < / (a directory)" 1 $?
has "encode says the read failed" "$W/err.txt" "read from stdin failed"
"$BIN" tokenizer encode --whole --tokenizer "$W/one.json" < / > /dev/null 2> "$W/err.txt"
check "encode --whole < /" 1 $?
"$BIN" tokenizer decode --tokenizer "$W/one.json" < / > /dev/null 2> "$W/err.txt"
check "decode < /" 1 $?
has "decode says the read failed" "$W/err.txt" "read from stdin failed"

# item 23: decode --bytes: the raw bytes of the ids (byte-level BPE: the first byte of U+1F680
# alone is the single byte F0)
printf '\xf0\x9f\x9a\x80 Hello' | "$BIN" tokenizer encode --whole --tokenizer "$W/one.json" \
    > "$W/ids.txt"
first=$(cut -d' ' -f1 "$W/ids.txt")
echo "$first" | "$BIN" tokenizer decode --bytes --tokenizer "$W/one.json" | od -An -tx1 | tr -d ' \n' \
    > "$W/hex.txt"
[ "$(cat "$W/hex.txt")" = "f00a" ]; check "decode --bytes of the first id is F0 (got $(cat "$W/hex.txt"))" 0 $?
"$BIN" tokenizer decode --bytes --tokenizer "$W/one.json" < "$W/ids.txt" | od -An -tx1 | tr -d ' \n' \
    > "$W/hex.txt"
[ "$(cat "$W/hex.txt")" = "f09f9a802048656c6c6f0a" ]; check "decode --bytes round trip" 0 $?
"$BIN" tokenizer encode --bytes --tokenizer "$W/one.json" < /dev/null > /dev/null 2>&1
check "--bytes is a decode option" 2 $?
slm_finish
