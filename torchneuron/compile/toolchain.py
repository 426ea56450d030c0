"""The compiler toolchain: the graph compiler (csrc/compiler, built by make into the extension
torchneuron._C, called through ctypes), running the C compiler on generated programs, and the program
cache (our "NEFF cache").

Cache layout under NEURON_CACHE_DIR (default ~/.cache/torchneuron):

    programs/<k[:2]>/<key>/program.so       a compiled program
    programs/<k[:2]>/<key>/entry.json       the key, sha256 and size of program.so: written last.  An
                                            entry without it (a killed compile), recording another key
                                            (another program's files), with a mismatching .so (corrupted)
                                            or with a .so shorter than its ELF headers say (truncated, even
                                            if entry.json was rewritten to match) is a miss: rebuilt.
                                            All of it is checked before dlopen, which maps a
                                            private copy (unlinked once loaded), never the cache file.
    programs/<k[:2]>/<key>/program.c, graph.ir, plan.txt, fusion.log, cc.log
                                            kept with NEURON_COMPILE_DEBUG=1 (program.c always when
                                            the C compiler fails)
    programs/<k[:2]>/<key>.lock             flock: concurrent processes compile a program once
    kernels/<k[:2]>/<key>/...               the same for user C kernels (torchneuron.kernel)

The key is a sha256 over the C source (with its prelude), the C compiler's resolved path and version
line, the flags, the ISA (CPU model and flags), our version and the graph compiler's version.
Writes are atomic (a temporary file, then rename).
"""
import ctypes
import errno
import fcntl
import functools
import hashlib
import json
import logging
import os
import shlex
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import warnings

log = logging.getLogger("torchneuron.compile")

# -ffp-contract=off: no fused multiply-adds the eager kernels do not use either (pointwise ops share
# their formulas with them bit for bit, csrc/kernels/pointwise_scalar.inc)
CFLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-fopenmp-simd", "-fno-math-errno", "-ffp-contract=off"]
if os.environ.get("NEURON_COMPILE_SCALAR_LIBM", "0") not in ("", "0"):
    # the scalar libm, as the eager scalar kernels call it, instead of libmvec's vector variants
    # (a few ulp apart): compiled pointwise ops then equal eager NEURON_KERNELS=portable bit for bit
    CFLAGS.append("-DNC_SCALAR_LIBM")
LIBS = ["-lmvec", "-lm"]
_lock = threading.Lock()
_warned = set()


class CompileError(RuntimeError):
    """The C compiler failed on a generated program."""


def cache_dir():
    d = os.environ.get("NEURON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "torchneuron")
    return os.path.abspath(d)


def debug_enabled():
    return os.environ.get("NEURON_COMPILE_DEBUG", "0") not in ("", "0")


def c_compiler():
    """The C compiler for generated programs: NEURON_CC, else CC, else cc (split like a shell)."""
    return shlex.split(os.environ.get("NEURON_CC") or os.environ.get("CC") or "cc") or ["cc"]


@functools.lru_cache(maxsize=None)
def _compiler_identity(cmd):
    """(resolved path, version line) of a compiler command."""
    exe = cmd[0]
    path = shutil.which(exe) or exe
    try:
        path = os.path.realpath(path)
        out = subprocess.run(list(cmd) + ["--version"], capture_output=True, text=True, timeout=30)
        version = (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else f"exit {out.returncode}"
    except (OSError, subprocess.SubprocessError) as e:
        version = f"unavailable ({e.__class__.__name__})"
    return path, version


@functools.lru_cache(maxsize=None)
def isa():
    model, flags = "", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not model and line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif not flags and line.startswith("flags"):
                    flags = line.split(":", 1)[1].strip()
                if model and flags:
                    break
    except OSError:
        pass
    import platform
    return f"{platform.machine()}|{model}|{hashlib.sha256(flags.encode()).hexdigest()[:16]}"


def _version():
    from .. import __version__
    return __version__


# ---- files -----------------------------------------------------------------------------------------------

def _write_atomic(path, data):
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class FileLock:
    """An exclusive flock on `path`, waiting up to `timeout` seconds (NEURON_COMPILE_LOCK_TIMEOUT,
    default 600).  The kernel drops it when its holder dies (kill -9 included)."""

    def __init__(self, path, timeout=None):
        self.path = path
        self.timeout = float(os.environ.get("NEURON_COMPILE_LOCK_TIMEOUT", "600")) if timeout is None else timeout
        self.fd = None

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() > deadline:
                os.close(self.fd)
                self.fd = None
                raise TimeoutError(f"neuron compile: timed out after {self.timeout:.0f} s waiting for {self.path} "
                                   "(another process is compiling the same program)")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def __exit__(self, *exc):
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
        return False


@functools.lru_cache(maxsize=None)
def compiler_works(cmd):
    """True if the C compiler command `cmd` (a tuple) builds a trivial shared object with our flags: a
    program it then fails on is a defect of the generated code, not of the environment."""
    with tempfile.TemporaryDirectory(prefix="neuron-cc-probe-") as d:
        src, out = os.path.join(d, "probe.c"), os.path.join(d, "probe.so")
        with open(src, "w") as f:
            f.write("#include <math.h>\nint nc_probe(double x) { return (int)sqrt(x); }\n")
        try:
            p = subprocess.run(list(cmd) + CFLAGS + ["-o", out, src] + LIBS, capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return False
        return p.returncode == 0 and os.path.exists(out)


def _run_cc(cmd, src, out, what):
    """Compile src into out (atomically); raise CompileError naming the compiler and the source."""
    tmp = f"{out}.tmp-{os.getpid()}-{threading.get_ident()}"
    argv = list(cmd) + CFLAGS + ["-o", tmp, src] + LIBS
    try:
        p = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        raise CompileError(f"neuron compile: cannot run the C compiler '{shlex.join(cmd)}' ({e.strerror}) for {what}; "
                           f"the source is kept at {src}") from None
    if p.returncode != 0 or not os.path.exists(tmp):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        tail = (p.stderr or p.stdout or "").strip()[-4000:]
        raise CompileError(f"neuron compile: the C compiler '{shlex.join(cmd)}' failed (exit {p.returncode}) for {what}; "
                           f"the source is kept at {src}" + (f"\n{tail}" if tail else ""))
    os.replace(tmp, out)
    return p.stderr


# ---- the graph compiler library ------------------------------------------------------------------------

class _NC:
    """The graph compiler's C API (nc.h), exported by the extension."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        lib.nc_compile.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.nc_compile.restype = ctypes.c_int
        for f in ("nc_result_source", "nc_result_plan", "nc_result_log", "nc_result_error"):
            getattr(lib, f).argtypes = [ctypes.c_void_p]
            getattr(lib, f).restype = ctypes.c_char_p
        lib.nc_result_free.argtypes = [ctypes.c_void_p]
        lib.nc_result_free.restype = None
        lib.nc_version.restype = ctypes.c_char_p
        lib.nc_prelude.restype = ctypes.c_char_p
        lib.nc_rt_table.restype = ctypes.c_void_p
        self.lib = lib
        self.version = lib.nc_version().decode()

    def compile(self, ir):
        """(status, source, plan, log, error) for an IR text."""
        r = ctypes.c_void_p()
        st = self.lib.nc_compile(ir.encode(), ctypes.byref(r))
        try:
            get = lambda f: (getattr(self.lib, f)(r) or b"").decode()
            return st, get("nc_result_source"), get("nc_result_plan"), get("nc_result_log"), get("nc_result_error")
        finally:
            self.lib.nc_result_free(r)

    def rt_table(self):
        """The address of the runtime table (nc_rt_t) programs are initialized with."""
        return self.lib.nc_rt_table()


@functools.lru_cache(maxsize=None)
def graph_compiler():
    """The graph compiler, linked into the extension by make (csrc/compiler)."""
    from .. import _C
    return _NC(_C.__file__)


@functools.lru_cache(maxsize=None)
def prelude():
    """nc_program.h with its local includes pasted in (embedded at build time), so generated sources
    compile on their own."""
    return graph_compiler().lib.nc_prelude().decode()


# ---- programs -------------------------------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.reset()

    def reset(self):
        self.graphs_compiled = 0
        self.memory_hits = 0
        self.disk_hits = 0
        self.misses = 0
        self.compile_seconds = 0.0
        self.cc_seconds = 0.0
        self.rebuilt_corrupt = 0


stats = Stats()
_loaded = {}   # key -> CDLL
_copies = 0    # private copies loaded (their temporary names are unique in the process)


def program_key(source):
    cmd = tuple(c_compiler())
    path, version = _compiler_identity(cmd)
    h = hashlib.sha256()
    for part in (source, path, version, " ".join(cmd[1:]), " ".join(CFLAGS + LIBS), isa(), _version(),
                 graph_compiler().version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _entry_dir(key, kind="programs"):
    return os.path.join(cache_dir(), kind, key[:2], key)


def _elf_complete(path, size):
    """True if the ELF file at path holds every byte its headers point at (program headers, loadable
    segments, section headers).  A truncated shared object passes a hash recorded after the truncation
    but would fault (SIGBUS) when dlopen maps the missing pages; this check runs before every load."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return False  # a 64-bit little-endian ELF is what cc builds here
            phoff, shoff = struct.unpack_from("<QQ", head, 32)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 54)
            if phnum == 0 or phentsize < 56 or phoff + phnum * phentsize > size:
                return False
            if shnum and (shentsize < 64 or shoff + shnum * shentsize > size):
                return False
            f.seek(phoff)
            ph = f.read(phnum * phentsize)
            if len(ph) != phnum * phentsize:
                return False
            for i in range(phnum):
                p_type, _flags, p_offset, _va, _pa, p_filesz = struct.unpack_from("<IIQQQQ", ph, i * phentsize)
                if p_type == 1 and p_offset + p_filesz > size:  # PT_LOAD past the end of the file
                    return False
        return True
    except (OSError, struct.error):
        return False


def _valid(d, key=None):
    """True if the entry in d can be loaded (see _entry_problem)."""
    return _entry_problem(d, key) is None


def _entry_problem(d, key=None):
    """Why the entry in d cannot be loaded, or None if it is complete: entry.json names this key (the
    directory's name: not another program's files), program.so has the recorded size and sha256, and
    it is a complete ELF file (checked before dlopen maps it)."""
    so, meta = os.path.join(d, "program.so"), os.path.join(d, "entry.json")
    key = os.path.basename(os.path.normpath(d)) if key is None else key
    try:
        with open(meta) as f:
            m = json.load(f)
        if not isinstance(m, dict) or m.get("key") != key:
            return "entry.json records another key"
        size = os.path.getsize(so)
        if size != m["size"] or _sha256_file(so) != m["sha256"]:
            return "program.so does not match entry.json"
        if not _elf_complete(so, size):
            return "program.so is not a complete shared object"
        return None
    except FileNotFoundError:
        return "incomplete entry"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable entry ({e.__class__.__name__})"


def _corrupt(key, d, why):
    if key not in _warned:
        _warned.add(key)
        msg = f"torchneuron: cache entry {d} is corrupted ({why}); rebuilding it"
        warnings.warn(msg)
        log.warning(msg)
    stats.rebuilt_corrupt += 1
    for n in ("entry.json", "program.so"):
        try:
            os.unlink(os.path.join(d, n))
        except OSError:
            pass


def load_program(source, debug_files=None):
    """A loaded program (ctypes.CDLL) for the generated C body `source`, from memory, from disk or
    freshly compiled.  debug_files: {name: text} kept beside the entry with NEURON_COMPILE_DEBUG=1."""
    full = prelude() + "\n" + source.replace('#include "nc_program.h"', "")
    return load_source(full, debug_files=debug_files)


def load_source(full, kind="programs", debug_files=None, what=None):
    """(key, ctypes.CDLL) for the complete C source `full`, from memory, from disk or freshly compiled,
    in the cache directory `kind` (programs/: graphs, kernels/: user kernels, torchneuron.kernel).
    what: how a compile error names the source (default "program <key>")."""
    key = program_key(full)
    with _lock:
        lib = _loaded.get(key)
    if lib is not None:
        stats.memory_hits += 1
        return key, lib
    d = _entry_dir(key, kind)
    so = os.path.join(d, "program.so")
    if debug_enabled():
        _keep_debug(d, full, debug_files)
    lib = None
    if os.path.exists(os.path.join(d, "entry.json")):
        lib = _try_load(key, d, so)
    if lib is None:
        with FileLock(d + ".lock"):
            if os.path.exists(os.path.join(d, "entry.json")):
                lib = _try_load(key, d, so)
            if lib is None:
                _compile_entry(key, d, so, full, debug_files, what or f"program {key[:16]}")
                lib = _dlopen_copy(so, d)
                stats.misses += 1
            else:
                stats.disk_hits += 1
    else:
        stats.disk_hits += 1
    with _lock:
        _loaded[key] = lib
    return key, lib


def _try_load(key, d, so):
    why = _entry_problem(d, key)
    if why is not None:
        _corrupt(key, d, why)
        return None
    try:
        return _dlopen_copy(so, d)
    except OSError as e:
        _corrupt(key, d, f"cannot load: {e}")
        return None


def _dlopen_copy(so, d):
    """dlopen a private copy of the cache file so (the bytes entry.json's sha256 vouches for, written to
    a temporary file that is unlinked once loaded), never the file itself: a loaded program's pages stay
    backed by the file it was mapped from, so a cache file truncated or overwritten in place afterwards
    (another process, a user, a full disk) would fault (SIGBUS) code this process already runs.  Each
    copy has a name of its own: dlopen returns an already-loaded library of the same name (a reused
    /proc/self/fd/N of a memfd would give the previous program)."""
    with open(so, "rb") as f:
        data = f.read()
    try:
        with open(os.path.join(d, "entry.json")) as f:
            want = json.load(f)["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        want = None
    if want is None or hashlib.sha256(data).hexdigest() != want:
        raise OSError(errno.EIO, "program.so changed while it was being loaded")
    global _copies
    with _lock:
        _copies += 1
        n = _copies
    try:
        fd, path = tempfile.mkstemp(prefix=f"torchneuron-{os.getpid()}-{n}-{os.path.basename(d)[:16]}-", suffix=".so")
    except OSError:
        return ctypes.CDLL(so)  # no writable temporary directory: the cache file itself
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            return ctypes.CDLL(path)
        except OSError:
            return ctypes.CDLL(so)  # a temporary directory mounted noexec: the cache file itself
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _compile_entry(key, d, so, full, debug_files, what):
    os.makedirs(d, exist_ok=True)
    src = os.path.join(d, "program.c")
    _write_atomic(src, full)
    t0 = time.perf_counter()
    try:
        err = _run_cc(c_compiler(), src, so, what)
    finally:
        stats.cc_seconds += time.perf_counter() - t0
    meta = {"sha256": _sha256_file(so), "size": os.path.getsize(so), "key": key, "created": time.time()}
    _write_atomic(os.path.join(d, "entry.json"), json.dumps(meta))
    if not debug_enabled():
        try:
            os.unlink(src)
        except OSError:
            pass
    if err and err.strip():
        _write_atomic(os.path.join(d, "cc.log"), err)


def _keep_debug(d, full, files):
    try:
        _write_atomic(os.path.join(d, "program.c"), full)
        for name, text in (files or {}).items():
            _write_atomic(os.path.join(d, name), text)
    except OSError as e:
        log.warning("torchneuron: could not keep debug files in %s: %s", d, e)
