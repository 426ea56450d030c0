/* rnn.c - the pointwise parts of the fused LSTM and GRU cells, forward and backward (nk_rnn.h).
 *
 * A cell step is two GEMMs (done before, by the caller) and these kernels, which add the biases, apply
 * the gate activations, compute the new state and keep the activated gates as the workspace the
 * backward reads.  Sums and products are written in the order aten's CPU composite cell computes them
 * ((ig + b_ih) + (hg + b_hh), f*cx + i*g, (hx - n)*z + n, sigmoid_backward as (g*(1 - y))*y, ...), so
 * f32 results differ from the CPU's only by the exp/tanh implementations (about 1 ulp per gate).
 *
 * f32, bf16, f16: a tile of one row and up to HB hidden units is converted to f32 buffers, computed in
 * f32 (sigmoid through the vectorizable nk_fp_expf, tanh as Cephes' tanhf: odd polynomial below 0.625,
 * else 1 - 2/(exp(2|x|) + 1)), and each output rounded once.  f64: the same loops in double with libm.
 * Threading: tiles over the pool; the bias gradients are column sums taken in row order (f64 partials),
 * per block of columns, so results do not depend on the thread count.  The _ref twins compute every
 * element in double on one thread.
 */
/* NK_VECTORIZE_FILE's options plus no-trapping-math, set before the includes so that the header's inline
 * helpers (nk_fp_expf) carry the same options and inline into the loops: the activation loops select
 * between the branches of exp's clamps and tanh's two ranges, and GCC if-converts (so vectorizes) those
 * float selects only without trapping math.  The values are the same. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif

#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nk_rnn.h"
#include "nrt.h"


#define HB 256           /* hidden units per tile */
#define TILE_GRAIN 16384 /* elements of work below which a call stays on one thread */

static inline float sigm_f(float x)
{
	return 1.0f / (1.0f + nk_fp_expf(-x));
}

static inline float tanh_f(float x)
{
	float ax = fabsf(x), s = x * x, p = -5.70498872745E-3f;

	p = p * s + 2.06390887954E-2f;
	p = p * s - 5.37397155531E-2f;
	p = p * s + 1.33314422036E-1f;
	p = p * s - 3.33332819422E-1f;
	float small = p * s * x + x;
	float big = 1.0f - 2.0f / (nk_fp_expf(ax + ax) + 1.0f);

	return ax < 0.625f ? small : copysignf(big, x);
}

static inline double sigm_d(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

static int rnn_check(const char *who, int dtype, int64_t B, int64_t H, int need, const void *const *ptrs)
{
	if (!nk_fp_is_float(dtype)) {
		nrt_kernel_fail("%s: unsupported dtype %s", who, nk_dtype_name(dtype));
		return -1;
	}
	if (B < 0 || H < 0 || (H > 0 && B > INT64_MAX / 5 / H)) {
		nrt_kernel_fail("%s: bad sizes B=%lld H=%lld", who, (long long)B, (long long)H);
		return -1;
	}
	for (int i = 0; i < need && B * H > 0; i++)
		if (!ptrs[i]) {
			nrt_kernel_fail("%s: missing buffer %d", who, i);
			return -1;
		}
	return 0;
}

/* Runs fn over the B x ceil(H/HB) tiles: one task per tile, serial for small calls. */
typedef struct {
	const void *args;
	int64_t H, ntile;
	void (*tile)(const void *args, int64_t b, int64_t h0, int64_t n);
} tiles_t;

static void tiles_range(void *ctx, int64_t t0, int64_t t1)
{
	const tiles_t *T = ctx;

	for (int64_t t = t0; t < t1; t++) {
		int64_t b = t / T->ntile, h0 = (t % T->ntile) * HB;

		T->tile(T->args, b, h0, nk_min64(HB, T->H - h0));
	}
}

static void run_tiles(const void *args, int64_t B, int64_t H, void (*tile)(const void *, int64_t, int64_t, int64_t))
{
	tiles_t T = { .args = args, .H = H, .ntile = nk_cdiv(H, HB), .tile = tile };
	int64_t per = nk_min64(H, HB), grain = TILE_GRAIN / (per + 1) + 1;

	if (B * H > 0)
		nrt_parallel_for(B * T.ntile, grain, tiles_range, &T);
}

/* Column sums of a [B, C] matrix into out[C] (dtype), rows in order, f64 partials; columns over the pool. */
typedef struct {
	int dtype;
	int64_t B, C;
	const void *src;
	void *out;
} colsum_t;

static void colsum_range(void *ctx, int64_t c0, int64_t c1)
{
	const colsum_t *s = ctx;
	double acc[HB];
	float row[HB];

	for (int64_t c = c0; c < c1; c += HB) {
		int64_t n = nk_min64(HB, c1 - c);

		memset(acc, 0, sizeof acc);
		for (int64_t b = 0; b < s->B; b++) {
			if (s->dtype == NK_F64) {
				const double *r = (const double *)s->src + b * s->C + c;

				for (int64_t j = 0; j < n; j++)
					acc[j] += r[j];
			} else {
				nk_fp_load_row_f32(row, s->src, s->dtype, b * s->C + c, n);
				for (int64_t j = 0; j < n; j++)
					acc[j] += row[j];
			}
		}
		for (int64_t j = 0; j < n; j++)
			nk_fp_stored(s->out, s->dtype, c + j, acc[j]);
	}
}

static void colsum(int dtype, int64_t B, int64_t C, const void *src, void *out)
{
	colsum_t s = { .dtype = dtype, .B = B, .C = C, .src = src, .out = out };

	if (C > 0)
		nrt_parallel_for(C, TILE_GRAIN / (B + 1) + 1, colsum_range, &s);
}

/* a[k][0..n) = (ig_k + b_ih_k) + (hg_k + b_hh_k) for the first K of the G gates of row b, hidden
 * units h0.., in f32. */
static void presum_f32(float (*a)[HB], int G, int K, int dt, const void *ig, const void *hg, const void *b1, const void *b2, int64_t b,
		       int64_t H, int64_t h0, int64_t n)
{
	float t1[HB], t2[HB];

	for (int k = 0; k < K; k++) {
		int64_t off = b * G * H + k * H + h0;

		nk_fp_load_row_f32(a[k], ig, dt, off, n);
		nk_fp_load_row_f32(t1, hg, dt, off, n);
		if (b1) {
			nk_fp_load_row_f32(t2, b1, dt, k * H + h0, n);
			for (int64_t j = 0; j < n; j++)
				a[k][j] += t2[j];
			nk_fp_load_row_f32(t2, b2, dt, k * H + h0, n);
			for (int64_t j = 0; j < n; j++)
				t1[j] += t2[j];
		}
		for (int64_t j = 0; j < n; j++)
			a[k][j] += t1[j];
	}
}

/* The f64 twin of presum_f32 for one gate k: a[j] = (ig + b1) + (hg + b2). */
static void presum_f64(double *a, int G, int k, const double *ig, const double *hg, const double *b1,
		       const double *b2, int64_t b, int64_t H, int64_t h0, int64_t n)
{
	int64_t off = b * G * H + k * H + h0;

	for (int64_t j = 0; j < n; j++)
		a[j] = b1 ? (ig[off + j] + b1[k * H + h0 + j]) + (hg[off + j] + b2[k * H + h0 + j]) : ig[off + j] + hg[off + j];
}

/* ---- LSTM forward ---------------------------------------------------------------------------------- */

static void lstm_tile_f32(const void *args, int64_t b, int64_t h0, int64_t n)
{
	const nk_lstm_cell_args_t *p = args;
	float g[4][HB], cx[HB], hy[HB], cy[HB];
	int dt = p->dtype;
	int64_t H = p->H;

	presum_f32(g, 4, 4, dt, p->ig, p->hg, p->b_ih, p->b_hh, b, H, h0, n);
	nk_fp_load_row_f32(cx, p->cx, dt, b * H + h0, n);
	for (int64_t j = 0; j < n; j++) {
		float i = sigm_f(g[0][j]), f = sigm_f(g[1][j]), c = tanh_f(g[2][j]), o = sigm_f(g[3][j]);
		float cn = f * cx[j] + i * c;

		cy[j] = cn;
		hy[j] = o * tanh_f(cn);
		g[0][j] = i, g[1][j] = f, g[2][j] = c, g[3][j] = o;
	}
	nk_fp_store_row_f32(p->hy, dt, b * H + h0, hy, n);
	nk_fp_store_row_f32(p->cy, dt, b * H + h0, cy, n);
	for (int k = 0; k < 4; k++)
		nk_fp_store_row_f32(p->ws, dt, b * 4 * H + k * H + h0, g[k], n);
}

static void lstm_tile_f64(const void *args, int64_t b, int64_t h0, int64_t n)
{
	const nk_lstm_cell_args_t *p = args;
	double g[4][HB];
	int64_t H = p->H;
	const double *cx = (const double *)p->cx + b * H + h0;
	double *hy = (double *)p->hy + b * H + h0, *cy = (double *)p->cy + b * H + h0, *ws = (double *)p->ws + b * 4 * H + h0;

	for (int k = 0; k < 4; k++)
		presum_f64(g[k], 4, k, p->ig, p->hg, p->b_ih, p->b_hh, b, H, h0, n);
	for (int64_t j = 0; j < n; j++) {
		double i = sigm_d(g[0][j]), f = sigm_d(g[1][j]), c = tanh(g[2][j]), o = sigm_d(g[3][j]);
		double cn = f * cx[j] + i * c;

		cy[j] = cn;
		hy[j] = o * tanh(cn);
		ws[j] = i, ws[H + j] = f, ws[2 * H + j] = c, ws[3 * H + j] = o;
	}
}

int nk_lstm_cell_run(void *args)
{
	const nk_lstm_cell_args_t *a = args;
	const void *need[] = { a->ig, a->hg, a->cx, a->hy, a->cy, a->ws };

	if (rnn_check("lstm_cell", a->dtype, a->B, a->H, 6, need))
		return -1;
	if (nk_using_reference())
		return nk_lstm_cell_ref(args);
	run_tiles(a, a->B, a->H, a->dtype == NK_F64 ? lstm_tile_f64 : lstm_tile_f32);
	return 0;
}

/* Element (b, k, h) of a [B, G*H] gate buffer, and gate k of a [G*H] bias (0 without). */
static double gate_at(const void *p, int dt, int G, int64_t H, int64_t b, int k, int64_t h)
{
	return nk_fp_loadd(p, dt, b * G * H + k * H + h);
}

static double pre_ref(const void *ig, const void *hg, const void *b1, const void *b2, int dt, int G, int64_t H, int64_t b, int k, int64_t h)
{
	double x = gate_at(ig, dt, G, H, b, k, h), y = gate_at(hg, dt, G, H, b, k, h);

	return b1 ? (x + nk_fp_loadd(b1, dt, k * H + h)) + (y + nk_fp_loadd(b2, dt, k * H + h)) : x + y;
}

int nk_lstm_cell_ref(void *args)
{
	const nk_lstm_cell_args_t *a = args;
	const void *need[] = { a->ig, a->hg, a->cx, a->hy, a->cy, a->ws };
	int dt = a->dtype;
	int64_t H = a->H;

	if (rnn_check("lstm_cell", dt, a->B, H, 6, need))
		return -1;
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t h = 0; h < H; h++) {
			double gi = sigm_d(pre_ref(a->ig, a->hg, a->b_ih, a->b_hh, dt, 4, H, b, 0, h));
			double gf = sigm_d(pre_ref(a->ig, a->hg, a->b_ih, a->b_hh, dt, 4, H, b, 1, h));
			double gg = tanh(pre_ref(a->ig, a->hg, a->b_ih, a->b_hh, dt, 4, H, b, 2, h));
			double go = sigm_d(pre_ref(a->ig, a->hg, a->b_ih, a->b_hh, dt, 4, H, b, 3, h));
			double cn = gf * nk_fp_loadd(a->cx, dt, b * H + h) + gi * gg;

			nk_fp_stored(a->cy, dt, b * H + h, cn);
			nk_fp_stored(a->hy, dt, b * H + h, go * tanh(cn));
			nk_fp_stored(a->ws, dt, b * 4 * H + h, gi);
			nk_fp_stored(a->ws, dt, b * 4 * H + H + h, gf);
			nk_fp_stored(a->ws, dt, b * 4 * H + 2 * H + h, gg);
			nk_fp_stored(a->ws, dt, b * 4 * H + 3 * H + h, go);
		}
	return 0;
}

/* ---- LSTM backward --------------------------------------------------------------------------------- */

/* n elements from off of p into buf as f32, or zeros where p is NULL (an undefined gradient). */
static void load_or_zero_f32(float *buf, const void *p, int dt, int64_t off, int64_t n)
{
	if (p)
		nk_fp_load_row_f32(buf, p, dt, off, n);
	else
		memset(buf, 0, (size_t)n * sizeof *buf);
}

static void lstm_bwd_tile_f32(const void *args, int64_t b, int64_t h0, int64_t n)
{
	const nk_lstm_cell_bwd_args_t *p = args;
	float g[4][HB], cx[HB], cy[HB], dhy[HB], dcy[HB];
	int dt = p->dtype;
	int64_t H = p->H;

	for (int k = 0; k < 4; k++)
		nk_fp_load_row_f32(g[k], p->ws, dt, b * 4 * H + k * H + h0, n);
	nk_fp_load_row_f32(cx, p->cx, dt, b * H + h0, n);
	nk_fp_load_row_f32(cy, p->cy, dt, b * H + h0, n);
	load_or_zero_f32(dhy, p->dhy, dt, b * H + h0, n);
	load_or_zero_f32(dcy, p->dcy, dt, b * H + h0, n);
	for (int64_t j = 0; j < n; j++) {
		float i = g[0][j], f = g[1][j], c = g[2][j], o = g[3][j], t = tanh_f(cy[j]);
		float dc = dhy[j] * o * (1 - t * t) + dcy[j];

		g[0][j] = dc * c * (1 - i) * i;
		g[1][j] = dc * cx[j] * (1 - f) * f;
		g[2][j] = dc * i * (1 - c * c);
		g[3][j] = dhy[j] * t * (1 - o) * o;
		cx[j] = dc * f;
	}
	for (int k = 0; k < 4; k++)
		nk_fp_store_row_f32(p->dgates, dt, b * 4 * H + k * H + h0, g[k], n);
	nk_fp_store_row_f32(p->dcx, dt, b * H + h0, cx, n);
}

static void lstm_bwd_tile_f64(const void *args, int64_t b, int64_t h0, int64_t n)
{
	const nk_lstm_cell_bwd_args_t *p = args;
	int64_t H = p->H, r = b * H + h0;
	const double *ws = (const double *)p->ws + b * 4 * H + h0, *cx = (const double *)p->cx + r, *cy = (const double *)p->cy + r;
	const double *dhy = p->dhy ? (const double *)p->dhy + r : NULL, *dcy = p->dcy ? (const double *)p->dcy + r : NULL;
	double *dg = (double *)p->dgates + b * 4 * H + h0, *dcx = (double *)p->dcx + r;

	for (int64_t j = 0; j < n; j++) {
		double i = ws[j], f = ws[H + j], c = ws[2 * H + j], o = ws[3 * H + j], t = tanh(cy[j]);
		double gh = dhy ? dhy[j] : 0, dc = gh * o * (1 - t * t) + (dcy ? dcy[j] : 0);

		dg[j] = dc * c * (1 - i) * i;
		dg[H + j] = dc * cx[j] * (1 - f) * f;
		dg[2 * H + j] = dc * i * (1 - c * c);
		dg[3 * H + j] = gh * t * (1 - o) * o;
		dcx[j] = dc * f;
	}
}

int nk_lstm_cell_bwd_run(void *args)
{
	const nk_lstm_cell_bwd_args_t *a = args;
	const void *need[] = { a->cx, a->cy, a->ws, a->dgates, a->dcx };

	if (rnn_check("lstm_cell_backward", a->dtype, a->B, a->H, 5, need))
		return -1;
	if (nk_using_reference())
		return nk_lstm_cell_bwd_ref(args);
	run_tiles(a, a->B, a->H, a->dtype == NK_F64 ? lstm_bwd_tile_f64 : lstm_bwd_tile_f32);
	if (a->dbias)
		colsum(a->dtype, a->B, 4 * a->H, a->dgates, a->dbias);
	return 0;
}

/* Reference column sums of a [B, C] buffer (rows in order, double). */
static void colsum_ref(int dt, int64_t B, int64_t C, const void *src, void *out)
{
	for (int64_t c = 0; c < C; c++) {
		double s = 0;

		for (int64_t b = 0; b < B; b++)
			s += nk_fp_loadd(src, dt, b * C + c);
		nk_fp_stored(out, dt, c, s);
	}
}

int nk_lstm_cell_bwd_ref(void *args)
{
	const nk_lstm_cell_bwd_args_t *a = args;
	const void *need[] = { a->cx, a->cy, a->ws, a->dgates, a->dcx };
	int dt = a->dtype;
	int64_t H = a->H;

	if (rnn_check("lstm_cell_backward", dt, a->B, H, 5, need))
		return -1;
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t h = 0; h < H; h++) {
			int64_t r = b * H + h, w = b * 4 * H + h;
			double i = nk_fp_loadd(a->ws, dt, w), f = nk_fp_loadd(a->ws, dt, w + H);
			double c = nk_fp_loadd(a->ws, dt, w + 2 * H), o = nk_fp_loadd(a->ws, dt, w + 3 * H);
			double t = tanh(nk_fp_loadd(a->cy, dt, r)), gh = nk_fp_loadd_or(a->dhy, dt, r, 0);
			double dc = gh * o * (1 - t * t) + nk_fp_loadd_or(a->dcy, dt, r, 0);

			nk_fp_stored(a->dgates, dt, w, dc * c * (1 - i) * i);
			nk_fp_stored(a->dgates, dt, w + H, dc * nk_fp_loadd(a->cx, dt, r) * (1 - f) * f);
			nk_fp_stored(a->dgates, dt, w + 2 * H, dc * i * (1 - c * c));
			nk_fp_stored(a->dgates, dt, w + 3 * H, gh * t * (1 - o) * o);
			nk_fp_stored(a->dcx, dt, r, dc * f);
		}
	if (a->dbias)
		colsum_ref(dt, a->B, 4 * H, a->dgates, a->dbias);
	return 0;
}

/* ---- GRU forward ----------------------------------------------------------------------------------- */

static void gru_tile_f32(const void *args, int64_t b, int64_t h0, int64_t n)
{
	const nk_gru_cell_args_t *p = args;
	float g[3][HB], hn[HB], hx[HB], hy[HB], t[HB];
	int dt = p->dtype;
	int64_t H = p->H, off = b * 3 * H + 2 * H + h0;

	presum_f32(g, 3, 2, dt, p->ig, p->hg, p->b_ih, p->b_hh, b, H, h0, n); /* r, z */
	/* n's two halves stay apart: in + b_ih_n, and hn = hg_n + b_hh_n (kept in the workspace) */
	nk_fp_load_row_f32(g[2], p->ig, dt, off, n);
	nk_fp_load_row_f32(hn, p->hg, dt, off, n);
	if (p->b_ih) {
		nk_fp_load_row_f32(t, p->b_ih, dt, 2 * H + h0, n);
		for (int64_t j = 0; j < n; j++)
			g[2][j] += t[j];
		nk_fp_load_row_f32(t, p->b_hh, dt, 2 * H + h0, n);
		for (int64_t j = 0; j < n; j++)
			hn[j] += t[j];
	}
	nk_fp_load_row_f32(hx, p->hx, dt, b * H + h0, n);
	for (int64_t j = 0; j < n; j++) {
		float r = sigm_f(g[0][j]), z = sigm_f(g[1][j]), nn = tanh_f(g[2][j] + hn[j] * r);

		hy[j] = (hx[j] - nn) * z + nn;
		g[0][j] = r, g[1][j] = z, g[2][j] = nn;
	}
	nk_fp_store_row_f32(p->hy, dt, b * H + h0, hy, n);
	for (int k = 0; k < 3; k++)
		nk_fp_store_row_f32(p->ws, dt, b * 5 * H + k * H + h0, g[k], n);
	nk_fp_store_row_f32(p->ws, dt, b * 5 * H + 3 * H + h0, hx, n);
	nk_fp_store_row_f32(p->ws, dt, b * 5 * H + 4 * H + h0, hn, n);
}

static void gru_tile_f64(const void *args, int64_t b, int64_t h0, int64_t n)
{
	const nk_gru_cell_args_t *p = args;
	double g[2][HB];
	int64_t H = p->H, off = b * 3 * H + 2 * H + h0;
	const double *ig = p->ig, *hg = p->hg, *b1 = p->b_ih, *b2 = p->b_hh, *hx = (const double *)p->hx + b * H + h0;
	double *hy = (double *)p->hy + b * H + h0, *ws = (double *)p->ws + b * 5 * H + h0;

	for (int k = 0; k < 2; k++)
		presum_f64(g[k], 3, k, ig, hg, b1, b2, b, H, h0, n);
	for (int64_t j = 0; j < n; j++) {
		double in = b1 ? ig[off + j] + b1[2 * H + h0 + j] : ig[off + j];
		double hn = b1 ? hg[off + j] + b2[2 * H + h0 + j] : hg[off + j];
		double r = sigm_d(g[0][j]), z = sigm_d(g[1][j]), nn = tanh(in + hn * r);

		hy[j] = (hx[j] - nn) * z + nn;
		ws[j] = r, ws[H + j] = z, ws[2 * H + j] = nn, ws[3 * H + j] = hx[j], ws[4 * H + j] = hn;
	}
}

int nk_gru_cell_run(void *args)
{
	const nk_gru_cell_args_t *a = args;
	const void *need[] = { a->ig, a->hg, a->hx, a->hy, a->ws };

	if (rnn_check("gru_cell", a->dtype, a->B, a->H, 5, need))
		return -1;
	if (nk_using_reference())
		return nk_gru_cell_ref(args);
	run_tiles(a, a->B, a->H, a->dtype == NK_F64 ? gru_tile_f64 : gru_tile_f32);
	return 0;
}

int nk_gru_cell_ref(void *args)
{
	const nk_gru_cell_args_t *a = args;
	const void *need[] = { a->ig, a->hg, a->hx, a->hy, a->ws };
	int dt = a->dtype;
	int64_t H = a->H;

	if (rnn_check("gru_cell", dt, a->B, H, 5, need))
		return -1;
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t h = 0; h < H; h++) {
			double r = sigm_d(pre_ref(a->ig, a->hg, a->b_ih, a->b_hh, dt, 3, H, b, 0, h));
			double z = sigm_d(pre_ref(a->ig, a->hg, a->b_ih, a->b_hh, dt, 3, H, b, 1, h));
			double in = gate_at(a->ig, dt, 3, H, b, 2, h) + nk_fp_loadd_or(a->b_ih, dt, 2 * H + h, 0);
			double hn = gate_at(a->hg, dt, 3, H, b, 2, h) + nk_fp_loadd_or(a->b_hh, dt, 2 * H + h, 0);
			double hx = nk_fp_loadd(a->hx, dt, b * H + h), nn = tanh(in + hn * r);
			int64_t w = b * 5 * H + h;

			nk_fp_stored(a->hy, dt, b * H + h, (hx - nn) * z + nn);
			nk_fp_stored(a->ws, dt, w, r);
			nk_fp_stored(a->ws, dt, w + H, z);
			nk_fp_stored(a->ws, dt, w + 2 * H, nn);
			nk_fp_stored(a->ws, dt, w + 3 * H, hx);
			nk_fp_stored(a->ws, dt, w + 4 * H, hn);
		}
	return 0;
}

/* ---- GRU backward ---------------------------------------------------------------------------------- */
/* As aten's CPU autograd of the composite cell: dn = dhy - dhy*z (the add and the subtraction), then
 * tanh_backward, mul_backward and sigmoid_backward in its operation order. */

static void gru_bwd_tile_f32(const void *args, int64_t b, int64_t h0, int64_t n)
{
	const nk_gru_cell_bwd_args_t *p = args;
	float w[5][HB], dhy[HB], dhn[HB];
	int dt = p->dtype;
	int64_t H = p->H;

	for (int k = 0; k < 5; k++)
		nk_fp_load_row_f32(w[k], p->ws, dt, b * 5 * H + k * H + h0, n);
	nk_fp_load_row_f32(dhy, p->dhy, dt, b * H + h0, n);
	for (int64_t j = 0; j < n; j++) {
		float r = w[0][j], z = w[1][j], nn = w[2][j], hx = w[3][j], hn = w[4][j], g = dhy[j];
		float dn = (g - g * z) * (1 - nn * nn);

		w[0][j] = dn * hn * (1 - r) * r;
		w[1][j] = g * (hx - nn) * (1 - z) * z;
		w[2][j] = dn;
		w[3][j] = g * z;
		dhn[j] = dn * r;
	}
	for (int k = 0; k < 3; k++) {
		nk_fp_store_row_f32(p->dig, dt, b * 3 * H + k * H + h0, w[k], n);
		nk_fp_store_row_f32(p->dhg, dt, b * 3 * H + k * H + h0, k == 2 ? dhn : w[k], n);
	}
	nk_fp_store_row_f32(p->dhx, dt, b * H + h0, w[3], n);
}

static void gru_bwd_tile_f64(const void *args, int64_t b, int64_t h0, int64_t n)
{
	const nk_gru_cell_bwd_args_t *p = args;
	int64_t H = p->H;
	const double *ws = (const double *)p->ws + b * 5 * H + h0, *dhy = (const double *)p->dhy + b * H + h0;
	double *dig = (double *)p->dig + b * 3 * H + h0, *dhg = (double *)p->dhg + b * 3 * H + h0, *dhx = (double *)p->dhx + b * H + h0;

	for (int64_t j = 0; j < n; j++) {
		double r = ws[j], z = ws[H + j], nn = ws[2 * H + j], hx = ws[3 * H + j], hn = ws[4 * H + j], g = dhy[j];
		double dn = (g - g * z) * (1 - nn * nn), dr = dn * hn * (1 - r) * r, dz = g * (hx - nn) * (1 - z) * z;

		dig[j] = dr, dig[H + j] = dz, dig[2 * H + j] = dn;
		dhg[j] = dr, dhg[H + j] = dz, dhg[2 * H + j] = dn * r;
		dhx[j] = g * z;
	}
}

int nk_gru_cell_bwd_run(void *args)
{
	const nk_gru_cell_bwd_args_t *a = args;
	const void *need[] = { a->dhy, a->ws, a->dig, a->dhg, a->dhx };

	if (rnn_check("gru_cell_backward", a->dtype, a->B, a->H, 5, need))
		return -1;
	if (nk_using_reference())
		return nk_gru_cell_bwd_ref(args);
	run_tiles(a, a->B, a->H, a->dtype == NK_F64 ? gru_bwd_tile_f64 : gru_bwd_tile_f32);
	if (a->dbih)
		colsum(a->dtype, a->B, 3 * a->H, a->dig, a->dbih);
	if (a->dbhh)
		colsum(a->dtype, a->B, 3 * a->H, a->dhg, a->dbhh);
	return 0;
}

int nk_gru_cell_bwd_ref(void *args)
{
	const nk_gru_cell_bwd_args_t *a = args;
	const void *need[] = { a->dhy, a->ws, a->dig, a->dhg, a->dhx };
	int dt = a->dtype;
	int64_t H = a->H;

	if (rnn_check("gru_cell_backward", dt, a->B, H, 5, need))
		return -1;
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t h = 0; h < H; h++) {
			int64_t w = b * 5 * H + h, o = b * 3 * H + h;
			double r = nk_fp_loadd(a->ws, dt, w), z = nk_fp_loadd(a->ws, dt, w + H), nn = nk_fp_loadd(a->ws, dt, w + 2 * H);
			double hx = nk_fp_loadd(a->ws, dt, w + 3 * H), hn = nk_fp_loadd(a->ws, dt, w + 4 * H), g = nk_fp_loadd(a->dhy, dt, b * H + h);
			double dn = (g - g * z) * (1 - nn * nn), dr = dn * hn * (1 - r) * r, dz = g * (hx - nn) * (1 - z) * z;

			nk_fp_stored(a->dig, dt, o, dr);
			nk_fp_stored(a->dig, dt, o + H, dz);
			nk_fp_stored(a->dig, dt, o + 2 * H, dn);
			nk_fp_stored(a->dhg, dt, o, dr);
			nk_fp_stored(a->dhg, dt, o + H, dz);
			nk_fp_stored(a->dhg, dt, o + 2 * H, dn * r);
			nk_fp_stored(a->dhx, dt, b * H + h, g * z);
		}
	if (a->dbih)
		colsum_ref(dt, a->B, 3 * H, a->dig, a->dbih);
	if (a->dbhh)
		colsum_ref(dt, a->B, 3 * H, a->dhg, a->dbhh);
	return 0;
}
