"""torch.distributed on neuron with 2 ranks on this host (the c10d backend "neuron", csrc/ccl).

Each test launches 2 rank processes (torchrun, or plain subprocesses for the tcp:// and kill cases), one
kernel thread per rank, loopback only, every wait bounded.  The rank code is this file's worker()
(run as `python test_distributed.py MODE`); each rank writes its checks to TN_RESULT_DIR/rankN.json.

- test_torchrun_suite: under torchrun (env://, init_process_group("neuron")): the launch defaults (one
  kernel thread per rank on 2 CPUs, 2 devices, set_device(LOCAL_RANK)), every collective and dtype
  against exact expected values, the direct path (calls of 64 KiB and more: every dtype and op, odd
  sizes, offset views, random floats bitwise), async work and futures, stream ordering, bad input, DDP training
  whose losses and parameters match a single-device run on the same global batch, eager and under
  torch.compile(backend="neuron") (Dynamo's DDPOptimizer splits the graph at the 1 MB buckets).
- test_fsdp2_dtensor: under torchrun: DTensor on init_device_mesh("neuron", (2,)) (distribute_tensor,
  redistribute Shard/Replicate/Partial, a DTensor op) and FSDP2 fully_shard training whose losses and
  parameters match a single-device run; then dist.set_timeout (the 2.13 shim) reaching the backend.
- test_gloo_transport: NEURON_CCL_TRANSPORT=gloo (the cross-host path, on this host): the collectives
  and dtypes Gloo takes, async work, DDP parity, all through ProcessGroupGloo on CPU aliases.
- test_tcp_mixed_backends: tcp:// with "cpu:gloo,neuron:neuron", new_group, and a normal interpreter
  exit without destroy_process_group (no hang, exit status 0).
- test_killed_rank: rank 1 SIGKILLs itself mid-training (its 257 KB gradient bucket takes the direct
  path); rank 0 gets DistBackendError naming the
  collective, its sequence number and rank 1 within timeout + 5 s, and writes its Flight Recorder dump
  (TORCH_FR_DUMP_TEMP_FILE), which torchfrtrace reads, with the failed all_reduce not completed.
Every test checks that no segment of its ranks is left in /dev/shm.
"""
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.abspath(__file__)
LAUNCH_TIMEOUT = 300  # seconds for a whole 2-rank launch (importing torch is slow on a loaded machine)
PG_TIMEOUT = 60  # seconds: the process group's timeout in the worker
KILL_PG_TIMEOUT = 20


# ---- the rank side ------------------------------------------------------------------------------
def _vals(rank, n, dtype, torch):
    """Small integers (exact in every dtype, products included) that depend on the rank."""
    base = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3) % 9 - 4
    if dtype == torch.bool:
        return (base > 0)
    if dtype == torch.uint8:
        base = base + 4
    return base.to(dtype)


def _expected(op_name, n, dtype, world, torch, scale=0.5):
    xs = [_vals(r, n, dtype, torch) for r in range(world)]
    if dtype == torch.bool:
        stack = torch.stack(xs)
        if op_name in ("SUM", "MAX", "BOR"):
            return stack.any(0)
        if op_name in ("PRODUCT", "MIN", "BAND"):
            return stack.all(0)
        return stack.to(torch.int64).sum(0).remainder(2).bool()
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stack = torch.stack([x.to(wide) for x in xs])
    if op_name == "SUM":
        out = stack.sum(0)
    elif op_name == "AVG":
        out = stack.sum(0) / world
    elif op_name == "PREMUL_SUM":
        out = (stack * scale).sum(0)
    elif op_name == "PRODUCT":
        out = stack.prod(0)
    elif op_name == "MAX":
        out = stack.max(0).values
    elif op_name == "MIN":
        out = stack.min(0).values
    else:
        out = xs[0].clone()
        for x in xs[1:]:
            out = {"BAND": out & x, "BOR": out | x, "BXOR": out ^ x}[op_name]
        return out
    return out.to(dtype)


def _suite_collectives(torch, dist, rank, world, dev, checks, gloo=False):
    F = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
    I = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
    if gloo:  # the dtypes Gloo's reductions take
        F, I = (torch.float32, torch.bfloat16, torch.float16, torch.float64), (torch.int8, torch.uint8, torch.int32, torch.int64)
    n = 1000
    R = dist.ReduceOp
    for dtype in F + I + (() if gloo else (torch.bool,)):
        ops = ["SUM", "PRODUCT", "MAX", "MIN"]
        ops += ["AVG", "PREMUL_SUM"] if dtype in F else ["BAND", "BOR", "BXOR"]
        for op_name in ops:
            t = _vals(rank, n, dtype, torch).to(dev)
            op = dist._make_nccl_premul_sum(0.5) if op_name == "PREMUL_SUM" else getattr(R, op_name)
            dist.all_reduce(t, op=op)
            want = _expected(op_name, n, dtype, world, torch)
            checks.append((f"all_reduce {op_name} {dtype}", torch.equal(t.cpu(), want)))
        # the copies, per dtype
        x = _vals(rank, n, dtype, torch).to(dev)
        b = x.clone()
        dist.broadcast(b, src=1)
        checks.append((f"broadcast {dtype}", torch.equal(b.cpu(), _vals(1, n, dtype, torch))))
        out = torch.empty(world * n, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(out, x)
        want = torch.cat([_vals(r, n, dtype, torch) for r in range(world)])
        checks.append((f"all_gather_into_tensor {dtype}", torch.equal(out.cpu(), want)))
        outs = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)]
        dist.all_gather(outs, x)
        checks.append((f"all_gather list {dtype}",
                       all(torch.equal(o.cpu(), _vals(r, n, dtype, torch)) for r, o in enumerate(outs))))
        if dtype != torch.bool:
            big = torch.cat([_vals(rank, n, dtype, torch)] * world).to(dev)
            rs = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(rs, big, op=R.SUM)
            checks.append((f"reduce_scatter_tensor {dtype}", torch.equal(rs.cpu(), _expected("SUM", n, dtype, world, torch))))
            rs2 = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter(rs2, [_vals(rank, n, dtype, torch).to(dev) for _ in range(world)], op=R.MAX)
            checks.append((f"reduce_scatter list {dtype}", torch.equal(rs2.cpu(), _expected("MAX", n, dtype, world, torch))))
    # all_to_all (even and uneven), gather, scatter, reduce, send/recv, barrier: f32 and int64
    for dtype in (torch.float32, torch.int64):
        inp = (torch.arange(4 * world) + 100 * rank).to(dtype).to(dev)
        out = torch.empty_like(inp)
        dist.all_to_all_single(out, inp)
        want = torch.cat([(torch.arange(4 * world) + 100 * p)[4 * rank:4 * rank + 4] for p in range(world)]).to(dtype)
        checks.append((f"all_to_all_single {dtype}", torch.equal(out.cpu(), want)))
        # uneven: rank p sends p + q + 1 rows to rank q
        in_splits = [rank + q + 1 for q in range(world)]
        out_splits = [p + rank + 1 for p in range(world)]
        inp = torch.cat([torch.full((s, 2), 10 * rank + q) for q, s in enumerate(in_splits)]).to(dtype).to(dev)
        out = torch.empty(sum(out_splits), 2, dtype=dtype, device=dev)
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        want = torch.cat([torch.full((s, 2), 10 * p + rank) for p, s in enumerate(out_splits)]).to(dtype)
        checks.append((f"all_to_all_single uneven {dtype}", torch.equal(out.cpu(), want)))
        outs = [torch.empty(3, dtype=dtype, device=dev) for _ in range(world)]
        dist.all_to_all(outs, [torch.full((3,), 10 * rank + q, dtype=dtype, device=dev) for q in range(world)])
        checks.append((f"all_to_all list {dtype}",
                       all(torch.equal(o.cpu(), torch.full((3,), 10 * p + rank, dtype=dtype)) for p, o in enumerate(outs))))
        x = torch.full((5,), rank + 1, dtype=dtype, device=dev)
        g = [torch.empty(5, dtype=dtype, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(x, g, dst=0)
        if rank == 0:
            checks.append((f"gather {dtype}", all(torch.equal(t.cpu(), torch.full((5,), p + 1, dtype=dtype)) for p, t in enumerate(g))))
        s = torch.empty(5, dtype=dtype, device=dev)
        sl = [torch.full((5,), 7 * q, dtype=dtype, device=dev) for q in range(world)] if rank == 1 else None
        dist.scatter(s, sl, src=1)
        checks.append((f"scatter {dtype}", torch.equal(s.cpu(), torch.full((5,), 7 * rank, dtype=dtype))))
        r = torch.full((5,), rank + 2, dtype=dtype, device=dev)
        dist.reduce(r, dst=1, op=R.PRODUCT)
        if rank == 1:
            checks.append((f"reduce {dtype}", torch.equal(r.cpu(), torch.full((5,), 6, dtype=dtype))))
        # send/recv: 1M elements is several staging chunks
        m = torch.arange(1 << 20).to(dtype)
        if rank == 0:
            dist.send(m.to(dev), dst=1, tag=3)
            back = torch.empty(7, dtype=dtype, device=dev)
            dist.recv(back, src=1, tag=4)
            checks.append((f"send/recv {dtype}", torch.equal(back.cpu(), torch.arange(7).to(dtype) * 2)))
        else:
            got = torch.empty(1 << 20, dtype=dtype, device=dev)
            dist.recv(got, src=0, tag=3)
            checks.append((f"send/recv {dtype}", torch.equal(got.cpu(), m)))
            dist.send((torch.arange(7).to(dtype) * 2).to(dev), dst=0, tag=4)
        # recv from any source: dist.recv without src returns the sender's rank
        if rank == 1:
            dist.send(torch.full((6,), 5, dtype=dtype, device=dev), dst=0, tag=9)
        else:
            anyt = torch.empty(6, dtype=dtype, device=dev)
            got_src = dist.recv(anyt, tag=9)
            checks.append((f"recv any source {dtype} (from {got_src})",
                           got_src == 1 and torch.equal(anyt.cpu(), torch.full((6,), 5, dtype=dtype))))
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((4,), rank, dtype=dtype, device=dev), 1 - rank),
                                       dist.P2POp(dist.irecv, got4 := torch.empty(4, dtype=dtype, device=dev), 1 - rank)])
        for q in reqs:
            q.wait()
        checks.append((f"batch_isend_irecv {dtype}", torch.equal(got4.cpu(), torch.full((4,), 1 - rank, dtype=dtype))))
        # both ranks send 4 MB before receiving (more than the staging buffers hold): no deadlock
        big_in = torch.empty(1 << 20, dtype=dtype, device=dev)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, (m + rank).to(dtype).to(dev), 1 - rank),
                                       dist.P2POp(dist.irecv, big_in, 1 - rank)])
        for q in reqs:
            q.wait()
        checks.append((f"symmetric 4 MB batch_isend_irecv {dtype}", torch.equal(big_in.cpu(), (m + 1 - rank).to(dtype))))
    dist.barrier()
    # a large all_reduce: 3M f32 = 12 MB, several rounds of the 4 MiB staging chunk
    big = torch.full((3 << 20,), float(rank + 1), device=dev)
    dist.all_reduce(big)
    checks.append(("all_reduce 12 MB", bool((big == 3.0).all().item())))
    # coalesced forms
    a, b = torch.ones(10, device=dev) * (rank + 1), torch.ones(3, device=dev) * (rank + 1)
    dist.all_reduce_coalesced([a, b])
    checks.append(("all_reduce_coalesced", torch.equal(a.cpu(), torch.full((10,), 3.0)) and torch.equal(b.cpu(), torch.full((3,), 3.0))))
    # CPU tensors go through the same backend
    c = torch.full((4,), float(rank + 1))
    dist.all_reduce(c)
    checks.append(("all_reduce cpu tensor", torch.equal(c, torch.full((4,), 3.0))))
    # objects (pickled through CPU/neuron byte tensors)
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    checks.append(("all_gather_object", objs == [{"rank": r} for r in range(world)]))


def _suite_direct(torch, dist, rank, world, dev, checks):
    """Calls of at least NEURON_CCL_DIRECT_MIN (64 KiB) per rank go direct (each rank reads its peers'
    buffers in place, csrc/ccl/direct.c): every dtype and op of all_reduce, reduce_scatter_tensor,
    all_gather_into_tensor (in and out of place) and broadcast, at sizes that are multiples of neither the
    rank count nor the 64 KiB piece, on views at an odd element offset, against exact values; random
    floats bitwise against the rank-order f32 sum (bf16 rounded once)."""
    n, m = 70001, 33337  # n: >= 64 KiB even for 1-byte dtypes
    F = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
    I = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
    R = dist.ReduceOp
    bad = []
    for dtype in F + I + (torch.bool,):
        ops = ["SUM", "PRODUCT", "MAX", "MIN"] + (["AVG", "PREMUL_SUM"] if dtype in F else ["BAND", "BOR", "BXOR"])
        for op_name in ops:
            base = torch.zeros(n + 3, dtype=dtype, device=dev)
            t = base[1:n + 1]
            t.copy_(_vals(rank, n, dtype, torch).to(dev))
            op = dist._make_nccl_premul_sum(0.5) if op_name == "PREMUL_SUM" else getattr(R, op_name)
            dist.all_reduce(t, op=op)
            edges = base.cpu()[[0, n + 1, n + 2]]
            if not (torch.equal(t.cpu(), _expected(op_name, n, dtype, world, torch)) and not edges.any()):
                bad.append(f"all_reduce {op_name} {dtype}")
        if dtype == torch.bool:
            continue
        wide = torch.float64 if dtype.is_floating_point else torch.int64
        inp = torch.cat([_vals(rank + q, m, dtype, torch) for q in range(world)]).to(dev)
        rs = torch.empty(m, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(rs, inp, op=R.SUM)
        want = sum(_vals(r + rank, m, dtype, torch).to(wide) for r in range(world)).to(dtype)
        if not torch.equal(rs.cpu(), want):
            bad.append(f"reduce_scatter_tensor {dtype}")
        x = _vals(rank, m, dtype, torch).to(dev)
        want = torch.cat([_vals(r, m, dtype, torch) for r in range(world)])
        out = torch.empty(world * m, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(out, x)
        out2 = torch.zeros(world * m, dtype=dtype, device=dev)
        out2[rank * m:(rank + 1) * m].copy_(x)
        dist.all_gather_into_tensor(out2, out2[rank * m:(rank + 1) * m])
        if not (torch.equal(out.cpu(), want) and torch.equal(out2.cpu(), want)):
            bad.append(f"all_gather_into_tensor {dtype}")
        b = _vals(rank, m, dtype, torch).to(dev)
        dist.broadcast(b, src=world - 1)
        if not torch.equal(b.cpu(), _vals(world - 1, m, dtype, torch)):
            bad.append(f"broadcast {dtype}")
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(n, generator=g) for _ in range(world)]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        t = xs[rank].to(dtype).to(dev)
        dist.all_reduce(t)
        acc = xs[0].to(dtype).float()
        for x in xs[1:]:
            acc = acc + x.to(dtype).float()
        if not torch.equal(t.cpu(), acc.to(dtype)):
            bad.append(f"random all_reduce {dtype} bitwise")
    checks.append((f"direct path: every dtype and op, odd sizes, offset views {bad}", not bad))


def _suite_async(torch, dist, rank, world, dev, checks):
    t = torch.full((1000,), float(rank + 1), device=dev)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    work.wait()
    checks.append(("async wait", torch.equal(t.cpu(), torch.full((1000,), 3.0))))
    checks.append(("async is_completed", work.is_completed()))
    res = fut.wait()
    checks.append(("future carries the output", isinstance(res, list) and res[0] is not None and torch.equal(res[0].cpu(), t.cpu())))
    checks.append(("future then", torch.equal(doubled.wait().cpu(), torch.full((1000,), 6.0))))
    # stream ordering: the collective runs on the current stream; an event recorded after it fences it
    s = torch.neuron.Stream()
    x = torch.zeros(1 << 16, device=dev)
    with torch.neuron.stream(s):
        x.add_(rank + 1)
        dist.all_reduce(x, async_op=True)
        ev = s.record_event()
    torch.neuron.current_stream().wait_event(ev)
    y = x * 1
    checks.append(("stream-ordered all_reduce", torch.equal(y.cpu(), torch.full((1 << 16,), 3.0))))
    # several works in flight, waited in reverse order
    ts = [torch.full((100,), float(i + rank), device=dev) for i in range(5)]
    works = [dist.all_reduce(v, async_op=True) for v in ts]
    for w in reversed(works):
        w.wait()
    checks.append(("5 works in flight", all(torch.equal(v.cpu(), torch.full((100,), float(2 * i + 1))) for i, v in enumerate(ts))))


def _suite_monitored_barrier(torch, dist, rank, world, dev, checks):
    """dist.monitored_barrier, which PyTorch gates on the backend's name ("gloo"), reaches the neuron
    backend's (torchneuron.distributed._allow_monitored_barrier), with and without wait_all_ranks."""
    import datetime

    for wait_all in (False, True):
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=30), wait_all_ranks=wait_all)
            checks.append((f"monitored_barrier wait_all_ranks={wait_all}", True))
        except Exception as e:  # noqa: BLE001
            checks.append((f"monitored_barrier wait_all_ranks={wait_all}: {type(e).__name__}: {str(e)[:200]}", False))
    t = torch.full((2,), float(rank), device=dev)
    dist.all_reduce(t)
    checks.append(("usable after monitored_barrier", torch.equal(t.cpu(), torch.full((2,), float(world * (world - 1) // 2)))))


def _suite_bad_input(torch, dist, rank, world, dev, checks):
    def raises(name, fn, pattern):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            checks.append((name, pattern.lower() in str(e).lower() or f"{type(e).__name__}: {e}"[:300] == ""))
            if pattern.lower() not in str(e).lower():
                checks.append((f"{name}: message was {type(e).__name__}: {str(e)[:300]}", False))
            return
        checks.append((f"{name}: no error", False))

    nc = torch.ones(4, 4, device=dev).t()
    raises("non-contiguous", lambda: dist.all_reduce(nc), "contiguous")
    raises("all_gather_into_tensor size", lambda: dist.all_gather_into_tensor(
        torch.empty(5, device=dev), torch.ones(3, device=dev)), "elements")
    raises("BAND on float", lambda: dist.all_reduce(torch.ones(3, device=dev), op=dist.ReduceOp.BAND), "BAND")
    raises("send rank out of range", lambda: dist.send(torch.ones(2, device=dev), dst=5), "rank")
    raises("complex unsupported op", lambda: dist.all_reduce(torch.ones(2, dtype=torch.complex64, device=dev),
                                                               op=dist.ReduceOp.MAX), "MAX on complex")
    raises("recv rank out of range", lambda: dist.recv(torch.ones(2, device=dev), src=7), "source rank 7 is out of range")
    if torch.neuron.device_count() > 1:  # each rank sees the node's devices (torchrun)
        other = torch.device("neuron", (dev.index + 1) % torch.neuron.device_count())
        raises("tensors on two devices in one call", lambda: dist.all_gather(
            [torch.empty(2, device=dev), torch.empty(2, device=other)], torch.ones(2, device=dev)),
            f"tensors on {other}")
        # a tensor on another neuron device than the rank's own: the arenas are host memory, so it is
        # reduced where it lies, as a single-device process group reduces any device's tensor
        t = torch.full((3,), float(rank + 1), device=other)
        dist.all_reduce(t)
        checks.append(("all_reduce of a tensor on another device", t.device == other and
                       torch.equal(t.cpu(), torch.full((3,), float(world * (world + 1) // 2)))))
    # the group is still usable
    t = torch.full((3,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    checks.append(("usable after bad input", torch.equal(t.cpu(), torch.full((3,), 3.0))))


def _suite_ddp(torch, dist, rank, world, dev, checks):
    from torch.nn.parallel import DistributedDataParallel as DDP

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(dev)

    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)) for _ in range(5)]
    ref = make()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ref_losses = []
    for x, y in data:  # single device, the whole global batch of 8
        ref_opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ref(x.to(dev)), y.to(dev))
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())
    model = DDP(make(), bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in data:  # each rank its half of the batch
        xs, ys = x[rank * 4:(rank + 1) * 4], y[rank * 4:(rank + 1) * 4]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xs.to(dev)), ys.to(dev))
        loss.backward()
        opt.step()
        lt = loss.detach().clone()
        dist.all_reduce(lt, op=dist.ReduceOp.AVG)
        losses.append(lt.item())
    ok = all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(losses, ref_losses))
    checks.append((f"DDP losses match single device {losses} vs {ref_losses}", ok))
    pd = max((p.detach().cpu() - q.detach().cpu()).abs().max().item() for p, q in zip(model.module.parameters(), ref.parameters()))
    checks.append((f"DDP parameters match single device (max diff {pd})", pd <= 1e-5))


def _suite_ddp_options(torch, dist, rank, world, dev, checks):
    """DDP's options, each against a single-device run on the same global batches: gradient_as_bucket_view,
    static_graph, find_unused_parameters (with a branch never used), no_sync gradient accumulation, and the
    fp16 compression hook (gradients rounded to 16 bits on the wire: a looser bound).  PyTorch's own
    bf16_compress_hook refuses every backend but NCCL and XCCL ("requires CUDA 11+ and NCCL 2.10+ or XPU
    and XCCL"), CPU Gloo included, so it is not run."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Net(torch.nn.Module):
        def __init__(self, unused):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
            if unused:
                self.unused = torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.b(torch.tanh(self.a(x)))

    def make(unused=False):
        torch.manual_seed(0)
        return Net(unused).to(dev)

    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)) for _ in range(4)]
    mse = torch.nn.functional.mse_loss

    def reference(accumulate, unused):
        m = make(unused)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for i, (x, y) in enumerate(data):
            if not accumulate or i % 2 == 0:
                opt.zero_grad()
            mse(m(x.to(dev)), y.to(dev)).backward()
            if not accumulate or i % 2 == 1:
                opt.step()
        return m

    def run(kwargs, hook=None, accumulate=False):
        m = DDP(make(kwargs.get("find_unused_parameters", False)), bucket_cap_mb=1, **kwargs)
        if hook is not None:
            m.register_comm_hook(dist.group.WORLD, hook)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for i, (x, y) in enumerate(data):
            xs, ys = x[rank * 4:(rank + 1) * 4].to(dev), y[rank * 4:(rank + 1) * 4].to(dev)
            if not accumulate or i % 2 == 0:
                opt.zero_grad()
            if accumulate and i % 2 == 0:
                with m.no_sync():  # gradients stay local: the next backward all-reduces their sum
                    mse(m(xs), ys).backward()
                continue
            mse(m(xs), ys).backward()
            opt.step()
        return m.module


    cases = [("gradient_as_bucket_view", {"gradient_as_bucket_view": True}, None, False, 1e-5),
             ("static_graph", {"static_graph": True}, None, False, 1e-5),
             ("find_unused_parameters", {"find_unused_parameters": True}, None, False, 1e-5),
             ("no_sync accumulation", {}, None, True, 1e-5),
             ("fp16_compress_hook", {}, default_hooks.fp16_compress_hook, False, 2e-3)]
    for name, kwargs, hook, acc, tol in cases:
        try:
            m = run(kwargs, hook, acc)
            ref = reference(acc, kwargs.get("find_unused_parameters", False))
            d = max((p.detach().cpu() - q.detach().cpu()).abs().max().item()
                    for (n, p), q in zip(m.named_parameters(), ref.parameters()) if not n.startswith("unused"))
            same_unused = all(torch.equal(p.detach().cpu(), q.detach().cpu())
                              for (n, p), q in zip(m.named_parameters(), ref.parameters()) if n.startswith("unused"))
            checks.append((f"DDP {name}: parameters match single device (max diff {d:.2e}, bound {tol})", d <= tol))
            if kwargs.get("find_unused_parameters"):
                checks.append((f"DDP {name}: the unused branch is untouched", same_unused))
        except Exception as e:  # noqa: BLE001
            checks.append((f"DDP {name}: raised {type(e).__name__}: {str(e)[:300]}", False))


class _CompiledNet:  # a module class of this file (Dynamo skips torch.nn's own forwards)
    @staticmethod
    def make(torch):
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b, self.c = torch.nn.Linear(32, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 8)

            def forward(self, x):
                return self.c(torch.relu(self.b(torch.relu(self.a(x)))))
        return Net()


def _suite_ddp_compile(torch, dist, rank, world, dev, checks):
    """torch.compile of a DDP model (backend "neuron"): Dynamo's DDPOptimizer splits the graph at the
    1 MB bucket boundaries (two graphs here), and the training matches a single-device run."""
    import torch._dynamo.testing
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    net, ref = _CompiledNet.make(torch), _CompiledNet.make(torch)
    ref.load_state_dict(net.state_dict())
    ref = ref.to(dev)
    model = DDP(net.to(dev), bucket_cap_mb=1)
    cnt = torch._dynamo.testing.CompileCounterWithBackend("neuron")
    compiled = torch.compile(model, backend=cnt)
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    losses, ref_losses = [], []
    for _ in range(3):
        x, y = torch.randn(8, 32, generator=g), torch.randn(8, 8, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(compiled(x[rank * 4:(rank + 1) * 4].to(dev)), y[rank * 4:(rank + 1) * 4].to(dev))
        loss.backward()
        opt.step()
        lt = loss.detach().clone()
        dist.all_reduce(lt, op=dist.ReduceOp.AVG)
        losses.append(lt.item())
        ref_opt.zero_grad()
        rl = torch.nn.functional.mse_loss(ref(x.to(dev)), y.to(dev))
        rl.backward()
        ref_opt.step()
        ref_losses.append(rl.item())
    ok = all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(losses, ref_losses))
    checks.append((f"compiled DDP losses match single device {losses} vs {ref_losses}", ok))
    pd = max((p.detach().cpu() - q.detach().cpu()).abs().max().item() for p, q in zip(model.module.parameters(), ref.parameters()))
    checks.append((f"compiled DDP parameters match single device (max diff {pd})", pd <= 1e-5))
    checks.append((f"compiled DDP: {len(cnt.graphs)} graphs (split at the buckets)", len(cnt.graphs) >= 2))


def _suite_dtensor(torch, dist, rank, world, dev, checks):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("neuron", (world,))
    full = torch.arange(32.0).reshape(8, 4)
    d = distribute_tensor(full.to(dev), mesh, [Shard(0)])
    checks.append(("DTensor Shard(0) local rows", torch.equal(d.to_local().cpu(), full[4 * rank:4 * rank + 4])))
    r = d.redistribute(mesh, [Replicate()])
    checks.append(("DTensor Shard -> Replicate (all_gather)", torch.equal(r.to_local().cpu(), full)))
    s1 = r.redistribute(mesh, [Shard(1)])
    checks.append(("DTensor Replicate -> Shard(1)", torch.equal(s1.to_local().cpu(), full[:, 2 * rank:2 * rank + 2])))
    p = DTensor.from_local(torch.full((3, 4), float(rank + 1), device=dev), mesh, [Partial()])
    checks.append(("DTensor Partial -> Replicate (all_reduce)",
                   torch.equal(p.redistribute(mesh, [Replicate()]).to_local().cpu(), torch.full((3, 4), 3.0))))
    p = DTensor.from_local(torch.full((4, 4), float(rank + 1), device=dev), mesh, [Partial()])
    checks.append(("DTensor Partial -> Shard(0) (reduce_scatter)",
                   torch.equal(p.redistribute(mesh, [Shard(0)]).to_local().cpu(), torch.full((2, 4), 3.0))))
    y = (d * 2).sum()  # a DTensor op: local compute + all_reduce of the partial sum
    checks.append(("DTensor op", y.full_tensor().item() == float(full.sum() * 2)))


def _suite_fsdp2(torch, dist, rank, world, dev, checks):
    import copy

    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(dev)
    ref = copy.deepcopy(model)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)) for _ in range(4)]
    losses, ref_losses = [], []
    for x, y in data:
        ref_opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ref(x.to(dev)), y.to(dev))
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[rank * 4:rank * 4 + 4].to(dev)), y[rank * 4:rank * 4 + 4].to(dev))
        loss.backward()
        opt.step()
        lt = loss.detach().clone()
        dist.all_reduce(lt, op=dist.ReduceOp.AVG)
        losses.append(lt.item())
    ok = all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(losses, ref_losses))
    checks.append((f"FSDP2 losses match single device {losses} vs {ref_losses}", ok))
    pd = max((p.full_tensor().cpu() - q.detach().cpu()).abs().max().item()
             for p, q in zip(model.parameters(), ref.parameters()))
    checks.append((f"FSDP2 parameters match single device (max diff {pd})", pd <= 1e-5))


def _suite_set_timeout(torch, dist, rank, world, dev, checks):
    """dist.set_timeout (the 2.13 shim) reaches the backend: rank 1 arrives 2 s late at an all_reduce with a
    0.5 s timeout; rank 0 times out naming rank 1, rank 1 then fails at once with rank 0's error.  Leaves
    the group broken: run last."""
    import datetime

    dist.set_timeout(datetime.timedelta(milliseconds=500))
    t = torch.ones(4, device=dev)
    if rank == 1:
        time.sleep(2.0)
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
        checks.append(("set_timeout: no error", False))
    except dist.DistBackendError as e:
        took = time.monotonic() - t0
        msg = str(e)
        if rank == 0:
            checks.append((f"set_timeout: rank 0 timed out naming rank 1 after {took:.2f} s: {msg[:200]}",
                           "timed out" in msg and "rank 1" in msg and took < 1.9))
            # Flight Recorder style: the rank's last collectives, this one last
            hist = msg[msg.find("[last collectives of rank 0"):]
            checks.append((f"set_timeout: the error lists rank 0's last collectives: {hist[-300:]}",
                           hist.startswith("[last collectives of rank 0, oldest first:")
                           and "all_reduce 4 x float32 failed (timed out) " in hist and hist.count("; seq ") >= 2))
        else:
            checks.append((f"set_timeout: rank 1 sees rank 0's failure at once ({took:.2f} s): {msg[:200]}",
                           "rank 0 failed" in msg and took < 1.0))


def worker(mode):
    import datetime

    import torch
    import torch.distributed as dist
    import torchneuron

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    checks = []
    out = {"rank": rank, "pid": os.getpid(), "checks": checks}
    try:
        _worker_mode(mode, torch, dist, torchneuron, rank, world, checks, out)
    except Exception as e:  # noqa: BLE001  (reported as a failed check, with the traceback on stderr)
        import traceback
        traceback.print_exc()
        checks.append((f"raised {type(e).__name__}: {str(e)[:500]}", False))
    with open(os.path.join(os.environ["TN_RESULT_DIR"], f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
    if mode != "tcp_mixed":  # tcp_mixed checks the normal interpreter exit too
        os._exit(0)  # skip interpreter teardown: the result is what counts


def _worker_mode(mode, torch, dist, torchneuron, rank, world, checks, out):
    import datetime

    if mode == "suite":
        local = int(os.environ["LOCAL_RANK"])
        cpus = len(os.sched_getaffinity(0))
        checks.append((f"kernel threads {torchneuron._C._num_threads()} for {cpus} cpus / 2 ranks",
                       torchneuron._C._num_threads() == max(1, cpus // 2)))
        checks.append((f"device count {torch.neuron.device_count()}", torch.neuron.device_count() >= world))
        torch.neuron.set_device(local)
        dev = torch.device("neuron", local)
        dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=PG_TIMEOUT))
        checks.append(("backend name", dist.get_backend() == "neuron"))
        import torchneuron.distributed as tnd
        checks.append((f"shm transport {tnd.transports}", set(tnd.transports.values()) == {"shm"}))
        checks.append(("no segment in /dev/shm while running", not glob.glob("/dev/shm/tn-ncl-*")
                       or not [p for p in glob.glob("/dev/shm/tn-ncl-*") if f"-{os.getpid()}-" in p]))
        _suite_collectives(torch, dist, rank, world, dev, checks)
        _suite_direct(torch, dist, rank, world, dev, checks)
        _suite_async(torch, dist, rank, world, dev, checks)
        _suite_monitored_barrier(torch, dist, rank, world, dev, checks)
        _suite_bad_input(torch, dist, rank, world, dev, checks)
        _suite_ddp(torch, dist, rank, world, dev, checks)
        _suite_ddp_options(torch, dist, rank, world, dev, checks)
        _suite_ddp_compile(torch, dist, rank, world, dev, checks)
        dist.destroy_process_group()
    elif mode == "gloo":  # NEURON_CCL_TRANSPORT=gloo: the cross-host transport, on this host
        local = int(os.environ["LOCAL_RANK"])
        torch.neuron.set_device(local)
        dev = torch.device("neuron", local)
        dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=PG_TIMEOUT))
        import torchneuron.distributed as tnd
        checks.append((f"gloo transport {tnd.transports}", set(tnd.transports.values()) == {"gloo"}))
        _suite_collectives(torch, dist, rank, world, dev, checks, gloo=True)
        _suite_async(torch, dist, rank, world, dev, checks)
        _suite_ddp(torch, dist, rank, world, dev, checks)
        dist.destroy_process_group()
    elif mode == "fsdp_dtensor":
        local = int(os.environ["LOCAL_RANK"])
        torch.neuron.set_device(local)
        dev = torch.device("neuron", local)
        dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=PG_TIMEOUT))
        _suite_dtensor(torch, dist, rank, world, dev, checks)
        _suite_fsdp2(torch, dist, rank, world, dev, checks)
        _suite_set_timeout(torch, dist, rank, world, dev, checks)
        dist.destroy_process_group()
    elif mode == "tcp_mixed":
        dev = torch.device("neuron", 0)
        dist.init_process_group("cpu:gloo,neuron:neuron", init_method=os.environ["TN_INIT"], rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=PG_TIMEOUT))
        t = torch.full((1000,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        checks.append(("neuron all_reduce", torch.equal(t.cpu(), torch.full((1000,), 3.0))))
        c = torch.full((10,), float(rank + 1))
        dist.all_reduce(c)  # through gloo
        checks.append(("cpu all_reduce via gloo", torch.equal(c, torch.full((10,), 3.0))))
        checks.append(("cpu backend is gloo", type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__ == "ProcessGroupGloo"))
        sub = dist.new_group([0, 1])
        u = torch.full((5,), float(rank), device=dev)
        dist.all_reduce(u, group=sub)
        checks.append(("new_group all_reduce", torch.equal(u.cpu(), torch.full((5,), 1.0))))
        dist.barrier()  # no destroy_process_group: the normal exit must release everything, without a hang
    elif mode == "kill":
        dev = torch.device("neuron", 0)
        dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=KILL_PG_TIMEOUT))
        model = torch.nn.Linear(256, 256).to(dev)  # a 257 KB bucket: the direct path
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        t0 = None
        try:
            for step in range(1000):
                if rank == 1 and step == 3:
                    os.kill(os.getpid(), signal.SIGKILL)
                t0 = time.monotonic()
                opt.zero_grad()
                model(torch.randn(4, 256, device=dev)).sum().backward()
                opt.step()
                torch.neuron.synchronize()
            checks.append(("no error after the peer died", False))
        except dist.DistBackendError as e:
            out["elapsed"] = time.monotonic() - t0
            out["error"] = str(e)[:600]
            msg = str(e)
            checks.append(("names rank 1", "rank 1" in msg))
            checks.append(("names the collective and its seq", "all_reduce" in msg and "seq" in msg))
            checks.append((f"error within timeout + 5 s ({out['elapsed']:.2f} s)", out["elapsed"] < KILL_PG_TIMEOUT + 5))
        except Exception as e:  # noqa: BLE001
            checks.append((f"wrong exception {type(e).__name__}: {str(e)[:300]}", False))


# ---- the test side ------------------------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**kw):
    env = dict(os.environ)
    for k in ("NEURON_NUM_THREADS", "NEURON_RT_VISIBLE_CORES", "LOCAL_WORLD_SIZE", "TORCH_DISTRIBUTED_DEBUG",
              "NEURON_CCL_TRANSPORT", "NEURON_CCL_CHUNK_BYTES"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in kw.items()})
    return env


def _assert_checks(r, err):
    assert r is not None, f"rank produced no result; stderr:\n{err}"
    bad = [name for name, ok in r["checks"] if not ok]
    assert not bad, f"rank {r['rank']} failed: {bad}\nstderr:\n{err[-2000:]}"
    assert r["checks"], "no checks ran"


def _assert_no_segments(pids):
    left = [p for p in glob.glob("/dev/shm/tn-ncl-*") if any(f"tn-ncl-{pid}-" in p for pid in pids)]
    assert not left, f"segments left in /dev/shm: {left}"


def _read_results(d, n):
    out = []
    for r in range(n):
        path = os.path.join(d, f"rank{r}.json")
        out.append(json.load(open(path)) if os.path.exists(path) else None)
    return out


def _run_torchrun(mode, tmp, **env):
    port = _free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(port), "--max_restarts", "0", HERE, mode]
    p = subprocess.Popen(cmd, env=_env(TN_RESULT_DIR=tmp, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        o, e = p.communicate(timeout=LAUNCH_TIMEOUT)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return p.returncode, _read_results(tmp, 2), e


def _run_ranks(mode, env_per_rank, tmp):
    procs = [subprocess.Popen([sys.executable, HERE, mode], env=dict(env, TN_RESULT_DIR=tmp),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for env in env_per_rank]
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    outs = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=max(1, deadline - time.monotonic()))
            outs.append((p.returncode, e[-3000:]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(rc, r, e) for (rc, e), r in zip(outs, _read_results(tmp, len(procs)))]


def test_torchrun_suite(tmp_path):
    rc, results, err = _run_torchrun("suite", str(tmp_path))
    for r in results:
        _assert_checks(r, err)
    assert rc == 0, err[-3000:]
    _assert_no_segments([r["pid"] for r in results])


def test_gloo_transport(tmp_path):
    rc, results, err = _run_torchrun("gloo", str(tmp_path), NEURON_CCL_TRANSPORT="gloo")
    for r in results:
        _assert_checks(r, err)
    assert rc == 0, err[-3000:]


def test_fsdp2_dtensor(tmp_path):
    rc, results, err = _run_torchrun("fsdp_dtensor", str(tmp_path))
    for r in results:
        _assert_checks(r, err)
    assert rc == 0, err[-3000:]
    _assert_no_segments([r["pid"] for r in results])


def test_tcp_mixed_backends(tmp_path):
    port = _free_port()
    envs = [_env(RANK=r, WORLD_SIZE=2, TN_INIT=f"tcp://127.0.0.1:{port}", NEURON_NUM_THREADS=1) for r in range(2)]
    res = _run_ranks("tcp_mixed", envs, str(tmp_path))
    for rc, r, err in res:
        _assert_checks(r, err)
        assert rc == 0, err
    _assert_no_segments([r["pid"] for _, r, _ in res])


def test_killed_rank(tmp_path):
    port = _free_port()
    fr = tmp_path / "fr"
    fr.mkdir()
    envs = [_env(RANK=r, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, NEURON_NUM_THREADS=1,
                 TORCH_FR_DUMP_TEMP_FILE=fr / "trace_rank_") for r in range(2)]
    res = _run_ranks("kill", envs, str(tmp_path))
    (rc0, r0, err0), (rc1, r1, _) = res
    assert rc1 == -signal.SIGKILL, f"rank 1 exited with {rc1}"
    _assert_checks(r0, err0)
    assert rc0 == 0, err0
    print(f"killed rank: survivor's error after {r0['elapsed']:.3f} s: {r0['error'][:200]}")
    _assert_no_segments([r0["pid"]])
    # the survivor's Flight Recorder dump: PyTorch's format, the failed all_reduce last and not completed
    import pickle
    import re
    assert sorted(os.listdir(fr)) == ["trace_rank_0"], os.listdir(fr)
    with open(fr / "trace_rank_0", "rb") as f:
        d = pickle.load(f)
    assert d["version"] == "2.10" and d["pg_config"]["0"]["ranks"] == "[0, 1]", d["pg_config"]
    seq = int(re.search(r"seq (\d+)", r0["error"]).group(1))
    last = [e for e in d["entries"] if e["collective_seq_id"] == seq and e["profiling_name"] == "nccl:all_reduce"]
    assert last and last[-1]["state"] != "completed", d["entries"][-3:]
    assert any(e["state"] == "completed" and e["input_sizes"] for e in d["entries"]), d["entries"][:3]
    # torchfrtrace reads it and matches its collectives against the group's ranks (the killed rank left
    # no dump: --allow-incomplete-ranks)
    p = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(fr),
                        "--allow-incomplete-ranks"], capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "missed FR dumps from ranks ({1})" in out, out[-3000:]


if __name__ == "__main__":
    worker(sys.argv[1])
