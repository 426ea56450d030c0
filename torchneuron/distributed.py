"""torch.distributed on neuron: registers the c10d backend ``neuron`` (csrc/torch/distributed.cpp over
the shared-memory collectives of csrc/ccl) and applies the launcher defaults.

Supported on torch 2.13: ``init_process_group("neuron")`` (the backend also serves CPU tensors) and
``init_process_group("cpu:gloo,neuron:neuron")``, with the env:// and tcp:// init methods.  See
docs/distributed.md.
"""
import os

BACKEND = "neuron"


def apply_launch_env():
    """Under a launcher that sets LOCAL_WORLD_SIZE (torchrun), unless the user chose otherwise: each rank's
    kernel pool takes its share of the CPUs (NEURON_NUM_THREADS = CPUs // LOCAL_WORLD_SIZE, at least 1),
    and each rank sees LOCAL_WORLD_SIZE devices (NEURON_RT_VISIBLE_CORES=0-N-1), so that
    ``torch.neuron.set_device(LOCAL_RANK)`` works.  Runs before the runtime reads these variables."""
    try:
        n = int(os.environ.get("LOCAL_WORLD_SIZE", ""))
    except ValueError:
        return
    if n < 1:
        return
    if "NEURON_NUM_THREADS" not in os.environ:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
        os.environ["NEURON_NUM_THREADS"] = str(max(1, cpus // n))
    if n > 1 and "NEURON_RT_VISIBLE_CORES" not in os.environ:
        os.environ["NEURON_RT_VISIBLE_CORES"] = f"0-{n - 1}"


def _create_backend(dist_opts, backend_opts):
    """The extended-API factory c10d calls once per process group (new_group and DeviceMesh subgroups
    included), with a store already prefixed for the group and device."""
    from . import _C

    return _C._ncl_create_backend(
        dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout, dist_opts.group_id or ""
    )


def register():
    """Registers the backend with torch.distributed (idempotent).  Returns False where torch was built
    without distributed support."""
    import torch.distributed as dist

    if not dist.is_available():
        return False
    if BACKEND.upper() in dist.Backend._plugins:
        return True
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=["neuron", "cpu"])
    return True
