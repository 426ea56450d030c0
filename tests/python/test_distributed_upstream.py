"""A slice of PyTorch's own distributed test bases on the c10d backend neuron (the whole run is
`make dist-upstream`, tests/distributed/; its counts are in docs/distributed.md "Upstream test bases").

Each test below is an upstream-base test run as upstream runs it (2 rank processes spawned by the base's
MultiProcessTestCase, file:// rendezvous, loopback only, one kernel thread per rank), in one worker
process, every test bounded (the base's limit, then tests/distributed/upstream.py kills the worker).
The slice (upstream.SLICE) covers all_reduce, all_gather (list and coalesced), broadcast, barrier and DDP
from DistributedTest._DistTestBase (CPU tensors through the neuron backend); FSDP2 training parity on
FSDPTest; redistribute (all-gather, all-to-all, all-reduce, reduce-scatter) and tensor parallelism on
DTensorTestBase (neuron tensors).  Every one must pass: a skip fails too,
since these are chosen to run here.
"""
import glob
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.distributed import upstream  # noqa: E402

SLICE = upstream.SLICE
TEST_TIMEOUT = 240  # seconds per upstream test (the base's own limit); the runner adds its grace


@pytest.fixture(scope="module")
def results(request):
    """Runs the selected tests of the slice (all of them unless pytest -k narrows it) in one worker."""
    chosen = [item.callspec.params["test_id"] for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec")] or SLICE
    before = {os.path.basename(p) for p in glob.glob("/dev/shm/tn-ncl-*")}
    res, left = upstream.run_tests(chosen, TEST_TIMEOUT, progress=False)
    ncl_left = [n for n in left if n.startswith("tn-ncl-") and n not in before]
    return res, ncl_left


@pytest.mark.parametrize("test_id", SLICE, ids=[t.rsplit(".", 2)[-2] + "." + t.rsplit(".", 1)[-1] for t in SLICE])
def test_upstream(results, test_id):
    res, _ = results
    r = res[test_id]
    assert r["status"] == "passed", f"{test_id}: {r['status']}: {r['reason'] or r['error']}"


def test_no_segment_left(results):
    _, ncl_left = results
    assert not ncl_left, f"collective segments left in /dev/shm by exited ranks: {ncl_left}"
