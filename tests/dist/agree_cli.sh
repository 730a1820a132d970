#!/usr/bin/env bash
# Ranks started with different options (mpirun -np 1 A : -np 1 B) stop together before they
# communicate, with one message naming the option and the ranks, exit 2 for an option and 1 for
# data, and quickly (no collective timeout): train (several options, and a dataset that differs
# only in content: the same relative --data path under two working directories) and prep.
# Usage: agree_cli.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status ($?) of commands that are meant to fail
MPIEXEC=$1
export OMP_NUM_THREADS=1
set -e
slm_corpus "$W/corpus.txt" 60000
slm_corpus "$W/corpus2.txt" 30000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tok.json" --quiet
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 320 --out "$W/tok2.json" --quiet
mkdir -p "$W/a" "$W/b"
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/corpus.txt" --out "$W/a/data" --workers 1 --quiet
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/corpus2.txt" --out "$W/b/data" --workers 1 --quiet
set +e
slm_tiny_config "$W/config.json" vocab_size=300 max_position_embeddings=16
TR=(train --model "$W/config.json" --batch 2 --seq 16 --steps 2 --threads 1 --peak-gflops 10
    --log-every 0 --collective-timeout 30)

# expect NAME WANT_RC WANT_MESSAGE -- mpirun arguments...
expect() {
    local name=$1 want_rc=$2 want=$3
    shift 4
    local t0=$SECONDS out rc
    out=$("$MPIEXEC" --oversubscribe "$@" 2>&1)
    rc=$?
    local dt=$((SECONDS - t0)) n
    n=$(grep -cF -- "$want" <<<"$out")
    if [ "$rc" -eq "$want_rc" ] && [ "$n" -eq 1 ] && [ "$dt" -lt 25 ] &&
        ! grep -q "timed out" <<<"$out"; then
        ok "$name: exit $rc in ${dt}s: $(grep -F -- "$want" <<<"$out")"
    else
        bad "$name: exit $rc (want $want_rc) in ${dt}s, message \"$want\" seen $n times (want 1)"
        echo "$out" | head -20
    fi
}

D=(--data "$W/a/data")
expect "--param-dtype" 2 "ranks disagree on --param-dtype: rank 0 bf16, rank 1 fp32" -- \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --param-dtype bf16 : \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --param-dtype fp32
expect "--reduce-dtype" 2 "ranks disagree on --reduce-dtype: rank 0 fp32, rank 1 bf16" -- \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" : \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --reduce-dtype bf16
expect "--sharding" 2 "ranks disagree on --sharding: rank 0 FULL_SHARD, rank 1 NO_SHARD" -- \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --sharding FULL_SHARD : \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --sharding no_shard
expect "--grad-accum" 2 "ranks disagree on --grad-accum: rank 0 1, rank 1 2" -- \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" : \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --grad-accum 2
# three ranks: the odd one out is named, the first two grouped; other differences listed
expect "--lr (3 ranks)" 2 "ranks disagree on --lr: ranks 0-1 0.00300000003, rank 2 0.00100000005; also differ: --min-lr" -- \
    -np 2 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --lr 3e-3 : \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --lr 1e-3
# LoRA options are compared before anything reads the base (which need not exist here)
expect "--lora-rank" 2 "ranks disagree on --lora-rank: rank 0 4, rank 1 8" -- \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --init-from-hf "$W/nobase" --lora-rank 4 : \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --init-from-hf "$W/nobase" --lora-rank 8
expect "--lora-targets" 2 "ranks disagree on --lora-targets: rank 0 q_proj,v_proj, rank 1 q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" -- \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --init-from-hf "$W/nobase" --lora-rank 4 : \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --init-from-hf "$W/nobase" --lora-rank 4 \
    --lora-targets all
expect "--seed" 2 "ranks disagree on --seed: rank 0 1337, rank 1 7" -- \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" : \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --seed 7
expect "--ckpt-sync" 2 "ranks disagree on --ckpt-sync: rank 0 off, rank 1 on" -- \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" : \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" --ckpt-sync
expect "--out" 2 "ranks disagree on --out: rank 0 $W/r, rank 1 $W/r2" -- \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r" : \
    -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/r2"
expect "--data" 2 "ranks disagree on --data: rank 0 $W/a/data, rank 1 $W/b/data" -- \
    -np 1 "$BIN" "${TR[@]}" --data "$W/a/data" --out "$W/r" : \
    -np 1 "$BIN" "${TR[@]}" --data "$W/b/data" --out "$W/r"
# the same --data path names different datasets on the two ranks (node-local copies): exit 1
expect "dataset contents" 1 "ranks disagree on dataset manifest: rank 0 xxh64" -- \
    -np 1 -wdir "$W/a" "$BIN" "${TR[@]}" --data data --out "$W/r" : \
    -np 1 -wdir "$W/b" "$BIN" "${TR[@]}" --data data --out "$W/r"
[ -e "$W/r" ] && bad "a refused run created its --out" || ok "no run directory was created"
# equal settings written differently agree, and the run trains
out=$("$MPIEXEC" --oversubscribe -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/ok" --lr 3e-4 \
      --sharding full_shard : -np 1 "$BIN" "${TR[@]}" "${D[@]}" --out "$W/ok" --lr 0.0003 2>&1)
rc=$?
if [ $rc -eq 0 ] && [ -f "$W/ok/checkpoints/latest" ]; then ok "3e-4 == 0.0003, full_shard == FULL_SHARD: trains"
else bad "equal options refused (exit $rc)"; echo "$out" | tail -5; fi
# a relative --out under two working directories would be two run directories: exit 2
expect "--out from the working directory" 2 "ranks disagree on --out (from each rank's working directory): rank 0 $W/a/run, rank 1 $W/b/run" -- \
    -np 1 -wdir "$W/a" "$BIN" "${TR[@]}" "${D[@]}" --out run : \
    -np 1 -wdir "$W/b" "$BIN" "${TR[@]}" "${D[@]}" --out run
# --init-from-hf: the same relative path holding two exports of the same shapes (different
# weights, identical config.json) is told apart by the weights' hash: exit 1
"$BIN" "${TR[@]}" "${D[@]}" --out "$W/ok2" --seed 7 > /dev/null 2>&1
"$BIN" ckpt export "$W/ok" --hf "$W/a/hf" > /dev/null 2>&1
"$BIN" ckpt export "$W/ok2" --hf "$W/b/hf" > /dev/null 2>&1
cmp -s "$W/a/hf/config.json" "$W/b/hf/config.json" && ok "two exports, one config.json" ||
    bad "the two exports' config.json differ (the case needs identical ones)"
expect "--init-from-hf weights" 1 "ranks disagree on --init-from-hf weights: rank 0 xxh64" -- \
    -np 1 -wdir "$W/a" "$BIN" "${TR[@]}" "${D[@]}" --init-from-hf hf --out "$W/mix" : \
    -np 1 -wdir "$W/b" "$BIN" "${TR[@]}" "${D[@]}" --init-from-hf hf --out "$W/mix"
[ -e "$W/mix" ] && bad "the refused --init-from-hf run created its --out" || ok "no --out for the refused run"
# the same relative --model path holding configs that differ only in the RoPE scaling (linear
# factor 2 vs 4): the model config comparison includes rope_scaling: exit 1
RS='rope_scaling={"rope_type": "linear", "factor": '
slm_tiny_config "$W/a/cfg.json" vocab_size=300 max_position_embeddings=16 "${RS}2.0}"
slm_tiny_config "$W/b/cfg.json" vocab_size=300 max_position_embeddings=16 "${RS}4.0}"
TRM=("${TR[@]}")
TRM[2]=cfg.json
expect "model config rope_scaling" 1 "ranks disagree on model config rope scaling: rank 0 linear factor 2 low 0 high 0 original positions 0, rank 1 linear factor 4" -- \
    -np 1 -wdir "$W/a" "$BIN" "${TRM[@]}" "${D[@]}" --out "$W/rs" : \
    -np 1 -wdir "$W/b" "$BIN" "${TRM[@]}" "${D[@]}" --out "$W/rs"
[ -e "$W/rs" ] && bad "the refused rope_scaling run created its --out" || ok "no --out for the refused rope_scaling run"

# prep under mpirun
P=(prep --input "$W/corpus.txt" --workers 1 --quiet --collective-timeout 30)
expect "prep --tokenizer" 2 "ranks disagree on --tokenizer: rank 0 $W/tok.json, rank 1 $W/tok2.json" -- \
    -np 1 "$BIN" "${P[@]}" --tokenizer "$W/tok.json" --out "$W/p" : \
    -np 1 "$BIN" "${P[@]}" --tokenizer "$W/tok2.json" --out "$W/p"
expect "prep --seed" 2 "ranks disagree on --seed: rank 0 1234, rank 1 99" -- \
    -np 1 "$BIN" "${P[@]}" --tokenizer "$W/tok.json" --out "$W/p" : \
    -np 1 "$BIN" "${P[@]}" --tokenizer "$W/tok.json" --out "$W/p" --seed 99
expect "prep --input" 2 "ranks disagree on --input: rank 0 $W/corpus.txt, rank 1 $W/corpus.txt $W/corpus2.txt" -- \
    -np 1 "$BIN" "${P[@]}" --tokenizer "$W/tok.json" --out "$W/p" : \
    -np 1 "$BIN" "${P[@]}" --input "$W/corpus2.txt" --tokenizer "$W/tok.json" --out "$W/p"
cp "$W/tok.json" "$W/a/tok.json"; cp "$W/tok2.json" "$W/b/tok.json"
expect "prep tokenizer contents" 1 "ranks disagree on tokenizer file contents: rank 0 xxh64" -- \
    -np 1 -wdir "$W/a" "$BIN" "${P[@]}" --tokenizer tok.json --out "$W/p" : \
    -np 1 -wdir "$W/b" "$BIN" "${P[@]}" --tokenizer tok.json --out "$W/p"
[ -e "$W/p" ] && bad "a refused prep created its --out" || ok "no dataset was created"

slm_finish
