/* special.c - special functions elementwise over an nk_iter_t: digamma, lgamma, polygamma, Hurwitz
 * zeta, sinc, entr, sgn, angle, i0/i0e/i1/i1e, xlog1py, heaviside, nextafter, gcd, lcm and the orthogonal polynomial
 * families (Chebyshev T/U/V/W and shifted, Hermite H/He, Laguerre L, Legendre P).
 *
 * The scalar formulas follow PyTorch's CPU code (aten/src/ATen/native/Math.h, itself from Cephes) and
 * are evaluated in double for every floating dtype, then rounded once to the output dtype (PyTorch
 * evaluates f32 in float: the results differ by its float rounding error, within a few ulp; trigamma,
 * whose float form differs near its poles, is evaluated in float for the float dtypes); integer
 * ops (gcd, lcm, heaviside/sgn on integer dtypes) compute in int64 and wrap to the dtype when stored.
 * nextafter steps the output dtype's own representation (f32, f64, bf16, f16).
 * nk_special_run walks coalesced rows split over the pool; nk_special_ref one element at a time
 * through the uncoalesced iterator, with the same scalar functions.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

static const char *const sp_names[NK_SP_COUNT] = {
	[NK_SP_DIGAMMA] = "digamma", [NK_SP_LGAMMA] = "lgamma", [NK_SP_POLYGAMMA] = "polygamma", [NK_SP_SINC] = "sinc",
	[NK_SP_ENTR] = "entr", [NK_SP_SGN] = "sgn", [NK_SP_ANGLE] = "angle", [NK_SP_I0] = "i0", [NK_SP_I0E] = "i0e",
	[NK_SP_I1] = "i1", [NK_SP_I1E] = "i1e", [NK_SP_XLOG1PY] = "xlog1py",
	[NK_SP_ZETA] = "zeta", [NK_SP_HEAVISIDE] = "heaviside", [NK_SP_NEXTAFTER] = "nextafter", [NK_SP_GCD] = "gcd",
	[NK_SP_LCM] = "lcm", [NK_SP_CHEBYSHEV_T] = "chebyshev_polynomial_t", [NK_SP_CHEBYSHEV_U] = "chebyshev_polynomial_u",
	[NK_SP_CHEBYSHEV_V] = "chebyshev_polynomial_v", [NK_SP_CHEBYSHEV_W] = "chebyshev_polynomial_w",
	[NK_SP_SHIFTED_CHEBYSHEV_T] = "shifted_chebyshev_polynomial_t", [NK_SP_SHIFTED_CHEBYSHEV_U] = "shifted_chebyshev_polynomial_u",
	[NK_SP_SHIFTED_CHEBYSHEV_V] = "shifted_chebyshev_polynomial_v", [NK_SP_SHIFTED_CHEBYSHEV_W] = "shifted_chebyshev_polynomial_w",
	[NK_SP_HERMITE_H] = "hermite_polynomial_h", [NK_SP_HERMITE_HE] = "hermite_polynomial_he",
	[NK_SP_LAGUERRE_L] = "laguerre_polynomial_l", [NK_SP_LEGENDRE_P] = "legendre_polynomial_p",
};

static bool sp_binary(int op)
{
	return op >= NK_SP_XLOG1PY;
}

static bool sp_integer_op(int op)
{
	return op == NK_SP_GCD || op == NK_SP_LCM;
}

/* ---- gamma family ------------------------------------------------------------------------------- */
static double sp_polevl(double x, const double *c, int n)
{
	double r = c[0];
	for (int i = 1; i <= n; i++)
		r = r * x + c[i];
	return r;
}

/* PyTorch's calc_digamma (double) */
static double sp_digamma(double x)
{
	static const double PSI_10 = 2.25175258906672110764;
	if (x == 0)
		return copysign(INFINITY, -x);
	bool x_is_integer = x == trunc(x);
	if (x < 0) {
		if (x_is_integer)
			return NAN;
		double q, r = modf(x, &q);
		return sp_digamma(1 - x) - M_PI / tan(M_PI * r);
	}
	double result = 0;
	while (x < 10) {
		result -= 1 / x;
		x += 1;
	}
	if (x == 10)
		return result + PSI_10;
	static const double A[] = {
		8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
		-4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
		8.33333333333333333333E-2,
	};
	double y = 0;
	if (x < 1.0e17) {
		double z = 1.0 / (x * x);
		y = z * sp_polevl(z, A, 6);
	}
	return result + log(x) - (0.5 / x) - y;
}

/* PyTorch's calc_trigamma */
static double sp_trigamma(double x)
{
	double sign = +1, result = 0;
	if (x < 0.5) {
		sign = -1;
		double s = sin(M_PI * x);
		result -= (M_PI * M_PI) / (s * s);
		x = 1 - x;
	}
	for (int i = 0; i < 6; ++i) {
		result += 1 / (x * x);
		x += 1;
	}
	double ixx = 1 / (x * x);
	result += (1 + 1 / (2 * x) + ixx * (1. / 6 - ixx * (1. / 30 - ixx * (1. / 42)))) / x;
	return sign * result;
}

/* Hurwitz zeta(x, q) (Cephes, as PyTorch's zeta) */
static double sp_zeta(double x, double q)
{
	static const double MACHEP = 1.11022302462515654042E-16;
	static const double A[] = {
		12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
		-2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
		1.8152105401943546773e17, -7.1661652561756670113e18,
	};
	if (x == 1)
		return INFINITY;
	if (x < 1)
		return NAN;
	if (q <= 0) {
		if (q == floor(q))
			return INFINITY;
		if (x != floor(x))
			return NAN;
	}
	double s = pow(q, -x), a = q, b = 0, k, t, w;
	int i = 0;
	while (i < 9 || a <= 9.0) {
		i += 1;
		a += 1;
		b = pow(a, -x);
		s += b;
		if (-MACHEP * s < b && b < MACHEP * s)
			return s;
	}
	w = a;
	s += b * w / (x - 1);
	s -= 0.5 * b;
	a = 1;
	k = 0;
	for (int j = 0; j < 12; j++) {
		a *= x + k;
		b /= w;
		t = a * b / A[j];
		s = s + t;
		t = fabs(t / s);
		if (t < MACHEP)
			return s;
		k += 1;
		a *= x + k;
		b /= w;
		k += 1;
	}
	return s;
}

/* PyTorch's float calc_trigamma: f32/bf16/f16 take it (near the poles at x <= 0 its float sin(pi x)
 * decides the (huge) value, which the double form would not reproduce) */
static float sp_trigammaf(float x)
{
	float sign = +1, result = 0;
	if (x < 0.5f) {
		sign = -1;
		float s = sinf(3.14159265358979323846f * x);
		result -= (3.14159265358979323846f * 3.14159265358979323846f) / (s * s);
		x = 1 - x;
	}
	for (int i = 0; i < 6; ++i) {
		result += 1 / (x * x);
		x += 1;
	}
	float ixx = 1 / (x * x);
	result += (1 + 1 / (2 * x) + ixx * (1.f / 6 - ixx * (1.f / 30 - ixx * (1.f / 42)))) / x;
	return sign * result;
}

static double sp_polygamma(double x, int64_t n, bool single)
{
	if (n == 0)
		return sp_digamma(x);
	if (n == 1)
		return single ? (double)sp_trigammaf((float)x) : sp_trigamma(x);
	return ((n % 2) ? 1.0 : -1.0) * exp(lgamma((double)n + 1.0)) * sp_zeta((double)(n + 1), x);
}

/* ---- modified Bessel functions I0, I1 (own evaluation, not Cephes' Chebyshev tables) ---------------
 * |x| <= 30: the power series I_nu(x) = (x/2)^nu sum_k (x^2/4)^k / (k! (k + nu)!), all terms positive
 * (no cancellation: about 1 ulp per term of rounding), scaled by exp(-|x|) for the e-forms.
 * |x| > 30: Hankel's asymptotic series of exp(-x) I_nu(x) sqrt(2 pi x) = sum_k t_k with
 * t_k = t_(k-1) ((2k - 1)^2 - 4 nu^2) / (8 k x), truncated at its smallest term (error below e^(-2x)).
 * I0 is even, I1 odd. */
static double sp_bessel_i_series(double ax, int nu)
{
	double t = ax * ax / 4, term = 1, sum = 1;
	for (int k = 1; k < 500; k++) {
		term *= t / ((double)k * (double)(k + nu));
		sum += term;
		if (term < sum * 1e-17)
			break;
	}
	return nu ? sum * ax / 2 : sum;
}

static double sp_bessel_ie_asym(double ax, int nu)
{
	double term = 1, sum = 1, mu = 4.0 * nu * nu;
	for (int k = 1; k < 200; k++) {
		double next = term * ((double)(2 * k - 1) * (double)(2 * k - 1) - mu) / (8.0 * k * ax);
		if (fabs(next) >= fabs(term))
			break;
		term = next;
		sum += term;
		if (fabs(term) < fabs(sum) * 1e-17)
			break;
	}
	return sum / sqrt(2 * M_PI * ax);
}

/* scaled: exp(-|x|) I_nu(x) */
static double sp_bessel_i(double x, int nu, bool scaled)
{
	double ax = fabs(x), r;
	if (isnan(x))
		return x;
	if (ax <= 30) {
		r = sp_bessel_i_series(ax, nu);
		if (scaled)
			r *= exp(-ax);
	} else {
		r = sp_bessel_ie_asym(ax, nu);
		if (!scaled)
			r = ax < 700 ? r * exp(ax) : r * exp(ax / 2) * exp(ax / 2); /* overflows to inf past ~713 */
	}
	return (nu && x < 0) ? -r : r;
}

/* ---- orthogonal polynomials (PyTorch's *_polynomial_*_forward, n = (int64) the second input) ---- */
static double sp_cheb_t(double x, int64_t n)
{
	if (n < 0)
		return 0;
	if (fabs(x) == 1)
		return (x > 0 || n % 2 == 0) ? 1 : -1;
	if (n > 6 && fabs(x) < 1)
		return cos((double)n * acos(x));
	if (n == 0)
		return 1;
	if (n == 1)
		return x;
	double p = 1, q = x, r = 0;
	for (int64_t k = 2; k <= n; k++) {
		r = (x + x) * q - p;
		p = q;
		q = r;
	}
	return r;
}

static double sp_cheb_u(double x, int64_t n)
{
	if (n < 0)
		return 0;
	if (fabs(x) == 1)
		return (x > 0 || n % 2 == 0) ? (double)(n + 1) : -(double)(n + 1);
	if (n > 8 && fabs(x) < 1) {
		double t = acos(x);
		if (sin(t) != 0)
			return sin((double)(n + 1) * t) / sin(t);
		return (double)(n + 1) * cos((double)(n + 1) * t) / x;
	}
	if (n == 0)
		return 1;
	if (n == 1)
		return x + x;
	double p = 1, q = x + x, r = 0;
	for (int64_t k = 2; k <= n; k++) {
		r = (x + x) * q - p;
		p = q;
		q = r;
	}
	return r;
}

static double sp_cheb_v(double x, int64_t n)
{
	if (n < 0)
		return 0;
	if (fabs(x) == 1) {
		if (x > 0)
			return 1;
		return n % 2 == 0 ? (double)(n + n + 1) : -(double)(n + n + 1);
	}
	if (n > 8 && fabs(x) < 1) {
		double t = acos(x);
		if (sin(t / 2) != 1)
			return cos(((double)n + 0.5) * t) / cos(t / 2);
		return n % 2 == 0 ? (double)(n + n + 1) : -(double)(n + n + 1);
	}
	if (n == 0)
		return 1;
	if (n == 1)
		return x + x - 1;
	double p = 1, q = x + x - 1, r = 0;
	for (int64_t k = 2; k <= n; k++) {
		r = (x + x) * q - p;
		p = q;
		q = r;
	}
	return r;
}

static double sp_cheb_w(double x, int64_t n)
{
	if (n < 0)
		return 0;
	if (fabs(x) == 1) {
		if (x > 0)
			return (double)(n + n + 1);
		return n % 2 == 0 ? 1 : -1;
	}
	if (n > 8 && fabs(x) < 1) {
		double t = acos(x);
		if (cos(t / 2) != 1)
			return sin(((double)n + 0.5) * t) / sin(t / 2);
		if (x > 0)
			return (double)(n + n + 1);
		return n % 2 == 0 ? 1 : -1;
	}
	if (n == 0)
		return 1;
	if (n == 1)
		return x + x + 1;
	double p = 1, q = x + x + 1, r = 0;
	for (int64_t k = 2; k <= n; k++) {
		r = (x + x) * q - p;
		p = q;
		q = r;
	}
	return r;
}

/* shifted: the polynomial at 2x - 1, with PyTorch's special points x = 0 and x = 1 */
static double sp_shifted(int op, double x, int64_t n)
{
	if (n < 0)
		return 0;
	double odd = n % 2 == 0 ? 1 : -1;
	switch (op) {
	case NK_SP_SHIFTED_CHEBYSHEV_T:
		if (x == 1)
			return 1;
		if (x == 0)
			return odd;
		return sp_cheb_t(x + x - 1, n);
	case NK_SP_SHIFTED_CHEBYSHEV_U:
		if (x == 1)
			return (double)(n + 1);
		if (x == 0)
			return odd * (double)(n + 1);
		return sp_cheb_u(x + x - 1, n);
	case NK_SP_SHIFTED_CHEBYSHEV_V:
		if (x == 1)
			return 1;
		if (x == 0)
			return odd * (double)(n + n + 1);
		return sp_cheb_v(x + x - 1, n);
	default:
		if (x == 1)
			return (double)(n + n + 1);
		if (x == 0)
			return odd;
		return sp_cheb_w(x + x - 1, n);
	}
}

static double sp_hermite_h(double x, int64_t n)
{
	if (n < 0)
		return 0;
	if (n == 0)
		return 1;
	if (n == 1)
		return x + x;
	double p = 1, q = x + x, r = 0;
	for (int64_t k = 2; k < n + n; k += 2) {
		r = (x + x) * q - (double)k * p;
		p = q;
		q = r;
	}
	return r;
}

static double sp_hermite_he(double x, int64_t n)
{
	if (n < 0)
		return 0;
	if (n == 0)
		return 1;
	if (n == 1)
		return x;
	double p = 1, q = x, r = 0;
	for (int64_t k = 1; k < n; k++) {
		r = x * q - (double)k * p;
		p = q;
		q = r;
	}
	return r;
}

static double sp_laguerre(double x, int64_t n)
{
	if (n < 0)
		return 0;
	if (fabs(x) == 0)
		return 1;
	if (n == 0)
		return 1;
	if (n == 1)
		return 1 - x;
	double p = 1, q = 1 - x, r = 0;
	for (int64_t k = 1; k < n; k++) {
		r = (((double)(k + k) + (1 - x)) * q - (double)k * p) / (double)(k + 1);
		p = q;
		q = r;
	}
	return r;
}

static double sp_legendre(double x, int64_t n)
{
	if (n < 0)
		return 0;
	if (fabs(x) == 1)
		return (x > 0 || n % 2 == 0) ? 1 : -1;
	if (n == 0)
		return 1;
	if (n == 1)
		return x;
	double p = 1, q = x, r = 0;
	for (int64_t k = 1; k < n; k++) {
		r = ((double)(k + k + 1) * x * q - (double)k * p) / (double)(k + 1);
		p = q;
		q = r;
	}
	return r;
}

/* (int64_t)n as C++'s static_cast, for the n operand of the polynomials (NaN/huge: treated as huge) */
static int64_t sp_n(double n)
{
	if (isnan(n))
		return 0;
	return nk_f2i64(n);
}

/* ---- the scalar dispatch ----------------------------------------------------------------------- */
static double sp_f64(int op, double x, double y, int64_t ia, bool single)
{
	switch (op) {
	case NK_SP_DIGAMMA: return sp_digamma(x);
	case NK_SP_LGAMMA: return lgamma(x);
	case NK_SP_POLYGAMMA: return sp_polygamma(x, ia, single);
	case NK_SP_SINC:
		if (x == 0)
			return 1;
		return sin(M_PI * x) / (M_PI * x);
	case NK_SP_ENTR:
		if (isnan(x))
			return x;
		if (x > 0)
			return -x * log(x);
		if (x == 0)
			return 0;
		return -INFINITY;
	case NK_SP_SGN:
		return isnan(x) ? x : (double)((0 < x) - (x < 0));
	case NK_SP_ANGLE:
		if (isnan(x))
			return x;
		return x < 0 ? M_PI : 0;
	case NK_SP_I0: return sp_bessel_i(x, 0, false);
	case NK_SP_I0E: return sp_bessel_i(x, 0, true);
	case NK_SP_I1: return sp_bessel_i(x, 1, false);
	case NK_SP_I1E: return sp_bessel_i(x, 1, true);
	case NK_SP_XLOG1PY:
		if (isnan(y))
			return NAN;
		if (x == 0)
			return 0;
		return x * log1p(y);
	case NK_SP_ZETA: return sp_zeta(x, y);
	case NK_SP_HEAVISIDE: return x == 0 ? y : (double)(x > 0);
	case NK_SP_CHEBYSHEV_T: return sp_cheb_t(x, sp_n(y));
	case NK_SP_CHEBYSHEV_U: return sp_cheb_u(x, sp_n(y));
	case NK_SP_CHEBYSHEV_V: return sp_cheb_v(x, sp_n(y));
	case NK_SP_CHEBYSHEV_W: return sp_cheb_w(x, sp_n(y));
	case NK_SP_SHIFTED_CHEBYSHEV_T: case NK_SP_SHIFTED_CHEBYSHEV_U: case NK_SP_SHIFTED_CHEBYSHEV_V:
	case NK_SP_SHIFTED_CHEBYSHEV_W:
		return sp_shifted(op, x, sp_n(y));
	case NK_SP_HERMITE_H: return sp_hermite_h(x, sp_n(y));
	case NK_SP_HERMITE_HE: return sp_hermite_he(x, sp_n(y));
	case NK_SP_LAGUERRE_L: return sp_laguerre(x, sp_n(y));
	case NK_SP_LEGENDRE_P: return sp_legendre(x, sp_n(y));
	default: return NAN;
	}
}

static int64_t sp_gcd(int64_t a, int64_t b)
{
	uint64_t x = a < 0 ? -(uint64_t)a : (uint64_t)a, y = b < 0 ? -(uint64_t)b : (uint64_t)b;
	while (x != 0) {
		uint64_t c = x;
		x = y % x;
		y = c;
	}
	return (int64_t)y;
}

static int64_t sp_i64(int op, int64_t x, int64_t y)
{
	switch (op) {
	case NK_SP_GCD: return sp_gcd(x, y);
	case NK_SP_LCM: {
		int64_t g = sp_gcd(x, y);
		if (g == 0)
			return 0;
		int64_t r = (int64_t)((uint64_t)(x / g) * (uint64_t)y);
		return r < 0 ? (int64_t)(-(uint64_t)r) : r;
	}
	case NK_SP_HEAVISIDE: return x == 0 ? y : x > 0;
	case NK_SP_SGN: return (0 < x) - (x < 0);
	default: return 0;
	}
}

/* nextafter in the dtype's representation */
static void sp_nextafter(char *out, int dt, const char *px, const char *py)
{
	if (dt == NK_F64) {
		*(double *)out = nextafter(*(const double *)px, *(const double *)py);
		return;
	}
	if (dt == NK_F32) {
		*(float *)out = nextafterf(*(const float *)px, *(const float *)py);
		return;
	}
	/* bf16 / f16: step the 16-bit pattern (c10::nextafter for BFloat16 / Half) */
	uint16_t hx, hy;
	memcpy(&hx, px, 2);
	memcpy(&hy, py, 2);
	float fx = nk_load_f32(px, dt), fy = nk_load_f32(py, dt);
	uint16_t r;
	if (isnan(fx) || isnan(fy))
		r = dt == NK_BF16 ? 0x7fc0 : 0x7e00;
	else if (fx == fy)
		r = hy;
	else if (fx == 0)
		r = (uint16_t)((hy & 0x8000) | 1);
	else if ((fx < fy) == (fx > 0))
		r = (uint16_t)(hx + 1);
	else
		r = (uint16_t)(hx - 1);
	memcpy(out, &r, 2);
}

typedef struct {
	int op;
	int64_t ia;
	int dt_out, dt_x, dt_y;
	bool int_math;
} sp_ctx_t;

static inline void sp_elem(const sp_ctx_t *c, char *out, const char *px, const char *py)
{
	if (c->op == NK_SP_NEXTAFTER) {
		sp_nextafter(out, c->dt_out, px, py);
		return;
	}
	if (c->int_math) {
		int64_t x = nk_load_i64(px, c->dt_x), y = py ? nk_load_i64(py, c->dt_y) : 0;
		nk_store_i64(out, c->dt_out, sp_i64(c->op, x, y));
		return;
	}
	double x = nk_load_f64(px, c->dt_x), y = py ? nk_load_f64(py, c->dt_y) : 0;
	nk_store_f64(out, c->dt_out, sp_f64(c->op, x, y, c->ia, c->dt_out != NK_F64));
}

static void sp_row(void *ctx, char *const *data, const int64_t *st, int64_t n, int64_t lin)
{
	const sp_ctx_t *c = ctx;
	bool bin = sp_binary(c->op);
	for (int64_t j = 0; j < n; j++)
		sp_elem(c, data[0] + j * st[0], data[1] + j * st[1], bin ? data[2] + j * st[2] : NULL);
}

static int sp_prepare(sp_ctx_t *c, const nk_special_args_t *a)
{
	if (a->op < 0 || a->op >= NK_SP_COUNT) {
		nrt_kernel_fail("nk_special: unknown op %d", a->op);
		return -1;
	}
	int need = sp_binary(a->op) ? 3 : 2;
	if (a->it.nops != need) {
		nrt_kernel_fail("nk_special: %s takes %d operands, got %d", sp_names[a->op], need, a->it.nops);
		return -1;
	}
	c->op = a->op, c->ia = a->ia;
	c->dt_out = a->it.dtype[0], c->dt_x = a->it.dtype[1], c->dt_y = need == 3 ? a->it.dtype[2] : c->dt_x;
	bool int_out = !nk_is_float(c->dt_out);
	c->int_math = sp_integer_op(a->op) || ((a->op == NK_SP_HEAVISIDE || a->op == NK_SP_SGN) && int_out);
	if ((sp_integer_op(a->op) && !int_out) || (!c->int_math && int_out) ||
	    (a->op == NK_SP_NEXTAFTER && (c->dt_x != c->dt_out || c->dt_y != c->dt_out))) {
		nrt_kernel_fail("nk_special: %s not implemented for dtype %s", sp_names[a->op], nk_dtype_name(c->dt_out));
		return -1;
	}
	if (a->op == NK_SP_POLYGAMMA && a->ia < 0) {
		nrt_kernel_fail("nk_special: polygamma(n, x) does not support negative n (%lld)", (long long)a->ia);
		return -1;
	}
	return 0;
}

int nk_special_run(void *args)
{
	if (nk_using_reference())
		return nk_special_ref(args);
	const nk_special_args_t *a = args;
	nk_loop_t L;
	sp_ctx_t c;
	if (nk_loop_init(&L, &a->it, 2, 3, "nk_special") || sp_prepare(&c, a))
		return -1;
	nk_loop_parallel(&L, NK_PARALLEL_GRAIN / 16, sp_row, &c);
	return 0;
}

int nk_special_ref(void *args)
{
	const nk_special_args_t *a = args;
	nk_loop_t L;
	sp_ctx_t c;
	if (nk_loop_init(&L, &a->it, 2, 3, "nk_special") || sp_prepare(&c, a))
		return -1;
	bool bin = sp_binary(a->op);
	for (int64_t k = 0; k < L.numel; k++)
		sp_elem(&c, a->it.data[0] + nk_iter_offset(&a->it, 0, k), a->it.data[1] + nk_iter_offset(&a->it, 1, k),
			bin ? a->it.data[2] + nk_iter_offset(&a->it, 2, k) : NULL);
	return 0;
}
