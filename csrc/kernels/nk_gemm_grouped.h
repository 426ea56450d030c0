/* nk_gemm_grouped.h - grouped GEMM (aten::_grouped_mm, the mixture-of-experts matmul): G GEMMs whose
 * sizes come from a device array of group end offsets, run through the GEMM driver (nk_gemm_run).
 * Same conventions as nk.h (argument struct, int nk_<family>_run(void *args)). */
#ifndef NK_GEMM_GROUPED_H
#define NK_GEMM_GROUPED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The four layouts of aten::_grouped_mm (offs[g] is the end of group g, offs[-1] = 0 before it):
 *   NK_GMM_2D3D  A [M, K], B [G, K, N], C [M, N]:    C[rows g] = A[rows g] @ B[g]
 *   NK_GMM_3D2D  A [G, M, K], B [K, N], C [M, N]:    C[:, cols g] = A[g] @ B[:, cols g]
 *   NK_GMM_2D2D  A [M, K], B [K, N], C [G, M, N]:    C[g] = A[:, ks g] @ B[ks g, :]
 *   NK_GMM_3D3D  A [G, M, K], B [G, K, N], C [G, M, N]: C[g] = A[g] @ B[g] (no offs)
 * Strides in elements: s*[0] is the group (batch) stride of a 3-d operand (unused for a 2-d one),
 * s*[1] and s*[2] the row and column strides.  Rows/columns past offs[G-1] are set to 0.  offs must be
 * non-decreasing and at most the split dimension, else the kernel fails naming the offset.
 * dtype: f32, f64, bf16, f16 (A, B and C the same). */
enum { NK_GMM_2D3D, NK_GMM_3D2D, NK_GMM_2D2D, NK_GMM_3D3D };

typedef struct {
	int dtype, mode;
	int64_t G, M, N, K;
	const void *A; int64_t sa[3];
	const void *B; int64_t sb[3];
	void *C; int64_t sc[3];
	const int32_t *offs;
} nk_gemm_grouped_args_t;
int nk_gemm_grouped_run(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_GEMM_GROUPED_H */
