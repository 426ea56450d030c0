"""The conformance sweep: every op_db entry on neuron vs CPU, written to docs/conformance.md.

    python -m tests.conformance [--jobs 2] [--ops KEY,KEY...] [--out docs/conformance.md]

Entries run in worker subprocesses (worker.py), one per job.  A worker that crashes or exceeds the
per-entry timeout is killed and restarted; its entry is reported as crashed, so one bad op cannot
end the sweep.  Per-sample limits are in runner.Limits (see the report's header).
"""
import argparse
import collections
import dataclasses
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import runner, skips
from .tolerances import DTYPES, GRAD_FACTOR, SHORT, TOLERANCES

ROOT = Path(__file__).resolve().parents[2]


class Worker:
    def __init__(self, limits, logdir, n):
        self.log_path = Path(logdir) / f"worker{n}.log"
        env = dict(os.environ, NEURON_NUM_THREADS="1", OMP_NUM_THREADS="1", NEURON_FALLBACK="silent",
                   PYTHONUNBUFFERED="1")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.conformance.worker", json.dumps(dataclasses.asdict(limits))],
            cwd=str(ROOT), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.buf = b""
        self.ready = False
        self.idx = None
        self.started = 0.0

    def send(self, idx):
        self.idx, self.started = idx, time.time()
        self.proc.stdin.write(f"{idx}\n".encode())
        self.proc.stdin.flush()

    def lines(self):
        """Complete lines read so far (None at EOF)."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return None
        self.buf += chunk
        *done, self.buf = self.buf.split(b"\n")
        return [d.decode(errors="replace") for d in done]

    def kill(self):
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()
        self.log.close()

    def log_tail(self, n=600):
        try:
            if not self.log.closed:
                self.log.flush()
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""


def sweep(indices, limits, jobs, entry_timeout, progress=True):
    from torch.testing._internal.common_methods_invocations import op_db
    pending = collections.deque(indices)
    results = {}
    logdir = tempfile.mkdtemp(prefix="neuron-conformance-")
    sel = selectors.DefaultSelector()
    workers = []

    def start(n):
        w = Worker(limits, logdir, n)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        return w

    def crashed(w, why):
        op = op_db[w.idx]
        results[w.idx] = {"key": runner.entry_key(op), "index": w.idx, "crash": why, "per_dtype": {},
                          "fallback": [], "native": [], "failures": [w.log_tail()], "truncated": False,
                          "claimed": [SHORT[d] for d in runner.swept_dtypes(op)], "skip": None,
                          "shape_only": None, "seconds": round(time.time() - w.started, 1)}
        report(results[w.idx])

    def report(res):
        if progress:
            print(f"[{len(results)}/{len(indices)}] {res['key']}: {runner.status(res)} ({res['seconds']} s)",
                  file=sys.stderr, flush=True)

    def feed(w):
        if pending:
            w.send(pending.popleft())
        else:
            w.idx = None

    for n in range(min(jobs, len(indices))):
        workers.append(start(n))
    while any(w.idx is not None or not w.ready for w in workers) or pending:
        for key, _ in sel.select(timeout=1.0):
            w = key.data
            lines = w.lines()
            if lines is None:  # the worker died
                sel.unregister(w.proc.stdout)
                code = w.proc.wait()
                w.log.close()
                n = workers.index(w)
                if w.idx is not None:
                    crashed(w, f"worker died (exit code {code})")
                elif not w.ready:
                    raise RuntimeError(f"conformance worker failed to start:\n{w.log_tail(3000)}")
                workers[n] = start(n)
                continue
            for line in lines:
                if line.startswith("@@READY"):
                    w.ready = True
                    feed(w)
                elif line.startswith("@@RESULT "):
                    res = json.loads(line[len("@@RESULT "):])
                    results[res["index"]] = res
                    report(res)
                    feed(w)
        now = time.time()
        for n, w in enumerate(workers):
            if w.idx is not None and now - w.started > entry_timeout:
                sel.unregister(w.proc.stdout)
                w.kill()
                crashed(w, f"timed out after {entry_timeout} s")
                workers[n] = start(n)
        if not pending and all(w.idx is None and w.ready for w in workers):
            break
    for w in workers:
        try:
            sel.unregister(w.proc.stdout)
        except (KeyError, ValueError):
            pass
        w.proc.stdin.close()
        w.kill()
    shutil.rmtree(logdir, ignore_errors=True)
    return results


# ---- the report ----------------------------------------------------------------------------------

STATUS_TEXT = {
    "pass-native": "pass, native",
    "pass-fallback": "pass, fallback",
    "fail": "FAIL (error)",
    "wrong": "**WRONG**",
    "crash": "CRASH",
    "skipped": "skipped",
    "n/a": "n/a",
}


def _md(s):
    return str(s).replace("|", "\\|").replace("\n", " ").replace("`", "'")


def totals(results):
    st = collections.Counter(runner.status(r) for r in results)
    samples = collections.Counter()
    native_wrong = 0
    for r in results:
        for c in r["per_dtype"].values():
            samples.update(c)
        if any(c["native_mismatch"] for c in r["per_dtype"].values()):
            native_wrong += 1
    return st, samples, native_wrong


def write_report(results, path, seconds, limits, jobs, partial):
    results = sorted(results, key=lambda r: r["key"])
    st, samples, native_wrong = totals(results)
    n = len(results)
    pct = (lambda k: f"{100.0 * k / n:.1f} %") if n else (lambda k: "-")
    L = []
    L.append("# Conformance: PyTorch's OpInfo database on `neuron` vs CPU\n")
    L.append("Generated by `make conformance` (`python -m tests.conformance`); do not edit by hand. "
             "Every entry of `torch.testing._internal.common_methods_invocations.op_db` is run on `neuron` and on "
             "the CPU, for every dtype it claims for the CPU among f32, f64, bf16, f16, i64, i32, i16, i8, u8, bool; "
             "forward results, gradients (where the entry supports autograd for the dtype) and non-contiguous "
             "variants are compared, and the out= and in-place contracts (wrong dtype, wrong device, resize of a "
             "wrong-shaped out=, in-place results that do not broadcast to self) are checked against the CPU's "
             "behaviour. Harness: `tests/conformance/`.\n")
    if partial:
        L.append(f"**Partial sweep** ({n} of the entries, selected with --ops).\n")
    L.append("## Totals\n")
    L.append("| | entries | share |\n|---|---:|---:|")
    L.append(f"| entries swept (op_db) | {n} | |")
    L.append(f"| **native and passing** | **{st['pass-native']}** | **{pct(st['pass-native'])}** |")
    L.append(f"| passing through the CPU fallback | {st['pass-fallback']} | {pct(st['pass-fallback'])} |")
    L.append(f"| failing with an error | {st['fail']} | {pct(st['fail'])} |")
    L.append(f"| **wrong answer without an error** | **{st['wrong']}** | {pct(st['wrong'])} |")
    L.append(f"| &nbsp;&nbsp;of which the sample ran natively (no fallback) | **{native_wrong}** | |")
    L.append(f"| crashed or timed out | {st['crash']} | {pct(st['crash'])} |")
    L.append(f"| not applicable (no swept dtype, or no sample runs on the CPU) | {st['n/a']} | {pct(st['n/a'])} |")
    L.append(f"| skipped (tests/conformance/skips.py) | {st['skipped']} | {pct(st['skipped'])} |")
    L.append("")
    per_check = collections.defaultdict(collections.Counter)
    for r in results:
        for chk, c in (r.get("contract") or {}).items():
            per_check[chk].update(c)
    L.append(f"Contract checks (out= and in-place variants, as PyTorch's test_out / test_variant_consistency_eager; "
             f"see tests/conformance/runner.py): {samples['c_pass']} passed, {samples['c_mismatch']} wrong "
             f"(neuron accepted what the CPU rejects, or a different result), {samples['c_error']} errors "
             f"(neuron raised where the CPU did not).\n")
    if per_check:
        L.append("| check | passed | wrong | errors |\n|---|---:|---:|---:|")
        for chk in runner.CONTRACT_CHECKS:
            c = per_check.get(chk, collections.Counter())
            L.append(f"| {chk} | {c['pass']} | {c['mismatch']} | {c['error']} |")
        L.append("")
    fb_entries = sum(1 for r in results if r["fallback"])
    L.append(f"Samples: {samples['pass']} passed, {samples['mismatch']} wrong ({samples['native_mismatch']} "
             f"of them native), {samples['error']} errors, {samples['cpu_error']} rejected by the CPU itself "
             f"or with nothing on neuron (not counted). Entries with any fallback: {fb_entries}.\n")
    L.append(f"Sweep: {seconds / 60:.1f} min with {jobs} worker processes (one thread each). "
             f"Limits: {limits.samples} samples per (entry, dtype), evenly spaced over the first "
             f"{limits.pool} the OpInfo yields, plus {limits.noncontig} non-contiguous variants; "
             f"{limits.sample_timeout} s per sample; an entry stops starting dtypes after "
             f"{limits.entry_budget:.0f} s (marked *truncated*).\n")
    tol = ", ".join(f"{SHORT[d]} {r}/{a}" for d, (r, a) in TOLERANCES.items() if r or a)
    L.append(f"Tolerances (rtol/atol, gradients x{GRAD_FACTOR}; integers and bool exact): {tol}; per-entry "
             "exceptions are listed below with their reason.\n")
    L.append("Status: *pass, native* = every sample of every swept dtype matched and no ATen op fell back; "
             "*pass, fallback* = matched, but some op ran on the CPU; *FAIL* = neuron raised where the CPU did not; "
             "**WRONG** = neuron returned a result that differs (the *execution* column tells whether a "
             "fallback was involved).\n")
    # wrong answers first: the worst outcome
    wrong = [r for r in results if runner.status(r) == "wrong"]
    if wrong:
        L.append("## Wrong answers\n")
        for r in wrong:
            nat = "native" if any(c["native_mismatch"] for c in r["per_dtype"].values()) else \
                "out=/in-place contract" if any(c.get("c_mismatch") for c in r["per_dtype"].values()) else \
                "fallback involved"
            L.append(f"- `{r['key']}` ({nat}): {_md(r.get('first_mismatch') or '')}")
        L.append("")
    fb = collections.Counter(op for r in results for op in r["fallback"])
    if fb:
        L.append("## Ops that fall back, by the number of entries that use them\n")
        L.append(", ".join(f"`{op}` {k}" for op, k in fb.most_common(60)) + "\n")
    L.append("## Skipped and specially compared entries (tests/conformance/skips.py)\n")
    special = [(k, "not run", v) for k, v in skips.SKIP.items()]
    special += [(k, "shapes only", v.split(":")[0]) for k, v in skips.SHAPE_ONLY.items()]
    special += [(k, "random samples shape-compared", v[1]) for k, v in skips.RANDOM_SAMPLES.items()]
    special += [(k, "tie order", v[3]) for k, v in skips.TIE_ORDER.items()]
    special += [(k, f"args {list(v[0])} stay on the CPU", v[1]) for k, v in skips.CPU_ARGS.items()]
    special += [(k, "tolerance " + ", ".join(f"{SHORT[d]} {r}/{a}" for d, (r, a) in v[0].items()), v[1])
                for k, v in skips.TOLERANCE.items()]
    if special:
        L.append("| entry | treatment | reason |\n|---|---|---|")
        for k, t, why in sorted(special):
            L.append(f"| `{k}` | {t} | {_md(why)} |")
    else:
        L.append("None.")
    L.append("")
    L.append("## Entries\n")
    L.append("| entry | status | execution | samples pass/wrong/error | dtypes | notes |")
    L.append("|---|---|---|---|---|---|")
    for r in results:
        s = runner.status(r)
        pd = r["per_dtype"]
        p = sum(c["pass"] + c.get("c_pass", 0) for c in pd.values())
        m = sum(c["mismatch"] + c.get("c_mismatch", 0) for c in pd.values())
        e = sum(c["error"] + c.get("c_error", 0) for c in pd.values())
        bad = [d for d, c in pd.items() if c["mismatch"] or c["error"] or c.get("c_mismatch") or c.get("c_error")]
        good = [d for d, c in pd.items() if d not in bad and c["pass"]]
        dts = " ".join(good) + (" / failing: " + " ".join(bad) if bad else "")
        if not pd:
            dts = " ".join(r.get("claimed", [])) or "none swept"
        if r["fallback"]:
            ex = "fallback: " + ", ".join(f"`{o}`" for o in r["fallback"][:4]) + (" …" if len(r["fallback"]) > 4 else "")
        elif s in ("skipped", "n/a", "crash"):
            ex = "-"
        else:
            ex = "native"
        notes = []
        if r.get("skip"):
            notes.append(r["skip"])
        if r.get("shape_only"):
            notes.append("shape only: " + r["shape_only"].split(":")[0])
        if r.get("random_samples"):
            notes.append("shape only for " + r["random_samples"])
        if r.get("tolerance"):
            notes.append("looser tolerance: " + r["tolerance"])
        if r.get("crash"):
            notes.append(r["crash"])
        if r.get("truncated"):
            notes.append("*truncated*")
        if s == "wrong" and r.get("first_mismatch"):
            notes.append(r["first_mismatch"][:220])
        elif r["failures"] and s in ("fail", "wrong", "crash"):
            notes.append(r["failures"][0][:220])
        L.append(f"| `{r['key']}` | {STATUS_TEXT[s]} | {ex} | {p}/{m}/{e} | {dts} | {_md('; '.join(notes))} |")
    L.append("")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(L))
    return st, samples, native_wrong


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tests.conformance", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("CONFORMANCE_JOBS", "2")))
    ap.add_argument("--ops", default="", help="comma-separated entry keys (default: all of op_db)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "conformance.md"))
    ap.add_argument("--json", default=str(ROOT / "build" / "conformance.json"))
    ap.add_argument("--samples", type=int, default=runner.Limits.samples)
    ap.add_argument("--entry-timeout", type=float, default=180.0)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("NEURON_FALLBACK", "silent")
    from torch.testing._internal.common_methods_invocations import op_db
    keys = [runner.entry_key(op) for op in op_db]
    if args.ops:
        want = [k.strip() for k in args.ops.split(",") if k.strip()]
        unknown = [k for k in want if k not in keys]
        if unknown:
            ap.error(f"unknown op_db entries: {unknown}")
        indices = [keys.index(k) for k in want]
    else:
        indices = list(range(len(op_db)))
    limits = runner.Limits(samples=args.samples)
    t0 = time.time()
    res = sweep(indices, limits, args.jobs, args.entry_timeout, progress=not args.quiet)
    seconds = time.time() - t0
    results = [res[i] for i in indices]
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))
    st, samples, native_wrong = write_report(results, args.out, seconds, limits, args.jobs, bool(args.ops))
    n = len(results)
    print(f"conformance: {n} entries, {st['pass-native']} native+passing ({100.0 * st['pass-native'] / max(n, 1):.1f} %), "
          f"{st['pass-fallback']} passing via fallback, {st['fail']} failing, {st['wrong']} wrong "
          f"({native_wrong} native), {st['crash']} crashed, {st['n/a']} n/a, {st['skipped']} skipped; "
          f"{seconds / 60:.1f} min -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
