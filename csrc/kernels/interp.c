/* interp.c - separable interpolation (nearest, nearest-exact, linear, cubic) over [NC, D, H, W]
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
 * for f64; for bf16/f16 the 1-d/3-d linear lambdas and the cubic weights are rounded to the dtype (as
 * ATen's generic kernels store them in scalar_t; its 2-d bilinear kernel keeps them in f32), the sums
 * stay in f32.  Output = sum_a wd_a * (sum_b wh_b * (sum_c x[a,b,c] * ww_c)), products summed in tap order.
 * Nearest modes copy elements (any dtype).  Backward: gx = 0, then gx[taps] += (wd*wh*ww) * gy in
 * output order; bf16/f16 accumulate in an f32 plane (per-thread workspace) and round once, as the CPU.
 * Threading: planes over the pool; _ref twins run serially.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_spatial_impl.h"
#include "nk_workspace.h"
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
				if (g->nsp != 2) { /* bf16/f16: ATen's 1-d/3-d kernels keep the lambdas in the dtype */
					l = sp_rdt(g->dt, l);
					t->w[0] = sp_rdt(g->dt, sp_r(f64, 1 - l)), t->w[1] = l;
				} else {
					t->w[0] = sp_r(f64, 1 - l), t->w[1] = l;
				}
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

	bool u8_2d = !bwd && dtype == NK_U8 && g->nsp == 2; /* the fixed-point path below */

	if (!nk_dtype_valid(dtype) || g->mode < 0 || g->mode >= NK_INTERP_NMODES || g->nsp < 1 || g->nsp > 3 ||
	    ((bwd || !nearest) && !sp_is_float(dtype) && !u8_2d)) {
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

/* One plane; tws (may be NULL) holds the W taps of every output column, computed once per task. */
static void interp_plane(const interp_ctx_t *c, int64_t nc, const taps_t *tws)
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

				if (tws)
					tw = tws[ow];
				else
					taps(&c->g, 2, ow, &tw);
				if (nearest) {
					sp_cp(y, o, x, (td.i[0] * IH + th.i[0]) * IW + tw.i[0], es);
					continue;
				}
				if (dt == NK_F32) { /* the same operations in float, without the per-element dtype switch */
					const float *xf = (const float *)x;
					float facc = 0;

					for (int i = 0; i < td.n; i++) {
						float acc_h = 0;

						for (int j = 0; j < th.n; j++) {
							const float *row = xf + (td.i[i] * IH + th.i[j]) * IW;
							float acc_w = row[tw.i[0]] * (float)tw.w[0];

							for (int k = 1; k < tw.n; k++)
								acc_w = acc_w + row[tw.i[k]] * (float)tw.w[k];
							acc_w = acc_w * (float)th.w[j];
							acc_h = j ? acc_h + acc_w : acc_w;
						}
						acc_h = acc_h * (float)td.w[i];
						facc = i ? facc + acc_h : acc_h;
					}
					((float *)y)[o] = facc;
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
	const interp_ctx_t *c = ctx;
	int64_t OW = c->a->out[2];
	/* the W taps once per task (per-thread workspace; on no memory they are computed per element) */
	taps_t *tws = nk_ws_get(NK_WS_SPATIAL, (size_t)OW * sizeof(taps_t));

	if (tws)
		for (int64_t ow = 0; ow < OW; ow++)
			taps(&c->g, 2, ow, &tws[ow]);
	for (int64_t nc = p0; nc < p1; nc++)
		interp_plane(c, nc, tws);
}

static int interp_prepare(const nk_interp_args_t *a, interp_ctx_t *c)
{
	c->a = a;
	c->g = (interp_geom_t){ a->mode, a->nsp, a->dtype, a->align_corners, a->dtype == NK_F64, a->in, a->out, a->scale };
	return interp_check(&c->g, a->dtype, a->NC, false);
}

/* ---- uint8 bilinear / bicubic (2-d): ATen's fixed-point path -------------------------------------
 * PyTorch's CPU resizes uint8 images with Pillow's algorithm (upsample_avx_bilinear_bicubic_uint8 and
 * the separable generic kernel): per dimension, taps [xmin, xmin + size) with double weights (linear:
 * triangle, cubic: Keys A = -0.75; taps beyond the border folded onto the edge), scaled to int16 at the
 * largest precision p that keeps 2 * max weight * 2^p below 2^15; a horizontal pass (if W changes)
 * into a uint8 image, then a vertical pass (if H changes), each output
 * clamp((2^(p-1) + sum k_i * x_i) >> p, 0, 255).  Integer sums: exact, in any order. */

typedef struct {
	int64_t xmin, size;
	double w[4];
} u8_taps_t;

static double u8_filter(bool cubic, double x)
{
	const double A = -0.75;

	x = fabs(x);
	if (!cubic)
		return x < 1 ? 1 - x : 0;
	if (x < 1)
		return ((A + 2) * x - (A + 3)) * x * x + 1;
	if (x < 2)
		return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
	return 0;
}

/* Taps of output o (ATen's _compute_indices_min_size_weights); returns the largest partial weight. */
static double u8_taps(bool cubic, bool ac, int64_t o, int64_t I, int64_t O, double s, u8_taps_t *t)
{
	int n = cubic ? 4 : 2, support = n / 2, wi = 0;
	double scale, real, lambda, wmax = 0;
	int64_t i0, umin, umax;

	if (ac)
		scale = O > 1 ? (double)(I - 1) / (double)(O - 1) : 0;
	else
		scale = s > 0 ? 1.0 / s : (double)I / (double)O;
	real = ac ? scale * (double)o : scale * ((double)o + 0.5) - 0.5;
	if (!cubic && !ac && real < 0)
		real = 0;
	i0 = (int64_t)floorf((float)real);
	i0 = i0 < I - 1 ? i0 : I - 1;
	lambda = real - (double)i0;
	lambda = lambda < 0 ? 0 : lambda > 1 ? 1 : lambda;
	umin = i0 - support + 1, umax = i0 + support + 1;
	t->xmin = umin > 0 ? umin : 0;
	t->size = (umax < I ? umax : I) - t->xmin;
	t->size = t->size < 0 ? 0 : t->size > n ? n : t->size;
	for (int j = 0; j < n; j++) {
		double w = u8_filter(cubic, (double)(j + 1 - support) - lambda);

		t->w[j] = 0;
		if (umin + j <= 0)
			wi = 0;
		else if (umin + j >= I - 1)
			wi = (int)t->size - 1;
		t->w[wi] += w;
		wmax = wmax > t->w[wi] ? wmax : t->w[wi];
		wi++;
	}
	return wmax;
}

static unsigned u8_precision(bool cubic, bool ac, int64_t I, int64_t O, double s)
{
	double wmax = 0;
	unsigned p;
	u8_taps_t t;

	for (int64_t o = 0; o < O; o++) {
		double m = u8_taps(cubic, ac, o, I, O, s, &t);

		wmax = wmax > m ? wmax : m;
	}
	for (p = 0; p < 22; p++)
		if ((int)(0.5 + wmax * (double)(1 << (p + 1))) >= (1 << 15))
			break;
	return p;
}

static int16_t u8_weight(double w, unsigned p)
{
	double v = w * (double)(1 << p);

	return (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
}

/* One pass along a dimension: n lines; element k of line l at base + l*ls + k*es, in and out. */
static void u8_pass(const uint8_t *x, uint8_t *y, int64_t lines, int64_t ls_in, int64_t ls_out, int64_t es,
		    bool cubic, bool ac, int64_t I, int64_t O, double s)
{
	unsigned p = u8_precision(cubic, ac, I, O, s);

	for (int64_t o = 0; o < O; o++) {
		u8_taps_t t;
		int16_t k[4];

		u8_taps(cubic, ac, o, I, O, s, &t);
		for (int j = 0; j < t.size; j++)
			k[j] = u8_weight(t.w[j], p);
		for (int64_t l = 0; l < lines; l++) {
			int32_t acc = p ? 1 << (p - 1) : 0;

			for (int j = 0; j < t.size; j++)
				acc += (int32_t)k[j] * x[l * ls_in + (t.xmin + j) * es];
			acc >>= p;
			y[l * ls_out + o * es] = (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
		}
	}
}

typedef struct {
	const nk_interp_args_t *a;
	int failed;
} u8_ctx_t;

static void u8_planes(void *ctx, int64_t p0, int64_t p1)
{
	u8_ctx_t *c = ctx;
	const nk_interp_args_t *a = c->a;
	bool cubic = a->mode == NK_INTERP_CUBIC, ac = a->align_corners;
	int64_t IH = a->in[1], IW = a->in[2], OH = a->out[1], OW = a->out[2];
	uint8_t *tmp = NULL;

	if (OW != IW && OH != IH) {
		tmp = nk_ws_get(NK_WS_SPATIAL, (size_t)(IH * OW));
		if (!tmp) {
			__atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
			return;
		}
	}
	for (int64_t nc = p0; nc < p1; nc++) {
		const uint8_t *x = (const uint8_t *)a->x + nc * IH * IW;
		uint8_t *y = (uint8_t *)a->y + nc * OH * OW;

		if (OW == IW && OH == IH) {
			memcpy(y, x, (size_t)(IH * IW));
		} else if (OH == IH) {
			u8_pass(x, y, IH, IW, OW, 1, cubic, ac, IW, OW, a->scale[2]);
		} else if (OW == IW) {
			u8_pass(x, y, IW, 1, 1, IW, cubic, ac, IH, OH, a->scale[1]);
		} else {
			u8_pass(x, tmp, IH, IW, OW, 1, cubic, ac, IW, OW, a->scale[2]);
			u8_pass(tmp, y, OW, 1, 1, OW, cubic, ac, IH, OH, a->scale[1]);
		}
	}
}

static int interp_u8(const nk_interp_args_t *a, bool parallel)
{
	u8_ctx_t c = { a, 0 };
	int64_t opl = a->out[1] * a->out[2];

	if (a->in[0] != 1 || a->out[0] != 1) {
		nrt_kernel_fail("interpolate: uint8 bilinear/bicubic takes 2-d planes");
		return -1;
	}
	if (!a->NC || !opl)
		return 0;
	if (parallel)
		nrt_parallel_for(a->NC, NK_PARALLEL_GRAIN / (4 * opl + 1) + 1, u8_planes, &c);
	else
		u8_planes(&c, 0, a->NC);
	if (c.failed) {
		nrt_kernel_fail("interpolate: out of host memory for the uint8 intermediate image");
		return -1;
	}
	return 0;
}

int nk_interp_run(void *args)
{
	const nk_interp_args_t *a = args;
	interp_ctx_t c;
	int64_t opl = a->out[0] * a->out[1] * a->out[2];

	if (interp_prepare(a, &c))
		return -1;
	if (a->dtype == NK_U8 && (a->mode == NK_INTERP_LINEAR || a->mode == NK_INTERP_CUBIC))
		return interp_u8(a, true);
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
	if (a->dtype == NK_U8 && (a->mode == NK_INTERP_LINEAR || a->mode == NK_INTERP_CUBIC))
		return interp_u8(a, false);
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
