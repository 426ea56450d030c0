"""torch.optim's fused=True optimizers (Adam, AdamW, SGD, Adagrad) on neuron against the CPU's fused
implementation, natively (no CPU fallback).

Parameters of any layout (transposed, channels_last, strided slices with gaps) and grads whose layout
differs from their parameter's are accepted, as the CPU accepts them.  The reference is the CPU's
single-tensor implementation (fused=False, foreach=False): PyTorch 2.13's CPU fused kernels walk the
memory of param, grad and states in step, so where the layouts differ (a channels_last parameter with a
contiguous grad, a strided slice, a strided grad) they pair the wrong elements and are off by ~0.05 after
three steps; neuron matches the single-tensor values there, and the CPU fused values where the layouts
agree (a transposed parameter with a grad of its layout, a contiguous one).
"""

import pytest
import torch


def _values():
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(7, 5, generator=g).t(),                                     # transposed (dense)
        torch.randn(2, 3, 4, 5, generator=g).to(memory_format=torch.channels_last),
        torch.randn(6, 8, generator=g)[::2, 1:7],                               # gaps: not dense
        torch.randn(9, generator=g),                                             # contiguous
        torch.randn(0, 3, generator=g),                                          # empty
    ]


def _leaf(t, device):
    """t's values in t's layout on device, as a leaf that requires grad."""
    if t.dim() == 2 and t.stride(0) == 1 and t.numel():       # transposed
        x = t.t().contiguous().to(device).t()
    elif t.dim() == 4:
        x = t.to(device)                                        # .to keeps channels_last
    elif t.dim() == 2 and not t.is_contiguous() and t.numel():  # a slice with gaps of a 6x8
        full = torch.zeros(6, 8)
        full[::2, 1:7] = t
        x = full.to(device)[::2, 1:7]
    else:
        x = t.to(device)
    assert x.stride() == t.stride(), (x.stride(), t.stride())
    return x.detach().requires_grad_()


def _grads(params, step, device):
    g = torch.Generator().manual_seed(100 + step)
    out = []
    for i, p in enumerate(params):
        gr = torch.randn(p.shape, generator=g)
        if i == 0:
            gr = gr.t().contiguous().to(device).t()          # the parameter's (transposed) layout
        elif i == 3:
            gr = torch.randn(18, generator=g).to(device)[::2]  # a strided grad of a contiguous parameter
        else:
            gr = gr.contiguous().to(device)                  # contiguous: differs from channels_last
        out.append(gr)
    return out


SAME_LAYOUT = (0, 4)   # parameters whose grads (and states) share their layout: the CPU fused kernel is right


def _run(device, opt_cls, steps=3, **kw):
    values = _values()
    ps = [_leaf(v, device) for v in values]
    opt = opt_cls(ps, lr=0.01, **kw)
    for step in range(steps):
        for p, gr in zip(ps, _grads(values, step, device)):
            p.grad = gr
        opt.step()
    return [p.detach().cpu() for p in ps], opt


CASES = [
    (torch.optim.SGD, {}),
    (torch.optim.SGD, {"momentum": 0.9, "weight_decay": 0.1}),
    (torch.optim.SGD, {"momentum": 0.9, "nesterov": True, "maximize": True}),
    (torch.optim.SGD, {"momentum": 0.8, "dampening": 0.3}),
    (torch.optim.Adagrad, {}),
    (torch.optim.Adagrad, {"lr_decay": 0.1, "weight_decay": 0.05, "maximize": True, "initial_accumulator_value": 0.2}),
    (torch.optim.Adam, {}),
    (torch.optim.Adam, {"weight_decay": 0.1, "amsgrad": True}),
    (torch.optim.Adam, {"maximize": True, "betas": (0.8, 0.9)}),
    (torch.optim.AdamW, {}),
    (torch.optim.AdamW, {"weight_decay": 0.05, "amsgrad": True, "maximize": True}),
]


@pytest.mark.parametrize("opt_cls,kw", CASES, ids=lambda c: c.__name__ if isinstance(c, type) else str(c))
def test_fused_any_strides_match_cpu(opt_cls, kw, neuron_ops):
    ref, ref_opt = _run("cpu", opt_cls, fused=False, foreach=False, **kw)
    cpu_fused, _ = _run("cpu", opt_cls, fused=True, **kw)
    neuron_ops.clear_op_tracking()
    dev, dev_opt = _run("neuron", opt_cls, fused=True, **kw)
    assert not {op for op in neuron_ops.get_fallback_ops() if "fused" in op}, neuron_ops.get_fallback_ops()
    for i, (a, b) in enumerate(zip(dev, ref)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=f"param {i}")
    for i in SAME_LAYOUT:
        torch.testing.assert_close(dev[i], cpu_fused[i], rtol=1e-6, atol=1e-6, msg=f"param {i} vs CPU fused")
    for pc, pd in zip(ref_opt.param_groups[0]["params"], dev_opt.param_groups[0]["params"]):
        sc, sd = ref_opt.state[pc], dev_opt.state[pd]
        for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "sum"):
            if sc.get(k) is not None:
                torch.testing.assert_close(sd[k].cpu(), sc[k], rtol=1e-6, atol=1e-6, msg=k)


def test_fused_sgd_adagrad_grad_scale_matches_cpu():
    """GradScaler's path: grads are divided in place; found_inf skips the step."""
    def run(device, found):
        g = torch.Generator().manual_seed(4)
        p1 = [torch.randn(3, 5, generator=g).to(device).t(), torch.randn(7, generator=g).to(device)]
        g1 = [torch.randn(3, 5, generator=g).to(device).t(), torch.randn(7, generator=g).to(device)]
        b1 = [torch.randn(3, 5, generator=g).to(device).t(), torch.randn(7, generator=g).to(device)]
        p2, g2 = [t.clone() for t in p1], [t.clone() for t in g1]     # clone keeps the layout
        s2 = [torch.rand(3, 5, generator=g).to(device).t(), torch.rand(7, generator=g).to(device)]
        steps = [torch.full((), 3.0, device=device) for _ in p2]
        kw = dict(grad_scale=torch.tensor(4.0, device=device), found_inf=torch.tensor(float(found), device=device))
        torch._fused_sgd_(p1, g1, b1, weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.1, nesterov=True,
                          maximize=False, is_first_step=False, **kw)
        torch._fused_adagrad_(p2, g2, s2, steps, lr=0.1, lr_decay=0.01, weight_decay=0.02, eps=1e-10, maximize=True, **kw)
        return [t.cpu() for t in p1 + g1 + b1 + p2 + g2 + s2]
    for found in (0, 1):
        for a, b in zip(run("neuron", found), run("cpu", found)):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["_fused_adam_", "_fused_adamw_"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=str)
def test_fused_adam_grad_scale_matches_cpu(op, dt):
    """With grad_scale (GradScaler's path) the CPU divides the grads in place: neuron leaves the same."""
    def run(device):
        g = torch.Generator().manual_seed(3)
        p = [torch.randn(4, 6, generator=g).to(dt).to(device).t(), torch.randn(5, generator=g).to(dt).to(device)]
        gr = [torch.randn(4, 6, generator=g).to(dt).to(device).t(), torch.randn(5, generator=g).to(dt).to(device)]
        m = [torch.zeros_like(x) for x in p]
        v = [torch.zeros_like(x) for x in p]
        steps = [torch.ones((), device=device) for _ in p]
        getattr(torch, op)(p, gr, m, v, [], steps, lr=0.01, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                           amsgrad=False, maximize=False, grad_scale=torch.tensor(8.0, device=device),
                           found_inf=torch.zeros((), device=device))
        return [t.cpu() for t in p + gr + m + v]
    for a, b in zip(run("neuron"), run("cpu")):
        torch.testing.assert_close(a, b, rtol=1e-6 if dt == torch.float32 else 1e-2, atol=1e-6 if dt == torch.float32 else 1e-2)
