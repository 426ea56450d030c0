/* alloc.c - per-device arena accounting and the caching allocator (after PyTorch's
 * CUDACachingAllocator, simplified).
 *
 * Sizes round up to 512 bytes.  Requests up to 1 MiB come from the small pool, carved out of 2 MiB
 * segments; larger ones from the large pool: 20 MiB segments for requests under 10 MiB (or, if that
 * does not fit under the limit, the request rounded to 2 MiB), else the request rounded to 2 MiB.
 * Free blocks live in one treap per pool keyed by (queue id, size, address), so a best fit for a queue is
 * a lower-bound search.  A block taken from a larger free block is split (remainder >= 512 bytes in the
 * small pool, > 1 MiB in the large pool); a freed block merges with free neighbours of its segment.
 * A segment goes back to the OS only when it is one free block again (empty_cache, or before the OOM
 * retry), and only once its queue has run every record submitted before the segment's last free: a
 * tensor freed while its kernels are still queued is reusable at once by later work on its queue (which
 * runs after them) but its memory stays the arena's until those kernels are done.
 *
 * Queue ownership: a block belongs to the queue it was allocated on and only that queue's allocations
 * reuse it, at once after nrt_free (the queue is in order).  nrt_record_queue(ptr, q2) adds q2 to the
 * block's uses; nrt_free then notes q2's submitted count and parks the block on the pending list until
 * q2's worker has passed that point.  Pending blocks are polled by malloc, empty_cache and the
 * synchronizing calls.
 *
 * Fault injection counts nrt_malloc calls that need a new segment: the chosen one fails every attempt,
 * so it goes through the retry (num_alloc_retries) and ends in NRT_ERR_OOM (num_ooms).
 *
 * Segments come from the device's target (nrt_target.h: alloc and free); the host NeuronCore's are
 * described in target.c.
 *
 * Locking: one mutex per device for everything above; a global mutex for the pointer map (taken inside
 * the device mutex, never the other way).  The hot path (a cached block fits) makes no syscall: block
 * structs are recycled through a per-device spare list.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrt_impl.h"

#define NRT_MIN_BLOCK ((size_t)512)
#define NRT_SMALL_SIZE ((size_t)1 << 20)
#define NRT_SMALL_BUFFER ((size_t)2 << 20)
#define NRT_LARGE_BUFFER ((size_t)20 << 20)
#define NRT_MIN_LARGE_ALLOC ((size_t)10 << 20)
#define NRT_ROUND_LARGE ((size_t)2 << 20)

/* One allocator per device index, initialized when the device is created (device.c calls
 * nrt_alloc_device_init) and never torn down; ready stays set when a reinit hides the device. */
static struct nrt_alloc allocs[NRT_MAX_DEVICES];

/* The allocator of dev, or NULL if that device was never created. */
static struct nrt_alloc *alloc_at(int dev)
{
	if (dev < 0 || dev >= NRT_MAX_DEVICES || !atomic_load_explicit(&allocs[dev].ready, memory_order_acquire))
		return NULL;
	return &allocs[dev];
}

static atomic_int_fast64_t fault_countdown;
static _Atomic(nrt_mem_observer_fn) mem_observer;

void nrt_set_mem_observer(nrt_mem_observer_fn fn)
{
	atomic_store(&mem_observer, fn);
}
/* ---- pointer map (live blocks) -------------------------------------------------------------------- */
static struct {
	pthread_mutex_t lock;
	struct nrt_block **b;
	size_t nb, count;
} map = { .lock = PTHREAD_MUTEX_INITIALIZER };

static size_t map_slot(const void *p, size_t nb)
{
	return (size_t)((((uintptr_t)p >> 9) * UINT64_C(0x9E3779B97F4A7C15)) >> 17) & (nb - 1);
}

/* Doubles the table; on failure the chains just get longer. */
static void map_grow(void)
{
	size_t nb = map.nb ? map.nb * 2 : 1024;
	struct nrt_block **b = calloc(nb, sizeof *b);

	if (!b)
		return;
	for (size_t i = 0; i < map.nb; i++) {
		struct nrt_block *x = map.b[i], *nx;

		for (; x; x = nx) {
			size_t s = map_slot(x->ptr, nb);

			nx = x->hnext;
			x->hnext = b[s];
			b[s] = x;
		}
	}
	free(map.b);
	map.b = b;
	map.nb = nb;
}

static void map_insert(struct nrt_block *blk)
{
	size_t s;

	pthread_mutex_lock(&map.lock);
	if (map.count >= map.nb)
		map_grow();
	if (!map.nb) { /* first allocation of the table failed: keep the block out of the map */
		pthread_mutex_unlock(&map.lock);
		return;
	}
	s = map_slot(blk->ptr, map.nb);
	blk->hnext = map.b[s];
	map.b[s] = blk;
	map.count++;
	pthread_mutex_unlock(&map.lock);
}

static struct nrt_block *map_find_locked(const void *p)
{
	struct nrt_block *x;

	if (!map.nb)
		return NULL;
	for (x = map.b[map_slot(p, map.nb)]; x && x->ptr != p; x = x->hnext)
		;
	return x;
}

/* Returns the live block at p and its device, or NULL. */
static struct nrt_block *map_find(const void *p, int *dev)
{
	struct nrt_block *x;

	pthread_mutex_lock(&map.lock);
	x = map_find_locked(p);
	if (x)
		*dev = x->dev;
	pthread_mutex_unlock(&map.lock);
	return x;
}

static void map_remove(struct nrt_block *blk)
{
	struct nrt_block **pp;

	pthread_mutex_lock(&map.lock);
	if (map.nb) {
		for (pp = &map.b[map_slot(blk->ptr, map.nb)]; *pp && *pp != blk; pp = &(*pp)->hnext)
			;
		if (*pp) {
			*pp = blk->hnext;
			map.count--;
		}
	}
	blk->hnext = NULL;
	pthread_mutex_unlock(&map.lock);
}

/* ---- free-block treap --------------------------------------------------------------------------- */
static int key_cmp(const struct nrt_block *b, int qid, size_t size, const char *ptr)
{
	if (b->qid != qid)
		return b->qid < qid ? -1 : 1;
	if (b->size != size)
		return b->size < size ? -1 : 1;
	if (b->ptr != ptr)
		return (uintptr_t)b->ptr < (uintptr_t)ptr ? -1 : 1;
	return 0;
}

static struct nrt_block *treap_insert(struct nrt_block *root, struct nrt_block *n)
{
	struct nrt_block *c;

	if (!root)
		return n;
	if (key_cmp(n, root->qid, root->size, root->ptr) < 0) {
		root->left = treap_insert(root->left, n);
		if (root->left->prio > root->prio) {
			c = root->left;
			root->left = c->right;
			c->right = root;
			return c;
		}
	} else {
		root->right = treap_insert(root->right, n);
		if (root->right->prio > root->prio) {
			c = root->right;
			root->right = c->left;
			c->left = root;
			return c;
		}
	}
	return root;
}

static struct nrt_block *treap_join(struct nrt_block *l, struct nrt_block *r)
{
	if (!l)
		return r;
	if (!r)
		return l;
	if (l->prio > r->prio) {
		l->right = treap_join(l->right, r);
		return l;
	}
	r->left = treap_join(l, r->left);
	return r;
}

static struct nrt_block *treap_remove(struct nrt_block *root, struct nrt_block *n)
{
	if (!root)
		return NULL;
	if (root == n)
		return treap_join(n->left, n->right);
	if (key_cmp(n, root->qid, root->size, root->ptr) < 0)
		root->left = treap_remove(root->left, n);
	else
		root->right = treap_remove(root->right, n);
	return root;
}

/* Smallest free block of queue qid with at least size bytes. */
static struct nrt_block *treap_best_fit(struct nrt_block *x, int qid, size_t size)
{
	struct nrt_block *best = NULL;

	while (x) {
		if (key_cmp(x, qid, size, NULL) >= 0) {
			best = x;
			x = x->left;
		} else {
			x = x->right;
		}
	}
	return best && best->qid == qid ? best : NULL;
}

/* ---- stats and pools ----------------------------------------------------------------------------- */
static void stat_add(nrt_stat_t *s, int64_t n)
{
	s->current += n;
	if (s->current > s->peak)
		s->peak = s->current;
	s->allocated += n;
}

static void stat_sub(nrt_stat_t *s, int64_t n)
{
	s->current -= n;
	s->freed += n;
}

static bool is_split(const struct nrt_block *b)
{
	return b->prev || b->next;
}

static struct nrt_pool_tree *pool_of(struct nrt_alloc *a, const struct nrt_block *b)
{
	return b->small ? &a->small : &a->large;
}

static void pool_insert(struct nrt_alloc *a, struct nrt_block *b)
{
	struct nrt_pool_tree *t = pool_of(a, b);

	b->left = b->right = NULL;
	t->root = treap_insert(t->root, b);
	b->in_pool = true;
	if (is_split(b)) {
		stat_add(&a->st.inactive_split, 1);
		stat_add(&a->st.inactive_split_bytes, (int64_t)b->size);
	}
}

static void pool_remove(struct nrt_alloc *a, struct nrt_block *b)
{
	struct nrt_pool_tree *t = pool_of(a, b);

	t->root = treap_remove(t->root, b);
	b->left = b->right = NULL;
	b->in_pool = false;
	if (is_split(b)) {
		stat_sub(&a->st.inactive_split, 1);
		stat_sub(&a->st.inactive_split_bytes, (int64_t)b->size);
	}
}

static struct nrt_block *spare_get(struct nrt_alloc *a)
{
	struct nrt_block *b = a->spare;

	if (b) {
		a->spare = b->hnext;
		b->hnext = NULL;
		return b;
	}
	return calloc(1, sizeof *b);
}

static void spare_put(struct nrt_alloc *a, struct nrt_block *b)
{
	struct nrt_use *uses = b->uses;
	int cap = b->cap_uses;

	memset(b, 0, sizeof *b);
	b->uses = uses; /* keep the array for the next record_queue */
	b->cap_uses = cap;
	b->hnext = a->spare;
	a->spare = b;
}

static void spare_release(struct nrt_alloc *a)
{
	while (a->spare) {
		struct nrt_block *b = a->spare;

		a->spare = b->hnext;
		free(b->uses);
		free(b);
	}
}

/* ---- segments ----------------------------------------------------------------------------------- */
/* Queues a segment event for the observer (under lock; dropped if host memory for it is short: the
 * events are observability, never needed for correctness). */
static void seg_event(struct nrt_alloc *a, int action, void *ptr, size_t size, int qid)
{
	if (!atomic_load_explicit(&mem_observer, memory_order_relaxed))
		return;
	if (a->n_seg_ev == a->cap_seg_ev) {
		int cap = a->cap_seg_ev ? 2 * a->cap_seg_ev : 8;
		struct nrt_seg_event *e = realloc(a->seg_ev, (size_t)cap * sizeof *e);

		if (!e)
			return;
		a->seg_ev = e, a->cap_seg_ev = cap;
	}
	a->seg_ev[a->n_seg_ev++] = (struct nrt_seg_event){ action, ptr, size, qid };
}

/* Takes the queued segment events (under lock); seg_events_deliver hands them over after unlocking. */
static struct nrt_seg_event *seg_events_take(struct nrt_alloc *a, int *n)
{
	struct nrt_seg_event *e = a->seg_ev;

	*n = a->n_seg_ev;
	a->seg_ev = NULL, a->n_seg_ev = a->cap_seg_ev = 0;
	return e;
}

static void seg_events_deliver(int dev, struct nrt_seg_event *e, int n)
{
	nrt_mem_observer_fn obs = atomic_load_explicit(&mem_observer, memory_order_relaxed);

	for (int i = 0; obs && i < n; i++)
		obs(e[i].action, dev, e[i].ptr, e[i].size, 0, e[i].qid);
	free(e);
}

static bool fault_take(void)
{
	int_fast64_t c = atomic_load(&fault_countdown);

	while (c > 0 && !atomic_compare_exchange_weak(&fault_countdown, &c, c - 1))
		;
	return c == 1;
}

void nrt_fault_inject_alloc(int64_t n)
{
	atomic_store(&fault_countdown, n > 0 ? n : 0);
}

/* Takes a segment of size bytes from the arena (the device's target).  NRT_ERR_OOM when over the
 * limit (or injected); *host_refused tells when the target said no. */
static int segment_new(struct nrt_alloc *a, int dev, size_t size, bool small, int qid, bool inject,
		       bool *host_refused, struct nrt_block **out)
{
	struct nrt_block *b;
	void *p = NULL;

	if (inject || (uint64_t)a->st.reserved_bytes.current > a->limit ||
	    size > a->limit - (size_t)a->st.reserved_bytes.current)
		return NRT_ERR_OOM;
	b = spare_get(a);
	if (!b)
		return NRT_ERR_OOM;
	if (a->target->iface.alloc(a->target->context, dev, size, &p) || !p) {
		spare_put(a, b);
		*host_refused = true;
		return NRT_ERR_OOM;
	}
	b->ptr = p;
	b->size = size;
	b->dev = dev;
	b->qid = qid;
	b->small = small;
	b->prio = (uint32_t)((((uintptr_t)p >> 9) * UINT64_C(0x9E3779B97F4A7C15)) >> 32);
	stat_add(&a->st.segment, 1);
	stat_add(&a->st.reserved_bytes, (int64_t)size);
	a->st.num_device_alloc++;
	seg_event(a, NRT_MEM_SEGMENT_ALLOC, p, size, qid);
	*out = b;
	return NRT_OK;
}

static void segment_free(struct nrt_alloc *a, struct nrt_block *b)
{
	stat_sub(&a->st.segment, 1);
	stat_sub(&a->st.reserved_bytes, (int64_t)b->size);
	a->st.num_device_free++;
	seg_event(a, NRT_MEM_SEGMENT_FREE, b->ptr, b->size, b->qid);
	a->target->iface.free(a->target->context, b->dev, b->ptr, b->size);
	spare_put(a, b);
}

/* Collects the free blocks that are whole segments into *list (linked through hnext). */
static void collect_unsplit(struct nrt_block *x, struct nrt_block **list)
{
	for (; x; x = x->right) {
		collect_unsplit(x->left, list);
		if (!is_split(x)) {
			x->hnext = *list;
			*list = x;
		}
	}
}

/* Returns the cached segments of a (free blocks that are whole segments) to the arena.  A segment goes
 * back only once its queue has run every record submitted before its last free: a kernel still queued
 * behind a freed tensor (the randn that filled it, an op that reads it) would otherwise touch memory the
 * arena no longer owns.  With wait, the lock is dropped to wait for those queues (never for the queue
 * whose kernel is calling, which cannot advance meanwhile) and the pools are scanned again; without it,
 * segments still in use stay cached.  Returns the number of segments released. */
static int release_cached_locked(struct nrt_alloc *a, bool wait)
{
	int released = 0;

	for (int pass = 0; pass < 64; pass++) {
		struct nrt_block *list = NULL, *b, *wq_blk = NULL;
		struct nrt_queue *wq = NULL;
		uint64_t wseq = 0;

		collect_unsplit(a->small.root, &list);
		collect_unsplit(a->large.root, &list);
		while ((b = list)) {
			list = b->hnext;
			b->hnext = NULL;
			if (b->q && !nrt_queue_reached(b->q, b->free_seq)) {
				if (b->q != nrt_current_queue() && (!wq_blk || b->free_seq > wseq)) {
					wq_blk = b;
					wq = b->q;
					wseq = b->free_seq;
				}
				continue;
			}
			pool_remove(a, b);
			segment_free(a, b);
			released++;
		}
		if (!wait || !wq)
			break;
		pthread_mutex_unlock(&a->lock);
		nrt_queue_wait_seq(wq, wseq);
		pthread_mutex_lock(&a->lock);
	}
	return released;
}

/* ---- freeing -------------------------------------------------------------------------------------- */
/* Returns a block that nobody uses any more to its pool, merging it with free neighbours. */
static void free_block(struct nrt_alloc *a, struct nrt_block *b)
{
	struct nrt_block *n;

	stat_sub(&a->st.active, 1);
	stat_sub(&a->st.active_bytes, (int64_t)b->size);
	b->allocated = false;
	b->nuses = 0;
	if ((n = b->prev) && n->in_pool) {
		pool_remove(a, n);
		if (n->free_seq > b->free_seq)
			b->free_seq = n->free_seq;
		b->ptr = n->ptr;
		b->size += n->size;
		b->prev = n->prev;
		if (b->prev)
			b->prev->next = b;
		spare_put(a, n);
	}
	if ((n = b->next) && n->in_pool) {
		pool_remove(a, n);
		if (n->free_seq > b->free_seq)
			b->free_seq = n->free_seq;
		b->size += n->size;
		b->next = n->next;
		if (b->next)
			b->next->prev = b;
		spare_put(a, n);
	}
	b->prio = (uint32_t)((((uintptr_t)b->ptr >> 9) * UINT64_C(0x9E3779B97F4A7C15)) >> 32);
	pool_insert(a, b);
}

/* A free block of the subtree at x that holds all of [s, e). */
static bool tree_holds(const struct nrt_block *x, uintptr_t s, uintptr_t e)
{
	for (; x; x = x->right) {
		if ((uintptr_t)x->ptr <= s && e <= (uintptr_t)x->ptr + x->size)
			return true;
		if (tree_holds(x->left, s, e))
			return true;
	}
	return false;
}

/* True when [p, p + len) lies inside one free cached block of dev: no live tensor (and no block
 * waiting for another queue) holds any of it, and the memory is the arena's.  Walks the free trees
 * (a few dozen blocks); queue-level fusion asks it once per candidate range of a run. */
bool nrt_alloc_range_free(int dev, const void *p, size_t len)
{
	struct nrt_alloc *a;
	uintptr_t s = (uintptr_t)p, e = s + len;
	bool r;

	if (!(a = alloc_at(dev)) || !len || e < s)
		return false;
	pthread_mutex_lock(&a->lock);
	r = tree_holds(a->large.root, s, e) || tree_holds(a->small.root, s, e);
	pthread_mutex_unlock(&a->lock);
	return r;
}

static bool uses_done(const struct nrt_block *b, struct nrt_queue **q, uint64_t *seq)
{
	for (int i = 0; i < b->nuses; i++) {
		if (!nrt_queue_reached(b->uses[i].q, b->uses[i].seq)) {
			*q = b->uses[i].q;
			*seq = b->uses[i].seq;
			return false;
		}
	}
	return true;
}

static void process_pending_locked(struct nrt_alloc *a)
{
	struct nrt_block **pp = &a->pending, *b;
	struct nrt_queue *q;
	uint64_t seq;

	while ((b = *pp)) {
		if (uses_done(b, &q, &seq)) {
			*pp = b->hnext;
			b->hnext = NULL;
			atomic_fetch_sub(&a->npending, 1);
			free_block(a, b);
		} else {
			pp = &b->hnext;
		}
	}
}

void nrt_alloc_process_pending(int dev)
{
	struct nrt_alloc *a;

	if (!(a = alloc_at(dev)) || !atomic_load(&a->npending))
		return;
	pthread_mutex_lock(&a->lock);
	process_pending_locked(a);
	pthread_mutex_unlock(&a->lock);
}

/* Waits (without the lock) for the queues that pending blocks wait on, then frees those blocks. */
static void drain_pending_locked(struct nrt_alloc *a)
{
	for (int i = 0; i < 1000; i++) {
		struct nrt_queue *q = NULL;
		uint64_t seq = 0;

		process_pending_locked(a);
		if (!a->pending)
			return;
		uses_done(a->pending, &q, &seq);
		if (!q || q == nrt_current_queue())
			return; /* a kernel allocating cannot wait for its own queue */
		pthread_mutex_unlock(&a->lock);
		nrt_queue_wait_seq(q, seq);
		pthread_mutex_lock(&a->lock);
	}
}

/* ---- malloc --------------------------------------------------------------------------------------- */
static size_t round_size(size_t n)
{
	if (n < NRT_MIN_BLOCK)
		return NRT_MIN_BLOCK;
	return (n + NRT_MIN_BLOCK - 1) / NRT_MIN_BLOCK * NRT_MIN_BLOCK;
}

static size_t round_large(size_t n)
{
	return (n + NRT_ROUND_LARGE - 1) / NRT_ROUND_LARGE * NRT_ROUND_LARGE;
}

static int oom_error(struct nrt_alloc *a, int dev, size_t nbytes, bool injected, bool host_refused)
{
	char req[32], alloc[32], res[32], lim[32];

	a->st.num_ooms++;
	nrt_format_bytes(req, sizeof req, nbytes);
	nrt_format_bytes(alloc, sizeof alloc, (uint64_t)a->st.allocated_bytes.current);
	nrt_format_bytes(res, sizeof res, (uint64_t)a->st.reserved_bytes.current);
	nrt_format_bytes(lim, sizeof lim, a->limit);
	return nrt_set_error(NRT_ERR_OOM, "out of memory on neuron:%d: tried to allocate %s; %s allocated, "
			     "%s reserved, limit %s (NEURON_RT_MEMORY_LIMIT)%s", dev, req, alloc, res, lim,
			     injected ? " [injected fault]" : host_refused ? " [the host refused memory]" : "");
}

/* A block of at least size bytes for queue qid, out of its pool (removed from it) or a new segment. */
static int get_block(struct nrt_alloc *a, int dev, int qid, size_t size, size_t nbytes,
		     struct nrt_block **out)
{
	bool small = size <= NRT_SMALL_SIZE, inject = false, host_refused = false;
	struct nrt_pool_tree *t = small ? &a->small : &a->large;
	size_t seg, fallback;
	struct nrt_block *b;

	if ((b = treap_best_fit(t->root, qid, size))) {
		pool_remove(a, b);
		*out = b;
		return NRT_OK;
	}
	if (!small && size > SIZE_MAX - NRT_ROUND_LARGE)
		return oom_error(a, dev, nbytes, false, false);
	seg = small ? NRT_SMALL_BUFFER : size < NRT_MIN_LARGE_ALLOC ? NRT_LARGE_BUFFER : round_large(size);
	fallback = small ? seg : round_large(size);
	inject = fault_take();
	for (int attempt = 0; attempt < 2; attempt++) {
		if (attempt) {
			/* free every cached segment of this device and try once more */
			a->st.num_alloc_retries++;
			drain_pending_locked(a);
			release_cached_locked(a, true);
			if ((b = treap_best_fit(t->root, qid, size))) { /* freed while the lock was dropped */
				pool_remove(a, b);
				*out = b;
				return NRT_OK;
			}
		}
		if (!segment_new(a, dev, seg, small, qid, inject, &host_refused, out))
			return NRT_OK;
		if (fallback != seg && !segment_new(a, dev, fallback, small, qid, inject, &host_refused, out))
			return NRT_OK;
	}
	return oom_error(a, dev, nbytes, inject, host_refused);
}

static bool should_split(const struct nrt_block *b, size_t size)
{
	size_t rest = b->size - size;

	return b->small ? rest >= NRT_MIN_BLOCK : rest > NRT_SMALL_SIZE;
}

int nrt_malloc(nrt_queue_t *q, size_t nbytes, void **ptr)
{
	struct nrt_block *b, *rest;
	struct nrt_alloc *a;
	size_t size = 0;
	int rc;

	if (!ptr)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_malloc: null output");
	*ptr = NULL;
	if (nrt_bad_fork())
		return nrt_fork_error();
	if (!q || !q->live)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_malloc: invalid queue");
	if (!nbytes)
		return NRT_OK;
	a = &allocs[q->dev];
	pthread_mutex_lock(&a->lock);
	if (nbytes > SIZE_MAX - NRT_MIN_BLOCK) {
		rc = oom_error(a, q->dev, nbytes, false, false);
		goto unlock;
	}
	size = round_size(nbytes);
	rest = spare_get(a); /* reserved up front so a split cannot fail later */
	if (!rest) {
		rc = nrt_set_error(NRT_ERR_HOST, "nrt_malloc: out of host memory for block metadata");
		goto unlock;
	}
	if (a->pending)
		process_pending_locked(a);
	rc = get_block(a, q->dev, q->id, size, nbytes, &b);
	if (rc)
		goto put_rest;
	b->q = q;
	if (should_split(b, size)) {
		rest->ptr = b->ptr + size;
		rest->size = b->size - size;
		rest->dev = b->dev;
		rest->qid = b->qid;
		rest->q = b->q;
		rest->free_seq = b->free_seq;
		rest->small = b->small;
		rest->prio = (uint32_t)((((uintptr_t)rest->ptr >> 9) * UINT64_C(0x9E3779B97F4A7C15)) >> 32);
		rest->prev = b;
		rest->next = b->next;
		if (rest->next)
			rest->next->prev = rest;
		b->next = rest;
		b->size = size;
		pool_insert(a, rest);
		rest = NULL;
	}
	b->allocated = true;
	b->id = ++a->next_id;
	b->nw = 0;
	if (!nrt_op_active() || !nrt_op_note_block(b->ptr, b->id, q->dev, true)) {
		/* outside a bracket the next record queued is the op it is allocated for */
		uint64_t s = nrt_queue_submitted(q);

		b->w[0] = (struct nrt_writer){ q, s, s };
		b->nw = 1;
	}
	b->requested = nbytes;
	b->nuses = 0;
	map_insert(b);
	stat_add(&a->st.allocation, 1);
	stat_add(&a->st.active, 1);
	stat_add(&a->st.allocated_bytes, (int64_t)b->size);
	stat_add(&a->st.active_bytes, (int64_t)b->size);
	stat_add(&a->st.requested_bytes, (int64_t)nbytes);
	*ptr = b->ptr;
	size = b->size;
put_rest:
	if (rest)
		spare_put(a, rest);
unlock:;
	int nev;
	struct nrt_seg_event *ev = seg_events_take(a, &nev);

	pthread_mutex_unlock(&a->lock);
	seg_events_deliver(q->dev, ev, nev);
	{
		nrt_mem_observer_fn obs = atomic_load_explicit(&mem_observer, memory_order_relaxed);

		if (obs && (!rc || rc == NRT_ERR_OOM))
			obs(rc ? NRT_MEM_OOM : NRT_MEM_ALLOC, q->dev, *ptr, rc ? nbytes : size, nbytes, q->id);
	}
	return rc;
}

/* Looks up ptr and locks its device; NULL (error set) if it is not a live block. */
static struct nrt_block *lock_block(const void *ptr, const char *fn, struct nrt_alloc **ap)
{
	struct nrt_block *b;
	struct nrt_alloc *a;
	int dev = -1;

	if (!map_find(ptr, &dev)) {
		nrt_set_error(NRT_ERR_INVALID, "%s: %p is not a live device allocation", fn, ptr);
		return NULL;
	}
	a = &allocs[dev];
	pthread_mutex_lock(&a->lock);
	pthread_mutex_lock(&map.lock); /* it may have been freed meanwhile */
	b = map_find_locked(ptr);
	pthread_mutex_unlock(&map.lock);
	if (!b || b->dev != dev) {
		pthread_mutex_unlock(&a->lock);
		nrt_set_error(NRT_ERR_INVALID, "%s: %p is not a live device allocation", fn, ptr);
		return NULL;
	}
	*ap = a;
	return b;
}

int nrt_free(void *ptr)
{
	struct nrt_alloc *a;
	struct nrt_block *b;
	struct nrt_queue *q;
	uint64_t seq;

	if (!ptr || nrt_bad_fork())
		return NRT_OK; /* a forked child leaves its copy of the arena alone */
	nrt_mem_observer_fn obs;
	size_t fsize;
	int fdev, fq;

	if (!(b = lock_block(ptr, "nrt_free", &a)))
		return NRT_ERR_INVALID;
	fsize = b->size, fdev = b->dev, fq = b->qid;
	map_remove(b);
	free(b->poison);
	b->poison = NULL;
	b->nw = 0;
	stat_sub(&a->st.allocation, 1);
	stat_sub(&a->st.allocated_bytes, (int64_t)b->size);
	stat_sub(&a->st.requested_bytes, (int64_t)b->requested);
	b->requested = 0;
	b->free_seq = nrt_queue_submitted(b->q); /* work queued so far on the owner may still use it */
	for (int i = 0; i < b->nuses; i++)
		b->uses[i].seq = nrt_queue_submitted(b->uses[i].q); /* an event on each user queue */
	if (uses_done(b, &q, &seq)) {
		free_block(a, b);
	} else {
		b->hnext = a->pending;
		a->pending = b;
		atomic_fetch_add(&a->npending, 1);
	}
	pthread_mutex_unlock(&a->lock);
	if ((obs = atomic_load_explicit(&mem_observer, memory_order_relaxed)))
		obs(NRT_MEM_FREE, fdev, ptr, fsize, 0, fq);
	return NRT_OK;
}

int nrt_record_queue(void *ptr, nrt_queue_t *q)
{
	struct nrt_alloc *a;
	struct nrt_block *b;
	int rc = NRT_OK;

	if (nrt_bad_fork())
		return nrt_fork_error();
	if (!q || !q->live)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_record_queue: invalid queue");
	if (!(b = lock_block(ptr, "nrt_record_queue", &a)))
		return NRT_ERR_INVALID;
	if (q->dev != b->dev) {
		rc = nrt_set_error(NRT_ERR_INVALID, "nrt_record_queue: block of neuron:%d used on a queue of "
				   "neuron:%d", b->dev, q->dev);
		goto unlock;
	}
	if (q->id == b->qid)
		goto unlock;
	for (int i = 0; i < b->nuses; i++)
		if (b->uses[i].q == q)
			goto unlock;
	if (b->nuses == b->cap_uses) {
		int cap = b->cap_uses ? b->cap_uses * 2 : 4;
		struct nrt_use *u = realloc(b->uses, (size_t)cap * sizeof *u);

		if (!u) {
			rc = nrt_set_error(NRT_ERR_HOST, "nrt_record_queue: out of host memory");
			goto unlock;
		}
		b->uses = u;
		b->cap_uses = cap;
	}
	b->uses[b->nuses].q = q;
	b->uses[b->nuses].seq = 0;
	b->nuses++;
unlock:
	pthread_mutex_unlock(&a->lock);
	return rc;
}

/* ---- poison (op brackets: op.c) ------------------------------------------------------------------- */
/* Whether b is poisoned (under its device's lock): its sticky poison, or a producer that failed or was
 * skipped.  Producers whose records have all run cleanly are dropped; a failed one becomes the sticky
 * poison once its error has been reported. */
static bool block_poisoned_locked(struct nrt_block *b, char *msg, size_t cap, struct nrt_queue **open,
				  struct nrt_writer *bad)
{
	int k = 0;
	bool hit = false;

	*open = NULL;
	if (b->poison) {
		snprintf(msg, cap, "%s", b->poison);
		return true;
	}
	for (int i = 0; i < b->nw; i++) {
		struct nrt_writer *w = &b->w[i];
		bool pending;

		if (!hit && nrt_queue_record_failed(w, msg, cap, &pending, bad)) {
			hit = true;
			if (pending)
				*open = w->q;
			else
				b->poison = strdup(msg); /* without memory: found again through w next time */
			if (b->poison)
				continue;
		} else if (!hit && nrt_queue_reached(w->q, w->last + 1)) {
			continue; /* ran cleanly: resolved */
		}
		b->w[k++] = *w;
	}
	b->nw = k;
	return hit;
}

/* Adds producer w to b (under its device's lock).  With no room, w merges into a producer on the same
 * queue (the range between them is covered too: a failure there poisons b, never the other way), or
 * replaces the oldest. */
static void block_add_writer(struct nrt_block *b, const struct nrt_writer *w)
{
	char msg[NRT_ERRMSG_MAX];
	struct nrt_queue *open;
	struct nrt_writer bad;

	if (block_poisoned_locked(b, msg, sizeof msg, &open, &bad) && b->poison)
		return; /* poisoned for good */
	for (int i = 0; i < b->nw; i++) {
		if (b->w[i].q == w->q && b->w[i].first <= w->first && w->last <= b->w[i].last)
			return;
	}
	if (b->nw < NRT_BLOCK_WRITERS) {
		b->w[b->nw++] = *w;
		return;
	}
	for (int i = b->nw - 1; i >= 0; i--) {
		if (b->w[i].q == w->q) {
			b->w[i].first = b->w[i].first < w->first ? b->w[i].first : w->first;
			b->w[i].last = b->w[i].last > w->last ? b->w[i].last : w->last;
			return;
		}
	}
	memmove(&b->w[0], &b->w[1], (size_t)(b->nw - 1) * sizeof b->w[0]);
	b->w[b->nw - 1] = *w;
}

void nrt_alloc_op_end(const struct nrt_op_block *blk, int n, const struct nrt_writer *w, int nw)
{
	for (int i = 0; i < n; i++) {
		struct nrt_alloc *a;
		struct nrt_block *b;
		int dev = -1;

		if (blk[i].fresh)
			dev = blk[i].dev; /* no lookup: the device lock keeps the block in the map or out */
		else if (!map_find(blk[i].ptr, &dev))
			continue; /* not a device block (host memory), or freed inside the op */
		if (!(a = alloc_at(dev)))
			continue;
		pthread_mutex_lock(&a->lock);
		pthread_mutex_lock(&map.lock);
		b = map_find_locked(blk[i].ptr);
		pthread_mutex_unlock(&map.lock);
		if (b && b->dev == dev && (!blk[i].fresh || b->id == blk[i].id)) {
			if (blk[i].fresh)
				b->nw = 0;
			for (int j = 0; j < nw; j++)
				block_add_writer(b, &w[j]);
		}
		pthread_mutex_unlock(&a->lock);
	}
}

int nrt_alloc_poison(const void *ptr, struct nrt_queue **open, struct nrt_writer *bad)
{
	char msg[NRT_ERRMSG_MAX];
	struct nrt_alloc *a;
	struct nrt_block *b;
	bool hit = false;
	int dev = -1;

	*open = NULL;
	if (!map_find(ptr, &dev) || !(a = alloc_at(dev)))
		return NRT_OK;
	pthread_mutex_lock(&a->lock);
	pthread_mutex_lock(&map.lock);
	b = map_find_locked(ptr);
	pthread_mutex_unlock(&map.lock);
	if (b && b->dev == dev)
		hit = block_poisoned_locked(b, msg, sizeof msg, open, bad);
	pthread_mutex_unlock(&a->lock);
	return hit ? nrt_set_error(NRT_ERR_KERNEL, "%s", msg) : NRT_OK;
}

int nrt_check_readable(const void *ptr)
{
	struct nrt_queue *q = NULL;
	struct nrt_writer bad;
	int rc;

	if (nrt_bad_fork())
		return nrt_fork_error();
	if (!ptr || !atomic_load_explicit(&nrt_poison_seen, memory_order_relaxed))
		return NRT_OK;
	rc = nrt_alloc_poison(ptr, &q, &bad);
	if (rc && q && q != nrt_current_queue()) {
		/* this read reports the error: finish the queue first (what is queued behind the failure is
		 * skipped, into the range) and clear it, as a synchronize would, so it is reported once and
		 * the queue runs again */
		char msg[NRT_ERRMSG_MAX];

		snprintf(msg, sizeof msg, "%s", nrt_last_error());
		nrt_queue_wait_seq(q, nrt_queue_submitted(q));
		(void)nrt_queue_take_error(q);
		rc = nrt_set_error(NRT_ERR_KERNEL, "%s", msg);
	}
	return rc;
}

int nrt_ptr_device(const void *ptr, int *dev)
{
	int d = -1;

	if (!dev)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_ptr_device: null output");
	if (nrt_bad_fork())
		return nrt_fork_error();
	if (!ptr || !map_find(ptr, &d))
		return nrt_set_error(NRT_ERR_INVALID, "nrt_ptr_device: %p is not a live device allocation", ptr);
	*dev = d;
	return NRT_OK;
}

/* ---- device-level calls --------------------------------------------------------------------------- */
static struct nrt_alloc *alloc_of(int dev, const char *fn)
{
	struct nrt_alloc *a;

	if (nrt_bad_fork()) {
		nrt_fork_error();
		return NULL;
	}
	a = alloc_at(dev);
	if (!a)
		nrt_set_error(NRT_ERR_INVALID, "%s: no device neuron:%d", fn, dev);
	return a;
}

int nrt_alloc_device_init(int dev, size_t limit)
{
	struct nrt_alloc *a;

	if (dev < 0 || dev >= NRT_MAX_DEVICES)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_alloc_device_init: no device neuron:%d", dev);
	a = &allocs[dev];
	if (atomic_load(&a->ready))
		return NRT_OK;
	pthread_mutex_init(&a->lock, NULL);
	a->limit = limit;
	a->target = nrt_target_host();
	atomic_store_explicit(&a->ready, true, memory_order_release);
	return NRT_OK;
}

int nrt_alloc_set_target(int dev, const nrt_target_t *t)
{
	struct nrt_alloc *a = alloc_at(dev);
	int rc = NRT_OK;

	if (!a || !t)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_target_set: no device neuron:%d", dev);
	pthread_mutex_lock(&a->lock);
	if (a->st.reserved_bytes.current)
		rc = nrt_set_error(NRT_ERR_INVALID, "nrt_target_set: neuron:%d still holds %lld bytes of device memory",
				   dev, (long long)a->st.reserved_bytes.current);
	else
		a->target = t;
	pthread_mutex_unlock(&a->lock);
	return rc;
}

size_t nrt_alloc_limit(int dev)
{
	struct nrt_alloc *a = &allocs[dev];
	size_t n;

	pthread_mutex_lock(&a->lock);
	n = a->limit;
	pthread_mutex_unlock(&a->lock);
	return n;
}

void nrt_alloc_set_limit(int dev, size_t limit)
{
	struct nrt_alloc *a = &allocs[dev];

	pthread_mutex_lock(&a->lock);
	a->limit = limit;
	pthread_mutex_unlock(&a->lock);
}

int64_t nrt_alloc_live_bytes(int dev)
{
	struct nrt_alloc *a = &allocs[dev];
	int64_t n;

	pthread_mutex_lock(&a->lock);
	n = a->st.allocated_bytes.current;
	pthread_mutex_unlock(&a->lock);
	return n;
}

int nrt_empty_cache(int dev)
{
	struct nrt_alloc *a = alloc_of(dev, "nrt_empty_cache");

	if (!a)
		return nrt_bad_fork() ? NRT_ERR_FORK : NRT_ERR_INVALID;
	int nev;
	struct nrt_seg_event *ev;

	pthread_mutex_lock(&a->lock);
	process_pending_locked(a);
	release_cached_locked(a, true);
	spare_release(a);
	ev = seg_events_take(a, &nev);
	pthread_mutex_unlock(&a->lock);
	seg_events_deliver(dev, ev, nev);
	return NRT_OK;
}

int nrt_memory_stats(int dev, nrt_mem_stats_t *out)
{
	struct nrt_alloc *a = alloc_of(dev, "nrt_memory_stats");

	if (!a || !out)
		return a ? nrt_set_error(NRT_ERR_INVALID, "nrt_memory_stats: null output") : nrt_bad_fork() ? NRT_ERR_FORK : NRT_ERR_INVALID;
	pthread_mutex_lock(&a->lock);
	process_pending_locked(a);
	*out = a->st;
	out->limit_bytes = a->limit > INT64_MAX ? INT64_MAX : (int64_t)a->limit;
	pthread_mutex_unlock(&a->lock);
	return NRT_OK;
}

/* Fills v with the nrt_stat_t members of s; returns how many. */
static int stat_list(nrt_mem_stats_t *s, nrt_stat_t *v[9])
{
	v[0] = &s->allocation;
	v[1] = &s->segment;
	v[2] = &s->active;
	v[3] = &s->inactive_split;
	v[4] = &s->allocated_bytes;
	v[5] = &s->reserved_bytes;
	v[6] = &s->active_bytes;
	v[7] = &s->inactive_split_bytes;
	v[8] = &s->requested_bytes;
	return 9;
}

int nrt_reset_peak_stats(int dev)
{
	struct nrt_alloc *a = alloc_of(dev, "nrt_reset_peak_stats");
	nrt_stat_t *v[9];
	int n;

	if (!a)
		return nrt_bad_fork() ? NRT_ERR_FORK : NRT_ERR_INVALID;
	pthread_mutex_lock(&a->lock);
	n = stat_list(&a->st, v);
	for (int i = 0; i < n; i++)
		v[i]->peak = v[i]->current;
	pthread_mutex_unlock(&a->lock);
	return NRT_OK;
}

int nrt_reset_accumulated_stats(int dev)
{
	struct nrt_alloc *a = alloc_of(dev, "nrt_reset_accumulated_stats");
	nrt_stat_t *v[9];
	int n;

	if (!a)
		return nrt_bad_fork() ? NRT_ERR_FORK : NRT_ERR_INVALID;
	pthread_mutex_lock(&a->lock);
	n = stat_list(&a->st, v);
	for (int i = 0; i < n; i++)
		v[i]->allocated = v[i]->freed = 0;
	a->st.num_alloc_retries = 0;
	a->st.num_ooms = 0;
	a->st.num_device_alloc = 0;
	a->st.num_device_free = 0;
	pthread_mutex_unlock(&a->lock);
	return NRT_OK;
}

/* Each allocator, then the pointer map (taken inside an allocator's lock, never the other way). */
void nrt_alloc_fork_locks(bool lock)
{
	if (!lock)
		pthread_mutex_unlock(&map.lock);
	for (int i = 0; i < NRT_MAX_DEVICES; i++) {
		if (!atomic_load(&allocs[i].ready))
			continue;
		if (lock)
			pthread_mutex_lock(&allocs[i].lock);
		else
			pthread_mutex_unlock(&allocs[i].lock);
	}
	if (lock)
		pthread_mutex_lock(&map.lock);
}

bool nrt_addr_on_device(const void *ptr)
{
	const char *p = ptr;
	bool found = false;

	pthread_mutex_lock(&map.lock);
	for (size_t i = 0; i < map.nb && !found; i++)
		for (struct nrt_block *b = map.b[i]; b && !found; b = b->hnext)
			found = p >= b->ptr && p < b->ptr + b->size;
	pthread_mutex_unlock(&map.lock);
	return found;
}

/* ---- memory walk (snapshots) ---------------------------------------------------------------------- */
struct seg_heads {
	struct nrt_block **h;
	size_t n, cap;
	bool failed;
};

static void heads_add(struct seg_heads *s, struct nrt_block *b)
{
	while (b->prev)
		b = b->prev;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct nrt_block **h = realloc(s->h, cap * sizeof *h);

		if (!h) {
			s->failed = true;
			return;
		}
		s->h = h;
		s->cap = cap;
	}
	s->h[s->n++] = b;
}

static void heads_of_tree(struct seg_heads *s, struct nrt_block *x)
{
	for (; x; x = x->right) {
		heads_of_tree(s, x->left);
		heads_add(s, x);
	}
}

static int head_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)(*(struct nrt_block *const *)a)->ptr, y = (uintptr_t)(*(struct nrt_block *const *)b)->ptr;

	return x < y ? -1 : x > y;
}

int nrt_memory_walk(int dev, void (*fn)(void *ctx, const nrt_mem_block_t *b), void *ctx)
{
	struct nrt_alloc *a = alloc_of(dev, "nrt_memory_walk");
	struct seg_heads s = { 0 };

	if (!a)
		return nrt_bad_fork() ? NRT_ERR_FORK : NRT_ERR_INVALID;
	if (!fn)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_memory_walk: null callback");
	pthread_mutex_lock(&a->lock);
	heads_of_tree(&s, a->small.root);
	heads_of_tree(&s, a->large.root);
	for (struct nrt_block *b = a->pending; b; b = b->hnext)
		heads_add(&s, b);
	pthread_mutex_lock(&map.lock);
	for (size_t i = 0; i < map.nb; i++)
		for (struct nrt_block *b = map.b[i]; b; b = b->hnext)
			if (b->dev == dev)
				heads_add(&s, b);
	pthread_mutex_unlock(&map.lock);
	if (s.failed) {
		pthread_mutex_unlock(&a->lock);
		free(s.h);
		return nrt_set_error(NRT_ERR_HOST, "nrt_memory_walk: out of host memory");
	}
	if (s.n)
		qsort(s.h, s.n, sizeof *s.h, head_cmp);
	for (size_t i = 0; i < s.n; i++) {
		if (i && s.h[i] == s.h[i - 1])
			continue;
		for (struct nrt_block *b = s.h[i]; b; b = b->next) {
			nrt_mem_block_t m = { s.h[i]->ptr, b->ptr, b->size, b->requested,
					      !b->allocated ? NRT_BLOCK_INACTIVE
							    : (b->requested ? NRT_BLOCK_ACTIVE : NRT_BLOCK_PENDING_FREE),
					      b->qid, b->small };
			fn(ctx, &m);
		}
	}
	pthread_mutex_unlock(&a->lock);
	free(s.h);
	return NRT_OK;
}
