"""PyTorch's distributed test bases on the c10d backend neuron, 2 ranks; counts into docs/distributed.md.

    python -m tests.distributed [--bases dist,fsdp,dtensor] [-k REGEX] [--test-timeout S] [--no-doc]
    python -m tests.distributed --rerun        (only the tests that failed or errored in the last run's
                                               JSON, merged into it; -k narrows further)
    python -m tests.distributed --render       (the report from the JSON, running nothing)

Writes build/dist-upstream.json (every test's outcome), a log of the failing tests' tracebacks
(build/dist-upstream.log) and, for a run of every test of every base, the section "Upstream test bases"
of docs/distributed.md.  See upstream.py.
"""
import argparse
import json
import os
import re
import sys
import time

from . import upstream


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tests.distributed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bases", default=",".join(upstream.BASES))
    ap.add_argument("-k", default="", help="only tests whose name matches this regex (no doc update)")
    ap.add_argument("--test-timeout", type=int, default=180, help="the base's per-test limit, seconds")
    ap.add_argument("--doc", default=str(upstream.ROOT / "docs" / "distributed.md"))
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--rerun", action="store_true", help="rerun the failures of --json and merge")
    ap.add_argument("--render", action="store_true", help="run nothing: write the report from --json")
    ap.add_argument("--json", default=str(upstream.ROOT / "build" / "dist-upstream.json"))
    ap.add_argument("--log", default=str(upstream.ROOT / "build" / "dist-upstream.log"))
    args = ap.parse_args(argv)
    bases = [b.strip() for b in args.bases.split(",") if b.strip()]
    unknown = [b for b in bases if b not in upstream.BASES]
    if unknown:
        ap.error(f"unknown bases {unknown}; choose from {list(upstream.BASES)}")
    env = upstream.base_env(args.test_timeout)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    stored = {}  # base -> {"results", "load", "shm_left", "commit"}: the last full run of each base
    if os.path.exists(args.json):
        with open(args.json) as f:
            stored = json.load(f)
    if args.rerun:
        bases = [b for b in bases if b in stored]
    if args.render:
        bases = []
    partial = bool(args.k) and not args.rerun
    commit = upstream.git_commit()  # the tree under test is the one at the start
    t0 = time.time()
    log_path = args.log if len(bases) == len(upstream.BASES) else f"{args.log[:-4]}-{'-'.join(bases)}.log"
    with open(log_path, "a" if args.rerun else "w") as log:
        for b in bases:
            module, title = upstream.BASES[b]
            ids = upstream.list_tests(module, env)
            old = {r["id"]: r for r in stored.get(b, {}).get("results", [])} if args.rerun else {}
            run = [i for i in ids if not args.rerun or old.get(i, {}).get("status") not in ("passed", "skipped")]
            if args.k:
                run = [i for i in run if re.search(args.k, i.rsplit(".", 1)[-1])]
            print(f"{title}: {len(run)} of {len(ids)} tests to run", file=sys.stderr, flush=True)
            if args.rerun and not run and b in stored:
                continue  # nothing to rerun: the stored run stands as it is
            res, left = upstream.run_tests(run, args.test_timeout, log=log)
            entry = {"results": [res[i] for i in run] if partial else [res.get(i) or old[i] for i in ids],
                     "load": round(os.getloadavg()[1], 1), "shm_left": left, "commit": commit,
                     "cpu": upstream.cpu_name()}
            if args.rerun and b in stored:
                entry["shm_left"] = stored[b]["shm_left"] + left
                entry["commit"] = f"{stored[b]['commit']}, reruns at {entry['commit']}"
            if partial:
                print(upstream.render({b: (title, entry)}, upstream.cpu_name(), partial=True))
            else:  # merged into the file as it is now: another invocation may have written other bases
                if os.path.exists(args.json):
                    with open(args.json) as f:
                        stored.update({k: v for k, v in json.load(f).items() if k != b})
                stored[b] = entry
                with open(args.json + ".tmp", "w") as f:
                    json.dump(stored, f, indent=1)
                os.replace(args.json + ".tmp", args.json)
    print(f"wall time of this invocation: {(time.time() - t0) / 60:.1f} min", file=sys.stderr)
    if partial:
        return 0
    per_base = {b: (upstream.BASES[b][1], stored[b]) for b in upstream.BASES if b in stored}
    cpus = {e.get("cpu") or upstream.cpu_name() for _, e in per_base.values()}
    text = upstream.render(per_base, " / ".join(sorted(cpus)), partial=set(per_base) != set(upstream.BASES))
    print(text)
    if not args.no_doc and set(per_base) == set(upstream.BASES):
        upstream.write_section(args.doc, text)
        print(f"-> {args.doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
