"""TorchNeuron: the native PyTorch backend for the `neuron` device.

Importing this package (which `import torch` does through the `torch.backends` entry point) registers
the device; it never raises: a failure is reported as a warning and `torch.neuron.is_available()`
stays False.  Set TORCHNEURON_DISABLE=1 to skip registration entirely.
"""
import os
import warnings

__version__ = "0.1.0"
_registered = False
_register_error = None


def _autoload():
    """Entry point of the `torch.backends` group.  Registration normally happens when this package is
    imported; when the package is imported *before* torch, torch's autoload calls this while the
    package is still initializing, so it registers here.  Never raises."""
    _try_register()


def _try_register():
    global _register_error
    if _registered or os.environ.get("TORCHNEURON_DISABLE", "0") == "1":
        return
    try:
        _register()
    except Exception as e:  # never break `import torch`
        _register_error = e
        warnings.warn(f"torchneuron: the neuron device is not available: {e}")


def _register():
    global _registered
    import torch

    from . import distributed as _dist
    _dist.apply_launch_env()  # torchrun defaults, before the runtime reads NEURON_NUM_THREADS and the cores
    from . import _C  # noqa: F401  (loads the C runtime, kernels and the op registrations)
    from . import device as _device

    if torch._C._get_privateuse1_backend_name() != "neuron":
        torch.utils.rename_privateuse1_backend("neuron")
    if not hasattr(torch, "neuron"):
        torch._register_device_module("neuron", _device)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    _registered = True
    try:  # c10d backend "neuron" (torch.distributed); never fails the device
        _dist.register()
    except Exception as e:
        warnings.warn(f"torchneuron: the c10d backend 'neuron' is not available: {e}")
    try:  # the nested-tensor fast path of nn.TransformerEncoder; torch.load keeping the CPU's storage contract;
        # a clear error for a neuron tensor pickled for another process
        from . import checkpoint as _checkpoint, nested as _nested, sharing as _sharing
        _nested.register()
        _checkpoint.register()
        _sharing.register()
    except Exception as e:  # never fails the device
        warnings.warn(f"torchneuron: nested tensors / checkpoint restore not registered: {e}")
    try:  # Accelerate's device_map="auto" memory and Transformers' pipeline(device=N) on neuron
        from . import ecosystem as _ecosystem
        _ecosystem.register()
    except Exception as e:  # never fails the device
        warnings.warn(f"torchneuron: Hugging Face adapters not registered: {e}")
    if os.environ.get("TORCHNEURON_CUDA", "0") == "1":  # opt-in: CUDA spellings mean neuron (torchneuron/cuda.py)
        try:
            from . import cuda as _cuda  # noqa: F401
        except Exception as e:
            warnings.warn(f"torchneuron: TORCHNEURON_CUDA=1 but the CUDA compatibility mode failed: {e}")
    try:  # kernels launched by the autograd engine's thread name the backward() call (async errors)
        from .profiler import register_backward_sites
        register_backward_sites()
    except Exception as e:  # never fails the device
        warnings.warn(f"torchneuron: backward launch sites not registered: {e}")
    try:  # torch.compile backend "neuron" (registers when torch._dynamo is imported); never fails the device
        from .compile import register as _reg_compile; _reg_compile()  # noqa: E702
    except Exception:
        pass


import torch  # noqa: E402  (with the package imported first, torch's autoload calls _autoload here)

_try_register()


def get_fallback_ops():
    """ATen ops (e.g. 'aten::kron') that ran on the CPU through the fallback since the last clear."""
    from . import _C
    return _C._fallback_ops()


def get_executed_ops():
    """ATen ops run for neuron tensors (native or fallback) since the last clear."""
    from . import _C
    return _C._executed_ops()


def get_created_dtypes():
    """{dtype name ('torch.float64'): (tensors, bytes)} of the tensors created on neuron since the last clear
    (torchneuron check reports float64 and int64 use from it)."""
    from . import _C
    return {"torch." + name: (n, b) for name, n, b in _C._created_dtypes()}


def clear_op_tracking():
    """Forget the ops recorded by get_fallback_ops(), get_executed_ops() and get_created_dtypes()."""
    from . import _C
    _C._clear_op_tracking()
