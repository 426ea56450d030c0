/* reduce.c - the reduction core of every reducing collective: dst = srcs[0] op srcs[1] op ... in rank
 * order, block by block through an accumulator (f32 for f32/bf16/f16, f64 for f64, 64-bit for the
 * integers), so that dst may alias any source and bf16/f16 round once.  Integer sums and products wrap
 * like the dtype (computed modulo 2^64 on unsigned words, then truncated).  Single-threaded; the loops
 * over one block are simple enough for the compiler to vectorize.
 */
#include <string.h>

#include "ncl_impl.h"
#include "nk_impl.h" /* the kernel library's bf16/f16 conversions (bit-exact with c10) */

/* The block loops below vectorize (SSE2 at the baseline ISA, whatever -march allows): a 64 MB f32
 * all_reduce spent a third of its CPU time here in scalar addss before (perf, Xeon Sapphire Rapids). */
NK_VECTORIZE_FILE

#define BLK 512

static const size_t dtype_size[NCL_NDTYPES] = { 4, 8, 2, 2, 1, 1, 2, 4, 8, 1 };
static const char *const dtype_names[NCL_NDTYPES] = {
	"float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool",
};
static const char *const redop_names[NCL_NOPS] = {
	"SUM", "PRODUCT", "MAX", "MIN", "AVG", "PREMUL_SUM", "BAND", "BOR", "BXOR",
};

size_t ncl_dtype_size(ncl_dtype_t dt)
{
	return (unsigned)dt < NCL_NDTYPES ? dtype_size[dt] : 0;
}

const char *ncl_dtype_name(ncl_dtype_t dt)
{
	return (unsigned)dt < NCL_NDTYPES ? dtype_names[dt] : "unknown";
}

const char *ncl_redop_name(ncl_redop_t op)
{
	return (unsigned)op < NCL_NOPS ? redop_names[op] : "unknown";
}

static bool is_float(ncl_dtype_t dt)
{
	return dt == NCL_F32 || dt == NCL_F64 || dt == NCL_F16 || dt == NCL_BF16;
}

bool ncl_redop_supported(ncl_redop_t op, ncl_dtype_t dt)
{
	if ((unsigned)op >= NCL_NOPS || (unsigned)dt >= NCL_NDTYPES)
		return false;
	if (op == NCL_BAND || op == NCL_BOR || op == NCL_BXOR)
		return !is_float(dt);
	if (op == NCL_AVG || op == NCL_PREMUL_SUM)
		return is_float(dt);
	return true;
}

/* ---- float accumulators -------------------------------------------------------------------------- */
static void loadf(float *restrict acc, const void *src, ncl_dtype_t dt, size_t off, size_t n)
{
	if (dt == NCL_F32) {
		memcpy(acc, (const float *)src + off, n * 4);
	} else if (dt == NCL_BF16) {
		const uint16_t *s = (const uint16_t *)src + off;
		for (size_t i = 0; i < n; i++)
			acc[i] = nk_bf16_to_f32(s[i]);
	} else {
		const uint16_t *s = (const uint16_t *)src + off;
		for (size_t i = 0; i < n; i++)
			acc[i] = nk_f16_to_f32(s[i]);
	}
}

static void storef(void *dst, ncl_dtype_t dt, size_t off, const float *restrict acc, size_t n)
{
	if (dt == NCL_F32) {
		memcpy((float *)dst + off, acc, n * 4);
	} else if (dt == NCL_BF16) {
		uint16_t *d = (uint16_t *)dst + off;
		for (size_t i = 0; i < n; i++)
			d[i] = nk_f32_to_bf16(acc[i]);
	} else {
		uint16_t *d = (uint16_t *)dst + off;
		for (size_t i = 0; i < n; i++)
			d[i] = nk_f32_to_f16(acc[i]);
	}
}

/* acc op= v, elementwise, for the float ops (SUM also serves AVG and PREMUL_SUM). */
static void combinef(float *restrict acc, const float *restrict v, size_t n, ncl_redop_t op)
{
	switch (op) {
	case NCL_PROD:
		for (size_t i = 0; i < n; i++)
			acc[i] *= v[i];
		break;
	case NCL_MAX: /* NaN wins, as in torch.maximum */
		for (size_t i = 0; i < n; i++)
			acc[i] = (acc[i] != acc[i] || acc[i] > v[i]) ? acc[i] : v[i];
		break;
	case NCL_MIN:
		for (size_t i = 0; i < n; i++)
			acc[i] = (acc[i] != acc[i] || acc[i] < v[i]) ? acc[i] : v[i];
		break;
	default:
		for (size_t i = 0; i < n; i++)
			acc[i] += v[i];
		break;
	}
}

static void reduce_f32ish(void *dst, const void *const *srcs, int nsrc, size_t count, ncl_dtype_t dt,
			  ncl_redop_t op, double scale)
{
	float acc[BLK], v[BLK];
	float fs = (float)scale, fn = (float)nsrc;

	for (size_t off = 0; off < count; off += BLK) {
		size_t n = count - off < BLK ? count - off : BLK;

		loadf(acc, srcs[0], dt, off, n);
		if (op == NCL_PREMUL_SUM)
			for (size_t i = 0; i < n; i++)
				acc[i] *= fs;
		for (int k = 1; k < nsrc; k++) {
			const float *s = v;

			if (dt == NCL_F32 && op != NCL_PREMUL_SUM) /* f32 combines straight from the source */
				s = (const float *)srcs[k] + off;
			else
				loadf(v, srcs[k], dt, off, n);
			if (op == NCL_PREMUL_SUM)
				for (size_t i = 0; i < n; i++)
					v[i] *= fs;
			combinef(acc, s, n, op);
		}
		if (op == NCL_AVG)
			for (size_t i = 0; i < n; i++)
				acc[i] /= fn;
		storef(dst, dt, off, acc, n);
	}
}

static void reduce_f64(void *dst, const void *const *srcs, int nsrc, size_t count, ncl_redop_t op,
		       double scale)
{
	double acc[BLK];

	for (size_t off = 0; off < count; off += BLK) {
		size_t n = count - off < BLK ? count - off : BLK;
		const double *s0 = (const double *)srcs[0] + off;

		memcpy(acc, s0, n * 8);
		if (op == NCL_PREMUL_SUM)
			for (size_t i = 0; i < n; i++)
				acc[i] *= scale;
		for (int k = 1; k < nsrc; k++) {
			const double *s = (const double *)srcs[k] + off;

			switch (op) {
			case NCL_PROD:
				for (size_t i = 0; i < n; i++)
					acc[i] *= s[i];
				break;
			case NCL_MAX:
				for (size_t i = 0; i < n; i++)
					acc[i] = (acc[i] != acc[i] || acc[i] > s[i]) ? acc[i] : s[i];
				break;
			case NCL_MIN:
				for (size_t i = 0; i < n; i++)
					acc[i] = (acc[i] != acc[i] || acc[i] < s[i]) ? acc[i] : s[i];
				break;
			case NCL_PREMUL_SUM:
				for (size_t i = 0; i < n; i++)
					acc[i] += s[i] * scale;
				break;
			default:
				for (size_t i = 0; i < n; i++)
					acc[i] += s[i];
				break;
			}
		}
		if (op == NCL_AVG)
			for (size_t i = 0; i < n; i++)
				acc[i] /= (double)nsrc;
		memcpy((double *)dst + off, acc, n * 8);
	}
}

/* ---- integer accumulators: signed values sign-extended into int64, arithmetic on uint64 --------- */
static void loadi(int64_t *acc, const void *src, ncl_dtype_t dt, size_t off, size_t n)
{
	switch (dt) {
	case NCL_I8: { const int8_t *s = (const int8_t *)src + off; for (size_t i = 0; i < n; i++) acc[i] = s[i]; break; }
	case NCL_U8: { const uint8_t *s = (const uint8_t *)src + off; for (size_t i = 0; i < n; i++) acc[i] = s[i]; break; }
	case NCL_BOOL: { const uint8_t *s = (const uint8_t *)src + off; for (size_t i = 0; i < n; i++) acc[i] = s[i] != 0; break; }
	case NCL_I16: { const int16_t *s = (const int16_t *)src + off; for (size_t i = 0; i < n; i++) acc[i] = s[i]; break; }
	case NCL_I32: { const int32_t *s = (const int32_t *)src + off; for (size_t i = 0; i < n; i++) acc[i] = s[i]; break; }
	default: memcpy(acc, (const int64_t *)src + off, n * 8); break;
	}
}

static void storei(void *dst, ncl_dtype_t dt, size_t off, const int64_t *acc, size_t n)
{
	switch (dt) {
	case NCL_I8: { int8_t *d = (int8_t *)dst + off; for (size_t i = 0; i < n; i++) d[i] = (int8_t)(uint8_t)acc[i]; break; }
	case NCL_U8: { uint8_t *d = (uint8_t *)dst + off; for (size_t i = 0; i < n; i++) d[i] = (uint8_t)acc[i]; break; }
	case NCL_BOOL: { uint8_t *d = (uint8_t *)dst + off; for (size_t i = 0; i < n; i++) d[i] = acc[i] != 0; break; }
	case NCL_I16: { int16_t *d = (int16_t *)dst + off; for (size_t i = 0; i < n; i++) d[i] = (int16_t)(uint16_t)acc[i]; break; }
	case NCL_I32: { int32_t *d = (int32_t *)dst + off; for (size_t i = 0; i < n; i++) d[i] = (int32_t)(uint32_t)acc[i]; break; }
	default: memcpy((int64_t *)dst + off, acc, n * 8); break;
	}
}

static void combinei(int64_t *restrict acc, const int64_t *restrict v, size_t n, ncl_redop_t op, bool boolean)
{
	if (boolean) /* bool: SUM/MAX/BOR are "or", PROD/MIN/BAND "and", BXOR "xor" */
		op = (op == NCL_SUM || op == NCL_MAX) ? NCL_BOR : (op == NCL_PROD || op == NCL_MIN) ? NCL_BAND : op;
	switch (op) {
	case NCL_PROD:
		for (size_t i = 0; i < n; i++)
			acc[i] = (int64_t)((uint64_t)acc[i] * (uint64_t)v[i]);
		break;
	case NCL_MAX:
		for (size_t i = 0; i < n; i++)
			acc[i] = acc[i] > v[i] ? acc[i] : v[i];
		break;
	case NCL_MIN:
		for (size_t i = 0; i < n; i++)
			acc[i] = acc[i] < v[i] ? acc[i] : v[i];
		break;
	case NCL_BAND:
		for (size_t i = 0; i < n; i++)
			acc[i] &= v[i];
		break;
	case NCL_BOR:
		for (size_t i = 0; i < n; i++)
			acc[i] |= v[i];
		break;
	case NCL_BXOR:
		for (size_t i = 0; i < n; i++)
			acc[i] ^= v[i];
		break;
	default:
		for (size_t i = 0; i < n; i++)
			acc[i] = (int64_t)((uint64_t)acc[i] + (uint64_t)v[i]);
		break;
	}
}

static void reduce_int(void *dst, const void *const *srcs, int nsrc, size_t count, ncl_dtype_t dt,
		       ncl_redop_t op)
{
	int64_t acc[BLK], v[BLK];

	for (size_t off = 0; off < count; off += BLK) {
		size_t n = count - off < BLK ? count - off : BLK;

		loadi(acc, srcs[0], dt, off, n);
		for (int k = 1; k < nsrc; k++) {
			loadi(v, srcs[k], dt, off, n);
			combinei(acc, v, n, op, dt == NCL_BOOL);
		}
		storei(dst, dt, off, acc, n);
	}
}

int ncl_reduce_buffers(void *dst, const void *const *srcs, int nsrc, size_t count, ncl_dtype_t dt,
		       ncl_redop_t op, double scale)
{
	if (count == 0)
		return NCL_OK;
	if (!dst || !srcs || nsrc < 1)
		return ncl_set_error(NCL_ERR_INVALID, "ncl_reduce_buffers: null buffer or no source");
	for (int k = 0; k < nsrc; k++)
		if (!srcs[k])
			return ncl_set_error(NCL_ERR_INVALID, "ncl_reduce_buffers: source %d is null", k);
	if (!ncl_redop_supported(op, dt))
		return ncl_set_error(NCL_ERR_INVALID, "ncl: reduce op %s is not supported for %s",
				     ncl_redop_name(op), ncl_dtype_name(dt));
	if (dt == NCL_F64)
		reduce_f64(dst, srcs, nsrc, count, op, scale);
	else if (is_float(dt))
		reduce_f32ish(dst, srcs, nsrc, count, dt, op, scale);
	else
		reduce_int(dst, srcs, nsrc, count, dt, op);
	return NCL_OK;
}
