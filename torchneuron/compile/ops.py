"""Which ATen ops the graph compiler understands, and how each is written in its IR.

Every op node of an ATen FX graph becomes one IR node of a kind:
  V  view: metadata only (sizes, strides, offset of the same buffer); never a kernel
  P  pointwise: fused by the compiler into loops
  R  reduction (sum, mean, amax, amin): fused with pointwise prologues and epilogues
  L  library call (GEMM, layer norm, embedding, nll loss, ...): a call of a kernel-library function
     from inside the compiled program
  E  eager: anything else; the runtime calls the ATen op on neuron tensors between compiled segments
An op missing from these tables is simply eager, so every graph runs.
"""
import operator

import torch

aten = torch.ops.aten

# ---- pointwise --------------------------------------------------------------------------------------
# overload packet -> IR op name (operands are the tensor/scalar args in order)
_UNARY = {
    "abs": "abs", "neg": "neg", "sign": "sign", "reciprocal": "reciprocal", "square": "square",
    "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2", "log10": "log10",
    "log1p": "log1p", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "tan": "tan",
    "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
    "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "erf": "erf", "erfc": "erfc",
    "floor": "floor", "ceil": "ceil", "round": "round", "trunc": "trunc", "frac": "frac",
    "sigmoid": "sigmoid", "relu": "relu", "silu": "silu", "logical_not": "logical_not",
    "bitwise_not": "bitwise_not", "isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite",
    "clone": "copy", "lift_fresh_copy": "copy", "_to_copy": "copy", "positive": "copy",
}
_BINARY = {
    "mul": "mul", "div": "div", "remainder": "remainder", "fmod": "fmod", "pow": "pow",
    "atan2": "atan2", "maximum": "maximum", "minimum": "minimum", "fmax": "fmax", "fmin": "fmin",
    "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
    "logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor",
    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "hypot": "hypot", "copysign": "copysign",
}
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite"}
_LOGICAL = {"logical_and", "logical_or", "logical_xor", "logical_not"}

REDUCTIONS = {"sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin"}

# ops whose output is a reshape of their input (row-major element order preserved)
RESHAPE_VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "alias", "detach",
                 "view_as", "flatten", "unflatten"}
# ops with several outputs that are all views of the input
MULTI_VIEWS = {"split_with_sizes", "split", "unbind", "chunk", "tensor_split", "unsafe_split",
               "unsafe_split_with_sizes"}


def packet(target):
    return target.overloadpacket.__name__ if isinstance(target, torch._ops.OpOverload) else None


def is_view_op(target):
    """A non-mutating op whose first return aliases an input (view, permute, expand, slice, ...)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if packet(target) == "_unsafe_view":
        return True
    s = target._schema
    if s.is_mutable or not s.returns:
        return False
    a = s.returns[0].alias_info
    return a is not None and not a.is_write


def is_mutating(target):
    return isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable


def pointwise_spec(node):
    """(op, operands, compute_kind) for a pointwise node, or None.

    operands are FX args (Nodes or Python scalars); compute_kind is 'out' (compute in the output
    dtype), 'promote' (in the promoted dtype of the operands: comparisons) or 'bool' (logical ops).
    """
    t = node.target
    p = packet(t)
    a, kw = node.args, node.kwargs
    if p is None:
        return None
    name = str(t)
    if p in ("_to_copy",):
        # dtype casts only: no device or layout change
        dev = kw.get("device")
        if dev is not None and torch.device(dev).type != "neuron":
            return None
        if kw.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
            return None
        return ("copy", [a[0]], "out")
    if p in ("clone", "lift_fresh_copy", "positive"):
        return ("copy", [a[0]], "out")
    if p == "copy" and name == "aten.copy.default":
        return ("copy", [a[1]], "out")
    if p in _UNARY and len(a) == 1:
        op = _UNARY[p]
        return (op, [a[0]], "promote" if op in _COMPARE else ("bool" if op in _LOGICAL else "out"))
    if p == "gelu":
        approx = kw.get("approximate", a[1] if len(a) > 1 else "none")
        return ("gelu_tanh" if approx == "tanh" else "gelu", [a[0]], "out")
    if p in ("add", "sub") and name.endswith((".Tensor", ".Scalar")):
        alpha = kw.get("alpha", a[2] if len(a) > 2 else 1)
        if alpha == 1:
            return (p, [a[0], a[1]], "out")
        return (p + "_alpha", [a[0], a[1], alpha], "out")
    if p == "rsub" and name.endswith((".Tensor", ".Scalar")):
        alpha = kw.get("alpha", a[2] if len(a) > 2 else 1)
        return ("rsub_alpha", [a[0], a[1], alpha], "out")
    if p == "div" and name.endswith(("_mode",)):
        mode = kw.get("rounding_mode", a[2] if len(a) > 2 else None)
        if mode is None:
            return ("div", [a[0], a[1]], "out")
        return ("div_trunc" if mode == "trunc" else "div_floor", [a[0], a[1]], "out")
    if p in _BINARY and len(a) == 2 and not kw:
        op = _BINARY[p]
        if op == "pow" and not isinstance(a[1], torch.fx.Node):
            e = a[1]
            if e == 2:
                return ("square", [a[0]], "out")
            if e == 0.5:
                return ("sqrt", [a[0]], "out")
        return (op, [a[0], a[1]], "promote" if op in _COMPARE else ("bool" if op in _LOGICAL else "out"))
    if p == "where" and name == "aten.where.self":
        return ("where", [a[0], a[1], a[2]], "out")
    if p in ("clamp", "clamp_min", "clamp_max"):
        lo = hi = None
        if p == "clamp":
            lo = kw.get("min", a[1] if len(a) > 1 else None)
            hi = kw.get("max", a[2] if len(a) > 2 else None)
        elif p == "clamp_min":
            lo = a[1]
        else:
            hi = a[1]
        if lo is not None and hi is not None:
            return ("clamp", [a[0], lo, hi], "out")
        if lo is not None:
            return ("clamp_min", [a[0], lo], "out")
        if hi is not None:
            return ("clamp_max", [a[0], hi], "out")
        return ("copy", [a[0]], "out")
    if p in ("full", "scalar_tensor", "full_like", "zeros", "ones", "zeros_like", "ones_like"):
        if p in ("full", "full_like"):
            v = a[1]
        elif p == "scalar_tensor":
            v = a[0]
        else:
            v = 1 if p.startswith("ones") else 0
        if isinstance(v, torch.fx.Node):
            return None
        if kw.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
            return None
        return ("full", [v], "out")
    if p == "arange" and name in ("aten.arange.start_step", "aten.arange.start", "aten.arange.default"):
        if name == "aten.arange.default":
            start, step = 0, 1
        else:
            start = a[0]
            step = a[2] if len(a) > 2 else kw.get("step", 1)
        if isinstance(start, torch.fx.Node) or isinstance(step, torch.fx.Node):
            return None
        return ("arange", [start, step], "out")
    if p in ("addcmul", "addcdiv"):
        v = kw.get("value", a[3] if len(a) > 3 else 1)
        return (p, [a[0], a[1], a[2], v], "out")
    if p == "lerp":
        return ("lerp", [a[0], a[1], a[2]], "out")
    if p == "sigmoid_backward":
        return ("sigmoid_backward", [a[0], a[1]], "out")
    if p == "tanh_backward":
        return ("tanh_backward", [a[0], a[1]], "out")
    if p == "threshold_backward":
        return ("threshold_backward", [a[0], a[1], a[2]], "out")
    return None


def reduction_spec(node):
    """(op, dims or None (= all), keepdim) for a reduction node, or None."""
    t = node.target
    p = packet(t)
    if p not in REDUCTIONS:
        return None
    a, kw = node.args, node.kwargs
    name = str(t)
    if name in ("aten.sum.default", "aten.mean.default"):
        if kw.get("dtype") is not None:
            return None
        return (REDUCTIONS[p], None, False)
    if name in ("aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.amin.default"):
        dims = a[1] if len(a) > 1 else kw.get("dim")
        keep = a[2] if len(a) > 2 else kw.get("keepdim", False)
        if p in ("sum", "mean") and (kw.get("dtype") is not None or len(a) > 3):
            return None
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            dims = None
        elif isinstance(dims, int):
            dims = [dims]
        return (REDUCTIONS[p], None if dims is None else list(dims), bool(keep))
    return None


# ---- library calls ----------------------------------------------------------------------------------
LIBRARY = {
    "aten.mm.default": "mm",
    "aten.cat.default": "cat",
    "aten.bmm.default": "bmm",
    "aten.addmm.default": "addmm",
    "aten._softmax.default": "softmax",
    "aten._log_softmax.default": "log_softmax",
    "aten.native_layer_norm.default": "layernorm",
    "aten.native_layer_norm_backward.default": "layernorm_bwd",
    "aten.embedding.default": "embedding",
    "aten.embedding_dense_backward.default": "embedding_bwd",
    "aten.nll_loss_forward.default": "nll",
    "aten.nll_loss_backward.default": "nll_bwd",
    "aten._scaled_dot_product_fused_attention_overrideable.default": "attention",
    "aten._scaled_dot_product_fused_attention_overrideable_backward.default": "attention_bwd",
}

# Decompositions we leave out of core_aten_decompositions() because the kernel library has the op as
# one kernel (their decompositions contain scatter/index_put, which would run eagerly).
KEEP_UNDECOMPOSED = [
    "embedding_dense_backward", "nll_loss_forward", "nll_loss_backward", "native_layer_norm_backward",
    # pointwise ops whose decompositions compute in another order than ATen's CPU kernels (addcdiv:
    # x + v * (y / z) for x + v * y / z; sigmoid_backward: g * (y * (1 - y)) in f32 for g * (1 - y) * y,
    # which overflows earlier): the compiler emits the eager kernels' own formula for them
    "addcmul", "addcdiv", "sigmoid_backward", "tanh_backward",
]


def is_getitem(node):
    return node.op == "call_function" and node.target is operator.getitem


# ---- _foreach_* ops: one pointwise op per list element ----------------------------------------------------

class ElementNode:
    """Element i of a functional _foreach_ op, shaped like an FX node for pointwise_spec()."""

    def __init__(self, target, args, kwargs, val):
        self.target, self.args, self.kwargs = target, tuple(args), dict(kwargs)
        self.meta = {"val": val}


def _base(name, overload):
    pk = getattr(aten, name, None)
    return getattr(pk, overload, None) if pk is not None else None


def foreach_elements(node):
    """[ElementNode] for a functional _foreach_ op whose elements are pointwise ATen ops, else None."""
    t = node.target
    p = packet(t)
    if not p or not p.startswith("_foreach_") or p.endswith("_") or t._schema.is_mutable:
        return None
    base = p[len("_foreach_"):]
    ov = t._overloadname
    a, kw = node.args, node.kwargs
    vals = node.meta.get("val")
    if not isinstance(vals, (list, tuple)):
        return None
    n = len(vals)

    def elem(x, i):
        return x[i] if isinstance(x, (list, tuple)) else x

    out = []
    for i in range(n):
        if base in ("add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow"):
            if ov == "ScalarAndTensor":           # pow(scalar, exponent[i])
                target, args = _base("pow", "Scalar"), (a[0], a[1][i])
            elif base == "pow":
                target = _base("pow", "Tensor_Tensor" if ov == "List" else "Tensor_Scalar")
                args = (a[0][i], elem(a[1], i))
            elif base in ("clamp_min", "clamp_max"):
                target, args = _base(base, "Tensor" if ov == "List" else "default"), (a[0][i], elem(a[1], i))
            elif base in ("maximum", "minimum"):
                target, args = _base(base, "default"), (a[0][i], elem(a[1], i))
            else:
                target, args = _base(base, "Tensor"), (a[0][i], elem(a[1], i))
            kws = {"alpha": kw["alpha"]} if "alpha" in kw else {}
            if len(a) > 2 and base in ("add", "sub"):
                kws["alpha"] = a[2]
        elif base in ("addcmul", "addcdiv"):
            v = elem(a[3], i) if len(a) > 3 else kw.get("value", kw.get("scalars", 1))
            if isinstance(v, torch.fx.Node):
                return None
            target, args, kws = _base(base, "default"), (a[0][i], a[1][i], a[2][i]), {"value": v}
        elif base == "lerp":
            target = _base("lerp", "Tensor" if ov == "List" else "Scalar")
            args, kws = (a[0][i], a[1][i], elem(a[2], i)), {}
        elif base in _UNARY and len(a) == 1:
            target, args, kws = _base(base, "default"), (a[0][i],), {}
        else:
            return None
        if target is None:
            return None
        out.append(ElementNode(target, args, kws, vals[i]))
    return out
