"""Runs catalogue cases in worker subprocesses and writes the report.

Cases are grouped (same environment, at most GROUP per process); a group whose process dies or
exceeds its timeout is rerun case by case for the cases it did not report, so that a crash (the
process dies) or a hang (the per-case timeout) is pinned on one case.
"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .catalogue import CASES

ROOT = Path(__file__).resolve().parents[2]
GROUP = 60
SOLO_TIMEOUT = 90  # s, one case plus interpreter start on a loaded 2-core machine
VERDICTS = ("matched", "differs", "crash", "hang", "wrong", "canary")

from .findings import CPU_DEPENDENT, FINDINGS  # noqa: E402 - open findings, with their cause


def _env(case_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    env.update(dict(case_env))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _spawn(names, case_env, timeout):
    """{name: result} for the cases the worker reported, plus (rc, stderr tail, timed_out)."""
    cmd = [sys.executable, "-m", "tests.robustness.worker", *names]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=_env(case_env), capture_output=True, text=True, timeout=timeout)
        out, err, rc, to = p.stdout, p.stderr, p.returncode, False
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc, to = None, True
    got = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            got[r["name"]] = r
    tail = [ln for ln in err.strip().splitlines() if ln.strip()][-3:]
    return got, rc, " | ".join(tail)[:400], to


def groups(cases):
    by_env = collections.defaultdict(list)
    out = []
    for c in cases:
        if c.alone:
            out.append([c])
        else:
            by_env[c.env].append(c)
    for cs in by_env.values():
        out.extend(cs[i:i + GROUP] for i in range(0, len(cs), GROUP))
    return out


def run(cases, log=None):
    """{name: result}; the workers' temporary files (a crashed case cannot clean up) go to a
    directory removed at the end."""
    tmp = tempfile.mkdtemp(prefix="neuron-robustness-")
    os.environ["TMPDIR"], old = tmp, os.environ.get("TMPDIR")
    try:
        return _run(cases, log)
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
        shutil.rmtree(tmp, ignore_errors=True)


def _run(cases, log):
    results = {}
    for g in groups(cases):
        names = [c.name for c in g]
        got, rc, tail, to = _spawn(names, g[0].env, 60 + 3 * len(g))
        results.update(got)
        missing = [c for c in g if c.name not in got]
        if missing and len(g) > 1:
            for c in missing:
                r, rc1, tail1, to1 = _spawn([c.name], c.env, SOLO_TIMEOUT)
                results[c.name] = r.get(c.name) or _dead(c, rc1, tail1, to1)
        elif missing:
            results[g[0].name] = _dead(g[0], rc, tail, to)
        if log:
            log(f"{len(results)}/{len(cases)} cases")
    return results


def _dead(case, rc, tail, timed_out):
    if timed_out:
        return {"name": case.name, "verdict": "hang", "reason": f"no result within {SOLO_TIMEOUT} s", "neuron": None}
    how = f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exited with {rc}"
    return {"name": case.name, "verdict": "crash", "reason": f"worker {how}" + (f": {tail}" if tail else ""), "neuron": None}


def report(results, seconds):
    by_cls = collections.OrderedDict()
    for c in CASES:
        by_cls.setdefault(c.cls, collections.Counter())[results[c.name]["verdict"]] += 1
    lines = ["# Robustness: the bad-input catalogue", "",
             "Written by `make robustness` (`python -m tests.robustness`, tests/robustness/). Each case runs its snippet",
             "on the CPU and on neuron in a worker subprocess, compares the exception type (the same or a subclass) and",
             "message (the CPU's first line contained, modulo the device name, or the case's pattern), or the values when",
             "the CPU succeeds, then runs a canary (an 8x8 matmul and sum against the CPU) on the device in the same",
             "process. A worker that dies or times out is rerun case by case: a death is a crash, a timeout a hang.",
             "`make test` runs the cases marked fast (tests/python/test_robustness.py); open findings there are",
             "strict xfails. The fuzzer's totals (`make fuzz`, tests/robustness/fuzz.py) are in the last section.", "",
             f"{len(CASES)} cases, {seconds:.0f} s on the 2-core Intel Xeon (Sapphire Rapids class), loaded machine.", "",
             "| class | cases | matched | message/type differs | crashes | hangs | silent wrong | canary failures |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    tot = collections.Counter()
    for cls, cnt in by_cls.items():
        n = sum(cnt.values())
        tot.update(cnt)
        lines.append(f"| {cls} | {n} | " + " | ".join(str(cnt[v]) for v in VERDICTS) + " |")
    lines.append(f"| **total** | **{sum(tot.values())}** | " + " | ".join(f"**{tot[v]}**" for v in VERDICTS) + " |")
    lines += ["", "## Cases that do not match", "",
              "Verdict, the case, why, and the first line of each side's error (`-` where it raised nothing).", ""]
    for v in ("crash", "hang", "wrong", "canary", "differs"):
        rows = [c for c in CASES if results[c.name]["verdict"] == v]
        if not rows:
            continue
        lines += [f"### {v} ({len(rows)})", ""]
        for c in rows:
            r = results[c.name]
            cpu = (r.get("cpu") or {})
            ne = (r.get("neuron") or {})
            cpu_s = f"{cpu['type']}: {cpu['msg']}" if cpu else "-"
            ne_s = f"{ne['type']}: {ne['msg']}" if ne else "-"
            note = FINDINGS.get(c.name, "") or CPU_DEPENDENT.get(c.name, "")
            text = f"{r['reason']}; {note}" if note and v in ("crash", "hang") else (note or r["reason"])
            lines.append(f"- `{c.name}` ({c.cls}): {text}")
            if c.expect == "cpu" or (isinstance(c.expect, tuple) and c.expect[0] == "env"):
                lines.append(f"  - cpu: `{cpu_s.replace('`', chr(39))}`")
            lines.append(f"  - neuron: `{ne_s.replace('`', chr(39))}`")
        lines.append("")
    return "\n".join(lines) + "\n"
