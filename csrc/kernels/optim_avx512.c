/* optim_avx512.c - the dense f32 Adam/AdamW update of optim.c in AVX-512, operation for operation
 * (separate multiplies and adds, IEEE division and square root), so results are bit-identical to the
 * scalar loop and to nk_adam_ref.  Built with the AVX-512 flags; called only when nk_cpu_avx512().
 */
#include <immintrin.h>

#include "nk_impl.h"

void nk_adam_f32_avx512(const nk_adam_f32_consts_t *k, float *p, float *m, float *v, const float *g, int64_t n)
{
	const __m512 gs = _mm512_set1_ps(k->grad_scale), sign = _mm512_set1_ps(k->sign);
	const __m512 wd = _mm512_set1_ps(k->wd), decay = _mm512_set1_ps(k->decay), w1 = _mm512_set1_ps(k->w1);
	const __m512 b2 = _mm512_set1_ps(k->b2), omb2 = _mm512_set1_ps(k->omb2), bc2 = _mm512_set1_ps(k->bc2);
	const __m512 eps = _mm512_set1_ps(k->eps), nss = _mm512_set1_ps(k->nss);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 t = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
		__m512 gi = _mm512_maskz_loadu_ps(t, g + i);
		__m512 pi = _mm512_maskz_loadu_ps(t, p + i);
		__m512 mi = _mm512_maskz_loadu_ps(t, m + i);
		__m512 vi = _mm512_maskz_loadu_ps(t, v + i);
		if (k->scaled)
			gi = _mm512_div_ps(gi, gs);
		gi = _mm512_mul_ps(gi, sign);
		if (k->l2)
			gi = _mm512_add_ps(gi, _mm512_mul_ps(wd, pi));
		if (k->decoupled)
			pi = _mm512_mul_ps(pi, decay);
		mi = _mm512_add_ps(mi, _mm512_mul_ps(w1, _mm512_sub_ps(gi, mi)));
		vi = _mm512_add_ps(_mm512_mul_ps(vi, b2), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
		__m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
		pi = _mm512_add_ps(pi, _mm512_div_ps(_mm512_mul_ps(nss, mi), denom));
		_mm512_mask_storeu_ps(m + i, t, mi);
		_mm512_mask_storeu_ps(v + i, t, vi);
		_mm512_mask_storeu_ps(p + i, t, pi);
	}
}
