/* pool.c - max / average / adaptive pooling over [NC, D, H, W] planes, their backward, max unpooling.
 *
 * Shape contract (nk_spatial.h): contiguous planes, 1-d/2-d as 3-d with unit leading sizes.  Window of
 * output o along a dimension (size I, output size O):
 *   MAX:          lo = o*s - p, hi = min(lo + (k-1)*dil + 1, I), lo raised by dil while < 0, step dil;
 *   AVG:          lo = o*s - p, hi = min(lo + k, I + p) (the count_include_pad extent), then clipped
 *                 to [0, I);
 *   ADAPTIVE_*:   lo = floor(o*I/O), hi = ceil((o+1)*I/O).
 * Max: the first strictly greater element wins, a NaN always wins (so the last NaN), the index starts
 * at the window's first element (ATen's cpu_max_pool).  Avg: sum in f32 (f64 for f64, int64 for the
 * integer dtypes with a truncating divide) in window order; divisor = divisor_override, else the
 * padded extent (count_include_pad) or the clipped one; adaptive avg divides by each extent in turn.
 * Backward adds in output order within a plane, rounding each add to the dtype (as the CPU does).
 * f32 max pooling with AVX-512 runs pool_avx512.c (same values and indices, 16 outputs at a time).
 * Threading: planes (NC) over the pool.  The _ref twins are independent naive code (the definitions,
 * one output element at a time, every window position visited), compared with the run paths in
 * tests/c/test_spatial.c.
 */
#include <math.h>
#include <string.h>

#include "nk_dispatch_impl.h"
#include "nk.h"
#include "nk_spatial_impl.h"
#include "nrt.h"

typedef struct {
	int64_t lo, hi, step, ext; /* ext: AVG's unclipped extent */
} win_t;

typedef struct {
	int mode;
	const int64_t *in, *out, *k, *s, *p, *dil;
} geom_t;

static win_t window(const geom_t *g, int d, int64_t o)
{
	win_t w = { 0, 0, 1, 0 };
	int64_t I = g->in[d], O = g->out[d];

	switch (g->mode) {
	case NK_POOL_MAX:
		w.lo = o * g->s[d] - g->p[d];
		w.hi = w.lo + (g->k[d] - 1) * g->dil[d] + 1;
		w.hi = w.hi < I ? w.hi : I;
		w.step = g->dil[d];
		while (w.lo < 0)
			w.lo += w.step;
		break;
	case NK_POOL_AVG:
		w.lo = o * g->s[d] - g->p[d];
		w.hi = w.lo + g->k[d] < I + g->p[d] ? w.lo + g->k[d] : I + g->p[d];
		w.ext = w.hi - w.lo;
		w.lo = w.lo > 0 ? w.lo : 0;
		w.hi = w.hi < I ? w.hi : I;
		break;
	default:
		w.lo = o * I / O;
		w.hi = ((o + 1) * I + O - 1) / O;
		break;
	}
	return w;
}

static bool win_empty(const win_t *w)
{
	return w[0].lo >= w[0].hi || w[1].lo >= w[1].hi || w[2].lo >= w[2].hi;
}

static int check_geom(const geom_t *g, int dtype, int64_t NC, const char *who)
{
	if (!nk_dtype_valid(dtype) || dtype == NK_BOOL || g->mode < 0 || g->mode >= NK_POOL_NMODES) {
		nrt_kernel_fail("%s: unsupported dtype %s or mode %d", who, nk_dtype_name(dtype), g->mode);
		return -1;
	}
	if (NC < 0)
		goto bad;
	for (int d = 0; d < 3; d++) {
		if (g->in[d] < 0 || g->out[d] < 0)
			goto bad;
		if (g->mode == NK_POOL_MAX || g->mode == NK_POOL_AVG) {
			if (g->k[d] < 1 || g->s[d] < 1 || g->p[d] < 0 || (g->mode == NK_POOL_MAX && g->dil[d] < 1))
				goto bad;
		} else if (g->out[d] == 0 && g->in[d] != 0 && NC) {
			goto bad;
		}
	}
	return 0;
bad:
	nrt_kernel_fail("%s: bad geometry (negative size, kernel/stride/dilation < 1 or padding < 0)", who);
	return -1;
}

/* ---- forward ---------------------------------------------------------------------------------- */

typedef struct {
	const nk_pool_args_t *a;
	geom_t g;
	bool fast; /* nk_pool_run: f32 max pooling through pool_avx512.c when the CPU has it */
} pool_ctx_t;

static void max_plane(const pool_ctx_t *c, int64_t nc)
{
	const nk_pool_args_t *a = c->a;
	int dt = a->dtype;
	size_t es = sp_esize(dt);
	bool isint = !sp_is_float(dt);
	int64_t IH = a->in[1], IW = a->in[2], ipl = a->in[0] * IH * IW;
	int64_t opl = a->out[0] * a->out[1] * a->out[2], o = 0;
	const char *x = (const char *)a->x + (size_t)(nc * ipl) * es;
	char *y = (char *)a->y + (size_t)(nc * opl) * es;
	int64_t *ix = a->idx + nc * opl;

	for (int64_t od = 0; od < a->out[0]; od++) {
		win_t w[3];

		w[0] = window(&c->g, 0, od);
		for (int64_t oh = 0; oh < a->out[1]; oh++) {
			w[1] = window(&c->g, 1, oh);
			for (int64_t ow = 0; ow < a->out[2]; ow++, o++) {
				int64_t best;
				double mv = -INFINITY;
				int64_t mi = INT64_MIN;

				w[2] = window(&c->g, 2, ow);
				best = (w[0].lo * IH + w[1].lo) * IW + w[2].lo;
				if (win_empty(w)) { /* not reachable with valid geometry: -inf / lowest */
					if (isint)
						sp_sti(y, dt, o, dt == NK_U8 ? 0 : INT64_MIN);
					else
						sp_st(y, dt, o, -INFINITY);
					ix[o] = best;
					continue;
				}
				for (int64_t id = w[0].lo; id < w[0].hi; id += w[0].step)
					for (int64_t ih = w[1].lo; ih < w[1].hi; ih += w[1].step)
						for (int64_t iw = w[2].lo; iw < w[2].hi; iw += w[2].step) {
							int64_t k = (id * IH + ih) * IW + iw;

							if (isint) {
								int64_t v = sp_ldi(x, dt, k);

								if (v > mi)
									mi = v, best = k;
							} else {
								double v = sp_ld(x, dt, k);

								if (v > mv || isnan(v))
									mv = v, best = k;
							}
						}
				sp_cp(y, o, x, best, es);
				ix[o] = best;
			}
		}
	}
}

static void avg_plane(const pool_ctx_t *c, int64_t nc)
{
	const nk_pool_args_t *a = c->a;
	int dt = a->dtype;
	size_t es = sp_esize(dt);
	bool isint = !sp_is_float(dt), f64 = dt == NK_F64, adaptive = a->mode == NK_POOL_ADAPTIVE_AVG;
	int64_t IH = a->in[1], IW = a->in[2], ipl = a->in[0] * IH * IW;
	int64_t opl = a->out[0] * a->out[1] * a->out[2], o = 0;
	const char *x = (const char *)a->x + (size_t)(nc * ipl) * es;
	char *y = (char *)a->y + (size_t)(nc * opl) * es;

	for (int64_t od = 0; od < a->out[0]; od++) {
		win_t w[3];

		w[0] = window(&c->g, 0, od);
		for (int64_t oh = 0; oh < a->out[1]; oh++) {
			w[1] = window(&c->g, 1, oh);
			for (int64_t ow = 0; ow < a->out[2]; ow++, o++) {
				int64_t div, n0, n1, n2;

				w[2] = window(&c->g, 2, ow);
				if (win_empty(w)) {
					if (isint)
						sp_sti(y, dt, o, 0);
					else
						sp_st(y, dt, o, 0);
					continue;
				}
				n0 = w[0].hi - w[0].lo, n1 = w[1].hi - w[1].lo, n2 = w[2].hi - w[2].lo;
				if (a->divisor && !adaptive)
					div = a->divisor;
				else if (a->count_include_pad && !adaptive)
					div = w[0].ext * w[1].ext * w[2].ext;
				else
					div = n0 * n1 * n2;
				if (isint) {
					int64_t s = 0;

					for (int64_t id = w[0].lo; id < w[0].hi; id++)
						for (int64_t ih = w[1].lo; ih < w[1].hi; ih++)
							for (int64_t iw = w[2].lo; iw < w[2].hi; iw++)
								s += sp_ldi(x, dt, (id * IH + ih) * IW + iw);
					sp_sti(y, dt, o, adaptive ? s / n0 / n1 / n2 : s / div);
				} else {
					double s = 0;

					for (int64_t id = w[0].lo; id < w[0].hi; id++)
						for (int64_t ih = w[1].lo; ih < w[1].hi; ih++)
							for (int64_t iw = w[2].lo; iw < w[2].hi; iw++) {
								s = sp_r(f64, s + sp_ld(x, dt, (id * IH + ih) * IW + iw));
								if (a->acc_dtype)
									s = sp_rdt(dt, s);
							}
					if (adaptive && a->acc_dtype)
						s = sp_rdt(dt, sp_r(f64, sp_rdt(dt, sp_r(f64, sp_rdt(dt, sp_r(f64, s / (double)n0)) / (double)n1)) / (double)n2));
					else if (adaptive)
						s = sp_r(f64, sp_r(f64, sp_r(f64, s / (double)n0) / (double)n1) / (double)n2);
					else
						s = sp_r(f64, s / (double)div);
					sp_st(y, dt, o, s);
				}
			}
		}
	}
}

static void pool_planes(void *ctx, int64_t p0, int64_t p1)
{
	const pool_ctx_t *c = ctx;
	bool max = c->a->mode == NK_POOL_MAX || c->a->mode == NK_POOL_ADAPTIVE_MAX;

	if (c->fast && nk_max_pool_f32_avx512(c->a, p0, p1))
		return;
	for (int64_t nc = p0; nc < p1; nc++) {
		if (max)
			max_plane(c, nc);
		else
			avg_plane(c, nc);
	}
}

static int pool_prepare(const nk_pool_args_t *a, pool_ctx_t *c)
{
	c->a = a;
	c->g = (geom_t){ a->mode, a->in, a->out, a->k, a->s, a->p, a->dil };
	c->fast = false;
	if (check_geom(&c->g, a->dtype, a->NC, "pool"))
		return -1;
	if ((a->mode == NK_POOL_MAX || a->mode == NK_POOL_ADAPTIVE_MAX) && !a->idx) {
		nrt_kernel_fail("max pool: no index output");
		return -1;
	}
	if (!sp_is_float(a->dtype) && (a->mode == NK_POOL_ADAPTIVE_MAX || a->mode == NK_POOL_ADAPTIVE_AVG)) {
		nrt_kernel_fail("adaptive pool: unsupported dtype %s", nk_dtype_name(a->dtype));
		return -1;
	}
	return 0;
}

/* Work of one plane, for the parallel grain. */
static int64_t plane_work(const int64_t *out, const int64_t *in)
{
	return out[0] * out[1] * out[2] + in[0] * in[1] * in[2] + 1;
}

int nk_pool_run(void *args)
{
	const nk_pool_args_t *a = args;
	pool_ctx_t c;

	if (pool_prepare(a, &c))
		return -1;
	c.fast = a->dtype == NK_F32 && a->mode == NK_POOL_MAX && nk_family_avx512(NK_FAM_POOL);
	if (a->NC && a->out[0] * a->out[1] * a->out[2] != 0)
		nrt_parallel_for(a->NC, NK_PARALLEL_GRAIN / plane_work(a->out, a->in) + 1, pool_planes, &c);
	return 0;
}

/* ---- backward --------------------------------------------------------------------------------- */

typedef struct {
	const nk_pool_bwd_args_t *a;
	geom_t g;
} pool_bwd_ctx_t;

static void max_bwd_plane(const pool_bwd_ctx_t *c, int64_t nc)
{
	const nk_pool_bwd_args_t *a = c->a;
	int dt = a->dtype;
	size_t es = sp_esize(dt);
	int64_t ipl = a->in[0] * a->in[1] * a->in[2], opl = a->out[0] * a->out[1] * a->out[2];
	const char *gy = (const char *)a->gy + (size_t)(nc * opl) * es;
	char *gx = (char *)a->gx + (size_t)(nc * ipl) * es;
	const int64_t *ix = a->idx + nc * opl;

	memset(gx, 0, (size_t)ipl * es);
	if (dt == NK_F32) { /* the common case without the per-element dtype switch */
		const float *g = (const float *)gy;
		float *d = (float *)gx;

		for (int64_t o = 0; o < opl; o++)
			d[ix[o]] += g[o];
		return;
	}
	for (int64_t o = 0; o < opl; o++)
		sp_add(gx, dt, ix[o], sp_ld(gy, dt, o));
}

static void avg_bwd_plane(const pool_bwd_ctx_t *c, int64_t nc)
{
	const nk_pool_bwd_args_t *a = c->a;
	int dt = a->dtype;
	size_t es = sp_esize(dt);
	bool f64 = dt == NK_F64, adaptive = a->mode == NK_POOL_ADAPTIVE_AVG;
	int64_t IH = a->in[1], IW = a->in[2], ipl = a->in[0] * IH * IW;
	int64_t opl = a->out[0] * a->out[1] * a->out[2], o = 0;
	const char *gy = (const char *)a->gy + (size_t)(nc * opl) * es;
	char *gx = (char *)a->gx + (size_t)(nc * ipl) * es;

	memset(gx, 0, (size_t)ipl * es);
	for (int64_t od = 0; od < a->out[0]; od++) {
		win_t w[3];

		w[0] = window(&c->g, 0, od);
		for (int64_t oh = 0; oh < a->out[1]; oh++) {
			w[1] = window(&c->g, 1, oh);
			for (int64_t ow = 0; ow < a->out[2]; ow++, o++) {
				int64_t div, n0, n1, n2;
				double v;

				w[2] = window(&c->g, 2, ow);
				if (win_empty(w))
					continue;
				n0 = w[0].hi - w[0].lo, n1 = w[1].hi - w[1].lo, n2 = w[2].hi - w[2].lo;
				if (adaptive) {
					v = sp_rdt(dt, sp_r(f64, sp_ld(gy, dt, o) / (double)n0));
					v = sp_rdt(dt, sp_r(f64, v / (double)n1));
					v = sp_rdt(dt, sp_r(f64, v / (double)n2));
				} else {
					div = a->divisor ? a->divisor
					      : a->count_include_pad ? w[0].ext * w[1].ext * w[2].ext : n0 * n1 * n2;
					v = sp_rdt(dt, sp_r(f64, sp_ld(gy, dt, o) / (double)div));
				}
				for (int64_t id = w[0].lo; id < w[0].hi; id++)
					for (int64_t ih = w[1].lo; ih < w[1].hi; ih++)
						for (int64_t iw = w[2].lo; iw < w[2].hi; iw++)
							sp_add(gx, dt, (id * IH + ih) * IW + iw, v);
			}
		}
	}
}

static void pool_bwd_planes(void *ctx, int64_t p0, int64_t p1)
{
	const pool_bwd_ctx_t *c = ctx;
	bool max = c->a->mode == NK_POOL_MAX || c->a->mode == NK_POOL_ADAPTIVE_MAX;

	for (int64_t nc = p0; nc < p1; nc++) {
		if (max)
			max_bwd_plane(c, nc);
		else
			avg_bwd_plane(c, nc);
	}
}

/* Fails (on the calling thread) on an index outside [0, plane). */
static int check_plane_indices(const int64_t *idx, int64_t n, int64_t plane, const char *who)
{
	for (int64_t i = 0; i < n; i++)
		if (idx[i] < 0 || idx[i] >= plane) {
			nrt_kernel_fail("%s: index %lld is out of bounds for an input plane of %lld elements", who,
					(long long)idx[i], (long long)plane);
			return -1;
		}
	return 0;
}

static int pool_bwd_prepare(const nk_pool_bwd_args_t *a, pool_bwd_ctx_t *c)
{
	int64_t opl = a->out[0] * a->out[1] * a->out[2], ipl = a->in[0] * a->in[1] * a->in[2];

	c->a = a;
	c->g = (geom_t){ a->mode, a->in, a->out, a->k, a->s, a->p, a->dil };
	if (check_geom(&c->g, a->dtype, a->NC, "pool backward"))
		return -1;
	if (!sp_is_float(a->dtype)) {
		nrt_kernel_fail("pool backward: unsupported dtype %s", nk_dtype_name(a->dtype));
		return -1;
	}
	if ((a->mode == NK_POOL_MAX || a->mode == NK_POOL_ADAPTIVE_MAX) &&
	    check_plane_indices(a->idx, a->NC * opl, ipl, "max pool backward"))
		return -1;
	return 0;
}

int nk_pool_bwd_run(void *args)
{
	const nk_pool_bwd_args_t *a = args;
	pool_bwd_ctx_t c;

	if (pool_bwd_prepare(a, &c))
		return -1;
	if (a->NC && a->in[0] * a->in[1] * a->in[2] != 0)
		nrt_parallel_for(a->NC, NK_PARALLEL_GRAIN / plane_work(a->out, a->in) + 1, pool_bwd_planes, &c);
	return 0;
}

/* ---- max unpooling ---------------------------------------------------------------------------- */

static void unpool_planes(void *ctx, int64_t p0, int64_t p1)
{
	const nk_unpool_args_t *a = ctx;
	size_t es = sp_esize(a->dtype);

	for (int64_t nc = p0; nc < p1; nc++) {
		const char *x = (const char *)a->x + (size_t)(nc * a->in_plane) * es;
		const int64_t *ix = a->idx + nc * a->in_plane;
		char *y = (char *)a->y + (size_t)(nc * a->out_plane) * es;

		memset(y, 0, (size_t)a->out_plane * es);
		for (int64_t i = 0; i < a->in_plane; i++)
			sp_cp(y, ix[i], x, i, es);
	}
}

static int unpool_prepare(const nk_unpool_args_t *a)
{
	if (!nk_dtype_valid(a->dtype) || a->NC < 0 || a->in_plane < 0 || a->out_plane < 0) {
		nrt_kernel_fail("max_unpool: unsupported dtype %s or negative size", nk_dtype_name(a->dtype));
		return -1;
	}
	for (int64_t i = 0, n = a->NC * a->in_plane; i < n; i++)
		if (a->idx[i] < 0 || a->idx[i] >= a->out_plane) {
			nrt_kernel_fail("max_unpool: Found an invalid max index: %lld (output volumes are of size %lld)",
					(long long)a->idx[i], (long long)a->out_plane);
			return -1;
		}
	return 0;
}

int nk_unpool_run(void *args)
{
	const nk_unpool_args_t *a = args;

	if (unpool_prepare(a))
		return -1;
	if (a->NC && a->out_plane)
		nrt_parallel_for(a->NC, NK_PARALLEL_GRAIN / (a->in_plane + a->out_plane + 1) + 1, unpool_planes,
				 (void *)a);
	return 0;
}

/* The definition, over all planes at once: y = 0, then each x[nc][i] written at idx[nc][i] in order. */
int nk_unpool_ref(void *args)
{
	const nk_unpool_args_t *a = args;
	size_t es;

	if (unpool_prepare(a))
		return -1;
	es = sp_esize(a->dtype);
	if (a->NC * a->out_plane == 0)
		return 0;
	memset(a->y, 0, (size_t)(a->NC * a->out_plane) * es);
	for (int64_t k = 0; k < a->NC * a->in_plane; k++) {
		int64_t nc = k / a->in_plane;

		memcpy((char *)a->y + (size_t)(nc * a->out_plane + a->idx[k]) * es, (const char *)a->x + (size_t)k * es, es);
	}
	return 0;
}

/* ---- references: the definitions, one output element at a time ------------------------------------- */
/* Independent of the run paths above: every window position k of every dimension is visited (index
 * o*s - p + k*dil, skipped outside the input, or outside the padded extent for AVG's count), adaptive
 * windows come from their floor/ceil definition; the arithmetic (f32 sums in window order, the dtype's
 * divides) is PyTorch's CPU one, so results match the run bit for bit. */
typedef struct {
	int64_t base[3], step[3], cnt[3]; /* window positions base + j*step, j < cnt, per dim */
	int64_t n[3];                     /* positions inside the input */
	int64_t ext[3];                   /* AVG: positions inside the padded extent */
	int64_t first[3];                 /* MAX: the run's start index of an empty window (unreachable) */
} ref_win_t;

static void ref_window(const nk_pool_args_t *a, const int64_t *o, ref_win_t *w)
{
	bool adaptive = a->mode == NK_POOL_ADAPTIVE_MAX || a->mode == NK_POOL_ADAPTIVE_AVG;

	for (int d = 0; d < 3; d++) {
		int64_t I = a->in[d], O = a->out[d];

		w->n[d] = w->ext[d] = 0;
		if (adaptive) {
			int64_t lo = (int64_t)floor((double)(o[d] * I) / (double)O);
			int64_t hi = (int64_t)ceil((double)((o[d] + 1) * I) / (double)O);

			w->base[d] = w->first[d] = lo, w->step[d] = 1, w->cnt[d] = w->n[d] = hi - lo;
			continue;
		}
		w->base[d] = o[d] * a->s[d] - a->p[d];
		w->step[d] = a->mode == NK_POOL_MAX ? a->dil[d] : 1;
		w->cnt[d] = a->k[d];
		w->first[d] = w->base[d];
		while (w->first[d] < 0)
			w->first[d] += w->step[d];
		for (int64_t j = 0; j < a->k[d]; j++) {
			int64_t i = w->base[d] + j * w->step[d];

			w->ext[d] += i < I + a->p[d];
			w->n[d] += i >= 0 && i < I;
		}
	}
}

/* Input index of window position (i, j, l), or -1 outside the input. */
static int64_t ref_pos(const nk_pool_args_t *a, const ref_win_t *w, int64_t i, int64_t j, int64_t l)
{
	int64_t q[3] = { i, j, l }, e = 0;

	for (int d = 0; d < 3; d++) {
		int64_t v = w->base[d] + q[d] * w->step[d];

		if (v < 0 || v >= a->in[d])
			return -1;
		e = e * a->in[d] + v;
	}
	return e;
}

static void pool_ref_elem(const nk_pool_args_t *a, int64_t nc, const int64_t *o, int64_t oi)
{
	int dt = a->dtype;
	size_t es = sp_esize(dt);
	int64_t IH = a->in[1], IW = a->in[2], ipl = a->in[0] * IH * IW;
	const char *x = (const char *)a->x + (size_t)(nc * ipl) * es;
	bool isint = !sp_is_float(dt), f64 = dt == NK_F64;
	ref_win_t w;

	ref_window(a, o, &w);
	int64_t n = w.n[0] * w.n[1] * w.n[2];
	if (a->mode == NK_POOL_MAX || a->mode == NK_POOL_ADAPTIVE_MAX) {
		int64_t best = (w.first[0] * IH + w.first[1]) * IW + w.first[2], mi = INT64_MIN;
		double mv = -INFINITY;
		bool any = false;

		for (int64_t i = 0; i < w.cnt[0]; i++)
			for (int64_t j = 0; j < w.cnt[1]; j++)
				for (int64_t l = 0; l < w.cnt[2]; l++) {
					int64_t e = ref_pos(a, &w, i, j, l);

					if (e < 0)
						continue;
					if (!any)
						best = e, any = true;
					if (isint ? sp_ldi(x, dt, e) > mi : (sp_ld(x, dt, e) > mv || isnan(sp_ld(x, dt, e)))) {
						best = e;
						if (isint)
							mi = sp_ldi(x, dt, e);
						else
							mv = sp_ld(x, dt, e);
					}
				}
		a->idx[nc * a->out[0] * a->out[1] * a->out[2] + oi] = best;
		char *y = (char *)a->y + (size_t)(nc * a->out[0] * a->out[1] * a->out[2]) * es;
		if (!any) {
			if (isint)
				sp_sti(y, dt, oi, dt == NK_U8 ? 0 : INT64_MIN);
			else
				sp_st(y, dt, oi, -INFINITY);
		} else {
			sp_cp(y, oi, x, best, es);
		}
		return;
	}
	char *y = (char *)a->y + (size_t)(nc * a->out[0] * a->out[1] * a->out[2]) * es;
	bool adaptive = a->mode == NK_POOL_ADAPTIVE_AVG;
	int64_t div = a->divisor && !adaptive ? a->divisor
		      : a->count_include_pad && !adaptive ? w.ext[0] * w.ext[1] * w.ext[2] : n;
	if (n == 0) {
		if (isint)
			sp_sti(y, dt, oi, 0);
		else
			sp_st(y, dt, oi, 0);
		return;
	}
	int64_t si = 0;
	double sf = 0;
	for (int64_t i = 0; i < w.cnt[0]; i++)
		for (int64_t j = 0; j < w.cnt[1]; j++)
			for (int64_t l = 0; l < w.cnt[2]; l++) {
				int64_t e = ref_pos(a, &w, i, j, l);

				if (e < 0)
					continue;
				if (isint) {
					si += sp_ldi(x, dt, e);
					continue;
				}
				sf = sp_r(f64, sf + sp_ld(x, dt, e));
				if (a->acc_dtype)
					sf = sp_rdt(dt, sf);
			}
	if (isint) {
		sp_sti(y, dt, oi, adaptive ? si / w.n[0] / w.n[1] / w.n[2] : si / div);
		return;
	}
	if (adaptive) {
		for (int d = 0; d < 3; d++) {
			sf = sp_r(f64, sf / (double)w.n[d]);
			if (a->acc_dtype)
				sf = sp_rdt(dt, sf);
		}
	} else {
		sf = sp_r(f64, sf / (double)div);
	}
	sp_st(y, dt, oi, sf);
}

int nk_pool_ref(void *args)
{
	const nk_pool_args_t *a = args;
	pool_ctx_t c;

	if (pool_prepare(a, &c))
		return -1;
	for (int64_t nc = 0; nc < a->NC; nc++) {
		int64_t oi = 0, o[3];

		for (o[0] = 0; o[0] < a->out[0]; o[0]++)
			for (o[1] = 0; o[1] < a->out[1]; o[1]++)
				for (o[2] = 0; o[2] < a->out[2]; o[2]++, oi++)
					pool_ref_elem(a, nc, o, oi);
	}
	return 0;
}

/* Backward: gx zeroed, then each output element's gradient added where its window read (max: at its
 * index; avg: gy / divisor at every position of the window inside the input), in output order. */
int nk_pool_bwd_ref(void *args)
{
	const nk_pool_bwd_args_t *a = args;
	pool_bwd_ctx_t c;
	int dt;
	size_t es;
	int64_t ipl, opl;

	if (pool_bwd_prepare(a, &c))
		return -1;
	dt = a->dtype, es = sp_esize(dt);
	ipl = a->in[0] * a->in[1] * a->in[2], opl = a->out[0] * a->out[1] * a->out[2];
	if (ipl == 0)
		return 0;
	memset(a->gx, 0, (size_t)(a->NC * ipl) * es);
	nk_pool_args_t g = { .dtype = dt, .mode = a->mode, .NC = a->NC, .count_include_pad = a->count_include_pad,
			     .divisor = a->divisor };
	bool f64 = dt == NK_F64, adaptive = a->mode == NK_POOL_ADAPTIVE_AVG;
	for (int d = 0; d < 3; d++)
		g.in[d] = a->in[d], g.out[d] = a->out[d], g.k[d] = a->k[d], g.s[d] = a->s[d], g.p[d] = a->p[d],
		g.dil[d] = a->dil[d];
	for (int64_t nc = 0; nc < a->NC; nc++) {
		char *gx = (char *)a->gx + (size_t)(nc * ipl) * es;
		const char *gy = (const char *)a->gy + (size_t)(nc * opl) * es;
		int64_t oi = 0, o[3];

		if (a->mode == NK_POOL_MAX || a->mode == NK_POOL_ADAPTIVE_MAX) {
			for (oi = 0; oi < opl; oi++)
				sp_add(gx, dt, a->idx[nc * opl + oi], sp_ld(gy, dt, oi));
			continue;
		}
		for (o[0] = 0; o[0] < a->out[0]; o[0]++)
			for (o[1] = 0; o[1] < a->out[1]; o[1]++)
				for (o[2] = 0; o[2] < a->out[2]; o[2]++, oi++) {
					ref_win_t w;
					double v = sp_ld(gy, dt, oi);

					ref_window(&g, o, &w);
					if (w.n[0] * w.n[1] * w.n[2] == 0)
						continue;
					if (adaptive) {
						for (int d = 0; d < 3; d++)
							v = sp_rdt(dt, sp_r(f64, v / (double)w.n[d]));
					} else {
						int64_t div = a->divisor ? a->divisor
							      : a->count_include_pad ? w.ext[0] * w.ext[1] * w.ext[2]
										     : w.n[0] * w.n[1] * w.n[2];
						v = sp_rdt(dt, sp_r(f64, v / (double)div));
					}
					for (int64_t i = 0; i < w.cnt[0]; i++)
						for (int64_t j = 0; j < w.cnt[1]; j++)
							for (int64_t l = 0; l < w.cnt[2]; l++) {
								int64_t e = ref_pos(&g, &w, i, j, l);

								if (e >= 0)
									sp_add(gx, dt, e, v);
							}
				}
	}
	return 0;
}
