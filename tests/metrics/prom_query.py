"""Queries a Prometheus server's HTTP API (GET /api/v1/query) on loopback.

  prom_query.py PORT EXPR [EXPR ...]   prints, per expression, one line per series:
                                       "EXPR<TAB>{labels as JSON}<TAB>value"; exit 1 when the
                                       API answers an error (message on stderr)
Each request is bounded (10 s)."""
import json
import sys
import urllib.parse
import urllib.request

port = int(sys.argv[1])
rc = 0
for e in sys.argv[2:]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": e})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            d = json.load(r)
    except Exception as ex:  # an HTTP 400 carries the PromQL error in its body
        body = getattr(ex, "read", lambda: b"")().decode("utf-8", "replace")
        print(f"query {e!r}: {ex} {body}", file=sys.stderr)
        rc = 1
        continue
    if d.get("status") != "success":
        print(f"query {e!r}: {d}", file=sys.stderr)
        rc = 1
        continue
    res = d["data"]["result"]
    if d["data"]["resultType"] == "scalar":
        res = [{"metric": {}, "value": res}]
    for s in res:
        print(f"{e}\t{json.dumps(s['metric'], sort_keys=True)}\t{s['value'][1]}")
sys.exit(rc)
