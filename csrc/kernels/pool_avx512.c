/* pool_avx512.c - max pooling (NK_POOL_MAX) of contiguous f32 planes with AVX-512: the same values and
 * indices as max_plane in pool.c (its portable reference), for any kernel / stride / padding / dilation
 * and ceil_mode.
 *
 * Per output row, the outputs whose whole column window lies inside the row ("interior" columns) go
 * 16 at a time: one lane per output, the window walked in the reference's order (depth, row, column
 * ascending), each lane keeping the first strictly greater value (a NaN always replaces, so the last NaN
 * wins) and its flat index.  Column loads: stride 1 a plain load, stride 2 a load of 32 and a permute
 * of the even lanes, other strides a gather.  The edge columns (window clipped by the padding or the
 * ceil_mode overhang) run the scalar loop of the reference.  Call only when nk_cpu_avx512(); planes
 * of 2^31 elements or more stay with the reference (int32 lane indices).
 */
#include <immintrin.h>
#include <math.h>

#include "nk.h"
#include "nk_avx512.h"
#include "nk_spatial_impl.h"

typedef struct {
	int64_t lo, hi, step;
} mwin_t;

/* pool.c's MAX window of output o along one dimension. */
static inline mwin_t mwin(int64_t o, int64_t I, int64_t k, int64_t s, int64_t p, int64_t dil)
{
	mwin_t w;

	w.lo = o * s - p;
	w.hi = w.lo + (k - 1) * dil + 1;
	w.hi = w.hi < I ? w.hi : I;
	w.step = dil;
	while (w.lo < 0)
		w.lo += w.step;
	return w;
}

/* One output by the reference's scalar loop (also the empty-window case: -inf and the first index). */
static void max_one(const float *x, float *y, int64_t *ix, int64_t o, const mwin_t *wd, const mwin_t *wh,
		    const mwin_t *ww, int64_t IH, int64_t IW)
{
	int64_t best = (wd->lo * IH + wh->lo) * IW + ww->lo;
	float mv = -INFINITY;

	if (wd->lo >= wd->hi || wh->lo >= wh->hi || ww->lo >= ww->hi) {
		y[o] = -INFINITY;
		ix[o] = best;
		return;
	}
	for (int64_t id = wd->lo; id < wd->hi; id += wd->step)
		for (int64_t ih = wh->lo; ih < wh->hi; ih += wh->step)
			for (int64_t iw = ww->lo; iw < ww->hi; iw += ww->step) {
				int64_t k = (id * IH + ih) * IW + iw;
				float v = x[k];

				if (v > mv || isnan(v))
					mv = v, best = k;
			}
	y[o] = x[best];
	ix[o] = best;
}

/* 16 interior outputs [ow0, ow0 + n) of one output row: columns ow*s - p + kw*dil all inside the row. */
static inline __attribute__((always_inline)) void max_block(const float *x, float *y, int64_t *ix, int64_t o0,
							     int64_t ow0, int64_t n, const mwin_t *wd, const mwin_t *wh,
							     int64_t IH, int64_t IW, int64_t kw_n, int64_t s, int64_t p,
							     int64_t dil)
{
	const __mmask16 m = nk_tail_mask16(n);
	const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
	const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
	const __m512i lane_s = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)s));
	/* stride 2: lanes 2j of the two 16-float halves for j < n */
	const __mmask16 m2a = (__mmask16)(0x5555u & ((n >= 8) ? 0xffffu : ((1u << (2 * n)) - 1u)));
	const __mmask16 m2b = (__mmask16)(n <= 8 ? 0 : 0x5555u & ((n >= 16) ? 0xffffu : ((1u << (2 * (n - 8))) - 1u)));
	__m512 best = _mm512_set1_ps(-INFINITY);
	__m512i bi = _mm512_setzero_si512();
	bool first = true;

	for (int64_t id = wd->lo; id < wd->hi; id += wd->step)
		for (int64_t ih = wh->lo; ih < wh->hi; ih += wh->step) {
			int64_t row = (id * IH + ih) * IW;

			for (int64_t kw = 0; kw < kw_n; kw++) {
				int64_t c0 = row + ow0 * s - p + kw * dil;
				const float *src = x + c0;
				__m512 v;

				if (s == 1) {
					v = _mm512_maskz_loadu_ps(m, src);
				} else if (s == 2) {
					__m512 a = _mm512_maskz_loadu_ps(m2a, src);
					__m512 b = _mm512_maskz_loadu_ps(m2b, src + 16);
					v = _mm512_permutex2var_ps(a, even, b);
				} else {
					v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, lane_s, src, 4);
				}
				__m512i vi = _mm512_add_epi32(_mm512_set1_epi32((int)c0), lane_s);
				if (first) {
					best = v, bi = vi, first = false;
				} else {
					__mmask16 up = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
						       _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
					best = _mm512_mask_mov_ps(best, up, v);
					bi = _mm512_mask_mov_epi32(bi, up, vi);
				}
			}
		}
	_mm512_mask_storeu_ps(y + o0, m, best);
	_mm512_mask_storeu_epi64(ix + o0, (__mmask8)(m & 0xff), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(bi)));
	_mm512_mask_storeu_epi64(ix + o0 + 8, (__mmask8)(m >> 8),
				 _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(bi, 1)));
}

bool nk_max_pool_f32_avx512(const nk_pool_args_t *a, int64_t p0, int64_t p1)
{
	int64_t ID = a->in[0], IH = a->in[1], IW = a->in[2], ipl = ID * IH * IW;
	int64_t OD = a->out[0], OH = a->out[1], OW = a->out[2], opl = OD * OH * OW;
	int64_t k = a->k[2], s = a->s[2], p = a->p[2], dil = a->dil[2];

	if (a->dtype != NK_F32 || a->mode != NK_POOL_MAX || ipl >= ((int64_t)1 << 31) || s >= ((int64_t)1 << 20))
		return false;
	/* interior columns: ow*s - p >= 0 and ow*s - p + (k-1)*dil <= IW - 1 */
	int64_t ow_a = (p + s - 1) / s, ow_b = IW - 1 - (k - 1) * dil + p;
	ow_b = ow_b < 0 ? 0 : ow_b / s + 1;
	ow_b = ow_b < OW ? ow_b : OW;
	ow_a = ow_a < ow_b ? ow_a : ow_b;

	for (int64_t nc = p0; nc < p1; nc++) {
		const float *x = (const float *)a->x + nc * ipl;
		float *y = (float *)a->y + nc * opl;
		int64_t *ix = a->idx + nc * opl;

		for (int64_t od = 0; od < OD; od++) {
			mwin_t wd = mwin(od, ID, a->k[0], a->s[0], a->p[0], a->dil[0]);

			for (int64_t oh = 0; oh < OH; oh++) {
				mwin_t wh = mwin(oh, IH, a->k[1], a->s[1], a->p[1], a->dil[1]);
				int64_t o = (od * OH + oh) * OW, ow = 0;
				bool rows = wd.lo < wd.hi && wh.lo < wh.hi;
				int64_t va = rows ? ow_a : OW, vb = rows ? ow_b : OW;

				for (; ow < va; ow++) {
					mwin_t ww = mwin(ow, IW, k, s, p, dil);
					max_one(x, y, ix, o + ow, &wd, &wh, &ww, IH, IW);
				}
				for (; ow < vb; ow += 16) {
					int64_t n = vb - ow < 16 ? vb - ow : 16;

					if (s == 1)
						max_block(x, y, ix, o + ow, ow, n, &wd, &wh, IH, IW, k, 1, p, dil);
					else if (s == 2)
						max_block(x, y, ix, o + ow, ow, n, &wd, &wh, IH, IW, k, 2, p, dil);
					else
						max_block(x, y, ix, o + ow, ow, n, &wd, &wh, IH, IW, k, s, p, dil);
				}
				for (ow = vb; ow < OW; ow++) {
					mwin_t ww = mwin(ow, IW, k, s, p, dil);
					max_one(x, y, ix, o + ow, &wd, &wh, &ww, IH, IW);
				}
			}
		}
	}
	return true;
}
