// neuron.h - shared pieces of the C++ glue: the runtime check macro, streams, dtype mapping, op
// tracking and the launch helper.  Only the glue (csrc/torch) includes PyTorch headers.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <string>
#include <tuple>
#include <vector>

namespace at {
class TensorBase;
} // namespace at
namespace c10 {
class OperatorHandle;
struct IValue;
} // namespace c10
namespace torch::jit {
using Stack = std::vector<c10::IValue>;
} // namespace torch::jit

extern "C" {
#include "nrt.h"
#include "nk.h"
}

namespace neuron {

constexpr c10::DeviceType kDev = c10::DeviceType::PrivateUse1;

// Raise a c10 error for a failed runtime call: OOM becomes torch.OutOfMemoryError, the rest a
// RuntimeError; `what` names the operation.
[[noreturn]] void raise_status(int status, const char *what);
#define NEURON_CHECK(call, what)                                  \
	do {                                                      \
		int neuron_st_ = (call);                          \
		if (C10_UNLIKELY(neuron_st_ != 0))                \
			::neuron::raise_status(neuron_st_, (what)); \
	} while (0)

// Initializes the runtime on first use; raises (naming the environment variable) on bad settings.
void lazy_init();
int device_count_noexcept() noexcept;
void check_device_index(c10::DeviceIndex idx);

// Current device and stream (thread-local, like CUDA).
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex idx);
c10::Stream current_stream(c10::DeviceIndex idx);
void set_current_stream(const c10::Stream &s);
nrt_queue_t *queue_of(const c10::Stream &s);
nrt_queue_t *current_queue(c10::DeviceIndex idx);

int nk_dtype(c10::ScalarType t, const char *op);

// Launch a kernel on queue q: args are copied into the queue's ring.  Raises on launch failure
// (and, with NEURON_LAUNCH_BLOCKING=1, on kernel failure).
void launch(nrt_queue_t *q, nrt_kernel_fn fn, const void *args, size_t size, const char *name);
template <typename A> inline void launch(nrt_queue_t *q, nrt_kernel_fn fn, const A &args, const char *name)
{
	static_assert(sizeof(A) <= NRT_MAX_ARGS, "kernel arguments too large");
	launch(q, fn, &args, sizeof(A), name);
}
// launch with an estimate of the kernel's work in bytes (read + written; compute-bound kernels an
// equivalent): small kernels on an idle queue run at once on the calling thread (nrt_queue_launch_cost),
// which saves the hand-off to the queue worker.  Same semantics as launch otherwise.
void launch_cost(nrt_queue_t *q, nrt_kernel_fn fn, const void *args, size_t size, const char *name, size_t cost);
template <typename A>
inline void launch_cost(nrt_queue_t *q, nrt_kernel_fn fn, const A &args, const char *name, size_t cost)
{
	static_assert(sizeof(A) <= NRT_MAX_ARGS, "kernel arguments too large");
	launch_cost(q, fn, &args, sizeof(A), name, cost);
}

// Makes idx the current device for the scope; free when it already is (the common case), unlike
// c10::DeviceGuard, which goes through the virtual guard interface twice.
struct DeviceScope {
	c10::DeviceIndex old_ = -1;
	explicit DeviceScope(c10::DeviceIndex idx);
	~DeviceScope();
	DeviceScope(const DeviceScope &) = delete;
	DeviceScope &operator=(const DeviceScope &) = delete;
};
void sync_queue(nrt_queue_t *q, const char *what);
void sync_device(c10::DeviceIndex idx, const char *what);
// Raises the error of the failed (or skipped) kernel that should have written t's storage (runtime
// poison, nrt_check_readable); call before reading a neuron tensor's bytes, after its producer is done.
void check_readable(const at::TensorBase &t, const char *what);

// Op tracking: every native wrapper calls NEURON_TRACK("aten::name.overload"); the fallback records
// its ops itself.  Cheap: one relaxed atomic load per call after the first in an epoch.
struct OpSlot {
	const char *name;
	std::atomic<uint64_t> epoch{0};
	explicit OpSlot(const char *n) : name(n) {}
	void hit();
};
#define NEURON_TRACK(opname)                               \
	do {                                               \
		static ::neuron::OpSlot neuron_slot_{opname}; \
		neuron_slot_.hit();                        \
	} while (0)
void track_executed(const std::string &name);
void track_fallback(const std::string &name);
// Tensors created on neuron per dtype (count and bytes) since the last clear: `torchneuron check` reports
// float64 / int64 use (computed natively here).  One relaxed atomic add per allocation.
void track_dtype(c10::ScalarType t, int64_t bytes);
std::vector<std::tuple<std::string, int64_t, int64_t>> created_dtypes();

// The boxed CPU fallback (ops_core.cpp), for native wrappers that hand unsupported cases to the CPU
// through at::native::call_fallback_fn<&cpu_fallback, at::_ops::name>::call(...).
void cpu_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack);

} // namespace neuron
