/* nk.h - TorchNeuron kernel library: descriptors in, results out.
 *
 * No PyTorch types, no allocation inside kernels.  Each family has an argument struct and an entry
 * point `int nk_<family>_run(void *args)` with the nrt_kernel_fn signature, so the glue launches it on a
 * queue with nrt_queue_launch(q, nk_<family>_run, &args, sizeof args, "aten::op").  An entry point
 * returns 0, or nonzero after nrt_kernel_fail("...") (unsupported dtype/op, bad index, ...).
 * Kernels parallelize over the runtime pool (nrt_parallel_for) above a size threshold.
 *
 * Dtypes: f32, f64, bf16, f16, i64, i32, i16, i8, u8, bool.  f64 and i64 are computed at full width;
 * bf16 and f16 are computed/accumulated in f32.
 * Shape letters: B batch, T time, C channels, M N K for GEMM, O R I for reductions (outer, reduced,
 * inner).  Strides are in elements unless a field says bytes.
 */
#ifndef NK_H
#define NK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	NK_BOOL = 0, NK_U8, NK_I8, NK_I16, NK_I32, NK_I64, NK_F16, NK_BF16, NK_F32, NK_F64, NK_NDTYPES
} nk_dtype_t;

size_t nk_dtype_size(int dtype);
const char *nk_dtype_name(int dtype);
/* Use the portable reference kernels only (also forced by NEURON_KERNELS=ref in the environment). */
void nk_force_reference(bool on);
bool nk_using_reference(void);

/* ---- strided iteration (the metadata of ATen's TensorIterator) --------------------------------- */
#define NK_MAX_DIMS 16
#define NK_MAX_OPS 4
typedef struct {
	int ndim;                                 /* dims ordered innermost first; ndim 0 = one element */
	int nops;                                 /* outputs first, then inputs */
	int64_t shape[NK_MAX_DIMS];
	char *data[NK_MAX_OPS];
	int64_t strides[NK_MAX_OPS][NK_MAX_DIMS]; /* BYTES, per operand per dim (0 = broadcast) */
	int8_t dtype[NK_MAX_OPS];
} nk_iter_t;

/* ---- pointwise: out = f(in0[, in1[, in2]]) ------------------------------------------------------ */
/* Operand 0 is the output.  Inputs have the compute dtype (the iterator's common dtype) unless the op
 * says otherwise; the output has the compute dtype, or bool for predicates (NK_OP_EQ.., ISNAN..).
 * Scalars a, b are parameters in double (float math) and ia/ib in int64 (integer math). */
typedef enum {
	/* nullary (nops 1) */
	NK_OP_FILL,          /* out = a (ia for integer dtypes, bool: a != 0) */
	/* unary (nops 2) */
	NK_OP_NEG, NK_OP_ABS, NK_OP_SIGN, NK_OP_RECIPROCAL, NK_OP_SQUARE,
	NK_OP_EXP, NK_OP_EXP2, NK_OP_EXPM1, NK_OP_LOG, NK_OP_LOG2, NK_OP_LOG10, NK_OP_LOG1P,
	NK_OP_SQRT, NK_OP_RSQRT, NK_OP_SIN, NK_OP_COS, NK_OP_TAN, NK_OP_ASIN, NK_OP_ACOS, NK_OP_ATAN,
	NK_OP_SINH, NK_OP_COSH, NK_OP_TANH, NK_OP_ASINH, NK_OP_ACOSH, NK_OP_ATANH, NK_OP_ERF, NK_OP_ERFC,
	NK_OP_ERFINV, NK_OP_FLOOR, NK_OP_CEIL, NK_OP_ROUND, NK_OP_TRUNC, NK_OP_FRAC,
	NK_OP_SIGMOID, NK_OP_RELU, NK_OP_GELU,   /* GELU: ia = 0 exact (erf), 1 tanh approximation */
	NK_OP_SILU, NK_OP_MISH, NK_OP_SOFTPLUS,  /* SOFTPLUS: a = beta, b = threshold */
	NK_OP_ELU,                               /* a = alpha, b = scale, (input_scale = 1) */
	NK_OP_LEAKY_RELU,                        /* a = negative slope */
	NK_OP_HARDTANH,                          /* clamp(x, a, b) */
	NK_OP_HARDSIGMOID, NK_OP_HARDSWISH,
	NK_OP_LOGICAL_NOT, NK_OP_BITWISE_NOT,
	NK_OP_ISNAN, NK_OP_ISINF, NK_OP_ISFINITE, /* out bool */
	NK_OP_CLAMP_SCALAR,                      /* clamp(x, a, b); ia bit0: has min, bit1: has max */
	NK_OP_POW_SCALAR,                        /* x ** a */
	NK_OP_RSUB_SCALAR,                       /* a - x */
	NK_OP_NAN_TO_NUM,                        /* a = nan, b = posinf; (neginf = -b) */
	/* binary (nops 3): out = f(x, y) */
	NK_OP_ADD,           /* x + a*y  (integer: x + ia*y) */
	NK_OP_SUB,           /* x - a*y */
	NK_OP_MUL, NK_OP_DIV,
	NK_OP_DIV_TRUNC, NK_OP_DIV_FLOOR,
	NK_OP_REMAINDER, NK_OP_FMOD, NK_OP_POW, NK_OP_ATAN2,
	NK_OP_MAXIMUM, NK_OP_MINIMUM, NK_OP_FMAX, NK_OP_FMIN,
	NK_OP_EQ, NK_OP_NE, NK_OP_LT, NK_OP_LE, NK_OP_GT, NK_OP_GE, /* out bool */
	NK_OP_LOGICAL_AND, NK_OP_LOGICAL_OR, NK_OP_LOGICAL_XOR,     /* out bool */
	NK_OP_BITWISE_AND, NK_OP_BITWISE_OR, NK_OP_BITWISE_XOR, NK_OP_LSHIFT, NK_OP_RSHIFT,
	NK_OP_HYPOT, NK_OP_COPYSIGN, NK_OP_XLOGY,
	/* activation backward: out = f(grad, x) (x = the forward input unless noted) */
	NK_OP_GELU_BACKWARD,      /* ia as GELU */
	NK_OP_SILU_BACKWARD, NK_OP_MISH_BACKWARD,
	NK_OP_SIGMOID_BACKWARD,   /* y = forward OUTPUT: grad * y * (1 - y) */
	NK_OP_TANH_BACKWARD,      /* y = forward OUTPUT: grad * (1 - y*y) */
	NK_OP_THRESHOLD_BACKWARD, /* x <= a ? 0 : grad (relu backward with a = 0) */
	NK_OP_LEAKY_RELU_BACKWARD,/* x > 0 ? grad : grad*a */
	NK_OP_HARDTANH_BACKWARD,  /* (x <= a || x >= b) ? 0 : grad */
	NK_OP_SOFTPLUS_BACKWARD,  /* a = beta, b = threshold */
	NK_OP_ELU_BACKWARD,       /* a alpha, b scale, ia: 1 if x is the OUTPUT */
	NK_OP_HARDSIGMOID_BACKWARD, NK_OP_HARDSWISH_BACKWARD,
	/* ternary (nops 4): out = f(x, y, z) */
	NK_OP_WHERE,         /* x = cond (bool dtype), y, z: cond ? y : z */
	NK_OP_ADDCMUL,       /* x + a*y*z */
	NK_OP_ADDCDIV,       /* x + a*y/z */
	NK_OP_LERP,          /* x + z*(y - x) (weight tensor) */
	NK_OP_LERP_SCALAR,   /* x + a*(y - x) (nops 3) */
	NK_OP_CLAMP_TENSOR,  /* clamp(x, y, z); ia bit0: has min (y), bit1: has max (z) */
	NK_OP_COUNT
} nk_op_t;

typedef struct {
	nk_iter_t it;
	int op;
	double a, b;
	int64_t ia, ib;
} nk_pointwise_args_t;
int nk_pointwise_run(void *args);
int nk_pointwise_ref(void *args);

/* ---- copy / cast: out (operand 0) = (dtype0) in (operand 1), any dtype pair, any strides -------- */
int nk_copy_run(void *args); /* args: nk_iter_t with nops 2 */

/* ---- reductions over a contiguous [O, R, I] tensor into a contiguous [O, I] output -------------- */
typedef enum {
	NK_RED_SUM, NK_RED_MEAN, NK_RED_PROD, NK_RED_AMAX, NK_RED_AMIN,
	NK_RED_MAX, NK_RED_MIN,        /* values into out, int64 indices into out2 (first occurrence) */
	NK_RED_ARGMAX, NK_RED_ARGMIN,  /* int64 indices into out */
	NK_RED_ANY, NK_RED_ALL,        /* out bool */
	NK_RED_NORM,                   /* p-norm, p = a (0, 1, 2, inf = INFINITY, -inf, other) */
	NK_RED_VAR, NK_RED_STD,        /* a = correction; out2 (optional, may be NULL) gets the mean */
	NK_RED_LOGSUMEXP,
	NK_RED_COUNT
} nk_red_op_t;

typedef struct {
	const void *in;
	void *out, *out2;
	int dtype_in, dtype_out; /* sum/mean may accumulate to a wider dtype_out (e.g. bool/int -> i64) */
	int64_t O, R, I;
	int op;
	double a;
} nk_reduce_args_t;
int nk_reduce_run(void *args);
int nk_reduce_ref(void *args);

/* ---- GEMM: C[b] = alpha * A[b] @ B[b] + beta * C[b] ---------------------------------------------- */
/* A is M x K with element strides (rs_a, cs_a), B is K x N (rs_b, cs_b), C is M x N (rs_c, cs_c);
 * any strides (transposes are strides).  batch >= 1 with batch strides bs_*.  beta == 0 means C is
 * not read (NaN in C does not propagate).  dtype: f32, f64, bf16, f16 (bf16/f16 accumulate in f32).
 * The optimized f32/bf16 paths pack panels (docs/kernels.md). */
typedef struct {
	int dtype;
	int64_t M, N, K, batch;
	double alpha, beta;
	const void *A; int64_t rs_a, cs_a, bs_a;
	const void *B; int64_t rs_b, cs_b, bs_b;
	void *C; int64_t rs_c, cs_c, bs_c;
	/* [gemm bias] optional (NULL: none; ignored when beta == 0): C's old value is taken from bias
	 * instead, C = alpha * A@B + beta * bias, C not read; element (b, i, j) of bias (C's dtype) at
	 * bias[b*bs_bias + i*rs_bias + j*cs_bias] (0 strides broadcast, e.g. addmm's row of N) */
	const void *bias; int64_t rs_bias, cs_bias, bs_bias;
} nk_gemm_args_t;
int nk_gemm_run(void *args);
int nk_gemm_ref(void *args);
/* Integer GEMM (igemm.c) with the same arguments: dtype i64, i32, i16, i8 or u8; alpha and beta are
 * used as integers; results wrap like aten's CPU integer matmul. */
int nk_igemm_run(void *args);
int nk_igemm_ref(void *args);

/* ---- softmax / log_softmax over the last dim of a contiguous [rows, cols] ---------------------- */
typedef struct {
	int dtype;
	bool log;
	int64_t rows, cols;
	const void *x; void *y;
} nk_softmax_args_t;
int nk_softmax_run(void *args);
int nk_softmax_ref(void *args);
/* backward: dx = y*(dy - sum(dy*y)) or, for log, dx = dy - exp(y)*sum(dy) (y = forward output) */
typedef struct {
	int dtype;
	bool log;
	int64_t rows, cols;
	const void *dy, *y; void *dx;
} nk_softmax_bwd_args_t;
int nk_softmax_bwd_run(void *args);
int nk_softmax_bwd_ref(void *args);

/* ---- embedding ---------------------------------------------------------------------------------- */
/* out[i, :] = weight[idx[i], :], weight contiguous [V, C], out contiguous [n, C]; idx i64 or i32.
 * An index outside [0, V) fails the kernel with a message giving the index and V. */
typedef struct {
	int dtype, idx_dtype;
	int64_t n, V, C;
	const void *weight, *idx;
	void *out;
} nk_embedding_args_t;
int nk_embedding_run(void *args);
/* grad_weight[V, C] = 0, then grad_weight[idx[i], :] += grad_out[i, :] except idx == padding_idx
 * (padding_idx < 0: none). Deterministic. */
typedef struct {
	int dtype, idx_dtype;
	int64_t n, V, C, padding_idx;
	const void *grad_out, *idx;
	void *grad_weight;
} nk_embedding_bwd_args_t;
int nk_embedding_bwd_run(void *args);

/* ---- attention: out = softmax(scale * q k^T + mask) v, tiled, never materializing T x T --------- */
/* q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv], out [B, Hq, Tq, Dv]; element strides per
 * dim given (any layout).  Hq % Hkv == 0 (GQA).  lse [B, Hq, Tq] f32 contiguous (log-sum-exp of the
 * scaled, masked scores; needed by backward).  causal follows PyTorch's is_causal, the top-left aligned
 * lower triangle: key j is visible to query i iff j <= i.
 * mask (optional): bool (true = keep) or float additive, of dtype mask_dtype, broadcastable
 * [B, H, Tq, Tk] given by element strides (0 for broadcast dims).  dropout_p > 0 uses the counter
 * RNG (seed, offset) on the attention probabilities.  Rows with no visible key give 0 output
 * (lse = -inf) - PyTorch's math path gives NaN there; documented. */
typedef struct {
	int dtype, mask_dtype;
	int64_t B, Hq, Hkv, Tq, Tk, D, Dv;
	double scale, dropout_p;
	bool causal;
	uint64_t seed, offset;
	const void *q; int64_t sq[4];
	const void *k; int64_t sk[4];
	const void *v; int64_t sv[4];
	const void *mask; int64_t smask[4];
	void *out; int64_t so[4];
	void *lse;
} nk_attention_args_t;
int nk_attention_run(void *args);
int nk_attention_ref(void *args);
/* dq, dk, dv have the strides given (written, not accumulated). dout strides sdo. */
typedef struct {
	nk_attention_args_t f; /* the forward's arguments, with out and lse as computed */
	const void *dout; int64_t sdo[4];
	void *dq; int64_t sdq[4];
	void *dk; int64_t sdk[4];
	void *dv; int64_t sdv[4];
} nk_attention_bwd_args_t;
int nk_attention_bwd_run(void *args);
int nk_attention_bwd_ref(void *args);

/* ---- optimizers: fused AdamW / Adam over contiguous n elements ---------------------------------- */
typedef struct {
	int dtype;              /* param/grad/state dtype: f32, f64, bf16, f16 */
	int64_t n;
	double lr, beta1, beta2, eps, weight_decay;
	int64_t step;           /* already incremented (1 on the first step) */
	bool adamw, amsgrad, maximize;
	double grad_scale;      /* grads are divided by this (1 = none) */
	void *param, *exp_avg, *exp_avg_sq, *max_exp_avg_sq;
	const void *grad;
} nk_adam_args_t;
int nk_adam_run(void *args);
int nk_adam_ref(void *args);


/* ---- indexing: gather / scatter along one dim (index.c) ------------------------------------------ */
/* An iteration space of ndim dims (shape, outermost first).  At each point p, k = idx[p] (i64 or i32;
 * with wrap, -bound <= k < 0 counts from the end) must lie in [0, bound), else the kernel fails with
 * the message err_style names (nk_index_err_t) before anything is written.  The
 * indexed element is x + sum_d p[d]*xs[d] + k*xk (element strides; xs is 0 along an indexed dim) and
 *   GATHER:                    y[p] = x[..k..]
 *   SCATTER:                   x[..k..] = y[p]            (y NULL: the scalar value / ivalue)
 *   SCATTER_ADD/MUL/AMAX/AMIN: x[..k..] op= y[p]          (AMAX/AMIN propagate NaN)
 * x and y have dtype `dtype`.  Scatters may collide only along iteration dim `dim` (updates applied in
 * increasing order along it; dim < 0: any points may collide, applied in row-major order, serially). */
typedef enum {
	NK_IDX_GATHER, NK_IDX_SCATTER, NK_IDX_SCATTER_ADD, NK_IDX_SCATTER_MUL, NK_IDX_SCATTER_AMAX,
	NK_IDX_SCATTER_AMIN
} nk_index_op_t;
/* The message of a bad index, as the CPU kernel of the op words it; all but BOUNDS are IndexErrors
 * (NRT_INDEX_ERROR tags them):
 *   BOUNDS        "index k is out of bounds for dimension err_dim with size bound" (gather, scatter)
 *   INDEX_BOUNDS  the same text (index_fill, index_copy)
 *   RANGE_SELF    "index out of range in self" with the index and size after it (index_select, index_add)
 *   TAKE          "out of range: tried to access index k on a tensor of bound elements." (take, put_) */
typedef enum { NK_IXERR_BOUNDS, NK_IXERR_INDEX_BOUNDS, NK_IXERR_RANGE_SELF, NK_IXERR_TAKE } nk_index_err_t;
typedef struct {
	int op, dtype, idx_dtype;
	int ndim, dim;
	bool wrap;
	int err_dim, err_style;
	int64_t shape[NK_MAX_DIMS];
	int64_t bound;
	void *x; int64_t xs[NK_MAX_DIMS]; int64_t xk;
	void *y; int64_t ys[NK_MAX_DIMS];
	const void *idx; int64_t is[NK_MAX_DIMS];
	double value; int64_t ivalue;
} nk_index_args_t;
int nk_index_run(void *args);
int nk_index_ref(void *args);

/* Advanced indexing x[i0, i1, ...]: out[p] = sum_k wrap(idx_k[p]) * stride[k] (int64, contiguous over
 * the broadcast index space `shape`); each index tensor k (i64 or i32, element strides is[k] over the
 * index space, 0 where broadcast) indexes a dim of size size[k] (negative values count from the end;
 * out of [-size, size) fails the kernel with "index v is out of bounds for dimension dim[k] with size
 * size[k]" before anything is written). */
#define NK_MAX_INDICES 4
typedef struct {
	int n, ndim;
	int64_t shape[NK_MAX_DIMS];
	const void *idx[NK_MAX_INDICES];
	int idx_dtype[NK_MAX_INDICES];
	int64_t is[NK_MAX_INDICES][NK_MAX_DIMS];
	int64_t size[NK_MAX_INDICES], stride[NK_MAX_INDICES];
	int dim[NK_MAX_INDICES];
	int64_t *out;
} nk_index_offsets_args_t;
int nk_index_offsets_run(void *args);

/* nonzero of a strided tensor (any dtype; NaN counts as nonzero): the count, and the coordinates of the
 * first max_rows nonzero elements in row-major order into out [rows, ndim] (int64, contiguous).
 * Synchronous helpers for the caller's thread (the output size depends on the data). */
typedef struct {
	int dtype, ndim;
	int64_t shape[NK_MAX_DIMS], strides[NK_MAX_DIMS];
	const void *x;
} nk_nonzero_args_t;
int64_t nk_nonzero_count(const nk_nonzero_args_t *a);
void nk_nonzero_write(const nk_nonzero_args_t *a, int64_t *out, int64_t max_rows);

/* ---- repeat_interleave and nonzero_static (index.c) --------------------------------------------- */
/* repeat_interleave(repeats): out[total] (dtype of repeats, I32 or I64) holds i repeats[i] times, i < n;
 * a negative repeat or a sum other than total fails the kernel. */
typedef struct {
	int dtype;
	int64_t n, total;
	const void *repeats;
	void *out;
} nk_repeat_interleave_args_t;
int nk_repeat_interleave_run(void *args);
int nk_repeat_interleave_ref(void *args);

/* nonzero_static: out [size, ndim] int64 holds the coordinates of the first size nonzero elements of nz,
 * the remaining rows fill. */
typedef struct {
	nk_nonzero_args_t nz;
	int64_t size, fill;
	int64_t *out;
} nk_nonzero_static_args_t;
int nk_nonzero_static_run(void *args);

/* ---- scans: cumulative ops along R of a contiguous [O, R, I] (scan.c) ---------------------------- */
/* in and out have dtype `dtype` (cummax/cummin also write int64 indices to idx); accumulation in aten's
 * acc_type (f64 for f32/f64, f32 for bf16/f16, int64 for integers). */
typedef enum { NK_SCAN_SUM, NK_SCAN_PROD, NK_SCAN_MAX, NK_SCAN_MIN, NK_SCAN_LOGSUMEXP } nk_scan_op_t;
typedef struct {
	int op, dtype;
	int64_t O, R, I;
	const void *in;
	void *out;
	int64_t *idx;
} nk_scan_args_t;
int nk_scan_run(void *args);
int nk_scan_ref(void *args);

/* ---- sort: stable, along R of a contiguous [O, R, I] (sort.c) ------------------------------------ */
/* values into out (may equal in), int64 indices into idx.  NaN sorts last ascending, first descending.
 * Lines longer than 1024 elements need work: nk_sort_workspace(R, O*I) bytes. */
typedef struct {
	int dtype;
	bool descending;
	int64_t O, R, I;
	const void *in;
	void *out;
	int64_t *idx;
	void *work;
} nk_sort_args_t;
int nk_sort_run(void *args);
int nk_sort_ref(void *args);
size_t nk_sort_workspace(int64_t R, int64_t lines);

/* ---- triangles (triangle.c): tril/triu masks and tril/triu_indices ----------------------------- */
/* tril/triu: out = tril/triu(in) on [B, M, N] with element strides. */
/* lower: keep j - i <= k (tril), else keep j - i >= k (triu); other elements are 0.  out may equal in. */
typedef struct {
	int dtype;
	bool lower;
	int64_t k, B, M, N;
	const void *in; int64_t si[3];
	void *out; int64_t so[3];
} nk_tri_args_t;
int nk_tri_run(void *args);
int nk_tri_ref(void *args);
/* tril_indices (lower) / triu_indices: out is int64 [2, n], n = nk_tri_indices_count(...), row-major
 * order of the kept (r, c), as PyTorch. */
typedef struct {
	int64_t row, col, offset, n;
	bool lower;
	int64_t *out;
} nk_tri_indices_args_t;
int64_t nk_tri_indices_count(int64_t row, int64_t col, int64_t offset, bool lower);
int nk_tri_indices_run(void *args);
int nk_tri_indices_ref(void *args);

#ifdef __cplusplus
}
#endif

/* kernel families with headers of their own */
#include "nk_activation.h"
#include "nk_conv.h"
#include "nk_linalg.h"
#include "nk_loss.h"
#include "nk_norm.h"
#include "nk_optim.h"
#include "nk_random.h"
#include "nk_select.h"
#include "nk_spatial.h"
#include "nk_special.h"
#endif /* NK_H */
