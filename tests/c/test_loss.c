/* test_loss.c - nll_loss forward/backward against aten's definitions written out naively: reductions
 * none/mean/sum, class weights, ignore_index, total_weight, all-ignored mean = NaN, bad targets. */
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

int main(void)
{
	nkt_seed(5);
	RUN(test_nll_vs_naive);
	RUN(test_nll_all_ignored);
	RUN(test_nll_bad_target);
	return ctest_finish();
}
