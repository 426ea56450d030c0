"""The model sweep: each architecture of tests/models/archs.py in its own process, with a timeout.

    python -m tests.models                     # all of them -> docs/models.md and README's "Works with"
    python -m tests.models llama mixtral       # only these (prints; writes no report)
    python -m tests.models --report-only       # rebuild the report from build/models/*.json

`make models` runs the first (at low priority: `nice -n 10`).  One result per model is kept in
build/models/NAME.json as it finishes, so an interrupted sweep can be reported or resumed (--resume).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from . import report

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "build" / "models"


def run_one(name, timeout, modes=None):
    """The result dict of tests.models.check for one model, or an error result if its process timed
    out or died (a crash in one model does not hide the others)."""
    cmd = [sys.executable, "-m", "tests.models.check", name] + (["--modes", modes] if modes else [])
    env = {k: v for k, v in os.environ.items()  # the backend's behaviour switches come from the sweep, not the shell
           if k not in ("NEURON_FALLBACK", "NEURON_LAUNCH_BLOCKING", "NEURON_RT_VISIBLE_CORES", "TORCHNEURON_CUDA")}
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"name": name, "process_error": f"timed out after {timeout} s", "seconds": timeout}
    secs = round(time.monotonic() - t0, 1)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or [""])[-1][:300]
        return {"name": name, "process_error": f"exit code {p.returncode}: {tail}", "seconds": secs}
    res = json.loads(lines[-1])
    res["seconds"] = secs
    return res


def _child(name, modes, conn):
    import io
    from . import check
    sys.stdout = sys.stderr = io.StringIO()  # keep the libraries' chatter out of the sweep's log
    import transformers
    transformers.logging.set_verbosity_error()
    res = check.run(name, modes.split(",") if modes else check.MODES)
    conn.send(res)
    conn.close()


def run_forked(name, timeout, modes=None):
    """run_one, in a child forked from this process (which has imported torch and transformers but
    never started the device: a fork after the runtime's threads started is refused).  Saves each model
    the interpreter start and the imports (about 3 s of CPU a model)."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    t0 = time.monotonic()
    p = ctx.Process(target=_child, args=(name, modes, send), daemon=True)
    p.start()
    send.close()
    res = None
    try:
        if recv.poll(timeout):
            res = recv.recv()
    except EOFError:
        pass
    p.join(10)
    if p.is_alive():
        p.kill()
        p.join()
    secs = round(time.monotonic() - t0, 1)
    if res is None:
        why = f"timed out after {timeout} s" if secs >= timeout else f"process died (exit code {p.exitcode})"
        return {"name": name, "process_error": why, "seconds": secs}
    res["seconds"] = secs
    return res


def main(argv=None):
    from . import archs
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per model (default 600)")
    ap.add_argument("--modes", default=None, help="comma-separated subset of forward,train,generate,compiled")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--resume", action="store_true", help="skip models with a result in build/models")
    ap.add_argument("--no-fork", action="store_true", help="a fresh interpreter per model (slower)")
    a = ap.parse_args(argv)
    names = a.names or list(archs.ARCHS)
    unknown = [n for n in names if n not in archs.ARCHS]
    if unknown:
        ap.error(f"unknown architectures {unknown}; known: {', '.join(archs.ARCHS)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not a.report_only:
        if not a.no_fork:
            import torch  # noqa: F401  (imported once here, before the first fork; the device stays unused)
            import transformers  # noqa: F401
            from . import check  # noqa: F401
            assert not torch.neuron.is_initialized()
        for i, n in enumerate(names, 1):
            path = RESULTS / f"{n}.json"
            if a.resume and path.exists():
                continue
            res = run_one(n, a.timeout, a.modes) if a.no_fork else run_forked(n, a.timeout, a.modes)
            res["torchneuron"] = report._versions()["torchneuron"]
            path.write_text(json.dumps(res, indent=1))
            print(f"[{i}/{len(names)}] {n:16} {report.summary(res)}  ({res.get('seconds', 0)} s)", flush=True)
    if a.names and not a.report_only:
        return 0
    results = [json.loads((RESULTS / f"{n}.json").read_text()) for n in names if (RESULTS / f"{n}.json").exists()]
    report.write(results, ROOT / "docs" / "models.md", ROOT / "README.md")
    print(f"wrote docs/models.md ({len(results)} models) and README's Works with table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
