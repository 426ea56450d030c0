/* test_pointwise.c - pointwise and copy kernels: exact known values (PyTorch CPU semantics), dtype
 * conversions, and nk_pointwise_run / nk_copy_run against their references for every op and dtype on
 * random inputs with contiguous, transposed, padded, broadcast and negative-stride layouts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"
#include "nrt_impl.h"

/* ---- helpers ------------------------------------------------------------------------------------ */
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static double rndu(void)
{
	return rnd() / 4294967296.0;
}

/* Random values for dtype dt; role 1 = divisor-like (never 0 for integers), 2 = shift counts. */
static void fill(void *buf, int dt, int64_t n, int role)
{
	for (int64_t i = 0; i < n; i++) {
		char *p = (char *)buf + i * (int64_t)nk_dtype_size(dt);
		if (nk_is_float(dt)) {
			static const double special[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e30, -1e-30, 1.0};
			double v = (rnd() % 48 == 0) ? special[rnd() % 8] : (rndu() * 6 - 3);
			nk_store_f64(p, dt, v);
		} else {
			int64_t v = dt == NK_BOOL ? rnd() % 2 : dt == NK_U8 ? rnd() % 60 : (int64_t)(rnd() % 41) - 20;
			if (role == 2)
				v = rnd() % 70;
			if (role == 1 && v == 0)
				v = 3;
			if (dt == NK_I64 && rnd() % 16 == 0)
				v = (int64_t)((uint64_t)rnd() << 31) * (rnd() % 2 ? 1 : -1);
			nk_store_i64(p, dt, v);
		}
	}
}

/* Two elements equal within tolerance (NaN equals NaN, infinities must match). */
static bool close_elem(int dt, const void *a, const void *b, double rtol, double atol)
{
	if (!nk_is_float(dt))
		return nk_load_i64(a, dt) == nk_load_i64(b, dt);
	double x = nk_load_f64(a, dt), y = nk_load_f64(b, dt);
	if (x != x || y != y)
		return x != x && y != y;
	if (isinf(x) || isinf(y))
		return x == y;
	return fabs(x - y) <= atol + rtol * fabs(y);
}

enum { L_CONTIG, L_TRANS, L_PAD, L_NEG, L_BCAST0, L_BCAST1, L_SCALAR, L_NLAYOUT };

typedef struct {
	char *base;
	size_t bytes;
} tbuf_t;

/* Lays out operand k of a 2-D iterator (d0 inner, d1 outer) in a fresh zeroed buffer. */
static tbuf_t layout(nk_iter_t *it, int k, int dt, int lay)
{
	int64_t d0 = it->ndim > 0 ? it->shape[0] : 1, d1 = it->ndim > 1 ? it->shape[1] : 1;
	int64_t e = (int64_t)nk_dtype_size(dt);
	int64_t s0 = e, s1 = d0 * e, span = d0 * d1 * e, off = 0;
	switch (lay) {
	case L_TRANS: s0 = d1 * e; s1 = e; break;
	case L_PAD: s0 = 2 * e; s1 = 2 * d0 * e + e; span = d1 * s1 + e; break;
	case L_NEG: s0 = -e; s1 = -d0 * e; off = (d0 * d1 - 1) * e; break;
	case L_BCAST0: s0 = 0; s1 = e; span = d1 * e; break;
	case L_BCAST1: s0 = e; s1 = 0; span = d0 * e; break;
	case L_SCALAR: s0 = 0; s1 = 0; span = e; break;
	default: break;
	}
	if (span < e)
		span = e;
	tbuf_t b = {calloc(1, (size_t)span), (size_t)span};
	it->dtype[k] = (int8_t)dt;
	it->data[k] = b.base + (off > 0 ? off : 0);
	if (it->ndim > 0) it->strides[k][0] = s0;
	if (it->ndim > 1) it->strides[k][1] = s1;
	return b;
}

static bool approx_op(int op)
{
	return op == NK_OP_EXP || op == NK_OP_TANH || op == NK_OP_SIGMOID || op == NK_OP_SILU ||
	       op == NK_OP_GELU || op == NK_OP_GELU_BACKWARD || op == NK_OP_SILU_BACKWARD;
}

static int op_arity(int op)
{
	if (op == NK_OP_FILL) return 0;
	if (op <= NK_OP_NAN_TO_NUM) return 1;
	if (op <= NK_OP_HARDSWISH_BACKWARD || op == NK_OP_LERP_SCALAR) return 2;
	return 3;
}

static bool is_pred(int op)
{
	return (op >= NK_OP_EQ && op <= NK_OP_LOGICAL_XOR) || op == NK_OP_LOGICAL_NOT ||
	       op == NK_OP_ISNAN || op == NK_OP_ISINF || op == NK_OP_ISFINITE;
}

/* Runs op on a random case twice (run and ref) and compares; returns 1 if the op/dtype is supported.
 * A failure of the reference must be matched by a failure of the run. */
static int pw_case(int op, int dt, int ndim, int64_t d0, int64_t d1, int lay_out, const int *lay_in,
		   int64_t ia)
{
	nk_pointwise_args_t A, B;
	memset(&A, 0, sizeof A);
	A.op = op;
	A.a = op == NK_OP_SOFTPLUS ? 1.5 : op == NK_OP_ELU ? 1.0 : 0.75;
	A.b = op == NK_OP_SOFTPLUS ? 20 : op == NK_OP_ELU ? 1.05 : 2.25;
	A.ia = ia;
	A.ib = 0;
	if (op == NK_OP_POW_SCALAR) A.a = (ia % 3 == 0) ? 2.0 : (ia % 3 == 1) ? 0.5 : 1.7;
	int nin = op_arity(op);
	A.it.ndim = ndim;
	A.it.nops = 1 + nin;
	A.it.shape[0] = d0;
	A.it.shape[1] = d1;
	int out_dt = is_pred(op) ? NK_BOOL : dt;
	tbuf_t bo = layout(&A.it, 0, out_dt, lay_out);
	tbuf_t bi[3];
	for (int i = 0; i < nin; i++) {
		int idt = (op == NK_OP_WHERE && i == 0) ? NK_BOOL : dt;
		bi[i] = layout(&A.it, 1 + i, idt, ndim ? lay_in[i] : L_CONTIG);
		int role = 0;
		if (i == 1 && (op == NK_OP_DIV_TRUNC || op == NK_OP_DIV_FLOOR || op == NK_OP_REMAINDER ||
			       op == NK_OP_FMOD))
			role = 1;
		if (i == 1 && (op == NK_OP_LSHIFT || op == NK_OP_RSHIFT || op == NK_OP_POW))
			role = 2;
		fill(bi[i].base, idt, (int64_t)(bi[i].bytes / nk_dtype_size(idt)), role);
		if (op == NK_OP_POW && i == 1 && !nk_is_float(dt))
			for (size_t j = 0; j < bi[i].bytes / nk_dtype_size(idt); j++)
				nk_store_i64(bi[i].base + j * nk_dtype_size(idt), idt, rnd() % 9 - 2);
	}
	B = A;
	tbuf_t bo2 = {malloc(bo.bytes), bo.bytes};
	memcpy(bo2.base, bo.base, bo.bytes);
	B.it.data[0] = bo2.base + (A.it.data[0] - bo.base);
	int rr = nk_pointwise_ref(&B);
	int rn = nk_pointwise_run(&A);
	CHECK((rr != 0) == (rn != 0), "op %d dtype %s: ref rc %d run rc %d", op, nk_dtype_name(dt), rr, rn);
	int supported = rr == 0;
	if (supported && rn == 0) {
		double rtol = 0, atol = 0;
		if (approx_op(op)) {
			rtol = (dt == NK_BF16 || dt == NK_F16) ? 2e-2 : 1e-5;
			atol = (dt == NK_BF16 || dt == NK_F16) ? 1e-3 : 1e-6;
		}
		size_t e = nk_dtype_size(out_dt);
		int bad = 0;
		for (size_t j = 0; j < bo.bytes / e && bad < 3; j++) {
			if (!close_elem(out_dt, bo.base + j * e, bo2.base + j * e, rtol, atol)) {
				bad++;
				CHECK(0, "op %d dtype %s layout %d ndim %d: element %zu run %.9g ref %.9g", op,
				      nk_dtype_name(dt), lay_out, ndim, j, nk_load_f64(bo.base + j * e, out_dt),
				      nk_load_f64(bo2.base + j * e, out_dt));
			}
		}
	}
	free(bo.base);
	free(bo2.base);
	for (int i = 0; i < nin; i++)
		free(bi[i].base);
	return supported;
}

/* ---- randomized run vs reference ------------------------------------------------------------------ */
static void test_all_ops_vs_ref(void)
{
	static const int dts[] = {NK_F32, NK_BF16, NK_F16, NK_F64, NK_I64, NK_I32, NK_I16, NK_I8, NK_U8, NK_BOOL};
	int supported = 0;
	for (int op = 0; op < NK_OP_COUNT; op++) {
		for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
			int dt = dts[t];
			int64_t ia = (op == NK_OP_CLAMP_TENSOR || op == NK_OP_CLAMP_SCALAR) ? 1 + rnd() % 3
				     : (op == NK_OP_GELU || op == NK_OP_GELU_BACKWARD || op == NK_OP_ELU_BACKWARD) ? rnd() % 2
				     : (op == NK_OP_POW_SCALAR) ? rnd() % 3 : (op == NK_OP_ADD || op == NK_OP_SUB) ? 2 : 0;
			if (op == NK_OP_CLAMP_TENSOR && ia != 3)
				ia = 3; /* nops 4 for this sweep; single bounds below */
			int lay[3] = {rnd() % L_NLAYOUT, rnd() % L_NLAYOUT, rnd() % L_NLAYOUT};
			supported += pw_case(op, dt, 2, 37, 5, rnd() % 4, lay, ia);
			int c3[3] = {L_CONTIG, L_CONTIG, L_CONTIG};
			pw_case(op, dt, 1, 1031, 1, L_CONTIG, c3, ia);
			pw_case(op, dt, 0, 1, 1, L_CONTIG, c3, ia);
			int lay2[3] = {L_BCAST0, L_NEG, L_TRANS};
			pw_case(op, dt, 2, 3, 300, L_PAD, lay2, ia);
		}
	}
	CHECK(supported > 500, "only %d op/dtype pairs supported", supported);
}

/* The op-specialised AVX-512 loops (4 vectors a step, then single vectors, then a masked tail) over
 * dense f32 at every length around their edges, alpha 1 (plain add/sub) and not: same values as the
 * reference (the exact ops bit for bit). */
static void test_dense_f32_lengths(void)
{
	static const int ops[] = {NK_OP_ADD, NK_OP_SUB, NK_OP_MUL, NK_OP_DIV, NK_OP_EXP, NK_OP_GELU, NK_OP_SILU,
				  NK_OP_GELU_BACKWARD, NK_OP_RELU, NK_OP_THRESHOLD_BACKWARD};
	enum { MAXN = 200 };
	float x[MAXN + 1], y[MAXN + 1], o1[MAXN + 1], o2[MAXN + 1];
	int bad = 0;
	for (int i = 0; i <= MAXN; i++) {
		x[i] = (float)(rnd() % 2000) / 250.0f - 4.0f;
		y[i] = (float)(rnd() % 2000) / 500.0f + 0.25f;
	}
	for (size_t k = 0; k < sizeof ops / sizeof ops[0] && !bad; k++)
		for (int n = 0; n <= MAXN && !bad; n++)
			for (int v = 0; v < 2 && !bad; v++) {
				int op = ops[k];
				bool exact = op == NK_OP_ADD || op == NK_OP_SUB || op == NK_OP_MUL || op == NK_OP_DIV ||
					     op == NK_OP_RELU || op == NK_OP_THRESHOLD_BACKWARD;
				bool unary = op == NK_OP_EXP || op == NK_OP_GELU || op == NK_OP_SILU || op == NK_OP_RELU;
				nk_pointwise_args_t A = {0};
				A.it.ndim = 1;
				A.it.nops = unary ? 2 : 3;
				A.it.shape[0] = n;
				A.it.data[0] = (char *)o1;
				A.it.data[1] = (char *)(x + v); /* v: misaligned by one element */
				A.it.data[2] = (char *)y;
				for (int j = 0; j < 3; j++) {
					A.it.strides[j][0] = 4;
					A.it.dtype[j] = NK_F32;
				}
				A.op = op;
				A.a = v ? 0.75 : 1.0;
				A.ia = v;
				o1[n] = o2[n] = 12345.0f;
				CHECK(nk_pointwise_run(&A) == 0, "run");
				A.it.data[0] = (char *)o2;
				CHECK(nk_pointwise_ref(&A) == 0, "ref");
				for (int i = 0; i < n && !bad; i++) {
					bool ok = exact ? o1[i] == o2[i]
							: fabsf(o1[i] - o2[i]) <= 1e-5f * (1 + fabsf(o2[i]));
					if (!ok) {
						bad = 1;
						CHECK(0, "op %d n %d v %d: [%d] %.9g vs ref %.9g", op, n, v, i, o1[i], o2[i]);
					}
				}
				if (o1[n] != 12345.0f) {
					bad = 1;
					CHECK(0, "op %d n %d: wrote past the end", op, n);
				}
			}
}

/* Large enough to split over the pool, for the hot ops. */
static void test_parallel_vs_ref(void)
{
	static const int ops[] = {NK_OP_ADD, NK_OP_MUL, NK_OP_GELU, NK_OP_EXP, NK_OP_WHERE, NK_OP_LT,
				  NK_OP_SILU_BACKWARD, NK_OP_DIV_FLOOR};
	static const int dts[] = {NK_F32, NK_BF16, NK_I64, NK_F64};
	for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
		for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
			int lay[3] = {L_CONTIG, L_BCAST1, L_TRANS};
			pw_case(ops[o], dts[t], 2, 1000, 67, L_CONTIG, lay, 0);
			int lay2[3] = {L_TRANS, L_CONTIG, L_CONTIG};
			pw_case(ops[o], dts[t], 2, 3, 40001, L_TRANS, lay2, 0);
		}
}

/* Outputs of 16 MiB and more take the non-temporal-store path (unaligned head, streamed body, tail). */
static void test_streamed_outputs(void)
{
	static const int ops[] = {NK_OP_ADD, NK_OP_GELU, NK_OP_SILU};
	int lay[3] = {L_CONTIG, L_CONTIG, L_CONTIG};
	for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
		pw_case(ops[o], NK_F32, 1, (4 << 20) + 13, 1, L_CONTIG, lay, 0);
}

/* ---- exact values ------------------------------------------------------------------------------------ */
/* out = op(x, y) for one element of dtype dt; returns the kernel's rc. */
static int one(int op, int dt, double x, double y, double a, int64_t ia, void *out, int out_dt)
{
	char bx[8], by[8];
	nk_store_f64(bx, dt, x);
	nk_store_f64(by, dt, y);
	nk_pointwise_args_t A;
	memset(&A, 0, sizeof A);
	A.op = op;
	A.a = a;
	A.ia = ia;
	A.it.ndim = 0;
	A.it.nops = 1 + op_arity(op);
	A.it.data[0] = out;
	A.it.dtype[0] = (int8_t)out_dt;
	A.it.data[1] = bx;
	A.it.dtype[1] = (int8_t)dt;
	A.it.data[2] = by;
	A.it.dtype[2] = (int8_t)dt;
	return nk_pointwise_run(&A);
}

static double one_f(int op, int dt, double x, double y, double a, int64_t ia)
{
	char o[8];
	CHECK(one(op, dt, x, y, a, ia, o, dt) == 0, "op %d failed", op);
	return nk_load_f64(o, dt);
}

static int64_t one_i(int op, int dt, int64_t x, int64_t y, int64_t ia)
{
	char bx[8], by[8], o[8];
	nk_store_i64(bx, dt, x);
	nk_store_i64(by, dt, y);
	nk_pointwise_args_t A;
	memset(&A, 0, sizeof A);
	A.op = op;
	A.a = (double)ia;
	A.ia = ia;
	A.it.nops = 1 + op_arity(op);
	A.it.data[0] = o;
	A.it.data[1] = bx;
	A.it.data[2] = by;
	A.it.dtype[0] = A.it.dtype[1] = A.it.dtype[2] = (int8_t)dt;
	CHECK(nk_pointwise_run(&A) == 0, "op %d failed", op);
	return nk_load_i64(o, dt);
}

static void test_integer_semantics(void)
{
	CHECK(one_i(NK_OP_REMAINDER, NK_I64, -3, 2, 0) == 1, " ");
	CHECK(one_i(NK_OP_REMAINDER, NK_I64, 3, -2, 0) == -1, " ");
	CHECK(one_i(NK_OP_FMOD, NK_I64, -3, 2, 0) == -1, " ");
	CHECK(one_i(NK_OP_DIV_FLOOR, NK_I64, -7, 2, 0) == -4, " ");
	CHECK(one_i(NK_OP_DIV_FLOOR, NK_I32, 7, -2, 0) == -4, " ");
	CHECK(one_i(NK_OP_DIV_FLOOR, NK_I64, -8, 2, 0) == -4, " ");
	CHECK(one_i(NK_OP_DIV_TRUNC, NK_I64, -7, 2, 0) == -3, " ");
	CHECK(one_i(NK_OP_DIV_TRUNC, NK_I64, INT64_MIN, -1, 0) == INT64_MIN, " ");
	int64_t big = ((int64_t)1 << 62) + 1;
	CHECK(one_i(NK_OP_ADD, NK_I64, big, 3, 1) == ((int64_t)1 << 62) + 4, "int64 add must be exact");
	CHECK(one_i(NK_OP_ADD, NK_I64, big, 3, 2) == ((int64_t)1 << 62) + 7, "alpha");
	CHECK(one_i(NK_OP_MUL, NK_I64, big, 1, 0) == big, " ");
	CHECK(one_i(NK_OP_ADD, NK_I64, INT64_MAX, 1, 1) == INT64_MIN, "wraps");
	CHECK(one_i(NK_OP_ADD, NK_I8, 127, 1, 1) == -128, "int8 wraps");
	CHECK(one_i(NK_OP_ADD, NK_U8, 255, 1, 1) == 0, "uint8 wraps");
	CHECK(one_i(NK_OP_POW, NK_I64, 3, 4, 0) == 81, " ");
	CHECK(one_i(NK_OP_POW, NK_I64, 2, -1, 0) == 0, " ");
	CHECK(one_i(NK_OP_POW, NK_I64, -1, -3, 0) == -1, " ");
	CHECK(one_i(NK_OP_LSHIFT, NK_I32, 1, 33, 0) == 0, " ");
	CHECK(one_i(NK_OP_LSHIFT, NK_I32, 3, 4, 0) == 48, " ");
	CHECK(one_i(NK_OP_RSHIFT, NK_I64, -8, 70, 0) == -1, " ");
	CHECK(one_i(NK_OP_RSHIFT, NK_I32, -8, 1, 0) == -4, " ");
	CHECK(one_i(NK_OP_BITWISE_NOT, NK_BOOL, 1, 0, 0) == 0, " ");
	CHECK(one_i(NK_OP_BITWISE_NOT, NK_I32, 5, 0, 0) == -6, " ");
	CHECK(one_i(NK_OP_ADD, NK_BOOL, 1, 1, 1) == 1, "bool add is or");
	CHECK(one_i(NK_OP_ABS, NK_I64, INT64_MIN, 0, 0) == INT64_MIN, " ");
	/* alpha given only as the double: still used for integer math */
	char bx[8], by[8], o[8];
	nk_store_i64(bx, NK_I64, 10);
	nk_store_i64(by, NK_I64, 3);
	nk_pointwise_args_t A;
	memset(&A, 0, sizeof A);
	A.op = NK_OP_SUB;
	A.a = 2.0;
	A.it.nops = 3;
	A.it.data[0] = o, A.it.data[1] = bx, A.it.data[2] = by;
	A.it.dtype[0] = A.it.dtype[1] = A.it.dtype[2] = NK_I64;
	CHECK(nk_pointwise_run(&A) == 0 && *(int64_t *)o == 4, " ");
}

static void test_float_semantics(void)
{
	CHECK(one_f(NK_OP_REMAINDER, NK_F32, -3, 2, 0, 0) == 1, " ");
	CHECK(one_f(NK_OP_REMAINDER, NK_F64, 3, -2, 0, 0) == -1, " ");
	CHECK(one_f(NK_OP_FMOD, NK_F32, -3, 2, 0, 0) == -1, " ");
	CHECK(one_f(NK_OP_DIV_FLOOR, NK_F32, -7, 2, 0, 0) == -4, " ");
	CHECK(one_f(NK_OP_DIV_FLOOR, NK_F64, 5.5, 0.5, 0, 0) == 11, " ");
	CHECK(one_f(NK_OP_DIV_FLOOR, NK_F64, -0.5, 3, 0, 0) == -1, " ");
	CHECK(isinf(one_f(NK_OP_DIV_FLOOR, NK_F32, 1, 0, 0, 0)), " ");
	CHECK(one_f(NK_OP_DIV_TRUNC, NK_F32, -7, 2, 0, 0) == -3, " ");
	CHECK(one_f(NK_OP_SIGN, NK_F32, NAN, 0, 0, 0) == 0, "sign(nan) = 0 as PyTorch");
	CHECK(isnan(one_f(NK_OP_MAXIMUM, NK_F32, NAN, 1, 0, 0)), " ");
	CHECK(one_f(NK_OP_FMAX, NK_F32, NAN, 1, 0, 0) == 1, " ");
	CHECK(one_f(NK_OP_ROUND, NK_F32, 2.5, 0, 0, 0) == 2 && one_f(NK_OP_ROUND, NK_F64, 1.5, 0, 0, 0) == 2, " ");
	CHECK(isnan(one_f(NK_OP_RELU, NK_F32, NAN, 0, 0, 0)), " ");
	CHECK(one_f(NK_OP_ADD, NK_F32, 1, 2, 0.5, 0) == 2, " ");
	CHECK(one_f(NK_OP_XLOGY, NK_F64, 0, 0, 0, 0) == 0, " ");
	CHECK(one_f(NK_OP_POW_SCALAR, NK_F32, 4, 0, 0.5, 0) == 2, " ");
	CHECK(one_f(NK_OP_RSUB_SCALAR, NK_F64, 1, 0, 5, 0) == 4, " ");
	/* PyTorch 2.13 CPU values */
	static const double xs[] = {-3, -1.5, -0.5, 0, 0.7, 2};
	static const double gelu[] = {-0.004050225019454956, -0.10021086037158966, -0.1542687714099884, 0,
				      0.5306254625320435, 1.9544997215270996};
	static const double gelut[] = {-0.0036374330520629883, -0.10042843222618103, -0.1542859971523285, 0,
				       0.5305701494216919, 1.9545977115631104};
	static const double silu[] = {-0.14227761328220367, -0.2736382782459259, -0.1887703388929367, 0,
				      0.46773141622543335, 1.7615940570831299};
	static const double mish[] = {-0.14564746618270874, -0.2980997562408447, -0.22074376046657562, 0,
				      0.5611483454704285, 1.9439589977264404};
	for (int i = 0; i < 6; i++) {
		CHECK(fabs(one_f(NK_OP_GELU, NK_F32, xs[i], 0, 0, 0) - gelu[i]) < 1e-6, "gelu(%g)", xs[i]);
		CHECK(fabs(one_f(NK_OP_GELU, NK_F32, xs[i], 0, 0, 1) - gelut[i]) < 1e-6, "gelu tanh(%g)", xs[i]);
		CHECK(fabs(one_f(NK_OP_SILU, NK_F32, xs[i], 0, 0, 0) - silu[i]) < 3e-7, "silu(%g)", xs[i]);
		CHECK(fabs(one_f(NK_OP_MISH, NK_F32, xs[i], 0, 0, 0) - mish[i]) < 3e-7, "mish(%g)", xs[i]);
	}
	CHECK(fabs(one_f(NK_OP_ERFINV, NK_F32, 0.3, 0, 0, 0) - 0.27246272563934326) < 1e-7, " ");
	CHECK(fabs(one_f(NK_OP_ERFINV, NK_F32, -0.9, 0, 0, 0) + 1.1630871295928955) < 1e-6, " ");
	/* comparisons write bool */
	uint8_t b = 7;
	CHECK(one(NK_OP_LT, NK_F32, 1, 2, 0, 0, &b, NK_BOOL) == 0 && b == 1, " ");
	CHECK(one(NK_OP_ISNAN, NK_BF16, NAN, 0, 0, 0, &b, NK_BOOL) == 0 && b == 1, " ");
	/* bf16 computes in float and rounds once, to nearest even */
	CHECK(one_f(NK_OP_ADD, NK_BF16, 1.0, 1.0 / 256, 1, 0) == 1.0, "tie rounds to even");
	CHECK(one_f(NK_OP_ADD, NK_BF16, 1.0, 3.0 / 256, 1, 0) == 1.0 + 1.0 / 64, "tie rounds to even (up)");
	CHECK(one_f(NK_OP_MUL, NK_F16, 300, 300, 0, 0) == INFINITY, "f16 overflow");
}

static void test_conversions(void)
{
	CHECK(nk_f32_to_bf16(1.0f) == 0x3f80, " ");
	CHECK(nk_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, " ");
	CHECK(nk_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82, " ");
	CHECK(nk_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81, " ");
	CHECK(nk_f32_to_bf16(NAN) == 0x7fc0, " ");
	CHECK(nk_f32_to_bf16(3.4e38f) == 0x7f80, "rounds to inf");
	CHECK(nk_f32_to_f16(65519.0f) == 0x7bff && nk_f32_to_f16(65520.0f) == 0x7c00, " ");
	CHECK(nk_f32_to_f16(0x1p-24f) == 0x0001 && nk_f32_to_f16(0x1p-25f) == 0 && nk_f32_to_f16(3 * 0x1p-25f) == 2, " ");
	CHECK(nk_f32_to_f16(-2.0f) == 0xc000 && (nk_f32_to_f16(NAN) & 0x7fff) == 0x7e00, " ");
	/* every f16 and bf16 survives the round trip through f32 */
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = nk_f16_to_f32((uint16_t)h);
		if (f == f && nk_f32_to_f16(f) != h) bad++;
		float g = nk_bf16_to_f32((uint16_t)h);
		if (g == g && nk_f32_to_bf16(g) != h) bad++;
	}
	CHECK(bad == 0, "%d round-trip failures", bad);
	CHECK(nk_f16_to_f32(0x0001) == 0x1p-24f && nk_f16_to_f32(0x3c00) == 1.0f, " ");
	/* casts to integers as PyTorch CPU (x86) */
	uint8_t u8;
	int8_t i8;
	int32_t i32;
	nk_store_f64(&u8, NK_U8, 300.0); CHECK(u8 == 44, " ");
	nk_store_f64(&u8, NK_U8, -1.0); CHECK(u8 == 255, " ");
	nk_store_f64(&i8, NK_I8, 3e9); CHECK(i8 == 0, " ");
	nk_store_f64(&i32, NK_I32, NAN); CHECK(i32 == INT32_MIN, " ");
	nk_store_f64(&i32, NK_I32, -2.9); CHECK(i32 == -2, " ");
}

/* AVX-512 bf16 conversions agree with the scalar ones (when the CPU has them). */
static void test_bf16_blocks(void)
{
	enum { N = 1000 };
	float f[N], back[N];
	uint16_t h[N], h2[N];
	for (int i = 0; i < N; i++) {
		uint32_t u = rnd();
		memcpy(&f[i], &u, 4);
	}
	nk_block_store_f32((char *)h, 2, NK_BF16, f, N - 3);
	for (int i = 0; i < N - 3; i++) h2[i] = nk_f32_to_bf16(f[i]);
	CHECK(memcmp(h, h2, (N - 3) * 2) == 0, " ");
	nk_block_load_f32(back, (const char *)h, 2, NK_BF16, N - 3);
	int bad = 0;
	for (int i = 0; i < N - 3; i++) bad += memcmp(&back[i], &(float){nk_bf16_to_f32(h[i])}, 4) != 0;
	CHECK(bad == 0, " ");
}

static void test_errors(void)
{
	char o[8];
	nrt_kernel_fail_clear();
	CHECK(one(NK_OP_BITWISE_AND, NK_F32, 1, 2, 0, 0, o, NK_F32) != 0, " ");
	CHECK(strstr(nrt_kernel_fail_message(), "bitwise_and") && strstr(nrt_kernel_fail_message(), "float32"),
	      "message: %s", nrt_kernel_fail_message());
	CHECK(one(NK_OP_EXP, NK_I64, 1, 0, 0, 0, o, NK_I64) != 0, " ");
	CHECK(one(NK_OP_SUB, NK_BOOL, 1, 0, 0, 0, o, NK_BOOL) != 0, " ");
	/* integer division by zero, also from the pool */
	enum { N = 100000 };
	int64_t *x = calloc(N, 8), *y = calloc(N, 8), *z = calloc(N, 8);
	for (int i = 0; i < N; i++) { x[i] = i; y[i] = 1 + i % 7; }
	y[N - 5] = 0;
	nk_pointwise_args_t A;
	memset(&A, 0, sizeof A);
	A.op = NK_OP_DIV_FLOOR;
	A.it.ndim = 1;
	A.it.nops = 3;
	A.it.shape[0] = N;
	A.it.data[0] = (char *)z, A.it.data[1] = (char *)x, A.it.data[2] = (char *)y;
	for (int k = 0; k < 3; k++) { A.it.dtype[k] = NK_I64; A.it.strides[k][0] = 8; }
	nrt_kernel_fail_clear();
	CHECK(nk_pointwise_run(&A) != 0, " ");
	CHECK(strstr(nrt_kernel_fail_message(), "ZeroDivisionError") != NULL, "%s", nrt_kernel_fail_message());
	CHECK(nk_pointwise_ref(&A) != 0, " ");
	A.op = NK_OP_REMAINDER;
	CHECK(nk_pointwise_run(&A) != 0, " ");
	/* zero-size: nothing happens, null data is fine */
	A.op = NK_OP_ADD;
	A.it.shape[0] = 0;
	A.it.data[0] = A.it.data[1] = A.it.data[2] = NULL;
	CHECK(nk_pointwise_run(&A) == 0 && nk_pointwise_ref(&A) == 0, " ");
	A.it.nops = 2;
	CHECK(nk_pointwise_run(&A) != 0, "add with 2 operands");
	free(x), free(y), free(z);
}

static void test_fill_clamp_single_bound(void)
{
	float out[10], x[10], lo[10];
	for (int i = 0; i < 10; i++) { x[i] = (float)i - 5; lo[i] = 0; }
	x[3] = NAN;
	nk_pointwise_args_t A;
	memset(&A, 0, sizeof A);
	A.op = NK_OP_CLAMP_TENSOR;
	A.ia = 1;
	A.it.ndim = 1;
	A.it.nops = 3;
	A.it.shape[0] = 10;
	A.it.data[0] = (char *)out, A.it.data[1] = (char *)x, A.it.data[2] = (char *)lo;
	for (int k = 0; k < 3; k++) { A.it.dtype[k] = NK_F32; A.it.strides[k][0] = 4; }
	CHECK(nk_pointwise_run(&A) == 0, " ");
	CHECK(out[0] == 0 && out[9] == 4 && isnan(out[3]), " ");
	A.op = NK_OP_FILL;
	A.a = 2.5;
	A.it.nops = 1;
	CHECK(nk_pointwise_run(&A) == 0 && out[7] == 2.5f, " ");
}

/* ---- copy ----------------------------------------------------------------------------------------- */
static void copy_case(int dd, int sd, int64_t d0, int64_t d1, int lo, int li)
{
	nk_iter_t A;
	memset(&A, 0, sizeof A);
	A.ndim = 2;
	A.nops = 2;
	A.shape[0] = d0;
	A.shape[1] = d1;
	tbuf_t o = layout(&A, 0, dd, lo);
	tbuf_t i = layout(&A, 1, sd, li);
	fill(i.base, sd, (int64_t)(i.bytes / nk_dtype_size(sd)), 0);
	nk_iter_t B = A;
	tbuf_t o2 = {calloc(1, o.bytes), o.bytes};
	B.data[0] = o2.base + (A.data[0] - o.base);
	CHECK(nk_copy_run(&A) == 0 && nk_copy_ref(&B) == 0, " ");
	size_t e = nk_dtype_size(dd);
	int bad = 0;
	for (size_t j = 0; j < o.bytes / e; j++)
		bad += memcmp(o.base + j * e, o2.base + j * e, e) != 0;
	CHECK(bad == 0, "copy %s <- %s layouts %d %d: %d mismatches", nk_dtype_name(dd), nk_dtype_name(sd), lo,
	      li, bad);
	free(o.base), free(o2.base), free(i.base);
}

static void test_copy(void)
{
	for (int dd = 0; dd < NK_NDTYPES; dd++)
		for (int sd = 0; sd < NK_NDTYPES; sd++) {
			copy_case(dd, sd, 37, 5, rnd() % 4, rnd() % L_NLAYOUT);
			copy_case(dd, sd, 600, 3, L_CONTIG, L_CONTIG);
		}
	copy_case(NK_F32, NK_BF16, 1000, 70, L_CONTIG, L_CONTIG);
	copy_case(NK_BF16, NK_F32, 70, 1000, L_TRANS, L_CONTIG);
	copy_case(NK_F32, NK_F32, 50000, 2, L_CONTIG, L_NEG);
	copy_case(NK_I64, NK_F64, 50000, 2, L_PAD, L_CONTIG);
	/* known casts */
	float f[4] = {2.9f, -2.9f, 0.0f, NAN};
	int64_t q[4];
	uint8_t bo[4];
	nk_iter_t A;
	memset(&A, 0, sizeof A);
	A.ndim = 1, A.nops = 2, A.shape[0] = 4;
	A.data[0] = (char *)q, A.data[1] = (char *)f;
	A.dtype[0] = NK_I64, A.dtype[1] = NK_F32;
	A.strides[0][0] = 8, A.strides[1][0] = 4;
	CHECK(nk_copy_run(&A) == 0 && q[0] == 2 && q[1] == -2 && q[2] == 0 && q[3] == INT64_MIN, " ");
	A.data[0] = (char *)bo, A.dtype[0] = NK_BOOL, A.strides[0][0] = 1;
	CHECK(nk_copy_run(&A) == 0 && bo[0] == 1 && bo[2] == 0 && bo[3] == 1, " ");
	int64_t big = ((int64_t)1 << 53) + 1;
	double d;
	A.data[0] = (char *)&d, A.dtype[0] = NK_F64, A.data[1] = (char *)&big, A.dtype[1] = NK_I64;
	A.shape[0] = 1;
	CHECK(nk_copy_run(&A) == 0 && d == 9007199254740992.0, " ");
	nk_iter_t bad = A;
	bad.nops = 3;
	CHECK(nk_copy_run(&bad) != 0, " ");
}

static void test_reference_switch(void)
{
	bool was = nk_using_reference();
	nk_force_reference(true);
	CHECK(nk_using_reference(), " ");
	CHECK(one_f(NK_OP_ADD, NK_F32, 1, 2, 1, 0) == 3, " ");
	nk_force_reference(false);
	CHECK(!nk_using_reference(), " ");
	nk_force_reference(was);
	CHECK(nk_dtype_size(NK_BF16) == 2 && nk_dtype_size(NK_F64) == 8 && nk_dtype_size(99) == 0, " ");
	CHECK(strcmp(nk_dtype_name(NK_F32), "float32") == 0, " ");
}

/* The same tests on the portable optimized paths (NEURON_KERNELS=portable disables the AVX-512 ones),
 * in a child process: the choice is made once per process. */
static const char *self_exe;

/* op(x, y) in f32 by the element-at-a-time reference (nk_pointwise_ref: the scalar formulas whatever
 * level is in force). */
static float one_ref_f32(int op, float x, float y, int64_t ia)
{
	float o = 0;
	nk_pointwise_args_t A;

	memset(&A, 0, sizeof A);
	A.op = op;
	A.ia = ia;
	A.it.nops = 1 + op_arity(op);
	A.it.data[0] = (char *)&o;
	A.it.data[1] = (char *)&x;
	A.it.data[2] = (char *)&y;
	A.it.dtype[0] = A.it.dtype[1] = A.it.dtype[2] = NK_F32;
	CHECK(nk_pointwise_ref(&A) == 0, "ref op %d failed", op);
	return o;
}

/* The AVX2 transcendental loops against the scalar formulas (a few ulp: the Cephes exp and tanh, the
 * A-S erf) over every tail length, and bit for bit against pointwise_avx512.c's generic loops for the
 * ops both compute with the same formulas (exp, tanh, sigmoid), where the CPU has AVX-512. */
static void test_avx2_loops(void)
{
	static const int ops[] = { NK_OP_EXP, NK_OP_TANH, NK_OP_SIGMOID, NK_OP_SILU, NK_OP_GELU, NK_OP_GELU_BACKWARD,
				   NK_OP_SILU_BACKWARD };
	static const int64_t ias[] = { 0, 0, 0, 0, 1, 1, 0 };
	float x[80], y[80], o[80], o2[80];

	__builtin_cpu_init();
	if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
		return;
	bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
	for (size_t q = 0; q < sizeof ops / sizeof ops[0]; q++)
		for (int n = 0; n <= 75; n++) {
			int op = ops[q];
			bool ok = true, same = true;

			for (int i = 0; i < 80; i++)
				x[i] = (float)((i * 37 % 97) - 48) / 6.0f, y[i] = (float)((i * 53 % 89) - 44) / 7.0f, o[i] = o2[i] = 99;
			x[3] = NAN, x[5] = INFINITY, x[7] = -INFINITY, x[9] = -0.0f;
			CHECK(nk_pointwise_f32_avx2(op, ias[q], o, x, y, n), "op %d handled", op);
			for (int i = 0; i < n; i++) {
				float r = one_ref_f32(op, x[i], y[i], ias[q]);
				/* the backward ops: an absolute error relative to the incoming gradient x (the tanh
				 * form's 1 + tanh cancels where tanh is near -1, in every f32 formula) */
				bool bwd = op == NK_OP_GELU_BACKWARD || op == NK_OP_SILU_BACKWARD;
				float atol = 2e-7f * (bwd && isfinite(x[i]) ? 1 + fabsf(x[i]) : 1);

				ok &= isnan(r) ? isnan(o[i]) : (isinf(r) ? o[i] == r : fabsf(o[i] - r) <= 2e-6f * fabsf(r) + atol);
			}
			for (int i = n; i < 80; i++)
				ok &= o[i] == 99; /* nothing past n */
			CHECK(ok, "avx2 op %d ia %lld n=%d", op, (long long)ias[q], n);
			if (avx512 && (op == NK_OP_EXP || op == NK_OP_TANH || op == NK_OP_SIGMOID)) {
				nk_pointwise_f32_avx512(op, 1, 0, ias[q], o2, x, y, NULL, n, false);
				for (int i = 0; i < n; i++)
					same &= isnan(o[i]) ? isnan(o2[i]) : o[i] == o2[i];
				CHECK(same, "avx2 vs avx512 op %d n=%d", op, n);
			}
		}
	CHECK(!nk_pointwise_f32_avx2(NK_OP_ADD, 0, o, x, y, 8), "other ops are left to pointwise.c");
	CHECK(!nk_pointwise_f32_avx2(NK_OP_GELU, 0, o, x, y, 8) && !nk_pointwise_f32_avx2(NK_OP_GELU_BACKWARD, 0, o, x, y, 8),
	      "gelu's erf form is left to the scalar path");
}

static void test_portable_paths(void)
{
	if (getenv("NEURON_KERNELS"))
		return; /* already a variant run */
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "NEURON_KERNELS=portable '%s' > /dev/null", self_exe);
	CHECK(system(cmd) == 0, "%s with NEURON_KERNELS=portable failed", self_exe);
}

int main(int argc, char **argv)
{
	(void)argc;
	self_exe = argv[0];
	RUN(test_conversions);
	RUN(test_bf16_blocks);
	RUN(test_integer_semantics);
	RUN(test_float_semantics);
	RUN(test_errors);
	RUN(test_fill_clamp_single_bound);
	RUN(test_all_ops_vs_ref);
	RUN(test_dense_f32_lengths);
	RUN(test_parallel_vs_ref);
	RUN(test_streamed_outputs);
	RUN(test_copy);
	RUN(test_avx2_loops);
	RUN(test_reference_switch);
	RUN(test_portable_paths);
	return ctest_finish();
}
