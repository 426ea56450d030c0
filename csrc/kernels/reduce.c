/* reduce.c - reductions over a contiguous [O, R, I] tensor into a contiguous [O, I] output.
 *
 * Accumulation: floating inputs (and every op that needs real arithmetic: mean, norm, var/std,
 * logsumexp) accumulate in double, so f32/bf16/f16 sums are at least as accurate as PyTorch's float
 * cascade sums and f64 keeps full width; integer and bool inputs accumulate sum/prod/extrema in int64
 * (wrapping).  max/min/amax/amin propagate NaN; argmax/argmin and the indices of max/min pick the first
 * occurrence, a NaN counting as the extreme.  var/std are two-pass (mean, then squared deviations)
 * and combine chunks with Chan's formula; logsumexp shifts by the max (an infinite max shifts by 0,
 * as PyTorch).  R == 0: sum 0, prod 1, mean/var/std NaN, any false, all true, logsumexp -inf, norm 0
 * for p in [0, inf); amax, amin, max, min, argmax, argmin and norm with p < 0 or p = inf fail.
 *
 * Shapes of work (nk_reduce_run):
 *  - I == 1 (row reductions): each output walks its contiguous row in blocks of RD_BLK, converted to a
 *    dense double/int64 buffer and reduced with several independent accumulators;
 *  - I > 1 (column reductions): a tile of up to RD_W columns keeps one accumulator per column and adds
 *    whole rows (dense, vectorizable) - no strided gather per element;
 *  - f32/bf16 column sums and means of wide rows (at least RD_WIDE_MIN columns, e.g. the bias gradient
 *    dY.sum(0) of a [2048, 1536] dY, when their partial sums fit RD_WIDE_PARTS): R is cut into at most
 *    RD_WIDE_CHUNKS chunks of at least RD_WIDE_ROWS rows, each chunk reads its
 *    rows front to back, one after the other (one sequential stream per thread: the column tiles read
 *    512 bytes of each row, each on another page, 15-22 GB/s from DRAM against 29-35 this way; the GPT
 *    step's bias gradients 4.6-7.8 -> 4.0-4.6 ms), summing blocks of 8 rows in f32 (the tiles' block
 *    sums, bit for bit) into a double per column; the chunks are added in order;
 *  - few outputs and a long R: R is cut into chunks (the chunk count depends only on the shape, so
 *    results do not depend on the thread count), chunks reduce in parallel into partial states that
 *    are combined in order.  Otherwise outputs/tiles are split over the pool.
 * On AVX-512 CPUs dense f32 rows (sum, mean, var/std, 2-norm, extrema, arg-extrema), bf16/f64 row
 * sums and f32/bf16 column sums use the loops of reduce_avx512.c (four accumulators for sums; column
 * sums add blocks of 8 rows in f32 before widening; so the rounding differs slightly from the
 * sequential reference).
 * nk_reduce_ref: one output at a time, one element at a time, same formulas.
 */
#include <stdatomic.h>

#include "nk_dispatch_impl.h"
#include "nk_impl.h"
#include "nk_workspace.h"
#include "nrt.h"

NK_VECTORIZE_FILE

#define RD_BLK 256      /* elements per converted block */
#define RD_W 128        /* columns per tile */
#define RD_PARTS 512    /* partial states kept for chunked R (outputs * chunks) */
#define RD_CHUNK 8192   /* minimum rows per R chunk */
#define RD_DRAM_MIN ((int64_t)16 << 20) /* inputs this large (bytes) are read from DRAM, not cache */
#define RD_WIDE_MIN 256 /* wide column sums: at least this many columns ... */
#define RD_WIDE_COLS 2048 /* columns per pass of the sequential column sum (its f32 block sums: 8 KiB) */
#define RD_WIDE_ROWS 256 /* ... and rows per chunk at least (a multiple of the 8-row f32 blocks) */
#define RD_WIDE_CHUNKS 64 /* chunks of R at most */
#define RD_WIDE_PARTS ((size_t)8 << 20) /* bytes of partial sums at most (else the column tiles) */

enum { RK_F, RK_I }; /* accumulate in double / int64 */

typedef struct {
	const nk_reduce_args_t *a;
	int op, kind;
	int64_t O, R, I;
	int64_t esz;
	double p;        /* norm order */
	bool avx512;     /* dense f32/bf16 helpers of reduce_avx512.c may be used */
	bool avx2;       /* dense f32 helpers of reduce_avx2.c may be used (the avx2 level) */
	bool dram;       /* input of RD_DRAM_MIN bytes or more: the DRAM-streaming f32 loops */
} rd_ctx_t;

/* Partial state of one output (a column of a tile, or one chunk's share of an output). */
typedef struct {
	double d, d2;    /* sum/prod/extremum/mean(var)/shift(lse) ; M2(var)/sum-exp(lse) */
	int64_t iv, idx; /* integer value or count (var) ; arg index, -1 = none yet */
} rd_acc_t;

/* A tile: the states of up to RD_W columns, struct of arrays so column loops vectorize. */
typedef struct {
	double d[RD_W], d2[RD_W];
	int64_t iv[RD_W], idx[RD_W];
} rd_tile_t;

static const char *const red_names[NK_RED_COUNT] = {
	"sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "any", "all", "norm",
	"var", "std", "logsumexp",
};

static bool rd_is_arg(int op)
{
	return op == NK_RED_MAX || op == NK_RED_MIN || op == NK_RED_ARGMAX || op == NK_RED_ARGMIN;
}

static bool rd_is_maxlike(int op)
{
	return op == NK_RED_AMAX || op == NK_RED_MAX || op == NK_RED_ARGMAX;
}

static int rd_kind(int op, int dtype_in)
{
	if (!nk_is_int(dtype_in))
		return RK_F;
	switch (op) {
	case NK_RED_SUM: case NK_RED_PROD: case NK_RED_AMAX: case NK_RED_AMIN: case NK_RED_MAX:
	case NK_RED_MIN: case NK_RED_ARGMAX: case NK_RED_ARGMIN: case NK_RED_ANY: case NK_RED_ALL:
		return RK_I;
	default:
		return RK_F;
	}
}

/* ---- scalar state updates (shared by the reference and the sequential parts of the run) ----------- */
static inline bool rd_better_f(int op, double v, double cur, int64_t idx)
{
	if (idx < 0)
		return true;
	if (v != v)
		return cur == cur; /* the first NaN wins */
	return rd_is_maxlike(op) ? v > cur : v < cur;
}

static inline bool rd_better_i(int op, int64_t v, int64_t cur, int64_t idx)
{
	return idx < 0 || (rd_is_maxlike(op) ? v > cur : v < cur);
}

/* NaN-propagating max/min (amax, inf-norm). */
static inline double rd_nanmax(double a, double b)
{
	return (b > a || b != b) ? b : a;
}

static inline double rd_nanmin(double a, double b)
{
	return (b < a || b != b) ? b : a;
}

static void rd_init(const rd_ctx_t *c, rd_acc_t *s)
{
	s->d = 0;
	s->d2 = 0;
	s->iv = 0;
	s->idx = -1;
	switch (c->op) {
	case NK_RED_PROD: s->d = 1; s->iv = 1; break;
	case NK_RED_AMAX: s->d = -INFINITY; s->iv = INT64_MIN; break;
	case NK_RED_AMIN: s->d = INFINITY; s->iv = INT64_MAX; break;
	case NK_RED_ALL: s->iv = 1; break;
	case NK_RED_NORM: s->d = c->p == -INFINITY ? INFINITY : 0; break;
	default: break;
	}
}

/* Adds one element (double) to a state: everything except the two-pass var/std and logsumexp. */
static inline void rd_add_f(const rd_ctx_t *c, rd_acc_t *s, double v, int64_t r)
{
	switch (c->op) {
	case NK_RED_SUM: case NK_RED_MEAN: s->d += v; break;
	case NK_RED_PROD: s->d *= v; break;
	case NK_RED_AMAX: s->d = rd_nanmax(s->d, v); break;
	case NK_RED_AMIN: s->d = rd_nanmin(s->d, v); break;
	case NK_RED_ANY: s->iv |= v != 0; break;
	case NK_RED_ALL: s->iv &= v != 0; break;
	case NK_RED_NORM: {
		double av = fabs(v), p = c->p;
		if (p == 2) s->d += av * av;
		else if (p == 1) s->d += av;
		else if (p == 0) s->d += av != 0;
		else if (p == INFINITY) s->d = rd_nanmax(s->d, av);
		else if (p == -INFINITY) s->d = rd_nanmin(s->d, av);
		else s->d += pow(av, p);
		break;
	}
	default: /* max/min/argmax/argmin */
		if (rd_better_f(c->op, v, s->d, s->idx)) {
			s->d = v;
			s->idx = r;
		}
		break;
	}
}

static inline void rd_add_i(const rd_ctx_t *c, rd_acc_t *s, int64_t v, int64_t r)
{
	switch (c->op) {
	case NK_RED_SUM: s->iv = (int64_t)((uint64_t)s->iv + (uint64_t)v); break;
	case NK_RED_PROD: s->iv = (int64_t)((uint64_t)s->iv * (uint64_t)v); break;
	case NK_RED_AMAX: s->iv = v > s->iv ? v : s->iv; break;
	case NK_RED_AMIN: s->iv = v < s->iv ? v : s->iv; break;
	case NK_RED_ANY: s->iv |= v != 0; break;
	case NK_RED_ALL: s->iv &= v != 0; break;
	default:
		if (rd_better_i(c->op, v, s->iv, s->idx)) {
			s->iv = v;
			s->idx = r;
		}
		break;
	}
}

/* b follows a in R: a := a (+) b. */
static void rd_combine(const rd_ctx_t *c, rd_acc_t *a, const rd_acc_t *b)
{
	if (c->op == NK_RED_VAR || c->op == NK_RED_STD) {
		int64_t n = a->iv + b->iv;
		if (b->iv == 0)
			return;
		if (a->iv == 0) {
			*a = *b;
			return;
		}
		double delta = b->d - a->d;
		a->d2 = a->d2 + b->d2 + delta * delta * ((double)a->iv * (double)b->iv / (double)n);
		a->d = a->d + delta * ((double)b->iv / (double)n);
		a->iv = n;
		return;
	}
	if (c->op == NK_RED_LOGSUMEXP) {
		double m = rd_nanmax(a->d, b->d);
		a->d2 = a->d2 * exp(a->d - m) + b->d2 * exp(b->d - m);
		a->d = m;
		return;
	}
	if (rd_is_arg(c->op)) {
		if (b->idx < 0)
			return;
		bool take = c->kind == RK_F ? rd_better_f(c->op, b->d, a->d, a->idx)
					    : rd_better_i(c->op, b->iv, a->iv, a->idx);
		if (take)
			*a = *b;
		return;
	}
	if (c->kind == RK_I) {
		rd_add_i(c, a, b->iv, 0);
		return;
	}
	switch (c->op) {
	case NK_RED_SUM: case NK_RED_MEAN: a->d += b->d; break;
	case NK_RED_PROD: a->d *= b->d; break;
	case NK_RED_AMAX: a->d = rd_nanmax(a->d, b->d); break;
	case NK_RED_AMIN: a->d = rd_nanmin(a->d, b->d); break;
	case NK_RED_ANY: a->iv |= b->iv; break;
	case NK_RED_ALL: a->iv &= b->iv; break;
	case NK_RED_NORM:
		if (c->p == INFINITY) a->d = rd_nanmax(a->d, b->d);
		else if (c->p == -INFINITY) a->d = rd_nanmin(a->d, b->d);
		else a->d += b->d;
		break;
	default: break;
	}
}

/* Writes output j (index into the [O, I] output) from its final state. */
static void rd_finish(const rd_ctx_t *c, const rd_acc_t *s, int64_t j)
{
	const nk_reduce_args_t *a = c->a;
	char *out = (char *)a->out + j * (int64_t)nk_dtype_size(a->dtype_out);
	double R = (double)c->R;
	switch (c->op) {
	case NK_RED_ARGMAX: case NK_RED_ARGMIN:
		((int64_t *)a->out)[j] = s->idx;
		return;
	case NK_RED_MAX: case NK_RED_MIN:
		if (c->kind == RK_I) nk_store_i64(out, a->dtype_out, s->iv);
		else nk_store_f64(out, a->dtype_out, s->d);
		if (a->out2)
			((int64_t *)a->out2)[j] = s->idx;
		return;
	case NK_RED_ANY: case NK_RED_ALL:
		nk_store_i64(out, a->dtype_out, s->iv != 0);
		return;
	case NK_RED_MEAN:
		nk_store_f64(out, a->dtype_out, s->d / R);
		return;
	case NK_RED_NORM: {
		double v = s->d;
		if (c->p == 2) v = sqrt(v);
		else if (c->p != 0 && c->p != 1 && !isinf(c->p)) v = pow(v, 1.0 / c->p);
		nk_store_f64(out, a->dtype_out, v);
		return;
	}
	case NK_RED_VAR: case NK_RED_STD: {
		double div = (double)s->iv - a->a;
		double var = s->d2 / (div > 0 ? div : 0);
		nk_store_f64(out, a->dtype_out, c->op == NK_RED_STD ? sqrt(var) : var);
		if (a->out2)
			nk_store_f64((char *)a->out2 + j * (int64_t)nk_dtype_size(a->dtype_out), a->dtype_out,
				     s->iv ? s->d : NAN);
		return;
	}
	case NK_RED_LOGSUMEXP:
		nk_store_f64(out, a->dtype_out, log(s->d2) + s->d);
		return;
	default: /* sum, prod, amax, amin */
		if (c->kind == RK_I) nk_store_i64(out, a->dtype_out, s->iv);
		else nk_store_f64(out, a->dtype_out, s->d);
		return;
	}
}

/* ---- checks --------------------------------------------------------------------------------------- */
static int rd_prepare(rd_ctx_t *c, const nk_reduce_args_t *a)
{
	memset(c, 0, sizeof *c);
	c->a = a;
	c->op = a->op;
	c->O = a->O;
	c->R = a->R;
	c->I = a->I;
	c->p = a->a;
	if (a->op < 0 || a->op >= NK_RED_COUNT) {
		nrt_kernel_fail("nk_reduce: unknown op %d", a->op);
		return -1;
	}
	const char *name = red_names[a->op];
	if (!nk_dtype_valid(a->dtype_in) || !nk_dtype_valid(a->dtype_out)) {
		nrt_kernel_fail("nk_reduce: %s with invalid dtype (in %d, out %d)", name, a->dtype_in,
				a->dtype_out);
		return -1;
	}
	if (a->O < 0 || a->R < 0 || a->I < 0) {
		nrt_kernel_fail("nk_reduce: %s with negative shape [%lld, %lld, %lld]", name,
				(long long)a->O, (long long)a->R, (long long)a->I);
		return -1;
	}
	c->kind = rd_kind(a->op, a->dtype_in);
	c->esz = (int64_t)nk_dtype_size(a->dtype_in);
	c->avx512 = nk_family_avx512(NK_FAM_REDUCE);
	c->avx2 = nk_family_avx2(NK_FAM_REDUCE);
	c->dram = a->O * a->R * a->I * c->esz >= RD_DRAM_MIN;
	if (a->O * a->I == 0)
		return 0;
	bool no_identity = (a->op >= NK_RED_AMAX && a->op <= NK_RED_ARGMIN) ||
			   (a->op == NK_RED_NORM && (a->a < 0 || a->a == INFINITY));
	if (a->R == 0 && no_identity) {
		if (a->op == NK_RED_NORM)
			nrt_kernel_fail("nk_reduce: cannot compute the %g norm on an empty tensor because the "
					"operation does not have an identity", a->a);
		else
			nrt_kernel_fail("nk_reduce: cannot perform reduction function %s on a tensor with no "
					"elements because the operation does not have an identity", name);
		return -1;
	}
	return 0;
}

/* ---- reference ------------------------------------------------------------------------------------ */
int nk_reduce_ref(void *args)
{
	const nk_reduce_args_t *a = args;
	rd_ctx_t c;
	if (rd_prepare(&c, a))
		return -1;
	for (int64_t o = 0; o < a->O; o++) {
		for (int64_t i = 0; i < a->I; i++) {
			const char *x = (const char *)a->in + (o * a->R * a->I + i) * c.esz;
			int64_t st = a->I * c.esz;
			rd_acc_t s;
			rd_init(&c, &s);
			if (c.op == NK_RED_VAR || c.op == NK_RED_STD) {
				double sum = 0, m2 = 0;
				for (int64_t r = 0; r < a->R; r++) sum += nk_load_f64(x + r * st, a->dtype_in);
				double mean = sum / (double)a->R;
				for (int64_t r = 0; r < a->R; r++) {
					double dv = nk_load_f64(x + r * st, a->dtype_in) - mean;
					m2 += dv * dv;
				}
				s.d = mean;
				s.d2 = m2;
				s.iv = a->R;
			} else if (c.op == NK_RED_LOGSUMEXP) {
				double m = -INFINITY, se = 0;
				for (int64_t r = 0; r < a->R; r++) m = rd_nanmax(m, nk_load_f64(x + r * st, a->dtype_in));
				if (isinf(m)) m = 0;
				for (int64_t r = 0; r < a->R; r++) se += exp(nk_load_f64(x + r * st, a->dtype_in) - m);
				s.d = m;
				s.d2 = se;
			} else if (c.kind == RK_I) {
				for (int64_t r = 0; r < a->R; r++) rd_add_i(&c, &s, nk_load_i64(x + r * st, a->dtype_in), r);
			} else {
				for (int64_t r = 0; r < a->R; r++) rd_add_f(&c, &s, nk_load_f64(x + r * st, a->dtype_in), r);
			}
			rd_finish(&c, &s, o * a->I + i);
		}
	}
	return 0;
}

/* ---- optimized: row mode (I == 1) ------------------------------------------------------------------- */
/* Sum of a dense block with 8 independent accumulators (vectorizable without reassociating). */
static double rd_sum_blk(const double *b, int64_t m)
{
	double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int64_t j = 0;
	for (; j + 8 <= m; j += 8)
		for (int k = 0; k < 8; k++) s[k] += b[j + k];
	for (; j < m; j++) s[0] += b[j];
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static double rd_sumsq_blk(const double *b, int64_t m, double shift)
{
	double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int64_t j = 0;
	for (; j + 8 <= m; j += 8)
		for (int k = 0; k < 8; k++) s[k] += (b[j + k] - shift) * (b[j + k] - shift);
	for (; j < m; j++) s[0] += (b[j] - shift) * (b[j] - shift);
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* AVX-512 row: the common float cases in one pass over the dense row; false if not handled. */
static bool rd_row_avx512(const rd_ctx_t *c, rd_acc_t *s, const char *x, int64_t r0, int64_t r1)
{
	int dt = c->a->dtype_in, op = c->op;
	int64_t n = r1 - r0;
	const char *p = x + r0 * c->esz;
	if (!c->avx512 || n <= 0)
		return false;
	bool f32 = dt == NK_F32;
	if (op == NK_RED_SUM || op == NK_RED_MEAN) {
		if (f32) s->d = c->dram ? nk_rd_sum_f32_dram_avx512((const float *)p, n) : nk_rd_sum_f32_avx512((const float *)p, n);
		else if (dt == NK_BF16) s->d = nk_rd_sum_bf16_avx512((const uint16_t *)p, n);
		else if (dt == NK_F64) s->d = nk_rd_sum_f64_avx512((const double *)p, n);
		else return false;
		return true;
	}
	if (!f32)
		return false;
	switch (op) {
	case NK_RED_NORM:
		if (c->p != 2)
			return false;
		s->d = nk_rd_sumsq_f32_avx512((const float *)p, n, 0);
		return true;
	case NK_RED_VAR: case NK_RED_STD:
		s->d = nk_rd_sum_f32_avx512((const float *)p, n) / (double)n;
		s->d2 = nk_rd_sumsq_f32_avx512((const float *)p, n, s->d);
		s->iv = n;
		return true;
	case NK_RED_AMAX: case NK_RED_AMIN:
		s->d = c->dram ? nk_rd_extremum_f32_dram_avx512((const float *)p, n, op == NK_RED_AMAX)
			       : nk_rd_extremum_f32_avx512((const float *)p, n, op == NK_RED_AMAX);
		return true;
	case NK_RED_MAX: case NK_RED_MIN: case NK_RED_ARGMAX: case NK_RED_ARGMIN: {
		float v;
		s->idx = r0 + nk_rd_argext_f32_avx512((const float *)p, n, rd_is_maxlike(op), &v);
		s->d = v;
		return true;
	}
	default:
		return false;
	}
}

/* AVX2 row: dense f32 sums, norms, variances and extrema in one pass; false if not handled. */
static bool rd_row_avx2(const rd_ctx_t *c, rd_acc_t *s, const char *x, int64_t r0, int64_t r1)
{
	int64_t n = r1 - r0;
	const float *p = (const float *)(x + r0 * c->esz);

	if (!c->avx2 || n <= 0 || c->a->dtype_in != NK_F32)
		return false;
	switch (c->op) {
	case NK_RED_SUM: case NK_RED_MEAN:
		s->d = nk_rd_sum_f32_avx2(p, n);
		return true;
	case NK_RED_NORM:
		if (c->p != 2)
			return false;
		s->d = nk_rd_sumsq_f32_avx2(p, n, 0);
		return true;
	case NK_RED_VAR: case NK_RED_STD:
		s->d = nk_rd_sum_f32_avx2(p, n) / (double)n;
		s->d2 = nk_rd_sumsq_f32_avx2(p, n, s->d);
		s->iv = n;
		return true;
	case NK_RED_AMAX: case NK_RED_AMIN:
		s->d = nk_rd_extremum_f32_avx2(p, n, c->op == NK_RED_AMAX);
		return true;
	default:
		return false;
	}
}

/* Reduces the dense elements x[r0..r1) of one row into s, r = element index. */
static void rd_row(const rd_ctx_t *c, rd_acc_t *s, const char *x, int64_t r0, int64_t r1)
{
	_Alignas(64) char buf[RD_BLK * 8];
	double *bd = (double *)buf;
	int64_t *bi = (int64_t *)buf;
	int dt = c->a->dtype_in;
	int op = c->op;
	rd_init(c, s);
	if (rd_row_avx512(c, s, x, r0, r1) || rd_row_avx2(c, s, x, r0, r1))
		return;
	if (op == NK_RED_VAR || op == NK_RED_STD || op == NK_RED_LOGSUMEXP) {
		double sum = 0, m = -INFINITY, acc = 0;
		for (int64_t r = r0; r < r1; r += RD_BLK) { /* pass 1: sum or max */
			int64_t n = r1 - r < RD_BLK ? r1 - r : RD_BLK;
			nk_block_load_f64(bd, x + r * c->esz, c->esz, dt, n);
			if (op == NK_RED_LOGSUMEXP)
				for (int64_t j = 0; j < n; j++) m = rd_nanmax(m, bd[j]);
			else
				sum += rd_sum_blk(bd, n);
		}
		double shift = op == NK_RED_LOGSUMEXP ? (isinf(m) ? 0 : m) : sum / (double)(r1 - r0);
		for (int64_t r = r0; r < r1; r += RD_BLK) { /* pass 2 */
			int64_t n = r1 - r < RD_BLK ? r1 - r : RD_BLK;
			nk_block_load_f64(bd, x + r * c->esz, c->esz, dt, n);
			if (op == NK_RED_LOGSUMEXP)
				for (int64_t j = 0; j < n; j++) acc += exp(bd[j] - shift);
			else
				acc += rd_sumsq_blk(bd, n, shift);
		}
		s->d = shift;
		s->d2 = acc;
		s->iv = r1 - r0;
		return;
	}
	for (int64_t r = r0; r < r1; r += RD_BLK) {
		int64_t n = r1 - r < RD_BLK ? r1 - r : RD_BLK;
		if (c->kind == RK_I) {
			nk_block_load_i64(bi, x + r * c->esz, c->esz, dt, n);
			if (op == NK_RED_SUM) {
				uint64_t t = 0;
				for (int64_t j = 0; j < n; j++) t += (uint64_t)bi[j];
				s->iv = (int64_t)((uint64_t)s->iv + t);
			} else {
				for (int64_t j = 0; j < n; j++) rd_add_i(c, s, bi[j], r + j);
			}
			continue;
		}
		nk_block_load_f64(bd, x + r * c->esz, c->esz, dt, n);
		if (op == NK_RED_SUM || op == NK_RED_MEAN) {
			s->d += rd_sum_blk(bd, n);
		} else if (op == NK_RED_NORM && c->p == 2) {
			s->d += rd_sumsq_blk(bd, n, 0);
		} else if (op == NK_RED_AMAX || op == NK_RED_AMIN) {
			double m = s->d;
			bool nan = false;
			if (op == NK_RED_AMAX)
				for (int64_t j = 0; j < n; j++) { m = bd[j] > m ? bd[j] : m; nan |= bd[j] != bd[j]; }
			else
				for (int64_t j = 0; j < n; j++) { m = bd[j] < m ? bd[j] : m; nan |= bd[j] != bd[j]; }
			s->d = nan ? NAN : m;
			if (nan)
				return;
		} else {
			for (int64_t j = 0; j < n; j++) rd_add_f(c, s, bd[j], r + j);
		}
	}
}

/* ---- optimized: column mode (I > 1) ----------------------------------------------------------------- */
/* Column update of the tile with one dense row b[0..w) (row index r). */
static void rd_cols_add(const rd_ctx_t *c, rd_tile_t *t, const void *row, int w, int64_t r)
{
	const double *b = row;
	const int64_t *bi = row;
	switch (c->kind == RK_I ? -1 - c->op : c->op) {
	case NK_RED_SUM: case NK_RED_MEAN:
		for (int i = 0; i < w; i++) t->d[i] += b[i];
		return;
	case NK_RED_PROD:
		for (int i = 0; i < w; i++) t->d[i] *= b[i];
		return;
	case NK_RED_AMAX:
		for (int i = 0; i < w; i++) t->d[i] = rd_nanmax(t->d[i], b[i]);
		return;
	case NK_RED_AMIN:
		for (int i = 0; i < w; i++) t->d[i] = rd_nanmin(t->d[i], b[i]);
		return;
	case -1 - NK_RED_SUM:
		for (int i = 0; i < w; i++) t->iv[i] = (int64_t)((uint64_t)t->iv[i] + (uint64_t)bi[i]);
		return;
	case -1 - NK_RED_AMAX:
		for (int i = 0; i < w; i++) t->iv[i] = bi[i] > t->iv[i] ? bi[i] : t->iv[i];
		return;
	case -1 - NK_RED_AMIN:
		for (int i = 0; i < w; i++) t->iv[i] = bi[i] < t->iv[i] ? bi[i] : t->iv[i];
		return;
	default:
		break;
	}
	for (int i = 0; i < w; i++) {
		rd_acc_t s = {t->d[i], t->d2[i], t->iv[i], t->idx[i]};
		if (c->kind == RK_I)
			rd_add_i(c, &s, bi[i], r);
		else
			rd_add_f(c, &s, b[i], r);
		t->d[i] = s.d;
		t->iv[i] = s.iv;
		t->idx[i] = s.idx;
	}
}

/* Reduces rows [r0, r1) of columns [i0, i0 + w) of output row o into the tile. */
static void rd_cols(const rd_ctx_t *c, rd_tile_t *t, int64_t o, int64_t r0, int64_t r1, int64_t i0, int w)
{
	_Alignas(64) char buf[RD_W * 8];
	double *bd = (double *)buf;
	int dt = c->a->dtype_in;
	const char *base = (const char *)c->a->in + (o * c->R * c->I + i0) * c->esz;
	int64_t rs = c->I * c->esz;
	rd_acc_t s0;
	rd_init(c, &s0);
	for (int i = 0; i < w; i++) {
		t->d[i] = s0.d;
		t->d2[i] = s0.d2;
		t->iv[i] = s0.iv;
		t->idx[i] = s0.idx;
	}
	bool two_pass = c->op == NK_RED_VAR || c->op == NK_RED_STD || c->op == NK_RED_LOGSUMEXP;
	bool colsum = c->avx512 && (c->op == NK_RED_SUM || c->op == NK_RED_MEAN) &&
		      (dt == NK_F32 || dt == NK_BF16);
	if (colsum) {
		nk_rd_colsum_rows_avx512(t->d, base + r0 * rs, rs, r1 - r0, dt == NK_BF16, w);
		return;
	}
	if (!two_pass) {
		for (int64_t r = r0; r < r1; r++) {
			if (c->kind == RK_I)
				nk_block_load_i64((int64_t *)buf, base + r * rs, c->esz, dt, w);
			else
				nk_block_load_f64(bd, base + r * rs, c->esz, dt, w);
			rd_cols_add(c, t, buf, w, r);
		}
		return;
	}
	bool lse = c->op == NK_RED_LOGSUMEXP;
	if (lse)
		for (int i = 0; i < w; i++) t->d[i] = -INFINITY;
	for (int64_t r = r0; r < r1; r++) { /* pass 1: sums or maxima into d */
		nk_block_load_f64(bd, base + r * rs, c->esz, dt, w);
		if (lse)
			for (int i = 0; i < w; i++) t->d[i] = rd_nanmax(t->d[i], bd[i]);
		else
			for (int i = 0; i < w; i++) t->d[i] += bd[i];
	}
	for (int i = 0; i < w; i++) /* shift: the mean, or the max (0 when infinite) */
		t->d[i] = lse ? (isinf(t->d[i]) ? 0 : t->d[i]) : t->d[i] / (double)(r1 - r0);
	for (int64_t r = r0; r < r1; r++) { /* pass 2 */
		nk_block_load_f64(bd, base + r * rs, c->esz, dt, w);
		if (lse)
			for (int i = 0; i < w; i++) t->d2[i] += exp(bd[i] - t->d[i]);
		else
			for (int i = 0; i < w; i++) t->d2[i] += (bd[i] - t->d[i]) * (bd[i] - t->d[i]);
	}
	for (int i = 0; i < w; i++)
		t->iv[i] = r1 - r0;
}

static rd_acc_t rd_tile_get(const rd_tile_t *t, int i)
{
	rd_acc_t s = {t->d[i], t->d2[i], t->iv[i], t->idx[i]};
	return s;
}

/* ---- optimized: scheduling -------------------------------------------------------------------------- */
typedef struct {
	const rd_ctx_t *c;
	int64_t tw, ntiles_i;  /* tile width, tiles per output row (column mode) */
	int64_t nch, chunk;    /* R chunks and rows per chunk (chunked mode) */
	rd_acc_t *parts;       /* [nch][O*I] partial states (chunked mode) */
} rd_sched_t;

/* Task = output o (row mode) or tile (o, i-tile) (column mode), over all of R. */
static void rd_task_outputs(void *ctx, int64_t begin, int64_t end)
{
	const rd_sched_t *s = ctx;
	const rd_ctx_t *c = s->c;
	for (int64_t k = begin; k < end; k++) {
		if (c->I == 1) {
			rd_acc_t st;
			rd_row(c, &st, (const char *)c->a->in + k * c->R * c->esz, 0, c->R);
			rd_finish(c, &st, k);
			continue;
		}
		rd_tile_t t;
		int64_t o = k / s->ntiles_i, i0 = (k % s->ntiles_i) * s->tw;
		int w = (int)(c->I - i0 < s->tw ? c->I - i0 : s->tw);
		rd_cols(c, &t, o, 0, c->R, i0, w);
		for (int i = 0; i < w; i++) {
			rd_acc_t st = rd_tile_get(&t, i);
			rd_finish(c, &st, o * c->I + i0 + i);
		}
	}
}

/* Task = one R chunk for every output (few outputs: O*I <= RD_W). */
static void rd_task_chunks(void *ctx, int64_t begin, int64_t end)
{
	const rd_sched_t *s = ctx;
	const rd_ctx_t *c = s->c;
	int64_t nout = c->O * c->I;
	for (int64_t ch = begin; ch < end; ch++) {
		int64_t r0 = ch * s->chunk, r1 = r0 + s->chunk < c->R ? r0 + s->chunk : c->R;
		rd_acc_t *p = s->parts + ch * nout;
		for (int64_t o = 0; o < c->O; o++) {
			if (c->I == 1) {
				rd_row(c, &p[o], (const char *)c->a->in + o * c->R * c->esz, r0, r1);
				continue;
			}
			rd_tile_t t;
			rd_cols(c, &t, o, r0, r1, 0, (int)c->I);
			for (int i = 0; i < c->I; i++)
				p[o * c->I + i] = rd_tile_get(&t, i);
		}
	}
}

/* Wide column sums: task = (output row o, chunk of RD_WIDE_ROWS rows) into its own I doubles. */
typedef struct {
	const rd_ctx_t *c;
	int64_t nch, rows; /* chunks of R, rows per chunk */
	double *parts;     /* [O][nch][I] */
} rd_wide_t;

static void rd_task_wide(void *ctx, int64_t begin, int64_t end)
{
	const rd_wide_t *s = ctx;
	const rd_ctx_t *c = s->c;
	int64_t rs = c->I * c->esz;
	bool bf16 = c->a->dtype_in == NK_BF16;

	for (int64_t t = begin; t < end; t++) {
		int64_t o = t / s->nch, r0 = t % s->nch * s->rows;
		int64_t r1 = r0 + s->rows < c->R ? r0 + s->rows : c->R;
		const char *base = (const char *)c->a->in + o * c->R * rs;
		double *acc = s->parts + t * c->I;
		_Alignas(64) float tmp[RD_WIDE_COLS];

		memset(acc, 0, (size_t)c->I * sizeof(double));
		for (int64_t i0 = 0; i0 < c->I; i0 += RD_WIDE_COLS)
			nk_rd_colsum_seq_avx512(acc + i0, base + r0 * rs + i0 * c->esz, rs, r1 - r0, bf16,
						c->I - i0 < RD_WIDE_COLS ? c->I - i0 : RD_WIDE_COLS, tmp);
	}
}

/* Runs the wide column sum when it applies (returns 1; -1 when out of memory), else 0. */
static int rd_wide(const rd_ctx_t *c)
{
	const nk_reduce_args_t *a = c->a;
	/* chunks of at least RD_WIDE_ROWS rows, at most RD_WIDE_CHUNKS of them (a function of the shape) */
	int64_t rows = (a->R + RD_WIDE_CHUNKS - 1) / RD_WIDE_CHUNKS;
	rd_wide_t s = {.c = c, .rows = rows < RD_WIDE_ROWS ? RD_WIDE_ROWS : (rows + 7) / 8 * 8};

	s.nch = (a->R + s.rows - 1) / s.rows;
	if (!c->avx512 || (c->op != NK_RED_SUM && c->op != NK_RED_MEAN) ||
	    (a->dtype_in != NK_F32 && a->dtype_in != NK_BF16) || a->I < RD_WIDE_MIN || s.nch < 2 ||
	    (size_t)(a->O * s.nch * a->I) * sizeof(double) > RD_WIDE_PARTS)
		return 0;
	s.parts = nk_ws_get(NK_WS_PARTIALS, (size_t)(a->O * s.nch * a->I) * sizeof(double));
	if (!s.parts) {
		nrt_kernel_fail("reduce: out of host memory for %lld partial sums",
				(long long)(a->O * s.nch * a->I));
		return -1;
	}
	nrt_parallel_for(a->O * s.nch, 1, rd_task_wide, &s);
	for (int64_t o = 0; o < a->O; o++)
		for (int64_t i = 0; i < a->I; i++) {
			rd_acc_t st;

			rd_init(c, &st);
			for (int64_t ch = 0; ch < s.nch; ch++)
				st.d += s.parts[(o * s.nch + ch) * a->I + i];
			rd_finish(c, &st, o * a->I + i);
		}
	return 1;
}

int nk_reduce_run(void *args)
{
	if (nk_using_reference())
		return nk_reduce_ref(args);
	const nk_reduce_args_t *a = args;
	rd_ctx_t c;
	if (rd_prepare(&c, a))
		return -1;
	int64_t nout = a->O * a->I;
	if (nout == 0)
		return 0;
	rd_sched_t s = {.c = &c};
	int64_t work = nout * (a->R > 0 ? a->R : 1);
	int64_t nch = a->R / RD_CHUNK;
	if (nch > 64) nch = 64;
	if (nch > RD_PARTS / nout) nch = RD_PARTS / nout;
	if (work > NK_PARALLEL_GRAIN) {
		int rc = rd_wide(&c);

		if (rc)
			return rc < 0 ? -1 : 0;
	}
	if (nout <= RD_W && nch >= 2 && work > NK_PARALLEL_GRAIN) {
		rd_acc_t parts[RD_PARTS];
		s.chunk = (a->R + nch - 1) / nch;
		s.nch = (a->R + s.chunk - 1) / s.chunk;
		s.parts = parts;
		nrt_parallel_for(s.nch, 1, rd_task_chunks, &s);
		for (int64_t j = 0; j < nout; j++) {
			for (int64_t ch = 1; ch < s.nch; ch++)
				rd_combine(&c, &parts[j], &parts[ch * nout + j]);
			rd_finish(&c, &parts[j], j);
		}
		return 0;
	}
	/* tiles narrow enough that the pool gets work when O is small, never below 16 columns (the
	 * width changes no result: each column is reduced in the same order whatever its tile) */
	int64_t tw = a->I < RD_W ? a->I : RD_W;
	int64_t nthr = work > NK_PARALLEL_GRAIN ? nrt_num_threads() : 1;
	while (tw > 16 && a->O * ((a->I + tw - 1) / tw) < 2 * nthr)
		tw /= 2;
	s.tw = tw;
	s.ntiles_i = (a->I + tw - 1) / tw;
	int64_t ntasks = a->O * s.ntiles_i;
	int64_t per_task = work / ntasks;
	int64_t grain = per_task >= NK_PARALLEL_GRAIN ? 1 : NK_PARALLEL_GRAIN / (per_task + 1) + 1;
	if (work <= NK_PARALLEL_GRAIN)
		rd_task_outputs(&s, 0, ntasks);
	else
		nrt_parallel_for(ntasks, grain, rd_task_outputs, &s);
	return 0;
}
