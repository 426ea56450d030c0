/* iter.c - the strided loop that the pointwise, copy and random kernels share: an nk_iter_t validated,
 * coalesced (nk_loop_t) and walked row by row, optionally over the runtime's pool.  See nk_impl.h. */
#include <string.h>

#include "nk_impl.h"
#include "nrt.h"

NK_VECTORIZE_FILE

/* ---- strided loops ------------------------------------------------------------------------------ */
int64_t nk_iter_numel(const nk_iter_t *it)
{
	int64_t n = 1;
	for (int d = 0; d < it->ndim; d++)
		n *= it->shape[d];
	return n;
}

int64_t nk_iter_offset(const nk_iter_t *it, int k, int64_t lin)
{
	int64_t off = 0;
	for (int d = 0; d < it->ndim; d++) {
		int64_t sz = it->shape[d];
		off += (lin % sz) * it->strides[k][d];
		lin /= sz;
	}
	return off;
}

/* Checks the iterator's header fields; returns nonzero after nrt_kernel_fail on garbage. */
static int loop_validate(const nk_iter_t *it, int nops_min, int nops_max, const char *who)
{
	if (it->ndim < 0 || it->ndim > NK_MAX_DIMS) {
		nrt_kernel_fail("%s: ndim %d outside [0, %d]", who, it->ndim, NK_MAX_DIMS);
		return -1;
	}
	if (it->nops < nops_min || it->nops > nops_max) {
		nrt_kernel_fail("%s: %d operands, expected %d..%d", who, it->nops, nops_min, nops_max);
		return -1;
	}
	int64_t numel = 1;
	for (int d = 0; d < it->ndim; d++) {
		if (it->shape[d] < 0) {
			nrt_kernel_fail("%s: negative size %lld in dim %d", who, (long long)it->shape[d], d);
			return -1;
		}
		if (it->shape[d] && numel > INT64_MAX / it->shape[d]) {
			nrt_kernel_fail("%s: element count overflows int64", who);
			return -1;
		}
		numel *= it->shape[d];
	}
	for (int k = 0; k < it->nops; k++) {
		if (!nk_dtype_valid(it->dtype[k])) {
			nrt_kernel_fail("%s: operand %d has invalid dtype %d", who, k, it->dtype[k]);
			return -1;
		}
	}
	return 0;
}

int nk_loop_init(nk_loop_t *L, const nk_iter_t *it, int nops_min, int nops_max, const char *who)
{
	if (loop_validate(it, nops_min, nops_max, who))
		return -1;
	memset(L, 0, sizeof *L);
	L->nops = it->nops;
	L->numel = nk_iter_numel(it);
	for (int k = 0; k < it->nops; k++)
		L->data[k] = it->data[k];
	int nd = 0;
	for (int d = 0; d < it->ndim; d++) {
		if (it->shape[d] == 1)
			continue;
		bool merge = nd > 0;
		for (int k = 0; merge && k < it->nops; k++)
			merge = it->strides[k][d] == L->strides[k][nd - 1] * L->shape[nd - 1];
		if (merge) {
			L->shape[nd - 1] *= it->shape[d];
			continue;
		}
		L->shape[nd] = it->shape[d];
		for (int k = 0; k < it->nops; k++)
			L->strides[k][nd] = it->strides[k][d];
		nd++;
	}
	if (nd == 0) { /* a single element (or ndim 0) */
		L->shape[0] = 1;
		nd = 1;
	}
	L->ndim = nd;
	return 0;
}

void nk_loop_range(const nk_loop_t *L, int64_t lo, int64_t hi, nk_row_fn fn, void *ctx)
{
	if (lo >= hi)
		return;
	int64_t idx[NK_MAX_DIMS];
	char *ptr[NK_MAX_OPS];
	int64_t st0[NK_MAX_OPS];
	int64_t rem = lo;
	for (int k = 0; k < L->nops; k++) {
		ptr[k] = L->data[k];
		st0[k] = L->strides[k][0];
	}
	for (int d = 0; d < L->ndim; d++) {
		idx[d] = rem % L->shape[d];
		rem /= L->shape[d];
		for (int k = 0; k < L->nops; k++)
			ptr[k] += idx[d] * L->strides[k][d];
	}
	int64_t pos = lo;
	while (pos < hi) {
		int64_t n = L->shape[0] - idx[0];
		if (n > hi - pos)
			n = hi - pos;
		fn(ctx, ptr, st0, n, pos);
		pos += n;
		if (pos >= hi)
			break;
		/* advance: dim 0 to its end (we only stop mid-row at hi), then carry upwards */
		for (int k = 0; k < L->nops; k++)
			ptr[k] -= idx[0] * st0[k];
		idx[0] = 0;
		for (int d = 1; d < L->ndim; d++) {
			idx[d]++;
			for (int k = 0; k < L->nops; k++)
				ptr[k] += L->strides[k][d];
			if (idx[d] < L->shape[d])
				break;
			for (int k = 0; k < L->nops; k++)
				ptr[k] -= idx[d] * L->strides[k][d];
			idx[d] = 0;
		}
	}
}

typedef struct {
	const nk_loop_t *L;
	nk_row_fn fn;
	void *ctx;
} loop_task_t;

static void loop_task(void *ctx, int64_t begin, int64_t end)
{
	const loop_task_t *t = ctx;
	nk_loop_range(t->L, begin, end, t->fn, t->ctx);
}

void nk_loop_parallel(const nk_loop_t *L, int64_t grain, nk_row_fn fn, void *ctx)
{
	if (L->numel <= grain) {
		nk_loop_range(L, 0, L->numel, fn, ctx);
		return;
	}
	loop_task_t t = {L, fn, ctx};
	nrt_parallel_for(L->numel, grain, loop_task, &t);
}
