"""The CPU reference for tests/models/titan.py: TorchTitan's own trainer, computing on the CPU.

    torchrun ... -m tests.models.titan_cpu <the same torchtitan.train arguments>

TorchTitan 0.3.0 has no CPU device path: its probe (torchtitan/tools/utils.py, at import) takes
torch._utils._get_available_device_type() or "cuda". For this reference run only, that probe is pointed at
"cpu" and the device module it returns is torch.cpu plus the few calls TorchTitan's memory monitor makes
(no device memory statistics on the CPU: the monitor's -1 path) and a stream that is always done (the
checkpoint writer synchronizes it).

Its collectives cannot go over Gloo: TorchTitan sets FSDP2's gradient divide factor to 1.0 (it scales the
loss by the global token count itself), so FSDP2 reduce-scatters with ReduceOp.PREMUL_SUM(1.0), and Gloo
raises "Cannot use ReduceOp.PREMUL_SUM with Gloo". This run's process group is therefore our c10d backend
on CPU tensors (it takes both devices, and PREMUL_SUM); every computation stays on PyTorch's CPU path.

The stock config attends with FlexAttention, whose CPU entry in torch 2.13 refuses a backward ("FlexAttention
does not support backward on CPU": its compiled CPU kernels have none). The eager path below that check is
device-generic (the sdpa_dense math implementation with its autograd, the one neuron runs), so this run lets
CPU tensors through the check too; tests/python/test_flex_attention.py checks that path against a float64
hand-written attention. Nothing else changes, no TorchTitan or PyTorch file is touched, and the neuron run
does not use this module.
"""
import contextlib
import os
import runpy
import types

import torch
import torch._utils


class _CpuStream:
    """What the CPU's work needs of a stream: everything is done already (torch.cpu.Stream has none of it;
    torch.distributed.checkpoint's writer calls synchronize and wait_stream)."""

    device_type = "cpu"

    def synchronize(self):
        pass

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        return event

    def query(self):
        return True


def _cpu_module():
    m = types.ModuleType("torchtitan_cpu_device")
    for name in ("is_available", "synchronize", "device_count", "Event"):
        setattr(m, name, getattr(torch.cpu, name))
    _stream = _CpuStream()
    m.Stream = lambda *a, **k: _stream
    m.current_stream = lambda device=None: _stream
    m.stream = lambda stream=None: contextlib.nullcontext()
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    m.device_count = lambda: 1
    m.current_device = lambda: 0
    m.set_device = lambda device: None
    m.get_device_name = lambda device=None: "cpu"
    m.get_device_properties = lambda device=None: types.SimpleNamespace(name="cpu", total_memory=total)
    m.reset_peak_memory_stats = lambda device=None: None
    m.empty_cache = lambda: None
    m.memory_stats = lambda device=None: {}
    return m


_CPU = _cpu_module()
_orig_module = torch._utils._get_device_module
torch._utils._get_available_device_type = lambda: "cpu"
torch._utils._get_device_module = lambda t="cuda": _CPU if t == "cpu" else _orig_module(t)


def _allow_eager_flex_backward():
    import torch.nn.attention.flex_attention as fa

    orig = fa._validate_device

    def _validate_device(query, key, value):
        if query.device.type == "cpu":
            return None
        return orig(query, key, value)

    fa._validate_device = _validate_device


_allow_eager_flex_backward()

import torch.distributed as dist  # noqa: E402

dist.Backend.default_device_backend_map["cpu"] = "neuron"  # TorchTitan's backend lookup: see the module text

if __name__ == "__main__":
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
