#!/usr/bin/env bash
# deploy/prometheus/shardlm.rules.yml: promtool check rules (syntax, PromQL) and promtool test
# rules on the synthetic series of rules_test.yml (each alert firing and silent as expected).
. "$(dirname "$0")/../lib.sh"
set +e # promtool's statuses are the results
promtool check rules "$SRC/deploy/prometheus/shardlm.rules.yml"
check "promtool check rules" 0 $?
# promtool resolves rule_files relative to the test file: run it from the source tree
(cd "$SRC/tests/metrics" && promtool test rules rules_test.yml)
check "promtool test rules (synthetic series)" 0 $?
set -e
slm_finish
