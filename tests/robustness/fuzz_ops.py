"""The fuzzer's op table and case generator (tests/robustness/fuzz.py runs them).

A case is fully determined by one integer, its seed: `generate(seed)` draws an op from the table, its
inputs (shapes with 0- and 1-sized dims and 0-d tensors, dtypes, layouts: contiguous, transposed,
strided, offset, expanded), its arguments (dims, keepdim, Python scalars, 0-d CPU tensors) and a
variant (functional, out=, in-place), and returns them as data plus one Python expression over the
inputs x0, x1, ... (and `o`, the out= tensor).  The worker evaluates that expression on the CPU and
on neuron.  Nothing here imports torch: the generator is plain `random.Random`, so a case replays
from its seed on any machine.
"""
import dataclasses
import random
import re

FLOATS = ("float32",) * 5 + ("float64", "float16", "bfloat16")
INTS = ("int64", "int32", "int16", "int8", "uint8")
NUM = FLOATS * 2 + INTS          # floats twice as likely as integers
ANY = NUM + ("bool",)
FAMILIES = ("pointwise", "reduction", "indexing", "shape", "matmul")


@dataclasses.dataclass
class T:
    """One input tensor: its shape and dtype, how its memory is laid out, and what values it holds."""
    shape: tuple
    dtype: str
    layout: str = "contig"   # contig | t (last two dims swapped) | step (every other element) | offset | expand
    vals: str = "any"        # any | pos | small | mask | index:N (mostly in [0, N), a few negative or out of
                             # range) | uindex:N (distinct, in [0, N)) | perm:D (distinct along dim D)
    cpu_scalar: bool = False  # a 0-d tensor that stays on the CPU (allowed beside device tensors)


@dataclasses.dataclass
class Case:
    seed: int
    op: str
    family: str
    inputs: list
    expr: str                 # Python over x0, x1, ... (and o for out=); its value is compared
    variant: str = "functional"
    out: str = ""             # out= tensor: like (the CPU's result) | empty (numel 0, resized) | other dtype
    cmp: str = "all"          # all | first (compare only element 0 of a tuple result: values, not indices)
    tol: float = 1.0          # tolerance multiplier (reductions and matmul: summation order)

    def snippet(self):
        """A readable reproduction (what the worker builds, in one block)."""
        lines = [f"# fuzz case {self.seed}: {self.family} {self.op} ({self.variant})"]
        for i, t in enumerate(self.inputs):
            lines.append(f"x{i} = {t.dtype}{list(t.shape)} layout={t.layout} vals={t.vals}"
                         + (" (a CPU 0-d tensor)" if t.cpu_scalar else ""))
        if self.variant == "out":
            lines.append(f"o = out tensor ({self.out})")
        lines.append(self.expr)
        return "\n".join(lines)


class R:
    """random.Random with the draws the table needs."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def chance(self, p):
        return self.r.random() < p

    def pick(self, seq):
        return self.r.choice(seq)

    def int(self, lo, hi):
        return self.r.randint(lo, hi)

    def size(self):
        return self.pick((0,) + (1,) * 4 + (2, 3, 3, 4, 5, 5, 7, 8, 16, 17))

    def shape(self, ndim=None, lo=0, hi=4, maxnumel=4096):
        if ndim is None:
            ndim = self.pick([n for n in (0, 1, 1, 2, 2, 2, 3, 3, 4) if lo <= n <= hi] or [lo])
        s = [self.size() for _ in range(ndim)]
        while _numel(s) > maxnumel:
            s[s.index(max(s))] //= 2
        return tuple(s)

    def bcast(self, shape):
        """A shape that broadcasts against `shape`: leading dims dropped, some dims 1."""
        s = list(shape[self.int(0, len(shape)):] if self.chance(0.3) else shape)
        return tuple(1 if self.chance(0.25) else d for d in s)

    def dim(self, ndim):
        n = max(ndim, 1)
        return self.int(-n, n - 1)

    def layout(self, shape, writable=False):
        opts = ["contig"] * 5 + ["step", "offset"]
        if len(shape) >= 2:
            opts += ["t", "t"]
        if not writable and any(d != 1 for d in shape) and shape:
            opts += ["expand"]
        return self.pick(opts)

    def tensor(self, shape, dtype, vals="any", writable=False):
        return T(tuple(shape), dtype, self.layout(shape, writable), vals)

    def scalar(self, dtype_kind):
        """A Python scalar of the kind of `dtype_kind` ("float", "int", "bool") or, sometimes, another."""
        k = dtype_kind if self.chance(0.7) else self.pick(("float", "int", "bool"))
        if k == "float":
            return self.pick((0.5, -1.5, 2.0, 3.25, 0.0, -0.0, 1e-3, 7.0, float("inf"), float("nan")))
        if k == "int":
            return self.pick((0, 1, 2, -1, 3, -7, 5))
        return self.pick((True, False))


def _numel(s):
    n = 1
    for d in s:
        n *= d
    return n


def _kind(dtype):
    return "bool" if dtype == "bool" else "float" if dtype in FLOATS else "int"


def _lit(v):
    if isinstance(v, float) and v != v:
        return "float('nan')"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "float('inf')" if v > 0 else "float('-inf')"
    return repr(v)


# ---- the table: each entry (name, family, generator); a generator returns (inputs, expr, options) ----
# options: out (an out= form: the expr is a call whose last ')' gets ', out=o'), inplace (the in-place
# expression), cmp, tol.

UNARY_FLOAT = ("exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf", "log1p", "expm1", "exp2",
               "log2", "reciprocal", "asin", "atan", "sinh", "erfinv", "lgamma", "digamma", "trunc", "frac")
UNARY_ANY = ("abs", "neg", "sign", "square", "floor", "ceil", "round", "relu")
UNARY_BOOL = ("isnan", "isinf", "isfinite", "signbit", "logical_not")
BINARY = ("add", "sub", "mul", "div", "remainder", "fmod", "maximum", "minimum", "fmax", "fmin", "pow", "atan2",
          "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "hypot", "copysign",
          "floor_divide", "xlogy", "bitwise_and", "bitwise_or", "bitwise_xor", "true_divide")
NO_BOOL = {"sub", "neg"}  # the CPU refuses bool operands


def _unary(r, name, dtypes):
    s = r.shape()
    dt = r.pick(dtypes)
    x = r.tensor(s, dt, "pos" if r.chance(0.3) else "any")
    return [x], f"torch.{name}(x0)", {"out": True, "inplace": f"x0.{name}_()" if name not in UNARY_BOOL else None}


def _binary(r, name):
    s = r.shape()
    dt = r.pick(NUM if name not in ("bitwise_and", "bitwise_or", "bitwise_xor") else INTS + ("bool",) * 2)
    a = r.tensor(s, dt)
    form = r.pick(("tt", "tt", "tt", "ts", "t0"))
    if form == "ts":   # tensor op Python scalar
        v = r.scalar(_kind(dt))
        return [a], f"torch.{name}(x0, {_lit(v)})", {"out": True, "inplace": f"x0.{name}_({_lit(v)})"}
    bs = r.bcast(s) if r.chance(0.5) else s
    b = r.tensor(bs, dt if r.chance(0.7) else r.pick(ANY))
    if form == "t0":   # a 0-d CPU tensor operand
        b = T((), b.dtype, "contig", "any", cpu_scalar=True)
    return [a, b], f"torch.{name}(x0, x1)", {"out": True, "inplace": f"x0.{name}_(x1)"}


def _alpha(r, name):
    s = r.shape()
    dt = r.pick(NUM)
    a, b = r.tensor(s, dt), r.tensor(r.bcast(s), dt)
    al = r.scalar(_kind(dt))
    return [a, b], f"torch.{name}(x0, x1, alpha={_lit(al)})", {"out": True, "inplace": f"x0.{name}_(x1, alpha={_lit(al)})"}


def _div_mode(r):
    s = r.shape()
    dt = r.pick(NUM)
    mode = r.pick(("'trunc'", "'floor'", "None"))
    a, b = r.tensor(s, dt), r.tensor(r.bcast(s), dt)
    return [a, b], f"torch.div(x0, x1, rounding_mode={mode})", {"out": True, "inplace": f"x0.div_(x1, rounding_mode={mode})"}


def _ternary(r, name):
    s = r.shape()
    dt = r.pick(FLOATS)
    xs = [r.tensor(s, dt), r.tensor(r.bcast(s), dt), r.tensor(r.bcast(s), dt)]
    if name == "where":
        xs[0] = r.tensor(r.bcast(s), "bool", "mask")
        xs[1] = r.tensor(s, dt)
        return xs, "torch.where(x0, x1, x2)", {"out": True}
    if name == "lerp":
        w = _lit(r.pick((0.25, 0.5, 0.75, 1.5)))
        return xs[:2], f"torch.lerp(x0, x1, {w})", {"out": True, "inplace": f"x0.lerp_(x1, {w})"}
    v = _lit(r.pick((1, 0.5, -2.0)))
    return xs, f"torch.{name}(x0, x1, x2, value={v})", {"out": True, "inplace": f"x0.{name}_(x1, x2, value={v})"}


def _clamp(r):
    s = r.shape()
    dt = r.pick(NUM)
    lo, hi = r.pick((-1, -0.5, None, 0)), r.pick((1, 2.5, None, float("nan") if r.chance(0.2) else 3))
    if lo is None and hi is None:
        lo = 0
    args = f"min={_lit(lo)}, max={_lit(hi)}"
    return [r.tensor(s, dt)], f"torch.clamp(x0, {args})", {"out": True, "inplace": f"x0.clamp_({args})"}


def _act(r):
    s = r.shape()
    dt = r.pick(FLOATS)
    f = r.pick(("F.gelu(x0)", "F.gelu(x0, approximate='tanh')", "F.silu(x0)", "F.softplus(x0)", "F.elu(x0)",
                "F.leaky_relu(x0, 0.2)", "F.hardtanh(x0)", "F.hardsigmoid(x0)", "F.hardswish(x0)", "F.mish(x0)",
                "F.logsigmoid(x0)", "F.relu6(x0)", "torch.nan_to_num(x0)", "torch.nan_to_num(x0, 0.0, 1.0, -1.0)"))
    return [r.tensor(s, dt)], f, {}


def _cast(r):
    s = r.shape()
    a, b = r.pick(ANY), r.pick(ANY)
    return [r.tensor(s, a)], f"x0.to(torch.{b})", {}


REDUCE = ("sum", "mean", "prod", "amax", "amin", "nansum", "logsumexp", "all", "any", "count_nonzero")


def _reduce(r, name):
    s = r.shape(lo=0)
    dt = r.pick(FLOATS if name in ("mean", "logsumexp") else ANY if name in ("all", "any", "count_nonzero") else NUM)
    x = r.tensor(s, dt)
    form = r.pick(("none", "dim", "dim", "dims"))
    kd = r.pick((True, False))
    if name == "count_nonzero":
        d = "" if form == "none" else f", dim={r.dim(len(s))}"
        return [x], f"torch.count_nonzero(x0{d})", {"tol": 1}
    if form == "none":
        if name in ("amax", "amin", "logsumexp"):
            return [x], f"torch.{name}(x0, dim={tuple(range(len(s)))})", {"out": True, "tol": 8}
        return [x], f"torch.{name}(x0)", {"tol": 8}
    if form == "dims" and len(s) >= 2 and name not in ("prod", "all", "any"):
        d = tuple(sorted({r.int(0, len(s) - 1) for _ in range(2)}))
    else:
        d = r.dim(len(s))
    extra = ""
    if name in ("sum", "prod", "mean") and r.chance(0.3):
        extra = f", dtype=torch.{r.pick(('float64', 'float32', 'int64') if name != 'mean' else ('float64', 'float32'))}"
    return [x], f"torch.{name}(x0, {d}, keepdim={kd}{extra})", {"out": True, "tol": 8}


def _varstd(r):
    s = r.shape(lo=1)
    x = r.tensor(s, r.pick(FLOATS))
    name = r.pick(("var", "std", "var_mean", "std_mean"))
    c = r.pick((0, 1, 2))
    d = r.dim(len(s)) if r.chance(0.7) else None
    return [x], f"torch.{name}(x0, dim={d}, correction={c}, keepdim={r.pick((True, False))})", {"tol": 16}


def _minmax_dim(r):
    s = r.shape(lo=1)
    x = r.tensor(s, r.pick(NUM))
    name = r.pick(("max", "min", "argmax", "argmin", "aminmax"))
    d, kd = r.dim(len(s)), r.pick((True, False))
    if name == "aminmax":
        return [x], f"torch.aminmax(x0, dim={d}, keepdim={kd})", {}
    if name.startswith("arg") and r.chance(0.3):
        return [x], f"torch.{name}(x0)", {}
    return [x], f"torch.{name}(x0, {d}, keepdim={kd})", {"out": name.startswith("arg")}


def _norm(r):
    s = r.shape(lo=1)
    x = r.tensor(s, r.pick(FLOATS))
    p = r.pick((2, 1, float("inf"), 0, 3, -1))
    d = r.dim(len(s)) if r.chance(0.6) else None
    return [x], f"torch.linalg.vector_norm(x0, {_lit(p)}, dim={d}, keepdim={r.pick((True, False))})", {"out": True, "tol": 16}


def _scan(r):
    s = r.shape(lo=1)
    name = r.pick(("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "softmax", "log_softmax"))
    dt = r.pick(FLOATS if name in ("logcumsumexp", "softmax", "log_softmax") else NUM)
    x = r.tensor(s, dt, "small" if name == "cumprod" else "any")
    d = r.dim(len(s))
    if name in ("softmax", "log_softmax"):
        return [x], f"torch.{name}(x0, {d})", {"tol": 8}
    return [x], f"torch.{name}(x0, {d})", {"out": name in ("cumsum", "cumprod", "logcumsumexp"), "tol": 8,
                                           "inplace": f"x0.{name}_({d})" if name in ("cumsum", "cumprod") else None}


def _sort(r):
    s = r.shape(lo=1)
    x = r.tensor(s, r.pick(NUM))
    d = r.dim(len(s))
    name = r.pick(("sort", "sort_stable", "argsort_stable", "topk", "kthvalue", "median", "msort"))
    if name == "sort":
        return [x], f"torch.sort(x0, {d}, descending={r.pick((True, False))})", {"cmp": "first"}
    if name == "sort_stable":
        return [x], f"torch.sort(x0, dim={d}, stable=True, descending={r.pick((True, False))})", {}
    if name == "argsort_stable":
        return [x], f"torch.argsort(x0, dim={d}, stable=True)", {}
    if name == "msort":
        return [x], "torch.msort(x0)", {}
    n = s[d] if s else 1
    if name == "topk":
        k = r.int(0, n + (1 if r.chance(0.1) else 0))
        return [x], f"torch.topk(x0, {k}, {d}, largest={r.pick((True, False))})", {"cmp": "first"}
    if name == "kthvalue":
        k = r.int(1, n + (1 if r.chance(0.1) else 0)) if n else 1
        return [x], f"torch.kthvalue(x0, {k}, {d})", {"cmp": "first"}
    return [x], f"torch.median(x0, {d})", {"cmp": "first"}


def _gather(r):
    s = r.shape(lo=1, hi=3)
    d = r.dim(len(s))
    n = s[d]
    x = r.tensor(s, r.pick(ANY))
    ish = tuple(r.int(0, v) if i != (d % len(s)) else r.int(0, 4) for i, v in enumerate(s))
    idx = r.tensor(ish, r.pick(("int64",) * 4 + ("int32",)), f"index:{max(n, 1)}")
    return [x, idx], f"torch.gather(x0, {d}, x1)", {"out": True}


def _scatter(r):
    s = r.shape(lo=1, hi=3)
    d = r.dim(len(s))
    n = s[d]
    dt = r.pick(FLOATS + ("int64", "int32"))
    x = r.tensor(s, dt, writable=True)
    ish = tuple(min(r.int(0, v), v) if i != (d % len(s)) else r.int(0, max(n, 1)) for i, v in enumerate(s))
    name = r.pick(("scatter", "scatter_add", "scatter_reduce_sum", "scatter_reduce_amax", "scatter_value"))
    # scatter (no reduction) with duplicate targets is nondeterministic: distinct indices along dim there
    if name in ("scatter", "scatter_value"):
        ish = tuple(min(v, n) if i == d % len(s) else v for i, v in enumerate(ish))
        vals = f"perm:{d % len(s)}"
    else:
        vals = f"index:{max(n, 1)}"
    idx = r.tensor(ish, "int64", vals)
    src = r.tensor(tuple(v + r.int(0, 1) for v in ish), dt)
    if name == "scatter_value":
        return [x, idx], f"x0.scatter({d}, x1, {_lit(r.scalar(_kind(dt)))})", {}
    if name.startswith("scatter_reduce"):
        red = name.split("_")[-1]
        inc = r.pick((True, False))
        return [x, idx, src], f"x0.scatter_reduce({d}, x1, x2, '{red}', include_self={inc})", \
            {"inplace": f"x0.scatter_reduce_({d}, x1, x2, '{red}', include_self={inc})", "tol": 8}
    return [x, idx, src], f"torch.{name}(x0, {d}, x1, x2)", {"out": True, "inplace": f"x0.{name}_({d}, x1, x2)", "tol": 8}


def _index1d(r):
    s = r.shape(lo=1, hi=3)
    d = r.dim(len(s))
    n = s[d]
    dt = r.pick(ANY)
    x = r.tensor(s, dt, writable=True)
    name = r.pick(("index_select", "index_add", "index_copy", "index_fill", "take", "take_along_dim"))
    k = r.int(0, 6)
    bound = max(n, 1)
    if name == "index_select":
        return [x, r.tensor((k,), r.pick(("int64", "int32")), f"index:{bound}")], f"torch.index_select(x0, {d}, x1)", {"out": True}
    if name == "take":
        return [x, r.tensor(r.shape(hi=2), "int64", f"index:{max(_numel(s), 1)}")], "torch.take(x0, x1)", {"out": True}
    if name == "take_along_dim":
        ish = tuple(v if i != (d % len(s)) else k for i, v in enumerate(s))
        return [x, r.tensor(ish, "int64", f"index:{bound}")], f"torch.take_along_dim(x0, x1, {d})", {"out": True}
    if name == "index_fill":
        v = _lit(r.scalar(_kind(dt)))
        return [x, r.tensor((k,), "int64", f"index:{bound}")], f"x0.index_fill({d}, x1, {v})", {"inplace": f"x0.index_fill_({d}, x1, {v})"}
    k = min(k, n)
    idx = r.tensor((k,), "int64", f"uindex:{bound}")  # index_copy with duplicates is nondeterministic
    src_shape = tuple(v if i != (d % len(s)) else k for i, v in enumerate(s))
    src = r.tensor(src_shape, dt)
    if name == "index_add":
        a = _lit(r.pick((1, 2, -1)))
        return [x, idx, src], f"torch.index_add(x0, {d}, x1, x2, alpha={a})", {"out": True, "inplace": f"x0.index_add_({d}, x1, x2, alpha={a})", "tol": 8}
    return [x, idx, src], f"torch.index_copy(x0, {d}, x1, x2)", {"out": True, "inplace": f"x0.index_copy_({d}, x1, x2)"}


def _advindex(r):
    s = r.shape(lo=1, hi=3)
    dt = r.pick(ANY)
    x = r.tensor(s, dt, writable=True)
    form = r.pick(("get", "get2", "mask", "put", "put_acc", "masked_fill", "masked_select", "nonzero", "setslice"))
    bound = s[0] or 1
    if form == "get":
        return [x, r.tensor(r.shape(hi=2), "int64", f"index:{bound}")], "x0[x1]", {}
    if form == "get2" and len(s) >= 2:
        i0 = r.tensor((3,), "int64", f"index:{bound}")
        i1 = r.tensor((3,), "int64", f"index:{s[1] or 1}")
        return [x, i0, i1], "x0[x1, :, x2]" if len(s) >= 3 else "x0[x1, x2]", {}
    if form == "mask":
        return [x, r.tensor(s, "bool", "mask")], "x0[x1]", {}
    if form == "masked_select":
        return [x, r.tensor(r.bcast(s), "bool", "mask")], "torch.masked_select(x0, x1)", {"out": True}
    if form == "masked_fill":
        v = _lit(r.scalar(_kind(dt)))
        return [x, r.tensor(r.bcast(s), "bool", "mask")], f"x0.masked_fill(x1, {v})", {"inplace": f"x0.masked_fill_(x1, {v})"}
    if form == "nonzero":
        return [x], r.pick(("torch.nonzero(x0)", "torch.nonzero(x0, as_tuple=True)", "torch.argwhere(x0)")), {}
    if form == "setslice" and s[0] > 0:
        v = _lit(r.scalar(_kind(dt)))
        return [x], f"(x0.__setitem__((slice(None, None, 2),), {v}), x0)[1]", {}
    acc = form == "put_acc"
    idx = r.tensor((r.int(0, 5),), "int64", f"index:{bound}" if acc else f"uindex:{bound}")
    if not acc:
        idx.shape = (min(idx.shape[0], s[0]),)
    v = r.tensor((idx.shape[0],) + s[1:] if r.chance(0.6) else (), dt)
    return [x, idx, v], f"x0.index_put((x1,), x2, accumulate={acc})", {"inplace": f"x0.index_put_((x1,), x2, accumulate={acc})", "tol": 8}


def _shape(r):
    s = r.shape(lo=1)
    dt = r.pick(ANY)
    x = r.tensor(s, dt)
    nd = len(s)
    d = r.dim(nd)
    form = r.pick(("reshape", "permute", "transpose", "flatten", "unsqueeze", "squeeze", "cat", "stack", "split",
                   "chunk", "expand", "repeat", "flip", "roll", "tril", "triu", "diagonal", "contiguous", "clone",
                   "movedim", "repeat_interleave", "narrow", "unfold", "pad", "t_contig", "view_as_dtype"))
    if form == "reshape":
        return [x], f"x0.reshape(-1, {s[-1]})" if s[-1] else "x0.reshape(-1)", {}
    if form == "permute":
        p = list(range(nd))
        r.r.shuffle(p)
        return [x], f"x0.permute({tuple(p)}).contiguous()", {}
    if form == "transpose":
        return [x], f"x0.transpose({d}, {r.dim(nd)}).contiguous()", {}
    if form == "flatten":
        return [x], f"x0.flatten({min(d % nd, nd - 1)})", {}
    if form == "unsqueeze":
        return [x], f"x0.unsqueeze({r.int(-nd - 1, nd)}).clone()", {}
    if form == "squeeze":
        return [x], f"x0.squeeze({d}).clone()", {}
    if form in ("cat", "stack"):
        y = r.tensor(s if form == "stack" or nd == 0 else tuple(v if i != d % nd else r.int(0, 3) for i, v in enumerate(s)),
                     dt if r.chance(0.8) else r.pick(ANY))
        return [x, y], f"torch.{form}([x0, x1], {d})", {"out": True}
    if form == "split":
        return [x], f"torch.split(x0, {r.int(1, 3)}, {d})", {}
    if form == "chunk":
        return [x], f"torch.chunk(x0, {r.int(1, 4)}, {d})", {}
    if form == "expand":
        return [T((1,) + s, dt, "contig")], f"x0.expand({(r.int(0, 3),) + s}).contiguous()", {}
    if form == "repeat":
        return [x], f"x0.repeat({tuple(r.int(0, 2) for _ in range(nd + r.int(0, 1)))})", {}
    if form == "flip":
        return [x], f"torch.flip(x0, {tuple(sorted({r.int(0, nd - 1) for _ in range(2)}))})", {}
    if form == "roll":
        return [x], f"torch.roll(x0, {r.int(-4, 4)}, {d})", {}
    if form in ("tril", "triu") and nd >= 2:
        return [x], f"torch.{form}(x0, {r.int(-2, 2)})", {"out": True, "inplace": f"x0.{form}_({r.int(-2, 2)})"}
    if form == "diagonal" and nd >= 2:
        return [x], f"torch.diagonal(x0, {r.int(-2, 2)}).clone()", {}
    if form == "movedim":
        return [x], f"torch.movedim(x0, {d}, {r.dim(nd)}).contiguous()", {}
    if form == "repeat_interleave":
        return [x], f"torch.repeat_interleave(x0, {r.int(0, 3)}, {d})", {}
    if form == "narrow":
        n = s[d]
        st = r.int(0, n)
        return [x], f"x0.narrow({d}, {st}, {r.int(0, n - st)}).clone()", {}
    if form == "unfold":
        return [x], f"x0.unfold({d}, {r.int(1, 3)}, {r.int(1, 2)}).contiguous()", {}
    if form == "pad" and dt in FLOATS:
        return [x], f"F.pad(x0, ({r.int(0, 2)}, {r.int(-1, 2)}), value={_lit(r.pick((0.0, 1.5)))})", {}
    if form == "view_as_dtype" and dt in ("float32", "int32"):
        return [T(s, dt, "contig")], f"x0.view(torch.{'int32' if dt == 'float32' else 'float32'}).clone()", {}
    return [x], "x0.clone()" if form == "clone" else "x0.contiguous()", {}


def _matmul(r):
    dt = r.pick(FLOATS * 3 + ("int64", "int32"))
    M, K, N = r.size(), r.size(), r.size()
    if r.chance(0.3):
        M, K, N = r.pick((16, 33, 64)), r.pick((16, 31, 64)), r.pick((8, 17, 48))
    form = r.pick(("mm", "mm", "addmm", "bmm", "baddbmm", "matmul", "mv", "dot", "outer", "linear", "addmv", "addr",
                   "einsum"))
    tol = 4 * (K + 1) ** 0.5
    if form in ("mm", "addmm"):
        a, b = r.tensor((M, K), dt), r.tensor((K, N), dt)
        if form == "mm":
            return [a, b], "torch.mm(x0, x1)", {"out": True, "tol": tol}
        bias = r.tensor(r.pick(((M, N), (N,), (1, N), (M, 1))), dt if r.chance(0.9) else r.pick(FLOATS), writable=True)
        be, al = r.pick((1, 0, 0.5)), r.pick((1, 2, -0.5))
        if dt in INTS:
            be, al = int(be), int(al)
        opt = {"out": True, "tol": tol}
        if bias.shape == (M, N):
            opt["inplace"] = f"x0.addmm_(x1, x2, beta={be}, alpha={al})"
        return [bias, a, b], f"torch.addmm(x0, x1, x2, beta={be}, alpha={al})", opt
    if form in ("bmm", "baddbmm"):
        B = r.size()
        a, b = r.tensor((B, M, K), dt), r.tensor((B, K, N), dt)
        if form == "bmm":
            return [a, b], "torch.bmm(x0, x1)", {"out": True, "tol": tol}
        return [r.tensor((B, M, N), dt, writable=True), a, b], "torch.baddbmm(x0, x1, x2, beta=0.5, alpha=2)", \
            {"out": True, "inplace": "x0.baddbmm_(x1, x2, beta=0.5, alpha=2)", "tol": tol}
    if form == "matmul":
        sa = r.pick(((K,), (M, K), (2, M, K), (1, 3, M, K)))
        sb = r.pick(((K,), (K, N), (2, K, N), (3, 1, K, N)))
        return [r.tensor(sa, dt), r.tensor(sb, dt)], "torch.matmul(x0, x1)", {"out": True, "tol": tol}
    if form in ("mv", "addmv"):
        a, v = r.tensor((M, K), dt), r.tensor((K,), dt)
        if form == "mv":
            return [a, v], "torch.mv(x0, x1)", {"out": True, "tol": tol}
        return [r.tensor((M,), dt), a, v], "torch.addmv(x0, x1, x2)", {"out": True, "tol": tol}
    if form == "dot":
        return [r.tensor((K,), dt), r.tensor((K,), dt)], "torch.dot(x0, x1)", {"out": True, "tol": tol}
    if form in ("outer", "addr"):
        if form == "outer":
            return [r.tensor((M,), dt), r.tensor((N,), dt)], "torch.outer(x0, x1)", {"out": True}
        return [r.tensor((M, N), dt), r.tensor((M,), dt), r.tensor((N,), dt)], "torch.addr(x0, x1, x2)", {"out": True}
    if form == "einsum":
        return [r.tensor((2, M, K), dt), r.tensor((K, N), dt)], "torch.einsum('bmk,kn->bnm', x0, x1)", {"tol": tol}
    if dt not in FLOATS:
        dt = "float32"
    return [r.tensor((M, K), dt), r.tensor((N, K), dt), r.tensor((N,), dt)], "F.linear(x0, x1, x2)", {"tol": tol}


TABLE = (
    [(n, "pointwise", (lambda n: lambda r: _unary(r, n, FLOATS + INTS[:1]))(n), 1) for n in UNARY_FLOAT]
    + [(n, "pointwise", (lambda n: lambda r: _unary(r, n, NUM))(n), 1) for n in UNARY_ANY]
    + [(n, "pointwise", (lambda n: lambda r: _unary(r, n, ANY))(n), 1) for n in UNARY_BOOL]
    + [(n, "pointwise", (lambda n: lambda r: _binary(r, n))(n), 2) for n in BINARY]
    + [(n, "pointwise", (lambda n: lambda r: _alpha(r, n))(n), 2) for n in ("add", "sub")]
    + [("div_mode", "pointwise", _div_mode, 2), ("clamp", "pointwise", _clamp, 3), ("activation", "pointwise", _act, 6),
       ("cast", "pointwise", _cast, 4)]
    + [(n, "pointwise", (lambda n: lambda r: _ternary(r, n))(n), 2) for n in ("where", "lerp", "addcmul", "addcdiv")]
    + [(n, "reduction", (lambda n: lambda r: _reduce(r, n))(n), 3) for n in REDUCE]
    + [("var_std", "reduction", _varstd, 6), ("min_max", "reduction", _minmax_dim, 8), ("norm", "reduction", _norm, 4),
       ("scan", "reduction", _scan, 10), ("sort", "reduction", _sort, 10)]
    + [("gather", "indexing", _gather, 10), ("scatter", "indexing", _scatter, 14), ("index1d", "indexing", _index1d, 18),
       ("advindex", "indexing", _advindex, 22)]
    + [("shape", "shape", _shape, 50)]
    + [("matmul", "matmul", _matmul, 45)]
)
_WEIGHTS = [w for *_, w in TABLE]


def generate(seed):
    """The case of this seed (deterministic)."""
    r = R(seed)
    name, fam, gen, _ = r.r.choices(TABLE, weights=_WEIGHTS)[0]
    inputs, expr, opt = gen(r)
    variant = "functional"
    out = ""
    v = r.r.random()
    if opt.get("out") and v < 0.2:
        variant = "out"
        out = r.pick(("like", "like", "empty", "dtype", "like_t"))
        expr = expr[:-1] + ", out=o)"
    elif opt.get("inplace") and v > 0.8:
        variant = "inplace"
        expr = f"({opt['inplace']}, x0)"
    m = re.search(r"(?:torch\.(?:linalg\.)?|F\.|x0\.)(\w+)", expr)
    op = m.group(1).rstrip("_") if m else name
    return Case(seed, op, fam, inputs, expr, variant, out, opt.get("cmp", "all"), float(opt.get("tol", 1)))
