/* nc_emit.c - C code generation for fused units, segments and the workspace plan.
 *
 * A fused unit covers R rows of L elements.  Every FULL value of the unit is indexed by (r, j), the
 * row-major flat index r*L + j of its own shape (reshapes keep it), so a value needs no index
 * arithmetic inside the row: a load from memory is base[a + j*s] where the row offset a is computed
 * once per row (or tile) and s is 1 on contiguous paths, 0 for a broadcast, or a constant stride.
 * Only an operand whose inner dims are not linear in j (a transposed broadcast, say) decomposes j per
 * element.  Inner loops carry `#pragma omp simd` (the frontend compiles with -fopenmp-simd, no OpenMP
 * runtime), with reduction clauses for row reductions.
 *
 * Kernel shapes:
 *   PW   parallel over tiles (row r, chunk of NC_CHUNK elements of the row)
 *   ROW  parallel over rows; pass p accumulates the reductions whose inputs need p earlier
 *        reductions (softmax: max, then sum of exp, then the normalized output in a final pass)
 *   COL  parallel over (O, tile of nc_colw(L) columns); loops over the R rows, accumulating per column
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nc_impl.h"

#define NC_EXPR 4096

static _Thread_local bool truncated; /* an expression did not fit its buffer: fail the compile */

static void fmt(char *out, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *out, size_t n, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	int r = vsnprintf(out, n, f, ap);
	va_end(ap);
	if (r < 0 || (size_t)r >= n)
		truncated = true;
}

typedef struct {
	nc_graph_t *g;
	nc_sb_t *s;
	int ui;
	const nc_unit_t *u;
	const char *R, *L;
	int *level;   /* per value (roots of this unit) */
	bool *needed; /* per node, for the pass being emitted */
	int npass;    /* number of reduction passes */
	int pass;     /* pass being emitted (names of row offsets) */
	const char *ridx, *cidx; /* the row index of FULL elements, the index of COL values */
	nc_sb_t *pre; /* where row offsets go (before the inner loop); NULL: in place */
	bool pused[NC_MAX_PTRS + 32]; /* segment pointers the kernel reads or writes (P<i>_ locals) */
} kc_t;

/* ---- small helpers -------------------------------------------------------------------------------- */

static bool in_unit(const kc_t *k, int value)
{
	bool tr;
	return nc_root_producer_unit(k->g, value, &tr) == k->ui && tr;
}

static bool is_free(const nc_graph_t *g, int value)
{
	int p = g->v[g->v[value].root].producer;
	return p >= 0 && g->n[p].free;
}

static int ptr_index(const nc_graph_t *g, int seg, int root)
{
	const nc_seg_t *s = &g->seg[seg];
	for (int i = 0; i < s->nroots; i++)
		if (s->roots[i] == root)
			return i;
	return -1;
}

static const char *reg_of(int dt) { return nc_ctype_reg(dt); }

/* compute type of a dtype: bf16/f16 compute in float */
static const char *ctype(int dt) { return nc_ctype_reg(dt); }

static bool is_double(int dt) { return dt == NC_F64; }

/* expression X (of register type for dtype from) as compute dtype to */
static void conv(char *out, size_t n, const char *x, int from, int to)
{
	(void)from;
	if (to == NC_BOOL)
		fmt(out, n, "((%s) != 0)", x);
	else
		fmt(out, n, "((%s)(%s))", ctype(to), x);
}

/* a computed expression (in compute dtype cd) as a register of dtype dt */
static void to_reg(char *out, size_t n, const char *x, int cd, int dt)
{
	(void)cd;
	switch (dt) {
	case NC_BOOL: fmt(out, n, "((uint8_t)((%s) != 0))", x); break;
	case NC_BF16: fmt(out, n, "nc_rbf((float)(%s))", x); break;
	case NC_F16: fmt(out, n, "nc_rh((float)(%s))", x); break;
	default: fmt(out, n, "((%s)(%s))", reg_of(dt), x); break;
	}
}

static void load_conv(char *out, size_t n, const char *mem, int dt)
{
	switch (dt) {
	case NC_BF16: fmt(out, n, "nc_bf2f(%s)", mem); break;
	case NC_F16: fmt(out, n, "nc_h2f(%s)", mem); break;
	default: fmt(out, n, "%s", mem); break;
	}
}

static void store_conv(char *out, size_t n, const char *x, int dt)
{
	switch (dt) {
	case NC_BF16: fmt(out, n, "nc_f2bf(%s)", x); break;
	case NC_F16: fmt(out, n, "nc_f2h(%s)", x); break;
	case NC_BOOL: fmt(out, n, "(uint8_t)((%s) != 0)", x); break;
	default: fmt(out, n, "(%s)(%s)", nc_ctype_storage(dt), x); break;
	}
}

/* ---- accesses: where element (r, j) / r / j of a value lives ---------------------------------------- */

/* effective stride of operand o broadcast into shape S, for dim d of S */
static const char *eff_stride(const nc_value_t *o, const nc_value_t *S, int d)
{
	int od = d - (S->rank - o->rank);
	if (od < 0)
		return "0";
	if (nc_is_one(o->size[od]) && !nc_is_one(S->size[d]))
		return "0";
	return o->stride[od];
}

/* Emit `int64_t <name> = <offset of the first element of row `idx`>` for a FULL access, and return in
 * inner (static buffer) the stride of j, or NULL if j must be decomposed (general path). */
static const char *full_access(kc_t *k, const char *name, const nc_value_t *o, const nc_value_t *S, const char *L,
			       const char *idx, int indent)
{
	nc_sb_t *s = k->pre ? k->pre : k->s;
	if (k->pre)
		indent = 16;
	static _Thread_local char inner[NC_EXPR];
	int ks = nc_sp_index(S, L);
	if (ks < 0)
		ks = S->rank; /* cannot happen for members; keeps the code defined */
	int shift = S->rank - o->rank;
	if (nc_streq(o->sp[0], S->sp[0]) && !nc_streq(o->lin[0], "x")) {
		sb_printf(s, "%*sconst int64_t %s = (%s) + (%s) * ((%s) * (%s));\n", indent, "", name, o->off, idx, o->lin[0], L);
		fmt(inner, sizeof inner, "%s", o->lin[0]);
		return inner;
	}
	/* row part */
	bool row_bcast = true;
	for (int d = 0; d < ks; d++)
		if (!nc_is_one(S->size[d]) && !nc_is_zero(eff_stride(o, S, d)))
			row_bcast = false;
	if (row_bcast) {
		sb_printf(s, "%*sconst int64_t %s = (%s);\n", indent, "", name, o->off);
	} else {
		sb_printf(s, "%*sint64_t %s = (%s);\n%*s{\n%*sint64_t q = %s;\n", indent, "", name, o->off, indent, "", indent + 8,
			  "", idx);
		int outer = -1;
		for (int d = 0; d < ks; d++)
			if (!nc_is_one(S->size[d])) {
				outer = d;
				break;
			}
		for (int d = ks - 1; d >= 0; d--) {
			if (nc_is_one(S->size[d]))
				continue;
			const char *st = eff_stride(o, S, d);
			if (d == outer) {
				if (!nc_is_zero(st))
					sb_printf(s, "%*s%s += q * (%s);\n", indent + 8, "", name, st);
			} else {
				if (!nc_is_zero(st))
					sb_printf(s, "%*s%s += (q %% (%s)) * (%s);\n", indent + 8, "", name, S->size[d], st);
				sb_printf(s, "%*sq /= (%s);\n", indent + 8, "", S->size[d]);
			}
		}
		sb_printf(s, "%*s}\n", indent, "");
	}
	/* inner part */
	bool all0 = true, none0 = true;
	for (int d = ks; d < S->rank; d++) {
		if (nc_is_one(S->size[d]))
			continue;
		if (nc_is_zero(eff_stride(o, S, d)))
			none0 = false;
		else
			all0 = false;
	}
	if (all0) {
		fmt(inner, sizeof inner, "0");
		return inner;
	}
	if (none0 && ks - shift >= 0 && !nc_streq(o->lin[ks - shift], "x")) {
		fmt(inner, sizeof inner, "%s", o->lin[ks - shift]);
		return inner;
	}
	return NULL;
}

/* index expression (into buf) of element j of a FULL access with row offset `name` */
static void full_index(kc_t *k, char *buf, size_t n, const char *name, const char *inner, const nc_value_t *o,
		       const nc_value_t *S, const char *L, const char *var, int indent)
{
	if (inner) {
		if (nc_is_zero(inner))
			fmt(buf, n, "%s", name);
		else if (nc_is_one(inner))
			fmt(buf, n, "%s + j", name);
		else
			fmt(buf, n, "%s + j * (%s)", name, inner);
		return;
	}
	/* general: decompose j over the inner dims */
	int ks = nc_sp_index(S, L);
	nc_sb_t *s = k->s;
	sb_printf(s, "%*sint64_t %s_j = %s;\n%*s{\n%*sint64_t q = j;\n", indent, "", var, name, indent, "", indent + 8, "");
	for (int d = S->rank - 1; d >= ks; d--) {
		if (nc_is_one(S->size[d]))
			continue;
		const char *st = eff_stride(o, S, d);
		if (!nc_is_zero(st))
			sb_printf(s, "%*s%s_j += (q %% (%s)) * (%s);\n", indent + 8, "", var, S->size[d], st);
		sb_printf(s, "%*sq /= (%s);\n", indent + 8, "", S->size[d]);
	}
	sb_printf(s, "%*s}\n", indent, "");
	fmt(buf, n, "%s_j", var);
}

/* Emit the offset (into variable `name`) of element `idx` of shape S (flat, all dims) of operand o. */
static void whole_access(kc_t *k, const char *name, const nc_value_t *o, const nc_value_t *S, const char *idx, int indent)
{
	nc_sb_t *s = k->s;
	if (nc_streq(o->sp[0], S->sp[0]) && !nc_streq(o->lin[0], "x")) {
		sb_printf(s, "%*sconst int64_t %s = (%s) + (%s) * (%s);\n", indent, "", name, o->off, idx, o->lin[0]);
		return;
	}
	sb_printf(s, "%*sint64_t %s = (%s);\n%*s{\n%*sint64_t q = %s;\n", indent, "", name, o->off, indent, "", indent + 8, "",
		  idx);
	for (int d = S->rank - 1; d >= 0; d--) {
		if (nc_is_one(S->size[d]))
			continue;
		const char *st = eff_stride(o, S, d);
		if (!nc_is_zero(st))
			sb_printf(s, "%*s%s += (q %% (%s)) * (%s);\n", indent + 8, "", name, S->size[d], st);
		sb_printf(s, "%*sq /= (%s);\n", indent + 8, "", S->size[d]);
	}
	sb_printf(s, "%*s}\n", indent, "");
}

/* ---- pointwise expressions ------------------------------------------------------------------------- */

/* A float pointwise op is a call of the eager kernels' scalar formula (pointwise_scalar.inc, pasted
 * into the prelude as pwf_scalar / pwd_scalar) with a constant op, which the C compiler folds to that
 * formula: compiled and eager results agree bit for bit.  Each entry names the nk op and which
 * operand of the IR node (0..3; Z: zero, I: one) goes to each argument x, y, z, a (the op's scalar,
 * e.g. alpha); ia is the op's integer flag. */
enum { Z = -1, I = -2 };
typedef struct {
	const char *name, *nk;
	int nin;
	signed char x, y, z, a;
	int ia;
} pw_formula_t;
static const pw_formula_t formulas[] = {
	{"add", "NK_OP_ADD", 2, 0, 1, Z, I, 0}, {"sub", "NK_OP_SUB", 2, 0, 1, Z, I, 0},
	{"add_alpha", "NK_OP_ADD", 3, 0, 1, Z, 2, 0}, {"sub_alpha", "NK_OP_SUB", 3, 0, 1, Z, 2, 0},
	{"rsub_alpha", "NK_OP_SUB", 3, 1, 0, Z, 2, 0}, /* y - alpha * x */
	{"mul", "NK_OP_MUL", 2, 0, 1, Z, Z, 0}, {"div", "NK_OP_DIV", 2, 0, 1, Z, Z, 0},
	{"div_trunc", "NK_OP_DIV_TRUNC", 2, 0, 1, Z, Z, 0}, {"div_floor", "NK_OP_DIV_FLOOR", 2, 0, 1, Z, Z, 0},
	{"remainder", "NK_OP_REMAINDER", 2, 0, 1, Z, Z, 0}, {"fmod", "NK_OP_FMOD", 2, 0, 1, Z, Z, 0},
	{"pow", "NK_OP_POW", 2, 0, 1, Z, Z, 0}, {"atan2", "NK_OP_ATAN2", 2, 0, 1, Z, Z, 0},
	{"hypot", "NK_OP_HYPOT", 2, 0, 1, Z, Z, 0}, {"copysign", "NK_OP_COPYSIGN", 2, 0, 1, Z, Z, 0},
	{"maximum", "NK_OP_MAXIMUM", 2, 0, 1, Z, Z, 0}, {"minimum", "NK_OP_MINIMUM", 2, 0, 1, Z, Z, 0},
	{"fmax", "NK_OP_FMAX", 2, 0, 1, Z, Z, 0}, {"fmin", "NK_OP_FMIN", 2, 0, 1, Z, Z, 0},
	{"eq", "NK_OP_EQ", 2, 0, 1, Z, Z, 0}, {"ne", "NK_OP_NE", 2, 0, 1, Z, Z, 0},
	{"lt", "NK_OP_LT", 2, 0, 1, Z, Z, 0}, {"le", "NK_OP_LE", 2, 0, 1, Z, Z, 0},
	{"gt", "NK_OP_GT", 2, 0, 1, Z, Z, 0}, {"ge", "NK_OP_GE", 2, 0, 1, Z, Z, 0},
	{"addcmul", "NK_OP_ADDCMUL", 4, 0, 1, 2, 3, 0}, {"addcdiv", "NK_OP_ADDCDIV", 4, 0, 1, 2, 3, 0},
	{"lerp", "NK_OP_LERP", 3, 0, 1, 2, Z, 0},
	{"clamp", "NK_OP_CLAMP_TENSOR", 3, 0, 1, 2, Z, 3}, {"clamp_min", "NK_OP_CLAMP_TENSOR", 2, 0, 1, Z, Z, 1},
	{"clamp_max", "NK_OP_CLAMP_TENSOR", 2, 0, Z, 1, Z, 2},
	{"neg", "NK_OP_NEG", 1, 0, Z, Z, Z, 0}, {"abs", "NK_OP_ABS", 1, 0, Z, Z, Z, 0},
	{"sign", "NK_OP_SIGN", 1, 0, Z, Z, Z, 0}, {"reciprocal", "NK_OP_RECIPROCAL", 1, 0, Z, Z, Z, 0},
	{"square", "NK_OP_SQUARE", 1, 0, Z, Z, Z, 0}, {"rsqrt", "NK_OP_RSQRT", 1, 0, Z, Z, Z, 0},
	{"sigmoid", "NK_OP_SIGMOID", 1, 0, Z, Z, Z, 0}, {"silu", "NK_OP_SILU", 1, 0, Z, Z, Z, 0},
	{"relu", "NK_OP_RELU", 1, 0, Z, Z, Z, 0}, {"gelu", "NK_OP_GELU", 1, 0, Z, Z, Z, 0},
	{"gelu_tanh", "NK_OP_GELU", 1, 0, Z, Z, Z, 1}, {"frac", "NK_OP_FRAC", 1, 0, Z, Z, Z, 0},
	{"round", "NK_OP_ROUND", 1, 0, Z, Z, Z, 0}, {"isnan", "NK_OP_ISNAN", 1, 0, Z, Z, Z, 0},
	{"isinf", "NK_OP_ISINF", 1, 0, Z, Z, Z, 0}, {"isfinite", "NK_OP_ISFINITE", 1, 0, Z, Z, Z, 0},
	{"sigmoid_backward", "NK_OP_SIGMOID_BACKWARD", 2, 0, 1, Z, Z, 0},
	{"tanh_backward", "NK_OP_TANH_BACKWARD", 2, 0, 1, Z, Z, 0},
	{"threshold_backward", "NK_OP_THRESHOLD_BACKWARD", 3, 0, 1, Z, 2, 0},
	{"exp", "NK_OP_EXP", 1, 0, Z, Z, Z, 0}, {"exp2", "NK_OP_EXP2", 1, 0, Z, Z, Z, 0},
	{"expm1", "NK_OP_EXPM1", 1, 0, Z, Z, Z, 0}, {"log", "NK_OP_LOG", 1, 0, Z, Z, Z, 0},
	{"log2", "NK_OP_LOG2", 1, 0, Z, Z, Z, 0}, {"log10", "NK_OP_LOG10", 1, 0, Z, Z, Z, 0},
	{"log1p", "NK_OP_LOG1P", 1, 0, Z, Z, Z, 0}, {"sqrt", "NK_OP_SQRT", 1, 0, Z, Z, Z, 0},
	{"sin", "NK_OP_SIN", 1, 0, Z, Z, Z, 0}, {"cos", "NK_OP_COS", 1, 0, Z, Z, Z, 0},
	{"tan", "NK_OP_TAN", 1, 0, Z, Z, Z, 0}, {"asin", "NK_OP_ASIN", 1, 0, Z, Z, Z, 0},
	{"acos", "NK_OP_ACOS", 1, 0, Z, Z, Z, 0}, {"atan", "NK_OP_ATAN", 1, 0, Z, Z, Z, 0},
	{"sinh", "NK_OP_SINH", 1, 0, Z, Z, Z, 0}, {"cosh", "NK_OP_COSH", 1, 0, Z, Z, Z, 0},
	{"tanh", "NK_OP_TANH", 1, 0, Z, Z, Z, 0}, {"asinh", "NK_OP_ASINH", 1, 0, Z, Z, Z, 0},
	{"acosh", "NK_OP_ACOSH", 1, 0, Z, Z, Z, 0}, {"atanh", "NK_OP_ATANH", 1, 0, Z, Z, Z, 0},
	{"erf", "NK_OP_ERF", 1, 0, Z, Z, Z, 0}, {"erfc", "NK_OP_ERFC", 1, 0, Z, Z, Z, 0},
	{"floor", "NK_OP_FLOOR", 1, 0, Z, Z, Z, 0}, {"ceil", "NK_OP_CEIL", 1, 0, Z, Z, Z, 0},
	{"trunc", "NK_OP_TRUNC", 1, 0, Z, Z, Z, 0},
};

static const pw_formula_t *formula(const char *op)
{
	for (size_t i = 0; i < sizeof formulas / sizeof formulas[0]; i++)
		if (!strcmp(formulas[i].name, op))
			return &formulas[i];
	return NULL;
}

static const char *arg(char a[][NC_EXPR], int i, const char *T, char *buf, size_t n)
{
	if (i >= 0)
		return a[i];
	fmt(buf, n, "(%s)%d", T, i == I ? 1 : 0);
	return buf;
}

/* both operands of m are tensors of m's (reduced) compute dtype */
static bool reduced_tensors(const kc_t *k, const nc_node_t *m)
{
	for (int i = 0; i < 2; i++)
		if (i >= m->nin || m->ins[i].kind != 'v' || m->ins[i].v < 0 || k->g->v[m->ins[i].v].dtype != m->cdtype)
			return false;
	return true;
}

static int emit_float_op(kc_t *k, char *out, size_t n, const nc_node_t *m, char a[][NC_EXPR], int na)
{
	const pw_formula_t *f = formula(m->op);
	if (!f)
		return nc_fail(k->g, NC_ERR_INVALID, "node %d: unknown pointwise op '%s'", m->id, m->op);
	if (na < f->nin)
		return nc_fail(k->g, NC_ERR_INVALID, "node %d: %s needs %d operands", m->id, m->op, f->nin);
	const char *T = ctype(m->cdtype);
	char bx[16], by[16], bz[16], ba[16];
	if (!strcmp(m->op, "div_trunc") && (m->cdtype == NC_BF16 || m->cdtype == NC_F16) && reduced_tensors(k, m)) {
		/* as the eager kernel (pointwise.c round_q, aten's vectorized CPU loop): two bf16/f16 tensors
		 * give trunc of the quotient rounded to the dtype */
		fmt(out, n, "pwf_scalar(NK_OP_TRUNC, %s(pwf_scalar(NK_OP_DIV, %s, %s, 0, 0, 0, 0, 0)), 0, 0, 0, 0, 0, 0)",
		    m->cdtype == NC_BF16 ? "nc_rbf" : "nc_rh", a[0], a[1]);
		return 0;
	}
	fmt(out, n, "%s_scalar(%s, %s, %s, %s, %s, (%s)0, 0, %d)", is_double(m->cdtype) ? "pwd" : "pwf", f->nk,
	    arg(a, f->x, T, bx, sizeof bx), arg(a, f->y, T, by, sizeof by), arg(a, f->z, T, bz, sizeof bz),
	    arg(a, f->a, T, ba, sizeof ba), T, f->ia);
	return 0;
}

/* Integer and bool compute types: C's operators with ATen's integer semantics (nc_program.h). */
static int emit_int_op(kc_t *k, char *out, size_t n, const nc_node_t *m, char a[][NC_EXPR], int na)
{
	const char *op = m->op;
	int cd = m->cdtype;
	const char *T = ctype(cd);
#define OP(name) (!strcmp(op, name))
#define ARGS(c) if (na < (c)) return nc_fail(k->g, NC_ERR_INVALID, "node %d: %s needs %d operands", m->id, op, c)
	if (OP("add")) { ARGS(2); fmt(out, n, "(%s + %s)", a[0], a[1]); }
	else if (OP("sub")) { ARGS(2); fmt(out, n, "(%s - %s)", a[0], a[1]); }
	else if (OP("add_alpha")) { ARGS(3); fmt(out, n, "(%s + %s * %s)", a[0], a[2], a[1]); }
	else if (OP("sub_alpha")) { ARGS(3); fmt(out, n, "(%s - %s * %s)", a[0], a[2], a[1]); }
	else if (OP("rsub_alpha")) { ARGS(3); fmt(out, n, "(%s - %s * %s)", a[1], a[2], a[0]); }
	else if (OP("mul")) { ARGS(2); fmt(out, n, "(%s * %s)", a[0], a[1]); }
	else if (OP("div") || OP("div_trunc")) { ARGS(2); fmt(out, n, "nc_idiv_trunc(%s, %s)", a[0], a[1]); }
	else if (OP("div_floor")) { ARGS(2); fmt(out, n, "nc_idiv_floor(%s, %s)", a[0], a[1]); }
	else if (OP("remainder")) { ARGS(2); fmt(out, n, "nc_irem(%s, %s)", a[0], a[1]); }
	else if (OP("fmod")) { ARGS(2); fmt(out, n, "nc_ifmod(%s, %s)", a[0], a[1]); }
	else if (OP("pow")) { ARGS(2); fmt(out, n, "nc_ipow(%s, %s)", a[0], a[1]); }
	else if (OP("maximum") || OP("fmax")) { ARGS(2); fmt(out, n, "(%1$s > %2$s ? %1$s : %2$s)", a[0], a[1]); }
	else if (OP("minimum") || OP("fmin")) { ARGS(2); fmt(out, n, "(%1$s < %2$s ? %1$s : %2$s)", a[0], a[1]); }
	else if (OP("eq")) { ARGS(2); fmt(out, n, "(%s == %s)", a[0], a[1]); }
	else if (OP("ne")) { ARGS(2); fmt(out, n, "(%s != %s)", a[0], a[1]); }
	else if (OP("lt")) { ARGS(2); fmt(out, n, "(%s < %s)", a[0], a[1]); }
	else if (OP("le")) { ARGS(2); fmt(out, n, "(%s <= %s)", a[0], a[1]); }
	else if (OP("gt")) { ARGS(2); fmt(out, n, "(%s > %s)", a[0], a[1]); }
	else if (OP("ge")) { ARGS(2); fmt(out, n, "(%s >= %s)", a[0], a[1]); }
	else if (OP("addcmul")) { ARGS(4); fmt(out, n, "(%s + %s * %s * %s)", a[0], a[3], a[1], a[2]); }
	else if (OP("clamp")) { ARGS(3); fmt(out, n, "({ %1$s t_ = %2$s < %3$s ? %3$s : %2$s; t_ > %4$s ? %4$s : t_; })", T, a[0], a[1], a[2]); }
	else if (OP("clamp_min")) { ARGS(2); fmt(out, n, "(%1$s < %2$s ? %2$s : %1$s)", a[0], a[1]); }
	else if (OP("clamp_max")) { ARGS(2); fmt(out, n, "(%1$s > %2$s ? %2$s : %1$s)", a[0], a[1]); }
	else if (OP("neg")) { ARGS(1); fmt(out, n, "(-%s)", a[0]); }
	else if (OP("abs")) { ARGS(1); fmt(out, n, "(%1$s < 0 ? -%1$s : %1$s)", a[0]); }
	else if (OP("sign")) { ARGS(1); fmt(out, n, "(%1$s > 0 ? (%2$s)1 : (%1$s < 0 ? (%2$s)-1 : %1$s))", a[0], T); }
	else if (OP("square")) { ARGS(1); fmt(out, n, "(%1$s * %1$s)", a[0]); }
	else if (OP("relu")) { ARGS(1); fmt(out, n, "(%1$s < 0 ? (%2$s)0 : %1$s)", a[0], T); }
	else if (OP("floor") || OP("ceil") || OP("trunc") || OP("round")) { ARGS(1); fmt(out, n, "%s", a[0]); }
	else if (OP("isnan") || OP("isinf")) { ARGS(1); fmt(out, n, "0"); }
	else if (OP("isfinite")) { ARGS(1); fmt(out, n, "1"); }
	else if (OP("threshold_backward")) { ARGS(3); fmt(out, n, "(%2$s <= %3$s ? (%4$s)0 : %1$s)", a[0], a[1], a[2], T); }
	else return nc_fail(k->g, NC_ERR_INVALID, "node %d: pointwise op '%s' on %s", m->id, op, nc_dtype_name(cd));
#undef OP
#undef ARGS
	return 0;
}

static int emit_op(kc_t *k, char *out, size_t n, const nc_node_t *m, char a[][NC_EXPR], int na)
{
	const char *op = m->op;
	int cd = m->cdtype;
	const char *T = ctype(cd);
#define OP(name) (!strcmp(op, name))
#define ARGS(c) if (na < (c)) return nc_fail(k->g, NC_ERR_INVALID, "node %d: %s needs %d operands", m->id, op, c)
	/* not arithmetic: values, selection, logic, bits and the index */
	if (OP("copy") || OP("full")) { ARGS(1); fmt(out, n, "%s", a[0]); }
	else if (OP("where")) { ARGS(3); fmt(out, n, "(%s ? %s : %s)", a[0], a[1], a[2]); }
	else if (OP("logical_and") || OP("bitwise_and")) { ARGS(2); fmt(out, n, "(%s & %s)", a[0], a[1]); }
	else if (OP("logical_or") || OP("bitwise_or")) { ARGS(2); fmt(out, n, "(%s | %s)", a[0], a[1]); }
	else if (OP("logical_xor") || OP("bitwise_xor")) { ARGS(2); fmt(out, n, "(%s ^ %s)", a[0], a[1]); }
	else if (OP("logical_not")) { ARGS(1); fmt(out, n, "(!%s)", a[0]); }
	else if (OP("bitwise_not")) { ARGS(1); fmt(out, n, cd == NC_BOOL ? "(!%s)" : "(~%s)", a[0]); }
	else if (OP("arange")) { ARGS(2); fmt(out, n, "(%s + %s * (%s)(%s * L + j))", a[0], a[1], T, k->ridx); }
	else if (nc_dtype_is_float(cd))
		return emit_float_op(k, out, n, m, a, na);
	else
		return emit_int_op(k, out, n, m, a, na);
#undef OP
#undef ARGS
	return 0;
}

/* Emit a load of `value` (read at the element (r, j) of shape S, or at r / j) into a register named
 * <name>_v; its name goes to out. */
static int load_value(kc_t *k, const char *name, int value, const nc_value_t *S, int mode, int indent, char *out, size_t n)
{
	nc_graph_t *g = k->g;
	const nc_value_t *ov = &g->v[value];
	const nc_value_t *rv = &g->v[ov->root];
	int pi = ptr_index(g, k->u->seg, rv->id);
	if (pi < 0)
		return nc_fail(g, NC_ERR_INVALID, "internal: value %d has no pointer in segment %d", rv->id, k->u->seg);
	char idx[NC_EXPR], mem[NC_EXPR], raw[NC_EXPR];
	if (mode == CLS_FULL) {
		const char *inner = full_access(k, name, ov, S, k->L, k->ridx, indent);
		char innerbuf[NC_EXPR];
		if (inner)
			fmt(innerbuf, sizeof innerbuf, "%s", inner);
		full_index(k, idx, sizeof idx, name, inner ? innerbuf : NULL, ov, S, k->L, name, indent);
	} else {
		whole_access(k, name, ov, S, mode == CLS_ROW ? "r" : k->cidx, indent);
		fmt(idx, sizeof idx, "%s", name);
	}
	if (pi >= NC_MAX_PTRS + 32)
		return nc_fail(g, NC_ERR_INVALID, "internal: pointer %d out of range", pi);
	k->pused[pi] = true;
	fmt(raw, sizeof raw, "((const %s *)P%d_)[%s]", nc_ctype_storage(rv->dtype), pi, idx);
	load_conv(mem, sizeof mem, raw, ov->dtype);
	sb_printf(k->s, "%*sconst %s %s_v = %s;\n", indent, "", reg_of(ov->dtype), name, mem);
	fmt(out, n, "%s_v", name);
	return 0;
}

/* The operand expressions of node m (converted to m's compute dtype), emitting loads for operands in
 * memory.  mode: CLS_FULL (in the j loop), CLS_ROW (per row), CLS_COL (per column). */
static int operands(kc_t *k, const nc_node_t *m, int mode, char a[][NC_EXPR], int indent)
{
	nc_graph_t *g = k->g;
	const nc_value_t *S = &g->v[m->outs[0]];
	int na = 0;
	for (int i = 0; i < m->nin && na < 8; i++, na++) {
		const nc_opnd_t *o = &m->ins[i];
		int to = m->cdtype;
		if (!strcmp(m->op, "where") && i == 0)
			to = NC_BOOL;
		char x[NC_EXPR];
		int from = to;
		if (o->kind == 'f') {
			if (!strcmp(o->ftext, "inf"))
				fmt(x, sizeof x, "INFINITY");
			else if (!strcmp(o->ftext, "-inf"))
				fmt(x, sizeof x, "(-INFINITY)");
			else if (!strcmp(o->ftext, "nan"))
				fmt(x, sizeof x, "NAN");
			else
				fmt(x, sizeof x, "%s", o->ftext);
			from = NC_F64;
		} else if (o->kind == 'i') {
			fmt(x, sizeof x, "(int64_t)%lld", (long long)o->i);
			from = NC_I64;
		} else if (o->kind == 'e') {
			fmt(x, sizeof x, "(int64_t)(%s)", o->e);
			from = NC_I64;
		} else if (o->kind == 'd') {
			fmt(x, sizeof x, "nc_i2d(S%lld)", (long long)o->i);
			from = NC_F64;
		} else if (o->v < 0) {
			return nc_fail(g, NC_ERR_INVALID, "node %d: absent operand", m->id);
		} else {
			const nc_value_t *ov = &g->v[o->v];
			from = ov->dtype;
			if (is_free(g, o->v)) {
				fmt(x, sizeof x, "c%d", ov->root);
			} else if (in_unit(k, o->v)) {
				fmt(x, sizeof x, "x%d", ov->root);
			} else {
				char name[48];
				fmt(name, sizeof name, "l%d_%d_%d", m->index, i, k->pass);
				int st = load_value(k, name, o->v, S, mode, indent, x, sizeof x);
				if (st)
					return st;
			}
		}
		conv(a[na], sizeof a[na], x, from, to);
	}
	return na;
}

static int emit_node(kc_t *k, const nc_node_t *m, int mode, int indent)
{
	char a[8][NC_EXPR], e[4 * NC_EXPR], r[4 * NC_EXPR + 64];
	int na = operands(k, m, mode, a, indent);
	if (na < 0)
		return na;
	int st = emit_op(k, e, sizeof e, m, a, na);
	if (st)
		return st;
	const nc_value_t *v = &k->g->v[m->outs[0]];
	to_reg(r, sizeof r, e, m->cdtype, v->dtype);
	sb_printf(k->s, "%*sconst %s x%d = %s;\n", indent, "", reg_of(v->dtype), v->root, r);
	return 0;
}

/* store of value v (a root of this unit) at the current element */
static void emit_store(kc_t *k, const nc_value_t *v, int mode, int indent)
{
	nc_graph_t *g = k->g;
	int pi = ptr_index(g, k->u->seg, v->storage == ST_INTO ? v->into : v->id);
	char name[32], idx[NC_EXPR], x[64], sv[NC_EXPR];
	fmt(name, sizeof name, "s%d_%d", v->id, k->pass);
	if (mode == CLS_FULL) {
		const char *inner = full_access(k, name, v, v, k->L, k->ridx, indent);
		char innerbuf[NC_EXPR];
		if (inner)
			fmt(innerbuf, sizeof innerbuf, "%s", inner);
		full_index(k, idx, sizeof idx, name, inner ? innerbuf : NULL, v, v, k->L, name, indent);
	} else {
		whole_access(k, name, v, v, mode == CLS_ROW ? "r" : k->cidx, indent);
		fmt(idx, sizeof idx, "%s", name);
	}
	fmt(x, sizeof x, "x%d", v->id);
	store_conv(sv, sizeof sv, x, v->dtype);
	if (pi < 0 || pi >= NC_MAX_PTRS + 32) {
		truncated = true; /* cannot happen: fails the compile */
		return;
	}
	k->pused[pi] = true;
	sb_printf(k->s, "%*s((%s *)P%d_)[%s] = %s;\n", indent, "", nc_ctype_storage(v->dtype), pi, idx, sv);
}

static bool stored(const nc_graph_t *g, const nc_node_t *m)
{
	const nc_value_t *v = &g->v[m->outs[0]];
	return v->mat && v->storage != ST_NONE;
}

/* ---- reductions -------------------------------------------------------------------------------------- */

static const char *acc_type(const nc_graph_t *g, const nc_node_t *m)
{
	const nc_value_t *in = &g->v[m->ins[0].v];
	if (!strcmp(m->op, "amax") || !strcmp(m->op, "amin"))
		return reg_of(in->dtype);
	/* sum/mean of floating values accumulate in double, as the eager kernels (csrc/kernels/reduce.c):
	 * float lanes lose the low bits of long rows (a sum of 64M values near 1 was off by 2e-4) */
	if (nc_dtype_is_float(m->cdtype))
		return "double";
	return "int64_t";
}

static const char *acc_init(const nc_graph_t *g, const nc_node_t *m)
{
	const nc_value_t *in = &g->v[m->ins[0].v];
	bool mx = !strcmp(m->op, "amax"), mn = !strcmp(m->op, "amin");
	if (!mx && !mn)
		return "0";
	if (nc_dtype_is_float(in->dtype))
		return mx ? "(-INFINITY)" : "INFINITY";
	static const char *const lo[NC_NDTYPES] = {"0", "0", "INT8_MIN", "INT16_MIN", "INT32_MIN", "INT64_MIN"};
	static const char *const hi[NC_NDTYPES] = {"1", "UINT8_MAX", "INT8_MAX", "INT16_MAX", "INT32_MAX", "INT64_MAX"};
	return mx ? lo[in->dtype] : hi[in->dtype];
}

static bool red_is_float_ext(const nc_graph_t *g, const nc_node_t *m)
{
	return (!strcmp(m->op, "amax") || !strcmp(m->op, "amin")) && nc_dtype_is_float(g->v[m->ins[0].v].dtype);
}

/* A column sum/mean of f32/bf16/f16 values adds blocks of NC_CBLK rows in float, then each block sum
 * into its column's double accumulator: the scheme of the eager column sums (reduce.c), at float
 * vector width. */
static bool col_block(const nc_graph_t *g, const nc_node_t *m)
{
	return (!strcmp(m->op, "sum") || !strcmp(m->op, "mean")) && nc_dtype_is_float(m->cdtype) && m->cdtype != NC_F64;
}

/* accumulate input register of reduction m into acc (`acc` names the accumulator lvalue; block: a float
 * block sum of a column reduction, see col_block) */
static int emit_acc_update(kc_t *k, const nc_node_t *m, const char *acc, const char *nanv, bool block, int indent)
{
	const nc_value_t *in = &k->g->v[m->ins[0].v];
	char x[NC_EXPR], reg[NC_EXPR];
	if (is_free(k->g, in->id)) { /* a constant (sum of ones_like): inlined, as for pointwise operands */
		fmt(reg, sizeof reg, "c%d", in->root);
	} else if (in_unit(k, in->id)) {
		fmt(reg, sizeof reg, "x%d", in->root);
	} else {
		char name[48];
		fmt(name, sizeof name, "l%d_0_%d", m->index, k->pass);
		int st = load_value(k, name, in->id, in, CLS_FULL, indent, reg, sizeof reg);
		if (st)
			return st;
	}
	fmt(x, sizeof x, "((%s)%s)", block ? "float" : acc_type(k->g, m), reg);
	if (!strcmp(m->op, "amax"))
		sb_printf(k->s, "%*s%s = %s > %s ? %s : %s;\n", indent, "", acc, acc, x, acc, x);
	else if (!strcmp(m->op, "amin"))
		sb_printf(k->s, "%*s%s = %s < %s ? %s : %s;\n", indent, "", acc, acc, x, acc, x);
	else
		sb_printf(k->s, "%*s%s += %s;\n", indent, "", acc, x);
	if (red_is_float_ext(k->g, m))
		sb_printf(k->s, "%*s%s |= %s != %s;\n", indent, "", nanv, reg, reg);
	return 0;
}

static void emit_acc_final(kc_t *k, const nc_node_t *m, const char *acc, const char *nanv, const char *count, int indent)
{
	const nc_value_t *v = &k->g->v[m->outs[0]];
	char e[NC_EXPR], r[NC_EXPR];
	if (!strcmp(m->op, "mean"))
		fmt(e, sizeof e, "(%s / (%s)(%s))", acc, acc_type(k->g, m), count);
	else if (red_is_float_ext(k->g, m))
		fmt(e, sizeof e, "(%s ? (%s)NAN : %s)", nanv, acc_type(k->g, m), acc);
	else
		fmt(e, sizeof e, "%s", acc);
	to_reg(r, sizeof r, e, m->cdtype, v->dtype);
	sb_printf(k->s, "%*sconst %s x%d = %s;\n", indent, "", reg_of(v->dtype), v->root, r);
}

/* ---- levels and needed sets ---------------------------------------------------------------------------- */

static int operand_level(kc_t *k, const nc_opnd_t *o)
{
	if (o->kind != 'v' || o->v < 0 || !in_unit(k, o->v))
		return 0;
	return k->level[k->g->v[o->v].root];
}

static void compute_levels(kc_t *k)
{
	nc_graph_t *g = k->g;
	k->npass = 0;
	for (int i = 0; i < k->u->nnodes; i++) {
		const nc_node_t *m = &g->n[k->u->nodes[i]];
		int l = 0;
		for (int j = 0; j < m->nin; j++) {
			int ol = operand_level(k, &m->ins[j]);
			if (ol > l)
				l = ol;
		}
		if (m->kind == 'R')
			l++;
		k->level[m->outs[0]] = l;
		if (m->kind == 'R' && l > k->npass)
			k->npass = l;
	}
}

/* mark FULL members needed (transitively) for value `root` */
static void need(kc_t *k, int root)
{
	nc_graph_t *g = k->g;
	int p = g->v[root].producer;
	if (p < 0 || k->needed[p] || g->n[p].unit != k->ui || g->v[root].cls != CLS_FULL)
		return;
	k->needed[p] = true;
	const nc_node_t *m = &g->n[p];
	for (int j = 0; j < m->nin; j++)
		if (m->ins[j].kind == 'v' && m->ins[j].v >= 0 && in_unit(k, m->ins[j].v))
			need(k, g->v[m->ins[j].v].root);
}

/* the j-loop body of one pass: FULL members needed, then accumulations and stores */
static int emit_full_body(kc_t *k, int pass, bool col, int indent)
{
	nc_graph_t *g = k->g;
	for (int i = 0; i < k->u->nnodes; i++) {
		const nc_node_t *m = &g->n[k->u->nodes[i]];
		if (!k->needed[m->index] || m->kind != 'P')
			continue;
		int st = emit_node(k, m, CLS_FULL, indent);
		if (st)
			return st;
	}
	for (int i = 0; i < k->u->nnodes; i++) {
		const nc_node_t *m = &g->n[k->u->nodes[i]];
		if (m->kind == 'R' && k->level[m->outs[0]] - 1 == pass) {
			char acc[48], nanv[48];
			bool block = col && col_block(g, m);
			if (col) {
				fmt(acc, sizeof acc, "%s%d[j - j0]", block ? "blk" : "acc", m->index);
				fmt(nanv, sizeof nanv, "nan%d[j - j0]", m->index);
			} else {
				fmt(acc, sizeof acc, "acc%d", m->index);
				fmt(nanv, sizeof nanv, "nan%d", m->index);
			}
			int st = emit_acc_update(k, m, acc, nanv, block, indent);
			if (st)
				return st;
		}
		if (m->kind == 'P' && g->v[m->outs[0]].cls == CLS_FULL && stored(g, m) && k->level[m->outs[0]] == pass)
			emit_store(k, &g->v[m->outs[0]], CLS_FULL, indent);
	}
	return 0;
}

static void mark_pass(kc_t *k, int pass)
{
	nc_graph_t *g = k->g;
	memset(k->needed, 0, sizeof(bool) * (size_t)g->nn);
	for (int i = 0; i < k->u->nnodes; i++) {
		const nc_node_t *m = &g->n[k->u->nodes[i]];
		if (m->kind == 'R' && k->level[m->outs[0]] - 1 == pass)
			need(k, g->v[m->ins[0].v].root);
		if (m->kind == 'P' && g->v[m->outs[0]].cls == CLS_FULL && stored(g, m) && k->level[m->outs[0]] == pass)
			need(k, m->outs[0]);
	}
}

static bool pass_has_work(kc_t *k, int pass)
{
	nc_graph_t *g = k->g;
	for (int i = 0; i < k->u->nnodes; i++) {
		const nc_node_t *m = &g->n[k->u->nodes[i]];
		if (m->kind == 'R' && k->level[m->outs[0]] - 1 == pass)
			return true;
		if (m->kind == 'P' && g->v[m->outs[0]].cls == CLS_FULL && stored(g, m) && k->level[m->outs[0]] == pass)
			return true;
	}
	return false;
}

static void omp_clauses(kc_t *k, int pass, char *buf, size_t n)
{
	nc_graph_t *g = k->g;
	size_t len = (size_t)snprintf(buf, n, "#pragma omp simd");
	for (int i = 0; i < k->u->nnodes && len < n; i++) {
		const nc_node_t *m = &g->n[k->u->nodes[i]];
		if (m->kind != 'R' || k->level[m->outs[0]] - 1 != pass)
			continue;
		const char *op = !strcmp(m->op, "amax") ? "max" : !strcmp(m->op, "amin") ? "min" : "+";
		len += (size_t)snprintf(buf + len, n - len, " reduction(%s:acc%d)", op, m->index);
		if (red_is_float_ext(g, m) && len < n)
			len += (size_t)snprintf(buf + len, n - len, " reduction(|:nan%d)", m->index);
	}
}

/* ---- kernels ------------------------------------------------------------------------------------------- */

/* Where a kernel's pointer locals go (emit_unit replaces it): each segment pointer the kernel uses is
 * read once into a local `void *const P<i>_`.  Loads through P[i] inside an `omp simd` reduction loop
 * were vectorized as gathers (GCC re-reads P[i] per lane): a row sum ran at gather speed. */
#define PTRS_MARK "\t/*@nc-ptrs@*/\n"

static void prologue(kc_t *k, const char *lo, const char *hi)
{
	nc_graph_t *g = k->g;
	nc_sb_t *s = k->s;
	sb_printf(s, "static void nc_k%d(void *vctx, int64_t %s, int64_t %s)\n{\n", k->u->kid, lo, hi);
	sb_printf(s, "\tconst int64_t *S = ((const nc_ctx_t *)vctx)->S;\n\tvoid *const *P = ((const nc_ctx_t *)vctx)->P;\n");
	sb_printf(s, "\t(void)S; (void)P;\n%s", PTRS_MARK);
	for (int i = 0; i < g->nsyms; i++)
		sb_printf(s, "\tconst int64_t S%d = S[%d]; (void)S%d;\n", i, i, i);
	/* constants (free nodes) read by members, in graph order */
	bool *used = nc_calloc((size_t)g->nn + 1, 1);
	if (!used) {
		k->s->oom = true; /* nc_compile fails with NC_ERR_NOMEM */
		return;
	}
	for (int i = 0; i < k->u->nnodes; i++) {
		const nc_node_t *m = &g->n[k->u->nodes[i]];
		for (int j = 0; j < m->nin; j++)
			if (m->ins[j].kind == 'v' && m->ins[j].v >= 0 && is_free(g, m->ins[j].v))
				used[g->v[g->v[m->ins[j].v].root].producer] = true;
	}
	for (int i = g->nn - 1; i >= 0; i--) /* free nodes read by used free nodes */
		if (used[i])
			for (int j = 0; j < g->n[i].nin; j++)
				if (g->n[i].ins[j].kind == 'v' && g->n[i].ins[j].v >= 0)
					used[g->v[g->v[g->n[i].ins[j].v].root].producer] = true;
	for (int i = 0; i < g->nn; i++) {
		if (!used[i])
			continue;
		const nc_node_t *m = &g->n[i];
		char a[8][NC_EXPR], e[4 * NC_EXPR], r[4 * NC_EXPR + 64];
		int na = 0;
		for (int j = 0; j < m->nin && na < 8; j++, na++) {
			const nc_opnd_t *o = &m->ins[j];
			int to = (!strcmp(m->op, "where") && j == 0) ? NC_BOOL : m->cdtype;
			char x[NC_EXPR];
			int from = NC_F64;
			if (o->kind == 'v') {
				fmt(x, sizeof x, "c%d", g->v[o->v].root);
				from = g->v[o->v].dtype;
			} else if (o->kind == 'f') {
				fmt(x, sizeof x, "%s", !strcmp(o->ftext, "inf") ? "INFINITY" : !strcmp(o->ftext, "-inf") ? "(-INFINITY)" :
								!strcmp(o->ftext, "nan") ? "NAN" : o->ftext);
			} else if (o->kind == 'i') {
				fmt(x, sizeof x, "(int64_t)%lld", (long long)o->i);
				from = NC_I64;
			} else if (o->kind == 'd') {
				fmt(x, sizeof x, "nc_i2d(S%lld)", (long long)o->i);
			} else {
				fmt(x, sizeof x, "(int64_t)(%s)", o->e);
				from = NC_I64;
			}
			conv(a[na], sizeof a[na], x, from, to);
		}
		if (emit_op(k, e, sizeof e, m, a, na))
			break;
		const nc_value_t *v = &g->v[m->outs[0]];
		to_reg(r, sizeof r, e, m->cdtype, v->dtype);
		sb_printf(s, "\tconst %s c%d = %s;\n", reg_of(v->dtype), v->id, r);
	}
	free(used);
	sb_printf(s, "\tconst int64_t R = (%s), L = (%s);\n\t(void)R; (void)L;\n", k->R, k->L);
}

/* members of class ROW/COL of level `lvl` (ROW) or all (COL), with their stores */
static int emit_whole_nodes(kc_t *k, int cls, int lvl, int indent)
{
	nc_graph_t *g = k->g;
	for (int i = 0; i < k->u->nnodes; i++) {
		const nc_node_t *m = &g->n[k->u->nodes[i]];
		const nc_value_t *v = &g->v[m->outs[0]];
		if (v->cls != cls || (lvl >= 0 && k->level[v->id] != lvl))
			continue;
		if (m->kind == 'P') {
			int st = emit_node(k, m, cls, indent);
			if (st)
				return st;
		}
		if (stored(g, m))
			emit_store(k, v, cls, indent);
	}
	return 0;
}

/* One inner loop: row offsets first (at the row scope), then the loop with its body. */
static int emit_loop(kc_t *k, int pass, bool col, const char *head, int body_indent)
{
	nc_sb_t *out = k->s, pre = {0}, body = {0};
	k->pass = pass;
	k->pre = &pre;
	k->s = &body;
	mark_pass(k, pass);
	int st = emit_full_body(k, pass, col, body_indent);
	k->s = out;
	k->pre = NULL;
	if (pre.oom || body.oom)
		st = nc_fail(k->g, NC_ERR_NOMEM, "out of memory");
	if (!st) {
		if (pre.len)
			sb_printf(out, "%s", pre.buf);
		sb_printf(out, "%s", head);
		if (body.len)
			sb_printf(out, "%s", body.buf);
	}
	sb_free(&pre);
	sb_free(&body);
	return st;
}

static int emit_pw(kc_t *k)
{
	nc_sb_t *s = k->s;
	prologue(k, "t0", "t1");
	sb_printf(s, "\tconst int64_t CH = L < NC_CHUNK ? (L > 0 ? L : 1) : NC_CHUNK, NCH = (L + CH - 1) / CH;\n");
	sb_printf(s, "\tfor (int64_t t = t0; t < t1; t++) {\n");
	sb_printf(s, "\t\tconst int64_t r = t / NCH, j0 = (t %% NCH) * CH, j1 = nc_min(j0 + CH, L);\n");
	int st = emit_loop(k, 0, false, "\t\t#pragma omp simd\n\t\tfor (int64_t j = j0; j < j1; j++) {\n", 24);
	sb_printf(s, "\t\t}\n\t}\n}\n\n");
	return st;
}

static int emit_row(kc_t *k)
{
	nc_graph_t *g = k->g;
	nc_sb_t *s = k->s;
	prologue(k, "r0", "r1");
	sb_printf(s, "\tfor (int64_t r = r0; r < r1; r++) {\n");
	int st0 = emit_whole_nodes(k, CLS_ROW, 0, 16); /* row values that need no reduction of this unit */
	if (st0)
		return st0;
	int last = k->npass;
	for (int p = 0; p <= last; p++) {
		if (p > 0) {
			/* finish the reductions of pass p-1, then the row values that need them */
			for (int i = 0; i < k->u->nnodes; i++) {
				const nc_node_t *m = &g->n[k->u->nodes[i]];
				if (m->kind == 'R' && k->level[m->outs[0]] == p) {
					char acc[32], nanv[32];
					fmt(acc, sizeof acc, "acc%d", m->index);
					fmt(nanv, sizeof nanv, "nan%d", m->index);
					emit_acc_final(k, m, acc, nanv, "L", 16);
				}
			}
			int st = emit_whole_nodes(k, CLS_ROW, p, 16);
			if (st)
				return st;
		}
		if (!pass_has_work(k, p))
			continue;
		for (int i = 0; i < k->u->nnodes; i++) {
			const nc_node_t *m = &g->n[k->u->nodes[i]];
			if (m->kind == 'R' && k->level[m->outs[0]] - 1 == p) {
				sb_printf(s, "\t\t%s acc%d = %s;\n", acc_type(g, m), m->index, acc_init(g, m));
				if (red_is_float_ext(g, m))
					sb_printf(s, "\t\tint nan%d = 0;\n", m->index);
			}
		}
		char pragma[1024], head[1200];
		omp_clauses(k, p, pragma, sizeof pragma);
		fmt(head, sizeof head, "\t\t%s\n\t\tfor (int64_t j = 0; j < L; j++) {\n", pragma);
		int st = emit_loop(k, p, false, head, 24);
		if (st)
			return st;
		sb_printf(s, "\t\t}\n");
	}
	sb_printf(s, "\t}\n}\n\n");
	return 0;
}

static int emit_col(kc_t *k)
{
	nc_graph_t *g = k->g;
	nc_sb_t *s = k->s;
	prologue(k, "t0", "t1");
	sb_printf(s, "\tconst int64_t CW = nc_colw(L), NCOL = (L + CW - 1) / CW;\n");
	sb_printf(s, "\tfor (int64_t t = t0; t < t1; t++) {\n");
	sb_printf(s, "\t\tconst int64_t o = t / NCOL, j0 = (t %% NCOL) * CW, j1 = nc_min(j0 + CW, L);\n\t\t(void)o;\n");
	k->ridx = "rr";
	k->cidx = "(o * L + j)";
	for (int i = 0; i < k->u->nnodes; i++) {
		const nc_node_t *m = &g->n[k->u->nodes[i]];
		if (m->kind != 'R')
			continue;
		sb_printf(s, "\t\t%s acc%d[NC_CC];\n", acc_type(g, m), m->index);
		sb_printf(s, "\t\tint nan%d[NC_CC];\n", m->index);
		sb_printf(s, "\t\tfor (int64_t j = 0; j < CW; j++)\n\t\t\tacc%d[j] = %s, nan%d[j] = 0;\n", m->index,
			  acc_init(g, m), m->index);
		if (col_block(g, m))
			sb_printf(s, "\t\tfloat blk%d[NC_CC];\n", m->index);
	}
	sb_printf(s, "\t\tfor (int64_t rb = 0; rb < R; rb += NC_CBLK) {\n");
	for (int i = 0; i < k->u->nnodes; i++)
		if (g->n[k->u->nodes[i]].kind == 'R' && col_block(g, &g->n[k->u->nodes[i]]))
			sb_printf(s, "\t\tfor (int64_t j = 0; j < CW; j++)\n\t\t\tblk%d[j] = 0;\n", g->n[k->u->nodes[i]].index);
	sb_printf(s, "\t\tfor (int64_t r = rb; r < nc_min(rb + NC_CBLK, R); r++) {\n\t\t\tconst int64_t rr = o * R + r;\n");
	int st = emit_loop(k, 0, true, "\t\t\t#pragma omp simd\n\t\t\tfor (int64_t j = j0; j < j1; j++) {\n", 32);
	if (st)
		return st;
	sb_printf(s, "\t\t\t}\n\t\t}\n");
	for (int i = 0; i < k->u->nnodes; i++)
		if (g->n[k->u->nodes[i]].kind == 'R' && col_block(g, &g->n[k->u->nodes[i]]))
			sb_printf(s, "\t\t#pragma omp simd\n\t\tfor (int64_t j = 0; j < j1 - j0; j++)\n\t\t\tacc%d[j] += blk%d[j];\n",
				  g->n[k->u->nodes[i]].index, g->n[k->u->nodes[i]].index);
	sb_printf(s, "\t\t}\n");
	sb_printf(s, "\t\tfor (int64_t j = j0; j < j1; j++) {\n");
	for (int i = 0; i < k->u->nnodes; i++) {
		const nc_node_t *m = &g->n[k->u->nodes[i]];
		if (m->kind == 'R') {
			char acc[48], nanv[48];
			fmt(acc, sizeof acc, "acc%d[j - j0]", m->index);
			fmt(nanv, sizeof nanv, "nan%d[j - j0]", m->index);
			emit_acc_final(k, m, acc, nanv, "R", 24);
		}
	}
	st = emit_whole_nodes(k, CLS_COL, -1, 24);
	sb_printf(s, "\t\t}\n\t}\n}\n\n");
	return st;
}

/* For a PW unit: the longest row (a suffix product shared by every member) whose accesses are all
 * linear, so contiguous tensors run as one flat loop. */
static void pw_space(kc_t *k)
{
	nc_graph_t *g = k->g;
	const nc_value_t *v0 = &g->v[g->n[k->u->nodes[0]].outs[0]];
	for (int d = 0; d < v0->rank; d++) {
		const char *L = v0->sp[d];
		bool ok = true;
		for (int i = 0; i < k->u->nnodes && ok; i++) {
			const nc_node_t *m = &g->n[k->u->nodes[i]];
			const nc_value_t *S = &g->v[m->outs[0]];
			int ks = nc_sp_index(S, L);
			if (ks < 0) {
				ok = false;
				break;
			}
			for (int j = 0; j < m->nin && ok; j++) {
				const nc_opnd_t *o = &m->ins[j];
				if (o->kind != 'v' || o->v < 0 || is_free(g, o->v) || in_unit(k, o->v))
					continue;
				const nc_value_t *ov = &g->v[o->v];
				/* linear over the region if same numel and linear, or fully broadcast, or linear suffix */
				if (nc_streq(ov->sp[0], S->sp[0]) && !nc_streq(ov->lin[0], "x"))
					continue;
				bool all0 = true, none0 = true;
				for (int dd = ks; dd < S->rank; dd++) {
					if (nc_is_one(S->size[dd]))
						continue;
					if (nc_is_zero(eff_stride(ov, S, dd)))
						none0 = false;
					else
						all0 = false;
				}
				int od = ks - (S->rank - ov->rank);
				ok = all0 || (none0 && od >= 0 && !nc_streq(ov->lin[od], "x"));
			}
			if (ok && stored(g, m))
				ok = !nc_streq(S->lin[0], "x") || !nc_streq(S->lin[ks], "x");
		}
		if (ok) {
			k->L = L;
			k->R = v0->pp[d];
			return;
		}
	}
}

static int emit_unit(nc_graph_t *g, nc_sb_t *s, int ui, int *level, bool *needed)
{
	kc_t k = {.g = g, .s = s, .ui = ui, .u = &g->u[ui], .level = level, .needed = needed, .ridx = "r", .cidx = "j"};
	k.R = k.u->R, k.L = k.u->L;
	for (int i = 0; i < k.u->nnodes; i++)
		level[g->n[k.u->nodes[i]].outs[0]] = 0;
	compute_levels(&k);
	sb_printf(s, "/* kernel %d (unit %d, %s):", k.u->kid, ui, k.u->kind == U_PW ? "pointwise" : k.u->kind == U_ROW ? "row reduction" : "column reduction");
	for (int i = 0; i < k.u->nnodes; i++)
		sb_printf(s, " %s", g->n[k.u->nodes[i]].op);
	sb_printf(s, " */\n");
	nc_sb_t body = {0};
	k.s = &body;
	int st;
	if (k.u->kind == U_PW) {
		if (!k.u->is_epi) /* an epilogue keeps the GEMM's rows (R = M, L = N) */
			pw_space(&k);
		((nc_unit_t *)k.u)->R = k.R, ((nc_unit_t *)k.u)->L = k.L;
		st = emit_pw(&k);
	} else if (k.u->kind == U_ROW) {
		st = emit_row(&k);
	} else {
		st = emit_col(&k);
	}
	const char *mark = !st && body.buf ? strstr(body.buf, PTRS_MARK) : NULL;
	if (!st && (body.oom || !mark))
		st = nc_fail(g, NC_ERR_NOMEM, "out of memory");
	if (!st) {
		sb_printf(s, "%.*s", (int)(mark - body.buf), body.buf);
		for (int i = 0; i < NC_MAX_PTRS + 32; i++)
			if (k.pused[i])
				sb_printf(s, "\tvoid *const P%d_ = P[%d];\n", i, i);
		sb_printf(s, "%s", mark + strlen(PTRS_MARK));
	}
	sb_free(&body);
	return st;
}

/* ---- segments, plan and entry points ----------------------------------------------------------------- */

static void emit_launch(nc_graph_t *g, nc_sb_t *s, int ui)
{
	const nc_unit_t *u = &g->u[ui];
	sb_printf(s, "\t{\n\t\tconst int64_t R_ = (%s), L_ = (%s);\n", u->R, u->L);
	if (u->kind == U_PW) {
		sb_printf(s, "\t\tconst int64_t CH_ = L_ < NC_CHUNK ? (L_ > 0 ? L_ : 1) : NC_CHUNK, T_ = R_ * ((L_ + CH_ - 1) / CH_);\n");
		sb_printf(s, "\t\tif (T_ > 0 && L_ > 0)\n\t\t\tRT->parallel_for(T_, nc_max(1, 32768 / CH_), nc_k%d, &ctx);\n", u->kid);
	} else if (u->kind == U_ROW) {
		sb_printf(s, "\t\tif (R_ > 0)\n\t\t\tRT->parallel_for(R_, nc_max(1, 32768 / nc_max(L_, 1)), nc_k%d, &ctx);\n", u->kid);
	} else {
		sb_printf(s, "\t\tconst int64_t O_ = (%s), CW_ = nc_colw(L_), NCOL_ = (L_ + CW_ - 1) / CW_;\n", u->O);
		sb_printf(s, "\t\tif (O_ * NCOL_ > 0)\n\t\t\tRT->parallel_for(O_ * NCOL_, nc_max(1, 32768 / nc_max(R_ * CW_, 1)), nc_k%d, &ctx);\n", u->kid);
	}
	sb_printf(s, "\t}\n");
}

/* a horizontal group (nc_plan.c `horizontal`): the members' task counts, one parallel loop */
static void emit_hz_launch(nc_graph_t *g, nc_sb_t *s, int p)
{
	const int span = g->u[g->sched[p]].hsize;
	int n = 0;
	for (int i = 0; i < span; i++)
		n += !g->u[g->sched[p + i]].is_epi && !g->u[g->sched[p + i]].is_pro; /* they run inside their GEMM's tasks */
	sb_printf(s, "\t{\n\t\tstatic void (*const F_[%d])(void *, int64_t, int64_t) = {", n);
	for (int i = 0, k = 0; i < span; i++) {
		const nc_unit_t *u = &g->u[g->sched[p + i]];
		if (u->is_epi || u->is_pro)
			continue;
		const nc_node_t *m = &g->n[u->nodes[0]];
		const char *f = u->kind != U_LIB ? "nc_k" : (!strcmp(m->op, "mm") || !strcmp(m->op, "bmm")) ? "nc_gr"
			      : (!strcmp(m->op, "embedding") && u->epi1) ? "nc_er" : "nc_lr";
		sb_printf(s, "%s%s%d", k++ ? ", " : "", f, u->kid);
	}
	sb_printf(s, "};\n\t\tint64_t T_[%d], W_ = 0, N_ = 0;\n", n);
	for (int i = 0, k = 0; i < span; i++) {
		const nc_unit_t *u = &g->u[g->sched[p + i]];
		if (u->is_epi || u->is_pro)
			continue;
		if (u->kind == U_LIB) {
			const nc_node_t *m = &g->n[u->nodes[0]];
			if (!strcmp(m->op, "mm") || !strcmp(m->op, "bmm"))
				sb_printf(s, "\t\t{\n\t\t\tnk_gemm_args_t a_;\n\t\t\tint64_t mb_;\n\t\t\tnc_ga%d(&ctx, &a_);\n"
					     "\t\t\tT_[%d] = nc_gt%d(&a_, &mb_);\n\t\t}\n", u->kid, k, u->kid);
			else if (!strcmp(m->op, "embedding") && u->epi1)
				sb_printf(s, "\t\t{\n\t\t\tnk_embedding_args_t a_;\n\t\t\tint64_t mb_;\n\t\t\tnc_ea%d(&ctx, &a_);\n"
					     "\t\t\tT_[%d] = nc_et%d(&a_, &mb_);\n\t\t}\n", u->kid, k, u->kid);
			else
				sb_printf(s, "\t\tT_[%d] = 1;\n", k);
			/* a library task is heavy: it must not share a chunk with many others */
			sb_printf(s, "\t\tW_ += T_[%d] * 262144;\n\t\tN_ += T_[%d];\n", k, k);
			k++;
			continue;
		}
		sb_printf(s, "\t\t{\n\t\t\tconst int64_t R_ = (%s), L_ = (%s);\n", u->R, u->L);
		if (u->kind == U_PW) {
			sb_printf(s, "\t\t\tconst int64_t CH_ = L_ < NC_CHUNK ? (L_ > 0 ? L_ : 1) : NC_CHUNK;\n");
			sb_printf(s, "\t\t\tT_[%d] = R_ > 0 && L_ > 0 ? R_ * ((L_ + CH_ - 1) / CH_) : 0;\n", k);
			sb_printf(s, "\t\t\tW_ += T_[%d] * CH_;\n", k);
		} else if (u->kind == U_ROW) {
			sb_printf(s, "\t\t\tT_[%d] = R_ > 0 ? R_ : 0;\n", k);
			sb_printf(s, "\t\t\tW_ += T_[%d] * nc_max(L_, 1);\n", k);
		} else {
			sb_printf(s, "\t\t\tconst int64_t O_ = (%s), CW_ = nc_colw(L_), NCOL_ = (L_ + CW_ - 1) / CW_;\n", u->O);
			sb_printf(s, "\t\t\tT_[%d] = O_ * NCOL_ > 0 ? O_ * NCOL_ : 0;\n", k);
			sb_printf(s, "\t\t\tW_ += T_[%d] * nc_max(R_ * CW_, 1);\n", k);
		}
		sb_printf(s, "\t\t\tN_ += T_[%d];\n\t\t\t(void)R_;\n\t\t}\n", k);
		k++;
	}
	sb_printf(s, "\t\tnc_hz_t h_ = {&ctx, %d, F_, T_};\n", n);
	/* grain: about 32768 elements of work per chunk, from the members' mean work per task */
	sb_printf(s, "\t\tif (N_ > 0)\n\t\t\tRT->parallel_for(N_, nc_max(1, (int64_t)(32768.0 * (double)N_ / (double)nc_max(W_, 1))), nc_hz_run, &h_);\n");
	sb_printf(s, "\t\tif (ctx.fail) {\n\t\t\tRT->kernel_fail(\"%%s\", ctx.msg);\n\t\t\treturn 1;\n\t\t}\n\t}\n");
}

static int emit_plan_fn(nc_graph_t *g, nc_sb_t *s)
{
	sb_printf(s, "NC_EXPORT int64_t nc_plan(const int64_t *S, int64_t *off)\n{\n\t(void)S;\n");
	for (int i = 0; i < g->nsyms; i++)
		sb_printf(s, "\tconst int64_t S%d = S[%d]; (void)S%d;\n", i, i, i);
	int n = g->nws;
	sb_printf(s, "\tint64_t sz[%d];\n", n ? n : 1);
	if (n) {
		sb_printf(s, "\tstatic const int st[%d] = {", n);
		for (int i = 0; i < n; i++)
			sb_printf(s, "%s%d", i ? ", " : "", g->v[g->ws[i]].def_step);
		sb_printf(s, "};\n\tstatic const int en[%d] = {", n);
		for (int i = 0; i < n; i++)
			sb_printf(s, "%s%d", i ? ", " : "", g->v[g->ws[i]].last_step);
		sb_printf(s, "};\n");
	}
	for (int i = 0; i < n; i++) {
		const nc_value_t *v = &g->v[g->ws[i]];
		sb_printf(s, "\t{\n\t\tconst int64_t z[%d] = {", v->rank ? v->rank : 1);
		for (int d = 0; d < v->rank; d++)
			sb_printf(s, "%s(%s)", d ? ", " : "", v->size[d]);
		if (!v->rank)
			sb_printf(s, "1");
		sb_printf(s, "}, t[%d] = {", v->rank ? v->rank : 1);
		for (int d = 0; d < v->rank; d++)
			sb_printf(s, "%s(%s)", d ? ", " : "", v->stride[d]);
		if (!v->rank)
			sb_printf(s, "1");
		sb_printf(s, "};\n\t\tsz[%d] = nc_span(%d, z, t, %d);\n\t}\n", i, v->rank, nc_dtype_size(v->dtype));
	}
	if (n)
		sb_printf(s, "\treturn nc_plan_greedy(%d, sz, st, en, off);\n}\n\n", n);
	else
		sb_printf(s, "\t(void)off; (void)sz;\n\treturn 0;\n}\n\n");
	return 0;
}


/* The trace name of the n units scheduled from p on (one kernel, or a horizontal group) of segment seg:
 * "neuron_compiled.seg<seg>/k<kid> " and the ops it computes joined by '+', cut at cap (the ops are
 * identifiers: a valid C string literal). */
static void trace_name(const nc_graph_t *g, int seg, int p, int n, char *buf, size_t cap)
{
	size_t len = (size_t)snprintf(buf, cap, "neuron_compiled.seg%d/k%d ", seg, g->u[g->sched[p]].kid);

	for (int j = 0; j < n && len + 4 < cap; j++) {
		const nc_unit_t *u = &g->u[g->sched[p + j]];

		for (int i = 0; i < u->nnodes && len + 4 < cap; i++) {
			const char *op = g->n[u->nodes[i]].op;
			int w = snprintf(buf + len, cap - len, "%s%s", j || i ? "+" : "", op ? op : "?");

			len = w < 0 || (size_t)w >= cap - len ? cap - 4 : len + (size_t)w;
		}
	}
	if (len >= cap - 4)
		snprintf(buf + cap - 4, 4, "...");
}

int nc_emit(nc_graph_t *g, nc_sb_t *s)
{
	int st = 0;
	truncated = false;
	int *level = nc_calloc((size_t)g->nv + 1, sizeof(int));
	bool *needed = nc_calloc((size_t)g->nn + 1, sizeof(bool));
	if (!level || !needed) {
		st = nc_fail(g, NC_ERR_NOMEM, "out of memory");
		goto out;
	}
	sb_printf(s, "/* generated by the TorchNeuron graph compiler %s */\n#include \"nc_program.h\"\n\n", nc_version());
	sb_printf(s, "static const nc_rt_t *RT;\n\n");
	/* per-kernel names (and times with profiling) for compile_stats */
	sb_printf(s, "NC_EXPORT int64_t nc_prof_ns[%d], nc_prof_calls[%d];\n", g->nkernels + 1, g->nkernels + 1);
	sb_printf(s, "NC_EXPORT const char *const nc_kernel_names[%d] = {", g->nkernels + 1);
	for (int i = 0, first = 1; i < g->nu; i++) {
		const nc_unit_t *u = &g->u[i];
		if (u->kind == U_EAGER || u->dead)
			continue;
		static const char *const kn[] = {"pw", "row", "col", "lib"};
		sb_printf(s, "%s\n\t\"%s:", first ? "" : ",", kn[u->kind]);
		for (int k = 0; k < u->nnodes && k < 24; k++)
			sb_printf(s, " %s", g->n[u->nodes[k]].op);
		sb_printf(s, "%s\"", u->nnodes > 24 ? " ..." : "");
		first = 0;
	}
	sb_printf(s, "};\nNC_EXPORT const int nc_nkernels = %d;\n\n", g->nkernels);
	sb_printf(s, "NC_EXPORT int nc_init(const nc_rt_t *rt)\n{\n\tif (!rt || rt->abi != NC_RT_ABI)\n\t\treturn -1;\n\tRT = rt;\n\treturn 0;\n}\n\n");
	for (int i = 0; i < g->nu && !st; i++)
		if (g->u[i].kind <= U_COL && !g->u[i].dead)
			st = emit_unit(g, s, i, level, needed);
	if (st)
		goto out;
	/* library calls that run inside a horizontal group: task functions */
	sb_printf(s, "static __attribute__((unused)) void nc_task_fail(nc_ctx_t *c)\n{\n"
		     "\tif (!__atomic_exchange_n(&c->fail, 1, __ATOMIC_ACQ_REL)) {\n"
		     "\t\tconst char *m = RT->kernel_msg ? RT->kernel_msg() : NULL;\n"
		     "\t\tsnprintf(c->msg, sizeof c->msg, \"%%s\", m && m[0] ? m : \"library call failed\");\n\t}\n}\n\n");
	for (int i = 0; i < g->nu && !st; i++)
		if (g->u[i].kind == U_LIB && g->u[i].in_hz && !g->u[i].dead && !g->u[i].is_pro)
			st = nc_emit_group_fns(g, s, i);
	if (st)
		goto out;
	for (int k = 0; k < g->nseg && !st; k++) {
		const nc_seg_t *sg = &g->seg[k];
		sb_printf(s, "NC_EXPORT int nc_seg%d(void *args)\n{\n", k);
		sb_printf(s, "\tconst int64_t *S = (const int64_t *)args;\n\tvoid *const *P = (void *const *)(S + %d);\n", g->nsyms);
		sb_printf(s, "\tnc_ctx_t ctx = {S, P};\n\t(void)ctx; (void)P;\n");
		/* while the device trace records, each kernel of the segment is a slice of its own */
		sb_printf(s, "\tconst bool tr_ = RT->trace_on();\n\tint64_t tk_ = 0;\n\t(void)tk_;\n");
		for (int i = 0; i < g->nsyms; i++)
			sb_printf(s, "\tconst int64_t S%d = S[%d]; (void)S%d;\n", i, i, i);
		for (int p = sg->first; p <= sg->last && !st; p++) {
			int ui = g->sched[p];
			const nc_unit_t *u = &g->u[ui];
			if (u->kind == U_EAGER || u->is_epi)
				continue; /* an epilogue is emitted inside its GEMM */
			if (g->profile)
				sb_printf(s, "\tint64_t t%d_ = nc_now_ns();\n", u->kid);
			sb_printf(s, "\tif (tr_)\n\t\ttk_ = nc_now_ns();\n");
			int skip = 0;
			if (u->hsize > 1)
				emit_hz_launch(g, s, p), skip = u->hsize - 1;
			else if (u->kind == U_LIB && u->epi1 && strcmp(g->n[u->nodes[0]].op, "mm"))
				st = nc_fail(g, NC_ERR_INVALID, "internal: the epilogue of unit %d (%s) would not run", ui,
					     g->n[u->nodes[0]].op); /* only 2-D GEMMs run one outside a group */
			else if (u->kind == U_LIB)
				st = nc_emit_lib(g, s, u->nodes[0]);
			else
				emit_launch(g, s, ui);
			if (g->profile)
				sb_printf(s, "\tnc_prof_ns[%d] += nc_now_ns() - t%d_;\n\tnc_prof_calls[%d]++;\n", u->kid, u->kid, u->kid);
			{
				char name[112];

				trace_name(g, k, p, skip + 1, name, sizeof name);
				sb_printf(s, "\tif (tr_)\n\t\tRT->trace_sub(\"%s\", tk_, nc_now_ns());\n", name);
			}
			p += skip; /* the group's other members ran inside its kernel */
		}
		sb_printf(s, "\treturn 0;\n}\n\n");
	}
	sb_printf(s, "NC_EXPORT const char *nc_seg_name(int k)\n{\n\tstatic const char *const names[] = {");
	for (int k = 0; k < g->nseg; k++)
		sb_printf(s, "%s\"neuron_compiled.seg%d\"", k ? ", " : "", k);
	if (!g->nseg)
		sb_printf(s, "\"\"");
	sb_printf(s, "};\n\treturn k >= 0 && k < %d ? names[k] : \"neuron_compiled\";\n}\n\n", g->nseg);
	st = emit_plan_fn(g, s);
	if (!st && truncated)
		st = nc_fail(g, NC_ERR_INVALID, "an index expression is too long for the code generator");
out:
	free(level);
	free(needed);
	return st;
}

int nc_emit_plan(nc_graph_t *g, nc_sb_t *p)
{
	static const char *const kinds[] = {"pw", "row", "col", "lib", "eager"};
	sb_printf(p, "ncplan 1\nsyms %d\n", g->nsyms);
	for (int s = 0; s < g->nsched; s++) {
		const nc_unit_t *u = &g->u[g->sched[s]];
		sb_printf(p, "unit %d %s %d", g->sched[s], kinds[u->kind], u->nnodes);
		for (int i = 0; i < u->nnodes; i++)
			sb_printf(p, " %d", g->n[u->nodes[i]].id);
		sb_printf(p, "\n");
	}
	for (int k = 0; k < g->nseg; k++) {
		const nc_seg_t *sg = &g->seg[k];
		sb_printf(p, "seg %d %d", k, sg->nroots);
		for (int i = 0; i < sg->nroots; i++)
			sb_printf(p, " %d", sg->roots[i]);
		sb_printf(p, "\n");
	}
	int last_seg = -1;
	for (int s = 0; s < g->nsched; s++) {
		const nc_unit_t *u = &g->u[g->sched[s]];
		if (u->kind == U_EAGER) {
			sb_printf(p, "step E %d\n", g->n[u->nodes[0]].id);
		} else if (u->seg != last_seg) {
			sb_printf(p, "step K %d\n", u->seg);
			last_seg = u->seg;
		}
	}
	sb_printf(p, "ws %d", g->nws);
	for (int i = 0; i < g->nws; i++)
		sb_printf(p, " %d", g->ws[i]);
	int next = 0;
	for (int i = 0; i < g->nv; i++)
		next += g->v[i].storage == ST_EXT;
	sb_printf(p, "\next %d", next);
	for (int i = 0; i < g->nv; i++)
		if (g->v[i].storage == ST_EXT)
			sb_printf(p, " %d", i);
	sb_printf(p, "\nkernels %d\nend\n", g->nkernels - g->nepi - g->npro - g->nhz); /* a GEMM with its epilogue and prologue is one kernel,
	                                                                    * so is a horizontal group */
	return 0;
}
