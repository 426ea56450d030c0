"""The workload groups: per-op latency, GEMM, memory-bound ops, SDPA, AdamW (the GPT step is in gpt.py).

Every case is a setup(device) -> step() pair; inputs are created once per device (from the same CPU
seed and moved, so both devices compute the same thing) and each step allocates its output as eager
code does.
"""
import torch
import torch.nn.functional as F

from .harness import Case

aten = torch.ops.aten


def _rand(shape, dev, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=dev, dtype=dtype)


# ------------------------------------------------------------------------------------ 1. latency
def latency_cases(quick):
    ops = [
        ("add, 1 element", lambda d: (lambda a: lambda: a + a)(_rand((1,), d))),
        ("add, 1024 elements", lambda d: (lambda a: lambda: a + a)(_rand((1024,), d))),
        ("torch.empty(1024)", lambda d: lambda: torch.empty(1024, device=d)),
        ("x.view(-1), 1024 elements", lambda d: (lambda a: lambda: a.view(-1))(_rand((32, 32), d))),
        ("mm 16x16", lambda d: (lambda a, b: lambda: torch.mm(a, b))(_rand((16, 16), d), _rand((16, 16), d, seed=1))),
    ]
    cases = []
    for name, mk in ops:
        cases.append(Case(f"{name} [enqueue]", mk, max_iters=200000))

        def mk_sync(d, mk=mk):
            op = mk(d)
            if d == "neuron":
                def step():
                    op()
                    torch.neuron.synchronize()
                return step
            return op
        cases.append(Case(f"{name} [sync each]", mk_sync, max_iters=200000))
    return cases


# --------------------------------------------------------------------------------------- 2. GEMM
def gemm_cases(quick):
    """f32 mm at the square sizes (the gemm.png curve) and the transformer shapes, addmm (bias + a @ b),
    bf16 mm and torch._int_mm (int8 -> int32) at the issue's shapes, each held to its own dtype's peak (bf16:
    the AMX tile peak where the machine has AMX; int8: the AMX int8 peak), and GEMV (M = 1) against 64 MiB
    and 224 MiB weights."""
    cases = []
    big = [(2048, 2048, 2048)] + ([] if quick else [(4096, 4096, 4096)])
    model = [(512, 3072, 768), (128, 768, 768)]
    for m, n, k in [(512, 512, 512), (1024, 1024, 1024)] + big + model:
        def setup(d, m=m, n=n, k=k):
            a, b = _rand((m, k), d), _rand((k, n), d, seed=1)
            return lambda: torch.mm(a, b)
        cases.append(Case(f"mm f32 {m}x{n}x{k}", setup, flops=2.0 * m * n * k, limit="fma"))
    for m, n, k in big + model:
        def setup_addmm(d, m=m, n=n, k=k):
            a, b, bias = _rand((m, k), d), _rand((k, n), d, seed=1), _rand((n,), d, seed=2)
            return lambda: torch.addmm(bias, a, b)
        cases.append(Case(f"addmm f32 {m}x{n}x{k}", setup_addmm, flops=2.0 * m * n * k, limit="fma"))
    for m, n, k in [(1024, 1024, 1024)] + big + model:
        def setup_bf16(d, m=m, n=n, k=k):
            a, b = _rand((m, k), d, torch.bfloat16), _rand((k, n), d, torch.bfloat16, seed=1)
            return lambda: torch.mm(a, b)
        cases.append(Case(f"mm bf16 {m}x{n}x{k}", setup_bf16, flops=2.0 * m * n * k, limit="bf16_gemm"))
    for m, n, k in [(1024, 1024, 1024)] + big + model:
        def setup_int8(d, m=m, n=n, k=k):
            g = torch.Generator().manual_seed(3)
            a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8).to(d)
            b = torch.randint(-128, 128, (k, n), generator=g, dtype=torch.int8).to(d)
            return lambda: torch._int_mm(a, b)
        cases.append(Case(f"_int_mm int8 {m}x{n}x{k}", setup_int8, flops=2.0 * m * n * k, limit="int8",
                          note="GOP/s (a multiply-add is 2 ops)"))

    for n_out, n_in in ((4096, 4096), (4096, 14336)):
        def setup_gemv(d, n_out=n_out, n_in=n_in):
            w, x = _rand((n_out, n_in), d), _rand((1, n_in), d, seed=1)
            return lambda: F.linear(x, w)
        mib = n_out * n_in * 4 >> 20
        cases.append(Case(f"GEMV f32 M=1, W {n_out}x{n_in} (F.linear)", setup_gemv, flops=2.0 * n_out * n_in,
                          nbytes=n_out * n_in * 4 + (n_in + n_out) * 4, metric="bytes",
                          limit="dram_read" if mib <= 64 else "dram_read_big",
                          note=f"{mib} MiB weight streamed from DRAM"))
    return cases


# ---------------------------------------------------------------------------------- 3. memory-bound
def memory_cases(quick):
    cases = []
    for n, tag, limit in ((16 << 20, "16M", "dram"), (256 << 10, "256K", "cache")):
        cases += _memory_cases_for(n, tag, limit)
    return cases


def _memory_cases_for(n, tag, limit):
    """The memory-bound cases on [n // 1024, 1024] f32 tensors (a function per size: no late binding)."""
    rows = n // 1024
    cases = []

    def x_(d, seed=0):
        return _rand((rows, 1024), d, seed=seed)

    def c(name, setup, bytes_per_elem, note="", lim=limit):
        cases.append(Case(f"{name} [{tag}]", setup, nbytes=float(bytes_per_elem) * n, limit=lim,
                          max_iters=100000, note=note))

    def s_add(d):
        a, b = x_(d), x_(d, 1)
        return lambda: a + b
    c("add", s_add, 12)

    def s_add_out(d):
        a, b, o = x_(d), x_(d, 1), x_(d, 2)
        return lambda: torch.add(a, b, out=o)
    c("add (out=, no allocation)", s_add_out, 12)

    def s_mul(d):
        a, b = x_(d), x_(d, 1)
        return lambda: a * b
    c("mul", s_mul, 12)

    def s_gelu(d):
        a = x_(d)
        return lambda: F.gelu(a)
    c("gelu", s_gelu, 8)

    def s_silu(d):
        a = x_(d)
        return lambda: F.silu(a)
    c("silu", s_silu, 8)

    def s_sum(d):
        a = x_(d)
        return lambda: a.sum()
    c("sum (all)", s_sum, 4, lim=limit + "_read")

    def s_amax(d):
        a = x_(d)
        return lambda: a.amax()
    c("amax (all)", s_amax, 4, lim=limit + "_read")

    def s_softmax(d):
        a = x_(d)
        return lambda: torch.softmax(a, dim=-1)
    c(f"softmax [{rows},1024] dim=-1", s_softmax, 8)

    def s_ln(d):
        a = x_(d)
        w, b = torch.ones(1024, device=d), torch.zeros(1024, device=d)
        return lambda: F.layer_norm(a, (1024,), w, b)
    c("layer_norm(1024)", s_ln, 8)

    def s_gelu_bw(d):
        a, g = x_(d), x_(d, 1)
        return lambda: aten.gelu_backward(g, a)
    c("gelu backward", s_gelu_bw, 12)

    def s_softmax_bw(d):
        a, g = x_(d), x_(d, 1)
        y = torch.softmax(a, dim=-1)
        return lambda: aten._softmax_backward_data(g, y, -1, torch.float32)
    c("softmax backward", s_softmax_bw, 12)

    def s_ln_bw(d):
        a, g = x_(d), x_(d, 1)
        w, b = torch.ones(1024, device=d), torch.zeros(1024, device=d)
        _, mean, rstd = aten.native_layer_norm(a, [1024], w, b, 1e-5)
        return lambda: aten.native_layer_norm_backward(g, a, [1024], mean, rstd, w, b, [True, True, True])
    c("layer_norm backward", s_ln_bw, 12)

    def s_rms(d):
        a, w = x_(d), _rand((1024,), d, seed=3)
        return lambda: F.rms_norm(a, (1024,), w, 1e-5)
    c("rms_norm(1024)", s_rms, 8)

    def s_rms_fb(d):
        a, g = x_(d).requires_grad_(), x_(d, 1)
        w = _rand((1024,), d, seed=3).requires_grad_()

        def step():
            a.grad = w.grad = None
            F.rms_norm(a, (1024,), w, 1e-5).backward(g)
        return step
    c("rms_norm fwd+bwd (autograd)", s_rms_fb, 20)
    return cases


# ----------------------------------------------------------------------------------------- 4. SDPA
def sdpa_cases(quick):
    """F.scaled_dot_product_attention at B=8, H=12, T=512, D=64 (BERT/GPT-2 size), causal and not, forward
    (no_grad) and forward + backward; --quick uses B=2."""
    B, H, T, D = (2 if quick else 8), 12, 512, 64
    cases = []
    for causal in (True, False):
        fwd_flops = 4.0 * B * H * T * T * D / (2 if causal else 1)   # QK^T and PV (causal: half)
        tag = "causal" if causal else "non-causal"

        def s_fwd(d, causal=causal):
            q, k, v = (_rand((B, H, T, D), d, seed=i) for i in range(3))

            def step():
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return step

        def s_fwd_bwd(d, causal=causal):
            q, k, v = (_rand((B, H, T, D), d, seed=i).requires_grad_() for i in range(3))
            go = _rand((B, H, T, D), d, seed=3)

            def step():
                q.grad = k.grad = v.grad = None
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                out.backward(go)
            return step

        cases.append(Case(f"SDPA {tag} fwd B{B} H{H} T{T} D{D}", s_fwd, flops=fwd_flops, limit="fma",
                          note="flops: 4*B*H*T^2*D (causal: half)"))
        cases.append(Case(f"SDPA {tag} fwd+bwd B{B} H{H} T{T} D{D}", s_fwd_bwd, flops=3.5 * fwd_flops,
                          limit="fma", note="flops: 3.5x forward"))
    return cases


# ---------------------------------------------------------------------------------------- 6. AdamW
def adamw_cases(quick):
    n_tensors, numel = (4 if quick else 16), 1 << 20
    total = n_tensors * numel
    nbytes = 28.0 * total          # read p, g, m, v (16 B) + write p, m, v (12 B) per parameter

    def make(fused):
        impl = {}

        def setup(d):
            ps = []
            for i in range(n_tensors):
                p = _rand((1024, 1024), d, seed=i).requires_grad_()
                p.grad = _rand((1024, 1024), d, seed=100 + i)
                ps.append(p)
            kw = {"fused": True} if fused else {}
            opt = torch.optim.AdamW(ps, lr=1e-4, weight_decay=0.1, **kw)
            if fused:
                impl[d] = "fused"
            else:
                try:
                    from torch.optim.optimizer import _default_to_fused_or_foreach
                    impl[d] = "foreach" if _default_to_fused_or_foreach(ps, False, False)[1] else "for-loop"
                except Exception:  # noqa: BLE001
                    impl[d] = "?"
            if torch.device(d).type == "cpu":
                return opt.step

            def step():
                # one step at a time, as in training (loss.item() synchronizes every step): the queue
                # fuses the multi-tensor ops of one step, never those of two consecutive steps
                opt.step()
                torch.neuron.synchronize()
            return step

        def after(res):
            res.extra["info"] = "impl: " + ", ".join(f"{k} {v}" for k, v in impl.items())
        return setup, after

    (s_def, a_def), (s_fused, a_fused) = make(False), make(True)
    return [
        Case(f"AdamW step, {n_tensors} x 1M params (default impl)", s_def, nbytes=nbytes, limit="dram",
             after=a_def, note="torch picks foreach or for-loop per device; neuron synchronizes after every step"),
        Case(f"AdamW step, {n_tensors} x 1M params (fused=True)", s_fused, nbytes=nbytes, limit="dram",
             after=a_fused, note="aten._fused_adamw_; neuron synchronizes after every step"),
    ]
