/* queue.c - in-order queues run by one worker thread each, sticky errors, memcpy, trace.
 *
 * A queue is a ring of NRT_RING_SLOTS launch records.  Launchers serialize on prod_lock (an uncontended
 * mutex costs no syscall), copy the arguments into the slot at tail and publish tail; the worker runs the
 * record at head and then publishes head + 1.  Idle workers spin for NRT_SPIN_NS and then park on
 * work_cv; a launcher signals only when worker_parked is set.  Threads waiting for head to move (queue
 * synchronize, events, another queue's wait record) spin briefly and then park on done_cv, counted in
 * waiters, with the least head value they need in wake_at, which the worker checks after each record; a
 * launcher facing a full ring parks at once until an eighth of the ring is free.  Both handshakes store
 * their own flag and then load the other side's with sequentially consistent atomics, so no wake-up is
 * lost.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrt_impl.h"

#define NRT_RING_MASK (NRT_RING_SLOTS - 1)

static _Thread_local struct nrt_queue *cur_queue;
static _Thread_local bool on_worker; /* [fuse] this thread is a queue's worker */
static atomic_size_t inline_bytes = NRT_INLINE_BYTES_DEFAULT;
static atomic_uint_fast64_t inline_count;

struct nrt_queue *nrt_current_queue(void)
{
	return cur_queue;
}

int64_t nrt_now_ns(void)
{
	return nrt_mono_ns();
}

/* ---- trace ---------------------------------------------------------------------------------------- */
static struct {
	atomic_bool on;
	atomic_int users; /* nrt_trace_enable(true) minus (false) */
	pthread_mutex_t lock;
	uint64_t written, read;
	nrt_trace_event_t rec[NRT_TRACE_CAP];
} trace = { .lock = PTHREAD_MUTEX_INITIALIZER };

static _Thread_local uint64_t tls_corr;
/* the traced record running on this thread (run_record / run_inline), for nrt_trace_sub */
static _Thread_local const struct nrt_queue *tls_run_q;
static _Thread_local uint64_t tls_run_corr;
static _Atomic(nrt_site_capture_fn) site_capture;
static _Atomic(nrt_site_format_fn) site_format;

void nrt_trace_enable(bool on)
{
	int n = atomic_load(&trace.users);

	while (!atomic_compare_exchange_weak(&trace.users, &n, on ? n + 1 : (n > 0 ? n - 1 : 0)))
		;
	atomic_store(&trace.on, atomic_load(&trace.users) > 0);
}

bool nrt_trace_on(void)
{
	return atomic_load_explicit(&trace.on, memory_order_relaxed);
}

void nrt_trace_set_corr(uint64_t corr)
{
	tls_corr = corr;
}

uint64_t nrt_trace_corr(void)
{
	return tls_corr;
}

void nrt_set_site_hooks(nrt_site_capture_fn capture, nrt_site_format_fn format)
{
	atomic_store(&site_format, format);
	atomic_store(&site_capture, capture);
}

static void trace_add_rec(const char *name, int dev, int queue, int64_t t0, int64_t t1, uint64_t corr, int kind)
{
	nrt_trace_event_t *r;

	pthread_mutex_lock(&trace.lock);
	r = &trace.rec[trace.written % NRT_TRACE_CAP];
	r->name = name;
	r->dev = dev;
	r->queue = queue;
	r->start_ns = t0;
	r->end_ns = t1;
	r->corr = corr;
	r->kind = kind;
	trace.written++;
	if (trace.written - trace.read > NRT_TRACE_CAP)
		trace.read = trace.written - NRT_TRACE_CAP; /* oldest records were overwritten */
	pthread_mutex_unlock(&trace.lock);
}

static _Atomic(nrt_kernel_fn) copy_kernel;
static _Atomic(nrt_copy_ptrs_fn) copy_kernel_ptrs;

void nrt_trace_set_copy_kernel(nrt_kernel_fn fn, nrt_copy_ptrs_fn ptrs)
{
	atomic_store(&copy_kernel_ptrs, ptrs);
	atomic_store(&copy_kernel, fn);
}

/* The trace kind of a kernel or copy record (copies by the direction of their pointers). */
static int trace_kind(int kind, nrt_kernel_fn fn, const void *args)
{
	const void *src, *dst;
	bool src_dev, dst_dev;

	if (kind == NRT_REC_COPY) {
		const struct nrt_copy_args *c = args;

		src = c->src, dst = c->dst;
	} else if (fn && fn == atomic_load(&copy_kernel)) {
		atomic_load(&copy_kernel_ptrs)(args, &dst, &src);
	} else {
		return NRT_TRACE_KERNEL;
	}
	src_dev = nrt_addr_on_device(src);
	dst_dev = nrt_addr_on_device(dst);
	return src_dev ? (dst_dev ? NRT_TRACE_COPY_D2D : NRT_TRACE_COPY_D2H)
		       : (dst_dev ? NRT_TRACE_COPY_H2D : NRT_TRACE_COPY_H2H);
}

static void trace_add(const char *name, const struct nrt_queue *q, int64_t t0, int64_t t1, uint64_t corr, int kind)
{
	trace_add_rec(name, q->dev, q->id, t0, t1, corr, kind);
}

void nrt_trace_host(int dev, int queue, const char *name, int64_t t0, int64_t t1)
{
	if (atomic_load_explicit(&trace.on, memory_order_relaxed))
		trace_add_rec(name, dev, queue, t0, t1, tls_corr, NRT_TRACE_HOST);
}

void nrt_trace_sub(const char *name, int64_t t0, int64_t t1)
{
	const struct nrt_queue *q = tls_run_q;

	if (q && name && atomic_load_explicit(&trace.on, memory_order_relaxed))
		trace_add(name, q, t0, t1, tls_run_corr, NRT_TRACE_PART);
}

int nrt_trace_drain(nrt_trace_rec_t *out, int cap)
{
	int n = 0;

	if (!out || cap <= 0 || nrt_bad_fork())
		return 0;
	pthread_mutex_lock(&trace.lock);
	while (n < cap && trace.read < trace.written) {
		const nrt_trace_event_t *e = &trace.rec[trace.read++ % NRT_TRACE_CAP];

		if (e->kind != NRT_TRACE_PART) /* the queue's launches only: parts lie inside them */
			out[n++] = (nrt_trace_rec_t){ e->name, e->dev, e->queue, e->start_ns, e->end_ns };
	}
	pthread_mutex_unlock(&trace.lock);
	return n;
}

uint64_t nrt_trace_cursor(void)
{
	uint64_t w;

	pthread_mutex_lock(&trace.lock);
	w = trace.written;
	pthread_mutex_unlock(&trace.lock);
	return w;
}

int nrt_trace_read(uint64_t *cursor, nrt_trace_event_t *out, int cap, uint64_t *lost)
{
	int n = 0;

	if (!cursor || !out || cap <= 0 || nrt_bad_fork())
		return 0;
	pthread_mutex_lock(&trace.lock);
	if (trace.written - *cursor > NRT_TRACE_CAP) {
		if (lost)
			*lost += trace.written - NRT_TRACE_CAP - *cursor;
		*cursor = trace.written - NRT_TRACE_CAP;
	}
	while (n < cap && *cursor < trace.written)
		out[n++] = trace.rec[(*cursor)++ % NRT_TRACE_CAP];
	pthread_mutex_unlock(&trace.lock);
	return n;
}

/* ---- execution ------------------------------------------------------------------------------------- */
atomic_bool nrt_poison_seen;

/* Opens q's bad range [first, last] for a failed record (or fused run).  Called with err_lock held and
 * err_flag clear.  Without host memory for the range the error is still sticky, only not the poison. */
static void bad_range_open(struct nrt_queue *q, uint64_t first, uint64_t last)
{
	struct nrt_bad_range *r;

	if (q->nbad == q->cap_bad) {
		int cap = q->cap_bad ? q->cap_bad * 2 : 8;

		r = realloc(q->bad, (size_t)cap * sizeof *r);
		if (!r)
			return;
		q->bad = r;
		q->cap_bad = cap;
	}
	r = &q->bad[q->nbad];
	r->msg = strdup(q->err_msg);
	if (!r->msg)
		return;
	r->first = first;
	r->last = last;
	q->nbad++;
	atomic_store(&nrt_poison_seen, true);
}

/* The site of the record named name among records first..last of q (still in the ring: head has not
 * passed them), formatted as " (neuron:D stream S, launched at FILE:LINE in FN)"; "" without a site. */
static void site_text(struct nrt_queue *q, const char *name, uint64_t first, uint64_t last, char *buf, size_t cap)
{
	nrt_site_format_fn fmt = atomic_load(&site_format);
	uint64_t site = 0;
	char where[512];

	buf[0] = 0;
	for (uint64_t s = first; s <= last && s - first < NRT_RING_SLOTS && !site; s++)
		if (q->ring[s & NRT_RING_MASK].name == name)
			site = q->ring[s & NRT_RING_MASK].site;
	if (!fmt || !site)
		return;
	where[0] = 0;
	fmt(site, where, sizeof where);
	if (where[0])
		snprintf(buf, cap, " (neuron:%d stream %d, launched at %s)", q->dev, q->id, where);
}

static void set_sticky(struct nrt_queue *q, const char *name, int ret, uint64_t first, uint64_t last)
{
	const char *msg = nrt_kernel_fail_message();
	char where[640];

	pthread_mutex_lock(&q->err_lock);
	if (!atomic_load(&q->err_flag)) {
		site_text(q, name, first, last, where, sizeof where);
		if (*msg)
			snprintf(q->err_msg, sizeof q->err_msg, "%s: %s%s", name, msg, where);
		else
			snprintf(q->err_msg, sizeof q->err_msg, "%s: kernel failed (status %d)%s", name, ret, where);
		bad_range_open(q, first, last);
		atomic_store(&q->err_flag, 1);
	}
	pthread_mutex_unlock(&q->err_lock);
}

/* A record skipped behind a failure: its outputs join the open bad range.  False if the error has been
 * reported meanwhile (the record runs).  Deciding under err_lock keeps "skipped" and "in the range"
 * the same set against a concurrent nrt_queue_take_error. */
static bool skip_record(struct nrt_queue *q, uint64_t seq)
{
	bool skip;

	pthread_mutex_lock(&q->err_lock);
	skip = atomic_load(&q->err_flag);
	if (skip && q->nbad && q->bad[q->nbad - 1].last < seq)
		q->bad[q->nbad - 1].last = seq;
	pthread_mutex_unlock(&q->err_lock);
	return skip;
}

bool nrt_queue_record_failed(const struct nrt_writer *w, char *msg, size_t cap, bool *open,
			     struct nrt_writer *bad)
{
	struct nrt_queue *q = w->q;
	bool found = false;

	*open = false;
	if (!atomic_load_explicit(&nrt_poison_seen, memory_order_acquire))
		return false;
	pthread_mutex_lock(&q->err_lock);
	for (int i = q->nbad - 1; i >= 0 && !found; i--) {
		if (q->bad[i].first <= w->last && w->first <= q->bad[i].last) {
			snprintf(msg, cap, "%s", q->bad[i].msg);
			found = true;
			*open = i == q->nbad - 1 && atomic_load(&q->err_flag);
			bad->q = q;
			bad->first = q->bad[i].first;
			bad->last = q->bad[i].last;
		}
	}
	pthread_mutex_unlock(&q->err_lock);
	return found;
}

/* A kernel or copy record through q's target. */
static inline int target_run(struct nrt_queue *q, int kind, nrt_kernel_fn fn, void *args)
{
	const nrt_target_t *t = atomic_load_explicit(&q->target, memory_order_relaxed);

	if (kind == NRT_REC_COPY) {
		struct nrt_copy_args *c = args;

		return t->iface.copy(t->context, q->dev, q->id, c->dst, c->src, c->n);
	}
	return t->iface.launch(t->context, q->dev, q->id, fn, args);
}

/* Runs record number seq on the current thread; returns the kernel's status. */
static int run_record(struct nrt_queue *q, struct nrt_launch_rec *r, uint64_t seq)
{
	int64_t t0 = 0;
	bool traced;
	int ret;

	if (r->kind == NRT_REC_INTERNAL)
		return r->fn(r->args);
	if (atomic_load_explicit(&q->err_flag, memory_order_relaxed) && skip_record(q, seq))
		return 0; /* skipped: an earlier kernel failed and nobody synchronized yet */
	traced = atomic_load_explicit(&trace.on, memory_order_relaxed);
	if (traced)
		t0 = nrt_mono_ns(), tls_run_q = q, tls_run_corr = r->corr;
	nrt_kernel_fail_clear();
	ret = target_run(q, r->kind, r->fn, r->args);
	if (traced) {
		int64_t t1 = nrt_mono_ns();

		tls_run_q = NULL;
		trace_add(r->name, q, t0, t1, r->corr, trace_kind(r->kind, r->fn, r->args));
	}
	return ret;
}

/* Wakes the parked waiters once head has reached the least sequence number one of them needs (wake_at),
 * not after every record: a synchronize behind a thousand records wakes once, not a thousand times.
 * Waiters still short of their target lower wake_at again before they park (nrt_queue_wait_seq). */
static void wake_waiters(struct nrt_queue *q)
{
	if (atomic_load(&q->waiters) > 0 && atomic_load(&q->head) >= atomic_load(&q->wake_at)) {
		pthread_mutex_lock(&q->lock);
		atomic_store(&q->wake_at, UINT64_MAX);
		pthread_cond_broadcast(&q->done_cv);
		pthread_mutex_unlock(&q->lock);
	}
}

/* Spins for a while on tail != head; true if work arrived. */
static bool spin_for_work(struct nrt_queue *q, uint64_t head)
{
	int64_t deadline = nrt_mono_ns() + NRT_SPIN_NS;

	do {
		for (int i = 0; i < 64; i++) {
			if (atomic_load_explicit(&q->tail, memory_order_acquire) != head)
				return true;
			nrt_cpu_relax();
		}
	} while (nrt_mono_ns() < deadline);
	return false;
}

/* Records run under the queue's exec claim: normally the worker holds it, but a thread that waits for
 * the queue (synchronize, .item(), an event) claims it when it is free and runs the pending records
 * itself, so a synchronized small op costs no thread hand-off.  The claim orders the records: whoever
 * holds it runs the record at head, then publishes head + 1. */
static bool exec_claim(struct nrt_queue *q)
{
	int free_ = 0;

	return atomic_load_explicit(&q->exec, memory_order_relaxed) == 0 &&
	       atomic_compare_exchange_strong(&q->exec, &free_, 1);
}

static void exec_release(struct nrt_queue *q)
{
	atomic_store(&q->exec, 0); /* seq_cst: ordered before the worker_parked and tail loads */
	if (atomic_load(&q->worker_parked) && atomic_load(&q->tail) != atomic_load(&q->head)) {
		pthread_mutex_lock(&q->lock);
		pthread_cond_signal(&q->work_cv);
		pthread_mutex_unlock(&q->lock);
	}
}

/* Runs the record at head (the caller holds the claim and tail > head) and publishes it; returns the
 * new head.  [fuse] A run of fusable records starting at head (fuse.c) runs fused and is published at
 * once. */
static uint64_t exec_one(struct nrt_queue *q, uint64_t head)
{
	struct nrt_launch_rec *r = &q->ring[head & NRT_RING_MASK];
	const nrt_target_t *t = atomic_load_explicit(&q->target, memory_order_relaxed);
	int k = t->iface.host_fusion ? nrt_fuse_exec(q, head, atomic_load_explicit(&q->tail, memory_order_acquire))
				     : 0; /* [fuse] */
	int ret;

	if (k > 0) { /* [fuse] */
		atomic_store(&q->head, head + (uint64_t)k);
		return head + (uint64_t)k;
	}
	ret = run_record(q, r, head);
	if (ret && r->kind != NRT_REC_INTERNAL)
		set_sticky(q, r->name, ret, head, head);
	atomic_store(&q->head, head + 1);
	return head + 1;
}

/* ---- [fuse] hooks for fuse.c (queue-level loop fusion) -------------------------------------------- */
void nrt_queue_fail_record(struct nrt_queue *q, const char *name, int ret, uint64_t first, uint64_t last)
{
	set_sticky(q, name, ret, first, last);
}

bool nrt_queue_on_worker(void)
{
	return on_worker;
}

uint64_t nrt_queue_tail_now(struct nrt_queue *q)
{
	return atomic_load_explicit(&q->tail, memory_order_acquire);
}

bool nrt_queue_trace_on(void)
{
	return atomic_load_explicit(&trace.on, memory_order_relaxed);
}

void nrt_queue_trace_record(struct nrt_queue *q, uint64_t seq, int64_t t0, int64_t t1)
{
	const struct nrt_launch_rec *r = &q->ring[seq & NRT_RING_MASK];

	trace_add(r->name, q, t0, t1, r->corr, NRT_TRACE_KERNEL);
}
/* ---- [fuse] end ------------------------------------------------------------------------------------ */

/* Worker: park until there is work nobody else is running (or shutdown). */
static void worker_park(struct nrt_queue *q)
{
	pthread_mutex_lock(&q->lock);
	atomic_store(&q->worker_parked, 1);
	while (!atomic_load(&q->shutdown) &&
	       (atomic_load(&q->tail) == atomic_load(&q->head) || atomic_load(&q->exec)))
		pthread_cond_wait(&q->work_cv, &q->lock);
	atomic_store(&q->worker_parked, 0);
	pthread_mutex_unlock(&q->lock);
}

static void *queue_worker(void *arg)
{
	struct nrt_queue *q = arg;

	cur_queue = q;
	on_worker = true; /* [fuse] */
	for (;;) {
		uint64_t head = atomic_load(&q->head);

		if (atomic_load_explicit(&q->tail, memory_order_acquire) == head) {
			if (spin_for_work(q, head))
				continue;
			worker_park(q);
			if (atomic_load(&q->shutdown) && atomic_load(&q->tail) == atomic_load(&q->head))
				break; /* shutdown with nothing left to run */
			continue;
		}
		if (!exec_claim(q)) {
			worker_park(q); /* a waiting thread is running records: it signals when done */
			continue;
		}
		head = atomic_load(&q->head);
		if (atomic_load_explicit(&q->tail, memory_order_acquire) != head)
			exec_one(q, head);
		exec_release(q);
		wake_waiters(q);
	}
	return NULL;
}

/* The calling thread runs q's records up to seq if nobody else is running them. */
static void help_until(struct nrt_queue *q, uint64_t seq)
{
	struct nrt_queue *prev = cur_queue;
	uint64_t head;

	if (!q->ring || !exec_claim(q))
		return;
	cur_queue = q;
	head = atomic_load(&q->head);
	while (head < seq && head < atomic_load_explicit(&q->tail, memory_order_acquire))
		head = exec_one(q, head); /* [fuse] may run several records */
	cur_queue = prev;
	exec_release(q);
	wake_waiters(q);
}

/* Waits for head >= seq: runs the records itself if nobody is (help_until), else spins (if spin) for
 * NRT_SPIN_NS, then parks on done_cv.  A parking waiter lowers wake_at to seq and re-reads head after
 * that (both sequentially consistent, as the worker's head store and its wake_at load), so either the
 * worker sees the target or the waiter sees the head. */
static void queue_wait(struct nrt_queue *q, uint64_t seq, bool spin)
{
	int64_t deadline;

	if (nrt_queue_reached(q, seq))
		return;
	atomic_fetch_add(&q->draining, 1);
	help_until(q, seq);
	deadline = spin ? nrt_mono_ns() + NRT_SPIN_NS : 0;
	while (nrt_mono_ns() < deadline) {
		for (int i = 0; i < 64; i++) {
			if (nrt_queue_reached(q, seq))
				goto out;
			nrt_cpu_relax();
		}
	}
	pthread_mutex_lock(&q->lock);
	atomic_fetch_add(&q->waiters, 1);
	for (;;) {
		uint64_t w = atomic_load(&q->wake_at);

		while (seq < w && !atomic_compare_exchange_weak(&q->wake_at, &w, seq))
			;
		if (atomic_load(&q->head) >= seq)
			break;
		pthread_cond_wait(&q->done_cv, &q->lock);
	}
	atomic_fetch_sub(&q->waiters, 1);
	pthread_mutex_unlock(&q->lock);
out:
	atomic_fetch_sub(&q->draining, 1);
}

void nrt_queue_wait_seq(struct nrt_queue *q, uint64_t seq)
{
	queue_wait(q, seq, true);
}

int nrt_queue_take_error(struct nrt_queue *q)
{
	char msg[NRT_ERRMSG_MAX];

	if (!atomic_load(&q->err_flag))
		return NRT_OK;
	pthread_mutex_lock(&q->err_lock);
	if (!atomic_load(&q->err_flag)) {
		pthread_mutex_unlock(&q->err_lock);
		return NRT_OK;
	}
	memcpy(msg, q->err_msg, sizeof msg);
	atomic_store(&q->err_flag, 0);
	pthread_mutex_unlock(&q->err_lock);
	return nrt_set_error(NRT_ERR_KERNEL, "%s", msg);
}

/* NEURON_LAUNCH_BLOCKING: drain q, then run the record here.  Called with prod_lock held. */
static int run_inline(struct nrt_queue *q, nrt_kernel_fn fn, const void *args, size_t args_size,
		      const char *name, int kind)
{
	_Alignas(64) unsigned char buf[NRT_MAX_ARGS];
	int64_t t0 = 0;
	bool traced;
	int ret, rc;

	nrt_queue_wait_seq(q, nrt_queue_submitted(q));
	if (kind != NRT_REC_INTERNAL && (rc = nrt_queue_take_error(q)))
		return rc; /* an error from before blocking mode: report it instead of running */
	if (args_size)
		memcpy(buf, args, args_size);
	if (kind == NRT_REC_INTERNAL)
		return fn(buf);
	traced = atomic_load(&trace.on);
	if (traced)
		t0 = nrt_mono_ns(), tls_run_q = q, tls_run_corr = tls_corr;
	nrt_kernel_fail_clear();
	ret = target_run(q, kind, fn, buf);
	if (traced) {
		int64_t t1 = nrt_mono_ns();

		tls_run_q = NULL;
		trace_add(name, q, t0, t1, tls_corr, trace_kind(kind, fn, buf));
	}
	if (!ret)
		return NRT_OK;
	if (*nrt_kernel_fail_message())
		return nrt_set_error(NRT_ERR_KERNEL, "%s: %s", name, nrt_kernel_fail_message());
	return nrt_set_error(NRT_ERR_KERNEL, "%s: kernel failed (status %d)", name, ret);
}

/* A full ring: the slot is free once head > tail - NRT_RING_SLOTS.  The launcher parks at once until
 * an eighth of the ring has drained (the worker has ~900 records left to run), so that a host far
 * ahead of the device neither spins beside the workers nor wakes for every record. */
static void wait_for_slot(struct nrt_queue *q, uint64_t tail)
{
	queue_wait(q, tail - NRT_RING_SLOTS + NRT_RING_SLOTS / 8, false);
}

/* Starts q's worker thread if it is not running yet.  Deferred to the first launch so that a process
 * that only asked for the device count (or allocated) has no runtime thread, and its forked children
 * can still use the device. */
static int ensure_worker(struct nrt_queue *q)
{
	int err = 0;

	if (atomic_load_explicit(&q->has_worker, memory_order_acquire))
		return NRT_OK;
	pthread_mutex_lock(&q->lock);
	if (!atomic_load(&q->has_worker)) {
		nrt_note_thread_start();
		err = pthread_create(&q->worker, NULL, queue_worker, q);
		if (!err)
			atomic_store(&q->has_worker, true);
	}
	pthread_mutex_unlock(&q->lock);
	if (err)
		return nrt_set_error(NRT_ERR_HOST, "neuron:%d: cannot start a queue worker thread (%s)", q->dev,
				     strerror(err));
	return NRT_OK;
}

/* The calling thread queued record number seq on q: part of its op bracket, or the producer of the
 * outputs its last empty ops left (op.c). */
static inline void note_record(struct nrt_queue *q, uint64_t seq)
{
	if (nrt_op_active())
		nrt_op_note_record(q, seq);
	else if (nrt_op.norphan)
		nrt_op_adopt_orphans(q, seq);
}

int nrt_queue_push(struct nrt_queue *q, nrt_kernel_fn fn, const void *args, size_t args_size,
		   const char *name, int kind, uint64_t *seq, bool inline_ok)
{
	struct nrt_launch_rec *r;
	uint64_t tail, site = 0;
	int rc;

	if (!q || !q->live || !fn)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_launch(%s): %s", name ? name : "?",
				     !q || !q->live ? "invalid queue" : "null kernel");
	if (args_size > NRT_MAX_ARGS || (args_size && !args))
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_launch(%s): %zu bytes of arguments (max %d)",
				     name ? name : "?", args_size, NRT_MAX_ARGS);
	if (!name)
		name = "<unnamed kernel>";
	if (nrt_bad_fork())
		return nrt_fork_error();
	if ((rc = ensure_worker(q)))
		return rc;
	if (kind != NRT_REC_INTERNAL) { /* before prod_lock: the capture hook may take the GIL */
		nrt_site_capture_fn cap = atomic_load_explicit(&site_capture, memory_order_relaxed);

		site = cap ? cap() : 0;
	}

	pthread_mutex_lock(&q->prod_lock);
	if (inline_ok && cur_queue != q && !nrt_launch_blocking()) {
		tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
		if (atomic_load_explicit(&q->head, memory_order_acquire) == tail && exec_claim(q)) {
			/* idle queue, and the claim keeps the worker and helpers off: run the record here */
			struct nrt_queue *prev = cur_queue;

			r = &q->ring[tail & NRT_RING_MASK];
			if (args_size)
				memcpy(r->args, args, args_size);
			r->fn = fn;
			r->name = name;
			r->kind = kind;
			r->corr = tls_corr;
			r->site = site;
			atomic_store(&q->tail, tail + 1);
			pthread_mutex_unlock(&q->prod_lock); /* others may queue behind this record */
			if (kind != NRT_REC_INTERNAL)
				note_record(q, tail);
			cur_queue = q;
			exec_one(q, tail);
			cur_queue = prev;
			exec_release(q);
			wake_waiters(q);
			atomic_fetch_add_explicit(&inline_count, 1, memory_order_relaxed);
			if (seq)
				*seq = tail + 1;
			return NRT_OK;
		}
	}
	if (nrt_launch_blocking() && cur_queue != q) {
		rc = run_inline(q, fn, args, args_size, name, kind);
		if (seq)
			*seq = nrt_queue_submitted(q);
		pthread_mutex_unlock(&q->prod_lock);
		return rc;
	}
	tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
	if (tail - atomic_load_explicit(&q->head, memory_order_acquire) >= NRT_RING_SLOTS)
		wait_for_slot(q, tail);
	r = &q->ring[tail & NRT_RING_MASK];
	if (args_size)
		memcpy(r->args, args, args_size);
	r->fn = fn;
	r->name = name;
	r->kind = kind;
	r->corr = tls_corr;
	r->site = site;
	atomic_store(&q->tail, tail + 1); /* seq_cst: ordered before the worker_parked load */
	if (seq)
		*seq = tail + 1;
	pthread_mutex_unlock(&q->prod_lock);
	if (kind != NRT_REC_INTERNAL)
		note_record(q, tail);
	if (atomic_load(&q->worker_parked)) {
		pthread_mutex_lock(&q->lock);
		pthread_cond_signal(&q->work_cv);
		pthread_mutex_unlock(&q->lock);
	}
	return NRT_OK;
}

/* ---- public queue API --------------------------------------------------------------------------- */
int nrt_queue_start(struct nrt_queue *q, int dev, int id, int priority)
{
	q->ring = aligned_alloc(64, sizeof(struct nrt_launch_rec) * NRT_RING_SLOTS);
	if (!q->ring)
		return nrt_set_error(NRT_ERR_HOST, "neuron:%d: out of host memory for a queue ring", dev);
	q->dev = dev;
	q->id = id;
	q->priority = priority;
	atomic_store(&q->shutdown, false);
	pthread_mutex_init(&q->prod_lock, NULL);
	pthread_mutex_init(&q->lock, NULL);
	pthread_mutex_init(&q->err_lock, NULL);
	pthread_cond_init(&q->work_cv, NULL);
	pthread_cond_init(&q->done_cv, NULL);
	atomic_store(&q->wake_at, UINT64_MAX);
	atomic_store(&q->target, nrt_devices[dev].target ? nrt_devices[dev].target : nrt_target_host());
	q->live = true; /* the worker starts with the first launch (ensure_worker) */
	return NRT_OK;
}


nrt_queue_t *nrt_queue_default(int dev)
{
	if (nrt_init() || !nrt_device_valid(dev))
		return NULL;
	return nrt_devices[dev].default_queue;
}

int nrt_queue_create(int dev, int priority, nrt_queue_t **out)
{
	struct nrt_device *d;
	struct nrt_queue *q;
	int rc;

	if (nrt_bad_fork())
		return nrt_fork_error();

	if (!out)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_create: null output");
	*out = NULL;
	if ((rc = nrt_init()))
		return rc;
	if (!nrt_device_valid(dev))
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_create: no device neuron:%d", dev);
	d = &nrt_devices[dev];
	q = calloc(1, sizeof *q);
	if (!q)
		return nrt_set_error(NRT_ERR_HOST, "nrt_queue_create: out of host memory");
	pthread_mutex_lock(&d->queues_lock);
	rc = nrt_queue_start(q, dev, d->next_queue_id, priority);
	if (rc) {
		pthread_mutex_unlock(&d->queues_lock);
		free(q);
		return rc;
	}
	d->next_queue_id++;
	q->next = d->queues->next; /* keep the default queue first */
	__atomic_store_n(&d->queues->next, q, __ATOMIC_RELEASE); /* published initialised: see next_queue */
	pthread_mutex_unlock(&d->queues_lock);
	*out = q;
	return NRT_OK;
}

/* The struct stays on the device list (not live) because events, wait records and pending frees may
 * still point at it; its head counter is final, so those references see their work as complete. */
int nrt_queue_destroy(nrt_queue_t *q)
{
	struct nrt_device *d;
	int rc;

	if (nrt_bad_fork())
		return nrt_fork_error();

	if (!q || !q->live)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_destroy: invalid queue");
	d = &nrt_devices[q->dev];
	if (q == d->default_queue)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_destroy: the default queue of neuron:%d "
				     "cannot be destroyed", q->dev);
	if (q == cur_queue)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_destroy: called from the queue's own kernel");
	rc = nrt_queue_synchronize(q);
	pthread_mutex_lock(&d->queues_lock);
	q->live = false;
	pthread_mutex_unlock(&d->queues_lock);
	pthread_mutex_lock(&q->prod_lock); /* no launch is mid-way */
	pthread_mutex_lock(&q->lock);
	atomic_store(&q->shutdown, true);
	pthread_cond_signal(&q->work_cv);
	pthread_mutex_unlock(&q->lock);
	pthread_mutex_unlock(&q->prod_lock);
	if (atomic_load(&q->has_worker))
		pthread_join(q->worker, NULL);
	atomic_store(&q->has_worker, false);
	free(q->ring);
	q->ring = NULL;
	nrt_alloc_process_pending(q->dev);
	return rc;
}

int nrt_queue_device(const nrt_queue_t *q)
{
	return q ? q->dev : NRT_ERR_INVALID;
}

int nrt_queue_id(const nrt_queue_t *q)
{
	return q ? q->id : NRT_ERR_INVALID;
}

int nrt_queue_priority(const nrt_queue_t *q)
{
	return q ? q->priority : 0;
}

nrt_queue_t *nrt_queue_by_id(int dev, int id)
{
	struct nrt_device *d;
	struct nrt_queue *q;

	if (nrt_bad_fork()) {
		nrt_fork_error();
		return NULL;
	}
	if (nrt_init() || !nrt_device_valid(dev))
		return NULL;
	d = &nrt_devices[dev];
	pthread_mutex_lock(&d->queues_lock);
	for (q = d->queues; q && !(q->id == id && q->live); q = q->next)
		;
	pthread_mutex_unlock(&d->queues_lock);
	return q;
}

int nrt_queue_launch(nrt_queue_t *q, nrt_kernel_fn fn, const void *args, size_t args_size, const char *name)
{
	return nrt_queue_push(q, fn, args, args_size, name, NRT_REC_KERNEL, NULL, false);
}

int nrt_queue_launch_cost(nrt_queue_t *q, nrt_kernel_fn fn, const void *args, size_t args_size, const char *name,
			  size_t cost_bytes)
{
	size_t limit = atomic_load_explicit(&inline_bytes, memory_order_relaxed);
	bool small = limit && cost_bytes <= limit;

	return nrt_queue_push(q, fn, args, args_size, name, NRT_REC_KERNEL, NULL, small);
}

void nrt_set_inline_bytes(size_t bytes)
{
	atomic_store(&inline_bytes, bytes);
}

size_t nrt_inline_bytes(void)
{
	return atomic_load(&inline_bytes);
}

uint64_t nrt_inline_launches(void)
{
	return atomic_load(&inline_count);
}

/* The target's part of a synchronize, once q's records are complete. */
static int target_sync(struct nrt_queue *q)
{
	const nrt_target_t *t = atomic_load_explicit(&q->target, memory_order_relaxed);

	return t->iface.synchronize ? t->iface.synchronize(t->context, q->dev, q->id) : NRT_OK;
}

int nrt_queue_synchronize(nrt_queue_t *q)
{
	int rc;

	if (nrt_bad_fork())
		return nrt_fork_error();

	if (!q || !q->live)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_synchronize: invalid queue");
	if (q == cur_queue)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_synchronize: called from the queue's own kernel");
	nrt_queue_wait_seq(q, nrt_queue_submitted(q));
	rc = nrt_queue_take_error(q);
	if (!rc)
		rc = target_sync(q);
	nrt_alloc_process_pending(q->dev);
	return rc;
}

int nrt_queue_query(nrt_queue_t *q)
{

	if (nrt_bad_fork())
		return nrt_fork_error();
	if (!q || !q->live)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_query: invalid queue");
	return nrt_queue_reached(q, nrt_queue_submitted(q)) ? NRT_OK : NRT_ERR_NOT_READY;
}

/* The device's queue list without its lock (a synchronize of an idle device took four lock/unlock
 * pairs walking it): queue structs are never freed, the default queue heads the list from the device's
 * creation, and nrt_queue_create links a new queue in with a release store once it is initialised. */
static struct nrt_queue *next_queue(struct nrt_device *d, struct nrt_queue *q)
{
	return q ? __atomic_load_n(&q->next, __ATOMIC_ACQUIRE) : d->queues;
}

/* Synchronizes every queue of dev; returns the first sticky error found (the others stay sticky).
 * The list lock is not held while waiting (a kernel may create queues); queue structs are never freed
 * and new ones are linked in after the default queue, so the walk stays valid. */
int nrt_device_synchronize(int dev)
{
	struct nrt_device *d;
	struct nrt_queue *q;
	int rc = NRT_OK;

	if (nrt_bad_fork())
		return nrt_fork_error();

	if (!nrt_device_valid(dev) && !(dev >= 0 && dev < NRT_MAX_DEVICES && nrt_devices[dev].created))
		return nrt_set_error(NRT_ERR_INVALID, "nrt_device_synchronize: no device neuron:%d", dev);
	d = &nrt_devices[dev];
	for (q = next_queue(d, NULL); q; q = next_queue(d, q))
		if (q->live && q != cur_queue)
			nrt_queue_wait_seq(q, nrt_queue_submitted(q));
	for (q = next_queue(d, NULL); q && !rc; q = next_queue(d, q))
		rc = nrt_queue_take_error(q);
	for (q = next_queue(d, NULL); q && !rc; q = next_queue(d, q))
		if (q->live && q != cur_queue)
			rc = target_sync(q);
	nrt_alloc_process_pending(dev);
	return rc;
}

struct wait_args {
	struct nrt_queue *q;
	uint64_t seq;
};

static int wait_kernel(void *p)
{
	struct wait_args *a = p;

	nrt_queue_wait_seq(a->q, a->seq);
	return 0;
}

/* Used by event.c: later work on q waits until src reaches seq. */
int nrt_queue_wait_for(struct nrt_queue *q, struct nrt_queue *src, uint64_t seq)
{
	struct wait_args a = { src, seq };

	if (!q || !q->live)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_queue_wait_event: invalid queue");
	if (src == q || nrt_queue_reached(src, seq))
		return NRT_OK; /* in order already, or done */
	return nrt_queue_push(q, wait_kernel, &a, sizeof a, "nrt::wait_event", NRT_REC_INTERNAL, NULL, false);
}

/* ---- memcpy ------------------------------------------------------------------------------------ */
/* Never called: copy records run through the target's copy (run_record); fn only names the record. */
static int memcpy_record(void *p)
{
	(void)p;
	return 0;
}

int nrt_memcpy_async(nrt_queue_t *q, void *dst, const void *src, size_t nbytes)
{
	struct nrt_copy_args a = { dst, src, nbytes };

	if (!nbytes)
		return NRT_OK;
	if (!dst || !src)
		return nrt_set_error(NRT_ERR_INVALID, "nrt_memcpy_async: null pointer for %zu bytes", nbytes);
	return nrt_queue_push(q, memcpy_record, &a, sizeof a, "nrt::memcpy", NRT_REC_COPY, NULL, false);
}

/* With every device's queue list held (no queue comes or goes): all launch locks, then all parking and
 * error locks (never nested the other way), then the trace's. */
static void fork_lock_all(pthread_mutex_t *(*which)(struct nrt_queue *), bool lock)
{
	for (int i = 0; i < NRT_MAX_DEVICES; i++) {
		if (!nrt_devices[i].created)
			continue;
		for (struct nrt_queue *q = nrt_devices[i].queues; q; q = q->next) {
			if (lock)
				pthread_mutex_lock(which(q));
			else
				pthread_mutex_unlock(which(q));
		}
	}
}

static pthread_mutex_t *prod_lock_of(struct nrt_queue *q)
{
	return &q->prod_lock;
}

static pthread_mutex_t *park_lock_of(struct nrt_queue *q)
{
	return &q->lock;
}

static pthread_mutex_t *err_lock_of(struct nrt_queue *q)
{
	return &q->err_lock;
}

/* Phase 0: the launch locks (a launcher's kernel may allocate); phase 1, after the allocators (which
 * look up bad ranges under their lock): the parking, error and trace locks. */
void nrt_queue_fork_locks(int phase, bool lock)
{
	if (phase == 0) {
		fork_lock_all(prod_lock_of, lock);
	} else if (lock) {
		fork_lock_all(park_lock_of, true);
		fork_lock_all(err_lock_of, true);
		pthread_mutex_lock(&trace.lock);
	} else {
		pthread_mutex_unlock(&trace.lock);
		fork_lock_all(err_lock_of, false);
		fork_lock_all(park_lock_of, false);
	}
}
