#!/usr/bin/env python3
"""Lists the tests a CTest run skipped, each with its reason, from the run's JUnit file
(`ctest --output-junit FILE`): ctest's own summary counts a skip as passed ("100% tests
passed") and shows why only under -V. Used by scripts/test.sh after each ctest run.

The reason is the test's last output line that starts with "SKIP" (the convention of this
repository's tests, which exit 77 naming what is missing), else its last output line, else
ctest's own message (e.g. "Required Files Missing").

Ends with the plain closing line `ctest: N passed, N failed, N skipped` (skips not in "passed").
Usage: ctest_skipped.py JUNIT.xml [LABEL]   (exit 0; 2 when the file cannot be read)
"""
import sys
import xml.etree.ElementTree as ET


def reason(case):
    out = (case.findtext("system-out") or "").splitlines()
    lines = [l.strip() for l in out if l.strip()]
    for l in reversed(lines):
        if l.upper().startswith("SKIP"):
            return l.split(":", 1)[1].strip() if ":" in l[:6] else l
    sk = case.find("skipped")
    msg = sk.get("message", "") if sk is not None else ""
    if lines:
        return f"{lines[-1]} ({msg})" if msg else lines[-1]
    return msg or "no reason printed"


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    label = f" ({sys.argv[2]})" if len(sys.argv) == 3 else ""
    try:
        root = ET.parse(sys.argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"ctest_skipped: {sys.argv[1]}: {e}", file=sys.stderr)
        return 2
    cases = list(root.iter("testcase"))
    failed = [c for c in cases if c.get("status") == "fail" or c.find("failure") is not None]
    skipped = [c for c in cases if c not in failed and
               (c.get("status") == "notrun" or c.find("skipped") is not None)]
    if skipped:
        print(f"== skipped tests{label}: {len(skipped)} (not counted as passed) ==")
        for c in skipped:
            print(f"  SKIPPED {c.get('name')}: {reason(c)}")
    else:
        print(f"== skipped tests{label}: none ==")
    print(f"ctest: {len(cases) - len(failed) - len(skipped)} passed, {len(failed)} failed, "
          f"{len(skipped)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
