/* host.c - pinned host memory: page-aligned blocks kept in an array sorted by address, so
 * nrt_host_is_pinned answers for interior pointers with a binary search.  The memory is not mlock()ed:
 * on a host NeuronCore "pinned" only means "owned by the runtime and safe for async copies".
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nrt_impl.h"

struct host_block {
	uintptr_t base;
	size_t size;
};

static struct {
	pthread_mutex_t lock;
	struct host_block *v;
	size_t n, cap;
} host = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Index of the first block with base > p. */
static size_t upper_bound(uintptr_t p)
{
	size_t lo = 0, hi = host.n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (host.v[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int nrt_host_alloc(size_t nbytes, void **ptr)
{
	long psz = sysconf(_SC_PAGESIZE);
	size_t page = psz > 0 ? (size_t)psz : 4096, size, i;
	void *p = NULL;
	int rc = NRT_OK;

	if (!ptr)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_host_alloc: null output");
	*ptr = NULL;
	if (!nbytes)
		return NRT_OK;
	if (nbytes > SIZE_MAX - page)
		return nrt_set_error(NRT_ERR_HOST, "nrt_host_alloc: %zu bytes is too large", nbytes);
	size = (nbytes + page - 1) / page * page;
	if (posix_memalign(&p, page, size))
		return nrt_set_error(NRT_ERR_HOST, "nrt_host_alloc: the host refused %zu bytes", size);
	pthread_mutex_lock(&host.lock);
	if (host.n == host.cap) {
		size_t cap = host.cap ? host.cap * 2 : 64;
		struct host_block *v = realloc(host.v, cap * sizeof *v);

		if (!v) {
			rc = nrt_set_error(NRT_ERR_HOST, "nrt_host_alloc: out of host memory for bookkeeping");
			goto unlock;
		}
		host.v = v;
		host.cap = cap;
	}
	i = upper_bound((uintptr_t)p);
	memmove(&host.v[i + 1], &host.v[i], (host.n - i) * sizeof *host.v);
	host.v[i].base = (uintptr_t)p;
	host.v[i].size = size;
	host.n++;
	*ptr = p;
unlock:
	pthread_mutex_unlock(&host.lock);
	if (rc)
		free(p);
	return rc;
}

int nrt_host_free(void *ptr)
{
	size_t i;

	if (!ptr)
		return NRT_OK;
	pthread_mutex_lock(&host.lock);
	i = upper_bound((uintptr_t)ptr);
	if (i == 0 || host.v[i - 1].base != (uintptr_t)ptr) {
		pthread_mutex_unlock(&host.lock);
		return nrt_set_error(NRT_ERR_INVALID, "nrt_host_free: %p is not a pinned host allocation", ptr);
	}
	memmove(&host.v[i - 1], &host.v[i], (host.n - i) * sizeof *host.v);
	host.n--;
	if (!host.n) { /* give the bookkeeping back when nothing is pinned */
		free(host.v);
		host.v = NULL;
		host.cap = 0;
	}
	pthread_mutex_unlock(&host.lock);
	free(ptr);
	return NRT_OK;
}

bool nrt_host_is_pinned(const void *ptr)
{
	uintptr_t p = (uintptr_t)ptr;
	bool hit = false;
	size_t i;

	pthread_mutex_lock(&host.lock);
	i = upper_bound(p);
	if (i > 0 && p - host.v[i - 1].base < host.v[i - 1].size)
		hit = true;
	pthread_mutex_unlock(&host.lock);
	return hit;
}

void nrt_host_fork_locks(bool lock)
{
	if (lock)
		pthread_mutex_lock(&host.lock);
	else
		pthread_mutex_unlock(&host.lock);
}
