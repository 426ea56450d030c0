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

static bool grow(nc_graph_t *g, int **arr, int *cap, int n)
{
	if (n < *cap)
		return true;
	int c = *cap ? 2 * *cap : 8;
	int *p = nc_alloc(&g->A, sizeof(int) * (size_t)c);
	if (!p)
		return false;
	if (n)
		memcpy(p, *arr, sizeof(int) * (size_t)n);
	*arr = p, *cap = c;
	return true;
}

nc_unit_t *nc_new_unit(nc_graph_t *g, int kind, int *index)
{
	if (g->nu == g->u_cap)
		return NULL;
	nc_unit_t *u = &g->u[g->nu];
	memset(u, 0, sizeof *u);
	u->kind = kind;
	u->first = 1 << 30;
	u->seg = -1;
	*index = g->nu++;
	return u;
}

int nc_unit_add(nc_graph_t *g, int unit, int node)
{
	nc_unit_t *u = &g->u[unit];
	if (!grow(g, &u->nodes, &u->nodes_cap, u->nnodes))
		return nc_fail(g, NC_ERR_NOMEM, "out of memory");
	u->nodes[u->nnodes++] = node;
	if (node < u->first)
		u->first = node;
	g->n[node].unit = unit;
	return 0;
}

void nc_add_dep(nc_graph_t *g, int unit, int dep)
{
	if (dep < 0 || dep == unit)
		return;
	nc_unit_t *u = &g->u[unit];
	for (int i = 0; i < u->ndeps; i++)
		if (u->deps[i] == dep)
			return;
	if (grow(g, &u->deps, &u->deps_cap, u->ndeps))
		u->deps[u->ndeps++] = dep;
}

int nc_root_producer_unit(nc_graph_t *g, int value, bool *transparent)
{
	bool tr = true;
	int v = value;
	while (g->v[v].view_of >= 0) {
		if (!g->v[v].reshape)
			tr = false;
		v = g->v[v].view_of;
	}
	if (transparent)
		*transparent = tr;
	int p = g->v[v].producer;
	if (p < 0 || g->n[p].free)
		return -1;
	return g->n[p].unit;
}

int nc_sp_index(const nc_value_t *v, const char *L)
{
	for (int d = 0; d <= v->rank; d++)
		if (nc_streq(v->sp[d], L))
			return d;
	return -1;
}

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
	char *seen = calloc((size_t)g->nu + 1, 1);
	if (!seen)
		return true; /* conservative */
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

/* The class node x would have in unit G, or CLS_NONE if it cannot join G. */
static int join_class(nc_graph_t *g, const nc_node_t *x, int G)
{
	const nc_unit_t *u = &g->u[G];
	const nc_value_t *vx = &g->v[x->outs[0]];
	bool full_ok = nc_streq(numel(vx), u->N) && nc_sp_index(vx, u->L) >= 0;
	bool row_ok = u->kind == U_ROW && nc_streq(numel(vx), u->R);
	bool col_ok = u->kind == U_COL && nc_streq(numel(vx), u->L);
	bool any = false;
	for (int k = 0; k < x->nin; k++) {
		const nc_opnd_t *o = &x->ins[k];
		if (o->kind != 'v')
			continue;
		bool tr;
		int uo = nc_root_producer_unit(g, o->v, &tr);
		if (uo != G) {
			if (uo >= 0 && depends(g, uo, G))
				return CLS_NONE; /* G -> uo -> x would be a cycle */
			continue;
		}
		if (!tr)
			return CLS_NONE;
		any = true;
		const nc_value_t *ov = &g->v[o->v];
		int c = g->v[ov->root].cls;
		if (c == CLS_FULL) {
			full_ok = full_ok && nc_streq(numel(ov), numel(vx));
			row_ok = col_ok = false;
		} else if (c == CLS_ROW) {
			full_ok = full_ok && row_broadcast(g, ov, vx, u);
			row_ok = row_ok && nc_streq(numel(ov), u->R);
			col_ok = false;
		} else if (c == CLS_COL) {
			full_ok = row_ok = false;
			col_ok = col_ok && nc_streq(numel(ov), u->L);
		} else {
			return CLS_NONE;
		}
	}
	if (!any)
		return CLS_NONE;
	return full_ok ? CLS_FULL : row_ok ? CLS_ROW : col_ok ? CLS_COL : CLS_NONE;
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

static int new_space_unit(nc_graph_t *g, int kind, const char *N, const char *R, const char *L, int node, int last_barrier)
{
	int ui;
	nc_unit_t *u = nc_new_unit(g, kind, &ui);
	if (!u)
		return nc_fail(g, NC_ERR_INVALID, "too many units");
	u->N = N, u->R = R, u->L = L;
	int st = nc_unit_add(g, ui, node);
	if (st)
		return st;
	add_operand_deps(g, ui, &g->n[node]);
	nc_add_dep(g, ui, last_barrier);
	return ui;
}

static const char *last_dim(const nc_value_t *v) { return v->rank ? v->sp[v->rank - 1] : "1"; }
static const char *rows_of(const nc_value_t *v) { return v->rank ? v->pp[v->rank - 1] : "1"; }

static int fuse_pointwise(nc_graph_t *g, int ni, int last_barrier)
{
	nc_node_t *x = &g->n[ni];
	for (int k = 0; k < x->nin; k++) {
		if (x->ins[k].kind != 'v')
			continue;
		int G = nc_root_producer_unit(g, x->ins[k].v, NULL);
		if (G < 0 || g->u[G].closed || g->u[G].kind > U_COL)
			continue;
		int c = join_class(g, x, G);
		if (c == CLS_NONE)
			continue;
		int st = nc_unit_add(g, G, ni);
		if (st)
			return st;
		add_operand_deps(g, G, x);
		g->v[x->outs[0]].cls = c;
		return 0;
	}
	const nc_value_t *vx = &g->v[x->outs[0]];
	int u = new_space_unit(g, U_PW, numel(vx), rows_of(vx), last_dim(vx), ni, last_barrier);
	if (u < 0)
		return u;
	g->v[x->outs[0]].cls = CLS_FULL;
	return 0;
}

/* Classify a reduction: 'r' row (reduced dims after kept dims), 'c' column, 0 neither.  *k is the
 * split: rows = pp[k], L = sp[k]. */
static char reduction_kind(const nc_graph_t *g, const nc_node_t *x, int *k)
{
	const nc_value_t *in = &g->v[x->ins[0].v];
	bool red[NC_MAX_RANK] = {0};
	for (int i = 0; i < x->ndims; i++)
		if (x->dims[i] >= 0 && x->dims[i] < in->rank)
			red[x->dims[i]] = true;
	int first_red = -1, last_red = -1, first_keep = -1, last_keep = -1;
	for (int d = 0; d < in->rank; d++) {
		if (nc_is_one(in->size[d]))
			continue;
		if (red[d]) {
			if (first_red < 0)
				first_red = d;
			last_red = d;
		} else {
			if (first_keep < 0)
				first_keep = d;
			last_keep = d;
		}
	}
	if (first_red < 0) { /* nothing (nontrivial) reduced: every row has one element */
		*k = in->rank;
		return 'r';
	}
	if (first_keep < 0) { /* everything reduced */
		*k = 0;
		return 'r';
	}
	if (last_keep < first_red) {
		*k = first_red;
		return 'r';
	}
	if (last_red < first_keep) {
		*k = first_keep;
		return 'c';
	}
	return 0;
}

static bool members_have_L(const nc_graph_t *g, const nc_unit_t *u, const char *L)
{
	for (int i = 0; i < u->nnodes; i++) {
		const nc_node_t *m = &g->n[u->nodes[i]];
		if (nc_sp_index(&g->v[m->outs[0]], L) < 0)
			return false;
	}
	return true;
}

static int fuse_reduction(nc_graph_t *g, int ni, int last_barrier)
{
	nc_node_t *x = &g->n[ni];
	const nc_value_t *in = &g->v[x->ins[0].v];
	int k;
	char kind = reduction_kind(g, x, &k);
	if (!kind) {
		x->kind = 'E'; /* interleaved reduced dims: the frontend runs it */
		nc_log(g, "node %d: %s over interleaved dims runs eagerly", x->id, x->op);
		return 1;
	}
	const char *R = in->pp[k], *L = in->sp[k];
	bool tr;
	int G = nc_root_producer_unit(g, x->ins[0].v, &tr);
	if (G >= 0 && tr && !g->u[G].closed && g->u[G].kind <= U_COL && g->v[in->root].cls == CLS_FULL &&
	    nc_streq(g->u[G].N, numel(in))) {
		nc_unit_t *u = &g->u[G];
		bool ok = false;
		if (kind == 'r' && u->kind == U_PW && members_have_L(g, u, L))
			ok = true, u->kind = U_ROW;
		else if (kind == 'r' && u->kind == U_ROW && nc_streq(u->L, L) && nc_streq(u->R, R))
			ok = true;
		else if (kind == 'c' && u->kind == U_PW && members_have_L(g, u, L))
			ok = true, u->kind = U_COL;
		else if (kind == 'c' && u->kind == U_COL && nc_streq(u->L, L) && nc_streq(u->R, R))
			ok = true;
		if (ok) {
			u->R = R, u->L = L;
			int st = nc_unit_add(g, G, ni);
			if (st)
				return st;
			g->v[x->outs[0]].cls = kind == 'r' ? CLS_ROW : CLS_COL;
			return 0;
		}
	}
	int u = new_space_unit(g, kind == 'r' ? U_ROW : U_COL, numel(in), R, L, ni, last_barrier);
	if (u < 0)
		return u;
	g->v[x->outs[0]].cls = kind == 'r' ? CLS_ROW : CLS_COL;
	return 0;
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

int nc_fuse(nc_graph_t *g)
{
	g->u_cap = 2 * g->nn + 8;
	g->u = nc_alloc(&g->A, sizeof(nc_unit_t) * (size_t)g->u_cap);
	if (!g->u)
		return nc_fail(g, NC_ERR_NOMEM, "out of memory");
	int last_barrier = -1, last_eager = -1;
	for (int i = 0; i < g->nn; i++) {
		nc_node_t *x = &g->n[i];
		int st = 0;
		if (x->kind == 'V' || (x->kind == 'P' && x->free))
			continue;
		if (x->kind == 'P')
			st = fuse_pointwise(g, i, last_barrier);
		else if (x->kind == 'R')
			st = fuse_reduction(g, i, last_barrier);
		if (st < 0)
			return st;
		if (x->kind == 'L' || x->kind == 'E') {
			int ui;
			nc_unit_t *u = nc_new_unit(g, x->kind == 'L' ? U_LIB : U_EAGER, &ui);
			if (!u)
				return nc_fail(g, NC_ERR_INVALID, "too many units");
			if ((st = nc_unit_add(g, ui, i)))
				return st;
			add_operand_deps(g, ui, x);
			nc_add_dep(g, ui, last_barrier);
			if (x->kind == 'E') {
				nc_add_dep(g, ui, last_eager); /* eager ops keep their order (random numbers) */
				last_eager = ui;
			}
			if (x->barrier) {
				for (int k = 0; k < ui; k++) {
					nc_add_dep(g, ui, k);
					g->u[k].closed = true;
				}
				last_barrier = ui;
			}
		}
	}
	for (int i = 0; i < g->nn; i++) {
		nc_node_t *x = &g->n[i];
		if (x->kind != 'P' || !x->free || !free_needs_memory(g, x->outs[0]))
			continue;
		const nc_value_t *vx = &g->v[x->outs[0]];
		int ui = new_space_unit(g, U_PW, numel(vx), rows_of(vx), last_dim(vx), i, -1);
		if (ui < 0)
			return ui;
		g->v[x->outs[0]].cls = CLS_FULL;
		add_consumer_deps(g, x->outs[0], ui);
	}
	if (g->A.oom)
		return nc_fail(g, NC_ERR_NOMEM, "out of memory");
	for (int i = 0; i < g->nu; i++) {
		const nc_unit_t *u = &g->u[i];
		static const char *const kinds[] = {"pw", "row", "col", "lib", "eager"};
		char line[400];
		int n = snprintf(line, sizeof line, "unit %d %s", i, kinds[u->kind]);
		if (u->kind <= U_COL)
			n += snprintf(line + n, sizeof line - (size_t)n, " R=%s L=%s", u->R, u->L);
		n += snprintf(line + n, sizeof line - (size_t)n, " nodes");
		for (int k = 0; k < u->nnodes && n < 300; k++)
			n += snprintf(line + n, sizeof line - (size_t)n, " %d:%s", g->n[u->nodes[k]].id, g->n[u->nodes[k]].op);
		nc_log(g, "%s", line);
	}
	return 0;
}
