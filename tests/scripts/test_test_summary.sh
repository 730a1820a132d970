#!/usr/bin/env bash
# scripts/test.sh's reporting (issue 20, item 20):
#   - scripts/ctest_skipped.py lists each skipped test of a CTest run with its reason (the
#     test's "SKIP: ..." line, else ctest's message) and ends with "N passed, N failed,
#     N skipped" not counting a skip as passed: checked on a small CTest project made here
#     (one pass, one exit-77 skip, one failure);
#   - scripts/test.sh runs every ctest through it, and builds the fuzz targets with -Werror;
#   - the two files the clang fuzz build warned about compile warning-free under clang with the
#     project's warning flags and -Werror (skipped part, named, when clang is missing).
. "$(dirname "$0")/../lib.sh"
P="$W/proj"
mkdir -p "$P"
cat > "$P/CMakeLists.txt" << 'CM'
cmake_minimum_required(VERSION 3.20)
project(t NONE)
enable_testing()
add_test(NAME t_ok COMMAND sh -c "echo fine")
add_test(NAME t_skip COMMAND sh -c "echo 'some log'; echo 'SKIP: needs the frobnicator <2.0 & co'; exit 77")
set_tests_properties(t_skip PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME t_fail COMMAND sh -c "exit 1")
CM
cmake -S "$P" -B "$P/b" > /dev/null
set +e # t_fail fails on purpose
(cd "$P/b" && ctest --output-junit j.xml > ctest.out 2>&1)
set -e
out=$(python3 "$SRC/scripts/ctest_skipped.py" "$P/b/j.xml" 2>&1 || true)
echo "$out"
grep -qx '  SKIPPED t_skip: needs the frobnicator <2.0 & co' <<< "$out" &&
    ok "skipped test listed with its reason" || bad "skip and reason not listed"
grep -qx 'ctest: 1 passed, 1 failed, 1 skipped' <<< "$out" && ok "closing count" ||
    bad "closing count (want 1 passed, 1 failed, 1 skipped)"
grep -q 't_ok\|t_fail' <<< "$(grep SKIPPED <<< "$out")" && bad "a run test listed as skipped" ||
    ok "only the skipped test listed"

# scripts/test.sh: no ctest call outside ctest_in, fuzz build with -Werror
T="$SRC/scripts/test.sh"
n=$(grep -Ec '^[^#]*\bctest (-|--)' "$T" || true)
[ "$n" = 1 ] && grep -q 'ctest_skipped.py' "$T" && ok "test.sh: every ctest via ctest_in" ||
    bad "test.sh: $n direct ctest calls or no ctest_skipped.py"
grep -q 'SLM_FUZZ=ON.*SLM_WERROR=ON' "$T" && ok "test.sh: fuzz build with -Werror" ||
    bad "test.sh: fuzz build without -DSLM_WERROR=ON"

if command -v clang > /dev/null; then
    for f in tests/fuzz/fuzz_delayswitch.c tests/ckpt/ckpt_bench.c; do
        if clang -fsyntax-only -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wstrict-prototypes \
            -Wmissing-prototypes -Wvla -Werror -I"$SRC/src" -I"$SRC/tests" \
            $(pkg-config --cflags libcjson) "$SRC/$f" 2> "$W/clang.err"; then
            ok "clang -Werror: $f"
        else
            bad "clang -Werror: $f: $(head -3 "$W/clang.err")"
        fi
    done
else
    echo "note: clang missing (scripts/setup_test.sh installs it): fuzz sources not compiled"
fi
slm_finish
