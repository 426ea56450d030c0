/* nc_program.h - the prelude of every program the graph compiler generates.
 *
 * A program is a shared object exporting:
 *   int nc_init(const nc_rt_t *rt)            store the runtime's function table (checks the ABI)
 *   int64_t nc_plan(const int64_t *S, int64_t *off)
 *                                             workspace bytes for the symbol values S; fills the
 *                                             byte offset of every workspace buffer
 *   int nc_seg<k>(void *args)                 segment k: an nrt_kernel_fn launched on a queue; args
 *                                             is int64[nsyms] symbol values, then the segment's
 *                                             buffer pointers
 *   const char *nc_seg_name(int k)            the launch name of segment k (static storage)
 * Programs never link against the runtime or the kernel library: they call them through nc_rt_t,
 * (nc_rt.h), which nc_rt_table() fills from the loaded extension.  The build pastes this header
 * with its local includes (nc_rt.h, nk.h) into one text (gen_prelude.py -> nc_prelude()), which the
 * frontend puts in front of the generated code, so a kept source file compiles on its own.
 */
#ifndef NC_PROGRAM_H
#define NC_PROGRAM_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nc_rt.h"
#include "nk.h"


typedef struct {
	const int64_t *S;
	void *const *P;
	int fail;      /* a library call inside a horizontal group failed (set once, atomically) */
	char msg[256]; /* its message, reported by the segment after the group's parallel loop */
} nc_ctx_t;

#define NC_EXPORT __attribute__((visibility("default")))
#define NC_CHUNK 4096 /* elements per tile of a pointwise kernel */
#define NC_CC 512     /* most columns per tile of a column reduction (accumulator arrays) */
#define NC_CBLK 8     /* rows per float block sum of a column sum/mean (then added in double) */

#include <time.h>
static inline int64_t nc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t nc_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* a kernel over tiles [off + b, off + e): runs a GEMM epilogue on the tiles of one row block */
typedef struct {
	void (*fn)(void *ctx, int64_t b, int64_t e);
	void *ctx;
	int64_t off;
} nc_off_t;
static __attribute__((unused)) void nc_off_run(void *c, int64_t b, int64_t e)
{
	const nc_off_t *o = (const nc_off_t *)c;
	o->fn(o->ctx, o->off + b, o->off + e);
}
static inline int64_t nc_max(int64_t a, int64_t b) { return a > b ? a : b; }
/* a horizontally fused kernel: independent fused kernels of one segment (e.g. the update of every
 * parameter of an optimizer step) run as one parallel loop over the concatenation of their task
 * ranges, like a multi-tensor foreach kernel; task t of member i is fn[i]'s task t - (T[0]+..+T[i-1]) */
typedef struct {
	void *ctx;
	int n;
	void (*const *fn)(void *ctx, int64_t b, int64_t e);
	const int64_t *T;
} nc_hz_t;
static __attribute__((unused)) void nc_hz_run(void *c, int64_t b, int64_t e)
{
	const nc_hz_t *h = (const nc_hz_t *)c;
	int64_t o = 0;
	for (int i = 0; i < h->n && o < e; o += h->T[i], i++) {
		int64_t lo = b > o ? b - o : 0, hi = e - o < h->T[i] ? e - o : h->T[i];
		if (lo < hi)
			h->fn[i](h->ctx, lo, hi);
	}
}
/* a double passed in an int64 launch slot (a CPU scalar tensor read at launch time) */
static inline double nc_i2d(int64_t i) { double d; memcpy(&d, &i, sizeof d); return d; }
/* column tile of a column reduction over L columns: about a quarter of the row (so several tiles
 * run in parallel), a multiple of 16, at most NC_CC */
static inline int64_t nc_colw(int64_t L) { return L <= 16 ? (L > 0 ? L : 1) : nc_min(NC_CC, ((L + 3) / 4 + 15) / 16 * 16); }
static inline int64_t nc_fdiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t nc_cdiv(int64_t a, int64_t b) { return -nc_fdiv(-a, b); }
static inline int64_t nc_mod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }

/* bf16 / f16 <-> f32: round to nearest even, NaN stays NaN */
static inline float nc_bf2f(uint16_t u) { union { uint32_t i; float f; } c; c.i = (uint32_t)u << 16; return c.f; }
static inline uint16_t nc_f2bf(float f)
{
	union { uint32_t i; float f; } c;
	c.f = f;
	uint32_t i = c.i;
	if ((i & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((i >> 16) | 0x40);
	return (uint16_t)((i + 0x7fffu + ((i >> 16) & 1u)) >> 16);
}
static inline float nc_rbf(float f) { return nc_bf2f(nc_f2bf(f)); }
static inline float nc_h2f(uint16_t u) { _Float16 h; memcpy(&h, &u, 2); return (float)h; }
static inline uint16_t nc_f2h(float f) { _Float16 h = (_Float16)f; uint16_t u; memcpy(&u, &h, 2); return u; }
static inline float nc_rh(float f) { return (float)(_Float16)f; }

/* integer helpers with ATen's semantics (floor division, Python remainder); x / 0 gives 0 */
static inline int64_t nc_idiv_floor(int64_t a, int64_t b) { return b ? nc_fdiv(a, b) : 0; }
static inline int64_t nc_idiv_trunc(int64_t a, int64_t b) { return b ? a / b : 0; }
static inline int64_t nc_irem(int64_t a, int64_t b) { return b ? nc_mod(a, b) : 0; }
static inline int64_t nc_ifmod(int64_t a, int64_t b) { return b ? a % b : 0; }
static inline int64_t nc_ipow(int64_t a, int64_t b)
{
	int64_t r = 1;
	if (b < 0)
		return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
	while (b) {
		if (b & 1)
			r *= a;
		a *= a;
		b >>= 1;
	}
	return r;
}
static inline float nc_remf(float a, float b) { float m = fmodf(a, b); return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; }
static inline double nc_rem(double a, double b) { double m = fmod(a, b); return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; }

/* vector variants from glibc's libmvec (GCC calls _ZGV*_expf & co. inside `omp simd` loops).  With
 * -DNC_SCALAR_LIBM (NEURON_COMPILE_SCALAR_LIBM=1) programs call the scalar libm the eager kernels'
 * scalar formulas call, so both agree bit for bit (the tests); libmvec is within a few ulp of it. */
#ifndef NC_SCALAR_LIBM
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
float erff(float);
#pragma omp declare simd notinbranch
float sinf(float);
#pragma omp declare simd notinbranch
float cosf(float);
#pragma omp declare simd notinbranch
float expm1f(float);
#pragma omp declare simd notinbranch
float log1pf(float);
#pragma omp declare simd notinbranch
float powf(float, float);
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
double log(double);
#pragma omp declare simd notinbranch
double tanh(double);
#pragma omp declare simd notinbranch
double erf(double);
#endif

/* Workspace placement: greedy by size (largest first), each buffer at the lowest 64-byte aligned
 * offset that overlaps no placed buffer whose live range [st, en] intersects its own. */
static int64_t nc_plan_greedy(int n, const int64_t *sz, const int *st, const int *en, int64_t *off)
{
	int order[n > 0 ? n : 1];
	int64_t total = 0;
	for (int i = 0; i < n; i++) {
		int k = i;
		while (k > 0 && sz[order[k - 1]] < sz[i]) {
			order[k] = order[k - 1];
			k--;
		}
		order[k] = i;
	}
	for (int a = 0; a < n; a++) {
		int i = order[a];
		int64_t size = (sz[i] + 63) & ~(int64_t)63, o = 0;
		for (int moved = 1; moved;) {
			moved = 0;
			for (int b = 0; b < a; b++) {
				int j = order[b];
				if (en[j] < st[i] || en[i] < st[j])
					continue;
				int64_t oj = off[j], ej = oj + ((sz[j] + 63) & ~(int64_t)63);
				if (o < ej && oj < o + size) {
					o = ej;
					moved = 1;
				}
			}
		}
		off[i] = o;
		if (o + size > total)
			total = o + size;
	}
	return total;
}

/* Bytes spanned by a strided tensor (0 if it has no elements). */
static inline int64_t nc_span(int rank, const int64_t *size, const int64_t *stride, int64_t esize)
{
	int64_t last = 0;
	for (int d = 0; d < rank; d++) {
		if (size[d] == 0)
			return 0;
		last += (size[d] - 1) * (stride[d] < 0 ? -stride[d] : stride[d]);
	}
	return (last + 1) * esize;
}

/* The scalar formula of every pointwise op, shared with the eager kernels (after the libmvec
 * declarations above, which its calls use): pwf_scalar (float: f32, bf16, f16) and pwd_scalar (f64),
 * always inlined so that a call with a constant op folds to that op's formula. */
#define PW_SCALAR_INLINE static inline __attribute__((always_inline, unused))
#define PW_T float
#define PW_M(fn) fn##f
#define PW_NAME(x) pwf_##x
#include "pointwise_scalar.inc"
#undef PW_T
#undef PW_M
#undef PW_NAME
#define PW_T double
#define PW_M(fn) fn
#define PW_NAME(x) pwd_##x
#include "pointwise_scalar.inc"
#undef PW_T
#undef PW_M
#undef PW_NAME

#endif /* NC_PROGRAM_H */
