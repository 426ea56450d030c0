"""The `torchneuron` command: device information and a script check.

    torchneuron info            devices, memory limits, threads, environment
    torchneuron check SCRIPT    run SCRIPT and report which ATen ops ran natively and which fell back
"""
import argparse
import os
import runpy
import sys


def _info():
    import torch
    import torchneuron

    print(f"torchneuron {torchneuron.__version__}, torch {torch.__version__}")
    err = torchneuron._C._init_error()
    if err:
        print(f"runtime: cannot initialize: {err}")
        return 1
    n = torch.neuron.device_count()
    print(f"devices: {n}")
    for i in range(n):
        p = torch.neuron.get_device_properties(i)
        print(f"  neuron:{i}  {p.name}  arena limit {p.total_memory / 2**30:.2f} GiB  threads {p.multi_processor_count}")
    for k in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_MEMORY_LIMIT", "NEURON_LAUNCH_BLOCKING", "NEURON_FALLBACK",
              "NEURON_NUM_THREADS", "NEURON_KERNELS"):
        print(f"  {k}={os.environ.get(k, '')}")
    return 0


def _check(script, args):
    import torchneuron

    torchneuron.clear_op_tracking()
    sys.argv = [script] + list(args)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        ran = torchneuron.get_executed_ops()
        fb = torchneuron.get_fallback_ops()
        print(f"\n[torchneuron check] {len(ran)} ATen ops ran on neuron, {len(ran - fb)} native, {len(fb)} through the CPU fallback")
        for op in sorted(fb):
            print(f"  fallback: {op}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="torchneuron", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="devices and settings")
    c = sub.add_parser("check", help="run a script and report native vs fallback ops")
    c.add_argument("script")
    c.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.cmd == "info":
        return _info()
    return _check(a.script, a.args)


if __name__ == "__main__":
    sys.exit(main())
