// flight_recorder.h - the last collectives of this process in PyTorch's Flight Recorder format, for the
// c10d backend "neuron" (distributed.cpp).  A ring of TORCH_FR_BUFFER_SIZE entries (default 2000; 0
// turns it off) records each collective when it is issued (scheduled), when it starts to run (started)
// and when it finished (completed).  When a collective fails (timeout, dead peer, mismatch) and
// TORCH_FR_DUMP_TEMP_FILE (or TORCH_NCCL_DEBUG_INFO_TEMP_FILE) is set, the ring is written once per
// process, pickled as FlightRecorder::dump writes it (version "2.10"), to that prefix followed by the
// rank, through c10d's DebugInfoWriter, so that torchfrtrace (torch.distributed.flight_recorder) reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace neuron::fr {

struct TensorMeta {
	std::vector<int64_t> sizes;
	std::string dtype; // c10::toString(ScalarType): "Float", "BFloat16", ...
};

// A process group (its c10d name, description and global ranks), for the dump's pg_config; returns its
// pg_id.
size_t add_group(const std::string &name, const std::string &desc, const std::vector<uint64_t> &ranks);
// Records a collective when it is issued; returns its id, or -1 when the recorder is off.
int64_t record(size_t pg_id, uint64_t seq, uint64_t p2p_seq, bool p2p, const std::string &profiling_name,
	       std::vector<TensorMeta> inputs, std::vector<TensorMeta> outputs, int64_t timeout_ms);
void started(int64_t id);
void completed(int64_t id);
// After a failed collective: writes the dump (once per process) where the environment asks for one.
void dump_on_failure();
// The pickled dump (the bytes torchfrtrace reads), for tests and torchneuron.distributed.
std::string dump();

} // namespace neuron::fr
