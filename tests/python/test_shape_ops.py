"""Shape ops and factories of csrc/torch/ops_shape.cpp: tril_indices / triu_indices (small.c) against
the CPU, and their argument errors."""

import pytest
import torch

from close_parity import FLOATS, INTS, _close, _make  # noqa: F401


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
