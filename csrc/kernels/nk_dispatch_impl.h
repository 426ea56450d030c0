/* nk_dispatch_impl.h - the kernel-dispatch context (dispatch.c), internal to csrc/kernels: per family the
 * instruction set its kernels use and, where the family has one, its table of ISA-specific kernels.  A
 * kernel asks the context (nk_kernels()) and never tests CPU features itself.
 *
 * The context is built once per level, as BLIS's bli_cntx_init_*: the reference tables first, then
 * overridden by each level the CPU and NEURON_KERNELS allow.  New ISAs (AVX2, AMX) plug in as one more
 * override step in dispatch.c and their tables here. */
#ifndef NK_DISPATCH_IMPL_H
#define NK_DISPATCH_IMPL_H

#include <stdint.h>

#include "nk_attention_impl.h"
#include "nk_dispatch.h"
#include "nk_gemm_impl.h"
#include "nk_lnops_impl.h"
#include "nk_softmax_impl.h"

typedef struct {
	int level;                   /* nk_isa_t in force */
	uint8_t isa[NK_NFAM];        /* nk_isa_t per family */
	const nk_gemm_isa_t *gemm;   /* micro-kernels and packers (bf16 ones NULL without avx512_bf16) */
	const nk_rowops_t *softmax;  /* softmax row operations */
	const nk_lnops_t *layernorm; /* layer / rms norm row primitives */
	const nk_attops_t *attention;
	nk_gemm_isa_t gemm_table;    /* storage behind gemm */
} nk_kernels_t;

/* The context in force: the reference one while nk_force_reference / NEURON_KERNELS=ref say so. */
const nk_kernels_t *nk_kernels(void);

/* True when the family's AVX-512 kernels are to be used (the *_avx512.c entry points of nk_impl.h). */
static inline bool nk_family_avx512(int family)
{
	return nk_kernels()->isa[family] >= NK_ISA_AVX512;
}

/* True when the family's AVX2 + FMA kernels are to be used (the *_avx2.c entry points): the level is avx2
 * (a CPU without AVX-512, or NEURON_KERNELS=avx2) and the family has AVX2 kernels. */
static inline bool nk_family_avx2(int family)
{
	return nk_kernels()->isa[family] == NK_ISA_AVX2;
}

#endif /* NK_DISPATCH_IMPL_H */
