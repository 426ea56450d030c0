"""A C kernel as a PyTorch op on neuron: the example of docs/custom-kernels.md.

    make install && .venv/bin/python examples/custom_kernel.py

Defines a fused SwiGLU (silu(a) * b) as a C kernel, its backward as a second C kernel, and checks both
against PyTorch in eager mode and under torch.compile; then uses two kernels of the ready library.
"""
import torch

import torchneuron.kernel as K

SRC = r"""
#include <nk_custom.h>
#include <math.h>

/* t[0] = a, t[1] = b, t[2] = out: out = silu(a) * b, one element per work item */
NK_KERNEL(swiglu)
{
    if (t[0].dtype != NKC_F32 || t[1].dtype != NKC_F32)
        return nk_fail(tile, "swiglu takes float32 tensors");
    if (t[0].numel != t[1].numel)
        return nk_fail(tile, "a has %lld elements, b %lld", (long long)t[0].numel, (long long)t[1].numel);
    const float *a = t[0].data, *b = t[1].data;
    float *out = t[2].data;
    for (int64_t i = tile->begin; i < tile->end; i++)
        out[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
    return 0;
}

/* t[0] = dout, t[1] = a, t[2] = b, t[3] = da, t[4] = db */
NK_KERNEL(swiglu_backward)
{
    const float *g = t[0].data, *a = t[1].data, *b = t[2].data;
    float *da = t[3].data, *db = t[4].data;
    for (int64_t i = tile->begin; i < tile->end; i++) {
        float sg = 1.0f / (1.0f + expf(-a[i]));
        db[i] = g[i] * a[i] * sg;
        da[i] = g[i] * b[i] * sg * (1.0f + a[i] * (1.0f - sg));
    }
    return 0;
}
"""


# The signature is the op's schema; the body allocates the outputs and is the fake (meta) implementation
# torch.compile traces with.  out_like lets the glue allocate the outputs itself: no Python per call.
@K.op("example::swiglu", src=SRC, grid="numel(a)", out_like="a")
def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(a)


@K.op("example::swiglu_backward", src=SRC, grid="numel(a)", out_like=("a", "b"))
def swiglu_backward(dout: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(a), torch.empty_like(b)


def setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def backward(ctx, dout):
    a, b = ctx.saved_tensors
    return swiglu_backward(dout, a, b)


swiglu.register_autograd(backward, setup_context=setup_context)


def reference(a, b):
    return torch.nn.functional.silu(a) * b


def check(name, got, want):
    torch.testing.assert_close(got.detach().cpu(), want.detach(), atol=1e-5, rtol=1e-4)
    print(f"  {name}: ok")


def main():
    torch.manual_seed(0)
    a, b = torch.randn(256, 64), torch.randn(256, 64)
    an, bn = a.to("neuron").requires_grad_(), b.to("neuron").requires_grad_()
    ar, br = a.clone().requires_grad_(), b.clone().requires_grad_()

    print("eager")
    out = swiglu(an, bn)  # torch.ops.example.swiglu: queued on the current neuron stream
    ref = reference(ar, br)
    check("forward", out, ref)
    g = torch.randn_like(ref)
    out.backward(g.to("neuron"))
    ref.backward(g)
    check("grad a", an.grad, ar.grad)
    check("grad b", bn.grad, br.grad)
    torch.library.opcheck(swiglu.op, (an.detach(), bn.detach()))
    print("  opcheck: ok")

    print("torch.compile (one graph: the kernel is a library call inside it)")
    mlp = torch.compile(lambda x, w1, w2: swiglu(x @ w1, x @ w2).sum(), backend="neuron", fullgraph=True)
    x, w1, w2 = torch.randn(32, 16), torch.randn(16, 64), torch.randn(16, 64)
    check("compiled", mlp(x.to("neuron"), w1.to("neuron"), w2.to("neuron")), reference(x @ w1, x @ w2).sum())

    print("ready kernels (torchneuron.kernel.library)")
    import torchneuron.kernel.library as L
    xs, w = torch.randn(4, 32), torch.randn(32)
    check("rms_norm", L.rms_norm(xs.to("neuron"), w.to("neuron"), 1e-6), torch.nn.functional.rms_norm(xs, (32,), w, 1e-6))
    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    s = 30.0 * torch.tanh(q @ k.transpose(-1, -2) / 4.0 / 30.0)
    check("softcap_attention", L.softcap_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"), softcap=30.0),
          torch.softmax(s, -1) @ v)

    print("a kernel error is raised at the next synchronization, naming the op")
    swiglu(torch.randn(8, device="neuron"), torch.randn(4, device="neuron"))
    try:
        torch.neuron.synchronize()
        raise SystemExit("expected an error")
    except RuntimeError as e:
        print(f"  {str(e).splitlines()[0]}")
    print("all checks passed")


if __name__ == "__main__":
    main()
