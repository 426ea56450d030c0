"""torchneuron.kernel (user C kernels as torch.library ops) and its ready-kernel library, and the native
aten::_grouped_mm: results against PyTorch references, forward and backward, eager and compiled;
opcheck; sticky kernel errors; profiler records; compile, schema and toolchain errors.

The kernels compile into a cache of the module's own (compile_cache_dir), about 0.1 s each."""
import math
import os
import re
import subprocess
import sys

import pytest
import torch

import torchneuron.kernel as K
from torchneuron.compile import toolchain

from conftest import ROOT, describe

DEV = "neuron"

SOFTPLUS = r'''
#include <nk_custom.h>
#include <math.h>
NK_KERNEL(softplus) {                       /* t[0] x, t[1] out; s[0] beta */
    if (t[0].dtype != NKC_F32) return nk_fail(tile, "expected float32");
    const float *x = t[0].data; float *y = t[1].data; float b = (float)s[0].f;
    for (int64_t i = tile->begin; i < tile->end; i++) {
        if (isnan(x[i])) return nk_fail(tile, "NaN input at element %lld", (long long)i);
        y[i] = log1pf(expf(b * x[i])) / b;
    }
    return 0;
}
NK_KERNEL(softplus_grad) {                  /* t[0] dy, t[1] x, t[2] dx; s[0] beta */
    const float *g = t[0].data, *x = t[1].data; float *dx = t[2].data; float b = (float)s[0].f;
    for (int64_t i = tile->begin; i < tile->end; i++) dx[i] = g[i] / (1.0f + expf(-b * x[i]));
    return 0;
}
NK_KERNEL(scale_) {                         /* in place: t[0] *= s[0] */
    float *x = t[0].data;
    for (int64_t i = tile->begin; i < tile->end; i++) x[i] *= (float)s[0].f;
    return 0;
}
'''


@pytest.fixture(scope="module", autouse=True)
def _cache(compile_cache_dir):
    yield compile_cache_dir


@pytest.fixture(scope="module")
def ops(_cache):
    """The test ops: softplus through the glue (out_like) and through Python (a callable grid), its
    gradient as a second C kernel, and an in-place op."""
    @K.op("kt::softplus", src=SOFTPLUS, grid="numel(x)", out_like="x")
    def softplus(x: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
        return torch.empty_like(x)

    @K.op("kt::softplus_py", src=SOFTPLUS, entry="softplus", grid=lambda x, beta=1.0: x.numel(), tile=100)
    def softplus_py(x: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
        return torch.empty_like(x)

    @K.op("kt::softplus_grad", src=SOFTPLUS, grid="numel(x)", out_like="x")
    def softplus_grad(dy: torch.Tensor, x: torch.Tensor, beta: float) -> torch.Tensor:
        return torch.empty_like(x)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.beta = inputs[1]

    softplus.register_autograd(lambda ctx, g: (softplus_grad(g, ctx.saved_tensors[0], ctx.beta), None),
                               setup_context=setup)

    @K.op("kt::scale_", src=SOFTPLUS, grid="numel(x)", mutates_args=("x",))
    def scale_(x: torch.Tensor, a: float) -> None:
        return None

    return softplus, softplus_py, scale_


def _ref_softplus(x, beta):
    return torch.log1p(torch.exp(beta * x)) / beta


def test_eager_glue_and_python_paths(ops):
    softplus, softplus_py, scale_ = ops
    assert softplus.fast and not softplus_py.fast and scale_.fast
    x = torch.randn(1000, 7)
    for f in (softplus, softplus_py):
        y = f(x.to(DEV), 2.0)
        assert y.device.type == DEV and y.shape == x.shape
        torch.testing.assert_close(y.cpu(), _ref_softplus(x, 2.0))
    xt = x.t()  # a non-contiguous input is passed contiguous
    torch.testing.assert_close(softplus(xt.to(DEV)).cpu(), _ref_softplus(xt, 1.0))
    z = x.to(DEV)
    scale_(z, 3.0)
    torch.testing.assert_close(z.cpu(), x * 3.0)
    assert softplus(torch.empty(0, 3, device=DEV)).shape == (0, 3)


def test_opcheck(ops):
    softplus, softplus_py, scale_ = ops
    x = torch.randn(33, 5, device=DEV)
    for op, args in ((softplus, (x, 1.5)), (softplus_py, (x, 0.5)), (scale_, (x.clone(), 2.0))):
        torch.library.opcheck(op.op, args)
    # with inputs that require grad (autograd_registration_check knows only CPU/CUDA/XPU: the
    # registration it looks for is checked directly)
    torch.library.opcheck(softplus.op, (x.clone().requires_grad_(), 1.0),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    assert torch._C._dispatch_has_kernel_for_dispatch_key("kt::softplus", "Autograd")


def test_launch_is_queued_on_the_current_stream(ops):
    import torchneuron._C as C
    softplus = ops[0]
    x = torch.randn(4096, device=DEV)
    s = torch.Stream(device=DEV)
    C._trace_enable(True)
    try:
        C._trace_drain()
        with s:
            torch.ops.neuron._queue_sleep(20000)  # the record queues behind it: the call returns first
            y = softplus(x)
        s.synchronize()
        recs = [r for r in C._trace_drain() if r[0] == "kt::softplus"]
    finally:
        C._trace_enable(False)
    torch.testing.assert_close(y.cpu(), _ref_softplus(x.cpu(), 1.0))
    assert len(recs) == 1 and recs[0][2] == s.stream_id, recs  # (name, dev, queue, start, end)


def test_profiler_shows_the_op_by_name(ops):
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(256, device=DEV)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        ops[0](x)
        torch.neuron.synchronize()
    names = {e.key for e in prof.key_averages()}
    assert "kt::softplus" in names, sorted(names)


def test_kernel_fault_raises_at_the_next_sync_naming_the_op(ops):
    x = torch.randn(100, device=DEV)
    bad = x.clone()
    bad[17] = float("nan")
    y = ops[0](bad)  # returns: the kernel runs on the queue
    with pytest.raises(RuntimeError, match=r"kt::softplus.*NaN input at element 17"):
        torch.neuron.synchronize()
    with pytest.raises(RuntimeError, match="kt::softplus"):
        y.cpu()  # its output stays poisoned
    torch.testing.assert_close(ops[0](x).cpu(), _ref_softplus(x.cpu(), 1.0))  # the device stays usable


def test_autograd_through_a_c_backward(ops):
    x = torch.randn(64, 3, dtype=torch.float32)
    xn = x.to(DEV).requires_grad_()
    g = torch.randn(64, 3)
    ops[0](xn, 1.5).backward(g.to(DEV))
    xr = x.clone().requires_grad_()
    _ref_softplus(xr, 1.5).backward(g)
    torch.testing.assert_close(xn.grad.cpu(), xr.grad)


def test_compiled_is_one_graph_with_the_op_as_a_library_call(ops, fresh_dynamo):
    from torchneuron.compile import frontend
    softplus = ops[0]

    def f(x):
        return softplus(x * 2.0, 1.0) + 1.0

    cf = torch.compile(f, backend="neuron", fullgraph=True)
    x = torch.randn(50, 4)
    xn = x.to(DEV).requires_grad_()
    y = cf(xn)
    torch.testing.assert_close(y.detach().cpu(), _ref_softplus(x * 2.0, 1.0) + 1.0)
    y.sum().backward()
    xr = x.clone().requires_grad_()
    (_ref_softplus(xr * 2.0, 1.0) + 1.0).sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), xr.grad)
    progs = [p for p in frontend.programs[-2:] if "kt.softplus" in " ".join(getattr(p, "eager_ops", []))]
    assert progs and all(type(p).__name__ == "Program" for p in progs), [type(p) for p in frontend.programs[-2:]]


def test_compile_error_names_the_file_and_the_cache_path(tmp_path, _cache):
    src = tmp_path / "broken.c"
    src.write_text("#include <nk_custom.h>\nNK_KERNEL(broken) {\n    return undefined_name;\n}\n")
    with pytest.raises(toolchain.CompileError) as e:
        @K.op("kt::broken", file=src, grid="numel(x)")
        def broken(x: torch.Tensor) -> torch.Tensor:
            return torch.empty_like(x)
    msg = str(e.value)
    assert f"{src}:3" in msg and "undefined_name" in msg, msg        # the compiler's message, the user's line
    kept = re.search(r"kept at (\S+\.c)", msg).group(1)
    assert kept.startswith(str(_cache)) and os.path.exists(kept), msg  # the source kept in the cache


def test_missing_compiler_and_bad_definitions(monkeypatch, _cache):
    monkeypatch.setenv("NEURON_CC", "/nonexistent/cc")
    with pytest.raises(toolchain.CompileError, match=r"cannot run the C compiler '/nonexistent/cc'"):
        K.compile("NK_KERNEL(k) { return 0; }", entry="k")
    monkeypatch.delenv("NEURON_CC")
    with pytest.raises(RuntimeError, match="defines no function 'nope'"):
        K.compile(SOFTPLUS, entry="nope")
    with pytest.raises(ValueError, match="cannot make a schema"):
        @K.op("kt::noannot", src=SOFTPLUS, entry="softplus", grid=1)
        def noannot(x):
            return x
    with pytest.raises(ValueError, match="has a type C kernels do not take"):
        @K.op("kt::listarg", src=SOFTPLUS, entry="softplus", grid=1)
        def listarg(x: torch.Tensor, n: list[int]) -> torch.Tensor:
            return x
    with pytest.raises(ValueError, match="cannot read grid"):
        @K.op("kt::badgrid", src=SOFTPLUS, entry="softplus", grid="numel(y)")
        def badgrid(x: torch.Tensor) -> torch.Tensor:
            return x
    with pytest.raises(ValueError, match="out_like must name"):
        @K.op("kt::badlike", src=SOFTPLUS, entry="softplus", grid="numel(x)", out_like=("beta",))
        def badlike(x: torch.Tensor, beta: float) -> torch.Tensor:
            return x

    @K.op("kt::badlike", src=SOFTPLUS, entry="softplus", grid="numel(x)", out_like=("x",))
    def goodlike(x: torch.Tensor, beta: float) -> torch.Tensor:  # a failed definition registered nothing
        return torch.empty_like(x)
    assert goodlike.fast
    with pytest.raises(ValueError, match="namespace::name"):
        K.op("nonamespace", src=SOFTPLUS, grid=1)


def test_cache_is_content_addressed(_cache):
    a = K.compile(SOFTPLUS, entry="softplus")
    b = K.compile(SOFTPLUS + "\n", entry="softplus")
    assert a.path.startswith(os.path.join(str(_cache), "kernels")) and os.path.exists(a.path)
    assert a.key != b.key and a.fn and b.fn
    assert K.compile(SOFTPLUS, entry="softplus").key == a.key


# ---- the ready-kernel library ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def lib(_cache):
    import torchneuron.kernel.library as L
    return L


def _check(fn, ref, inputs, compiled, atol=2e-5, rtol=1e-4):
    """fn on neuron (eager or compiled) against ref on the CPU: output and the gradients of every
    floating input that requires grad, for a random output gradient."""
    torch._dynamo.reset()
    run = torch.compile(fn, backend="neuron", fullgraph=True) if compiled else fn
    cpu = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    dev = [t.detach().to(DEV).requires_grad_(t.requires_grad) for t in inputs]
    y = run(*dev)
    yr = ref(*cpu)
    torch.testing.assert_close(y.detach().cpu(), yr.detach(), atol=atol, rtol=rtol)
    g = torch.randn_like(yr)
    y.backward(g.to(DEV))
    yr.backward(g)
    for a, b in zip(dev, cpu):
        if b.requires_grad:
            torch.testing.assert_close(a.grad.cpu(), b.grad, atol=atol * 10, rtol=rtol * 10)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_library_rms_norm(lib, compiled):
    x, w = torch.randn(6, 5, 32, requires_grad=True), torch.randn(32, requires_grad=True)
    _check(lambda x, w: lib.rms_norm(x, w, 1e-6), lambda x, w: torch.nn.functional.rms_norm(x, (32,), w, 1e-6),
           [x, w], compiled)


def _rope_ref(x, cos, sin):
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_library_rope(lib, compiled):
    B, T, H, D = 2, 7, 3, 16
    pos = torch.arange(T, dtype=torch.float32)[:, None] / (10000 ** (torch.arange(D // 2) / (D // 2)))
    x = torch.randn(B, T, H, D, requires_grad=True)
    _check(lambda x, c, s: lib.rope(x, c, s), _rope_ref, [x, pos.cos(), pos.sin()], compiled)


def _moe_ref(x, w, offs):
    out, lo = torch.zeros(x.shape[0], w.shape[2]), 0
    for g, hi in enumerate(offs.tolist()):
        out = out.index_put((torch.arange(lo, hi),), x[lo:hi] @ w[g]) if hi > lo else out
        lo = hi
    return out


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_library_moe_gemm(lib, compiled):
    x, w = torch.randn(13, 8, requires_grad=True), torch.randn(3, 8, 4, requires_grad=True)
    offs = torch.tensor([4, 4, 11], dtype=torch.int32)  # an empty expert, two rows past the last one
    _check(lambda x, w, o: lib.moe_gemm(x, w, o), _moe_ref, [x, w, offs], compiled)


def test_library_opcheck(lib):
    assert lib._rms_norm_fwd.fast and lib._attn_fwd.fast and not lib._moe_gemm.fast  # out_like "x[:-1]"
    r = lambda *s: torch.randn(*s, device=DEV)  # noqa: E731
    offs = torch.tensor([2, 5], dtype=torch.int32, device=DEV)
    x, w = r(5, 8), r(8)
    q, k, v = r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8)
    out, lse = lib._attn_fwd(q, k, v, 0.3, 5.0, True)
    for op, args in ((lib._rms_norm_fwd, (x, w, 1e-6)), (lib._rms_norm_bwd_dx, (r(5, 8), x, w, r(5).abs())),
                     (lib._rms_norm_bwd_dw, (r(5, 8), x, r(5).abs(), w)), (lib._rope, (r(1, 3, 2, 8), r(3, 4), r(3, 4))),
                     (lib._moe_gemm, (x, r(2, 8, 3), offs)), (lib._moe_gemm_dw, (x, r(5, 3), offs, r(2, 8, 3))),
                     (lib._attn_fwd, (q, k, v, 0.3, 5.0, True)),
                     (lib._attn_bwd, (r(1, 2, 4, 8), q, k, v, out, lse, 0.3, 5.0, True))):
        torch.library.opcheck(op.op, args)


def test_library_moe_gemm_bad_offsets_raise_at_sync(lib):
    x, w = torch.randn(5, 4, device=DEV), torch.randn(2, 4, 3, device=DEV)
    lib.moe_gemm(x, w, torch.tensor([3, 2], dtype=torch.int32, device=DEV))
    with pytest.raises(RuntimeError, match=r"nkl::moe_gemm: offs\[1\] = 2 is out of order"):
        torch.neuron.synchronize()


def _softcap_ref(q, k, v, cap, causal):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = cap * torch.tanh(s / cap)
    if causal:
        T = q.shape[-2]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_library_softcap_attention(lib, compiled, causal):
    q, k, v = (torch.randn(2, 3, 9, 8, requires_grad=True) * 2 for _ in range(3))
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    _check(lambda q, k, v: lib.softcap_attention(q, k, v, softcap=5.0, causal=causal),
           lambda q, k, v: _softcap_ref(q, k, v, 5.0, causal), [q, k, v], compiled)


# ---- aten::_grouped_mm (native, gemm_grouped.c) -----------------------------------------------------

def _gmm_cases():
    o = lambda *v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    return {  # (mat_a, mat_b, offs): shapes whose strides meet the CPU's 16-byte rule
        "2d3d": (torch.randn(12, 8), torch.randn(3, 8, 4), o(3, 3, 10)),
        "3d2d": (torch.randn(3, 5, 8), torch.randn(8, 12), o(4, 8, 12)),
        "2d2d": (torch.randn(4, 12), torch.randn(12, 8), o(4, 4, 12)),
        "3d3d": (torch.randn(2, 5, 8), torch.randn(2, 8, 4), None),
    }


@pytest.mark.parametrize("mode", ["2d3d", "3d2d", "2d2d", "3d3d"])
def test_grouped_mm_matches_cpu(mode):
    a, b, offs = _gmm_cases()[mode]
    ref = torch._grouped_mm(a, b, offs)
    dev = lambda t: None if t is None else t.to(DEV)  # noqa: E731
    out = torch._grouped_mm(dev(a), dev(b), dev(offs))
    if mode == "2d3d":  # rows past the last offset: unwritten on the CPU, zeros here
        ref, out = ref[:10], out[:10]
    torch.testing.assert_close(out.cpu(), ref)
    bb = torch._grouped_mm(dev(a).bfloat16(), dev(b).bfloat16(), dev(offs))
    assert bb.dtype == torch.bfloat16


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_grouped_mm_backward(compiled):
    # compiled: bfloat16, the only dtype torch's meta function of _grouped_mm (what tracing runs) takes
    dt = torch.bfloat16 if compiled else torch.float32
    a, b = torch.randn(12, 8).to(dt).requires_grad_(), torch.randn(3, 8, 8).to(dt).requires_grad_()
    offs = torch.tensor([3, 3, 12], dtype=torch.int32)
    tol = 3e-2 if compiled else 2e-5
    _check(lambda a, b, o: torch._grouped_mm(a, b, o), lambda a, b, o: torch._grouped_mm(a, b, o),
           [a, b, offs], compiled, atol=tol, rtol=tol)


def test_grouped_mm_bad_input_as_the_cpu():
    a, b, offs = _gmm_cases()["2d3d"]
    for args, kw in (((a.double(), b.double(), offs), {}), ((a, b), {}), ((a, b, offs.long()), {}),
                     ((a, b, offs), {"out_dtype": torch.float16})):
        with pytest.raises(RuntimeError) as cpu:
            torch._grouped_mm(*args, **kw)
        with pytest.raises(RuntimeError) as dev:
            torch._grouped_mm(*(t.to(DEV) for t in args), **kw)
        assert str(dev.value).splitlines()[0] == str(cpu.value).splitlines()[0]


# ---- the tutorial's example ---------------------------------------------------------------------------

def test_example_runs(tmp_path):
    env = dict(os.environ, NEURON_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "custom_kernel.py")], capture_output=True,
                       text=True, env=env, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0 and "all checks passed" in p.stdout, describe(p)
