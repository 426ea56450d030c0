"""Runs upstream test-base tests one at a time and reports each as a JSON line on stdout.

    python -m tests.distributed.worker TEST_ID [TEST_ID ...]
    python -m tests.distributed.worker --list MODULE      (the test ids of a base module, one a line)

TEST_ID is a unittest name (tests.distributed.base_dist.TestNeuronDistBackend.test_barrier).  For each
test: a line ``@@START {"id": ...}``, then ``@@END {"id", "status", "reason", "error", "seconds"}`` with
status one of passed, skipped, failed, errored (see classify()).  The parent (upstream.py) kills this
process's session when a test overruns, so a hang costs one test, not the run.
"""
import json
import re
import sys
import time
import traceback
import unittest

_CHILD = re.compile(r"Process (\d+) exited with error code \d+ and exception:\n(.*?)(?=\nProcess \d+ exited with error|\Z)",
                    re.S)


def exception_line(tb_text):
    """The 'ExcType: message' line of a formatted traceback (the last exception of a chain), first line
    of the message only."""
    lines = tb_text.rstrip().splitlines()
    last_file = max((i for i, ln in enumerate(lines) if ln.startswith("  File ")), default=-1)
    for ln in lines[last_file + 1:]:
        if ln and not ln.startswith(" "):
            return ln.strip()
    return lines[-1].strip() if lines else ""


def classify(err_text):
    """(status, first error line) of a test that raised.  MultiProcessTestCase re-raises a rank's
    exception in the parent as RuntimeError('Process N exited with error code 10 and exception:\\n<the
    rank's traceback>'); the rank's own exception decides: an AssertionError (assertEqual & co.) is a
    failure, anything else an error.  A rank that timed out or died is an error."""
    ranks = _CHILD.findall(err_text)
    if ranks:
        rank, tb = ranks[0]
        line = exception_line(tb)
        status = "failed" if line.startswith("AssertionError") else "errored"
        return status, f"rank {rank}: {line}"
    line = exception_line(err_text)
    if "terminated or timed out after" in err_text:
        m = re.search(r"Process \d+ terminated or timed out after [\d.]+ seconds", err_text)
        return "errored", m.group(0) if m else line
    return ("failed" if line.startswith("AssertionError") else "errored"), line


class _Result(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.outcome = None

    def addSuccess(self, test):
        self.outcome = ("passed", "", "")

    def addSkip(self, test, reason):
        self.outcome = ("skipped", str(reason), "")

    def addExpectedFailure(self, test, err):
        self.outcome = ("skipped", "expected failure (upstream @expectedFailure)", "")

    def addUnexpectedSuccess(self, test):
        self.outcome = ("failed", "", "unexpected success of an upstream @expectedFailure test")

    def _err(self, err):
        text = "".join(traceback.format_exception(*err))
        status, line = classify(text)
        self.outcome = (status, "", line)
        self.err_text = text

    def addFailure(self, test, err):
        self._err(err)

    def addError(self, test, err):
        self._err(err)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self._err(err)


def main(ids):
    loader = unittest.TestLoader()
    for tid in ids:
        print("@@START " + json.dumps({"id": tid}), flush=True)
        t0 = time.time()
        result = _Result()
        try:
            loader.loadTestsFromName(tid).run(result)
        except BaseException as e:  # noqa: BLE001  (a test's sys.exit in the parent, a loader error)
            result.outcome = ("errored", "", f"{type(e).__name__}: {e}".splitlines()[0])
        status, reason, error = result.outcome or ("errored", "", "no outcome reported")
        if status in ("failed", "errored"):
            sys.stderr.write(f"==== {tid}: {status}\n{getattr(result, 'err_text', error)}\n")
            sys.stderr.flush()
        print("@@END " + json.dumps({"id": tid, "status": status, "reason": reason, "error": error,
                                     "seconds": round(time.time() - t0, 1)}), flush=True)


def list_tests(module):
    def walk(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                yield from walk(t)
            else:
                yield t.id()
    for tid in walk(unittest.TestLoader().loadTestsFromName(module)):
        print(tid)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--list"]:
        list_tests(sys.argv[2])
    else:
        main(sys.argv[1:])
