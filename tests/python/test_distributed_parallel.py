"""Parallelism on neuron: subgroups by splitting, 2-D meshes, tensor/sequence parallel, FSDP2 with mixed
precision and sharded checkpoints (the c10d backend "neuron", csrc/ccl).

Each test is one torchrun launch (loopback, one kernel thread per rank, every wait bounded); the rank
code is this file's worker() (run as `python test_distributed_parallel.py MODE`), each rank writing
its checks to TN_RESULT_DIR/rankN.json.

- test_mesh_2x2 (4 ranks): the direct-path suite of test_distributed.py on 4 ranks, then
  init_process_group(device_id=...) + init_device_mesh("neuron", (2, 2)),
  whose dimension groups come from split_group (supports_splitting); all_reduce, all_gather,
  reduce_scatter and broadcast on each dimension against exact values; new_group subgroups (the ranks
  outside one call perform_nocolor_split); FSDP2 x TP on the 2-D mesh against a single-device run.
- test_tp_sp_fsdp_mp_dcp (2 ranks): ColwiseParallel/RowwiseParallel/SequenceParallel on a small
  attention + MLP block: outputs and gradients match the single-device block; FSDP2 with a bf16
  MixedPrecisionPolicy (fp32 reduce) on neuron against the same on CPU tensors over Gloo
  ("cpu:gloo,neuron:neuron"); torch.distributed.checkpoint save/load of the FSDP2 model and optimizer:
  the loaded state equals the saved one and training continues identically.
"""
import glob
import json
import os
import signal
import socket
import subprocess
import sys

HERE = os.path.abspath(__file__)
LAUNCH_TIMEOUT = 420  # seconds for a whole launch (4 ranks importing torch on 2 loaded cores is slow)
PG_TIMEOUT = 90


# ---- the rank side ------------------------------------------------------------------------------
def _mesh_collectives(torch, dist, mesh, rank, dev, checks):
    """Each dimension's group against exact values; the 2x2 mesh is [[0, 1], [2, 3]]."""
    for dim in ("dp", "tp"):
        g = mesh.get_group(dim)
        ranks = dist.get_process_group_ranks(g)
        want = [[rank % 2, rank % 2 + 2], [rank // 2 * 2, rank // 2 * 2 + 1]][dim == "tp"]
        checks.append((f"{dim} group of rank {rank}: {ranks}", ranks == want))
        t = torch.full((1000,), float(rank + 1), device=dev)
        dist.all_reduce(t, group=g)
        checks.append((f"{dim} all_reduce", torch.equal(t.cpu(), torch.full((1000,), float(sum(want) + 2)))))
        out = torch.empty(2, 3, dtype=torch.int64, device=dev)
        dist.all_gather_into_tensor(out, torch.full((3,), rank, dtype=torch.int64, device=dev), group=g)
        checks.append((f"{dim} all_gather", torch.equal(out.cpu(), torch.tensor([[want[0]] * 3, [want[1]] * 3]))))
        rs = torch.empty(4, dtype=torch.bfloat16, device=dev)
        src = torch.arange(8, dtype=torch.bfloat16) * (rank + 1)
        dist.reduce_scatter_tensor(rs, src.to(dev), group=g)
        me = want.index(rank)
        full = sum(torch.arange(8, dtype=torch.float32) * (r + 1) for r in want)
        checks.append((f"{dim} reduce_scatter bf16", torch.equal(rs.cpu().float(), full[4 * me:4 * me + 4])))
        b = torch.full((5,), float(rank), device=dev)
        dist.broadcast(b, src=want[1], group=g)
        checks.append((f"{dim} broadcast from {want[1]}", torch.equal(b.cpu(), torch.full((5,), float(want[1])))))
        c = torch.full((3,), rank + 1, dtype=torch.int32)  # CPU tensors through the split group too
        dist.all_reduce(c, group=g, op=dist.ReduceOp.MAX)
        checks.append((f"{dim} all_reduce cpu tensor", torch.equal(c, torch.full((3,), max(want) + 1, dtype=torch.int32))))
    # new_group with a bound device: the members split, the others perform_nocolor_split
    sub = dist.new_group([1, 2, 3])
    if rank in (1, 2, 3):
        t = torch.full((7,), float(rank), device=dev)
        dist.all_reduce(t, group=sub)
        checks.append(("new_group [1, 2, 3] all_reduce", torch.equal(t.cpu(), torch.full((7,), 6.0))))
    # split_group directly, into two uneven parts
    part = dist.split_group(split_ranks=[[0], [1, 2, 3]])
    t = torch.full((2,), float(rank), device=dev)
    dist.all_reduce(t, group=part)
    checks.append(("split_group [[0], [1, 2, 3]]", torch.equal(t.cpu(), torch.full((2,), 0.0 if rank == 0 else 6.0))))


def _mlp(torch, dim=16, hidden=32):
    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Linear(dim, hidden)
            self.w2 = torch.nn.Linear(hidden, dim)

        def forward(self, x):
            return self.w2(torch.nn.functional.gelu(self.w1(x)))

    return MLP()


def _train_losses(torch, model, batches, steps_opt, dev, loss_fn=None):
    opt = steps_opt(model)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v.float().cpu()) for v in losses], opt


def _fsdp_tp_2d(torch, dist, mesh, rank, dev, checks):
    """FSDP2 over "dp" x TP over "tp": losses and parameters match a single-device run of the whole batch."""
    import copy

    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    ref = _mlp(torch).to(dev)
    model = copy.deepcopy(ref)
    parallelize_module(model, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)) for _ in range(3)]
    sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.1)  # noqa: E731
    ref_losses, _ = _train_losses(torch, ref, data, sgd, dev)
    dp = mesh.get_local_rank("dp")
    local = [(x[4 * dp:4 * dp + 4], y[4 * dp:4 * dp + 4]) for x, y in data]
    losses, _ = _train_losses(torch, model, local, sgd, dev)
    lt = torch.tensor(losses, device=dev)
    dist.all_reduce(lt, op=dist.ReduceOp.AVG, group=mesh.get_group("dp"))
    mean = lt.cpu().tolist()
    ok = all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(mean, ref_losses))
    checks.append((f"FSDP2 x TP losses match single device {mean} vs {ref_losses}", ok))
    pd = max((p.full_tensor().cpu() - q.detach().cpu()).abs().max().item()
             for p, q in zip(model.parameters(), ref.parameters()))
    checks.append((f"FSDP2 x TP parameters match single device (max diff {pd})", pd <= 1e-5))


class _Block:
    """A small pre-norm transformer block: attention + MLP, TP/SP plans as TorchTitan writes them."""

    @staticmethod
    def make(torch, dim=16, heads=4):
        class Attn(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.wq, self.wk, self.wv = (torch.nn.Linear(dim, dim, bias=False) for _ in range(3))
                self.wo = torch.nn.Linear(dim, dim, bias=False)
                self.heads = heads

            def forward(self, x):
                b, s, _ = x.shape
                q, k, v = (w(x).view(b, s, -1, dim // heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                return self.wo(o.transpose(1, 2).reshape(b, s, -1))

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
                self.attn, self.mlp = Attn(), _mlp(torch, dim, 2 * dim)

            def forward(self, x):
                x = x + self.attn(self.norm1(x))
                return x + self.mlp(self.norm2(x))

        return Block()

    @staticmethod
    def plan(sp):
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                       SequenceParallel)

        if not sp:
            return {"attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
                    "attn.wo": RowwiseParallel(), "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel()}
        return {
            "norm1": SequenceParallel(), "norm2": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
        }


def _tp_sp(torch, dist, rank, world, dev, checks):
    """TP, then TP + SP, of the block on 2 ranks: output and every gradient match the single-device block."""
    import copy

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("neuron", (world,))
    torch.manual_seed(0)
    ref = _Block.make(torch).to(dev)
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(3))
    out_ref = ref(x.to(dev))
    out_ref.pow(2).sum().backward()
    grads = {n: p.grad.cpu() for n, p in ref.named_parameters()}
    for sp in (False, True):
        name = "TP + SP" if sp else "TP"
        model = copy.deepcopy(ref)
        model.zero_grad(set_to_none=True)
        parallelize_module(model, mesh, _Block.plan(sp))
        inp = x.to(dev).chunk(world, dim=1)[rank] if sp else x.to(dev)  # SP: sequence-sharded in and out
        out = model(inp)
        if sp:
            checks.append((f"SP output is sequence-sharded: {tuple(out.shape)}", tuple(out.shape) == (2, 8 // world, 16)))
            out = DTensor.from_local(out, mesh, [Shard(1)]).full_tensor()
        d = (out.detach().cpu() - out_ref.detach().cpu()).abs().max().item()
        checks.append((f"{name} output matches single device (max diff {d:.2e})", d <= 1e-5))
        out.pow(2).sum().backward()
        worst = 0.0
        for n, p in model.named_parameters():
            gr = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            worst = max(worst, (gr.cpu() - grads[n]).abs().max().item() / max(1.0, grads[n].abs().max().item()))
        checks.append((f"{name} gradients match single device (max rel diff {worst:.2e})", worst <= 1e-5))


def _fsdp_mp(torch, dist, rank, world, dev, checks):
    """FSDP2 with MixedPrecisionPolicy(bf16 params, fp32 reduce) on neuron vs the same on CPU/Gloo."""
    import copy

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
    g = torch.Generator().manual_seed(4)
    data = [(torch.randn(4, 16, generator=g), torch.randn(4, 16, generator=g)) for _ in range(4)]
    local = [(x + rank, y) for x, y in data]
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    runs = {}
    for d in ("cpu", dev):
        mesh = init_device_mesh(torch.device(d).type, (world,))
        m = copy.deepcopy(base).to(d)
        for layer in (m[0], m[2]):
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(m, mesh=mesh, mp_policy=mp)
        seen = []
        m[0].register_forward_hook(lambda mod, i, o: seen.append((i[0].dtype, o.dtype)))
        losses, _ = _train_losses(torch, m, local, lambda mm: torch.optim.Adam(mm.parameters(), lr=1e-2), d)
        runs[torch.device(d).type] = (losses, [p.full_tensor().cpu() for p in m.parameters()])
        checks.append((f"FSDP2 computes in bf16 on {d}: {seen[0]}", seen[0] == (torch.bfloat16, torch.bfloat16)))
        checks.append((f"FSDP2 keeps fp32 sharded parameters on {d}", m[0].weight.dtype == torch.float32))
    (lc, pc), (ln, pn) = runs["cpu"], runs["neuron"]
    dl = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(ln, lc))
    dp = max((a - b).abs().max().item() for a, b in zip(pn, pc))
    checks.append((f"FSDP2 mixed precision: neuron losses {ln} vs CPU/Gloo {lc} (max rel diff {dl:.1e})", dl <= 2e-2))
    checks.append((f"FSDP2 mixed precision: parameters vs CPU/Gloo (max diff {dp:.1e})", dp <= 2e-2))


def _dcp(torch, dist, rank, world, dev, ckpt, checks):
    """torch.distributed.checkpoint round trip of an FSDP2 model and its Adam state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import fully_shard

    def make():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16)).to(dev)
        fully_shard(m[0])
        fully_shard(m[2])
        fully_shard(m)
        return m, torch.optim.Adam(m.parameters(), lr=1e-2)

    g = torch.Generator().manual_seed(5)
    data = [(torch.randn(4, 16, generator=g) + rank, torch.randn(4, 16, generator=g)) for _ in range(6)]

    def step(m, o, x, y):
        o.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x.to(dev)), y.to(dev))
        loss.backward()
        o.step()
        return loss.item()

    m, o = make()
    for x, y in data[:3]:
        step(m, o, x, y)
    msd, osd = get_state_dict(m, o)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt)
    saved = {k: v.full_tensor().cpu() for k, v in msd.items()}
    if rank == 0:  # for the load on one process, in the test
        torch.save(saved, os.path.join(os.path.dirname(ckpt), "saved.pt"))
    after = [step(m, o, x, y) for x, y in data[3:]]

    m2, o2 = make()
    step(m2, o2, *data[5])  # diverge first, so that the load has to overwrite everything
    msd2, osd2 = get_state_dict(m2, o2)
    state = {"model": msd2, "optim": osd2}
    dcp.load(state, checkpoint_id=ckpt)
    set_state_dict(m2, o2, model_state_dict=state["model"], optim_state_dict=state["optim"])
    loaded = {k: v.full_tensor().cpu() for k, v in get_state_dict(m2, o2)[0].items()}
    checks.append(("DCP: loaded parameters equal the saved ones",
                   saved.keys() == loaded.keys() and all(torch.equal(saved[k], loaded[k]) for k in saved)))
    st = [o2.state[p]["step"].item() for p in m2.parameters()]
    checks.append((f"DCP: optimizer step restored {st}", all(s == 3 for s in st)))
    again = [step(m2, o2, x, y) for x, y in data[3:]]
    checks.append((f"DCP: training continues identically {again} vs {after}", again == after))


def worker(mode):
    import datetime

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    checks = []
    out = {"rank": rank, "pid": os.getpid(), "checks": checks}
    try:
        torch.neuron.set_device(local)
        dev = torch.device("neuron", local)
        tmo = datetime.timedelta(seconds=PG_TIMEOUT)
        if mode == "mesh":
            from torch.distributed.device_mesh import init_device_mesh

            dist.init_process_group("neuron", timeout=tmo, device_id=dev)
            sys.path.insert(0, os.path.dirname(HERE))
            from test_distributed import _suite_direct

            _suite_direct(torch, dist, rank, world, dev, checks)  # the direct path on 4 ranks
            mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
            _mesh_collectives(torch, dist, mesh, rank, dev, checks)
            _fsdp_tp_2d(torch, dist, mesh, rank, dev, checks)
        elif mode == "parallel":
            dist.init_process_group("cpu:gloo,neuron:neuron", timeout=tmo)
            _tp_sp(torch, dist, rank, world, dev, checks)
            _fsdp_mp(torch, dist, rank, world, dev, checks)
            _dcp(torch, dist, rank, world, dev, os.path.join(os.environ["TN_RESULT_DIR"], "ckpt"), checks)
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001  (a failed check, with the traceback on stderr)
        import traceback
        traceback.print_exc()
        checks.append((f"raised {type(e).__name__}: {str(e)[:500]}", False))
    with open(os.path.join(os.environ["TN_RESULT_DIR"], f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
    os._exit(0)


# ---- the test side ------------------------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(mode, nproc, tmp):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "TORCH_DISTRIBUTED"))
           and k != "LOCAL_WORLD_SIZE"}
    env.update(TN_RESULT_DIR=tmp, NEURON_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
           "127.0.0.1", "--master_port", str(_free_port()), "--max_restarts", "0", HERE, mode]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        _, err = p.communicate(timeout=LAUNCH_TIMEOUT)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    results = []
    for r in range(nproc):
        path = os.path.join(tmp, f"rank{r}.json")
        results.append(json.load(open(path)) if os.path.exists(path) else None)
    for r in results:
        assert r is not None, f"a rank produced no result; stderr:\n{err[-4000:]}"
        bad = [name for name, ok in r["checks"] if not ok]
        assert r["checks"] and not bad, f"rank {r['rank']} failed: {bad}\nstderr:\n{err[-3000:]}"
    assert p.returncode == 0, err[-3000:]
    left = [s for s in glob.glob("/dev/shm/tn-ncl-*") if any(f"tn-ncl-{r['pid']}-" in s for r in results)]
    assert not left, f"segments left in /dev/shm: {left}"


def test_mesh_2x2(tmp_path):
    _run("mesh", 4, str(tmp_path))


def test_tp_sp_fsdp_mp_dcp(tmp_path):
    _run("parallel", 2, str(tmp_path))
    # the checkpoint saved by 2 ranks loads on 1 process (no process group), onto neuron
    import torch
    import torch.distributed.checkpoint as dcp

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16)).to("neuron")
    sd = model.state_dict()
    dcp.load({"model": sd}, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    saved = torch.load(tmp_path / "saved.pt")
    assert sd.keys() == saved.keys()
    for k in sd:
        assert sd[k].device.type == "neuron" and torch.equal(sd[k].cpu(), saved[k]), k


if __name__ == "__main__":
    worker(sys.argv[1])
