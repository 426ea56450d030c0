/* test_loss.c - nll_loss forward/backward against aten's definitions written out naively: reductions
 * none/mean/sum, class weights, ignore_index, total_weight, all-ignored mean = NaN, bad targets.
 * The margin losses against central differences. */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"
#include "nrt_impl.h"

static void check_case(int dtype, int64_t N, int64_t C, int reduction, bool weighted, int64_t ignore)
{
	void *logp = nkt_alloc(dtype, N * C), *w = nkt_alloc(dtype, C), *out = nkt_alloc(dtype, N + 1);
	void *tw = nkt_alloc(dtype, 1), *go = nkt_alloc(dtype, N + 1), *gi = nkt_alloc(dtype, N * C);
	int64_t *t = calloc((size_t)N + 1, 8);
	nk_nll_args_t f = { .dtype = dtype, .N = N, .C = C, .ignore_index = ignore, .reduction = reduction,
			    .logp = logp, .target = t, .weight = weighted ? w : NULL, .out = out, .total_weight = tw };
	nk_nll_bwd_args_t b = { .dtype = dtype, .N = N, .C = C, .ignore_index = ignore, .reduction = reduction,
				.grad_out = go, .target = t, .weight = weighted ? w : NULL, .total_weight = tw,
				.grad_in = gi };
	double tol = dtype == NK_F64 ? 1e-12 : dtype == NK_F32 ? 1e-5 : 1e-2;
	double loss = 0, wsum = 0, g;
	bool ok = true;

	nkt_fill(logp, dtype, N * C, -5, 0);
	nkt_fill(w, dtype, C, 0.1, 2);
	nkt_fill(go, dtype, N + 1, -1, 1);
	nkt_fill(gi, dtype, N * C, 7, 8); /* must be overwritten */
	for (int64_t i = 0; i < N; i++)
		t[i] = i % 5 == 3 ? ignore : nkt_randint(0, C);
	CHECK(nk_nll_run(&f) == 0, "nll run");
	for (int64_t i = 0; i < N; i++) {
		double wi, li;

		if (t[i] == ignore) {
			if (reduction == NK_REDUCTION_NONE)
				ok &= nkt_get(out, dtype, i) == 0;
			continue;
		}
		wi = weighted ? nkt_get(w, dtype, t[i]) : 1;
		li = -nkt_get(logp, dtype, i * C + t[i]) * wi;
		loss += li, wsum += wi;
		if (reduction == NK_REDUCTION_NONE)
			ok &= fabs(nkt_get(out, dtype, i) - li) <= tol * (1 + fabs(li));
	}
	if (reduction != NK_REDUCTION_NONE) {
		double want = reduction == NK_REDUCTION_MEAN ? loss / wsum : loss, got = nkt_get(out, dtype, 0);

		ok &= isnan(want) ? isnan(got) : fabs(got - want) <= tol * (1 + fabs(want));
		ok &= fabs(nkt_get(tw, dtype, 0) - wsum) <= tol * (1 + wsum);
	} else {
		ok &= nkt_get(tw, dtype, 0) == 0;
	}
	CHECK(ok, "nll forward %s N=%lld C=%lld red=%d weighted=%d", nkt_dtype_name(dtype), (long long)N,
	      (long long)C, reduction, weighted);

	CHECK(nk_nll_bwd_run(&b) == 0, "nll bwd run");
	ok = true;
	g = nkt_get(go, dtype, 0);
	if (reduction == NK_REDUCTION_MEAN)
		g /= nkt_get(tw, dtype, 0);
	for (int64_t i = 0; i < N; i++)
		for (int64_t c = 0; c < C; c++) {
			double want = 0, got = nkt_get(gi, dtype, i * C + c);

			if (c == t[i] && t[i] != ignore) {
				double wi = weighted ? nkt_get(w, dtype, c) : 1;

				want = reduction == NK_REDUCTION_NONE ? -wi * nkt_get(go, dtype, i) : -g * wi;
			}
			ok &= fabs(got - want) <= tol * (1 + fabs(want));
		}
	CHECK(ok, "nll backward %s N=%lld C=%lld red=%d weighted=%d", nkt_dtype_name(dtype), (long long)N,
	      (long long)C, reduction, weighted);
	free(logp), free(w), free(out), free(tw), free(go), free(gi), free(t);
}

static void test_nll_vs_naive(void)
{
	static const int64_t shapes[][2] = { { 1, 1 }, { 7, 3 }, { 33, 10 }, { 100, 1000 }, { 5000, 7 } };
	static const int dts[] = { NK_F32, NK_F64, NK_BF16, NK_F16 };

	for (int d = 0; d < 4; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int r = 0; r < 3; r++)
				for (int wt = 0; wt < 2; wt++)
					check_case(dts[d], shapes[s][0], shapes[s][1], r, wt, s % 2 ? -100 : 0);
}

static void test_nll_all_ignored(void)
{
	float logp[6] = { -1, -2, -3, -4, -5, -6 }, out, tw = 5, gi[6], go = 1;
	int64_t t[2] = { -100, -100 };
	nk_nll_args_t f = { .dtype = NK_F32, .N = 2, .C = 3, .ignore_index = -100, .reduction = NK_REDUCTION_MEAN,
			    .logp = logp, .target = t, .out = &out, .total_weight = &tw };
	nk_nll_bwd_args_t b = { .dtype = NK_F32, .N = 2, .C = 3, .ignore_index = -100,
				.reduction = NK_REDUCTION_MEAN, .grad_out = &go, .target = t, .total_weight = &tw,
				.grad_in = gi };

	CHECK(nk_nll_run(&f) == 0 && isnan(out) && tw == 0, "mean over no targets is NaN (got %g, tw %g)", out, tw);
	f.reduction = NK_REDUCTION_SUM;
	CHECK(nk_nll_run(&f) == 0 && out == 0 && tw == 0, "sum over no targets is 0");
	CHECK(nk_nll_bwd_run(&b) == 0, "bwd");
	for (int i = 0; i < 6; i++)
		CHECK(gi[i] == 0, "grad of ignored targets is 0");
	f.N = 0;
	f.reduction = NK_REDUCTION_MEAN;
	CHECK(nk_nll_run(&f) == 0 && isnan(out), "mean over N = 0 is NaN");
}

static void test_nll_bad_target(void)
{
	float logp[6] = { 0 }, out, tw;
	int64_t t[2] = { 1, 3 };
	nk_nll_args_t f = { .dtype = NK_F32, .N = 2, .C = 3, .ignore_index = -100, .reduction = NK_REDUCTION_SUM,
			    .logp = logp, .target = t, .out = &out, .total_weight = &tw };

	nrt_kernel_fail_clear();
	CHECK(nk_nll_run(&f) != 0, "target 3 of 3 classes fails");
	CHECK(strstr(nrt_kernel_fail_message(), "Target 3 is out of bounds") != NULL, "message: %s",
	      nrt_kernel_fail_message());
	t[1] = -1;
	CHECK(nk_nll_run(&f) != 0, "negative target fails");
	t[1] = -100;
	CHECK(nk_nll_run(&f) == 0, "ignore_index is not a bad target");
}

/* ---- margin losses ------------------------------------------------------------------------------- */

static double mm_loss_f64(const double *x, const int64_t *t, const double *w, int64_t N, int64_t C, int64_t p, int reduction)
{
	double out = 0;
	nk_multi_margin_args_t a = { .dtype = NK_F64, .N = N, .C = C, .p = p, .margin = 1.0, .reduction = reduction, .x = x, .target = t, .w = w, .out = &out };

	nk_multi_margin_run(&a);
	return out;
}

static void test_margin_losses(void)
{
	enum { N = 4, C = 5 };
	double x[N * C], w[C], gi[N * C], go = 1.0, h = 1e-6, out[N];
	int64_t t[N] = { 0, 3, 4, 2 }, tl[N * C];

	for (int i = 0; i < N * C; i++)
		x[i] = nkt_uniform(-1, 1);
	for (int c = 0; c < C; c++)
		w[c] = nkt_uniform(0.5, 1.5);
	for (int64_t p = 1; p <= 2; p++)
		for (int red = 1; red <= 2; red++) {
			nk_multi_margin_args_t a = { .dtype = NK_F64, .N = N, .C = C, .p = p, .margin = 1.0, .reduction = red, .x = x, .target = t,
						     .w = w, .grad_out = &go, .grad_in = gi };
			CHECK(nk_multi_margin_bwd_run(&a) == 0, "mm bwd");
			for (int i = 0; i < N * C; i++) {
				double s = x[i], num;

				x[i] = s + h;
				num = mm_loss_f64(x, t, w, N, C, p, red);
				x[i] = s - h;
				num = (num - mm_loss_f64(x, t, w, N, C, p, red)) / (2 * h);
				x[i] = s;
				CHECK(fabs(num - gi[i]) < 1e-6, "multi_margin p=%lld red=%d grad[%d]: %g vs %g", (long long)p, red, i, num, gi[i]);
			}
		}
	/* reduction none sums to reduction sum */
	nk_multi_margin_args_t a = { .dtype = NK_F64, .N = N, .C = C, .p = 1, .margin = 1.0, .reduction = NK_REDUCTION_NONE, .x = x, .target = t, .out = out };
	CHECK(nk_multi_margin_run(&a) == 0, "mm none");
	CHECK(fabs(out[0] + out[1] + out[2] + out[3] - mm_loss_f64(x, t, NULL, N, C, 1, NK_REDUCTION_SUM)) < 1e-12, "none sums to sum");
	int64_t bad[N] = { 0, 5, 1, 1 };
	a.target = bad;
	CHECK(nk_multi_margin_run(&a) != 0, "target out of range fails");

	/* multilabel: labels {1, 3} / {0} / {} / {4, 2, 0} */
	static const int64_t labels[N][C] = { { 1, 3, -1, 0, 0 }, { 0, -1, 2, 2, 2 }, { -1, 1, 1, 1, 1 }, { 4, 2, 0, -1, 3 } };
	double ist[N * C], loss, lp;
	memcpy(tl, labels, sizeof tl);
	nk_multilabel_margin_args_t m = { .dtype = NK_F64, .N = N, .C = C, .reduction = NK_REDUCTION_SUM, .x = x, .target = tl, .out = &loss,
					  .is_target = ist, .grad_out = &go, .grad_in = gi };
	CHECK(nk_multilabel_margin_run(&m) == 0 && nk_multilabel_margin_bwd_run(&m) == 0, "multilabel");
	CHECK(ist[1] == 1 && ist[3] == 1 && ist[0] == 0 && ist[5] == 1 && ist[6] == 0 && ist[10] == 0, "is_target");
	for (int i = 0; i < N * C; i++) {
		double s = x[i], num;

		m.out = &lp;
		x[i] = s + h;
		nk_multilabel_margin_run(&m);
		num = lp;
		x[i] = s - h;
		nk_multilabel_margin_run(&m);
		num = (num - lp) / (2 * h);
		x[i] = s;
		CHECK(fabs(num - gi[i]) < 1e-6, "multilabel grad[%d]: %g vs %g", i, num, gi[i]);
	}
	tl[0] = 7;
	CHECK(nk_multilabel_margin_run(&m) != 0, "multilabel target out of range fails");
}

int main(void)
{
	nkt_seed(5);
	RUN(test_nll_vs_naive);
	RUN(test_nll_all_ignored);
	RUN(test_nll_bad_target);
	RUN(test_margin_losses);
	return ctest_finish();
}
