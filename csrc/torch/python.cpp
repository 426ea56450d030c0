// python.cpp - the torchneuron._C module: the few runtime entry points the Python package needs
// that PyTorch's generic torch.accelerator / torch.Stream / torch.Event APIs do not already cover.
#include <Python.h>

#include "neuron.h"
#include "nrt_fuse.h"

#include <ATen/core/Generator.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/utils/python_numbers.h>
#include <torch/library.h>

#include <errno.h>
#include <time.h>

#include <set>
#include <string>

namespace neuron {
const at::Generator &default_generator(c10::DeviceIndex idx);
std::set<std::string> executed_ops();
std::set<std::string> fallback_ops();
void clear_op_tracking();
} // namespace neuron

using namespace neuron;

static PyObject *to_pyset(const std::set<std::string> &s)
{
	PyObject *r = PySet_New(nullptr);
	for (const auto &x : s) {
		PyObject *u = PyUnicode_FromString(x.c_str());
		PySet_Add(r, u);
		Py_DECREF(u);
	}
	return r;
}

static PyObject *py_init(PyObject *, PyObject *)
{
	HANDLE_TH_ERRORS
	lazy_init();
	Py_RETURN_NONE;
	END_HANDLE_TH_ERRORS
}

static PyObject *py_init_error(PyObject *, PyObject *)
{
	if (nrt_init() == 0)
		Py_RETURN_NONE;
	return PyUnicode_FromString(nrt_last_error());
}

static PyObject *py_in_bad_fork(PyObject *, PyObject *)
{
	return PyBool_FromLong(nrt_in_forked_child());
}

static PyObject *py_device_count(PyObject *, PyObject *)
{
	return PyLong_FromLong(device_count_noexcept());
}

static PyObject *py_memory_limit(PyObject *, PyObject *arg)
{
	HANDLE_TH_ERRORS
	long idx = PyLong_AsLong(arg);
	check_device_index((c10::DeviceIndex)idx);
	size_t n = 0;
	NEURON_CHECK(nrt_device_memory_limit((int)idx, &n), "neuron: get_device_properties");
	return PyLong_FromSize_t(n);
	END_HANDLE_TH_ERRORS
}

static PyObject *py_default_generator(PyObject *, PyObject *arg)
{
	HANDLE_TH_ERRORS
	long idx = PyLong_AsLong(arg);
	return THPGenerator_initDefaultGenerator(default_generator((c10::DeviceIndex)idx));
	END_HANDLE_TH_ERRORS
}

// torch.neuron.synchronize(device): the direct path (torch.accelerator.synchronize goes through Python,
// the current-device query and the guard: about 1.5 us of the 2 us a synchronized small op costs).
// idx < 0: the current device.  Waits without the GIL; raises the first kernel error.
static PyObject *py_synchronize(PyObject *, PyObject *arg)
{
	HANDLE_TH_ERRORS
	long idx = PyLong_AsLong(arg);
	if (idx == -1 && PyErr_Occurred())
		return nullptr;
	lazy_init();
	c10::DeviceIndex d = idx < 0 ? current_device() : (c10::DeviceIndex)idx;
	check_device_index(d);
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = nrt_device_synchronize(d);
	Py_END_ALLOW_THREADS
	NEURON_CHECK(rc, "neuron: synchronize");
	Py_RETURN_NONE;
	END_HANDLE_TH_ERRORS
}

// Interpreter shutdown vs the autograd engine's device threads (issue 16, 4).  A backward on neuron runs
// on the engine's worker thread for the device (pt_autograd_<d>), which drops its reference to the
// GraphTask only after it has woken the caller.  The GraphTask's captured thread-local state holds the
// contextvars.Context that torch.autograd stashes for every backward (torch._C._stash_obj_in_tls); the
// caller erases its own reference when backward returns, so when the worker is preempted past that
// point it holds the last one.  If the interpreter is finalizing by the time it drops it, the
// SafePyObject's decref takes the GIL, CPython's take_gil() calls pthread_exit() on the non-main
// thread, and the forced unwind through the noexcept destructor ends in std::terminate ("terminate
// called without an active exception", SIGABRT).  The CPU never aborts because its backward runs on
// the calling thread.  Called from an atexit handler (before finalization), with the GIL released, this
// runs one C++-only backward through each device's worker: the worker takes a new task only after
// dropping the previous GraphTask, so every Python object it held is released while the GIL can still
// be taken, and the drain's own GraphTask holds no Python object (its tensors have no PyObject, and the
// caller's thread-local Python objects were erased).
static PyObject *py_autograd_drain(PyObject *, PyObject *)
{
	HANDLE_TH_ERRORS
	int n = nrt_device_count();
	std::string err;
	Py_BEGIN_ALLOW_THREADS
	try {
		at::AutoGradMode grad(true);
		for (int d = 0; d < n; d++) {
			auto x = at::zeros({1}, at::TensorOptions().device(kDev, (c10::DeviceIndex)d)).requires_grad_(true);
			torch::autograd::backward({x.sum()});
		}
	} catch (const std::exception &e) {
		err = e.what();
	}
	Py_END_ALLOW_THREADS
	TORCH_CHECK(err.empty(), "neuron: draining the autograd device threads: ", err);
	Py_RETURN_NONE;
	END_HANDLE_TH_ERRORS
}

// torch.load gives neuron storages that are not resizable, as the CPU storages it reads from the file
// are: a tensor whose sizes, strides or offset lie past its storage then fails in set_ with the CPU's
// "Trying to resize storage that is not resizable" instead of growing the storage.
static PyObject *py_storage_set_resizable(PyObject *, PyObject *args)
{
	HANDLE_TH_ERRORS
	PyObject *st = nullptr;
	int flag = 0;
	if (!PyArg_ParseTuple(args, "Op", &st, &flag))
		return nullptr;
	TORCH_CHECK_TYPE(THPStorage_Check(st), "_storage_set_resizable: expected a torch.UntypedStorage, got ", Py_TYPE(st)->tp_name);
	THPStorage_Unpack(st).unsafeGetStorageImpl()->set_resizable(flag != 0);
	Py_RETURN_NONE;
	END_HANDLE_TH_ERRORS
}

static PyObject *py_executed_ops(PyObject *, PyObject *) { return to_pyset(executed_ops()); }
static PyObject *py_fallback_ops(PyObject *, PyObject *) { return to_pyset(fallback_ops()); }
// [(dtype name, tensors, bytes)] of the tensors created on neuron since the last clear
static PyObject *py_created_dtypes(PyObject *, PyObject *)
{
	auto v = created_dtypes();
	PyObject *l = PyList_New((Py_ssize_t)v.size());
	if (!l)
		return nullptr;
	for (size_t i = 0; i < v.size(); i++)
		PyList_SET_ITEM(l, (Py_ssize_t)i, Py_BuildValue("(sLL)", std::get<0>(v[i]).c_str(), (long long)std::get<1>(v[i]),
							       (long long)std::get<2>(v[i])));
	return l;
}

static PyObject *py_clear_op_tracking(PyObject *, PyObject *)
{
	clear_op_tracking();
	Py_RETURN_NONE;
}

static PyObject *py_fault_inject_alloc(PyObject *, PyObject *arg)
{
	nrt_fault_inject_alloc(PyLong_AsLongLong(arg));
	Py_RETURN_NONE;
}

static PyObject *py_launch_blocking(PyObject *, PyObject *)
{
	return PyBool_FromLong(nrt_launch_blocking());
}

static PyObject *py_num_threads(PyObject *, PyObject *)
{
	return PyLong_FromLong(nrt_num_threads());
}

static PyObject *py_trace_enable(PyObject *, PyObject *arg)
{
	nrt_trace_enable(PyObject_IsTrue(arg));
	Py_RETURN_NONE;
}

// [(op name, device, queue, start_ns, end_ns), ...] recorded since the last drain.
static PyObject *py_trace_drain(PyObject *, PyObject *)
{
	PyObject *out = PyList_New(0);
	nrt_trace_rec_t recs[1024];
	int n;
	while ((n = nrt_trace_drain(recs, 1024)) > 0) {
		for (int i = 0; i < n; i++) {
			PyObject *t = Py_BuildValue("(siiLL)", recs[i].name, recs[i].dev, recs[i].queue,
						    (long long)recs[i].start_ns, (long long)recs[i].end_ns);
			PyList_Append(out, t);
			Py_DECREF(t);
		}
		if (n < 1024)
			break;
	}
	return out;
}

static PyMethodDef methods[] = {
	{"_init", py_init, METH_NOARGS, "Initialize the runtime; raises on bad NEURON_* settings."},
	{"_init_error", py_init_error, METH_NOARGS, "None, or why the runtime cannot initialize."},
	{"_in_bad_fork", py_in_bad_fork, METH_NOARGS, "This process was forked after the runtime started its threads."},
	{"_device_count", py_device_count, METH_NOARGS, "Visible devices (0 if the runtime cannot initialize)."},
	{"_memory_limit", py_memory_limit, METH_O, "Arena limit of a device in bytes."},
	{"_default_generator", py_default_generator, METH_O, "The default generator of a device."},
	{"_synchronize", py_synchronize, METH_O, "Wait for every queue of a device (-1: current); raises kernel errors."},
	{"_autograd_drain", py_autograd_drain, METH_NOARGS, "Run one backward through each device's autograd worker (exit)."},
	{"_storage_set_resizable", py_storage_set_resizable, METH_VARARGS, "Mark an UntypedStorage (not) resizable."},
	{"_executed_ops", py_executed_ops, METH_NOARGS, "ATen ops run on neuron since the last clear."},
	{"_created_dtypes", py_created_dtypes, METH_NOARGS, "(dtype, tensors, bytes) created on neuron since the last clear."},
	{"_fallback_ops", py_fallback_ops, METH_NOARGS, "ATen ops that ran through the CPU fallback."},
	{"_clear_op_tracking", py_clear_op_tracking, METH_NOARGS, "Reset op tracking."},
	{"_fault_inject_alloc", py_fault_inject_alloc, METH_O, "Fail the n-th segment allocation (tests)."},
	{"_launch_blocking", py_launch_blocking, METH_NOARGS, "NEURON_LAUNCH_BLOCKING is set."},
	{"_num_threads", py_num_threads, METH_NOARGS, "Kernel thread pool size."},
	{"_trace_enable", py_trace_enable, METH_O, "Record every kernel launch (name, queue, start/end)."},
	{"_trace_drain", py_trace_drain, METH_NOARGS, "Kernel records since the last drain."},
	{nullptr, nullptr, 0, nullptr},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "torchneuron._C", nullptr, -1, methods};

namespace neuron {
bool add_distributed(PyObject *m); // distributed.cpp: the c10d backend's entry point
bool add_custom_kernels(PyObject *m); // ops_custom.cpp: user C kernels (torchneuron.kernel)
} // namespace neuron

PyMODINIT_FUNC PyInit__C(void)
{
	PyObject *m = PyModule_Create(&module);

	if (m && (!neuron::add_distributed(m) || !neuron::add_custom_kernels(m))) {
		Py_DECREF(m);
		return nullptr;
	}
	return m;
}

// ---- debug hooks: queue-level fusion control and launch counters (tests, benchmarks) -------------
// torch.ops.neuron._fuse_control(enable, tile, dead) -> [enabled, tile elements, fused runs, fused records,
// dead buffers on, dead ranges kept in tile buffers]; arguments < 0 leave the setting as it is.
static std::vector<int64_t> fuse_control(int64_t enable, int64_t tile, int64_t dead)
{
	if (enable >= 0)
		nrt_fuse_enable(enable != 0);
	if (tile >= 0)
		nrt_fuse_set_tile(tile);
	if (dead >= 0)
		nrt_fuse_set_dead_buffers(dead != 0);
	nrt_fuse_stats_t st;
	nrt_fuse_get_stats(&st);
	return {nrt_fuse_enabled() ? 1 : 0, nrt_fuse_tile(), (int64_t)st.runs, (int64_t)st.records,
		nrt_fuse_dead_buffers() ? 1 : 0, (int64_t)st.dead};
}

// torch.ops.neuron._queue_sleep(us): a record on the current queue of the current device that sleeps
// `us` microseconds without using a core.  Tests that need later records queued behind a busy queue
// use it: a busy kernel (matmuls) occupies both cores of a 2-core machine, so the host thread that
// is queueing the records competed with it, and a short one was sometimes over before they were queued.
static int sleep_kernel(void *p)
{
	int64_t us = *(const int64_t *)p;
	struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	return 0;
}

static void queue_sleep(int64_t us)
{
	TORCH_CHECK(us >= 0 && us <= 10000000, "neuron._queue_sleep: microseconds must be in [0, 1e7], got ", us);
	lazy_init();
	launch(current_queue(current_device()), sleep_kernel, us, "neuron::queue_sleep");
}

// torch.ops.neuron._inline_launches(): how many records ran inline on the launching thread (small kernels
// on an idle queue, nrt_queue_launch_cost) since the process started.
static int64_t inline_launches()
{
	return (int64_t)nrt_inline_launches();
}

TORCH_LIBRARY_FRAGMENT(neuron, m)
{
	m.def("_fuse_control(int enable=-1, int tile=-1, int dead=-1) -> int[]", &fuse_control);
	m.def("_queue_sleep(int us) -> ()", &queue_sleep);
	m.def("_inline_launches() -> int", &inline_launches);
}
