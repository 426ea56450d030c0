/* act_micro.c - single-thread microbenchmark of the dedicated AVX-512 activation loops
 * (nk_act_f32_avx512, act_avx512.c): ns per element for gelu (erf, tanh), gelu_backward (erf, tanh), silu
 * and silu_backward
 * on an L2-resident size and on a DRAM size (streamed stores), best of REPS.  Not part of any build target:
 *   cc -O2 -Icsrc/kernels -Icsrc/runtime bench/act_micro.c build/libneuron.a -lm -pthread -o /tmp/act_micro
 *   /tmp/act_micro [L2_ELEMS] [BIG_ELEMS] [REPS] [BLOCK]
 * BLOCK > 0: the DRAM size is done in calls of BLOCK elements (as nk_pointwise_run's streamed rows do).
 * With -DACT_FN2=other_symbol (a second build of act_avx512.c with nk_act_f32_avx512 renamed), both are
 * timed, repetitions alternating, so that a shared machine's noise hits both alike.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nk.h"

#ifndef ACT_FN
#define ACT_FN nk_act_f32_avx512
#endif
bool ACT_FN(int op, int64_t ia, float *o, const float *x, const float *y, int64_t n, bool stream);
void nk_stream_fence(void);

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#ifdef ACT_FN2
bool ACT_FN2(int op, int64_t ia, float *o, const float *x, const float *y, int64_t n, bool stream);
#define NFN 2
#else
#define NFN 1
#endif
typedef bool (*act_fn)(int op, int64_t ia, float *o, const float *x, const float *y, int64_t n, bool stream);

static int64_t block;

/* best time per element (ns) of each function, repetitions alternating between them */
static void run(double *best, int op, int ia, float *o, const float *x, const float *g, int64_t n, int reps,
		bool stream)
{
#ifdef ACT_FN2
	act_fn fns[NFN] = { ACT_FN, ACT_FN2 };
#else
	act_fn fns[NFN] = { ACT_FN };
#endif
	int bin = op == NK_OP_GELU_BACKWARD || op == NK_OP_SILU_BACKWARD;
	int inner = n < (1 << 20) ? (int)((1 << 21) / n) : 1;
	int64_t b = stream && block > 0 ? block : n;

	for (int f = 0; f < NFN; f++)
		best[f] = 1e30;
	for (int r = 0; r < reps; r++)
		for (int f = 0; f < NFN; f++) {
			double t0 = now();

			for (int k = 0; k < inner; k++)
				for (int64_t i = 0; i < n; i += b)
					fns[f](op, ia, o + i, (bin ? g : x) + i, bin ? x + i : NULL, n - i < b ? n - i : b, stream);
			if (stream)
				nk_stream_fence();
			double t = (now() - t0) / inner * 1e9 / (double)n;

			if (t < best[f])
				best[f] = t;
		}
}

int main(int argc, char **argv)
{
	int64_t small = argc > 1 ? atoll(argv[1]) : 32768, big = argc > 2 ? atoll(argv[2]) : (int64_t)16 << 20;
	int reps = argc > 3 ? atoi(argv[3]) : 7;
	block = argc > 4 ? atoll(argv[4]) : 0;
	float *x = aligned_alloc(64, big * 4), *g = aligned_alloc(64, big * 4), *o = aligned_alloc(64, big * 4);
	static const int ops[][2] = { { NK_OP_GELU, 0 }, { NK_OP_GELU, 1 }, { NK_OP_GELU_BACKWARD, 0 }, { NK_OP_GELU_BACKWARD, 1 },
				      { NK_OP_SILU, 0 }, { NK_OP_SILU_BACKWARD, 0 } };
	static const char *names[] = { "gelu erf", "gelu tanh", "gelu_bwd erf", "gelu_bwd tanh", "silu", "silu_bwd" };

	srand(1);
	for (int64_t i = 0; i < big; i++) {
		x[i] = (float)rand() / RAND_MAX * 8 - 4;
		g[i] = (float)rand() / RAND_MAX * 2 - 1;
	}
	memset(o, 0, big * 4);
	for (int k = 0; k < 6; k++) {
		double a[NFN], c[NFN];

		run(a, ops[k][0], ops[k][1], o, x, g, small, reps, false);
		run(c, ops[k][0], ops[k][1], o, x, g, big, reps > 5 ? 5 : reps, true);
		printf("%-14s  L2 (%lld):", names[k], (long long)small);
		for (int f = 0; f < NFN; f++)
			printf(" %.4f", a[f]);
		printf(" ns/elem   DRAM (%lld, stream):", (long long)big);
		for (int f = 0; f < NFN; f++)
			printf(" %.4f", c[f]);
		printf(" ns/elem\n");
	}
	return 0;
}
