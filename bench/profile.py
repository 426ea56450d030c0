"""Profiles of the workloads where `neuron` is slower than PyTorch CPU: where does the time go?

    python -m bench.profile                      # every workload of the latest report with ratio < 1
    python -m bench.profile --only "add [256K],mm bf16 128x768x768"
    python -m bench.profile --match 'SDPA|AdamW' --seconds 1

Reads the latest benchmark report (docs/benchmarks.json, written by `python -m bench` beside
docs/benchmarks.md; the Markdown tables are parsed when there is no JSON) and picks every workload whose
median cpu/neuron ratio is below 1.  Each one runs twice in a fresh subprocess, once on `neuron` and once
on the CPU, with the workload definition of bench/ (bench.cli.find_case: the same Case as the report):
setup, warm-up, calibration to --seconds of steps, and only that steady-state loop is recorded by
`perf record -g` (perf starts with its events disabled, the child switches them on and off through
perf's control FIFO, so import torch, setup and warm-up are not in the profile).  Without perf, valgrind
--tool=callgrind is used the same way (instrumentation switched on by callgrind_control for the loop),
with fewer steps: it runs ~50x slower.

The samples (self time, `perf report --no-children --sort dso,sym`) are summarised into the top symbols
and into categories: our kernel library (nk_*, every function of csrc/kernels), our runtime (nrt_*,
csrc/runtime; its spin/park/wait/hand-off functions separately), the torchneuron C++ glue, the PyTorch
dispatcher/ATen glue (libtorch_cpu, libc10), ATen's CPU kernels, oneDNN/MKL/OpenMP, the Python
interpreter, libc (memcpy/memset, malloc, thread sync) and the Linux kernel (page faults, syscalls).
For the neuron run, the runtime's kernel trace (torchneuron.profiler.kernel_trace) gives the device-time
split per kernel and how busy the device queues were.  Output: docs/profiles.md, one section per
workload, with a place for a human explanation.
"""
import argparse
import collections
import gc
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICES = ("neuron", "cpu")
HUMAN = "_(to be written: why neuron is slower here, and what would fix it)_"
CALLGRIND_SLOWDOWN = 50


# =========================================================================================== child
def _sync(dev):
    import torch
    if dev == "neuron":
        torch.neuron.synchronize()


def _timed(fn, n, dev):
    _sync(dev)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    _sync(dev)
    return time.perf_counter() - t0


class _Window:
    """Switches the profiler on and off around the measured loop: perf's control FIFO (TN_PROFILE_CTL /
    TN_PROFILE_ACK), or a handshake with the parent over stdin/stdout (callgrind: the parent runs
    callgrind_control), or nothing (no profiler)."""

    def __init__(self):
        self.ctl = os.environ.get("TN_PROFILE_CTL")
        self.ack = os.environ.get("TN_PROFILE_ACK")
        self.handshake = os.environ.get("TN_PROFILE_HANDSHAKE") == "1"
        self.fd_ctl = self.fd_ack = None

    def _cmd(self, word):
        if self.ctl:
            if self.fd_ctl is None:
                self.fd_ctl = os.open(self.ctl, os.O_WRONLY)
                self.fd_ack = os.open(self.ack, os.O_RDONLY)
            os.write(self.fd_ctl, (word + "\n").encode())
            os.read(self.fd_ack, 16)           # "ack\n": perf has applied the command
        elif self.handshake:
            print(f"TN_PROFILE {word}", flush=True)
            sys.stdin.readline()               # the parent has run callgrind_control

    def begin(self):
        self._cmd("enable")

    def end(self):
        self._cmd("disable")


def _trace_split(dev_fn, n, top=8):
    """Run n steps under the runtime's kernel trace: per-kernel calls and time, and how much of the wall time
    the device queues were busy (union of kernel intervals)."""
    import torchneuron
    from torchneuron import profiler
    t0 = time.perf_counter()
    with profiler.kernel_trace() as tr:
        for _ in range(n):
            dev_fn()
    wall = time.perf_counter() - t0
    recs = tr.records
    summ = tr.summary()
    total = sum(v[1] for v in summ.values())
    spans = sorted((r[3], r[4]) for r in recs)
    busy, cur0, cur1 = 0, None, None
    for a, b in spans:
        if cur1 is None or a > cur1:
            if cur1 is not None:
                busy += cur1 - cur0
            cur0, cur1 = a, b
        else:
            cur1 = max(cur1, b)
    if cur1 is not None:
        busy += cur1 - cur0
    kernels = [{"name": k, "calls_per_step": c / n, "ms_per_step": ns / n / 1e6,
                "share": ns / total if total else 0.0} for k, (c, ns) in list(summ.items())[:top]]
    rest = list(summ.items())[top:]
    if rest:
        ns = sum(v[1] for _, v in rest)
        kernels.append({"name": f"({len(rest)} other kernels)", "calls_per_step": sum(v[0] for _, v in rest) / n,
                        "ms_per_step": ns / n / 1e6, "share": ns / total if total else 0.0})
    del torchneuron
    return {"steps": n, "wall_s_per_step": wall / n, "kernel_s_per_step": total / 1e9 / n,
            "busy_s_per_step": busy / 1e9 / n, "launches_per_step": len(recs) / n,
            "dropped": len(recs) >= 16000, "kernels": kernels}


def child_main(a):
    import torch
    import torchneuron  # noqa: F401  (registers the device)
    from .cli import find_case
    out = {"name": a.name, "device": a.device, "quick": a.quick, "pid": os.getpid()}
    try:
        found = None
        if a.group != "compiled":
            try:
                found = find_case(a.name, a.quick, a.group or None)
            except KeyError:
                if a.group:
                    raise
        if found is not None:
            out["group"], case = found
            dev = a.device
            fn = case.setup(dev)
            if isinstance(fn, tuple):
                fn = fn[0]
        else:                                  # a torch.compile workload of bench/compiled.py
            from . import compiled
            mode = {"neuron": "compiled neuron", "cpu": a.cpu_mode}[a.device]
            for mk in (compiled.gpt_setups, compiled.bert_setups):
                cname, setup, _flops, _outs = mk(a.quick)
                if cname == a.name:
                    break
            else:
                raise KeyError(f"no workload named {a.name!r} in bench/ ({'quick' if a.quick else 'full'} sizes)")
            fn, check = setup(mode)
            check()
            dev = "neuron" if a.device == "neuron" else "cpu"
            out["group"], out["mode"] = "compiled", mode
        # warm-up and calibration: steps for --seconds of steady state
        cal = min(0.2, max(0.05, a.seconds / 4))
        t1 = _timed(fn, 1, dev)
        w = max(1, min(5, int(cal / max(t1, 1e-9))))
        tw = _timed(fn, w, dev) / w
        if tw < cal / 4:
            k = max(1, int(cal / max(tw, 1e-9)))
            tw = _timed(fn, k, dev) / k
        steps = max(1, int(round(a.seconds / max(tw, 1e-9))))
        if a.steps:
            steps = a.steps
        out["calibrated_s_per_step"] = tw
        if dev == "neuron" and not a.no_trace:
            try:
                tr1 = _trace_split(fn, 1)
                per = max(1.0, tr1["launches_per_step"])
                nt = max(1, min(steps, int(15000 / per), int(min(0.5, a.seconds / 2) / max(tw, 1e-9)) + 1))
                out["trace"] = _trace_split(fn, nt)
            except Exception as e:  # noqa: BLE001
                out["trace_error"] = f"{type(e).__name__}: {e}"[:200]
        torchneuron.clear_op_tracking()
        win = _Window()
        gc.collect()
        gc.disable()
        _sync(dev)
        win.begin()
        t0 = time.perf_counter()
        c0 = time.process_time()
        for _ in range(steps):
            fn()
        _sync(dev)
        dt = time.perf_counter() - t0
        dc = time.process_time() - c0
        win.end()
        gc.enable()
        out.update(steps=steps, wall_s=dt, s_per_step=dt / steps, cpu_s=dc,
                   fallbacks=sorted(torchneuron.get_fallback_ops()))
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    with open(a.result, "w") as f:
        json.dump(out, f, indent=1)
    return 0


# ========================================================================================= reports
def _parse_time(s):
    m = re.match(r"^\s*([\d.]+)\s*(us|ms|s)\s*$", s or "")
    if not m:
        return None
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def load_report(path):
    """Flat list of workload dicts (name, group, median_s, ratio_median, ...) and the report's meta, from
    docs/benchmarks.json or, failing that, the tables of docs/benchmarks.md."""
    jpath = os.path.splitext(path)[0] + ".json"
    if os.path.exists(jpath):
        with open(jpath) as f:
            rep = json.load(f)
        rows = [r for g in rep.get("groups", []) for r in g["results"]] + list(rep.get("compiled", []))
        meta = dict(rep.get("meta", {}))
        meta["source"] = os.path.relpath(jpath, ROOT)
        meta["quick"] = meta.get("mode") == "quick"
        meta["machine"] = rep.get("machine", {})
        return rows, meta
    if not os.path.exists(path):
        raise FileNotFoundError(f"no benchmark report: neither {jpath} nor {path} (run `make bench` first)")
    from .cli import GROUPS
    titles = {t: k for k, t, *_ in GROUPS}
    rows, group, meta = [], None, {"source": os.path.relpath(path, ROOT), "quick": False}
    with open(path) as f:
        for ln in f:
            if ln.startswith("Generated by"):
                meta["generated"] = ln.strip()
                meta["quick"] = "(quick" in ln
            if ln.startswith("## "):
                group = titles.get(ln[3:].strip()) or ("compiled" if "torch.compile" in ln else None)
                continue
            if group == "compiled":         # "**name**" then "| mode | median | ..." rows
                m = re.match(r"^\*\*(.+)\*\*\s*$", ln.strip())
                if m:
                    rows.append({"name": m.group(1), "group": "compiled", "modes": {}, "median_s": {}})
                elif ln.startswith("| ") and rows and rows[-1]["group"] == "compiled":
                    c = [x.strip() for x in ln.strip().strip("|").split("|")]
                    t = _parse_time(c[1]) if len(c) > 1 else None
                    if t is not None:
                        w = rows[-1]
                        w["modes"][c[0]] = {"median": t}
                        cpu = [w["modes"][k]["median"] for k in ("CPU eager", "inductor CPU") if k in w["modes"]]
                        neu = w["modes"].get("compiled neuron", {}).get("median")
                        w["median_s"] = {"neuron": neu, "cpu": min(cpu) if cpu else None}
                        w["ratio_median"] = min(cpu) / neu if (neu and cpu) else None
                continue
            if group is None or not ln.startswith("| ") or ln.startswith("| workload"):
                continue
            c = [x.strip() for x in re.split(r"(?<!\\) \| ", ln.strip().strip("|").strip())]
            if len(c) < 10:
                continue
            try:
                rmed = float(c[8])
            except ValueError:
                rmed = None
            rows.append({"name": c[0].replace("\\|", "|"), "group": group,
                         "median_s": {"neuron": _parse_time(c[1]), "cpu": _parse_time(c[2])},
                         "ratio_median": rmed, "note": c[9]})
    return rows, meta


def _split_names(spec, known):
    """--only: comma-separated workload names, where a name may itself contain commas ("AdamW step, 16 x
    1M params (default impl)"): pieces are joined until they form a known name."""
    out, cur = [], ""
    for piece in spec.split(","):
        cur = f"{cur},{piece}" if cur else piece
        if cur.strip() in known:
            out.append(cur.strip())
            cur = ""
    if cur.strip():                    # not in the report: taken as one name (the child looks it up in bench/)
        print(f"bench.profile: {cur.strip()!r} is not in the report; profiling it by that name", file=sys.stderr)
        out.append(cur.strip())
    return out


# ========================================================================================= symbols
def _nm_symbols(objdir):
    """Names of the functions defined in the object files under objdir (both kernels and runtime)."""
    names = set()
    if not os.path.isdir(objdir) or not shutil.which("nm"):
        return names
    files = [os.path.join(objdir, f) for f in sorted(os.listdir(objdir)) if f.endswith(".o")]
    if not files:
        return names
    r = subprocess.run(["nm", "--defined-only", *files], capture_output=True, text=True)
    for ln in r.stdout.splitlines():
        p = ln.split()
        if len(p) == 3 and p[1] in "tTwW":
            names.add(p[2])
    return names


class Classifier:
    """(dso, symbol) -> category."""

    # pool_worker / queue_worker: the worker loops, whose self time is their inlined spin-for-work loops
    WAIT = re.compile(r"spin|park|wait|relax|help_until|sleep|yield|cond_|futex|sem_|idle|_worker$", re.I)

    def __init__(self):
        self.kern = _nm_symbols(os.path.join(ROOT, "build", "obj", "kernels"))
        self.rt = _nm_symbols(os.path.join(ROOT, "build", "obj", "runtime"))

    @staticmethod
    def base(sym):
        s = sym.split("(")[0].strip()
        return re.split(r"\.(constprop|isra|part|cold|lto_priv|localalias)", s)[0]

    def __call__(self, dso, sym):
        b = self.base(sym)
        low = sym.lower()
        ours = dso.startswith("_C.cpython") or "torchneuron" in dso
        if b in self.kern or b.startswith("nk_"):
            return "nk kernels"
        if b in self.rt or b.startswith("nrt_"):
            return "nrt runtime: spin/park/wait/hand-off" if self.WAIT.search(b) else "nrt runtime: queue/alloc/launch"
        if dso == "[kernel.kallsyms]" or dso.startswith("[kernel"):
            if re.search(r"clear_page|page_fault|folio|pte|do_anonymous|handle_mm|lru|zap_|unmap|memcg|mmap|"
                         r"__do_fault|rmqueue|alloc_pages", low):
                return "kernel: page faults/mmap"
            if re.search(r"futex|schedule|finish_task|sched|switch_to|try_to_wake", low):
                return "kernel: futex/scheduler"
            return "kernel: syscalls/other"
        if "libgomp" in dso or "libiomp" in dso or re.match(r"(gomp|__kmp|kmp_|omp_|__omp)", b, re.I):
            return "OpenMP runtime"
        if "mkl" in dso or b.startswith("mkl_"):
            return "MKL"
        if "dnnl" in low or "mkldnn" in low or "onednn" in low or "brgemm" in low or "xbyak" in low:
            return "oneDNN"
        if dso.startswith("[JIT]") or dso in ("//anon", "[anon]") or dso.startswith("anon"):
            return "JIT code (oneDNN kernels; anonymous memory)"
        if dso == "[unknown]":
            return "unresolved"
        if dso == "[vdso]":
            return "vdso (clock_gettime)"
        if "libpython" in dso or re.match(r"python3(\.\d+)?$", dso):
            return "Python interpreter"
        if dso.startswith("libtorch_python"):
            return "PyTorch Python bindings"
        if dso.startswith(("libtorch", "libc10", "libsleef")) or (not ours and dso.startswith("_C.cpython")):
            if re.search(r"at::native::|at::vec::|sleef|cpu_kernel|vectorized|avx2|avx512|_kernel_impl|"
                         r"cpublas|gemm|reduce|loop", low) and "dispatch" not in low:
                return "ATen CPU kernels"
            return "PyTorch dispatcher/ATen glue"
        if dso.startswith(("libc.so", "libc-", "libpthread", "ld-linux", "libm.so", "libm-")):
            if re.search(r"memcpy|memmove|memset|memcmp|strlen", low):
                return "libc memcpy/memset"
            if re.search(r"malloc|free|_int_|calloc|realloc|tcache|arena|mmap|munmap|brk", low):
                return "libc malloc/free"
            if self.WAIT.search(b) or re.search(r"pthread|lll_|mutex|__sched", low):
                return "libc thread sync"
            return "libc other"
        if ours:
            return "torchneuron C++ glue"
        if dso.startswith(("libstdc++", "libgcc")):
            return "C++ runtime"
        return "other: " + dso


# ============================================================================================ perf
_LINE = re.compile(r"^\s*([\d.]+)%\s+(.+?)\s+\[(.)\]\s+(.*?)\s*$")   # "[JIT] tid 123" has spaces


def _merge_unresolved(syms):
    """Addresses without a symbol (stripped libraries such as libgomp, JIT code) merged into one row per
    library, so that the top-symbol table is not a list of hex addresses."""
    out, merged = [], {}
    for x in syms:
        if re.match(r"^0x[0-9a-f]+$", x["sym"]):
            if x["dso"] in merged:
                merged[x["dso"]]["share"] += x["share"]
                continue
            x = dict(x, sym=f"(code without symbols in {x['dso']})")
            merged[x["dso"]] = x
        out.append(x)
    return sorted(out, key=lambda x: -x["share"])


def _perf_report(data, sort, extra=()):
    return subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", sort, "-g", "none",
                           "--percent-limit", "0", *extra], capture_output=True, text=True, timeout=600)


def perf_threads(data):
    """[(tid, share)] of the samples per thread (`--sort pid` lists threads as 'tid:comm')."""
    out = []
    for ln in _perf_report(data, "pid").stdout.splitlines():
        m = re.match(r"^\s*([\d.]+)%\s+(\d+):", ln)
        if m:
            out.append((int(m.group(2)), float(m.group(1)) / 100.0))
    return out


def perf_summary(data, classify, top=12, main_tid=None):
    """Top symbols and categories of the samples; with main_tid, also the main (Python) thread's share and its
    own categories (the host-side critical path of eager code)."""
    prof = _perf_summary(data, classify, top)
    if main_tid and "error" not in prof:
        th = perf_threads(data)
        prof["threads"] = len(th)
        prof["main_share"] = sum(sh for tid, sh in th if tid == main_tid)
        mp = _perf_summary(data, classify, top, ("--tid", str(main_tid)))
        if "error" not in mp:   # perf keeps the shares relative to all samples: make them the thread's own
            tot = sum(c["share"] for c in mp["categories"]) or 1.0
            prof["main_categories"] = [dict(c, share=c["share"] / tot) for c in mp["categories"][:6]]
    return prof


def _perf_summary(data, classify, top=12, extra=()):
    r = _perf_report(data, "dso,sym", extra)
    # one section per event ("# Samples: N  of event 'cpu-clock:ppp'"); --control adds a 'dummy' event
    sections, cur = [], None
    for ln in r.stdout.splitlines():
        m = re.match(r"^# Samples: (\d+\S*)\s+of event '([^']*)'", ln)
        if m:
            n = m.group(1)
            n = int(float(n[:-1]) * 1000) if n.endswith("K") else int(float(n[:-1]) * 1e6) if n.endswith("M") else int(n)
            cur = {"event": m.group(2), "samples": n, "syms": []}
            sections.append(cur)
            continue
        m = _LINE.match(ln)
        if m and cur is not None:
            pct, dso, sym = float(m.group(1)), re.sub(r"^\[JIT\] tid \d+$", "[JIT]", m.group(2)), m.group(4)
            cur["syms"].append({"share": pct / 100.0, "dso": dso, "sym": sym, "cat": classify(dso, sym)})
    sections = [x for x in sections if "dummy" not in x["event"] and x["syms"]]
    best = max(sections, key=lambda x: x["samples"]) if sections else {"syms": [], "samples": 0, "event": None}
    syms, samples = _merge_unresolved(best["syms"]), best["samples"]
    if not syms:
        return {"error": "perf report gave no samples: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
    cats = collections.Counter()
    for s in syms:
        cats[s["cat"]] += s["share"]
    return {"tool": "perf", "event": best["event"], "samples": samples, "symbols": syms[:top],
            "categories": [{"name": k, "share": v} for k, v in cats.most_common()]}


def callgrind_summary(outfile, classify, top=12):
    r = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", outfile],
                       capture_output=True, text=True, timeout=600)
    total = None
    syms = []
    for ln in r.stdout.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS", ln)
        if m:
            total = int(m.group(1).replace(",", ""))
            continue
        m = re.match(r"^\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(\S+?):(.*?)\s*(\[(.*)\])?\s*$", ln)
        if m and total:
            pct, src, sym = float(m.group(2)), m.group(3), m.group(4).strip()
            obj = os.path.basename(m.group(6)) if m.group(6) else (
                "libpython3" if re.search(r"/Python-3[^/]*/|/(Python|Objects|Modules)/", src) else "[unknown]")
            syms.append({"share": pct / 100.0, "dso": obj, "sym": sym, "cat": classify(obj, sym)})
    if not syms:
        return {"error": "callgrind_annotate gave nothing: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
    cats = collections.Counter()
    for s in syms:
        cats[s["cat"]] += s["share"]
    return {"tool": "callgrind (instructions)", "samples": total, "symbols": syms[:top],
            "categories": [{"name": k, "share": v} for k, v in cats.most_common()]}


def pick_tool(want):
    if want in ("auto", "perf") and shutil.which("perf"):
        r = subprocess.run(["perf", "record", "-o", "/dev/null", "-q", "--", "true"], capture_output=True, text=True)
        if r.returncode == 0:
            return "perf"
        if want == "perf":
            raise SystemExit(f"bench.profile: perf does not work here: {r.stderr.strip()[:300]}")
    if want in ("auto", "callgrind") and shutil.which("valgrind") and shutil.which("callgrind_annotate"):
        return "callgrind"
    return None


def run_one(w, dev, a, tool, classify, tmp):
    """Profile one workload on one device in a fresh subprocess; returns the child's JSON + 'profile'."""
    tag = f"{re.sub(r'[^A-Za-z0-9]+', '_', w['name'])[:60]}_{dev}"
    res = os.path.join(tmp, tag + ".json")
    seconds = a.seconds if tool != "callgrind" else a.seconds / CALLGRIND_SLOWDOWN
    cmd = [sys.executable, "-m", "bench.profile", "--child", w["name"], "--device", dev, "--result", res,
           "--seconds", str(seconds), "--group", w.get("group") or ""]
    if a.quick_sizes:
        cmd.append("--quick")
    if a.steps:
        cmd += ["--steps", str(max(1, a.steps // CALLGRIND_SLOWDOWN) if tool == "callgrind" else a.steps)]
    if w.get("group") == "compiled":
        cmd += ["--cpu-mode", w.get("cpu_mode", "inductor CPU")]
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    prof = None
    if tool == "perf":
        ctl, ack, data = (os.path.join(tmp, tag + s) for s in (".ctl", ".ack", ".data"))
        os.mkfifo(ctl)
        os.mkfifo(ack)
        env.update(TN_PROFILE_CTL=ctl, TN_PROFILE_ACK=ack)
        p = subprocess.run(["perf", "record", "-g", "-F", str(a.freq), "-D", "-1", "--control", f"fifo:{ctl},{ack}",
                            "-q", "-o", data, "--", *cmd], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=a.timeout)
        if os.path.exists(data) and os.path.exists(res):
            with open(res) as f:
                main_tid = json.load(f).get("pid")
            prof = perf_summary(data, classify, a.top, main_tid)
    elif tool == "callgrind":
        out = os.path.join(tmp, tag + ".callgrind")
        env["TN_PROFILE_HANDSHAKE"] = "1"
        errf = open(os.path.join(tmp, tag + ".stderr"), "w+")
        vg = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                               *cmd], env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=errf, text=True)
        for ln in vg.stdout:
            if ln.startswith("TN_PROFILE "):
                on = ln.split()[1] == "enable"
                subprocess.run(["callgrind_control", "--instr=" + ("on" if on else "off"), str(vg.pid)],
                               capture_output=True, timeout=120)
                vg.stdin.write("\n")
                vg.stdin.flush()
        vg.wait(timeout=a.timeout)
        errf.seek(0)
        err = errf.read()
        errf.close()
        p = subprocess.CompletedProcess(vg.args, vg.returncode, "", err)
        outs = [f for f in os.listdir(tmp) if f.startswith(tag + ".callgrind")]
        if outs and os.path.exists(res):
            prof = callgrind_summary(os.path.join(tmp, sorted(outs)[-1]), classify, a.top)
    else:
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=a.timeout)
    if os.path.exists(res):
        with open(res) as f:
            r = json.load(f)
    else:
        r = {"error": f"the child failed (exit {p.returncode}): {(p.stderr or '').strip()[-300:]}"}
    r["profile"] = prof
    r["elapsed_s"] = time.perf_counter() - t0
    return r


# ========================================================================================== report
def _pct(x):
    return f"{100 * x:.0f}%" if x >= 0.095 else f"{100 * x:.1f}%"


def _ms(t):
    if t is None:
        return "-"
    return f"{t * 1e6:.2f} us" if t < 1e-3 else f"{t * 1e3:.3f} ms" if t < 1 else f"{t:.3f} s"


def _short_sym(sym, n=60):
    if sym.startswith("("):
        return sym
    s = sym.replace("(anonymous namespace)", "{anon}")
    s = re.sub(r"\(.*\)(\s*const)?$", "", s)         # drop C++ argument lists
    s = re.sub(r"<[^<>]*(<[^<>]*>[^<>]*)*>", "<>", s)  # collapse template arguments
    return s if len(s) <= n else s[:n - 1] + "…"


def where_line(dev, r):
    """'neuron: 62% nk kernels (nk_gemm_bf16_kernel 50%), 21% nrt runtime: spin/park/wait/hand-off'."""
    prof = r.get("profile") or {}
    if r.get("error"):
        return f"{dev}: error ({r['error'][:80]})"
    if not prof or prof.get("error"):
        return f"{dev}: no profile"
    parts = []
    for c in prof["categories"][:3]:
        if c["share"] < 0.05:
            break
        tops = [s for s in prof["symbols"] if s["cat"] == c["name"] and s["share"] >= 0.03][:2]
        t = f"{_pct(c['share'])} {c['name']}"
        if tops:
            t += " (" + ", ".join(f"`{_short_sym(s['sym'], 40)}` {_pct(s['share'])}" for s in tops) + ")"
        parts.append(t)
    return f"{dev}: " + ", ".join(parts)


def md_section(w, runs, report_meta):
    name = w["name"]
    med = w.get("median_s") or {}
    lines = [f"## {name}", ""]
    rm = w.get("ratio_median")
    lines.append(f"- **report** ({report_meta.get('source', '?')}): neuron {_ms(med.get('neuron'))}, "
                 f"cpu {_ms(med.get('cpu'))} per step, median ratio cpu/neuron "
                 f"**{rm:.2f}**" if rm is not None else f"- **report**: no ratio")
    if w.get("group") == "compiled":
        lines.append(f"- compiled workload: neuron = `torch.compile(backend=\"neuron\")`, cpu = "
                     f"{w.get('cpu_mode', 'inductor CPU')}")
    for dev in DEVICES:
        r = runs[dev]
        if r.get("error"):
            lines.append(f"- **{dev}**: ERROR {r['error']}")
            continue
        prof = r.get("profile") or {}
        ncores = (r["cpu_s"] / r["wall_s"]) if r.get("wall_s") else None
        lines.append(f"- **{dev}** profiled: {r['steps']} steps in {r['wall_s']:.2f} s = {_ms(r['s_per_step'])} per "
                     f"step under the profiler, process CPU time {r['cpu_s']:.2f} s"
                     + (f" ({ncores:.1f} cores busy)" if ncores is not None else "")
                     + (f"; {prof.get('samples')} {('samples' if prof.get('tool') == 'perf' else 'instructions')}"
                        if prof.get("samples") else "")
                     + (f"; fallback ops: {', '.join(r['fallbacks'])}" if r.get("fallbacks") else ""))
        if prof.get("main_share") is not None and prof["main_share"] >= 0.02:
            mc = ", ".join(f"{_pct(c['share'])} {c['name']}" for c in prof.get("main_categories", [])[:4]
                           if c["share"] >= 0.03)
            lines.append(f"  - main (Python) thread: {_pct(prof['main_share'])} of the samples "
                         f"({prof.get('threads')} threads sampled)" + (f"; within it: {mc}" if mc else ""))
    lines.append("")
    lines.append("**Where the time goes** (automatic): " + "; ".join(where_line(d, runs[d]) for d in DEVICES) + ".")
    lines.append("")
    lines.append("**Explanation:** " + HUMAN)
    lines.append("")

    # categories side by side
    cats = {d: {c["name"]: c["share"] for c in ((runs[d].get("profile") or {}).get("categories") or [])}
            for d in DEVICES}
    order = sorted(set(cats["neuron"]) | set(cats["cpu"]), key=lambda k: -max(cats["neuron"].get(k, 0),
                                                                             cats["cpu"].get(k, 0)))
    order = [k for k in order if max(cats["neuron"].get(k, 0), cats["cpu"].get(k, 0)) >= 0.005]
    if order:
        lines.append("| category | neuron | cpu |")
        lines.append("|---|---:|---:|")
        for k in order:
            lines.append(f"| {k} | {_pct(cats['neuron'][k]) if k in cats['neuron'] else '-'} | "
                         f"{_pct(cats['cpu'][k]) if k in cats['cpu'] else '-'} |")
        lines.append("")
    # top symbols side by side
    sy = {d: ((runs[d].get("profile") or {}).get("symbols") or []) for d in DEVICES}
    n = max(len(sy["neuron"]), len(sy["cpu"]))
    if n:
        lines.append("| # | neuron: self | symbol (dso) | cpu: self | symbol (dso) |")
        lines.append("|---:|---:|---|---:|---|")

        def cell(s):
            if s is None:
                return "", ""
            sym = _short_sym(s["sym"]).replace("|", "\\|")
            return _pct(s["share"]), f"`{sym}` ({s['dso']})"
        for i in range(n):
            a = cell(sy["neuron"][i] if i < len(sy["neuron"]) else None)
            b = cell(sy["cpu"][i] if i < len(sy["cpu"]) else None)
            lines.append(f"| {i + 1} | {a[0]} | {a[1]} | {b[0]} | {b[1]} |")
        lines.append("")
    tr = runs["neuron"].get("trace")
    if tr:
        lines.append(f"Device time on neuron (runtime kernel trace, {tr['steps']} steps): "
                     f"{tr['launches_per_step']:.1f} kernel launches per step, kernels {_ms(tr['kernel_s_per_step'])} "
                     f"per step, queues busy {_ms(tr['busy_s_per_step'])} of {_ms(tr['wall_s_per_step'])} wall "
                     f"({_pct(tr['busy_s_per_step'] / tr['wall_s_per_step']) if tr['wall_s_per_step'] else '-'}; "
                     "the rest is host-side work: dispatch, glue, allocation, launch, synchronize)"
                     + ("; trace ring overflowed, oldest records lost" if tr.get("dropped") else "") + ".")
        lines.append("")
        lines.append("| kernel | calls/step | time/step | share of kernel time |")
        lines.append("|---|---:|---:|---:|")
        for k in tr["kernels"]:
            lines.append(f"| {k['name']} | {k['calls_per_step']:.1f} | {_ms(k['ms_per_step'] / 1e3)} | "
                         f"{_pct(k['share'])} |")
        lines.append("")
    elif runs["neuron"].get("trace_error"):
        lines.append(f"(kernel trace failed: {runs['neuron']['trace_error']})")
        lines.append("")
    return "\n".join(lines)


def build_md(sections, a, tool, report_meta, load0, load1, other, elapsed):
    from .report import machine_info
    info = machine_info()
    hdr = ["# Profiles of the workloads where neuron is slower than the CPU", "",
           f"Generated by `{' '.join(['python -m bench.profile', shlex.join(a.argv)]).strip()}` on "
           f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')} in {elapsed:.0f} s; regenerate with `make profile` after "
           "`make bench`.", "",
           f"- **report**: {report_meta.get('source', '?')}"
           + (f" ({report_meta.get('date')}, {report_meta.get('mode')} run)" if report_meta.get("date") else "")
           + f"; workloads: {a.selection}",
           f"- **profiler**: {tool_desc(tool, a)}",
           f"- **machine**: {info.get('cpu')}, {info.get('cores')}; torch {info.get('torch')}; git {info.get('git', '-')}",
           f"- **load average** (1/5/15 min): start {load0}, end {load1}"
           + (f"; other processes used {100 * other:.0f}% of all CPU time during the run" if other is not None else ""),
           "", "How to read a section: each workload ran in a fresh process per device (the bench's own setup), "
           f"warmed up, then ~{a.seconds:g} s of steps were recorded; only that loop is in the profile. "
           "Shares are of the **on-CPU samples of the whole process** (all threads: the Python thread, the "
           "neuron queue worker and kernel-pool threads, OpenMP/oneDNN threads), self time per function. Time a "
           "thread spends blocked (futex, sleep) is not sampled; time it spends spinning is. `cores busy` = "
           "process CPU time / wall time. The categories: `nk kernels` = every function of csrc/kernels, "
           "`nrt runtime` = csrc/runtime (its spin/park/wait functions separately), `torchneuron C++ glue` = "
           "the rest of our extension, `PyTorch dispatcher/ATen glue` = libtorch/libc10 outside the CPU kernels, "
           "`ATen CPU kernels` = at::native/at::vec compute loops, `kernel:` = the Linux kernel on behalf of "
           "the process (page faults zeroing fresh memory, futex wake-ups, syscalls). The device-time table "
           "for neuron comes from the runtime's kernel trace (`torchneuron.profiler.kernel_trace`), run "
           "separately right before the profiled loop.", ""]
    if a.note:
        hdr += [f"**Note:** {a.note}", ""]
    if other is not None and other >= 0.25:
        hdr += [f"**Note:** the machine was shared: other processes used {100 * other:.0f}% of all CPU time "
                "while this ran, so per-step times under the profiler are inflated; the shares (where each "
                "process's own CPU time goes) are much less affected. Treat this file as an example until it is "
                "regenerated on a quiet machine.", ""]
    toc = ["| workload | report: neuron | report: cpu | ratio | where the time goes (automatic) |",
           "|---|---:|---:|---:|---|"]
    for w, runs, _ in sections:
        med = w.get("median_s") or {}
        rm = w.get("ratio_median")
        where = "; ".join(where_line(d, runs[d]) for d in DEVICES).replace("|", "\\|")
        toc.append(f"| [{w['name']}](#{anchor(w['name'])}) | {_ms(med.get('neuron'))} | {_ms(med.get('cpu'))} | "
                   f"{f'{rm:.2f}' if rm is not None else '-'} | {where} |")
    return "\n".join(hdr + toc + [""] + [s for _, _, s in sections]) + "\n"


def anchor(name):
    s = name.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def tool_desc(tool, a):
    if tool == "perf":
        return (f"`perf record -g -F {a.freq}` (cpu-clock samples where the VM has no hardware counters), "
                "`perf report --no-children --sort dso,sym`")
    if tool == "callgrind":
        return (f"`valgrind --tool=callgrind` (instructions, not time; ~{CALLGRIND_SLOWDOWN}x fewer steps), "
                "`callgrind_annotate --inclusive=no`")
    return "none (neither perf nor valgrind works here): timings and kernel trace only"


# ============================================================================================ main
def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", default=os.path.join(ROOT, "docs", "benchmarks.md"),
                    help="benchmark report (its .json twin is read when present; default docs/benchmarks.md)")
    ap.add_argument("--only", action="append", default=None,
                    help="comma-separated workload names as in the report (repeatable); names may contain commas")
    ap.add_argument("--match", default=None, help="regular expression on workload names (with --all-slower: both)")
    ap.add_argument("--all-slower", action="store_true",
                    help="every workload with median ratio < 1 (the default when neither --only nor --match)")
    ap.add_argument("--threshold", type=float, default=1.0, help="ratio below which a workload counts as slower")
    ap.add_argument("--max", type=int, default=None, help="profile at most this many workloads (slowest ratio first)")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds of steps recorded per device (default 2)")
    ap.add_argument("--freq", type=int, default=999, help="perf sampling frequency (Hz)")
    ap.add_argument("--top", type=int, default=12, help="symbols per table")
    ap.add_argument("--tool", choices=("auto", "perf", "callgrind", "none"), default="auto")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "profiles.md"), help="Markdown output ('-': none)")
    ap.add_argument("--json", default=None, help="also write the raw results as JSON")
    ap.add_argument("--quick-sizes", action="store_true",
                    help="use the --quick sizes of the workloads (default: those of the report)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per profiled subprocess")
    ap.add_argument("--keep", metavar="DIR", default=None,
                    help="keep the raw perf.data / callgrind files and child results in DIR")
    ap.add_argument("--note", default=None, help="a line of text put at the top of the Markdown output")
    ap.add_argument("--list", action="store_true", help="list the workloads that would be profiled and stop")
    # child mode (internal)
    ap.add_argument("--child", metavar="NAME", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--device", default="neuron", help=argparse.SUPPRESS)
    ap.add_argument("--group", default="", help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=None,
                    help="a fixed number of steps per device instead of --seconds (callgrind: divided by "
                         f"{CALLGRIND_SLOWDOWN})")
    ap.add_argument("--no-trace", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cpu-mode", default="inductor CPU", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        a.name = a.child
        return child_main(a)
    a.argv = [x for i, x in enumerate(argv)            # the command line shown in the output, without --note
              if not (x == "--note" or x.startswith("--note=") or (i and argv[i - 1] == "--note"))]

    rows, meta = load_report(a.report)
    if meta.get("quick"):
        a.quick_sizes = True
    by_name = {r["name"]: r for r in rows}
    sel = []
    if a.only:
        for spec in a.only:
            sel += [by_name.get(n) or {"name": n} for n in _split_names(spec, set(by_name))]
    if a.match or a.all_slower or not a.only:
        rx = re.compile(a.match) if a.match else None
        for r in rows:
            slower = r.get("ratio_median") is not None and r["ratio_median"] < a.threshold
            if rx is not None and not rx.search(r["name"]):
                continue
            if (a.all_slower or not a.match) and not slower:
                continue
            if r not in sel:
                sel.append(r)
    if not a.only:
        sel.sort(key=lambda r: r.get("ratio_median") if r.get("ratio_median") is not None else 9)
    if a.max:
        sel = sel[:a.max]
    for r in sel:
        if r.get("group") == "compiled":
            modes = r.get("modes") or {}
            ce = (modes.get("CPU eager") or {}).get("median")
            ind = (modes.get("inductor CPU") or {}).get("median")
            r["cpu_mode"] = "CPU eager" if (ce and (not ind or ce < ind)) else "inductor CPU"
    a.selection = (f"--only {len(sel)} named" if a.only else
                   f"{len(sel)} with median ratio < {a.threshold:g}" + (f" matching /{a.match}/" if a.match else ""))
    print(f"bench.profile: {len(sel)} workload(s) from {meta.get('source')}", flush=True)
    for r in sel:
        rm = r.get("ratio_median")
        print(f"  {r['name']}  (ratio {rm:.2f})" if rm is not None else f"  {r['name']}", flush=True)
    if a.list or not sel:
        return 0

    tool = None if a.tool == "none" else pick_tool(a.tool)
    print(f"profiler: {tool or 'none'}", flush=True)
    classify = Classifier()
    from .harness import cpu_snapshot, other_load
    from .report import loadavg
    load0, snap0, t0 = loadavg(), cpu_snapshot(), time.perf_counter()
    sections, raw = [], []
    tmp = a.keep or tempfile.mkdtemp(prefix="tn-profile-")
    os.makedirs(tmp, exist_ok=True)
    try:
        for w in sel:
            runs = {}
            for dev in DEVICES:
                try:
                    runs[dev] = run_one(w, dev, a, tool, classify, tmp)
                except subprocess.TimeoutExpired:
                    runs[dev] = {"error": f"timed out after {a.timeout:.0f} s"}
                r = runs[dev]
                print(f"  {w['name']:<44} {dev:<6} " + (f"ERROR {r['error']}" if r.get("error") else
                      f"{r['steps']} steps, {_ms(r['s_per_step'])}/step, {r['elapsed_s']:.0f} s"), flush=True)
            print("    " + "; ".join(where_line(d, runs[d]) for d in DEVICES), flush=True)
            sections.append((w, runs, md_section(w, runs, meta)))
            raw.append({"workload": w, "runs": runs})
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    other = other_load(snap0, cpu_snapshot())
    md = build_md(sections, a, tool, meta, load0, loadavg(), other, time.perf_counter() - t0)
    if a.out and a.out != "-":
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(md)
        print(f"wrote {a.out}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": tool, "report": meta, "other_load": other, "results": raw}, f, indent=1, default=str)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
