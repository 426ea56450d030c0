/* embedding.c - embedding lookup (a row gather) and its backward (a row scatter-add).
 *
 * Forward: out[i, :] = weight[idx[i], :]; weight [V, C] and out [n, C] contiguous, any dtype (rows are
 * copied as bytes); idx i64 or i32.  Indices are checked on the calling thread before any copy.
 * Threading: rows of out over the pool.
 * Backward: grad_weight = 0, then grad_weight[idx[i], :] += grad_out[i, :] for i in order, skipping
 * padding_idx.  Deterministic without sorting or atomics: each task owns a range of vocabulary rows,
 * scans all indices in order and adds only those in its range (as aten's CPU embedding backward).
 * Additions are done in f32 (f64 for f64) and stored in the dtype after each row (bf16/f16 round per
 * add, as PyTorch's CPU index_add does).
 */
/* The vectorizer's dynamic cost model for this file (what NK_VECTORIZE_FILE does), set before the
 * headers so that their inline helpers get the same options and stay inlinable. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"


static int64_t idx_at(const void *idx, int idx_dtype, int64_t i)
{
	return idx_dtype == NK_I64 ? ((const int64_t *)idx)[i] : (int64_t)((const int32_t *)idx)[i];
}

/* Fails the kernel on a bad index (on the calling thread, where nrt_kernel_fail's message belongs). */
static int check_indices(const void *idx, int idx_dtype, int64_t n, int64_t V, int64_t skip)
{
	for (int64_t i = 0; i < n; i++) {
		int64_t k = idx_at(idx, idx_dtype, i);

		if ((k < 0 || k >= V) && k != skip) {
			nrt_kernel_fail(NRT_INDEX_ERROR "index out of range in self (index %lld, embedding of size %lld)", (long long)k,
					(long long)V);
			return -1;
		}
	}
	return 0;
}

static int check_args(int dtype, int idx_dtype, int64_t n, int64_t V, int64_t C, const char *who)
{
	if (nk_dtype_size(dtype) == 0 || (idx_dtype != NK_I64 && idx_dtype != NK_I32)) {
		nrt_kernel_fail("%s: unsupported dtype (%s, index %s)", who, nk_dtype_name(dtype),
				nk_dtype_name(idx_dtype));
		return -1;
	}
	if (n < 0 || V < 0 || C < 0) {
		nrt_kernel_fail("%s: negative size", who);
		return -1;
	}
	return 0;
}

static void gather_rows(void *ctx, int64_t i0, int64_t i1)
{
	const nk_embedding_args_t *a = ctx;
	size_t row = (size_t)a->C * nk_dtype_size(a->dtype);

	for (int64_t i = i0; i < i1; i++)
		memcpy((char *)a->out + (size_t)i * row,
		       (const char *)a->weight + (size_t)idx_at(a->idx, a->idx_dtype, i) * row, row);
}

int nk_embedding_run(void *args)
{
	const nk_embedding_args_t *a = args;

	if (check_args(a->dtype, a->idx_dtype, a->n, a->V, a->C, "embedding"))
		return -1;
	if (check_indices(a->idx, a->idx_dtype, a->n, a->V, INT64_MIN))
		return -1;
	if (a->n && a->C)
		nrt_parallel_for(a->n, NK_PARALLEL_GRAIN / (a->C + 1) + 1, gather_rows, (void *)a);
	return 0;
}

/* ---- backward ----------------------------------------------------------------------------------- */

typedef struct {
	const nk_embedding_bwd_args_t *a;
	int64_t rows_per_task;
} emb_bwd_t;

/* gw[0..C) += go[0..C) in the dtype's compute precision. */
static void add_row(void *gw, const void *go, int dtype, int64_t C)
{
	switch (dtype) {
	case NK_F32: {
		float *d = gw;
		const float *s = go;

		for (int64_t j = 0; j < C; j++)
			d[j] += s[j];
		break;
	}
	case NK_F64: {
		double *d = gw;
		const double *s = go;

		for (int64_t j = 0; j < C; j++)
			d[j] += s[j];
		break;
	}
	case NK_BF16: {
		uint16_t *d = gw;
		const uint16_t *s = go;

		for (int64_t j = 0; j < C; j++)
			d[j] = nk_f32_to_bf16(nk_bf16_to_f32(d[j]) + nk_bf16_to_f32(s[j]));
		break;
	}
	case NK_F16: {
		uint16_t *d = gw;
		const uint16_t *s = go;

		for (int64_t j = 0; j < C; j++)
			d[j] = nk_f32_to_f16(nk_f16_to_f32(d[j]) + nk_f16_to_f32(s[j]));
		break;
	}
	default: /* integer dtypes: through double */
		for (int64_t j = 0, es = (int64_t)nk_dtype_size(dtype); j < C; j++) {
			nk_store_f64((char *)gw + j * es, dtype,
				     nk_load_f64((char *)gw + j * es, dtype) + nk_load_f64((const char *)go + j * es, dtype));
		}
		break;
	}
}

/* Task t owns vocabulary rows [t*rows_per_task, ...): zero them, then add the matching rows of
 * grad_out in index order. */
static void scatter_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const emb_bwd_t *e = ctx;
	const nk_embedding_bwd_args_t *a = e->a;
	size_t row = (size_t)a->C * nk_dtype_size(a->dtype);

	for (int64_t t = t0; t < t1; t++) {
		int64_t v0 = t * e->rows_per_task;
		int64_t v1 = v0 + e->rows_per_task < a->V ? v0 + e->rows_per_task : a->V;

		memset((char *)a->grad_weight + (size_t)v0 * row, 0, (size_t)(v1 - v0) * row);
		for (int64_t i = 0; i < a->n; i++) {
			int64_t k = idx_at(a->idx, a->idx_dtype, i);

			if (k < v0 || k >= v1 || k == a->padding_idx)
				continue;
			add_row((char *)a->grad_weight + (size_t)k * row, (const char *)a->grad_out + (size_t)i * row,
				a->dtype, a->C);
		}
	}
}

int nk_embedding_bwd_run(void *args)
{
	const nk_embedding_bwd_args_t *a = args;
	emb_bwd_t e = { .a = a };
	int64_t ntasks, tasks_wanted;

	if (check_args(a->dtype, a->idx_dtype, a->n, a->V, a->C, "embedding_backward"))
		return -1;
	if (check_indices(a->idx, a->idx_dtype, a->n, a->V, a->padding_idx < 0 ? INT64_MIN : a->padding_idx))
		return -1;
	if (!a->V || !a->C)
		return 0;
	/* a few tasks per thread when there is enough work (each task scans all n indices) */
	tasks_wanted = (a->n + a->V) * a->C >= NK_PARALLEL_GRAIN ? 4 * (int64_t)nrt_num_threads() : 1;
	e.rows_per_task = (a->V + tasks_wanted - 1) / tasks_wanted;
	ntasks = (a->V + e.rows_per_task - 1) / e.rows_per_task;
	nrt_parallel_for(ntasks, 1, scatter_tasks, &e);
	return 0;
}
