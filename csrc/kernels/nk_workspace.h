/* nk_workspace.h - per-thread scratch memory for the kernels that need some (packed GEMM panels, attention
 * tiles, split-reduction partials).  A buffer is allocated on a thread's first use of its slot, grown
 * on demand, kept for the thread's next calls and freed when the thread exits, so kernels do not
 * allocate on their hot path and threads that never run these kernels pay nothing.  Internal to
 * csrc/kernels. */
#ifndef NK_WORKSPACE_H
#define NK_WORKSPACE_H

#include <stddef.h>

enum {
	NK_WS_GEMM_B,    /* packed B block */
	NK_WS_GEMM_A,    /* packed A panel */
	NK_WS_GEMM_C,    /* f32 accumulation block (bf16/f16 C) */
	NK_WS_ATTENTION, /* attention tiles */
	NK_WS_PARTIALS,  /* per-chunk partial sums of split reductions (caller thread) */
	NK_WS_SPATIAL,   /* interp.c: f32 gradient plane (bf16/f16 backward), uint8 intermediate image */
	NK_WS_FFT,       /* fft.c: a row's double complex scratch */
	NK_WS_FFT_TABLE, /* fft.c: twiddles and Bluestein's chirp tables (calling thread) */
	NK_WS_SLOTS
};

/* This thread's buffer for `slot`, at least `bytes` long and 64-byte aligned; NULL if the host has no
 * memory for it (the caller then fails the kernel).  Contents are not preserved when it grows. */
void *nk_ws_get(int slot, size_t bytes);

#endif /* NK_WORKSPACE_H */
