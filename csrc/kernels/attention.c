/* attention.c - scaled dot-product attention, memory-efficient (never materializes Tq x Tk).
 *
 * out = dropout(softmax(scale * q k^T + bias)) v per (batch, query head), where bias is -inf for
 * keys hidden by `causal` (key j visible to query i iff j <= i) or by a false bool mask, or the
 * additive float mask.  GQA: query head h reads kv head h / (Hq / Hkv).
 *
 * Forward (FlashAttention style): a task is (b, h, block of 64 queries).  For each block of 64 keys:
 * S = scale * Q K^T + bias, then the online softmax (running row max m and sum l; earlier output
 * rescaled by exp(m_old - m_new)), then O += P V.  lse = m + log(l) is written for the backward.
 * Backward (FlashAttention-2): P = exp(S - lse) recomputed, D_i = rowsum(dO_i * O_i),
 * dP = dO V^T, dS = P * (dP - D).  Deterministic and race-free in two passes:
 *   pass 1, task (b, kv head, key block): dV = sum P^T dO, dK = scale * sum dS^T Q over every query
 *           block of every query head of the group;
 *   pass 2, task (b, query head, query block): dQ = scale * dS K.
 * Dropout: element (b, h, i, j) draws Philox4x32-10 with key = seed and counter = (offset + e, 0),
 * e = ((b*Hq + h)*Tq + i)*Tk + j, and is kept iff 53 bits of (w0, w1) >= p - the same mask nk_dropout
 * makes for a contiguous [B, Hq, Tq, Tk] tensor; callers advance their offset by
 * nk_random_offset_increment(B*Hq*Tq*Tk).  Backward regenerates it.
 * f32/bf16/f16 compute in f32 through the packed SGEMM on f32 tiles (per-thread workspace, nk_ws.h); f64 runs
 * the f64 reference (one query row at a time: memory-efficient but serial and slower).
 * Rows with no visible key give 0 output and lse = -inf (PyTorch's math path gives NaN there).
 */
/* The vectorizer's dynamic cost model for this file (what NK_VECTORIZE_FILE does), set before the
 * headers so that their inline helpers get the same options and stay inlinable. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "nk.h"
#include "nk_fp.h"
#include "nk_gemm_impl.h"
#include "nk_softmax_impl.h"
#include "nk_ws.h"
#include "nrt.h"


#define ATT_BQ 64             /* preferred query block */
#define ATT_BK 64             /* preferred key block */
#define ATT_WS_FLOATS (1 << 18) /* per-thread f32 workspace (1 MiB) */

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int64_t cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

/* ---- arguments, mask, dropout ----------------------------------------------------------------- */

static int att_check(const nk_attention_args_t *a, const char *who)
{
	if (!nk_fp_is_float(a->dtype)) {
		nrt_kernel_fail("%s: unsupported dtype %s", who, nk_dtype_name(a->dtype));
		return -1;
	}
	if (a->mask && a->mask_dtype != NK_BOOL && !nk_fp_is_float(a->mask_dtype)) {
		nrt_kernel_fail("%s: unsupported mask dtype %s", who, nk_dtype_name(a->mask_dtype));
		return -1;
	}
	if (a->B < 0 || a->Hq < 0 || a->Hkv < 0 || a->Tq < 0 || a->Tk < 0 || a->D < 0 || a->Dv < 0) {
		nrt_kernel_fail("%s: negative size", who);
		return -1;
	}
	if (a->Hq > 0 && (a->Hkv <= 0 || a->Hq % a->Hkv)) {
		nrt_kernel_fail("%s: %lld query heads are not a multiple of %lld kv heads", who, (long long)a->Hq,
				(long long)a->Hkv);
		return -1;
	}
	if (!(a->dropout_p >= 0 && a->dropout_p <= 1)) {
		nrt_kernel_fail("%s: dropout probability %g outside [0, 1]", who, a->dropout_p);
		return -1;
	}
	return 0;
}

/* Additive bias of element (b, h, i, j) from the mask and causality: 0, -inf or the float mask. */
static double att_bias(const nk_attention_args_t *a, int64_t b, int64_t h, int64_t i, int64_t j)
{
	int64_t o;

	if (a->causal && j > i)
		return -INFINITY;
	if (!a->mask)
		return 0;
	o = b * a->smask[0] + h * a->smask[1] + i * a->smask[2] + j * a->smask[3];
	if (a->mask_dtype == NK_BOOL)
		return ((const uint8_t *)a->mask)[o] ? 0 : -INFINITY;
	return nk_fp_loadd(a->mask, a->mask_dtype, o);
}

/* Dropout factor of element (b, h, i, j): 0 or 1/(1-p) (1 without dropout). */
static double att_drop(const nk_attention_args_t *a, int64_t b, int64_t h, int64_t i, int64_t j)
{
	uint64_t e;
	nk_philox_out_t w;

	if (a->dropout_p <= 0)
		return 1;
	e = (uint64_t)(((b * a->Hq + h) * a->Tq + i) * a->Tk + j);
	w = nk_philox4x32_10(a->seed, a->offset + e, 0);
	return nk_u64_to_unit_f64(w.v[0], w.v[1]) >= a->dropout_p ? 1.0 / (1.0 - a->dropout_p) : 0.0;
}

/* ---- tiles ------------------------------------------------------------------------------------- */

typedef struct {
	const nk_attention_args_t *a;
	const nk_attention_bwd_args_t *g; /* backward only */
	nk_gemm_isa_t isa;
	const nk_rowops_t *ops;
	int64_t bq, bk, nqb, nkb, group;
	float scale;
	atomic_int *failed; /* set by a task without workspace memory */
} att_plan_t;

/* Rows [r0, r0+n) of the (b, h) slice of a [B, H, T, cols] tensor with strides s into dst (ld). */
static void load_rows(float *dst, int64_t ld, const void *x, int dtype, const int64_t *s, int64_t b, int64_t h,
		      int64_t r0, int64_t n, int64_t cols)
{
	int64_t es = (int64_t)nk_fp_elem_size(dtype);
	const char *base = (const char *)x + (b * s[0] + h * s[1] + r0 * s[2]) * es;

	for (int64_t r = 0; r < n; r++)
		nk_block_load_f32(dst + r * ld, base + r * s[2] * es, s[3] * es, dtype, cols);
}

static void store_rows(void *x, int dtype, const int64_t *s, int64_t b, int64_t h, int64_t r0, int64_t n,
		       int64_t cols, const float *src, int64_t ld)
{
	int64_t es = (int64_t)nk_fp_elem_size(dtype);
	char *base = (char *)x + (b * s[0] + h * s[1] + r0 * s[2]) * es;

	for (int64_t r = 0; r < n; r++)
		nk_block_store_f32(base + r * s[2] * es, s[3] * es, dtype, src + r * ld, cols);
}

/* C (m x n, ldc) = alpha * A (m x k; rs_a, cs_a) @ B (k x n; rs_b, cs_b) + beta * C on f32 tiles. */
static void mm(const att_plan_t *p, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t rs_a,
	       int64_t cs_a, const float *B, int64_t rs_b, int64_t cs_b, float beta, float *C, int64_t ldc)
{
	nk_gemm_args_t g = { .dtype = NK_F32, .M = m, .N = n, .K = k, .batch = 1, .alpha = alpha, .beta = beta,
			     .A = A, .rs_a = rs_a, .cs_a = cs_a, .B = B, .rs_b = rs_b, .cs_b = cs_b,
			     .C = C, .rs_c = ldc, .cs_c = 1 };

	if (m > 0 && n > 0 && nk_gemm_packed_1t(&g, &p->isa))
		atomic_store(p->failed, 1);
}

/* S (mq x nk, ld bk) = scale * Q K^T + bias for query rows i0.. and keys j0.. of (b, h). */
static void scores(const att_plan_t *p, int64_t b, int64_t h, int64_t i0, int64_t mq, int64_t j0, int64_t nk,
		   const float *Qt, const float *Kt, float *S)
{
	const nk_attention_args_t *a = p->a;

	mm(p, mq, nk, a->D, p->scale, Qt, a->D, 1, Kt, 1, a->D, 0, S, p->bk);
	if (a->mask) {
		int64_t es = a->mask_dtype == NK_BOOL ? 1 : (int64_t)nk_fp_elem_size(a->mask_dtype);

		for (int64_t r = 0; r < mq; r++) {
			int64_t o = b * a->smask[0] + h * a->smask[1] + (i0 + r) * a->smask[2] + j0 * a->smask[3];
			float *s = S + r * p->bk;

			if (a->mask_dtype == NK_BOOL) {
				const uint8_t *mk = (const uint8_t *)a->mask + o;

				for (int64_t c = 0; c < nk; c++)
					s[c] = mk[c * a->smask[3]] ? s[c] : -INFINITY;
			} else {
				float bias[ATT_BK];

				nk_block_load_f32(bias, (const char *)a->mask + o * es, a->smask[3] * es, a->mask_dtype, nk);
				for (int64_t c = 0; c < nk; c++)
					s[c] += bias[c];
			}
		}
	}
	if (a->causal && j0 + nk - 1 > i0) /* keys after the query: j > i */
		for (int64_t r = 0; r < mq; r++)
			for (int64_t c = i0 + r - j0 + 1 < 0 ? 0 : i0 + r - j0 + 1; c < nk; c++)
				S[r * p->bk + c] = -INFINITY;
}

/* P (in S) *= dropout factor. */
static void apply_dropout(const att_plan_t *p, int64_t b, int64_t h, int64_t i0, int64_t mq, int64_t j0,
			  int64_t nk, float *S)
{
	if (p->a->dropout_p <= 0)
		return;
	for (int64_t r = 0; r < mq; r++)
		for (int64_t c = 0; c < nk; c++)
			S[r * p->bk + c] *= (float)att_drop(p->a, b, h, i0 + r, j0 + c);
}

/* Workspace floats for query/key blocks bq, bk: an upper bound of the forward and both backward
 * passes (Q, dO, O, dQ rows; K, V, dK, dV rows; S and dS tiles; lse, D, m, l). */
static int64_t att_need(int64_t bq, int64_t bk, int64_t D, int64_t Dv)
{
	return 2 * (bq + bk) * (D + Dv) + 2 * bq * bk + 4 * bq;
}

/* Block sizes such that the largest pass's tiles fit the workspace. */
static int att_plan(att_plan_t *p, const nk_attention_args_t *a, const char *who)
{
	int64_t bq = ATT_BQ, bk = ATT_BK;

	while ((bq > 1 || bk > 1) && att_need(bq, bk, a->D, a->Dv) > ATT_WS_FLOATS) {
		bq = bq > 1 ? bq / 2 : 1;
		bk = bk > 1 ? bk / 2 : 1;
	}
	if (att_need(bq, bk, a->D, a->Dv) > ATT_WS_FLOATS) {
		nrt_kernel_fail("%s: head dims %lld, %lld are too large", who, (long long)a->D, (long long)a->Dv);
		return -1;
	}
	p->a = a;
	p->isa = nk_gemm_isa_select();
	p->ops = nk_rowops();
	p->bq = bq;
	p->bk = bk;
	p->nqb = cdiv(a->Tq, bq);
	p->nkb = cdiv(a->Tk, bk);
	p->group = a->Hkv ? a->Hq / a->Hkv : 1;
	p->scale = (float)a->scale;
	return 0;
}

/* Keys [0, end) that any of query rows [i0, i0+mq) can see. */
static int64_t key_end(const nk_attention_args_t *a, int64_t i0, int64_t mq)
{
	return a->causal ? min64(a->Tk, i0 + mq) : a->Tk;
}

/* ---- forward ----------------------------------------------------------------------------------- */

/* Online softmax update of rows of S (mq x nk): S becomes P = exp(S - m_new), l and O rescaled. */
static void online_softmax(const att_plan_t *p, int64_t mq, int64_t nk, float *S, float *m, float *l, float *O)
{
	int64_t Dv = p->a->Dv;

	for (int64_t r = 0; r < mq; r++) {
		float *s = S + r * p->bk, mx = p->ops->max(s, nk), mnew, corr;

		mnew = mx > m[r] ? mx : m[r];
		if (mnew == -INFINITY) { /* nothing visible yet */
			memset(s, 0, (size_t)nk * sizeof(float));
			continue;
		}
		corr = nk_fp_expf(m[r] - mnew);
		l[r] = l[r] * corr + p->ops->exp_sum(s, nk, mnew);
		m[r] = mnew;
		if (corr != 1.0f)
			for (int64_t d = 0; d < Dv; d++)
				O[r * Dv + d] *= corr;
	}
}

static void att_fwd_block(const att_plan_t *p, float *ws, int64_t b, int64_t h, int64_t qb)
{
	const nk_attention_args_t *a = p->a;
	int64_t D = a->D, Dv = a->Dv, bq = p->bq, bk = p->bk, hk = h / p->group;
	int64_t i0 = qb * bq, mq = min64(bq, a->Tq - i0), jend = key_end(a, i0, mq);
	float *Qt = ws, *Kt = Qt + bq * D, *Vt = Kt + bk * D, *S = Vt + bk * Dv, *O = S + bq * bk;
	float *m = O + bq * Dv, *l = m + bq;
	float *lse = (float *)a->lse + (b * a->Hq + h) * a->Tq + i0;

	load_rows(Qt, D, a->q, a->dtype, a->sq, b, h, i0, mq, D);
	memset(O, 0, (size_t)(mq * Dv) * sizeof(float));
	for (int64_t r = 0; r < mq; r++)
		m[r] = -INFINITY, l[r] = 0;
	for (int64_t j0 = 0; j0 < jend; j0 += bk) {
		int64_t nk = min64(bk, jend - j0);

		load_rows(Kt, D, a->k, a->dtype, a->sk, b, hk, j0, nk, D);
		load_rows(Vt, Dv, a->v, a->dtype, a->sv, b, hk, j0, nk, Dv);
		scores(p, b, h, i0, mq, j0, nk, Qt, Kt, S);
		online_softmax(p, mq, nk, S, m, l, O);
		apply_dropout(p, b, h, i0, mq, j0, nk, S);
		mm(p, mq, Dv, nk, 1, S, bk, 1, Vt, Dv, 1, 1, O, Dv);
	}
	for (int64_t r = 0; r < mq; r++) {
		float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;

		for (int64_t d = 0; d < Dv; d++)
			O[r * Dv + d] *= inv;
		lse[r] = l[r] > 0 ? m[r] + logf(l[r]) : -INFINITY;
	}
	store_rows(a->out, a->dtype, a->so, b, h, i0, mq, Dv, O, Dv);
}

/* This thread's tile workspace; NULL (and the plan marked failed) without memory. */
static float *att_ws(const att_plan_t *p)
{
	float *ws = nk_ws_get(NK_WS_ATTENTION, ATT_WS_FLOATS * sizeof(float));

	if (!ws)
		atomic_store(p->failed, 1);
	return ws;
}

static int att_failed(atomic_int *failed, const char *who)
{
	if (!atomic_load(failed))
		return 0;
	nrt_kernel_fail("%s: out of host memory for the tile workspace", who);
	return -1;
}

static void att_fwd_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const att_plan_t *p = ctx;
	float *ws = att_ws(p);

	for (int64_t t = t0; t < t1 && ws; t++) {
		int64_t qb = t % p->nqb, bh = t / p->nqb;

		att_fwd_block(p, ws, bh / p->a->Hq, bh % p->a->Hq, qb);
	}
}

int nk_attention_run(void *args)
{
	const nk_attention_args_t *a = args;
	atomic_int failed = 0;
	att_plan_t p;
	int64_t ntasks;

	if (att_check(a, "attention"))
		return -1;
	if (nk_using_reference() || a->dtype == NK_F64)
		return nk_attention_ref(args);
	if (att_plan(&p, a, "attention"))
		return -1;
	p.failed = &failed;
	ntasks = a->B * a->Hq * p.nqb;
	if (ntasks > 0)
		nrt_parallel_for(ntasks, 1, att_fwd_tasks, &p);
	return att_failed(&failed, "attention");
}

/* ---- backward ---------------------------------------------------------------------------------- */

/* For query rows i0.. and keys j0.. of (b, h): S := dropped probabilities P*Z (for dV) and
 * dS := P * (dP*Z - D) (for dK, dQ), from the loaded Q, K, V, dO tiles, lse and D. */
static void bwd_tile(const att_plan_t *p, int64_t b, int64_t h, int64_t i0, int64_t mq, int64_t j0, int64_t nk,
		     const float *Qt, const float *Kt, const float *Vt, const float *dOt, const float *lse,
		     const float *Dr, float *S, float *dS)
{
	const nk_attention_args_t *a = p->a;
	int64_t bk = p->bk;

	scores(p, b, h, i0, mq, j0, nk, Qt, Kt, S);
	mm(p, mq, nk, a->Dv, 1, dOt, a->Dv, 1, Vt, 1, a->Dv, 0, dS, bk); /* dP*Z = dO V^T */
	for (int64_t r = 0; r < mq; r++) {
		float *s = S + r * bk, *ds = dS + r * bk, d = Dr[r];

		if (lse[r] == -INFINITY) { /* no visible key: P = 0 */
			memset(s, 0, (size_t)nk * sizeof(float));
			memset(ds, 0, (size_t)nk * sizeof(float));
			continue;
		}
		p->ops->exp_sum(s, nk, lse[r]); /* P = exp(S - lse) */
		if (a->dropout_p > 0) {
			for (int64_t c = 0; c < nk; c++) {
				float z = (float)att_drop(a, b, h, i0 + r, j0 + c);

				ds[c] = s[c] * (ds[c] * z - d);
				s[c] *= z;
			}
			continue;
		}
		for (int64_t c = 0; c < nk; c++)
			ds[c] = s[c] * (ds[c] - d);
	}
}

/* Loads Q, dO, O rows of (b, h) and computes lse and D = rowsum(dO * O). */
static void load_query_side(const att_plan_t *p, int64_t b, int64_t h, int64_t i0, int64_t mq, float *Qt,
			    float *dOt, float *Ot, float *lse, float *Dr)
{
	const nk_attention_bwd_args_t *g = p->g;
	const nk_attention_args_t *a = &g->f;
	const float *lsrc = (const float *)a->lse + (b * a->Hq + h) * a->Tq + i0;

	load_rows(Qt, a->D, a->q, a->dtype, a->sq, b, h, i0, mq, a->D);
	load_rows(dOt, a->Dv, g->dout, a->dtype, g->sdo, b, h, i0, mq, a->Dv);
	load_rows(Ot, a->Dv, a->out, a->dtype, a->so, b, h, i0, mq, a->Dv);
	for (int64_t r = 0; r < mq; r++) {
		float s = 0;

		for (int64_t d = 0; d < a->Dv; d++)
			s += dOt[r * a->Dv + d] * Ot[r * a->Dv + d];
		Dr[r] = s;
		lse[r] = lsrc[r];
	}
}

/* Pass 1: dK, dV of key block kb of kv head hk, summed over the group's query heads and all queries. */
static void att_bwd_kv_block(const att_plan_t *p, float *ws, int64_t b, int64_t hk, int64_t kb)
{
	const nk_attention_bwd_args_t *g = p->g;
	const nk_attention_args_t *a = &g->f;
	int64_t D = a->D, Dv = a->Dv, bq = p->bq, bk = p->bk;
	int64_t j0 = kb * bk, nk = min64(bk, a->Tk - j0);
	float *Kt = ws, *Vt = Kt + bk * D, *dK = Vt + bk * Dv, *dV = dK + bk * D;
	float *Qt = dV + bk * Dv, *dOt = Qt + bq * D, *Ot = dOt + bq * Dv, *S = Ot + bq * Dv, *dS = S + bq * bk;
	float *lse = dS + bq * bk, *Dr = lse + bq;
	/* with causality, queries before j0 see none of these keys */
	int64_t qstart = a->causal ? j0 / bq * bq : 0;

	load_rows(Kt, D, a->k, a->dtype, a->sk, b, hk, j0, nk, D);
	load_rows(Vt, Dv, a->v, a->dtype, a->sv, b, hk, j0, nk, Dv);
	memset(dK, 0, (size_t)(nk * D) * sizeof(float));
	memset(dV, 0, (size_t)(nk * Dv) * sizeof(float));
	for (int64_t h = hk * p->group; h < (hk + 1) * p->group; h++)
		for (int64_t i0 = qstart; i0 < a->Tq; i0 += bq) {
			int64_t mq = min64(bq, a->Tq - i0);

			load_query_side(p, b, h, i0, mq, Qt, dOt, Ot, lse, Dr);
			bwd_tile(p, b, h, i0, mq, j0, nk, Qt, Kt, Vt, dOt, lse, Dr, S, dS);
			mm(p, nk, Dv, mq, 1, S, 1, bk, dOt, Dv, 1, 1, dV, Dv);         /* dV += (PZ)^T dO */
			mm(p, nk, D, mq, p->scale, dS, 1, bk, Qt, D, 1, 1, dK, D);     /* dK += scale dS^T Q */
		}
	if (g->dk)
		store_rows(g->dk, a->dtype, g->sdk, b, hk, j0, nk, D, dK, D);
	if (g->dv)
		store_rows(g->dv, a->dtype, g->sdv, b, hk, j0, nk, Dv, dV, Dv);
}

/* Pass 2: dQ of query block qb of head h. */
static void att_bwd_q_block(const att_plan_t *p, float *ws, int64_t b, int64_t h, int64_t qb)
{
	const nk_attention_bwd_args_t *g = p->g;
	const nk_attention_args_t *a = &g->f;
	int64_t D = a->D, Dv = a->Dv, bq = p->bq, bk = p->bk, hk = h / p->group;
	int64_t i0 = qb * bq, mq = min64(bq, a->Tq - i0), jend = key_end(a, i0, mq);
	float *Qt = ws, *dOt = Qt + bq * D, *Ot = dOt + bq * Dv, *dQ = Ot + bq * Dv, *Kt = dQ + bq * D;
	float *Vt = Kt + bk * D, *S = Vt + bk * Dv, *dS = S + bq * bk, *lse = dS + bq * bk, *Dr = lse + bq;

	load_query_side(p, b, h, i0, mq, Qt, dOt, Ot, lse, Dr);
	memset(dQ, 0, (size_t)(mq * D) * sizeof(float));
	for (int64_t j0 = 0; j0 < jend; j0 += bk) {
		int64_t nk = min64(bk, jend - j0);

		load_rows(Kt, D, a->k, a->dtype, a->sk, b, hk, j0, nk, D);
		load_rows(Vt, Dv, a->v, a->dtype, a->sv, b, hk, j0, nk, Dv);
		bwd_tile(p, b, h, i0, mq, j0, nk, Qt, Kt, Vt, dOt, lse, Dr, S, dS);
		mm(p, mq, D, nk, p->scale, dS, bk, 1, Kt, D, 1, 1, dQ, D); /* dQ += scale dS K */
	}
	store_rows(g->dq, a->dtype, g->sdq, b, h, i0, mq, D, dQ, D);
}

static void att_bwd_kv_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const att_plan_t *p = ctx;
	float *ws = att_ws(p);

	for (int64_t t = t0; t < t1 && ws; t++) {
		int64_t kb = t % p->nkb, bh = t / p->nkb;

		att_bwd_kv_block(p, ws, bh / p->a->Hkv, bh % p->a->Hkv, kb);
	}
}

static void att_bwd_q_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const att_plan_t *p = ctx;
	float *ws = att_ws(p);

	for (int64_t t = t0; t < t1 && ws; t++) {
		int64_t qb = t % p->nqb, bh = t / p->nqb;

		att_bwd_q_block(p, ws, bh / p->a->Hq, bh % p->a->Hq, qb);
	}
}

int nk_attention_bwd_run(void *args)
{
	const nk_attention_bwd_args_t *g = args;
	atomic_int failed = 0;
	att_plan_t p;

	if (att_check(&g->f, "attention_backward"))
		return -1;
	if (nk_using_reference() || g->f.dtype == NK_F64)
		return nk_attention_bwd_ref(args);
	if (att_plan(&p, &g->f, "attention_backward"))
		return -1;
	p.g = g;
	p.failed = &failed;
	if ((g->dk || g->dv) && g->f.B * g->f.Hkv * p.nkb > 0)
		nrt_parallel_for(g->f.B * g->f.Hkv * p.nkb, 1, att_bwd_kv_tasks, &p);
	if (g->dq && g->f.B * g->f.Hq * p.nqb > 0)
		nrt_parallel_for(g->f.B * g->f.Hq * p.nqb, 1, att_bwd_q_tasks, &p);
	return att_failed(&failed, "attention_backward");
}

/* ---- reference: one query row at a time, f64, a materialized row of scores ---------------------- */

static double ld_at(const void *x, int dtype, const int64_t *s, int64_t b, int64_t h, int64_t i, int64_t d)
{
	return nk_fp_loadd(x, dtype, b * s[0] + h * s[1] + i * s[2] + d * s[3]);
}

static void st_at(void *x, int dtype, const int64_t *s, int64_t b, int64_t h, int64_t i, int64_t d, double v)
{
	nk_fp_stored(x, dtype, b * s[0] + h * s[1] + i * s[2] + d * s[3], v);
}

/* p[j] = softmax over visible keys of row (b, h, i) (all 0 when none is visible); returns false then. */
static bool ref_probs(const nk_attention_args_t *a, int64_t b, int64_t h, int64_t i, double *p, double *lse)
{
	int64_t hk = h / (a->Hq / a->Hkv);
	double mx = -INFINITY, sum = 0;

	for (int64_t j = 0; j < a->Tk; j++) {
		double s = 0, bias = att_bias(a, b, h, i, j);

		for (int64_t d = 0; d < a->D && bias != -INFINITY; d++)
			s += ld_at(a->q, a->dtype, a->sq, b, h, i, d) * ld_at(a->k, a->dtype, a->sk, b, hk, j, d);
		p[j] = bias == -INFINITY ? -INFINITY : s * a->scale + bias;
		mx = p[j] > mx ? p[j] : mx;
	}
	for (int64_t j = 0; j < a->Tk; j++) {
		p[j] = mx == -INFINITY ? 0 : exp(p[j] - mx);
		sum += p[j];
	}
	for (int64_t j = 0; j < a->Tk && sum > 0; j++)
		p[j] /= sum;
	*lse = sum > 0 ? mx + log(sum) : -INFINITY;
	return sum > 0;
}

int nk_attention_ref(void *args)
{
	const nk_attention_args_t *a = args;
	double *p, lse;

	if (att_check(a, "attention"))
		return -1;
	p = malloc((size_t)(a->Tk > 0 ? a->Tk : 1) * sizeof(double));
	if (!p) {
		nrt_kernel_fail("attention: out of host memory for the reference");
		return -1;
	}
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t h = 0; h < a->Hq; h++)
			for (int64_t i = 0; i < a->Tq; i++) {
				int64_t hk = h / (a->Hq / a->Hkv);

				ref_probs(a, b, h, i, p, &lse);
				((float *)a->lse)[(b * a->Hq + h) * a->Tq + i] = (float)lse;
				for (int64_t j = 0; j < a->Tk; j++)
					p[j] *= att_drop(a, b, h, i, j);
				for (int64_t d = 0; d < a->Dv; d++) {
					double o = 0;

					for (int64_t j = 0; j < a->Tk; j++)
						o += p[j] * ld_at(a->v, a->dtype, a->sv, b, hk, j, d);
					st_at(a->out, a->dtype, a->so, b, h, i, d, o);
				}
			}
	free(p);
	return 0;
}

/* One query row's contribution: dq row written, dK/dV accumulated (f64, [Hkv, Tk, D|Dv] of batch b). */
static void ref_bwd_row(const nk_attention_bwd_args_t *g, int64_t b, int64_t h, int64_t i, double *p, double *dp,
			double *dk, double *dv)
{
	const nk_attention_args_t *a = &g->f;
	int64_t hk = h / (a->Hq / a->Hkv);
	double lse, Di = 0;

	ref_probs(a, b, h, i, p, &lse);
	for (int64_t j = 0; j < a->Tk; j++) {
		double z = att_drop(a, b, h, i, j), s = 0;

		for (int64_t d = 0; d < a->Dv; d++)
			s += ld_at(g->dout, a->dtype, g->sdo, b, h, i, d) * ld_at(a->v, a->dtype, a->sv, b, hk, j, d);
		dp[j] = s * z;
		Di += p[j] * dp[j];
		for (int64_t d = 0; d < a->Dv; d++)
			dv[(hk * a->Tk + j) * a->Dv + d] += p[j] * z * ld_at(g->dout, a->dtype, g->sdo, b, h, i, d);
	}
	for (int64_t j = 0; j < a->Tk; j++)
		dp[j] = p[j] * (dp[j] - Di); /* dS */
	for (int64_t d = 0; d < a->D; d++) {
		double q = ld_at(a->q, a->dtype, a->sq, b, h, i, d), dq = 0;

		for (int64_t j = 0; j < a->Tk; j++) {
			dq += dp[j] * ld_at(a->k, a->dtype, a->sk, b, hk, j, d);
			dk[(hk * a->Tk + j) * a->D + d] += a->scale * dp[j] * q;
		}
		if (g->dq)
			st_at(g->dq, a->dtype, g->sdq, b, h, i, d, a->scale * dq);
	}
}

int nk_attention_bwd_ref(void *args)
{
	const nk_attention_bwd_args_t *g = args;
	const nk_attention_args_t *a = &g->f;
	size_t nk = (size_t)(a->Hkv * a->Tk * a->D), nv = (size_t)(a->Hkv * a->Tk * a->Dv);
	double *p, *dp, *dk, *dv;
	int rc = 0;

	if (att_check(a, "attention_backward"))
		return -1;
	p = malloc((size_t)(a->Tk + 1) * sizeof(double));
	dp = malloc((size_t)(a->Tk + 1) * sizeof(double));
	dk = malloc((nk + 1) * sizeof(double));
	dv = malloc((nv + 1) * sizeof(double));
	if (!p || !dp || !dk || !dv) {
		nrt_kernel_fail("attention_backward: out of host memory for the reference");
		rc = -1;
		goto free_buffers;
	}
	for (int64_t b = 0; b < a->B; b++) {
		memset(dk, 0, nk * sizeof(double));
		memset(dv, 0, nv * sizeof(double));
		for (int64_t h = 0; h < a->Hq; h++)
			for (int64_t i = 0; i < a->Tq; i++)
				ref_bwd_row(g, b, h, i, p, dp, dk, dv);
		for (int64_t hk = 0; hk < a->Hkv; hk++)
			for (int64_t j = 0; j < a->Tk; j++) {
				for (int64_t d = 0; d < a->D && g->dk; d++)
					st_at(g->dk, a->dtype, g->sdk, b, hk, j, d, dk[(hk * a->Tk + j) * a->D + d]);
				for (int64_t d = 0; d < a->Dv && g->dv; d++)
					st_at(g->dv, a->dtype, g->sdv, b, hk, j, d, dv[(hk * a->Tk + j) * a->Dv + d]);
			}
	}
free_buffers:
	free(p);
	free(dp);
	free(dk);
	free(dv);
	return rc;
}
