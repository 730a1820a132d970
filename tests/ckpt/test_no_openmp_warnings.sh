#!/usr/bin/env bash
# Every source file with an OpenMP pragma compiles without warnings when OpenMP is off (no
# -fopenmp: the pragmas are ignored, so a variable read only by a clause, such as an `if (...)`
# clause's flag, must not be left unused). The build's warning flags plus
# -Werror, syntax only, with the configured C compiler and with clang when it is installed (the
# fuzz build's compiler). gcc's -Wunknown-pragmas (every ignored pragma) is turned off.
# Usage: test_no_openmp_warnings.sh CC INCLUDE_DIRS (':'-separated). Env (CTest): SLM_SOURCE_DIR.
. "$(dirname "$0")/../lib.sh"
CC_CONF=$1
IFS=: read -r -a DIRS <<< "$2"
INC=()
for d in "${DIRS[@]}"; do [ -n "$d" ] && INC+=(-isystem "$d"); done
FLAGS=(-std=c11 -D_GNU_SOURCE -I"$SRC/src" "${INC[@]}" -Wall -Wextra -Wshadow -Wstrict-prototypes
       -Wmissing-prototypes -Wvla -Wno-unknown-pragmas -Werror -fsyntax-only)
mapfile -t FILES < <(cd "$SRC" && grep -rl '#pragma omp' src --include='*.c' | sort)
[ "${#FILES[@]}" -gt 0 ] && ok "${#FILES[@]} source files hold OpenMP pragmas" || bad "no file with an OpenMP pragma found"
CCS=("$CC_CONF")
CLANG=$(command -v clang || true)
[ -n "$CLANG" ] && [ "$(readlink -f "$CLANG")" != "$(readlink -f "$(command -v "$CC_CONF")")" ] && CCS+=("$CLANG")
for cc in "${CCS[@]}"; do
    for f in "${FILES[@]}"; do
        if "$cc" "${FLAGS[@]}" "$SRC/$f" > "$W/out" 2>&1; then
            ok "$(basename "$cc") without OpenMP: $f"
        else
            bad "$(basename "$cc") without OpenMP: $f"
            cat "$W/out"
        fi
    done
done
slm_finish
