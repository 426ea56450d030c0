"""`make bench-gemm`: the GEMMs at every kernel level this machine has, in one run.

Each level (NEURON_KERNELS=amx, avx512, avx2, portable, as far as the CPU has them) runs in its own
subprocess (the level is read once per process), timing torch.mm (f32, bf16), F.linear (bf16, the weight
transposed as nn.Linear holds it) and torch._int_mm (int8) on neuron; torch CPU eager runs once in the
parent.  Each figure is the median of ROUNDS rounds of at least TARGET_S seconds, in GFLOP/s (int8: GOP/s).
Prints two tables: wall-time rates (the case, torch CPU, each level, and the best level's ratio to the CPU),
then the same per CPU-second (the process's CPU time over the rounds, all its threads: on a shared machine
the kernels compare fairly per CPU-second when the wall times mostly measure the other processes).  No
report file.  `--match TEXT` runs only the cases whose name contains TEXT (e.g. `--match f32`), `--levels
amx,avx512` only those levels.
"""
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

ROUNDS = 5
TARGET_S = 0.2
CASES = [
    ("mm f32", 1024, 1024, 1024), ("mm f32", 2048, 2048, 2048), ("mm f32", 4096, 4096, 4096),
    ("mm f32", 512, 3072, 768), ("mm f32", 128, 768, 768),
    ("mm bf16", 1024, 1024, 1024), ("mm bf16", 2048, 2048, 2048), ("mm bf16", 4096, 4096, 4096),
    ("linear bf16", 512, 3072, 768), ("linear bf16", 512, 768, 3072), ("linear bf16", 128, 768, 768),
    ("linear bf16", 64, 64, 64), ("linear bf16", 16, 4096, 4096),
    ("_int_mm int8", 1024, 1024, 1024), ("_int_mm int8", 2048, 2048, 2048), ("_int_mm int8", 512, 3072, 768),
]


def _step(kind, m, n, k, dev):
    g = torch.Generator().manual_seed(0)
    if kind == "_int_mm int8":
        a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8).to(dev)
        b = torch.randint(-128, 128, (k, n), generator=g, dtype=torch.int8).to(dev)
        return lambda: torch._int_mm(a, b)
    dt = torch.float32 if kind.endswith("f32") else torch.bfloat16
    a = torch.randn(m, k, generator=g).to(dev, dt)
    if kind.startswith("linear"):
        w = torch.randn(n, k, generator=g).to(dev, dt)
        return lambda: F.linear(a, w)
    b = torch.randn(k, n, generator=g).to(dev, dt)
    return lambda: torch.mm(a, b)


def _time(fn, sync):
    fn()
    sync()
    iters, dt = 1, 0.0
    while True:  # calibrate: iterations per round of at least TARGET_S
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        dt = time.perf_counter() - t0
        if dt >= TARGET_S or iters >= 1 << 16:
            break
        iters = max(iters * 2, int(iters * TARGET_S / max(dt, 1e-6)))
    times, cpu = [], []
    for _ in range(ROUNDS):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(iters):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / iters)
        cpu.append((time.process_time() - c0) / iters)
    return statistics.median(times), statistics.median(cpu)


PORTABLE_MAX_MACS = 1 << 30  # the portable C runs only the cases up to 1024^3 (a 4096^3 would take minutes)


def _measure(dev, level=None, match=""):
    if dev == "neuron":
        import torchneuron  # noqa: F401
        sync = torch.neuron.synchronize
    else:
        def sync():
            pass
    out = {}
    for kind, m, n, k in CASES:
        name = f"{kind} {m}x{n}x{k}"
        if (level == "portable" and m * n * k > PORTABLE_MAX_MACS) or match not in name:
            continue
        t, c = _time(_step(kind, m, n, k, dev), sync)
        out[name] = [2.0 * m * n * k / t * 1e-9, 2.0 * m * n * k / c * 1e-9 if c > 0 else None]
    return out


def _levels():
    """The levels with kernels of their own that this CPU runs, best first (avx2: the GEMM family's
    gemm_avx2.c)."""
    have = ["portable"]
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if " avx2 " in flags and " fma " in flags:
        have.append("avx2")
    if " avx512f " in flags and " avx512bw " in flags:
        have.append("avx512")
    if " amx_tile " in flags:
        have.append("amx")
    return list(reversed(have))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    match = argv[argv.index("--match") + 1] if "--match" in argv[:-1] else ""
    if argv and argv[0] == "--child":
        print(json.dumps(_measure("neuron", os.environ.get("NEURON_KERNELS"), match)))
        return 0
    levels = _levels()
    if "--levels" in argv[:-1]:
        levels = [lv for lv in levels if lv in argv[argv.index("--levels") + 1].split(",")]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"bench-gemm: levels {', '.join(levels)}; torch {torch.__version__}, {torch.get_num_threads()} CPU threads; "
          f"load average {load:.2f} at the start", flush=True)
    res = {"cpu": _measure("cpu", match=match)}
    for lv in levels:
        env = dict(os.environ, NEURON_KERNELS=lv)
        p = subprocess.run([sys.executable, "-m", "bench.gemm_levels", "--child", "--match", match], env=env,
                           capture_output=True,
                           text=True, timeout=1800)
        if p.returncode != 0:
            print(f"level {lv}: failed: {p.stderr.strip()[-500:]}")
            continue
        res[lv] = json.loads(p.stdout.strip().splitlines()[-1])
    cols = ["cpu"] + [lv for lv in levels if lv in res]
    for what, i in (("GFLOP/s (wall)", 0), ("GFLOP per CPU-second", 1)):
        head = f"{what:34}" + "".join(f"{c:>10}" for c in cols) + f"{'best/cpu':>10}"
        print(head)
        print("-" * len(head))
        for name in res["cpu"]:
            vals = [res[c][name][i] if name in res[c] else None for c in cols]
            best = max((v for v in vals[1:] if v is not None), default=None)
            ratio = f"{best / vals[0]:.2f}" if best and vals[0] else "-"
            print(f"{name:34}" + "".join(f"{v:10.1f}" if v is not None else f"{'-':>10}" for v in vals) + f"{ratio:>10}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"GFLOP/s (int8: GOP/s), medians of {ROUNDS} rounds; load average {load:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
