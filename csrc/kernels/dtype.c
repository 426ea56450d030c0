/* dtype.c - dtype facts (sizes, names), scalar loads and stores of any dtype with PyTorch's cast rules,
 * and the block loads/stores (a strided run of any dtype to or from a dense float, double or int64
 * buffer).  See nk_impl.h for the contracts. */
#include <string.h>

#include "nk_dispatch_impl.h"
#include "nk_impl.h"

NK_VECTORIZE_FILE

/* ---- dtype facts ------------------------------------------------------------------------------ */
static const size_t dtype_sizes[NK_NDTYPES] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
static const char *const dtype_names[NK_NDTYPES] = {
	"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
};

size_t nk_dtype_size(int dtype)
{
	return nk_dtype_valid(dtype) ? dtype_sizes[dtype] : 0;
}

const char *nk_dtype_name(int dtype)
{
	return nk_dtype_valid(dtype) ? dtype_names[dtype] : "invalid-dtype";
}

/* ---- scalar loads ------------------------------------------------------------------------------ */
double nk_load_f64(const void *p, int dt)
{
	switch (dt) {
	case NK_BOOL: return *(const uint8_t *)p != 0;
	case NK_U8: return *(const uint8_t *)p;
	case NK_I8: return *(const int8_t *)p;
	case NK_I16: return *(const int16_t *)p;
	case NK_I32: return *(const int32_t *)p;
	case NK_I64: return (double)*(const int64_t *)p;
	case NK_F16: return nk_f16_to_f32(*(const uint16_t *)p);
	case NK_BF16: return nk_bf16_to_f32(*(const uint16_t *)p);
	case NK_F32: return *(const float *)p;
	case NK_F64: return *(const double *)p;
	default: return 0;
	}
}

float nk_load_f32(const void *p, int dt)
{
	if (dt == NK_I64)
		return (float)*(const int64_t *)p;
	return (float)nk_load_f64(p, dt);
}

int64_t nk_load_i64(const void *p, int dt)
{
	switch (dt) {
	case NK_BOOL: return *(const uint8_t *)p != 0;
	case NK_U8: return *(const uint8_t *)p;
	case NK_I8: return *(const int8_t *)p;
	case NK_I16: return *(const int16_t *)p;
	case NK_I32: return *(const int32_t *)p;
	case NK_I64: return *(const int64_t *)p;
	default: return nk_f2i64(nk_load_f64(p, dt));
	}
}

/* ---- scalar stores ----------------------------------------------------------------------------- */
void nk_store_f32(void *p, int dt, float v)
{
	switch (dt) {
	case NK_F16: *(uint16_t *)p = nk_f32_to_f16(v); break;
	case NK_BF16: *(uint16_t *)p = nk_f32_to_bf16(v); break;
	case NK_F32: *(float *)p = v; break;
	default: nk_store_f64(p, dt, v); break;
	}
}

void nk_store_f64(void *p, int dt, double v)
{
	switch (dt) {
	case NK_BOOL: *(uint8_t *)p = v != 0; break;
	case NK_U8: *(uint8_t *)p = (uint8_t)nk_f2i64(v); break;
	case NK_I8: *(int8_t *)p = (int8_t)nk_f2i32(v); break;
	case NK_I16: *(int16_t *)p = (int16_t)nk_f2i32(v); break;
	case NK_I32: *(int32_t *)p = nk_f2i32(v); break;
	case NK_I64: *(int64_t *)p = nk_f2i64(v); break;
	case NK_F16: *(uint16_t *)p = nk_f32_to_f16((float)v); break;
	case NK_BF16: *(uint16_t *)p = nk_f32_to_bf16((float)v); break;
	case NK_F32: *(float *)p = (float)v; break;
	case NK_F64: *(double *)p = v; break;
	default: break;
	}
}

void nk_store_i64(void *p, int dt, int64_t v)
{
	switch (dt) {
	case NK_BOOL: *(uint8_t *)p = v != 0; break;
	case NK_U8: *(uint8_t *)p = (uint8_t)v; break;
	case NK_I8: *(int8_t *)p = (int8_t)v; break;
	case NK_I16: *(int16_t *)p = (int16_t)v; break;
	case NK_I32: *(int32_t *)p = (int32_t)v; break;
	case NK_I64: *(int64_t *)p = v; break;
	case NK_F16: *(uint16_t *)p = nk_f32_to_f16((float)v); break;
	case NK_BF16: *(uint16_t *)p = nk_f32_to_bf16((float)v); break;
	case NK_F32: *(float *)p = (float)v; break;
	case NK_F64: *(double *)p = (double)v; break;
	default: break;
	}
}

/* ---- block loads: one loop per source dtype so that contiguous runs vectorize ------------------ */
#define NK_AT(T, base, i, st) (*(const T *)((base) + (i) * (st)))
#define NK_PUT(T, base, i, st) (*(T *)((base) + (i) * (st)))

void nk_block_load_f32(float *dst, const char *src, int64_t st, int dt, int64_t n)
{
	if (st == 0 && n > 1) { /* broadcast */
		float v = nk_load_f32(src, dt);
		for (int64_t i = 0; i < n; i++) dst[i] = v;
		return;
	}
	switch (dt) {
	case NK_F32:
		if (st == 4) {
			memcpy(dst, src, (size_t)n * 4);
			return;
		}
		for (int64_t i = 0; i < n; i++) dst[i] = NK_AT(float, src, i, st);
		return;
	case NK_BF16:
		if (st == 2) {
			if (nk_family_avx512(NK_FAM_CAST)) {
				nk_bf16_to_f32_avx512(dst, (const uint16_t *)src, n);
				return;
			}
			const uint16_t *s = (const uint16_t *)src;
			for (int64_t i = 0; i < n; i++) dst[i] = nk_bf16_to_f32(s[i]);
			return;
		}
		for (int64_t i = 0; i < n; i++) dst[i] = nk_bf16_to_f32(NK_AT(uint16_t, src, i, st));
		return;
	case NK_F16:
		for (int64_t i = 0; i < n; i++) dst[i] = nk_f16_to_f32(NK_AT(uint16_t, src, i, st));
		return;
	case NK_F64:
		for (int64_t i = 0; i < n; i++) dst[i] = (float)NK_AT(double, src, i, st);
		return;
	case NK_I64:
		for (int64_t i = 0; i < n; i++) dst[i] = (float)NK_AT(int64_t, src, i, st);
		return;
	case NK_I32:
		for (int64_t i = 0; i < n; i++) dst[i] = (float)NK_AT(int32_t, src, i, st);
		return;
	case NK_BOOL:
		for (int64_t i = 0; i < n; i++) dst[i] = NK_AT(uint8_t, src, i, st) != 0;
		return;
	case NK_U8:
		for (int64_t i = 0; i < n; i++) dst[i] = NK_AT(uint8_t, src, i, st);
		return;
	default:
		for (int64_t i = 0; i < n; i++) dst[i] = nk_load_f32(src + i * st, dt);
		return;
	}
}

void nk_block_load_f64(double *dst, const char *src, int64_t st, int dt, int64_t n)
{
	if (st == 0 && n > 1) {
		double v = nk_load_f64(src, dt);
		for (int64_t i = 0; i < n; i++) dst[i] = v;
		return;
	}
	switch (dt) {
	case NK_F64:
		if (st == 8) {
			memcpy(dst, src, (size_t)n * 8);
			return;
		}
		for (int64_t i = 0; i < n; i++) dst[i] = NK_AT(double, src, i, st);
		return;
	case NK_F32:
		for (int64_t i = 0; i < n; i++) dst[i] = NK_AT(float, src, i, st);
		return;
	case NK_BF16:
		for (int64_t i = 0; i < n; i++) dst[i] = nk_bf16_to_f32(NK_AT(uint16_t, src, i, st));
		return;
	case NK_I64:
		for (int64_t i = 0; i < n; i++) dst[i] = (double)NK_AT(int64_t, src, i, st);
		return;
	case NK_I32:
		for (int64_t i = 0; i < n; i++) dst[i] = NK_AT(int32_t, src, i, st);
		return;
	default:
		for (int64_t i = 0; i < n; i++) dst[i] = nk_load_f64(src + i * st, dt);
		return;
	}
}

void nk_block_load_i64(int64_t *dst, const char *src, int64_t st, int dt, int64_t n)
{
	if (st == 0 && n > 1) {
		int64_t v = nk_load_i64(src, dt);
		for (int64_t i = 0; i < n; i++) dst[i] = v;
		return;
	}
	switch (dt) {
	case NK_I64:
		if (st == 8) {
			memcpy(dst, src, (size_t)n * 8);
			return;
		}
		for (int64_t i = 0; i < n; i++) dst[i] = NK_AT(int64_t, src, i, st);
		return;
	case NK_I32:
		for (int64_t i = 0; i < n; i++) dst[i] = NK_AT(int32_t, src, i, st);
		return;
	case NK_U8:
		for (int64_t i = 0; i < n; i++) dst[i] = NK_AT(uint8_t, src, i, st);
		return;
	case NK_BOOL:
		for (int64_t i = 0; i < n; i++) dst[i] = NK_AT(uint8_t, src, i, st) != 0;
		return;
	default:
		for (int64_t i = 0; i < n; i++) dst[i] = nk_load_i64(src + i * st, dt);
		return;
	}
}

/* ---- block stores ------------------------------------------------------------------------------ */
void nk_block_store_f32(char *dst, int64_t st, int dt, const float *src, int64_t n)
{
	switch (dt) {
	case NK_F32:
		if (st == 4) {
			memcpy(dst, src, (size_t)n * 4);
			return;
		}
		for (int64_t i = 0; i < n; i++) NK_PUT(float, dst, i, st) = src[i];
		return;
	case NK_BF16:
		if (st == 2) {
			if (nk_family_avx512(NK_FAM_CAST)) {
				nk_f32_to_bf16_avx512((uint16_t *)dst, src, n);
				return;
			}
			uint16_t *d = (uint16_t *)dst;
			for (int64_t i = 0; i < n; i++) d[i] = nk_f32_to_bf16(src[i]);
			return;
		}
		for (int64_t i = 0; i < n; i++) NK_PUT(uint16_t, dst, i, st) = nk_f32_to_bf16(src[i]);
		return;
	case NK_F16:
		for (int64_t i = 0; i < n; i++) NK_PUT(uint16_t, dst, i, st) = nk_f32_to_f16(src[i]);
		return;
	case NK_BOOL:
		for (int64_t i = 0; i < n; i++) NK_PUT(uint8_t, dst, i, st) = src[i] != 0;
		return;
	default:
		for (int64_t i = 0; i < n; i++) nk_store_f64(dst + i * st, dt, src[i]);
		return;
	}
}

void nk_block_store_f64(char *dst, int64_t st, int dt, const double *src, int64_t n)
{
	switch (dt) {
	case NK_F64:
		if (st == 8) {
			memcpy(dst, src, (size_t)n * 8);
			return;
		}
		for (int64_t i = 0; i < n; i++) NK_PUT(double, dst, i, st) = src[i];
		return;
	case NK_F32:
		for (int64_t i = 0; i < n; i++) NK_PUT(float, dst, i, st) = (float)src[i];
		return;
	case NK_BOOL:
		for (int64_t i = 0; i < n; i++) NK_PUT(uint8_t, dst, i, st) = src[i] != 0;
		return;
	default:
		for (int64_t i = 0; i < n; i++) nk_store_f64(dst + i * st, dt, src[i]);
		return;
	}
}

void nk_block_store_i64(char *dst, int64_t st, int dt, const int64_t *src, int64_t n)
{
	switch (dt) {
	case NK_I64:
		if (st == 8) {
			memcpy(dst, src, (size_t)n * 8);
			return;
		}
		for (int64_t i = 0; i < n; i++) NK_PUT(int64_t, dst, i, st) = src[i];
		return;
	case NK_I32:
		for (int64_t i = 0; i < n; i++) NK_PUT(int32_t, dst, i, st) = (int32_t)src[i];
		return;
	case NK_U8:
		for (int64_t i = 0; i < n; i++) NK_PUT(uint8_t, dst, i, st) = (uint8_t)src[i];
		return;
	case NK_BOOL:
		for (int64_t i = 0; i < n; i++) NK_PUT(uint8_t, dst, i, st) = src[i] != 0;
		return;
	default:
		for (int64_t i = 0; i < n; i++) nk_store_i64(dst + i * st, dt, src[i]);
		return;
	}
}
