/* conv.c - convolution family (nk_conv.h): forward, backward data (= transposed convolution), backward
 * weight and bias for 1-3 spatial dims with stride, padding, dilation and groups; ATen's im2col/col2im.
 *
 * Optimized path (nk_conv_run): per chunk of nb samples and per group, im2col packs the input into a
 * column matrix col[Cg*kvol][nb*ovol] (compute dtype: f32 for f32/bf16/f16, f64, int64 for integers),
 * and one GEMM (nk_gemm_run / nk_igemm_run, itself parallel) does the channel contraction:
 *   FWD:        Y[Og][nb*ovol]      = W_g[Og][Cg*kvol] @ col           -> unpacked into y (+ bias)
 *   BWD_DATA:   col[Cg*kvol][nb*ovol] = W_g^T @ DY[Og][nb*ovol]          -> col2im (gather) into dx
 *   BWD_WEIGHT: dW_g[Og][Cg*kvol]   += DY[Og][nb*ovol] @ col^T         (accumulated over chunks)
 * DY is dy packed to [Og][nb*ovol].  col2im is a gather: each dx row sums the column entries that land
 * on it (no zeroing, no write conflicts, one rounding for bf16/f16).  nb is chosen so the column and
 * packed buffers fit in CONV_WS_CAP: nk_conv_workspace; when one sample exceeds it, chunks are tiles of
 * output rows of one sample (backward data then accumulates the tiles in a compute-dtype dx buffer).
 * f32 with AVX-512 first tries conv_avx512.c (forward and stride-1 backward data as an implicit GEMM
 * without the column matrix; backward weight as tiled dot products for small weights), which returns 0
 * for the geometries it leaves to this path.
 * Reference (nk_conv_ref): direct loops per output element, f64 (int64) accumulation.
 * Threading: im2col/col2im/pack rows over the pool; the GEMMs parallelize themselves.
 */
#include <string.h>

#include "nk_dispatch_impl.h"
#include "nk_impl.h"
#include "nrt.h"

NK_VECTORIZE_FILE

#define CONV_WS_CAP ((size_t)32 << 20) /* bytes of column + packed buffers per chunk of samples */
#define CH 256                         /* elements per accumulation chunk of a col2im row */

typedef struct {
	int64_t N, C, O, G, Cg, Og;
	int64_t in[3], out[3], k[3], s[3], p[3], d[3];
	int64_t ivol, ovol, kvol;
} geo_t;

static int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

/* The compute dtype of a storage dtype. */
static int ctype_of(int dt)
{
	return dt == NK_F64 ? NK_F64 : nk_is_int(dt) ? NK_I64 : NK_F32;
}

/* Geometry from the public fields; nsp dims are right-aligned (missing leading dims have size 1). */
static int geo_init(geo_t *g, int nsp, int64_t N, int64_t C, int64_t O, int64_t G, const int64_t *in,
		    const int64_t *out, const int64_t *k, const int64_t *s, const int64_t *p, const int64_t *d,
		    const char *who)
{
	if (nsp < 1 || nsp > 3) {
		nrt_kernel_fail("%s: %d spatial dims (1 to 3 are supported)", who, nsp);
		return -1;
	}
	if (N < 0 || C < 0 || O < 0 || G < 1 || C % G || O % G) {
		nrt_kernel_fail("%s: bad channels N=%lld C=%lld O=%lld groups=%lld", who, (long long)N,
				(long long)C, (long long)O, (long long)G);
		return -1;
	}
	g->N = N, g->C = C, g->O = O, g->G = G, g->Cg = C / G, g->Og = O / G;
	g->ivol = g->ovol = g->kvol = 1;
	for (int i = 0; i < 3; i++) {
		int j = i - (3 - nsp);
		bool has = j >= 0;

		g->in[i] = has ? in[j] : 1, g->out[i] = has ? out[j] : 1, g->k[i] = has ? k[j] : 1;
		g->s[i] = has ? s[j] : 1, g->p[i] = has ? p[j] : 0, g->d[i] = has ? d[j] : 1;
		if (g->in[i] < 0 || g->out[i] < 0 || g->k[i] < 1 || g->s[i] < 1 || g->p[i] < 0 || g->d[i] < 1) {
			nrt_kernel_fail("%s: bad geometry in dim %d: in %lld out %lld kernel %lld stride %lld pad %lld "
					"dilation %lld", who, j, (long long)g->in[i], (long long)g->out[i],
					(long long)g->k[i], (long long)g->s[i], (long long)g->p[i], (long long)g->d[i]);
			return -1;
		}
		g->ivol *= g->in[i], g->ovol *= g->out[i], g->kvol *= g->k[i];
	}
	return 0;
}

/* [*a, *b): the q in [0, Q) with lo <= q*s + off < hi. */
static void q_range(int64_t lo, int64_t hi, int64_t off, int64_t s, int64_t Q, int64_t *a, int64_t *b)
{
	int64_t x = lo - off, y = hi - 1 - off;
	int64_t qa = x <= 0 ? 0 : (x + s - 1) / s;
	int64_t qb = y < 0 ? -1 : nk_min64(y / s, Q - 1);

	*a = qa;
	*b = max64(qb + 1, qa);
}

/* n elements from src (dtype dt, byte stride st) into a dense buffer of dtype ct; ct == dt copies. */
static void run_load(int ct, void *dst, const char *src, int64_t st, int dt, int64_t n)
{
	size_t es = nk_dtype_size(dt);

	if (n <= 0)
		return;
	if (ct == dt) {
		if (st == (int64_t)es) {
			memcpy(dst, src, (size_t)n * es);
			return;
		}
		for (int64_t i = 0; i < n; i++)
			memcpy((char *)dst + i * es, src + i * st, es);
		return;
	}
	if (ct == NK_F32)
		nk_block_load_f32(dst, src, st, dt, n);
	else if (ct == NK_F64)
		nk_block_load_f64(dst, src, st, dt, n);
	else
		nk_block_load_i64(dst, src, st, dt, n);
}

/* n elements of a dense ct buffer into contiguous dst of dtype dt. */
static void run_store(int ct, char *dst, int dt, const void *src, int64_t n)
{
	int64_t es = (int64_t)nk_dtype_size(dt);

	if (n <= 0)
		return;
	if (ct == dt)
		memcpy(dst, src, (size_t)(n * es));
	else if (ct == NK_F32)
		nk_block_store_f32(dst, es, dt, src, n);
	else if (ct == NK_F64)
		nk_block_store_f64(dst, es, dt, src, n);
	else
		nk_block_store_i64(dst, es, dt, src, n);
}

/* v[i] += bias for n elements of compute dtype ct; bias read from p (dtype dt). */
static void add_bias(int ct, void *v, int64_t n, const char *p, int dt)
{
	if (ct == NK_F32) {
		float b = nk_load_f32(p, dt), *x = v;

		for (int64_t i = 0; i < n; i++)
			x[i] += b;
	} else if (ct == NK_F64) {
		double b = nk_load_f64(p, dt), *x = v;

		for (int64_t i = 0; i < n; i++)
			x[i] += b;
	} else {
		uint64_t b = (uint64_t)nk_load_i64(p, dt);
		int64_t *x = v;

		for (int64_t i = 0; i < n; i++)
			x[i] = (int64_t)((uint64_t)x[i] + b);
	}
}

/* acc[i*s] += v[i] for i < n (compute dtype ct). */
static void acc_strided(int ct, void *acc, const void *v, int64_t n, int64_t s)
{
	if (ct == NK_F32) {
		float *a = acc;
		const float *x = v;

		for (int64_t i = 0; i < n; i++)
			a[i * s] += x[i];
	} else if (ct == NK_F64) {
		double *a = acc;
		const double *x = v;

		for (int64_t i = 0; i < n; i++)
			a[i * s] += x[i];
	} else {
		int64_t *a = acc;
		const int64_t *x = v;

		for (int64_t i = 0; i < n; i++)
			a[i * s] = (int64_t)((uint64_t)a[i * s] + (uint64_t)x[i]);
	}
}

/* ---- im2col: col[r*rs + nl*ns + q - q0] = x[nl][c][q*s - p + j*d] (0 outside), r = c*kvol + j ---------
 * over the output positions q of output rows [r0, r1) (an output row: out[2] positions at fixed
 * (od, oh), flat index od*out[1] + oh; q0 = r0*out[2]). */
typedef struct {
	const geo_t *g;
	int dt, ct;
	const char *x;   /* sample 0, channel 0 of the rows' channels */
	int64_t xns;     /* bytes between samples */
	char *col;
	int64_t rs, ns;  /* element strides of col: row, sample */
	int64_t rows;    /* channels * kvol */
	int64_t r0, r1;  /* output rows */
} i2c_t;

static void i2c_units(void *ctx, int64_t lo, int64_t hi)
{
	const i2c_t *t = ctx;
	const geo_t *g = t->g;
	size_t es = nk_dtype_size(t->dt), cs = nk_dtype_size(t->ct);

	for (int64_t u = lo; u < hi; u++) {
		int64_t nl = u / t->rows, r = u % t->rows, c = r / g->kvol, j = r % g->kvol;
		int64_t jd = j / (g->k[1] * g->k[2]), jh = j / g->k[2] % g->k[1], jw = j % g->k[2];
		const char *xc = t->x + nl * t->xns + (int64_t)es * c * g->ivol;
		char *dst = t->col + (int64_t)cs * (r * t->rs + nl * t->ns);
		int64_t off = jw * g->d[2] - g->p[2], a, b;

		q_range(0, g->in[2], off, g->s[2], g->out[2], &a, &b);
		for (int64_t rr = t->r0; rr < t->r1; rr++) {
			int64_t od = rr / g->out[1], oh = rr % g->out[1];
			int64_t id = od * g->s[0] - g->p[0] + jd * g->d[0], ih = oh * g->s[1] - g->p[1] + jh * g->d[1];
			char *drow = dst + (int64_t)cs * (rr - t->r0) * g->out[2];

			if (id < 0 || id >= g->in[0] || ih < 0 || ih >= g->in[1] || a >= b) {
				memset(drow, 0, cs * (size_t)g->out[2]);
				continue;
			}
			memset(drow, 0, cs * (size_t)a);
			run_load(t->ct, drow + cs * (size_t)a,
				 xc + (int64_t)es * ((id * g->in[1] + ih) * g->in[2] + a * g->s[2] + off),
				 (int64_t)es * g->s[2], t->dt, b - a);
			memset(drow + cs * (size_t)b, 0, cs * (size_t)(g->out[2] - b));
		}
	}
}

static void im2col(const i2c_t *t, int64_t nb)
{
	int64_t units = nb * t->rows;

	nrt_parallel_for(units, max64(1, NK_PARALLEL_GRAIN / max64(1, (t->r1 - t->r0) * t->g->out[2])), i2c_units, (void *)t);
}

/* ---- col2im (gather): x[nl][c][i] = bias[c] + sum of col entries landing on i --------------------- */
/* col holds the output rows [r0, r1) (layout as im2col's).  accum: x (then of the compute dtype) is
 * added to instead of overwritten (the row tiles of one sample). */
typedef struct {
	const geo_t *g;
	int dt, ct, cdt;  /* x dtype, compute dtype, col dtype */
	const char *col;
	int64_t rs, ns;   /* element strides of col: row, sample */
	char *x;          /* sample 0, channel 0 of the channels written */
	int64_t xns;      /* bytes between samples */
	const char *bias; /* at channel 0, dtype dt; NULL: none */
	int64_t chans;
	int64_t r0, r1;
	bool accum;
} c2i_t;

static void c2i_units(void *ctx, int64_t lo, int64_t hi)
{
	const c2i_t *t = ctx;
	const geo_t *g = t->g;
	size_t es = nk_dtype_size(t->dt), cs = nk_dtype_size(t->ct), ccs = nk_dtype_size(t->cdt);
	int64_t accb[CH], tmpb[CH + 1]; /* 8-byte slots: hold float, double or int64 */

	/* output planes od that the rows [r0, r1) touch (none if the range is empty) */
	int64_t od_lo = t->r1 > t->r0 ? t->r0 / g->out[1] : 1, od_hi = t->r1 > t->r0 ? (t->r1 - 1) / g->out[1] : 0;

	for (int64_t u = lo; u < hi; u++) {
		int64_t nl = u / t->chans, c = u % t->chans;
		char *xc = t->x + nl * t->xns + (int64_t)es * c * g->ivol;

		for (int64_t id = 0; id < g->in[0]; id++)
			for (int64_t ih = 0; ih < g->in[1]; ih++)
				for (int64_t w0 = 0; w0 < g->in[2]; w0 += CH) {
					int64_t w1 = nk_min64(w0 + CH, g->in[2]);

					char *xrow = xc + (int64_t)es * ((id * g->in[1] + ih) * g->in[2] + w0);

					if (t->accum)
						memcpy(accb, xrow, cs * (size_t)(w1 - w0));
					else
						memset(accb, 0, cs * (size_t)(w1 - w0));
					for (int64_t jd = 0; jd < g->k[0]; jd++) {
						int64_t td = id + g->p[0] - jd * g->d[0], od = td / g->s[0];

						if (td < 0 || td % g->s[0] || od >= g->out[0] || od < od_lo || od > od_hi)
							continue;
						for (int64_t jh = 0; jh < g->k[1]; jh++) {
							int64_t th = ih + g->p[1] - jh * g->d[1], oh = th / g->s[1];

							if (th < 0 || th % g->s[1] || oh >= g->out[1] ||
							    od * g->out[1] + oh < t->r0 || od * g->out[1] + oh >= t->r1)
								continue;
							for (int64_t jw = 0; jw < g->k[2]; jw++) {
								int64_t r = (c * g->k[0] + jd) * g->k[1] * g->k[2] + jh * g->k[2] + jw;
								int64_t off = jw * g->d[2] - g->p[2], a, b;
								const char *crow = t->col + (int64_t)ccs * (r * t->rs + nl * t->ns +
									(od * g->out[1] + oh - t->r0) * g->out[2]);
								const void *v;

								q_range(w0, w1, off, g->s[2], g->out[2], &a, &b);
								if (a >= b)
									continue;
								if (t->cdt == t->ct) {
									v = crow + (int64_t)ccs * a;
								} else {
									run_load(t->ct, tmpb, crow + (int64_t)ccs * a,
										 (int64_t)ccs, t->cdt, b - a);
									v = tmpb;
								}
								acc_strided(t->ct, (char *)accb + cs * (size_t)(a * g->s[2] + off - w0),
									    v, b - a, g->s[2]);
							}
						}
					}
					if (t->bias)
						add_bias(t->ct, accb, w1 - w0, t->bias + (int64_t)es * c, t->dt);
					run_store(t->ct, xrow, t->dt, accb, w1 - w0);
				}
	}
}

static void col2im(const c2i_t *t, int64_t nb)
{
	const geo_t *g = t->g;

	nrt_parallel_for(nb * t->chans, max64(1, NK_PARALLEL_GRAIN / max64(1, g->ivol * g->kvol)), c2i_units,
			 (void *)t);
}

/* ---- pack / unpack between t [nb][chans_total][ovol] (dtype dt; positions [q0, q0 + len)) and
 * buf [rows][nb*len] (ct) ------------------------------------------------------------------------- */
typedef struct {
	bool unpack;
	int dt, ct;
	char *t;          /* sample 0, first channel of the group */
	int64_t tns;      /* bytes between samples */
	char *buf;
	int64_t nb, rows, ovol, q0, len;
	const char *bias; /* unpack only: at the group's first channel, or NULL */
} pack_t;

static void pack_units(void *ctx, int64_t lo, int64_t hi)
{
	const pack_t *p = ctx;
	size_t es = nk_dtype_size(p->dt), cs = nk_dtype_size(p->ct);

	for (int64_t u = lo; u < hi; u++) {
		int64_t nl = u / p->rows, o = u % p->rows;
		char *tp = p->t + nl * p->tns + (int64_t)es * (o * p->ovol + p->q0);
		char *bp = p->buf + (int64_t)cs * (o * p->nb + nl) * p->len;

		if (!p->unpack) {
			run_load(p->ct, bp, tp, (int64_t)es, p->dt, p->len);
			continue;
		}
		if (p->bias)
			add_bias(p->ct, bp, p->len, p->bias + (int64_t)es * o, p->dt);
		run_store(p->ct, tp, p->dt, bp, p->len);
	}
}

static void pack(const pack_t *p)
{
	nrt_parallel_for(p->nb * p->rows, max64(1, NK_PARALLEL_GRAIN / max64(1, p->len)), pack_units, (void *)p);
}

/* C[M][N] = A @ B (+ beta*C) in compute dtype ct (dense row strides as given). */
static int gemm(int ct, int64_t M, int64_t N, int64_t K, double beta, const void *A, int64_t rs_a, int64_t cs_a,
		const void *B, int64_t rs_b, int64_t cs_b, void *C, int64_t rs_c)
{
	nk_gemm_args_t a = { .dtype = ct, .M = M, .N = N, .K = K, .batch = 1, .alpha = 1, .beta = beta,
			     .A = A, .rs_a = rs_a, .cs_a = cs_a, .B = B, .rs_b = rs_b, .cs_b = cs_b,
			     .C = C, .rs_c = rs_c, .cs_c = 1 };

	return ct == NK_I64 ? nk_igemm_run(&a) : nk_gemm_run(&a);
}

/* ---- validation and workspace ------------------------------------------------------------------ */
static int conv_check(const nk_conv_args_t *a, geo_t *g)
{
	static const char *who = "conv";

	if (!nk_dtype_valid(a->dtype)) {
		nrt_kernel_fail("%s: bad dtype %d", who, a->dtype);
		return -1;
	}
	if (a->mode < NK_CONV_FWD || a->mode > NK_CONV_BWD_BIAS) {
		nrt_kernel_fail("%s: bad mode %d", who, a->mode);
		return -1;
	}
	if (geo_init(g, a->nsp, a->N, a->C, a->O, a->G, a->in, a->out, a->k, a->stride, a->pad, a->dil, who))
		return -1;
	if ((a->mode == NK_CONV_FWD && (!a->x || !a->w || !a->y)) ||
	    (a->mode == NK_CONV_BWD_DATA && (!a->dy || !a->w || !a->dx)) ||
	    (a->mode == NK_CONV_BWD_WEIGHT && (!a->dy || !a->x || !a->dw)) ||
	    (a->mode == NK_CONV_BWD_BIAS && (!a->dy || !a->db))) {
		nrt_kernel_fail("%s: missing tensor for mode %d", who, a->mode);
		return -1;
	}
	return 0;
}

/* Chunking: nb samples per chunk, and output-row tiles of rt rows (rt < R = out[0]*out[1] only when one
 * sample's buffers exceed the cap; then nb = 1).  Workspace: [weight in compute dtype or dw accumulator]
 * [col K x nb*rt*out[2]] [packed Og x nb*rt*out[2]] [tiled backward data: dx accumulator Cg x ivol]. */
typedef struct {
	int64_t nb, rt, R;
	bool tiled;
	size_t wbuf, colb, bufb, dxb;
} layout_t;

static size_t conv_ws(const nk_conv_args_t *a, const geo_t *g, layout_t *L)
{
	int ct = ctype_of(a->dtype);
	size_t cs = nk_dtype_size(ct);
	int64_t K = g->Cg * g->kvol, W2 = g->out[2], pos;
	size_t per = (size_t)((K + g->Og) * g->ovol) * cs;

	memset(L, 0, sizeof *L);
	L->R = g->out[0] * g->out[1];
	if (a->mode == NK_CONV_BWD_BIAS)
		return 0;
	L->wbuf = ct != a->dtype ? (size_t)(g->O * K) * cs : 0;
	L->rt = L->R;
	if (g->N == 0) {
		L->nb = 0;
	} else if (per <= CONV_WS_CAP) {
		L->nb = per == 0 ? g->N : nk_min64(g->N, (int64_t)(CONV_WS_CAP / per));
	} else {
		size_t rowb = (size_t)((K + g->Og) * W2) * cs;

		L->nb = 1;
		L->rt = nk_min64(L->R, max64(1, (int64_t)(CONV_WS_CAP / rowb)));
		L->tiled = L->rt < L->R;
	}
	pos = L->nb * L->rt * W2;
	L->colb = (size_t)(K * pos) * cs;
	L->bufb = (size_t)(g->Og * pos) * cs;
	L->dxb = L->tiled && a->mode == NK_CONV_BWD_DATA ? (size_t)(g->Cg * g->ivol) * cs : 0;
	return L->wbuf + L->colb + L->bufb + L->dxb;
}

size_t nk_conv_workspace(nk_conv_args_t *a)
{
	geo_t g;
	layout_t L;
	size_t n;

	if (geo_init(&g, a->nsp, a->N, a->C, a->O, a->G, a->in, a->out, a->k, a->stride, a->pad, a->dil, "conv")) {
		a->nb = 0;
		return 0;
	}
	n = conv_ws(a, &g, &L);
	a->nb = L.nb;
	return n;
}

/* ---- the modes ----------------------------------------------------------------------------------- */
typedef struct {
	const nk_conv_args_t *a;
	const geo_t *g;
	layout_t L;
	int dt, ct;
	size_t es, cs;
	const void *wsrc; /* weight in compute dtype */
	char *col, *buf;  /* column and packed buffers */
	void *wacc;       /* weight-sized compute buffer (bf16/f16/narrow ints) */
	char *dxacc;      /* tiled backward data: one sample-group of dx in compute dtype */
} plan_t;

static void plan_init(plan_t *P, const nk_conv_args_t *a, const geo_t *g, const layout_t *L)
{
	P->a = a, P->g = g, P->L = *L, P->dt = a->dtype, P->ct = ctype_of(a->dtype);
	P->es = nk_dtype_size(P->dt), P->cs = nk_dtype_size(P->ct);
	P->wacc = L->wbuf ? a->work : NULL;
	P->col = (char *)a->work + L->wbuf;
	P->buf = P->col + L->colb;
	P->dxacc = L->dxb ? P->buf + L->bufb : NULL;
	P->wsrc = a->w;
	if (L->wbuf && a->mode != NK_CONV_BWD_WEIGHT) {
		run_load(P->ct, P->wacc, a->w, (int64_t)P->es, P->dt, g->O * g->Cg * g->kvol);
		P->wsrc = P->wacc;
	}
}

/* One chunk: samples [n0, n0 + nbc), output rows [r0, r1) of each; len positions per sample. */
typedef struct {
	int64_t n0, nbc, r0, r1, len;
} chunk_t;

static chunk_t chunk_at(const plan_t *P, int64_t n0, int64_t r0)
{
	chunk_t c = { .n0 = n0, .nbc = nk_min64(P->L.nb, P->g->N - n0), .r0 = r0 };

	c.r1 = nk_min64(r0 + max64(P->L.rt, 1), P->L.R);
	c.len = (c.r1 - c.r0) * P->g->out[2];
	return c;
}

static i2c_t plan_i2c(const plan_t *P, const chunk_t *c, int64_t grp)
{
	const geo_t *g = P->g;
	i2c_t t = { .g = g, .dt = P->dt, .ct = P->ct, .xns = (int64_t)P->es * g->C * g->ivol, .col = P->col,
		    .rs = c->nbc * c->len, .ns = c->len, .rows = g->Cg * g->kvol, .r0 = c->r0, .r1 = c->r1 };

	t.x = (const char *)P->a->x + (int64_t)P->es * (c->n0 * g->C + grp * g->Cg) * g->ivol;
	return t;
}

static pack_t plan_pack(const plan_t *P, bool unpack, const void *t, const chunk_t *c, int64_t grp)
{
	const geo_t *g = P->g;
	pack_t p = { .unpack = unpack, .dt = P->dt, .ct = P->ct, .tns = (int64_t)P->es * g->O * g->ovol,
		     .buf = P->buf, .nb = c->nbc, .rows = g->Og, .ovol = g->ovol, .q0 = c->r0 * g->out[2],
		     .len = c->len };

	p.t = (char *)t + (int64_t)P->es * (c->n0 * g->O + grp * g->Og) * g->ovol;
	return p;
}

static const char *wgroup(const plan_t *P, int64_t grp)
{
	return (const char *)P->wsrc + P->cs * (size_t)(grp * P->g->Og * P->g->Cg * P->g->kvol);
}

static int conv_fwd(const plan_t *P)
{
	const nk_conv_args_t *a = P->a;
	const geo_t *g = P->g;
	int64_t K = g->Cg * g->kvol;

	for (int64_t n0 = 0; n0 < g->N; n0 += P->L.nb)
		for (int64_t r0 = 0; r0 < P->L.R; r0 += P->L.rt) {
			chunk_t c = chunk_at(P, n0, r0);

			for (int64_t grp = 0; grp < g->G; grp++) {
				i2c_t t = plan_i2c(P, &c, grp);
				pack_t p = plan_pack(P, true, a->y, &c, grp);

				im2col(&t, c.nbc);
				if (gemm(P->ct, g->Og, c.nbc * c.len, K, 0, wgroup(P, grp), K, 1, P->col, c.nbc * c.len, 1,
					 P->buf, c.nbc * c.len))
					return -1;
				p.bias = a->b ? (const char *)a->b + P->es * (size_t)(grp * g->Og) : NULL;
				pack(&p);
			}
		}
	return 0;
}

/* dx of one chunk and group: col = W_g^T @ DY, then the gather (into dxacc when tiled). */
static int bwd_data_chunk(const plan_t *P, const chunk_t *c, int64_t grp)
{
	const nk_conv_args_t *a = P->a;
	const geo_t *g = P->g;
	int64_t K = g->Cg * g->kvol;
	pack_t p = plan_pack(P, false, a->dy, c, grp);
	c2i_t t = { .g = g, .dt = P->dt, .ct = P->ct, .cdt = P->ct, .col = P->col, .rs = c->nbc * c->len, .ns = c->len,
		    .xns = (int64_t)P->es * g->C * g->ivol, .chans = g->Cg, .r0 = c->r0, .r1 = c->r1 };

	pack(&p);
	if (gemm(P->ct, K, c->nbc * c->len, g->Og, 0, wgroup(P, grp), 1, K, P->buf, c->nbc * c->len, 1, P->col,
		 c->nbc * c->len))
		return -1;
	if (P->dxacc) {
		t.dt = P->ct, t.x = P->dxacc, t.accum = true;
	} else {
		t.x = (char *)a->dx + (int64_t)P->es * (c->n0 * g->C + grp * g->Cg) * g->ivol;
		t.bias = a->b ? (const char *)a->b + P->es * (size_t)(grp * g->Cg) : NULL;
	}
	col2im(&t, c->nbc);
	return 0;
}

static int conv_bwd_data(const plan_t *P)
{
	const nk_conv_args_t *a = P->a;
	const geo_t *g = P->g;

	for (int64_t n0 = 0; n0 < g->N; n0 += P->L.nb)
		for (int64_t grp = 0; grp < g->G; grp++) {
			if (P->dxacc)
				memset(P->dxacc, 0, P->cs * (size_t)(g->Cg * g->ivol));
			/* R == 0: one empty chunk, which writes the bias (or 0) */
			for (int64_t r0 = 0; r0 < max64(P->L.R, 1); r0 += max64(P->L.rt, 1)) {
				chunk_t c = chunk_at(P, n0, r0);

				if (bwd_data_chunk(P, &c, grp))
					return -1;
			}
			if (P->dxacc) { /* dxacc -> dx (+ bias), one rounding */
				pack_t p = { .unpack = true, .dt = P->dt, .ct = P->ct, .buf = P->dxacc, .nb = 1,
					     .rows = g->Cg, .ovol = g->ivol, .q0 = 0, .len = g->ivol };

				p.t = (char *)a->dx + (int64_t)P->es * (n0 * g->C + grp * g->Cg) * g->ivol;
				p.bias = a->b ? (const char *)a->b + P->es * (size_t)(grp * g->Cg) : NULL;
				pack(&p);
			}
		}
	return 0;
}

static int conv_bwd_weight(const plan_t *P)
{
	const nk_conv_args_t *a = P->a;
	const geo_t *g = P->g;
	int64_t K = g->Cg * g->kvol, wn = g->O * K;
	char *dst = P->wacc ? P->wacc : a->dw;

	if (wn == 0)
		return 0;
	if (g->N == 0 || g->ovol == 0) {
		memset(a->dw, 0, P->es * (size_t)wn);
		return 0;
	}
	for (int64_t n0 = 0; n0 < g->N; n0 += P->L.nb)
		for (int64_t r0 = 0; r0 < P->L.R; r0 += P->L.rt) {
			chunk_t c = chunk_at(P, n0, r0);

			for (int64_t grp = 0; grp < g->G; grp++) {
				i2c_t t = plan_i2c(P, &c, grp);
				pack_t p = plan_pack(P, false, a->dy, &c, grp);

				im2col(&t, c.nbc);
				pack(&p);
				if (gemm(P->ct, g->Og, K, c.nbc * c.len, n0 || r0 ? 1 : 0, P->buf, c.nbc * c.len, 1, P->col, 1,
					 c.nbc * c.len, dst + P->cs * (size_t)(grp * g->Og * K), K))
					return -1;
			}
		}
	if (P->wacc)
		run_store(P->ct, a->dw, P->dt, P->wacc, wn);
	return 0;
}

/* db[o] = sum over n, q of dy[n, o, q]: f64 (int64) sums. */
typedef struct {
	const nk_conv_args_t *a;
	const geo_t *g;
} bias_t;

static void bias_units(void *ctx, int64_t lo, int64_t hi)
{
	const bias_t *t = ctx;
	const geo_t *g = t->g;
	int dt = t->a->dtype, ct = nk_is_int(dt) ? NK_I64 : NK_F64;
	size_t es = nk_dtype_size(dt);
	union { double f[CH]; int64_t i[CH]; } buf;

	for (int64_t o = lo; o < hi; o++) {
		double sf = 0;
		uint64_t si = 0;

		for (int64_t n = 0; n < g->N; n++)
			for (int64_t q0 = 0; q0 < g->ovol; q0 += CH) {
				int64_t m = nk_min64(CH, g->ovol - q0);

				run_load(ct, &buf, (const char *)t->a->dy + es * (size_t)((n * g->O + o) * g->ovol + q0),
					 (int64_t)es, dt, m);
				for (int64_t i = 0; i < m; i++) {
					if (ct == NK_F64)
						sf += buf.f[i];
					else
						si += (uint64_t)buf.i[i];
				}
			}
		if (ct == NK_F64)
			nk_store_f64((char *)t->a->db + es * (size_t)o, dt, sf);
		else
			nk_store_i64((char *)t->a->db + es * (size_t)o, dt, (int64_t)si);
	}
}

static int conv_bias(const nk_conv_args_t *a, const geo_t *g)
{
	bias_t t = { a, g };

	nrt_parallel_for(g->O, max64(1, NK_PARALLEL_GRAIN / max64(1, g->N * g->ovol)), bias_units, &t);
	return 0;
}

int nk_conv_run(void *args)
{
	const nk_conv_args_t *a = args;
	geo_t g;
	layout_t L;
	size_t need;
	plan_t P;

	if (conv_check(a, &g))
		return -1;
	if (nk_using_reference())
		return nk_conv_ref(args);
	if (a->mode == NK_CONV_BWD_BIAS)
		return conv_bias(a, &g);
	need = conv_ws(a, &g, &L);
	if (need && (!a->work || a->work_bytes < need)) {
		nrt_kernel_fail("conv: workspace of %zu bytes given, %zu needed", a->work ? a->work_bytes : 0, need);
		return -1;
	}
	if (a->mode == NK_CONV_FWD && (g.N == 0 || g.O == 0 || g.ovol == 0))
		return 0;
	if (a->mode == NK_CONV_BWD_DATA && (g.N == 0 || g.C == 0 || g.ivol == 0))
		return 0;
	if (a->dtype == NK_F32 && nk_family_avx512(NK_FAM_CONV)) { /* [h-cnn] implicit GEMM (conv_avx512.c) */
		int r = a->mode == NK_CONV_BWD_WEIGHT ? nk_conv_bwd_weight_f32_avx512(a) : nk_conv_implicit_f32_avx512(a);

		if (r)
			return r < 0 ? -1 : 0;
	}
	plan_init(&P, a, &g, &L);
	if (a->mode == NK_CONV_FWD)
		return conv_fwd(&P);
	if (a->mode == NK_CONV_BWD_DATA)
		return conv_bwd_data(&P);
	return conv_bwd_weight(&P);
}

/* ---- reference: one output element at a time ------------------------------------------------------ */
typedef struct {
	const nk_conv_args_t *a;
	const geo_t *g;
} ref_t;

/* Splits a flat spatial index into (d, h, w). */
static void split3(const int64_t *sz, int64_t q, int64_t *v)
{
	v[2] = q % sz[2];
	v[1] = q / sz[2] % sz[1];
	v[0] = q / (sz[1] * sz[2]);
}

/* The input position of output position oq through kernel offset j; false if outside (then *iq unset). */
static bool tap(const geo_t *g, const int64_t *oq, const int64_t *j, int64_t *iq)
{
	int64_t flat = 0;

	for (int i = 0; i < 3; i++) {
		int64_t x = oq[i] * g->s[i] - g->p[i] + j[i] * g->d[i];

		if (x < 0 || x >= g->in[i])
			return false;
		flat = flat * g->in[i] + x;
	}
	*iq = flat;
	return true;
}

/* The output position that reaches input position iv through kernel offset j; false if none. */
static bool untap(const geo_t *g, const int64_t *iv, const int64_t *j, int64_t *oq)
{
	int64_t flat = 0;

	for (int i = 0; i < 3; i++) {
		int64_t t = iv[i] + g->p[i] - j[i] * g->d[i];

		if (t < 0 || t % g->s[i] || t / g->s[i] >= g->out[i])
			return false;
		flat = flat * g->out[i] + t / g->s[i];
	}
	*oq = flat;
	return true;
}

/* Accumulator of one element: f64 for floats, wrapping int64 for integers. */
typedef struct {
	bool isint;
	double f;
	uint64_t i;
} acc_t;

static void acc_mul(acc_t *s, const char *p, int64_t pi, const char *q, int64_t qi, int dt)
{
	size_t es = nk_dtype_size(dt);

	if (s->isint)
		s->i += (uint64_t)nk_load_i64(p + es * (size_t)pi, dt) * (uint64_t)nk_load_i64(q + es * (size_t)qi, dt);
	else
		s->f += nk_load_f64(p + es * (size_t)pi, dt) * nk_load_f64(q + es * (size_t)qi, dt);
}

static void acc_put(const acc_t *s, void *base, int64_t i, int dt)
{
	char *p = (char *)base + nk_dtype_size(dt) * (size_t)i;

	if (s->isint)
		nk_store_i64(p, dt, (int64_t)s->i);
	else
		nk_store_f64(p, dt, s->f);
}

static acc_t acc_start(const void *bias, int64_t i, int dt)
{
	acc_t s = { nk_is_int(dt), 0, 0 };
	const char *p = (const char *)bias + nk_dtype_size(dt) * (size_t)i;

	if (bias && s.isint)
		s.i = (uint64_t)nk_load_i64(p, dt);
	else if (bias)
		s.f = nk_load_f64(p, dt);
	return s;
}

static void ref_units(void *ctx, int64_t lo, int64_t hi)
{
	const ref_t *t = ctx;
	const nk_conv_args_t *a = t->a;
	const geo_t *g = t->g;
	int dt = a->dtype;
	int64_t K = g->Cg * g->kvol, v[3], j[3], iq;

	for (int64_t u = lo; u < hi; u++) {
		if (a->mode == NK_CONV_FWD) { /* u = (n, o, q) */
			int64_t q = u % g->ovol, o = u / g->ovol % g->O, n = u / (g->ovol * g->O), grp = o / g->Og;
			acc_t s = acc_start(a->b, o, dt);

			split3(g->out, q, v);
			for (int64_t c = 0; c < g->Cg; c++)
				for (int64_t jj = 0; jj < g->kvol; jj++) {
					split3(g->k, jj, j);
					if (tap(g, v, j, &iq))
						acc_mul(&s, a->x, (n * g->C + grp * g->Cg + c) * g->ivol + iq, a->w,
							o * K + c * g->kvol + jj, dt);
				}
			acc_put(&s, a->y, u, dt);
		} else if (a->mode == NK_CONV_BWD_DATA) { /* u = (n, c, i) */
			int64_t i = u % g->ivol, c = u / g->ivol % g->C, n = u / (g->ivol * g->C), grp = c / g->Cg;
			acc_t s = acc_start(a->b, c, dt);

			split3(g->in, i, v);
			for (int64_t jj = 0; jj < g->kvol; jj++) {
				int64_t q;

				split3(g->k, jj, j);
				if (!untap(g, v, j, &q))
					continue;
				for (int64_t o = grp * g->Og; o < (grp + 1) * g->Og; o++)
					acc_mul(&s, a->dy, (n * g->O + o) * g->ovol + q, a->w,
						o * K + (c - grp * g->Cg) * g->kvol + jj, dt);
			}
			acc_put(&s, a->dx, u, dt);
		} else if (a->mode == NK_CONV_BWD_WEIGHT) { /* u = (o, c, j) */
			int64_t jj = u % g->kvol, c = u / g->kvol % g->Cg, o = u / K, grp = o / g->Og;
			acc_t s = acc_start(NULL, 0, dt);

			split3(g->k, jj, j);
			for (int64_t n = 0; n < g->N; n++)
				for (int64_t q = 0; q < g->ovol; q++) {
					split3(g->out, q, v);
					if (tap(g, v, j, &iq))
						acc_mul(&s, a->dy, (n * g->O + o) * g->ovol + q, a->x,
							(n * g->C + grp * g->Cg + c) * g->ivol + iq, dt);
				}
			acc_put(&s, a->dw, u, dt);
		} else { /* u = o */
			acc_t s = acc_start(NULL, 0, dt);
			size_t es = nk_dtype_size(dt);

			for (int64_t n = 0; n < g->N; n++)
				for (int64_t q = 0; q < g->ovol; q++) {
					const char *p = (const char *)a->dy + es * (size_t)((n * g->O + u) * g->ovol + q);

					if (s.isint)
						s.i += (uint64_t)nk_load_i64(p, dt);
					else
						s.f += nk_load_f64(p, dt);
				}
			acc_put(&s, a->db, u, dt);
		}
	}
}

int nk_conv_ref(void *args)
{
	const nk_conv_args_t *a = args;
	geo_t g;
	ref_t t = { a, &g };
	int64_t n;

	if (conv_check(a, &g))
		return -1;
	n = a->mode == NK_CONV_FWD ? g.N * g.O * g.ovol : a->mode == NK_CONV_BWD_DATA ? g.N * g.C * g.ivol :
	    a->mode == NK_CONV_BWD_WEIGHT ? g.O * g.Cg * g.kvol : g.O;
	nrt_parallel_for(n, 64, ref_units, &t);
	return 0;
}

/* ---- ATen im2col / col2im ------------------------------------------------------------------------- */
static int im2col_check(const nk_im2col_args_t *a, geo_t *g)
{
	if (!nk_dtype_valid(a->dtype)) {
		nrt_kernel_fail("im2col: bad dtype %d", a->dtype);
		return -1;
	}
	if (geo_init(g, a->nsp, a->N, a->C, a->C, 1, a->in, a->out, a->k, a->stride, a->pad, a->dil,
		     a->col2im ? "col2im" : "im2col"))
		return -1;
	if (!a->src || !a->dst) {
		nrt_kernel_fail("%s: missing tensor", a->col2im ? "col2im" : "im2col");
		return -1;
	}
	return 0;
}

int nk_im2col_run(void *args)
{
	const nk_im2col_args_t *a = args;
	geo_t g;
	size_t es = nk_dtype_size(a->dtype);

	if (im2col_check(a, &g))
		return -1;
	if (nk_using_reference())
		return nk_im2col_ref(args);
	if (!a->col2im) {
		i2c_t t = { .g = &g, .dt = a->dtype, .ct = a->dtype, .x = a->src, .xns = (int64_t)es * g.C * g.ivol,
			    .col = a->dst, .rs = g.ovol, .ns = g.C * g.kvol * g.ovol, .rows = g.C * g.kvol,
			    .r0 = 0, .r1 = g.out[0] * g.out[1] };

		im2col(&t, g.N);
	} else {
		c2i_t t = { .g = &g, .dt = a->dtype, .ct = ctype_of(a->dtype), .cdt = a->dtype, .col = a->src,
			    .rs = g.ovol, .ns = g.C * g.kvol * g.ovol, .x = a->dst, .xns = (int64_t)es * g.C * g.ivol,
			    .chans = g.C, .r0 = 0, .r1 = g.out[0] * g.out[1] };

		col2im(&t, g.N);
	}
	return 0;
}

typedef struct {
	const nk_im2col_args_t *a;
	const geo_t *g;
} i2c_ref_t;

static void i2c_ref_units(void *ctx, int64_t lo, int64_t hi)
{
	const i2c_ref_t *t = ctx;
	const nk_im2col_args_t *a = t->a;
	const geo_t *g = t->g;
	int dt = a->dtype;
	size_t es = nk_dtype_size(dt);
	int64_t v[3], j[3], iq;

	for (int64_t u = lo; u < hi; u++) {
		if (!a->col2im) { /* u = (n, c*kvol + j, q) */
			int64_t q = u % g->ovol, r = u / g->ovol % (g->C * g->kvol), n = u / (g->ovol * g->C * g->kvol);
			char *d = (char *)a->dst + es * (size_t)u;

			split3(g->out, q, v);
			split3(g->k, r % g->kvol, j);
			if (tap(g, v, j, &iq))
				memcpy(d, (const char *)a->src + es * (size_t)((n * g->C + r / g->kvol) * g->ivol + iq), es);
			else
				memset(d, 0, es);
		} else { /* u = (n, c, i) */
			int64_t i = u % g->ivol, c = u / g->ivol % g->C, n = u / (g->ivol * g->C);
			acc_t s = acc_start(NULL, 0, dt);

			split3(g->in, i, v);
			for (int64_t jj = 0; jj < g->kvol; jj++) {
				const char *p;
				int64_t q;

				split3(g->k, jj, j);
				if (!untap(g, v, j, &q))
					continue;
				p = (const char *)a->src + es * (size_t)(((n * g->C + c) * g->kvol + jj) * g->ovol + q);
				if (s.isint)
					s.i += (uint64_t)nk_load_i64(p, dt);
				else
					s.f += nk_load_f64(p, dt);
			}
			acc_put(&s, a->dst, u, dt);
		}
	}
}

int nk_im2col_ref(void *args)
{
	const nk_im2col_args_t *a = args;
	geo_t g;
	i2c_ref_t t = { a, &g };

	if (im2col_check(a, &g))
		return -1;
	nrt_parallel_for(a->col2im ? g.N * g.C * g.ivol : g.N * g.C * g.kvol * g.ovol, 256, i2c_ref_units, &t);
	return 0;
}
