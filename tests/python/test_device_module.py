"""torch.neuron mirrors torch.cuda; torch.accelerator, torch.Stream and torch.Event work on neuron."""

import gc
import pytest
import torch

MiB = 1 << 20


# ------------------------------------------------------------------------------ device basics
def test_device_string_and_tensor_methods():
    d = torch.device("neuron")
    assert d.type == "neuron"
    assert torch.device("neuron:0").index == 0

    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    a = x.to("neuron")
    b = x.neuron()
    c = torch.ones(2, device="neuron")
    for t in (a, b, c):
        assert t.device == torch.device("neuron", 0)
        assert t.is_neuron
        assert not t.is_cpu
    assert not x.is_neuron
    torch.testing.assert_close(a.cpu(), x, rtol=0, atol=0)
    torch.testing.assert_close(b.cpu(), x, rtol=0, atol=0)


def test_availability_and_properties():
    assert torch.neuron.is_available()
    torch.neuron.init()
    assert torch.neuron.is_initialized()
    assert torch.neuron.device_count() >= 1
    assert torch.neuron.current_device() == 0
    name = torch.neuron.get_device_name(0)
    assert isinstance(name, str) and name
    assert torch.neuron.get_device_name() == name
    props = torch.neuron.get_device_properties(0)
    assert isinstance(props.name, str) and props.name
    assert props.total_memory > 0
    assert not torch.neuron._is_in_bad_fork()


def test_set_device_and_device_context():
    torch.neuron.set_device(0)
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(0):
        assert torch.neuron.current_device() == 0
        assert torch.ones(1, device="neuron").device == torch.device("neuron", 0)
    assert torch.neuron.current_device() == 0
    torch.neuron.synchronize()
    torch.neuron.synchronize(0)


TWO_DEVICES = """
import torch
assert torch.neuron.device_count() == 2, torch.neuron.device_count()
assert torch.accelerator.device_count() == 2
x = torch.arange(10.0, device="neuron:0")
y = x.to("neuron:1")                      # device-to-device across devices
assert y.device == torch.device("neuron", 1), y.device
assert torch.equal(y.cpu(), torch.arange(10.0))
assert torch.equal((y * 2).to("neuron:0").cpu(), torch.arange(10.0) * 2)
torch.neuron.set_device(1)
assert torch.neuron.current_device() == 1
assert torch.ones(1, device="neuron").device == torch.device("neuron", 1)
with torch.neuron.device(0):
    assert torch.neuron.current_device() == 0
    assert torch.ones(1, device="neuron").device == torch.device("neuron", 0)
assert torch.neuron.current_device() == 1
torch.neuron.set_device(0)
for i in range(2):
    assert torch.neuron.get_device_properties(i).total_memory > 0
    torch.neuron.synchronize(i)
a = torch.ones(4, device="neuron:1")
s = torch.neuron.Stream(device=1)
assert s.device == torch.device("neuron", 1), s.device
s.wait_stream(torch.neuron.current_stream(1))  # a was produced on the default stream
with torch.neuron.stream(s):
    b = a + 1
s.synchronize()
assert torch.equal(b.cpu(), torch.full((4,), 2.0))
try:
    torch.ones(1, device="neuron:0") + torch.ones(1, device="neuron:1")
except RuntimeError as e:
    print("MIXED", e)
print("OK")
"""


@pytest.mark.parametrize("cores", ["0-1", "0,2"])
def test_two_visible_cores(run_py, cores):
    proc = run_py(TWO_DEVICES, env={"NEURON_RT_VISIBLE_CORES": cores})
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.report
    # mixing tensors of two devices in one op is an error naming both
    assert "MIXED" in proc.stdout and "neuron:0" in proc.stdout and "neuron:1" in proc.stdout, \
        proc.report


# ------------------------------------------------------------------------------------ random
def test_rng_functions():
    torch.neuron.manual_seed(123)
    assert torch.neuron.initial_seed() == 123
    a = torch.randn(64, device="neuron")
    torch.neuron.manual_seed_all(123)
    b = torch.randn(64, device="neuron")
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)

    state = torch.neuron.get_rng_state()
    assert isinstance(state, torch.Tensor) and state.dtype == torch.uint8
    assert state.device.type == "cpu"
    c = torch.randn(64, device="neuron")
    torch.neuron.set_rng_state(state)
    d = torch.randn(64, device="neuron")
    torch.testing.assert_close(c.cpu(), d.cpu(), rtol=0, atol=0)
    assert not torch.equal(a.cpu(), c.cpu())

    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    torch.neuron.set_rng_state_all(states)

    torch.neuron.seed()
    s1 = torch.neuron.initial_seed()
    torch.neuron.seed_all()
    assert isinstance(s1, int)


# ---------------------------------------------------------------------------- streams/events
def _work(device="neuron", n=256, reps=8):
    x = torch.randn(n, n, device=device)
    y = x
    for _ in range(reps):
        y = (y @ x) * (1.0 / n)
    return y


def test_default_and_current_stream():
    default = torch.neuron.default_stream()
    cur = torch.neuron.current_stream()
    assert cur == default
    assert default.device == torch.device("neuron", 0)
    assert torch.neuron.current_stream(0) == default
    assert torch.neuron.default_stream(0) == default
    assert default.query() in (True, False)
    default.synchronize()


def test_stream_context_and_set_stream():
    s = torch.neuron.Stream(priority=0)
    s2 = torch.neuron.Stream()
    assert s != torch.neuron.default_stream()
    assert s != s2
    assert s.device == torch.device("neuron", 0)
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
        with torch.neuron.stream(s2):
            assert torch.neuron.current_stream() == s2
        assert torch.neuron.current_stream() == s
    assert torch.neuron.current_stream() == torch.neuron.default_stream()

    torch.neuron.set_stream(s)
    try:
        assert torch.neuron.current_stream() == s
    finally:
        torch.neuron.set_stream(torch.neuron.default_stream())
    assert torch.neuron.current_stream() == torch.neuron.default_stream()


def test_work_on_side_stream_matches_cpu():
    x_cpu = torch.randn(128, 128)
    x = x_cpu.to("neuron")
    s = torch.neuron.Stream()
    s.wait_stream(torch.neuron.current_stream())  # x was produced on the default stream
    with torch.neuron.stream(s):
        y = (x @ x + 1.0) * 0.5
    torch.neuron.current_stream().wait_stream(s)
    torch.testing.assert_close(y.cpu(), (x_cpu @ x_cpu + 1.0) * 0.5, rtol=1e-4, atol=1e-4)
    s.synchronize()
    assert s.query()


def test_record_stream():
    # y is allocated on side stream s and then used on the default stream
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        y = torch.full((1024,), 3.0, device="neuron")
    torch.neuron.current_stream().wait_stream(s)
    y.record_stream(torch.neuron.current_stream())
    z = y * 2
    del y
    torch.testing.assert_close(z.cpu(), torch.full((1024,), 6.0))


def test_event_timing_and_sync():
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    start.record()
    y = _work()
    end.record()
    end.synchronize()
    assert end.query()
    assert start.query()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float)
    assert ms > 0
    assert torch.isfinite(y).all().item()


def test_event_wait_orders_streams():
    s = torch.neuron.Stream()
    ev = torch.neuron.Event()
    x_cpu = torch.randn(256, 256)
    x = x_cpu.to("neuron")
    y = x @ x                      # default stream
    ev.record()                    # on the current (default) stream
    ev.wait(s)                     # s waits for y
    with torch.neuron.stream(s):
        z = y + 1.0
        ev2 = torch.neuron.Event(blocking=True)
        ev2.record(s)
    ev2.synchronize()
    torch.testing.assert_close(z.cpu(), x_cpu @ x_cpu + 1.0, rtol=1e-4, atol=1e-4)

    # module-level helpers
    e3 = torch.neuron.current_stream().record_event()
    s.wait_event(e3)
    torch.neuron.current_stream().wait_stream(s)
    torch.neuron.synchronize()
    assert e3.query()


# ------------------------------------------------------------------------------------ memory
MEM_KEYS = [
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
    "active_bytes.all.current",
    "active_bytes.all.peak",
    "num_alloc_retries",
    "num_ooms",
]


def test_memory_stats_keys():
    torch.ones(1, device="neuron")
    stats = torch.neuron.memory_stats()
    missing = [k for k in MEM_KEYS if k not in stats]
    assert not missing, f"missing keys {missing}; have {sorted(stats)}"
    for k in MEM_KEYS:
        assert isinstance(stats[k], int) and stats[k] >= 0, (k, stats[k])
    assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"]
    assert stats["reserved_bytes.all.current"] >= stats["allocated_bytes.all.current"]
    assert torch.neuron.memory_stats(0)["allocated_bytes.all.current"] >= 0


def test_memory_allocated_tracks_tensors():
    # Tensors of earlier tests kept alive by reference cycles would be freed by a garbage collection
    # that may run inside torch.empty below and offset the count: collect them first.
    gc.collect()
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="neuron")
    after = torch.neuron.memory_allocated()
    assert after - before >= x.numel() * x.element_size(), (before, after)
    assert torch.neuron.memory_allocated(0) == after
    assert torch.neuron.max_memory_allocated() >= after
    assert torch.neuron.memory_reserved() >= after
    assert torch.neuron.max_memory_reserved() >= torch.neuron.memory_reserved()
    assert torch.neuron.memory_stats()["allocated_bytes.all.current"] == after
    del x
    torch.neuron.synchronize()
    freed = torch.neuron.memory_allocated()
    assert freed < after
    assert freed <= before


def test_peak_reset_and_empty_cache():
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="neuron")
    peak = torch.neuron.max_memory_allocated()
    assert peak >= 8 * MiB
    del x
    torch.neuron.synchronize()
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()
    assert torch.neuron.memory_stats()["allocated_bytes.all.peak"] == torch.neuron.memory_allocated()
    assert torch.neuron.max_memory_reserved() == torch.neuron.memory_reserved()

    torch.neuron.reset_accumulated_memory_stats()
    reserved = torch.neuron.memory_reserved()
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() <= reserved
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()


def test_mem_get_info_and_summary():
    free, total = torch.neuron.mem_get_info()
    assert 0 <= free <= total and total > 0
    summary = torch.neuron.memory_summary()
    assert isinstance(summary, str) and summary


# --------------------------------------------------------------------------------------- amp
def test_amp_dtypes():
    dts = torch.neuron.get_amp_supported_dtype()
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        assert dt in dts
    assert torch.neuron.is_bf16_supported()


# ------------------------------------------------------------------------ torch.accelerator
def test_torch_accelerator():
    acc = torch.accelerator.current_accelerator()
    assert acc.type == "neuron"
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == torch.neuron.device_count()
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(0)
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(0)
    s = torch.accelerator.current_stream()
    assert s.device.type == "neuron"
    cur = torch.neuron.current_stream()
    # compare ids, not objects: a device module's Stream subclass may define its own __eq__
    assert (s.stream_id, s.device_index) == (cur.stream_id, cur.device_index)


def test_accelerator_memory_matches_device_module():
    x = torch.empty(2 * MiB, dtype=torch.uint8, device="neuron")
    assert torch.accelerator.memory_allocated() == torch.neuron.memory_allocated()
    assert torch.accelerator.memory_reserved() == torch.neuron.memory_reserved()
    assert torch.accelerator.max_memory_allocated() == torch.neuron.max_memory_allocated()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.neuron.memory_allocated()
    del x


def test_generic_stream_and_event():
    s = torch.Stream(device="neuron")
    assert s.device.type == "neuron"
    start = torch.Event(device="neuron", enable_timing=True)
    end = torch.Event(device="neuron", enable_timing=True)
    x_cpu = torch.randn(256, 256)
    x = x_cpu.to("neuron")
    s.wait_stream(torch.accelerator.current_stream())
    with s:
        assert torch.accelerator.current_stream() == s
        start.record(s)
        y = x @ x
        for _ in range(4):
            y = (y @ x) * (1.0 / 256)
        end.record(s)
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) > 0
    s.synchronize()
    assert s.query()
    ref = x_cpu @ x_cpu
    for _ in range(4):
        ref = (ref @ x_cpu) * (1.0 / 256)
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-4, atol=1e-4)


def test_synchronize_device_forms():
    x = torch.ones(1000, device="neuron")
    for dev in (None, 0, "neuron", "neuron:0", torch.device("neuron", 0)):
        y = x * 2
        torch.neuron.synchronize(dev)
        assert torch.equal(y.cpu(), torch.full((1000,), 2.0))
    with pytest.raises((RuntimeError, ValueError)):
        torch.neuron.synchronize(torch.neuron.device_count())
    with pytest.raises(ValueError):
        torch.neuron.synchronize("cpu")
    torch.neuron.synchronize()  # still usable
