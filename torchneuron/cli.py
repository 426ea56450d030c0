"""The `torchneuron` command: device information, a migration check and a neuron-vs-CPU training parity run.

    torchneuron info [--json]                        devices, kernels' ISA, arena, threads, cache, versions, env
    torchneuron info --watch [--interval S] [--count N] [--json]
                                                     live memory and queue activity of every process on neuron
    torchneuron check [--json F] [--strict] SCRIPT [args]
                                                     run SCRIPT; report native and fallback ops (calls, time),
                                                     torch.compile graphs / breaks / recompiles, peak memory,
                                                     and hard-coded CUDA in the script and its local modules
    torchneuron parity [--rtol R] [--plot PNG] [--json F] SCRIPT [args]
                                                     run SCRIPT on neuron and on the CPU; compare loss and
                                                     gradient norm per step; name the first differing module
"""
import argparse
import ast
import collections
import json
import os
import runpy
import sys
import time

ENV_VARS = ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_MEMORY_LIMIT", "NEURON_LAUNCH_BLOCKING", "NEURON_FALLBACK",
            "NEURON_FALLBACK_COPY", "NEURON_NUM_THREADS", "NEURON_KERNELS", "NEURON_INLINE_BYTES", "NEURON_HUGEPAGES",
            "NEURON_CACHE_DIR", "NEURON_COMPILE_DEBUG", "NEURON_COMPILE_PROFILE", "NEURON_CC", "NEURON_LAUNCH_SITES",
            "NEURON_WATCH", "TORCHNEURON_DISABLE", "TORCHNEURON_CUDA", "TORCH_DEVICE_BACKEND_AUTOLOAD")


# ---- info ------------------------------------------------------------------------------------------

def _dir_size(d):
    total = files = 0
    for root, _, names in os.walk(d):
        for n in names:
            try:
                total += os.path.getsize(os.path.join(root, n))
                files += 1
            except OSError:
                pass
    return total, files


def info_dict():
    import platform

    import torch
    import torchneuron
    from torchneuron.compile.toolchain import cache_dir

    d = {"torchneuron": torchneuron.__version__, "torch": torch.__version__, "python": platform.python_version(),
         "machine": platform.machine()}
    err = torchneuron._C._init_error()
    d["runtime_error"] = err
    d["env"] = {k: os.environ[k] for k in ENV_VARS if k in os.environ}
    cd = cache_dir()
    size, files = _dir_size(cd) if os.path.isdir(cd) else (0, 0)
    d["cache"] = {"dir": cd, "bytes": size, "files": files}
    if err:
        d["devices"] = []
        return d
    kern = torch.ops.neuron._kernels_describe().splitlines()
    d["kernels"] = {"cpu": kern[0].partition(" ")[2] if kern else "",
                    "level": kern[1].partition(" ")[2] if len(kern) > 1 else "",
                    "families": dict(line.split(" ", 1) for line in kern[2:] if " " in line)}
    d["threads"] = {"kernel_pool": torchneuron._C._num_threads(), "launch_blocking": torchneuron._C._launch_blocking()}
    devs = []
    for i in range(torch.neuron.device_count()):
        p = torch.neuron.get_device_properties(i)
        free, total = torch.neuron.mem_get_info(i)
        s = torch.neuron.memory_stats(i)
        devs.append({"index": i, "name": p.name, "arena_limit_bytes": total, "arena_free_bytes": free,
                     "allocated_bytes": s.get("allocated_bytes.all.current", 0),
                     "reserved_bytes": s.get("reserved_bytes.all.current", 0)})
    d["devices"] = devs
    return d


def _info(as_json):
    d = info_dict()
    if as_json:
        print(json.dumps(d, indent=2))
        return 1 if d["runtime_error"] else 0
    print(f"torchneuron {d['torchneuron']}, torch {d['torch']}, python {d['python']}")
    if d["runtime_error"]:
        print(f"runtime: cannot initialize: {d['runtime_error']}")
        return 1
    print(f"devices: {len(d['devices'])}")
    for x in d["devices"]:
        print(f"  neuron:{x['index']}  {x['name']}  arena limit {x['arena_limit_bytes'] / 2**30:.2f} GiB  "
              f"threads {d['threads']['kernel_pool']}")
    k = d["kernels"]
    print(f"kernels: {k['level']} ({k['cpu']})")
    print(f"cache: {d['cache']['dir']} ({d['cache']['files']} files, {d['cache']['bytes'] / 2**20:.1f} MiB)")
    for name in ENV_VARS[:6]:
        print(f"  {name}={os.environ.get(name, '')}")
    return 0


# ---- info --watch: the processes using neuron devices (their watch pages, csrc/runtime/watch.c) --------

WATCH_GLOB = "/dev/shm/neuron-watch-*"


def read_watch_pages(remove_stale=True):
    """[page dict] of every live process's watch page; pages of processes that died are removed."""
    import glob

    out = []
    for path in sorted(glob.glob(WATCH_GLOB)):
        try:
            pid = int(path.rsplit("-", 1)[1])
        except ValueError:
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            if remove_stale:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            continue
        except PermissionError:
            pass  # another user's process: still alive
        for _ in range(5):  # the seqlock: an even sequence number, the same before and after the read
            try:
                with open(path, "rb") as f:
                    raw = f.read(4096)
            except OSError:
                break
            if len(raw) < 9:
                break
            seq = int.from_bytes(raw[:8], "little")
            end = raw.find(b"\0", 8)
            with open(path, "rb") as f:
                seq2 = int.from_bytes(f.read(8), "little")
            if seq % 2 == 0 and seq == seq2 and end > 8:
                try:
                    out.append(json.loads(raw[8:end].decode("utf-8", "replace")))
                except ValueError:
                    pass
                break
            time.sleep(0.01)
    return out


def _watch(interval, count, as_json):
    """nvidia-smi / neuron-top for neuron: per process and device, memory and queue activity."""
    prev, n = {}, 0
    while count is None or n < count:
        pages = read_watch_pages()
        if as_json:
            print(json.dumps(pages), flush=True)
        else:
            print(time.strftime("%H:%M:%S"), f"{len(pages)} process(es) using neuron devices")
            print(f"  {'pid':>7} {'dev':>4} {'allocated':>10} {'reserved':>10} {'peak':>10} {'limit':>9} "
                  f"{'queued':>7} {'records/s':>10}  command")
            for pg in pages:
                for d in pg["devices"]:
                    key = (pg["pid"], d["index"])
                    rate = "-"
                    if key in prev and pg["time"] > prev[key][0]:
                        rate = f"{(d['done'] - prev[key][1]) / (pg['time'] - prev[key][0]):.0f}"
                    prev[key] = (pg["time"], d["done"])
                    mib = lambda b: f"{b / 2**20:.1f}M"  # noqa: E731
                    print(f"  {pg['pid']:>7} {d['index']:>4} {mib(d['allocated']):>10} {mib(d['reserved']):>10} "
                          f"{mib(d['peak_allocated']):>10} {d['limit'] / 2**30:>8.1f}G {d['pushed'] - d['done']:>7} "
                          f"{rate:>10}  {pg['cmd'][:60]}")
            sys.stdout.flush()
        n += 1
        if count is None or n < count:
            time.sleep(interval)
    return 0


# ---- check: source scan ----------------------------------------------------------------------------

_CUDA_ONLY = {"cudnn": "torch.backends.cudnn has no neuron counterpart: drop it or guard it",
              "nccl": "use the 'neuron' c10d backend (torch.distributed.init_process_group('neuron'))"}


def _is_cuda_str(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        node.value == "cuda" or node.value.startswith("cuda:"))


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def scan_source(path):
    """Hard-coded CUDA in one file: [{file, line, code, suggestion}]."""
    try:
        src = open(path, encoding="utf-8").read()
        tree = ast.parse(src, filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    lines = src.splitlines()
    out = []

    def add(node, what, sugg):
        ln = getattr(node, "lineno", 0)
        out.append({"file": path, "line": ln, "finding": what, "code": lines[ln - 1].strip() if 0 < ln <= len(lines) else "",
                    "suggestion": sugg})

    seen_attr = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "cuda" and _dotted(f) != "torch.cuda":
                add(node, ".cuda()", ".to(device) with device = torch.accelerator.current_accelerator() (or 'neuron')")
            for kw in node.keywords:
                if kw.arg == "device" and _is_cuda_str(kw.value):
                    add(node, f'device="{kw.value.value}"', 'device="neuron" (or torch.accelerator.current_accelerator())')
            name = _dotted(f)
            if name in ("torch.device", "device") and node.args and _is_cuda_str(node.args[0]):
                add(node, f'torch.device("{node.args[0].value}")', 'torch.device("neuron")')
            if isinstance(f, ast.Attribute) and f.attr == "to" and node.args and _is_cuda_str(node.args[0]):
                add(node, f'.to("{node.args[0].value}")', '.to("neuron")')
        elif isinstance(node, ast.Attribute):
            name = _dotted(node)
            if not name or id(node) in seen_attr:
                continue
            if name.startswith("torch.cuda.") and name.count(".") == 2:
                api = name.split(".")[2]
                sugg = ("torch.amp / torch.autocast('neuron')" if api in ("amp",) else
                        f"torch.neuron.{api} (or torch.accelerator.*)")
                add(node, name, sugg)
            elif name.startswith("torch.backends.cudnn"):
                add(node, name, _CUDA_ONLY["cudnn"])
                # the inner torch.backends.cudnn of torch.backends.cudnn.benchmark: report once
                v = node.value
                while isinstance(v, ast.Attribute):
                    seen_attr.add(id(v))
                    v = v.value
        elif isinstance(node, ast.Constant) and node.value == "nccl":
            add(node, '"nccl"', _CUDA_ONLY["nccl"])
    out.sort(key=lambda x: x["line"])
    return out


def _local_modules(script):
    """The script and the modules it imports that live under its directory (its own code)."""
    base = os.path.dirname(os.path.abspath(script))
    files, todo = [], [os.path.abspath(script)]
    while todo:
        f = todo.pop()
        if f in files:
            continue
        files.append(f)
        try:
            tree = ast.parse(open(f, encoding="utf-8").read())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif isinstance(node, ast.ImportFrom) and node.level:
                names = [node.module or ""] + [a.name for a in node.names]
            for n in names:
                rel = n.replace(".", os.sep)
                for cand in (os.path.join(base, rel + ".py"), os.path.join(base, rel, "__init__.py")):
                    if rel and os.path.isfile(cand):
                        todo.append(os.path.abspath(cand))
    return files


# ---- check: the run ---------------------------------------------------------------------------------

def _fallback_times(prof, fallback_ops):
    """{op: (calls, total CPU ms)} of the fallback ops from a CPU profile (keys without overloads).  A fallback
    call is recorded twice, the neuron op and inside it the CPU kernel the fallback runs under the same name:
    only the outer record counts."""
    want = {op.split(".")[0] for op in fallback_ops}
    out = {}
    for e in prof.events():
        if e.name in want and not (e.cpu_parent is not None and e.cpu_parent.name == e.name):
            c, ms = out.get(e.name, (0, 0.0))
            out[e.name] = (c + 1, ms + e.cpu_time_total / 1000.0)
    return out


class _Progress:
    """The progress line of `check` on stderr while the script runs: elapsed time, ATen ops seen so far (of
    them through the fallback) and peak device memory; rewritten in place every second on a terminal, a
    new line every `every` seconds otherwise (a CI log)."""

    def __init__(self, torchneuron, torch, every=15.0):
        import threading

        self.tn, self.torch, self.t0 = torchneuron, torch, time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.every = 1.0 if self.tty else every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="torchneuron-check-progress", daemon=True)

    def line(self):
        peak = self.torch.neuron.max_memory_allocated() if self.torch.neuron.is_available() else 0
        return (f"[torchneuron check] {time.perf_counter() - self.t0:.0f} s: {len(self.tn.get_executed_ops())} ATen ops, "
                f"{len(self.tn.get_fallback_ops())} through the fallback, peak {peak / 2**20:.1f} MiB")

    def _run(self):
        while not self.stop.wait(self.every):
            print(("\r" if self.tty else "") + self.line(), end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=5)
        if self.tty:
            print(file=sys.stderr)


def run_check(script, args, profile_ops=True, progress_every=15.0):
    import torch
    import torchneuron

    findings = [f for m in _local_modules(script) for f in scan_source(m)]
    torchneuron.clear_op_tracking()
    if torch.neuron.is_available():
        torch.neuron.reset_peak_memory_stats()
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [script] + list(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python SCRIPT` does
    err = None
    t0 = time.perf_counter()
    prof = None
    print(f"[torchneuron check] running {script} ...", file=sys.stderr, flush=True)
    try:
        if profile_ops:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        try:
            with _Progress(torchneuron, torch, progress_every):
                runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                err = f"SystemExit({e.code})"
        except Exception as e:  # the report still says what ran
            err = f"{type(e).__name__}: {e}"
    finally:
        if prof is not None:
            prof.__exit__(None, None, None)
        sys.argv, sys.path[:] = old_argv, old_path
    secs = time.perf_counter() - t0
    ran = torchneuron.get_executed_ops()
    fb = torchneuron.get_fallback_ops()
    times = _fallback_times(prof, fb) if prof is not None else {}
    native_calls = {}
    if prof is not None:
        fb_keys = {op.split(".")[0] for op in fb}
        native_calls = {e.key: e.count for e in prof.key_averages()
                        if e.key.startswith("aten::") and e.key not in fb_keys and
                        any(r.split(".")[0] == e.key for r in ran)}
    dyn = {}
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters

        dyn = {"graphs": int(counters["stats"].get("unique_graphs", 0)),
               "graph_breaks": {str(k): int(v) for k, v in counters["graph_break"].items()},
               "recompiles": {str(k): int(v) for k, v in counters.get("recompiles", {}).items()}}
    rep = {
        "script": script, "seconds": round(secs, 3), "error": err,
        "ops": {"ran": len(ran), "native": sorted(ran - fb), "fallback": sorted(fb)},
        "native_calls": native_calls,
        "fallback_calls": {k: {"calls": c, "ms": round(ms, 3)} for k, (c, ms) in sorted(times.items())},
        "compile": dyn,
        "peak_device_memory_bytes": torch.neuron.max_memory_allocated() if torch.neuron.is_available() else 0,
        # tensors created on neuron per dtype: float64 / int64 are computed natively here (the system we
        # implement narrows them to 32 bits)
        "dtypes": {k: {"tensors": n, "bytes": b} for k, (n, b) in sorted(torchneuron.get_created_dtypes().items())},
        "cuda_findings": findings,
        "scanned_files": _local_modules(script),
    }
    return rep


def _print_report(rep, out=sys.stdout):
    p = lambda *a: print(*a, file=out)  # noqa: E731
    o = rep["ops"]
    p(f"\n[torchneuron check] {rep['script']}: {rep['seconds']:.2f} s"
      + (f", stopped with {rep['error']}" if rep["error"] else ""))
    p(f"  ATen ops: {o['ran']} ran on neuron, {len(o['native'])} native, {len(o['fallback'])} through the CPU fallback")
    for op in o["fallback"]:
        t = rep["fallback_calls"].get(op.split(".")[0])
        p(f"    fallback: {op}" + (f"  ({t['calls']} calls, {t['ms']:.2f} ms)" if t else ""))
    c = rep["compile"]
    if c:
        p(f"  torch.compile: {c['graphs']} graphs, {sum(c['graph_breaks'].values())} graph breaks, "
          f"{sum(c['recompiles'].values())} recompiles")
        for reason, n in list(c["graph_breaks"].items())[:5]:
            p(f"    break x{n}: {reason[:110]}")
    p(f"  peak device memory: {rep['peak_device_memory_bytes'] / 2**20:.1f} MiB")
    d = rep.get("dtypes", {})
    if d:
        p("  tensors created on neuron: " + ", ".join(
            f"{k.replace('torch.', '')} {v['tensors']} ({v['bytes'] / 2**20:.1f} MiB)" for k, v in
            sorted(d.items(), key=lambda kv: -kv[1]["bytes"])[:6]))
    wide = [k.replace("torch.", "") for k in ("torch.float64", "torch.int64") if k in d]
    if wide:
        p(f"  64-bit: {' and '.join(wide)} used; computed natively in 64 bits on neuron (not narrowed to 32)")
    f = rep["cuda_findings"]
    p(f"  hard-coded CUDA: {len(f)} site(s) in {len(rep['scanned_files'])} file(s)")
    for x in f[:12]:
        p(f"    {os.path.relpath(x['file'])}:{x['line']}: {x['finding']} -> {x['suggestion']}")
    if len(f) > 12:
        p(f"    ... {len(f) - 12} more (see --json)")


def _check(a):
    rep = run_check(a.script, a.args, profile_ops=not a.no_profile, progress_every=a.progress_every)
    _print_report(rep)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rep, fh, indent=2)
    if a.strict and (rep["ops"]["fallback"] or rep["cuda_findings"] or rep["error"] or
                     (rep["compile"] and sum(rep["compile"]["graph_breaks"].values()))):
        return 2
    return 1 if rep["error"] else 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="torchneuron", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("info", help="devices and settings")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.add_argument("--watch", action="store_true",
                   help="live memory and queue activity of every process using neuron devices (like nvidia-smi)")
    i.add_argument("--interval", type=float, default=1.0, help="seconds between --watch refreshes")
    i.add_argument("--count", type=int, help="--watch refreshes before exiting (default: until interrupted)")
    c = sub.add_parser("check", help="run a script and report what it needs from the backend")
    c.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    c.add_argument("--strict", action="store_true",
                   help="exit 2 on any fallback op, hard-coded CUDA, graph break or error (CI gate)")
    c.add_argument("--no-profile", action="store_true", help="skip per-op call counts and fallback times")
    c.add_argument("--progress-every", type=float, default=15.0, metavar="S",
                   help="seconds between progress lines when stderr is not a terminal (default 15)")
    c.add_argument("script")
    c.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("parity", help="run a training script on neuron and on the CPU and compare the curves", add_help=False)
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "parity":  # its own parser (torchneuron/parity.py): the script's flags pass through
        from . import parity
        return parity.main(argv[1:])
    a = ap.parse_args(argv)
    if a.cmd == "info":
        if a.watch:
            try:
                return _watch(a.interval, a.count, a.json)
            except KeyboardInterrupt:
                return 0
        return _info(a.json)
    return _check(a)


if __name__ == "__main__":
    sys.exit(main())
