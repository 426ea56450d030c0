"""Runtime faults (issue 16): the exit after a backward, use-after-free in empty_cache and the OOM
recovery pattern, errors that poison the outputs of failed and skipped kernels, and fork.

Most cases run in subprocesses: they end the interpreter, set NEURON_RT_* variables (read once per
process) or fork.
"""

import concurrent.futures
import os
import subprocess
import sys
import textwrap

import re

import pytest
import torch

from conftest import ROOT, _BACKEND_ENV, describe, run_python


# ---- 4: the abort at exit after a backward ----------------------------------------------------------

_EXIT_SCRIPT = """
import torch
x = torch.randn(4, 4, device="neuron", requires_grad=True)
(x * 2).sum().backward()
"""


def _run_exit_script(_):
    env = {k: v for k, v in os.environ.items() if k not in _BACKEND_ENV}
    try:
        p = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], env=env, capture_output=True, text=True,
                           timeout=120, cwd=str(ROOT))
    except subprocess.TimeoutExpired as e:
        return f"timed out after {e.timeout} s"
    return None if p.returncode == 0 and "terminate called" not in p.stderr else describe(p)


def test_exit_after_backward_50_runs():
    """The three-line script exits with status 0 every time (it aborted in 10-50 % of runs: the autograd
    device thread dropped the last GraphTask reference, holding a Python object, during interpreter
    finalization).  50 runs, two at a time (the race is likelier on a busy machine)."""
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        bad = [r for r in ex.map(_run_exit_script, range(50)) if r]
    assert not bad, f"{len(bad)} of 50 runs failed; first:\n{bad[0]}"


# ---- 11: empty_cache and the OOM recovery pattern -----------------------------------------------------

def test_empty_cache_after_del_of_queued_tensor():
    """randn of 80 MiB is still being written by the queue worker when `del x; empty_cache()` runs: the
    segment must stay until the kernel is done (it was freed under it: SIGSEGV)."""
    p = run_python("""
        import torch
        for i in range(8):
            x = torch.randn(20 << 20, device="neuron")
            y = x * 2  # a freed input too: y's kernel reads x's block
            del x
            torch.neuron.empty_cache()
            del y
            torch.neuron.empty_cache()
        assert torch.neuron.memory_reserved() == 0, torch.neuron.memory_reserved()
        print("ok")
    """)
    assert p.returncode == 0 and "ok" in p.stdout, p.report


_OOM_COMMON = """
import threading
import torch

def retry(fn, sizes):
    # the recovery pattern: catch the OOM, empty_cache(), retry smaller
    for n in sizes:
        try:
            return n, fn(n)
        except torch.OutOfMemoryError:
            torch.neuron.empty_cache()
    raise AssertionError("no size fit")

def check_clean():
    torch.neuron.synchronize()
    assert torch.neuron.memory_allocated() == 0, torch.neuron.memory_stats()
"""


def test_oom_recovery_in_forward():
    p = run_python(_OOM_COMMON + """
torch.manual_seed(0)
def fwd(n):
    a = torch.randn(n, 1024, device="neuron")
    return (a.exp() * 2 + a).sum(1).cpu(), a.cpu()
n, (got, a) = retry(fwd, [1 << 20, 1 << 19, 1 << 10])  # 4 GiB, 2 GiB: too big for 1 GiB
assert n == 1 << 10
torch.testing.assert_close(got, (a.exp() * 2 + a).sum(1))
del got, a
check_clean()
s = torch.neuron.memory_stats()
assert s["num_ooms"] == 2, s["num_ooms"]
print("ok")
""", env={"NEURON_RT_MEMORY_LIMIT": "1GiB"})
    assert p.returncode == 0 and "ok" in p.stdout, p.report


def test_oom_recovery_in_backward():
    """The OOM comes from inside backward (the forward fits); the retry's gradients are right and the
    failed backward leaves nothing allocated behind."""
    p = run_python(_OOM_COMMON + """
w_cpu = torch.randn(256, 256)
def step(n):
    w = w_cpu.to("neuron").requires_grad_()
    x = torch.randn(n, 256, device="neuron")
    h = x @ w
    loss = (h.tanh() * h.sigmoid()).sum()
    x_cpu = x.cpu()
    del h, x
    loss.backward()  # needs several [n, 256] buffers: over the limit for the big n
    return w.grad.cpu(), x_cpu
# [1<<19, 256] f32 is 512 MiB: the forward fits in 1.5 GiB, the backward does not
n, (g, x_cpu) = retry(step, [1 << 19, 1 << 12])
assert n == 1 << 12, n
# the reference in float64: the CPU's own float32 gradient is off by up to 5e-3 in about 40 % of these
# processes (measured against float64, where neuron's is within 1.1e-4 every time)
w = w_cpu.double().requires_grad_()
h = x_cpu.double() @ w
(h.tanh() * h.sigmoid()).sum().backward()
torch.testing.assert_close(g.double(), w.grad, rtol=1e-4, atol=1e-3)
del g, x_cpu
check_clean()
assert torch.neuron.memory_stats()["num_ooms"] >= 1
print("ok")
""", env={"NEURON_RT_MEMORY_LIMIT": "1536MiB"})
    assert p.returncode == 0 and "ok" in p.stdout, p.report


def test_oom_recovery_in_four_threads():
    """Four threads at once: 2 GiB never fits, 128 MiB fits for some of them at a time (each needs
    three), 1 MiB always does once the others' cached segments are released (a small request comes from
    the small pool, which a large block never serves, so it retries while the others hold theirs)."""
    p = run_python(_OOM_COMMON + """
errors = []
def worker(seed):
    try:
        for it in range(2):
            def f(n):
                b = torch.randn(n, 256, device="neuron")
                return ((b * 3).exp().sum(0) + b.max(0).values).cpu(), b.cpu()
            n, (got, a) = retry(f, [1 << 21, 1 << 17] + [1 << 10] * 8)
            torch.testing.assert_close(got, (a * 3).exp().sum(0) + a.max(0).values, rtol=1e-4, atol=1e-3)
            del got, a
    except BaseException as e:
        errors.append(repr(e))
ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join(300)
assert not any(t.is_alive() for t in ts), "hung"
assert not errors, errors
check_clean()
torch.neuron.empty_cache()
assert torch.neuron.memory_reserved() == 0, torch.neuron.memory_stats()
assert torch.neuron.memory_stats()["num_ooms"] >= 4
print("ok")
""", env={"NEURON_RT_MEMORY_LIMIT": "1GiB"})
    assert p.returncode == 0 and "ok" in p.stdout, p.report


# ---- 13: a failed kernel poisons its outputs and those of the kernels skipped behind it ----------------

# index_select's bad index is an IndexError, worded as the CPU words it (with the index and size after it)
_BAD_INDEX = "index out of range in self (index 20, dimension 0 of size 10)"
_BAD = re.escape(_BAD_INDEX)


def _failing_op():
    x = torch.randn(10, 4, device="neuron")
    idx = torch.tensor([0, 20], device="neuron")
    y = x.index_select(0, idx)  # fails on the queue
    z = y + 1                   # skipped behind it
    w = x * 2                   # skipped behind it
    return x, y, z, w


@pytest.mark.parametrize("read", ["cpu", "item", "copy", "clone_cpu"])
def test_failed_and_skipped_outputs_stay_errors(read):
    torch.neuron.synchronize()
    x, y, z, w = _failing_op()
    with pytest.raises(IndexError, match=_BAD):
        torch.neuron.synchronize()  # reported once here...
    readers = {
        "cpu": lambda t: t.cpu(),
        "item": lambda t: t[0, 0].item(),
        "copy": lambda t: torch.empty(t.shape).copy_(t),
        "clone_cpu": lambda t: t.clone().cpu(),
    }
    for t in (y, z, w):  # ...and again on every read of what it should have written
        for _ in range(2):
            with pytest.raises(IndexError, match=_BAD):
                readers[read](t)
    torch.testing.assert_close(x.cpu() * 2, (x * 2).cpu())  # inputs and new work are fine
    assert torch.ones(3, device="neuron").sum().item() == 3


def test_error_consumed_by_another_thread():
    """Another thread's synchronize() takes the error; the launching thread's read still raises it."""
    import threading

    torch.neuron.synchronize()
    x, y, z, w = _failing_op()
    got = []
    t = threading.Thread(target=lambda: got.append(pytest.raises(IndexError, torch.neuron.synchronize)))
    t.start()
    t.join(60)
    assert got and _BAD_INDEX in str(got[0].value)
    torch.neuron.synchronize()  # nothing left to report
    with pytest.raises(IndexError, match=_BAD):
        y.cpu()
    with pytest.raises(IndexError, match=_BAD):
        z.cpu()
    assert x.cpu().shape == (10, 4)


def test_inplace_outputs_of_failed_and_skipped_ops_stay_errors():
    """A kernel that fails writing its output in place (index_add_ into self, an out= tensor) and an
    in-place op skipped behind it leave tensors that raise the error on every read, after it was
    reported (they read as if valid: a half-written self, a self without its update)."""
    # index_add_ of a 2-d self words its bad index as the CPU's does: a RuntimeError with the bounds
    _BAD_ADD = "index 20 is out of bounds for dimension 0 with size 10"
    torch.neuron.synchronize()
    x = torch.randn(10, 4, device="neuron")
    a, w, o = x.clone(), x.clone(), torch.empty(2, 4, device="neuron")
    torch.neuron.synchronize()
    a.index_add_(0, torch.tensor([0, 20], device="neuron"), torch.ones(2, 4, device="neuron"))  # fails
    w.add_(1)                                                            # skipped behind it
    torch.mul(x[:2], 3, out=o)                                           # skipped, into an out= tensor
    with pytest.raises(RuntimeError, match=_BAD_ADD):
        torch.neuron.synchronize()
    for t in (a, w, o):
        for _ in range(2):
            with pytest.raises(RuntimeError, match=_BAD_ADD):
                t.cpu()
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)


def test_op_reading_a_poisoned_tensor_after_the_report_raises():
    """After the error was reported, an op that reads a failed op's output raises it at once (it
    computed from uninitialized memory and its result read back with no error)."""
    torch.neuron.synchronize()
    x, y, z, w = _failing_op()
    with pytest.raises(IndexError, match=_BAD):
        torch.neuron.synchronize()
    for op in (lambda: y + 1, lambda: y.sum(), lambda: torch.cat([x, y]), lambda: z.mul_(2)):
        with pytest.raises(IndexError, match=_BAD):
            op()
    assert (x * 0).sum().item() == 0


def test_error_names_the_failed_op_not_its_neighbour():
    """A tensor allocated right before a failing op (an empty tensor: its op launched nothing) is not
    taken for the failed op's output (its reads raised that op's error).  The case of two threads'
    ops sharing the queue is in tests/c/test_runtime.c (test_op_brackets)."""
    torch.neuron.synchronize()
    x = torch.randn(10, 4, device="neuron")
    idx = torch.tensor([0, 20], device="neuron")
    x2 = x * 1
    torch.neuron.synchronize()
    e = torch.empty(5, device="neuron")
    y = x.index_select(0, idx)
    with pytest.raises(IndexError, match=_BAD):
        torch.neuron.synchronize()
    assert e.cpu().shape == (5,)
    torch.testing.assert_close(x2.cpu(), x.cpu())
    with pytest.raises(IndexError, match=_BAD):
        y.cpu()


# ---- 12: fork -----------------------------------------------------------------------------------------

_FORK_COMMON = """
import os, signal, sys, time
import torch

def wait_child(pid, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung")
"""


def test_fork_while_busy_refuses_device_in_child():
    """The parent's queue is busy when it forks; the child gets CUDA's error at once (it hung)."""
    p = run_python(_FORK_COMMON + """
a = torch.randn(1024, 1024, device="neuron")
outs = [a @ a for _ in range(6)]  # queued: the worker is running them at the fork
pid = os.fork()
if pid == 0:
    signal.alarm(30)
    bad = []
    for name, fn in [("op", lambda: torch.ones(2, device="neuron") + 1), ("init", torch.neuron.init),
                     ("sync", torch.neuron.synchronize), ("read", lambda: outs[0].cpu())]:
        try:
            fn()
            bad.append(name + ": no error")
        except RuntimeError as e:
            if "Cannot re-initialize neuron in forked subprocess" not in str(e) or "spawn" not in str(e):
                bad.append(name + ": " + str(e))
    print(bad, flush=True)
    os._exit(0 if not bad else 3)
assert wait_child(pid) == 0
torch.testing.assert_close(outs[-1].cpu(), (a.cpu() @ a.cpu()), rtol=1e-4, atol=1e-3)
assert not torch.neuron._is_in_bad_fork()
print("ok")
""")
    assert p.returncode == 0 and "ok" in p.stdout, p.report


def test_fork_child_without_device_use_works():
    """Data-loading workers forked from a process that uses the device, and a plain forked child that
    exits through the interpreter (freeing the neuron tensors it inherited), both exit cleanly."""
    p = run_python(_FORK_COMMON + """
import torch.utils.data as tud
w = torch.randn(256, 256, device="neuron")
y = w @ w  # queued
ds = tud.TensorDataset(torch.arange(64.0).reshape(32, 2))
batches = list(tud.DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context="fork"))
assert torch.cat([b[0] for b in batches]).sum().item() == torch.arange(64.0).sum().item()
pid = os.fork()
if pid == 0:
    signal.alarm(30)
    t = torch.randn(100).sum()  # CPU work only
    del w, y                    # inherited neuron tensors freed
    sys.exit(0)                 # atexit, GC and finalization in the child
assert wait_child(pid) == 0
torch.testing.assert_close(y.cpu(), w.cpu() @ w.cpu(), rtol=1e-4, atol=1e-3)
print("ok")
""")
    assert p.returncode == 0 and "ok" in p.stdout, p.report


def test_fork_before_device_threads_child_uses_device():
    """Asking for the device count starts no runtime thread: a child forked then uses the device."""
    p = run_python(_FORK_COMMON + """
assert torch.neuron.is_available() and torch.neuron.device_count() >= 1
pid = os.fork()
if pid == 0:
    signal.alarm(60)
    x = torch.arange(6.0, device="neuron").reshape(2, 3)
    ok = (x * 2).sum().item() == 30.0 and not torch.neuron._is_in_bad_fork()
    os._exit(0 if ok else 3)
assert wait_child(pid) == 0
assert (torch.ones(3, device="neuron") * 2).sum().item() == 6
print("ok")
""")
    assert p.returncode == 0 and "ok" in p.stdout, p.report
