/* test_optim.c - fused Adam/AdamW: three steps against torch.optim (2.13, CPU, single-tensor) values,
 * and nk_adam_run against nk_adam_ref (bit for bit) for every dtype and flag combination, including
 * sizes that split over the pool; fused SGD and Adagrad (nk_optim.h): run against ref the same way, a
 * hand-computed step, bad arguments.  (The Python tests compare all four with PyTorch's fused CPU ops.)
 * The AMP grad scaler kernels (grad_scaler.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk.h"
#include "nk_impl.h"
#include "nk_optim.h"
#include "nrt.h"
#include "nk_test.h"

static uint64_t rng = 0x853c49e6748fea9bull;

static double rndu(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) * 0x1p-53;
}

/* Three steps on a 3-element f32 parameter with the grads used to produce the expected values. */
static void three_steps(bool adamw, double wd, bool amsgrad, bool maximize, const double *want, const char *what)
{
	static const float grads[3][3] = {{0.1f, -0.2f, 0.3f}, {0.5f, 0.1f, -0.3f}, {-0.2f, 0.05f, 0.0f}};
	float p[3] = {1.0f, -2.0f, 0.5f}, m[3] = {0}, v[3] = {0}, vmax[3] = {0};
	for (int s = 0; s < 3; s++) {
		nk_adam_args_t A = {NK_F32, 3, 1e-2, 0.9, 0.999, 1e-8, wd, s + 1, adamw, amsgrad, maximize, 1.0,
				    p, m, v, vmax, grads[s]};
		CHECK(nk_adam_run(&A) == 0, "%s step %d", what, s + 1);
	}
	for (int i = 0; i < 3; i++)
		CHECK(fabs(p[i] - want[i]) <= 2e-7 * fabs(want[i]), "%s: p[%d] = %.9g, torch %.9g", what, i, p[i], want[i]);
}

static void test_against_torch(void)
{
	static const double adamw[] = {0.9772301912307739, -1.9861249923706055, 0.4907850921154022};
	static const double adam[] = {0.977194607257843, -1.9841933250427246, 0.4905667006969452};
	static const double ams_max[] = {1.0224727392196655, -2.013277292251587, 0.5090670585632324};
	three_steps(true, 0.01, false, false, adamw, "AdamW wd 0.01");
	three_steps(false, 0.01, false, false, adam, "Adam wd 0.01 (L2)");
	three_steps(false, 0.0, true, true, ams_max, "Adam amsgrad maximize");
}

/* Random states of dtype dt (second moments non-negative). */
static void *rnd_tensor(int dt, int64_t n, double lo, double hi)
{
	char *p = malloc((size_t)n * nk_dtype_size(dt));
	for (int64_t i = 0; i < n; i++)
		nk_store_f64(p + i * (int64_t)nk_dtype_size(dt), dt, lo + (hi - lo) * rndu());
	return p;
}

static void *dup(const void *p, size_t n)
{
	void *q = malloc(n);
	memcpy(q, p, n);
	return q;
}

static void vs_ref_case(int dt, int64_t n, bool adamw, double wd, bool ams, bool maxi, double gs, int64_t step)
{
	size_t bytes = (size_t)n * nk_dtype_size(dt);
	void *p = rnd_tensor(dt, n, -1, 1), *m = rnd_tensor(dt, n, -0.1, 0.1), *v = rnd_tensor(dt, n, 0, 0.01);
	void *x = rnd_tensor(dt, n, 0, 0.02), *g = rnd_tensor(dt, n, -2, 2);
	void *p2 = dup(p, bytes), *m2 = dup(m, bytes), *v2 = dup(v, bytes), *x2 = dup(x, bytes);
	nk_adam_args_t A = {dt, n, 3e-3, 0.9, 0.999, 1e-8, wd, step, adamw, ams, maxi, gs, p, m, v, ams ? x : NULL, g};
	nk_adam_args_t B = A;
	B.param = p2, B.exp_avg = m2, B.exp_avg_sq = v2, B.max_exp_avg_sq = ams ? x2 : NULL;
	CHECK(nk_adam_run(&A) == 0 && nk_adam_ref(&B) == 0, " ");
	bool same = memcmp(p, p2, bytes) == 0 && memcmp(m, m2, bytes) == 0 && memcmp(v, v2, bytes) == 0 &&
		    memcmp(x, x2, bytes) == 0;
	CHECK(same, "%s n %lld adamw %d wd %g amsgrad %d maximize %d grad_scale %g: run != ref", nk_dtype_name(dt),
	      (long long)n, adamw, wd, ams, maxi, gs);
	free(p), free(m), free(v), free(x), free(g), free(p2), free(m2), free(v2), free(x2);
}

static void test_vs_ref(void)
{
	static const int dts[] = {NK_F32, NK_F64, NK_BF16, NK_F16};
	for (size_t t = 0; t < 4; t++)
		for (int flags = 0; flags < 16; flags++) {
			bool adamw = flags & 1, ams = flags & 2, maxi = flags & 4;
			double wd = (flags & 8) ? 0.05 : 0.0;
			vs_ref_case(dts[t], 1003, adamw, wd, ams, maxi, flags % 3 ? 1.0 : 128.0, 1 + flags);
		}
	vs_ref_case(NK_F32, 100003, true, 0.01, false, false, 1.0, 10);
	vs_ref_case(NK_BF16, 100003, true, 0.01, true, false, 1.0, 10);
	vs_ref_case(NK_F64, 70001, false, 0.01, false, true, 2.0, 3);
}

static void test_errors(void)
{
	float p[2] = {1, 2}, m[2] = {0}, v[2] = {0}, g[2] = {1, 1};
	nk_adam_args_t A = {NK_I64, 2, 1e-3, 0.9, 0.999, 1e-8, 0, 1, true, false, false, 1.0, p, m, v, NULL, g};
	CHECK(nk_adam_run(&A) != 0, "int64 params");
	A.dtype = NK_F32;
	A.step = 0;
	CHECK(nk_adam_run(&A) != 0, "step 0");
	A.step = 1;
	A.amsgrad = true;
	CHECK(nk_adam_run(&A) != 0, "amsgrad without max_exp_avg_sq");
	A.amsgrad = false;
	A.n = 0;
	A.param = NULL;
	CHECK(nk_adam_run(&A) == 0, "empty step");
	/* first step of plain Adam moves each parameter by lr against the gradient's sign */
	A = (nk_adam_args_t){NK_F32, 2, 1e-3, 0.9, 0.999, 1e-8, 0, 1, false, false, false, 1.0, p, m, v, NULL, g};
	CHECK(nk_adam_run(&A) == 0 && fabsf(p[0] - (1 - 1e-3f)) < 1e-6f && fabsf(p[1] - (2 - 1e-3f)) < 1e-6f, " ");
}

static void sgd_adagrad_vs_ref_case(int dt, int64_t n, int flags)
{
	size_t bytes = (size_t)n * nk_dtype_size(dt);
	bool mom = flags & 1, nest = flags & 2, maxi = flags & 4, first = flags & 8;
	double wd = (flags & 16) ? 0.05 : 0.0, gs = flags % 3 ? 1.0 : 64.0;
	void *p = rnd_tensor(dt, n, -1, 1), *g = rnd_tensor(dt, n, -2, 2), *b = rnd_tensor(dt, n, -0.1, 0.1);
	void *p2 = dup(p, bytes), *g2 = dup(g, bytes), *b2 = dup(b, bytes);
	nk_sgd_args_t A = {dt, n, 0.1, wd, mom ? 0.9 : 0.0, 0.1, gs, nest, maxi, first, p, g, mom ? b : NULL};
	nk_sgd_args_t B = A;
	B.param = p2, B.grad = g2, B.momentum_buf = mom ? b2 : NULL;
	CHECK(nk_sgd_run(&A) == 0 && nk_sgd_ref(&B) == 0, " ");
	CHECK(!memcmp(p, p2, bytes) && !memcmp(g, g2, bytes) && !memcmp(b, b2, bytes), "sgd %s n %lld flags %d: run != ref",
	      nk_dtype_name(dt), (long long)n, flags);
	/* Adagrad on the same buffers (b as the state sum, kept non-negative) */
	memcpy(b, p, bytes);
	void *s = rnd_tensor(dt, n, 0, 0.5), *s2 = dup(s, bytes);
	memcpy(p2, p, bytes), memcpy(g2, g, bytes);
	nk_adagrad_args_t C = {dt, n, 0.1, (flags & 2) ? 0.01 : 0.0, wd, 1e-10, gs, 1.0 + flags, maxi, p, g, s};
	nk_adagrad_args_t D = C;
	D.param = p2, D.grad = g2, D.state_sum = s2;
	CHECK(nk_adagrad_run(&C) == 0 && nk_adagrad_ref(&D) == 0, " ");
	CHECK(!memcmp(p, p2, bytes) && !memcmp(g, g2, bytes) && !memcmp(s, s2, bytes), "adagrad %s n %lld flags %d: run != ref",
	      nk_dtype_name(dt), (long long)n, flags);
	free(p), free(g), free(b), free(s), free(p2), free(g2), free(b2), free(s2);
}

static void test_sgd_adagrad(void)
{
	static const int dts[] = {NK_F32, NK_F64, NK_BF16, NK_F16};
	for (size_t t = 0; t < 4; t++)
		for (int flags = 0; flags < 32; flags += 3)
			sgd_adagrad_vs_ref_case(dts[t], 1003, flags);
	sgd_adagrad_vs_ref_case(NK_F32, 100003, 1 | 16);
	sgd_adagrad_vs_ref_case(NK_BF16, 100003, 1 | 2 | 16);
	/* one hand-computed step each: SGD with momentum (not the first step), Adagrad with lr_decay */
	float p[1] = {1.0f}, g[1] = {0.5f}, b[1] = {0.2f};
	nk_sgd_args_t A = {NK_F32, 1, 0.1, 0.0, 0.9, 0.0, 1.0, false, false, false, p, g, b};
	CHECK(nk_sgd_run(&A) == 0 && fabsf(b[0] - 0.68f) < 1e-6f && fabsf(p[0] - 0.932f) < 1e-6f, "sgd: %g %g", p[0], b[0]);
	float q[1] = {1.0f}, h[1] = {2.0f}, s[1] = {0.0f};
	nk_adagrad_args_t C = {NK_F32, 1, 0.1, 0.5, 0.0, 0.0, 2.0, 3.0, false, q, h, s};  /* clr = 0.1 / 2, g = 1 */
	CHECK(nk_adagrad_run(&C) == 0 && h[0] == 1.0f && s[0] == 1.0f && fabsf(q[0] - 0.95f) < 1e-6f, "adagrad: %g", q[0]);
	A.dtype = NK_I32;
	CHECK(nk_sgd_run(&A) != 0, "int32 params");
	C.grad = NULL;
	CHECK(nk_adagrad_run(&C) != 0, "null grad");
}

/* The same tests on the portable optimized paths (NEURON_KERNELS=portable disables the AVX-512 ones),
 * in a child process: the choice is made once per process. */
static const char *self_exe;

static void test_portable_paths(void)
{
	if (getenv("NEURON_KERNELS"))
		return; /* already a variant run */
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "NEURON_KERNELS=portable '%s' > /dev/null", self_exe);
	CHECK(system(cmd) == 0, "%s with NEURON_KERNELS=portable failed", self_exe);
}

/* ---- grad scaler --------------------------------------------------------------------------------- */

static void test_amp(void)
{
	float g[100], inv = 0.5f, found = 0;
	uint16_t hb[3] = { 0x3f80, 0x7f80, 0x4000 }; /* bf16 1, inf, 2 */
	nk_amp_unscale_args_t a = { .dtype = NK_F32, .n = 100, .x = g, .inv_scale = &inv, .found_inf = &found };

	for (int i = 0; i < 100; i++)
		g[i] = (float)i;
	CHECK(nk_amp_unscale_run(&a) == 0 && found == 0 && g[10] == 5.0f && g[99] == 49.5f, "unscale finite");
	g[50] = NAN;
	CHECK(nk_amp_unscale_run(&a) == 0 && found == 1.0f, "unscale finds NaN");
	a.dtype = NK_BF16, a.n = 3, a.x = hb, found = 0;
	CHECK(nk_amp_unscale_run(&a) == 0 && found == 1.0f && hb[0] == 0x3f00 && hb[2] == 0x3f80, "unscale bf16 inf");

	float scale = 1024.0f, fi = 0;
	int32_t tracker = 0;
	nk_amp_update_args_t u = { .scale = &scale, .growth_tracker = &tracker, .found_inf = &fi, .growth = 2.0, .backoff = 0.5, .interval = 3 };
	nk_amp_update_run(&u);
	nk_amp_update_run(&u);
	CHECK(scale == 1024.0f && tracker == 2, "tracker counts");
	nk_amp_update_run(&u);
	CHECK(scale == 2048.0f && tracker == 0, "scale grows at the interval");
	fi = 1;
	nk_amp_update_run(&u);
	CHECK(scale == 1024.0f && tracker == 0, "scale backs off on inf");
	fi = 0, scale = 3e38f, tracker = 2;
	nk_amp_update_run(&u);
	CHECK(scale == 3e38f && tracker == 0, "an infinite grown scale is not taken");
}

int main(int argc, char **argv)
{
	(void)argc;
	self_exe = argv[0];
	RUN(test_against_torch);
	RUN(test_vs_ref);
	RUN(test_errors);
	RUN(test_sgd_adagrad);
	RUN(test_portable_paths);
	RUN(test_amp);
	return ctest_finish();
}
