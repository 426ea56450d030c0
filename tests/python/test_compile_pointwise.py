"""Compiled pointwise ops compute what the eager kernels compute, bit for bit (issue 17 item 5).

Both call the scalar formula of csrc/kernels/pointwise_scalar.inc: the eager kernels directly, compiled
programs through the prelude (pwf_scalar / pwd_scalar with a constant op).  The comparison runs in a
child with NEURON_KERNELS=portable (the eager scalar path, not the AVX-512 loops that approximate
exp/tanh/gelu) and NEURON_COMPILE_SCALAR_LIBM=1 (programs call the scalar libm the eager kernels call
instead of libmvec's vector variants, which are a few ulp apart), over edge values: NaN, +-inf, +-0,
subnormals, large and small magnitudes.  One graph per dtype holds every op (a few seconds each).
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(r'''
    import math, sys, torch, torchneuron
    A = torch.ops.aten
    edge = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-30, -1e-30, 1e30, -1e30, 3.0e38,
            -3.0e38, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 3.0, -3.0, 0.999, -0.999, 88.7, -103.9, 709.0, 1e-5]
    g = torch.Generator().manual_seed(0)
    rnd = (torch.rand(64, generator=g, dtype=torch.float64) - 0.5) * 16

    def ops(x, y, z, c):
        w = torch.full_like(x, 0.3)
        return {
            "exp": x.exp(), "exp2": x.exp2(), "expm1": x.expm1(), "log": x.log(), "log2": x.log2(),
            "log10": x.log10(), "log1p": x.log1p(), "sqrt": x.sqrt(), "rsqrt": x.rsqrt(), "sin": x.sin(),
            "cos": x.cos(), "tan": x.tan(), "asin": x.asin(), "acos": x.acos(), "atan": x.atan(),
            "sinh": x.sinh(), "cosh": x.cosh(), "tanh": x.tanh(), "asinh": x.asinh(), "acosh": x.acosh(),
            "atanh": x.atanh(), "erf": x.erf(), "erfc": x.erfc(), "floor": x.floor(), "ceil": x.ceil(),
            "trunc": x.trunc(), "round": x.round(), "frac": x.frac(), "neg": -x, "abs": x.abs(),
            "sign": x.sign(), "reciprocal": x.reciprocal(), "square": x.square(), "sigmoid": x.sigmoid(),
            "relu": x.relu(), "gelu": torch.nn.functional.gelu(x),
            "gelu_tanh": torch.nn.functional.gelu(x, approximate="tanh"), "isnan": x.isnan(),
            "isinf": x.isinf(), "isfinite": x.isfinite(),
            "add": x + y, "add_alpha": torch.add(x, y, alpha=0.7), "sub": x - y,
            "sub_alpha": torch.sub(x, y, alpha=1.3), "rsub": torch.rsub(x, y, alpha=0.7), "mul": x * y,
            "div": x / y, "div_trunc": torch.div(x, y, rounding_mode="trunc"),
            "div_floor": torch.div(x, y, rounding_mode="floor"), "remainder": torch.remainder(x, y),
            "fmod": torch.fmod(x, y), "pow": torch.pow(x, y), "atan2": torch.atan2(x, y),
            "hypot": torch.hypot(x, y), "copysign": torch.copysign(x, y), "maximum": torch.maximum(x, y),
            "minimum": torch.minimum(x, y), "fmax": torch.fmax(x, y), "fmin": torch.fmin(x, y),
            "eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y,
            # aten's own ops: Dynamo rewrites torch.addcdiv/addcmul(value=v) into add(x, y * z, alpha=v)
            "addcmul": A.addcmul(x, y, z, value=0.7), "addcdiv": A.addcdiv(x, y, z, value=0.7),
            "lerp": torch.lerp(x, y, w), "where": torch.where(c, x, y),
            "clamp": torch.clamp(x, y, z), "clamp_min": torch.clamp(x, min=y), "clamp_max": torch.clamp(x, max=z),
            "clamp_scalar": torch.clamp(x, -1.5, 2.0), "clamp_nan_min": torch.clamp(x, min=math.nan),
            "clamp_nan_max": torch.clamp(x, max=math.nan),
            "sigmoid_backward": A.sigmoid_backward(x, y), "tanh_backward": A.tanh_backward(x, y),
            "threshold_backward": A.threshold_backward(x, y, 0.5),
        }

    bad = []
    for dt in (torch.float32, torch.float64, torch.bfloat16):
        base = torch.cat([torch.tensor(edge, dtype=torch.float64), rnd]).to(dt)
        n = base.numel()
        x = torch.stack([base.roll(k) for k in range(n)])          # every pair of values
        y = base.expand(n, n).contiguous()
        z = base.flip(0).expand(n, n).contiguous()
        c = x > y
        args = [t.to("neuron") for t in (x, y, z, c)]
        eager = ops(*args)
        torch._dynamo.reset()
        compiled = torch.compile(ops, backend="neuron", fullgraph=True)(*args)
        for name, e in eager.items():
            e, k = e.cpu(), compiled[name].cpu()
            if e.dtype.is_floating_point:
                same = (e.isnan() & k.isnan()) | (e.view(torch.int16 if e.element_size() == 2 else
                        torch.int32 if e.element_size() == 4 else torch.int64) ==
                        k.view(torch.int16 if k.element_size() == 2 else
                        torch.int32 if k.element_size() == 4 else torch.int64))
            else:
                same = e == k
            if not bool(same.all()):
                i = (~same).nonzero()[0].tolist()
                bad.append(f"{name} {dt}: {int((~same).sum())} differ, e.g. x={x[tuple(i)].item()!r} "
                           f"y={y[tuple(i)].item()!r} eager={e[tuple(i)].item()!r} compiled={k[tuple(i)].item()!r}")
    from torchneuron.compile import compile_stats
    print("GRAPHS", [(g["name"], g["compiled"]) for g in compile_stats()["graphs"]])
    print("\n".join(bad) if bad else "ALL SAME")
    import os; os._exit(0)
''')


def test_compiled_pointwise_ops_equal_eager_bit_for_bit(tmp_path):
    env = {**os.environ, "NEURON_KERNELS": "portable", "NEURON_COMPILE_SCALAR_LIBM": "1",
           "NEURON_CACHE_DIR": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=str(ROOT), capture_output=True, text=True,
                       timeout=600)
    report = f"exit {p.returncode}\n{p.stdout}\n{p.stderr[-4000:]}"
    assert p.returncode == 0, report
    assert "GRAPHS" in p.stdout and "False" not in p.stdout.split("GRAPHS", 1)[1].splitlines()[0], report
    assert p.stdout.strip().endswith("ALL SAME"), report
