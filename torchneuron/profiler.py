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
