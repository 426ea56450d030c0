"""torch._int_mm on neuron (int8 or uint8 self x int8 mat2 -> int32) against the CPU: exact results over
edge shapes (not multiples of the AMX tile: 16 rows / columns, 64 k), transposed and sliced operands,
K = 0 and empty outputs, the out= variant, and the CPU's errors (type and words).  Runs natively (no CPU
fallback) at every kernel level (the AMX tiles at amx, the row loop elsewhere).

The values are compared with the int32 matmul of the same operands (exact, wrapping as aten's int32 mm):
torch 2.13's CPU _int_mm returns uninitialized memory for M == 1 or K == 1 (1 x 5 @ 5 x 7, 64 x 1 @ 1 x 48:
garbage, every layout), so its values are compared only where M, K > 1; it is the oracle of the errors."""
import pytest
import torch

SHAPES = [(16, 16, 64), (17, 33, 65), (1, 7, 5), (5, 1, 300), (64, 48, 1), (100, 129, 1031), (257, 40, 96), (32, 768, 768)]


def _rand(shape, dtype, gen):
    lo, hi = (0, 256) if dtype == torch.uint8 else (-128, 128)
    return torch.randint(lo, hi, shape, dtype=dtype, generator=gen)


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("adtype", [torch.int8, torch.uint8])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_int_mm_matches_cpu(m, n, k, adtype, layout, no_fallback):
    gen = torch.Generator().manual_seed(m * 1000 + n + k)
    if layout == "transposed":
        a = _rand((k, m), adtype, gen).t()
        b = _rand((n, k), torch.int8, gen).t()
    elif layout == "sliced":
        a = _rand((m, k + 3), adtype, gen)[:, 1:k + 1]
        b = _rand((k, n + 5), torch.int8, gen)[:, 2:n + 2]
    else:
        a = _rand((m, k), adtype, gen)
        b = _rand((k, n), torch.int8, gen)
    ref = a.to(torch.int32) @ b.to(torch.int32)
    got = torch._int_mm(a.to("neuron"), b.to("neuron"))
    assert got.dtype == torch.int32 and got.device.type == "neuron" and got.shape == (m, n)
    assert torch.equal(got.cpu(), ref)
    if m > 1 and k > 1:
        assert torch.equal(got.cpu(), torch._int_mm(a, b))


def test_int_mm_extremes(no_fallback):
    # -128 * -128 summed over a long K: the int32 sums of the CPU (no saturation, no overflow at this size)
    a = torch.full((16, 4096), -128, dtype=torch.int8)
    b = torch.full((4096, 16), -128, dtype=torch.int8)
    assert torch.equal(torch._int_mm(a.to("neuron"), b.to("neuron")).cpu(), torch._int_mm(a, b))
    u = torch.full((16, 4096), 255, dtype=torch.uint8)
    assert torch.equal(torch._int_mm(u.to("neuron"), b.to("neuron")).cpu(), torch._int_mm(u, b))


def test_int_mm_out_and_empty(no_fallback):
    gen = torch.Generator().manual_seed(0)
    a, b = _rand((33, 70), torch.int8, gen), _rand((70, 20), torch.int8, gen)
    out = torch.full((33, 20), 7, dtype=torch.int32, device="neuron")
    r = torch._int_mm(a.to("neuron"), b.to("neuron"), out=out)
    assert r.data_ptr() == out.data_ptr()
    assert torch.equal(out.cpu(), torch._int_mm(a, b))
    # K == 0: zeros; no rows: an empty result
    z = torch._int_mm(a[:, :0].to("neuron"), b[:0].to("neuron"))
    assert torch.equal(z.cpu(), torch._int_mm(a[:, :0], b[:0]))
    e = torch._int_mm(a[:0].to("neuron"), b.to("neuron"))
    assert e.shape == (0, 20) and e.dtype == torch.int32


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type and words are compared
        return type(e), str(e).split("\n")[0]
    return None


@pytest.mark.parametrize("case", ["self_float", "mat2_float", "mat2_uint8", "self_1d", "self_3d", "mismatch",
                                  "out_float", "out_rows", "out_cols", "out_3d", "out_strided"])
def test_int_mm_errors_match_cpu(case):
    a = torch.randint(-5, 5, (4, 8), dtype=torch.int8)
    b = torch.randint(-5, 5, (8, 3), dtype=torch.int8)
    out = None
    if case == "self_float":
        a = a.float()
    elif case == "mat2_float":
        b = b.float()
    elif case == "mat2_uint8":
        b = b.to(torch.uint8)
    elif case == "self_1d":
        a = a[0]
    elif case == "self_3d":
        a = a.unsqueeze(2)
    elif case == "mismatch":
        b = b[:4]
    elif case == "out_float":
        out = torch.empty(4, 3)
    elif case == "out_rows":
        out = torch.empty(2, 3, dtype=torch.int32)
    elif case == "out_cols":
        out = torch.empty(4, 3, dtype=torch.int32)[:, :2]
    elif case == "out_3d":
        out = torch.empty(4, 3, 1, dtype=torch.int32)
    elif case == "out_strided":
        out = torch.empty(3, 4, dtype=torch.int32).t()

    def run(dev):
        args = (a.to(dev), b.to(dev))
        if out is None:
            return torch._int_mm(*args)
        return torch._int_mm(*args, out=out.to(dev) if case != "out_strided" else out.t().contiguous().to(dev).t())

    ref = _error(lambda: run("cpu"))
    assert ref is not None
    assert _error(lambda: run("neuron")) == ref
    # the device is still usable
    assert torch.equal(torch._int_mm(torch.ones(16, 16, dtype=torch.int8, device="neuron"),
                                     torch.ones(16, 16, dtype=torch.int8, device="neuron")).cpu(),
                       torch.full((16, 16), 16, dtype=torch.int32))
