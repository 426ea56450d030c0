/* ctc_loss.c - CTC loss forward (alpha recursion) and backward (beta recursion and the gradient of eq. 16),
 * nk_ctc_loss.h.  One batch element is the unit of work; the recursions over (t, s) run in aten's order
 * with the dtype's arithmetic, so results match its CPU kernel.  The bodies are written once for float
 * and double (CTC_BODIES below).
 */
#include <math.h>

#include "nk.h"
#include "nk_ctc_loss.h"
#include "nk_impl.h"
#include "nrt.h"

static int ctc_check(const nk_ctc_loss_args_t *a, const char *who)
{
	if ((a->dtype != NK_F32 && a->dtype != NK_F64) || (a->tdtype != NK_I32 && a->tdtype != NK_I64) || a->T < 0 || a->N < 0 ||
	    a->C <= 0 || a->S < 0 || a->blank < 0 || a->blank >= a->C) {
		nrt_kernel_fail("%s: unsupported dtype %s / target dtype %s or bad sizes", who, nk_dtype_name(a->dtype),
				nk_dtype_name(a->tdtype));
		return -1;
	}
	for (int64_t b = 0; b < a->N; b++)
		for (int64_t i = 0; i < a->lens[a->N + b]; i++) {
			int64_t j = a->lens[2 * a->N + b] + i;
			int64_t v = a->tdtype == NK_I64 ? ((const int64_t *)a->targets)[j] : ((const int32_t *)a->targets)[j];
			if (v < 0 || v >= a->C) {
				nrt_kernel_fail("%s: target %lld of batch %lld is %lld, outside the label range [0, %lld)", who, (long long)i,
						(long long)b, (long long)v, (long long)a->C);
				return -1;
			}
		}
	return 0;
}

/* l'(s): the blank at even s, target label s/2 at odd s */
static inline int64_t ctc_prime(const nk_ctc_loss_args_t *a, int64_t b, int64_t s)
{
	if (s % 2 == 0)
		return a->blank;
	int64_t i = a->lens[2 * a->N + b] + s / 2;
	return a->tdtype == NK_I64 ? ((const int64_t *)a->targets)[i] : ((const int32_t *)a->targets)[i];
}

#define CTC_BODIES(T_, SUF, EXP, LOG)                                                                              \
	static inline T_ lp_##SUF(const nk_ctc_loss_args_t *a, int64_t t, int64_t b, int64_t c)                   \
	{                                                                                                          \
		return ((const T_ *)a->lp)[t * a->lp_st[0] + b * a->lp_st[1] + c * a->lp_st[2]];                   \
	}                                                                                                          \
                                                                                                                   \
	static void fwd_##SUF(const nk_ctc_loss_args_t *a, int64_t b)                                              \
	{                                                                                                          \
		const T_ ninf = -INFINITY;                                                                         \
		int64_t il = a->lens[b], tl = a->lens[a->N + b], W = 2 * a->S + 1;                                 \
		T_ *la = (T_ *)a->alpha + b * a->T * W;                                                            \
		for (int64_t i = 0; i < a->T * W; i++)                                                             \
			la[i] = ninf;                                                                              \
		if (il == 0) {                                                                                     \
			((T_ *)a->nll)[b] = tl == 0 ? (T_)0 : -ninf;                                               \
			return;                                                                                    \
		}                                                                                                  \
		la[0] = lp_##SUF(a, 0, b, a->blank);                                                               \
		if (tl > 0)                                                                                        \
			la[1] = lp_##SUF(a, 0, b, ctc_prime(a, b, 1));                                             \
		for (int64_t t = 1; t < il; t++)                                                                   \
			for (int64_t s = 0; s < 2 * tl + 1; s++) {                                                 \
				int64_t cur = ctc_prime(a, b, s);                                                  \
				T_ la1 = la[(t - 1) * W + s], lamax = la1, la2, la3;                               \
				if (s > 0) {                                                                       \
					la2 = la[(t - 1) * W + s - 1];                                             \
					if (la2 > lamax)                                                           \
						lamax = la2;                                                       \
				} else                                                                             \
					la2 = ninf;                                                                \
				if (s > 1 && ctc_prime(a, b, s - 2) != cur) {                                      \
					la3 = la[(t - 1) * W + s - 2];                                             \
					if (la3 > lamax)                                                           \
						lamax = la3;                                                       \
				} else                                                                             \
					la3 = ninf;                                                                \
				if (lamax == ninf)                                                                 \
					lamax = 0;                                                                 \
				la[t * W + s] = LOG(EXP(la1 - lamax) + EXP(la2 - lamax) + EXP(la3 - lamax)) + lamax + \
						lp_##SUF(a, t, b, cur);                                            \
			}                                                                                          \
		if (tl == 0) {                                                                                     \
			((T_ *)a->nll)[b] = -la[(il - 1) * W];                                                     \
		} else {                                                                                           \
			T_ l1 = la[(il - 1) * W + 2 * tl], l2 = la[(il - 1) * W + 2 * tl - 1];                     \
			T_ m = l1 > l2 ? l1 : l2;                                                                  \
			m = m == ninf ? 0 : m;                                                                     \
			((T_ *)a->nll)[b] = -(LOG(EXP(l1 - m) + EXP(l2 - m)) + m);                                 \
		}                                                                                                  \
	}                                                                                                          \
                                                                                                                   \
	static void bwd_##SUF(const nk_ctc_loss_bwd_args_t *g, int64_t b)                                          \
	{                                                                                                          \
		const nk_ctc_loss_args_t *a = &g->f;                                                               \
		const T_ ninf = -INFINITY;                                                                         \
		int64_t il = a->lens[b], tl = a->lens[a->N + b], W = 2 * a->S + 1, C = a->C;                       \
		const T_ *la = (const T_ *)a->alpha + b * a->T * W;                                                \
		T_ *lb = (T_ *)g->beta + b * a->T * W, nll = ((const T_ *)a->nll)[b];                              \
		T_ *gr = (T_ *)g->grad;                                                                            \
		T_ go = ((const T_ *)g->gout)[b * g->gout_st];                                                     \
		/* grad[t, b, c] for this b: row t at (t*N + b)*C */                                               \
		if (il == 0 || (g->zero_infinity && nll == -ninf)) {                                               \
			for (int64_t t = 0; t < a->T; t++)                                                         \
				for (int64_t c = 0; c < C; c++)                                                    \
					gr[(t * a->N + b) * C + c] = 0;                                            \
			return;                                                                                    \
		}                                                                                                  \
		for (int64_t t = 0; t < a->T; t++)                                                                 \
			for (int64_t c = 0; c < C; c++)                                                            \
				gr[(t * a->N + b) * C + c] = ninf;                                                 \
		for (int64_t s = 0; s < W; s++)                                                                    \
			lb[(il - 1) * W + s] = ninf;                                                               \
		lb[(il - 1) * W + 2 * tl] = lp_##SUF(a, il - 1, b, a->blank);                                      \
		gr[((il - 1) * a->N + b) * C + a->blank] = la[(il - 1) * W + 2 * tl] + lb[(il - 1) * W + 2 * tl];  \
		if (tl > 0) {                                                                                      \
			int64_t cur = ctc_prime(a, b, 2 * tl - 1);                                                 \
			lb[(il - 1) * W + 2 * tl - 1] = lp_##SUF(a, il - 1, b, cur);                               \
			gr[((il - 1) * a->N + b) * C + cur] = la[(il - 1) * W + 2 * tl - 1] + lb[(il - 1) * W + 2 * tl - 1]; \
		}                                                                                                  \
		for (int64_t t = il - 2; t >= 0; t--)                                                              \
			for (int64_t s = 2 * tl; s >= 0; s--) {                                                    \
				int64_t cur = ctc_prime(a, b, s);                                                  \
				T_ lb1 = lb[(t + 1) * W + s], lbmax = lb1, lb2, lb3;                               \
				if (s < 2 * tl) {                                                                  \
					lb2 = lb[(t + 1) * W + s + 1];                                             \
					if (lb2 > lbmax)                                                           \
						lbmax = lb2;                                                       \
				} else                                                                             \
					lb2 = ninf;                                                                \
				if (s < 2 * tl - 1 && ctc_prime(a, b, s + 2) != cur) {                             \
					lb3 = lb[(t + 1) * W + s + 2];                                             \
					if (lb3 > lbmax)                                                           \
						lbmax = lb3;                                                       \
				} else                                                                             \
					lb3 = ninf;                                                                \
				if (lbmax == ninf)                                                                 \
					lbmax = 0;                                                                 \
				lb[t * W + s] = LOG(EXP(lb1 - lbmax) + EXP(lb2 - lbmax) + EXP(lb3 - lbmax)) + lbmax + \
						lp_##SUF(a, t, b, cur);                                            \
				T_ lab = la[t * W + s] + lb[t * W + s], *lc = &gr[(t * a->N + b) * C + cur];       \
				if (*lc == ninf) {                                                                 \
					*lc = lab;                                                                 \
				} else {                                                                           \
					T_ mx = *lc > lab ? *lc : lab;                                             \
					*lc = LOG(EXP(*lc - mx) + EXP(lab - mx)) + mx;                             \
				}                                                                                  \
			}                                                                                          \
		for (int64_t t = 0; t < il; t++)                                                                   \
			for (int64_t c = 0; c < C; c++) {                                                          \
				T_ *res = &gr[(t * a->N + b) * C + c], lp = lp_##SUF(a, t, b, c);                  \
				*res = (EXP(lp) - EXP(*res + nll - lp)) * go;                                      \
			}                                                                                          \
		for (int64_t t = il; t < a->T; t++)                                                                \
			for (int64_t c = 0; c < C; c++)                                                            \
				gr[(t * a->N + b) * C + c] = 0;                                                    \
	}

CTC_BODIES(float, f32, expf, logf)
CTC_BODIES(double, f64, exp, log)

static void fwd_tasks(void *ctx, int64_t b0, int64_t b1)
{
	const nk_ctc_loss_args_t *a = ctx;

	for (int64_t b = b0; b < b1; b++)
		a->dtype == NK_F64 ? fwd_f64(a, b) : fwd_f32(a, b);
}

static void bwd_tasks(void *ctx, int64_t b0, int64_t b1)
{
	const nk_ctc_loss_bwd_args_t *g = ctx;

	for (int64_t b = b0; b < b1; b++)
		g->f.dtype == NK_F64 ? bwd_f64(g, b) : bwd_f32(g, b);
}

int nk_ctc_loss_run(void *args)
{
	nk_ctc_loss_args_t *a = args;

	if (ctc_check(a, "ctc_loss"))
		return -1;
	nrt_parallel_for(a->N, 1, fwd_tasks, a);
	return 0;
}

int nk_ctc_loss_ref(void *args)
{
	nk_ctc_loss_args_t *a = args;

	if (ctc_check(a, "ctc_loss"))
		return -1;
	fwd_tasks(a, 0, a->N);
	return 0;
}

int nk_ctc_loss_bwd_run(void *args)
{
	nk_ctc_loss_bwd_args_t *g = args;

	if (ctc_check(&g->f, "ctc_loss_backward"))
		return -1;
	nrt_parallel_for(g->f.N, 1, bwd_tasks, g);
	return 0;
}

int nk_ctc_loss_bwd_ref(void *args)
{
	nk_ctc_loss_bwd_args_t *g = args;

	if (ctc_check(&g->f, "ctc_loss_backward"))
		return -1;
	bwd_tasks(g, 0, g->f.N);
	return 0;
}
