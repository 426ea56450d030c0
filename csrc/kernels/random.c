/* random.c - counter-based random fills and dropout (Philox4x32-10, Random123).
 *
 * Element k (the linear index in the iterator's order, or in [0, n) for dropout) draws the Philox
 * block with key = seed and 128-bit counter = (offset + k, 0), and uses its four words:
 *   uniform f64:   u = 53 bits of (w0, w1) in [0, 1), out = a + (b - a) * u;
 *   uniform other: u = 24 bits of w0; a result that rounds up to b is stepped one ulp below b;
 *   normal f64:    Box-Muller, u1 = 1 - 53 bits of (w0, w1) in (0, 1], u2 = 53 bits of (w2, w3),
 *                  out = a + b * sqrt(-2 log u1) cos(2 pi u2) in double;
 *   normal other:  the same in float with 24-bit u1 = 1 - w0, u2 = w1 (as PyTorch's float normal_);
 *   bernoulli:     out = (53 bits of (w0, w1) < a);
 *   randint:       out = ia + (w0 | w1 << 32) mod (ib - ia)  (w0 alone when the range fits 32 bits);
 *   dropout:       keep = (53 bits of (w0, w1) >= p), out = keep ? x * (1 / (1 - p)) : 0.
 * Every element depends only on (seed, offset, k), so results do not depend on threads or blocking.
 * A launch consumes nk_random_offset_increment(n) counter values: callers advance their offset by it.
 * The run generates the words of 16 consecutive counters at once (AVX-512 Philox when the CPU has
 * it, random_avx512.c, bit-identical to the scalar one) and dropout on dense f32 is fully vectorized;
 * the references call the scalar generator per element.  With AVX-512, float normals use vector
 * log/cos (within a few ulp of the reference's logf/cosf; the same for every thread count, but not
 * bit-identical to the reference or to CPUs without AVX-512); everything else is bit-identical.
 */
#include "nk_dispatch_impl.h"
#include "nk_impl.h"
#include "nrt.h"

#define RNG_GRAIN (NK_PARALLEL_GRAIN / 4)

uint64_t nk_random_offset_increment(int64_t n)
{
	return n <= 0 ? 0 : ((uint64_t)n + 3) / 4 * 4;
}

typedef struct {
	int kind, dt;
	double a, b;
	int64_t ia;
	uint64_t range;
	uint64_t seed, offset;
	bool avx512;
} rng_ctx_t;

static const char *const rng_names[] = {"uniform", "normal", "bernoulli", "randint"};

/* One step toward -inf of a bf16/f16 bit pattern (sign-magnitude). */
static uint16_t rng_h_prev(uint16_t h)
{
	if ((h & 0x7fff) == 0)
		return 0x8001;
	return (h & 0x8000) ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
}

/* Stores a uniform draw in the output dtype, kept strictly below b. */
static void rng_store_uniform(const rng_ctx_t *c, char *dst, const nk_philox_out_t *w)
{
	if (c->dt == NK_F64) {
		double v = c->a + (c->b - c->a) * nk_u64_to_unit_f64(w->v[0], w->v[1]);
		if (v >= c->b && c->b > c->a)
			v = nextafter(c->b, -INFINITY);
		*(double *)dst = v;
		return;
	}
	double v = c->a + (c->b - c->a) * (double)nk_u32_to_unit_f32(w->v[0]);
	if (c->dt == NK_F32) {
		float f = (float)v;
		while (f >= c->b && c->b > c->a)
			f = nextafterf(f, -INFINITY);
		*(float *)dst = f;
		return;
	}
	uint16_t h = c->dt == NK_BF16 ? nk_f32_to_bf16((float)v) : nk_f32_to_f16((float)v);
	for (;;) {
		float f = c->dt == NK_BF16 ? nk_bf16_to_f32(h) : nk_f16_to_f32(h);
		if (!(f >= c->b && c->b > c->a))
			break;
		h = rng_h_prev(h);
	}
	*(uint16_t *)dst = h;
}

/* Writes the value drawn from the words w to dst. */
static void rng_transform(const rng_ctx_t *c, char *dst, nk_philox_out_t w)
{
	switch (c->kind) {
	case NK_RNG_UNIFORM:
		rng_store_uniform(c, dst, &w);
		return;
	case NK_RNG_NORMAL:
		if (c->dt == NK_F64) {
			double u1 = 1.0 - nk_u64_to_unit_f64(w.v[0], w.v[1]);
			double u2 = nk_u64_to_unit_f64(w.v[2], w.v[3]);
			double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
			*(double *)dst = c->a + c->b * z;
		} else {
			float u1 = 1.0f - nk_u32_to_unit_f32(w.v[0]);
			float u2 = nk_u32_to_unit_f32(w.v[1]);
			float z = sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795865f * u2);
			nk_store_f32(dst, c->dt, (float)c->a + (float)c->b * z);
		}
		return;
	case NK_RNG_BERNOULLI:
		nk_store_i64(dst, c->dt, nk_u64_to_unit_f64(w.v[0], w.v[1]) < c->a);
		return;
	default: {
		uint64_t r = c->range <= 0x100000000ull ? w.v[0] % c->range
							: (((uint64_t)w.v[1] << 32) | w.v[0]) % c->range;
		nk_store_i64(dst, c->dt, (int64_t)((uint64_t)c->ia + r));
		return;
	}
	}
}

static int rng_prepare(rng_ctx_t *c, const nk_random_args_t *a)
{
	memset(c, 0, sizeof *c);
	c->kind = a->kind;
	c->dt = a->it.dtype[0];
	c->a = a->a;
	c->b = a->b;
	c->ia = a->ia;
	c->seed = a->seed;
	c->offset = a->offset;
	c->avx512 = nk_family_avx512(NK_FAM_RANDOM);
	if (a->kind < NK_RNG_UNIFORM || a->kind > NK_RNG_RANDINT) {
		nrt_kernel_fail("nk_random: unknown kind %d", a->kind);
		return -1;
	}
	const char *name = rng_names[a->kind];
	if ((a->kind == NK_RNG_UNIFORM || a->kind == NK_RNG_NORMAL) && !nk_is_float(c->dt)) {
		nrt_kernel_fail("nk_random: %s not implemented for dtype %s", name, nk_dtype_name(c->dt));
		return -1;
	}
	if (a->kind == NK_RNG_UNIFORM && !(a->a <= a->b)) {
		nrt_kernel_fail("nk_random: uniform expects from <= to, got from=%g to=%g", a->a, a->b);
		return -1;
	}
	if (a->kind == NK_RNG_NORMAL && !(a->b >= 0)) {
		nrt_kernel_fail("nk_random: normal expects std >= 0.0, got std=%g", a->b);
		return -1;
	}
	if (a->kind == NK_RNG_BERNOULLI && !(a->a >= 0 && a->a <= 1)) {
		nrt_kernel_fail("nk_random: bernoulli expects 0 <= p <= 1, got p=%g", a->a);
		return -1;
	}
	if (a->kind == NK_RNG_RANDINT) {
		if (a->ib <= a->ia) {
			nrt_kernel_fail("nk_random: randint expects from < to, got from=%lld to=%lld",
					(long long)a->ia, (long long)a->ib);
			return -1;
		}
		c->range = (uint64_t)a->ib - (uint64_t)a->ia;
	}
	return 0;
}

static void rng_element(const rng_ctx_t *c, char *dst, uint64_t k)
{
	rng_transform(c, dst, nk_philox4x32_10(c->seed, c->offset + k, 0));
}

/* Words of the blocks for counters ctr .. ctr + n - 1, n <= 16. */
static void rng_words(uint64_t seed, uint64_t ctr, int64_t n, bool avx512, uint32_t w[4][16])
{
	if (avx512) {
		nk_philox16_avx512(seed, ctr, w);
		return;
	}
	for (int64_t j = 0; j < n; j++) {
		nk_philox_out_t o = nk_philox4x32_10(seed, ctr + (uint64_t)j, 0);
		for (int q = 0; q < 4; q++)
			w[q][j] = o.v[q];
	}
}

/* AVX-512 transforms of 16 words for f32 uniform and float normal; false if not applicable. */
static bool rng_transform16(const rng_ctx_t *c, char *dst, int64_t st, int64_t m, const uint32_t w[4][16])
{
	float v[16];
	if (c->kind == NK_RNG_NORMAL && c->dt != NK_F64) {
		nk_normal16_f32_avx512(w, (float)c->a, (float)c->b, v);
		for (int64_t j = 0; j < m; j++)
			nk_store_f32(dst + j * st, c->dt, v[j]);
		return true;
	}
	if (c->kind == NK_RNG_UNIFORM && c->dt == NK_F32) {
		nk_uniform16_f32_avx512(w, c->a, c->b, v);
		for (int64_t j = 0; j < m; j++) {
			while (v[j] >= c->b && c->b > c->a)
				v[j] = nextafterf(v[j], -INFINITY);
			*(float *)(dst + j * st) = v[j];
		}
		return true;
	}
	return false;
}

static void rng_row(void *ctx, char *const *data, const int64_t *st, int64_t n, int64_t lin)
{
	const rng_ctx_t *c = ctx;
	uint32_t w[4][16];
	for (int64_t i0 = 0; i0 < n; i0 += 16) {
		int64_t m = n - i0 < 16 ? n - i0 : 16;
		rng_words(c->seed, c->offset + (uint64_t)(lin + i0), m, c->avx512, w);
		if (c->avx512 && rng_transform16(c, data[0] + i0 * st[0], st[0], m, w))
			continue;
		for (int64_t j = 0; j < m; j++) {
			nk_philox_out_t o = {{w[0][j], w[1][j], w[2][j], w[3][j]}};
			rng_transform(c, data[0] + (i0 + j) * st[0], o);
		}
	}
}

int nk_random_run(void *args)
{
	if (nk_using_reference())
		return nk_random_ref(args);
	const nk_random_args_t *a = args;
	nk_loop_t L;
	rng_ctx_t c;
	if (nk_loop_init(&L, &a->it, 1, 1, "nk_random") || rng_prepare(&c, a))
		return -1;
	nk_loop_parallel(&L, RNG_GRAIN, rng_row, &c);
	return 0;
}

/* Reference: one element at a time, multi-index decoded per element. */
int nk_random_ref(void *args)
{
	const nk_random_args_t *a = args;
	nk_loop_t L;
	rng_ctx_t c;
	if (nk_loop_init(&L, &a->it, 1, 1, "nk_random") || rng_prepare(&c, a))
		return -1;
	for (int64_t k = 0; k < L.numel; k++)
		rng_element(&c, a->it.data[0] + nk_iter_offset(&a->it, 0, k), (uint64_t)k);
	return 0;
}

/* ---- dropout ------------------------------------------------------------------------------------- */
static int dropout_check(const nk_dropout_args_t *a)
{
	if (!nk_is_float(a->dtype)) {
		nrt_kernel_fail("nk_dropout: dtype %s is not floating point", nk_dtype_name(a->dtype));
		return -1;
	}
	if (a->n < 0 || !(a->p >= 0 && a->p <= 1)) {
		nrt_kernel_fail("nk_dropout: bad arguments n=%lld p=%g (need n >= 0, 0 <= p <= 1)",
				(long long)a->n, a->p);
		return -1;
	}
	if (a->n > 0 && (!a->x || !a->out)) {
		nrt_kernel_fail("nk_dropout: null x or out");
		return -1;
	}
	return 0;
}

/* Element i given its words: mask and scaled output.  f32/bf16/f16 scale in float, f64 in double. */
static inline void dropout_elem(const nk_dropout_args_t *a, int64_t i, uint32_t w0, uint32_t w1)
{
	bool keep = nk_u64_to_unit_f64(w0, w1) >= a->p;
	double scale_d = a->p < 1 ? 1.0 / (1.0 - a->p) : 0.0;
	size_t es = nk_dtype_size(a->dtype);
	if (a->mask)
		((uint8_t *)a->mask)[i] = keep;
	const char *xp = (const char *)a->x + i * (int64_t)es;
	char *op = (char *)a->out + i * (int64_t)es;
	if (a->dtype == NK_F64)
		*(double *)op = keep ? *(const double *)xp * scale_d : 0.0;
	else
		nk_store_f32(op, a->dtype, keep ? nk_load_f32(xp, a->dtype) * (float)scale_d : 0.0f);
}

/* Elements [i0, i1) of the run: vectorized for f32, else 16 counters' words at a time. */
static void dropout_range(const nk_dropout_args_t *a, int64_t i0, int64_t i1)
{
	bool avx512 = nk_family_avx512(NK_FAM_RANDOM);
	if (avx512 && a->dtype == NK_F32) {
		uint64_t thresh = (uint64_t)ceil(a->p * 0x1p53);
		float scale = (float)(a->p < 1 ? 1.0 / (1.0 - a->p) : 0.0);
		nk_dropout_f32_avx512(a->seed, a->offset, thresh, scale, a->x, a->out, a->mask, i0, i1);
		return;
	}
	uint32_t w[4][16];
	for (int64_t b = i0; b < i1; b += 16) {
		int64_t m = i1 - b < 16 ? i1 - b : 16;
		rng_words(a->seed, a->offset + (uint64_t)b, m, avx512, w);
		for (int64_t j = 0; j < m; j++)
			dropout_elem(a, b + j, w[0][j], w[1][j]);
	}
}

static void dropout_task(void *ctx, int64_t begin, int64_t end)
{
	dropout_range(ctx, begin, end);
}

int nk_dropout_run(void *args)
{
	if (nk_using_reference())
		return nk_dropout_ref(args);
	nk_dropout_args_t *a = args;
	if (dropout_check(a))
		return -1;
	if (a->n > RNG_GRAIN)
		nrt_parallel_for(a->n, RNG_GRAIN, dropout_task, a);
	else
		dropout_range(a, 0, a->n);
	return 0;
}

/* Reference: the scalar generator per element. */
int nk_dropout_ref(void *args)
{
	const nk_dropout_args_t *a = args;
	if (dropout_check(a))
		return -1;
	for (int64_t i = 0; i < a->n; i++) {
		nk_philox_out_t w = nk_philox4x32_10(a->seed, a->offset + (uint64_t)i, 0);
		dropout_elem(a, i, w.v[0], w.v[1]);
	}
	return 0;
}
