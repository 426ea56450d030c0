/* nc.h - TorchNeuron graph compiler: ATen graph IR in, C source and an execution plan out.
 *
 * The Python frontend serializes each AOTAutograd graph into a text IR (docs/compiler.md).  The
 * compiler builds a graph IR, fuses pointwise chains with each other and into reductions (row
 * reductions with multi-pass epilogues, column reductions), plans one workspace arena per program
 * with buffer reuse by liveness, groups kernels into segments (one queue launch each) and emits C
 * source.  Library ops (GEMM, layer norm, attention, ...) become calls through the runtime's function
 * table; ops it cannot compile stay "eager" steps of the plan, run by the frontend between segments.
 *
 * The compiler does not run the C compiler or load code: the frontend does (and caches the result).
 * Nothing here exits or aborts; every function returns a status or NULL.
 */
#ifndef NC_H
#define NC_H

#include "nc_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
	NC_OK = 0,
	NC_ERR_PARSE = -1,    /* malformed IR: the message gives the token and position */
	NC_ERR_INVALID = -2,  /* well-formed IR that breaks an invariant (unknown value, bad rank) */
	NC_ERR_NOMEM = -3,
};

typedef struct nc_result nc_result_t;

/* Compiles one graph.  Returns NC_OK and *out, or a negative status and *out holding only the error
 * message (nc_result_error).  *out is NULL only when even that could not be allocated. */
int nc_compile(const char *ir, nc_result_t **out);
const char *nc_result_source(const nc_result_t *r); /* the generated C (without the prelude) */
const char *nc_result_plan(const nc_result_t *r);   /* the execution plan for the frontend */
const char *nc_result_log(const nc_result_t *r);    /* fusion decisions, one line each */
const char *nc_result_error(const nc_result_t *r);  /* "" on success */
void nc_result_free(nc_result_t *r);

const char *nc_version(void);
/* The prelude of every generated program: nc_program.h with its local includes pasted in, embedded
 * at build time (static storage). */
const char *nc_prelude(void);
/* The runtime table a program's nc_init() takes, filled from the runtime and kernel library linked
 * with the compiler (nc_rt.c). */
const nc_rt_t *nc_rt_table(void);
const char *nc_status_string(int status);

/* Testing: the nth heap allocation of the compiler from now fails (n <= 0: none); nc_compile must
 * then return NC_ERR_NOMEM (or the error the failure caused) and leak nothing.  Process-wide. */
void nc_fault_after(long n);

#ifdef __cplusplus
}
#endif
#endif /* NC_H */
