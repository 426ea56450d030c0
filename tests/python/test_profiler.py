"""torch.profiler with neuron device activities, memory snapshots in torch.cuda's format, and async
kernel errors that name the Python line that launched them.  One profiled training step is shared by
the profiler tests (module fixture); the whole file takes a few seconds."""
import json
import pickle
import time
import warnings

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

ACTS = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _step(x, w):
    y = torch.softmax(x @ w, dim=-1)
    y.sum().backward()
    return y


@pytest.fixture(scope="module")
def prof():
    x = torch.randn(256, 256).to("neuron")
    w = torch.randn(256, 256, device="neuron", requires_grad=True)
    _step(x, w)
    torch.neuron.synchronize()
    t0 = time.perf_counter()
    with profile(activities=ACTS) as p:
        with record_function("train_step"):
            xs = torch.randn(64, 256).to("neuron")
            y = _step(x, w)
            y[:2].cpu()
            del xs
    wall_us = (time.perf_counter() - t0) * 1e6
    return p, wall_us


def _device_events(p):
    return [e for e in p.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]


def test_profiler_registered():
    assert torch.ops.neuron._profiler_registered()


def test_kernels_are_device_activities_of_their_ops(prof):
    p, _ = prof
    dev = _device_events(p)
    names = {e.name for e in dev}
    for k in ("aten::mm", "aten::_softmax", "aten::_softmax_backward_data"):
        assert k in names, sorted(names)
    # each kernel is linked (correlation id at enqueue) to the ATen op that launched it
    launched = {(e.name, k.name) for e in p.events() for k in e.kernels}
    assert ("aten::mm", "aten::mm") in launched
    assert ("aten::_softmax", "aten::_softmax") in launched
    assert ("aten::_softmax_backward_data", "aten::_softmax_backward_data") in launched
    # copies by direction, under the op that made them
    assert any(n.startswith("Memcpy HtoD") for n in names), sorted(names)
    assert any(n.startswith("Memcpy DtoH") for n in names), sorted(names)


def test_key_averages_device_time(prof):
    p, wall_us = prof
    ka = {e.key: e for e in p.key_averages()}
    for k in ("aten::mm", "aten::_softmax"):
        assert 0 < ka[k].self_device_time_total <= wall_us
        assert 0 < ka[k].device_time_total <= wall_us
    step = ka["train_step"]
    assert 0 < step.device_time_total <= wall_us
    total_dev = sum(e.self_device_time_total for e in ka.values())
    assert 0 < total_dev <= wall_us
    table = p.key_averages().table(sort_by="device_time_total", row_limit=10)
    assert "Self NEURON" in table and "NEURON total" in table


def test_chrome_trace_tracks_and_flows(prof, tmp_path):
    p, _ = prof
    path = tmp_path / "trace.json"
    p.export_chrome_trace(str(path))
    tr = json.loads(path.read_text())
    ev = tr["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    neuron_pids = [pid for pid, n in procs.items() if n == "neuron"]
    assert neuron_pids, procs
    tracks = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"
              and e["pid"] in neuron_pids}
    assert "stream 0 (default)" in tracks, tracks
    kernels = [e for e in ev if e.get("cat") == "kernel" and e["pid"] in neuron_pids]
    assert {"aten::mm", "aten::_softmax"} <= {k["name"] for k in kernels}
    assert all(k["dur"] >= 0 for k in kernels)
    flows = [e for e in ev if e.get("cat") == "ac2g"]
    starts = {e["id"] for e in flows if e["ph"] == "s"}
    ends = {e["id"] for e in flows if e["ph"] == "f"}
    assert starts and starts & ends


def test_timeline_picture_of_the_exported_trace(tmp_path):
    """torchneuron.profiler.plot_timeline draws the exported trace (host ops and the neuron stream) as a PNG."""
    import matplotlib.image

    from torchneuron.profiler import plot_timeline

    x = torch.randn(128, 128, device="neuron")
    w = torch.randn(128, 128, device="neuron", requires_grad=True)
    with profile(activities=ACTS) as p:
        _step(x, w)
        torch.neuron.synchronize()
    trace, png = tmp_path / "trace.json", tmp_path / "timeline.png"
    p.export_chrome_trace(str(trace))
    plot_timeline(str(trace), str(png), title="test step")
    img = matplotlib.image.imread(str(png))
    assert img.ndim == 3 and img.shape[1] > 600, img.shape


def test_schedule_and_trace_handler(tmp_path):
    x = torch.randn(32, 32, device="neuron")
    seen = []
    sched = torch.profiler.schedule(wait=1, warmup=1, active=1, repeat=1)

    def ready(p):
        seen.append({e.name for e in _device_events(p)})
        torch.profiler.tensorboard_trace_handler(str(tmp_path))(p)

    with profile(activities=ACTS, schedule=sched, on_trace_ready=ready) as p:
        for _ in range(4):
            (x @ x).relu()
            p.step()
    assert len(seen) == 1 and {"aten::mm", "aten::relu"} <= seen[0], seen
    files = list(tmp_path.glob("*.pt.trace.json"))
    assert files and json.loads(files[0].read_text())["traceEvents"]


def test_profile_memory_reports_device_allocations():
    with profile(activities=ACTS, profile_memory=True) as p:
        y = torch.ones(1024, 1024, device="neuron") * 2
        del y
    ka = {e.key: e for e in p.key_averages()}
    assert ka["aten::ones"].device_memory_usage == 1024 * 1024 * 4
    assert ka["[memory]"].device_memory_usage < 0  # the frees


def test_kernel_trace_is_a_view_of_the_same_ring():
    from torchneuron.profiler import kernel_trace

    x = torch.randn(16, 16, device="neuron")
    with profile(activities=ACTS) as p, kernel_trace() as tr:
        x @ x
    assert "aten::mm" in tr.summary()
    assert "aten::mm" in {e.name for e in _device_events(p)}


# ---- memory snapshots ------------------------------------------------------------------------------

def test_memory_snapshot_round_trips_through_memory_viz(tmp_path):
    from torch.cuda import _memory_viz

    torch.neuron.memory._record_memory_history(max_entries=1000)
    try:
        a = torch.empty(300_000, device="neuron")  # the line the snapshot must name
        b = torch.empty(1000, device="neuron")
        del b
        path = tmp_path / "snap.pickle"
        torch.neuron.memory._dump_snapshot(str(path))
    finally:
        torch.neuron.memory._record_memory_history(enabled=None)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    blocks = [b for s in snap["segments"] for b in s["blocks"]]
    mine = [b for b in blocks if b["address"] == a.data_ptr()]
    assert mine and mine[0]["state"] == "active_allocated" and mine[0]["requested_size"] == a.nbytes
    assert any(f["filename"] == __file__ and f["name"].endswith("test_memory_snapshot_round_trips_through_memory_viz")
               for f in mine[0]["frames"]), mine[0]["frames"]
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert actions.count("alloc") >= 2 and "free_requested" in actions and "free_completed" in actions
    for s in snap["segments"]:
        assert s["total_size"] == sum(b["size"] for b in s["blocks"])
    # PyTorch's own readers
    lines = lambda text: text  # noqa: E731  (the flame graph's input lines; the default downloads flamegraph.pl)
    assert "test_profiler.py" in _memory_viz.segments(snap, format_flamegraph=lines)
    assert "test_profiler.py" in _memory_viz.memory(snap, format_flamegraph=lines)
    assert "segments:" in _memory_viz.segsum(snap)
    assert "del b" in _memory_viz.trace(snap)
    assert "<html" in _memory_viz.trace_plot(snap).lower()
    assert "neuron:0" in torch.neuron.memory_summary() and "Allocated memory" in torch.neuron.memory_summary()
    del a


def test_memory_history_has_segment_events(tmp_path):
    """A new segment taken for an allocation is a segment_alloc entry before that alloc (with its size and
    the calling line), and empty_cache returning it is a segment_free entry; _memory_viz's trace reads them."""
    from torch.cuda import _memory_viz

    torch.neuron.empty_cache()
    torch.neuron.memory._record_memory_history(max_entries=1000)
    try:
        big = torch.empty(48 << 20, dtype=torch.uint8, device="neuron")  # over 10 MiB: a segment of its own
        ptr = big.data_ptr()
        del big
        torch.neuron.empty_cache()
        snap = torch.neuron.memory._snapshot()
    finally:
        torch.neuron.memory._record_memory_history(enabled=None)
    tr = snap["device_traces"][0]
    segs = [i for i, e in enumerate(tr) if e["action"] == "segment_alloc" and e["addr"] == ptr]
    frees = [i for i, e in enumerate(tr) if e["action"] == "segment_free" and e["addr"] == ptr]
    allocs = [i for i, e in enumerate(tr) if e["action"] == "alloc" and e["addr"] == ptr]
    assert segs and frees and allocs, [(e["action"], e["addr"], e["size"]) for e in tr]
    assert segs[0] < allocs[0] < frees[-1]
    assert tr[segs[0]]["size"] >= 48 << 20 and tr[segs[0]]["size"] == tr[frees[-1]]["size"]
    assert any(f["filename"] == __file__ for f in tr[segs[0]]["frames"]), tr[segs[0]]["frames"]
    assert all(s["address"] != ptr for s in snap["segments"])  # returned to the arena
    assert "<html" in _memory_viz.trace_plot(snap).lower()
    _memory_viz.trace(snap)


# ---- async errors name the Python line ---------------------------------------------------------------

def test_async_error_names_the_line():
    torch.neuron.synchronize()
    x = torch.randn(10, 4, device="neuron")
    idx = torch.tensor([0, 20], device="neuron")
    y = x.index_select(0, idx); line = test_async_error_names_the_line.__code__.co_firstlineno + 4  # noqa: E702
    with pytest.raises(IndexError) as ei:  # the CPU's type and words
        torch.neuron.synchronize()
    msg = str(ei.value)
    assert "aten::index_select" in msg and "index out of range in self" in msg
    assert f"{__file__}:{line} in test_async_error_names_the_line" in msg, msg
    assert "neuron:0 stream 0" in msg
    del y
    assert torch.ones(3, device="neuron").sum().item() == 3


def test_async_errors_on_two_streams_are_both_reported_after_their_outputs_are_freed():
    """Two failing kernels on two streams, their outputs freed before the sync: one synchronize reports one,
    the next the other (each naming its stream and line), then the device is clean and usable."""
    torch.neuron.synchronize()
    x = torch.randn(10, 4, device="neuron")
    s1, s2 = torch.neuron.Stream(), torch.neuron.Stream()
    first = test_async_errors_on_two_streams_are_both_reported_after_their_outputs_are_freed.__code__.co_firstlineno
    with torch.neuron.stream(s1):
        y1 = x.index_select(0, torch.tensor([0, 30], device="neuron"))
    with torch.neuron.stream(s2):
        y2 = x.index_select(0, torch.tensor([40], device="neuron"))
    del y1, y2
    msgs = []
    for _ in range(2):
        with pytest.raises(IndexError) as ei:
            torch.neuron.synchronize()
        msgs.append(str(ei.value))
    torch.neuron.synchronize()  # nothing left
    by_index = {("index 30" in m) and "30" or "40": m for m in msgs}
    assert set(by_index) == {"30", "40"}, msgs
    assert f"stream {s1.stream_id}" in by_index["30"] and f"{__file__}:{first + 8}" in by_index["30"], by_index["30"]
    assert f"stream {s2.stream_id}" in by_index["40"] and f"{__file__}:{first + 10}" in by_index["40"], by_index["40"]
    assert torch.ones(3, device="neuron").sum().item() == 3


def test_async_error_in_backward_names_the_backward_call():
    """A kernel the autograd engine's thread launches (index_select's backward, an index_add with an index
    changed behind autograd's back through .data) names the line that called backward()."""
    torch.neuron.synchronize()
    x = torch.randn(10, 4, device="neuron", requires_grad=True)
    idx = torch.tensor([0, 1], device="neuron")
    y = x.index_select(0, idx)
    idx.data[1] = 20  # not seen by the version counter: the saved index is now out of range
    y.sum().backward(); line = test_async_error_in_backward_names_the_backward_call.__code__.co_firstlineno + 8  # noqa: E702
    with pytest.raises(RuntimeError) as ei:  # the CPU's index_add_ raises RuntimeError with these words
        torch.neuron.synchronize()
    msg = str(ei.value)
    assert "index 20 is out of bounds for dimension 0 with size 10" in msg, msg
    assert f"{__file__}:{line} in test_async_error_in_backward_names_the_backward_call (autograd backward)" in msg, msg
    assert torch.ones(3, device="neuron").sum().item() == 3


def test_site_capture_resolves_the_calling_line():
    line = test_site_capture_resolves_the_calling_line.__code__.co_firstlineno + 2
    s = torch.ops.neuron._site_probe(1)
    assert s == f"{__file__}:{line} in test_site_capture_resolves_the_calling_line", s


def test_compiled_program_kernels_are_slices_of_their_segment():
    """A compiled program's segment is one queue record; while the device trace records, each kernel of
    it (the GEMM, the fused pointwise/reduction kernels) is a device activity of its own, named after the
    segment and the ops it computes, inside the segment's slice on the same stream."""
    @torch.compile(backend="neuron")
    def f(x, w):
        return (torch.relu(x @ w) * 2).sum(dim=-1)

    x = torch.randn(64, 48, device="neuron")
    w = torch.randn(48, 32, device="neuron")
    ref = f(x, w)
    torch.neuron.synchronize()
    with profile(activities=ACTS) as p:
        out = f(x, w)
        torch.neuron.synchronize()
    assert torch.equal(out, ref)
    dev = _device_events(p)
    segs = [e for e in dev if e.name.startswith("neuron_compiled.seg") and "/" not in e.name]
    parts = [e for e in dev if e.name.startswith("neuron_compiled.seg") and "/k" in e.name]
    assert segs and len(parts) >= 2, sorted({e.name for e in dev})
    assert any("mm" in e.name for e in parts) and any("relu" in e.name or "sum" in e.name for e in parts), \
        [e.name for e in parts]
    for e in parts:
        seg = e.name.split("/")[0]
        assert any(s.name == seg and s.time_range.start <= e.time_range.start and e.time_range.end <= s.time_range.end
                   for s in segs), (e.name, e.time_range, [(s.name, s.time_range) for s in segs])


def test_cpu_fallback_is_a_device_activity():
    x = torch.arange(6.0, device="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=ACTS) as p:
            torch.special.bessel_j0(x)
    names = {e.name for e in _device_events(p)}
    assert any("special_bessel_j0" in n and n.endswith("(CPU fallback)") for n in names), names
