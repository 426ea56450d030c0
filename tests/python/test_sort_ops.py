"""Scans aside, the sort family of csrc/torch/ops_sort.cpp (select.c): selection (topk, kthvalue,
median/nanmedian, mode), unique*, search (searchsorted, bucketize, isin) and histograms (bincount,
histc): parity with the CPU over dtypes (integers, f64, bf16), non-contiguous inputs and zero-size,
and no CPU fallback."""
import pytest
import torch

from exact_parity import DTYPES, FLOATS, _dev, _make, _same  # noqa: F401


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("noncontig", [False, True])
def test_selection_matches_cpu(dtype, noncontig, no_fallback):
    x = _make((6, 9), dtype, nan=True, noncontig=noncontig)
    xd = _dev(x)
    for dim in (0, 1, -1):
        for keep in (False, True):
            for name, fn in (("median", lambda t: t.median(dim, keep)), ("nanmedian", lambda t: t.nanmedian(dim, keep)),
                             ("kthvalue", lambda t: t.kthvalue(3, dim, keep)), ("mode", lambda t: t.mode(dim, keep))):
                got, want = fn(xd), fn(x)  # (mode with NaN too: libstdc++'s sort order is reproduced)
                _same(got.values, want.values)
                _same(got.indices, want.indices)
        v, i = xd.topk(3, dim)
        cv, ci = x.topk(3, dim)
        _same(v, cv)  # values; indices may differ among equal values: check what they select
        _same(x.gather(dim, i.cpu()), cv)
    _same(xd.median(), x.median())
    _same(xd.nanmedian(), x.nanmedian())


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_selection_zero_size_and_scalars(dtype, no_fallback):
    e = torch.empty(0, 4, dtype=dtype)
    _same(_dev(e).topk(0, 0).values, e.topk(0, 0).values)
    _same(_dev(e).median(1).values, e.median(1).values)
    s = torch.tensor(3, dtype=dtype)
    _same(_dev(s).kthvalue(1).values, s.kthvalue(1).values)
    _same(_dev(s).mode().indices, s.mode().indices)
    with pytest.raises(IndexError, match="non-zero size"):
        _dev(e).median(0)
    long = _make((2, 3000), dtype, nan=dtype.is_floating_point)  # lines that need a workspace
    for fn in (lambda t: t.kthvalue(1234, 1), lambda t: t.median(1), lambda t: t.nanmedian(1)):
        _same(fn(_dev(long)).values, fn(long).values)
        _same(fn(_dev(long)).indices, fn(long).indices)
    long = _make((2, 3000), dtype, nan=dtype.is_floating_point)  # mode: aten's std::sort order, NaN included
    _same(_dev(long).mode(1).values, long.mode(1).values)
    _same(_dev(long).mode(1).indices, long.mode(1).indices)


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_unique_matches_cpu(dtype, no_fallback):
    # (aten std::sorts with <: where NaN lands among the values is not defined; a short line is
    # insertion-sorted, which puts each NaN last, as here)
    if dtype.is_floating_point:
        v = torch.tensor([3.0, float("nan"), 1.0, 1.0, float("nan"), 2.0], dtype=dtype)
        for got, want in zip(torch.unique(_dev(v), return_inverse=True, return_counts=True),
                             torch.unique(v, return_inverse=True, return_counts=True)):
            _same(got, want)
    x = _make((5, 8), dtype, -2, 3) if dtype != torch.bool else torch.rand(5, 8) > 0.5
    xd = _dev(x)
    for inv in (False, True):
        for cnt in (False, True):
            for got, want in zip(torch.unique(xd, return_inverse=inv, return_counts=cnt),
                                 torch.unique(x, return_inverse=inv, return_counts=cnt)):
                _same(got, want)
            for dim in (0, 1):  # (aten std::sorts slices lexicographically: NaN has no defined place)
                xs = x.nan_to_num(0.25) if dtype.is_floating_point else x.clone()
                xs[1] = xs[3]  # equal slices along dim 0
                for got, want in zip(torch.unique(_dev(xs), dim=dim, return_inverse=inv, return_counts=cnt),
                                     torch.unique(xs, dim=dim, return_inverse=inv, return_counts=cnt)):
                    _same(got, want)
            for dim in (None, 0, 1):
                for got, want in zip(torch.unique_consecutive(xd, return_inverse=inv, return_counts=cnt, dim=dim),
                                     torch.unique_consecutive(x, return_inverse=inv, return_counts=cnt, dim=dim)):
                    _same(got, want)
    e = torch.empty(0, dtype=dtype)
    for got, want in zip(torch.unique(_dev(e), return_inverse=True, return_counts=True),
                         torch.unique(e, return_inverse=True, return_counts=True)):
        _same(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32])
def test_search_and_counts_match_cpu(dtype, no_fallback):
    bd = torch.sort(_make((3, 7), dtype), dim=1).values
    x = _make((3, 10), dtype, -7, 8, seed=1)
    for right in (False, True):
        for out_int32 in (False, True):
            _same(torch.searchsorted(_dev(bd), _dev(x), right=right, out_int32=out_int32),
                  torch.searchsorted(bd, x, right=right, out_int32=out_int32))
            _same(torch.bucketize(_dev(x), _dev(bd[0]), right=right, out_int32=out_int32),
                  torch.bucketize(x, bd[0], right=right, out_int32=out_int32))
    perm = torch.stack([torch.randperm(7, generator=torch.Generator().manual_seed(i)) for i in range(3)])
    unsorted = bd.gather(1, perm)
    sorter = perm.argsort(1)
    _same(torch.searchsorted(_dev(unsorted), _dev(x), sorter=_dev(sorter), side="right"),
          torch.searchsorted(unsorted, x, sorter=sorter, side="right"))
    _same(torch.searchsorted(_dev(bd[0]), _dev(x.t()[1:].t())), torch.searchsorted(bd[0], x.t()[1:].t()))  # non-contiguous
    for invert in (False, True):
        _same(torch.isin(_dev(x), _dev(bd[1]), invert=invert), torch.isin(x, bd[1], invert=invert))
    if not dtype.is_floating_point:
        c = x.abs()
        w = torch.rand(c.numel())
        _same(torch.bincount(_dev(c.view(-1)), minlength=12), torch.bincount(c.view(-1), minlength=12))
        torch.testing.assert_close(torch.bincount(_dev(c.view(-1)), _dev(w)).cpu(), torch.bincount(c.view(-1), w))
        _same(torch.bincount(_dev(torch.empty(0, dtype=dtype)), minlength=3), torch.bincount(torch.empty(0, dtype=dtype), minlength=3))
    else:
        for lo, hi in ((0, 0), (-2, 2), (-1.3, 0.7)):
            _same(torch.histc(_dev(x), bins=5, min=lo, max=hi), torch.histc(x, bins=5, min=lo, max=hi))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_histc_of_integers(dtype, no_fallback):
    # issue 19: Transformers' MoE routing counts expert ids with torch.histc on an int tensor, as CUDA allows
    # (counts in the input's dtype, bounds truncated to it).  The CPU has no integer kernel: the expectation is
    # the CPU's float64 histogram in the input's dtype.
    x = _make((257,), dtype, 0, 8)
    for bins, lo, hi in ((8, 0, 7), (8, 0, 8), (5, 0, 0), (3, 2, 5), (4, 1.7, 6.2)):
        want = torch.histc(x.double(), bins=bins, min=int(lo), max=int(hi)).to(dtype)
        _same(torch.histc(_dev(x), bins=bins, min=lo, max=hi), want)
    out = torch.empty(8, dtype=dtype, device="neuron")
    torch.histc(_dev(x), bins=8, min=0, max=7, out=out)
    _same(out, torch.histc(x.double(), bins=8, min=0, max=7).to(dtype))

