/* test_attention.c - tiled attention forward/backward against the row-at-a-time reference for f32,
 * bf16, f16: odd lengths (several blocks), causal, bool and float masks with broadcast strides, GQA,
 * dropout, [B,T,H,D] layouts, fully masked rows; the reference backward against central differences
 * in f64 (with mask, causal, GQA and dropout). */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"
#include "nk_attention_impl.h"
#include "nk_impl.h"

typedef struct {
	int64_t B, Hq, Hkv, Tq, Tk, D, Dv;
	bool causal;
	int mask; /* 0 none, 1 bool (broadcast over heads), 2 float (broadcast over batch), 3 bool padding */
	double p;
	bool bthd; /* [B, T, H, D] storage */
} acase_t;

typedef struct {
	nk_attention_bwd_args_t g;
	void *bufs[12];
	int nbufs;
} aprob_t;

static void strides_of(int64_t B, int64_t H, int64_t T, int64_t D, bool bthd, int64_t *s)
{
	(void)B;
	if (bthd)
		s[0] = T * H * D, s[1] = D, s[2] = H * D, s[3] = 1;
	else
		s[0] = H * T * D, s[1] = T * D, s[2] = D, s[3] = 1;
}

static void *buf(aprob_t *pb, int dtype, int64_t n)
{
	void *p = nkt_alloc(dtype, n);

	pb->bufs[pb->nbufs++] = p;
	return p;
}

/* Random problem: q, k, v, dout, mask; out, lse, dq, dk, dv allocated. */
static void make_problem(aprob_t *pb, int dtype, acase_t c)
{
	nk_attention_args_t *a = &pb->g.f;
	int64_t nq = c.B * c.Hq * c.Tq * c.D, nk = c.B * c.Hkv * c.Tk * c.D, nv = c.B * c.Hkv * c.Tk * c.Dv;
	int64_t no = c.B * c.Hq * c.Tq * c.Dv;

	memset(pb, 0, sizeof *pb);
	*a = (nk_attention_args_t){ .dtype = dtype, .B = c.B, .Hq = c.Hq, .Hkv = c.Hkv, .Tq = c.Tq, .Tk = c.Tk,
				    .D = c.D, .Dv = c.Dv, .scale = 1.0 / sqrt((double)c.D), .dropout_p = c.p,
				    .causal = c.causal, .seed = 1234, .offset = 40 };
	a->q = buf(pb, dtype, nq), a->k = buf(pb, dtype, nk), a->v = buf(pb, dtype, nv);
	a->out = buf(pb, dtype, no), a->lse = buf(pb, NK_F32, c.B * c.Hq * c.Tq);
	pb->g.dout = buf(pb, dtype, no);
	pb->g.dq = buf(pb, dtype, nq), pb->g.dk = buf(pb, dtype, nk), pb->g.dv = buf(pb, dtype, nv);
	strides_of(c.B, c.Hq, c.Tq, c.D, c.bthd, a->sq);
	strides_of(c.B, c.Hkv, c.Tk, c.D, c.bthd, a->sk);
	strides_of(c.B, c.Hkv, c.Tk, c.Dv, c.bthd, a->sv);
	strides_of(c.B, c.Hq, c.Tq, c.Dv, c.bthd, a->so);
	memcpy(pb->g.sdo, a->so, sizeof a->so);
	memcpy(pb->g.sdq, a->sq, sizeof a->sq);
	memcpy(pb->g.sdk, a->sk, sizeof a->sk);
	memcpy(pb->g.sdv, a->sv, sizeof a->sv);
	nkt_fill((void *)a->q, dtype, nq, -1.5, 1.5);
	nkt_fill((void *)a->k, dtype, nk, -1.5, 1.5);
	nkt_fill((void *)a->v, dtype, nv, -1, 1);
	nkt_fill((void *)pb->g.dout, dtype, no, -1, 1);
	if (c.mask == 1) { /* bool [B, 1, Tq, Tk] */
		uint8_t *m = buf(pb, NK_F64, c.B * c.Tq * c.Tk);

		for (int64_t i = 0; i < c.B * c.Tq * c.Tk; i++)
			m[i] = nkt_uniform(0, 1) > 0.2;
		if (c.Tq > 1) /* a fully masked row */
			memset(m + c.Tk, 0, (size_t)c.Tk);
		a->mask = m, a->mask_dtype = NK_BOOL;
		a->smask[0] = c.Tq * c.Tk, a->smask[1] = 0, a->smask[2] = c.Tk, a->smask[3] = 1;
	} else if (c.mask == 3) { /* bool padding mask [B, 1, 1, Tk]: the last keys of batch 0 hidden */
		uint8_t *m = buf(pb, NK_F64, c.B * c.Tk);

		for (int64_t i = 0; i < c.B * c.Tk; i++)
			m[i] = !(i < c.Tk && i > c.Tk / 2);
		a->mask = m, a->mask_dtype = NK_BOOL;
		a->smask[0] = c.Tk, a->smask[1] = 0, a->smask[2] = 0, a->smask[3] = 1;
	} else if (c.mask == 2) { /* float [1, Hq, Tq, Tk] of the problem's dtype */
		int64_t n = c.Hq * c.Tq * c.Tk;
		void *m = buf(pb, dtype, n);

		nkt_fill(m, dtype, n, -2, 0.5);
		for (int64_t i = 0; i < n; i += 7)
			nk_fp_stored(m, dtype, i, -INFINITY);
		a->mask = m, a->mask_dtype = dtype;
		a->smask[0] = 0, a->smask[1] = c.Tq * c.Tk, a->smask[2] = c.Tk, a->smask[3] = 1;
	}
}

static void free_problem(aprob_t *pb)
{
	for (int i = 0; i < pb->nbufs; i++)
		free(pb->bufs[i]);
}

static void tol_of(int dtype, double *atol, double *rtol)
{
	switch (dtype) {
	case NK_F32: *atol = 2e-5, *rtol = 1e-4; break;
	case NK_BF16: *atol = 2e-2, *rtol = 1.0 / 64; break;
	case NK_F16: *atol = 3e-3, *rtol = 1.0 / 256; break;
	default: *atol = 1e-12, *rtol = 1e-12; break;
	}
}

/* Copies an output of the problem aside. */
static void *snap(const void *p, int dtype, int64_t n)
{
	void *c = nkt_alloc(dtype, n);

	memcpy(c, p, (size_t)n * nk_fp_elem_size(dtype));
	return c;
}

static void poison(void *p, int dtype, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		nk_fp_stored(p, dtype, i, NAN);
}

static void check_case(int dtype, acase_t c)
{
	aprob_t pb;
	nk_attention_args_t *a = &pb.g.f;
	int64_t nq, nk, nv, no, nl;
	void *out0, *lse0, *dq0, *dk0, *dv0;
	double atol, rtol, e[5];

	make_problem(&pb, dtype, c);
	nq = c.B * c.Hq * c.Tq * c.D, nk = c.B * c.Hkv * c.Tk * c.D, nv = c.B * c.Hkv * c.Tk * c.Dv;
	no = c.B * c.Hq * c.Tq * c.Dv, nl = c.B * c.Hq * c.Tq;
	tol_of(dtype, &atol, &rtol);
	CHECK(nk_attention_ref(a) == 0, "attention ref");
	out0 = snap(a->out, dtype, no), lse0 = snap(a->lse, NK_F32, nl);
	CHECK(nk_attention_bwd_ref(&pb.g) == 0, "attention bwd ref");
	dq0 = snap(pb.g.dq, dtype, nq), dk0 = snap(pb.g.dk, dtype, nk), dv0 = snap(pb.g.dv, dtype, nv);

	/* outputs the optimized path fails to write stay NaN and fail the comparison */
	poison(a->out, dtype, no), poison(a->lse, NK_F32, nl);
	poison(pb.g.dq, dtype, nq), poison(pb.g.dk, dtype, nk), poison(pb.g.dv, dtype, nv);
	CHECK(nk_attention_run(a) == 0, "attention run");
	e[0] = nkt_err(a->out, out0, dtype, no, atol, rtol);
	e[1] = nkt_err(a->lse, lse0, NK_F32, nl, 1e-5, 1e-5);
	/* the backward reads out and lse: give it the optimized ones */
	CHECK(nk_attention_bwd_run(&pb.g) == 0, "attention bwd run");
	e[2] = nkt_err(pb.g.dq, dq0, dtype, nq, 10 * atol, 10 * rtol);
	e[3] = nkt_err(pb.g.dk, dk0, dtype, nk, 10 * atol, 10 * rtol);
	e[4] = nkt_err(pb.g.dv, dv0, dtype, nv, 10 * atol, 10 * rtol);
	CHECK(e[0] <= 1 && e[1] <= 1 && e[2] <= 1 && e[3] <= 1 && e[4] <= 1,
	      "attention %s B=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld D=%lld Dv=%lld causal=%d mask=%d p=%g bthd=%d: "
	      "err out %g lse %g dq %g dk %g dv %g",
	      nkt_dtype_name(dtype), (long long)c.B, (long long)c.Hq, (long long)c.Hkv, (long long)c.Tq,
	      (long long)c.Tk, (long long)c.D, (long long)c.Dv, c.causal, c.mask, c.p, c.bthd, e[0], e[1], e[2],
	      e[3], e[4]);
	free(out0), free(lse0), free(dq0), free(dk0), free(dv0);
	free_problem(&pb);
}

static const acase_t cases[] = {
	{ 1, 1, 1, 1, 1, 8, 8, false, 0, 0, false },
	{ 2, 2, 2, 7, 7, 16, 16, true, 0, 0, false },
	{ 1, 4, 2, 33, 33, 32, 24, true, 0, 0, true },
	{ 2, 2, 1, 100, 70, 64, 64, false, 1, 0, false },
	{ 1, 2, 2, 130, 130, 64, 32, true, 2, 0, true },
	{ 1, 3, 1, 65, 129, 40, 48, false, 2, 0, false },
	{ 2, 2, 2, 40, 33, 16, 16, true, 1, 0.25, false },
	{ 1, 2, 1, 70, 70, 32, 32, false, 0, 0.1, true },
	{ 1, 1, 1, 200, 30, 8, 8, true, 0, 0, false }, /* Tq > Tk, causal */
	{ 1, 2, 1, 300, 290, 64, 64, false, 0, 0, false }, /* several query and key tiles */
	{ 2, 4, 4, 257, 257, 72, 40, true, 0, 0, true },   /* causal, D and Dv not multiples of 14 or 16 */
	/* B*Hkv >= 8: the one-pass backward (dq from the kv tasks) */
	{ 2, 4, 4, 40, 33, 16, 16, true, 1, 0.25, false },
	{ 4, 4, 2, 100, 90, 64, 48, false, 2, 0, true },
	{ 2, 4, 4, 70, 75, 32, 32, false, 3, 0, false },
	{ 1, 2, 2, 70, 75, 32, 32, true, 3, 0, true },
	{ 1, 1, 1, 5, 700, 17, 3, false, 2, 0, false },
	{ 1, 2, 1, 10, 250, 256, 256, false, 2, 0, false }, /* several packed key chunks and dk/dv key groups */
	{ 1, 1, 1, 20, 300, 160, 96, false, 1, 0.1, false },
	{ 1, 1, 1, 0, 5, 8, 8, false, 0, 0, false },       /* zero-size */
	{ 1, 1, 1, 5, 0, 8, 8, false, 0, 0, false },
	{ 2, 4, 4, 5, 0, 8, 8, true, 0, 0, false }, /* no keys with B*Hkv >= 8: dq is 0 */
	{ 0, 2, 2, 5, 5, 8, 8, true, 0, 0, false },
};

static void test_attention_vs_ref(void)
{
	static const int dts[] = { NK_F32, NK_BF16, NK_F16 };

	for (int d = 0; d < 3; d++)
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			acase_t c = cases[i];

			if (NK_TEST_SMALL && c.Tq * c.Tk * c.D > 2000000)
				continue;
			check_case(dts[d], c);
		}
}

/* The tiled path with the portable micro-kernel and tile ops against one ISA's (AVX-512 with the context's
 * GEMM table, AVX2 + FMA with its own), where the CPU has it. */
static void check_tiled_ref_vs(const char *name, const nk_gemm_isa_t *opt, const nk_attops_t *ops)
{
	static const int dts[] = { NK_F32, NK_BF16 };

	for (int d = 0; d < 2; d++)
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			acase_t c = cases[i];
			aprob_t pb;
			nk_attention_args_t *a = &pb.g.f;
			int dt = dts[d];
			int64_t nq = c.B * c.Hq * c.Tq * c.D, nk = c.B * c.Hkv * c.Tk * c.D, nv = c.B * c.Hkv * c.Tk * c.Dv;
			int64_t no = c.B * c.Hq * c.Tq * c.Dv, nl = c.B * c.Hq * c.Tq;
			void *o0, *l0, *q0, *k0, *v0;
			double atol, rtol, e[5];

			if (NK_TEST_SMALL && c.Tq * c.Tk * c.D > 2000000)
				continue;
			make_problem(&pb, dt, c);
			tol_of(dt, &atol, &rtol);
			CHECK(nk_attention_tiled(a, &nk_gemm_isa_ref, &nk_attops_ref) == 0, "tiled ref");
			CHECK(nk_attention_bwd_tiled(&pb.g, &nk_gemm_isa_ref, &nk_attops_ref) == 0, "tiled bwd ref");
			o0 = snap(a->out, dt, no), l0 = snap(a->lse, NK_F32, nl);
			q0 = snap(pb.g.dq, dt, nq), k0 = snap(pb.g.dk, dt, nk), v0 = snap(pb.g.dv, dt, nv);
			CHECK(nk_attention_tiled(a, opt, ops) == 0, "tiled %s", name);
			CHECK(nk_attention_bwd_tiled(&pb.g, opt, ops) == 0, "tiled bwd %s", name);
			e[0] = nkt_err(a->out, o0, dt, no, atol, rtol);
			e[1] = nkt_err(a->lse, l0, NK_F32, nl, 1e-5, 1e-5);
			e[2] = nkt_err(pb.g.dq, q0, dt, nq, atol, rtol);
			e[3] = nkt_err(pb.g.dk, k0, dt, nk, atol, rtol);
			e[4] = nkt_err(pb.g.dv, v0, dt, nv, atol, rtol);
			CHECK(e[0] <= 1 && e[1] <= 1 && e[2] <= 1 && e[3] <= 1 && e[4] <= 1,
			      "tiled ref vs %s %s case %zu: err out %g lse %g dq %g dk %g dv %g", name, nkt_dtype_name(dt), i,
			      e[0], e[1], e[2], e[3], e[4]);
			free(o0), free(l0), free(q0), free(k0), free(v0);
			free_problem(&pb);
		}
}

static void test_attention_tiled_ref_vs_opt(void)
{
	if (nk_cpu_avx512()) {
		nk_gemm_isa_t opt = nk_gemm_isa_select();

		check_tiled_ref_vs("avx512", &opt, &nk_attops_avx512);
	}
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		check_tiled_ref_vs("avx2", &nk_gemm_isa_avx2, &nk_attops_avx2);
}

/* The bf16 pair conversions of the tile ops (probabilities and dS for the sbgemm products): portable
 * and AVX-512 bit for bit, rounding ties, NaN, infinities and subnormals included, every row count
 * and (A panels) column count. */
static void test_attention_pair_tiles(void)
{
	enum { ROWS = 3 * NK_GEMM_MR + 5 };
	float X[ROWS * NK_ATT_W];
	uint32_t r[ROWS * NK_ATT_W + 64], o[ROWS * NK_ATT_W + 64];

	if (!nk_cpu_avx512())
		return;
	for (int i = 0; i < ROWS * NK_ATT_W; i++) {
		float v = (float)nkt_uniform(-4, 4);
		uint32_t u;
		switch (i % 11) {
		case 3: v = NAN; break;
		case 5: v = -INFINITY; break;
		case 7: v = 1e-40f; break; /* subnormal */
		case 9: /* a tie: the low 16 bits 0x8000 */
			memcpy(&u, &v, 4);
			u = (u & 0xffff0000u) | 0x8000u;
			memcpy(&v, &u, 4);
			break;
		default: break;
		}
		X[i] = v;
	}
	for (int64_t n = 1; n <= ROWS; n++) {
		memset(r, 0xab, sizeof r), memset(o, 0xab, sizeof o);
		nk_att_b_pairs_ref(X, n, r);
		nk_att_b_pairs_avx512(X, n, o);
		CHECK(!memcmp(r, o, (size_t)((n + 1) / 2 * NK_ATT_W) * 4), "b_pairs n=%lld", (long long)n);
		CHECK(r[(n - 1) / 2 * NK_ATT_W] == (nk_f32_to_bf16(X[(n - 1) / 2 * 2 * NK_ATT_W]) |
						     (n % 2 ? 0u : (uint32_t)nk_f32_to_bf16(X[((n - 1) / 2 * 2 + 1) * NK_ATT_W]) << 16)),
		      "b_pairs n=%lld: last pair", (long long)n);
		for (int64_t nc = 1; nc <= NK_ATT_W; nc += (nc < 17 ? 1 : 5)) {
			int64_t words = (n + NK_GEMM_MR - 1) / NK_GEMM_MR * NK_GEMM_MR * (NK_ATT_W / 2);
			memset(r, 0xab, sizeof r), memset(o, 0xab, sizeof o);
			nk_att_a_pairs_ref(X, n, nc, r);
			nk_att_a_pairs_avx512(X, n, nc, o);
			CHECK(!memcmp(r, o, (size_t)words * 4), "a_pairs n=%lld nc=%lld", (long long)n, (long long)nc);
		}
	}
}

/* Fully masked rows: output 0, lse -inf, no NaN in gradients. */
static void test_attention_masked_rows(void)
{
	acase_t c = { 1, 1, 1, 4, 5, 8, 8, false, 1, 0, false };
	aprob_t pb;
	const float *lse, *out, *dq;
	bool ok = true;

	make_problem(&pb, NK_F32, c);
	CHECK(nk_attention_run(&pb.g.f) == 0 && nk_attention_bwd_run(&pb.g) == 0, "run");
	lse = pb.g.f.lse, out = pb.g.f.out, dq = pb.g.dq;
	CHECK(isinf(lse[1]) && lse[1] < 0, "masked row lse = -inf, got %g", lse[1]);
	for (int d = 0; d < 8; d++)
		ok &= out[8 + d] == 0 && dq[8 + d] == 0;
	for (int i = 0; i < 4 * 8; i++)
		ok &= !isnan(out[i]) && !isnan(dq[i]);
	CHECK(ok, "masked row gives 0 output and gradient");
	free_problem(&pb);
}

/* L = sum(dout * out); numerical gradients of the reference forward against its backward (f64). */
static double att_loss(aprob_t *pb, int64_t no)
{
	double s = 0;

	nk_attention_ref(&pb->g.f);
	for (int64_t i = 0; i < no; i++)
		s += ((const double *)pb->g.f.out)[i] * ((const double *)pb->g.dout)[i];
	return s;
}

static void check_numerical(const void *grad, void *x, int64_t n, aprob_t *pb, int64_t no, const char *what, acase_t c)
{
	double *xs = x, h = 1e-6;
	const double *gr = grad;
	bool ok = true;

	for (int64_t i = 0; i < n; i++) {
		double s = xs[i], lp, lm;

		xs[i] = s + h;
		lp = att_loss(pb, no);
		xs[i] = s - h;
		lm = att_loss(pb, no);
		xs[i] = s;
		ok &= fabs((lp - lm) / (2 * h) - gr[i]) < 1e-6;
	}
	CHECK(ok, "numerical %s causal=%d mask=%d p=%g Hq=%lld Hkv=%lld", what, c.causal, c.mask, c.p, (long long)c.Hq,
	      (long long)c.Hkv);
}

static void test_attention_bwd_numerical(void)
{
	static const acase_t small[] = {
		{ 1, 2, 1, 3, 4, 3, 2, false, 0, 0, false },
		{ 1, 2, 2, 4, 4, 3, 3, true, 0, 0, true },
		{ 2, 2, 1, 3, 5, 2, 3, false, 1, 0, false },
		{ 1, 2, 1, 4, 3, 3, 2, true, 2, 0.3, false },
	};

	for (size_t k = 0; k < sizeof small / sizeof small[0]; k++) {
		acase_t c = small[k];
		aprob_t pb;
		int64_t nq = c.B * c.Hq * c.Tq * c.D, nk = c.B * c.Hkv * c.Tk * c.D, nv = c.B * c.Hkv * c.Tk * c.Dv;
		int64_t no = c.B * c.Hq * c.Tq * c.Dv;
		void *dq, *dk, *dv;

		make_problem(&pb, NK_F64, c);
		nk_attention_run(&pb.g.f);
		nk_attention_bwd_run(&pb.g);
		dq = snap(pb.g.dq, NK_F64, nq), dk = snap(pb.g.dk, NK_F64, nk), dv = snap(pb.g.dv, NK_F64, nv);
		check_numerical(dq, (void *)pb.g.f.q, nq, &pb, no, "dq", c);
		check_numerical(dk, (void *)pb.g.f.k, nk, &pb, no, "dk", c);
		check_numerical(dv, (void *)pb.g.f.v, nv, &pb, no, "dv", c);
		free(dq), free(dk), free(dv);
		free_problem(&pb);
	}
}

static void test_attention_errors(void)
{
	aprob_t pb;
	acase_t c = { 1, 3, 2, 4, 4, 8, 8, false, 0, 0, false };

	make_problem(&pb, NK_F32, c);
	CHECK(nk_attention_run(&pb.g.f) != 0, "Hq not a multiple of Hkv is refused");
	pb.g.f.Hkv = 1;
	pb.g.f.dropout_p = 1.5;
	CHECK(nk_attention_run(&pb.g.f) != 0, "dropout_p > 1 is refused");
	free_problem(&pb);
}

/* Informational: forward + backward time of a GPT-2-small-like layer. */
static void bench(void)
{
	acase_t c = { 4, 12, 12, 256, 256, 64, 64, true, 0, 0, true };
	aprob_t pb;
	double t0, t1, t2, fl;

	make_problem(&pb, NK_F32, c);
	nk_attention_run(&pb.g.f);
	t0 = nkt_now();
	nk_attention_run(&pb.g.f);
	t1 = nkt_now();
	nk_attention_bwd_run(&pb.g);
	t2 = nkt_now();
	fl = 4.0 * c.B * c.Hq * c.Tq * c.Tk * c.D / 2; /* causal: half */
	printf("  attention f32 B=4 H=12 T=256 D=64 causal: fwd %.2f ms (%.1f GFLOP/s), bwd %.2f ms\n",
	       (t1 - t0) * 1e3, fl / (t1 - t0) * 1e-9, (t2 - t1) * 1e3);
	free_problem(&pb);
}

int main(void)
{
	nkt_seed(6);
	RUN(test_attention_vs_ref);
	RUN(test_attention_tiled_ref_vs_opt);
	RUN(test_attention_pair_tiles);
	RUN(test_attention_masked_rows);
	RUN(test_attention_bwd_numerical);
	RUN(test_attention_errors);
	if (!NK_TEST_SMALL)
		bench();
	return ctest_finish();
}
