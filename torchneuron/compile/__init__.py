"""torch.compile for the neuron device: the Dynamo backend `neuron` and its graph compiler.

    torch.compile(model, backend="neuron")          # or torch.compiler.set_default_backend("neuron")

Dynamo captures the graph, AOTAutograd (core ATen decompositions, min-cut partitioner) splits forward
and backward, the graph compiler (csrc/compiler, C) fuses and emits C, the C compiler builds a shared
object that is cached on disk under NEURON_CACHE_DIR.  docs/compiler.md describes it all.

This package registers the backend and the Dynamo device interface when torch._dynamo is first
imported (importing Dynamo with torch would slow down every `import torch`); it never sets the
default backend.
"""
import importlib.abc
import importlib.util
import sys
import warnings

_registered = False


def backend(gm, example_inputs, **kwargs):
    """The Dynamo backend `neuron` (also the `torch_dynamo_backends` entry point)."""
    from .frontend import backend as _backend
    return _backend(gm, example_inputs, **kwargs)


def compile_stats(reset=False):
    """Counters of the compile path in this process (reset=True clears them afterwards).

    graphs_compiled        graphs turned into programs
    cache_hits             memory_hits + disk_hits (programs found already built)
    cache_misses           programs built by the C compiler
    compile_seconds        our compile time for all graphs (serialize, graph compiler, cc, load);
                           Dynamo/AOTAutograd tracing is not included
    cc_seconds             of which spent in the C compiler
    corrupt_rebuilt        cache entries found corrupted and rebuilt
    calls, kernels_launched
    graphs                 per graph: aten_ops (compute ops in the ATen graph), kernels (fused kernels +
                           library calls + eager ops per call), eager_ops, eager_op_names, launches
                           (queue launches per call), calls, compiled, compile_seconds
    """
    from . import frontend, toolchain

    s = toolchain.stats
    graphs = []
    for p in frontend.programs:
        graphs.append({
            "name": p.name, "aten_ops": getattr(p, "aten_ops", p.kernels_per_call),
            "kernels": p.kernels_per_call, "eager_ops": getattr(p, "eager_steps", p.kernels_per_call),
            "launches": p.launches_per_call, "calls": p.calls, "compiled": hasattr(p, "plan"),
            "eager_op_names": list(getattr(p, "eager_ops", [])),
            "compile_seconds": getattr(p, "compile_seconds", 0.0),
        })
    out = {
        "graphs_compiled": s.graphs_compiled,
        "cache_hits": s.memory_hits + s.disk_hits,
        "memory_hits": s.memory_hits,
        "disk_hits": s.disk_hits,
        "cache_misses": s.misses,
        "compile_seconds": s.compile_seconds,
        "cc_seconds": s.cc_seconds,
        "corrupt_rebuilt": s.rebuilt_corrupt,
        "calls": sum(g["calls"] for g in graphs),
        "kernels_launched": sum(g["calls"] * g["kernels"] for g in graphs),
        "graphs": graphs,
    }
    if reset:
        s.reset()
        frontend.programs.clear()
    return out


def _register_with_dynamo():
    """Register the backend and the device interface (torch._dynamo is imported); never raises."""
    global _registered
    if _registered:
        return
    try:
        from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

        if "neuron" not in _COMPILER_FNS:
            register_backend(compiler_fn=backend, name="neuron")
        from .device_interface import register as _reg_interface

        _reg_interface()
        _registered = True
    except Exception as e:  # never break torch._dynamo's import
        warnings.warn(f"torchneuron: could not register the torch.compile backend: {e}")


class _DynamoImportHook(importlib.abc.MetaPathFinder):
    """Runs _register_with_dynamo right after `torch._dynamo` finishes importing."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch._dynamo":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        orig = loader.exec_module

        def exec_module(module):
            orig(module)
            _register_with_dynamo()

        loader.exec_module = exec_module
        return spec


def register():
    """Called from torchneuron's registration; never raises."""
    try:
        import torchneuron

        torchneuron.compile_stats = compile_stats
        if "torch._dynamo" in sys.modules:
            _register_with_dynamo()
        elif not any(isinstance(f, _DynamoImportHook) for f in sys.meta_path):
            sys.meta_path.insert(0, _DynamoImportHook())
    except Exception as e:
        warnings.warn(f"torchneuron: could not set up the torch.compile backend: {e}")
