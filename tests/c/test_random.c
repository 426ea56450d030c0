/* test_random.c - counter-based random kernels: Philox4x32-10 known answers, run == reference,
 * results independent of thread count (the test re-runs itself with NEURON_NUM_THREADS=1 and 3),
 * of layout and of how a fill is split into launches, distribution sanity (range, mean, std, rates),
 * and dropout (mask rate ~ 1-p, scaling, p = 0 and p = 1).
 * The other distributions (random_dist.c): run vs ref bit-identical, moments, reproducible; randperm is
 * a permutation, multinomial samples valid categories and fails bad rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"
#include "nk_test.h"
#include "nrt_impl.h"

/* A 1-D iterator over n elements of dt at p with byte stride st. */
static nk_random_args_t rargs(void *p, int dt, int64_t n, int64_t st, int kind, double a, double b)
{
	nk_random_args_t A;
	memset(&A, 0, sizeof A);
	A.it.ndim = 1;
	A.it.nops = 1;
	A.it.shape[0] = n;
	A.it.data[0] = p;
	A.it.dtype[0] = (int8_t)dt;
	A.it.strides[0][0] = st;
	A.kind = kind;
	A.a = a;
	A.b = b;
	A.seed = 1234;
	A.offset = 40;
	return A;
}

static void test_philox_kat(void)
{
	nk_philox_out_t o = nk_philox4x32_10(0, 0, 0);
	CHECK(o.v[0] == 0x6627e8d5u && o.v[1] == 0xe169c58du && o.v[2] == 0xbc57ac4cu && o.v[3] == 0x9b00dbd8u,
	      "%08x %08x %08x %08x", o.v[0], o.v[1], o.v[2], o.v[3]);
	o = nk_philox4x32_10(~0ull, ~0ull, ~0ull);
	CHECK(o.v[0] == 0x408f276du && o.v[1] == 0x41c83b0eu && o.v[2] == 0xa20bc7c6u && o.v[3] == 0x6d5451fdu,
	      "%08x %08x %08x %08x", o.v[0], o.v[1], o.v[2], o.v[3]);
	o = nk_philox4x32_10(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull);
	CHECK(o.v[0] == 0xd16cfe09u && o.v[1] == 0x94fdccebu && o.v[2] == 0x5001e420u && o.v[3] == 0x24126ea1u,
	      "%08x %08x %08x %08x", o.v[0], o.v[1], o.v[2], o.v[3]);
	CHECK(nk_random_offset_increment(0) == 0 && nk_random_offset_increment(1) == 4 &&
	      nk_random_offset_increment(8) == 8 && nk_random_offset_increment(9) == 12, " ");
}

/* FNV-1a over bytes. */
static uint64_t hash(const void *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
	return h;
}

/* A hash of large fills of every kind and dtype plus dropout: identical for every thread count. */
static uint64_t big_hash(void)
{
	enum { N = 300000 };
	char *buf = malloc((size_t)N * 8);
	uint64_t h = 0;
	static const int dts[] = {NK_F32, NK_F64, NK_BF16, NK_I64};
	for (int kind = 0; kind < 4; kind++)
		for (int t = 0; t < 4; t++) {
			int dt = dts[t];
			if (kind <= NK_RNG_NORMAL && !nk_is_float(dt))
				continue;
			memset(buf, 0, (size_t)N * 8);
			nk_random_args_t A = rargs(buf, dt, N, (int64_t)nk_dtype_size(dt), kind, 0.3, 2);
			A.ia = -5, A.ib = 1000;
			CHECK(nk_random_run(&A) == 0, " ");
			h = h * 31 + hash(buf, (size_t)N * nk_dtype_size(dt));
		}
	float *x = malloc((size_t)N * 4), *y = malloc((size_t)N * 4);
	uint8_t *m = malloc(N);
	for (int i = 0; i < N; i++) x[i] = (float)i;
	nk_dropout_args_t D = {NK_F32, N, 0.3, 77, 8, x, y, m};
	CHECK(nk_dropout_run(&D) == 0, " ");
	h = h * 31 + hash(y, (size_t)N * 4) + hash(m, N);
	free(buf), free(x), free(y), free(m);
	return h;
}

static uint64_t child_hash(const char *self, int threads)
{
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "NEURON_NUM_THREADS=%d '%s' --hash", threads, self);
	FILE *f = popen(cmd, "r");
	unsigned long long h = 0;
	if (!f || fscanf(f, "%llx", &h) != 1)
		h = 0;
	if (f)
		pclose(f);
	return h;
}

static const char *self_path;

/* The same tests on the portable optimized paths, in a child (see test_pointwise.c). */
static void test_portable_paths(void)
{
	if (getenv("NEURON_KERNELS"))
		return;
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "NEURON_KERNELS=portable '%s' > /dev/null", self_path);
	CHECK(system(cmd) == 0, "%s with NEURON_KERNELS=portable failed", self_path);
}

static void test_thread_independence(void)
{
	uint64_t here = big_hash();
	uint64_t h1 = child_hash(self_path, 1), h3 = child_hash(self_path, 3);
	CHECK(h1 != 0 && h1 == here && h3 == here, "hashes %llx (here), %llx (1 thread), %llx (3 threads)",
	      (unsigned long long)here, (unsigned long long)h1, (unsigned long long)h3);
}

/* run == ref; a strided fill equals the dense fill; two launches with advanced offsets equal one. */
static void test_counter_semantics(void)
{
	enum { N = 50001 };
	for (int kind = 0; kind < 4; kind++) {
		for (int dt = 0; dt < NK_NDTYPES; dt++) {
			size_t e = nk_dtype_size(dt);
			char *a = calloc(N, e), *b = calloc(N, e), *s = calloc(2 * N, e), *c = calloc(N, e);
			nk_random_args_t A = rargs(a, dt, N, (int64_t)e, kind, kind == NK_RNG_BERNOULLI ? 0.4 : -1, 3);
			A.ia = -100, A.ib = 100;
			int rc = nk_random_run(&A);
			nk_random_args_t B = A;
			B.it.data[0] = b;
			CHECK((nk_random_ref(&B) != 0) == (rc != 0), "kind %d dtype %s", kind, nk_dtype_name(dt));
			if (rc == 0 && kind == NK_RNG_NORMAL && dt != NK_F64) {
				/* float normals: vector log/cos with AVX-512, a few ulp from the scalar reference */
				double rtol = dt == NK_F32 ? 2e-6 : 8e-3, worst = 0;
				for (int i = 0; i < N; i++) {
					double x = nk_load_f64(a + (size_t)i * e, dt), y = nk_load_f64(b + (size_t)i * e, dt);
					double err = fabs(x - y) / (2e-5 + rtol * fabs(y)); /* std 3: atol ~ 3 ulp of z */
					worst = err > worst ? err : worst;
				}
				CHECK(worst <= 1, "normal %s: run vs ref error %g of tolerance", nk_dtype_name(dt), worst);
			} else if (rc == 0) {
				CHECK(memcmp(a, b, N * e) == 0, "run != ref: kind %d dtype %s", kind, nk_dtype_name(dt));
			}
			if (rc == 0) {
				/* negative stride over every other element of s, walking backwards */
				nk_random_args_t S = A;
				S.it.data[0] = s + (2 * N - 2) * e;
				S.it.strides[0][0] = -2 * (int64_t)e;
				CHECK(nk_random_run(&S) == 0, " ");
				int bad = 0;
				for (int i = 0; i < N; i++)
					bad += memcmp(s + (2 * N - 2 - 2 * (size_t)i) * e, a + (size_t)i * e, e) != 0;
				CHECK(bad == 0, "strided fill differs: kind %d dtype %s", kind, nk_dtype_name(dt));
				/* split in two launches: the second starts at offset + first length */
				nk_random_args_t C1 = A, C2 = A;
				C1.it.data[0] = c, C1.it.shape[0] = 1000;
				C2.it.data[0] = c + 1000 * e, C2.it.shape[0] = N - 1000, C2.offset = A.offset + 1000;
				CHECK(nk_random_run(&C1) == 0 && nk_random_run(&C2) == 0 && memcmp(a, c, N * e) == 0,
				      "split launches differ: kind %d dtype %s", kind, nk_dtype_name(dt));
				/* another seed gives other numbers */
				B.seed = 99;
				CHECK(nk_random_run(&B) == 0 && memcmp(a, b, N * e) != 0, " ");
			}
			free(a), free(b), free(s), free(c);
		}
	}
	/* 2-D transposed output: values follow the iterator's linear order */
	float d[6 * 7], t[6 * 7];
	nk_random_args_t A = rargs(d, NK_F32, 42, 4, NK_RNG_NORMAL, 0, 1);
	CHECK(nk_random_run(&A) == 0, " ");
	A.it.ndim = 2, A.it.shape[0] = 6, A.it.shape[1] = 7, A.it.data[0] = (char *)t;
	A.it.strides[0][0] = 7 * 4, A.it.strides[0][1] = 4;
	CHECK(nk_random_run(&A) == 0, " ");
	int bad = 0;
	for (int i1 = 0; i1 < 7; i1++)
		for (int i0 = 0; i0 < 6; i0++) bad += t[i0 * 7 + i1] != d[i1 * 6 + i0];
	CHECK(bad == 0, "2-D order");
}

static void test_distributions(void)
{
	enum { N = 200000 };
	double *x = malloc(N * 8);
	nk_random_args_t A = rargs(x, NK_F64, N, 8, NK_RNG_UNIFORM, -2, 3);
	CHECK(nk_random_run(&A) == 0, " ");
	double s = 0, s2 = 0, lo = 1e9, hi = -1e9;
	for (int i = 0; i < N; i++) { s += x[i]; lo = fmin(lo, x[i]); hi = fmax(hi, x[i]); }
	CHECK(lo >= -2 && hi < 3 && fabs(s / N - 0.5) < 0.02, "uniform: min %g max %g mean %g", lo, hi, s / N);
	A.kind = NK_RNG_NORMAL, A.a = 1, A.b = 2;
	CHECK(nk_random_run(&A) == 0, " ");
	s = s2 = 0;
	for (int i = 0; i < N; i++) { s += x[i]; s2 += x[i] * x[i]; }
	double mean = s / N, sd = sqrt(s2 / N - mean * mean);
	CHECK(fabs(mean - 1) < 0.02 && fabs(sd - 2) < 0.02, "normal: mean %g std %g", mean, sd);
	A.kind = NK_RNG_BERNOULLI, A.a = 0.3;
	CHECK(nk_random_run(&A) == 0, " ");
	s = 0;
	for (int i = 0; i < N; i++) s += x[i];
	CHECK(fabs(s / N - 0.3) < 0.005, "bernoulli rate %g", s / N);
	int64_t *k = (int64_t *)x;
	A.kind = NK_RNG_RANDINT, A.it.dtype[0] = NK_I64, A.ia = -3, A.ib = 4;
	CHECK(nk_random_run(&A) == 0, " ");
	int hist[7] = {0}, out = 0;
	for (int i = 0; i < N; i++) { if (k[i] < -3 || k[i] >= 4) out++; else hist[k[i] + 3]++; }
	CHECK(out == 0 && hist[0] > N / 8 && hist[6] > N / 8, "randint range");
	A.ia = INT64_MIN, A.ib = INT64_MAX; /* a range wider than 32 bits */
	CHECK(nk_random_run(&A) == 0, " ");
	int neg = 0;
	for (int i = 0; i < N; i++) neg += k[i] < 0;
	CHECK(neg > N / 3 && neg < 2 * N / 3, "wide randint sign balance %d", neg);
	/* bf16 uniform in [0, 1) never rounds up to 1 */
	uint16_t *h = (uint16_t *)x;
	nk_random_args_t H = rargs(h, NK_BF16, N, 2, NK_RNG_UNIFORM, 0, 1);
	CHECK(nk_random_run(&H) == 0, " ");
	int ones = 0;
	for (int i = 0; i < N; i++) ones += nk_bf16_to_f32(h[i]) >= 1.0f;
	CHECK(ones == 0, "%d bf16 uniforms reached 1", ones);
	/* invalid arguments */
	nk_random_args_t E = rargs(k, NK_I64, 10, 8, NK_RNG_UNIFORM, 0, 1);
	CHECK(nk_random_run(&E) != 0, "uniform into int64");
	E = rargs(x, NK_F64, 10, 8, NK_RNG_UNIFORM, 2, 1);
	CHECK(nk_random_run(&E) != 0, "from > to");
	E.kind = NK_RNG_BERNOULLI, E.a = 1.5;
	CHECK(nk_random_run(&E) != 0, "p > 1");
	E.kind = NK_RNG_RANDINT, E.ia = 3, E.ib = 3;
	CHECK(nk_random_run(&E) != 0, "empty randint range");
	E.kind = 9;
	CHECK(nk_random_run(&E) != 0, "unknown kind");
	free(x);
}

static void test_dropout(void)
{
	enum { N = 100000 };
	float *x = malloc(N * 4), *y = malloc(N * 4), *y2 = malloc(N * 4);
	uint8_t *m = malloc(N), *m2 = malloc(N);
	for (int i = 0; i < N; i++) x[i] = 1.0f + (float)(i % 10);
	nk_dropout_args_t D = {NK_F32, N, 0.25, 5, 0, x, y, m};
	CHECK(nk_dropout_run(&D) == 0, " ");
	int kept = 0, bad = 0;
	for (int i = 0; i < N; i++) {
		kept += m[i];
		float want = m[i] ? x[i] * (float)(1.0 / 0.75) : 0.0f;
		bad += y[i] != want;
	}
	CHECK(fabs((double)kept / N - 0.75) < 0.01, "keep rate %g", (double)kept / N);
	CHECK(bad == 0, "%d outputs not x*mask/(1-p)", bad);
	nk_dropout_args_t R = {NK_F32, N, 0.25, 5, 0, x, y2, m2};
	CHECK(nk_dropout_ref(&R) == 0 && memcmp(y, y2, N * 4) == 0 && memcmp(m, m2, N) == 0, "run != ref");
	D.p = 1;
	CHECK(nk_dropout_run(&D) == 0, " ");
	kept = 0, bad = 0;
	for (int i = 0; i < N; i++) { kept += m[i]; bad += y[i] != 0; }
	CHECK(kept == 0 && bad == 0, "p = 1 drops everything");
	D.p = 0;
	CHECK(nk_dropout_run(&D) == 0 && memcmp(x, y, N * 4) == 0, "p = 0 keeps everything");
	/* bf16, in place, no mask */
	uint16_t *h = malloc(N * 2);
	for (int i = 0; i < N; i++) h[i] = nk_f32_to_bf16(2.0f);
	nk_dropout_args_t Hd = {NK_BF16, N, 0.5, 5, 0, h, h, NULL};
	CHECK(nk_dropout_run(&Hd) == 0, " ");
	kept = 0, bad = 0;
	for (int i = 0; i < N; i++) {
		float v = nk_bf16_to_f32(h[i]);
		kept += v != 0;
		bad += v != 0 && v != 4.0f;
	}
	CHECK(bad == 0 && fabs((double)kept / N - 0.5) < 0.01, "bf16 dropout: kept %d bad %d", kept, bad);
	nk_dropout_args_t E = {NK_I64, 10, 0.5, 5, 0, x, y, m};
	CHECK(nk_dropout_run(&E) != 0, "integer dropout");
	E.dtype = NK_F32, E.p = -0.1;
	CHECK(nk_dropout_run(&E) != 0, "p < 0");
	free(x), free(y), free(y2), free(m), free(m2), free(h);
}

static int64_t cnt(int64_t n)
{
	return n > 0 ? n : 1;
}

static double elem(const void *p, int dt, int64_t i)
{
	const char *c = (const char *)p + i * (int64_t)nk_dtype_size(dt);
	return nk_is_float(dt) ? nk_load_f64(c, dt) : (double)nk_load_i64(c, dt);
}

/* ---- distributions: run vs ref bit-identical, moments, reproducible ------------------------------ */
static void test_dist(void)
{
	const int64_t n = NK_TEST_SMALL ? 20000 : 200000;
	static const struct { int kind; double a, b, mean, var; } cases[] = {
		{ NK_DIST_EXPONENTIAL, 2.0, 0, 0.5, 0.25 },
		{ NK_DIST_GEOMETRIC, 0.25, 0, 4.0, 12.0 },
		{ NK_DIST_LOG_NORMAL, 0.0, 0.5, 1.1331484530668263, 0.3646958540698618 },
		{ NK_DIST_CAUCHY, 1.0, 2.0, NAN, NAN }, /* median 1, quartiles 1 -+ 2 */
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		for (int dti = 0; dti < 2; dti++) {
			int dt = dti ? NK_F32 : NK_F64;
			size_t es = nk_dtype_size(dt);
			char *o1 = malloc((size_t)n * es), *o2 = malloc((size_t)n * es);
			nk_dist_args_t a = { .kind = cases[c].kind, .a = cases[c].a, .b = cases[c].b, .seed = 1234, .offset = 8 };
			a.it.ndim = 1, a.it.nops = 1, a.it.shape[0] = n, a.it.strides[0][0] = (int64_t)es, a.it.dtype[0] = (int8_t)dt;
			a.it.data[0] = o1;
			CHECK(nk_dist_run(&a) == 0, "dist run");
			a.it.data[0] = o2;
			CHECK(nk_dist_ref(&a) == 0, "dist ref");
			CHECK(memcmp(o1, o2, (size_t)n * es) == 0, "dist kind %d %s: run == ref", cases[c].kind, nk_dtype_name(dt));
			if (!isnan(cases[c].mean)) {
				double s = 0, s2 = 0;
				for (int64_t i = 0; i < n; i++) {
					double v = elem(o1, dt, i);
					s += v, s2 += v * v;
				}
				double m = s / (double)n, var = s2 / (double)n - m * m, se = sqrt(cases[c].var / (double)n);
				CHECK(fabs(m - cases[c].mean) < 6 * se, "dist kind %d mean %g want %g", cases[c].kind, m, cases[c].mean);
				CHECK(fabs(var - cases[c].var) < 0.05 * cases[c].var, "dist kind %d var %g want %g", cases[c].kind, var,
				      cases[c].var);
			} else {
				int64_t below = 0, inq = 0;
				for (int64_t i = 0; i < n; i++) {
					double v = elem(o1, dt, i);
					below += v < 1.0;
					inq += v > -1.0 && v < 3.0;
				}
				CHECK(fabs((double)below / (double)n - 0.5) < 0.01 && fabs((double)inq / (double)n - 0.5) < 0.01,
				      "cauchy median/quartiles: %g %g", (double)below / (double)n, (double)inq / (double)n);
			}
			free(o1), free(o2);
		}
	}
	/* geometric on an integer dtype: >= 1 */
	int32_t g[1000];
	nk_dist_args_t a = { .kind = NK_DIST_GEOMETRIC, .a = 0.5, .seed = 9 };
	a.it.ndim = 1, a.it.nops = 1, a.it.shape[0] = 1000, a.it.strides[0][0] = 4, a.it.dtype[0] = NK_I32, a.it.data[0] = (char *)g;
	CHECK(nk_dist_run(&a) == 0, "geometric i32");
	bool ok = true;
	for (int i = 0; i < 1000; i++)
		ok &= g[i] >= 1;
	CHECK(ok, "geometric >= 1");
	a.a = 1.5;
	nrt_kernel_fail_clear();
	CHECK(nk_dist_run(&a) != 0, "geometric p = 1.5 fails");
	nrt_kernel_fail_clear();
}

static void test_randperm_multinomial(void)
{
	static const int64_t ns[] = { 0, 1, 2, 17, 1000 };
	for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
		int64_t n = ns[t];
		int64_t *o = malloc((size_t)cnt(n) * 8), *w = malloc((size_t)cnt(n) * 8), *o2 = malloc((size_t)cnt(n) * 8);
		char *seen = calloc((size_t)cnt(n), 1);
		nk_randperm_args_t a = { .dtype = NK_I64, .n = n, .out = o, .work = w, .seed = 5, .offset = 0 };
		CHECK(nk_randperm_run(&a) == 0, "randperm");
		bool ok = true;
		for (int64_t i = 0; i < n; i++) {
			ok &= o[i] >= 0 && o[i] < n && !seen[o[i]];
			if (o[i] >= 0 && o[i] < n)
				seen[o[i]] = 1;
		}
		a.out = o2;
		CHECK(nk_randperm_run(&a) == 0 && (n == 0 || memcmp(o, o2, (size_t)n * 8) == 0), "randperm reproducible");
		CHECK(ok, "randperm(%lld) is a permutation", (long long)n);
		free(o), free(w), free(o2), free(seen);
	}
	/* multinomial: frequencies follow the weights; without replacement: distinct, never zero weight */
	enum { D = 3, C = 5, S = 20000 };
	float p[D * C] = { 1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 5, 5, 0, 0, 10 };
	int64_t *out = malloc(sizeof(int64_t) * D * S);
	double *work = malloc(sizeof(double) * 2 * D * C);
	nk_multinomial_args_t m = { .dtype = NK_F32, .D = D, .C = C, .S = S, .replacement = true, .p = p, .out = out, .work = work,
				    .seed = 3 };
	CHECK(nk_multinomial_run(&m) == 0, "multinomial");
	for (int d = 0; d < D; d++) {
		double tot = 0, f[C] = { 0 };
		for (int c = 0; c < C; c++)
			tot += p[d * C + c];
		for (int s = 0; s < S; s++)
			f[out[d * S + s]] += 1.0 / S;
		for (int c = 0; c < C; c++)
			CHECK(fabs(f[c] - p[d * C + c] / tot) < 0.02, "multinomial row %d cat %d: %g vs %g", d, c, f[c], p[d * C + c] / tot);
	}
	m.replacement = false, m.S = 2, m.D = 1;
	for (int rep = 0; rep < 50; rep++) {
		m.seed = (uint64_t)rep;
		CHECK(nk_multinomial_run(&m) == 0 && out[0] != out[1] && p[out[0]] > 0 && p[out[1]] > 0, "multinomial w/o replacement");
	}
	m.S = 5; /* only 4 nonzero categories */
	nrt_kernel_fail_clear();
	CHECK(nk_multinomial_run(&m) != 0 && strstr(nrt_kernel_fail_message(), "multinomial"), "too few categories: %s",
	      nrt_kernel_fail_message());
	p[2] = NAN, m.S = 1;
	nrt_kernel_fail_clear();
	CHECK(nk_multinomial_run(&m) != 0 && strstr(nrt_kernel_fail_message(), "nan"), "NaN weight: %s", nrt_kernel_fail_message());
	nrt_kernel_fail_clear();
	free(out), free(work);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--hash") == 0) {
		printf("%llx\n", (unsigned long long)big_hash());
		return 0;
	}
	self_path = argv[0];
	RUN(test_philox_kat);
	RUN(test_counter_semantics);
	RUN(test_distributions);
	RUN(test_dropout);
	RUN(test_thread_independence);
	RUN(test_portable_paths);
	RUN(test_dist);
	RUN(test_randperm_multinomial);
	return ctest_finish();
}
