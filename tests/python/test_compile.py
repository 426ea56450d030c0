"""torch.compile with backend="neuron": registration, parity with eager neuron and CPU, graph breaks,
the program cache (across processes, corruption, concurrent compiles), compiler errors, dynamic
shapes and the fusion figures of compile_stats().

Compile-heavy tests share one cache directory (NEURON_CACHE_DIR) so programs are built once per run.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import ROOT, run_python

import torchneuron
from torchneuron.compile import toolchain


# per module: a private program cache, the default compiler, a fresh Dynamo around every test
pytestmark = pytest.mark.usefixtures("compile_cache_dir", "fresh_dynamo")


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.LayerNorm(32), nn.Linear(32, 4))


def _copy(m, device):
    c = _mlp()
    c.load_state_dict(m.state_dict())
    return c.to(device)


def _grads(m):
    return {n: p.grad.detach().cpu() for n, p in m.named_parameters()}


# ---- registration ---------------------------------------------------------------------------------------

def test_backend_and_device_interface_registered():
    from torch._dynamo.device_interface import get_interface_for_device

    assert "neuron" in torch._dynamo.list_backends()
    iface = get_interface_for_device("neuron")
    assert iface.device_count() >= 1 and iface.is_available()
    assert iface.current_device() == torch.neuron.current_device()
    if hasattr(torch.compiler, "get_default_backend"):
        assert torch.compiler.get_default_backend() != "neuron"  # we never set it


# ---- parity ---------------------------------------------------------------------------------------------

def test_mlp_forward_backward_matches_eager_and_cpu():
    ref = _mlp()
    cpu, eager, comp = _copy(ref, "cpu"), _copy(ref, "neuron"), _copy(ref, "neuron")
    cm = torch.compile(comp, backend="neuron")
    x = torch.randn(8, 16)
    outs = []
    for m, dev in ((cpu, "cpu"), (eager, "neuron"), (cm, "neuron")):
        y = m(x.to(dev))
        (y * y).sum().backward()
        outs.append(y.detach().cpu())
    torch.testing.assert_close(outs[2], outs[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[2], outs[1], rtol=1e-5, atol=1e-5)
    gc, ge, gk = _grads(cpu), _grads(eager), _grads(comp)
    for n in gc:
        torch.testing.assert_close(gk[n], gc[n], rtol=1e-4, atol=1e-5, msg=n)
        torch.testing.assert_close(gk[n], ge[n], rtol=1e-4, atol=1e-5, msg=n)


def test_gpt_block_causal_attention():
    from train_gpt import Block

    torch.manual_seed(0)
    ref = Block(32, 4)
    blk_cpu = Block(32, 4)
    blk_cpu.load_state_dict(ref.state_dict())
    blk = Block(32, 4)
    blk.load_state_dict(ref.state_dict())
    blk = blk.to("neuron")
    cb = torch.compile(blk, backend="neuron")
    x = torch.randn(2, 16, 32)
    xc = x.clone().requires_grad_()
    xn = x.to("neuron").requires_grad_()
    yc, yn = blk_cpu(xc), cb(xn)
    torch.testing.assert_close(yn.detach().cpu(), yc.detach(), rtol=1e-4, atol=1e-5)
    yc.pow(2).mean().backward()
    yn.pow(2).mean().backward()
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    gc = dict(blk_cpu.named_parameters())
    for n, p in blk.named_parameters():
        torch.testing.assert_close(p.grad.cpu(), gc[n].grad, rtol=1e-4, atol=1e-5, msg=n)


def test_graph_break_with_print(capsys):
    def f(x):
        y = torch.tanh(x) * 2
        print("between graphs", y.shape)
        return (y + 1).softmax(-1)

    x = torch.randn(4, 8)
    out = torch.compile(f, backend="neuron")(x.to("neuron"))
    assert "between graphs" in capsys.readouterr().out
    torch.testing.assert_close(out.cpu(), f(x), rtol=1e-5, atol=1e-6)


def test_data_dependent_branch():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1

    cf = torch.compile(f, backend="neuron")
    for s in (1.0, -1.0):
        x = torch.full((3,), s)
        torch.testing.assert_close(cf(x.to("neuron")).cpu(), f(x))


def test_unsupported_op_runs_eagerly_inside_the_program():
    def f(x):
        return torch.cumsum(x.exp(), dim=1).sin() + 1

    x = torch.randn(4, 6)
    torchneuron.compile_stats(reset=True)
    out = torch.compile(f, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), f(x), rtol=1e-5, atol=1e-5)
    g = torchneuron.compile_stats()["graphs"][-1]
    assert "aten.cumsum.default" in g["eager_op_names"]
    assert g["compiled"] and g["kernels"] >= 3  # exp | cumsum (eager) | sin + add


# ---- fusion figures ------------------------------------------------------------------------------------------

def test_compile_stats_fewer_kernels_than_ops():
    torchneuron.compile_stats(reset=True)
    m = torch.compile(_copy(_mlp(), "neuron"), backend="neuron")
    m(torch.randn(8, 16, device="neuron")).sum().backward()
    st = torchneuron.compile_stats()
    assert st["graphs_compiled"] == 2 and st["calls"] == 2
    for g in st["graphs"]:
        assert g["compiled"] and g["eager_ops"] == 0
        assert g["kernels"] < g["aten_ops"], g
        assert g["launches"] == 1, g  # one queue launch per graph
    assert st["kernels_launched"] == sum(g["kernels"] for g in st["graphs"])



def test_horizontal_fusion_runs_independent_kernels_as_one():
    """Independent fused kernels of one segment (here: per-tensor updates and sums of squares of tensors
    of different shapes, like a foreach optimizer step) run as one multi-tensor kernel; a kernel reading
    another's result does not join its group.  Results match the CPU, including values whose workspace
    bytes would be reused between the group's members if they ran one after another."""
    shapes = [(33, 7), (5,), (128, 65), (1,), (3, 4, 5)]
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(s, generator=g) for s in shapes]

    def f(*xs):
        ups = [torch.sin(x) * 0.5 + x.exp() * 0.25 for x in xs]
        sq = [(u * u).sum() for u in ups]               # reads ups: the next group
        t = torch.stack(sq).sum().sqrt()
        return [u * (1 / (t + 1)) for u in ups] + [t]

    torchneuron.compile_stats(reset=True)
    out = torch.compile(f, backend="neuron")(*[x.to("neuron") for x in xs])
    ref = f(*xs)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o.cpu(), r, rtol=1e-5, atol=1e-6)
    (gr,) = torchneuron.compile_stats()["graphs"]
    assert gr["compiled"] and gr["eager_ops"] == 0, gr
    # ups (5) | sums of squares (5) | stack | total + the 5 scaled outputs: at most 5 kernels, not 17
    assert gr["kernels"] <= 5, gr


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addmm_bias_inside_the_gemm(dtype):
    """addmm's 1-D bias (N elements, or one broadcast) is added by the GEMM itself, no pass over C:
    plain, with K = 0 (C is the bias), two independent linears in one group (N > M: column blocks,
    each with its part of the bias), with a GELU epilogue (row blocks) and after a layer norm (the
    prologue's row blocks); a 2-D bias keeps the separate add.  Results match the CPU."""
    from torchneuron.compile import frontend
    g = torch.Generator().manual_seed(0)

    def r(*s):
        return torch.randn(*s, generator=g).to(dtype)

    M, K, N = 37, 50, 300
    x, w, b, b1, b2d = r(M, K), r(N, K), r(N), r(1), r(M, N)
    x0, w0 = r(M, 0), r(N, 0)
    x2, w2, bb = r(M, 300), r(617, 300), r(617)  # 2^21 multiply-adds or more: column blocks
    lw, lb = r(K), r(K)

    def f(x, w, b, b1, b2d, x0, w0, x2, w2, bb, lw, lb):
        return (F.linear(x, w, b),
                torch.addmm(b1, x, w.t()),
                torch.addmm(b2d, x, w.t()),
                F.linear(x0, w0, b),
                F.linear(x2, w2, bb),
                F.gelu(F.linear(x, w, b)),
                F.linear(F.layer_norm(x, (K,), lw, lb), w, b))

    args = (x, w, b, b1, b2d, x0, w0, x2, w2, bb, lw, lb)
    frontend.programs.clear()
    out = torch.compile(f, backend="neuron")(*[a.to("neuron") for a in args])
    ref = f(*args)  # PyTorch's CPU in the same dtype
    tol = dict(rtol=2e-2, atol=1e-1) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    for i, (o, rr) in enumerate(zip(out, ref)):
        assert o.dtype == dtype, i
        torch.testing.assert_close(o.cpu().float(), rr.float(), **tol, msg=lambda m: f"output {i}: {m}")

    def plain(x, w, b):
        return F.linear(x, w, b)

    frontend.programs.clear()
    y = torch.compile(plain, backend="neuron")(x.to("neuron"), w.to("neuron"), b.to("neuron"))
    torch.testing.assert_close(y.cpu().float(), plain(x, w, b).float(), **tol)
    (prog,) = frontend.programs
    units = [ln for ln in prog.fusion_log.splitlines() if ln.startswith("unit ")]
    assert units and not any(" pw " in u for u in units), prog.fusion_log  # the mm alone, no add kernel


def test_dependency_groups_run_library_calls_as_one_kernel():
    """Independent GEMMs (the dX and dW of a linear layer's backward, big enough to split into column
    and row blocks, odd sizes) and column reductions (the bias gradient) read only the incoming gradient: one
    dependency group, one kernel.  Results match the CPU.  An out-of-range index in an embedding
    inside a group fails with the kernel's message."""
    g = torch.Generator().manual_seed(0)
    # dX [97, 300] splits into column blocks, dW [515, 300] into row blocks (odd sizes, partial blocks)
    M, K, N = 97, 300, 515
    dy, x, w = torch.randn(M, N, generator=g), torch.randn(M, K, generator=g), torch.randn(N, K, generator=g)

    def f(dy, x, w):
        dx = dy @ w                  # [M, K]
        dw = dy.t() @ x              # [N, K]
        db = dy.sum(0)               # [N]
        return dx, dw, db

    torchneuron.compile_stats(reset=True)
    out = torch.compile(f, backend="neuron")(dy.to("neuron"), x.to("neuron"), w.to("neuron"))
    for o, r in zip(out, f(dy, x, w)):
        torch.testing.assert_close(o.cpu(), r, rtol=1e-4, atol=1e-4)
    (gr,) = torchneuron.compile_stats()["graphs"]
    assert gr["compiled"] and gr["eager_ops"] == 0 and gr["kernels"] == 1, gr

    emb = torch.randn(10, 8, generator=g)

    def h(idx, a, b):
        return torch.nn.functional.embedding(idx, emb.to(a.device)), a @ b

    idx = torch.tensor([1, 2, 10])
    a, b = torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g)
    hc = torch.compile(h, backend="neuron")
    e, ab = hc(torch.tensor([1, 2, 3]).to("neuron"), a.to("neuron"), b.to("neuron"))
    torch.testing.assert_close(ab.cpu(), a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises((RuntimeError, IndexError), match="10"):
        hc(idx.to("neuron"), a.to("neuron"), b.to("neuron"))[0].cpu()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_nll_backward_and_vector_norm_fuse(reduction):
    """nll_loss_backward becomes pointwise ops fused into the log-softmax backward (ignored targets get
    no gradient); linalg_vector_norm (ord 2) is a row reduction; both without eager ops."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(37, 11, generator=g)
    target = torch.randint(0, 11, (37,), generator=g)
    target[::5] = -100

    def f(z, t):
        loss = F.cross_entropy(z, t, reduction=reduction)
        return loss, torch.linalg.vector_norm(z * 2)

    res = {}
    for dev in ("cpu", "neuron"):
        z = logits.clone().to(dev).requires_grad_()
        fn = torch.compile(f, backend="neuron") if dev == "neuron" else f
        torchneuron.compile_stats(reset=True)
        loss, nrm = fn(z, target.to(dev))
        loss.backward()
        res[dev] = (loss.detach().cpu(), nrm.detach().cpu(), z.grad.cpu())
        if dev == "neuron":
            grs = torchneuron.compile_stats()["graphs"]
            assert grs and all(gr["compiled"] and gr["eager_ops"] == 0 for gr in grs), grs
    for a, b in zip(res["neuron"], res["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert (res["neuron"][2][::5] == 0).all()


# ---- dynamic shapes --------------------------------------------------------------------------------------------

class _SeqModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(32)
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        y = F.gelu(self.fc(self.ln(x))) + x
        return y.softmax(-1).sum(1) + y.mean(1)


def test_dynamic_sequence_lengths_compile_once():
    torch.manual_seed(0)
    m = _SeqModel()
    mn = _SeqModel()
    mn.load_state_dict(m.state_dict())
    mn = mn.to("neuron")
    torchneuron.compile_stats(reset=True)
    cm = torch.compile(mn, backend="neuron", dynamic=True)
    for t in (8, 13, 32, 64):
        x = torch.randn(2, t, 32)
        with torch.no_grad():
            torch.testing.assert_close(cm(x.to("neuron")).cpu(), m(x), rtol=1e-4, atol=1e-5)
    assert torchneuron.compile_stats()["graphs_compiled"] <= 2


def test_mark_dynamic_training():
    torch.manual_seed(0)
    m = _SeqModel()
    mn = _SeqModel()
    mn.load_state_dict(m.state_dict())
    mn = mn.to("neuron")
    torchneuron.compile_stats(reset=True)
    cm = torch.compile(mn, backend="neuron")
    for t in (8, 24, 40):
        x = torch.randn(2, t, 32)
        xn = x.to("neuron")
        torch._dynamo.mark_dynamic(xn, 1)
        cm(xn).sum().backward()
        m(x).sum().backward()
    for (n, p), q in zip(mn.named_parameters(), m.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-4, msg=n)
    assert torchneuron.compile_stats()["graphs_compiled"] <= 2  # one forward, one backward


# ---- the program cache -------------------------------------------------------------------------------------------

_CHILD = """
import torch, torch.nn as nn, torchneuron
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to("neuron")
y = torch.compile(m, backend="neuron")(torch.ones(8, 16, device="neuron"))
y.sum().backward()
st = torchneuron.compile_stats()
print("STATS", st["cache_misses"], st["disk_hits"], st["graphs_compiled"], round(float(y.sum().detach().cpu()), 4), flush=True)
import os; os._exit(0)  # skip interpreter teardown (see docs/compiler.md, known issues)
"""


def _stats(proc):
    assert proc.returncode == 0, proc.report
    line = next(l for l in proc.stdout.splitlines() if l.startswith("STATS"))
    misses, hits, graphs, total = line.split()[1:]
    return int(misses), int(hits), int(graphs), float(total)


def test_cache_across_processes(tmp_path):
    env = {"NEURON_CACHE_DIR": str(tmp_path)}
    # two processes compiling the same model at once: both succeed, each program is built once
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], env={**os.environ, **env}, cwd=str(ROOT),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        p.stdout, p.report = out, f"exit {p.returncode}\n{out}\n{err}"
        results.append(_stats(p))
    assert sum(r[0] for r in results) == results[0][2] == 2
    assert results[0][3] == results[1][3]
    # a later process compiles nothing
    misses, hits, graphs, total = _stats(run_python(_CHILD, env=env, timeout=180))
    assert misses == 0 and hits == graphs == 2
    assert total == results[0][3]


def _entries(cache):
    return sorted(Path(cache, "programs").glob("*/*/entry.json"))


def test_corrupted_cache_entry_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_CACHE_DIR", str(tmp_path))

    def f(x):
        return (x * 3 + 1).cos()

    x = torch.randn(5, 7)
    torch.compile(f, backend="neuron")(x.to("neuron"))
    (entry,) = _entries(tmp_path)
    so = entry.parent / "program.so"
    data = so.read_bytes()
    bad = tmp_path / "bad.so"
    bad.write_bytes(data[: len(data) // 2])   # a truncated file, swapped in (never write a mapped file)
    os.replace(bad, so)
    toolchain._loaded.clear()
    torch._dynamo.reset()
    before = toolchain.stats.rebuilt_corrupt
    with pytest.warns(UserWarning, match="corrupted"):
        out = torch.compile(f, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), f(x))
    assert toolchain.stats.rebuilt_corrupt == before + 1
    assert toolchain._valid(str(entry.parent))


def test_killed_compile_then_rerun(tmp_path):
    # a C compiler that hangs: the process is killed with SIGKILL while it holds the entry's lock
    slow = tmp_path / "slowcc"
    slow.write_text("#!/bin/sh\n[ \"$1\" = --version ] || sleep 60\nexec cc \"$@\"\n")
    slow.chmod(0o755)
    cache = tmp_path / "cache"
    code = ("import os, torch\nprint(torch.compile(lambda x: x.exp() + 2, backend='neuron')"
            "(torch.ones(3, device='neuron')).sum().item(), flush=True)\nos._exit(0)")
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "NEURON_CC")}
    p = subprocess.Popen([sys.executable, "-c", code], env={**env, "NEURON_CACHE_DIR": str(cache), "CC": str(slow)},
                         cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while not list(cache.glob("programs/*/*/program.c")) and time.time() < deadline and p.poll() is None:
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGKILL)  # the process and its hung compiler
    p.wait()
    assert list(cache.glob("programs/*/*/program.c")), "the compile never started"
    proc = run_python(code, env={"NEURON_CACHE_DIR": str(cache)}, timeout=180)
    assert proc.returncode == 0, proc.report
    assert abs(float(proc.stdout.split()[-1]) - 3 * (2.718281828 + 2)) < 1e-4


def test_failing_c_compiler_names_compiler_and_source(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "false")
    with pytest.raises(Exception) as ei:
        torch.compile(lambda x: x.sin() * 5 - 1, backend="neuron")(torch.randn(3, device="neuron"))
    msg = str(ei.value)
    assert "'false'" in msg and "program.c" in msg
    src = msg.split("kept at ")[1].split()[0]
    assert Path(src).is_file() and "nc_seg0" in Path(src).read_text()


def test_debug_keeps_ir_source_and_log(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NEURON_COMPILE_DEBUG", "1")
    torch.compile(lambda x: (x * x).sum(-1).sqrt(), backend="neuron")(torch.randn(4, 9, device="neuron"))
    (entry,) = _entries(tmp_path)
    for name in ("graph.ir", "program.c", "plan.txt", "fusion.log"):
        assert (entry.parent / name).stat().st_size > 0, name
    assert "row" in (entry.parent / "fusion.log").read_text()


def test_gpt_training_20_steps_matches_cpu():
    from train_gpt import GPT, cosine_with_warmup

    def train(dev, compiled, steps=20, V=32, T=8, L=1, C=16, H=2, B=4):
        torch.manual_seed(1337)
        m = GPT(V, T, L, C, H).to(dev)
        mm = torch.compile(m, backend="neuron") if compiled else m
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_with_warmup(5, steps))
        g = torch.Generator().manual_seed(0)
        losses = []
        for _ in range(steps):
            x = torch.randint(0, V, (B, T), generator=g)
            y = torch.randint(0, V, (B, T), generator=g)
            opt.zero_grad(set_to_none=True)
            _, loss = mm(x.to(dev), y.to(dev))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
        return losses

    cpu, neuron = train("cpu", False), train("neuron", True)
    for step, (a, b) in enumerate(zip(cpu, neuron)):
        assert abs(a - b) <= 1e-4 * abs(a), (step, a, b)


def test_compile_lock_times_out_with_a_clear_error(tmp_path):
    """A second compile of the same program waits on the entry's flock, up to
    NEURON_COMPILE_LOCK_TIMEOUT seconds, then raises naming the lock file."""
    path = str(tmp_path / "programs" / "ab" / "abcd.lock")
    with toolchain.FileLock(path, timeout=5):
        with pytest.raises(TimeoutError, match="abcd.lock"):
            with toolchain.FileLock(path, timeout=0.2):
                pass
    with toolchain.FileLock(path, timeout=0.2):  # free again once the holder leaves
        pass
