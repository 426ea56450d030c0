"""Running a compiled graph: the plan's steps in order, on the current queue of the device.

A step is either a segment of the loaded program (one queue launch: fused kernels and library calls)
or an eager op (the ATen op called on neuron tensors).  Per call the runtime binds the symbols from
the inputs' sizes, allocates the workspace (one buffer, placed by the program's nc_plan) and the
buffers the caller or eager ops see, launches, and returns the outputs (views of those buffers where
the graph's outputs are views).  Launches are asynchronous like any eager op; the caching
allocator's queue-ordered reuse makes freeing the workspace right after the launches safe.
"""
import ctypes
import functools
import struct
import logging

import torch

from . import serialize as ser_mod

log = logging.getLogger("torchneuron.compile")

class _Runtime:
    """ctypes handles into the loaded extension (the runtime and the kernel library)."""

    def __init__(self):
        from .. import _C
        lib = ctypes.CDLL(_C.__file__)
        lib.nrt_queue_by_id.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.nrt_queue_by_id.restype = ctypes.c_void_p
        lib.nrt_queue_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                         ctypes.c_void_p]
        lib.nrt_queue_launch.restype = ctypes.c_int
        lib.nrt_last_error.restype = ctypes.c_char_p
        self.lib = lib
        from .toolchain import graph_compiler
        self.table = graph_compiler().rt_table()  # nc_rt_t, filled in C (csrc/compiler/nc_rt.c)
        self._queues = {}

    def queue(self, dev):
        sid = torch.accelerator.current_stream(dev).stream_id
        q = self._queues.get((dev, sid))
        if q is None:
            q = self.lib.nrt_queue_by_id(dev, sid)
            if not q:
                raise RuntimeError(f"neuron: no queue for stream {sid} of device {dev}")
            self._queues[(dev, sid)] = q
        return q


@functools.lru_cache(maxsize=None)
def runtime():
    return _Runtime()


class Plan:
    def __init__(self, text):
        self.units, self.segs, self.steps, self.ws, self.ext = [], {}, [], [], []
        self.nkernels = 0
        for line in text.splitlines():
            t = line.split()
            if not t:
                continue
            if t[0] == "unit":
                self.units.append((int(t[1]), t[2], [int(x) for x in t[4:]]))
            elif t[0] == "seg":
                self.segs[int(t[1])] = [int(x) for x in t[3:]]
            elif t[0] == "step":
                self.steps.append((t[1], int(t[2])))
            elif t[0] == "ws":
                self.ws = [int(x) for x in t[2:]]
            elif t[0] == "ext":
                self.ext = [int(x) for x in t[2:]]
            elif t[0] == "kernels":
                self.nkernels = int(t[1])


class Program:
    """A compiled graph: call it with the graph's (boxed) inputs."""

    _boxed_call = True

    def __init__(self, ser, plan, lib, key, gm, name):
        self.ser, self.plan, self.lib, self.key, self.name = ser, plan, lib, key, name
        # eager ops computing the CPU scalars kernels take at launch time run before everything else
        hoist = getattr(ser, "hoist", set())
        if hoist:
            plan.steps = [s for s in plan.steps if s[0] == "E" and s[1] in hoist] + [
                s for s in plan.steps if not (s[0] == "E" and s[1] in hoist)]
        self.scalars = list(getattr(ser, "scalars", []))
        self._n_hoist = sum(1 for s in plan.steps if s[0] == "E" and s[1] in hoist)
        self._boxed_call = True  # an instance attribute: functools.wraps copies it to wrappers
        self.gm = gm
        self.calls = 0
        self.eager_steps = sum(1 for s in plan.steps if s[0] == "E")
        self.eager_ops = [str(ser.nodes[k].fx.target) for kind, k in plan.steps if kind == "E"]
        self.kernels_per_call = plan.nkernels + self.eager_steps
        self.launches_per_call = len(plan.steps)
        self.ws_index = {v: i for i, v in enumerate(plan.ws)}
        # roots something reads after they are made: compiled segments, eager ops, the caller
        self._read_roots = {r for roots in plan.segs.values() for r in roots}
        self._read_roots |= {ser.values[v].root for k, v in ser.outputs if k == "t"}
        self._read_roots |= {ser.values[v].root for kind, n in plan.steps if kind == "E" for v in ser.nodes[n].ins}
        # buffer lifetimes over the steps: allocate at first use, drop after the last (outputs excepted)
        first, last = {}, {}
        for i, (kind, k) in enumerate(plan.steps):
            roots = plan.segs[k] if kind == "K" else [ser.values[v].root for v in ser.nodes[k].ins] + [
                v for v in ser.nodes[k].outs if v is not None]
            for r in roots:
                first.setdefault(r, i)
                last[r] = i
        keep = {ser.values[v].root for k, v in ser.outputs if k == "t"} | set(self.scalars)
        self._alloc_at = {}
        self._free_at = {}
        for r, i in last.items():
            if r not in keep:
                self._free_at.setdefault(i, []).append(r)
        self._ext_first = {r: first.get(r, 0) for r in plan.ext}
        self.attr_tensors = [(vid, getattr(gm, name)) for vid, name in ser.attrs]
        devs = [v.device for v in ser.values.values() if v.device.type == "neuron"]
        self.device = (devs[0].index or 0) if devs else 0
        self._layouts = {}
        self._vfns = {}
        self._symfns = {}
        self._fn, self._names, self._args = {}, {}, {}
        self.kernel_names, self._prof_ns, self._prof_calls = [], None, None
        if lib is not None:
            lib.nc_plan.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)]
            lib.nc_plan.restype = ctypes.c_int64
            lib.nc_seg_name.argtypes = [ctypes.c_int]
            lib.nc_seg_name.restype = ctypes.c_void_p
            lib.nc_init.argtypes = [ctypes.c_void_p]
            lib.nc_init.restype = ctypes.c_int
            if lib.nc_init(runtime().table) != 0:
                raise RuntimeError("neuron compile: program ABI mismatch")
            nsyms = len(ser.ex.syms) + len(self.scalars)
            self._nsyms_all = nsyms
            nk = ctypes.c_int.in_dll(lib, "nc_nkernels").value
            self.kernel_names = [n.decode() for n in (ctypes.c_char_p * (nk + 1)).in_dll(lib, "nc_kernel_names")[:nk]]
            self._prof_ns = (ctypes.c_int64 * (nk + 1)).in_dll(lib, "nc_prof_ns")
            self._prof_calls = (ctypes.c_int64 * (nk + 1)).in_dll(lib, "nc_prof_calls")
            for k, roots in plan.segs.items():
                self._fn[k] = ctypes.cast(getattr(lib, f"nc_seg{k}"), ctypes.c_void_p).value
                self._names[k] = lib.nc_seg_name(k)
                self._args[k] = ctypes.c_int64 * (nsyms + len(roots))

    def kernel_profile(self):
        """[(kernel, calls, total ms)] when compiled with NEURON_COMPILE_PROFILE=1 (zeros otherwise)."""
        if self._prof_ns is None:
            return []
        return [(n, int(self._prof_calls[i]), self._prof_ns[i] / 1e6) for i, n in enumerate(self.kernel_names)]

    # ---- symbols and concrete metadata ----------------------------------------------------------------
    def _syms(self, args):
        out = []
        for i, kind, d in self.ser.bindings:
            a = args[i]
            if kind == "int":
                out.append(int(a))
            elif kind == "size":
                out.append(a.size(d))
            elif kind == "stride":
                out.append(a.stride(d))
            else:
                out.append(a.storage_offset())
        return tuple(out)

    def _meta(self, vid, S):
        f = self._vfns.get(vid)
        if f is None:
            v = self.ser.values[vid]
            ex = self.ser.ex
            f = ([ex.py(s) for s in v.sizes], [ex.py(s) for s in v.strides], ex.py(v.off))
            self._vfns[vid] = f
        return tuple(g(S) for g in f[0]), tuple(g(S) for g in f[1]), f[2](S)

    def _sym(self, expr, S):
        f = self._symfns.get(expr)
        if f is None:
            f = self._symfns[expr] = self.ser.ex.py(expr)
        return f(S)

    def _layout(self, S):
        plan = self.plan
        ws_total, ws_off = 0, []
        if self.lib is not None and plan.ws:
            Sa = (ctypes.c_int64 * max(1, len(S) + len(self.scalars)))(*S)
            off = (ctypes.c_int64 * len(plan.ws))()
            ws_total = self.lib.nc_plan(Sa, off)
            ws_off = list(off)
        ext = {}
        for vid in plan.ext:
            size, stride, _ = self._meta(vid, S)
            v = self.ser.values[vid]
            ext.setdefault(self._ext_first[vid], []).append((vid, size, stride, v.dtype))
        lay = (ws_total, ws_off, ext)
        if len(self._layouts) > 64:
            self._layouts.clear()
        self._layouts[S] = lay
        return lay

    # ---- tensors ------------------------------------------------------------------------------------------
    def _tensor(self, vid, env, S):
        v = self.ser.values[vid]
        base = env[v.root]
        if vid == v.root:
            return base
        size, stride, off = self._meta(vid, S)
        return base.as_strided(size, stride, base.storage_offset() + off)

    def _fix(self, vid, t, S):
        """An eager op's output with the layout the graph was traced with (its meta strides)."""
        if not isinstance(t, torch.Tensor):
            return t
        v = self.ser.values[vid]
        if t.device != v.device or t.dtype != v.dtype:
            t = t.to(device=v.device, dtype=v.dtype)
        size, stride, _ = self._meta(vid, S)
        if tuple(t.shape) != size:
            if vid in self._read_roots:
                raise RuntimeError(f"neuron compile: eager op gave shape {tuple(t.shape)}, traced {size}")
            return t  # an output nobody reads (e.g. empty saved statistics)
        if any(n > 1 and a != b for n, a, b in zip(size, t.stride(), stride)):
            u = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
            u.copy_(t)
            t = u
        return t

    def _arg(self, a, env, S):
        if isinstance(a, torch.fx.Node):
            m = a.meta.get("val")
            if isinstance(m, torch.SymInt):
                return self._sym(ser_mod.to_expr(m), S)
            x = self.ser.fx_value.get(a)
            if isinstance(x, int):
                return self._tensor(x, env, S)
            if a.op == "get_attr":
                return getattr(self.gm, a.target)
            raise RuntimeError(f"neuron compile: no runtime value for {a}")
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(b, env, S) for b in a)
        if isinstance(a, dict):
            return {k: self._arg(b, env, S) for k, b in a.items()}
        return a

    def _eager(self, nid, env, S):
        info = self.ser.nodes[nid]
        node = info.fx
        args = self._arg(node.args, env, S)
        kwargs = self._arg(node.kwargs, env, S)
        out = node.target(*args, **kwargs)
        res = list(out) if isinstance(out, (tuple, list)) else [out]
        for vid, r in zip(info.outs, res):
            if vid is not None:
                env[vid] = self._fix(vid, r, S)

    # ---- call -----------------------------------------------------------------------------------------------
    def __call__(self, *args):
        boxed = len(args) == 1 and isinstance(args[0], list)
        if boxed:
            args = args[0]  # boxed call: we own the list and clear it, so inputs die after their last use
        ser, plan = self.ser, self.plan
        S = self._syms(args)
        lay = self._layouts.get(S) or self._layout(S)
        ws_total, ws_off, ext = lay
        dev = torch.device("neuron", self.device)
        env = {}
        for i, (kind, x) in enumerate(ser.inputs):
            if kind == "t":
                env[x] = args[i]
        if boxed:
            args.clear()
        for vid, t in self.attr_tensors:
            env[vid] = t
        ws = torch.empty(ws_total, dtype=torch.uint8, device=dev) if ws_total else None
        wsp = ws.data_ptr() if ws is not None else 0
        q = None
        rt = runtime()
        free_at = self._free_at
        base = None
        for i, (kind, k) in enumerate(plan.steps):
            if base is None and i >= self._n_hoist:  # the CPU scalars, before any CPU mutation
                base = list(S) + [_f64_bits(float(env[v])) for v in self.scalars]
            for vid, size, stride, dtype in ext.get(i, ()):
                env[vid] = torch.empty_strided(size, stride, dtype=dtype, device=dev)
            if kind == "K":
                if q is None:
                    q = rt.queue(self.device)
                vals = list(base)
                for r in plan.segs[k]:
                    t = env.get(r)
                    vals.append(t.data_ptr() if t is not None else wsp + ws_off[self.ws_index[r]])
                arr = self._args[k](*vals)  # per call: the launch copies it, threads may share the program
                rc = rt.lib.nrt_queue_launch(q, self._fn[k], arr, ctypes.sizeof(arr), self._names[k])
                if rc != 0:
                    msg = (rt.lib.nrt_last_error() or b"").decode()
                    raise RuntimeError(f"neuron: compiled graph {self.name} segment {k} failed: {msg}")
            else:
                self._eager(k, env, S)
            for r in free_at.get(i, ()):
                env.pop(r, None)  # queue-ordered reuse makes freeing after an async launch safe
        self.calls += 1
        out = []
        for kind, x in ser.outputs:
            if kind == "t":
                out.append(self._tensor(x, env, S))
            elif kind == "s":
                out.append(self._sym(x, S))
            else:
                out.append(x)
        del ws
        return out


def _f64_bits(x):
    return struct.unpack("<q", struct.pack("<d", x))[0]


class EagerProgram:
    """A graph the compiler could not take: its ATen ops run one by one (with the traced layouts)."""

    _boxed_call = True

    def __init__(self, gm, name, reason):
        self.gm, self.name, self.reason = gm, name, reason
        self._boxed_call = True
        self.calls = 0
        self.kernels_per_call = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        self.launches_per_call = self.kernels_per_call
        gm_ = gm

        class _Interp(torch.fx.Interpreter):
            def run_node(self, n):
                r = super().run_node(n)
                m = n.meta.get("val")
                if isinstance(r, torch.Tensor) and isinstance(m, torch.Tensor) and all(
                        type(x) is int for x in m.stride()):  # symbolic strides: nothing to compare
                    try:
                        size, stride = tuple(r.shape), r.stride()
                        want = tuple(m.stride())
                        if any(a > 1 and b != c for a, b, c in zip(size, stride, want)):
                            u = torch.empty_strided(size, want, dtype=r.dtype, device=r.device)
                            u.copy_(r)
                            r = u
                    except torch.OutOfMemoryError:
                        raise  # never hand on a result that could not be laid out
                    except (TypeError, ValueError, RuntimeError):
                        pass
                return r
        self._interp = _Interp(gm_)

    def __call__(self, *args):
        if len(args) == 1 and isinstance(args[0], list):
            args = args[0]
        self.calls += 1
        out = self._interp.run(*args)
        return list(out) if isinstance(out, (tuple, list)) else [out]
