/* test_rnn.c - the fused LSTM and GRU cell kernels (rnn.c): the pooled kernels against their one-thread
 * double references for every float dtype, with and without biases and with missing gradients, on
 * shapes that cut the hidden tiles unevenly (incl. zero-size); the references' backward against central
 * differences of their forward in f64; bad input fails cleanly. */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nk_rnn.h"
#include "nrt.h"

static const int dtypes[] = { NK_F32, NK_BF16, NK_F16, NK_F64 };
static const int64_t shapes[][2] = { { 1, 1 }, { 3, 5 }, { 2, 300 }, { 5, 513 }, { 64, 40 }, { 0, 4 }, { 4, 0 } };

static double atol_of(int dt)
{
	return dt == NK_F64 ? 1e-13 : dt == NK_F32 ? 2e-6 : dt == NK_BF16 ? 2e-2 : 4e-3;
}

static double rtol_of(int dt)
{
	return dt == NK_F64 ? 1e-12 : dt == NK_F32 ? 4e-6 : dt == NK_BF16 ? 1.0 / 64 : 1.0 / 512;
}

static double err_of(const void *a, const void *b, int dt, int64_t n, double scale)
{
	return nkt_err(a, b, dt, n, atol_of(dt) * scale, rtol_of(dt));
}

static void lstm_case(int dt, int64_t B, int64_t H, bool bias, int grads)
{
	int64_t n = B * H, g = 4 * n;
	void *ig = nkt_alloc(dt, g), *hg = nkt_alloc(dt, g), *b1 = nkt_alloc(dt, 4 * H), *b2 = nkt_alloc(dt, 4 * H), *cx = nkt_alloc(dt, n);
	void *hy[2], *cy[2], *ws[2], *dg[2], *dcx[2], *db[2];
	void *dhy = nkt_alloc(dt, n), *dcy = nkt_alloc(dt, n);
	double e;

	for (int i = 0; i < 2; i++)
		hy[i] = nkt_alloc(dt, n), cy[i] = nkt_alloc(dt, n), ws[i] = nkt_alloc(dt, g), dg[i] = nkt_alloc(dt, g), dcx[i] = nkt_alloc(dt, n),
		db[i] = nkt_alloc(dt, 4 * H);
	nkt_fill(ig, dt, g, -3, 3);
	nkt_fill(hg, dt, g, -3, 3);
	nkt_fill(b1, dt, 4 * H, -1, 1);
	nkt_fill(b2, dt, 4 * H, -1, 1);
	nkt_fill(cx, dt, n, -2, 2);
	nkt_fill(dhy, dt, n, -1, 1);
	nkt_fill(dcy, dt, n, -1, 1);
	for (int i = 0; i < 2; i++) {
		nk_lstm_cell_args_t f = { .dtype = dt, .B = B, .H = H, .ig = ig, .hg = hg, .b_ih = bias ? b1 : NULL, .b_hh = bias ? b2 : NULL,
					  .cx = cx, .hy = hy[i], .cy = cy[i], .ws = ws[i] };
		CHECK((i ? nk_lstm_cell_run(&f) : nk_lstm_cell_ref(&f)) == 0, "lstm fwd %d", i);
		/* both backward runs read the reference's workspace and cy, so only the backward differs */
		nk_lstm_cell_bwd_args_t b = { .dtype = dt, .B = B, .H = H, .dhy = (grads & 1) ? dhy : NULL, .dcy = (grads & 2) ? dcy : NULL,
					      .cx = cx, .cy = cy[0], .ws = ws[0], .dgates = dg[i], .dcx = dcx[i], .dbias = bias ? db[i] : NULL };
		CHECK((i ? nk_lstm_cell_bwd_run(&b) : nk_lstm_cell_bwd_ref(&b)) == 0, "lstm bwd %d", i);
	}
	e = err_of(hy[1], hy[0], dt, n, 1) + err_of(cy[1], cy[0], dt, n, 1) + err_of(ws[1], ws[0], dt, g, 1);
	CHECK(e <= 1, "lstm fwd %s B=%lld H=%lld bias=%d: err %g", nkt_dtype_name(dt), (long long)B, (long long)H, bias, e);
	e = err_of(dg[1], dg[0], dt, g, 1) + err_of(dcx[1], dcx[0], dt, n, 1);
	if (bias)
		e += err_of(db[1], db[0], dt, 4 * H, 1 + (double)B);
	CHECK(e <= 1, "lstm bwd %s B=%lld H=%lld bias=%d grads=%d: err %g", nkt_dtype_name(dt), (long long)B, (long long)H, bias, grads, e);
	free(ig), free(hg), free(b1), free(b2), free(cx), free(dhy), free(dcy);
	for (int i = 0; i < 2; i++)
		free(hy[i]), free(cy[i]), free(ws[i]), free(dg[i]), free(dcx[i]), free(db[i]);
}

static void gru_case(int dt, int64_t B, int64_t H, bool bias)
{
	int64_t n = B * H, g = 3 * n;
	void *ig = nkt_alloc(dt, g), *hg = nkt_alloc(dt, g), *b1 = nkt_alloc(dt, 3 * H), *b2 = nkt_alloc(dt, 3 * H), *hx = nkt_alloc(dt, n);
	void *dhy = nkt_alloc(dt, n), *hy[2], *ws[2], *dig[2], *dhg[2], *dhx[2], *dbi[2], *dbh[2];
	double e;

	for (int i = 0; i < 2; i++)
		hy[i] = nkt_alloc(dt, n), ws[i] = nkt_alloc(dt, 5 * n), dig[i] = nkt_alloc(dt, g), dhg[i] = nkt_alloc(dt, g), dhx[i] = nkt_alloc(dt, n),
		dbi[i] = nkt_alloc(dt, 3 * H), dbh[i] = nkt_alloc(dt, 3 * H);
	nkt_fill(ig, dt, g, -3, 3);
	nkt_fill(hg, dt, g, -3, 3);
	nkt_fill(b1, dt, 3 * H, -1, 1);
	nkt_fill(b2, dt, 3 * H, -1, 1);
	nkt_fill(hx, dt, n, -1, 1);
	nkt_fill(dhy, dt, n, -1, 1);
	for (int i = 0; i < 2; i++) {
		nk_gru_cell_args_t f = { .dtype = dt, .B = B, .H = H, .ig = ig, .hg = hg, .b_ih = bias ? b1 : NULL, .b_hh = bias ? b2 : NULL,
					 .hx = hx, .hy = hy[i], .ws = ws[i] };
		CHECK((i ? nk_gru_cell_run(&f) : nk_gru_cell_ref(&f)) == 0, "gru fwd %d", i);
		nk_gru_cell_bwd_args_t b = { .dtype = dt, .B = B, .H = H, .dhy = dhy, .ws = ws[0], .dig = dig[i], .dhg = dhg[i], .dhx = dhx[i],
					     .dbih = bias ? dbi[i] : NULL, .dbhh = bias ? dbh[i] : NULL };
		CHECK((i ? nk_gru_cell_bwd_run(&b) : nk_gru_cell_bwd_ref(&b)) == 0, "gru bwd %d", i);
	}
	e = err_of(hy[1], hy[0], dt, n, 1) + err_of(ws[1], ws[0], dt, 5 * n, 1);
	CHECK(e <= 1, "gru fwd %s B=%lld H=%lld bias=%d: err %g", nkt_dtype_name(dt), (long long)B, (long long)H, bias, e);
	e = err_of(dig[1], dig[0], dt, g, 1) + err_of(dhg[1], dhg[0], dt, g, 1) + err_of(dhx[1], dhx[0], dt, n, 1);
	if (bias)
		e += err_of(dbi[1], dbi[0], dt, 3 * H, 1 + (double)B) + err_of(dbh[1], dbh[0], dt, 3 * H, 1 + (double)B);
	CHECK(e <= 1, "gru bwd %s B=%lld H=%lld bias=%d: err %g", nkt_dtype_name(dt), (long long)B, (long long)H, bias, e);
	free(ig), free(hg), free(b1), free(b2), free(hx), free(dhy);
	for (int i = 0; i < 2; i++)
		free(hy[i]), free(ws[i]), free(dig[i]), free(dhg[i]), free(dhx[i]), free(dbi[i]), free(dbh[i]);
}

static void test_lstm_vs_ref(void)
{
	for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int bias = 0; bias < 2; bias++)
				for (int grads = 1; grads < 4; grads++)
					lstm_case(dtypes[d], shapes[s][0], shapes[s][1], bias, grads);
}

static void test_gru_vs_ref(void)
{
	for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int bias = 0; bias < 2; bias++)
				gru_case(dtypes[d], shapes[s][0], shapes[s][1], bias);
}

/* ---- backward against central differences (f64 references) ---------------------------------------- */
/* L = sum(u*hy) + sum(v*cy) for the LSTM, sum(u*hy) for the GRU; dL/d(gates), dL/d(cx or hx) and the
 * bias sums must match (L(x + eps) - L(x - eps)) / 2eps. */

enum { NB = 3, NH = 4 };

static double lstm_loss(double *ig, double *hg, double *b1, double *b2, double *cx, const double *u, const double *v)
{
	double hy[NB * NH], cy[NB * NH], ws[NB * 4 * NH], L = 0;
	nk_lstm_cell_args_t f = { .dtype = NK_F64, .B = NB, .H = NH, .ig = ig, .hg = hg, .b_ih = b1, .b_hh = b2, .cx = cx, .hy = hy, .cy = cy, .ws = ws };

	nk_lstm_cell_ref(&f);
	for (int i = 0; i < NB * NH; i++)
		L += u[i] * hy[i] + v[i] * cy[i];
	return L;
}

static double numdiff(double *x, double (*loss)(void *), void *ctx)
{
	double x0 = *x, eps = 1e-6, lp, lm;

	*x = x0 + eps, lp = loss(ctx);
	*x = x0 - eps, lm = loss(ctx);
	*x = x0;
	return (lp - lm) / (2 * eps);
}

typedef struct {
	double ig[NB * 4 * NH], hg[NB * 4 * NH], b1[4 * NH], b2[4 * NH], x[NB * NH], u[NB * NH], v[NB * NH];
} cellcase_t;

static double lstm_loss_ctx(void *c)
{
	cellcase_t *k = c;

	return lstm_loss(k->ig, k->hg, k->b1, k->b2, k->x, k->u, k->v);
}

static double gru_loss_ctx(void *c)
{
	cellcase_t *k = c;
	double hy[NB * NH], ws[NB * 5 * NH], L = 0;
	nk_gru_cell_args_t f = { .dtype = NK_F64, .B = NB, .H = NH, .ig = k->ig, .hg = k->hg, .b_ih = k->b1, .b_hh = k->b2, .hx = k->x, .hy = hy, .ws = ws };

	nk_gru_cell_ref(&f);
	for (int i = 0; i < NB * NH; i++)
		L += k->u[i] * hy[i];
	return L;
}

static void fill_case(cellcase_t *k)
{
	nkt_fill(k->ig, NK_F64, NB * 4 * NH, -2, 2);
	nkt_fill(k->hg, NK_F64, NB * 4 * NH, -2, 2);
	nkt_fill(k->b1, NK_F64, 4 * NH, -1, 1);
	nkt_fill(k->b2, NK_F64, 4 * NH, -1, 1);
	nkt_fill(k->x, NK_F64, NB * NH, -1, 1);
	nkt_fill(k->u, NK_F64, NB * NH, -1, 1);
	nkt_fill(k->v, NK_F64, NB * NH, -1, 1);
}

static void test_lstm_bwd_numerical(void)
{
	cellcase_t k;
	double hy[NB * NH], cy[NB * NH], ws[NB * 4 * NH], dg[NB * 4 * NH], dcx[NB * NH], db[4 * NH], worst = 0;

	fill_case(&k);
	nk_lstm_cell_args_t f = { .dtype = NK_F64, .B = NB, .H = NH, .ig = k.ig, .hg = k.hg, .b_ih = k.b1, .b_hh = k.b2, .cx = k.x, .hy = hy, .cy = cy, .ws = ws };
	CHECK(nk_lstm_cell_run(&f) == 0, "lstm fwd");
	nk_lstm_cell_bwd_args_t b = { .dtype = NK_F64, .B = NB, .H = NH, .dhy = k.u, .dcy = k.v, .cx = k.x, .cy = cy, .ws = ws, .dgates = dg, .dcx = dcx, .dbias = db };
	CHECK(nk_lstm_cell_bwd_run(&b) == 0, "lstm bwd");
	for (int i = 0; i < NB * 4 * NH; i++) /* d/d(ig) = d/d(hg) = dgates */
		worst = fmax(worst, fabs(numdiff(&k.ig[i], lstm_loss_ctx, &k) - dg[i]) + fabs(numdiff(&k.hg[i], lstm_loss_ctx, &k) - dg[i]));
	for (int i = 0; i < NB * NH; i++)
		worst = fmax(worst, fabs(numdiff(&k.x[i], lstm_loss_ctx, &k) - dcx[i]));
	for (int i = 0; i < 4 * NH; i++)
		worst = fmax(worst, fabs(numdiff(&k.b1[i], lstm_loss_ctx, &k) - db[i]) + fabs(numdiff(&k.b2[i], lstm_loss_ctx, &k) - db[i]));
	CHECK(worst < 1e-7, "lstm backward vs central differences: worst %g", worst);
}

static void test_gru_bwd_numerical(void)
{
	cellcase_t k;
	double hy[NB * NH], ws[NB * 5 * NH], dig[NB * 3 * NH], dhg[NB * 3 * NH], dhx[NB * NH], dbi[3 * NH], dbh[3 * NH], worst = 0;

	fill_case(&k);
	nk_gru_cell_args_t f = { .dtype = NK_F64, .B = NB, .H = NH, .ig = k.ig, .hg = k.hg, .b_ih = k.b1, .b_hh = k.b2, .hx = k.x, .hy = hy, .ws = ws };
	CHECK(nk_gru_cell_run(&f) == 0, "gru fwd");
	nk_gru_cell_bwd_args_t b = { .dtype = NK_F64, .B = NB, .H = NH, .dhy = k.u, .ws = ws, .dig = dig, .dhg = dhg, .dhx = dhx, .dbih = dbi, .dbhh = dbh };
	CHECK(nk_gru_cell_bwd_run(&b) == 0, "gru bwd");
	for (int i = 0; i < NB * 3 * NH; i++)
		worst = fmax(worst, fabs(numdiff(&k.ig[i], gru_loss_ctx, &k) - dig[i]) + fabs(numdiff(&k.hg[i], gru_loss_ctx, &k) - dhg[i]));
	for (int i = 0; i < NB * NH; i++)
		worst = fmax(worst, fabs(numdiff(&k.x[i], gru_loss_ctx, &k) - dhx[i]));
	for (int i = 0; i < 3 * NH; i++)
		worst = fmax(worst, fabs(numdiff(&k.b1[i], gru_loss_ctx, &k) - dbi[i]) + fabs(numdiff(&k.b2[i], gru_loss_ctx, &k) - dbh[i]));
	CHECK(worst < 1e-7, "gru backward vs central differences: worst %g", worst);
}

static void test_errors(void)
{
	float buf[64] = { 0 };
	nk_lstm_cell_args_t f = { .dtype = NK_I64, .B = 1, .H = 1, .ig = buf, .hg = buf, .cx = buf, .hy = buf, .cy = buf, .ws = buf };
	CHECK(nk_lstm_cell_run(&f) != 0, "int64 lstm cell is refused");
	f.dtype = NK_F32, f.ws = NULL;
	CHECK(nk_lstm_cell_run(&f) != 0, "a missing workspace is refused");
	f.ws = buf, f.H = -1;
	CHECK(nk_lstm_cell_run(&f) != 0, "a negative size is refused");
	nk_gru_cell_bwd_args_t g = { .dtype = NK_F32, .B = 1, .H = 1, .ws = buf, .dig = buf, .dhg = buf, .dhx = buf };
	CHECK(nk_gru_cell_bwd_run(&g) != 0, "gru backward without grad_hy is refused");
	nk_gru_cell_args_t z = { .dtype = NK_F32, .B = 0, .H = 3 };
	CHECK(nk_gru_cell_run(&z) == 0, "an empty batch needs no buffers");
}

int main(void)
{
	nkt_seed(22);
	RUN(test_lstm_vs_ref);
	RUN(test_gru_vs_ref);
	RUN(test_lstm_bwd_numerical);
	RUN(test_gru_bwd_numerical);
	RUN(test_errors);
	return ctest_finish();
}
