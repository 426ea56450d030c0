/* nk_igemm.h - int8 x int8 -> int32 GEMM (torch._int_mm), igemm.c.  Its own header so that the glue file
 * that calls it (ops_gemm.cpp) is the only one rebuilt when it changes. */
#ifndef NK_IGEMM_H
#define NK_IGEMM_H

#include "nk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C[b] = A[b] @ B[b] (+ C[b] when beta != 0) with B int8, A int8 (dtype NK_I8) or uint8 (NK_U8), C int32,
 * the strides of nk_gemm_args_t; products summed in int32 with wrap-around (as aten's CPU _int_mm); alpha
 * is ignored.  nk_int_mm_run: the AMX tiles (TDPBSSD) at the amx level, else rows over the pool;
 * nk_int_mm_ref: the triple loop. */
int nk_int_mm_run(void *args);
int nk_int_mm_ref(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_IGEMM_H */
