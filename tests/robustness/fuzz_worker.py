"""Runs fuzz cases in this process: python -m tests.robustness.fuzz_worker SEED...

For each seed: `START seed` (so that the parent knows which case was running when this process died
or hung), the case on the CPU, then on neuron (followed by a synchronize, so an asynchronous error is
reported against the case), a canary on the device after a neuron error, and one `RESULT {json}` line.
A failed canary ends the process (the parent starts a fresh one).
"""
import json
import math
import os
import re
import sys
import warnings

from .fuzz_ops import FLOATS, generate

TOL = {"float64": (1e-9, 1e-12), "float32": (2e-5, 1e-6), "float16": (2e-3, 1e-4), "bfloat16": (1.6e-2, 1e-3)}


def _first_line(e):
    s = str(e).strip().splitlines()
    return s[0][:300] if s else ""


def _make(torch, t, seed):
    """The CPU tensor of spec t (values from a generator seeded by the case), and the view that gives it
    its layout from a contiguous base (applied on each device)."""
    g = torch.Generator().manual_seed(seed)
    shape = list(t.shape)
    base_shape, view = list(shape), (lambda b: b)
    if t.layout == "t" and len(shape) >= 2:
        base_shape[-1], base_shape[-2] = shape[-2], shape[-1]
        view = lambda b: b.transpose(-1, -2)  # noqa: E731
    elif t.layout == "step" and shape:
        base_shape[-1] = 2 * shape[-1]
        view = lambda b: b[..., ::2]  # noqa: E731
    elif t.layout == "offset" and shape:
        base_shape[0] = shape[0] + 1
        view = lambda b: b[1:]  # noqa: E731
    elif t.layout == "expand" and shape:
        keep = next((i for i, d in enumerate(shape) if d != 1), 0)
        base_shape = [d if i == keep else 1 for i, d in enumerate(shape)]
        view = lambda b: b.expand(shape)  # noqa: E731
    n = math.prod(base_shape)
    dt = getattr(torch, t.dtype)
    kind, _, arg = t.vals.partition(":")
    if kind in ("index", "uindex", "perm"):
        if kind == "perm":  # distinct along dim arg (values below that dim's size)
            d = int(arg)
            v = torch.rand(base_shape, generator=g).argsort(dim=d) if n else torch.zeros(base_shape, dtype=torch.long)
        elif kind == "uindex" and n <= int(arg):
            v = torch.randperm(int(arg), generator=g)[:n].reshape(base_shape)
        else:
            b = int(arg)
            u = torch.rand((), generator=g).item()
            lo, hi = (0, b) if u < 0.85 or kind == "uindex" else (-b, b) if u < 0.95 else (-3 * b, 3 * b + 1)
            v = torch.randint(lo, hi, base_shape, generator=g)
        return v.to(dt), view
    if t.dtype == "bool" or kind == "mask":
        return (torch.rand(base_shape, generator=g) < 0.5).to(dt), view
    if t.dtype in FLOATS:
        if kind == "pos":
            v = torch.rand(base_shape, generator=g, dtype=torch.float64) * 4 + 0.125
        else:
            v = torch.randn(base_shape, generator=g, dtype=torch.float64) * (0.7 if kind == "small" else 3)
            special = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1.0, -1.0, 1e30], dtype=torch.float64)
            pick = torch.rand(base_shape, generator=g) < 0.06
            if pick.any():
                v[pick] = special[torch.randint(0, len(special), (int(pick.sum()),), generator=g)]
        return v.to(dt), view
    lo, hi = (-2, 3) if kind == "small" else (-6, 7)
    if t.dtype == "uint8":
        lo, hi = 0, 12
    if kind == "pos":
        lo = 1
    v = torch.randint(lo, hi, base_shape, generator=g)
    if t.dtype == "int8" and n and torch.rand((), generator=g).item() < 0.1:
        v.view(-1)[0] = 127  # an overflow now and then
    return v.to(dt), view


def _inputs(torch, case, dev, prep=None):
    xs = []
    for i, t in enumerate(case.inputs):
        base, view = _make(torch, t, case.seed * 31 + i)
        if t.cpu_scalar:
            x = base.reshape(())
        else:
            x = view(base.to(dev) if dev != "cpu" else base)
        xs.append(prep(x) if prep else x)
    return xs


def _out_like(torch, ref, how, dev):
    if isinstance(ref, (tuple, list)):
        return tuple(_out_like(torch, r, how, dev) for r in ref)
    if not torch.is_tensor(ref):
        return torch.empty(0, device=dev)
    if how == "empty":
        return torch.empty(0, dtype=ref.dtype, device=dev)
    if how == "dtype":
        other = {torch.float32: torch.float64, torch.bool: torch.int64}.get(ref.dtype, torch.float32)
        return torch.full(ref.shape, 7, dtype=other, device=dev)
    if how == "like_t" and ref.dim() >= 2:
        s = list(ref.shape)
        s[-1], s[-2] = s[-2], s[-1]
        return torch.full(s, 7, dtype=ref.dtype, device=dev).transpose(-1, -2)
    return torch.full(ref.shape, 7, dtype=ref.dtype, device=dev)


def _eval(torch, case, expr, xs, o=None):
    import torch.nn.functional as F
    ns = {"torch": torch, "F": F, "o": o}
    ns.update({f"x{i}": x for i, x in enumerate(xs)})
    return eval(expr, ns)


def _to_cpu(torch, v):
    if torch.is_tensor(v):
        return v.detach().cpu()
    if isinstance(v, (list, tuple)):
        return [_to_cpu(torch, x) for x in v]
    return v


def run_side(torch, case, dev, ref=None, prep=None):
    """(value on the CPU, error dict) of the case on dev (prep: applied to each input first)."""
    try:
        xs = _inputs(torch, case, dev, prep)
        o = None
        if case.variant == "out":
            o = _out_like(torch, ref, case.out, dev)
        v = _eval(torch, case, case.expr, xs, o)
        if dev != "cpu":
            torch.neuron.synchronize()
        return _to_cpu(torch, v), None
    except Exception as e:  # noqa: BLE001 - what the op raises is the result
        return None, {"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__], "msg": _first_line(e)}


def close(torch, a, b, case):
    """None when the neuron value b matches the CPU's a, else a short reason."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        if not (torch.is_tensor(a) and torch.is_tensor(b)):
            return f"tensor vs {type(b).__name__}"
        if a.dtype != b.dtype:
            return f"dtype {b.dtype} (neuron) vs {a.dtype} (cpu)"
        if a.shape != b.shape:
            return f"shape {tuple(b.shape)} (neuron) vs {tuple(a.shape)} (cpu)"
        if not a.is_floating_point():
            if torch.equal(a, b):
                return None
            bad = (a != b).nonzero()[0].tolist()
            return f"values differ at {bad}: neuron {b[tuple(bad)].item()} cpu {a[tuple(bad)].item()}"
        name = str(a.dtype).replace("torch.", "")
        rtol, atol = TOL.get(name, (1e-2, 1e-2))
        a64, b64 = a.double(), b.double()
        fin = a64.isfinite()
        scale = a64[fin].abs().max().item() if fin.any() else 1.0
        rtol, atol = rtol * case.tol, atol * case.tol * max(1.0, scale)
        if not torch.equal(a64.isnan(), b64.isnan()):
            bad = (a64.isnan() != b64.isnan()).nonzero()[0].tolist()
            return f"NaN differs at {bad}: neuron {b64[tuple(bad)].item()} cpu {a64[tuple(bad)].item()}"
        inf = a64.isinf() | b64.isinf()
        if not torch.equal(a64[inf], b64[inf]):
            bad = ((a64 != b64) & inf).nonzero()[0].tolist()
            return f"Inf differs at {bad}: neuron {b64[tuple(bad)].item()} cpu {a64[tuple(bad)].item()}"
        ok = fin & b64.isfinite()
        err = (a64[ok] - b64[ok]).abs() - (atol + rtol * a64[ok].abs())
        if err.numel() and err.max().item() > 0:
            i = err.argmax().item()
            return f"values differ: neuron {b64[ok][i].item()} cpu {a64[ok][i].item()} (tol {atol:.2g} + {rtol:.2g}*|x|)"
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"length {len(b)} (neuron) vs {len(a)} (cpu)"
        for i, (x, y) in enumerate(zip(a, b)):
            if case.cmp == "first" and i > 0:
                continue  # the indices of sort/topk/kthvalue/median: ties make them ambiguous
            r = close(torch, x, y, case)
            if r:
                return f"[{i}] {r}"
        return None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    return None if a == b else f"neuron {b!r} vs cpu {a!r}"


def _norm_msg(s):
    s = re.sub(r"neuron(:\d+)?|_neuron\b|Neuron|PrivateUse1|\bcpu\b|_cpu\b|CPU", "DEV", s)
    return re.sub(r"^(DEV: )?(synchronize: )?(aten::[\w.]+: )?", "", s)


def judge(torch, case, cpu_val, cpu_err, val, err):
    """(verdict, reason): matched | extra | wrong | type | message."""
    if cpu_err is not None:
        if err is None:
            if cpu_err["type"] == "NotImplementedError" or "not implemented for" in cpu_err["msg"]:
                return "extra", "neuron computes what the CPU has no kernel for"
            return "wrong", f"no error where the CPU raises {cpu_err['type']}"
        if cpu_err["type"] not in err["mro"]:
            return "type", f"{err['type']} where the CPU raises {cpu_err['type']}"
        a, b = _norm_msg(cpu_err["msg"]), _norm_msg(err["msg"])
        if a and a not in b:
            return "message", "message differs from the CPU's"
        return "matched", ""
    if err is not None:
        return "type", f"raises {err['type']} where the CPU succeeds"
    r = close(torch, cpu_val, val, case)
    return ("wrong", r) if r else ("matched", "")


def _cast_like(torch, v, ref):
    if torch.is_tensor(v) and torch.is_tensor(ref):
        return v.to(ref.dtype)
    if isinstance(v, list) and isinstance(ref, list) and len(v) == len(ref):
        return [_cast_like(torch, x, r) for x, r in zip(v, ref)]
    return v


def second_opinion(torch, case, val, reason):
    """A neuron value that differs from the CPU's: is the CPU's own value off?  The CPU again with
    contiguous inputs (its kernels have layout bugs: median of an expanded tensor reads garbage), and
    in float64 (rounded to the dtype at the end: a bfloat16 GEMM that overflows to NaN where the exact
    sum is inf).  Neuron matching either is the verdict "cpu" (the CPU's error), else "wrong"."""
    for how, prep in (("contiguous", lambda x: x.contiguous()),
                      ("float64", lambda x: x.double() if x.is_floating_point() else x)):
        v, e = run_side(torch, case, "cpu", prep=prep)
        if e is None:
            ref, _ = run_side(torch, case, "cpu")
            v = _cast_like(torch, v, ref)
            if close(torch, v, val, case) is None:
                return "cpu", f"the CPU's own value is off ({reason}); neuron equals the CPU on {how} inputs"
    return "wrong", reason


def canary(torch):
    try:
        x = torch.arange(64.).reshape(8, 8) / 7
        want = (x @ x).sum().item()
        xd = x.to("neuron")
        got = (xd @ xd).sum().item()
        torch.neuron.synchronize()
        return None if abs(got - want) <= 1e-3 * abs(want) else f"canary value {got} != {want}"
    except Exception as e:  # noqa: BLE001
        return f"canary raised {type(e).__name__}: {_first_line(e)}"


def run_case(torch, seed):
    case = generate(seed)
    cpu_ref = None
    if case.variant == "out":  # the out= tensor is shaped like the CPU's functional result
        import dataclasses
        fcase = dataclasses.replace(case, variant="functional", expr=case.expr.replace(", out=o)", ")"))
        cpu_ref, _ = run_side(torch, fcase, "cpu")
    cpu_val, cpu_err = run_side(torch, case, "cpu", cpu_ref)
    val, err = run_side(torch, case, "neuron", cpu_ref)
    try:
        verdict, reason = judge(torch, case, cpu_val, cpu_err, val, err)
        if verdict == "wrong" and cpu_err is None and err is None and case.variant == "functional":
            verdict, reason = second_opinion(torch, case, val, reason)
    except Exception as e:  # noqa: BLE001 - a harness error is reported, not a crash
        verdict, reason = "harness", f"could not compare: {type(e).__name__}: {_first_line(e)}"
    can = canary(torch) if err is not None else None
    if can:
        verdict, reason = "canary", f"{can} (case: {verdict} {reason})"
    return {"seed": seed, "op": case.op, "family": case.family, "variant": case.variant, "verdict": verdict,
            "reason": reason, "cpu": cpu_err, "neuron": err}


def main(seeds):
    warnings.simplefilter("ignore")
    import torch
    torch.set_num_threads(1)
    abort_at = os.environ.get("FUZZ_SELFTEST_ABORT")  # tests/python/test_fuzz.py: a planted crash
    for s in seeds:
        print(f"START {s}", flush=True)
        if abort_at == str(s):
            os.abort()
        res = run_case(torch, s)
        print("RESULT " + json.dumps(res), flush=True)
        if res["verdict"] == "canary":
            return


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]])
