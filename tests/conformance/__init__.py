"""Conformance harness: PyTorch's own OpInfo database (op_db) run on `neuron` and on the CPU.

`python -m tests.conformance` (or `make conformance`) sweeps every op_db entry in worker
subprocesses and writes docs/conformance.md; runner.py holds the per-entry logic that the smoke test
(tests/python/test_conformance_smoke.py) also uses in-process.  Tolerances live in tolerances.py,
every skipped or specially compared entry in skips.py.
"""
