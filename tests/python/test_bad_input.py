"""Bad input gives a clear Python exception, never a crash or a hang, and the device keeps working.

The NEURON_RT_* variables are read once per process, so those cases run in subprocesses.
"""

import re

import pytest
import torch
import torch.nn.functional as F

# A script for the environment-variable cases: importing torch must work whatever the variable
# says; the first use of the device must raise RuntimeError naming the variable.
FIRST_USE = """
import sys
import torch                      # autoloads the backend: must not raise
print("IMPORTED", flush=True)
try:
    torch.ones(1, device="neuron")
except RuntimeError as e:
    print("RUNTIMEERROR", e)
    sys.exit(0)
except Exception as e:
    print("OTHER", type(e).__name__, e)
    sys.exit(2)
print("NO ERROR")
sys.exit(3)
"""


@pytest.mark.parametrize("value", ["banana", "0-x", "1-0-2", "-1", "0,,z"])
def test_bad_visible_cores(run_py, value):
    proc = run_py(FIRST_USE, env={"NEURON_RT_VISIBLE_CORES": value})
    assert "IMPORTED" in proc.stdout, proc.report
    assert proc.returncode == 0 and "RUNTIMEERROR" in proc.stdout, proc.report
    assert "NEURON_RT_VISIBLE_CORES" in proc.stdout, proc.report


@pytest.mark.parametrize("value", ["lots", "12XB", "-5", "4GiBs"])
def test_bad_memory_limit(run_py, value):
    proc = run_py(FIRST_USE, env={"NEURON_RT_MEMORY_LIMIT": value})
    assert "IMPORTED" in proc.stdout, proc.report
    assert proc.returncode == 0 and "RUNTIMEERROR" in proc.stdout, proc.report
    assert "NEURON_RT_MEMORY_LIMIT" in proc.stdout, proc.report


GOOD_ENV = """
import torch
x = torch.ones(1000, device="neuron")
assert x.sum().item() == 1000.0
print("COUNT", torch.neuron.device_count())
print("TOTAL", torch.neuron.get_device_properties(0).total_memory)
"""


@pytest.mark.parametrize("env,count,total", [
    ({"NEURON_RT_VISIBLE_CORES": "0"}, 1, None),
    ({"NEURON_RT_MEMORY_LIMIT": "1GiB"}, 1, 1 << 30),
    ({"NEURON_RT_MEMORY_LIMIT": str(512 << 20)}, 1, 512 << 20),
])
def test_good_env_values(run_py, env, count, total):
    proc = run_py(GOOD_ENV, env=env)
    assert proc.returncode == 0, proc.report
    assert f"COUNT {count}" in proc.stdout, proc.report
    if total is not None:
        # the memory limit is the device's memory
        assert f"TOTAL {total}" in proc.stdout, proc.report


OOM = """
import torch
MiB = 1 << 20
try:
    x = torch.empty(512 * MiB, dtype=torch.uint8, device="neuron")
except torch.OutOfMemoryError as e:
    print("OOM", e)
else:
    print("NO OOM")
    raise SystemExit(3)
assert issubclass(torch.OutOfMemoryError, RuntimeError)
stats = torch.neuron.memory_stats()
print("NUM_OOMS", stats["num_ooms"])
# the device keeps working, and memory under the limit can still be had
y = torch.ones(4 * MiB, device="neuron")      # 16 MiB
assert y.sum().item() == 4 * MiB
z = torch.empty(128 * MiB, dtype=torch.uint8, device="neuron")
z.fill_(7)
assert z[-1].item() == 7
print("OK")
"""


def test_out_of_memory(run_py):
    proc = run_py(OOM, env={"NEURON_RT_MEMORY_LIMIT": "256MiB"})
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.report
    oom_line = next(l for l in proc.stdout.splitlines() if l.startswith("OOM"))
    assert re.search(r"\d", oom_line), f"no sizes in the OOM message: {oom_line!r}"
    assert re.search(r"NUM_OOMS [1-9]", proc.stdout), proc.report


def test_device_index_out_of_range():
    count = torch.neuron.device_count()
    bad = max(7, count)
    with pytest.raises(RuntimeError) as ei:
        torch.ones(1, device=f"neuron:{bad}")
    msg = str(ei.value)
    assert str(bad) in msg or str(count) in msg, msg
    # still usable
    assert torch.ones(3, device="neuron").sum().item() == 3


@pytest.mark.parametrize("op", [
    lambda a, b: a + b,
    lambda a, b: b * a,
    lambda a, b: torch.mm(a, b),
    lambda a, b: torch.cat([a, b]),
], ids=["add", "mul", "mm", "cat"])
def test_cpu_and_neuron_tensor_in_one_op(op):
    a = torch.ones(3, 3)
    b = torch.ones(3, 3, device="neuron")
    with pytest.raises(RuntimeError) as ei:
        op(a, b)
    msg = str(ei.value)
    assert "cpu" in msg and "neuron:0" in msg, msg
    assert (b + b).sum().item() == 18


def test_cpu_scalar_tensor_is_allowed():
    # as on CUDA, a 0-dim CPU tensor mixes with device tensors
    b = torch.arange(4.0, device="neuron")
    out = b * torch.tensor(2.0) + torch.tensor(1.0)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), torch.arange(4.0) * 2 + 1)


def _bad_embedding():
    idx = torch.tensor([5], device="neuron")
    weight = torch.randn(3, 2, device="neuron")
    return F.embedding(idx, weight)


@pytest.mark.parametrize("sync", ["synchronize", "cpu", "item"])
def test_async_kernel_error_surfaces_at_sync(sync):
    torch.neuron.synchronize()
    out = _bad_embedding()              # queued: must not raise here
    with pytest.raises(IndexError, match="(?i)embedding.*index out of range in self"):  # the CPU's type and words
        if sync == "synchronize":
            torch.neuron.synchronize()
        elif sync == "cpu":
            out.cpu()
        else:
            out.sum().item()
    # the error was reported once and cleared: the device works again
    torch.neuron.synchronize()
    x = torch.arange(10.0, device="neuron")
    assert (x * 2).sum().item() == 90.0
    torch.neuron.synchronize()


LAUNCH_BLOCKING = """
import torch, torch.nn.functional as F
idx = torch.tensor([5], device="neuron")
weight = torch.randn(3, 2, device="neuron")
torch.neuron.synchronize()
try:
    F.embedding(idx, weight)
except IndexError as e:
    print("RAISED_AT_OP", e)
else:
    print("NOT RAISED AT OP")
    raise SystemExit(3)
torch.neuron.synchronize()        # nothing left pending
assert (torch.arange(10.0, device="neuron") * 2).sum().item() == 90.0
print("OK")
"""


def test_launch_blocking_raises_at_the_op(run_py):
    proc = run_py(LAUNCH_BLOCKING, env={"NEURON_LAUNCH_BLOCKING": "1"})
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.report
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RAISED_AT_OP"))
    assert "embedding" in line.lower(), line


# ---- bad arguments to ops: a clear exception naming the problem, never a crash or a wild write; the
# device keeps working afterwards.  Kernel-side index checks are asynchronous, so each case reads its
# result back (which surfaces a queued kernel error).

def _dev(*shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype, device="neuron")


def _idx(*vals):
    return torch.tensor(vals, device="neuron")


BAD_OPS = {
    "add_shapes": (lambda: _dev(3) + _dev(4), RuntimeError, r"size of tensor a \(3\) must match.*\(4\)"),
    "mm_shapes": (lambda: torch.mm(_dev(2, 3), _dev(4, 5)), RuntimeError, r"2x3.*4x5"),
    "cat_shapes": (lambda: torch.cat([_dev(2, 3), _dev(2, 4)]), RuntimeError, r"(?i)sizes of tensors must match"),
    "bmm_batch": (lambda: torch.bmm(_dev(2, 3, 4), _dev(3, 4, 5)), RuntimeError, r"(?i)batch"),
    "gather_index": (lambda: _dev(4).gather(0, _idx(1, 7)), (RuntimeError, IndexError), r"(?i)index 7 is out of bounds.*size 4"),
    "scatter_index": (lambda: _dev(4).scatter(0, _idx(-9), _dev(1)), (RuntimeError, IndexError), r"(?i)out of bounds"),
    "embedding_index": (lambda: F.embedding(_idx(0, 3), _dev(3, 2)), (RuntimeError, IndexError), r"(?i)embedding.*3"),
    "index_select_index": (lambda: _dev(5, 2).index_select(0, _idx(5)), (RuntimeError, IndexError), r"(?i)out of (bounds|range)"),
    "kthvalue_k": (lambda: _dev(4).kthvalue(5), RuntimeError, r"(?i)kthvalue.*out of range"),
    "bincount_negative": (lambda: torch.bincount(_idx(1, -2)), RuntimeError, r"(?i)non-negative"),
    "dtype_mm": (lambda: torch.mm(_dev(2, 2), _dev(2, 2, dtype=torch.int64)), RuntimeError, r"(?i)dtype|same type|Float.*Long"),
    "dtype_bitwise_float": (lambda: torch.bitwise_and(_dev(2), _dev(2)), (RuntimeError, TypeError), r"(?i)not implemented for 'Float'|bitwise"),
    "dtype_gcd_float": (lambda: torch.gcd(_dev(2), _dev(2)), RuntimeError, r"(?i)not implemented for 'Float'"),
    "negative_size": (lambda: torch.empty(-1, device="neuron"), RuntimeError, r"(?i)negative dimension -1"),
    "overflow_size": (lambda: torch.empty(2**62, device="neuron"), RuntimeError, r"(?i)overflow|too large|size"),
    "overflow_bytes": (lambda: torch.empty(2**61, dtype=torch.float64, device="neuron"), RuntimeError, r"(?i)overflow|too large|size"),
    "multinomial_negative": (lambda: torch.multinomial(torch.tensor([0.5, -1.0], device="neuron"), 1), RuntimeError,
                             r"(?i)multinomial.*(inf|nan|< 0)"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPS))
def test_bad_op_arguments(case):
    fn, exc, pattern = BAD_OPS[case]
    torch.neuron.synchronize()
    with pytest.raises(exc) as ei:
        r = fn()
        (r[0] if isinstance(r, tuple) else r).cpu()   # surfaces an asynchronous kernel error
    msg = str(ei.value)
    assert re.search(pattern, msg), msg
    assert not isinstance(ei.value, torch.OutOfMemoryError), msg
    # the device is still usable, and nothing was written out of bounds
    torch.neuron.synchronize()
    x = torch.arange(10.0, device="neuron")
    assert (x * 2).sum().item() == 90.0
    w = torch.zeros(4, device="neuron")
    w.scatter_(0, torch.tensor([1], device="neuron"), 1.0)
    assert w.cpu().tolist() == [0.0, 1.0, 0.0, 0.0]


# ---- parity with the CPU: the same call raises the same exception type and message ----------------

def _cpu_outcome(fn, device):
    try:
        r = fn(device)
        (r[0] if isinstance(r, tuple) else r).cpu()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e), str(e)
    return None, None


def _self_index_copy(d):
    a = torch.arange(6.0, device=d)
    return a.index_copy_(0, torch.arange(6, device=d), a)


def _self_scatter(d):
    b = torch.arange(6.0, device=d)
    return b.scatter_(0, torch.arange(5, -1, -1, device=d), b)


def _overlap_view_scatter(d):
    b = torch.arange(8.0, device=d)
    return b[:6].scatter_(0, torch.arange(6, device=d), b[2:])


def _self_index_add(d):
    a = torch.arange(6.0, device=d)
    return a.index_add_(0, torch.arange(6, device=d), a, alpha=2)


CPU_PARITY = {
    "index_copy_self_source": _self_index_copy,
    "scatter_self_source": _self_scatter,
    "scatter_overlapping_view": _overlap_view_scatter,
    "index_add_self_source": _self_index_add,
    "bernoulli_p_above_1": lambda d: torch.bernoulli(torch.tensor([0.5, 1.5], device=d)),
    "bernoulli_p_negative": lambda d: torch.zeros(2, device=d).bernoulli_(torch.tensor([0.5, -0.5], device=d)),
    "bernoulli_p_nan": lambda d: torch.bernoulli(torch.tensor([0.5, float("nan")], device=d)),
    "bernoulli_float_p": lambda d: torch.zeros(3, device=d).bernoulli_(1.5),
    "pow_int_negative_scalar": lambda d: torch.tensor([1, 2, 3], device=d) ** -1,
    "pow_int_negative_scalar_inplace": lambda d: torch.tensor([1, 2, 3], device=d).pow_(-2),
    "pow_bool_negative_scalar": lambda d: torch.tensor([True, False], device=d).pow(-1),
    "add_int_float_alpha": lambda d: torch.add(torch.tensor([1, 2], device=d), torch.tensor([1, 2], device=d), alpha=0.5),
    "add_int_scalar_float_alpha": lambda d: torch.tensor([1, 2], device=d).add(3, alpha=0.5),
    "add_inplace_float_alpha": lambda d: torch.tensor([1, 2], device=d).add_(torch.tensor([1, 2], device=d), alpha=1.5),
    "sub_int_float_alpha": lambda d: torch.sub(torch.tensor([1, 2], device=d), torch.tensor([1, 2], device=d), alpha=0.5),
    "rsub_int_float_alpha": lambda d: torch.rsub(torch.tensor([1, 2], device=d), torch.tensor([1, 2], device=d), alpha=0.5),
    "add_float_bool_alpha": lambda d: torch.add(torch.ones(2, device=d), torch.ones(2, device=d), alpha=True),
}


@pytest.mark.parametrize("case", sorted(CPU_PARITY))
def test_bad_input_matches_cpu(case):
    fn = CPU_PARITY[case]
    cpu_type, cpu_msg = _cpu_outcome(fn, "cpu")
    assert cpu_type is not None, "the case must be an error on the CPU"
    torch.neuron.synchronize()
    dev_type, dev_msg = _cpu_outcome(fn, "neuron")
    assert dev_type is cpu_type and dev_msg == cpu_msg, (dev_type, dev_msg, cpu_type, cpu_msg)
    assert (torch.arange(4.0, device="neuron") * 2).sum().item() == 12.0


# valid calls next to the rejected ones: the same values as the CPU
CPU_VALUES = {
    "pow_int_tensor_negative_exponent": lambda d: torch.pow(torch.tensor([1, 2, 3], device=d), torch.tensor([-1, 1, 2], device=d)),
    "pow_int_positive_scalar": lambda d: torch.tensor([1, 2, 3], device=d) ** 2,
    "pow_float_negative_scalar": lambda d: torch.tensor([1.0, 2.0, 4.0], device=d) ** -1,
    "add_int_int_alpha": lambda d: torch.add(torch.tensor([1, 2], device=d), torch.tensor([1, 2], device=d), alpha=3),
    "add_int_float_tensor_float_alpha": lambda d: torch.add(torch.tensor([1, 2], device=d), torch.tensor([1.0, 2.0], device=d), alpha=0.5),
    "add_bool_int_alpha": lambda d: torch.add(torch.tensor([True, False], device=d), torch.tensor([True, True], device=d), alpha=2),
    "scatter_index_copy_of_self": lambda d: (lambda b: b.scatter_(0, torch.arange(5, -1, -1, device=d), b.clone()))(torch.arange(6.0, device=d)),
    "bernoulli_p_edges": lambda d: torch.bernoulli(torch.tensor([0.0, 1.0, 1.0, 0.0], device=d)),
    "clamp_min_nan": lambda d: torch.clamp(torch.tensor([1.0, float("nan"), -2.0, 3.0], device=d), min=float("nan")),
    "clamp_max_nan": lambda d: torch.clamp(torch.tensor([1.0, float("nan"), -2.0, 3.0], device=d), max=float("nan")),
    "clamp_both_one_nan": lambda d: torch.clamp(torch.tensor([1.0, -2.0, 3.0], device=d), min=0.0, max=float("nan")),
    "clamp_nan_input": lambda d: torch.clamp(torch.tensor([1.0, float("nan"), -2.0, 3.0], device=d), min=0.0, max=2.0),
    "clamp_int_nan_bound": lambda d: torch.clamp(torch.tensor([1, 2, 3], device=d), min=float("nan")),
    "clamp_min_op_nan": lambda d: torch.clamp_min(torch.tensor([1.0, -2.0], device=d, dtype=torch.bfloat16), float("nan")),
    "clamp_max_inplace_nan": lambda d: torch.tensor([1.0, -2.0], device=d, dtype=torch.float64).clamp_max_(float("nan")),
    "clamp_tensor_nan_bounds": lambda d: torch.clamp(torch.tensor([1.0, 2.0, -2.0, 3.0], device=d),
                                                     min=torch.tensor([0.0, float("nan"), 0.0, 0.0], device=d),
                                                     max=torch.tensor([float("nan"), 1.0, 1.0, 1.0], device=d)),
}


@pytest.mark.parametrize("case", sorted(CPU_VALUES))
def test_edge_values_match_cpu(case):
    fn = CPU_VALUES[case]
    want = fn("cpu")
    got = fn("neuron").cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
