// profiler.cpp - what the device did, in PyTorch's own tools:
//  * a Kineto child profiler (torch.profiler with ProfilerActivity.PrivateUse1): the runtime's trace ring
//    becomes device activities (kernels, copies, CPU-fallback work) on one track per queue, each linked
//    through the correlation id captured at enqueue to the ATen op that launched it;
//  * launch sites: the innermost user Python frame of every launch (code object + instruction offset,
//    pinned on first sight, resolved only when a queued kernel fails), so an async error names the line;
//  * the CPU fallback's host work as a device activity (FallbackTrace, profiler.h);
//  * memory history for torch.neuron.memory._record_memory_history / _snapshot (torch.cuda's format).
//
// Build note: the PrivateUse1 profiler registry header includes <IActivityProfiler.h> bare and needs
// USE_KINETO, i.e. extra flags for every glue file (a full rebuild); instead this file includes the
// Kineto headers by their torch/include path and declares the two registry members it calls (exported by
// libtorch_cpu.so).  fmt is used header-only: libtorch exports no fmt symbols.
#define FMT_HEADER_ONLY 1

#include <Python.h>
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include <kineto/GenericTraceActivity.h>
#include <kineto/IActivityProfiler.h>
#include <kineto/ThreadUtil.h>
#include <kineto/libkineto.h>
#include <kineto/output_base.h>

#include <c10/core/Allocator.h>
#include <torch/library.h>

#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "neuron.h"
#include "nk_dispatch.h"
#include "nrt_observe.h"
#include "profiler.h"

namespace torch::profiler::impl {
// The registry of torch/csrc/profiler/standalone/privateuse1_profiler.h (see the build note above).
using PrivateUse1ProfilerFactory = std::function<std::unique_ptr<libkineto::IActivityProfiler>()>;
class TORCH_API PrivateUse1ProfilerRegistry {
    public:
	static PrivateUse1ProfilerRegistry &instance();
	void registerFactory(PrivateUse1ProfilerFactory factory);
	bool hasFactory() const;
};
} // namespace torch::profiler::impl

namespace neuron {

// ---- launch sites: pinned code objects -------------------------------------------------------------

namespace {

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define NEURON_SITES 1
#endif

struct CodeEntry {
	PyObject *code; // a strong reference, never dropped: the entry's address stays this code object's
	std::string file, func;
	bool user; // not in torch, torchneuron or the standard library
};

constexpr uint32_t kMaxCodes = 1u << 16;
std::atomic<CodeEntry *> g_codes[kMaxCodes]; // index 1.. (0: none)
uint32_t g_ncodes;                            // under g_pin_mu
std::mutex g_pin_mu;
std::unordered_map<PyObject *, uint32_t> g_pin;
std::vector<std::string> g_lib_prefixes; // under the GIL (computed on the first pin)
bool g_prefixes_done;

// Directory of module `mod` (already imported) + "/", or "".
std::string module_dir(const char *mod)
{
	PyObject *mods = PyImport_GetModuleDict();
	PyObject *md = mods ? PyDict_GetItemString(mods, mod) : nullptr; // borrowed
	if (!md)
		return "";
	PyObject *f = PyObject_GetAttrString(md, "__file__");
	if (!f) {
		PyErr_Clear();
		return "";
	}
	std::string s;
	if (PyUnicode_Check(f)) {
		const char *u = PyUnicode_AsUTF8(f);
		if (u)
			s = u;
	}
	Py_DECREF(f);
	PyErr_Clear();
	size_t slash = s.rfind('/');
	return slash == std::string::npos ? "" : s.substr(0, slash + 1);
}

bool is_user_file(const std::string &f)
{
	if (f.rfind("<frozen", 0) == 0)
		return false;
	for (const auto &p : g_lib_prefixes)
		if (!p.empty() && f.rfind(p, 0) == 0)
			return false;
	return true;
}

std::string utf8_of(PyObject *s)
{
	const char *u = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : nullptr;
	if (!u)
		PyErr_Clear();
	return u ? u : "?";
}

// The index of code object co, pinning it (a reference and its names) the first time; 0 when the table
// is full or Python is going away.  Takes the GIL (the launching thread has usually released it).
uint32_t pin_code(PyObject *co)
{
	if (!Py_IsInitialized() || _Py_IsFinalizing())
		return 0;
	PyGILState_STATE g = PyGILState_Ensure();
	uint32_t idx = 0;
	if (!g_prefixes_done) {
		g_prefixes_done = true;
		for (const char *m : {"torch", "torchneuron", "os"}) {
			std::string d = module_dir(m);
			if (!d.empty())
				g_lib_prefixes.push_back(d);
		}
	}
	{
		std::lock_guard<std::mutex> l(g_pin_mu);
		auto it = g_pin.find(co);
		if (it != g_pin.end()) {
			idx = it->second;
		} else if (g_ncodes + 1 < kMaxCodes) {
			PyCodeObject *c = (PyCodeObject *)co;
			auto *e = new CodeEntry{co, utf8_of(c->co_filename), utf8_of(c->co_qualname), false};
			e->user = is_user_file(e->file);
			Py_INCREF(co);
			idx = ++g_ncodes;
			g_codes[idx].store(e, std::memory_order_release);
			g_pin.emplace(co, idx);
		}
	}
	PyGILState_Release(g);
	return idx;
}

struct CodeCacheSlot {
	PyObject *co;
	uint32_t idx;
};
thread_local CodeCacheSlot tl_codes[128];

inline uint32_t code_index(PyObject *co)
{
	CodeCacheSlot &s = tl_codes[((uintptr_t)co >> 6) & 127];
	if (C10_LIKELY(s.co == co))
		return s.idx;
	uint32_t idx = pin_code(co); // a pinned code object never dies, so its address names it for good
	if (idx)
		s = {co, idx};
	return idx;
}

#ifdef NEURON_SITES
inline uint64_t site_of(_PyInterpreterFrame *f, uint32_t idx)
{
	int lasti = _PyInterpreterFrame_LASTI(f);
	return ((uint64_t)idx << 32) | (uint32_t)(lasti < 0 ? 0 : lasti * (int)sizeof(_Py_CODEUNIT));
}

// Frames of the calling thread, innermost first.  Read without the GIL: only this thread changes its
// own frame chain, and it is inside a C call (the launch) until we return.
inline _PyInterpreterFrame *innermost_frame()
{
	PyThreadState *ts = PyGILState_GetThisThreadState();
	if (!ts || !ts->cframe)
		return nullptr;
	return ts->cframe->current_frame;
}
#endif

// The site of the backward() / autograd.grad() call running now (torchneuron wraps torch.autograd's
// _engine_run_backward): kernels the autograd engine's device thread launches, which has no Python frame
// of its own, are attributed to it, marked by kBackwardBit in the offset half.  With backward calls on
// several Python threads at once the latest one wins.
std::atomic<uint64_t> g_backward_site{0};
constexpr uint64_t kBackwardBit = UINT64_C(1) << 31;

// The launch-site hook (nrt_set_site_hooks): the innermost user frame, else the innermost frame; on a
// thread without Python frames (the autograd engine's), the running backward call's site.
uint64_t capture_site()
{
#ifdef NEURON_SITES
	uint64_t first = 0;
	int depth = 0;
	_PyInterpreterFrame *top = innermost_frame();
	if (!top) {
		uint64_t b = g_backward_site.load(std::memory_order_relaxed);
		return b ? b | kBackwardBit : 0;
	}
	for (_PyInterpreterFrame *f = top; f && depth < 64; f = f->previous, depth++) {
		if (_PyFrame_IsIncomplete(f))
			continue;
		uint32_t idx = code_index((PyObject *)f->f_code);
		if (!idx)
			return first;
		uint64_t s = site_of(f, idx);
		if (g_codes[idx].load(std::memory_order_acquire)->user)
			return s;
		if (!first)
			first = s;
	}
	return first;
#else
	return 0;
#endif
}

// "FILE:LINE in FUNC" of a site.  No GIL needed: the code object is pinned and PyCode_Addr2Line only
// reads its immutable line table.
void format_site(uint64_t site, char *buf, size_t cap)
{
	uint32_t idx = (uint32_t)(site >> 32);
	CodeEntry *e = idx && idx < kMaxCodes ? g_codes[idx].load(std::memory_order_acquire) : nullptr;
	if (!e) {
		if (cap)
			buf[0] = 0;
		return;
	}
	int line = PyCode_Addr2Line((PyCodeObject *)e->code, (int)(uint32_t)(site & ~kBackwardBit));
	snprintf(buf, cap, "%s:%d in %s%s", e->file.c_str(), line, e->func.c_str(),
		 site & kBackwardBit ? " (autograd backward)" : "");
}

} // namespace

// torch.ops.neuron._backward_site_push() -> previous: the calling line becomes the backward site (see
// g_backward_site); _backward_site_pop(previous) restores it when the call returns.
int64_t backward_site_push()
{
	return (int64_t)g_backward_site.exchange(capture_site() & ~kBackwardBit, std::memory_order_relaxed);
}

void backward_site_pop(int64_t prev)
{
	g_backward_site.store((uint64_t)prev, std::memory_order_relaxed);
}

namespace {

struct SiteHooks {
	SiteHooks()
	{
		const char *off = getenv("NEURON_LAUNCH_SITES");
		if (!(off && strcmp(off, "0") == 0))
			nrt_set_site_hooks(capture_site, format_site);
	}
} g_site_hooks;

// Interned names (the trace ring keeps const char *).
const char *intern(const std::string &s)
{
	static std::mutex mu;
	static std::unordered_set<std::string> names;
	std::lock_guard<std::mutex> l(mu);
	return names.insert(s).first->c_str();
}

} // namespace

// ---- the CPU fallback as host work of its queue -----------------------------------------------------

FallbackTrace::FallbackTrace(const std::string &op)
{
	if (C10_LIKELY(!nrt_trace_on()))
		return;
	name_ = intern(op + " (CPU fallback)");
	t0_ = nrt_now_ns();
}

FallbackTrace::~FallbackTrace()
{
	if (!name_)
		return;
	c10::DeviceIndex d = current_device();
	nrt_trace_host(d, nrt_queue_id(current_queue(d)), name_, t0_, nrt_now_ns());
}

// ---- memory history (torch.neuron.memory._record_memory_history / _snapshot) ------------------------

namespace {

struct MemEvent {
	int action; // NRT_MEM_*
	int dev, queue;
	uintptr_t ptr;
	size_t size;
	int64_t time_us;
	std::vector<uint64_t> frames; // sites, innermost first
};

std::atomic<bool> g_hist_on{false};
std::mutex g_hist_mu;
size_t g_hist_max = 100000;
bool g_hist_stacks = true;
std::vector<MemEvent> g_hist; // a ring of g_hist_max once full
size_t g_hist_next;
std::unordered_map<uintptr_t, std::vector<uint64_t>> g_live_frames; // live blocks' allocation stacks

void capture_stack(std::vector<uint64_t> &out)
{
#ifdef NEURON_SITES
	int depth = 0;
	for (_PyInterpreterFrame *f = innermost_frame(); f && depth < 64; f = f->previous, depth++) {
		if (_PyFrame_IsIncomplete(f))
			continue;
		uint32_t idx = code_index((PyObject *)f->f_code);
		if (!idx)
			break;
		out.push_back(site_of(f, idx));
	}
#endif
}

void mem_observer(int action, int dev, const void *ptr, size_t size, size_t, int queue)
{
	bool block = action == NRT_MEM_ALLOC || action == NRT_MEM_FREE;
	if (block && c10::memoryProfilingEnabled()) {
		nrt_mem_stats_t st{};
		nrt_memory_stats(dev, &st);
		c10::reportMemoryUsageToProfiler(const_cast<void *>(ptr), action == NRT_MEM_ALLOC ? (int64_t)size : -(int64_t)size,
						 (size_t)st.allocated_bytes.current, (size_t)st.reserved_bytes.current,
						 c10::Device(kDev, (c10::DeviceIndex)dev));
	}
	if (!g_hist_on.load(std::memory_order_relaxed))
		return;
	MemEvent e{action, dev, queue, (uintptr_t)ptr, size, nrt_now_ns() / 1000, {}};
	if (g_hist_stacks && action != NRT_MEM_FREE && action != NRT_MEM_SEGMENT_FREE)
		capture_stack(e.frames); // before the lock: it may take the GIL
	std::lock_guard<std::mutex> l(g_hist_mu);
	if (action == NRT_MEM_ALLOC)
		g_live_frames[e.ptr] = e.frames;
	else if (action == NRT_MEM_FREE)
		g_live_frames.erase(e.ptr);
	if (g_hist_max == 0)
		return;
	if (g_hist.size() < g_hist_max) {
		g_hist.push_back(std::move(e));
	} else {
		g_hist[g_hist_next] = std::move(e);
		g_hist_next = (g_hist_next + 1) % g_hist_max;
	}
}

struct MemObserver {
	MemObserver() { nrt_set_mem_observer(mem_observer); }
} g_mem_observer;

void json_str(std::ostringstream &o, const std::string &s)
{
	o << '"';
	for (unsigned char c : s) {
		if (c == '"' || c == '\\')
			o << '\\' << c;
		else if (c < 0x20) {
			char b[8];
			snprintf(b, sizeof b, "\\u%04x", c);
			o << b;
		} else
			o << c;
	}
	o << '"';
}

void json_frames(std::ostringstream &o, const std::vector<uint64_t> &frames)
{
	o << '[';
	bool first = true;
	for (uint64_t site : frames) {
		uint32_t idx = (uint32_t)(site >> 32);
		CodeEntry *e = idx && idx < kMaxCodes ? g_codes[idx].load(std::memory_order_acquire) : nullptr;
		if (!e)
			continue;
		o << (first ? "" : ",") << "{\"filename\":";
		json_str(o, e->file);
		o << ",\"line\":" << PyCode_Addr2Line((PyCodeObject *)e->code, (int)(uint32_t)site) << ",\"name\":";
		json_str(o, e->func);
		o << '}';
		first = false;
	}
	o << ']';
}

// torch.ops.neuron._memory_history(enabled, max_entries, stacks): record (or stop recording) every
// allocation and free, with the Python stack of allocations when stacks.
void memory_history(bool enabled, int64_t max_entries, bool stacks)
{
	std::lock_guard<std::mutex> l(g_hist_mu);
	if (enabled) {
		g_hist_max = (size_t)std::max<int64_t>(max_entries, 0);
		g_hist_stacks = stacks;
		if (g_hist.size() > g_hist_max) {
			g_hist.clear();
			g_hist_next = 0;
		}
	} else {
		g_hist.clear();
		g_hist_next = 0;
		g_live_frames.clear();
	}
	g_hist_on.store(enabled);
}

struct WalkCtx {
	std::ostringstream *o;
	int dev = 0;
	const void *seg = nullptr;
	bool first_seg = true, first_blk = true;
	size_t total = 0, allocated = 0, active = 0, requested = 0;
	int queue = 0;
	bool small = false;
	std::ostringstream blocks;
};

void close_segment(WalkCtx &c)
{
	if (!c.seg)
		return;
	std::ostringstream &o = *c.o;
	o << (c.first_seg ? "" : ",") << "{\"device\":" << c.dev << ",\"address\":" << (uintptr_t)c.seg
	  << ",\"total_size\":" << c.total << ",\"allocated_size\":" << c.allocated << ",\"active_size\":" << c.active
	  << ",\"requested_size\":" << c.requested << ",\"stream\":" << c.queue << ",\"segment_type\":\""
	  << (c.small ? "small" : "large") << "\",\"segment_pool_id\":[0,0],\"is_expandable\":false,\"frames\":[],\"blocks\":["
	  << c.blocks.str() << "]}";
	c.first_seg = false;
}

// torch.ops.neuron._memory_snapshot(dev) -> JSON of torch.cuda.memory._snapshot()'s structure: dev's
// segments with their blocks (allocation stacks while history records) and the history.
std::string memory_snapshot(int64_t dev)
{
	lazy_init();
	std::ostringstream o;
	std::lock_guard<std::mutex> l(g_hist_mu);
	o << "{\"segments\":[";
	WalkCtx c;
	c.o = &o;
	c.dev = (int)dev;
	int rc = nrt_memory_walk((int)dev, [](void *p, const nrt_mem_block_t *b) {
		WalkCtx &c = *(WalkCtx *)p;
		if (b->segment != c.seg) {
			close_segment(c);
			c.seg = b->segment;
			c.total = c.allocated = c.active = c.requested = 0;
			c.queue = b->queue;
			c.small = b->small;
			c.blocks.str("");
			c.first_blk = true;
		}
		c.total += b->size;
		if (b->state != NRT_BLOCK_INACTIVE)
			c.active += b->size;
		if (b->state == NRT_BLOCK_ACTIVE)
			c.allocated += b->size, c.requested += b->requested;
		c.blocks << (c.first_blk ? "" : ",") << "{\"address\":" << (uintptr_t)b->ptr << ",\"size\":" << b->size
			 << ",\"requested_size\":" << (b->state == NRT_BLOCK_ACTIVE ? b->requested : b->size) << ",\"state\":\""
			 << (b->state == NRT_BLOCK_ACTIVE ? "active_allocated"
						       : b->state == NRT_BLOCK_PENDING_FREE ? "active_pending_free" : "inactive")
			 << "\",\"frames\":";
		auto it = b->state == NRT_BLOCK_ACTIVE ? g_live_frames.find((uintptr_t)b->ptr) : g_live_frames.end();
		std::ostringstream f;
		json_frames(f, it == g_live_frames.end() ? std::vector<uint64_t>{} : it->second);
		c.blocks << f.str() << '}';
		c.first_blk = false;
	}, &c);
	NEURON_CHECK(rc, "neuron: memory snapshot");
	close_segment(c);
	o << "],\"device_traces\":[";
	for (int d = 0; d < nrt_device_count(); d++) {
		o << (d ? "," : "") << '[';
		bool first = true;
		size_t n = g_hist.size(), start = n < g_hist_max ? 0 : g_hist_next;
		for (size_t i = 0; i < n; i++) {
			const MemEvent &e = g_hist[(start + i) % n];
			if (e.dev != d)
				continue;
			static const char *names[] = {"alloc", "free_requested", "oom", "segment_alloc", "segment_free"};
			o << (first ? "" : ",") << "{\"action\":\"" << names[e.action] << "\",\"addr\":" << e.ptr
			  << ",\"size\":" << e.size << ",\"stream\":" << e.queue << ",\"time_us\":" << e.time_us;
			if (e.action == NRT_MEM_OOM) {
				size_t limit = 0;
				nrt_mem_stats_t st{};
				nrt_device_memory_limit(d, &limit);
				nrt_memory_stats(d, &st);
				o << ",\"device_free\":" << (int64_t)limit - st.reserved_bytes.current;
			}
			o << ",\"frames\":";
			json_frames(o, e.frames);
			o << '}';
			first = false;
			if (e.action == NRT_MEM_FREE) { // our frees complete in queue order: no separate event
				o << ",{\"action\":\"free_completed\",\"addr\":" << e.ptr << ",\"size\":" << e.size
				  << ",\"stream\":" << e.queue << ",\"time_us\":" << e.time_us << ",\"frames\":[]}";
			}
		}
		o << ']';
	}
	o << "]}";
	return o.str();
}

} // namespace

// ---- Kineto child profiler --------------------------------------------------------------------------

namespace {

using libkineto::ActivityType;

// CLOCK_REALTIME ns minus CLOCK_MONOTONIC ns now (the ring records monotonic time, Kineto realtime).
int64_t realtime_offset()
{
	struct timespec a, b, c;
	clock_gettime(CLOCK_MONOTONIC, &a);
	clock_gettime(CLOCK_REALTIME, &b);
	clock_gettime(CLOCK_MONOTONIC, &c);
	int64_t ma = (int64_t)a.tv_sec * 1000000000 + a.tv_nsec, mc = (int64_t)c.tv_sec * 1000000000 + c.tv_nsec;
	return (int64_t)b.tv_sec * 1000000000 + b.tv_nsec - (ma + (mc - ma) / 2);
}

const libkineto::TraceSpan &trace_span()
{
	static const libkineto::TraceSpan span(0, 0, "neuron");
	return span;
}

thread_local std::vector<uint64_t> tl_corr_stack;

class NeuronSession final : public libkineto::IActivityProfilerSession {
    public:
	void start() override
	{
		offset_ = realtime_offset();
		cursor_ = nrt_trace_cursor();
		nrt_trace_enable(true);
		on_ = true;
		status_ = libkineto::TraceStatus::RECORDING;
	}

	void stop() override
	{
		if (!on_)
			return;
		drain();
		nrt_trace_enable(false);
		on_ = false;
		status_ = libkineto::TraceStatus::PROCESSING;
	}

	~NeuronSession() override
	{
		if (on_)
			nrt_trace_enable(false);
	}

	std::vector<std::string> errors() override
	{
		if (!lost_)
			return {};
		return {"neuron: " + std::to_string(lost_) + " device records were overwritten before the trace ended "
			"(ring of " + std::to_string(65536) + "); profile a shorter range"};
	}

	void processTrace(libkineto::ActivityLogger &logger) override
	{
		processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity * { return nullptr; }, 0, 0);
	}

	void processTrace(libkineto::ActivityLogger &logger, libkineto::getLinkedActivityCallback linked_of,
			  int64_t, int64_t) override
	{
		const libkineto::TraceSpan &span = trace_span();
		int32_t pid = libkineto::processId();
		for (const nrt_trace_event_t &r : recs_) {
			ActivityType type = ActivityType::CONCURRENT_KERNEL;
			std::string name = r.name ? r.name : "?";
			switch (r.kind) {
			case NRT_TRACE_COPY_H2D: type = ActivityType::GPU_MEMCPY, name = "Memcpy HtoD (host -> neuron)"; break;
			case NRT_TRACE_COPY_D2H: type = ActivityType::GPU_MEMCPY, name = "Memcpy DtoH (neuron -> host)"; break;
			case NRT_TRACE_COPY_D2D: type = ActivityType::GPU_MEMCPY, name = "Memcpy DtoD (neuron -> neuron)"; break;
			case NRT_TRACE_COPY_H2H: type = ActivityType::GPU_MEMCPY, name = "Memcpy HtoH (host -> host)"; break;
			default: break;
			}
			const libkineto::ITraceActivity *cpu = r.corr ? linked_of((int32_t)r.corr) : nullptr;
			const bool part = r.kind == NRT_TRACE_PART; // a kernel of a compiled segment, inside its slice
			libkineto::GenericTraceActivity a(span, type, name);
			a.startTime = r.start_ns + offset_;
			a.endTime = std::max(r.end_ns, r.start_ns) + offset_;
			a.id = (int32_t)r.corr;
			a.device = r.dev;
			a.resource = r.queue;
			a.threadId = r.queue;
			a.linked = cpu;
			a.addMetadata("device", r.dev);
			a.addMetadata("stream", r.queue);
			a.addMetadata("correlation", r.corr);
			if (r.kind == NRT_TRACE_HOST)
				a.addMetadataQuoted("kind", "cpu fallback");
			if (part)
				a.addMetadataQuoted("kind", "kernel of a compiled segment");
			if (cpu && !part) { // one flow arrow per launch: the segment's
				a.flow.id = (uint32_t)r.corr;
				a.flow.type = libkineto::kLinkAsyncCpuGpu;
				a.flow.start = 0;
			}
			logger.handleGenericActivity(a);
			seen_.insert({r.dev, r.queue});
			if (cpu && launched_.insert(r.corr).second) {
				// the launch on the CPU thread (as cudaLaunchKernel): the flow arrow's tail
				libkineto::GenericTraceActivity l(span, ActivityType::PRIVATEUSE1_RUNTIME, "neuronLaunch");
				l.startTime = cpu->timestamp();
				l.endTime = cpu->timestamp() + std::min<int64_t>(cpu->duration(), 1000);
				l.id = (int32_t)r.corr;
				l.device = pid;
				l.resource = cpu->resourceId();
				l.threadId = cpu->getThreadId();
				l.linked = cpu;
				l.flow.id = (uint32_t)r.corr;
				l.flow.type = libkineto::kLinkAsyncCpuGpu;
				l.flow.start = 1;
				logger.handleGenericActivity(l);
			}
		}
	}

	std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override
	{
		return std::make_unique<libkineto::DeviceInfo>(
			libkineto::DeviceInfo{0, 1 << 20, "neuron", "neuron:0 (host NeuronCore)"});
	}

	std::vector<libkineto::ResourceInfo> getResourceInfos() override
	{
		std::vector<libkineto::ResourceInfo> out;
		for (const auto &dq : seen_)
			out.push_back(libkineto::ResourceInfo{dq.second, dq.second, dq.first,
							      "stream " + std::to_string(dq.second) +
								      (dq.second == 0 ? " (default)" : "")});
		return out;
	}

	std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

	void pushCorrelationId(uint64_t id) override
	{
		tl_corr_stack.push_back(nrt_trace_corr());
		nrt_trace_set_corr(id);
	}

	void popCorrelationId() override
	{
		if (tl_corr_stack.empty()) {
			nrt_trace_set_corr(0);
			return;
		}
		nrt_trace_set_corr(tl_corr_stack.back());
		tl_corr_stack.pop_back();
	}

	std::string getDeviceProperties() override
	{
		return "{\"id\": 0, \"name\": \"neuron\", \"kind\": \"host NeuronCore\"}";
	}

    private:
	void drain()
	{
		nrt_trace_event_t buf[1024];
		int n;
		while ((n = nrt_trace_read(&cursor_, buf, 1024, &lost_)) > 0)
			recs_.insert(recs_.end(), buf, buf + n);
	}

	bool on_ = false;
	int64_t offset_ = 0;
	uint64_t cursor_ = 0, lost_ = 0;
	std::vector<nrt_trace_event_t> recs_;
	std::set<std::pair<int, int>> seen_;
	std::unordered_set<uint64_t> launched_;
};

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
    public:
	const std::string &name() const override { return name_; }

	const std::set<ActivityType> &availableActivities() const override { return types_; }

	std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType> &types,
								       const libkineto::Config &) override
	{
		// a CPU-only trace also carries PRIVATEUSE1_RUNTIME: device activities mean CONCURRENT_KERNEL
		if (!types.count(ActivityType::CONCURRENT_KERNEL))
			return nullptr;
		return std::make_unique<NeuronSession>();
	}

	std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
								       const std::set<ActivityType> &types,
								       const libkineto::Config &config) override
	{
		return configure(types, config);
	}

    private:
	std::string name_{"neuron"};
	std::set<ActivityType> types_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
				      ActivityType::GPU_MEMSET, ActivityType::PRIVATEUSE1_RUNTIME,
				      ActivityType::PRIVATEUSE1_DRIVER};
};

void copy_ptrs(const void *args, const void **dst, const void **src)
{
	const nk_iter_t *it = (const nk_iter_t *)args;
	*dst = it->data[0];
	*src = it->data[1];
}

struct RegisterProfiler {
	RegisterProfiler()
	{
		nrt_trace_set_copy_kernel(nk_copy_run, copy_ptrs);
		torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
			[]() -> std::unique_ptr<libkineto::IActivityProfiler> {
				return std::make_unique<NeuronActivityProfiler>();
			});
	}
} g_register_profiler;

// torch.ops.neuron._profiler_registered() -> the factory is in torch's registry.
bool profiler_registered()
{
	return torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().hasFactory();
}

// torch.ops.neuron._site_probe(n) -> "FILE:LINE in FUNC" of the calling Python line, captured n times
// (what a launch captures; benchmarks time it, tests check the resolution).
std::string site_probe(int64_t n)
{
	uint64_t s = 0;
	for (int64_t i = 0; i < std::max<int64_t>(n, 1); i++)
		s = capture_site();
	char buf[512];
	format_site(s, buf, sizeof buf);
	return buf;
}

// torch.ops.neuron._kernels_describe() -> "cpu ...\nlevel ...\n<family> <isa>\n..." (torchneuron info).
std::string kernels_describe()
{
	std::string s(nk_kernels_describe(nullptr, 0) + 1, '\0');
	s.resize(nk_kernels_describe(s.data(), s.size()));
	return s;
}

} // namespace

} // namespace neuron

TORCH_LIBRARY_FRAGMENT(neuron, m)
{
	m.def("_profiler_registered() -> bool", &neuron::profiler_registered);
	m.def("_site_probe(int n=1) -> str", &neuron::site_probe);
	m.def("_backward_site_push() -> int", &neuron::backward_site_push);
	m.def("_backward_site_pop(int previous) -> ()", &neuron::backward_site_pop);
	m.def("_memory_history(bool enabled, int max_entries, bool stacks) -> ()", &neuron::memory_history);
	m.def("_memory_snapshot(int device) -> str", &neuron::memory_snapshot);
	m.def("_kernels_describe() -> str", &neuron::kernels_describe);
}
