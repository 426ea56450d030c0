"""torchneuron.kernel: a C kernel as a PyTorch op (the analog of NKI's @nki_op / Triton's triton_op).

    SRC = r'''
    #include <nk_custom.h>
    NK_KERNEL(softplus) {                      /* t[0] = x, t[1] = the output; s[0] = beta */
        const float *x = t[0].data; float *y = t[1].data; float b = (float)s[0].f;
        for (int64_t i = tile->begin; i < tile->end; i++) y[i] = log1pf(expf(b * x[i])) / b;
        return 0;
    }'''

    @torchneuron.kernel.op("mylib::softplus", src=SRC, grid="numel(x)", out_like=("x",))
    def softplus(x: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
        return torch.empty_like(x)             # allocates the outputs; also the fake (meta) impl

The decorated function's signature is the op's schema (torch.library.infer_schema, with mutates_args);
its body allocates the outputs (it runs in eager unless out_like lets the glue do it, and it is the
fake implementation torch.compile traces with).  The C source is compiled once with the compile
path's toolchain (same compiler, flags and content-addressed, locked cache in NEURON_CACHE_DIR,
under kernels/) and the op launches asynchronously on the current neuron stream.  See
docs/custom-kernels.md; the ABI is include/nk_custom.h.
"""
import inspect
import os
import re

import torch

from ..compile import toolchain

__all__ = ["op", "compile", "Kernel", "KernelOp", "header_path"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]nk_custom\.h[>"][^\n]*$', re.M)
_GRID = re.compile(r"^\s*(numel|rows|size)\(\s*([A-Za-z_]\w*)\s*(?:,\s*(-?\d+)\s*)?\)\s*$")
_SCALAR_TYPES = ("float", "int", "bool", "SymInt")
_libs = {}      # ns -> torch.library.Library (kept alive: dropping it removes the definitions)
_ops = {}       # qualname -> KernelOp


def header_path():
    """The ABI header user kernels are written against (also pasted into every kernel's source)."""
    return os.path.join(_HERE, "include", "nk_custom.h")


def _header():
    with open(header_path()) as f:
        return f.read()


class Kernel:
    """A compiled C kernel: `entry` of the shared object built from `source` (cached)."""

    def __init__(self, source, entry, origin, what):
        self.entry, self.origin = entry, origin
        full = _header() + f'\n#line 1 "{origin}"\n' + _INCLUDE.sub("", source)
        try:
            self.key, self.lib = toolchain.load_source(full, kind="kernels", what=what)
        except toolchain.CompileError as e:
            raise toolchain.CompileError(f"torchneuron.kernel: {what} does not compile ({origin}):\n{e}") from None
        self.path = os.path.join(toolchain._entry_dir(self.key, "kernels"), "program.so")
        try:
            fn = getattr(self.lib, entry)
        except AttributeError:
            raise RuntimeError(f"torchneuron.kernel: {what}: {origin} defines no function '{entry}' "
                               f"(write it as NK_KERNEL({entry}) {{ ... }}); built at {self.path}") from None
        import ctypes
        self.fn = ctypes.cast(fn, ctypes.c_void_p).value


def compile(src=None, *, file=None, entry, what=None):
    """The Kernel `entry` of C source `src` (a string) or `file` (a path), compiled and cached."""
    if (src is None) == (file is None):
        raise ValueError("torchneuron.kernel: give the kernel source as src= (a string) or file= (a path)")
    if file is not None:
        origin = os.path.abspath(os.fspath(file))
        with open(origin) as f:
            src = f.read()
    else:
        origin = f"<{what or entry}>"
    return Kernel(src, entry, origin, what or f"kernel {entry}")


def _parse_grid(grid, names, qualname):
    """(kind, arg index, value) for the glue, or None for a callable grid."""
    if callable(grid):
        return None
    if isinstance(grid, bool) or not isinstance(grid, (int, str)):
        raise TypeError(f"torchneuron.kernel: {qualname}: grid must be an int, 'numel(x)', 'rows(x)', "
                        f"'size(x, d)' or a callable, got {grid!r}")
    if isinstance(grid, int):
        return 0, -1, grid
    m = _GRID.match(grid)
    if not m or m.group(2) not in names or (m.group(1) == "size") != (m.group(3) is not None):
        raise ValueError(f"torchneuron.kernel: {qualname}: cannot read grid {grid!r}: expected 'numel(x)', "
                         f"'rows(x)' or 'size(x, d)' of a tensor argument x of {names}")
    return {"numel": 1, "rows": 2, "size": 3}[m.group(1)], names.index(m.group(2)), int(m.group(3) or 0)


class KernelOp:
    """A registered custom op backed by a C kernel; calling it calls torch.ops.<ns>.<name>."""

    def __init__(self, qualname, fn, kernel, grid, tile, mutates_args, out_like, fake, contiguous):
        self.qualname, self.kernel, self._fn = qualname, kernel, fn
        ns, name = qualname.split("::")
        try:
            schema = torch.library.infer_schema(fn, mutates_args=mutates_args)
        except ValueError as e:
            raise ValueError(f"torchneuron.kernel: {qualname}: cannot make a schema from the signature of "
                             f"{fn.__name__}: {e}") from None
        self.schema = f"{qualname}{schema}"
        parsed = torch._C.parse_schema(self.schema)  # checked before anything is registered
        args = parsed.arguments
        self._names = [a.name for a in args]
        self._kinds = []
        for a in args:
            t = str(a.type)
            if t in ("Tensor", "Tensor?"):
                self._kinds.append("t")
            elif t in _SCALAR_TYPES:
                self._kinds.append("s")
            else:
                raise ValueError(f"torchneuron.kernel: {qualname}: argument '{a.name}: {t}' has a type C kernels "
                                 "do not take (Tensor, Tensor?, float, int, bool)")
        self._written = [bool(a.alias_info and a.alias_info.is_write) for a in args]
        self._nret = len(parsed.returns)
        if sum(k == "t" for k in self._kinds) + self._nret > 10:
            raise ValueError(f"torchneuron.kernel: {qualname}: at most 10 tensors (arguments and outputs)")
        self._grid = grid
        self._tile = int(tile or 0)
        self._contiguous = contiguous
        spec = _parse_grid(grid, self._names, qualname)
        like = None
        if out_like is not None:
            out_like = (out_like,) if isinstance(out_like, str) else tuple(out_like)
            like = tuple(_parse_like(n, self._names, args) for n in out_like) if len(out_like) == self._nret else None
            if like is None or None in like:
                raise ValueError(f"torchneuron.kernel: {qualname}: out_like must name, per output ({self._nret}), "
                                 f"a (non-optional) tensor argument x as 'x' or 'x[:-1]', got {out_like}")
        lib = _libs.get(ns) or _libs.setdefault(ns, torch.library.Library(ns, "FRAGMENT"))
        lib.define(name + schema)
        self.op = getattr(getattr(torch.ops, ns), name).default
        self._name = _C()._kernel_name(qualname)
        self.fast = spec is not None and (self._nret == 0 or out_like is not None)
        torch.library.register_fake(qualname, fake or fn, lib=lib)
        if self.fast:   # the glue allocates the outputs and launches: no Python per call
            _C()._kernel_register(qualname, kernel.fn, like or (), spec[0], spec[1], spec[2], self._tile, contiguous)
        else:
            self._sig = inspect.signature(fn)
            lib.impl(name, self._eager, "PrivateUse1")

    def _eager(self, *args, **kwargs):
        """The general path: the body allocates the outputs, then one launch."""
        b = self._sig.bind(*args, **kwargs)
        b.apply_defaults()
        vals = list(b.arguments.values())
        outs = self._fn(*args, **kwargs)
        out_list = [] if outs is None else list(outs) if isinstance(outs, (tuple, list)) else [outs]
        tensors, scalars, mask = [], [], 0
        for v, k, w in zip(vals, self._kinds, self._written):
            if k == "t":
                if v is not None and self._contiguous and not w:
                    v = v.contiguous()
                if w:
                    mask |= 1 << len(tensors)
                tensors.append(v)
            else:
                scalars.append(v)
        for o in out_list:
            mask |= 1 << len(tensors)
            tensors.append(o)
        grid = self._grid(*args, **kwargs) if callable(self._grid) else _eval_grid(self._grid, self._names, vals)
        _C()._kernel_launch(self.kernel.fn, self._name, tensors, mask, scalars, int(grid), self._tile)
        return outs

    def __call__(self, *args, **kwargs):
        return self.op(*args, **kwargs)

    def register_autograd(self, backward, *, setup_context=None):
        """torch.library.register_autograd for this op (the backward may call other kernel ops)."""
        torch.library.register_autograd(self.qualname, backward, setup_context=setup_context)
        return self

    def register_fake(self, fn):
        torch.library.register_fake(self.qualname, fn, lib=_libs[self.qualname.split("::")[0]])
        return fn

    def __repr__(self):
        return f"<torchneuron.kernel op {self.schema} ({'glue' if self.fast else 'python'} launch)>"


def _parse_like(spec, names, args):
    """2 * the index of the tensor argument `spec` names ("x", or "x[:-1]": without its last dim) + 1 for
    the latter; None if it names none."""
    m = re.match(r"^\s*([A-Za-z_]\w*)\s*(\[\s*:\s*-1\s*\])?\s*$", spec) if isinstance(spec, str) else None
    if not m or m.group(1) not in names or str(args[names.index(m.group(1))].type) != "Tensor":
        return None
    return 2 * names.index(m.group(1)) + (1 if m.group(2) else 0)


def _eval_grid(grid, names, vals):
    kind, i, v = _parse_grid(grid, names, "")
    if kind == 0:
        return v
    t = vals[i]
    if kind == 1:
        return t.numel()
    if kind == 2:
        return 1 if t.dim() == 0 else (t.numel() // t.size(-1) if t.size(-1) else 0)
    return t.size(v)


def _C():
    from .. import _C as c
    return c


def op(qualname, src=None, *, file=None, entry=None, grid, tile=None, mutates_args=(), out_like=None,
       fake=None, contiguous=True):
    """Register the decorated function as the custom op `qualname` ("ns::name") run by a C kernel.

    src / file   the C source (a string, or a path) written against nk_custom.h (NK_KERNEL)
    entry        the kernel function's name (default: the op's name)
    grid         work items: an int, "numel(x)", "rows(x)" (numel / size(-1)), "size(x, d)" of a tensor
                 argument x, or a callable of the op's arguments
    tile         work items per tile (default: about 4 tiles per pool thread); fix it when the kernel's
                 result must not depend on the thread count
    mutates_args the arguments the kernel writes (as torch.library.custom_op)
    out_like     per output, the tensor argument x it has the dtype and shape of ("x"), or the shape
                 without the last dim ("x[:-1]": per-row statistics), contiguous: the glue then allocates
                 outputs and launches without calling Python (the fast eager path)
    fake         the fake (meta) implementation; default: the decorated function
    contiguous   pass read-only tensor arguments contiguous (default True); False passes them as they
                 are (the descriptors carry strides)
    """
    if not isinstance(qualname, str) or qualname.count("::") != 1 or not all(qualname.split("::")):
        raise ValueError(f"torchneuron.kernel: expected an op name 'namespace::name', got {qualname!r}")
    if qualname in _ops:
        raise RuntimeError(f"torchneuron.kernel: {qualname} is already defined in this process")
    name = qualname.split("::")[1]

    def deco(fn):
        k = compile(src, file=file, entry=entry or name, what=f"kernel {qualname}")
        kop = KernelOp(qualname, fn, k, grid, tile, mutates_args, out_like, fake, contiguous)
        _ops[qualname] = kop
        return kop
    return deco
