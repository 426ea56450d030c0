"""Plain-text and Markdown reports."""
import math
import os
import platform
import subprocess
import time

import torch

from .harness import BUSY, DEVICES, fmt_time
from .limits import LIMIT_LABELS


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def machine_info():
    info = {}
    cpu = _read("/proc/cpuinfo")
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("model name")), None)
    info["cpu"] = model or platform.processor() or platform.machine()
    flags = next((ln.split(":", 1)[1].split() for ln in cpu.splitlines() if ln.startswith("flags")), [])
    info["isa"] = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags) or "-"
    mhz = [float(ln.split(":", 1)[1]) for ln in cpu.splitlines() if ln.startswith("cpu MHz")]
    info["mhz"] = f"{max(mhz):.0f} MHz (reported)" if mhz else "-"
    try:
        aff = len(os.sched_getaffinity(0))
    except AttributeError:
        aff = os.cpu_count()
    info["cores"] = f"{os.cpu_count()} logical, {aff} usable"
    mem = next((ln.split()[1] for ln in _read("/proc/meminfo").splitlines() if ln.startswith("MemTotal")), None)
    info["memory"] = f"{int(mem) / 2**20:.1f} GiB" if mem else "-"
    info["kernel"] = platform.release()
    info["python"] = platform.python_version()
    info["torch"] = f"{torch.__version__}, {torch.get_num_threads()} intra-op threads"
    try:
        import torchneuron
        p = torch.neuron.get_device_properties(0)
        info["torchneuron"] = (f"{torchneuron.__version__}, {p.name}, {p.multi_processor_count} kernel threads, "
                               f"arena limit {p.total_memory / 2**30:.1f} GiB")
        so = getattr(torchneuron._C, "__file__", None)
        if so:
            info["extension built"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(so)))
    except Exception as e:  # noqa: BLE001
        info["torchneuron"] = f"unavailable: {e}"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "csrc", "torchneuron", "setup.py"],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        if rev:
            info["git"] = rev + (f" (+ {len(dirty.splitlines())} uncommitted changes under csrc/ torchneuron/)"
                                 if dirty else "")
    except Exception:  # noqa: BLE001
        pass
    return info


def loadavg():
    s = _read("/proc/loadavg").split()
    return " ".join(s[:3]) if s else "-"


# ------------------------------------------------------------------------------------------ rows
NOISY = 1.5   # a device's slowest round / fastest round above this is flagged in the notes

HEAD = ["workload", "neuron", "cpu", "neuron rate", "cpu rate", "neuron % lim", "cpu % lim",
        "ratio min", "ratio med", "fallback ops / notes"]


def _rate_str(r):
    if r is None:
        return "-"
    v, unit = r
    return f"{v:.1f} {unit}" if v < 1000 else f"{v:.0f} {unit}"


def result_row(res, limits):
    c = res.case
    row = [c.name]
    for dev in DEVICES:
        if dev in res.errors and not res.times[dev]:
            row.append("ERROR")
        else:
            row.append(fmt_time(res.median(dev)))
    lim = limits.value(c.limit) if (limits is not None and c.limit) else None
    shares = []
    for dev in DEVICES:
        r = res.rate(dev)
        row.append(_rate_str(r))
        shares.append(f"{100 * r[0] / lim:.0f}%" if (r and lim) else "-")
    row += shares
    rmin, rmed = res.ratio_min(), res.ratio_median()
    row.append(f"{rmin:.2f}" if rmin is not None else "-")
    row.append(f"{rmed:.2f}" if rmed is not None else "-")
    notes = []
    if res.fallbacks:
        notes.append("FALLBACK: " + ", ".join(sorted(res.fallbacks)))
    for dev in DEVICES:
        if dev in res.errors:
            notes.append(f"{dev} error: {res.errors[dev]}")
    if res.extra.get("info"):
        notes.append(res.extra["info"])
    spread = []
    for dev in DEVICES:
        t = res.times.get(dev) or []
        if len(t) > 1 and min(t) > 0 and max(t) / min(t) > NOISY:
            spread.append(f"{dev} rounds {fmt_time(min(t))}..{fmt_time(max(t))}")
    if spread:
        notes.append("noisy: " + ", ".join(spread))
    ol = res.extra.get("other_load")
    if ol is not None and ol >= BUSY:
        notes.append(f"busy: other processes used {100 * ol:.0f}% of the CPUs"
                     + (f" (least busy of {res.extra['retries'] + 1} runs)" if res.extra.get("retries") else ""))
    row.append("; ".join(notes) if notes else "none")
    return row


def text_table(rows, head=HEAD):
    w = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    out = ["  ".join(str(h).ljust(w[i]) for i, h in enumerate(head)).rstrip(),
           "  ".join("-" * w[i] for i in range(len(head)))]
    for r in rows:
        out.append("  ".join(str(x).ljust(w[i]) if i == 0 or i == len(head) - 1 else str(x).rjust(w[i])
                             for i, x in enumerate(r)).rstrip())
    return "\n".join(out)


def md_table(rows, head=HEAD, right=None):
    """right: indices of right-aligned columns (default: all but the first and the last)."""
    if right is None:
        right = set(range(1, len(head) - 1))
    esc = [[str(x).replace("|", "\\|") for x in r] for r in rows]
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---:" if i in right else "---" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(out)


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary_rows(groups):
    rows = []
    for g in groups:
        meds = [r.ratio_median() for r in g["results"]]
        meds = [m for m in meds if m is not None]
        errs = sum(1 for r in g["results"] if "neuron" in r.errors)
        fbs = sum(1 for r in g["results"] if r.fallbacks)
        gm = geomean(meds)
        loads = [r.extra.get("other_load") for r in g["results"] if r.extra.get("other_load") is not None]
        rows.append([g["title"], str(len(g["results"])),
                     f"{gm:.2f}" if gm else "-",
                     f"{min(meds):.2f}" if meds else "-",
                     f"{max(meds):.2f}" if meds else "-",
                     str(errs), str(fbs),
                     f"{100 * sum(loads) / len(loads):.0f}%" if loads else "-"])
    return rows


SUMMARY_HEAD = ["group", "cases", "geomean ratio", "worst ratio", "best ratio", "neuron errors", "with fallbacks", "others' CPU"]


def gpt_rows(res):
    ex = res.extra
    rows = []
    if "neuron_max_allocated" in ex:
        rows.append(["neuron", "torch.neuron.max_memory_allocated() - allocated before the model",
                     f"{ex['neuron_max_allocated'] / 2**20:.1f} MiB"])
        rows.append(["neuron", "torch.neuron.max_memory_reserved() (caching allocator)",
                     f"{ex['neuron_max_reserved'] / 2**20:.1f} MiB"])
    for dev in DEVICES:
        m = ex.get(f"{dev}_rss")
        if not m:
            continue
        if "error" in m:
            rows.append([dev, "peak RSS delta (subprocess)", f"error: {m['error']}"])
        else:
            rows.append([dev, f"peak RSS delta, fresh subprocess, {m['steps']} steps: {m['method']}",
                         f"{m['rss_delta'] / 2**20:.1f} MiB"])
    return rows


def gpt_text(res):
    ex = res.extra
    lines = []
    cfg = ex.get("config")
    if cfg:
        lines.append(f"model: d_model {cfg['d_model']}, {cfg['layers']} layers, {cfg['heads']} heads, block {cfg['block']}, "
                     f"batch {cfg['batch']}, vocab {cfg['vocab']}, {cfg['params']:,} parameters, {cfg.get('dtype', 'fp32')}")
    for dev in DEVICES:
        t = res.median(dev)
        if t and cfg:
            lines.append(f"{dev}: {t * 1e3:.0f} ms/step, {cfg['batch'] * cfg['block'] / t:,.0f} tokens/s")
    if "neuron_loss0" in ex and "cpu_loss0" in ex:
        a, b = ex["neuron_loss0"], ex["cpu_loss0"]
        lines.append(f"first-step loss: neuron {a:.6f}, cpu {b:.6f} (same weights and batch; rel. diff "
                     f"{abs(a - b) / max(abs(b), 1e-12):.1e})")
    return lines


# ------------------------------------------------------------------------------------ gemm.png
def plot_gemm(groups, limits, path):
    """GFLOP/s vs size of the square `mm f32/bf16 NxNxN` cases for neuron and torch CPU, with the measured
    peaks as horizontal lines, drawn with matplotlib into path.  Returns None or a reason it was not drawn."""
    import re
    g = next((g for g in groups if g["key"] == "gemm"), None)
    if g is None:
        return "no GEMM group in this run"
    series = {}
    for r in g["results"]:
        m = re.match(r"mm (f32|bf16) (\d+)x(\d+)x(\d+)$", r.case.name)
        if not m or len(set(m.group(2, 3, 4))) != 1:
            continue
        for dev in DEVICES:
            rate = r.rate(dev)
            if rate:
                series.setdefault((m.group(1), dev), []).append((int(m.group(2)), rate[0]))
    if not series:
        return "no square mm results"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (`make bench` installs it)"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"f32": "tab:blue", "bf16": "tab:orange"}
    for (dt, dev), pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if dev == "neuron" else "s",
                linestyle="-" if dev == "neuron" else "--", color=colors[dt],
                label=f"{dev} {dt}" + (" (torch CPU eager)" if dev == "cpu" else ""))
    for dt, key in (("f32", "fma"), ("bf16", "bf16_gemm")):
        lim = limits.value(key) if limits is not None else None
        if lim and any(k[0] == dt for k in series):
            ax.axhline(lim, color=colors[dt], linestyle=":", label=f"{dt} peak (measured) {lim:.0f} GFLOP/s")
    ax.set_xscale("log", base=2)
    sizes = sorted({p[0] for pts in series.values() for p in pts})
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(x) for x in sizes])
    ax.set_xlabel("N (torch.mm of N x N by N x N)")
    ax.set_ylabel("GFLOP/s")
    ax.set_ylim(bottom=0)
    ax.set_title("GEMM throughput, 2 cores")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# ----------------------------------------------------------------------------------------- report
def build(groups, limits, info, meta):
    """(plain text, markdown)."""
    txt, md = [], []
    md.append(f"# TorchNeuron benchmarks: {info.get('cpu') or 'unknown CPU'}")
    md.append("")
    md.append(f"Generated by `{meta['command']}` on {meta['date']} ({meta['mode']}; {meta['rounds']} rounds, "
              f"~{meta['target_s']:.2f} s per round per device; total {meta['elapsed']:.0f} s). "
              "Regenerate with `make bench` or `.venv/bin/python -m bench`.")
    md.append("")
    md.append("Every workload runs on `neuron` and on PyTorch CPU eager in the same process, interleaved round by "
              "round. Times are the median over rounds of the per-iteration time; **ratio = cpu time / neuron "
              "time** per round (min and median over rounds), so **above 1 means neuron is faster**. Rates are "
              "GFLOP/s or GB/s (bytes the op must read and write, no write-allocate), `% lim` is the rate as a "
              "share of the machine limit measured below. `fallback ops` lists `torchneuron.get_fallback_ops()` "
              "for the workload (ops that ran on the CPU through the fallback); `none` means every op ran natively.")
    md.append("")
    md.append("## Machine")
    md.append("")
    for k, v in info.items():
        md.append(f"- **{k}**: {v}")
    md.append(f"- **load average** (1/5/15 min): start {meta['load_start']}, end {meta['load_end']}")
    if meta.get("other_load") is not None:
        md.append(f"- **other processes** used {100 * meta['other_load']:.0f}% of all CPU time during the run "
                  "(/proc/stat busy time minus this process and its children)")
    md.append("")
    txt.append(f"machine: {info.get('cpu')}; {info.get('cores')}; {info.get('memory')}; ISA {info.get('isa')}")
    txt.append(f"torch {info.get('torch')}; torchneuron {info.get('torchneuron')}")
    txt.append(f"git {info.get('git', '-')}; load average start {meta['load_start']}, end {meta['load_end']}")
    ol = meta.get("other_load")
    txt.append(f"{meta['mode']}, {meta['rounds']} rounds, total {meta['elapsed']:.0f} s"
               + (f"; other processes used {100 * ol:.0f}% of the CPUs" if ol is not None else ""))

    md.append("## Machine limits")
    md.append("")
    md.append("C microbenchmarks (`bench/limits.c`) compiled at bench time with `cc -O3 -march=native`, the median "
              "of several repetitions per measurement (the ops are timed as medians too; single 64 MiB passes "
              "move by up to 2x, and a best-of figure is a spike); each limit is the median of its measurements "
              "at the start, after the memory-bound group and at the end of the bench (the note gives their range: this VM's "
              "DRAM figures move by up to 2x within minutes, and the best of them would hold the ops, timed as "
              "medians, to a spike); threads are pthreads. "
              "Triad is `a[i] = b[i] + s*c[i]` on f32, 12 bytes counted per element (the write-allocate read of `a` "
              "is not counted, as for the ops); read is a vectorised sum, 4 bytes per element.  Buffers of 2 MiB "
              "or more are 2 MiB-aligned transparent huge pages, as the device arena allocates them (on this VM "
              "4 KiB pages measured a fifth to a third less: triad 27 against 34 GB/s, read 23-26 against 34-42 GB/s, alternating runs); PyTorch's CPU allocator uses 4 KiB pages unless "
              "`THP_MEM_ALLOC_ENABLE=1` is set, and the CPU rows run with its defaults.")
    md.append("")
    lrows = limits.rows() if limits is not None else [("skipped", "--no-limits", "")]
    if limits is not None and limits.error:
        lrows.append(("error", limits.error, ""))
    md.append(md_table([list(r) for r in lrows], ["limit", "value", "note"], right={1}))
    md.append("")
    txt.append("")
    txt.append("machine limits")
    txt.append(text_table([list(r) for r in lrows], ["limit", "value", "note"]))

    md.append("## Summary")
    md.append("")
    md.append("Geometric mean over each group's cases of the median cpu/neuron ratio (above 1: neuron faster); "
              "`others' CPU`: the mean share of the 2 cores used by other processes during the group's rounds "
              "(the higher, the less the absolute numbers mean).")
    md.append("")
    srows = summary_rows(groups)
    md.append(md_table(srows, SUMMARY_HEAD))
    md.append("")
    txt.append("")
    txt.append("summary (ratio = cpu time / neuron time, above 1: neuron faster)")
    txt.append(text_table(srows, SUMMARY_HEAD))

    for g in groups:
        rows = [result_row(r, limits) for r in g["results"]]
        md.append(f"## {g['title']}")
        md.append("")
        if g.get("desc"):
            md.append(g["desc"])
            md.append("")
        if g.get("limit"):
            md.append(f"Limit for `% lim`: {g['limit']}.")
            md.append("")
        md.append(md_table(rows))
        md.append("")
        if g["key"] == "gemm" and meta.get("gemm_png"):
            md.append(meta["gemm_png"])
            md.append("")
        txt.append("")
        txt.append(g["title"])
        txt.append(text_table(rows))
        by_note = {}
        for r in g["results"]:
            if r.case.note:
                by_note.setdefault(r.case.note, []).append(r.case.name)
        notes = [(f"{names[0]}: {note}" if len(names) == 1 else note) for note, names in by_note.items()]
        for r in g["results"]:
            if r.case.after is not None and r.extra:
                extra_lines = gpt_text(r)
                mrows = gpt_rows(r)
                for ln in extra_lines:
                    md.append(f"- {ln}")
                    txt.append("  " + ln)
                if mrows:
                    md.append("")
                    md.append("Peak memory of the training step:")
                    md.append("")
                    md.append(md_table(mrows, ["device", "measure", "peak"], right={2}))
                    txt.append(text_table(mrows, ["device", "measure", "peak"]))
                md.append("")
        if notes:
            md.append("Notes: " + "; ".join(notes) + ".")
            md.append("")
    md.append("## Method")
    md.append("")
    md.append("- `python -m bench [--quick] [--rounds N] [--out FILE] [--only GROUPS]` (`bench/`). Per device: "
              "`setup(device)` builds the inputs (CPU-seeded, moved to the device) and a step function; warmup "
              "calls, then the iterations per round N are chosen so that a round takes about the target time; then R "
              "rounds, alternating which device goes first. A round is `time.perf_counter()` around "
              "`sync; N x step; sync` (`torch.neuron.synchronize()` for neuron, nothing for cpu), stopped early "
              "after a whole chunk of steps once it has run 3x the target (a calibration made at a quiet moment "
              "must not run for long on a busy machine); the per-step time is the round time / steps run. GC is "
              "disabled during the rounds.")
    md.append("- Per-op latency: `[enqueue]` = N ops back to back with one synchronize at the end, divided by N "
              "(the host-side dispatch + enqueue cost once the queue is full, i.e. the op throughput); `[sync each]` "
              "= a synchronize after every op (the round-trip latency). On the CPU both are the plain op.")
    md.append("- Outputs are allocated by every call, as eager code does (the CPU pays glibc malloc/mmap and page "
              "faults for the 64 MiB outputs; neuron uses its caching allocator). `add (out=)` shows the kernel "
              "alone.")
    md.append(f"- `busy:` in the notes: other processes used at least {100 * BUSY:.0f}% of all CPU time during the "
              "case's rounds. A full run measures such a case again (once, cases under 10 s, at most 60 s of re-runs "
              "in all) and keeps the least busy run.")
    md.append(f"- `noisy:` in the notes: a device's slowest round was more than {NOISY}x its fastest; the range "
              "is given. On this VM, CPU-eager ops that open an OpenMP parallel region sometimes take milliseconds "
              "when a worker thread has to be woken on a busy or idle vCPU, which shows up as huge ratios on small "
              "ops; read those rows with the range.")
    md.append("- `sum`/`amax` are compared with the read-only bandwidth, the other memory-bound ops with triad; a "
              "share above 100% is possible where the op's traffic pattern beats the microbenchmark's, or when the "
              "limit was measured at a busy moment.")
    md.append("- The machine has 2 cores and may be shared with other jobs: absolute numbers are noisy, the "
              "interleaved ratios less so. Both devices use the same cores (neuron's kernel thread pool vs "
              "PyTorch's OpenMP/MKL/oneDNN threads).")
    md.append("")
    return "\n".join(txt), "\n".join(md)


# ------------------------------------------------------------------------------------ JSON report
def _num(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def result_json(res, group_key, limits=None):
    """One workload's numbers as plain JSON data (read by bench/profile.py)."""
    c = res.case
    lim = limits.value(c.limit) if (limits is not None and c.limit) else None
    d = {"name": c.name, "group": group_key,
         "median_s": {dev: _num(res.median(dev)) for dev in DEVICES},
         "times_s": {dev: list(res.times.get(dev) or []) for dev in DEVICES},
         "iters": dict(res.iters),
         "ratio_min": _num(res.ratio_min()), "ratio_median": _num(res.ratio_median()),
         "rate": {}, "limit": c.limit, "limit_value": _num(lim),
         "errors": dict(res.errors), "fallbacks": sorted(res.fallbacks),
         "other_load": _num(res.extra.get("other_load")), "retries": res.extra.get("retries", 0),
         "note": c.note}
    for dev in DEVICES:
        r = res.rate(dev)
        if r:
            d["rate"][dev] = {"value": _num(r[0]), "unit": r[1]}
    if res.extra.get("info"):
        d["info"] = str(res.extra["info"])
    return d


def compiled_json(cres):
    """bench/compiled.py results [(name, {mode: {...}})] as JSON data; ratio_median compares compiled neuron
    with the faster of the two CPU modes (above 1: compiled neuron faster)."""
    out = []
    for name, res in cres or []:
        modes = {m: {k: _num(v) if isinstance(v, float) else v for k, v in r.items()
                     if k in ("median", "times", "compile_s", "iters", "gflops", "error", "max_rel_diff")}
                 for m, r in res.items()}
        neu = (res.get("compiled neuron") or {}).get("median")
        cpu = [t for t in ((res.get(m) or {}).get("median") for m in ("CPU eager", "inductor CPU")) if t]
        out.append({"name": name, "group": "compiled", "modes": modes,
                    "median_s": {"neuron": _num(neu), "cpu": _num(min(cpu)) if cpu else None},
                    "ratio_median": _num(min(cpu) / neu) if (neu and cpu) else None})
    return out


def build_json(groups, limits, info, meta, cres=None):
    """The whole report as a JSON-serialisable dict (docs/benchmarks.json beside docs/benchmarks.md)."""
    return {"format": 1, "meta": {k: _num(v) if isinstance(v, float) else v for k, v in meta.items()},
            "machine": dict(info),
            "limits": [list(r) for r in limits.rows()] if limits is not None else [],
            "groups": [{"key": g["key"], "title": g["title"],
                        "results": [result_json(r, g["key"], limits) for r in g["results"]]} for g in groups],
            "compiled": compiled_json(cres)}
