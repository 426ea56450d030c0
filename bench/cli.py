"""Command line: run the workload groups, measure the machine limits, print and write the report."""
import argparse
import gc
import json
import os
import sys
import time

import torch

from . import gpt, models, workloads
from .harness import Runner, cpu_snapshot, other_load
from .limits import LIMIT_LABELS, Limits
from .report import build, build_json, loadavg, machine_info, plot_gemm

GROUPS = [
    # key, title, description, limit key, cases(quick)
    ("latency", "1. Per-op latency", "Small ops where the host-side cost dominates. `[enqueue]`: N ops back to back, "
     "one `torch.neuron.synchronize()` at the end, time / N. `[sync each]`: `torch.neuron.synchronize()` after "
     "every op. On the CPU both are the plain op.", None,
     workloads.latency_cases),
    ("gemm", "2. GEMM", "`torch.mm(a, b)` with a: MxK, b: KxN, named `M x N x K`; GEMV is `F.linear(x, W)`.",
     "f32 FMA peak (bf16: the AMX bf16 tile peak where present, else the bf16 dot peak; int8: the AMX int8 tile "
     "peak; GEMV: DRAM read bandwidth)", workloads.gemm_cases),
    ("memory", "3. Memory-bound ops",
     "f32 tensors of 16M elements ([16384, 1024], 64 MiB) and 256K elements ([256, 1024], 1 MiB); "
     "softmax, layer_norm and rms_norm over the last dim (1024). Bytes: binary ops 12/element, unary and "
     "softmax/layer_norm/rms_norm forward 8, reductions 4, backward 12, rms_norm fwd+bwd 20. Backward rows call the ATen op autograd would call: "
     "`aten.gelu_backward`, `aten._softmax_backward_data`, `aten.native_layer_norm_backward` (dx, dw, db).",
     "DRAM triad for 16M, cache-resident triad for 256K (reductions: the read-only bandwidth of the same size)",
     workloads.memory_cases),
    ("sdpa", "4. Scaled dot-product attention", "`F.scaled_dot_product_attention(q, k, v, is_causal=...)`, fp32; "
     "fwd+bwd sets the grads to None and calls `out.backward(grad)`.", "f32 FMA peak", workloads.sdpa_cases),
    ("gpt", "5. GPT training step", "The model of `examples/train_gpt.py`; one step = batch to device, forward, "
     "backward, clip_grad_norm_, AdamW, LambdaLR, `loss.item()`. GFLOP/s from 6 x matmul params x tokens + "
     "causal attention 6 x L x T x d x tokens.", "f32 FMA peak (i.e. MFU)", None),
    ("adamw", "6. AdamW step", "`torch.optim.AdamW(...).step()` over 16 tensors of 1M fp32 parameters (--quick: 4) "
     "(16.8M); GB/s against the 28 bytes per parameter AdamW must touch (read param, grad, exp_avg, exp_avg_sq; "
     "write param, exp_avg, exp_avg_sq).", "DRAM triad", workloads.adamw_cases),
    ("models", "7. Models", "BERT-base inference (plain modules, `F.scaled_dot_product_attention` with a padding "
     "mask, `torch.inference_mode()`) and a small CNN training step (conv3x3-BatchNorm-ReLU-maxpool x 3, Linear, "
     "cross-entropy, SGD with momentum); `bench/models.py`.", "f32 FMA peak", models.model_cases),
]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer rounds, shorter rounds, smaller GPT/BERT/SDPA/AdamW, no 4096^3 GEMMs, no peak-RSS "
                    "subprocesses (under 2 minutes on a quiet machine)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per workload (default 5, --quick 3)")
    ap.add_argument("--target", type=float, default=None,
                    help="seconds per round per device (default 0.25, --quick 0.1)")
    ap.add_argument("--out", default=None,
                    help="Markdown report path (default docs/benchmarks.md for a full run, none for --quick; "
                         "'-' for none)")
    ap.add_argument("--json", default=None,
                    help="machine-readable report path (default: the Markdown path with .json, i.e. "
                         "docs/benchmarks.json for a full run; '-' for none); read by `python -m bench.profile`")
    ap.add_argument("--only", default=None,
                    help="comma-separated groups: " + ",".join(g[0] for g in GROUPS) + ",compiled,collectives,custom "
                         "(collectives: 2 ranks, neuron vs Gloo; bench/collectives.py; custom: per-call cost of "
                         "a torchneuron.kernel op, bench/custom_ops.py)")
    ap.add_argument("--no-limits", action="store_true", help="skip the C microbenchmarks")
    ap.add_argument("--no-mem", action="store_true", help="skip the GPT peak-RSS subprocesses (--quick skips them)")
    ap.add_argument("--retries", type=int, default=1,
                    help="full run: re-measure a case (under 10 s) up to this many times when other processes "
                         "used >= 25%% of the CPUs during it, keeping the least busy run; at most 60 s of "
                         "re-runs in all (default 1; --quick: 0)")
    ap.add_argument("-v", "--verbose", action="count", default=1)
    a = ap.parse_args(argv)

    if not (hasattr(torch, "neuron") and torch.neuron.is_available()):
        print("bench: the neuron device is not available (is torchneuron installed?)", file=sys.stderr)
        return 1
    rounds = a.rounds or (3 if a.quick else 5)
    target = a.target or (0.1 if a.quick else 0.25)
    out = a.out
    if out is None and not a.quick:
        out = os.path.join("docs", "benchmarks.md")
    if out == "-":
        out = None
    only = set(a.only.split(",")) if a.only else None
    if only:
        bad = only - {g[0] for g in GROUPS} - {"compiled", "collectives", "custom"}
        if bad:
            ap.error(f"unknown group(s): {', '.join(sorted(bad))}")

    t0 = time.perf_counter()
    meta = {"command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "mode": "quick" if a.quick else "full",
            "rounds": rounds, "target_s": target, "load_start": loadavg()}
    info = machine_info()
    snap0 = cpu_snapshot()
    print(f"bench: {meta['mode']} run, {rounds} rounds, ~{target} s per round per device")
    print(f"machine: {info['cpu']}, {info['cores']}; torch {info['torch']}; torchneuron {info['torchneuron']}",
          flush=True)

    limits = None
    if not a.no_limits:
        limits = Limits(quick=a.quick)
        print("machine limits (C microbenchmarks) ...", flush=True)
        limits.measure()
        if limits.error:
            print(f"  {limits.error}")

    runner = Runner(rounds=rounds, warmup=3 if a.quick else 5, target_s=target, verbose=a.verbose,
                    retry_busy=0 if a.quick else a.retries)
    groups = []
    for key, title, desc, limit_desc, mk in GROUPS:
        if only and key not in only:
            continue
        print(f"{title}", flush=True)
        try:
            cases = gpt.gpt_cases(a.quick, mem=not (a.no_mem or a.quick)) if key == "gpt" else mk(a.quick)
        except Exception as e:  # noqa: BLE001
            print(f"  cannot build the workloads: {e}")
            continue
        results = [runner.run(c) for c in cases]
        groups.append({"key": key, "title": title, "desc": desc, "limit": limit_desc, "results": results})
        if key == "memory" and limits is not None and not limits.error and not a.quick:
            print("machine limits again (each limit: the median of its measurements) ...", flush=True)
            limits.measure()
        gc.collect()
        try:
            torch.neuron.synchronize()
            torch.neuron.empty_cache()
        except Exception:  # noqa: BLE001
            pass

    # ---- 7. torch.compile (bench/compiled.py: four modes, its own interleaved timing) ----
    compiled_text = compiled_md = cres = None
    if not only or "compiled" in only:
        from . import compiled
        print("7. torch.compile (compiled neuron, eager neuron, CPU eager, inductor CPU)", flush=True)
        try:
            cres = compiled.run(a.quick, rounds=rounds, verbose=a.verbose)
            compiled_text = "\n".join(compiled.text_table(n, r) for n, r in cres)
            compiled_md = compiled.md_section(cres, f"{rounds} rounds.")
        except Exception as e:  # noqa: BLE001
            print(f"  torch.compile workloads failed: {e}")

    # ---- 8. collectives (bench/collectives.py: 2 rank processes, neuron next to Gloo) ----
    coll_text = coll_md = None
    if not only or "collectives" in only:
        from . import collectives
        print("8. Collectives (2 ranks: neuron backend on neuron tensors, Gloo on CPU tensors)", flush=True)
        try:
            cr = collectives.measure(a.quick)
            coll_text, coll_md = collectives.table(cr), collectives.md_section(cr)
        except Exception as e:  # noqa: BLE001
            print(f"  collectives failed: {e}")

    # ---- 9. custom kernel ops (bench/custom_ops.py: a torchneuron.kernel op next to a native one) ----
    cust_text = cust_md = None
    if not only or "custom" in only:
        from . import custom_ops
        print("9. Custom kernel ops (per-call cost, torchneuron.kernel vs native)", flush=True)
        try:
            cr = custom_ops.measure()
            cust_text, cust_md = custom_ops.table(cr), custom_ops.md_section(cr)
        except Exception as e:  # noqa: BLE001
            print(f"  custom kernel ops failed: {e}")

    if limits is not None and not limits.error:
        print("machine limits again (each limit: the median of its measurements) ...", flush=True)
        limits.measure()
        limits.cleanup()

    meta["load_end"] = loadavg()
    meta["elapsed"] = time.perf_counter() - t0
    meta["other_load"] = other_load(snap0, cpu_snapshot())
    if out:
        png = os.path.join(os.path.dirname(out), "gemm.png")
        try:
            why = plot_gemm(groups, limits, png)
        except Exception as e:  # noqa: BLE001
            why = f"plot failed: {e}"
        meta["gemm_png"] = (f"GFLOP/s against size (square f32 and bf16 mm, neuron and torch CPU, with the measured "
                            f"peaks): ![GEMM throughput](gemm.png)" if why is None else f"(gemm.png not drawn: {why})")
        print(f"wrote {png}" if why is None else f"gemm.png not drawn: {why}")
    text, md = build(groups, limits, info, meta)
    if compiled_md:
        text += "\n\n7. torch.compile\n" + compiled_text
        md += "\n\n" + compiled_md + "\n"
    if coll_md:
        text += "\n\n8. Collectives\n" + coll_text
        md += "\n\n" + coll_md + "\n"
    if cust_md:
        text += "\n\n9. Custom kernel ops\n" + cust_text
        md += "\n\n" + cust_md + "\n"
    print()
    print(text)
    if out:
        d = os.path.dirname(out)
        if d:
            os.makedirs(d, exist_ok=True)
        old = open(out).read() if os.path.exists(out) else ""
        with open(out, "w") as f:
            f.write(merge_cpu_sections(old, md, info.get("cpu") or "unknown"))
        print(f"\nwrote {out} (the section of this CPU kind: {info.get('cpu')})")
    jpath = a.json if a.json is not None else (os.path.splitext(out)[0] + ".json" if out else None)
    if jpath and jpath != "-":
        d = os.path.dirname(jpath)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(jpath, "w") as f:
            json.dump(build_json(groups, limits, info, meta, cres), f, indent=1)
            f.write("\n")
        print(f"wrote {jpath}")
    print(f"bench: done in {meta['elapsed']:.0f} s")
    return 0


CPU_MARK = "<!-- cpu section: "


def merge_cpu_sections(old, md, kind):
    """docs/benchmarks.md keeps one section per CPU kind (the `model name` of /proc/cpuinfo), each from a run on
    that machine: the new report replaces its own kind's section and the others are kept after it, so that a
    change that helps one machine and hurts another shows.  Sections start with a `<!-- cpu section: KIND -->`
    line; an unmarked report (the older format) is the section of the CPU its `- **cpu**:` line names."""
    sections, cur, buf = [], None, []
    for line in old.splitlines(keepends=True):
        if line.startswith(CPU_MARK):
            if buf:
                sections.append((cur, "".join(buf)))
            cur, buf = line[len(CPU_MARK):].split(" -->")[0].strip(), []
            continue
        buf.append(line)
    if buf:
        sections.append((cur, "".join(buf)))
    out = [f"{CPU_MARK}{kind} -->\n", md.rstrip("\n") + "\n"]
    for k, text in sections:
        if k is None:  # unmarked: its kind from the machine table
            k = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("- **cpu**:")), None)
        if k is None or k == kind or not text.strip():
            continue
        out += ["\n", f"{CPU_MARK}{k} -->\n", text.lstrip("\n")]
    return "".join(out)


def group_cases(key, quick):
    """The Case list of one group of GROUPS (the GPT group without its peak-RSS subprocesses)."""
    for k, _title, _desc, _lim, mk in GROUPS:
        if k == key:
            return gpt.gpt_cases(quick, mem=False) if k == "gpt" else mk(quick)
    raise KeyError(f"unknown group {key!r}; groups: {', '.join(g[0] for g in GROUPS)}")


def find_case(name, quick=False, group=None):
    """(group key, Case) of the workload called `name` (as in the report), building only the groups needed."""
    keys = [group] if group else [g[0] for g in GROUPS]
    for key in keys:
        for c in group_cases(key, quick):
            if c.name == name:
                return key, c
    raise KeyError(f"no workload named {name!r} in group(s) {', '.join(keys)} ({'quick' if quick else 'full'} sizes)")
