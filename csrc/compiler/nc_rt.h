/* nc_rt.h - the runtime table: the functions a generated program calls (the pool, kernel errors and
 * the kernel library's entry points).  Programs never link against the runtime or the kernel
 * library; nc_init() receives this table, which nc_rt_table() (nc_rt.c) fills from the library that
 * holds them.  The prelude of every program pastes this header (nc_program.h).
 */
#ifndef NC_RT_H
#define NC_RT_H

#include <stdbool.h>
#include <stdint.h>

#define NC_RT_ABI 3
typedef struct nc_rt {
	int64_t abi;
	void (*parallel_for)(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t b, int64_t e), void *ctx);
	void (*kernel_fail)(const char *fmt, ...);
	int (*gemm)(void *);
	int (*softmax)(void *);
	int (*softmax_bwd)(void *);
	int (*layernorm)(void *);
	int (*layernorm_bwd)(void *);
	int (*embedding)(void *);
	int (*embedding_bwd)(void *);
	int (*nll)(void *);
	int (*nll_bwd)(void *);
	int (*attention)(void *);
	int (*attention_bwd)(void *);
	int (*reduce)(void *);
	int (*copy)(void *);
	const char *(*kernel_msg)(void); /* the calling thread's last nrt_kernel_fail message (ABI 2) */
	int (*num_threads)(void);         /* threads of the pool (ABI 2) */
	/* the device trace (ABI 3): whether it records, and one kernel of the running segment as a slice of
	 * its own inside the segment's (nrt_trace_sub; name a string literal of the program) */
	bool (*trace_on)(void);
	void (*trace_sub)(const char *name, int64_t t0, int64_t t1);
} nc_rt_t;

#endif /* NC_RT_H */
