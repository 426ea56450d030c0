// ops_custom.cpp - user C kernels as ops (torchneuron.kernel): the launch of a kernel compiled at run time
// (nk_custom.h ABI) as one record on the current queue, and the boxed PrivateUse1 kernel registered for
// ops whose outputs the glue can allocate itself (the eager fast path: no Python per call).  Also the
// native aten::_grouped_mm (the MoE grouped GEMM, gemm_grouped.c) the ready-kernel library builds on.
//
// A launch copies the kernel's function pointer, the op name (interned: it outlives every record),
// the grid, the tile, the scalars and the tensor descriptors into the queue's ring; on the queue the
// record runs the grid's tiles over the kernel thread pool.  Errors are the queue's sticky errors, named
// after the op; the op's outputs and mutated arguments are its writes in the runtime's op bracket
// (poisoned when the kernel fails), and the trace ring records it under the op's name (the profiler).
#include <Python.h>

#include "neuron.h"
#include "out.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

// the ABI header ships with the Python package (user kernels compile against it at run time); a path
// relative to this file, not an include directory, so the other glue files' command lines stay as they are
#include "../../torchneuron/kernel/include/nk_custom.h"
#include "nk_gemm_grouped.h"
#include "ops_util.h"

static_assert(NK_CUSTOM_MAX_DIMS <= NK_MAX_DIMS, "descriptor dims");

namespace neuron {
namespace {

// ---- the record and its run on the queue -------------------------------------------------------------

struct CustomRec {
	nk_kernel_fn_t fn;
	const char *name;
	int32_t nt, ns;
	int64_t grid, tile;
	nk_scalar_t s[NK_CUSTOM_MAX_SCALARS];
	nk_tensor_t t[NK_CUSTOM_MAX_TENSORS]; // only nt of them are copied into the ring (last field)
};
static_assert(sizeof(CustomRec) <= NRT_MAX_ARGS, "custom kernel record too large");

struct RunState {
	const CustomRec *r;
	std::atomic<int> failed{0};
	char msg[1024];
};

int tile_fail(nk_tile_t *tile, const char *fmt, ...)
{
	auto *st = static_cast<RunState *>(tile->launch);
	if (st->failed.exchange(1) == 0) { // the first failing tile's message is kept
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(st->msg, sizeof st->msg, fmt, ap);
		va_end(ap);
	}
	return 1;
}

void run_tiles(void *ctx, int64_t begin, int64_t end)
{
	auto *st = static_cast<RunState *>(ctx);
	const CustomRec *r = st->r;
	for (int64_t i = begin; i < end && !st->failed.load(std::memory_order_relaxed); i++) {
		nk_tile_t tile{};
		tile.begin = i * r->tile;
		tile.end = std::min(r->grid, tile.begin + r->tile);
		tile.grid = r->grid, tile.index = i;
		tile.fail = tile_fail, tile.launch = st;
		int rc = r->fn(r->t, r->nt, r->s, r->ns, &tile);
		if (rc != 0 && st->failed.exchange(1) == 0)
			snprintf(st->msg, sizeof st->msg, "kernel returned %d (tile %lld of grid %lld) without a message", rc,
				 (long long)i, (long long)r->grid);
	}
}

int custom_run(void *p)
{
	const auto *r = static_cast<const CustomRec *>(p);
	int64_t ntiles = r->grid > 0 ? (r->grid + r->tile - 1) / r->tile : 0;
	if (ntiles == 0)
		return 0;
	RunState st;
	st.r = r;
	st.msg[0] = 0;
	nrt_parallel_for(ntiles, 1, run_tiles, &st);
	if (st.failed.load()) {
		nrt_kernel_fail("%s", st.msg);
		return 1;
	}
	return 0;
}

// ---- building a launch -----------------------------------------------------------------------------

// Op names outlive every record that carries them (nrt_queue_launch keeps the pointer).
const char *intern(const std::string &name)
{
	static std::mutex mu;
	static std::deque<std::string> names;
	std::lock_guard<std::mutex> g(mu);
	for (const auto &n : names)
		if (n == name)
			return n.c_str();
	names.push_back(name);
	return names.back().c_str();
}

struct Launch {
	CustomRec r{};
	const char *op;
	c10::Device dev{c10::DeviceType::CPU};
	bool have_dev = false;
	size_t bytes = 0;
	OpScope scope;
	explicit Launch(const char *name, nk_kernel_fn_t fn) : op(name)
	{
		r.fn = fn, r.name = name;
	}
	void tensor(const at::Tensor &t, bool written)
	{
		TORCH_CHECK(r.nt < NK_CUSTOM_MAX_TENSORS, op, ": more than ", NK_CUSTOM_MAX_TENSORS, " tensor arguments");
		nk_tensor_t &d = r.t[r.nt++];
		if (!t.defined()) { // an absent optional tensor
			d.data = nullptr, d.dtype = -1, d.ndim = 0, d.numel = 0;
			return;
		}
		TORCH_CHECK(t.device().type() == kDev, op, ": expected every tensor on neuron, but argument ", r.nt - 1,
			    " is on ", t.device());
		if (!have_dev)
			dev = t.device(), have_dev = true;
		TORCH_CHECK(t.device() == dev, "Expected all tensors to be on the same device, but found at least two devices, ", dev,
			    " and ", t.device(), "! (when checking argument ", r.nt - 1, " in method ", op, ")");
		TORCH_CHECK(t.dim() <= NK_CUSTOM_MAX_DIMS, op, ": tensors of more than ", NK_CUSTOM_MAX_DIMS,
			    " dimensions are not supported, got ", t.dim());
		d.data = t.numel() ? const_cast<void *>(t.const_data_ptr()) : nullptr;
		d.dtype = nk_dtype(t.scalar_type(), op);
		d.ndim = (int32_t)t.dim();
		d.numel = t.numel();
		for (int64_t i = 0; i < t.dim(); i++)
			d.sizes[i] = t.size(i), d.strides[i] = t.stride(i);
		bytes += (size_t)t.numel() * t.element_size();
		scope.see(t, written);
	}
	void scalar(double f, int64_t i)
	{
		TORCH_CHECK(r.ns < NK_CUSTOM_MAX_SCALARS, op, ": more than ", NK_CUSTOM_MAX_SCALARS, " scalar arguments");
		r.s[r.ns].f = f, r.s[r.ns].i = i;
		r.ns++;
	}
	void go(int64_t grid, int64_t tile)
	{
		TORCH_CHECK(have_dev, op, ": a custom kernel needs at least one neuron tensor argument");
		TORCH_CHECK(grid >= 0, op, ": the grid must be >= 0, got ", grid);
		if (C10_UNLIKELY(scope.refused))
			scope.raise(op);
		if (grid == 0)
			return;
		if (tile <= 0) { // the default: about four tiles per pool thread, at least 1 item each
			int64_t n = 4 * (int64_t)nrt_num_threads();
			tile = std::max<int64_t>(1, (grid + n - 1) / n);
		}
		r.grid = grid, r.tile = tile;
		DeviceScope ds(dev.index());
		size_t size = offsetof(CustomRec, t) + (size_t)r.nt * sizeof(nk_tensor_t);
		launch_cost(current_queue(dev.index()), custom_run, &r, size, op, bytes);
	}
};

// ---- the Python entry points ------------------------------------------------------------------------

// _kernel_name(str) -> int: the interned op name (an address records may carry)
PyObject *py_kernel_name(PyObject *, PyObject *arg)
{
	HANDLE_TH_ERRORS
	TORCH_CHECK(PyUnicode_Check(arg), "_kernel_name: expected a str");
	return PyLong_FromVoidPtr(const_cast<char *>(intern(PyUnicode_AsUTF8(arg))));
	END_HANDLE_TH_ERRORS
}

at::Tensor unpack_tensor(PyObject *o, const char *op)
{
	if (o == Py_None)
		return at::Tensor();
	TORCH_CHECK(THPVariable_Check(o), op, ": expected a Tensor");
	return THPVariable_Unpack(o);
}

// _kernel_launch(fn, name, tensors, written_mask, scalars, grid, tile): one record on the current queue
// of the tensors' device.  tensors: Tensor or None; scalars: float, int or bool.
PyObject *py_kernel_launch(PyObject *, PyObject *const *args, Py_ssize_t nargs)
{
	HANDLE_TH_ERRORS
	TORCH_CHECK(nargs == 7, "_kernel_launch: expected 7 arguments");
	auto fn = reinterpret_cast<nk_kernel_fn_t>(PyLong_AsVoidPtr(args[0]));
	auto *name = static_cast<const char *>(PyLong_AsVoidPtr(args[1]));
	TORCH_CHECK(fn && name && PyList_Check(args[2]) && PyList_Check(args[4]), "_kernel_launch: bad arguments");
	uint64_t mask = PyLong_AsUnsignedLongLongMask(args[3]);
	int64_t grid = PyLong_AsLongLong(args[5]), tile = PyLong_AsLongLong(args[6]);
	if (PyErr_Occurred())
		return nullptr;
	Launch l(name, fn);
	Py_ssize_t nt = PyList_GET_SIZE(args[2]), ns = PyList_GET_SIZE(args[4]);
	for (Py_ssize_t i = 0; i < nt; i++)
		l.tensor(unpack_tensor(PyList_GET_ITEM(args[2], i), name), (mask >> i) & 1);
	for (Py_ssize_t i = 0; i < ns; i++) {
		PyObject *s = PyList_GET_ITEM(args[4], i);
		if (PyFloat_Check(s)) {
			double f = PyFloat_AS_DOUBLE(s);
			l.scalar(f, std::isfinite(f) ? (int64_t)f : 0);
		} else {
			int64_t v = PyLong_AsLongLong(s);
			if (v == -1 && PyErr_Occurred())
				return nullptr;
			l.scalar((double)v, v);
		}
	}
	{
		pybind11::gil_scoped_release nogil; // a blocking launch (NEURON_LAUNCH_BLOCKING) runs the kernel here
		l.go(grid, tile);
	}
	Py_RETURN_NONE;
	END_HANDLE_TH_ERRORS
}

// ---- the boxed fast path ---------------------------------------------------------------------------

// How the glue runs an op without Python: its outputs are new contiguous tensors shaped like one of
// its tensor arguments (or like it without its last dimension), its grid one of numel / rows / size(d) of an argument, or a constant.
struct FastSpec {
	nk_kernel_fn_t fn;
	const char *name;
	std::vector<int> like;   // per return: 2 * the argument index it is shaped like, + 1 without the last dim
	int grid_kind, grid_arg; // 0 constant (grid_val), 1 numel, 2 rows (numel / size(-1)), 3 size(grid_val)
	int64_t grid_val, tile;
	bool contiguous;         // inputs made contiguous before the launch
};

struct FastKernel final : c10::OperatorKernel {
	FastSpec spec;
	explicit FastKernel(FastSpec s) : spec(std::move(s)) {}

	int64_t grid_of(const at::Tensor &t) const
	{
		switch (spec.grid_kind) {
		case 1: return t.numel();
		case 2: return t.dim() == 0 ? 1 : (t.size(-1) ? t.numel() / t.size(-1) : 0);
		case 3:
			TORCH_CHECK(spec.grid_val < t.dim() && spec.grid_val >= -t.dim(), spec.name, ": grid size(", spec.grid_val,
				    ") of a ", t.dim(), "-d tensor");
			return t.size(spec.grid_val);
		default: return spec.grid_val;
		}
	}

	void operator()(const c10::OperatorHandle &op, c10::DispatchKeySet, torch::jit::Stack *stack)
	{
		const auto &schema = op.schema();
		const auto &formals = schema.arguments();
		size_t n = formals.size(), base = stack->size() - n;
		Launch l(spec.name, spec.fn);
		std::vector<at::Tensor> keep; // contiguous copies live until the launch has copied their pointers
		keep.reserve(n + spec.like.size());
		int64_t grid = spec.grid_val;
		for (size_t i = 0; i < n; i++) {
			const c10::IValue &v = (*stack)[base + i];
			if (v.isTensor() || v.isNone()) {
				at::Tensor t = v.isTensor() ? v.toTensor() : at::Tensor();
				bool written = formals[i].alias_info() && formals[i].alias_info()->isWrite();
				if (t.defined() && spec.contiguous && !written && !t.is_contiguous())
					t = t.contiguous();
				keep.push_back(t);
				if ((int)i == spec.grid_arg && t.defined())
					grid = grid_of(t);
				l.tensor(keep.back(), written);
			} else if (v.isDouble()) {
				double f = v.toDouble();
				l.scalar(f, std::isfinite(f) ? (int64_t)f : 0);
			} else if (v.isInt() || v.isSymInt()) {
				int64_t x = v.isInt() ? v.toInt() : v.toSymInt().expect_int();
				l.scalar((double)x, x);
			} else if (v.isBool()) {
				l.scalar(v.toBool() ? 1.0 : 0.0, v.toBool());
			} else {
				TORCH_CHECK(false, spec.name, ": argument ", formals[i].name(), " has a type custom kernels do not take");
			}
		}
		std::vector<at::Tensor> outs;
		for (int a : spec.like) {
			const at::Tensor &src = (*stack)[base + a / 2].toTensor();
			auto sizes = src.sizes();
			if (a % 2)
				sizes = sizes.slice(0, std::max<size_t>(sizes.size(), 1) - 1);
			outs.push_back(at::empty(sizes, src.options().memory_format(c10::MemoryFormat::Contiguous)));
			l.tensor(outs.back(), true);
		}
		l.go(grid, spec.tile);
		torch::jit::drop(*stack, n);
		for (auto &o : outs)
			stack->emplace_back(std::move(o));
	}
};

std::mutex g_reg_mu;
std::map<std::string, std::unique_ptr<torch::Library>> g_libs; // kept alive: dropping one deregisters it

// _kernel_register(qualname, fn, like, grid_kind, grid_arg, grid_val, tile, contiguous): the boxed
// PrivateUse1 kernel of an op defined (torch.library) before this call.
PyObject *py_kernel_register(PyObject *, PyObject *const *args, Py_ssize_t nargs)
{
	HANDLE_TH_ERRORS
	TORCH_CHECK(nargs == 8 && PyUnicode_Check(args[0]) && PyTuple_Check(args[2]), "_kernel_register: bad arguments");
	std::string qual = PyUnicode_AsUTF8(args[0]);
	auto sep = qual.find("::");
	TORCH_CHECK(sep != std::string::npos, "_kernel_register: expected ns::name, got ", qual);
	FastSpec s;
	s.fn = reinterpret_cast<nk_kernel_fn_t>(PyLong_AsVoidPtr(args[1]));
	s.name = intern(qual);
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[2]); i++)
		s.like.push_back((int)PyLong_AsLong(PyTuple_GET_ITEM(args[2], i)));
	s.grid_kind = (int)PyLong_AsLong(args[3]);
	s.grid_arg = (int)PyLong_AsLong(args[4]);
	s.grid_val = PyLong_AsLongLong(args[5]);
	s.tile = PyLong_AsLongLong(args[6]);
	s.contiguous = PyObject_IsTrue(args[7]);
	if (PyErr_Occurred())
		return nullptr;
	std::lock_guard<std::mutex> g(g_reg_mu);
	g_libs.erase(qual); // a redefinition replaces the kernel
	auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, qual.substr(0, sep), c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
	lib->impl(qual.substr(sep + 2).c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<FastKernel>(std::move(s))));
	g_libs[qual] = std::move(lib);
	Py_RETURN_NONE;
	END_HANDLE_TH_ERRORS
}

PyObject *py_kernel_unregister(PyObject *, PyObject *arg)
{
	HANDLE_TH_ERRORS
	std::lock_guard<std::mutex> g(g_reg_mu);
	g_libs.erase(PyUnicode_AsUTF8(arg));
	Py_RETURN_NONE;
	END_HANDLE_TH_ERRORS
}

PyMethodDef custom_methods[] = {
	{"_kernel_name", py_kernel_name, METH_O, "Intern an op name for kernel records; returns its address."},
	{"_kernel_launch", (PyCFunction)(void (*)(void))py_kernel_launch, METH_FASTCALL, "Launch a custom kernel (nk_custom.h)."},
	{"_kernel_register", (PyCFunction)(void (*)(void))py_kernel_register, METH_FASTCALL, "Register the boxed kernel of a custom op."},
	{"_kernel_unregister", py_kernel_unregister, METH_O, "Drop the boxed kernel of a custom op."},
	{nullptr, nullptr, 0, nullptr},
};

// ---- aten::_grouped_mm ------------------------------------------------------------------------------

// The checks of torch's meta function (_meta_grouped_mm_common) and CPU fallback, with their messages;
// strides are not restricted (the GEMM driver takes any).
at::Tensor grouped_mm(const at::Tensor &a, const at::Tensor &b, const std::optional<at::Tensor> &offs_opt,
		      const std::optional<at::Tensor> &bias, std::optional<c10::ScalarType> out_dtype)
{
	NEURON_TRACK("aten::_grouped_mm");
	const char *op = "aten::_grouped_mm";
	auto dt = a.scalar_type();
	TORCH_CHECK(dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf, "Expected mat_a to be Float32, BFloat16 or Float16 matrix, got ", dt);
	TORCH_CHECK(b.scalar_type() == dt, "Expected mat_b to have the dtype of mat_a (", dt, "), got ", b.scalar_type());
	TORCH_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3), "Multiplicands must be 2D or 3D but got mat_a.dim()=",
		    a.dim(), " and mat_b.dim()=", b.dim());
	bool a2 = a.dim() == 2, b2 = b.dim() == 2;
	TORCH_CHECK((a2 && b2) || a.size(-1) == b.size(-2), "contraction dimension of mat_a and mat_b must match");
	at::Tensor offs = opt(offs_opt);
	TORCH_CHECK(offs.defined() == (a2 || b2), "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d");
	if (offs.defined()) {
		TORCH_CHECK(offs.scalar_type() == at::kInt, "Offsets have to be int32");
		TORCH_CHECK(offs.dim() == 1, "Offsets tensor must be 1D, but got offs.dim()=", offs.dim(), ".");
	}
	TORCH_CHECK(!opt(bias).defined(), "Bias tensor provided, but it is not supported yet.");
	TORCH_CHECK(!out_dtype || *out_dtype == dt, "Grouped gemm output dtype must match `mat_a` dtype");
	nk_gemm_grouped_args_t g{};
	std::vector<int64_t> out_size;
	if (a2 && !b2) {
		TORCH_CHECK(offs.size(0) == b.size(0), "matrix batch sizes have to match");
		g.mode = NK_GMM_2D3D, g.G = b.size(0), g.M = a.size(0), g.K = a.size(1), g.N = b.size(2);
		out_size = {g.M, g.N};
	} else if (!a2 && b2) {
		TORCH_CHECK(offs.size(0) == a.size(0), "matrix batch sizes have to match");
		g.mode = NK_GMM_3D2D, g.G = a.size(0), g.M = a.size(1), g.K = a.size(2), g.N = b.size(1);
		out_size = {g.M, g.N};
	} else if (a2 && b2) {
		TORCH_CHECK(a.size(1) == b.size(0), "contraction dimension of mat_a and mat_b must match");
		g.mode = NK_GMM_2D2D, g.G = offs.size(0), g.M = a.size(0), g.K = a.size(1), g.N = b.size(1);
		out_size = {g.G, g.M, g.N};
	} else {
		TORCH_CHECK(a.size(0) == b.size(0), "batched dimension has to match");
		g.mode = NK_GMM_3D3D, g.G = a.size(0), g.M = a.size(1), g.K = a.size(2), g.N = b.size(2);
		out_size = {g.G, g.M, g.N};
	}
	at::Tensor out = at::empty(out_size, a.options());
	if (out.numel() == 0)
		return out;
	auto strides3 = [](const at::Tensor &t, int64_t *s) {
		int64_t o = t.dim() == 3 ? 1 : 0;
		s[0] = o ? t.stride(0) : 0, s[1] = t.stride(o), s[2] = t.stride(o + 1);
	};
	g.dtype = nk_dtype(dt, op);
	g.A = a.const_data_ptr(), g.B = b.const_data_ptr(), g.C = out.data_ptr();
	strides3(a, g.sa), strides3(b, g.sb), strides3(out, g.sc);
	at::Tensor oc = offs.defined() ? offs.contiguous() : offs;
	g.offs = oc.defined() ? oc.const_data_ptr<int32_t>() : nullptr;
	launch(queue_for(out), nk_gemm_grouped_run, g, op);
	return out;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "_grouped_mm", grouped_mm);
}

bool add_custom_kernels(PyObject *m)
{
	return PyModule_AddFunctions(m, custom_methods) == 0;
}

} // namespace neuron
