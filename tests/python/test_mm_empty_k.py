"""mm/addmm/baddbmm with an empty inner dimension (K == 0): out = beta * input, for every dtype."""
import pytest
import torch

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64, torch.int16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("beta", [0, 1, 2, 3])
def test_addmm_k0(dtype, beta):
    c = torch.arange(12, dtype=dtype).reshape(3, 4)
    a = torch.ones(3, 0, dtype=dtype)
    b = torch.ones(0, 4, dtype=dtype)
    ref = torch.addmm(c, a, b, beta=beta)
    got = torch.addmm(c.to("neuron"), a.to("neuron"), b.to("neuron"), beta=beta)
    assert got.dtype == ref.dtype
    torch.testing.assert_close(got.cpu(), ref)


@pytest.mark.parametrize("dtype", DTYPES)
def test_baddbmm_k0(dtype):
    c = torch.arange(24, dtype=dtype).reshape(2, 3, 4)
    a = torch.ones(2, 3, 0, dtype=dtype)
    b = torch.ones(2, 0, 4, dtype=dtype)
    ref = torch.baddbmm(c, a, b, beta=2)
    got = torch.baddbmm(c.to("neuron"), a.to("neuron"), b.to("neuron"), beta=2)
    torch.testing.assert_close(got.cpu(), ref)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm_k0_is_zero(dtype):
    a = torch.ones(3, 0, dtype=dtype)
    b = torch.ones(0, 5, dtype=dtype)
    got = torch.mm(a.to("neuron"), b.to("neuron"))
    torch.testing.assert_close(got.cpu(), torch.mm(a, b))
