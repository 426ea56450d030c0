"""Fuzzing the op surface against the CPU (issue 24 item 2).

    python -m tests.robustness.fuzz [--budget SECONDS] [--seed S] [--cases N] [--replay SEED,...] [--doc FILE]

Random cases from the op table (fuzz_ops.py: pointwise, reductions, indexing, shape ops, matmul, with
random shapes including 0-sized and 1-sized dims, dtypes, layouts, scalars, out= and in-place
variants) run in worker subprocesses (fuzz_worker.py), each on the CPU and on neuron.  Verdicts:
matched; crash (the worker died in the case: rerun alone to confirm), hang (no result within
HANG_S), wrong (values differ, or no error where the CPU raises), type (another exception type than
the CPU's, or an error where the CPU succeeds), canary (the device computes wrongly after the case),
message (the same type, another message: reported, not a finding), extra (neuron computes a dtype
the CPU has no kernel for: not a finding), cpu (neuron differs from the CPU but equals the CPU's own
result on contiguous or float64 inputs: the CPU's error, not a finding).  Case i of run seed S has the seed S * 1000003 + i; each
finding prints its seed and `--replay SEED` reruns it (with the snippet that rebuilds it).
Known findings (findings.py FUZZ_FINDINGS) are reported as such and do not fail the run.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BATCH = 150
HANG_S = 60          # one case, on a loaded 2-core machine (a case is at most a few thousand elements)
START_S = 60         # interpreter and torch import
FINDING = ("crash", "hang", "wrong", "type", "canary", "harness")

from .findings import FUZZ_FINDINGS  # noqa: E402
from .fuzz_ops import generate  # noqa: E402


def case_seed(run_seed, i):
    return run_seed * 1000003 + i


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["NEURON_NUM_THREADS"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _spawn(seeds, timeout):
    """({seed: result}, the seed running when the worker stopped or None, how it stopped)."""
    cmd = [sys.executable, "-m", "tests.robustness.fuzz_worker", *map(str, seeds)]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
        out, err, rc, to = p.stdout, p.stderr, p.returncode, False
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc, to = None, True
    got, running = {}, None
    for line in out.splitlines():
        if line.startswith("START "):
            running = int(line[6:])
        elif line.startswith("RESULT "):
            r = json.loads(line[7:])
            got[r["seed"]] = r
            running = None
    tail = " | ".join([ln for ln in err.strip().splitlines() if ln.strip()][-2:])[:300]
    how = "timeout" if to else (f"signal {-rc}" if rc is not None and rc < 0 else f"exit {rc}")
    return got, running, how, tail


def _dead(seed, how, tail, alone):
    c = generate(seed)
    verdict = "hang" if how == "timeout" else "crash"
    reason = (f"no result within {HANG_S} s" if verdict == "hang" else f"worker died ({how})") + \
        ("" if alone else " (only after earlier cases in the same process)") + (f": {tail}" if tail else "")
    return {"seed": seed, "op": c.op, "family": c.family, "variant": c.variant, "verdict": verdict,
            "reason": reason, "cpu": None, "neuron": None}


def run_seeds(seeds, log=None, deadline=None):
    """{seed: result} for the seeds, in batches; a case that kills or hangs its worker is rerun alone."""
    results = {}
    todo = list(seeds)
    while todo and (deadline is None or time.time() < deadline):
        batch, todo = todo[:BATCH], todo[BATCH:]
        got, running, how, tail = _spawn(batch, START_S + HANG_S + 0.5 * len(batch))
        results.update(got)
        if running is not None:  # the worker died or hung in this case: confirm it alone
            g1, r1, how1, tail1 = _spawn([running], START_S + HANG_S)
            results[running] = g1.get(running) or _dead(running, how1, tail1, True)
            if running in g1:  # it passes alone: the earlier cases broke the process
                results[running] = _dead(running, how, tail, False)
        rest = [s for s in batch if s not in results]
        if rest and running is None and not got:
            for s in rest:  # the worker did not even start a case
                results[s] = {"seed": s, "op": "", "family": "", "variant": "", "verdict": "harness",
                              "reason": f"worker failed to start ({how}): {tail}", "cpu": None, "neuron": None}
            rest = []
        todo = rest + todo
        if log:
            log(f"{len(results)} cases")
    return results


def known(r):
    """The FUZZ_FINDINGS entry explaining this result, or None (its pattern is searched in "variant=V reason
    cpu-error neuron-error")."""
    for (op, pat), why in FUZZ_FINDINGS.items():
        if re.fullmatch(op, r["op"]) and re.search(pat, " ".join((f"variant={r['variant']}", r["reason"],
                                                                 json.dumps(r.get("cpu")), json.dumps(r.get("neuron"))))):
            return why
    return None


def summary(results, seconds, run_seed):
    fam = collections.OrderedDict((f, collections.Counter()) for f in ("pointwise", "reduction", "indexing", "shape", "matmul"))
    for r in results.values():
        fam.setdefault(r["family"] or "?", collections.Counter())[r["verdict"]] += 1
    cols = ("matched", "message", "extra", "cpu", "wrong", "type", "crash", "hang", "canary", "harness")
    lines = [f"{len(results)} cases (run seed {run_seed}) in {seconds:.0f} s",
             "| family | cases | " + " | ".join(cols) + " |", "|---|---:|" + "---:|" * len(cols)]
    tot = collections.Counter()
    for f, c in fam.items():
        tot.update(c)
        lines.append(f"| {f} | {sum(c.values())} | " + " | ".join(str(c[v]) for v in cols) + " |")
    lines.append(f"| **total** | **{sum(tot.values())}** | " + " | ".join(f"**{tot[v]}**" for v in cols) + " |")
    return lines


def findings(results):
    """(open, known): the results that are findings, split by whether FUZZ_FINDINGS explains them."""
    bad = [r for r in results.values() if r["verdict"] in FINDING]
    return [r for r in bad if not known(r)], [r for r in bad if known(r)]


def describe(r):
    s = f"seed {r['seed']} {r['verdict']}: {r['family']} {r['op']} ({r['variant']}): {r['reason']}"
    for side in ("cpu", "neuron"):
        if r.get(side):
            s += f"\n    {side}: {r[side]['type']}: {r[side]['msg']}"
    return s


def write_doc(path, lines, open_, known_, msgs, cpus):
    begin, end = "<!-- fuzz: begin -->", "<!-- fuzz: end -->"
    body = [begin, "## Fuzzing", "",
            "`make fuzz` (tests/robustness/fuzz.py): random ops from the table in fuzz_ops.py (pointwise, reductions,",
            "indexing, shape ops, matmul; shapes with 0- and 1-sized dims and 0-d tensors, ten dtypes, transposed,",
            "strided, offset and expanded inputs, Python scalars and CPU 0-d tensors, out= and in-place variants), each",
            "run on the CPU and on neuron in a worker subprocess. `make robustness` runs it with seed 1 for a fixed",
            "budget; `make test` runs a fixed 120-case slice (tests/python/test_fuzz.py).", ""] + lines[:1] + [""] + lines[1:]
    body += ["", f"Open findings: {len(open_)}."]
    for r in open_:
        body.append(f"- {describe(r)}".replace("\n    ", "; "))
    if known_:
        body += ["", f"Known findings (findings.py FUZZ_FINDINGS): {len(known_)}."]
        for r in known_:
            body.append(f"- seed {r['seed']} {r['op']}: {known(r)}")
    if cpus:
        body += ["", f"The CPU's own value is off (neuron equals the CPU on contiguous or float64 inputs): {len(cpus)}."]
        body += [f"- seed {r['seed']} {r['op']}: {r['reason']}" for r in cpus]
    if msgs:
        body += ["", f"Message differs from the CPU's (same exception type): {len(msgs)}; the first of each op:"]
        seen = set()
        for r in msgs:
            if r["op"] in seen:
                continue
            seen.add(r["op"])
            body.append(f"- {r['op']} (seed {r['seed']}): cpu: {r['cpu']['msg']!r}; neuron: {r['neuron']['msg']!r}")
    body.append(end)
    text = Path(path).read_text() if Path(path).exists() else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + "\n".join(body) + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(body) + "\n"
    Path(path).write_text(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=180, help="seconds (default 180)")
    ap.add_argument("--seed", type=int, default=None, help="run seed (default: from the clock, printed)")
    ap.add_argument("--cases", type=int, default=0, help="run exactly this many cases (no time budget)")
    ap.add_argument("--replay", default="", help="comma-separated case seeds: run them and print each snippet")
    ap.add_argument("--doc", default="", help="write the totals into this markdown file's fuzz section")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.replay:
        seeds = [int(s) for s in a.replay.split(",")]
        res = run_seeds(seeds)
        for s in seeds:
            print(generate(s).snippet())
            print("->", describe(res[s]) if s in res else "no result", "\n")
        return 0
    run_seed = a.seed if a.seed is not None else int(time.time()) % 100000
    print(f"fuzz: run seed {run_seed} (replay a case with --replay SEED)", flush=True)
    t0 = time.time()
    n = a.cases or 10 ** 7
    deadline = None if a.cases else t0 + a.budget
    results = {}
    i = 0
    while i < n and (deadline is None or time.time() < deadline):
        chunk = [case_seed(run_seed, j) for j in range(i, min(n, i + BATCH))]
        results.update(run_seeds(chunk, deadline=deadline))
        i += len(chunk)
        print(f"fuzz: {len(results)} cases, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    dt = time.time() - t0
    lines = summary(results, dt, run_seed)
    open_, known_ = findings(results)
    msgs = [r for r in results.values() if r["verdict"] == "message"]
    print("\n".join(lines))
    for r in open_:
        print(describe(r))
    for r in known_:
        print(f"known: seed {r['seed']} {r['op']}: {known(r)}")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    if a.doc:
        write_doc(a.doc, lines, open_, known_, msgs, [r for r in results.values() if r["verdict"] == "cpu"])
    print(f"fuzz: {len(open_)} open findings, {len(known_)} known, {len(msgs)} message differences")
    return 1 if open_ else 0


if __name__ == "__main__":
    sys.exit(main())
