#!/usr/bin/env bash
# Installs PyTorch 2.x from PyPI into bench/.venv-torch (gitignored), the reference the training
# benchmarks (bench/bench_train.sh, bench/bench_fsdp.sh) compare shardlm with. Not used by tests.
#
#   bench/setup_torch.sh [--no-deps] [--python PY] [--torch SPEC] [--peft]
#
# Default: `pip install torch numpy` (the Linux wheel also pulls the CUDA runtime wheels, about
# 3 GB more, unused on CPU). --no-deps installs the torch wheel alone plus the pure-Python
# packages a CPU `import torch`, torch.compile (inductor's C++ backend) and torch.distributed
# over gloo need (filelock, typing-extensions, sympy, networkx, jinja2, fsspec, setuptools);
# triton and the nvidia-* / cuda-* wheels are left out (GPU only). The venv is isolated from the
# system site-packages so Debian's torch 1.13 cannot shadow it. Prints the torch version, the
# install time and the venv size. Re-running reuses an existing venv. --peft also installs peft
# 0.14.0 with transformers 4.49.0 and accelerate 0.34.2 (what the tests pin) and the pure-Python
# packages they import, all --no-deps so the venv's torch stays (bench/bench_lora.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
NODEPS=0 PY=python3 SPEC="torch>=2" PEFT=0
while [ $# -gt 0 ]; do
    case "$1" in
        --no-deps) NODEPS=1; shift ;;
        --python) PY="$2"; shift 2 ;;
        --torch) SPEC="$2"; shift 2 ;;
        --peft) PEFT=1; shift ;;
        *) echo "usage: $0 [--no-deps] [--python PY] [--torch SPEC] [--peft]" >&2; exit 2 ;;
    esac
done
V=bench/.venv-torch
t0=$(date +%s)
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
"$V/bin/python" -m pip install -q --upgrade pip
if [ "$NODEPS" = 1 ]; then
    "$V/bin/python" -m pip install -q --no-deps "$SPEC"
    "$V/bin/python" -m pip install -q numpy filelock "typing-extensions>=4.13" "sympy>=1.13.3" \
        "networkx>=2.5.1" jinja2 "fsspec>=0.8.5" "setuptools>=77.0.3"
else
    "$V/bin/python" -m pip install -q "$SPEC" numpy
fi
if [ "$PEFT" = 1 ]; then
    "$V/bin/python" -m pip install -q --no-deps "peft==0.14.0" "transformers==4.49.0" \
        "accelerate==0.34.2" "tokenizers==0.21.1" "huggingface_hub==0.36.2" safetensors regex \
        pyyaml packaging tqdm requests psutil certifi idna urllib3 charset-normalizer
fi
t1=$(date +%s)
"$V/bin/python" - <<'PY'
import torch, torch.distributed as dist
print(f"torch {torch.__version__} (file {torch.__file__})")
print(f"  cpu capability {torch.backends.cpu.get_cpu_capability()}, mkl {torch.backends.mkl.is_available()},"
      f" mkldnn {torch.backends.mkldnn.is_available()}, gloo {dist.is_gloo_available()}")
PY
echo "install time $((t1 - t0)) s, venv size $(du -sh "$V" | cut -f1)"
