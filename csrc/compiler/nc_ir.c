/* nc_ir.c - arena, string builder, dtypes, the IR parser (grammar in docs/compiler.md), the version
 * and the unit primitives the passes share. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nc_impl.h"

/* ---- heap allocation, with fault injection for the tests ------------------------------------------ */
static _Atomic long fault_countdown; /* > 0: the allocation that brings it to 0 fails */

void nc_fault_after(long n) { fault_countdown = n > 0 ? n : 0; }

static bool fault_now(void)
{
	long c = fault_countdown;
	while (c > 0 && !__atomic_compare_exchange_n((long *)&fault_countdown, &c, c - 1, false, __ATOMIC_RELAXED,
						     __ATOMIC_RELAXED))
		;
	return c == 1;
}

void *nc_malloc(size_t n) { return fault_now() ? NULL : malloc(n); }
void *nc_calloc(size_t n, size_t size) { return fault_now() ? NULL : calloc(n, size); }
void *nc_realloc(void *p, size_t n) { return fault_now() ? NULL : realloc(p, n); }

char *nc_strdup_heap(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = nc_malloc(n);
	if (p)
		memcpy(p, s, n);
	return p;
}

/* ---- arena: blocks freed all at once with the graph ------------------------------------------------- */
struct nc_block {
	nc_block_t *next;
	size_t used, cap;
	_Alignas(16) char data[];
};

void *nc_alloc(nc_arena_t *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	nc_block_t *b = a->head;
	if (!b || b->used + n > b->cap) {
		size_t cap = n > 65536 ? n : 65536;
		b = nc_malloc(sizeof *b + cap);
		if (!b) {
			a->oom = true;
			return NULL;
		}
		b->next = a->head, b->used = 0, b->cap = cap;
		a->head = b;
	}
	void *p = b->data + b->used;
	b->used += n;
	memset(p, 0, n);
	return p;
}

char *nc_strdup(nc_arena_t *a, const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = nc_alloc(a, n);
	if (p)
		memcpy(p, s, n);
	return p;
}

void nc_arena_free(nc_arena_t *a)
{
	while (a->head) {
		nc_block_t *b = a->head;
		a->head = b->next;
		free(b);
	}
}

/* ---- string builder: appends; on allocation failure sets oom and drops text ------------------------ */
void sb_printf(nc_sb_t *sb, const char *fmt, ...)
{
	if (sb->oom)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = sb->cap - sb->len;
		int n = vsnprintf(sb->buf ? sb->buf + sb->len : NULL, sb->buf ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			sb->oom = true;
			return;
		}
		if (sb->buf && (size_t)n < room) {
			sb->len += (size_t)n;
			return;
		}
		size_t cap = sb->cap ? sb->cap : 4096;
		while (cap < sb->len + (size_t)n + 1)
			cap *= 2;
		char *p = nc_realloc(sb->buf, cap);
		if (!p) {
			sb->oom = true;
			return;
		}
		sb->buf = p, sb->cap = cap;
	}
}

void sb_free(nc_sb_t *sb)
{
	free(sb->buf);
	memset(sb, 0, sizeof *sb);
}

/* ---- dtypes --------------------------------------------------------------------------------------- */
static const char *const dt_names[NC_NDTYPES] = {"bool", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"};
static const int dt_sizes[NC_NDTYPES] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
static const char *const dt_storage[NC_NDTYPES] = {"uint8_t", "uint8_t", "int8_t", "int16_t", "int32_t", "int64_t",
						   "uint16_t", "uint16_t", "float", "double"};
static const char *const dt_reg[NC_NDTYPES] = {"uint8_t", "uint8_t", "int8_t", "int16_t", "int32_t", "int64_t",
					       "float", "float", "float", "double"};

int nc_dtype_parse(const char *s)
{
	for (int i = 0; i < NC_NDTYPES; i++)
		if (!strcmp(s, dt_names[i]))
			return i;
	return -1;
}
const char *nc_dtype_name(int dt) { return dt >= 0 && dt < NC_NDTYPES ? dt_names[dt] : "?"; }
int nc_dtype_size(int dt) { return dt >= 0 && dt < NC_NDTYPES ? dt_sizes[dt] : 0; }
bool nc_dtype_is_float(int dt) { return dt == NC_F16 || dt == NC_BF16 || dt == NC_F32 || dt == NC_F64; }
const char *nc_ctype_storage(int dt) { return dt_storage[dt]; }
const char *nc_ctype_reg(int dt) { return dt_reg[dt]; }

/* ---- errors and log -------------------------------------------------------------------------------- */
int nc_fail(nc_graph_t *g, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g->err, sizeof g->err, fmt, ap);
	va_end(ap);
	return status;
}

void nc_log(nc_graph_t *g, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	sb_printf(&g->log, "%s\n", line);
}

const char *nc_version(void) { return NC_VERSION; }

bool nc_streq(const char *a, const char *b) { return a && b && !strcmp(a, b); }
bool nc_is_one(const char *e) { return nc_streq(e, "1"); }
bool nc_is_zero(const char *e) { return nc_streq(e, "0"); }

/* ---- tokenizer ------------------------------------------------------------------------------------ */
typedef struct {
	const char *p;
	int line;
	char tok[1024];
	nc_graph_t *g;
	int err;
} lexer_t;

static const char *next(lexer_t *L)
{
	while (*L->p == ' ' || *L->p == '\t' || *L->p == '\n' || *L->p == '\r') {
		if (*L->p == '\n')
			L->line++;
		L->p++;
	}
	size_t n = 0;
	while (*L->p && *L->p != ' ' && *L->p != '\t' && *L->p != '\n' && *L->p != '\r') {
		if (n + 1 < sizeof L->tok)
			L->tok[n++] = *L->p;
		L->p++;
	}
	L->tok[n] = 0;
	if (!n && !L->err)
		L->err = nc_fail(L->g, NC_ERR_PARSE, "IR line %d: unexpected end of input", L->line);
	return L->tok;
}

static int64_t next_int(lexer_t *L, int64_t lo, int64_t hi)
{
	const char *t = next(L);
	char *end;
	errno = 0;
	long long v = strtoll(t, &end, 10);
	if (L->err)
		return lo;
	if (*end || errno || v < lo || v > hi) {
		L->err = nc_fail(L->g, NC_ERR_PARSE, "IR line %d: expected an integer in [%lld, %lld], got '%s'", L->line,
				 (long long)lo, (long long)hi, t);
		return lo;
	}
	return v;
}

static const char *next_str(lexer_t *L)
{
	const char *t = next(L);
	char *s = nc_strdup(&L->g->A, t);
	if (!s && !L->err)
		L->err = nc_fail(L->g, NC_ERR_NOMEM, "out of memory");
	return s ? s : "";
}

static void expect(lexer_t *L, const char *kw)
{
	const char *t = next(L);
	if (!L->err && strcmp(t, kw))
		L->err = nc_fail(L->g, NC_ERR_PARSE, "IR line %d: expected '%s', got '%s'", L->line, kw, t);
}

static int count_lines(const char *ir, char c)
{
	int n = 0;
	for (const char *p = ir; *p; p++)
		if ((p == ir || p[-1] == '\n') && p[0] == c && p[1] == ' ')
			n++;
	return n;
}

static int parse_operand(lexer_t *L, nc_opnd_t *o)
{
	const char *t = next(L);
	if (L->err)
		return L->err;
	nc_graph_t *g = L->g;
	char *end;
	switch (t[0]) {
	case '-':
		if (!t[1]) {
			o->kind = 'v', o->v = -1;
			return 0;
		}
		break;
	case 'v':
		o->kind = 'v';
		o->v = (int)strtol(t + 1, &end, 10);
		if (*end || o->v < 0 || o->v >= g->nv)
			break;
		return 0;
	case 'f':
		o->kind = 'f';
		o->ftext = nc_strdup(&g->A, t + 1);
		o->f = strtod(t + 1, &end);
		if (*end)
			break;
		return 0;
	case 'i':
		o->kind = 'i';
		errno = 0;
		o->i = strtoll(t + 1, &end, 10);
		if (*end || errno)
			break;
		return 0;
	case 'e':
		o->kind = 'e';
		o->e = nc_strdup(&g->A, t + 1);
		return 0;
	case 'd': /* a double passed at launch time in symbol slot i (a CPU scalar tensor's value) */
		o->kind = 'd';
		o->i = strtoll(t + 1, &end, 10);
		if (*end || o->i < 0 || o->i >= g->nsyms)
			break;
		return 0;
	}
	return L->err = nc_fail(g, NC_ERR_PARSE, "IR line %d: bad operand '%s'", L->line, t);
}

static void add_user(nc_graph_t *g, int value, int node)
{
	nc_value_t *v = &g->v[value];
	for (int i = 0; i < v->nusers; i++)
		if (v->users[i] == node)
			return;
	if (v->nusers == v->users_cap) {
		int cap = v->users_cap ? 2 * v->users_cap : 4;
		int *u = nc_alloc(&g->A, sizeof(int) * (size_t)cap);
		if (!u)
			return;
		if (v->nusers)
			memcpy(u, v->users, sizeof(int) * (size_t)v->nusers);
		v->users = u, v->users_cap = cap;
	}
	v->users[v->nusers++] = node;
}

static void parse_value(lexer_t *L)
{
	nc_graph_t *g = L->g;
	int id = (int)next_int(L, 0, g->nv - 1);
	nc_value_t *v = &g->v[id];
	if (v->size[0] || v->off) {
		if (!L->err)
			L->err = nc_fail(g, NC_ERR_PARSE, "IR line %d: value %d defined twice", L->line, id);
		return;
	}
	v->id = id;
	v->dtype = nc_dtype_parse(next(L));
	if (v->dtype < 0 && !L->err)
		L->err = nc_fail(g, NC_ERR_PARSE, "IR line %d: unknown dtype '%s'", L->line, L->tok);
	v->rank = (int)next_int(L, 0, NC_MAX_RANK);
	for (int d = 0; d < v->rank; d++)
		v->size[d] = next_str(L);
	for (int d = 0; d < v->rank; d++)
		v->stride[d] = next_str(L);
	v->off = next_str(L);
	for (int d = 0; d <= v->rank; d++)
		v->sp[d] = next_str(L);
	for (int d = 0; d <= v->rank; d++)
		v->pp[d] = next_str(L);
	for (int d = 0; d <= v->rank; d++)
		v->lin[d] = next_str(L);
	v->on_device = !strcmp(next(L), "n");
	v->producer = -1, v->view_of = -1, v->root = id, v->ws_index = -1, v->into = -1;
}

static void parse_node(lexer_t *L, int index)
{
	nc_graph_t *g = L->g;
	nc_node_t *n = &g->n[index];
	n->id = (int)next_int(L, 0, g->nn - 1);
	n->index = index;
	n->unit = -1;
	const char *k = next(L);
	n->kind = k[0];
	if (!L->err && (k[1] || !strchr("VPRLE", k[0])))
		L->err = nc_fail(g, NC_ERR_PARSE, "IR line %d: unknown node kind '%s'", L->line, k);
	n->op = next_str(L);
	n->nout = (int)next_int(L, 0, 64);
	n->outs = nc_alloc(&g->A, sizeof(int) * (size_t)(n->nout + 1));
	for (int i = 0; i < n->nout && !L->err && n->outs; i++) {
		const char *t = next(L);
		n->outs[i] = !strcmp(t, "-") ? -1 : (int)strtol(t, NULL, 10);
		if (n->outs[i] >= g->nv || n->outs[i] < -1)
			L->err = nc_fail(g, NC_ERR_PARSE, "IR line %d: bad output value '%s'", L->line, t);
	}
	n->nin = (int)next_int(L, 0, 4096);
	n->ins = nc_alloc(&g->A, sizeof(nc_opnd_t) * (size_t)(n->nin + 1));
	for (int i = 0; i < n->nin && !L->err && n->ins; i++)
		parse_operand(L, &n->ins[i]);
	n->nattr = (int)next_int(L, 0, 64);
	n->attrs = nc_alloc(&g->A, sizeof(char *) * (size_t)(n->nattr + 1));
	for (int i = 0; i < n->nattr && !L->err && n->attrs; i++)
		n->attrs[i] = next_str(L);
	if (!n->outs || !n->ins || !n->attrs) {
		L->err = nc_fail(g, NC_ERR_NOMEM, "out of memory");
		return;
	}
	if (L->err)
		return;
	n->barrier = n->kind == 'E' && !strcmp(n->op, "barrier");
	if (n->kind == 'P' || n->kind == 'R') {
		if (n->nattr < 1 || (n->cdtype = nc_dtype_parse(n->attrs[0])) < 0)
			L->err = nc_fail(g, NC_ERR_PARSE, "IR line %d: node %d needs a dtype attribute", L->line, n->id);
		if (n->nout != 1 || n->outs[0] < 0)
			L->err = nc_fail(g, NC_ERR_INVALID, "IR line %d: node %d must have one output", L->line, n->id);
	}
	if (n->kind == 'R' && !L->err) {
		if (n->nattr < 3 || n->nin != 1 || n->ins[0].kind != 'v' || n->ins[0].v < 0) {
			L->err = nc_fail(g, NC_ERR_INVALID, "IR line %d: bad reduction node %d", L->line, n->id);
			return;
		}
		n->keepdim = atoi(n->attrs[1]) != 0;
		n->ndims = atoi(n->attrs[2]);
		if (n->ndims < 0 || n->ndims > NC_MAX_RANK || n->nattr != 3 + n->ndims) {
			L->err = nc_fail(g, NC_ERR_INVALID, "IR line %d: bad reduction dims", L->line);
			return;
		}
		for (int i = 0; i < n->ndims; i++)
			n->dims[i] = atoi(n->attrs[3 + i]);
	}
	if (n->kind == 'V' && (n->nin != 1 || n->nout != 1 || n->ins[0].kind != 'v' || n->ins[0].v < 0 || n->outs[0] < 0 ||
			       n->nattr != 1))
		L->err = nc_fail(g, NC_ERR_INVALID, "IR line %d: bad view node %d", L->line, n->id);
}

/* ---- validation: the passes after parsing may then trust the structure --------------------------- */

static int rank_of(const nc_graph_t *g, int value) { return value >= 0 ? g->v[value].rank : -1; }
static int in_at(const nc_node_t *n, int i) { return i < n->nin && n->ins[i].kind == 'v' ? n->ins[i].v : -2; }
static int out_at(const nc_node_t *n, int i) { return i < n->nout ? n->outs[i] : -2; }

/* library node: operand/output presence and ranks per op */
static bool lib_ok(const nc_graph_t *g, const nc_node_t *n)
{
	const char *op = n->op;
	int a = in_at(n, 0), b = in_at(n, 1), o = out_at(n, 0);
	if (!strcmp(op, "mm") || !strcmp(op, "bmm")) {
		int r = op[0] == 'b' ? 3 : 2;
		/* mm may take a third operand: addmm's bias row (1-D, N or 1 elements), added inside the GEMM */
		if (r == 2 && n->nin == 3)
			return rank_of(g, a) == 2 && rank_of(g, b) == 2 && rank_of(g, o) == 2 && rank_of(g, in_at(n, 2)) == 1;
		return n->nin == 2 && rank_of(g, a) == r && rank_of(g, b) == r && rank_of(g, o) == r;
	}
	if (!strcmp(op, "cat")) {
		if (n->nin < 1 || n->nattr != 1 || o < 0 || g->v[o].rank < 1)
			return false;
		int dim = atoi(n->attrs[0]);
		if (dim < 0 || dim >= g->v[o].rank)
			return false;
		for (int i = 0; i < n->nin; i++)
			if (rank_of(g, in_at(n, i)) != g->v[o].rank)
				return false;
		return true;
	}
	if (!strcmp(op, "softmax") || !strcmp(op, "log_softmax")) {
		int dim = n->nattr == 1 ? atoi(n->attrs[0]) : -1;
		return n->nin == 1 && a >= 0 && o >= 0 && dim >= 0 && dim < (g->v[a].rank ? g->v[a].rank : 1);
	}
	if (!strcmp(op, "layernorm") || !strcmp(op, "layernorm_bwd")) {
		bool bwd = op[9] == '_';
		int x = bwd ? b : a;
		int nn = n->nattr >= 1 ? atoi(n->attrs[0]) : -1;
		if (x < 0 || nn < 0 || nn > g->v[x].rank || n->nout != 3)
			return false;
		if (!bwd)
			return n->nin == 3 && n->nattr == 2 && o >= 0 && out_at(n, 1) >= 0 && out_at(n, 2) >= 0;
		return n->nin == 6 && a >= 0 && in_at(n, 2) >= 0 && in_at(n, 3) >= 0;
	}
	if (!strcmp(op, "embedding"))
		return n->nin == 2 && rank_of(g, a) == 2 && b >= 0 && o >= 0;
	if (!strcmp(op, "embedding_bwd"))
		return n->nin == 2 && a >= 0 && b >= 0 && rank_of(g, o) == 2 && n->nattr == 2;
	if (!strcmp(op, "nll")) {
		int r = rank_of(g, a);
		return n->nin == 3 && (r == 1 || r == 2) && b >= 0 && o >= 0 && out_at(n, 1) >= 0 && n->nattr == 2;
	}
	if (!strcmp(op, "nll_bwd")) {
		int r = rank_of(g, b);
		return n->nin == 5 && a >= 0 && (r == 1 || r == 2) && in_at(n, 2) >= 0 && in_at(n, 4) >= 0 && o >= 0 &&
		       n->nattr == 2;
	}
	if (!strcmp(op, "attention")) {
		int m = in_at(n, 3);
		return n->nin == 4 && rank_of(g, a) == 4 && rank_of(g, b) == 4 && rank_of(g, in_at(n, 2)) == 4 &&
		       (m == -1 || (m >= 0 && g->v[m].rank <= 4)) && rank_of(g, o) == 4 && out_at(n, 1) >= 0 && n->nattr == 2;
	}
	if (!strcmp(op, "attention_bwd")) {
		int m = in_at(n, 4);
		for (int i = 0; i < 4; i++)
			if (rank_of(g, in_at(n, i)) != 4)
				return false;
		for (int i = 0; i < 3; i++)
			if (rank_of(g, out_at(n, i)) != 4)
				return false;
		return n->nin == 7 && (m == -1 || (m >= 0 && g->v[m].rank <= 4)) && rank_of(g, in_at(n, 5)) == 4 &&
		       in_at(n, 6) >= 0 && n->nattr == 2;
	}
	return false;
}

static int validate(nc_graph_t *g)
{
	for (int i = 0; i < g->nn; i++) {
		const nc_node_t *n = &g->n[i];
		if (n->kind == 'L' && !lib_ok(g, n))
			return nc_fail(g, NC_ERR_INVALID, "IR: library node %d (%s) has bad operands", n->id, n->op);
		if (n->kind == 'P' || n->kind == 'R' || n->kind == 'V')
			for (int k = 0; k < n->nin; k++)
				if (n->ins[k].kind == 'v' && n->ins[k].v < 0)
					return nc_fail(g, NC_ERR_INVALID, "IR: node %d has an absent operand", n->id);
		if (n->kind == 'R') {
			const nc_value_t *in = &g->v[n->ins[0].v];
			for (int k = 0; k < n->ndims; k++)
				if (n->dims[k] < 0 || n->dims[k] >= (in->rank ? in->rank : 1))
					return nc_fail(g, NC_ERR_INVALID, "IR: reduction %d: dim %d out of range", n->id, n->dims[k]);
		}
		if (n->kind == 'V' && g->v[n->outs[0]].dtype != g->v[n->ins[0].v].dtype)
			return nc_fail(g, NC_ERR_INVALID, "IR: view %d changes the dtype", n->id);
	}
	for (int i = 0; i < g->nv; i++)
		if (g->v[i].producer < 0 && !g->v[i].is_input && g->v[i].nusers)
			return nc_fail(g, NC_ERR_INVALID, "IR: value %d is read but neither an input nor produced", i);
	return 0;
}

static int finish(nc_graph_t *g)
{
	for (int i = 0; i < g->nn; i++) {
		nc_node_t *n = &g->n[i];
		if (n->id != i)
			return nc_fail(g, NC_ERR_INVALID, "IR: node ids must be 0..%d in order (node %d at %d)", g->nn - 1, n->id, i);
		for (int k = 0; k < n->nin; k++) { /* operands first: a node cannot read its own output */
			const nc_opnd_t *o = &n->ins[k];
			if (o->kind != 'v' || o->v < 0)
				continue;
			if (g->v[o->v].producer < 0 && !g->v[o->v].is_input)
				return nc_fail(g, NC_ERR_INVALID, "IR: node %d reads value %d before it is produced", i, o->v);
			add_user(g, o->v, i);
		}
		for (int k = 0; k < n->nout; k++) {
			int o = n->outs[k];
			if (o < 0)
				continue;
			if (g->v[o].producer >= 0 || g->v[o].is_input)
				return nc_fail(g, NC_ERR_INVALID, "IR: value %d has two producers", o);
			g->v[o].producer = i;
		}
		if (n->kind == 'V') {
			nc_value_t *out = &g->v[n->outs[0]];
			out->view_of = n->ins[0].v;
			out->reshape = !strcmp(n->attrs[0], "1");
			out->root = g->v[n->ins[0].v].root;
		}
		if (n->kind == 'P') {
			/* free: no tensor operand other than free values, and not index-dependent */
			bool f = strcmp(n->op, "arange") != 0;
			for (int k = 0; k < n->nin && f; k++) {
				const nc_opnd_t *o = &n->ins[k];
				if (o->kind == 'v') {
					int r = g->v[o->v].root, p = g->v[r].producer;
					f = p >= 0 && g->n[p].free;
				}
			}
			n->free = f;
		}
	}
	if (g->A.oom)
		return nc_fail(g, NC_ERR_NOMEM, "out of memory");
	return validate(g);
}

int nc_parse(nc_graph_t *g, const char *ir)
{
	lexer_t L = {.p = ir, .line = 1, .g = g};
	g->nv = count_lines(ir, 'v');
	g->nn = count_lines(ir, 'n');
	g->v = nc_alloc(&g->A, sizeof(nc_value_t) * (size_t)(g->nv + 1));
	g->n = nc_alloc(&g->A, sizeof(nc_node_t) * (size_t)(g->nn + 1));
	if (!g->v || !g->n)
		return nc_fail(g, NC_ERR_NOMEM, "out of memory");
	expect(&L, "ncir");
	if (next_int(&L, 1, 1) != 1 || L.err)
		return L.err ? L.err : nc_fail(g, NC_ERR_PARSE, "IR: unsupported version");
	expect(&L, "syms");
	g->nsyms = (int)next_int(&L, 0, 200);
	int nvals = 0, nnodes = 0;
	while (!L.err) {
		const char *t = next(&L);
		if (L.err)
			break;
		if (!strcmp(t, "end"))
			break;
		if (!strcmp(t, "v")) {
			parse_value(&L);
			nvals++;
		} else if (!strcmp(t, "n")) {
			parse_node(&L, nnodes++);
		} else if (!strcmp(t, "mut")) { /* mut <n> (<value> <input>)*n: write value into the input */
			int n = (int)next_int(&L, 0, g->nv);
			for (int i = 0; i < n && !L.err; i++) {
				int v = (int)next_int(&L, 0, g->nv - 1), dst = (int)next_int(&L, 0, g->nv - 1);
				if (!L.err)
					g->v[v].into = dst;
			}
		} else if (!strcmp(t, "profile")) {
			g->profile = next_int(&L, 0, 1) != 0;
		} else if (!strcmp(t, "in") || !strcmp(t, "out")) {
			bool in = t[0] == 'i';
			/* a graph may return one value several times (the backward of a + b returns the incoming
			 * gradient twice): outputs may repeat, inputs may not */
			int n = (int)next_int(&L, 0, in ? g->nv : (int64_t)1 << 24);
			int *ids = nc_alloc(&g->A, sizeof(int) * (size_t)(n + 1));
			if (!ids)
				return nc_fail(g, NC_ERR_NOMEM, "out of memory");
			for (int i = 0; i < n && !L.err; i++) {
				ids[i] = (int)next_int(&L, 0, g->nv - 1);
				if (in)
					g->v[ids[i]].is_input = true;
				else
					g->v[ids[i]].is_output = true;
			}
			if (in)
				g->inputs = ids, g->nin = n;
			else
				g->outputs = ids, g->nout = n;
		} else {
			return nc_fail(g, NC_ERR_PARSE, "IR line %d: unknown record '%s'", L.line, t);
		}
	}
	if (L.err)
		return L.err;
	if (nvals != g->nv || nnodes != g->nn)
		return nc_fail(g, NC_ERR_PARSE, "IR: record count mismatch");
	return finish(g);
}

/* ---- units (the fusion, planning and emission passes build and extend them) ---------------------- */

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
