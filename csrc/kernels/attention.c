/* attention.c - scaled dot-product attention, memory-efficient (never materializes Tq x Tk).
 *
 * out = dropout(softmax(scale * q k^T + bias)) v per (batch, query head), where bias is -inf for
 * keys hidden by `causal` (key j visible to query i iff j <= i) or by a false bool mask, or the
 * additive float mask.  GQA: query head h reads kv head h / (Hq / Hkv).
 *
 * All products run on packed panels through the GEMM micro-kernel (nk_gemm_isa_t.sgemm, 14 x 32; an
 * 8-row kernel of the attops table for tail panels) without nk_gemm_* calls per tile: K and V of a
 * (batch, kv head) are packed once per chunk of keys and reused by every query block.
 * Forward (FlashAttention style): a task is (b, h, up to 512 queries); per block of W = 32 queries and
 * KB = 112 keys, S^T = scale K Q^T + bias is a "column tile" (keys as rows, queries as columns, so the
 * online softmax - running column max m and sum l, O^T rescaled by exp(m_old - m_new) - is all
 * vertical vector work), then O^T += V^T P^T.  lse = m + log(l) is written for the backward.
 * Backward (FlashAttention-2): P = exp(S - lse) recomputed, D_i = rowsum(dO_i * O_i),
 * dP = dO V^T, dS = P * (dP - D).  Deterministic and race-free:
 *   kv pass, task (b, kv head, key group): "row tiles" of 112 queries x 32 keys, S = scale Q K^T and
 *           dP = dO V^T, then dV^T += dO^T P and dK^T += scale Q^T dS over every query block of every
 *           query head of the group.  When one task holds all keys of its kv head (and there are at
 *           least two such tasks per thread) it also makes dQ = scale dS K (dS transposed into A
 *           panels), complete after each query block: one pass, five products per tile;
 *   otherwise a dq pass, task (b, query head, query group): column tiles, dQ^T += scale K^T dS^T.
 * Dropout: element (b, h, i, j) draws Philox4x32-10 with key = seed and counter = (offset + e, 0),
 * e = ((b*Hq + h)*Tq + i)*Tk + j, and is kept iff 53 bits of (w0, w1) >= p - the same mask nk_dropout
 * makes for a contiguous [B, Hq, Tq, Tk] tensor; callers advance their offset by
 * nk_random_offset_increment(B*Hq*Tq*Tk).  Backward regenerates it.
 * f32/f16 compute in f32 (packing converts; per-thread workspace, nk_workspace.h).  bf16 with the sbgemm
 * micro-kernel (AVX512-BF16): the forward and the dk/dv pass pack Q, K, V, dO as bf16 k-pairs straight
 * from memory and round the probabilities and dS to bf16 for their products (sums in f32, softmax and
 * the statistics in f32, as PyTorch's CPU flash attention for reduced precision); the dq pass of long
 * sequences stays in f32.  The tile operations
 * (softmax columns, exp, transposes, 8-row kernel) come in a portable and an AVX-512 table
 * (nk_attention_impl.h; tests/c/test_attention.c compares them).  f64 runs the f64 reference (one
 * query row at a time: memory-efficient but serial and slower).
 * Rows with no visible key give 0 output and lse = -inf (PyTorch's math path gives NaN there).
 * Prefetch: the forward and the dk/dv pass prefetch the next task's inputs (and the dk/dv pass the
 * next query block's Q, dO, O) a few cache lines per micro-kernel call (att_pf_t): packing a slice
 * straight from memory stalled on it.
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

#include "nk_dispatch_impl.h"
#include "nk.h"
#include "nk_attention_impl.h"
#include "nk_gemm_impl.h"
#include "nk_impl.h"
#include "nk_workspace.h"
#include "nrt.h"


#define ATT_BQ 64             /* preferred query block */
#define ATT_BK 64             /* preferred key block */
#define ATT_WS_FLOATS (1 << 18) /* per-thread f32 workspace (1 MiB) */

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

#define MR NK_GEMM_MR
#define W NK_ATT_W               /* tile width: queries (column tiles) or keys (row tiles) */
#define KB (8 * MR)              /* keys per column tile (forward, dq pass) */
#define QB1 (8 * MR)             /* queries per row tile (dk/dv pass) */
#define ATT_TASK_FLOATS (1 << 17) /* packed K/V chunk and per-task accumulators, each */

typedef struct {
	const nk_attention_args_t *a;
	const nk_attention_bwd_args_t *g; /* backward only */
	const nk_gemm_isa_t *isa;
	const nk_attops_t *ops;
	int64_t group, G, ngq, KC, KG, ngk;
	bool fused; /* backward in one pass: a dk/dv task covers all keys and also makes dq */
	bool bf;    /* bf16: the forward and the dk/dv pass multiply bf16 pair panels (sbgemm) */
	size_t ws_floats;
	float scale;
	atomic_int *failed; /* set by a task without workspace memory */
} att_plan_t;

static int64_t rup(int64_t x, int64_t m)
{
	return nk_cdiv(x, m) * m;
}

/* Element offset of row r of the (b, h) slice of a [B, H, T, cols] tensor with strides s. */
static const char *row_ptr(const void *x, int dtype, const int64_t *s, int64_t b, int64_t h, int64_t r)
{
	return (const char *)x + (b * s[0] + h * s[1] + r * s[2]) * (int64_t)nk_fp_elem_size(dtype);
}

/* Software prefetch of the next task's inputs, a few cache lines at a time between the products of
 * this task: a (batch, head) slice is usually in no cache, and packing it stalls on memory (measured
 * ~7x slower than from L1/L2) unless it was fetched while the previous task computed.  Only slices
 * whose rows are contiguous (one byte range) are prefetched. */
typedef struct {
	const char *p[4];
	int64_t len[4], n, i, off, per_step;
} att_pf_t;

static void pf_add(att_pf_t *f, const void *x, int dtype, const int64_t *s, int64_t b, int64_t h, int64_t r0, int64_t n,
		   int64_t cols)
{
	int64_t es = (int64_t)nk_fp_elem_size(dtype);

	if (!x || n <= 0 || cols <= 0 || s[3] != 1 || (n > 1 && s[2] != cols) || f->n == 4)
		return;
	f->p[f->n] = (const char *)x + (b * s[0] + h * s[1] + r0 * s[2]) * es;
	f->len[f->n++] = n * cols * es;
}

/* Spreads the ranges over `steps` calls of pf_step. */
static void pf_plan(att_pf_t *f, int64_t steps)
{
	int64_t lines = 0;

	for (int64_t r = 0; r < f->n; r++)
		lines += nk_cdiv(f->len[r], 64);
	f->per_step = steps > 0 ? nk_cdiv(lines, steps) : lines;
}

static inline void pf_step(att_pf_t *f)
{
	for (int64_t k = 0; k < f->per_step && f->i < f->n; k++) {
		__builtin_prefetch(f->p[f->i] + f->off, 0, 3);
		f->off += 64;
		if (f->off >= f->len[f->i])
			f->i++, f->off = 0;
	}
}

static void store_rows(void *x, int dtype, const int64_t *s, int64_t b, int64_t h, int64_t r0, int64_t n,
		       int64_t cols, const float *src, int64_t ld)
{
	int64_t es = (int64_t)nk_fp_elem_size(dtype);
	char *base = (char *)x + (b * s[0] + h * s[1] + r0 * s[2]) * es;

	for (int64_t r = 0; r < n; r++)
		nk_block_store_f32(base + r * s[2] * es, s[3] * es, dtype, src + r * ld, cols);
}

/* Rows [r0, r0+n) of a transposed accumulator Xt (cols x W, column c = row r0+c) scaled by mul[c]
 * (NULL: 1) into x; buf holds n x cols floats. */
static void store_transposed(const nk_attops_t *ops, void *x, int dtype, const int64_t *s, int64_t b, int64_t h,
			     int64_t r0, int64_t n, int64_t cols, const float *Xt, const float *mul, float *buf)
{
	for (int64_t d0 = 0; d0 < cols; d0 += 16) {
		int nd = (int)nk_min64(16, cols - d0);

		ops->tr(Xt + d0 * W, W, nd, n, buf + d0, cols, nd);
	}
	if (mul)
		for (int64_t c = 0; c < n; c++)
			for (int64_t d = 0; d < cols; d++)
				buf[c * cols + d] *= mul[c];
	store_rows(x, dtype, s, b, h, r0, n, cols, buf, cols);
}

/* The micro-kernel on packed panels: C (m x n, ld ldc) = alpha A B + beta C. */
static inline void ukr(const att_plan_t *p, int64_t k, const float *A, const float *B, float *C, int64_t ldc,
		       float alpha, float beta, int64_t m, int64_t n)
{
	if (m <= 8)
		p->ops->ukr8(k, A, B, C, ldc, alpha, beta, (int)m, (int)(n < W ? n : W));
	else
		p->isa->sgemm(k, A, B, C, ldc, 1, alpha, beta, (int)(m < MR ? m : MR), (int)(n < W ? n : W));
}

/* ---- bf16 pair panels (p->bf): the sbgemm micro-kernel (vdpbf16ps) on k-pairs, f32 sums.  Inputs are
 * packed as pairs straight from the bf16 tensors; the probabilities and dS (f32 tiles) are rounded to
 * bf16 for their products, as PyTorch's CPU flash attention does for reduced-precision inputs.  Same
 * panel geometry as the f32 path, k halved (an odd k padded with a zero). */
typedef uint32_t u32;

static inline void ukr_pairs(const att_plan_t *p, int64_t kp, const u32 *A, const u32 *B, float *C, int64_t ldc,
			     float alpha, float beta, int64_t m, int64_t n)
{
	p->isa->sbgemm(kp, A, B, C, ldc, 1, alpha, beta, (int)(m < MR ? m : MR), (int)(n < W ? n : W));
}

/* Rows r0.. (n) of x[(b, h)] by k = cols as A pair panels (panel t at dst + t*MR*ceil(cols/2)). */
static void pack_rows_a_pairs(const att_plan_t *p, const void *x, const int64_t *s, int64_t b, int64_t h, int64_t r0,
			      int64_t n, int64_t cols, u32 *dst)
{
	for (int64_t t = 0; t * MR < n; t++)
		p->isa->pack_a_pairs(row_ptr(x, NK_BF16, s, b, h, r0 + t * MR), s[2], s[3], (int)nk_min64(MR, n - t * MR),
				     cols, dst + t * MR * ((cols + 1) / 2));
}

/* x^T (cols x rows r0..r0+n) as A pair panels of MR columns of x by k = n rows, panel t at dst + t*MR*ldp. */
static void pack_cols_a_pairs(const att_plan_t *p, const void *x, const int64_t *s, int64_t b, int64_t h, int64_t r0,
			      int64_t n, int64_t cols, u32 *dst, int64_t ldp)
{
	for (int64_t t = 0; t * MR < cols; t++)
		p->isa->pack_a_pairs(row_ptr(x, NK_BF16, s, b, h, r0) + t * MR * s[3] * 2, s[3], s[2],
				     (int)nk_min64(MR, cols - t * MR), n, dst + t * MR * ldp);
}

/* x^T (cols x rows r0..r0+n, n <= W) as one B pair panel (k = cols). */
static void pack_b_rows_pairs(const att_plan_t *p, const void *x, const int64_t *s, int64_t b, int64_t h, int64_t r0,
			      int64_t n, int64_t cols, u32 *dst)
{
	p->isa->pack_b_pairs(row_ptr(x, NK_BF16, s, b, h, r0), s[3], s[2], cols, n, dst);
}

/* Packs x[(b, h), rows r0.., cols] as A panels of MR rows by k = cols (panel t at dst + t*MR*cols). */
static void pack_rows_a(const att_plan_t *p, const void *x, const int64_t *s, int64_t b, int64_t h, int64_t r0,
			int64_t n, int64_t cols, float *dst)
{
	int dt = p->a->dtype;
	int64_t es = (int64_t)nk_fp_elem_size(dt);

	if (dt == NK_F32 && s[3] == 1) { /* transposes of MR rows */
		const float *x0 = (const float *)row_ptr(x, dt, s, b, h, r0);

		for (int64_t t = 0; t * MR < n; t++)
			p->ops->tr(x0 + t * MR * s[2], s[2], nk_min64(MR, n - t * MR), cols, dst + t * MR * cols, MR, MR);
		return;
	}
	for (int64_t t = 0; t * MR < n; t++)
		p->isa->pack_a(row_ptr(x, dt, s, b, h, r0) + t * MR * s[2] * es, dt, s[2], s[3],
			       (int)nk_min64(MR, n - t * MR), cols, dst + t * MR * cols);
}

/* Packs x^T (cols x rows r0..r0+n) as A panels of MR columns of x by k = n rows, panel t at dst + t*MR*ld. */
static void pack_cols_a(const att_plan_t *p, const void *x, const int64_t *s, int64_t b, int64_t h, int64_t r0,
			int64_t n, int64_t cols, float *dst, int64_t ld)
{
	int dt = p->a->dtype;
	int64_t es = (int64_t)nk_fp_elem_size(dt);

	/* f32 with unit column stride: MR consecutive columns of each row, the packer's masked copy */
	for (int64_t t = 0; t * MR < cols; t++)
		p->isa->pack_a(row_ptr(x, dt, s, b, h, r0) + t * MR * s[3] * es, dt, s[3], s[2],
			       (int)nk_min64(MR, cols - t * MR), n, dst + t * MR * ld);
}

/* Packs x^T (cols x rows r0..r0+n, n <= W) as one B panel: dst[d*W + c] = x[r0 + c][d], zero for c >= n. */
static void pack_b_rows(const att_plan_t *p, const void *x, const int64_t *s, int64_t b, int64_t h, int64_t r0,
			int64_t n, int64_t cols, float *dst)
{
	int dt = p->a->dtype;

	if (dt == NK_F32 && s[3] == 1) { /* two transposes of 16 rows */
		const float *x0 = (const float *)row_ptr(x, dt, s, b, h, r0);

		for (int64_t hf = 0; hf < W; hf += 16)
			p->ops->tr(x0 + hf * s[2], s[2], n - hf < 0 ? 0 : nk_min64(16, n - hf), cols, dst + hf, W, 16);
		return;
	}
	p->isa->pack_b(row_ptr(x, dt, s, b, h, r0), dt, s[3], s[2], cols, n, dst);
}

/* Bias of the mask and causality on a tile of scores.  Column tiles (keys_rows): element (r, c) is key
 * j0+r of query i0+c; row tiles: query i0+r, key j0+c.  nr rows, nc valid columns. */
static void add_bias(const att_plan_t *p, int64_t b, int64_t h, float *S, bool keys_rows, int64_t i0, int64_t j0,
		     int64_t nr, int64_t nc)
{
	const nk_attention_args_t *a = p->a;
	int64_t ilast = i0 + (keys_rows ? nc : nr) - 1, jlast = j0 + (keys_rows ? nr : nc) - 1;

	if (a->mask) {
		int64_t es = a->mask_dtype == NK_BOOL ? 1 : (int64_t)nk_fp_elem_size(a->mask_dtype);
		int64_t si = a->smask[2], sj = a->smask[3];
		const char *base = (const char *)a->mask + (b * a->smask[0] + h * a->smask[1]) * es;

		/* along a tile row: mask stride sc from offset o0 of the row */
		int64_t sc = keys_rows ? si : sj;

		for (int64_t r = 0; r < nr; r++) {
			int64_t o0 = keys_rows ? i0 * si + (j0 + r) * sj : (i0 + r) * si + j0 * sj;
			float *s = S + r * W, bias[W];

			if (a->mask_dtype == NK_BOOL) {
				const uint8_t *mk = (const uint8_t *)base + o0;

				if (sc == 0) { /* the same for the whole row (a padding mask) */
					if (!mk[0])
						for (int64_t c = 0; c < nc; c++)
							s[c] = -INFINITY;
				} else if (sc == 1) {
					for (int64_t c = 0; c < nc; c++)
						s[c] = mk[c] ? s[c] : -INFINITY;
				} else {
					for (int64_t c = 0; c < nc; c++)
						s[c] = mk[c * sc] ? s[c] : -INFINITY;
				}
				continue;
			}
			if (sc == 0) {
				float v = nk_fp_loadf(base, a->mask_dtype, o0);

				for (int64_t c = 0; c < nc; c++)
					s[c] += v;
				continue;
			}
			nk_block_load_f32(bias, base + o0 * es, sc * es, a->mask_dtype, nc);
			for (int64_t c = 0; c < nc; c++)
				s[c] += bias[c];
		}
	}
	if (a->causal && jlast > i0) { /* some key after some query: j > i */
		if (keys_rows) /* row r: queries i < j0 + r */
			for (int64_t r = i0 + 1 - j0 > 0 ? i0 + 1 - j0 : 0; r < nr; r++)
				for (int64_t c = 0; c < nc && i0 + c < j0 + r; c++)
					S[r * W + c] = -INFINITY;
		else /* row r: keys j > i0 + r */
			for (int64_t r = 0; r < nr; r++)
				for (int64_t c = i0 + r + 1 - j0 > 0 ? i0 + r + 1 - j0 : 0; c < nc; c++)
					S[r * W + c] = -INFINITY;
	}
	(void)ilast;
}

/* Dropout on the probabilities of a column tile (nr keys x nc queries). */
static void dropout_cols(const att_plan_t *p, int64_t b, int64_t h, float *S, int64_t i0, int64_t j0, int64_t nr,
			 int64_t nc)
{
	for (int64_t r = 0; r < nr; r++)
		for (int64_t c = 0; c < nc; c++)
			S[r * W + c] *= (float)att_drop(p->a, b, h, i0 + c, j0 + r);
}

/* Backward element ops with dropout (portable): P = exp(S - lse), dS = P (dP Z - dd), S := P Z. */
static void bwd_dropout(const att_plan_t *p, int64_t b, int64_t h, float *S, float *dP, bool keys_rows, int64_t i0,
			int64_t j0, int64_t nr, int64_t nc, const float *lse, const float *dd)
{
	for (int64_t r = 0; r < nr; r++)
		for (int64_t c = 0; c < W; c++) {
			int64_t qi = keys_rows ? c : r;
			float *s = S + r * W + c, *dp = dP + r * W + c;
			float pr = lse[qi] == -INFINITY ? 0.0f : nk_fp_expf(*s - lse[qi]), z = 1;

			if (c < nc)
				z = (float)att_drop(p->a, b, h, keys_rows ? i0 + c : i0 + r, keys_rows ? j0 + r : j0 + c);
			*dp = pr * (*dp * z - dd[qi]);
			*s = pr * z;
		}
}

/* Block sizes and workspace for the forward (G, KC), dq pass (G, KC) and dk/dv pass (KG). */
static int att_plan(att_plan_t *p, const nk_attention_args_t *a, const nk_gemm_isa_t *isa, const nk_attops_t *ops)
{
	int64_t D = a->D, Dv = a->Dv, Dr = rup(D, MR), Dvr = rup(Dv, MR), G, KC, KG, nthr = nrt_num_threads();
	int64_t per_key = D + Dv + (Dr > Dvr ? Dr : Dvr), fwd_ws, dq_ws, kv_ws;

	memset(p, 0, sizeof *p);
	p->a = a;
	p->isa = isa;
	p->ops = ops;
	p->group = a->Hkv ? a->Hq / a->Hkv : 1;
	p->scale = (float)a->scale;
	/* keys per packed chunk: K, V (and K^T) panels of a chunk within ATT_TASK_FLOATS */
	KC = ATT_TASK_FLOATS / (KB * per_key) * KB;
	p->KC = KC < KB ? KB : KC > 16 * KB ? 16 * KB : KC;
	/* queries per task: packed Q, dO and the accumulators within ATT_TASK_FLOATS, at most 512, and
	 * enough tasks for the threads */
	G = ATT_TASK_FLOATS / (W * (D + Dv + 4)) * W;
	G = G < W ? W : G > 512 ? 512 : G;
	while (G > W && a->B * a->Hq * nk_cdiv(a->Tq, G) < 4 * nthr)
		G = rup(G / 2, W);
	p->G = G;
	p->ngq = nk_cdiv(a->Tq, G);
	/* keys per dk/dv task: packed K, V and the dK, dV accumulators */
	KG = ATT_TASK_FLOATS / (W * 2 * (D + Dv)) * W;
	KG = KG < W ? W : KG > 512 ? 512 : KG;
	while (KG > W && a->B * a->Hkv * nk_cdiv(a->Tk, KG) < 4 * nthr)
		KG = rup(KG / 2, W);
	/* one pass when a task can hold all keys (K, V panels both ways and dK, dV) and there are enough
	 * (batch, kv head) tasks; a fixed rule (not the thread count) so that the sums, and with them the
	 * results, do not depend on the number of threads */
	p->fused = a->Tk > 0 && a->Tk * (2 * (D + Dv) + rup(D, W)) <= (1 << 20) && a->B * a->Hkv >= 8;
	if (p->fused)
		KG = rup(a->Tk > 0 ? a->Tk : 1, W);
	p->KG = KG;
	p->ngk = nk_cdiv(a->Tk, KG);
	fwd_ws = p->KC * per_key + (G / W) * W * (D + Dv + 2) + KB * W + W * Dv;
	dq_ws = p->KC * per_key + (G / W) * W * (D + Dv + D + 2) + 2 * KB * W + W * D + Dv;
	kv_ws = (KG / W) * W * (2 * (D + Dv) + rup(D, W)) + QB1 * (D + Dv) + QB1 * W + QB1 * D + (Dr + Dvr) * QB1 + 2 * QB1 * W + 2 * QB1 + W * D +
		W * Dv + 2 * Dv;
	/* bf16: the probabilities (and dS) as pair panels */
	p->bf = a->dtype == NK_BF16 && isa->sbgemm && isa->pack_a_pairs && isa->pack_b_pairs && ops->b_pairs &&
		ops->a_pairs;
	fwd_ws += KB * W / 2 + 16;
	kv_ws += QB1 * W + 16;
	fwd_ws = fwd_ws > dq_ws ? fwd_ws : dq_ws;
	p->ws_floats = (size_t)(fwd_ws > kv_ws ? fwd_ws : kv_ws) + 64;
	return 0;
}

/* This thread's tile workspace; NULL (and the plan marked failed) without memory. */
static float *att_ws(const att_plan_t *p)
{
	float *ws = nk_ws_get(NK_WS_ATTENTION, p->ws_floats * sizeof(float));

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

/* 64-byte aligned carve of n floats from *ws. */
static float *carve(float **ws, int64_t n)
{
	float *r = *ws;

	*ws += rup(n, 16);
	return r;
}

/* ---- forward ----------------------------------------------------------------------------------- */

/* The inputs of forward task t (its queries, the keys and values it reads) into f. */
static void att_fwd_pf(const att_plan_t *p, int64_t t, att_pf_t *f)
{
	const nk_attention_args_t *a = p->a;
	int64_t g = t % p->ngq, bh = t / p->ngq, b = bh / a->Hq, h = bh % a->Hq, hk = h / p->group;
	int64_t g0 = g * p->G, gq = nk_min64(p->G, a->Tq - g0), kend = a->causal ? nk_min64(a->Tk, g0 + gq) : a->Tk;

	memset(f, 0, sizeof *f);
	if (t < 0)
		return;
	pf_add(f, a->q, a->dtype, a->sq, b, h, g0, gq, a->D);
	pf_add(f, a->k, a->dtype, a->sk, b, hk, 0, nk_min64(kend, p->KC), a->D);
	pf_add(f, a->v, a->dtype, a->sv, b, hk, 0, nk_min64(kend, p->KC), a->Dv);
}

/* Queries [g*G, g*G + G) of (b, h): for each chunk of keys, K (A panels of MR keys by D) and V^T (A
 * panels of MR value dims by the chunk's keys) are packed once; per block of W queries and KB keys
 * S^T = scale K Q^T (column tile), online softmax, O^T += V^T P^T. */
static void att_fwd_task(const att_plan_t *p, float *ws, int64_t b, int64_t h, int64_t g, int64_t next)
{
	const nk_attention_args_t *a = p->a;
	int64_t D = a->D, Dv = a->Dv, hk = h / p->group, KC = p->KC;
	int64_t g0 = g * p->G, gq = nk_min64(p->G, a->Tq - g0), nqb = nk_cdiv(gq, W);
	int64_t kend = a->causal ? nk_min64(a->Tk, g0 + gq) : a->Tk;
	float *Kp = carve(&ws, KC * D), *Vp = carve(&ws, rup(Dv, MR) * KC), *Qp = carve(&ws, nqb * D * W);
	float *Ot = carve(&ws, nqb * Dv * W), *m = carve(&ws, nqb * W), *l = carve(&ws, nqb * W);
	float *S = carve(&ws, KB * W), *buf = carve(&ws, W * Dv);
	u32 *Pw = p->bf ? (u32 *)carve(&ws, KB * W / 2) : NULL;
	int64_t ntiles = 0, Dp = (D + 1) / 2;
	att_pf_t pf;

	/* the next task's inputs, spread over this task's tiles (a step per product) */
	att_fwd_pf(p, next, &pf);
	for (int64_t c0 = 0; c0 < kend; c0 += KC)
		for (int64_t qb = 0; qb < nqb; qb++) {
			int64_t i0 = g0 + qb * W, jend = a->causal ? nk_min64(nk_min64(c0 + KC, kend), i0 + W) : nk_min64(c0 + KC, kend);

			ntiles += jend > c0 ? nk_cdiv(jend - c0, KB) : 0;
		}
	pf_plan(&pf, ntiles * (KB / MR + nk_cdiv(Dv, MR)));
	for (int64_t qb = 0; qb < nqb; qb++)
		if (p->bf)
			pack_b_rows_pairs(p, a->q, a->sq, b, h, g0 + qb * W, nk_min64(W, a->Tq - g0 - qb * W), D,
					  (u32 *)Qp + qb * Dp * W);
		else
			pack_b_rows(p, a->q, a->sq, b, h, g0 + qb * W, nk_min64(W, a->Tq - g0 - qb * W), D, Qp + qb * D * W);
	memset(Ot, 0, (size_t)(nqb * Dv * W) * sizeof(float));
	for (int64_t c = 0; c < nqb * W; c++)
		m[c] = -INFINITY, l[c] = 0;
	for (int64_t c0 = 0; c0 < kend; c0 += KC) {
		int64_t nc = nk_min64(KC, kend - c0);

		if (p->bf) {
			pack_rows_a_pairs(p, a->k, a->sk, b, hk, c0, nc, D, (u32 *)Kp);
			pack_cols_a_pairs(p, a->v, a->sv, b, hk, c0, nc, Dv, (u32 *)Vp, KC / 2);
		} else {
			pack_rows_a(p, a->k, a->sk, b, hk, c0, nc, D, Kp);
			pack_cols_a(p, a->v, a->sv, b, hk, c0, nc, Dv, Vp, KC);
		}
		for (int64_t qb = 0; qb < nqb; qb++) {
			int64_t i0 = g0 + qb * W, nq = nk_min64(W, a->Tq - i0);
			int64_t jend = a->causal ? nk_min64(c0 + nc, i0 + nq) : c0 + nc;
			float *Q = Qp + qb * D * W, *O = Ot + qb * Dv * W;


			for (int64_t j0 = c0; j0 < jend; j0 += KB) {
				int64_t nk = nk_min64(KB, jend - j0);

				for (int64_t r = 0; r < KB; r += MR) {
					if (r < nk && p->bf)
						ukr_pairs(p, Dp, (u32 *)Kp + (j0 - c0 + r) * Dp, (u32 *)Qp + qb * Dp * W, S + r * W, W,
							  p->scale, 0, MR, W);
					else if (r < nk)
						ukr(p, D, Kp + (j0 - c0 + r) * D, Q, S + r * W, W, p->scale, 0, MR, W);
					pf_step(&pf);
				}
				add_bias(p, b, h, S, true, i0, j0, nk, nq);
				p->ops->fwd_cols(S, nk, m + qb * W, l + qb * W, O, Dv);
				if (a->dropout_p > 0)
					dropout_cols(p, b, h, S, i0, j0, nk, nq);
				if (p->bf)
					p->ops->b_pairs(S, nk, Pw);
				for (int64_t t = 0; t * MR < Dv; t++) {
					if (p->bf) {
						/* k-pairs of keys j0.. (j0 - c0 is a multiple of KB, so even).  An odd nk
						 * only happens where the block ends at the chunk's end (a query block ends
						 * at an even key otherwise), so its last pair's partner is the packer's
						 * zero, never a key these queries cannot see */
						ukr_pairs(p, (nk + 1) / 2, (const u32 *)Vp + t * MR * (KC / 2) + (j0 - c0) / 2 * MR,
							  Pw, O + t * MR * W, W, 1, 1, Dv - t * MR, W);
					} else {
						ukr(p, nk, Vp + t * MR * KC + (j0 - c0) * MR, S, O + t * MR * W, W, 1, 1, Dv - t * MR,
						    W);
					}
					pf_step(&pf);
				}
			}
		}
	}
	for (int64_t qb = 0; qb < nqb; qb++) {
		int64_t i0 = g0 + qb * W, nq = nk_min64(W, a->Tq - i0);
		float *lse = (float *)a->lse + (b * a->Hq + h) * a->Tq + i0, *lq = l + qb * W, inv[W];

		for (int64_t c = 0; c < nq; c++) {
			inv[c] = lq[c] > 0 ? 1.0f / lq[c] : 0.0f;
			lse[c] = lq[c] > 0 ? m[qb * W + c] + logf(lq[c]) : -INFINITY;
		}
		store_transposed(p->ops, a->out, a->dtype, a->so, b, h, i0, nq, Dv, Ot + qb * Dv * W, inv, buf);
	}
}

static void att_fwd_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const att_plan_t *p = ctx;
	float *ws = att_ws(p);

	for (int64_t t = t0; t < t1 && ws; t++) {
		int64_t g = t % p->ngq, bh = t / p->ngq;

		att_fwd_task(p, ws, bh / p->a->Hq, bh % p->a->Hq, g, t + 1 < t1 ? t + 1 : -1);
	}
}

int nk_attention_tiled(const nk_attention_args_t *a, const nk_gemm_isa_t *isa, const nk_attops_t *ops)
{
	atomic_int failed = 0;
	att_plan_t p;
	int64_t ntasks;

	if (att_check(a, "attention"))
		return -1;
	if (a->dtype == NK_F64)
		return nk_attention_ref((void *)a);
	att_plan(&p, a, isa, ops);
	p.failed = &failed;
	ntasks = a->B * a->Hq * p.ngq;
	if (ntasks > 0 && a->Dv > 0)
		nrt_parallel_for(ntasks, 1, att_fwd_tasks, &p);
	else if (ntasks > 0) /* Dv = 0: only lse */
		return nk_attention_ref((void *)a);
	return att_failed(&failed, "attention");
}

static const nk_attops_t *att_best_ops(void)
{
	return nk_kernels()->attention;
}

int nk_attention_run(void *args)
{
	const nk_attention_args_t *a = args;
	nk_gemm_isa_t isa;

	if (att_check(a, "attention"))
		return -1;
	if (nk_using_reference() || a->dtype == NK_F64)
		return nk_attention_ref(args);
	isa = nk_gemm_isa_select();
	return nk_attention_tiled(a, &isa, att_best_ops());
}

/* ---- backward ---------------------------------------------------------------------------------- */

/* lse and dd = rowsum(dO * O) of query rows i0..i0+n of (b, h); entries n..W-1 (if pad) get -inf, 0. */
static void query_stats(const att_plan_t *p, int64_t b, int64_t h, int64_t i0, int64_t n, int64_t pad, float *lse,
			float *dd, float *rows)
{
	const nk_attention_bwd_args_t *g = p->g;
	const nk_attention_args_t *a = &g->f;
	const float *lsrc = (const float *)a->lse + (b * a->Hq + h) * a->Tq + i0;
	int64_t es = (int64_t)nk_fp_elem_size(a->dtype);

	if (a->dtype == NK_F32 && g->sdo[3] == 1 && a->so[3] == 1) { /* in place, 16 partial sums */
		for (int64_t r = 0; r < n; r++) {
			const float *x = (const float *)row_ptr(g->dout, a->dtype, g->sdo, b, h, i0 + r);
			const float *y = (const float *)row_ptr(a->out, a->dtype, a->so, b, h, i0 + r);
			float acc[16] = { 0 }, s = 0;
			int64_t d = 0;

			for (; d + 16 <= a->Dv; d += 16)
				for (int j = 0; j < 16; j++)
					acc[j] += x[d + j] * y[d + j];
			for (; d < a->Dv; d++)
				s += x[d] * y[d];
			for (int j = 0; j < 16; j++)
				s += acc[j];
			dd[r] = s;
			lse[r] = lsrc[r];
		}
		for (int64_t r = n; r < pad; r++)
			dd[r] = 0, lse[r] = -INFINITY;
		return;
	}
	for (int64_t r = 0; r < n; r++) {
		float s = 0;

		nk_block_load_f32(rows, row_ptr(g->dout, a->dtype, g->sdo, b, h, i0 + r), g->sdo[3] * es, a->dtype, a->Dv);
		nk_block_load_f32(rows + a->Dv, row_ptr(a->out, a->dtype, a->so, b, h, i0 + r), a->so[3] * es, a->dtype,
				  a->Dv);
		for (int64_t d = 0; d < a->Dv; d++)
			s += rows[d] * rows[a->Dv + d];
		dd[r] = s;
		lse[r] = lsrc[r];
	}
	for (int64_t r = n; r < pad; r++)
		dd[r] = 0, lse[r] = -INFINITY;
}

/* Rows of query block (h, i0) that a dk/dv task reads into f: Q, dO and O. */
static void kv_block_pf(const att_plan_t *p, int64_t b, int64_t h, int64_t i0, att_pf_t *f)
{
	const nk_attention_bwd_args_t *g = p->g;
	const nk_attention_args_t *a = &g->f;
	int64_t nq = nk_min64(QB1, a->Tq - i0);

	memset(f, 0, sizeof *f);
	if (b < 0 || nq <= 0)
		return;
	pf_add(f, a->q, a->dtype, a->sq, b, h, i0, nq, a->D);
	pf_add(f, g->dout, a->dtype, g->sdo, b, h, i0, nq, a->Dv);
	pf_add(f, a->out, a->dtype, a->so, b, h, i0, nq, a->Dv);
}

/* Products (pf_step calls) of query block i0 against keys [j0g, j0g + nkg) in att_bwd_kv_task. */
static int64_t kv_block_steps(const att_plan_t *p, int64_t j0g, int64_t nkg, int64_t i0, int64_t nq)
{
	const nk_attention_args_t *a = &p->g->f;
	int64_t steps = 0;

	for (int64_t j0 = j0g; j0 < j0g + nkg; j0 += W) {
		int64_t r0 = a->causal && j0 > i0 ? (j0 - i0) / MR * MR : 0;

		if (a->causal && j0 > i0 + nq - 1)
			break;
		steps += nk_cdiv(nq - r0, MR) + nk_cdiv(a->Dv, MR) + nk_cdiv(a->D, MR);
	}
	return steps;
}

/* The scratch and the fixed facts of one dK, dV task (att_bwd_kv_task). */
typedef struct {
	int64_t b, hk, D, Dv, Dp, Dvp, j0g, nkg, nkp, ndc, qstart;
	bool bf, fq;
	float *Kb, *Vb, *dKt, *dVt, *Qa, *dOa, *QTa, *dOTa, *S, *dP, *lse, *dd, *buf, *rows, *Kn, *dSa, *dQ;
	u32 *Pw, *dSw;
	att_pf_t pft, pfq; /* prefetch: the next task's K, V over the whole task, the next query block's rows */
} kv_task_t;

static void kv_carve(float *ws, kv_task_t *t)
{
	int64_t D = t->D, Dv = t->Dv, nkp = t->nkp, Dr = rup(D, MR), Dvr = rup(Dv, MR);

	t->Kb = carve(&ws, nkp * D * W), t->Vb = carve(&ws, nkp * Dv * W);
	t->dKt = carve(&ws, nkp * D * W), t->dVt = carve(&ws, nkp * Dv * W);
	t->Qa = carve(&ws, QB1 * D), t->dOa = carve(&ws, QB1 * Dv), t->QTa = carve(&ws, Dr * QB1);
	t->dOTa = carve(&ws, Dvr * QB1), t->S = carve(&ws, QB1 * W), t->dP = carve(&ws, QB1 * W);
	t->lse = carve(&ws, QB1), t->dd = carve(&ws, QB1), t->buf = carve(&ws, W * (D > Dv ? D : Dv));
	t->rows = carve(&ws, 2 * Dv);
	t->Kn = t->fq ? carve(&ws, nkp * t->ndc * W * W) : NULL, t->dSa = t->fq ? carve(&ws, QB1 * W) : NULL;
	t->dQ = t->fq ? carve(&ws, QB1 * D) : NULL;
	/* bf16: pair panels in the same buffers (k halved), and P, dS as B pair panels */
	t->Pw = t->bf ? (u32 *)carve(&ws, QB1 * W / 2) : NULL, t->dSw = t->bf ? (u32 *)carve(&ws, QB1 * W / 2) : NULL;
}

/* Pack step, keys: K^T, V^T as B panels of W keys (and K as B panels of its D columns for the fused
 * dQ), once per task; dK^T, dV^T cleared. */
static void kv_pack_keys(const att_plan_t *p, kv_task_t *t)
{
	const nk_attention_args_t *a = &p->g->f;
	int64_t b = t->b, hk = t->hk, D = t->D, Dv = t->Dv, W2 = W / 2;

	for (int64_t kp = 0; kp < t->nkp; kp++) {
		int64_t nkk = nk_min64(W, t->nkg - kp * W), j = t->j0g + kp * W;

		if (t->bf) {
			pack_b_rows_pairs(p, a->k, a->sk, b, hk, j, nkk, D, (u32 *)t->Kb + kp * t->Dp * W);
			pack_b_rows_pairs(p, a->v, a->sv, b, hk, j, nkk, Dv, (u32 *)t->Vb + kp * t->Dvp * W);
			if (t->fq) /* K rows as B pair panels (pairs of keys) of W of its D columns, panel c at + c*ceil(nkk/2)*W */
				p->isa->pack_b_pairs(row_ptr(a->k, a->dtype, a->sk, b, hk, j), a->sk[2], a->sk[3], nkk, D,
						     (u32 *)t->Kn + kp * t->ndc * W * W2);
			continue;
		}
		pack_b_rows(p, a->k, a->sk, b, hk, j, nkk, D, t->Kb + kp * D * W);
		pack_b_rows(p, a->v, a->sv, b, hk, j, nkk, Dv, t->Vb + kp * Dv * W);
		if (t->fq) /* K rows as B panels of W of its D columns, panel c at + c*nkk*W */
			p->isa->pack_b(row_ptr(a->k, a->dtype, a->sk, b, hk, j), a->dtype, a->sk[2], a->sk[3], nkk, D,
				       t->Kn + kp * t->ndc * W * W);
	}
	memset(t->dKt, 0, (size_t)(t->nkp * D * W) * sizeof(float));
	memset(t->dVt, 0, (size_t)(t->nkp * Dv * W) * sizeof(float));
}

/* Pack step, queries: block (h, i0) of nq queries, Q and dO packed as A panels both ways, its lse and
 * rowsum(dO * O); the fused dQ block cleared. */
static void kv_pack_queries(const att_plan_t *p, kv_task_t *t, int64_t h, int64_t i0, int64_t nq)
{
	const nk_attention_bwd_args_t *g = p->g;
	const nk_attention_args_t *a = &g->f;
	int64_t b = t->b, D = t->D, Dv = t->Dv;

	if (t->bf) {
		pack_rows_a_pairs(p, a->q, a->sq, b, h, i0, nq, D, (u32 *)t->Qa);
		pack_rows_a_pairs(p, g->dout, g->sdo, b, h, i0, nq, Dv, (u32 *)t->dOa);
		pack_cols_a_pairs(p, a->q, a->sq, b, h, i0, nq, D, (u32 *)t->QTa, QB1 / 2);
		pack_cols_a_pairs(p, g->dout, g->sdo, b, h, i0, nq, Dv, (u32 *)t->dOTa, QB1 / 2);
	} else {
		pack_rows_a(p, a->q, a->sq, b, h, i0, nq, D, t->Qa);
		pack_rows_a(p, g->dout, g->sdo, b, h, i0, nq, Dv, t->dOa);
		pack_cols_a(p, a->q, a->sq, b, h, i0, nq, D, t->QTa, QB1);
		pack_cols_a(p, g->dout, g->sdo, b, h, i0, nq, Dv, t->dOTa, QB1);
	}
	query_stats(p, b, h, i0, nq, 0, t->lse, t->dd, t->rows);
	if (t->fq)
		memset(t->dQ, 0, (size_t)(nq * D) * sizeof(float));
}

/* Row-tile step: rows r0..nq of the query block against key panel kp: S = scale Q K^T, dP = dO V^T,
 * then P and dS in place (bias, dropout). */
static void kv_row_tile(const att_plan_t *p, kv_task_t *t, int64_t h, int64_t i0, int64_t nq, int64_t kp,
			int64_t r0, int64_t nkk)
{
	const nk_attention_args_t *a = &p->g->f;
	int64_t D = t->D, Dv = t->Dv, j0 = t->j0g + kp * W, nr = nq - r0;
	float *S0 = t->S + r0 * W, *dP0 = t->dP + r0 * W;

	for (int64_t r = r0; r < nq; r += MR) {
		if (t->bf) {
			ukr_pairs(p, t->Dp, (u32 *)t->Qa + r * t->Dp, (u32 *)t->Kb + kp * t->Dp * W, t->S + r * W, W,
				  p->scale, 0, nq - r, W);
			ukr_pairs(p, t->Dvp, (u32 *)t->dOa + r * t->Dvp, (u32 *)t->Vb + kp * t->Dvp * W, t->dP + r * W, W,
				  1, 0, nq - r, W);
		} else {
			ukr(p, D, t->Qa + r * D, t->Kb + kp * D * W, t->S + r * W, W, p->scale, 0, nq - r, W);
			ukr(p, Dv, t->dOa + r * Dv, t->Vb + kp * Dv * W, t->dP + r * W, W, 1, 0, nq - r, W);
		}
		pf_step(&t->pfq);
		pf_step(&t->pft);
	}
	add_bias(p, t->b, h, S0, false, i0 + r0, j0, nr, nkk);
	if (a->dropout_p > 0)
		bwd_dropout(p, t->b, h, S0, dP0, false, i0 + r0, j0, nr, nkk, t->lse + r0, t->dd + r0);
	else
		p->ops->bwd_rows(S0, dP0, nr, t->lse + r0, t->dd + r0);
}

/* Accumulate step (bf16): dV^T += dO^T P, dK^T += scale Q^T dS over k-pairs of queries r0.. (r0 is a
 * multiple of MR, so even; the packed queries end with zero pairs), and the fused dQ += scale dS K over
 * k-pairs of the nkk keys. */
static void kv_accumulate_pairs(const att_plan_t *p, kv_task_t *t, int64_t nq, int64_t kp, int64_t r0, int64_t nkk)
{
	int64_t D = t->D, Dv = t->Dv, nr = nq - r0, kq = (nr + 1) / 2, W2 = W / 2;
	float *S0 = t->S + r0 * W, *dP0 = t->dP + r0 * W;

	p->ops->b_pairs(S0, nr, t->Pw);
	p->ops->b_pairs(dP0, nr, t->dSw);
	for (int64_t u = 0; u * MR < Dv; u++) {
		ukr_pairs(p, kq, (u32 *)t->dOTa + u * MR * (QB1 / 2) + r0 / 2 * MR, t->Pw,
			  t->dVt + kp * Dv * W + u * MR * W, W, 1, 1, Dv - u * MR, W);
		pf_step(&t->pfq);
		pf_step(&t->pft);
	}
	for (int64_t u = 0; u * MR < D; u++) {
		ukr_pairs(p, kq, (u32 *)t->QTa + u * MR * (QB1 / 2) + r0 / 2 * MR, t->dSw,
			  t->dKt + kp * D * W + u * MR * W, W, p->scale, 1, D - u * MR, W);
		pf_step(&t->pfq);
		pf_step(&t->pft);
	}
	if (!t->fq)
		return;
	p->ops->a_pairs(dP0, nr, nkk, (u32 *)t->dSa);
	for (int64_t u = 0; u * MR < nr; u++)
		for (int64_t c = 0; c < t->ndc; c++)
			ukr_pairs(p, (nkk + 1) / 2, (u32 *)t->dSa + u * MR * W2,
				  (u32 *)t->Kn + kp * t->ndc * W * W2 + c * ((nkk + 1) / 2) * W,
				  t->dQ + (r0 + u * MR) * D + c * W, D, p->scale, 1, nr - u * MR, D - c * W);
}

/* Accumulate step (f32): the same products on f32 panels. */
static void kv_accumulate(const att_plan_t *p, kv_task_t *t, int64_t nq, int64_t kp, int64_t r0, int64_t nkk)
{
	int64_t D = t->D, Dv = t->Dv, nr = nq - r0;
	float *S0 = t->S + r0 * W, *dP0 = t->dP + r0 * W;

	for (int64_t u = 0; u * MR < Dv; u++) {
		ukr(p, nr, t->dOTa + u * MR * QB1 + r0 * MR, S0, t->dVt + kp * Dv * W + u * MR * W, W, 1, 1,
		    Dv - u * MR, W);
		pf_step(&t->pfq);
		pf_step(&t->pft);
	}
	for (int64_t u = 0; u * MR < D; u++) {
		ukr(p, nr, t->QTa + u * MR * QB1 + r0 * MR, dP0, t->dKt + kp * D * W + u * MR * W, W, p->scale, 1,
		    D - u * MR, W);
		pf_step(&t->pfq);
		pf_step(&t->pft);
	}
	if (!t->fq)
		return;
	p->ops->tr_rows(dP0, nr, t->dSa);
	for (int64_t u = 0; u * MR < nr; u++)
		for (int64_t c = 0; c < t->ndc; c++)
			ukr(p, nkk, t->dSa + u * MR * W, t->Kn + kp * t->ndc * W * W + c * nkk * W,
			    t->dQ + (r0 + u * MR) * D + c * W, D, p->scale, 1, nr - u * MR, D - c * W);
}

/* dK, dV of keys [kg*KG, kg*KG + KG) of kv head hk, summed over the group's query heads and all queries.
 * Row tiles (queries x W keys): S = scale Q K^T, dP = dO V^T, P and dS; dV^T += dO^T P, dK^T += scale Q^T dS,
 * with K^T, V^T packed as B panels of W keys once and Q, dO packed both ways per block of QB1 queries. */
static void att_bwd_kv_task(const att_plan_t *p, float *ws, int64_t b, int64_t hk, int64_t kg, int64_t next)
{
	const nk_attention_bwd_args_t *g = p->g;
	const nk_attention_args_t *a = &g->f;
	kv_task_t t = { .b = b, .hk = hk, .D = a->D, .Dv = a->Dv, .Dp = (a->D + 1) / 2, .Dvp = (a->Dv + 1) / 2 };

	t.j0g = kg * p->KG, t.nkg = nk_min64(p->KG, a->Tk - t.j0g), t.nkp = nk_cdiv(t.nkg, W);
	t.fq = p->fused && g->dq; /* also dQ = scale dS K, complete after each query block */
	t.ndc = nk_cdiv(t.D, W);
	t.bf = p->bf;
	/* with causality, queries before the first key see none of these keys (blocks stay aligned to
	 * multiples of QB1 so that the sums do not depend on KG) */
	t.qstart = a->causal ? t.j0g / QB1 * QB1 : 0;
	kv_carve(ws, &t);
	kv_pack_keys(p, &t);

	int64_t nb = next >= 0 ? next / p->ngk / a->Hkv : -1, nhk = next >= 0 ? next / p->ngk % a->Hkv : 0;
	int64_t nj0g = next >= 0 ? next % p->ngk * p->KG : 0, nqstart = a->causal ? nj0g / QB1 * QB1 : 0;
	int64_t tsteps = 0;

	memset(&t.pft, 0, sizeof t.pft);
	if (nb >= 0) {
		pf_add(&t.pft, a->k, a->dtype, a->sk, nb, nhk, nj0g, nk_min64(p->KG, a->Tk - nj0g), t.D);
		pf_add(&t.pft, a->v, a->dtype, a->sv, nb, nhk, nj0g, nk_min64(p->KG, a->Tk - nj0g), t.Dv);
	}
	for (int64_t i0 = t.qstart; i0 < a->Tq; i0 += QB1)
		tsteps += p->group * kv_block_steps(p, t.j0g, t.nkg, i0, nk_min64(QB1, a->Tq - i0));
	pf_plan(&t.pft, tsteps);
	for (int64_t h = hk * p->group; h < (hk + 1) * p->group; h++)
		for (int64_t i0 = t.qstart; i0 < a->Tq; i0 += QB1) {
			int64_t nq = nk_min64(QB1, a->Tq - i0);

			if (i0 + QB1 < a->Tq)
				kv_block_pf(p, b, h, i0 + QB1, &t.pfq);
			else if (h + 1 < (hk + 1) * p->group)
				kv_block_pf(p, b, h + 1, t.qstart, &t.pfq);
			else
				kv_block_pf(p, nb, nhk * p->group, nqstart, &t.pfq);
			pf_plan(&t.pfq, kv_block_steps(p, t.j0g, t.nkg, i0, nq));
			kv_pack_queries(p, &t, h, i0, nq);
			for (int64_t kp = 0; kp < t.nkp; kp++) {
				int64_t j0 = t.j0g + kp * W, nkk = nk_min64(W, t.nkg - kp * W);
				/* causal: rows (queries) before r0 see none of these keys */
				int64_t r0 = a->causal && j0 > i0 ? (j0 - i0) / MR * MR : 0;

				if (a->causal && j0 > i0 + nq - 1)
					break;
				kv_row_tile(p, &t, h, i0, nq, kp, r0, nkk);
				if (t.bf)
					kv_accumulate_pairs(p, &t, nq, kp, r0, nkk);
				else
					kv_accumulate(p, &t, nq, kp, r0, nkk);
			}
			if (t.fq)
				store_rows(g->dq, a->dtype, g->sdq, b, h, i0, nq, t.D, t.dQ, t.D);
		}
	for (int64_t kp = 0; kp < t.nkp; kp++) {
		int64_t nkk = nk_min64(W, t.nkg - kp * W), j = t.j0g + kp * W;

		if (g->dk)
			store_transposed(p->ops, g->dk, a->dtype, g->sdk, b, hk, j, nkk, t.D, t.dKt + kp * t.D * W, NULL, t.buf);
		if (g->dv)
			store_transposed(p->ops, g->dv, a->dtype, g->sdv, b, hk, j, nkk, t.Dv, t.dVt + kp * t.Dv * W, NULL,
					 t.buf);
	}
}

/* dQ of queries [g*G, g*G + G) of head h.  Column tiles (KB keys x W queries): S^T = scale K Q^T,
 * dP^T = V dO^T, P^T and dS^T; dQ^T += scale K^T dS^T, with K, V (A panels by D) and K^T (A panels by
 * keys) packed per chunk of keys and Q^T, dO^T (B panels) per block of W queries. */
static void att_bwd_q_task(const att_plan_t *p, float *ws, int64_t b, int64_t h, int64_t gi)
{
	const nk_attention_bwd_args_t *g = p->g;
	const nk_attention_args_t *a = &g->f;
	int64_t D = a->D, Dv = a->Dv, hk = h / p->group, KC = p->KC;
	int64_t g0 = gi * p->G, gq = nk_min64(p->G, a->Tq - g0), nqb = nk_cdiv(gq, W);
	int64_t kend = a->causal ? nk_min64(a->Tk, g0 + gq) : a->Tk;
	float *Kp = carve(&ws, KC * D), *Vp = carve(&ws, KC * Dv), *KTp = carve(&ws, rup(D, MR) * KC);
	float *Qb = carve(&ws, nqb * D * W), *dOb = carve(&ws, nqb * Dv * W), *dQt = carve(&ws, nqb * D * W);
	float *lse = carve(&ws, nqb * W), *dd = carve(&ws, nqb * W), *S = carve(&ws, KB * W);
	float *dP = carve(&ws, KB * W), *buf = carve(&ws, W * D), *rows = carve(&ws, 2 * Dv);

	for (int64_t qb = 0; qb < nqb; qb++) {
		int64_t i0 = g0 + qb * W, nq = nk_min64(W, a->Tq - i0);

		pack_b_rows(p, a->q, a->sq, b, h, i0, nq, D, Qb + qb * D * W);
		pack_b_rows(p, g->dout, g->sdo, b, h, i0, nq, Dv, dOb + qb * Dv * W);
		query_stats(p, b, h, i0, nq, W, lse + qb * W, dd + qb * W, rows);
	}
	memset(dQt, 0, (size_t)(nqb * D * W) * sizeof(float));
	for (int64_t c0 = 0; c0 < kend; c0 += KC) {
		int64_t nc = nk_min64(KC, kend - c0);

		pack_rows_a(p, a->k, a->sk, b, hk, c0, nc, D, Kp);
		pack_rows_a(p, a->v, a->sv, b, hk, c0, nc, Dv, Vp);
		pack_cols_a(p, a->k, a->sk, b, hk, c0, nc, D, KTp, KC);
		for (int64_t qb = 0; qb < nqb; qb++) {
			int64_t i0 = g0 + qb * W, nq = nk_min64(W, a->Tq - i0);
			int64_t jend = a->causal ? nk_min64(c0 + nc, i0 + nq) : c0 + nc;

			for (int64_t j0 = c0; j0 < jend; j0 += KB) {
				int64_t nk = nk_min64(KB, jend - j0);

				for (int64_t r = 0; r < nk; r += MR) {
					ukr(p, D, Kp + (j0 - c0 + r) * D, Qb + qb * D * W, S + r * W, W, p->scale, 0, MR, W);
					ukr(p, Dv, Vp + (j0 - c0 + r) * Dv, dOb + qb * Dv * W, dP + r * W, W, 1, 0, MR, W);
				}
				add_bias(p, b, h, S, true, i0, j0, nk, nq);
				if (a->dropout_p > 0)
					bwd_dropout(p, b, h, S, dP, true, i0, j0, nk, nq, lse + qb * W, dd + qb * W);
				else
					p->ops->bwd_cols(S, dP, nk, lse + qb * W, dd + qb * W);
				for (int64_t t = 0; t * MR < D; t++)
					ukr(p, nk, KTp + t * MR * KC + (j0 - c0) * MR, dP, dQt + qb * D * W + t * MR * W, W,
					    p->scale, 1, D - t * MR, W);
			}
		}
	}
	for (int64_t qb = 0; qb < nqb; qb++) {
		int64_t i0 = g0 + qb * W, nq = nk_min64(W, a->Tq - i0);

		store_transposed(p->ops, g->dq, a->dtype, g->sdq, b, h, i0, nq, D, dQt + qb * D * W, NULL, buf);
	}
}

static void att_bwd_kv_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const att_plan_t *p = ctx;
	float *ws = att_ws(p);

	for (int64_t t = t0; t < t1 && ws; t++) {
		int64_t kg = t % p->ngk, bh = t / p->ngk;

		att_bwd_kv_task(p, ws, bh / p->a->Hkv, bh % p->a->Hkv, kg, t + 1 < t1 ? t + 1 : -1);
	}
}

static void att_bwd_q_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const att_plan_t *p = ctx;
	float *ws = att_ws(p);

	for (int64_t t = t0; t < t1 && ws; t++) {
		int64_t gi = t % p->ngq, bh = t / p->ngq;

		att_bwd_q_task(p, ws, bh / p->a->Hq, bh % p->a->Hq, gi);
	}
}

int nk_attention_bwd_tiled(const nk_attention_bwd_args_t *g, const nk_gemm_isa_t *isa, const nk_attops_t *ops)
{
	const nk_attention_args_t *a = &g->f;
	atomic_int failed = 0;
	att_plan_t p;

	if (att_check(a, "attention_backward"))
		return -1;
	if (a->dtype == NK_F64 || a->D == 0 || a->Dv == 0)
		return nk_attention_bwd_ref((void *)g);
	att_plan(&p, a, isa, ops);
	p.g = g;
	p.failed = &failed;
	if ((g->dk || g->dv || (p.fused && g->dq)) && a->B * a->Hkv * p.ngk > 0)
		nrt_parallel_for(a->B * a->Hkv * p.ngk, 1, att_bwd_kv_tasks, &p);
	if (g->dq && !p.fused && a->B * a->Hq * p.ngq > 0)
		nrt_parallel_for(a->B * a->Hq * p.ngq, 1, att_bwd_q_tasks, &p);
	return att_failed(&failed, "attention_backward");
}

int nk_attention_bwd_run(void *args)
{
	const nk_attention_bwd_args_t *g = args;
	nk_gemm_isa_t isa;

	if (att_check(&g->f, "attention_backward"))
		return -1;
	if (nk_using_reference() || g->f.dtype == NK_F64)
		return nk_attention_bwd_ref(args);
	isa = nk_gemm_isa_select();
	return nk_attention_bwd_tiled(g, &isa, att_best_ops());
}

/* ---- portable tile operations ------------------------------------------------------------------ */

void nk_att_fwd_cols_ref(float *S, int64_t n, float *m, float *l, float *Ot, int64_t dv)
{
	float mx[W], sub[W], corr[W], sum[W];
	bool rescale = false;

	for (int c = 0; c < W; c++)
		mx[c] = m[c], sum[c] = 0;
	for (int64_t r = 0; r < n; r++)
		for (int c = 0; c < W; c++)
			mx[c] = S[r * W + c] > mx[c] ? S[r * W + c] : mx[c];
	for (int c = 0; c < W; c++) {
		sub[c] = mx[c] == -INFINITY ? 0.0f : mx[c];
		corr[c] = nk_fp_expf(m[c] - sub[c]);
		rescale |= corr[c] != 1.0f;
	}
	for (int64_t r = 0; r < n; r++)
		for (int c = 0; c < W; c++) {
			float e = nk_fp_expf(S[r * W + c] - sub[c]);

			S[r * W + c] = e;
			sum[c] += e;
		}
	for (int c = 0; c < W; c++)
		l[c] = l[c] * corr[c] + sum[c], m[c] = mx[c];
	if (rescale)
		for (int64_t d = 0; d < dv; d++)
			for (int c = 0; c < W; c++)
				Ot[d * W + c] *= corr[c];
}

void nk_att_bwd_cols_ref(float *S, float *dP, int64_t n, const float *lse, const float *dd)
{
	float sub[W];

	for (int c = 0; c < W; c++)
		sub[c] = lse[c] == -INFINITY ? INFINITY : lse[c];
	for (int64_t r = 0; r < n; r++)
		for (int c = 0; c < W; c++) {
			float pr = nk_fp_expf(S[r * W + c] - sub[c]);

			S[r * W + c] = pr;
			dP[r * W + c] = pr * (dP[r * W + c] - dd[c]);
		}
}

void nk_att_bwd_rows_ref(float *S, float *dP, int64_t n, const float *lse, const float *dd)
{
	for (int64_t r = 0; r < n; r++) {
		float sub = lse[r] == -INFINITY ? INFINITY : lse[r];

		for (int c = 0; c < W; c++) {
			float pr = nk_fp_expf(S[r * W + c] - sub);

			S[r * W + c] = pr;
			dP[r * W + c] = pr * (dP[r * W + c] - dd[r]);
		}
	}
}

void nk_att_tr_rows_ref(const float *X, int64_t n, float *dst)
{
	for (int64_t t = 0; t * MR < n; t++)
		for (int c = 0; c < W; c++)
			for (int i = 0; i < MR; i++)
				dst[t * MR * W + c * MR + i] = t * MR + i < n ? X[(t * MR + i) * W + c] : 0.0f;
}

void nk_att_tr_ref(const float *src, int64_t ld_src, int64_t rows, int64_t cols, float *dst, int64_t ld_dst, int lanes)
{
	for (int64_t c = 0; c < cols; c++)
		for (int r = 0; r < lanes; r++)
			dst[c * ld_dst + r] = r < rows ? src[r * ld_src + c] : 0.0f;
}

void nk_att_ukr8_ref(int64_t k, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta, int m,
		     int n)
{
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			float s = 0, *ci = c + i * ldc + j;

			for (int64_t p = 0; p < k; p++)
				s += a[p * MR + i] * b[p * W + j];
			*ci = beta == 0 ? alpha * s : alpha * s + beta * *ci;
		}
}

void nk_att_b_pairs_ref(const float *X, int64_t n, uint32_t *dst)
{
	for (int64_t pp = 0; 2 * pp < n; pp++)
		for (int c = 0; c < W; c++) {
			uint32_t lo = nk_f32_to_bf16(X[2 * pp * W + c]);
			uint32_t hi = 2 * pp + 1 < n ? nk_f32_to_bf16(X[(2 * pp + 1) * W + c]) : 0;

			dst[pp * W + c] = lo | hi << 16;
		}
}

void nk_att_a_pairs_ref(const float *X, int64_t nr, int64_t nc, uint32_t *dst)
{
	for (int64_t t = 0; t * MR < nr; t++)
		for (int64_t pp = 0; pp < W / 2; pp++)
			for (int64_t i = 0; i < MR; i++) {
				int64_t r = t * MR + i, c = 2 * pp;
				uint32_t lo = r < nr && c < nc ? nk_f32_to_bf16(X[r * W + c]) : 0;
				uint32_t hi = r < nr && c + 1 < nc ? nk_f32_to_bf16(X[r * W + c + 1]) : 0;

				dst[t * MR * (W / 2) + pp * MR + i] = lo | hi << 16;
			}
}

const nk_attops_t nk_attops_ref = {
	.b_pairs = nk_att_b_pairs_ref,
	.a_pairs = nk_att_a_pairs_ref,
	.ukr8 = nk_att_ukr8_ref,
	.tr = nk_att_tr_ref,
	.tr_rows = nk_att_tr_rows_ref,
	.fwd_cols = nk_att_fwd_cols_ref,
	.bwd_cols = nk_att_bwd_cols_ref,
	.bwd_rows = nk_att_bwd_rows_ref,
};

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
