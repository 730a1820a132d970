# Shared set-up of the `shardlm launch` fault tests (issue 10, "Fault tests"). Source after
# ../lib.sh. Gives:
#   TR      train arguments of a tiny run (data, model, batch 2 x 16, checkpoints every 2 steps)
#   LA      launch options every test uses (small health-check memory, short grace and backoff)
#   slm_ref N STEPS DIR [args]   an uninterrupted run under mpirun -np N (the reference)
#   same_weights NAME RUN REF STEP   every file of both runs' step_STEP checkpoints byte-equal
#   aj FILE EXPR    a Python expression over attempts.json (`a`), printed (json module: an
#                   independent reader of what the launcher wrote)
#   no_orphans NAME  no process of the test's runs is left (command line naming $W)
#   hb_pid RUN R    the pid in RUN/heartbeat/rank_R.json (empty when none)
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 > "$W/setup.log" 2>&1 || { cat "$W/setup.log"; exit 1; }
slm_tiny_config "$W/config.json" vocab_size=300
TR=(--data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --threads 1 --peak-gflops 10
    --collective-timeout 60 --ckpt-every-steps 2 --log-every 0)
LA=(--health-mem 8MiB --kill-grace 3 --backoff 0.2 --mpirun "$MPIEXEC")
slm_ref() { # slm_ref N STEPS DIR [train args...]
    local n=$1 steps=$2 dir=$3
    shift 3
    slm_mpirun "$n" "$BIN" train "${TR[@]}" --steps "$steps" --out "$dir" "$@" > "$dir.log" 2>&1 ||
        { echo "reference run failed:"; cat "$dir.log"; exit 1; }
}
same_weights() { # same_weights NAME RUN REF STEP
    local s a b f n=0 diff=0
    s=$(printf 'step_%08d' "$4")
    a=$2/checkpoints/$s b=$3/checkpoints/$s
    for f in "$b"/*; do
        n=$((n + 1))
        cmp -s "$f" "$a/$(basename "$f")" || { diff=1; echo "differs: $a/$(basename "$f")"; }
    done
    if [ "$n" -gt 0 ] && [ "$diff" = 0 ]; then ok "$1 ($n files of $s byte-equal)"; else bad "$1"; fi
}
aj() { "$PY" -c 'import json,sys; a=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
no_orphans() {
    local left
    left=$(ps -eo pid=,stat=,args= | grep -F -- "$W" | grep -v -e grep -e "ps -eo" || true)
    if [ -z "$left" ]; then ok "$1"; else bad "$1: left behind:"; echo "$left"; fi
}
hb_pid() { sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$1/heartbeat/rank_$(printf %05d "$2").json" 2>/dev/null; }
