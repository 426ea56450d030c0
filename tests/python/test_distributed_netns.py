"""The Gloo transport between two network namespaces joined by a veth pair: the cross-host path of the
`neuron` c10d backend (NEURON_CCL_TRANSPORT=gloo) with each rank in its own network stack, so the store and
Gloo's pairs really go over an interface between them, not loopback.  Needs root and iproute2 (`ip netns`);
skipped, saying why, where the machine refuses namespaces.  The ranks run test_distributed.py's "gloo" worker
suite (collectives against exact values, async work, DDP parity), each one as LOCAL_RANK 0 of its own "host".
Only addresses this test creates are used (10.211.7.0/24 inside the two namespaces), and both namespaces (with
the veth pair) are deleted afterwards."""
import os
import shutil
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_distributed as td  # noqa: E402  (the worker suite and the result helpers)

NET = "10.211.7"


def _ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def veth_pair():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for network namespaces")
    tag = f"tn{os.getpid() % 100000}"
    ns, dev = (f"{tag}a", f"{tag}b"), (f"{tag}va", f"{tag}vb")
    steps = [("netns", "add", ns[0]), ("netns", "add", ns[1]),
             ("link", "add", dev[0], "type", "veth", "peer", "name", dev[1]),
             ("link", "set", dev[0], "netns", ns[0]), ("link", "set", dev[1], "netns", ns[1])]
    for i in range(2):
        steps += [("-n", ns[i], "addr", "add", f"{NET}.{i + 1}/24", "dev", dev[i]),
                  ("-n", ns[i], "link", "set", dev[i], "up"), ("-n", ns[i], "link", "set", "lo", "up")]
    try:
        for s in steps:
            r = _ip(*s)
            if r.returncode:
                pytest.skip(f"network namespaces unavailable here: ip {' '.join(s)}: {r.stderr.strip()}")
        yield ns, dev
    finally:
        for n in ns:  # deleting a namespace deletes its end of the veth pair, and with it the pair
            _ip("netns", "del", n)


def test_gloo_transport_across_network_namespaces(tmp_path, veth_pair):
    ns, dev = veth_pair
    assert _ip("-n", ns[1], "route", "get", f"{NET}.1").returncode == 0  # rank 1 reaches rank 0 over the veth
    envs = [td._env(RANK=r, WORLD_SIZE=2, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, MASTER_ADDR=f"{NET}.1", MASTER_PORT=29511,
                    NEURON_NUM_THREADS=1, NEURON_CCL_TRANSPORT="gloo", GLOO_SOCKET_IFNAME=dev[r],
                    TN_RESULT_DIR=str(tmp_path)) for r in range(2)]
    t0 = time.monotonic()
    procs = [subprocess.Popen(["ip", "netns", "exec", ns[r], sys.executable, td.HERE, "gloo"], env=envs[r],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for r in range(2)]
    outs = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=max(1, td.LAUNCH_TIMEOUT - (time.monotonic() - t0)))
            outs.append((p.returncode, e[-3000:]))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    results = td._read_results(str(tmp_path), 2)
    for (rc, err), r in zip(outs, results):
        td._assert_checks(r, err)
        assert rc == 0, err
    assert len(results[0]["checks"]) > 10, results[0]["checks"]  # the whole suite ran
    print(f"gloo across two network namespaces: {len(results[0]['checks'])} checks per rank in "
          f"{time.monotonic() - t0:.1f} s")
