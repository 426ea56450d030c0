/* conv_avx512.c - f32 convolution forward (and backward data at stride 1) as an implicit GEMM with
 * AVX-512: no column matrix in memory, no packing pass over it, no unpacking of the result.
 *
 * For each tile of 32 output positions of one sample (tasks over the pool), the tile's column panel
 * (K = Cin/G * kvol rows of 32 positions, the packed-B layout of the f32 micro-kernel, taps outside the
 * input 0) is gathered straight from the input into this thread's scratch (nk_workspace.h), then the
 * micro-kernel nk_sgemm_avx512_14x32 multiplies the weight's packed 14-row panels (packed once per call)
 * with it and writes the MR x 32 tiles of y in place (row stride = output volume), and the bias is added.
 * Each output is one sum over k in order 0..K-1, the same for any thread count.
 *
 * Backward data at stride 1 is the forward convolution of dy with the flipped, transposed weight
 * (w'[c][o][j] = w[o][c][kvol-1-j] per group) and padding (k-1)*dil - pad, when that padding is >= 0
 * and the input size is exactly out + (k-1)*dil - 2*pad (a transposed convolution without output
 * padding).  Everything else (other dtypes, strides in backward data, huge K or planes) stays with
 * conv.c's im2col path: nk_conv_implicit_f32_avx512 then returns 0.  Call only when nk_cpu_avx512().
 */
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "nk.h"
#include "nk_avx512.h"
#include "nk_gemm_impl.h"
#include "nk_impl.h"
#include "nk_workspace.h"
#include "nrt.h"

#define MR NK_GEMM_MR
#define NR NK_GEMM_NR   /* 32 positions per tile */
#define IMP_KMAX 4096   /* rows of the column panel (K x 32 floats = 512 KiB of scratch at most) */

typedef struct {
	int64_t N, Ci, Co, G, Cig, Cog;
	int64_t in[3], out[3], k[3], s[3], p[3], d[3];
	int64_t ivol, ovol, kvol, K, tiles;
	const float *x, *bias;
	float *y;
	const float *apack; /* per group: ceil(Cog / MR) panels of MR x K, pstride floats apart */
	int64_t pstride, gstride;
	atomic_int *failed; /* a worker without scratch memory */
} imp_t;

/* Positions [q0, q0 + nq) of the output: per kernel offset kk, the input offsets (within a channel plane)
 * of the 32 lanes (0 and a clear mask bit outside the input or past nq), and per 16-lane half the
 * offset of lane 0 when the valid lanes are consecutive (INT64_MIN when not). */
static void tile_map(const imp_t *t, int64_t q0, int64_t nq, int32_t *idx, uint32_t *mask, int64_t *base)
{
	int64_t pos[NR][3];

	for (int64_t j = 0; j < NR; j++) {
		int64_t q = q0 + (j < nq ? j : 0);
		int64_t o2 = q % t->out[2], o1 = q / t->out[2] % t->out[1], o0 = q / (t->out[2] * t->out[1]);

		pos[j][0] = o0 * t->s[0] - t->p[0];
		pos[j][1] = o1 * t->s[1] - t->p[1];
		pos[j][2] = o2 * t->s[2] - t->p[2];
	}
	for (int64_t kk = 0; kk < t->kvol; kk++) {
		int64_t j0 = kk / (t->k[1] * t->k[2]), j1 = kk / t->k[2] % t->k[1], j2 = kk % t->k[2];
		uint32_t m = 0;

		for (int64_t j = 0; j < NR; j++) {
			int64_t i0 = pos[j][0] + j0 * t->d[0], i1 = pos[j][1] + j1 * t->d[1], i2 = pos[j][2] + j2 * t->d[2];
			bool ok = j < nq && i0 >= 0 && i0 < t->in[0] && i1 >= 0 && i1 < t->in[1] && i2 >= 0 && i2 < t->in[2];

			idx[kk * NR + j] = ok ? (int32_t)((i0 * t->in[1] + i1) * t->in[2] + i2) : 0;
			m |= ok ? 1u << j : 0;
		}
		mask[kk] = m;
		/* a half whose valid lanes read consecutive inputs (stride 1): one masked load from base */
		for (int h = 0; h < 2; h++) {
			int64_t b = INT64_MIN;
			bool run = true;

			for (int j = 16 * h; j < 16 * h + 16 && run; j++)
				if (m >> j & 1) {
					int64_t bj = (int64_t)idx[kk * NR + j] - (j - 16 * h);

					run = b == INT64_MIN || b == bj;
					b = bj;
				}
			base[kk * 2 + h] = run && b != INT64_MIN ? b : INT64_MIN;
		}
	}
}

/* Bytes of one thread's scratch: the column panel, then the tile map (base, idx, mask). */
static size_t imp_scratch(const imp_t *t)
{
	return (size_t)(t->K * NR) * sizeof(float) + (size_t)t->kvol * (2 * 8 + NR * 4 + 4) + 64;
}

static void imp_units(void *ctx, int64_t lo, int64_t hi)
{
	const imp_t *t = ctx;
	int32_t *idx;
	uint32_t *mask;
	int64_t *base, tile = -1;
	float *b = nk_ws_get(NK_WS_GEMM_B, imp_scratch(t));

	if (!b) {
		atomic_store(t->failed, 1);
		return;
	}
	base = (int64_t *)(b + t->K * NR);
	idx = (int32_t *)(base + 2 * t->kvol);
	mask = (uint32_t *)(idx + t->kvol * NR);
	for (int64_t u = lo; u < hi; u++) { /* u = tile * N + n: the map is the same for every sample */
		int64_t n = u % t->N, q0 = u / t->N * NR, nq = t->ovol - q0 < NR ? t->ovol - q0 : NR;

		if (u / t->N != tile)
			tile = u / t->N, tile_map(t, q0, nq, idx, mask, base);
		for (int64_t g = 0; g < t->G; g++) {
			const float *xg = t->x + (n * t->Ci + g * t->Cig) * t->ivol;

			/* the column panel: b[(c*kvol + kk)*32 + j] */
			for (int64_t c = 0; c < t->Cig; c++) {
				const float *xc = xg + c * t->ivol;
				float *bc = b + c * t->kvol * NR;

				for (int64_t kk = 0; kk < t->kvol; kk++) {
					__mmask16 m0 = (__mmask16)mask[kk], m1 = (__mmask16)(mask[kk] >> 16);
					int64_t b0 = base[2 * kk], b1 = base[2 * kk + 1];
					__m512 v0 = _mm512_setzero_ps(), v1 = v0;

					/* masked-off lanes are not read (no fault past the plane's ends) */
					if (b0 != INT64_MIN)
						v0 = _mm512_maskz_loadu_ps(m0, xc + b0);
					else if (m0)
						v0 = _mm512_mask_i32gather_ps(v0, m0, _mm512_loadu_si512(idx + kk * NR), xc, 4);
					if (b1 != INT64_MIN)
						v1 = _mm512_maskz_loadu_ps(m1, xc + b1);
					else if (m1)
						v1 = _mm512_mask_i32gather_ps(v1, m1, _mm512_loadu_si512(idx + kk * NR + 16), xc, 4);

					_mm512_store_ps(bc + kk * NR, v0);
					_mm512_store_ps(bc + kk * NR + 16, v1);
				}
			}
			const float *ag = t->apack + g * t->gstride;
			float *yg = t->y + (n * t->Co + g * t->Cog) * t->ovol + q0;

			for (int64_t m0 = 0; m0 < t->Cog; m0 += MR) {
				int m = (int)(t->Cog - m0 < MR ? t->Cog - m0 : MR);
				float *yt = yg + m0 * t->ovol;

				nk_sgemm_avx512_14x32(t->K, ag + m0 / MR * t->pstride, b, yt, t->ovol, 1, 1.0f, 0.0f, m, (int)nq);
				if (t->bias)
					for (int i = 0; i < m; i++) {
						__m512 bv = _mm512_set1_ps(t->bias[g * t->Cog + m0 + i]);
						__mmask16 ma = nk_tail_mask16(nq), mb = nk_tail_mask16(nq - 16 > 0 ? nq - 16 : 0);
						float *r = yt + i * t->ovol;

						_mm512_mask_storeu_ps(r, ma, _mm512_add_ps(_mm512_maskz_loadu_ps(ma, r), bv));
						_mm512_mask_storeu_ps(r + 16, mb, _mm512_add_ps(_mm512_maskz_loadu_ps(mb, r + 16), bv));
					}
			}
		}
	}
}

/* Geometry of the convolution computed: nsp dims right-aligned into 3. */
static void imp_geo(imp_t *t, int nsp, const int64_t *in, const int64_t *out, const int64_t *k, const int64_t *s,
		    const int64_t *p, const int64_t *d)
{
	t->ivol = t->ovol = t->kvol = 1;
	for (int i = 0; i < 3; i++) {
		int j = i - (3 - nsp);
		bool has = j >= 0;

		t->in[i] = has ? in[j] : 1, t->out[i] = has ? out[j] : 1, t->k[i] = has ? k[j] : 1;
		t->s[i] = has ? s[j] : 1, t->p[i] = has ? p[j] : 0, t->d[i] = has ? d[j] : 1;
		t->ivol *= t->in[i], t->ovol *= t->out[i], t->kvol *= t->k[i];
	}
}

int nk_conv_implicit_f32_avx512(const nk_conv_args_t *a)
{
	imp_t t = { 0 };
	bool bwd = a->mode == NK_CONV_BWD_DATA;

	if (a->dtype != NK_F32 || (a->mode != NK_CONV_FWD && !bwd) || a->nsp < 1 || a->nsp > 3)
		return 0;
	t.G = a->G, t.N = a->N;
	if (!bwd) {
		t.Ci = a->C, t.Co = a->O;
		imp_geo(&t, a->nsp, a->in, a->out, a->k, a->stride, a->pad, a->dil);
		t.x = a->x, t.y = a->y;
	} else {
		int64_t pp[3];

		for (int i = 0; i < a->nsp; i++) {
			pp[i] = (a->k[i] - 1) * a->dil[i] - a->pad[i];
			if (a->stride[i] != 1 || pp[i] < 0 || a->in[i] != a->out[i] + (a->k[i] - 1) * a->dil[i] - 2 * a->pad[i])
				return 0;
		}
		t.Ci = a->O, t.Co = a->C;
		imp_geo(&t, a->nsp, a->out, a->in, a->k, a->stride, pp, a->dil);
		t.x = a->dy, t.y = a->dx;
	}
	t.bias = a->b;
	t.Cig = t.Ci / t.G, t.Cog = t.Co / t.G, t.K = t.Cig * t.kvol;
	if (t.N == 0 || t.Co == 0 || t.ovol == 0 || t.ivol == 0 || t.K == 0 || t.K > IMP_KMAX ||
	    t.ivol >= ((int64_t)1 << 31))
		return 0;
	t.tiles = (t.ovol + NR - 1) / NR;

	/* the weight as A [Co][K] per group, packed in MR-row panels: a[p*MR + i] = A[m0 + i][p] */
	int64_t panels = (t.Cog + MR - 1) / MR;
	atomic_int failed = 0;

	t.pstride = (MR * t.K + 15) / 16 * 16; /* 64-byte aligned panels */
	t.gstride = panels * t.pstride;
	t.failed = &failed;
	float *ap = nk_ws_get(NK_WS_GEMM_A, (size_t)(t.G * t.gstride) * sizeof(float));

	if (!ap || !nk_ws_get(NK_WS_GEMM_B, imp_scratch(&t))) {
		nrt_kernel_fail("conv: no host memory for the packed panels");
		return -1;
	}
	for (int64_t g = 0; g < t.G; g++)
		for (int64_t m0 = 0; m0 < t.Cog; m0 += MR) {
			float *dst = ap + g * t.gstride + m0 / MR * t.pstride;

			/* rows i innermost: the destination is written in order and the backward's transposed
			 * reads stay within a few cache lines */
			for (int64_t c = 0; c < t.Cig; c++)
				for (int64_t kk = 0; kk < t.kvol; kk++)
					for (int64_t i = 0; i < MR; i++) {
						int64_t o = m0 + i; /* output channel within the group */
						const float *w = a->w;
						float v = 0;

						if (o < t.Cog) {
							if (!bwd) /* w [Co][Cig][kvol] */
								v = w[((g * t.Cog + o) * t.Cig + c) * t.kvol + kk];
							else /* w [Ci = O][Cog = C/G][kvol], flipped */
								v = w[((g * t.Cig + c) * t.Cog + o) * t.kvol + (t.kvol - 1 - kk)];
						}
						dst[(c * t.kvol + kk) * MR + i] = v;
					}
		}
	t.apack = ap;
	nrt_parallel_for(t.N * t.tiles, 1, imp_units, &t);
	if (atomic_load(&failed)) {
		nrt_kernel_fail("conv: no host memory for a column panel");
		return -1;
	}
	return 1;
}

/* ---- backward weight: dW[o][c*kvol + kk] = sum_{n, q} dy[n][o][q] * x[n][c][q shifted by kk] --------
 * Dot products over the positions with no column matrix: when every 16-position block of the output
 * reads, per kernel offset, consecutive inputs (stride 1 and the input as wide as the output, e.g. 'same'
 * padding) and the weight is small (Cout/G * K <= 2^17; otherwise conv.c's path), a register tile of 4 output channels x 6 (channel, offset) rows keeps
 * 16-lane partial sums over all samples and blocks (masked loads read the taps, 0 outside the input),
 * then each is summed across its lanes and stored (first pass) or added to dW.  Passes: samples in groups
 * that fit in L2; tasks: the tiles (any thread count gives the same sums). */
#define BW_MO 4
#define BW_MK 6

typedef struct {
	int64_t N, Ci, Co, G, Cig, Cog, K, kvol, ivol, ovol, nblk;
	const float *x, *dy;
	float *dw;
	const int64_t *base;   /* [nblk][kvol] offset of lane 0 */
	const uint16_t *mask;  /* [nblk][kvol] */
	int64_t otiles, ktiles;
	int64_t n0, n1;        /* the samples of this pass; dw is stored by the first pass, added to after */
} bw_t;

static void bw_units(void *ctx, int64_t lo, int64_t hi)
{
	const bw_t *t = ctx;

	for (int64_t u = lo; u < hi; u++) {
		/* (channel, offset) tiles innermost: consecutive tasks re-read the same dy rows */
		int64_t g = u / (t->otiles * t->ktiles), r = u % (t->otiles * t->ktiles);
		int64_t o0 = r / t->ktiles * BW_MO, k0 = r % t->ktiles * BW_MK;
		int64_t orow[BW_MO], xrow[BW_MK], kk[BW_MK];
		__m512 acc[BW_MO][BW_MK];

		for (int i = 0; i < BW_MO; i++) /* rows past the edge recompute the last one, not stored */
			orow[i] = (g * t->Cog + (o0 + i < t->Cog ? o0 + i : t->Cog - 1)) * t->ovol;
		for (int j = 0; j < BW_MK; j++) {
			int64_t ck = k0 + j < t->K ? k0 + j : t->K - 1;

			xrow[j] = (g * t->Cig + ck / t->kvol) * t->ivol, kk[j] = ck % t->kvol;
		}
#pragma GCC unroll 4
		for (int i = 0; i < BW_MO; i++)
#pragma GCC unroll 6
			for (int j = 0; j < BW_MK; j++)
				acc[i][j] = _mm512_setzero_ps();
		for (int64_t n = t->n0; n < t->n1; n++) {
			const float *dyn = t->dy + n * t->Co * t->ovol, *xn = t->x + n * t->Ci * t->ivol;

			for (int64_t b = 0; b < t->nblk; b++) {
				__mmask16 mq = nk_tail_mask16(t->ovol - b * 16);
				const int64_t *bb = t->base + b * t->kvol;
				const uint16_t *mb = t->mask + b * t->kvol;
				__m512 d[BW_MO];

#pragma GCC unroll 4
				for (int i = 0; i < BW_MO; i++)
					d[i] = _mm512_maskz_loadu_ps(mq, dyn + orow[i] + b * 16);
#pragma GCC unroll 6
				for (int j = 0; j < BW_MK; j++) {
					__m512 xv = _mm512_maskz_loadu_ps(mb[kk[j]], xn + xrow[j] + bb[kk[j]]);

#pragma GCC unroll 4
					for (int i = 0; i < BW_MO; i++)
						acc[i][j] = _mm512_fmadd_ps(d[i], xv, acc[i][j]);
				}
			}
		}
		/* constant trip counts throughout, so that acc stays in registers */
#pragma GCC unroll 4
		for (int i = 0; i < BW_MO; i++)
#pragma GCC unroll 6
			for (int j = 0; j < BW_MK; j++) {
				float v = _mm512_reduce_add_ps(acc[i][j]);
				float *dst = t->dw + (g * t->Cog + o0 + i) * t->K + k0 + j;

				if (o0 + i < t->Cog && k0 + j < t->K)
					*dst = t->n0 == 0 ? v : *dst + v;
			}
	}
}

int nk_conv_bwd_weight_f32_avx512(const nk_conv_args_t *a)
{
	imp_t m = { 0 };
	bw_t t = { 0 };

	if (a->dtype != NK_F32 || a->mode != NK_CONV_BWD_WEIGHT || a->nsp < 1 || a->nsp > 3)
		return 0;
	m.N = a->N, m.G = a->G, m.Ci = a->C, m.Co = a->O;
	imp_geo(&m, a->nsp, a->in, a->out, a->k, a->stride, a->pad, a->dil);
	m.Cig = m.Ci / m.G, m.Cog = m.Co / m.G, m.K = m.Cig * m.kvol;
	if (m.N == 0 || m.ovol == 0 || m.K == 0 || m.Cog == 0 || m.ivol >= ((int64_t)1 << 31))
		return 0;
	/* 10 loads per 24 FMAs: with large weights (many tiles re-reading dy and x from L2/L3) the packed
	 * GEMM of conv.c is faster (measured: 64x576 and 128x576 weights faster here, 512x512 and 256x2304
	 * slower) */
	if (m.Cog * m.K > ((int64_t)1 << 17))
		return 0;
	t.nblk = (m.ovol + 15) / 16;
	if ((size_t)(t.nblk * m.kvol) > ((size_t)1 << 20))
		return 0;
	/* the map of the 16-position blocks (tile_map's 32-lane halves, two blocks at a time); scratch:
	 * base [nblk+1][kvol], b2 [kvol][2] (int64), idx [kvol][32] (int32), m32 [kvol], mask [nblk+1][kvol] */
	size_t nb1 = (size_t)((t.nblk + 1) * m.kvol), kv = (size_t)m.kvol;
	int64_t *base = nk_ws_get(NK_WS_GEMM_A, nb1 * 8 + kv * 16 + kv * NR * 4 + kv * 4 + nb1 * 2);

	if (!base) {
		nrt_kernel_fail("conv: no host memory for the backward-weight map");
		return -1;
	}
	int64_t *b2 = base + nb1;
	int32_t *idx = (int32_t *)(b2 + 2 * kv);
	uint32_t *m32 = (uint32_t *)(idx + kv * NR);
	uint16_t *mask = (uint16_t *)(m32 + kv);

	for (int64_t q0 = 0; q0 < m.ovol; q0 += NR) {
		int64_t nq = m.ovol - q0 < NR ? m.ovol - q0 : NR;

		tile_map(&m, q0, nq, idx, m32, b2);
		for (int h = 0; h < 2 && q0 + 16 * h < m.ovol; h++)
			for (int64_t kk = 0; kk < m.kvol; kk++) {
				int64_t blk = q0 / 16 + h;
				uint16_t mk = (uint16_t)(m32[kk] >> (16 * h));

				if (mk && b2[2 * kk + h] == INT64_MIN)
					return 0; /* a block that needs a gather: conv.c's path */
				base[blk * m.kvol + kk] = mk ? b2[2 * kk + h] : 0;
				mask[blk * m.kvol + kk] = mk;
			}
	}
	t.N = m.N, t.Ci = m.Ci, t.Co = m.Co, t.G = m.G, t.Cig = m.Cig, t.Cog = m.Cog, t.K = m.K;
	t.kvol = m.kvol, t.ivol = m.ivol, t.ovol = m.ovol;
	t.x = a->x, t.dy = a->dy, t.dw = a->dw, t.base = base, t.mask = mask;
	t.otiles = (m.Cog + BW_MO - 1) / BW_MO, t.ktiles = (m.K + BW_MK - 1) / BW_MK;
	/* passes over samples whose x (all channels) and the dy rows of one output-channel tile fit in a
	 * core's L2: the (o-tile, k-tiles) tasks a thread runs in a row re-read them from there; the pass
	 * size depends on the geometry only */
	int64_t per = (m.Ci * m.ivol + BW_MO * m.ovol) * (int64_t)sizeof(float), S = ((int64_t)768 << 10) / per;

	S = S < 1 ? 1 : S > m.N ? m.N : S;
	for (t.n0 = 0; t.n0 < m.N; t.n0 += S) {
		t.n1 = t.n0 + S < m.N ? t.n0 + S : m.N;
		nrt_parallel_for(t.G * t.otiles * t.ktiles, 1, bw_units, &t);
	}
	return 1;
}
