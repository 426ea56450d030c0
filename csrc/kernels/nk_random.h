/* nk_random.h - kernel family: random numbers, counter-based (Philox4x32-10) on
 * (seed, offset + element index): uniform/normal/bernoulli/randint and dropout (random.c), the other
 * distributions, randperm and multinomial (random_dist.c).
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_RANDOM_H
#define NK_RANDOM_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- random: counter-based (Philox4x32-10) on (seed, offset + element index) ------------------- */
typedef enum {
	NK_RNG_UNIFORM,    /* [a, b) */
	NK_RNG_NORMAL,     /* mean a, std b */
	NK_RNG_BERNOULLI,  /* 1 with probability a */
	NK_RNG_RANDINT,    /* integers in [ia, ib) */
} nk_rng_kind_t;
typedef struct {
	nk_iter_t it;      /* one operand (the output), any strides */
	int kind;
	double a, b;
	int64_t ia, ib;
	uint64_t seed, offset;
} nk_random_args_t;
int nk_random_run(void *args);
/* dropout on contiguous n elements: mask[i] = u >= p (bool), out = x * mask / (1 - p). */
typedef struct {
	int dtype;
	int64_t n;
	double p;
	uint64_t seed, offset;
	const void *x; void *out; void *mask;
} nk_dropout_args_t;
int nk_dropout_run(void *args);
/* Number of offset units consumed by n elements (callers advance the generator's offset by it). */
uint64_t nk_random_offset_increment(int64_t n);


/* ---- more random distributions (random_dist.c): Philox on (seed, offset + element) as random.c ---- */
typedef enum { NK_DIST_EXPONENTIAL, NK_DIST_CAUCHY, NK_DIST_GEOMETRIC, NK_DIST_LOG_NORMAL } nk_dist_kind_t;
/* exponential(lambda a), cauchy(median a, sigma b), geometric(p a; any non-bool dtype),
 * log_normal(mean a, std b).  One output operand, any strides; consumes numel counters. */
typedef struct {
	nk_iter_t it;
	int kind;
	double a, b;
	uint64_t seed, offset;
} nk_dist_args_t;
int nk_dist_run(void *args);
int nk_dist_ref(void *args);
/* a random permutation of [0, n) into out (dtype, contiguous); work: n int64.  Consumes n counters. */
typedef struct {
	int dtype;
	int64_t n;
	void *out;
	int64_t *work;
	uint64_t seed, offset;
} nk_randperm_args_t;
int nk_randperm_run(void *args);
/* S category indices per row of the weights p [D, C] (float dtype, contiguous) into out [D, S] int64,
 * with or without replacement; work: 2*D*C doubles.  Consumes D*max(C, S) counters. Invalid rows
 * (negative, inf, NaN, zero sum, too few nonzero without replacement) fail the kernel. */
typedef struct {
	int dtype;
	int64_t D, C, S;
	bool replacement;
	const void *p;
	int64_t *out;
	void *work;
	uint64_t seed, offset;
} nk_multinomial_args_t;
int nk_multinomial_run(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_RANDOM_H */
