// profiler.h - the glue's hooks into profiler.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace neuron {

// Traces the host work of a CPU-fallback op (construction to destruction) as a device activity of the
// current queue, named "<op> (CPU fallback)", while a profiler records device activities; otherwise
// one relaxed load.
struct FallbackTrace {
	explicit FallbackTrace(const std::string &op);
	~FallbackTrace();
	FallbackTrace(const FallbackTrace &) = delete;
	FallbackTrace &operator=(const FallbackTrace &) = delete;

    private:
	const char *name_ = nullptr;
	int64_t t0_ = 0;
};

} // namespace neuron
