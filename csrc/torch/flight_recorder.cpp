// flight_recorder.cpp - the Flight Recorder ring of the c10d backend "neuron" (see flight_recorder.h).
// The dump is the dictionary FlightRecorder<EventType>::dump builds (torch/csrc/distributed/c10d/
// FlightRecorderDetail.hpp, 2.13): version, pg_config, pg_status, comm_lib_version and the entries with
// the keys torchfrtrace reads; it is written by hand because that template's definitions need headers
// the wheel does not ship.
#include "flight_recorder.h"

#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>
#include <torch/csrc/jit/serialization/pickle.h>

#include <ATen/core/ivalue.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace neuron::fr {
namespace {

struct Entry {
	int64_t id;
	size_t pg_id;
	uint64_t seq, p2p_seq;
	bool p2p;
	std::string name;
	std::vector<TensorMeta> in, out;
	int64_t created_ns, timeout_ms;
	int64_t started_ns = -1, completed_ns = -1;
	std::string thread_id;
};

struct Group {
	std::string name, desc;
	std::vector<uint64_t> ranks;
	uint64_t last_enqueued = 0, last_started = 0, last_completed = 0;
};

struct Recorder {
	std::mutex mu;
	size_t cap = 0;
	std::vector<Entry> ring; // entries id % cap
	int64_t next = 0;
	std::vector<Group> groups;
	bool dumped = false;

	Recorder()
	{
		const char *e = getenv("TORCH_FR_BUFFER_SIZE");
		if (!e)
			e = getenv("TORCH_NCCL_TRACE_BUFFER_SIZE");
		long v = e ? strtol(e, nullptr, 10) : 2000;
		cap = v > 0 ? (size_t)v : 0;
	}
	Entry *find(int64_t id)
	{
		if (id < 0 || !cap || id + (int64_t)cap < next || id >= next)
			return nullptr;
		return &ring[(size_t)id % cap];
	}
};

Recorder &rec()
{
	static Recorder *r = new Recorder(); // leaked: used until exit
	return *r;
}

int64_t now_ns()
{
	return std::chrono::duration_cast<std::chrono::nanoseconds>(
		       std::chrono::system_clock::now().time_since_epoch())
		.count();
}

c10::List<c10::IValue> sizes_of(const std::vector<TensorMeta> &ts)
{
	c10::List<c10::IValue> out(c10::AnyType::get());
	for (const auto &t : ts) {
		c10::List<c10::IValue> dims(c10::AnyType::get());
		for (int64_t d : t.sizes)
			dims.push_back(d);
		out.push_back(dims);
	}
	return out;
}

c10::List<c10::IValue> dtypes_of(const std::vector<TensorMeta> &ts)
{
	c10::List<c10::IValue> out(c10::AnyType::get());
	for (const auto &t : ts)
		out.push_back(t.dtype);
	return out;
}

c10::Dict<c10::IValue, c10::IValue> dict()
{
	return c10::Dict<c10::IValue, c10::IValue>(c10::AnyType::get(), c10::AnyType::get());
}

std::string ranks_str(const std::vector<uint64_t> &ranks)
{
	std::ostringstream s;
	s << "[";
	for (size_t i = 0; i < ranks.size(); i++)
		s << (i ? ", " : "") << ranks[i];
	s << "]";
	return s.str();
}

c10::IValue entry_value(const Entry &e, const Group &g)
{
	auto d = dict();
	d.insert("record_id", e.id);
	d.insert("pg_id", (int64_t)e.pg_id);
	d.insert("process_group", c10::ivalue::Tuple::create(g.name, g.desc));
	d.insert("thread_name", std::string("neuron collective"));
	d.insert("thread_id", e.thread_id);
	d.insert("collective_seq_id", (int64_t)e.seq);
	d.insert("p2p_seq_id", (int64_t)e.p2p_seq);
	d.insert("op_id", (int64_t)(e.p2p ? e.p2p_seq : e.seq));
	d.insert("profiling_name", e.name);
	d.insert("time_created_ns", e.created_ns);
	if (e.started_ns >= 0 && e.completed_ns >= 0)
		d.insert("duration_ms", (double)(e.completed_ns - e.started_ns) / 1e6);
	d.insert("input_sizes", sizes_of(e.in));
	d.insert("input_dtypes", dtypes_of(e.in));
	d.insert("output_sizes", sizes_of(e.out));
	d.insert("output_dtypes", dtypes_of(e.out));
	d.insert("state", std::string(e.completed_ns >= 0 ? "completed" : e.started_ns >= 0 ? "started" : "scheduled"));
	d.insert("time_discovered_started_ns", e.started_ns >= 0 ? c10::IValue(e.started_ns) : c10::IValue());
	d.insert("time_discovered_completed_ns", e.completed_ns >= 0 ? c10::IValue(e.completed_ns) : c10::IValue());
	d.insert("retired", e.completed_ns >= 0);
	d.insert("timeout_ms", e.timeout_ms);
	d.insert("is_p2p", e.p2p);
	return d;
}

int dump_rank()
{
	const char *r = getenv("RANK");
	return r ? atoi(r) : 0;
}

} // namespace

size_t add_group(const std::string &name, const std::string &desc, const std::vector<uint64_t> &ranks)
{
	Recorder &r = rec();
	std::lock_guard<std::mutex> g(r.mu);
	r.groups.push_back(Group{name, desc, ranks});
	return r.groups.size() - 1;
}

int64_t record(size_t pg_id, uint64_t seq, uint64_t p2p_seq, bool p2p, const std::string &profiling_name,
	       std::vector<TensorMeta> inputs, std::vector<TensorMeta> outputs, int64_t timeout_ms)
{
	Recorder &r = rec();
	std::ostringstream tid;

	if (!r.cap)
		return -1;
	tid << std::this_thread::get_id();
	std::lock_guard<std::mutex> g(r.mu);
	if (r.ring.size() < r.cap)
		r.ring.resize(r.cap);
	int64_t id = r.next++;
	Entry &e = r.ring[(size_t)id % r.cap];
	e = Entry{id, pg_id, seq, p2p_seq, p2p, profiling_name, std::move(inputs), std::move(outputs), now_ns(),
		  timeout_ms};
	e.thread_id = tid.str();
	if (pg_id < r.groups.size() && !p2p)
		r.groups[pg_id].last_enqueued = seq;
	return id;
}

void started(int64_t id)
{
	Recorder &r = rec();
	std::lock_guard<std::mutex> g(r.mu);
	if (Entry *e = r.find(id)) {
		e->started_ns = now_ns();
		if (e->pg_id < r.groups.size() && !e->p2p)
			r.groups[e->pg_id].last_started = e->seq;
	}
}

void completed(int64_t id)
{
	Recorder &r = rec();
	std::lock_guard<std::mutex> g(r.mu);
	if (Entry *e = r.find(id)) {
		e->completed_ns = now_ns();
		if (e->pg_id < r.groups.size() && !e->p2p)
			r.groups[e->pg_id].last_completed = e->seq;
	}
}

std::string dump()
{
	Recorder &r = rec();
	auto result = dict();
	auto pg_config = dict(), pg_status = dict();
	c10::List<c10::IValue> entries(c10::AnyType::get());

	std::lock_guard<std::mutex> g(r.mu);
	for (size_t i = 0; i < r.groups.size(); i++) {
		const Group &grp = r.groups[i];
		auto info = dict(), st = dict();
		info.insert("name", grp.name);
		info.insert("desc", grp.desc);
		info.insert("ranks", ranks_str(grp.ranks));
		pg_config.insert(grp.name, info);
		st.insert("last_enqueued_collective", (int64_t)grp.last_enqueued);
		st.insert("last_started_collective", (int64_t)grp.last_started);
		st.insert("last_completed_collective", (int64_t)grp.last_completed);
		pg_status.insert(std::to_string(i), st);
	}
	for (int64_t id = r.next > (int64_t)r.cap ? r.next - (int64_t)r.cap : 0; id < r.next; id++) {
		const Entry &e = r.ring[(size_t)id % r.cap];
		if (e.pg_id < r.groups.size())
			entries.push_back(entry_value(e, r.groups[e.pg_id]));
	}
	result.insert("version", std::string("2.10"));
	result.insert("pg_config", pg_config);
	result.insert("comm_lib_version", std::string("neuron-ccl"));
	result.insert("pg_status", pg_status);
	result.insert("entries", entries);
	std::vector<char> bytes = torch::jit::pickle(result, nullptr); // plain pickle, as FlightRecorder::dump
	return std::string(bytes.begin(), bytes.end());
}

void dump_on_failure()
{
	Recorder &r = rec();
	if (!r.cap || (!getenv("TORCH_FR_DUMP_TEMP_FILE") && !getenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")))
		return;
	{
		std::lock_guard<std::mutex> g(r.mu);
		if (r.dumped)
			return;
		r.dumped = true;
	}
	try {
		std::string bytes = dump();
		c10d::DebugInfoWriter::getWriter(dump_rank()).write(bytes);
	} catch (const std::exception &) { // a failed dump must not hide the collective's own error
	}
}

} // namespace neuron::fr
