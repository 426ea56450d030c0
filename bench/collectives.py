"""The `collectives` group, in the nccl-tests format: all_reduce, all_gather, reduce_scatter, broadcast and
all_to_all on 2 (or --ranks) ranks of this host, from 8 B to 128 MB, out of place and in place, the c10d
backend "neuron" (shared memory and cross-memory attach, csrc/ccl) on neuron tensors next to Gloo on CPU
tensors in the same run, with the machine's memcpy bandwidth and a DDP GPT step at 2 ranks against 1.

The ranks are subprocesses (`init_process_group("cpu:gloo,neuron:neuron")`, loopback, one kernel thread
each, as torchrun gives two ranks on two cores): neuron tensors go to the neuron backend, CPU tensors to
Gloo.  Every case (collective, size, backend, placement) runs a warm-up iteration that also checks the
result, then 3 timed loops of k back-to-back calls (k = 1 to 20, so that the loops fit in --budget
seconds): as in nccl-tests, a loop starts after a barrier and its time is the slower rank's divided by
k; the table gives the median of the 3 loops.  As in nccl-tests:
S = the bytes of the whole array (all_reduce's and broadcast's tensor, all_gather's output,
reduce_scatter's input, all_to_all's input), algbw = S / t (GB = 1e9), busbw = algbw x 2(n-1)/n for
all_reduce, x 1 for broadcast and x (n-1)/n for the others; #wrong counts the elements that differ from
the exact result (small integers in float32).  In place: all_reduce and broadcast (torch.distributed has
no out-of-place form of them, so their out-of-place columns are empty), all_gather_into_tensor with the
input a view of this rank's block of the output, reduce_scatter_tensor with the output a view of this
rank's block of the input, all_to_all_single with one tensor as input and output (not for Gloo, whose
alltoall gives wrong results when its input is its output).

memcpy: one thread copying a 64 MB float32 tensor (`copy_`, torch.set_num_threads(1)) on rank 0 while
the other ranks wait; reported the way memcpy benchmarks do, bytes copied per second (S / t), with the
bytes read + written (2 S / t) beside it.  The 64 MB all_reduce of the issue's target is measured again
at the end, interleaved with memcpy and Gloo (one iteration of each in turn), so that the three see the
same load of the shared machine (each turn: 3 back-to-back copies or calls, 9 turns, the medians).

DDP: the GPT of examples/train_gpt.py (bench/gpt.py's quick config), one training step per iteration
(forward, backward with DDP's gradient all_reduce, AdamW), the same per-rank batch on 1 rank and on 2
(weak scaling); efficiency = tokens/s at 2 ranks / (2 x tokens/s at 1 rank), every rank with one kernel
thread.

    python -m bench.collectives [--quick] [--budget S] [--min-size 8] [--max-size 128M] [--ranks 2,4]
                                [--no-ddp] [--md]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

COLLS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
MIN_SIZE, MAX_SIZE, QUICK_MAX = 8, 128 << 20, 8 << 20
TARGET = 64 << 20             # the all_reduce size
MD_SIZES = (8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 128 << 20)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _factor(coll, n):
    """nccl-tests' bus bandwidth factor."""
    return 2 * (n - 1) / n if coll == "all_reduce" else 1.0 if coll == "broadcast" else (n - 1) / n


def _parse_size(s):
    s = s.strip().upper().rstrip("B")
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if mul > 1 else s) * mul


def _sizes(lo, hi):
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def _label(size):
    return f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB" if size >= 1 << 10 else f"{size} B"


def machine():
    """CPU model and load average, for every figure."""
    model, fam = "unknown CPU", {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "model name" and model == "unknown CPU":
                    model = val.strip()
                elif key in ("cpu family", "model") and key not in fam:
                    fam[key] = val.strip()
                elif not key:
                    break
    except OSError:
        pass
    if fam:
        model += f" (family {fam.get('cpu family', '?')} model {fam.get('model', '?')})"
    try:
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
    except OSError:
        load = "?"
    return {"cpu": model, "cpus": os.cpu_count(), "load": load}


# ---- the rank side: collectives --------------------------------------------------------------------------
def _case(coll, place, n, world, rank, dev):
    """(call, output view, expected values as a (world, n // world) or scalar CPU tensor), or None where
    torch.distributed has no such form.  n: elements of the whole array (a multiple of world)."""
    import torch
    import torch.distributed as dist

    blk = n // world
    col = torch.arange(world, dtype=torch.float32).unsqueeze(1)  # (world, 1), broadcast over a block
    tot = float(world * (world + 1) // 2)
    if coll in ("all_reduce", "broadcast") and place == "oop":
        return None
    if coll == "all_reduce":
        x = torch.full((n,), float(rank + 1), device=dev)
        return (lambda: dist.all_reduce(x)), x, torch.tensor(tot)
    if coll == "broadcast":
        x = torch.full((n,), float(rank + 1), device=dev)
        return (lambda: dist.broadcast(x, src=0)), x, torch.tensor(1.0)
    if coll == "all_gather":
        out = torch.full((n,), -1.0, device=dev)
        inp = out[rank * blk:(rank + 1) * blk] if place == "ip" else torch.empty(blk, device=dev)
        inp.fill_(float(rank + 1))
        return (lambda: dist.all_gather_into_tensor(out, inp)), out, col + 1
    if coll == "reduce_scatter":
        inp = torch.full((n,), float(rank + 1), device=dev)
        out = inp[rank * blk:(rank + 1) * blk] if place == "ip" else torch.empty(blk, device=dev)
        return (lambda: dist.reduce_scatter_tensor(out, inp)), out, torch.tensor(tot)
    # all_to_all: block q of rank p holds p * world + q; afterwards block p holds p * world + rank
    inp = (torch.arange(world, dtype=torch.float32) + rank * world).repeat_interleave(blk).to(dev)
    out = inp if place == "ip" else torch.empty(n, device=dev)
    return (lambda: dist.all_to_all_single(out, inp)), out, col * world + rank


def _wrong(out, want, world):
    import torch

    got = out.detach().cpu()
    if want.dim():
        got = got.view(world, -1)
    return int((got != want).sum())


def _time_once(fn, dev, n=1):
    """n back-to-back calls after a barrier, as nccl-tests times them: the slower rank's seconds / n."""
    import torch
    import torch.distributed as dist

    if dev.type == "neuron":
        torch.neuron.synchronize()
    dist.barrier(group=dist.group.WORLD, device_ids=None)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    if dev.type == "neuron":
        torch.neuron.synchronize()
    dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # CPU tensor: through Gloo, untimed
    return float(dt) / n


def _memcpy_once(rank, a, b, n=1):
    """rank 0 copies a into b n times on one thread; the others wait.  Seconds per copy."""
    import torch
    import torch.distributed as dist

    dist.barrier(group=dist.group.WORLD, device_ids=None)
    dt = torch.zeros(1, dtype=torch.float64)
    if rank == 0:
        t0 = time.perf_counter()
        for _ in range(n):
            b.copy_(a)
        dt[0] = (time.perf_counter() - t0) / n
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    return float(dt)


def _rank_main(out_path, sizes, budget, target_iters):
    import datetime

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.neuron.set_device(rank)
    torch.set_num_threads(1)
    dist.init_process_group("cpu:gloo,neuron:neuron", timeout=datetime.timedelta(seconds=600))
    devs = (("neuron", torch.device("neuron", rank)), ("gloo", torch.device("cpu")))
    rows = []
    for coll in COLLS:
        for size in sizes:
            n = max(world, size // 4 // world * world)  # float32 elements of the whole array
            for backend, dev in devs:
                for place in ("oop", "ip"):
                    # Gloo's alltoall gives wrong results when its input is its output
                    case = None if (backend, coll, place) == ("gloo", "all_to_all", "ip") else \
                        _case(coll, place, n, world, rank, dev)
                    if case is None:
                        continue
                    fn, out, want = case
                    t = _time_once(fn, dev)  # warm-up: first touch, direct path set-up, the check
                    wrong = torch.tensor([_wrong(out, want, world)], dtype=torch.int64)
                    dist.all_reduce(wrong)  # every rank's bad elements
                    iters = int(min(20, max(1, budget / 3 / max(t, 1e-6))))
                    times = [_time_once(fn, dev, iters) for _ in range(3)]
                    rows.append({"coll": coll, "bytes": n * 4, "count": n, "backend": backend, "place": place,
                                 "time_s": statistics.median(times), "iters": iters, "wrong": int(wrong)})
                    del fn, out, want, case
            torch.neuron.empty_cache()
    # the target, interleaved: memcpy, neuron all_reduce, Gloo all_reduce, in turn
    n = TARGET // 4
    a, b = torch.ones(n), torch.empty(n)
    b.copy_(a)
    ar = {be: _case("all_reduce", "ip", n, world, rank, dev)[0] for be, dev in devs}
    for be, dev in devs:
        _time_once(ar[be], dev)
    tgt = {"memcpy": [], "neuron": [], "gloo": []}
    for _ in range(target_iters):
        tgt["memcpy"].append(_memcpy_once(rank, a, b, 3))
        for be, dev in devs:
            tgt[be].append(_time_once(ar[be], dev, 3))
    dist.barrier()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"rows": rows, "world": world, "target": tgt}, f)
    dist.destroy_process_group()


# ---- the rank side: DDP GPT step ------------------------------------------------------------------------
def _ddp_main(out_path, steps):
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from bench import gpt

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.neuron.set_device(rank)
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=600))
    cfg = gpt.config(True)
    tg, data = gpt.train_gpt(), gpt.char_data()
    dev = f"neuron:{rank}"
    torch.manual_seed(1337)
    model = tg.GPT(data.vocab_size, cfg["block"], cfg["layers"], cfg["d_model"], cfg["heads"]).to(dev)
    net = DDP(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(1337 + rank)
    times = []
    for i in range(steps + 2):  # 2 warm-up steps
        x, y = data.get_batch(cfg["batch"], cfg["block"], gen)
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        _, loss = net(x.to(dev), y.to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"step_s": statistics.median(times), "tokens": cfg["batch"] * cfg["block"] * world,
                       "cfg": cfg, "world": world}, f)
    if world > 1:
        dist.destroy_process_group()


# ---- the driver ------------------------------------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(world, args, timeout):
    """Runs `python -m bench.collectives <args> OUT` on world ranks; returns the JSON rank 0 wrote."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="tn-bench-coll-") as tmp:
        out = os.path.join(tmp, "result.json")
        procs = []
        for r in range(world):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                       LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       NEURON_NUM_THREADS="1", NEURON_RT_VISIBLE_CORES=f"0-{max(world, 2) - 1}",
                       OMP_NUM_THREADS="1")
            env.pop("NEURON_CCL_TRANSPORT", None)
            procs.append(subprocess.Popen([sys.executable, "-m", "bench.collectives"] + args + [out], env=env,
                                          cwd=ROOT))
        deadline = time.monotonic() + timeout
        try:
            for p in procs:
                p.wait(timeout=max(1, deadline - time.monotonic()))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(p.returncode for p in procs) or not os.path.exists(out):
            raise RuntimeError(f"collectives bench ranks failed (exit {[p.returncode for p in procs]})")
        with open(out) as f:
            return json.load(f)


def measure_ddp(steps=8, timeout=600):
    """The DDP GPT step on 1 and 2 ranks: {1: {...}, 2: {...}, "efficiency": float}."""
    res = {w: _launch(w, ["--ddp-worker", "--steps", str(steps)], timeout) for w in (1, 2)}
    tps = {w: r["tokens"] / r["step_s"] for w, r in res.items()}
    return {"1": res[1], "2": res[2], "efficiency": tps[2] / (2 * tps[1])}


def measure(quick=False, budget=None, sizes=None, world=2, ddp=None, timeout=1800):
    """Runs `world` ranks; returns {"rows": [...], "world": n, "target": {...}, "machine": {...}, "ddp": ...}."""
    sizes = sizes or _sizes(MIN_SIZE, QUICK_MAX if quick else MAX_SIZE)
    budget = budget or (0.05 if quick else 0.25)
    before = machine()
    res = _launch(world, ["--rank-worker", "--budget", str(budget), "--target-iters", "5" if quick else "9",
                          "--sizes", ",".join(str(s) for s in sizes)], timeout)
    res["ddp"] = measure_ddp(4 if quick else 8) if (ddp if ddp is not None else world == 2) else None
    after = machine()
    res["machine"] = {"cpu": before["cpu"], "cpus": before["cpus"], "load_before": before["load"],
                      "load_after": after["load"]}
    return res


def _target(res):
    """memcpy GB/s (S/t and 2S/t), the 64 MB all_reduce busbw of both backends, from the interleaved runs."""
    t = res["target"]
    n, S = res["world"], TARGET
    mc = statistics.median(t["memcpy"])
    bw = {be: S / statistics.median(t[be]) / 1e9 * _factor("all_reduce", n) for be in ("neuron", "gloo")}
    return {"memcpy": S / mc / 1e9, "memcpy_rw": 2 * S / mc / 1e9, "neuron": bw["neuron"], "gloo": bw["gloo"]}


def _cell(r, coll, n):
    if r is None:
        return f"{'n/a':>9} {'':>7} {'':>7} {'':>6}"
    alg = r["bytes"] / r["time_s"] / 1e9
    return f"{r['time_s'] * 1e6:>9.1f} {alg:>7.2f} {alg * _factor(coll, n):>7.2f} {r['wrong']:>6}"


def table(res):
    """nccl-tests style tables (one per collective and backend), the target line and the DDP scaling."""
    n = res["world"]
    m = res.get("machine", {})
    by = {(r["coll"], r["bytes"], r["backend"], r["place"]): r for r in res["rows"]}
    lines = [f"# {m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs, load average {m.get('load_before', '?')} "
             f"before, {m.get('load_after', '?')} after; {n} ranks, one kernel thread each, float32"]
    for be, what in (("neuron", "neuron backend on neuron tensors"), ("gloo", "Gloo on CPU tensors")):
        wrong, bus, k = 0, 0.0, 0
        for coll in COLLS:
            lines += ["", f"# {coll}: {what}",
                      f"# {'':>38}{'out-of-place':>32}{'in-place':>32}",
                      f"# {'size':>10} {'count':>10} {'type':>6} {'redop':>5} {'root':>4} "
                      f"{'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6} {'time':>9} {'algbw':>7} {'busbw':>7} "
                      f"{'#wrong':>6}",
                      f"# {'(B)':>10} {'(elements)':>10} {'':>6} {'':>5} {'':>4} {'(us)':>9} {'(GB/s)':>7} "
                      f"{'(GB/s)':>7} {'':>6} {'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}"]
            for size in sorted({r["bytes"] for r in res["rows"] if r["coll"] == coll}):
                o, i = by.get((coll, size, be, "oop")), by.get((coll, size, be, "ip"))
                redop = "sum" if coll in ("all_reduce", "reduce_scatter") else "none"
                root = "0" if coll == "broadcast" else "-1"
                lines.append(f"  {size:>10} {size // 4:>10} {'float':>6} {redop:>5} {root:>4} {_cell(o, coll, n)} "
                             f"{_cell(i, coll, n)}")
                for r in (o, i):
                    if r:
                        wrong += r["wrong"]
                        bus += r["bytes"] / r["time_s"] / 1e9 * _factor(coll, n)
                        k += 1
        lines += [f"# {be}: Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
                  f"# {be}: Avg bus bandwidth    : {bus / max(k, 1):.3f}"]
    t = _target(res)
    lines += ["", f"# memcpy, one thread, 64 MB: {t['memcpy']:.2f} GB/s copied (S/t); {t['memcpy_rw']:.2f} GB/s "
              f"read + written (2S/t)",
              f"# all_reduce 64 MB in place (interleaved with memcpy and Gloo, {len(res['target']['memcpy'])} rounds): "
              f"neuron busbw {t['neuron']:.2f} GB/s = {t['neuron'] / t['memcpy']:.0%} of memcpy (S/t), Gloo "
              f"{t['gloo']:.2f} GB/s, neuron / Gloo {t['neuron'] / t['gloo']:.2f}x"]
    d = res.get("ddp")
    if d:
        lines.append(f"# DDP GPT step (d_model {d['1']['cfg']['d_model']}, {d['1']['cfg']['layers']} layers, "
                     f"{d['1']['cfg']['batch']}x{d['1']['cfg']['block']} tokens per rank): 1 rank "
                     f"{d['1']['step_s'] * 1e3:.0f} ms, 2 ranks {d['2']['step_s'] * 1e3:.0f} ms; scaling "
                     f"efficiency {d['efficiency']:.0%}")
    return "\n".join(lines)


def md_section(res, note=""):
    """docs/distributed.md's tables: a subset of sizes, neuron next to Gloo."""
    n = res["world"]
    m = res.get("machine", {})
    by = {(r["coll"], r["bytes"], r["backend"], r["place"]): r for r in res["rows"]}
    t = _target(res)

    def cell(r, coll):
        if r is None:
            return "-"
        return f"{r['time_s'] * 1e3:.3g} ms, {r['bytes'] / r['time_s'] / 1e9 * _factor(coll, n):.2f}"

    out = [f"{n} ranks, {m.get('cpu', '?')} ({m.get('cpus', '?')} CPUs), load average {m.get('load_before', '?')} "
           f"before and {m.get('load_after', '?')} after the run. {note}".rstrip(), "",
           f"memcpy (one thread, 64 MB): **{t['memcpy']:.2f} GB/s** copied (S/t), {t['memcpy_rw']:.2f} GB/s read + "
           f"written. all_reduce 64 MB in place, interleaved with it: neuron busbw **{t['neuron']:.2f} GB/s = "
           f"{t['neuron'] / t['memcpy']:.0%} of memcpy**, Gloo {t['gloo']:.2f} GB/s, **{t['neuron'] / t['gloo']:.1f}x "
           f"Gloo**.", "",
           "| collective | size | neuron out-of-place (time, busbw GB/s) | neuron in place | Gloo out-of-place | "
           "Gloo in place | #wrong |", "|---|---|---|---|---|---|---|"]
    sizes = sorted({r["bytes"] for r in res["rows"]})
    pick = [s for s in sizes if s in MD_SIZES] or sizes
    for coll in COLLS:
        for size in pick:
            rs = [by.get((coll, size, be, pl)) for be in ("neuron", "gloo") for pl in ("oop", "ip")]
            wrong = sum(r["wrong"] for r in rs if r)
            out.append(f"| {coll} | {_label(size)} | " + " | ".join(cell(r, coll) for r in rs) + f" | {wrong} |")
    d = res.get("ddp")
    if d:
        out += ["", f"DDP GPT step (examples/train_gpt.py's model, d_model {d['1']['cfg']['d_model']}, "
                f"{d['1']['cfg']['layers']} layers, {d['1']['cfg']['batch']}x{d['1']['cfg']['block']} tokens per "
                f"rank, one kernel thread per rank): 1 rank {d['1']['step_s'] * 1e3:.0f} ms a step, 2 ranks "
                f"{d['2']['step_s'] * 1e3:.0f} ms (twice the tokens): scaling efficiency **{d['efficiency']:.0%}**."]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.collectives", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="8 B to 8 MB, a shorter budget, 4 DDP steps")
    ap.add_argument("--budget", type=float, default=None, help="seconds of timed iterations per case (0.25)")
    ap.add_argument("--min-size", default=str(MIN_SIZE), help="smallest array (bytes, K/M suffixes; default 8)")
    ap.add_argument("--max-size", default=None, help="largest array (default 128M, --quick 8M)")
    ap.add_argument("--sizes", default=None, help="comma-separated array sizes instead of the doubling range")
    ap.add_argument("--ranks", default="2", help="comma-separated group sizes, one run each (default 2)")
    ap.add_argument("--no-ddp", action="store_true", help="skip the DDP GPT step")
    ap.add_argument("--md", action="store_true", help="print the markdown of docs/distributed.md too")
    ap.add_argument("--json", default=None, help="also write the raw results to this file")
    ap.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--target-iters", type=int, default=9, help=argparse.SUPPRESS)
    ap.add_argument("out", nargs="?", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.sizes:
        sizes = [_parse_size(s) for s in a.sizes.split(",")]
    else:
        sizes = _sizes(_parse_size(a.min_size), _parse_size(a.max_size) if a.max_size else
                       (QUICK_MAX if a.quick else MAX_SIZE))
    if a.rank_worker:
        _rank_main(a.out, sizes, a.budget or 0.25, a.target_iters)
        return 0
    if a.ddp_worker:
        _ddp_main(a.out, a.steps)
        return 0
    results = []
    for world in (int(w) for w in a.ranks.split(",")):
        res = measure(a.quick, a.budget, sizes, world=world, ddp=False if a.no_ddp else None)
        results.append(res)
        print(table(res), flush=True)
        if a.md:
            print(md_section(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
