"""A fixed slice of the conformance sweep (tests/conformance, `make conformance`) run in `make test`:
representative op_db entries, float32 only, a few samples each, forward + backward + a
non-contiguous variant, and the out= / in-place contract checks.  Each must pass against the CPU and
run natively (no CPU fallback).

The full sweep over every op_db entry and dtype writes docs/conformance.md.
"""

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conformance import runner  # noqa: E402

# Elementwise, reductions, linear algebra, normalization, losses, indexing, shape and sort ops that
# real models use; every one native and passing in the full sweep.
SMOKE_OPS = [
    "add", "mul", "div.no_rounding_mode", "exp", "log", "sigmoid", "tanh", "pow", "abs",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.relu", "where", "clamp",
    "sum", "mean", "amax", "argmax", "var",
    "softmax", "log_softmax", "nn.functional.layer_norm",
    "mm", "bmm", "addmm", "matmul",
    "nn.functional.embedding", "nn.functional.cross_entropy", "nn.functional.mse_loss",
    "nn.functional.scaled_dot_product_attention",
    "cat", "gather", "index_select", "scatter_add", "masked_fill", "cumsum", "sort", "tril", "flip",
]

LIMITS = runner.Limits(samples=3, pool=16, noncontig=1, sample_timeout=30, entry_budget=30.0)


@pytest.fixture(scope="module")
def ops():
    from torch.testing._internal.common_methods_invocations import op_db
    return {runner.entry_key(op): op for op in op_db}


@pytest.mark.parametrize("key", SMOKE_OPS)
def test_conformance_smoke(ops, neuron_ops, key):
    res = runner.run_entry(ops[key], LIMITS, dtypes={torch.float32}, tracker=neuron_ops)
    counts = res["per_dtype"].get("f32")
    assert counts and counts["pass"] > 0, f"{key}: no float32 sample ran: {res}"
    assert counts["mismatch"] == 0 and counts["error"] == 0, f"{key}: {res['failures']}"
    # the out= and in-place contracts (wrong dtype, CPU out=, resize, in-place broadcasting) as on the CPU
    assert counts["c_mismatch"] == 0 and counts["c_error"] == 0, f"{key}: {res['failures']}"
    assert not res["fallback"], f"{key}: fell back to the CPU: {res['fallback']}"
