/* complex.c - complex numbers: the elementwise kernel (casts, arithmetic, the complex math functions,
 * predicates) and the product reduction.  See nk_complex.h.
 *
 * Formulas are PyTorch's (c10/util/complex.h, complex_math.h): products are the plain (ac - bd, ad + bc),
 * quotients numpy's scaled division, log1p/expm1 c10's cancellation-free forms, sgn z/|z| (0 at 0);
 * the other functions are C99's (glibc) in double complex, which std::complex calls too.  c64 operands
 * are computed in double and rounded once, so they are at least as accurate as the CPU's float path.
 */
#include <complex.h>
#undef I /* complex.h's imaginary unit; the [O, R, I] shape letters are ours */
#include <math.h>
#include <string.h>

#include "nk_complex.h"
#include "nk_impl.h"
#include "nrt.h"

typedef double _Complex cx_t;

static inline cx_t cx(double re, double im)
{
	return CMPLX(re, im);
}

static inline cx_t cx_load(const char *p, int dt)
{
	if (dt == NK_C64) {
		const float *f = (const float *)p;
		return cx((double)f[0], (double)f[1]);
	}
	if (dt == NK_C128) {
		const double *d = (const double *)p;
		return cx(d[0], d[1]);
	}
	return cx(nk_load_f64(p, dt), 0.0);
}

static inline void cx_store(char *p, int dt, cx_t v)
{
	if (dt == NK_C64) {
		float *f = (float *)p;
		f[0] = (float)creal(v), f[1] = (float)cimag(v);
	} else if (dt == NK_C128) {
		double *d = (double *)p;
		d[0] = creal(v), d[1] = cimag(v);
	} else {
		nk_store_f64(p, dt, creal(v));
	}
}

static inline cx_t cx_mul(cx_t x, cx_t y)
{
	double a = creal(x), b = cimag(x), c = creal(y), d = cimag(y);
	return cx(a * c - b * d, a * d + b * c);
}

/* numpy's division (c10::complex::operator/=) */
static inline cx_t cx_div(cx_t x, cx_t y)
{
	double a = creal(x), b = cimag(x), c = creal(y), d = cimag(y);
	double ac = fabs(c), ad = fabs(d);
	if (ac >= ad) {
		if (ac == 0 && ad == 0)
			return cx(a / ac, b / ad);
		double rat = d / c, scl = 1.0 / (c + d * rat);
		return cx((a + b * rat) * scl, (b - a * rat) * scl);
	}
	double rat = c / d, scl = 1.0 / (d + c * rat);
	return cx((a * rat + b) * scl, (b * rat - a) * scl);
}

static inline cx_t cx_log1p(cx_t z)
{
	double x = creal(z), y = cimag(z);
	double zabs = hypot(x, y), theta = atan2(y, x + 1.0);
	if (zabs < 0.5) {
		double r = x * (2.0 + x) + y * y;
		if (r == 0)
			return cx(x, theta);
		return cx(0.5 * log1p(r), theta);
	}
	return cx(log(hypot(x + 1.0, y)), theta);
}

static inline cx_t cx_expm1(cx_t z)
{
	double x = creal(z), y = cimag(z), a = sin(y / 2);
	return cx(expm1(x) * cos(y) - 2.0 * a * a, exp(x) * sin(y));
}

static inline cx_t cx_scale(cx_t z, double s)
{
	return cx(creal(z) * s, cimag(z) * s);
}

static inline cx_t cx_conj(cx_t z)
{
	return cx(creal(z), -cimag(z));
}

static inline cx_t cx_bool(bool v)
{
	return cx(v ? 1.0 : 0.0, 0.0);
}

static inline bool cx_isnan(cx_t z)
{
	return isnan(creal(z)) || isnan(cimag(z));
}

/* x ** e for a scalar exponent, with aten's special cases (pow_out / pow_tensor_scalar_kernel) */
static inline cx_t cx_pow_scalar(cx_t x, cx_t e)
{
	if (cimag(e) == 0) {
		double r = creal(e);
		if (r == 0)
			return cx(1, 0);
		if (r == 1)
			return x;
		if (r == 0.5)
			return csqrt(x);
		if (r == -0.5)
			return cx_div(cx(1, 0), csqrt(x));
		if (r == -1)
			return cx_div(cx(1, 0), x);
	}
	return cpow(x, e);
}

static inline double cx_angle_real(double x)
{
	if (isnan(x))
		return x;
	return x < 0 ? M_PI : 0.0;
}

typedef struct {
	int op, nops;
	int dt[NK_MAX_OPS];
	cx_t s;        /* the complex parameter a + i*b */
	int64_t ia;
} cx_ctx_t;

/* One element: v[1..] are the inputs; returns the output (real outputs: the real part). */
static inline cx_t cx_eval(const cx_ctx_t *c, const cx_t *v, const char *const *p)
{
	cx_t x = v[1], y = v[2], z = v[3];
	switch (c->op) {
	case NK_OP_FILL: return c->s;
	case NK_CX_COPY: { /* integer -> c64 rounds once, as the CPU's cast */
		if (c->dt[0] == NK_C64 && !nk_is_complex(c->dt[1]) && !nk_is_float(c->dt[1]))
			return cx((double)(float)nk_load_i64(p[1], c->dt[1]), 0);
		cx_t r = (c->ia & 1) ? cx_conj(x) : x;
		return (c->ia & 2) ? -r : r;
	}
	case NK_CX_CONJ: return cx_conj(x);
	case NK_CX_ANGLE: return nk_is_complex(c->dt[1]) ? cx(atan2(cimag(x), creal(x)), 0) : cx(cx_angle_real(creal(x)), 0);
	case NK_CX_COMPLEX: return cx(creal(x), creal(y));
	case NK_CX_POLAR: return cx(creal(x) * cos(creal(y)), creal(x) * sin(creal(y)));
	case NK_OP_NEG: return -x;
	case NK_OP_ABS: return cx(hypot(creal(x), cimag(x)), 0);
	case NK_OP_SIGN: {
		if (creal(x) == 0 && cimag(x) == 0)
			return cx(0, 0);
		double m = hypot(creal(x), cimag(x));
		return cx(creal(x) / m, cimag(x) / m);
	}
	case NK_OP_RECIPROCAL: return cx_div(cx(1, 0), x);
	case NK_OP_SQUARE: return cx_mul(x, x);
	case NK_OP_EXP: return cexp(x);
	case NK_OP_EXP2: return cpow(cx(2, 0), x);
	case NK_OP_EXPM1: return cx_expm1(x);
	case NK_OP_LOG: return clog(x);
	case NK_OP_LOG2: return cx_scale(clog(x), 1.0 / M_LN2);
	case NK_OP_LOG10: return cx_scale(clog(x), 1.0 / M_LN10);
	case NK_OP_LOG1P: return cx_log1p(x);
	case NK_OP_SQRT: return csqrt(x);
	case NK_OP_RSQRT: return cx_div(cx(1, 0), csqrt(x));
	case NK_OP_SIN: return csin(x);
	case NK_OP_COS: return ccos(x);
	case NK_OP_TAN: return ctan(x);
	case NK_OP_ASIN: return casin(x);
	case NK_OP_ACOS: return cacos(x);
	case NK_OP_ATAN: return catan(x);
	case NK_OP_SINH: return csinh(x);
	case NK_OP_COSH: return ccosh(x);
	case NK_OP_TANH: return ctanh(x);
	case NK_OP_ASINH: return casinh(x);
	case NK_OP_ACOSH: return cacosh(x);
	case NK_OP_ATANH: return catanh(x);
	case NK_OP_SIGMOID: return cx_div(cx(1, 0), cx(1, 0) + cexp(-x));
	case NK_OP_ISNAN: return cx_bool(cx_isnan(x));
	case NK_OP_ISINF: return cx_bool(isinf(creal(x)) || isinf(cimag(x)));
	case NK_OP_ISFINITE: return cx_bool(isfinite(creal(x)) && isfinite(cimag(x)));
	case NK_OP_POW_SCALAR: return cx_pow_scalar(x, c->s);
	case NK_OP_ADD: return x + (cimag(c->s) == 0 ? cx_scale(y, creal(c->s)) : cx_mul(c->s, y));
	case NK_OP_SUB: return x - (cimag(c->s) == 0 ? cx_scale(y, creal(c->s)) : cx_mul(c->s, y));
	case NK_OP_MUL: return cx_mul(x, y);
	case NK_OP_DIV: return cx_div(x, y);
	case NK_OP_POW: return (c->ia & 1) ? cx_pow_scalar(x, y) : cpow(x, y);
	case NK_OP_EQ: return cx_bool(creal(x) == creal(y) && cimag(x) == cimag(y));
	case NK_OP_NE: return cx_bool(!(creal(x) == creal(y) && cimag(x) == cimag(y)));
	case NK_OP_TANH_BACKWARD: return cx_mul(x, cx_conj(cx(1, 0) - cx_mul(y, y)));
	case NK_OP_SIGMOID_BACKWARD: return cx_mul(x, cx_conj(cx_mul(cx(1, 0) - y, y)));
	case NK_OP_WHERE: return nk_load_f64(p[1], c->dt[1]) != 0 ? y : z;
	case NK_OP_ADDCMUL: return x + cx_mul(c->s, cx_mul(y, z));
	case NK_OP_ADDCDIV: return x + cx_mul(c->s, cx_div(y, z));
	case NK_OP_LERP: return x + cx_mul(z, y - x);
	case NK_OP_LERP_SCALAR: return x + cx_mul(c->s, y - x);
	default: return cx(NAN, NAN); /* unreachable: nk_complex_op_arity screens ops */
	}
}

int nk_complex_op_arity(int op)
{
	switch (op) {
	case NK_OP_FILL: return 1;
	case NK_CX_COPY: case NK_CX_CONJ: case NK_CX_ANGLE:
	case NK_OP_NEG: case NK_OP_ABS: case NK_OP_SIGN: case NK_OP_RECIPROCAL: case NK_OP_SQUARE:
	case NK_OP_EXP: case NK_OP_EXP2: case NK_OP_EXPM1: case NK_OP_LOG: case NK_OP_LOG2: case NK_OP_LOG10:
	case NK_OP_LOG1P: case NK_OP_SQRT: case NK_OP_RSQRT: case NK_OP_SIN: case NK_OP_COS: case NK_OP_TAN:
	case NK_OP_ASIN: case NK_OP_ACOS: case NK_OP_ATAN: case NK_OP_SINH: case NK_OP_COSH: case NK_OP_TANH:
	case NK_OP_ASINH: case NK_OP_ACOSH: case NK_OP_ATANH: case NK_OP_SIGMOID:
	case NK_OP_ISNAN: case NK_OP_ISINF: case NK_OP_ISFINITE: case NK_OP_POW_SCALAR:
		return 2;
	case NK_CX_COMPLEX: case NK_CX_POLAR:
	case NK_OP_ADD: case NK_OP_SUB: case NK_OP_MUL: case NK_OP_DIV: case NK_OP_POW: case NK_OP_EQ: case NK_OP_NE:
	case NK_OP_TANH_BACKWARD: case NK_OP_SIGMOID_BACKWARD: case NK_OP_LERP_SCALAR:
		return 3;
	case NK_OP_WHERE: case NK_OP_ADDCMUL: case NK_OP_ADDCDIV: case NK_OP_LERP:
		return 4;
	default:
		return 0;
	}
}

/* c64 = c64 * c64 on dense rows: RoPE's product, without the per-element dtype switch. */
static bool cx_row_mul_c64(const cx_ctx_t *c, char *const *data, const int64_t *st, int64_t n)
{
	if (c->op != NK_OP_MUL || c->dt[0] != NK_C64 || c->dt[1] != NK_C64 || c->dt[2] != NK_C64)
		return false;
	float *o = (float *)data[0];
	const float *x = (const float *)data[1], *y = (const float *)data[2];
	int64_t so = st[0] / 4, sx = st[1] / 4, sy = st[2] / 4;
	for (int64_t i = 0; i < n; i++) {
		double a = x[i * sx], b = x[i * sx + 1], cc = y[i * sy], d = y[i * sy + 1];
		o[i * so] = (float)(a * cc - b * d);
		o[i * so + 1] = (float)(a * d + b * cc);
	}
	return true;
}

static void cx_row(void *ctx, char *const *data, const int64_t *st, int64_t n, int64_t lin)
{
	const cx_ctx_t *c = ctx;
	(void)lin;
	if (cx_row_mul_c64(c, data, st, n))
		return;
	if (c->op == NK_CX_COPY && c->ia == 0 && c->dt[0] == c->dt[1]) { /* a plain move */
		size_t esz = c->dt[0] == NK_C64 ? 8 : c->dt[0] == NK_C128 ? 16 : nk_dtype_size(c->dt[0]);
		if (st[0] == (int64_t)esz && st[1] == (int64_t)esz) {
			memmove(data[0], data[1], (size_t)n * esz);
			return;
		}
		for (int64_t i = 0; i < n; i++)
			memmove(data[0] + i * st[0], data[1] + i * st[1], esz);
		return;
	}
	for (int64_t i = 0; i < n; i++) {
		cx_t v[NK_MAX_OPS];
		const char *p[NK_MAX_OPS];
		for (int k = 1; k < c->nops; k++) {
			p[k] = data[k] + i * st[k];
			v[k] = cx_load(p[k], c->dt[k]);
		}
		for (int k = c->nops; k < NK_MAX_OPS; k++)
			v[k] = 0, p[k] = NULL;
		cx_store(data[0] + i * st[0], c->dt[0], cx_eval(c, v, p));
	}
}

static bool cx_dtype_ok(int dt)
{
	return nk_is_complex(dt) || nk_dtype_valid(dt);
}

int nk_complex_pointwise_run(void *args)
{
	const nk_pointwise_args_t *a = args;
	int want = nk_complex_op_arity(a->op);
	if (!want) {
		nrt_kernel_fail("nk_complex: op %d has no complex kernel", a->op);
		return -1;
	}
	if (a->it.nops != want) {
		nrt_kernel_fail("nk_complex: op %d takes %d operands, got %d", a->op, want, a->it.nops);
		return -1;
	}
	cx_ctx_t c = {.op = a->op, .nops = a->it.nops, .s = cx(a->a, a->b), .ia = a->ia};
	/* the loop only walks byte strides: give it a valid stand-in dtype for the complex operands */
	nk_iter_t it = a->it;
	for (int k = 0; k < it.nops; k++) {
		if (!cx_dtype_ok(it.dtype[k])) {
			nrt_kernel_fail("nk_complex: operand %d has invalid dtype %d", k, it.dtype[k]);
			return -1;
		}
		c.dt[k] = it.dtype[k];
		if (nk_is_complex(it.dtype[k]))
			it.dtype[k] = NK_F64;
	}
	nk_loop_t L;
	if (nk_loop_init(&L, &it, 1, NK_MAX_OPS, "nk_complex"))
		return -1;
	nk_loop_parallel(&L, NK_PARALLEL_GRAIN / 4, cx_row, &c);
	return 0;
}

/* ---- product reduction ------------------------------------------------------------------------ */

typedef struct {
	const nk_complex_prod_args_t *a;
} cx_prod_ctx_t;

static void cx_prod_range(void *ctx, int64_t lo, int64_t hi)
{
	const nk_complex_prod_args_t *a = ((const cx_prod_ctx_t *)ctx)->a;
	size_t esz = a->dtype == NK_C64 ? 8 : 16;
	for (int64_t oi = lo; oi < hi; oi++) {
		int64_t o = oi / a->I, i = oi % a->I;
		cx_t acc = cx(1, 0);
		for (int64_t r = 0; r < a->R; r++) {
			int64_t e = (o * a->R + r) * a->I + i;
			acc = cx_mul(acc, cx_load((const char *)a->in + e * esz, a->dtype));
			if (a->scan) /* accumulated in double complex, as the CPU's (acc_type) */
				cx_store((char *)a->out + e * esz, a->dtype, acc);
		}
		if (!a->scan)
			cx_store((char *)a->out + oi * esz, a->dtype, acc);
	}
}

int nk_complex_prod_run(void *args)
{
	const nk_complex_prod_args_t *a = args;
	if (!nk_is_complex(a->dtype)) {
		nrt_kernel_fail("nk_complex_prod: dtype %d is not complex", a->dtype);
		return -1;
	}
	if (a->O < 0 || a->R < 0 || a->I < 0 || (a->I && a->O > INT64_MAX / a->I)) {
		nrt_kernel_fail("nk_complex_prod: bad shape [%lld, %lld, %lld]", (long long)a->O, (long long)a->R,
				(long long)a->I);
		return -1;
	}
	cx_prod_ctx_t c = {a};
	int64_t n = a->O * a->I;
	int64_t grain = a->R > 0 ? NK_PARALLEL_GRAIN / (a->R * 4) + 1 : n + 1;
	nrt_parallel_for(n, grain, cx_prod_range, &c);
	return 0;
}
