#!/usr/bin/env bash
# Commit-message habits (docs/style.md, issue 24 item 9), for every commit after the one that
# introduced this check (RULE_BASE), merges included:
#   - the subject is at most 72 characters;
#   - a non-merge commit's subject starts with an area prefix, `area: ` (a module, folder or
#     file, e.g. `ckpt: `, `README: `; `a/b: ` and `a, b: ` for two areas), then a blank line
#     and a body that says why and what was measured.
# Earlier history is left as it is. A clone without RULE_BASE (shallow) is not checked (said so).
# Usage: scripts/check_commits.sh [REV]   (default HEAD). Exit 1 listing every offending commit.
set -euo pipefail
cd "$(dirname "$0")/.."
RULE_BASE=03cb71dbe6a3b01c7d3d080b5395635c18736d2a
REV=${1:-HEAD}
if ! git cat-file -e "$RULE_BASE^{commit}" 2> /dev/null; then
    echo "check_commits: $RULE_BASE not in this clone (shallow?); not checked"
    exit 0
fi
bad=0
while read -r c; do
    subj=$(git log -1 --format=%s "$c")
    parents=$(git log -1 --format=%p "$c" | wc -w)
    why=()
    [ ${#subj} -le 72 ] || why+=("subject is ${#subj} characters (at most 72)")
    if [ "$parents" -lt 2 ]; then
        [[ $subj =~ ^[A-Za-z0-9][A-Za-z0-9_./+-]*(,\ [A-Za-z0-9][A-Za-z0-9_./+-]*)*:\ [^\ ] ]] ||
            why+=("no area prefix ('area: ...')")
        line2=$(git log -1 --format=%B "$c" | sed -n 2p)
        body=$(git log -1 --format=%b "$c" | grep -c '[^[:space:]]' || true)
        [ -z "$line2" ] || why+=("no blank line after the subject")
        [ "$body" -gt 0 ] || why+=("no body (why, and what was measured)")
    fi
    if [ ${#why[@]} -gt 0 ]; then
        bad=$((bad + 1))
        echo "check_commits: ${c:0:10} \"$subj\": $(IFS=';'; echo "${why[*]}")" >&2
    fi
done < <(git rev-list "$RULE_BASE..$REV")
[ $bad -eq 0 ] && echo "check_commits: ok ($(git rev-list --count "$RULE_BASE..$REV") commits since ${RULE_BASE:0:10})"
[ $bad -eq 0 ]
