"""The out= and in-place contracts (issue 16, defects 5-7), neuron against the CPU.

* out= of a dtype the result cannot take raises as on the CPU (it used to be filled with raw bits,
  or silently truncated);
* out= on the CPU with neuron inputs raises "Expected all tensors to be on the same device" and
  leaves the CPU tensor untouched (it used to be accepted, and written asynchronously);
* a non-empty out= of another shape is resized with ATen's warning;
* an in-place op whose result does not broadcast to self raises (comparisons used to return a
  resized self in new storage).
"""
import re
import warnings

import pytest
import torch

import torchneuron  # noqa: F401

DEV = "neuron"


def _cpu_inputs():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    idx = torch.tensor([0, 2])
    return {
        "a": r(3, 3), "b": r(3, 3), "v": r(3), "a3": r(2, 3, 3), "img": r(1, 2, 4, 4),
        "idx": idx, "src": r(2, 3), "sidx": idx.view(2, 1).expand(2, 3).contiguous(),
    }


# op name -> f(tensors, out): the ops of defect 5 and more, each with an out= argument
OUT_OPS = {
    "mm": lambda t, o: torch.mm(t["a"], t["b"], out=o),
    "bmm": lambda t, o: torch.bmm(t["a3"], t["a3"], out=o),
    "addmm": lambda t, o: torch.addmm(t["a"], t["a"], t["b"], out=o),
    "mv": lambda t, o: torch.mv(t["a"], t["v"], out=o),
    "index_add": lambda t, o: torch.index_add(t["a"], 0, t["idx"], t["src"], out=o),
    "index_copy": lambda t, o: torch.index_copy(t["a"], 0, t["idx"], t["src"], out=o),
    "scatter": lambda t, o: torch.scatter(t["a"], 0, t["sidx"], t["src"], out=o),
    "scatter_add": lambda t, o: torch.scatter_add(t["a"], 0, t["sidx"], t["src"], out=o),
    "gather": lambda t, o: torch.gather(t["a"], 0, t["sidx"], out=o),
    "tril": lambda t, o: torch.tril(t["a"], out=o),
    "triu": lambda t, o: torch.triu(t["a"], out=o),
    "avg_pool2d": lambda t, o: torch._C._nn.avg_pool2d(t["img"], 2, out=o),
    "cat": lambda t, o: torch.cat([t["a"], t["b"]], out=o),
    "stack": lambda t, o: torch.stack([t["a"], t["b"]], out=o),
    "mean": lambda t, o: torch.mean(t["a"], 0, out=o),
    "sum": lambda t, o: torch.sum(t["a"], 0, out=o),
    "add": lambda t, o: torch.add(t["a"], t["b"], out=o),
    "lt": lambda t, o: torch.lt(t["a"], t["b"], out=o),
    "logaddexp": lambda t, o: torch.logaddexp(t["a"], t["b"], out=o),
    "clamp": lambda t, o: torch.clamp(t["a"], -0.5, 0.5, out=o),
    "cumsum": lambda t, o: torch.cumsum(t["a"], 0, out=o),
    "sort": lambda t, o: torch.sort(t["a"], out=(o, torch.empty(0, dtype=torch.long, device=o.device))),
    "topk": lambda t, o: torch.topk(t["a"], 2, out=(o, torch.empty(0, dtype=torch.long, device=o.device))),
    "linalg_cross": lambda t, o: torch.linalg.cross(t["a"], t["b"], out=o),
    "logsumexp": lambda t, o: torch.logsumexp(t["a"], 0, out=o),
    "special_zeta": lambda t, o: torch.special.zeta(t["a"].abs() + 1, t["b"].abs() + 1, out=o),
}


def _on(t, dev):
    return {k: v.to(dev) for k, v in t.items()}


def _run(f, t, out):
    try:
        f(t, out)
        return None
    except Exception as e:
        return e


def _first_line(e):
    return str(e).strip().splitlines()[0]


@pytest.mark.parametrize("name", sorted(OUT_OPS))
@pytest.mark.parametrize("dtype", [torch.long, torch.float64])
def test_out_dtype_as_cpu(name, dtype):
    """A wrong-dtype out= raises exactly when the CPU raises, with its exception type and message;
    when the CPU accepts it (a castable dtype), the values agree."""
    f = OUT_OPS[name]
    t = _cpu_inputs()
    oc = torch.empty(0, dtype=dtype)
    od = torch.empty(0, dtype=dtype, device=DEV)
    ec, ed = _run(f, t, oc), _run(f, _on(t, DEV), od)
    torch.neuron.synchronize()
    if ec is None:
        assert ed is None, f"{name}: neuron raised where the CPU did not: {ed}"
        torch.testing.assert_close(od.cpu(), oc, equal_nan=True)
    else:
        assert ed is not None, f"{name}: CPU raised {ec!r}, neuron accepted out= {dtype} and gave {od.cpu()}"
        assert type(ed) is type(ec)
        assert _first_line(ed) == _first_line(ec)


@pytest.mark.parametrize("name", sorted(OUT_OPS))
def test_out_on_cpu_with_neuron_inputs(name):
    """Every op refuses a CPU out= for neuron inputs, as PyTorch's device check does, and leaves it
    untouched (tril/triu/index_add/index_copy used to write it later, asynchronously)."""
    f = OUT_OPS[name]
    t = _cpu_inputs()
    ref = torch.empty(0)
    f(t, ref)  # the CPU result's shape and dtype
    out = torch.full(ref.shape, 7.0, dtype=ref.dtype)
    # (mv reaches addmv.out(out, mat, vec, out=out) through its composite, so the CPU tensor comes first)
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, but found at least "
                                           r"two devices, (neuron:0 and cpu|cpu and neuron:0)!"):
        f(_on(t, DEV), out)
    torch.neuron.synchronize()
    assert torch.equal(out, torch.full(ref.shape, 7.0, dtype=ref.dtype))


@pytest.mark.parametrize("name", ["mm", "tril", "index_add", "scatter", "sum", "add", "cat", "mean", "avg_pool2d",
                                  "linalg_cross", "special_zeta"])
def test_out_resize_warns_as_cpu(name):
    """A non-empty out= of another shape is resized with ATen's warning, and holds the CPU's values."""
    f = OUT_OPS[name]
    t = _cpu_inputs()
    res = {}
    for dev, tt in (("cpu", t), (DEV, _on(t, DEV))):
        out = torch.zeros(11, device=dev)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            f(tt, out)
        res[dev] = (out.cpu(), any("was resized" in str(x.message) for x in w))
    torch.testing.assert_close(res[DEV][0], res["cpu"][0])
    assert res[DEV][1] == res["cpu"][1] is True


def test_mm_out_wrong_dtype_not_raw_bits():
    """The defect as reported: mm into an int64 out returned bit patterns like 5699383418474804715."""
    a = torch.randn(4, 4, device=DEV)
    out = torch.zeros(4, 4, dtype=torch.long, device=DEV)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float, but got long int instead"):
        torch.mm(a, a, out=out)
    assert torch.equal(out.cpu(), torch.zeros(4, 4, dtype=torch.long))


def test_cpu_out_not_written_later():
    """tril with a CPU out= behind a busy queue: refused at once, never written afterwards."""
    x = torch.randn(256, 256, device=DEV)
    for _ in range(20):
        x = x @ x.t() * 1e-3  # keep the queue busy
        out = torch.zeros(256, 256)
        with pytest.raises(RuntimeError, match="same device"):
            torch.tril(x, out=out)
        torch.neuron.synchronize()
        assert not out.any()


def test_mixed_devices_every_entry():
    """The common entry: a native op and a CPU-fallback op both refuse a CPU non-scalar argument,
    and both accept a CPU zero-dim tensor where TensorIterator does."""
    a = torch.randn(3, 3, device=DEV)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*neuron:0 and cpu!"):
        torch.mm(a, torch.randn(3, 3))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*neuron:0 and cpu!"):
        torch.special.zeta(a.abs() + 1, torch.rand(3, 3) + 1)
    s = torch.tensor(2.0)
    torch.testing.assert_close((a * s).cpu(), a.cpu() * 2)
    torch.testing.assert_close(torch.where(a > 0, a, s).cpu(), torch.where(a.cpu() > 0, a.cpu(), s))


INPLACE = ["lt_", "eq_", "ne_", "le_", "gt_", "ge_", "logical_and_", "logical_or_", "logical_xor_", "add_", "mul_",
           "sub_", "div_", "maximum", "atan2_", "logit_", "clamp_"]


def _inplace_call(name, x, y):
    if name == "maximum":  # not in place: the control (broadcasting allowed)
        return torch.maximum(x, y)
    if name == "logit_":
        return x.logit_(0.1)
    if name == "clamp_":
        return x.clamp_(min=y)
    return getattr(x, name)(y)


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_does_not_broadcast_self(name):
    """self of shape [5, 1] with another operand [5, 5]: the CPU refuses to resize self
    ("output with shape [5, 1] doesn't match the broadcast shape [5, 5]"); so does neuron, and self
    keeps its storage and shape."""
    g = torch.Generator().manual_seed(1)
    xc, yc = torch.rand(5, 1, generator=g), torch.rand(5, 5, generator=g)
    xd, yd = xc.to(DEV), yc.to(DEV)
    ptr = xd.data_ptr()
    try:
        rc, ec = _inplace_call(name, xc, yc), None
    except Exception as e:
        rc, ec = None, e
    try:
        rd, ed = _inplace_call(name, xd, yd), None
    except Exception as e:
        rd, ed = None, e
    torch.neuron.synchronize()
    if ec is None:
        assert ed is None, ed
        torch.testing.assert_close(rd.cpu(), rc)
    else:
        assert ed is not None, f"{name}: CPU raised {ec!r}, neuron returned a {list(rd.shape)} tensor"
        assert type(ed) is type(ec)
        assert _first_line(ed) == _first_line(ec)
        assert re.search(r"output with shape \[5, 1\] doesn't match the broadcast shape \[5, 5\]", str(ed))
    assert xd.shape == (5, 1) and xd.data_ptr() == ptr


@pytest.mark.parametrize("name", ["lt_", "eq_", "logical_and_", "add_"])
def test_inplace_same_shape_and_broadcast_other(name):
    """The legal in-place cases keep working: other broadcast to self, self's dtype kept."""
    g = torch.Generator().manual_seed(2)
    xc, yc = torch.rand(5, 5, generator=g), torch.rand(5, 1, generator=g)
    xd = xc.to(DEV)
    rc = getattr(xc, name)(yc)
    rd = getattr(xd, name)(yc.to(DEV))
    assert rd is xd
    torch.testing.assert_close(xd.cpu(), rc)


def test_inplace_result_not_castable_to_self():
    """int self, float result: the CPU's cast error, not a truncation."""
    xc = torch.arange(6).view(2, 3)
    with pytest.raises(RuntimeError) as ec:
        xc.add_(torch.rand(2, 3))
    xd = xc.to(DEV)
    with pytest.raises(RuntimeError) as ed:
        xd.add_(torch.rand(2, 3, device=DEV))
    assert _first_line(ed.value) == _first_line(ec.value)


@pytest.mark.parametrize("op", ["native_batch_norm", "_native_batch_norm_legit"])
def test_batch_norm_out_eval_leaves_saved_stats(op):
    """In eval mode the CPU kernel leaves save_mean / save_invstd as given (it resized them to [0] here)."""
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    res = []
    for dev in ("cpu", "neuron"):
        out, sm, si = torch.empty(0, device=dev), torch.full((7,), 3.0, device=dev), torch.full((2,), 4.0, device=dev)
        f = getattr(torch.ops.aten, op).out
        f(*(t.to(dev) for t in (x, w, b, rm, rv)), False, 0.1, 1e-5, out=out, save_mean=sm, save_invstd=si)
        res.append((out.cpu(), sm.cpu(), si.cpu()))
    for got, ref in zip(res[1], res[0]):
        assert got.shape == ref.shape
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_nansum_integer_out_as_sum(dtype):
    """Integers have no NaN: nansum.out is sum.out, whose dtype comes from the result (a bool out too)."""
    x = torch.tensor([[0, 1, 2], [3, 0, 5]]).to(dtype)
    for odt in (torch.bool, torch.int64, torch.float32):
        ref = torch.nansum(x, 1, out=torch.empty(2, dtype=odt))
        got = torch.nansum(x.to("neuron"), 1, out=torch.empty(2, dtype=odt, device="neuron"))
        assert got.dtype == ref.dtype
        torch.testing.assert_close(got.cpu(), ref)
