/* layernorm_avx512.c - AVX-512 versions of the layer-norm row primitives (nk_lnops_impl.h); compiled with
 * the AVX-512 flags and used by layernorm.c only after nk_cpu_avx512().  The formulas are those of the
 * portable versions in layernorm.c; sums run in two 16-lane f32 accumulators whose 32 lanes are folded
 * in f64 (the portable code folds 16 lanes), tails use masked loads and stores. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "nk_lnops_impl.h"
#include "nk_avx512.h"

/* The 32 lanes of a and b summed in f64 (pairwise in vectors: no long serial chain). */
static inline double fold(__m512 a, __m512 b)
{
	__m512d lo = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a)), _mm512_cvtps_pd(_mm512_castps512_ps256(b)));
	__m512d hi = _mm512_add_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))),
				   _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(b), 1))));

	return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

/* Four accumulator chains: the row is L1-resident, so the add (and FMA) latency, not the loads, would
 * bound two chains. */
static double ln_sum(const float *x, int64_t n)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
	int64_t j = 0;

	for (; j + 64 <= n; j += 64) {
		s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + j));
		s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + j + 16));
		s2 = _mm512_add_ps(s2, _mm512_loadu_ps(x + j + 32));
		s3 = _mm512_add_ps(s3, _mm512_loadu_ps(x + j + 48));
	}
	for (; j < n; j += 16)
		s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(nk_tail_mask16(n - j), x + j));
	return fold(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
}

static double ln_sqdev(const float *x, int64_t n, float m)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, vm = _mm512_set1_ps(m);
	int64_t j = 0;

	for (; j + 64 <= n; j += 64) {
		__m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + j), vm), d1 = _mm512_sub_ps(_mm512_loadu_ps(x + j + 16), vm);
		__m512 d2 = _mm512_sub_ps(_mm512_loadu_ps(x + j + 32), vm), d3 = _mm512_sub_ps(_mm512_loadu_ps(x + j + 48), vm);

		s0 = _mm512_fmadd_ps(d0, d0, s0);
		s1 = _mm512_fmadd_ps(d1, d1, s1);
		s2 = _mm512_fmadd_ps(d2, d2, s2);
		s3 = _mm512_fmadd_ps(d3, d3, s3);
	}
	for (; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);
		__m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + j), vm);

		s0 = _mm512_fmadd_ps(d, d, s0);
	}
	return fold(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
}

static double ln_dot(const float *x, const float *y, int64_t n)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0;
	int64_t j = 0;

	for (; j + 32 <= n; j += 32) {
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + j), _mm512_loadu_ps(y + j), s0);
		s1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + j + 16), _mm512_loadu_ps(y + j + 16), s1);
	}
	for (; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);

		s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + j), _mm512_maskz_loadu_ps(k, y + j), s0);
	}
	return fold(s0, s1);
}

#define AI inline __attribute__((always_inline))

static inline void put(float *p, __m512 v, __mmask16 k, int nt);
static inline int nt_ok(const float *p, int stream);

static void ln_affine(float *y, const float *x, int64_t n, float shift, float scale, float bias, const float *w,
		      const float *b, int stream)
{
	const __m512 vsh = _mm512_set1_ps(shift), vsc = _mm512_set1_ps(scale), vbi = _mm512_set1_ps(bias);
	int nt = nt_ok(y, stream);

	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);
		__m512 v = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), vsh), vsc, vbi);

		if (w)
			v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + j));
		if (b)
			v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, b + j));
		put(y + j, v, k, nt);
	}
}

static void ln_g_xhat(float *dy, float *x, const float *w, int64_t n, float mean, float rstd)
{
	const __m512 vm = _mm512_set1_ps(mean), vr = _mm512_set1_ps(rstd);
	int scale = mean != 0 || rstd != 1;

	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);

		if (dy && w)
			_mm512_mask_storeu_ps(dy + j, k,
					      _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dy + j), _mm512_maskz_loadu_ps(k, w + j)));
		if (scale)
			_mm512_mask_storeu_ps(x + j, k, _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), vm), vr));
	}
}

static void ln_dx_from(float *g, const float *xhat, int64_t n, float rstd, float mg, float mgx)
{
	const __m512 vr = _mm512_set1_ps(rstd), vmg = _mm512_set1_ps(mg), vmgx = _mm512_set1_ps(mgx);

	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);
		__m512 t = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, g + j), vmg);

		t = _mm512_fnmadd_ps(_mm512_maskz_loadu_ps(k, xhat + j), vmgx, t);
		_mm512_mask_storeu_ps(g + j, k, _mm512_mul_ps(vr, t));
	}
}

static void ln_partials(float *sw, float *sb, const float *dy, const float *xhat, int64_t n)
{
	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);
		__m512 d = _mm512_maskz_loadu_ps(k, dy + j);

		if (sw)
			_mm512_mask_storeu_ps(sw + j, k,
					      _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(k, xhat + j), _mm512_maskz_loadu_ps(k, sw + j)));
		if (sb)
			_mm512_mask_storeu_ps(sb + j, k, _mm512_add_ps(d, _mm512_maskz_loadu_ps(k, sb + j)));
	}
}

/* Store v (lanes k) at p; whole vectors non-temporal when nt (p then 64-byte aligned). */
static inline void put(float *p, __m512 v, __mmask16 k, int nt)
{
	if (nt && k == 0xffff)
		_mm512_stream_ps(p, v);
	else
		_mm512_mask_storeu_ps(p, k, v);
}

static inline int nt_ok(const float *p, int stream)
{
	return stream && ((uintptr_t)p & 63) == 0;
}

static void ln_bwd_sums(const float *dy, const float *x, const float *w, int64_t n, float mean, float rstd,
			double *sg, double *sgx, float *sw, float *sb)
{
	const __m512 vm = _mm512_set1_ps(mean), vr = _mm512_set1_ps(rstd);
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
	int64_t j = 0;

	for (; j + 32 <= n; j += 32) {
		__m512 d0 = _mm512_loadu_ps(dy + j), d1 = _mm512_loadu_ps(dy + j + 16);
		__m512 h0 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm), vr);
		__m512 h1 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j + 16), vm), vr);
		__m512 g0 = w ? _mm512_mul_ps(d0, _mm512_loadu_ps(w + j)) : d0;
		__m512 g1 = w ? _mm512_mul_ps(d1, _mm512_loadu_ps(w + j + 16)) : d1;

		a0 = _mm512_add_ps(a0, g0);
		a1 = _mm512_add_ps(a1, g1);
		b0 = _mm512_fmadd_ps(g0, h0, b0);
		b1 = _mm512_fmadd_ps(g1, h1, b1);
		if (sw) {
			_mm512_storeu_ps(sw + j, _mm512_fmadd_ps(d0, h0, _mm512_loadu_ps(sw + j)));
			_mm512_storeu_ps(sw + j + 16, _mm512_fmadd_ps(d1, h1, _mm512_loadu_ps(sw + j + 16)));
		}
		if (sb) {
			_mm512_storeu_ps(sb + j, _mm512_add_ps(d0, _mm512_loadu_ps(sb + j)));
			_mm512_storeu_ps(sb + j + 16, _mm512_add_ps(d1, _mm512_loadu_ps(sb + j + 16)));
		}
	}
	for (; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);
		__m512 d = _mm512_maskz_loadu_ps(k, dy + j);
		__m512 h = _mm512_maskz_mul_ps(k, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), vm), vr);
		__m512 g = w ? _mm512_mul_ps(d, _mm512_maskz_loadu_ps(k, w + j)) : d;

		a0 = _mm512_add_ps(a0, g);
		b0 = _mm512_fmadd_ps(g, h, b0);
		if (sw)
			_mm512_mask_storeu_ps(sw + j, k, _mm512_fmadd_ps(d, h, _mm512_maskz_loadu_ps(k, sw + j)));
		if (sb)
			_mm512_mask_storeu_ps(sb + j, k, _mm512_add_ps(d, _mm512_maskz_loadu_ps(k, sb + j)));
	}
	*sg += fold(a0, a1);
	*sgx += fold(b0, b1);
}

static void ln_bwd_dx(float *dx, const float *dy, const float *x, const float *w, int64_t n, float mean, float rstd,
		      float mg, float mgx, int stream)
{
	const __m512 vm = _mm512_set1_ps(mean), vr = _mm512_set1_ps(rstd), vmg = _mm512_set1_ps(mg),
		     vmgx = _mm512_set1_ps(mgx);
	int nt = nt_ok(dx, stream);

	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);
		__m512 d = _mm512_maskz_loadu_ps(k, dy + j);
		__m512 h = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), vm), vr);
		__m512 g = w ? _mm512_mul_ps(d, _mm512_maskz_loadu_ps(k, w + j)) : d;
		__m512 t = _mm512_fnmadd_ps(h, vmgx, _mm512_sub_ps(g, vmg));

		put(dx + j, _mm512_mul_ps(vr, t), k, nt);
	}
}

/* One vector (lanes k; masked loads and stores only when masked) of the first backward pass for NR rows:
 * g and g*xhat into a[r], b[r] (when sums), dw/db terms into sw, sb in row order. */
static AI void bwd_sums_vec(const float *dy, const float *x, const float *w, int64_t n, const int NR, const __m512 *vm,
			    const __m512 *vr, __m512 *a, __m512 *b, float *sw, float *sb, int sums, __mmask16 k,
			    const int masked)
{
	__m512 wv = _mm512_setzero_ps(), pw = wv, pb = wv;

#define LD(p) (masked ? _mm512_maskz_loadu_ps(k, (p)) : _mm512_loadu_ps(p))
	if (w)
		wv = LD(w);
	if (sw)
		pw = LD(sw);
	if (sb)
		pb = LD(sb);
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++) {
		__m512 d = LD(dy + r * n), xv = LD(x + r * n);
		__m512 h = masked ? _mm512_maskz_mul_ps(k, _mm512_sub_ps(xv, vm[r]), vr[r])
				  : _mm512_mul_ps(_mm512_sub_ps(xv, vm[r]), vr[r]);
		__m512 g = w ? _mm512_mul_ps(d, wv) : d;

		if (sums) {
			a[r] = _mm512_add_ps(a[r], g);
			b[r] = _mm512_fmadd_ps(g, h, b[r]);
		}
		if (sw)
			pw = _mm512_fmadd_ps(d, h, pw);
		if (sb)
			pb = _mm512_add_ps(d, pb);
	}
#undef LD
	if (masked) {
		if (sw)
			_mm512_mask_storeu_ps(sw, k, pw);
		if (sb)
			_mm512_mask_storeu_ps(sb, k, pb);
	} else {
		if (sw)
			_mm512_storeu_ps(sw, pw);
		if (sb)
			_mm512_storeu_ps(sb, pb);
	}
}

/* The two backward passes for NR (1, 2 or 4) rows: each vector of w, sw, sb is loaded (and sw, sb stored)
 * once for the NR rows, whose terms go into sw, sb in row order; one g and one g*xhat chain per row. */
static AI void bwd_group(float *dx, const float *dy, const float *x, const float *w, int64_t n, const int NR,
			 const float *mean, const float *rstd, float *sw, float *sb, const int nt, const int hw,
			 const int all)
{
	__m512 vm[4], vr[4], a[4], b[4], wv;
	int64_t j = 0;

	if (all && (!dx || !sw || !sb))
		__builtin_unreachable(); /* all: the three are given (lets the instance drop the tests) */

#pragma GCC unroll 4
	for (int r = 0; r < NR; r++) {
		vm[r] = _mm512_set1_ps(mean[r]);
		vr[r] = _mm512_set1_ps(rstd[r]);
		a[r] = b[r] = _mm512_setzero_ps();
	}
	for (; j + 16 <= n; j += 16)
		bwd_sums_vec(dy + j, x + j, hw ? w + j : NULL, n, NR, vm, vr, a, b, sw ? sw + j : NULL, sb ? sb + j : NULL,
			     dx != NULL, 0xffff, 0);
	if (j < n)
		bwd_sums_vec(dy + j, x + j, hw ? w + j : NULL, n, NR, vm, vr, a, b, sw ? sw + j : NULL, sb ? sb + j : NULL,
			     dx != NULL, nk_tail_mask16(n - j), 1);
	if (!dx)
		return;
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++) {
		/* dx = rstd*(g - mg - xhat*mgx) = g*rstd - (x - mean)*q + c with q = rstd^2*mgx, c = -rstd*mg
		 * (mg, mgx: means of g and g*xhat; x stays centred): a[r] = c, b[r] = q as f32 broadcasts */
		double mg = _mm512_reduce_add_pd(_mm512_add_pd(
				    _mm512_cvtps_pd(_mm512_castps512_ps256(a[r])),
				    _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[r]), 1))))) /
			    (double)n;
		double mgx = _mm512_reduce_add_pd(_mm512_add_pd(
				     _mm512_cvtps_pd(_mm512_castps512_ps256(b[r])),
				     _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(b[r]), 1))))) /
			     (double)n;

		a[r] = _mm512_set1_ps((float)(-(double)rstd[r] * (float)mg));
		b[r] = _mm512_set1_ps((float)((double)rstd[r] * rstd[r] * (float)mgx));
	}
	for (j = 0; j + 16 <= n; j += 16) {
		if (hw)
			wv = _mm512_loadu_ps(w + j);
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++) {
			__m512 d = _mm512_loadu_ps(dy + r * n + j);
			__m512 xm = _mm512_sub_ps(_mm512_loadu_ps(x + r * n + j), vm[r]);
			__m512 g = hw ? _mm512_mul_ps(d, wv) : d;
			__m512 v = _mm512_fmadd_ps(g, vr[r], _mm512_fnmadd_ps(xm, b[r], a[r]));

			if (nt)
				_mm512_stream_ps(dx + r * n + j, v);
			else
				_mm512_storeu_ps(dx + r * n + j, v);
		}
	}
	if (j < n) {
		__mmask16 k = nk_tail_mask16(n - j);

		if (hw)
			wv = _mm512_maskz_loadu_ps(k, w + j);
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++) {
			__m512 d = _mm512_maskz_loadu_ps(k, dy + r * n + j);
			__m512 xm = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + r * n + j), vm[r]);
			__m512 g = hw ? _mm512_mul_ps(d, wv) : d;

			_mm512_mask_storeu_ps(dx + r * n + j, k, _mm512_fmadd_ps(g, vr[r], _mm512_fnmadd_ps(xm, b[r], a[r])));
		}
	}
}

static void ln_bwd_rows(float *dx, const float *dy, const float *x, const float *w, int64_t nr, int64_t n,
			const float *mean, const float *rstd, float *sw, float *sb, int stream)
{
	int nt = dx && nt_ok(dx, stream) && n % 16 == 0;
	const float *wd = dx ? w : NULL; /* without dx the g sums are not wanted */
	int64_t r = 0;

	/* the usual case (autograd: dx, w, dw and db wanted, no streaming) with everything constant; any other
	 * mix through the generic instance */
	const int common = dx && wd && sw && sb && !nt;
#define BWD_GROUP(NR)                                                                                              \
	(common ? bwd_group(dx + r * n, dy + r * n, x + r * n, wd, n, NR, mean + r, rstd + r, sw, sb, 0, 1, 1)     \
		: wd ? bwd_group(dx ? dx + r * n : NULL, dy + r * n, x + r * n, wd, n, NR, mean + r, rstd + r, sw, sb, nt, 1, 0) \
		     : bwd_group(dx ? dx + r * n : NULL, dy + r * n, x + r * n, NULL, n, NR, mean + r, rstd + r, sw, sb, nt, 0, 0))
	/* the group's dy and x rows stay in L1 (16 KiB of them) from the first pass to the second */
	if (n <= 512)
		for (; r + 4 <= nr; r += 4)
			BWD_GROUP(4);
	if (n <= 1024)
		for (; r + 2 <= nr; r += 2)
			BWD_GROUP(2);
	for (; r < nr; r++) {
		nt = dx && nt_ok(dx + r * n, stream);
		BWD_GROUP(1);
	}
#undef BWD_GROUP
}

/* ---- forward rows ----------------------------------------------------------------------------------
 * The row is L1-resident after its first read and the loop is bound by the load and store ports, so the
 * forward reads it as few times as it can:
 * - moments in one pass, sum x and sum x^2 (four chains each, f32 lanes folded in f64), var = E[x^2] -
 *   mean^2.  Its rounding error relative to var grows with mean^2 / var, so a row whose mean^2 exceeds
 *   its var, whose x^2 overflowed f32, or that is not finite takes the exact second pass over
 *   (x - mean)^2 instead, as before (at most twice the two-pass error otherwise);
 * - the output two rows at a time, so each vector of w and b is loaded once for both rows.  Both rows'
 *   x are loaded before either y is stored (no 4K-alias stall when y[r] and x[r + 1] share page
 *   offsets). */
/* mean and rstd of rows x0 and x1 (x1 may be x0) in one loop: eight independent accumulator chains,
 * four f64 folds and one 2-lane square root and division, so that the two rows' latencies overlap. */
static AI void ln_moments2(const float *x0, const float *x1, int64_t n, double eps, float *mean, float *rstd)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, q0 = s0, q1 = s0, t0 = s0, t1 = s0, u0 = s0, u1 = s0;
	double m[2], var[2];
	int64_t j = 0;

	for (; j + 32 <= n; j += 32) {
		__m512 a0 = _mm512_loadu_ps(x0 + j), a1 = _mm512_loadu_ps(x0 + j + 16);
		__m512 b0 = _mm512_loadu_ps(x1 + j), b1 = _mm512_loadu_ps(x1 + j + 16);

		s0 = _mm512_add_ps(s0, a0);
		s1 = _mm512_add_ps(s1, a1);
		t0 = _mm512_add_ps(t0, b0);
		t1 = _mm512_add_ps(t1, b1);
		q0 = _mm512_fmadd_ps(a0, a0, q0);
		q1 = _mm512_fmadd_ps(a1, a1, q1);
		u0 = _mm512_fmadd_ps(b0, b0, u0);
		u1 = _mm512_fmadd_ps(b1, b1, u1);
	}
	for (; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);
		__m512 a = _mm512_maskz_loadu_ps(k, x0 + j), b = _mm512_maskz_loadu_ps(k, x1 + j);

		s0 = _mm512_add_ps(s0, a);
		q0 = _mm512_fmadd_ps(a, a, q0);
		t0 = _mm512_add_ps(t0, b);
		u0 = _mm512_fmadd_ps(b, b, u0);
	}
	m[0] = fold(s0, s1) / (double)n;
	m[1] = fold(t0, t1) / (double)n;
	var[0] = fold(q0, q1) / (double)n - m[0] * m[0];
	var[1] = fold(u0, u1) / (double)n - m[1] * m[1];
	for (int r = 0; r < 2; r++)
		if (!(m[r] * m[r] <= var[r]) || !(var[r] < HUGE_VAL)) /* cancellation, x^2 overflowed, inf/nan */
			var[r] = ln_sqdev(r ? x1 : x0, n, (float)m[r]) / (double)n;
	{
		__m128d v = _mm_add_pd(_mm_set_pd(var[1], var[0]), _mm_set1_pd(eps));
		__m128 rs = _mm_cvtpd_ps(_mm_div_pd(_mm_set1_pd(1.0), _mm_sqrt_pd(v)));

		rstd[0] = _mm_cvtss_f32(rs);
		rstd[1] = _mm_cvtss_f32(_mm_shuffle_ps(rs, rs, 1));
	}
	mean[0] = (float)m[0];
	mean[1] = (float)m[1];
}

#define LN_Y(xv, vm, vs) _mm512_mul_ps(_mm512_sub_ps(xv, vm), vs)
/* v * w + b, v * w, v + b or v */
static AI __m512 ln_wb(__m512 v, const float *w, const float *b, int64_t j, __mmask16 k)
{
	if (w && b)
		return _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(k, w + j), _mm512_maskz_loadu_ps(k, b + j));
	if (w)
		return _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + j));
	if (b)
		return _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, b + j));
	return v;
}

/* y0, y1 = rows x0, x1 normalised, w and b loaded once per vector for both (w, b constant per call site). */
static AI void ln_out2(float *y0, float *y1, const float *x0, const float *x1, const float *w, const float *b,
		       int64_t n, const float *mean, const float *rstd, int nt)
{
	const __m512 m0 = _mm512_set1_ps(mean[0]), r0 = _mm512_set1_ps(rstd[0]);
	const __m512 m1 = _mm512_set1_ps(mean[1]), r1 = _mm512_set1_ps(rstd[1]);
	int64_t j = 0;

	for (; j + 16 <= n; j += 16) {
		__m512 a = _mm512_loadu_ps(x0 + j), c = _mm512_loadu_ps(x1 + j);

		if (w && b) {
			__m512 wv = _mm512_loadu_ps(w + j), bv = _mm512_loadu_ps(b + j);

			/* in registers: otherwise GCC folds each load into both FMAs, loading w and b twice */
			__asm__("" : "+v"(wv), "+v"(bv));
			a = _mm512_fmadd_ps(LN_Y(a, m0, r0), wv, bv);
			c = _mm512_fmadd_ps(LN_Y(c, m1, r1), wv, bv);
		} else {
			a = ln_wb(LN_Y(a, m0, r0), w, b, j, 0xffff);
			c = ln_wb(LN_Y(c, m1, r1), w, b, j, 0xffff);
		}
		put(y0 + j, a, 0xffff, nt);
		put(y1 + j, c, 0xffff, nt);
	}
	if (j < n) {
		__mmask16 k = nk_tail_mask16(n - j);

		put(y0 + j, ln_wb(LN_Y(_mm512_maskz_loadu_ps(k, x0 + j), m0, r0), w, b, j, k), k, nt);
		put(y1 + j, ln_wb(LN_Y(_mm512_maskz_loadu_ps(k, x1 + j), m1, r1), w, b, j, k), k, nt);
	}
}

static AI void ln_fwd_rows_wb(float *y, const float *x, const float *w, const float *b, int64_t nr, int64_t n,
			      double eps, float *mean, float *rstd, int stream)
{
	/* both rows' outputs must be 64-byte aligned for the streamed stores */
	int nt = nt_ok(y, stream) && (n & 15) == 0;
	int64_t r = 0;

	for (; r < nr; r += 2) {
		const float *x0 = x + r * n, *x1 = r + 1 < nr ? x0 + n : x0;
		float *y0 = y + r * n, *y1 = r + 1 < nr ? y0 + n : y0; /* an odd last row is done twice */
		float mr[2], rr[2];

		ln_moments2(x0, x1, n, eps, mr, rr);
		if (nt) /* a constant in each copy of the loop */
			ln_out2(y0, y1, x0, x1, w, b, n, mr, rr, 1);
		else
			ln_out2(y0, y1, x0, x1, w, b, n, mr, rr, 0);
		if (mean) {
			mean[r] = mr[0];
			if (r + 1 < nr)
				mean[r + 1] = mr[1];
		}
		if (rstd) {
			rstd[r] = rr[0];
			if (r + 1 < nr)
				rstd[r + 1] = rr[1];
		}
	}
}

static void ln_fwd_rows(float *y, const float *x, const float *w, const float *b, int64_t nr, int64_t n, double eps,
			float *mean, float *rstd, int stream)
{
	if (w && b)
		ln_fwd_rows_wb(y, x, w, b, nr, n, eps, mean, rstd, stream);
	else if (w)
		ln_fwd_rows_wb(y, x, w, NULL, nr, n, eps, mean, rstd, stream);
	else if (b)
		ln_fwd_rows_wb(y, x, NULL, b, nr, n, eps, mean, rstd, stream);
	else
		ln_fwd_rows_wb(y, x, NULL, NULL, nr, n, eps, mean, rstd, stream);
}

static void scale_w(float *y, const float *x, int64_t n, float s, const float *w, int stream)
{
	const __m512 vs = _mm512_set1_ps(s);
	int nt = nt_ok(y, stream);

	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);
		__m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), vs);

		if (w)
			v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + j));
		put(y + j, v, k, nt);
	}
}

static double dot3(const float *dy, const float *w, const float *x, int64_t n)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0;
	int64_t j = 0;

	for (; j + 32 <= n; j += 32) {
		__m512 g0 = _mm512_loadu_ps(dy + j), g1 = _mm512_loadu_ps(dy + j + 16);

		if (w) {
			g0 = _mm512_mul_ps(g0, _mm512_loadu_ps(w + j));
			g1 = _mm512_mul_ps(g1, _mm512_loadu_ps(w + j + 16));
		}
		s0 = _mm512_fmadd_ps(g0, _mm512_loadu_ps(x + j), s0);
		s1 = _mm512_fmadd_ps(g1, _mm512_loadu_ps(x + j + 16), s1);
	}
	for (; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);
		__m512 g = _mm512_maskz_loadu_ps(k, dy + j);

		if (w)
			g = _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, w + j));
		s0 = _mm512_fmadd_ps(g, _mm512_maskz_loadu_ps(k, x + j), s0);
	}
	return fold(s0, s1);
}

static void rms_dx(float *dx, const float *dy, const float *x, const float *w, int64_t n, float rstd, float c,
		   float *sw, int stream)
{
	const __m512 vr = _mm512_set1_ps(rstd), vc = _mm512_set1_ps(c);
	int nt = dx && nt_ok(dx, stream);

	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 k = nk_tail_mask16(n - j);
		__m512 d = _mm512_maskz_loadu_ps(k, dy + j), xv = _mm512_maskz_loadu_ps(k, x + j);

		if (dx) {
			__m512 g = w ? _mm512_mul_ps(d, _mm512_maskz_loadu_ps(k, w + j)) : d;

			put(dx + j, _mm512_mul_ps(vr, _mm512_fnmadd_ps(xv, vc, g)), k, nt);
		}
		if (sw)
			_mm512_mask_storeu_ps(sw + j, k, _mm512_fmadd_ps(d, _mm512_mul_ps(xv, vr), _mm512_maskz_loadu_ps(k, sw + j)));
	}
}

const nk_lnops_t nk_lnops_avx512 = {
	.sum = ln_sum,
	.sqdev = ln_sqdev,
	.dot = ln_dot,
	.affine = ln_affine,
	.g_xhat = ln_g_xhat,
	.dx_from = ln_dx_from,
	.partials = ln_partials,
	.ln_bwd_sums = ln_bwd_sums,
	.ln_bwd_dx = ln_bwd_dx,
	.bwd_rows = ln_bwd_rows,
	.fwd_rows = ln_fwd_rows,
	.scale_w = scale_w,
	.dot3 = dot3,
	.rms_dx = rms_dx,
};
