"""torch.neuron: the device module, with the names and meaning of torch.cuda's."""
import atexit
import collections
import contextlib
import os
import platform

import torch

from . import _C

_initialized = False
_in_bad_fork = False  # set in a child forked after the runtime had started its threads
_BAD_FORK_MSG = ("Cannot re-initialize neuron in forked subprocess. To use neuron with multiprocessing, "
                 "you must use the 'spawn' start method")


# ---- device --------------------------------------------------------------------------------------

def is_available() -> bool:
    """True if at least one neuron device is visible (never raises)."""
    return _C._device_count() > 0


def device_count() -> int:
    return _C._device_count()


def init():
    """Initialize the runtime; raises RuntimeError naming the bad NEURON_* variable if any."""
    global _initialized
    if _in_bad_fork:
        raise RuntimeError(_BAD_FORK_MSG)
    _C._init()
    _initialized = True


_lazy_init = init


def is_initialized() -> bool:
    return _initialized


def _is_in_bad_fork() -> bool:
    return _in_bad_fork


def _after_fork_in_child():
    # The runtime decides (its pthread_atfork handler ran first): a child is refused only if the parent
    # had started runtime threads (a queue worker or the kernel pool), not for a device count or init.
    global _in_bad_fork, _initialized
    if _C._in_bad_fork():
        _in_bad_fork = True
        _initialized = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def _autograd_device_threads() -> bool:
    """True if the autograd engine has started its per-device worker threads (named pt_autograd_<d>)."""
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().startswith("pt_autograd_"):
                    return True
    except OSError:
        return True  # cannot tell: drain anyway
    return False


def _drain_autograd_at_exit():
    """atexit (runs before the interpreter finalizes): make each autograd device worker drop the last
    GraphTask it ran, and the Python objects that task holds, while the GIL can still be taken.  Without
    it a worker preempted after a backward drops them during finalization and the process aborts
    (issue 16, 4; the reasoning is at py_autograd_drain in csrc/torch/python.cpp)."""
    if _in_bad_fork or _C._device_count() == 0 or not _autograd_device_threads():
        return
    try:
        _C._autograd_drain()
    except Exception:
        pass  # never turn a clean exit into a traceback


atexit.register(_drain_autograd_at_exit)


def _index(device=None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got {device}")
        return current_device() if device.index is None else device.index
    raise TypeError(f"invalid device {device!r}")


def current_device() -> int:
    init()
    return torch.accelerator.current_device_index()


def set_device(device):
    idx = _index(device)
    if idx >= 0:
        init()
        torch.accelerator.set_device_index(idx)


class device:
    """Context manager that changes the current neuron device."""

    def __init__(self, device):
        self.idx = _index(device) if device is not None else -1
        self.prev = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev = current_device()
            set_device(self.idx)

    def __exit__(self, *exc):
        if self.prev >= 0:
            set_device(self.prev)
        return False


class device_of(device):
    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "neuron" else None)


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


_DeviceProperties = collections.namedtuple(
    "_NeuronDeviceProperties", ["name", "total_memory", "multi_processor_count", "index"])


def get_device_properties(device=None):
    idx = _index(device)
    init()
    name = f"NeuronCore (host, {platform.machine()})"
    return _DeviceProperties(name, _C._memory_limit(idx), _C._num_threads(), idx)


def get_device_capability(device=None):
    return (1, 0)


def synchronize(device=None):
    """Wait for all queued work on a device; raises the first kernel error of its queues."""
    if not _initialized or _in_bad_fork:
        init()
    if device is None:
        _C._synchronize(-1)  # the current device, without the Python-level device lookup
    else:
        _C._synchronize(_index(device))


# ---- random --------------------------------------------------------------------------------------

def _generator(device=None):
    return _C._default_generator(_index(device))


def manual_seed(seed):
    if is_available():
        _generator().manual_seed(int(seed))


def manual_seed_all(seed):
    for i in range(device_count()):
        _C._default_generator(i).manual_seed(int(seed))


def seed():
    if is_available():
        _generator().seed()


def seed_all():
    for i in range(device_count()):
        _C._default_generator(i).seed()


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device="neuron"):
    return _generator(device).get_state()


def set_rng_state(new_state, device="neuron"):
    _generator(device).set_state(new_state)


def get_rng_state_all():
    return [_C._default_generator(i).get_state() for i in range(device_count())]


def set_rng_state_all(new_states):
    for i, s in enumerate(new_states):
        _C._default_generator(i).set_state(s)



# ---- streams and events --------------------------------------------------------------------------

class Stream(torch.Stream):
    """An in-order queue of the device.  `priority` < 0 is higher priority."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if kwargs:  # stream_id/device_index/device_type: wrap an existing stream
            return super().__new__(cls, **kwargs)
        init()
        dev = torch.device("neuron", _index(device))
        with torch.accelerator.device_index(dev.index):
            return super().__new__(cls, device=dev, priority=priority)

    def __eq__(self, o):
        return isinstance(o, torch.Stream) and self.stream_id == o.stream_id and self.device == o.device

    def __hash__(self):
        return hash((self.stream_id, self.device_index))


class Event(torch.Event):
    """A torch.Event on the current neuron device (a plain torch.Event, so that torch.Event's own
    type checks in elapsed_time/wait accept it)."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return torch.Event(device="neuron", enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device=None) -> Stream:
    init()
    return _wrap(torch.accelerator.current_stream(_index(device)))


def default_stream(device=None) -> Stream:
    init()
    return Stream(stream_id=0, device_index=_index(device), device_type=current_stream().device_type)


def set_stream(stream):
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager selecting a stream (and its device)."""

    def __init__(self, stream):
        self.stream = stream
        self.prev = None
        self.prev_dev = None

    def __enter__(self):
        if self.stream is None:
            return
        self.prev_dev = current_device()
        self.prev = torch.accelerator.current_stream(self.stream.device_index)
        set_device(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        torch.accelerator.set_stream(self.prev)
        set_device(self.prev_dev)
        return False


def stream(stream):
    return StreamContext(stream)


# ---- memory --------------------------------------------------------------------------------------

def memory_stats(device=None):
    init()
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    init()
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None):
    init()
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


def empty_cache():
    if is_available():
        torch.accelerator.empty_cache()


def mem_get_info(device=None):
    """(free, total) bytes of the device arena."""
    init()
    return torch.accelerator.get_memory_info(_index(device))


def memory_summary(device=None, abbreviated=False) -> str:
    """The allocator's statistics as a table (torch.cuda.memory_summary's rows: current, peak, total
    allocated and freed), the segment counts, retries, OOMs and the arena limit."""
    s = memory_stats(device)
    mib = lambda b: f"{b / 2**20:.2f} MiB"  # noqa: E731
    rows = [("Allocated memory", "allocated_bytes", mib), ("Active memory", "active_bytes", mib),
            ("Requested memory", "requested_bytes", mib), ("Reserved memory", "reserved_bytes", mib),
            ("Non-releasable memory", "inactive_split_bytes", mib), ("Allocations", "allocation", str),
            ("Active allocs", "active", str), ("Segments", "segment", str),
            ("Non-releasable allocs", "inactive_split", str)]
    w = 24
    lines = [f"neuron:{_index(device)} memory summary (caching allocator)",
             f"{'metric':{w}}{'current':>14}{'peak':>14}{'allocated':>16}{'freed':>16}"]
    for label, key, f in rows[:5] if abbreviated else rows:
        v = [f(s.get(f"{key}.all.{k}", 0)) for k in ("current", "peak", "allocated", "freed")]
        lines.append(f"{label:{w}}{v[0]:>14}{v[1]:>14}{v[2]:>16}{v[3]:>16}")
    lines.append(f"alloc retries: {s.get('num_alloc_retries', 0)}   OOMs: {s.get('num_ooms', 0)}   "
                 f"segments taken: {s.get('num_device_alloc', 0)}   returned: {s.get('num_device_free', 0)}")
    free, total = mem_get_info(device)
    lines.append(f"arena limit: {mib(total)}  free: {mib(free)}")
    return "\n".join(lines)


def list_gpu_processes(device=None) -> str:
    from .memory import list_gpu_processes as f
    return f(device)


# ---- amp -----------------------------------------------------------------------------------------

def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16, torch.float32]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


from . import memory  # noqa: E402,F401  (torch.neuron.memory: history and snapshots)
