# Environment of the S3 benchmarks (bench/bench_s3.sh, bench/bench_s3_netns.sh), sourced from the
# repository root after option parsing with BUILD set (the build folder, relative to the root):
# exports what tests/lib.sh and tests/objstore/lib.sh read (SHARDLM_BIN, SLM_SHARED_DIR,
# SLM_PYTHON, S3TOOL), builds s3_tool and shardlm when s3_tool is missing, then sources
# tests/lib.sh (set -euo pipefail, BIN, PY, W removed at exit, slm_mpirun, ...).
export SHARDLM_BIN="$PWD/$BUILD/shardlm" SLM_SHARED_DIR="${SLM_SHARED_DIR:-$PWD/../shared}"
export SLM_PYTHON="${SLM_PYTHON:-$PWD/.venv/bin/python}" S3TOOL="$PWD/$BUILD/tests/objstore/s3_tool"
[ -x "$S3TOOL" ] || cmake --build "$BUILD" --target s3_tool shardlm > /dev/null
. tests/lib.sh
