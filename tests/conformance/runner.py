"""One op_db entry, one dtype at a time: sample inputs on `neuron` and on the CPU, compared.

For each dtype the entry claims for the CPU (among tolerances.DTYPES) the runner takes up to
`Limits.samples` of the entry's sample inputs (evenly spaced over the first `Limits.pool`), and for
each sample:
  * forward: op(sample) on CPU and on neuron (inputs copied with their strides), outputs compared;
  * backward: when the entry supports autograd for the dtype, the gradients of every input that
    requires grad, for one fixed random cotangent per output, compared;
  * non-contiguous: the first `Limits.noncontig` samples again through SampleInput.noncontiguous()
    (forward, and backward where supported).
The neuron run is bracketed by torchneuron's op tracking, so each sample records the ATen ops that
ran natively and those that fell back to the CPU.

Then the contracts of the entry's variants, on the first `Limits.contract` samples of each dtype (and,
for in-place, every sample that broadcasts its input), as PyTorch's test_ops checks them
(test_out, test_variant_consistency_eager):
  * out-dtype   out= of a dtype the result cannot be cast to (floating -> int64, integral -> bool);
  * out-device  out= on the CPU with neuron inputs: PyTorch raises "Expected all tensors to be on the
                same device" (CUDA's generated wrappers and TensorIterator; the CPU cannot run it), and
                the CPU tensor stays untouched; only for ops bound from ATen (a Python-level op such as
                torch.lu copies its result into out= itself, to any device);
  * out-resize  out= of the right dtype but another, non-empty shape: resized, with ATen's warning;
  * inplace     the in-place variant on a copy of the input: raises where the CPU raises (a result
                that does not broadcast to self), otherwise self, updated, with the CPU's shape.
Each compares neuron with the CPU: the same decision to raise, and when neither raises the same
values (out tensors returned, resize warning given, self not resized).  A check whose sample the CPU
rejects outright (the plain call raises) is not counted.

A sample's outcome is one of:
  pass       results equal within tolerances.tolerance(dtype)
  mismatch   neuron returned without an error but a result differs (a wrong answer)
  error      neuron raised where the CPU did not
  cpu_error  the CPU raised (the sample is not valid there); neuron raising too counts as pass
"""
import contextlib
import math
import signal
import time
import traceback
import types
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import skips
from .tolerances import COMPLEX_DTYPES, DTYPES, GRAD_FACTOR, SHORT, tolerance

DEV = "neuron"


@dataclass
class Limits:
    samples: int = 32       # samples per (entry, dtype)
    pool: int = 64          # samples drawn from the generator to choose from
    noncontig: int = 4      # non-contiguous variants per (entry, dtype)
    sample_timeout: int = 20  # seconds per sample (SIGALRM; the sweep's parent also has a watchdog)
    entry_budget: float = 40.0  # seconds per entry: remaining dtypes are cut short, marked truncated
    contract: int = 2       # samples per (entry, dtype) for the out= and in-place contract checks


def entry_key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def swept_dtypes(op):
    claimed = op.supported_dtypes("cpu")
    dts = DTYPES + (COMPLEX_DTYPES if entry_key(op) in skips.COMPLEX_ENTRIES else [])
    return [d for d in dts if d in claimed]


# ---- moving samples ------------------------------------------------------------------------------

def _to_device_strided(t, dev):
    """A copy of t on dev with the same sizes, strides, storage offset and storage contents (so
    non-contiguous and overlapping layouts reach the device as they are, and ops that read the
    storage, like as_strided, see the same bytes); requires_grad kept, as a leaf."""
    with torch.no_grad():
        n = t.untyped_storage().nbytes() // t.element_size()
        extent = t.storage_offset() + 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
        if t.numel() == 0 or n < extent:  # (a storage smaller than the view would be a bug upstream)
            r = t.detach().to(dev)
        else:
            flat = torch.as_strided(t.detach(), (n,), (1,), 0)
            flat = flat.clone() if torch.device(dev) == t.device else flat.to(dev)
            r = flat.as_strided(t.shape, t.stride(), t.storage_offset())
    return r.requires_grad_(t.requires_grad)


def _is_cpu_device(v):
    return (isinstance(v, str) and v == "cpu") or (isinstance(v, torch.device) and v.type == "cpu")


def _move(x, dev):
    if isinstance(x, torch.Tensor):
        return _to_device_strided(x, dev)
    if _is_cpu_device(x):  # factory kwargs: device="cpu"
        return torch.device(dev)
    return x


def move_sample(sample, dev, keep_args=()):
    """(input, args, kwargs) of sample on dev; args at positions keep_args stay where they are."""
    def m(v):
        return tree_map(lambda x: _move(x, dev), v)
    args = tuple(a if i in keep_args else m(a) for i, a in enumerate(sample.args))
    return m(sample.input), args, m(dict(sample.kwargs))


# ---- comparing results ---------------------------------------------------------------------------

class Mismatch(Exception):
    pass


def compare(actual, expected, grad=False, what="output", tol=None, device=True):
    """Raise Mismatch unless actual (from neuron) equals expected (from CPU) leaf by leaf.
    tol: {dtype: (rtol, atol)} overriding tolerances.tolerance for those dtypes (skips.TOLERANCE);
    device: check that results the CPU returns on the CPU come back on neuron."""
    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        raise Mismatch(f"{what}: structure differs: {a_spec} vs {e_spec}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        where = f"{what}[{i}]" if len(e_leaves) > 1 else what
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise Mismatch(f"{where}: expected a tensor, got {type(a).__name__}")
            if device and e.device.type == "cpu" and a.device.type != DEV and e.numel() > 0:
                raise Mismatch(f"{where}: result on {a.device}, expected on {DEV}")
            rtol, atol = tolerance(e.dtype, grad)
            if tol and e.dtype in tol:
                rtol, atol = tol[e.dtype]
                if grad:
                    rtol, atol = rtol * GRAD_FACTOR, atol * GRAD_FACTOR
            try:
                torch.testing.assert_close(a.detach().cpu(), e.detach(), rtol=rtol, atol=atol, equal_nan=True,
                                           check_device=False, check_layout=False)
            except AssertionError as ex:
                raise Mismatch(f"{where}: {_first_lines(str(ex), 4)}") from None
        elif a is None or e is None:
            if (a is None) != (e is None):
                raise Mismatch(f"{where}: {a!r} vs {e!r}")
        elif isinstance(e, float) and isinstance(a, (int, float)):
            if not (math.isclose(a, e, rel_tol=1e-6, abs_tol=1e-6) or (math.isnan(a) and math.isnan(e))):
                raise Mismatch(f"{where}: {a!r} vs {e!r}")
        elif a != e:
            raise Mismatch(f"{where}: {a!r} vs {e!r}")


def _first_lines(s, n):
    return " | ".join(line.strip() for line in s.strip().splitlines()[:n])


# ---- running one sample --------------------------------------------------------------------------

class SampleTimeout(Exception):
    pass


@contextlib.contextmanager
def alarm(seconds):
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum, frame):
        raise SampleTimeout(f"sample took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _diff_outputs(out, sample):
    if sample.output_process_fn_grad is not None:
        out = sample.output_process_fn_grad(out)
    leaves, _ = tree_flatten(out)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad
            and (t.dtype.is_floating_point or t.dtype.is_complex)]


def _grad_inputs(args):
    leaves, _ = tree_flatten(args)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def _cotangents(outs, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, dtype=o.dtype, generator=g) for o in outs]


def _run(fn, args, sample, want_grad, cots):
    """forward (and gradients) of fn on args = (input, args, kwargs)."""
    inp, a, kw = args
    out = fn(inp, *a, **kw)
    grads = None
    if want_grad:
        outs = _diff_outputs(out, sample)
        ins = _grad_inputs(args)
        if outs and ins:
            if cots is None:
                cots = _cotangents(outs, 1234)
            cs = [c.to(o.device) for c, o in zip(cots, outs)]
            grads = torch.autograd.grad(outs, ins, cs, allow_unused=True)
    return out, grads, cots


def run_sample(op, sample, dtype, want_grad, shape_only, timeout, tracker, tol=None):
    """-> dict(outcome, msg, fallback: set, native: set).  shape_only: compare shapes/dtypes only;
    tol: per-dtype tolerance overrides (see compare)."""
    rec = {"outcome": "pass", "msg": "", "fallback": set(), "native": set()}
    fn = op.op
    try:
        with alarm(timeout):
            keep = skips.CPU_ARGS.get(entry_key(op), ((), ""))[0]
            dev_args = move_sample(sample, DEV, keep)
            torch.neuron.synchronize()
    except Exception as e:  # moving the inputs failed: a copy bug
        rec.update(outcome="error", msg=f"moving inputs: {_exc(e)}")
        return rec
    if not _on_device(dev_args):  # e.g. a factory sample without a device argument: runs on the CPU twice
        rec.update(outcome="cpu_error", msg="sample has nothing on neuron")
        return rec
    # CPU reference
    try:
        with alarm(timeout):
            cpu_args = (sample.input, tuple(sample.args), dict(sample.kwargs))
            out_c, grads_c, cots = _run(fn, cpu_args, sample, want_grad, None)
        cpu_exc = None
    except SampleTimeout:
        rec.update(outcome="cpu_error", msg="CPU reference timed out")
        return rec
    except Exception as e:
        cpu_exc = e
    # neuron
    tracker.clear_op_tracking()
    try:
        with alarm(timeout):
            out_n, grads_n, _ = _run(fn, dev_args, sample, want_grad and cpu_exc is None,
                                     None if cpu_exc else cots)
            torch.neuron.synchronize()
        dev_exc = None
    except Exception as e:
        dev_exc = e
        with contextlib.suppress(Exception):
            torch.neuron.synchronize()
    rec["fallback"] = set(tracker.get_fallback_ops())
    rec["native"] = set(tracker.get_executed_ops()) - rec["fallback"]
    if cpu_exc is not None:
        if dev_exc is None:
            rec.update(outcome="cpu_error", msg=f"CPU raised, neuron did not: {_exc(cpu_exc)}")
        return rec
    if dev_exc is not None:
        rec.update(outcome="error", msg=_exc(dev_exc))
        return rec
    try:
        ties = skips.TIE_ORDER.get(entry_key(op))
        if ties and not ties[1](sample):
            compare_sort(sample, out_n, out_c, ties, tol)
            if (grads_c is not None or grads_n is not None) and not _has_ties(sample.input, ties[0](sample)):
                compare(grads_n, grads_c, grad=True, what="grad", tol=tol)
        elif shape_only:
            compare(_meta(out_n), _meta(out_c))
        else:
            compare(out_n, out_c, tol=tol)
            if grads_c is not None or grads_n is not None:
                compare(grads_n, grads_c, grad=True, what="grad", tol=tol)
    except Mismatch as e:
        rec.update(outcome="mismatch", msg=str(e))
    except Exception as e:
        rec.update(outcome="error", msg=f"comparing: {_exc(e)}")
    return rec


def _has_ties(x, dim):
    if x.dim() == 0 or x.numel() == 0:
        return False
    v = x.detach().sort(dim=dim).values
    n = v.size(dim)
    return bool((v.narrow(dim, 1, n - 1) == v.narrow(dim, 0, n - 1)).any()) if n > 1 else False


def compare_sort(sample, out_n, out_c, ties, tol):
    """An unstable sort: values compared as usual, indices by the elements they select."""
    dim_of, _, which, _ = ties
    x = sample.input.detach()
    dim = dim_of(sample)
    if which is None:  # the output is the indices (argsort)
        compare(x.gather(dim, out_n.cpu()) if x.dim() else x, x.gather(dim, out_c) if x.dim() else x,
                what="values at indices", device=False)
        return
    if which < 0:  # values only (msort)
        compare(out_n, out_c, tol=tol)
        return
    compare(out_n[0], out_c[0], tol=tol, what="values")
    idx = out_n[which].cpu()
    compare(x.gather(dim, idx) if x.dim() else x, out_c[0].detach(), what="values at indices", device=False)
    if idx.dtype != out_c[which].dtype or idx.shape != out_c[which].shape:
        raise Mismatch(f"indices: {idx.dtype}{tuple(idx.shape)} vs {out_c[which].dtype}{tuple(out_c[which].shape)}")


def _on_device(args):
    leaves, _ = tree_flatten(args)
    return any((isinstance(x, torch.Tensor) and x.device.type == DEV) or
               (isinstance(x, torch.device) and x.type == DEV) for x in leaves)


def _meta(out):
    return tree_map(lambda t: (tuple(t.shape), str(t.dtype), t.device.type.replace(DEV, "cpu"))
                    if isinstance(t, torch.Tensor) else t, out)


def _exc(e):
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    return f"{type(e).__name__}: {first[:300]}"


# ---- the out= and in-place contracts ------------------------------------------------------------

CONTRACT_CHECKS = ("out-dtype", "out-device", "out-resize", "inplace")


def _detached(args):
    return tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, args)


def _call(fn, args, **extra):
    inp, a, kw = args
    return fn(inp, *a, **kw, **extra)


def _attempt(fn, args, record_warnings=False, **extra):
    """-> (result, exception, warned about a resize)."""
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            r, e = _call(fn, args, **extra), None
        except Exception as ex:
            r, e = None, ex
    warned = any("resized" in str(x.message) for x in w)
    return r, e, warned


def _bad_dtype(t):
    """A dtype t's values cannot be cast to (None for bool: every dtype takes it)."""
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.long
    if t.dtype != torch.bool:
        return torch.bool
    return None


def _outs(expected, make):
    """out= argument shaped like `expected` (a tensor, or a tuple of them); make(t) -> tensor or None
    (None: that leaf keeps an exact copy of its shape/dtype on the same device as make's others)."""
    leaves, spec = tree_flatten(expected)
    outs = [make(t) for t in leaves]
    return (outs[0] if isinstance(expected, torch.Tensor) else tuple(outs)), outs


def _same_decision(tag, cpu_exc, dev_exc):
    """(outcome, msg) when exactly one side raised, else None."""
    if cpu_exc is not None and dev_exc is None:
        return "mismatch", f"{tag}: CPU raised ({_exc(cpu_exc)}), neuron accepted it"
    if cpu_exc is None and dev_exc is not None:
        return "error", f"{tag}: neuron raised, CPU did not: {_exc(dev_exc)}"
    return None


def _is_outs(result, outs):
    leaves, _ = tree_flatten(result)
    return len(leaves) == len(outs) and all(a is b for a, b in zip(leaves, outs))


def _returned_outs(tag, result, outs):
    leaves, _ = tree_flatten(result)
    if len(leaves) != len(outs) or any(a is not b for a, b in zip(leaves, outs)):
        raise Mismatch(f"{tag}: the result is not the out= tensor(s)")


def run_contracts(op, sample, timeout, tol, shape_only, inplace_only=False):
    """The contract checks of one sample: [(check, outcome, msg)] (see the module docstring)."""
    recs = []
    keep = skips.CPU_ARGS.get(entry_key(op), ((), ""))[0]
    cpu_args = _detached((sample.input, tuple(sample.args), dict(sample.kwargs)))

    def dev_copy():
        return _detached(move_sample(SampleInput_like(cpu_args), DEV, keep))

    def check(name, body):
        try:
            with alarm(timeout):
                r = body()
            if r is not None:
                recs.append((name, r[0], r[1]))
        except Mismatch as e:
            recs.append((name, "mismatch", str(e)))
        except SampleTimeout:
            pass
        except Exception as e:
            recs.append((name, "error", f"{name}: harness: {_exc(e)}"))
        with contextlib.suppress(Exception):
            torch.neuron.synchronize()

    ties = skips.TIE_ORDER.get(entry_key(op))

    def cmp(a, b, what):
        if ties and not ties[1](sample) and what.endswith(" out"):
            compare_sort(sample, a, b, ties, tol)  # an unstable sort: indices by the values they select
        elif shape_only:
            compare(_meta(a), _meta(b), what=what)
        else:
            compare(a, b, tol=tol, what=what)

    if op.supports_out and not inplace_only:
        try:
            with alarm(timeout):
                expected = _call(op.op, cpu_args)
        except Exception:
            expected = None
        leaves = tree_flatten(expected)[0] if expected is not None else []
        dargs = dev_copy() if leaves else None
        if leaves and all(isinstance(t, torch.Tensor) for t in leaves) and _on_device(dargs):

            def out_dtype():
                if all(_bad_dtype(t) is None for t in leaves):
                    return None
                mk = (lambda dev: lambda t: torch.empty(t.shape, dtype=_bad_dtype(t) or t.dtype, device=dev))
                oc, _ = _outs(expected, mk("cpu"))
                od, _ = _outs(expected, mk(DEV))
                _, ce, _ = _attempt(op.op, cpu_args, out=oc)
                _, de, _ = _attempt(op.op, dargs, out=od)
                torch.neuron.synchronize()
                d = _same_decision("out-dtype", ce, de)
                if d:
                    return d
                if ce is None:
                    cmp(od, oc, "out-dtype out")
                return "pass", ""

            def out_device():
                oc, outs = _outs(expected, lambda t: torch.zeros(t.shape, dtype=t.dtype))
                before = [t.clone() for t in outs]
                _, de, _ = _attempt(op.op, dev_copy(), out=oc)
                torch.neuron.synchronize()
                if de is None:
                    return "mismatch", "out-device: a CPU out= with neuron inputs was accepted (PyTorch raises)"
                for a, b in zip(outs, before):
                    if not torch.equal(a, b):
                        return "mismatch", "out-device: raised, but the CPU out= tensor was written"
                return "pass", ""

            def out_resize():
                def mk(dev):
                    return lambda t: torch.zeros((t.numel() + 2,), dtype=t.dtype, device=dev)
                oc, oc_l = _outs(expected, mk("cpu"))
                od, od_l = _outs(expected, mk(DEV))
                rc, ce, wc = _attempt(op.op, cpu_args, out=oc)
                rd, de, wd = _attempt(op.op, dev_copy(), out=od)
                torch.neuron.synchronize()
                d = _same_decision("out-resize", ce, de)
                if d:
                    return d
                if ce is None:
                    if _is_outs(rc, oc_l):  # (split_with_sizes_copy.out returns nothing)
                        _returned_outs("out-resize", rd, od_l)
                    cmp(od, oc, "out-resize out")
                    if wc and not wd:
                        return "error", "out-resize: resized a non-empty out= without the warning the CPU gives"
                return "pass", ""

            check("out-dtype", out_dtype)
            # (ops written in Python, like torch.lu, copy their result into out= themselves: any device)
            if isinstance(op.op, types.BuiltinFunctionType):
                check("out-device", out_device)
            check("out-resize", out_resize)

    ip = op.inplace_variant
    if ip is not None:

        def inplace():
            # (a copy with the same storage layout, as dev_copy makes for the device: an in-place
            # as_strided_ of a partial view reads the storage beyond the view)
            ci = tree_map(lambda x: _to_device_strided(x, x.device).detach()
                          if isinstance(x, torch.Tensor) else x, cpu_args[0])
            ca = (ci,) + cpu_args[1:]
            da = dev_copy()
            di = da[0]
            if not isinstance(ci, torch.Tensor) or not isinstance(di, torch.Tensor):
                return None
            shape = tuple(di.shape)
            rc, ce, _ = _attempt(ip, ca)
            rd, de, _ = _attempt(ip, da)
            torch.neuron.synchronize()
            d = _same_decision("inplace", ce, de)
            if d:
                return d
            if ce is None:
                if tuple(di.shape) != tuple(ci.shape):  # (the CPU's addbmm_ resizes self: so must neuron)
                    raise Mismatch(f"inplace: self of shape {list(shape)} became {list(di.shape)}, "
                                   f"on the CPU {list(ci.shape)}")
                if rd is not di and not (isinstance(rd, torch.Tensor) and rd.data_ptr() == di.data_ptr()
                                          and rd.shape == di.shape):
                    raise Mismatch("inplace: the result is not self")
                cmp(di, ci, "inplace self")
            return "pass", ""

        check("inplace", inplace)
    return recs


class SampleInput_like:
    """The (input, args, kwargs) triple in the shape move_sample expects."""
    def __init__(self, args):
        self.input, self.args, self.kwargs = args[0], args[1], args[2]


# ---- one entry -----------------------------------------------------------------------------------

def _pick(gen, n, pool):
    items = []
    for s in gen:
        items.append(s)
        if len(items) >= pool:
            break
    if len(items) <= n:
        return items
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def run_entry(op, limits=Limits(), dtypes=None, tracker=None, log=None):
    """Sweep one OpInfo.  Returns a JSON-able dict (see the module docstring)."""
    import torchneuron
    tracker = tracker or torchneuron
    key = entry_key(op)
    t0 = time.time()
    rnd = skips.RANDOM_SAMPLES.get(key)
    tol_entry = skips.TOLERANCE.get(key)
    tol = {d: v for d, v in tol_entry[0].items()} if tol_entry else None
    res = {"key": key, "claimed": [SHORT[d] for d in swept_dtypes(op)], "per_dtype": {}, "fallback": [],
           "native": [], "failures": [], "truncated": False, "skip": skips.SKIP.get(key),
           "shape_only": skips.SHAPE_ONLY.get(key), "random_samples": rnd[1] if rnd else None,
           "tolerance": tol_entry[1] if tol_entry else None, "seconds": 0.0, "contract": {}}
    if res["skip"]:
        return res
    todo = [d for d in swept_dtypes(op) if dtypes is None or d in dtypes]
    fallback, native = set(), set()
    bwd = set(op.supported_backward_dtypes("cpu")) if op.supports_autograd else set()
    for dtype in todo:
        if time.time() - t0 > limits.entry_budget:
            res["truncated"] = True
            break
        want_grad = dtype in bwd and (dtype.is_floating_point or dtype.is_complex)
        counts = {"pass": 0, "mismatch": 0, "error": 0, "cpu_error": 0, "native_mismatch": 0,
                  "c_pass": 0, "c_mismatch": 0, "c_error": 0}
        res["per_dtype"][SHORT[dtype]] = counts
        try:
            torch.manual_seed(0)
            with alarm(limits.sample_timeout * 3):
                samples = _pick(op.sample_inputs("cpu", dtype, requires_grad=want_grad), limits.samples, limits.pool)
            plan = [(s, "") for s in samples]
            for s in samples[:limits.noncontig]:
                with alarm(limits.sample_timeout):
                    plan.append((s.noncontiguous(), "noncontig "))
        except Exception as e:
            counts["cpu_error"] += 1
            _note(res, f"{SHORT[dtype]}: sample generation failed: {_exc(e)}")
            continue
        for s, tag in plan:
            if time.time() - t0 > limits.entry_budget:
                res["truncated"] = True
                break
            shape_only = bool(res["shape_only"]) or bool(rnd and rnd[0](s))
            rec = run_sample(op, s, dtype, want_grad, shape_only, limits.sample_timeout, tracker, tol)
            counts[rec["outcome"]] += 1
            fallback |= rec["fallback"]
            native |= rec["native"]
            if rec["outcome"] == "mismatch" and not rec["fallback"]:
                counts["native_mismatch"] += 1
            if rec["outcome"] in ("mismatch", "error"):
                _note(res, f"{SHORT[dtype]} {tag}{rec['outcome']}: {rec['msg']}")
            if rec["outcome"] == "mismatch" and not res.get("first_mismatch"):
                res["first_mismatch"] = f"{SHORT[dtype]} {tag}: {rec['msg']}"[:500]
            if log:
                log(f"{key} {SHORT[dtype]} {tag}{rec['outcome']} {rec['msg'][:200]}")
        # the out= and in-place contracts: the first samples, and every one that broadcasts its input
        if not (op.supports_out or op.inplace_variant is not None):
            continue
        for n, s in enumerate(samples):
            if n >= limits.contract and not (op.inplace_variant is not None and s.broadcasts_input):
                continue
            if time.time() - t0 > limits.entry_budget:
                res["truncated"] = True
                break
            shape_only = bool(res["shape_only"]) or bool(rnd and rnd[0](s))
            for chk, outcome, msg in run_contracts(op, s, limits.sample_timeout, tol, shape_only,
                                                   inplace_only=n >= limits.contract):
                counts["c_" + outcome] += 1
                cc = res["contract"].setdefault(chk, {"pass": 0, "mismatch": 0, "error": 0})
                cc[outcome] += 1
                if outcome != "pass":
                    _note(res, f"{SHORT[dtype]} {outcome}: {msg}")
                    if outcome == "mismatch" and not res.get("first_mismatch"):
                        res["first_mismatch"] = f"{SHORT[dtype]}: {msg}"[:500]
                if log:
                    log(f"{key} {SHORT[dtype]} {chk} {outcome} {msg[:200]}")
    res["fallback"] = sorted(fallback)
    res["native"] = sorted(native)
    res["seconds"] = round(time.time() - t0, 2)
    return res


def _note(res, msg):
    if len(res["failures"]) < 4:
        res["failures"].append(msg[:500])


def status(res):
    """An entry's status for the report: skipped | n/a | pass-native | pass-fallback | fail | wrong."""
    if res.get("skip"):
        return "skipped"
    if res.get("crash"):
        return "crash"
    pd = res["per_dtype"]
    if not pd or sum(c["pass"] + c["mismatch"] + c["error"] + c.get("c_pass", 0) + c.get("c_mismatch", 0) +
                     c.get("c_error", 0) for c in pd.values()) == 0:
        return "n/a"
    mism = sum(c["mismatch"] + c.get("c_mismatch", 0) for c in pd.values())
    err = sum(c["error"] + c.get("c_error", 0) for c in pd.values())
    if mism:
        return "wrong"
    if err:
        return "fail"
    return "pass-fallback" if res["fallback"] else "pass-native"


def find_op(key):
    from torch.testing._internal.common_methods_invocations import op_db
    for op in op_db:
        if entry_key(op) == key:
            return op
    raise KeyError(key)


def format_exc():
    return traceback.format_exc(limit=3)
