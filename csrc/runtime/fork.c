/* fork.c - a child forked after the runtime started its threads is refused (see nrt_in_forked_child).
 */
#include "nrt_impl.h"

atomic_bool nrt_forked_child;
static atomic_bool threads_started;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* In the child (the only thread left): the queue workers and the pool are gone, and a lock or an exec
 * claim one of them held stays held; refuse device use instead of hanging on it. */
static void atfork_child(void)
{
	if (atomic_load(&threads_started))
		atomic_store(&nrt_forked_child, true);
}

static void atfork_register(void)
{
	(void)pthread_atfork(NULL, NULL, atfork_child);
}

void nrt_note_thread_start(void)
{
	pthread_once(&atfork_once, atfork_register);
	atomic_store(&threads_started, true);
}

bool nrt_in_forked_child(void)
{
	return nrt_bad_fork();
}

int nrt_fork_error(void)
{
	return nrt_set_error(NRT_ERR_FORK, "Cannot re-initialize neuron in forked subprocess. To use neuron with "
			     "multiprocessing, you must use the 'spawn' start method (this process was forked after "
			     "the neuron runtime had started its threads)");
}
