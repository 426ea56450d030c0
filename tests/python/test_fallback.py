"""The CPU fallback: ops without a native kernel run on the CPU, give the CPU's result on the device,
are reported by torchneuron.get_fallback_ops(), warn once per op and can be made an error.

The ops used here are ones a device backend is unlikely to implement natively soon (Bessel
functions, igamma, erfcx, slogdet). If one of them becomes native, pick another exotic op.
"""

import pytest
import torch

FALLBACK_OP = "aten::special_bessel_j0"


def _x(n=64, lo=0.1, hi=20.0):
    return torch.linspace(lo, hi, n)


def test_native_op_is_tracked_not_fallback(neuron_ops):
    a = torch.ones(8, device="neuron")
    (a + a).cpu()
    assert "aten::add.Tensor" in neuron_ops.get_executed_ops()
    assert "aten::add.Tensor" not in neuron_ops.get_fallback_ops()
    neuron_ops.clear_op_tracking()
    assert not neuron_ops.get_executed_ops()
    assert not neuron_ops.get_fallback_ops()


def test_functional_fallback(neuron_ops):
    x = _x()
    y = torch.special.bessel_j0(x.to("neuron"))
    assert y.device == torch.device("neuron", 0)
    assert y.dtype == x.dtype and y.shape == x.shape
    torch.testing.assert_close(y.cpu(), torch.special.bessel_j0(x))
    fallback = neuron_ops.get_fallback_ops()
    # structured ops reach the backend as their out= overload (the functional form is composite)
    assert any(op.startswith(FALLBACK_OP) for op in fallback), sorted(fallback)
    assert fallback <= neuron_ops.get_executed_ops()


def test_fallback_on_noncontiguous_view_input(neuron_ops):
    base = torch.linspace(0.1, 30, 120).reshape(10, 12)
    d = base.to("neuron")
    view_d = d.t()[::2, 1:]                    # a non-contiguous view as input
    view_c = base.t()[::2, 1:]
    torch.testing.assert_close(torch.special.bessel_j0(view_d).cpu(),
                               torch.special.bessel_j0(view_c))
    torch.testing.assert_close(d.cpu(), base, rtol=0, atol=0)   # input unchanged
    assert any(op.startswith(FALLBACK_OP) for op in neuron_ops.get_fallback_ops())


def test_fallback_result_is_usable_on_device():
    x = _x(60)
    y = torch.special.bessel_j0(x.to("neuron"))
    # views of the fallback's result and native ops on them
    v = y.view(6, 10).t()[2:5]
    ref = torch.special.bessel_j0(x).view(6, 10).t()[2:5]
    torch.testing.assert_close(v.cpu(), ref)
    torch.testing.assert_close((v * 2 + 1).sum().cpu(), (ref * 2 + 1).sum())
    v.mul_(0)                                  # writes through into the fallback's output
    assert y.view(6, 10)[:, 2:5].abs().sum().item() == 0


def test_inplace_fallback_mutates_device_tensor(neuron_ops):
    x = torch.linspace(0.5, 5.0, 32)
    a = torch.linspace(1.0, 3.0, 32)
    ref = x.clone().igamma_(a)
    d = x.to("neuron")
    ptr = d.data_ptr()
    r = d.igamma_(a.to("neuron"))
    assert r is d                              # returns self
    assert d.data_ptr() == ptr                 # same device memory, updated in place
    torch.testing.assert_close(d.cpu(), ref)
    assert any(op.startswith("aten::igamma") for op in neuron_ops.get_fallback_ops()), \
        sorted(neuron_ops.get_fallback_ops())


def test_inplace_fallback_on_view_writes_through():
    base = torch.linspace(0.5, 5.0, 40).reshape(4, 10)
    ref = base.clone()
    a = torch.full((2, 5), 1.5)
    ref[1:3, ::2].igamma_(a)
    d = base.to("neuron")
    d[1:3, ::2].igamma_(a.to("neuron"))
    torch.testing.assert_close(d.cpu(), ref)


def test_out_variant_fallback(neuron_ops):
    x = _x(50)
    d = x.to("neuron")
    out = torch.empty(50, device="neuron")
    ptr = out.data_ptr()
    r = torch.special.bessel_j0(d, out=out)
    assert r is out and out.data_ptr() == ptr
    torch.testing.assert_close(out.cpu(), torch.special.bessel_j0(x))
    # into a strided destination
    big = torch.zeros(100, device="neuron")
    torch.special.bessel_j0(d, out=big[::2])
    ref = torch.zeros(100)
    torch.special.bessel_j0(x, out=ref[::2])
    torch.testing.assert_close(big.cpu(), ref)
    # an empty out= tensor is resized, as on the CPU
    small = torch.empty(0, device="neuron")
    torch.special.bessel_j0(d, out=small)
    assert small.shape == (50,)
    torch.testing.assert_close(small.cpu(), torch.special.bessel_j0(x))
    assert any(op.startswith("aten::special_bessel_j0") for op in neuron_ops.get_fallback_ops())


def test_multi_output_fallback():
    a = torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(0))
    sign_d, logdet_d = torch.linalg.slogdet(a.to("neuron"))
    sign_c, logdet_c = torch.linalg.slogdet(a)
    assert sign_d.device.type == "neuron" and logdet_d.device.type == "neuron"
    torch.testing.assert_close(sign_d.cpu(), sign_c)
    torch.testing.assert_close(logdet_d.cpu(), logdet_c)


def test_fallback_autograd(neuron_ops):
    # erfcx falls back; its backward (from the saved result) runs natively on the device
    x = torch.linspace(0.1, 10, 30, dtype=torch.float64)
    xc = x.clone().requires_grad_()
    xd = x.to("neuron").requires_grad_()
    w = torch.arange(30.0, dtype=torch.float64)
    yd = torch.special.erfcx(xd)
    yc = torch.special.erfcx(xc)
    torch.testing.assert_close(yd.detach().cpu(), yc.detach())
    yd.mul(w.to("neuron")).sum().backward()
    yc.mul(w).sum().backward()
    assert xd.grad.device.type == "neuron"
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    assert any(op.startswith("aten::special_erfcx") for op in neuron_ops.get_fallback_ops()), \
        sorted(neuron_ops.get_fallback_ops())


def test_fallback_error_mode(monkeypatch, neuron_ops):
    d = _x(8).to("neuron")
    monkeypatch.setenv("NEURON_FALLBACK", "error")
    with pytest.raises(RuntimeError, match="bessel_j0"):
        torch.special.bessel_j0(d)
    with pytest.raises(RuntimeError, match="igamma"):
        d.clone().igamma_(d)
    # native ops are unaffected
    assert (d * 0 + 1).sum().item() == 8
    monkeypatch.delenv("NEURON_FALLBACK")
    # read at each fallback: without the variable it runs again
    torch.testing.assert_close(torch.special.bessel_j0(d).cpu(), torch.special.bessel_j0(_x(8)))


WARN_ONCE = """
import warnings
import torch
x = torch.linspace(0.1, 5, 16, device="neuron")
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    for _ in range(3):
        torch.special.bessel_j0(x)
        torch.special.bessel_j1(x)
    torch.neuron.synchronize()
msgs = [str(m.message) for m in w if issubclass(m.category, UserWarning)]
print("J0", sum("bessel_j0" in m for m in msgs))
print("J1", sum("bessel_j1" in m for m in msgs))
for m in msgs:
    print("WARNING", m.replace("\\n", " "))
"""


def test_fallback_warns_once_per_op(run_py):
    proc = run_py(WARN_ONCE)
    assert proc.returncode == 0, proc.report
    assert "J0 1" in proc.stdout, proc.report
    assert "J1 1" in proc.stdout, proc.report
