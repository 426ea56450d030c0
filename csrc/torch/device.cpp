// device.cpp - the runtime seen from PyTorch: errors, lazy init, device guard with streams and
// events, the caching device allocator, pinned host memory, PrivateUse1 hooks and the generator.
#include "neuron.h"

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/empty.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <vector>

namespace neuron {

// ---- errors and init ---------------------------------------------------------------------------

// A kernel error the CPU raises as IndexError (TORCH_CHECK_INDEX) carries the runtime's NRT_INDEX_ERROR
// tag in front of the kernel's message: it is raised as IndexError, without the tag.
void raise_status(int status, const char *what)
{
	const char *detail = nrt_last_error();
	if (status == NRT_ERR_OOM)
		TORCH_CHECK_WITH(OutOfMemoryError, false, what, ": ", detail);
	if (status == NRT_ERR_KERNEL && detail) {
		if (const char *tag = std::strstr(detail, NRT_INDEX_ERROR)) {
			std::string msg = std::string(detail, tag) + (tag + sizeof NRT_INDEX_ERROR - 1);
			TORCH_CHECK_INDEX(false, what, ": ", msg);
		}
	}
	TORCH_CHECK(false, what, ": ", (detail && *detail) ? detail : nrt_status_string(status));
}

void lazy_init()
{
	static std::atomic<bool> ok{false};
	// a forked child inherits ok: the runtime refuses it (NRT_ERR_FORK, CUDA's message)
	if (C10_LIKELY(ok.load(std::memory_order_acquire) && !nrt_in_forked_child()))
		return;
	int st = nrt_init();
	if (st == NRT_ERR_FORK)
		TORCH_CHECK(false, nrt_last_error());
	if (st != 0)
		TORCH_CHECK(false, "neuron: cannot initialize the runtime: ", nrt_last_error());
	ok.store(true, std::memory_order_release);
}

int device_count_noexcept() noexcept
{
	return nrt_init() == 0 ? nrt_device_count() : 0;
}

void check_device_index(c10::DeviceIndex idx)
{
	lazy_init();
	int n = nrt_device_count();
	TORCH_CHECK(idx >= 0 && idx < n, "neuron: invalid device index neuron:", (int)idx, ": ", n,
		    n == 1 ? " device is" : " devices are", " visible (NEURON_RT_VISIBLE_CORES)");
}

// ---- current device and stream -----------------------------------------------------------------

static thread_local c10::DeviceIndex tl_device = 0;
static thread_local int tl_stream[64]; // current queue id per device (0 = default queue)

c10::DeviceIndex current_device() { return tl_device; }

void set_current_device(c10::DeviceIndex idx)
{
	check_device_index(idx);
	tl_device = idx;
}

c10::Stream current_stream(c10::DeviceIndex idx)
{
	if (idx < 0)
		idx = tl_device;
	return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, idx), tl_stream[idx & 63]);
}

void set_current_stream(const c10::Stream &s)
{
	tl_stream[s.device_index() & 63] = (int)s.id();
}

nrt_queue_t *queue_of(const c10::Stream &s)
{
	lazy_init();
	nrt_queue_t *q = nrt_queue_by_id(s.device_index(), (int)s.id());
	TORCH_CHECK(q, "neuron: unknown stream ", s.id(), " on neuron:", (int)s.device_index());
	return q;
}

// Per-thread cache of the current queue of each device: the (device, stream id) -> queue lookup takes
// the runtime's queue-list lock, which is too much for every launch and allocation.  Stream ids are
// never reused, so an entry stays right until the thread's current stream changes.
struct QueueCacheEntry {
	int id = -1;
	nrt_queue_t *q = nullptr;
};
static thread_local QueueCacheEntry tl_qcache[64];

nrt_queue_t *current_queue(c10::DeviceIndex idx)
{
	if (C10_LIKELY(idx >= 0 && idx < 64)) {
		const QueueCacheEntry &e = tl_qcache[idx];
		if (C10_LIKELY(e.q && e.id == tl_stream[idx]))
			return e.q;
	}
	lazy_init();
	nrt_queue_t *q = nrt_queue_by_id(idx, tl_stream[idx & 63]);
	if (q && idx >= 0 && idx < 64) {
		tl_qcache[idx].id = tl_stream[idx];
		tl_qcache[idx].q = q;
	}
	if (C10_UNLIKELY(!q)) {
		check_device_index(idx);
		TORCH_CHECK(false, "neuron: no current stream on neuron:", (int)idx);
	}
	return q;
}

// Streams from the pool (torch.neuron.Stream(), getStreamFromGlobalPool): a few queues per device
// and priority, handed out round-robin like CUDA's stream pool.
static constexpr int kPoolSize = 4;
static c10::Stream pool_stream(c10::DeviceIndex idx, int priority)
{
	static std::mutex mu;
	static std::vector<std::vector<int>> ids[2]; // [priority < 0][device] -> queue ids
	static std::vector<unsigned> next[2];
	check_device_index(idx);
	int p = priority < 0 ? 1 : 0;
	std::lock_guard<std::mutex> g(mu);
	if ((int)ids[p].size() <= idx) {
		ids[p].resize(idx + 1);
		next[p].resize(idx + 1);
	}
	auto &v = ids[p][idx];
	if ((int)v.size() < kPoolSize) {
		nrt_queue_t *q;
		NEURON_CHECK(nrt_queue_create(idx, p ? -1 : 0, &q), "neuron: creating a stream");
		v.push_back(nrt_queue_id(q));
		return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, idx), v.back());
	}
	int id = v[next[p][idx]++ % kPoolSize];
	return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, idx), id);
}

int nk_dtype(c10::ScalarType t, const char *op)
{
	switch (t) {
	case c10::kBool: return NK_BOOL;
	case c10::kByte: return NK_U8;
	case c10::kChar: return NK_I8;
	case c10::kShort: return NK_I16;
	case c10::kInt: return NK_I32;
	case c10::kLong: return NK_I64;
	case c10::kHalf: return NK_F16;
	case c10::kBFloat16: return NK_BF16;
	case c10::kFloat: return NK_F32;
	case c10::kDouble: return NK_F64;
	// a dtype without kernels: NotImplementedError, as the CPU's dtype dispatch raises for the dtypes
	// it lacks ("\"add_stub\" not implemented for 'UInt16'")
	default: TORCH_CHECK_NOT_IMPLEMENTED(false, op, ": dtype ", t, " is not supported on neuron");
	}
}

void launch(nrt_queue_t *q, nrt_kernel_fn fn, const void *args, size_t size, const char *name)
{
	int st = nrt_queue_launch(q, fn, args, size, name);
	if (C10_UNLIKELY(st != 0))
		raise_status(st, name);
}

void launch_cost(nrt_queue_t *q, nrt_kernel_fn fn, const void *args, size_t size, const char *name, size_t cost)
{
	int st = nrt_queue_launch_cost(q, fn, args, size, name, cost);
	if (C10_UNLIKELY(st != 0))
		raise_status(st, name);
}

DeviceScope::DeviceScope(c10::DeviceIndex idx)
{
	if (C10_LIKELY(idx == tl_device || idx < 0))
		return;
	c10::DeviceIndex prev = tl_device;
	set_current_device(idx); // checks the index
	old_ = prev;
}

DeviceScope::~DeviceScope()
{
	if (old_ >= 0)
		tl_device = old_;
}

void sync_queue(nrt_queue_t *q, const char *what)
{
	NEURON_CHECK(nrt_queue_synchronize(q), what);
}

void sync_device(c10::DeviceIndex idx, const char *what)
{
	lazy_init();
	NEURON_CHECK(nrt_device_synchronize(idx), what);
}

void check_readable(const at::TensorBase &t, const char *what)
{
	if (t.device().type() != kDev || !t.has_storage())
		return;
	const void *p = t.unsafeGetTensorImpl()->unsafe_storage().data();
	if (p)
		NEURON_CHECK(nrt_check_readable(p), what);
}

// ---- op tracking -------------------------------------------------------------------------------

static std::atomic<uint64_t> g_epoch{1};
static std::mutex g_track_mu;
static std::set<std::string> g_executed, g_fallback;

void OpSlot::hit()
{
	uint64_t e = g_epoch.load(std::memory_order_relaxed);
	if (C10_LIKELY(epoch.load(std::memory_order_relaxed) == e))
		return;
	epoch.store(e, std::memory_order_relaxed);
	track_executed(name);
}

void track_executed(const std::string &name)
{
	std::lock_guard<std::mutex> g(g_track_mu);
	g_executed.insert(name);
}

void track_fallback(const std::string &name)
{
	std::lock_guard<std::mutex> g(g_track_mu);
	g_executed.insert(name);
	g_fallback.insert(name);
}

std::set<std::string> executed_ops()
{
	std::lock_guard<std::mutex> g(g_track_mu);
	return g_executed;
}

std::set<std::string> fallback_ops()
{
	std::lock_guard<std::mutex> g(g_track_mu);
	return g_fallback;
}

static constexpr int kDtypes = (int)at::ScalarType::NumOptions;
static std::atomic<int64_t> g_dtype_count[kDtypes], g_dtype_bytes[kDtypes];

void track_dtype(c10::ScalarType t, int64_t bytes)
{
	int i = (int)t;
	if (i < 0 || i >= kDtypes)
		return;
	g_dtype_count[i].fetch_add(1, std::memory_order_relaxed);
	g_dtype_bytes[i].fetch_add(bytes, std::memory_order_relaxed);
}

std::vector<std::tuple<std::string, int64_t, int64_t>> created_dtypes()
{
	std::vector<std::tuple<std::string, int64_t, int64_t>> out;
	for (int i = 0; i < kDtypes; i++) {
		int64_t n = g_dtype_count[i].load(std::memory_order_relaxed);
		if (n)
			out.emplace_back(std::string(c10::getDtypeNames((at::ScalarType)i).first), n, g_dtype_bytes[i].load(std::memory_order_relaxed));
	}
	return out;
}

void clear_op_tracking()
{
	std::lock_guard<std::mutex> g(g_track_mu);
	g_executed.clear();
	g_fallback.clear();
	for (int i = 0; i < kDtypes; i++)
		g_dtype_count[i].store(0), g_dtype_bytes[i].store(0);
	g_epoch.fetch_add(1);
}

// ---- device guard: devices, streams, events ----------------------------------------------------

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
	c10::DeviceType type() const override { return kDev; }

	c10::Device exchangeDevice(c10::Device d) const override
	{
		auto old = getDevice();
		if (d.index() != old.index())
			setDevice(d);
		return old;
	}
	c10::Device getDevice() const override { return c10::Device(kDev, tl_device); }
	void setDevice(c10::Device d) const override
	{
		TORCH_CHECK(d.type() == kDev, "neuron: expected a neuron device, got ", d);
		set_current_device(d.index() < 0 ? 0 : d.index());
	}
	void uncheckedSetDevice(c10::Device d) const noexcept override
	{
		if (d.index() >= 0)
			tl_device = d.index();
	}
	c10::Stream getStream(c10::Device d) const override { return current_stream(d.index()); }
	c10::Stream getDefaultStream(c10::Device d) const override
	{
		return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDev, d.index() < 0 ? tl_device : d.index()));
	}
	c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override
	{
		return pool_stream(d.index() < 0 ? tl_device : d.index(), high ? -1 : 0);
	}
	c10::Stream getNewStream(c10::Device d, int priority) const override
	{
		return pool_stream(d.index() < 0 ? tl_device : d.index(), priority);
	}
	c10::Stream exchangeStream(c10::Stream s) const override
	{
		auto old = current_stream(s.device_index());
		set_current_stream(s);
		return old;
	}
	c10::DeviceIndex deviceCount() const noexcept override { return (c10::DeviceIndex)device_count_noexcept(); }

	bool queryStream(const c10::Stream &s) const override { return nrt_queue_query(queue_of(s)) == 0; }
	void synchronizeStream(const c10::Stream &s) const override { sync_queue(queue_of(s), "neuron: stream synchronize"); }
	void synchronizeDevice(const c10::DeviceIndex idx) const override { sync_device(idx < 0 ? tl_device : idx, "neuron: synchronize"); }

	void record(void **event, const c10::Stream &s, const c10::DeviceIndex idx, const c10::EventFlag flag) const override
	{
		TORCH_CHECK(idx == -1 || idx == s.device_index(), "neuron: event device ", (int)idx,
			    " does not match the stream's device ", (int)s.device_index());
		if (!*event) {
			nrt_event_t *e;
			unsigned f = flag == c10::EventFlag::BACKEND_DEFAULT ? NRT_EVENT_TIMING : 0;
			NEURON_CHECK(nrt_event_create(s.device_index(), f, &e), "neuron: event create");
			*event = e;
		}
		NEURON_CHECK(nrt_event_record((nrt_event_t *)*event, queue_of(s)), "neuron: event record");
	}
	void block(void *event, const c10::Stream &s) const override
	{
		if (event)
			NEURON_CHECK(nrt_queue_wait_event(queue_of(s), (nrt_event_t *)event), "neuron: stream wait event");
	}
	bool queryEvent(void *event) const override
	{
		return !event || nrt_event_query((nrt_event_t *)event) == 0;
	}
	void synchronizeEvent(void *event) const override
	{
		if (event)
			NEURON_CHECK(nrt_event_synchronize((nrt_event_t *)event), "neuron: event synchronize");
	}
	void destroyEvent(void *event, const c10::DeviceIndex) const noexcept override
	{
		if (event)
			nrt_event_destroy((nrt_event_t *)event);
	}
	double elapsedTime(void *start, void *end, const c10::DeviceIndex) const override
	{
		TORCH_CHECK(start && end, "neuron: elapsed_time: both events must be recorded first");
		double ms = 0;
		NEURON_CHECK(nrt_event_elapsed_ms((nrt_event_t *)start, (nrt_event_t *)end, &ms),
			     "neuron: elapsed_time (create events with enable_timing=True)");
		return ms;
	}
	void recordDataPtrOnStream(const c10::DataPtr &p, const c10::Stream &s) const override
	{
		if (p.get())
			NEURON_CHECK(nrt_record_queue(p.get(), queue_of(s)), "neuron: record_stream");
	}
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

// ---- device allocator --------------------------------------------------------------------------

static void device_free(void *p)
{
	if (p)
		nrt_free(p);
}

static std::string fmt_bytes(size_t n)
{
	char buf[64];
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)n;
	int i = 0;
	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	snprintf(buf, sizeof buf, "%.2f %s", v, u[i]);
	return buf;
}

static void fill_stat(c10::CachingAllocator::StatArray &a, const nrt_stat_t &s)
{
	auto &x = a[(size_t)c10::CachingAllocator::StatType::AGGREGATE];
	x.current = s.current;
	x.peak = s.peak;
	x.allocated = s.allocated;
	x.freed = s.freed;
}

struct NeuronAllocator final : public c10::DeviceAllocator {
	c10::DataPtr allocate(size_t n) override
	{
		lazy_init();
		c10::DeviceIndex dev = tl_device;
		nrt_queue_t *q = current_queue(dev);
		void *p = nullptr;
		int st = nrt_malloc(q, n, &p);
		if (C10_UNLIKELY(st != 0)) {
			if (st == NRT_ERR_OOM)
				TORCH_CHECK_WITH(OutOfMemoryError, false, "neuron: out of memory allocating ",
						 fmt_bytes(n), " (", n, " bytes) on neuron:", (int)dev, ": ",
						 nrt_last_error());
			raise_status(st, "neuron: allocate");
		}
		return {p, p, &device_free, c10::Device(kDev, dev)};
	}
	c10::DeleterFnPtr raw_deleter() const override { return &device_free; }
	void copy_data(void *dst, const void *src, std::size_t n) const override
	{
		sync_device(tl_device, "neuron: copy_data");
		std::memcpy(dst, src, n);
	}
	bool initialized() override { return nrt_device_count() > 0; }
	void emptyCache(c10::MempoolId_t) override
	{
		for (int d = 0; d < nrt_device_count(); d++)
			NEURON_CHECK(nrt_empty_cache(d), "neuron: empty_cache");
	}
	void recordStream(const c10::DataPtr &p, c10::Stream s) override
	{
		if (p.get())
			NEURON_CHECK(nrt_record_queue(p.get(), queue_of(s)), "neuron: record_stream");
	}
	c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex d) override
	{
		check_device_index(d);
		nrt_mem_stats_t s;
		NEURON_CHECK(nrt_memory_stats(d, &s), "neuron: memory_stats");
		c10::CachingDeviceAllocator::DeviceStats r;
		fill_stat(r.allocation, s.allocation);
		fill_stat(r.segment, s.segment);
		fill_stat(r.active, s.active);
		fill_stat(r.inactive_split, s.inactive_split);
		fill_stat(r.allocated_bytes, s.allocated_bytes);
		fill_stat(r.reserved_bytes, s.reserved_bytes);
		fill_stat(r.active_bytes, s.active_bytes);
		fill_stat(r.inactive_split_bytes, s.inactive_split_bytes);
		fill_stat(r.requested_bytes, s.requested_bytes);
		r.num_alloc_retries = s.num_alloc_retries;
		r.num_ooms = s.num_ooms;
		r.num_device_alloc = s.num_device_alloc;
		r.num_device_free = s.num_device_free;
		return r;
	}
	void resetAccumulatedStats(c10::DeviceIndex d) override
	{
		check_device_index(d);
		NEURON_CHECK(nrt_reset_accumulated_stats(d), "neuron: reset_accumulated_memory_stats");
	}
	void resetPeakStats(c10::DeviceIndex d) override
	{
		check_device_index(d);
		NEURON_CHECK(nrt_reset_peak_stats(d), "neuron: reset_peak_memory_stats");
	}
	std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex d) override
	{
		check_device_index(d);
		nrt_mem_stats_t s;
		NEURON_CHECK(nrt_memory_stats(d, &s), "neuron: mem_get_info");
		size_t limit = (size_t)s.limit_bytes, used = (size_t)s.reserved_bytes.current;
		return {used < limit ? limit - used : 0, limit};
	}
};
static NeuronAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

// ---- pinned host memory ------------------------------------------------------------------------

static void host_free(void *p)
{
	if (p)
		nrt_host_free(p);
}

struct NeuronHostAllocator final : public at::HostAllocator {
	c10::DataPtr allocate(size_t n) override
	{
		void *p = nullptr;
		if (n) {
			int st = nrt_host_alloc(n, &p);
			if (st != 0)
				TORCH_CHECK_WITH(OutOfMemoryError, false, "neuron: cannot allocate ", n,
						 " bytes of pinned host memory: ", nrt_last_error());
		}
		return {p, p, &host_free, c10::Device(c10::DeviceType::CPU)};
	}
	c10::DeleterFnPtr raw_deleter() const override { return &host_free; }
	void copy_data(void *dst, const void *src, std::size_t n) const override { std::memcpy(dst, src, n); }
	bool record_event(void *, void *, c10::Stream) override { return true; }
	void empty_cache() override {}
	at::HostStats get_stats() override { return {}; }
	void reset_accumulated_stats() override {}
	void reset_peak_stats() override {}
};
static NeuronHostAllocator g_host_allocator;
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_host_allocator);

// ---- generator: counter-based (seed, offset), consumed by the Philox kernels ---------------------

struct NeuronGenerator final : public c10::GeneratorImpl {
	uint64_t seed_ = 67280421310721ULL, offset_ = 0;
	explicit NeuronGenerator(c10::DeviceIndex idx)
		: c10::GeneratorImpl(c10::Device(kDev, idx), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
	void set_current_seed(uint64_t s) override { seed_ = s; offset_ = 0; }
	void set_offset(uint64_t o) override { offset_ = o; }
	uint64_t get_offset() const override { return offset_; }
	uint64_t current_seed() const override { return seed_; }
	uint64_t seed() override
	{
		uint64_t s = ((uint64_t)std::random_device{}() << 32) ^ std::random_device{}();
		set_current_seed(s);
		return s;
	}
	void set_state(const c10::TensorImpl &st) override
	{
		TORCH_CHECK(st.numel() == 16 && st.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
			    "neuron: RNG state must be a torch.ByteTensor of 16 bytes");
		const uint8_t *p = (const uint8_t *)st.data();
		std::memcpy(&seed_, p, 8);
		std::memcpy(&offset_, p + 8, 8);
	}
	c10::intrusive_ptr<c10::TensorImpl> get_state() const override
	{
		auto t = at::empty({16}, at::TensorOptions().dtype(at::kByte));
		std::memcpy(t.data_ptr(), &seed_, 8);
		std::memcpy((uint8_t *)t.data_ptr() + 8, &offset_, 8);
		return t.getIntrusivePtr();
	}
	// Reserve n counter units for one kernel; returns (seed, offset) to pass to it.
	std::pair<uint64_t, uint64_t> reserve(uint64_t n)
	{
		std::lock_guard<std::mutex> g(mutex_);
		uint64_t o = offset_;
		offset_ += n;
		return {seed_, o};
	}
	static c10::DeviceType device_type() { return kDev; }

      private:
	NeuronGenerator *clone_impl() const override
	{
		auto *g = new NeuronGenerator(device().index());
		g->seed_ = seed_;
		g->offset_ = offset_;
		return g;
	}
};

const at::Generator &default_generator(c10::DeviceIndex idx)
{
	static std::once_flag once;
	static std::vector<at::Generator> gens;
	std::call_once(once, [] {
		int n = device_count_noexcept();
		for (int i = 0; i < std::max(n, 1); i++) {
			gens.emplace_back(at::make_generator<NeuronGenerator>((c10::DeviceIndex)i));
			gens.back().set_current_seed(c10::detail::getNonDeterministicRandom());
		}
	});
	if (idx < 0)
		idx = tl_device;
	check_device_index(idx);
	return gens[idx];
}

// (seed, offset) for a random kernel over n elements, from gen or the default generator.
std::pair<uint64_t, uint64_t> philox_args(const std::optional<at::Generator> &gen, c10::DeviceIndex idx, int64_t n)
{
	at::Generator g = gen.has_value() && gen->defined() ? *gen : default_generator(idx);
	TORCH_CHECK(g.device().type() == kDev, "neuron: expected a neuron generator, got one for ", g.device());
	auto *impl = static_cast<NeuronGenerator *>(g.unsafeGetGeneratorImpl());
	return impl->reserve(nk_random_offset_increment(n));
}

// ---- PrivateUse1 hooks -------------------------------------------------------------------------

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
	bool isBuilt() const override { return true; }
	bool isAvailable() const override { return device_count_noexcept() > 0; }
	void init() const override { lazy_init(); }
	bool hasPrimaryContext(c10::DeviceIndex) const override { return nrt_device_count() > 0; }
	c10::DeviceIndex deviceCount() const override { return (c10::DeviceIndex)device_count_noexcept(); }
	void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device(d); }
	c10::DeviceIndex getCurrentDevice() const override { return tl_device; }
	c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override
	{
		auto old = tl_device;
		set_current_device(d);
		return old;
	}
	c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
	const at::Generator &getDefaultGenerator(c10::DeviceIndex idx) const override { return default_generator(idx); }
	at::Generator getNewGenerator(c10::DeviceIndex idx) const override
	{
		if (idx < 0)
			idx = tl_device;
		check_device_index(idx);
		return at::make_generator<NeuronGenerator>(idx);
	}
	at::Device getDeviceFromPtr(void *p) const override
	{
		int dev = 0;
		TORCH_CHECK(nrt_ptr_device(p, &dev) == 0, "neuron: pointer ", p, " is not neuron device memory");
		return c10::Device(kDev, (c10::DeviceIndex)dev);
	}
	bool isPinnedPtr(const void *p) const override { return nrt_host_is_pinned(p); }
	at::Allocator *getPinnedMemoryAllocator() const override { return &g_host_allocator; }
	void resizePrivateUse1Bytes(const c10::Storage &storage, size_t newsize) const override
	{
		sync_device(storage.device().index(), "neuron: storage resize");
		auto *impl = storage.unsafeGetStorageImpl();
		TORCH_CHECK(impl->resizable(), "neuron: trying to resize storage that is not resizable");
		c10::DeviceGuard g(storage.device());
		at::DataPtr nd = g_allocator.allocate(newsize);
		size_t keep = std::min(newsize, impl->nbytes());
		if (keep)
			std::memcpy(nd.get(), impl->data(), keep);
		impl->set_data_ptr_noswap(std::move(nd));
		impl->set_nbytes(newsize);
	}
};

static bool register_hooks = [] {
	at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
	return true;
}();

} // namespace neuron
