"""Open findings of the catalogue: the cases that do not match today, with the cause (from the last
`make robustness`). The make-test subset expects them to fail (strict xfail) until the backend is fixed;
a fixed one then XPASSes and must be removed from here."""

# by design or outside the backend (the reason is the point)
_AUTOGRAD = ("torch core's words: autograd names the saved tensor with TensorBase::toString(), 'neuronFloatType' for "
             "a PrivateUse1 tensor where the CPU's reads 'torch.FloatTensor' (CUDA's 'torch.cuda.FloatTensor')")
_ONE_HOT = ("ATen's one_hot skips its range checks on PrivateUse1 (as on CUDA) to avoid a device sync and relies on "
            "scatter_'s error, raised asynchronously: the type matches (RuntimeError), the words are scatter_'s")

FINDINGS = {
    'alias.masked_fill_expanded': "neuron refuses masked_fill_ on an expanded (self-overlapping) tensor, as TensorIterator does for every other in-place op; the CPU only warns ('Use of masked_fill_ on expanded tensors is deprecated') and writes through the stride-0 dims",
    'autograd.detach_inplace': _AUTOGRAD,
    'autograd.inplace_relu_saved': _AUTOGRAD,
    'autograd.saved_modified': _AUTOGRAD,
    'dtype.float8_create': 'dtype not supported on neuron (the CPU computes it): float8 dtypes have no kernels (NotImplementedError naming the dtype)',
    'index.one_hot.async': _ONE_HOT,
    'index.one_hot.big': _ONE_HOT,
    'index.one_hot.neg': _ONE_HOT,
    'nan.gelu': "gelu(inf): neuron inf, the CPU's float32 path nan (its float64 path gives inf, the limit): a CPU inconsistency, but a difference from the CPU",
    'oom.sum_uint8_no_temporary': 'sum of uint8 allocates an int64 copy of the input (8x) where the CPU needs no temporary',
    'threads.error_in_thread': "asynchronous by design: the thread's bad index is queued and its IndexError raised at the next synchronize (here the main thread's), as CUDA reports a device-side assert later; the CPU raises in the thread",
}

# Open findings of the fuzzer (tests/robustness/fuzz.py): (op regex, regex over the reason and the neuron
# error) -> the cause.  A fuzz result they match is reported as known and does not fail the run.
FUZZ_FINDINGS = {
    ("(var|std)_mean", r"NaN differs.*neuron -?inf cpu nan"):
        "an infinite element: the CPU's var_mean/std_mean compute the mean with Welford's update, whose "
        "(x - mean) / n turns an infinite mean into NaN; x.mean() gives the infinity, as neuron does for both",
}
