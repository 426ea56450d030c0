/* gemm_grouped.c - grouped GEMM (nk_gemm_grouped.h): one call of the GEMM driver per group, with the
 * group's slice of A, B and C given as pointers and strides (no copies).  Threading: each group's GEMM
 * parallelizes inside nk_gemm_run; groups run one after another, so results are those of G separate
 * matmuls and do not depend on the thread count. */
#include <string.h>

#include "nk.h"
#include "nk_gemm_grouped.h"
#include "nrt.h"

static const void *elem(const void *p, int64_t off, size_t es)
{
	return (const char *)p + off * (int64_t)es;
}

/* zero the r x c block of C at (r0, c0) of batch b */
static void zero_block(const nk_gemm_grouped_args_t *a, int64_t b, int64_t r0, int64_t r, int64_t c0, int64_t c)
{
	size_t es = nk_dtype_size(a->dtype);
	char *base = (char *)a->C + (b * a->sc[0] + r0 * a->sc[1] + c0 * a->sc[2]) * (int64_t)es;

	for (int64_t i = 0; i < r; i++) {
		char *row = base + i * a->sc[1] * (int64_t)es;
		if (a->sc[2] == 1) {
			memset(row, 0, (size_t)c * es);
			continue;
		}
		for (int64_t j = 0; j < c; j++)
			memset(row + j * a->sc[2] * (int64_t)es, 0, es);
	}
}

/* the group bounds [lo, hi) of group g from offs, checked against the split dimension n */
static int group_bounds(const nk_gemm_grouped_args_t *a, int64_t g, int64_t n, int64_t *lo, int64_t *hi)
{
	*lo = g ? a->offs[g - 1] : 0;
	*hi = a->offs[g];
	if (*hi < *lo || *hi > n) {
		nrt_kernel_fail("grouped_mm: offs[%lld] = %lld is outside [%lld, %lld] (offsets must be non-decreasing "
				"and at most %lld)", (long long)g, (long long)*hi, (long long)*lo, (long long)n, (long long)n);
		return -1;
	}
	return 0;
}

int nk_gemm_grouped_run(void *args)
{
	const nk_gemm_grouped_args_t *a = args;
	size_t es = nk_dtype_size(a->dtype);
	int64_t lo = 0, hi = 0, end = 0;

	if (a->mode == NK_GMM_3D3D) {
		nk_gemm_args_t g = { .dtype = a->dtype, .M = a->M, .N = a->N, .K = a->K, .batch = a->G, .alpha = 1, .beta = 0,
				     .A = a->A, .rs_a = a->sa[1], .cs_a = a->sa[2], .bs_a = a->sa[0],
				     .B = a->B, .rs_b = a->sb[1], .cs_b = a->sb[2], .bs_b = a->sb[0],
				     .C = a->C, .rs_c = a->sc[1], .cs_c = a->sc[2], .bs_c = a->sc[0] };
		return nk_gemm_run(&g);
	}
	for (int64_t gi = 0; gi < a->G; gi++) {
		int64_t split = a->mode == NK_GMM_2D3D ? a->M : a->mode == NK_GMM_3D2D ? a->N : a->K;
		if (group_bounds(a, gi, split, &lo, &hi))
			return -1;
		end = hi;
		nk_gemm_args_t g = { .dtype = a->dtype, .M = a->M, .N = a->N, .K = a->K, .batch = 1, .alpha = 1, .beta = 0,
				     .A = a->A, .rs_a = a->sa[1], .cs_a = a->sa[2],
				     .B = a->B, .rs_b = a->sb[1], .cs_b = a->sb[2],
				     .C = a->C, .rs_c = a->sc[1], .cs_c = a->sc[2] };
		if (a->mode == NK_GMM_2D3D) { /* rows [lo, hi) of A and C, expert gi of B */
			g.M = hi - lo;
			g.A = elem(a->A, lo * a->sa[1], es);
			g.B = elem(a->B, gi * a->sb[0], es);
			g.C = (void *)elem(a->C, lo * a->sc[1], es);
		} else if (a->mode == NK_GMM_3D2D) { /* batch gi of A, columns [lo, hi) of B and C */
			g.N = hi - lo;
			g.A = elem(a->A, gi * a->sa[0], es);
			g.B = elem(a->B, lo * a->sb[2], es);
			g.C = (void *)elem(a->C, lo * a->sc[2], es);
		} else { /* the k-slice [lo, hi) of A and B, batch gi of C (K = 0: zeros) */
			g.K = hi - lo;
			g.A = elem(a->A, lo * a->sa[2], es);
			g.B = elem(a->B, lo * a->sb[1], es);
			g.C = (void *)elem(a->C, gi * a->sc[0], es);
		}
		if (nk_gemm_run(&g))
			return -1;
	}
	if (a->mode == NK_GMM_2D3D && end < a->M)
		zero_block(a, 0, end, a->M - end, 0, a->N);
	else if (a->mode == NK_GMM_3D2D && end < a->N)
		zero_block(a, 0, 0, a->M, end, a->N - end);
	return 0;
}
