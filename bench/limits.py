"""Machine limits: small C microbenchmarks (bench/limits.c) compiled at bench time with cc -O3 -march=native.

f32 FMA peak (one core, all cores), bf16 dot-product peak (AVX512-BF16, all cores), the AMX tile peaks
(TDPBF16PS, TDPBSSD; one core, all cores) where the CPU and the OS have AMX, and STREAM-triad
bandwidth and read-only (sum) bandwidth (DRAM-sized arrays and cache-resident arrays, all cores).  Every
measurement is the median of several short repetitions (the ops are timed as medians of their rounds; a
best-of figure on this VM is a spike: single 64 MiB read passes moved by up to 2x).  measure() is called
several times in a run (the full bench: at the start, after the memory-bound group and at the end) and
each limit is the median of its measurements: this VM's DRAM figures move by up to 2x within minutes (a
read figure of 108 GB/s next to 34-44 in the same run), and the best of them would hold the ops, timed as
medians, to a spike.
"""
import statistics
import os
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "limits.c")

# the keys used by workloads to name their limit
LIMIT_LABELS = {
    "fma": "f32 FMA peak, all cores",
    "bf16": "bf16 dot peak (vdpbf16ps), all cores",
    # the bf16 GEMMs' own limit: the AMX tile peak where the machine has AMX, else the vdpbf16ps peak
    "bf16_gemm": "bf16 GEMM peak (AMX TDPBF16PS where present, else vdpbf16ps), all cores",
    "int8": "int8 GEMM peak (AMX TDPBSSD), all cores, GOP/s",
    "dram": "triad bandwidth, 3 x 64 MiB (DRAM)",
    "cache": "triad bandwidth, 3 x 1 MiB (cache-resident)",
    "dram_read": "read bandwidth, 64 MiB (DRAM)",
    "dram_read_big": "read bandwidth, 224 MiB (DRAM, 7x the L3)",
    "cache_read": "read bandwidth, 1 MiB (cache-resident)",
}


def ncores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class Limits:
    def __init__(self, quick=False):
        self.quick = quick
        self.exe = None
        self.error = None
        self.raw = {}      # measured name -> (median value, variant)
        self.samples = {}  # measured name -> every measurement
        self.notes = []
        self._tmp = None

    def compile(self):
        cc = os.environ.get("CC", "cc")
        if shutil.which(cc) is None:
            self.error = f"no C compiler ({cc})"
            return False
        self._tmp = tempfile.mkdtemp(prefix="bench-limits-")
        self.exe = os.path.join(self._tmp, "limits")
        cmd = [cc, "-O3", "-march=native", "-pthread", "-o", self.exe, SRC]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            self.error = f"compile failed: {' '.join(cmd)}: {p.stderr.strip()[:300]}"
            self.exe = None
            return False
        return True

    def cleanup(self):
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _run(self, *args):
        p = subprocess.run([self.exe, *map(str, args)], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.strip())
        val, variant = p.stdout.split()[:2]
        return float(val), variant

    def _keep(self, name, res):
        self.samples.setdefault(name, []).append(res[0])
        self.raw[name] = (statistics.median(self.samples[name]), res[1])

    def spread(self, name):
        """'min-max over n' of a limit's measurements, or '' for a single one."""
        v = self.samples.get(name) or []
        return f"median of {len(v)}: {min(v):.1f}-{max(v):.1f}" if len(v) > 1 else ""

    def measure(self):
        """Run (or re-run) every microbenchmark; each limit is the median of its measurements."""
        if self.exe is None and not self.compile():
            return
        n = ncores()
        sec = 0.25 if self.quick else 0.5
        try:
            self._keep("fma_1", self._run("fma", 1, sec))
            self._keep("fma_all", self._run("fma", n, sec))
            self._keep("bf16_all", self._run("bf16", n, sec))
            for mode in ("amx_bf16", "amx_int8"):
                one = self._run(mode, 1, sec)
                if one[0] > 0:
                    self._keep(mode + "_1", one)
                    self._keep(mode + "_all", self._run(mode, n, sec))
            self._keep("triad_dram_1", self._run("triad", 1, 16 << 20, 5 if self.quick else 10))
            self._keep("triad_dram_all", self._run("triad", n, 16 << 20, 5 if self.quick else 10))
            self._keep("triad_cache_all", self._run("triad", n, 256 << 10, 1000 if self.quick else 3000))
            self._keep("read_dram_all", self._run("read", n, 16 << 20, 5 if self.quick else 10))
            # a footprint far beyond the L3: rereading 64 MiB finds part of it in the 32 MiB L3, so the
            # 224 MiB GEMV is held to the read figure of its own size
            self._keep("read_dram_big_all", self._run("read", n, 56 << 20, 3 if self.quick else 6))
            self._keep("read_cache_all", self._run("read", n, 256 << 10, 1000 if self.quick else 3000))
        except Exception as e:  # noqa: BLE001
            self.error = f"microbenchmark failed: {e}"

    # ---- the limits used for "share of limit"
    def _scaled(self, name):
        """All-core figure of a compute peak: the measured one, or n x one-core where the all-core run did
        not scale (on a shared machine it is often short of n x one-core)."""
        n = ncores()
        one, allc = self._v(name + "_1"), self._v(name + "_all")
        if one is None and allc is None:
            return None
        if allc is not None and (one is None or allc >= 0.9 * one * n):
            return allc
        return one * n

    def value(self, key):
        """GFLOP/s or GB/s for a limit key of LIMIT_LABELS, or None."""
        if key == "fma":
            return self._scaled("fma")
        if key == "bf16_gemm":
            return self._scaled("amx_bf16") or self.value("bf16")
        if key == "int8":
            return self._scaled("amx_int8")
        if key == "bf16":
            v = self._v("bf16_all")
            return v if v else None
        if key == "dram":
            return self._v("triad_dram_all")
        if key == "cache":
            return self._v("triad_cache_all")
        if key == "dram_read":
            return self._v("read_dram_all")
        if key == "dram_read_big":
            return self._v("read_dram_big_all")
        if key == "cache_read":
            return self._v("read_cache_all")
        return None

    def _v(self, name):
        r = self.raw.get(name)
        return r[0] if r else None

    def rows(self):
        """(name, value string, note) rows for the report."""
        n = ncores()
        out = []

        def fmt(name, unit):
            r = self.raw.get(name)
            return ("-" if r is None else f"{r[0]:.1f} {unit}"), ("" if r is None else r[1])

        def note(name, text):
            sp = self.spread(name)
            return f"{text} ({sp})" if sp and text else text or sp

        v, var = fmt("fma_1", "GFLOP/s")
        out.append(("f32 FMA peak, 1 core", v, note("fma_1", var)))
        v, var = fmt("fma_all", "GFLOP/s")
        out.append((f"f32 FMA peak, {n} cores (pthreads)", v, note("fma_all", var)))
        fl = self.value("fma")
        if fl is not None:
            used = ("measured all-core" if fl == self._v("fma_all") else
                    f"{n} x 1-core: the all-core run did not scale (shared machine, or vCPUs sharing a core); "
                    "shares against it are lower bounds")
            out.append(("f32 limit used for GEMM shares", f"{fl:.1f} GFLOP/s", used))
        v, var = fmt("bf16_all", "GFLOP/s")
        out.append((f"bf16 dot peak, {n} cores", v, note("bf16_all", var)))
        for mode, what, unit in (("amx_bf16", "AMX bf16 tile peak (TDPBF16PS)", "GFLOP/s"),
                                 ("amx_int8", "AMX int8 tile peak (TDPBSSD)", "GOP/s")):
            if self.raw.get(mode + "_1") is None:
                continue
            v, var = fmt(mode + "_1", unit)
            out.append((f"{what}, 1 core", v, note(mode + "_1", var)))
            v, var = fmt(mode + "_all", unit)
            out.append((f"{what}, {n} cores", v, note(mode + "_all", var)))
            lim = self._scaled(mode)
            out.append((f"{what.split(' (')[0]} limit used for GEMM shares", f"{lim:.1f} {unit}",
                        "measured all-core" if lim == self._v(mode + "_all") else f"{n} x 1-core (the all-core run did not scale)"))
        v, var = fmt("triad_dram_1", "GB/s")
        out.append(("triad 3 x 64 MiB, 1 core", v, note("triad_dram_1", "DRAM; 12 bytes/element counted")))
        v, var = fmt("triad_dram_all", "GB/s")
        out.append((f"triad 3 x 64 MiB, {n} cores", v, note("triad_dram_all", "limit for 16M-element ops")))
        v, var = fmt("triad_cache_all", "GB/s")
        out.append((f"triad 3 x 1 MiB, {n} cores", v, note("triad_cache_all", "limit for 256K-element ops (cache-resident)")))
        v, var = fmt("read_dram_all", "GB/s")
        out.append((f"read (sum) 64 MiB, {n} cores", v, note("read_dram_all", "limit for 16M-element reductions and the 64 MiB GEMV")))
        v, var = fmt("read_dram_big_all", "GB/s")
        out.append((f"read (sum) 224 MiB, {n} cores", v, note("read_dram_big_all", "limit for the 224 MiB GEMV (rereading "
                    "64 MiB finds part of it in the L3)")))
        v, var = fmt("read_cache_all", "GB/s")
        out.append((f"read (sum) 1 MiB, {n} cores", v, note("read_cache_all", "limit for 256K-element reductions")))
        return out
