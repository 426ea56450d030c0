/* pad.c - reflection and replication padding of [NC, D, H, W] planes, and their backward.
 *
 * Output index o along a dimension with input size I and left pad l (negative: cropping) reads input
 *   reflect:    j = o < l ? 2l - o : o < I + l ? o : 2(I + l - 1) - o,
 *   replicate:  j = o < l ? l : o < I + l ? o : I + l - 1,
 * then j - max(l, 0) + max(-l, 0) (ATen's padding kernels).  Reflection needs l, r < I (checked by the
 * glue; the kernel fails on an index that would leave the plane).  Forward copies elements (any
 * dtype); backward (float dtypes) zeroes gx and adds gy in output order, rounding each add to the
 * dtype as the CPU does.  Threading: planes over the pool.  The _ref twins are naive code of their own
 * (each output element's source from the mirror/clamp definition), not the run loops.
 */
#include <string.h>

#include "nk.h"
#include "nk_spatial_impl.h"
#include "nrt.h"

static int64_t src_index(int mode, int64_t o, int64_t I, int64_t l)
{
	int64_t j;

	if (mode == NK_PAD_REFLECT)
		j = o < l ? 2 * l - o : o < I + l ? o : 2 * (I + l - 1) - o;
	else
		j = o < l ? l : o < I + l ? o : I + l - 1;
	return j - (l > 0 ? l : 0) + (l < 0 ? -l : 0);
}

static int pad_check(const nk_pad_args_t *a, bool bwd)
{
	if (!nk_dtype_valid(a->dtype) || a->mode < 0 || a->mode >= NK_PAD_NMODES || (bwd && !sp_is_float(a->dtype))) {
		nrt_kernel_fail("pad%s: unsupported dtype %s or mode %d", bwd ? " backward" : "", nk_dtype_name(a->dtype),
				a->mode);
		return -1;
	}
	if (a->NC < 0)
		goto bad;
	for (int d = 0; d < 3; d++) {
		int64_t I = a->in[d], O = a->out[d];

		if (I < 0 || O < 0 || (O && !I))
			goto bad;
		if (O && (src_index(a->mode, 0, I, a->lo[d]) < 0 || src_index(a->mode, 0, I, a->lo[d]) >= I ||
			  src_index(a->mode, O - 1, I, a->lo[d]) < 0 || src_index(a->mode, O - 1, I, a->lo[d]) >= I))
			goto bad;
		/* reflect: the index is monotone on each of the three pieces; check the piece ends too */
		if (O && a->mode == NK_PAD_REFLECT && (a->lo[d] >= I || O - I - a->lo[d] >= I))
			goto bad;
	}
	return 0;
bad:
	nrt_kernel_fail("pad: padding or sizes out of range for the input (reflection needs padding < input size)");
	return -1;
}

/* One output row of OW elements from an input row of IW: the interior (o - l) as one copy, the
 * padded edges element by element. */
static void pad_row(char *y, const char *x, int mode, int64_t IW, int64_t OW, int64_t l, size_t es)
{
	int64_t i0 = l > 0 ? l : 0, i1 = l + IW < OW ? l + IW : OW;

	for (int64_t ow = 0; ow < i0 && ow < OW; ow++)
		sp_cp(y, ow, x, src_index(mode, ow, IW, l), es);
	if (i1 > i0)
		memcpy(y + (size_t)i0 * es, x + (size_t)(i0 - l) * es, (size_t)(i1 - i0) * es);
	for (int64_t ow = i1 > i0 ? i1 : i0; ow < OW; ow++)
		sp_cp(y, ow, x, src_index(mode, ow, IW, l), es);
}

static void pad_planes(void *ctx, int64_t p0, int64_t p1)
{
	const nk_pad_args_t *a = ctx;
	size_t es = sp_esize(a->dtype);
	int64_t IH = a->in[1], IW = a->in[2], ipl = a->in[0] * IH * IW;
	int64_t OD = a->out[0], OH = a->out[1], OW = a->out[2], opl = OD * OH * OW;

	for (int64_t nc = p0; nc < p1; nc++) {
		const char *x = (const char *)a->x + (size_t)(nc * ipl) * es;
		char *y = (char *)a->y + (size_t)(nc * opl) * es;
		int64_t o = 0;

		for (int64_t od = 0; od < OD; od++) {
			int64_t id = src_index(a->mode, od, a->in[0], a->lo[0]);

			for (int64_t oh = 0; oh < OH; oh++, o += OW) {
				int64_t row = (id * IH + src_index(a->mode, oh, IH, a->lo[1])) * IW;

				pad_row(y + (size_t)o * es, x + (size_t)row * es, a->mode, IW, OW, a->lo[2], es);
			}
		}
	}
}

static void pad_bwd_planes(void *ctx, int64_t p0, int64_t p1)
{
	const nk_pad_args_t *a = ctx;
	int dt = a->dtype;
	size_t es = sp_esize(dt);
	int64_t IH = a->in[1], IW = a->in[2], ipl = a->in[0] * IH * IW;
	int64_t OD = a->out[0], OH = a->out[1], OW = a->out[2], opl = OD * OH * OW;

	for (int64_t nc = p0; nc < p1; nc++) {
		const char *gy = (const char *)a->x + (size_t)(nc * opl) * es;
		char *gx = (char *)a->y + (size_t)(nc * ipl) * es;
		int64_t o = 0;

		memset(gx, 0, (size_t)ipl * es);
		for (int64_t od = 0; od < OD; od++) {
			int64_t id = src_index(a->mode, od, a->in[0], a->lo[0]);

			for (int64_t oh = 0; oh < OH; oh++) {
				int64_t row = (id * IH + src_index(a->mode, oh, IH, a->lo[1])) * IW;

				for (int64_t ow = 0; ow < OW; ow++, o++)
					sp_add(gx, dt, row + src_index(a->mode, ow, IW, a->lo[2]), sp_ld(gy, dt, o));
			}
		}
	}
}

int nk_pad_run(void *args)
{
	const nk_pad_args_t *a = args;
	int64_t opl = a->out[0] * a->out[1] * a->out[2];

	if (pad_check(a, false))
		return -1;
	if (a->NC && opl)
		nrt_parallel_for(a->NC, NK_PARALLEL_GRAIN / (opl + 1) + 1, pad_planes, (void *)a);
	return 0;
}

int nk_pad_bwd_run(void *args)
{
	const nk_pad_args_t *a = args;
	int64_t opl = a->out[0] * a->out[1] * a->out[2], ipl = a->in[0] * a->in[1] * a->in[2];

	if (pad_check(a, true))
		return -1;
	if (a->NC && ipl)
		nrt_parallel_for(a->NC, NK_PARALLEL_GRAIN / (opl + ipl + 1) + 1, pad_bwd_planes, (void *)a);
	return 0;
}

/* ---- references: the definitions, one output element at a time --------------------------------------- */
/* Input index of output o along a dim: p = o - l reflected about 0 and I - 1 (reflect) or clamped to
 * [0, I) (replicate); written independently of src_index's piecewise form. */
static int64_t ref_src(int mode, int64_t o, int64_t I, int64_t l)
{
	int64_t p = o - l;

	if (mode == NK_PAD_REPLICATE)
		return p < 0 ? 0 : p >= I ? I - 1 : p;
	if (p < 0)
		p = -p;
	if (p >= I)
		p = 2 * (I - 1) - p;
	return p;
}

static int64_t ref_in_offset(const nk_pad_args_t *a, int64_t nc, int64_t od, int64_t oh, int64_t ow)
{
	int64_t id = ref_src(a->mode, od, a->in[0], a->lo[0]), ih = ref_src(a->mode, oh, a->in[1], a->lo[1]);
	int64_t iw = ref_src(a->mode, ow, a->in[2], a->lo[2]);

	return ((nc * a->in[0] + id) * a->in[1] + ih) * a->in[2] + iw;
}

int nk_pad_ref(void *args)
{
	const nk_pad_args_t *a = args;
	size_t es;
	int64_t o = 0;

	if (pad_check(a, false))
		return -1;
	es = sp_esize(a->dtype);
	for (int64_t nc = 0; nc < a->NC; nc++)
		for (int64_t od = 0; od < a->out[0]; od++)
			for (int64_t oh = 0; oh < a->out[1]; oh++)
				for (int64_t ow = 0; ow < a->out[2]; ow++, o++)
					sp_cp(a->y, o, a->x, ref_in_offset(a, nc, od, oh, ow), es);
	return 0;
}

int nk_pad_bwd_ref(void *args)
{
	const nk_pad_args_t *a = args;
	int64_t o = 0, n = a->NC * a->in[0] * a->in[1] * a->in[2];

	if (pad_check(a, true))
		return -1;
	if (n == 0)
		return 0;
	memset(a->y, 0, (size_t)n * sp_esize(a->dtype));
	for (int64_t nc = 0; nc < a->NC; nc++)
		for (int64_t od = 0; od < a->out[0]; od++)
			for (int64_t oh = 0; oh < a->out[1]; oh++)
				for (int64_t ow = 0; ow < a->out[2]; ow++, o++)
					sp_add(a->y, a->dtype, ref_in_offset(a, nc, od, oh, ow), sp_ld(a->x, a->dtype, o));
	return 0;
}
