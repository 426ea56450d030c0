/* triangle.c - the triangle kernels: tril/triu (keep one triangle of the last two dims, zero the rest)
 * and tril_indices / triu_indices.
 *
 * nk_tri_run: [B, M, N] with element strides for in and out (any layout; out may be in itself, for the
 * in-place variants).  Row i keeps columns j with j - i <= k (tril) or j - i >= k (triu): element
 * bytes are copied, the rest set to zero bytes (0 in every dtype).  Threading: rows (b, i) over the
 * pool.  nk_tri_ref: element by element.
 * nk_tri_indices_run walks the kept (r, c) directly; its reference tests every candidate element.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

#define TRI_GRAIN 16384

static bool tri_keep(const nk_tri_args_t *a, int64_t i, int64_t j)
{
	return a->lower ? j - i <= a->k : j - i >= a->k;
}

static int tri_check(const nk_tri_args_t *a)
{
	if (!nk_dtype_valid(a->dtype) || a->B < 0 || a->M < 0 || a->N < 0) {
		nrt_kernel_fail("nk_tri: bad arguments (dtype %d)", a->dtype);
		return -1;
	}
	return 0;
}

static void tri_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_tri_args_t *a = ctx;
	int64_t es = (int64_t)nk_dtype_size(a->dtype);
	for (int64_t r = r0; r < r1; r++) {
		int64_t b = r / a->M, i = r % a->M;
		const char *in = (const char *)a->in + (b * a->si[0] + i * a->si[1]) * es;
		char *out = (char *)a->out + (b * a->so[0] + i * a->so[1]) * es;
		/* kept columns form one interval [j0, j1) */
		int64_t j0 = a->lower ? 0 : i + a->k, j1 = a->lower ? i + a->k + 1 : a->N;
		j0 = j0 < 0 ? 0 : j0 > a->N ? a->N : j0;
		j1 = j1 < 0 ? 0 : j1 > a->N ? a->N : j1;
		if (j1 < j0)
			j1 = j0;
		if (a->si[2] == 1 && a->so[2] == 1) {
			memset(out, 0, (size_t)(j0 * es));
			if (out != in)
				memmove(out + j0 * es, in + j0 * es, (size_t)((j1 - j0) * es));
			memset(out + j1 * es, 0, (size_t)((a->N - j1) * es));
			continue;
		}
		for (int64_t j = 0; j < a->N; j++) {
			char *o = out + j * a->so[2] * es;
			if (j >= j0 && j < j1)
				memmove(o, in + j * a->si[2] * es, (size_t)es);
			else
				memset(o, 0, (size_t)es);
		}
	}
}

int nk_tri_run(void *args)
{
	const nk_tri_args_t *a = args;
	if (nk_using_reference())
		return nk_tri_ref(args);
	if (tri_check(a))
		return -1;
	int64_t rows = a->B * a->M, grain = a->N ? TRI_GRAIN / a->N : TRI_GRAIN;
	if (rows)
		nrt_parallel_for(rows, grain > 0 ? grain : 1, tri_rows, (void *)a);
	return 0;
}

int nk_tri_ref(void *args)
{
	const nk_tri_args_t *a = args;
	if (tri_check(a))
		return -1;
	int64_t es = (int64_t)nk_dtype_size(a->dtype);
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t i = 0; i < a->M; i++)
			for (int64_t j = 0; j < a->N; j++) {
				char *o = (char *)a->out + (b * a->so[0] + i * a->so[1] + j * a->so[2]) * es;
				const char *p = (const char *)a->in + (b * a->si[0] + i * a->si[1] + j * a->si[2]) * es;
				if (tri_keep(a, i, j))
					memmove(o, p, (size_t)es);
				else
					memset(o, 0, (size_t)es);
			}
	return 0;
}

/* ---- tril_indices / triu_indices -------------------------------------------------------------- */
/* Column range [c0, c1) of row r that is kept. */
static void tri_cols(const nk_tri_indices_args_t *a, int64_t r, int64_t *c0, int64_t *c1)
{
	int64_t lo, hi;
	if (a->lower) {
		lo = 0;
		hi = r + a->offset + 1;
	} else {
		lo = r + a->offset;
		hi = a->col;
	}
	if (lo < 0)
		lo = 0;
	if (hi > a->col)
		hi = a->col;
	if (hi < lo)
		hi = lo;
	*c0 = lo, *c1 = hi;
}

int nk_tri_indices_run(void *args)
{
	const nk_tri_indices_args_t *a = args;
	int64_t k = 0;
	for (int64_t r = 0; r < a->row && k < a->n; r++) {
		int64_t c0, c1;
		tri_cols(a, r, &c0, &c1);
		for (int64_t c = c0; c < c1 && k < a->n; c++, k++) {
			a->out[k] = r;
			a->out[a->n + k] = c;
		}
	}
	return 0;
}

int nk_tri_indices_ref(void *args)
{
	const nk_tri_indices_args_t *a = args;
	int64_t k = 0;
	for (int64_t r = 0; r < a->row; r++)
		for (int64_t c = 0; c < a->col; c++) {
			bool keep = a->lower ? c - r <= a->offset : c - r >= a->offset;
			if (keep && k < a->n) {
				a->out[k] = r;
				a->out[a->n + k] = c;
				k++;
			}
		}
	return 0;
}

int64_t nk_tri_indices_count(int64_t row, int64_t col, int64_t offset, bool lower)
{
	nk_tri_indices_args_t a = { .row = row, .col = col, .offset = offset, .lower = lower };
	int64_t n = 0;
	for (int64_t r = 0; r < row; r++) {
		int64_t c0, c1;
		tri_cols(&a, r, &c0, &c1);
		n += c1 - c0;
	}
	return n;
}
