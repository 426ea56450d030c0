/* nk_attention_varlen.h - kernel family: variable-length ("packed") attention, the contract of aten's
 * _flash_attention_forward / _flash_attention_backward with cumulative sequence offsets (the varlen form
 * torch.nn.attention.varlen.varlen_attn calls), in attention_varlen.c.  Same conventions as nk.h (argument
 * struct, int nk_<op>_run(void *args)); included by its users only.
 *
 * Tokens of all sequences are packed along one dim: q [Tq_total, Hq, D], k [Tk_total, Hkv, D],
 * v [Tk_total, Hkv, Dv], out [Tq_total, Hq, Dv], each with element strides (token, head, dim) in
 * f.sq[2], f.sq[1], f.sq[3] (and the same slots of sk, sv, so); f.sq[0] etc. are unused.  Sequence s holds
 * the queries cu_q[s] .. cu_q[s+1]-1 and the keys cu_k[s] .. cu_k[s+1]-1 (cu_* int32 or int64, nseq+1
 * entries, read when the kernel runs: they may be produced by earlier queued kernels).  Each sequence is
 * one batch element of nk_attention_run (f's dtype, heads, GQA, scale, causal: key j visible to query i
 * iff j <= i, so causal sequences need as many keys as queries).  lse [Hq, Tq_total] f32 (the flash
 * layout).  Tokens past cu_q[nseq] get out = 0 and lse = -inf; backward gives 0 gradients to the queries
 * and keys that no sequence holds.  lse_tmp is scratch of Hq * max_q floats, max_q (max_k) bounding every
 * sequence's query (key) count.  A bad offset (decreasing, beyond the tensor, longer than max_q / max_k)
 * or causal lengths that differ is a kernel error naming the sequence.  No mask, no dropout. */
#ifndef NK_ATTENTION_VARLEN_H
#define NK_ATTENTION_VARLEN_H

#include <stdint.h>

#include "nk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
	nk_attention_args_t f; /* B, Tq, Tk, mask, dropout and lse unused; the rest as above */
	const void *cu_q, *cu_k;
	int cu_dtype; /* NK_I32 or NK_I64 */
	int64_t nseq, total_q, total_k, max_q, max_k;
	float *lse;     /* [Hq, total_q] */
	float *lse_tmp; /* Hq * max_q floats */
} nk_attention_varlen_args_t;
int nk_attention_varlen_run(void *args);

typedef struct {
	nk_attention_varlen_args_t v; /* the forward's arguments, with out and lse as computed */
	const void *dout; int64_t sdo[4];
	void *dq; int64_t sdq[4];
	void *dk; int64_t sdk[4];
	void *dv; int64_t sdv[4];
} nk_attention_varlen_bwd_args_t;
int nk_attention_varlen_bwd_run(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_ATTENTION_VARLEN_H */
