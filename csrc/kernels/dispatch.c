/* dispatch.c - the kernel-dispatch point: the CPU's features and the level the NEURON_KERNELS
 * environment variable forces.  See nk_impl.h. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "nk_impl.h"

/* ---- reference switch: 0 = not decided yet, 1 = optimized, 2 = reference ---------------------- */
static atomic_int reference_mode;

void nk_force_reference(bool on)
{
	atomic_store(&reference_mode, on ? 2 : 1);
}

bool nk_using_reference(void)
{
	int m = atomic_load(&reference_mode);
	if (m == 0) {
		const char *e = getenv("NEURON_KERNELS");
		m = (e && strcmp(e, "ref") == 0) ? 2 : 1;
		int expect = 0;
		atomic_compare_exchange_strong(&reference_mode, &expect, m);
		m = atomic_load(&reference_mode);
	}
	return m == 2;
}

/* AVX-512 paths: when the CPU has F/BW/VL/DQ, unless NEURON_KERNELS=portable (optimized portable C
 * only, to test those paths on any machine) or the reference is forced. */
bool nk_cpu_avx512(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
	static atomic_int have = -1;
	int h = atomic_load_explicit(&have, memory_order_relaxed);
	if (h < 0) {
		const char *e = getenv("NEURON_KERNELS");
		__builtin_cpu_init();
		h = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
		    !(e && strcmp(e, "portable") == 0);
		atomic_store_explicit(&have, h, memory_order_relaxed);
	}
	return h && !nk_using_reference();
#else
	return false;
#endif
}
