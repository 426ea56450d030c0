/* nc_rt.c - the runtime table programs are initialized with (nc_rt.h), filled from the runtime and
 * the kernel library linked beside the compiler.  The compiler itself never calls these. */
#include "nc.h"
#include "nk.h"
#include "nrt.h"
#include "nrt_observe.h"

/* the calling thread's last nrt_kernel_fail message (csrc/runtime/error.c; declared in the
 * runtime's internal header, which nothing outside csrc/runtime includes) */
const char *nrt_kernel_fail_message(void);

static const nc_rt_t table = {
	.abi = NC_RT_ABI,
	.parallel_for = nrt_parallel_for,
	.kernel_fail = nrt_kernel_fail,
	.gemm = nk_gemm_run,
	.softmax = nk_softmax_run,
	.softmax_bwd = nk_softmax_bwd_run,
	.layernorm = nk_layernorm_run,
	.layernorm_bwd = nk_layernorm_bwd_run,
	.embedding = nk_embedding_run,
	.embedding_bwd = nk_embedding_bwd_run,
	.nll = nk_nll_run,
	.nll_bwd = nk_nll_bwd_run,
	.attention = nk_attention_run,
	.attention_bwd = nk_attention_bwd_run,
	.reduce = nk_reduce_run,
	.copy = nk_copy_run,
	.kernel_msg = nrt_kernel_fail_message,
	.num_threads = nrt_num_threads,
	.trace_on = nrt_trace_on,
	.trace_sub = nrt_trace_sub,
};

const nc_rt_t *nc_rt_table(void) { return &table; }
