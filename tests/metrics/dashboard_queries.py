"""Extracts every panel query of a Grafana dashboard JSON (deploy/grafana/shardlm.json).

  dashboard_queries.py DASHBOARD rules OUT.yml   a Prometheus rules file with one recording rule
                                                 per query, for `promtool check rules`
  dashboard_queries.py DASHBOARD list            one query per line, "PANEL_TITLE<TAB>EXPR"

Grafana substitutes the dashboard's variables before it sends a query; the test does what
Grafana does for "All" of $job (its allValue, .*) and for $__rate_interval (at least 4 x the
scrape interval: 1m here). Any other $variable left in an expression is an error."""
import json
import re
import sys

SUBST = {"$__rate_interval": "1m", "$job": ".*"}


def queries(path):
    d = json.load(open(path, encoding="utf-8"))
    out = []
    for p in d["panels"]:
        for t in p.get("targets", []):
            e = t["expr"]
            for k, v in SUBST.items():
                e = e.replace(k, v)
            if re.search(r"\$\w", e):
                sys.exit(f"{path}: panel {p['title']!r} target {t['refId']}: unknown variable in {e!r}")
            out.append((p["title"], t["refId"], e))
    if not out:
        sys.exit(f"{path}: no panel queries")
    return out


def main():
    qs = queries(sys.argv[1])
    if sys.argv[2] == "rules":
        with open(sys.argv[3], "w", encoding="utf-8") as f:
            f.write("groups:\n  - name: shardlm_dashboard\n    rules:\n")
            for i, (title, ref, e) in enumerate(qs):
                f.write(f"      - record: shardlm_dashboard:panel_{i}_{ref}\n")
                f.write(f"        expr: {json.dumps(e)}\n")
    else:
        for title, ref, e in qs:
            print(f"{title}\t{e}")


main()
