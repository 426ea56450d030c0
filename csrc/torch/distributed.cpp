// distributed.cpp - the c10d backend "neuron" (torchneuron.distributed registers it): a c10d::Backend
// whose collectives are the C library csrc/ccl over a shared-memory segment per process group.
//
// Neuron tensors: each collective is a launch record on the caller's current queue of the tensors'
// device, so it runs after the work queued before it and before the work queued after it, and an event
// recorded right after the call fences it (FSDP2 relies on this).  Its sequence number is taken at issue
// time, so collectives issued in the same order on every rank run in that order even from different
// queues.  CPU tensors run at once on the calling thread.  Work::wait() blocks until the collective
// ran and raises torch.distributed.DistBackendError if it failed; the Work's future (DDP) completes on
// the backend's completion thread with the output tensors.  Every call is bounded by the group's
// timeout (setTimeout included) inside csrc/ccl; a dead or failed peer fails the survivors at once.
#include "neuron.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <pybind11/chrono.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unistd.h>

#include "flight_recorder.h"

extern "C" {
#include "ncl.h"
}

namespace neuron {
namespace {

using c10d::OpType;
using Tensors = std::vector<at::Tensor>;
using ms = std::chrono::milliseconds;

[[noreturn]] void raise_dist(const std::string &msg)
{
	C10_THROW_ERROR(DistBackendError, msg);
}

std::exception_ptr dist_error(const std::string &msg)
{
	return std::make_exception_ptr(
		c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg));
}

ncl_dtype_t ncl_dtype_of(at::ScalarType t, const char *op)
{
	switch (t) {
	case at::kFloat: return NCL_F32;
	case at::kDouble: return NCL_F64;
	case at::kHalf: return NCL_F16;
	case at::kBFloat16: return NCL_BF16;
	case at::kChar: return NCL_I8;
	case at::kByte: return NCL_U8;
	case at::kShort: return NCL_I16;
	case at::kInt: return NCL_I32;
	case at::kLong: return NCL_I64;
	case at::kBool: return NCL_BOOL;
	// fp8 and other 1-byte types move as bytes (copies only; reductions are refused below)
	case at::kFloat8_e4m3fn:
	case at::kFloat8_e5m2: return NCL_U8;
	default: TORCH_CHECK(false, "neuron backend: ", op, " does not support dtype ", t);
	}
}

const char *redop_name(c10d::ReduceOp::RedOpType op)
{
	static const char *const names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"};
	return (unsigned)op < 9 ? names[op] : "UNUSED";
}

struct RedOp {
	ncl_redop_t op;
	double scale;
};

RedOp ncl_redop_of(const c10d::ReduceOp &r, at::ScalarType t, const char *opname)
{
	RedOp o{NCL_SUM, 1.0};
	switch (r.op_) {
	case c10d::ReduceOp::SUM: o.op = NCL_SUM; break;
	case c10d::ReduceOp::AVG: o.op = NCL_AVG; break;
	case c10d::ReduceOp::PRODUCT: o.op = NCL_PROD; break;
	case c10d::ReduceOp::MIN: o.op = NCL_MIN; break;
	case c10d::ReduceOp::MAX: o.op = NCL_MAX; break;
	case c10d::ReduceOp::BAND: o.op = NCL_BAND; break;
	case c10d::ReduceOp::BOR: o.op = NCL_BOR; break;
	case c10d::ReduceOp::BXOR: o.op = NCL_BXOR; break;
	case c10d::ReduceOp::PREMUL_SUM: {
		o.op = NCL_PREMUL_SUM;
		auto *s = dynamic_cast<c10d::PreMulSumSupplement *>(r.supplement_.get());
		TORCH_CHECK(s, "neuron backend: ", opname, ": PREMUL_SUM without a factor");
		o.scale = s->tensor_factor.defined() ? s->tensor_factor.to(at::kCPU).item<double>() : s->double_factor;
		break;
	}
	default: TORCH_CHECK(false, "neuron backend: ", opname, ": unsupported ReduceOp");
	}
	ncl_dtype_t dt = ncl_dtype_of(t, opname);
	TORCH_CHECK(!(t == at::kFloat8_e4m3fn || t == at::kFloat8_e5m2) && ncl_redop_supported(o.op, dt),
		    "neuron backend: ", opname, ": ReduceOp.", redop_name(r.op_), " is not supported for ", t,
		    " tensors");
	return o;
}

// One collective in flight: what to run, and how it ended.  Shared by the Work, the launch record and
// the completion thread.
struct OpState {
	std::function<int()> run;
	bool deferred = false;   // a send: the launch record hands it to the backend's sender thread
	bool handed_off = false; // ... and did (set before the record completes)
	std::function<void(OpState *)> hand_off;
	std::mutex mu;
	std::condition_variable cv;
	bool ran = false, done = false;
	int status = 0;
	std::string msg;
	int64_t fr_id = -1; // its Flight Recorder entry
};

struct KernelArgs {
	OpState *st;
};

// Runs the collective of st and records how it ended.  In a launch record (in_kernel) a failure also
// becomes the queue's sticky error, for whoever synchronizes the queue first.
int run_op(OpState *st, bool in_kernel)
{
	int rc;
	std::string msg;

	neuron::fr::started(st->fr_id);
	try {
		rc = st->run();
		if (rc)
			msg = ncl_last_error();
	} catch (const std::exception &e) { // the Gloo transport reports its failures as exceptions
		rc = NCL_ERR_PEER;
		msg = e.what();
	}

	if (rc)
		neuron::fr::dump_on_failure();
	else
		neuron::fr::completed(st->fr_id);
	if (rc && in_kernel)
		nrt_kernel_fail("%s", msg.c_str());
	{
		std::lock_guard<std::mutex> g(st->mu);
		st->ran = true;
		st->status = rc;
		st->msg = std::move(msg);
		st->done = true;
	}
	st->cv.notify_all(); // st may be freed once done is seen: touch nothing after this
	return rc ? 1 : 0;
}

// The launch record's function, on the queue's worker (or a thread that drains the queue).
int collective_kernel(void *p)
{
	OpState *st = static_cast<KernelArgs *>(p)->st;

	if (st->deferred) { // the queue moves on; the sender thread runs it (its Work completes then)
		{
			std::lock_guard<std::mutex> g(st->mu);
			st->handed_off = true;
		}
		st->hand_off(st);
		return 0;
	}
	return run_op(st, true);
}

class NeuronWork : public c10d::Work {
      public:
	NeuronWork(int rank, OpType type, const char *title, Tensors outputs, uint64_t seq)
		: c10d::Work(rank, type, title), outputs_(std::move(outputs)), seq_(seq),
		  future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get())))
	{
	}
	~NeuronWork() override
	{
		if (event_)
			nrt_event_destroy(event_);
	}

	std::shared_ptr<OpState> st_ = std::make_shared<OpState>();
	nrt_event_t *event_ = nullptr; // recorded after the launch record; null for CPU tensors
	Tensors inputs_;               // kept alive until the collective ran
	Tensors outputs_;
	uint64_t seq_;
	c10::intrusive_ptr<c10::ivalue::Future> future_;

	// True once the record ran, or was skipped because an earlier kernel of its queue failed.
	bool finished()
	{
		{
			std::lock_guard<std::mutex> g(st_->mu);
			if (st_->done)
				return true;
			if (st_->handed_off)
				return false;
		}
		return event_ && nrt_event_query(event_) == NRT_OK;
	}

	bool isCompleted() override
	{
		return finished();
	}
	bool isSuccess() const override
	{
		std::lock_guard<std::mutex> g(st_->mu);
		return st_->done && st_->status == 0;
	}
	std::exception_ptr exception() const override
	{
		std::lock_guard<std::mutex> g(st_->mu);
		return st_->done && st_->status ? dist_error(st_->msg) : nullptr;
	}
	std::vector<at::Tensor> result() override
	{
		return outputs_;
	}
	uint64_t getSequencenumber() const override
	{
		return seq_;
	}
	std::shared_ptr<std::atomic<int>> source_; // recv from any source: the rank it came from
	int sourceRank() const override
	{
		TORCH_CHECK(source_, "neuron backend: sourceRank() is only defined for a recv from any source");
		return source_->load();
	}
	void synchronize() override
	{
		wait(kNoTimeout);
	}
	bool wait(std::chrono::milliseconds /*timeout: the collective itself is bounded*/) override
	{
		int rc = 0;
		std::string qerr;

		if (event_) {
			rc = nrt_event_synchronize(event_); // also takes the queue's sticky error
			if (rc)
				qerr = nrt_last_error();
		}
		std::unique_lock<std::mutex> g(st_->mu);
		st_->cv.wait(g, [this] { return st_->done || !st_->handed_off; }); // a send on the sender thread
		if (st_->done && st_->status)
			raise_dist(st_->msg);
		if (!st_->done)
			TORCH_CHECK(false, "neuron backend: collective seq ", seq_,
				    " did not run because an earlier kernel on its queue failed: ",
				    rc ? qerr : std::string("(error already reported)"));
		return true;
	}
	c10::intrusive_ptr<c10::ivalue::Future> getFuture() override
	{
		return future_;
	}

	// Completes the future (on the completion thread, or at once for CPU tensors).
	void complete_future()
	{
		bool ok, ran;
		std::string msg;
		{
			std::lock_guard<std::mutex> g(st_->mu);
			ok = st_->done && st_->status == 0;
			ran = st_->done;
			msg = st_->msg;
		}
		if (future_->completed())
			return;
		if (ok)
			future_->markCompleted(c10::IValue(outputs_));
		else if (ran)
			future_->setError(dist_error(msg));
		else
			future_->setError(dist_error("neuron backend: collective seq " + std::to_string(seq_) +
						     " did not run because an earlier kernel on its queue failed"));
		inputs_.clear();
	}
};

// The backend's options: c10d's, copyable from Python (split_group deep-copies the parent's).
struct NeuronOptions : c10d::Backend::Options {
	using c10d::Backend::Options::Options;
};

class NeuronBackend : public c10d::Backend {
      public:
	NeuronBackend(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size, ms timeout,
		      std::string group_name, std::vector<uint64_t> global_ranks = {})
		: c10d::Backend(rank, size), timeout_(timeout), group_name_(std::move(group_name))
	{
		TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "neuron backend: rank ", rank, " of ", size);
		fr_register(std::move(global_ranks));
		const std::string key = "ncl_segment";
		std::string name;
		int rc;

		if (rank == 0) {
			size_t chunk = NCL_CHUNK_BYTES_DEFAULT;
			const char *env = getenv("NEURON_CCL_CHUNK_BYTES");
			static std::atomic<int> serial{0};
			std::random_device rd;

			TORCH_CHECK(!env || ncl_parse_chunk_bytes(env, &chunk) == 0,
				    "NEURON_CCL_CHUNK_BYTES='", env ? env : "",
				    "' is invalid: expected bytes (a multiple of 64, optionally with K/M, KiB/MiB) from "
				    "4096 to 1 GiB");
			name = "/tn-ncl-" + std::to_string(getpid()) + "-" + std::to_string(serial++) + "-" +
			       std::to_string(rd());
			rc = ncl_comm_create(name.c_str(), size, chunk, &comm_);
			if (rc)
				raise_dist(std::string("neuron backend: ") + ncl_last_error());
			store->set(key, std::vector<uint8_t>(name.begin(), name.end()));
		} else {
			store->wait({key}, timeout);
			auto v = store->get(key);
			name.assign(v.begin(), v.end());
			rc = ncl_comm_attach(name.c_str(), rank, size, &comm_);
			if (rc)
				raise_dist(std::string("neuron backend: ") + ncl_last_error());
		}
		rc = ncl_comm_ready(comm_, timeout.count());
		if (rc) {
			std::string msg = ncl_last_error();
			ncl_comm_destroy(comm_);
			comm_ = nullptr;
			raise_dist("neuron backend: " + msg);
		}
		completer_ = std::thread([this] { completion_loop(); });
	}

	// Gloo transport (across hosts, or NEURON_CCL_TRANSPORT=gloo): every collective runs on gloo, built
	// in Python on the same store, over zero-copy CPU aliases of the device buffers.
	NeuronBackend(int rank, int size, ms timeout, std::string group_name, c10::intrusive_ptr<c10d::Backend> gloo,
		      std::vector<uint64_t> global_ranks = {})
		: c10d::Backend(rank, size), timeout_(timeout), group_name_(std::move(group_name)), gloo_(std::move(gloo))
	{
		TORCH_CHECK(gloo_, "neuron backend: no gloo backend given");
		fr_register(std::move(global_ranks));
		if (ncl_order_create(&gloo_order_))
			raise_dist(std::string("neuron backend: ") + ncl_last_error());
		completer_ = std::thread([this] { completion_loop(); });
	}

	~NeuronBackend() override
	{
		try {
			shutdown();
		} catch (...) {
		}
	}

	const std::string getBackendName() const override
	{
		return "neuron";
	}
	c10::intrusive_ptr<Options> getBackendOptions() override
	{
		auto o = c10::make_intrusive<NeuronOptions>("neuron", timeout_);
		o->group_name = group_name_;
		return o;
	}
	void setTimeout(ms timeout) override
	{
		timeout_ = timeout;
	}
	bool supportsSplitting() const override
	{
		return true;
	}
	// A subgroup of this group (split_group, DeviceMesh with a bound device): ranks are this group's
	// ranks, sorted; a rank outside them gets none.  The subgroup is a backend of its own on the split's
	// store; c10d calls split once per device type (neuron, cpu) of the same backend, so the second call
	// returns the first one's backend.
	c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store> &store, const std::vector<int> &ranks,
						const c10::intrusive_ptr<Options> &opts) override
	{
		auto it = std::find(ranks.begin(), ranks.end(), rank_);
		if (it == ranks.end())
			return nullptr;
		int r = (int)(it - ranks.begin()), n = (int)ranks.size();
		ms t = opts ? opts->timeout : timeout_;
		std::string name = opts ? opts->group_name : group_name_ + ":split";
		std::lock_guard<std::mutex> g(split_mu_);
		auto it_s = splits_.find(name);
		if (it_s != splits_.end())
			if (auto b = it_s->second.lock())
				return b;
		c10::intrusive_ptr<c10d::Backend> b;
		std::vector<uint64_t> global;
		for (int m : ranks)
			global.push_back(m >= 0 && (size_t)m < global_ranks_.size() ? global_ranks_[(size_t)m] : (uint64_t)m);
		if (gloo_) { // the subgroup's Gloo is built in Python, as the parent's was
			pybind11::gil_scoped_acquire gil;
			auto make = pybind11::module_::import("torchneuron.distributed").attr("_gloo");
			auto sub = make(store, r, n, t).cast<c10::intrusive_ptr<c10d::Backend>>();
			b = c10::make_intrusive<NeuronBackend>(r, n, t, name, sub, global);
		} else {
			b = c10::make_intrusive<NeuronBackend>(store, r, n, t, name, global);
		}
		splits_.insert_or_assign(name, c10::weak_intrusive_ptr<c10d::Backend>(b));
		return b;
	}
	void setSequenceNumberForGroup() override {} // every rank starts at 0
	uint64_t getSequenceNumberForGroup() override
	{
		return comm_ ? ncl_comm_last_seq(comm_) : ncl_order_last(gloo_order_);
	}
	void abort() override
	{
		if (comm_)
			ncl_comm_abort(comm_);
		if (gloo_) {
			ncl_order_abort(gloo_order_);
			gloo_->abort();
		}
	}
	c10d::ErrorType getError() override
	{
		return error_.load() ? c10d::ErrorType::COMM_ERROR : c10d::ErrorType::SUCCESS;
	}

	// Waits (bounded: every collective is) for the outstanding collectives, then releases the segment.
	void shutdown() override
	{
		{
			std::lock_guard<std::mutex> g(mu_);
			if (stopping_)
				return;
			stopping_ = true;
		}
		cv_.notify_all();
		if (completer_.joinable()) {
			if (PyGILState_Check()) { // future callbacks may need the GIL
				pybind11::gil_scoped_release nogil;
				completer_.join();
			} else {
				completer_.join();
			}
		}
		ncl_worker_destroy(sender_); // runs the sends still queued (each bounded by its timeout)
		sender_ = nullptr;
		ncl_comm_destroy(comm_);
		comm_ = nullptr;
		gloo_.reset();
		ncl_order_destroy(gloo_order_);
		gloo_order_ = nullptr;
	}

	// ---- collectives ------------------------------------------------------------------------------
	c10::intrusive_ptr<c10d::Work> allreduce(Tensors &tensors, const c10d::AllreduceOptions &opts) override
	{
		check_tensors(tensors, "allreduce");
		return allreduce_impl(tensors, opts.reduceOp, opts.timeout, OpType::ALLREDUCE, "nccl:all_reduce");
	}
	c10::intrusive_ptr<c10d::Work> allreduce_coalesced(Tensors &tensors,
							   const c10d::AllreduceCoalescedOptions &opts) override
	{
		check_tensors(tensors, "allreduce_coalesced");
		return allreduce_impl(tensors, opts.reduceOp, opts.timeout, OpType::ALLREDUCE_COALESCED,
				      "nccl:all_reduce_coalesced");
	}

	c10::intrusive_ptr<c10d::Work> reduce(Tensors &tensors, const c10d::ReduceOptions &opts) override
	{
		check_single(tensors, "reduce");
		check_rank(opts.rootRank, "reduce", "root");
		at::Tensor t = tensors[0];
		RedOp ro = ncl_redop_of(opts.reduceOp, t.scalar_type(), "reduce");
		ncl_dtype_t dt = ncl_dtype_of(t.scalar_type(), "reduce");
		int root = (int)opts.rootRank;
		if (gloo_) {
			c10d::ReduceOptions o = opts;
			o.reduceOp = gloo_op(opts.reduceOp);
			o.timeout = effective(opts.timeout);
			return gloo_enqueue(OpType::REDUCE, "nccl:reduce", {t}, {t}, opts.timeout, [=, this] {
				Tensors a = cpu_aliases(Tensors{t});
				wait_gloo(gloo_->reduce(a, o));
				if (rank_ == root)
					gloo_post_scale(a, ro);
			});
		}
		auto calls = take_calls(1, opts.timeout);
		return enqueue(OpType::REDUCE, "nccl:reduce", {t}, {t}, calls, [=, this] {
			return ncl_reduce(comm_, t.data_ptr(), t.data_ptr(), (size_t)t.numel(), dt, ro.op, ro.scale, root,
					  calls[0]);
		});
	}

	c10::intrusive_ptr<c10d::Work> broadcast(Tensors &tensors, const c10d::BroadcastOptions &opts) override
	{
		check_tensors(tensors, "broadcast");
		check_rank(opts.rootRank, "broadcast", "root");
		TORCH_CHECK(opts.rootTensor == 0 || (size_t)opts.rootTensor < tensors.size(),
			    "neuron backend: broadcast: root tensor ", opts.rootTensor, " out of range");
		int root = (int)opts.rootRank;
		Tensors ts = tensors;
		if (gloo_) {
			c10d::BroadcastOptions o = opts;
			o.timeout = effective(opts.timeout);
			return gloo_enqueue(OpType::BROADCAST, "nccl:broadcast", ts, ts, opts.timeout, [=, this] {
				Tensors a = cpu_aliases(ts);
				wait_gloo(gloo_->broadcast(a, o));
			});
		}
		auto calls = take_calls(ts.size(), opts.timeout);
		return enqueue(OpType::BROADCAST, "nccl:broadcast", ts, ts, calls, [=, this] {
			for (size_t i = 0; i < ts.size(); i++) {
				int rc = ncl_broadcast(comm_, ts[i].data_ptr(), (size_t)ts[i].numel(),
						       ncl_dtype_of(ts[i].scalar_type(), "broadcast"), root, calls[i]);
				if (rc)
					return rc;
			}
			return 0;
		});
	}

	c10::intrusive_ptr<c10d::Work> allgather(std::vector<Tensors> &outputs, Tensors &inputs,
						 const c10d::AllgatherOptions &opts) override
	{
		check_single(inputs, "allgather");
		TORCH_CHECK(outputs.size() == 1, "neuron backend: allgather: expected one output list");
		return allgather_lists(outputs, inputs, opts.timeout, OpType::ALLGATHER, "allgather");
	}

	c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<Tensors> &outputs, Tensors &inputs,
							   const c10d::AllgatherOptions &opts) override
	{
		check_tensors(inputs, "allgather_coalesced");
		// c10d's layout is outputs[rank][input]; allgather_lists takes one list of world size per input
		TORCH_CHECK((int)outputs.size() == size_, "neuron backend: allgather_coalesced: ", outputs.size(),
			    " output lists, expected one per rank (", size_, ")");
		std::vector<Tensors> per_input(inputs.size());
		for (size_t r = 0; r < outputs.size(); r++) {
			TORCH_CHECK(outputs[r].size() == inputs.size(), "neuron backend: allgather_coalesced: output list ",
				    r, " has ", outputs[r].size(), " tensors, expected one per input (", inputs.size(), ")");
			for (size_t i = 0; i < inputs.size(); i++)
				per_input[i].push_back(outputs[r][i]);
		}
		return allgather_lists(per_input, inputs, opts.timeout, OpType::ALLGATHER_COALESCED, "allgather_coalesced");
	}

	c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
						       const c10d::AllgatherOptions &opts) override
	{
		Tensors o{output}, i{input};
		return allgather_into(o, i, opts.timeout, OpType::_ALLGATHER_BASE, "_allgather_base");
	}

	c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(Tensors &outputs, Tensors &inputs,
								       const c10d::AllgatherOptions &opts) override
	{
		return allgather_into(outputs, inputs, opts.timeout, OpType::COALESCED, "allgather_into_tensor_coalesced");
	}

	c10::intrusive_ptr<c10d::Work> gather(std::vector<Tensors> &outputs, Tensors &inputs,
					      const c10d::GatherOptions &opts) override
	{
		check_single(inputs, "gather");
		check_rank(opts.rootRank, "gather", "root");
		int root = (int)opts.rootRank;
		at::Tensor in = inputs[0];
		Tensors outs;
		if (rank_ == root) {
			TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_,
				    "neuron backend: gather: the root needs one output list of ", size_, " tensors");
			outs = outputs[0];
			check_like(outs, in, "gather");
		} else {
			TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
				    "neuron backend: gather: only the root takes output tensors");
		}
		ncl_dtype_t dt = ncl_dtype_of(in.scalar_type(), "gather");
		if (gloo_) {
			c10d::GatherOptions o = opts;
			o.timeout = effective(opts.timeout);
			return gloo_enqueue(OpType::GATHER, "nccl:gather", {in}, outs, opts.timeout, [=, this] {
				std::vector<Tensors> ol;
				if (rank_ == root)
					ol.push_back(cpu_aliases(outs));
				Tensors il = cpu_aliases(Tensors{in});
				wait_gloo(gloo_->gather(ol, il, o));
			});
		}
		auto calls = take_calls(1, opts.timeout);
		return enqueue(OpType::GATHER, "nccl:gather", {in}, outs, calls, [=, this] {
			std::vector<void *> recvs;
			for (auto &o : outs)
				recvs.push_back(o.data_ptr());
			return ncl_gather(comm_, in.data_ptr(), recvs.empty() ? nullptr : recvs.data(), (size_t)in.numel(),
					  dt, root, calls[0]);
		});
	}

	c10::intrusive_ptr<c10d::Work> scatter(Tensors &outputs, std::vector<Tensors> &inputs,
					       const c10d::ScatterOptions &opts) override
	{
		check_single(outputs, "scatter");
		check_rank(opts.rootRank, "scatter", "root");
		int root = (int)opts.rootRank;
		at::Tensor out = outputs[0];
		Tensors ins;
		if (rank_ == root) {
			TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
				    "neuron backend: scatter: the root needs one input list of ", size_, " tensors");
			ins = inputs[0];
			check_like(ins, out, "scatter");
		} else {
			TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
				    "neuron backend: scatter: only the root takes input tensors");
		}
		ncl_dtype_t dt = ncl_dtype_of(out.scalar_type(), "scatter");
		if (gloo_) {
			c10d::ScatterOptions o = opts;
			o.timeout = effective(opts.timeout);
			return gloo_enqueue(OpType::SCATTER, "nccl:scatter", ins, {out}, opts.timeout, [=, this] {
				std::vector<Tensors> il;
				if (rank_ == root)
					il.push_back(cpu_aliases(ins));
				Tensors ol = cpu_aliases(Tensors{out});
				wait_gloo(gloo_->scatter(ol, il, o));
			});
		}
		auto calls = take_calls(1, opts.timeout);
		return enqueue(OpType::SCATTER, "nccl:scatter", ins, {out}, calls, [=, this] {
			std::vector<const void *> sends;
			for (auto &i : ins)
				sends.push_back(i.data_ptr());
			return ncl_scatter(comm_, sends.empty() ? nullptr : sends.data(), out.data_ptr(), (size_t)out.numel(),
					   dt, root, calls[0]);
		});
	}

	c10::intrusive_ptr<c10d::Work> reduce_scatter(Tensors &outputs, std::vector<Tensors> &inputs,
						      const c10d::ReduceScatterOptions &opts) override
	{
		check_single(outputs, "reduce_scatter");
		TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
			    "neuron backend: reduce_scatter: expected one input list of ", size_, " tensors");
		at::Tensor out = outputs[0];
		Tensors ins = inputs[0];
		check_like(ins, out, "reduce_scatter");
		RedOp ro = ncl_redop_of(opts.reduceOp, out.scalar_type(), "reduce_scatter");
		ncl_dtype_t dt = ncl_dtype_of(out.scalar_type(), "reduce_scatter");
		if (gloo_) {
			c10d::ReduceScatterOptions o = opts;
			o.reduceOp = gloo_op(opts.reduceOp);
			o.timeout = effective(opts.timeout);
			return gloo_enqueue(OpType::REDUCE_SCATTER, "nccl:reduce_scatter", ins, {out}, opts.timeout, [=, this] {
				Tensors ol = cpu_aliases(Tensors{out});
				std::vector<Tensors> il{cpu_aliases(ins)};
				wait_gloo(gloo_->reduce_scatter(ol, il, o));
				gloo_post_scale(ol, ro);
			});
		}
		auto calls = take_calls(1, opts.timeout);
		return enqueue(OpType::REDUCE_SCATTER, "nccl:reduce_scatter", ins, {out}, calls, [=, this] {
			std::vector<const void *> sends;
			for (auto &i : ins)
				sends.push_back(i.data_ptr());
			return ncl_reduce_scatter(comm_, sends.data(), out.data_ptr(), (size_t)out.numel(), dt, ro.op,
						  ro.scale, calls[0]);
		});
	}

	c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
							    const c10d::ReduceScatterOptions &opts) override
	{
		Tensors o{output}, i{input};
		return reduce_scatter_into(o, i, opts, OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base");
	}

	c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(Tensors &outputs, Tensors &inputs,
								       const c10d::ReduceScatterOptions &opts) override
	{
		return reduce_scatter_into(outputs, inputs, opts, OpType::REDUCE_SCATTER_TENSOR_COALESCED,
					   "reduce_scatter_tensor_coalesced");
	}

	c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
						     std::vector<int64_t> &outputSplits, std::vector<int64_t> &inputSplits,
						     const c10d::AllToAllOptions &opts) override
	{
		Tensors o{output}, i{input};
		check_tensors(o, "alltoall_base");
		check_tensors(i, "alltoall_base");
		TORCH_CHECK(output.scalar_type() == input.scalar_type(), "neuron backend: alltoall_base: dtypes differ");
		auto counts = [&](const at::Tensor &t, const std::vector<int64_t> &splits, const char *which) {
			std::vector<size_t> c((size_t)size_);
			int64_t dim0 = t.dim() ? t.size(0) : 0, row = t.dim() ? t.numel() / std::max<int64_t>(dim0, 1) : 1;
			TORCH_CHECK(t.dim() >= 1 && ncl_split_counts(splits.data(), splits.size(), dim0, row, size_, which,
								     c.data()) == 0,
				    "neuron backend: alltoall_base: ", t.dim() ? ncl_last_error() : "a 0-dim tensor");
			return c;
		};
		std::vector<size_t> sc = counts(input, inputSplits, "input"), rc = counts(output, outputSplits, "output");
		ncl_dtype_t dt = ncl_dtype_of(input.scalar_type(), "alltoall_base");
		size_t esz = ncl_dtype_size(dt);
		if (gloo_) {
			c10d::AllToAllOptions o = opts;
			o.timeout = effective(opts.timeout);
			std::vector<int64_t> os = outputSplits, is = inputSplits;
			return gloo_enqueue(OpType::ALLTOALL_BASE, "nccl:all_to_all", i, Tensors{output}, opts.timeout, [=, this]() mutable {
				at::Tensor oa = cpu_alias(output), ia = cpu_alias(input);
				wait_gloo(gloo_->alltoall_base(oa, ia, os, is, o));
			});
		}
		auto calls = take_calls(1, opts.timeout);
		return enqueue(OpType::ALLTOALL_BASE, "nccl:all_to_all", i, o, calls, [=, this] {
			std::vector<const void *> sends((size_t)size_);
			std::vector<void *> recvs((size_t)size_);
			size_t so = 0, ro = 0;
			for (int p = 0; p < size_; p++) {
				sends[p] = (const char *)input.data_ptr() + so * esz;
				recvs[p] = (char *)output.data_ptr() + ro * esz;
				so += sc[p];
				ro += rc[p];
			}
			return ncl_all_to_all(comm_, sends.data(), sc.data(), recvs.data(), rc.data(), dt, calls[0]);
		});
	}

	c10::intrusive_ptr<c10d::Work> alltoall(Tensors &outputs, Tensors &inputs,
						const c10d::AllToAllOptions &opts) override
	{
		TORCH_CHECK((int)outputs.size() == size_ && (int)inputs.size() == size_,
			    "neuron backend: alltoall: expected ", size_, " input and output tensors");
		check_tensors(outputs, "alltoall");
		check_tensors(inputs, "alltoall");
		ncl_dtype_t dt = ncl_dtype_of(inputs[0].scalar_type(), "alltoall");
		std::vector<size_t> sc, rc;
		for (int p = 0; p < size_; p++) {
			TORCH_CHECK(inputs[p].scalar_type() == inputs[0].scalar_type() &&
					    outputs[p].scalar_type() == inputs[0].scalar_type(),
				    "neuron backend: alltoall: all tensors need the same dtype");
			sc.push_back((size_t)inputs[p].numel());
			rc.push_back((size_t)outputs[p].numel());
		}
		Tensors ins = inputs, outs = outputs;
		if (gloo_) {
			c10d::AllToAllOptions o = opts;
			o.timeout = effective(opts.timeout);
			return gloo_enqueue(OpType::ALLTOALL, "nccl:all_to_all", ins, outs, opts.timeout, [=, this] {
				Tensors oa = cpu_aliases(outs), ia = cpu_aliases(ins);
				wait_gloo(gloo_->alltoall(oa, ia, o));
			});
		}
		auto calls = take_calls(1, opts.timeout);
		return enqueue(OpType::ALLTOALL, "nccl:all_to_all", ins, outs, calls, [=, this] {
			std::vector<const void *> sends;
			std::vector<void *> recvs;
			for (int p = 0; p < size_; p++) {
				sends.push_back(ins[p].data_ptr());
				recvs.push_back(outs[p].data_ptr());
			}
			return ncl_all_to_all(comm_, sends.data(), sc.data(), recvs.data(), rc.data(), dt, calls[0]);
		});
	}

	c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override
	{
		if (gloo_) {
			c10d::BarrierOptions o;
			o.timeout = effective(opts.timeout);
			std::optional<c10::Device> d = opts.device;
			Tensors none;
			if (d && d->type() == kDev) // order it on that device's queue: a 1-element tensor carries the device
				none.push_back(at::empty({0}, at::TensorOptions().device(*d)));
			return gloo_enqueue(OpType::BARRIER, "nccl:barrier", {}, none, opts.timeout,
					    [=, this] { wait_gloo(gloo_->barrier(o)); });
		}
		auto calls = take_calls(1, opts.timeout);
		std::optional<c10::Device> dev = opts.device;
		if (!dev && !opts.device_ids.empty())
			dev = c10::Device(kDev, (c10::DeviceIndex)opts.device_ids[0]);
		if (dev && dev->type() != kDev)
			dev.reset();
		return enqueue_on(dev, OpType::BARRIER, "nccl:barrier", {}, {}, calls,
				  [=, this] { return ncl_barrier(comm_, calls[0]); });
	}

	void monitoredBarrier(const c10d::BarrierOptions &opts, bool waitAllRanks) override
	{
		if (gloo_) {
			c10d::BarrierOptions o = opts;
			o.timeout = effective(opts.timeout);
			gloo_->monitoredBarrier(o, waitAllRanks);
			return;
		}
		auto calls = take_calls(1, opts.timeout);
		if (ncl_barrier(comm_, calls[0]))
			fail_now(ncl_last_error());
	}

	c10::intrusive_ptr<c10d::Work> send(Tensors &tensors, int dst, int tag) override
	{
		check_single(tensors, "send");
		check_rank(dst, "send", "destination");
		TORCH_CHECK(dst != rank_, "neuron backend: send: destination rank ", dst, " is this rank");
		at::Tensor t = tensors[0];
		ncl_dtype_t dt = ncl_dtype_of(t.scalar_type(), "send");
		int64_t tmo = timeout_.count();
		if (gloo_) // not in the collectives' ticket order (Gloo matches messages by tag), and on the sender thread
			return enqueue(OpType::SEND, "nccl:send", {t}, {t}, {}, [=, this] {
				Tensors a = cpu_aliases(Tensors{t});
				wait_gloo(gloo_->send(a, dst, tag));
				return 0;
			}, /*deferred=*/true);
		auto w = enqueue(OpType::SEND, "nccl:send", {t}, {t}, {}, [=, this] {
			return ncl_send(comm_, t.data_ptr(), (size_t)t.numel(), dt, dst, tag, tmo);
		}, /*deferred=*/true);
		return w;
	}

	c10::intrusive_ptr<c10d::Work> recv(Tensors &tensors, int src, int tag) override
	{
		check_single(tensors, "recv");
		check_rank(src, "recv", "source");
		TORCH_CHECK(src != rank_, "neuron backend: recv: source rank ", src, " is this rank");
		at::Tensor t = tensors[0];
		ncl_dtype_t dt = ncl_dtype_of(t.scalar_type(), "recv");
		int64_t tmo = timeout_.count();
		if (gloo_)
			return enqueue(OpType::RECV, "nccl:recv", {t}, {t}, {}, [=, this] {
				Tensors a = cpu_aliases(Tensors{t});
				wait_gloo(gloo_->recv(a, src, tag));
				return 0;
			});
		return enqueue(OpType::RECV, "nccl:recv", {t}, {t}, {}, [=, this] {
			return ncl_recv(comm_, t.data_ptr(), (size_t)t.numel(), dt, src, tag, tmo);
		});
	}

	// recv from whichever rank sends first with this tag; Work::sourceRank() tells which, once waited.
	c10::intrusive_ptr<c10d::Work> recvAnysource(Tensors &tensors, int tag) override
	{
		check_single(tensors, "recv");
		at::Tensor t = tensors[0];
		ncl_dtype_t dt = ncl_dtype_of(t.scalar_type(), "recv");
		int64_t tmo = timeout_.count();
		auto src = std::make_shared<std::atomic<int>>(-1);
		c10::intrusive_ptr<c10d::Work> w;
		if (gloo_)
			w = enqueue(OpType::RECVANYSOURCE, "nccl:recv", {t}, {t}, {}, [=, this] {
				Tensors a = cpu_aliases(Tensors{t});
				auto gw = gloo_->recvAnysource(a, tag);
				wait_gloo(gw);
				src->store(gw->sourceRank());
				return 0;
			});
		else
			w = enqueue(OpType::RECVANYSOURCE, "nccl:recv", {t}, {t}, {}, [=, this] {
				int from = -1, rc = ncl_recv_any(comm_, t.data_ptr(), (size_t)t.numel(), dt, tag, tmo, &from);
				src->store(from);
				return rc;
			});
		static_cast<NeuronWork *>(w.get())->source_ = src;
		return w;
	}

      private:
	ncl_comm_t *comm_ = nullptr;
	ms timeout_;
	std::string group_name_;
	std::vector<uint64_t> global_ranks_; // the group's members' global ranks (Flight Recorder's pg_config)
	size_t fr_pg_ = 0;
	uint64_t p2p_seq_ = 0;

	void fr_register(std::vector<uint64_t> ranks)
	{
		if (ranks.empty())
			for (int r = 0; r < size_; r++)
				ranks.push_back((uint64_t)r);
		global_ranks_ = std::move(ranks);
		fr_pg_ = neuron::fr::add_group(group_name_, group_name_ == "0" ? "default_pg" : "undefined", global_ranks_);
	}
	std::atomic<bool> error_{false};

	std::mutex split_mu_;
	std::map<std::string, c10::weak_intrusive_ptr<c10d::Backend>> splits_;

	c10::intrusive_ptr<c10d::Backend> gloo_;
	ncl_order_t *gloo_order_ = nullptr; // the Gloo calls run in ticket order, as the ncl ones do

	std::mutex send_mu_;            // sender_'s creation
	ncl_worker_t *sender_ = nullptr; // runs the sends; each OpState kept alive by its Work

	std::mutex mu_;
	std::condition_variable cv_;
	std::deque<c10::intrusive_ptr<NeuronWork>> pending_;
	bool stopping_ = false;
	std::thread completer_;

	[[noreturn]] void fail_now(const std::string &msg)
	{
		error_ = true;
		raise_dist(msg);
	}

	void check_usable()
	{
		TORCH_CHECK(comm_ || gloo_, "neuron backend: the process group was shut down");
	}

	void check_rank(int64_t r, const char *op, const char *what)
	{
		TORCH_CHECK(r >= 0 && r < size_, "neuron backend: ", op, ": ", what, " rank ", r,
			    " is out of range (group of ", size_, " ranks)");
	}

	// All tensors dense, contiguous, on one neuron device or all on the CPU.
	void check_tensors(const Tensors &ts, const char *op)
	{
		TORCH_CHECK(!ts.empty(), "neuron backend: ", op, ": no tensors");
		for (const auto &t : ts) {
			TORCH_CHECK(t.layout() == at::kStrided, "neuron backend: ", op, ": only dense tensors are supported");
			TORCH_CHECK(t.is_contiguous(), "neuron backend: ", op, ": tensors must be contiguous");
			TORCH_CHECK(t.device().type() == kDev || t.device().is_cpu(), "neuron backend: ", op,
				    ": tensors must be on neuron or cpu, got ", t.device());
			TORCH_CHECK(t.device() == ts[0].device(), "neuron backend: ", op, ": tensors on ", t.device(),
				    " and ", ts[0].device(), " in one call");
			ncl_dtype_of(t.scalar_type(), op);
		}
	}
	void check_single(const Tensors &ts, const char *op)
	{
		TORCH_CHECK(ts.size() == 1, "neuron backend: ", op, ": expected exactly one tensor, got ", ts.size());
		check_tensors(ts, op);
	}
	// ts alike to ref (dtype, numel, device), and each valid.
	void check_like(const Tensors &ts, const at::Tensor &ref, const char *op)
	{
		Tensors all = ts;
		all.push_back(ref);
		check_tensors(all, op);
		for (const auto &t : ts)
			TORCH_CHECK(t.scalar_type() == ref.scalar_type() && t.numel() == ref.numel(), "neuron backend: ", op,
				    ": tensor of ", t.numel(), " ", t.scalar_type(), " elements where ", ref.numel(), " ",
				    ref.scalar_type(), " are expected");
	}

	ms effective(ms t) const
	{
		return t == c10d::kUnsetTimeout ? timeout_ : t;
	}

	// n sequence tickets, taken now (issue order).
	std::vector<ncl_call_t> take_calls(size_t n, ms t)
	{
		check_usable();
		std::vector<ncl_call_t> calls(n);
		for (auto &c : calls) {
			c.timeout_ms = std::max<int64_t>(effective(t).count(), 1);
			c.seq = comm_ ? ncl_comm_take_seq(comm_) : ncl_order_take(gloo_order_);
		}
		return calls;
	}

	c10::intrusive_ptr<c10d::Work> allreduce_impl(Tensors &tensors, const c10d::ReduceOp &rop, ms t, OpType type,
						      const char *title)
	{
		Tensors ts = tensors;
		std::vector<RedOp> ros;
		for (auto &x : ts)
			ros.push_back(ncl_redop_of(rop, x.scalar_type(), "allreduce"));
		if (gloo_) {
			c10d::AllreduceOptions o;
			o.reduceOp = gloo_op(rop);
			o.timeout = effective(t);
			return gloo_enqueue(type, title, ts, ts, t, [=, this] {
				Tensors a = cpu_aliases(ts);
				if (a.size() == 1) {
					wait_gloo(gloo_->allreduce(a, o));
				} else {
					c10d::AllreduceCoalescedOptions co;
					co.reduceOp = o.reduceOp;
					co.timeout = o.timeout;
					wait_gloo(gloo_->allreduce_coalesced(a, co));
				}
				gloo_post_scale(a, ros[0]);
			});
		}
		auto calls = take_calls(ts.size(), t);
		return enqueue(type, title, ts, ts, calls, [=, this] {
			for (size_t i = 0; i < ts.size(); i++) {
				int rc = ncl_all_reduce(comm_, ts[i].data_ptr(), ts[i].data_ptr(), (size_t)ts[i].numel(),
							ncl_dtype_of(ts[i].scalar_type(), "allreduce"), ros[i].op, ros[i].scale,
							calls[i]);
				if (rc)
					return rc;
			}
			return 0;
		});
	}

	c10::intrusive_ptr<c10d::Work> allgather_lists(std::vector<Tensors> &outputs, Tensors &inputs, ms t, OpType type,
						       const char *op)
	{
		TORCH_CHECK(outputs.size() == inputs.size(), "neuron backend: ", op, ": ", inputs.size(), " inputs but ",
			    outputs.size(), " output lists");
		Tensors all_outs;
		for (size_t i = 0; i < inputs.size(); i++) {
			TORCH_CHECK((int)outputs[i].size() == size_, "neuron backend: ", op, ": output list ", i, " has ",
				    outputs[i].size(), " tensors, expected ", size_);
			check_like(outputs[i], inputs[i], op);
			all_outs.insert(all_outs.end(), outputs[i].begin(), outputs[i].end());
		}
		Tensors ins = inputs;
		std::vector<Tensors> outs = outputs;
		if (gloo_) {
			c10d::AllgatherOptions o;
			o.timeout = effective(t);
			return gloo_enqueue(type, "nccl:all_gather", ins, all_outs, t, [=, this] {
				std::vector<Tensors> oa = cpu_aliases(outs);
				Tensors ia = cpu_aliases(ins);
				if (ins.size() == 1) {
					wait_gloo(gloo_->allgather(oa, ia, o));
				} else {  // Gloo's allgather_coalesced takes outputs[rank][input]
					std::vector<Tensors> by_rank(size_);
					for (auto &list : oa)
						for (int r = 0; r < size_; r++)
							by_rank[r].push_back(list[r]);
					wait_gloo(gloo_->allgather_coalesced(by_rank, ia, o));
				}
			});
		}
		auto calls = take_calls(ins.size(), t);
		return enqueue(type, "nccl:all_gather", ins, all_outs, calls, [=, this] {
			for (size_t i = 0; i < ins.size(); i++) {
				std::vector<void *> recvs;
				for (auto &o : outs[i])
					recvs.push_back(o.data_ptr());
				int rc = ncl_all_gather(comm_, ins[i].data_ptr(), recvs.data(), (size_t)ins[i].numel(),
							ncl_dtype_of(ins[i].scalar_type(), "allgather"), calls[i]);
				if (rc)
					return rc;
			}
			return 0;
		});
	}

	c10::intrusive_ptr<c10d::Work> allgather_into(Tensors &outputs, Tensors &inputs, ms t, OpType type, const char *op)
	{
		TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(), "neuron backend: ", op, ": ",
			    inputs.size(), " inputs but ", outputs.size(), " outputs");
		Tensors all = inputs;
		all.insert(all.end(), outputs.begin(), outputs.end());
		check_tensors(all, op);
		for (size_t i = 0; i < inputs.size(); i++)
			TORCH_CHECK(outputs[i].scalar_type() == inputs[i].scalar_type() &&
					    outputs[i].numel() == inputs[i].numel() * size_,
				    "neuron backend: ", op, ": output tensor must have ", size_, " x ", inputs[i].numel(),
				    " = ", inputs[i].numel() * size_, " elements of ", inputs[i].scalar_type(), ", got ",
				    outputs[i].numel(), " of ", outputs[i].scalar_type());
		Tensors ins = inputs, outs = outputs;
		if (gloo_) {
			c10d::AllgatherOptions o;
			o.timeout = effective(t);
			return gloo_enqueue(type, "nccl:all_gather", ins, outs, t, [=, this] {
				for (size_t i = 0; i < ins.size(); i++) {
					at::Tensor oa = cpu_alias(outs[i]), ia = cpu_alias(ins[i]);
					wait_gloo(gloo_->_allgather_base(oa, ia, o));
				}
			});
		}
		auto calls = take_calls(ins.size(), t);
		return enqueue(type, "nccl:all_gather", ins, outs, calls, [=, this] {
			for (size_t i = 0; i < ins.size(); i++) {
				ncl_dtype_t dt = ncl_dtype_of(ins[i].scalar_type(), "allgather");
				size_t n = (size_t)ins[i].numel(), bytes = n * ncl_dtype_size(dt);
				std::vector<void *> recvs;
				for (int p = 0; p < size_; p++)
					recvs.push_back((char *)outs[i].data_ptr() + (size_t)p * bytes);
				int rc = ncl_all_gather(comm_, ins[i].data_ptr(), recvs.data(), n, dt, calls[i]);
				if (rc)
					return rc;
			}
			return 0;
		});
	}

	c10::intrusive_ptr<c10d::Work> reduce_scatter_into(Tensors &outputs, Tensors &inputs,
							   const c10d::ReduceScatterOptions &opts, OpType type, const char *op)
	{
		TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(), "neuron backend: ", op, ": ",
			    inputs.size(), " inputs but ", outputs.size(), " outputs");
		Tensors all = inputs;
		all.insert(all.end(), outputs.begin(), outputs.end());
		check_tensors(all, op);
		std::vector<RedOp> ros;
		for (size_t i = 0; i < inputs.size(); i++) {
			TORCH_CHECK(outputs[i].scalar_type() == inputs[i].scalar_type() &&
					    inputs[i].numel() == outputs[i].numel() * size_,
				    "neuron backend: ", op, ": input tensor must have ", size_, " x ", outputs[i].numel(),
				    " = ", outputs[i].numel() * size_, " elements of ", outputs[i].scalar_type(), ", got ",
				    inputs[i].numel(), " of ", inputs[i].scalar_type());
			ros.push_back(ncl_redop_of(opts.reduceOp, outputs[i].scalar_type(), op));
		}
		Tensors ins = inputs, outs = outputs;
		if (gloo_) {
			c10d::ReduceScatterOptions o = opts;
			o.reduceOp = gloo_op(opts.reduceOp);
			o.timeout = effective(opts.timeout);
			return gloo_enqueue(type, "nccl:reduce_scatter", ins, outs, opts.timeout, [=, this] {
				for (size_t i = 0; i < ins.size(); i++) {
					at::Tensor oa = cpu_alias(outs[i]), ia = cpu_alias(ins[i]);
					wait_gloo(gloo_->_reduce_scatter_base(oa, ia, o));
					gloo_post_scale(Tensors{oa}, ros[i]);
				}
			});
		}
		auto calls = take_calls(ins.size(), opts.timeout);
		return enqueue(type, "nccl:reduce_scatter", ins, outs, calls, [=, this] {
			for (size_t i = 0; i < ins.size(); i++) {
				ncl_dtype_t dt = ncl_dtype_of(outs[i].scalar_type(), "reduce_scatter");
				size_t n = (size_t)outs[i].numel(), bytes = n * ncl_dtype_size(dt);
				std::vector<const void *> sends;
				for (int p = 0; p < size_; p++)
					sends.push_back((const char *)ins[i].data_ptr() + (size_t)p * bytes);
				int rc = ncl_reduce_scatter(comm_, sends.data(), outs[i].data_ptr(), n, dt, ros[i].op,
							    ros[i].scale, calls[i]);
				if (rc)
					return rc;
			}
			return 0;
		});
	}

	// ---- the Gloo transport ---------------------------------------------------------------------------
	static at::Tensor cpu_alias(const at::Tensor &t)
	{
		if (t.device().is_cpu())
			return t;
		return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), [keep = t](void *) {},
				     t.options().device(at::kCPU));
	}
	static Tensors cpu_aliases(const Tensors &ts)
	{
		Tensors r;
		for (const auto &t : ts)
			r.push_back(cpu_alias(t));
		return r;
	}
	static std::vector<Tensors> cpu_aliases(const std::vector<Tensors> &ls)
	{
		std::vector<Tensors> r;
		for (const auto &l : ls)
			r.push_back(cpu_aliases(l));
		return r;
	}
	// Gloo has no PREMUL_SUM and no AVG for every dtype: run SUM, then scale the outputs.
	c10d::ReduceOp gloo_op(const c10d::ReduceOp &r) const
	{
		return (r.op_ == c10d::ReduceOp::PREMUL_SUM || r.op_ == c10d::ReduceOp::AVG) ? c10d::ReduceOp(c10d::ReduceOp::SUM)
											     : r;
	}
	void gloo_post_scale(const Tensors &outs, const RedOp &ro) const
	{
		if (ro.op == NCL_AVG)
			for (auto t : outs)
				t.div_(size_);
		else if (ro.op == NCL_PREMUL_SUM)
			for (auto t : outs)
				t.mul_(ro.scale);
	}
	// Runs issue() (a Gloo call on CPU aliases) and waits for it, on the tensors' queue in ticket order.
	c10::intrusive_ptr<c10d::Work> gloo_enqueue(OpType type, const char *title, Tensors inputs, Tensors outputs, ms t,
						    std::function<void()> issue)
	{
		auto calls = take_calls(1, t);
		uint64_t seq = calls[0].seq;
		int64_t tmo = calls[0].timeout_ms;
		return enqueue(type, title, std::move(inputs), std::move(outputs), calls, [=, this] {
			if (ncl_order_wait(gloo_order_, seq, tmo, "neuron backend (gloo transport)"))
				throw std::runtime_error(ncl_last_error());
			struct Done { // the next collective's turn, however this one ends
				ncl_order_t *o;
				uint64_t seq;
				~Done() { ncl_order_done(o, seq); }
			} done{gloo_order_, seq};
			issue();
			return 0;
		});
	}
	static void wait_gloo(const c10::intrusive_ptr<c10d::Work> &w)
	{
		w->wait();
	}

	c10::intrusive_ptr<c10d::Work> enqueue(OpType type, const char *title, Tensors inputs, Tensors outputs,
					       const std::vector<ncl_call_t> &calls, std::function<int()> run,
					       bool deferred = false)
	{
		const Tensors &ref = outputs.empty() ? inputs : outputs;
		std::optional<c10::Device> dev;
		if (!ref.empty() && ref[0].device().type() == kDev)
			dev = ref[0].device();
		return enqueue_on(dev, type, title, std::move(inputs), std::move(outputs), calls, std::move(run), deferred);
	}

	// The sender thread (csrc/ccl's worker) runs the sends that launch records handed to it, in order.  A
	// send then does not hold its queue while the peer is not yet receiving, so two ranks that both send
	// before they receive (batch_isend_irecv) do not wait for each other.
	void hand_off_send(OpState *st)
	{
		std::lock_guard<std::mutex> g(send_mu_);
		if (!sender_)
			ncl_worker_create(&sender_);
		if (!sender_ || ncl_worker_submit(sender_, [](void *p) { run_op(static_cast<OpState *>(p), false); }, st)) {
			std::string msg = ncl_last_error();
			{
				std::lock_guard<std::mutex> sg(st->mu);
				st->ran = st->done = true;
				st->status = NCL_ERR_HOST;
				st->msg = "neuron backend: send: " + msg;
			}
			st->cv.notify_all();
		}
	}

	// dev: a neuron device, whose current queue runs the collective; none: run it now on this thread.
	c10::intrusive_ptr<c10d::Work> enqueue_on(std::optional<c10::Device> dev, OpType type, const char *title,
						  Tensors inputs, Tensors outputs, const std::vector<ncl_call_t> &calls,
						  std::function<int()> run, bool deferred = false)
	{
		check_usable();
		bool p2p = type == OpType::SEND || type == OpType::RECV || type == OpType::RECVANYSOURCE;
		int64_t fr_id = neuron::fr::record(fr_pg_, calls.empty() ? 0 : calls[0].seq, p2p ? ++p2p_seq_ : 0, p2p,
						   title, fr_meta(inputs), fr_meta(outputs),
						   calls.empty() ? timeout_.count() : calls[0].timeout_ms);
		auto work = c10::make_intrusive<NeuronWork>(rank_, type, title, std::move(outputs),
							    calls.empty() ? 0 : calls[0].seq);
		work->st_->fr_id = fr_id;
		work->inputs_ = std::move(inputs);
		work->st_->run = std::move(run);
		if (dev && deferred) {
			work->st_->deferred = true;
			work->st_->hand_off = [this](OpState *st) { hand_off_send(st); };
		}
		if (!dev) {
			collective_kernel_now(*work);
			return work;
		}
		DeviceScope scope(dev->index());
		nrt_queue_t *q = current_queue(dev->index());
		NEURON_CHECK(nrt_event_create(dev->index(), 0, &work->event_), "neuron backend: event");
		KernelArgs args{work->st_.get()};
		NEURON_CHECK(nrt_queue_launch(q, collective_kernel, &args, sizeof args, "c10d collective"), title);
		NEURON_CHECK(nrt_event_record(work->event_, q), title);
		{
			std::lock_guard<std::mutex> g(mu_);
			pending_.push_back(work);
		}
		cv_.notify_one();
		return work;
	}

	static std::vector<neuron::fr::TensorMeta> fr_meta(const Tensors &ts)
	{
		std::vector<neuron::fr::TensorMeta> out;
		for (const auto &t : ts)
			out.push_back({t.sizes().vec(), c10::toString(t.scalar_type())});
		return out;
	}

	void collective_kernel_now(NeuronWork &w)
	{
		if (run_op(w.st_.get(), false))
			error_ = true;
		w.complete_future();
	}

	// Completes the futures of device collectives in issue order, once each has run (or was skipped).
	void completion_loop()
	{
		std::unique_lock<std::mutex> lk(mu_);
		for (;;) {
			cv_.wait(lk, [this] { return stopping_ || !pending_.empty(); });
			if (pending_.empty()) {
				if (stopping_)
					return;
				continue;
			}
			auto w = pending_.front();
			lk.unlock();
			{
				std::unique_lock<std::mutex> g(w->st_->mu);
				while (!w->st_->done) {
					w->st_->cv.wait_for(g, std::chrono::milliseconds(10));
					if (!w->st_->done && !w->st_->handed_off && nrt_event_query(w->event_) == NRT_OK)
						break; // skipped: an earlier kernel of its queue failed
				}
			}
			if (!w->isSuccess())
				error_ = true;
			try {
				w->complete_future();
			} catch (...) {
			}
			lk.lock();
			pending_.pop_front();
		}
	}
};

c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
						 ms timeout, const std::string &group_name,
						 const std::vector<uint64_t> &global_ranks)
{
	return c10::make_intrusive<NeuronBackend>(store, rank, size, timeout, group_name, global_ranks);
}

c10::intrusive_ptr<c10d::Backend> create_gloo_backend(int rank, int size, ms timeout, const std::string &group_name,
						      const c10::intrusive_ptr<c10d::Backend> &gloo,
						      const std::vector<uint64_t> &global_ranks)
{
	return c10::make_intrusive<NeuronBackend>(rank, size, timeout, group_name, gloo, global_ranks);
}

} // namespace

// NeuronBackend as a Python type of its own (a subclass of c10d's Backend), for the methods c10d calls
// on a split source beyond Backend's: perform_nocolor_split, on the ranks outside a new subgroup (our
// split needs nothing from them).  Registered once torch.distributed has registered Backend.
void init_backend_type(pybind11::module_ &m)
{
	if (pybind11::hasattr(m, "NeuronBackend"))
		return;
	pybind11::class_<NeuronBackend, c10d::Backend, c10::intrusive_ptr<NeuronBackend>> cls(m, "NeuronBackend");
	cls.def("perform_nocolor_split", [](NeuronBackend &, const c10::Device &) {})
		.def_property_readonly("options", &NeuronBackend::getBackendOptions);
	pybind11::class_<NeuronOptions, c10d::Backend::Options, c10::intrusive_ptr<NeuronOptions>>(cls, "Options")
		.def("__deepcopy__", [](const NeuronOptions &o, pybind11::dict) { return c10::make_intrusive<NeuronOptions>(o); })
		.def("__copy__", [](const NeuronOptions &o) { return c10::make_intrusive<NeuronOptions>(o); });
}

void register_distributed(pybind11::module_ &m)
{
	m.def("_ncl_init_types", [m]() mutable { init_backend_type(m); },
	      "registers the Python type of the backend (after torch.distributed is imported)");
	m.def("_ncl_create_gloo_backend", &create_gloo_backend,
	      "the c10d backend 'neuron' over a ProcessGroupGloo (across hosts, or NEURON_CCL_TRANSPORT=gloo)",
	      pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"), pybind11::arg("group_name"),
	      pybind11::arg("gloo"), pybind11::arg("global_ranks") = std::vector<uint64_t>());
	m.def("_ncl_create_backend", &create_backend, "the c10d backend 'neuron' for one process group",
	      pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
	      pybind11::arg("group_name"), pybind11::arg("global_ranks") = std::vector<uint64_t>());
	m.def("_fr_dump", [] { return pybind11::bytes(neuron::fr::dump()); },
	      "this process's Flight Recorder dump (pickled, as torchfrtrace reads it)");
}

bool add_distributed(PyObject *m)
{
	try {
		auto mod = pybind11::reinterpret_borrow<pybind11::module_>(m);
		register_distributed(mod);
		return true;
	} catch (pybind11::error_already_set &e) {
		e.restore();
		return false;
	}
}

} // namespace neuron
