"""`torchneuron parity SCRIPT [args]`: the same training script on neuron and on the CPU, compared step by step.

The script runs unchanged, twice, each time in a fresh interpreter (`python -m torchneuron.parity --child`):
- on neuron, as written;
- on the CPU: every spelling of the neuron device the script uses (`"neuron"`, `"neuron:N"`,
  `torch.device("neuron")`, given to a factory, `.to()`, `Module.to()`, `torch.load(map_location=)`, ...)
  means the CPU, through a TorchFunctionMode of the main thread (torchneuron/cuda.py's mechanism);
  `torch.neuron.*` calls still work.  A script that picks its device from `torch.accelerator` or a
  `--device` flag needs nothing else.
Both runs start from `torch.manual_seed(SEED)` (the script's own seeding then applies).  Weights initialised
on the CPU and batches drawn by CPU generators are then identical on both sides; random numbers drawn on the
device (dropout, `torch.randn(device=...)`) are not, since the two generators differ: such a script
diverges for that reason, and the report says where.

Recorded per optimizer step (hooks, no change to the script): the loss (the value of each scalar
`Tensor.backward()` is called on, the last before the step) and the gradient norm over every parameter
the optimizer steps (a global optimizer step pre-hook).  The verdict compares the two curves against a
tolerance band (--rtol on the loss, 10x on the gradient norm).  On divergence both runs are repeated up to
the first diverging step with a global forward hook that keeps every module's output of that step's
forward and of step 1's (where the parameters are still equal, so a difference there is the module's own),
and the report names the first module, in execution order, whose output differs beyond the band.
`--plot FILE` draws both curves (matplotlib, if installed).

Exit status: 0 when the runs agree, 3 when they diverge, 1 when a run failed.
"""
import argparse
import json
import math
import os
import runpy
import subprocess
import sys
import tempfile

SEED = 0


# ---- the child: one run of the script -----------------------------------------------------------

class _Recorder:
    def __init__(self, capture_step=None):
        self.losses, self.grad_norms = [], []
        self._last_loss = None
        self.capture_steps = set(capture_step or ())  # 1-based optimizer steps whose forward is kept
        self.outputs = []                  # [(step, name, tensor)] of those forwards, in execution order
        self._names, self._stack = {}, []

    # Tensor.backward on a scalar: the loss of the coming step
    def on_backward(self, t):
        if t.numel() == 1:
            self._last_loss = float(t.detach().float().cpu())

    def on_step(self, optimizer):
        sq = 0.0
        for g in optimizer.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    sq += float(p.grad.detach().double().pow(2).sum().cpu())
        self.grad_norms.append(math.sqrt(sq))
        self.losses.append(self._last_loss)
        self._last_loss = None

    def capturing(self):
        return len(self.losses) + 1 in self.capture_steps

    def on_pre_forward(self, module, args):
        if not self._stack and id(module) not in self._names:
            root = type(module).__name__
            for name, m in module.named_modules():
                self._names.setdefault(id(m), f"{root}.{name}" if name else root)
        self._stack.append(module)

    def on_forward(self, module, args, output):
        import torch

        if self._stack:
            self._stack.pop()
        if not self.capturing():
            return
        outs = output if isinstance(output, (tuple, list)) else (output,)
        name = self._names.get(id(module), type(module).__name__)
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                self.outputs.append((len(self.losses) + 1, f"{name}" + (f"[{i}]" if len(outs) > 1 else "")
                                     + f" ({type(module).__name__})", o.detach().to("cpu", copy=True)))


class _NeuronIsCpu:
    """A TorchFunctionMode mapping every neuron device spelling to the CPU (the CPU run)."""

    @staticmethod
    def make():
        import torch
        from torch.overrides import TorchFunctionMode

        def cpu_of(d):
            if isinstance(d, str) and (d == "neuron" or d.startswith("neuron:")):
                return torch.device("cpu")
            if isinstance(d, torch.device) and d.type == "neuron":
                return torch.device("cpu")
            return None

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func is torch.device and args and cpu_of(args[0]) is not None:
                    return torch.device("cpu")
                args = [cpu_of(a) or a for a in args]
                for k in ("device", "map_location"):
                    if cpu_of(kwargs.get(k)) is not None:
                        kwargs = {**kwargs, k: torch.device("cpu")}
                return func(*args, **kwargs)

        return Mode()


def _child(device, out, script, args, capture_step):
    import torch

    rec = _Recorder(capture_step)
    orig_backward = torch.Tensor.backward

    def backward(self, *a, **k):
        rec.on_backward(self)
        return orig_backward(self, *a, **k)

    torch.Tensor.backward = backward
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(lambda opt, a, k: rec.on_step(opt))
    if capture_step:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        register_module_forward_pre_hook(rec.on_pre_forward)
        register_module_forward_hook(rec.on_forward)
    if device == "cpu":
        _NeuronIsCpu.make().__enter__()
    torch.manual_seed(SEED)
    sys.argv = [script] + list(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    err = None
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            err = f"SystemExit({e.code})"
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    res = {"device": device, "losses": rec.losses, "grad_norms": rec.grad_norms, "error": err}
    if capture_step:
        torch.save(rec.outputs, out + ".outputs.pt")
    with open(out, "w") as f:
        json.dump(res, f)


# ---- the parent ---------------------------------------------------------------------------------

def _run(device, script, args, workdir, capture_step=None, timeout=1800):
    out = os.path.join(workdir, f"{device}{'-capture' if capture_step else ''}.json")
    cmd = [sys.executable, "-m", "torchneuron.parity", "--child", device, "--out", out]
    if capture_step:
        cmd += ["--capture-steps", ",".join(map(str, capture_step))]
    cmd += [script] + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if not os.path.exists(out):
        return {"device": device, "losses": [], "grad_norms": [], "error": f"the run died (exit {p.returncode}): "
                + (p.stderr.strip().splitlines() or ["no output"])[-1]}, out
    with open(out) as f:
        return json.load(f), out


def _rel(a, b):
    if a is None or b is None:
        return 0.0 if a is b else math.inf
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    return abs(a - b) / max(abs(b), 1e-12)


def compare(neuron, cpu, rtol):
    """(rows, first diverging 1-based step or None, worst loss and grad-norm relative differences)."""
    rows, first = [], None
    worst_l = worst_g = 0.0
    n = max(len(neuron["losses"]), len(cpu["losses"]))
    for i in range(n):
        ln = neuron["losses"][i] if i < len(neuron["losses"]) else None
        lc = cpu["losses"][i] if i < len(cpu["losses"]) else None
        gn = neuron["grad_norms"][i] if i < len(neuron["grad_norms"]) else None
        gc = cpu["grad_norms"][i] if i < len(cpu["grad_norms"]) else None
        dl, dg = _rel(ln, lc), _rel(gn, gc)
        worst_l, worst_g = max(worst_l, dl), max(worst_g, dg)
        ok = dl <= rtol and dg <= 10 * rtol
        if not ok and first is None:
            first = i + 1
        rows.append({"step": i + 1, "loss_neuron": ln, "loss_cpu": lc, "grad_norm_neuron": gn, "grad_norm_cpu": gc,
                     "loss_rel_diff": dl, "grad_norm_rel_diff": dg, "ok": ok})
    return rows, first, worst_l, worst_g


def first_differing_module(neuron_pt, cpu_pt, rtol):
    """The first (step, name, relative difference) of the captured forwards whose output differs beyond
    rtol: step 1's forward first (the parameters are still equal there, so a difference is the module's
    own), then the diverging step's."""
    import torch

    a, b = torch.load(neuron_pt), torch.load(cpu_pt)
    for (sa, na, ta), (sb, nb, tb) in zip(a, b):
        if na != nb or sa != sb or ta.shape != tb.shape:
            return sa, na, math.inf
        ref = tb.double().abs().max().item() if tb.numel() else 0.0
        d = (ta.double() - tb.double()).abs().max().item() if tb.numel() else 0.0
        rel = d / max(ref, 1e-12)
        if not rel <= rtol:  # NaN counts as differing
            return sa, na, rel
    return None, None, 0.0


def _plot(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for key, axis, title in (("loss", ax[0], "loss"), ("grad_norm", ax[1], "gradient norm")):
        axis.plot(steps, [r[f"{key}_cpu"] for r in rows], label="CPU", lw=2.5, alpha=0.6)
        axis.plot(steps, [r[f"{key}_neuron"] for r in rows], label="neuron", lw=1.2, ls="--")
        axis.set_xlabel("optimizer step")
        axis.set_title(title)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def run_parity(script, args, rtol=1e-3, plot=None, bisect=True, out=sys.stdout):
    """Runs both, compares, bisects on divergence; returns the report dict."""
    p = lambda *a: print(*a, file=out, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="neuron-parity-") as wd:
        p(f"[torchneuron parity] {script}: the neuron run ...")
        neuron, _ = _run("neuron", script, args, wd)
        p("[torchneuron parity] the CPU run ...")
        cpu, _ = _run("cpu", script, args, wd)
        rep = {"script": script, "rtol": rtol, "errors": {d["device"]: d["error"] for d in (neuron, cpu) if d["error"]}}
        rows, first, wl, wg = compare(neuron, cpu, rtol)
        rep.update(steps=rows, first_diverging_step=first, worst_loss_rel_diff=wl, worst_grad_norm_rel_diff=wg,
                   module=None)
        if not rows and not rep["errors"]:
            rep["errors"]["both"] = "no optimizer step was recorded (the script never called optimizer.step())"
        if first is not None and bisect and not rep["errors"]:
            steps = sorted({1, first})
            p(f"[torchneuron parity] diverged at step {first}: rerunning both to keep each module's output of "
              f"step{'s' if len(steps) > 1 else ''} {' and '.join(map(str, steps))} ...")
            n2, f2 = _run("neuron", script, args, wd, capture_step=steps)
            c2, g2 = _run("cpu", script, args, wd, capture_step=steps)
            if os.path.exists(f2 + ".outputs.pt") and os.path.exists(g2 + ".outputs.pt"):
                step, name, rel = first_differing_module(f2 + ".outputs.pt", g2 + ".outputs.pt", rtol)
                rep["module"] = {"name": name, "step": step, "rel_diff": rel}
        rep["verdict"] = "error" if rep["errors"] else "agree" if first is None else "diverge"
        if plot and rows:
            rep["plot"] = plot if _plot(rows, plot) else None
    return rep


def print_report(rep, out=sys.stdout):
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"\n[torchneuron parity] {rep['script']}: {len(rep['steps'])} optimizer steps, tolerance {rep['rtol']:g} "
      f"(loss) / {10 * rep['rtol']:g} (gradient norm)")
    p("  step   loss neuron      loss CPU  rel diff   grad norm neuron   grad norm CPU  rel diff")
    show = rep["steps"] if len(rep["steps"]) <= 12 else rep["steps"][:5] + [None] + rep["steps"][-5:]
    for r in show:
        if r is None:
            p("   ...")
            continue
        f = lambda v: "         -" if v is None else f"{v:12.6g}"  # noqa: E731
        p(f"  {r['step']:4d}  {f(r['loss_neuron'])}  {f(r['loss_cpu'])}  {r['loss_rel_diff']:8.1e}   "
          f"{f(r['grad_norm_neuron'])}    {f(r['grad_norm_cpu'])}  {r['grad_norm_rel_diff']:8.1e}"
          + ("" if r["ok"] else "   <-"))
    p(f"  worst relative difference: loss {rep['worst_loss_rel_diff']:.2e}, gradient norm {rep['worst_grad_norm_rel_diff']:.2e}")
    for d, e in rep["errors"].items():
        p(f"  the {d} run failed: {e}")
    if rep["verdict"] == "agree":
        p("  verdict: AGREE (every step within the band)")
    elif rep["verdict"] == "diverge":
        p(f"  verdict: DIVERGE from step {rep['first_diverging_step']}")
        m = rep.get("module")
        if m and m["name"]:
            p(f"  first module whose output differs: {m['name']} in step {m['step']}'s forward "
              f"(relative difference {m['rel_diff']:.2e})")
        elif m:
            p("  every module's output agrees in those forwards: the difference comes from the backward, the loss "
              "or the optimizer")
    if rep.get("plot"):
        p(f"  plot: {rep['plot']}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="torchneuron parity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", choices=["neuron", "cpu"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--capture-steps", help=argparse.SUPPRESS)
    ap.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance of the loss (gradient norm: 10x)")
    ap.add_argument("--plot", metavar="PNG", help="draw both curves (matplotlib)")
    ap.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    ap.add_argument("--no-bisect", action="store_true", help="do not look for the first differing module")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.child:
        _child(a.child, a.out, a.script, a.args, [int(x) for x in a.capture_steps.split(",")] if a.capture_steps else None)
        return 0
    rep = run_parity(a.script, a.args, a.rtol, a.plot, not a.no_bisect)
    print_report(rep)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=2)
    return {"agree": 0, "diverge": 3}.get(rep["verdict"], 1)


if __name__ == "__main__":
    sys.exit(main())
