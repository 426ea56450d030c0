/* nk_fft.h - kernel family: the discrete Fourier transform (fft.c).  Same conventions as nk.h; the glue
 * includes this header directly.
 *
 * nk_fft_run: a 1-D complex DFT of length n along the rows of a [batch, n] tensor, in and out complex
 * (NK_C64 or NK_C128, nk_complex.h) with element strides (rows is_b / os_b apart, elements is_n / os_n
 * apart; out must not overlap in).  forward: X[k] = sum_j x[j] exp(-2 pi i jk/n); backward: the + sign
 * (unnormalized); every output is multiplied by scale.  Lengths whose prime factors are all <= 64 run
 * mixed-radix (decimation in time, one twiddle table); others Bluestein's chirp-z convolution through
 * a power-of-two FFT.  Computed in double complex (c64 rounded once at the end); rows split over the
 * pool, scratch from the per-thread workspace (no allocation on the hot path after the first call).
 */
#ifndef NK_FFT_H
#define NK_FFT_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
	int dtype;      /* NK_C64 or NK_C128 */
	int64_t n, batch;
	const void *in; int64_t is_n, is_b;
	void *out; int64_t os_n, os_b;
	bool forward;
	double scale;
} nk_fft_args_t;
int nk_fft_run(void *args);

#ifdef __cplusplus
}
#endif

#endif
