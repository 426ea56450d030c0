"""DTensor and tensor parallelism on neuron through PyTorch's own DTensor test base, ``DTensorTestBase``
(torch 2.13 wheel, torch/testing/_internal/distributed/_tensor/common_dtensor.py): one process per
rank, ``@with_comms`` around each test (init_pg, file:// init; a barrier on the rank's device and
destroy_process_group after it), its models (MLPModule, Transformer with its own ``parallelize`` plan)
and helpers (``_test_op`` with DTensorConverter, which tries every sharding of the arguments).

The base finds neuron itself (TEST_PRIVATEUSE1: DEVICE_TYPE = the current accelerator, NUM_DEVICES =
the visible devices, here 2 with NEURON_RT_VISIBLE_CORES=0-1), but ``init_pg`` accepts only its list of
backend strings, where a plain "neuron" raises "Backend neuron not supported!"; ``backend`` below gives
"cpu:gloo,neuron:neuron", the accelerator form of that list (f"cpu:gloo,{device_type}:{backend}").
``init_pg`` sets the rank's device only for nccl and xccl; below it does so for neuron too.

The wheel ships no DTensor test files (pytorch/pytorch test/distributed/tensor/); the tests below are
ours, in those files' patterns.
"""
import os

os.environ.setdefault("NEURON_NUM_THREADS", "1")
os.environ.setdefault("NEURON_RT_VISIBLE_CORES", "0-1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
from torch.distributed.tensor import (  # noqa: E402
    DTensor,
    Partial,
    Replicate,
    Shard,
    distribute_tensor,
)
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from torch.testing._internal.distributed._tensor.common_dtensor import (  # noqa: E402
    DTensorTestBase,
    MLPModule,
    ModelArgs,
    Transformer,
    with_comms,
)

c10d_functional = torch.ops.c10d_functional


class TestNeuronDTensor(DTensorTestBase):
    @property
    def backend(self):
        return f"cpu:gloo,{self.device_type}:{dist.get_default_backend_for_device(self.device_type)}"

    def init_pg(self, eager_init, backend=None):
        if self.device_type == "neuron":
            torch.accelerator.set_device_index(self.rank)
        super().init_pg(eager_init, backend)

    def _mesh(self):
        self.assertEqual(self.device_type, "neuron")
        return self.build_device_mesh()

    @with_comms
    def test_device_mesh(self):
        mesh = self._mesh()
        self.assertEqual(mesh.device_type, "neuron")
        self.assertEqual(mesh.size(), self.world_size)
        self.assertEqual(mesh.get_local_rank(), self.rank)
        t = torch.ones(4, device="neuron") * (self.rank + 1)
        dist.all_reduce(t, group=mesh.get_group())
        self.assertEqual(t, torch.full((4,), 3.0, device="neuron"))

    @with_comms
    def test_distribute_tensor(self):
        """Shard(0), Shard(1) (uneven), Replicate: local shapes and full_tensor() against the source."""
        mesh = self._mesh()
        torch.manual_seed(0)
        full = torch.randn(7, 5, device="neuron")
        for placements, local_shape in (([Shard(0)], (4 - self.rank, 5)),
                                        ([Shard(1)], (7, 3 - self.rank)),
                                        ([Replicate()], (7, 5))):
            d = distribute_tensor(full, mesh, placements)
            self.assertEqual(d.to_local().shape, local_shape)
            self.assertEqual(d.to_local().device, torch.device("neuron", self.rank))
            self.assertEqual(d.full_tensor(), full)

    @with_comms
    def test_redistribute(self):
        """Every transition of a 1-D mesh, with the collective each one takes (CommDebugMode)."""
        mesh = self._mesh()
        torch.manual_seed(0)
        full = torch.randn(8, 6, device="neuron")
        cases = [
            ([Shard(0)], [Replicate()], c10d_functional.all_gather_into_tensor),
            ([Shard(0)], [Shard(1)], "any"),  # all_to_all, or all-gather then chunk, as DTensor decides
            ([Replicate()], [Shard(1)], None),
        ]
        for src, dst, coll in cases:
            d = distribute_tensor(full, mesh, src)
            with CommDebugMode() as comm:
                r = d.redistribute(mesh, dst)
            self.assertEqual(r.placements, tuple(dst))
            self.assertEqual(r.full_tensor(), full)
            if coll == "any":
                self.assertEqual(comm.get_total_counts(), 1, msg=f"{src} -> {dst}: {comm.get_comm_counts()}")
            elif coll is not None:
                self.assertEqual(comm.get_comm_counts()[coll], 1, msg=f"{src} -> {dst}: {comm.get_comm_counts()}")
            else:
                self.assertEqual(comm.get_total_counts(), 0)
        # Partial: each rank holds a summand
        local = torch.full((8, 6), float(self.rank + 1), device="neuron")
        total = torch.full((8, 6), 3.0, device="neuron")
        for dst, coll in (([Replicate()], c10d_functional.all_reduce),
                          ([Shard(0)], c10d_functional.reduce_scatter_tensor)):
            p = DTensor.from_local(local, mesh, [Partial()])
            with CommDebugMode() as comm:
                r = p.redistribute(mesh, dst)
            self.assertEqual(comm.get_comm_counts()[coll], 1, msg=f"Partial -> {dst}")
            self.assertEqual(r.full_tensor(), total)

    @with_comms
    def test_dtensor_ops(self):
        """The base's _test_op: the op on every sharding of its DTensor arguments equals the op on the
        plain tensors (matmul, add, sum, softmax)."""
        mesh = self._mesh()
        torch.manual_seed(0)
        a = torch.randn(8, 4, device="neuron", requires_grad=True)
        b = torch.randn(4, 6, device="neuron", requires_grad=True)
        self._test_op(mesh, torch.mm, a, b)
        self._test_op(mesh, torch.add, a, a)
        self._test_op(mesh, torch.sum, a)
        self._test_op(mesh, torch.softmax, a, dim=1)

    @with_comms
    def test_dtensor_backward(self):
        """Gradients through a Shard(0) x Replicate matmul equal the single-device ones."""
        mesh = self._mesh()
        torch.manual_seed(0)
        x = torch.randn(8, 4, device="neuron")
        w = torch.randn(4, 3, device="neuron")
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        (xr @ wr).sin().sum().backward()
        dx = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        dw = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
        out = (dx @ dw).sin().sum()
        out.backward()
        self.assertEqual(out.full_tensor(), (x @ w).sin().sum())
        self.assertEqual(dx.grad.full_tensor(), xr.grad)
        self.assertEqual(dw.grad.full_tensor(), wr.grad)

    @with_comms
    def test_random_ops(self):
        """The RNG tracker: after manual_seed, a sharded DTensor's random shards differ between ranks
        and together form one tensor; a replicated one is the same on every rank."""
        mesh = self._mesh()
        torch.manual_seed(1234)
        d = distribute_tensor(torch.empty(8, 4, device="neuron"), mesh, [Shard(0)])
        d.uniform_()
        shards = [torch.empty(4, 4, device="neuron") for _ in range(self.world_size)]
        dist.all_gather(shards, d.to_local())
        self.assertNotEqual(shards[0], shards[1])
        r = distribute_tensor(torch.empty(8, 4, device="neuron"), mesh, [Replicate()])
        r.normal_()
        gathered = [torch.empty(8, 4, device="neuron") for _ in range(self.world_size)]
        dist.all_gather(gathered, r.to_local())
        self.assertEqual(gathered[0], gathered[1])

    @with_comms
    def test_functional_collectives(self):
        """torch.distributed._functional_collectives on neuron tensors (what DTensor calls), waited
        through wait_tensor, against exact values."""
        mesh = self._mesh()
        group = mesh.get_group()
        t = torch.arange(4, dtype=torch.float32, device="neuron") + 10 * self.rank
        s = funcol.all_reduce(t, "sum", group)
        self.assertEqual(s, torch.arange(4, dtype=torch.float32, device="neuron") * 2 + 10)
        g = funcol.all_gather_tensor(t, 0, group)
        self.assertEqual(g, torch.cat([torch.arange(4.0) + 10 * r for r in range(self.world_size)]).to("neuron"))
        rs = funcol.reduce_scatter_tensor(t, "sum", 0, group)
        self.assertEqual(rs, (torch.arange(4.0)[2 * self.rank:2 * self.rank + 2] * 2 + 10).to("neuron"))
        a2a = funcol.all_to_all_single(t, [2, 2], [2, 2], group)
        want = torch.cat([torch.arange(4.0)[2 * self.rank:2 * self.rank + 2] + 10 * r
                          for r in range(self.world_size)])
        self.assertEqual(a2a, want.to("neuron"))
        b = funcol.broadcast(t, 1, group)
        self.assertEqual(b, (torch.arange(4.0) + 10).to("neuron"))

    @with_comms
    def test_tp_mlp(self):
        """parallelize_module(MLPModule, {net1: Colwise, net2: Rowwise}): output and gradients equal the
        single-device module's, and one SGD step keeps the parameters equal."""
        mesh = self._mesh()
        ref = MLPModule("neuron")
        model = MLPModule("neuron")
        parallelize_module(model, mesh, {"net1": ColwiseParallel(), "net2": RowwiseParallel()})
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.25)
        opt = torch.optim.SGD(model.parameters(), lr=0.25)
        torch.manual_seed(0)  # the same input on every rank, as TP requires
        for _ in range(2):
            inp = torch.randn(6, 10, device="neuron")
            out, ref_out = model(inp), ref(inp)
            self.assertEqual(out, ref_out)
            out.sum().backward()
            ref_out.sum().backward()
            for (n, p), rp in zip(model.named_parameters(), ref.parameters()):
                self.assertEqual(p.grad.full_tensor(), rp.grad, msg=n)
            opt.step()
            ref_opt.step()
            opt.zero_grad()
            ref_opt.zero_grad()
        for p, rp in zip(model.parameters(), ref.parameters()):
            self.assertEqual(p.full_tensor(), rp)

    @with_comms
    def test_tp_transformer(self):
        """The base's Transformer with its own parallelize plan, with and without sequence parallelism:
        the loss and every gradient equal the single-device model's."""
        mesh = self._mesh()
        for seq_parallel in (False, True):
            args = ModelArgs(dropout_p=0.0, n_layers=2, vocab_size=16, max_seq_len=8, dim=16, n_heads=4)
            torch.manual_seed(0)
            ref = Transformer(args).to("neuron")
            model = Transformer.parallelize(Transformer(args).to("neuron"), mesh, seq_parallel)
            with torch.no_grad():
                for p, rp in zip(model.parameters(), ref.parameters()):
                    p.copy_(distribute_tensor(rp, p.device_mesh, p.placements)
                            if isinstance(p, DTensor) else rp)
            torch.manual_seed(1)
            tokens = torch.randint(0, args.vocab_size, (2, 8), device="neuron")
            out, ref_out = model(tokens), ref(tokens)
            out_full = out.full_tensor() if isinstance(out, DTensor) else out
            self.assertEqual(out_full, ref_out, msg=f"seq_parallel={seq_parallel}")
            out_full.sum().backward()
            ref_out.sum().backward()
            for (n, p), rp in zip(model.named_parameters(), ref.parameters()):
                g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                self.assertEqual(g, rp.grad, atol=2e-5, rtol=1e-4, msg=f"{n} seq_parallel={seq_parallel}")

    @with_comms
    def test_sdpa_sharded(self):
        """scaled_dot_product_attention on DTensors sharded on heads (tensor parallelism) and on the batch,
        causal and with an additive mask of each broadcast form: outputs and q/k/v gradients equal the
        single-device ones (neuron's fused attention, through the strategies torchneuron registers)."""
        import torch.nn.functional as F

        mesh = self._mesh()
        torch.manual_seed(0)
        q, k, v = (torch.randn(2, 4, 6, 8, device="neuron") for _ in range(3))
        masks = [None, torch.randn(6, 6, device="neuron"), torch.randn(2, 1, 6, 6, device="neuron"),
                 torch.randn(2, 4, 6, 6, device="neuron")]
        for dim in (1, 0):
            for mask in masks:
                causal = mask is None
                refs = [t.clone().requires_grad_() for t in (q, k, v)]
                ref = F.scaled_dot_product_attention(*refs, attn_mask=mask, is_causal=causal)
                ref.sum().backward()
                ds = [distribute_tensor(t, mesh, [Shard(dim)]).requires_grad_() for t in (q, k, v)]
                dm = None
                if mask is not None:
                    full_dim = mask.dim() - 4 + dim
                    dm = distribute_tensor(mask, mesh, [Shard(full_dim)] if full_dim >= 0 and mask.shape[full_dim] != 1
                                           else [Replicate()])
                out = F.scaled_dot_product_attention(*ds, attn_mask=dm, is_causal=causal)
                what = f"dim {dim}, mask {None if mask is None else tuple(mask.shape)}"
                self.assertEqual(out.placements, (Shard(dim),), msg=what)
                self.assertEqual(out.full_tensor(), ref, msg=what)
                out.sum().backward()
                for d, r in zip(ds, refs):
                    self.assertEqual(d.grad.full_tensor(), r.grad, msg=what)
