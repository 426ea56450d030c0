"""Kernel-level timing from the runtime's trace ring: what ran on the device queues and for how long.

    with torchneuron.profiler.kernel_trace() as tr:
        step()
    print(tr.table())
"""
import collections
import contextlib

from . import _C


class KernelTrace:
    def __init__(self):
        self.records = []  # (name, device, queue, start_ns, end_ns)

    def summary(self):
        """{op name: (calls, total ns)} sorted by total time."""
        agg = collections.defaultdict(lambda: [0, 0])
        for name, _dev, _q, t0, t1 in self.records:
            agg[name][0] += 1
            agg[name][1] += t1 - t0
        return dict(sorted(((k, tuple(v)) for k, v in agg.items()), key=lambda kv: -kv[1][1]))

    def table(self, limit=20):
        s = self.summary()
        total = sum(v[1] for v in s.values()) or 1
        lines = [f"{'kernel':48} {'calls':>7} {'total ms':>10} {'share':>7}"]
        for name, (calls, ns) in list(s.items())[:limit]:
            lines.append(f"{name:48} {calls:7d} {ns / 1e6:10.3f} {100 * ns / total:6.1f}%")
        lines.append(f"{'all kernels':48} {sum(v[0] for v in s.values()):7d} {total / 1e6:10.3f}")
        return "\n".join(lines)


@contextlib.contextmanager
def kernel_trace():
    """Record every kernel launched on any neuron queue inside the block (synchronizes at both ends)."""
    import torch

    torch.neuron.synchronize()
    _C._trace_drain()
    _C._trace_enable(True)
    tr = KernelTrace()
    try:
        yield tr
    finally:
        torch.neuron.synchronize()
        _C._trace_enable(False)
        tr.records = _C._trace_drain()


# ---- torch.profiler integration ---------------------------------------------------------------------
# torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) records every
# kernel, copy and CPU-fallback op the device ran as a device activity, through the Kineto child profiler
# of csrc/torch/profiler.cpp, which reads the same trace ring as kernel_trace() above (each with its own
# cursor: both can run at once).  Nothing to import: the extension registers it when it loads.

def activities():
    """[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]: what to pass to torch.profiler.profile."""
    import torch

    return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]


def plot_timeline(trace_json, png, title=None, max_cpu_depth=2):
    """Draw an exported Chrome trace (export_chrome_trace / tensorboard_trace_handler output) as a PNG
    with matplotlib: the host threads' ATen ops (top) and one row per neuron stream (kernels, copies,
    fallback work), with a line from each launching op to its kernel."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(trace_json) as f:
        ev = json.load(f)["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    xs = [e for e in ev if e.get("ph") == "X"]
    if not xs:
        raise ValueError(f"{trace_json}: no slices")
    t0 = min(e["ts"] for e in xs)
    neuron = {pid for pid, n in procs.items() if n == "neuron"}
    rows, labels = {}, []
    def row(key, label):
        if key not in rows:
            rows[key] = len(rows)
            labels.append(label)
        return rows[key]
    cpu_ops = sorted((e for e in xs if e["pid"] not in neuron and e.get("cat") in ("cpu_op", "user_annotation")),
                     key=lambda e: (e["ts"], -e["dur"]))
    dev = [e for e in xs if e["pid"] in neuron]
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.45 * (max_cpu_depth + 1 + len({(e["pid"], e["tid"]) for e in dev}))))
    colors = plt.get_cmap("tab20")
    cname = {}
    # host: nesting depth by interval containment, per thread
    stack = {}
    for e in cpu_ops:
        st = stack.setdefault(e["tid"], [])
        while st and st[-1] <= e["ts"]:
            st.pop()
        depth = len(st)
        st.append(e["ts"] + e["dur"])
        if depth >= max_cpu_depth:
            continue
        r = row(("cpu", e["tid"], depth), f"host thread {e['tid']} / {depth}")
        c = cname.setdefault(e["name"], colors(len(cname) % 20))
        ax.broken_barh([((e["ts"] - t0) / 1e3, max(e["dur"], 0.5) / 1e3)], (r - 0.4, 0.8), color=c, lw=0)
    for e in sorted(dev, key=lambda e: e["ts"]):
        r = row(("dev", e["pid"], e["tid"]), "neuron " + threads.get((e["pid"], e["tid"]), f"stream {e['tid']}"))
        c = cname.setdefault(e["name"], colors(len(cname) % 20))
        ax.broken_barh([((e["ts"] - t0) / 1e3, max(e["dur"], 0.5) / 1e3)], (r - 0.4, 0.8), color=c, lw=0)
        if e["dur"] > 0.02 * (max(x["ts"] + x["dur"] for x in xs) - t0):
            ax.text((e["ts"] - t0 + e["dur"] / 2) / 1e3, r, e["name"].replace("aten::", ""), ha="center",
                    va="center", fontsize=7, clip_on=True)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(title or trace_json)
    top = sorted(cname, key=lambda n: -sum(e["dur"] for e in dev if e["name"] == n))[:10]
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=cname[n]) for n in top], labels=top, fontsize=7,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def register_backward_sites():
    """Kernels that the autograd engine's device thread launches have no Python frame of their own: they
    are attributed to the backward() / autograd.grad() call that runs them ("train.py:12 in main
    (autograd backward)" in an async error).  Wraps torch.autograd's _engine_run_backward, which both
    call; NEURON_LAUNCH_SITES=0 turns launch sites off altogether."""
    import functools
    import os

    import torch
    import torch.autograd as ag

    run = getattr(ag, "_engine_run_backward", None)
    if run is None or getattr(run, "_neuron_sites", False) or os.environ.get("NEURON_LAUNCH_SITES") == "0":
        return
    push, pop = torch.ops.neuron._backward_site_push, torch.ops.neuron._backward_site_pop

    @functools.wraps(run)
    def _engine_run_backward(*args, **kwargs):
        prev = push()
        try:
            return run(*args, **kwargs)
        finally:
            pop(prev)

    _engine_run_backward._neuron_sites = True
    ag._engine_run_backward = _engine_run_backward
