/* nk_dispatch.h - the kernel-dispatch point, public part: the CPU the library found, the level
 * NEURON_KERNELS forces, and the instruction set each kernel family uses (dispatch.c).
 *
 * NEURON_KERNELS = ref | portable | avx2 | avx512 | amx caps every family at that level (a level the CPU
 * lacks falls back to the best it has); ref runs the reference kernels, portable the optimized portable C.
 * Unset or any other value: the best the CPU has.  A family without kernels at a level uses the best it
 * has below it (today: no family has AVX2 kernels, and at amx only the GEMM family has kernels of its own,
 * the bf16 and int8 tile GEMMs of gemm_amx.c; the others keep AVX-512).
 */
#ifndef NK_DISPATCH_H
#define NK_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { NK_ISA_REF, NK_ISA_PORTABLE, NK_ISA_AVX2, NK_ISA_AVX512, NK_ISA_AMX, NK_NISA } nk_isa_t;

typedef enum {
	NK_FAM_CAST,      /* block loads/stores of dtype.c (bf16 <-> f32 runs) */
	NK_FAM_POINTWISE, /* pointwise.c, foreach ops (optim.c), activations (pointwise_act_avx512.c) */
	NK_FAM_REDUCE,
	NK_FAM_RANDOM,
	NK_FAM_OPTIM,     /* fused Adam */
	NK_FAM_GEMM,      /* GEMM, GEMV and the GEMMs inside attention */
	NK_FAM_ATTENTION,
	NK_FAM_SOFTMAX,
	NK_FAM_LAYERNORM, /* layer norm and rms norm (the lnops row primitives) */
	NK_FAM_NORM,      /* batch and group norm */
	NK_FAM_CONV,
	NK_FAM_POOL,
	NK_NFAM
} nk_family_t;

/* What cpuid (and the OS, through XCR0 and the AMX permission request) allow. */
typedef struct {
	char vendor[13];                /* "GenuineIntel", "AuthenticAMD", ... ("" off x86) */
	unsigned family, model;         /* display family / model */
	bool avx2, fma;
	bool avx512;                    /* F + BW + VL + DQ with ZMM state enabled by the OS */
	bool avx512_bf16, avx512_fp16;
	bool amx_tile, amx_bf16, amx_int8; /* cpuid bits with tile state enabled in XCR0 */
	bool amx_permitted;             /* arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) succeeded */
	size_t l1d_bytes, l2_bytes, l3_bytes; /* data / unified caches from cpuid (0: not reported) */
} nk_cpu_t;

const nk_cpu_t *nk_cpu(void);
const char *nk_isa_name(int isa);
const char *nk_family_name(int family);
/* The level in force (NEURON_KERNELS or the CPU's best; NK_ISA_REF while the reference is forced). */
int nk_kernels_level(void);
/* The instruction set a family's kernels use now. */
int nk_family_isa(int family);
/* Writes "cpu ...\nlevel ...\n<family> <isa>\n..." into buf (snprintf semantics: the length it needed). */
size_t nk_kernels_describe(char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* NK_DISPATCH_H */
