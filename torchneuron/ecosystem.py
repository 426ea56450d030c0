"""Adapters for the places where libraries know no device named `neuron` yet: two in Hugging Face's,
one in PyTorch's own Python.

Transformers and Accelerate find the device through the `torch_neuronx` package (shipped beside this
one), and from there pick it for `TrainingArguments`, `Accelerator`, `dispatch_model`, seeding, RNG
checkpoints and the Trainer's torch.compile backend.  Two code paths still enumerate only CUDA and
other vendors (Accelerate 1.15, Transformers 5.23), so on neuron they silently chose the CPU:

- `accelerate.utils.modeling.get_max_memory()` (what `device_map="auto"`, "balanced" and "sequential"
  place by) lists no neuron memory, so every weight was put on the CPU.  Here it also lists each neuron
  device's free arena bytes under its index, as it does for CUDA (an index is the current accelerator's
  device to torch and to `dispatch_model`).
- `transformers.Pipeline(device=N)`, and `device=None` (which means 0), turned an index into the CPU
  (and moved a model that was on neuron back).  Here an index means neuron:N, as it means cuda:N there.

- `torch.nn.attention.flex_attention` (2.13) refuses every device outside cuda/cpu/xpu/hpu/mps in
  `_validate_device`, before it reaches its device-generic eager path (the `sdpa_dense` math
  implementation of the FlexAttention higher-order op, with its autograd), which runs on neuron with
  native kernels.  Here that check lets neuron tensors through and is unchanged for every other device.
  TorchTitan's llama3 configs attend with flex.

Each adapter is installed when its module is first imported, changes nothing when the library already
chose an accelerator (CUDA, or another vendor's), and never raises at import.
"""
import functools
import importlib.abc
import importlib.util
import inspect
import sys
import warnings

import torch


def _neuron_is_the_accelerator() -> bool:
    acc = torch.accelerator.current_accelerator()
    return acc is not None and acc.type == "neuron" and not torch.cuda.is_available()


def _known_device_indices(record) -> bool:
    """A logging filter: False for accelerate's "Device N is not available" about a neuron index."""
    msg = record.getMessage()
    if _neuron_is_the_accelerator() and msg.startswith("Device ") and " is not available" in msg:
        idx = msg[len("Device "):msg.index(" is not available")]
        return not (idx.isdigit() and int(idx) < torch.neuron.device_count())
    return True


def _adapt_get_max_memory(module):
    orig = module.get_max_memory
    if getattr(orig, "_torchneuron", False):
        return

    @functools.wraps(orig)
    def get_max_memory(max_memory=None):
        out = orig(max_memory)
        if max_memory is None and _neuron_is_the_accelerator() and not any(isinstance(k, int) for k in out):
            dev = {i: torch.neuron.mem_get_info(i)[0] for i in range(torch.neuron.device_count())}
            out = {**dev, **out}  # devices first: accelerate fills them in that order, the CPU after
        return out

    get_max_memory._torchneuron = True
    module.get_max_memory = get_max_memory
    module.logger.addFilter(_known_device_indices)  # its CUDA-only count warns "Device 0 is not available"
    utils = sys.modules.get("accelerate.utils")  # already bound there when adapted late
    if utils is not None and getattr(utils, "get_max_memory", None) is orig:
        utils.get_max_memory = get_max_memory


def _adapt_pipeline(module):
    cls = module.Pipeline
    orig = cls.__init__
    if getattr(orig, "_torchneuron", False):
        return
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError:
            return orig(self, *args, **kwargs)  # let the original report the bad call
        dev = bound.arguments.get("device")
        model = bound.arguments.get("model")
        if _neuron_is_the_accelerator() and getattr(model, "hf_device_map", None) is None:
            if dev is None:
                dev = 0
            if isinstance(dev, int) and not isinstance(dev, bool) and dev >= 0:
                bound.arguments["device"] = torch.device("neuron", dev)
        return orig(*bound.args, **bound.kwargs)

    __init__._torchneuron = True
    cls.__init__ = __init__


def _adapt_flex_attention(module):
    orig = module._validate_device
    if getattr(orig, "_torchneuron", False):
        return

    @functools.wraps(orig)
    def _validate_device(query, key, value):
        if query.device.type == "neuron":
            return None
        return orig(query, key, value)

    _validate_device._torchneuron = True
    module._validate_device = _validate_device


_ADAPTERS = {
    "torch.nn.attention.flex_attention": _adapt_flex_attention,
    "accelerate.utils.modeling": _adapt_get_max_memory,
    "transformers.pipelines.base": _adapt_pipeline,
}


def _apply(name, module):
    try:
        _ADAPTERS[name](module)
    except Exception as e:  # never break the library's import
        warnings.warn(f"torchneuron: could not adapt {name} to the neuron device: {e}")


class _PostImportHook(importlib.abc.MetaPathFinder):
    """Applies an adapter right after its module finishes importing (before the package that imports
    it binds its names, e.g. `from .modeling import get_max_memory` in accelerate.utils)."""

    _busy = set()

    def find_spec(self, fullname, path, target=None):
        if fullname not in _ADAPTERS or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        orig = spec.loader.exec_module

        def exec_module(module):
            orig(module)
            _apply(fullname, module)

        spec.loader.exec_module = exec_module
        return spec


def register():
    """Called from torchneuron's registration once the device exists; never raises."""
    for name in _ADAPTERS:
        if name in sys.modules:
            _apply(name, sys.modules[name])
    if not any(isinstance(f, _PostImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportHook())
