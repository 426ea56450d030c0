/* random_dist.c - more distributions on the counter-based generator of random.c (Philox4x32-10 on
 * key = seed, counter = (offset + k, 0)), and the data-dependent samplers randperm and multinomial.
 *
 * Element k of the output (linear index in the iterator's order) uses block k's words; with
 * u = 53 bits of (w0, w1) in [0, 1) and v = 1 - u in (0, 1], computed in double and stored with
 * PyTorch's cast rules:
 *   exponential(lambda = a):          -log(v) / a
 *   cauchy(median = a, sigma = b):    a + b * tan(pi * (u - 1/2))
 *   geometric(p = a):                 ceil(log(v) / log1p(-a))   (>= 1; integer dtypes too)
 *   log_normal(mean = a, std = b):    exp(a + b * z), z = Box-Muller of v and (w2, w3)
 * randperm(n): Fisher-Yates from the back, step i (i = n-1 .. 1) swaps i with j = r mod (i + 1),
 *   r = 64 bits of block i's (w0, w1); consumes n counters.  Serial.
 * multinomial: rows of p [D, C] (weights, not necessarily normalized), S samples per row into int64
 *   out [D, S].  With replacement: sample s of row d uses block d*S + s: u in [0, 1) against the
 *   row's cumulative sums in double (the first category whose cumulative sum exceeds u * total,
 *   skipping zero-weight ones).  Without replacement: the exponential trick (as aten): key_c =
 *   p_c / E_c with E_c = -log(v) from block d*C + c; the S largest keys, in decreasing order.
 *   Rows are checked first (finite, >= 0, positive sum; without replacement at least S categories of
 *   nonzero weight), else the kernel fails naming the row.  Parallel over rows.
 * All results depend only on (seed, offset, element), so they do not depend on threads.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

static inline double dist_u(nk_philox_out_t w)
{
	return nk_u64_to_unit_f64(w.v[0], w.v[1]);
}

static double dist_value(const nk_dist_args_t *a, uint64_t k)
{
	nk_philox_out_t w = nk_philox4x32_10(a->seed, a->offset + k, 0);
	double u = dist_u(w), v = 1.0 - u;
	switch (a->kind) {
	case NK_DIST_EXPONENTIAL:
		return -log(v) / a->a;
	case NK_DIST_CAUCHY:
		return a->a + a->b * tan(M_PI * (u - 0.5));
	case NK_DIST_GEOMETRIC: {
		double g = ceil(log(v) / log1p(-a->a));
		return g < 1 ? 1 : g;
	}
	default: { /* NK_DIST_LOG_NORMAL */
		double u2 = nk_u64_to_unit_f64(w.v[2], w.v[3]);
		double z = sqrt(-2.0 * log(v)) * cos(2.0 * M_PI * u2);
		return exp(a->a + a->b * z);
	}
	}
}

static void dist_row(void *ctx, char *const *data, const int64_t *st, int64_t n, int64_t lin)
{
	const nk_dist_args_t *a = ctx;
	int dt = a->it.dtype[0];
	for (int64_t j = 0; j < n; j++) {
		double x = dist_value(a, (uint64_t)(lin + j));
		char *p = data[0] + j * st[0];
		if (nk_is_float(dt))
			nk_store_f64(p, dt, x);
		else /* geometric on integer dtypes: the integer count (saturating at the dtype's range via int64) */
			nk_store_i64(p, dt, x >= 9.2e18 ? INT64_MAX : (int64_t)x);
	}
}

static int dist_check(const nk_dist_args_t *a)
{
	static const char *const names[] = {"exponential", "cauchy", "geometric", "log_normal"};
	if (a->kind < NK_DIST_EXPONENTIAL || a->kind > NK_DIST_LOG_NORMAL) {
		nrt_kernel_fail("nk_dist: unknown kind %d", a->kind);
		return -1;
	}
	int dt = a->it.dtype[0];
	if (a->kind != NK_DIST_GEOMETRIC && !nk_is_float(dt)) {
		nrt_kernel_fail("nk_dist: %s not implemented for dtype %s", names[a->kind], nk_dtype_name(dt));
		return -1;
	}
	bool ok = a->kind == NK_DIST_EXPONENTIAL ? a->a > 0 :
		  a->kind == NK_DIST_CAUCHY      ? a->b > 0 :
		  a->kind == NK_DIST_GEOMETRIC   ? a->a > 0 && a->a < 1 : a->b > 0;
	if (!ok) {
		nrt_kernel_fail("nk_dist: %s: bad parameters (%g, %g)", names[a->kind], a->a, a->b);
		return -1;
	}
	return 0;
}

int nk_dist_run(void *args)
{
	const nk_dist_args_t *a = args;
	nk_loop_t L;
	if (nk_loop_init(&L, &a->it, 1, 1, "nk_dist") || dist_check(a))
		return -1;
	nk_loop_parallel(&L, NK_PARALLEL_GRAIN / 8, dist_row, (void *)a);
	return 0;
}

/* Reference: element by element through the uncoalesced iterator. */
int nk_dist_ref(void *args)
{
	const nk_dist_args_t *a = args;
	nk_loop_t L;
	if (nk_loop_init(&L, &a->it, 1, 1, "nk_dist") || dist_check(a))
		return -1;
	int dt = a->it.dtype[0];
	for (int64_t k = 0; k < L.numel; k++) {
		double x = dist_value(a, (uint64_t)k);
		char *p = a->it.data[0] + nk_iter_offset(&a->it, 0, k);
		if (nk_is_float(dt))
			nk_store_f64(p, dt, x);
		else
			nk_store_i64(p, dt, x >= 9.2e18 ? INT64_MAX : (int64_t)x);
	}
	return 0;
}

/* ---- randperm ---------------------------------------------------------------------------------- */
int nk_randperm_run(void *args)
{
	const nk_randperm_args_t *a = args;
	if (!nk_dtype_valid(a->dtype) || a->dtype == NK_BOOL || a->n < 0) {
		nrt_kernel_fail("nk_randperm: bad arguments (n %lld, dtype %d)", (long long)a->n, a->dtype);
		return -1;
	}
	size_t es = nk_dtype_size(a->dtype);
	char *o = a->out;
	int64_t *p = a->work;
	for (int64_t i = 0; i < a->n; i++)
		p[i] = i;
	for (int64_t i = a->n - 1; i > 0; i--) {
		nk_philox_out_t w = nk_philox4x32_10(a->seed, a->offset + (uint64_t)i, 0);
		uint64_t r = ((uint64_t)w.v[1] << 32) | w.v[0];
		int64_t j = (int64_t)(r % (uint64_t)(i + 1)), t = p[i];
		p[i] = p[j];
		p[j] = t;
	}
	for (int64_t i = 0; i < a->n; i++)
		nk_store_i64(o + i * (int64_t)es, a->dtype, p[i]);
	return 0;
}

/* ---- multinomial ------------------------------------------------------------------------------- */
/* (on the kernel's thread: nrt_kernel_fail is thread-local) */
static int mn_check_row(const nk_multinomial_args_t *a, int64_t d)
{
	double total = 0;
	int64_t nz = 0;
	size_t es = nk_dtype_size(a->dtype);
	for (int64_t c = 0; c < a->C; c++) {
		double pc = nk_load_f64((const char *)a->p + (d * a->C + c) * (int64_t)es, a->dtype);
		if (!(pc >= 0) || isinf(pc)) {
			nrt_kernel_fail("multinomial: probability tensor contains either `inf`, `nan` or element < 0 (row %lld)",
					(long long)d);
			return -1;
		}
		total += pc;
		nz += pc > 0;
	}
	if (!(total > 0)) {
		nrt_kernel_fail("multinomial: invalid multinomial distribution (sum of probabilities <= 0) (row %lld)", (long long)d);
		return -1;
	}
	if (!a->replacement && nz < a->S) {
		nrt_kernel_fail("multinomial: invalid multinomial distribution (with replacement=False, not enough non-negative "
				"category to sample) (row %lld: %lld nonzero, %lld samples)", (long long)d, (long long)nz,
				(long long)a->S);
		return -1;
	}
	return 0;
}

static void mn_rows(void *ctx, int64_t d0, int64_t d1)
{
	const nk_multinomial_args_t *a = ctx;
	size_t es = nk_dtype_size(a->dtype);
	for (int64_t d = d0; d < d1; d++) {
		double *p = (double *)a->work + d * 2 * a->C, *q = p + a->C;
		for (int64_t c = 0; c < a->C; c++)
			p[c] = nk_load_f64((const char *)a->p + (d * a->C + c) * (int64_t)es, a->dtype);
		int64_t *out = a->out + d * a->S;
		if (a->replacement) {
			double acc = 0; /* q: cumulative sums */
			for (int64_t c = 0; c < a->C; c++)
				q[c] = acc += p[c];
			for (int64_t s = 0; s < a->S; s++) {
				double u = dist_u(nk_philox4x32_10(a->seed, a->offset + (uint64_t)(d * a->S + s), 0)) * acc;
				int64_t lo = 0, hi = a->C - 1; /* first c with q[c] > u */
				while (lo < hi) {
					int64_t mid = lo + (hi - lo) / 2;
					if (q[mid] > u)
						hi = mid;
					else
						lo = mid + 1;
				}
				out[s] = lo;
			}
			continue;
		}
		for (int64_t c = 0; c < a->C; c++) {
			nk_philox_out_t w = nk_philox4x32_10(a->seed, a->offset + (uint64_t)(d * a->C + c), 0);
			q[c] = p[c] > 0 ? p[c] / -log(1.0 - dist_u(w)) : -1.0;
		}
		for (int64_t s = 0; s < a->S; s++) { /* selection of the S largest keys, ties to the lower index */
			int64_t best = -1;
			for (int64_t c = 0; c < a->C; c++)
				if (q[c] >= 0 && (best < 0 || q[c] > q[best]))
					best = c;
			out[s] = best;
			q[best] = -1.0;
		}
	}
}

int nk_multinomial_run(void *args)
{
	const nk_multinomial_args_t *a = args;
	if (!nk_is_float(a->dtype) || a->D < 0 || a->C <= 0 || a->S < 0 || (!a->replacement && a->S > a->C)) {
		nrt_kernel_fail("nk_multinomial: bad arguments (dtype %d, rows %lld, categories %lld, samples %lld)", a->dtype,
				(long long)a->D, (long long)a->C, (long long)a->S);
		return -1;
	}
	for (int64_t d = 0; d < a->D; d++)
		if (mn_check_row(a, d))
			return -1;
	if (a->D > 0 && a->S > 0)
		nrt_parallel_for(a->D, 1, mn_rows, (void *)a);
	return 0;
}
