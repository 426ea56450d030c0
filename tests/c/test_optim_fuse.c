/* test_optim_fuse.c - multi-tensor elementwise kernels (nk_foreach.h) and queue-level loop fusion
 * (nrt_fuse.h): nk_foreach_run and nk_foreach_range against nk_foreach_ref bit for bit; fused runs
 * of records on a queue against the same records run op by op (fusion off), with aliasing, overlap,
 * element-count mismatches, failing records, failures inside a fused run, events and the trace. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk.h"
#include "nk_foreach.h"
#include "nk_impl.h"
#include "nrt.h"
#include "nrt_fuse.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double rndu(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) * 0x1p-53;
}

static void *rnd_buf(int dt, int64_t n, double lo, double hi)
{
	size_t es = nk_dtype_size(dt);
	char *p = malloc((size_t)(n ? n : 1) * es);
	for (int64_t i = 0; i < n; i++)
		nk_store_f64(p + i * (int64_t)es, dt, lo + (hi - lo) * rndu());
	return p;
}

static void *dup(const void *p, size_t n)
{
	void *q = malloc(n ? n : 1);
	memcpy(q, p, n);
	return q;
}

/* ---- kernel level ------------------------------------------------------------------------------- */
struct opcase {
	int op, nin;
	double a;
	bool positive; /* inputs in [0.5, 2] (sqrt, division) */
	const char *name;
};

static const struct opcase CASES[] = {
	{NK_OP_ADD, 2, 0.5, false, "add"},          {NK_OP_SUB, 2, 2.0, false, "sub"},
	{NK_OP_MUL, 2, 0, false, "mul"},            {NK_OP_DIV, 2, 0, true, "div"},
	{NK_OP_SQRT, 1, 0, true, "sqrt"},           {NK_OP_NEG, 1, 0, false, "neg"},
	{NK_OP_ABS, 1, 0, false, "abs"},            {NK_OP_RECIPROCAL, 1, 0, true, "reciprocal"},
	{NK_OP_ADDCMUL, 3, 0.3, false, "addcmul"},  {NK_OP_ADDCDIV, 3, -0.7, true, "addcdiv"},
	{NK_OP_LERP_SCALAR, 2, 0.1, false, "lerp"}, {NK_OP_LERP_SCALAR, 2, 0.9, false, "lerp hi"},
	{NK_OP_EXP, 1, 0, false, "exp"},
};

static const int64_t SIZES[] = {0, 1, 15, 16, 17, 1000, 70001};
#define NSIZES ((int)(sizeof SIZES / sizeof SIZES[0]))

/* y kinds: 0 a tensor per item, 1 the record's scalar operand, 2 a one-element tensor (stride 0) */
static void build_record(nk_foreach_args_t *A, const struct opcase *c, int dt, int ykind, void *bufs[][4],
			 float scal)
{
	memset(A, 0, sizeof *A);
	A->op = c->op;
	A->nops = 1 + c->nin;
	A->sk = c->nin >= 2 && ykind == 1 ? 2 : -1;
	A->count = NSIZES;
	for (int k = 0; k < A->nops; k++) {
		A->dtype[k] = (int8_t)dt;
		A->esize[k] = (int64_t)nk_dtype_size(dt);
	}
	if (c->nin >= 2 && ykind)
		A->esize[2] = 0;
	uint64_t sbits = 0;
	nk_store_f64(&sbits, dt, scal);
	for (int i = 0; i < NSIZES; i++) {
		nk_foreach_item_t *t = &A->items[i];
		t->n = SIZES[i];
		t->pos = i;
		t->a = c->a;
		t->scal = sbits;
		for (int k = 0; k < A->nops; k++)
			t->data[k] = k == A->sk ? NULL : bufs[i][k];
	}
}

static void test_run_vs_ref(void)
{
	static const int dts[] = {NK_F32, NK_F64, NK_BF16};
	for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++)
		for (int di = 0; di < 3; di++)
			for (int yk = 0; yk < (CASES[ci].nin >= 2 ? 3 : 1); yk++) {
				const struct opcase *c = &CASES[ci];
				int dt = dts[di];
				size_t es = nk_dtype_size(dt);
				void *in[NSIZES][4], *out_run[NSIZES], *out_ref[NSIZES], *out_rng[NSIZES];
				double lo = c->positive ? 0.5 : -2, hi = 2;
				for (int i = 0; i < NSIZES; i++) {
					in[i][0] = NULL;
					for (int k = 1; k < 4; k++)
						in[i][k] = rnd_buf(dt, yk == 2 && k == 2 ? 1 : SIZES[i], lo, hi);
					out_run[i] = rnd_buf(dt, SIZES[i], 0, 1);
					out_ref[i] = dup(out_run[i], (size_t)SIZES[i] * es);
					out_rng[i] = dup(out_run[i], (size_t)SIZES[i] * es);
				}
				nk_foreach_args_t A, B, C;
				for (int i = 0; i < NSIZES; i++)
					in[i][0] = out_run[i];
				build_record(&A, c, dt, yk, in, 1.25f);
				for (int i = 0; i < NSIZES; i++)
					in[i][0] = out_ref[i];
				build_record(&B, c, dt, yk, in, 1.25f);
				for (int i = 0; i < NSIZES; i++)
					in[i][0] = out_rng[i];
				build_record(&C, c, dt, yk, in, 1.25f);
				CHECK(nk_foreach_run(&A) == 0, "%s run", c->name);
				CHECK(nk_foreach_ref(&B) == 0, "%s ref", c->name);
				CHECK(nk_foreach_check(&C) == 0, "%s check", c->name);
				for (int i = 0; i < NSIZES; i++) /* random splits into ranges, last first */
					for (int64_t e = SIZES[i]; e > 0;) {
						int64_t b = e - 1 - (int64_t)(rndu() * 300);
						b = b < 0 ? 0 : b;
						CHECK(nk_foreach_range(&C, i, b, e) == 0, "range");
						e = b;
					}
				for (int i = 0; i < NSIZES; i++) {
					size_t nb = (size_t)SIZES[i] * es;
					bool exact = c->op != NK_OP_EXP;
					if (exact) {
						CHECK(!memcmp(out_run[i], out_ref[i], nb), "%s %s y%d n=%lld: run != ref",
						      c->name, nk_dtype_name(dt), yk, (long long)SIZES[i]);
					} else {
						for (int64_t j = 0; j < SIZES[i]; j++) {
							double g = nk_load_f64((char *)out_run[i] + j * (int64_t)es, dt);
							double w = nk_load_f64((char *)out_ref[i] + j * (int64_t)es, dt);
							if (fabs(g - w) > 1e-5 * fabs(w) + (dt == NK_BF16 ? 1e-2 * fabs(w) : 0)) {
								CHECK(0, "exp %s [%lld] %g vs %g", nk_dtype_name(dt),
								      (long long)j, g, w);
								break;
							}
						}
					}
					CHECK(!memcmp(out_rng[i], out_run[i], nb), "%s %s y%d n=%lld: ranges != run",
					      c->name, nk_dtype_name(dt), yk, (long long)SIZES[i]);
					for (int k = 1; k < 4; k++)
						free(in[i][k]);
					free(out_run[i]);
					free(out_ref[i]);
					free(out_rng[i]);
				}
			}
}

static void test_check_errors(void)
{
	float x[4] = {1, 2, 3, 4};
	nk_foreach_args_t A;
	memset(&A, 0, sizeof A);
	A.op = NK_OP_NEG;
	A.nops = 2;
	A.sk = -1;
	A.count = 1;
	A.dtype[0] = A.dtype[1] = NK_I32;
	A.esize[0] = A.esize[1] = 4;
	A.items[0] = (nk_foreach_item_t){{(char *)x, (char *)x, NULL, NULL}, 4, 0, 0, 0, 0};
	CHECK(nk_foreach_run(&A) != 0, "integer dtype rejected");
	A.dtype[0] = A.dtype[1] = NK_F32;
	A.nops = 3; /* neg with 3 operands */
	A.dtype[2] = NK_F32;
	A.esize[2] = 4;
	A.items[0].data[2] = (char *)x;
	CHECK(nk_foreach_run(&A) != 0, "operand count rejected");
	A.nops = 2;
	A.count = NK_FOREACH_ITEMS + 1;
	CHECK(nk_foreach_run(&A) != 0, "item count rejected");
	A.count = 1;
	A.esize[1] = 8;
	CHECK(nk_foreach_run(&A) != 0, "stride rejected");
	A.esize[1] = 4;
	CHECK(nk_foreach_run(&A) == 0 && x[0] == -1 && x[3] == -4, "neg in place");
}

/* ---- queue level ---------------------------------------------------------------------------------- */
static atomic_int gate_open;

static int k_gate(void *p)
{
	(void)p;
	while (!atomic_load(&gate_open))
		sched_yield();
	return 0;
}

/* Holds q's executor until gate_release, so that everything launched meanwhile is queued at once. */
static void gate_hold(nrt_queue_t *q)
{
	atomic_store(&gate_open, 0);
	CHECK(nrt_queue_launch(q, k_gate, NULL, 0, "test::gate") == NRT_OK, "gate");
}

static void gate_release(void)
{
	atomic_store(&gate_open, 1);
}

#define MAXL 64

typedef struct {
	int count;
	float *t[MAXL];
	int64_t n[MAXL];
} list_t;

static void list_rand(list_t *L, int count, const int64_t *n, double lo, double hi)
{
	L->count = count;
	for (int i = 0; i < count; i++) {
		L->n[i] = n[i];
		L->t[i] = rnd_buf(NK_F32, n[i], lo, hi);
	}
}

static void list_empty(list_t *L, int count, const int64_t *n)
{
	L->count = count;
	for (int i = 0; i < count; i++) {
		L->n[i] = n[i];
		L->t[i] = calloc((size_t)(n[i] ? n[i] : 1), 4);
	}
}

static void list_copy(list_t *D, const list_t *S)
{
	*D = *S;
	for (int i = 0; i < S->count; i++)
		D->t[i] = dup(S->t[i], (size_t)S->n[i] * 4);
}

static void list_free(list_t *L)
{
	for (int i = 0; i < L->count; i++)
		free(L->t[i]);
	L->count = 0;
}

static bool list_equal(const list_t *a, const list_t *b)
{
	for (int i = 0; i < a->count; i++)
		if (a->n[i] != b->n[i] || memcmp(a->t[i], b->t[i], (size_t)a->n[i] * 4))
			return false;
	return true;
}

/* Launches op over lists (out, in...) as records of NK_FOREACH_ITEMS items; y may be the scalar
 * operand (ins[1] == NULL: scal), per-item parameters a[i] (or a0). */
static void launch_op(nrt_queue_t *q, const char *name, int op, const list_t *out, const list_t *const *ins, int nin,
		      float scal, double a0, const double *a)
{
	nk_foreach_args_t A;
	memset(&A, 0, sizeof A);
	A.op = op;
	A.nops = 1 + nin;
	A.sk = -1;
	for (int k = 0; k < A.nops; k++) {
		A.dtype[k] = NK_F32;
		A.esize[k] = 4;
	}
	for (int k = 0; k < nin; k++)
		if (!ins[k]) {
			A.sk = 1 + k;
			A.esize[1 + k] = 0;
		}
	for (int i = 0; i < out->count; i++) {
		nk_foreach_item_t *t = &A.items[A.count];
		memset(t, 0, sizeof *t);
		t->n = out->n[i];
		t->pos = i;
		t->a = a ? a[i] : a0;
		memcpy(&t->scal, &scal, 4);
		t->data[0] = (char *)out->t[i];
		for (int k = 0; k < nin; k++)
			t->data[1 + k] = ins[k] ? (char *)ins[k]->t[i] : NULL;
		if (++A.count == NK_FOREACH_ITEMS) {
			CHECK(nrt_queue_launch(q, nk_foreach_run, &A, sizeof A, name) == NRT_OK, "launch");
			A.count = 0;
		}
	}
	if (A.count)
		CHECK(nrt_queue_launch(q, nk_foreach_run, &A, sizeof A, name) == NRT_OK, "launch");
}

/* One AdamW step as torch.optim's _multi_tensor_adam issues it (decoupled weight decay). */
static void adamw_step(nrt_queue_t *q, list_t *p, list_t *g, list_t *m, list_t *v, list_t *tmp, int step)
{
	double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
	double bc2 = sqrt(1 - pow(b2, step)), ss[MAXL];
	for (int i = 0; i < p->count; i++)
		ss[i] = -(lr / (1 - pow(b1, step)));
	launch_op(q, "aten::_foreach_mul_", NK_OP_MUL, p, (const list_t *[]){p, NULL}, 2, (float)(1 - lr * wd), 0, NULL);
	launch_op(q, "aten::_foreach_lerp_", NK_OP_LERP_SCALAR, m, (const list_t *[]){m, g}, 2, 0, 1 - b1, NULL);
	launch_op(q, "aten::_foreach_mul_", NK_OP_MUL, v, (const list_t *[]){v, NULL}, 2, (float)b2, 0, NULL);
	launch_op(q, "aten::_foreach_addcmul_", NK_OP_ADDCMUL, v, (const list_t *[]){v, g, g}, 3, 0, 1 - b2, NULL);
	launch_op(q, "aten::_foreach_sqrt", NK_OP_SQRT, tmp, (const list_t *[]){v}, 1, 0, 0, NULL);
	/* the glue puts a scalar list's values into the items' scal; all of them are equal here */
	launch_op(q, "aten::_foreach_div_", NK_OP_DIV, tmp, (const list_t *[]){tmp, NULL}, 2, (float)bc2, 0, NULL);
	launch_op(q, "aten::_foreach_add_", NK_OP_ADD, tmp, (const list_t *[]){tmp, NULL}, 2, (float)eps, 1, NULL);
	launch_op(q, "aten::_foreach_addcdiv_", NK_OP_ADDCDIV, p, (const list_t *[]){p, m, tmp}, 3, 0, 0, ss);
}

struct adam_state {
	list_t p, g, m, v, tmp;
};

static void adam_init(struct adam_state *s, int count, const int64_t *n)
{
	list_rand(&s->p, count, n, -1, 1);
	list_rand(&s->g, count, n, -1, 1);
	list_empty(&s->m, count, n);
	list_empty(&s->v, count, n);
	list_empty(&s->tmp, count, n);
}

static void adam_copy(struct adam_state *d, const struct adam_state *s)
{
	list_copy(&d->p, &s->p);
	list_copy(&d->g, &s->g);
	list_copy(&d->m, &s->m);
	list_copy(&d->v, &s->v);
	list_copy(&d->tmp, &s->tmp);
}

static bool adam_equal(const struct adam_state *a, const struct adam_state *b)
{
	return list_equal(&a->p, &b->p) && list_equal(&a->m, &b->m) && list_equal(&a->v, &b->v) &&
	       list_equal(&a->tmp, &b->tmp);
}

static void adam_free(struct adam_state *s)
{
	list_free(&s->p);
	list_free(&s->g);
	list_free(&s->m);
	list_free(&s->v);
	list_free(&s->tmp);
}

static nrt_fuse_stats_t stats_now(void)
{
	nrt_fuse_stats_t s;
	nrt_fuse_get_stats(&s);
	return s;
}

static void test_fused_adamw_matches_op_by_op(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	int64_t n[40];
	for (int i = 0; i < 40; i++) /* odd sizes, tiles and partial tiles, 2 records per op */
		n[i] = i % 7 == 0 ? 0 : 1 + (int64_t)(rndu() * 9000);
	n[5] = 100003;
	struct adam_state ref, fused;
	adam_init(&ref, 40, n);
	adam_copy(&fused, &ref);
	nrt_fuse_enable(false);
	for (int s = 1; s <= 3; s++)
		adamw_step(q, &ref.p, &ref.g, &ref.m, &ref.v, &ref.tmp, s);
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "op by op: %s", nrt_last_error());
	nrt_fuse_enable(true);
	for (int tile = 0; tile < 2; tile++) {
		struct adam_state f;
		adam_copy(&f, &fused);
		nrt_fuse_set_tile(tile ? 64 : 4096);
		nrt_fuse_stats_t s0 = stats_now();
		for (int s = 1; s <= 3; s++) {
			gate_hold(q);
			adamw_step(q, &f.p, &f.g, &f.m, &f.v, &f.tmp, s);
			gate_release();
		}
		CHECK(nrt_queue_synchronize(q) == NRT_OK, "fused: %s", nrt_last_error());
		nrt_fuse_stats_t s1 = stats_now();
		/* 8 ops x 2 records per step, all queued behind the gate: one run of 16 records per step */
		CHECK(s1.runs - s0.runs == 3 && s1.records - s0.records == 48, "runs %llu records %llu",
		      (unsigned long long)(s1.runs - s0.runs), (unsigned long long)(s1.records - s0.records));
		CHECK(adam_equal(&f, &ref), "tile %d: fused AdamW != op by op", tile);
		adam_free(&f);
	}
	nrt_fuse_set_tile(NRT_FUSE_TILE_DEFAULT);
	adam_free(&ref);
	adam_free(&fused);
}

/* Runs build(state) op by op and fused; the results must agree; returns the records fused. */
typedef void (*build_fn)(nrt_queue_t *q, list_t *L);

static uint64_t run_both(build_fn build, list_t *init, int nlists, const char *what)
{
	nrt_queue_t *q = nrt_queue_default(0);
	list_t a[8], b[8];
	for (int i = 0; i < nlists; i++) {
		list_copy(&a[i], &init[i]);
		list_copy(&b[i], &init[i]);
	}
	nrt_fuse_enable(false);
	build(q, a);
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "%s op by op", what);
	nrt_fuse_enable(true);
	nrt_fuse_stats_t s0 = stats_now();
	gate_hold(q);
	build(q, b);
	gate_release();
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "%s fused", what);
	nrt_fuse_stats_t s1 = stats_now();
	for (int i = 0; i < nlists; i++) {
		CHECK(list_equal(&a[i], &b[i]), "%s: list %d differs from op by op", what, i);
		list_free(&a[i]);
		list_free(&b[i]);
	}
	return s1.records - s0.records;
}

/* X written at position 0 by the first op and at position 1 by the second: not one tensor at one
 * position, so the second op must not fuse with the first (its item 1 would run before item 0). */
static void build_alias_positions(nrt_queue_t *q, list_t *L)
{
	list_t x2 = L[0]; /* [X, Y] */
	list_t y2 = L[0];
	y2.t[0] = L[0].t[1]; /* [Y, X] */
	y2.t[1] = L[0].t[0];
	launch_op(q, "t::a", NK_OP_MUL, &x2, (const list_t *[]){&x2, NULL}, 2, 3.0f, 0, NULL);
	launch_op(q, "t::b", NK_OP_ADD, &y2, (const list_t *[]){&y2, &L[1]}, 2, 0, 1, NULL);
	launch_op(q, "t::c", NK_OP_SQRT, &L[2], (const list_t *[]){&x2}, 1, 0, 0, NULL);
}

/* Read-only sharing across positions is fine: g read at positions 0 and 1 by two ops. */
static void build_shared_reads(nrt_queue_t *q, list_t *L)
{
	list_t g = L[1];
	g.t[1] = L[1].t[0];
	launch_op(q, "t::a", NK_OP_ADD, &L[0], (const list_t *[]){&L[0], &g}, 2, 0, 1, NULL);
	launch_op(q, "t::b", NK_OP_MUL, &L[2], (const list_t *[]){&L[2], &g}, 2, 0, 0, NULL);
}

/* Overlapping views: the second op reads X shifted by 50 elements while the first writes X. */
static void build_overlap(nrt_queue_t *q, list_t *L)
{
	list_t a = L[0], b = L[1];
	a.count = b.count = 1;
	a.n[0] = b.n[0] = 200;
	list_t shifted = a;
	shifted.t[0] = a.t[0] + 50;
	launch_op(q, "t::a", NK_OP_MUL, &a, (const list_t *[]){&a, NULL}, 2, 2.0f, 0, NULL);
	launch_op(q, "t::b", NK_OP_ADD, &b, (const list_t *[]){&b, &shifted}, 2, 0, 1, NULL);
}

/* In place on a view that partially overlaps another list's tensor written earlier. */
static void build_overlap_write(nrt_queue_t *q, list_t *L)
{
	list_t a = L[0], v = L[0];
	a.count = v.count = 1;
	a.n[0] = 200;
	v.n[0] = 200;
	v.t[0] = a.t[0] + 100;
	launch_op(q, "t::a", NK_OP_NEG, &a, (const list_t *[]){&a}, 1, 0, 0, NULL);
	launch_op(q, "t::b", NK_OP_MUL, &v, (const list_t *[]){&v, NULL}, 2, 0.5f, 0, NULL);
}

/* Different element counts at one position (another list): must not fuse. */
static void build_numel_mismatch(nrt_queue_t *q, list_t *L)
{
	list_t a = L[0], b = L[1];
	a.count = b.count = 1;
	a.n[0] = 300;
	b.n[0] = 200;
	launch_op(q, "t::a", NK_OP_MUL, &a, (const list_t *[]){&a, NULL}, 2, 2.0f, 0, NULL);
	launch_op(q, "t::b", NK_OP_MUL, &b, (const list_t *[]){&b, NULL}, 2, 2.0f, 0, NULL);
}

/* A scalar read through a one-element tensor that an earlier op of the run writes. */
static void build_scalar_tensor(nrt_queue_t *q, list_t *L)
{
	nk_foreach_args_t A;
	launch_op(q, "t::a", NK_OP_MUL, &L[0], (const list_t *[]){&L[0], NULL}, 2, 2.0f, 0, NULL); /* writes L0[0][0] */
	memset(&A, 0, sizeof A);
	A.op = NK_OP_MUL;
	A.nops = 3;
	A.sk = -1;
	A.dtype[0] = A.dtype[1] = A.dtype[2] = NK_F32;
	A.esize[0] = A.esize[1] = 4;
	A.esize[2] = 0;
	A.count = L[1].count;
	for (int i = 0; i < L[1].count; i++)
		A.items[i] = (nk_foreach_item_t){{(char *)L[1].t[i], (char *)L[1].t[i], (char *)L[0].t[0], NULL},
						 L[1].n[i], i, 0, 0, 0};
	CHECK(nrt_queue_launch(q, nk_foreach_run, &A, sizeof A, "t::b") == NRT_OK, "launch");
}

/* Many records over the same tensors (a long run of steps): the overlap check merges the identical
 * ranges, so the run is as long as NRT_FUSE_MAX_RECORDS allows. */
static void build_long_run(nrt_queue_t *q, list_t *L)
{
	for (int i = 0; i < NRT_FUSE_MAX_RECORDS; i++)
		launch_op(q, "t::a", i % 2 ? NK_OP_MUL : NK_OP_ADD, &L[3], (const list_t *[]){&L[3], i % 2 ? NULL : &L[4]}, 2,
			  1.001f, 0.5, NULL);
}

static void test_fusion_rules(void)
{
	int64_t n[3] = {5000, 5000, 777};
	list_t L[3];
	for (int i = 0; i < 3; i++)
		list_rand(&L[i], 3, n, 0.5, 2);
	uint64_t r;
	r = run_both(build_alias_positions, L, 3, "same tensor at two positions");
	CHECK(r == 0, "alias: fused records %llu", (unsigned long long)r);
	r = run_both(build_shared_reads, L, 3, "shared reads");
	CHECK(r == 2, "shared reads fuse: %llu", (unsigned long long)r);
	r = run_both(build_overlap, L, 3, "overlapping views");
	CHECK(r == 0, "overlap: fused records %llu", (unsigned long long)r);
	r = run_both(build_overlap_write, L, 3, "overlapping writes");
	CHECK(r == 0, "overlapping writes: fused records %llu", (unsigned long long)r);
	r = run_both(build_numel_mismatch, L, 3, "element count mismatch");
	CHECK(r == 0, "numel mismatch: fused records %llu", (unsigned long long)r);
	r = run_both(build_scalar_tensor, L, 3, "scalar tensor written in the run");
	CHECK(r == 0, "scalar tensor: fused records %llu", (unsigned long long)r);
	for (int i = 0; i < 3; i++)
		list_free(&L[i]);
	int64_t n27[NK_FOREACH_ITEMS];
	for (int i = 0; i < NK_FOREACH_ITEMS; i++)
		n27[i] = 100 + i;
	list_t M[5];
	for (int i = 0; i < 5; i++)
		list_rand(&M[i], i < 3 ? 0 : NK_FOREACH_ITEMS, n27, -1, 1);
	r = run_both(build_long_run, M, 5, "long run");
	CHECK(r == NRT_FUSE_MAX_RECORDS, "long run: fused records %llu", (unsigned long long)r);
	for (int i = 0; i < 5; i++)
		list_free(&M[i]);
}

/* A record that would fail (integer dtype) in the middle of a run: the records before it fuse and
 * complete, it reports its error, the records after it are skipped. */
static void test_failing_record_mid_run(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	int64_t n[2] = {3000, 10};
	list_t a, b, c, c0;
	list_rand(&a, 2, n, 1, 2);
	list_rand(&b, 2, n, 1, 2);
	list_rand(&c, 2, n, 1, 2);
	list_copy(&c0, &c);
	float a0 = a.t[0][7], b0 = b.t[0][7];
	nrt_fuse_stats_t s0 = stats_now();
	gate_hold(q);
	launch_op(q, "t::a", NK_OP_MUL, &a, (const list_t *[]){&a, NULL}, 2, 2.0f, 0, NULL);
	launch_op(q, "t::b", NK_OP_ADD, &b, (const list_t *[]){&b, &a}, 2, 0, 1, NULL);
	nk_foreach_args_t bad;
	memset(&bad, 0, sizeof bad);
	bad.op = NK_OP_NEG;
	bad.nops = 2;
	bad.sk = -1;
	bad.count = 1;
	bad.dtype[0] = bad.dtype[1] = NK_I32;
	bad.esize[0] = bad.esize[1] = 4;
	bad.items[0] = (nk_foreach_item_t){{(char *)c.t[1], (char *)c.t[1], NULL, NULL}, 10, 0, 0, 0, 0};
	CHECK(nrt_queue_launch(q, nk_foreach_run, &bad, sizeof bad, "aten::_foreach_bad") == NRT_OK, "launch");
	launch_op(q, "t::c", NK_OP_MUL, &c, (const list_t *[]){&c, NULL}, 2, 2.0f, 0, NULL);
	gate_release();
	int rc = nrt_queue_synchronize(q);
	nrt_fuse_stats_t s1 = stats_now();
	CHECK(rc == NRT_ERR_KERNEL && strstr(nrt_last_error(), "aten::_foreach_bad: nk_foreach"), "rc %d '%s'", rc,
	      nrt_last_error());
	CHECK(s1.records - s0.records == 2, "a and b fused: %llu", (unsigned long long)(s1.records - s0.records));
	CHECK(a.t[0][7] == a0 * 2 && b.t[0][7] == b0 + a0 * 2, "records before the failure ran");
	CHECK(list_equal(&c, &c0), "records after the failure were skipped");
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "error cleared");
	/* a queue holding a sticky error fuses nothing and skips everything */
	gate_hold(q);
	CHECK(nrt_queue_launch(q, nk_foreach_run, &bad, sizeof bad, "aten::_foreach_bad") == NRT_OK, "launch");
	launch_op(q, "t::c", NK_OP_MUL, &c, (const list_t *[]){&c, NULL}, 2, 2.0f, 0, NULL);
	launch_op(q, "t::c", NK_OP_MUL, &c, (const list_t *[]){&c, NULL}, 2, 2.0f, 0, NULL);
	gate_release();
	CHECK(nrt_queue_synchronize(q) == NRT_ERR_KERNEL, "error");
	CHECK(list_equal(&c, &c0), "skipped after the error");
	CHECK(stats_now().records == s1.records, "nothing fused behind a sticky error");
	list_free(&a);
	list_free(&b);
	list_free(&c);
	list_free(&c0);
}

/* A fusable test kernel: adds `add` to n floats; its range fails at element fail_at (if >= 0). */
struct addk {
	float *x;
	int64_t n, pos, fail_at;
	float add;
};

static int addk_range(void *p, int item, int64_t b, int64_t e)
{
	struct addk *a = p;
	(void)item;
	if (a->fail_at >= b && a->fail_at < e) {
		nrt_kernel_fail("element %lld is cursed", (long long)a->fail_at);
		return 1;
	}
	for (int64_t i = b; i < e; i++)
		a->x[i] += a->add;
	return 0;
}

static int addk_run(void *p)
{
	struct addk *a = p;
	return addk_range(p, 0, 0, a->n);
}

static int addk_describe(const void *p, nrt_fuse_item_t *out, int cap)
{
	const struct addk *a = p;
	if (cap < 1)
		return -1;
	out[0].pos = a->pos;
	out[0].n = a->n;
	out[0].nops = 1;
	out[0].op[0] = (nrt_fuse_operand_t){a->x, 4, 4, true};
	return 1;
}

static const nrt_fuse_kernel_t addk_fuse = {addk_describe, addk_range};

static void test_failure_inside_fused_run(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	enum { N = 100000 };
	float *x = calloc(N, 4);
	CHECK(nrt_fuse_register(addk_run, &addk_fuse) == NRT_OK, "register");
	CHECK(nrt_fuse_register(addk_run, &addk_fuse) == NRT_OK, "register twice");
	CHECK(nrt_fuse_register(NULL, &addk_fuse) == NRT_ERR_INVALID, "null");
	nrt_fuse_set_tile(1000);
	/* no failure: 5 records fused, each element + 5 */
	nrt_fuse_stats_t s0 = stats_now();
	gate_hold(q);
	for (int i = 0; i < 5; i++) {
		struct addk a = {x, N, 0, -1, 1.0f};
		CHECK(nrt_queue_launch(q, addk_run, &a, sizeof a, "t::add") == NRT_OK, "launch");
	}
	gate_release();
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "sync");
	CHECK(stats_now().records - s0.records == 5, "fused");
	bool ok = true;
	for (int i = 0; i < N; i++)
		ok = ok && x[i] == 5.0f;
	CHECK(ok, "x == 5");
	/* the third record fails at element 55555: the sticky error names it, the queue goes on after */
	gate_hold(q);
	for (int i = 0; i < 5; i++) {
		struct addk a = {x, N, 0, i == 2 ? 55555 : -1, 1.0f};
		CHECK(nrt_queue_launch(q, addk_run, &a, sizeof a, i == 2 ? "t::cursed" : "t::add") == NRT_OK, "launch");
	}
	gate_release();
	int rc = nrt_queue_synchronize(q);
	CHECK(rc == NRT_ERR_KERNEL && !strcmp(nrt_last_error(), "t::cursed: element 55555 is cursed"), "rc %d '%s'", rc,
	      nrt_last_error());
	CHECK(x[55555] == 7.0f, "the failing tile ran the records before the failing one only: %g", x[55555]);
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "cleared");
	struct addk a = {x, N, 0, -1, 1.0f};
	memset(x, 0, N * 4);
	CHECK(nrt_queue_launch(q, addk_run, &a, sizeof a, "t::add") == NRT_OK, "launch");
	CHECK(nrt_queue_synchronize(q) == NRT_OK && x[N - 1] == 1.0f, "usable again");
	nrt_fuse_set_tile(NRT_FUSE_TILE_DEFAULT);
	free(x);
}

/* Events: a timing event's record ends a run; a plain event inside a run completes with the run. */
static void test_events_and_trace(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	enum { N = 50000 };
	float *x = calloc(N, 4);
	nrt_event_t *e0 = NULL, *e1 = NULL, *plain = NULL;
	CHECK(nrt_fuse_register(addk_run, &addk_fuse) == NRT_OK, "register");
	CHECK(nrt_event_create(0, NRT_EVENT_TIMING, &e0) == NRT_OK && nrt_event_create(0, NRT_EVENT_TIMING, &e1) == NRT_OK &&
	      nrt_event_create(0, 0, &plain) == NRT_OK, "events");
	struct addk a = {x, N, 0, -1, 1.0f};
	nrt_fuse_stats_t s0 = stats_now();
	gate_hold(q);
	CHECK(nrt_event_record(e0, q) == NRT_OK, "record");
	nrt_queue_launch(q, addk_run, &a, sizeof a, "t::add");
	nrt_queue_launch(q, addk_run, &a, sizeof a, "t::add");
	CHECK(nrt_event_record(e1, q) == NRT_OK, "record");
	nrt_queue_launch(q, addk_run, &a, sizeof a, "t::add");
	CHECK(nrt_event_record(plain, q) == NRT_OK, "record");
	nrt_queue_launch(q, addk_run, &a, sizeof a, "t::add");
	CHECK(nrt_event_query(plain) == NRT_ERR_NOT_READY, "plain event pending behind the gate");
	gate_release();
	CHECK(nrt_event_synchronize(plain) == NRT_OK && x[N - 1] >= 3.0f, "plain event");
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "sync");
	double ms = -1;
	CHECK(nrt_event_elapsed_ms(e0, e1, &ms) == NRT_OK && ms >= 0, "elapsed %g", ms);
	nrt_fuse_stats_t s1 = stats_now();
	CHECK(s1.runs - s0.runs == 2 && s1.records - s0.records == 4, "two runs of two: %llu %llu",
	      (unsigned long long)(s1.runs - s0.runs), (unsigned long long)(s1.records - s0.records));
	CHECK(x[0] == 4.0f && x[N - 1] == 4.0f, "x == 4");

	/* trace: one record per fused record, in order, slices of the run's time */
	nrt_trace_rec_t r[16];
	nrt_trace_drain(r, 16);
	nrt_trace_enable(true);
	gate_hold(q);
	struct addk b = a;
	nrt_queue_launch(q, addk_run, &a, sizeof a, "t::first");
	nrt_queue_launch(q, addk_run, &b, sizeof b, "t::second");
	gate_release();
	nrt_queue_synchronize(q);
	nrt_trace_enable(false);
	int got = nrt_trace_drain(r, 16);
	CHECK(got == 3, "trace records %d", got); /* gate + 2 */
	if (got == 3) {
		CHECK(!strcmp(r[1].name, "t::first") && !strcmp(r[2].name, "t::second"), "names");
		CHECK(r[1].start_ns <= r[1].end_ns && r[1].end_ns == r[2].start_ns && r[2].start_ns <= r[2].end_ns,
		      "slices");
	}
	nrt_event_destroy(e0);
	nrt_event_destroy(e1);
	nrt_event_destroy(plain);
	free(x);
}

/* Fusion off: nothing fuses; the blocking launch mode never fuses either (records run at launch). */
static void test_disabled(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	float x[64] = {0};
	struct addk a = {x, 64, 0, -1, 1.0f};
	CHECK(nrt_fuse_register(addk_run, &addk_fuse) == NRT_OK, "register");
	nrt_fuse_enable(false);
	CHECK(!nrt_fuse_enabled(), "off");
	nrt_fuse_stats_t s0 = stats_now();
	gate_hold(q);
	for (int i = 0; i < 4; i++)
		nrt_queue_launch(q, addk_run, &a, sizeof a, "t::add");
	gate_release();
	CHECK(nrt_queue_synchronize(q) == NRT_OK && x[63] == 4.0f, "ran");
	CHECK(stats_now().records == s0.records, "nothing fused");
	nrt_fuse_enable(true);
	nrt_fuse_set_tile(1);
	CHECK(nrt_fuse_tile() == 64, "tile clamped: %lld", (long long)nrt_fuse_tile());
	nrt_fuse_set_tile(NRT_FUSE_TILE_DEFAULT);
}

/* Dead ranges: the sqrt temporary of an AdamW step, allocated from the arena and freed before the run
 * starts (as Python drops it), lives in tile buffers: the results are those of op by op and the freed
 * memory keeps what it held.  Not freed, or not every queued record in the run: written as usual. */
static int k_noop(void *p)
{
	(void)p;
	return 0;
}

static void dead_fill(list_t *t, uint32_t bits)
{
	for (int i = 0; i < t->count; i++)
		for (int64_t j = 0; j < t->n[i]; j++)
			memcpy(&t->t[i][j], &bits, 4);
}

static bool dead_untouched(const list_t *t, uint32_t bits)
{
	for (int i = 0; i < t->count; i++)
		for (int64_t j = 0; j < t->n[i]; j++)
			if (memcmp(&t->t[i][j], &bits, 4))
				return false;
	return true;
}

static void test_dead_temporary(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	const uint32_t sentinel = 0x7fc0abcdu;
	int64_t n[12];
	int nonzero = 0;
	for (int i = 0; i < 12; i++) {
		n[i] = i == 3 ? 0 : i == 7 ? 70001 : 1 + (int64_t)(rndu() * 5000);
		nonzero += n[i] > 0;
	}
	struct adam_state ref;
	adam_init(&ref, 12, n);
	nrt_fuse_enable(false);
	adamw_step(q, &ref.p, &ref.g, &ref.m, &ref.v, &ref.tmp, 1);
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "op by op: %s", nrt_last_error());
	nrt_fuse_enable(true);

	for (int mode = 0; mode < 4; mode++) { /* 0: freed; 1: kept; 2: freed, run cut; 3: buffers off */
		struct adam_state f;
		list_t tmp;
		adam_init(&f, 12, n);
		list_free(&f.p);
		list_free(&f.g);
		list_copy(&f.p, &ref.p);
		list_copy(&f.g, &ref.g);
		/* ref.p was updated: start both from the same state by re-running the reference below */
		struct adam_state r;
		adam_init(&r, 12, n);
		list_free(&r.p);
		list_free(&r.g);
		list_copy(&r.p, &f.p);
		list_copy(&r.g, &f.g);
		nrt_fuse_enable(false);
		adamw_step(q, &r.p, &r.g, &r.m, &r.v, &r.tmp, 1);
		CHECK(nrt_queue_synchronize(q) == NRT_OK, "reference");
		nrt_fuse_enable(true);

		tmp.count = 12;
		for (int i = 0; i < 12; i++) {
			tmp.n[i] = n[i];
			CHECK(nrt_malloc(q, (size_t)(n[i] ? n[i] : 1) * 4, (void **)&tmp.t[i]) == NRT_OK, "malloc");
		}
		dead_fill(&tmp, sentinel);
		nrt_fuse_set_dead_buffers(mode != 3);
		nrt_fuse_stats_t s0 = stats_now();
		gate_hold(q);
		if (mode == 2) { /* the last op queued after a record that ends the run */
			double ss[MAXL];
			adamw_step(q, &f.p, &f.g, &f.m, &f.v, &tmp, 1);
			CHECK(nrt_queue_launch(q, k_noop, NULL, 0, "test::noop") == NRT_OK, "noop");
			for (int i = 0; i < 12; i++)
				ss[i] = 0;
			launch_op(q, "aten::_foreach_addcdiv_", NK_OP_ADDCDIV, &f.m, (const list_t *[]){&f.m, &f.m, &tmp}, 3,
				  0, 0, ss);
		} else {
			adamw_step(q, &f.p, &f.g, &f.m, &f.v, &tmp, 1);
		}
		if (mode != 1)
			for (int i = 0; i < 12; i++)
				CHECK(nrt_free(tmp.t[i]) == NRT_OK, "free");
		gate_release();
		CHECK(nrt_queue_synchronize(q) == NRT_OK, "fused: %s", nrt_last_error());
		nrt_fuse_stats_t s1 = stats_now();
		CHECK(list_equal(&f.p, &r.p) && list_equal(&f.v, &r.v), "mode %d: params differ from op by op", mode);
		if (mode != 2)
			CHECK(list_equal(&f.m, &r.m), "mode %d: exp_avg differs from op by op", mode);
		if (mode == 0) {
			CHECK(s1.dead - s0.dead == (uint64_t)nonzero, "dead ranges %llu, want %d",
			      (unsigned long long)(s1.dead - s0.dead), nonzero);
			CHECK(dead_untouched(&tmp, sentinel), "a dead temporary was written to memory");
		} else {
			CHECK(s1.dead == s0.dead, "mode %d: %llu dead ranges", mode, (unsigned long long)(s1.dead - s0.dead));
			CHECK(mode == 1 ? list_equal(&tmp, &r.tmp) : !dead_untouched(&tmp, sentinel),
			      "mode %d: temporary not written", mode);
		}
		if (mode == 1)
			for (int i = 0; i < 12; i++)
				CHECK(nrt_free(tmp.t[i]) == NRT_OK, "free");
		adam_free(&f);
		adam_free(&r);
	}
	nrt_fuse_set_dead_buffers(true);
	adam_free(&ref);
}

int main(void)
{
	unsetenv("NEURON_LAUNCH_BLOCKING");
	if (nrt_init() != NRT_OK) {
		fprintf(stderr, "nrt_init: %s\n", nrt_last_error());
		return 1;
	}
	/* as the glue does (ops_foreach.cpp) */
	CHECK(nrt_fuse_register(nk_foreach_run, &nk_foreach_fuse) == NRT_OK, "register nk_foreach");
	RUN(test_run_vs_ref);
	RUN(test_check_errors);
	RUN(test_fused_adamw_matches_op_by_op);
	RUN(test_dead_temporary);
	RUN(test_fusion_rules);
	RUN(test_failing_record_mid_run);
	RUN(test_failure_inside_fused_run);
	RUN(test_events_and_trace);
	RUN(test_disabled);
	return ctest_finish();
}
