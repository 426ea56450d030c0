/* attention_varlen.c - variable-length attention (nk_attention_varlen.h): each packed sequence runs as one
 * batch element of the tiled attention kernels (attention.c) on strided views of the packed tensors, so
 * the numerics are those of scaled_dot_product_attention on that sequence alone.  The log-sum-exp moves
 * between the kernels' [Hq, Tq] per-sequence layout and the flash layout [Hq, total_q] through lse_tmp. */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_attention_varlen.h"
#include "nrt.h"

static int64_t cu_at(const nk_attention_varlen_args_t *a, const void *cu, int64_t i)
{
	return a->cu_dtype == NK_I64 ? ((const int64_t *)cu)[i] : ((const int32_t *)cu)[i];
}

/* The offsets are user data: check them all before any sequence runs. */
static int varlen_check(const nk_attention_varlen_args_t *a, const char *who)
{
	if (a->cu_dtype != NK_I32 && a->cu_dtype != NK_I64) {
		nrt_kernel_fail("%s: cu_seqlens must be int32 or int64, got %s", who, nk_dtype_name(a->cu_dtype));
		return -1;
	}
	if (cu_at(a, a->cu_q, 0) != 0 || cu_at(a, a->cu_k, 0) != 0) {
		nrt_kernel_fail("%s: cu_seqlens_q and cu_seqlens_k must start at 0, got %lld and %lld", who,
				(long long)cu_at(a, a->cu_q, 0), (long long)cu_at(a, a->cu_k, 0));
		return -1;
	}
	for (int64_t s = 0; s < a->nseq; s++) {
		int64_t q0 = cu_at(a, a->cu_q, s), q1 = cu_at(a, a->cu_q, s + 1);
		int64_t k0 = cu_at(a, a->cu_k, s), k1 = cu_at(a, a->cu_k, s + 1);
		if (q1 < q0 || k1 < k0 || q1 > a->total_q || k1 > a->total_k) {
			nrt_kernel_fail("%s: sequence %lld spans queries [%lld, %lld) and keys [%lld, %lld), outside the %lld query and "
					"%lld key tokens or decreasing", who, (long long)s, (long long)q0, (long long)q1, (long long)k0,
					(long long)k1, (long long)a->total_q, (long long)a->total_k);
			return -1;
		}
		if (q1 - q0 > a->max_q || k1 - k0 > a->max_k) {
			nrt_kernel_fail("%s: sequence %lld has %lld queries and %lld keys, more than max_q %lld / max_k %lld", who,
					(long long)s, (long long)(q1 - q0), (long long)(k1 - k0), (long long)a->max_q, (long long)a->max_k);
			return -1;
		}
		if (a->f.causal && q1 - q0 != k1 - k0) {
			nrt_kernel_fail("%s: causal attention of sequence %lld with %lld queries and %lld keys: only equal lengths are "
					"supported on neuron", who, (long long)s, (long long)(q1 - q0), (long long)(k1 - k0));
			return -1;
		}
	}
	return 0;
}

/* Sequence s as one batch element of the dense kernels: pointers moved to its first token, the
 * packed (token, head, dim) strides in the (head, token, dim) slots. */
static void seq_args(const nk_attention_varlen_args_t *a, int64_t s, nk_attention_args_t *g)
{
	size_t es = nk_dtype_size(a->f.dtype);
	int64_t q0 = cu_at(a, a->cu_q, s), k0 = cu_at(a, a->cu_k, s);

	*g = a->f;
	g->B = 1;
	g->Tq = cu_at(a, a->cu_q, s + 1) - q0;
	g->Tk = cu_at(a, a->cu_k, s + 1) - k0;
	g->mask = NULL;
	g->dropout_p = 0;
	g->q = (const char *)a->f.q + (size_t)(q0 * a->f.sq[2]) * es;
	g->k = (const char *)a->f.k + (size_t)(k0 * a->f.sk[2]) * es;
	g->v = (const char *)a->f.v + (size_t)(k0 * a->f.sv[2]) * es;
	g->out = (char *)a->f.out + (size_t)(q0 * a->f.so[2]) * es;
	g->sq[0] = g->sk[0] = g->sv[0] = g->so[0] = 0;
	g->lse = a->lse_tmp;
}

/* Zero rows [t0, t1) of a packed [tokens, H, D] tensor with element strides st (token, head, dim). */
static void zero_rows(void *p, int dtype, const int64_t st[4], int64_t t0, int64_t t1, int64_t H, int64_t D)
{
	size_t es = nk_dtype_size(dtype);

	for (int64_t t = t0; t < t1; t++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t d = 0; d < D; d++)
				memset((char *)p + (size_t)(t * st[2] + h * st[1] + d * st[3]) * es, 0, es);
}

int nk_attention_varlen_run(void *args)
{
	nk_attention_varlen_args_t *a = args;
	const int64_t Hq = a->f.Hq;

	if (varlen_check(a, "_flash_attention_forward"))
		return -1;
	for (int64_t s = 0; s < a->nseq; s++) {
		nk_attention_args_t g;
		seq_args(a, s, &g);
		if (g.Tq == 0)
			continue;
		if (nk_attention_run(&g))
			return -1;
		int64_t q0 = cu_at(a, a->cu_q, s);
		for (int64_t h = 0; h < Hq; h++)
			memcpy(a->lse + h * a->total_q + q0, a->lse_tmp + h * g.Tq, (size_t)g.Tq * sizeof(float));
	}
	int64_t end = cu_at(a, a->cu_q, a->nseq);
	zero_rows(a->f.out, a->f.dtype, a->f.so, end, a->total_q, Hq, a->f.Dv);
	for (int64_t h = 0; h < Hq; h++)
		for (int64_t t = end; t < a->total_q; t++)
			a->lse[h * a->total_q + t] = -INFINITY;
	return 0;
}

int nk_attention_varlen_bwd_run(void *args)
{
	nk_attention_varlen_bwd_args_t *b = args;
	const nk_attention_varlen_args_t *a = &b->v;
	const int64_t Hq = a->f.Hq, Hkv = a->f.Hkv;
	size_t es = nk_dtype_size(a->f.dtype);

	if (varlen_check(a, "_flash_attention_backward"))
		return -1;
	for (int64_t s = 0; s < a->nseq; s++) {
		nk_attention_bwd_args_t g;
		int64_t q0 = cu_at(a, a->cu_q, s), k0 = cu_at(a, a->cu_k, s);
		memset(&g, 0, sizeof g);
		seq_args(a, s, &g.f);
		if (g.f.Tq == 0 && g.f.Tk == 0)
			continue;
		for (int64_t h = 0; h < Hq; h++)
			memcpy(a->lse_tmp + h * g.f.Tq, a->lse + h * a->total_q + q0, (size_t)g.f.Tq * sizeof(float));
		g.dout = (const char *)b->dout + (size_t)(q0 * b->sdo[2]) * es;
		g.dq = (char *)b->dq + (size_t)(q0 * b->sdq[2]) * es;
		g.dk = (char *)b->dk + (size_t)(k0 * b->sdk[2]) * es;
		g.dv = (char *)b->dv + (size_t)(k0 * b->sdv[2]) * es;
		memcpy(g.sdo, b->sdo, sizeof g.sdo), memcpy(g.sdq, b->sdq, sizeof g.sdq);
		memcpy(g.sdk, b->sdk, sizeof g.sdk), memcpy(g.sdv, b->sdv, sizeof g.sdv);
		g.sdo[0] = g.sdq[0] = g.sdk[0] = g.sdv[0] = 0;
		if (nk_attention_bwd_run(&g))
			return -1;
	}
	zero_rows(b->dq, a->f.dtype, b->sdq, cu_at(a, a->cu_q, a->nseq), a->total_q, Hq, a->f.D);
	zero_rows(b->dk, a->f.dtype, b->sdk, cu_at(a, a->cu_k, a->nseq), a->total_k, Hkv, a->f.D);
	zero_rows(b->dv, a->f.dtype, b->sdv, cu_at(a, a->cu_k, a->nseq), a->total_k, Hkv, a->f.Dv);
	return 0;
}
