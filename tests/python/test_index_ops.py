"""Native indexing, scan, sort and shape ops (csrc/torch/ops_index.cpp, ops_sort.cpp,
ops_shape.cpp): bad indices are clean errors (never wild writes), and cases the OpInfo samples do
not reach (long sorts that need a workspace, duplicate indices, masks, advanced indexing with CPU
indices, repeat_interleave, nonzero_static) match the CPU and run natively."""

import pytest
import torch

from close_parity import FLOATS, INTS, _close, _make  # noqa: F401


def _dev(t):
    return t.to("neuron")


BAD_INDEX_CASES = {
    "gather": lambda x, i: torch.gather(x, 0, i.view(1, 1)),
    "scatter": lambda x, i: x.clone().scatter_(0, i.view(1, 1), 1.0),
    "scatter_add": lambda x, i: x.clone().scatter_add_(0, i.view(1, 1), torch.ones_like(x[:1, :1])),
    "index_select": lambda x, i: torch.index_select(x, 0, i),
    "index_add": lambda x, i: x.clone().index_add_(0, i, torch.ones_like(x[:1])),
    "take": lambda x, i: torch.take(x, i),
    "put_": lambda x, i: x.clone().put_(i, torch.ones_like(x.view(-1)[:1])),
    "advanced index": lambda x, i: x[i],
    "index_put_": lambda x, i: x.clone().index_put_((i,), torch.ones_like(x[:1])),
}


BAD_INDEX_CASES.update({
    "index_copy": lambda x, i: x.clone().index_copy_(0, i, torch.ones_like(x[:1])),
    "index_fill": lambda x, i: x.clone().index_fill_(0, i, 1.0),
    "embedding": lambda x, i: torch.nn.functional.embedding(i, x),
})


def _cpu_error(fn, x, i):
    try:
        fn(x, i)
    except Exception as e:  # noqa: BLE001 - the CPU's own error is the expectation
        return e
    raise AssertionError("the CPU accepted the bad index")


@pytest.mark.parametrize("name", sorted(BAD_INDEX_CASES))
def test_out_of_range_index_is_an_error(name):
    """The kernel's asynchronous error has the CPU's exception type (IndexError for index_select, embedding,
    take, advanced indexing...; RuntimeError for gather/scatter) and contains the CPU's message."""
    fn = BAD_INDEX_CASES[name]
    x = torch.arange(12.0).view(3, 4)
    xd = _dev(x)
    bad = torch.tensor([100])
    want = _cpu_error(fn, x, bad)
    core = str(want).split("\n")[0].split("(): ")[-1].rstrip(".")
    with pytest.raises(Exception) as got:
        fn(xd, _dev(bad)).cpu()
    assert type(got.value) is type(want), (type(got.value), got.value, type(want), want)
    assert core in str(got.value), (core, str(got.value))
    torch.neuron.synchronize()  # the error is consumed: the device is usable again
    assert torch.equal(xd.cpu(), x), "a failed op wrote into its input"
    good = torch.tensor([2])
    torch.testing.assert_close(fn(xd, _dev(good)).cpu(), fn(x, good))


def test_ops_are_native(neuron_ops):
    x = torch.randn(6, 7)
    xd = _dev(x)
    i = torch.tensor([[0, 5, 1]])
    for fn in (lambda t, d: torch.gather(t, 1, d(i)), lambda t, d: t.index_select(1, d(i[0])),
               lambda t, d: t.cumsum(0), lambda t, d: t.sort(dim=1, stable=True), lambda t, d: t.tril(-1),
               lambda t, d: t.flip(0), lambda t, d: t.roll(3), lambda t, d: torch.nonzero(t > 0),
               lambda t, d: t.masked_fill(t < 0, 0.5), lambda t, d: t[d(i[0]), 1:]):
        torch.testing.assert_close(fn(xd, _dev), fn(x, lambda v: v), check_device=False)
    assert not neuron_ops.get_fallback_ops(), neuron_ops.get_fallback_ops()


@pytest.mark.parametrize("n", [1, 17, 1024, 5000])
def test_long_stable_sort_matches_cpu(n):
    x = torch.randint(0, 50, (3, n)).to(torch.float32)  # many ties
    x[0, :: max(1, n // 7)] = float("nan")
    for desc in (False, True):
        v, i = torch.sort(_dev(x), dim=1, descending=desc, stable=True)
        cv, ci = torch.sort(x, dim=1, descending=desc, stable=True)
        assert torch.equal(v.cpu().nan_to_num(-1), cv.nan_to_num(-1))
        assert torch.equal(i.cpu(), ci)


def test_index_put_accumulate_duplicates():
    x = torch.zeros(5, 3)
    idx = torch.tensor([0, 3, 0, 0, 4])
    vals = torch.arange(15.0).view(5, 3)
    want = x.clone().index_put_((idx,), vals, accumulate=True)
    got = _dev(x).index_put_((_dev(idx),), _dev(vals), accumulate=True)
    torch.testing.assert_close(got.cpu(), want)


def test_advanced_indexing_with_cpu_indices_and_masks():
    x = torch.randn(4, 5, 6)
    xd = _dev(x)
    rows = torch.tensor([3, 0, -1])
    cols = torch.tensor([[1], [5]])
    torch.testing.assert_close(xd[rows, :, cols].cpu(), x[rows, :, cols])  # CPU indices, non-adjacent
    mask = x[:, :, 0] > 0
    torch.testing.assert_close(xd[_dev(mask)].cpu(), x[mask])
    y, yd = x.clone(), xd.clone()
    y[mask] = -1.0
    yd[_dev(mask)] = -1.0
    torch.testing.assert_close(yd.cpu(), y)


def test_scatter_reduce_include_self_false():
    x = torch.randn(3, 5)
    idx = torch.tensor([[0, 1, 0, 4, 4], [2, 2, 2, 2, 2], [1, 0, 3, 1, 0]])
    src = torch.randn(3, 5)
    for red in ("sum", "prod", "mean", "amax", "amin"):
        want = x.scatter_reduce(1, idx, src, red, include_self=False)
        got = _dev(x).scatter_reduce(1, _dev(idx), _dev(src), red, include_self=False)
        torch.testing.assert_close(got.cpu(), want)

# ---- repeat_interleave and nonzero_static (small.c)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_repeat_interleave(dtype, no_fallback):
    for n in (0, 1, 5, 33):
        r = torch.randint(0, 4, (n,), generator=torch.Generator().manual_seed(n)).to(dtype)
        want = torch.repeat_interleave(r)
        _close(torch.repeat_interleave(r.to("neuron")), want)
        _close(torch.repeat_interleave(r.to("neuron"), output_size=int(r.sum())), want)
        if n > 1:  # non-contiguous repeats
            r2 = torch.stack([r, r + 1], 1)
            _close(torch.repeat_interleave(r2.to("neuron")[:, 1]), torch.repeat_interleave(r2[:, 1]))


def test_repeat_interleave_self(no_fallback):
    x = torch.randn(4, 3)
    r = torch.tensor([1, 0, 3, 2])
    _close(torch.repeat_interleave(x.to("neuron"), r.to("neuron"), dim=0), torch.repeat_interleave(x, r, dim=0))
    _close(torch.repeat_interleave(x.to("neuron"), r[:3].to("neuron"), dim=1, output_size=4),
           torch.repeat_interleave(x, r[:3], dim=1, output_size=4))


def test_repeat_interleave_bad():
    with pytest.raises(RuntimeError, match="can not be negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device="neuron"))
    with pytest.raises(RuntimeError, match="1D"):
        torch.repeat_interleave(torch.ones(2, 2, dtype=torch.long, device="neuron"))
    with pytest.raises(RuntimeError, match="does not match the sum"):
        torch.repeat_interleave(torch.tensor([1, 2], device="neuron"), output_size=5)
        torch.neuron.synchronize()


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_nonzero_static(dtype, no_fallback):
    x = torch.randint(-1, 2, (5, 6), generator=torch.Generator().manual_seed(3)).to(dtype)
    for size in (0, 3, 12, 40):
        for fill in (-1, 7):
            _close(torch.nonzero_static(x.to("neuron"), size=size, fill_value=fill),
                   torch.nonzero_static(x, size=size, fill_value=fill))
            xt = x.t()
            _close(torch.nonzero_static(x.to("neuron").t(), size=size, fill_value=fill),
                   torch.nonzero_static(xt, size=size, fill_value=fill))
    _close(torch.nonzero_static(torch.ones(0, 3, dtype=dtype, device="neuron"), size=2),
           torch.nonzero_static(torch.ones(0, 3, dtype=dtype), size=2))
    _close(torch.nonzero_static(torch.ones((), dtype=dtype, device="neuron"), size=2),
           torch.nonzero_static(torch.ones((), dtype=dtype), size=2))


def test_exact_same_ops_refuse_cpu_scalars():
    """Ops whose CUDA wrappers check ExactSame (native_functions.yaml) refuse a zero-dim CPU tensor as CUDA
    does; index_select read a CPU index tensor's memory as if it were the device's (index 93869001324033).
    TensorIterator ops (NoCheck) still take it as a scalar."""
    x = torch.randn(3, 4)
    xd = _dev(x)
    same = "Expected all tensors to be on the same device"
    for fn in (lambda: xd.index_select(0, torch.tensor(1)),
               lambda: xd.gather(0, torch.tensor(1)),
               lambda: torch.addmm(torch.tensor(1.0), xd, _dev(torch.randn(4, 2))),
               lambda: torch.mm(xd, torch.tensor(1.0)),
               lambda: torch.nn.functional.embedding(torch.tensor(1), xd)):
        with pytest.raises(RuntimeError, match=same):
            fn()
    torch.testing.assert_close((xd + torch.tensor(2.0)).cpu(), x + 2)
    torch.testing.assert_close(xd.masked_fill(_dev(x > 0), torch.tensor(5.0)).cpu(), x.masked_fill(x > 0, 5.0))
    torch.testing.assert_close(torch.where(_dev(x > 0), xd, torch.tensor(0.0)).cpu(), torch.where(x > 0, x, 0.0))


@pytest.mark.parametrize("fn", ["amax", "amin", "argmax", "argmin", "max", "min"])
def test_empty_reduction_dim_is_an_index_error(fn):
    e = torch.empty(0, 3)
    with pytest.raises(IndexError) as cpu:
        getattr(e, fn)(0)
    with pytest.raises(IndexError) as dev:
        getattr(_dev(e), fn)(0)
    assert str(cpu.value).split("\n")[0] in str(dev.value)


@pytest.mark.parametrize("fn", [lambda t: t.argmax(), lambda t: t.argmin(0), lambda t: t.topk(1)])
def test_bool_selection_is_refused_as_on_the_cpu(fn):
    b = torch.tensor([True, False, True])
    with pytest.raises(RuntimeError) as cpu:
        fn(b)
    with pytest.raises(RuntimeError) as dev:
        fn(_dev(b))
    assert str(cpu.value).split("\n")[0] in str(dev.value)


def test_gather_complex(device):
    """gather of complex64/complex128 moves the (re, im) pairs (TorchTitan's rotary cache with positions
    gathers a complex tensor); broadcast-expanded inputs and indices as the rotary code builds them."""
    g = torch.Generator().manual_seed(4)
    for dt in (torch.complex64, torch.complex128):
        x = torch.randn(3, 5, dtype=dt, generator=g)
        i = torch.randint(0, 5, (3, 4), generator=g)
        assert torch.equal(torch.gather(x.to(device), 1, i.to(device)).cpu(), torch.gather(x, 1, i))
        c = torch.randn(6, 4, dtype=dt, generator=g)[None, :, None, :].expand(2, -1, -1, -1)
        pos = torch.randint(0, 6, (2, 3), generator=g).view(2, 3, 1, 1).expand(2, 3, 1, 4)
        assert torch.equal(torch.gather(c.to(device), 1, pos.to(device)).cpu(), torch.gather(c, 1, pos))
