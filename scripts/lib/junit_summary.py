#!/usr/bin/env python3
"""Summaries of nextest JUnit reports (target/nextest/<profile>/junit.xml).

    junit_summary.py run REPORT          failures of one run, then its ten slowest tests
    junit_summary.py soak REPORT...      per-test failure counts over several runs
    junit_summary.py counts REPORT...    one line over the reports: "N passed, M failed"

A test counts as failed when its testcase has a <failure> or <error> child (nextest writes
one for a failing exit, a panic, a timeout or a crash).
"""
import sys
import xml.etree.ElementTree as ET


def cases(path):
    """(name, seconds, failed, message) for each testcase of one report."""
    root = ET.parse(path).getroot()
    out = []
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            name = f"{case.get('classname', suite.get('name', '?'))} {case.get('name')}"
            bad = case.find("failure")
            if bad is None:
                bad = case.find("error")
            msg = "" if bad is None else (bad.get("message") or bad.get("type") or "failed")
            out.append((name, float(case.get("time", "0") or 0), bad is not None, msg))
    return out


def run(path):
    cs = cases(path)
    failed = [c for c in cs if c[2]]
    print(f"== summary: {len(cs)} tests, {len(failed)} failed")
    for name, secs, _, msg in failed:
        print(f"FAILED {name} ({secs:.1f} s): {msg}")
    print("== ten slowest tests")
    for name, secs, bad, _ in sorted(cs, key=lambda c: -c[1])[:10]:
        print(f"{secs:8.1f} s  {name}{'  (failed)' if bad else ''}")
    return 1 if failed else 0


def soak(paths):
    runs, fails, seen = 0, {}, set()
    for p in paths:
        try:
            cs = cases(p)
        except (OSError, ET.ParseError) as e:
            print(f"run {p}: no report ({e}); counted as a failed run")
            fails["(whole run: no report)"] = fails.get("(whole run: no report)", 0) + 1
            runs += 1
            continue
        runs += 1
        for name, _, bad, _ in cs:
            seen.add(name)
            if bad:
                fails[name] = fails.get(name, 0) + 1
    print(f"== soak: {runs} runs, {len(seen)} tests, {sum(fails.values())} failures")
    for name, n in sorted(fails.items(), key=lambda kv: -kv[1]):
        print(f"{n:4d}/{runs} failed  {name}")
    if not fails:
        print("no test failed")
    return 1 if fails else 0


def counts(paths):
    cs = [c for p in paths for c in cases(p)]
    failed = sum(1 for c in cs if c[2])
    print(f"{len(cs) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "counts":
        sys.exit(counts(sys.argv[2:]))
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2]))
    if len(sys.argv) >= 3 and sys.argv[1] == "soak":
        sys.exit(soak(sys.argv[2:]))
    print(__doc__)
    sys.exit(2)
