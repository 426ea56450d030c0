/* rope.c - rotary position embedding (the rotate-half form of Llama / GPT-NeoX) on a contiguous float32
 * x [B, T, H, D] with cos, sin [T, D/2]:  for i < D/2, with a = x[i], b = x[i + D/2]:
 *     out[i] = a*cos - b*sin,   out[i + D/2] = b*cos + a*sin          (s[0].i == 0: forward)
 *     out[i] = a*cos + b*sin,   out[i + D/2] = b*cos - a*sin          (s[0].i == 1: the inverse = backward)
 * Grid: rows of x (B*T*H); row r is position t = (r / H) % T.  t = x, cos, sin, out. */
#include <nk_custom.h>

NK_KERNEL(rope)
{
	for (int i = 0; i < nt; i++)
		if (t[i].dtype != NKC_F32)
			return nk_fail(tile, "tensor %d: expected float32, got dtype code %d", i, t[i].dtype);
	if (t[0].ndim != 4 || t[0].sizes[3] % 2 || t[1].numel != t[0].sizes[1] * (t[0].sizes[3] / 2))
		return nk_fail(tile, "expected x [B, T, H, D] with an even D and cos, sin [T, D/2]");
	const float *x = t[0].data, *cs = t[1].data, *sn = t[2].data;
	float *out = t[3].data;
	int64_t T = t[0].sizes[1], H = t[0].sizes[2], D = t[0].sizes[3], h = D / 2;
	float sign = s[0].i ? -1.0f : 1.0f;
	for (int64_t r = tile->begin; r < tile->end; r++) {
		int64_t pos = (r / H) % T;
		const float *xr = x + r * D, *c = cs + pos * h, *sr = sn + pos * h;
		float *o = out + r * D;
		for (int64_t i = 0; i < h; i++) {
			float a = xr[i], b = xr[i + h], si = sign * sr[i];
			o[i] = a * c[i] - b * si;
			o[i + h] = b * c[i] + a * si;
		}
	}
	return 0;
}
