/* test_nc.c - the graph compiler (csrc/compiler) on IR text, without Python: parse errors, fusion
 * decisions, memory-plan offsets, emitted programs compiled with cc and run against the kernel
 * library's references, and a loop failing the compiler's Nth heap allocation.
 *
 * The IR fixtures are what torchneuron/compile/serialize.py writes (NEURON_COMPILE_DEBUG=1 keeps
 * them as graph.ir).  Programs are built with `cc` (NEURON_CC overrides) into a temporary directory,
 * with the scalar libm (NC_SCALAR_LIBM), so pointwise results match the references bit for bit.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctest.h"
#include "nc.h"
#include "nk.h"

/* ---- fixtures --------------------------------------------------------------------------------- */
#define V48(id) "v " #id " f32 2 4 8 8 1 0 32 8 1 1 4 32 1 1 0 n\n"
#define V88(id) "v " #id " f32 2 8 8 8 1 0 64 8 1 1 8 64 1 1 0 n\n"

/* (x.exp() + 2).relu(): one pointwise unit */
static const char *IR_PW = "ncir 1\nsyms 0\n" V48(0) V48(1) V48(2) V48(3)
			   "in 1 0\n"
			   "n 0 P exp 1 1 1 v0 1 f32\n"
			   "n 1 P add 1 2 2 v1 i2 1 f32\n"
			   "n 2 P relu 1 3 1 v2 1 f32\n"
			   "out 1 3\nend\n";
/* (x * 2).sum(1): one row unit */
static const char *IR_ROW = "ncir 1\nsyms 0\n" V48(0) V48(1) "v 2 f32 1 4 1 0 4 1 1 4 1 0 n\n"
			    "in 1 0\n"
			    "n 0 P mul 1 1 2 v0 i2 1 f32\n"
			    "n 1 R sum 1 2 1 v1 4 f32 0 1 1\n"
			    "out 1 2\nend\n";
/* (x + 1).sum(0): one column unit */
static const char *IR_COL = "ncir 1\nsyms 0\n" V48(0) V48(1) "v 2 f32 1 8 1 0 8 1 1 8 1 0 n\n"
			    "in 1 0\n"
			    "n 0 P add 1 1 2 v0 i1 1 f32\n"
			    "n 1 R sum 1 2 1 v1 4 f32 0 1 0\n"
			    "out 1 2\nend\n";
/* (x @ w).relu() + 1: a GEMM with a pointwise epilogue */
static const char *IR_MM = "ncir 1\nsyms 0\n" V48(0) V88(1) V48(2) V48(3) V48(4)
			   "in 2 0 1\n"
			   "n 0 L mm 1 2 2 v0 v1 0\n"
			   "n 1 P relu 1 3 1 v2 1 f32\n"
			   "n 2 P add 1 4 2 v3 i1 1 f32\n"
			   "out 1 4\nend\n";
/* ((x.relu() @ w) @ w) + 1: workspace buffers with overlapping and disjoint live ranges */
static const char *IR_WS = "ncir 1\nsyms 0\n" V48(0) V88(1) V48(2) V48(3) V48(4) V48(5)
			   "in 2 0 1\n"
			   "n 0 P relu 1 2 1 v0 1 f32\n"
			   "n 1 L mm 1 3 2 v2 v1 0\n"
			   "n 2 L mm 1 4 2 v3 v1 0\n"
			   "n 3 P add 1 5 2 v4 i1 1 f32\n"
			   "out 1 5\nend\n";

static bool has(const char *text, const char *needle) { return text && strstr(text, needle) != NULL; }

/* ---- building and running a program ----------------------------------------------------------- */
typedef struct {
	void *h;
	char dir[64];
	int64_t (*plan)(const int64_t *S, int64_t *off);
} prog_t;

static int build(prog_t *p, const nc_result_t *r)
{
	memset(p, 0, sizeof *p);
	snprintf(p->dir, sizeof p->dir, "/tmp/test_nc-XXXXXX");
	if (!mkdtemp(p->dir))
		return -1;
	char src[128], so[128], cmd[512];
	snprintf(src, sizeof src, "%s/program.c", p->dir);
	snprintf(so, sizeof so, "%s/program.so", p->dir);
	FILE *f = fopen(src, "w");
	if (!f)
		return -1;
	/* what toolchain.load_program compiles: the prelude, then the source without its include */
	const char *body = nc_result_source(r), *inc = strstr(body, "#include \"nc_program.h\"");
	fputs(nc_prelude(), f);
	fputc('\n', f);
	if (inc) {
		fwrite(body, 1, (size_t)(inc - body), f);
		body = inc + strlen("#include \"nc_program.h\"");
	}
	fputs(body, f);
	fclose(f);
	const char *cc = getenv("NEURON_CC") ? getenv("NEURON_CC") : "cc";
	snprintf(cmd, sizeof cmd, "%s -O2 -march=native -fPIC -shared -fopenmp-simd -fno-math-errno -ffp-contract=off -DNC_SCALAR_LIBM -o %s %s -lm", cc, so,
		 src);
	if (system(cmd) != 0)
		return -1;
	p->h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	if (!p->h)
		return -1;
	int (*init)(const nc_rt_t *) = (int (*)(const nc_rt_t *))dlsym(p->h, "nc_init");
	p->plan = (int64_t(*)(const int64_t *, int64_t *))dlsym(p->h, "nc_plan");
	if (!init || !p->plan || init(nc_rt_table()) != 0)
		return -1;
	return 0;
}

static void unbuild(prog_t *p)
{
	char path[128];
	if (p->h)
		dlclose(p->h);
	snprintf(path, sizeof path, "%s/program.c", p->dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/program.so", p->dir);
	unlink(path);
	rmdir(p->dir);
}

/* the value ids after `key k` on the plan line "key k n ids..." (seg) or "key n ids..." (ws, ext) */
static int plan_ids(const char *plan, const char *key, int k, int *ids, int max)
{
	char head[32];
	if (k >= 0)
		snprintf(head, sizeof head, "\n%s %d ", key, k);
	else
		snprintf(head, sizeof head, "\n%s ", key);
	const char *s = strstr(plan, head);
	if (!s)
		return -1;
	s += strlen(head);
	char *e;
	long n = strtol(s, &e, 10);
	for (long i = 0; i < n && i < max; i++)
		ids[i] = (int)strtol(e, &e, 10);
	return (int)n;
}

/* launch segment k: int64 symbols (none here), then one pointer per root the plan lists */
static int run_seg(prog_t *p, const char *plan, int k, void *const *by_value)
{
	int ids[64];
	int n = plan_ids(plan, "seg", k, ids, 64);
	if (n < 0 || n > 64)
		return -1;
	void *args[64];
	for (int i = 0; i < n; i++)
		args[i] = by_value[ids[i]];
	char name[32];
	snprintf(name, sizeof name, "nc_seg%d", k);
	int (*seg)(void *) = (int (*)(void *))dlsym(p->h, name);
	return seg ? seg(args) : -1;
}

static nk_iter_t iter2d(int nops, void **data, const int64_t *rowstride_bytes)
{
	nk_iter_t it;
	memset(&it, 0, sizeof it);
	it.ndim = 2;
	it.nops = nops;
	it.shape[0] = 8;
	it.shape[1] = 4;
	for (int k = 0; k < nops; k++) {
		it.data[k] = data[k];
		it.strides[k][0] = rowstride_bytes[k] ? 4 : 0;
		it.strides[k][1] = rowstride_bytes[k];
		it.dtype[k] = NK_F32;
	}
	return it;
}

/* out = op(x[, y]) by the reference pointwise kernel on [4, 8] f32; y NULL: unary; ys: y is a scalar */
static void ref_pw(int op, float *out, const float *x, const float *y, bool ys)
{
	void *d[3] = {out, (void *)x, (void *)y};
	int64_t st[3] = {32, 32, ys ? 0 : 32};
	nk_pointwise_args_t a = {.it = iter2d(y ? 3 : 2, d, st), .op = op, .a = 1, .b = 0};
	CHECK(nk_pointwise_ref(&a) == 0, "nk_pointwise_ref op %d", op);
}

static void fill(float *x, int n, unsigned seed)
{
	for (int i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		x[i] = ((float)(seed >> 8 & 0xffff) / 65536.0f - 0.5f) * 8.0f;
	}
}

/* ---- tests ------------------------------------------------------------------------------------ */
static void test_parse_errors(void)
{
	static const struct {
		const char *ir;
		int status;
		const char *msg;
	} cases[] = {
		{"", NC_ERR_PARSE, ""},
		{"ncir 2\nend\n", NC_ERR_PARSE, ""},
		{"ncir 1\nsyms 0\n" V48(0) "in 1 0\nout 1 0\n", NC_ERR_PARSE, ""},                      /* no end */
		{"ncir 1\nsyms 0\nv 0 f31 2 4 8 8 1 0 32 8 1 1 4 32 1 1 0 n\nin 1 0\nout 1 0\nend\n", NC_ERR_PARSE, "f31"},
		{"ncir 1\nsyms 0\n" V48(0) "in 1 0\nn 0 P exp 1 1 1 v7 1 f32\nout 1 0\nend\n", 0, ""},   /* unknown value */
		{"ncir 1\nsyms 0\n" V48(0) V48(1) "in 1 0\nn 0 P exp 1 1 1 q0 1 f32\nout 1 1\nend\n", NC_ERR_PARSE, "q0"},
		{"ncir 1\nsyms 0\n" V48(0) V48(1) "in 1 0\nn 0 Z exp 1 1 1 v0 1 f32\nout 1 1\nend\n", 0, ""}, /* kind */
		{"ncir 1\nsyms 0\n" V48(0) "in 1 0\nout 1 9\nend\n", 0, ""},                             /* output */
		{"ncir 1\nsyms 0\nv 0 f32 99 4\nend\n", 0, ""},                                           /* rank */
		{"ncir 1\nsyms 0\n" V48(0) V48(1) "in 1 0\nn 0 P frobnicate 1 1 1 v0 1 f32\nout 1 1\nend\n", NC_ERR_INVALID,
		 "frobnicate"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		nc_result_t *r = NULL;
		int st = nc_compile(cases[i].ir, &r);
		CHECK(r != NULL, "case %zu: no result", i);
		if (cases[i].status)
			CHECK(st == cases[i].status, "case %zu: status %d, expected %d (%s)", i, st, cases[i].status,
			      nc_result_error(r));
		else
			CHECK(st == NC_ERR_PARSE || st == NC_ERR_INVALID, "case %zu: status %d (%s)", i, st, nc_result_error(r));
		CHECK(nc_result_error(r)[0] && has(nc_result_error(r), cases[i].msg), "case %zu: message '%s'", i,
		      nc_result_error(r));
		CHECK(!nc_result_source(r)[0] && !nc_result_plan(r)[0], "case %zu: output on failure", i);
		nc_result_free(r);
	}
	nc_result_t *r = NULL;
	CHECK(nc_compile(NULL, &r) == NC_ERR_PARSE, "NULL IR");
	nc_result_free(r);
}

static void test_fusion_decisions(void)
{
	static const struct {
		const char **ir;
		const char *log, *plan;
	} cases[] = {
		{&IR_PW, "unit 0 pw R=4 L=8 nodes 0:exp 1:add 2:relu", "\nkernels 1\n"},
		{&IR_ROW, "unit 0 row R=4 L=8 nodes 0:mul 1:sum", "\nkernels 1\n"},
		{&IR_COL, "unit 0 col R=((32)/(8)) L=8 nodes 0:add 1:sum", "\nkernels 1\n"},
		{&IR_MM, "epilogue: unit 1 runs inside the mm of unit 0", "\nunit 1 pw 2 1 2\n"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		nc_result_t *r = NULL;
		int st = nc_compile(*cases[i].ir, &r);
		CHECK(st == NC_OK, "case %zu: %s", i, nc_result_error(r));
		CHECK(has(nc_result_log(r), cases[i].log), "case %zu: log\n%s", i, nc_result_log(r));
		CHECK(has(nc_result_plan(r), cases[i].plan), "case %zu: plan\n%s", i, nc_result_plan(r));
		CHECK(has(nc_result_source(r), "nc_seg0"), "case %zu: no segment", i);
		nc_result_free(r);
	}
}

static void test_emitted_pointwise_matches_refs(void)
{
	nc_result_t *r = NULL;
	prog_t p;
	CHECK(nc_compile(IR_PW, &r) == NC_OK, "%s", nc_result_error(r));
	if (build(&p, r)) {
		CHECK(0, "building the program failed");
		nc_result_free(r);
		return;
	}
	float x[32], out[32], t1[32], t2[32], want[32], two = 2.0f;
	fill(x, 32, 1);
	x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = -0.0f, x[4] = 88.8f, x[5] = -104.0f, x[6] = 1e-30f;
	void *vals[4] = {x, NULL, NULL, out};
	CHECK(run_seg(&p, nc_result_plan(r), 0, vals) == 0, "segment failed");
	ref_pw(NK_OP_EXP, t1, x, NULL, false);
	ref_pw(NK_OP_ADD, t2, t1, &two, true);
	ref_pw(NK_OP_RELU, want, t2, NULL, false);
	for (int i = 0; i < 32; i++)
		CHECK(memcmp(&out[i], &want[i], 4) == 0, "x=%a: compiled %a, reference %a", x[i], out[i], want[i]);
	unbuild(&p);
	nc_result_free(r);
}

static void test_emitted_reductions_match_refs(void)
{
	const char *irs[2] = {IR_ROW, IR_COL};
	for (int c = 0; c < 2; c++) {
		nc_result_t *r = NULL;
		prog_t p;
		CHECK(nc_compile(irs[c], &r) == NC_OK, "%s", nc_result_error(r));
		if (build(&p, r)) {
			CHECK(0, "building the program failed");
			nc_result_free(r);
			continue;
		}
		float x[32], out[8] = {0}, t[32], want[8], k = c ? 1.0f : 2.0f;
		fill(x, 32, 2 + (unsigned)c);
		void *vals[3] = {x, NULL, out};
		CHECK(run_seg(&p, nc_result_plan(r), 0, vals) == 0, "segment failed");
		ref_pw(c ? NK_OP_ADD : NK_OP_MUL, t, x, &k, true);
		/* row: [O=4, R=8, I=1]; column: [O=1, R=4, I=8] */
		nk_reduce_args_t a = {.in = t, .out = want, .dtype_in = NK_F32, .dtype_out = NK_F32, .O = c ? 1 : 4,
				      .R = c ? 4 : 8, .I = c ? 8 : 1, .op = NK_RED_SUM};
		CHECK(nk_reduce_ref(&a) == 0, "nk_reduce_ref");
		for (int i = 0; i < (c ? 8 : 4); i++)
			CHECK(fabsf(out[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])), "case %d [%d]: %g vs %g", c, i, out[i],
			      want[i]);
		unbuild(&p);
		nc_result_free(r);
	}
}

/* The workspace plan: buffers whose live ranges intersect get disjoint 64-byte aligned slices, and
 * the last mm's output reuses the relu's slice (dead once the first mm has run). */
static void test_memory_plan_offsets(void)
{
	nc_result_t *r = NULL;
	prog_t p;
	CHECK(nc_compile(IR_WS, &r) == NC_OK, "%s", nc_result_error(r));
	const char *plan = nc_result_plan(r);
	int ws[8];
	int nws = plan_ids(plan, "ws", -1, ws, 8);
	CHECK(nws == 3 && ws[0] == 2 && ws[1] == 3 && ws[2] == 4, "ws list in\n%s", plan);
	if (nws != 3 || build(&p, r)) {
		CHECK(0, "no program");
		nc_result_free(r);
		return;
	}
	int64_t off[3] = {-1, -1, -1};
	int64_t total = p.plan(NULL, off);
	/* v2 (relu) lives over [relu, mm1], v3 over [mm1, mm2], v4 over [mm2, add]: 128 bytes each */
	CHECK(off[0] != off[1] && off[1] != off[2], "live buffers share bytes: %lld %lld %lld", (long long)off[0],
	      (long long)off[1], (long long)off[2]);
	CHECK(off[0] == off[2], "v4 does not reuse v2's slice: %lld %lld", (long long)off[0], (long long)off[2]);
	CHECK(total == 256 && off[0] % 64 == 0 && off[1] % 64 == 0, "total %lld, offsets %lld %lld", (long long)total,
	      (long long)off[0], (long long)off[1]);
	/* and the program computes ((relu(x) @ w) @ w) + 1 like the references */
	char wsbuf[256] __attribute__((aligned(64)));
	float x[32], w[64], out[32], t[32], u[32], v[32], want[32], one = 1.0f;
	fill(x, 32, 5);
	fill(w, 64, 6);
	void *vals[6] = {x, w, wsbuf + off[0], wsbuf + off[1], wsbuf + off[2], out};
	int segs[4], nseg = 0;
	for (int k = 0; k < 4; k++)
		if (plan_ids(plan, "seg", k, segs, 4) >= 0)
			nseg = k + 1;
	for (int k = 0; k < nseg; k++)
		CHECK(run_seg(&p, plan, k, vals) == 0, "segment %d failed", k);
	ref_pw(NK_OP_RELU, t, x, NULL, false);
	nk_gemm_args_t g = {.dtype = NK_F32, .M = 4, .N = 8, .K = 8, .batch = 1, .alpha = 1, .beta = 0, .A = t, .rs_a = 8,
			    .cs_a = 1, .B = w, .rs_b = 8, .cs_b = 1, .C = u, .rs_c = 8, .cs_c = 1};
	CHECK(nk_gemm_ref(&g) == 0, "gemm ref");
	g.A = u, g.C = v;
	CHECK(nk_gemm_ref(&g) == 0, "gemm ref");
	ref_pw(NK_OP_ADD, want, v, &one, true);
	for (int i = 0; i < 32; i++)
		CHECK(fabsf(out[i] - want[i]) <= 1e-4f * (1 + fabsf(want[i])), "[%d]: %g vs %g", i, out[i], want[i]);
	unbuild(&p);
	nc_result_free(r);
}

/* Fail the compiler's 1st, 2nd, ... heap allocation: every failure is NC_ERR_NOMEM (an "out of
 * memory" message, or no result at all), nothing leaks (ASan), and once the count passes the last
 * allocation the output is the fault-free one. */
static void test_fail_nth_allocation(void)
{
	const char *irs[] = {IR_PW, IR_ROW, IR_COL, IR_MM, IR_WS};
	for (size_t c = 0; c < sizeof irs / sizeof irs[0]; c++) {
		nc_result_t *clean = NULL;
		CHECK(nc_compile(irs[c], &clean) == NC_OK, "fault-free compile");
		int n;
		for (n = 1; n < 100000; n++) {
			nc_result_t *r = NULL;
			nc_fault_after(n);
			int st = nc_compile(irs[c], &r);
			nc_fault_after(0);
			if (st == NC_OK) {
				CHECK(!strcmp(nc_result_source(r), nc_result_source(clean)) &&
					      !strcmp(nc_result_plan(r), nc_result_plan(clean)),
				      "case %zu: allocation %d failed silently: different output", c, n);
				nc_result_free(r);
				break;
			}
			CHECK(st == NC_ERR_NOMEM, "case %zu: allocation %d: status %d (%s)", c, n, st, nc_result_error(r));
			CHECK(has(nc_result_error(r), "out of memory"), "case %zu: allocation %d: '%s'", c, n,
			      nc_result_error(r));
			nc_result_free(r);
		}
		CHECK(n > 5 && n < 100000, "case %zu: %d allocations", c, n);
		nc_result_free(clean);
	}
}

int main(void)
{
	RUN(test_parse_errors);
	RUN(test_fusion_decisions);
	RUN(test_emitted_pointwise_matches_refs);
	RUN(test_emitted_reductions_match_refs);
	RUN(test_memory_plan_offsets);
	RUN(test_fail_nth_allocation);
	return ctest_finish();
}
