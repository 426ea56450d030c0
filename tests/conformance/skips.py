"""The one list of op_db entries the conformance sweep does not compare value by value.

SKIP: entries not run at all, each with the specific reason.
SHAPE_ONLY: entries whose results are random or uninitialized by definition; they run (so errors,
fallbacks and crashes still show) but only the shapes, dtypes and devices of their results are
compared.
RANDOM_SAMPLES: entries where only some samples are random (dropout_p > 0, training-mode dropout):
(predicate on the SampleInput, reason); those samples are compared by shape, the others by value.
TOLERANCE: entries that get a looser tolerance than tolerances.py: ({dtype: (rtol, atol)}, reason);
gradients get tolerances.GRAD_FACTOR times that, as usual.
CPU_ARGS: positional arguments that stay on the CPU when the sample moves to neuron, because the op
requires a CPU tensor there: (positions in sample.args, reason).
TIE_ORDER: sorts whose order of equal elements is unspecified unless stable=True: for samples that
are not stable, indices are checked by the values they select (input.gather(dim, indices)), and
gradients (which follow the indices) are not compared when the input has ties.
All of them appear in docs/conformance.md.  Nothing else is skipped: an entry that fails shows as
failing.
"""
import torch

SKIP = {
}

_RANDOM = "random output (device generator differs from the CPU's): shapes/dtypes compared"
_UNINIT = "uninitialized memory by definition: shapes/dtypes compared"

SHAPE_ONLY = {
    "bernoulli": _RANDOM,
    "cauchy": _RANDOM,
    "exponential": _RANDOM,
    "geometric": _RANDOM,
    "log_normal": _RANDOM,
    "multinomial": _RANDOM,
    "normal": _RANDOM,
    "normal.in_place": _RANDOM,
    "normal.number_mean": _RANDOM,
    "uniform": _RANDOM,
    "rand_like": _RANDOM,
    "randint": _RANDOM,
    "randint_like": _RANDOM,
    "randn": _RANDOM,
    "randn_like": _RANDOM,
    "nn.functional.dropout": _RANDOM,
    "nn.functional.dropout2d": _RANDOM,
    "nn.functional.dropout3d": _RANDOM,
    "nn.functional.alpha_dropout": _RANDOM,
    "nn.functional.feature_alpha_dropout.with_train": _RANDOM,
    "nn.functional.fractional_max_pool2d": _RANDOM,
    "nn.functional.fractional_max_pool3d": _RANDOM,
    "nn.functional.rrelu": _RANDOM,
    "empty": _UNINIT,
    "empty_like": _UNINIT,
    "empty_permuted": _UNINIT,
    "empty_strided": _UNINIT,
    "new_empty": _UNINIT,
    "new_empty_strided": _UNINIT,
    "svd_lowrank": "random projection (torch.randn on the device generator) picks the subspace: shapes/dtypes compared",
}


def _dropout_p(s):
    return float(s.kwargs.get("dropout_p", 0.0) or 0.0) > 0


RANDOM_SAMPLES = {
    "nn.functional.scaled_dot_product_attention": (_dropout_p, "samples with dropout_p > 0 are random"),
    # (query, key, value, embed_dim, num_heads, in_proj_weight, in_proj_bias, bias_k, bias_v,
    #  add_zero_attn, dropout_p, ...): dropout_p is args[9]
    "nn.functional.multi_head_attention_forward": (
        lambda s: s.kwargs.get("training", True) and float(s.args[9]) > 0,
        "samples with dropout_p > 0 in training are random"),
}

_HALF = {torch.bfloat16: (1.6e-2, 4e-2), torch.float16: (2e-3, 5e-3)}

_BN_LAYOUT = ("bf16/f16: aten's CPU batch norm rounds differently for strided input than for contiguous input (two code "
              "paths, 1-2 ulp apart); the native kernel computes every layout one way (f64 statistics, f32 affine) and is "
              "closer to an f64 reference than either CPU path (measured on random strided bf16 samples)")

_CONV_HALF = ("bf16/f16: aten's CPU transposed convolution (and conv3d's input gradient) rounds its column buffer to "
              "bf16/f16 and sums it in bf16/f16; this backend accumulates in f32 and rounds once. Against an f64 "
              "reference this backend's error is about half the CPU's (measured over the OpInfo samples); the CPU "
              "itself is off from f64 by up to the atol given, on outputs of magnitude ~100")
TOLERANCE = {
    # ---- convolution (helper conv) ----
    "nn.functional.conv_transpose1d": ({torch.bfloat16: (1.6e-2, 2e-2), torch.float16: (2e-3, 2e-2)}, _CONV_HALF),
    "nn.functional.conv_transpose2d": ({torch.bfloat16: (1.6e-2, 0.1), torch.float16: (2e-3, 0.1)}, _CONV_HALF),
    "nn.functional.conv_transpose3d": ({torch.bfloat16: (1.6e-2, 0.3), torch.float16: (2e-3, 0.3)}, _CONV_HALF),
    "nn.functional.conv3d": ({torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 5e-3)}, _CONV_HALF),
    # ---- end convolution ----
    "_native_batch_norm_legit": (_HALF, _BN_LAYOUT),
    "_batch_norm_with_update": (_HALF, _BN_LAYOUT),
    "native_batch_norm": (_HALF, _BN_LAYOUT),
    "nn.functional.batch_norm": (_HALF, _BN_LAYOUT),
    "nn.functional.instance_norm": (_HALF, _BN_LAYOUT),
    "nn.functional.nll_loss": (
        {torch.float16: (2e-3, 4e-3)},
        "f16 sums: aten's CPU nll_loss2d accumulates in f16 (off by a few ulp); this backend sums in f64 and "
        "matches an f64 reference (measured)"),
    "nn.functional.scaled_dot_product_attention": (
        {torch.float16: (2e-3, 4e-3)},
        "f16: both this kernel and aten's CPU flash attention accumulate in f32; where a gradient cancels "
        "(|result| << |terms| ~ 30) they differ by 1-2 f16 ulp of the terms, equally far from an f64 reference"),
}


def _sort_dim(s):
    if "dim" in s.kwargs:
        return s.kwargs["dim"]
    return s.args[0] if s.args and isinstance(s.args[0], int) else -1


def _sort_stable(s):
    return bool(s.kwargs.get("stable", False))


_TIES = "equal elements may come in any order unless stable=True (aten's CPU sort is std::sort there)"

# entry: (dim of the sample, is the sample stable, index of the indices among the outputs or None
# when the output is the indices themselves, reason)
TIE_ORDER = {
    "sort": (_sort_dim, _sort_stable, 1, _TIES),
    "argsort": (_sort_dim, _sort_stable, None, _TIES),
    "msort": (lambda s: 0, lambda s: False, -1, _TIES),
    # (misc) topk: aten's CPU order among equal values is libstdc++'s partial_sort/nth_element order
    "topk": (lambda s: s.kwargs.get("dim", s.args[1] if len(s.args) > 1 else -1), lambda s: False, 1,
             "equal elements may come in any order (aten's CPU topk is std::partial_sort / std::nth_element)"),
}

CPU_ARGS = {
    "tensor_split": ((0,), "tensor_indices_or_sections must be a CPU tensor (aten requires it on every device)"),
}


# Entries whose complex64/complex128 samples are swept too (complex numbers are native for these ops:
# docs/complex.md); the complex dtypes of every other entry are not swept yet.
COMPLEX_ENTRIES = frozenset({
    "add", "sub", "mul", "div.no_rounding_mode", "neg", "reciprocal", "square", "exp", "exp2", "expm1", "log", "log2",
    "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh",
    "acosh", "atanh", "sigmoid", "abs", "angle", "sgn", "isnan", "isinf", "isfinite", "eq", "ne", "where",
    "addcmul", "addcdiv", "lerp", "pow", "float_power", "true_divide", "rsub", "sum", "mean", "prod",
    "mm", "bmm", "matmul", "addmm", "baddbmm", "dot", "vdot", "mv", "addmv",
    "view_as_real", "view_as_complex", "complex", "polar", "conj", "conj_physical", "resolve_conj", "resolve_neg",
    "real", "imag", "clone", "contiguous", "reshape", "view", "flatten", "transpose", "permute", "expand", "cat",
    "stack", "index_select", "flip", "narrow", "select", "squeeze", "unsqueeze", "t", "zeros_like", "ones_like",
    "full_like", "fill", "zero_", "to", "linalg.vector_norm",
    "fft.fft", "fft.fft2", "fft.fftn", "fft.fftshift", "fft.hfft", "fft.hfft2", "fft.hfftn", "fft.ifft", "fft.ifft2",
    "fft.ifftn", "fft.ifftshift", "fft.irfft", "fft.irfft2", "fft.irfftn",
})
