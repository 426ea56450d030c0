"""PyTorch's own distributed test bases run for the c10d backend ``neuron`` (python -m tests.distributed)."""
