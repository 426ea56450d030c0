/* upsample.c - separable interpolation (nearest, nearest-exact, linear, cubic) over [NC, D, H, W]
 * planes and its backward.
 *
 * Each output index o along a dimension of input size I and output size O has taps (input index,
 * weight), computed as ATen's CPU kernels (aten/src/ATen/native/UpSample.h):
 *   nearest:        scale = s > 0 ? (float)(1/s) : (float)I / O (always float), src = floorf(o * scale),
 *                   with the legacy shortcuts O == I (src = o) and O == 2I (src = o >> 1);
 *   nearest-exact:  src = floorf((o + 0.5) * scale);  both clamped to I - 1;
 *   linear:         O == I: (o, 1); else ratio = align_corners ? (I-1)/(O-1) : s > 0 ? 1/s : I/O,
 *                   real = align_corners ? ratio*o : max(ratio*(o + 0.5) - 0.5, 0), i0 = floorf(real),
 *                   l1 = clamp(real - i0, 0, 1), taps (i0, 1 - l1), (min(i0 + 1, I - 1), l1);
 *   cubic:          real as linear without the clamp at 0, t = real - floorf(real), Keys' kernel
 *                   A = -0.75 at i0-1 .. i0+2, indices clamped to [0, I-1].
 * Math in float for f32/bf16/f16 (every operation rounded to float, exactly as float code), in double
 * for f64; for bf16/f16 the linear lambdas and cubic weights are rounded to the dtype (as ATen stores
 * them in scalar_t), the sums stay in f32.  Output = sum_a wd_a * (sum_b wh_b * (sum_c x[a,b,c] * ww_c)), products summed in tap order.
 * Nearest modes copy elements (any dtype).  Backward: gx = 0, then gx[taps] += (wd*wh*ww) * gy in
 * output order; bf16/f16 accumulate in an f32 plane (per-thread workspace) and round once, as the CPU.
 * Threading: planes over the pool; _ref twins run serially.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_spatial_impl.h"
#include "nk_ws.h"
#include "nrt.h"

typedef struct {
	int n;
	int64_t i[4];
	double w[4];
} taps_t;

typedef struct {
	int mode, nsp, dt;
	bool ac, f64;
	const int64_t *in, *out;
	const double *scale;
} interp_geom_t;

static float nearest_scale(int64_t I, int64_t O, double s)
{
	return s > 0 ? (float)(1.0 / s) : (float)I / (float)O;
}

/* The taps of output index o along dimension d. */
static void taps(const interp_geom_t *g, int d, int64_t o, taps_t *t)
{
	int64_t I = g->in[d], O = g->out[d];
	bool f64 = g->f64, ac = g->ac;
	double s = g->scale[d], ratio, real;
	int mode = d < 3 - g->nsp ? NK_INTERP_NEAREST : g->mode;

	t->n = 1, t->w[0] = 1;
	switch (mode) {
	case NK_INTERP_NEAREST:
		if (O == I)
			t->i[0] = o;
		else if (O == 2 * I)
			t->i[0] = o >> 1;
		else
			t->i[0] = (int64_t)floorf((float)o * nearest_scale(I, O, s));
		break;
	case NK_INTERP_NEAREST_EXACT:
		t->i[0] = (int64_t)floorf((float)(((double)o + 0.5) * (double)nearest_scale(I, O, s)));
		break;
	case NK_INTERP_LINEAR:
	case NK_INTERP_CUBIC:
		if (mode == NK_INTERP_LINEAR && O == I) {
			t->n = 2, t->i[0] = t->i[1] = o, t->w[1] = 0;
			return;
		}
		if (ac)
			ratio = O > 1 ? sp_r(f64, (double)(I - 1) / (double)(O - 1)) : 0;
		else
			ratio = s > 0 ? sp_r(f64, 1.0 / s) : sp_r(f64, (double)I / (double)O);
		if (ac) {
			real = sp_r(f64, ratio * (double)o);
		} else {
			real = sp_r(f64, sp_r(f64, ratio * sp_r(f64, (double)o + 0.5)) - 0.5);
			if (mode == NK_INTERP_LINEAR && real < 0)
				real = 0;
		}
		{
			int64_t i0 = (int64_t)floorf((float)real);
			double l;

			i0 = i0 < I - 1 ? i0 : I - 1;
			l = sp_r(f64, real - (double)i0);
			l = l < 0 ? 0 : l > 1 ? 1 : l;
			if (mode == NK_INTERP_LINEAR) {
				t->n = 2;
				t->i[0] = i0, t->i[1] = i0 + (i0 < I - 1);
				l = sp_rdt(g->dt, l); /* bf16/f16: ATen keeps the lambdas in the dtype */
				t->w[0] = sp_rdt(g->dt, sp_r(f64, 1 - l)), t->w[1] = l;
			} else {
				const double A = -0.75;
				double x1 = l, x2 = sp_r(f64, 1 - l), u;

				t->n = 4;
				for (int j = 0; j < 4; j++) {
					int64_t k = i0 - 1 + j;

					t->i[j] = k < 0 ? 0 : k > I - 1 ? I - 1 : k;
				}
				/* cubic_convolution2(x1 + 1), cubic_convolution1(x1), (x2), convolution2(x2 + 1) */
				u = sp_r(f64, x1 + 1);
				t->w[0] = sp_r(f64, sp_r(f64, sp_r(f64, sp_r(f64, sp_r(f64, sp_r(f64, A * u) - 5 * A) * u) + 8 * A) * u) - 4 * A);
				t->w[1] = sp_r(f64, sp_r(f64, sp_r(f64, sp_r(f64, sp_r(f64, (A + 2) * x1) - (A + 3)) * x1) * x1) + 1);
				t->w[2] = sp_r(f64, sp_r(f64, sp_r(f64, sp_r(f64, sp_r(f64, (A + 2) * x2) - (A + 3)) * x2) * x2) + 1);
				u = sp_r(f64, x2 + 1);
				t->w[3] = sp_r(f64, sp_r(f64, sp_r(f64, sp_r(f64, sp_r(f64, sp_r(f64, A * u) - 5 * A) * u) + 8 * A) * u) - 4 * A);
				for (int j = 0; j < 4; j++) /* bf16/f16: weights stored in the dtype, as ATen */
					t->w[j] = sp_rdt(g->dt, t->w[j]);
			}
		}
		return;
	default:
		break;
	}
	t->i[0] = t->i[0] < I - 1 ? t->i[0] : I - 1;
}

static int interp_check(const interp_geom_t *g, int dtype, int64_t NC, bool bwd)
{
	bool nearest = g->mode == NK_INTERP_NEAREST || g->mode == NK_INTERP_NEAREST_EXACT;

	if (!nk_dtype_valid(dtype) || g->mode < 0 || g->mode >= NK_INTERP_NMODES || g->nsp < 1 || g->nsp > 3 ||
	    ((bwd || !nearest) && !sp_is_float(dtype))) {
		nrt_kernel_fail("interpolate%s: unsupported dtype %s, mode %d or rank %d", bwd ? " backward" : "",
				nk_dtype_name(dtype), g->mode, g->nsp);
		return -1;
	}
	if (NC < 0)
		goto bad;
	for (int d = 0; d < 3; d++) {
		if (g->in[d] < 0 || g->out[d] < 0 || (d < 3 - g->nsp && g->in[d] != g->out[d]))
			goto bad;
		if (NC && g->out[d] > 0 && g->in[d] == 0)
			goto bad;
	}
	return 0;
bad:
	nrt_kernel_fail("interpolate: bad sizes (negative, empty input for a non-empty output, or a resized batch dimension)");
	return -1;
}

/* ---- forward ---------------------------------------------------------------------------------- */

typedef struct {
	const nk_interp_args_t *a;
	interp_geom_t g;
} interp_ctx_t;

static void interp_plane(const interp_ctx_t *c, int64_t nc)
{
	const nk_interp_args_t *a = c->a;
	int dt = a->dtype;
	size_t es = sp_esize(dt);
	bool f64 = c->g.f64, nearest = a->mode == NK_INTERP_NEAREST || a->mode == NK_INTERP_NEAREST_EXACT;
	int64_t IH = a->in[1], IW = a->in[2], ipl = a->in[0] * IH * IW;
	int64_t opl = a->out[0] * a->out[1] * a->out[2], o = 0;
	const char *x = (const char *)a->x + (size_t)(nc * ipl) * es;
	char *y = (char *)a->y + (size_t)(nc * opl) * es;
	taps_t td, th, tw;

	for (int64_t od = 0; od < a->out[0]; od++) {
		taps(&c->g, 0, od, &td);
		for (int64_t oh = 0; oh < a->out[1]; oh++) {
			taps(&c->g, 1, oh, &th);
			for (int64_t ow = 0; ow < a->out[2]; ow++, o++) {
				double acc = 0;

				taps(&c->g, 2, ow, &tw);
				if (nearest) {
					sp_cp(y, o, x, (td.i[0] * IH + th.i[0]) * IW + tw.i[0], es);
					continue;
				}
				for (int i = 0; i < td.n; i++) {
					double acc_h = 0;

					for (int j = 0; j < th.n; j++) {
						const char *row = x + (size_t)((td.i[i] * IH + th.i[j]) * IW) * es;
						double acc_w = sp_r(f64, sp_ld(row, dt, tw.i[0]) * tw.w[0]);

						for (int k = 1; k < tw.n; k++)
							acc_w = sp_r(f64, acc_w + sp_r(f64, sp_ld(row, dt, tw.i[k]) * tw.w[k]));
						acc_w = sp_r(f64, acc_w * th.w[j]);
						acc_h = j ? sp_r(f64, acc_h + acc_w) : acc_w;
					}
					acc_h = sp_r(f64, acc_h * td.w[i]);
					acc = i ? sp_r(f64, acc + acc_h) : acc_h;
				}
				sp_st(y, dt, o, acc);
			}
		}
	}
}

static void interp_planes(void *ctx, int64_t p0, int64_t p1)
{
	for (int64_t nc = p0; nc < p1; nc++)
		interp_plane(ctx, nc);
}

static int interp_prepare(const nk_interp_args_t *a, interp_ctx_t *c)
{
	c->a = a;
	c->g = (interp_geom_t){ a->mode, a->nsp, a->dtype, a->align_corners, a->dtype == NK_F64, a->in, a->out, a->scale };
	return interp_check(&c->g, a->dtype, a->NC, false);
}

int nk_interp_run(void *args)
{
	const nk_interp_args_t *a = args;
	interp_ctx_t c;
	int64_t opl = a->out[0] * a->out[1] * a->out[2];

	if (interp_prepare(a, &c))
		return -1;
	if (a->NC && opl)
		nrt_parallel_for(a->NC, NK_PARALLEL_GRAIN / (8 * opl + 1) + 1, interp_planes, &c);
	return 0;
}

int nk_interp_ref(void *args)
{
	const nk_interp_args_t *a = args;
	interp_ctx_t c;

	if (interp_prepare(a, &c))
		return -1;
	if (a->out[0] * a->out[1] * a->out[2] != 0)
		interp_planes(&c, 0, a->NC);
	return 0;
}

/* ---- backward --------------------------------------------------------------------------------- */

typedef struct {
	const nk_interp_bwd_args_t *a;
	interp_geom_t g;
	int failed; /* workspace allocation failed on some thread */
} interp_bwd_ctx_t;

/* gx plane (float dtype dt, or an f32 buffer when acc32) += the plane's contributions. */
static void interp_bwd_plane(interp_bwd_ctx_t *c, int64_t nc)
{
	const nk_interp_bwd_args_t *a = c->a;
	int dt = a->dtype;
	size_t es = sp_esize(dt);
	bool f64 = c->g.f64, acc32 = dt == NK_BF16 || dt == NK_F16;
	int64_t IH = a->in[1], IW = a->in[2], ipl = a->in[0] * IH * IW;
	int64_t opl = a->out[0] * a->out[1] * a->out[2], o = 0;
	const char *gy = (const char *)a->gy + (size_t)(nc * opl) * es;
	char *gx = (char *)a->gx + (size_t)(nc * ipl) * es;
	float *buf = NULL;
	void *dst = gx;
	int ddt = dt;
	taps_t td, th, tw;

	if (acc32) {
		buf = nk_ws_get(NK_WS_SPATIAL, (size_t)ipl * sizeof(float));
		if (!buf) {
			__atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
			return;
		}
		dst = buf, ddt = NK_F32;
	}
	memset(dst, 0, (size_t)ipl * sp_esize(ddt));
	for (int64_t od = 0; od < a->out[0]; od++) {
		taps(&c->g, 0, od, &td);
		for (int64_t oh = 0; oh < a->out[1]; oh++) {
			taps(&c->g, 1, oh, &th);
			for (int64_t ow = 0; ow < a->out[2]; ow++, o++) {
				double g = sp_ld(gy, dt, o);

				taps(&c->g, 2, ow, &tw);
				for (int i = 0; i < td.n; i++)
					for (int j = 0; j < th.n; j++) {
						double wdh = sp_r(f64, td.w[i] * th.w[j]);
						int64_t row = (td.i[i] * IH + th.i[j]) * IW;

						for (int k = 0; k < tw.n; k++)
							sp_add(dst, ddt, row + tw.i[k], sp_r(f64, sp_r(f64, wdh * tw.w[k]) * g));
					}
			}
		}
	}
	if (acc32)
		for (int64_t i = 0; i < ipl; i++)
			sp_st(gx, dt, i, buf[i]);
}

static void interp_bwd_planes(void *ctx, int64_t p0, int64_t p1)
{
	for (int64_t nc = p0; nc < p1; nc++)
		interp_bwd_plane(ctx, nc);
}

static int interp_bwd_prepare(const nk_interp_bwd_args_t *a, interp_bwd_ctx_t *c)
{
	c->a = a;
	c->failed = 0;
	c->g = (interp_geom_t){ a->mode, a->nsp, a->dtype, a->align_corners, a->dtype == NK_F64, a->in, a->out, a->scale };
	return interp_check(&c->g, a->dtype, a->NC, true);
}

static int interp_bwd_finish(const interp_bwd_ctx_t *c)
{
	if (c->failed) {
		nrt_kernel_fail("interpolate backward: out of host memory for the f32 gradient plane");
		return -1;
	}
	return 0;
}

int nk_interp_bwd_run(void *args)
{
	const nk_interp_bwd_args_t *a = args;
	interp_bwd_ctx_t c;
	int64_t ipl = a->in[0] * a->in[1] * a->in[2], opl = a->out[0] * a->out[1] * a->out[2];

	if (interp_bwd_prepare(a, &c))
		return -1;
	if (a->NC && ipl)
		nrt_parallel_for(a->NC, NK_PARALLEL_GRAIN / (8 * opl + ipl + 1) + 1, interp_bwd_planes, &c);
	return interp_bwd_finish(&c);
}

int nk_interp_bwd_ref(void *args)
{
	const nk_interp_bwd_args_t *a = args;
	interp_bwd_ctx_t c;

	if (interp_bwd_prepare(a, &c))
		return -1;
	if (a->in[0] * a->in[1] * a->in[2] != 0)
		interp_bwd_planes(&c, 0, a->NC);
	return interp_bwd_finish(&c);
}
