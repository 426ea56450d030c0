"""Random numbers on the device: seeded reproducibility, sane statistics, generator objects.

The device's streams need not equal the CPU's for the same seed; only reproducibility on the
device and the distributions are checked.
"""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

N = 200_000


def _draw(kind, device, generator=None):
    g = {"generator": generator} if generator is not None else {}
    if kind == "rand":
        return torch.rand(1000, device=device, **g)
    if kind == "randn":
        return torch.randn(1000, device=device, **g)
    if kind == "randint":
        return torch.randint(0, 50, (1000,), device=device, **g)
    if kind == "bernoulli":
        return torch.bernoulli(torch.full((1000,), 0.3, device=device), **g)
    if kind == "bernoulli_":
        return torch.empty(1000, device=device).bernoulli_(0.7, **g)
    if kind == "normal_":
        return torch.empty(1000, device=device).normal_(2.0, 3.0, **g)
    if kind == "uniform_":
        return torch.empty(1000, device=device).uniform_(-2.0, 5.0, **g)
    if kind == "dropout":
        assert generator is None
        return F.dropout(torch.ones(1000, device=device), p=0.5, training=True)
    raise AssertionError(kind)


KINDS = ["rand", "randn", "randint", "bernoulli", "bernoulli_", "normal_", "uniform_", "dropout"]


@pytest.mark.parametrize("kind", KINDS)
def test_manual_seed_reproducible(device, kind):
    torch.manual_seed(1234)
    a1 = _draw(kind, device)
    a2 = _draw(kind, device)
    torch.manual_seed(1234)
    b1 = _draw(kind, device)
    b2 = _draw(kind, device)
    assert a1.device == device
    torch.testing.assert_close(a1.cpu(), b1.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(a2.cpu(), b2.cpu(), rtol=0, atol=0)
    assert not torch.equal(a1.cpu(), a2.cpu()), "two draws in a row were equal"
    torch.manual_seed(4321)
    c1 = _draw(kind, device)
    assert not torch.equal(a1.cpu(), c1.cpu()), "different seeds gave the same numbers"


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "dropout"])
def test_generator_object(device, kind):
    g = torch.Generator(device=device)
    assert g.device.type == device.type
    g.manual_seed(42)
    assert g.initial_seed() == 42
    a = _draw(kind, device, g)
    torch.manual_seed(0)                     # the global generator does not affect g
    g.manual_seed(42)
    b = _draw(kind, device, g)
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)

    state = g.get_state()
    c = _draw(kind, device, g)
    _draw(kind, device)                      # global draws in between do not disturb g
    g.set_state(state)
    d = _draw(kind, device, g)
    torch.testing.assert_close(c.cpu(), d.cpu(), rtol=0, atol=0)

    g2 = torch.Generator(device=device).manual_seed(42)
    torch.testing.assert_close(_draw(kind, device, g2).cpu(), a.cpu(), rtol=0, atol=0)


def test_global_draws_unaffected_by_private_generator(device):
    torch.manual_seed(7)
    a = torch.randn(100, device=device)
    torch.manual_seed(7)
    g = torch.Generator(device=device).manual_seed(99)
    torch.randn(100, device=device, generator=g)
    b = torch.randn(100, device=device)
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


def test_fork_rng(device):
    torch.manual_seed(11)
    with torch.random.fork_rng(device_type=device.type):
        torch.randn(50, device=device)
        torch.manual_seed(999)
        torch.randn(50, device=device)
    a = torch.randn(50, device=device)
    torch.manual_seed(11)
    b = torch.randn(50, device=device)
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


# ------------------------------------------------------------------------------ statistics
def test_rand_statistics(device):
    torch.manual_seed(0)
    x = torch.rand(N, device=device).cpu().double()
    assert x.min() >= 0 and x.max() < 1
    assert abs(x.mean() - 0.5) < 0.01
    assert abs(x.var() - 1 / 12) < 0.005
    hist = torch.histc(x, bins=10, min=0, max=1) / N
    assert (hist - 0.1).abs().max() < 0.01, hist
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        y = torch.rand(10_000, device=device, dtype=dt).cpu()
        assert y.dtype == dt and y.min() >= 0 and y.max() < 1


def test_randn_statistics(device):
    torch.manual_seed(0)
    x = torch.randn(N, device=device).cpu().double()
    assert abs(x.mean()) < 0.02
    assert abs(x.std() - 1) < 0.02
    assert abs((x.abs() < 1).double().mean() - 0.6827) < 0.01
    assert abs(((x ** 3).mean())) < 0.05               # symmetric
    assert abs((x ** 4).mean() - 3) < 0.15              # kurtosis of a normal
    y = torch.empty(N, device=device).normal_(5.0, 2.0).cpu().double()
    assert abs(y.mean() - 5) < 0.05 and abs(y.std() - 2) < 0.05
    assert torch.randn(10, 10, device=device, dtype=torch.float64).dtype == torch.float64


def test_randint_statistics(device):
    torch.manual_seed(0)
    x = torch.randint(-3, 7, (N,), device=device)
    assert x.dtype == torch.int64 and x.device == device
    x = x.cpu()
    assert x.min().item() == -3 and x.max().item() == 6
    counts = torch.bincount(x + 3, minlength=10).double() / N
    assert (counts - 0.1).abs().max() < 0.01, counts
    big = torch.randint(0, 2 ** 40, (10_000,), device=device).cpu()
    assert big.min() >= 0 and big.max() < 2 ** 40 and big.max() > 2 ** 38
    u8 = torch.randint(0, 256, (10_000,), device=device, dtype=torch.uint8).cpu()
    assert u8.dtype == torch.uint8 and len(u8.unique()) > 200


def test_uniform_statistics(device):
    torch.manual_seed(0)
    x = torch.empty(N, device=device).uniform_(-2.0, 5.0).cpu().double()
    assert x.min() >= -2 and x.max() < 5
    assert abs(x.mean() - 1.5) < 0.05


def test_bernoulli_statistics(device):
    torch.manual_seed(0)
    p = torch.full((N,), 0.3, device=device)
    x = torch.bernoulli(p).cpu()
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert abs(x.mean().item() - 0.3) < 0.01
    # a probability per element
    probs = torch.tensor([0.0, 1.0, 0.5], device=device).repeat(N // 3)
    y = torch.bernoulli(probs).cpu().view(-1, 3)
    assert y[:, 0].sum() == 0 and y[:, 1].sum() == len(y)
    assert abs(y[:, 2].mean().item() - 0.5) < 0.02
    z = torch.empty(N, device=device).bernoulli_(0.8).cpu()
    assert abs(z.mean().item() - 0.8) < 0.01


def test_dropout_statistics(device):
    torch.manual_seed(0)
    x = torch.ones(N, device=device)
    y = F.dropout(x, p=0.25, training=True).cpu()
    kept = y != 0
    assert abs(kept.double().mean().item() - 0.75) < 0.01
    torch.testing.assert_close(y[kept], torch.full((int(kept.sum()),), 1 / 0.75))
    # eval mode and p=0 are the identity
    torch.testing.assert_close(F.dropout(x, p=0.25, training=False).cpu(), x.cpu())
    torch.testing.assert_close(F.dropout(x, p=0.0, training=True).cpu(), x.cpu())
    # the module and its backward: the gradient is masked the same way
    drop = nn.Dropout(0.5).train()
    w = torch.ones(1000, device=device, requires_grad=True)
    out = drop(w)
    out.sum().backward()
    torch.testing.assert_close(w.grad.cpu(), out.detach().cpu())

# ---- the distributions of random_dist.c (ops_random.cpp), randperm and multinomial

def test_random_distributions_are_reproducible_and_sane(no_fallback):
    n = 200_000

    def draw(fn, seed=5):
        torch.manual_seed(seed)
        return fn().cpu().double()

    cases = {
        "exponential": (lambda: torch.empty(n, device="neuron").exponential_(2.0), 0.5, 0.25),
        "geometric": (lambda: torch.empty(n, device="neuron").geometric_(0.25), 4.0, 12.0),
        "log_normal": (lambda: torch.empty(n, device="neuron", dtype=torch.float64).log_normal_(0.0, 0.5),
                       math.exp(0.125), (math.exp(0.25) - 1) * math.exp(0.25)),
        "normal_tensor_tensor": (lambda: torch.normal(torch.full((n,), 3.0, device="neuron"), torch.full((n,), 2.0, device="neuron")),
                                 3.0, 4.0),
        "normal_tensor_float": (lambda: torch.normal(torch.full((n,), -1.0, device="neuron"), 0.5), -1.0, 0.25),
        "normal_float_tensor": (lambda: torch.normal(2.0, torch.full((n,), 3.0, device="neuron")), 2.0, 9.0),
    }
    for name, (fn, mean, var) in cases.items():
        a, b, c = draw(fn), draw(fn), draw(fn, seed=6)
        assert torch.equal(a, b), f"{name}: same seed, different values"
        assert not torch.equal(a, c), f"{name}: different seeds, same values"
        assert abs(a.mean().item() - mean) < 6 * math.sqrt(var / n), (name, a.mean().item(), mean)
        assert abs(a.var().item() - var) < 0.05 * var, (name, a.var().item(), var)
    c = draw(lambda: torch.empty(n, device="neuron").cauchy_(1.0, 2.0))
    assert abs((c < 1.0).double().mean().item() - 0.5) < 0.01
    assert abs(((c > -1.0) & (c < 3.0)).double().mean().item() - 0.5) < 0.01
    g = draw(lambda: torch.empty(1000, dtype=torch.int32, device="neuron").geometric_(0.5))
    assert g.min().item() >= 1
    # bf16 and non-contiguous outputs
    t = torch.empty(64, 32, device="neuron", dtype=torch.bfloat16).t()
    t.exponential_()
    assert (t.cpu() >= 0).all()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.float64])
def test_randperm_is_a_reproducible_permutation(dtype, no_fallback):
    for n in (0, 1, 5, 1000):
        torch.manual_seed(3)
        p = torch.randperm(n, device="neuron", dtype=dtype).cpu()
        torch.manual_seed(3)
        q = torch.randperm(n, device="neuron", dtype=dtype).cpu()
        assert torch.equal(p, q)
        assert torch.equal(p.sort().values, torch.arange(n, dtype=dtype))
    assert not torch.equal(torch.randperm(1000, device="neuron").cpu(), torch.randperm(1000, device="neuron").cpu())


def test_multinomial(no_fallback):
    p = torch.tensor([[1.0, 2.0, 3.0, 4.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]], device="neuron")
    torch.manual_seed(1)
    s = torch.multinomial(p, 20000, replacement=True).cpu()
    torch.manual_seed(1)
    assert torch.equal(s, torch.multinomial(p, 20000, replacement=True).cpu())
    freq = torch.stack([torch.bincount(r, minlength=5) for r in s]).double() / 20000
    torch.testing.assert_close(freq, (p / p.sum(1, keepdim=True)).cpu().double(), atol=0.02, rtol=0)
    for _ in range(20):
        w = torch.multinomial(p[0], 4).cpu()
        assert sorted(w.tolist()) == [0, 1, 2, 3]  # distinct, never the zero-weight category
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(p[0], 6)
