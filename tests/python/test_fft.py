"""torch.fft on neuron vs PyTorch's CPU (pocketfft): fft/ifft/rfft/irfft/hfft/ihfft, the 2-D and n-D
forms, every norm mode, mixed-radix and Bluestein lengths (primes > 64), n= padding and truncation,
strided and batched input, fftshift, stft/istft and autograd.  aten's _fft_c2c/_fft_r2c/_fft_c2r run
natively (fft.c): every test runs with NEURON_FALLBACK=error."""
import pytest
import torch

TOL = {torch.float32: dict(rtol=1e-4, atol=2e-5), torch.float64: dict(rtol=1e-10, atol=1e-11),
       torch.complex64: dict(rtol=1e-4, atol=2e-5), torch.complex128: dict(rtol=1e-10, atol=1e-11)}
LENS = [1, 2, 5, 8, 12, 17, 61, 67, 97, 128, 210]


@pytest.fixture(autouse=True)
def _native(no_fallback, monkeypatch):
    monkeypatch.setenv("NEURON_FALLBACK", "error")
    yield


def _close(d, c, scale=1.0):
    assert d.dtype == c.dtype and d.shape == c.shape, (d.dtype, c.dtype, d.shape, c.shape)
    t = TOL[c.dtype]
    torch.testing.assert_close(d.detach().cpu(), c.detach(), rtol=t["rtol"] * scale, atol=t["atol"] * scale)


def _rand(shape, dtype, seed=0):
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("n", LENS)
def test_fft_ifft_lengths_and_norms(device, dtype, n):
    x = _rand((3, n), dtype)
    for norm in (None, "ortho", "forward"):
        _close(torch.fft.fft(x.to(device), norm=norm), torch.fft.fft(x, norm=norm), scale=n ** 0.5)
        _close(torch.fft.ifft(x.to(device), norm=norm), torch.fft.ifft(x, norm=norm), scale=n ** 0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 7, 16, 67, 100])
def test_rfft_irfft_hfft(device, dtype, n):
    x = _rand((2, 3, n), dtype)
    d = x.to(device)
    _close(torch.fft.rfft(d), torch.fft.rfft(x), scale=n ** 0.5)
    _close(torch.fft.rfft(d, dim=1, norm="ortho"), torch.fft.rfft(x, dim=1, norm="ortho"))
    s = torch.fft.rfft(x)
    _close(torch.fft.irfft(s.to(device), n=n), torch.fft.irfft(s, n=n))
    if n > 1:
        _close(torch.fft.irfft(s.to(device)), torch.fft.irfft(s))           # default n = 2(m - 1)
    _close(torch.fft.hfft(s.to(device), n=n), torch.fft.hfft(s, n=n), scale=n)
    _close(torch.fft.ihfft(d), torch.fft.ihfft(x))


def test_nd_padding_strides_and_shift(device):
    x = _rand((4, 6, 10), torch.complex128)
    d = x.to(device)
    _close(torch.fft.fft2(d), torch.fft.fft2(x))
    _close(torch.fft.fftn(d, dim=(0, 2), norm="ortho"), torch.fft.fftn(x, dim=(0, 2), norm="ortho"))
    _close(torch.fft.ifftn(d), torch.fft.ifftn(x))
    _close(torch.fft.fft(d, n=13, dim=1), torch.fft.fft(x, n=13, dim=1))      # zero padding
    _close(torch.fft.fft(d, n=4, dim=-1), torch.fft.fft(x, n=4, dim=-1))      # truncation
    _close(torch.fft.fft(d.transpose(0, 2)[::2]), torch.fft.fft(x.transpose(0, 2)[::2]))   # strided
    r = _rand((5, 8, 9), torch.float64)
    _close(torch.fft.rfftn(r.to(device)), torch.fft.rfftn(r))
    _close(torch.fft.irfftn(torch.fft.rfftn(r).to(device), s=(5, 8, 9)), torch.fft.irfftn(torch.fft.rfftn(r), s=(5, 8, 9)))
    _close(torch.fft.rfft2(r.to(device)), torch.fft.rfft2(r))
    _close(torch.fft.fftshift(torch.fft.fft(d)), torch.fft.fftshift(torch.fft.fft(x)))
    _close(torch.fft.ifftshift(d, dim=1), torch.fft.ifftshift(x, dim=1))
    f = torch.fft.fftfreq(10, device=device)
    torch.testing.assert_close(f.cpu(), torch.fft.fftfreq(10))


def test_stft_istft(device):
    sig = _rand((2, 400), torch.float64)
    w = torch.hann_window(64, dtype=torch.float64)
    kw = dict(n_fft=64, hop_length=16, window=w, return_complex=True)
    S = torch.stft(sig, **kw)
    Sd = torch.stft(sig.to(device), **{**kw, "window": w.to(device)})
    _close(Sd, S, scale=10)
    back = torch.istft(Sd, n_fft=64, hop_length=16, window=w.to(device), length=400)
    _close(back, torch.istft(S, n_fft=64, hop_length=16, window=w, length=400), scale=10)
    _close(back, sig, scale=10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_autograd(device, dtype):
    x = _rand((3, 20), dtype)

    def f(t):
        c = torch.fft.rfft(t, norm="ortho")
        z = torch.fft.ifft(torch.fft.fft(torch.complex(t, t.flip(-1))) * 1j)
        return (c.abs() ** 2).sum() + torch.fft.irfft(c * c, n=20).sum() + torch.view_as_real(z).pow(2).sum()

    xc, xd = x.clone().requires_grad_(True), x.to(device).requires_grad_(True)
    f(xc).backward()
    f(xd).backward()
    _close(xd.grad, xc.grad, scale=20)


def test_bad_input(device):
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        torch.fft.fft(torch.randn(0, device=device))
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        torch.fft.irfft(torch.randn(4, dtype=torch.complex64, device=device), n=0)
    d = torch.randn(8, device=device)
    assert torch.fft.fft(d).shape == (8,)                                    # the device stays usable
