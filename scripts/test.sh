#!/usr/bin/env bash
# The whole test suite: style checks (scripts/check_style.sh), release build with -Werror and every CTest test (unit, mpi, e2e,
# PyTorch / SentencePiece parity), an ASan+UBSan build running the unit tests, and every
# libFuzzer target for a bounded time. Usage: scripts/test.sh   (on a fresh Debian 12 machine too:
# it first runs scripts/setup_test.sh, which installs the run-time and test-only Debian packages
# and the oracles' .venv, and enables no service at boot; the tests start their own servers)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== set-up (scripts/setup_test.sh) =="
scripts/setup_test.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
J="$(nproc)"
FUZZ_SECONDS="${SLM_FUZZ_SECONDS:-20}"

# ctest in DIR with ARGS, then every skipped test with its reason and a closing count
# (scripts/ctest_skipped.py; ctest's own summary counts a skip as passed), ctest's status kept.
ctest_in() { # DIR JUNIT_FILE ARGS...
    local dir=$1 junit=$2 rc=0
    shift 2
    (cd "$dir" && ctest --output-junit "$junit" "$@") || rc=$?
    python3 scripts/ctest_skipped.py "$dir/$junit" "$dir" || true
    return "$rc"
}

echo "== style (include layering, no exit/printf in src/, clang-format on every .c / .h) =="
scripts/check_style.sh
scripts/check_commits.sh

echo "== release build (-Werror) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSLM_WERROR=ON >/dev/null
cmake --build build -j"$J"

echo "== sanitizer build (ASan + UBSan), unit tests and the bad-input scripts =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSLM_WERROR=ON -DSLM_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$J"
ctest_in build-asan ctest-unit.xml -L unit -LE slow -j"$J" --output-on-failure
# The bad-input end-to-end scripts (issue 8) drive the C parsers and checks through the CLI:
# run them on the sanitizer build too.
BAD_INPUT='^(test_ckpt_badinput|test_tokenizer_badinput|test_prep_badinput|test_cli_options'
BAD_INPUT+='|test_tokenizer_replaced|test_nonfinite_cli|test_agree_cli|test_collective_timeout_cli'
BAD_INPUT+='|test_train_rundir|test_resume_batch)$' # test_resume_batch: ~14 s under ASan
ctest_in build-asan ctest-bad-input.xml -R "$BAD_INPUT" -j"$J" --output-on-failure

echo "== fuzz targets (libFuzzer, ${FUZZ_SECONDS}s each) =="
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DSLM_FUZZ=ON -DSLM_WERROR=ON >/dev/null
cmake --build build-fuzz -j"$J"
# One target per core at a time: each still runs FUZZ_SECONDS of wall time on a core of its own.
fuzz_one() {
  local f=$1 name corpus work
  name=$(basename "$f")
  corpus="tests/fuzz/corpus/${name#fuzz_}"
  work=$(mktemp -d)
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
  if "$f" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=4096 -print_final_stats=0 "$work" \
      2> "build-fuzz/$name.log"; then
    echo "-- $name: ok"
  else
    echo "-- $name: FAILED"; tail -40 "build-fuzz/$name.log"; rm -rf "$work"; return 1
  fi
  rm -rf "$work"
}
export -f fuzz_one
export FUZZ_SECONDS
targets=()
for f in build-fuzz/tests/fuzz/fuzz_*; do [ -x "$f" ] && targets+=("$f"); done
[ "${#targets[@]}" -gt 0 ] || { echo "no fuzz targets built" >&2; exit 1; }
printf '%s\n' "${targets[@]}" | xargs -P "$J" -I{} bash -c 'fuzz_one "$1"' _ {} ||
  { echo "a fuzz target failed (see above)" >&2; exit 1; }

echo "== all tests (release build) =="
ctest_in build ctest-all.xml -j"$J" --output-on-failure
