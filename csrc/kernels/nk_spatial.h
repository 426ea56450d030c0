/* nk_spatial.h - kernel family: pooling (max/avg/adaptive, unpool), interpolation (nearest/linear/cubic/area), padding modes, and their backward.
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin).
 *
 * Geometry shared by the family: a contiguous [NC, D, H, W] input and a contiguous [NC, D', H', W']
 * output; 1-d and 2-d ops set the unused leading spatial sizes to 1 (kernel 1, stride 1, pad 0), so
 * one kernel covers all three ranks.  Spatial arrays are indexed [0] = D, [1] = H, [2] = W.
 * Index tensors (max pooling, unpooling) are int64, flat within a plane (d*H*W + h*W + w), as ATen's.
 * Dtypes: f32, f64, bf16, f16 everywhere (f32/bf16/f16 accumulate in f32, f64 in f64); integer dtypes
 * where PyTorch's CPU has them: max pooling (all ints), avg pooling (integer sum, truncating divide),
 * nearest interpolation and padding (any dtype, values are copied), uint8 bilinear/bicubic.
 */
#ifndef NK_SPATIAL_H
#define NK_SPATIAL_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pooling --------------------------------------------------------------------------------- */
typedef enum {
	NK_POOL_MAX,          /* window max; y and idx (first max, a NaN wins as on the CPU) */
	NK_POOL_AVG,          /* window mean; count_include_pad, divisor (divisor_override, 0 = none) */
	NK_POOL_ADAPTIVE_MAX, /* window [floor(o*I/O), ceil((o+1)*I/O)); y and idx */
	NK_POOL_ADAPTIVE_AVG, /* same windows, mean */
	NK_POOL_NMODES
} nk_pool_mode_t;

typedef struct {
	int dtype, mode;
	int64_t NC;
	int64_t in[3], out[3];
	int64_t k[3], s[3], p[3], dil[3]; /* NK_POOL_MAX/AVG only (dil: MAX only) */
	bool count_include_pad;
	bool acc_dtype; /* AVG modes, bf16/f16: round the sum and each divide to the dtype (ATen's 3-d
	                 * adaptive average pooling does; everything else accumulates in f32) */
	int64_t divisor;
	const void *x;
	void *y;
	int64_t *idx; /* MAX modes: [NC, out] indices */
} nk_pool_args_t;
int nk_pool_run(void *args);
int nk_pool_ref(void *args);

/* Backward: gx := d(loss)/dx from gy (geometry and mode as the forward).  MAX modes scatter-add gy
 * through idx (each index checked against the plane, a bad one fails the kernel); AVG modes spread
 * gy/divisor over each window.  Additions in a plane run in output order (deterministic). */
typedef struct {
	int dtype, mode;
	int64_t NC;
	int64_t in[3], out[3];
	int64_t k[3], s[3], p[3], dil[3];
	bool count_include_pad;
	int64_t divisor;
	const void *gy;
	const int64_t *idx;
	void *gx;
} nk_pool_bwd_args_t;
int nk_pool_bwd_run(void *args);
int nk_pool_bwd_ref(void *args);

/* Max unpooling: y (NC x out_plane) = 0, then y[nc][idx[nc][i]] = x[nc][i] in order (the last write
 * wins).  Any dtype.  An index outside [0, out_plane) fails the kernel ("Found an invalid max index"). */
typedef struct {
	int dtype;
	int64_t NC, in_plane, out_plane;
	const void *x;
	const int64_t *idx;
	void *y;
} nk_unpool_args_t;
int nk_unpool_run(void *args);
int nk_unpool_ref(void *args);

/* ---- interpolation --------------------------------------------------------------------------- */
/* Separable resampling: each output element is sum_a wd_a * (sum_b wh_b * (sum_c ww_c * x[a, b, c]))
 * over the taps of each dimension, computed as ATen's CPU (same index/weight formulas, float math for
 * f32/bf16/f16 and double for f64; nearest always computes its scale in float).  Dimensions before the
 * last `nsp` are copied (in == out, one tap).  scale[d] > 0 is the user's scale factor (used when
 * align_corners is false), otherwise in/out.  uint8 2-d linear/cubic take ATen's fixed-point (Pillow)
 * path instead, bit-exact with the CPU (interp.c). */
typedef enum {
	NK_INTERP_NEAREST,       /* floor(o * scale), ATen's legacy 'nearest' */
	NK_INTERP_NEAREST_EXACT, /* floor((o + 0.5) * scale) */
	NK_INTERP_LINEAR,        /* (bi/tri)linear, align_corners */
	NK_INTERP_CUBIC,         /* bicubic A = -0.75, border-clamped taps, align_corners */
	NK_INTERP_NMODES
} nk_interp_mode_t;

typedef struct {
	int dtype, mode, nsp;
	bool align_corners;
	int64_t NC;
	int64_t in[3], out[3];
	double scale[3];
	const void *x;
	void *y;
} nk_interp_args_t;
int nk_interp_run(void *args);
int nk_interp_ref(void *args);

/* Backward: gx = 0, then gx[taps] += weight * gy for every output element in order (float dtypes). */
typedef struct {
	int dtype, mode, nsp;
	bool align_corners;
	int64_t NC;
	int64_t in[3], out[3];
	double scale[3];
	const void *gy;
	void *gx;
} nk_interp_bwd_args_t;
int nk_interp_bwd_run(void *args);
int nk_interp_bwd_ref(void *args);

/* ---- padding ----------------------------------------------------------------------------------- */
/* out[d] = in[d] + lo[d] + hi[d]; lo/hi may be negative (cropping).  Output element o along a dim
 * reads input index: reflect: mirror without repeating the edge (needs pad < in), replicate: clamp.
 * Forward copies values (any dtype); backward (float dtypes) zeroes gx and adds gy in output order. */
typedef enum { NK_PAD_REFLECT, NK_PAD_REPLICATE, NK_PAD_NMODES } nk_pad_mode_t;

typedef struct {
	int dtype, mode;
	int64_t NC;
	int64_t in[3], out[3], lo[3];
	const void *x; /* backward: gy (out-shaped) */
	void *y;       /* backward: gx (in-shaped) */
} nk_pad_args_t;
int nk_pad_run(void *args);
int nk_pad_ref(void *args);
int nk_pad_bwd_run(void *args);
int nk_pad_bwd_ref(void *args);

/* ---- grid sampling (2-d) --------------------------------------------------------------------------- */
/* y[n, c, h, w] = x[n, c] sampled at grid[n, h, w] = (gx, gy) in [-1, 1] (ATen's grid_sampler_2d):
 * contiguous x [N, C, IH, IW], grid [N, OH, OW, 2] and y [N, C, OH, OW] of one float dtype. */
typedef enum { NK_GRID_BILINEAR, NK_GRID_NEAREST, NK_GRID_BICUBIC, NK_GRID_NMODES } nk_grid_mode_t;
typedef enum { NK_GRID_PAD_ZEROS, NK_GRID_PAD_BORDER, NK_GRID_PAD_REFLECTION, NK_GRID_NPADS } nk_grid_pad_t;

typedef struct {
	int dtype, mode, padding;
	bool align_corners;
	int64_t N, C, IH, IW, OH, OW;
	const void *x, *grid;
	void *y;
} nk_grid_sample_args_t;
int nk_grid_sample_run(void *args);
int nk_grid_sample_ref(void *args);

/* Backward: gx (may be NULL) = d/dx, ggrid (may be NULL) = d/dgrid of sum(y * gy). */
typedef struct {
	int dtype, mode, padding;
	bool align_corners;
	int64_t N, C, IH, IW, OH, OW;
	const void *gy, *x, *grid;
	void *gx, *ggrid;
} nk_grid_sample_bwd_args_t;
int nk_grid_sample_bwd_run(void *args);
int nk_grid_sample_bwd_ref(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_SPATIAL_H */
