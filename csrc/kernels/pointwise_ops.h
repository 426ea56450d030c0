/* pointwise_ops.h - the floating-point semantics of every nk_op_t, written once and included twice by
 * pointwise.c: with PW_T float / PW_M(fn) fn##f (f32, bf16 and f16 compute in float, as PyTorch's
 * opmath) and with PW_T double / PW_M(fn) fn (f64).  PW_NAME names the generated functions.
 *
 * Each formula follows PyTorch's CPU scalar kernel (the *Kernel.cpp files of aten/src/ATen/native/cpu), including
 * its NaN behaviour; a comment says so where the choice is not obvious.  Not a public header.
 */
#if !defined(PW_T) || !defined(PW_M) || !defined(PW_NAME)
#error "define PW_T, PW_M and PW_NAME before including pointwise_ops.h"
#endif

#define PW_C(v) ((PW_T)(v))

/* PyTorch's calc_erfinv: rational first guess, two Newton steps. */
static inline PW_T PW_NAME(erfinv)(PW_T y)
{
	static const PW_T a[4] = {PW_C(0.886226899), PW_C(-1.645349621), PW_C(0.914624893),
				  PW_C(-0.140543331)};
	static const PW_T b[4] = {PW_C(-2.118377725), PW_C(1.442710462), PW_C(-0.329097515),
				  PW_C(0.012229801)};
	static const PW_T c[4] = {PW_C(-1.970840454), PW_C(-1.624906493), PW_C(3.429567803),
				  PW_C(1.641345311)};
	static const PW_T d[2] = {PW_C(3.543889200), PW_C(1.637067800)};
	PW_T ya = PW_M(fabs)(y), x, z, num, dem;
	if (ya > 1)
		return (PW_T)NAN;
	if (ya == 1)
		return PW_M(copysign)((PW_T)INFINITY, y);
	if (ya <= PW_C(0.7)) {
		z = y * y;
		num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
		dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1;
		x = y * num / dem;
	} else {
		z = PW_M(sqrt)(-PW_M(log)((1 - ya) / 2));
		num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
		dem = (d[1] * z + d[0]) * z + 1;
		x = PW_M(copysign)(num, y) / dem;
	}
	const PW_T k = PW_C(1.1283791670955126); /* 2/sqrt(pi) */
	x = x - (PW_M(erf)(x) - y) / (k * PW_M(exp)(-x * x));
	x = x - (PW_M(erf)(x) - y) / (k * PW_M(exp)(-x * x));
	return x;
}

/* PyTorch's div_floor_floating: floor division that stays exact where x/y would round. */
static inline PW_T PW_NAME(div_floor)(PW_T a, PW_T b)
{
	if (b == 0)
		return a / b;
	PW_T mod = PW_M(fmod)(a, b);
	PW_T div = (a - mod) / b;
	if (mod != 0 && (b < 0) != (mod < 0))
		div -= 1;
	if (div == 0)
		return PW_M(copysign)(0, a / b);
	PW_T fl = PW_M(floor)(div);
	if (div - fl > PW_C(0.5))
		fl += 1;
	return fl;
}

/* Python-style remainder: the result has the sign of the divisor. */
static inline PW_T PW_NAME(remainder)(PW_T a, PW_T b)
{
	PW_T mod = PW_M(fmod)(a, b);
	if (mod != 0 && (b < 0) != (mod < 0))
		mod += b;
	return mod;
}

/* std::max / std::min: NaN in the first argument propagates, a NaN bound is ignored. */
static inline PW_T PW_NAME(stdmax)(PW_T a, PW_T b)
{
	return a < b ? b : a;
}

static inline PW_T PW_NAME(stdmin)(PW_T a, PW_T b)
{
	return b < a ? b : a;
}

static inline PW_T PW_NAME(lerp)(PW_T self, PW_T end, PW_T w)
{
	return PW_M(fabs)(w) < PW_C(0.5) ? self + w * (end - self) : end - (end - self) * (1 - w);
}

static inline PW_T PW_NAME(pow_scalar)(PW_T x, double e)
{
	if (e == 2.0)
		return x * x;
	if (e == 3.0)
		return x * x * x;
	if (e == 0.5)
		return PW_M(sqrt)(x);
	if (e == -0.5)
		return 1 / PW_M(sqrt)(x);
	if (e == -1.0)
		return 1 / x;
	if (e == -2.0)
		return 1 / (x * x);
	return PW_M(pow)(x, (PW_T)e);
}

static inline PW_T PW_NAME(sigmoid)(PW_T x)
{
	return 1 / (1 + PW_M(exp)(-x));
}

static inline PW_T PW_NAME(gelu)(PW_T x, int64_t approx)
{
	if (approx) {
		const PW_T beta = PW_C(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = PW_C(0.044715);
		PW_T inner = beta * (x + kappa * (x * x * x));
		return PW_C(0.5) * x * (1 + PW_M(tanh)(inner));
	}
	return x * PW_C(0.5) * (1 + PW_M(erf)(x * PW_C(M_SQRT1_2)));
}

static inline PW_T PW_NAME(gelu_backward)(PW_T dy, PW_T x, int64_t approx)
{
	if (approx) {
		const PW_T beta = PW_C(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = PW_C(0.044715);
		PW_T x_sq = x * x, x_cube = x_sq * x;
		PW_T t = PW_M(tanh)(beta * (x + kappa * x_cube));
		PW_T left = PW_C(0.5) * x, right = 1 + t;
		PW_T dleft = PW_C(0.5) * right;
		PW_T dright = left * (1 - t * t) * beta * (1 + 3 * kappa * x_sq);
		return dy * (dleft + dright);
	}
	const PW_T alpha = PW_C(M_2_SQRTPI * M_SQRT1_2 * 0.5);
	PW_T cdf = PW_C(0.5) * (1 + PW_M(erf)(x * PW_C(M_SQRT1_2)));
	PW_T pdf = alpha * PW_M(exp)(x * x * PW_C(-0.5));
	return dy * (cdf + x * pdf);
}

/* clamp with optional bounds, NaN-propagating like PyTorch's clamp (tensor bounds: a NaN bound
 * gives NaN; scalar bounds: std::min(std::max(x, lo), hi)). */
static inline PW_T PW_NAME(clamp_tensor)(PW_T x, PW_T lo, PW_T hi, int64_t flags)
{
	bool has_lo = flags & 1, has_hi = flags & 2;
	if (has_lo && has_hi) {
		if (lo != lo || hi != hi)
			return (PW_T)NAN;
		return PW_NAME(stdmin)(PW_NAME(stdmax)(x, lo), hi);
	}
	if (has_lo)
		return (x != x || lo != lo) ? (PW_T)NAN : (x < lo ? lo : x);
	if (has_hi)
		return (x != x || hi != hi) ? (PW_T)NAN : (x > hi ? hi : x);
	return x;
}

/* nan_to_num's replacement for +-inf: the scalar, saturated to the compute type's largest finite. */
static inline PW_T PW_NAME(finite_or_max)(double v)
{
	PW_T r = (PW_T)v;
	if (isinf(r) && !isinf(v))
		return PW_M(copysign)(sizeof(PW_T) == 4 ? (PW_T)3.4028234663852886e38 : (PW_T)1.7976931348623157e308, r);
	return r;
}

/* The value of op at (x, y, z).  a, b are the op's scalars already cast to PW_T (as PyTorch casts
 * its Scalar to opmath_t); p carries the raw double/int scalars where a formula needs them. */
static inline PW_T PW_NAME(scalar)(int op, PW_T x, PW_T y, PW_T z, PW_T a, PW_T b, double ad, int64_t ia)
{
	switch (op) {
	case NK_OP_FILL: return a;
	case NK_OP_NEG: return -x;
	case NK_OP_ABS: return PW_M(fabs)(x);
	case NK_OP_SIGN: return (PW_T)((0 < x) - (x < 0)); /* NaN -> 0, as PyTorch's sign */
	case NK_OP_RECIPROCAL: return 1 / x;
	case NK_OP_SQUARE: return x * x;
	case NK_OP_EXP: return PW_M(exp)(x);
	case NK_OP_EXP2: return PW_M(exp2)(x);
	case NK_OP_EXPM1: return PW_M(expm1)(x);
	case NK_OP_LOG: return PW_M(log)(x);
	case NK_OP_LOG2: return PW_M(log2)(x);
	case NK_OP_LOG10: return PW_M(log10)(x);
	case NK_OP_LOG1P: return PW_M(log1p)(x);
	case NK_OP_SQRT: return PW_M(sqrt)(x);
	case NK_OP_RSQRT: return 1 / PW_M(sqrt)(x);
	case NK_OP_SIN: return PW_M(sin)(x);
	case NK_OP_COS: return PW_M(cos)(x);
	case NK_OP_TAN: return PW_M(tan)(x);
	case NK_OP_ASIN: return PW_M(asin)(x);
	case NK_OP_ACOS: return PW_M(acos)(x);
	case NK_OP_ATAN: return PW_M(atan)(x);
	case NK_OP_SINH: return PW_M(sinh)(x);
	case NK_OP_COSH: return PW_M(cosh)(x);
	case NK_OP_TANH: return PW_M(tanh)(x);
	case NK_OP_ASINH: return PW_M(asinh)(x);
	case NK_OP_ACOSH: return PW_M(acosh)(x);
	case NK_OP_ATANH: return PW_M(atanh)(x);
	case NK_OP_ERF: return PW_M(erf)(x);
	case NK_OP_ERFC: return PW_M(erfc)(x);
	case NK_OP_ERFINV: return PW_NAME(erfinv)(x);
	case NK_OP_FLOOR: return PW_M(floor)(x);
	case NK_OP_CEIL: return PW_M(ceil)(x);
	case NK_OP_ROUND: return PW_M(nearbyint)(x); /* half to even */
	case NK_OP_TRUNC: return PW_M(trunc)(x);
	case NK_OP_FRAC: return x - PW_M(trunc)(x);
	case NK_OP_SIGMOID: return PW_NAME(sigmoid)(x);
	case NK_OP_RELU: return x < 0 ? 0 : x; /* NaN propagates (clamp_min) */
	case NK_OP_GELU: return PW_NAME(gelu)(x, ia);
	case NK_OP_SILU: return x / (1 + PW_M(exp)(-x));
	case NK_OP_MISH: return x * PW_M(tanh)(PW_M(log1p)(PW_M(exp)(x)));
	case NK_OP_SOFTPLUS: return x * a > b ? x : PW_M(log1p)(PW_M(exp)(x * a)) / a;
	case NK_OP_ELU: return x > 0 ? x * b : PW_M(expm1)(x) * (a * b);
	case NK_OP_LEAKY_RELU: return x > 0 ? x : x * a;
	case NK_OP_HARDTANH: return PW_NAME(stdmin)(PW_NAME(stdmax)(x, a), b);
	case NK_OP_HARDSIGMOID: return PW_NAME(stdmin)(PW_NAME(stdmax)(x + 3, 0), 6) / 6;
	case NK_OP_HARDSWISH: return x * PW_NAME(stdmin)(PW_NAME(stdmax)(x + 3, 0), 6) / 6;
	case NK_OP_LOGICAL_NOT: return x == 0;
	case NK_OP_ISNAN: return isnan(x) != 0;
	case NK_OP_ISINF: return isinf(x) != 0;
	case NK_OP_ISFINITE: return isfinite(x) != 0;
	case NK_OP_CLAMP_SCALAR: {	/* aten: a NaN bound makes every element NaN */
		PW_T r = x;
		if (((ia & 1) && a != a) || ((ia & 2) && b != b)) return (PW_T)NAN;
		if (ia & 1) r = PW_NAME(stdmax)(r, a);
		if (ia & 2) r = PW_NAME(stdmin)(r, b);
		return r;
	}
	case NK_OP_POW_SCALAR: return PW_NAME(pow_scalar)(x, ad);
	case NK_OP_RSUB_SCALAR: return a - x;
	case NK_OP_NAN_TO_NUM:
		if (x != x) return a;
		if (isinf(x)) return x > 0 ? b : -b;
		return x;
	case NK_OP_ADD: return x + a * y;
	case NK_OP_SUB: return x - a * y;
	case NK_OP_MUL: return x * y;
	case NK_OP_DIV: return x / y;
	case NK_OP_DIV_TRUNC: return PW_M(trunc)(x / y);
	case NK_OP_DIV_FLOOR: return PW_NAME(div_floor)(x, y);
	case NK_OP_REMAINDER: return PW_NAME(remainder)(x, y);
	case NK_OP_FMOD: return PW_M(fmod)(x, y);
	case NK_OP_POW: return PW_M(pow)(x, y);
	case NK_OP_ATAN2: return PW_M(atan2)(x, y);
	case NK_OP_MAXIMUM: return (x != x || y != y) ? (PW_T)NAN : PW_NAME(stdmax)(x, y);
	case NK_OP_MINIMUM: return (x != x || y != y) ? (PW_T)NAN : PW_NAME(stdmin)(x, y);
	case NK_OP_FMAX: return PW_M(fmax)(x, y);
	case NK_OP_FMIN: return PW_M(fmin)(x, y);
	case NK_OP_EQ: return x == y;
	case NK_OP_NE: return x != y;
	case NK_OP_LT: return x < y;
	case NK_OP_LE: return x <= y;
	case NK_OP_GT: return x > y;
	case NK_OP_GE: return x >= y;
	case NK_OP_LOGICAL_AND: return (x != 0) && (y != 0);
	case NK_OP_LOGICAL_OR: return (x != 0) || (y != 0);
	case NK_OP_LOGICAL_XOR: return (x != 0) != (y != 0);
	case NK_OP_HYPOT: return PW_M(hypot)(x, y);
	case NK_OP_COPYSIGN: return PW_M(copysign)(x, y);
	case NK_OP_XLOGY:
		if (y != y) return (PW_T)NAN;
		if (x == 0) return 0;
		return x * PW_M(log)(y);
	/* backward ops: x = grad, y = the forward input (or output where nk.h says so) */
	case NK_OP_GELU_BACKWARD: return PW_NAME(gelu_backward)(x, y, ia);
	case NK_OP_SILU_BACKWARD: {
		PW_T s = PW_NAME(sigmoid)(y);
		return x * s * (1 + y * (1 - s));
	}
	case NK_OP_MISH_BACKWARD: {
		PW_T s = PW_NAME(sigmoid)(y);
		PW_T t = PW_M(tanh)(PW_M(log1p)(PW_M(exp)(y)));
		return x * (t + y * s * (1 - t * t));
	}
	case NK_OP_SIGMOID_BACKWARD: return x * (1 - y) * y;
	case NK_OP_TANH_BACKWARD: return x * (1 - y * y);
	case NK_OP_THRESHOLD_BACKWARD: return y <= a ? 0 : x;
	case NK_OP_LEAKY_RELU_BACKWARD: return y > 0 ? x : x * a;
	case NK_OP_HARDTANH_BACKWARD: return (y <= a || y >= b) ? 0 : x;
	case NK_OP_SOFTPLUS_BACKWARD: {
		PW_T e = PW_M(exp)(y * a);
		return y * a > b ? x : x * e / (e + 1);
	}
	case NK_OP_ELU_BACKWARD: /* a alpha, b scale, input_scale 1; ia: y is the forward output */
		if (ia)
			return y <= 0 ? x * (y + a * b) : x * b;
		return y <= 0 ? x * (a * b) * PW_M(exp)(y) : x * b;
	case NK_OP_HARDSIGMOID_BACKWARD: return (y > -3 && y < 3) ? x * PW_C(1.0 / 6.0) : 0;
	case NK_OP_HARDSWISH_BACKWARD:
		if (y <= -3) return 0;
		if (y < 3) return x * (y / 3 + PW_C(0.5));
		return x;
	case NK_OP_WHERE: return x != 0 ? y : z;
	case NK_OP_ADDCMUL: return x + a * y * z;
	case NK_OP_ADDCDIV: return x + a * y / z;
	case NK_OP_LERP: return PW_NAME(lerp)(x, y, z);
	case NK_OP_LERP_SCALAR: return PW_NAME(lerp)(x, y, a);
	case NK_OP_CLAMP_TENSOR: return PW_NAME(clamp_tensor)(x, y, z, ia);
	default: return (PW_T)NAN;
	}
}

#undef PW_C
