"""A sweep worker: reads op_db indices from stdin, one a line; answers each with one line
`@@RESULT <json>` on stdout.  Started by the sweep (__main__.py), which restarts it when it crashes
or hangs.  Single-threaded on purpose: the sweep runs one worker per core."""
import faulthandler
import json
import os
import sys
import warnings


def main():
    faulthandler.enable()  # a crash in a kernel leaves a Python traceback in the worker's log
    os.environ.setdefault("NEURON_FALLBACK", "silent")
    import torch
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    from . import runner

    limits = runner.Limits(**json.loads(sys.argv[1])) if len(sys.argv) > 1 else runner.Limits()
    out = sys.stdout
    sys.stdout = sys.stderr  # stray prints of ops must not corrupt the protocol
    print("@@READY", file=out, flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        idx = int(line)
        op = op_db[idx]
        try:
            res = runner.run_entry(op, limits)
        except BaseException as e:  # the entry's own harness failure: reported, the worker lives on
            res = {"key": runner.entry_key(op), "crash": f"harness: {type(e).__name__}: {e}"[:500],
                   "per_dtype": {}, "fallback": [], "native": [], "failures": [runner.format_exc()[-500:]],
                   "claimed": [], "truncated": False, "skip": None, "shape_only": None, "seconds": 0}
        res["index"] = idx
        print("@@RESULT " + json.dumps(res), file=out, flush=True)


if __name__ == "__main__":
    main()
