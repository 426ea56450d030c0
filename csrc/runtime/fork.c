/* fork.c - fork: the runtime's locks are never caught held, and a child forked after the runtime
 * started its threads is refused (see nrt_in_forked_child).
 *
 * The prepare handler takes every lock of the runtime in its one order (the init lock, each device's
 * queue list, each queue's launch lock, the allocators, the pointer map, each queue's parking and
 * error locks, the trace, pinned host memory, the fusion registry: the order the runtime's own paths
 * nest them in) and the
 * parent and child handlers release them, so the child's copy of every lock is free: a child of a
 * process whose other threads were allocating, launching or reading statistics at the fork uses the
 * device (when no runtime thread existed) instead of hanging on a lock nobody will release.  The
 * prepare handler waits for the holders, which hold these locks briefly (a launcher facing a full ring
 * waits for its queue to drain an eighth, which the worker does without any of them).  Events' own
 * locks (one per event, held for a few loads) and the kernel pool's (which exists only with runtime
 * threads, whose children are refused anyway) are not taken. */
#include "nrt_impl.h"

atomic_bool nrt_forked_child;
static atomic_bool threads_started;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* In the child (the only thread left): the queue workers and the pool are gone, and a lock or an exec
 * claim one of them held stays held; refuse device use instead of hanging on it. */
static void atfork_prepare(void)
{
	nrt_device_fork_locks(true);
	nrt_queue_fork_locks(0, true);
	nrt_alloc_fork_locks(true);
	nrt_queue_fork_locks(1, true);
	nrt_host_fork_locks(true);
	nrt_fuse_fork_locks(true);
}

static void atfork_release(void)
{
	nrt_fuse_fork_locks(false);
	nrt_host_fork_locks(false);
	nrt_queue_fork_locks(1, false);
	nrt_alloc_fork_locks(false);
	nrt_queue_fork_locks(0, false);
	nrt_device_fork_locks(false);
}

static void atfork_child(void)
{
	if (atomic_load(&threads_started))
		atomic_store(&nrt_forked_child, true);
	atfork_release();
}

static void atfork_register(void)
{
	(void)pthread_atfork(atfork_prepare, atfork_release, atfork_child);
}

void nrt_fork_register(void)
{
	pthread_once(&atfork_once, atfork_register);
}

void nrt_note_thread_start(void)
{
	nrt_fork_register();
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
