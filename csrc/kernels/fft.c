/* fft.c - the 1-D complex DFT along rows (nk_fft.h).
 *
 * Mixed radix: decimation in time, recursive, out of place; n factored into 4s, 2s and odd primes (all
 * <= FFT_MAX_RADIX); radix-2 and radix-4 butterflies written out, other primes the O(p^2) DFT of the
 * butterfly's p points.  One twiddle table W_n^k = exp(-2 pi i k / n), k < n, serves every level
 * (level of length L reads it with stride n / L).  Other lengths: Bluestein, X[k] = w[k] (a * b)[k]
 * with the chirp w[k] = exp(-pi i k^2 / n) (k^2 reduced mod 2n so the angle stays small), a = x * w,
 * b = conj(w) mirrored, the circular convolution through a power-of-two FFT of length M >= 2n - 1
 * whose spectrum of b is computed once per call.  The backward transform conjugates in and out.
 * Tables live in the calling thread's NK_WS_FFT_TABLE workspace, row scratch in each thread's NK_WS_FFT.
 */
#include <complex.h>
#undef I /* complex.h's imaginary unit */
#include <math.h>
#include <string.h>

#include "nk_complex.h"
#include "nk_fft.h"
#include "nk_impl.h"
#include "nk_workspace.h"
#include "nrt.h"

typedef double _Complex cx_t;

#define FFT_MAX_RADIX 64
#define FFT_MAX_FACTORS 64

static inline cx_t cmul(cx_t x, cx_t y)
{
	double a = creal(x), b = cimag(x), c = creal(y), d = cimag(y);
	return CMPLX(a * c - b * d, a * d + b * c);
}

static inline cx_t cconj(cx_t x)
{
	return CMPLX(creal(x), -cimag(x));
}

/* n's factors (4s, then 2s, then odd primes ascending); 0 if a prime factor exceeds FFT_MAX_RADIX */
static int fft_factor(int64_t n, int64_t *f)
{
	int c = 0;
	while (n % 4 == 0)
		f[c++] = 4, n /= 4;
	while (n % 2 == 0)
		f[c++] = 2, n /= 2;
	for (int64_t p = 3; p * p <= n; p += 2)
		while (n % p == 0) {
			if (p > FFT_MAX_RADIX)
				return 0;
			f[c++] = p, n /= p;
		}
	if (n > 1) {
		if (n > FFT_MAX_RADIX)
			return 0;
		f[c++] = n;
	}
	return c;
}

typedef struct {
	int64_t N;          /* the transform length */
	const cx_t *tw;     /* W_N^k, k < N */
	int64_t f[FFT_MAX_FACTORS];
} fft_plan_t;

static void fft_twiddles(cx_t *tw, int64_t N)
{
	for (int64_t k = 0; k < N; k++) {
		double a = -2.0 * M_PI * (double)k / (double)N;
		tw[k] = CMPLX(cos(a), sin(a));
	}
}

/* out[0..n) = DFT of in[0], in[is], ... (n points); level fi of the plan */
static void fft_rec(const fft_plan_t *P, const cx_t *in, int64_t is, cx_t *out, int64_t n, int fi)
{
	if (n == 1) {
		out[0] = in[0];
		return;
	}
	int64_t p = P->f[fi], m = n / p, ts = P->N / n, tp = P->N / p;
	for (int64_t j = 0; j < p; j++)
		fft_rec(P, in + j * is, is * p, out + j * m, m, fi + 1);
	cx_t t[FFT_MAX_RADIX];
	for (int64_t k = 0; k < m; k++) {
		t[0] = out[k];
		for (int64_t j = 1; j < p; j++)
			t[j] = cmul(out[j * m + k], P->tw[j * k * ts]);
		if (p == 2) {
			out[k] = t[0] + t[1];
			out[m + k] = t[0] - t[1];
		} else if (p == 4) {
			cx_t a = t[0] + t[2], b = t[0] - t[2], c = t[1] + t[3], e = t[1] - t[3];
			cx_t d = CMPLX(cimag(e), -creal(e)); /* -i * e */
			out[k] = a + c;
			out[m + k] = b + d;
			out[2 * m + k] = a - c;
			out[3 * m + k] = b - d;
		} else {
			for (int64_t q = 0; q < p; q++) {
				cx_t s = t[0];
				for (int64_t j = 1; j < p; j++)
					s += cmul(t[j], P->tw[((j * q) % p) * tp]);
				out[q * m + k] = s;
			}
		}
	}
}

typedef struct {
	const nk_fft_args_t *a;
	size_t esz;
	bool bluestein;
	fft_plan_t plan;        /* length n (mixed radix) or M (Bluestein's power of two) */
	int64_t M;
	const cx_t *chirp, *bspec; /* Bluestein: w[k] (k < n), the spectrum of b (M) */
	size_t scratch;         /* bytes per thread */
	int failed;
} fft_ctx_t;

static inline cx_t fft_load(const fft_ctx_t *c, int64_t b, int64_t j)
{
	const char *p = (const char *)c->a->in + (b * c->a->is_b + j * c->a->is_n) * (int64_t)c->esz;
	if (c->a->dtype == NK_C64)
		return CMPLX((double)((const float *)p)[0], (double)((const float *)p)[1]);
	return CMPLX(((const double *)p)[0], ((const double *)p)[1]);
}

static inline void fft_store(const fft_ctx_t *c, int64_t b, int64_t k, cx_t v)
{
	char *p = (char *)c->a->out + (b * c->a->os_b + k * c->a->os_n) * (int64_t)c->esz;
	if (c->a->dtype == NK_C64)
		((float *)p)[0] = (float)creal(v), ((float *)p)[1] = (float)cimag(v);
	else
		((double *)p)[0] = creal(v), ((double *)p)[1] = cimag(v);
}

static void fft_one_row(const fft_ctx_t *c, int64_t b, cx_t *s)
{
	const nk_fft_args_t *a = c->a;
	int64_t n = a->n;
	bool bw = !a->forward;
	cx_t *x = s, *y;
	if (!c->bluestein) {
		y = s + n;
		for (int64_t j = 0; j < n; j++) {
			cx_t v = fft_load(c, b, j);
			x[j] = bw ? cconj(v) : v;
		}
		fft_rec(&c->plan, x, 1, y, n, 0);
	} else {
		int64_t M = c->M;
		cx_t *A = s + M;
		for (int64_t j = 0; j < n; j++) {
			cx_t v = fft_load(c, b, j);
			x[j] = cmul(bw ? cconj(v) : v, c->chirp[j]);
		}
		for (int64_t j = n; j < M; j++)
			x[j] = 0;
		fft_rec(&c->plan, x, 1, A, M, 0);
		for (int64_t j = 0; j < M; j++) /* conj for the inverse FFT: IFFT(z) = conj(FFT(conj z)) / M */
			x[j] = cconj(cmul(A[j], c->bspec[j]));
		fft_rec(&c->plan, x, 1, A, M, 0);
		y = x;
		for (int64_t k = 0; k < n; k++)
			y[k] = cmul(c->chirp[k], cconj(A[k]) / (double)M);
	}
	for (int64_t k = 0; k < n; k++) {
		cx_t v = bw ? cconj(y[k]) : y[k];
		fft_store(c, b, k, CMPLX(creal(v) * a->scale, cimag(v) * a->scale));
	}
}

static void fft_rows(void *ctx, int64_t lo, int64_t hi)
{
	fft_ctx_t *c = ctx;
	cx_t *s = nk_ws_get(NK_WS_FFT, c->scratch);
	if (!s) {
		__atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
		return;
	}
	for (int64_t b = lo; b < hi; b++)
		fft_one_row(c, b, s);
}

static int fft_fail(const char *msg, int64_t v)
{
	nrt_kernel_fail("nk_fft: %s (%lld)", msg, (long long)v);
	return -1;
}

int nk_fft_run(void *args)
{
	const nk_fft_args_t *a = args;
	if (!nk_is_complex(a->dtype))
		return fft_fail("dtype is not complex", a->dtype);
	if (a->n < 0 || a->batch < 0)
		return fft_fail("negative size", a->n < 0 ? a->n : a->batch);
	if (a->n == 0 || a->batch == 0)
		return 0;
	if (a->n > ((int64_t)1 << 40))
		return fft_fail("transform length too large", a->n);
	fft_ctx_t c;
	memset(&c, 0, sizeof c);
	c.a = a;
	c.esz = a->dtype == NK_C64 ? 8 : 16;
	int nf = fft_factor(a->n, c.plan.f);
	c.bluestein = nf == 0;
	size_t table;
	if (!c.bluestein) {
		c.plan.N = a->n;
		table = (size_t)a->n * sizeof(cx_t);
		c.scratch = 2 * (size_t)a->n * sizeof(cx_t);
	} else {
		int64_t M = 1;
		while (M < 2 * a->n - 1)
			M *= 2;
		c.M = M;
		c.plan.N = M;
		fft_factor(M, c.plan.f);
		table = (size_t)(2 * M + a->n) * sizeof(cx_t);
		c.scratch = 2 * (size_t)M * sizeof(cx_t);
	}
	cx_t *tab = nk_ws_get(NK_WS_FFT_TABLE, table);
	if (!tab)
		return fft_fail("no host memory for the twiddle table, bytes", (int64_t)table);
	fft_twiddles(tab, c.plan.N);
	c.plan.tw = tab;
	if (c.bluestein) {
		int64_t n = a->n, M = c.M;
		cx_t *w = tab + M, *bs = tab + M + n;
		for (int64_t k = 0; k < n; k++) {
			int64_t k2 = (int64_t)(((unsigned __int128)k * (unsigned __int128)k) % (unsigned __int128)(2 * n));
			double ang = -M_PI * (double)k2 / (double)n;
			w[k] = CMPLX(cos(ang), sin(ang));
		}
		cx_t *b = nk_ws_get(NK_WS_FFT, c.scratch); /* the caller's scratch, before the rows use it */
		if (!b)
			return fft_fail("no host memory for the scratch, bytes", (int64_t)c.scratch);
		for (int64_t j = 0; j < M; j++)
			b[j] = 0;
		b[0] = cconj(w[0]);
		for (int64_t k = 1; k < n; k++)
			b[k] = b[M - k] = cconj(w[k]);
		fft_rec(&c.plan, b, 1, bs, M, 0);
		c.chirp = w, c.bspec = bs;
	}
	int64_t per = c.bluestein ? 4 * c.M : a->n;
	int64_t grain = NK_PARALLEL_GRAIN / (per > 0 ? per : 1) + 1;
	nrt_parallel_for(a->batch, grain, fft_rows, &c);
	if (__atomic_load_n(&c.failed, __ATOMIC_RELAXED))
		return fft_fail("no host memory for the row scratch, bytes", (int64_t)c.scratch);
	return 0;
}
