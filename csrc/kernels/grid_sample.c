/* grid_sample.c - 2-d grid sampling (grid_sampler_2d) and its backward, as ATen's CPU (GridSampler.h).
 *
 * A grid point (gx, gy) in [-1, 1] is unnormalized to pixel coordinates (align_corners: -1/+1 are the
 * corner pixel centres, else the image edges), then padded: border clips to [0, size-1], reflection
 * mirrors about the edges (or the corner centres) and clips.  Bilinear reads the 4 neighbours with
 * weights from the fractional parts, out-of-range neighbours reading 0; nearest rounds half to even;
 * bicubic (Keys A = -0.75) takes the 4x4 neighbourhood of the unpadded coordinate, each tap padded on
 * its own.  Coordinates and weights are computed in f32 for f32/bf16/f16 (every operation rounded to
 * float) and f64 for f64; sums over taps likewise.
 * Backward: gx += weight * gy scattered per tap (border/reflection taps land on their padded pixel),
 * ggrid = d(sum gy*y)/d(grid) through the weights and the unnormalize/clip/reflect chain.
 * Threading: forward over (n, output row); backward over n (each n owns its gx slice; additions in
 * output order, deterministic).  The _ref twins run serially.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_spatial_impl.h"
#include "nrt.h"

typedef struct {
	bool f64, ac;
	int padding, dt;
} gctx_t;

/* One operation's result in the dtype's compute precision: f64, f32, or (ATen's vectorized bf16/f16
 * kernels round every operation) bf16/f16. */
static double gr(const gctx_t *g, double v)
{
	return sp_rdt(g->dt, v);
}

static double unnormalize(const gctx_t *g, double c, int64_t size, double *grad)
{
	if (g->ac) {
		*grad = gr(g, (double)(size - 1) / 2);
		return gr(g, gr(g, gr(g, c + 1) / 2) * (double)(size - 1));
	}
	*grad = gr(g, (double)size / 2);
	return gr(g, gr(g, gr(g, gr(g, c + 1) * (double)size) - 1) / 2);
}

static double clip(double in, int64_t size, double *grad)
{
	double max = (double)(size - 1);

	if (in <= 0) {
		*grad = 0;
		return 0;
	}
	if (in >= max) {
		*grad = 0;
		return max;
	}
	*grad = 1;
	return in;
}

static double reflect(const gctx_t *g, double in, int64_t twice_low, int64_t twice_high, double *grad)
{
	double min, span, extra;
	int mult = 1, flips;

	if (twice_low == twice_high) {
		*grad = 0;
		return 0;
	}
	min = gr(g, (double)twice_low / 2);
	span = gr(g, (double)(twice_high - twice_low) / 2);
	in = gr(g, in - min);
	if (in < 0)
		mult = -1, in = -in;
	extra = gr(g, fmod(in, span));
	flips = (int)floor(gr(g, in / span));
	if (flips % 2 == 0) {
		*grad = mult;
		return gr(g, extra + min);
	}
	*grad = -mult;
	return gr(g, gr(g, span - extra) + min);
}

/* Padding of an unnormalized coordinate; *grad gets d(out)/d(in). */
static double pad_coord(const gctx_t *g, double c, int64_t size, double *grad)
{
	double gc = 1, gr = 1;

	if (g->padding == NK_GRID_PAD_BORDER) {
		c = clip(c, size, &gc);
	} else if (g->padding == NK_GRID_PAD_REFLECTION) {
		c = g->ac ? reflect(g, c, 0, 2 * (size - 1), &gr) : reflect(g, c, -1, 2 * size - 1, &gr);
		c = clip(c, size, &gc);
	}
	*grad = gr * gc;
	return c;
}

/* grid_sampler_compute_source_index(_set_grad). */
static double source_index(const gctx_t *g, double c, int64_t size, double *grad)
{
	double gu, gp;

	c = unnormalize(g, c, size, &gu);
	c = pad_coord(g, c, size, &gp);
	*grad = gu * gp;
	return c;
}

static void cubic_coeffs(const gctx_t *g, double t, double w[4])
{
	const double A = -0.75;
	double x1 = t, x2 = gr(g, 1 - t), u;

	u = gr(g, x1 + 1);
	w[0] = gr(g, gr(g, gr(g, gr(g, gr(g, gr(g, A * u) - 5 * A) * u) + 8 * A) * u) - 4 * A);
	w[1] = gr(g, gr(g, gr(g, gr(g, gr(g, (A + 2) * x1) - (A + 3)) * x1) * x1) + 1);
	w[2] = gr(g, gr(g, gr(g, gr(g, gr(g, (A + 2) * x2) - (A + 3)) * x2) * x2) + 1);
	u = gr(g, 2 - t);
	w[3] = gr(g, gr(g, gr(g, gr(g, gr(g, gr(g, A * u) - 5 * A) * u) + 8 * A) * u) - 4 * A);
}

/* d coeff / d t (GridSampler.h get_cubic_coefficients_grad). */
static void cubic_coeffs_grad(const gctx_t *g, double t, double w[4])
{
	const double A = -0.75;
	double x;

	x = gr(g, -1 - t);
	w[0] = gr(g, gr(g, gr(g, gr(g, -3 * A * x) - 10 * A) * x) - 8 * A);
	x = -t;
	w[1] = gr(g, gr(g, gr(g, -3 * (A + 2) * x) - 2 * (A + 3)) * x);
	x = gr(g, 1 - t);
	w[2] = gr(g, gr(g, gr(g, 3 * (A + 2) * x) - 2 * (A + 3)) * x);
	x = gr(g, 2 - t);
	w[3] = gr(g, gr(g, gr(g, gr(g, 3 * A * x) - 10 * A) * x) + 8 * A);
}

/* Flat index of a bicubic tap (padded on its own), or -1 outside the image. */
static int64_t cubic_tap(const gctx_t *g, double x, double y, int64_t H, int64_t W)
{
	double d;
	int64_t ix, iy;

	x = pad_coord(g, x, W, &d);
	y = pad_coord(g, y, H, &d);
	ix = (int64_t)x, iy = (int64_t)y;
	return iy >= 0 && iy < H && ix >= 0 && ix < W ? iy * W + ix : -1;
}

/* The (up to 16) taps of one grid point: flat input offsets (-1: reads 0) and weights. */
typedef struct {
	int n;
	int64_t off[16];
	double w[16];
	/* bilinear / bicubic state for the grid gradient */
	double ix, iy, gmx, gmy, tx, ty, cx[4], cy[4];
	int64_t ix0, iy0;
} gtaps_t;

static void grid_taps(const gctx_t *g, double gxv, double gyv, int64_t H, int64_t W, int mode, gtaps_t *t)
{

	if (mode == NK_GRID_BICUBIC) {
		double *cx = t->cx, *cy = t->cy;

		t->ix = unnormalize(g, gxv, W, &t->gmx);
		t->iy = unnormalize(g, gyv, H, &t->gmy);
		t->ix0 = (int64_t)floor(t->ix), t->iy0 = (int64_t)floor(t->iy);
		t->tx = gr(g, t->ix - (double)t->ix0), t->ty = gr(g, t->iy - (double)t->iy0);
		cubic_coeffs(g, t->tx, cx);
		cubic_coeffs(g, t->ty, cy);
		t->n = 16;
		for (int j = 0; j < 4; j++)
			for (int i = 0; i < 4; i++) {
				t->off[j * 4 + i] = cubic_tap(g, (double)(t->ix0 - 1 + i), (double)(t->iy0 - 1 + j), H, W);
				t->w[j * 4 + i] = gr(g, cx[i] * cy[j]);
			}
		return;
	}
	t->ix = source_index(g, gxv, W, &t->gmx);
	t->iy = source_index(g, gyv, H, &t->gmy);
	if (mode == NK_GRID_NEAREST) {
		int64_t ix = (int64_t)nearbyint(t->ix), iy = (int64_t)nearbyint(t->iy);

		t->n = 1, t->w[0] = 1;
		t->off[0] = iy >= 0 && iy < H && ix >= 0 && ix < W ? iy * W + ix : -1;
		return;
	}
	{
		int64_t x0 = (int64_t)floor(t->ix), y0 = (int64_t)floor(t->iy);
		double w_ = gr(g, t->ix - (double)x0), e = gr(g, 1 - w_);
		double n_ = gr(g, t->iy - (double)y0), s = gr(g, 1 - n_);
		int64_t xs[4] = { x0, x0 + 1, x0, x0 + 1 }, ys[4] = { y0, y0, y0 + 1, y0 + 1 };

		t->ix0 = x0, t->iy0 = y0;
		t->n = 4;
		t->w[0] = gr(g, e * s), t->w[1] = gr(g, w_ * s), t->w[2] = gr(g, e * n_), t->w[3] = gr(g, w_ * n_);
		for (int k = 0; k < 4; k++)
			t->off[k] = ys[k] >= 0 && ys[k] < H && xs[k] >= 0 && xs[k] < W ? ys[k] * W + xs[k] : -1;
	}
}

/* ---- forward ---------------------------------------------------------------------------------- */

typedef struct {
	const nk_grid_sample_args_t *a;
	gctx_t g;
} gfwd_t;

static void grid_rows(void *ctx, int64_t r0, int64_t r1)
{
	const gfwd_t *c = ctx;
	const nk_grid_sample_args_t *a = c->a;
	int dt = a->dtype;
	int64_t ipl = a->IH * a->IW, opl = a->OH * a->OW;

	for (int64_t r = r0; r < r1; r++) {
		int64_t n = r / a->OH, h = r % a->OH;

		for (int64_t w = 0; w < a->OW; w++) {
			int64_t gi = ((n * a->OH + h) * a->OW + w) * 2;
			gtaps_t t;

			grid_taps(&c->g, sp_ld(a->grid, dt, gi), sp_ld(a->grid, dt, gi + 1), a->IH, a->IW, a->mode, &t);
			for (int64_t ch = 0; ch < a->C; ch++) {
				int64_t xb = (n * a->C + ch) * ipl;
				double acc = 0;

				if (a->mode == NK_GRID_BICUBIC) { /* rows along x, then along y (ATen's order) */
					for (int j = 0; j < 4; j++) {
						double row = 0;

						for (int i = 0; i < 4; i++) {
							int64_t off = t.off[j * 4 + i];
							double v = off >= 0 ? sp_ld(a->x, dt, xb + off) : 0;

							row = i ? gr(&c->g, row + gr(&c->g, t.cx[i] * v)) : gr(&c->g, t.cx[i] * v);
						}
						acc = j ? gr(&c->g, acc + gr(&c->g, t.cy[j] * row)) : gr(&c->g, t.cy[j] * row);
					}
				}
				for (int k = 0; k < t.n && a->mode != NK_GRID_BICUBIC; k++)
					if (t.off[k] >= 0)
						acc = gr(&c->g, acc + gr(&c->g, sp_ld(a->x, dt, xb + t.off[k]) * t.w[k]));
				sp_st(a->y, dt, (n * a->C + ch) * opl + h * a->OW + w, acc);
			}
		}
	}
}

static int grid_check(int dtype, int mode, int padding, int64_t N, int64_t C, int64_t IH, int64_t IW, int64_t OH, int64_t OW)
{
	if (!sp_is_float(dtype) || mode < 0 || mode >= NK_GRID_NMODES || padding < 0 || padding >= NK_GRID_NPADS ||
	    N < 0 || C < 0 || IH < 0 || IW < 0 || OH < 0 || OW < 0) {
		nrt_kernel_fail("grid_sampler_2d: unsupported dtype %s, mode %d, padding %d or negative size", nk_dtype_name(dtype),
				mode, padding);
		return -1;
	}
	return 0;
}

static int grid_fwd(const nk_grid_sample_args_t *a, bool parallel)
{
	gfwd_t c = { a, { a->dtype == NK_F64, a->align_corners, a->padding, a->dtype } };
	int64_t rows = a->N * a->OH;

	if (grid_check(a->dtype, a->mode, a->padding, a->N, a->C, a->IH, a->IW, a->OH, a->OW))
		return -1;
	if (!rows || !a->OW || !a->C)
		return 0;
	if (a->IH == 0 || a->IW == 0) { /* nothing to sample: zeros */
		memset(a->y, 0, (size_t)(a->N * a->C * a->OH * a->OW) * sp_esize(a->dtype));
		return 0;
	}
	if (parallel)
		nrt_parallel_for(rows, NK_PARALLEL_GRAIN / (a->OW * (a->C * 4 + 8) + 1) + 1, grid_rows, &c);
	else
		grid_rows(&c, 0, rows);
	return 0;
}

int nk_grid_sample_run(void *args)
{
	return grid_fwd(args, true);
}

int nk_grid_sample_ref(void *args)
{
	return grid_fwd(args, false);
}

/* ---- backward --------------------------------------------------------------------------------- */

typedef struct {
	const nk_grid_sample_bwd_args_t *a;
	gctx_t g;
} gbwd_t;

static double xval(const nk_grid_sample_bwd_args_t *a, int64_t base, int64_t off)
{
	return off >= 0 ? sp_ld(a->x, a->dtype, base + off) : 0;
}

static void grid_bwd_batches(void *ctx, int64_t n0, int64_t n1)
{
	const gbwd_t *c = ctx;
	const nk_grid_sample_bwd_args_t *a = c->a;
	int dt = a->dtype;
	int64_t ipl = a->IH * a->IW, opl = a->OH * a->OW;

	for (int64_t n = n0; n < n1; n++) {
		if (a->gx)
			memset((char *)a->gx + (size_t)(n * a->C * ipl) * sp_esize(dt), 0, (size_t)(a->C * ipl) * sp_esize(dt));
		for (int64_t o = 0; o < opl; o++) {
			int64_t gi = (n * opl + o) * 2;
			double gix = 0, giy = 0, cx[4], cy[4], dcx[4], dcy[4];
			gtaps_t t;

			grid_taps(&c->g, sp_ld(a->grid, dt, gi), sp_ld(a->grid, dt, gi + 1), a->IH, a->IW, a->mode, &t);
			if (a->mode == NK_GRID_BICUBIC) {
				cubic_coeffs(&c->g, t.tx, cx), cubic_coeffs(&c->g, t.ty, cy);
				cubic_coeffs_grad(&c->g, t.tx, dcx), cubic_coeffs_grad(&c->g, t.ty, dcy);
			}
			for (int64_t ch = 0; ch < a->C; ch++) {
				int64_t b = (n * a->C + ch) * ipl;
				double go = sp_ld(a->gy, dt, (n * a->C + ch) * opl + o);

				if (a->gx)
					for (int k = 0; k < t.n; k++)
						if (t.off[k] >= 0)
							sp_add(a->gx, dt, b + t.off[k], gr(&c->g, t.w[k] * go));
				if (!a->ggrid || a->mode == NK_GRID_NEAREST)
					continue;
				if (a->mode == NK_GRID_BILINEAR) {
					const gctx_t *g = &c->g;
					double w_ = gr(g, t.ix - (double)t.ix0), e = gr(g, 1 - w_);
					double n_ = gr(g, t.iy - (double)t.iy0), s = gr(g, 1 - n_);
					double v0 = xval(a, b, t.off[0]), v1 = xval(a, b, t.off[1]), v2 = xval(a, b, t.off[2]), v3 = xval(a, b, t.off[3]);

					/* ATen's vectorized order, every operation in the dtype's precision */
					gix = gr(g, gix + gr(g, gr(g, gr(g, gr(g, v1 - v0) * s) + gr(g, gr(g, v3 - v2) * n_)) * go));
					giy = gr(g, giy + gr(g, gr(g, gr(g, gr(g, v2 - v0) * e) + gr(g, gr(g, v3 - v1) * w_)) * go));
				} else {
					const gctx_t *g = &c->g;

					for (int i = 0; i < 4; i++)
						for (int j = 0; j < 4; j++) {
							double v = xval(a, b, t.off[j * 4 + i]), vg = gr(g, v * go);

							gix = gr(g, gix - gr(g, gr(g, vg * dcx[i]) * cy[j]));
							giy = gr(g, giy - gr(g, gr(g, vg * dcy[j]) * cx[i]));
						}
				}
			}
			if (a->ggrid) {
				sp_st(a->ggrid, dt, gi, a->mode == NK_GRID_NEAREST ? 0 : gr(&c->g, gix * t.gmx));
				sp_st(a->ggrid, dt, gi + 1, a->mode == NK_GRID_NEAREST ? 0 : gr(&c->g, giy * t.gmy));
			}
		}
	}
}

static int grid_bwd(const nk_grid_sample_bwd_args_t *a, bool parallel)
{
	gbwd_t c = { a, { a->dtype == NK_F64, a->align_corners, a->padding, a->dtype } };

	if (grid_check(a->dtype, a->mode, a->padding, a->N, a->C, a->IH, a->IW, a->OH, a->OW))
		return -1;
	if (!a->N)
		return 0;
	if (a->IH == 0 || a->IW == 0 || a->C == 0) {
		if (a->ggrid)
			memset(a->ggrid, 0, (size_t)(a->N * a->OH * a->OW * 2) * sp_esize(a->dtype));
		if (a->gx)
			memset(a->gx, 0, (size_t)(a->N * a->C * a->IH * a->IW) * sp_esize(a->dtype));
		return 0;
	}
	if (parallel)
		nrt_parallel_for(a->N, 1, grid_bwd_batches, &c);
	else
		grid_bwd_batches(&c, 0, a->N);
	return 0;
}

int nk_grid_sample_bwd_run(void *args)
{
	return grid_bwd(args, true);
}

int nk_grid_sample_bwd_ref(void *args)
{
	return grid_bwd(args, false);
}
