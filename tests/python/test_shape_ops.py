"""Shape ops and factories of csrc/torch/ops_shape.cpp: tril_indices / triu_indices (small.c) against
the CPU, and their argument errors."""

import pytest
import torch

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def _make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)
    return torch.randint(0 if dtype == torch.uint8 else -9, 10, shape, generator=g).to(dtype)


def _close(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype in (torch.bfloat16, torch.float16):
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)
    else:
        torch.testing.assert_close(got, want, atol=1e-12 if want.dtype == torch.float64 else 1e-5, rtol=1e-6)



@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
def test_tri_indices(fn, no_fallback):
    for row in (0, 1, 3, 7):
        for col in (0, 1, 4, 9):
            for off in (-10, -3, -1, 0, 1, 2, 10):
                for dtype in (torch.int64, torch.int32):
                    got = fn(row, col, off, dtype=dtype, device="neuron")
                    want = fn(row, col, off, dtype=dtype)
                    assert got.device.type == "neuron"
                    assert torch.equal(got.cpu(), want), (row, col, off, got, want)


def test_tri_indices_bad():
    with pytest.raises(RuntimeError, match="row must be non-negative"):
        torch.tril_indices(-1, 3, device="neuron")
    with pytest.raises(RuntimeError, match="int32 and int64"):
        torch.triu_indices(3, 3, dtype=torch.float32, device="neuron")
