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
#                                     and CUDA, sm_80 + sm_90) + device/ and tests/gpu with
#                                     -DSLM_KERNELS_ONLY=ON, runs them, prints a table last.
# Logs go to $OUT (the device tool's output folder) when set, else to build-gpu/.
# What it checks today (issue 22 item 1): every CUDA kernel against the CPU kernel (bf16 GEMM
# against the CPU's bf16 path) on random inputs with derived bounds, outputs poisoned, and
# repeatability; the CUDA device of device.h (device/cuda.c: memory, copies, every op through
# the backend table) against the CPU device (tests/gpu/test_cuda_device.c); eight training steps
# of a small Llama on the GPU (model, FSDP world of one, AdamW) against the CPU's bf16 run, twice
# bitwise, and the training state moved across devices mid-run (tests/gpu/test_gpu_train.c,
# items 2 and 3); and the device collectives of dist/ (tests/gpu/test_nccl.c under mpirun -np 2,
# with Debian's Open MPI carried in .gpu/debs, about 8 MB more, unpacked under /tmp/slm-deps and
# run relocated through OPAL_PREFIX): the host-staged path with two ranks sharing GPU 0, NCCL's
# refusal of that, and with two GPUs NCCL itself and its timeout abort. Not yet: two ranks of
# FSDP on the GPU (fsdp/ does not call dist's device communicators yet), the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libdnnl-dev
      libdnnl2 libcjson-dev libcjson1 libxxhash-dev libxxhash0 libgfortran5 libquadmath0
      pkgconf pkgconf-bin libpkgconf3
      libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15 libevent-2.1-7
      libevent-pthreads-2.1-7 libevent-core-2.1-7 libfabric1 libucx0 libpsm2-2
      libpsm-infinipath1 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libnuma1)

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
MPIL="$D/usr/lib/$ARCH/openmpi/lib"
export LD_LIBRARY_PATH="$OB:$D/usr/lib/$ARCH:$MPIL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Open MPI relocated: its prefix, plugins and help files under $D; shared memory and TCP only.
export OPAL_PREFIX="$D/usr" OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ARGS=()
if [ -f "$MPIL/libmpi.so" ]; then
    MPI_ARGS=(-DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_C_HEADER_DIR="$D/usr/lib/$ARCH/openmpi/include"
              -DMPI_C_LIB_NAMES=mpi -DMPI_mpi_LIBRARY="$MPIL/libmpi.so")
fi
# NCCL: the CUDA toolkit's, else a wheel's (nvidia-nccl-*) under this python.
if [ ! -f /usr/local/cuda/include/nccl.h ] && [ -z "${NCCL_HOME:-}" ]; then
    NCCL_HOME=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' \
                2>/dev/null || true)
    [ -n "$NCCL_HOME" ] && export NCCL_HOME && export LD_LIBRARY_PATH="$NCCL_HOME/lib:$LD_LIBRARY_PATH"
fi
PC=$(command -v pkg-config || true)
[ -n "$PC" ] || PC="$D/usr/bin/pkgconf"
nvcc_v=$(nvcc --version 2>/dev/null | tail -1 || echo "no nvcc")
row "GPU" "$(head -1 "$LOG/gpu.txt")"
row "nvcc" "$nvcc_v"

if cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSLM_KERNELS_ONLY=ON -DSLM_CUDA=ON \
        -DSLM_WERROR=ON -DPKG_CONFIG_EXECUTABLE="$PC" -DCMAKE_PREFIX_PATH="$D/usr" "${MPI_ARGS[@]}" \
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
# The CUDA device of device.h (memory, copies, every op's dispatch) against the CPU device.
d_rc=0
./build-gpu/tests/gpu/test_cuda_device > "$LOG/test_cuda_device.log" 2>&1 || d_rc=$?
case $d_rc in
0) row "CUDA device vs CPU device (device.h)" "ok" ;;
77) row "CUDA device vs CPU device (device.h)" "SKIPPED: $(grep -m1 SKIP "$LOG/test_cuda_device.log")" ;;
*) row "CUDA device vs CPU device (device.h)" "FAILED (exit $d_rc)"; rc=1 ;;
esac
grep -E '^\[(ok|FAIL)|FAIL|outside|bitwise' "$LOG/test_cuda_device.log" | head -40 || true

# Training on the GPU: losses against the CPU's bf16 run, bitwise repeatability, the training
# state moved GPU -> CPU and CPU -> GPU mid-run (needs fsdp/, built when MPI is carried).
if [ -x build-gpu/tests/gpu/test_gpu_train ]; then
    t_rc=0
    timeout 300 ./build-gpu/tests/gpu/test_gpu_train > "$LOG/test_gpu_train.log" 2>&1 || t_rc=$?
    case $t_rc in
    0) row "training: GPU vs CPU bf16, repeat, cross-device" "ok" ;;
    77) row "training: GPU vs CPU bf16, repeat, cross-device" "SKIPPED: $(grep -m1 SKIP "$LOG/test_gpu_train.log")" ;;
    *) row "training: GPU vs CPU bf16, repeat, cross-device" "FAILED (exit $t_rc)"; rc=1 ;;
    esac
    grep -vE '^shardlm info' "$LOG/test_gpu_train.log" | head -40 || true
else
    row "training: GPU vs CPU bf16, repeat, cross-device" "NOT BUILT (no MPI: see configure.log)"
fi

# dist/'s device collectives: 2 ranks (sharing GPU 0 when there is one GPU: host-staged).
if [ -x build-gpu/tests/gpu/test_nccl ]; then
    n_rc=0
    timeout 240 "$D/usr/bin/orterun" -np 2 --oversubscribe build-gpu/tests/gpu/test_nccl \
        > "$LOG/test_nccl.log" 2>&1 || n_rc=$?
    case $n_rc in
    0) row "collectives (staged; NCCL if 2 GPUs)" "ok: $(grep -m1 'AUTO chose' "$LOG/test_nccl.log")" ;;
    77) row "collectives (staged; NCCL if 2 GPUs)" "SKIPPED: $(grep -m1 skip "$LOG/test_nccl.log")" ;;
    *) row "collectives (staged; NCCL if 2 GPUs)" "FAILED (exit $n_rc)"; rc=1 ;;
    esac
    grep -E '^\[(ok|FAIL)|FAIL|differs' "$LOG/test_nccl.log" | head -20 || true
else
    row "collectives (staged; NCCL if 2 GPUs)" "NOT BUILT (no MPI: see configure.log)"
fi
echo "== table ($(($(date +%s) - t0)) s)"
cat "$LOG/table.txt"
[ $rc -eq 0 ]
