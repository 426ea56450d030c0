"""The whole bad-input catalogue: python -m tests.robustness [--fast] [--cases PREFIX,...] [--out docs/robustness.md]"""
import argparse
import json
import sys
import time

from .catalogue import CASES
from .runner import ROOT, report, run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--cases", default="")
    ap.add_argument("--out", default=str(ROOT / "docs" / "robustness.md"))
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    cases = [c for c in CASES if (not a.fast or c.fast)
             and (not a.cases or c.name.startswith(tuple(a.cases.split(","))))]
    t = time.time()
    res = run(cases, log=lambda s: print(s, file=sys.stderr, flush=True))
    dt = time.time() - t
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    if len(cases) == len(CASES):
        with open(a.out, "w") as f:
            f.write(report(res, dt))
        print(f"wrote {a.out}")
    bad = [(n, r["verdict"], r["reason"]) for n, r in res.items() if r["verdict"] != "matched"]
    for b in bad:
        print(*b)
    print(f"{len(cases)} cases, {len(bad)} not matched, {dt:.0f} s")


main()
