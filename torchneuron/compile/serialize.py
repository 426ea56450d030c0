"""Serialize an ATen FX graph (from AOTAutograd) into the graph compiler's text IR.

The IR is line-oriented, whitespace-separated tokens (docs/compiler.md has the grammar):

    ncir 1
    syms <n>
    v <id> <dtype> <rank> <size>*rank <stride>*rank <offset> <sp>*(rank+1) <pp>*(rank+1) <lin>*(rank+1) <dev>
    in <n> <value ids>
    n <id> <kind> <op> <nout> <outs> <nin> <ins> <nattr> <attrs>
    out <n> <value ids>
    end

Sizes, strides and offsets are integer expressions in C syntax over the symbols S0..S<n-1> (the
dynamic sizes), without spaces.  sp[d] = prod(size[d:]), pp[d] = prod(size[:d]); lin[d] is the single
element stride s with offset(i_d..i_rank-1) = s * flat(i_d..) over the dims d.. (ignoring size-1
dims), or "x" if there is none.  Offsets are relative to the value's root buffer.  Operand tokens:
v<id> value, f<float>, i<int>, e<int expression>.
"""
import math
import operator
import os

import sympy
import torch

from . import ops

_DTYPES = {
    torch.bool: "bool", torch.uint8: "u8", torch.int8: "i8", torch.int16: "i16", torch.int32: "i32",
    torch.int64: "i64", torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32",
    torch.float64: "f64",
}


class Unsupported(Exception):
    """The graph cannot be serialized (the frontend then runs it op by op)."""


# ---- symbolic integers --------------------------------------------------------------------------------

def to_expr(x):
    """An int or SymInt as a sympy expression."""
    if isinstance(x, torch.SymInt):
        return sympy.sympify(x.node.expr)
    if isinstance(x, (int, bool)):
        return sympy.Integer(int(x))
    if isinstance(x, sympy.Basic):
        return x
    raise Unsupported(f"not an integer: {x!r}")


class Exprs:
    """The symbols of a graph and the C / Python spelling of integer expressions over them."""

    def __init__(self):
        self.syms = []      # sympy symbols in index order
        self.index = {}

    def add(self, s):
        if s not in self.index:
            self.index[s] = len(self.syms)
            self.syms.append(s)

    def c(self, e):
        e = sympy.sympify(e)
        if e.is_Integer:
            return str(int(e))
        return self._c(e)

    def _c(self, e):
        from torch.utils._sympy.functions import CeilDiv, FloorDiv, Mod, PythonMod
        if e.is_Integer:
            v = int(e)
            return str(v) if v >= 0 else f"({v})"
        if e.is_Symbol:
            if e not in self.index:
                raise Unsupported(f"symbol {e} is not bound to an input size")
            return f"S{self.index[e]}"
        if isinstance(e, sympy.Add):
            return "(" + "+".join(self._c(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            for a in e.args:
                if a.is_Rational and not a.is_Integer:
                    raise Unsupported(f"non-integer expression {e}")
            return "(" + "*".join(self._c(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:
            return "(" + "*".join([self._c(e.base)] * int(e.exp)) + ")"
        if isinstance(e, FloorDiv):
            return f"nc_fdiv({self._c(e.args[0])},{self._c(e.args[1])})"
        if isinstance(e, CeilDiv):
            return f"nc_cdiv({self._c(e.args[0])},{self._c(e.args[1])})"
        if isinstance(e, (Mod, PythonMod)):
            return f"nc_mod({self._c(e.args[0])},{self._c(e.args[1])})"
        if isinstance(e, sympy.Max) or type(e).__name__ == "Max":
            return self._fold("nc_max", e.args)
        if isinstance(e, sympy.Min) or type(e).__name__ == "Min":
            return self._fold("nc_min", e.args)
        raise Unsupported(f"integer expression {e} ({type(e).__name__})")

    def _fold(self, f, args):
        out = self._c(args[0])
        for a in args[1:]:
            out = f"{f}({out},{self._c(a)})"
        return out

    def py(self, e):
        """A Python function of the symbol tuple S computing e."""
        e = sympy.sympify(e)
        if e.is_Integer:
            v = int(e)
            return lambda S: v
        src = self.c(e).replace("nc_fdiv", "_fdiv").replace("nc_cdiv", "_cdiv").replace(
            "nc_mod", "_mod").replace("nc_max", "max").replace("nc_min", "min")
        for i in range(len(self.syms) - 1, -1, -1):
            src = src.replace(f"S{i}", f"S[{i}]")
        return eval("lambda S: " + src, {"_fdiv": lambda a, b: a // b, "_cdiv": lambda a, b: -(-a // b),
                                         "_mod": lambda a, b: a % b, "max": max, "min": min})


def _eq(a, b):
    d = sympy.sympify(a) - sympy.sympify(b)
    return d == 0 or sympy.expand(d) == 0


# ---- values ---------------------------------------------------------------------------------------------

class Value:
    """One tensor of the graph: its metadata, as sympy expressions."""

    def __init__(self, vid, val, root=None, off=0):
        self.id = vid
        self.dtype = val.dtype
        self.device = val.device
        self.sizes = [to_expr(s) for s in val.shape]
        self.strides = [to_expr(s) for s in val.stride()]
        self.meta_offset = to_expr(val.storage_offset())
        self.root = vid if root is None else root
        self.off = sympy.sympify(off)
        self.val = val

    @classmethod
    def make(cls, vid, dtype, device, sizes, strides=None, root=None):
        """A value without a traced tensor (the serializer's own decompositions): contiguous by default."""
        v = cls.__new__(cls)
        v.id, v.dtype, v.device, v.val = vid, dtype, device, None
        v.sizes = [sympy.sympify(x) for x in sizes]
        if strides is None:
            strides, acc = [], sympy.Integer(1)
            for x in reversed(v.sizes):
                strides.insert(0, acc)
                acc = acc * x
        v.strides = [sympy.sympify(x) for x in strides]
        v.meta_offset = sympy.Integer(0)
        v.root = vid if root is None else root
        v.off = sympy.Integer(0)
        return v

    @property
    def rank(self):
        return len(self.sizes)

    def line(self, ex):
        if self.dtype not in _DTYPES:
            raise Unsupported(f"dtype {self.dtype}")
        k = self.rank
        sp = [sympy.Integer(1)] * (k + 1)
        for d in range(k - 1, -1, -1):
            sp[d] = sp[d + 1] * self.sizes[d]
        pp = [sympy.Integer(1)] * (k + 1)
        for d in range(k):
            pp[d + 1] = pp[d] * self.sizes[d]
        lin = [self._lin(d) for d in range(k + 1)]
        toks = ["v", str(self.id), _DTYPES[self.dtype], str(k)]
        toks += [ex.c(s) for s in self.sizes] + [ex.c(s) for s in self.strides] + [ex.c(self.off)]
        toks += [ex.c(sympy.expand(s)) for s in sp] + [ex.c(sympy.expand(s)) for s in pp]
        toks += [x if x == "x" else ex.c(x) for x in lin]
        toks.append("n" if self.device.type == "neuron" else "c")
        return " ".join(toks)

    def _lin(self, d):
        dims = [i for i in range(d, self.rank) if not (self.sizes[i].is_Integer and int(self.sizes[i]) == 1)]
        if not dims:
            return sympy.Integer(0)
        s = self.strides[dims[-1]]
        for a, b in zip(dims[:-1], dims[1:]):
            if not _eq(self.strides[a], self.strides[b] * self.sizes[b]):
                return "x"
        return s


# ---- the serializer ---------------------------------------------------------------------------------------

class NodeInfo:
    def __init__(self, nid, kind, fx, outs, ins):
        self.id = nid
        self.kind = kind      # 'V' 'P' 'R' 'L' 'E'
        self.fx = fx          # the FX node (None for synthetic nodes)
        self.outs = outs      # value ids (None for an absent output)
        self.ins = ins        # value ids read


class Serialized:
    """The IR text and what the runtime needs to run it: values, nodes, inputs, outputs, symbols."""

    def __init__(self):
        self.ir = ""
        self.values = {}      # id -> Value
        self.nodes = {}       # IR node id -> NodeInfo
        self.fx_value = {}    # FX node -> value id, or tuple of value ids / None (multi-output)
        self.inputs = []      # per placeholder: ('t', value id) | ('s', sympy expr) | ('o', None)
        self.outputs = []     # per output: ('t', vid) | ('s', expr) | ('c', python constant)
        self.attrs = []       # (value id, attribute name) of get_attr constants
        self.mutations = []   # (value id, input value id): value written into the input in place
        self.scalars = []     # value ids of CPU scalars passed at launch (symbol slots after ex.syms)
        self.hoist = set()    # ids of eager nodes that compute them (run before the first launch)
        self.ex = Exprs()
        self.bindings = []    # per symbol: (placeholder index, 'size'|'stride'|'offset'|'int', dim)
        self.kinds = {}       # IR node kind counts
        self._next = 0

    def new_id(self):
        self._next += 1
        return self._next - 1


def _is_tensor(x):
    return isinstance(x, torch.Tensor)


def _flat_nodes(args):
    out = []

    def walk(a):
        if isinstance(a, torch.fx.Node):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            for b in a:
                walk(b)
        elif isinstance(a, dict):
            for b in a.values():
                walk(b)
    walk(args)
    return out


def _float_tok(x):
    x = float(x)
    if math.isnan(x):
        return "fnan"
    if math.isinf(x):
        return "finf" if x > 0 else "f-inf"
    return "f" + repr(x)


class _Serializer:
    """The state of one serialize() call: the IR lines so far, the value of every FX node, the CPU
    values computable up front and the launch-time scalar slots.  Each FX node goes to the handler of
    its kind (_NODE_HANDLERS), a call to the first lowering that takes it (_LOWERINGS), else eager."""

    def __init__(self, gm, inplace, scalars):
        self.gm, self.inplace, self.scalars_ok = gm, inplace, scalars
        self.S = Serialized()
        self.ex = self.S.ex
        self.lines = []
        self.nid = 0
        self.input_ids = set()
        self.cpu_pure = set()      # CPU values computable up front: inputs, then pure eager ops on them
        self.barrier_seen = False
        self.slots = {}

    def bind_symbols(self):
        """Symbols, bound in order to the placeholders' sizes/strides/offsets and SymInt inputs."""
        ex, S = self.ex, self.S
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for i, p in enumerate(placeholders):
            v = p.meta.get("val")
            if isinstance(v, torch.SymInt):
                e = sympy.sympify(v.node.expr)
                if e.is_Symbol and e not in ex.index:
                    ex.add(e)
                    S.bindings.append((i, "int", 0))
            elif _is_tensor(v):
                for kind, seq in (("size", v.shape), ("stride", v.stride()), ("offset", [v.storage_offset()])):
                    for d, sz in enumerate(seq):
                        e = to_expr(sz)
                        if e.is_Symbol and e not in ex.index:
                            ex.add(e)
                            S.bindings.append((i, kind, d))

    # ---- helpers the lowerings call ----

    def is_cpu_scalar(self, x):
        m = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        vid = self.S.fx_value.get(x) if isinstance(x, torch.fx.Node) else None
        return (self.scalars_ok and _is_tensor(m) and m.device.type == "cpu" and m.dim() == 0
                and m.dtype in (torch.float32, torch.float64) and isinstance(vid, int) and vid in self.cpu_pure)

    def new_value(self, val, root=None, off=0):
        v = Value(self.S.new_id(), val, root, off)
        self.S.values[v.id] = v
        return v

    def operand(self, a):
        if isinstance(a, torch.fx.Node):
            m = a.meta.get("val")
            if isinstance(m, torch.SymInt):
                return "e" + self.ex.c(to_expr(m))
            if isinstance(m, (torch.SymFloat, torch.SymBool)):
                raise Unsupported("symbolic float operand")
            x = self.S.fx_value.get(a)
            if not isinstance(x, int):
                raise Unsupported(f"operand {a} has no tensor value")
            if self.is_cpu_scalar(a):
                if x not in self.slots:
                    self.slots[x] = len(self.slots)
                    self.S.scalars.append(x)
                return f"d{len(self.ex.syms) + self.slots[x]}"
            return f"v{x}"
        if isinstance(a, bool):
            return f"i{int(a)}"
        if isinstance(a, int):
            return f"i{a}"
        if isinstance(a, float):
            return _float_tok(a)
        raise Unsupported(f"operand {a!r}")

    def emit(self, kind, op, outs, ins, attrs=(), fx=None):
        S = self.S
        n = NodeInfo(self.nid, kind, fx, outs, [int(t[1:]) for t in ins if t.startswith("v")])
        self.nid += 1
        S.nodes[n.id] = n
        S.kinds[kind] = S.kinds.get(kind, 0) + 1
        o = ["-" if x is None else str(x) for x in outs]
        self.lines.append(" ".join(["n", str(n.id), kind, op, str(len(o))] + o + [str(len(ins))] + list(ins)
                                   + [str(len(attrs))] + [str(a) for a in attrs]))
        return n

    def eager(self, node, outs):
        S = self.S
        ins = [f"v{S.fx_value[x]}" for x in _flat_nodes((node.args, node.kwargs))
               if isinstance(S.fx_value.get(x), int)]
        # mutating ops read (and write) their inputs: a barrier in the schedule
        barrier = ops.is_mutating(node.target)
        n = self.emit("E", "barrier" if barrier else "op", outs, ins, fx=node)
        self.barrier_seen |= barrier
        if (not self.barrier_seen and all(int(t[1:]) in self.cpu_pure for t in ins)
                and all(o is None or S.values[o].device.type == "cpu" for o in outs)):
            self.cpu_pure.update(o for o in outs if o is not None)
            S.hoist.add(n.id)
        return n

    def out_values(self, node):
        """Values for a node's outputs: one id, or a tuple of ids/None."""
        m = node.meta.get("val")
        if _is_tensor(m):
            return self.new_value(m).id
        if isinstance(m, (list, tuple)):
            return tuple(self.new_value(x).id if _is_tensor(x) else None for x in m)
        return None

    # ---- one handler per FX node kind ----

    def node(self, node):
        handler = _NODE_HANDLERS.get(node.op)
        if handler is None:
            raise Unsupported(f"{node.op} node")
        handler(self, node)

    def placeholder(self, node):
        S, m = self.S, node.meta.get("val")
        if _is_tensor(m):
            v = self.new_value(m)
            S.fx_value[node] = v.id
            S.inputs.append(("t", v.id))
            self.input_ids.add(v.id)
            if m.device.type == "cpu":
                self.cpu_pure.add(v.id)
        elif isinstance(m, torch.SymInt):
            S.inputs.append(("s", to_expr(m)))
        else:
            S.inputs.append(("o", None))

    def get_attr(self, node):
        t = getattr(self.gm, node.target)
        if not _is_tensor(t):
            raise Unsupported("non-tensor attribute")
        v = self.new_value(t)
        self.S.fx_value[node] = v.id
        self.S.attrs.append((v.id, node.target))

    def output(self, node):
        pass  # finish() reads it

    def call(self, node):
        """A call_function node: the first of _CALL_HANDLERS that takes it."""
        m = node.meta.get("val")
        if isinstance(m, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (m is None and not node.users):
            return  # symbolic scalar computations: the runtime evaluates them from the symbols
        for handler in _CALL_HANDLERS:
            if handler(self, node, m):
                return

    def getitem(self, node, m):
        if not ops.is_getitem(node):
            return False
        S = self.S
        src, k = node.args
        prod = S.fx_value.get(src)
        if isinstance(prod, tuple):
            S.fx_value[node] = prod[k]
        elif prod == "multiview":
            base = S.fx_value[src.args[0]]
            S.fx_value[node] = view_value(S, self.emit, base, m).id
        else:
            raise Unsupported("getitem of a non-tuple")
        return True

    def view(self, node, m):
        """Views: metadata only."""
        if not isinstance(node.target, torch._ops.OpOverload):
            raise Unsupported(f"call of {node.target}")
        p = ops.packet(node.target)
        if p in ops.MULTI_VIEWS and ops.is_view_op(node.target):
            self.S.fx_value[node] = "multiview"
            return True
        if ops.is_view_op(node.target) and _is_tensor(m) and str(node.target) != "aten.view.dtype":
            base = self.S.fx_value.get(node.args[0])
            if not isinstance(base, int):
                raise Unsupported("view of a non-tensor")
            self.S.fx_value[node] = view_value(self.S, self.emit, base, m, reshape=p in ops.RESHAPE_VIEWS).id
            return True
        return False

    def devices(self, node, m):
        """(on_neuron, pw_ok): every tensor on neuron; pointwise and _foreach_ ops may also take CPU
        scalars (passed at launch time)."""
        tensors_in = [x for x in _flat_nodes((node.args, node.kwargs)) if _is_tensor(x.meta.get("val"))]
        on_neuron = all(x.meta["val"].device.type == "neuron" for x in tensors_in) and (
            not _is_tensor(m) or m.device.type == "neuron")
        pw_ok = on_neuron or (any(x.meta["val"].device.type == "neuron" for x in tensors_in) and all(
            x.meta["val"].device.type == "neuron" or self.is_cpu_scalar(x) for x in tensors_in) and (
            not _is_tensor(m) or m.device.type == "neuron"))
        return on_neuron, pw_ok

    def input_mutation(self, node, m):
        """copy_ into a graph input kept in the graph (keep_inference_input_mutations): the kernel that
        computes the new value writes it into the input's buffer (IR `mut`)."""
        if not (self.inplace and str(node.target) == "aten.copy_.default" and not node.users
                and self.devices(node, m)[0]):
            return False
        S = self.S
        dst = S.fx_value.get(node.args[0])
        src = S.fx_value.get(node.args[1])
        if not (isinstance(dst, int) and isinstance(src, int) and dst in self.input_ids):
            return False
        dv, sv = S.values[dst], S.values[src]
        if not (dv.rank == sv.rank and all(_eq(a, b) for a, b in zip(dv.sizes, sv.sizes))
                and (dv.rank == 0 or dv._lin(0) == 1) and dv.dtype in _DTYPES and sv.dtype in _DTYPES):
            return False
        nv = Value.make(S.new_id(), dv.dtype, dv.device, dv.sizes)
        S.values[nv.id] = nv
        self.emit("P", "copy", [nv.id], [f"v{src}"], [_DTYPES[dv.dtype]], fx=node)
        S.mutations.append((nv.id, dst))
        S.fx_value[node] = dst
        return True

    def compute(self, node, m):
        """Any other op: the first lowering that takes it (_LOWERINGS), else an eager step."""
        on_neuron, pw_ok = self.devices(node, m)
        outs = self.out_values(node)
        self.S.fx_value[node] = outs
        out_list = list(outs) if isinstance(outs, tuple) else [outs]
        for lower in _LOWERINGS:
            if lower(self, node, m, outs, out_list, on_neuron, pw_ok) is not None:
                return True
        self.eager(node, out_list)
        return True

    # ---- lowerings: (node, its value, outputs, output list, on neuron, pointwise ok) -> kind or None ----

    def lower_foreach(self, node, m, outs, out_list, on_neuron, pw_ok):
        if pw_ok and isinstance(m, (list, tuple)):
            return foreach(self.S, self.emit, self.operand, node, out_list)
        return None

    def lower_pointwise(self, node, m, outs, out_list, on_neuron, pw_ok):
        if not (pw_ok and _is_tensor(m) and m.dtype in _DTYPES):
            return None
        spec = ops.pointwise_spec(node)
        if spec is None:
            return None
        op, operands, ck = spec
        cd = _compute_dtype(self.S, node, operands, ck, m)
        if cd in ("bf16", "f16") and op not in ("mul", "div", "full", "addcmul", "addcdiv"):
            # like ATen's CPU kernels: a scalar operand is cast to the reduced dtype, except
            # for mul/div (computed with the scalar at float precision), alpha and the value
            # of addcmul/addcdiv (opmath scalars, as the eager kernels take them)
            tdt = torch.bfloat16 if cd == "bf16" else torch.float16
            operands = [float(torch.tensor(x, dtype=tdt)) if isinstance(x, (int, float))
                        and not isinstance(x, bool) and not (op.endswith("_alpha") and i == 2) else x
                        for i, x in enumerate(operands)]
        try:
            toks = [self.operand(a) for a in operands]
        except Unsupported:
            return None
        if cd is None or not all(_operand_dtype_ok(self.S, t) for t in toks) or not (
                cd in ("f32", "f64") or not any(t.startswith("d") for t in toks)):
            return None
        self.emit("P", op, [outs], toks, [cd], fx=node)
        return "P"

    def lower_reduction(self, node, m, outs, out_list, on_neuron, pw_ok):
        if not (on_neuron and _is_tensor(m) and m.dtype in _DTYPES):
            return None
        spec = ops.reduction_spec(node)
        x = node.args[0] if node.args else None
        if spec is None or not isinstance(self.S.fx_value.get(x), int):
            return None
        op, dims, keep = spec
        xv = self.S.values[self.S.fx_value[x]]
        k = xv.rank
        dims = list(range(k)) if dims is None else sorted({d % k if k else 0 for d in dims})
        if not _block(xv, dims):
            return None
        self.emit("R", op, [outs], [f"v{xv.id}"], [_DTYPES[m.dtype], int(keep), len(dims)] + dims, fx=node)
        return "R"

    def lower_decomposition(self, node, m, outs, out_list, on_neuron, pw_ok):
        return decompose(self.S, self.emit, node, out_list) if on_neuron else None

    def lower_library(self, node, m, outs, out_list, on_neuron, pw_ok):
        if on_neuron and str(node.target) in ops.LIBRARY:
            return library(self.S, self.emit, self.operand, node, out_list)
        return None

    def finish(self):
        """The graph's outputs and the IR text."""
        S, ex = self.S, self.ex
        out_node = next(n for n in self.gm.graph.nodes if n.op == "output")
        res = out_node.args[0]
        out_ids = []
        for r in (res if isinstance(res, (list, tuple)) else [res]):
            if isinstance(r, torch.fx.Node):
                m = r.meta.get("val")
                x = S.fx_value.get(r)
                if isinstance(x, int):
                    S.outputs.append(("t", x))
                    out_ids.append(x)
                elif isinstance(m, torch.SymInt):
                    S.outputs.append(("s", to_expr(m)))
                else:
                    raise Unsupported(f"graph output {r}")
            else:
                S.outputs.append(("c", r))
        for v in S.values.values():
            for e in v.sizes + v.strides + [v.off]:
                for sym in e.free_symbols:
                    if sym not in ex.index:
                        raise Unsupported(f"size symbol {sym} is not an input size")
        head = ["ncir 1", f"syms {len(ex.syms) + len(S.scalars)}"]
        if os.environ.get("NEURON_COMPILE_PROFILE", "0") not in ("", "0"):
            head.append("profile 1")
        head += [S.values[i].line(ex) for i in sorted(S.values)]
        ins = [str(x[1]) for x in S.inputs if x[0] == "t"] + [str(a[0]) for a in S.attrs]
        head.append(" ".join(["in", str(len(ins))] + ins))
        muts = ([" ".join(["mut", str(len(S.mutations))] + [f"{v} {d}" for v, d in S.mutations])]
                if S.mutations else [])
        S.ir = "\n".join(head + self.lines + muts
                         + [" ".join(["out", str(len(out_ids))] + [str(i) for i in out_ids]), "end", ""])
        return S


_NODE_HANDLERS = {"placeholder": _Serializer.placeholder, "get_attr": _Serializer.get_attr,
                  "output": _Serializer.output, "call_function": _Serializer.call}
_CALL_HANDLERS = (_Serializer.getitem, _Serializer.view, _Serializer.input_mutation, _Serializer.compute)
_LOWERINGS = (_Serializer.lower_foreach, _Serializer.lower_pointwise, _Serializer.lower_reduction,
              _Serializer.lower_decomposition, _Serializer.lower_library)


def serialize(gm, example_inputs=None, inplace=True, scalars=True):
    """Serialized form of an ATen-level GraphModule; raises Unsupported for what it cannot express.
    inplace: input mutations (`copy_` into a graph input, with no users) are written by the kernel
    that computes the new value (IR `mut`); False: they run as eager copy_ ops.
    scalars: 0-d f32/f64 CPU tensors computed on the CPU from graph inputs before any device work
    (AdamW's bias corrections of CPU `step`s) are pointwise operands passed at launch time (IR `d`
    operands in symbol slots after the size symbols; their eager ops run first)."""
    z = _Serializer(gm, inplace, scalars)
    z.bind_symbols()
    for node in gm.graph.nodes:
        z.node(node)
    return z.finish()


def foreach(S, emit, operand, node, outs):
    """A functional _foreach_ op as one pointwise node per list element (all or nothing)."""
    if str(node.target).startswith("aten._foreach_norm."):
        return _foreach_norm(S, emit, node, outs)
    elems = ops.foreach_elements(node)
    if not elems or len(elems) != len(outs) or any(o is None for o in outs):
        return None
    planned = []
    for e, o in zip(elems, outs):
        spec = ops.pointwise_spec(e)
        m = e.meta["val"]
        if spec is None or not _is_tensor(m) or m.dtype not in _DTYPES:
            return None
        op, operands, ck = spec
        cd = _compute_dtype(S, e, operands, ck, m)
        try:
            toks = [operand(x) for x in operands]
        except Unsupported:
            return None
        if cd is None or not all(_operand_dtype_ok(S, t) for t in toks):
            return None
        if any(t.startswith("d") for t in toks) and cd not in ("f32", "f64"):
            return None
        planned.append((op, o, toks, cd))
    for op, o, toks, cd in planned:
        emit("P", op, [o], toks, [cd], fx=node)
    return "P"


def _foreach_norm(S, emit, node, outs):
    """_foreach_norm(tensors, 2): sqrt(sum(x*x)) per tensor."""
    a = node.args
    if (a[1] if len(a) > 1 else node.kwargs.get("ord", 2)) != 2 or node.kwargs.get("dtype") is not None:
        return None
    xs = [S.values.get(S.fx_value.get(x)) if isinstance(S.fx_value.get(x), int) else None for x in a[0]]
    if any(x is None or x.dtype not in (torch.float32, torch.float64) for x in xs) or any(o is None for o in outs):
        return None
    for x, o in zip(xs, outs):
        dt = _DTYPES[x.dtype]
        sq = _synth(S, x, x.sizes)
        emit("P", "mul", [sq.id], [f"v{x.id}", f"v{x.id}"], [dt], fx=node)
        sm = _synth(S, x, [])
        emit("R", "sum", [sm.id], [f"v{sq.id}"], [dt, 0, x.rank] + list(range(x.rank)), fx=node)
        emit("P", "sqrt", [o], [f"v{sm.id}"], [dt], fx=node)
    return "P"


def view_value(S, emit, base, m, reshape=False):
    b = S.values[base]
    v = Value(S.new_id(), m, root=b.root, off=b.off + (to_expr(m.storage_offset()) - b.meta_offset))
    S.values[v.id] = v
    emit("V", "view", [v.id], [f"v{base}"], [int(bool(reshape))])
    return v


def _operand_dtype_ok(S, tok):
    if tok.startswith("v"):
        v = S.values[int(tok[1:])]
        return v.dtype in _DTYPES and v.device.type == "neuron"
    return True


def _meta_like(x):
    if isinstance(x, torch.fx.Node):
        m = x.meta.get("val")
        if _is_tensor(m):
            return torch.empty([1] * m.dim(), dtype=m.dtype, device="meta")
        if isinstance(m, torch.SymInt):
            return 1
        return m
    return x


def _compute_dtype(S, node, operands, kind, out):
    if kind == "bool":
        return "bool"
    if kind == "out":
        return _DTYPES[out.dtype]
    args = [_meta_like(a) for a in operands]
    try:
        if len(args) == 1:
            dt = args[0].dtype if _is_tensor(args[0]) else torch.tensor(args[0]).dtype
        else:
            dt = torch.result_type(args[0], args[1]) if _is_tensor(args[0]) else torch.result_type(args[1], args[0])
    except Exception:
        return None
    return _DTYPES.get(dt)


# ---- decompositions of our own -------------------------------------------------------------------------

def decompose(S, emit, node, outs):
    """Softmax over a non-last (or non-contiguous) dim and var / var_mean as pointwise ops and
    reductions (fused by the compiler into one multi-pass kernel); None if not applicable."""
    name = str(node.target)
    a, kw = node.args, node.kwargs
    if name in ("aten._softmax.default", "aten._log_softmax.default"):
        xv = S.values.get(S.fx_value.get(a[0])) if isinstance(S.fx_value.get(a[0]), int) else None
        if xv is None or a[2] or xv.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            return None
        k = xv.rank
        dim = a[1] % max(1, k)
        yv = S.values[outs[0]]
        if k and dim == k - 1 and xv._lin(0) == 1 and yv._lin(0) == 1:
            return None  # the library kernel
        return _softmax(S, emit, node, xv, [dim] if k else [], yv, name.endswith("_log_softmax.default"))
    if name == "aten._native_batch_norm_legit_no_training.default":
        return _batch_norm_eval(S, emit, node, outs)
    if name in ("aten.var_mean.correction", "aten.var.correction"):
        xv = S.values.get(S.fx_value.get(a[0])) if isinstance(S.fx_value.get(a[0]), int) else None
        if xv is None or xv.dtype not in (torch.float32, torch.float64):
            return None
        dims = a[1] if len(a) > 1 else kw.get("dim")
        corr = kw.get("correction", 1)
        keep = kw.get("keepdim", False)
        if corr is None:
            corr = 1
        k = xv.rank
        dims = list(range(k)) if dims is None or (isinstance(dims, (list, tuple)) and not dims) else sorted(
            {d % max(1, k) for d in ([dims] if isinstance(dims, int) else dims)})
        return _var_mean(S, emit, node, xv, dims, corr, keep, outs)
    if name == "aten.linalg_vector_norm.default":
        # ord 2 over every dim (clip_grad_norm_'s total norm of the per-tensor norms): sqrt(sum(x*x)),
        # one row reduction instead of an eager launch
        xv = S.values.get(S.fx_value.get(a[0])) if isinstance(S.fx_value.get(a[0]), int) else None
        ordv = a[1] if len(a) > 1 else kw.get("ord", 2)
        dims = a[2] if len(a) > 2 else kw.get("dim")
        keep = a[3] if len(a) > 3 else kw.get("keepdim", False)
        if (xv is None or xv.rank == 0 or xv.dtype not in (torch.float32, torch.float64) or ordv != 2 or keep
                or kw.get("dtype") is not None or (dims is not None and len(dims)) or xv.device.type != "neuron"
                or outs[0] is None):
            return None
        dt = _DTYPES[xv.dtype]
        sq = _synth(S, xv, xv.sizes)
        emit("P", "mul", [sq.id], [f"v{xv.id}", f"v{xv.id}"], [dt], fx=node)
        sm = _synth(S, xv, [])
        emit("R", "sum", [sm.id], [f"v{sq.id}"], [dt, 0, xv.rank] + list(range(xv.rank)), fx=node)
        emit("P", "sqrt", [outs[0]], [f"v{sm.id}"], [dt], fx=node)
        return "P"
    return None


def _synth(S, like, sizes):
    v = Value.make(S.new_id(), like.dtype, like.device, sizes)
    S.values[v.id] = v
    return v


def _keep_sizes(xv, dims):
    return [sympy.Integer(1) if d in dims else s for d, s in enumerate(xv.sizes)]


def _softmax(S, emit, node, xv, dims, yv, log):
    dt = _DTYPES[xv.dtype]
    ks = _keep_sizes(xv, dims)
    m = _synth(S, xv, ks)
    emit("R", "amax", [m.id], [f"v{xv.id}"], [dt, 1, len(dims)] + dims, fx=node)
    d = _synth(S, xv, xv.sizes)
    emit("P", "sub", [d.id], [f"v{xv.id}", f"v{m.id}"], [dt], fx=node)
    e = _synth(S, xv, xv.sizes)
    emit("P", "exp", [e.id], [f"v{d.id}"], [dt], fx=node)
    sm = _synth(S, xv, ks)
    emit("R", "sum", [sm.id], [f"v{e.id}"], [dt, 1, len(dims)] + dims, fx=node)
    if log:
        lg = _synth(S, xv, ks)
        emit("P", "log", [lg.id], [f"v{sm.id}"], [dt], fx=node)
        emit("P", "sub", [yv.id], [f"v{d.id}", f"v{lg.id}"], [dt], fx=node)
    else:
        emit("P", "div", [yv.id], [f"v{e.id}", f"v{sm.id}"], [dt], fx=node)
    return "P"


def _batch_norm_eval(S, emit, node, outs):
    """y = (x - running_mean) * rsqrt(running_var + eps) * w + b, per channel (dim 1)."""
    a = node.args
    x, w, b, rm, rv, _momentum, eps = a[:7]
    if any(u.target is operator.getitem and u.args[1] != 0 for u in node.users):
        return None  # the saved statistics are read: leave the op to eager
    xv = S.values.get(S.fx_value.get(x)) if isinstance(S.fx_value.get(x), int) else None
    if xv is None or xv.rank < 2 or xv.dtype not in (torch.float32, torch.float64) or outs[0] is None:
        return None
    dt = _DTYPES[xv.dtype]
    C = xv.sizes[1]
    shape = [C] + [sympy.Integer(1)] * (xv.rank - 2)

    def chan(t):
        if t is None:
            return None
        v = S.values.get(S.fx_value.get(t)) if isinstance(S.fx_value.get(t), int) else None
        if v is None or v.rank != 1 or v.dtype != xv.dtype:
            raise Unsupported("batch norm parameter")
        c = Value.make(S.new_id(), v.dtype, v.device, shape, strides=[v.strides[0]] + [sympy.Integer(0)] * (xv.rank - 2),
                       root=v.root)
        c.off = v.off
        S.values[c.id] = c
        emit("V", "view", [c.id], [f"v{v.id}"], [1])
        return c
    try:
        rmv, rvv, wv, bv = chan(rm), chan(rv), chan(w), chan(b)
    except Unsupported:
        return None
    if rmv is None or rvv is None:
        return None
    inv = _synth(S, xv, shape)
    t = _synth(S, xv, shape)
    emit("P", "add", [t.id], [f"v{rvv.id}", _float_tok(eps)], [dt], fx=node)
    emit("P", "rsqrt", [inv.id], [f"v{t.id}"], [dt], fx=node)
    d = _synth(S, xv, xv.sizes)
    emit("P", "sub", [d.id], [f"v{x_id(S, x)}", f"v{rmv.id}"], [dt], fx=node)
    y = _synth(S, xv, xv.sizes)
    emit("P", "mul", [y.id], [f"v{d.id}", f"v{inv.id}"], [dt], fx=node)
    if wv is not None:
        y2 = _synth(S, xv, xv.sizes)
        emit("P", "mul", [y2.id], [f"v{y.id}", f"v{wv.id}"], [dt], fx=node)
        y = y2
    out = S.values[outs[0]]
    if bv is not None:
        emit("P", "add", [out.id], [f"v{y.id}", f"v{bv.id}"], [dt], fx=node)
    else:
        emit("P", "copy", [out.id], [f"v{y.id}"], [dt], fx=node)
    return "P"


def x_id(S, x):
    return S.fx_value[x]


def _block(xv, dims):
    """True if the reduced dims (ignoring size-1 dims) are one contiguous block."""
    nt = [d for d in range(xv.rank) if not (xv.sizes[d].is_Integer and int(xv.sizes[d]) == 1)]
    idx = [i for i, d in enumerate(nt) if d in dims]
    return not idx or idx == list(range(idx[0], idx[-1] + 1))


def _var_mean(S, emit, node, xv, dims, corr, keep, outs):
    if not _block(xv, dims):
        return None
    dt = _DTYPES[xv.dtype]
    n = sympy.Integer(1)
    for d in dims:
        n = n * xv.sizes[d]
    ks = _keep_sizes(xv, dims)
    s1 = _synth(S, xv, ks)
    emit("R", "sum", [s1.id], [f"v{xv.id}"], [dt, 1, len(dims)] + dims, fx=node)
    mu = _synth(S, xv, ks)
    emit("P", "div", [mu.id], [f"v{s1.id}", "e" + S.ex.c(n)], [dt], fx=node)
    d = _synth(S, xv, xv.sizes)
    emit("P", "sub", [d.id], [f"v{xv.id}", f"v{mu.id}"], [dt], fx=node)
    d2 = _synth(S, xv, xv.sizes)
    emit("P", "mul", [d2.id], [f"v{d.id}", f"v{d.id}"], [dt], fx=node)
    var = S.values[outs[0]]
    s2 = _synth(S, xv, [s for s in var.sizes])
    emit("R", "sum", [s2.id], [f"v{d2.id}"], [dt, int(bool(keep)), len(dims)] + dims, fx=node)
    denom = n - corr
    tok = ("e" + S.ex.c(denom)) if isinstance(corr, int) else _float_tok(float(denom)) if not denom.free_symbols else None
    if tok is None:
        return None
    emit("P", "div", [var.id], [f"v{s2.id}", tok], [dt], fx=node)
    if len(outs) > 1 and outs[1] is not None:
        mean = S.values[outs[1]]
        src = mu
        if not keep:
            src = Value.make(S.new_id(), mu.dtype, mu.device, mean.sizes, root=mu.id)
            S.values[src.id] = src
            emit("V", "view", [src.id], [f"v{mu.id}"], [1])
        emit("P", "copy", [mean.id], [f"v{src.id}"], [dt], fx=node)
    return "P"


# ---- library calls ---------------------------------------------------------------------------------------

def _arange_rows(idx):
    """n if the FX node idx is a 1-D int64 arange(0, n) (or arange(n)) with a static n, else None"""
    if not isinstance(idx, torch.fx.Node) or idx.op != "call_function":
        return None
    t, a, kw = str(idx.target), idx.args, idx.kwargs
    if t == "aten.arange.default":
        start, end, step = 0, a[0], 1
    elif t in ("aten.arange.start", "aten.arange.start_step"):
        start, end = a[0], a[1]
        step = a[2] if len(a) > 2 else kw.get("step", 1)
    else:
        return None
    m = idx.meta.get("val")
    if (start != 0 or step != 1 or not isinstance(end, int) or isinstance(end, bool) or end < 0 or m is None
            or m.dim() != 1 or m.dtype != torch.int64):
        return None
    return end


def _bias_fits(n_bias, n):
    """addmm's 1-D bias broadcasts along C's rows: N elements or one (known without a new guard)."""
    if isinstance(n_bias, int) and isinstance(n, int):
        return n_bias in (n, 1)
    try:
        from torch.fx.experimental.symbolic_shapes import statically_known_true
        return bool(statically_known_true(n_bias == n))
    except Exception:  # noqa: BLE001
        return False


_FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


class _LibOperands:
    """Operand helpers of one library op: value tokens, layout and dtype checks."""

    def __init__(self, S, outs):
        self.S = S
        self.out_toks = [None if o is None else f"v{o}" for o in outs]

    def vid(self, x):
        if x is None:
            return "-"
        r = self.S.fx_value.get(x)
        if not isinstance(r, int):
            raise Unsupported("library operand")
        return f"v{r}"

    def contig(self, *toks):
        """every operand/output absent or contiguous (the row-major layout the kernel contract asks)"""
        for t in toks:
            if t in ("-", None):
                continue
            v = self.S.values[int(t[1:])] if isinstance(t, str) else self.S.values[t]
            if v.rank and v._lin(0) != 1:
                return False
        return True

    def same_float(self, *toks):
        dts = {self.S.values[int(t[1:])].dtype for t in toks if t not in ("-", None)}
        return len(dts) == 1 and dts.pop() in _FLOATS


# ---- library ops: one handler each, (name, S, emit, node, outs, args, kwargs, operand helpers) -> the
# kind emitted ("L", or "P"/"V" for the ops done without a library call), or None: the op runs eagerly

def _lib_cat(name, S, emit, node, outs, a, kw, h):
    tensors = a[0]
    dim = a[1] if len(a) > 1 else kw.get("dim", 0)
    k = S.values[outs[0]].rank
    ins = [h.vid(t) for t in tensors]
    if k == 0 or any(S.values[int(t[1:])].rank != k for t in ins):
        return None
    emit("L", "cat", outs, ins, [dim % k], fx=node)
    return "L"


def _lib_mm(name, S, emit, node, outs, a, kw, h):
    if not h.same_float(h.vid(a[0]), h.vid(a[1]), h.out_toks[0]):
        return None
    emit("L", name, outs, [h.vid(a[0]), h.vid(a[1])], fx=node)
    return "L"


def _lib_addmm(name, S, emit, node, outs, a, kw, h):
    beta = kw.get("beta", 1)
    alpha = kw.get("alpha", 1)
    if beta != 1 or alpha != 1 or not h.same_float(h.vid(a[1]), h.vid(a[2]), h.out_toks[0]):
        return None
    m = node.meta["val"]
    bias = S.values[S.fx_value[a[0]]] if isinstance(S.fx_value.get(a[0]), int) else None
    bv = a[0].meta.get("val") if isinstance(a[0], torch.fx.Node) else None
    if (bias is not None and bias.rank == 1 and bias.dtype == m.dtype and bv is not None
            and _bias_fits(bv.shape[0], m.shape[1])):
        # the bias row (N elements, or one broadcast) goes into the GEMM, which starts C from it
        # (nk_gemm_args_t.bias): no pass over C for the add, as eager addmm
        emit("L", "mm", outs, [h.vid(a[1]), h.vid(a[2]), h.vid(a[0])], fx=node)
        return "L"
    tmp = Value(S.new_id(), m)
    S.values[tmp.id] = tmp
    emit("L", "mm", [tmp.id], [h.vid(a[1]), h.vid(a[2])], fx=node)
    emit("P", "add", outs, [f"v{tmp.id}", h.vid(a[0])], [_DTYPES[m.dtype]], fx=node)
    return "L"


def _lib_softmax(name, S, emit, node, outs, a, kw, h):
    x = S.values[S.fx_value[a[0]]]
    if x.dtype not in _FLOATS or not h.contig(h.vid(a[0]), h.out_toks[0]):
        return None
    dim = a[1] % max(1, x.rank)
    if a[2]:
        return None  # half_to_float
    emit("L", name, outs, [h.vid(a[0])], [dim], fx=node)
    return "L"


def _lib_layernorm(name, S, emit, node, outs, a, kw, h):
    x, shape, w, b, eps = a
    xd = S.values[S.fx_value[x]].dtype
    if xd not in _FLOATS or (outs[0] is not None and S.values[outs[0]].dtype != xd):
        return None
    # the kernel writes mean/rstd in the input dtype (as eager on the CPU); the meta function
    # says f32 for bf16/f16 inputs: write temporaries and cast (exactly) to the traced dtype
    louts, casts = list(outs), []
    for i in (1, 2):
        o = outs[i] if i < len(outs) else None
        if o is not None and S.values[o].dtype != xd:
            ov = S.values[o]
            if ov.dtype not in _FLOATS or not h.contig(f"v{o}"):
                return None
            tmp = Value.make(S.new_id(), xd, ov.device, ov.sizes)
            S.values[tmp.id] = tmp
            louts[i] = tmp.id
            casts.append((o, tmp.id))
    emit("L", name, louts, [h.vid(x), h.vid(w), h.vid(b)], [len(shape), _float_tok(eps)[1:]], fx=node)
    for o, t in casts:
        emit("P", "copy", [o], [f"v{t}"], [_DTYPES[S.values[o].dtype]], fx=node)
    return "L"


def _lib_layernorm_bwd(name, S, emit, node, outs, a, kw, h):
    dy, x, shape, mean, rstd, w, b, mask = a
    xd = S.values[S.fx_value[x]].dtype
    if xd not in _FLOATS or S.values[S.fx_value[dy]].dtype != xd:
        return None
    stats = []
    for t in (mean, rstd):  # f32 statistics of a bf16/f16 layer norm: cast to the input dtype
        tv = S.values[S.fx_value[t]]
        if tv.dtype == xd:
            stats.append(h.vid(t))
            continue
        if tv.dtype not in _FLOATS:
            return None
        tmp = Value.make(S.new_id(), xd, tv.device, tv.sizes)
        S.values[tmp.id] = tmp
        emit("P", "copy", [tmp.id], [h.vid(t)], [_DTYPES[xd]], fx=node)
        stats.append(f"v{tmp.id}")
    emit("L", name, outs, [h.vid(dy), h.vid(x), stats[0], stats[1], h.vid(w), h.vid(b)],
         [len(shape)] + [int(bool(t)) for t in mask], fx=node)
    return "L"


def _lib_embedding(name, S, emit, node, outs, a, kw, h):
    w, idx = a[0], a[1]
    if S.values[S.fx_value[idx]].dtype not in (torch.int64, torch.int32):
        return None
    wv, n = S.values[S.fx_value[w]], _arange_rows(idx)
    if (n is not None and outs[0] is not None and wv.rank == 2 and wv.sizes[0].is_Integer
            and n <= int(wv.sizes[0]) and not any(u.op == "output" for u in node.users)):
        # embedding(w, arange(n)) (a position embedding) is rows 0..n-1 of w: the output becomes
        # that view of w (no kernel; its readers, e.g. the add of the token embedding, read w)
        sl = Value.make(outs[0], wv.dtype, wv.device, [n, wv.sizes[1]], strides=wv.strides, root=wv.root)
        sl.off = wv.off
        S.values[outs[0]] = sl
        emit("V", "view", [sl.id], [h.vid(w)], [0])
        return "V"
    emit("L", name, outs, [h.vid(w), h.vid(idx)], fx=node)
    return "L"


def _lib_embedding_bwd(name, S, emit, node, outs, a, kw, h):
    grad, idx, nw, pad, scale = a
    if scale or isinstance(nw, torch.fx.Node) or S.values[S.fx_value[idx]].dtype not in (torch.int64, torch.int32):
        return None
    emit("L", name, outs, [h.vid(grad), h.vid(idx)], [int(nw), int(pad)], fx=node)
    return "L"


def _lib_nll(name, S, emit, node, outs, a, kw, h):
    x, t, w, red, ign = a
    if S.values[S.fx_value[t]].dtype != torch.int64 or S.values[S.fx_value[x]].dtype not in _FLOATS:
        return None
    emit("L", name, outs, [h.vid(x), h.vid(t), h.vid(w)], [int(red), int(ign)], fx=node)
    return "L"


def _lib_nll_bwd(name, S, emit, node, outs, a, kw, h):
    g, x, t, w, red, ign, tw = a
    if S.values[S.fx_value[t]].dtype != torch.int64 or S.values[S.fx_value[x]].dtype not in _FLOATS:
        return None
    xv, tv0 = S.values[S.fx_value[x]], S.values[S.fx_value[t]]
    if (w is None and int(red) in (1, 2) and xv.rank == 2 and xv.dtype in (torch.float32, torch.float64)
            and xv.sizes[1].is_Integer and not 0 <= int(ign) < int(xv.sizes[1]) and outs[0] is not None
            and S.values[outs[0]].dtype == xv.dtype and S.values[S.fx_value[g]].rank == 0):
        # pointwise: grad_in[r, c] = (c == target[r]) ? -grad / total_weight (mean) : 0.  An
        # ignore_index outside [0, C) never matches a column.  It fuses into its consumer (the
        # log_softmax backward row kernel) instead of a library call writing [N, C].
        dt, C = _DTYPES[xv.dtype], int(xv.sizes[1])
        shape = xv.sizes
        fl = _synth(S, tv0, shape)
        emit("P", "arange", [fl.id], ["i0", "i1"], ["i64"], fx=node)
        col = _synth(S, tv0, shape)
        emit("P", "remainder", [col.id], [f"v{fl.id}", f"i{C}"], ["i64"], fx=node)
        tcol = Value.make(S.new_id(), tv0.dtype, tv0.device, [xv.sizes[0], 1], root=tv0.root)
        tcol.off = tv0.off
        tcol.strides = [tv0.strides[0], sympy.Integer(1)]
        S.values[tcol.id] = tcol
        emit("V", "view", [tcol.id], [h.vid(t)], [1])
        hit = Value.make(S.new_id(), torch.bool, xv.device, shape)
        S.values[hit.id] = hit
        emit("P", "eq", [hit.id], [f"v{col.id}", f"v{tcol.id}"], ["i64"], fx=node)
        val = _synth(S, xv, shape)
        if int(red) == 1:
            emit("P", "div", [val.id], [h.vid(g), h.vid(tw)], [dt], fx=node)
        else:
            emit("P", "mul", [val.id], [h.vid(g), "f1.0"], [dt], fx=node)
        neg = _synth(S, xv, shape)
        emit("P", "neg", [neg.id], [f"v{val.id}"], [dt], fx=node)
        emit("P", "where", [outs[0]], [f"v{hit.id}", f"v{neg.id}", "f0.0"], [dt], fx=node)
        return "P"
    emit("L", name, outs, [h.vid(g), h.vid(x), h.vid(t), h.vid(w), h.vid(tw)], [int(red), int(ign)], fx=node)
    return "L"


def _lib_attention(name, S, emit, node, outs, a, kw, h):
    q, k, v = a[0], a[1], a[2]
    bias = a[3] if len(a) > 3 else kw.get("attn_bias")
    p = a[4] if len(a) > 4 else kw.get("dropout_p", 0.0)
    causal = a[5] if len(a) > 5 else kw.get("is_causal", False)
    dbg = a[6] if len(a) > 6 else kw.get("return_debug_mask", False)
    scale = a[7] if len(a) > 7 else kw.get("scale")
    if p != 0.0 or dbg or not h.same_float(h.vid(q), h.vid(k), h.vid(v)) or not h.contig(h.out_toks[1]):
        return None
    if bias is not None and S.values[int(h.vid(bias)[1:])].dtype not in (torch.bool, S.values[int(h.vid(q)[1:])].dtype):
        return None
    emit("L", name, outs, [h.vid(q), h.vid(k), h.vid(v), h.vid(bias)],
         [int(bool(causal)), "-" if scale is None else _float_tok(scale)[1:]], fx=node)
    return "L"


def _lib_attention_bwd(name, S, emit, node, outs, a, kw, h):
    (dout, q, k, v, bias, mask_req, out, lse, _cq, _ck, _mq, _mk, p, causal, _seed, _off) = a[:16]
    scale = a[16] if len(a) > 16 else kw.get("scale")
    if p != 0.0 or (mask_req[3] and bias is not None) or not h.same_float(h.vid(q), h.vid(k), h.vid(v)) or not h.contig(h.vid(lse)):
        return None
    if bias is not None and S.values[int(h.vid(bias)[1:])].dtype not in (torch.bool, S.values[int(h.vid(q)[1:])].dtype):
        return None
    emit("L", name, outs, [h.vid(dout), h.vid(q), h.vid(k), h.vid(v), h.vid(bias), h.vid(out), h.vid(lse)],
         [int(bool(causal)), "-" if scale is None else _float_tok(scale)[1:]], fx=node)
    return "L"


_LIB_HANDLERS = {
    "cat": _lib_cat,
    "mm": _lib_mm,
    "bmm": _lib_mm,
    "addmm": _lib_addmm,
    "softmax": _lib_softmax,
    "log_softmax": _lib_softmax,
    "layernorm": _lib_layernorm,
    "layernorm_bwd": _lib_layernorm_bwd,
    "embedding": _lib_embedding,
    "embedding_bwd": _lib_embedding_bwd,
    "nll": _lib_nll,
    "nll_bwd": _lib_nll_bwd,
    "attention": _lib_attention,
    "attention_bwd": _lib_attention_bwd,
}
_LIB_CONTIGUOUS = ("layernorm", "layernorm_bwd", "embedding", "embedding_bwd", "nll", "nll_bwd")


def library(S, emit, operand, node, outs):
    """Emit the node of a kernel-library op through its handler (_LIB_HANDLERS); None if the op's
    arguments are outside what the library does (the caller makes it eager)."""
    name = ops.LIBRARY[str(node.target)]
    handler = _LIB_HANDLERS.get(name)
    if handler is None:
        return None
    h = _LibOperands(S, outs)
    try:
        if name in _LIB_CONTIGUOUS:
            ins_all = [h.vid(x) for x in _flat_nodes(node.args) if isinstance(S.fx_value.get(x), int)]
            if not h.contig(*ins_all, *h.out_toks):
                return None
        return handler(name, S, emit, node, outs, node.args, node.kwargs, h)
    except (Unsupported, KeyError, ValueError, TypeError, IndexError):
        return None
