"""The one list of op_db entries the conformance sweep does not compare value by value.

SKIP: entries not run at all, each with the specific reason.  SHAPE_ONLY: entries whose results are
random or uninitialized by definition; they run (so errors, fallbacks and crashes still show) but
only the shapes, dtypes and devices of their results are compared.  Both lists appear in
docs/conformance.md.  Nothing else is skipped: an entry that fails shows as failing.
"""

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
}
