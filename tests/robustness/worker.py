"""Runs catalogue cases in this process: python -m tests.robustness.worker NAME...

For each case: the snippet on the CPU, then on neuron (followed by a synchronize, so an
asynchronous error is reported against the case), then the canary on the device.  Prints one
`RESULT {json}` line per case as it finishes, so that the parent knows where a crash happened.
"""
import io
import json
import math
import re
import sys
import traceback
import warnings

from .catalogue import CASES


def _first_line(e):
    s = str(e).strip().splitlines()
    return s[0][:300] if s else ""


def _exc(e):
    return {"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__], "msg": _first_line(e)}


def _to_cpu(v, torch):
    if torch.is_tensor(v):
        return v.detach().cpu()
    if isinstance(v, (list, tuple)):
        return [_to_cpu(x, torch) for x in v]
    if isinstance(v, (bool, int, float, str, type(None))):
        return v
    if hasattr(v, "_asdict"):
        return [_to_cpu(x, torch) for x in v]
    if isinstance(v, dict):
        return {k: _to_cpu(x, torch) for k, x in sorted(v.items())}
    return repr(type(v))


def _same(a, b, torch):
    """None when equal, else a short reason."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        if not (torch.is_tensor(a) and torch.is_tensor(b)):
            return f"tensor vs {type(a if not torch.is_tensor(a) else b).__name__}"
        if a.dtype != b.dtype:
            return f"dtype {b.dtype} (neuron) vs {a.dtype} (cpu)"
        if a.shape != b.shape:
            return f"shape {tuple(b.shape)} (neuron) vs {tuple(a.shape)} (cpu)"
        if a.is_floating_point() or a.is_complex():
            if a.dtype in (torch.half, torch.bfloat16) or "float8" in str(a.dtype):
                a, b = a.float(), b.float()
            if a.is_complex():  # compared as (re, im) pairs: isinf & (x > 0) needs an order
                a, b = torch.view_as_real(a.resolve_conj()), torch.view_as_real(b.resolve_conj())
            ok = torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
            ok = ok and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.isinf() & (a > 0), b.isinf() & (b > 0))
        else:
            ok = torch.equal(a, b)
        return None if ok else f"values differ: neuron {b.flatten()[:6].tolist()} cpu {a.flatten()[:6].tolist()}"
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return "length differs"
        for x, y in zip(a, b):
            r = _same(x, y, torch)
            if r:
                return r
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        if sorted(a) != sorted(b):
            return "keys differ"
        return _same(list(a.values()), list(b.values()), torch)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    return None if a == b else f"neuron {b!r} vs cpu {a!r}"


def _run(code, dev, torch):
    import torch.nn.functional as F
    ns = {"torch": torch, "F": F, "math": math, "io": io, "dev": dev, "cpu": "cpu"}
    try:
        exec(compile(code, "<case>", "exec"), ns)
        out = ns.get("out")
        if dev != "cpu":
            torch.neuron.synchronize()
        return _to_cpu(out, torch), None
    except BaseException as e:  # noqa: BLE001 - everything the snippet raises is the result
        if isinstance(e, KeyboardInterrupt):
            raise
        return None, _exc(e)


def _msg_matches(cpu_msg, our_msg, pattern):
    if pattern and re.search(pattern, our_msg):
        return True
    if not cpu_msg:
        return True
    norm = lambda s: re.sub(r"\bcpu\b|_cpu\b|CPU", "DEV", re.sub(r"neuron(:\d+)?|_neuron\b|Neuron|PrivateUse1", "DEV", s))
    return cpu_msg == our_msg or cpu_msg in our_msg or norm(cpu_msg) == norm(our_msg) or norm(cpu_msg) in norm(our_msg)


def judge(case, cpu_val, cpu_err, val, err, torch):
    """(verdict, reason): matched | differs | wrong."""
    exp = case.expect
    if isinstance(exp, tuple) and exp[0] == "raises":
        tname = exp[1] if isinstance(exp[1], str) else exp[1].__name__
        if err is None:
            return "wrong", f"no error (expected {tname})"
        if tname not in err["mro"]:
            return "differs", f"{err['type']} instead of {tname}"
        if not re.search(exp[2], err["msg"]):
            return "differs", f"message does not match /{exp[2]}/"
        return "matched", ""
    if isinstance(exp, tuple) and exp[0] == "env":
        if err is not None:
            if err["type"] == "RuntimeError" or "RuntimeError" in err["mro"]:
                if exp[1] in err["msg"]:
                    return "matched", ""
                return "differs", f"the error does not name {exp[1]}"
            return "differs", f"{err['type']} (expected RuntimeError naming {exp[1]} or the default)"
        if cpu_err is not None:
            return "differs", "the CPU reference failed"
        r = _same(cpu_val, val, torch)
        return ("wrong", r) if r else ("matched", "")
    # "cpu" and "ok"
    if cpu_err is not None and exp == "cpu":
        if err is None:
            return "wrong", "no error where the CPU raises"
        if cpu_err["type"] not in err["mro"]:
            return "differs", f"{err['type']} where the CPU raises {cpu_err['type']}"
        if not _msg_matches(cpu_err["msg"], err["msg"], case.pattern):
            return "differs", "message differs from the CPU's"
        return "matched", ""
    if cpu_err is not None:  # "ok" whose CPU run failed: judge the neuron run alone
        return ("matched", "") if err is None else ("differs", f"raises {err['type']}")
    if err is not None:
        return "differs", f"raises {err['type']} where the CPU succeeds"
    r = _same(cpu_val, val, torch)
    return ("wrong", r) if r else ("matched", "")


def canary(torch):
    try:
        x = torch.arange(64.).reshape(8, 8) / 7
        want = (x @ x).sum().item()
        xd = x.to("neuron")
        got = (xd @ xd).sum().item()
        torch.neuron.synchronize()
        if abs(got - want) > 1e-3 * abs(want):
            return f"canary value {got} != {want}"
        return None
    except Exception as e:  # noqa: BLE001
        return f"canary raised {type(e).__name__}: {_first_line(e)}"


def main(names):
    warnings.simplefilter("ignore")
    by_name = {c.name: c for c in CASES}
    import_err = None
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        import_err = _exc(e)
    for n in names:
        c = by_name[n]
        if import_err is not None:
            res = {"name": n, "verdict": "differs", "reason": "import torch failed", "neuron": import_err}
            print("RESULT " + json.dumps(res), flush=True)
            continue
        # a snippet naming 'neuron' itself (streams, OOM, a second device) has no CPU run
        skip_cpu = "'neuron" in c.code
        cpu_val, cpu_err = (None, None) if skip_cpu else _run(c.code, "cpu", torch)
        val, err = _run(c.code, "neuron", torch)
        try:
            if err is not None and err["type"] == "TimeoutError" and err["msg"].startswith("hang:"):
                verdict, reason = "hang", err["msg"]
            elif skip_cpu and c.expect == "ok":
                verdict, reason = ("matched", "") if err is None else ("differs", f"raises {err['type']}")
            else:
                verdict, reason = judge(c, cpu_val, cpu_err, val, err, torch)
        except Exception as e:  # noqa: BLE001 - a harness error is reported, not a crash
            verdict, reason = "differs", f"harness could not compare: {type(e).__name__}: {_first_line(e)}"
        # garbage in a variable the runtime refuses: the device is (by design) not usable afterwards
        refused = isinstance(c.expect, tuple) and c.expect[0] == "env" and err is not None and c.expect[1] in err["msg"]
        can = None if refused else canary(torch)
        if can:
            verdict, reason = "canary", can + (f" (case: {verdict} {reason})" if reason else "")
        res = {"name": n, "verdict": verdict, "reason": reason, "cpu": cpu_err, "neuron": err}
        print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
