/* test_fft.c - the DFT kernel (fft.c): mixed-radix lengths (powers of 2 and 4, odd primes up to 61,
 * mixed products) and Bluestein lengths (primes 67, 97, 1009, a product with one), forward and backward,
 * c64 and c128, strided rows and a batch split over the pool, against an O(n^2) long double DFT;
 * backward(forward(x)) / n == x; bad input fails cleanly. */
#include <complex.h>
#undef I
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk_complex.h"
#include "nk_fft.h"
#include "nk_test.h"
#include "nrt.h"

static const int64_t lens[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 30, 61, 64, 67, 97, 128, 210, 360, 1000, 1009, 1024, 2 * 67 * 3};

static void dft_ref(const double *x, long double complex *X, int64_t n, bool fwd)
{
	for (int64_t k = 0; k < n; k++) {
		long double complex s = 0;
		for (int64_t j = 0; j < n; j++) {
			long double ang = (fwd ? -2.0L : 2.0L) * 3.14159265358979323846264338327950288L * (long double)((j * k) % n) / (long double)n;
			s += CMPLXL(x[2 * j], x[2 * j + 1]) * CMPLXL(cosl(ang), sinl(ang));
		}
		X[k] = s;
	}
}

static void fft_case(int dt, int64_t n, bool fwd)
{
	int64_t B = 3, is_n = 2, is_b = 2 * n + 1; /* strided rows: every other element, rows apart by an odd gap */
	size_t esz = dt == NK_C64 ? 8 : 16;
	char *in = calloc((size_t)(B * is_b + 1), esz), *out = calloc((size_t)(B * n), esz);
	double *x = malloc((size_t)n * 16);
	long double complex *X = malloc((size_t)n * sizeof(long double complex));
	nkt_seed((uint64_t)n * 7 + fwd);
	for (int64_t b = 0; b < B; b++)
		for (int64_t j = 0; j < n; j++) {
			double re = nkt_uniform(-1, 1), im = nkt_uniform(-1, 1);
			char *p = in + (b * is_b + j * is_n) * (int64_t)esz;
			if (dt == NK_C64)
				((float *)p)[0] = (float)re, ((float *)p)[1] = (float)im;
			else
				((double *)p)[0] = re, ((double *)p)[1] = im;
		}
	nk_fft_args_t a = {.dtype = dt, .n = n, .batch = B, .in = in, .is_n = is_n, .is_b = is_b, .out = out, .os_n = 1, .os_b = n,
			   .forward = fwd, .scale = 0.5};
	CHECK(nk_fft_run(&a) == 0, "fft n=%lld", (long long)n);
	double worst = 0;
	for (int64_t b = 0; b < B; b++) {
		for (int64_t j = 0; j < n; j++) {
			char *p = in + (b * is_b + j * is_n) * (int64_t)esz;
			x[2 * j] = dt == NK_C64 ? ((float *)p)[0] : ((double *)p)[0];
			x[2 * j + 1] = dt == NK_C64 ? ((float *)p)[1] : ((double *)p)[1];
		}
		dft_ref(x, X, n, fwd);
		for (int64_t k = 0; k < n; k++) {
			char *p = out + (b * n + k) * (int64_t)esz;
			double re = dt == NK_C64 ? ((float *)p)[0] : ((double *)p)[0], im = dt == NK_C64 ? ((float *)p)[1] : ((double *)p)[1];
			double e = (double)cabsl(CMPLXL(re, im) - 0.5L * X[k]) / sqrt((double)n);
			worst = e > worst ? e : worst;
		}
	}
	double tol = dt == NK_C64 ? 2e-7 : 1e-14;
	CHECK(worst < tol * (1 + log2((double)n)), "%s n=%lld %s: error %g", dt == NK_C64 ? "c64" : "c128", (long long)n, fwd ? "fwd" : "bwd", worst);
	free(in), free(out), free(x), free(X);
}

static void test_lengths(void)
{
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
		for (int f = 0; f < 2; f++) {
			fft_case(NK_C128, lens[i], f);
			fft_case(NK_C64, lens[i], f);
		}
}

/* many rows (the pool), round trip */
static void test_round_trip_pooled(void)
{
	int64_t n = 96, B = 2000;
	double *x = malloc((size_t)(n * B) * 16), *y = malloc((size_t)(n * B) * 16), *z = malloc((size_t)(n * B) * 16);
	nkt_seed(3);
	for (int64_t i = 0; i < 2 * n * B; i++)
		x[i] = nkt_uniform(-1, 1);
	nk_fft_args_t a = {.dtype = NK_C128, .n = n, .batch = B, .in = x, .is_n = 1, .is_b = n, .out = y, .os_n = 1, .os_b = n, .forward = true, .scale = 1};
	CHECK(nk_fft_run(&a) == 0, "forward");
	a.in = y, a.out = z, a.forward = false, a.scale = 1.0 / (double)n;
	CHECK(nk_fft_run(&a) == 0, "backward");
	double worst = 0;
	for (int64_t i = 0; i < 2 * n * B; i++)
		worst = fabs(z[i] - x[i]) > worst ? fabs(z[i] - x[i]) : worst;
	CHECK(worst < 1e-14, "round trip error %g", worst);
	free(x), free(y), free(z);
}

static void test_bad_input(void)
{
	double x[4] = {0}, y[4];
	nk_fft_args_t a = {.dtype = NK_F64, .n = 2, .batch = 1, .in = x, .is_n = 1, .is_b = 2, .out = y, .os_n = 1, .os_b = 2, .forward = true, .scale = 1};
	CHECK(nk_fft_run(&a) != 0, "a real dtype is refused");
	a.dtype = NK_C128, a.n = -1;
	CHECK(nk_fft_run(&a) != 0, "a negative length is refused");
	a.n = 0;
	CHECK(nk_fft_run(&a) == 0, "length 0 is nothing to do");
}

int main(void)
{
	RUN(test_lengths);
	RUN(test_round_trip_pooled);
	RUN(test_bad_input);
	return ctest_finish();
}
