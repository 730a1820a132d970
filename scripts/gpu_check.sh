#!/usr/bin/env bash
# The GPU check of issue 22, one prepared call on a lent GPU machine (DEVELOPERS.md "GPUs": about
# 15 minutes of device time in all, one command at most 10 minutes, nothing can be fetched there,
# and its image has CUDA, CMake and PyTorch but none of Debian's -dev packages).
#
#   scripts/gpu_check.sh --gather     here (Debian 12, network to Debian's archive): downloads
#                                     the Debian packages the build needs into .gpu/debs (about
#                                     20 MB; .gpu/ is git-ignored) and builds nothing.
#   scripts/gpu_check.sh              there, from the repository root, with .gpu carried
#                                     (device tool: carry [".gpu"]): unpacks the packages under
#                                     /tmp/slm-deps (never over /), builds base/ + kernels/ (CPU
#                                     and CUDA, sm_80 + sm_90) and tests/gpu with
#                                     -DSLM_KERNELS_ONLY=ON, runs them, prints a table last.
# Logs go to $OUT (the device tool's output folder) when set, else to build-gpu/.
# What it checks today (issue 22 item 1): every CUDA kernel against the CPU kernel (bf16 GEMM
# against the CPU's bf16 path) on random inputs with derived bounds, outputs poisoned, and
# repeatability. Not yet: training steps, checkpoints across devices, NCCL, the benchmark (they
# need the device layer of issue 21).
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libdnnl-dev
      libdnnl2 libcjson-dev libcjson1 libxxhash-dev libxxhash0 libgfortran5 libquadmath0
      pkgconf pkgconf-bin libpkgconf3)

if [ "${1:-}" = "--gather" ]; then
    mkdir -p .gpu/debs
    rm -f .gpu/debs/*.deb
    (cd .gpu/debs && apt-get download "${PKGS[@]}")
    echo "gpu_check: $(ls .gpu/debs | wc -l) packages, $(du -sh .gpu | cut -f1) in .gpu/ (carry it)"
    exit 0
fi

LOG=${OUT:-build-gpu}
mkdir -p "$LOG"
t0=$(date +%s)
row() { printf '%-34s %s\n' "$1" "$2" | tee -a "$LOG/table.txt"; }
: > "$LOG/table.txt"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader > "$LOG/gpu.txt" 2>&1 || echo "no nvidia-smi" > "$LOG/gpu.txt"

D=/tmp/slm-deps
[ -d .gpu/debs ] || { echo "gpu_check: no .gpu/debs (run --gather first and carry .gpu)" >&2; exit 1; }
rm -rf "$D" && mkdir -p "$D"
for f in .gpu/debs/*.deb; do dpkg -x "$f" "$D"; done
ARCH=x86_64-linux-gnu
OB="$D/usr/lib/$ARCH/openblas-pthread"
export PKG_CONFIG_SYSROOT_DIR="$D"
export PKG_CONFIG_LIBDIR="$OB/pkgconfig:$D/usr/lib/$ARCH/pkgconfig:$D/usr/share/pkgconfig"
export LD_LIBRARY_PATH="$OB:$D/usr/lib/$ARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PC=$(command -v pkg-config || true)
[ -n "$PC" ] || PC="$D/usr/bin/pkgconf"
nvcc_v=$(nvcc --version 2>/dev/null | tail -1 || echo "no nvcc")
row "GPU" "$(head -1 "$LOG/gpu.txt")"
row "nvcc" "$nvcc_v"

if cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSLM_KERNELS_ONLY=ON -DSLM_CUDA=ON \
        -DSLM_WERROR=ON -DPKG_CONFIG_EXECUTABLE="$PC" -DCMAKE_PREFIX_PATH="$D/usr" \
        > "$LOG/configure.log" 2>&1 &&
    cmake --build build-gpu -j"$(nproc)" > "$LOG/build.log" 2>&1; then
    row "build (kernels, CUDA, -Werror)" "ok ($(($(date +%s) - t0)) s)"
else
    row "build (kernels, CUDA, -Werror)" "FAILED (see configure.log / build.log)"
    tail -30 "$LOG/configure.log" "$LOG/build.log"
    exit 1
fi

rc=0
./build-gpu/tests/gpu/test_cuda_kernels > "$LOG/test_cuda_kernels.log" 2>&1 || rc=$?
case $rc in
0) row "CUDA kernels vs CPU kernels" "ok" ;;
77) row "CUDA kernels vs CPU kernels" "SKIPPED: no CUDA device" ;;
*) row "CUDA kernels vs CPU kernels" "FAILED (exit $rc)" ;;
esac
grep -E '^\[(ok|FAIL)|FAIL|outside|not repeatable' "$LOG/test_cuda_kernels.log" | head -40 || true
echo "== table ($(($(date +%s) - t0)) s)"
cat "$LOG/table.txt"
[ $rc -eq 0 ]
