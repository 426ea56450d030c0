"""Open findings of the catalogue: the cases that do not match today, with the cause (from the last
`make robustness`). The make-test subset expects them to fail (strict xfail) until the backend is fixed;
a fixed one then XPASSes and must be removed from here."""

# by design or outside the backend (the reason is the point)
_AUTOGRAD = ("torch core's words: autograd names the saved tensor with TensorBase::toString(), 'neuronFloatType' for "
             "a PrivateUse1 tensor where the CPU's reads 'torch.FloatTensor' (CUDA's 'torch.cuda.FloatTensor')")
_ONE_HOT = ("ATen's one_hot skips its range checks on PrivateUse1 (as on CUDA) to avoid a device sync and relies on "
            "scatter_'s error, raised asynchronously: the type matches (RuntimeError), the words are scatter_'s")

_PARTIAL = ("silent: an out= (or index_put_'s values) that partly overlaps an input: the CPU refuses it ('some elements of "
            "the input tensor and the written-to tensor refer to a single memory location'), neuron computes into a "
            "temporary and copies (cross: any overlap); found by the catalogue's out= overlap cases this session, not fixed yet")

FINDINGS = {
    'alias.addmv_out_partial': _PARTIAL,
    'alias.aminmax_out_partial': _PARTIAL,
    'alias.baddbmm_out_partial': _PARTIAL,
    'alias.cross_out_self': _PARTIAL,
    'alias.cumprod_out_partial': _PARTIAL,
    'alias.cumsum_out_partial': _PARTIAL,
    'alias.index_put_values_partial': _PARTIAL,
    'alias.kthvalue_out_partial': _PARTIAL,
    'alias.logcumsumexp_out_partial': _PARTIAL,
    'alias.masked_select_out_partial': _PARTIAL,
    'alias.max_dim_out_partial': _PARTIAL,
    'alias.mse_loss_out_partial': _PARTIAL,
    'alias.sort_out_partial': _PARTIAL,
    'alias.topk_out_partial': _PARTIAL,
    'alias.masked_fill_expanded': "neuron refuses masked_fill_ on an expanded (self-overlapping) tensor, as TensorIterator does for every other in-place op; the CPU only warns ('Use of masked_fill_ on expanded tensors is deprecated') and writes through the stride-0 dims",
    'autograd.detach_inplace': _AUTOGRAD,
    'autograd.inplace_relu_saved': _AUTOGRAD,
    'autograd.saved_modified': _AUTOGRAD,
    'dtype.float8_create': 'dtype not supported on neuron (the CPU computes it): float8 dtypes have no kernels (NotImplementedError naming the dtype)',
    'index.one_hot.async': _ONE_HOT,
    'index.one_hot.big': _ONE_HOT,
    'index.one_hot.neg': _ONE_HOT,
    'oom.sum_uint8_no_temporary': 'sum of uint8 allocates an int64 copy of the input (8x) where the CPU needs no temporary',
    'threads.error_in_thread': "asynchronous by design: the thread's bad index is queued and its IndexError raised at the next synchronize (here the main thread's), as CUDA reports a device-side assert later; the CPU raises in the thread",
}

# Cases where the CPU's own answer depends on the CPU it runs on: a difference from it on one machine and
# a match on another.  The make-test subset marks them as non-strict xfails (an XPASS is not an error).
CPU_DEPENDENT = {
    'nan.gelu': "gelu(inf): neuron inf; the CPU's float32 path gives nan on AVX-512 machines (Intel Xeon, Zen 4) and inf, "
                "the limit, on an AVX2-only Zen 3 (its float64 path gives inf everywhere)",
    'alias.mm_out_input': "mm(m, m, out=m), out the same memory as both inputs, which aten does not check: neuron gives the "
                          "product (3s); the CPU's BLAS gives the product on an Intel Xeon and zeros on an AVX2-only Zen 3 "
                          "(it clears the output before reading the inputs)",
    'alias.addmm_out_bias': "addmm(b, b, b, out=b), likewise unchecked by aten: neuron gives b + b @ b (3s); the CPU's BLAS "
                            "gives that on an Intel Xeon and [3, 3, 5, 5] on an AVX2-only Zen 3 (rows written before read)",
}

# Open findings of the fuzzer (tests/robustness/fuzz.py): (op regex, regex over "variant=V reason cpu-error
# neuron-error") -> the cause.  A fuzz result they match is reported as known and does not fail the run.
FUZZ_FINDINGS = {
    ("(var|std)_mean", r"NaN differs.*neuron -?inf cpu nan"):
        "an infinite element: the CPU's var_mean/std_mean compute the mean with Welford's update, whose "
        "(x - mean) / n turns an infinite mean into NaN; x.mean() gives the infinity, as neuron does for both",
    ("index_select", r"INDICES element is out of DATA bounds"):
        "the CPU's own inconsistency: its fbgemm index_select path raises RuntimeError 'INDICES element is out of DATA "
        "bounds' where its other paths (and neuron) raise IndexError 'index out of range in self'",
    ("index_select|take", r"variant=out .*(self and (result|out) (must|expected to) have the same|canary)"):
        "out= of another dtype: neuron computes first and checks out after (the CPU checks its dtype first), so another "
        "error (an empty self, a bad index raised at the next sync) can come first; open",
    ("vector_norm|log1p|exp|log|sqrt|sin|cos|tanh|sigmoid|erf|expm1|exp2|log2|reciprocal|asin|atan|sinh|erfinv|lgamma|digamma", r"variant=out .*(values differ|Inf differs)"):
        "an out= of a wider dtype (float64 for a float32 input): neuron computes in the out's dtype, the CPU in the "
        "input's and casts (a float32 overflow or rounding the CPU has and neuron does not); open",
    ("hypot", r"NotImplementedError"):
        "hypot of integer tensors: the CPU has no kernel (NotImplementedError), neuron promotes them to float (an "
        "in-place one then fails the cast back)",
}
