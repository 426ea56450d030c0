/* nk_ctc_loss.h - kernel family: the connectionist temporal classification loss (aten _ctc_loss and
 * _ctc_loss_backward), in ctc_loss.c.  Same conventions as nk.h (argument struct, int nk_<op>_run(void
 * *args), a _ref twin); included by its users only, like nk_rnn.h.
 *
 * log_probs lp: [T, N, C] with element strides lp_st (dtype f32 or f64); targets: contiguous int32 or
 * int64 (tdtype), [N, *] padded or 1-D concatenated: batch b's labels start at element off[b].  lens: 3N
 * int64, the input lengths, the target lengths and the target offsets off.  S is the longest target; every
 * label must lie in [0, C) (checked: a kernel error otherwise).  Forward: nll [N] (-log p(target | input)) and alpha [N, T, 2S+1] (log alpha of Graves et
 * al. eq. 6-7; row 0 beyond s = 1 and every entry past a batch's lengths are -inf).  Backward: grad
 * [T, N, C] contiguous, = (exp(lp) - exp(log sum over s with l'(s) = c of alpha*beta + nll - lp)) * gout[b]
 * (eq. 16), 0 past a batch's input length and for a batch whose nll is inf when zero_infinity; beta
 * [N, T, 2S+1] is workspace.  The arithmetic is the dtype's (float or double), in the order aten's CPU
 * kernel takes.  Threading: batches over the pool. */
#ifndef NK_CTC_LOSS_H
#define NK_CTC_LOSS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
	int dtype, tdtype;
	int64_t T, N, C, S, blank;
	int64_t lp_st[3];
	const void *lp, *targets;
	const int64_t *lens;
	void *nll, *alpha;
} nk_ctc_loss_args_t;
int nk_ctc_loss_run(void *args);
int nk_ctc_loss_ref(void *args);

typedef struct {
	nk_ctc_loss_args_t f; /* nll and alpha are read */
	const void *gout;     /* [N], element stride gout_st */
	int64_t gout_st;
	bool zero_infinity;
	void *grad, *beta;
} nk_ctc_loss_bwd_args_t;
int nk_ctc_loss_bwd_run(void *args);
int nk_ctc_loss_bwd_ref(void *args);

#ifdef __cplusplus
}
#endif
#endif
