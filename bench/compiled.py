"""7. torch.compile: the GPT training step and a BERT-style encoder (inference), four ways in one process,
interleaved round by round:

    compiled neuron   torch.compile(model, backend="neuron") on the neuron device
    eager neuron      the same model, eager, on the neuron device
    CPU eager         PyTorch on the CPU
    inductor CPU      torch.compile(model) (inductor, C++ codegen) on the CPU

The GPT step is bench/gpt.py's step (forward, backward, clip_grad_norm_, AdamW, LambdaLR, loss.item())
with the model compiled (the optimizer runs eagerly in every mode: LambdaLR changes the learning rate,
a Python float, every step, which would recompile a compiled optimizer step each time).  BERT: a post-LayerNorm encoder
(12 layers, d 768, 12 heads, FFN 3072, GELU; sequence 128, batch 8) with a key padding mask, under
torch.no_grad(); --quick uses small variants of both.  Compile time (first call, Dynamo + backend) is
measured separately and not in the step times.

    python -m bench.compiled [--quick] [--rounds N] [--only gpt,bert]
"""
import argparse
import gc
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODES = ("compiled neuron", "eager neuron", "CPU eager", "inductor CPU")


# ---- a BERT-style encoder -------------------------------------------------------------------------------

class EncoderLayer(nn.Module):
    def __init__(self, d, h, ff):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.ln1(x + self.o(a.transpose(1, 2).reshape(B, T, C)))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class Bert(nn.Module):
    def __init__(self, vocab=30522, d=768, layers=12, heads=12, ff=3072, max_t=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_t, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList(EncoderLayer(d, heads, ff) for _ in range(layers))

    def forward(self, ids, pad):
        T = ids.shape[1]
        x = self.ln(self.tok(ids) + self.pos(torch.arange(T, device=ids.device)))
        mask = ~pad[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        return x


def bert_config(quick):
    if quick:
        return dict(vocab=1000, d=256, layers=2, heads=4, ff=1024, batch=4, seq=64)
    return dict(vocab=30522, d=768, layers=12, heads=12, ff=3072, batch=8, seq=128)


def bert_setups(quick):
    cfg = bert_config(quick)
    torch.manual_seed(0)
    ref = Bert(cfg["vocab"], cfg["d"], cfg["layers"], cfg["heads"], cfg["ff"]).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]), generator=g)
    lengths = torch.randint(cfg["seq"] // 2, cfg["seq"] + 1, (cfg["batch"],), generator=g)
    pad = torch.arange(cfg["seq"])[None, :] >= lengths[:, None]
    flops = 2.0 * cfg["batch"] * cfg["seq"] * cfg["layers"] * (4 * cfg["d"] ** 2 + 2 * cfg["d"] * cfg["ff"]) \
        + 4.0 * cfg["batch"] * cfg["layers"] * cfg["seq"] ** 2 * cfg["d"]
    outs = {}

    def setup(mode):
        dev = "neuron" if "neuron" in mode else "cpu"
        m = Bert(cfg["vocab"], cfg["d"], cfg["layers"], cfg["heads"], cfg["ff"]).eval()
        m.load_state_dict(ref.state_dict())
        m = m.to(dev)
        if mode == "compiled neuron":
            m = torch.compile(m, backend="neuron")
        elif mode == "inductor CPU":
            m = torch.compile(m, backend="inductor")
        i, p = ids.to(dev), pad.to(dev)

        def step():
            with torch.no_grad():
                y = m(i, p)
            if dev == "neuron":
                torch.neuron.synchronize()
            return y

        def check():
            outs[mode] = step().float().cpu()
        return step, check

    name = (f"BERT inference L{cfg['layers']} d{cfg['d']} H{cfg['heads']} seq {cfg['seq']} "
            f"batch {cfg['batch']} (padding mask)")
    return name, setup, flops, outs


def gpt_setups(quick):
    from . import gpt

    cfg = gpt.config(quick)
    data = gpt.char_data()
    outs = {}

    def setup(mode):
        dev = "neuron" if "neuron" in mode else "cpu"
        step, model, losses = gpt.make_step(dev, cfg, compile_backend={"compiled neuron": "neuron",
                                                                      "inductor CPU": "inductor"}.get(mode))

        def check():
            step()
            outs[mode] = torch.tensor(losses[:1])  # the first step's loss (same weights and batch)
        return step, check

    name = (f"GPT train step d{cfg['d_model']} L{cfg['layers']} H{cfg['heads']} T{cfg['block']} "
            f"B{cfg['batch']} (model compiled; AdamW eager)")
    return name, setup, gpt.step_flops(cfg, data.vocab_size), outs


# ---- timing ------------------------------------------------------------------------------------------------

def _time(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def run_case(name, setup, flops, outs, rounds=3, target_s=0.5, modes=MODES, verbose=True):
    """{mode: {"median": s, "times": [...], "compile_s": s, "error": str}} for one workload."""
    res = {m: {"times": []} for m in modes}
    fns = {}
    for mode in modes:
        try:
            t0 = time.perf_counter()
            step, check = setup(mode)
            check()                         # first call: compiles (compiled modes), warms the caches
            res[mode]["compile_s"] = time.perf_counter() - t0
            t1 = _time(step, 1)
            res[mode]["iters"] = max(1, int(round(target_s / max(t1, 1e-6))))
            fns[mode] = step
        except Exception as e:  # noqa: BLE001
            res[mode]["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            if verbose > 1:
                import traceback
                traceback.print_exc()
    gc.collect()
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(fns)[::-1]
        for mode in order:
            try:
                res[mode]["times"].append(_time(fns[mode], res[mode]["iters"]))
            except Exception as e:  # noqa: BLE001
                res[mode]["error"] = f"{type(e).__name__}: {e}"[:160]
                fns.pop(mode)
    for mode in modes:
        t = res[mode]["times"]
        res[mode]["median"] = statistics.median(t) if t else None
        res[mode]["gflops"] = flops / res[mode]["median"] / 1e9 if t and flops else None
    # agreement with CPU eager (outputs or the first losses)
    ref = outs.get("CPU eager")
    for mode in modes:
        o = outs.get(mode)
        if ref is not None and o is not None and o.shape == ref.shape and o.numel():
            res[mode]["max_rel_diff"] = float(((o - ref).abs() / ref.abs().clamp_min(1e-3)).max())
    del fns
    gc.collect()
    if verbose:
        print(text_table(name, res), flush=True)
    return res


def _ms(t):
    return "-" if t is None else f"{t * 1e3:.1f} ms"


def text_table(name, res):
    base = res.get("eager neuron", {}).get("median")
    ind = res.get("inductor CPU", {}).get("median")
    lines = [f"  {name}",
             f"    {'mode':18} {'median':>11} {'GFLOP/s':>8} {'vs eager neuron':>16} {'vs inductor CPU':>16} "
             f"{'compile':>9}  notes"]
    for mode, r in res.items():
        t = r.get("median")
        g = r.get("gflops")
        lines.append(f"    {mode:18} {_ms(t):>11} {('%.1f' % g) if g else '-':>8} "
                     f"{('%.2fx' % (base / t)) if t and base else '-':>16} {('%.2fx' % (ind / t)) if t and ind else '-':>16} "
                     f"{('%.1f s' % r['compile_s']) if 'compile_s' in r else '-':>9}  "
                     + (r.get("error") or (f"max rel diff vs CPU {r['max_rel_diff']:.1e}" if "max_rel_diff" in r else "")))
    return "\n".join(lines)


def md_section(results, meta):
    out = ["## 7. torch.compile", "",
           "Four modes in one process, interleaved round by round (medians): `torch.compile(backend=\"neuron\")` on "
           "neuron, eager neuron, CPU eager, and `torch.compile` (inductor) on the CPU. Ratios are speedups "
           "(time of the other mode / time of this mode). `compile`: the first call (Dynamo, backend, C "
           "compilers) and setup. " + meta, ""]
    for name, res in results:
        base = res.get("eager neuron", {}).get("median")
        ind = res.get("inductor CPU", {}).get("median")
        out += [f"**{name}**", "", "| mode | median | GFLOP/s | vs eager neuron | vs inductor CPU | compile | notes |",
                "|---|---:|---:|---:|---:|---:|---|"]
        for mode, r in res.items():
            t, g = r.get("median"), r.get("gflops")
            out.append(f"| {mode} | {_ms(t)} | {('%.1f' % g) if g else '-'} | "
                       f"{('%.2fx' % (base / t)) if t and base else '-'} | {('%.2fx' % (ind / t)) if t and ind else '-'} | "
                       f"{('%.1f s' % r['compile_s']) if 'compile_s' in r else '-'} | "
                       + (r.get("error") or (f"max rel diff vs CPU {r['max_rel_diff']:.1e}" if "max_rel_diff" in r else ""))
                       + " |")
        out.append("")
    return "\n".join(out)


def run(quick, rounds=None, target_s=None, only=None, verbose=True, modes=MODES):
    """[(name, results)] for the GPT step and BERT inference."""
    rounds = rounds or (3 if quick else 5)
    target_s = target_s or (0.3 if quick else 1.0)
    results = []
    for key, mk in (("gpt", gpt_setups), ("bert", bert_setups)):
        if only and key not in only:
            continue
        name, setup, flops, outs = mk(quick)
        results.append((name, run_case(name, setup, flops, outs, rounds=rounds, target_s=target_s, modes=modes,
                                       verbose=verbose)))
        torch._dynamo.reset()
        gc.collect()
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.compiled", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--target", type=float, default=None, help="seconds per round per mode")
    ap.add_argument("--only", default=None, help="gpt,bert")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of: " + ", ".join(MODES))
    ap.add_argument("-v", "--verbose", action="count", default=1)
    a = ap.parse_args(argv)
    modes = tuple(m.strip() for m in a.modes.split(","))
    if set(modes) - set(MODES):
        ap.error(f"unknown mode(s): {set(modes) - set(MODES)}")
    print(f"torch.compile: {'quick' if a.quick else 'full'} run; modes: {', '.join(modes)}", flush=True)
    run(a.quick, a.rounds, a.target, set(a.only.split(",")) if a.only else None, verbose=a.verbose, modes=modes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
