"""The `collectives` group: all_reduce, all_gather, reduce_scatter, broadcast and all_to_all bandwidth on 2
(or --ranks) ranks of this host, in the nccl-tests format, the c10d backend "neuron" (shared memory, csrc/ccl) on neuron tensors next to Gloo on CPU
tensors in the same run, with the machine's copy bandwidth.

The ranks are two subprocesses (`init_process_group("cpu:gloo,neuron:neuron")`, loopback, one kernel thread
each): neuron tensors go to the neuron backend, CPU tensors to Gloo.  Each (collective, size, backend) runs
`iters` timed iterations after a warm-up; every iteration starts after a Gloo barrier and its time is the
slower rank's; the table gives the median.  algbw = S / t with S the bytes of the whole array (all_gather's
output, reduce_scatter's input, all_reduce's tensor; GB = 1e9), busbw = algbw x 2(n-1)/n for all_reduce and
1 for broadcast and (n-1)/n for the others (nccl-tests' factors).  #wrong counts the elements that differ from the exact result
(small integers in f32), checked on the first iteration.  The copy bandwidth is a 64 MB `copy_` on one
thread (the figure each rank's single kernel thread can reach), bytes read + written.

    python -m bench.collectives [--quick] [--iters N] [--sizes 1K,64K,1M,16M,64M] [--ranks 2,4] [--md]
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
SIZES = (1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
QUICK_SIZES = (1 << 20, 8 << 20)


def _factor(coll, n):
    """nccl-tests' bus bandwidth factor."""
    return 2 * (n - 1) / n if coll == "all_reduce" else 1.0 if coll == "broadcast" else (n - 1) / n


def _parse_size(s):
    s = s.strip().upper()
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if mul > 1 else s) * mul


# ---- the rank side --------------------------------------------------------------------------------------
def _rank_main(out_path, sizes, iters):
    import datetime

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.neuron.set_device(rank)
    dist.init_process_group("cpu:gloo,neuron:neuron", timeout=datetime.timedelta(seconds=300))
    rows = []
    for coll in COLLS:
        for size in sizes:
            n = size // 4  # f32 elements of the whole array
            for backend, dev in (("neuron", torch.device("neuron", rank)), ("gloo", torch.device("cpu"))):
                times, wrong = [], 0
                for it in range(iters + 1):  # iteration 0: warm-up and the correctness check
                    if coll == "all_reduce":
                        inp = torch.full((n,), float(rank + 1), device=dev)
                        out, want = inp, torch.full((n,), float(world * (world + 1) // 2))
                        fn = lambda: dist.all_reduce(inp)  # noqa: E731
                    elif coll == "all_gather":
                        inp = torch.full((n // world,), float(rank + 1), device=dev)
                        out = torch.empty(n, device=dev)
                        want = torch.arange(1, world + 1, dtype=torch.float32).repeat_interleave(n // world)
                        fn = lambda: dist.all_gather_into_tensor(out, inp)  # noqa: E731
                    elif coll == "reduce_scatter":
                        inp = torch.full((n,), float(rank + 1), device=dev)
                        out = torch.empty(n // world, device=dev)
                        want = torch.full((n // world,), float(world * (world + 1) // 2))
                        fn = lambda: dist.reduce_scatter_tensor(out, inp)  # noqa: E731
                    elif coll == "broadcast":
                        out = torch.full((n,), float(rank + 1), device=dev)
                        want = torch.full((n,), float(world))
                        fn = lambda: dist.broadcast(out, src=world - 1)  # noqa: E731
                    else:  # all_to_all: block q of rank p holds p * world + q
                        inp = (torch.arange(world, dtype=torch.float32) + rank * world).repeat_interleave(n // world).to(dev)
                        out = torch.empty(n // world * world, device=dev)
                        want = (torch.arange(world, dtype=torch.float32) * world + rank).repeat_interleave(n // world)
                        fn = lambda: dist.all_to_all_single(out, inp)  # noqa: E731
                    if dev.type == "neuron":
                        torch.neuron.synchronize()
                    dist.barrier(group=dist.group.WORLD, device_ids=None)
                    t0 = time.perf_counter()
                    fn()
                    if dev.type == "neuron":
                        torch.neuron.synchronize()
                    dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                    dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # CPU tensor: through Gloo, untimed
                    if it == 0:
                        wrong = int((out.cpu() != want).sum())
                    else:
                        times.append(float(dt))
                rows.append({"coll": coll, "bytes": size, "count": n, "backend": backend,
                             "time_s": statistics.median(times), "wrong": wrong})
    copy_gbs = None
    if rank == 0:
        torch.set_num_threads(1)
        a, b = torch.ones(16 << 20), torch.empty(16 << 20)
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            b.copy_(a)
            ts.append(time.perf_counter() - t0)
        copy_gbs = 2 * a.numel() * 4 / statistics.median(ts) / 1e9
    dist.barrier()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"rows": rows, "copy_gbs": copy_gbs, "world": world}, f)
    dist.destroy_process_group()


# ---- the driver ------------------------------------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(quick=False, iters=None, sizes=None, timeout=1200, world=2):
    """Runs `world` ranks; returns {"rows": [...], "copy_gbs": float, "world": world}."""
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    iters = iters or (3 if quick else 7)
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="tn-bench-coll-") as tmp:
        out = os.path.join(tmp, "result.json")
        procs = []
        for r in range(world):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                       LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       NEURON_NUM_THREADS="1", NEURON_RT_VISIBLE_CORES=f"0-{world - 1}", OMP_NUM_THREADS="1")
            env.pop("NEURON_CCL_TRANSPORT", None)
            cmd = [sys.executable, "-m", "bench.collectives", "--rank-worker", out, "--iters", str(iters),
                   "--sizes", ",".join(str(s) for s in sizes)]
            procs.append(subprocess.Popen(cmd, env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
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


def table(res):
    """The nccl-tests style table, neuron next to Gloo, with ratios."""
    n = res["world"]
    copy = res["copy_gbs"]
    by = {(r["coll"], r["bytes"], r["backend"]): r for r in res["rows"]}
    lines = [f"copy_ bandwidth (1 thread, 64 MB, read + write): {copy:.2f} GB/s",
             f"{'collective':>14} {'size(B)':>10} {'count':>9} {'type':>5} | {'neuron time(us)':>15} {'algbw':>6} "
             f"{'busbw':>6} {'#wrong':>6} | {'gloo time(us)':>13} {'algbw':>6} {'busbw':>6} {'#wrong':>6} | "
             f"{'neuron/gloo':>11} {'busbw/copy':>10}"]
    bus_total, k = 0.0, 0
    for coll in COLLS:
        factor = _factor(coll, n)
        for size in sorted({r["bytes"] for r in res["rows"] if r["coll"] == coll}):
            cells = []
            bw = {}
            for be in ("neuron", "gloo"):
                r = by[(coll, size, be)]
                alg = size / r["time_s"] / 1e9
                bw[be] = alg * factor
                cells.append(f"{r['time_s'] * 1e6:>{15 if be == 'neuron' else 13}.0f} {alg:>6.2f} {bw[be]:>6.2f} "
                             f"{r['wrong']:>6}")
            bus_total += bw["neuron"]
            k += 1
            lines.append(f"{coll:>14} {size:>10} {size // 4:>9} {'float':>5} | {cells[0]} | {cells[1]} | "
                         f"{bw['neuron'] / bw['gloo']:>10.2f}x {bw['neuron'] / copy:>9.0%}")
    wrong = sum(r["wrong"] for r in res["rows"])
    lines.append(f" Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    lines.append(f" Avg bus bandwidth    : {bus_total / max(k, 1):.3f} (neuron)")
    return "\n".join(lines)


def md_section(res, note=""):
    n = res["world"]
    by = {(r["coll"], r["bytes"], r["backend"]): r for r in res["rows"]}
    out = [f"## Collectives ({n} ranks, f32)", "",
           f"One-thread `copy_` bandwidth in the same run: {res['copy_gbs']:.2f} GB/s (read + write). {note}", "",
           "| collective | size | neuron time | neuron busbw | #wrong | Gloo (CPU tensors) time | Gloo busbw | #wrong "
           "| neuron / Gloo | neuron busbw / copy |", "|---|---|---|---|---|---|---|---|---|---|"]
    for coll in COLLS:
        factor = _factor(coll, n)
        for size in sorted({r["bytes"] for r in res["rows"] if r["coll"] == coll}):
            a, g = by[(coll, size, "neuron")], by[(coll, size, "gloo")]
            ba, bg = size / a["time_s"] / 1e9 * factor, size / g["time_s"] / 1e9 * factor
            label = f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB"
            out.append(f"| {coll} | {label} | {a['time_s'] * 1e3:.2f} ms | {ba:.2f} GB/s | {a['wrong']} | "
                       f"{g['time_s'] * 1e3:.2f} ms | {bg:.2f} GB/s | {g['wrong']} | {ba / bg:.2f}x | "
                       f"{ba / res['copy_gbs']:.0%} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.collectives", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 and 8 MB, 3 iterations")
    ap.add_argument("--iters", type=int, default=None, help="timed iterations per case (default 7, --quick 3)")
    ap.add_argument("--sizes", default=None, help="comma-separated array sizes in bytes, K/M suffixes (default 1M,16M,64M)")
    ap.add_argument("--ranks", default="2", help="comma-separated group sizes, one run each (default 2)")
    ap.add_argument("--md", action="store_true", help="print the markdown tables of docs/distributed.md too")
    ap.add_argument("--rank-worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    sizes = tuple(_parse_size(s) for s in a.sizes.split(",")) if a.sizes else None
    if a.rank_worker:
        _rank_main(a.rank_worker, sizes or SIZES, a.iters or 7)
        return 0
    for world in (int(w) for w in a.ranks.split(",")):
        res = measure(a.quick, a.iters, sizes, world=world)
        print(f"# {world} ranks")
        print(table(res))
        if a.md:
            print(md_section(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
