/* moe_gemm.c - the grouped GEMM of a mixture-of-experts layer, one token row per work item:
 * x [M, K] (tokens sorted by expert), w [G, K, N], offs int32 [G] (end row of each expert's tokens):
 *     out[r] = x[r] @ w[g]   for offs[g-1] <= r < offs[g];   rows past offs[G-1] are 0.
 * t = x, w, offs, out (contiguous float32, offs int32).  A bad offs (decreasing or past M) fails the
 * kernel: the error is raised at the next synchronization, naming the op. */
#include <nk_custom.h>
#include <string.h>

NK_KERNEL(moe_gemm)
{
	if (t[0].dtype != NKC_F32 || t[1].dtype != NKC_F32 || t[3].dtype != NKC_F32 || t[2].dtype != NKC_I32)
		return nk_fail(tile, "expected float32 x, w and int32 offs");
	const float *x = t[0].data, *w = t[1].data;
	const int32_t *offs = t[2].data;
	float *out = t[3].data;
	int64_t M = t[0].sizes[0], K = t[0].sizes[1], G = t[1].sizes[0], N = t[1].sizes[2];
	for (int64_t g = 0; g < G; g++)
		if (offs[g] < (g ? offs[g - 1] : 0) || offs[g] > M)
			return nk_fail(tile, "offs[%lld] = %d is out of order or past %lld rows", (long long)g, offs[g], (long long)M);
	for (int64_t r = tile->begin; r < tile->end; r++) {
		int64_t g = 0;
		while (g < G && r >= offs[g])
			g++;
		float *o = out + r * N;
		memset(o, 0, (size_t)N * sizeof *o);
		if (g == G)
			continue; /* past the last expert's tokens */
		const float *xr = x + r * K, *wg = w + g * K * N;
		for (int64_t k = 0; k < K; k++) {
			float a = xr[k];
			for (int64_t n = 0; n < N; n++)
				o[n] += a * wg[k * N + n];
		}
	}
	return 0;
}

/* The weight gradient: dw[g] = x[rows g]^T @ dy[rows g], one row k of one expert's dw per work item
 * (grid G*K), the token rows summed in order.  t = x [M, K], dy [M, N], offs [G], w [G, K, N] (its shape),
 * dw [G, K, N]. */
NK_KERNEL(moe_gemm_dw)
{
	const float *x = t[0].data, *dy = t[1].data;
	const int32_t *offs = t[2].data;
	float *dw = t[4].data;
	int64_t K = t[0].sizes[1], N = t[1].sizes[1];
	for (int64_t gk = tile->begin; gk < tile->end; gk++) {
		int64_t g = gk / K, k = gk % K, lo = g ? offs[g - 1] : 0, hi = offs[g];
		float *o = dw + gk * N;
		memset(o, 0, (size_t)N * sizeof *o);
		for (int64_t r = lo; r < hi; r++)
			for (int64_t n = 0; n < N; n++)
				o[n] += x[r * K + k] * dy[r * N + n];
	}
	return 0;
}
