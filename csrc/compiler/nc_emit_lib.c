/* nc_emit_lib.c - library calls inside a segment: fill the kernel library's argument struct from
 * the operands' sizes, strides and buffers, and call it through the runtime table (RT->gemm, ...).
 * A failing call returns from the segment with 1; the library kernel has already recorded the
 * message with nrt_kernel_fail, so the queue's error names the cause.
 *
 * The frontend only emits an L node when the operands meet the kernel's layout contract (nk.h):
 * contiguous rows for softmax/layer norm/embedding/nll, any strides for GEMM and attention.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nc_impl.h"

static int pidx(const nc_graph_t *g, int seg, int value)
{
	int root = g->v[value].root;
	const nc_seg_t *s = &g->seg[seg];
	for (int i = 0; i < s->nroots; i++)
		if (s->roots[i] == root)
			return i;
	return -1;
}

/* "((char *)P[i] + (off) * esize)" or "NULL" for an absent value */
static const char *ptr(const nc_graph_t *g, int seg, int value, char *buf, size_t n)
{
	if (value < 0) {
		snprintf(buf, n, "NULL");
		return buf;
	}
	const nc_value_t *v = &g->v[value];
	snprintf(buf, n, "((char *)P[%d] + (int64_t)(%s) * %d)", pidx(g, seg, value), v->off, nc_dtype_size(v->dtype));
	return buf;
}

static int in_v(const nc_node_t *n, int i) { return i < n->nin && n->ins[i].kind == 'v' ? n->ins[i].v : -1; }
static int out_v(const nc_node_t *n, int i) { return i < n->nout ? n->outs[i] : -1; }

static int check_ptrs(nc_graph_t *g, int seg, const nc_node_t *n)
{
	for (int i = 0; i < n->nin; i++)
		if (n->ins[i].kind == 'v' && n->ins[i].v >= 0 && pidx(g, seg, n->ins[i].v) < 0)
			return nc_fail(g, NC_ERR_INVALID, "internal: operand %d of node %d has no pointer", n->ins[i].v, n->id);
	for (int i = 0; i < n->nout; i++)
		if (n->outs[i] >= 0 && pidx(g, seg, n->outs[i]) < 0)
			return nc_fail(g, NC_ERR_INVALID, "internal: output %d of node %d has no pointer", n->outs[i], n->id);
	return 0;
}

/* the argument struct a_ of a GEMM node (declared and filled) */
static void gemm_fill(nc_graph_t *g, nc_sb_t *s, int seg, const nc_node_t *n, bool batched)
{
	const nc_value_t *A = &g->v[in_v(n, 0)], *B = &g->v[in_v(n, 1)], *C = &g->v[out_v(n, 0)];
	int o = batched ? 1 : 0;
	char pa[128], pb[128], pc[128];
	sb_printf(s, "\t\tnk_gemm_args_t a_;\n\t\tmemset(&a_, 0, sizeof a_);\n");
	sb_printf(s, "\t\ta_.dtype = %d; a_.M = (%s); a_.N = (%s); a_.K = (%s); a_.batch = %s;\n", C->dtype, A->size[o],
		  B->size[o + 1], A->size[o + 1], batched ? A->size[0] : "1");
	sb_printf(s, "\t\ta_.alpha = 1.0; a_.beta = 0.0;\n");
	sb_printf(s, "\t\ta_.A = %s; a_.rs_a = (%s); a_.cs_a = (%s); a_.bs_a = %s;\n", ptr(g, seg, A->id, pa, sizeof pa),
		  A->stride[o], A->stride[o + 1], batched ? A->stride[0] : "0");
	sb_printf(s, "\t\ta_.B = %s; a_.rs_b = (%s); a_.cs_b = (%s); a_.bs_b = %s;\n", ptr(g, seg, B->id, pb, sizeof pb),
		  B->stride[o], B->stride[o + 1], batched ? B->stride[0] : "0");
	sb_printf(s, "\t\ta_.C = %s; a_.rs_c = (%s); a_.cs_c = (%s); a_.bs_c = %s;\n", ptr(g, seg, C->id, pc, sizeof pc),
		  C->stride[o], C->stride[o + 1], batched ? C->stride[0] : "0");
	if (!batched && n->nin == 3) { /* addmm's bias row (N or 1 elements, C's dtype): C = A@B + bias, in the GEMM */
		const nc_value_t *b = &g->v[in_v(n, 2)];
		sb_printf(s, "\t\ta_.beta = 1.0; a_.bias = %s; a_.rs_bias = 0; a_.cs_bias = (%s) == 1 ? 0 : (%s); a_.bs_bias = 0;\n",
			  ptr(g, seg, b->id, pa, sizeof pa), b->size[0], b->stride[0]);
	}
}

/* the argument struct of a layer norm node (declared and filled) */
static void ln_fill(nc_graph_t *g, nc_sb_t *s, int seg, const nc_node_t *n, const char *a)
{
	char p0[128], p1[128], p2[128];
	const nc_value_t *x = &g->v[in_v(n, 0)];
	int k = x->rank - atoi(n->attrs[0]);
	sb_printf(s, "\t\tnk_layernorm_args_t %s;\n\t\tmemset(&%s, 0, sizeof %s);\n", a, a, a);
	sb_printf(s, "\t\t%s.dtype = %d; %s.rows = (%s); %s.cols = (%s); %s.eps = %s;\n", a, x->dtype, a, x->pp[k], a, x->sp[k], a,
		  n->attrs[1]);
	sb_printf(s, "\t\t%s.x = %s; %s.w = %s; %s.b = %s;\n", a, ptr(g, seg, x->id, p0, sizeof p0), a,
		  ptr(g, seg, in_v(n, 1), p1, sizeof p1), a, ptr(g, seg, in_v(n, 2), p2, sizeof p2));
	sb_printf(s, "\t\t%s.y = %s; %s.mean = %s; %s.rstd = %s;\n", a, ptr(g, seg, out_v(n, 0), p0, sizeof p0), a,
		  ptr(g, seg, out_v(n, 1), p1, sizeof p1), a, ptr(g, seg, out_v(n, 2), p2, sizeof p2));
}

static void gemm(nc_graph_t *g, nc_sb_t *s, int seg, const nc_node_t *n, bool batched)
{
	const nc_value_t *A = &g->v[in_v(n, 0)], *C = &g->v[out_v(n, 0)];
	sb_printf(s, "\t{ /* %s */\n", n->op);
	gemm_fill(g, s, seg, n, batched);
	int epi = batched ? 0 : g->u[n->unit].epi1;
	if (epi) {
		/* the epilogue (a PW unit over rows of C, R = M, L = N) after each row block of the GEMM,
		 * while the block is in cache: C cut into equal row blocks of at most about 16 MiB (half the
		 * L3), at least 64 rows.  Every row block re-packs all of B (the library has no epilogue
		 * callback): blocks of 1 MiB cost a whole BERT layer's GEMMs about a third more than one call
		 * (packing B 12 times for N = 3072), and blocks of 8 MiB (a 12 MiB C in 672 + 352 rows) made
		 * linear + GELU [1024 x 768 -> 3072] 9-13 % slower than eager, against 3-4 % as one block. */
		const nc_unit_t *e = &g->u[epi - 1];
		sb_printf(s, "\t\tconst int64_t L_ = (%s), CH_ = L_ < NC_CHUNK ? (L_ > 0 ? L_ : 1) : NC_CHUNK, NCH_ = (L_ + CH_ - 1) / CH_;\n", e->L);
		sb_printf(s, "\t\tconst int64_t NBK_ = nc_max(1, (a_.M * nc_max(a_.N, 1) * %d + (16 << 20) - 1) / (16 << 20));\n",
			  nc_dtype_size(C->dtype));
		sb_printf(s, "\t\tconst int64_t MB_ = nc_max(64, ((a_.M + NBK_ - 1) / NBK_ + 15) / 16 * 16);\n");
		sb_printf(s, "\t\tfor (int64_t m0_ = 0; m0_ < a_.M; m0_ += MB_) {\n");
		sb_printf(s, "\t\t\tnk_gemm_args_t b_ = a_;\n\t\t\tb_.M = nc_min(MB_, a_.M - m0_);\n");
		sb_printf(s, "\t\t\tb_.A = (const char *)a_.A + m0_ * a_.rs_a * %d;\n", nc_dtype_size(A->dtype));
		sb_printf(s, "\t\t\tb_.C = (char *)a_.C + m0_ * a_.rs_c * %d;\n", nc_dtype_size(C->dtype));
		sb_printf(s, "\t\t\tif (b_.N > 0 && b_.K == 0 && !b_.bias) {\n\t\t\t\tfor (int64_t i = 0; i < b_.M; i++)\n"
			     "\t\t\t\t\tfor (int64_t j = 0; j < b_.N; j++)\n"
			     "\t\t\t\t\t\tmemset((char *)b_.C + (i * b_.rs_c + j * b_.cs_c) * %d, 0, %d);\n"
			     "\t\t\t} else if (b_.N > 0 && RT->gemm(&b_)) {\n\t\t\t\treturn 1;\n\t\t\t}\n",
			  nc_dtype_size(C->dtype), nc_dtype_size(C->dtype));
		sb_printf(s, "\t\t\tnc_off_t o_ = {nc_k%d, &ctx, m0_ * NCH_};\n", e->kid);
		sb_printf(s, "\t\t\tif (L_ > 0)\n\t\t\t\tRT->parallel_for(b_.M * NCH_, nc_max(1, 32768 / CH_), nc_off_run, &o_);\n");
		sb_printf(s, "\t\t}\n\t}\n");
		return;
	}
	sb_printf(s, "\t\tif (a_.M > 0 && a_.N > 0 && a_.batch > 0) {\n");
	sb_printf(s, "\t\t\tif (a_.K == 0 && !a_.bias) {\n\t\t\t\tfor (int64_t b = 0; b < a_.batch; b++)\n"
		     "\t\t\t\t\tfor (int64_t i = 0; i < a_.M; i++)\n\t\t\t\t\t\tfor (int64_t j = 0; j < a_.N; j++)\n"
		     "\t\t\t\t\t\t\tmemset((char *)a_.C + (b * a_.bs_c + i * a_.rs_c + j * a_.cs_c) * %d, 0, %d);\n",
		  nc_dtype_size(C->dtype), nc_dtype_size(C->dtype));
	sb_printf(s, "\t\t\t} else if (RT->gemm(&a_)) {\n\t\t\t\treturn 1;\n\t\t\t}\n\t\t}\n\t}\n");
}

static void stride4(nc_sb_t *s, const char *field, const nc_value_t *v, bool bcast)
{
	/* right-align into 4 dims; size-1 dims of a broadcast operand get stride 0 */
	for (int d = 0; d < 4; d++) {
		int vd = d - (4 - v->rank);
		const char *st = vd < 0 ? "0" : (bcast && nc_is_one(v->size[vd])) ? "0" : v->stride[vd];
		sb_printf(s, "\t\ta_%s[%d] = (%s);\n", field, d, st);
	}
}

static void attention_args(nc_graph_t *g, nc_sb_t *s, int seg, const nc_node_t *n, const char *pfx, int q, int k, int v,
			   int bias, int causal_attr)
{
	char p[128];
	const nc_value_t *Q = &g->v[q], *K = &g->v[k], *V = &g->v[v];
	sb_printf(s, "\t\t%sdtype = %d; %sB = (%s); %sHq = (%s); %sHkv = (%s); %sTq = (%s); %sTk = (%s); %sD = (%s); %sDv = (%s);\n",
		  pfx, Q->dtype, pfx, Q->size[0], pfx, Q->size[1], pfx, K->size[1], pfx, Q->size[2], pfx, K->size[2], pfx,
		  Q->size[3], pfx, V->size[3]);
	const char *sc = n->attrs[causal_attr + 1];
	if (!strcmp(sc, "-"))
		sb_printf(s, "\t\t%sscale = 1.0 / sqrt((double)(%s));\n", pfx, Q->size[3]);
	else
		sb_printf(s, "\t\t%sscale = %s;\n", pfx, sc);
	sb_printf(s, "\t\t%sdropout_p = 0.0; %scausal = %s; %sseed = 0; %soffset = 0;\n", pfx, pfx,
		  atoi(n->attrs[causal_attr]) ? "true" : "false", pfx, pfx);
	sb_printf(s, "\t\t%sq = %s;\n", pfx, ptr(g, seg, q, p, sizeof p));
	sb_printf(s, "\t\t%sk = %s;\n", pfx, ptr(g, seg, k, p, sizeof p));
	sb_printf(s, "\t\t%sv = %s;\n", pfx, ptr(g, seg, v, p, sizeof p));
	for (int d = 0; d < 4; d++)
		sb_printf(s, "\t\t%ssq[%d] = (%s); %ssk[%d] = (%s); %ssv[%d] = (%s);\n", pfx, d, Q->stride[d], pfx, d, K->stride[d],
			  pfx, d, V->stride[d]);
	if (bias >= 0) {
		const nc_value_t *M = &g->v[bias];
		sb_printf(s, "\t\t%smask = %s; %smask_dtype = %d;\n", pfx, ptr(g, seg, bias, p, sizeof p), pfx, M->dtype);
		for (int d = 0; d < 4; d++) {
			int vd = d - (4 - M->rank);
			const char *st = vd < 0 ? "0" : nc_is_one(M->size[vd]) ? "0" : M->stride[vd];
			sb_printf(s, "\t\t%ssmask[%d] = (%s);\n", pfx, d, st);
		}
	}
}

static void syms(const nc_graph_t *g, nc_sb_t *s)
{
	sb_printf(s, "\tconst int64_t *S = cx->S;\n\tvoid *const *P = cx->P;\n\t(void)S; (void)P;\n");
	for (int i = 0; i < g->nsyms; i++)
		sb_printf(s, "\tconst int64_t S%d = S[%d]; (void)S%d;\n", i, i, i);
}

/* A library call as a member of a horizontal group (nc_plan.c `horizontal`): task functions over
 * the member's tasks.  A GEMM (mm/bmm, with or without its epilogue) has one task per row block of
 * C per batch entry: nc_ga<k> fills its arguments, nc_gt<k> counts its tasks (and the block height),
 * nc_gr<k> runs tasks [b, e): the library GEMM on the block's rows (called from inside a pool task it
 * runs on that thread: the pool runs nested loops inline), then the epilogue's tiles of those rows.
 * Any other library call is one task (nc_lr<k>).  A failing call records its message in the context
 * (nc_task_fail); the segment reports it after the group's loop. */
int nc_emit_group_fns(nc_graph_t *g, nc_sb_t *s, int ui)
{
	const nc_unit_t *u = &g->u[ui];
	const nc_node_t *n = &g->n[u->nodes[0]];
	int st = check_ptrs(g, u->seg, n);
	if (st)
		return st;
	if (!strcmp(n->op, "mm") || !strcmp(n->op, "bmm")) {
		bool batched = n->op[0] == 'b';
		const nc_value_t *A = &g->v[in_v(n, 0)], *B = &g->v[in_v(n, 1)], *C = &g->v[out_v(n, 0)];
		int ea = nc_dtype_size(A->dtype), eb = nc_dtype_size(B->dtype), ec = nc_dtype_size(C->dtype);
		const nc_unit_t *e = !batched && u->epi1 ? &g->u[u->epi1 - 1] : NULL;
		sb_printf(s, "/* group member: %s (unit %d)%s%s */\n", n->op, ui, u->pro1 ? " with its layer-norm prologue" : "",
			  e ? " with its epilogue" : "");
		sb_printf(s, "static void nc_ga%d(const nc_ctx_t *cx, nk_gemm_args_t *out)\n{\n", u->kid);
		syms(g, s);
		gemm_fill(g, s, u->seg, n, batched);
		sb_printf(s, "\t*out = a_;\n}\n\n");
		/* Blocks: enough for the pool (2 per thread), each of 2^21 multiply-adds or more.  A block
		 * packs its own panels, so a row block re-packs all of B and a column block all of A: split
		 * the longer side (rows when the GEMM has a prologue or an epilogue, which work on rows).
		 * *mb > 0: rows per block; *mb < 0: -columns per block. */
		sb_printf(s, "static int64_t nc_gt%d(const nk_gemm_args_t *a, int64_t *mb)\n{\n", u->kid);
		sb_printf(s, "\tif (a->M <= 0 || a->N <= 0 || a->batch <= 0)\n\t\treturn 0;\n");
		sb_printf(s, "\tconst int64_t nt = RT->num_threads ? nc_max(1, RT->num_threads()) : 1;\n");
		sb_printf(s, "\tconst int64_t nb = nc_max(1, nc_min(2 * nt, a->M * a->N * nc_max(a->K, 1) >> 21));\n");
		if (e || u->pro1) { /* one row block per thread: each block re-packs all of B */
			sb_printf(s, "\t*mb = nc_max(16, ((a->M + (nb + 1) / 2 - 1) / ((nb + 1) / 2) + 15) / 16 * 16);\n");
			if (e) /* the epilogue's block of C stays in cache: in L3: about 8 MiB or less */
				sb_printf(s, "\t*mb = nc_min(*mb, nc_max(64, ((8 << 20) / (%d * nc_max(a->N, 1))) / 16 * 16));\n", ec);
		} else {
			sb_printf(s, "\tif (a->N > a->M && nb > 1)\n\t\t*mb = -nc_max(16, ((a->N + nb - 1) / nb + 15) / 16 * 16);\n"
				     "\telse\n\t\t*mb = nc_max(16, ((a->M + nb - 1) / nb + 15) / 16 * 16);\n");
		}
		sb_printf(s, "\treturn a->batch * (*mb > 0 ? (a->M + *mb - 1) / *mb : (a->N - *mb - 1) / -*mb);\n}\n\n");
		sb_printf(s, "static void nc_gr%d(void *c, int64_t b, int64_t e)\n{\n\tnc_ctx_t *cx = (nc_ctx_t *)c;\n", u->kid);
		sb_printf(s, "\tnk_gemm_args_t a_;\n\tint64_t MB_;\n\tnc_ga%d(cx, &a_);\n", u->kid);
		sb_printf(s, "\tconst int64_t NB_ = nc_gt%d(&a_, &MB_) / a_.batch;\n", u->kid);
		const nc_node_t *ln = u->pro1 ? &g->n[g->u[u->pro1 - 1].nodes[0]] : NULL;
		if (ln) {
			sb_printf(s, "\tconst int64_t *S = cx->S;\n\tvoid *const *P = cx->P;\n\t(void)S; (void)P;\n");
			for (int i = 0; i < g->nsyms; i++)
				sb_printf(s, "\tconst int64_t S%d = S[%d]; (void)S%d;\n", i, i, i);
			ln_fill(g, s, u->seg, ln, "l_");
		}
		if (e)
			sb_printf(s, "\tconst int64_t L_ = (%s), CH_ = L_ < NC_CHUNK ? (L_ > 0 ? L_ : 1) : NC_CHUNK, NCH_ = (L_ + CH_ - 1) / CH_;\n", e->L);
		sb_printf(s, "\tfor (int64_t t = b; t < e; t++) {\n");
		sb_printf(s, "\t\tconst int64_t bi = t / NB_, m0 = MB_ > 0 ? (t %% NB_) * MB_ : 0, n0 = MB_ < 0 ? (t %% NB_) * -MB_ : 0;\n");
		sb_printf(s, "\t\tnk_gemm_args_t b_ = a_;\n\t\tb_.batch = 1;\n");
		sb_printf(s, "\t\tb_.M = MB_ > 0 ? nc_min(MB_, a_.M - m0) : a_.M;\n\t\tb_.N = MB_ < 0 ? nc_min(-MB_, a_.N - n0) : a_.N;\n");
		sb_printf(s, "\t\tb_.A = (const char *)a_.A + (bi * a_.bs_a + m0 * a_.rs_a) * %d;\n", ea);
		sb_printf(s, "\t\tb_.B = (const char *)a_.B + (bi * a_.bs_b + n0 * a_.cs_b) * %d;\n", eb);
		sb_printf(s, "\t\tb_.C = (char *)a_.C + (bi * a_.bs_c + m0 * a_.rs_c + n0 * a_.cs_c) * %d;\n", ec);
		sb_printf(s, "\t\tif (a_.bias)\n\t\t\tb_.bias = (const char *)a_.bias + n0 * a_.cs_bias * %d;\n", ec);
		if (ln) { /* the prologue: normalize the block's rows first (A's rows are the layer norm's rows) */
			int ex = nc_dtype_size(g->v[in_v(ln, 0)].dtype), ey = nc_dtype_size(g->v[out_v(ln, 0)].dtype);
			int em = out_v(ln, 1) >= 0 ? nc_dtype_size(g->v[out_v(ln, 1)].dtype) : 0;
			int er = out_v(ln, 2) >= 0 ? nc_dtype_size(g->v[out_v(ln, 2)].dtype) : 0;
			sb_printf(s, "\t\tnk_layernorm_args_t lb_ = l_;\n\t\tlb_.rows = b_.M;\n");
			sb_printf(s, "\t\tlb_.x = (const char *)l_.x + m0 * l_.cols * %d;\n\t\tlb_.y = (char *)l_.y + m0 * l_.cols * %d;\n", ex, ey);
			sb_printf(s, "\t\tif (l_.mean)\n\t\t\tlb_.mean = (char *)l_.mean + m0 * %d;\n", em);
			sb_printf(s, "\t\tif (l_.rstd)\n\t\t\tlb_.rstd = (char *)l_.rstd + m0 * %d;\n", er);
			sb_printf(s, "\t\tif (lb_.rows > 0 && RT->layernorm(&lb_)) {\n\t\t\tnc_task_fail(cx);\n\t\t\treturn;\n\t\t}\n");
		}
		sb_printf(s, "\t\tif (b_.K == 0 && !b_.bias) {\n\t\t\tfor (int64_t i = 0; i < b_.M; i++)\n"
			     "\t\t\t\tfor (int64_t j = 0; j < b_.N; j++)\n"
			     "\t\t\t\t\tmemset((char *)b_.C + (i * b_.rs_c + j * b_.cs_c) * %d, 0, %d);\n"
			     "\t\t} else if (RT->gemm(&b_)) {\n\t\t\tnc_task_fail(cx);\n\t\t\treturn;\n\t\t}\n", ec, ec);
		if (e)
			sb_printf(s, "\t\tif (L_ > 0)\n\t\t\tnc_k%d(cx, m0 * NCH_, (m0 + b_.M) * NCH_);\n", e->kid);
		sb_printf(s, "\t}\n}\n\n");
		return 0;
	}
	if (!strcmp(n->op, "embedding") && u->epi1) {
		/* row blocks (at least 64 rows, about 1 MiB of output): the gather, then the epilogue's tiles */
		const nc_unit_t *e = &g->u[u->epi1 - 1];
		const nc_value_t *w = &g->v[in_v(n, 0)], *idx = &g->v[in_v(n, 1)];
		char p0[128], p1[128], p2[128];
		sb_printf(s, "/* group member: embedding (unit %d) with its epilogue */\n", ui);
		sb_printf(s, "static void nc_ea%d(const nc_ctx_t *cx, nk_embedding_args_t *out)\n{\n", u->kid);
		syms(g, s);
		sb_printf(s, "\tnk_embedding_args_t a_;\n\tmemset(&a_, 0, sizeof a_);\n");
		sb_printf(s, "\ta_.dtype = %d; a_.idx_dtype = %d; a_.n = (%s); a_.V = (%s); a_.C = (%s);\n", w->dtype, idx->dtype,
			  idx->sp[0], w->size[0], w->size[1]);
		sb_printf(s, "\ta_.weight = %s; a_.idx = %s; a_.out = %s;\n\t*out = a_;\n}\n\n", ptr(g, u->seg, w->id, p0, sizeof p0),
			  ptr(g, u->seg, idx->id, p1, sizeof p1), ptr(g, u->seg, out_v(n, 0), p2, sizeof p2));
		sb_printf(s, "static int64_t nc_et%d(const nk_embedding_args_t *a, int64_t *mb)\n{\n"
			     "\t*mb = nc_max(64, ((1 << 20) / (%d * nc_max(a->C, 1))) / 16 * 16);\n"
			     "\treturn a->n > 0 && a->C > 0 ? (a->n + *mb - 1) / *mb : 0;\n}\n\n", u->kid, nc_dtype_size(w->dtype));
		sb_printf(s, "static void nc_er%d(void *c, int64_t b, int64_t e)\n{\n\tnc_ctx_t *cx = (nc_ctx_t *)c;\n", u->kid);
		sb_printf(s, "\tnk_embedding_args_t a_;\n\tint64_t MB_;\n\tnc_ea%d(cx, &a_);\n\t(void)nc_et%d(&a_, &MB_);\n", u->kid, u->kid);
		sb_printf(s, "\tconst int64_t L_ = (%s), CH_ = L_ < NC_CHUNK ? (L_ > 0 ? L_ : 1) : NC_CHUNK, NCH_ = (L_ + CH_ - 1) / CH_;\n", e->L);
		sb_printf(s, "\tfor (int64_t t = b; t < e; t++) {\n\t\tconst int64_t r0 = t * MB_;\n");
		sb_printf(s, "\t\tnk_embedding_args_t b_ = a_;\n\t\tb_.n = nc_min(MB_, a_.n - r0);\n");
		sb_printf(s, "\t\tb_.idx = (const char *)a_.idx + r0 * %d;\n", nc_dtype_size(idx->dtype));
		sb_printf(s, "\t\tb_.out = (char *)a_.out + r0 * a_.C * %d;\n", nc_dtype_size(w->dtype));
		sb_printf(s, "\t\tif (RT->embedding(&b_)) {\n\t\t\tnc_task_fail(cx);\n\t\t\treturn;\n\t\t}\n");
		sb_printf(s, "\t\tif (L_ > 0)\n\t\t\tnc_k%d(cx, r0 * NCH_, (r0 + b_.n) * NCH_);\n\t}\n}\n\n", e->kid);
		return 0;
	}
	sb_printf(s, "/* group member: %s (unit %d) */\nstatic int nc_lb%d(nc_ctx_t *cx)\n{\n", n->op, ui, u->kid);
	syms(g, s);
	sb_printf(s, "\tnc_ctx_t ctx = *cx;\n\t(void)ctx;\n");
	st = nc_emit_lib(g, s, u->nodes[0]);
	if (st)
		return st;
	sb_printf(s, "\treturn 0;\n}\n\n");
	sb_printf(s, "static void nc_lr%d(void *c, int64_t b, int64_t e)\n{\n\t(void)b; (void)e;\n"
		     "\tif (nc_lb%d((nc_ctx_t *)c)) {\n\t\tnc_task_fail((nc_ctx_t *)c);\n\t\treturn;\n\t}\n", u->kid, u->kid);
	if (u->epi1) { /* its epilogue (embedding_bwd), on this task's thread right after the call */
		const nc_unit_t *e = &g->u[u->epi1 - 1];
		sb_printf(s, "\t{\n\t\tconst nc_ctx_t *cx = (const nc_ctx_t *)c;\n\t\tconst int64_t *S = cx->S;\n\t\t(void)S;\n");
		for (int i = 0; i < g->nsyms; i++)
			sb_printf(s, "\t\tconst int64_t S%d = S[%d]; (void)S%d;\n", i, i, i);
		sb_printf(s, "\t\tconst int64_t R_ = (%s), L_ = (%s), CH_ = L_ < NC_CHUNK ? (L_ > 0 ? L_ : 1) : NC_CHUNK;\n", e->R, e->L);
		sb_printf(s, "\t\tif (R_ > 0 && L_ > 0)\n\t\t\tnc_k%d(c, 0, R_ * ((L_ + CH_ - 1) / CH_));\n\t}\n", e->kid);
	}
	sb_printf(s, "}\n\n");
	return 0;
}

int nc_emit_lib(nc_graph_t *g, nc_sb_t *s, int node)
{
	const nc_node_t *n = &g->n[node];
	int seg = g->u[n->unit].seg;
	char p0[128], p1[128], p2[128], p3[128], p4[128];
	int st = check_ptrs(g, seg, n);
	if (st)
		return st;
	const char *op = n->op;
	if (!strcmp(op, "mm") || !strcmp(op, "bmm")) {
		gemm(g, s, seg, n, op[0] == 'b');
	} else if (!strcmp(op, "cat")) {
		const nc_value_t *o = &g->v[out_v(n, 0)];
		int dim = atoi(n->attrs[0]);
		sb_printf(s, "\t{ /* cat along dim %d: one strided copy per input */\n\t\tint64_t at_ = 0;\n", dim);
		for (int i = 0; i < n->nin; i++) {
			const nc_value_t *x = &g->v[in_v(n, i)];
			sb_printf(s, "\t\t{\n\t\t\tnk_iter_t it_;\n\t\t\tmemset(&it_, 0, sizeof it_);\n");
			sb_printf(s, "\t\t\tit_.ndim = %d; it_.nops = 2; it_.dtype[0] = %d; it_.dtype[1] = %d;\n", x->rank, o->dtype, x->dtype);
			for (int d = 0; d < x->rank; d++) {
				int e = x->rank - 1 - d; /* innermost first */
				sb_printf(s, "\t\t\tit_.shape[%d] = (%s); it_.strides[0][%d] = (int64_t)(%s) * %d; it_.strides[1][%d] = (int64_t)(%s) * %d;\n",
					  d, x->size[e], d, o->stride[e], nc_dtype_size(o->dtype), d, x->stride[e], nc_dtype_size(x->dtype));
			}
			sb_printf(s, "\t\t\tit_.data[0] = %s + at_ * (int64_t)(%s) * %d;\n", ptr(g, seg, o->id, p0, sizeof p0), o->stride[dim],
				  nc_dtype_size(o->dtype));
			sb_printf(s, "\t\t\tit_.data[1] = %s;\n", ptr(g, seg, x->id, p1, sizeof p1));
			sb_printf(s, "\t\t\tint64_t n_ = 1;\n\t\t\tfor (int d = 0; d < it_.ndim; d++)\n\t\t\t\tn_ *= it_.shape[d];\n");
			sb_printf(s, "\t\t\tif (n_ > 0 && RT->copy(&it_))\n\t\t\t\treturn 1;\n\t\t\tat_ += (%s);\n\t\t}\n", x->size[dim]);
		}
		sb_printf(s, "\t}\n");
	} else if (!strcmp(op, "softmax") || !strcmp(op, "log_softmax")) {
		const nc_value_t *x = &g->v[in_v(n, 0)];
		int dim = atoi(n->attrs[0]);
		sb_printf(s, "\t{ /* %s */\n\t\tnk_softmax_args_t a_;\n\t\tmemset(&a_, 0, sizeof a_);\n", op);
		sb_printf(s, "\t\ta_.dtype = %d; a_.log = %s; a_.rows = (%s); a_.cols = (%s);\n", x->dtype,
			  op[0] == 'l' ? "true" : "false", x->pp[dim], x->rank ? x->size[dim] : "1");
		sb_printf(s, "\t\ta_.x = %s; a_.y = %s;\n", ptr(g, seg, x->id, p0, sizeof p0), ptr(g, seg, out_v(n, 0), p1, sizeof p1));
		sb_printf(s, "\t\tif (a_.rows > 0 && a_.cols > 0 && RT->softmax(&a_))\n\t\t\treturn 1;\n\t}\n");
	} else if (!strcmp(op, "layernorm")) {
		sb_printf(s, "\t{ /* layer norm */\n");
		ln_fill(g, s, seg, n, "a_");
		sb_printf(s, "\t\tif (a_.rows > 0 && RT->layernorm(&a_))\n\t\t\treturn 1;\n\t}\n");
	} else if (!strcmp(op, "layernorm_bwd")) {
		const nc_value_t *x = &g->v[in_v(n, 1)];
		int k = x->rank - atoi(n->attrs[0]);
		sb_printf(s, "\t{ /* layer norm backward */\n\t\tnk_layernorm_bwd_args_t a_;\n\t\tmemset(&a_, 0, sizeof a_);\n");
		sb_printf(s, "\t\ta_.dtype = %d; a_.rows = (%s); a_.cols = (%s);\n", x->dtype, x->pp[k], x->sp[k]);
		sb_printf(s, "\t\ta_.dy = %s; a_.x = %s; a_.mean = %s;\n", ptr(g, seg, in_v(n, 0), p0, sizeof p0),
			  ptr(g, seg, x->id, p1, sizeof p1), ptr(g, seg, in_v(n, 2), p2, sizeof p2));
		sb_printf(s, "\t\ta_.rstd = %s; a_.w = %s;\n", ptr(g, seg, in_v(n, 3), p3, sizeof p3), ptr(g, seg, in_v(n, 4), p4, sizeof p4));
		sb_printf(s, "\t\ta_.dx = %s;\n", ptr(g, seg, out_v(n, 0), p0, sizeof p0));
		sb_printf(s, "\t\ta_.dw = %s;\n", ptr(g, seg, out_v(n, 1), p1, sizeof p1));
		sb_printf(s, "\t\ta_.db = %s;\n", ptr(g, seg, out_v(n, 2), p2, sizeof p2));
		sb_printf(s, "\t\tif (RT->layernorm_bwd(&a_))\n\t\t\treturn 1;\n\t}\n");
	} else if (!strcmp(op, "embedding")) {
		const nc_value_t *w = &g->v[in_v(n, 0)], *idx = &g->v[in_v(n, 1)];
		sb_printf(s, "\t{ /* embedding */\n\t\tnk_embedding_args_t a_;\n\t\tmemset(&a_, 0, sizeof a_);\n");
		sb_printf(s, "\t\ta_.dtype = %d; a_.idx_dtype = %d; a_.n = (%s); a_.V = (%s); a_.C = (%s);\n", w->dtype, idx->dtype,
			  idx->sp[0], w->size[0], w->size[1]);
		sb_printf(s, "\t\ta_.weight = %s; a_.idx = %s; a_.out = %s;\n", ptr(g, seg, w->id, p0, sizeof p0),
			  ptr(g, seg, idx->id, p1, sizeof p1), ptr(g, seg, out_v(n, 0), p2, sizeof p2));
		sb_printf(s, "\t\tif (a_.n > 0 && a_.C > 0 && RT->embedding(&a_))\n\t\t\treturn 1;\n\t}\n");
	} else if (!strcmp(op, "embedding_bwd")) {
		const nc_value_t *gr = &g->v[in_v(n, 0)], *idx = &g->v[in_v(n, 1)], *o = &g->v[out_v(n, 0)];
		sb_printf(s, "\t{ /* embedding backward */\n\t\tnk_embedding_bwd_args_t a_;\n\t\tmemset(&a_, 0, sizeof a_);\n");
		sb_printf(s, "\t\ta_.dtype = %d; a_.idx_dtype = %d; a_.n = (%s); a_.V = (%s); a_.C = (%s); a_.padding_idx = %s;\n",
			  gr->dtype, idx->dtype, idx->sp[0], o->size[0], o->size[1], n->attrs[1]);
		sb_printf(s, "\t\ta_.grad_out = %s; a_.idx = %s; a_.grad_weight = %s;\n", ptr(g, seg, gr->id, p0, sizeof p0),
			  ptr(g, seg, idx->id, p1, sizeof p1), ptr(g, seg, o->id, p2, sizeof p2));
		sb_printf(s, "\t\tif (RT->embedding_bwd(&a_))\n\t\t\treturn 1;\n\t}\n");
	} else if (!strcmp(op, "nll") || !strcmp(op, "nll_bwd")) {
		bool bwd = op[3] == '_';
		const nc_value_t *x = &g->v[in_v(n, bwd ? 1 : 0)];
		const char *N = x->rank == 2 ? x->size[0] : "1", *C = x->rank == 2 ? x->size[1] : x->size[0];
		if (!bwd) {
			sb_printf(s, "\t{ /* nll loss */\n\t\tnk_nll_args_t a_;\n\t\tmemset(&a_, 0, sizeof a_);\n");
			sb_printf(s, "\t\ta_.dtype = %d; a_.N = (%s); a_.C = (%s); a_.reduction = %s; a_.ignore_index = %s;\n", x->dtype,
				  N, C, n->attrs[0], n->attrs[1]);
			sb_printf(s, "\t\ta_.logp = %s; a_.target = %s; a_.weight = %s;\n", ptr(g, seg, x->id, p0, sizeof p0),
				  ptr(g, seg, in_v(n, 1), p1, sizeof p1), ptr(g, seg, in_v(n, 2), p2, sizeof p2));
			sb_printf(s, "\t\ta_.out = %s; a_.total_weight = %s;\n", ptr(g, seg, out_v(n, 0), p3, sizeof p3),
				  ptr(g, seg, out_v(n, 1), p4, sizeof p4));
			sb_printf(s, "\t\tif (RT->nll(&a_))\n\t\t\treturn 1;\n\t}\n");
		} else {
			sb_printf(s, "\t{ /* nll loss backward */\n\t\tnk_nll_bwd_args_t a_;\n\t\tmemset(&a_, 0, sizeof a_);\n");
			sb_printf(s, "\t\ta_.dtype = %d; a_.N = (%s); a_.C = (%s); a_.reduction = %s; a_.ignore_index = %s;\n", x->dtype,
				  N, C, n->attrs[0], n->attrs[1]);
			sb_printf(s, "\t\ta_.grad_out = %s; a_.target = %s; a_.weight = %s;\n", ptr(g, seg, in_v(n, 0), p0, sizeof p0),
				  ptr(g, seg, in_v(n, 2), p1, sizeof p1), ptr(g, seg, in_v(n, 3), p2, sizeof p2));
			sb_printf(s, "\t\ta_.total_weight = %s; a_.grad_in = %s;\n", ptr(g, seg, in_v(n, 4), p3, sizeof p3),
				  ptr(g, seg, out_v(n, 0), p4, sizeof p4));
			sb_printf(s, "\t\tif (RT->nll_bwd(&a_))\n\t\t\treturn 1;\n\t}\n");
		}
	} else if (!strcmp(op, "attention")) {
		const nc_value_t *O = &g->v[out_v(n, 0)];
		sb_printf(s, "\t{ /* attention */\n\t\tnk_attention_args_t a_;\n\t\tmemset(&a_, 0, sizeof a_);\n");
		attention_args(g, s, seg, n, "a_.", in_v(n, 0), in_v(n, 1), in_v(n, 2), in_v(n, 3), 0);
		sb_printf(s, "\t\ta_.out = %s; a_.lse = %s;\n", ptr(g, seg, O->id, p0, sizeof p0), ptr(g, seg, out_v(n, 1), p1, sizeof p1));
		for (int d = 0; d < 4; d++)
			sb_printf(s, "\t\ta_.so[%d] = (%s);\n", d, O->stride[d]);
		for (int i = 6; i <= 7; i++) /* philox seed and offset outputs: no dropout, 0 */
			if (out_v(n, i) >= 0)
				sb_printf(s, "\t\t*(int64_t *)%s = 0;\n", ptr(g, seg, out_v(n, i), p2, sizeof p2));
		sb_printf(s, "\t\tif (a_.B * a_.Hq * a_.Tq * a_.Dv > 0 && RT->attention(&a_))\n\t\t\treturn 1;\n\t}\n");
	} else if (!strcmp(op, "attention_bwd")) {
		const nc_value_t *O = &g->v[in_v(n, 5)], *dO = &g->v[in_v(n, 0)];
		sb_printf(s, "\t{ /* attention backward */\n\t\tnk_attention_bwd_args_t a_;\n\t\tmemset(&a_, 0, sizeof a_);\n");
		attention_args(g, s, seg, n, "a_.f.", in_v(n, 1), in_v(n, 2), in_v(n, 3), in_v(n, 4), 0);
		sb_printf(s, "\t\ta_.f.out = %s; a_.f.lse = %s;\n", ptr(g, seg, O->id, p0, sizeof p0), ptr(g, seg, in_v(n, 6), p1, sizeof p1));
		sb_printf(s, "\t\ta_.dout = %s;\n", ptr(g, seg, dO->id, p2, sizeof p2));
		for (int d = 0; d < 4; d++)
			sb_printf(s, "\t\ta_.f.so[%d] = (%s); a_.sdo[%d] = (%s);\n", d, O->stride[d], d, dO->stride[d]);
		static const char *const names[3] = {"dq", "dk", "dv"};
		for (int i = 0; i < 3; i++) {
			int o = out_v(n, i);
			if (o < 0)
				return nc_fail(g, NC_ERR_INVALID, "attention backward needs dq, dk and dv");
			sb_printf(s, "\t\ta_.%s = %s;\n", names[i], ptr(g, seg, o, p3, sizeof p3));
			for (int d = 0; d < 4; d++)
				sb_printf(s, "\t\ta_.s%s[%d] = (%s);\n", names[i], d, g->v[o].stride[d]);
		}
		sb_printf(s, "\t\tif (a_.f.B * a_.f.Hq * a_.f.Tq > 0 && RT->attention_bwd(&a_))\n\t\t\treturn 1;\n\t}\n");
	} else {
		return nc_fail(g, NC_ERR_INVALID, "node %d: unknown library op '%s'", n->id, op);
	}
	(void)stride4;
	return 0;
}
