#!/usr/bin/env bash
# The exposition writer's output (test_metrics --dump) read by two independent parsers:
# prometheus_client's text parser (expo_parse.py: families, types, HELP, labels with escapes,
# values, cumulative buckets) and promtool check metrics (exit 0; 3 = lint problems).
# Usage: test_metrics_expo.sh TEST_METRICS_BINARY
. "$(dirname "$0")/../lib.sh"
DUMP=$1
slm_need "python module prometheus_client (scripts/setup_test.sh)" "$PY" -c 'import prometheus_client'
slm_need "promtool (scripts/setup_test.sh installs prometheus)" command -v promtool
"$DUMP" --dump > "$W/fx.prom"
check "dump written" 0 $?
"$PY" "$(dirname "$0")/expo_parse.py" "$W/fx.prom"
check "prometheus_client parses the exposition to the expected values" 0 $?
set +e # promtool's status is the result
promtool check metrics < "$W/fx.prom" > "$W/lint.txt" 2>&1
rc=$?
set -e
cat "$W/lint.txt"
check "promtool check metrics exits 0" 0 $rc
slm_finish
