"""FSDP on neuron through PyTorch's own FSDP test base, ``FSDPTest`` (torch 2.13 wheel,
torch/testing/_internal/common_fsdp.py): one process per rank, file:// init with
``DISTRIBUTED_BACKEND``, a barrier on ``device_ids=[rank % DEVICE_COUNT]`` around each test.

The wheel ships the base, its models (MLP, MLPStack, NestedWrappedModule, ...) and helpers
(check_sharded_parity, patch_all_gather, patch_reduce_scatter, ``_test_fsdp_parity``), but not the FSDP2
test files (pytorch/pytorch test/distributed/_composable/fsdp/, outside the wheel).  The tests below are
ours, written in those files' patterns with the base's own helpers: training parity against a replicated
(DDP) reference with check_sharded_parity after every step, collective counts through the base's patch
functions, mixed precision, gradient accumulation, state dicts, gradient clipping, DCP; and FSDP1 through
the base's ``_test_fsdp_parity``.

common_fsdp picks DEVICE_TYPE / DISTRIBUTED_BACKEND from CUDA, HPU or XPU only (it would fall back to
cpu/gloo), so they are set to neuron here; its functions read them when they run.  ``FSDPTest._run`` sets
the rank's device only for CUDA and XPU; ``run_test`` below does the same for neuron
(``torch.neuron.set_device(rank)``), as a torchrun script does with LOCAL_RANK.  Each rank needs 2
visible devices: NEURON_RT_VISIBLE_CORES=0-1 (set by the runner).
"""
import copy
import functools
import os
import sys
import tempfile

os.environ.setdefault("NEURON_NUM_THREADS", "1")
os.environ.setdefault("NEURON_RT_VISIBLE_CORES", "0-1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.testing._internal import common_fsdp  # noqa: E402

WORLD_SIZE = 2
common_fsdp.DEVICE_TYPE = "neuron"
common_fsdp.DISTRIBUTED_BACKEND = "neuron"
common_fsdp.DEVICE_COUNT = WORLD_SIZE

from torch.distributed._composable import replicate  # noqa: E402
from torch.distributed.fsdp import (  # noqa: E402
    FSDPModule,
    FullyShardedDataParallel as FSDP,
    MixedPrecisionPolicy,
    ShardingStrategy,
    fully_shard,
)
from torch.distributed.tensor import DTensor, Shard  # noqa: E402
from torch.testing._internal.common_distributed import TEST_SKIPS  # noqa: E402
from torch.testing._internal.common_fsdp import (  # noqa: E402
    DEVICEInitMode,
    FSDPInitMode,
    FSDPTest,
    MLP,
    MLPStack,
    NestedWrappedModule,
    check_sharded_parity,
    patch_all_gather,
    patch_reduce_scatter,
)

device_type = torch.device("neuron")


def requires_devices(n):
    """Skips (with the base's own exit code) unless this process sees n neuron devices."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if torch.neuron.device_count() < n:
                sys.exit(TEST_SKIPS[f"multi-gpu-{n}"].exit_code)
            return fn(*args, **kwargs)
        return wrapper
    return deco


class TestNeuronFSDP(FSDPTest):
    @property
    def world_size(self):
        return WORLD_SIZE

    def run_test(self, test_name, parent_pipe):
        torch.neuron.set_device(self.rank)
        super().run_test(test_name, parent_pipe)

    # ---- helpers -----------------------------------------------------------------------------
    def _ref_and_sharded(self, build, shard):
        torch.manual_seed(42)
        model = build()
        ref = copy.deepcopy(model).to(device_type)
        replicate(ref, device_ids=[self.rank])
        shard(model)
        return ref, model

    def _train_parity(self, ref, model, inp_shape, steps=5, lr=1e-2, sync_every=1):
        ref_opt = torch.optim.Adam(ref.parameters(), lr=lr)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        check_sharded_parity(self, ref, model)
        torch.manual_seed(42 + self.rank + 1)
        for it in range(steps):
            inp = torch.randn(inp_shape, device=device_type)
            losses = []
            for m, o in ((ref, ref_opt), (model, opt)):
                o.zero_grad(set_to_none=(it % 2 == 0))
                losses.append(m(inp).sum())
                losses[-1].backward()
            self.assertEqual(losses[0], losses[1])
            check_sharded_parity(self, ref, model)
            ref_opt.step()
            opt.step()
        check_sharded_parity(self, ref, model)

    # ---- FSDP2 (fully_shard) -----------------------------------------------------------------
    @requires_devices(2)
    def test_fully_shard_train_parity_single_group(self):
        """One FSDP group (root only), even and uneven dim-0 shards, against replicate()."""
        for shapes in ([(16, 15), (15, 8)], [(7, 15), (15, 3)], [(16, 17), (17, 8)]):
            ref, model = self._ref_and_sharded(
                lambda: nn.Sequential(nn.Linear(*shapes[0]), nn.ReLU(), nn.Linear(*shapes[1])),
                lambda m: fully_shard(m))
            self._train_parity(ref, model, (4, shapes[0][0]))

    @requires_devices(2)
    def test_fully_shard_train_parity_multi_group(self):
        """One group per MLP of MLPStack (uneven shards) and the root, for each reshard_after_forward."""
        for raf in (True, False, 2):
            def shard(m, raf=raf):
                for mlp in m:
                    fully_shard(mlp, reshard_after_forward=raf)
                fully_shard(m, reshard_after_forward=raf)
            ref, model = self._ref_and_sharded(lambda: MLPStack(16), shard)
            self._train_parity(ref, model, (2, 16), steps=4)

    @requires_devices(2)
    def test_fully_shard_shard_largest_dim(self):
        """shard_placement_fn: each parameter sharded on its largest dim (Shard(1) for the first weight)."""
        def placement(p):
            return Shard(p.shape.index(max(p.shape)))
        ref, model = self._ref_and_sharded(
            lambda: nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 8)),
            lambda m: fully_shard(m, shard_placement_fn=placement))
        self.assertEqual(model[0].weight.placements, (Shard(1),))  # (16, 32)
        self.assertEqual(model[2].weight.placements, (Shard(1),))  # (8, 16)
        self._train_parity(ref, model, (4, 32))

    @requires_devices(2)
    def test_fully_shard_collective_counts(self):
        """all-gathers and reduce-scatters per step, counted through the base's patch functions: one
        all-gather per group in forward, another in backward for each group resharded after forward
        (not the root's last), one reduce-scatter per group."""
        for raf in (True, False):
            torch.manual_seed(42)
            model = MLPStack(8)
            for mlp in model:
                fully_shard(mlp, reshard_after_forward=raf)
            fully_shard(model, reshard_after_forward=raf)
            counts = {"ag": 0, "rs": 0}
            orig_ag, orig_rs = dist.all_gather_single, dist.reduce_scatter_single

            def ag(*a, **k):
                counts["ag"] += 1
                return orig_ag(*a, **k)

            def rs(*a, **k):
                counts["rs"] += 1
                return orig_rs(*a, **k)

            inp = torch.randn((2, 8), device=device_type)
            with patch_all_gather(ag), patch_reduce_scatter(rs):
                model(inp).sum().backward()
            groups = 3  # the three MLPs; the root holds no parameters of its own here
            self.assertEqual(counts["ag"], groups + (groups if raf else 0), msg=f"reshard_after_forward={raf}")
            self.assertEqual(counts["rs"], groups, msg=f"reshard_after_forward={raf}")

    @requires_devices(2)
    def test_fully_shard_mixed_precision_bf16(self):
        """param_dtype=bf16, reduce_dtype=fp32: gradients equal a bf16 replica's, averaged across ranks in
        fp32 (the upstream mixed-precision tests' reference)."""
        torch.manual_seed(42)
        model = MLPStack(16).to(device_type)
        ref = copy.deepcopy(model)
        ref_bf16 = copy.deepcopy(model).to(torch.bfloat16)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for mlp in model:
            fully_shard(mlp, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=1e-2)
        torch.manual_seed(42 + self.rank + 1)
        for _ in range(3):
            inp = torch.randn((4, 16), device=device_type, dtype=torch.bfloat16)
            loss = model(inp).sum()
            loss.backward()
            ref_loss = ref_bf16(inp).sum()
            ref_loss.backward()
            self.assertEqual(loss.dtype, torch.bfloat16)
            self.assertEqual(loss, ref_loss)
            for p, pb in zip(ref.parameters(), ref_bf16.parameters()):
                p.grad = pb.grad.float()
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
                pb.grad = None
            check_sharded_parity(self, ref, model)
            opt.step()
            ref_opt.step()
            opt.zero_grad()
            with torch.no_grad():
                for p, pb in zip(ref.parameters(), ref_bf16.parameters()):
                    pb.copy_(p)

    @requires_devices(2)
    def test_fully_shard_gradient_accumulation(self):
        """set_requires_gradient_sync(False) for the first micro-batches, then a synced one: the sum of
        the micro-batches' gradients, as a replicated model accumulates them."""
        ref, model = self._ref_and_sharded(lambda: MLPStack(8),
                                           lambda m: ([fully_shard(x) for x in m], fully_shard(m)))
        torch.manual_seed(42 + self.rank + 1)
        inps = [torch.randn((2, 8), device=device_type) for _ in range(3)]
        for i, inp in enumerate(inps):
            last = i == len(inps) - 1
            model.set_requires_gradient_sync(last)
            model(inp).sum().backward()
            ref(inp).sum().backward()
        check_sharded_parity(self, ref, model)

    @requires_devices(2)
    def test_fully_shard_unshard_reshard(self):
        """unshard() gathers full parameters (plain tensors registered), reshard() frees them again."""
        torch.manual_seed(42)
        model = MLP(8, device_type)
        ref = copy.deepcopy(model)
        for p in ref.parameters():
            dist.broadcast(p.detach(), src=0)
        for p in model.parameters():
            dist.broadcast(p.detach(), src=0)
        fully_shard(model)
        self.assertTrue(all(isinstance(p, DTensor) for p in model.parameters()))
        model.unshard()
        for p, rp in zip(model.parameters(), ref.parameters()):
            self.assertNotIsInstance(p, DTensor)
            self.assertEqual(p, rp)
        model.reshard()
        self.assertTrue(all(isinstance(p, DTensor) for p in model.parameters()))
        for p, rp in zip(model.parameters(), ref.parameters()):
            self.assertEqual(p.full_tensor(), rp)

    @requires_devices(2)
    def test_fully_shard_state_dict(self):
        """The sharded state dict holds DTensor shards whose full tensors are the parameters; loading
        it into a freshly sharded model gives the same outputs."""
        torch.manual_seed(42)
        model = MLPStack(8)
        for mlp in model:
            fully_shard(mlp)
        fully_shard(model)
        sd = model.state_dict()
        self.assertTrue(all(isinstance(v, DTensor) for v in sd.values()))
        torch.manual_seed(7)
        other = MLPStack(8)
        for mlp in other:
            fully_shard(mlp)
        fully_shard(other)
        inp = torch.randn((2, 8), device=device_type)
        self.assertNotEqual(model(inp), other(inp))
        other.load_state_dict(sd)
        for k, v in other.state_dict().items():
            self.assertEqual(v.to_local(), sd[k].to_local())
        self.assertEqual(model(inp), other(inp))

    @requires_devices(2)
    def test_fully_shard_clip_grad_norm(self):
        """clip_grad_norm_ over DTensor gradients (a cross-rank all-reduce of the norm) matches the
        replicated model's, total norm and clipped gradients."""
        ref, model = self._ref_and_sharded(lambda: MLPStack(16),
                                           lambda m: ([fully_shard(x) for x in m], fully_shard(m)))
        torch.manual_seed(42 + self.rank + 1)
        inp = torch.randn((4, 16), device=device_type)
        for m in (ref, model):
            (m(inp).sum() * 10).backward()
        for norm_type in (2.0, float("inf")):
            ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm=0.5, norm_type=norm_type)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5, norm_type=norm_type)
            self.assertEqual(ref_norm, norm.full_tensor())
            check_sharded_parity(self, ref, model)

    @requires_devices(2)
    def test_fully_shard_dcp_save_load(self):
        """torch.distributed.checkpoint: the sharded model and optimizer state saved by both ranks and
        loaded into another sharded model and optimizer; the next steps' losses are identical."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        def build(seed):
            torch.manual_seed(seed)
            m = MLPStack(8)
            for mlp in m:
                fully_shard(mlp)
            fully_shard(m)
            return m, torch.optim.Adam(m.parameters(), lr=1e-2)

        model, opt = build(42)
        torch.manual_seed(42 + self.rank + 1)
        inps = [torch.randn((2, 8), device=device_type) for _ in range(4)]
        for inp in inps[:2]:
            model(inp).sum().backward()
            opt.step()
            opt.zero_grad()
        obj = [tempfile.mkdtemp(prefix="tn-dcp-") if self.rank == 0 else None]
        dist.broadcast_object_list(obj)
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=obj[0])
        other, other_opt = build(7)
        msd2, osd2 = get_state_dict(other, other_opt)
        state = {"model": msd2, "optim": osd2}
        dcp.load(state, checkpoint_id=obj[0])
        set_state_dict(other, other_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        for inp in inps[2:]:
            losses = []
            for m, o in ((model, opt), (other, other_opt)):
                losses.append(m(inp).sum())
                losses[-1].backward()
                o.step()
                o.zero_grad()
            self.assertEqual(losses[0], losses[1])
        dist.barrier()
        if self.rank == 0:
            import shutil
            shutil.rmtree(obj[0], ignore_errors=True)

    @requires_devices(2)
    def test_fully_shard_module_api(self):
        """fully_shard returns the module with FSDPModule mixed in; parameters are DTensors on a 1-D
        neuron mesh with Shard(0), their local shards on this rank's device."""
        model = MLP(8)
        fully_shard(model)
        self.assertIsInstance(model, FSDPModule)
        for p in model.parameters():
            self.assertIsInstance(p, DTensor)
            self.assertEqual(p.device_mesh.device_type, "neuron")
            self.assertEqual(p.placements, (Shard(0),))
            self.assertEqual(p.to_local().device, torch.device("neuron", self.rank))

    # ---- FSDP1 (FullyShardedDataParallel) through the base's parity helper -------------------
    @requires_devices(2)
    def test_fsdp1_nested_wrapped_parity(self):
        """FSDP1 on NestedWrappedModule against DDP, the base's _test_fsdp_parity, for FULL_SHARD and
        SHARD_GRAD_OP."""
        for strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.SHARD_GRAD_OP):
            self._test_fsdp_parity(NestedWrappedModule, FSDPInitMode.RECURSIVE,
                                   device_init_mode=DEVICEInitMode.DEVICE_BEFORE,
                                   sharding_strategy=strategy)

    @requires_devices(2)
    def test_fsdp1_use_orig_params_parity(self):
        """FSDP1 with use_orig_params=True against DDP (the base's _test_fsdp_parity)."""
        self._test_fsdp_parity(NestedWrappedModule, FSDPInitMode.RECURSIVE,
                               device_init_mode=DEVICEInitMode.DEVICE_BEFORE, use_orig_params=True)

    @requires_devices(2)
    def test_fsdp1_summon_full_params(self):
        """FSDP1: summon_full_params gives the full flat parameters on every rank."""
        torch.manual_seed(0)
        ref = nn.Sequential(nn.Linear(8, 12), nn.Linear(12, 4)).to(device_type)
        model = FSDP(copy.deepcopy(ref), device_id=torch.device("neuron", self.rank))
        with FSDP.summon_full_params(model):
            for p, rp in zip(model.parameters(), ref.parameters()):
                self.assertEqual(p, rp)
