"""5. A GPT training step with the model of examples/train_gpt.py.

The step is the body of build_and_train()'s loop: a CPU-drawn batch moved to the device, forward,
zero_grad, backward, clip_grad_norm_(1.0), AdamW (betas 0.9/0.95, weight decay 0.1), LambdaLR
(cosine with warmup) and loss.item().  Both devices start from the same CPU-initialised weights and
draw the same batches.

Peak memory:
  * neuron, in process: torch.neuron.max_memory_allocated() (and _reserved) minus what was allocated
    before the model was moved, after reset_peak_memory_stats();
  * both devices, in a fresh subprocess each (`python -m bench.gpt --mem DEVICE ...`): the peak resident
    set (VmHWM from /proc/self/status, reset through /proc/self/clear_refs after the data is loaded and
    torch initialised) minus the resident set at that point, i.e. everything the training steps made
    resident (allocator caches, oneDNN/MKL scratch, the neuron arena's touched pages).  Falls back to
    the resource.getrusage() ru_maxrss delta where clear_refs is not writable.
"""
import argparse
import contextlib
import importlib.util
import json
import os
import re
import resource
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TRAIN_GPT = os.path.join(ROOT, "examples", "train_gpt.py")

_tg = None
_data = None


def train_gpt():
    global _tg
    if _tg is None:
        spec = importlib.util.spec_from_file_location("train_gpt", TRAIN_GPT)
        _tg = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_tg)
    return _tg


def char_data():
    global _data
    if _data is None:
        _data = train_gpt().CharData()
    return _data


def config(quick):
    if quick:
        return dict(d_model=256, layers=4, heads=4, block=128, batch=4)
    return dict(d_model=384, layers=6, heads=6, block=256, batch=8)


def make_step(dev, cfg, seed=1337, amp=False, compile_backend=None):
    """(step function, model, losses list) for one device; amp: the forward under
    torch.autocast(dev, dtype=torch.bfloat16) (fp32 weights, optimizer and backward as usual);
    compile_backend: torch.compile the model with that backend (bench/compiled.py)."""
    tg, data = train_gpt(), char_data()
    torch.manual_seed(seed)
    model = tg.GPT(data.vocab_size, cfg["block"], cfg["layers"], cfg["d_model"], cfg["heads"]).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, tg.cosine_with_warmup(10, 1000))
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    losses = []
    params = list(model.parameters())
    fwd = torch.compile(model, backend=compile_backend) if compile_backend else model

    def step():
        x, y = data.get_batch(cfg["batch"], cfg["block"], gen)
        x, y = x.to(dev), y.to(dev)
        with (torch.autocast(device_type=dev, dtype=torch.bfloat16) if amp else contextlib.nullcontext()):
            _, loss = fwd(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())

    return step, model, losses


def step_flops(cfg, vocab):
    """6 * N * tokens (N: matmul parameters, the tied lm head included) + causal attention 6 * L * T * d * tokens."""
    d, L, T = cfg["d_model"], cfg["layers"], cfg["block"]
    n_matmul = L * 12 * d * d + vocab * d
    tokens = cfg["batch"] * T
    return 6.0 * n_matmul * tokens + 6.0 * L * T * d * tokens


def n_params(cfg, vocab):
    tg = train_gpt()
    return sum(p.numel() for p in tg.GPT(vocab, cfg["block"], cfg["layers"], cfg["d_model"], cfg["heads"]).parameters())


# ------------------------------------------------------------------------------- memory subprocess
def _status_kib(key):
    with open("/proc/self/status") as f:
        m = re.search(rf"^{key}:\s+(\d+)\s+kB", f.read(), re.M)
    return int(m.group(1)) if m else None


def _mem_main(dev, cfg, steps):
    tg = train_gpt()  # noqa: F841
    data = char_data()  # noqa: F841
    if dev != "cpu":
        torch.empty(1, device=dev)
        torch.neuron.synchronize()
    torch.randn(8, 8) @ torch.randn(8, 8)     # initialise the CPU BLAS
    method = "VmHWM (clear_refs reset) - VmRSS before the model"
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _status_kib("VmRSS") * 1024
        use_hwm = True
    except OSError:
        method = "ru_maxrss delta"
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        use_hwm = False
    step, model, losses = make_step(dev, cfg)
    for _ in range(steps):
        step()
    if dev != "cpu":
        torch.neuron.synchronize()
    peak = _status_kib("VmHWM") * 1024 if use_hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {"device": dev, "rss_delta": peak - base, "method": method, "steps": steps, "loss0": losses[0]}
    if dev != "cpu":
        out["max_allocated"] = torch.neuron.max_memory_allocated()
        out["max_reserved"] = torch.neuron.max_memory_reserved()
    print("BENCH_MEM " + json.dumps(out), flush=True)


def measure_rss(dev, cfg, steps, timeout=300):
    """Run _mem_main in a fresh interpreter; returns its dict or {'error': ...}."""
    cmd = [sys.executable, "-m", "bench.gpt", "--mem", dev, "--steps", str(steps)]
    for k, v in cfg.items():
        cmd += [f"--{k}", str(v)]
    env = dict(os.environ)
    if dev == "cpu":
        env["TORCHNEURON_DISABLE"] = "1"      # a pure CPU process
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout}s"}
    for line in p.stdout.splitlines():
        if line.startswith("BENCH_MEM "):
            return json.loads(line[len("BENCH_MEM "):])
    tail = (p.stderr or p.stdout).strip().splitlines()
    return {"error": tail[-1][:160] if tail else f"exit code {p.returncode}"}


def main(argv=None):
    ap = argparse.ArgumentParser(description="peak-memory probe for the GPT step (used by python -m bench)")
    ap.add_argument("--mem", required=True, choices=["cpu", "neuron"])
    ap.add_argument("--steps", type=int, default=3)
    for k in ("d_model", "layers", "heads", "block", "batch"):
        ap.add_argument(f"--{k}", type=int, required=True)
    a = ap.parse_args(argv)
    cfg = {k: getattr(a, k) for k in ("d_model", "layers", "heads", "block", "batch")}
    _mem_main(a.mem, cfg, a.steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def gpt_cases(quick, mem=True):
    from .harness import Case

    cfg = config(quick)
    data = char_data()

    def make(amp):
        state = {}

        def setup(dev):
            if dev == "neuron":
                torch.neuron.synchronize()
                state["base"] = torch.neuron.memory_allocated()
                torch.neuron.reset_peak_memory_stats()
            step, model, losses = make_step(dev, cfg, amp=amp)
            state[dev] = losses
            return step

        def after(res):
            ex = res.extra
            ex["config"] = dict(cfg, vocab=data.vocab_size, params=n_params(cfg, data.vocab_size),
                                dtype="bf16 autocast" if amp else "fp32")
            if "neuron" in state and "neuron" not in res.errors:
                ex["neuron_max_allocated"] = torch.neuron.max_memory_allocated() - state["base"]
                ex["neuron_max_reserved"] = torch.neuron.max_memory_reserved()
            for dev in ("neuron", "cpu"):
                if state.get(dev):
                    ex[f"{dev}_loss0"] = state[dev][0]
                    ex[f"{dev}_steps"] = len(state[dev])
            state.clear()
            if mem and not amp:
                for dev in ("neuron", "cpu"):
                    ex[f"{dev}_rss"] = measure_rss(dev, cfg, steps=2 if quick else 3)
        return setup, after

    name = (f"GPT train step d{cfg['d_model']} L{cfg['layers']} H{cfg['heads']} "
            f"T{cfg['block']} B{cfg['batch']}")
    (s32, a32), (s16, a16) = make(False), make(True)
    return [Case(name + " fp32", s32, flops=step_flops(cfg, data.vocab_size), limit="fma", max_iters=1000,
                 after=a32, note="fp32, AdamW, clip_grad_norm_, loss.item() every step"),
            Case(name + " bf16 autocast", s16, flops=step_flops(cfg, data.vocab_size), limit="bf16",
                 max_iters=1000, after=a16,
                 note="forward under torch.autocast(dtype=torch.bfloat16); limit: bf16 dot peak")]
