"""Timing harness: one workload on neuron and on PyTorch CPU eager, interleaved round by round.

For each device: setup(device) returns a step function; a few warmup calls, then the number of
iterations per round N is chosen so that a round takes about `target_s` (a round stops early, after
a whole chunk of calls, once it has run for 3 x target_s: the machine may be shared).  Then R rounds;
each round times N iterations per device (neuron and cpu alternating which goes first) with time.perf_counter
around a synchronized region: torch.neuron.synchronize() before starting the clock and after the last
iteration.  Results: the per-iteration median over rounds per device, and the per-round ratio
cpu_time / neuron_time (min and median; above 1 means neuron is faster).
"""
import gc
import os
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

DEVICES = ("neuron", "cpu")


def cpu_snapshot():
    """(busy seconds of the whole machine, CPU seconds of this process) for measuring other load."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        busy = (v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)) / hz
    except (OSError, ValueError, IndexError):
        return None
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system, time.perf_counter()


def other_load(a, b):
    """Share of all cores used by other processes between two cpu_snapshot()s (0..1), or None."""
    if a is None or b is None or b[2] - a[2] < 0.05:
        return None
    n = os.cpu_count() or 1
    return max(0.0, ((b[0] - a[0]) - (b[1] - a[1])) / ((b[2] - a[2]) * n))


def sync(dev):
    if dev == "neuron":
        torch.neuron.synchronize()


def _tracking():
    try:
        import torchneuron
        return torchneuron
    except Exception:  # noqa: BLE001
        return None


@dataclass
class Case:
    name: str
    setup: Callable[[str], Callable[[], object]]   # device -> step function (no arguments)
    flops: Optional[float] = None                   # per iteration
    nbytes: Optional[float] = None                  # per iteration (bytes the op must touch)
    limit: Optional[str] = None                     # key of limits.LIMIT_LABELS
    metric: Optional[str] = None                    # "flops" or "bytes" (default: flops if given)
    max_iters: int = 100000
    note: str = ""
    after: Optional[Callable[["Result"], None]] = None  # hook run after the rounds (extra info)


@dataclass
class Result:
    case: Case
    times: dict = field(default_factory=lambda: {d: [] for d in DEVICES})   # per-iteration s, per round
    iters: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    fallbacks: set = field(default_factory=set)
    extra: dict = field(default_factory=dict)        # free-form info filled by the workload
    ctx: dict = field(default_factory=dict)          # per-device objects returned by setup helpers

    def median(self, dev):
        t = self.times.get(dev) or []
        return statistics.median(t) if t else None

    def ratios(self):
        n, c = self.times["neuron"], self.times["cpu"]
        return [ci / ni for ni, ci in zip(n, c) if ni > 0]

    def ratio_min(self):
        r = self.ratios()
        return min(r) if r else None

    def ratio_median(self):
        r = self.ratios()
        return statistics.median(r) if r else None

    def rate(self, dev):
        """(value, unit) with GFLOP/s or GB/s, or None."""
        t = self.median(dev)
        if not t:
            return None
        metric = self.case.metric or ("flops" if self.case.flops else "bytes" if self.case.nbytes else None)
        if metric == "flops" and self.case.flops:
            return self.case.flops / t / 1e9, "GFLOP/s"
        if metric == "bytes" and self.case.nbytes:
            return self.case.nbytes / t / 1e9, "GB/s"
        return None


SETTLE_S = 0.02  # idle gap before every timed round (not timed)


def _timed(fn, n, dev):
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync(dev)
    return time.perf_counter() - t0


def _timed_round(fn, n, dev, deadline_s):
    """Like _timed, but stops early (whole chunks of calls) once deadline_s has passed, so that a round
    calibrated at a quiet moment cannot run for long on a busy machine.  Returns (seconds, calls)."""
    chunk = max(1, min(64, n // 8))
    sync(dev)
    t0 = time.perf_counter()
    done = 0
    while done < n:
        k = min(chunk, n - done)
        for _ in range(k):
            fn()
        done += k
        if time.perf_counter() - t0 > deadline_s:
            break
    sync(dev)
    return time.perf_counter() - t0, done


def _short_error(e):
    msg = f"{type(e).__name__}: {e}".strip().splitlines()
    return msg[0][:160] if msg else type(e).__name__


BUSY = 0.25   # other processes' share of all cores above which a case counts as measured on a busy machine


class Runner:
    def __init__(self, rounds=5, warmup=3, target_s=0.25, verbose=True, retry_busy=0, retry_max_s=10.0,
                 retry_budget_s=60.0):
        self.rounds = rounds
        self.warmup = warmup
        self.target_s = target_s
        self.verbose = verbose
        self.retry_busy = retry_busy      # re-runs of a case measured while others used >= BUSY of the CPUs
        self.retry_max_s = retry_max_s    # ... only for cases that took less than this
        self.retry_budget_s = retry_budget_s  # ... and at most this many seconds of re-runs in all

    def run(self, case: Case) -> Result:
        res = self._run(case)
        tries = 0
        while (tries < self.retry_busy and (res.extra.get("other_load") or 0) >= BUSY
               and res.extra.get("wall_s", 0) < min(self.retry_max_s, self.retry_budget_s)):
            tries += 1
            if self.verbose:
                print(f"    (busy machine: others used {100 * res.extra['other_load']:.0f}% of the CPUs; "
                      "measuring again)", flush=True)
            again = self._run(case)
            self.retry_budget_s -= again.extra.get("wall_s", 0)
            if (again.extra.get("other_load") or 0) < (res.extra.get("other_load") or 0):
                res = again
        if tries:
            res.extra["retries"] = tries
        return res

    def _calibrate(self, fn, dev, case):
        """Warm up and return iterations per round."""
        t1 = _timed(fn, 1, dev)                                   # first call: allocation, lazy init
        w = max(1, min(self.warmup, int(self.target_s / max(t1, 1e-9))))
        tw = _timed(fn, w, dev) / w
        if tw * 2 < self.target_s:                                # one more, closer to the real N
            n_try = max(1, min(case.max_iters, int(self.target_s / 4 / max(tw, 1e-9))))
            tw = _timed(fn, n_try, dev) / n_try
        return max(1, min(case.max_iters, int(round(self.target_s / max(tw, 1e-9)))))

    def _run(self, case: Case) -> Result:
        res = Result(case)
        tn = _tracking()
        if tn is not None:
            tn.clear_op_tracking()
        fns = {}
        t_start = time.perf_counter()
        for dev in DEVICES:
            try:
                fn = case.setup(dev)
                if isinstance(fn, tuple):            # (step function, context object)
                    fn, res.ctx[dev] = fn
                res.iters[dev] = self._calibrate(fn, dev, case)
                fns[dev] = fn
            except Exception as e:  # noqa: BLE001
                res.errors[dev] = _short_error(e)
                if self.verbose > 1:
                    traceback.print_exc()
                _recover(dev)
        gc.collect()
        snap = cpu_snapshot()
        gc_was = gc.isenabled()
        gc.disable()
        try:
            for r in range(self.rounds):
                order = DEVICES if r % 2 == 0 else DEVICES[::-1]
                for dev in order:
                    if dev not in fns:
                        continue
                    # let the other device's threads go idle first: PyTorch's OpenMP workers (libgomp)
                    # keep spinning ~10 ms after a parallel region (measured here), holding one of the
                    # two cores during the start of the next round; our pool spins 30 us
                    time.sleep(SETTLE_S)
                    try:
                        n = res.iters[dev]
                        dt, done = _timed_round(fns[dev], n, dev, 3 * self.target_s)
                        res.times[dev].append(dt / done)
                        if dt > 3 * self.target_s and n > 1:   # calibrated on a fast moment: shorten
                            res.iters[dev] = max(1, int(n * self.target_s / dt))
                    except Exception as e:  # noqa: BLE001
                        res.errors[dev] = _short_error(e)
                        fns.pop(dev)
                        res.times[dev] = []
                        _recover(dev)
        finally:
            if gc_was:
                gc.enable()
        res.extra["other_load"] = other_load(snap, cpu_snapshot())
        if tn is not None:
            try:
                res.fallbacks = set(tn.get_fallback_ops())
            except Exception:  # noqa: BLE001
                pass
        if case.after is not None:
            try:
                case.after(res)
            except Exception as e:  # noqa: BLE001
                res.extra["after_error"] = _short_error(e)
        res.extra["wall_s"] = time.perf_counter() - t_start
        del fns
        res.ctx.clear()
        gc.collect()
        if self.verbose:
            print(progress_line(res), flush=True)
        return res


def _recover(dev):
    if dev == "neuron":
        try:
            torch.neuron.synchronize()
        except Exception:  # noqa: BLE001
            pass


def fmt_time(t):
    if t is None:
        return "-"
    if t < 1e-3:
        return f"{t * 1e6:.2f} us"
    if t < 1:
        return f"{t * 1e3:.3f} ms"
    return f"{t:.3f} s"


def progress_line(res: Result):
    c = res.case
    parts = [f"  {c.name:<34}"]
    for dev in DEVICES:
        if dev in res.errors and not res.times[dev]:
            parts.append(f"{dev} ERROR")
        else:
            parts.append(f"{dev} {fmt_time(res.median(dev))}")
    rm = res.ratio_median()
    parts.append(f"ratio {rm:.2f}" if rm is not None else "ratio -")
    if res.fallbacks:
        parts.append("fallback: " + ",".join(sorted(res.fallbacks)))
    ol = res.extra.get("other_load")
    parts.append(f"[{res.extra.get('wall_s', 0):.1f}s" + (f", others {100 * ol:.0f}% CPU]" if ol is not None else "]"))
    return "  ".join(parts)
