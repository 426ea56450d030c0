"""Per-op enqueue cost on neuron, and what the launch-site capture and a running profiler add to it.

    python -m bench.enqueue          # prints a table; docs/observability.md quotes it

The queue is held busy by a sleeping record (torch.ops.neuron._queue_sleep) so that each x.add_(1)
is only queued, never run inline: the time per call is the host cost of one eager op (Python binding,
dispatcher, glue, launch record).  Sites on/off are separate processes (NEURON_LAUNCH_SITES=0 turns the
capture hook off at import).
"""
import json
import os
import subprocess
import sys

CHILD = r'''
import json, statistics, sys, time, torch
from torch.profiler import profile, ProfilerActivity
x = torch.zeros(16, device="neuron")
def burst(n=800):
    torch.neuron.synchronize()
    torch.ops.neuron._queue_sleep(300000)
    t0 = time.perf_counter_ns()
    for _ in range(n):
        x.add_(1)
    t1 = time.perf_counter_ns()
    torch.neuron.synchronize()
    return (t1 - t0) / n
def med(k=15):
    burst()
    return statistics.median(burst() for _ in range(k))
r = {"plain_ns": med()}
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
    r["profiled_ns"] = med(5)
t0 = time.perf_counter_ns(); s = torch.ops.neuron._site_probe(1000000); t1 = time.perf_counter_ns()
r["site_capture_ns"] = (t1 - t0) / 1e6
print(json.dumps(r))
'''


def run(sites):
    env = dict(os.environ)
    env["NEURON_LAUNCH_SITES"] = "1" if sites else "0"
    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=600)
    if p.returncode:
        raise RuntimeError(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    on, off = [], []
    for _ in range(3):  # interleaved: a loaded machine drifts
        off.append(run(False))
        on.append(run(True))
    med = lambda rs, k: sorted(r[k] for r in rs)[len(rs) // 2]  # noqa: E731
    a, b = med(off, "plain_ns"), med(on, "plain_ns")
    cap = med(on, "site_capture_ns")
    print(f"per-op enqueue, sites off: {a:8.0f} ns")
    print(f"per-op enqueue, sites on:  {b:8.0f} ns  ({100 * (b - a) / a:+.1f} %)")
    print(f"one site capture (direct): {cap:8.1f} ns  ({100 * cap / a:.1f} % of an enqueue)")
    print(f"per-op enqueue, profiler recording device activities: {med(on, 'profiled_ns'):8.0f} ns")


if __name__ == "__main__":
    main()
