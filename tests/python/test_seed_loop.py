"""The ordinary training loop of the design document, on small MLPs: every op native
(NEURON_FALLBACK=error), losses equal to the CPU run's within 1e-5 relative."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

OPTIMIZERS = {
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=1e-2),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
}


def _run(device, opt_name, loss_name, steps=6):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64),
                          nn.SiLU(), nn.Linear(64, 5)).to(device)
    opt = OPTIMIZERS[opt_name](model.parameters())
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 20, generator=g)
        y = torch.randint(0, 5, (32,), generator=g)
        out = model(x.to(device))
        if loss_name == "cross_entropy":
            loss = F.cross_entropy(out, y.to(device))
        else:
            loss = F.mse_loss(out, F.one_hot(y, 5).float().to(device))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("loss_name", ["cross_entropy", "mse"])
def test_seed_loop_matches_cpu_without_fallback(monkeypatch, neuron_ops, opt_name, loss_name):
    ref = _run("cpu", opt_name, loss_name)
    monkeypatch.setenv("NEURON_FALLBACK", "error")
    got = _run("neuron", opt_name, loss_name)
    assert neuron_ops.get_fallback_ops() == set()
    for step, (a, b) in enumerate(zip(ref, got)):
        assert abs(a - b) <= 1e-5 * abs(a), (step, a, b)


@pytest.mark.parametrize("opt_cls,kw", [(torch.optim.AdamW, {}), (torch.optim.Adam, {"weight_decay": 1e-2}),
                                        (torch.optim.AdamW, {"amsgrad": True, "maximize": True})])
def test_fused_adam_matches_cpu_fused(monkeypatch, neuron_ops, opt_cls, kw):
    torch.manual_seed(0)
    params = [torch.randn(37, 5), torch.randn(64), torch.randn(3, 4, 5)]
    grads = [[torch.randn_like(p) for p in params] for _ in range(4)]

    def run(device):
        ps = [p.clone().to(device).requires_grad_() for p in params]
        opt = opt_cls(ps, lr=1e-2, fused=True, **kw)
        for step_grads in grads:
            for p, g in zip(ps, step_grads):
                p.grad = g.to(device)
            opt.step()
        return [p.detach().cpu() for p in ps]

    ref = run("cpu")
    monkeypatch.setenv("NEURON_FALLBACK", "error")
    got = run("neuron")
    assert not any("fused_adam" in op for op in neuron_ops.get_fallback_ops())
    for a, b in zip(ref, got):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)
