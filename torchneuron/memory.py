"""torch.neuron.memory: memory statistics, and the allocator's history and snapshots in the format of
torch.cuda.memory, so PyTorch's own viewers read them (torch.cuda._memory_viz, pytorch.org/memory_viz).

    torch.neuron.memory._record_memory_history(max_entries=100000)
    train_step()
    torch.neuron.memory._dump_snapshot("snap.pickle")   # open in pytorch.org/memory_viz
"""
import json
import os
import pickle

import torch

from .device import (  # noqa: F401  (torch.cuda.memory offers these too)
    _index, empty_cache, init, max_memory_allocated, max_memory_reserved, mem_get_info, memory_allocated,
    memory_reserved, memory_stats, memory_summary, reset_accumulated_memory_stats, reset_max_memory_allocated,
    reset_peak_memory_stats)


def _record_memory_history(enabled="all", context="all", stacks="python", max_entries=100000, device=None,
                           **kwargs):
    """Record every allocation and free of the device allocator (with the allocating Python stack
    unless stacks is None), as torch.cuda.memory._record_memory_history does.  enabled=None stops and
    drops the history.  C++ stacks are not recorded (stacks="all" records the Python stack)."""
    init()
    if enabled not in (None, "all", "state", True, False):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    on = enabled not in (None, False)
    torch.ops.neuron._memory_history(on, int(max_entries) if enabled != "state" else 0,
                                     stacks is not None and context is not None)


def _snapshot(device=None):
    """The allocator's state: {"segments": [...], "device_traces": [[...], ...]} as torch.cuda.memory._snapshot()
    returns it (segments of `device`, default the current one; traces of every device)."""
    init()
    return json.loads(torch.ops.neuron._memory_snapshot(_index(device)))


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Pickle _snapshot() to filename (the file pytorch.org/memory_viz opens)."""
    s = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(s, f)


def list_gpu_processes(device=None) -> str:
    """The processes using the device.  The arena is this process's own memory, so this lists this
    process with its reserved bytes, in torch.cuda.list_gpu_processes' layout."""
    s = memory_stats(device)
    mib = s.get("reserved_bytes.all.current", 0) / 2**20
    return "\n".join([f"GPU:{_index(device)}", f"process {os.getpid():>10d} uses {mib:12.3f} MB GPU memory"])
