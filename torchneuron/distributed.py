"""torch.distributed on neuron: registers the c10d backend ``neuron`` (csrc/torch/distributed.cpp over
the shared-memory collectives of csrc/ccl) and applies the launcher defaults.

Supported on torch 2.13: ``init_process_group("neuron")`` (the backend also serves CPU tensors) and
``init_process_group("cpu:gloo,neuron:neuron")``, with the env:// and tcp:// init methods.  See
docs/distributed.md.
"""
import os
import sys

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
    _after_import("torch.distributed.tensor._ops", register_dtensor_strategies)
    if not hasattr(dist, "set_timeout"):  # 2.13 lacks it; TorchTitan calls it after the first step
        dist.set_timeout = set_timeout
    _allow_monitored_barrier(dist)
    return True


def _allow_monitored_barrier(dist):
    """torch.distributed.monitored_barrier checks the group's backend *name* against "gloo" before it calls
    the group's monitored_barrier, so a plugin backend can never get there.  The neuron backend implements
    it (csrc/torch/distributed.cpp: a barrier bounded by the timeout whose error names the ranks that did
    not arrive, or Gloo's own on the Gloo transport): for groups whose backend is neuron (alone or in a
    device map) the call goes to the group; every other group keeps PyTorch's function as it is."""
    import datetime

    c10d = dist.distributed_c10d
    orig = dist.monitored_barrier
    if getattr(orig, "_neuron", False):
        return

    def monitored_barrier(group=c10d.GroupMember.WORLD, timeout=None, wait_all_ranks=False):
        g = c10d._get_default_group() if group is None or group is c10d.GroupMember.WORLD else group
        if c10d._rank_not_in_group(g) or BACKEND not in str(dist.get_backend(g)):
            return orig(group, timeout, wait_all_ranks)
        if timeout is None:
            timeout = c10d._get_default_timeout(dist.get_backend(g))
        elif isinstance(timeout, (int, float)):
            timeout = datetime.timedelta(seconds=timeout)
        c10d._check_valid_timeout(timeout)
        return g.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)

    monitored_barrier.__doc__ = orig.__doc__
    monitored_barrier._neuron = True
    dist.monitored_barrier = monitored_barrier
    c10d.monitored_barrier = monitored_barrier


def set_timeout(timeout, group=None):
    """torch.distributed.set_timeout for torch 2.13: sets the timeout of every backend of `group` (default:
    the default group), for the collectives issued from now on."""
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    pg.set_timeout(timeout)


# ---- DTensor: sharding strategies for neuron's fused attention ----------------------------------------
# scaled_dot_product_attention on neuron tensors takes aten::_scaled_dot_product_fused_attention_overrideable
# (csrc/torch/ops_nn.cpp), for which torch 2.13's DTensor has no strategy ("does not have a sharding strategy
# registered"), while it has them for CUDA's flash/efficient/cuDNN kernels.  These are the cuDNN ones
# (torch/distributed/tensor/_ops/_matrix_ops.py) on the overrideable ops' argument order: all replicated,
# heads sharded (tensor parallelism, Shard(1)) or batch sharded (Shard(0)).  Registered when DTensor's op
# table is first imported, so that `import torch` does not import DTensor.

def _bias_placement(bias_strategy, dim):
    """The placement of an attention bias when q/k/v are sharded on `dim` (0 batch, 1 heads): sharded
    likewise where the bias has that dim at full size, replicated where it broadcasts (size 1 or absent)."""
    from torch.distributed.tensor.placement_types import Replicate, Shard

    if dim is None:
        return Replicate()
    shape = bias_strategy.shape
    i = dim - (4 - len(shape))
    return Shard(i) if i >= 0 and shape[i] != 1 else Replicate()


def register_dtensor_strategies():
    import torch
    from torch.distributed.tensor.placement_types import Replicate, Shard
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy, register_op_strategy

    aten = torch.ops.aten
    layouts = ((None, Replicate()), (1, Shard(1)), (0, Shard(0)))  # (sharded dim, q/k/v placement)

    @register_op_strategy(aten._scaled_dot_product_fused_attention_overrideable.default,
                          schema_info=RuntimeSchemaInfo(4))
    def _sdpa_overrideable(op_schema):
        # (query, key, value, attn_bias=None, dropout_p, is_causal, return_debug_mask, *, scale)
        # -> (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_attn_mask)
        mesh = op_schema.get_mesh_from_args()
        args = op_schema.args_schema
        bias = args[3] if len(args) > 3 else None
        strategies = []
        for dim, p in layouts:
            row = [p, p, None, None, None, None, None, None, None, p, p, p]
            if bias is not None:
                row.append(_bias_placement(bias, dim))
            strategies.append(row)
        return expand_to_full_mesh_op_strategy(mesh, op_schema, strategies, input_index=9)

    @register_op_strategy(aten._scaled_dot_product_fused_attention_overrideable_backward.default)
    def _sdpa_overrideable_backward(op_schema):
        # (grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k,
        #  max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale)
        # -> (grad_query, grad_key, grad_value, grad_attn_bias); the philox scalars are replicated by DTensor
        mesh = op_schema.get_mesh_from_args(validate=False)
        args = op_schema.args_schema
        bias = args[4]
        strategies = []
        for dim, p in layouts:
            bp = _bias_placement(bias, dim) if bias is not None else None
            row = [p, p, p, None, p, p, p, p, bp, None, p, p, None, None, None, None, None, None,
                   Replicate(), Replicate()]
            strategies.append(row)
        return expand_to_full_mesh_op_strategy(mesh, op_schema, strategies, input_index=4)


def _after_import(name, fn):
    """Runs fn() once module `name` has been imported (now, if it already is), as compile/__init__.py's
    _DynamoImportHook does for torch._dynamo.  A failing fn() warns: it never breaks the import."""
    import importlib.abc
    import importlib.util
    import warnings

    def safe():
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            warnings.warn(f"torchneuron: {fn.__name__} failed: {e}")

    if name in sys.modules:
        safe()
        return

    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            spec = importlib.util.find_spec(fullname)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            exec_module = spec.loader.exec_module

            def run(module):
                exec_module(module)
                safe()

            spec.loader.exec_module = run
            return spec

    sys.meta_path.insert(0, Hook())
