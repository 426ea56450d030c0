/* index.c - gather and scatter along one dim, and nonzero: the kernels behind gather, scatter,
 * scatter_add, scatter_reduce, index_select, index_add, index_copy, index_fill, take and put_.
 *
 * One iteration space (shape, outermost first, element strides per operand).  At each point p the
 * index k = idx[p] selects the element x + sum_d p[d]*xs[d] + k*xk of the indexed operand x; the dense
 * operand y (or the scalar value) is read or written at p.  All indices are checked on the calling
 * thread before anything is written (a bad one fails the kernel with aten's message).
 * GATHER copies bytes; SCATTER copies bytes with colliding writes applied in iteration order;
 * SCATTER_ADD/MUL/AMAX/AMIN combine in the dtype's compute type (f32 for bf16/f16/f32, f64, int64
 * wrapping for integers, OR/AND for bool), rounding to the dtype after each update as aten's CPU
 * scatter does; AMAX/AMIN propagate NaN.
 * Threading: GATHER over points; scatters over lines of the collision dim `dim` (points that differ
 * only along it), each line in order, so results never depend on the thread count; dim < 0 (any two
 * points may collide, as in put_) runs serially.  nk_index_ref: one point at a time, serially.
 * nk_index_offsets_run: the element offsets sum_k idx_k[p]*stride_k of advanced indexing (x[i, j]),
 * every index checked (and wrapped from the end) against its dim first.
 * repeat_interleave (repeats only) and nonzero_static (the first `size` coordinates of nonzero, the rest
 * filled) close the file.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

#define IX_GRAIN 16384

static int64_t ix_load_idx(const void *p, int dt)
{
	return dt == NK_I64 ? *(const int64_t *)p : (int64_t)*(const int32_t *)p;
}

static int64_t ix_numel(const nk_index_args_t *a)
{
	int64_t n = 1;
	for (int d = 0; d < a->ndim; d++)
		n *= a->shape[d];
	return n;
}

/* Element offsets of point `lin` (row-major over shape) for x (without the index), y and idx. */
static void ix_offsets(const nk_index_args_t *a, int64_t lin, int64_t *ox, int64_t *oy, int64_t *oi)
{
	int64_t x = 0, y = 0, i = 0;
	for (int d = a->ndim - 1; d >= 0; d--) {
		int64_t n = a->shape[d], c = n ? lin % n : 0;
		lin = n ? lin / n : 0;
		x += c * a->xs[d], y += c * a->ys[d], i += c * a->is[d];
	}
	*ox = x, *oy = y, *oi = i;
}

static int ix_check_args(const nk_index_args_t *a)
{
	if (a->op < NK_IDX_GATHER || a->op > NK_IDX_SCATTER_AMIN || !nk_dtype_valid(a->dtype) ||
	    (a->idx_dtype != NK_I64 && a->idx_dtype != NK_I32) || a->ndim < 0 || a->ndim > NK_MAX_DIMS ||
	    a->dim >= a->ndim || a->bound < 0) {
		nrt_kernel_fail("nk_index: bad arguments (op %d, dtype %d, index dtype %d, ndim %d, dim %d)", a->op,
				a->dtype, a->idx_dtype, a->ndim, a->dim);
		return -1;
	}
	if (a->op == NK_IDX_GATHER && !a->y) {
		nrt_kernel_fail("nk_index: gather needs an output");
		return -1;
	}
	for (int d = 0; d < a->ndim; d++)
		if (a->shape[d] < 0) {
			nrt_kernel_fail("nk_index: negative size");
			return -1;
		}
	return 0;
}

static void ix_fail(const nk_index_args_t *a, int64_t k)
{
	switch (a->err_style) {
	case NK_IXERR_INDEX_BOUNDS:
		nrt_kernel_fail(NRT_INDEX_ERROR "index %lld is out of bounds for dimension %d with size %lld", (long long)k,
				a->err_dim, (long long)a->bound);
		break;
	case NK_IXERR_RANGE_SELF:
		nrt_kernel_fail(NRT_INDEX_ERROR "index out of range in self (index %lld, dimension %d of size %lld)", (long long)k,
				a->err_dim, (long long)a->bound);
		break;
	case NK_IXERR_TAKE:
		nrt_kernel_fail(NRT_INDEX_ERROR "out of range: tried to access index %lld on a tensor of %lld elements.", (long long)k,
				(long long)a->bound);
		break;
	default:
		nrt_kernel_fail("index %lld is out of bounds for dimension %d with size %lld", (long long)k, a->err_dim,
				(long long)a->bound);
	}
}

/* Every index in range (after wrapping)?  Fails the kernel with aten's message on the first bad one. */
static int ix_check_indices(const nk_index_args_t *a, int64_t n)
{
	const char *base = a->idx;
	size_t isz = nk_dtype_size(a->idx_dtype);
	for (int64_t p = 0; p < n; p++) {
		int64_t ox, oy, oi, k;
		ix_offsets(a, p, &ox, &oy, &oi);
		k = ix_load_idx(base + oi * (int64_t)isz, a->idx_dtype);
		if (a->wrap && k < 0 && k >= -a->bound)
			continue;
		if (k < 0 || k >= a->bound) {
			ix_fail(a, k);
			return -1;
		}
	}
	return 0;
}

/* ---- one update ----------------------------------------------------------------------------------- */
/* *dst op= *src for the combining scatters (dst, src: elements of dtype dt). */
static void ix_combine(int op, int dt, char *dst, const char *src)
{
	if (dt == NK_F64 || nk_is_float(dt)) {
		double d = nk_load_f64(dst, dt), s = nk_load_f64(src, dt), r;
		if (dt != NK_F64) { /* f32 compute, like aten's opmath */
			float fd = (float)d, fs = (float)s, fr;
			switch (op) {
			case NK_IDX_SCATTER_ADD: fr = fd + fs; break;
			case NK_IDX_SCATTER_MUL: fr = fd * fs; break;
			case NK_IDX_SCATTER_AMAX: fr = isnan(fs) ? fs : (fd < fs ? fs : fd); break;
			default: fr = isnan(fs) ? fs : (fd > fs ? fs : fd); break;
			}
			nk_store_f32(dst, dt, fr);
			return;
		}
		switch (op) {
		case NK_IDX_SCATTER_ADD: r = d + s; break;
		case NK_IDX_SCATTER_MUL: r = d * s; break;
		case NK_IDX_SCATTER_AMAX: r = isnan(s) ? s : (d < s ? s : d); break;
		default: r = isnan(s) ? s : (d > s ? s : d); break;
		}
		nk_store_f64(dst, dt, r);
		return;
	}
	int64_t d = nk_load_i64(dst, dt), s = nk_load_i64(src, dt), r;
	switch (op) {
	case NK_IDX_SCATTER_ADD: r = (int64_t)((uint64_t)d + (uint64_t)s); break;
	case NK_IDX_SCATTER_MUL: r = (int64_t)((uint64_t)d * (uint64_t)s); break;
	case NK_IDX_SCATTER_AMAX: r = d < s ? s : d; break;
	default: r = d > s ? s : d; break;
	}
	if (dt == NK_BOOL && op == NK_IDX_SCATTER_ADD)
		r = d || s;
	nk_store_i64(dst, dt, r);
}

typedef struct {
	const nk_index_args_t *a;
	size_t esz, isz;
	char value[8]; /* the scalar in the dtype, for scatters without y */
} ix_ctx_t;

/* The update at point with offsets (ox, oy, oi). */
static inline void ix_point(const ix_ctx_t *c, int64_t ox, int64_t oy, int64_t oi)
{
	const nk_index_args_t *a = c->a;
	int64_t k = ix_load_idx((const char *)a->idx + oi * (int64_t)c->isz, a->idx_dtype);
	if (k < 0)
		k += a->bound;
	char *xp = (char *)a->x + (ox + k * a->xk) * (int64_t)c->esz;
	if (a->op == NK_IDX_GATHER) {
		memcpy((char *)a->y + oy * (int64_t)c->esz, xp, c->esz);
		return;
	}
	const char *yp = a->y ? (const char *)a->y + oy * (int64_t)c->esz : c->value;
	if (a->op == NK_IDX_SCATTER)
		memcpy(xp, yp, c->esz);
	else
		ix_combine(a->op, a->dtype, xp, yp);
}

static void ix_ctx_init(ix_ctx_t *c, const nk_index_args_t *a)
{
	c->a = a;
	c->esz = nk_dtype_size(a->dtype);
	c->isz = nk_dtype_size(a->idx_dtype);
	memset(c->value, 0, sizeof c->value);
	if (nk_is_float(a->dtype))
		nk_store_f64(c->value, a->dtype, a->value);
	else
		nk_store_i64(c->value, a->dtype, a->ivalue);
}

/* ---- reference ------------------------------------------------------------------------------------- */
int nk_index_ref(void *args)
{
	const nk_index_args_t *a = args;
	ix_ctx_t c;
	if (ix_check_args(a))
		return -1;
	int64_t n = ix_numel(a);
	if (ix_check_indices(a, n))
		return -1;
	ix_ctx_init(&c, a);
	for (int64_t p = 0; p < n; p++) {
		int64_t ox, oy, oi;
		ix_offsets(a, p, &ox, &oy, &oi);
		ix_point(&c, ox, oy, oi);
	}
	return 0;
}

/* ---- optimized: gather by point ranges (odometer), scatters by lines of `dim` ---------------------- */
static void ix_gather_range(void *ctx, int64_t lo, int64_t hi)
{
	const ix_ctx_t *c = ctx;
	const nk_index_args_t *a = c->a;
	int nd = a->ndim;
	int64_t coord[NK_MAX_DIMS], ox, oy, oi, lin = lo;
	if (lo >= hi)
		return;
	for (int d = nd - 1; d >= 0; d--) {
		coord[d] = lin % a->shape[d];
		lin /= a->shape[d];
	}
	ix_offsets(a, lo, &ox, &oy, &oi);
	for (int64_t p = lo; p < hi; p++) {
		ix_point(c, ox, oy, oi);
		for (int d = nd - 1; d >= 0; d--) { /* odometer step */
			ox += a->xs[d], oy += a->ys[d], oi += a->is[d];
			if (++coord[d] < a->shape[d])
				break;
			coord[d] = 0;
			ox -= a->xs[d] * a->shape[d], oy -= a->ys[d] * a->shape[d], oi -= a->is[d] * a->shape[d];
		}
	}
}

/* Lines [lo, hi) of the collision dim: each line's points in increasing order along dim. */
static void ix_scatter_lines(void *ctx, int64_t lo, int64_t hi)
{
	const ix_ctx_t *c = ctx;
	const nk_index_args_t *a = c->a;
	int dim = a->dim;
	int64_t D = a->shape[dim];
	for (int64_t line = lo; line < hi; line++) {
		int64_t rest = line, ox = 0, oy = 0, oi = 0;
		for (int d = a->ndim - 1; d >= 0; d--) {
			if (d == dim)
				continue;
			int64_t cd = rest % a->shape[d];
			rest /= a->shape[d];
			ox += cd * a->xs[d], oy += cd * a->ys[d], oi += cd * a->is[d];
		}
		for (int64_t j = 0; j < D; j++)
			ix_point(c, ox + j * a->xs[dim], oy + j * a->ys[dim], oi + j * a->is[dim]);
	}
}

int nk_index_run(void *args)
{
	const nk_index_args_t *a = args;
	ix_ctx_t c;
	if (nk_using_reference())
		return nk_index_ref(args);
	if (ix_check_args(a))
		return -1;
	int64_t n = ix_numel(a);
	if (n == 0)
		return 0;
	if (ix_check_indices(a, n))
		return -1;
	ix_ctx_init(&c, a);
	if (a->op == NK_IDX_GATHER) {
		nrt_parallel_for(n, IX_GRAIN, ix_gather_range, &c);
	} else if (a->dim >= 0 && a->shape[a->dim] > 0) {
		int64_t lines = n / a->shape[a->dim];
		int64_t grain = IX_GRAIN / a->shape[a->dim];
		nrt_parallel_for(lines, grain > 0 ? grain : 1, ix_scatter_lines, &c);
	} else {
		for (int64_t p = 0; p < n; p++) {
			int64_t ox, oy, oi;
			ix_offsets(a, p, &ox, &oy, &oi);
			ix_point(&c, ox, oy, oi);
		}
	}
	return 0;
}

/* ---- nonzero ---------------------------------------------------------------------------------------- */
static bool nz_is_set(const nk_nonzero_args_t *a, int64_t off)
{
	const char *p = (const char *)a->x + off * (int64_t)nk_dtype_size(a->dtype);
	if (nk_is_float(a->dtype))
		return nk_load_f64(p, a->dtype) != 0 || isnan(nk_load_f64(p, a->dtype));
	return nk_load_i64(p, a->dtype) != 0;
}

static int64_t nz_offset(const nk_nonzero_args_t *a, int64_t lin, int64_t *coord)
{
	int64_t off = 0;
	for (int d = a->ndim - 1; d >= 0; d--) {
		int64_t n = a->shape[d], cd = lin % n;
		lin /= n;
		if (coord)
			coord[d] = cd;
		off += cd * a->strides[d];
	}
	return off;
}

int64_t nk_nonzero_count(const nk_nonzero_args_t *a)
{
	int64_t n = 1, k = 0;
	for (int d = 0; d < a->ndim; d++)
		n *= a->shape[d];
	for (int64_t p = 0; p < n; p++)
		k += nz_is_set(a, nz_offset(a, p, NULL));
	return k;
}

void nk_nonzero_write(const nk_nonzero_args_t *a, int64_t *out, int64_t max_rows)
{
	int64_t n = 1, row = 0, coord[NK_MAX_DIMS];
	for (int d = 0; d < a->ndim; d++)
		n *= a->shape[d];
	for (int64_t p = 0; p < n && row < max_rows; p++) {
		int64_t off = nz_offset(a, p, coord);
		if (!nz_is_set(a, off))
			continue;
		for (int d = 0; d < a->ndim; d++)
			out[row * a->ndim + d] = coord[d];
		row++;
	}
}

/* ---- advanced indexing: offsets of several index tensors ------------------------------------------ */
static int64_t io_numel(const nk_index_offsets_args_t *a)
{
	int64_t n = 1;
	for (int d = 0; d < a->ndim; d++)
		n *= a->shape[d];
	return n;
}

/* Offset (elements) of point lin of the index space in index tensor k. */
static int64_t io_at(const nk_index_offsets_args_t *a, int k, int64_t lin)
{
	int64_t off = 0;
	for (int d = a->ndim - 1; d >= 0; d--) {
		int64_t n = a->shape[d];
		off += (lin % n) * a->is[k][d];
		lin /= n;
	}
	return off;
}

static int64_t io_index(const nk_index_offsets_args_t *a, int k, int64_t lin)
{
	const char *p = (const char *)a->idx[k] + io_at(a, k, lin) * (int64_t)nk_dtype_size(a->idx_dtype[k]);
	return ix_load_idx(p, a->idx_dtype[k]);
}

static void io_range(void *ctx, int64_t lo, int64_t hi)
{
	const nk_index_offsets_args_t *a = ctx;
	for (int64_t p = lo; p < hi; p++) {
		int64_t off = 0;
		for (int k = 0; k < a->n; k++) {
			int64_t v = io_index(a, k, p);
			off += (v < 0 ? v + a->size[k] : v) * a->stride[k];
		}
		a->out[p] = off;
	}
}

int nk_index_offsets_run(void *args)
{
	const nk_index_offsets_args_t *a = args;
	if (a->n < 1 || a->n > NK_MAX_INDICES || a->ndim < 0 || a->ndim > NK_MAX_DIMS) {
		nrt_kernel_fail("nk_index_offsets: bad arguments (%d indices, %d dims)", a->n, a->ndim);
		return -1;
	}
	for (int k = 0; k < a->n; k++)
		if (a->idx_dtype[k] != NK_I64 && a->idx_dtype[k] != NK_I32) {
			nrt_kernel_fail("nk_index_offsets: index dtype %s", nk_dtype_name(a->idx_dtype[k]));
			return -1;
		}
	int64_t n = io_numel(a);
	for (int64_t p = 0; p < n; p++)
		for (int k = 0; k < a->n; k++) {
			int64_t v = io_index(a, k, p);
			if (v < -a->size[k] || v >= a->size[k]) {
				nrt_kernel_fail(NRT_INDEX_ERROR "index %lld is out of bounds for dimension %d with size %lld", (long long)v,
						a->dim[k], (long long)a->size[k]);
				return -1;
			}
		}
	if (n > 0)
		nrt_parallel_for(n, IX_GRAIN, io_range, (void *)a);
	return 0;
}

/* ---- repeat_interleave (repeats only) ------------------------------------------------------------ */
static int64_t rep_at(const nk_repeat_interleave_args_t *a, int64_t i)
{
	return a->dtype == NK_I64 ? ((const int64_t *)a->repeats)[i] : ((const int32_t *)a->repeats)[i];
}

static void rep_store(const nk_repeat_interleave_args_t *a, int64_t j, int64_t v)
{
	if (a->dtype == NK_I64)
		((int64_t *)a->out)[j] = v;
	else
		((int32_t *)a->out)[j] = (int32_t)v;
}

int nk_repeat_interleave_ref(void *args)
{
	const nk_repeat_interleave_args_t *a = args;
	int64_t sum = 0;
	for (int64_t i = 0; i < a->n; i++) {
		int64_t r = rep_at(a, i);
		if (r < 0) {
			nrt_kernel_fail("repeat_interleave: repeats can not be negative (repeats[%lld] = %lld)", (long long)i, (long long)r);
			return -1;
		}
		sum += r;
	}
	if (sum != a->total) {
		nrt_kernel_fail("repeat_interleave: output_size %lld does not match the sum of repeats %lld", (long long)a->total,
				(long long)sum);
		return -1;
	}
	int64_t j = 0;
	for (int64_t i = 0; i < a->n; i++)
		for (int64_t r = rep_at(a, i); r > 0; r--)
			rep_store(a, j++, i);
	return 0;
}

int nk_repeat_interleave_run(void *args)
{
	const nk_repeat_interleave_args_t *a = args;
	if (a->dtype != NK_I64)
		return nk_repeat_interleave_ref(args);
	const int64_t *rep = a->repeats;
	int64_t sum = 0;
	for (int64_t i = 0; i < a->n; i++) {
		if (rep[i] < 0) {
			nrt_kernel_fail("repeat_interleave: repeats can not be negative (repeats[%lld] = %lld)", (long long)i, (long long)rep[i]);
			return -1;
		}
		sum += rep[i];
	}
	if (sum != a->total) {
		nrt_kernel_fail("repeat_interleave: output_size %lld does not match the sum of repeats %lld", (long long)a->total,
				(long long)sum);
		return -1;
	}
	int64_t *o = a->out;
	for (int64_t i = 0; i < a->n; i++) {
		int64_t r = rep[i];
		for (int64_t k = 0; k < r; k++)
			o[k] = i;
		o += r;
	}
	return 0;
}

/* ---- nonzero_static ------------------------------------------------------------------------------- */
int nk_nonzero_static_run(void *args)
{
	const nk_nonzero_static_args_t *a = args;
	int64_t nd = a->nz.ndim;
	int64_t k = 0;
	bool empty = false;
	for (int d = 0; d < a->nz.ndim; d++)
		empty |= a->nz.shape[d] == 0;
	if (!empty) {
		k = nk_nonzero_count(&a->nz);
		if (k > a->size)
			k = a->size;
		if (k > 0 && nd > 0)
			nk_nonzero_write(&a->nz, a->out, k);
	}
	for (int64_t i = k * nd; i < a->size * nd; i++)
		a->out[i] = a->fill;
	return 0;
}
