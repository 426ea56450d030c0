"""Native _foreach_* ops (ops_foreach.cpp) against PyTorch's CPU results, and the fast paths of the
pointwise engine (contiguous operands without TensorIterator, inline execution of small kernels).

The foreach fast path must give exactly what the single-tensor ops give on neuron, and CPU's values;
lists it does not take (integers, strides, mixed dtypes, overlap) go to aten's per-tensor loop and must
give the same results and errors.
"""

import pytest
import torch

DT = [torch.float32, torch.float64, torch.bfloat16]
SHAPES = [(3,), (0,), (17, 5), (1,), (2, 3, 4), (1000,)]


def _tol(dt):
    return dict(atol=1e-2, rtol=1e-2) if dt == torch.bfloat16 else dict(atol=1e-6, rtol=1e-5)


def _lists(dt, k=1, seed=0, positive=False):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(k):
        ts = [torch.randn(s, generator=g) for s in SHAPES]
        if positive:
            ts = [t.abs() + 0.5 for t in ts]
        out.append([t.to(dt) for t in ts])
    return out


def _dev(lst):
    return [t.to("neuron") for t in lst]


def _check(got, want, dt):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == "neuron"
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g.cpu(), w, **_tol(dt))


def _assert_native(neuron_ops, *names):
    fb = neuron_ops.get_fallback_ops()
    for n in names:
        assert not any(op.startswith(n) for op in fb), sorted(fb)
        assert any(op.startswith(n) for op in neuron_ops.get_executed_ops()), n


CASES = [
    # (name, function(lists...), number of lists, positive inputs)
    ("add.Scalar", lambda a: torch._foreach_add(a, 0.5), 1, False),
    ("add.List", lambda a, b: torch._foreach_add(a, b, alpha=-0.25), 2, False),
    ("add.ScalarList", lambda a: torch._foreach_add(a, [0.1 * i for i in range(len(a))]), 1, False),
    ("sub.Scalar", lambda a: torch._foreach_sub(a, 3), 1, False),
    ("sub.List", lambda a, b: torch._foreach_sub(a, b, alpha=2), 2, False),
    ("mul.Scalar", lambda a: torch._foreach_mul(a, 0.1), 1, False),
    ("mul.List", lambda a, b: torch._foreach_mul(a, b), 2, False),
    ("mul.ScalarList", lambda a: torch._foreach_mul(a, [float(i) - 2 for i in range(len(a))]), 1, False),
    ("div.Scalar", lambda a: torch._foreach_div(a, 0.3), 1, False),
    ("div.List", lambda a, b: torch._foreach_div(a, b), 2, True),
    ("div.ScalarList", lambda a: torch._foreach_div(a, [1.5 + i for i in range(len(a))]), 1, False),
    ("sqrt", lambda a: torch._foreach_sqrt(a), 1, True),
    ("neg", lambda a: torch._foreach_neg(a), 1, False),
    ("abs", lambda a: torch._foreach_abs(a), 1, False),
    ("exp", lambda a: torch._foreach_exp(a), 1, False),
    ("reciprocal", lambda a: torch._foreach_reciprocal(a), 1, True),
    ("addcmul.Scalar", lambda a, b, c: torch._foreach_addcmul(a, b, c, value=0.05), 3, False),
    ("addcmul.ScalarList", lambda a, b, c: torch._foreach_addcmul(a, b, c, [0.5 * i for i in range(len(a))]), 3, False),
    ("addcdiv.Scalar", lambda a, b, c: torch._foreach_addcdiv(a, b, c, value=-0.3), 3, True),
    ("addcdiv.ScalarList", lambda a, b, c: torch._foreach_addcdiv(a, b, c, [0.25 - i for i in range(len(a))]), 3, True),
    ("lerp.Scalar", lambda a, b: torch._foreach_lerp(a, b, 0.1), 2, False),
    ("norm", lambda a: torch._foreach_norm(a), 1, False),
    ("norm.inf", lambda a: torch._foreach_norm([t for t in a if t.numel()], float("inf")), 1, False),
]


@pytest.mark.parametrize("dt", DT, ids=str)
@pytest.mark.parametrize("name,fn,k,pos", CASES, ids=[c[0] for c in CASES])
def test_foreach_out_of_place(name, fn, k, pos, dt, neuron_ops):
    cpu = _lists(dt, k, positive=pos)
    neuron_ops.clear_op_tracking()
    got = fn(*[_dev(l) for l in cpu])
    _check(got, fn(*cpu), dt)
    _assert_native(neuron_ops, "aten::_foreach_" + name.split(".")[0])


INPLACE = [
    ("add_", lambda a: torch._foreach_add_(a, 1), 1, False),
    ("add_.List", lambda a, b: torch._foreach_add_(a, b, alpha=0.5), 2, False),
    ("sub_.ScalarList", lambda a: torch._foreach_sub_(a, [0.5] * len(a)), 1, False),
    ("mul_", lambda a: torch._foreach_mul_(a, 0.9), 1, False),
    ("mul_.Tensor", lambda a: torch._foreach_mul_(a, torch.tensor(0.7, dtype=a[0].dtype, device=a[0].device)), 1, False),
    ("div_.ScalarList", lambda a: torch._foreach_div_(a, [2.0 + i for i in range(len(a))]), 1, False),
    ("sqrt_", lambda a: torch._foreach_sqrt_(a), 1, True),
    ("addcmul_", lambda a, b, c: torch._foreach_addcmul_(a, b, c, value=0.05), 3, False),
    ("addcdiv_.ScalarList", lambda a, b, c: torch._foreach_addcdiv_(a, b, c, [-0.01 * (i + 1) for i in range(len(a))]), 3, True),
    ("lerp_", lambda a, b: torch._foreach_lerp_(a, b, 0.1), 2, False),
]


@pytest.mark.parametrize("dt", DT, ids=str)
@pytest.mark.parametrize("name,fn,k,pos", INPLACE, ids=[c[0] for c in INPLACE])
def test_foreach_in_place(name, fn, k, pos, dt, neuron_ops):
    cpu = _lists(dt, k, positive=pos)
    dev = [_dev(l) for l in cpu]
    keep = [t for t in dev[0]]
    neuron_ops.clear_op_tracking()
    fn(*dev)
    fn(*cpu)
    _check(dev[0], cpu[0], dt)
    assert all(a is b for a, b in zip(keep, dev[0]))
    _assert_native(neuron_ops, "aten::_foreach_" + name.split(".")[0])


def test_foreach_long_list_matches_single_ops():
    # more tensors than one launch record holds; bit-identical to the per-tensor ops on neuron
    g = torch.Generator().manual_seed(1)
    ts = [torch.randn(int(n), generator=g).to("neuron") for n in torch.randint(1, 300, (100,), generator=g)]
    us = [torch.randn(t.shape, generator=g).to("neuron") for t in ts]
    got = torch._foreach_addcmul([t.clone() for t in ts], us, us, value=0.3)
    for a, t, u in zip(got, ts, us):
        assert torch.equal(a.cpu(), t.addcmul(u, u, value=0.3).cpu())


def test_foreach_slow_paths_match_cpu(neuron_ops):
    # non-contiguous, integer, mixed-dtype lists take aten's per-tensor loop
    g = torch.Generator().manual_seed(2)
    a = [torch.randn(4, 6, generator=g).t(), torch.randn(5, generator=g)]
    b = [torch.randn(6, 4, generator=g), torch.randn(5, generator=g)]
    got = torch._foreach_mul(_dev(a), _dev(b))
    _check(got, torch._foreach_mul(a, b), torch.float32)
    ints = [torch.arange(6), torch.arange(3) - 1]
    _check(torch._foreach_add(_dev(ints), 2), torch._foreach_add(ints, 2), torch.float32)
    _check(torch._foreach_div(_dev(ints), 2), torch._foreach_div(ints, 2), torch.float32)
    mixed = [torch.ones(3), torch.ones(3, dtype=torch.float64)]
    _check(torch._foreach_add(_dev(mixed), 1.5), torch._foreach_add(mixed, 1.5), torch.float32)
    x = torch.arange(8.0)
    xd = x.to("neuron")
    # partial overlap in place: the same error as the single op
    with pytest.raises(RuntimeError):
        torch._foreach_add_([x[1:5]], [x[0:4]])
    with pytest.raises(RuntimeError):
        torch._foreach_add_([xd[1:5]], [xd[0:4]])
    # full overlap in place is fine
    torch._foreach_add_([xd], [xd])
    torch.testing.assert_close(xd.cpu(), 2 * x)


def test_foreach_errors():
    a = _dev([torch.ones(3), torch.ones(2)])
    with pytest.raises(RuntimeError):
        torch._foreach_add(a, _dev([torch.ones(3)]))
    with pytest.raises(RuntimeError):
        torch._foreach_mul_(a, [1.0])
    with pytest.raises(RuntimeError):
        torch._foreach_add(a, _dev([torch.ones(3), torch.ones(4)]))


@pytest.mark.parametrize("foreach", [True, False])
def test_adamw_and_clip_grad_match_cpu(foreach, neuron_ops):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    dev_model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    dev_model.load_state_dict(model.state_dict())
    dev_model.to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, foreach=foreach)
    dopt = torch.optim.AdamW(dev_model.parameters(), lr=1e-2, weight_decay=0.1, foreach=foreach)
    g = torch.Generator().manual_seed(3)
    neuron_ops.clear_op_tracking()
    for _ in range(4):
        x = torch.randn(8, 12, generator=g)
        for m, o, xx in ((model, opt, x), (dev_model, dopt, x.to("neuron"))):
            o.zero_grad()
            m(xx).square().mean().backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05, foreach=foreach)
            o.step()
    for p, q in zip(model.parameters(), dev_model.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), atol=1e-5, rtol=1e-4)
    if foreach:
        _assert_native(neuron_ops, "aten::_foreach_lerp_", "aten::_foreach_addcdiv_", "aten::_foreach_norm",
                       "aten::_foreach_mul_")
        # the fast path launched the lists itself: no per-tensor op ran for them
        ex = neuron_ops.get_executed_ops()
        for single in ("aten::lerp_.Scalar", "aten::addcdiv_", "aten::addcmul_", "aten::sqrt"):
            assert not any(op.startswith(single) for op in ex), (single, sorted(ex))


# ---- the pointwise engine's contiguous fast path --------------------------------------------------

def test_pointwise_fast_path_semantics():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(33, 7, generator=g)
    y = torch.randn(33, 7, generator=g)
    xd, yd = x.to("neuron"), y.to("neuron")
    torch.testing.assert_close((xd + yd).cpu(), x + y)
    torch.testing.assert_close((xd * 0.1).cpu(), x * 0.1)
    torch.testing.assert_close((xd.bfloat16() * 0.1).cpu(), x.bfloat16() * 0.1)
    torch.testing.assert_close(torch.where(xd > 0, xd, yd).cpu(), torch.where(x > 0, x, y))
    torch.testing.assert_close((xd.int() + 1.5).cpu(), x.int() + 1.5)  # promotion
    assert (xd < yd).dtype == torch.bool
    # out= of the right shape and dtype, of another dtype, of another shape (resized)
    o = torch.empty(33, 7, device="neuron")
    torch.add(xd, yd, out=o)
    torch.testing.assert_close(o.cpu(), x + y)
    o64 = torch.empty(33, 7, device="neuron", dtype=torch.float64)
    torch.add(xd, yd, out=o64)
    torch.testing.assert_close(o64.cpu(), (x + y).double())
    o0 = torch.empty(0, device="neuron")
    torch.add(xd, yd, out=o0)
    assert o0.shape == (33, 7)
    # in place, aliasing, partial overlap raises like the CPU
    z = xd.clone()
    z.add_(z)
    torch.testing.assert_close(z.cpu(), 2 * x)
    flat = torch.arange(10.0, device="neuron")
    with pytest.raises(RuntimeError):
        flat[1:6].add_(flat[0:5])
    with pytest.raises(RuntimeError):
        torch.add(flat[0:5], 1, out=flat[2:7])
    # channels-last operands keep their layout like the CPU
    c = torch.randn(2, 3, 4, 5, generator=g).to(memory_format=torch.channels_last)
    cd = c.to("neuron")
    assert (cd + 1).stride() == (c + 1).stride()
    # zero-size
    e = torch.empty(0, 3, device="neuron")
    assert (e + e).shape == (0, 3)


def test_small_ops_inline_keep_order_and_errors():
    # many small ops back to back on an idle queue run inline; their order and results must hold,
    # also when a big op is in flight in between
    x = torch.zeros(16, device="neuron")
    big = torch.ones(1 << 20, device="neuron")
    for i in range(200):
        x.add_(1)
        if i % 50 == 0:
            big = big * 1.0001
    torch.neuron.synchronize()
    assert torch.equal(x.cpu(), torch.full((16,), 200.0))
    # a device-side error from a small kernel is still raised (at the op or at the next sync)
    emb = torch.nn.functional.embedding
    w = torch.randn(4, 3, device="neuron")
    with pytest.raises((RuntimeError, IndexError)):
        emb(torch.tensor([7], device="neuron"), w)
        torch.neuron.synchronize()


def test_gemv_streaming_weights_is_queued():
    # the inline cost of a GEMM counts the bytes of its operands too: an M = 1 product with a 64 MiB
    # weight (4 MiB of arithmetic by multiply-adds / 16) goes to the queue, not the host thread; a
    # 16 x 16 one may run inline.  Results as on the CPU either way.
    w = torch.randn(4096, 4096)
    x = torch.randn(1, 4096)
    wn, xn = w.to("neuron"), x.to("neuron")
    torch.neuron.synchronize()
    n0 = torch.ops.neuron._inline_launches()
    y = torch.nn.functional.linear(xn, wn)
    assert torch.ops.neuron._inline_launches() == n0
    torch.testing.assert_close(y.cpu(), torch.nn.functional.linear(x, w), atol=2e-3, rtol=1e-4)
    a = torch.randn(16, 16)
    torch.testing.assert_close(torch.mm(a.to("neuron"), a.to("neuron")).cpu(), a @ a, atol=1e-4, rtol=1e-5)


def _run(code, **env):
    import os
    import subprocess
    import sys
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)


def test_inline_bytes_env():
    code = ("import torch\n"
            "print('imported', flush=True)\n"
            "x = torch.arange(5.0, device='neuron')\n"
            "print((x + x).sum().item())\n")
    r = _run(code, NEURON_INLINE_BYTES="0")
    assert r.returncode == 0 and r.stdout.split() == ["imported", "20.0"], r.stderr
    r = _run(code, NEURON_INLINE_BYTES="lots")
    assert "imported" in r.stdout  # garbage never breaks import torch ...
    assert r.returncode != 0        # ... the first use of the device raises, naming it
    assert "NEURON_INLINE_BYTES" in r.stderr and "lots" in r.stderr, r.stderr[-2000:]


# ---- queue-level fusion of queued foreach records (csrc/runtime/fuse.c) ---------------------------

def _fuse(enable=-1, tile=-1, dead=-1):
    # [enabled, tile, runs, records, dead buffers on, dead ranges kept in tile buffers]
    return torch.ops.neuron._fuse_control(enable, tile, dead)


def _busy():
    # a record that keeps the queue busy for a while, so that the foreach records behind it are all
    # queued when the executor reaches them (the executor never waits for records).  It sleeps instead
    # of computing: busy matmuls held both cores of a 2-core machine, and the host thread queueing the
    # records competed with them (a CI run saw the step's sqrt temporary still alive when its run started).
    torch.ops.neuron._queue_sleep(30000)


def test_queue_sleep_hook():
    # the test hook behind _busy(): a record that sleeps in queue order; bad durations are refused
    x = torch.ones(3, device="neuron")
    torch.ops.neuron._queue_sleep(1000)
    y = x + 1
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))
    for bad in (-1, 10**8):
        with pytest.raises(RuntimeError, match="_queue_sleep"):
            torch.ops.neuron._queue_sleep(bad)


def _adamw_params(dt, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(1000, 37), (5,), (3, 4, 5), (4097,), (1,), (300, 300)]
    ps = [torch.randn(s, generator=g).to(dt) for s in shapes]
    gs = [[torch.randn(s, generator=g).to(dt) for s in shapes] for _ in range(4)]
    return ps, gs


def _adamw_run(device, dt, fuse, dead=1, **kw):
    ps, gs = _adamw_params(dt)
    ps = [p.to(device).requires_grad_() for p in ps]
    opt = torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, **kw)
    old = _fuse()[0]
    if device == "neuron":
        _fuse(fuse, -1, dead)
    try:
        for step_grads in gs:
            for p, g in zip(ps, step_grads):
                p.grad = g.to(device)
            if device == "neuron":
                _busy()
            opt.step()
        if device == "neuron":
            torch.neuron.synchronize()
    finally:
        _fuse(old, -1, 1)
    return [p.detach().cpu() for p in ps], opt


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=str)
def test_adamw_default_step_fused(dt, neuron_ops):
    from torch.optim.optimizer import _default_to_fused_or_foreach
    probe = [torch.zeros(2, device="neuron", requires_grad=True)]
    assert _default_to_fused_or_foreach(probe, False, False)[1], "torch picks foreach for neuron"
    neuron_ops.clear_op_tracking()
    before = _fuse()
    fused, opt = _adamw_run("neuron", dt, 1)
    after = _fuse()
    assert after[3] - before[3] >= 8, (before, after)  # the step's records ran fused
    assert not neuron_ops.get_fallback_ops()
    # the sqrt temporary is freed by the time its run starts (the queue is busy): it stays in tile buffers
    assert after[5] > before[5], (before, after)
    in_memory, _ = _adamw_run("neuron", dt, 1, dead=0)
    assert _fuse()[5] == after[5]
    unfused, _ = _adamw_run("neuron", dt, 0)
    for a, b, c in zip(fused, unfused, in_memory):
        assert torch.equal(a, b)  # bit for bit what the op-by-op path computes
        assert torch.equal(a, c)
    cpu, _ = _adamw_run("cpu", dt, 1, foreach=True)  # the same foreach sequence on the CPU
    for a, b in zip(fused, cpu):
        if dt == torch.float32:
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
        else:
            torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)


def test_fusion_aliasing_matches_cpu():
    g = torch.Generator().manual_seed(5)
    base = torch.randn(3000, generator=g)
    a, b, c, d = (torch.randn(1000, generator=g) for _ in range(4))

    def seq(base, a, b, c, d):
        torch._foreach_mul_([a, b], 2.0)
        torch._foreach_add_([b, a], [c, d])              # a and b swap positions: must not fuse
        torch._foreach_addcmul_([c, d], [a, a], [b, b], value=0.5)
        x, y = base[0:1000], base[500:1500]              # overlapping views of one tensor
        torch._foreach_mul_([x], 3.0)
        torch._foreach_add_([y], [c], alpha=0.25)         # overlaps the previous op's output
        torch._foreach_mul_([d], [base[200:1200]])         # reads across both
        torch._foreach_sqrt_([base[2000:3000].abs_()])
        z = torch._foreach_div([c, d], [b, b])           # the same tensor twice in one list
        torch._foreach_lerp_([a, b], z, 0.3)
        return [base, a, b, c, d]

    want = seq(*(t.clone() for t in (base, a, b, c, d)))
    before = _fuse()
    dev = [t.to("neuron") for t in (base, a, b, c, d)]
    _busy()
    got = seq(*dev)
    torch.neuron.synchronize()
    after = _fuse()
    for x, y in zip(got, want):
        torch.testing.assert_close(x.cpu(), y, rtol=1e-6, atol=1e-6)
    assert after[2] > before[2]  # the runs that may fuse did


def test_fusion_sticky_error_mid_run():
    x = torch.ones(1000, device="neuron")
    y = torch.ones(1000, device="neuron")
    w = torch.randn(4, 3, device="neuron")
    _busy()
    torch._foreach_mul_([x], 3.0)
    with pytest.raises((RuntimeError, IndexError)):
        torch.nn.functional.embedding(torch.tensor([7], device="neuron"), w)  # fails on the device
        torch._foreach_add_([x, y], 1.0)                                     # skipped
        torch.neuron.synchronize()
    torch.neuron.synchronize()
    assert torch.equal(x.cpu(), torch.full((1000,), 3.0))
    assert torch.equal(y.cpu(), torch.ones(1000))
    torch._foreach_add_([x, y], 1.0)
    assert torch.equal(y.cpu(), torch.full((1000,), 2.0))


def test_fusion_off_and_tile_setting():
    old = _fuse()
    try:
        st = _fuse(0, 128)
        assert st[0] == 0 and st[1] == 128
        x = [torch.ones(300, device="neuron") for _ in range(3)]
        _busy()
        for _ in range(5):
            torch._foreach_mul_(x, 2.0)
        torch.neuron.synchronize()
        assert _fuse()[3] == st[3]  # nothing fused while off
        _fuse(1)
        _busy()
        for _ in range(5):
            torch._foreach_mul_(x, 0.5)
        torch.neuron.synchronize()
        assert all(torch.equal(t.cpu(), torch.ones(300)) for t in x)
    finally:
        _fuse(old[0], old[1])


@pytest.mark.parametrize("name", ["adamw_many", "adam_amsgrad", "sgd_nesterov", "rmsprop"])
def test_optimizers_fused_equal_op_by_op(name):
    # more tensors than one record holds (several records per op), clip_grad_norm_ between steps
    make = {
        "adamw_many": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, maximize=True),
        "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, weight_decay=0.01),
        "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=1e-4),
        "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5),
    }[name]

    def run(fuse):
        g = torch.Generator().manual_seed(0)
        shapes = [(int(n),) for n in torch.randint(1, 2000, (60,), generator=g)]
        ps = [torch.randn(s, generator=g).to("neuron").requires_grad_() for s in shapes]
        opt = make(ps)
        old = _fuse()[0]
        _fuse(fuse)
        try:
            for _ in range(3):
                for p in ps:
                    p.grad = torch.randn(p.shape, generator=g).to("neuron")
                _busy()
                torch.nn.utils.clip_grad_norm_(ps, 0.5)
                opt.step()
            torch.neuron.synchronize()
        finally:
            _fuse(old)
        return [p.detach().cpu() for p in ps]

    before = _fuse()
    fused = run(1)
    assert _fuse()[3] > before[3]
    for a, b in zip(fused, run(0)):
        assert torch.equal(a, b)
