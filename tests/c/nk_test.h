/* nk_test.h - helpers shared by the kernel-family C tests: a seeded RNG, random fills of float
 * dtypes, element access as double, max-error helpers and a clock.  NK_TEST_SMALL is set under the
 * sanitizers (-O1 builds), where tests shrink their sizes. */
#ifndef NK_TEST_H
#define NK_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "nk.h"
#include "nk_impl.h"

#ifndef NK_TEST_SMALL
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NK_TEST_SMALL 1
#else
#define NK_TEST_SMALL 0
#endif
#endif

static uint64_t nkt_state = 0x9e3779b97f4a7c15ull;

static inline void nkt_seed(uint64_t s)
{
	nkt_state = s * 0x9e3779b97f4a7c15ull + 1;
}

/* splitmix64 */
static inline uint64_t nkt_next(void)
{
	uint64_t z = (nkt_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline double nkt_uniform(double lo, double hi)
{
	return lo + (hi - lo) * (double)(nkt_next() >> 11) * 0x1p-53;
}

static inline int64_t nkt_randint(int64_t lo, int64_t hi)
{
	return lo + (int64_t)(nkt_next() % (uint64_t)(hi - lo));
}

/* n elements of a float dtype, uniform in [lo, hi) (rounded to the dtype). */
static inline void nkt_fill(void *p, int dtype, int64_t n, double lo, double hi)
{
	for (int64_t i = 0; i < n; i++)
		nk_fp_stored(p, dtype, i, nkt_uniform(lo, hi));
}

static inline void *nkt_alloc(int dtype, int64_t n)
{
	return calloc((size_t)(n > 0 ? n : 1), nk_fp_elem_size(dtype));
}

static inline double nkt_get(const void *p, int dtype, int64_t i)
{
	return nk_fp_loadd(p, dtype, i);
}

/* Largest |a[i] - b[i]| / (atol + rtol*|b[i]|) over n elements (> 1 means out of tolerance); NaN
 * counts as a failure unless both are NaN. */
static inline double nkt_err(const void *a, const void *b, int dtype, int64_t n, double atol, double rtol)
{
	double worst = 0;

	for (int64_t i = 0; i < n; i++) {
		double x = nkt_get(a, dtype, i), y = nkt_get(b, dtype, i), e;

		if (isnan(x) || isnan(y)) {
			if (!(isnan(x) && isnan(y)))
				return INFINITY;
			continue;
		}
		if (x == y)
			continue;
		e = fabs(x - y) / (atol + rtol * fabs(y));
		if (e > worst)
			worst = e;
	}
	return worst;
}

static inline double nkt_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline const char *nkt_dtype_name(int dtype)
{
	return dtype == NK_F32 ? "f32" : dtype == NK_F64 ? "f64" : dtype == NK_BF16 ? "bf16" : "f16";
}

#endif /* NK_TEST_H */
