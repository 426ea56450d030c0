/* copy.c - copy/cast: out (operand 0) = (dtype0) in (operand 1), any dtype pair, any strides.
 *
 * Cast rules are PyTorch's (c10/util/TypeCast.h as built for x86): float -> integer truncates
 * (out-of-range/NaN give the conversion width's INT_MIN, u8 converts through int64), -> bool is != 0,
 * bf16/f16 round to nearest even, f64 -> bf16/f16 goes through f32, int64 -> float rounds once.
 *
 * nk_copy_run: same dtype moves bytes (memcpy per dense row), f32/bf16/f16 pairs convert through a
 * float block, other floating sources through a double block, integer sources through an int64 block.
 * Splits over the pool above NK_PARALLEL_GRAIN elements.  nk_copy_ref (nk_impl.h): one element at a
 * time through the scalar casts.
 */
#include "nk_impl.h"
#include "nrt.h"

NK_VECTORIZE_FILE

#define CP_BLK 512

typedef struct {
	int dst_dt, src_dt;
	size_t esz; /* element size when the dtypes are equal */
} copy_ctx_t;

/* Same dtype: byte moves (memcpy for dense rows, else one element at a time by size). */
static void copy_same(const copy_ctx_t *c, char *d, int64_t sd, const char *s, int64_t ss, int64_t n)
{
	int64_t e = (int64_t)c->esz;
	if (sd == e && ss == e) {
		memmove(d, s, (size_t)(n * e));
		return;
	}
	switch (e) {
	case 1: for (int64_t i = 0; i < n; i++) *(uint8_t *)(d + i * sd) = *(const uint8_t *)(s + i * ss); break;
	case 2: for (int64_t i = 0; i < n; i++) *(uint16_t *)(d + i * sd) = *(const uint16_t *)(s + i * ss); break;
	case 4: for (int64_t i = 0; i < n; i++) *(uint32_t *)(d + i * sd) = *(const uint32_t *)(s + i * ss); break;
	default: for (int64_t i = 0; i < n; i++) *(uint64_t *)(d + i * sd) = *(const uint64_t *)(s + i * ss); break;
	}
}

static bool copy_is_f32ish(int dt)
{
	return dt == NK_F32 || dt == NK_BF16 || dt == NK_F16;
}

/* A row of a casting copy, in blocks through a dense buffer of the widest type the pair needs. */
static void copy_cast(const copy_ctx_t *c, char *d, int64_t sd, const char *s, int64_t ss, int64_t n)
{
	_Alignas(64) char buf[CP_BLK * 8];
	for (int64_t i0 = 0; i0 < n; i0 += CP_BLK) {
		int64_t m = n - i0 < CP_BLK ? n - i0 : CP_BLK;
		const char *sp = s + i0 * ss;
		char *dp = d + i0 * sd;
		if (copy_is_f32ish(c->src_dt) && copy_is_f32ish(c->dst_dt)) {
			nk_block_load_f32((float *)buf, sp, ss, c->src_dt, m);
			nk_block_store_f32(dp, sd, c->dst_dt, (const float *)buf, m);
		} else if (nk_is_float(c->src_dt)) {
			nk_block_load_f64((double *)buf, sp, ss, c->src_dt, m);
			nk_block_store_f64(dp, sd, c->dst_dt, (const double *)buf, m);
		} else {
			nk_block_load_i64((int64_t *)buf, sp, ss, c->src_dt, m);
			nk_block_store_i64(dp, sd, c->dst_dt, (const int64_t *)buf, m);
		}
	}
}

static void copy_row(void *ctx, char *const *data, const int64_t *st, int64_t n, int64_t lin)
{
	const copy_ctx_t *c = ctx;
	(void)lin;
	if (c->dst_dt == c->src_dt)
		copy_same(c, data[0], st[0], data[1], st[1], n);
	else
		copy_cast(c, data[0], st[0], data[1], st[1], n);
}

int nk_copy_run(void *args)
{
	if (nk_using_reference())
		return nk_copy_ref(args);
	const nk_iter_t *it = args;
	nk_loop_t L;
	if (nk_loop_init(&L, it, 2, 2, "nk_copy"))
		return -1;
	copy_ctx_t c = {it->dtype[0], it->dtype[1], nk_dtype_size(it->dtype[0])};
	nk_loop_parallel(&L, NK_PARALLEL_GRAIN, copy_row, &c);
	return 0;
}

/* Reference: one element at a time through nk_load_* / nk_store_*. */
int nk_copy_ref(void *args)
{
	const nk_iter_t *it = args;
	nk_loop_t L;
	if (nk_loop_init(&L, it, 2, 2, "nk_copy"))
		return -1;
	int dd = it->dtype[0], sd = it->dtype[1];
	for (int64_t lin = 0; lin < L.numel; lin++) {
		char *d = it->data[0] + nk_iter_offset(it, 0, lin);
		const char *s = it->data[1] + nk_iter_offset(it, 1, lin);
		if (dd == sd)
			memcpy(d, s, nk_dtype_size(dd));
		else if (copy_is_f32ish(sd) && copy_is_f32ish(dd))
			nk_store_f32(d, dd, nk_load_f32(s, sd));
		else if (nk_is_float(sd))
			nk_store_f64(d, dd, nk_load_f64(s, sd));
		else
			nk_store_i64(d, dd, nk_load_i64(s, sd));
	}
	return 0;
}
