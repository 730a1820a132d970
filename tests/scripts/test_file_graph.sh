#!/usr/bin/env bash
# scripts/file_graph.py and check (d) of scripts/check_style.sh (issue 24 item 4): on a small
# tree made here, with the edges known by construction,
#   - a cycle through three files of module m is found, with a closed path and its symbols, from
#     the sources and (when cc and nm are there) from the object files alike;
#   - module n has no cycle although y.c calls a static function of its own named like one of
#     x.c's, and names x.c's function only in a comment and a string;
#   - the exit status: 1 with the cycle, 0 when m is in the allow list, which then marks the
#     cycle as allowed; an allow-list entry for a module without a cycle is reported as stale;
#   - the repository itself passes check (d) with scripts/cycle_allow.txt.
. "$(dirname "$0")/../lib.sh"
T="$W/tree"
mkdir -p "$T/src/m" "$T/src/n"
cat > "$T/src/m/a.c" << 'C'
int slm_b(void);
int slm_a(void) { return slm_b() + 1; }
C
cat > "$T/src/m/b.c" << 'C'
extern int slm_c_count;
int slm_b(void) { return slm_c_count; }
C
cat > "$T/src/m/c.c" << 'C'
int slm_a(void);
#define CALL_A() slm_a()
int slm_c_count = 3;
static int twice(void) { return 2 * CALL_A(); }
int slm_c(void) { return twice(); }
C
cat > "$T/src/n/x.c" << 'C'
int slm_y(void);
int helper(void) { return slm_y(); }
C
cat > "$T/src/n/y.c" << 'C'
static int helper(void) { return 1; } /* not x.c's helper() */
const char *slm_y_name = "helper()";
int slm_y(void) { return helper(); }
C
FG=(python3 "$SRC/scripts/file_graph.py" --root "$T")
want='cycle in m: a.c -> b.c (slm_b) -> c.c (slm_c_count) -> a.c (slm_a)'
set +e
out=$("${FG[@]}" 2>&1)
rc=$?
set -e
echo "$out"
[ "$out" = "$want" ] && [ $rc = 1 ] && ok "sources: the cycle of m, exit 1; none in n" ||
    bad "sources: expected exactly '$want' and exit 1 (got exit $rc)"
edges=$("${FG[@]}" --edges n | grep '^edge' || true)
[ "$edges" = "edge n: x.c -> y.c (slm_y)" ] && [ "$(grep -c . <<< "$edges")" = 1 ] &&
    ok "static of the same name, comment and string: no edge" || bad "n's edges: $edges"
if command -v cc > /dev/null && command -v nm > /dev/null; then
    for f in m/a m/b m/c n/x n/y; do
        mkdir -p "$W/b/CMakeFiles/slm_${f%%/*}.dir/src/${f%%/*}"
        cc -c "$T/src/$f.c" -o "$W/b/CMakeFiles/slm_${f%%/*}.dir/src/$f.c.o"
    done
    out=$("${FG[@]}" --nm "$W/b" 2>&1 || true)
    [ "$out" = "$want" ] && ok "nm: the same cycle" || bad "nm: got '$out'"
    cmp=$("${FG[@]}" --compare "$W/b" 2>&1 | grep '^differ' || true)
    [ -z "$cmp" ] && ok "sources and nm agree on every edge" || bad "differ: $cmp"
else
    echo "SKIP part: cc or nm missing (the nm mode is not checked)"
fi
printf '# test\nm | made here on purpose\nn | no cycle here\n' > "$W/allow.txt"
set +e
out=$("${FG[@]}" --allow "$W/allow.txt" 2>&1)
rc=$?
set -e
echo "$out"
grep -qxF "$want  (allowed: made here on purpose)" <<< "$out" && [ $rc = 0 ] &&
    ok "allowed module: reported, exit 0" || bad "allow list not honoured (exit $rc)"
grep -qF "stale entry in $W/allow.txt: module n has no cycle" <<< "$out" &&
    ok "stale allow-list entry reported" || bad "stale entry not reported"
(cd "$SRC" && python3 scripts/file_graph.py --allow scripts/cycle_allow.txt > /dev/null) &&
    ok "this repository: no cycle outside scripts/cycle_allow.txt" || bad "a file cycle in src/"
slm_finish
