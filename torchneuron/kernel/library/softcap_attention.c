/* softcap_attention.c - attention with a score modification (the FlexAttention use case): the scores are
 * soft-capped as in Gemma 2, s = cap * tanh(scale * q.k / cap), optionally causal (key j visible to
 * query i iff j <= i), then softmax and @ v.  Contiguous float32 q, k, v [B, H, T, D] (the same T and D).
 * Forward (grid B*H*T query rows):  t = q, k, v, out [B, H, T, D], lse [B, H, T];  s = scale, cap, causal.
 * Backward (grid B*H heads: a head's dk, dv sum over its queries in order, so one work item owns it):
 *     t = dout, q, k, v, out, lse, dq, dk, dv;  s = scale, cap, causal.
 * The score function is the one place to edit for another modification (ALiBi, relative bias, ...):
 * score() and its derivative dscore(). */
#include <nk_custom.h>
#include <math.h>
#include <string.h>

static inline float score(float z, float cap) { return cap * tanhf(z / cap); }
/* d score / d z, from the score itself: 1 - tanh^2 */
static inline float dscore(float sc, float cap) { float u = sc / cap; return 1.0f - u * u; }

static float dot(const float *a, const float *b, int64_t D)
{
	float acc = 0;
	for (int64_t d = 0; d < D; d++)
		acc += a[d] * b[d];
	return acc;
}

NK_KERNEL(softcap_attention_fwd)
{
	for (int i = 0; i < nt; i++)
		if (t[i].dtype != NKC_F32)
			return nk_fail(tile, "tensor %d: expected float32", i);
	const float *q = t[0].data, *k = t[1].data, *v = t[2].data;
	float *out = t[3].data, *lse = t[4].data;
	int64_t T = t[0].sizes[2], D = t[0].sizes[3];
	float scale = (float)s[0].f, cap = (float)s[1].f;
	int causal = (int)s[2].i;
	for (int64_t r = tile->begin; r < tile->end; r++) {
		int64_t bh = r / T, i = r % T, nk = causal ? i + 1 : T;
		const float *qi = q + r * D, *kh = k + bh * T * D, *vh = v + bh * T * D;
		float *o = out + r * D, m = -INFINITY, l = 0;
		for (int64_t j = 0; j < nk; j++) {
			float sc = score(scale * dot(qi, kh + j * D, D), cap);
			m = sc > m ? sc : m;
		}
		memset(o, 0, (size_t)D * sizeof *o);
		for (int64_t j = 0; j < nk; j++) {
			float p = expf(score(scale * dot(qi, kh + j * D, D), cap) - m);
			l += p;
			for (int64_t d = 0; d < D; d++)
				o[d] += p * vh[j * D + d];
		}
		for (int64_t d = 0; d < D; d++)
			o[d] /= l;
		lse[r] = m + logf(l);
	}
	return 0;
}

NK_KERNEL(softcap_attention_bwd)
{
	for (int i = 0; i < nt; i++)
		if (t[i].dtype != NKC_F32)
			return nk_fail(tile, "tensor %d: expected float32", i);
	const float *dout = t[0].data, *q = t[1].data, *k = t[2].data, *v = t[3].data, *out = t[4].data, *lse = t[5].data;
	float *dq = t[6].data, *dk = t[7].data, *dv = t[8].data;
	int64_t T = t[1].sizes[2], D = t[1].sizes[3];
	float scale = (float)s[0].f, cap = (float)s[1].f;
	int causal = (int)s[2].i;
	for (int64_t bh = tile->begin; bh < tile->end; bh++) {
		int64_t base = bh * T * D;
		memset(dq + base, 0, (size_t)(T * D) * sizeof(float));
		memset(dk + base, 0, (size_t)(T * D) * sizeof(float));
		memset(dv + base, 0, (size_t)(T * D) * sizeof(float));
		for (int64_t i = 0; i < T; i++) {
			const float *qi = q + base + i * D, *doi = dout + base + i * D;
			float di = dot(doi, out + base + i * D, D), li = lse[bh * T + i];
			int64_t nk = causal ? i + 1 : T;
			for (int64_t j = 0; j < nk; j++) {
				const float *kj = k + base + j * D, *vj = v + base + j * D;
				float sc = score(scale * dot(qi, kj, D), cap);
				float p = expf(sc - li);
				float dz = p * (dot(doi, vj, D) - di) * dscore(sc, cap) * scale;
				for (int64_t d = 0; d < D; d++) {
					dv[base + j * D + d] += p * doi[d];
					dq[base + i * D + d] += dz * kj[d];
					dk[base + j * D + d] += dz * qi[d];
				}
			}
		}
	}
	return 0;
}
