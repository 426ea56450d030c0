/* rmsnorm.c - fused RMSNorm forward and backward over the last dim of a contiguous float32 [rows, C].
 * Forward  (grid rows):    t = x, w, y, rstd;  rstd[r] = 1/sqrt(mean(x[r]^2) + eps), y = x*rstd*w.
 * dx       (grid rows):    t = dy, x, w, rstd, dx;  dx = rstd*(dy*w - x*rstd^2*mean(dy*w*x)).
 * dw       (grid columns): t = dy, x, rstd, w, dw;  dw[j] = sum_r dy[r,j]*x[r,j]*rstd[r] (rows in order).
 * Every sum runs in a fixed order inside one work item, so results do not depend on the tiling. */
#include <nk_custom.h>
#include <math.h>

static int check_f32(const nk_tensor_t *t, int nt, nk_tile_t *tile)
{
	for (int i = 0; i < nt; i++)
		if (t[i].dtype != NKC_F32)
			return nk_fail(tile, "tensor %d: expected float32 (dtype code %d), got dtype code %d", i, NKC_F32, t[i].dtype);
	return 0;
}

NK_KERNEL(rms_norm_fwd)
{
	if (check_f32(t, nt, tile))
		return 1;
	const float *x = t[0].data, *w = t[1].data;
	float *y = t[2].data, *rstd = t[3].data;
	int64_t C = t[0].sizes[t[0].ndim - 1];
	float eps = (float)s[0].f;
	for (int64_t r = tile->begin; r < tile->end; r++) {
		const float *xr = x + r * C;
		double q = 0;
		for (int64_t j = 0; j < C; j++)
			q += (double)xr[j] * xr[j];
		float rs = 1.0f / sqrtf((float)(q / (double)C) + eps);
		rstd[r] = rs;
		for (int64_t j = 0; j < C; j++)
			y[r * C + j] = xr[j] * rs * w[j];
	}
	return 0;
}

NK_KERNEL(rms_norm_bwd_dx)
{
	if (check_f32(t, nt, tile))
		return 1;
	const float *dy = t[0].data, *x = t[1].data, *w = t[2].data, *rstd = t[3].data;
	float *dx = t[4].data;
	int64_t C = t[1].sizes[t[1].ndim - 1];
	for (int64_t r = tile->begin; r < tile->end; r++) {
		const float *dyr = dy + r * C, *xr = x + r * C;
		double m = 0;
		for (int64_t j = 0; j < C; j++)
			m += (double)dyr[j] * w[j] * xr[j];
		float rs = rstd[r], c = (float)(m / (double)C) * rs * rs;
		for (int64_t j = 0; j < C; j++)
			dx[r * C + j] = rs * (dyr[j] * w[j] - xr[j] * c);
	}
	return 0;
}

NK_KERNEL(rms_norm_bwd_dw)
{
	if (check_f32(t, nt, tile))
		return 1;
	const float *dy = t[0].data, *x = t[1].data, *rstd = t[2].data;
	float *dw = t[4].data;
	int64_t C = t[4].numel, R = C ? t[1].numel / C : 0;
	for (int64_t j = tile->begin; j < tile->end; j++) {
		double acc = 0;
		for (int64_t r = 0; r < R; r++)
			acc += (double)dy[r * C + j] * x[r * C + j] * rstd[r];
		dw[j] = (float)acc;
	}
	return 0;
}
