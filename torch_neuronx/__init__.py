"""torch_neuronx: the package name of the native Neuron backend we implement, mapped onto TorchNeuron.

Hugging Face Transformers and Accelerate find the `neuron` device only when a module named
`torch_neuronx` is importable (`importlib.util.find_spec("torch_neuronx")` in
transformers.utils.import_utils.is_torch_neuron_available and accelerate.utils.imports.is_neuron_available);
with it, `TrainingArguments.device`, `Accelerator().device`, `device_map`/`dispatch_model` device numbers,
seeding and RNG checkpointing, and the default `torch.compile` backend of the Trainer all become neuron's.
Code written for that backend imports this module and calls the names below; each is TorchNeuron's own.

    import torch_neuronx                  # the device is registered by `import torch` already
    torch_neuronx.get_fallback_ops()      # ATen ops that ran on the CPU through the fallback
    torch_neuronx.synchronize()

Nothing here registers anything on its own: `import torch` has registered the device through
torchneuron's `torch.backends` entry point (unless TORCHNEURON_DISABLE=1, when importing this module
raises ImportError, so that the libraries above keep to the CPU as they would without the package).
"""
import torch

import torchneuron as _tn

if not _tn._registered:
    raise ImportError("torch_neuronx: the neuron device is not registered "
                      f"({'TORCHNEURON_DISABLE=1' if _tn._register_error is None else _tn._register_error})")

from torchneuron import __version__, clear_op_tracking, distributed, get_executed_ops, get_fallback_ops  # noqa: E402,F401
from torchneuron import device as neuron  # noqa: E402  (torch_neuronx.neuron is the device module, torch.neuron)
from torchneuron import profiler as profiling  # noqa: E402,F401
from torchneuron.device import (  # noqa: E402,F401
    Event, Stream, StreamContext, current_device, current_stream, default_stream, device, device_count,
    empty_cache, get_device_properties, is_available, manual_seed, manual_seed_all, max_memory_allocated,
    max_memory_reserved, memory_allocated, memory_reserved, memory_stats, memory_summary,
    reset_accumulated_memory_stats, reset_peak_memory_stats, set_device, set_stream, stream, synchronize,
)

_lazy_init = neuron.init


def _autoload():
    """The `torch.backends` entry point of the original package; TorchNeuron's own entry point has
    registered the device already."""


def is_neuron_runtime_initialized() -> bool:
    return neuron.is_initialized()


def get_dynamo_metrics():
    """Counters of torch.compile(backend="neuron") in this process (torchneuron.compile_stats())."""
    from torchneuron.compile import compile_stats
    return compile_stats()


def reset_dynamo_metrics():
    from torchneuron.compile import compile_stats
    compile_stats(reset=True)
