"""The one list of op_db entries the conformance sweep does not compare value by value.

SKIP: entries not run at all, each with the specific reason.
SHAPE_ONLY: entries whose results are random or uninitialized by definition; they run (so errors,
fallbacks and crashes still show) but only the shapes, dtypes and devices of their results are
compared.
RANDOM_SAMPLES: entries where only some samples are random (dropout_p > 0, training-mode dropout):
(predicate on the SampleInput, reason); those samples are compared by shape, the others by value.
TOLERANCE: entries that get a looser tolerance than tolerances.py: ({dtype: (rtol, atol)}, reason).
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

TOLERANCE = {
}
