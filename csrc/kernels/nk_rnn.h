/* nk_rnn.h - kernel family: the pointwise parts of the fused recurrent cells (rnn.c), aten's
 * _thnn_fused_lstm_cell / _thnn_fused_gru_cell and their backward.  The two GEMMs of a step
 * (input x W_ih^T, hidden x W_hh^T) run before, as ordinary matmuls; these kernels take their results.
 * Same conventions as nk.h (argument struct, int nk_<family>_run(void *args), a _ref twin); the glue
 * includes this header directly.
 *
 * All buffers are contiguous, one dtype (f32, f64, bf16, f16); bf16/f16 are computed in f32 and rounded
 * once per output.  B batch rows, H hidden size; gate blocks lie side by side in a row (gate k of row b
 * at b*G*H + k*H).  Biases b_ih, b_hh ([G*H]) are both given or both NULL.  Threading: (row, hidden
 * block) tiles over the pool; the bias-gradient sums run over columns in row order, so every result is
 * independent of the thread count. */
#ifndef NK_RNN_H
#define NK_RNN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- LSTM cell, gates i, f, g, o (G = 4) -------------------------------------------------------- */
/* a_k = (ig_k + b_ih_k) + (hg_k + b_hh_k); i, f, o = sigmoid(a), g = tanh(a);
 * cy = f*cx + i*g, hy = o*tanh(cy); ws = [i, f, g, o] (the activated gates, [B, 4H]). */
typedef struct {
	int dtype;
	int64_t B, H;
	const void *ig, *hg;     /* [B, 4H] */
	const void *b_ih, *b_hh; /* [4H] or NULL */
	const void *cx;          /* [B, H] */
	void *hy, *cy;           /* [B, H] */
	void *ws;                /* [B, 4H] */
} nk_lstm_cell_args_t;
int nk_lstm_cell_run(void *args);
int nk_lstm_cell_ref(void *args);

/* Backward from ws, cx, cy.  dhy, dcy ([B, H]) may each be NULL (zero).  With t = tanh(cy):
 * dc = dhy*o*(1 - t^2) + dcy; dgates = [dc*g*i(1-i), dc*cx*f(1-f), dc*i*(1-g^2), dhy*t*o(1-o)];
 * dcx = dc*f.  dbias ([4H], may be NULL) = column sums of dgates over the B rows. */
typedef struct {
	int dtype;
	int64_t B, H;
	const void *dhy, *dcy;   /* [B, H] or NULL */
	const void *cx, *cy, *ws;
	void *dgates; /* [B, 4H] */
	void *dcx;    /* [B, H] */
	void *dbias;  /* [4H] or NULL */
} nk_lstm_cell_bwd_args_t;
int nk_lstm_cell_bwd_run(void *args);
int nk_lstm_cell_bwd_ref(void *args);

/* ---- GRU cell, gates r, z, n (G = 3) ------------------------------------------------------------ */
/* r = sigmoid((ig_r + b_ih_r) + (hg_r + b_hh_r)), z likewise, n = tanh((ig_n + b_ih_n) + r*(hg_n + b_hh_n)),
 * hy = (hx - n)*z + n; ws = [r, z, n, hx, hg_n + b_hh_n] ([B, 5H]). */
typedef struct {
	int dtype;
	int64_t B, H;
	const void *ig, *hg;     /* [B, 3H] */
	const void *b_ih, *b_hh; /* [3H] or NULL */
	const void *hx;          /* [B, H] */
	void *hy;                /* [B, H] */
	void *ws;                /* [B, 5H] */
} nk_gru_cell_args_t;
int nk_gru_cell_run(void *args);
int nk_gru_cell_ref(void *args);

/* Backward from ws: dn = dhy*(1-z)*(1-n^2), dz = dhy*(hx-n)*z(1-z), dr = dn*hn*r(1-r);
 * dig = [dr, dz, dn], dhg = [dr, dz, dn*r], dhx = dhy*z.  dbih, dbhh ([3H], may be NULL) = column sums
 * of dig and dhg. */
typedef struct {
	int dtype;
	int64_t B, H;
	const void *dhy, *ws;
	void *dig, *dhg; /* [B, 3H] */
	void *dhx;       /* [B, H] */
	void *dbih, *dbhh;
} nk_gru_cell_bwd_args_t;
int nk_gru_cell_bwd_run(void *args);
int nk_gru_cell_bwd_ref(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_RNN_H */
