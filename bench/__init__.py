"""TorchNeuron benchmarks: `python -m bench [--quick] [--rounds N] [--out docs/benchmarks.md]`.

Each workload runs on the `neuron` device and on PyTorch CPU eager in the same process, interleaved round
by round; see bench/harness.py for the timing method, bench/workloads.py and bench/gpt.py for the
workloads, bench/limits.c for the machine-limit microbenchmarks and bench/report.py for the output.
"""
