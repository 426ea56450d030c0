/* nc_plan.c - schedule the units, decide which values live in memory and where, and cut the
 * schedule into segments (one queue launch each).
 *
 * Schedule: topological order of the unit graph, ties broken by graph order (so eager ops, and the
 * random numbers they draw, keep the order of the program).
 * Storage of a materialized root buffer: ST_INPUT (graph input), ST_EAGER (made by an eager op),
 * ST_EXT (allocated by the frontend: graph outputs and eager operands, which must be torch tensors),
 * ST_WS (everything else: a slice of the program's workspace, placed at run time by the generated
 * nc_plan() from the sizes and the live ranges [def_step, last_step] computed here).
 */
#include <stdlib.h>
#include <string.h>

#include "nc_impl.h"

static int schedule(nc_graph_t *g)
{
	int *indeg = nc_calloc((size_t)g->nu + 1, sizeof(int));
	int **rev = nc_calloc((size_t)g->nu + 1, sizeof(int *));
	int *nrev = nc_calloc((size_t)g->nu + 1, sizeof(int));
	bool *done = nc_calloc((size_t)g->nu + 1, sizeof(bool));
	int st = 0;
	g->sched = nc_alloc(&g->A, sizeof(int) * (size_t)(g->nu + 1));
	if (!indeg || !rev || !nrev || !done || !g->sched) {
		st = nc_fail(g, NC_ERR_NOMEM, "out of memory");
		goto out;
	}
	int live = 0;
	for (int i = 0; i < g->nu; i++) {
		done[i] = g->u[i].dead;
		live += !g->u[i].dead;
		for (int k = 0; k < g->u[i].ndeps; k++)
			nrev[g->u[i].deps[k]]++;
	}
	for (int i = 0; i < g->nu; i++) {
		rev[i] = nc_malloc(sizeof(int) * (size_t)(nrev[i] + 1));
		if (!rev[i]) {
			st = nc_fail(g, NC_ERR_NOMEM, "out of memory");
			goto out;
		}
		nrev[i] = 0;
	}
	for (int i = 0; i < g->nu; i++) {
		indeg[i] = g->u[i].ndeps;
		for (int k = 0; k < g->u[i].ndeps; k++) {
			int d = g->u[i].deps[k];
			rev[d][nrev[d]++] = i;
		}
	}
	g->nsched = 0;
	for (int n = 0; n < live; n++) {
		int best = -1;
		for (int i = 0; i < g->nu; i++)
			if (!done[i] && indeg[i] == 0 && (best < 0 || g->u[i].first < g->u[best].first))
				best = i;
		if (best < 0) {
			st = nc_fail(g, NC_ERR_INVALID, "internal error: the unit graph has a cycle");
			goto out;
		}
		done[best] = true;
		g->u[best].step = g->nsched;
		g->sched[g->nsched++] = best;
		for (int k = 0; k < nrev[best]; k++)
			indeg[rev[best][k]]--;
	}
out:
	if (rev)
		for (int i = 0; i < g->nu; i++)
			free(rev[i]);
	free(rev);
	free(nrev);
	free(indeg);
	free(done);
	return st;
}

/* Walk the users of `value` through views: mark roots read by other units, by eager ops, or
 * through non-reshape views inside the unit; track the last reading step. */
static void scan_users(nc_graph_t *g, int value, int root, int unit, bool tr, bool *mem, bool *eager_use)
{
	nc_value_t *v = &g->v[value];
	nc_value_t *rv = &g->v[root];
	if (v->is_output)
		*mem = true, *eager_use = true;
	for (int i = 0; i < v->nusers; i++) {
		const nc_node_t *u = &g->n[v->users[i]];
		if (u->kind == 'V') {
			scan_users(g, u->outs[0], root, unit, tr && g->v[u->outs[0]].reshape, mem, eager_use);
			continue;
		}
		if (u->kind == 'E')
			*eager_use = true;
		if (u->unit < 0)
			continue; /* a free node (reads only free values) */
		if (u->unit != unit || !tr || u->kind == 'L' || u->kind == 'E')
			*mem = true;
		int s = g->u[u->unit].step;
		if (s > rv->last_step)
			rv->last_step = s;
	}
}

/* Input mutations (values with `into`): the writing unit must be a pointwise unit (or a row unit:
 * its writes come after its reduction passes over the same row) that reads the
 * input, if at all, at the element it writes (same flat index, contiguous); every other unit that
 * reads the input runs before it (a dependency).  A violation fails the compile: the frontend then
 * compiles the graph again with the mutations applied by eager copies. */
static bool dense(const nc_value_t *v) { return v->rank == 0 || nc_streq(v->lin[0], "1"); }

static int reads_of_input(nc_graph_t *g, int value, int dst, int writer)
{
	const nc_value_t *v = &g->v[value], *d = &g->v[dst];
	for (int i = 0; i < v->nusers; i++) {
		const nc_node_t *u = &g->n[v->users[i]];
		if (u->kind == 'V') {
			int st = reads_of_input(g, u->outs[0], dst, writer);
			if (st)
				return st;
			continue;
		}
		if (u->unit < 0)
			continue;
		if (u->unit != writer) {
			nc_add_dep(g, writer, u->unit);
			continue;
		}
		if (!nc_streq(v->sp[0], d->sp[0]) || !dense(v) || !nc_streq(v->off, d->off))
			return nc_fail(g, NC_ERR_INVALID, "input %d is mutated by unit %d, which also reads it at other elements", dst, writer);
	}
	return 0;
}

int nc_mutations(nc_graph_t *g)
{
	for (int i = 0; i < g->nv; i++) {
		nc_value_t *v = &g->v[i];
		if (v->into < 0)
			continue;
		nc_value_t *d = &g->v[v->into];
		int w = v->producer >= 0 ? g->n[v->producer].unit : -1;
		if (!d->is_input || d->view_of >= 0 || v->view_of >= 0 || v->nusers || v->is_output || w < 0 || (g->u[w].kind != U_PW && g->u[w].kind != U_ROW) ||
		    !dense(d) || !dense(v) || !nc_streq(v->sp[0], d->sp[0]) || v->dtype != d->dtype)
			return nc_fail(g, NC_ERR_INVALID, "value %d cannot be written into input %d in place", i, v->into);
		int st = reads_of_input(g, v->into, v->into, w);
		if (st)
			return st;
		nc_log(g, "in place: value %d (unit %d) is written into input %d", i, w, v->into);
	}
	return 0;
}

static int storage(nc_graph_t *g)
{
	for (int i = 0; i < g->nv; i++) {
		nc_value_t *v = &g->v[i];
		v->last_step = -1;
		v->def_step = -1;
	}
	for (int i = 0; i < g->nv; i++) {
		nc_value_t *v = &g->v[i];
		if (v->view_of >= 0)
			continue;
		int unit = -1;
		bool mem = false, eager_use = false;
		if (v->into >= 0) {
			v->storage = ST_INTO;
			v->mat = true;
			v->def_step = v->last_step = g->u[g->n[v->producer].unit].step;
			continue;
		}
		if (v->is_input) {
			v->storage = ST_INPUT;
			v->mat = true;
		} else if (v->producer >= 0) {
			const nc_node_t *p = &g->n[v->producer];
			unit = p->unit;
			if (p->kind == 'E') {
				v->storage = ST_EAGER;
				v->mat = true;
			} else if (p->kind == 'L') {
				v->mat = true;
			}
			if (unit >= 0)
				v->def_step = g->u[unit].step;
		}
		scan_users(g, i, i, unit, true, &mem, &eager_use);
		if (v->producer >= 0 && g->n[v->producer].kind == 'P' && g->n[v->producer].free && unit < 0)
			continue; /* a constant, inlined by every reader */
		if (mem)
			v->mat = true;
		if (!v->mat || v->storage != ST_NONE)
			continue;
		v->storage = eager_use ? ST_EXT : ST_WS;
	}
	g->ws = nc_alloc(&g->A, sizeof(int) * (size_t)(g->nv + 1));
	if (!g->ws)
		return nc_fail(g, NC_ERR_NOMEM, "out of memory");
	for (int s = 0; s < g->nsched; s++)
		for (int i = 0; i < g->nv; i++) {
			nc_value_t *v = &g->v[i];
			if (v->storage == ST_WS && v->def_step == s) {
				v->ws_index = g->nws;
				g->ws[g->nws++] = i;
				if (v->last_step < v->def_step)
					v->last_step = v->def_step;
			}
		}
	return 0;
}

/* Roots a unit reads or writes through pointers (constants are inlined, so not listed). */
static void unit_roots(nc_graph_t *g, int ui, void (*fn)(nc_graph_t *, int, void *), void *ctx)
{
	const nc_unit_t *u = &g->u[ui];
	for (int k = 0; k < u->nnodes; k++) {
		const nc_node_t *n = &g->n[u->nodes[k]];
		for (int i = 0; i < n->nout; i++) {
			if (n->outs[i] < 0)
				continue;
			const nc_value_t *o = &g->v[n->outs[i]];
			if (o->view_of >= 0 && g->v[o->root].storage != ST_NONE) /* written into another buffer (cat_into) */
				fn(g, o->root, ctx);
			else if (o->mat && o->storage != ST_NONE)
				fn(g, o->storage == ST_INTO ? o->into : n->outs[i], ctx);
		}
		for (int i = 0; i < n->nin; i++) {
			if (n->ins[i].kind != 'v' || n->ins[i].v < 0)
				continue;
			const nc_value_t *r = &g->v[g->v[n->ins[i].v].root];
			if (r->producer >= 0 && g->n[r->producer].free && n->kind != 'L')
				continue;
			if (r->producer >= 0 && g->n[r->producer].unit == ui)
				continue; /* computed in this unit */
			if (r->storage != ST_NONE)
				fn(g, r->id, ctx);
		}
	}
}

typedef struct {
	int *list, n;
	int *stamp, tag;
} rootset_t;

static void collect_root(nc_graph_t *g, int root, void *ctx)
{
	rootset_t *s = ctx;
	(void)g;
	if (s->stamp[root] != s->tag)
		s->stamp[root] = s->tag, s->list[s->n++] = root;
}

static int segments(nc_graph_t *g)
{
	int st = 0;
	int *stamp = nc_malloc(sizeof(int) * (size_t)(g->nv + 1));
	int *in_seg = nc_malloc(sizeof(int) * (size_t)(g->nv + 1));
	int *tmp = nc_malloc(sizeof(int) * (size_t)(g->nv + 1));
	g->seg_cap = g->nsched + 1;
	g->seg = nc_alloc(&g->A, sizeof(nc_seg_t) * (size_t)g->seg_cap);
	if (!stamp || !in_seg || !tmp || !g->seg) {
		st = nc_fail(g, NC_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < g->nv; i++)
		stamp[i] = -1, in_seg[i] = -1;
	int cur = -1;
	for (int s = 0; s < g->nsched; s++) {
		int ui = g->sched[s];
		nc_unit_t *u = &g->u[ui];
		if (u->kind == U_EAGER) {
			cur = -1;
			continue;
		}
		rootset_t t = {.list = tmp, .stamp = stamp, .tag = s};
		unit_roots(g, ui, collect_root, &t);
		int fresh = 0;
		for (int i = 0; i < t.n; i++)
			fresh += cur < 0 || in_seg[tmp[i]] != cur;
		if (cur >= 0 && g->seg[cur].nroots + fresh + g->nsyms > NC_MAX_PTRS)
			cur = -1;
		if (cur < 0) {
			cur = g->nseg++;
			nc_seg_t *sg = &g->seg[cur];
			sg->first = s;
			sg->roots = nc_alloc(&g->A, sizeof(int) * (size_t)(g->nv + 1));
			if (!sg->roots) {
				st = nc_fail(g, NC_ERR_NOMEM, "out of memory");
				goto out;
			}
		}
		nc_seg_t *sg = &g->seg[cur];
		sg->last = s;
		u->seg = cur;
		for (int i = 0; i < t.n; i++)
			if (in_seg[tmp[i]] != cur) {
				in_seg[tmp[i]] = cur;
				sg->roots[sg->nroots++] = tmp[i];
			}
		if (sg->nroots + g->nsyms > NC_MAX_PTRS + 16) {
			st = nc_fail(g, NC_ERR_INVALID, "unit %d alone needs %d pointers (limit %d)", ui, sg->nroots, NC_MAX_PTRS);
			goto out;
		}
	}
out:
	free(stamp);
	free(in_seg);
	free(tmp);
	return st;
}

/* GEMM epilogues: a pointwise unit scheduled right after a 2-D GEMM that reads its output C
 * (contiguous [M, N]), whose members all have M*N elements with N a suffix product of their shapes
 * (row r of the unit is row r of C), runs inside the GEMM: the segment computes C row block by row
 * block and applies the epilogue (bias, activation, residual add, casts) to each block while it is
 * in cache.  The epilogue takes the GEMM's step, so the live ranges keep its outputs off the bytes
 * of the GEMM's operands (later row blocks still read them). */
static bool reads_root(const nc_graph_t *g, const nc_unit_t *e, int root)
{
	for (int i = 0; i < e->nnodes; i++) {
		const nc_node_t *m = &g->n[e->nodes[i]];
		for (int j = 0; j < m->nin; j++)
			if (m->ins[j].kind == 'v' && m->ins[j].v >= 0 && g->v[m->ins[j].v].root == root)
				return true;
	}
	return false;
}

/* the output C of a GEMM (2-D mm) or embedding unit that can take an epilogue, or NULL */
static const nc_value_t *epi_target(const nc_graph_t *g, const nc_unit_t *u)
{
	if (u->kind != U_LIB || u->dead)
		return NULL;
	const nc_node_t *mm = &g->n[u->nodes[0]];
	/* embedding: a gather of rows, the epilogue runs on each row block; embedding_bwd (one task): the
	 * epilogue runs after it in the same task */
	bool emb = !strcmp(mm->op, "embedding") || !strcmp(mm->op, "embedding_bwd");
	if ((strcmp(mm->op, "mm") && !emb) || mm->nout < 1 || mm->outs[0] < 0)
		return NULL;
	const nc_value_t *C = &g->v[mm->outs[0]];
	if ((!emb && C->rank != 2) || (emb && C->rank < 1) || !nc_streq(C->lin[0], "1") || C->view_of >= 0)
		return NULL;
	return C;
}

/* every member of e has C's element count with C's row length a suffix product of its shape */
static bool epi_shape_ok(const nc_graph_t *g, const nc_unit_t *e, const int *nodes, int nnodes, const nc_value_t *C)
{
	const char *cols = C->size[C->rank - 1];
	for (int i = 0; i < nnodes; i++) {
		const nc_node_t *m = &g->n[nodes[i]];
		const nc_value_t *S = &g->v[m->outs[0]];
		if (!nc_streq(S->sp[0], C->sp[0]) || nc_sp_index(S, cols) < 0 || S->into >= 0) /* no in-place write:
												     * later blocks read the GEMM's operands */
			return false;
	}
	(void)e;
	return true;
}

static void epilogues(nc_graph_t *g)
{
	g->nepi = 0;
	for (int p = 0; p + 1 < g->nsched; p++) {
		nc_unit_t *u = &g->u[g->sched[p]];
		const nc_value_t *C = epi_target(g, u);
		if (!C)
			continue;
		/* the first later pointwise unit that reads C and could run right after the GEMM (all its other
		 * dependencies are scheduled before it) */
		int q = p + 1;
		for (; q < g->nsched; q++) {
			const nc_unit_t *e = &g->u[g->sched[q]];
			if (e->kind != U_PW || e->dead || e->is_epi || !reads_root(g, e, C->id))
				continue;
			bool ready = true;
			for (int k = 0; k < e->ndeps && ready; k++)
				ready = e->deps[k] == g->sched[p] || g->u[e->deps[k]].step < p;
			if (!ready || !epi_shape_ok(g, e, e->nodes, e->nnodes, C))
				q = g->nsched;
			break;
		}
		if (q >= g->nsched)
			continue;
		nc_unit_t *e = &g->u[g->sched[q]];
		const nc_node_t *mm = &g->n[u->nodes[0]];
		u->epi1 = g->sched[q] + 1;
		e->is_epi = true;
		e->R = C->pp[C->rank - 1];
		e->L = C->size[C->rank - 1];
		nc_log(g, "epilogue: unit %d runs inside the %s of unit %d", g->sched[q], mm->op, g->sched[p]);
	}
}

/* A column unit right after a GEMM whose pointwise members (its prologue: e.g. a GELU backward
 * reading the GEMM's output) could be the GEMM's epilogue is split in two: the pointwise members
 * become a PW unit (the GEMM's epilogue, see `epilogues`), the column reductions (a bias gradient)
 * stay a COL unit that reads their materialized result and can join the next dependency group. */
static int split_col_prologues(nc_graph_t *g)
{
	int nu0 = g->nu;
	for (int ui = 0; ui < nu0; ui++) {
		nc_unit_t *U = &g->u[ui];
		if (U->kind != U_COL || U->dead)
			continue;
		int nf = 0, gemm = -1;
		bool ok = true;
		for (int i = 0; i < U->nnodes && ok; i++) {
			const nc_node_t *m = &g->n[U->nodes[i]];
			if (m->kind != 'P' || g->v[m->outs[0]].cls != CLS_FULL)
				continue;
			nf++;
			for (int j = 0; j < m->nin && ok; j++) {
				if (m->ins[j].kind != 'v' || m->ins[j].v < 0)
					continue;
				const nc_value_t *r = &g->v[g->v[m->ins[j].v].root];
				if (r->producer < 0)
					continue;
				const nc_node_t *pn = &g->n[r->producer];
				if (pn->unit == ui && g->v[pn->outs[0]].cls != CLS_FULL)
					ok = false; /* reads one of the unit's reductions */
				else if (pn->unit >= 0 && pn->unit != ui && epi_target(g, &g->u[pn->unit]))
					gemm = pn->unit;
			}
		}
		if (!ok || !nf || nf == U->nnodes || gemm < 0)
			continue;
		int *fn = nc_malloc(sizeof(int) * (size_t)U->nnodes);
		if (!fn)
			return nc_fail(g, NC_ERR_NOMEM, "out of memory");
		int k = 0;
		for (int i = 0; i < U->nnodes; i++)
			if (g->n[U->nodes[i]].kind == 'P' && g->v[g->n[U->nodes[i]].outs[0]].cls == CLS_FULL)
				fn[k++] = U->nodes[i];
		const nc_value_t *C = epi_target(g, &g->u[gemm]);
		if (!epi_shape_ok(g, NULL, fn, k, C)) {
			free(fn);
			continue;
		}
		int pi;
		nc_unit_t *P = nc_new_unit(g, U_PW, &pi);
		if (!P) {
			free(fn);
			return nc_fail(g, NC_ERR_INVALID, "too many units");
		}
		U = &g->u[ui];
		P->N = C->sp[0], P->R = C->pp[C->rank - 1], P->L = C->size[C->rank - 1], P->O = "1", P->RL = P->N;
		int st = 0;
		for (int i = 0; i < k && !st; i++)
			st = nc_unit_add(g, pi, fn[i]);
		int w = 0;
		for (int i = 0; i < U->nnodes; i++)
			if (g->n[U->nodes[i]].unit == ui)
				U->nodes[w++] = U->nodes[i];
		U->nnodes = w;
		U->first = 1 << 30;
		for (int i = 0; i < w; i++)
			if (U->nodes[i] < U->first)
				U->first = U->nodes[i];
		free(fn);
		if (st)
			return st;
		for (int d = 0; d < U->ndeps; d++)
			nc_add_dep(g, pi, U->deps[d]);
		nc_add_dep(g, ui, pi);
		/* readers of the pointwise results now depend on the new unit (and on U only if they still
		 * read U's values) */
		for (int x = 0; x < g->nu; x++) {
			nc_unit_t *X = &g->u[x];
			if (x == pi || x == ui || X->dead)
				continue;
			int at = -1;
			for (int d = 0; d < X->ndeps; d++)
				if (X->deps[d] == ui)
					at = d;
			if (at < 0)
				continue;
			bool rp = false, ru = X->kind == U_EAGER; /* eager ops keep every ordering */
			for (int i = 0; i < X->nnodes; i++) {
				const nc_node_t *m = &g->n[X->nodes[i]];
				for (int j = 0; j < m->nin; j++) {
					if (m->ins[j].kind != 'v' || m->ins[j].v < 0)
						continue;
					const nc_value_t *r = &g->v[g->v[m->ins[j].v].root];
					if (r->producer >= 0 && g->n[r->producer].unit == pi)
						rp = true;
					else if (r->producer >= 0 && g->n[r->producer].unit == ui)
						ru = true;
				}
			}
			if (!rp)
				continue;
			if (!ru)
				X->deps[at] = X->deps[--X->ndeps];
			nc_add_dep(g, x, pi);
		}
		nc_log(g, "split: the pointwise prologue of column unit %d becomes unit %d (an epilogue of unit %d)", ui, pi, gemm);
	}
	return 0;
}

/* GEMM prologues: a layer norm scheduled right before a 2-D GEMM whose A operand is the layer norm's
 * output viewed as [rows, cols] (contiguous, same offset: row r of A is row r of the layer norm) runs
 * inside the GEMM: each row block of the GEMM first normalizes its rows (the library layer norm on
 * those rows), then multiplies them.  The layer norm takes the GEMM's step in the memory plan. */
static void prologues(nc_graph_t *g)
{
	const char *env = getenv("NEURON_COMPILE_PROLOGUES"); /* 0: none (A/B runs) */
	if (env && !strcmp(env, "0"))
		return;
	for (int p = 1; p < g->nsched; p++) {
		nc_unit_t *u = &g->u[g->sched[p]], *l = &g->u[g->sched[p - 1]];
		if (u->kind != U_LIB || l->kind != U_LIB || l->dead || strcmp(g->n[u->nodes[0]].op, "mm") ||
		    strcmp(g->n[l->nodes[0]].op, "layernorm"))
			continue;
		const nc_node_t *mm = &g->n[u->nodes[0]], *ln = &g->n[l->nodes[0]];
		if (mm->nin < 2 || mm->ins[0].kind != 'v' || mm->ins[0].v < 0 || ln->nout < 1 || ln->outs[0] < 0 ||
		    ln->nin < 1 || ln->ins[0].kind != 'v' || ln->ins[0].v < 0)
			continue;
		const nc_value_t *A = &g->v[mm->ins[0].v], *Y = &g->v[ln->outs[0]], *X = &g->v[ln->ins[0].v];
		int k = X->rank - atoi(ln->attrs[0]);
		if (k < 0 || A->rank != 2 || A->root != Y->id || Y->view_of >= 0 || !nc_streq(A->lin[0], "1") ||
		    !nc_streq(A->off, Y->off) || !nc_streq(A->size[0], X->pp[k]) || !nc_streq(A->size[1], X->sp[k]) ||
		    !nc_streq(Y->lin[0], "1") || Y->dtype != A->dtype)
			continue;
		u->pro1 = g->sched[p - 1] + 1;
		l->is_pro = true;
		nc_log(g, "prologue: unit %d runs inside the gemm of unit %d", g->sched[p - 1], g->sched[p]);
	}
}

/* Dependency groups: re-schedule so that independent units sit next to each other.  List scheduling
 * over the unit graph: the next unit is the ready one with the smallest graph position (as
 * `schedule`); after a non-eager unit U is placed at position p, every other non-eager unit whose
 * dependencies were all placed before p (so it reads nothing U or the group computes) joins U's
 * group, smallest graph position first.  A GEMM and its epilogue are placed together (the epilogue
 * stays right after its GEMM); eager units never join a group and keep their dependency order.
 * Example (a linear layer's backward): the dX GEMM, the dW GEMM and the bias gradient (a column
 * reduction) all read only the incoming gradient, so they form one group. */
static bool lib_groups(void)
{
	const char *e = getenv("NEURON_COMPILE_LIB_GROUPS"); /* 0: library calls never join a group (A/B runs) */
	return !e || strcmp(e, "0");
}

static bool groupable(const nc_unit_t *u)
{
	return u->kind != U_EAGER && !u->dead && !u->is_epi && !u->is_pro && (u->kind != U_LIB || lib_groups());
}

static bool ready_before(const nc_graph_t *g, const int *at, int ui, int limit, int skip1, int skip2)
{
	const nc_unit_t *u = &g->u[ui];
	for (int k = 0; k < u->ndeps; k++) {
		int d = u->deps[k];
		if (d != skip1 && d != skip2 && (at[d] < 0 || at[d] > limit))
			return false;
	}
	return true;
}

/* a unit with its prologue and epilogue (a GEMM) is placed as one */
static bool unit_ready(const nc_graph_t *g, const int *at, int ui, int limit)
{
	const nc_unit_t *u = &g->u[ui];
	int pro = u->pro1 - 1, epi = u->epi1 - 1;
	if (!ready_before(g, at, ui, limit, pro, -1))
		return false;
	if (pro >= 0 && !ready_before(g, at, pro, limit, -1, -1))
		return false;
	return epi < 0 || ready_before(g, at, epi, limit, ui, pro);
}

static int regroup(nc_graph_t *g)
{
	int *at = nc_malloc(sizeof(int) * (size_t)(g->nu + 1)); /* 1 + new position; 0 dead; -1 unplaced */
	if (!at)
		return nc_fail(g, NC_ERR_NOMEM, "out of memory");
	for (int i = 0; i < g->nu; i++)
		at[i] = g->u[i].dead ? 0 : -1, g->u[i].grp = 0;
	int np = 0;
	while (np < g->nsched) {
		int best = -1;
		for (int i = 0; i < g->nu; i++)
			if (at[i] < 0 && !g->u[i].is_epi && !g->u[i].is_pro && unit_ready(g, at, i, 1 << 30) &&
			    (best < 0 || g->u[i].first < g->u[best].first))
				best = i;
		if (best < 0) {
			free(at);
			return nc_fail(g, NC_ERR_INVALID, "internal error: the unit graph has a cycle");
		}
		int start = np, members = 0;
		for (int cur = best; cur >= 0; members++) {
			nc_unit_t *u = &g->u[cur];
			if (u->pro1) {
				nc_unit_t *l = &g->u[u->pro1 - 1];
				at[u->pro1 - 1] = np + 1, l->step = np, g->sched[np++] = u->pro1 - 1;
				at[cur] = np + 1, u->step = l->step, g->sched[np++] = cur;
			} else {
				at[cur] = np + 1, u->step = np, g->sched[np++] = cur;
			}
			if (u->epi1) {
				nc_unit_t *e = &g->u[u->epi1 - 1];
				at[u->epi1 - 1] = np + 1, e->step = u->step, g->sched[np++] = u->epi1 - 1;
			}
			if (!groupable(&g->u[best]))
				break;
			cur = -1;
			for (int i = 0; i < g->nu; i++)
				if (at[i] < 0 && groupable(&g->u[i]) && unit_ready(g, at, i, start) &&
				    (cur < 0 || g->u[i].first < g->u[cur].first))
					cur = i;
		}
		if (members > 1)
			for (int i = start; i < np; i++)
				g->u[g->sched[i]].grp = start + 1;
	}
	free(at);
	return 0;
}

/* Horizontal fusion: the units of one dependency group (regroup) inside one segment run as one
 * kernel: one parallel loop over the concatenation of their task ranges (nc_hz_run).  Fused kernels
 * contribute their tiles / rows / column tiles, a GEMM its row blocks (each block followed by its
 * epilogue's tiles), any other library call one task.  Like a multi-tensor foreach kernel (the update
 * of every parameter of an optimizer step) or a grouped GEMM (a linear layer's dX and dW GEMMs and its
 * bias gradient).  The members run concurrently, so every workspace buffer one of them touches is
 * kept live over the whole group. */
static void horizontal(nc_graph_t *g)
{
	g->nhz = 0;
	for (int p = 0; p < g->nsched;) {
		nc_unit_t *lead = &g->u[g->sched[p]];
		int q = p + 1, members = !lead->is_pro, pro = lead->is_pro;
		/* the span covers the group's members and the tails placed right after their owners (an
		 * epilogue, a GEMM after its prologue): also for a lone unit with an epilogue, whose
		 * epilogue runs nowhere else (an embedding's runs only on the group path) */
		if (lead->kind != U_EAGER && (lead->grp || lead->is_pro || lead->epi1))
			for (; q < g->nsched; q++) {
				const nc_unit_t *u = &g->u[g->sched[q]];
				bool tail = u->is_epi || (u->pro1 && g->u[u->pro1 - 1].step == u->step && u->pro1 - 1 == g->sched[q - 1]);
				if (u->seg != lead->seg || (!tail && (!lead->grp || u->grp != lead->grp)))
					break;
				members += !u->is_epi && !u->is_pro;
				pro |= u->is_pro;
			}
		if (lead->kind == U_LIB && lead->epi1 && strcmp(g->n[lead->nodes[0]].op, "mm"))
			pro = true; /* an embedding with its epilogue: only the group path runs it */
		if (pro && members <= 1) { /* a GEMM with its layer-norm prologue: launched as a group of one */
			lead->hsize = q - p;
			for (int i = p; i < q; i++)
				g->u[g->sched[i]].in_hz = true;
		}
		if (members > 1) {
			lead->hsize = q - p;
			for (int i = p; i < q; i++)
				g->u[g->sched[i]].in_hz = true;
			g->nhz += members - 1;
			nc_log(g, "horizontal: %d units (schedule %d..%d, leader unit %d) run as one kernel", members, p, q - 1, g->sched[p]);
			for (int i = 0; i < g->nws; i++) {
				nc_value_t *v = &g->v[g->ws[i]];
				if (v->def_step > p && v->def_step < q)
					v->def_step = p;
				if (v->last_step >= p && v->last_step < q - 1)
					v->last_step = q - 1;
			}
		}
		p = q;
	}
}

int nc_plan(nc_graph_t *g)
{
	int st = split_col_prologues(g);
	if (!st)
		st = nc_mutations(g);
	if (!st)
		st = schedule(g);
	if (!st)
		epilogues(g);
	if (!st)
		prologues(g);
	if (!st)
		st = regroup(g);
	if (!st)
		st = storage(g);
	if (!st)
		st = segments(g);
	g->nkernels = 0;
	for (int i = 0; i < g->nu; i++)
		if (g->u[i].kind != U_EAGER && !g->u[i].dead)
			g->u[i].kid = g->nkernels++;
	g->nepi = 0;
	for (int i = 0; i < g->nu; i++) {
		nc_unit_t *u = &g->u[i];
		if (!u->epi1)
			continue;
		nc_unit_t *e = &g->u[u->epi1 - 1];
		if (e->seg != u->seg) { /* cut by the pointer limit: run it as its own kernel */
			u->epi1 = 0;
			e->is_epi = false;
		} else {
			g->nepi++;
		}
	}
	g->npro = 0;
	for (int i = 0; i < g->nu; i++) {
		nc_unit_t *u = &g->u[i];
		if (!u->pro1)
			continue;
		nc_unit_t *l = &g->u[u->pro1 - 1];
		if (l->seg != u->seg) {
			u->pro1 = 0;
			l->is_pro = false;
		} else {
			g->npro++;
		}
	}
	if (!st)
		horizontal(g);
	return st;
}
