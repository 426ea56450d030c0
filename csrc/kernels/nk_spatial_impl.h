/* nk_spatial_impl.h - element helpers of the spatial family (pool.c, interp.c, pad.c): load/store
 * one element of any dtype as double or int64, f32 rounding of the float dtypes' compute, and the
 * per-add-rounded accumulation the backward kernels use (as PyTorch's CPU: grad_input[i] += v in the
 * dtype).  Internal to csrc/kernels. */
#ifndef NK_SPATIAL_IMPL_H
#define NK_SPATIAL_IMPL_H

#include <string.h>

#include "nk.h"
#include "nk_impl.h"

static inline bool sp_is_float(int dt)
{
	return dt == NK_F32 || dt == NK_F64 || dt == NK_BF16 || dt == NK_F16;
}

static inline size_t sp_esize(int dt)
{
	switch (dt) {
	case NK_F64: case NK_I64: return 8;
	case NK_F32: case NK_I32: return 4;
	case NK_F16: case NK_BF16: case NK_I16: return 2;
	default: return 1;
	}
}

/* Element i as double (floats exactly; integers, int64 above 2^53 rounded). */
static inline double sp_ld(const void *p, int dt, int64_t i)
{
	switch (dt) {
	case NK_F32: return ((const float *)p)[i];
	case NK_F64: return ((const double *)p)[i];
	case NK_BF16: return nk_bf16_to_f32(((const uint16_t *)p)[i]);
	case NK_F16: return nk_f16_to_f32(((const uint16_t *)p)[i]);
	case NK_I64: return (double)((const int64_t *)p)[i];
	case NK_I32: return ((const int32_t *)p)[i];
	case NK_I16: return ((const int16_t *)p)[i];
	case NK_I8: return ((const int8_t *)p)[i];
	default: return ((const uint8_t *)p)[i];
	}
}

/* Element i of an integer dtype as int64. */
static inline int64_t sp_ldi(const void *p, int dt, int64_t i)
{
	switch (dt) {
	case NK_I64: return ((const int64_t *)p)[i];
	case NK_I32: return ((const int32_t *)p)[i];
	case NK_I16: return ((const int16_t *)p)[i];
	case NK_I8: return ((const int8_t *)p)[i];
	default: return ((const uint8_t *)p)[i];
	}
}

/* Stores a float-dtype value (f64 as is, the others through f32). */
static inline void sp_st(void *p, int dt, int64_t i, double v)
{
	switch (dt) {
	case NK_F64: ((double *)p)[i] = v; break;
	case NK_F32: ((float *)p)[i] = (float)v; break;
	case NK_BF16: ((uint16_t *)p)[i] = nk_f32_to_bf16((float)v); break;
	default: ((uint16_t *)p)[i] = nk_f32_to_f16((float)v); break;
	}
}

static inline void sp_sti(void *p, int dt, int64_t i, int64_t v)
{
	switch (dt) {
	case NK_I64: ((int64_t *)p)[i] = v; break;
	case NK_I32: ((int32_t *)p)[i] = (int32_t)v; break;
	case NK_I16: ((int16_t *)p)[i] = (int16_t)v; break;
	case NK_I8: ((int8_t *)p)[i] = (int8_t)v; break;
	default: ((uint8_t *)p)[i] = (uint8_t)v; break;
	}
}

/* The compute precision of a float dtype: double for f64, float (exactly emulated: one IEEE operation
 * done in double and rounded to float gives the float result) for the others. */
static inline double sp_r(bool f64, double v)
{
	return f64 ? v : (double)(float)v;
}

/* p[i] += v with the sum rounded to the dtype (v already in compute precision). */
static inline void sp_add(void *p, int dt, int64_t i, double v)
{
	switch (dt) {
	case NK_F64: ((double *)p)[i] += v; break;
	case NK_F32: ((float *)p)[i] += (float)v; break;
	case NK_BF16: ((uint16_t *)p)[i] = nk_f32_to_bf16(nk_bf16_to_f32(((uint16_t *)p)[i]) + (float)v); break;
	default: ((uint16_t *)p)[i] = nk_f32_to_f16(nk_f16_to_f32(((uint16_t *)p)[i]) + (float)v); break;
	}
}

/* v rounded to a float dtype (bf16/f16: as a value stored in and read back from the dtype). */
static inline double sp_rdt(int dt, double v)
{
	switch (dt) {
	case NK_F64: return v;
	case NK_F32: return (float)v;
	case NK_BF16: return nk_bf16_to_f32(nk_f32_to_bf16((float)v));
	default: return nk_f16_to_f32(nk_f32_to_f16((float)v));
	}
}

/* Element copy of any dtype (by size). */
static inline void sp_cp(void *dst, int64_t di, const void *src, int64_t si, size_t es)
{
	switch (es) {
	case 8: ((uint64_t *)dst)[di] = ((const uint64_t *)src)[si]; break;
	case 4: ((uint32_t *)dst)[di] = ((const uint32_t *)src)[si]; break;
	case 2: ((uint16_t *)dst)[di] = ((const uint16_t *)src)[si]; break;
	default: ((uint8_t *)dst)[di] = ((const uint8_t *)src)[si]; break;
	}
}

/* [h-cnn] pool_avx512.c (call only when nk_cpu_avx512()): max pooling of planes [p0, p1), as pool.c's
 * max_plane; false (nothing done) when not f32 NK_POOL_MAX or a plane is too large for it. */
bool nk_max_pool_f32_avx512(const nk_pool_args_t *a, int64_t p0, int64_t p1);

#endif /* NK_SPATIAL_IMPL_H */
