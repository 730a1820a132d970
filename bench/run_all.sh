#!/usr/bin/env bash
# Every benchmark in one run, each printed side by side with its reference (PyTorch,
# SentencePiece, dd, the single-process run) as ratios; PyTorch 2.x comes from
# bench/setup_torch.sh. Not a test: run it on an idle machine.
#
#   bench/run_all.sh [BUILD_DIR]     (default build; builds the bench targets first)
#
# Writes the combined output to bench/out/all.txt. Roughly 25 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "${SLM_TORCH_PYTHON:-bench/.venv-torch/bin/python}" ] || {
    echo "PyTorch 2.x reference missing: run bench/setup_torch.sh first (PyPI, ~5.4 GB)" >&2; exit 2; }
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD" -j"$(nproc)" > /dev/null
mkdir -p bench/out
{
  echo "== tokenizer (vs spm_train / spm_encode)";  bench/bench_tokenizer.sh "$BUILD/shardlm"
  echo; echo "== data (prep vs spm_encode; loader)";  bench/bench_data.sh "$BUILD"
  echo; echo "== training step (vs PyTorch 2.x)";     SHARDLM="$BUILD/shardlm" bench/bench_train.sh
  echo; echo "== FSDP (memory per rank; 2x1 vs 1x2)";  bench/bench_fsdp.sh --build "$BUILD"
  echo; echo "== checkpoints (vs dd)";                bench/bench_ckpt.sh --build "$BUILD"
  echo; echo "== launch: fault detection and recovery"; bench/bench_launch.sh --build "$BUILD"
} 2>&1 | tee bench/out/all.txt
