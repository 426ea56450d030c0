"""torch.distributed on neuron: registers the c10d backend ``neuron`` (csrc/torch/distributed.cpp over
the shared-memory collectives of csrc/ccl) and applies the launcher defaults.

Supported on torch 2.13: ``init_process_group("neuron")`` (the backend also serves CPU tensors) and
``init_process_group("cpu:gloo,neuron:neuron")``, with the env:// and tcp:// init methods.  See
docs/distributed.md.
"""
import os

BACKEND = "neuron"
transports = {}  # group name -> "shm" or "gloo", as chosen when the group's backend was created


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


def _transport(store, rank, size):
    """'shm' when every rank of the group runs on this host, else 'gloo'; NEURON_CCL_TRANSPORT=shm|gloo
    forces one.  The ranks compare their host names through the group's store."""
    forced = os.environ.get("NEURON_CCL_TRANSPORT", "auto").strip().lower()
    if forced in ("shm", "gloo"):
        return forced
    if forced not in ("", "auto"):
        raise ValueError(f"NEURON_CCL_TRANSPORT='{forced}' is invalid: expected shm, gloo or auto")
    if size == 1:
        return "shm"
    import socket

    me = f"{socket.gethostname()}/{_boot_id()}"
    store.set(f"ncl_host/{rank}", me)
    hosts = {store.get(f"ncl_host/{r}").decode() for r in range(size)}
    return "shm" if hosts == {me} else "gloo"


def _boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _create_backend(dist_opts, backend_opts):
    """The extended-API factory c10d calls once per process group (new_group and DeviceMesh subgroups
    included), with a store already prefixed for the group and device."""
    from . import _C

    store, rank, size, timeout = dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout
    name = dist_opts.group_id or ""
    transport = _transport(store, rank, size)
    transports[name] = transport
    ranks = [int(r) for r in (getattr(dist_opts, "global_ranks_in_group", None) or range(size))]
    if transport == "gloo":
        return _C._ncl_create_gloo_backend(rank, size, timeout, name, _gloo(store, rank, size, timeout), ranks)
    return _C._ncl_create_backend(store, rank, size, timeout, name, ranks)


def _gloo(store, rank, size, timeout):
    """The ProcessGroupGloo under a group on the Gloo transport (also for its splits, NeuronBackend::split)."""
    from torch.distributed import PrefixStore, ProcessGroupGloo

    return ProcessGroupGloo(PrefixStore("ncl_gloo/", store), rank, size, timeout=timeout)


def register():
    """Registers the backend with torch.distributed (idempotent).  Returns False where torch was built
    without distributed support."""
    import torch.distributed as dist

    if not dist.is_available():
        return False
    if BACKEND.upper() in dist.Backend._plugins:
        return True
    from . import _C

    _C._ncl_init_types()
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=["neuron", "cpu"])
    if not hasattr(dist, "set_timeout"):  # 2.13 lacks it; TorchTitan calls it after the first step
        dist.set_timeout = set_timeout
    return True


def set_timeout(timeout, group=None):
    """torch.distributed.set_timeout for torch 2.13: sets the timeout of every backend of `group` (default:
    the default group), for the collectives issued from now on."""
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    pg.set_timeout(timeout)
