"""Helpers of the op tests that compare with the CPU within a tolerance (test_index_ops.py, test_shape_ops.py,
test_linalg_ops.py): the dtypes swept, seeded random inputs, and a dtype-aware closeness check."""
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
