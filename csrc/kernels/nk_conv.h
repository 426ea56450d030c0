/* nk_conv.h - kernel family: convolution (direct/im2col + GEMM), transposed convolution, im2col/col2im, and their backward.
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_CONV_H
#define NK_CONV_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- convolution (conv.c) ------------------------------------------------------------------------
 * One geometry, four modes.  The convolution maps x [N, C, in...] with weight w [O, C/G, k...] to
 * y [N, O, out...] (G groups; output channel o of group o / (O/G) sees input channels of the same
 * group):
 *   y[n, o, q] = b[o] + sum_{c, j} x[n, g*C/G + c, q*stride - pad + j*dil] * w[o, c, j]
 * over kernel offsets j and positions q (per spatial dim; taps outside the input read 0).
 *   NK_CONV_FWD        y  = conv(x, w) (+ b[O] if b)
 *   NK_CONV_BWD_DATA   dx = conv^T(dy, w) (+ b[C] if b): dx[n, c, i] = sum of dy * w over the (o, j, q)
 *                      with q*stride - pad + j*dil == i.  Also the transposed convolution's forward.
 *   NK_CONV_BWD_WEIGHT dw[O, C/G, k...] = sum_{n, q} dy[n, o, q] * x[n, c, q*stride - pad + j*dil]
 *   NK_CONV_BWD_BIAS   db[O] = sum_{n, q} dy[n, o, q]
 * nsp (1..3) spatial dims; in[], out[] are given explicitly (not derived), so a transposed convolution's
 * output_padding is just a larger `in`.  All tensors contiguous (NC + spatial, row-major).
 * dtype: f32, f64, bf16, f16 (computed in f32, rounded once), or an integer dtype (computed in int64,
 * wrapping).  The optimized path needs workspace: nk_conv_workspace(a) sets a->nb (samples per GEMM)
 * and returns the bytes to pass in work/work_bytes (the reference needs none). */
enum { NK_CONV_FWD, NK_CONV_BWD_DATA, NK_CONV_BWD_WEIGHT, NK_CONV_BWD_BIAS };
typedef struct {
	int mode, dtype, nsp;
	int64_t N, C, O, G;
	int64_t in[3], out[3], k[3], stride[3], pad[3], dil[3];
	const void *x, *w, *b, *dy;
	void *y, *dx, *dw, *db;
	void *work;
	size_t work_bytes;
	int64_t nb;
} nk_conv_args_t;
size_t nk_conv_workspace(nk_conv_args_t *a);
int nk_conv_run(void *args);
int nk_conv_ref(void *args);

/* ---- im2col / col2im (conv.c): ATen's im2col/col2im (nn.functional.unfold / fold) --------------
 * image [N, C, in...], columns [N, C*kvol, L] with L = prod(out) block positions, row c*kvol + j:
 *   im2col: col[n, c*kvol + j, q] = img[n, c, q*stride - pad + j*dil] (0 outside): any dtype.
 *   col2im: img[n, c, i] = sum of col over the (j, q) that land on i: float dtypes (f32 accumulation
 *           for bf16/f16) and integer dtypes (int64). */
typedef struct {
	int dtype, nsp;
	bool col2im;
	int64_t N, C;
	int64_t in[3], out[3], k[3], stride[3], pad[3], dil[3];
	const void *src;
	void *dst;
} nk_im2col_args_t;
int nk_im2col_run(void *args);
int nk_im2col_ref(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_CONV_H */
