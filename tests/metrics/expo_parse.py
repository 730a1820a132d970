"""Parses test_metrics --dump with prometheus_client's text parser (an independent reader of the
exposition format) and checks every family, type, HELP text, label set and value against the
fixture as written by hand in dump_fixture() (tests/metrics/test_metrics.c)."""
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

text = open(sys.argv[1], encoding="utf-8").read()
fams = {f.name: f for f in text_string_to_metric_families(text)}
fail = 0


def expect(cond, what):
    global fail
    print(("[ ok ] " if cond else "[FAIL] ") + what)
    fail += not cond


# prometheus_client strips _total from a counter family's name; its sample keeps it.
expect(set(fams) == {"fx_bytes", "fx_loss", "fx_step_seconds"}, f"families {sorted(fams)}")
c = fams["fx_bytes"]
expect(c.type == "counter" and c.documentation == "Bytes sent, in bytes.", "counter type, help")
expect([(s.name, s.labels, s.value) for s in c.samples] == [("fx_bytes_total", {}, 1234567.0)],
       f"counter samples {c.samples}")
g = fams["fx_loss"]
expect(g.type == "gauge" and g.documentation == "Loss \\ with\nnewline", f"gauge help {g.documentation!r}")
got = {(s.labels["rank"], s.labels["note"]): s.value for s in g.samples}
expect(got == {("0", 'quote " back \\ nl \n end'): 0.1, ("1", "plain"): -1e-9}, f"gauge samples {got}")
h = fams["fx_step_seconds"]
expect(h.type == "histogram" and h.documentation == "Step time.", "histogram type, help")
buckets = [(s.labels["le"], s.value) for s in h.samples if s.name.endswith("_bucket")]
obs = [0.0005, 0.005, 0.05, 0.5, 5, 0.01]
bounds = [0.001, 0.01, 0.1, 1, math.inf]
want = [sum(1 for o in obs if o <= b) for b in bounds]  # cumulative, le inclusive
expect([float(le) for le, _ in buckets] == bounds and [v for _, v in buckets] == want,
       f"buckets {buckets} want {want}")
by = {s.name: s.value for s in h.samples if not s.name.endswith("_bucket")}
expect(by.get("fx_step_seconds_count") == len(obs), f"count {by}")
expect(math.isclose(by.get("fx_step_seconds_sum", -1), sum(obs), rel_tol=1e-12), f"sum {by}")
expect(all(s.labels.get("rank") == "0" for s in h.samples), "histogram rank label on every sample")
sys.exit(1 if fail else 0)
