/* nc_fuse.c - fusion: assign every compute node to a unit (one kernel or one call).
 *
 * Units of kind PW, ROW and COL are fused loop nests over a space of R rows of L elements:
 *   PW   pointwise nodes only; every member's output has N = R*L elements in row-major order.
 *   ROW  one or more reductions over the L elements of each row (row reductions), with pointwise
 *        prologues (FULL values) and epilogues (ROW values: one per row, or FULL values that read
 *        them broadcast along the row).  Emitted as a multi-pass loop per row.
 *   COL  reductions over the R rows of each of the L columns, with a pointwise prologue (FULL) and
 *        epilogue (COL values).
 * LIB and EAGER units hold one node each.
 *
 * Nodes are visited in graph order.  A pointwise node joins the unit of one of its operands when the
 * operand is an in-unit value reached through reshapes only, the index spaces agree (same element
 * count and row length; ROW values broadcast along rows), and joining creates no cycle between
 * units.  A reduction joins the unit of its input when its reduced dims give that unit's rows (ROW)
 * or columns (COL).  Views never become kernels; values of free nodes (constants) are inlined.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nc_impl.h"

static const char *numel(const nc_value_t *v) { return v->sp[0]; }

/* Does unit `from` depend on unit `to`, directly or through other units? */
static bool reaches(nc_graph_t *g, int from, int to, char *seen)
{
	if (from == to)
		return true;
	if (seen[from])
		return false;
	seen[from] = 1;
	const nc_unit_t *u = &g->u[from];
	for (int i = 0; i < u->ndeps; i++)
		if (reaches(g, u->deps[i], to, seen))
			return true;
	return false;
}

static bool depends(nc_graph_t *g, int from, int to)
{
	char *seen = nc_calloc((size_t)g->nu + 1, 1);
	if (!seen) {
		g->A.oom = true; /* no merge, and nc_compile fails with NC_ERR_NOMEM */
		return true;
	}
	bool r = reaches(g, from, to, seen);
	free(seen);
	return r;
}

/* A ROW value `o` read by a FULL node `x` of unit G: o must broadcast along x's rows, i.e. right-
 * aligned against x's shape its dims over the row region are 1 and the others equal x's. */
static bool row_broadcast(nc_graph_t *g, const nc_value_t *o, const nc_value_t *x, const nc_unit_t *G)
{
	int ks = nc_sp_index(x, G->L);
	if (ks < 0 || o->rank > x->rank)
		return false;
	int shift = x->rank - o->rank;
	for (int d = 0; d < x->rank; d++) {
		int od = d - shift;
		const char *os = od >= 0 ? o->size[od] : "1";
		if (nc_is_one(x->size[d]))
			continue;
		if (d >= ks) {
			if (!nc_is_one(os))
				return false;
		} else if (!nc_streq(os, x->size[d])) {
			return false;
		}
	}
	(void)g;
	return true;
}

static void add_operand_deps(nc_graph_t *g, int unit, const nc_node_t *x)
{
	for (int k = 0; k < x->nin; k++)
		if (x->ins[k].kind == 'v' && x->ins[k].v >= 0) {
			int uo = nc_root_producer_unit(g, x->ins[k].v, NULL);
			if (uo != unit)
				nc_add_dep(g, unit, uo);
		}
}

static const char *last_dim(const nc_value_t *v) { return v->rank ? v->sp[v->rank - 1] : "1"; }
static const char *rows_of(const nc_value_t *v) { return v->rank ? v->pp[v->rank - 1] : "1"; }

/* Classify a reduction: 'r' row (reduced dims after kept dims: R = pp[lo], L = sp[lo]), 'c' column
 * (a block of reduced dims [lo, hi) with kept dims around it: O = pp[lo], R*L = sp[lo], L = sp[hi]),
 * 0 neither (kept dims between reduced dims).  Size-1 dims are ignored. */
static char reduction_split(const nc_graph_t *g, const nc_node_t *x, int *lo, int *hi)
{
	const nc_value_t *in = &g->v[x->ins[0].v];
	bool red[NC_MAX_RANK] = {0};
	for (int i = 0; i < x->ndims; i++)
		if (x->dims[i] >= 0 && x->dims[i] < in->rank)
			red[x->dims[i]] = true;
	int first_red = -1, last_red = -1, last_keep = -1;
	for (int d = 0; d < in->rank; d++) {
		if (nc_is_one(in->size[d]))
			continue;
		if (red[d]) {
			if (first_red < 0)
				first_red = d;
			last_red = d;
		} else {
			last_keep = d;
		}
	}
	if (first_red < 0) { /* nothing (nontrivial) reduced: every row has one element */
		*lo = *hi = in->rank;
		return 'r';
	}
	for (int d = first_red; d <= last_red; d++)
		if (!red[d] && !nc_is_one(in->size[d]))
			return 0;
	*lo = first_red;
	if (last_keep < first_red) {
		*hi = in->rank;
		return 'r';
	}
	*hi = last_red + 1;
	return 'c';
}

typedef struct {
	int kind;
	const char *N, *R, *L, *O, *RL, *C;
} space_t;

/* the space of a lone reduction */
static int reduction_space(nc_graph_t *g, const nc_node_t *m, space_t *sp)
{
	int lo, hi;
	char rk = reduction_split(g, m, &lo, &hi);
	const nc_value_t *in = &g->v[m->ins[0].v];
	if (!rk)
		return -1;
	sp->N = numel(in);
	sp->C = numel(&g->v[m->outs[0]]);
	if (rk == 'r') {
		sp->kind = U_ROW, sp->R = in->pp[lo], sp->L = in->sp[lo], sp->O = "1", sp->RL = sp->N;
		return 0;
	}
	sp->kind = U_COL, sp->O = in->pp[lo], sp->RL = in->sp[lo], sp->L = in->sp[hi];
	char *r = nc_alloc(&g->A, strlen(sp->RL) + strlen(sp->L) + 8);
	if (!r)
		return nc_fail(g, NC_ERR_NOMEM, "out of memory");
	sprintf(r, "((%s)/(%s))", sp->RL, sp->L);
	sp->R = r;
	return 0;
}

/* the index space of a set of members (sorted node indices), or false if they cannot share one */
static bool unit_space(nc_graph_t *g, const int *mem, int n, space_t *sp)
{
	sp->kind = U_PW;
	sp->N = sp->R = sp->L = sp->O = sp->RL = sp->C = NULL;
	for (int i = 0; i < n; i++) {
		const nc_node_t *m = &g->n[mem[i]];
		if (m->kind != 'R')
			continue;
		space_t r;
		if (reduction_space(g, m, &r))
			return false;
		if (sp->kind == U_PW)
			*sp = r;
		else if (sp->kind != r.kind || !nc_streq(sp->N, r.N) || !nc_streq(sp->L, r.L) || !nc_streq(sp->RL, r.RL) ||
			 !nc_streq(sp->O, r.O) || !nc_streq(sp->C, r.C) || (r.kind == U_ROW && !nc_streq(sp->R, r.R)))
			return false;
	}
	if (sp->kind != U_PW)
		return true;
	/* pointwise: N of the first member; L the last dim of the first member if every member has it
	 * as a suffix product, else the whole tensor (R = 1) */
	const nc_value_t *v0 = &g->v[g->n[mem[0]].outs[0]];
	sp->N = numel(v0);
	sp->L = last_dim(v0), sp->R = rows_of(v0), sp->O = "1", sp->RL = sp->N, sp->C = NULL;
	for (int i = 1; i < n; i++)
		if (nc_sp_index(&g->v[g->n[mem[i]].outs[0]], sp->L) < 0) {
			sp->L = sp->N, sp->R = "1";
			break;
		}
	return true;
}

/* Stamped membership: member index + 1 of node i for the set being checked. */
typedef struct {
	int *pos;   /* per node */
	int *stamp; /* per node */
	int tag;
	int *cls;   /* per member */
} memb_t;

static int member(const nc_graph_t *g, const memb_t *mb, int value, bool *tr)
{
	bool t = true;
	int v = value;
	while (g->v[v].view_of >= 0) {
		if (!g->v[v].reshape)
			t = false;
		v = g->v[v].view_of;
	}
	*tr = t;
	int p = g->v[v].producer;
	if (p < 0 || mb->stamp[p] != mb->tag)
		return -1;
	return mb->pos[p];
}

/* Classes of the members in space sp; false if some member cannot be indexed in it. */
static bool classify(nc_graph_t *g, const int *mem, int n, const space_t *sp, memb_t *mb)
{
	mb->tag++;
	for (int i = 0; i < n; i++)
		mb->stamp[mem[i]] = mb->tag, mb->pos[mem[i]] = i;
	nc_unit_t fake = {.kind = sp->kind, .N = sp->N, .R = sp->R, .L = sp->L};
	for (int i = 0; i < n; i++) {
		const nc_node_t *m = &g->n[mem[i]];
		const nc_value_t *vx = &g->v[m->outs[0]];
		if (m->kind == 'R') {
			bool tr;
			int p = member(g, mb, m->ins[0].v, &tr);
			if (p >= 0 && (!tr || mb->cls[p] != CLS_FULL))
				return false;
			mb->cls[i] = sp->kind == U_ROW ? CLS_ROW : CLS_COL;
			continue;
		}
		bool full_ok = nc_streq(numel(vx), sp->N) && nc_sp_index(vx, sp->L) >= 0 &&
			       (sp->kind != U_COL || nc_sp_index(vx, sp->RL) >= 0);
		bool row_ok = sp->kind == U_ROW && nc_streq(numel(vx), sp->R);
		bool col_ok = sp->kind == U_COL && nc_streq(numel(vx), sp->C);
		for (int k = 0; k < m->nin; k++) {
			const nc_opnd_t *o = &m->ins[k];
			if (o->kind != 'v' || o->v < 0)
				continue;
			bool tr;
			int p = member(g, mb, o->v, &tr);
			if (p < 0)
				continue;
			if (!tr)
				return false;
			const nc_value_t *ov = &g->v[o->v];
			int c = mb->cls[p];
			if (c == CLS_FULL) {
				full_ok = full_ok && nc_streq(numel(ov), numel(vx));
				row_ok = col_ok = false;
			} else if (c == CLS_ROW) {
				full_ok = full_ok && row_broadcast(g, ov, vx, &fake);
				row_ok = row_ok && nc_streq(numel(ov), sp->R);
				col_ok = false;
			} else {
				full_ok = row_ok = false;
				col_ok = col_ok && nc_streq(numel(ov), sp->C);
			}
		}
		mb->cls[i] = full_ok ? CLS_FULL : row_ok ? CLS_ROW : col_ok ? CLS_COL : CLS_NONE;
		if (mb->cls[i] == CLS_NONE)
			return false;
	}
	return true;
}

static void remove_dep(nc_unit_t *u, int dep)
{
	for (int i = 0; i < u->ndeps; i++)
		if (u->deps[i] == dep) {
			u->deps[i] = u->deps[--u->ndeps];
			return;
		}
}

/* Merge unit b into unit a if their members share an index space and no other unit lies on a path
 * between them.  Returns 1 if merged, 0 if not, <0 on error. */
static int try_merge(nc_graph_t *g, int a, int b, memb_t *mb, int *tmp)
{
	if (a == b || g->u[a].dead || g->u[b].dead)
		return 0;
	nc_unit_t *A = &g->u[a], *B = &g->u[b];
	if (A->kind > U_COL || B->kind > U_COL)
		return 0;
	if ((A->kind == U_ROW && B->kind == U_COL) || (A->kind == U_COL && B->kind == U_ROW))
		return 0;
	/* cycle: a path a -> x -> b or b -> x -> a through another unit x */
	for (int i = 0; i < B->ndeps; i++)
		if (B->deps[i] != a && depends(g, B->deps[i], a))
			return 0;
	for (int i = 0; i < A->ndeps; i++)
		if (A->deps[i] != b && depends(g, A->deps[i], b))
			return 0;
	/* members, merged in node order */
	int n = 0, i = 0, j = 0;
	while (i < A->nnodes || j < B->nnodes)
		tmp[n++] = (j >= B->nnodes || (i < A->nnodes && A->nodes[i] < B->nodes[j])) ? A->nodes[i++] : B->nodes[j++];
	space_t sp;
	if (!unit_space(g, tmp, n, &sp) || !classify(g, tmp, n, &sp, mb))
		return 0;
	/* commit */
	int *nodes = nc_alloc(&g->A, sizeof(int) * (size_t)n);
	if (!nodes)
		return nc_fail(g, NC_ERR_NOMEM, "out of memory");
	memcpy(nodes, tmp, sizeof(int) * (size_t)n);
	A->nodes = nodes, A->nnodes = A->nodes_cap = n;
	A->kind = sp.kind, A->N = sp.N, A->R = sp.R, A->L = sp.L, A->O = sp.O, A->RL = sp.RL, A->C = sp.C;
	if (B->first < A->first)
		A->first = B->first;
	for (int k = 0; k < n; k++) {
		g->n[nodes[k]].unit = a;
		g->v[g->n[nodes[k]].outs[0]].cls = mb->cls[k];
	}
	for (int k = 0; k < B->ndeps; k++)
		nc_add_dep(g, a, B->deps[k]);
	remove_dep(A, b);
	remove_dep(A, a);
	B->dead = true;
	B->nnodes = 0;
	for (int u = 0; u < g->nu; u++) {
		nc_unit_t *U = &g->u[u];
		if (U->dead || u == a)
			continue;
		for (int k = 0; k < U->ndeps; k++)
			if (U->deps[k] == b) {
				remove_dep(U, b);
				nc_add_dep(g, u, a);
				break;
			}
	}
	return 1;
}

/* A free node (constant) whose value must exist in memory: read by a library call, an eager op or
 * the caller.  It gets a PW unit of its own; kernels reading it still inline the constant. */
static bool free_needs_memory(nc_graph_t *g, int value)
{
	const nc_value_t *v = &g->v[value];
	if (v->is_output)
		return true;
	for (int i = 0; i < v->nusers; i++) {
		const nc_node_t *u = &g->n[v->users[i]];
		if (u->kind == 'L' || u->kind == 'E')
			return true;
		if (u->kind == 'V' && free_needs_memory(g, u->outs[0]))
			return true;
	}
	return false;
}

static void add_consumer_deps(nc_graph_t *g, int value, int unit)
{
	const nc_value_t *v = &g->v[value];
	for (int i = 0; i < v->nusers; i++) {
		const nc_node_t *u = &g->n[v->users[i]];
		if (u->kind == 'V')
			add_consumer_deps(g, u->outs[0], unit);
		else if (u->unit >= 0)
			nc_add_dep(g, u->unit, unit);
	}
}

/* ---- a library call writing straight into a `cat` ------------------------------------------------------
 * cat(dim d) of values that are each a dense view chain of an output of a library call (the dq, dk, dv
 * of an attention backward, concatenated into the gradient of a fused qkv projection), read by nothing
 * else: the library call writes each output into its slice of the cat result (its strides and offset
 * are rewritten into the cat buffer; attention takes any output strides) and the cat runs no kernel.
 * Integer sizes and strides only. */
static bool int_of(const char *e, int64_t *x)
{
	char *end;
	if (!e || !*e)
		return false;
	long long v = strtoll(e, &end, 10);
	if (*end)
		return false;
	*x = v;
	return true;
}

static const char *istr(nc_graph_t *g, int64_t x)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%lld", (long long)x);
	return nc_strdup(&g->A, buf);
}

static void relin(nc_graph_t *g, nc_value_t *v, const int64_t *st)
{
	for (int d = 0; d <= v->rank; d++) {
		int dims[NC_MAX_RANK], nd = 0;
		for (int i = d; i < v->rank; i++) {
			int64_t z = 0;
			if (!(int_of(v->size[i], &z) && z == 1))
				dims[nd++] = i;
		}
		if (!nd) {
			v->lin[d] = "0";
			continue;
		}
		bool ok = true;
		for (int k = 0; k + 1 < nd && ok; k++) {
			int64_t zb = 0;
			int_of(v->size[dims[k + 1]], &zb);
			ok = st[dims[k]] == st[dims[k + 1]] * zb;
		}
		v->lin[d] = ok ? istr(g, st[dims[nd - 1]]) : "x";
	}
}

/* the strides of v (dense in the buffer of n elements it shares with its chain) moved into blocks of
 * Ki elements placed every OS elements: s >= Ki (a multiple of Ki) -> s / Ki * OS; a dim inside the
 * block keeps s; anything else cannot move */
static bool move_strides(const nc_value_t *v, int64_t Ki, int64_t OS, int64_t *out)
{
	for (int d = 0; d < v->rank; d++) {
		int64_t s = 0, z = 0;
		if (!int_of(v->stride[d], &s) || !int_of(v->size[d], &z) || s < 0)
			return false;
		if (z == 1)
			out[d] = s;
		else if (s >= Ki && s % Ki == 0)
			out[d] = s / Ki * OS;
		else if (s * (z - 1) < Ki)
			out[d] = s;
		else
			return false;
	}
	return true;
}

static void cat_into(nc_graph_t *g)
{
	for (int ni = 0; ni < g->nn; ni++) {
		nc_node_t *c = &g->n[ni];
		if (c->kind != 'L' || strcmp(c->op, "cat") || c->unit < 0 || c->nout < 1 || c->outs[0] < 0 || c->nin > 8)
			continue;
		nc_value_t *O = &g->v[c->outs[0]];
		int d = atoi(c->attrs[0]);
		int64_t OS = 0, OI = 0, Ooff = 0;
		if (O->view_of >= 0 || O->is_output || O->into >= 0 || d < 0 || d >= O->rank || !nc_streq(O->lin[0], "1") ||
		    !int_of(O->sp[d], &OS) || !int_of(O->sp[d + 1], &OI) || !int_of(O->off, &Ooff))
			continue;
		/* per input: the chain root r (an output of a library call), every value of the chain */
		int chain[8][16], nch[8], lib = -1;
		bool ok = true;
		for (int i = 0; i < c->nin && ok; i++) {
			int x = c->ins[i].kind == 'v' ? c->ins[i].v : -1;
			nch[i] = 0;
			ok = x >= 0 && g->v[x].dtype == O->dtype && nc_streq(g->v[x].lin[0], "1");
			for (int v = x; ok; v = g->v[v].view_of) {
				const nc_value_t *V = &g->v[v];
				ok = nch[i] < 16 && V->nusers == 1 && !V->is_output && !V->is_input && V->into < 0;
				if (!ok)
					break;
				chain[i][nch[i]++] = v;
				if (V->view_of < 0)
					break;
			}
			if (!ok)
				break;
			const nc_value_t *r = &g->v[chain[i][nch[i] - 1]];
			ok = r->producer >= 0 && g->n[r->producer].kind == 'L' && !strcmp(g->n[r->producer].op, "attention_bwd");
			if (ok && lib >= 0)
				ok = g->n[r->producer].unit == lib;
			if (ok)
				lib = g->n[r->producer].unit;
		}
		if (!ok || lib < 0)
			continue;
		/* the moved strides of every chain value, checked before anything changes */
		int64_t at = 0, mv[8][16][NC_MAX_RANK];
		for (int i = 0; i < c->nin && ok; i++) {
			const nc_value_t *x = &g->v[chain[i][0]];
			int64_t Ki = 0, sz = 0;
			ok = int_of(x->sp[d], &Ki) && int_of(x->size[d], &sz) && Ki > 0;
			for (int k = 0; k < nch[i] && ok; k++) {
				int64_t off = 0;
				ok = move_strides(&g->v[chain[i][k]], Ki, OS, mv[i][k]) && int_of(g->v[chain[i][k]].off, &off) && off == 0;
			}
			at += sz;
		}
		if (!ok || at * OI != OS)
			continue;
		at = 0;
		for (int i = 0; i < c->nin; i++) {
			const nc_value_t *x = &g->v[chain[i][0]];
			int64_t Ki = 0, sz = 0;
			int_of(x->sp[d], &Ki);
			int_of(x->size[d], &sz);
			for (int k = 0; k < nch[i]; k++) {
				nc_value_t *V = &g->v[chain[i][k]];
				for (int e = 0; e < V->rank; e++)
					V->stride[e] = istr(g, mv[i][k][e]);
				V->off = istr(g, Ooff + at * OI);
				V->root = O->id;
				relin(g, V, mv[i][k]);
			}
			nc_value_t *r = &g->v[chain[i][nch[i] - 1]];
			r->view_of = O->id; /* an alias of the cat result, written by the library call */
			at += sz;
		}
		/* the cat's unit runs nothing: its readers wait for the library call instead */
		int cu = c->unit;
		g->u[cu].dead = true;
		for (int x = 0; x < g->nu; x++)
			for (int k = 0; k < g->u[x].ndeps; k++)
				if (g->u[x].deps[k] == cu) {
					g->u[x].deps[k] = g->u[x].deps[--g->u[x].ndeps];
					for (int j = 0; j < g->u[cu].ndeps; j++)
						nc_add_dep(g, x, g->u[cu].deps[j]);
					break;
				}
		nc_log(g, "cat: node %d is written in place by unit %d (no kernel)", c->id, lib);
	}
}

static void log_units(nc_graph_t *g)
{
	static const char *const kinds[] = {"pw", "row", "col", "lib", "eager"};
	for (int i = 0; i < g->nu; i++) {
		const nc_unit_t *u = &g->u[i];
		if (u->dead)
			continue;
		char line[400];
		int n = snprintf(line, sizeof line, "unit %d %s", i, kinds[u->kind]);
		if (u->kind <= U_COL)
			n += snprintf(line + n, sizeof line - (size_t)n, " R=%s L=%s", u->R, u->L);
		n += snprintf(line + n, sizeof line - (size_t)n, " nodes");
		for (int k = 0; k < u->nnodes && n < 300; k++)
			n += snprintf(line + n, sizeof line - (size_t)n, " %d:%s", g->n[u->nodes[k]].id, g->n[u->nodes[k]].op);
		nc_log(g, "%s", line);
	}
}

/* One unit per compute node; dependencies from operands, eager order and barriers. */
static int singletons(nc_graph_t *g)
{
	int last_barrier = -1, last_eager = -1;
	for (int i = 0; i < g->nn; i++) {
		nc_node_t *x = &g->n[i];
		if (x->kind == 'V' || (x->kind == 'P' && x->free))
			continue;
		int kind = U_PW;
		space_t rs;
		if (x->kind == 'R') {
			int st = reduction_space(g, x, &rs);
			if (st < -1)
				return st;
			if (st) {
				x->kind = 'E'; /* interleaved reduced dims: the frontend runs it */
				nc_log(g, "node %d: %s over interleaved dims runs eagerly", x->id, x->op);
			}
			kind = rs.kind;
		}
		if (x->kind == 'L')
			kind = U_LIB;
		else if (x->kind == 'E')
			kind = U_EAGER;
		int ui;
		nc_unit_t *u = nc_new_unit(g, kind, &ui);
		if (!u)
			return nc_fail(g, NC_ERR_INVALID, "too many units");
		int st = nc_unit_add(g, ui, i);
		if (st)
			return st;
		const nc_value_t *vx = x->nout > 0 && x->outs[0] >= 0 ? &g->v[x->outs[0]] : NULL;
		if (kind == U_PW) {
			u->N = numel(vx), u->R = rows_of(vx), u->L = last_dim(vx), u->O = "1", u->RL = u->N;
			g->v[vx->id].cls = CLS_FULL;
		} else if (kind == U_ROW || kind == U_COL) {
			u->N = rs.N, u->R = rs.R, u->L = rs.L, u->O = rs.O, u->RL = rs.RL, u->C = rs.C;
			g->v[vx->id].cls = kind == U_ROW ? CLS_ROW : CLS_COL;
		}
		add_operand_deps(g, ui, x);
		nc_add_dep(g, ui, last_barrier);
		if (kind == U_EAGER) {
			nc_add_dep(g, ui, last_eager); /* eager ops keep their order (random numbers) */
			last_eager = ui;
		}
		bool host_only = true; /* a mutation of CPU tensors only (a CPU `step` += 1): kernels never
					* touch them, the eager order above is enough */
		for (int j = 0; j < x->nin; j++)
			if (x->ins[j].kind == 'v' && x->ins[j].v >= 0 && g->v[x->ins[j].v].on_device)
				host_only = false;
		for (int j = 0; j < x->nout; j++)
			if (x->outs[j] >= 0 && g->v[x->outs[j]].on_device)
				host_only = false;
		if (x->barrier && !host_only) {
			for (int k2 = 0; k2 < ui; k2++)
				nc_add_dep(g, ui, k2);
			last_barrier = ui;
		}
	}
	return 0;
}

int nc_fuse(nc_graph_t *g)
{
	g->u_cap = 2 * g->nn + 8;
	g->u = nc_alloc(&g->A, sizeof(nc_unit_t) * (size_t)g->u_cap);
	memb_t mb = {0};
	mb.pos = nc_calloc((size_t)g->nn + 1, sizeof(int));
	mb.stamp = nc_calloc((size_t)g->nn + 1, sizeof(int));
	mb.cls = nc_calloc((size_t)g->nn + 1, sizeof(int));
	int *tmp = nc_calloc((size_t)g->nn + 1, sizeof(int));
	int st = 0;
	if (!g->u || !mb.pos || !mb.stamp || !mb.cls || !tmp) {
		st = nc_fail(g, NC_ERR_NOMEM, "out of memory");
		goto out;
	}
	if ((st = singletons(g)))
		goto out;
	/* producer -> consumer: merge a node's unit with the units of the values it reads */
	for (int i = 0; i < g->nn && st >= 0; i++) {
		const nc_node_t *x = &g->n[i];
		if ((x->kind != 'P' && x->kind != 'R') || x->unit < 0)
			continue;
		for (int k = 0; k < x->nin && st >= 0; k++) {
			if (x->ins[k].kind != 'v' || x->ins[k].v < 0)
				continue;
			bool tr;
			int uo = nc_root_producer_unit(g, x->ins[k].v, &tr);
			if (uo >= 0 && tr && uo != g->n[i].unit)
				st = try_merge(g, uo, g->n[i].unit, &mb, tmp);
		}
	}
	/* siblings: units reading the same buffer */
	for (int v = 0; v < g->nv && st >= 0; v++) {
		if (g->v[v].view_of >= 0)
			continue;
		int readers[64], nr = 0;
		for (int w = 0; w < g->nv && nr < 64; w++) {
			if (g->v[w].root != v)
				continue;
			for (int i = 0; i < g->v[w].nusers && nr < 64; i++) {
				const nc_node_t *x = &g->n[g->v[w].users[i]];
				if ((x->kind == 'P' || x->kind == 'R') && x->unit >= 0)
					readers[nr++] = g->v[w].users[i];
			}
		}
		for (int a = 0; a < nr && st >= 0; a++)
			for (int b = a + 1; b < nr && st >= 0; b++) {
				int ua = g->n[readers[a]].unit, ub = g->n[readers[b]].unit;
				if (ua != ub)
					st = try_merge(g, ua < ub ? ua : ub, ua < ub ? ub : ua, &mb, tmp);
			}
	}
	if (st < 0)
		goto out;
	st = 0;
	for (int i = 0; i < g->nn; i++) {
		nc_node_t *x = &g->n[i];
		if (x->kind != 'P' || !x->free || !free_needs_memory(g, x->outs[0]))
			continue;
		const nc_value_t *vx = &g->v[x->outs[0]];
		int ui;
		nc_unit_t *u = nc_new_unit(g, U_PW, &ui);
		if (!u) {
			st = nc_fail(g, NC_ERR_INVALID, "too many units");
			goto out;
		}
		u->N = numel(vx), u->R = rows_of(vx), u->L = last_dim(vx), u->O = "1", u->RL = u->N;
		if ((st = nc_unit_add(g, ui, i)))
			goto out;
		g->v[x->outs[0]].cls = CLS_FULL;
		add_consumer_deps(g, x->outs[0], ui);
	}
	cat_into(g);
	if (g->A.oom)
		st = nc_fail(g, NC_ERR_NOMEM, "out of memory");
	else
		log_units(g);
out:
	free(mb.pos);
	free(mb.stamp);
	free(mb.cls);
	free(tmp);
	return st;
}
