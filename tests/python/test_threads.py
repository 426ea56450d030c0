"""Several Python threads using the device at once get the same results as running serially."""

import threading

import torch

N_OPS = 1000          # per thread: 250 rounds of add, mul, matmul, sub
SNAP_EVERY = 50       # rounds between copies back to the host (synchronizing calls)


def _inputs(seed, n=24):
    # x -> ((x + a) * m) @ w - c with m = +-1 and w orthogonal: norms neither explode nor shrink,
    # so an error anywhere in the chain stays visible at the end.
    g = torch.Generator().manual_seed(seed)
    w, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return {
        "x": torch.randn(n, n, generator=g),
        "a": torch.randn(n, n, generator=g) * 0.1,
        "m": torch.randint(0, 2, (n, n), generator=g).float() * 2 - 1,
        "w": w.float(),
        "c": torch.randn(n, generator=g) * 0.1,
    }


def _chain(inputs, device):
    t = {k: v.to(device) for k, v in inputs.items()}
    x, snaps = t["x"], []
    for i in range(N_OPS // 4):
        x = x + t["a"]
        x = x * t["m"]
        x = x @ t["w"]
        x = x - t["c"]
        if (i + 1) % SNAP_EVERY == 0:
            snaps.append(x.cpu())
    return x.cpu(), snaps


def _run_threads(fns, timeout=300):
    results, errors = [None] * len(fns), []

    def wrap(i, fn):
        try:
            results[i] = fn()
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i, fn), daemon=True) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


def _assert_same(parallel, serial):
    (xp, sp), (xs, ss) = parallel, serial
    assert len(sp) == len(ss) == N_OPS // 4 // SNAP_EVERY
    for a, b in zip(sp, ss):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(xp, xs, rtol=1e-6, atol=1e-6)


def test_two_threads_match_serial(device):
    ins = [_inputs(1), _inputs(2)]
    serial = [_chain(i, device) for i in ins]
    parallel = _run_threads([lambda i=i: _chain(i, device) for i in ins])
    for p, s in zip(parallel, serial):
        _assert_same(p, s)
    # and the device agrees with the CPU
    for i, s in zip(ins, serial):
        ref, _ = _chain(i, "cpu")
        # a long chain of float32 ops: the CPU's own rounding differs by machine (MKL's AVX2 and AVX-512
        # paths), 1.7e-5 on a Zen 3; the thread checks above are the exact ones
        torch.testing.assert_close(s[0], ref, rtol=1e-4, atol=5e-5)


def test_threads_on_their_own_streams_match_serial(device):
    ins = [_inputs(3), _inputs(4), _inputs(5)]
    serial = [_chain(i, device) for i in ins]

    def on_stream(inputs):
        s = torch.Stream(device=device)
        with s:
            out = _chain(inputs, device)
        s.synchronize()
        return out

    parallel = _run_threads([lambda i=i: on_stream(i) for i in ins])
    for p, s in zip(parallel, serial):
        _assert_same(p, s)


def test_threads_sharing_one_input(device):
    # both threads read the same device tensor while each writes only its own
    shared = torch.randn(64, 64).to(device)
    ref = (shared @ shared).cpu()

    def work(k):
        acc = torch.zeros(64, 64, device=device)
        for _ in range(200):
            acc.add_(shared @ shared, alpha=k)
        return acc.cpu()

    r1, r2 = _run_threads([lambda: work(1.0), lambda: work(2.0)])
    torch.testing.assert_close(r1, ref * 200, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(r2, ref * 400, rtol=1e-4, atol=1e-3)
