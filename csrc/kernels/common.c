/* common.c - dtype facts, the reference switch, scalar and block casts, and the strided loop that the
 * pointwise, copy and random kernels share.  See nk_impl.h for the contracts. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "nk_impl.h"
#include "nrt.h"

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

/* ---- reference switch: 0 = not decided yet, 1 = optimized, 2 = reference ---------------------- */
static atomic_int reference_mode;

void nk_force_reference(bool on)
{
	atomic_store(&reference_mode, on ? 2 : 1);
}

bool nk_using_reference(void)
{
	int m = atomic_load(&reference_mode);
	if (m == 0) {
		const char *e = getenv("NEURON_KERNELS");
		m = (e && strcmp(e, "ref") == 0) ? 2 : 1;
		int expect = 0;
		atomic_compare_exchange_strong(&reference_mode, &expect, m);
		m = atomic_load(&reference_mode);
	}
	return m == 2;
}

/* AVX-512 paths: when the CPU has F/BW/VL/DQ, unless NEURON_KERNELS=portable (optimized portable C
 * only, to test those paths on any machine) or the reference is forced. */
bool nk_cpu_avx512(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
	static atomic_int have = -1;
	int h = atomic_load_explicit(&have, memory_order_relaxed);
	if (h < 0) {
		const char *e = getenv("NEURON_KERNELS");
		__builtin_cpu_init();
		h = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
		    !(e && strcmp(e, "portable") == 0);
		atomic_store_explicit(&have, h, memory_order_relaxed);
	}
	return h && !nk_using_reference();
#else
	return false;
#endif
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
			if (nk_cpu_avx512()) {
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
			if (nk_cpu_avx512()) {
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

/* ---- strided loops ------------------------------------------------------------------------------ */
int64_t nk_iter_numel(const nk_iter_t *it)
{
	int64_t n = 1;
	for (int d = 0; d < it->ndim; d++)
		n *= it->shape[d];
	return n;
}

int64_t nk_iter_offset(const nk_iter_t *it, int k, int64_t lin)
{
	int64_t off = 0;
	for (int d = 0; d < it->ndim; d++) {
		int64_t sz = it->shape[d];
		off += (lin % sz) * it->strides[k][d];
		lin /= sz;
	}
	return off;
}

/* Checks the iterator's header fields; returns nonzero after nrt_kernel_fail on garbage. */
static int loop_validate(const nk_iter_t *it, int nops_min, int nops_max, const char *who)
{
	if (it->ndim < 0 || it->ndim > NK_MAX_DIMS) {
		nrt_kernel_fail("%s: ndim %d outside [0, %d]", who, it->ndim, NK_MAX_DIMS);
		return -1;
	}
	if (it->nops < nops_min || it->nops > nops_max) {
		nrt_kernel_fail("%s: %d operands, expected %d..%d", who, it->nops, nops_min, nops_max);
		return -1;
	}
	int64_t numel = 1;
	for (int d = 0; d < it->ndim; d++) {
		if (it->shape[d] < 0) {
			nrt_kernel_fail("%s: negative size %lld in dim %d", who, (long long)it->shape[d], d);
			return -1;
		}
		if (it->shape[d] && numel > INT64_MAX / it->shape[d]) {
			nrt_kernel_fail("%s: element count overflows int64", who);
			return -1;
		}
		numel *= it->shape[d];
	}
	for (int k = 0; k < it->nops; k++) {
		if (!nk_dtype_valid(it->dtype[k])) {
			nrt_kernel_fail("%s: operand %d has invalid dtype %d", who, k, it->dtype[k]);
			return -1;
		}
	}
	return 0;
}

int nk_loop_init(nk_loop_t *L, const nk_iter_t *it, int nops_min, int nops_max, const char *who)
{
	if (loop_validate(it, nops_min, nops_max, who))
		return -1;
	memset(L, 0, sizeof *L);
	L->nops = it->nops;
	L->numel = nk_iter_numel(it);
	for (int k = 0; k < it->nops; k++)
		L->data[k] = it->data[k];
	int nd = 0;
	for (int d = 0; d < it->ndim; d++) {
		if (it->shape[d] == 1)
			continue;
		bool merge = nd > 0;
		for (int k = 0; merge && k < it->nops; k++)
			merge = it->strides[k][d] == L->strides[k][nd - 1] * L->shape[nd - 1];
		if (merge) {
			L->shape[nd - 1] *= it->shape[d];
			continue;
		}
		L->shape[nd] = it->shape[d];
		for (int k = 0; k < it->nops; k++)
			L->strides[k][nd] = it->strides[k][d];
		nd++;
	}
	if (nd == 0) { /* a single element (or ndim 0) */
		L->shape[0] = 1;
		nd = 1;
	}
	L->ndim = nd;
	return 0;
}

void nk_loop_range(const nk_loop_t *L, int64_t lo, int64_t hi, nk_row_fn fn, void *ctx)
{
	if (lo >= hi)
		return;
	int64_t idx[NK_MAX_DIMS];
	char *ptr[NK_MAX_OPS];
	int64_t st0[NK_MAX_OPS];
	int64_t rem = lo;
	for (int k = 0; k < L->nops; k++) {
		ptr[k] = L->data[k];
		st0[k] = L->strides[k][0];
	}
	for (int d = 0; d < L->ndim; d++) {
		idx[d] = rem % L->shape[d];
		rem /= L->shape[d];
		for (int k = 0; k < L->nops; k++)
			ptr[k] += idx[d] * L->strides[k][d];
	}
	int64_t pos = lo;
	while (pos < hi) {
		int64_t n = L->shape[0] - idx[0];
		if (n > hi - pos)
			n = hi - pos;
		fn(ctx, ptr, st0, n, pos);
		pos += n;
		if (pos >= hi)
			break;
		/* advance: dim 0 to its end (we only stop mid-row at hi), then carry upwards */
		for (int k = 0; k < L->nops; k++)
			ptr[k] -= idx[0] * st0[k];
		idx[0] = 0;
		for (int d = 1; d < L->ndim; d++) {
			idx[d]++;
			for (int k = 0; k < L->nops; k++)
				ptr[k] += L->strides[k][d];
			if (idx[d] < L->shape[d])
				break;
			for (int k = 0; k < L->nops; k++)
				ptr[k] -= idx[d] * L->strides[k][d];
			idx[d] = 0;
		}
	}
}

typedef struct {
	const nk_loop_t *L;
	nk_row_fn fn;
	void *ctx;
} loop_task_t;

static void loop_task(void *ctx, int64_t begin, int64_t end)
{
	const loop_task_t *t = ctx;
	nk_loop_range(t->L, begin, end, t->fn, t->ctx);
}

void nk_loop_parallel(const nk_loop_t *L, int64_t grain, nk_row_fn fn, void *ctx)
{
	if (L->numel <= grain) {
		nk_loop_range(L, 0, L->numel, fn, ctx);
		return;
	}
	loop_task_t t = {L, fn, ctx};
	nrt_parallel_for(L->numel, grain, loop_task, &t);
}
