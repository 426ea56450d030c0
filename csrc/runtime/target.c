/* target.c - the host NeuronCore, the first implementation of the target interface (nrt_target.h), and
 * the per-device target switch.
 *
 * Memory: segments are host memory.  Those whose size is a multiple of 2 MiB (all but a large request
 * that does not fit as a 2 MiB multiple under the limit) are 2 MiB-aligned and advised as transparent
 * huge pages (NEURON_HUGEPAGES=0 turns that off): a kernel streaming a 224 MiB weight then walks 112
 * pages instead of 57,344, and a new segment costs one fault per 2 MiB on first touch.  Kernels run on
 * the thread that executes the queue, joined by the kernel pool; copies of more than 2 MiB that do not
 * overlap are split over the pool.  Synchronize and the event hooks have nothing to add to what the
 * queue executor already did.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "nrt_impl.h"

#define HOST_SEGMENT_ALIGN ((size_t)4096)
#define HOST_HUGE_PAGE ((size_t)2 << 20)
#define HOST_COPY_GRAIN ((int64_t)1 << 20)

static atomic_bool huge_pages = true;

void nrt_set_hugepages(bool on)
{
	atomic_store(&huge_pages, on);
}

static int host_alloc(void *ctx, int dev, size_t size, void **ptr)
{
	bool huge = size % HOST_HUGE_PAGE == 0 && atomic_load_explicit(&huge_pages, memory_order_relaxed);

	*ptr = NULL;
	if (posix_memalign(ptr, huge ? HOST_HUGE_PAGE : HOST_SEGMENT_ALIGN, size))
		return NRT_ERR_OOM;
#ifdef MADV_HUGEPAGE
	if (huge)
		(void)madvise(*ptr, size, MADV_HUGEPAGE); /* advice only: 4 KiB pages if the kernel says no */
#endif
	return NRT_OK;
}

static void host_free(void *ctx, int dev, void *ptr, size_t size)
{
	free(ptr);
}

static int host_launch(void *ctx, int dev, int queue, nrt_kernel_fn fn, void *args)
{
	return fn(args);
}

struct copy_job {
	char *dst;
	const char *src;
};

static void copy_chunk(void *p, int64_t begin, int64_t end)
{
	struct copy_job *c = p;

	memcpy(c->dst + begin, c->src + begin, (size_t)(end - begin));
}

static int host_copy(void *ctx, int dev, int queue, void *dst, const void *src, size_t n)
{
	struct copy_job c = { dst, src };
	bool overlap = c.dst < c.src + n && c.src < c.dst + n;

	if (!overlap && n > (size_t)HOST_COPY_GRAIN * 2 && n <= INT64_MAX)
		nrt_parallel_for((int64_t)n, HOST_COPY_GRAIN, copy_chunk, &c);
	else
		memmove(dst, src, n);
	return 0;
}

static const nrt_target_t host_target = {
	.iface = {
		.name = "host NeuronCore",
		.alloc = host_alloc,
		.free = host_free,
		.launch = host_launch,
		.copy = host_copy,
		.host_fusion = true,
	},
};

const nrt_target_t *nrt_target_host(void)
{
	return &host_target;
}

const nrt_target_t *nrt_target_get(int dev)
{
	struct nrt_device *d;
	const nrt_target_t *t;

	if (nrt_init() || !nrt_device_valid(dev))
		return NULL;
	d = &nrt_devices[dev];
	pthread_mutex_lock(&d->queues_lock);
	t = d->target ? d->target : &host_target;
	pthread_mutex_unlock(&d->queues_lock);
	return t;
}

int nrt_target_set(int dev, const nrt_target_t *t)
{
	struct nrt_device *d;
	int rc;

	if (nrt_bad_fork())
		return nrt_fork_error();
	if ((rc = nrt_init()))
		return rc;
	if (!nrt_device_valid(dev))
		return nrt_set_error(NRT_ERR_INVALID, "nrt_target_set: no device neuron:%d", dev);
	if (!t)
		t = &host_target;
	if (!t->iface.alloc || !t->iface.free || !t->iface.launch || !t->iface.copy)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_target_set: target '%s' lacks alloc, free, launch or copy",
				     t->iface.name ? t->iface.name : "?");
	if ((rc = nrt_device_synchronize(dev)))
		return rc; /* a pending kernel error belongs to the old target's work: report it first */
	nrt_empty_cache(dev);
	d = &nrt_devices[dev];
	pthread_mutex_lock(&d->queues_lock);
	rc = nrt_alloc_set_target(dev, t);
	if (!rc) {
		d->target = t;
		for (struct nrt_queue *q = d->queues; q; q = q->next)
			atomic_store(&q->target, t);
	}
	pthread_mutex_unlock(&d->queues_lock);
	return rc;
}
