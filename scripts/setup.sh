#!/usr/bin/env bash
# Run-time set-up on a fresh Debian 12 machine: installs the Debian packages shardlm needs to
# build and run (compiler, CMake, OpenBLAS, Open MPI, cJSON, PCRE2, xxHash, libcurl, OpenSSL,
# libxml2, libmicrohttpd, python3 for scripts/finetune.sh, the KJV corpus of the quick start)
# and builds build/shardlm. Nothing for the tests (no PyTorch, no services): scripts/test.sh
# installs those itself (scripts/setup_test.sh). scripts/quickstart.sh runs this when a package
# or the binary is missing. Run as root (or with sudo).
#   scripts/setup.sh [--no-build]   install what is missing, then build (unless --no-build)
#   scripts/setup.sh --list         print the run-time package list
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# The run-time package list; tests/scripts/test_setup_split.sh checks that it names none of
# scripts/setup_test.sh's test-only packages.
PKGS=(build-essential cmake pkg-config libopenblas-dev libdnnl-dev libopenmpi-dev openmpi-bin libcjson-dev
      libpcre2-dev libxxhash-dev libcurl4-openssl-dev libssl-dev libxml2-dev libmicrohttpd-dev
      python3 bible-kjv)
if [ "${1:-}" = "--list" ]; then printf '%s\n' "${PKGS[@]}"; exit 0; fi
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
[ "${1:-}" = "--no-build" ] && exit 0
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
echo "shardlm built: build/shardlm"
