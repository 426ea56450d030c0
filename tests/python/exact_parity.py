"""Helpers of the exact-parity op tests (test_sort_ops.py, test_special_ops.py): the dtypes swept, seeded
inputs of small integers (exact in every dtype), optionally with NaN or non-contiguous, and an exact
comparison with the CPU that treats NaN as equal to NaN."""
import torch

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8]
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _dev(t):
    return t.to("neuron")


def _make(shape, dtype, lo=-5, hi=6, nan=False, noncontig=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    if noncontig:  # same values, transposed storage
        return _make(tuple(reversed(shape)), dtype, lo, hi, nan, False, seed).t() if len(shape) == 2 else \
            _make(shape + (2,), dtype, lo, hi, nan, False, seed)[..., 0]
    x = torch.randint(lo, hi, shape, generator=g)
    if dtype.is_floating_point:
        x = x.to(dtype) * 0.5
        if nan and x.numel():
            x.view(-1)[:: 5] = float("nan")
    else:
        x = (x.abs() if dtype == torch.uint8 else x).to(dtype)
    return x


def _same(a, b):
    a = a.cpu()
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    if a.is_floating_point():
        assert torch.equal(torch.isnan(a), torch.isnan(b)), (a, b)
        a, b = a.nan_to_num(0.0), b.nan_to_num(0.0)
    assert torch.equal(a, b), (a, b)
