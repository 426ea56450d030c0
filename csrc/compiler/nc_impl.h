/* nc_impl.h - the graph compiler's internal structures (only csrc/compiler includes this).
 *
 * Pipeline (nc.c): parse (nc_ir.c) -> fuse into units (nc_fuse.c) -> schedule, materialize, plan
 * storage and segments (nc_plan.c) -> emit C (nc_emit.c, library calls in nc_emit_lib.c).
 *
 * Sizes, strides and offsets stay the C expression strings the frontend wrote (integers or
 * expressions over the symbols S0..); the compiler compares them as strings (the frontend writes them
 * in sympy's canonical form) and pastes them into the generated code.
 */
#ifndef NC_IMPL_H
#define NC_IMPL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nc.h"

#define NC_VERSION "nc-0.4.0" /* in every program's cache key: bump when the generated code changes */
#define NC_MAX_RANK 16
#define NC_MAX_PTRS 240 /* pointers per segment launch (NRT_MAX_ARGS bytes with the symbols) */

/* ---- memory and strings ----------------------------------------------------------------------- */
/* every heap allocation of the compiler goes through these (nc_ir.c), so a test can fail the Nth one
 * (nc_fault_after in nc.h) */
void *nc_malloc(size_t n);
void *nc_calloc(size_t n, size_t size);
void *nc_realloc(void *p, size_t n);
char *nc_strdup_heap(const char *s);
typedef struct nc_block nc_block_t;
typedef struct {
	nc_block_t *head;
	bool oom;
} nc_arena_t;
void *nc_alloc(nc_arena_t *a, size_t n); /* zeroed; NULL (and a->oom) on failure */
char *nc_strdup(nc_arena_t *a, const char *s);
void nc_arena_free(nc_arena_t *a);

typedef struct {
	char *buf;
	size_t len, cap;
	bool oom;
} nc_sb_t;
void sb_printf(nc_sb_t *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_free(nc_sb_t *sb);

/* ---- dtypes (the order of nk_dtype_t) -------------------------------------------------------------- */
enum { NC_BOOL, NC_U8, NC_I8, NC_I16, NC_I32, NC_I64, NC_F16, NC_BF16, NC_F32, NC_F64, NC_NDTYPES };
int nc_dtype_parse(const char *s);
const char *nc_dtype_name(int dt);
int nc_dtype_size(int dt);
bool nc_dtype_is_float(int dt);
const char *nc_ctype_storage(int dt);  /* element type in memory: float, uint16_t (bf16/f16), ... */
const char *nc_ctype_reg(int dt);      /* type of a value in a register: float for bf16/f16 */

/* ---- graph ---------------------------------------------------------------------------------------- */
enum { CLS_NONE, CLS_FULL, CLS_ROW, CLS_COL };          /* a value's index space inside its unit */
enum { ST_NONE, ST_INPUT, ST_EAGER, ST_EXT, ST_WS, ST_INTO }; /* where a root buffer lives; ST_INTO: stored
								 * into the graph input `into` (in place) */

typedef struct {
	int id, dtype, rank;
	const char *size[NC_MAX_RANK], *stride[NC_MAX_RANK], *off;
	const char *sp[NC_MAX_RANK + 1], *pp[NC_MAX_RANK + 1], *lin[NC_MAX_RANK + 1];
	bool on_device, is_input, is_output;
	int producer;     /* node index, -1 for inputs */
	int view_of;      /* base value of a view, -1 otherwise */
	bool reshape;     /* produced by a row-major-preserving view */
	int root;         /* the non-view ancestor */
	int into;         /* an input mutation (IR `mut`): this value is written into input `into`, -1 */
	int *users;       /* nodes reading this value directly (V nodes included) */
	int nusers, users_cap;
	/* after fusion and planning */
	int cls;
	bool mat;         /* stored in memory (roots only) */
	int storage;      /* ST_* for roots */
	int ws_index;
	int def_step, last_step;
} nc_value_t;

typedef struct {
	char kind;        /* 'v' value, 'f' float, 'i' int, 'e' integer expression */
	int v;
	double f;
	int64_t i;
	const char *e;
	const char *ftext; /* the float as written (exact decimal) */
} nc_opnd_t;

typedef struct {
	int id, index;
	char kind;        /* V P R L E */
	const char *op;
	int nout, nin, nattr;
	int *outs;        /* value ids, -1 for absent outputs */
	nc_opnd_t *ins;   /* value operands have v = value id, or -1 for an absent (None) input */
	const char **attrs;
	int cdtype;       /* P: compute dtype; R: result dtype */
	bool keepdim;
	int ndims, dims[NC_MAX_RANK];
	bool barrier;     /* E: mutating op */
	bool free;        /* P without tensor operands whose value does not depend on the index */
	int unit;         /* -1: none (views, free nodes) */
} nc_node_t;

enum { U_PW, U_ROW, U_COL, U_LIB, U_EAGER };

typedef struct {
	int kind;
	const char *N, *R, *L; /* PW/ROW/COL: elements, rows, row length (column count for COL) */
	const char *O, *RL, *C; /* COL: outer count, R*L (a suffix product), elements of a COL value;
				 * ROW: C = R.  A COL unit covers O blocks of R rows of L columns. */
	int *nodes, nnodes, nodes_cap;
	int *deps, ndeps, deps_cap; /* units this one reads from (or must follow) */
	int first;        /* smallest node index: the scheduling priority */
	int step;         /* position in the schedule */
	int seg;          /* segment, -1 for eager units */
	int kid;          /* kernel number in the generated code */
	bool dead;
	int epi1;         /* LIB mm: 1 + the PW unit run as its epilogue (row block by row block), or 0 */
	bool is_epi;      /* PW: runs inside the preceding GEMM (no launch of its own) */
	int hsize;        /* leader of a horizontal group: its members (this one and the next hsize-1
	                   * in the schedule) run as one kernel; 0 otherwise */
	bool in_hz;       /* a member of a horizontal group (leader included) */
	int pro1;         /* LIB mm: 1 + the layer norm run as its prologue (row block by row block), or 0 */
	bool is_pro;      /* LIB layernorm: runs inside the following GEMM (no launch of its own) */
	int grp;          /* 1 + schedule position of the first unit of its dependency group (regroup), 0 */
} nc_unit_t;

typedef struct {
	int *roots, nroots, cap; /* value ids whose pointers the launch passes, in order */
	int first, last;         /* schedule range */
} nc_seg_t;

typedef struct {
	nc_arena_t A;
	int nsyms;
	bool profile;             /* time every kernel (NEURON_COMPILE_PROFILE) */
	nc_value_t *v;
	int nv;
	nc_node_t *n;
	int nn;
	int *inputs, nin, *outputs, nout;
	nc_unit_t *u;
	int nu, u_cap;
	int *sched, nsched;
	nc_seg_t *seg;
	int nseg, seg_cap;
	int *ws, nws;             /* workspace roots in plan order */
	int nkernels;
	int nepi;                 /* PW units fused into a GEMM as its epilogue */
	int npro;                 /* layer norms fused into a GEMM as its prologue */
	int nhz;                  /* units run inside a horizontal group led by another unit */
	nc_sb_t log;
	char err[512];
} nc_graph_t;

int nc_fail(nc_graph_t *g, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void nc_log(nc_graph_t *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int nc_parse(nc_graph_t *g, const char *ir);
int nc_fuse(nc_graph_t *g);
int nc_plan(nc_graph_t *g);
int nc_mutations(nc_graph_t *g); /* checks in-place input writes, orders the readers first */
int nc_emit(nc_graph_t *g, nc_sb_t *src);
int nc_emit_plan(nc_graph_t *g, nc_sb_t *plan);
int nc_emit_lib(nc_graph_t *g, nc_sb_t *s, int node); /* one library call inside a segment */
int nc_emit_group_fns(nc_graph_t *g, nc_sb_t *s, int unit); /* task functions of a library call in a group */

/* helpers shared by the passes */
bool nc_streq(const char *a, const char *b);
bool nc_is_one(const char *e);
bool nc_is_zero(const char *e);
int nc_root_producer_unit(nc_graph_t *g, int value, bool *transparent); /* through the view chain */
int nc_sp_index(const nc_value_t *v, const char *L);                    /* d with sp[d]==L, or -1 */
void nc_add_dep(nc_graph_t *g, int unit, int dep);
nc_unit_t *nc_new_unit(nc_graph_t *g, int kind, int *index);
int nc_unit_add(nc_graph_t *g, int unit, int node);

#endif /* NC_IMPL_H */
