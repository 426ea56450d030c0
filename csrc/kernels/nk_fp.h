/* nk_fp.h - element helpers for the float kernel families (GEMM, softmax, layer norm, embedding, loss,
 * attention): load/store one element of a float dtype (f32, f64, bf16, f16) as float or double, on top
 * of the conversions in nk_impl.h.  Internal to csrc/kernels.
 */
#ifndef NK_FP_H
#define NK_FP_H

#include <stddef.h>
#include <stdint.h>

#include "nk.h"
#include "nk_impl.h"

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

#endif /* NK_FP_H */
