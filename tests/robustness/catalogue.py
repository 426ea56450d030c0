"""The bad-input catalogue: each case is data (a name, a class, a snippet and an expectation).

A snippet is Python run twice in a worker process, once with `dev` = "neuron" and once with
`dev` = "cpu" (names in scope: torch, F, math, io, dev, cpu).  It may set `out`; the worker compares
`out` (moved to the CPU) between the two runs, or the exceptions they raise.

expect:
  "cpu"                      do what the CPU does for the same input: the same exception type
                             (or a subclass) and message, or the same values;
  ("raises", Type, pattern)  neuron-only situations (a second device, a CPU out=, OOM): the neuron
                             run must raise Type with a message matching the regex pattern;
  "ok"                       the neuron run must succeed and give the CPU run's values;
  ("env", VAR)               garbage in an environment variable: the neuron run succeeds with the
                             CPU's values, or raises RuntimeError naming VAR; never a crash.

env: extra environment of the worker (cases with different env run in different processes).
alone: run in a process of its own (a crash is likely, or the case poisons the process).
fast: part of the `make test` subset (tests/python/test_robustness.py).
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    cls: str
    code: str
    expect: object = "cpu"
    env: tuple = ()
    alone: bool = False
    fast: bool = False
    pattern: str = ""  # an extra regex the neuron message may match instead of the CPU's message


CASES = []


def case(name, cls, code, expect="cpu", env=None, alone=False, fast=False, pattern=""):
    env = tuple(sorted((env or {}).items()))
    CASES.append(Case(name, cls, code.strip("\n"), expect, env, alone, fast, pattern))


# ---- indices out of range -------------------------------------------------------------------------
IDX = "x = torch.arange(20., device=dev).reshape(4, 5)\n"
ASYNC = "def _dv(data, **kw):\n    t = torch.tensor(data, **kw)\n    return t.add(torch.zeros_like(t))\n"
_index_ops = {
    "getitem_tensor": "out = x[torch.tensor([{i}], device=dev)]",
    "getitem_int": "out = x[{i}]",
    "getitem_2d": "out = x[1, {i}]",
    "index_select": "out = x.index_select(0, torch.tensor([0, {i}], device=dev))",
    "gather": "out = x.gather(1, torch.tensor([[0], [{i}], [1], [2]], device=dev))",
    "scatter": "out = x.clone().scatter_(1, torch.tensor([[{i}]], device=dev), 1.0)",
    "scatter_add": "out = x.clone().scatter_add_(1, torch.tensor([[{i}]], device=dev), torch.ones(1, 1, device=dev))",
    "scatter_reduce": "out = x.clone().scatter_reduce_(1, torch.tensor([[{i}]], device=dev), torch.ones(1, 1, device=dev), 'amax')",
    "index_add": "out = x.clone().index_add_(0, torch.tensor([{i}], device=dev), torch.ones(1, 5, device=dev))",
    "index_copy": "out = x.clone().index_copy_(0, torch.tensor([{i}], device=dev), torch.ones(1, 5, device=dev))",
    "index_fill": "out = x.clone().index_fill_(0, torch.tensor([{i}], device=dev), 7.0)",
    "index_put": "out = x.clone().index_put_((torch.tensor([{i}], device=dev),), torch.tensor(1.0, device=dev))",
    "index_put_accumulate": "out = x.clone().index_put_((torch.tensor([{i}], device=dev),), torch.tensor(1.0, device=dev), accumulate=True)",
    "setitem_tensor": "y = x.clone(); y[torch.tensor([{i}], device=dev)] = 3.0; out = y",
    "take": "out = x.take(torch.tensor([{i}], device=dev))",
    "put": "out = x.clone().put_(torch.tensor([{i}], device=dev), torch.tensor([1.0], device=dev))",
    "embedding": "out = F.embedding(torch.tensor([{i}], device=dev), x)",
    "embedding_bag": "out = F.embedding_bag(torch.tensor([[{i}]], device=dev), x)",
    "one_hot": "out = F.one_hot(torch.tensor([{i}], device=dev), 4)",
    "nll_loss": "out = F.nll_loss(x, torch.tensor([0, 1, 2, {i}], device=dev))",
    "cross_entropy": "out = F.cross_entropy(x, torch.tensor([0, 1, 2, {i}], device=dev))",
    "narrow": "out = x.narrow(1, {i}, 2)",
    "select": "out = x.select(0, {i})",
    "index_tensor_2d": "out = x[torch.tensor([0, 1], device=dev), torch.tensor([0, {i}], device=dev)]",
    "take_along_dim": "out = torch.take_along_dim(x, torch.tensor([[{i}]], device=dev), 1)",
}
for op, body in _index_ops.items():
    for tag, i in (("big", 50), ("neg", -50)):
        case(f"index.{op}.{tag}", "indices out of range", IDX + body.format(i=i), fast=(tag == "big"))
    # async: every index tensor is the output of a device kernel (queued, not yet run when the op
    # reads it); an int index is read back from the device first
    code = (ASYNC + IDX + body.format(i="torch.tensor(40, device=dev).add(10).item()").replace("torch.tensor([", "_dv(["))
    case(f"index.{op}.async", "indices out of range (async)", code + "\nout = out.sum() if torch.is_tensor(out) else out")
case("index.bincount.neg", "indices out of range", "out = torch.bincount(torch.tensor([1, -1], device=dev))", fast=True)
case("index.freed_before_sync", "indices out of range (async)",
     IDX + "r = x.index_select(0, torch.tensor([99], device=dev))\ndel r\nout = x.sum()")
case("index.device_index_tensor_async", "indices out of range (async)",
     IDX + "idx = torch.arange(3, device=dev) * 30\nout = x.flatten()[idx]")
case("index.masked_select_shape", "indices out of range", IDX + "out = x.masked_select(torch.ones(3, dtype=torch.bool, device=dev))", fast=True)
case("index.bool_mask_shape", "indices out of range", IDX + "out = x[torch.ones(7, dtype=torch.bool, device=dev)]", fast=True)
case("index.float_index", "indices out of range", IDX + "out = x[torch.tensor([1.0], device=dev)]", fast=True)

# ---- mixed devices and device indices -------------------------------------------------------------
MIX = "a = torch.ones(3, device=dev)\nc = torch.ones(3)\n"
DEV = "mixed devices"
_other = ("raises", RuntimeError, r"device")
case("device.neuron1_tensor", DEV, "out = torch.ones(2, device='neuron:1')", _other, fast=True)
case("device.to_neuron1", DEV, "out = torch.ones(2).to('neuron:1')", _other, fast=True)
case("device.set_device1", DEV, "torch.neuron.set_device(1)", _other, fast=True)
case("device.neuron_neg1", DEV, "out = torch.ones(2, device='neuron:-1')", _other)
case("device.neuron_big", DEV, "out = torch.empty(2, device='neuron:99')", _other)
case("device.device_ctx1", DEV, "with torch.neuron.device(1):\n    out = torch.ones(1, device='neuron')", _other)
case("device.props1", DEV, "out = torch.neuron.get_device_properties(1)", ("raises", Exception, r"device|range|invalid"))
case("device.stream1", DEV, "out = torch.neuron.Stream(device=1)", _other)
for op, body in {
    "add": "out = a + c", "mul": "out = torch.mul(a, c)", "matmul": "out = a @ c",
    "cat": "out = torch.cat([a, c])", "where": "out = torch.where(a > 0, a, c)",
    "copy_out_cpu": "out = torch.add(a, a, out=c)", "addmm": "out = torch.addmm(c.view(1, 3), a.view(1, 3), torch.eye(3, device=dev))",
    "index_add_src": "out = a.clone().index_add_(0, torch.tensor([0], device=dev), c[:1])",
    "inplace_cpu_self": "out = c.add_(a)", "inplace_neuron_self": "out = a.clone().add_(c)",
    "mm_out_cpu": "out = torch.mm(a.view(3, 1), a.view(1, 3), out=torch.empty(3, 3))",
    "stack": "out = torch.stack([a, c])", "lerp": "out = torch.lerp(a, c, 0.5)",
}.items():
    case(f"device.mixed.{op}", DEV, MIX + body, ("raises", RuntimeError, r"device"), fast=True)
# CPU zero-dim tensors are allowed beside device tensors (as on CUDA): same values as the CPU
for op, body in {
    "add": "out = a + torch.tensor(2.0)", "mul": "out = torch.mul(a, torch.tensor(3))",
    "where": "out = torch.where(a > 0, a, torch.tensor(5.0))",
    "pow": "out = a.pow(torch.tensor(2.0))", "div_": "out = a.clone().div_(torch.tensor(4.0))",
    "lerp": "out = torch.lerp(a, a * 3, torch.tensor(0.5))", "index_cpu_idx": "out = a[torch.tensor([0, 2])]",
    "masked_fill": "out = a.masked_fill(a > 0, torch.tensor(9.0))", "maximum": "out = torch.maximum(a, torch.tensor(2.0))",
    "addcmul": "out = torch.addcmul(a, a, a, value=torch.tensor(2.0).item())",
    "copy_from_cpu": "out = a.clone().copy_(torch.tensor(4.0))",
}.items():
    case(f"device.cpu_scalar.{op}", DEV, MIX + body, "ok", fast=True)
# clamp.Tensor is ExactSame in native_functions.yaml (only its out= is NoCheck): CUDA refuses a CPU bound
# ("... argument min in method wrapper_CUDA_clamp_Tensor"), and so do we
case("device.cpu_scalar.clamp", DEV, MIX + "out = a.clamp(min=torch.tensor(2.0))", ("raises", RuntimeError, r"same device"), fast=True)

# ---- sizes ----------------------------------------------------------------------------------------
SZ = "sizes"
_sizes = {
    "empty_neg": "out = torch.empty(-1, device=dev)",
    "zeros_neg": "out = torch.zeros(2, -3, device=dev)",
    "full_neg": "out = torch.full((-2,), 1.0, device=dev)",
    "randn_neg": "out = torch.randn(-1, device=dev)",
    "new_empty_neg": "out = torch.ones(2, device=dev).new_empty((-4,))",
    "reshape_two_minus1": "out = torch.ones(6, device=dev).reshape(-1, -1)",
    "reshape_bad": "out = torch.ones(6, device=dev).reshape(4, 2)",
    "view_bad": "out = torch.ones(6, device=dev).view(5)",
    "view_neg": "out = torch.ones(6, device=dev).view(-2, 3)",
    "expand_neg": "out = torch.ones(1, device=dev).expand(-2)",
    "expand_bad": "out = torch.ones(2, device=dev).expand(3)",
    "repeat_neg": "out = torch.ones(2, device=dev).repeat(-1)",
    "repeat_few": "out = torch.ones(2, 2, device=dev).repeat(2)",
    "narrow_neglen": "out = torch.ones(5, device=dev).narrow(0, 1, -1)",
    "arange_step0": "out = torch.arange(0, 5, 0, device=dev)",
    "arange_wrongsign": "out = torch.arange(0, 5, -1, device=dev)",
    "linspace_neg": "out = torch.linspace(0, 1, -3, device=dev)",
    "split_zero": "out = torch.ones(4, device=dev).split(0)",
    "chunk_zero": "out = torch.ones(4, device=dev).chunk(0)",
    "unfold_step0": "out = torch.ones(6, device=dev).unfold(0, 2, 0)",
    "unfold_big": "out = torch.ones(6, device=dev).unfold(0, 9, 1)",
    "slice_step0": "out = torch.ones(6, device=dev)[::0]",
    "slice_negstep": "out = torch.ones(6, device=dev)[::-1]",
    "permute_dup": "out = torch.ones(2, 3, device=dev).permute(0, 0)",
    "transpose_dim": "out = torch.ones(2, 3, device=dev).transpose(0, 5)",
    "sum_dim": "out = torch.ones(2, 3, device=dev).sum(5)",
    "softmax_dim": "out = torch.ones(2, 3, device=dev).softmax(3)",
    "flatten_dims": "out = torch.ones(2, 3, device=dev).flatten(1, 0)",
    "unflatten_bad": "out = torch.ones(6, device=dev).unflatten(0, (4, 2))",
    "cat_empty_list": "out = torch.cat([])",
    "cat_mismatch": "out = torch.cat([torch.ones(2, 3, device=dev), torch.ones(2, 4, device=dev)])",
    "stack_mismatch": "out = torch.stack([torch.ones(2, device=dev), torch.ones(3, device=dev)])",
    "mm_mismatch": "out = torch.ones(2, 3, device=dev) @ torch.ones(4, 2, device=dev)",
    "bmm_batch": "out = torch.bmm(torch.ones(2, 2, 3, device=dev), torch.ones(3, 3, 2, device=dev))",
    "mv_mismatch": "out = torch.mv(torch.ones(2, 3, device=dev), torch.ones(4, device=dev))",
    "broadcast_add": "out = torch.ones(2, 3, device=dev) + torch.ones(4, device=dev)",
    "linear_mismatch": "out = F.linear(torch.ones(2, 3, device=dev), torch.ones(4, 5, device=dev))",
    "conv2d_channels": "out = F.conv2d(torch.ones(1, 3, 5, 5, device=dev), torch.ones(2, 4, 3, 3, device=dev))",
    "conv2d_kernel_big": "out = F.conv2d(torch.ones(1, 1, 2, 2, device=dev), torch.ones(1, 1, 3, 3, device=dev))",
    "max_pool_big": "out = F.max_pool2d(torch.ones(1, 1, 2, 2, device=dev), 3)",
    "layer_norm_shape": "out = F.layer_norm(torch.ones(2, 3, device=dev), (4,))",
    "max_empty_dim": "out = torch.ones(0, 3, device=dev).max(0)",
    "amax_empty_dim": "out = torch.ones(0, 3, device=dev).amax(0)",
    "argmax_empty": "out = torch.ones(0, device=dev).argmax()",
    "min_empty_full": "out = torch.ones(0, device=dev).min()",
    "kthvalue_k": "out = torch.ones(3, device=dev).kthvalue(5)",
    "topk_k": "out = torch.ones(3, device=dev).topk(5)",
    "sum_empty": "out = torch.ones(0, 4, device=dev).sum(0)",
    "prod_empty": "out = torch.ones(0, device=dev).prod()",
    "mean_empty": "out = torch.ones(0, device=dev).mean()",
    "mm_empty_k": "out = torch.ones(3, 0, device=dev) @ torch.ones(0, 2, device=dev)",
    "softmax_empty": "out = torch.ones(0, 4, device=dev).softmax(1)",
    "cumsum_empty": "out = torch.ones(0, device=dev).cumsum(0)",
    "sort_empty": "out = torch.ones(0, device=dev).sort()",
    "empty_overflow": "out = torch.empty(2**62, 2**62, device=dev)",
    "empty_int64max": "out = torch.empty(2**63, device=dev)",
    "zeros_overflow_prod": "out = torch.zeros(2**31, 2**31, 2**3, device=dev)",
    "as_strided_oob": "out = torch.ones(4, device=dev).as_strided((10,), (1,))",
    "as_strided_offset_oob": "out = torch.ones(4, device=dev).as_strided((2,), (1,), 3)",
    "as_strided_negstride": "out = torch.ones(4, device=dev).as_strided((2,), (-1,))",
    "as_strided_negsize": "out = torch.ones(4, device=dev).as_strided((-2,), (1,))",
    "as_strided_ok_overlap": "out = torch.arange(4., device=dev).as_strided((3, 2), (1, 1)) * 2",
    "multinomial_neg": "out = torch.multinomial(torch.tensor([0.5, -1.0], device=dev), 1)",
    "multinomial_zero": "out = torch.multinomial(torch.zeros(3, device=dev), 1)",
    "randint_empty_range": "out = torch.randint(5, 5, (2,), device=dev)",
    "eye_neg": "out = torch.eye(-1, device=dev)",
    "tril_indices_neg": "out = torch.tril_indices(-1, 3, device=dev)",
    "interpolate_zero": "out = F.interpolate(torch.ones(1, 1, 4, device=dev), size=0)",
    "pad_neg_big": "out = F.pad(torch.ones(1, 3, device=dev), (-5, 0))",
}
for n, body in _sizes.items():
    case(f"sizes.{n}", SZ, body, fast=not n.startswith(("empty_overflow", "empty_int64", "zeros_overflow")))

# ---- overlap and aliasing in out= and in-place; the out= and in-place contracts --------------------
AL = "aliasing and out="
A = "a = torch.arange(6., device=dev)\n"
_alias = {
    "add_out_self": "torch.add(a, 1, out=a); out = a",
    "add_out_partial": "torch.add(a[:-1], 1, out=a[1:]); out = a",
    "mul_out_reversed": "torch.mul(a, 2, out=a.flip(0)); out = a",
    "expanded_inplace": "out = torch.ones(1, 3, device=dev).expand(2, 3).add_(1)",
    "expanded_out": "e = torch.zeros(1, 3, device=dev).expand(2, 3); torch.add(torch.ones(2, 3, device=dev), 1, out=e); out = e",
    "copy_partial_overlap": "a[1:].copy_(a[:-1]); out = a",
    "copy_self": "a.copy_(a); out = a",
    "cat_out_input": "b = torch.ones(2, device=dev); torch.cat([a, b], out=a); out = a",
    "mm_out_input": "m = torch.ones(3, 3, device=dev); torch.mm(m, m, out=m); out = m",
    "index_select_out_input": "torch.index_select(a, 0, torch.tensor([1, 0], device=dev), out=a[:2]); out = a",
    "gather_out_input": "torch.gather(a, 0, torch.tensor([1, 0], device=dev), out=a[:2]); out = a",
    "inplace_broadcast": "out = torch.ones(3, 1, device=dev).add_(torch.ones(3, 4, device=dev))",
    "inplace_int_float": "out = torch.ones(3, dtype=torch.long, device=dev).add_(1.5)",
    "out_wrong_dtype": "o = torch.empty(6, dtype=torch.long, device=dev); torch.add(a, 1.5, out=o); out = o",
    "out_resize": "o = torch.empty(2, device=dev); torch.add(a, 1, out=o); out = o",
    "out_noncontig": "o = torch.zeros(6, 2, device=dev)[:, 0]; torch.mul(a, 3, out=o); out = o",
    "out_view_resize": "base = torch.zeros(8, device=dev); o = base[:2]; torch.add(a, 1, out=o); out = (o, base)",
    "out_requires_grad": "x = torch.ones(3, device=dev, requires_grad=True); torch.add(x, 1, out=torch.empty(3, device=dev, requires_grad=True))",
    "out_int_from_float_sum": "o = torch.empty((), dtype=torch.long, device=dev); torch.sum(a, 0, out=o); out = o",
    "out_bool_from_compare": "o = torch.empty(6, dtype=torch.float, device=dev); torch.gt(a, 2, out=o); out = o",
    "masked_fill_expanded": "out = torch.zeros(1, 3, device=dev).expand(2, 3).masked_fill_(torch.ones(2, 3, dtype=torch.bool, device=dev), 1.0)",
    "index_put_dup_accumulate": "out = a.clone().index_put_((torch.tensor([1, 1, 1], device=dev),), torch.tensor([1., 2., 3.], device=dev), accumulate=True)",
    "scatter_inplace_src_alias": "out = a.clone(); out.scatter_(0, torch.tensor([0, 1], device=dev), out[2:4])",
    "clamp_out_self": "torch.clamp(a, 1, 3, out=a); out = a",
    "where_out_cond_alias": "torch.where(a > 2, a, -a, out=a); out = a",
    "addmm_out_bias": "b = torch.ones(2, 2, device=dev); torch.addmm(b, b, b, out=b); out = b",
    "transpose_inplace_add": "m = torch.arange(9., device=dev).reshape(3, 3); m.add_(m.t()); out = m",
    "cumsum_out_self": "torch.cumsum(a, 0, out=a); out = a",
    "sort_out_alias": "v = torch.empty(6, device=dev); i = torch.empty(6, dtype=torch.long, device=dev); torch.sort(a.flip(0), out=(v, i)); out = (v, i)",
    "unsqueeze_inplace_view": "v = a.view(2, 3); v.unsqueeze_(0); out = v",
    "resize_shared": "b = a.view(6); b.resize_(10)",
    # out= that overlaps an input of the gathering ops: the CPU refuses before anything runs
    "gather_out_self": "torch.gather(a, 0, torch.tensor([1, 0, 2, 3, 4, 5], device=dev), out=a); out = a",
    "gather_out_resized_onto_input": "o = a[:1]; torch.gather(a, 0, torch.tensor([1, 0], device=dev), out=o); out = a",
    "gather_out_is_index": "i = torch.tensor([1, 0], device=dev); torch.gather(torch.arange(4, device=dev), 0, i, out=i); out = i",
    "index_select_out_self": "torch.index_select(a, 0, torch.arange(6, device=dev), out=a); out = a",
    "take_out_input": "torch.take(a, torch.tensor([1, 0], device=dev), out=a[:2]); out = a",
    "index_out_input": "torch.ops.aten.index.Tensor_out(a, [torch.tensor([1, 0], device=dev)], out=a[:2]); out = a",
    "index_out_index": "i = torch.tensor([1, 0], device=dev); torch.ops.aten.index.Tensor_out(torch.arange(4, device=dev), [i], out=i); out = i",
    "index_select_out_disjoint": "torch.index_select(a[:3], 0, torch.tensor([2, 0], device=dev), out=a[4:]); out = a",
    # an out= that partly overlaps an input (out == input is allowed for these)
    "cumsum_out_partial": "torch.cumsum(a[:3], 0, out=a[1:4]); out = a",
    "cumprod_out_partial": "torch.cumprod(a[:3], 0, out=a[1:4]); out = a",
    "logcumsumexp_out_partial": "torch.logcumsumexp(a[:3], 0, out=a[1:4]); out = a",
    "sort_out_partial": "torch.sort(a[:3], out=(a[1:4], torch.empty(3, dtype=torch.long, device=dev))); out = a",
    "topk_out_partial": "torch.topk(a, 2, out=(a[:2], torch.empty(2, dtype=torch.long, device=dev))); out = a",
    "kthvalue_out_partial": "torch.kthvalue(a.view(2, 3), 1, 0, out=(a[1:4], torch.empty(3, dtype=torch.long, device=dev))); out = a",
    "max_dim_out_partial": "torch.max(a.view(2, 3), 0, out=(a[1:4], torch.empty(3, dtype=torch.long, device=dev))); out = a",
    "aminmax_out_partial": "torch.aminmax(a.view(2, 3), dim=0, out=(a[1:4], a[3:6])); out = a",
    "mse_loss_out_partial": "torch._C._nn.mse_loss(a[:3], a[2:5], 0, out=a[1:4]); out = a",
    "addmv_out_partial": "torch.addmv(a[:2], a.view(2, 3)[:, :2].contiguous(), a[:2].clone(), out=a[1:3]); out = a",
    "baddbmm_out_partial": "b = a[:4].view(1, 2, 2); torch.baddbmm(b, b.clone(), b.clone(), out=a[1:5].view(1, 2, 2)); out = a",
    "masked_select_out_partial": "torch.masked_select(a[:3], torch.tensor([True, False, True], device=dev), out=a[1:3]); out = a",
    "index_put_values_partial": "a[1:4].index_put_((torch.tensor([0, 1], device=dev),), a[:2]); out = a",
    "cross_out_self": "torch.linalg.cross(a[:3], a[3:].clone(), out=a[:3]); out = a",
    "cumsum_out_self_ok": "torch.cumsum(a, 0, out=a); out = a",
    "sort_out_self_ok": "torch.sort(a.flip(0).clone(), out=(a, torch.empty(6, dtype=torch.long, device=dev))); out = a",
}
for n, body in _alias.items():
    case(f"alias.{n}", AL, A + body, fast=True)

# ---- dtypes and their casts -----------------------------------------------------------------------
DT = "dtypes and casts"
I = "i = torch.tensor([1, 2, 3], device=dev)\nf = torch.tensor([1.5, -2.5, 3.0], device=dev)\n"
_dtypes = {
    "int_pow_neg_scalar": "out = i ** -1",
    "int_pow_neg_tensor": "out = torch.pow(i, torch.tensor([-1, 2, 3], device=dev))",
    "int_pow_neg_scalar_base": "out = torch.pow(2, torch.tensor([-1], device=dev))",
    "bool_sub": "b = i > 1; out = b - b",
    "bool_neg": "out = -(i > 1)",
    "bitwise_float": "out = f & f",
    "shift_float": "out = f << 1",
    "int_floordiv_zero": "out = i // 0",
    "int_remainder_zero": "out = i % 0",
    "int_div_tensor_zero": "out = torch.floor_divide(i, torch.zeros(3, dtype=torch.long, device=dev))",
    "int_true_div_zero": "out = i / 0",
    "float_floordiv_zero": "out = f // 0",
    "lcm_float": "out = torch.lcm(f, f)",
    "gcd_float": "out = torch.gcd(f, f)",
    "erfinv_int": "out = torch.erfinv(i)",
    "sqrt_int": "out = torch.sqrt(i)",
    "mean_int": "out = i.mean()",
    "var_int": "out = i.var()",
    "softmax_int": "out = i.softmax(0)",
    "mm_int": "out = i.view(3, 1) @ i.view(1, 3)",
    "mm_mixed_dtype": "out = f.view(3, 1) @ i.view(1, 3)",
    "addmm_half_bias": "out = torch.addmm(torch.ones(2, 2, dtype=torch.half, device=dev), torch.ones(2, 2, device=dev), torch.ones(2, 2, device=dev))",
    "cumsum_bool": "out = (i > 1).cumsum(0)",
    "sum_bool": "out = (i > 1).sum()",
    "int_overflow_add": "out = torch.tensor([2**62], device=dev) * 4",
    "int8_wrap": "out = torch.tensor([100], dtype=torch.int8, device=dev) * 3",
    "uint8_sub_wrap": "out = torch.tensor([1], dtype=torch.uint8, device=dev) - 2",
    "float_to_half_overflow": "out = torch.tensor([1e6], device=dev).half()",
    "float_to_bf16": "out = torch.tensor([1.0001, 3e38], device=dev).bfloat16()",
    "double_to_float_overflow": "out = torch.tensor([1e300], dtype=torch.double, device=dev).float()",
    "bool_to_int": "out = torch.tensor([True, False], device=dev).long()",
    "float_to_bool": "out = torch.tensor([0.0, -0.0, 0.1, float('nan')], device=dev).bool()",
    "int_to_float_big": "out = torch.tensor([2**53 + 1], device=dev).double()",
    "complex_create": "out = torch.ones(2, dtype=torch.cfloat, device=dev) * 2",
    "complex_abs": "out = torch.tensor([3 + 4j], device=dev).abs()",
    "requires_grad_int": "out = torch.ones(2, dtype=torch.long, device=dev).requires_grad_()",
    "randn_int": "out = torch.randn(2, dtype=torch.long, device=dev)",
    "arange_bool": "out = torch.arange(3, dtype=torch.bool, device=dev)",
    "linspace_int": "out = torch.linspace(0, 10, 5, dtype=torch.long, device=dev)",
    "sort_bool": "out = torch.tensor([True, False, True], device=dev).sort()",
    "argmax_bool": "out = torch.tensor([False, True], device=dev).argmax()",
    "topk_bool": "out = torch.tensor([False, True], device=dev).topk(1)",
    "index_long_half_src": "out = torch.zeros(3, device=dev).index_add_(0, torch.tensor([0], device=dev), torch.ones(1, dtype=torch.half, device=dev))",
    "where_mixed": "out = torch.where(i > 1, i, f)",
    "clamp_int_float_bound": "out = i.clamp(max=1.5)",
    "embedding_float_idx": "out = F.embedding(f, torch.ones(4, 2, device=dev))",
    "gather_int32_idx": "out = f.gather(0, torch.tensor([0, 1], dtype=torch.int32, device=dev))",
    "index_select_float_idx": "out = f.index_select(0, torch.tensor([0.0], device=dev))",
    "nll_int_target_float": "out = F.nll_loss(torch.ones(2, 3, device=dev), torch.tensor([0.0, 1.0], device=dev))",
    "uint16_add": "out = torch.tensor([1], dtype=torch.uint16, device=dev) + 1",
    "float8_create": "out = torch.ones(2, device=dev).to(torch.float8_e4m3fn).float()",
    "half_cumsum": "out = torch.ones(3, dtype=torch.half, device=dev).cumsum(0)",
}
# the CPU's message names its internal kernel stub ('"add_stub" not implemented for 'UInt16''): the type
# (NotImplementedError) matches, the words name the dtype neuron lacks
_dtype_patterns = {"uint16_add": r"dtype UInt16 is not supported on neuron"}
for n, body in _dtypes.items():
    case(f"dtype.{n}", DT, I + body, fast=True, pattern=_dtype_patterns.get(n, ""))

# ---- NaN and Inf propagation against the CPU --------------------------------------------------------
NI = "NaN and Inf"
N = ("x = torch.tensor([[1.0, float('nan'), -2.0, float('inf')], [float('-inf'), 0.0, 3.0, -0.0]], device=dev)\n")
_nan = {
    "max": "out = x.max()", "min": "out = x.min()", "max_dim": "out = x.max(1)", "min_dim": "out = x.min(1)",
    "amax": "out = x.amax(1)", "amin": "out = x.amin(0)", "argmax": "out = x.argmax(1)", "argmin": "out = x.argmin(1)",
    "aminmax": "out = torch.aminmax(x)", "sort": "out = x.sort(1)", "argsort": "out = x.argsort(1)",
    "topk": "out = x.topk(2, 1).values", "clamp": "out = x.clamp(-1, 1)", "relu": "out = x.relu()",
    "sum": "out = x.sum(1)", "nansum": "out = x.nansum(1)", "mean": "out = x.mean(1)", "nanmean": "out = x.nanmean(1)",
    "softmax": "out = x.softmax(1)", "log_softmax": "out = x.log_softmax(1)", "cumsum": "out = x.cumsum(1)",
    "cumprod": "out = x.cumprod(1)", "cummax": "out = x.cummax(1)", "logsumexp": "out = x.logsumexp(1)",
    "maximum": "out = torch.maximum(x, torch.zeros_like(x))", "minimum": "out = torch.minimum(x, torch.zeros_like(x))",
    "fmax": "out = torch.fmax(x, torch.zeros_like(x))", "fmin": "out = torch.fmin(x, torch.zeros_like(x))",
    "sigmoid": "out = x.sigmoid()", "tanh": "out = x.tanh()", "exp": "out = x.exp()", "log": "out = x.log()",
    "sqrt": "out = x.sqrt()", "rsqrt": "out = x.rsqrt()", "div_zero": "out = x / 0.0", "mul_inf": "out = x * float('inf')",
    "mm": "out = x @ x.t()", "where": "out = torch.where(x > 0, x, -x)", "nan_to_num": "out = x.nan_to_num()",
    "isnan": "out = (x.isnan(), x.isinf(), x.isfinite())", "median": "out = x.median(1)", "nanmedian": "out = x.nanmedian(1)",
    "kthvalue": "out = x.kthvalue(2, 1)", "norm": "out = x.norm(dim=1)", "var": "out = x.var(1)",
    "std": "out = x.std(1)", "prod": "out = x.prod(1)", "sign": "out = x.sign()", "round": "out = x.round()",
    "floor": "out = x.floor()", "remainder": "out = torch.remainder(x, 2.0)", "fmod": "out = torch.fmod(x, 2.0)",
    "pow": "out = x.pow(0.5)", "pow0": "out = x.pow(0)", "atan2": "out = torch.atan2(x, x)",
    "hardtanh": "out = F.hardtanh(x)", "gelu": "out = F.gelu(x)", "silu": "out = F.silu(x)",
    "layer_norm": "out = F.layer_norm(x, (4,))", "eq": "out = (x == x, x != x)", "unique": "out = torch.unique(x[1])",
    "max_pool": "out = F.max_pool1d(x.unsqueeze(0), 2)", "half_cast": "out = x.half()",
    "bf16_add": "out = x.bfloat16() + 1", "isclose": "out = torch.isclose(x, x, equal_nan=True)",
    "dropout_eval": "out = F.dropout(x, 0.5, training=False)", "cross_entropy": "out = F.cross_entropy(x, torch.tensor([0, 2], device=dev))",
}
# pow's exponents 0.5 and -0.5: sqrt and rsqrt in float, double and bfloat16 (nan for -inf, -0 for -0),
# C's pow in half and with a tensor exponent, as aten's pow kernels have it
_nan.update({f"pow_{e}_{d}": f"out = x.to(torch.{d}).pow({v})" for e, v in (("half", 0.5), ("mhalf", -0.5))
             for d in ("double", "bfloat16", "half")})
_nan.update({"pow_mhalf": "out = x.pow(-0.5)", "pow_tensor_exp": "out = x.pow(torch.tensor(0.5, device=dev))",
             "pow_signed_zero": "out = 1 / torch.tensor([-0.0, 0.0], device=dev).pow(0.5)",
             "pow_int_half": "out = torch.tensor([-4, 0, 4], device=dev).pow(0.5)"})
for n, body in _nan.items():
    case(f"nan.{n}", NI, N + body, fast=True)

# ---- autograd misuse --------------------------------------------------------------------------------
AG = "autograd misuse"
G = "w = torch.ones(3, device=dev, requires_grad=True)\n"
_autograd = {
    "backward_twice": "y = (w * w).sum(); y.backward(); y.backward()",
    "backward_twice_retain": "y = (w * w).sum(); y.backward(retain_graph=True); y.backward(); out = w.grad",
    "nonleaf_grad": "y = w * 2; y.sum().backward(); out = y.grad",
    "inplace_leaf": "w.add_(1)",
    "nonscalar_backward": "(w * 2).backward()",
    "saved_modified": "y = w.exp(); z = y.exp(); y.add_(1); z.sum().backward()",
    "no_grad_fn": "torch.ones(2, device=dev).sum().backward()",
    "grad_unused": "a = torch.ones(2, device=dev, requires_grad=True); torch.autograd.grad((w * 2).sum(), [a])",
    "grad_unused_allow": "a = torch.ones(2, device=dev, requires_grad=True); out = torch.autograd.grad((w * 2).sum(), [a], allow_unused=True)",
    "grad_shape": "(w * 2).backward(torch.ones(4, device=dev))",
    "grad_dtype": "(w * 2).backward(torch.ones(3, dtype=torch.long, device=dev))",
        "detach_inplace": "y = w.sigmoid(); d = y.detach(); d.zero_(); y.sum().backward(); out = w.grad",
    "view_of_leaf_inplace": "w[0].mul_(2)",
    "grad_of_int": "torch.autograd.grad(torch.ones(2, device=dev).sum(), [torch.ones(2, dtype=torch.long, device=dev)])",
    "double_backward_unsupported": "y = (w ** 3).sum(); g, = torch.autograd.grad(y, w, create_graph=True); g.sum().backward(); out = w.grad",
    "set_grad_wrong_shape": "w.grad = torch.ones(4, device=dev)",
        "backward_in_no_grad": "with torch.no_grad():\n    y = (w * 2).sum()\ny.backward()",
    "inplace_relu_saved": "y = w.sigmoid(); F.relu(y, inplace=True); y.sum().backward(); out = w.grad",
    "index_put_backward_dup": "y = torch.zeros(3, device=dev).index_put((torch.tensor([0, 0], device=dev),), w[:2], accumulate=True); y.sum().backward(); out = w.grad",
    "nan_grad": "y = torch.sqrt(w - 1).sum(); y.backward(); out = w.grad",
    "anomaly_nan": "with torch.autograd.detect_anomaly():\n    y = (torch.sqrt(w - 2) * 0).sum()\n    y.backward()",
}
for n, body in _autograd.items():
    case(f"autograd.{n}", AG, G + body, fast=True)
case("autograd.grad_cpu_for_device", AG, G + "(w * 2).backward(torch.ones(3))", ("raises", RuntimeError, r"device"), fast=True)
case("autograd.set_grad_wrong_device", AG, G + "w.grad = torch.ones(3)", ("raises", RuntimeError, r"device"), fast=True)

# ---- stream and event misuse --------------------------------------------------------------------------
ST = "streams and events"
_streams = {
    "elapsed_no_timing": ("e1 = torch.neuron.Event(); e2 = torch.neuron.Event(); e1.record(); e2.record(); out = e1.elapsed_time(e2)",
                          ("raises", ValueError, r"enable_timing")),
    "elapsed_not_recorded": ("e1 = torch.neuron.Event(enable_timing=True); e2 = torch.neuron.Event(enable_timing=True); out = e1.elapsed_time(e2)",
                             ("raises", ValueError, r"recorded")),
    "sync_unrecorded_event": ("e = torch.neuron.Event(); e.synchronize(); out = e.query()", "ok"),
    "wait_unrecorded_event": ("e = torch.neuron.Event(); s = torch.neuron.Stream(); s.wait_event(e); s.synchronize(); out = torch.ones(2, device='neuron').sum()", "ok"),
    "query_fresh_stream": ("s = torch.neuron.Stream(); out = s.query()", "ok"),
    "record_twice": ("e = torch.neuron.Event(); e.record(); e.record(); e.synchronize(); out = e.query()", "ok"),
    "stream_ctx_compute": ("s = torch.neuron.Stream()\nwith torch.neuron.stream(s):\n    y = torch.ones(64, device='neuron') * 3\ns.synchronize(); out = y.sum()", "ok"),
    "record_stream_cpu_tensor": ("s = torch.neuron.Stream(); torch.ones(2).record_stream(s)", ("raises", RuntimeError, r".")),
    "record_stream_freed": ("s = torch.neuron.Stream(); y = torch.ones(1024, device='neuron'); y.record_stream(s); del y; torch.neuron.empty_cache(); out = torch.ones(4, device='neuron').sum()", "ok"),
    "cross_stream_no_sync": ("s = torch.neuron.Stream(); a = torch.ones(1 << 16, device='neuron')\nwith torch.neuron.stream(s):\n    b = a * 2\ntorch.neuron.current_stream().wait_stream(s); out = b.sum()", "ok"),
    "set_stream_none": ("torch.neuron.set_stream(None); out = torch.ones(2, device='neuron').sum()", "ok"),
    "event_wait_other_stream": ("s = torch.neuron.Stream(); e = torch.neuron.Event()\nwith torch.neuron.stream(s):\n    y = torch.full((8,), 2.0, device='neuron'); e.record()\ntorch.neuron.current_stream().wait_event(e); out = y.sum()", "ok"),
    "many_streams": ("ss = [torch.neuron.Stream() for _ in range(64)]; out = len(set(ss)) > 0", "ok"),
    "priority_out_of_range": ("s = torch.neuron.Stream(priority=-100); out = torch.ones(2, device='neuron').sum()", "ok"),
    "elapsed_cpu_event_mix": ("e1 = torch.neuron.Event(enable_timing=True); e1.record(); e2 = torch.Event(device='cpu', enable_timing=True); out = e1.elapsed_time(e2)",
                              ("raises", Exception, r".")),
}
for n, (body, exp) in _streams.items():
    case(f"stream.{n}", ST, body, exp, fast=True)

# ---- out of memory ---------------------------------------------------------------------------------
OM = "out of memory"
LIM = {"NEURON_RT_MEMORY_LIMIT": "256MiB"}
OOM = ("raises", "OutOfMemoryError", r"out of memory|OutOfMemory")
_oom = {
    "single": "out = torch.empty(512 << 20, dtype=torch.uint8, device='neuron')",
    "many": "keep = []\nfor _ in range(100):\n    keep.append(torch.empty(16 << 20, dtype=torch.uint8, device='neuron'))",
    "matmul_output": "a = torch.ones(9000, 2, device='neuron'); out = (a @ a.t()).sum()",
    "backward": "w = torch.ones(4000, 4000, device='neuron', requires_grad=True); y = (w @ w @ w @ w).sum(); y.backward()",
    "workspace_sort": "a = torch.rand(30 << 20, device='neuron'); out = a.sort()",
    "cat_grow": "a = torch.ones(20 << 20, device='neuron'); out = torch.cat([a, a, a, a])",
}
for n, body in _oom.items():
    case(f"oom.{n}", OM, body, OOM, env=LIM, fast=(n == "single"))
case("oom.recover_empty_cache", OM,
     "keep = []\ntry:\n    while True:\n        keep.append(torch.empty(16 << 20, dtype=torch.uint8, device='neuron'))\n"
     "except torch.OutOfMemoryError:\n    pass\nbase = len(keep)\ndel keep\ntorch.neuron.empty_cache()\n"
     "assert torch.neuron.memory_allocated() == 0, torch.neuron.memory_allocated()\n"
     "out = torch.ones(8 << 20, device='neuron').sum()", "ok", env=LIM, fast=True)
case("oom.sum_uint8_no_temporary", OM, "out = torch.ones(64 << 20, dtype=torch.uint8, device='neuron').sum()", "ok", env=LIM)
case("oom.repeat_then_compute", OM,
     "for _ in range(20):\n    try:\n        torch.empty(1 << 30, device='neuron')\n    except torch.OutOfMemoryError:\n        pass\n"
     "out = (torch.arange(100., device='neuron') * 2).sum()", "ok", env=LIM)
case("oom.compiled", OM,
     "f = torch.compile(lambda a: (a * 2 + 1).sum(), backend='neuron')\nout = f(torch.ones(80 << 20, device='neuron'))", OOM, env=LIM, alone=True)

# ---- garbage in environment variables -----------------------------------------------------------------
EV = "environment variables"
ENV_CODE = "out = (torch.arange(12., device=dev).reshape(3, 4) @ torch.ones(4, 2, device=dev)).sum()"
_env_vars = ["NEURON_RT_MEMORY_LIMIT", "NEURON_RT_VISIBLE_CORES", "NEURON_NUM_THREADS", "NEURON_LAUNCH_BLOCKING",
             "NEURON_FALLBACK", "NEURON_HUGEPAGES", "NEURON_KERNELS", "NEURON_INLINE_BYTES", "NEURON_CACHE_DIR",
             "NEURON_CC", "NEURON_COMPILE_LOCK_TIMEOUT", "NEURON_LAUNCH_SITES", "NEURON_FALLBACK_COPY",
             "NEURON_CCL_TRANSPORT", "NEURON_CCL_CHUNK_BYTES", "NEURON_CCL_DIRECT_MIN"]
for var in _env_vars:
    for tag, val in (("word", "banana"), ("neg", "-7"), ("huge", "99999999999999999999999"), ("empty", "")):
        case(f"env.{var}.{tag}", EV, ENV_CODE, ("env", var), env={var: val}, alone=True,
             fast=(var in ("NEURON_NUM_THREADS", "NEURON_KERNELS") and tag == "word"))

# ---- malicious or truncated checkpoints -------------------------------------------------------------
CK = "checkpoints"
SAVE = ("buf = io.BytesIO(); torch.save({'w': torch.arange(64.).reshape(8, 8), 'b': torch.ones(8)}, buf)\n"
        "data = buf.getvalue()\n")
LOAD = "out = torch.load(io.BytesIO(blob), map_location=dev, weights_only=True)"
_ckpt = {
    "empty": "blob = b''",
    "trunc_10": "blob = data[:len(data) // 10]",
    "trunc_50": "blob = data[:len(data) // 2]",
    "trunc_last": "blob = data[:-1]",
    "trunc_100b": "blob = data[:-100]",
    "flip_middle": "b = bytearray(data); b[len(b) // 2] ^= 0xFF; blob = bytes(b)",
    "zero_header": "blob = bytes(64) + data[64:]",
    "random": "import random; r = random.Random(0); blob = bytes(r.randrange(256) for _ in range(4096))",
    "text": "blob = b'not a checkpoint at all'",
    "valid": "blob = data",
    "pickle_os_system": ("import pickle\nclass P:\n    def __reduce__(self):\n        import os\n        return (os.system, ('true',))\n"
                         "blob = pickle.dumps(P())"),
    "pickle_eval": ("import pickle\nclass P:\n    def __reduce__(self):\n        return (eval, ('1+1',))\nblob = pickle.dumps(P(), protocol=2)"),
    "legacy_format": "buf2 = io.BytesIO(); torch.save(torch.ones(3), buf2, _use_new_zipfile_serialization=False); blob = buf2.getvalue()[:-8]",
    "storage_short": ("import zipfile\nzin = zipfile.ZipFile(io.BytesIO(data)); o = io.BytesIO(); zout = zipfile.ZipFile(o, 'w')\n"
                      "for it in zin.infolist():\n    d = zin.read(it.filename)\n    zout.writestr(it, d[:8] if '/data/' in it.filename else d)\n"
                      "zout.close(); blob = o.getvalue()"),
}
for n, body in _ckpt.items():
    case(f"ckpt.{n}", CK, SAVE + body + "\n" + LOAD, fast=True)
case("ckpt.valid_to_neuron1", CK, SAVE + "blob = data\nout = torch.load(io.BytesIO(blob), map_location='neuron:1', weights_only=True)",
     ("raises", RuntimeError, r"device"), fast=True)
case("ckpt.neuron_roundtrip_truncated", CK,
     "buf = io.BytesIO(); torch.save(torch.arange(8., device=dev), buf); blob = buf.getvalue()[:-30]\n" + LOAD, fast=True)

# ---- threads -------------------------------------------------------------------------------------
TH = "threads"
case("threads.concurrent_ops", TH,
     "import threading\nres = [None] * 4\ndef run(k):\n    x = torch.full((256, 256), float(k), device=dev)\n    res[k] = (x @ x).sum().item()\n"
     "ts = [threading.Thread(target=run, args=(k,)) for k in range(4)]\n[t.start() for t in ts]; [t.join() for t in ts]\nout = torch.tensor(res)")
case("threads.error_in_thread", TH,
     "import threading\nerr = []\ndef run():\n    try:\n        torch.ones(3, device=dev)[torch.tensor([9], device=dev)]\n    except Exception as e:\n        err.append(type(e).__name__)\n"
     "t = threading.Thread(target=run); t.start(); t.join()\nout = err")

# ---- fork: a clear error in the child (as CUDA's "Cannot re-initialize CUDA in forked subprocess") --
FK = "fork"
FORK = """
import os, time
torch.ones(2, device='neuron').sum().item()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        {op}
        msg = b'OK'
    except RuntimeError as e:
        msg = b'RuntimeError ' + str(e).encode()[:300]
    except BaseException as e:
        msg = b'OTHER ' + type(e).__name__.encode()
    os.write(w, msg)
    os._exit(0)
os.close(w)
for _ in range(200):
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.1)
else:
    os.kill(pid, 9); os.waitpid(pid, 0)
    raise TimeoutError('hang: the forked child did not finish in 20 s')
res = os.read(r, 4096).decode()
if not res.startswith('RuntimeError'):
    raise AssertionError('child: ' + (res or 'died with status %d' % st))
raise RuntimeError(res[len('RuntimeError '):])
"""
_fork_ops = {
    "ones": "torch.ones(2, device='neuron')",
    "add": "(torch.ones(2, device='neuron') + 1).sum().item()",
    "matmul": "t = torch.ones(8, 8, device='neuron'); (t @ t).sum().item()",
    "to_device": "torch.arange(4.).to('neuron').cpu()",
    "synchronize": "torch.neuron.synchronize()",
    "stream": "torch.neuron.Stream()",
    "empty_cache": "torch.neuron.empty_cache()",
    "manual_seed_randn": "torch.neuron.manual_seed(0); torch.randn(4, device='neuron').cpu()",
    "memory_allocated": "torch.neuron.memory_allocated()",
}
for n, op in _fork_ops.items():
    # empty_cache in a forked child is a no-op, as torch.cuda.empty_cache is there (it checks
    # is_initialized(), False in a bad-fork child): the child reports OK
    exp = ("raises", "AssertionError", r"child: OK") if n == "empty_cache" else ("raises", "RuntimeError", r"fork")
    case(f"fork.{n}", FK, FORK.format(op=op), exp, alone=True)

# ---- a corrupt compile cache: rebuilt (at most a warning), never an error --------------------------
CC_ = "compile cache"
CACHE = """
import os, glob, shutil, tempfile
d = tempfile.mkdtemp(prefix='nrobust-')
os.environ['NEURON_CACHE_DIR'] = d
def f(a):
    return (a * 2 + 1).relu().sum(0)
x = torch.arange(12., device=dev).reshape(3, 4) - 5
if dev == 'cpu':
    out = f(x)
else:
    if FRESH:  # another process filled the cache: a damaged cache found at start-up
        import subprocess, sys
        subprocess.run([sys.executable, "-c", FILL], check=True, timeout=120)
    else:  # this process compiled and loaded the program, then its files are damaged
        torch.compile(f, backend=dev)(x).cpu()
    progs = glob.glob(os.path.join(d, 'programs', '*', '*', 'program.so'))
    assert progs, os.listdir(d)
    for so in progs:
        {damage}
    torch._dynamo.reset()
    out = torch.compile(f, backend=dev)(x)
shutil.rmtree(d, ignore_errors=True)
if os.path.isfile(d):
    os.remove(d)
"""
_damage = {
    "so_truncated": "open(so, 'r+b').truncate(100)",
    "so_foreign": "open(so, 'wb').write(b'\\x7fELF' + bytes(4000))",
    "so_is_directory": "os.remove(so); os.mkdir(so)",
    "entry_dir_is_file": "e = os.path.dirname(so); shutil.rmtree(e); open(e, 'w').write('x')",
    "entry_json_garbage": "open(os.path.join(os.path.dirname(so), 'entry.json'), 'w').write('{not json')",
    "entry_json_other_key": "open(os.path.join(os.path.dirname(so), 'entry.json'), 'w').write('{\"key\": \"0\", \"sha256\": \"0\", \"size\": 1}')",
    "programs_is_file": "p = os.path.join(d, 'programs'); shutil.rmtree(p); open(p, 'w').write('x')",
    "cache_dir_is_file": "shutil.rmtree(d); open(d, 'w').write('x')",
}
_FILL = ("import torch\n"
         "def f(a):\n    return (a * 2 + 1).relu().sum(0)\n"
         "x = torch.arange(12., device=dev).reshape(3, 4) - 5\n"
         "torch.compile(f, backend=dev)(x).cpu()\n")
for n, dmg in _damage.items():
    body = CACHE.replace("{damage}", dmg)
    case(f"cache.{n}", CC_, f"FRESH = True\nFILL = {'dev = %r; ' + _FILL!r} % dev\n" + body, "cpu", alone=True)
    if n in ("so_truncated", "so_foreign", "so_is_directory", "entry_json_garbage"):
        case(f"cache.loaded.{n}", CC_, "FRESH = False\n" + body, "cpu", alone=True)

# ---- multiprocessing: pickling for a spawn child, DataLoader workers ---------------------------------
MP = "multiprocessing"
# a neuron tensor has no cross-process sharing (CUDA's IPC, the CPU's shared memory): a clear refusal that
# names the remedy (torchneuron/sharing.py), not torch's "_share_fd_: only available on CPU"
_SHARE = ("raises", RuntimeError, r"cannot be shared with another process.*tensor\.cpu\(\)")
case("mp.forking_pickle_tensor", MP,
     "import pickle, torch.multiprocessing\nfrom multiprocessing.reduction import ForkingPickler\n"
     "out = pickle.loads(ForkingPickler.dumps(torch.arange(4., device='neuron')))", _SHARE, alone=True)
case("mp.forking_pickle_param", MP,
     "import pickle, torch.multiprocessing\nfrom multiprocessing.reduction import ForkingPickler\n"
     "out = pickle.loads(ForkingPickler.dumps(torch.nn.Parameter(torch.ones(3, device='neuron')))).detach()", _SHARE, alone=True)
case("mp.forking_pickle_storage", MP,
     "import pickle, torch.multiprocessing\nfrom multiprocessing.reduction import ForkingPickler\n"
     "out = pickle.loads(ForkingPickler.dumps(torch.ones(3, device='neuron').untyped_storage()))", _SHARE, alone=True)
case("mp.forking_pickle_cpu_still_shared", MP,
     "import pickle, torch.multiprocessing\nfrom multiprocessing.reduction import ForkingPickler\n"
     "out = pickle.loads(ForkingPickler.dumps(torch.arange(4.)))", "ok", alone=True)
case("mp.dataloader_workers", MP,
     "from torch.utils.data import DataLoader, TensorDataset\n"
     "torch.ones(1, device=dev).sum().item()\n"
     "dl = DataLoader(TensorDataset(torch.arange(16.).reshape(8, 2)), batch_size=4, num_workers=2)\n"
     "out = torch.stack([b[0].to(dev) * 2 for b in dl]).sum(0)", alone=True)

# ---- matrix products: the argument checks in aten's order and words ----------------------------------
MM = "sizes"
F2, H2 = "torch.ones(2, 2, device=dev)", "torch.ones(2, 2, dtype=torch.half, device=dev)"
_mm = {
    "addmm_mat_dtypes": f"out = torch.addmm({F2}, {H2}, {F2})",
    "addmm_bias_1d_dtype": f"out = torch.addmm(torch.ones(2, dtype=torch.double, device=dev), {F2}, {F2})",
    "addmm_out_bias_dtype": f"out = torch.addmm({H2}, {F2}, {F2}, out=torch.empty(2, 2, device=dev))",
    "addmm_inplace_dtype": f"out = {F2}.addmm_({H2}, {H2})",
    "addmm_1d_mat2": f"out = torch.addmm({F2}, {F2}, torch.ones(2, device=dev))",
    "mm_1d_self": f"out = torch.mm(torch.ones(2, device=dev), {F2})",
    "mm_long_float": f"out = torch.mm({F2}, torch.ones(2, 2, dtype=torch.long, device=dev))",
    "matmul_half_float": f"out = torch.matmul({F2}, {H2})",
    "bmm_dtypes": f"out = torch.bmm({F2}[None], {H2}[None])",
    "bmm_inner": "out = torch.bmm(torch.ones(2, 2, 3, device=dev), torch.ones(2, 2, 2, device=dev))",
    "bmm_2d": f"out = torch.bmm({F2}, {F2})",
    "baddbmm_bias_dtype": f"out = torch.baddbmm({F2}[None], {H2}[None], {H2}[None])",
    "baddbmm_batch_dtype": f"out = torch.baddbmm({F2}[None], {F2}[None], {H2}[None])",
    "addmv_dtypes": f"out = torch.addmv(torch.ones(2, device=dev), {F2}, torch.ones(2, dtype=torch.half, device=dev))",
    "addmv_size": f"out = torch.addmv(torch.ones(3, device=dev), {F2}, torch.ones(2, device=dev))",
    "mv_dtypes": f"out = torch.mv({F2}, torch.ones(2, dtype=torch.half, device=dev))",
    "dot_dtypes": "out = torch.dot(torch.ones(2, device=dev), torch.ones(2, dtype=torch.half, device=dev))",
    "addmm_ok_int": "out = torch.addmm(torch.ones(2, 2, dtype=torch.long, device=dev), torch.ones(2, 3, dtype=torch.long, device=dev), torch.ones(3, 2, dtype=torch.long, device=dev), beta=2, alpha=3)",
}
for n, body in _mm.items():
    case(f"mm.{n}", MM, body, fast=True)
