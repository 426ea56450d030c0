/* pointwise.c - elementwise kernels: out = f(in0[, in1[, in2]]) over an nk_iter_t (any strides,
 * broadcast as stride 0, dims innermost first, operand 0 is the output).
 *
 * Compute types follow PyTorch's opmath: f32/bf16/f16 compute in float, f64 in double, integer dtypes
 * and bool in int64 (wrapping like the narrow type once stored).  Predicates (comparisons, logical
 * ops, isnan...) compute in their inputs' type and store 0/1 into the output's dtype.
 *
 * nk_pointwise_ref walks one element at a time (multi-index decoded per element, scalar casts).
 * nk_pointwise_run coalesces dims, splits the elements over the pool above NK_PARALLEL_GRAIN, and works
 * on blocks of PW_BLK elements of a row: inputs are read in place when they are contiguous and of the
 * compute type, else gathered/converted into a stack buffer; hot ops have tight loops (AVX-512 for f32
 * when the CPU has it, pointwise_avx512.c), the rest call the same scalar function as the reference.
 */
#include <stdatomic.h>

#include "nk_dispatch_impl.h"
#include "nk_impl.h"
#include "nrt.h"

NK_VECTORIZE_FILE

/* float and double semantics of every op, generated from one body */
#define PW_T float
#define PW_M(fn) fn##f
#define PW_NAME(x) pwf_##x
#include "pointwise_scalar.inc"
#undef PW_T
#undef PW_M
#undef PW_NAME
#define PW_T double
#define PW_M(fn) fn
#define PW_NAME(x) pwd_##x
#include "pointwise_scalar.inc"
#undef PW_T
#undef PW_M
#undef PW_NAME

#define PW_BLK 256
/* Outputs at least this large (bytes) are written with non-temporal stores on the AVX-512 path: they
 * do not fit the caches, and streaming them saves the write-allocate read (a third of the traffic
 * of a binary op). */
#define PW_STREAM_MIN ((int64_t)16 << 20)

enum { PW_F32, PW_F64, PW_I64 }; /* compute kinds */

static const char *const op_names[NK_OP_COUNT] = {
	[NK_OP_FILL] = "fill", [NK_OP_NEG] = "neg", [NK_OP_ABS] = "abs", [NK_OP_SIGN] = "sign",
	[NK_OP_RECIPROCAL] = "reciprocal", [NK_OP_SQUARE] = "square", [NK_OP_EXP] = "exp",
	[NK_OP_EXP2] = "exp2", [NK_OP_EXPM1] = "expm1", [NK_OP_LOG] = "log", [NK_OP_LOG2] = "log2",
	[NK_OP_LOG10] = "log10", [NK_OP_LOG1P] = "log1p", [NK_OP_SQRT] = "sqrt", [NK_OP_RSQRT] = "rsqrt",
	[NK_OP_SIN] = "sin", [NK_OP_COS] = "cos", [NK_OP_TAN] = "tan", [NK_OP_ASIN] = "asin",
	[NK_OP_ACOS] = "acos", [NK_OP_ATAN] = "atan", [NK_OP_SINH] = "sinh", [NK_OP_COSH] = "cosh",
	[NK_OP_TANH] = "tanh", [NK_OP_ASINH] = "asinh", [NK_OP_ACOSH] = "acosh", [NK_OP_ATANH] = "atanh",
	[NK_OP_ERF] = "erf", [NK_OP_ERFC] = "erfc", [NK_OP_ERFINV] = "erfinv", [NK_OP_FLOOR] = "floor",
	[NK_OP_CEIL] = "ceil", [NK_OP_ROUND] = "round", [NK_OP_TRUNC] = "trunc", [NK_OP_FRAC] = "frac",
	[NK_OP_SIGMOID] = "sigmoid", [NK_OP_RELU] = "relu", [NK_OP_GELU] = "gelu", [NK_OP_SILU] = "silu",
	[NK_OP_MISH] = "mish", [NK_OP_SOFTPLUS] = "softplus", [NK_OP_ELU] = "elu",
	[NK_OP_LEAKY_RELU] = "leaky_relu", [NK_OP_HARDTANH] = "hardtanh",
	[NK_OP_HARDSIGMOID] = "hardsigmoid", [NK_OP_HARDSWISH] = "hardswish",
	[NK_OP_LOGICAL_NOT] = "logical_not", [NK_OP_BITWISE_NOT] = "bitwise_not",
	[NK_OP_ISNAN] = "isnan", [NK_OP_ISINF] = "isinf", [NK_OP_ISFINITE] = "isfinite",
	[NK_OP_CLAMP_SCALAR] = "clamp", [NK_OP_POW_SCALAR] = "pow", [NK_OP_RSUB_SCALAR] = "rsub",
	[NK_OP_NAN_TO_NUM] = "nan_to_num", [NK_OP_ADD] = "add", [NK_OP_SUB] = "sub", [NK_OP_MUL] = "mul",
	[NK_OP_DIV] = "div", [NK_OP_DIV_TRUNC] = "div_trunc", [NK_OP_DIV_FLOOR] = "div_floor",
	[NK_OP_REMAINDER] = "remainder", [NK_OP_FMOD] = "fmod", [NK_OP_POW] = "pow",
	[NK_OP_ATAN2] = "atan2", [NK_OP_MAXIMUM] = "maximum", [NK_OP_MINIMUM] = "minimum",
	[NK_OP_FMAX] = "fmax", [NK_OP_FMIN] = "fmin", [NK_OP_EQ] = "eq", [NK_OP_NE] = "ne",
	[NK_OP_LT] = "lt", [NK_OP_LE] = "le", [NK_OP_GT] = "gt", [NK_OP_GE] = "ge",
	[NK_OP_LOGICAL_AND] = "logical_and", [NK_OP_LOGICAL_OR] = "logical_or",
	[NK_OP_LOGICAL_XOR] = "logical_xor", [NK_OP_BITWISE_AND] = "bitwise_and",
	[NK_OP_BITWISE_OR] = "bitwise_or", [NK_OP_BITWISE_XOR] = "bitwise_xor",
	[NK_OP_LSHIFT] = "lshift", [NK_OP_RSHIFT] = "rshift", [NK_OP_HYPOT] = "hypot",
	[NK_OP_COPYSIGN] = "copysign", [NK_OP_XLOGY] = "xlogy", [NK_OP_GELU_BACKWARD] = "gelu_backward",
	[NK_OP_SILU_BACKWARD] = "silu_backward", [NK_OP_MISH_BACKWARD] = "mish_backward",
	[NK_OP_SIGMOID_BACKWARD] = "sigmoid_backward", [NK_OP_TANH_BACKWARD] = "tanh_backward",
	[NK_OP_THRESHOLD_BACKWARD] = "threshold_backward",
	[NK_OP_LEAKY_RELU_BACKWARD] = "leaky_relu_backward",
	[NK_OP_HARDTANH_BACKWARD] = "hardtanh_backward", [NK_OP_SOFTPLUS_BACKWARD] = "softplus_backward",
	[NK_OP_ELU_BACKWARD] = "elu_backward", [NK_OP_HARDSIGMOID_BACKWARD] = "hardsigmoid_backward",
	[NK_OP_HARDSWISH_BACKWARD] = "hardswish_backward", [NK_OP_WHERE] = "where",
	[NK_OP_ADDCMUL] = "addcmul", [NK_OP_ADDCDIV] = "addcdiv", [NK_OP_LERP] = "lerp",
	[NK_OP_LERP_SCALAR] = "lerp", [NK_OP_CLAMP_TENSOR] = "clamp",
};

/* Everything one launch needs, prepared once from nk_pointwise_args_t. */
typedef struct {
	int op, kind, out_dt;
	bool is_bool;             /* integer compute on bool operands */
	int nin;                  /* inputs used: x, y, z */
	int src[3];               /* operand index of x, y, z */
	int dt[NK_MAX_OPS];
	float af, bf;             /* scalars cast to the compute type (PyTorch casts to opmath) */
	double ad, bd;
	int64_t ia;               /* raw ia (flags for clamp / gelu / elu) */
	int64_t is;               /* the op's integer scalar (alpha, fill value, exponent, ...) */
	bool avx2;                /* the avx2 level: the transcendental ops of pointwise_avx2.c */
	bool avx512;
	bool stream;              /* f32 output of at least PW_STREAM_MIN bytes: non-temporal stores */
	bool round_q;             /* div_trunc on bf16/f16 tensors: round x/y to the dtype first (aten) */
	atomic_int zero_div;      /* integer division by zero seen on some thread */
} pw_ctx_t;

static const char *pw_op_name(int op)
{
	return (op >= 0 && op < NK_OP_COUNT && op_names[op]) ? op_names[op] : "unknown-op";
}

/* Number of inputs of op (CLAMP_TENSOR: its bounds, given by the ia flags). */
static int pw_arity(int op, int64_t ia)
{
	if (op == NK_OP_FILL)
		return 0;
	if (op <= NK_OP_NAN_TO_NUM)
		return 1;
	if (op <= NK_OP_HARDSWISH_BACKWARD || op == NK_OP_LERP_SCALAR)
		return 2;
	if (op == NK_OP_CLAMP_TENSOR)
		return 1 + (int)(ia & 1) + (int)((ia >> 1) & 1);
	return 3;
}

static bool pw_is_predicate(int op)
{
	return (op >= NK_OP_EQ && op <= NK_OP_LOGICAL_XOR) || op == NK_OP_LOGICAL_NOT ||
	       op == NK_OP_ISNAN || op == NK_OP_ISINF || op == NK_OP_ISFINITE;
}

/* Which ops exist for integer (and bool) compute; everything else needs a floating type. */
static bool pw_int_supported(int op, bool is_bool)
{
	switch (op) {
	case NK_OP_NEG: case NK_OP_SUB: case NK_OP_RSUB_SCALAR: case NK_OP_ABS: case NK_OP_RELU:
		return !is_bool; /* PyTorch rejects these on bool */
	case NK_OP_FILL: case NK_OP_SIGN: case NK_OP_SQUARE: case NK_OP_FLOOR: case NK_OP_CEIL:
	case NK_OP_ROUND: case NK_OP_TRUNC: case NK_OP_HARDTANH: case NK_OP_LOGICAL_NOT:
	case NK_OP_BITWISE_NOT: case NK_OP_ISNAN: case NK_OP_ISINF: case NK_OP_ISFINITE:
	case NK_OP_CLAMP_SCALAR: case NK_OP_POW_SCALAR: case NK_OP_NAN_TO_NUM: case NK_OP_ADD:
	case NK_OP_MUL: case NK_OP_DIV_TRUNC: case NK_OP_DIV_FLOOR: case NK_OP_REMAINDER:
	case NK_OP_FMOD: case NK_OP_POW: case NK_OP_MAXIMUM: case NK_OP_MINIMUM: case NK_OP_FMAX:
	case NK_OP_FMIN: case NK_OP_EQ: case NK_OP_NE: case NK_OP_LT: case NK_OP_LE: case NK_OP_GT:
	case NK_OP_GE: case NK_OP_LOGICAL_AND: case NK_OP_LOGICAL_OR: case NK_OP_LOGICAL_XOR:
	case NK_OP_BITWISE_AND: case NK_OP_BITWISE_OR: case NK_OP_BITWISE_XOR: case NK_OP_LSHIFT:
	case NK_OP_RSHIFT: case NK_OP_THRESHOLD_BACKWARD: case NK_OP_WHERE: case NK_OP_ADDCMUL:
	case NK_OP_CLAMP_TENSOR:
		return true;
	default:
		return false;
	}
}

static bool pw_float_supported(int op)
{
	return !(op == NK_OP_BITWISE_NOT || (op >= NK_OP_BITWISE_AND && op <= NK_OP_RSHIFT));
}

static int pw_kind_of(int dt)
{
	return dt == NK_F64 ? PW_F64 : nk_is_float(dt) ? PW_F32 : PW_I64;
}

/* The integer value of an op's scalar: ia, or a when the caller only filled the double. */
static int64_t pw_iscalar(int64_t i, double d)
{
	return (i == 0 && d == d) ? nk_f2i64(d) : i;
}

/* The dtype ops compute in: the output's, except predicates, which compare their inputs (promoted:
 * any f64 -> f64, other floats -> f32, all integer -> int64; equal dtypes stay as they are). */
static int pw_compute_dtype(const pw_ctx_t *c)
{
	if (!pw_is_predicate(c->op))
		return c->out_dt;
	int d0 = c->dt[c->src[0]];
	bool same = true, any_f64 = false, any_float = false;
	for (int i = 0; i < c->nin; i++) {
		int d = c->dt[c->src[i]];
		same = same && d == d0;
		any_f64 = any_f64 || d == NK_F64;
		any_float = any_float || nk_is_float(d);
	}
	if (same)
		return d0;
	return any_f64 ? NK_F64 : any_float ? NK_F32 : NK_I64;
}

/* Fills c from the arguments; checks operand count and op/dtype support (fails the kernel). */
static int pw_prepare(pw_ctx_t *c, const nk_pointwise_args_t *a)
{
	const nk_iter_t *it = &a->it;
	memset(c, 0, sizeof *c);
	c->op = a->op;
	if (a->op < 0 || a->op >= NK_OP_COUNT) {
		nrt_kernel_fail("nk_pointwise: unknown op %d", a->op);
		return -1;
	}
	int nin = pw_arity(a->op, a->ia);
	if (a->op == NK_OP_CLAMP_TENSOR) {
		/* min is operand 2 and max operand 3; with one bound and nops 3 it is operand 2 */
		bool lo = a->ia & 1, hi = a->ia & 2;
		c->src[0] = 1;
		c->src[1] = lo ? 2 : 0;
		c->src[2] = hi ? (it->nops == 4 ? 3 : 2) : 0;
		if (it->nops < 1 + nin || it->nops > 4 || (lo && hi && it->nops != 4)) {
			nrt_kernel_fail("nk_pointwise: clamp with bounds 0x%llx given %d operands",
					(unsigned long long)a->ia, it->nops);
			return -1;
		}
		nin = 3;
	} else {
		if (it->nops != nin + 1) {
			nrt_kernel_fail("nk_pointwise: op '%s' takes %d operands, got %d", pw_op_name(a->op),
					nin + 1, it->nops);
			return -1;
		}
		for (int i = 0; i < nin; i++)
			c->src[i] = 1 + i;
	}
	c->nin = nin;
	for (int k = 0; k < it->nops && k < NK_MAX_OPS; k++)
		c->dt[k] = it->dtype[k];
	for (int k = 0; k < it->nops; k++) {
		if (!nk_dtype_valid(it->dtype[k])) {
			nrt_kernel_fail("nk_pointwise: operand %d has invalid dtype %d", k, it->dtype[k]);
			return -1;
		}
	}
	c->out_dt = it->dtype[0];
	int cdt = pw_compute_dtype(c);
	c->kind = pw_kind_of(cdt);
	c->is_bool = cdt == NK_BOOL;
	bool ok = c->kind == PW_I64 ? pw_int_supported(a->op, c->is_bool) : pw_float_supported(a->op);
	if (!ok) {
		nrt_kernel_fail("nk_pointwise: op '%s' not supported for dtype %s", pw_op_name(a->op),
				nk_dtype_name(cdt));
		return -1;
	}
	c->ad = a->a;
	c->bd = a->b;
	c->ia = a->ia;
	c->af = (float)a->a;
	c->bf = (float)a->b;
	if (a->op == NK_OP_NAN_TO_NUM) {
		c->bf = pwf_finite_or_max(a->b);
		c->bd = pwd_finite_or_max(a->b);
	}
	c->is = pw_iscalar(a->ia, a->a);
	if (a->op == NK_OP_FILL && c->is_bool)
		c->is = a->a != 0 || a->ia != 0;
	c->avx512 = nk_family_avx512(NK_FAM_POINTWISE);
	c->avx2 = nk_family_avx2(NK_FAM_POINTWISE);
	/* aten's div_trunc on two bf16/f16 tensors computes trunc(a / b) in scalar_t: the quotient is
	 * rounded to the dtype before truncation (with a float scalar divisor it is not). */
	c->round_q = a->op == NK_OP_DIV_TRUNC && (c->out_dt == NK_BF16 || c->out_dt == NK_F16) &&
		     c->dt[c->src[0]] == c->out_dt && c->dt[c->src[1]] == c->out_dt;
	return 0;
}

/* ---- integer semantics (int64, wrapping) --------------------------------------------------------- */
static inline int64_t pw_wrap(uint64_t v)
{
	return (int64_t)v;
}

/* PyTorch's powi: exact integer power, negative exponents give 0 except for bases 1 and -1. */
static int64_t pw_powi(int64_t a, int64_t b)
{
	if (b < 0) {
		if (a == 1)
			return 1;
		if (a == -1)
			return (b & 1) ? -1 : 1;
		return 0;
	}
	uint64_t r = 1, base = (uint64_t)a;
	while (b) {
		if (b & 1)
			r *= base;
		b >>= 1;
		base *= base;
	}
	return pw_wrap(r);
}

/* Truncating division; y == 0 sets *zdiv and gives 0; INT64_MIN / -1 wraps. */
static inline int64_t pw_idiv(int64_t x, int64_t y, int *zdiv)
{
	if (y == 0) {
		*zdiv = 1;
		return 0;
	}
	if (y == -1)
		return pw_wrap(0 - (uint64_t)x);
	return x / y;
}

static inline int64_t pw_imod(int64_t x, int64_t y, int *zdiv)
{
	if (y == 0) {
		*zdiv = 1;
		return 0;
	}
	return y == -1 ? 0 : x % y;
}

static inline int64_t pw_imin(int64_t a, int64_t b)
{
	return b < a ? b : a;
}

static inline int64_t pw_imax(int64_t a, int64_t b)
{
	return a < b ? b : a;
}

static int64_t pw_int(const pw_ctx_t *c, int64_t x, int64_t y, int64_t z, int *zdiv)
{
	switch (c->op) {
	case NK_OP_FILL: return c->is;
	case NK_OP_NEG: return pw_wrap(0 - (uint64_t)x);
	case NK_OP_ABS: return x < 0 ? pw_wrap(0 - (uint64_t)x) : x;
	case NK_OP_SIGN: return (x > 0) - (x < 0);
	case NK_OP_SQUARE: return pw_wrap((uint64_t)x * (uint64_t)x);
	case NK_OP_FLOOR: case NK_OP_CEIL: case NK_OP_ROUND: case NK_OP_TRUNC: case NK_OP_NAN_TO_NUM:
		return x;
	case NK_OP_RELU: return x < 0 ? 0 : x;
	case NK_OP_HARDTANH: return pw_imin(pw_imax(x, nk_f2i64(c->ad)), nk_f2i64(c->bd));
	case NK_OP_LOGICAL_NOT: return x == 0;
	case NK_OP_BITWISE_NOT: return c->is_bool ? !x : ~x;
	case NK_OP_ISNAN: case NK_OP_ISINF: return 0;
	case NK_OP_ISFINITE: return 1;
	case NK_OP_CLAMP_SCALAR:
		if (c->ia & 1) x = pw_imax(x, nk_f2i64(c->ad));
		if (c->ia & 2) x = pw_imin(x, nk_f2i64(c->bd));
		return x;
	case NK_OP_POW_SCALAR: return pw_powi(x, c->is);
	case NK_OP_RSUB_SCALAR: return pw_wrap((uint64_t)c->is - (uint64_t)x);
	case NK_OP_ADD: return pw_wrap((uint64_t)x + (uint64_t)c->is * (uint64_t)y);
	case NK_OP_SUB: return pw_wrap((uint64_t)x - (uint64_t)c->is * (uint64_t)y);
	case NK_OP_MUL: return pw_wrap((uint64_t)x * (uint64_t)y);
	case NK_OP_DIV_TRUNC: return pw_idiv(x, y, zdiv);
	case NK_OP_DIV_FLOOR: {
		int64_t q = pw_idiv(x, y, zdiv);
		if (y != 0 && y != -1 && ((x < 0) != (y < 0)) && x % y != 0)
			q--;
		return q;
	}
	case NK_OP_REMAINDER: {
		int64_t r = pw_imod(x, y, zdiv);
		if (r != 0 && ((r < 0) != (y < 0)))
			r += y;
		return r;
	}
	case NK_OP_FMOD: return pw_imod(x, y, zdiv);
	case NK_OP_POW: return pw_powi(x, y);
	case NK_OP_MAXIMUM: case NK_OP_FMAX: return pw_imax(x, y);
	case NK_OP_MINIMUM: case NK_OP_FMIN: return pw_imin(x, y);
	case NK_OP_EQ: return x == y;
	case NK_OP_NE: return x != y;
	case NK_OP_LT: return x < y;
	case NK_OP_LE: return x <= y;
	case NK_OP_GT: return x > y;
	case NK_OP_GE: return x >= y;
	case NK_OP_LOGICAL_AND: return x && y;
	case NK_OP_LOGICAL_OR: return x || y;
	case NK_OP_LOGICAL_XOR: return !x != !y;
	case NK_OP_BITWISE_AND: return x & y;
	case NK_OP_BITWISE_OR: return x | y;
	case NK_OP_BITWISE_XOR: return x ^ y;
	/* shifts as PyTorch: out-of-range counts give 0 (left) or the sign fill (right) */
	case NK_OP_LSHIFT: return (y < 0 || y >= 64) ? 0 : pw_wrap((uint64_t)x << y);
	case NK_OP_RSHIFT: return (y < 0 || y >= 64) ? (x < 0 ? -1 : 0) : x >> y;
	case NK_OP_THRESHOLD_BACKWARD: return (double)y <= c->ad ? 0 : x;
	case NK_OP_WHERE: return x ? y : z;
	case NK_OP_ADDCMUL: return pw_wrap((uint64_t)x + (uint64_t)c->is * (uint64_t)y * (uint64_t)z);
	case NK_OP_CLAMP_TENSOR:
		if (c->ia & 1) x = pw_imax(x, y);
		if (c->ia & 2) x = pw_imin(x, z);
		return x;
	default: return 0;
	}
}

/* v rounded to bf16 or f16 (dt) and widened back. */
static inline float pw_round_to(int dt, float v)
{
	return dt == NK_BF16 ? nk_bf16_to_f32(nk_f32_to_bf16(v)) : nk_f16_to_f32(nk_f32_to_f16(v));
}

static inline float pw_f32(const pw_ctx_t *c, float x, float y, float z)
{
	if (c->round_q)
		return truncf(pw_round_to(c->out_dt, x / y));
	return pwf_scalar(c->op, x, y, z, c->af, c->bf, c->ad, c->ia);
}

static inline double pw_f64(const pw_ctx_t *c, double x, double y, double z)
{
	return pwd_scalar(c->op, x, y, z, c->ad, c->bd, c->ad, c->ia);
}

static int pw_fail_zero_div(const pw_ctx_t *c)
{
	nrt_kernel_fail("ZeroDivisionError: integer division or modulo by zero in '%s'", pw_op_name(c->op));
	return -1;
}

/* ---- reference: one element at a time ------------------------------------------------------------ */
int nk_pointwise_ref(void *args)
{
	const nk_pointwise_args_t *a = args;
	const nk_iter_t *it = &a->it;
	nk_loop_t L;
	pw_ctx_t c;
	if (nk_loop_init(&L, it, 1, NK_MAX_OPS, "nk_pointwise") || pw_prepare(&c, a))
		return -1;
	int zdiv = 0;
	for (int64_t lin = 0; lin < L.numel; lin++) {
		const char *in[3] = {NULL, NULL, NULL};
		for (int i = 0; i < c.nin; i++)
			if (c.src[i])
				in[i] = it->data[c.src[i]] + nk_iter_offset(it, c.src[i], lin);
		char *out = it->data[0] + nk_iter_offset(it, 0, lin);
		if (c.kind == PW_F32) {
			float v[3] = {0, 0, 0};
			for (int i = 0; i < 3; i++)
				if (in[i]) v[i] = nk_load_f32(in[i], c.dt[c.src[i]]);
			nk_store_f32(out, c.out_dt, pw_f32(&c, v[0], v[1], v[2]));
		} else if (c.kind == PW_F64) {
			double v[3] = {0, 0, 0};
			for (int i = 0; i < 3; i++)
				if (in[i]) v[i] = nk_load_f64(in[i], c.dt[c.src[i]]);
			nk_store_f64(out, c.out_dt, pw_f64(&c, v[0], v[1], v[2]));
		} else {
			int64_t v[3] = {0, 0, 0};
			for (int i = 0; i < 3; i++)
				if (in[i]) v[i] = nk_load_i64(in[i], c.dt[c.src[i]]);
			nk_store_i64(out, c.out_dt, pw_int(&c, v[0], v[1], v[2], &zdiv));
		}
	}
	return zdiv ? pw_fail_zero_div(&c) : 0;
}

/* ---- optimized: blocks of a row ----------------------------------------------------------------- */
/* f32 block: o[i] = op(x[i], y[i], z[i]) for dense buffers (inputs absent for lower arity). */
static void pw_block_f32(const pw_ctx_t *c, float *o, const float *x, const float *y, const float *z,
			 int64_t n)
{
	if (c->avx512 && nk_pointwise_f32_avx512(c->op, c->af, c->bf, c->ia, o, x, y, z, n, c->stream))
		return;
	if (c->avx2 && !c->round_q && nk_pointwise_f32_avx2(c->op, c->ia, o, x, y, n))
		return;
	const float a = c->af;
	switch (c->op) {
	case NK_OP_FILL: for (int64_t i = 0; i < n; i++) o[i] = a; return;
	case NK_OP_NEG: for (int64_t i = 0; i < n; i++) o[i] = -x[i]; return;
	case NK_OP_SQUARE: for (int64_t i = 0; i < n; i++) o[i] = x[i] * x[i]; return;
	case NK_OP_RELU: for (int64_t i = 0; i < n; i++) o[i] = x[i] < 0 ? 0 : x[i]; return;
	case NK_OP_ADD:
		if (a == 1) for (int64_t i = 0; i < n; i++) o[i] = x[i] + y[i];
		else for (int64_t i = 0; i < n; i++) o[i] = x[i] + a * y[i];
		return;
	case NK_OP_SUB:
		if (a == 1) for (int64_t i = 0; i < n; i++) o[i] = x[i] - y[i];
		else for (int64_t i = 0; i < n; i++) o[i] = x[i] - a * y[i];
		return;
	case NK_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = x[i] * y[i]; return;
	case NK_OP_DIV: for (int64_t i = 0; i < n; i++) o[i] = x[i] / y[i]; return;
	case NK_OP_EQ: for (int64_t i = 0; i < n; i++) o[i] = x[i] == y[i]; return;
	case NK_OP_NE: for (int64_t i = 0; i < n; i++) o[i] = x[i] != y[i]; return;
	case NK_OP_LT: for (int64_t i = 0; i < n; i++) o[i] = x[i] < y[i]; return;
	case NK_OP_LE: for (int64_t i = 0; i < n; i++) o[i] = x[i] <= y[i]; return;
	case NK_OP_GT: for (int64_t i = 0; i < n; i++) o[i] = x[i] > y[i]; return;
	case NK_OP_GE: for (int64_t i = 0; i < n; i++) o[i] = x[i] >= y[i]; return;
	case NK_OP_THRESHOLD_BACKWARD:
		for (int64_t i = 0; i < n; i++) o[i] = y[i] <= a ? 0 : x[i];
		return;
	case NK_OP_SIGMOID_BACKWARD: for (int64_t i = 0; i < n; i++) o[i] = x[i] * (1 - y[i]) * y[i]; return;
	case NK_OP_TANH_BACKWARD: for (int64_t i = 0; i < n; i++) o[i] = x[i] * (1 - y[i] * y[i]); return;
	case NK_OP_WHERE: for (int64_t i = 0; i < n; i++) o[i] = x[i] != 0 ? y[i] : z[i]; return;
	case NK_OP_ADDCMUL: for (int64_t i = 0; i < n; i++) o[i] = x[i] + a * y[i] * z[i]; return;
	default: break;
	}
	if (z)
		for (int64_t i = 0; i < n; i++) o[i] = pw_f32(c, x[i], y ? y[i] : 0, z[i]);
	else if (y)
		for (int64_t i = 0; i < n; i++) o[i] = pw_f32(c, x[i], y[i], 0);
	else if (x)
		for (int64_t i = 0; i < n; i++) o[i] = pw_f32(c, x[i], 0, 0);
	else
		for (int64_t i = 0; i < n; i++) o[i] = pw_f32(c, 0, 0, 0);
}

static void pw_block_f64(const pw_ctx_t *c, double *o, const double *x, const double *y,
			 const double *z, int64_t n)
{
	const double a = c->ad;
	switch (c->op) {
	case NK_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = x[i] + a * y[i]; return;
	case NK_OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = x[i] - a * y[i]; return;
	case NK_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = x[i] * y[i]; return;
	case NK_OP_DIV: for (int64_t i = 0; i < n; i++) o[i] = x[i] / y[i]; return;
	default: break;
	}
	for (int64_t i = 0; i < n; i++)
		o[i] = pw_f64(c, x ? x[i] : 0, y ? y[i] : 0, z ? z[i] : 0);
}

static void pw_block_i64(pw_ctx_t *c, int64_t *o, const int64_t *x, const int64_t *y,
			 const int64_t *z, int64_t n)
{
	const uint64_t s = (uint64_t)c->is;
	int zdiv = 0;
	switch (c->op) {
	case NK_OP_ADD:
		for (int64_t i = 0; i < n; i++) o[i] = pw_wrap((uint64_t)x[i] + s * (uint64_t)y[i]);
		return;
	case NK_OP_SUB:
		for (int64_t i = 0; i < n; i++) o[i] = pw_wrap((uint64_t)x[i] - s * (uint64_t)y[i]);
		return;
	case NK_OP_MUL:
		for (int64_t i = 0; i < n; i++) o[i] = pw_wrap((uint64_t)x[i] * (uint64_t)y[i]);
		return;
	case NK_OP_EQ: for (int64_t i = 0; i < n; i++) o[i] = x[i] == y[i]; return;
	case NK_OP_NE: for (int64_t i = 0; i < n; i++) o[i] = x[i] != y[i]; return;
	case NK_OP_LT: for (int64_t i = 0; i < n; i++) o[i] = x[i] < y[i]; return;
	case NK_OP_GT: for (int64_t i = 0; i < n; i++) o[i] = x[i] > y[i]; return;
	case NK_OP_BITWISE_AND: for (int64_t i = 0; i < n; i++) o[i] = x[i] & y[i]; return;
	case NK_OP_BITWISE_OR: for (int64_t i = 0; i < n; i++) o[i] = x[i] | y[i]; return;
	default: break;
	}
	for (int64_t i = 0; i < n; i++)
		o[i] = pw_int(c, x ? x[i] : 0, y ? y[i] : 0, z ? z[i] : 0, &zdiv);
	if (zdiv)
		atomic_store(&c->zero_div, 1);
}

/* Input i of the block starting at element i0: in place if dense and of the compute type, else
 * converted into buf. */
static const void *pw_input(const pw_ctx_t *c, int i, char *const *data, const int64_t *st, int64_t i0,
			    int64_t m, void *buf)
{
	int k = c->src[i];
	if (k == 0)
		return NULL;
	const char *p = data[k] + i0 * st[k];
	int dt = c->dt[k];
	switch (c->kind) {
	case PW_F32:
		if (dt == NK_F32 && st[k] == 4)
			return p;
		nk_block_load_f32(buf, p, st[k], dt, m);
		return buf;
	case PW_F64:
		if (dt == NK_F64 && st[k] == 8)
			return p;
		nk_block_load_f64(buf, p, st[k], dt, m);
		return buf;
	default:
		if (dt == NK_I64 && st[k] == 8)
			return p;
		nk_block_load_i64(buf, p, st[k], dt, m);
		return buf;
	}
}

/* The row callback: blocks of PW_BLK elements; the output is written in place when it is dense and
 * of the compute type, else computed into a buffer and converted. */
static void pw_row(void *ctx, char *const *data, const int64_t *st, int64_t n, int64_t lin)
{
	pw_ctx_t *c = ctx;
	_Alignas(64) char buf[4][PW_BLK * 8];
	static const int64_t esz[3] = {4, 8, 8};
	static const int cdt[3] = {NK_F32, NK_F64, NK_I64};
	bool out_direct = c->out_dt == cdt[c->kind] && st[0] == esz[c->kind];
	(void)lin;
	if (out_direct && !c->stream && (c->kind == PW_F32 || c->kind == PW_F64)) {
		/* every operand dense and of the compute type: one call over the whole row */
		bool direct = true;
		for (int i = 0; i < 3 && direct; i++) {
			int k = c->src[i];
			direct = k == 0 || (c->dt[k] == cdt[c->kind] && st[k] == esz[c->kind]);
		}
		if (direct) {
			const char *in[3];
			for (int i = 0; i < 3; i++)
				in[i] = c->src[i] ? data[c->src[i]] : NULL;
			if (c->kind == PW_F32)
				pw_block_f32(c, (float *)data[0], (const float *)in[0], (const float *)in[1],
					     (const float *)in[2], n);
			else
				pw_block_f64(c, (double *)data[0], (const double *)in[0], (const double *)in[1],
					     (const double *)in[2], n);
			return;
		}
	}
	for (int64_t i0 = 0; i0 < n; i0 += PW_BLK) {
		int64_t m = n - i0 < PW_BLK ? n - i0 : PW_BLK;
		const void *in[3];
		for (int i = 0; i < 3; i++)
			in[i] = pw_input(c, i, data, st, i0, m, buf[1 + i]);
		char *out = data[0] + i0 * st[0];
		void *o = out_direct ? (void *)out : (void *)buf[0];
		if (c->kind == PW_F32)
			pw_block_f32(c, o, in[0], in[1], in[2], m);
		else if (c->kind == PW_F64)
			pw_block_f64(c, o, in[0], in[1], in[2], m);
		else
			pw_block_i64(c, o, in[0], in[1], in[2], m);
		if (out_direct)
			continue;
		if (c->kind == PW_F32)
			nk_block_store_f32(out, st[0], c->out_dt, o, m);
		else if (c->kind == PW_F64)
			nk_block_store_f64(out, st[0], c->out_dt, o, m);
		else
			nk_block_store_i64(out, st[0], c->out_dt, o, m);
	}
	if (c->stream && out_direct)
		nk_stream_fence();
}

int nk_pointwise_run(void *args)
{
	if (nk_using_reference())
		return nk_pointwise_ref(args);
	const nk_pointwise_args_t *a = args;
	nk_loop_t L;
	pw_ctx_t c;
	if (nk_loop_init(&L, &a->it, 1, NK_MAX_OPS, "nk_pointwise") || pw_prepare(&c, a))
		return -1;
	c.stream = c.avx512 && c.kind == PW_F32 && c.out_dt == NK_F32 && L.numel * 4 >= PW_STREAM_MIN;
	nk_loop_parallel(&L, NK_PARALLEL_GRAIN, pw_row, &c);
	return atomic_load(&c.zero_div) ? pw_fail_zero_div(&c) : 0;
}
