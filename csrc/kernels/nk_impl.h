/* nk_impl.h - internals shared by the kernel library's files (never included outside csrc/kernels).
 *
 * - nk_min64, nk_cdiv;
 * - bf16/f16 <-> f32 conversions, round-to-nearest-even, bit-exact with c10::BFloat16 / c10::Half;
 * - scalar load/store of any nk dtype as double or int64, with PyTorch's cast rules;
 * - block load/store: a strided run of any dtype to/from a float, double or int64 buffer;
 * - float-dtype element helpers (nk_fp_*) for the float kernel families, and a vectorizable expf;
 * - Philox4x32-10 (Random123) for the counter-based generators;
 * - the strided loop (nk_loop_t): coalesced nk_iter_t walked row by row, optionally in parallel;
 * - the entry points of the *_avx512.c files (pointwise, reduce, random, optim), used only where the
 *   dispatch context (dispatch.c) chose AVX-512 for their family,
 *   and the references that nk.h does not declare (copy, random, dropout).
 */
#ifndef NK_IMPL_H
#define NK_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "nk.h"

/* Element count above which a kernel splits its work over the runtime's pool. */
#define NK_PARALLEL_GRAIN 32768

/* Enable the loop vectorizer's dynamic cost model in a kernel file (GCC's -O2 default model refuses
 * loops that need an alias check or an epilogue, i.e. nearly all of ours).  Clang vectorizes anyway.
 * (Loops calling libm, sqrtf included, stay scalar: errno; the *_avx512.c files cover the hot ones.) */
#if defined(__GNUC__) && !defined(__clang__)
#define NK_VECTORIZE_FILE _Pragma("GCC optimize(\"tree-vectorize\", \"vect-cost-model=dynamic\")")
#else
#define NK_VECTORIZE_FILE
#endif

/* ---- integer helpers ---------------------------------------------------------------------- */
static inline int64_t nk_min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* ceil(a / b) for a >= 0, b > 0 */
static inline int64_t nk_cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

/* ---- bit casts ------------------------------------------------------------------------------- */
static inline uint32_t nk_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float nk_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* ---- bf16 ------------------------------------------------------------------------------------ */
static inline float nk_bf16_to_f32(uint16_t h)
{
	return nk_bits_f32((uint32_t)h << 16);
}

/* Round to nearest even; NaN becomes the canonical quiet NaN 0x7fc0 (as c10::BFloat16 does). */
static inline uint16_t nk_f32_to_bf16(float f)
{
	uint32_t u = nk_f32_bits(f);
	if (f != f)
		return 0x7fc0;
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* ---- f16 (IEEE binary16) --------------------------------------------------------------------- */
/* Exact widening, subnormals included (F. Giesen's half_to_float). */
static inline float nk_f16_to_f32(uint16_t h)
{
	const uint32_t shifted_exp = 0x7c00u << 13;
	uint32_t o = ((uint32_t)h & 0x7fffu) << 13;
	uint32_t exp = shifted_exp & o;
	o += (uint32_t)(127 - 15) << 23;
	if (exp == shifted_exp) {
		o += (uint32_t)(128 - 16) << 23; /* Inf/NaN */
	} else if (exp == 0) {
		o += 1u << 23;                   /* zero/subnormal: renormalize */
		o = nk_f32_bits(nk_bits_f32(o) - nk_bits_f32(113u << 23));
	}
	return nk_bits_f32(o | ((uint32_t)(h & 0x8000u) << 16));
}

/* Round to nearest even, overflow to Inf, NaN to quiet NaN (F. Giesen's float_to_half_fast3_rtne). */
static inline uint16_t nk_f32_to_f16(float f)
{
	uint32_t u = nk_f32_bits(f);
	uint32_t sign = u & 0x80000000u;
	uint32_t o;
	u ^= sign;
	if (u >= (uint32_t)(127 + 16) << 23) {
		o = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
	} else if (u < 113u << 23) {
		const uint32_t magic = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
		o = nk_f32_bits(nk_bits_f32(u) + nk_bits_f32(magic)) - magic;
	} else {
		uint32_t mant_odd = (u >> 13) & 1u;
		u += ((uint32_t)(15 - 127) << 23) + 0xfffu;
		u += mant_odd;
		o = u >> 13;
	}
	return (uint16_t)(o | (sign >> 16));
}

/* ---- dtype classes --------------------------------------------------------------------------- */
static inline bool nk_dtype_valid(int dt)
{
	return dt >= 0 && dt < NK_NDTYPES;
}

static inline bool nk_is_float(int dt)
{
	return dt == NK_F16 || dt == NK_BF16 || dt == NK_F32 || dt == NK_F64;
}

static inline bool nk_is_int(int dt)
{
	return dt >= NK_BOOL && dt <= NK_I64; /* bool counts as an integer (0/1) */
}

/* ---- float -> integer casts (x86 semantics that PyTorch CPU exhibits) ------------------------ */
/* In range: C truncation.  Out of range or NaN: INT_MIN of the conversion width. */
static inline int64_t nk_f2i64(double d)
{
	return (d > -9223372036854775808.0 && d < 9223372036854775808.0) ? (int64_t)d : INT64_MIN;
}

static inline int32_t nk_f2i32(double d)
{
	return (d > -2147483649.0 && d < 2147483648.0) ? (int32_t)d : INT32_MIN;
}

/* ---- scalar load / store of any dtype --------------------------------------------------------- */
double nk_load_f64(const void *p, int dt);
int64_t nk_load_i64(const void *p, int dt); /* floats: truncating cast as nk_store_f64 to I64 */
float nk_load_f32(const void *p, int dt);   /* ints convert directly (int64 -> float, one rounding) */
/* Store with PyTorch's cast rules: float->int truncates (nk_f2i*), ->bool is != 0, f64 -> bf16/f16
 * goes through f32 (as c10 does), int64 -> f32 rounds once. */
void nk_store_f64(void *p, int dt, double v);
void nk_store_i64(void *p, int dt, int64_t v);
void nk_store_f32(void *p, int dt, float v);

/* ---- block load / store: n elements at src + i*st (bytes) <-> a dense buffer ---------------- */
void nk_block_load_f32(float *dst, const char *src, int64_t st, int dt, int64_t n);
void nk_block_load_f64(double *dst, const char *src, int64_t st, int dt, int64_t n);
void nk_block_load_i64(int64_t *dst, const char *src, int64_t st, int dt, int64_t n);
void nk_block_store_f32(char *dst, int64_t st, int dt, const float *src, int64_t n);
void nk_block_store_f64(char *dst, int64_t st, int dt, const double *src, int64_t n);
void nk_block_store_i64(char *dst, int64_t st, int dt, const int64_t *src, int64_t n);

/* ---- float-dtype elements (GEMM, softmax, layer norm, embedding, loss, attention) ---------------- */
/* Load/store one element of a float dtype (f32, f64, bf16, f16) as float or double. */
/* True for the dtypes the float kernels accept. */
static inline bool nk_fp_is_float(int dtype)
{
	return dtype == NK_F32 || dtype == NK_F64 || dtype == NK_BF16 || dtype == NK_F16;
}

/* Bytes per element of a float dtype. */
static inline size_t nk_fp_elem_size(int dtype)
{
	return dtype == NK_F64 ? 8 : dtype == NK_F32 ? 4 : 2;
}

/* Element i of a float-dtype array, as float (f64 is narrowed). */
static inline float nk_fp_loadf(const void *p, int dtype, int64_t i)
{
	switch (dtype) {
	case NK_F32: return ((const float *)p)[i];
	case NK_F64: return (float)((const double *)p)[i];
	case NK_BF16: return nk_bf16_to_f32(((const uint16_t *)p)[i]);
	default: return nk_f16_to_f32(((const uint16_t *)p)[i]);
	}
}

static inline void nk_fp_storef(void *p, int dtype, int64_t i, float v)
{
	switch (dtype) {
	case NK_F32: ((float *)p)[i] = v; break;
	case NK_F64: ((double *)p)[i] = v; break;
	case NK_BF16: ((uint16_t *)p)[i] = nk_f32_to_bf16(v); break;
	default: ((uint16_t *)p)[i] = nk_f32_to_f16(v); break;
	}
}

/* Element i as double (exact for every float dtype). */
static inline double nk_fp_loadd(const void *p, int dtype, int64_t i)
{
	return dtype == NK_F64 ? ((const double *)p)[i] : (double)nk_fp_loadf(p, dtype, i);
}

/* Element i as double, or dflt where p is NULL (optional parameters: weights, biases). */
static inline double nk_fp_loadd_or(const void *p, int dtype, int64_t i, double dflt)
{
	return p ? nk_fp_loadd(p, dtype, i) : dflt;
}

/* Stores v: f64 as is, the others through f32 (as c10 casts double -> bf16/f16). */
static inline void nk_fp_stored(void *p, int dtype, int64_t i, double v)
{
	if (dtype == NK_F64)
		((double *)p)[i] = v;
	else
		nk_fp_storef(p, dtype, i, (float)v);
}

/* exp(x) for x <= 88.37 (softmax and attention call it with x <= 0), written so that loops over it
 * vectorize: Cephes polynomial after reduction by ln 2, about 1 ulp.  x < -87.33 gives 0 (exp(-inf) is
 * exactly 0), NaN gives NaN. */
static inline float nk_fp_expf(float x)
{
	float lo = x < -87.33654f ? -87.33654f : x;
	float xc = lo > 88.37626f ? 88.37626f : lo;
	float t = xc * 1.44269504f + 12582912.0f; /* 1.5 * 2^23: rounds to an integer in the low bits */
	float n = t - 12582912.0f;
	float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
	float p = 1.9875691500e-4f;
	float scale = nk_bits_f32((nk_f32_bits(t) - 0x4b400000u + 127u) << 23);

	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	return x < -87.33654f ? 0.0f : p * scale;
}

/* n elements of a float-dtype row from element off into buf as f32, and back (the row kernels'
 * chunk conversions: softmax, layer norm). */
static inline void nk_fp_load_row_f32(float *buf, const void *p, int dtype, int64_t off, int64_t n)
{
	size_t es = nk_fp_elem_size(dtype);

	nk_block_load_f32(buf, (const char *)p + off * (int64_t)es, (int64_t)es, dtype, n);
}

static inline void nk_fp_store_row_f32(void *p, int dtype, int64_t off, const float *buf, int64_t n)
{
	size_t es = nk_fp_elem_size(dtype);

	nk_block_store_f32((char *)p + off * (int64_t)es, (int64_t)es, dtype, buf, n);
}

/* ---- AVX-512 helpers (pointwise_avx512.c); call only where the dispatch context chose AVX-512 -- */
/* (nk_family_avx512 in nk_dispatch_impl.h).  nk_cpu_avx512: the level in force is AVX-512 or above (the
 * CPU has F/BW/VL/DQ, the reference is not forced, NEURON_KERNELS allows it); for tests. */
bool nk_cpu_avx512(void);
void nk_bf16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n);
void nk_f32_to_bf16_avx512(uint16_t *dst, const float *src, int64_t n);
/* o[i] = op(x[i], y[i], z[i]) on dense f32 buffers for the ops it vectorizes; returns false (and
 * writes nothing) for the others.  a, b: the op's scalars as float; ia as in nk_pointwise_args_t.
 * stream: write the 64-byte-aligned part of o with non-temporal stores (large outputs; the caller
 * issues _mm_sfence / nk_stream_fence before the data is handed over). */
/* pointwise_avx2.c: exp, tanh, sigmoid, silu, gelu's tanh form and the gelu (tanh) / silu backward on
 * dense f32 (x = grad, y = input for the backward ops); false for any other op or form. */
bool nk_pointwise_f32_avx2(int op, int64_t ia, float *o, const float *x, const float *y, int64_t n);
bool nk_pointwise_f32_avx512(int op, float a, float b, int64_t ia, float *o, const float *x,
			     const float *y, const float *z, int64_t n, bool stream);
void nk_stream_fence(void); /* sfence after non-temporal stores */
/* dst[0..n) = src[0..n) with non-temporal stores on the 64-byte-aligned part (large f32 outputs of
 * row kernels: softmax, layer_norm); the caller fences with nk_stream_fence() before handing over. */
void nk_stream_copy_f32_avx512(float *dst, const float *src, int64_t n);
/* Outputs at least this large (bytes) are written with non-temporal stores where supported. */
#define NK_STREAM_MIN_BYTES ((int64_t)16 << 20)

/* [h-cnn] conv_avx512.c: f32 convolution forward / stride-1 backward data as an implicit GEMM (arguments
 * already validated by nk_conv_run).  1: done, 0: not applicable (nothing written), -1: failed. */
int nk_conv_implicit_f32_avx512(const nk_conv_args_t *a);
/* [h-cnn] conv_avx512.c: f32 backward weight by register-tiled dot products over the positions, when every
 * tap reads consecutive inputs (stride 1, input as wide as the output).  Same return values. */
int nk_conv_bwd_weight_f32_avx512(const nk_conv_args_t *a);
/* [h-cnn] batchnorm_avx512.c: dense f32 segments of batchnorm.c (see there) */
double nk_norm_sum_f32_avx512(const float *x, int64_t n);
void nk_norm_dsums_f32_avx512(const float *dy, const float *x, int64_t n, double m, double *sdy, double *sdx);
void nk_norm_affine_f32_avx512(float *y, const float *x, int64_t n, float a, float b);
void nk_norm_bwd_f32_avx512(float *dx, const float *dy, const float *x, int64_t n, float a, float b, float c);

/* reduce_avx512.c: dense-row helpers of reduce.c (sums accumulate in double). */
double nk_rd_sum_f32_avx2(const float *x, int64_t n);                      /* reduce_avx2.c */
double nk_rd_sumsq_f32_avx2(const float *x, int64_t n, double shift);
float nk_rd_extremum_f32_avx2(const float *x, int64_t n, bool is_max);
double nk_rd_sum_f32_avx512(const float *x, int64_t n);
double nk_rd_sum_bf16_avx512(const uint16_t *x, int64_t n);
double nk_rd_sum_f64_avx512(const double *x, int64_t n);
double nk_rd_sumsq_f32_avx512(const float *x, int64_t n, double shift); /* sum (x - shift)^2 */
float nk_rd_extremum_f32_avx512(const float *x, int64_t n, bool is_max); /* NaN-propagating, n > 0 */
/* The same for DRAM-resident inputs (reduce.c picks them for big tensors): one-vector-per-step loops,
 * which stream from DRAM faster on Zen 4 than the unrolled cache-speed loops above. */
double nk_rd_sum_f32_dram_avx512(const float *x, int64_t n);
float nk_rd_extremum_f32_dram_avx512(const float *x, int64_t n, bool is_max);
int64_t nk_rd_argext_f32_avx512(const float *x, int64_t n, bool is_max, float *val); /* first; NaN wins */
/* acc[i] += sum of nrows rows at base + r*rs bytes, i < w <= 128 (8-row f32 blocks widened into acc) */
void nk_rd_colsum_rows_avx512(double *acc, const void *base, int64_t rs, int64_t nrows, bool bf16, int64_t w);
void nk_rd_colsum_seq_avx512(double *acc, const void *base, int64_t rs, int64_t nrows, bool bf16, int64_t w,
			     float *tmp);

/* random_avx512.c: w[j][l] = word j of the Philox block for counter (ctr + l, 0), l < 16 (bit-identical
 * to nk_philox4x32_10), and dropout of dense f32 [i0, i1) (keep iff (w1:w0) >> 11 >= thresh). */
void nk_philox16_avx512(uint64_t key, uint64_t ctr, uint32_t w[4][16]);
void nk_dropout_f32_avx512(uint64_t seed, uint64_t offset, uint64_t thresh, float scale, const float *x,
			   float *out, uint8_t *mask, int64_t i0, int64_t i1);
/* Float Box-Muller of 16 lanes (vector log/cos, within a few ulp of the scalar logf/cosf form), and the
 * f32 uniform transform (bit-identical to the scalar one, before stepping results that reached b). */
void nk_normal16_f32_avx512(const uint32_t w[4][16], float mean, float std, float out[16]);
void nk_uniform16_f32_avx512(const uint32_t w[4][16], double a, double b, float out[16]);

/* optim_avx512.c: the dense f32 Adam update (the common shapes: no amsgrad, |1 - beta1| < 0.5), with
 * the step's scalars already cast to float; bit-identical to optim.c's scalar loop. */
typedef struct {
	float grad_scale, sign, wd, decay, w1, b2, omb2, bc2, eps, nss;
	bool scaled, l2, decoupled;
} nk_adam_f32_consts_t;
void nk_adam_f32_avx512(const nk_adam_f32_consts_t *k, float *p, float *m, float *v, const float *g, int64_t n);

/* ---- references without a public declaration (same signatures as the nk.h entry points) ------- */
int nk_copy_ref(void *args);
int nk_random_ref(void *args);
int nk_dropout_ref(void *args);

/* ---- Philox4x32-10 ---------------------------------------------------------------------------- */
typedef struct {
	uint32_t v[4];
} nk_philox_out_t;

static inline uint32_t nk_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi)
{
	uint64_t p = (uint64_t)a * b;
	*hi = (uint32_t)(p >> 32);
	return (uint32_t)p;
}

/* One block of 4 random words for a 128-bit counter (ctr_lo, ctr_hi) and a 64-bit key (the seed). */
static inline nk_philox_out_t nk_philox4x32_10(uint64_t key, uint64_t ctr_lo, uint64_t ctr_hi)
{
	uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
	uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
	uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
	for (int r = 0; r < 10; r++) {
		uint32_t hi0, hi1;
		uint32_t lo0 = nk_mulhilo32(0xD2511F53u, c0, &hi0);
		uint32_t lo1 = nk_mulhilo32(0xCD9E8D57u, c2, &hi1);
		c0 = hi1 ^ c1 ^ k0;
		c1 = lo1;
		c2 = hi0 ^ c3 ^ k1;
		c3 = lo0;
		k0 += 0x9E3779B9u;
		k1 += 0xBB67AE85u;
	}
	nk_philox_out_t o = {{c0, c1, c2, c3}};
	return o;
}

/* Uniforms from Philox words: [0, 1) with 24 or 53 random bits. */
static inline float nk_u32_to_unit_f32(uint32_t w)
{
	return (float)(w >> 8) * 0x1p-24f;
}

static inline double nk_u64_to_unit_f64(uint32_t lo, uint32_t hi)
{
	uint64_t w = ((uint64_t)hi << 32) | lo;
	return (double)(w >> 11) * 0x1p-53;
}

/* ---- strided loops over an nk_iter_t ---------------------------------------------------------- */
/* Coalesced copy of an iterator: size-1 dims dropped, dims merged where every operand's strides allow
 * (the linear element order, innermost first, is unchanged). */
typedef struct {
	int ndim, nops;
	int64_t numel;
	int64_t shape[NK_MAX_DIMS];
	int64_t strides[NK_MAX_OPS][NK_MAX_DIMS];
	char *data[NK_MAX_OPS];
} nk_loop_t;

/* A row: n elements, operand k at data[k] + i*st[k]; lin is the linear index of the first element. */
typedef void (*nk_row_fn)(void *ctx, char *const *data, const int64_t *st, int64_t n, int64_t lin);

/* Validates (ndim, nops, shape, dtypes) and coalesces; on bad input calls nrt_kernel_fail naming `who`
 * and returns nonzero. */
int nk_loop_init(nk_loop_t *L, const nk_iter_t *it, int nops_min, int nops_max, const char *who);
/* Walks linear elements [lo, hi) row by row. */
void nk_loop_range(const nk_loop_t *L, int64_t lo, int64_t hi, nk_row_fn fn, void *ctx);
/* Walks all elements, split over the pool in chunks of at least grain elements (inline if smaller). */
void nk_loop_parallel(const nk_loop_t *L, int64_t grain, nk_row_fn fn, void *ctx);

/* The element offset in bytes of linear index lin for operand k of an (uncoalesced) iterator:
 * used by the reference kernels, which walk one element at a time. */
int64_t nk_iter_offset(const nk_iter_t *it, int k, int64_t lin);
int64_t nk_iter_numel(const nk_iter_t *it);

#endif /* NK_IMPL_H */
