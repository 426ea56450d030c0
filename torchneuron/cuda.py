"""CUDA compatibility mode: scripts written for CUDA run on neuron unchanged (opt-in).

    import torchneuron.cuda          # in the script, or
    TORCHNEURON_CUDA=1 python train.py

Off unless asked for.  Once on, for the rest of the process:

- `torch.device("cuda")` / `("cuda", N)` / `("cuda:N")` is neuron's device, and `device="cuda"` /
  `"cuda:N"` given to any torch function or tensor method (factories, `.to()`,
  `torch.load(map_location=)`, ...) means neuron:N; so do `Tensor.cuda()` and `Module.cuda()`.  The
  rewrite is a TorchFunctionMode of the thread that turned the mode on (other threads keep "cuda").
- `torch.cuda.*` answers for neuron: is_available, device_count, current_device, set_device, device(),
  synchronize, get_device_name/properties/capability, the random seeds and states, Stream, Event,
  stream(), current_stream, default_stream, the memory statistics, empty_cache, mem_get_info,
  is_bf16_supported, and `torch.cuda.amp.autocast` / `GradScaler`.  PyTorch's own code still sees
  the real torch.cuda (it must not take CUDA-only paths); every other caller sees neuron.
- `torch.autocast("cuda")`, `torch.amp.autocast("cuda")` and `torch.amp.GradScaler("cuda")` are neuron's.
- `torch.backends.cudnn` flags (benchmark, deterministic, enabled, allow_tf32) are accepted and
  recorded; they change nothing on neuron (there is no cuDNN).  `pin_memory` (Tensor.pin_memory,
  DataLoader(pin_memory=True)) already pins for neuron and needs no rewrite.

At exit the mode prints to stderr each call site it rewrote, once, as `file:line  what`, so that the
script can be ported for good; `sites()` returns them as a dict.  Sites inside PyTorch and TorchNeuron
are skipped: the first frame outside them is the one named.
"""
import atexit
import functools
import os
import sys

import torch
from torch.overrides import TorchFunctionMode

_SKIP_DIRS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep)
_sites = {}           # (file, line) -> what was rewritten there
_active = False


def sites():
    """{(file, line): what} of every call site rewritten so far."""
    return dict(_sites)


def _internal(filename) -> bool:
    return filename.startswith(_SKIP_DIRS) or filename.startswith("<frozen")


def _record(what):
    f = sys._getframe(1)
    while f is not None and _internal(f.f_code.co_filename):
        f = f.f_back
    if f is not None:
        _sites.setdefault((f.f_code.co_filename, f.f_lineno), what)


def _called_from_torch() -> bool:
    return _internal(sys._getframe(2).f_code.co_filename)


def _neuron_device(d):
    """neuron's device for a CUDA device spelling (str or torch.device); None for anything else."""
    if isinstance(d, str) and (d == "cuda" or d.startswith("cuda:")):
        return torch.device("neuron" + d[4:])
    if isinstance(d, torch.device) and d.type == "cuda":
        return torch.device("neuron", d.index) if d.index is not None else torch.device("neuron")
    return None


def _map_args(args, kwargs):
    """(args, kwargs, changed) with every CUDA device spelling replaced, positional or keyword."""
    changed = False
    out = list(args)
    for i, a in enumerate(args):
        m = _neuron_device(a)
        if m is not None:
            out[i], changed = m, True
    if kwargs:
        for k in ("device", "map_location"):
            m = _neuron_device(kwargs.get(k))
            if m is not None:
                kwargs = {**kwargs, k: m}
                changed = True
    return out, kwargs, changed


class _CudaDevices(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        args, kwargs, changed = _map_args(args, kwargs or {})
        if changed:
            _record("torch.device('cuda')" if func is torch.device else f"{getattr(func, '__name__', func)}(device='cuda')")
        return func(*args, **kwargs)


# ---- .cuda() -------------------------------------------------------------------------------------

def _tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    _record("Tensor.cuda()")
    dev = torch.device("neuron", device) if isinstance(device, int) else _neuron_device(device) or "neuron"
    return self.to(dev, non_blocking=non_blocking, memory_format=memory_format)


def _module_cuda(self, device=None):
    _record("Module.cuda()")
    dev = torch.device("neuron", device) if isinstance(device, int) else _neuron_device(device) or "neuron"
    return self.to(dev)


# ---- torch.cuda.* --------------------------------------------------------------------------------

_CUDA_FUNCS = (
    "is_available", "device_count", "current_device", "set_device", "device", "device_of", "synchronize",
    "is_initialized", "init", "get_device_name", "get_device_properties", "get_device_capability",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
    "get_rng_state_all", "set_rng_state_all", "Stream", "Event", "stream", "current_stream", "default_stream",
    "set_stream", "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "reset_max_memory_allocated", "empty_cache", "mem_get_info", "memory_summary", "is_bf16_supported",
)


def _cuda_func(name, orig, repl):
    @functools.wraps(repl)
    def f(*args, **kwargs):
        if _called_from_torch():
            return orig(*args, **kwargs)
        _record(f"torch.cuda.{name}")
        args, kwargs, _ = _map_args(args, kwargs)
        return repl(*args, **kwargs)
    return f


class autocast(torch.amp.autocast):
    """torch.autocast / torch.amp.autocast with "cuda" meaning neuron."""

    def __init__(self, device_type, *args, **kwargs):
        if device_type == "cuda":
            _record("autocast('cuda')")
            device_type = "neuron"
        super().__init__(device_type, *args, **kwargs)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler with "cuda" (its default device) meaning neuron."""

    def __init__(self, device="cuda", *args, **kwargs):
        if device == "cuda":
            _record("GradScaler('cuda')")
            device = "neuron"
        super().__init__(device, *args, **kwargs)


def _cuda_amp_autocast(enabled=True, dtype=torch.float16, cache_enabled=True):
    _record("torch.cuda.amp.autocast")
    return autocast("neuron", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


def _cuda_amp_grad_scaler(*args, **kwargs):
    _record("torch.cuda.amp.GradScaler")
    return GradScaler("neuron", *args, **kwargs)


class _CudnnFlags(type(torch.backends.cudnn)):
    """torch.backends.cudnn's module class, recording where a script sets its flags."""

    def __setattr__(self, name, value):
        if name in ("benchmark", "deterministic", "enabled", "allow_tf32"):
            _record(f"torch.backends.cudnn.{name} =")
        super().__setattr__(name, value)


def _report():
    if not _sites:
        return
    lines = [f"torchneuron.cuda: rewrote {len(_sites)} CUDA call site(s) to neuron:"]
    lines += [f"  {file}:{line}  {what}" for (file, line), what in sorted(_sites.items())]
    print("\n".join(lines), file=sys.stderr, flush=True)


def enable():
    """Turn the mode on (importing this module does); idempotent.  Raises RuntimeError if the neuron
    device is not registered."""
    global _active
    if _active:
        return
    import torchneuron
    if not torchneuron._registered:
        raise RuntimeError("torchneuron.cuda: the neuron device is not registered, so CUDA cannot be mapped to it")
    import torch.cuda.amp

    torch.Tensor.cuda = _tensor_cuda
    torch.nn.Module.cuda = _module_cuda
    for name in _CUDA_FUNCS:
        orig = getattr(torch.cuda, name, None)
        if orig is not None:
            setattr(torch.cuda, name, _cuda_func(name, orig, getattr(torch.neuron, name)))
    torch.autocast = torch.amp.autocast = autocast
    torch.amp.GradScaler = GradScaler
    torch.cuda.amp.autocast = _cuda_amp_autocast
    torch.cuda.amp.GradScaler = _cuda_amp_grad_scaler
    torch.backends.cudnn.__class__ = _CudnnFlags
    _CudaDevices().__enter__()  # stays pushed for the life of the thread
    atexit.register(_report)
    _active = True


enable()
