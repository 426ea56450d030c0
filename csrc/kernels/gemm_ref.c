/* gemm_ref.c - the portable GEMM micro-kernels and packers (the nk_gemm_isa_ref table): the same
 * contracts as gemm_avx512.c's (packed panels, edge tiles, strides: docs/kernels.md), in plain C that the
 * vectorizer turns into the CPU's baseline vector code.  gemm.c's packed driver calls them through the
 * table when the CPU has no better one or NEURON_KERNELS=portable. */
/* The vectorizer's dynamic cost model for this file (what NK_VECTORIZE_FILE does), set before the
 * headers so that their inline helpers get the same options and stay inlinable. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include <string.h>

#include "nk_impl.h"
#include "nk_gemm_impl.h"

#define MR NK_GEMM_MR
#define NR NK_GEMM_NR
#define KC NK_GEMM_KC
#define DMR NK_DGEMM_MR
#define DNR NK_DGEMM_NR

/* ---- portable micro-kernels and packing --------------------------------------------------------- */

/* Writes alpha*acc + beta*C for the m x n corner of an MR x NR f32 tile; beta == 0 does not read C. */
static void tile_store(const float *acc, float *c, int64_t rs_c, int64_t cs_c, float alpha, float beta,
		       int m, int n)
{
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			float *p = c + i * rs_c + j * cs_c;
			float v = alpha * acc[i * NR + j];

			*p = beta == 0 ? v : v + beta * *p;
		}
}

void nk_sgemm_ref_14x32_b(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
			  int64_t cs_c, float alpha, float beta, int m, int n)
{
	float acc[MR * NR] = { 0 };

	for (int64_t p = 0; p < k; p++)
		for (int i = 0; i < MR; i++)
			for (int j = 0; j < NR; j++)
				acc[i * NR + j] += a[p * MR + i] * b[p * ldb + j];
	tile_store(acc, c, rs_c, cs_c, alpha, beta, m, n);
}

/* The prefetch is a hint: the portable kernel ignores it. */
void nk_sgemm_ref_14x32_b_pf(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
			     int64_t cs_c, float alpha, float beta, int m, int n, const char *pf, int64_t pfs)
{
	nk_sgemm_ref_14x32_b(k, a, b, ldb, c, rs_c, cs_c, alpha, beta, m, n);
}

/* Packed B: its rows are NR apart. */
void nk_sgemm_ref_14x32(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, int64_t cs_c,
			float alpha, float beta, int m, int n)
{
	nk_sgemm_ref_14x32_b(k, a, b, NR, c, rs_c, cs_c, alpha, beta, m, n);
}

/* The bias reference: the rows of C take the bias, then the sgemm contract reads them as C. */
void nk_sgemm_ref_14x32_bias(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, float alpha,
			     float beta, const float *bias, int m, int n)
{
	for (int i = 0; i < m; i++)
		memcpy(c + i * rs_c, bias, (size_t)n * sizeof(float));
	nk_sgemm_ref_14x32(k, a, b, c, rs_c, 1, alpha, beta, m, n);
}

/* The in-place-A reference: the rows packed into a panel (KC k at a time, the later blocks added to C),
 * then the packed (or bias) reference. */
void nk_sgemm_ref_14x32_a(int64_t k, const float *a, int64_t lda, const float *b, float *c, int64_t rs_c, float alpha,
			  float beta, const float *bias, int m, int n)
{
	float panel[MR * KC];
	int64_t p0 = 0;

	do {
		int64_t kc = nk_min64(KC, k - p0);

		for (int64_t p = 0; p < kc; p++)
			for (int i = 0; i < MR; i++)
				panel[p * MR + i] = i < m ? a[i * lda + p0 + p] : 0.0f;
		if (p0 == 0 && bias)
			nk_sgemm_ref_14x32_bias(kc, panel, b + p0 * NR, c, rs_c, alpha, beta, bias, m, n);
		else
			nk_sgemm_ref_14x32(kc, panel, b + p0 * NR, c, rs_c, 1, alpha, p0 == 0 ? beta : 1.0f, m, n);
		p0 += kc;
	} while (p0 < k);
}

void nk_sbgemm_ref_14x32(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t rs_c,
			 int64_t cs_c, float alpha, float beta, int m, int n)
{
	float acc[MR * NR] = { 0 };

	for (int64_t p = 0; p < kp; p++)
		for (int i = 0; i < MR; i++) {
			uint32_t x = a[p * MR + i];
			float a0 = nk_bf16_to_f32((uint16_t)x), a1 = nk_bf16_to_f32((uint16_t)(x >> 16));

			for (int j = 0; j < NR; j++) {
				uint32_t y = b[p * NR + j];

				acc[i * NR + j] += a0 * nk_bf16_to_f32((uint16_t)y) +
						   a1 * nk_bf16_to_f32((uint16_t)(y >> 16));
			}
		}
	tile_store(acc, c, rs_c, cs_c, alpha, beta, m, n);
}

/* bf16 C tile of the references: c = bf16(alpha*(t + acc) + beta*c) over m x n (acc may be NULL, C is
 * not read when beta == 0). */
static void tile_store_bf16(const float *t, const float *acc, int64_t ld_acc, uint16_t *c, int64_t rs_c, float alpha,
			    float beta, int m, int n)
{
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			float v = alpha * (t[i * NR + j] + (acc ? acc[i * ld_acc + j] : 0.0f));

			if (beta != 0)
				v += beta * nk_bf16_to_f32(c[i * rs_c + j]);
			c[i * rs_c + j] = nk_f32_to_bf16(v);
		}
}

void nk_sbgemm_ref_14x32_bf16c(int64_t kp, const uint32_t *a, const uint32_t *b, const float *acc, int64_t ld_acc,
			       uint16_t *c, int64_t rs_c, float alpha, float beta, int m, int n)
{
	float t[MR * NR];

	nk_sbgemm_ref_14x32(kp, a, b, t, NR, 1, 1.0f, 0.0f, MR, NR);
	tile_store_bf16(t, acc, ld_acc, c, rs_c, alpha, beta, m, n);
}

/* The in-place-A bf16 references: row i's pair pp at the bytes (const char *)a + i*lda + 4*pp; the
 * sums as nk_sbgemm_ref_14x32 (rows past m are not read). */
static void sbgemm_ref_a_tile(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, int m, float *acc)
{
	for (int i = 0; i < MR * NR; i++)
		acc[i] = 0;
	for (int64_t p = 0; p < kp; p++)
		for (int i = 0; i < m; i++) {
			const uint16_t *r = (const uint16_t *)((const char *)a + i * lda) + 2 * p;
			float a0 = nk_bf16_to_f32(r[0]), a1 = nk_bf16_to_f32(r[1]);

			for (int j = 0; j < NR; j++) {
				uint32_t y = b[p * NR + j];

				acc[i * NR + j] += a0 * nk_bf16_to_f32((uint16_t)y) + a1 * nk_bf16_to_f32((uint16_t)(y >> 16));
			}
		}
}

void nk_sbgemm_ref_14x32_a(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, float *c, int64_t rs_c,
			   int64_t cs_c, float alpha, float beta, int m, int n)
{
	float acc[MR * NR];

	sbgemm_ref_a_tile(kp, a, lda, b, m, acc);
	tile_store(acc, c, rs_c, cs_c, alpha, beta, m, n);
}

void nk_sbgemm_ref_14x32_bf16c_a(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, const float *acc,
				 int64_t ld_acc, uint16_t *c, int64_t rs_c, float alpha, float beta, int m, int n)
{
	float t[MR * NR];

	sbgemm_ref_a_tile(kp, a, lda, b, m, t);
	tile_store_bf16(t, acc, ld_acc, c, rs_c, alpha, beta, m, n);
}

void nk_dgemm_ref_14x16(int64_t k, const double *a, const double *b, double *c, int64_t rs_c, int64_t cs_c,
			double alpha, double beta, int m, int n)
{
	double acc[DMR * DNR] = { 0 };

	for (int64_t p = 0; p < k; p++)
		for (int i = 0; i < DMR; i++)
			for (int j = 0; j < DNR; j++)
				acc[i * DNR + j] += a[p * DMR + i] * b[p * DNR + j];
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			double *q = c + i * rs_c + j * cs_c, v = alpha * acc[i * DNR + j];

			*q = beta == 0 ? v : v + beta * *q;
		}
}

void nk_dgemm_pack_a(const double *src, int64_t rs, int64_t cs, int m, int64_t k, double *dst)
{
	if (cs == 1)
		for (int i = 0; i < m; i++)
			for (int64_t p = 0; p < k; p++)
				dst[p * DMR + i] = src[i * rs + p];
	else
		for (int64_t p = 0; p < k; p++)
			for (int i = 0; i < m; i++)
				dst[p * DMR + i] = src[i * rs + p * cs];
	for (int64_t p = 0; p < k && m < DMR; p++)
		for (int i = m; i < DMR; i++)
			dst[p * DMR + i] = 0;
}

void nk_dgemm_pack_b(const double *src, int64_t rs, int64_t cs, int64_t k, int64_t n, double *dst)
{
	for (int64_t q = 0; q * DNR < n; q++) {
		double *d = dst + q * k * DNR;
		const double *s = src + q * DNR * cs;
		int nr = (int)nk_min64(DNR, n - q * DNR);

		if (rs == 1 && cs != 1)
			for (int j = 0; j < nr; j++)
				for (int64_t p = 0; p < k; p++)
					d[p * DNR + j] = s[j * cs + p];
		else
			for (int64_t p = 0; p < k; p++)
				for (int j = 0; j < nr; j++)
					d[p * DNR + j] = s[p * rs + j * cs];
		for (int64_t p = 0; p < k && nr < DNR; p++)
			for (int j = nr; j < DNR; j++)
				d[p * DNR + j] = 0;
	}
}

void nk_gemm_pack_a_ref(const void *src, int dtype, int64_t rs, int64_t cs, int m, int64_t k, float *dst)
{
	if (dtype == NK_F32 && cs == 1) {
		const float *s = src;

		for (int i = 0; i < m; i++)
			for (int64_t p = 0; p < k; p++)
				dst[p * MR + i] = s[i * rs + p];
	} else {
		for (int64_t p = 0; p < k; p++)
			for (int i = 0; i < m; i++)
				dst[p * MR + i] = nk_fp_loadf(src, dtype, i * rs + p * cs);
	}
	for (int64_t p = 0; p < k; p++)
		for (int i = m; i < MR; i++)
			dst[p * MR + i] = 0;
}

void nk_gemm_pack_b_ref(const void *src, int dtype, int64_t rs, int64_t cs, int64_t k, int64_t n, float *dst)
{
	for (int64_t q = 0; q * NR < n; q++) {
		float *d = dst + q * k * NR;
		int nr = (int)nk_min64(NR, n - q * NR);
		int64_t o = q * NR * cs;

		for (int64_t p = 0; p < k; p++) {
			if (dtype == NK_F32 && cs == 1)
				memcpy(d + p * NR, (const float *)src + o + p * rs, (size_t)nr * sizeof(float));
			else
				for (int j = 0; j < nr; j++)
					d[p * NR + j] = nk_fp_loadf(src, dtype, o + p * rs + j * cs);
			for (int j = nr; j < NR; j++)
				d[p * NR + j] = 0;
		}
	}
}

/* bf16 pair packing for the sbgemm micro-kernels (layouts in nk_gemm_impl.h); an odd k is padded with a
 * zero k. */
void nk_gemm_pack_a_pairs_ref(const void *src, int64_t rs, int64_t cs, int m, int64_t k, uint32_t *dst)
{
	const uint16_t *s = src;
	int64_t kp = (k + 1) / 2;

	for (int64_t pp = 0; pp < kp; pp++) {
		int64_t p = 2 * pp;

		for (int i = 0; i < m; i++) {
			uint32_t lo = s[i * rs + p * cs];
			uint32_t hi = p + 1 < k ? s[i * rs + (p + 1) * cs] : 0;

			dst[pp * MR + i] = lo | hi << 16;
		}
		for (int i = m; i < MR; i++)
			dst[pp * MR + i] = 0;
	}
}

void nk_gemm_pack_b_pairs_ref(const void *src, int64_t rs, int64_t cs, int64_t k, int64_t n, uint32_t *dst)
{
	const uint16_t *s = src;
	int64_t kp = (k + 1) / 2;

	for (int64_t q = 0; q * NR < n; q++) {
		uint32_t *d = dst + q * kp * NR;
		int nr = (int)nk_min64(NR, n - q * NR);
		const uint16_t *sq = s + q * NR * cs;

		for (int64_t pp = 0; pp < kp; pp++) {
			const uint16_t *r0 = sq + 2 * pp * rs, *r1 = r0 + rs;
			bool odd = 2 * pp + 1 >= k;

			for (int j = 0; j < nr; j++)
				d[pp * NR + j] = (uint32_t)r0[j * cs] | (odd ? 0u : (uint32_t)r1[j * cs] << 16);
			for (int j = nr; j < NR; j++)
				d[pp * NR + j] = 0;
		}
	}
}

const nk_gemm_isa_t nk_gemm_isa_ref = {
	.name = "portable",
	.kc = NK_GEMM_KC,
	.nc = NK_GEMM_NC,
	.sgemm = nk_sgemm_ref_14x32,
	.sgemm_b = nk_sgemm_ref_14x32_b,
	.sgemm_b_pf = nk_sgemm_ref_14x32_b_pf,
	.sgemm_bias = nk_sgemm_ref_14x32_bias,
	.sgemm_a = nk_sgemm_ref_14x32_a,
	.sbgemm = NULL,
	.sbgemm_bf16c = NULL,
	.dgemm = nk_dgemm_ref_14x16,
	.pack_a = nk_gemm_pack_a_ref,
	.pack_b = nk_gemm_pack_b_ref,
	.pack_a_pairs = nk_gemm_pack_a_pairs_ref,
	.pack_b_pairs = nk_gemm_pack_b_pairs_ref,
};
