"""The fast subset of the bad-input catalogue (tests/robustness; the whole of it: `make robustness`).

The cases run in a few worker subprocesses (one per environment and per 60 cases; a process that
dies is rerun case by case), each followed by a canary on the device.  Every case must match what
the CPU does; an open finding (tests/robustness/runner.py FINDINGS) is a strict xfail until fixed.
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.robustness.catalogue import CASES  # noqa: E402
from tests.robustness.findings import CPU_DEPENDENT  # noqa: E402
from tests.robustness.runner import FINDINGS, run  # noqa: E402

FAST = [c for c in CASES if c.fast]


@pytest.fixture(scope="module")
def results():
    return run(FAST)


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.name, marks=[pytest.mark.xfail(strict=True, reason=FINDINGS[c.name])] if c.name in FINDINGS else
                 [pytest.mark.xfail(strict=False, reason=CPU_DEPENDENT[c.name])] if c.name in CPU_DEPENDENT else [])
    for c in FAST])
def test_case(results, case):
    r = results[case.name]
    assert r["verdict"] == "matched", (r["verdict"], r["reason"], r.get("cpu"), r.get("neuron"))
